//! Owns `usbperf-matrix run`, the factory run: load the configuration, take the run lock,
//! wait for the required devices, choose and place them safely, run the matrix cell by cell
//! while watching the kernel log, judge every device, and rewrite the report after each cell.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;

use super::UsageError;
use crate::discover::linkcheck::{check_links, PortExpectation};
use crate::discover::usbpower::UsbAwake;
use crate::discover::{self, Backend, Inventory, SysfsRoot};
use crate::engine::{self, EngineRequest};
use crate::events;
use crate::exit::Exit;
use crate::matrix::config::{self, Config, ConfigError, Dur, ReportFormat};
use crate::matrix::select::{self, Chosen, Placement};
use crate::matrix::verdict::{self, Verdict};
use crate::report::schema::{Cell, CellStatus, DeviceReport, Report, RunStatus, Tool};
use crate::report::{station, unit, write};
use crate::safety::{self, lock::RunLock, signals, testfile, SystemFacts};
use crate::units;
use crate::workload::{self, RunOptions, WorkloadKind};

/// Test file size for a test that names none.
const DEFAULT_FILE_BYTES: u64 = 64 << 20;

/// The configuration installed by the Yocto recipe; used when `--config` is not given.
pub const DEFAULT_CONFIG: &str = "/etc/usbperf/usbperf.yaml";

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Configuration file (default: /etc/usbperf/usbperf.yaml if it exists, else the built-in
    /// `quick` profile on every non-system device).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Base profile, replacing the config file's `profile:` (the file's own keys still apply
    /// on top): `quick`, `full`, a board profile name (searched in the config's directory,
    /// /etc/usbperf/profiles, /usr/share/usbperf/profiles and ./profiles/boards) or a path.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Directory for the report (default /var/lib/usbperf/reports).
    #[arg(long, value_name = "DIR")]
    pub report_dir: Option<PathBuf>,
    /// Report format.
    #[arg(long, value_enum)]
    pub format: Option<ReportFormat>,
    /// I/O engine: auto, uring, sync or null.
    #[arg(long, value_name = "ENGINE")]
    pub engine: Option<String>,
    /// Wait up to this long for the devices the configuration marks `required` (e.g. 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_dur)]
    pub wait_devices: Option<Duration>,
    /// Free space to keep on a filesystem under test, in % of its size.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(0..100))]
    pub headroom_percent: Option<u8>,
    /// Lock file that keeps runs from overlapping.
    #[arg(long, value_name = "FILE", default_value = "/run/usbperf.lock")]
    pub lock_file: PathBuf,
    /// Print the resolved configuration, the chosen devices and their placement; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also write the results as JUnit XML to FILE at the end of the run (also when it was
    /// interrupted): a suite per device, a case per test and per device check.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Print a LAVA test signal per test, per device verdict and for the unit at the end.
    #[arg(long)]
    pub lava: bool,
}

fn parse_dur(s: &str) -> Result<Duration, String> {
    units::parse_duration(s).map_err(|e| e.to_string())
}

fn config_error(e: ConfigError) -> anyhow::Error {
    UsageError(e.to_string()).into()
}

/// Loads and layers the configuration: profile < config file < flags.
pub fn load_config(args: &RunArgs) -> anyhow::Result<Config> {
    let config_path = match &args.config {
        Some(p) => Some(p.clone()),
        None if Path::new(DEFAULT_CONFIG).is_file() => Some(PathBuf::from(DEFAULT_CONFIG)),
        None => None,
    };
    let mut search: Vec<PathBuf> = Vec::new();
    if let Some(dir) = config_path.as_ref().and_then(|p| p.parent()) {
        search.push(dir.to_path_buf());
        search.push(dir.join("profiles"));
    }
    search.extend(
        [
            "/etc/usbperf/profiles",
            "/usr/share/usbperf/profiles",
            "profiles/boards",
        ]
        .iter()
        .map(PathBuf::from),
    );
    let mut layers = match &config_path {
        Some(c) => config::load_file(c, args.profile.as_deref(), &search),
        None => config::load_profile(
            args.profile.as_deref().unwrap_or("quick"),
            &search,
            &mut Vec::new(),
        ),
    }
    .map_err(config_error)?;
    // Flags are the last layer.
    let mut flags = config::ConfigFile {
        report_dir: args.report_dir.clone(),
        report_format: args.format,
        wait_devices: args.wait_devices.map(Dur),
        headroom_percent: args.headroom_percent,
        ..config::ConfigFile::default()
    };
    if let Some(e) = &args.engine {
        flags.engine = Some(
            serde_json::from_value::<EngineRequest>(serde_json::Value::String(e.clone())).map_err(
                |_| UsageError(format!("--engine {e:?}: use auto, uring, sync or null")),
            )?,
        );
    }
    if flags != config::ConfigFile::default() {
        layers.push(("command line".into(), flags));
    }
    Ok(config::resolve(layers))
}

