//! Owns one (device, test) cell of the factory run: placing it (which target, which size, or
//! why it does not run) and judging it (its status and reasons from the workload's outcome,
//! the thresholds, the kernel's lines about the device and whether the disk is still there).
//! Both are functions of values; `matrix::run` does the I/O between them.

use std::path::PathBuf;

use crate::discover::Disk;
use crate::engine::{self, EngineRequest};
use crate::events::{self, KernelEvent};
use crate::metric;
use crate::report::schema::{Cell, CellStatus};
use crate::safety::testfile::TestFile;
use crate::units;
use crate::workload::{self, BenchResult, WorkloadKind, WorkloadParams};

use super::env::CellEngine;
use super::select::Placement;
use super::verdict::{self, Reason, ReasonKind};
use crate::config::{TestSpec, Threshold};

/// Test file size for a test that names none.
pub const DEFAULT_FILE_BYTES: u64 = 64 << 20;

/// What to do with a cell.
#[derive(Debug)]
pub enum CellPlan {
    /// The cell does not run: this status, for this reason.
    NotRun {
        status: CellStatus,
        reason: Reason,
    },
    Run(RunPlan),
}

/// A cell that runs: its parameters, its own test file (removed when it drops, and on
/// signals) and notes on how it was placed.
#[derive(Debug)]
pub struct RunPlan {
    pub params: WorkloadParams,
    pub file: Option<TestFile>,
    pub notes: Vec<Reason>,
}

/// Places one test of a device: on its raw device, on a test file of its filesystem, or not
/// at all when it writes and the device has no writable target.
pub fn place_cell(
    spec: &TestSpec,
    engine_request: EngineRequest,
    placement: &Placement,
    disk: &Disk,
    engine: &dyn CellEngine,
) -> CellPlan {
    let w = spec.workload.as_str().to_string();
    // The workload's own rule (mixed at 100 % reads, verify read phase only do not write).
    let wants_write = spec.params(PathBuf::new(), engine_request).writes();
    if wants_write && !placement.writable() {
        let why = match placement {
            Placement::RawRead { why } => why.clone(),
            Placement::Refused { refusals } => refusals.join("; "),
            _ => String::new(),
        };
        // Writes were asked for explicitly and refused: that fails the device. With `auto`
        // and no writable filesystem the write tests are simply not applicable.
        let (status, kind) = if matches!(placement, Placement::Refused { .. }) {
            (CellStatus::Error, ReasonKind::Refused)
        } else {
            (CellStatus::Skipped, ReasonKind::NotApplicable)
        };
        return CellPlan::NotRun {
            status,
            reason: Reason::new(kind, format!("{w}: not run, no writable target: {why}"))
                .workload(spec.workload),
        };
    }
    let mut notes = Vec::new();
    // hdparm -t reads the raw device, which is safe even while it is mounted; a test file
    // would first have to be written and would measure the filesystem too. Where the raw
    // device cannot even be opened for reading (a container or VM guarding its root disk), it
    // is measured on a test file of the filesystem instead, and says so.
    let raw_read_refused = match placement {
        Placement::File(ft) if spec.workload == WorkloadKind::ReadBuffered => {
            match engine.open_raw_for_read(std::path::Path::new(&disk.dev_node)) {
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    notes.push(
                        Reason::new(
                            ReasonKind::Note,
                            format!(
                                "{w}: the raw device {} cannot be opened ({e}): measured on a \
                                 test file in {} instead",
                                disk.dev_node,
                                ft.dir.display()
                            ),
                        )
                        .workload(spec.workload),
                    );
                    true
                }
                _ => false,
            }
        }
        _ => false,
    };
    let (file, target, size) = match placement {
        Placement::File(_) if spec.workload == WorkloadKind::ReadBuffered && !raw_read_refused => {
            (None, PathBuf::from(&disk.dev_node), spec.size.map(|s| s.0))
        }
        Placement::File(ft) => {
            let tf = TestFile::reserve(&ft.dir);
            let want = spec.size.map(|s| s.0).unwrap_or(DEFAULT_FILE_BYTES);
            let path = tf.path().to_path_buf();
            (Some(tf), path, Some(want.min(ft.max_file_bytes)))
        }
        _ => {
            let size = spec.size.map(|s| s.0).map(|s| match disk.size_bytes {
                Some(d) => s.min(d),
                None => s,
            });
            (None, PathBuf::from(&disk.dev_node), size)
        }
    };
    let mut params = spec.params(target, engine_request);
    params.size_bytes = size;
    params.allow_write_device = matches!(placement, Placement::RawWrite);
    if let (Some(s), Some(want)) = (size, spec.size) {
        if s < want.0 {
            let why = if matches!(placement, Placement::File(_)) {
                "to keep the free-space headroom"
            } else {
                "to the size of the device"
            };
            notes.push(
                Reason::new(
                    ReasonKind::Note,
                    format!(
                        "{w}: size reduced from {} to {} {why}",
                        units::format_size(want.0),
                        units::format_size(s)
                    ),
                )
                .workload(spec.workload)
                .figure(&metric::SIZE_BYTES, Some(s as f64), want.0 as f64),
            );
        }
    }
    // A region clamped below the block (a 1 MiB eMMC boot partition under read-buffered's
    // 2 MiB reads) runs with the block shrunk to fit, and says so.
    if let Some(old) = workload::fit_block_to_size(&mut params) {
        notes.push(
            Reason::new(
                ReasonKind::Note,
                format!(
                    "{w}: block reduced from {} to {} to fit the {} region",
                    units::format_size(old),
                    units::format_size(params.block_bytes),
                    units::format_size(params.size_bytes.unwrap_or_default())
                ),
            )
            .workload(spec.workload)
            .figure(
                &metric::BLOCK_BYTES,
                Some(params.block_bytes as f64),
                old as f64,
            ),
        );
    }
    CellPlan::Run(RunPlan {
        params,
        file,
        notes,
    })
}

