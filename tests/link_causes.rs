//! The root cause of a slow USB link, one cause per row, over recorded device trees: the x86
//! guest on QEMU 10 and Linux 6.12 (tests/fixtures/qemu/x86-q10-6.12.umockdev), replayed by
//! umockdev as recorded, and the same tree materialized and edited where QEMU cannot show a
//! cause (each edit is said at its row).

mod common;

use std::os::unix::fs::symlink;
use std::path::Path;

use common::*;
use serde_json::Value;

fn findings(v: &Value) -> Vec<Value> {
    v["link_check"].as_array().expect("link_check").clone()
}

fn finding<'a>(all: &'a [Value], port: &str) -> &'a Value {
    all.iter()
        .find(|f| f["port"] == port)
        .unwrap_or_else(|| panic!("no finding for {port}: {all:?}"))
}

fn list(umockdev: Option<&Path>, extra: &[&str]) -> Value {
    let mut args = vec!["list", "--format", "json"];
    args.extend_from_slice(extra);
    let out = run_bin(umockdev, &args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed link check exits 1: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout_json(&out)
}

/// As recorded (libudev under umockdev): QEMU's controllers and its full-speed hub.
#[test]
fn causes_on_the_recorded_guest() {
    require_tool("umockdev-run", "umockdev");
    let f = fixtures().join("qemu/x86-q10-6.12.umockdev");
    let v = list(
        Some(&f),
        &[
            "--expect",
            "usb:2-1=480",
            "--expect",
            "usb:3-4.1=480",
            "--expect",
            "usb:4-1=10000",
            "--expect",
            "usb:1-1=5000",
        ],
    );
    let all = findings(&v);
    // port, cause, words
    let rows = [
        // A high-speed stick on QEMU's OHCI controller: the port itself gives 12M only.
        (
            "usb:2-1",
            "port-limit",
            "the port's controller runs at 12M only (root hub usb2, driver ohci-pci)",
        ),
        // QEMU's usb-hub is a full-speed hub: the stick behind it is limited by the hub.
        (
            "usb:3-4.1",
            "slow-hub",
            "behind hub 3-4 which itself runs at 12M",
        ),
        // QEMU's usb-bot on xHCI lists SuperSpeed (5 Gbit/s) and nothing faster in its BOS
        // descriptor: 10000M is beyond the device.
        (
            "usb:4-1",
            "device-limit",
            "5000M is this device's maximum (bcdUSB 3.00, and its BOS descriptor lists \
             nothing faster): not a board fault",
        ),
        // QEMU's usb-bot on EHCI says bcdUSB 2.00 and has no BOS descriptor: a USB 2.0
        // device, whatever the port (EHCI has no SuperSpeed side either).
        (
            "usb:1-1",
            "device-limit",
            "480M is this device's maximum (bcdUSB 2.00): not a board fault; the profile \
             requires 5000M on this port, so test the port with a SuperSpeed stick",
        ),
    ];
    for (port, cause, says) in rows {
        let f = finding(&all, port);
        assert_eq!(f["pass"], false, "{f}");
        assert_eq!(f["cause_kind"], cause, "{port}: {f}");
        let text = f["cause"].as_str().unwrap();
        assert!(text.contains(says), "{port}: {text}");
    }
    let sdd = v["disks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["usb"]["port_path"] == "4-1")
        .unwrap();
    assert_eq!(sdd["usb"]["capable_mbps"], 5000.0, "{sdd}");
    assert_eq!(sdd["usb"]["capable_from_bos"], true, "{sdd}");
}

/// The same tree materialized and edited, read by the sysfs walker: what QEMU cannot show.
#[test]
fn causes_on_edited_trees() {
    require_tool("umockdev-run", "umockdev");
    let tmp = TempDir::new("link-causes");
    let m = std::process::Command::new("sh")
        .arg(tools().join("materialize.sh"))
        .arg(fixtures().join("qemu/x86-q10-6.12.umockdev"))
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let sys = tmp.path().join("sys");
    let xhci = sys.join("devices/pci0000:00/0000:00:05.0");
    let stick = xhci.join("usb4/4-1");
    // Edit: the SuperSpeed stick 4-1 came up at high speed (`speed` 480, `bcdUSB` 2.10 as a
    // USB 3 device reports at high speed; its BOS descriptor still lists SuperSpeed), and its
    // port has the links a live kernel has: `port`, and that port's SuperSpeed twin `peer`.
    std::fs::write(stick.join("speed"), "480\n").unwrap();
    std::fs::write(stick.join("version"), " 2.10\n").unwrap();
    let port = xhci.join("usb4/4-0:1.0/usb4-port1");
    std::fs::create_dir_all(&port).unwrap();
    symlink("../4-0:1.0/usb4-port1", stick.join("port")).unwrap();
    symlink("../../../usb3/3-0:1.0/usb3-port1", port.join("peer")).unwrap();
    // Edit: the same for the BOT stick 4-2, on a port without a twin (a USB 2 only port).
    let other = xhci.join("usb4/4-2");
    std::fs::write(other.join("speed"), "480\n").unwrap();
    std::fs::create_dir_all(xhci.join("usb4/4-0:1.0/usb4-port2")).unwrap();
    symlink("../4-0:1.0/usb4-port2", other.join("port")).unwrap();

    let root = sys.to_string_lossy().into_owned();
    let v = list(
        None,
        &[
            "--sysfs-root",
            &root,
            "--expect",
            "usb:4-1=5000",
            "--expect",
            "usb:4-2=5000",
        ],
    );
    let all = findings(&v);
    let f = finding(&all, "usb:4-1");
    assert_eq!(f["cause_kind"], "superspeed-lanes", "{f}");
    let text = f["cause"].as_str().unwrap();
    assert!(
        text.contains(
            "a SuperSpeed device came up on the port's USB 2 lines although the port has \
             SuperSpeed lanes (usb3-port1): the cable, the connector or the port's SuperSpeed \
             lanes"
        ),
        "{text}"
    );
    let f = finding(&all, "usb:4-2");
    assert_eq!(f["cause_kind"], "port-limit", "{f}");
    assert!(
        f["cause"]
            .as_str()
            .unwrap()
            .contains("port usb4-port2 has no SuperSpeed twin"),
        "{f}"
    );
    let d = v["disks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["usb"]["port_path"] == "4-1")
        .unwrap();
    assert_eq!(d["usb"]["port"], "usb4-port1", "{d}");
    assert_eq!(d["usb"]["port_peer"], "usb3-port1", "{d}");
}