/// Progress output: one plain line per event without a terminal (serial console, journal);
/// a spinner with the live figure on a terminal.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn new() -> Progress {
        use std::io::IsTerminal;
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = indicatif::ProgressBar::new_spinner();
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        Progress { bar }
    }
    fn line(&self, msg: String) {
        match &self.bar {
            Some(b) => b.println(msg),
            None => crate::errln!("{msg}"),
        }
    }
    fn status(&self, msg: String) {
        if let Some(b) = &self.bar {
            b.set_message(msg);
        }
    }
    fn done(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Everything a run carries from cell to cell.
struct Runner {
    /// `/dev/kmsg`, drained around every cell; `None` when it cannot be read (a warning says
    /// why in the report).
    kmsg: Option<events::KmsgWatcher>,
    report: Report,
    /// Where the report is written: the configured directory, or a fallback when that one
    /// cannot be written.
    path: PathBuf,
    /// Whether `path` already holds this run's report: the first write creates it and never
    /// replaces a file already there; later writes replace this run's own file.
    created: bool,
    json: bool,
    flag: signals::StopFlag,
    progress: Progress,
    /// Write failures of the report file: the run goes on; the final error is returned.
    write_error: Option<String>,
}

impl Runner {
    fn save(&mut self) {
        let bytes = match self.report.encode(self.json) {
            Ok(b) => b,
            Err(e) => {
                self.write_error = Some(format!("cannot encode the report: {e}"));
                return;
            }
        };
        let res = if self.created {
            write::atomic_write(&self.path, &bytes)
        } else {
            create_unique(&mut self.path, &bytes)
        };
        match res {
            Ok(()) => {
                self.created = true;
                self.write_error = None;
            }
            Err(e) => self.write_error = Some(e.to_string()),
        }
    }
}

/// Creates the report file under a name no other file has: the run id makes a clash all but
/// impossible, and should one happen (a copied-in file, a clock set back) the next free
/// `-N` suffix is taken instead of replacing anything.
fn create_unique(path: &mut PathBuf, bytes: &[u8]) -> Result<(), write::WriteError> {
    let original = path.clone();
    let stem = original
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = original
        .extension()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut n = 0;
    loop {
        match write::atomic_create(path, bytes) {
            Err(e) if e.is_exists() && n < 100 => {
                n += 1;
                *path = original.with_file_name(format!("{stem}-{n}.{ext}"));
            }
            other => return other,
        }
    }
}

/// Where the report goes when the configured directory cannot be written (a read-only or full
/// rootfs): the runtime directory, then the temporary one. The report is also printed to
/// standard output at the end, so the journal or serial log holds it either way.
fn fallback_report_dirs() -> Vec<PathBuf> {
    vec![
        PathBuf::from("/run/usbperf/reports"),
        std::env::temp_dir().join("usbperf-reports"),
    ]
}

/// Creates the directories usbperf owns on the rootfs (`/var/lib/usbperf/...`) that the
/// configuration names as test directories; a directory of the user's is never created (on
/// an unmounted stick's mount point it would land on the rootfs).
fn ensure_own_dirs(cfg: &Config) {
    use std::os::unix::fs::DirBuilderExt;
    for d in &cfg.devices {
        if let config::TargetSpec::Dir(dir) = &d.target {
            let plain = dir.components().all(|c| {
                matches!(
                    c,
                    std::path::Component::RootDir | std::path::Component::Normal(_)
                )
            });
            if plain && dir.starts_with("/var/lib/usbperf/") && !dir.exists() {
                // 0755 like the recipe's own /var/lib/usbperf: an upload agent that is not
                // root must still read the reports beside it.
                let _ = std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(dir);
            }
        }
    }
}

pub fn run(cli: &super::Cli, args: &RunArgs) -> anyhow::Result<Exit> {
    let cfg = load_config(args)?;
    if cli.sysfs_root.is_some() {
        return Err(UsageError(
            "run tests the live system: --sysfs-root only works with list and tree".into(),
        )
        .into());
    }
    // Signals first: every thread spawned later inherits the blocked mask.
    let flag = signals::install().context("cannot set up signal handling")?;
    let sys = SysfsRoot::live();
    let backend = match cli.backend {
        super::BackendArg::Sysfs => Backend::Sysfs,
        super::BackendArg::Udev => Backend::Udev,
        super::BackendArg::Auto => Backend::Auto,
    };

    ensure_own_dirs(&cfg);
    if args.dry_run {
        let inv = discover::discover(&sys, backend).map_err(super::discover_error)?;
        let facts = SystemFacts::live();
        let (chosen, missing) = select::choose(&inv, &cfg.devices, &facts);
        let plan: Vec<serde_json::Value> = chosen
            .iter()
            .map(|c| {
                serde_json::json!({
                    "name": c.disk.name,
                    "rule": c.rule_index,
                    "placement": select::place(c, &inv, &facts, cfg.headroom_percent, min_file(&cfg)),
                })
            })
            .collect();
        let doc = serde_json::json!({
            "config": cfg,
            "devices": plan,
            "missing_required": missing.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        });
        match cfg.report_format {
            ReportFormat::Json => crate::outln!("{}", serde_json::to_string_pretty(&doc)?),
            ReportFormat::Yaml => crate::out!("{}", serde_norway::to_string(&doc)?),
        }
        return Ok(Exit::Pass);
    }

    let lock = match RunLock::acquire(&args.lock_file) {
        Ok(l) => l,
        // /run may be missing in minimal images: fall back to the report directory.
        Err(safety::lock::LockError::Open { .. }) => {
            std::fs::create_dir_all(&cfg.report_dir).with_context(|| {
                format!(
                    "cannot create the report directory {}",
                    cfg.report_dir.display()
                )
            })?;
            RunLock::acquire(&cfg.report_dir.join(".usbperf.lock"))?
        }
        Err(e) => return Err(e.into()),
    };

    let started = Utc::now();
    let unit = unit::identify(&unit::IdentitySources::default());
    let json = cfg.report_format == ReportFormat::Json;
    let report_id = crate::report::schema::new_report_id();
    // The time orders reports at a glance; the run id keeps two runs in one second apart.
    let name = format!(
        "usbperf-{}-{}-{}.{}",
        unit::file_label(&unit),
        started.format("%Y%m%dT%H%M%SZ"),
        &report_id[..8],
        if json { "json" } else { "yaml" }
    );
    let path = cfg.report_dir.join(name);
    let progress = Progress::new();

    let inv = wait_for_devices(&sys, backend, &cfg, &flag, &progress)?;
    let facts = SystemFacts::live();
    let (chosen, missing) = select::choose(&inv, &cfg.devices, &facts);
    if chosen.is_empty() {
        progress.line(
            "usbperf-matrix: no device matches the configuration's selectors (by default every \
             non-system disk: system disks, loop and virtual devices are never picked): nothing \
             to test; plug in a device or select one in the config"
                .into(),
        );
    }
    let selected_engine = engine::select(cfg.engine).context("cannot start the I/O engine")?;
    progress.line(format!("usbperf-matrix: {}", selected_engine.reason));

    let mut warnings = inv.warnings.clone();
    warnings.push(format!("engine: {}", selected_engine.reason));
    let kmsg = match events::KmsgWatcher::open(Path::new("/dev/kmsg")) {
        Ok(k) => Some(k),
        Err(e) => {
            warnings.push(format!(
                "kernel events are not watched, so I/O errors, resets and disconnects cannot be \
                 attributed: {e}"
            ));
            None
        }
    };
    let mut devices = Vec::new();
    for c in &chosen {
        let placement = select::place(c, &inv, &facts, cfg.headroom_percent, min_file(&cfg));
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
                .map(|t| Cell {
                    workload: t.workload,
                    status: CellStatus::Pending,
                    reasons: Vec::new(),
                    started_at: None,
                    wall_seconds: None,
                    params: None,
                    result: None,
                    kernel_events: Vec::new(),
                })
                .collect(),
            verdict: Verdict::default(),
        });
    }
    let missing_devices: Vec<String> = missing
        .iter()
        .map(|(i, r)| {
            format!(
                "devices[{i}]{}: required, not found ({})",
                r.label
                    .as_ref()
                    .map(|l| format!(" \"{l}\""))
                    .unwrap_or_default(),
                serde_json::to_string(&r.select).unwrap_or_default()
            )
        })
        .collect();

    let mut runner = Runner {
        kmsg,
        report: Report {
            schema_version: crate::report::schema::SCHEMA_VERSION,
            report_id: Some(report_id),
            tool: Tool::this(),
            started_at: started,
            finished_at: None,
            status: RunStatus::Running,
            interrupted_by: None,
            exit_code: None,
            unit,
            config: cfg.clone(),
            inventory_backend: inv.backend.clone(),
            devices,
            missing_devices,
            verdict: Verdict::default(),
            warnings,
        },
        path,
        created: false,
        json,
        flag,
        progress,
        write_error: None,
    };
    runner.save();
    if let Some(first) = runner.write_error.clone() {
        // The configured directory refuses the report (read-only or full rootfs). The unit is
        // tested anyway: the report goes to a fallback directory if one takes it, and to
        // standard output (the journal, the serial log) at the end whatever happens.
        let configured = runner.path.clone();
        let name = configured
            .file_name()
            .map(PathBuf::from)
            .unwrap_or_default();
        let mut landed = false;
        for dir in fallback_report_dirs() {
            runner.path = dir.join(&name);
            runner.save();
            if runner.write_error.is_none() {
                landed = true;
                break;
            }
        }
        let now = if landed {
            format!("it is written to {} instead", runner.path.display())
        } else {
            "no fallback directory could be written either".to_string()
        };
        runner.report.warnings.push(format!(
            "the report directory {} cannot be written ({first}): {now}, and the whole report \
             is printed to standard output at the end; fix report_dir or the filesystem",
            cfg.report_dir.display()
        ));
        if !landed {
            runner.path = configured;
        }
        runner.save();
        runner.progress.line(format!(
            "usbperf-matrix: warning: cannot write the report to {} ({first}); {now}",
            cfg.report_dir.display()
        ));
    }
    if runner.write_error.is_none() {
        runner
            .progress
            .line(format!("usbperf-matrix: report {}", runner.path.display()));
    }

    for (di, c) in chosen.iter().enumerate() {
        run_device(&mut runner, c, di, &cfg, &selected_engine, &facts);
    }

    // Verdicts.
    let interrupted = runner.flag.requested();
    let mut unit_reasons: Vec<String> = runner.report.missing_devices.clone();
    for (di, c) in chosen.iter().enumerate() {
        let rules = verdict::applicable(&cfg.thresholds, &c.disk, &facts);
        let d = &mut runner.report.devices[di];
        let mut reasons = verdict::device_reasons(&c.disk, &rules);
        // The structured record of each link check (the reasons above say the same in words).
        if let Some(u) = &c.disk.usb {
            let expect: Vec<PortExpectation> = rules
                .iter()
                .filter_map(|(_, t)| t.min_link_mbps)
                .map(|min| PortExpectation {
                    port: format!("usb:{}", u.port_path),
                    min_speed_mbps: min,
                })
                .collect();
            d.link_checks = check_links(std::slice::from_ref(&c.disk), &expect);
        }
        for cell in &d.cells {
            if matches!(cell.status, CellStatus::Failed | CellStatus::Error) {
                reasons.extend(cell.reasons.iter().cloned());
            }
        }
        let unfinished = d
            .cells
            .iter()
            .filter(|c| matches!(c.status, CellStatus::Pending | CellStatus::Interrupted))
            .count();
        if unfinished > 0 {
            // An incomplete device is never a pass, whatever the tests that ran said.
            reasons.push(format!(
                "{unfinished} of {} tests did not run to the end (run interrupted)",
                d.cells.len()
            ));
        } else if let Some(r) = verdict::untested_reason(&d.cells) {
            reasons.push(r);
        }
        d.verdict = Verdict::from_reasons(reasons);
        if !d.verdict.pass {
            unit_reasons.push(format!("{}: {}", d.name, d.verdict.reasons.join("; ")));
        }
    }
    if chosen.is_empty() {
        unit_reasons.push(verdict::NO_DEVICE_TESTED.to_string());
    }
    if interrupted {
        unit_reasons.push(format!(
            "the run was interrupted by {} before every test ran: the results are incomplete",
            runner
                .flag
                .signal_name()
                .unwrap_or_else(|| "a signal".into())
        ));
    }
    runner.report.verdict = Verdict::from_reasons(unit_reasons);
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
    runner.report.interrupted_by = runner.flag.signal_name();
    runner.report.finished_at = Some(Utc::now());
    runner.report.exit_code = Some(exit as u8);
    runner.save();
    runner.progress.done();
    drop(lock);

    // Where the report really is: the configured directory, a fallback, or nowhere but
    // standard output (then printed in full, so the journal or serial log keeps the record).
    let in_configured_dir = runner.path.parent() == Some(cfg.report_dir.as_path());
    let written = match (&runner.write_error, runner.created) {
        (None, _) => ReportPlace::File(runner.path.clone()),
        (Some(e), true) => ReportPlace::Stale(runner.path.clone(), e.clone()),
        (Some(e), false) => ReportPlace::Nowhere(e.clone()),
    };
    if !matches!(written, ReportPlace::File(_)) {
        // The file (if any) does not hold the final record: exit 4, so the boot service runs
        // again at the next boot; the copy on standard output says so too.
        runner.report.exit_code = Some(Exit::Error as u8);
    }
    if !matches!(written, ReportPlace::File(_)) || !in_configured_dir {
        if let Ok(bytes) = runner.report.encode(false) {
            crate::outln!("{}", String::from_utf8_lossy(&bytes));
        }
    }
    // The table the seed articles ended with: a row per device, a column per test.
    crate::out!(
        "{}",
        crate::report::matrix::render(
            &crate::report::matrix::MatrixView::from_report(&runner.report),
            crate::report::matrix::Style::Text
        )
    );
    print_summary(&runner.report, &written);
    let (exit, report_path) = match &written {
        // A report that reached no file, or whose file holds an earlier state (`running`, no
        // verdict), is a hole in the production record: exit 4 and verdict ERROR in the
        // station's line, never the PASS a stale file cannot back; the verdict is in the
        // journal.
        ReportPlace::Nowhere(_) => (Exit::Error, None),
        ReportPlace::Stale(p, _) => (Exit::Error, Some(p.as_path())),
        ReportPlace::File(p) => (exit, Some(p.as_path())),
    };
    if let Some(file) = &args.junit {
        // The report is the record: a JUnit file that cannot be written is said, and the
        // exit code stays the run's.
        let xml = crate::report::junit::render(&runner.report);
        if let Err(e) = write::atomic_write(file, xml.as_bytes()) {
            let why = match e {
                write::WriteError::Dir { err, .. } | write::WriteError::File { err, .. } => err,
            };
            crate::errln!(
                "usbperf-matrix: error: cannot write the JUnit file {} ({why}); the report \
                 holds the results",
                file.display()
            );
        }
    }
    if args.lava {
        for line in station::lava_signals(&runner.report, exit as u8) {
            crate::outln!("{line}");
        }
    }
    // Issue 15: queue the report and hand it to the collector, within `upload.timeout`;
    // never changes the verdict or the exit code.
    super::upload::after_run(&cfg, &runner.report);
    // The station's line comes last, so `tail -n 1` finds it.
    crate::outln!(
        "{}",
        station::result_line(&runner.report, exit as u8, report_path)
    );
    Ok(exit)
}

