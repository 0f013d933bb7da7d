//! Owns emptying the spool: every entry is sent, oldest first; an acknowledged entry is
//! removed, a refused one stays (and the drain goes on with the next), and when the collector
//! cannot be reached the same entry is retried with backoff until the attempts or the
//! deadline run out — then the drain stops, since the next entry would meet the same network.
//! Sleeping and logging are the caller's, so tests run without waiting.

use std::time::{Duration, Instant};

use serde::Deserialize;

use super::{Ack, Backoff, Client, Entry, SendError, Spool, SpoolError};
use crate::report::decode;

#[derive(Debug, Clone)]
pub struct DrainOptions {
    /// Attempts per entry while the collector is unreachable (1 = no retry).
    pub attempts: u32,
    pub backoff: Backoff,
    /// No retry is started after this instant (a request under way is bounded by the
    /// client's own timeout).
    pub deadline: Option<Instant>,
}

impl Default for DrainOptions {
    fn default() -> Self {
        DrainOptions {
            attempts: 5,
            backoff: Backoff::default(),
            deadline: None,
        }
    }
}

#[derive(Debug, Default)]
pub struct DrainOutcome {
    pub delivered: Vec<(Entry, Ack)>,
    /// Entries the collector refused (400, 401, 413…): still queued.
    pub refused: Vec<(Entry, SendError)>,
    /// Entries not delivered because the collector could not be reached: still queued.
    pub unreachable: Vec<Entry>,
    /// The last reason the collector could not be reached.
    pub last_error: Option<SendError>,
}

impl DrainOutcome {
    /// Everything that was queued is delivered.
    pub fn complete(&self) -> bool {
        self.refused.is_empty() && self.unreachable.is_empty()
    }
}

#[derive(Deserialize)]
struct IdProbe {
    #[serde(default)]
    report_id: Option<String>,
}

/// The `report_id` inside a report's bytes, if it has one and decodes.
pub fn report_id_of(json: bool, bytes: &[u8]) -> Option<String> {
    decode::decode::<IdProbe>(json, bytes)
        .ok()
        .and_then(|p| p.report_id)
        .filter(|s| !s.trim().is_empty())
}

fn random_word() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    crate::engine::mix64(t ^ u64::from(std::process::id()))
}

/// Sends every entry of `spool`; see the module comment for the rules.
pub fn drain(
    spool: &Spool,
    client: &Client,
    opts: &DrainOptions,
    sleep: &mut dyn FnMut(Duration),
    log: &mut dyn FnMut(String),
) -> Result<DrainOutcome, SpoolError> {
    let entries = spool.entries()?;
    let mut out = DrainOutcome::default();
    let mut iter = entries.into_iter();
    while let Some(entry) = iter.next() {
        let bytes = match std::fs::read(&entry.path) {
            Ok(b) => b,
            // Delivered and removed by a concurrent drain (the boot service beside `run`).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => {
                return Err(SpoolError::Read {
                    dir: entry.path.clone(),
                    err,
                })
            }
        };
        let id = report_id_of(entry.json, &bytes);
        let mut attempt = 0u32;
        loop {
            match client.send(id.as_deref(), entry.json, &bytes) {
                Ok(ack) => {
                    spool.remove(&entry)?;
                    log(format!(
                        "delivered {} ({})",
                        ack.report_id,
                        if ack.new {
                            "stored"
                        } else {
                            "the collector already had it"
                        }
                    ));
                    out.delivered.push((entry, ack));
                    break;
                }
                Err(e) if e.retryable() => {
                    attempt += 1;
                    let delay = opts.backoff.delay(attempt - 1, random_word());
                    let late = opts.deadline.is_some_and(|d| Instant::now() + delay >= d);
                    if attempt >= opts.attempts || late {
                        log(format!("{}: {e}", entry.id));
                        out.last_error = Some(e);
                        out.unreachable.push(entry);
                        out.unreachable.extend(iter);
                        return Ok(out);
                    }
                    log(format!(
                        "{}: {e}; retry {attempt} in {} ms",
                        entry.id,
                        delay.as_millis()
                    ));
                    sleep(delay);
                }
                Err(e) => {
                    log(format!("{}: {e}", entry.id));
                    out.refused.push((entry, e));
                    break;
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_ids_are_read_from_yaml_and_json() {
        let table: &[(bool, &[u8], Option<&str>)] = &[
            (false, b"schema_version: 1\nreport_id: ab12\n", Some("ab12")),
            (
                true,
                b"{\"schema_version\": 2, \"report_id\": \"cd34\"}",
                Some("cd34"),
            ),
            (false, b"schema_version: 1\n", None),
            (false, b"report_id: ''\n", None),
            (true, b"{truncated", None),
        ];
        for (json, bytes, want) in table {
            assert_eq!(report_id_of(*json, bytes).as_deref(), *want);
        }
    }

    #[test]
    fn an_unreachable_collector_leaves_everything_queued_after_bounded_retries() {
        let dir = std::env::temp_dir().join(format!(
            "usbperf-drain-{}-{}",
            std::process::id(),
            crate::report::schema::new_report_id()
        ));
        let spool = Spool::at(&dir);
        spool.enqueue("aa", false, b"report_id: aa\n").unwrap();
        spool.enqueue("bb", false, b"report_id: bb\n").unwrap();
        // Port 1 on loopback: nothing listens, the connection is refused at once.
        let client = Client {
            url: "http://127.0.0.1:1/api/v1/reports".into(),
            token: "t".into(),
            timeout: Duration::from_secs(2),
        };
        let mut slept = Vec::new();
        let out = drain(
            &spool,
            &client,
            &DrainOptions {
                attempts: 3,
                ..DrainOptions::default()
            },
            &mut |d| slept.push(d),
            &mut |_| {},
        )
        .unwrap();
        assert!(out.delivered.is_empty());
        if cfg!(feature = "upload") {
            assert_eq!(out.unreachable.len(), 2, "both stay queued");
            assert_eq!(slept.len(), 2, "three attempts, two waits: {slept:?}");
        } else {
            // Without an HTTP client every entry is refused (NotBuilt), and still kept.
            assert_eq!(out.refused.len(), 2);
        }
        assert_eq!(spool.entries().unwrap().len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
