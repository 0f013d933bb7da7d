//! The approved-parts check over recorded device trees: QEMU 10's eMMC on the ast2600-evb
//! (tests/fixtures/qemu/armv7-emmc-board.umockdev: CID manfid 0x0000aa, name "QEMU!!") and the
//! NVMe disk of the x86 guest (x86-q10-6.12.umockdev: model "QEMU NVMe Ctrl"), each read by
//! the sysfs walker from the materialized recording; one list that allows the part and one
//! that refuses it.

mod common;

use std::process::Command;

use common::*;
use usbperf::config::PartRule;
use usbperf::device::DeviceClass;
use usbperf::discover::{discover, Backend, Disk, SysfsRoot};
use usbperf::matrix::parts;
use usbperf::report::verdict::ReasonKind;

fn disks_of(recording: &str) -> (TempDir, Vec<Disk>) {
    require_tool("umockdev-run", "umockdev");
    let tmp = TempDir::new("parts");
    let m = Command::new("sh")
        .arg(tools().join("materialize.sh"))
        .arg(fixtures().join(recording))
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let inv = discover(&SysfsRoot::at(&tmp.path().join("sys")), Backend::Sysfs).unwrap();
    (tmp, inv.disks)
}

fn rule(yaml: &str) -> PartRule {
    serde_norway::from_str(yaml).unwrap()
}

#[test]
fn the_recorded_emmc_is_allowed_by_its_cid_and_refused_by_another() {
    let (_tmp, disks) = disks_of("qemu/armv7-emmc-board.umockdev");
    let emmc = disks
        .iter()
        .find(|d| d.class == DeviceClass::Emmc && d.name == "mmcblk0")
        .expect("the eMMC user area");
    let allowed = rule("{class: emmc, allowed: [{manfid: '0xaa', name: 'QEMU!!'}]}");
    assert_eq!(parts::check(emmc, &[allowed], None), None);
    let refused = rule(
        "{class: emmc, allowed: [{manfid: '0x15', name: 8GTF4R}, {manfid: '0x45', oemid: '0x0100'}]}",
    );
    let why = parts::check(emmc, &[refused], None).expect("a part not on the list");
    assert_eq!(why.kind, ReasonKind::Part);
    assert_eq!(why.device.as_deref(), Some("mmcblk0"));
    assert!(
        why.text.contains(
            "part: mmcblk0 is manfid 0x0000aa oemid 0x0158 name QEMU!! prv 0x1 firmware 0x0, not \
             an approved emmc part (allowed: manfid 0x15 name 8GTF4R; manfid 0x45 oemid 0x0100)"
        ),
        "{}",
        why.text
    );
    // The same part on a firmware range: QEMU's eMMC reports firmware 0x0 and prv 0x1.
    let fw = |spec: &str| {
        rule(&format!(
            "{{class: emmc, allowed: [{{manfid: '0xaa', prv: '0x01', firmware: '{spec}'}}]}}"
        ))
    };
    assert_eq!(parts::check(emmc, &[fw("0x0..0x3")], None), None);
    let why = parts::check(emmc, &[fw("0x1..")], None).expect("firmware below the range");
    assert!(
        why.text
            .contains("allowed: manfid 0xaa prv 0x01 firmware 0x1.."),
        "{}",
        why.text
    );
}

#[test]
fn the_recorded_nvme_is_allowed_by_its_model_and_refused_by_another() {
    let (_tmp, disks) = disks_of("qemu/x86-q10-6.12.umockdev");
    let nvme = disks
        .iter()
        .find(|d| d.class == DeviceClass::Nvme)
        .expect("the NVMe namespace");
    let allowed = rule("{class: nvme, allowed: [{model: QEMU NVMe Ctrl}]}");
    assert_eq!(parts::check(nvme, &[allowed], None), None);
    // QEMU 10's NVMe reports firmware_rev "10.0.2  ": a revision that is no number, given alone.
    assert_eq!(nvme.firmware.as_deref(), Some("10.0.2"));
    let same_fw = rule("{class: nvme, allowed: [{model: QEMU NVMe Ctrl, firmware: 10.0.2}]}");
    assert_eq!(parts::check(nvme, &[same_fw], None), None);
    let other_fw = rule("{class: nvme, allowed: [{model: QEMU NVMe Ctrl, firmware: 9.2.0}]}");
    let why = parts::check(nvme, &[other_fw], None).expect("another firmware");
    assert!(why.text.contains("firmware 10.0.2"), "{}", why.text);
    let refused = rule("{class: nvme, allowed: [{model: Samsung SSD 980}]}");
    let why = parts::check(nvme, &[refused], None).expect("another model");
    assert_eq!(why.kind, ReasonKind::Part);
    assert!(why.text.contains("model QEMU NVMe Ctrl"), "{}", why.text);
    assert!(
        why.text.contains("allowed: model Samsung SSD 980"),
        "{}",
        why.text
    );
    // A list for another class leaves the NVMe disk alone.
    let other = rule("{class: emmc, allowed: [{manfid: '0x15'}]}");
    assert_eq!(parts::check(nvme, &[other], None), None);
}
