//! Owns the power-cut verdict as a report: the verify phase's judgement on the device that
//! holds the test's region, with the unit's identity, so it leaves the unit through `upload`
//! and is counted by the fleet per board and part like a factory run's verdicts. The report
//! has one device, no cells and the verdict under `power_cut`; a device whose test proved
//! nothing (untested) fails, as nothing untested passes.

use std::path::Path;

use chrono::{DateTime, Utc};

use super::schema::{new_report_id, DeviceReport, Placement, Report, RunStatus, Tool};
use super::unit::UnitIdentity;
use super::verdict::{texts, Reason, ReasonKind, Verdict};
use crate::config::Config;
use crate::discover::model::{Disk, Inventory};
use crate::safety::FileTarget;
use crate::sysfs::parse::MountEntry;
use crate::workload::powercut::{self, Judgement};

/// The workload name a power-cut verdict is reported under.
pub const WORKLOAD: &str = "power-cut";

/// What the unit knows besides the verdict, read by the caller.
pub struct Facts<'a> {
    pub unit: UnitIdentity,
    pub inventory: &'a Inventory,
    /// Which enumerator produced the inventory.
    pub inventory_backend: String,
    /// The mount table, to name the filesystem a test file was on.
    pub mounts: &'a [MountEntry],
    /// `major:minor` of the target (a block device) or of its filesystem (a file).
    pub target_devnum: Option<String>,
    pub target_is_file: bool,
    /// The configuration the report says it ran under (station, phase, report settings).
    pub config: Config,
    pub finished_at: DateTime<Utc>,
}

/// The configuration a power-cut report says it ran under: no device rules or tests (the
/// verify phase judged one target), JSON into `dir`, and the station and phase of the
/// environment (`USBPERF_STATION`, `USBPERF_PHASE`; `var` reads a variable) as a run takes
/// them.
pub fn config(
    dir: &Path,
    var: impl Fn(&str) -> Option<String>,
) -> Result<Config, crate::config::ConfigError> {
    let mut layers = vec![(
        "power-cut verify".to_string(),
        crate::config::ConfigFile::default(),
    )];
    layers.extend(crate::config::environment_layers(var)?);
    let mut cfg = crate::config::resolve(layers);
    cfg.devices.clear();
    cfg.report_dir = dir.to_path_buf();
    cfg.report_format = crate::config::ReportFormat::Json;
    Ok(cfg)
}

/// The inventory's disk that is, or holds the partition that is, `devnum`.
pub fn disk_holding<'a>(inv: &'a Inventory, devnum: &str) -> Option<&'a Disk> {
    inv.disks.iter().find(|d| {
        d.devnum.as_deref() == Some(devnum)
            || d.partitions
                .iter()
                .any(|p| p.devnum.as_deref() == Some(devnum))
    })
}

/// The device's verdict: a fail names the acknowledged blocks the cut did not keep, an
/// untested one says why nothing was proven.
fn device_verdict(name: &str, v: &powercut::Verdict) -> Verdict {
    let reason = match v.verdict {
        Judgement::Pass => return Verdict::from_reasons(Vec::new()),
        Judgement::Fail => {
            let lost = v.not_kept();
            Reason::new(
                ReasonKind::PowerCut,
                format!(
                    "{WORKLOAD}: {lost} of {} acknowledged blocks not kept ({} lost, {} torn, {} \
                     misplaced, {} unreadable): {}",
                    v.acknowledged, v.lost, v.torn, v.misplaced, v.unreadable, v.reason
                ),
            )
            .figure(&crate::metric::CUT_LOST_BLOCKS, Some(lost as f64), 0.0)
        }
        Judgement::Untested => Reason::new(
            ReasonKind::NoTest,
            format!("{WORKLOAD}: untested: {}", v.reason),
        ),
    };
    Verdict::from_reasons(vec![reason.device(name)])
}

