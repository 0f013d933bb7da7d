//! Owns the workloads (what hdparm, dd and fio do in boards' bring-up guides): their parameters
//! and defaults, how each becomes job plans for the engine, size and time bounds, cache modes, and
//! the result every workload returns.

pub mod curve;
pub mod mtd;
pub mod overrides;
pub mod powercut;
pub mod target;
pub mod verify;

pub use overrides::Overrides;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::engine::{
    self, mix64, Access, Engine, EngineError, EngineKind, EngineRequest, JobPlan, OpStats,
    Progress, RunOutcome, RunSpec, Selected, StopReason,
};
use crate::stats::{CpuFigures, OpFigures, Precision, MIN_WINDOWS};
use curve::CurveReport;
use target::{OpenMode, Preparation, QueueInfo, Target, TargetKind};
use verify::{VerifyMode, VerifyPhase, VerifyReport};

/// The workloads, by the name `--workload` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// hdparm -t: sequential large reads (O_DIRECT) for a few seconds; read-only.
    ReadBuffered,
    /// dd of=: sequential 1 MiB writes.
    SeqWrite,
    /// dd if=: sequential 1 MiB reads after a cache drop, or O_DIRECT.
    SeqRead,
    /// Random 4 KiB reads, QD16 x 4 jobs.
    RandRead,
    /// Random 4 KiB writes, QD16 x 4 jobs.
    RandWrite,
    /// Random reads and writes, 70 % reads.
    Mixed,
    /// A long sequential write sampled over time, with knee detection.
    WriteCurve,
    /// Write a checkable pattern and read it back.
    Verify,
}

impl WorkloadKind {
    /// Whether the workload walks its region block after block; its jobs then each take their
    /// own slice of the region (verify runs one job, sequential or spread).
    pub fn sequential(self) -> bool {
        matches!(
            self,
            WorkloadKind::ReadBuffered
                | WorkloadKind::SeqWrite
                | WorkloadKind::SeqRead
                | WorkloadKind::WriteCurve
        )
    }

    /// The name the report spells it with.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::ReadBuffered => "read-buffered",
            WorkloadKind::SeqWrite => "seq-write",
            WorkloadKind::SeqRead => "seq-read",
            WorkloadKind::RandRead => "rand-read",
            WorkloadKind::RandWrite => "rand-write",
            WorkloadKind::Mixed => "mixed",
            WorkloadKind::WriteCurve => "write-curve",
            WorkloadKind::Verify => "verify",
        }
    }
}

/// How writes reach the medium and how reads avoid the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum CacheMode {
    /// O_DIRECT (dd oflag=direct / iflag=direct).
    Direct,
    /// Buffered writes, then fdatasync, counted in the time (dd conv=fdatasync).
    Fdatasync,
    /// O_DSYNC: every write waits for the medium (dd oflag=dsync).
    Dsync,
    /// Page cache; reads start after a cache drop.
    Buffered,
}

/// Every parameter of one test, resolved (defaults filled in); part of every result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorkloadParams {
    pub workload: WorkloadKind,
    pub target: PathBuf,
    pub engine: EngineRequest,
    pub block_bytes: u64,
    pub queue_depth: u32,
    pub jobs: u32,
    /// The time bound; `None` runs until the size bound.
    pub runtime_ms: Option<u64>,
    /// The region tested (and the amount of I/O unless `time_based`); `None` = the whole
    /// existing target.
    pub size_bytes: Option<u64>,
    pub cache: CacheMode,
    /// For `mixed`: the share of reads in %.
    pub read_percent: u8,
    /// Keep going over the region until the time bound (fio's time_based).
    pub time_based: bool,
    /// Stop before the time bound once the rate is steady and half its 95 % confidence
    /// interval is at most this, in % of it: the figure is known (`stopped_by: known`). Tests
    /// that write run their whole time bound (a write cache taking a burst looks steady).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision_percent: Option<f64>,
    pub seed: u64,
    /// For `write-curve`: the sampling interval.
    pub sample_interval_ms: u64,
    pub verify_mode: VerifyMode,
    pub verify_phase: VerifyPhase,
    /// For quick `verify`: how many probes spread over the region.
    pub verify_points: u64,
    /// Keep a test file we created.
    pub keep: bool,
    pub allow_write_device: bool,
}

impl WorkloadParams {
    /// The defaults of each workload (what fio, hdparm and dd run in boards' bring-up guides).
    pub fn defaults(workload: WorkloadKind, target: PathBuf) -> Self {
        use WorkloadKind::*;
        let block_bytes = match workload {
            ReadBuffered => 2 << 20,
            SeqWrite | SeqRead | WriteCurve | Verify => 1 << 20,
            RandRead | RandWrite | Mixed => 4096,
        };
        let (queue_depth, jobs) = match workload {
            RandRead | RandWrite | Mixed => (16, 4),
            _ => (1, 1),
        };
        let runtime_ms = match workload {
            ReadBuffered => Some(3_000),
            SeqWrite | SeqRead | RandRead | RandWrite | Mixed => Some(30_000),
            WriteCurve | Verify => None,
        };
        WorkloadParams {
            workload,
            target,
            engine: EngineRequest::Auto,
            block_bytes,
            queue_depth,
            jobs,
            runtime_ms,
            size_bytes: None,
            cache: CacheMode::Direct,
            read_percent: match workload {
                Mixed => 70,
                ReadBuffered | SeqRead | RandRead => 100,
                _ => 0,
            },
            time_based: false,
            precision_percent: None,
            seed: 0x5EED_0F0B_u64,
            sample_interval_ms: 1000,
            verify_mode: VerifyMode::Full,
            verify_phase: VerifyPhase::Both,
            verify_points: 1024,
            keep: false,
            allow_write_device: false,
        }
    }

