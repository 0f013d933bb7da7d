//! Owns the folding of stored reports into the fleet's summaries, apart from any database:
//! a batch of queued records, with the units and summaries they touch as stored, becomes the
//! summaries and units to write back. Each store runs it inside one transaction, under a
//! lock only one folder holds at a time (any collector on the database may fold), so a
//! report is in the summaries once, and exactly when its queue entry is gone.
//!
//! Summaries are kept per board and day (span 1) and per board and week (span 7, Monday
//! first): a query over more than 62 days reads weeks, the trend's bucket, so its cost grows
//! with the weeks and groups selected, not with the reports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use usbperf_fleet::partial::{BoardDay, Partial, UnitBook};
use usbperf_fleet::stats::bucket_start;
use usbperf_fleet::stored::{self, StoredError};

/// Queue entries folded per transaction while reports arrive one by one: a few MB of
/// summaries rewritten, well under a second, so ingest waits little for the store's writer.
pub const FOLD_BATCH: usize = 512;
/// The most folded per transaction: a rebuild queues every report in order of start, and
/// a batch rewrites the one or two days (and week) it covers, so larger batches rewrite
/// each summary fewer times.
pub const FOLD_BATCH_MAX: usize = 16_384;

/// How many to fold per transaction with `queued` waiting: [`FOLD_BATCH`] for the trickle of
/// a line's uploads, up to [`FOLD_BATCH_MAX`] for a rebuild's backlog.
pub fn fold_batch_size(queued: u64) -> usize {
    (queued / 16).clamp(FOLD_BATCH as u64, FOLD_BATCH_MAX as u64) as usize
}

/// What the summaries are built by: a stored summary, a unit's entry, the records they are
/// folded from and the rules they follow. A store whose summaries were built by another
/// generation rebuilds them from its records (`fleet-rebuild`, or the first fold).
pub fn generation() -> String {
    format!(
        "summaries {} records {} rules 1",
        stored::FORMAT,
        crate::ingest::FLEET_RECORD_VERSION
    )
}

/// The row a summary is kept in: (span in days, first day, board).
pub type Key = (i32, i32, String);

/// One batch, folded: the rows to write back.
#[derive(Debug, Default)]
pub struct Folded {
    /// (key, whether it holds any figure, the summary's bytes).
    pub summaries: Vec<(Key, bool, Vec<u8>)>,
    /// (unit, its entry's bytes, how many keys its reports were signed with).
    pub units: Vec<(String, Vec<u8>, i32)>,
    /// Records that did not decode (left out of the summaries; the exact fleet lists them).
    pub undecodable: usize,
}

/// Why a batch could not be folded.
#[derive(Debug, thiserror::Error)]
pub enum FoldError<E> {
    #[error(transparent)]
    Store(E),
    #[error(
        "a stored fleet summary does not read ({0}): rebuild the summaries with \
         `usbperf-collect fleet-rebuild --db URL`"
    )]
    Damaged(StoredError),
}

/// Folds `records` ((file, encoded record), in queue order) into the stored summaries.
/// `read_units` gives the stored entries of the units named; `read_summaries` the stored
/// summaries of the keys named.
pub fn fold_batch<E>(
    records: &[(String, Vec<u8>)],
    read_units: impl FnOnce(&[String]) -> Result<Vec<(String, Vec<u8>)>, E>,
    read_summaries: impl FnOnce(&[Key]) -> Result<Vec<(Key, Vec<u8>)>, E>,
) -> Result<Folded, FoldError<E>> {
    let mut decoded = Vec::with_capacity(records.len());
    let mut undecodable = 0;
    for (i, (file, bytes)) in records.iter().enumerate() {
        match crate::record::decode(i as u32, bytes) {
            Ok(r) => decoded.push((file, r)),
            Err(_) => undecodable += 1,
        }
    }
    let names: Vec<String> = decoded
        .iter()
        .map(|(_, r)| r.unit.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut book = UnitBook::default();
    for (unit, bytes) in read_units(&names).map_err(FoldError::Store)? {
        book.put(
            unit,
            stored::decode_unit(&bytes).map_err(FoldError::Damaged)?,
        );
    }
    let curves = usbperf_fleet::aggregate::FleetOptions::default().curves_per_model;
    let mut partial = Partial::new(curves);
    for (file, r) in decoded {
        partial.add(r, PathBuf::from(file), &mut book);
    }
    let mut keys: BTreeSet<Key> = BTreeSet::new();
    for (day, board) in partial.days.keys() {
        keys.insert((1, *day, board.clone()));
        keys.insert((7, bucket_start(*day, 7), board.clone()));
    }
    let keys: Vec<Key> = keys.into_iter().collect();
    let mut rows: BTreeMap<Key, BoardDay> = BTreeMap::new();
    for (key, bytes) in read_summaries(&keys).map_err(FoldError::Store)? {
        rows.insert(key, stored::decode(&bytes).map_err(FoldError::Damaged)?);
    }
    for ((day, board), bd) in &partial.days {
        for key in [
            (1, *day, board.clone()),
            (7, bucket_start(*day, 7), board.clone()),
        ] {
            rows.entry(key).or_default().merge(bd, curves);
        }
    }
    Ok(Folded {
        summaries: rows
            .into_iter()
            .map(|(k, bd)| {
                let figures = !bd.slots.is_empty();
                (k, figures, stored::encode(&bd))
            })
            .collect(),
        units: book
            .entries()
            .filter(|(u, _)| names.binary_search(u).is_ok())
            .map(|(u, s)| (u.clone(), stored::encode_unit(s), s.keys.len() as i32))
            .collect(),
        undecodable,
    })
}
