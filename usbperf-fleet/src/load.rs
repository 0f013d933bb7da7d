//! Owns reading the fleet from disk: finding report files, parsing them on worker threads
//! that pull paths from a shared index, and handing each reduced record (or the file's error)
//! to one consumer in the calling thread, in path order. A bad file is an entry in the error
//! list, never the end of the run.
//!
//! The directory comes from thousands of units and is untrusted: only
//! regular files are opened (a FIFO would block `open` forever, a device node could be read
//! without end), and a file larger than any report is refused before it is read.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::FileType;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use chrono::{DateTime, Utc};
use usbperf_report::seal::SealState;

use super::extract::{extract, report_identity, with_figures, UnitRecord};
use super::parse_report;
use super::FleetError;

/// Larger files are refused unread. A two-device factory report is about 50 KiB and the
/// largest real ones (many devices, long write curves) stay under 2 MiB: 64 MiB is no report,
/// and reading it would cost a worker that much memory.
pub const MAX_REPORT_BYTES: u64 = 64 << 20;

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

/// Why a file was left out without being an error.
#[derive(Debug, Clone, PartialEq)]
pub enum Skip {
    /// A FIFO, socket, device node or a symlink to one: never opened.
    NotRegular { kind: &'static str },
    /// `status` other than `complete`: its figures are partial.
    Unfinished { status: String },
    /// Started before `--since`; `board` is the report's, for the "nothing matched" hint.
    BeforeSince {
        started_at: DateTime<Utc>,
        board: String,
    },
    /// Another board than `--board`.
    OtherBoard { board: String },
    /// A power-cut verify's verdict (`--out`), which sits beside its report in the boot
    /// service's verdict directory: the report is what counts.
    PowerCutVerdict,
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::NotRegular { kind } => write!(f, "not a regular file ({kind}): never opened"),
            Skip::Unfinished { status } => {
                write!(
                    f,
                    "status {status}: not a finished run (its figures are partial)"
                )
            }
            Skip::BeforeSince { started_at, .. } => {
                write!(f, "started {started_at} (before --since)")
            }
            Skip::OtherBoard { board } => write!(f, "another board (--board): {board:?}"),
            Skip::PowerCutVerdict => write!(
                f,
                "a power-cut verdict, not a report: the fleet counts its report \
                 (usbperf-power-cut-*.json, written by `power-cut verify --report-dir`)"
            ),
        }
    }
}

/// What became of one file.
#[derive(Debug)]
pub enum Outcome {
    Record(Box<UnitRecord>),
    /// Read fine (or, for a non-regular file, deliberately not read) but left out.
    Skipped {
        path: PathBuf,
        why: Skip,
    },
    Error(FleetError),
}

/// The file list of a fleet: report files to read, and entries left out unopened.
#[derive(Debug, Default)]
pub struct Collected {
    /// Sorted, deduplicated.
    pub paths: Vec<PathBuf>,
    /// Entries with a report's name that are not regular files, with why.
    pub skipped: Vec<(PathBuf, Skip)>,
}

/// What kind of non-regular file this is, in words; `None` for a regular file.
fn non_regular_kind(ft: &FileType) -> Option<&'static str> {
    if ft.is_file() {
        None
    } else if ft.is_fifo() {
        Some("a FIFO")
    } else if ft.is_socket() {
        Some("a socket")
    } else if ft.is_block_device() {
        Some("a block device")
    } else if ft.is_char_device() {
        Some("a character device")
    } else if ft.is_dir() {
        Some("a directory")
    } else {
        Some("not a file")
    }
}

/// Whether `p` is a regular file, following a symlink only to see what it points at
/// (`metadata` stats, it never opens): `Err(kind)` otherwise.
fn check_regular(p: &Path, ft: &FileType) -> Result<(), &'static str> {
    if !ft.is_symlink() {
        return non_regular_kind(ft).map_or(Ok(()), Err);
    }
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(m) => {
            let t = m.file_type();
            Err(if t.is_dir() {
                "a symlink to a directory, not followed"
            } else if t.is_fifo() {
                "a symlink to a FIFO"
            } else if t.is_socket() {
                "a symlink to a socket"
            } else if t.is_block_device() {
                "a symlink to a block device"
            } else if t.is_char_device() {
                "a symlink to a character device"
            } else {
                "a symlink to something that is not a file"
            })
        }
        Err(_) => Err("a dangling or looping symlink"),
    }
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

/// A report's signature file (`r.yaml.sig`, `usbperf_report::seal::seal_path`): `.sig`
/// after a report's name.
fn is_seal_name(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "sig") && is_report_name(&p.with_extension(""))
}

fn walk(dir: &Path, out: &mut Collected) -> Result<(), FleetError> {
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
        // `DirEntry::file_type` does not follow symlinks: a symlinked directory is not
        // walked (no loops), and what a symlinked file points at is checked below.
        if ft.is_dir() {
            walk(&p, out)?;
        } else if is_report_name(&p) {
            match check_regular(&p, &ft) {
                Ok(()) => out.paths.push(p),
                Err(kind) => out.skipped.push((p, Skip::NotRegular { kind })),
            }
        }
    }
    Ok(())
}

