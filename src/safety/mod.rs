//! Owns the answer to "may this target be written?": whole-disk resolution, the system-disk
//! rules (root, boot, swap, RAID/LVM members, eMMC boot/RPMB areas, read-only, mounted), test
//! files created exclusively with free-space headroom, the run lock and signal cleanup.

pub mod lock;
pub mod mtd;
pub mod signals;
pub mod target;
pub mod testfile;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::discover::parse::{self, MountEntry};
use crate::discover::{DeviceClass, Disk, EmmcArea, Inventory};
use crate::sysfs::SysfsRoot;

/// Mount points whose filesystems make a disk a system disk.
pub const SYSTEM_MOUNTS: &[&str] = &["/", "/boot", "/boot/efi", "/efi", "/usr", "/var"];

/// What the system says about itself beyond the inventory: swap, and the mount table read once.
#[derive(Debug, Clone, Default)]
pub struct SystemFacts {
    pub mounts: Vec<MountEntry>,
    /// `major:minor` of every active swap device (from /proc/swaps).
    pub swap_devnums: Vec<String>,
    /// Swap areas that could not be resolved to a device number (files, unreadable entries).
    pub swap_unresolved: Vec<String>,
    /// Set when the mount table or swap list could not be read: then nothing is writable raw.
    pub unknown: Option<String>,
}

impl SystemFacts {
    /// Reads `/proc/self/mountinfo` and `/proc/swaps` (paths injectable for tests).
    pub fn read(mountinfo: &Path, swaps: &Path) -> SystemFacts {
        let mut f = SystemFacts::default();
        match std::fs::read_to_string(mountinfo) {
            Ok(t) => f.mounts = parse::mountinfo(&t),
            Err(e) => f.unknown = Some(format!("{}: {e}", mountinfo.display())),
        }
        match std::fs::read_to_string(swaps) {
            Ok(t) => {
                for dev in swap_devices(&t) {
                    match devnum_of(Path::new(&dev)) {
                        Some(n) => f.swap_devnums.push(n),
                        None => f.swap_unresolved.push(dev),
                    }
                }
            }
            Err(e) => {
                f.unknown.get_or_insert(format!("{}: {e}", swaps.display()));
            }
        }
        f
    }

    pub fn live() -> SystemFacts {
        SystemFacts::read(Path::new("/proc/self/mountinfo"), Path::new("/proc/swaps"))
    }
}

/// The device column of /proc/swaps (header skipped; `\040` escapes as in mountinfo).
pub fn swap_devices(text: &str) -> Vec<String> {
    text.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .map(|s| s.replace("\\040", " "))
        .collect()
}

/// `major:minor` of a block device node, or of the device holding a file's filesystem (a
/// swap file, a test file).
pub fn devnum_of(p: &Path) -> Option<String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let md = std::fs::metadata(p).ok()?;
    let dev = if md.file_type().is_block_device() {
        md.rdev()
    } else {
        md.dev()
    };
    Some(format!("{}:{}", libc::major(dev), libc::minor(dev)))
}

/// Why a target may not be written. Each names the fact and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "rule", content = "detail", rename_all = "kebab-case")]
pub enum Refusal {
    #[error("{0} holds a system filesystem ({1}): usbperf never writes to the system disk raw")]
    SystemDisk(String, String),
    #[error("{0} is mounted at {1}: unmount it, or test with a file in that filesystem instead")]
    Mounted(String, String),
    #[error("{0} is (or contains) active swap: swapoff it first")]
    Swap(String),
    #[error(
        "{0} is held by {1} (RAID, LVM, dm-crypt or multipath member): writing it would corrupt \
         the array or volume"
    )]
    Held(String, String),
    #[error("{0} is the eMMC {1} area (bootloader or keys), never a test target")]
    EmmcArea(String, String),
    #[error("{0} is read-only (write-protect switch, `ro` flag or a read-only mount)")]
    ReadOnly(String),
    #[error(
        "the mount table or swap list is unreadable ({0}): usbperf cannot prove {1} is unused, \
         so it will not write to it"
    )]
    Unknown(String, String),
    #[error(
        "{0} is a block device over raw flash (MTD/UBI): writing it bypasses the bad-block \
         handling and the wear levelling; test the flash with `usbperf-matrix flash speed`"
    )]
    RawFlash(String),
    #[error("{0} is not a disk in the inventory (unplugged, or not a block device)")]
    NotFound(String),
    #[error("{0} is a symbolic link: test directories must be real directories")]
    Symlink(String),
    #[error("{0}: {1}")]
    Directory(String, String),
    #[error(
        "{dir} has {free_bytes} bytes free; keeping {headroom_bytes} free (headroom) leaves too \
         little for a test file of {min_bytes} bytes: free some space or lower the headroom"
    )]
    NoRoom {
        dir: String,
        free_bytes: u64,
        headroom_bytes: u64,
        min_bytes: u64,
    },
}

