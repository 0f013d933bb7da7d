//! Owns the outbox on the unit's rootfs: one file per report not yet acknowledged by the
//! collector, named by the SHA-256 of its bytes, so two reports never share an entry (reports
//! of schema 1 may have no id, and files of different units share names). An entry is
//! written like a report (temporary file, fsync, rename, fsync of the directory:
//! `report::write::atomic_write`), so a power cut leaves the entry whole or absent, never
//! torn; it is removed only after an acknowledgement. A report the collector can never store
//! is moved to `rejected/` with the reason in a `.reason` file beside it: kept for a person,
//! never sent again, never in the way of the others. Temporary files start with `.` and are
//! never listed.

use std::path::{Path, PathBuf};

use crate::report::write;

#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error(
        "cannot queue the report in the spool {dir}: {why} (give a writable directory with \
         --spool or `upload: {{spool: DIR}}`; the report file itself is kept)"
    )]
    Write { dir: PathBuf, why: String },
    #[error("cannot read the spool {dir}: {err} (is it a directory this user can read?)")]
    Read { dir: PathBuf, err: std::io::Error },
    #[error("cannot remove the delivered entry {path}: {err} (it will be sent again; harmless)")]
    Remove { path: PathBuf, err: std::io::Error },
    #[error(
        "cannot set the rejected entry {path} aside in {dir}: {why} (it stays queued and is \
         sent again; make the spool writable)"
    )]
    Reject {
        path: PathBuf,
        dir: PathBuf,
        why: String,
    },
}

/// The subdirectory of reports the collector will never store.
pub const REJECTED_DIR: &str = "rejected";

/// The outbox directory.
#[derive(Debug, Clone)]
pub struct Spool {
    dir: PathBuf,
}

/// One queued report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: PathBuf,
    /// The file stem: the SHA-256 of the bytes (or, for entries queued by an older build,
    /// the report's id).
    pub id: String,
    /// JSON (`.json`) or YAML (`.yaml`), as the unit wrote the report.
    pub json: bool,
}

