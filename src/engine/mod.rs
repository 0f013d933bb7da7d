//! Owns the I/O engines: the `Engine` trait, the plan every job follows (which offsets, which
//! operations, when to stop), engine selection with its run-time io_uring probe, and the run
//! driver that starts one thread per job, merges their histograms and measures CPU time.

mod buffer;
mod driver;
pub mod nowait;
mod null;
mod sync;
#[cfg(feature = "uring")]
mod uring;
#[cfg(not(feature = "uring"))]
#[path = "disabled.rs"]
mod uring;

pub use buffer::AlignedBuffer;

use std::fmt;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The engines, by the name `--engine` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum EngineKind {
    /// io_uring: one ring per job, queue kept full, registered buffers and files.
    Uring,
    /// A pread/pwrite thread pool: one thread per in-flight I/O.
    Sync,
    /// No I/O at all: measures the engine's own cost.
    Null,
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EngineKind::Uring => "uring",
            EngineKind::Sync => "sync",
            EngineKind::Null => "null",
        })
    }
}

/// What the user asked for: a named engine, or `auto` (io_uring when the kernel lets us,
/// the thread pool otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum EngineRequest {
    Auto,
    Uring,
    Sync,
    Null,
}

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpKind {
    Read,
    Write,
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
        })
    }
}

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// Every job did all the I/O its size bound allows.
    Size,
    /// The time bound was reached (in-flight I/O was still drained and counted).
    Time,
    /// Someone asked us to stop (SIGINT, SIGTERM, another job's error).
    Interrupted,
    /// The figure was known to its precision target before the time bound (the workload
    /// layer's verdict on a run the engine stopped as at its time bound).
    Known,
}

/// Which blocks a job touches, in which order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// Block after block from the region start, wrapping at its end.
    Sequential,
    /// Uniform over the aligned blocks of the region, from a seeded counter-based generator.
    Random,
    /// `points` blocks spread evenly over the whole region (fake-capacity probes).
    Spread { points: u64 },
}

/// One job's I/O plan. The N-th I/O of a job is a pure function of the plan and N, so every
/// engine issues the same I/O for the same plan (the `sync` and `uring` byte counts agree).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPlan {
    pub access: Access,
    /// 100 = reads only, 0 = writes only, otherwise the share (in %) of reads: exactly that
    /// many in every 100 I/Os of a job, in a seeded order (see [`JobPlan::is_read`]).
    pub read_percent: u8,
    pub block_bytes: usize,
    pub region_offset_bytes: u64,
    pub region_bytes: u64,
    pub queue_depth: usize,
    /// The number of I/Os this job may issue; `None` runs until the time bound.
    pub io_limit: Option<u64>,
    pub seed: u64,
}

/// splitmix64's finaliser: a fast, well-mixed hash; indexed by I/O number it is a
/// counter-based generator, so no generator state is shared between threads.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl JobPlan {
    /// The number of whole blocks in the region (the tail smaller than a block is not touched).
    pub fn region_blocks(&self) -> u64 {
        self.region_bytes / self.block_bytes as u64
    }

    /// The operation and byte offset of this job's I/O number `index`.
    #[inline]
    pub fn io_at(&self, index: u64) -> (OpKind, u64) {
        let blocks = self.region_blocks().max(1);
        let block = match self.access {
            Access::Sequential => index % blocks,
            Access::Random => {
                // Multiply-high maps the hash onto [0, blocks) without a division.
                let h = mix64(self.seed ^ index.wrapping_mul(0xD6E8_FEB8_6659_FD93));
                ((h as u128 * blocks as u128) >> 64) as u64
            }
            Access::Spread { points } => {
                let points = points.clamp(1, blocks);
                ((index % points) as u128 * blocks as u128 / points as u128) as u64
            }
        };
        let op = if self.is_read(index) {
            OpKind::Read
        } else {
            OpKind::Write
        };
        (
            op,
            self.region_offset_bytes + block * self.block_bytes as u64,
        )
    }

    /// Whether I/O number `index` reads. A mix is dealt, not drawn: each run of 100 I/Os holds
    /// exactly `read_percent` reads, in an order shuffled per run (a seeded permutation of
    /// 0..100). Drawing each I/O's direction (as fio's `rwmixread` does) makes the write share
    /// itself random, and on a device whose writes are the slow side the mix's IOPS is that
    /// share's inverse: 2,000 I/Os at 70/30 vary it by 3.4 % (one sigma) from run to run, a
    /// spread that belongs to the tool, not the device.
    #[inline]
    pub fn is_read(&self, index: u64) -> bool {
        match self.read_percent {
            100.. => true,
            0 => false,
            pct => {
                let key = mix64(self.seed.rotate_left(17) ^ (index / 100));
                permute_hundred(index % 100, key) < u64::from(pct)
            }
        }
    }
}