    /// Whether the workload writes (so needs a writable target).
    pub fn writes(&self) -> bool {
        use WorkloadKind::*;
        match self.workload {
            ReadBuffered | SeqRead | RandRead => false,
            SeqWrite | RandWrite | WriteCurve => true,
            Mixed => self.read_percent < 100,
            Verify => self.verify_phase != VerifyPhase::Read,
        }
    }

    fn reads(&self) -> bool {
        use WorkloadKind::*;
        match self.workload {
            ReadBuffered | SeqRead | RandRead => true,
            SeqWrite | RandWrite | WriteCurve => false,
            Mixed => self.read_percent > 0,
            Verify => self.verify_phase != VerifyPhase::Write,
        }
    }

    /// hdparm -t semantics are O_DIRECT whatever `--cache` says.
    fn direct(&self) -> bool {
        self.workload == WorkloadKind::ReadBuffered || self.cache == CacheMode::Direct
    }
}

/// Where the workload runs, besides its parameters.
pub struct RunOptions {
    /// The sysfs tree to read queue settings from (normally `/sys`).
    pub sysfs_root: PathBuf,
    /// Set to stop the run early (SIGINT); in-flight I/O is still drained.
    pub stop: Arc<AtomicBool>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            sysfs_root: PathBuf::from("/sys"),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// The target as reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TargetReport {
    pub path: PathBuf,
    pub kind: TargetKind,
    pub created: bool,
    pub region_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueInfo>,
}

/// One test's result: every figure, the engine used and every parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BenchResult {
    pub workload: WorkloadKind,
    pub engine: EngineKind,
    pub engine_reason: String,
    pub params: WorkloadParams,
    pub target: TargetReport,
    pub stopped_by: StopReason,
    pub bytes: u64,
    pub ios: u64,
    /// Wall time, including the final flush in `fdatasync` mode.
    pub seconds: f64,
    pub mib_per_s: f64,
    pub iops: f64,
    /// Reads and writes together.
    pub all: OpFigures,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read: Option<OpFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write: Option<OpFigures>,
    pub cpu: CpuFigures,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flush_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_drop: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub curve: Option<CurveReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<VerifyReport>,
    /// How repeatable the figure is: its rate in 100 ms windows, the 95 % confidence
    /// interval and the trend (the plain tests; `write-curve` has its curve, `verify` its
    /// phases). Absent in reports from before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<Precision>,
}

/// The figures a limit judges and a table shows ([`BenchResult::judged`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judged {
    pub mib_per_s: f64,
    pub iops: f64,
    /// Half the 95 % confidence interval of those figures, in %.
    pub ci95_percent: Option<f64>,
    /// The rate fell partway: these are its sustained level, after the burst.
    pub sustained: bool,
}

impl BenchResult {
    /// The rate and IOPS a limit judges: after a drop (a write cache that filled) the
    /// sustained level; otherwise the steady rate over the windows after the warm-up and
    /// before the drain (a burst the device allows after idle is not its rate); the whole
    /// test's figures when it had too few windows to say. IOPS follow the rate (one I/O size).
    pub fn judged(&self) -> Judged {
        let precision = self.precision.as_ref();
        let drop = precision.and_then(|p| p.drop.as_ref());
        let (mib_per_s, iops) = crate::stats::judged_figures(
            self.mib_per_s,
            self.iops,
            drop.map(|d| d.sustained_mib_per_s),
            precision.and_then(|p| p.steady_mib_per_s),
        );
        Judged {
            mib_per_s,
            iops,
            ci95_percent: match drop {
                Some(d) => d.ci95_percent,
                None => precision.and_then(|p| p.ci95_percent),
            },
            sustained: drop.is_some() && self.mib_per_s > 0.0,
        }
    }
}

