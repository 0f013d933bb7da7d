//! Owns what the factory run reads and touches of the machine, as values: the sysfs tree, the
//! kernel log, the mount and swap tables, the clock, the I/O engine, the stop flag and where
//! progress lines go. `cli::run` fills them from the live machine; tests fill them with a
//! recorded sysfs tree, recorded kernel lines, a stepped clock and the null engine, so the
//! run's rules are tested without root (as hyperfine's scheduler is driven by a mock
//! executor).

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::schedule::CpuTicks;
use crate::discover::{Backend, SysfsRoot};
use crate::engine;
use crate::events::{EventsError, KmsgRecord, KmsgWatcher};
use crate::safety::signals::StopFlag;
use crate::safety::SystemFacts;
use crate::workload::{self, BenchResult, RunOptions, WorkloadError, WorkloadParams};

/// The kernel's message log, drained around every cell.
pub trait KernelLog: Send {
    /// The records logged since the previous drain.
    fn drain(&mut self) -> Result<Vec<KmsgRecord>, EventsError>;
}

impl KernelLog for KmsgWatcher {
    fn drain(&mut self) -> Result<Vec<KmsgRecord>, EventsError> {
        KmsgWatcher::drain(self)
    }
}

/// The mount table and swap list, read afresh when asked: devices that appear while the run
/// waits for them may be mounted by then.
pub trait SystemSource: Sync {
    fn facts(&self) -> SystemFacts;
    /// The machine's CPU time so far (`/proc/stat`), for the schedule's machine rule; `None`
    /// where it cannot be read (then that rule never applies).
    fn cpu_ticks(&self) -> Option<CpuTicks> {
        None
    }
}

/// This machine's `/proc/self/mountinfo` and `/proc/swaps`.
pub struct LiveSystem;

impl SystemSource for LiveSystem {
    fn facts(&self) -> SystemFacts {
        SystemFacts::live()
    }
    fn cpu_ticks(&self) -> Option<CpuTicks> {
        CpuTicks::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }
}

/// Facts fixed once (a test's recorded mount table).
impl SystemSource for SystemFacts {
    fn facts(&self) -> SystemFacts {
        self.clone()
    }
}

/// Wall time for the report, monotonic time for durations and deadlines, and waiting.
pub trait Clock: Sync {
    fn now(&self) -> DateTime<Utc>;
    /// Monotonic time since the clock was made.
    fn elapsed(&self) -> Duration;
    fn sleep(&self, d: Duration);
}

/// The system's clocks.
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
    fn elapsed(&self) -> Duration {
        self.origin.elapsed()
    }
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }
}

/// What runs one cell's workload.
pub trait CellEngine: Sync {
    /// One line saying which engine runs and why (logged; a fallback is kept in the report's
    /// warnings).
    fn reason(&self) -> &str;
    /// Whether the raw device can be opened for reading (`read-buffered` of a file
    /// placement reads the raw device; a container or VM may guard it).
    fn open_raw_for_read(&self, dev: &Path) -> io::Result<()>;
    fn run(
        &self,
        params: &WorkloadParams,
        options: &RunOptions,
    ) -> Result<BenchResult, WorkloadError>;
}

/// The engine chosen for this machine (`engine::select`), on the real targets.
pub struct LiveEngine {
    selected: engine::Selected,
}

impl LiveEngine {
    pub fn new(selected: engine::Selected) -> LiveEngine {
        LiveEngine { selected }
    }
}

impl CellEngine for LiveEngine {
    fn reason(&self) -> &str {
        &self.selected.reason
    }
    fn open_raw_for_read(&self, dev: &Path) -> io::Result<()> {
        std::fs::File::open(dev).map(drop)
    }
    fn run(
        &self,
        params: &WorkloadParams,
        options: &RunOptions,
    ) -> Result<BenchResult, WorkloadError> {
        workload::run(params, &self.selected, options)
    }
}

/// Where the run says what it is doing: lines for the log, and a live status where there is
/// a terminal to show one.
pub trait Progress: Sync {
    fn line(&self, msg: &str);
    /// The live status (a spinner's message); nothing by default.
    fn status(&self, _msg: &str) {}
    /// Whether a long test also logs a line every 10 s (no live status to show its figure).
    fn periodic_lines(&self) -> bool {
        true
    }
    /// The run is over: clear any live status.
    fn done(&self) {}
}

/// Everything the run reads of the machine and does to it outside its report.
pub struct Env<'a> {
    pub sysfs: SysfsRoot,
    pub backend: Backend,
    /// The kernel log, or why it cannot be read (a warning in the report says so).
    pub kernel_log: Result<Box<dyn KernelLog + 'a>, String>,
    pub system: &'a dyn SystemSource,
    pub clock: &'a dyn Clock,
    pub engine: &'a dyn CellEngine,
    pub stop: StopFlag,
    pub progress: &'a dyn Progress,
    /// CPUs the run may use (`std::thread::available_parallelism`): the share the schedule's
    /// measured-CPU rule gives each of the cells running together.
    pub cpus: usize,
}