/// Judges a cell by its workload's outcome: passed, failed by a threshold, interrupted by a
/// signal, or an error. `notes` (how it was placed) come first among its reasons.
pub fn judge_outcome(
    cell: &mut Cell,
    outcome: Result<BenchResult, String>,
    notes: Vec<Reason>,
    rules: &[(usize, &Threshold)],
    stop_requested: bool,
) {
    let w = cell.workload.as_str().to_string();
    cell.reasons = notes;
    match outcome {
        Ok(res) => {
            let reasons = verdict::result_reasons(&res, rules);
            // A marginal pass is a note: it says how close the figure came, never fails.
            let failed = reasons.iter().any(|r| r.kind != ReasonKind::Note);
            cell.status = if res.stopped_by == engine::StopReason::Interrupted {
                CellStatus::Interrupted
            } else if !failed {
                CellStatus::Passed
            } else {
                CellStatus::Failed
            };
            cell.reasons.extend(reasons);
            // The result carries the parameters; keep them once.
            cell.params = None;
            cell.result = Some(res);
        }
        Err(e) => {
            cell.status = if stop_requested {
                CellStatus::Interrupted
            } else {
                CellStatus::Error
            };
            cell.reasons.push(
                Reason::new(ReasonKind::IoError, format!("{w}: {e}")).workload(cell.workload),
            );
        }
    }
}

/// What was seen of the device around one cell, besides the workload's outcome.
#[derive(Debug, Clone, Default)]
pub struct Aftermath {
    /// Why the cell's test file could not be removed (it may still be on the medium).
    pub leftover: Option<String>,
    /// Why the kernel log could not be read around the cell.
    pub kernel_log_error: Option<String>,
    /// Kernel events attributed to the device during the cell, the removal of its disk among
    /// them.
    pub kernel: Vec<KernelEvent>,
    /// The disk is gone (removed from sysfs, or its device or a hub above it disconnected).
    pub vanished: bool,
    /// The disk is still there but holds less than when the run found it (a loop device
    /// detached, a medium ejected, a card reader emptied): the bytes it holds now and held.
    pub shrunk: Option<(u64, u64)>,
}

impl Aftermath {
    /// Whether the disk's later tests cannot run: it vanished, or it holds less than it did.
    pub fn gone(&self) -> bool {
        self.vanished || self.shrunk.is_some()
    }
}

/// The disk's bytes now against what it held when the run found it, when it holds less: a
/// detached loop device or an ejected medium keeps its node and reads as 0 bytes.
pub fn shrunk(now_bytes: Option<u64>, found_bytes: Option<u64>) -> Option<(u64, u64)> {
    let (now, found) = (now_bytes?, found_bytes?);
    (now < found).then_some((now, found))
}

