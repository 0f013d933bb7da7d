//! Owns the factory run: wait for the required devices, choose and place them safely, run the
//! matrix cell by cell while watching the kernel log, judge every device and the unit, and
//! rewrite the report after each cell. Everything it reads of the machine comes in an
//! [`Env`]; `cli::run` builds the live one and prints what [`run`] returns.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::cell::{self, Aftermath, CellPlan};
use super::concurrent::{Entry, Gate, KmsgHub, Overlap, Window};
use super::env::Env;
use super::plan::{self, Plan};
use super::schedule::{self, AloneCell, AloneRule, ScheduleMode};
use super::select::{self, Chosen, Placement};
use super::verdict::{self, Reason, ReasonKind, Verdict};
use crate::config::{Config, ReportFormat, TargetSpec};
use crate::discover::usbpower::UsbAwake;
use crate::discover::{self, DiscoverError, Inventory};
use crate::events;
use crate::exit::Exit;
use crate::metric;
use crate::report::file::{ReportFile, ReportPlace};
use crate::report::schema::{
    Attempt, DeviceReport, Report, RunStatus, Schedule, Tool, SCHEMA_VERSION,
};
use crate::report::unit::{self, UnitIdentity};
use crate::safety::testfile;
use crate::units;
use crate::workload::RunOptions;

/// What the run needs besides the machine: the resolved configuration and who it runs for.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub config: Config,
    pub unit: UnitIdentity,
    /// This run's id (`report::schema::new_report_id`): in the report and its file name.
    pub report_id: String,
    /// Tried in order when the configured report directory cannot be written.
    pub fallback_report_dirs: Vec<PathBuf>,
}

/// A finished run.
#[derive(Debug)]
pub struct RunOutcome {
    pub report: Report,
    /// The exit code the report stands for: `Error` when the record reached no file or its
    /// file holds an earlier state.
    pub exit: Exit,
    pub place: ReportPlace,
    /// Whether the report is in the configured directory (not a fallback).
    pub in_configured_dir: bool,
    /// The filesystem that loses the report at the next boot (tmpfs, ramfs), when a fallback
    /// put it on one.
    pub lost_at_reboot: Option<&'static str>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Discover(#[from] DiscoverError),
}

impl crate::exit::Classify for RunError {
    fn exit(&self) -> crate::exit::Exit {
        match self {
            RunError::Discover(e) => e.exit(),
        }
    }
}

/// The runtime directory, then the temporary one: where the report goes when the configured
/// directory cannot be written (a read-only or full rootfs).
pub fn default_fallback_report_dirs() -> Vec<PathBuf> {
    vec![
        PathBuf::from("/run/usbperf/reports"),
        std::env::temp_dir().join("usbperf-reports"),
    ]
}

/// The report's file name: the time orders reports at a glance; the run id keeps two runs in
/// one second apart.
pub fn report_file_name(
    unit: &UnitIdentity,
    started: chrono::DateTime<chrono::Utc>,
    report_id: &str,
    format: ReportFormat,
) -> String {
    format!(
        "usbperf-{}-{}-{}.{}",
        unit::file_label(unit),
        started.format("%Y%m%dT%H%M%SZ"),
        report_id.get(..8).unwrap_or(report_id),
        match format {
            ReportFormat::Json => "json",
            ReportFormat::Yaml => "yaml",
        }
    )
}

/// The report and its file: one writer at a time, rewritten after every finished cell.
struct Book {
    report: Report,
    file: ReportFile,
}

impl Book {
    fn save(&mut self) {
        self.file.save(&self.report);
    }
}

/// What the lanes of a run share while they run (at the same time with `schedule: auto`).
struct Lanes<'s, 'a> {
    sysfs: &'s crate::discover::SysfsRoot,
    clock: &'a dyn super::env::Clock,
    engine: &'a dyn super::env::CellEngine,
    stop: &'s crate::safety::signals::StopFlag,
    progress: &'a dyn super::env::Progress,
    system: &'a dyn super::env::SystemSource,
    cpus: usize,
    mode: ScheduleMode,
    /// Set when the machine's CPUs saturated while cells ran together: every later cell of
    /// the run runs alone.
    fell_back: std::sync::atomic::AtomicBool,
    book: Mutex<Book>,
    kmsg: KmsgHub<'a>,
    gate: Gate,
    overlap: Overlap,
    /// The live status of each running device, shown together.
    statuses: Mutex<BTreeMap<String, String>>,
}

