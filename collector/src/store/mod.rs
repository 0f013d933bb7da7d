//! Owns where reports are kept: a `Store` trait with one file per database (`sqlite`,
//! `postgres`), both with the same tables. Each insert is one transaction that adds the raw
//! document and its columns, or nothing when the `report_id` is already there; it returns
//! only after the commit is durable, and only then does the server acknowledge.
//!
//! Tables (both databases): `reports` (report_id primary key, unit, board, hostname,
//! started_at, finished_at, status, pass, exit_code, schema_version, format, raw,
//! received_at), `devices` (report_id, idx, name, class, port, model, serial, pass) and
//! `metrics` (report_id, device_idx, cell_idx, workload, status, mib_per_s, iops, p99_ns).

pub mod postgres;
pub mod sqlite;

use crate::ingest::Record;

/// What an insert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// Committed now.
    New,
    /// The report_id was already stored; nothing was written.
    Duplicate,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "--db {0:?}: use sqlite:PATH (one file, e.g. sqlite:/var/lib/usbperf-collect/reports.db) \
         or postgres://USER@HOST/DB"
    )]
    Url(String),
    #[error("SQLite {path}: {err} (is the directory writable by the collector's user?)")]
    Sqlite { path: String, err: rusqlite::Error },
    #[error("PostgreSQL: {0} (is the server up, and the URL's user allowed to create tables?)")]
    Postgres(#[from] ::postgres::Error),
}

/// A database of reports; shared by the server's worker threads.
pub trait Store: Send + Sync {
    /// Stores the report once per `report_id`, durably, before returning.
    fn insert(&self, r: &Record, raw: &[u8]) -> Result<Stored, StoreError>;
    /// How many reports are stored.
    fn count(&self) -> Result<u64, StoreError>;
}

/// Opens (and creates the tables of) the database `--db` names; `connections` is how many
/// PostgreSQL sessions the workers share (SQLite has one writer anyway).
pub fn open(url: &str, connections: usize) -> Result<Box<dyn Store>, StoreError> {
    if let Some(path) = url.strip_prefix("sqlite:") {
        let path = path.strip_prefix("//").unwrap_or(path);
        if path.is_empty() {
            return Err(StoreError::Url(url.into()));
        }
        return Ok(Box::new(sqlite::Sqlite::open(path)?));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Box::new(postgres::Postgres::open(url, connections.max(1))?));
    }
    Err(StoreError::Url(url.into()))
}
