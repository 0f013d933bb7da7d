//! Owns emptying the spool: every entry is sent, oldest first. An acknowledged entry is
//! removed; one the collector can never store (a 4xx about the report) is set aside in
//! `rejected/` with its reason and the drain goes on; when the collector cannot take an
//! entry now (a 5xx, a timeout, no connection) the drain goes on with the others and tries
//! the ones left again after a backoff, in rounds, until the attempts or the deadline run
//! out — one report the database refuses never holds up the reports behind it. A wrong
//! token or URL stops the drain: every entry would meet it. Sleeping and logging are the
//! caller's, so tests run without waiting.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{Ack, Backoff, Client, Entry, SendError, Spool, SpoolError};
use crate::report::{decode, wire};

#[derive(Debug, Clone)]
pub struct DrainOptions {
    /// Rounds over the entries the collector could not take (1 = no retry).
    pub attempts: u32,
    pub backoff: Backoff,
    /// No round is started after this instant (a request under way is bounded by the
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
    /// Entries the collector will never store, now in `rejected/` (where, and why).
    pub rejected: Vec<(PathBuf, SendError)>,
    /// Entries refused for the unit's settings (token, URL): still queued.
    pub refused: Vec<(Entry, SendError)>,
    /// Entries the collector could not take in time: still queued.
    pub unreachable: Vec<Entry>,
    /// The last reason an entry stays queued.
    pub last_error: Option<SendError>,
}

impl DrainOutcome {
    /// Everything that was queued is delivered.
    pub fn complete(&self) -> bool {
        self.rejected.is_empty() && self.refused.is_empty() && self.unreachable.is_empty()
    }

    /// Delivered now, delivered before (the collector had it), rejected, still queued.
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let dup = self.delivered.iter().filter(|(_, a)| !a.new).count();
        (
            self.delivered.len() - dup,
            dup,
            self.rejected.len(),
            self.refused.len() + self.unreachable.len(),
        )
    }
}

