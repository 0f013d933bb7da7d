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
    if s.name.starts_with("mtdblock") || s.name.starts_with("ubiblock") {
        return DeviceClass::Mtd;
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

/// The device capabilities a USB device lists in its BOS descriptor (the kernel's
/// `bos_descriptors` attribute, USB 3.2 section 9.6.2): what it can signal at, whatever it
/// linked at. A USB 3 device running at high speed reports `bcdUSB` 2.10 but still lists its
/// SuperSpeed capability here, so this, not `version`, says whether it could go faster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BosCaps {
    /// USB 2.0 Extension (LPM): a high-speed device of USB 2.01 or later.
    pub usb2_extension: bool,
    /// SuperSpeed USB (5 Gbit/s) capability.
    pub superspeed: bool,
    /// SuperSpeedPlus (10 Gbit/s or more) capability.
    pub superspeed_plus: bool,
}

/// BOS descriptors are at most 64 KiB (`wTotalLength` is 16 bits); a larger file is refused.
pub const BOS_MAX_BYTES: usize = 1 << 16;

/// Parses `bos_descriptors` (raw bytes). `None` when the header is not a BOS descriptor; the
/// walk stops at the first capability whose length does not fit, keeping what came before.
pub fn bos_caps(bytes: &[u8]) -> Option<BosCaps> {
    // bLength, bDescriptorType (0x0F: BOS), wTotalLength, bNumDeviceCaps.
    if bytes.len() < 5 || bytes[0] < 5 || bytes[1] != 0x0F {
        return None;
    }
    let total = usize::from(u16::from_le_bytes([bytes[2], bytes[3]]));
    let end = total.min(bytes.len());
    let mut caps = BosCaps::default();
    let mut at = usize::from(bytes[0]);
    while at + 3 <= end {
        let len = usize::from(bytes[at]);
        if len < 3 || at + len > end {
            break;
        }
        // bDescriptorType 0x10: DEVICE CAPABILITY; then bDevCapabilityType.
        if bytes[at + 1] == 0x10 {
            match bytes[at + 2] {
                0x02 => caps.usb2_extension = true,
                0x03 => caps.superspeed = true,
                0x0A => caps.superspeed_plus = true,
                _ => {}
            }
        }
        at += len;
    }
    Some(caps)
}

/// The write speed an SD card claims in its SD Status Register (the `ssr` attribute, 512 bits
/// as hex, SD Physical Layer 4.11): its Speed Class, UHS Speed Grade and Video Speed Class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SdSpeedClaims {
    /// Speed Class 2, 4, 6 or 10 (0: none claimed).
    pub speed_class: u8,
    /// UHS Speed Grade 1 or 3 (0: none).
    pub uhs_speed_grade: u8,
    /// Video Speed Class 6, 10, 30, 60 or 90 (0: none).
    pub video_speed_class: u8,
}

impl SdSpeedClaims {
    /// The sustained sequential write the claims promise, in MB/s (10^6 bytes): the highest
    /// of the three; 0 when the card claims none.
    pub fn min_write_mb_per_s(&self) -> u32 {
        u32::from(self.speed_class)
            .max(u32::from(self.uhs_speed_grade) * 10)
            .max(u32::from(self.video_speed_class))
    }
}

/// Parses `ssr`: SPEED_CLASS at bits 447:440 (byte 8: 0, 1, 2, 3, 4 for Class 0, 2, 4, 6,
/// 10), UHS_SPEED_GRADE at 399:396 (the high nibble of byte 14: 0, 1, 3), VIDEO_SPEED_CLASS at
/// 391:384 (byte 15). Codes the specification reserves are read as no claim.
pub fn sd_ssr(hex: &str) -> Option<SdSpeedClaims> {
    let t = hex.trim();
    if t.len() != 128 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let byte = |i: usize| u8::from_str_radix(&t[i * 2..i * 2 + 2], 16).ok();
    let speed_class = match byte(8)? {
        1 => 2,
        2 => 4,
        3 => 6,
        4 => 10,
        _ => 0,
    };
    let uhs_speed_grade = match byte(14)? >> 4 {
        g @ (1 | 3) => g,
        _ => 0,
    };
    let video_speed_class = match byte(15)? {
        v @ (6 | 10 | 30 | 60 | 90) => v,
        _ => 0,
    };
    Some(SdSpeedClaims {
        speed_class,
        uhs_speed_grade,
        video_speed_class,
    })
}

