//! Owns the test target: opening a file or block device with the right flags, creating a new
//! file (O_EXCL|O_NOFOLLOW), preallocating or filling it, deleting it afterwards, refusing to
//! write to block devices without permission, cache drops, and the device's queue settings.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::WorkloadError;

/// What the path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum TargetKind {
    File,
    BlockDevice,
}

/// The block queue settings that shape sequential figures (read from sysfs, best-effort).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct QueueInfo {
    /// The sysfs device the settings come from (the whole disk for a partition).
    pub device: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_ahead_kb: Option<u64>,
    /// The active I/O scheduler (the bracketed one in `queue/scheduler`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<String>,
}

/// How the test opens the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenMode {
    pub write: bool,
    pub direct: bool,
    pub dsync: bool,
}

/// What to do when the path does not exist yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preparation {
    /// Reserve the blocks (fallocate): writes then do not measure block allocation.
    Preallocate,
    /// Write real data over the whole size: reads of holes or unwritten extents are not reads.
    Fill,
}

/// An open target; a file we created is deleted on drop unless `keep`.
pub struct Target {
    pub path: PathBuf,
    pub kind: TargetKind,
    pub file: File,
    /// Bytes usable for the test (the file or device size, or the size we created).
    pub size_bytes: u64,
    pub created: bool,
    /// A file we created and do not keep: registered for the signal path, removed on drop.
    _owned: Option<crate::safety::testfile::TestFile>,
}

fn open_error(path: &Path, source: std::io::Error) -> WorkloadError {
    WorkloadError::Open {
        path: path.to_path_buf(),
        source,
    }
}