impl Lanes<'_, '_> {
    fn book(&self) -> MutexGuard<'_, Book> {
        // A lane that panicked lost its cell; the report of the others is still written.
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn status(&self, disk: &str, msg: Option<String>) {
        let mut st = self.statuses.lock().unwrap_or_else(|e| e.into_inner());
        match msg {
            Some(m) => st.insert(disk.to_string(), m),
            None => st.remove(disk),
        };
        if !st.is_empty() {
            let all: Vec<&str> = st.values().map(String::as_str).collect();
            self.progress.status(&all.join("  |  "));
        }
    }
}

/// Runs the factory matrix on the machine `env` describes.
pub fn run(mut env: Env<'_>, settings: RunSettings) -> Result<RunOutcome, RunError> {
    let cfg = &settings.config;
    let started = env.clock.now();
    let path = cfg.report_dir.join(report_file_name(
        &settings.unit,
        started,
        &settings.report_id,
        cfg.report_format,
    ));

    let inv = wait_for_devices(&env, cfg)?;
    let facts = env.system.facts();
    // The plan `run --dry-run` prints, executed.
    let Plan {
        chosen,
        placements,
        missing,
        lanes,
    } = plan::plan(cfg, &inv, &facts, &env.sysfs);
    if chosen.is_empty() {
        env.progress.line(
            "usbperf-matrix: no device matches the configuration's selectors (by default every \
             non-system disk: system disks, loop and virtual devices are never picked): nothing \
             to test; plug in a device or select one in the config",
        );
    }
    env.progress
        .line(&format!("usbperf-matrix: {}", env.engine.reason()));
    // The lanes of the chosen disks: which run together with `schedule: auto`. Said and
    // recorded in serial runs too, so the two can be compared.
    if !lanes.is_empty() {
        let said: Vec<String> = lanes
            .iter()
            .map(|l| format!("{} [{}]", l.key, l.disks.join(" ")))
            .collect();
        env.progress.line(&format!(
            "usbperf-matrix: schedule {}; {} lane(s): {}",
            cfg.schedule.as_str(),
            lanes.len(),
            said.join(", ")
        ));
    }

    // The engine chosen is said on the progress line above and recorded in every cell: the
    // normal choice is no warning. Only `auto` falling back to the thread pool is, since the
    // figures are then not io_uring's.
    let mut warnings = inv.warnings.clone();
    if env.engine.reason().contains("fallback") {
        warnings.push(format!("engine: {}", env.engine.reason()));
    }
    if let Err(e) = &env.kernel_log {
        warnings.push(format!(
            "kernel events are not watched, so I/O errors, resets and disconnects cannot be \
             attributed: {e}"
        ));
    }
    let mut devices = Vec::new();
    for (c, placement) in chosen.iter().zip(placements) {
        if let Placement::File(ft) = &placement {
            for stale in testfile::remove_stale(&ft.dir) {
                warnings.push(format!(
                    "removed a stale test file left by an earlier run: {}",
                    stale.display()
                ));
            }
        }
        devices.push(DeviceReport {
            name: c.disk.name.clone(),
            label: c.rule.label.clone(),
            rule: c.rule_index,
            disk: c.disk.clone(),
            placement,
            link_checks: Vec::new(),
            cells: cfg
                .tests
                .iter()
                .map(|t| cell::pending(t.workload))
                .collect(),
            power_cut: None,
            verdict: Verdict::default(),
        });
    }
    let missing_reasons: Vec<Reason> = missing
        .iter()
        .map(|(i, r)| {
            Reason::new(
                ReasonKind::MissingDevice,
                format!(
                    "devices[{i}]{}: required, not found (no disk with {})",
                    r.label
                        .as_ref()
                        .map(|l| format!(" \"{l}\""))
                        .unwrap_or_default(),
                    r.select.describe()
                ),
            )
            .rule(format!("devices[{i}]"))
        })
        .collect();
    let missing_devices = verdict::texts(&missing_reasons);

    let report = Report {
        schema_version: SCHEMA_VERSION,
        report_id: Some(settings.report_id.clone()),
        tool: Tool::this(),
        started_at: started,
        finished_at: None,
        status: RunStatus::Running,
        interrupted_by: None,
        exit_code: None,
        unit: settings.unit.clone(),
        config: cfg.clone(),
        inventory_backend: inv.backend.clone(),
        devices,
        missing_devices,
        verdict: Verdict::default(),
        warnings,
        schedule: Some(Schedule {
            mode: cfg.schedule,
            lanes: lanes.clone(),
            alone: Vec::new(),
        }),
        flash: None,
    };
    let json = cfg.report_format == ReportFormat::Json;
    let mut book = Book {
        report,
        file: ReportFile::new(path, json),
    };
    book.save();
    if let Some(first) = book.file.error().map(str::to_string) {
        // The configured directory refuses the report (read-only or full rootfs). The unit is
        // tested anyway: the report goes to a fallback directory if one takes it, and to
        // standard output (the journal, the serial log) at the end whatever happens.
        let landed = book
            .file
            .fall_back(&book.report, &settings.fallback_report_dirs);
        let now = if landed {
            format!("it is written to {} instead", book.file.path().display())
        } else {
            "no fallback directory could be written either".to_string()
        };
        book.report.warnings.push(format!(
            "the report directory {} cannot be written ({first}): {now}, and the whole report \
             is printed to standard output at the end; fix report_dir or the filesystem",
            cfg.report_dir.display()
        ));
        book.save();
        env.progress.line(&format!(
            "usbperf-matrix: warning: cannot write the report to {} ({first}); {now}",
            cfg.report_dir.display()
        ));
    }
    if book.file.error().is_none() {
        env.progress.line(&format!(
            "usbperf-matrix: report {}",
            book.file.path().display()
        ));
    }

    // Serial: one lane of every device in the run's order. Auto: a lane per shared bus.
    let order: Vec<Vec<usize>> = match cfg.schedule {
        ScheduleMode::Serial => vec![(0..chosen.len()).collect()],
        ScheduleMode::Auto => lanes
            .iter()
            .map(|l| {
                l.disks
                    .iter()
                    .filter_map(|d| chosen.iter().position(|c| &c.disk.name == d))
                    .collect()
            })
            .collect(),
    };
    let kernel_log = std::mem::replace(&mut env.kernel_log, Err(String::new()));
    let shared = Lanes {
        sysfs: &env.sysfs,
        clock: env.clock,
        engine: env.engine,
        stop: &env.stop,
        progress: env.progress,
        system: env.system,
        cpus: env.cpus.max(1),
        fell_back: std::sync::atomic::AtomicBool::new(false),
        mode: cfg.schedule,
        book: Mutex::new(book),
        kmsg: KmsgHub::new(kernel_log),
        gate: Gate::default(),
        overlap: Overlap::default(),
        statuses: Mutex::new(BTreeMap::new()),
    };
    std::thread::scope(|s| {
        for lane in &order {
            let (shared, chosen, facts) = (&shared, &chosen, &facts);
            s.spawn(move || {
                for &di in lane {
                    run_device(shared, &chosen[di], di, cfg, facts);
                }
            });
        }
    });
    let mut book = shared.book.into_inner().unwrap_or_else(|e| e.into_inner());

    // The raw flash: counters, and the scans and speed tests the profile asks for, after the
    // block devices (it shares no lane with them, and a signal stops it between blocks).
    let flash = super::flash::run(
        &inv.flash,
        &cfg.flash,
        env.sysfs.nodes_are_live(),
        &env.stop,
    );
    if let Some(f) = &flash {
        for d in &f.devices {
            env.progress.line(&format!(
                "usbperf-matrix: flash {} ({}): {}",
                d.name,
                d.label,
                if d.verdict.pass {
                    "pass".to_string()
                } else {
                    verdict::texts(&d.verdict.reasons).join("; ")
                }
            ));
        }
    }
    book.report.flash = flash;

    // Verdicts.
    let interrupted = env.stop.requested();
    for (di, c) in chosen.iter().enumerate() {
        let rules = verdict::applicable(&cfg.thresholds, &c.disk, &facts);
        let part = super::parts::check(&c.disk, &cfg.parts, cfg.board_revision.as_deref());
        // A required device is expected to run every test, unless its rule asks for reads
        // only (`target: read-only`) or a safety rule no config lifts keeps writes off it (a
        // system disk, swap, a RAID/LVM member, an eMMC boot or RPMB area): then its write
        // tests are not expected at all.
        let expected = c.rule.required
            && !matches!(c.rule.target, TargetSpec::ReadOnly)
            && crate::safety::system_reasons(&c.disk, &facts).is_empty();
        verdict::judge_device(&mut book.report.devices[di], &rules, part, expected);
    }
    book.report.verdict = verdict::judge_unit(
        &book.report.devices,
        book.report.flash.as_ref(),
        &missing_reasons,
        interrupted.then(|| env.stop.signal_name()),
    );
    let exit = if interrupted {
        Exit::Incomplete
    } else if book.report.verdict.pass {
        Exit::Pass
    } else {
        Exit::VerdictFailed
    };
    book.report.status = if interrupted {
        RunStatus::Interrupted
    } else {
        RunStatus::Complete
    };
    book.report.interrupted_by = env.stop.signal_name();
    book.report.finished_at = Some(env.clock.now());
    let in_configured_dir = book.file.path().parent() == Some(cfg.report_dir.as_path());
    // A report a fallback put on tmpfs is gone at the next boot: a hole in the production
    // record as surely as one in no file, so the run is an error (exit 4, ERROR on the result
    // line) and the boot service tries again, whatever the tests said.
    let lost_at_reboot = if in_configured_dir {
        None
    } else {
        crate::report::file::lost_at_reboot(book.file.path())
    };
    let exit = match lost_at_reboot {
        Some(fs) => {
            book.report.warnings.push(format!(
                "the report is on {fs} ({}), which is emptied at the next boot: the run is an \
                 error until report_dir can be written; copy the report or upload it first",
                book.file.path().display()
            ));
            Exit::Error
        }
        None => exit,
    };
    book.report.exit_code = Some(exit as u8);
    book.save();
    env.progress.done();

    let place = book.file.place();
    let Book { mut report, .. } = book;
    let exit = match place {
        ReportPlace::File(_) => exit,
        // A report that reached no file, or whose file holds an earlier state (`running`, no
        // verdict), is a hole in the production record: exit 4, so the boot service runs
        // again at the next boot, and the copy on standard output says so too.
        ReportPlace::Stale(..) | ReportPlace::Nowhere(_) => {
            report.exit_code = Some(Exit::Error as u8);
            Exit::Error
        }
    };
    Ok(RunOutcome {
        report,
        exit,
        place,
        in_configured_dir,
        lost_at_reboot,
    })
}

