//! Kernel-event attribution over recorded QEMU guests: the real boot log of
//! `fixtures/qemu/meta/*-mixed.console.txt` against the keys `DeviceKeys::from_disk` derives
//! from discovery of the same guest (`qemu/*-mixed.umockdev`, through umockdev).

mod common;

use common::{fixtures, require_tool, run_bin, stdout_json};
use usbperf::discover::Inventory;
use usbperf::events::{attribute, DeviceKeys, KmsgRecord, Severity};

/// The dmesg lines of a console log as /dev/kmsg records (timestamp cut, seq = line order).
fn records(console: &str) -> Vec<KmsgRecord> {
    let text = std::fs::read_to_string(fixtures().join("qemu/meta").join(console)).unwrap();
    let recs: Vec<KmsgRecord> = text
        .lines()
        .filter_map(|l| l.strip_prefix('[')?.split_once("] "))
        .enumerate()
        .map(|(i, (ts, msg))| KmsgRecord {
            seq: i as u64 + 1,
            ts_usec: (ts.trim().parse::<f64>().unwrap() * 1e6) as u64,
            level: 6,
            facility: 0,
            message: msg.to_string(),
            subsystem: None,
            device: None,
            lost_before: 0,
        })
        .collect();
    assert!(
        recs.len() > 50,
        "{console}: only {} dmesg lines",
        recs.len()
    );
    recs
}

fn inventory(umockdev: &str) -> Inventory {
    require_tool("umockdev-run", "umockdev");
    let file = fixtures().join("qemu").join(umockdev);
    let v = stdout_json(&run_bin(
        Some(&file),
        &["list", "--all", "--format", "json"],
    ));
    serde_json::from_value(v).expect("inventory JSON")
}

/// `(disk, fatal lines, info lines)` attributed to each disk of the guest.
type Want = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
);

fn check(umockdev: &str, console: &str, want: &[Want]) {
    let inv = inventory(umockdev);
    let recs = records(console);
    assert_eq!(inv.disks.len(), want.len(), "{umockdev}: disks");
    for (name, fatal, info) in want {
        let disk = inv
            .disks
            .iter()
            .find(|d| d.name == *name)
            .unwrap_or_else(|| panic!("{umockdev}: no {name}"));
        let events = attribute(&recs, &DeviceKeys::from_disk(disk));
        let lines = |sev: Severity| -> Vec<&str> {
            events
                .iter()
                .filter(|e| e.severity == sev)
                .map(|e| e.line.as_str())
                .collect()
        };
        assert_eq!(lines(Severity::Fatal), *fatal, "{console}: {name} fatal");
        assert_eq!(lines(Severity::Info), *info, "{console}: {name} info");
    }
}

/// At boot, sd's first command gets the unit attention "Power-on or device reset occurred"
/// (drivers/scsi/scsi_error.c `scsi_report_sense`): fatal when seen during a test, and the
/// watcher only reads records written after it opened. Every other boot line of a healthy
/// guest is harmless or belongs to another device (ata2..6 link down, other buses).
#[test]
fn x86_guest_boot_log() {
    check(
        "x86-mixed.umockdev",
        "x86-mixed.console.txt",
        &[
            (
                "sda",
                &[],
                &["usb 1-1: new high-speed USB device number 2 using ehci-pci"],
            ),
            (
                "sdb",
                &[],
                &["usb 3-1: new full-speed USB device number 2 using uhci_hcd"],
            ),
            (
                "sdc",
                &[],
                &["usb 2-1: new full-speed USB device number 2 using ohci-pci"],
            ),
            (
                "sdd",
                &["sd 3:0:0:0: Power-on or device reset occurred"],
                &["usb 5-1: new SuperSpeed USB device number 2 using xhci_hcd"],
            ),
            (
                "sde",
                &[],
                &["usb 5-2: new SuperSpeed USB device number 3 using xhci_hcd"],
            ),
            ("sdf", &[], &[]),
            (
                "mmcblk0",
                &[],
                &["mmc0: new high speed SD card at address 4567"],
            ),
        ],
    );
}

#[test]
fn arm64_guest_boot_log() {
    check(
        "arm64-mixed.umockdev",
        "arm64-mixed.console.txt",
        &[
            (
                "sda",
                &["sd 0:0:0:0: Power-on or device reset occurred"],
                &["usb 1-1: new high-speed USB device number 2 using ehci-pci"],
            ),
            (
                "sdb",
                &["sd 7:0:0:0: Power-on or device reset occurred"],
                &["usb 2-1: new full-speed USB device number 2 using ohci-pci"],
            ),
            (
                "sdc",
                &["sd 8:0:0:0: Power-on or device reset occurred"],
                &["usb 4-1: new SuperSpeed USB device number 2 using xhci_hcd"],
            ),
            (
                "sdd",
                &["sd 9:0:0:0: Power-on or device reset occurred"],
                &["usb 4-2: new SuperSpeed USB device number 3 using xhci_hcd"],
            ),
            ("sde", &[], &[]),
            (
                "mmcblk0",
                &[],
                &["mmc0: new high speed SD card at address 4567"],
            ),
        ],
    );
}
