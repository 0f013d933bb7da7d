//! Owns the pure parsers of sysfs, udev and procfs text: every function takes `&str` and is
//! tested table-driven, so discovery logic never depends on where the text came from.

use crate::device::{DeviceClass, EmmcArea};

// The parsers every sysfs reader needs (uevent, udev database, mountinfo, `dev`, `stat`)
// live with `SysfsRoot`; discovery's callers find them here too.
pub use crate::sysfs::parse::{
    block_stat_bytes, devnum, mountinfo, udev_db, udev_unescape, uevent, MountEntry,
};

/// A USB device's `speed` attribute in Mbit/s: `1.5`, `12`, `480`, `5000`, `10000`, `20000`
/// (Documentation/ABI/testing/sysfs-bus-usb). Wireless USB reports `53.3`..`480`.
pub fn usb_speed_mbps(s: &str) -> Option<f64> {
    let v: f64 = s.trim().parse().ok()?;
    (v.is_finite() && v > 0.0).then_some(v)
}

/// `bcdUSB` as the kernel prints it in `version` (` 2.00`, ` 3.20`).
pub fn usb_version(s: &str) -> Option<String> {
    let t = s.trim();
    let (maj, min) = t.split_once('.')?;
    (maj.parse::<u8>().is_ok() && min.len() == 2 && min.parse::<u8>().is_ok())
        .then(|| t.to_string())
}

/// The root hub's speed from its udev `PRODUCT` (`1d6b/2/606` → USB 2 → 480). Only used when
/// the `speed` attribute itself was not recorded (udev database exports).
pub fn root_hub_speed_from_product(product: &str) -> Option<f64> {
    let mut it = product.split('/');
    let vendor = it.next()?;
    let prod = u32::from_str_radix(it.next()?, 16).ok()?;
    if !vendor.eq_ignore_ascii_case("1d6b") {
        return None;
    }
    match prod {
        1 => Some(12.0),
        2 => Some(480.0),
        3 => Some(5000.0),
        _ => None,
    }
}

/// libata's `sata_spd` (`6.0 Gbps`, `<unknown>` when the link is down) in Gbit/s.
pub fn sata_spd_gbps(s: &str) -> Option<f64> {
    let num = s.trim().strip_suffix("Gbps")?.trim();
    let v: f64 = num.parse().ok()?;
    (v > 0.0).then_some(v)
}

/// Parses an unsigned decimal attribute (`size`, `removable`, block sizes).
pub fn uint(s: &str) -> Option<u64> {
    s.trim().parse().ok()
}

/// Parses a `0`/`1` flag attribute.
pub fn flag(s: &str) -> Option<bool> {
    match s.trim() {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    }
}

/// The bus timing line of the MMC debugfs `ios` file (`timing spec: 9 (mmc HS400 enhanced
/// strobe)`, drivers/mmc/core/debugfs.c) → `mmc HS400 enhanced strobe`.
pub fn mmc_ios_timing(s: &str) -> Option<String> {
    let line = s
        .lines()
        .find(|l| l.trim_start().starts_with("timing spec:"))?;
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    (close > open).then(|| line[open + 1..close].to_string())
}

