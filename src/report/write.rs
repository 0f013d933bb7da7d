//! Owns durable report files: write to a temporary file in the same directory, fsync it,
//! rename over the final name, fsync the directory — a power cut leaves the old report or the
//! new one, never a torn file. A run's first write never replaces a file that is already
//! there (`RENAME_NOREPLACE`, or link-then-unlink where the filesystem lacks it): a report
//! never replaces another run's.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(
        "cannot create the report directory {dir}: {err} (is the rootfs read-only? pass \
         --report-dir on a writable filesystem)"
    )]
    Dir { dir: PathBuf, err: io::Error },
    #[error(
        "the report directory {dir} cannot be made: {file} is a file, not a directory (remove \
         it, or pass --report-dir naming a directory)"
    )]
    NotADir { dir: PathBuf, file: PathBuf },
    #[error("cannot write the report {path}: {err}")]
    File { path: PathBuf, err: io::Error },
}

/// Atomically replaces `path` with `bytes`.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    write_with(path, bytes, Publish::Replace)
}

/// Atomically creates `path` with `bytes`; fails with `io::ErrorKind::AlreadyExists` (inside
/// `WriteError::File`) when anything already has that name, which is left untouched.
pub fn atomic_create(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    write_with(path, bytes, Publish::NoReplace)
}

impl WriteError {
    /// Why, without the path: for a message that names the file itself.
    pub fn cause(&self) -> String {
        match self {
            WriteError::Dir { err, .. } | WriteError::File { err, .. } => err.to_string(),
            WriteError::NotADir { file, .. } => {
                format!("{} is a file, not a directory", file.display())
            }
        }
    }

    /// True when the name was taken (`atomic_create` on an existing file).
    pub fn is_exists(&self) -> bool {
        matches!(self, WriteError::File { err, .. } if err.kind() == io::ErrorKind::AlreadyExists)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Publish {
    Replace,
    NoReplace,
}

/// Renames `from` to `to` unless `to` exists. renameat2(RENAME_NOREPLACE) is atomic on ext4,
/// xfs, btrfs, f2fs, vfat and tmpfs (Linux 3.15+); where the filesystem or kernel refuses the
/// flag (EINVAL, ENOSYS), a hard link is just as exclusive (link never replaces), then the
/// temporary name is unlinked. The raw syscall is used because glibc < 2.28 and musl have no
/// wrapper, and Yocto images use both.
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let cstr = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
    };
    let (f, t) = (cstr(from)?, cstr(to)?);
    const RENAME_NOREPLACE: libc::c_uint = 1;
    // SAFETY: both paths are valid NUL-terminated strings; AT_FDCWD resolves them as given.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EINVAL) | Some(libc::ENOSYS) => {
            std::fs::hard_link(from, to)?;
            std::fs::remove_file(from)
        }
        _ => Err(err),
    }
}

fn write_with(path: &Path, bytes: &[u8], publish: Publish) -> Result<(), WriteError> {
    // `junit.xml` has the parent "": the current directory.
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // A file where the directory (or one above it) should be: say that, not "File exists".
    if let Some(file) = dir.ancestors().find(|a| a.exists() && !a.is_dir()) {
        return Err(WriteError::NotADir {
            dir: dir.to_path_buf(),
            file: file.to_path_buf(),
        });
    }
    std::fs::create_dir_all(dir).map_err(|err| WriteError::Dir {
        dir: dir.to_path_buf(),
        err,
    })?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "report".into());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let ferr = |err| WriteError::File {
        path: path.to_path_buf(),
        err,
    };
    // A leftover from a crash of this same pid would block create_new: remove it first.
    let _ = std::fs::remove_file(&tmp);
    let res = (|| -> io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        match publish {
            Publish::Replace => std::fs::rename(&tmp, path)?,
            Publish::NoReplace => rename_noreplace(&tmp, path)?,
        }
        // The file is in place from here on: a directory that refuses the fsync (some FUSE
        // and network filesystems) must not make a published report look unwritten, or the
        // next write would create a second one beside it.
        let _ = File::open(dir).and_then(|d| d.sync_all());
        Ok(())
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res.map_err(ferr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_file_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("usbperf-aw-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let p = dir.join("sub/report.yaml");
        atomic_write(&p, b"first: 1\n").unwrap();
        atomic_write(&p, b"second: 2\n").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second: 2\n");
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("report.yaml")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn create_never_replaces_an_existing_report() {
        let dir = std::env::temp_dir().join(format!("usbperf-ac-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let p = dir.join("report.yaml");
        atomic_create(&p, b"first: 1\n").unwrap();
        let err = atomic_create(&p, b"second: 2\n").unwrap_err();
        assert!(err.is_exists(), "{err}");
        assert_eq!(std::fs::read(&p).unwrap(), b"first: 1\n");
        // No temporary is left behind by the refused create.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("report.yaml")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unwritable_directory_is_a_clear_error() {
        // /proc refuses new files even for root.
        let err = atomic_write(Path::new("/proc/usbperf-report.yaml"), b"x").unwrap_err();
        assert!(
            err.to_string().contains("/proc/usbperf-report.yaml"),
            "{err}"
        );
    }
}