/// `bcdUSB` (`2.00`, `3.20`) as (major, minor): what a device reports, not what it linked at.
pub fn usb_version_number(v: &str) -> Option<(u8, u8)> {
    let (maj, min) = v.trim().split_once('.')?;
    Some((maj.parse().ok()?, min.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn bos_capabilities_from_recorded_descriptors() {
        let none = BosCaps::default();
        let table: &[(&str, &str, Option<BosCaps>)] = &[
            // QEMU's usb-bot stick on xHCI (tests/fixtures/qemu/x86-q10-6.12.umockdev, 4-1):
            // USB 2.0 Extension, then SuperSpeed with 5 Gbit/s among its speeds.
            (
                "050F160002071002020000000A1003000C00020A2000",
                "a USB 3 stick",
                Some(BosCaps {
                    usb2_extension: true,
                    superspeed: true,
                    ..none
                }),
            ),
            // The same recording's xHCI SuperSpeed root hub (usb4).
            (
                "050F0F00010A100300080001000000",
                "a SuperSpeed root hub",
                Some(BosCaps {
                    superspeed: true,
                    ..none
                }),
            ),
            // A USB 2.01 device: only the USB 2.0 Extension (LPM).
            (
                "050F0C000107100202000000",
                "a USB 2.01 device",
                Some(BosCaps {
                    usb2_extension: true,
                    ..none
                }),
            ),
            // SuperSpeedPlus after SuperSpeed (a 10 Gbit/s device; the SSP capability is
            // 16 bytes with one sublink speed attribute).
            (
                "050F1F00020A1003000E00020A200010100A00000000000000000030000A00",
                "a 10 Gbit/s device",
                Some(BosCaps {
                    superspeed: true,
                    superspeed_plus: true,
                    ..none
                }),
            ),
            // A capability longer than the descriptor says it holds: what came before stays.
            (
                "050F11000207100202000000FF10030000",
                "a truncated second capability",
                Some(BosCaps {
                    usb2_extension: true,
                    ..none
                }),
            ),
            ("", "empty", None),
            ("0501", "too short", None),
            ("0902200001010080FA", "a configuration descriptor", None),
        ];
        for (bytes, what, want) in table {
            assert_eq!(bos_caps(&hex(bytes)), *want, "{what}");
        }
    }

    #[test]
    fn sd_speed_claims_from_the_ssr() {
        // The SSR of QEMU's sd-card (tests/fixtures/qemu/x86-e2e.umockdev): no claim.
        let qemu = "0".repeat(128);
        // A card claiming Class 10, U3 and V30: bytes 8, 14 and 15 set as the SD Physical
        // Layer specification places them (the rest as a real card may have them).
        let mut v30 = qemu.clone().into_bytes();
        v30[16..18].copy_from_slice(b"04");
        v30[28..30].copy_from_slice(b"30");
        v30[30..32].copy_from_slice(b"1e");
        let v30 = String::from_utf8(v30).unwrap();
        let mut c4 = qemu.clone().into_bytes();
        c4[16..18].copy_from_slice(b"02");
        let c4 = String::from_utf8(c4).unwrap();
        // (Speed Class, UHS grade, Video class, the MB/s they promise)
        type Claims = Option<(u8, u8, u8, u32)>;
        let table: &[(&str, Claims)] = &[
            (&qemu, Some((0, 0, 0, 0))),
            (&v30, Some((10, 3, 30, 30))),
            (&c4, Some((4, 0, 0, 4))),
            ("", None),
            ("00ff", None),
        ];
        for (hex, want) in table {
            let got = sd_ssr(hex).map(|c| {
                (
                    c.speed_class,
                    c.uhs_speed_grade,
                    c.video_speed_class,
                    c.min_write_mb_per_s(),
                )
            });
            assert_eq!(got, *want, "{hex}");
        }
    }

    #[test]
    fn usb_version_numbers() {
        assert_eq!(usb_version_number(" 2.00"), Some((2, 0)));
        assert_eq!(usb_version_number("3.20"), Some((3, 20)));
        assert_eq!(usb_version_number("1.10"), Some((1, 10)));
        assert_eq!(usb_version_number("two"), None);
    }

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
