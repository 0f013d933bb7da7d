//! A damaged or partial sysfs tree never panics: each unreadable, missing or malformed
//! attribute leaves its field absent with the reason in `missing`.

mod common;

use std::fs;
use std::process::Command;

use common::*;
use serde_json::Value;

#[test]
fn absent_unreadable_and_malformed_attributes_are_reported_not_fatal() {
    require_tool("umockdev-run", "umockdev");
    let tmp = TempDir::new("damaged");
    let fx = fixtures();
    let m = Command::new("sh")
        .arg(tools().join("materialize.sh"))
        .arg(fx.join("qemu/x86-mixed.umockdev"))
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let sys = tmp.path().join("sys");
    let ehci = sys.join("devices/pci0000:00/0000:00:03.0/usb1/1-1");
    let sda = ehci.join("1-1:1.0/host0/target0:0:0/0:0:0:0/block/sda");

    // Absent: the USB speed of the EHCI stick.
    fs::remove_file(ehci.join("speed")).unwrap();
    // Unreadable: a directory where the size file should be (read fails with EISDIR).
    fs::remove_file(sda.join("size")).unwrap();
    fs::create_dir(sda.join("size")).unwrap();
    // Malformed: garbage in a flag.
    fs::write(sda.join("queue/rotational"), "maybe\n").unwrap();
    // The whole mmc card directory of mmcblk0 is unreadable as a device: no type attribute.
    let mmc_card = sys.join("devices/pci0000:00/0000:00:07.0/mmc_host/mmc0/mmc0:4567");
    fs::remove_file(mmc_card.join("type")).unwrap();
    let uevent = fs::read_to_string(mmc_card.join("uevent")).unwrap();
    let stripped: String = uevent
        .lines()
        .filter(|l| !l.starts_with("MMC_TYPE="))
        .map(|l| format!("{l}\n"))
        .collect();
    fs::write(mmc_card.join("uevent"), stripped).unwrap();

    let root = sys.to_string_lossy().into_owned();
    let out = run_bin(
        None,
        &[
            "list",
            "--format",
            "json",
            "--sysfs-root",
            &root,
            "--expect",
            "usb:1-1=480",
        ],
    );
    // The link of 1-1 can no longer be verified: that is a failed check, not a pass.
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = stdout_json(&out);
    let disks = v["disks"].as_array().unwrap();
    let sda = disks.iter().find(|d| d["name"] == "sda").unwrap();
    let missing = |d: &Value, field: &str| -> String {
        d["missing"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["field"] == field)
            .unwrap_or_else(|| panic!("no reason for {field}: {d:#}"))["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(sda["usb"]["speed_mbps"].is_null());
    assert!(missing(sda, "usb.speed_mbps").contains("not present"));
    assert!(sda["size_bytes"].is_null());
    assert!(missing(sda, "size_bytes").contains("unreadable"));
    assert!(sda["rotational"].is_null());
    assert!(missing(sda, "rotational").contains("malformed: \"maybe\""));
    // The rest of sda is intact.
    assert_eq!(sda["usb"]["driver"], "usb-storage");
    assert_eq!(sda["removable"], true);

    let mmc = disks.iter().find(|d| d["name"] == "mmcblk0").unwrap();
    assert_eq!(
        mmc["class"], "other",
        "an MMC card of unknown type is not guessed"
    );
    assert!(missing(mmc, "mmc.card_type").contains("type"));

    let lc = &v["link_check"][0];
    assert_eq!(lc["pass"], false);
    assert!(lc["cause"].as_str().unwrap().contains("unknown"), "{lc}");
}