/// Discovers devices, waiting up to `wait_devices` for every `required` rule to match.
fn wait_for_devices(env: &Env<'_>, cfg: &Config) -> Result<Inventory, DiscoverError> {
    let deadline = env.clock.elapsed() + cfg.wait_devices.0;
    let mut announced = false;
    loop {
        let inv = discover::discover(&env.sysfs, env.backend)?;
        let facts = env.system.facts();
        let (_, missing) = select::choose(&inv, &cfg.devices, &facts);
        if missing.is_empty() || env.clock.elapsed() >= deadline || env.stop.requested() {
            return Ok(inv);
        }
        if !announced {
            env.progress.line(&format!(
                "usbperf-matrix: waiting up to {} for {} required device(s)",
                units::format_duration(cfg.wait_devices.0),
                missing.len()
            ));
            announced = true;
        }
        env.clock.sleep(Duration::from_millis(500));
    }
}

/// Runs every test of one device in turn; stops early on a signal or when the disk vanishes.
fn run_device(
    r: &Lanes<'_, '_>,
    c: &Chosen,
    di: usize,
    cfg: &Config,
    facts: &crate::safety::SystemFacts,
) {
    let rules = verdict::applicable(&cfg.thresholds, &c.disk, facts);
    let placement = r.book().report.devices[di].placement.clone();
    let keys = events::DeviceKeys::from_disk(&c.disk);
    // Runtime autosuspend resets a USB device on resume with the same kernel lines as an
    // error-recovery reset; keep the device and its hubs awake while they are tested.
    let _awake = UsbAwake::pin(r.sysfs, &c.disk);
    // The kernel's lines about the device from its first test to its last, each test taking
    // those logged since the one before: a filesystem's error logged just after a test ended
    // is the next test's, whose failure it explains.
    let mut window = r.kmsg.open();
    for (ci, spec) in cfg.tests.iter().enumerate() {
        if r.stop.requested() {
            return;
        }
        let cell = CellAt {
            c,
            di,
            ci,
            spec,
            cfg,
            rules: &rules,
            keys: &keys,
            placement: &placement,
        };
        let fell_back = r.fell_back.load(std::sync::atomic::Ordering::SeqCst);
        let mut alone = match r.mode {
            ScheduleMode::Serial => None,
            ScheduleMode::Auto if fell_back => Some(Some((AloneRule::FellBack, None))),
            ScheduleMode::Auto => Some(None),
        };
        let ran = loop {
            let ran = run_cell(r, &cell, &mut window, alone);
            if alone != Some(None) || !ran.clean {
                break ran;
            }
            // The machine's CPUs saturated while it ran beside others: every figure measured
            // then may be the CPU's. Measured again alone, and the rest of the run is serial.
            if let Some(busy) = ran.machine_busy {
                if schedule::machine_saturated(busy, ran.together) {
                    // Every cell measured again says so; the switch to one test at a time is
                    // said by the lane that made it.
                    let first = !r.fell_back.swap(true, std::sync::atomic::Ordering::SeqCst);
                    r.progress.line(&format!(
                        "usbperf-matrix: {} {}: the CPUs were {busy:.0} % busy while {} \
                         device(s) ran together: measuring it again alone{}",
                        c.disk.name,
                        spec.workload.as_str(),
                        ran.together,
                        if first {
                            ", and the rest of the run one test at a time"
                        } else {
                            ""
                        }
                    ));
                    alone = Some(Some((AloneRule::MachineCpu, Some(busy))));
                    continue;
                }
            }
            // Beside others it used more CPU than its share: the CPU, not the device, may have
            // set its figure. Measured again alone, once; that figure is the one kept.
            if let Some(cpu) = ran.cpu_percent {
                if schedule::cpu_limited(cpu, r.cpus, ran.together) {
                    r.progress.line(&format!(
                        "usbperf-matrix: {} {}: beside {} other device(s) it used {cpu:.0} % of a \
                         CPU: measuring it again alone",
                        c.disk.name,
                        spec.workload.as_str(),
                        ran.together - 1
                    ));
                    alone = Some(Some((AloneRule::MeasuredCpu, Some(cpu))));
                    continue;
                }
            }
            break ran;
        };
        let ran = retest_marginal(r, &cell, &mut window, ran, alone);
        if ran.vanished {
            let mut b = r.book();
            cell::not_run_vanished(&mut b.report.devices[di].cells[ci + 1..], &c.disk.name);
            b.save();
            return;
        }
    }
}

