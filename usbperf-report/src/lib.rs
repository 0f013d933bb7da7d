//! usbperf-report: a usbperf report as every reader takes it from elsewhere (the unit's
//! `show`, `fleet` and `upload`, the collector's ingest), in one crate that both depend on,
//! with what every reader needs to show it: units, untrusted text made safe for a terminal and
//! a spreadsheet, the console streams, the exit codes.
//!
//! Layers, bottom up; each imports only those above it:

// sizes, durations and rates, parsed and printed
pub mod units;

// text from elsewhere made safe for a terminal and a spreadsheet; files from elsewhere read
// bounded
pub mod untrusted;

// each figure of a report: its unit, direction, plausible range and the key that limits it
pub mod metric;

// serde's decoding errors in the user's words, counts, an error chain said once
pub mod words;

// the two output streams, and tables that fit the console
pub mod out;

// the exit codes
pub mod exit;

// what travels beside a report's bytes when a unit sends it: its digest and signature headers
pub mod seal;

// the bounds a report from elsewhere is walked against before it is decoded
pub mod bounds;

// how a report's bytes are decoded: JSON or YAML, bounded, the version probed
pub mod decode;

// the report as read, and the one entry point that reads it
pub mod wire;

/// The newest report schema this build writes and reads. Bump on any change a reader must
/// know about; readers accept every version up to theirs. 2: every reason is a record,
/// `report_id` is a UUID and always present. 1: reasons are sentences, `report_id` 16 hex
/// digits or absent.
pub const SCHEMA_VERSION: u32 = 2;

/// What a power-cut verdict says it is (its `format:`): such a report carries no matrix.
pub const POWER_CUT_FORMAT: &str = "usbperf-power-cut";

/// The figure a limit judges (as the unit's `BenchResult::judged`): the sustained rate after
/// a drop, else the steady rate after the warm-up, else the whole test's `mib_per_s`; IOPS
/// follow the rate (a test's I/Os have one size). `None` for a rate means the whole test's
/// figures stand.
pub fn judged_figures(
    mib_per_s: f64,
    iops: f64,
    sustained: Option<f64>,
    steady: Option<f64>,
) -> (f64, f64) {
    match sustained.or(steady) {
        Some(m) if mib_per_s > 0.0 => (m, iops * m / mib_per_s),
        _ => (mib_per_s, iops),
    }
}