/// A keyed permutation of 0..100: rounds of bijections of 7-bit numbers (an odd multiplier
/// and an added key, an xorshift), walked until the value falls back into 0..100 (a cycle of
/// the permutation of 0..128 through `x` returns to 0..100, so the walk ends). Unlike an
/// affine map of 0..100, it leaves no long runs of one direction: a job whose reads all came
/// in one stretch would take its threads out of the write queue together.
fn permute_hundred(x: u64, key: u64) -> u64 {
    let round = |mut v: u64, k: u64| {
        v = (v.wrapping_mul(k | 1).wrapping_add(k >> 8)) & 127;
        v ^= v >> 3;
        v ^ ((v << 2) & 127)
    };
    let mut v = x;
    loop {
        v = round(round(round(v, key), key >> 16), key >> 32);
        if v < 100 {
            return v;
        }
    }
}

/// Lets a workload put content into each block before it is written and check each block after
/// it is read (the `verify` workload); performance runs pass none and pay nothing.
pub trait DataHook: Send + Sync {
    fn fill(&self, offset: u64, buf: &mut [u8]);
    fn check(&self, offset: u64, buf: &[u8]);
}

/// One job's progress on its own cache line, so sampling it costs the jobs no shared-line
/// traffic: the bytes completed and when the last of them completed ([`now_ns`]).
#[repr(align(64))]
#[derive(Debug, Default)]
pub struct JobProgress {
    bytes: AtomicU64,
    done_ns: AtomicU64,
}

impl JobProgress {
    /// The job's only writer: `bytes` in all, the last completed at `done_ns`. Relaxed, as
    /// the sampler reads them: a snapshot one completion apart from its time moves one window's
    /// rate by one I/O, which the batching of the windows absorbs, and no fence is added to the
    /// lane's loop on ARM.
    #[inline]
    pub fn set(&self, bytes: u64, done_ns: u64) {
        self.bytes.store(bytes, Ordering::Relaxed);
        self.done_ns.store(done_ns, Ordering::Relaxed);
    }

    /// One of several lanes: `bytes` more, the last completed at `done_ns`.
    #[inline]
    pub fn add(&self, bytes: u64, done_ns: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.done_ns.fetch_max(done_ns, Ordering::Relaxed);
    }
}

/// Bytes completed so far, per job; read by samplers while the run goes on.
#[derive(Debug)]
pub struct Progress {
    jobs: Vec<JobProgress>,
}

impl Progress {
    pub fn new(jobs: usize) -> Self {
        Progress {
            jobs: (0..jobs).map(|_| JobProgress::default()).collect(),
        }
    }

    pub fn total_bytes(&self) -> u64 {
        self.jobs
            .iter()
            .map(|c| c.bytes.load(Ordering::Relaxed))
            .sum()
    }