/// Workload failures; each message says how to fix the problem.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("cannot open {path}: {source}; check the path and the permissions (block devices need root)")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} does not exist: give --size to create a test file of that size there")]
    NeedSize(PathBuf),
    #[error("{0}: no such device node: the disk is gone (unplugged?) or has none (a hidden NVMe multipath path); usbperf never creates files under /dev, so check the cable and that the disk is listed by `usbperf-matrix list`")]
    NoDevice(PathBuf),
    #[error("{0} is neither a regular file nor a block device: point --target at a file or a /dev/sdX-like device")]
    NotATarget(PathBuf),
    #[error("{0} is a symbolic link to a file: refusing to follow it (a test file path must not be a link); remove the link or point --target at the real file")]
    Symlink(PathBuf),
    #[error("{0} is a block device and this workload writes to it, destroying its data: add --allow-write-device if that is intended")]
    DeviceWriteRefused(PathBuf),
    #[error("{0} is in use (mounted, active swap, or held by RAID/LVM/dm-crypt): the kernel refused an exclusive open, so nothing was written; unmount or release it first")]
    DeviceBusy(PathBuf),
    #[error("{0} does not support O_DIRECT (tmpfs, some FUSE file systems): use --cache fdatasync or buffered, or a target on a real device")]
    DirectUnsupported(PathBuf),
    #[error(
        "{path} holds {}, less than the test's size {}: give a size of {} or less (bench's \
         --size, or size: in the config's test)",
        crate::units::human_bytes(*.actual_bytes),
        crate::units::format_size(*.wanted_bytes),
        crate::units::format_size(*.actual_bytes)
    )]
    TooSmall {
        path: PathBuf,
        actual_bytes: u64,
        wanted_bytes: u64,
    },
    #[error("cannot create and prepare the test file {path}: {source}; check free space and permissions")]
    Prepare {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bs {0}: must be a multiple of 512 bytes, which O_DIRECT needs: use a size such as 4k or 1M, or cache buffered")]
    Alignment(u64),
    #[error("{0}")]
    BadParams(String),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("the final fdatasync of {path} failed: {source}; the data may not be on the medium")]
    Flush {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl crate::exit::Classify for WorkloadError {
    /// What was asked of the target (its kind, size, alignment, a device to write) is the
    /// user's to change; opening, preparing, an I/O or a flush failing is not.
    fn exit(&self) -> crate::exit::Exit {
        use crate::exit::Exit::{Error, Usage};
        match self {
            WorkloadError::NeedSize(_)
            | WorkloadError::NoDevice(_)
            | WorkloadError::NotATarget(_)
            | WorkloadError::Symlink(_)
            | WorkloadError::DeviceWriteRefused(_)
            | WorkloadError::DeviceBusy(_)
            | WorkloadError::DirectUnsupported(_)
            | WorkloadError::TooSmall { .. }
            | WorkloadError::Alignment(_)
            | WorkloadError::BadParams(_) => Usage,
            WorkloadError::Engine(e) => e.exit(),
            WorkloadError::Open { .. }
            | WorkloadError::Prepare { .. }
            | WorkloadError::Flush { .. } => Error,
        }
    }
}

/// The largest block size: 32 × hdparm's 2 MiB; larger blocks measure nothing more and cost
/// one buffer of that size per in-flight I/O.
pub const MAX_BLOCK_BYTES: u64 = 64 << 20;
/// The largest queue depth and job count the engines accept (io_uring rings are sized by the
/// queue depth; the sync engine runs a thread per in-flight I/O).
pub const MAX_QUEUE_DEPTH: u32 = 4096;
pub const MAX_JOBS: u32 = 1024;
/// Buffer memory of all in-flight I/Os (block size × queue depth × jobs): beyond this a board
/// with 512 MiB of RAM would be pushed into the OOM killer by its own test.
pub const MAX_INFLIGHT_BYTES: u64 = 1 << 30;

/// Which rule a parameter broke, where a caller answers one rule in its own words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamRule {
    /// The block size is not a multiple of 512 bytes, and the I/O is O_DIRECT.
    DirectAlignment,
    /// Any other rule; `ParamError::rule` says which.
    Other,
}

/// A workload parameter outside its rules: which key, the value given, and the rule.
/// `key` is the config key (`bs`, `qd`, `read_percent`); bench's flag is `--` + it with `-`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} {value}: {rule}")]
pub struct ParamError {
    pub key: &'static str,
    pub value: String,
    pub rule: String,
    pub broken: ParamRule,
}

impl ParamError {
    /// The same rule worded for bench's command line (`--bs 3: ...`).
    pub fn as_flag(&self) -> String {
        format!(
            "--{} {}: {}",
            self.key.replace('_', "-"),
            self.value,
            self.rule
        )
    }
}