/// Measures a cell again while its only failures are marginal threshold misses, up to the
/// rule's `retest` (else the profile's); every earlier attempt stays in the cell. A failure of
/// any other kind (an I/O error, a kernel event, a vanished device) is never retested.
fn retest_marginal(
    r: &Lanes<'_, '_>,
    at: &CellAt<'_>,
    window: &mut Window<'_, '_>,
    mut ran: Ran,
    alone: Option<Option<(AloneRule, Option<f64>)>>,
) -> Ran {
    let (di, ci) = (at.di, at.ci);
    let mut retests = 0u8;
    loop {
        let (only_marginal, budget) = {
            let b = r.book();
            let cell = &b.report.devices[di].cells[ci];
            (
                cell.only_marginal_failures(),
                verdict::retest_budget(cell, at.cfg),
            )
        };
        if !ran.clean || !only_marginal || retests >= budget || r.stop.requested() {
            return ran;
        }
        retests += 1;
        let mut earlier = {
            let mut b = r.book();
            let cell = &mut b.report.devices[di].cells[ci];
            let mut kept = std::mem::take(&mut cell.attempts);
            kept.push(Attempt::of(cell));
            kept
        };
        r.progress.line(&format!(
            "usbperf-matrix: {} {}: failed only by a marginal figure: measuring it again \
             (retest {retests} of {budget})",
            at.c.disk.name,
            at.spec.workload.as_str()
        ));
        ran = run_cell(r, at, window, alone);
        let mut b = r.book();
        let cell = &mut b.report.devices[di].cells[ci];
        earlier.append(&mut cell.attempts);
        cell.attempts = earlier;
        b.save();
    }
}

