//! Owns the factory matrix: configuration and profiles, which disks a run tests and how
//! (selection and targets), and thresholds turned into verdicts with reasons.

pub mod config;
pub mod select;
pub mod verdict;
