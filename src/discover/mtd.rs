//! Owns the raw flash of the inventory: every MTD device (`/sys/class/mtd`, a raw NAND or NOR
//! flash or a partition of one), the UBI devices and volumes on top (`/sys/class/ubi`), what
//! uses each (UBI, a mounted UBIFS or JFFS2, an mtdblock) and their health counters. None of
//! it is a block device, so it is found here and not among the disks.
//!
//! Pure parsers over attribute text, table-tested against recorded guests' trees; the reader
//! reads `/sys` only through the sysfs root and a mount table.

use serde::{Deserialize, Serialize};

use crate::device::Missing;
use crate::health::Gaps;
use crate::sysfs::parse::MountEntry;
use crate::sysfs::{AttrError, SysfsRoot};

/// The major number of `mtdblock` devices; a JFFS2 (or any MTD-backed filesystem) mounted by
/// MTD name also gets it as its device number (`mtdsuper.c` sets `s_dev` to it).
pub const MTD_BLOCK_MAJOR: &str = "31";

/// `MTD_WRITEABLE` in an MTD's `flags` (include/uapi/mtd/mtd-abi.h).
pub const MTD_WRITEABLE: u64 = 0x400;

/// All raw flash of one system.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RawFlash {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mtd: Vec<Mtd>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ubi: Vec<Ubi>,
}

impl RawFlash {
    pub fn is_empty(&self) -> bool {
        self.mtd.is_empty() && self.ubi.is_empty()
    }
}

/// The kind of flash an MTD device is (`type` in sysfs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum FlashType {
    /// SLC NAND.
    Nand,
    MlcNand,
    Nor,
    /// RAM presented as flash (mtdram, phram, slram).
    Ram,
    Rom,
    Dataflash,
    /// An MTD made of a UBI volume (gluebi).
    Ubi,
    Absent,
    Unknown,
}

impl FlashType {
    pub fn parse(s: &str) -> FlashType {
        match s.trim() {
            "nand" => FlashType::Nand,
            "mlc-nand" => FlashType::MlcNand,
            "nor" => FlashType::Nor,
            "ram" => FlashType::Ram,
            "rom" => FlashType::Rom,
            "dataflash" => FlashType::Dataflash,
            "ubi" => FlashType::Ubi,
            "absent" => FlashType::Absent,
            _ => FlashType::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FlashType::Nand => "nand",
            FlashType::MlcNand => "mlc-nand",
            FlashType::Nor => "nor",
            FlashType::Ram => "ram",
            FlashType::Rom => "rom",
            FlashType::Dataflash => "dataflash",
            FlashType::Ubi => "ubi",
            FlashType::Absent => "absent",
            FlashType::Unknown => "unknown",
        }
    }

    /// NAND keeps bad blocks and corrects bitflips with an ECC; NOR and RAM do neither.
    pub fn is_nand(self) -> bool {
        matches!(self, FlashType::Nand | FlashType::MlcNand)
    }
}

/// One MTD device: a whole flash chip or one partition of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Mtd {
    /// Kernel name (`mtd3`).
    pub name: String,
    /// The partition's (or chip's) name (`u-boot`, `rootfs`, `NAND simulator partition 1`).
    pub label: String,
    /// Its character device (`/dev/mtd3`).
    pub dev_node: String,
    /// Kernel device path below the sysfs root.
    pub devpath: String,
    #[serde(rename = "type")]
    pub kind: FlashType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// The unit of erasing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub erase_block_bytes: Option<u64>,
    /// The unit of writing (a NAND page; 1 on NOR).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subpage_bytes: Option<u64>,
    /// Spare (out-of-band) bytes per page, where the ECC and the bad-block marker live.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oob_bytes: Option<u64>,
    /// Bits the ECC corrects per step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecc_strength_bits: Option<u64>,
    /// Bytes one ECC step covers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecc_step_bytes: Option<u64>,
    /// Corrected bits per step at which a read says the block should be scrubbed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bitflip_threshold: Option<u64>,
    /// The start of the partition in its chip.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writable: Option<bool>,
    /// The kernel's counters since boot (NAND only).
    #[serde(skip_serializing_if = "MtdHealth::is_empty", default)]
    pub health: MtdHealth,
    /// What uses the device; empty when nothing does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<FlashUser>,
    /// MTD partitions registered below it (its chip is registered as a device of its own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<Missing>,
}

