//! Discovery against real recorded device trees (`tests/fixtures/`): the libudev path under
//! `umockdev-run`, the sysfs walker under umockdev and on a materialised `--sysfs-root` tree,
//! and the udev database exports converted with the fixtures' own tool. Every storage device
//! of every fixture is asserted, and the three paths must agree.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

/// What a fixture's disk must look like. `None` means "must be absent" for speed/driver/port
/// (the recording does not hold it) — never "don't care".
#[derive(Debug, Clone)]
struct Want {
    name: &'static str,
    class: &'static str,
    speed: Option<f64>,
    driver: Option<&'static str>,
    port: Option<&'static str>,
    mmc_type: Option<&'static str>,
    emmc_area: Option<&'static str>,
    sata_spd: Option<f64>,
}

fn d(name: &'static str, class: &'static str) -> Want {
    Want {
        name,
        class,
        speed: None,
        driver: None,
        port: None,
        mmc_type: None,
        emmc_area: None,
        sata_spd: None,
    }
}
impl Want {
    fn usb(mut self, port: &'static str, speed: Option<f64>, driver: &'static str) -> Self {
        self.port = Some(port);
        self.speed = speed;
        self.driver = Some(driver);
        self
    }
    fn mmc(mut self, t: &'static str, area: Option<&'static str>) -> Self {
        self.mmc_type = Some(t);
        self.emmc_area = area;
        self
    }
    fn sata(mut self, gbps: f64) -> Self {
        self.sata_spd = Some(gbps);
        self
    }
}

fn emmc4() -> Vec<Want> {
    vec![
        d("mmcblk0", "emmc").mmc("MMC", Some("user")),
        d("mmcblk0boot0", "emmc").mmc("MMC", Some("boot0")),
        d("mmcblk0boot1", "emmc").mmc("MMC", Some("boot1")),
        d("mmcblk0rpmb", "emmc").mmc("MMC", Some("rpmb")),
    ]
}

/// `tests/fixtures/qemu/x86-e2e.umockdev` (README: tests/fixtures/qemu/README.md).
fn qemu_x86_e2e() -> Vec<Want> {
    vec![
        d("sda", "usb").usb("1-1", Some(480.0), "usb-storage"),
        d("sdb", "usb").usb("2-1", Some(12.0), "usb-storage"),
        d("sdc", "sata").sata(1.5),
        d("sdd", "usb").usb("4-1", Some(5000.0), "uas"),
        d("sde", "usb").usb("4-2", Some(5000.0), "usb-storage"),
        d("sdf", "usb").usb("3-4.1", Some(12.0), "usb-storage"),
        d("sdg", "usb").usb("3-4.1", Some(12.0), "usb-storage"),
        d("sdh", "usb").usb("4-3", Some(5000.0), "usb-storage"),
        d("mmcblk0", "sd").mmc("SD", None),
    ]
}

/// `tests/fixtures/qemu/x86-q10-6.12.umockdev`: the x86 guest on QEMU 10 and Linux 6.12.
fn qemu_x86_q10() -> Vec<Want> {
    let mut v = qemu_x86_e2e();
    let sd = v.pop().expect("the SD card sorts last");
    v.extend([d("sdi", "ufs"), d("nvme0n1", "nvme"), sd]);
    v
}

/// `tests/fixtures/qemu/arm64-e2e.umockdev`: the same devices on an aarch64 `-M virt` guest
/// (the SATA disk probed second here).
fn qemu_arm64_e2e() -> Vec<Want> {
    vec![
        d("sda", "usb").usb("1-1", Some(480.0), "usb-storage"),
        d("sdb", "sata").sata(1.5),
        d("sdc", "usb").usb("2-1", Some(12.0), "usb-storage"),
        d("sdd", "usb").usb("4-1", Some(5000.0), "uas"),
        d("sde", "usb").usb("4-2", Some(5000.0), "usb-storage"),
        d("sdf", "usb").usb("3-4.1", Some(12.0), "usb-storage"),
        d("sdg", "usb").usb("3-4.1", Some(12.0), "usb-storage"),
        d("sdh", "usb").usb("4-3", Some(5000.0), "usb-storage"),
        d("mmcblk0", "sd").mmc("SD", None),
    ]
}

