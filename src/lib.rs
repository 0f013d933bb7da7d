//! usbperf: storage inventory, USB link checks and an I/O test matrix for embedded Linux boards.
//!
//! The binary `usbperf-matrix` is a thin shell over these modules; each module owns one concern
//! and says so in its first line.
//!
//! The modules are layers, declared here bottom up: each imports only modules declared above
//! it, never one below. `scripts/ci/check-imports.py` (run by `scripts/test.sh`) reads this list and
//! fails on an import that runs upward or on a circle between the files of one module.

// sizes, durations and rates, parsed and printed (the report crate's)
pub use usbperf_report::units;

// each figure of a report: its unit, direction, plausible range and the key that limits it
// (the report crate's table)
pub use usbperf_report::metric;

// text from elsewhere made safe for a terminal and a spreadsheet (the report crate's)
pub use usbperf_report::untrusted;

// serde's decoding errors in the user's words (the report crate's)
pub use usbperf_report::words;

// the two output streams, and their macros `out!`, `outln!`, `errln!` (the report crate's)
pub use usbperf_report::{errln, out, outln};

// the exit codes (the report crate's)
pub use usbperf_report::exit;

// a device's class, eMMC area, and a field left empty
pub mod device;

// reading a sysfs tree and the text in it
pub mod sysfs;

// the I/O engines and their one driver loop
pub mod engine;

// figures from an engine's counts
pub mod stats;

// flash and link health of one disk
pub mod health;

// the inventory (calls health)
pub mod discover;

// kernel messages and their attribution to disks
pub mod events;

// what may be written, test files, locks, signals
pub mod safety;

// one test procedure on one target
pub mod workload;

// the config file and board profiles
pub mod config;

// the report: its types, decoder, writers and views
pub mod report;

// the unit's spool and its sending
pub mod upload;

// many reports: distributions, outliers, thresholds (the fleet crate)
pub use usbperf_fleet as fleet;

// the factory run: select, judge, plan, run
pub mod matrix;

// the subcommands: parse and print
pub mod cli;
