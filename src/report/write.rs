//! Owns durable report files: write to a temporary file in the same directory, fsync it,
//! rename over the final name, fsync the directory — a power cut leaves the old report or the
//! new one, never a torn file.

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
    #[error("cannot write the report {path}: {err}")]
    File { path: PathBuf, err: io::Error },
}

/// Atomically replaces `path` with `bytes`.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let dir = path.parent().unwrap_or(Path::new("."));
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
        std::fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
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
    fn unwritable_directory_is_a_clear_error() {
        // /proc refuses new files even for root.
        let err = atomic_write(Path::new("/proc/usbperf-report.yaml"), b"x").unwrap_err();
        assert!(
            err.to_string().contains("/proc/usbperf-report.yaml"),
            "{err}"
        );
    }
}