/// Why a disk counts as a system disk (never selected by "all non-system", never raw-written).
pub fn system_reasons(disk: &Disk, facts: &SystemFacts) -> Vec<Refusal> {
    let mut out = Vec::new();
    let mut devnums: Vec<(String, String)> = Vec::new();
    if let Some(d) = &disk.devnum {
        devnums.push((disk.name.clone(), d.clone()));
    }
    for p in &disk.partitions {
        if let Some(d) = &p.devnum {
            devnums.push((p.name.clone(), d.clone()));
        }
    }
    for (name, dn) in &devnums {
        for m in facts.mounts.iter().filter(|m| &m.devnum == dn) {
            if SYSTEM_MOUNTS.contains(&m.mountpoint.as_str()) {
                out.push(Refusal::SystemDisk(
                    disk.name.clone(),
                    format!("{name} mounted at {}", m.mountpoint),
                ));
            }
        }
        if facts.swap_devnums.contains(dn) {
            out.push(Refusal::Swap(name.clone()));
        }
    }
    // A root on dm/overlay still shows its source device in mountinfo.
    for m in &facts.mounts {
        if SYSTEM_MOUNTS.contains(&m.mountpoint.as_str()) {
            let src = m.source.trim_start_matches("/dev/");
            if src == disk.name || disk.partitions.iter().any(|p| p.name == src) {
                let r = Refusal::SystemDisk(
                    disk.name.clone(),
                    format!("{} mounted at {}", m.source, m.mountpoint),
                );
                if !out.contains(&r) {
                    out.push(r);
                }
            }
        }
    }
    if !disk.holders.is_empty() {
        out.push(Refusal::Held(disk.name.clone(), disk.holders.join(",")));
    }
    for p in &disk.partitions {
        if !p.holders.is_empty() {
            out.push(Refusal::Held(p.name.clone(), p.holders.join(",")));
        }
    }
    if disk.class == DeviceClass::Mtd {
        out.push(Refusal::RawFlash(disk.name.clone()));
    }
    if let Some(area) = disk.mmc.as_ref().and_then(|m| m.area) {
        if area != EmmcArea::User {
            let a = serde_json::to_value(area)
                .ok()
                .map(|v| v.to_string().trim_matches('"').to_string())
                .unwrap_or_default();
            out.push(Refusal::EmmcArea(disk.name.clone(), a));
        }
    }
    out
}

/// May `disk` be written raw (the whole device, no filesystem)? Every rule is checked and
/// every failing one reported.
pub fn check_raw_write(disk: &Disk, facts: &SystemFacts) -> Result<(), Vec<Refusal>> {
    let mut out = system_reasons(disk, facts);
    if let Some(u) = &facts.unknown {
        out.push(Refusal::Unknown(u.clone(), disk.name.clone()));
    }
    for m in &disk.mounts {
        out.push(Refusal::Mounted(disk.name.clone(), m.mountpoint.clone()));
    }
    for p in &disk.partitions {
        for m in &p.mounts {
            out.push(Refusal::Mounted(p.name.clone(), m.mountpoint.clone()));
        }
    }
    // The inventory's mounts come from the same table; check it again by devnum in case the
    // inventory was taken before a mount appeared.
    if let Some(dn) = &disk.devnum {
        for m in facts.mounts.iter().filter(|m| &m.devnum == dn) {
            let r = Refusal::Mounted(disk.name.clone(), m.mountpoint.clone());
            if !out.contains(&r) {
                out.push(r);
            }
        }
    }
    if disk.read_only != Some(false) {
        out.push(Refusal::ReadOnly(disk.name.clone()));
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(out)
    }
}

/// The block devices `name` sits on (`slaves/` of a dm or md device: an LVM volume, a RAID
/// array, a dm-crypt mapping), read from the sysfs root; empty for a plain disk.
pub fn slaves_of(sys: &SysfsRoot, name: &str) -> Vec<String> {
    sys.list(&format!("class/block/{name}"), "slaves")
}