/// One cell to run, and what it is judged by.
struct CellAt<'c> {
    c: &'c Chosen,
    di: usize,
    ci: usize,
    spec: &'c crate::config::TestSpec,
    cfg: &'c Config,
    rules: &'c [(usize, &'c crate::config::Threshold)],
    keys: &'c events::DeviceKeys,
    placement: &'c Placement,
}

/// How a cell went, for the schedule's decisions.
struct Ran {
    vanished: bool,
    /// Passed or failed on its figures, with no kernel event: a figure worth measuring again.
    clean: bool,
    /// Its own CPU, in % of one CPU.
    cpu_percent: Option<f64>,
    /// Cells that overlapped it, itself included (1: it ran alone).
    together: usize,
    /// How busy the machine's CPUs were while it ran, in % of all of them.
    machine_busy: Option<f64>,
}

/// Places, runs and judges one cell, and rewrites the report. `alone`: `None` in a serial run;
/// in an auto run `Some(None)` to let the rules decide, `Some(Some(rule))` when a rule already
/// said it runs alone.
fn run_cell(
    r: &Lanes<'_, '_>,
    at: &CellAt<'_>,
    window: &mut Window<'_, '_>,
    alone: Option<Option<(AloneRule, Option<f64>)>>,
) -> Ran {
    let (c, di, ci, spec) = (at.c, at.di, at.ci, at.spec);
    let w = spec.workload.as_str().to_string();
    let skipped = Ran {
        vanished: false,
        clean: false,
        cpu_percent: None,
        together: 1,
        machine_busy: None,
    };
    let plan = match cell::place_cell(spec, at.cfg.engine, at.placement, &c.disk, r.engine) {
        CellPlan::NotRun { status, reason } => {
            // The kernel may say why (a filesystem gone read-only, a reset while the test
            // file was made).
            let (recs, kernel_log_error) = window.take();
            let after = Aftermath {
                kernel: events::attribute(&recs, at.keys),
                kernel_log_error,
                ..Aftermath::default()
            };
            let mut b = r.book();
            let cell = &mut b.report.devices[di].cells[ci];
            cell.status = status;
            cell.reasons = vec![reason];
            cell::judge_aftermath(cell, &c.disk.name, after);
            b.save();
            return skipped;
        }
        CellPlan::Run(plan) => plan,
    };
    // The gate: a serial run has one lane and nothing to wait for; in an auto run a cell the
    // CPU could limit runs beside others within the CPU budget, or waits for the others to
    // finish and keeps them out while it runs. A cell that waits decides again each time one
    // leaves: what it is predicted from may have been measured meanwhile.
    let (_gate, alone) = match alone {
        None => (None, None),
        Some(Some(rule)) => (Some(r.gate.exclusive()), Some(Some(rule))),
        Some(None) => {
            let mut decided = schedule::Admission::Free;
            let (guard, _) = r.gate.enter(schedule::budget(r.cpus), || {
                let measured =
                    measured_so_far(&r.book().report, di, plan.params.block_bytes, r.cpus);
                decided = schedule::admission(&plan.params, &c.disk, measured, r.cpus);
                match decided {
                    schedule::Admission::Free => Entry::Free,
                    schedule::Admission::Budget(cpu) => Entry::Budget(cpu),
                    schedule::Admission::Alone(..) => Entry::Exclusive,
                }
            });
            let alone = match decided {
                schedule::Admission::Alone(rule, cpu) => Some((rule, cpu)),
                _ => None,
            };
            (Some(guard), Some(alone))
        }
    };
    if r.stop.requested() {
        return skipped;
    }
    let mut notes = plan.notes;
    if let Some(Some((rule, cpu))) = alone {
        let mut b = r.book();
        if let Some(sch) = b.report.schedule.as_mut() {
            // One record per cell that ran alone: a cell measured again alone ran beside the
            // others first, with no record.
            sch.alone.push(AloneCell {
                device: c.disk.name.clone(),
                cell: ci,
                workload: spec.workload,
                rule,
                cpu_percent: cpu,
            });
        }
        if let (AloneRule::MachineCpu, Some(busy)) = (rule, cpu) {
            notes.push(
                Reason::new(
                    ReasonKind::Note,
                    format!(
                        "{w}: measured alone: while it ran beside other devices the CPUs were \
                         {busy:.0} % busy, so the CPU may have set that figure; the rest of the \
                         run ran one test at a time"
                    ),
                )
                .workload(spec.workload)
                .figure(
                    &metric::CPU_BUSY_PERCENT,
                    Some(busy),
                    schedule::SATURATED_PERCENT,
                ),
            );
        }
        if let (AloneRule::MeasuredCpu, Some(cpu)) = (rule, cpu) {
            notes.push(
                Reason::new(
                    ReasonKind::Note,
                    format!(
                        "{w}: measured alone: beside other devices it used {cpu:.0} % of a CPU, \
                         over half its share, so the CPU may have set that figure"
                    ),
                )
                .workload(spec.workload)
                .figure(&metric::CPU_PERCENT, Some(cpu), 0.0),
            );
        }
    }

    r.progress
        .line(&format!("usbperf-matrix: {} {w}: start", c.disk.name));
    r.status(&c.disk.name, Some(format!("{} {w}", c.disk.name)));
    let t0 = r.clock.elapsed();
    {
        let mut b = r.book();
        let cell = &mut b.report.devices[di].cells[ci];
        *cell = cell::pending(spec.workload);
        cell.started_at = Some(r.clock.now());
        cell.params = Some(plan.params.clone());
    }
    let opts = RunOptions {
        sysfs_root: r.sysfs.path().to_path_buf(),
        stop: r.stop.stop.clone(),
    };
    let mut after = Aftermath::default();
    let ticket = r.overlap.start(&c.disk.name);
    let engine = r.engine;
    let params = &plan.params;
    let ticks0 = r.system.cpu_ticks();
    let outcome = run_with_progress(r, &c.disk.name, &w, || engine.run(params, &opts));
    let machine_busy = ticks0
        .zip(r.system.cpu_ticks())
        .and_then(|(a, b)| schedule::busy_percent(a, b));
    let beside = r.overlap.finish(ticket);
    // A test file that cannot be removed (the filesystem went read-only, the device is
    // gone) is named in the report: it may still be on the medium.
    after.leftover = plan
        .file
        .and_then(|t| t.remove().err())
        .map(|e| e.to_string());
    let (recs, kernel_log_error) = window.take();
    after.kernel = events::attribute(&recs, at.keys);
    after.kernel_log_error = kernel_log_error;
    let removed = events::removal_event(&r.sysfs.path().join("class/block"), at.keys);
    after.shrunk = cell::shrunk(r.sysfs.block_size_bytes(&c.disk.name), c.disk.size_bytes);
    after.vanished = cell::vanished(removed.as_ref(), &after.kernel);
    after.kernel.extend(removed);
    r.status(&c.disk.name, None);

    let stop_requested = r.stop.requested();
    let wall = (r.clock.elapsed().saturating_sub(t0)).as_secs_f64();
    let mut b = r.book();
    let cell = &mut b.report.devices[di].cells[ci];
    cell.wall_seconds = Some(wall);
    let outcome = outcome.map_err(|e| e.to_string());
    let error = outcome.as_ref().err().cloned();
    cell::judge_outcome(cell, outcome, notes, at.rules, stop_requested);
    let vanished = after.gone();
    match (&cell.result, error) {
        // The test's own error follows from the device going away, and its remedy (a larger
        // size) would be the wrong one: the line says the cause, as the report does.
        (_, Some(_)) if vanished => r.progress.line(&format!(
            "usbperf-matrix: {} {w}: error: {} went away or shrank during the test",
            c.disk.name, c.disk.name
        )),
        (_, Some(e)) => r
            .progress
            .line(&format!("usbperf-matrix: {} {w}: error: {e}", c.disk.name)),
        (Some(res), None) => {
            // The figures limits judge (steady, or sustained after a burst), with their
            // precision, as the tables show them.
            let j = res.judged();
            let ci = j
                .ci95_percent
                .map_or(String::new(), |c| format!(" +-{c:.1}%"));
            r.progress.line(&format!(
                "usbperf-matrix: {} {w}: {} {}{:.1} MiB/s {:.0} IOPS{ci} p99 {:.2} ms, engine {}",
                c.disk.name,
                cell.status.as_str(),
                if j.sustained { "sustained " } else { "" },
                j.mib_per_s,
                j.iops,
                res.all.latency.p99_ns as f64 / 1e6,
                res.engine
            ))
        }
        (None, None) => {}
    }
    let quiet = after.kernel.is_empty() && after.leftover.is_none();
    cell::judge_aftermath(cell, &c.disk.name, after);
    cell.concurrent_with = beside;
    cell.machine_busy_percent = machine_busy;
    let ran = Ran {
        vanished,
        clean: quiet
            && matches!(
                cell.status,
                crate::report::schema::CellStatus::Passed
                    | crate::report::schema::CellStatus::Failed
            ),
        cpu_percent: cell
            .result
            .as_ref()
            .map(|res| res.cpu.usr_percent + res.cpu.sys_percent),
        together: cell.concurrent_with.len() + 1,
        machine_busy,
    };
    b.save();
    ran
}