/// The `report_id` inside a report's bytes, if it has one and decodes.
pub fn report_id_of(json: bool, bytes: &[u8]) -> Option<String> {
    let name = if json { "report.json" } else { "report.yaml" };
    wire::read_to_store(std::path::Path::new(name), bytes)
        .ok()
        .and_then(|r| r.report_id)
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
    let mut pending = spool.entries()?;
    let mut out = DrainOutcome::default();
    let mut round = 0u32;
    while !pending.is_empty() {
        let mut again = Vec::new();
        let mut iter = pending.into_iter();
        while let Some(entry) = iter.next() {
            // Read up to one byte past the limit of a report: a larger entry (a damaged or
            // planted file, a sparse one of gigabytes) is set aside unread.
            let limit = decode::LIMITS.max_bytes as u64;
            let read = std::fs::File::open(&entry.path).and_then(|f| {
                use std::io::Read;
                let mut b = Vec::new();
                f.take(limit + 1).read_to_end(&mut b).map(|_| b)
            });
            let bytes = match read {
                Ok(b) if b.len() as u64 > limit => {
                    let e = SendError::TooLarge { limit };
                    let to = spool.reject(&entry, &e.to_string())?;
                    log(format!(
                        "{}: {e}; set aside as {}",
                        entry.path.display(),
                        to.display()
                    ));
                    out.rejected.push((to, e));
                    continue;
                }
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
            let name = id.clone().unwrap_or_else(|| entry.id.clone());
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
                }
                Err(e) if e.rejects_report() => {
                    let to = spool.reject(&entry, &e.to_string())?;
                    log(format!(
                        "{name}: {e}; set aside as {} (never sent again: look at it and its \
                         .reason, then delete both)",
                        to.display()
                    ));
                    out.rejected.push((to, e));
                }
                Err(e) if e.retryable() => {
                    log(format!("{name}: {e}"));
                    out.last_error = Some(e);
                    again.push(entry);
                }
                Err(e) => {
                    // The token or the URL: every other entry would meet the same answer.
                    log(format!("{name}: {e}"));
                    out.refused.push((entry, e));
                    out.unreachable.extend(again);
                    out.unreachable.extend(iter);
                    return Ok(out);
                }
            }
        }
        round += 1;
        if again.is_empty() {
            break;
        }
        let delay = opts.backoff.delay(round - 1, random_word());
        let late = opts.deadline.is_some_and(|d| Instant::now() + delay >= d);
        if round >= opts.attempts || late {
            out.unreachable = again;
            break;
        }
        log(format!(
            "{} report(s) not taken; round {} in {} ms",
            again.len(),
            round + 1,
            delay.as_millis()
        ));
        sleep(delay);
        pending = again;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_ids_are_read_from_yaml_and_json() {
        let table: &[(bool, &[u8], Option<&str>)] = &[
            (false, b"schema_version: 1\nreport_id: ab12\ntool: {name: usbperf-matrix}\nstarted_at: 2026-11-30T10:23:45Z\nverdict: {pass: true}\n", Some("ab12")),
            (
                true,
                b"{\"schema_version\": 2, \"report_id\": \"cd34\", \"tool\": {\"name\": \"usbperf-matrix\"}, \"started_at\": \"2026-11-30T10:23:45Z\", \"verdict\": {}}",
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
        spool.enqueue(false, b"report_id: aa\n").unwrap();
        spool.enqueue(false, b"report_id: bb\n").unwrap();
        // Port 1 on loopback: nothing listens, the connection is refused at once.
        let client = Client {
            url: "http://127.0.0.1:1/api/v1/reports".into(),
            token: "t".into(),
            timeout: Duration::from_secs(2),
            key: None,
            unit: None,
            ca: None,
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
            assert_eq!(slept.len(), 2, "three rounds, two waits: {slept:?}");
        } else {
            // Without an HTTP client the first is refused (NotBuilt), and both are kept.
            assert_eq!(out.refused.len() + out.unreachable.len(), 2);
        }
        assert_eq!(spool.entries().unwrap().len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An entry larger than a report may be (a sparse file of a gigabyte planted in the
    /// spool) is set aside in `rejected/` with its reason, never read whole nor sent, and the
    /// entries beside it are still tried.
    #[test]
    fn an_entry_larger_than_a_report_is_set_aside_unread() {
        let dir = std::env::temp_dir().join(format!(
            "usbperf-drain-big-{}-{}",
            std::process::id(),
            crate::report::schema::new_report_id()
        ));
        let spool = Spool::at(&dir);
        spool.enqueue(false, b"report_id: aa\n").unwrap();
        let big = dir.join(format!("{}.yaml", "b".repeat(64)));
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(1 << 30).unwrap();
        // The oldest entry, met first: a build without the upload client stops the drain at
        // the first entry it cannot send, and this one must be set aside before anything is
        // sent.
        let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        f.set_modified(hour_ago).unwrap();
        let client = Client {
            url: "http://127.0.0.1:1/api/v1/reports".into(),
            token: "t".into(),
            timeout: Duration::from_secs(2),
            key: None,
            unit: None,
            ca: None,
        };
        let out = drain(
            &spool,
            &client,
            &DrainOptions {
                attempts: 1,
                ..DrainOptions::default()
            },
            &mut |_| {},
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(out.rejected.len(), 1, "{:?}", out.rejected);
        assert!(matches!(out.rejected[0].1, SendError::TooLarge { .. }));
        assert!(!big.exists());
        let rejected = spool.rejected().unwrap();
        assert_eq!(rejected.len(), 1);
        let mut reason = rejected[0].path.clone().into_os_string();
        reason.push(".reason");
        let reason = std::fs::read_to_string(reason).unwrap();
        assert!(reason.contains("bytes a report may have"), "{reason}");
        // The small entry beside it was tried.
        assert_eq!(out.refused.len() + out.unreachable.len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