    /// The bytes completed and when the last of them completed ([`now_ns`]; 0 before any):
    /// a rate between two snapshots counts whole I/Os over the time they took, so a window
    /// that holds a few large I/Os is not off by one I/O's worth of the grid it was taken on.
    pub fn snapshot(&self) -> (u64, u64) {
        let done_ns = self
            .jobs
            .iter()
            .map(|c| c.done_ns.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        (self.total_bytes(), done_ns)
    }

    fn job(&self, index: usize) -> &JobProgress {
        &self.jobs[index]
    }
}

/// Everything a run needs besides the engine.
pub struct RunSpec {
    pub fd: RawFd,
    /// The target was opened with O_DIRECT (used to explain EINVAL as an alignment problem).
    pub direct: bool,
    pub jobs: Vec<JobPlan>,
    pub runtime: Option<Duration>,
    pub data: Option<Arc<dyn DataHook>>,
    pub progress: Arc<Progress>,
    pub stop: Arc<AtomicBool>,
    /// Set by the caller when the figure is known well enough: the run stops as at its time
    /// bound (in-flight I/O drained and counted), not as an interruption.
    pub known: Arc<AtomicBool>,
}

/// What one job sees.
pub struct JobCtx<'a> {
    pub fd: RawFd,
    pub direct: bool,
    pub plan: &'a JobPlan,
    pub deadline_ns: Option<u64>,
    pub data: Option<&'a dyn DataHook>,
    pub progress: &'a JobProgress,
    /// The caller's stop request (SIGINT/SIGTERM); the engine only reads it.
    pub stop: &'a AtomicBool,
    /// The caller's "known well enough" ([`RunSpec::known`]).
    pub known: &'a AtomicBool,
    /// Set by this run when one of its jobs fails, so the others stop too. Kept apart from
    /// `stop`: a job's I/O error must not look like an interruption to the caller.
    pub abort: &'a AtomicBool,
}

impl JobCtx<'_> {
    /// Whether the job should stop early (asked by the caller, or another job failed).
    #[inline]
    pub fn should_stop(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.abort.load(Ordering::Relaxed)
    }

    /// The error for a failed or short I/O, with a hint when O_DIRECT alignment is the cause.
    fn io_error(&self, op: OpKind, offset: u64, errno: i32) -> EngineError {
        let hint = if errno == libc::EINVAL && self.direct {
            " (EINVAL under O_DIRECT: the offset, the length and the buffer must be aligned to the \
             device's logical block size; use a --bs that is a multiple of 4096, or --cache \
             fdatasync for buffered I/O)"
                .to_string()
        } else {
            String::new()
        };
        EngineError::Io {
            op,
            offset,
            len: self.plan.block_bytes,
            source: std::io::Error::from_raw_os_error(errno),
            hint,
        }
    }
}

/// One latency histogram in ns, with the counters it summarises.
#[derive(Debug, Clone)]
pub struct OpStats {
    pub ios: u64,
    pub bytes: u64,
    pub latency_ns: Histogram<u64>,
}

/// Histograms cover 1 ns to 1 hour at 3 significant digits (the largest stall we report).
const HIST_HIGH_NS: u64 = 3_600_000_000_000;

impl OpStats {
    pub fn new() -> Self {
        OpStats {
            ios: 0,
            bytes: 0,
            latency_ns: Histogram::new_with_bounds(1, HIST_HIGH_NS, 3)
                .expect("static histogram bounds are valid"),
        }
    }

    #[inline]
    pub fn record(&mut self, bytes: u64, latency_ns: u64) {
        self.ios += 1;
        self.bytes += bytes;
        self.latency_ns.saturating_record(latency_ns);
    }

    pub fn merge(&mut self, other: &OpStats) {
        self.ios += other.ios;
        self.bytes += other.bytes;
        // Same bounds on both sides: addition cannot fail.
        let _ = self.latency_ns.add(&other.latency_ns);
    }
}

impl Default for OpStats {
    fn default() -> Self {
        Self::new()
    }
}

/// One job's counters and why it stopped.
#[derive(Debug, Clone)]
pub struct JobStats {
    pub read: OpStats,
    pub write: OpStats,
    pub stopped_by: StopReason,
    /// I/Os the kernel completed with -EAGAIN and the engine submitted again (never an error).
    pub eagain_retries: u64,
    /// CPU of the threads that ran the job (the job's own, and a pool's such as the `sync`
    /// engine's), in ns; kernel workers (io_uring's io-wq) are not counted.
    pub cpu_usr_ns: u64,
    pub cpu_sys_ns: u64,
}

impl JobStats {
    pub fn new() -> Self {
        JobStats {
            read: OpStats::new(),
            write: OpStats::new(),
            stopped_by: StopReason::Size,
            eagain_retries: 0,
            cpu_usr_ns: 0,
            cpu_sys_ns: 0,
        }
    }

    /// Adds the CPU the calling thread used since `since`, a [`thread_cpu_ns`] sample.
    pub(crate) fn add_thread_cpu(&mut self, since: (u64, u64)) {
        let (usr, sys) = thread_cpu_ns();
        self.cpu_usr_ns += usr.saturating_sub(since.0);
        self.cpu_sys_ns += sys.saturating_sub(since.1);
    }

