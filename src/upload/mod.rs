//! Owns getting a finished report off the unit: the durable outbox (`spool`), the
//! HTTP client that hands a report to the collector and checks its acknowledgement
//! (`client`), the retry delays (`backoff`); the `upload:` config section is `config::upload`.
//!
//! The rule everything here keeps: a report leaves the spool only after the collector
//! answered 2xx naming the report's id and the hash of its bytes, or to `rejected/` (with
//! the reason beside it) when the collector says it can never store those bytes; anything
//! else leaves it queued for the next drain (the next `upload --spool`, the next boot).
//! Sending the same bytes twice is harmless: the collector stores a report once per
//! `report_id`, and answers 409 (never "duplicate") for other bytes under the same id.

pub mod backoff;
pub mod client;
pub mod drain;
pub mod key;
pub mod spool;

use std::time::Instant;

pub use crate::config::upload::{UploadConfig, DEFAULT_SPOOL_DIR};
pub use backoff::Backoff;
pub use client::{Ack, Client, SendError};
pub use drain::{drain, DrainOptions, DrainOutcome};
pub use key::UnitKey;
pub use spool::{Entry, Spool, SpoolError};

/// The header that carries the report's id, so the collector (and a proxy's log) sees it
/// before reading the body.
pub use usbperf_report::seal::REPORT_ID_HEADER;

/// This unit's name, as its reports give it (`report::unit::unit_name`).
pub fn this_unit() -> Option<String> {
    crate::report::unit::name_of(&crate::report::unit::identify(&Default::default()))
}

/// Signs the finished report file with the unit's key, the one its uploads carry (created
/// on first use): writes `<report>.sig` beside it. The signature file's path.
pub fn seal_report(
    up: &UploadConfig,
    report: &std::path::Path,
) -> Result<std::path::PathBuf, key::KeyError> {
    UnitKey::load_or_create(&up.key_file())?.seal_file(report)
}

/// The end of `run`: queue the finished report (its wire form, `json`) and try to deliver the spool within
/// the section's `timeout`. What happened, in one sentence for standard error; the run's
/// verdict and exit code are not this function's to change.
pub fn hand_off(up: &UploadConfig, json: &[u8]) -> String {
    let spool = Spool::at(up.spool_dir());
    if let Err(e) = spool.enqueue(true, json) {
        return e.to_string();
    }
    let token = match client::read_token(&up.token_file, up.allow_readable_token) {
        Ok(t) => t,
        Err(e) => return format!("{e}; the report is queued in {}", spool.dir().display()),
    };
    let ca = match up.ca_file.as_deref().map(client::CaRoots::read).transpose() {
        Ok(ca) => ca.map(std::sync::Arc::new),
        Err(e) => return format!("{e}; the report is queued in {}", spool.dir().display()),
    };
    // A key that cannot be used holds nothing back: the report goes unsigned, and the
    // collector judges it.
    let (key, unsigned) = match UnitKey::load_or_create(&up.key_file()) {
        Ok(k) => (Some(std::sync::Arc::new(k)), String::new()),
        Err(e) => (None, format!(" (sent unsigned: {e})")),
    };
    // Half the budget per request, the other half bounds the retries: the whole hand-off
    // ends within `timeout`.
    let budget = up.timeout();
    let client = Client {
        url: up.url.clone(),
        token,
        timeout: budget / 2,
        key,
        unit: this_unit(),
        ca,
    };
    let opts = DrainOptions {
        attempts: 3,
        deadline: Some(Instant::now() + budget / 2),
        ..DrainOptions::default()
    };
    let said = match drain(&spool, &client, &opts, &mut std::thread::sleep, &mut |_| {}) {
        Ok(out) if out.complete() => format!("{} report(s) delivered", out.delivered.len()),
        Ok(out) => {
            let (new, dup, rejected, queued) = out.counts();
            format!(
                "{} delivered; {rejected} rejected (set aside in {}, each with a .reason); \
                 {queued} stay queued in {} ({}); `usbperf-matrix upload` or the next boot \
                 sends them",
                new + dup,
                spool.dir().join(spool::REJECTED_DIR).display(),
                spool.dir().display(),
                out.refused
                    .first()
                    .map(|(_, e)| e.to_string())
                    .or_else(|| out.rejected.first().map(|(_, e)| e.to_string()))
                    .or_else(|| out.last_error.map(|e| e.to_string()))
                    .unwrap_or_default()
            )
        }
        Err(e) => e.to_string(),
    };
    format!("{said}{unsigned}")
}
