//! Owns the outbox on the unit's rootfs: one file per report not yet acknowledged by the
//! collector, named by its `report_id`. An entry is written like a report (temporary file,
//! fsync, rename, fsync of the directory: `report::write::atomic_write`), so a power cut
//! leaves the entry whole or absent, never torn; it is removed only after an acknowledgement.
//! Temporary files start with `.` and are never listed.

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
}

/// The outbox directory.
#[derive(Debug, Clone)]
pub struct Spool {
    dir: PathBuf,
}

/// One queued report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: PathBuf,
    /// The report id the entry is named by (the file stem).
    pub id: String,
    /// JSON (`.json`) or YAML (`.yaml`), as the unit wrote the report.
    pub json: bool,
}

/// A file-name-safe form of a report id: ids are 16 hex digits, but a hand-edited or
/// foreign report must not name a path outside the spool.
pub fn safe_id(id: &str) -> String {
    let s: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(128)
        .collect();
    if s.is_empty() {
        "report".into()
    } else {
        s
    }
}

impl Spool {
    pub fn at(dir: impl Into<PathBuf>) -> Spool {
        Spool { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Queues `bytes` under `id`, durably. Queuing the same id again replaces the entry (a
    /// later state of the same run; the collector keeps the first it acknowledged).
    pub fn enqueue(&self, id: &str, json: bool, bytes: &[u8]) -> Result<Entry, SpoolError> {
        let id = safe_id(id);
        let path = self
            .dir
            .join(format!("{id}.{}", if json { "json" } else { "yaml" }));
        write::atomic_write(&path, bytes).map_err(|e| SpoolError::Write {
            dir: self.dir.clone(),
            why: match e {
                write::WriteError::Dir { err, .. } | write::WriteError::File { err, .. } => {
                    err.to_string()
                }
            },
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
    fn ids_never_leave_the_spool() {
        let table = [
            ("fae37a7d3302b159", "fae37a7d3302b159"),
            ("../../etc/passwd", "______etc_passwd"),
            ("", "report"),
            ("a b", "a_b"),
        ];
        for (id, want) in table {
            assert_eq!(safe_id(id), want, "{id:?}");
        }
    }

    #[test]
    fn enqueue_list_remove_round_trip_skips_temporaries_and_foreign_files() {
        let dir = tmpdir("rt");
        let s = Spool::at(&dir);
        assert!(s.entries().unwrap().is_empty());
        let a = s.enqueue("aaaa", false, b"schema_version: 1\n").unwrap();
        let b = s.enqueue("bbbb", true, b"{}").unwrap();
        std::fs::write(dir.join(".aaaa.yaml.1.tmp"), b"torn").unwrap();
        std::fs::write(dir.join("notes.txt"), b"x").unwrap();
        let got = s.entries().unwrap();
        let ids: Vec<_> = got.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids.len(), 2);
        assert!(ids.contains(&"aaaa") && ids.contains(&"bbbb"));
        assert!(got.iter().any(|e| e.json && e.id == "bbbb"));
        s.remove(&a).unwrap();
        s.remove(&a).unwrap(); // already gone is fine
        assert_eq!(s.entries().unwrap(), vec![b]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_spool_is_empty() {
        let s = Spool::at("/nonexistent/usbperf-spool");
        assert!(s.entries().unwrap().is_empty());
    }
}