/// What the run measured before a cell of device `di` with blocks of `block_bytes`: the
/// device's fastest figure, and the CPU per I/O of the cells with blocks no larger (any
/// device), else of this device's cells. Per cell, the larger of its job threads' CPU per
/// I/O and, when it ran alone and its device is of this one's class, the whole machine's busy
/// time over its I/Os: a block device
/// whose driver completes I/O in softirqs or kernel threads (null_blk's throttle, a USB host
/// controller's interrupts) costs CPU its job threads never see. `None` until the device has
/// a figure.
fn measured_so_far(
    report: &Report,
    di: usize,
    block_bytes: u64,
    cpus: usize,
) -> Option<schedule::Measured> {
    let own: Vec<&crate::report::schema::Cell> = report
        .devices
        .get(di)?
        .cells
        .iter()
        .filter(|c| c.result.as_ref().is_some_and(|r| r.all.ios > 0))
        .collect();
    let max_bytes_per_s = own
        .iter()
        .filter_map(|c| c.result.as_ref())
        .map(|r| r.mib_per_s * 1048576.0)
        .fold(0.0, f64::max);
    // The machine's time of another class's cell is no measure of this one: a slow device's
    // cell spreads the machine's background over few I/Os.
    let class = report.devices.get(di).map(|d| d.disk.class);
    let cost = |c: &crate::report::schema::Cell, same_class: bool| {
        let r = c.result.as_ref()?;
        let machine = match (c.machine_busy_percent, c.wall_seconds) {
            (Some(busy), Some(wall)) if same_class && c.concurrent_with.is_empty() => {
                schedule::machine_ns_per_io(busy, wall, cpus, r.all.ios)
            }
            _ => None,
        };
        Some(machine.map_or(r.cpu.cpu_ns_per_io, |m| m.max(r.cpu.cpu_ns_per_io)))
    };
    let small = report
        .devices
        .iter()
        .flat_map(|d| {
            d.cells
                .iter()
                .map(move |c| (Some(d.disk.class) == class, c))
        })
        .filter(|(_, c)| {
            c.result
                .as_ref()
                .is_some_and(|r| r.all.ios > 0 && r.params.block_bytes <= block_bytes)
        })
        .filter_map(|(same, c)| cost(c, same))
        .reduce(f64::max);
    let cpu_ns_per_io = small.or_else(|| {
        own.iter()
            .copied()
            .filter_map(|c| cost(c, true))
            .reduce(f64::max)
    })?;
    (max_bytes_per_s > 0.0).then_some(schedule::Measured {
        max_bytes_per_s,
        cpu_ns_per_io,
    })
}

