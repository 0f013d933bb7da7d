//! Owns verdicts: each threshold that applies to a device compared with its measured figures
//! and link, every shortfall turned into a reason that names the figure, the limit and the
//! rule; a device's verdict from its limits and cells, and the unit's from its devices; a
//! pass only when every check could be made and passed.

use serde::{Deserialize, Serialize};

use super::config::Threshold;
use super::select::matches;
use crate::discover::linkcheck::{self, check_links, PortExpectation};
use crate::discover::parse::speed_label;
use crate::discover::Disk;
use crate::report::schema::{CellStatus, DeviceReport};
use crate::safety::SystemFacts;
use crate::units::format_size;
use crate::workload::{BenchResult, WorkloadKind};

/// The unit's reason when the run tested no device at all: a unit whose sticks were never
/// plugged in must not pass.
pub const NO_DEVICE_TESTED: &str = "no device was tested: no disk matched the configuration's \
     device rules (plug in the devices, or select them under devices: in the config; \
     `usbperf-matrix list --all` shows every disk and why)";

/// A device's reason when none of its tests ran (no cell, or every cell skipped): nothing
/// tested is never a pass.
pub fn untested_reason(cells: &[crate::report::schema::Cell]) -> Option<String> {
    if cells.is_empty() {
        return Some("no test ran on this device: the matrix has no test (tests:)".into());
    }
    if cells.iter().all(|c| c.status == CellStatus::Skipped) {
        let why = cells
            .iter()
            .flat_map(|c| c.reasons.iter())
            .next()
            .cloned()
            .unwrap_or_default();
        return Some(format!(
            "no test ran on this device: all {} were skipped ({why})",
            cells.len()
        ));
    }
    None
}

/// Pass or fail, with every reason for a failure.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub pass: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

impl Verdict {
    pub fn from_reasons(reasons: Vec<String>) -> Verdict {
        Verdict {
            pass: reasons.is_empty(),
            reasons,
        }
    }
}

fn rule_name(i: usize, t: &Threshold) -> String {
    let mut parts = Vec::new();
    if t.select.all_non_system {
        parts.push("all_non_system".to_string());
    }
    if t.select.system_disk {
        parts.push("system_disk".to_string());
    }
    if let Some(c) = t.select.class {
        parts.push(format!("class {c}"));
    }
    if let Some(p) = &t.select.port {
        parts.push(p.clone());
    }
    if let Some(p) = &t.select.id_path {
        parts.push(format!("id_path {p}"));
    }
    if let Some(s) = &t.select.serial {
        parts.push(format!("serial {s}"));
    }
    if let Some(n) = &t.select.name {
        parts.push(n.clone());
    }
    format!("thresholds[{i}] ({})", parts.join(", "))
}

/// The thresholds that apply to a disk (its selector matches it).
pub fn applicable<'t>(
    thresholds: &'t [Threshold],
    disk: &Disk,
    facts: &SystemFacts,
) -> Vec<(usize, &'t Threshold)> {
    thresholds
        .iter()
        .enumerate()
        .filter(|(_, t)| matches(&t.select, disk, facts))
        .collect()
}

/// Checks the device-level limits: link speed (USB, SATA) and capacity.
pub fn device_reasons(disk: &Disk, rules: &[(usize, &Threshold)]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, t) in rules {
        let rule = rule_name(*i, t);
        if let Some(min) = t.min_link_mbps {
            match &disk.usb {
                Some(u) => {
                    let cause = linkcheck::cause(min, u);
                    if !cause.is_empty() {
                        out.push(format!("link: {cause} [{rule}]"));
                    }
                }
                None => out.push(format!(
                    "link: {} has no USB link, but {rule} expects at least {} [{rule}]",
                    disk.name,
                    speed_label(min)
                )),
            }
        }
        if let Some(min) = t.min_sata_gbps {
            match disk.sata.as_ref().and_then(|s| s.sata_spd_gbps) {
                Some(g) if g + 1e-9 >= min => {}
                Some(g) => out.push(format!(
                    "link: SATA link at {g:.1} Gbps, below the {min:.1} Gbps required: check the \
                     cable and connector, or a speed limit (libata.force) [{rule}]"
                )),
                None => out.push(format!(
                    "link: the SATA link speed of {} is unknown: cannot verify {min:.1} Gbps \
                     [{rule}]",
                    disk.name
                )),
            }
        }
        if let Some(min) = t.min_capacity {
            match disk.size_bytes {
                Some(b) if b >= min.0 => {}
                Some(b) => out.push(format!(
                    "capacity: {} is below the {} required [{rule}]",
                    format_size(b),
                    format_size(min.0)
                )),
                None => out.push(format!(
                    "capacity: unknown, {} required [{rule}]",
                    format_size(min.0)
                )),
            }
        }
    }
    out
}