/// Every fixture and every disk in it. Sources: the fixture READMEs' tables (qemu: recorded
/// speed/driver/sata_spd), the udev exports' own properties (ID_BUS, ID_USB_DRIVER, MMC_TYPE).
fn table() -> Vec<(&'static str, Vec<Want>)> {
    let qemu_x86 = vec![
        d("sda", "usb").usb("1-1", Some(480.0), "usb-storage"),
        d("sdb", "usb").usb("3-1", Some(12.0), "usb-storage"),
        d("sdc", "usb").usb("2-1", Some(12.0), "usb-storage"),
        d("sdd", "usb").usb("5-1", Some(5000.0), "uas"),
        d("sde", "usb").usb("5-2", Some(5000.0), "usb-storage"),
        d("sdf", "sata").sata(1.5),
        d("mmcblk0", "sd").mmc("SD", None),
    ];
    let qemu_arm64 = vec![
        d("sda", "usb").usb("1-1", Some(480.0), "usb-storage"),
        d("sdb", "usb").usb("2-1", Some(12.0), "usb-storage"),
        d("sdc", "usb").usb("4-1", Some(5000.0), "uas"),
        d("sdd", "usb").usb("4-2", Some(5000.0), "usb-storage"),
        d("sde", "sata").sata(1.5),
        d("mmcblk0", "sd").mmc("SD", None),
    ];
    let vostro = vec![
        d("sr0", "sata"),
        d("sda", "sata"),
        d("sdb", "sata"),
        d("sdc", "usb").usb("3-4", None, "usb-storage"),
        // A 4-LUN card reader: four disks on one port.
        d("sdd", "usb").usb("1-1.2", None, "usb-storage"),
        d("sde", "usb").usb("1-1.2", None, "usb-storage"),
        d("sdf", "usb").usb("1-1.2", None, "usb-storage"),
        d("sdg", "usb").usb("1-1.2", None, "usb-storage"),
    ];
    let hp = vec![
        d("sda", "usb").usb("8-1.3", None, "usb-storage"),
        d("sdb", "usb").usb("1-1", None, "usb-storage"),
        d("nvme0n1", "nvme"),
    ];
    let panda = vec![
        d("dm-0", "other"),
        d("sda", "usb").usb("1-1.2", None, "usb-storage"),
        d("mmcblk0", "sd").mmc("SD", None),
    ];
    let rpi4 = vec![
        d("sda", "usb").usb("2-2", None, "usb-storage"),
        d("mmcblk0", "sd").mmc("SD", None),
    ];
    let mut vesta = emmc4();
    for n in ["mtdblock0", "mtdblock1", "mtdblock2", "mtdblock3"] {
        vesta.push(d(n, "mtd"));
    }
    let mut crypto = vec![d("dm-0", "other"), d("dm-1", "other")];
    crypto.extend(emmc4().into_iter().filter(|w| w.name != "mmcblk0rpmb"));
    crypto.push(d("mmcblk1", "sd").mmc("SD", None));
    let kioxia = vec![d("sda", "usb").usb("1-1.1.2", None, "usb-storage")];
    vec![
        (
            "umockdev/systemd-storage-usb.umockdev",
            vec![
                d("sr0", "scsi"),
                d("sda", "sata"),
                d("sdb", "usb").usb("5-1", Some(480.0), "usb-storage"),
            ],
        ),
        ("qemu/x86-mixed.umockdev", qemu_x86),
        ("qemu/arm64-mixed.umockdev", qemu_arm64),
        // Recorded by `scripts/vm-e2e.sh --record` (this repository's tests/fixtures): a 2-LUN
        // stick behind QEMU's full-speed hub on xHCI (two disks, one port 3-4.1, 12M), a stick
        // on blkdebug (the harness's own output disk is left out by --record).
        ("repo/qemu/x86-e2e.umockdev", qemu_x86_e2e()),
        ("repo/qemu/arm64-e2e.umockdev", qemu_arm64_e2e()),
        // `scripts/vm-e2e.sh --kernel 6.12 --qemu 10 --record`: the x86 guest plus QEMU 10's NVMe
        // (the namespace nvme0n1 only: its hidden multipath path nvme0c0n1 is not a disk) and
        // a UFS LU on ufshcd-pci.
        ("repo/qemu/x86-q10-6.12.umockdev", qemu_x86_q10()),
        // `scripts/vm-e2e.sh --arch armv7 --qemu 10 --record`: the eMMC board (ast2600-evb, QEMU
        // 10's eMMC model with its boot partitions; the SD card is the harness's output disk).
        (
            "repo/qemu/armv7-emmc-board.umockdev",
            vec![
                d("mmcblk0", "emmc").mmc("MMC", Some("user")),
                d("mmcblk0boot0", "emmc").mmc("MMC", Some("boot0")),
                d("mmcblk0boot1", "emmc").mmc("MMC", Some("boot1")),
                d("mmcblk1", "sd").mmc("SD", None),
            ],
        ),
        ("umockdev/DELL_VOSTRO_270.storage.umockdev", vostro.clone()),
        ("umockdev/EMMC_AS_MAIN_DRIVE.storage.umockdev", emmc4()),
        (
            "umockdev/HP_ELITEBOOK_835_13_INCH_G10_RECOVERY_USB_CONNECTED.storage.umockdev",
            hp.clone(),
        ),
        ("umockdev/KIOXIA_TransMemory.umockdev", kioxia.clone()),
        ("umockdev/PANDABOARD.storage.umockdev", panda.clone()),
        ("umockdev/RPI4B4G.storage.umockdev", rpi4.clone()),
        ("umockdev/VESTA_300.storage.umockdev", vesta.clone()),
        // udevadm exports without a ready umockdev file: converted by the fixtures' tool.
        ("export/CRYPTO_FDE", crypto),
        (
            "export/DELL_LATITUDEE6430",
            vec![
                d("sr0", "sata"),
                d("sda", "sata"),
                d("sdb", "usb").usb("4-2", None, "usb-storage"),
            ],
        ),
        ("export/INTEL_NUC_SNAPPY", emmc4()),
        (
            "export/LENOVO_T430S",
            vec![d("sr0", "sata"), d("sda", "sata")],
        ),
        (
            "export/NXP_S32G_DEV_BOARD",
            vec![d("mmcblk0", "sd").mmc("SD", None)],
        ),
        ("export/QEMU_KVM", vec![d("vda", "virtio")]),
        (
            "export/RPI2_WITH_CAMERA",
            vec![d("mmcblk0", "sd").mmc("SD", None)],
        ),
        (
            "export/RPI3B",
            vec![
                d("sda", "usb").usb("1-1.3", None, "usb-storage"),
                d("mmcblk0", "sd").mmc("SD", None),
            ],
        ),
        // The ready-made umockdev files and a fresh conversion must say the same.
        ("export/DELL_VOSTRO_270", vostro),
        ("export/EMMC_AS_MAIN_DRIVE", emmc4()),
        (
            "export/HP_ELITEBOOK_835_13_INCH_G10_RECOVERY_USB_CONNECTED",
            hp,
        ),
        ("export/KIOXIA_TransMemory", kioxia),
        ("export/PANDABOARD", panda),
        ("export/RPI4B4G", rpi4),
        ("export/VESTA_300", vesta),
    ]
}

