//! usbperf-collect: the factory server's end of the upload. Units POST their reports; each is
//! checked (a usbperf report, schema 1 or 2, a token from the token file), stored once per
//! `report_id` — the raw document and indexed columns — in SQLite or PostgreSQL, and only
//! then acknowledged. The unit deletes its queued copy on that acknowledgement, so a report
//! is always either acknowledged and committed here, or still queued on the unit.
//!
//! The modules are layers, declared bottom up: each imports only modules declared before it
//! (`scripts/ci/check-imports.py collector/src`, run by `scripts/test.sh`).

// reading a file given by path: regular, bounded, permission bits
pub mod files;

// the binary fleet record kept beside each report
pub mod record;

// the token file
pub mod tokens;

// the factory's list of unit keys (instead of a key learnt from a unit's first report)
pub mod unit_keys;

// the certificate and key of the collector's own https://
pub mod tls;

// one body: bounded decode, checks, the row and the record
pub mod ingest;

// reports folded into the fleet's summaries per day and week
pub mod summaries;

// SQLite and PostgreSQL
pub mod store;

// the fleet view from the database
pub mod fleet;

// the HTTP service
pub mod server;

/// The largest report body accepted; a factory report is tens of kilobytes, a full-profile
/// one with many devices a few hundred.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 8 << 20;
