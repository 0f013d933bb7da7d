//! Owns getting a finished report off the unit: the durable outbox (`spool`), the
//! HTTP client that hands a report to the collector and checks its acknowledgement
//! (`client`), the retry delays (`backoff`), and the `upload:` config section (`config`).
//!
//! The rule everything here keeps: a report leaves the spool only after the collector
//! answered 2xx naming the report's id and the hash of its bytes, or to `rejected/` (with
//! the reason beside it) when the collector says it can never store those bytes; anything
//! else leaves it queued for the next drain (the next `upload --spool`, the next boot).
//! Sending the same bytes twice is harmless: the collector stores a report once per
//! `report_id`, and answers 409 (never "duplicate") for other bytes under the same id.

pub mod backoff;
pub mod client;
pub mod config;
pub mod drain;
pub mod spool;

pub use backoff::Backoff;
pub use client::{Ack, Client, SendError};
pub use config::UploadConfig;
pub use drain::{drain, DrainOptions, DrainOutcome};
pub use spool::{Entry, Spool, SpoolError};

/// The spool when neither `--spool` nor `upload: {spool: …}` names one.
pub const DEFAULT_SPOOL_DIR: &str = "/var/lib/usbperf/outbox";

/// The header that carries the report's id, so the collector (and a proxy's log) sees it
/// before reading the body.
pub const REPORT_ID_HEADER: &str = "X-Usbperf-Report-Id";
