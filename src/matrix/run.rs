//! Owns the factory run: wait for the required devices, choose and place them safely, run the
//! matrix cell by cell while watching the kernel log, judge every device and the unit, and
//! rewrite the report after each cell. Everything it reads of the machine comes in an
//! [`Env`]; `cli::run` builds the live one and prints what [`run`] returns.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cell::{self, Aftermath, CellPlan};
use super::config::{Config, ReportFormat};
use super::env::Env;
use super::select::{self, Chosen, Placement};
use super::verdict::{self, Reason, ReasonKind, Verdict};
use crate::discover::usbpower::UsbAwake;
use crate::discover::{self, DiscoverError, Inventory};
use crate::events;
use crate::exit::Exit;
use crate::report::file::{ReportFile, ReportPlace};
use crate::report::schema::{DeviceReport, Report, RunStatus, Schedule, Tool, SCHEMA_VERSION};
use crate::report::unit::{self, UnitIdentity};
use crate::safety::testfile;
use crate::units;
use crate::workload::{RunOptions, WorkloadKind};

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
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Discover(#[from] DiscoverError),
}

/// The runtime directory, then the temporary one: where the report goes when the configured
/// directory cannot be written (a read-only or full rootfs).
pub fn default_fallback_report_dirs() -> Vec<PathBuf> {
    vec![
        PathBuf::from("/run/usbperf/reports"),
        std::env::temp_dir().join("usbperf-reports"),
    ]
}