/// The one set of rules every workload's parameters obey, whoever set them (a config file's
/// `tests:` entry when it is loaded, bench's flags before anything is opened, and the engine
/// once more before any I/O).
pub fn check_params(p: &WorkloadParams) -> Result<(), ParamError> {
    let err = |key: &'static str, value: String, rule: String| {
        Err(ParamError {
            key,
            value,
            rule,
            broken: ParamRule::Other,
        })
    };
    let bs = p.block_bytes;
    let bs_text = crate::units::format_size(bs);
    if bs == 0 || bs > MAX_BLOCK_BYTES {
        return err(
            "bs",
            bs_text,
            format!(
                "must be between 512 and {} bytes, e.g. 4k or 1M",
                crate::units::format_size(MAX_BLOCK_BYTES)
            ),
        );
    }
    if p.direct() && bs % 512 != 0 {
        return Err(ParamError {
            key: "bs",
            value: bs_text,
            rule: "must be a multiple of 512 bytes, which O_DIRECT needs: use 4k, 64k or 1M (or \
                   cache: buffered)"
                .into(),
            broken: ParamRule::DirectAlignment,
        });
    }
    if p.workload == WorkloadKind::Verify && (bs as usize) < verify::HEADER_BYTES {
        return err(
            "bs",
            bs_text,
            format!(
                "verify needs at least {} bytes per block to hold its header",
                verify::HEADER_BYTES
            ),
        );
    }
    if p.queue_depth == 0 || p.queue_depth > MAX_QUEUE_DEPTH {
        return err(
            "qd",
            p.queue_depth.to_string(),
            format!("must be 1..={MAX_QUEUE_DEPTH}"),
        );
    }
    if p.jobs == 0 || p.jobs > MAX_JOBS {
        return err(
            "jobs",
            p.jobs.to_string(),
            format!("must be 1..={MAX_JOBS}"),
        );
    }
    let inflight = bs
        .saturating_mul(u64::from(p.queue_depth))
        .saturating_mul(u64::from(p.jobs));
    if inflight > MAX_INFLIGHT_BYTES {
        return err(
            "bs",
            bs_text,
            format!(
                "bs x qd x jobs = {} of buffers in flight, more than the {} allowed: lower bs, \
                 qd or jobs",
                crate::units::format_size(inflight),
                crate::units::format_size(MAX_INFLIGHT_BYTES)
            ),
        );
    }
    if p.read_percent > 100 {
        return err(
            "read_percent",
            p.read_percent.to_string(),
            "must be 0..=100".into(),
        );
    }
    if let Some(v) = p.precision_percent {
        if !(v.is_finite() && (MIN_PRECISION_PERCENT..=MAX_PRECISION_PERCENT).contains(&v)) {
            return err(
                "precision_percent",
                v.to_string(),
                format!(
                    "must be {MIN_PRECISION_PERCENT} to {MAX_PRECISION_PERCENT} (half the 95 % \
                     confidence interval that ends the test early, in %; e.g. 2)"
                ),
            );
        }
        if p.runtime_ms.is_none() {
            return err(
                "precision_percent",
                v.to_string(),
                "needs a runtime: the budget the test may spend before its figure is known".into(),
            );
        }
    }
    if p.time_based && p.runtime_ms.is_none() {
        return err(
            "time_based",
            "true".into(),
            "needs a runtime to stop at".into(),
        );
    }
    if let Some(size) = p.size_bytes {
        let size_text = crate::units::format_size(size);
        if size == 0 {
            return err("size", size_text, "must be at least one block (bs)".into());
        }
        if size < bs {
            return err(
                "size",
                size_text,
                format!(
                    "is smaller than one block (bs {bs_text}): give a larger size or a smaller bs"
                ),
            );
        }
        // Sequential jobs each take their own slice; verify always runs one job.
        let need = bs.saturating_mul(u64::from(p.jobs));
        if p.workload.sequential() && size < need {
            return err(
                "size",
                size_text,
                format!(
                    "{} sequential jobs of bs {bs_text} need at least {}: give a larger size or \
                     fewer jobs",
                    p.jobs,
                    crate::units::format_size(need)
                ),
            );
        }
    }
    Ok(())
}

/// Shrinks the block to fit a region clamped below it (a 1 MiB eMMC boot partition under
/// read-buffered's 2 MiB reads, a small stick under a large `bs`): the largest multiple of
/// 4 KiB (512 B below that) that gives every sequential job one block. Returns the block it
/// replaced, for the cell's note; `None` when the block already fits or nothing smaller can.
pub fn fit_block_to_size(p: &mut WorkloadParams) -> Option<u64> {
    let size = p.size_bytes?;
    let share = if p.workload.sequential() {
        size / u64::from(p.jobs.max(1))
    } else {
        size
    };
    if share >= p.block_bytes {
        return None;
    }
    let align = if share >= 4096 { 4096 } else { 512 };
    let bs = share / align * align;
    let min = if p.workload == WorkloadKind::Verify {
        (verify::HEADER_BYTES as u64).max(512)
    } else {
        512
    };
    if bs < min {
        return None;
    }
    Some(std::mem::replace(&mut p.block_bytes, bs))
}

fn validate(params: &WorkloadParams) -> Result<(), WorkloadError> {
    check_params(params).map_err(|e| {
        if e.broken == ParamRule::DirectAlignment {
            WorkloadError::Alignment(params.block_bytes)
        } else {
            WorkloadError::BadParams(e.to_string())
        }
    })
}

/// Splits the region into job plans: sequential jobs get consecutive slices, random jobs share
/// the whole region and split the I/O count (the size bound is the total over all jobs).
fn plans(
    params: &WorkloadParams,
    region_bytes: u64,
    access: Access,
    read_percent: u8,
) -> Result<Vec<JobPlan>, WorkloadError> {
    let bs = params.block_bytes;
    let jobs = u64::from(params.jobs);
    let blocks = region_bytes / bs;
    if blocks == 0 {
        return Err(WorkloadError::BadParams(format!(
            "the region ({region_bytes} bytes) is smaller than one block ({bs} bytes): give a larger --size or a smaller --bs"
        )));
    }
    let plan = |j: u64, offset: u64, bytes: u64, ios: u64| JobPlan {
        access,
        read_percent,
        block_bytes: bs as usize,
        region_offset_bytes: offset,
        region_bytes: bytes,
        queue_depth: params.queue_depth as usize,
        io_limit: (!params.time_based).then_some(ios),
        seed: params.seed ^ mix64(j),
    };
    match access {
        Access::Sequential => {
            let slice_blocks = blocks / jobs;
            if slice_blocks == 0 {
                return Err(WorkloadError::BadParams(format!(
                    "{jobs} sequential jobs need at least {jobs} blocks: give a larger --size or fewer --jobs"
                )));
            }
            Ok((0..jobs)
                .map(|j| plan(j, j * slice_blocks * bs, slice_blocks * bs, slice_blocks))
                .collect())
        }
        Access::Random | Access::Spread { .. } => {
            let total = match access {
                Access::Spread { points } => points.min(blocks),
                _ => blocks,
            };
            Ok((0..jobs)
                .map(|j| {
                    let ios = total / jobs + u64::from(j < total % jobs);
                    plan(j, 0, blocks * bs, ios)
                })
                .collect())
        }
    }
}