/// For a stacked device (dm, md): every disk under it must be one usbperf may write raw, but
/// for being held by this very device. An unmounted LVM volume or an inactive A/B mapping on
/// the system eMMC passes every rule of its own and is claimed by nothing, so without this
/// check a raw write would land on the system disk. Devices under it that are not in the
/// inventory are refused (nothing can be proven about them).
pub fn check_stacked(
    sys: &SysfsRoot,
    disk: &Disk,
    inv: &Inventory,
    facts: &SystemFacts,
) -> Result<(), Vec<Refusal>> {
    let mut out = Vec::new();
    for slave in slaves_of(sys, &disk.name) {
        let devnum = sys
            .attr(&format!("class/block/{slave}"), "dev")
            .unwrap_or_default();
        let Some(under) = disk_of(inv, &devnum) else {
            out.push(Refusal::NotFound(format!("{slave} (under {})", disk.name)));
            continue;
        };
        if let Err(rs) = check_raw_write(under, facts) {
            for r in rs {
                let own_holder =
                    matches!(&r, Refusal::Held(_, by) if by.split(',').all(|h| h == disk.name));
                if !own_holder {
                    out.push(Refusal::Held(
                        format!("{} sits on {slave} of {}, and {r}", disk.name, under.name),
                        disk.name.clone(),
                    ));
                }
            }
        }
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(out)
    }
}

/// May the block device node `dev` (a whole disk or a partition, by any name: `/dev/sda1`,
/// `/dev/disk/by-id/...`) be written raw? It is resolved to its whole disk in the inventory,
/// and that disk must pass every rule of `check_raw_write`: a partition of a disk whose other
/// partition is mounted is refused too, since one wrong offset reaches the mounted one.
/// Returns the whole disk's name.
pub fn check_device_write(
    dev: &Path,
    sys: &SysfsRoot,
    inv: &Inventory,
    facts: &SystemFacts,
) -> Result<String, Vec<Refusal>> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let shown = dev.display().to_string();
    let md = std::fs::metadata(dev).map_err(|_| vec![Refusal::NotFound(shown.clone())])?;
    if !md.file_type().is_block_device() {
        return Err(vec![Refusal::NotFound(shown)]);
    }
    let devnum = format!("{}:{}", libc::major(md.rdev()), libc::minor(md.rdev()));
    let disk = disk_of(inv, &devnum).ok_or_else(|| vec![Refusal::NotFound(shown)])?;
    check_raw_write(disk, facts)?;
    check_stacked(sys, disk, inv, facts)?;
    Ok(disk.name.clone())
}

/// Where a file-based test may write, once the directory passed every check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FileTarget {
    pub dir: PathBuf,
    /// The disk holding the filesystem, when it is in the inventory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<String>,
    pub mountpoint: String,
    pub fstype: String,
    pub free_bytes: u64,
    pub headroom_bytes: u64,
    /// The largest test file that still leaves the headroom free.
    pub max_file_bytes: u64,
}

/// Finds the mount holding `dir` (longest mount-point prefix of its canonical path).
pub fn mount_of<'m>(dir: &Path, mounts: &'m [MountEntry]) -> Option<&'m MountEntry> {
    mounts
        .iter()
        .filter(|m| dir.starts_with(&m.mountpoint))
        .max_by_key(|m| m.mountpoint.len())
}

/// The disk (in the inventory) that holds the block device `devnum`, directly or as a
/// partition.
pub fn disk_of<'i>(inv: &'i Inventory, devnum: &str) -> Option<&'i Disk> {
    inv.disks.iter().find(|d| {
        d.devnum.as_deref() == Some(devnum)
            || d.partitions
                .iter()
                .any(|p| p.devnum.as_deref() == Some(devnum))
    })
}

