//! Owns which disks a run tests and where their tests may write: selectors matched against the
//! inventory (first matching rule claims a disk), required devices, and each disk's placement
//! (a test directory, read-only raw, or raw writes) decided by the safety rules.

use std::path::Path;

use crate::config::{DeviceRule, Selector, TargetSpec};
use crate::discover::{DeviceClass, Disk, Inventory, SysfsRoot};
pub use crate::report::schema::Placement;
use crate::safety::{self, Refusal, SystemFacts, SYSTEM_MOUNTS};

/// Does `sel` match `disk`? Every field given must match.
pub fn matches(sel: &Selector, disk: &Disk, facts: &SystemFacts) -> bool {
    if sel.all_non_system {
        let eligible = !matches!(disk.class, DeviceClass::Loop | DeviceClass::Other)
            && disk.size_bytes.unwrap_or(0) > 0
            && safety::system_reasons(disk, facts).is_empty();
        if !eligible {
            return false;
        }
    }
    if sel.system_disk && !holds_root(disk, facts) {
        return false;
    }
    if let Some(c) = sel.class {
        if disk.class != c {
            return false;
        }
    }
    if let Some(p) = &sel.port {
        let port = p.strip_prefix("usb:").unwrap_or(p);
        if disk.usb.as_ref().map(|u| u.port_path.as_str()) != Some(port) {
            return false;
        }
    }
    if let Some(want) = &sel.id_path {
        let ok = disk.id_path.as_deref().is_some_and(|id| {
            id == want || id.starts_with(&format!("{want}:")) || id.starts_with(&format!("{want}-"))
        });
        if !ok {
            return false;
        }
    }
    if let Some(s) = &sel.serial {
        let usb_serial = disk.usb.as_ref().and_then(|u| u.serial.as_deref());
        if disk.serial.as_deref() != Some(s.as_str()) && usb_serial != Some(s.as_str()) {
            return false;
        }
    }
    if let Some(n) = &sel.name {
        if &disk.name != n {
            return false;
        }
    }
    true
}

/// Does the disk (or one of its partitions) hold the root filesystem `/`?
pub fn holds_root(disk: &Disk, facts: &SystemFacts) -> bool {
    let devnums: Vec<&str> = disk
        .devnum
        .iter()
        .chain(disk.partitions.iter().filter_map(|p| p.devnum.as_ref()))
        .map(String::as_str)
        .collect();
    facts
        .mounts
        .iter()
        .filter(|m| m.mountpoint == "/")
        .any(|m| {
            let src = m.source.trim_start_matches("/dev/");
            devnums.contains(&m.devnum.as_str())
                || src == disk.name
                || disk.partitions.iter().any(|p| p.name == src)
        })
}

/// A disk chosen for testing, with the rule that chose it.
#[derive(Debug, Clone)]
pub struct Chosen {
    pub disk: Disk,
    pub rule_index: usize,
    pub rule: DeviceRule,
}

/// Picks the disks to test: each disk goes to the first rule that matches it. Returns the
/// chosen disks and the required rules that matched nothing.
pub fn choose(
    inv: &Inventory,
    rules: &[DeviceRule],
    facts: &SystemFacts,
) -> (Vec<Chosen>, Vec<(usize, DeviceRule)>) {
    let mut chosen = Vec::new();
    let mut hit = vec![false; rules.len()];
    for d in &inv.disks {
        if let Some((i, r)) = rules
            .iter()
            .enumerate()
            .find(|(_, r)| matches(&r.select, d, facts))
        {
            hit[i] = true;
            chosen.push(Chosen {
                disk: d.clone(),
                rule_index: i,
                rule: r.clone(),
            });
        }
    }
    let missing = rules
        .iter()
        .enumerate()
        .filter(|(i, r)| r.required && !hit[*i])
        .map(|(i, r)| (i, r.clone()))
        .collect();
    (chosen, missing)
}

