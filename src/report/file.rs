//! Owns a run's own report file: created once under a name no other file has, rewritten
//! atomically after every finished cell, and moved to a fallback directory when the
//! configured one refuses it. A write failure is remembered, never fatal: the unit is tested
//! anyway and the caller says where the record really is.

use std::path::{Path, PathBuf};

use super::schema::Report;
use super::write;

/// The file a run keeps its report in.
#[derive(Debug)]
pub struct ReportFile {
    /// Where the report is written: the configured directory, or a fallback when that one
    /// cannot be written.
    path: PathBuf,
    /// Whether `path` already holds this run's report: the first write creates it and never
    /// replaces a file already there; later writes replace this run's own file.
    created: bool,
    json: bool,
    /// The last write's failure; `None` once a write succeeds again.
    error: Option<String>,
}

/// Where the final report is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportPlace {
    /// Written in full, here.
    File(PathBuf),
    /// This file holds an earlier state of the report; the last write failed.
    Stale(PathBuf, String),
    /// In no file; only on standard output.
    Nowhere(String),
}

impl ReportFile {
    /// A file to be created at `path` (nothing is written yet).
    pub fn new(path: PathBuf, json: bool) -> ReportFile {
        ReportFile {
            path,
            created: false,
            json,
            error: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The last write's failure, if it failed.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Writes the report: creates the file the first time, replaces this run's file after.
    pub fn save(&mut self, report: &Report) {
        let bytes = match report.encode(self.json) {
            Ok(b) => b,
            Err(e) => {
                self.error = Some(format!("cannot encode the report: {e}"));
                return;
            }
        };
        let res = if self.created {
            write::atomic_write(&self.path, &bytes)
        } else {
            create_unique(&mut self.path, &bytes)
        };
        match res {
            Ok(()) => {
                self.created = true;
                self.error = None;
            }
            Err(e) => self.error = Some(e.to_string()),
        }
    }

    /// After a first write failed: tries each of `dirs` under the same file name, keeping the
    /// first that takes the report. Returns whether one did; if none did, the configured path
    /// is kept (the final summary says the report is in no file).
    pub fn fall_back(&mut self, report: &Report, dirs: &[PathBuf]) -> bool {
        let configured = self.path.clone();
        let name = configured
            .file_name()
            .map(PathBuf::from)
            .unwrap_or_default();
        for dir in dirs {
            self.path = dir.join(&name);
            self.save(report);
            if self.error.is_none() {
                return true;
            }
        }
        self.path = configured;
        false
    }

    /// Where the record is now.
    pub fn place(&self) -> ReportPlace {
        match (&self.error, self.created) {
            (None, _) => ReportPlace::File(self.path.clone()),
            (Some(e), true) => ReportPlace::Stale(self.path.clone(), e.clone()),
            (Some(e), false) => ReportPlace::Nowhere(e.clone()),
        }
    }
}

/// The filesystem holding `path` when it keeps nothing across a reboot (tmpfs, ramfs): its
/// name, for the message. `None` for a lasting filesystem, or when the question cannot be
/// answered (the report is then treated as kept, as before any fallback).
pub fn lost_at_reboot(path: &Path) -> Option<&'static str> {
    use nix::sys::statfs::{statfs, FsType, TMPFS_MAGIC};
    // nix names tmpfs's magic number but not ramfs's (linux/magic.h).
    #[allow(clippy::unnecessary_cast)]
    const RAMFS_MAGIC: FsType = FsType(0x8584_58f6_u32 as _);
    let dir = path.parent().unwrap_or(path);
    let fs = statfs(dir).ok()?.filesystem_type();
    if fs == TMPFS_MAGIC {
        Some("tmpfs")
    } else if fs == RAMFS_MAGIC {
        Some("ramfs")
    } else {
        None
    }
}

/// Creates the report file under a name no other file has: the run id makes a clash all but
/// impossible, and should one happen (a copied-in file, a clock set back) the next free
/// `-N` suffix is taken instead of replacing anything.
fn create_unique(path: &mut PathBuf, bytes: &[u8]) -> Result<(), write::WriteError> {
    let original = path.clone();
    let stem = original
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = original
        .extension()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut n = 0;
    loop {
        match write::atomic_create(path, bytes) {
            Err(e) if e.is_exists() && n < 100 => {
                n += 1;
                *path = original.with_file_name(format!("{stem}-{n}.{ext}"));
            }
            other => return other,
        }
    }
}