impl Mtd {
    /// A writable NAND partition of which only the names are known (the rest empty): where a
    /// table of cases starts.
    pub fn named(name: &str, label: &str) -> Mtd {
        Mtd {
            name: name.into(),
            label: label.into(),
            dev_node: format!("/dev/{name}"),
            devpath: format!("/devices/virtual/mtd/{name}"),
            kind: FlashType::Nand,
            size_bytes: None,
            erase_block_bytes: None,
            page_bytes: None,
            subpage_bytes: None,
            oob_bytes: None,
            ecc_strength_bits: None,
            ecc_step_bytes: None,
            bitflip_threshold: None,
            offset_bytes: Some(0),
            writable: Some(true),
            health: MtdHealth::default(),
            users: Vec::new(),
            partitions: Vec::new(),
            missing: Vec::new(),
        }
    }
}

/// An MTD device's counters, as the kernel kept them since boot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MtdHealth {
    /// Bad erase blocks (factory-marked and grown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bad_blocks: Option<u64>,
    /// Blocks the bad block table itself takes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bbt_blocks: Option<u64>,
    /// Bits the ECC corrected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrected_bits: Option<u64>,
    /// ECC steps that could not be corrected (data lost).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecc_failures: Option<u64>,
}

impl MtdHealth {
    pub fn is_empty(&self) -> bool {
        *self == MtdHealth::default()
    }
}

/// Something that uses an MTD device; writing under it would destroy its data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum FlashUser {
    /// A UBI device is attached to it.
    Ubi { ubi: String },
    /// A filesystem on it is mounted (JFFS2 by MTD name, or anything on its mtdblock).
    Mount {
        mountpoint: String,
        fstype: String,
        source: String,
    },
    /// Its block device (`mtdblock3`) exists: a filesystem or a program may use it.
    Mtdblock { name: String },
}

impl FlashUser {
    /// How the list's USERS column writes it.
    pub fn short(&self) -> String {
        match self {
            FlashUser::Ubi { ubi } => format!("UBI {ubi}"),
            FlashUser::Mount {
                mountpoint, fstype, ..
            } => format!("{fstype} on {mountpoint}"),
            FlashUser::Mtdblock { name } => name.clone(),
        }
    }
}

/// One UBI device (`/sys/class/ubi/ubi0`): the wear-levelling layer on an MTD partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Ubi {
    /// Kernel name (`ubi0`).
    pub name: String,
    /// The MTD device it is attached to (`mtd2`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtd: Option<String>,
    /// Physical erase blocks in all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_pebs: Option<u64>,
    /// Erase blocks not given to a volume.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_pebs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub erase_block_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_io_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    #[serde(skip_serializing_if = "UbiHealth::is_empty", default)]
    pub health: UbiHealth,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<UbiVolume>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<Missing>,
}

impl Ubi {
    /// A UBI device on `mtd` of which nothing else is known.
    pub fn on(name: &str, mtd: &str) -> Ubi {
        Ubi {
            name: name.into(),
            mtd: Some(mtd.into()),
            total_pebs: None,
            available_pebs: None,
            erase_block_bytes: None,
            min_io_bytes: None,
            read_only: None,
            health: UbiHealth::default(),
            volumes: Vec::new(),
            missing: Vec::new(),
        }
    }
}

/// UBI's view of the flash's wear.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UbiHealth {
    /// The highest erase counter of any block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_erase_count: Option<u64>,
    /// The mean erase counter (no kernel up to 6.12 exports it in sysfs: absent there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_erase_count: Option<u64>,
    /// Bad physical erase blocks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bad_pebs: Option<u64>,
    /// Erase blocks still kept to replace blocks that go bad; at 0 the next bad block makes
    /// the device read-only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved_for_bad: Option<u64>,
}