/// Decides the placement of a chosen disk. `min_file_bytes` is the largest test file the
/// matrix needs (clamped later to the room the headroom leaves).
pub fn place(
    c: &Chosen,
    inv: &Inventory,
    facts: &SystemFacts,
    sys: &SysfsRoot,
    headroom_percent: u8,
    min_file_bytes: u64,
) -> Placement {
    let disk = &c.disk;
    let refused = |rs: Vec<Refusal>| Placement::Refused {
        refusals: rs.iter().map(|r| r.to_string()).collect(),
    };
    match &c.rule.target {
        TargetSpec::ReadOnly => Placement::RawRead {
            why: "target: read-only".into(),
        },
        TargetSpec::Raw => match safety::check_raw_write(disk, facts)
            .and_then(|()| safety::check_stacked(sys, disk, inv, facts))
        {
            Ok(()) => Placement::RawWrite,
            Err(rs) => refused(rs),
        },
        TargetSpec::Dir(dir) => {
            let placed = match safety::check_file_dir(
                dir,
                facts,
                inv,
                headroom_percent,
                0,
                min_file_bytes,
            ) {
                Ok(ft) if ft.disk.as_deref() == Some(disk.name.as_str()) => Ok(ft),
                Ok(ft) => Err(Refusal::Directory(
                    dir.display().to_string(),
                    format!(
                        "is on {} ({}), not on the selected disk {}",
                        ft.disk.as_deref().unwrap_or("an unknown device"),
                        ft.mountpoint,
                        disk.name
                    ),
                )),
                Err(r) => Err(r),
            };
            match placed {
                Ok(ft) => Placement::File(ft),
                // The system disk through scratch files is the default rule, not something a
                // board asked for: on a read-only rootfs, or with /var/lib on tmpfs, its write
                // tests are not applicable (read-only tests still run) rather than a failure
                // of every good unit. A board that needs them names its eMMC by class.
                Err(r) if c.rule.select.system_disk => Placement::RawRead {
                    why: format!("the system disk's scratch directory cannot take test files: {r}"),
                },
                Err(r) => refused(vec![r]),
            }
        }
        TargetSpec::Auto => auto(disk, inv, facts, headroom_percent, min_file_bytes),
    }
}

