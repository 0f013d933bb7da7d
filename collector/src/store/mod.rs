//! Owns where reports are kept: a `Store` trait with one file per database (`sqlite`,
//! `postgres`), both with the same tables. Each insert is one transaction that adds the raw
//! document and its columns, or nothing when the `report_id` is already there; it returns
//! only after the commit is durable, and only then does the server acknowledge.
//!
//! Tables (both databases): `reports` (report_id primary key, unit, board, hostname,
//! started_at, finished_at, status, pass, exit_code, schema_version, format, raw,
//! body_sha256, received_at), `devices` (report_id, idx, name, class, port, model, serial, pass) and
//! `metrics` (report_id, device_idx, cell_idx, workload, status, mib_per_s, iops, p99_ns),
//! and `fleet_records` (report_id, file, board, started_ns, kind, body, record, version): each
//! report as the fleet reads it, extracted at ingest (see `ingest::FleetColumns`), indexed
//! by time and by board and time. Databases from before that table get it when opened and
//! their reports' rows on the first fleet query ([`Store::fleet_backfill`]); those from before
//! the `record` column (records as JSON, version 1) get the column when opened and their rows
//! again the same way.

pub mod postgres;
pub mod sqlite;

use crate::ingest::Record;

/// What an insert did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// Committed now.
    New,
    /// The report_id was already stored with these very bytes; nothing was written.
    Duplicate,
    /// The report_id was already stored with other bytes (SHA-256 of the stored body):
    /// nothing was written, and the sender must not take this for an acknowledgement.
    Conflict { stored_sha256: String },
    /// The unit named by the report has another key enrolled (or the report is unsigned and
    /// the unit has one): nothing was written.
    Forged { enrolled: String },
}

pub use crate::ingest::NO_UNIT;

/// What a re-sent report is, given what is stored under its id.
pub fn compare(stored_sha256: Option<String>, stored_raw: &[u8], sha256: &str) -> Stored {
    // Rows from before the column have no hash: their raw bytes tell.
    let stored = stored_sha256.unwrap_or_else(|| crate::ingest::sha256_hex(stored_raw));
    if stored == sha256 {
        Stored::Duplicate
    } else {
        Stored::Conflict {
            stored_sha256: stored,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "--db {0:?}: use sqlite:PATH (one file, e.g. sqlite:/var/lib/usbperf-collect/reports.db) \
         or postgres://USER@HOST/DB"
    )]
    Url(String),
    #[error(
        "--page-db {0:?}: name a read replica of the PostgreSQL database --db names \
         (postgres://USER@REPLICA/DB); SQLite has none"
    )]
    ReplicaUrl(String),
    #[error("SQLite {path}: {err} (is the directory writable by the collector's user?)")]
    Sqlite { path: String, err: rusqlite::Error },
    #[error("PostgreSQL: {0} (is the server up, and the URL's user allowed to create tables?)")]
    Postgres(#[from] ::postgres::Error),
    /// A stored summary that does not read: the summaries must be built again.
    #[error("{0}")]
    Summary(String),
    /// This build's summaries are being built beside those of another build, and too much
    /// is left to fold in one query.
    #[error(
        "the fleet's summaries of this collector's version are still being built: \
         {folded} of {total} reports folded. Until they are, the collectors of the version \
         before (if any still run) answer the fleet, and so does `fleet --exact`; \
         `usbperf-collect fleet-rebuild --db URL --resume` builds them with progress"
    )]
    Building { folded: u64, total: u64 },
}

impl From<crate::summaries::FoldError<StoreError>> for StoreError {
    fn from(e: crate::summaries::FoldError<StoreError>) -> StoreError {
        match e {
            crate::summaries::FoldError::Store(e) => e,
            e @ crate::summaries::FoldError::Damaged(_) => StoreError::Summary(e.to_string()),
        }
    }
}

/// Which stored summaries a fleet query reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SummaryFilter {
    /// The generation ([`Generations::serving`]).
    pub gen: i64,
    /// A span of `crate::summaries::SPANS`, or a trend row's (`trend_span`).
    pub span: i32,
    /// Summaries starting on or after this day (days since 1970-01-01, UTC).
    pub from_day: Option<i32>,
    /// Summaries starting before this day.
    pub until_day: Option<i32>,
    pub board: Option<String>,
}