impl UbiHealth {
    pub fn is_empty(&self) -> bool {
        *self == UbiHealth::default()
    }
}

/// One UBI volume (`ubi0_0`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UbiVolume {
    /// Kernel name (`ubi0_0`).
    pub name: String,
    /// The volume's name (`rootfs`).
    pub label: String,
    /// `dynamic` or `static`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Reserved erase blocks times their usable size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub corrupted: bool,
    /// An interrupted update left it unusable.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub update_marker: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<FlashUser>,
}

/// A number as sysfs writes it: decimal, or hexadecimal with `0x` (`flags`).
pub fn number(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The kernel name of an MTD class entry that is a device of its own (`mtd3`), not the
/// read-only node of one (`mtd3ro`).
pub fn mtd_index(name: &str) -> Option<u32> {
    name.strip_prefix("mtd")?.parse().ok()
}

/// The UBI device and volume a UBIFS mount source names, as fs/ubifs/super.c `open_ubi`
/// reads it: `ubi0:rootfs`, `ubi0_1`, `/dev/ubi0_1`, `ubi:rootfs` and `ubi!rootfs` (device
/// 0), `ubi0!rootfs`, and `ubiY` (volume Y of device 0, not device Y). The volume is its id
/// (`Ok`) or its name (`Err`).
pub fn ubifs_source(src: &str) -> Option<(u32, Result<u32, String>)> {
    let s = src.strip_prefix("/dev/").unwrap_or(src);
    let rest = s.strip_prefix("ubi")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 && digits == rest.len() {
        return Some((0, Ok(rest.parse().ok()?)));
    }
    let dev = if digits == 0 {
        0
    } else {
        rest[..digits].parse().ok()?
    };
    let tail = &rest[digits..];
    if let Some(vol) = tail.strip_prefix('_') {
        return Some((dev, Ok(vol.parse().ok()?)));
    }
    let name = tail.strip_prefix(':').or_else(|| tail.strip_prefix('!'))?;
    if name.is_empty() {
        return None;
    }
    Some((dev, Err(name.to_string())))
}

/// Whether a mount is of MTD device `index` labelled `label`: by its mtdblock's (or the MTD
/// superblock's) device number, or by the source a JFFS2 is mounted with (`mtd3`,
/// `mtd:label`, `/dev/mtdblock3`, `/dev/mtd3`).
pub fn mount_uses_mtd(m: &MountEntry, index: u32, label: &str) -> bool {
    if m.fstype == "ubifs" {
        return false;
    }
    if m.devnum == format!("{MTD_BLOCK_MAJOR}:{index}") {
        return true;
    }
    let src = m.source.strip_prefix("/dev/").unwrap_or(&m.source);
    src == format!("mtd{index}")
        || src == format!("mtdblock{index}")
        || src.strip_prefix("mtd:") == Some(label)
}

/// An attribute's value, its failure noted in `gaps`; an absent one is no failure unless
/// `want`ed (another kernel, or another kind of flash, has none).
fn take<T>(gaps: &mut Gaps, field: &str, r: Result<T, AttrError>, want: bool) -> Option<T> {
    match r {
        Err(AttrError::Absent) if !want => None,
        r => gaps.take(field, r),
    }
}

/// Every MTD and UBI device of the system `sys` describes, with its users from `mounts`.
pub fn read(sys: &SysfsRoot, mounts: &[MountEntry]) -> RawFlash {
    let ubi = read_ubi(sys, mounts);
    let mut mtd: Vec<Mtd> = sys
        .list("/class/mtd", "")
        .into_iter()
        .filter(|n| mtd_index(n).is_some())
        .filter_map(|n| {
            let devpath = sys.resolve(&format!("/class/mtd/{n}"))?;
            Some(read_mtd(sys, &n, &devpath, mounts, &ubi))
        })
        .collect();
    mtd.sort_by_key(|m| mtd_index(&m.name));
    let onto = partitions_onto(&mtd);
    for (m, parts) in mtd.iter_mut().zip(onto) {
        for p in parts {
            if !m.partitions.contains(&p) {
                m.partitions.push(p);
            }
        }
    }
    RawFlash { mtd, ubi }
}

/// For each device that is a whole chip (it has no `offset`), the partitions that may lie
/// on it. The kernel links a partition to its chip only with CONFIG_MTD_PARTITIONED_MASTER
/// (then they are its children in sysfs, read with the device); otherwise a partition added
/// to a registered chip (`mtdpart add`) is a sibling of it under the chip's parent device.
/// So every partition under the same parent that fits in the chip counts: a chip is never
/// taken for unpartitioned while a partition may lie on it.
pub fn partitions_onto(mtd: &[Mtd]) -> Vec<Vec<String>> {
    let parent = |p: &str| p.rsplit_once('/').map(|(d, _)| d.to_string());
    mtd.iter()
        .map(|chip| {
            if chip.offset_bytes.is_some() {
                return Vec::new();
            }
            mtd.iter()
                .filter(|p| p.name != chip.name && parent(&p.devpath) == parent(&chip.devpath))
                .filter(|p| match (p.offset_bytes, p.size_bytes, chip.size_bytes) {
                    (Some(o), Some(s), Some(c)) => o.saturating_add(s) <= c,
                    (Some(_), _, _) => true,
                    (None, _, _) => false,
                })
                .map(|p| p.name.clone())
                .collect()
        })
        .collect()
}

fn read_mtd(sys: &SysfsRoot, name: &str, devpath: &str, mounts: &[MountEntry], ubi: &[Ubi]) -> Mtd {
    let index = mtd_index(name).unwrap_or(u32::MAX);
    let mut gaps = Gaps::default();
    let num = |attr: &str| sys.attr_parse(devpath, attr, number);
    let label = take(&mut gaps, "label", sys.attr(devpath, "name"), true).unwrap_or_default();
    let kind = take(&mut gaps, "type", sys.attr(devpath, "type"), true)
        .map_or(FlashType::Unknown, |t| FlashType::parse(&t));
    let flags = take(&mut gaps, "flags", num("flags"), true);
    let nand = kind.is_nand();
    let mut m = Mtd {
        name: name.to_string(),
        dev_node: format!("/dev/{name}"),
        devpath: devpath.to_string(),
        kind,
        size_bytes: take(&mut gaps, "size_bytes", num("size"), true),
        erase_block_bytes: take(&mut gaps, "erase_block_bytes", num("erasesize"), true),
        page_bytes: take(&mut gaps, "page_bytes", num("writesize"), true),
        subpage_bytes: take(&mut gaps, "subpage_bytes", num("subpagesize"), false),
        oob_bytes: take(&mut gaps, "oob_bytes", num("oobsize"), nand),
        ecc_strength_bits: take(&mut gaps, "ecc_strength_bits", num("ecc_strength"), nand),
        ecc_step_bytes: take(&mut gaps, "ecc_step_bytes", num("ecc_step_size"), nand),
        bitflip_threshold: take(
            &mut gaps,
            "bitflip_threshold",
            num("bitflip_threshold"),
            false,
        ),
        // The partition's offset is kernel 4.19 and later.
        offset_bytes: take(&mut gaps, "offset_bytes", num("offset"), false),
        writable: flags.map(|f| f & MTD_WRITEABLE != 0),
        health: MtdHealth {
            bad_blocks: take(&mut gaps, "bad_blocks", num("bad_blocks"), nand),
            bbt_blocks: take(&mut gaps, "bbt_blocks", num("bbt_blocks"), nand),
            corrected_bits: take(&mut gaps, "corrected_bits", num("corrected_bits"), nand),
            ecc_failures: take(&mut gaps, "ecc_failures", num("ecc_failures"), nand),
        },
        users: Vec::new(),
        partitions: sys
            .list(devpath, "")
            .into_iter()
            .filter(|c| mtd_index(c).is_some() && sys.exists(devpath, &format!("{c}/name")))
            .collect(),
        label,
        missing: gaps.0,
    };
    let mtd_num = index.to_string();
    for u in ubi {
        if u.mtd.as_deref() == Some(&format!("mtd{mtd_num}")) {
            m.users.push(FlashUser::Ubi {
                ubi: u.name.clone(),
            });
        }
    }
    for mt in mounts
        .iter()
        .filter(|mt| mount_uses_mtd(mt, index, &m.label))
    {
        m.users.push(FlashUser::Mount {
            mountpoint: mt.mountpoint.clone(),
            fstype: mt.fstype.clone(),
            source: mt.source.clone(),
        });
    }
    let blk = format!("mtdblock{index}");
    if sys.exists("/class/block", &blk) {
        m.users.push(FlashUser::Mtdblock { name: blk });
    }
    m
}

fn read_ubi(sys: &SysfsRoot, mounts: &[MountEntry]) -> Vec<Ubi> {
    let mut out: Vec<Ubi> = sys
        .list("/class/ubi", "")
        .into_iter()
        .filter(|n| {
            n.strip_prefix("ubi")
                .is_some_and(|d| d.parse::<u32>().is_ok())
        })
        .filter_map(|n| {
            let devpath = sys.resolve(&format!("/class/ubi/{n}"))?;
            Some(read_one_ubi(sys, &n, &devpath, mounts))
        })
        .collect();
    out.sort_by_key(|u| u.name[3..].parse::<u32>().unwrap_or(u32::MAX));
    out
}

fn read_one_ubi(sys: &SysfsRoot, name: &str, devpath: &str, mounts: &[MountEntry]) -> Ubi {
    let mut gaps = Gaps::default();
    let num = |attr: &str| sys.attr_parse(devpath, attr, number);
    let dev: u32 = name[3..].parse().unwrap_or(u32::MAX);
    let mut volumes: Vec<UbiVolume> = sys
        .list(devpath, "")
        .into_iter()
        .filter(|v| {
            v.strip_prefix(&format!("{name}_"))
                .is_some_and(|id| id.parse::<u32>().is_ok())
        })
        .map(|v| {
            let vp = format!("{devpath}/{v}");
            let vnum = |attr: &str| sys.attr_parse(&vp, attr, number).ok();
            let label = sys.attr(&vp, "name").unwrap_or_default();
            let id: u32 = v[name.len() + 1..].parse().unwrap_or(u32::MAX);
            let mounts = mounts
                .iter()
                .filter(|mt| {
                    mt.fstype == "ubifs"
                        && ubifs_source(&mt.source).is_some_and(|(d, vol)| {
                            d == dev
                                && match vol {
                                    Ok(i) => i == id,
                                    Err(n) => n == label,
                                }
                        })
                })
                .map(|mt| FlashUser::Mount {
                    mountpoint: mt.mountpoint.clone(),
                    fstype: mt.fstype.clone(),
                    source: mt.source.clone(),
                })
                .collect();
            UbiVolume {
                name: v.clone(),
                kind: sys.attr(&vp, "type").ok(),
                size_bytes: vnum("reserved_ebs")
                    .zip(vnum("usable_eb_size"))
                    .map(|(a, b)| a.saturating_mul(b)),
                corrupted: vnum("corrupted") == Some(1),
                update_marker: vnum("upd_marker") == Some(1),
                label,
                mounts,
            }
        })
        .collect();
    volumes.sort_by_key(|v| v.name[name.len() + 1..].parse::<u32>().unwrap_or(u32::MAX));
    Ubi {
        name: name.to_string(),
        mtd: take(&mut gaps, "mtd", num("mtd_num"), true).map(|n| format!("mtd{n}")),
        total_pebs: take(&mut gaps, "total_pebs", num("total_eraseblocks"), true),
        available_pebs: take(&mut gaps, "available_pebs", num("avail_eraseblocks"), true),
        erase_block_bytes: take(&mut gaps, "erase_block_bytes", num("eraseblock_size"), true),
        min_io_bytes: take(&mut gaps, "min_io_bytes", num("min_io_size"), true),
        read_only: take(&mut gaps, "read_only", num("ro_mode"), false).map(|v| v == 1),
        health: UbiHealth {
            max_erase_count: take(&mut gaps, "max_erase_count", num("max_ec"), true),
            mean_erase_count: take(&mut gaps, "mean_erase_count", num("mean_ec"), false),
            bad_pebs: take(&mut gaps, "bad_pebs", num("bad_peb_count"), true),
            reserved_for_bad: take(&mut gaps, "reserved_for_bad", num("reserved_for_bad"), true),
        },
        volumes,
        missing: gaps.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_as_sysfs_writes_them() {
        for (s, want) in [
            ("0x400", Some(0x400)),
            ("0xc00", Some(0xc00)),
            ("134217728", Some(134_217_728)),
            ("  2048\n", Some(2048)),
            ("-1", None),
            ("", None),
            ("0xZZ", None),
        ] {
            assert_eq!(number(s), want, "{s:?}");
        }
    }

    #[test]
    fn mtd_class_entries() {
        for (s, want) in [
            ("mtd0", Some(0)),
            ("mtd12", Some(12)),
            ("mtd0ro", None),
            ("mtdblock0", None),
            ("ubi0", None),
        ] {
            assert_eq!(mtd_index(s), want, "{s}");
        }
    }

    #[test]
    fn flash_types() {
        for t in [
            "nand",
            "mlc-nand",
            "nor",
            "ram",
            "rom",
            "dataflash",
            "ubi",
            "absent",
        ] {
            assert_eq!(FlashType::parse(t).as_str(), t);
        }
        assert_eq!(FlashType::parse("something"), FlashType::Unknown);
        assert!(FlashType::Nand.is_nand() && FlashType::MlcNand.is_nand());
        assert!(!FlashType::Nor.is_nand() && !FlashType::Ram.is_nand());
    }

    #[test]
    fn ubifs_mount_sources() {
        for (s, want) in [
            ("ubi0:rootfs", Some((0, Err("rootfs".to_string())))),
            ("ubi1_2", Some((1, Ok(2)))),
            ("/dev/ubi0_0", Some((0, Ok(0)))),
            ("ubi:data", Some((0, Err("data".to_string())))),
            ("ubi3!logs", Some((3, Err("logs".to_string())))),
            ("ubi0:", None),
            ("ubi1", Some((0, Ok(1)))),
            ("ubi!rootfs", Some((0, Err("rootfs".to_string())))),
            ("/dev/sda1", None),
            ("ubi0_x", None),
        ] {
            assert_eq!(ubifs_source(s), want, "{s}");
        }
    }

    fn mount(devnum: &str, fstype: &str, source: &str) -> MountEntry {
        MountEntry {
            devnum: devnum.into(),
            mountpoint: "/mnt".into(),
            fstype: fstype.into(),
            source: source.into(),
            read_only: false,
        }
    }

    #[test]
    fn mounts_of_an_mtd() {
        for (m, want) in [
            (mount("31:2", "jffs2", "mtd2"), true),
            (mount("0:40", "jffs2", "mtd:config"), true),
            (mount("0:40", "jffs2", "mtd:other"), false),
            (mount("0:40", "squashfs", "/dev/mtdblock2"), true),
            (mount("31:3", "jffs2", "mtd3"), false),
            (mount("0:41", "ubifs", "ubi0:rootfs"), false),
            (mount("8:1", "ext4", "/dev/sda1"), false),
        ] {
            assert_eq!(mount_uses_mtd(&m, 2, "config"), want, "{m:?}");
        }
    }
}
