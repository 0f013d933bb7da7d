//! Owns reading the fleet from disk: finding report files, parsing them on worker threads
//! that pull paths from a shared index, and handing each reduced record (or the file's error)
//! to one consumer in the calling thread. A bad file is an entry in the error list, never the
//! end of the run.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use chrono::{DateTime, Utc};

use super::extract::{extract, UnitRecord};
use super::reader::parse_report;
use super::FleetError;

/// Which reports count.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Reports started before this are left out (`--since`).
    pub since: Option<DateTime<Utc>>,
    /// Only this board's reports (`--board`, the device-tree / DMI model).
    pub board: Option<String>,
    /// Worker threads; 0 = one per CPU.
    pub threads: usize,
}

/// What became of one file.
#[derive(Debug)]
pub enum Outcome {
    Record(Box<UnitRecord>),
    /// Read fine but left out, with why (filtered, or not a finished run).
    Skipped {
        path: PathBuf,
        why: String,
    },
    Error(FleetError),
}

fn is_report_name(p: &Path) -> bool {
    let hidden = p
        .file_name()
        .and_then(|n| n.to_str())
        .map_or(true, |n| n.starts_with('.'));
    let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
    // Hidden files are the report writer's temporary files (written, then renamed).
    !hidden && matches!(ext, "yaml" | "yml" | "json")
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), FleetError> {
    let rd = std::fs::read_dir(dir).map_err(|err| FleetError::Read {
        path: dir.to_path_buf(),
        err,
    })?;
    for e in rd.flatten() {
        let p = e.path();
        let ft = match e.file_type() {
            Ok(ft) => ft,
            Err(_) => continue,
        };
        if ft.is_dir() {
            walk(&p, out)?;
        } else if is_report_name(&p) {
            out.push(p);
        }
    }
    Ok(())
}

/// Expands the command line's directories (recursively: `*.yaml`, `*.yml`, `*.json`) and
/// files into one sorted list, so record numbers and ties are the same on every run.
pub fn collect_paths(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, FleetError> {
    let mut out = Vec::new();
    for i in inputs {
        if i.is_dir() {
            let before = out.len();
            walk(i, &mut out)?;
            if out.len() == before {
                return Err(FleetError::NoReports { path: i.clone() });
            }
        } else if i.exists() {
            // A named file is read whatever its name; errors show up per file.
            out.push(i.clone());
        } else {
            return Err(FleetError::NoReports { path: i.clone() });
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Parses and filters one file.
fn process(idx: usize, path: &Path, buf: &mut Vec<u8>, opts: &LoadOptions) -> Outcome {
    use std::io::Read;
    buf.clear();
    let read = std::fs::File::open(path).and_then(|mut f| f.read_to_end(buf));
    if let Err(err) = read {
        return Outcome::Error(FleetError::Read {
            path: path.to_path_buf(),
            err,
        });
    }
    let r = match parse_report(path, buf) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(e),
    };
    let skipped = |why: String| Outcome::Skipped {
        path: path.to_path_buf(),
        why,
    };
    match r.status.as_deref() {
        Some("complete") | None => {}
        Some(s) => {
            return skipped(format!(
                "status {s}: not a finished run (its figures are partial)"
            ))
        }
    }
    if let Some(since) = opts.since {
        if r.started_at < since {
            return skipped(format!("started {} (before --since)", r.started_at));
        }
    }
    if let Some(board) = &opts.board {
        if r.unit.model.as_deref().map(str::trim) != Some(board.trim()) {
            return skipped("another board (--board)".into());
        }
    }
    Outcome::Record(Box::new(extract(idx as u32, path, r)))
}

/// Parses `paths` on worker threads and calls `sink` with every outcome, in the calling
/// thread, in completion order. Memory holds only the records in flight (a bounded queue).
pub fn load(paths: &[PathBuf], opts: &LoadOptions, mut sink: impl FnMut(Outcome)) {
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .min(paths.len().max(1));
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::sync_channel::<Outcome>(256);
    std::thread::scope(|s| {
        for _ in 0..threads {
            let tx = tx.clone();
            let next = &next;
            s.spawn(move || {
                let mut buf = Vec::with_capacity(64 << 10);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(p) = paths.get(i) else { break };
                    if tx.send(process(i, p, &mut buf, opts)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for o in rx {
            sink(o);
        }
    });
}
