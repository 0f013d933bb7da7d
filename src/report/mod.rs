//! Owns the factory report: its versioned schema types, the unit's identity, durable
//! (atomic) writing after every finished cell, reading a report back as a table, and what a
//! test station reads of it (the result line, LAVA signals, JUnit XML).

pub mod file;
#[cfg(feature = "schema")]
pub mod json_schema;
pub mod junit;
pub mod powercut;
pub mod schedule;
pub mod schema;
pub mod station;
pub mod table;
pub mod unit;
pub mod verdict;
pub mod write;

// The report as read from elsewhere, its bounds and its decoder: the report crate's.
pub use usbperf_report::{bounds, decode, wire};