/// Expands the command line's directories (recursively: `*.yaml`, `*.yml`, `*.json`) and
/// files into one sorted list, so record numbers and ties are the same on every run.
/// Entries with a report's name that are not regular files are left out unopened.
pub fn collect_paths(inputs: &[PathBuf]) -> Result<Collected, FleetError> {
    let mut out = Collected::default();
    for i in inputs {
        if i.is_dir() {
            let before = out.paths.len() + out.skipped.len();
            walk(i, &mut out)?;
            if out.paths.len() + out.skipped.len() == before {
                return Err(FleetError::NoReports { path: i.clone() });
            }
        } else if is_seal_name(i) {
            // `fleet reports/*` names every report's signature file too: it is read with its
            // report, never as one.
            continue;
        } else if let Ok(m) = std::fs::symlink_metadata(i) {
            // A named file is read whatever its name; errors show up per file. A named
            // FIFO (`fleet <(cat r.yaml)`) is left out as well: the rule has no exceptions.
            match check_regular(i, &m.file_type()) {
                Ok(()) => out.paths.push(i.clone()),
                Err(kind) => out.skipped.push((i.clone(), Skip::NotRegular { kind })),
            }
        } else {
            return Err(FleetError::NoReports { path: i.clone() });
        }
    }
    out.paths.sort();
    out.paths.dedup();
    out.skipped.sort_by(|a, b| a.0.cmp(&b.0));
    out.skipped.dedup_by(|a, b| a.0 == b.0);
    Ok(out)
}

/// Reads a whole report, refusing what is not a regular file at the moment it is opened too:
/// the entry may have been swapped for a FIFO since the walk. `O_NONBLOCK` makes `open` of a
/// FIFO return at once instead of waiting for a writer (it changes nothing for regular
/// files), `O_NOFOLLOW` is not used since a symlink to a report is fine.
fn read_report(path: &Path, buf: &mut Vec<u8>) -> Result<(), FleetError> {
    use std::io::Read;
    let err = |err| FleetError::Read {
        path: path.to_path_buf(),
        err,
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(err)?;
    let m = f.metadata().map_err(err)?;
    if let Some(kind) = non_regular_kind(&m.file_type()) {
        return Err(FleetError::NotRegular {
            path: path.to_path_buf(),
            kind,
        });
    }
    if m.len() > MAX_REPORT_BYTES {
        return Err(FleetError::TooLarge {
            path: path.to_path_buf(),
            bytes: m.len(),
            limit: MAX_REPORT_BYTES,
        });
    }
    // `take` also bounds a file that grows while it is read.
    f.take(MAX_REPORT_BYTES + 1).read_to_end(buf).map_err(err)?;
    if buf.len() as u64 > MAX_REPORT_BYTES {
        return Err(FleetError::TooLarge {
            path: path.to_path_buf(),
            bytes: buf.len() as u64,
            limit: MAX_REPORT_BYTES,
        });
    }
    Ok(())
}

/// Whether bytes that are no report are a power-cut verdict (`format: usbperf-power-cut`),
/// read through the same bounds as a report.
fn power_cut_verdict(path: &Path, bytes: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Format {
        format: Option<String>,
    }
    let json = usbperf_report::decode::is_json(path, bytes);
    matches!(
        usbperf_report::decode::decode::<Format>(json, bytes),
        Ok(Format { format: Some(f) }) if f == usbperf_report::POWER_CUT_FORMAT
    )
}

/// Parses and filters one file.
fn process(idx: usize, path: &Path, buf: &mut Vec<u8>, opts: &LoadOptions) -> Outcome {
    buf.clear();
    if let Err(e) = read_report(path, buf) {
        return Outcome::Error(e);
    }
    let skipped = |why: Skip| Outcome::Skipped {
        path: path.to_path_buf(),
        why,
    };
    let r = match parse_report(path, buf) {
        Ok(r) => r,
        Err(_) if power_cut_verdict(path, buf) => return skipped(Skip::PowerCutVerdict),
        Err(e) => return Outcome::Error(e),
    };
    match r.status.as_deref() {
        Some("complete") | None => {}
        Some(s) => {
            return skipped(Skip::Unfinished {
                status: s.to_string(),
            })
        }
    }
    let board = || super::extract::board_of(&r);
    if let Some(since) = opts.since {
        if r.started_at < since {
            return skipped(Skip::BeforeSince {
                started_at: r.started_at,
                board: board(),
            });
        }
    }
    // `--board` takes a board exactly as `fleet` lists it, "unknown board" included.
    if let Some(want) = &opts.board {
        let b = board();
        if b != want.trim() {
            return skipped(Skip::OtherBoard { board: b });
        }
    }
    // Checked once the report is known to count: a signature file costs one verification
    // (tens of microseconds), its absence one failed open.
    let signer = match usbperf_report::seal::check_beside(path, buf) {
        SealState::Unsigned => None,
        SealState::Holds { key } => Some(key),
        SealState::Broken { why } => {
            return Outcome::Error(FleetError::Unsealed {
                path: path.to_path_buf(),
                why,
            })
        }
    };
    let identity = report_identity(&r, buf);
    let mut rec = extract(idx as u32, path, r);
    rec.identity = with_figures(identity, &rec);
    rec.signer = signer;
    Outcome::Record(Box::new(rec))
}

/// Parses `paths` on worker threads and calls `sink` with every outcome, in the calling
/// thread, in path order: the first of two duplicate reports is then the first by name on
/// every run, whatever the threads' timing. Memory holds the records in flight (a bounded
/// queue) and those finished ahead of a slower file (workers take paths in order, so that is
/// a few per thread).
pub fn load(paths: &[PathBuf], opts: &LoadOptions, mut sink: impl FnMut(Outcome)) {
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .min(paths.len().max(1));
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::sync_channel::<(usize, Outcome)>(256);
    std::thread::scope(|s| {
        for _ in 0..threads {
            let tx = tx.clone();
            let next = &next;
            s.spawn(move || {
                let mut buf = Vec::with_capacity(64 << 10);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(p) = paths.get(i) else { break };
                    if tx.send((i, process(i, p, &mut buf, opts))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut ahead = BTreeMap::new();
        let mut due = 0usize;
        for (i, o) in rx {
            ahead.insert(i, o);
            while let Some(o) = ahead.remove(&due) {
                sink(o);
                due += 1;
            }
        }
    });
}
