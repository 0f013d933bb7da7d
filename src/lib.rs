//! usbperf: storage inventory, USB link checks and an I/O test matrix for embedded Linux boards.
//!
//! The binary `usbperf-matrix` is a thin shell over these modules; each module owns one concern
//! and says so in its first line.

pub mod cli;
pub mod config;
pub mod discover;
pub mod engine;
pub mod events;
pub mod exit;
pub mod fleet;
pub mod health;
pub mod matrix;
pub mod out;
pub mod report;
pub mod safety;
pub mod stats;
pub mod units;
pub mod upload;
pub mod workload;
