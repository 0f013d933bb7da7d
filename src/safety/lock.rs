//! Owns "one run at a time": an exclusive `flock` on a lock file, released when the process
//! ends however it ends (the kernel drops the lock with the file descriptor).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another usbperf run holds {path} (pid {pid}): wait for it to finish; a stale lock \
         cannot happen, the kernel releases it when that process exits"
    )]
    Busy { path: PathBuf, pid: String },
    #[error("cannot open the lock file {path}: {err} (run as root, or pass --lock-file)")]
    Open { path: PathBuf, err: std::io::Error },
    #[error("cannot create the report directory {path}: {err}")]
    Dir { path: PathBuf, err: std::io::Error },
}

impl crate::exit::Classify for LockError {
    /// Another run holding the lock, or a lock that cannot be made: the tool cannot do its
    /// job now.
    fn exit(&self) -> crate::exit::Exit {
        match self {
            LockError::Busy { .. } | LockError::Open { .. } | LockError::Dir { .. } => {
                crate::exit::Exit::Error
            }
        }
    }
}

/// The lock file's name in the report directory when the given lock file cannot be opened.
pub const FALLBACK_NAME: &str = ".usbperf.lock";

/// Held for the whole run.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
    pub path: PathBuf,
}

impl RunLock {
    /// `path`, or when it cannot be opened (a minimal image without /run) `FALLBACK_NAME` in
    /// `report_dir`, which is created. A busy lock is never side-stepped.
    pub fn acquire_or_in(path: &Path, report_dir: &Path) -> Result<RunLock, LockError> {
        match RunLock::acquire(path) {
            Err(LockError::Open { .. }) => {
                std::fs::create_dir_all(report_dir).map_err(|err| LockError::Dir {
                    path: report_dir.to_path_buf(),
                    err,
                })?;
                RunLock::acquire(&report_dir.join(FALLBACK_NAME))
            }
            other => other,
        }
    }

    pub fn acquire(path: &Path) -> Result<RunLock, LockError> {
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|err| LockError::Open {
                path: path.to_path_buf(),
                err,
            })?;
        // SAFETY: flock on a descriptor we own; no memory is involved.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let mut pid = String::new();
            let _ = f.read_to_string(&mut pid);
            return Err(LockError::Busy {
                path: path.to_path_buf(),
                pid: pid.trim().to_string(),
            });
        }
        let _ = f.set_len(0);
        let _ = f.seek(SeekFrom::Start(0));
        let _ = writeln!(f, "{}", std::process::id());
        Ok(RunLock {
            _file: f,
            path: path.to_path_buf(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_is_refused_with_the_first_pid() {
        let p = std::env::temp_dir().join(format!("usbperf-lock-{}", std::process::id()));
        let first = RunLock::acquire(&p).unwrap();
        // flock locks belong to the open file description: a second open is a second holder.
        match RunLock::acquire(&p) {
            Err(LockError::Busy { pid, .. }) => assert_eq!(pid, std::process::id().to_string()),
            other => panic!("expected Busy, got {other:?}"),
        }
        drop(first);
        let again = RunLock::acquire(&p).unwrap();
        drop(again);
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn an_unopenable_lock_file_falls_back_to_the_report_directory_and_stays_exclusive() {
        let base = std::env::temp_dir().join(format!("usbperf-lockdir-{}", std::process::id()));
        let reports = base.join("reports");
        let gone = base.join("no-such-dir/usbperf.lock");
        let first = RunLock::acquire_or_in(&gone, &reports).unwrap();
        assert_eq!(first.path, reports.join(FALLBACK_NAME));
        // A second run falls back to the same file and finds it held.
        match RunLock::acquire_or_in(&gone, &reports) {
            Err(LockError::Busy { .. }) => {}
            other => panic!("expected Busy, got {other:?}"),
        }
        drop(first);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
