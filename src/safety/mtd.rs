//! Owns what may be erased and written on raw flash: only an MTD partition the board profile
//! names as a test area, and never one that is mounted, attached to UBI, read-only, a chip
//! with partitions registered on it, or named like something the board boots from or keeps
//! (bootloader, its environment, kernel, device tree, firmware, calibration data, rootfs).
//! No option lifts these rules: the board profile can only name test areas, and a name alone
//! never makes a protected partition one.

use crate::discover::mtd::{FlashType, FlashUser, Mtd, RawFlash};

/// Why a raw flash device may not be erased or written. Each names the fact and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlashRefusal {
    #[error(
        "{0} ({1:?}) is not a test area of the board profile: name it under `flash: \
         test_areas:` in the profile to allow erasing it"
    )]
    NotTestArea(String, String),
    #[error(
        "{0}: the test area {1:?} names more than one MTD device: give each partition its own \
         name"
    )]
    Ambiguous(String, String),
    #[error(
        "{0} ({1:?}) is named like a partition the board boots from or keeps ({2:?}): it is \
         never erased; make a partition of its own for tests"
    )]
    Protected(String, String, &'static str),
    #[error("{0} is in use ({1}): unmount it and detach UBI first")]
    InUse(String, String),
    #[error("{0} is read-only (the MTD has no MTD_WRITEABLE flag)")]
    ReadOnly(String),
    #[error(
        "{0} is a whole chip with partitions registered on it or possibly on it ({1}): name \
         one partition as the test area"
    )]
    HasPartitions(String, String),
    #[error("{0} is {1} flash, which this test does not erase (NAND, NOR or RAM only)")]
    Kind(String, &'static str),
    #[error("{0} is not in the inventory (no such MTD device)")]
    NotFound(String),
}

/// Parts of a name that mark a partition the board needs: the bootloader and its stages,
/// their environment, the kernel and device tree, firmware and FPGA bitstreams, factory and
/// calibration data, the root filesystem. Matched case-insensitively anywhere in the name,
/// so `u-boot-env`, `qspi-fsbl-uboot`, `BOOT0` and `kernel_b` are all protected.
pub const PROTECTED_NAME_PARTS: &[&str] = &[
    "boot",
    "loader",
    "spl",
    "fsbl",
    "fip",
    "atf",
    "tf-a",
    "bl2",
    "bl31",
    "optee",
    "rcw",
    "env",
    "kernel",
    "linux",
    "image",
    "dtb",
    "fdt",
    "devicetree",
    "firmware",
    "bitstream",
    "fpga",
    "factory",
    "calib",
    "nvram",
    "mac",
    "root",
    "system",
    "recovery",
];

/// The protected part of `label`, if it has one.
pub fn protected_part(label: &str) -> Option<&'static str> {
    let l = label.to_ascii_lowercase();
    PROTECTED_NAME_PARTS.iter().copied().find(|p| l.contains(p))
}

/// Whether a profile's entry names `mtd`: by kernel name (`mtd3`) or partition name.
pub fn names(entry: &str, mtd: &Mtd) -> bool {
    entry == mtd.name || entry == mtd.label
}

/// Whether a list of the profile (its test areas, its scans) names `mtd`.
pub fn is_named(list: &[String], mtd: &Mtd) -> bool {
    list.iter().any(|a| names(a, mtd))
}

/// Whether `mtd` may be erased and written as a test area, given everything on the system
/// and the board profile's test areas (MTD names or partition names). Every reason is
/// returned, not only the first.
pub fn check_flash_write(
    mtd: &Mtd,
    flash: &RawFlash,
    test_areas: &[String],
) -> Result<(), Vec<FlashRefusal>> {
    let mut out = Vec::new();
    let named = test_areas.iter().find(|a| names(a, mtd));
    match named {
        None => out.push(FlashRefusal::NotTestArea(
            mtd.name.clone(),
            mtd.label.clone(),
        )),
        Some(a) => {
            let n = flash.mtd.iter().filter(|m| names(a, m)).count();
            if n > 1 {
                out.push(FlashRefusal::Ambiguous(mtd.name.clone(), a.clone()));
            }
        }
    }
    if let Some(p) = protected_part(&mtd.label) {
        out.push(FlashRefusal::Protected(
            mtd.name.clone(),
            mtd.label.clone(),
            p,
        ));
    }
    let uses: Vec<String> = mtd
        .users
        .iter()
        .filter(|u| !matches!(u, FlashUser::Mtdblock { .. }))
        .map(FlashUser::short)
        .collect();
    if !uses.is_empty() {
        out.push(FlashRefusal::InUse(mtd.name.clone(), uses.join(", ")));
    }
    // A UBI device on it counts even when its sysfs `mtd_num` was the only trace.
    if flash
        .ubi
        .iter()
        .any(|u| u.mtd.as_deref() == Some(mtd.name.as_str()))
        && !mtd.users.iter().any(|u| matches!(u, FlashUser::Ubi { .. }))
    {
        out.push(FlashRefusal::InUse(mtd.name.clone(), "UBI".into()));
    }
    if mtd.writable != Some(true) {
        out.push(FlashRefusal::ReadOnly(mtd.name.clone()));
    }
    if !mtd.partitions.is_empty() {
        out.push(FlashRefusal::HasPartitions(
            mtd.name.clone(),
            mtd.partitions.join(", "),
        ));
    }
    if !matches!(
        mtd.kind,
        FlashType::Nand | FlashType::MlcNand | FlashType::Nor | FlashType::Ram
    ) {
        out.push(FlashRefusal::Kind(mtd.name.clone(), mtd.kind.as_str()));
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(out)
    }
}