/// Runs one cell's workload while reporting live throughput from the kernel's own counters
/// of the disk: in the live status where there is one, otherwise one line every 10 s
/// (serial console, journal) so a long test never looks hung.
fn run_with_progress<T: Send>(
    r: &Lanes<'_, '_>,
    disk: &str,
    what: &str,
    f: impl FnOnce() -> T + Send,
) -> T {
    super::watch::watch(
        || r.sysfs.block_stat_bytes(disk),
        Duration::from_secs(10),
        |t| {
            // A disk without counters has nothing to show but time: its status stays.
            if t.moved.is_none() {
                return;
            }
            r.status(disk, Some(format!("{disk} {what}: {}", t.words())));
            if t.line_due && r.progress.periodic_lines() {
                r.progress.line(&format!(
                    "usbperf-matrix: {disk} {what}: running {}",
                    t.words()
                ));
            }
        },
        f,
    )
}

/// The configured test directories usbperf owns (`/var/lib/usbperf/...`), which a run may
/// create; a directory of the user's is never created (on an unmounted stick's mount point it
/// would land on the rootfs).
pub fn own_dirs(cfg: &Config) -> Vec<&Path> {
    cfg.devices
        .iter()
        .filter_map(|d| match &d.target {
            crate::config::TargetSpec::Dir(dir) => Some(dir.as_path()),
            _ => None,
        })
        .filter(|dir| {
            dir.components().all(|c| {
                matches!(
                    c,
                    std::path::Component::RootDir | std::path::Component::Normal(_)
                )
            }) && dir.starts_with("/var/lib/usbperf/")
        })
        .collect()
}