/// The umockdev file of a fixture id; exports are converted into `tmp` first.
fn fixture_file(id: &str, tmp: &Path) -> PathBuf {
    let fx = fixtures();
    if let Some(rel) = id.strip_prefix("repo/") {
        return Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(rel);
    }
    if let Some(name) = id.strip_prefix("export/") {
        let out = tmp.join(format!("{name}.umockdev"));
        let conv = Command::new("python3")
            .arg(tools().join("exportdb2umockdev.py"))
            .args(["--storage-only", "--synth-attrs"])
            .arg(fx.join(format!("udevadm-export/{name}.txt")))
            .output()
            .expect("python3 is needed to convert udevadm exports");
        assert!(
            conv.status.success(),
            "{}",
            String::from_utf8_lossy(&conv.stderr)
        );
        std::fs::write(&out, conv.stdout).unwrap();
        out
    } else {
        fx.join(id)
    }
}

fn disks(v: &Value) -> &Vec<Value> {
    v["disks"].as_array().expect("disks array")
}

fn check(id: &str, got: &Value, want: &[Want]) {
    let names: Vec<&str> = disks(got)
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    let want_names: Vec<&str> = want.iter().map(|w| w.name).collect();
    assert_eq!(names, want_names, "{id}: the disks found");
    for (g, w) in disks(got).iter().zip(want) {
        let ctx = format!("{id} {}", w.name);
        assert_eq!(g["class"], w.class, "{ctx}: class");
        let usb = &g["usb"];
        assert_eq!(usb["speed_mbps"].as_f64(), w.speed, "{ctx}: usb speed");
        assert_eq!(usb["driver"].as_str(), w.driver, "{ctx}: usb driver");
        assert_eq!(usb["port_path"].as_str(), w.port, "{ctx}: usb port");
        assert_eq!(
            g["mmc"]["card_type"].as_str(),
            w.mmc_type,
            "{ctx}: mmc type"
        );
        assert_eq!(g["mmc"]["area"].as_str(), w.emmc_area, "{ctx}: emmc area");
        assert_eq!(
            g["sata"]["sata_spd_gbps"].as_f64(),
            w.sata_spd,
            "{ctx}: sata_spd"
        );
        if w.speed.is_none() && w.port.is_some() {
            // An absent speed must come with its reason.
            let missing = g["missing"].as_array().cloned().unwrap_or_default();
            assert!(
                missing.iter().any(|m| m["field"] == "usb.speed_mbps"),
                "{ctx}: speed absent without a reason: {missing:?}"
            );
        }
    }
}