/// Counters of one or more engine runs, added up.
struct Measured {
    read: OpStats,
    write: OpStats,
    elapsed_ns: u64,
    cpu_usr_ns: u64,
    cpu_sys_ns: u64,
    stopped_by: StopReason,
}

impl Measured {
    fn new() -> Self {
        Measured {
            read: OpStats::new(),
            write: OpStats::new(),
            elapsed_ns: 0,
            cpu_usr_ns: 0,
            cpu_sys_ns: 0,
            stopped_by: StopReason::Size,
        }
    }

    fn add(&mut self, outcome: &RunOutcome) {
        self.read.merge(&outcome.read);
        self.write.merge(&outcome.write);
        self.elapsed_ns += outcome.elapsed_ns;
        self.cpu_usr_ns += outcome.cpu_usr_ns;
        self.cpu_sys_ns += outcome.cpu_sys_ns;
        if outcome.stopped_by != StopReason::Size {
            self.stopped_by = outcome.stopped_by;
        }
    }
}

/// fdatasync of the target, timed in ns: the flush is part of what a buffered write costs.
fn timed_flush(target: &Target) -> Result<u64, WorkloadError> {
    let t0 = engine::now_ns();
    target.flush().map_err(|e| WorkloadError::Flush {
        path: target.path.clone(),
        source: e,
    })?;
    Ok(engine::now_ns() - t0)
}

/// What a workload's procedure (the plain runs here, verify.rs, curve.rs) works with: the open
/// target, its region and the engine chosen for it.
struct Procedure<'a> {
    params: &'a WorkloadParams,
    target: &'a Target,
    engine: &'a dyn Engine,
    region_bytes: u64,
    direct: bool,
    runtime: Option<Duration>,
    stop: &'a Arc<AtomicBool>,
}

impl Procedure<'_> {
    /// One engine run of these plans on the target.
    fn spec(&self, plans: Vec<JobPlan>, runtime: Option<Duration>) -> RunSpec {
        RunSpec {
            fd: self.target.fd(),
            direct: self.direct,
            progress: Arc::new(Progress::new(plans.len())),
            jobs: plans,
            runtime,
            data: None,
            stop: self.stop.clone(),
            known: Arc::default(),
        }
    }
}

/// Consecutive looks (one a window) that must find the rate known before a test stops early.
/// A look at a few windows can find a narrow interval by chance, and looking after every
/// window gives chance many tries: on a throttled stick one random-read test stopped after
/// 0.61 s on 4 windows stating ±0.18 %, where its runs that went on stated ±8-13 %, and 8
/// runs of 2.5 s spread 2.8 % with three such early stops. Two looks: no random read stopped
/// early in 8 runs (spread 1.9 %); three cost the sequential tests 0.2 s more each (13.1 s a
/// device against 12.9 s) for no better figure.
const KNOWN_LOOKS: usize = 2;