/// A writable, non-system filesystem of the disk if there is one with room; else read-only.
fn auto(
    disk: &Disk,
    inv: &Inventory,
    facts: &SystemFacts,
    headroom_percent: u8,
    min_file_bytes: u64,
) -> Placement {
    let mounts = disk
        .mounts
        .iter()
        .chain(disk.partitions.iter().flat_map(|p| p.mounts.iter()));
    let mut why = Vec::new();
    for m in mounts {
        if m.read_only {
            why.push(format!("{} is mounted read-only", m.mountpoint));
            continue;
        }
        if SYSTEM_MOUNTS.contains(&m.mountpoint.as_str()) {
            why.push(format!("{} is a system filesystem", m.mountpoint));
            continue;
        }
        match safety::check_file_dir(
            Path::new(&m.mountpoint),
            facts,
            inv,
            headroom_percent,
            0,
            min_file_bytes,
        ) {
            Ok(ft) => return Placement::File(ft),
            Err(r) => why.push(r.to_string()),
        }
    }
    if why.is_empty() {
        why.push(format!(
            "{} has no mounted filesystem and raw writes were not asked for (target: raw)",
            disk.name
        ));
    }
    Placement::RawRead {
        why: why.join("; "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::{Partition, UsbLink};

    fn usb(name: &str, port: &str, serial: &str) -> Disk {
        Disk {
            name: name.into(),
            class: DeviceClass::Usb,
            size_bytes: Some(1 << 30),
            serial: Some(serial.into()),
            id_path: Some(format!(
                "platform-xhci-usb-0:{}:1.0-scsi-0:0:0:0",
                &port[2..]
            )),
            usb: Some(UsbLink {
                port_path: port.into(),
                ..UsbLink::default()
            }),
            ..Disk::default()
        }
    }

    fn sel(y: &str) -> Selector {
        serde_norway::from_str(y).unwrap()
    }

    #[test]
    fn selectors() {
        let facts = SystemFacts::default();
        let a = usb("sda", "1-1", "AAA");
        let b = usb("sdb", "1-1.2", "BBB");
        let emmc = Disk {
            name: "mmcblk2".into(),
            class: DeviceClass::Emmc,
            size_bytes: Some(16 << 30),
            devnum: Some("179:0".into()),
            partitions: vec![Partition {
                name: "mmcblk2p2".into(),
                devnum: Some("179:2".into()),
                ..Partition::default()
            }],
            ..Disk::default()
        };
        let lo = Disk {
            name: "loop0".into(),
            class: DeviceClass::Loop,
            size_bytes: Some(1 << 20),
            ..Disk::default()
        };
        let table: &[(&str, &Disk, bool)] = &[
            ("{port: 'usb:1-1'}", &a, true),
            ("{port: 'usb:1-1'}", &b, false),
            ("{class: usb, serial: BBB}", &b, true),
            ("{class: sata, serial: BBB}", &b, false),
            ("{id_path: platform-xhci-usb-0:1}", &a, true),
            ("{id_path: platform-xhci-usb-0:1}", &b, false),
            ("{name: mmcblk2}", &emmc, true),
            ("{all_non_system: true}", &a, true),
            ("{all_non_system: true}", &lo, false),
            ("{all_non_system: true}", &emmc, true),
        ];
        for (y, d, want) in table {
            assert_eq!(matches(&sel(y), d, &facts), *want, "{y} on {}", d.name);
        }
        // The same eMMC holding / is a system disk: never picked by all_non_system.
        let facts = SystemFacts {
            mounts: crate::discover::parse::mountinfo(
                "1 0 179:2 / / rw - ext4 /dev/mmcblk2p2 rw\n",
            ),
            ..SystemFacts::default()
        };
        assert!(!matches(&sel("{all_non_system: true}"), &emmc, &facts));
        // ...but an explicit selector still chooses it (file tests; raw writes are refused).
        assert!(matches(&sel("{name: mmcblk2}"), &emmc, &facts));
        // system_disk picks exactly the disk holding /.
        assert!(matches(&sel("{system_disk: true}"), &emmc, &facts));
        assert!(!matches(&sel("{system_disk: true}"), &a, &facts));
        assert!(!matches(
            &sel("{system_disk: true}"),
            &emmc,
            &SystemFacts::default()
        ));
    }

    #[test]
    fn a_refused_scratch_dir_of_the_system_disk_is_read_only_not_a_failure() {
        let inv = Inventory::default();
        let disk = usb("sda", "1-1", "A");
        let rule = |system_disk: bool| DeviceRule {
            select: Selector {
                system_disk,
                name: (!system_disk).then(|| "sda".to_string()),
                ..Selector::default()
            },
            target: TargetSpec::Dir("/nonexistent/usbperf-scratch".into()),
            required: false,
            label: None,
        };
        let place_with = |r: DeviceRule| {
            let c = Chosen {
                disk: disk.clone(),
                rule_index: 0,
                rule: r,
            };
            place(
                &c,
                &inv,
                &SystemFacts::default(),
                &SysfsRoot::live(),
                10,
                1 << 20,
            )
        };
        assert!(
            matches!(place_with(rule(true)), Placement::RawRead { ref why } if why.contains("scratch directory")),
            "the default system-disk rule degrades to read-only tests"
        );
        assert!(
            matches!(place_with(rule(false)), Placement::Refused { .. }),
            "a directory the config named is still a refusal (its write tests fail)"
        );
    }

    #[test]
    fn first_rule_claims_and_required_rules_report_misses() {
        let inv = Inventory {
            disks: vec![usb("sda", "1-1", "A"), usb("sdb", "1-2", "B")],
            ..Inventory::default()
        };
        let rules: Vec<DeviceRule> = serde_norway::from_str(
            "- {select: {port: 'usb:1-2'}, label: rear, required: true}\n\
             - {select: {class: usb}}\n\
             - {select: {port: 'usb:2-1'}, required: true, label: otg}\n",
        )
        .unwrap();
        let (chosen, missing) = choose(&inv, &rules, &SystemFacts::default());
        let got: Vec<(&str, usize)> = chosen
            .iter()
            .map(|c| (c.disk.name.as_str(), c.rule_index))
            .collect();
        assert_eq!(got, vec![("sda", 1), ("sdb", 0)]);
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].1.label.as_deref(), Some("otg"));
    }
}