/// The inventory without the fields that name the backend itself.
fn comparable(v: &Value) -> Value {
    let mut v = v.clone();
    let o = v.as_object_mut().unwrap();
    for k in ["backend", "backend_reason", "sysfs_root"] {
        o.remove(k);
    }
    v
}

#[test]
fn acceptance_systemd_storage_usb_over_libudev() {
    require_tool("umockdev-run", "umockdev");
    let f = fixtures().join("umockdev/systemd-storage-usb.umockdev");
    let v = stdout_json(&run_bin(Some(&f), &["list", "--format", "json"]));
    assert_eq!(v["backend"], "udev");
    let sdb = disks(&v).iter().find(|d| d["name"] == "sdb").unwrap();
    assert_eq!(sdb["class"], "usb");
    assert_eq!(sdb["usb"]["speed_mbps"], 480.0);
    assert_eq!(sdb["usb"]["driver"], "usb-storage");
    assert_eq!(sdb["usb"]["vendor_id"], "1043");
    assert_eq!(sdb["usb"]["product_id"], "8012");
    assert_eq!(sdb["usb"]["version"], "2.00");
    let sda = disks(&v).iter().find(|d| d["name"] == "sda").unwrap();
    assert_eq!(sda["class"], "sata");
}

#[test]
fn every_fixture_classified_and_the_sysfs_fallback_agrees() {
    require_tool("umockdev-run", "umockdev");
    let tmp = TempDir::new("fixtures");
    let materialize = tools().join("materialize.sh");
    for (i, (id, want)) in table().into_iter().enumerate() {
        let file = fixture_file(id, tmp.path());
        let udev = stdout_json(&run_bin(
            Some(&file),
            &["list", "--all", "--format", "json"],
        ));
        assert_eq!(udev["backend"], "udev", "{id}");
        check(&format!("{id} [libudev]"), &udev, &want);

        // The pure-sysfs walker on the same umockdev testbed...
        let sysfs = stdout_json(&run_bin(
            Some(&file),
            &["list", "--all", "--format", "json", "--backend", "sysfs"],
        ));
        assert_eq!(sysfs["backend"], "sysfs", "{id}");
        assert_eq!(
            comparable(&sysfs),
            comparable(&udev),
            "{id}: sysfs walker vs libudev"
        );

        // ...and on a plain tree given with --sysfs-root.
        let dest = tmp.path().join(format!("tree{i}"));
        let m = Command::new("sh")
            .arg(&materialize)
            .arg(&file)
            .arg(&dest)
            .output()
            .unwrap();
        assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
        let root = dest.to_string_lossy().into_owned();
        let tree = stdout_json(&run_bin(
            None,
            &["list", "--all", "--format", "json", "--sysfs-root", &root],
        ));
        assert_eq!(
            comparable(&tree),
            comparable(&udev),
            "{id}: --sysfs-root vs libudev"
        );
    }
}

