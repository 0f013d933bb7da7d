//! Owns the fleet over records extracted elsewhere: a report's bytes turned into the record
//! the fleet keeps (what a collector stores beside the raw document at ingest), and the
//! aggregation of such records in the order of their names, without reading any file.
//!
//! The collector gives each stored report the name its export writes,
//! `<report_id>.<format>`: records in that name order aggregate exactly as
//! `usbperf-matrix fleet` aggregates a directory of those files, the JSON output included.

use std::path::{Path, PathBuf};

use chrono::{DateTime, NaiveDate, Utc};

use super::aggregate::{Accumulator, FleetOptions};
use super::extract::{extract, report_identity, with_figures, UnitRecord};
use super::load::{Outcome, Skip};
use super::{parse_report, FleetError};
use usbperf_report::wire;

/// What one report becomes for the fleet, before any filter.
#[derive(Debug, Clone)]
pub enum Extracted {
    Record(Box<UnitRecord>),
    /// `status` other than `complete`: left out as unfinished, as a directory run does.
    Unfinished {
        status: String,
    },
}

/// Reduces one report's bytes as `usbperf-matrix fleet` reduces the file `path` holding
/// them (the name is the unit's last resort and names refused figures).
pub fn extract_bytes(path: &Path, bytes: &[u8]) -> Result<Extracted, FleetError> {
    Ok(extract_report(path, parse_report(path, bytes)?, bytes))
}

/// [`extract_bytes`] of a report already decoded from `bytes` (the collector decodes each
/// body once, for its columns and for this).
pub fn extract_report(path: &Path, r: wire::Report, bytes: &[u8]) -> Extracted {
    match r.status.as_deref() {
        Some("complete") | None => {}
        Some(s) => {
            return Extracted::Unfinished {
                status: s.to_string(),
            }
        }
    }
    let identity = report_identity(&r, bytes);
    let mut rec = extract(0, path, r);
    rec.identity = with_figures(identity, &rec);
    Extracted::Record(Box::new(rec))
}

/// The outcome a directory run has for this file: `file` is its index in the sorted list.
pub fn outcome(file: u32, path: &Path, e: Extracted) -> Outcome {
    match e {
        Extracted::Record(mut r) => {
            r.file = file;
            Outcome::Record(r)
        }
        Extracted::Unfinished { status } => Outcome::Skipped {
            path: path.to_path_buf(),
            why: Skip::Unfinished { status },
        },
    }
}

/// Aggregates outcomes already made: `files` is the sorted list of names, and `outcomes`
/// arrive in that order (each record's `file` its index in `files`), as [`super::load::load`]
/// delivers a directory's. `opts.load`'s filters are the caller's to have applied.
pub fn aggregate_outcomes(
    opts: FleetOptions,
    files: Vec<PathBuf>,
    outcomes: impl IntoIterator<Item = Outcome>,
) -> Accumulator {
    let mut acc = Accumulator::new(opts, files);
    for o in outcomes {
        acc.add_outcome(o);
    }
    acc
}

/// `--since`: a day (YYYY-MM-DD, midnight UTC) or an RFC 3339 time; the error is the advice.
pub fn parse_since(s: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc());
    }
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            format!(
                "--since {s:?} is not a date: use YYYY-MM-DD (UTC) or an RFC 3339 time such as \
                 2026-11-30T08:00:00Z"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_survives_its_json() {
        let yaml = br#"schema_version: 2
report_id: 0b8f6d2e-1111-4222-8333-444455556666
tool: {name: usbperf-matrix, version: 0.1.0}
started_at: 2026-11-30T10:00:00Z
status: complete
unit: {serial: U1, model: Board A}
verdict: {pass: true, reasons: []}
devices: []
"#;
        let Extracted::Record(r) = extract_bytes(Path::new("x.yaml"), yaml).unwrap() else {
            panic!("a complete report is a record")
        };
        let back: UnitRecord = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!((back.unit.as_str(), back.board.as_str()), ("U1", "Board A"));
        assert_eq!(back.started_at, r.started_at);
        assert_eq!(back.identity, r.identity);
    }

    #[test]
    fn since_takes_a_day_or_a_time() {
        assert_eq!(
            parse_since("2026-11-30").unwrap().to_rfc3339(),
            "2026-11-30T00:00:00+00:00"
        );
        assert!(parse_since("2026-11-30T08:00:00+01:00").is_ok());
        assert!(parse_since("yesterday").unwrap_err().contains("YYYY-MM-DD"));
    }
}