/// The smallest test file worth placing on a filesystem: the smallest size any file test of
/// the matrix asks for, at most 16 MiB (larger sizes are clamped to the room the headroom
/// leaves, with a note in the report).
pub fn min_file(cfg: &Config) -> u64 {
    cfg.tests
        .iter()
        .filter(|t| t.workload != WorkloadKind::ReadBuffered)
        .filter_map(|t| t.size.map(|s| s.0))
        .min()
        .unwrap_or(16 << 20)
        .min(16 << 20)
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

/// Everything a run carries from cell to cell.
struct Runner<'e, 'a> {
    env: &'e mut Env<'a>,
    report: Report,
    file: ReportFile,
}

impl Runner<'_, '_> {
    fn save(&mut self) {
        self.file.save(&self.report);
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
    let (chosen, missing) = select::choose(&inv, &cfg.devices, &facts);
    if chosen.is_empty() {
        env.progress.line(
            "usbperf-matrix: no device matches the configuration's selectors (by default every \
             non-system disk: system disks, loop and virtual devices are never picked): nothing \
             to test; plug in a device or select one in the config",
        );
    }
    env.progress
        .line(&format!("usbperf-matrix: {}", env.engine.reason()));
    // The lanes of the chosen disks: which could run together. The run is serial; the lanes
    // are said and recorded so a concurrent schedule can be proven against it (issue 17).
    let lanes = super::schedule::lanes(
        chosen
            .iter()
            .map(|c| (c.disk.name.as_str(), c.disk.devpath.as_str())),
    );
    if !lanes.is_empty() {
        let said: Vec<String> = lanes
            .iter()
            .map(|l| format!("{} [{}]", l.key, l.disks.join(" ")))
            .collect();
        env.progress.line(&format!(
            "usbperf-matrix: schedule serial; {} lane(s): {}",
            lanes.len(),
            said.join(", ")
        ));
    }

    let mut warnings = inv.warnings.clone();
    warnings.push(format!("engine: {}", env.engine.reason()));
    if let Err(e) = &env.kernel_log {
        warnings.push(format!(
            "kernel events are not watched, so I/O errors, resets and disconnects cannot be \
             attributed: {e}"
        ));
    }
    let mut devices = Vec::new();
    for c in &chosen {
        let placement = select::place(
            c,
            &inv,
            &facts,
            &env.sysfs,
            cfg.headroom_percent,
            min_file(cfg),
        );
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
            verdict: Verdict::default(),
        });
    }
    let missing_reasons: Vec<Reason> = missing
        .iter()
        .map(|(i, r)| {
            Reason::new(
                ReasonKind::MissingDevice,
                format!(
                    "devices[{i}]{}: required, not found ({})",
                    r.label
                        .as_ref()
                        .map(|l| format!(" \"{l}\""))
                        .unwrap_or_default(),
                    serde_json::to_string(&r.select).unwrap_or_default()
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
            mode: "serial".into(),
            lanes,
        }),
    };
    let json = cfg.report_format == ReportFormat::Json;
    let mut runner = Runner {
        env: &mut env,
        report,
        file: ReportFile::new(path, json),
    };
    runner.save();
    if let Some(first) = runner.file.error().map(str::to_string) {
        // The configured directory refuses the report (read-only or full rootfs). The unit is
        // tested anyway: the report goes to a fallback directory if one takes it, and to
        // standard output (the journal, the serial log) at the end whatever happens.
        let landed = runner
            .file
            .fall_back(&runner.report, &settings.fallback_report_dirs);
        let now = if landed {
            format!("it is written to {} instead", runner.file.path().display())
        } else {
            "no fallback directory could be written either".to_string()
        };
        runner.report.warnings.push(format!(
            "the report directory {} cannot be written ({first}): {now}, and the whole report \
             is printed to standard output at the end; fix report_dir or the filesystem",
            cfg.report_dir.display()
        ));
        runner.save();
        runner.env.progress.line(&format!(
            "usbperf-matrix: warning: cannot write the report to {} ({first}); {now}",
            cfg.report_dir.display()
        ));
    }
    if runner.file.error().is_none() {
        runner.env.progress.line(&format!(
            "usbperf-matrix: report {}",
            runner.file.path().display()
        ));
    }

    for (di, c) in chosen.iter().enumerate() {
        run_device(&mut runner, c, di, cfg, &facts);
    }

    // Verdicts.
    let interrupted = runner.env.stop.requested();
    for (di, c) in chosen.iter().enumerate() {
        let rules = verdict::applicable(&cfg.thresholds, &c.disk, &facts);
        verdict::judge_device(&mut runner.report.devices[di], &rules);
    }
    runner.report.verdict = verdict::judge_unit(
        &runner.report.devices,
        &missing_reasons,
        interrupted.then(|| runner.env.stop.signal_name()),
    );
    let exit = if interrupted {
        Exit::Incomplete
    } else if runner.report.verdict.pass {
        Exit::Pass
    } else {
        Exit::VerdictFailed
    };
    runner.report.status = if interrupted {
        RunStatus::Interrupted
    } else {
        RunStatus::Complete
    };
    runner.report.interrupted_by = runner.env.stop.signal_name();
    runner.report.finished_at = Some(runner.env.clock.now());
    runner.report.exit_code = Some(exit as u8);
    runner.save();
    runner.env.progress.done();

    let place = runner.file.place();
    let in_configured_dir = runner.file.path().parent() == Some(cfg.report_dir.as_path());
    let Runner { mut report, .. } = runner;
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
    r: &mut Runner<'_, '_>,
    c: &Chosen,
    di: usize,
    cfg: &Config,
    facts: &crate::safety::SystemFacts,
) {
    let rules = verdict::applicable(&cfg.thresholds, &c.disk, facts);
    let placement = r.report.devices[di].placement.clone();
    let keys = events::DeviceKeys::from_disk(&c.disk);
    // Runtime autosuspend resets a USB device on resume with the same kernel lines as an
    // error-recovery reset; keep the device and its hubs awake while they are tested.
    let _awake = UsbAwake::pin(&r.env.sysfs, &c.disk);
    for (ci, spec) in cfg.tests.iter().enumerate() {
        if r.env.stop.requested() {
            return;
        }
        let w = verdict::workload_name(spec.workload);
        let plan = match cell::place_cell(spec, cfg.engine, &placement, &c.disk, r.env.engine) {
            CellPlan::NotRun { status, reason } => {
                let cell = &mut r.report.devices[di].cells[ci];
                cell.status = status;
                cell.reasons = vec![reason];
                r.save();
                continue;
            }
            CellPlan::Run(plan) => plan,
        };

        r.env
            .progress
            .line(&format!("usbperf-matrix: {} {w}: start", c.disk.name));
        r.env.progress.status(&format!("{} {w}", c.disk.name));
        let t0 = r.env.clock.elapsed();
        {
            let cell = &mut r.report.devices[di].cells[ci];
            cell.started_at = Some(r.env.clock.now());
            cell.params = Some(plan.params.clone());
        }
        let opts = RunOptions {
            sysfs_root: r.env.sysfs.path().to_path_buf(),
            stop: r.env.stop.stop.clone(),
        };
        // Records logged before this cell belong to no test of this device.
        let mut after = Aftermath::default();
        if let Ok(k) = r.env.kernel_log.as_mut() {
            if let Err(e) = k.drain() {
                after.kernel_log_error = Some(e.to_string());
            }
        }
        let engine = r.env.engine;
        let params = &plan.params;
        let outcome = run_with_progress(r.env, &c.disk.name, &w, || engine.run(params, &opts));
        // A test file that cannot be removed (the filesystem went read-only, the device is
        // gone) is named in the report: it may still be on the medium.
        after.leftover = plan
            .file
            .and_then(|t| t.remove().err())
            .map(|e| e.to_string());
        if let Ok(k) = r.env.kernel_log.as_mut() {
            match k.drain() {
                Ok(recs) => after.kernel = events::attribute(&recs, &keys),
                Err(e) => after.kernel_log_error = Some(e.to_string()),
            }
        }
        let removed = events::removal_event(&r.env.sysfs.path().join("class/block"), &keys);
        after.vanished = cell::vanished(removed.as_ref(), &after.kernel);
        after.kernel.extend(removed);

        let stop_requested = r.env.stop.requested();
        let wall = (r.env.clock.elapsed().saturating_sub(t0)).as_secs_f64();
        let cell = &mut r.report.devices[di].cells[ci];
        cell.wall_seconds = Some(wall);
        let outcome = outcome.map_err(|e| e.to_string());
        let error = outcome.as_ref().err().cloned();
        cell::judge_outcome(cell, outcome, plan.notes, &rules, stop_requested);
        match (&cell.result, error) {
            (_, Some(e)) => r
                .env
                .progress
                .line(&format!("usbperf-matrix: {} {w}: error: {e}", c.disk.name)),
            (Some(res), None) => r.env.progress.line(&format!(
                "usbperf-matrix: {} {w}: {} {:.1} MiB/s {:.0} IOPS p99 {:.2} ms, engine {}",
                c.disk.name,
                verdict::status_name(cell.status),
                res.mib_per_s,
                res.iops,
                res.all.latency.p99_ns as f64 / 1e6,
                res.engine
            )),
            (None, None) => {}
        }
        let vanished = after.vanished;
        let cell = &mut r.report.devices[di].cells[ci];
        cell::judge_aftermath(cell, &c.disk.name, after);
        r.save();
        if vanished {
            cell::not_run_vanished(&mut r.report.devices[di].cells[ci + 1..], &c.disk.name);
            r.save();
            return;
        }
    }
}

/// Runs one cell's workload while reporting live throughput from the kernel's own counters
/// of the disk: in the live status where there is one, otherwise one line every 10 s
/// (serial console, journal) so a long test never looks hung.
fn run_with_progress<T: Send>(
    env: &Env<'_>,
    disk: &str,
    what: &str,
    f: impl FnOnce() -> T + Send,
) -> T {
    let moved = || env.sysfs.block_stat_bytes(disk);
    std::thread::scope(|scope| {
        let handle = scope.spawn(f);
        let t0 = Instant::now();
        let start = moved();
        let mut last_line = Instant::now();
        let mut last = (Instant::now(), start.unwrap_or(0));
        while !handle.is_finished() {
            std::thread::sleep(Duration::from_millis(100));
            let (Some(s0), Some(now)) = (start, moved()) else {
                continue;
            };
            if last.0.elapsed() >= Duration::from_millis(500) {
                // The counters restart from zero when a disk comes back under the same name
                // (unplugged and replugged): never subtract past zero.
                let rate =
                    now.saturating_sub(last.1) as f64 / last.0.elapsed().as_secs_f64() / 1048576.0;
                let moved = units::human_bytes(now.saturating_sub(s0));
                env.progress.status(&format!(
                    "{disk} {what}: {:.0} s, {moved} moved, {rate:.1} MiB/s",
                    t0.elapsed().as_secs_f64(),
                ));
                if env.progress.periodic_lines() && last_line.elapsed() >= Duration::from_secs(10) {
                    env.progress.line(&format!(
                        "usbperf-matrix: {disk} {what}: running {:.0} s, {moved} moved, {rate:.1} MiB/s",
                        t0.elapsed().as_secs_f64(),
                    ));
                    last_line = Instant::now();
                }
                last = (Instant::now(), now);
            }
        }
        match handle.join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        }
    })
}

/// The configured test directories usbperf owns (`/var/lib/usbperf/...`), which a run may
/// create; a directory of the user's is never created (on an unmounted stick's mount point it
/// would land on the rootfs).
pub fn own_dirs(cfg: &Config) -> Vec<&Path> {
    cfg.devices
        .iter()
        .filter_map(|d| match &d.target {
            super::config::TargetSpec::Dir(dir) => Some(dir.as_path()),
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
