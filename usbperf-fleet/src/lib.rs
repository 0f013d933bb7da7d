//! Owns the fleet view: many factory reports read in parallel into per-group distributions,
//! robust outliers, failure rankings, trends, suggested thresholds and an HTML page.
//!
//! Flow: [`load`] finds and parses files on worker threads (through the one report reader,
//! [`usbperf_report::wire`]), [`extract`] turns each report into a compact record, [`aggregate`] folds records
//! into per-(group, metric) value vectors and summarises them with [`stats`] into the types
//! of [`summary`] (on every CPU: [`parallel`]);
//! [`thresholds`], [`text`] and [`html`] render the summary; [`wear`] follows each flash part
//! from report to report. [`records`] aggregates records
//! extracted elsewhere (the collector's database) without reading files. [`sketch`] keeps a
//! figure's values in memory that grows with their range, not their number, and merges
//! across days and collectors.

// Layers, bottom up: each imports only those above it (scripts/ci/check-imports.py).

// the compact binary form of stored rows
pub mod bytes;
// percentiles, robust outliers, medians per production day
pub mod stats;
// work spread over every CPU
pub mod parallel;
// a figure's values in memory that grows with their range
pub mod sketch;
// distinct units, mergeable
pub mod distinct;
// one report as a compact record
pub mod extract;
// finding and reading report files
pub mod load;
// one build's figures against another's
pub mod builds;
// each flash part followed from report to report
pub mod wear;
// the summary's types
pub mod summary;
// records folded into per-group distributions
pub mod aggregate;
// records extracted elsewhere (a collector's database), aggregated without files
pub mod records;
// the fleet as mergeable summaries per day and board
pub mod partial;
// summaries and units as a store keeps them
pub mod stored;
// the summary as text and CSV
pub mod text;
// learned limits and the profile snippet
pub mod thresholds;
// the summary as one HTML page
pub mod html;

use std::path::{Path, PathBuf};

use usbperf_report::wire::{self, Newer, ReadError};

pub use aggregate::{Dimension, FleetOptions, FleetSummary};

/// Errors of the fleet; each says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("{}: cannot read: {err}", path.display())]
    Read { path: PathBuf, err: std::io::Error },
    #[error(
        "{}: not a usbperf report, or a damaged or truncated one: {msg} (re-copy it from the \
         unit, or remove it from the fleet directory)",
        path.display()
    )]
    Malformed { path: PathBuf, msg: String },
    #[error(
        "{}: schema_version {version} is newer than this usbperf-matrix reads ({supported}): \
         aggregate with a newer usbperf-matrix",
        path.display()
    )]
    SchemaTooNew {
        path: PathBuf,
        version: u32,
        supported: u32,
    },
    #[error(
        "{}: no such file, or no reports in it (reports are *.yaml / *.json files): check \
         the path",
        path.display()
    )]
    NoReports { path: PathBuf },
    #[error(
        "unknown --group-by dimension {0:?}: use a comma-separated list of board, \
         device-class, port, device-model, tool-version"
    )]
    UnknownDimension(String),
    #[error("--margin-percent {0} must be in 0..100 (20 means limits 20 % below the fleet's p1)")]
    BadMargin(f64),
    #[error(
        "the fleet holds {} boards ({}): thresholds are per board, so pick one with --board",
        .0.len(),
        .0.join("; ")
    )]
    ManyBoards(Vec<String>),
    #[error("no report matched (after --since / --board): nothing to suggest thresholds from")]
    Empty,
    #[error(
        "{}: {kind}, not a report file: refused when opened (remove it from the fleet \
         directory)",
        path.display()
    )]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error(
        "{}: {bytes} bytes, larger than any report ({limit} bytes): not read (remove it from \
         the fleet directory)",
        path.display()
    )]
    TooLarge {
        path: PathBuf,
        bytes: u64,
        limit: u64,
    },
    /// The signature file beside the report does not vouch for its bytes: the report is not
    /// what its unit wrote, and is not counted.
    #[error(
        "{}: {why}: not counted (re-copy the report and its .sig file from the unit or the \
         collector)",
        path.display()
    )]
    Unsealed { path: PathBuf, why: String },
    /// Readable reports exist but `--since` / `--board` left out every one: the filter is wrong.
    #[error("{0}")]
    FilterMatchedNothing(String),
    /// Not one file gave a report to aggregate: the directory is not what it should be.
    #[error("{0}")]
    NothingUsable(String),
}

impl usbperf_report::exit::Classify for FleetError {
    /// What was asked (a dimension, a filter, one board, a directory with reports) is the
    /// user's; reading and the reports themselves are not.
    fn exit(&self) -> usbperf_report::exit::Exit {
        use usbperf_report::exit::Exit::{Error, Usage};
        match self {
            FleetError::UnknownDimension(_)
            | FleetError::BadMargin(_)
            | FleetError::ManyBoards(_)
            | FleetError::Empty
            | FleetError::FilterMatchedNothing(_)
            | FleetError::NoReports { .. } => Usage,
            FleetError::Read { .. }
            | FleetError::Malformed { .. }
            | FleetError::SchemaTooNew { .. }
            | FleetError::NotRegular { .. }
            | FleetError::TooLarge { .. }
            | FleetError::Unsealed { .. }
            | FleetError::NothingUsable(_) => Error,
        }
    }
}

/// The margin of learned limits, `--margin-percent` as a fraction: 0 to under 100 %.
pub fn learn_margin(percent: f64) -> Result<f64, FleetError> {
    if (0.0..100.0).contains(&percent) {
        Ok(percent / 100.0)
    } else {
        Err(FleetError::BadMargin(percent))
    }
}

/// The groups limits are learned in: a board profile selects devices by class (and port),
/// so by device class, and by port too when `asked` groups by port; whatever else was asked.
pub fn learning_groups(asked: &[Dimension]) -> Vec<Dimension> {
    let mut g = vec![Dimension::DeviceClass];
    if asked.contains(&Dimension::Port) {
        g.push(Dimension::Port);
    }
    g
}

/// Reads one report's bytes for the fleet: a newer schema version is refused, since a fleet's
/// figures must mean the same in every report it adds up.
pub fn parse_report(path: &Path, bytes: &[u8]) -> Result<wire::Report, FleetError> {
    wire::read(path, bytes, Newer::Refuse).map_err(|e| match e {
        ReadError::NotAReport { path, msg } => FleetError::Malformed { path, msg },
        ReadError::TooNew {
            path,
            version,
            supported,
            ..
        } => FleetError::SchemaTooNew {
            path,
            version,
            supported,
        },
    })
}

#[cfg(test)]
mod learning_tests {
    use super::*;

    #[test]
    fn limits_are_learned_per_class_and_port_with_a_margin_below_100() {
        for (percent, want) in [(0.0, Some(0.0)), (20.0, Some(0.2)), (99.5, Some(0.995))] {
            assert_eq!(learn_margin(percent).ok(), want);
        }
        for bad in [100.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(learn_margin(bad), Err(FleetError::BadMargin(_))),
                "{bad}"
            );
        }
        use Dimension::*;
        assert_eq!(learning_groups(&[Board, DeviceModel]), vec![DeviceClass]);
        assert_eq!(learning_groups(&[Port]), vec![DeviceClass, Port]);
    }
}
