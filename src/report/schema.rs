//! Owns the report's versioned types: what one factory run leaves on the rootfs. Every figure
//! carries its unit in its name; every verdict its reasons. `docs/report.schema.json` is the
//! same schema as JSON Schema (tests validate real reports against it).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::schedule::{AloneCell, Lane, ScheduleMode};
use super::unit::UnitIdentity;
pub use super::verdict::{Reason, Verdict};
use crate::config::Config;
use crate::discover::linkcheck::LinkFinding;
use crate::discover::Disk;
use crate::events::KernelEvent;
use crate::safety::FileTarget;
use crate::workload::{BenchResult, WorkloadKind, WorkloadParams};

/// The newest schema, written by this build (the report crate says what each version is).
pub use usbperf_report::SCHEMA_VERSION;

/// The state of the run as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    /// Still running: this is a partial report written after a finished cell.
    Running,
    /// Every cell ran (passed, failed or was skipped with a reason).
    Complete,
    /// Stopped by SIGINT/SIGTERM: cells not run are `pending`.
    Interrupted,
}

impl RunStatus {
    /// The name the report spells it with.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Complete => "complete",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Report {
    pub schema_version: u32,
    /// This run's identity, unique per run (a random UUID, RFC 9562 version 4): its first 8
    /// digits are part of the file name, and it is what a collector or the fleet dedupes by.
    /// Always written since schema 2; schema 1 had 16 hex digits, or none.
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
    #[serde(
        deserialize_with = "crate::report::decode::capped::<_, _, { crate::report::decode::MAX_DEVICES }>"
    )]
    pub devices: Vec<DeviceReport>,
    /// Required devices (config `required: true`) that were not found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_devices: Vec<String>,
    pub verdict: Verdict,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Which devices could have been tested together (their lanes) and how they were run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// The raw flash (MTD and UBI devices): their counters, scans and speed tests, judged by
    /// the profile's `flash:` section. Absent on a unit without raw flash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flash: Option<FlashReport>,
}

/// The raw flash of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FlashReport {
    #[serde(
        deserialize_with = "crate::report::decode::capped::<_, _, { crate::report::decode::MAX_DEVICES }>"
    )]
    pub devices: Vec<FlashDeviceReport>,
}

/// `mtd` (an MTD device: a flash chip or a partition) or `ubi` (a UBI device on one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum FlashClass {
    Mtd,
    Ubi,
}

/// One figure of a flash device: its name (`flash.bad_blocks`, `scan.uncorrectable_pages`,
/// `ubi.erase_count`, `flash-write.mib_per_s`; the part after the dot is its metric) and
/// value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FlashFigure {
    pub name: String,
    pub value: f64,
}

/// One MTD or UBI device of the run: what it is, its figures, the tests run on it, and the
/// verdict on them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FlashDeviceReport {
    /// `mtd2`, `ubi0`.
    pub name: String,
    pub class: FlashClass,
    /// The partition's or chip's name (`mtd`), or the MTD device it is on (`ubi`).
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtd: Option<crate::discover::mtd::Mtd>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ubi: Option<crate::discover::mtd::Ubi>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub figures: Vec<FlashFigure>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<crate::workload::mtd::FlashScan>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed: Option<crate::workload::mtd::FlashSpeed>,
    pub verdict: Verdict,
}

/// The run's schedule: the lanes of the tested devices (what each shares that limits its
/// throughput, matrix::schedule) and the mode they ran in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Schedule {
    /// `serial` (one device after another) or `auto` (lanes at the same time).
    pub mode: ScheduleMode,
    pub lanes: Vec<Lane>,
    /// `auto`: the cells that ran alone, and by which rule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alone: Vec<AloneCell>,
}

/// One tested device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    #[serde(
        deserialize_with = "crate::report::decode::capped::<_, _, { crate::report::decode::MAX_CELLS }>"
    )]
    pub cells: Vec<Cell>,
    /// The power-cut test's verdict on this device (a report `power-cut verify` wrote: it
    /// has no cells).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_cut: Option<crate::workload::powercut::Verdict>,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

impl CellStatus {
    /// The name the report spells it with.
    pub fn as_str(self) -> &'static str {
        match self {
            CellStatus::Pending => "pending",
            CellStatus::Passed => "passed",
            CellStatus::Failed => "failed",
            CellStatus::Error => "error",
            CellStatus::Skipped => "skipped",
            CellStatus::Interrupted => "interrupted",
        }
    }
}