    /// Adds another job's (or lane's) counters and CPU, and merges why they stopped.
    pub fn merge(&mut self, other: &JobStats) {
        self.read.merge(&other.read);
        self.write.merge(&other.write);
        self.stopped_by = self.stopped_by.merge(other.stopped_by);
        self.eagain_retries += other.eagain_retries;
        self.cpu_usr_ns += other.cpu_usr_ns;
        self.cpu_sys_ns += other.cpu_sys_ns;
    }

    #[inline]
    fn record(&mut self, op: OpKind, bytes: u64, latency_ns: u64) {
        match op {
            OpKind::Read => self.read.record(bytes, latency_ns),
            OpKind::Write => self.write.record(bytes, latency_ns),
        }
    }

    fn bytes(&self) -> u64 {
        self.read.bytes + self.write.bytes
    }
}

impl Default for JobStats {
    fn default() -> Self {
        Self::new()
    }
}

/// A whole run: merged counters, wall time, CPU time.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub engine: EngineKind,
    pub read: OpStats,
    pub write: OpStats,
    pub elapsed_ns: u64,
    pub cpu_usr_ns: u64,
    pub cpu_sys_ns: u64,
    pub stopped_by: StopReason,
    /// -EAGAIN completions submitted again (see the uring engine).
    pub eagain_retries: u64,
}

/// Engine failures; each message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("io_uring is not usable here: {reason}; use --engine sync, or --engine auto to fall back to it")]
    UringUnavailable { reason: String },
    #[error("{op} of {len} bytes at offset {offset} failed: {source}{hint}")]
    Io {
        op: OpKind,
        offset: u64,
        len: usize,
        source: std::io::Error,
        hint: String,
    },
    #[error("{op} at offset {offset} returned 0 bytes: the target ends before the region does; give a smaller --size")]
    UnexpectedEof { op: OpKind, offset: u64 },
    #[error("{what} failed: {source}; check memory limits (ulimit -l) and that the target is still present")]
    Setup {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("the plan is unusable: {0}")]
    BadPlan(String),
    #[error("an engine thread panicked; this is a bug, please report it with the command line")]
    Panicked,
}

impl crate::exit::Classify for EngineError {
    /// A plan no engine can run is the command line's; everything else is the engine's or the
    /// device's (io_uring refused by this kernel included: the documented exit 4, with the
    /// `--engine sync` fix in its words).
    fn exit(&self) -> crate::exit::Exit {
        use crate::exit::Exit::{Error, Usage};
        match self {
            EngineError::BadPlan(_) => Usage,
            EngineError::UringUnavailable { .. }
            | EngineError::Io { .. }
            | EngineError::UnexpectedEof { .. }
            | EngineError::Setup { .. }
            | EngineError::Panicked => Error,
        }
    }
}

/// The engine interface: run one job to its bound, drain everything in flight, return counters.
/// Every engine runs its jobs through the one loop of [`driver`]; an engine itself only queues,
/// commits and reaps I/O.
pub trait Engine: Send + Sync {
    fn kind(&self) -> EngineKind;
    fn run_job(&self, ctx: &JobCtx<'_>) -> Result<JobStats, EngineError>;
}

impl<E: driver::IoEngine> Engine for E {
    fn kind(&self) -> EngineKind {
        self.engine_kind()
    }