/// The MTD device `name` (`mtd3` or a partition name) names, refused when none or several do.
pub fn find<'f>(flash: &'f RawFlash, name: &str) -> Result<&'f Mtd, FlashRefusal> {
    let found: Vec<&Mtd> = flash
        .mtd
        .iter()
        .filter(|m| m.name == name || m.label == name || m.dev_node == name)
        .collect();
    match found.as_slice() {
        [one] => Ok(one),
        [] => Err(FlashRefusal::NotFound(name.to_string())),
        [first, ..] => Err(FlashRefusal::Ambiguous(
            first.name.clone(),
            name.to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::mtd::Ubi;

    fn mtd(name: &str, label: &str) -> Mtd {
        Mtd {
            size_bytes: Some(16 << 20),
            erase_block_bytes: Some(128 << 10),
            ..Mtd::named(name, label)
        }
    }

    fn rules(r: Result<(), Vec<FlashRefusal>>) -> Vec<&'static str> {
        r.err()
            .unwrap_or_default()
            .iter()
            .map(|e| match e {
                FlashRefusal::NotTestArea(..) => "not-test-area",
                FlashRefusal::Ambiguous(..) => "ambiguous",
                FlashRefusal::Protected(..) => "protected",
                FlashRefusal::InUse(..) => "in-use",
                FlashRefusal::ReadOnly(..) => "read-only",
                FlashRefusal::HasPartitions(..) => "partitions",
                FlashRefusal::Kind(..) => "kind",
                FlashRefusal::NotFound(..) => "not-found",
            })
            .collect()
    }

    #[test]
    fn protected_names() {
        for (label, want) in [
            ("u-boot", Some("boot")),
            ("U-Boot-Env", Some("boot")),
            ("qspi-fsbl-uboot", Some("boot")),
            ("spl", Some("spl")),
            ("kernel_b", Some("kernel")),
            ("dtb", Some("dtb")),
            ("bitstream", Some("bitstream")),
            ("rootfs", Some("root")),
            ("ART-calibration", Some("calib")),
            ("usbperf-test", None),
            ("scratch", None),
            ("NAND simulator partition 3", None),
            ("mtdram test device", None),
        ] {
            assert_eq!(protected_part(label), want, "{label}");
        }
    }

    #[test]
    fn only_a_named_free_writable_area_is_written() {
        let area = vec!["test".to_string()];
        let mut flash = RawFlash {
            mtd: vec![
                mtd("mtd0", "u-boot"),
                mtd("mtd1", "test"),
                mtd("mtd2", "data"),
            ],
            ubi: Vec::new(),
        };
        assert_eq!(
            rules(check_flash_write(&flash.mtd[1], &flash, &area)),
            [] as [&str; 0]
        );
        assert_eq!(
            rules(check_flash_write(&flash.mtd[2], &flash, &area)),
            ["not-test-area"]
        );
        // Naming a bootloader partition does not make it a test area.
        let named_boot = vec!["u-boot".to_string()];
        assert_eq!(
            rules(check_flash_write(&flash.mtd[0], &flash, &named_boot)),
            ["protected"]
        );
        // By kernel name too.
        let by_name = vec!["mtd1".to_string()];
        assert_eq!(
            rules(check_flash_write(&flash.mtd[1], &flash, &by_name)),
            [] as [&str; 0]
        );

        let mut busy = flash.mtd[1].clone();
        busy.users.push(FlashUser::Mount {
            mountpoint: "/mnt".into(),
            fstype: "jffs2".into(),
            source: "mtd1".into(),
        });
        busy.writable = Some(false);
        busy.partitions = vec!["mtd5".into()];
        busy.kind = FlashType::Rom;
        assert_eq!(
            rules(check_flash_write(&busy, &flash, &area)),
            ["in-use", "read-only", "partitions", "kind"]
        );

        // UBI attached, seen only through the UBI device's mtd_num.
        flash.ubi.push(Ubi::on("ubi0", "mtd1"));
        assert_eq!(
            rules(check_flash_write(&flash.mtd[1], &flash, &area)),
            ["in-use"]
        );
        // An mtdblock that exists but is not mounted is no use.
        let mut blk = flash.mtd[2].clone();
        blk.users.push(FlashUser::Mtdblock {
            name: "mtdblock2".into(),
        });
        assert_eq!(
            rules(check_flash_write(&blk, &flash, &["data".to_string()])),
            [] as [&str; 0]
        );
        // Two partitions with the test area's name.
        flash.mtd.push(mtd("mtd3", "data"));
        assert_eq!(
            rules(check_flash_write(
                &flash.mtd[2],
                &flash,
                &["data".to_string()]
            )),
            ["ambiguous"]
        );
        assert!(matches!(
            find(&flash, "data"),
            Err(FlashRefusal::Ambiguous(..))
        ));
        assert!(matches!(
            find(&flash, "mtd9"),
            Err(FlashRefusal::NotFound(_))
        ));
        assert_eq!(find(&flash, "/dev/mtd1").unwrap().name, "mtd1");
    }
}
