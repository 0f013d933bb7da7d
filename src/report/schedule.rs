//! Owns the schedule as the report records it: its lanes (the disks
//! that share what limits their throughput), and the cells that ran alone with the rule that
//! put them there. How lanes are found and the rules decided is `matrix::schedule`'s.

use serde::{Deserialize, Serialize};

pub use crate::config::ScheduleMode;

/// Why a cell of an `auto` run ran alone: a record in the report's `schedule.alone`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum AloneRule {
    /// Blocks under `matrix::schedule::SMALL_BLOCK` on a device class whose I/O rate a core may not keep up
    /// with: the CPU, not the device, can be the limit.
    SmallBlocksFastDevice,
    /// Blocks under `matrix::schedule::SMALL_BLOCK` on a fast device whose figures this run measured: the
    /// CPU it could take (its fastest figure over the block, times the CPU per I/O measured)
    /// is over half its share.
    PredictedCpu,
    /// Run beside others, it used more CPU than `matrix::schedule::cpu_limited` allows: measured again alone,
    /// and that figure is the one kept.
    MeasuredCpu,
    /// Run beside others, the machine's CPUs were saturated (`matrix::schedule::machine_saturated`): measured
    /// again alone, and the rest of the run fell back to one cell at a time.
    MachineCpu,
    /// After a [`AloneRule::MachineCpu`] fallback: every later cell runs alone.
    FellBack,
}

/// A cell that ran alone in an `auto` run, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AloneCell {
    pub device: String,
    /// Its index in the device's `cells` (a matrix may list a workload twice).
    pub cell: usize,
    pub workload: crate::workload::WorkloadKind,
    pub rule: AloneRule,
    /// For [`AloneRule::MeasuredCpu`]: the CPU it used beside the others, in % of one CPU;
    /// for [`AloneRule::MachineCpu`]: how busy the machine's CPUs were, in % of all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_percent: Option<f64>,
}

/// Disks that share what limits their throughput, in the order the run meets them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Lane {
    /// What they share: `usb:usb3` (a root hub), `mmc:mmc0`, `ata:ata1`, `nvme:nvme-subsys0`,
    /// `host:/devices/.../0000:00:07.0` (a SCSI host adapter), `disk:vda` (nothing shared).
    pub key: String,
    pub disks: Vec<String>,
}