    fn run_job(&self, ctx: &JobCtx<'_>) -> Result<JobStats, EngineError> {
        driver::run_job(self, ctx)
    }
}

/// The engine that will run, and the one line that says why it was chosen.
pub struct Selected {
    pub engine: Box<dyn Engine>,
    pub reason: String,
    /// `auto` chose io_uring: each target may still get the thread pool (see `for_target`).
    adaptive: bool,
}

/// The thread pool `auto` uses for targets io_uring cannot drive inline.
static SYNC_FOR_BLOCKING_TARGETS: sync::SyncEngine = sync::SyncEngine;

impl Selected {
    /// The engine for one open target, and why. An explicitly named engine is always used as
    /// asked. `auto` keeps io_uring unless the target refuses non-blocking I/O (zram, vfat):
    /// then io_uring would hand every I/O to an io-wq worker thread that blocks for it, and
    /// our own thread pool does the same blocking calls without the two hand-offs (measured on
    /// zram: 1.55-1.60x the random 4k read IOPS of fio on io_uring, on a par with fio's psync
    /// threads, docs/benchmarks.md).
    /// `probe_len` and `probe_offset` describe one harmless aligned read of the target.
    pub fn for_target(
        &self,
        fd: RawFd,
        probe_len: usize,
        probe_offset: u64,
    ) -> (&dyn Engine, String) {
        if !self.adaptive {
            return (self.engine.as_ref(), self.reason.clone());
        }
        match nowait::probe(fd, probe_len, probe_offset) {
            nowait::Nowait::Unsupported => (
                &SYNC_FOR_BLOCKING_TARGETS,
                "sync engine (auto): the target refuses non-blocking I/O (preadv2 RWF_NOWAIT: \
                 EOPNOTSUPP, as on zram or vfat), so io_uring would hand every I/O to a kernel \
                 worker thread; one thread per in-flight I/O makes the same blocking calls \
                 without the hand-offs"
                    .to_string(),
            ),
            nowait::Nowait::Supported => (self.engine.as_ref(), self.reason.clone()),
            nowait::Nowait::Unknown(why) => (
                self.engine.as_ref(),
                format!("{} (non-blocking I/O support unknown: {why})", self.reason),
            ),
        }
    }
}

/// Picks the engine. `auto` probes io_uring at run time (ENOSYS, EPERM, `io_uring_disabled`,
/// seccomp, missing opcodes) and falls back to the thread pool, saying why; an explicit
/// `uring` that cannot run is an error instead, since the user asked for it by name.
pub fn select(request: EngineRequest) -> Result<Selected, EngineError> {
    match request {
        EngineRequest::Null => Ok(Selected {
            engine: Box::new(null::NullEngine),
            reason: "null engine requested: no I/O is done, figures show the engine's own cost"
                .to_string(),
            adaptive: false,
        }),
        EngineRequest::Sync => Ok(Selected {
            engine: Box::new(sync::SyncEngine),
            reason: "sync engine requested: pread/pwrite, one thread per in-flight I/O".to_string(),
            adaptive: false,
        }),
        EngineRequest::Uring => {
            let engine = uring::UringEngine::probe()?;
            let reason = format!("uring engine requested: {}", engine.describe());
            Ok(Selected {
                engine: Box::new(engine),
                reason,
                adaptive: false,
            })
        }
        EngineRequest::Auto => match uring::UringEngine::probe() {
            Ok(engine) => {
                let reason = format!("uring engine (auto): {}", engine.describe());
                Ok(Selected {
                    engine: Box::new(engine),
                    reason,
                    adaptive: true,
                })
            }
            Err(e) => {
                let why = match e {
                    EngineError::UringUnavailable { reason } => reason,
                    other => other.to_string(),
                };
                Ok(Selected {
                    engine: Box::new(sync::SyncEngine),
                    reason: format!("sync engine (auto fallback, io_uring unavailable: {why})"),
                    adaptive: false,
                })
            }
        },
    }
}

/// Reads the monotonic clock in ns (vDSO: no system call).
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// User and system CPU time of the calling thread so far, in ns. A run's CPU figures are the
/// sum over the threads that ran its jobs (`getrusage(RUSAGE_THREAD)` per thread, as fio
/// counts per job): the process's own total would also count the cells of other devices
/// running beside it.
pub fn thread_cpu_ns() -> (u64, u64) {
    // SAFETY: zeroed rusage is a valid out-parameter for getrusage.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_THREAD (Linux 2.6.26) with a valid pointer cannot fail.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    let ns = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000;
    (ns(usage.ru_utime), ns(usage.ru_stime))
}

/// Runs every job of `spec` on its own thread with `engine`, and merges the results.
pub fn run(engine: &dyn Engine, spec: &RunSpec) -> Result<RunOutcome, EngineError> {
    if spec.jobs.is_empty() {
        return Err(EngineError::BadPlan(
            "no jobs: give --jobs 1 or more".into(),
        ));
    }
    for plan in &spec.jobs {
        if plan.block_bytes == 0 || plan.queue_depth == 0 {
            return Err(EngineError::BadPlan(
                "block size and queue depth must be at least 1".into(),
            ));
        }
        if plan.region_blocks() == 0 {
            return Err(EngineError::BadPlan(format!(
                "the region ({} bytes) is smaller than one block ({} bytes): give a larger --size or a smaller --bs",
                plan.region_bytes, plan.block_bytes
            )));
        }
    }
    let start_ns = now_ns();
    let deadline_ns = spec.runtime.map(|d| start_ns + d.as_nanos() as u64);
    let abort = AtomicBool::new(false);
    let results: Vec<Result<JobStats, EngineError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = spec
            .jobs
            .iter()
            .enumerate()
            .map(|(index, plan)| {
                let ctx = JobCtx {
                    fd: spec.fd,
                    direct: spec.direct,
                    plan,
                    deadline_ns,
                    data: spec.data.as_deref(),
                    progress: spec.progress.job(index),
                    stop: &spec.stop,
                    known: &spec.known,
                    abort: &abort,
                };
                std::thread::Builder::new()
                    .name(format!("usbperf-job{index}"))
                    .spawn_scoped(scope, move || {
                        let cpu0 = thread_cpu_ns();
                        let result = engine.run_job(&ctx);
                        if result.is_err() {
                            // One failed job stops the others: their figures would be partial.
                            ctx.abort.store(true, Ordering::Relaxed);
                        }
                        result.map(|mut job| {
                            job.add_thread_cpu(cpu0);
                            job
                        })
                    })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(handle) => handle.join().unwrap_or(Err(EngineError::Panicked)),
                Err(e) => Err(EngineError::Setup {
                    what: "starting a job thread",
                    source: e,
                }),
            })
            .collect()
    });
    let elapsed_ns = now_ns() - start_ns;
    let mut total = JobStats::new();
    for result in results {
        total.merge(&result?);
    }
    Ok(RunOutcome {
        engine: engine.kind(),
        read: total.read,
        write: total.write,
        elapsed_ns,
        cpu_usr_ns: total.cpu_usr_ns,
        cpu_sys_ns: total.cpu_sys_ns,
        stopped_by: total.stopped_by,
        eagain_retries: total.eagain_retries,
    })
}