impl Spool {
    pub fn at(dir: impl Into<PathBuf>) -> Spool {
        Spool { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Queues `bytes`, durably, named by their hash: queuing the same bytes again is the
    /// same entry; other bytes are another entry, whatever their report says.
    pub fn enqueue(&self, json: bool, bytes: &[u8]) -> Result<Entry, SpoolError> {
        let id = super::client::sha256_hex(bytes);
        let path = self
            .dir
            .join(format!("{id}.{}", if json { "json" } else { "yaml" }));
        write::atomic_write(&path, bytes).map_err(|e| SpoolError::Write {
            dir: self.dir.clone(),
            why: e.cause(),
        })?;
        Ok(Entry { path, id, json })
    }

    /// The queued entries, oldest first (by modification time, then name). A missing
    /// directory is an empty spool.
    pub fn entries(&self) -> Result<Vec<Entry>, SpoolError> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => {
                return Err(SpoolError::Read {
                    dir: self.dir.clone(),
                    err,
                })
            }
        };
        let mut found = Vec::new();
        for de in rd {
            let de = de.map_err(|err| SpoolError::Read {
                dir: self.dir.clone(),
                err,
            })?;
            let name = de.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let Some((stem, ext)) = name.rsplit_once('.') else {
                continue;
            };
            let json = match ext {
                "json" => true,
                "yaml" => false,
                _ => continue,
            };
            let md = match de.metadata() {
                Ok(m) if m.is_file() => m,
                _ => continue,
            };
            let mtime = md.modified().ok();
            found.push((
                mtime,
                Entry {
                    path: de.path(),
                    id: stem.to_string(),
                    json,
                },
            ));
        }
        found.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.path.cmp(&b.1.path)));
        Ok(found.into_iter().map(|(_, e)| e).collect())
    }

    /// The rejected entries (`rejected/*.yaml|json`), for the summary.
    pub fn rejected(&self) -> Result<Vec<Entry>, SpoolError> {
        Spool::at(self.dir.join(REJECTED_DIR)).entries()
    }

    /// Moves an entry the collector will never store to `rejected/`, the reason beside it
    /// (`<name>.reason`), durably; returns where it now is.
    pub fn reject(&self, entry: &Entry, reason: &str) -> Result<PathBuf, SpoolError> {
        let dir = self.dir.join(REJECTED_DIR);
        let name = entry
            .path
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        let to = dir.join(&name);
        let fail = |why: String| SpoolError::Reject {
            path: entry.path.clone(),
            dir: dir.clone(),
            why,
        };
        std::fs::create_dir_all(&dir).map_err(|e| fail(e.to_string()))?;
        let mut reason_name = name.clone();
        reason_name.push(".reason");
        // The reason first: a power cut between the two leaves the entry queued, never a
        // rejected report without its reason.
        write::atomic_write(&dir.join(reason_name), format!("{reason}\n").as_bytes())
            .map_err(|e| fail(e.to_string()))?;
        std::fs::rename(&entry.path, &to).map_err(|e| fail(e.to_string()))?;
        for d in [&dir, &self.dir] {
            let _ = std::fs::File::open(d).and_then(|d| d.sync_all());
        }
        Ok(to)
    }

    /// Removes an acknowledged entry and makes the removal durable. Already gone (another
    /// drain delivered it at the same time) is success.
    pub fn remove(&self, entry: &Entry) -> Result<(), SpoolError> {
        match std::fs::remove_file(&entry.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(err) => {
                return Err(SpoolError::Remove {
                    path: entry.path.clone(),
                    err,
                })
            }
        }
        // Best effort: an entry that reappears after a power cut is only sent again.
        let _ = std::fs::File::open(&self.dir).and_then(|d| d.sync_all());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "usbperf-spool-{tag}-{}-{}",
            std::process::id(),
            crate::report::schema::new_report_id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn enqueue_list_remove_round_trip_skips_temporaries_and_foreign_files() {
        let dir = tmpdir("rt");
        let s = Spool::at(&dir);
        assert!(s.entries().unwrap().is_empty());
        let a = s.enqueue(false, b"schema_version: 1\n").unwrap();
        let b = s.enqueue(true, b"{}").unwrap();
        // The same bytes again are the same entry.
        assert_eq!(s.enqueue(false, b"schema_version: 1\n").unwrap(), a);
        assert_eq!(
            a.id,
            super::super::client::sha256_hex(b"schema_version: 1\n")
        );
        std::fs::write(dir.join(format!(".{}.yaml.1.tmp", a.id)), b"torn").unwrap();
        std::fs::write(dir.join("notes.txt"), b"x").unwrap();
        let got = s.entries().unwrap();
        assert_eq!(got.len(), 2);
        assert!(got.contains(&a) && got.contains(&b));
        s.remove(&a).unwrap();
        s.remove(&a).unwrap(); // already gone is fine
        assert_eq!(s.entries().unwrap(), vec![b]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn two_reports_with_one_name_or_no_id_are_two_entries() {
        let dir = tmpdir("two");
        let s = Spool::at(&dir);
        s.enqueue(false, b"schema_version: 1\nunit: {hostname: a}\n")
            .unwrap();
        s.enqueue(false, b"schema_version: 1\nunit: {hostname: b}\n")
            .unwrap();
        assert_eq!(s.entries().unwrap().len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_rejected_entry_is_set_aside_with_its_reason_and_never_listed_again() {
        let dir = tmpdir("rej");
        let s = Spool::at(&dir);
        let a = s.enqueue(false, b"hello: world\n").unwrap();
        let b = s.enqueue(false, b"schema_version: 2\n").unwrap();
        let to = s.reject(&a, "HTTP 400: not a report").unwrap();
        assert!(to.is_file() && !a.path.exists());
        let reason =
            std::fs::read_to_string(dir.join(REJECTED_DIR).join(format!("{}.yaml.reason", a.id)))
                .unwrap();
        assert_eq!(reason, "HTTP 400: not a report\n");
        assert_eq!(s.entries().unwrap(), vec![b]);
        assert_eq!(s.rejected().unwrap().len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_spool_is_empty() {
        let s = Spool::at("/nonexistent/usbperf-spool");
        assert!(s.entries().unwrap().is_empty());
    }
}
