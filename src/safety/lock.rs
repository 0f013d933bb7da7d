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
}

/// Held for the whole run.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
    pub path: PathBuf,
}

impl RunLock {
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
}