/// Fills a write buffer once with incompressible bytes, so compressing media (zram, some SSD
/// controllers) cannot flatter the figures, as fio does by default.
pub(crate) fn fill_random(buf: &mut [u8], seed: u64) {
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let word = mix64(seed ^ (i as u64).wrapping_mul(0x2545_F491_4F6C_DD1D)).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(access: Access, read_percent: u8) -> JobPlan {
        JobPlan {
            access,
            read_percent,
            block_bytes: 4096,
            region_offset_bytes: 8192,
            region_bytes: 4096 * 1000,
            queue_depth: 4,
            io_limit: Some(1000),
            seed: 42,
        }
    }

    #[test]
    fn sequential_wraps_at_region_end() {
        let p = plan(Access::Sequential, 100);
        assert_eq!(p.io_at(0), (OpKind::Read, 8192));
        assert_eq!(p.io_at(1), (OpKind::Read, 8192 + 4096));
        assert_eq!(p.io_at(1000), (OpKind::Read, 8192));
    }

    #[test]
    fn random_offsets_are_aligned_inside_and_spread() {
        let p = plan(Access::Random, 0);
        let mut seen = std::collections::HashSet::new();
        for i in 0..10_000 {
            let (op, off) = p.io_at(i);
            assert_eq!(op, OpKind::Write);
            assert_eq!((off - 8192) % 4096, 0);
            assert!((8192..8192 + 4096 * 1000).contains(&off));
            seen.insert(off);
        }
        // 10000 uniform draws over 1000 blocks leave (almost surely) none untouched.
        assert!(seen.len() > 990, "{}", seen.len());
    }

    #[test]
    fn a_mix_is_dealt_exactly_per_hundred_ios_in_a_varying_order() {
        for pct in [1u8, 30, 50, 70, 99] {
            let p = plan(Access::Random, pct);
            for run in 0..50u64 {
                let reads = (run * 100..run * 100 + 100)
                    .filter(|&i| p.io_at(i).0 == OpKind::Read)
                    .count();
                assert_eq!(reads, usize::from(pct), "{pct} % run {run}");
            }
        }
        // Each block's order is a permutation of 0..100.
        for key in [0u64, 1, 0xDEAD_BEEF, u64::MAX, mix64(7)] {
            let mut seen: Vec<u64> = (0..100).map(|x| permute_hundred(x, key)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..100).collect::<Vec<_>>(), "key {key:#x}");
        }
        // No long stretches of one direction: 70 reads in a row (an affine map's a = 1) would
        // take a job's threads out of the write queue together. Drawn at random, the longest
        // run of reads in 100 I/Os at 70 % is about 12 on average.
        let p = plan(Access::Random, 70);
        let longest: Vec<usize> = (0..200u64)
            .map(|run| {
                let (mut best, mut cur) = (0, 0);
                for i in run * 100..run * 100 + 100 {
                    cur = if p.is_read(i) { cur + 1 } else { 0 };
                    best = best.max(cur);
                }
                best
            })
            .collect();
        let mean = longest.iter().sum::<usize>() as f64 / longest.len() as f64;
        assert!(mean < 20.0, "mean longest run of reads {mean}");
        // The order is not one pattern repeated: runs of 100 differ from the first.
        let p = plan(Access::Random, 70);
        let pattern = |run: u64| -> Vec<bool> {
            (run * 100..run * 100 + 100).map(|i| p.is_read(i)).collect()
        };
        let first = pattern(0);
        let differing = (1..50).filter(|&run| pattern(run) != first).count();
        assert!(
            differing >= 45,
            "{differing} of 49 runs differ from the first"
        );
    }

    #[test]
    fn spread_covers_start_and_end() {
        let p = plan(Access::Spread { points: 10 }, 100);
        let offsets: Vec<u64> = (0..10).map(|i| p.io_at(i).1).collect();
        assert_eq!(offsets[0], 8192);
        assert_eq!(offsets[9], 8192 + 900 * 4096);
        assert!(offsets.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn null_engine_obeys_the_size_bound() {
        let selected = select(EngineRequest::Null).unwrap();
        let spec = RunSpec {
            fd: -1,
            direct: false,
            jobs: vec![plan(Access::Random, 50), plan(Access::Random, 50)],
            runtime: None,
            data: None,
            progress: Arc::new(Progress::new(2)),
            stop: Arc::new(AtomicBool::new(false)),
            known: Arc::default(),
        };
        let out = run(selected.engine.as_ref(), &spec).unwrap();
        assert_eq!(out.read.ios + out.write.ios, 2000);
        assert_eq!(out.read.bytes + out.write.bytes, 2000 * 4096);
        assert_eq!(out.stopped_by, StopReason::Size);
        assert_eq!(spec.progress.total_bytes(), 2000 * 4096);
    }

    #[test]
    fn null_engine_stops_at_the_time_bound() {
        let selected = select(EngineRequest::Null).unwrap();
        let mut p = plan(Access::Random, 100);
        p.io_limit = Some(u64::MAX);
        let spec = RunSpec {
            fd: -1,
            direct: false,
            jobs: vec![p],
            runtime: Some(Duration::from_millis(50)),
            data: None,
            progress: Arc::new(Progress::new(1)),
            stop: Arc::new(AtomicBool::new(false)),
            known: Arc::default(),
        };
        let out = run(selected.engine.as_ref(), &spec).unwrap();
        assert_eq!(out.stopped_by, StopReason::Time);
        assert!(out.read.ios > 0 && out.read.ios < u64::MAX);
    }

    #[test]
    fn empty_region_is_a_plan_error() {
        let selected = select(EngineRequest::Null).unwrap();
        let mut p = plan(Access::Random, 100);
        p.region_bytes = 100;
        let spec = RunSpec {
            fd: -1,
            direct: false,
            jobs: vec![p],
            runtime: None,
            data: None,
            progress: Arc::new(Progress::new(1)),
            stop: Arc::new(AtomicBool::new(false)),
            known: Arc::default(),
        };
        let err = run(selected.engine.as_ref(), &spec).unwrap_err();
        assert!(err.to_string().contains("smaller than one block"), "{err}");
    }
}