/// Checks one test's figures against the thresholds for its workload.
pub fn result_reasons(r: &BenchResult, rules: &[(usize, &Threshold)]) -> Vec<String> {
    let mut out = Vec::new();
    let w = workload_name(r.workload);
    for (i, t) in rules {
        if t.workload.is_some_and(|tw| tw != r.workload) {
            continue;
        }
        let rule = rule_name(*i, t);
        if let Some(min) = t.min_mib_per_s {
            if r.mib_per_s < min {
                out.push(format!(
                    "{w}: {:.1} MiB/s < minimum {min} MiB/s [{rule}]",
                    r.mib_per_s
                ));
            }
        }
        if let Some(min) = t.min_iops {
            if r.iops < min {
                out.push(format!(
                    "{w}: {:.0} IOPS < minimum {min} IOPS [{rule}]",
                    r.iops
                ));
            }
        }
        if let Some(max) = t.max_p99_latency_ms {
            let p99_ms = r.all.latency.p99_ns as f64 / 1e6;
            if r.all.ios > 0 && p99_ms > max {
                out.push(format!(
                    "{w}: p99 latency {p99_ms:.1} ms > maximum {max} ms [{rule}]"
                ));
            }
        }
        if let Some(max) = t.max_stalls {
            if r.all.stalls.over_1s > max {
                out.push(format!(
                    "{w}: {} I/O(s) took over 1 s (longest {:.1} s) > maximum {max} [{rule}]",
                    r.all.stalls.over_1s,
                    r.all.stalls.longest_ns as f64 / 1e9
                ));
            }
        }
    }
    if let Some(v) = &r.verify {
        if v.mismatched_blocks > 0 {
            out.push(format!(
                "{w}: {} of {} blocks read back wrong (first at byte offset {}): the device \
                 loses or misplaces data (fake capacity or failing flash)",
                v.mismatched_blocks,
                v.blocks_checked,
                v.mismatches.first().map(|m| m.offset).unwrap_or(0)
            ));
        }
    }
    out
}

/// Judges a device whose cells ran: its link, SATA and capacity limits, every failed or
/// errored cell's reasons, and never a pass when a test did not run to the end or no test
/// ran at all. Also records each USB link check as data (`link_checks`).
pub fn judge_device(d: &mut DeviceReport, rules: &[(usize, &Threshold)]) {
    let mut reasons = device_reasons(&d.disk, rules);
    // The structured record of each link check (the reasons above say the same in words).
    if let Some(u) = &d.disk.usb {
        let expect: Vec<PortExpectation> = rules
            .iter()
            .filter_map(|(_, t)| t.min_link_mbps)
            .map(|min| PortExpectation {
                port: format!("usb:{}", u.port_path),
                min_speed_mbps: min,
            })
            .collect();
        d.link_checks = check_links(std::slice::from_ref(&d.disk), &expect);
    }
    for cell in &d.cells {
        if matches!(cell.status, CellStatus::Failed | CellStatus::Error) {
            reasons.extend(cell.reasons.iter().cloned());
        }
    }
    let unfinished = d
        .cells
        .iter()
        .filter(|c| matches!(c.status, CellStatus::Pending | CellStatus::Interrupted))
        .count();
    if unfinished > 0 {
        // An incomplete device is never a pass, whatever the tests that ran said.
        reasons.push(format!(
            "{unfinished} of {} tests did not run to the end (run interrupted)",
            d.cells.len()
        ));
    } else if let Some(r) = untested_reason(&d.cells) {
        reasons.push(r);
    }
    d.verdict = Verdict::from_reasons(reasons);
}

/// The unit's verdict: every required device that is missing, every failed device, no
/// device at all, an interrupted run (`interrupted_by`: the signal's name, when one is known).
pub fn judge_unit(
    devices: &[DeviceReport],
    missing_devices: &[String],
    interrupted: Option<Option<String>>,
) -> Verdict {
    let mut reasons: Vec<String> = missing_devices.to_vec();
    for d in devices {
        if !d.verdict.pass {
            reasons.push(format!("{}: {}", d.name, d.verdict.reasons.join("; ")));
        }
    }
    if devices.is_empty() {
        reasons.push(NO_DEVICE_TESTED.to_string());
    }
    if let Some(signal) = interrupted {
        reasons.push(format!(
            "the run was interrupted by {} before every test ran: the results are incomplete",
            signal.unwrap_or_else(|| "a signal".into())
        ));
    }
    Verdict::from_reasons(reasons)
}

