//! Owns test files: unique names with a recognisable prefix, exclusive creation
//! (`O_CREAT|O_EXCL|O_NOFOLLOW`), a process-wide registry so SIGINT/SIGTERM can remove them,
//! and removal of stale ones left by a crashed run.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Every test file's name starts with this: a later run recognises and removes leftovers.
pub const PREFIX: &str = ".usbperf-testfile-";

static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A test file path owned by this run: registered until dropped, removed on drop.
#[derive(Debug)]
pub struct TestFile {
    path: PathBuf,
}

impl TestFile {
    /// Reserves a unique name in `dir` (nothing is created yet); the file is removed when
    /// this value drops, or by `remove_all_registered` on a signal.
    pub fn reserve(dir: &Path) -> TestFile {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("{PREFIX}{}-{n}.tmp", std::process::id()));
        if let Ok(mut live) = LIVE.lock() {
            live.push(path.clone());
        }
        TestFile { path }
    }

    /// Takes charge of a file that was just created exclusively under another name (bench's
    /// `--target` file): registered like a reserved one, so a second signal's abort removes
    /// it too, and removed when this value drops.
    pub fn adopt(path: PathBuf) -> TestFile {
        if let Ok(mut live) = LIVE.lock() {
            live.push(path.clone());
        }
        TestFile { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Gives the file up: unregistered, and left in place when this value is gone.
    pub fn release(self) {
        if let Ok(mut live) = LIVE.lock() {
            live.retain(|p| p != &self.path);
        }
        std::mem::forget(self);
    }

    /// Removes the file now, saying why when it cannot be removed (it is unregistered either
    /// way: nothing more can be done for it in this run).
    pub fn remove(self) -> io::Result<()> {
        let path = self.path.clone();
        let res = match std::fs::symlink_metadata(&self.path) {
            Ok(md) if md.file_type().is_file() || md.file_type().is_symlink() => {
                std::fs::remove_file(&self.path)
            }
            Ok(_) => Err(io::Error::other("not a regular file: left in place")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        };
        drop(self);
        res.map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
    }

    /// Creates the file exclusively: fails if anything (a file, or a symlink planted by
    /// someone else) already has the name, and never follows a symlink.
    pub fn create(&self) -> io::Result<File> {
        OpenOptions::new()
            .write(true)
            .read(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&self.path)
    }
}

impl Drop for TestFile {
    fn drop(&mut self) {
        remove(&self.path);
        if let Ok(mut live) = LIVE.lock() {
            live.retain(|p| p != &self.path);
        }
    }
}

/// Removes the file if it is ours to remove: a regular file or a symlink (unlink never
/// follows it). Anything else with our name is left alone.
fn remove(p: &Path) {
    if let Ok(md) = std::fs::symlink_metadata(p) {
        if md.file_type().is_file() || md.file_type().is_symlink() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Removes every registered test file (the abort path: the run will not reach its
/// destructors). Runs on the `sigwait` thread, never in signal context, so it waits for the
/// registry like any thread: a `try_lock` would skip every file when a second signal lands
/// while another thread registers one. A poisoned registry is still read.
pub fn remove_all_registered() -> usize {
    let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    for p in live.iter() {
        remove(p);
    }
    live.len()
}

/// Paths currently registered (for the report and tests).
pub fn registered() -> Vec<PathBuf> {
    LIVE.lock().map(|l| l.clone()).unwrap_or_default()
}

/// Removes test files a crashed run left in `dir`; call with the run lock held, so none can
/// belong to a live run. Returns what was removed.
pub fn remove_stale(dir: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return removed;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        if name.to_string_lossy().starts_with(PREFIX) {
            let p = e.path();
            let before = std::fs::symlink_metadata(&p).is_ok();
            remove(&p);
            if before && std::fs::symlink_metadata(&p).is_err() {
                removed.push(p);
            }
        }
    }
    removed.sort();
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("usbperf-tf-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    #[test]
    fn exclusive_creation_refuses_a_planted_symlink() {
        let dir = tmpdir("symlink");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let tf = TestFile::reserve(&dir);
        std::os::unix::fs::symlink(&victim, tf.path()).unwrap();
        let err = tf.create().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{err}");
        drop(tf);
        assert_eq!(
            std::fs::read(&victim).unwrap(),
            b"precious",
            "target untouched"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn dropped_and_stale_files_are_removed() {
        let dir = tmpdir("stale");
        let tf = TestFile::reserve(&dir);
        tf.create().unwrap();
        assert!(registered().contains(&tf.path().to_path_buf()));
        let p = tf.path().to_path_buf();
        drop(tf);
        assert!(!p.exists());
        assert!(!registered().contains(&p));

        let stale = dir.join(format!("{PREFIX}4242-0.tmp"));
        std::fs::write(&stale, b"left by a crash").unwrap();
        let keep = dir.join("user-data.bin");
        std::fs::write(&keep, b"x").unwrap();
        assert_eq!(remove_stale(&dir), vec![stale.clone()]);
        assert!(!stale.exists() && keep.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