/// May test files be written in `dir`? It must be a real directory (not a symlink), on a
/// writable filesystem, with room for at least `min_bytes` above the headroom (the larger of
/// `headroom_percent` of the filesystem and `headroom_min_bytes`).
pub fn check_file_dir(
    dir: &Path,
    facts: &SystemFacts,
    inv: &Inventory,
    headroom_percent: u8,
    headroom_min_bytes: u64,
    min_bytes: u64,
) -> Result<FileTarget, Refusal> {
    let shown = dir.display().to_string();
    let md = std::fs::symlink_metadata(dir).map_err(|e| {
        Refusal::Directory(shown.clone(), format!("{e}: create it or fix the path"))
    })?;
    if md.file_type().is_symlink() {
        return Err(Refusal::Symlink(shown));
    }
    if !md.is_dir() {
        return Err(Refusal::Directory(shown, "not a directory".into()));
    }
    let canon = dir
        .canonicalize()
        .map_err(|e| Refusal::Directory(shown.clone(), e.to_string()))?;
    if let Some(u) = &facts.unknown {
        return Err(Refusal::Unknown(u.clone(), shown));
    }
    let m = mount_of(&canon, &facts.mounts)
        .ok_or_else(|| Refusal::Directory(shown.clone(), "no mount holds it".into()))?;
    let disk = disk_of(inv, &m.devnum);
    if m.read_only {
        return Err(Refusal::ReadOnly(format!(
            "{shown} (mounted ro at {})",
            m.mountpoint
        )));
    }
    if let Some(d) = disk {
        if let Some(area) = d.mmc.as_ref().and_then(|x| x.area) {
            if area != EmmcArea::User {
                return Err(Refusal::EmmcArea(d.name.clone(), area.as_str().to_string()));
            }
        }
    }
    let st = nix::sys::statvfs::statvfs(&canon)
        .map_err(|e| Refusal::Directory(shown.clone(), format!("statvfs: {e}")))?;
    let frsize = st.fragment_size() as u64;
    let total = st.blocks() as u64 * frsize;
    let free = st.blocks_available() as u64 * frsize;
    let headroom = (total / 100 * u64::from(headroom_percent)).max(headroom_min_bytes);
    let max_file = free.saturating_sub(headroom);
    if max_file < min_bytes {
        return Err(Refusal::NoRoom {
            dir: shown,
            free_bytes: free,
            headroom_bytes: headroom,
            min_bytes,
        });
    }
    Ok(FileTarget {
        dir: canon,
        disk: disk.map(|d| d.name.clone()),
        mountpoint: m.mountpoint.clone(),
        fstype: m.fstype.clone(),
        free_bytes: free,
        headroom_bytes: headroom,
        max_file_bytes: max_file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::{MmcInfo, Mount, Partition};

    fn mnt(devnum: &str, at: &str, src: &str) -> MountEntry {
        MountEntry {
            devnum: devnum.into(),
            mountpoint: at.into(),
            fstype: "ext4".into(),
            source: src.into(),
            read_only: false,
        }
    }

    fn disk(name: &str, devnum: &str, parts: &[(&str, &str)]) -> Disk {
        Disk {
            name: name.into(),
            devnum: Some(devnum.into()),
            read_only: Some(false),
            partitions: parts
                .iter()
                .map(|(n, d)| Partition {
                    name: n.to_string(),
                    devnum: Some(d.to_string()),
                    ..Partition::default()
                })
                .collect(),
            ..Disk::default()
        }
    }

    #[test]
    fn swap_list_columns() {
        let t = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
                 /dev/sda2                               partition\t2097148\t\t0\t\t-2\n\
                 /swap\\040file                          file\t\t1024\t\t0\t\t-3\n";
        assert_eq!(swap_devices(t), vec!["/dev/sda2", "/swap file"]);
    }

    #[test]
    fn raw_write_rules() {
        let facts = SystemFacts {
            mounts: vec![
                mnt("179:2", "/", "/dev/mmcblk0p2"),
                mnt("179:1", "/boot", "/dev/mmcblk0p1"),
                mnt("8:17", "/media/stick", "/dev/sdb1"),
            ],
            swap_devnums: vec!["8:34".into()],
            ..SystemFacts::default()
        };
        let root = disk(
            "mmcblk0",
            "179:0",
            &[("mmcblk0p1", "179:1"), ("mmcblk0p2", "179:2")],
        );
        let mut mounted = disk("sdb", "8:16", &[("sdb1", "8:17")]);
        mounted.partitions[0].mounts.push(Mount {
            mountpoint: "/media/stick".into(),
            fstype: "vfat".into(),
            read_only: false,
        });
        let swap = disk("sdc", "8:32", &[("sdc2", "8:34")]);
        let mut lvm = disk("sdd", "8:48", &[]);
        lvm.holders = vec!["dm-0".into()];
        let mut boot0 = disk("mmcblk0boot0", "179:8", &[]);
        boot0.mmc = Some(MmcInfo {
            area: Some(EmmcArea::Boot0),
            ..MmcInfo::default()
        });
        let mut ro = disk("sde", "8:64", &[]);
        ro.read_only = Some(true);
        let mut unknown_ro = disk("sdf", "8:80", &[]);
        unknown_ro.read_only = None;
        let free = disk("sdg", "8:96", &[("sdg1", "8:97")]);

        let table: Vec<(&Disk, &[&str])> = vec![
            (
                &root,
                &[
                    "system filesystem (mmcblk0p2 mounted at /)",
                    "mmcblk0p1 mounted at /boot",
                ],
            ),
            (&mounted, &["sdb1 is mounted at /media/stick"]),
            (&swap, &["sdc2 is (or contains) active swap"]),
            (&lvm, &["held by dm-0"]),
            (&boot0, &["eMMC boot0 area"]),
            (&ro, &["sde is read-only"]),
            (&unknown_ro, &["sdf is read-only"]),
        ];
        for (d, wants) in table {
            let errs = check_raw_write(d, &facts).expect_err(&d.name);
            let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
            for w in wants {
                assert!(
                    text.iter().any(|t| t.contains(w)),
                    "{}: {w:?} not in {text:?}",
                    d.name
                );
            }
        }
        assert_eq!(check_raw_write(&free, &facts), Ok(()));

        let unknown = SystemFacts {
            unknown: Some("/proc/self/mountinfo: denied".into()),
            ..SystemFacts::default()
        };
        assert!(matches!(
            check_raw_write(&free, &unknown).unwrap_err()[0],
            Refusal::Unknown(..)
        ));
    }

    #[test]
    fn a_stacked_device_is_judged_by_the_disks_under_it() {
        // A recorded-shape sysfs: dm-3 (an unmounted LVM volume) on mmcblk0p4 of the eMMC
        // that holds /, and dm-4 on a free stick's partition.
        let root = std::env::temp_dir().join(format!("usbperf-stacked-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (dev, slave, devnum) in [("dm-3", "mmcblk0p4", "179:4"), ("dm-4", "sdg1", "8:97")] {
            std::fs::create_dir_all(
                root.join("class/block")
                    .join(dev)
                    .join("slaves")
                    .join(slave),
            )
            .unwrap();
            std::fs::create_dir_all(root.join("class/block").join(slave)).unwrap();
            std::fs::write(
                root.join("class/block").join(slave).join("dev"),
                format!("{devnum}\n"),
            )
            .unwrap();
        }
        let facts = SystemFacts {
            mounts: vec![mnt("179:2", "/", "/dev/mmcblk0p2")],
            ..SystemFacts::default()
        };
        let mut emmc = disk(
            "mmcblk0",
            "179:0",
            &[("mmcblk0p2", "179:2"), ("mmcblk0p4", "179:4")],
        );
        emmc.partitions[1].holders = vec!["dm-3".into()];
        let mut stick = disk("sdg", "8:96", &[("sdg1", "8:97")]);
        stick.partitions[0].holders = vec!["dm-4".into()];
        let dm3 = disk("dm-3", "253:3", &[]);
        let dm4 = disk("dm-4", "253:4", &[]);
        let inv = Inventory {
            disks: vec![emmc, stick, dm3.clone(), dm4.clone()],
            ..Inventory::default()
        };
        // dm-3 passes every rule of its own...
        assert_eq!(check_raw_write(&dm3, &facts), Ok(()));
        // ...but sits on the system disk.
        let sys = SysfsRoot::at(&root);
        let errs = check_stacked(&sys, &dm3, &inv, &facts).unwrap_err();
        let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert!(
            text.iter()
                .any(|t| t.contains("dm-3 sits on mmcblk0p4 of mmcblk0")
                    && t.contains("mounted at /")),
            "{text:?}"
        );
        // A volume on a free disk is held only by itself: writable.
        assert_eq!(check_stacked(&sys, &dm4, &inv, &facts), Ok(()));
        // A plain disk has nothing under it.
        assert_eq!(check_stacked(&sys, &inv.disks[1], &inv, &facts), Ok(()));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn longest_mount_prefix_wins() {
        let ms = vec![
            mnt("8:1", "/", "/dev/sda1"),
            mnt("8:17", "/media/usb", "/dev/sdb1"),
        ];
        assert_eq!(
            mount_of(Path::new("/media/usb/t"), &ms).unwrap().devnum,
            "8:17"
        );
        assert_eq!(
            mount_of(Path::new("/media/usb2"), &ms).unwrap().devnum,
            "8:1"
        );
    }
}