/// This build's generations of the fleet's summaries (see `crate::summaries`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Generations {
    /// The newest whose backlog is folded: what queries read.
    pub serving: Option<i64>,
    /// A newer one being built.
    pub building: Option<i64>,
}

/// Which of this build's generations a fold folds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoldScope {
    /// What a query needs before it reads: the serving generation's queue (the last
    /// seconds' reports), or, while none serves yet, a building one whose queue is at most
    /// `crate::summaries::FOLD_BATCH_MAX` (a small database's first fold).
    Query,
    /// Every kept generation's queue, in batches: the background folder and `fleet-rebuild`.
    /// Then drops the generations no collector has folded for
    /// `crate::summaries::RETIRE_AFTER_S`.
    All,
}

/// A generation as a build lists its own.
pub(crate) struct GenRow {
    pub gen: i64,
    pub backlog: bool,
    pub ready: bool,
}

/// A build's serving generation (its newest ready one) and the one it builds (its newest,
/// when newer), from its generations.
pub(crate) fn serving_and_building(gens: &[GenRow]) -> (Option<i64>, Option<i64>) {
    let serving = gens.iter().filter(|g| g.ready).map(|g| g.gen).max();
    let building = gens
        .iter()
        .map(|g| g.gen)
        .max()
        .filter(|b| serving.map_or(true, |s| *b > s));
    (serving, building)
}

/// Seconds since 1970 by this collector's clock.
pub(crate) fn now_s() -> i64 {
    chrono::Utc::now().timestamp()
}