/// Where the final report is.
enum ReportPlace {
    /// Written in full, here.
    File(PathBuf),
    /// This file holds an earlier state of the report; the last write failed.
    Stale(PathBuf, String),
    /// In no file; only on standard output.
    Nowhere(String),
}

/// The smallest test file worth placing on a filesystem: the smallest size any file test of
/// the matrix asks for, at most 16 MiB (larger sizes are clamped to the room the headroom
/// leaves, with a note in the report).
fn min_file(cfg: &Config) -> u64 {
    cfg.tests
        .iter()
        .filter(|t| t.workload != WorkloadKind::ReadBuffered)
        .filter_map(|t| t.size.map(|s| s.0))
        .min()
        .unwrap_or(16 << 20)
        .min(16 << 20)
}

/// Discovers devices, waiting up to `wait_devices` for every `required` rule to match.
fn wait_for_devices(
    sys: &SysfsRoot,
    backend: Backend,
    cfg: &Config,
    flag: &signals::StopFlag,
    progress: &Progress,
) -> anyhow::Result<Inventory> {
    let deadline = Instant::now() + cfg.wait_devices.0;
    let mut announced = false;
    loop {
        let inv = discover::discover(sys, backend).context("could not enumerate block devices")?;
        let facts = SystemFacts::live();
        let (_, missing) = select::choose(&inv, &cfg.devices, &facts);
        if missing.is_empty() || Instant::now() >= deadline || flag.requested() {
            return Ok(inv);
        }
        if !announced {
            progress.line(format!(
                "usbperf-matrix: waiting up to {} for {} required device(s)",
                units::format_duration(cfg.wait_devices.0),
                missing.len()
            ));
            announced = true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn run_device(
    r: &mut Runner,
    c: &Chosen,
    di: usize,
    cfg: &Config,
    selected: &engine::Selected,
    facts: &SystemFacts,
) {
    let rules = verdict::applicable(&cfg.thresholds, &c.disk, facts);
    let placement = r.report.devices[di].placement.clone();
    let keys = events::DeviceKeys::from_disk(&c.disk);
    // Runtime autosuspend resets a USB device on resume with the same kernel lines as an
    // error-recovery reset; keep the device and its hubs awake while they are tested.
    let _awake = UsbAwake::pin(&SysfsRoot::live(), &c.disk);
    for (ci, spec) in cfg.tests.iter().enumerate() {
        if r.flag.requested() {
            return;
        }
        let w = verdict::workload_name(spec.workload);
        // The workload's own rule (mixed at 100 % reads, verify read phase only do not write).
        let wants_write = spec.params(PathBuf::new(), cfg.engine).writes();
        if wants_write && !placement.writable() {
            let why = match &placement {
                Placement::RawRead { why } => why.clone(),
                Placement::Refused { refusals } => refusals.join("; "),
                _ => String::new(),
            };
            let cell = &mut r.report.devices[di].cells[ci];
            // Writes were asked for explicitly and refused: that fails the device. With
            // `auto` and no writable filesystem the write tests are simply not applicable.
            cell.status = if matches!(placement, Placement::Refused { .. }) {
                CellStatus::Error
            } else {
                CellStatus::Skipped
            };
            cell.reasons = vec![format!("{w}: not run, no writable target: {why}")];
            r.save();
            continue;
        }
        // Each cell gets its own test file, removed when it drops (and on signals).
        let tf;
        let mut note = Vec::new();
        // hdparm -t reads the raw device, which is safe even while it is mounted; a test
        // file would first have to be written and would measure the filesystem too. Where
        // the raw device cannot even be opened for reading (a container or VM guarding its
        // root disk), it is measured on a test file of the filesystem instead, and says so.
        let raw_read_refused = match &placement {
            Placement::File(ft) if spec.workload == WorkloadKind::ReadBuffered => {
                match std::fs::File::open(&c.disk.dev_node) {
                    Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                        note.push(format!(
                            "{w}: the raw device {} cannot be opened ({e}): measured on a test \
                             file in {} instead",
                            c.disk.dev_node,
                            ft.dir.display()
                        ));
                        true
                    }
                    _ => false,
                }
            }
            _ => false,
        };
        let (target, size) = match &placement {
            Placement::File(_)
                if spec.workload == WorkloadKind::ReadBuffered && !raw_read_refused =>
            {
                tf = None;
                (PathBuf::from(&c.disk.dev_node), spec.size.map(|s| s.0))
            }
            Placement::File(ft) => {
                tf = Some(testfile::TestFile::reserve(&ft.dir));
                let want = spec.size.map(|s| s.0).unwrap_or(DEFAULT_FILE_BYTES);
                let size = want.min(ft.max_file_bytes);
                (
                    tf.as_ref()
                        .map(|t| t.path().to_path_buf())
                        .unwrap_or_default(),
                    Some(size),
                )
            }
            _ => {
                tf = None;
                let dev = PathBuf::from(&c.disk.dev_node);
                let size = spec.size.map(|s| s.0).map(|s| match c.disk.size_bytes {
                    Some(d) => s.min(d),
                    None => s,
                });
                (dev, size)
            }
        };
        let mut params = spec.params(target, cfg.engine);
        params.size_bytes = size;
        params.allow_write_device = matches!(placement, Placement::RawWrite);
        if let (Some(s), Some(want)) = (size, spec.size) {
            if s < want.0 {
                let why = if matches!(placement, Placement::File(_)) {
                    "to keep the free-space headroom"
                } else {
                    "to the size of the device"
                };
                note.push(format!(
                    "{w}: size reduced from {} to {} {why}",
                    units::format_size(want.0),
                    units::format_size(s)
                ));
            }
        }

        r.progress
            .line(format!("usbperf-matrix: {} {w}: start", c.disk.name));
        r.progress.status(format!("{} {w}", c.disk.name));
        let t0 = Instant::now();
        {
            let cell = &mut r.report.devices[di].cells[ci];
            cell.started_at = Some(Utc::now());
            cell.params = Some(params.clone());
        }
        let opts = RunOptions {
            sysfs_root: PathBuf::from("/sys"),
            stop: r.flag.stop.clone(),
        };
        // Records logged before this cell belong to no test of this device.
        let mut kmsg_error = None;
        if let Some(k) = r.kmsg.as_mut() {
            if let Err(e) = k.drain() {
                kmsg_error = Some(e.to_string());
            }
        }
        let outcome = run_with_progress(r, &c.disk.name, &w, || {
            workload::run(&params, selected, &opts)
        });
        // A test file that cannot be removed (the filesystem went read-only, the device is
        // gone) is named in the report: it may still be on the medium.
        let leftover = tf.and_then(|t| t.remove().err());
        let mut kernel = Vec::new();
        if let Some(k) = r.kmsg.as_mut() {
            match k.drain() {
                Ok(recs) => kernel = events::attribute(&recs, &keys),
                Err(e) => kmsg_error = Some(e.to_string()),
            }
        }
        let removed = events::removal_event(Path::new("/sys/class/block"), &keys);
        // The kernel removes the disk a moment after it logs the disconnect, so sysfs alone
        // may still show it: the disconnect of the device (or a hub above it) is enough.
        let vanished = removed.is_some()
            || kernel.iter().any(|e| {
                e.is_fatal()
                    && matches!(
                        e.kind,
                        events::EventKind::UsbDisconnect | events::EventKind::DeviceRemoved
                    )
            });
        kernel.extend(removed);
        let cell = &mut r.report.devices[di].cells[ci];
        cell.wall_seconds = Some(t0.elapsed().as_secs_f64());
        cell.reasons = note;
        match outcome {
            Ok(res) => {
                let reasons = verdict::result_reasons(&res, &rules);
                cell.status = if res.stopped_by == engine::StopReason::Interrupted {
                    CellStatus::Interrupted
                } else if reasons.is_empty() {
                    CellStatus::Passed
                } else {
                    CellStatus::Failed
                };
                cell.reasons.extend(reasons);
                r.progress.line(format!(
                    "usbperf-matrix: {} {w}: {} {:.1} MiB/s {:.0} IOPS p99 {:.2} ms, engine {}",
                    c.disk.name,
                    verdict::status_name(cell.status),
                    res.mib_per_s,
                    res.iops,
                    res.all.latency.p99_ns as f64 / 1e6,
                    res.engine
                ));
                // The result carries the parameters; keep them once.
                cell.params = None;
                cell.result = Some(res);
            }
            Err(e) => {
                cell.status = if r.flag.requested() {
                    CellStatus::Interrupted
                } else {
                    CellStatus::Error
                };
                cell.reasons.push(format!("{w}: {e}"));
                r.progress
                    .line(format!("usbperf-matrix: {} {w}: error: {e}", c.disk.name));
            }
        }
        if let Some(e) = leftover {
            cell.reasons
                .push(format!("{w}: the test file could not be removed: {e}"));
        }
        if let Some(e) = kmsg_error {
            cell.reasons
                .push(format!("{w}: the kernel log could not be read: {e}"));
        }
        let fatal: Vec<String> = kernel
            .iter()
            .filter(|e| e.is_fatal())
            .map(|e| format!("{w}: kernel: {}", e.line))
            .collect();
        if !fatal.is_empty() {
            if cell.status == CellStatus::Passed {
                cell.status = CellStatus::Failed;
            }
            cell.reasons.extend(fatal);
        }
        cell.kernel_events = kernel;
        if vanished {
            cell.status = CellStatus::Error;
            cell.reasons.push(format!(
                "{w}: {} vanished during the test (unplugged, or reset and re-enumerated under \
                 another name)",
                c.disk.name
            ));
            r.save();
            let rest = &mut r.report.devices[di].cells[ci + 1..];
            for cell in rest {
                cell.status = CellStatus::Error;
                cell.reasons = vec![format!("not run: {} vanished", c.disk.name)];
            }
            r.save();
            return;
        }
        r.save();
    }
}

/// Bytes moved by a disk so far, from the kernel's own counters of it.
fn disk_bytes_moved(name: &str) -> Option<u64> {
    let stat = SysfsRoot::live()
        .path()
        .join("block")
        .join(name)
        .join("stat");
    crate::discover::parse::block_stat_bytes(&std::fs::read_to_string(stat).ok()?)
}

/// Runs one cell's workload while reporting live throughput from the kernel's own counters
/// of the disk: on a terminal in the spinner, otherwise one line every 10 s (serial console,
/// journal) so a long test never looks hung.
fn run_with_progress<T: Send>(
    r: &Runner,
    disk: &str,
    what: &str,
    f: impl FnOnce() -> T + Send,
) -> T {
    std::thread::scope(|scope| {
        let handle = scope.spawn(f);
        let t0 = Instant::now();
        let start = disk_bytes_moved(disk);
        let mut last_line = Instant::now();
        let mut last = (Instant::now(), start.unwrap_or(0));
        while !handle.is_finished() {
            std::thread::sleep(Duration::from_millis(100));
            let (Some(s0), Some(now)) = (start, disk_bytes_moved(disk)) else {
                continue;
            };
            if last.0.elapsed() >= Duration::from_millis(500) {
                // The counters restart from zero when a disk comes back under the same name
                // (unplugged and replugged): never subtract past zero.
                let rate =
                    now.saturating_sub(last.1) as f64 / last.0.elapsed().as_secs_f64() / 1048576.0;
                let moved = units::human_bytes(now.saturating_sub(s0));
                r.progress.status(format!(
                    "{disk} {what}: {:.0} s, {moved} moved, {rate:.1} MiB/s",
                    t0.elapsed().as_secs_f64(),
                ));
                if r.progress.bar.is_none() && last_line.elapsed() >= Duration::from_secs(10) {
                    r.progress.line(format!(
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

fn print_summary(report: &Report, place: &ReportPlace) {
    let place = match place {
        ReportPlace::File(p) => format!("report {}", p.display()),
        ReportPlace::Stale(p, e) => format!(
            "report {} is INCOMPLETE (the last write failed: {e}); the full report is on \
             standard output above",
            p.display()
        ),
        ReportPlace::Nowhere(e) => format!(
            "report NOT WRITTEN to any file ({e}); the full report is on standard output above"
        ),
    };
    crate::outln!(
        "usbperf-matrix: {} device(s), verdict {}; {place}",
        report.devices.len(),
        if report.verdict.pass { "PASS" } else { "FAIL" },
    );
    if report.devices.is_empty() {
        for reason in &report.verdict.reasons {
            crate::outln!("  {reason}");
        }
    }
    for d in &report.devices {
        crate::outln!(
            "  {:<10} {:<6} {}",
            d.name,
            d.disk.class,
            if d.verdict.pass { "PASS" } else { "FAIL" }
        );
        for reason in &d.verdict.reasons {
            crate::outln!("      {reason}");
        }
    }
    for m in &report.missing_devices {
        crate::outln!("  missing: {m}");
    }
    if report.status == RunStatus::Interrupted {
        crate::outln!(
            "  interrupted by {}: the report is marked incomplete",
            report.interrupted_by.as_deref().unwrap_or("a signal")
        );
    }
}
