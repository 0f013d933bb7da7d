//! The factory run's rules without root: `matrix::run` driven with the
//! recorded sysfs tree of the vm-e2e guest (`tests/fixtures/qemu/x86-e2e.umockdev`: sticks on
//! EHCI 1-1 at 480M, OHCI 2-1 at 12M, xHCI 4-1..4-3, SATA at 1.5 Gbps, an SD card), the kernel
//! lines that guest's kernel logged (`tests/fixtures/kernels/x86_64-6.1.kmsg.txt`), a stepped
//! clock, a fixed mount table and the null engine on a scratch file: no loop device, no real
//! disk is ever opened. Each table row is one rule: a cell's status after an I/O error, a
//! vanished disk, an interrupt; a missing required device, a stale test file, the report
//! directory refused; each threshold and device rule of the verdicts.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use common::{require_tool, tools, validate_reports, TempDir};
use usbperf::config;
use usbperf::discover::{Backend, SysfsRoot};
use usbperf::engine::{EngineError, EngineRequest, OpKind};
use usbperf::events::{parse_record, EventsError, KmsgRecord};
use usbperf::exit::Exit;
use usbperf::matrix::env::{CellEngine, Clock, Env, KernelLog, Progress, SystemSource};
use usbperf::matrix::run::{self, RunOutcome, RunSettings};
use usbperf::matrix::schedule::CpuTicks;
use usbperf::matrix::verdict::{texts, ReasonKind};
use usbperf::report::file::ReportPlace;
use usbperf::report::schema::CellStatus;
use usbperf::report::unit::UnitIdentity;
use usbperf::safety::signals::StopFlag;
use usbperf::safety::SystemFacts;
use usbperf::workload::{
    self, BenchResult, CacheMode, RunOptions, WorkloadError, WorkloadKind, WorkloadParams,
};

/// The recorded tree, unpacked fresh for each test: the run writes `power/control` of the
/// USB devices it tests, and a test removes a disk from it.
struct Tree {
    dir: TempDir,
}