/// The MMC bus clock from the same `ios` file (`clock: 200000000 Hz`).
pub fn mmc_ios_clock_hz(s: &str) -> Option<u64> {
    let line = s.lines().find(|l| l.trim_start().starts_with("clock:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Which hardware area of an eMMC a block device name is: `mmcblk0boot0`, `mmcblk0boot1`,
/// `mmcblk0rpmb`, `mmcblk0gp1` are not the user area and must never be written by tests.
pub fn emmc_area(name: &str) -> Option<EmmcArea> {
    let rest = name.strip_prefix("mmcblk")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    match &rest[digits..] {
        "" => Some(EmmcArea::User),
        "boot0" => Some(EmmcArea::Boot0),
        "boot1" => Some(EmmcArea::Boot1),
        "rpmb" => Some(EmmcArea::Rpmb),
        gp if gp.starts_with("gp") && gp[2..].parse::<u8>().is_ok() => {
            Some(EmmcArea::General(gp[2..].parse().unwrap_or(0)))
        }
        _ => None,
    }
}

/// What a device's ancestors say about its bus, in the order the classifier needs them.
#[derive(Debug, Default, Clone)]
pub struct ClassSignals<'a> {
    pub name: &'a str,
    pub devpath: &'a str,
    /// `subsystem` of every ancestor device, nearest first.
    pub ancestor_subsystems: Vec<&'a str>,
    /// The MMC card's `type` (`MMC`, `SD`, `SDIO`), or udev `MMC_TYPE`.
    pub mmc_type: Option<&'a str>,
    /// udev `ID_BUS` (`usb`, `ata`, `scsi`), when known.
    pub id_bus: Option<&'a str>,
    /// SCSI `device/vendor` (`ATA` for libata disks).
    pub scsi_vendor: Option<&'a str>,
    /// The driver bound to every ancestor that has one, nearest first.
    pub ancestor_drivers: Vec<&'a str>,
}

/// Decides the device class. USB comes first: a USB card reader or a USB-SATA bridge is
/// limited by its USB link, and that link is what the factory test has to judge.
pub fn classify(s: &ClassSignals<'_>) -> DeviceClass {
    let has = |sub: &str| s.ancestor_subsystems.contains(&sub);
    if s.name.starts_with("loop") {
        return DeviceClass::Loop;
    }
    if has("usb") || s.id_bus == Some("usb") {
        return DeviceClass::Usb;
    }
    if has("mmc") || s.name.starts_with("mmcblk") {
        return match s.mmc_type {
            Some("MMC") => DeviceClass::Emmc,
            Some("SD") => DeviceClass::Sd,
            _ => DeviceClass::Other,
        };
    }
    if has("nvme") || s.name.starts_with("nvme") {
        return DeviceClass::Nvme;
    }
    if has("virtio") || s.name.starts_with("vd") {
        return DeviceClass::Virtio;
    }
    // A UFS logical unit is a SCSI disk under a UFS host controller, whose drivers are all
    // named for it (ufshcd-pci, ufshcd-qcom, ufshcd-mtk, exynos-ufshc, ...).
    if has("scsi") && s.ancestor_drivers.iter().any(|d| d.contains("ufs")) {
        return DeviceClass::Ufs;
    }
    let libata = s.devpath.split('/').any(is_ata_port_name);
    if libata || s.id_bus == Some("ata") || s.scsi_vendor == Some("ATA") {
        return DeviceClass::Sata;
    }
    if has("scsi") {
        return DeviceClass::Scsi;
    }
    DeviceClass::Other
}

/// libata's port directories are named `ataN`.
pub fn is_ata_port_name(c: &str) -> bool {
    c.len() > 3 && c.starts_with("ata") && c[3..].bytes().all(|b| b.is_ascii_digit())
}

/// Formats a USB speed as `lsusb -t` does: `1.5M`, `12M`, `480M`, `5000M`.
pub fn speed_label(mbps: f64) -> String {
    if mbps.fract() == 0.0 {
        format!("{}M", mbps as u64)
    } else {
        format!("{mbps}M")
    }
}

/// What a negotiated USB speed is called in the USB specifications.
pub fn usb_speed_name(mbps: f64) -> &'static str {
    match mbps {
        m if m <= 1.5 => "low speed (USB 1.x)",
        m if m <= 12.0 => "full speed (USB 1.x)",
        m if m <= 480.0 => "high speed (USB 2.0)",
        m if m <= 5000.0 => "SuperSpeed (USB 3 Gen 1)",
        m if m <= 10000.0 => "SuperSpeed+ (USB 3 Gen 2)",
        _ => "SuperSpeed+ (USB 3 Gen 2x2)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usb_speeds_from_the_sysfs_abi() {
        // Documentation/ABI/testing/sysfs-bus-usb: speed in Mbit/s.
        let table: &[(&str, Option<f64>)] = &[
            ("1.5\n", Some(1.5)),
            ("12\n", Some(12.0)),
            ("480\n", Some(480.0)),
            ("5000", Some(5000.0)),
            ("10000", Some(10000.0)),
            ("20000", Some(20000.0)),
            ("", None),
            ("unknown", None),
            ("-1", None),
        ];
        for (input, want) in table {
            assert_eq!(usb_speed_mbps(input), *want, "input {input:?}");
        }
    }

    #[test]
    fn usb_versions_keep_bcd_form() {
        let table = [
            (" 2.00", Some("2.00")),
            (" 3.20\n", Some("3.20")),
            ("1.10", Some("1.10")),
            ("2", None),
            ("x.00", None),
        ];
        for (input, want) in table {
            assert_eq!(usb_version(input).as_deref(), want, "input {input:?}");
        }
    }

    #[test]
    fn root_hub_generation_from_product() {
        let table = [
            ("1d6b/2/606", Some(480.0)),
            ("1d6b/3/606", Some(5000.0)),
            ("1d6b/1/510", Some(12.0)),
            ("1D6B/0002/0510", Some(480.0)),
            ("30de/6544/1", None),
            ("garbage", None),
        ];
        for (input, want) in table {
            assert_eq!(root_hub_speed_from_product(input), want, "input {input:?}");
        }
    }

    #[test]
    fn sata_link_speeds() {
        let table = [
            ("1.5 Gbps", Some(1.5)),
            ("3.0 Gbps\n", Some(3.0)),
            ("6.0 Gbps", Some(6.0)),
            ("<unknown>", None),
            ("", None),
        ];
        for (input, want) in table {
            assert_eq!(sata_spd_gbps(input), want, "input {input:?}");
        }
    }

    #[test]
    fn emmc_areas_by_name() {
        let table = [
            ("mmcblk0", Some(EmmcArea::User)),
            ("mmcblk2boot0", Some(EmmcArea::Boot0)),
            ("mmcblk0boot1", Some(EmmcArea::Boot1)),
            ("mmcblk0rpmb", Some(EmmcArea::Rpmb)),
            ("mmcblk0gp3", Some(EmmcArea::General(3))),
            ("mmcblk0p1", None),
            ("mmcblk", None),
            ("sda", None),
        ];
        for (input, want) in table {
            assert_eq!(emmc_area(input), want, "input {input:?}");
        }
    }

    #[test]
    fn mmc_debugfs_ios() {
        // Format of drivers/mmc/core/debugfs.c mmc_ios_show().
        let ios = "clock:\t\t200000000 Hz\nactual clock:\t200000000 Hz\nvdd:\t\t21 (3.3 ~ 3.4 V)\n\
                   bus mode:\t2 (push-pull)\nchip select:\t0 (don't care)\npower mode:\t2 (on)\n\
                   bus width:\t3 (8 bits)\ntiming spec:\t10 (mmc HS400 enhanced strobe)\n";
        assert_eq!(
            mmc_ios_timing(ios).as_deref(),
            Some("mmc HS400 enhanced strobe")
        );
        assert_eq!(mmc_ios_clock_hz(ios), Some(200_000_000));
        assert_eq!(mmc_ios_timing("clock: 0 Hz"), None);
    }

    #[test]
    fn classification_rules() {
        let sig = |name, devpath, subs: Vec<&'static str>, mmc, bus, vendor| ClassSignals {
            name,
            devpath,
            ancestor_subsystems: subs,
            mmc_type: mmc,
            id_bus: bus,
            scsi_vendor: vendor,
            ancestor_drivers: vec![],
        };
        let table = [
            // A USB-SATA bridge is judged by its USB link.
            (
                sig(
                    "sda",
                    "/devices/pci/usb1/1-1/1-1:1.0/host0/t/0:0:0:0/block/sda",
                    vec!["scsi", "scsi", "scsi", "usb", "usb", "usb", "pci"],
                    None,
                    None,
                    Some("ATA"),
                ),
                DeviceClass::Usb,
            ),
            (
                sig(
                    "sdb",
                    "/devices/pci/0000:00:1f.2/ata1/host0/t/0:0:0:0/block/sdb",
                    vec!["scsi", "scsi", "scsi", "pci"],
                    None,
                    None,
                    Some("ATA"),
                ),
                DeviceClass::Sata,
            ),
            (
                sig(
                    "sda",
                    "/devices/x/block/sda",
                    vec![],
                    None,
                    Some("ata"),
                    None,
                ),
                DeviceClass::Sata,
            ),
            (
                sig(
                    "mmcblk0",
                    "/devices/x/mmc0:0001/block/mmcblk0",
                    vec!["mmc", "mmc_host"],
                    Some("MMC"),
                    None,
                    None,
                ),
                DeviceClass::Emmc,
            ),
            (
                sig(
                    "mmcblk1",
                    "/devices/x/mmc1:aaaa/block/mmcblk1",
                    vec!["mmc", "mmc_host"],
                    Some("SD"),
                    None,
                    None,
                ),
                DeviceClass::Sd,
            ),
            (
                sig(
                    "nvme0n1",
                    "/devices/pci/nvme/nvme0/nvme0n1",
                    vec!["nvme", "pci"],
                    None,
                    None,
                    None,
                ),
                DeviceClass::Nvme,
            ),
            (
                sig(
                    "vda",
                    "/devices/pci/virtio0/block/vda",
                    vec!["virtio", "pci"],
                    None,
                    None,
                    None,
                ),
                DeviceClass::Virtio,
            ),
            (
                sig(
                    "sdc",
                    "/devices/pci/host2/t/2:0:0:0/block/sdc",
                    vec!["scsi", "scsi", "scsi"],
                    None,
                    None,
                    Some("QEMU"),
                ),
                DeviceClass::Scsi,
            ),
            (
                sig(
                    "loop0",
                    "/devices/virtual/block/loop0",
                    vec![],
                    None,
                    None,
                    None,
                ),
                DeviceClass::Loop,
            ),
            (
                sig(
                    "zram0",
                    "/devices/virtual/block/zram0",
                    vec![],
                    None,
                    None,
                    None,
                ),
                DeviceClass::Other,
            ),
        ];
        for (s, want) in table {
            assert_eq!(classify(&s), want, "{}", s.devpath);
        }
        // QEMU 10's UFS host on PCI under Linux 6.12 (tests/fixtures/qemu/x86-q10-6.12.umockdev):
        // the disk's SCSI vendor is the LU's, only the host's driver says UFS.
        let ufs = ClassSignals {
            name: "sdj",
            devpath: "/devices/pci0000:00/0000:00:0a.0/host10/target10:0:0/10:0:0:0/block/sdj",
            ancestor_subsystems: vec!["scsi", "scsi", "scsi", "pci"],
            scsi_vendor: Some("QEMU"),
            ancestor_drivers: vec!["sd", "ufshcd-pci"],
            ..ClassSignals::default()
        };
        assert_eq!(classify(&ufs), DeviceClass::Ufs);
    }

    #[test]
    fn labels() {
        assert_eq!(speed_label(1.5), "1.5M");
        assert_eq!(speed_label(480.0), "480M");
        assert_eq!(devnum("8:16\n"), Some((8, 16)));
        assert_eq!(devnum("8"), None);
    }
}
