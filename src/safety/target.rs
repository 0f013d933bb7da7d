//! Owns the rules for a target named on the command line (`bench --target`): what kind of
//! file it is, whether a file may be created or grown there, and for a block device every
//! rule of the factory run. Checked before any file is created or any I/O is done.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use super::{check_device_write, check_file_dir, SystemFacts};
use crate::discover::{self, Backend, DiscoverError};
use crate::sysfs::SysfsRoot;

/// The free space a created test file leaves on its filesystem, in percent.
const HEADROOM_PERCENT: u8 = 10;

/// What the command asks of its target.
#[derive(Debug, Clone, Copy)]
pub struct TargetUse<'a> {
    pub path: &'a Path,
    /// The region to test (`--size`); a file that does not exist is created at this size.
    pub size_bytes: Option<u64>,
    /// The workload writes.
    pub writes: bool,
    /// `--allow-write-device`: lifts only "this is a device", never a safety rule.
    pub allow_write_device: bool,
    /// The workload's name, for the message.
    pub workload: &'a str,
}

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The user's to fix (exit 2): the message says how.
    #[error("{0}")]
    Refused(String),
    /// The inventory could not be read, so nothing can be proven safe.
    #[error("cannot enumerate block devices to check {what}: {source}")]
    Inventory {
        what: &'static str,
        source: DiscoverError,
    },
}

impl crate::exit::Classify for TargetError {
    /// A refused target (mounted, the system disk, swap, a RAID member) is the user's to
    /// change; an inventory that cannot be read is not.
    fn exit(&self) -> crate::exit::Exit {
        match self {
            TargetError::Refused(_) => crate::exit::Exit::Usage,
            TargetError::Inventory { .. } => crate::exit::Exit::Error,
        }
    }
}

/// Checks the target against every rule. `--allow-write-device` only lifts "this is a
/// device"; a mounted, system, swap, RAID/LVM member or eMMC boot device is refused whatever
/// the flags say. Always the live system: a recorded tree cannot prove this machine's disk
/// is unused.
pub fn check_target(t: &TargetUse<'_>) -> Result<(), TargetError> {
    let path = t.path;
    let refused = |m: String| Err(TargetError::Refused(m));
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && under_dev(path) => {
            return refused(format!(
                "--target {}: no such device (unplugged, or never there): `usbperf-matrix \
                 list` names this machine's disks; usbperf never creates files under /dev",
                path.display()
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let Some(size) = t.size_bytes else {
                return refused(format!(
                    "--target {} does not exist: give --size to create a test file of that size there",
                    path.display()
                ));
            };
            return check_new_file(path, size);
        }
        Err(e) => return refused(format!("--target {}: {e}", path.display())),
    };
    // Follow a /dev/disk/by-id/... link to what it names; a symlink to a file is refused by
    // the target itself (a test file path must never redirect writes).
    let followed = if meta.file_type().is_symlink() {
        std::fs::metadata(path).ok()
    } else {
        Some(meta)
    };
    let Some(real) = followed else {
        return refused(format!(
            "--target {}: dangling symbolic link",
            path.display()
        ));
    };
    if real.is_dir() {
        return refused(format!(
            "--target {} is a directory: name a file in it (created at --size and removed \
             afterwards), e.g. {}/usbperf.bin",
            path.display(),
            path.display()
        ));
    }
    if !(real.is_file() || real.file_type().is_block_device()) {
        return refused(format!(
            "--target {} is neither a regular file nor a block device (character device, FIFO \
             or socket): point it at a file or a /dev/sdX-like disk",
            path.display()
        ));
    }
    if real.is_file() && t.writes {
        // Growing an existing file to --size takes room like a new file does: keep the
        // headroom for what is added.
        let grow = t.size_bytes.unwrap_or(0).saturating_sub(real.len());
        if grow > 0 {
            check_new_file(path, grow)?;
        }
    }
    if real.file_type().is_block_device() && t.writes {
        if !t.allow_write_device {
            return refused(format!(
                "{} is a block device and {} writes to it, destroying its data: add \
                 --allow-write-device if that is intended",
                path.display(),
                t.workload
            ));
        }
        let sys = SysfsRoot::live();
        let inv =
            discover::discover(&sys, Backend::Sysfs).map_err(|source| TargetError::Inventory {
                what: "the target is safe to write",
                source,
            })?;
        if let Err(refusals) = check_device_write(path, &sys, &inv, &SystemFacts::live()) {
            let why: Vec<String> = refusals.iter().map(|r| r.to_string()).collect();
            return refused(format!(
                "refusing to write to {}: {}",
                path.display(),
                why.join("; ")
            ));
        }
    }
    Ok(())
}

/// A file the command will create: its directory must be a real directory on a writable
/// filesystem with room for it above the free-space headroom, as a factory run's test files.
fn check_new_file(path: &Path, size: u64) -> Result<(), TargetError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // An inventory that cannot be read proves nothing (an eMMC boot area could hold the
    // directory): refuse, as everywhere else.
    let inv = discover::discover(&SysfsRoot::live(), Backend::Sysfs).map_err(|source| {
        TargetError::Inventory {
            what: "where the test file would go",
            source,
        }
    })?;
    check_file_dir(&dir, &SystemFacts::live(), &inv, HEADROOM_PERCENT, 0, size)
        .map(|_| ())
        .map_err(|r| TargetError::Refused(format!("cannot create {}: {r}", path.display())))
}

/// Whether `path` would be created in the device directory: under /dev (through any symlinked
/// parent) and on /dev's own filesystem. /dev/shm and other filesystems mounted below /dev
/// are ordinary places for a test file.
pub fn under_dev(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let Ok(parent) = parent.canonicalize() else {
        return path.starts_with("/dev");
    };
    if !parent.starts_with("/dev") {
        return false;
    }
    match (std::fs::metadata(&parent), std::fs::metadata("/dev")) {
        (Ok(p), Ok(d)) => p.dev() == d.dev(),
        _ => true,
    }
}
