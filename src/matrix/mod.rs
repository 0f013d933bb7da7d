//! Owns the factory matrix: configuration and profiles, which disks a run tests and how
//! (selection and targets), the run itself (`run`, over an environment given as a value in
//! `env`, cell by cell in `cell`, lanes at once by `schedule` over `concurrent`), and
//! thresholds turned into verdicts with reasons (`verdict`; the approved parts in `parts`).

pub mod calibrate;
pub mod cell;
pub mod concurrent;
pub mod env;
pub mod flash;
pub mod parts;
pub mod plan;
pub mod run;
pub mod schedule;
pub mod select;
pub mod study;
pub mod verdict;
pub mod watch;