/// One engine run with its progress sampled every `interval` while it goes: the outcome and
/// the points `(seconds since the start, bytes done)`, the last one at the run's end with
/// every drained byte (a sample taken just before it gives way: it would make a uselessly
/// short interval).
///
/// `at_completions` times each point at the last completion before it (the precision's
/// windows: whole I/Os over the time they took); otherwise on the grid (the write curve's
/// samples, a stall a sample at rate 0). With `known_at`, the run stops as at its time bound
/// once the windows so far make the rate known to that precision ([`Precision::known_to`]) at
/// [`KNOWN_LOOKS`] looks in a row; the outcome then says `Known`.
fn run_sampled(
    engine: &dyn Engine,
    s: &RunSpec,
    interval: Duration,
    at_completions: bool,
    known_at: Option<f64>,
) -> (Result<RunOutcome, EngineError>, Vec<(f64, u64)>) {
    let window_ms = interval.as_millis() as u64;
    let start_ns = engine::now_ns();
    let (outcome, mut points) = std::thread::scope(|scope| {
        let start = std::time::Instant::now();
        let handle = scope.spawn(|| engine::run(engine, s));
        let mut points = vec![(0.0, 0u64)];
        let mut next = interval;
        // Consecutive looks that found the rate known.
        let mut known_looks = 0;
        while !handle.is_finished() {
            let now = start.elapsed();
            if now >= next {
                if at_completions {
                    // Timed at the last completion, not at the grid: a window then holds
                    // whole I/Os over the time they took. Nothing completed: no point, so a
                    // stall is inside the next window, at its low rate.
                    let (bytes, done_ns) = settled(&s.progress, || handle.is_finished());
                    let last = points.last().copied().unwrap_or((0.0, 0));
                    let at = done_ns.saturating_sub(start_ns) as f64 / 1e9;
                    if bytes > last.1 && at > last.0 {
                        points.push((at, bytes));
                    }
                } else {
                    points.push((now.as_secs_f64(), s.progress.total_bytes()));
                }
                next += interval;
                // The warm-up window and MIN_WINDOWS more before the first look.
                if let Some(target) = known_at.filter(|_| points.len() > MIN_WINDOWS + 1) {
                    if !s.known.load(std::sync::atomic::Ordering::Relaxed) {
                        if Precision::from_progress(&points, window_ms).known_to(target) {
                            known_looks += 1;
                        } else {
                            known_looks = 0;
                        }
                        if known_looks >= KNOWN_LOOKS {
                            s.known.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                }
            }
            // Short naps keep the sample times close to the interval grid.
            std::thread::sleep(next.saturating_sub(start.elapsed()).min(SAMPLER_NAP));
        }
        let outcome = handle.join().unwrap_or(Err(EngineError::Panicked));
        (outcome, points)
    });
    let mut outcome = outcome;
    if let Ok(o) = &mut outcome {
        if o.stopped_by == StopReason::Time && s.known.load(std::sync::atomic::Ordering::Relaxed) {
            o.stopped_by = StopReason::Known;
        }
    }
    if let Ok(o) = &outcome {
        let mut end_s = o.elapsed_ns as f64 / 1e9;
        if at_completions {
            // The last completion, not the end of the run's clean-up.
            let (_, done_ns) = s.progress.snapshot();
            end_s = end_s.min(done_ns.saturating_sub(start_ns) as f64 / 1e9);
        }
        if points.len() > 1 && points.last().is_some_and(|last| end_s < last.0 + 0.05) {
            points.pop();
        }
        points.push((end_s, o.read.bytes + o.write.bytes));
    }
    (outcome, points)
}

/// The sampler's longest nap between looks at the progress. Measured, not derived (why the
/// shorter naps help is not established): on a throttled stick (random reads, 64 I/Os in
/// flight, a 2-core host), with naps of up to 20 ms the random reads' figures spread 1.3-3.0 %
/// over 8 runs (four benchmarks, the last stating ±6.8 % a run); with naps of up to 2 ms
/// 0.6-1.5 % (six, stating ±3.4-5.8 %). The 70/30 mix spread 0.8-1.5 % before and 1.2-1.8 %
/// after (2.6 % once, in a run that also recorded every point): if anything a little wider,
/// within 2 %; the other tests within 0.4 % throughout. The cost: 500 wake-ups a second
/// while a test runs, and a run's end is seen within 2 ms instead of 20.
const SAMPLER_NAP: Duration = Duration::from_millis(2);

/// How long completions must have paused for a point to be taken between two bursts (a
/// throttle's burst of 250 I/Os lasts about 6 ms, a completion at least every millisecond,
/// then nothing for 94 ms), and the longest wait for such a pause.
const SETTLE_GAP_NS: u64 = 5_000_000;
const SETTLE_MAX_NS: u64 = 20_000_000;

/// The progress at a pause in the completions: `(bytes done, time of the last completion)`.
/// A device that completes I/O in bursts (a throttle releasing a time slice's worth at once, a
/// controller flushing a batch) leaves a staircase of bytes over time, and a point taken in
/// the first moments of a burst sits a whole step below the line through the others: on a
/// throttled stick whose slices kept pace with the 100 ms windows, up to a third of a run's
/// points fell there and moved its random reads' figure by up to 3 %. Waiting until the
/// completions pause for [`SETTLE_GAP_NS`] takes the point at the step's top; a device that
/// completes without pause gives its point after at most [`SETTLE_MAX_NS`].
fn settled(progress: &engine::Progress, finished: impl Fn() -> bool) -> (u64, u64) {
    settle(
        || progress.snapshot(),
        engine::now_ns,
        || std::thread::sleep(Duration::from_micros(250)),
        finished,
    )
}

/// [`settled`] on any progress and clock: `snapshot` gives `(bytes, last completion ns)`,
/// `now` the clock, `nap` waits a little.
fn settle(
    snapshot: impl Fn() -> (u64, u64),
    now: impl Fn() -> u64,
    nap: impl Fn(),
    finished: impl Fn() -> bool,
) -> (u64, u64) {
    let first = now();
    loop {
        let (bytes, done_ns) = snapshot();
        let at = now();
        if at.saturating_sub(done_ns) >= SETTLE_GAP_NS
            || at.saturating_sub(first) >= SETTLE_MAX_NS
            || finished()
        {
            return (bytes, done_ns);
        }
        nap();
    }
}

/// The window of a figure's precision ([`Precision`]).
pub const PRECISION_WINDOW_MS: u64 = 100;
/// The bounds of `precision_percent`: tighter than 0.1 % no device repeats; looser than 50 %
/// says nothing.
pub const MIN_PRECISION_PERCENT: f64 = 0.1;
pub const MAX_PRECISION_PERCENT: f64 = 50.0;

/// Runs one workload on its target with the selected engine.
pub fn run(
    params: &WorkloadParams,
    selected: &Selected,
    options: &RunOptions,
) -> Result<BenchResult, WorkloadError> {
    validate(params)?;
    let writes = params.writes();
    let direct = params.direct();
    let mode = OpenMode {
        write: writes,
        direct,
        dsync: writes && params.cache == CacheMode::Dsync,
    };
    let prepare = if params.reads() && !writes || params.workload == WorkloadKind::Mixed {
        Preparation::Fill
    } else {
        Preparation::Preallocate
    };
    let target = Target::open(
        &params.target,
        mode,
        params.size_bytes,
        prepare,
        params.allow_write_device,
        params.keep,
    )?;
    let region_bytes = target.size_bytes / params.block_bytes * params.block_bytes;
    // One aligned read of the first block tells `auto` whether io_uring can drive this target
    // inline; 4 KiB suits O_DIRECT on every device whose logical block is 4 KiB or less.
    let probe_len = if params.block_bytes % 4096 == 0 {
        4096
    } else {
        params.block_bytes
    };
    let (engine, engine_reason) =
        selected.for_target(target.fd(), usize::try_from(probe_len).unwrap_or(4096), 0);
    let mut cache_drop = None;
    if params.reads() && !direct && params.verify_phase != VerifyPhase::Write {
        cache_drop = Some(target.drop_cache());
    }
    let runtime = params.runtime_ms.map(Duration::from_millis);
    let mut measured = Measured::new();
    let mut flush_ns = None;
    let mut curve_report = None;
    let mut verify_report = None;
    let mut precision = None;
    let procedure = Procedure {
        params,
        target: &target,
        engine,
        region_bytes,
        direct,
        runtime,
        stop: &options.stop,
    };

    match params.workload {
        WorkloadKind::Verify => {
            let verified = verify::run(&procedure, &mut measured)?;
            flush_ns = verified.flush_ns;
            if verified.cache_drop.is_some() {
                cache_drop = verified.cache_drop;
            }
            verify_report = Some(verified.report);
        }
        WorkloadKind::WriteCurve => {
            curve_report = Some(curve::run(&procedure, &mut measured)?);
        }
        kind => {
            let access = if kind.sequential() {
                Access::Sequential
            } else {
                Access::Random
            };
            let read_percent = match kind {
                WorkloadKind::Mixed => params.read_percent,
                _ if writes => 0,
                _ => 100,
            };
            let s = procedure.spec(plans(params, region_bytes, access, read_percent)?, runtime);
            // A test that writes runs its whole budget: a write cache that is still taking the
            // burst looks steady, and only the rest of the runtime shows it filling.
            let (outcome, points) = run_sampled(
                engine,
                &s,
                Duration::from_millis(PRECISION_WINDOW_MS),
                true,
                params.precision_percent.filter(|_| !writes),
            );
            measured.add(&outcome?);
            precision = Some(Precision::from_progress(&points, PRECISION_WINDOW_MS));
        }
    }

    if writes && params.cache == CacheMode::Fdatasync && params.workload != WorkloadKind::Verify {
        flush_ns = Some(timed_flush(&target)?);
    }

    let wall_ns = measured.elapsed_ns + flush_ns.unwrap_or(0);
    let seconds = wall_ns as f64 / 1e9;
    let mut all = measured.read.clone();
    all.merge(&measured.write);
    let all_figures = OpFigures::from_stats(&all, seconds);
    let figures = |stats: &OpStats| (stats.ios > 0).then(|| OpFigures::from_stats(stats, seconds));
    Ok(BenchResult {
        workload: params.workload,
        engine: engine.kind(),
        engine_reason,
        params: params.clone(),
        target: TargetReport {
            path: target.path.clone(),
            kind: target.kind,
            created: target.created,
            region_bytes,
            queue: target.queue_info(Path::new(&options.sysfs_root)),
        },
        stopped_by: measured.stopped_by,
        bytes: all.bytes,
        ios: all.ios,
        seconds,
        mib_per_s: all_figures.mib_per_s,
        iops: all_figures.iops,
        read: figures(&measured.read),
        write: figures(&measured.write),
        all: all_figures,
        cpu: CpuFigures::new(measured.cpu_usr_ns, measured.cpu_sys_ns, wall_ns, all.ios),
        flush_ns,
        cache_drop,
        curve: curve_report,
        verify: verify_report,
        precision,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device completing 4 KiB I/Os at `times` (ns), sampled on a clock that only naps move.
    struct Scripted {
        times: Vec<u64>,
        clock: std::cell::Cell<u64>,
        naps: std::cell::Cell<u32>,
    }

    impl Scripted {
        fn new(times: Vec<u64>, at: u64) -> Self {
            Scripted {
                times,
                clock: std::cell::Cell::new(at),
                naps: std::cell::Cell::new(0),
            }
        }

        fn settle(&self) -> (u64, u64) {
            settle(
                || {
                    let done: Vec<u64> = self
                        .times
                        .iter()
                        .copied()
                        .filter(|&t| t <= self.clock.get())
                        .collect();
                    (done.len() as u64 * 4096, done.last().copied().unwrap_or(0))
                },
                || self.clock.get(),
                || {
                    self.clock.set(self.clock.get() + 250_000);
                    self.naps.set(self.naps.get() + 1);
                },
                || false,
            )
        }
    }

    /// A throttle's staircase: every 100 ms a burst of 12 I/Os, 0.4 ms apart.
    fn staircase() -> Vec<u64> {
        (0..10u64)
            .flat_map(|k| (0..12u64).map(move |i| k * 100_000_000 + i * 400_000))
            .collect()
    }

    #[test]
    fn a_point_taken_as_a_burst_begins_is_taken_at_its_top() {
        // Sampled at the first completion of the fourth burst: the point waits for the
        // burst's last completion, so it lies on the line through the steps' tops.
        let device = Scripted::new(staircase(), 300_000_000);
        assert_eq!(device.settle(), (4 * 12 * 4096, 300_000_000 + 11 * 400_000));
    }

    #[test]
    fn a_point_taken_between_bursts_is_taken_at_once() {
        let device = Scripted::new(staircase(), 350_000_000);
        assert_eq!(device.settle(), (4 * 12 * 4096, 300_000_000 + 11 * 400_000));
        assert_eq!(device.naps.get(), 0);
    }

    #[test]
    fn a_device_that_never_pauses_gives_its_point_after_the_longest_wait() {
        // A completion every 0.1 ms for a second.
        let device = Scripted::new((1..=10_000u64).map(|i| i * 100_000).collect(), 500_000_000);
        let (bytes, done_ns) = device.settle();
        let waited = device.clock.get() - 500_000_000;
        assert!(
            (SETTLE_MAX_NS..SETTLE_MAX_NS + 1_000_000).contains(&waited),
            "waited {waited} ns"
        );
        assert_eq!(done_ns, device.clock.get() / 100_000 * 100_000);
        assert_eq!(bytes, done_ns / 100_000 * 4096);
    }

    #[test]
    fn every_workload_is_judged_by_a_metric_of_the_table() {
        for w in [
            WorkloadKind::ReadBuffered,
            WorkloadKind::SeqWrite,
            WorkloadKind::SeqRead,
            WorkloadKind::RandRead,
            WorkloadKind::RandWrite,
            WorkloadKind::Mixed,
            WorkloadKind::WriteCurve,
            WorkloadKind::Verify,
        ] {
            assert!(
                crate::metric::ALL.iter().any(|m| m.of_workload(w.as_str())),
                "{} is judged by no metric",
                w.as_str()
            );
        }
    }

    #[test]
    fn sequential_jobs_get_disjoint_slices() {
        let mut p = WorkloadParams::defaults(WorkloadKind::SeqRead, "x".into());
        p.jobs = 3;
        let plans = plans(&p, 10 << 20, Access::Sequential, 100).unwrap();
        assert_eq!(plans.len(), 3);
        assert_eq!(plans[1].region_offset_bytes, 3 << 20);
        assert!(plans.iter().all(|j| j.io_limit == Some(3)));
    }

    #[test]
    fn random_jobs_split_the_io_count() {
        let p = WorkloadParams::defaults(WorkloadKind::RandRead, "x".into());
        let plans = plans(&p, 4096 * 10, Access::Random, 100).unwrap();
        let limits: Vec<_> = plans.iter().map(|j| j.io_limit.unwrap()).collect();
        assert_eq!(limits, vec![3, 3, 2, 2]);
        assert!(plans.iter().all(|j| j.region_bytes == 4096 * 10));
    }

    #[test]
    fn direct_io_needs_sector_multiples() {
        let mut p = WorkloadParams::defaults(WorkloadKind::RandRead, "x".into());
        p.block_bytes = 1000;
        assert!(matches!(validate(&p), Err(WorkloadError::Alignment(1000))));
        p.cache = CacheMode::Buffered;
        assert!(validate(&p).is_ok());
    }

    #[test]
    fn defaults_follow_the_seeds() {
        let p = WorkloadParams::defaults(WorkloadKind::RandRead, "x".into());
        assert_eq!((p.block_bytes, p.queue_depth, p.jobs), (4096, 16, 4));
        let m = WorkloadParams::defaults(WorkloadKind::Mixed, "x".into());
        assert_eq!(m.read_percent, 70);
        assert!(m.writes() && m.reads());
        let s = WorkloadParams::defaults(WorkloadKind::SeqWrite, "x".into());
        assert_eq!(s.block_bytes, 1 << 20);
        assert!(!s.reads());
    }

    #[test]
    fn a_block_larger_than_the_clamped_region_shrinks_to_fit() {
        use WorkloadKind::*;
        const M: u64 = 1 << 20;
        // (workload, jobs, block, size, block after, replaced)
        type Case = (WorkloadKind, u32, u64, Option<u64>, u64, Option<u64>);
        let cases: &[Case] = &[
            // a 1 MiB eMMC boot partition under read-buffered's 2 MiB reads
            (ReadBuffered, 1, 2 * M, Some(M), M, Some(2 * M)),
            (ReadBuffered, 1, 2 * M, Some(4 * M), 2 * M, None),
            (ReadBuffered, 1, 2 * M, None, 2 * M, None),
            // two sequential jobs each need a block of their own
            (SeqRead, 2, M, Some(M), M / 2, Some(M)),
            // random jobs share the region
            (
                RandRead,
                4,
                64 * 1024,
                Some(40 * 1024),
                40 * 1024,
                Some(64 * 1024),
            ),
            // rounded down to 4 KiB, 512 B below that
            (SeqRead, 1, M, Some(10_000), 8192, Some(M)),
            (SeqRead, 1, 4096, Some(3000), 2560, Some(4096)),
            // nothing fits: the size check reports it
            (SeqRead, 1, 4096, Some(100), 4096, None),
        ];
        for &(w, jobs, bs, size, want_bs, want_old) in cases {
            let mut p = WorkloadParams::defaults(w, "x".into());
            (p.jobs, p.block_bytes, p.size_bytes) = (jobs, bs, size);
            assert_eq!(fit_block_to_size(&mut p), want_old, "{w:?} {bs} {size:?}");
            assert_eq!(p.block_bytes, want_bs, "{w:?} {bs} {size:?}");
            if want_old.is_some() {
                assert!(check_params(&p).is_ok(), "{w:?}: {:?}", check_params(&p));
            }
        }
    }
}