pub fn workload_name(w: WorkloadKind) -> String {
    status_name(w)
}

/// The status as the report spells it (`passed`, `failed`).
pub fn status_name<T: Serialize>(s: T) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::{DeviceClass, SataLink, UsbHop, UsbLink};
    use crate::engine::{self, EngineRequest};
    use crate::workload::{self, RunOptions, WorkloadParams};

    fn rules(y: &str) -> Vec<Threshold> {
        serde_norway::from_str(y).unwrap()
    }

    fn usb_disk(speed: f64) -> Disk {
        Disk {
            name: "sda".into(),
            class: DeviceClass::Usb,
            size_bytes: Some(8 << 30),
            usb: Some(UsbLink {
                port_path: "1-1".into(),
                speed_mbps: Some(speed),
                min_chain_speed_mbps: Some(speed),
                root_hub: Some(UsbHop {
                    port_path: "usb1".into(),
                    speed_mbps: Some(480.0),
                    ..UsbHop::default()
                }),
                ..UsbLink::default()
            }),
            ..Disk::default()
        }
    }

    #[test]
    fn device_limits() {
        let t = rules(
            "- {select: {class: usb}, min_link_mbps: 480, min_capacity: 16G}\n\
             - {select: {class: sata}, min_sata_gbps: 6}\n",
        );
        let facts = SystemFacts::default();
        let good = usb_disk(480.0);
        let r = device_reasons(&good, &applicable(&t, &good, &facts));
        assert_eq!(r.len(), 1, "only capacity fails: {r:?}");
        assert!(
            r[0].starts_with("capacity: 8G is below the 16G required [thresholds[0]"),
            "{r:?}"
        );

        let slow = usb_disk(12.0);
        let r = device_reasons(&slow, &applicable(&t, &slow, &facts));
        assert!(
            r.iter().any(|x| x.contains("port 1-1 linked at 12M")),
            "{r:?}"
        );

        let mut sata = Disk {
            name: "sdb".into(),
            class: DeviceClass::Sata,
            sata: Some(SataLink {
                port: "ata1".into(),
                sata_spd_gbps: Some(3.0),
                ..SataLink::default()
            }),
            ..Disk::default()
        };
        let r = device_reasons(&sata, &applicable(&t, &sata, &facts));
        assert!(
            r[0].contains("SATA link at 3.0 Gbps, below the 6.0 Gbps"),
            "{r:?}"
        );
        sata.sata.as_mut().unwrap().sata_spd_gbps = None;
        let r = device_reasons(&sata, &applicable(&t, &sata, &facts));
        assert!(
            r[0].contains("unknown"),
            "an unknown link is not a pass: {r:?}"
        );
    }

    #[test]
    fn result_limits_on_a_real_result() {
        // A real result from the null engine (no device I/O) over a real file.
        let dir = std::env::temp_dir().join(format!("usbperf-verdict-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = WorkloadParams::defaults(WorkloadKind::RandRead, dir.join("f"));
        p.engine = EngineRequest::Null;
        p.size_bytes = Some(1 << 20);
        p.cache = crate::workload::CacheMode::Buffered;
        let sel = engine::select(EngineRequest::Null).unwrap();
        let res = workload::run(&p, &sel, &RunOptions::default()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(res.iops > 0.0);

        let t = rules(
            "- {select: {class: usb}, workload: rand-read, min_iops: 1.0e15, min_mib_per_s: 1.0e15}\n\
             - {select: {class: usb}, workload: seq-write, min_iops: 1.0e15}\n\
             - {select: {class: usb}, min_iops: 1, max_stalls: 0, max_p99_latency_ms: 60000}\n",
        );
        let d = usb_disk(480.0);
        let r = result_reasons(&res, &applicable(&t, &d, &SystemFacts::default()));
        assert_eq!(r.len(), 2, "only rule 0 applies and fails, twice: {r:?}");
        assert!(r[0].contains("MiB/s < minimum"), "{r:?}");
        assert!(
            r[1].contains("IOPS < minimum 1000000000000000 IOPS [thresholds[0] (class usb)]"),
            "{r:?}"
        );
    }
}
