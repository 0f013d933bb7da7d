//! Owns the plan of a run: which disks the configuration chooses, where each one's tests go
//! (or why it is refused), the lanes, and the required devices that are missing. `run`
//! executes it and `run --dry-run` prints it, so the two cannot place a device differently;
//! `list` shows every disk with how it is tested or why not. Nothing is created, written or
//! locked to find it.

use serde::Serialize;

use super::schedule::{self, Lane, ScheduleMode};
use super::select::{self, Chosen, Placement};
use crate::config::{Config, DeviceRule};
use crate::device::DeviceClass;
use crate::discover::{Disk, Inventory};
use crate::safety::SystemFacts;
use crate::sysfs::SysfsRoot;
use crate::workload::WorkloadKind;

/// What a run with a configuration does on a system.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The disks chosen, in the run's order.
    pub chosen: Vec<Chosen>,
    /// Where each chosen disk's tests go (or why they cannot), by the index in `chosen`.
    pub placements: Vec<Placement>,
    /// The `required` rules that matched no disk, with their index in `config.devices`.
    pub missing: Vec<(usize, DeviceRule)>,
    /// The lanes of the chosen disks, the config's `shared_lanes` joined.
    pub lanes: Vec<Lane>,
}

/// The plan for `cfg` on the system `inv`, `facts` and `sys` describe.
pub fn plan(cfg: &Config, inv: &Inventory, facts: &SystemFacts, sys: &SysfsRoot) -> Plan {
    let (chosen, missing) = select::choose(inv, &cfg.devices, facts);
    let placements = chosen
        .iter()
        .map(|c| select::place(c, inv, facts, sys, cfg.headroom_percent, min_file(cfg)))
        .collect();
    let lanes = lanes_of(&chosen, cfg);
    Plan {
        chosen,
        placements,
        missing,
        lanes,
    }
}

/// The lanes of the chosen disks, with the config's `shared_lanes` joined.
fn lanes_of(chosen: &[Chosen], cfg: &Config) -> Vec<Lane> {
    schedule::join_shared(
        schedule::lanes(
            chosen
                .iter()
                .map(|c| (c.disk.name.as_str(), c.disk.devpath.as_str())),
        ),
        &cfg.shared_lanes,
    )
}

/// The smallest test file worth placing on a filesystem: the smallest size any file test of
/// the matrix asks for, at most 16 MiB (larger sizes are clamped to the room the headroom
/// leaves, with a note in the report).
pub fn min_file(cfg: &Config) -> u64 {
    cfg.tests
        .iter()
        .filter(|t| t.workload != WorkloadKind::ReadBuffered)
        .filter_map(|t| t.size.map(|s| s.0))
        .min()
        .unwrap_or(16 << 20)
        .min(16 << 20)
}

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

/// What `run --dry-run` prints for `cfg` on the system `inv`, `facts` and `sys` describe:
/// the plan `run` executes.
pub fn dry_run<'a>(
    cfg: &'a Config,
    inv: &Inventory,
    facts: &SystemFacts,
    sys: &SysfsRoot,
) -> DryRun<'a> {
    plan(cfg, inv, facts, sys).shown(cfg)
}

impl Plan {
    /// The plan as `run --dry-run` prints it.
    pub fn shown<'a>(&self, cfg: &'a Config) -> DryRun<'a> {
        DryRun {
            config: cfg,
            devices: self
                .chosen
                .iter()
                .zip(&self.placements)
                .map(|(c, placement)| PlannedDevice {
                    name: c.disk.name.clone(),
                    rule: c.rule_index,
                    placement: placement.clone(),
                })
                .collect(),
            missing_required: self.missing.iter().map(|(i, _)| *i).collect(),
            schedule: PlannedSchedule {
                lanes: self.lanes.clone(),
                mode: cfg.schedule,
            },
        }
    }
}

/// What a run with this configuration does with one disk of the inventory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiskPlan {
    pub name: String,
    pub tested: bool,
    /// The `devices:` rule that chose it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<usize>,
    /// `files`, `raw-read`, `raw-write`, or `no`.
    pub how: &'static str,
    /// In words: where the tests go, or why the disk is left out.
    pub detail: String,
}

/// Every disk of `inv`, chosen or not, with how a run with `cfg` tests it or why it does not.
pub fn every_disk(
    cfg: &Config,
    inv: &Inventory,
    facts: &SystemFacts,
    sys: &SysfsRoot,
) -> Vec<DiskPlan> {
    let (chosen, _) = select::choose(inv, &cfg.devices, facts);
    inv.disks
        .iter()
        .map(|d| match chosen.iter().find(|c| c.disk.name == d.name) {
            Some(c) => {
                let place = select::place(c, inv, facts, sys, cfg.headroom_percent, min_file(cfg));
                let (how, detail) = match &place {
                    Placement::File(f) => (
                        "files",
                        format!(
                            "test files in {} ({} on {})",
                            f.dir.display(),
                            f.fstype,
                            f.mountpoint
                        ),
                    ),
                    Placement::RawRead { why } => (
                        "raw-read",
                        format!("read tests on the device; no writes: {why}"),
                    ),
                    Placement::RawWrite => {
                        ("raw-write", "read and write tests on the device".into())
                    }
                    Placement::Refused { refusals } => (
                        "raw-read",
                        format!(
                            "read tests on the device; writes refused: {}",
                            refusals.join("; ")
                        ),
                    ),
                };
                DiskPlan {
                    name: d.name.clone(),
                    tested: true,
                    rule: Some(c.rule_index),
                    how,
                    detail,
                }
            }
            None => DiskPlan {
                name: d.name.clone(),
                tested: false,
                rule: None,
                how: "no",
                detail: left_out(d, facts),
            },
        })
        .collect()
}

/// Why no `devices:` rule took a disk, in the words of the rule that usually would.
fn left_out(d: &Disk, facts: &SystemFacts) -> String {
    let system: Vec<String> = crate::safety::system_reasons(d, facts)
        .iter()
        .map(|r| r.to_string())
        .collect();
    if !system.is_empty() {
        return format!("a system disk: {}", system.join("; "));
    }
    match d.class {
        DeviceClass::Loop => "a loop device: name it in a `devices:` rule to test it".into(),
        DeviceClass::Other => {
            "an unknown kind of device: name it in a `devices:` rule to test it".into()
        }
        _ if d.size_bytes.unwrap_or(0) == 0 => "no medium (size 0)".into(),
        _ => "no `devices:` rule of the configuration selects it".into(),
    }
}
