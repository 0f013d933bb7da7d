//! Owns the folding of stored reports into the fleet's summaries, apart from any database:
//! a batch of queued records, with the units and summaries they touch as stored, becomes the
//! summaries and units to write back. Each store runs it inside one transaction, under a
//! lock only one folder holds at a time (any collector on the database may fold), so a
//! report is in the summaries once, and exactly when its queue entry is gone.
//!
//! Summaries are kept per board over four spans that nest: the day (span 1), the week
//! (7, from Monday), 13 weeks (91) and 52 weeks (364). A query reads the fewest that cover
//! the days it selects (the days up to the first whole week, then weeks, 13-week spans and
//! years), so its cost grows with the years and groups selected, not with the reports. Its
//! trend, a point per day or week, reads each day's or week's trend row: the same figures
//! at 1 %, a few KB (span -1 and -7 in the same table), instead of the summary's few MB.
//!
//! **Generations.** Summaries are built by one build's format and rules ([`generation`]), in
//! a generation of their own (`fleet_generations`; the queue, units and summaries carry its
//! number). A build that finds no generation of its own starts one beside the others and
//! queues every stored record for it, while the build before it still answers from its
//! own; `fleet-rebuild` starts another of the same build the same way. Ingest queues each
//! report for every generation kept (but one a newer ready generation of its build
//! replaced), so one being built misses nothing stored meanwhile: a new generation is made
//! under the exclusive side of a lock whose shared side ingest takes before it queues
//! (PostgreSQL; SQLite has one writer), and its backlog is queued after that, skipping what
//! ingest already queued. A generation answers once its queue has been
//! empty once (`ready`); a build's queries read its newest ready generation. A generation
//! no collector has folded for [`RETIRE_AFTER_S`] (one superseded by a newer ready one of
//! its build, or one whose build no longer runs) is dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use usbperf_fleet::partial::{BoardDay, Partial, Trend, UnitBook};
use usbperf_fleet::stats::bucket_start;
use usbperf_fleet::stored::{self, StoredError};

/// Queue entries folded per transaction while reports arrive one by one: a few MB of
/// summaries rewritten, well under a second, so ingest waits little for the store's writer.
pub const FOLD_BATCH: usize = 512;
/// The most folded per transaction: a rebuild queues every report in order of start, and
/// a batch rewrites the one or two days (and week) it covers, so larger batches rewrite
/// each summary fewer times.
pub const FOLD_BATCH_MAX: usize = 16_384;

/// A generation no collector has folded for this long is dropped: its build no longer runs,
/// or a newer generation of it answers. An hour: far longer than a query reads, and than a
/// restart leaves a generation unfolded.
pub const RETIRE_AFTER_S: i64 = 3600;

/// The most days a batch's reports may start on: each day's summaries (and its week's, 13
/// weeks' and year's) are held in memory while the batch is folded, a few MB each when
/// full, so a rebuild of a fleet spread thinly over years folds fewer reports a batch
/// rather than holding hundreds of days.
pub const BATCH_DAYS: usize = 32;

/// How many of a batch's first reports, by their starts (ns since 1970, in queue order),
/// start on at most [`BATCH_DAYS`] distinct days (at least one report).
pub fn within_batch_days(started_ns: impl Iterator<Item = i64>) -> usize {
    let mut days = BTreeSet::new();
    let mut n = 0;
    for ns in started_ns {
        days.insert(ns.div_euclid(86_400_000_000_000));
        if days.len() > BATCH_DAYS {
            break;
        }
        n += 1;
    }
    n.max(1)
}

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

/// The row a summary is kept in: (span in days, first day, board); a trend row's span is the
/// negative of its summary's.
pub type Key = (i32, i32, String);

/// The spans a report is summarised in, each a whole number of the one before.
pub const SPANS: [i32; 4] = [1, 7, 91, 364];

/// The spans whose trend rows are kept: the trend's buckets.
pub const TREND_SPANS: [i32; 2] = [1, 7];

/// The span a trend row of summaries of `span` days is stored under.
pub fn trend_span(span: i32) -> i32 {
    -span
}

/// One batch, folded: the rows to write back.
#[derive(Debug, Default)]
pub struct Folded {
    /// (key, whether it holds any figure, the summary's or trend row's bytes).
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
        for span in SPANS {
            keys.insert((span, bucket_start(*day, span), board.clone()));
        }
    }
    let keys: Vec<Key> = keys.into_iter().collect();
    let mut rows: BTreeMap<Key, BoardDay> = BTreeMap::new();
    for (key, bytes) in read_summaries(&keys).map_err(FoldError::Store)? {
        rows.insert(key, stored::decode(&bytes).map_err(FoldError::Damaged)?);
    }
    for ((day, board), bd) in &partial.days {
        for span in SPANS {
            let key = (span, bucket_start(*day, span), board.clone());
            rows.entry(key).or_default().merge(bd, curves);
        }
    }
    let mut summaries = Vec::with_capacity(rows.len() * 2);
    for ((span, start, board), bd) in rows {
        let figures = !bd.slots.is_empty();
        if TREND_SPANS.contains(&span) {
            let trend = stored::encode_trend(&Trend::of(&bd));
            summaries.push(((trend_span(span), start, board.clone()), figures, trend));
        }
        summaries.push(((span, start, board), figures, stored::encode(&bd)));
    }
    Ok(Folded {
        summaries,
        units: book
            .entries()
            .filter(|(u, _)| names.binary_search(u).is_ok())
            .map(|(u, s)| (u.clone(), stored::encode_unit(s), s.keys.len() as i32))
            .collect(),
        undecodable,
    })
}

#[cfg(test)]
mod tests {
    use super::{within_batch_days, BATCH_DAYS};

    const DAY: i64 = 86_400_000_000_000;

    #[test]
    fn a_batch_keeps_the_reports_of_its_first_days() {
        let spread: Vec<i64> = (0..100).map(|d| d * DAY + 5).collect();
        let dense: Vec<i64> = (0..100).map(|i| i * 1_000).collect();
        for (starts, keep) in [
            (Vec::new(), 1),
            (vec![3 * DAY], 1),
            (dense.clone(), 100),
            (spread.clone(), BATCH_DAYS),
            // Two a day: every report of the first days, none of the next.
            (
                (0..100).map(|i| (i / 2) * DAY).collect::<Vec<_>>(),
                2 * BATCH_DAYS,
            ),
            // Before 1970 too (a unit whose clock was never set).
            (spread.iter().map(|t| -t).collect(), BATCH_DAYS),
        ] {
            assert_eq!(
                within_batch_days(starts.iter().copied()),
                keep,
                "{starts:?}"
            );
        }
    }
}
