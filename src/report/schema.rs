//! Owns the report's versioned types: what one factory run leaves on the rootfs. Every figure
//! carries its unit in its name; every verdict its reasons. `docs/report.schema.json` is the
//! same schema as JSON Schema (tests validate real reports against it).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::unit::UnitIdentity;
use crate::discover::linkcheck::LinkFinding;
use crate::discover::Disk;
use crate::events::KernelEvent;
use crate::matrix::config::Config;
use crate::matrix::select::Placement;
use crate::matrix::verdict::Verdict;
use crate::workload::{BenchResult, WorkloadKind, WorkloadParams};

/// Bump on any change a reader must know about; readers accept every version up to theirs.
pub const SCHEMA_VERSION: u32 = 1;

/// The state of the run as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    /// Still running: this is a partial report written after a finished cell.
    Running,
    /// Every cell ran (passed, failed or was skipped with a reason).
    Complete,
    /// Stopped by SIGINT/SIGTERM: cells not run are `pending`.
    Interrupted,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    pub version: String,
    /// Cargo features built in (`udev`, `uring`).
    pub features: Vec<String>,
}

impl Tool {
    pub fn this() -> Tool {
        let mut features = Vec::new();
        if cfg!(feature = "udev") {
            features.push("udev".to_string());
        }
        if cfg!(feature = "uring") {
            features.push("uring".to_string());
        }
        Tool {
            name: "usbperf-matrix".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            features,
        }
    }
}

/// One factory run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    /// This run's identity, unique per run (random, 64 bits as 16 hex digits): part of the
    /// file name, and what a collector or the fleet dedupes by. Absent in older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_id: Option<String>,
    pub tool: Tool,
    pub started_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    pub status: RunStatus,
    /// The signal that interrupted the run (`SIGTERM`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<String>,
    /// The process exit code this report stands for (absent while running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<u8>,
    pub unit: UnitIdentity,
    pub config: Config,
    pub inventory_backend: String,
    pub devices: Vec<DeviceReport>,
    /// Required devices (config `required: true`) that were not found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_devices: Vec<String>,
    pub verdict: Verdict,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// One tested device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Index of the `devices` rule that chose it.
    pub rule: usize,
    /// The inventory entry at the start of the run (identity, link, partitions, mounts).
    pub disk: Disk,
    pub placement: Placement,
    /// Link checks of thresholds with `min_link_mbps`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub link_checks: Vec<LinkFinding>,
    pub cells: Vec<Cell>,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CellStatus {
    /// Not run (yet, or ever: the run was interrupted).
    Pending,
    Passed,
    /// Ran, and a threshold, a kernel event or a verify mismatch failed it.
    Failed,
    /// Could not run: I/O error, ENOSPC, EROFS, device vanished; `reasons` says which.
    Error,
    /// Not applicable (a write test on a device without a writable target).
    Skipped,
    /// Stopped by a signal; figures cover the part that ran.
    Interrupted,
}

/// One (device, test) cell of the matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub workload: WorkloadKind,
    pub status: CellStatus,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<WorkloadParams>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<BenchResult>,
    /// Kernel messages attributed to this device while the cell ran, verbatim; a `fatal`
    /// one fails the cell.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_events: Vec<KernelEvent>,
}

/// A new random report id: 16 lowercase hex digits from the kernel's random pool (getrandom),
/// falling back to the clock and pid mixed when the pool cannot be read (early boot, seccomp).
pub fn new_report_id() -> String {
    let mut b = [0u8; 8];
    // SAFETY: the buffer is valid for its length; flags 0 blocks only until the pool is
    // initialised once at boot.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    let v = if n == b.len() as isize {
        u64::from_le_bytes(b)
    } else {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        crate::engine::mix64(t ^ (u64::from(std::process::id()) << 32))
    };
    format!("{v:016x}")
}

impl Report {
    /// YAML or JSON bytes of the report.
    pub fn encode(&self, json: bool) -> Result<Vec<u8>, String> {
        if json {
            serde_json::to_vec_pretty(self)
                .map(|mut v| {
                    v.push(b'\n');
                    v
                })
                .map_err(|e| e.to_string())
        } else {
            serde_norway::to_string(self)
                .map(String::into_bytes)
                .map_err(|e| e.to_string())
        }
    }
}