/// Whether the disk vanished during a cell: sysfs no longer has it (`removed`), or the kernel
/// logged the disconnect of the device or a hub above it. The kernel removes the disk a moment
/// after it logs the disconnect, so sysfs alone may still show it.
pub fn vanished(removed: Option<&KernelEvent>, kernel: &[KernelEvent]) -> bool {
    removed.is_some()
        || kernel.iter().any(|e| {
            e.is_fatal()
                && matches!(
                    e.kind,
                    events::EventKind::UsbDisconnect | events::EventKind::DeviceRemoved
                )
        })
}

/// Judges what happened around the cell: a test file left behind and an unreadable kernel
/// log are said; a fatal kernel event fails a passed cell, quoting the kernel's line; a disk
/// that vanished is an error.
pub fn judge_aftermath(cell: &mut Cell, disk_name: &str, after: Aftermath) {
    let wk = cell.workload;
    let w = wk.as_str().to_string();
    if let Some(e) = after.leftover {
        cell.reasons.push(
            Reason::new(
                ReasonKind::TestFileLeft,
                format!("{w}: the test file could not be removed: {e}"),
            )
            .workload(wk),
        );
    }
    if let Some(e) = after.kernel_log_error {
        cell.reasons.push(
            Reason::new(
                ReasonKind::KernelLog,
                format!("{w}: the kernel log could not be read: {e}"),
            )
            .workload(wk),
        );
    }
    let fatal: Vec<Reason> = after
        .kernel
        .iter()
        .filter(|e| e.is_fatal())
        .map(|e| {
            let r = Reason::new(ReasonKind::KernelEvent, format!("{w}: kernel: {}", e.line))
                .workload(wk)
                .event(e.kind.as_str().to_string());
            // The USB port the line names, when it names one (a reset, a disconnect).
            match e.keys.iter().find_map(|k| match k {
                events::EventKey::UsbPort(p) => Some(p.clone()),
                _ => None,
            }) {
                Some(p) => r.port(format!("usb:{p}")),
                None => r,
            }
        })
        .collect();
    if !fatal.is_empty() {
        if cell.status == CellStatus::Passed {
            cell.status = CellStatus::Failed;
        }
        cell.reasons.extend(fatal);
    }
    cell.kernel_events = after.kernel;
    if let Some((now, found)) = after.shrunk {
        cell.status = CellStatus::Error;
        // The test's own error (a region of 0 bytes, an I/O error) follows from the device
        // going away, and its remedy (a smaller size) would be the wrong one: it gives way to
        // the cause, said once. Everything else stays (the kernel's lines, a test file left
        // on the medium, an unreadable kernel log, a threshold already missed).
        cell.reasons.retain(|r| r.kind != ReasonKind::IoError);
        cell.reasons.push(
            Reason::new(
                ReasonKind::Vanished,
                format!(
                    "{w}: {disk_name} went away during the test: it now holds {} where it \
                     held {} (detached, ejected or resized); its remaining tests are not run",
                    crate::units::human_bytes(now),
                    crate::units::human_bytes(found)
                ),
            )
            .workload(wk),
        );
    } else if after.vanished {
        cell.status = CellStatus::Error;
        cell.reasons.push(
            Reason::new(
                ReasonKind::Vanished,
                format!(
                    "{w}: {disk_name} vanished during the test (unplugged, or reset and \
                     re-enumerated under another name)"
                ),
            )
            .workload(wk),
        );
    }
}

/// The cells after the one during which the disk vanished or shrank: none of them can run.
pub fn not_run_vanished(cells: &mut [Cell], disk_name: &str) {
    for cell in cells {
        cell.status = CellStatus::Error;
        cell.reasons = vec![Reason::new(
            ReasonKind::Vanished,
            format!("not run: {disk_name} went away or shrank during an earlier test"),
        )
        .workload(cell.workload)];
    }
}

/// A cell not run yet.
pub fn pending(workload: WorkloadKind) -> Cell {
    Cell {
        workload,
        status: CellStatus::Pending,
        reasons: Vec::new(),
        started_at: None,
        wall_seconds: None,
        params: None,
        result: None,
        kernel_events: Vec::new(),
        concurrent_with: Vec::new(),
        machine_busy_percent: None,
        attempts: Vec::new(),
    }
}