/// A database's steps for its generations of summaries (see `crate::summaries`); the fold,
/// the rebuild and a query's view of them are these steps in one order for every database
/// ([`fold`], [`rebuild`], [`queued`], [`generations`]).
pub(crate) trait Generational {
    /// This build's generations (`name`), oldest first.
    fn my_generations(&self, name: &str) -> Result<Vec<GenRow>, StoreError>;
    /// Makes a generation of `name` beside the others (ingest queues for it from its
    /// commit on), unless `first` and one of `name` exists already (collectors, or a query
    /// and a collector's folder, that find none at once make one); its number, if made.
    fn new_generation(&self, name: &str, first: bool) -> Result<Option<i64>, StoreError>;
    /// Queues for `gen` every record stored before it was made (what ingest has not
    /// queued for it), once, before anything of it is folded; how many it holds queued.
    fn queue_backlog(&self, gen: i64) -> Result<u64, StoreError>;
    /// How many reports `gen` has queued.
    fn queued_in(&self, gen: i64) -> Result<u64, StoreError>;
    /// Whether `gen` has at most `n` reports queued, told without counting a long queue.
    fn queued_at_most(&self, gen: i64, n: usize) -> Result<bool, StoreError>;
    /// Folds `gen`'s queue until it is empty, then marks it ready; how many it folded.
    /// `progress(before + folded, queued)` after each batch.
    fn fold_generation(
        &self,
        gen: i64,
        queued: u64,
        before: u64,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<u64, StoreError>;
    /// Drops the generations no collector has folded for `RETIRE_AFTER_S`, other than this
    /// build's serving one and any newer (which a restart may have left unfolded); while
    /// none of this build's serves, none of this build's.
    fn retire(&self, name: &str) -> Result<(), StoreError>;
}

/// [`Store::fleet_fold`] on any database.
pub(crate) fn fold(
    g: &impl Generational,
    scope: FoldScope,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<u64, StoreError> {
    let name = crate::summaries::generation();
    let mut gens = g.my_generations(&name)?;
    if gens.is_empty() {
        g.new_generation(&name, true)?;
        gens = g.my_generations(&name)?;
    }
    for row in gens.iter().filter(|r| !r.backlog) {
        g.queue_backlog(row.gen)?;
    }
    let (serving, building) = serving_and_building(&gens);
    let max = crate::summaries::FOLD_BATCH_MAX;
    let fold: Vec<i64> = match (scope, serving, building) {
        (FoldScope::Query, Some(s), _) => vec![s],
        // A first fold small enough for a query: a new or small database.
        (FoldScope::Query, None, Some(b)) if g.queued_at_most(b, max)? => vec![b],
        (FoldScope::Query, ..) => Vec::new(),
        (FoldScope::All, s, b) => s.into_iter().chain(b).collect(),
    };
    // What these hold queued (a query's: the serving queue, not a rebuild's backlog).
    let mut queued = 0;
    for gen in &fold {
        queued += g.queued_in(*gen)?;
    }
    let mut folded = 0u64;
    for gen in fold {
        folded += g.fold_generation(gen, queued, folded, progress)?;
    }
    if scope == FoldScope::All {
        g.retire(&name)?;
    }
    Ok(folded)
}

/// [`Store::fleet_rebuild`] on any database (after its back-fill).
pub(crate) fn rebuild(g: &impl Generational) -> Result<u64, StoreError> {
    let gen = g.new_generation(&crate::summaries::generation(), false)?;
    g.queue_backlog(gen.expect("made unconditionally"))
}

/// [`Store::fleet_generations`] on any database.
pub(crate) fn generations(g: &impl Generational) -> Result<Generations, StoreError> {
    let (serving, building) =
        serving_and_building(&g.my_generations(&crate::summaries::generation())?);
    Ok(Generations { serving, building })
}

/// [`Store::fleet_queued`] on any database: the serving and building generations' queues.
pub(crate) fn queued(g: &impl Generational) -> Result<u64, StoreError> {
    let gens = generations(g)?;
    let mut n = 0;
    for gen in gens.serving.into_iter().chain(gens.building) {
        n += g.queued_in(gen)?;
    }
    Ok(n)
}

/// Which reports a fleet query takes: SQL filters on indexed columns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FleetFilter {
    /// Reports started at or after this (ns since 1970, UTC).
    pub since_ns: Option<i64>,
    /// Reports of this board exactly (the unit's model, trimmed).
    pub board: Option<String>,
}

/// One report as the fleet reads it (columns of `fleet_records`).
#[derive(Debug, Clone)]
pub struct FleetRow {
    pub file: String,
    pub kind: String,
    pub body: String,
    /// The encoded record of kind `record` (empty for the other kinds).
    pub record: Vec<u8>,
}

/// Reports stored before `fleet_records` existed (or with an older record version), taken
/// out to be extracted again.
#[derive(Debug, Clone)]
pub struct Pending {
    pub report_id: String,
    pub format: String,
    pub board: Option<String>,
    pub started_ns: i64,
    pub raw: Vec<u8>,
    /// The key whose signature the collector verified when it received the report.
    pub signer_key: Option<String>,
}

/// Back-fills one batch at a time, so memory holds a few hundred raw documents.
pub const BACKFILL_BATCH: usize = 256;

/// Extracts and stores the fleet rows of every report that lacks one; how many.
pub(crate) fn backfill(
    mut next: impl FnMut() -> Result<Vec<Pending>, StoreError>,
    mut put: impl FnMut(&[(Pending, crate::ingest::FleetColumns)]) -> Result<(), StoreError>,
) -> Result<u64, StoreError> {
    let mut n = 0u64;
    loop {
        let batch = next()?;
        if batch.is_empty() {
            return Ok(n);
        }
        let rows: Vec<_> = batch
            .into_iter()
            .map(|p| {
                let c = crate::ingest::fleet_columns(
                    &p.report_id,
                    &p.format,
                    p.started_ns,
                    &p.raw,
                    p.signer_key.as_deref(),
                );
                (p, c)
            })
            .collect();
        put(&rows)?;
        n += rows.len() as u64;
    }
}

/// A database of reports; shared by the server's worker threads.
pub trait Store: Send + Sync {
    /// Stores the report once per `report_id`, durably, before returning; a report_id
    /// already stored is a duplicate when the bytes are the same, else a conflict.
    fn insert(&self, r: &Record, raw: &[u8]) -> Result<Stored, StoreError>;
    /// What storing these bytes under `report_id` would be, if it is already stored: asked
    /// before a body is decoded, so a re-send costs one indexed read.
    fn lookup(&self, report_id: &str, sha256: &str) -> Result<Option<Stored>, StoreError>;
    /// How many reports are stored.
    fn count(&self) -> Result<u64, StoreError>;
    /// Whether a report could be stored now: one small committed write (a read-only or full
    /// database, a lost server, fail it).
    fn health(&self) -> Result<(), StoreError>;
    /// Gives every stored report its fleet row (reports from before the table, or of an
    /// older record version); how many it extracted. Idempotent.
    fn fleet_backfill(&self) -> Result<u64, StoreError>;
    /// The fleet rows `f` selects, in no particular order.
    fn fleet_rows(&self, f: &FleetFilter) -> Result<Vec<FleetRow>, StoreError>;
    /// One stored report: (format, the document as sent).
    fn raw(&self, report_id: &str) -> Result<Option<(String, Vec<u8>)>, StoreError>;
    /// Reports per board over the whole database, for "nothing matched" advice.
    fn fleet_boards(&self) -> Result<Vec<(Option<String>, u64)>, StoreError>;
    /// Folds queued reports into this build's generations of the fleet's summaries
    /// (`scope`), a batch per transaction, until none is left; first makes this build's
    /// generation beside any other when it has none ([`crate::summaries::generation`]),
    /// with every stored record queued for it. `progress(folded, queued)` after each batch.
    /// How many reports it folded.
    fn fleet_fold(
        &self,
        scope: FoldScope,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<u64, StoreError>;
    /// Starts a new generation of this build's summaries beside the serving one, with every
    /// stored record queued for it; the serving one answers until it is built. How many
    /// are queued.
    fn fleet_rebuild(&self) -> Result<u64, StoreError>;
    /// Reports waiting to be folded into this build's generations.
    fn fleet_queued(&self) -> Result<u64, StoreError>;
    /// This build's generations.
    fn fleet_generations(&self) -> Result<Generations, StoreError>;
    /// The first and last day with figures among generation `gen`'s daily summaries of
    /// `board` from `from_day`.
    fn fleet_summary_days(
        &self,
        gen: i64,
        from_day: Option<i32>,
        board: Option<&str>,
    ) -> Result<Option<(i32, i32)>, StoreError>;
    /// The stored summaries `f` selects, in order of first day, then board: `each(first day,
    /// board, bytes)`.
    fn fleet_summaries(
        &self,
        f: &SummaryFilter,
        each: &mut dyn FnMut(i32, String, Vec<u8>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError>;
    /// Units whose reports were signed by more than one key, and how many (generation
    /// `gen`'s units).
    fn fleet_several_keys(&self, gen: i64) -> Result<Vec<(String, i32)>, StoreError>;
    /// The rows `f` selects that are not records (unfinished runs, reports that could not be
    /// read): the first `limit` by name, and how many.
    fn fleet_issues(
        &self,
        f: &FleetFilter,
        limit: usize,
    ) -> Result<(Vec<FleetRow>, u64), StoreError>;
}

/// Opens (and creates the tables of) the database `--db` names; `connections` is how many
/// PostgreSQL sessions the workers share (SQLite has one writer anyway); `password` is
/// PostgreSQL's when the URL holds none.
pub fn open(
    url: &str,
    connections: usize,
    password: Option<&str>,
) -> Result<Box<dyn Store>, StoreError> {
    if let Some(path) = url.strip_prefix("sqlite:") {
        let path = path.strip_prefix("//").unwrap_or(path);
        if path.is_empty() {
            return Err(StoreError::Url(shown(url)));
        }
        return Ok(Box::new(sqlite::Sqlite::open(path)?));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Box::new(postgres::Postgres::open(
            url,
            connections.max(1),
            password,
        )?));
    }
    Err(StoreError::Url(shown(url)))
}

/// Opens a read replica of the collectors' PostgreSQL database for the fleet page
/// (`--page-db`): read only; the collectors on the primary fold what arrives.
pub fn open_replica(url: &str, password: Option<&str>) -> Result<Box<dyn Store>, StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Box::new(postgres::Postgres::open_replica(url, password)?));
    }
    Err(StoreError::ReplicaUrl(shown(url)))
}

/// The database URL as messages show it: a password in it is masked.
pub fn shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    // The authority ends at the path; its user information at its last `@`.
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((auth, host)) if auth.contains(':') => {
            let user = auth.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}{tail}")
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_password_in_the_url_is_never_shown() {
        for (url, shown) in [
            (
                "postgres://usbperf:s3cret@db:5432/reports",
                "postgres://usbperf:***@db:5432/reports",
            ),
            ("postgres://a:p@ss@db/r?x=1", "postgres://a:***@db/r?x=1"),
            (
                "postgres://usbperf@db/reports",
                "postgres://usbperf@db/reports",
            ),
            ("sqlite:/var/lib/r.db", "sqlite:/var/lib/r.db"),
        ] {
            assert_eq!(super::shown(url), shown);
        }
    }
}