/// One (device, test) cell of the matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Cell {
    pub workload: WorkloadKind,
    pub status: CellStatus,
    /// Why it failed, errored or was skipped, and notes on how it was placed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<Reason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<WorkloadParams>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<BenchResult>,
    /// Kernel messages attributed to this device while the cell ran or since its previous
    /// cell ended (a filesystem's error logged just after a write is the next cell's),
    /// verbatim; a `fatal` one fails the cell.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_events: Vec<KernelEvent>,
    /// The other devices whose cells ran while this one did (`schedule: auto`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub concurrent_with: Vec<String>,
    /// How busy the machine's CPUs were while it ran, in % of all of them (`/proc/stat`):
    /// interrupts, softirqs and kernel threads included, which the job threads' own `cpu`
    /// leaves out. What the schedule predicts a small-block cell's CPU from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_busy_percent: Option<f64>,
    /// The earlier attempts of a cell measured again because its only failures were marginal
    /// (`retest`), first first; the fields above are the last attempt's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
}

/// One earlier attempt of a retested cell: how it went and what it measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Attempt {
    pub status: CellStatus,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<Reason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<BenchResult>,
}

impl Attempt {
    /// The attempt a cell holds now, before it is measured again.
    pub fn of(cell: &Cell) -> Attempt {
        Attempt {
            status: cell.status,
            reasons: cell.reasons.clone(),
            started_at: cell.started_at,
            wall_seconds: cell.wall_seconds,
            result: cell.result.clone(),
        }
    }
}

impl Cell {
    /// Whether every failure of this cell is a marginal threshold miss: the only kind a retest
    /// may measure again (an I/O error, a kernel event, a vanished device never is).
    pub fn only_marginal_failures(&self) -> bool {
        use super::verdict::ReasonKind;
        let failures: Vec<&Reason> = self
            .reasons
            .iter()
            .filter(|r| r.kind != ReasonKind::Note)
            .collect();
        self.status == CellStatus::Failed
            && self.kernel_events.is_empty()
            && !failures.is_empty()
            && failures
                .iter()
                .all(|r| r.kind == ReasonKind::Threshold && r.marginal)
    }

    /// Whether a figure of this cell is within its threshold's marginal band.
    pub fn marginal(&self) -> bool {
        self.reasons.iter().any(|r| r.marginal)
    }
}

/// A new random report id: a version 4 UUID (RFC 9562) from the kernel's random pool
/// (getrandom), falling back to the clock and pid mixed when the pool cannot be read (early
/// boot, seccomp). Written by hand: 16 random bytes and two fixed fields need no crate.
pub fn new_report_id() -> String {
    let mut b = [0u8; 16];
    // SAFETY: the buffer is valid for its length; flags 0 blocks only until the pool is
    // initialised once at boot.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let hi = crate::engine::mix64(t ^ (u64::from(std::process::id()) << 32));
        let lo = crate::engine::mix64(hi ^ t.rotate_left(17));
        b[..8].copy_from_slice(&hi.to_le_bytes());
        b[8..].copy_from_slice(&lo.to_le_bytes());
    }
    uuid_v4(b)
}

/// Formats 16 random bytes as a version 4, variant 10 UUID: `xxxxxxxx-xxxx-4xxx-[89ab]xxx-xxxxxxxxxxxx`.
pub fn uuid_v4(mut b: [u8; 16]) -> String {
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = usbperf_report::seal::hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

impl Report {
    /// The report as it reads from the file this build writes of it: the factory run prints
    /// at its end exactly what `show` prints of that file.
    pub fn as_read(&self) -> super::wire::Report {
        // The JSON form is lossless for every figure (float_roundtrip); the value was made by
        // this build, so it is within every bound and decodes.
        let bytes = serde_json::to_vec(self).expect("a report serialises");
        super::decode::parse(true, &bytes).expect("a report this build writes reads back")
    }

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

/// Where a disk's tests go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum Placement {
    /// Test files in a directory of the disk's filesystem.
    File(FileTarget),
    /// Read tests on the raw device; write tests are not run (`why`).
    RawRead { why: String },
    /// Read and write tests on the raw device (every safety check passed).
    RawWrite,
    /// Writing was asked for and refused; read tests still run on the raw device.
    Refused { refusals: Vec<String> },
}

impl Placement {
    pub fn writable(&self) -> bool {
        matches!(self, Placement::File(_) | Placement::RawWrite)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn report_ids_are_version_4_uuids() {
        // (random bytes, UUID): RFC 9562 section 5.4 sets the version nibble and variant bits.
        let cases = [
            ([0u8; 16], "00000000-0000-4000-8000-000000000000"),
            ([0xffu8; 16], "ffffffff-ffff-4fff-bfff-ffffffffffff"),
        ];
        for (bytes, want) in cases {
            assert_eq!(super::uuid_v4(bytes), want);
        }
        let a = super::new_report_id();
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
        assert_ne!(a, super::new_report_id());
    }
}