impl Tree {
    fn new() -> Tree {
        require_tool("umockdev-run", "umockdev");
        let dir = TempDir::new("run-rules");
        let out = std::process::Command::new("sh")
            .arg(tools().join("materialize.sh"))
            .arg(common::fixtures().join("qemu/x86-e2e.umockdev"))
            .arg(dir.path().join("tree"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tree { dir }
    }
    fn sys(&self) -> PathBuf {
        self.dir.path().join("tree/sys")
    }
    fn scratch(&self, name: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    }
}

/// Lines of the 6.1 guest's recorded kernel log that contain `pick` (the scenarios of
/// scripts/vm-e2e.sh: blkdebug read errors on sdh at 4-3, the BOT stick at 4-2 unplugged).
fn recorded(pick: &str) -> Vec<String> {
    let text =
        std::fs::read_to_string(common::fixtures().join("kernels/x86_64-6.1.kmsg.txt")).unwrap();
    let v: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(pick))
        .map(str::to_string)
        .collect();
    assert!(!v.is_empty(), "no recorded kernel line has {pick:?}");
    v
}

/// What the fake engine does when a cell of `disk` runs `workload`.
#[derive(Clone)]
enum Act {
    /// The kernel logs these lines while the cell runs; the workload itself completes.
    Log(Vec<String>),
    /// The kernel logs these lines as the cell ends: the run's read after the cell does not
    /// see them yet (a filesystem's error often comes just after the write that caused it).
    LogAfter(Vec<String>),
    /// The workload fails with EIO and the kernel logs these lines.
    IoError(Vec<String>),
    /// The disk leaves: the kernel logs these lines and its sysfs entry is removed.
    Vanish(Vec<String>),
    /// The disk stays but holds nothing after the cell (a loop device detached, a medium
    /// ejected): its sysfs size reads 0.
    Shrink,
    /// SIGTERM arrives while the cell runs.
    Interrupt,
    /// The workload measures these figures.
    Figures(Figures),
    /// The cell waits (up to 10 s) until a cell of this other disk has started: it completes
    /// at once only when the two run at the same time.
    Meet(&'static str),
    /// Meets the other disk, and its job threads used this much CPU (% of one CPU).
    MeetCpu(&'static str, f64),
    /// Meets the other disk while the kernel logs these lines.
    MeetLog(&'static str, Vec<String>),
    /// Measures this many MiB/s, or 70 % of it when a cell of the other disk runs at the same
    /// time: the two share something their paths do not show.
    Contend(&'static str, f64),
}

#[derive(Clone, Copy, Default)]
struct Figures {
    mib_per_s: Option<f64>,
    iops: Option<f64>,
    p99_ms: Option<f64>,
    stalls_over_1s: Option<u64>,
    cpu_ns_per_io: Option<f64>,
    /// The cell takes this long on the run's clock.
    seconds: Option<f64>,
}

/// The kernel log the fake engine writes to and the run drains: the lines logged, and those
/// the next read does not see yet.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<(Vec<KmsgRecord>, Vec<KmsgRecord>)>>);

impl Log {
    fn push(&self, lines: &[String]) {
        self.push_to(lines, false)
    }

    fn push_late(&self, lines: &[String]) {
        self.push_to(lines, true)
    }

    fn push_to(&self, lines: &[String], late: bool) {
        let mut g = self.0.lock().unwrap();
        let (now, later) = &mut *g;
        for l in lines {
            let seq = 1000 + (now.len() + later.len()) as u64;
            let r = parse_record(&format!("3,{seq},0,-;{l}")).unwrap();
            if late {
                later.push(r)
            } else {
                now.push(r)
            }
        }
    }
}

impl KernelLog for Log {
    fn drain(&mut self) -> Result<Vec<KmsgRecord>, EventsError> {
        let mut g = self.0.lock().unwrap();
        let (now, later) = &mut *g;
        let out = std::mem::take(now);
        *now = std::mem::take(later);
        Ok(out)
    }
}

/// The null engine on a scratch file of its own, whatever the cell's target: every figure
/// is the cost of usbperf itself unless the script sets it.
struct FakeEngine {
    scratch: PathBuf,
    script: Vec<(String, WorkloadKind, Act)>,
    log: Log,
    sys: PathBuf,
    stop: StopFlag,
    /// `power/control` of each USB device as a cell of its disk saw it.
    power_seen: Mutex<Vec<String>>,
    /// The disks a cell has started on, for [`Act::Meet`].
    started: (Mutex<Vec<String>>, std::sync::Condvar),
    /// Runs so far of each disk's workload: a cell measured again takes the script's next
    /// entry for it (the last one repeats).
    runs: Mutex<Vec<(String, WorkloadKind)>>,
    /// The disks whose cells are running now, for [`Act::Contend`].
    running: Mutex<Vec<String>>,
    /// The run's clock, moved by [`Figures::seconds`].
    time: Arc<Mutex<Duration>>,
}

impl FakeEngine {
    fn disk_of(&self, params: &WorkloadParams) -> String {
        // A raw target is /dev/NAME; a test file's disk is found through its placement dir.
        let t = params.target.to_string_lossy();
        t.strip_prefix("/dev/")
            .map(str::to_string)
            .unwrap_or_else(|| {
                params
                    .target
                    .parent()
                    .and_then(|p| p.file_name())
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
    }
}

impl CellEngine for FakeEngine {
    fn reason(&self) -> &str {
        "null engine (test): no I/O"
    }
    fn open_raw_for_read(&self, _dev: &Path) -> std::io::Result<()> {
        Ok(())
    }
    fn run(
        &self,
        params: &WorkloadParams,
        options: &RunOptions,
    ) -> Result<BenchResult, WorkloadError> {
        let disk = self.disk_of(params);
        for port in ["1-1", "4-3"] {
            let p = self
                .sys
                .join("bus/usb/devices")
                .join(port)
                .join("power/control");
            if let Ok(v) = std::fs::read_to_string(p) {
                self.power_seen
                    .lock()
                    .unwrap()
                    .push(format!("{disk} {port} {}", v.trim()));
            }
        }
        let nth = {
            let mut runs = self.runs.lock().unwrap();
            let n = runs
                .iter()
                .filter(|(d, w)| *d == disk && *w == params.workload)
                .count();
            runs.push((disk.clone(), params.workload));
            n
        };
        let acts: Vec<&Act> = self
            .script
            .iter()
            .filter(|(d, w, _)| *d == disk && *w == params.workload)
            .map(|(_, _, a)| a)
            .collect();
        let act = acts.get(nth).or(acts.last()).map(|a| (*a).clone());
        {
            let (started, cv) = &self.started;
            started.lock().unwrap().push(disk.clone());
            cv.notify_all();
        }
        let mut contended = None;
        if let Some(Act::Contend(other, mib)) = &act {
            self.running.lock().unwrap().push(disk.clone());
            // Cells of lanes that start together overlap by far more than this.
            std::thread::sleep(Duration::from_millis(100));
            let beside = self.running.lock().unwrap().iter().any(|d| d == other);
            std::thread::sleep(Duration::from_millis(100));
            self.running.lock().unwrap().retain(|d| *d != disk);
            contended = Some(if beside { mib * 0.7 } else { *mib });
        }
        if let Some(Act::Meet(other) | Act::MeetCpu(other, _) | Act::MeetLog(other, _)) = &act {
            if let Some(Act::MeetLog(_, l)) = &act {
                self.log.push(l);
            }
            let (started, cv) = &self.started;
            let _ = cv
                .wait_timeout_while(started.lock().unwrap(), Duration::from_secs(10), |s| {
                    !s.iter().any(|d| d == other)
                })
                .unwrap();
            // Long enough that the other cell is still running when this one ends.
            std::thread::sleep(Duration::from_millis(200));
        }
        match &act {
            Some(Act::Log(l)) => self.log.push(l),
            Some(Act::LogAfter(l)) => self.log.push_late(l),
            Some(Act::IoError(l)) => {
                self.log.push(l);
                return Err(WorkloadError::Engine(EngineError::Io {
                    op: OpKind::Read,
                    offset: 2 << 20,
                    len: 1 << 20,
                    source: std::io::Error::from_raw_os_error(libc::EIO),
                    hint: String::new(),
                }));
            }
            Some(Act::Vanish(l)) => {
                self.log.push(l);
                std::fs::remove_file(self.sys.join("class/block").join(&disk)).unwrap();
            }
            Some(Act::Shrink) => {
                let size = self.sys.join("class/block").join(&disk).join("size");
                std::fs::write(size, "0\n").unwrap();
            }
            Some(Act::Interrupt) => self.stop.request(Some(nix::sys::signal::Signal::SIGTERM)),
            _ => {}
        }
        let mut p = WorkloadParams::defaults(WorkloadKind::SeqRead, self.scratch.join(&disk));
        p.engine = EngineRequest::Null;
        p.cache = CacheMode::Buffered;
        p.size_bytes = Some(1 << 20);
        let sel = usbperf::engine::select(EngineRequest::Null).unwrap();
        let mut res = workload::run(&p, &sel, options)?;
        res.workload = params.workload;
        res.params = params.clone();
        res.target.path = params.target.clone();
        if let Some(v) = contended {
            res.mib_per_s = v;
        }
        if let Some(Act::Figures(f)) = act {
            if let Some(v) = f.mib_per_s {
                res.mib_per_s = v;
            }
            if let Some(v) = f.iops {
                res.iops = v;
            }
            if let Some(v) = f.p99_ms {
                res.all.latency.p99_ns = (v * 1e6) as u64;
            }
            if let Some(v) = f.seconds {
                *self.time.lock().unwrap() += Duration::from_secs_f64(v);
            }
            if let Some(v) = f.stalls_over_1s {
                res.all.stalls.over_1s = v;
                res.all.stalls.longest_ns = 2_000_000_000;
            }
        }
        // The null engine's own CPU is real and would move the schedule's measured-CPU rule
        // with the machine's load: a row sets it, or it is none.
        let cpu = match act {
            Some(Act::MeetCpu(_, cpu)) => cpu,
            _ => 0.0,
        };
        res.cpu.usr_percent = cpu * 0.8;
        res.cpu.sys_percent = cpu * 0.2;
        res.cpu.cpu_ns_per_io = match act {
            Some(Act::Figures(f)) => f.cpu_ns_per_io.unwrap_or(0.0),
            _ => 0.0,
        };
        Ok(res)
    }
}

/// Wall time fixed at the start, monotonic time that moves only when the run sleeps.
struct SteppedClock {
    at: Arc<Mutex<Duration>>,
}

impl Clock for SteppedClock {
    fn now(&self) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 8, 0, 0).unwrap()
            + chrono::Duration::from_std(*self.at.lock().unwrap()).unwrap()
    }
    fn elapsed(&self) -> Duration {
        *self.at.lock().unwrap()
    }
    fn sleep(&self, d: Duration) {
        *self.at.lock().unwrap() += d;
    }
}

/// The recorded mount table, and CPUs that are `busy` % busy between any two samples.
struct Machine {
    facts: SystemFacts,
    busy: Option<f64>,
    ticks: Mutex<CpuTicks>,
}

impl SystemSource for Machine {
    fn facts(&self) -> SystemFacts {
        self.facts.clone()
    }
    fn cpu_ticks(&self) -> Option<CpuTicks> {
        let busy = self.busy?;
        let mut t = self.ticks.lock().unwrap();
        t.total += 1000;
        t.busy += (busy * 10.0) as u64;
        Some(*t)
    }
}

#[derive(Default)]
struct Lines(Mutex<Vec<String>>);

impl Progress for Lines {
    fn line(&self, msg: &str) {
        self.0.lock().unwrap().push(msg.to_string());
    }
}

/// The matrix every scenario runs unless it says otherwise: a read and a write test.
const TESTS: &str = "tests:\n\
  - {workload: seq-read, size: 1M, runtime: 1s}\n\
  - {workload: seq-write, size: 1M, runtime: 1s}\n";

struct Scenario<'a> {
    /// devices:, thresholds:, wait_devices: ... (YAML); `tests:` is TESTS unless given.
    config: String,
    script: Vec<(&'a str, WorkloadKind, Act)>,
    facts: SystemFacts,
    kernel_log_unreadable: bool,
    /// How busy the machine's CPUs look between any two samples, in %; none: unknown.
    cpu_busy: Option<f64>,
    report_dir: Option<PathBuf>,
    fallback: Vec<PathBuf>,
}

impl Scenario<'_> {
    fn new(config: &str) -> Self {
        Scenario {
            config: config.to_string(),
            script: Vec::new(),
            facts: SystemFacts::default(),
            kernel_log_unreadable: false,
            cpu_busy: None,
            report_dir: None,
            fallback: Vec::new(),
        }
    }
}

struct Played {
    outcome: RunOutcome,
    lines: Vec<String>,
    clock_s: f64,
    power_seen: Vec<String>,
}

impl Played {
    fn device(&self, name: &str) -> &usbperf::report::schema::DeviceReport {
        self.outcome
            .report
            .devices
            .iter()
            .find(|d| d.name == name)
            .unwrap_or_else(|| panic!("{name} not tested"))
    }
    fn statuses(&self, name: &str) -> Vec<CellStatus> {
        self.device(name).cells.iter().map(|c| c.status).collect()
    }
    fn reasons(&self, name: &str) -> String {
        texts(&self.device(name).verdict.reasons).join("\n")
    }
}

/// The scenario's configuration: the quick profile under its `config`, reports in the tree.
fn config_of(tree: &Tree, s: &Scenario<'_>) -> config::Config {
    let text = if s.config.contains("tests:") {
        s.config.clone()
    } else {
        format!("{}{TESTS}", s.config)
    };
    let mut layers = config::load_profile("quick", &[], &mut Vec::new()).unwrap();
    layers.push((
        "test.yaml".into(),
        config::parse(&text, "test.yaml").unwrap_or_else(|e| panic!("{e}\n{text}")),
    ));
    let mut cfg = config::resolve(layers);
    cfg.report_dir = s
        .report_dir
        .clone()
        .unwrap_or_else(|| tree.scratch("reports"));
    cfg
}

fn play(tree: &Tree, s: Scenario<'_>) -> Played {
    let cfg = config_of(tree, &s);
    let stop = StopFlag::new();
    let log = Log::default();
    let time = Arc::new(Mutex::new(Duration::ZERO));
    let engine = FakeEngine {
        time: time.clone(),
        scratch: tree.scratch("engine"),
        script: s
            .script
            .iter()
            .map(|(d, w, a)| (d.to_string(), *w, a.clone()))
            .collect(),
        log: log.clone(),
        sys: tree.sys(),
        stop: stop.clone(),
        power_seen: Mutex::new(Vec::new()),
        started: Default::default(),
        runs: Mutex::new(Vec::new()),
        running: Mutex::new(Vec::new()),
    };
    let clock = SteppedClock { at: time };
    let lines = Lines::default();
    let system = Machine {
        facts: s.facts.clone(),
        busy: s.cpu_busy,
        ticks: Mutex::new(CpuTicks::default()),
    };
    let env = Env {
        sysfs: SysfsRoot::at(&tree.sys()),
        backend: Backend::Sysfs,
        kernel_log: if s.kernel_log_unreadable {
            Err("/dev/kmsg: Permission denied (os error 13)".into())
        } else {
            Ok(Box::new(log))
        },
        system: &system,
        clock: &clock,
        engine: &engine,
        stop,
        progress: &lines,
        cpus: 2,
    };
    let settings = RunSettings {
        config: cfg,
        unit: UnitIdentity {
            hostname: Some("fixture".into()),
            ..UnitIdentity::default()
        },
        report_id: "01234567-89ab-4cde-8f01-23456789abcd".into(),
        fallback_report_dirs: s.fallback.clone(),
    };
    let outcome = run::run(env, settings).unwrap();
    let clock_s = clock.elapsed().as_secs_f64();
    Played {
        outcome,
        lines: lines.0.into_inner().unwrap(),
        clock_s,
        power_seen: engine.power_seen.into_inner().unwrap(),
    }
}

use CellStatus::{Error, Failed, Interrupted, Passed, Pending};
use WorkloadKind::{SeqRead, SeqWrite};

/// Raw placement for the disks a row tests, so write cells run (the fake engine never
/// touches the device).
fn raw(names: &[&str]) -> String {
    let mut s = "devices:\n".to_string();
    for n in names {
        s.push_str(&format!("  - {{select: {{name: {n}}}, target: raw}}\n"));
    }
    s
}

#[test]
fn cell_status_after_kernel_events_vanishing_disks_and_signals() {
    struct Row {
        what: &'static str,
        act: (&'static str, WorkloadKind, Act),
        /// The cells of the disk the act concerns.
        want: [CellStatus; 2],
        /// In that device's verdict reasons, and the kinds of those records.
        reason: &'static str,
        kinds: &'static [ReasonKind],
        exit: Exit,
    }
    let io_lines = recorded("sdh");
    let rows = [
        Row {
            what: "an I/O error: the cell is an error and quotes the kernel",
            act: ("sdh", SeqRead, Act::IoError(io_lines.clone())),
            want: [Error, Passed],
            reason: "seq-read: kernel: I/O error, dev sdh, sector 4096",
            kinds: &[ReasonKind::IoError, ReasonKind::KernelEvent],
            exit: Exit::VerdictFailed,
        },
        Row {
            what: "the kernel logs I/O errors while the test completes: failed",
            act: ("sdh", SeqWrite, Act::Log(io_lines.clone())),
            want: [Passed, Failed],
            reason: "seq-write: kernel: Buffer I/O error on dev sdh",
            kinds: &[ReasonKind::KernelEvent],
            exit: Exit::VerdictFailed,
        },
        Row {
            what: "the kernel logs I/O errors just after a test ended: the next test's",
            act: ("sdh", SeqRead, Act::LogAfter(io_lines.clone())),
            want: [Passed, Failed],
            reason: "seq-write: kernel: Buffer I/O error on dev sdh",
            kinds: &[ReasonKind::KernelEvent],
            exit: Exit::VerdictFailed,
        },
        Row {
            what: "the stick at 4-2 is unplugged: error, and the rest is not run",
            act: (
                "sde",
                SeqRead,
                Act::Vanish(recorded("usb 4-2: USB disconnect")),
            ),
            want: [Error, Error],
            reason: "seq-read: sde vanished during the test",
            kinds: &[ReasonKind::KernelEvent, ReasonKind::Vanished],
            exit: Exit::VerdictFailed,
        },
        Row {
            what: "the disk leaves sysfs without a kernel line",
            act: ("sde", SeqRead, Act::Vanish(Vec::new())),
            want: [Error, Error],
            reason: "not run: sde went away or shrank",
            kinds: &[ReasonKind::KernelEvent, ReasonKind::Vanished],
            exit: Exit::VerdictFailed,
        },
        Row {
            what: "the disk stays but holds nothing (detached, ejected): its other tests not run",
            act: ("sde", SeqRead, Act::Shrink),
            want: [Error, Error],
            reason: "seq-read: sde went away during the test: it now holds 0 B where it held",
            kinds: &[ReasonKind::Vanished],
            exit: Exit::VerdictFailed,
        },
        Row {
            what: "SIGTERM during the first test: interrupted, the rest pending",
            act: ("sde", SeqRead, Act::Interrupt),
            want: [Interrupted, Pending],
            reason: "2 of 2 tests did not run to the end (run interrupted)",
            kinds: &[ReasonKind::Interrupted],
            exit: Exit::Incomplete,
        },
        Row {
            what: "kernel lines of another device do not touch this one",
            act: ("sde", SeqRead, Act::Log(io_lines.clone())),
            want: [Passed, Passed],
            reason: "",
            kinds: &[],
            exit: Exit::Pass,
        },
    ];
    for row in rows {
        let tree = Tree::new();
        let mut s = Scenario::new(&raw(&["sde", "sdh"]));
        s.script.push(row.act.clone());
        let p = play(&tree, s);
        let disk = row.act.0;
        assert_eq!(p.statuses(disk), row.want, "{}", row.what);
        assert!(
            p.reasons(disk).contains(row.reason),
            "{}: {}",
            row.what,
            p.reasons(disk)
        );
        let kinds: Vec<ReasonKind> = p
            .device(disk)
            .verdict
            .reasons
            .iter()
            .map(|r| r.kind)
            .collect();
        for k in row.kinds {
            assert!(kinds.contains(k), "{}: {k:?} not in {kinds:?}", row.what);
        }
        if let Some(k) = p
            .device(disk)
            .verdict
            .reasons
            .iter()
            .find(|r| r.kind == ReasonKind::KernelEvent)
        {
            // The kernel line's kind and the device are data beside the quoted line.
            assert!(k.event.is_some(), "{}: {k:?}", row.what);
            assert_eq!(k.device.as_deref(), Some(disk), "{}", row.what);
        }
        assert_eq!(p.outcome.exit, row.exit, "{}", row.what);
        assert_eq!(
            p.outcome.report.exit_code,
            Some(row.exit as u8),
            "{}",
            row.what
        );
        assert!(
            matches!(p.outcome.place, ReportPlace::File(_)),
            "{}",
            row.what
        );
        if row.exit == Exit::Incomplete {
            assert_eq!(p.statuses("sdh"), [Pending, Pending], "{}", row.what);
            assert_eq!(p.outcome.report.interrupted_by.as_deref(), Some("SIGTERM"));
            assert!(p.outcome.report.verdict.reasons.iter().any(|r| r
                .text
                .contains("the run was interrupted by SIGTERM before every test ran")));
        }
    }
}

#[test]
fn each_threshold_rule_fails_only_below_its_limit() {
    struct Row {
        rule: &'static str,
        figures: Figures,
        /// `None`: the device passes.
        reason: Option<&'static str>,
    }
    let f = Figures::default;
    let rows = [
        Row {
            rule: "{select: {name: sda}, workload: seq-read, min_mib_per_s: 20}",
            figures: Figures {
                mib_per_s: Some(12.5),
                ..f()
            },
            reason: Some("seq-read: 12.5 MiB/s < minimum 20 MiB/s [thresholds[0] (sda)]"),
        },
        Row {
            rule: "{select: {name: sda}, workload: seq-read, min_mib_per_s: 20}",
            figures: Figures {
                mib_per_s: Some(20.0),
                ..f()
            },
            reason: None,
        },
        Row {
            rule: "{select: {class: usb}, workload: seq-read, min_iops: 100}",
            figures: Figures {
                iops: Some(99.0),
                ..f()
            },
            reason: Some("seq-read: 99 IOPS < minimum 100 IOPS [thresholds[0] (class usb)]"),
        },
        Row {
            rule: "{select: {port: 'usb:1-1'}, max_p99_latency_ms: 50}",
            figures: Figures {
                p99_ms: Some(80.0),
                ..f()
            },
            reason: Some("seq-read: p99 latency 80.0 ms > maximum 50 ms"),
        },
        Row {
            rule: "{select: {all_non_system: true}, max_stalls: 0}",
            figures: Figures {
                stalls_over_1s: Some(3),
                ..f()
            },
            reason: Some("seq-read: 3 I/O(s) took over 1 s (longest 2.0 s) > maximum 0"),
        },
        Row {
            // A limit of another workload does not apply to seq-read's figure.
            rule: "{select: {name: sda}, workload: seq-write, min_mib_per_s: 1.0e6}",
            figures: Figures {
                mib_per_s: Some(1.0),
                ..f()
            },
            reason: Some("seq-write: "),
        },
        Row {
            rule: "{select: {name: sda}, min_link_mbps: 480}",
            figures: f(),
            reason: None,
        },
        Row {
            rule: "{select: {name: sda}, min_link_mbps: 5000}",
            figures: f(),
            reason: Some("link: "),
        },
        Row {
            rule: "{select: {name: sda}, min_capacity: 1G}",
            figures: f(),
            reason: Some("capacity: 64M is below the 1G required [thresholds[0] (sda)]"),
        },
        Row {
            rule: "{select: {name: sda}, min_capacity: 64M}",
            figures: f(),
            reason: None,
        },
    ];
    for row in rows {
        let tree = Tree::new();
        let mut s = Scenario::new(&format!("{}thresholds:\n  - {}\n", raw(&["sda"]), row.rule));
        s.script.push(("sda", SeqRead, Act::Figures(row.figures)));
        let p = play(&tree, s);
        let d = p.device("sda");
        match row.reason {
            None => {
                assert!(d.verdict.pass, "{}: {:?}", row.rule, d.verdict.reasons);
                assert_eq!(p.outcome.exit, Exit::Pass, "{}", row.rule);
            }
            Some(r) => {
                assert!(!d.verdict.pass, "{}", row.rule);
                assert!(
                    p.reasons("sda").contains(r),
                    "{}: {}",
                    row.rule,
                    p.reasons("sda")
                );
                assert_eq!(p.outcome.exit, Exit::VerdictFailed, "{}", row.rule);
                // The unit's reasons name the device and carry its reasons.
                assert!(p.outcome.report.verdict.reasons[0]
                    .text
                    .starts_with("sda: "));
            }
        }
    }
}

#[test]
fn link_rules_on_the_recorded_buses() {
    // (disk, rule, reason in its verdict; "" passes)
    let rows = [
        ("sdb", "min_link_mbps: 480", "port 2-1 linked at 12M"),
        ("sdd", "min_link_mbps: 5000", ""),
        ("sdc", "min_link_mbps: 480", "link: sdc has no USB link"),
        (
            "sdc",
            "min_sata_gbps: 3",
            "link: SATA link at 1.5 Gbps, below the 3.0 Gbps required",
        ),
        ("sdc", "min_sata_gbps: 1.5", ""),
    ];
    for (disk, rule, want) in rows {
        let tree = Tree::new();
        let cfg = format!(
            "{}thresholds:\n  - {{select: {{name: {disk}}}, {rule}}}\n",
            raw(&[disk])
        );
        let p = play(&tree, Scenario::new(&cfg));
        let d = p.device(disk);
        assert_eq!(
            d.verdict.pass,
            want.is_empty(),
            "{disk} {rule}: {:?}",
            d.verdict
        );
        assert!(
            p.reasons(disk).contains(want),
            "{disk} {rule}: {}",
            p.reasons(disk)
        );
        if rule.starts_with("min_link_mbps") && d.disk.usb.is_some() {
            assert_eq!(d.link_checks.len(), 1, "{disk}: the link check as data");
            assert_eq!(d.link_checks[0].pass, want.is_empty());
        }
    }
}

#[test]
fn device_and_unit_verdicts() {
    struct Row {
        what: &'static str,
        config: String,
        facts: SystemFacts,
        /// In the unit's verdict reasons.
        unit_reason: &'static str,
        exit: Exit,
    }
    let mounted = SystemFacts {
        mounts: usbperf::discover::parse::mountinfo(
            "36 25 8:16 / /media/stick rw,relatime shared:1 - ext4 /dev/sdb rw\n",
        ),
        ..SystemFacts::default()
    };
    let rows = [
        Row {
            what: "a required device that never appears fails the unit after the wait",
            config: "wait_devices: 20s\ndevices:\n  - {select: {name: sdz}, label: front USB, \
                     required: true}\n  - {select: {name: sda}, target: raw}\n"
                .into(),
            facts: SystemFacts::default(),
            unit_reason: "devices[0] \"front USB\": required, not found",
            exit: Exit::VerdictFailed,
        },
        Row {
            what: "no disk matches: nothing tested is never a pass",
            config: "devices:\n  - {select: {name: sdz}}\n".into(),
            facts: SystemFacts::default(),
            unit_reason: "no device was tested",
            exit: Exit::VerdictFailed,
        },
        Row {
            what: "read-only placement and only write tests: every test skipped fails",
            config: "devices:\n  - {select: {name: sda}}\ntests:\n  - {workload: seq-write, \
                     size: 1M}\n"
                .into(),
            facts: SystemFacts::default(),
            unit_reason: "sda: no test ran on this device: all 1 were skipped (seq-write: not \
                          run, no writable target",
            exit: Exit::VerdictFailed,
        },
        Row {
            what: "raw writes asked for on a mounted disk: refused, the write cell is an error",
            config: raw(&["sdb"]),
            facts: mounted.clone(),
            unit_reason: "sdb: seq-write: not run, no writable target: ",
            exit: Exit::VerdictFailed,
        },
        Row {
            what: "read-only placement runs the read tests and passes with writes skipped",
            config: "devices:\n  - {select: {name: sda}}\n".into(),
            facts: SystemFacts::default(),
            unit_reason: "",
            exit: Exit::Pass,
        },
    ];
    for row in rows {
        let tree = Tree::new();
        let mut s = Scenario::new(&row.config);
        s.facts = row.facts.clone();
        let p = play(&tree, s);
        let unit = texts(&p.outcome.report.verdict.reasons).join("\n");
        assert!(unit.contains(row.unit_reason), "{}: {unit}", row.what);
        assert_eq!(
            p.outcome.report.verdict.pass,
            row.unit_reason.is_empty(),
            "{}",
            row.what
        );
        assert_eq!(p.outcome.exit, row.exit, "{}", row.what);
    }
}

#[test]
fn a_required_device_is_waited_for_on_the_clock() {
    let tree = Tree::new();
    let p = play(
        &tree,
        Scenario::new("wait_devices: 20s\ndevices:\n  - {select: {name: sdz}, required: true}\n"),
    );
    assert!(p.clock_s >= 20.0 && p.clock_s < 21.0, "{} s", p.clock_s);
    assert!(
        p.lines
            .iter()
            .any(|l| l == "usbperf-matrix: waiting up to 20s for 1 required device(s)"),
        "{:?}",
        p.lines
    );
    assert_eq!(p.outcome.report.missing_devices.len(), 1);
}

#[test]
fn a_stale_test_file_is_removed_and_said_and_file_cells_leave_nothing() {
    let tree = Tree::new();
    let dir = tree.scratch("media-sda");
    let stale = dir.join(".usbperf-testfile-4242-0.tmp");
    std::fs::write(&stale, b"left by a crashed run").unwrap();
    // The test directory is on sda as far as the run's mount table says.
    let canon = dir.canonicalize().unwrap();
    let facts = SystemFacts {
        mounts: usbperf::discover::parse::mountinfo(&format!(
            "36 25 8:0 / {} rw,relatime shared:1 - ext4 /dev/sda rw\n",
            canon.display()
        )),
        ..SystemFacts::default()
    };
    let mut s = Scenario::new(&format!(
        "headroom_percent: 0\ndevices:\n  - {{select: {{name: sda}}, target: {{dir: {}}}}}\n",
        canon.display()
    ));
    s.facts = facts;
    let p = play(&tree, s);
    assert!(!stale.exists(), "the stale file is removed");
    let warned = format!(
        "removed a stale test file left by an earlier run: {}",
        stale.display()
    );
    assert!(
        p.outcome.report.warnings.contains(&warned),
        "{:?}",
        p.outcome.report.warnings
    );
    let d = p.device("sda");
    assert_eq!(
        serde_json::to_value(&d.placement).unwrap()["mode"],
        "file",
        "{:?}",
        d.placement
    );
    assert_eq!(p.statuses("sda"), [Passed, Passed]);
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn an_unreadable_kernel_log_is_a_warning_not_a_failure() {
    let tree = Tree::new();
    let mut s = Scenario::new(&raw(&["sda"]));
    s.kernel_log_unreadable = true;
    let p = play(&tree, s);
    assert_eq!(p.outcome.exit, Exit::Pass);
    assert!(p.outcome.report.warnings.iter().any(|w| w.starts_with(
        "kernel events are not watched, so I/O errors, resets and disconnects cannot be attributed"
    )));
}

#[test]
fn a_refused_report_directory_falls_back_then_says_nowhere() {
    // A fallback on tmpfs (/dev/shm here; /run and /tmp on most images) is emptied at the next
    // boot: the report is written there, and the run is an error all the same.
    let shm = std::path::PathBuf::from(format!("/dev/shm/usbperf-test-{}", std::process::id()));
    std::fs::create_dir_all(&shm).unwrap();
    // (fallback dirs: "lasting", "tmpfs" or "none"; where the record is; exit)
    let rows = [
        ("lasting", "file", Exit::Pass),
        ("tmpfs", "file", Exit::Error),
        ("none", "nowhere", Exit::Error),
    ];
    for (fallback, want, exit) in rows {
        let tree = Tree::new();
        // A directory under a regular file cannot be created, even by root.
        let blocker = tree.scratch("x").join("file");
        std::fs::write(&blocker, b"").unwrap();
        let mut s = Scenario::new(&raw(&["sda"]));
        s.report_dir = Some(blocker.join("reports"));
        let landing = match fallback {
            "tmpfs" => shm.clone(),
            _ => tree.scratch("fallback"),
        };
        s.fallback = match fallback {
            "none" => vec![blocker.join("also-refused")],
            _ => vec![blocker.join("also-refused"), landing.clone()],
        };
        let p = play(&tree, s);
        let o = &p.outcome;
        match (&o.place, want) {
            (ReportPlace::File(f), "file") => {
                assert!(f.starts_with(&landing), "{f:?}");
                assert!(!o.in_configured_dir);
                let text = std::fs::read_to_string(f).unwrap();
                assert!(
                    text.contains("status: complete"),
                    "the final state is on file"
                );
                assert!(
                    text.contains(&format!("exit_code: {}", exit as u8)),
                    "{fallback}: the file holds the run's exit code:\n{text}"
                );
            }
            (ReportPlace::Nowhere(_), "nowhere") => {}
            (other, _) => panic!("{want}: {other:?}"),
        }
        assert_eq!(o.exit, exit, "{fallback}");
        assert_eq!(o.report.exit_code, Some(exit as u8));
        assert_eq!(
            o.lost_at_reboot,
            (fallback == "tmpfs").then_some("tmpfs"),
            "{fallback}"
        );
        assert!(o
            .report
            .warnings
            .iter()
            .any(|w| w.contains("cannot be written")));
        let said_lost = o
            .report
            .warnings
            .iter()
            .any(|w| w.contains("emptied at the next boot"));
        assert_eq!(
            said_lost,
            fallback == "tmpfs",
            "{fallback}: {:?}",
            o.report.warnings
        );
    }
    std::fs::remove_dir_all(&shm).unwrap();
}

#[test]
fn usb_devices_are_kept_awake_while_tested_and_restored_after() {
    let tree = Tree::new();
    let control = tree.sys().join("bus/usb/devices/4-3/power/control");
    std::fs::write(&control, "auto\n").unwrap();
    let p = play(&tree, Scenario::new(&raw(&["sdh"])));
    assert!(
        p.power_seen.iter().any(|s| s == "sdh 4-3 on"),
        "pinned while tested: {:?}",
        p.power_seen
    );
    assert_eq!(std::fs::read_to_string(&control).unwrap().trim(), "auto");
}

#[test]
fn progress_lines_say_each_cell_start_and_finish() {
    let tree = Tree::new();
    let p = play(&tree, Scenario::new(&raw(&["sda"])));
    let starts = p.lines.iter().filter(|l| l.ends_with(": start")).count();
    assert_eq!(starts, 2, "{:?}", p.lines);
    assert!(
        p.lines
            .iter()
            .any(|l| l.starts_with("usbperf-matrix: sda seq-read: passed ")),
        "{:?}",
        p.lines
    );
    assert_eq!(p.lines[0], "usbperf-matrix: null engine (test): no I/O");
}

#[test]
fn a_threshold_failure_is_a_record_in_the_written_report() {
    let tree = Tree::new();
    let mut s = Scenario::new(&format!(
        "{}thresholds:\n  - {{select: {{port: 'usb:1-1'}}, workload: seq-read, min_mib_per_s: 20}}\n",
        raw(&["sda"])
    ));
    s.script.push((
        "sda",
        SeqRead,
        Act::Figures(Figures {
            mib_per_s: Some(12.5),
            ..Figures::default()
        }),
    ));
    let p = play(&tree, s);
    let r = &p.device("sda").verdict.reasons[0];
    assert_eq!(r.kind, ReasonKind::Threshold);
    assert_eq!(r.rule.as_deref(), Some("thresholds[0]"));
    assert_eq!(r.workload.as_deref(), Some("seq-read"));
    assert_eq!(r.metric.as_deref(), Some("mib_per_s"));
    assert_eq!((r.measured, r.limit), (Some(12.5), Some(20.0)));
    assert_eq!(r.unit.as_deref(), Some("MiB/s"));
    assert_eq!(r.device.as_deref(), Some("sda"));
    // The file says the same: schema 2, a UUID, and the record with its sentence.
    let ReportPlace::File(path) = &p.outcome.place else {
        panic!("{:?}", p.outcome.place)
    };
    let doc: serde_json::Value =
        serde_norway::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(doc["schema_version"], 2);
    let rec = &doc["devices"][0]["verdict"]["reasons"][0];
    for (k, v) in [
        ("kind", serde_json::json!("threshold")),
        ("metric", serde_json::json!("mib_per_s")),
        ("measured", serde_json::json!(12.5)),
        ("limit", serde_json::json!(20.0)),
        ("unit", serde_json::json!("MiB/s")),
        ("rule", serde_json::json!("thresholds[0]")),
    ] {
        assert_eq!(rec[k], v, "{k}: {rec}");
    }
    assert!(rec["text"]
        .as_str()
        .unwrap()
        .starts_with("seq-read: 12.5 MiB/s < minimum 20 MiB/s"));
    let unit = &doc["verdict"]["reasons"][0];
    assert_eq!(unit["kind"], "device_failed");
    assert_eq!(unit["device"], "sda");
}

/// `schedule: auto` over the recorded buses: the EHCI stick (usb1), the SATA disk (ata1), the
/// SD card (mmc0) and the blkdebug stick (usb4) run at the same time, while the two LUNs of
/// the stick behind the hub on the xHCI's full-speed root hub (usb3) run one after another;
/// kernel lines logged while several run go to the device they name only.
#[test]
fn auto_runs_independent_buses_together_and_a_shared_root_hub_in_sequence() {
    let tree = Tree::new();
    let mut s = Scenario::new(&format!(
        "schedule: auto\n{}",
        raw(&["sda", "sdc", "mmcblk0", "sdh", "sdf", "sdg"])
    ));
    s.script = vec![
        ("sda", SeqRead, Act::Meet("sdc")),
        ("sdc", SeqRead, Act::Meet("mmcblk0")),
        ("mmcblk0", SeqRead, Act::Meet("sda")),
        ("sdh", SeqRead, Act::MeetLog("sda", recorded("sdh"))),
        ("sdf", SeqRead, Act::Meet("sdg")),
    ];
    let p = play(&tree, s);
    let with = |d: &str| p.device(d).cells[0].concurrent_with.clone();
    for (d, other) in [
        ("sda", "sdc"),
        ("sdc", "mmcblk0"),
        ("mmcblk0", "sda"),
        ("sdh", "sda"),
    ] {
        assert!(
            with(d).iter().any(|x| x == other),
            "{d} beside {other}: {:?}",
            with(d)
        );
    }
    for (d, other) in [("sdf", "sdg"), ("sdg", "sdf")] {
        for cell in &p.device(d).cells {
            assert!(
                !cell.concurrent_with.iter().any(|x| x == other),
                "{d} ran beside {other}, behind the same hub"
            );
        }
    }
    assert_eq!(p.statuses("sda"), [Passed, Passed]);
    assert!(p
        .device("sda")
        .cells
        .iter()
        .all(|c| c.kernel_events.is_empty()));
    assert_eq!(p.statuses("sdh"), [Failed, Passed], "{}", p.reasons("sdh"));
    let sch = p.outcome.report.schedule.as_ref().unwrap();
    assert_eq!(sch.mode, usbperf::matrix::schedule::ScheduleMode::Auto);
    assert!(sch.alone.is_empty(), "{:?}", sch.alone);
    assert!(
        p.lines
            .iter()
            .any(|l| l.starts_with("usbperf-matrix: schedule auto; ")),
        "{:?}",
        p.lines
    );
    assert_eq!(p.outcome.exit, Exit::VerdictFailed);
}

/// The rules that keep CPU-bound cells alone. 4 KiB blocks on the SATA SSD (a fast class):
/// alone when the run has not measured it yet; alone when its measured 500 MiB/s at 20 us of
/// CPU per I/O predicts 256 % of a CPU; beside the others when it streamed only 10 MiB/s
/// (5 %). The same test on a USB stick and an SD card runs beside the others. A cell that used
/// more than half its share of the CPUs beside others is measured again alone.
#[test]
fn auto_runs_small_blocks_on_fast_devices_and_cpu_heavy_cells_alone() {
    use usbperf::matrix::schedule::AloneRule;
    let play_with = |tests: &str, sdc_mib: f64| {
        let tree = Tree::new();
        let mut s = Scenario::new(&format!(
            "schedule: auto\n{}tests:\n{tests}",
            raw(&["sda", "sdc", "mmcblk0"])
        ));
        s.script = vec![
            // 150 % of a CPU beside one other cell on 2 CPUs: over half its share (50 %).
            ("sda", SeqRead, Act::MeetCpu("mmcblk0", 150.0)),
            ("mmcblk0", SeqRead, Act::MeetCpu("sda", 20.0)),
            (
                "sdc",
                SeqRead,
                Act::Figures(Figures {
                    mib_per_s: Some(sdc_mib),
                    cpu_ns_per_io: Some(20_000.0),
                    ..Figures::default()
                }),
            ),
        ];
        play(&tree, s)
    };
    let seq_then_rand = "  - {workload: seq-read, size: 1M, runtime: 1s}\n  \
                         - {workload: rand-read, size: 1M, runtime: 1s}\n";
    let rule = |p: &Played, d: &str, w: WorkloadKind| {
        let sch = p.outcome.report.schedule.as_ref().unwrap();
        sch.alone
            .iter()
            .find(|a| a.device == d && a.workload == w)
            .map(|a| (a.rule, a.cpu_percent))
    };
    use WorkloadKind::RandRead;

    let p = play_with(seq_then_rand, 500.0);
    let (r, cpu) = rule(&p, "sdc", RandRead).expect("the SSD's 4 KiB test ran alone");
    assert_eq!(r, AloneRule::PredictedCpu);
    assert!((cpu.unwrap() - 256.0).abs() < 0.01, "{cpu:?}");
    assert_eq!(rule(&p, "sdc", SeqRead), None);
    assert_eq!(
        rule(&p, "sda", RandRead),
        None,
        "a USB stick is device-bound"
    );
    assert_eq!(rule(&p, "mmcblk0", RandRead), None, "so is an SD card");
    assert_eq!(
        rule(&p, "sda", SeqRead).map(|r| r.0),
        Some(AloneRule::MeasuredCpu)
    );
    assert_eq!(
        rule(&p, "mmcblk0", SeqRead),
        None,
        "20 % of a CPU is within its share"
    );
    let sdc_rand = &p.device("sdc").cells[1];
    assert!(
        sdc_rand.concurrent_with.is_empty(),
        "{:?}",
        sdc_rand.concurrent_with
    );
    let sda_seq = &p.device("sda").cells[0];
    assert!(
        sda_seq.concurrent_with.is_empty(),
        "measured again alone: {:?}",
        sda_seq.concurrent_with
    );
    assert!(
        sda_seq.reasons.iter().any(|r| r.kind == ReasonKind::Note
            && r.metric.as_deref() == Some("cpu_percent")
            && r.measured == Some(150.0)),
        "{:?}",
        sda_seq.reasons
    );
    let note = sda_seq
        .reasons
        .iter()
        .find(|r| r.kind == ReasonKind::Note && r.metric.as_deref() == Some("cpu_percent"))
        .unwrap();
    assert_eq!(
        note.text,
        "seq-read: measured alone: beside other devices it used 150 % of a CPU, over half its \
         share, so the CPU may have set that figure"
    );
    assert!(p
        .lines
        .iter()
        .any(|l| l.contains("it used 150 % of a CPU: measuring it again alone")));
    assert_eq!(p.outcome.exit, Exit::Pass, "{:?}", p.lines);

    let p = play_with(seq_then_rand, 10.0);
    assert_eq!(
        rule(&p, "sdc", RandRead),
        None,
        "10 MiB/s of 4 KiB blocks is 5 % of a CPU"
    );

    let p = play_with(
        "  - {workload: rand-read, size: 1M, runtime: 1s}\n  \
         - {workload: seq-read, size: 1M, runtime: 1s}\n",
        10.0,
    );
    assert_eq!(
        rule(&p, "sdc", RandRead),
        Some((AloneRule::SmallBlocksFastDevice, None)),
        "nothing measured yet: the class decides"
    );
}

/// A fast device whose job threads cost little while the machine was busy running it alone
/// (a driver that completes I/O in softirqs or kernel threads, as null_blk's throttle does):
/// the prediction takes the machine's busy time per I/O, and the 4 KiB test runs alone.
#[test]
fn the_machines_busy_time_per_io_predicts_a_small_block_cell() {
    use usbperf::matrix::schedule::AloneRule;
    use WorkloadKind::{RandRead, RandWrite};
    let play_with = |busy: Option<f64>| {
        let tree = Tree::new();
        let mut s = Scenario::new(&format!(
            "schedule: auto\n{}tests:\n  - {{workload: rand-read, size: 1M, runtime: 1s}}\n  \
             - {{workload: seq-read, size: 1M, runtime: 1s}}\n  \
             - {{workload: rand-write, size: 1M, runtime: 1s}}\n",
            raw(&["sda", "sdc"])
        ));
        s.cpu_busy = busy;
        let figures = |seconds| {
            Act::Figures(Figures {
                mib_per_s: Some(10.0),
                cpu_ns_per_io: Some(20_000.0),
                seconds,
                ..Figures::default()
            })
        };
        s.script = vec![
            // Nothing measured yet: alone by its class, the machine busy while it runs.
            ("sdc", RandRead, figures(Some(1.0))),
            ("sdc", SeqRead, figures(None)),
        ];
        play(&tree, s)
    };
    let rule = |p: &Played, w: WorkloadKind| {
        let sch = p.outcome.report.schedule.as_ref().unwrap();
        sch.alone
            .iter()
            .find(|a| a.device == "sdc" && a.workload == w)
            .map(|a| (a.rule, a.cpu_percent))
    };
    let p = play_with(None);
    assert_eq!(
        rule(&p, RandRead),
        Some((AloneRule::SmallBlocksFastDevice, None))
    );
    // 10 MiB/s of 4 KiB blocks at the job threads' 20 us each: 5 % of a CPU.
    assert_eq!(rule(&p, RandWrite), None);

    let p = play_with(Some(60.0));
    let first = &p.device("sdc").cells[0];
    assert_eq!(first.machine_busy_percent, Some(60.0));
    assert!(first.concurrent_with.is_empty());
    let ios = first.result.as_ref().unwrap().all.ios as f64;
    // 60 % of 2 CPUs over its 1 s, over its I/Os, at 2,560 I/Os a second.
    let want = 2560.0 * (0.6 * 2.0 * 1e9 / ios) / 1e9 * 100.0;
    let (r, cpu) = rule(&p, RandWrite).expect("the machine's time per I/O puts it alone");
    assert_eq!(r, AloneRule::PredictedCpu);
    assert!(
        (cpu.unwrap() / want - 1.0).abs() < 0.01,
        "{cpu:?} against {want}"
    );
}

/// The serial schedule (the default) never runs two cells at once: the cell meeting another
/// device waits out its 10 s and finds itself alone.
#[test]
fn serial_runs_one_cell_at_a_time() {
    let tree = Tree::new();
    let mut s = Scenario::new(&raw(&["sda", "sdc"]));
    s.script = vec![("sda", SeqRead, Act::Meet("sdc"))];
    let p = play(&tree, s);
    let all = p.outcome.report.devices.iter().flat_map(|d| &d.cells);
    assert!(all.clone().all(|c| c.concurrent_with.is_empty()));
    assert_eq!(
        p.outcome.report.schedule.as_ref().unwrap().mode,
        usbperf::matrix::schedule::ScheduleMode::Serial
    );
}

/// SIGTERM while three lanes run: every running cell ends interrupted, no lane starts
/// another test, the report says interrupted, exit 3.
#[test]
fn auto_stops_every_lane_on_a_signal() {
    let tree = Tree::new();
    let mut s = Scenario::new(&format!(
        "schedule: auto\n{}",
        raw(&["sda", "sdc", "mmcblk0"])
    ));
    s.script = vec![
        ("sda", SeqRead, Act::Meet("sdc")),
        ("mmcblk0", SeqRead, Act::Meet("sdc")),
        ("sdc", SeqRead, Act::Interrupt),
    ];
    let p = play(&tree, s);
    assert_eq!(p.statuses("sdc"), [Interrupted, Pending]);
    // A lane whose first cell had not started when the signal came starts none.
    for d in ["sda", "mmcblk0"] {
        let st = p.statuses(d);
        assert!(
            st == [Interrupted, Pending] || st == [Pending, Pending],
            "{d}: {st:?}"
        );
    }
    assert_eq!(p.outcome.exit, Exit::Incomplete);
    assert_eq!(
        p.outcome.report.status,
        usbperf::report::schema::RunStatus::Interrupted
    );
}

/// The machine rule: CPUs 95 % busy while the first cells ran together: the first of them to
/// finish is measured again alone and every later cell of the run runs alone (a serial run
/// from there on), each recorded with its rule. At 50 % nothing falls back.
#[test]
fn auto_falls_back_to_one_cell_at_a_time_when_the_cpus_saturate() {
    use usbperf::matrix::schedule::AloneRule;
    let tree = Tree::new();
    let config = format!("schedule: auto\n{}", raw(&["sda", "sdc", "mmcblk0"]));
    let script = vec![
        ("sda", SeqRead, Act::Meet("sdc")),
        ("sdc", SeqRead, Act::Meet("sda")),
        ("mmcblk0", SeqRead, Act::Meet("sda")),
    ];
    let mut s = Scenario::new(&config);
    s.script = script.clone();
    s.cpu_busy = Some(95.0);
    let p = play(&tree, s);
    let sch = p.outcome.report.schedule.as_ref().unwrap();
    let rules: Vec<AloneRule> = sch.alone.iter().map(|a| a.rule).collect();
    assert!(rules.contains(&AloneRule::MachineCpu), "{:?}", sch.alone);
    let first = sch
        .alone
        .iter()
        .find(|a| a.rule == AloneRule::MachineCpu)
        .unwrap();
    assert_eq!(first.cpu_percent, Some(95.0));
    // Every seq-write came after the fallback: alone, and recorded so.
    for d in ["sda", "sdc", "mmcblk0"] {
        let w = &p.device(d).cells[1];
        assert!(
            w.concurrent_with.is_empty(),
            "{d} seq-write beside {:?}",
            w.concurrent_with
        );
        assert!(
            sch.alone
                .iter()
                .any(|a| a.device == d && a.workload == SeqWrite && a.rule == AloneRule::FellBack),
            "{d}: {:?}",
            sch.alone
        );
    }
    let c = &p.device(&first.device).cells[0];
    assert!(
        c.concurrent_with.is_empty(),
        "measured again alone: {:?}",
        c.concurrent_with
    );
    assert!(c
        .reasons
        .iter()
        .any(|r| r.metric.as_deref() == Some("cpu_busy_percent")));
    assert_eq!(
        p.lines
            .iter()
            .filter(|l| l.contains("the rest of the run one test at a time"))
            .count(),
        1,
        "{:#?}",
        p.lines
    );
    // Every cell measured again alone says so on the console, not only the first.
    for a in sch.alone.iter().filter(|a| a.rule == AloneRule::MachineCpu) {
        let said = format!("{} {}: the CPUs were", a.device, a.workload.as_str());
        assert!(
            p.lines
                .iter()
                .any(|l| l.contains(&said) && l.contains("measuring it again alone")),
            "no line for {said}: {:#?}",
            p.lines
        );
    }
    assert_eq!(p.outcome.exit, Exit::Pass);

    let tree = Tree::new();
    let mut s = Scenario::new(&config);
    s.script = script;
    s.cpu_busy = Some(50.0);
    let p = play(&tree, s);
    assert!(p.outcome.report.schedule.as_ref().unwrap().alone.is_empty());
}

/// `shared_lanes:` joins lanes a board comparison found to interfere: the EHCI stick and the
/// SATA disk then run one after another, the SD card still beside them.
#[test]
fn shared_lanes_run_one_after_another() {
    let tree = Tree::new();
    let mut s = Scenario::new(&format!(
        "schedule: auto\nshared_lanes: [[usb:usb1, ata:ata1]]\n{}",
        raw(&["sda", "sdc", "mmcblk0"])
    ));
    s.script = vec![
        ("sda", SeqRead, Act::Meet("mmcblk0")),
        ("sdc", SeqRead, Act::Meet("mmcblk0")),
        ("mmcblk0", SeqRead, Act::Meet("sda")),
    ];
    let p = play(&tree, s);
    let lanes = &p.outcome.report.schedule.as_ref().unwrap().lanes;
    assert!(
        lanes
            .iter()
            .any(|l| l.key == "usb:usb1+ata:ata1" && l.disks == ["sda", "sdc"]),
        "{lanes:?}"
    );
    for (d, other) in [("sda", "sdc"), ("sdc", "sda")] {
        for c in &p.device(d).cells {
            assert!(
                !c.concurrent_with.iter().any(|x| x == other),
                "{d} beside {other}"
            );
        }
    }
    assert!(p.device("sda").cells[0]
        .concurrent_with
        .iter()
        .any(|x| x == "mmcblk0"));
}

/// `calibrate` on a board whose SATA port and first USB root hub share something no path
/// shows: their seq-reads beside each other lose 30 %. The first phase finds the two figures
/// that moved and joins their lanes; the second runs them one after the other beside the SD
/// card and finds every figure within ±5 %: the finding is auto with that one shared lane.
#[test]
fn calibrate_joins_the_lanes_whose_figures_move_together_and_checks_the_result() {
    use usbperf::matrix::calibrate::{self, Finding};
    use usbperf::matrix::schedule::{LaneKey, ScheduleMode};
    let tree = Tree::new();
    let only_seq_read = "tests:\n  - {workload: seq-read, size: 1M, runtime: 1s}\n";
    let mut runs = Vec::new();
    let found = calibrate::calibrate(
        2,
        Vec::new(),
        |mode, shared, phase, round| {
            let groups: Vec<String> = shared
                .iter()
                .map(|g| {
                    let k: Vec<&str> = g.iter().map(|k| k.0.as_str()).collect();
                    format!("[{}]", k.join(", "))
                })
                .collect();
            let mut s = Scenario::new(&format!(
                "schedule: {}\nshared_lanes: [{}]\n{}{only_seq_read}",
                mode.as_str(),
                groups.join(", "),
                raw(&["sda", "sdc", "mmcblk0"])
            ));
            s.report_dir =
                Some(tree.scratch(&format!("reports-{phase}-{round}-{}", mode.as_str())));
            s.script = vec![
                ("sda", SeqRead, Act::Contend("sdc", 100.0)),
                ("sdc", SeqRead, Act::Contend("sda", 200.0)),
                ("mmcblk0", SeqRead, Act::Contend("none", 50.0)),
            ];
            runs.push((phase, round, mode));
            Ok(play(&tree, s).outcome.report)
        },
        |_| {},
        || false,
    )
    .unwrap();
    use ScheduleMode::{Auto, Serial};
    assert_eq!(
        runs,
        [
            (1, 1, Serial),
            (1, 1, Auto),
            (1, 2, Auto),
            (1, 2, Serial),
            (2, 1, Serial),
            (2, 1, Auto),
            (2, 2, Auto),
            (2, 2, Serial)
        ],
        "two phases of two rounds, the order swapped every round"
    );
    let joined = vec![vec![LaneKey("usb:usb1".into()), LaneKey("ata:ata1".into())]];
    assert_eq!(found.finding, Finding::Auto(joined.clone()));
    assert_eq!(found.phases.len(), 2);
    let first = &found.phases[0].comparison;
    let moved: Vec<(&str, f64)> = first
        .moved()
        .iter()
        .map(|f| (f.device.as_str(), f.ratio().unwrap()))
        .collect();
    assert_eq!(moved.len(), 2, "{moved:?}");
    for (d, r) in &moved {
        assert!(
            ["sda", "sdc"].contains(d) && (r - 0.7).abs() < 1e-9,
            "{moved:?}"
        );
    }
    assert_eq!(found.phases[1].shared_lanes, joined);
    let second = &found.phases[1].comparison;
    assert!(second.moved().is_empty(), "{:?}", second.figures);
    assert_eq!(second.worst_beside(), Some(0.0), "{:?}", second.figures);
    let snippet = found.snippet(
        "fixture",
        Utc.with_ymd_and_hms(2026, 12, 1, 8, 0, 0).unwrap(),
    );
    assert!(
        snippet.ends_with("schedule: auto\nshared_lanes:\n  - [usb:usb1, ata:ata1]\n"),
        "{snippet}"
    );
    // The snippet is a config a profile takes as it is.
    let back = config::parse(&snippet, "snippet.yaml").unwrap();
    assert_eq!(back.shared_lanes, Some(joined));
    assert_eq!(back.schedule, Some(ScheduleMode::Auto));
}

/// `calibrate` with a figure that varies from round to round: the SD card's seq-read beside
/// the other lanes is 0.70-1.10 of serial, 0.90 on the mean, with no pattern. Two rounds
/// show neither a hold nor a move, so the phase runs more, two at a time (each mode first
/// as often as the other), up to six; its interval still reaches serial and beyond the
/// tolerance, so its mean over the six decides: beyond ±5 %, it counts as moved and its
/// lane is joined, and the words say so. The figures that did not change at all held.
#[test]
fn calibrate_runs_more_rounds_for_a_figure_not_told_from_noise_then_joins_it() {
    use usbperf::matrix::calibrate::{self, Finding, MAX_ROUNDS};
    use usbperf::matrix::schedule::ScheduleMode;
    let tree = Tree::new();
    let only_seq_read = "tests:\n  - {workload: seq-read, size: 1M, runtime: 1s}\n";
    let noisy = [35.0, 55.0, 38.0, 52.0, 36.0, 54.0];
    let mut runs = 0;
    let mut said = Vec::new();
    let found = calibrate::calibrate(
        2,
        Vec::new(),
        |mode, _shared, phase, round| {
            let mut s = Scenario::new(&format!(
                "schedule: {}\n{}{only_seq_read}",
                mode.as_str(),
                raw(&["sda", "sdc", "mmcblk0"])
            ));
            s.report_dir =
                Some(tree.scratch(&format!("reports-{phase}-{round}-{}", mode.as_str())));
            let sd = match mode {
                ScheduleMode::Auto => noisy[(round - 1) % noisy.len()],
                _ => 50.0,
            };
            s.script = vec![
                ("sda", SeqRead, Act::Contend("none", 100.0)),
                ("sdc", SeqRead, Act::Contend("none", 200.0)),
                ("mmcblk0", SeqRead, Act::Contend("none", sd)),
            ];
            runs += 1;
            Ok(play(&tree, s).outcome.report)
        },
        |line| said.push(line.to_string()),
        || false,
    )
    .unwrap();
    assert_eq!(runs, 2 * MAX_ROUNDS, "{said:#?}");
    let first = &found.phases[0].comparison;
    assert_eq!(first.rounds, MAX_ROUNDS);
    let sd = first
        .figures
        .iter()
        .find(|f| f.device == "mmcblk0")
        .unwrap();
    assert!(sd.undecided(), "{sd:?}");
    assert!((sd.ratio().unwrap() - 0.9).abs() < 1e-9, "{sd:?}");
    assert!(first.moved().is_empty(), "{:?}", first.figures);
    let more: Vec<&String> = said
        .iter()
        .filter(|l| {
            l.contains("not yet shown within +-5 % of serial or beyond it: mmcblk0 seq-read")
        })
        .collect();
    assert_eq!(more.len(), 2, "{said:#?}");
    assert!(
        more[0].ends_with("measuring up to round 4 of at most 6"),
        "{more:?}"
    );
    assert!(
        more[1].ends_with("measuring up to round 6 of at most 6"),
        "{more:?}"
    );
    assert!(
        said.iter().any(|l| l.contains(&format!(
            "beyond +-5 % on their mean of {MAX_ROUNDS} rounds, counted as moved: mmcblk0 seq-read -10.0 % +-"
        ))),
        "{said:#?}"
    );
    for f in first.figures.iter().filter(|f| f.device != "mmcblk0") {
        assert_eq!(f.movement(), calibrate::Move::Held, "{f:?}");
    }
    assert!(
        matches!(&found.finding, Finding::Serial(why) if why.contains("every lane was joined")),
        "{:?}",
        found.finding
    );
}

/// A figure within `marginal_percent` of its limit is marginal: a miss is measured again up to
/// `retest` times and every attempt is kept; a pass is a note, never a failure. An I/O error
/// or a kernel event is never retested.
#[test]
fn marginal_misses_are_retested_and_every_attempt_is_kept() {
    let mib = |v: f64| {
        Act::Figures(Figures {
            mib_per_s: Some(v),
            ..Figures::default()
        })
    };
    struct Row {
        what: &'static str,
        rule: &'static str,
        acts: Vec<Act>,
        pass: bool,
        retests: u32,
        marginal: bool,
        words: &'static str,
    }
    let rule = "{select: {name: sda}, workload: seq-read, min_mib_per_s: 100, \
                marginal_percent: 10, retest: 2}";
    let rows = [
        Row {
            what: "a clear pass",
            rule,
            acts: vec![mib(150.0)],
            pass: true,
            retests: 0,
            marginal: false,
            words: "pass",
        },
        Row {
            what: "a pass within the band: a note, no retest",
            rule,
            acts: vec![mib(105.0)],
            pass: true,
            retests: 0,
            marginal: true,
            words: "pass (marginal)",
        },
        Row {
            what: "a marginal miss, then a pass",
            rule,
            acts: vec![mib(95.0), mib(120.0)],
            pass: true,
            retests: 1,
            marginal: false,
            words: "pass after 1 retest",
        },
        Row {
            what: "marginal misses until the budget is spent",
            rule,
            acts: vec![mib(95.0), mib(96.0), mib(97.0)],
            pass: false,
            retests: 2,
            marginal: true,
            words: "fail after 2 retests",
        },
        Row {
            what: "a clear miss is not retested",
            rule,
            acts: vec![mib(50.0), mib(150.0)],
            pass: false,
            retests: 0,
            marginal: false,
            words: "fail",
        },
        Row {
            what: "an I/O error is never retested",
            rule,
            acts: vec![Act::IoError(vec![]), mib(150.0)],
            pass: false,
            retests: 0,
            marginal: false,
            words: "fail",
        },
        Row {
            what: "a marginal miss beside a kernel error is never retested",
            rule,
            acts: vec![
                Act::Log(vec![
                    "blk_update_request: I/O error, dev sda, sector 2048 op 0x0:(READ)".into(),
                ]),
                mib(150.0),
            ],
            pass: false,
            retests: 0,
            marginal: false,
            words: "fail",
        },
        Row {
            what: "the profile's retest when the rule has none",
            rule: "{select: {name: sda}, workload: seq-read, min_mib_per_s: 100, \
                   marginal_percent: 10}",
            acts: vec![mib(95.0), mib(99.0), mib(98.0), mib(120.0)],
            pass: true,
            retests: 3,
            marginal: false,
            words: "pass after 3 retests",
        },
    ];
    for row in rows {
        let tree = Tree::new();
        let mut s = Scenario::new(&format!(
            "{}retest: 3\ntests:\n  - {{workload: seq-read, size: 1M}}\nthresholds:\n  - {}\n",
            raw(&["sda"]),
            row.rule
        ));
        for a in &row.acts {
            s.script.push(("sda", SeqRead, a.clone()));
        }
        let p = play(&tree, s);
        let d = p.device("sda");
        let what = format!("{}: {:?}", row.what, d.verdict);
        assert_eq!(d.verdict.pass, row.pass, "{what}");
        assert_eq!(d.verdict.retests, row.retests, "{what}");
        assert_eq!(d.verdict.marginal, row.marginal, "{what}");
        assert_eq!(d.verdict.words(), row.words, "{what}");
        let cell = &d.cells[0];
        assert_eq!(cell.attempts.len() as u32, row.retests, "{what}");
        for a in &cell.attempts {
            // Every earlier attempt failed on a marginal figure only, and kept its figure.
            assert_eq!(a.status, CellStatus::Failed, "{what}");
            assert!(a.reasons.iter().any(|r| r.marginal), "{what}");
            assert!(a.result.is_some(), "{what}");
        }
        if row.retests > 0 {
            assert!(
                p.lines
                    .iter()
                    .any(|l| l.contains("measuring it again (retest 1 of")),
                "{what}: {:?}",
                p.lines
            );
        }
        // The report as written holds the attempts and is valid against its schema.
        if let ReportPlace::File(f) = &p.outcome.place {
            validate_reports(std::slice::from_ref(f));
        }
    }
}

/// A part outside the board's `parts:` list fails its device with reason kind `part`; the
/// listed part passes.
#[test]
fn a_part_outside_the_approved_list_fails_its_device() {
    for (allowed, pass) in [
        ("{model: EHCI-HS-STICK}", true),
        ("{model: NOT-THIS-ONE}", false),
    ] {
        let tree = Tree::new();
        let s = Scenario::new(&format!(
            "{}parts:\n  - {{class: usb, allowed: [{allowed}]}}\n",
            raw(&["sda"])
        ));
        let p = play(&tree, s);
        let d = p.device("sda");
        assert_eq!(d.verdict.pass, pass, "{allowed}: {:?}", d.verdict.reasons);
        let kinds: Vec<ReasonKind> = d.verdict.reasons.iter().map(|r| r.kind).collect();
        assert_eq!(kinds.contains(&ReasonKind::Part), !pass, "{kinds:?}");
        assert_eq!(
            p.outcome.exit,
            if pass {
                Exit::Pass
            } else {
                Exit::VerdictFailed
            }
        );
    }
}

/// A USB device that enumerates again at another speed while it is tested fails with a link
/// reason naming the change and the kernel's line (cause `speed-changed`).
#[test]
fn a_link_that_changes_speed_during_the_run_is_named() {
    let tree = Tree::new();
    let mut s = Scenario::new(&raw(&["sde"]));
    let line = "usb 4-2: reset high-speed USB device number 3 using xhci_hcd";
    s.script
        .push(("sde", SeqRead, Act::Log(vec![line.to_string()])));
    let p = play(&tree, s);
    let d = p.device("sde");
    assert!(!d.verdict.pass);
    let r = d
        .verdict
        .reasons
        .iter()
        .find(|r| r.kind == ReasonKind::Link)
        .unwrap_or_else(|| panic!("no link reason: {:?}", d.verdict.reasons));
    assert_eq!(r.cause.as_deref(), Some("speed-changed"), "{r:?}");
    assert!(
        r.text
            .contains("port 4-2 changed speed while it was tested: it came up at 5000M"),
        "{}",
        r.text
    );
    assert!(r.text.contains(line), "{}", r.text);
    assert_eq!(r.measured, Some(480.0));
    if let ReportPlace::File(f) = &p.outcome.place {
        validate_reports(std::slice::from_ref(f));
    }
}

/// `sd_speed_claim: true`: an SD card whose sequential write falls short of what its SD Status
/// claims fails. The recorded QEMU card claims nothing (its `ssr` is zeros); the tree is edited
/// so it claims Class 10, U3 and V30 (30 MB/s).
#[test]
fn an_sd_card_that_writes_slower_than_it_claims_fails() {
    for (mib, pass) in [(12.0, false), (40.0, true)] {
        let tree = Tree::new();
        let card = tree
            .sys()
            .join("devices/pci0000:00/0000:00:06.0/mmc_host/mmc0/mmc0:4567");
        let mut ssr = "0".repeat(128).into_bytes();
        ssr[16..18].copy_from_slice(b"04");
        ssr[28..30].copy_from_slice(b"30");
        ssr[30..32].copy_from_slice(b"1e");
        std::fs::write(card.join("ssr"), [ssr, b"\n".to_vec()].concat()).unwrap();
        let mut s = Scenario::new(&format!(
            "{}tests:\n  - {{workload: seq-write, size: 1M}}\nthresholds:\n  - {{select: {{class: sd}}, sd_speed_claim: true}}\n",
            raw(&["mmcblk0"])
        ));
        s.script.push((
            "mmcblk0",
            SeqWrite,
            Act::Figures(Figures {
                mib_per_s: Some(mib),
                ..Figures::default()
            }),
        ));
        let p = play(&tree, s);
        let d = p.device("mmcblk0");
        let claims = d.disk.mmc.as_ref().and_then(|m| m.speed_claims);
        assert_eq!(
            claims.map(|c| c.min_write_mb_per_s()),
            Some(30),
            "{:?}",
            d.disk.mmc
        );
        assert_eq!(d.verdict.pass, pass, "{mib}: {:?}", d.verdict.reasons);
        if !pass {
            assert!(
                p.reasons("mmcblk0")
                    .contains("MB/s is below the 30 MB/s the card claims (Class 10, U3, V30"),
                "{}",
                p.reasons("mmcblk0")
            );
        }
    }
}

/// `run --dry-run` prints the plan `run` executes: the same disks, chosen by the same rules,
/// placed the same way (raw, refused because mounted, files), in the same lanes, with the
/// same required rule missing.
#[test]
fn the_dry_run_and_the_run_place_the_same_devices_the_same_way() {
    let tree = Tree::new();
    let mut s = Scenario::new(
        "devices:\n  - {select: {name: sda}, target: raw}\n  - {select: {name: sdb}, target: raw}\n\
         \x20 - {select: {name: sdz}, required: true}\n  - {select: {class: usb}}\n",
    );
    s.facts = SystemFacts {
        mounts: usbperf::discover::parse::mountinfo(
            "36 25 8:16 / /media/stick rw,relatime shared:1 - ext4 /dev/sdb rw\n",
        ),
        ..SystemFacts::default()
    };
    let cfg = config_of(&tree, &s);
    let sys = SysfsRoot::at(&tree.sys());
    let inv = usbperf::discover::discover(&sys, Backend::Sysfs).unwrap();
    let shown = usbperf::matrix::plan::dry_run(&cfg, &inv, &s.facts, &sys);
    let planned: Vec<_> = shown
        .devices
        .iter()
        .map(|d| (d.name.clone(), d.rule, d.placement.clone()))
        .collect();
    let p = play(&tree, s);
    let report = &p.outcome.report;
    let ran: Vec<_> = report
        .devices
        .iter()
        .map(|d| (d.name.clone(), d.rule, d.placement.clone()))
        .collect();
    assert_eq!(ran, planned);
    // The plan is not trivial: a raw disk, a refused one and one chosen by class.
    assert!(planned.len() >= 3, "{planned:?}");
    let modes: Vec<String> = planned
        .iter()
        .map(|(_, _, p)| serde_json::to_value(p).unwrap()["mode"].to_string())
        .collect();
    assert!(modes.iter().any(|m| m.contains("raw-write")), "{modes:?}");
    assert!(modes.iter().any(|m| m.contains("refused")), "{modes:?}");
    assert_eq!(
        report.schedule.as_ref().map(|s| &s.lanes),
        Some(&shown.schedule.lanes)
    );
    assert_eq!(shown.missing_required, vec![2]);
    assert!(texts(&report.verdict.reasons)
        .join("\n")
        .contains("devices[2]: required, not found"));
}