impl Target {
    /// Opens `path` for a test: creates it at `size_bytes` when it does not exist, refuses
    /// writes to a block device unless `allow_write_device`.
    pub fn open(
        path: &Path,
        mode: OpenMode,
        size_bytes: Option<u64>,
        prepare: Preparation,
        allow_write_device: bool,
        keep: bool,
    ) -> Result<Self, WorkloadError> {
        // lstat, not stat: a symlink planted where a test file will be must never redirect our
        // writes into someone else's file. A symlink to a block device (/dev/disk/by-id/...)
        // is how devices are named, so that one is followed.
        // A file we create is ours from the moment it exists: registered for the signal path
        // and removed on every error path (and on drop unless `keep`).
        let mut owned = None;
        let created = match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => {
                let to_device = std::fs::metadata(path)
                    .map(|t| t.file_type().is_block_device())
                    .unwrap_or(false);
                if !to_device {
                    return Err(WorkloadError::Symlink(path.to_path_buf()));
                }
                false
            }
            Ok(_) => false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A missing /dev node is a missing device, never a place for a test file: a
                // file created there would pass a read test on RAM and take the node's name
                // from the disk when it comes back.
                if crate::safety::target::under_dev(path) {
                    return Err(WorkloadError::NoDevice(path.to_path_buf()));
                }
                let size = size_bytes.ok_or_else(|| WorkloadError::NeedSize(path.to_path_buf()))?;
                let file = create_exclusive(path)?;
                owned = Some(crate::safety::testfile::TestFile::adopt(path.to_path_buf()));
                prepare_file(&file, size, prepare).map_err(|e| WorkloadError::Prepare {
                    path: path.to_path_buf(),
                    source: e,
                })?;
                true
            }
            Err(e) => return Err(open_error(path, e)),
        };
        let meta = std::fs::metadata(path).map_err(|e| open_error(path, e))?;
        let kind = if meta.file_type().is_block_device() {
            TargetKind::BlockDevice
        } else if meta.is_file() {
            TargetKind::File
        } else {
            return Err(WorkloadError::NotATarget(path.to_path_buf()));
        };
        if kind == TargetKind::BlockDevice && mode.write && !allow_write_device {
            return Err(WorkloadError::DeviceWriteRefused(path.to_path_buf()));
        }
        let mut flags = libc::O_CLOEXEC;
        if kind == TargetKind::File {
            // Closes the window between the lstat above and this open.
            flags |= libc::O_NOFOLLOW;
        }
        if kind == TargetKind::BlockDevice && mode.write {
            // The kernel's own guard, after every check of ours: a block device opened with
            // O_EXCL fails with EBUSY while anything claims it (a mounted filesystem, swap,
            // an md/dm member), closing the window between our checks and this open.
            flags |= libc::O_EXCL;
        }
        if mode.direct {
            flags |= libc::O_DIRECT;
        }
        if mode.dsync {
            flags |= libc::O_DSYNC;
        }
        let open = || {
            OpenOptions::new()
                .read(true)
                .write(mode.write)
                .custom_flags(flags)
                .open(path)
        };
        let mut opened = open();
        // An io_uring ring drops its registered files asynchronously after it is torn down
        // (the kernel's ring-exit work), so the previous test's exclusive claim on this very
        // device can outlive it by a few milliseconds. A real holder (a mount) stays: retry
        // for up to a second, then report it busy.
        let mut tries = 0;
        while kind == TargetKind::BlockDevice
            && mode.write
            && tries < 20
            && matches!(&opened, Err(e) if e.raw_os_error() == Some(libc::EBUSY))
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
            opened = open();
            tries += 1;
        }
        let mut file = opened.map_err(|e| {
            if e.raw_os_error() == Some(libc::EINVAL) && mode.direct {
                WorkloadError::DirectUnsupported(path.to_path_buf())
            } else if e.raw_os_error() == Some(libc::EBUSY) && kind == TargetKind::BlockDevice {
                WorkloadError::DeviceBusy(path.to_path_buf())
            } else {
                open_error(path, e)
            }
        })?;
        let actual = file
            .seek(SeekFrom::End(0))
            .map_err(|e| open_error(path, e))?;
        let mut usable = actual;
        if let Some(size) = size_bytes {
            if size > actual {
                if kind == TargetKind::File && mode.write {
                    // Growing a file we write to is what the user asked for; reserve it.
                    allocate(&file, size).map_err(|e| open_error(path, e))?;
                } else {
                    return Err(WorkloadError::TooSmall {
                        path: path.to_path_buf(),
                        actual_bytes: actual,
                        wanted_bytes: size,
                    });
                }
            }
            usable = size;
        }
        if keep {
            // Asked to stay: no longer ours to remove.
            if let Some(o) = owned.take() {
                o.release();
            }
        }
        Ok(Target {
            path: path.to_path_buf(),
            kind,
            file,
            size_bytes: usable,
            created,
            _owned: owned,
        })
    }

    /// Keeps a file we created in place when this value drops (a test whose data is to be
    /// read back later, after a reboot).
    pub fn keep(&mut self) {
        if let Some(o) = self._owned.take() {
            o.release();
        }
    }

    pub fn fd(&self) -> i32 {
        self.file.as_raw_fd()
    }

    /// Flushes written data to the medium (the `fdatasync` cache mode's final flush).
    pub fn flush(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    /// Drops the target's pages from the page cache so the next reads hit the medium:
    /// POSIX_FADV_DONTNEED always, and `/proc/sys/vm/drop_caches` when we are root.
    pub fn drop_cache(&self) -> String {
        let _ = self.file.sync_data();
        // SAFETY: valid fd; advice on the whole file.
        let rc = unsafe { libc::posix_fadvise(self.fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let mut done = if rc == 0 {
            "posix_fadvise(DONTNEED)".to_string()
        } else {
            format!(
                "posix_fadvise(DONTNEED) failed: {}",
                std::io::Error::from_raw_os_error(rc)
            )
        };
        // SAFETY: geteuid has no failure mode.
        if unsafe { libc::geteuid() } == 0 {
            // SAFETY: sync has no failure mode.
            unsafe { libc::sync() };
            match std::fs::write("/proc/sys/vm/drop_caches", "1") {
                Ok(()) => done.push_str(", drop_caches=1"),
                Err(e) => done.push_str(&format!(", drop_caches failed: {e}")),
            }
        }
        done
    }

    /// The queue settings of the device holding the target, from `<sysfs_root>/dev/block`.
    pub fn queue_info(&self, sysfs_root: &Path) -> Option<QueueInfo> {
        let meta = self.file.metadata().ok()?;
        let dev = if self.kind == TargetKind::BlockDevice {
            std::os::unix::fs::MetadataExt::rdev(&meta)
        } else {
            std::os::unix::fs::MetadataExt::dev(&meta)
        };
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        queue_info_for(sysfs_root, major, minor)
    }
}

/// Reads `queue/read_ahead_kb` and `queue/scheduler` of device `major:minor` under a sysfs
/// root; for a partition, of its disk. `None` when the device is not in that tree.
pub fn queue_info_for(sysfs_root: &Path, major: u32, minor: u32) -> Option<QueueInfo> {
    let link = sysfs_root.join(format!("dev/block/{major}:{minor}"));
    let mut dir = std::fs::canonicalize(&link).ok()?;
    if dir.join("partition").exists() {
        dir = dir.parent()?.to_path_buf();
    }
    let queue = dir.join("queue");
    let read_ahead_kb = std::fs::read_to_string(queue.join("read_ahead_kb"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let scheduler = std::fs::read_to_string(queue.join("scheduler"))
        .ok()
        .and_then(|s| active_scheduler(&s));
    if read_ahead_kb.is_none() && scheduler.is_none() {
        return None;
    }
    Some(QueueInfo {
        device: dir.file_name()?.to_string_lossy().into_owned(),
        read_ahead_kb,
        scheduler,
    })
}

/// `mq-deadline kyber [bfq] none` → `bfq`; a single word (`none`) is itself.
fn active_scheduler(text: &str) -> Option<String> {
    let text = text.trim();
    if let (Some(open), Some(close)) = (text.find('['), text.find(']')) {
        return Some(text[open + 1..close].to_string());
    }
    (!text.is_empty() && !text.contains(' ')).then(|| text.to_string())
}

fn allocate(file: &File, size: u64) -> std::io::Result<()> {
    // fallocate64: off_t is 32 bits on armv7, where a cast would cut a size of 2 GiB or more.
    let len = i64::try_from(size).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: valid fd; mode 0 allocates and extends.
    let rc = unsafe { libc::fallocate64(file.as_raw_fd(), 0, 0, len) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EOPNOTSUPP) {
        // tmpfs before 5.x, some FUSE file systems: a sized sparse file is the best we can do.
        return file.set_len(size);
    }
    Err(err)
}

/// Creates the file exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`): never an existing file, never
/// through a planted symlink.
fn create_exclusive(path: &Path) -> Result<File, WorkloadError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| open_error(path, e))
}

/// Reserves the file's blocks, and fills it with data for read tests.
fn prepare_file(file: &File, size: u64, prepare: Preparation) -> std::io::Result<()> {
    allocate(file, size)?;
    if prepare == Preparation::Fill {
        fill(file, size)?;
    }
    Ok(())
}

/// Writes incompressible data over the whole file and flushes it.
fn fill(file: &File, size: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    const CHUNK: usize = 1 << 20;
    let mut chunk = vec![0u8; CHUNK];
    let mut offset = 0u64;
    while offset < size {
        let len = (size - offset).min(CHUNK as u64) as usize;
        crate::engine::fill_random(&mut chunk[..len], offset);
        file.write_all_at(&chunk[..len], offset)?;
        offset += len as u64;
    }
    file.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hidden NVMe multipath path (`nvme0c0n1`, no device node) or an unplugged stick: the
    /// read test once created and filled a regular file at /dev/nvme0c0n1 and passed on it
    /// (QEMU 10 NVMe, Linux 6.12).
    #[test]
    fn a_missing_device_node_is_an_error_never_a_file_in_dev() {
        let path = Path::new("/dev/usbperf-no-such-disk-0c0n1");
        let mode = OpenMode {
            write: false,
            direct: false,
            dsync: false,
        };
        for p in [
            path.to_path_buf(),
            Path::new("/dev/../dev/usbperf-no-such-disk-0c0n1").into(),
        ] {
            let r = Target::open(&p, mode, Some(1 << 20), Preparation::Fill, false, false);
            assert!(
                matches!(r, Err(WorkloadError::NoDevice(_))),
                "{p:?}: {:?}",
                r.err()
            );
            assert!(!path.exists(), "a file was left at {path:?}");
        }
        assert!(!crate::safety::target::under_dev(Path::new(
            "/var/lib/usbperf/scratch/x"
        )));
        // a tmpfs mounted below /dev is not the device directory
        if std::fs::metadata("/dev/shm").is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata("/dev").is_ok_and(|d| d.dev() != m.dev())
        }) {
            assert!(!crate::safety::target::under_dev(Path::new(
                "/dev/shm/usbperf-test"
            )));
        }
    }

    #[test]
    fn active_scheduler_is_the_bracketed_one() {
        assert_eq!(
            active_scheduler("mq-deadline kyber [bfq] none\n").as_deref(),
            Some("bfq")
        );
        assert_eq!(active_scheduler("none\n").as_deref(), Some("none"));
        assert_eq!(active_scheduler(""), None);
    }

    #[test]
    fn queue_info_reads_a_recorded_tree_and_climbs_from_a_partition() {
        let root = std::env::temp_dir().join(format!("usbperf-sysfs-{}", std::process::id()));
        let disk = root.join("devices/virtual/block/sdz");
        std::fs::create_dir_all(disk.join("queue")).unwrap();
        std::fs::create_dir_all(disk.join("sdz1")).unwrap();
        std::fs::write(disk.join("sdz1/partition"), "1\n").unwrap();
        std::fs::write(disk.join("queue/read_ahead_kb"), "4096\n").unwrap();
        std::fs::write(disk.join("queue/scheduler"), "[mq-deadline] none\n").unwrap();
        std::fs::create_dir_all(root.join("dev/block")).unwrap();
        std::os::unix::fs::symlink(disk.join("sdz1"), root.join("dev/block/8:1")).unwrap();
        let info = queue_info_for(&root, 8, 1).unwrap();
        assert_eq!(info.device, "sdz");
        assert_eq!(info.read_ahead_kb, Some(4096));
        assert_eq!(info.scheduler.as_deref(), Some("mq-deadline"));
        assert_eq!(queue_info_for(&root, 8, 2), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
