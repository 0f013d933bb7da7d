//! Owns the plan `run --dry-run` prints: which disks the configuration chooses, where each
//! one's tests would go (or why it is refused), the lanes, and the required devices that are
//! missing. Nothing is created, written or locked to find it.

use serde::Serialize;

use super::run::{lanes_of, min_file};
use super::schedule::{Lane, ScheduleMode};
use super::select::{self, Placement};
use crate::config::Config;
use crate::discover::Inventory;
use crate::safety::SystemFacts;
use crate::sysfs::SysfsRoot;

/// What a run with this configuration would do on this system.
#[derive(Debug, Serialize)]
pub struct DryRun<'a> {
    pub config: &'a Config,
    pub devices: Vec<PlannedDevice>,
    /// Indexes into `config.devices` of the rules marked `required` that matched nothing.
    pub missing_required: Vec<usize>,
    pub schedule: PlannedSchedule,
}

/// One chosen disk.
#[derive(Debug, Serialize)]
pub struct PlannedDevice {
    pub name: String,
    pub placement: Placement,
    /// The index of the `devices:` rule that chose it.
    pub rule: usize,
}

#[derive(Debug, Serialize)]
pub struct PlannedSchedule {
    pub lanes: Vec<Lane>,
    pub mode: ScheduleMode,
}

/// The plan for `cfg` on the system `inv`, `facts` and `sys` describe.
pub fn dry_run<'a>(
    cfg: &'a Config,
    inv: &Inventory,
    facts: &SystemFacts,
    sys: &SysfsRoot,
) -> DryRun<'a> {
    let (chosen, missing) = select::choose(inv, &cfg.devices, facts);
    let devices = chosen
        .iter()
        .map(|c| PlannedDevice {
            name: c.disk.name.clone(),
            rule: c.rule_index,
            placement: select::place(c, inv, facts, sys, cfg.headroom_percent, min_file(cfg)),
        })
        .collect();
    DryRun {
        config: cfg,
        devices,
        missing_required: missing.iter().map(|(i, _)| *i).collect(),
        schedule: PlannedSchedule {
            lanes: lanes_of(&chosen, cfg),
            mode: cfg.schedule,
        },
    }
}