/// The report of one verify phase.
pub fn report(v: &powercut::Verdict, facts: Facts<'_>) -> Report {
    let disk = facts
        .target_devnum
        .as_deref()
        .and_then(|n| disk_holding(facts.inventory, n))
        .cloned();
    let target_name = v
        .target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| v.target.display().to_string());
    let disk = disk.unwrap_or_else(|| Disk {
        // Not in the inventory (a file on tmpfs or overlay): named by the target.
        name: target_name,
        dev_node: v.target.display().to_string(),
        ..Disk::default()
    });
    let placement = if facts.target_is_file {
        let dir = v.target.parent().unwrap_or(Path::new("/")).to_path_buf();
        let mount = crate::safety::mount_of(&dir, facts.mounts);
        Placement::File(FileTarget {
            dir,
            disk: Some(disk.name.clone()),
            mountpoint: mount.map(|m| m.mountpoint.clone()).unwrap_or_default(),
            fstype: mount.map(|m| m.fstype.clone()).unwrap_or_default(),
            free_bytes: 0,
            headroom_bytes: 0,
            max_file_bytes: v.blocks * v.block_bytes,
        })
    } else {
        Placement::RawWrite
    };
    let verdict = device_verdict(&disk.name, v);
    let unit_verdict = if verdict.pass {
        Verdict::from_reasons(Vec::new())
    } else {
        Verdict::from_reasons(vec![Reason::new(
            ReasonKind::DeviceFailed,
            format!("{}: {}", disk.name, texts(&verdict.reasons).join("; ")),
        )
        .device(&disk.name)])
    };
    let started_at = DateTime::parse_from_rfc3339(&v.started)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or(facts.finished_at);
    Report {
        schema_version: super::schema::SCHEMA_VERSION,
        report_id: Some(new_report_id()),
        tool: Tool::this(),
        started_at,
        finished_at: Some(facts.finished_at),
        status: RunStatus::Complete,
        interrupted_by: None,
        exit_code: Some(v.verdict.exit() as u8),
        unit: facts.unit,
        config: facts.config,
        inventory_backend: facts.inventory_backend,
        devices: vec![DeviceReport {
            name: disk.name.clone(),
            label: None,
            rule: 0,
            disk,
            placement,
            link_checks: Vec::new(),
            cells: Vec::new(),
            power_cut: Some(v.clone()),
            verdict,
        }],
        missing_devices: Vec::new(),
        verdict: unit_verdict,
        warnings: Vec::new(),
        schedule: None,
        flash: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::model::Partition;
    use crate::report::wire;
    use std::path::PathBuf;

    fn verdict(j: Judgement, lost: u64, torn: u64) -> powercut::Verdict {
        powercut::Verdict {
            format: "usbperf-power-cut".into(),
            version: 1,
            verdict: j,
            target: PathBuf::from("/dev/sda"),
            block_bytes: 4096,
            blocks: 256,
            acknowledged: 100,
            write_complete: false,
            intact: 100 - lost - torn,
            lost,
            torn,
            misplaced: 0,
            unreadable: 0,
            written_unacknowledged: 0,
            never_written: 156,
            lost_ranges: Vec::new(),
            torn_ranges: Vec::new(),
            reason: "as judged".into(),
            started: "2026-12-01T10:00:00Z".into(),
        }
    }

    fn inventory() -> Inventory {
        Inventory {
            disks: vec![Disk {
                name: "sda".into(),
                devnum: Some("8:0".into()),
                model: Some("Stick".into()),
                partitions: vec![Partition {
                    name: "sda1".into(),
                    devnum: Some("8:1".into()),
                    ..Partition::default()
                }],
                ..Disk::default()
            }],
            ..Inventory::default()
        }
    }

    fn report_of(v: &powercut::Verdict, devnum: Option<&str>) -> Report {
        let inv = inventory();
        report(
            v,
            Facts {
                unit: UnitIdentity {
                    serial: Some("U1".into()),
                    ..UnitIdentity::default()
                },
                inventory: &inv,
                inventory_backend: "sysfs".into(),
                mounts: &[],
                target_devnum: devnum.map(str::to_string),
                target_is_file: false,
                config: config(Path::new("/r"), |_| None).unwrap(),
                finished_at: DateTime::parse_from_rfc3339("2026-12-01T10:05:00Z")
                    .unwrap()
                    .with_timezone(&Utc),
            },
        )
    }

    #[test]
    fn the_disk_is_the_one_that_is_or_holds_the_target() {
        let inv = inventory();
        for (devnum, want) in [("8:0", Some("sda")), ("8:1", Some("sda")), ("9:9", None)] {
            let got = disk_holding(&inv, devnum).map(|d| d.name.as_str());
            assert_eq!(got, want, "{devnum}");
        }
    }

    /// Each judgement's verdicts, exit code and fleet figure; untested passes nothing.
    #[test]
    fn each_judgement_is_a_verdict_a_reason_and_a_fleet_figure() {
        // (judgement, lost, torn, device and unit pass, reason kind, exit code, fleet figure)
        let cases = [
            (Judgement::Pass, 0, 0, true, None, 0, Some((0.0, true))),
            (
                Judgement::Fail,
                3,
                2,
                false,
                Some(ReasonKind::PowerCut),
                1,
                Some((5.0, false)),
            ),
            (
                Judgement::Untested,
                0,
                0,
                false,
                Some(ReasonKind::NoTest),
                4,
                None,
            ),
        ];
        for (j, lost, torn, pass, kind, exit, figure) in cases {
            let r = report_of(&verdict(j, lost, torn), Some("8:1"));
            let d = &r.devices[0];
            assert_eq!(
                (d.name.as_str(), d.verdict.pass, r.verdict.pass),
                ("sda", pass, pass)
            );
            assert_eq!(d.verdict.reasons.first().map(|r| r.kind), kind, "{j:?}");
            assert_eq!(r.exit_code, Some(exit), "{j:?}");
            assert_eq!(r.started_at.to_rfc3339(), "2026-12-01T10:00:00+00:00");
            if !pass {
                assert!(
                    r.verdict.reasons[0].text.starts_with("sda: power-cut: "),
                    "{j:?}"
                );
            }
            // What leaves the unit reads back through the one reader and the fleet.
            for json in [true, false] {
                let bytes = r.encode(json).unwrap();
                let name = if json { "r.json" } else { "r.yaml" };
                let back = wire::read_to_store(Path::new(name), &bytes).unwrap();
                let p = back.devices[0].power_cut.as_ref().unwrap();
                assert_eq!(p.lost_blocks(), lost + torn);
                let rec = match crate::fleet::records::extract_bytes(Path::new(name), &bytes) {
                    Ok(crate::fleet::records::Extracted::Record(rec)) => rec,
                    other => panic!("{other:?}"),
                };
                let got = rec.devices[0]
                    .values
                    .iter()
                    .find(|(m, _, _)| m == "power-cut.lost_blocks")
                    .map(|(_, v, ok)| (*v, *ok));
                assert_eq!(got, figure, "{j:?} json={json}");
                assert_eq!(rec.pass, pass);
            }
        }
    }

    #[test]
    fn a_target_outside_the_inventory_is_named_by_itself() {
        let r = report_of(&verdict(Judgement::Pass, 0, 0), None);
        assert_eq!(r.devices[0].name, "sda");
        assert_eq!(r.devices[0].disk.dev_node, "/dev/sda");
        assert_eq!(r.devices[0].disk.devnum, None);
    }
}