#[test]
fn link_check_names_the_full_speed_port() {
    require_tool("umockdev-run", "umockdev");
    let f = fixtures().join("qemu/x86-mixed.umockdev");
    let out = run_bin(
        Some(&f),
        &[
            "list",
            "--format",
            "json",
            "--expect",
            "usb:1-1=480",
            "--expect",
            "usb:2-1=480",
            "--expect",
            "usb:5-1=5000",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "a failed link check exits 1");
    let v = stdout_json(&out);
    let lc = v["link_check"].as_array().unwrap();
    assert_eq!(lc.len(), 3);
    assert_eq!(lc[0]["pass"], true);
    assert_eq!(lc[1]["pass"], false);
    assert_eq!(lc[1]["disks"][0], "sdc", "OHCI stick is sdc in x86-mixed");
    assert_eq!(lc[1]["measured_mbps"], 12.0);
    assert_eq!(lc[1]["expected_mbps"], 480.0);
    assert!(lc[1]["cause"].as_str().unwrap().contains("port 2-1"));
    assert_eq!(lc[2]["pass"], true);
}

#[test]
fn tree_shows_hubs_ports_speeds_and_disks() {
    require_tool("umockdev-run", "umockdev");
    let f = fixtures().join("qemu/x86-mixed.umockdev");
    let out = run_bin(Some(&f), &["tree"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    for line in [
        "/:  Bus 001 usb1: Class=root_hub, Driver=ehci-pci, 480M",
        "|__ Port 1 (1-1) 46f4:0001: If 0, Class=Mass Storage, Driver=usb-storage, 480M",
        "/:  Bus 002 usb2: Class=root_hub, Driver=ohci-pci, 12M",
        "|__ Port 1 (5-1) 46f4:0003: If 0, Class=Mass Storage, Driver=uas, 5000M",
        "`-> sdd  64.0 MiB  QEMU XHCI-UAS-SSD",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    // Buses in order, each root hub once.
    // x86-mixed has USB storage on usb1 (EHCI), usb2 (OHCI), usb3 (UHCI) and usb5 (xHCI).
    assert_eq!(text.matches("Class=root_hub").count(), 4, "{text}");
}

/// `scripts/vm-e2e.sh --record`: a 2-LUN stick behind a full-speed hub on an xHCI port. One link
/// finding names the port and both of its disks; the hub is what limits the chain.
#[test]
fn multi_lun_stick_behind_a_full_speed_hub() {
    require_tool("umockdev-run", "umockdev");
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qemu/x86-e2e.umockdev");
    let out = run_bin(
        Some(&f),
        &["list", "--format", "json", "--expect", "usb:3-4.1=480"],
    );
    assert_eq!(out.status.code(), Some(1), "a failed link check exits 1");
    let v = stdout_json(&out);
    let lc = v["link_check"].as_array().unwrap();
    assert_eq!(lc.len(), 1, "{lc:?}");
    assert_eq!(lc[0]["pass"], false);
    assert_eq!(lc[0]["disks"], serde_json::json!(["sdf", "sdg"]));
    assert_eq!(lc[0]["measured_mbps"], 12.0);
    assert_eq!(lc[0]["min_chain_speed_mbps"], 12.0);
    let cause = lc[0]["cause"].as_str().unwrap();
    assert!(
        cause.contains("behind hub 3-4 which itself runs at 12M"),
        "{cause}"
    );
    let sdf = &disks(&v)[5];
    assert_eq!(sdf["usb"]["hubs"][0]["port_path"], "3-4");
    assert_eq!(sdf["usb"]["hubs"][0]["speed_mbps"], 12.0);
}

/// The health record from the QEMU 10 recordings' sysfs (the ioctls are not sent
/// into a recording: each says why). The UFS health descriptor, the multipath NVMe
/// namespace's PCI function (found through its controller path `nvme0c0n1`), USB lanes, and
/// the eMMC's life time (QEMU: not defined) with no EXT_CSD asked through a boot area.
#[test]
fn health_records_of_the_qemu_10_recordings() {
    require_tool("umockdev-run", "umockdev");
    let missing = |d: &Value, field: &str| -> Vec<String> {
        d["health"]["missing"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|m| m["field"] == field)
                    .map(|m| m["reason"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let f = fixtures().join("qemu/x86-q10-6.12.umockdev");
    let v = stdout_json(&run_bin(Some(&f), &["list", "--all", "--format", "json"]));
    let by = |n: &str| disks(&v).iter().find(|d| d["name"] == n).unwrap().clone();
    let ufs = by("sdi");
    assert_eq!(
        ufs["health"]["ufs"]["host"],
        "/devices/pci0000:00/0000:00:07.0"
    );
    for f in ["ufs.pre_eol", "ufs.life_time_a", "ufs.life_time_b"] {
        assert!(missing(&ufs, f)[0].contains("0x00: not defined"), "{f}");
    }
    let nv = by("nvme0n1");
    assert_eq!(
        nv["health"]["pcie"]["function_devpath"],
        "/devices/pci0000:00/0000:00:06.0"
    );
    assert!(missing(&nv, "pcie.current_gts")[0].contains("\"Unknown\": no trained link"));
    assert!(missing(&nv, "nvme.smart")[0].contains("the sysfs tree is a recording"));
    let sata = by("sdc");
    assert!(missing(&sata, "sata.smart")[0].contains("the sysfs tree is a recording"));
    for n in ["sda", "sdb", "sdd", "sde", "sdh"] {
        let u = by(n);
        assert_eq!(u["health"]["usb"]["rx_lanes"], 1, "{n}");
        assert!(
            missing(&u, "sata.smart")[0].contains("off for USB disks"),
            "{n}"
        );
    }
    assert!(disks(&v)
        .iter()
        .all(|d| d["class"] != "virtio" || d.get("health").is_none()));

    let f = fixtures().join("qemu/armv7-emmc-board.umockdev");
    let v = stdout_json(&run_bin(Some(&f), &["list", "--all", "--format", "json"]));
    let by = |n: &str| disks(&v).iter().find(|d| d["name"] == n).unwrap().clone();
    let user = by("mmcblk0");
    assert_eq!(user["health"]["emmc"]["fwrev"], "0x0");
    assert!(missing(&user, "emmc.life_time_a")[0].contains("0x00, not defined"));
    assert!(missing(&user, "emmc.pre_eol")[0].contains("0x00, not defined"));
    for b in ["mmcblk0boot0", "mmcblk0boot1"] {
        assert!(
            missing(&by(b), "emmc.ext_csd")[0].contains("boot/RPMB area"),
            "{b}"
        );
    }
    let table = run_bin(Some(&f), &["list", "--all"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.lines().next().unwrap().contains("HEALTH"), "{text}");
}
