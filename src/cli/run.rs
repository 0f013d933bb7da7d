//! Owns `usbperf-matrix run` on the command line: the flags layered over the configuration,
//! the live machine as the run's environment (`/sys`, `/dev/kmsg`, the mount table, the
//! signals), the run lock, and what is printed at the end. The run itself is
//! `matrix::run`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use crate::config::{self, Config, Dur, ReportFormat};
use crate::discover::{self, SysfsRoot};
use crate::engine;
use crate::events;
use crate::exit::Exit;
use crate::matrix::env::{self, Env, LiveEngine, LiveSystem, SystemClock};
use crate::matrix::run::{self as factory, RunSettings};
use crate::matrix::schedule::ScheduleMode;
use crate::report::file::ReportPlace;
use crate::report::schema::{Report, RunStatus};
use crate::report::{station, unit, write};
use crate::safety::{lock::RunLock, signals, SystemFacts};
use crate::units;

const AFTER_HELP: &str = "\
Examples:
  # what would be tested, nothing written
  usbperf-matrix run --dry-run
  # the factory run (config, else the quick profile)
  usbperf-matrix run
  # a board profile from the profile directories
  usbperf-matrix run --profile toradex-apalis-imx8
  usbperf-matrix run --config /etc/usbperf/usbperf.yaml --junit /tmp/usbperf.xml --lava
  # devices on separate buses at the same time
  usbperf-matrix run --schedule auto

What the default run writes: a test file on each non-system disk's mounted filesystem (read
tests only on a disk without one), and test files on the system disk in the rootfs's scratch
directory /var/lib/usbperf/scratch; each test file is deleted after its test. Raw devices are
written only when a config says `target: raw`.

Exit codes: 0 every device passed; 1 a verdict failed; 2 usage or config error (nothing
written); 3 interrupted (the report says so); 4 the tool could not work (the report, when one
was started, is written).";

#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct RunArgs {
    #[command(flatten)]
    pub backend: super::BackendFlag,
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
    /// I/O engine (default: the config's `engine:`, else auto).
    #[arg(long, value_enum)]
    pub engine: Option<super::EngineArg>,
    /// Wait up to this long for the devices the configuration marks `required` (e.g. 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_dur)]
    pub wait_devices: Option<Duration>,
    /// Free space to keep on a filesystem under test, in % of its size.
    #[arg(long, value_name = "PERCENT", value_parser = |s: &str| super::whole_in::<u8>(s, 0, 99))]
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
    /// serial: one device after another; auto: devices on independent buses (USB root hubs,
    /// MMC hosts, ATA ports, NVMe, SCSI hosts) at the same time, CPU-bound tests alone.
    #[arg(long, value_enum)]
    pub schedule: Option<ScheduleMode>,
}

fn parse_dur(s: &str) -> Result<Duration, String> {
    units::parse_duration(s).map_err(|e| e.to_string())
}

/// Loads and layers the configuration: profile < config file < flags.
pub fn load_config(args: &RunArgs) -> anyhow::Result<Config> {
    let mut layers = config::load_layers(args.config.as_deref(), args.profile.as_deref())?;
    // Flags are the last layer.
    let mut flags = config::ConfigFile {
        report_dir: args.report_dir.clone(),
        report_format: args.format,
        wait_devices: args.wait_devices.map(Dur),
        headroom_percent: args.headroom_percent,
        schedule: args.schedule,
        ..config::ConfigFile::default()
    };
    flags.engine = args.engine.map(Into::into);
    if flags != config::ConfigFile::default() {
        layers.push(("command line".into(), flags));
    }
    layers.extend(config::environment_layers(|name| std::env::var(name).ok())?);
    Ok(config::resolve(layers))
}

/// Progress output: one plain line per event without a terminal (serial console, journal);
/// a spinner with the live figure on a terminal.
pub(super) struct Progress {
    bar: Option<indicatif::ProgressBar>,
    /// Lines are wrapped to the console's width.
    width: usize,
}

impl Progress {
    pub(super) fn new(width: usize) -> Progress {
        use std::io::IsTerminal;
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = indicatif::ProgressBar::new_spinner();
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        Progress { bar, width }
    }
}

impl env::Progress for Progress {
    fn line(&self, msg: &str) {
        let msg = crate::out::wrap(msg, self.width, "    ");
        match &self.bar {
            Some(b) => b.println(msg),
            None => crate::errln!("{msg}"),
        }
    }
    fn status(&self, msg: &str) {
        if let Some(b) = &self.bar {
            b.set_message(msg.to_string());
        }
    }
    fn periodic_lines(&self) -> bool {
        self.bar.is_none()
    }
    fn done(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Creates the directories usbperf owns on the rootfs (`/var/lib/usbperf/...`) that the
/// configuration names as test directories.
pub(super) fn ensure_own_dirs(cfg: &Config) {
    use std::os::unix::fs::DirBuilderExt;
    for dir in factory::own_dirs(cfg) {
        if !dir.exists() {
            // 0755 like the recipe's own /var/lib/usbperf: an upload agent that is not root
            // must still read the reports beside it.
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir);
        }
    }
}

pub fn run(args: &RunArgs) -> anyhow::Result<Exit> {
    let cfg = load_config(args)?;
    // Signals first: every thread spawned later inherits the blocked mask.
    let flag = signals::install("the report is written marked incomplete")
        .context("cannot set up signal handling")?;
    let sys = SysfsRoot::live();
    let backend = args.backend.live();

    ensure_own_dirs(&cfg);
    if args.dry_run {
        let inv = discover::discover(&sys, backend).map_err(super::discover_error)?;
        let plan = crate::matrix::plan::dry_run(&cfg, &inv, &SystemFacts::live(), &sys);
        // Through a JSON value, whose maps are sorted: every level of the plan prints its keys
        // in alphabetical order, as it always has, in both formats.
        let doc = serde_json::to_value(&plan)?;
        match cfg.report_format {
            ReportFormat::Json => crate::out::data(&(serde_json::to_string_pretty(&doc)? + "\n")),
            ReportFormat::Yaml => crate::out::data(&serde_norway::to_string(&doc)?),
        }
        return Ok(Exit::Pass);
    }

    let lock = RunLock::acquire_or_in(&args.lock_file, &cfg.report_dir)?;

    // What a person reads is laid out for the console's width (80 on a serial console or a
    // pipe); the station's result line stays one line whatever its length, for `tail -n 1`.
    let width = crate::out::console_width();
    let progress = Progress::new(width);
    let done = run_once(&cfg, backend, flag, &progress)?;
    // A unit that uploads signs its report file too, with the same key, so the file can be
    // checked wherever it is copied (`show`, `fleet`). Only a file holding the final report.
    if let (Some(up), ReportPlace::File(path)) = (&cfg.upload, &done.place) {
        if let Err(e) = crate::upload::seal_report(up, path) {
            crate::errln!("usbperf-matrix: {e}");
        }
    }
    drop(lock);

    // Where the report really is: the configured directory, a fallback, or nowhere but
    // standard output (then printed in full, so the journal or serial log keeps the record).
    if !matches!(done.place, ReportPlace::File(_)) || !done.in_configured_dir {
        if let Ok(bytes) = done.report.encode(false) {
            crate::out::data(&format!("{}\n", String::from_utf8_lossy(&bytes)));
        }
    }
    // One table: a row per device, a column per test.
    crate::out!(
        "{}",
        crate::report::table::render_fit(
            &crate::report::table::MatrixTable::from_report(&done.report),
            width
        )
    );
    let fallback =
        (!done.in_configured_dir).then_some((cfg.report_dir.as_path(), done.lost_at_reboot));
    print_summary(&done.report, &done.place, fallback, width);
    let exit = done.exit;
    let report_path = match &done.place {
        ReportPlace::Nowhere(_) => None,
        ReportPlace::Stale(p, _) | ReportPlace::File(p) => Some(p.as_path()),
    };
    if let Some(file) = &args.junit {
        // The report is the record: a JUnit file that cannot be written is said, and the
        // exit code stays the run's.
        let xml = crate::report::junit::render(&done.report);
        if let Err(e) = write::atomic_write(file, xml.as_bytes()) {
            let why = e.cause();
            let msg = format!(
                "usbperf-matrix: error: cannot write the JUnit file {} ({why}); the report \
                 holds the results",
                file.display()
            );
            crate::out::err(&msg);
        }
    }
    if args.lava {
        for line in station::lava_signals(&done.report, exit as u8) {
            crate::out::data(&format!("{line}\n"));
        }
    }
    // Queue the report in its wire form (JSON, whatever form the file has) and hand it to
    // the collector, within `upload.timeout`; never changes the verdict or the exit code.
    if let Some(up) = &cfg.upload {
        let said = match done.report.encode(true) {
            Ok(bytes) => crate::upload::hand_off(up, &bytes),
            Err(e) => format!("cannot encode the report ({e}); the report file is kept"),
        };
        let msg = format!("usbperf-matrix: upload: {said}");
        crate::out::err(&msg);
    }
    // The station's line comes last, so `tail -n 1` finds it.
    crate::out::data(&format!(
        "{}\n",
        station::result_line(&done.report, exit as u8, report_path, cfg.result_line)
    ));
    Ok(exit)
}

/// One factory run of `cfg` on the live machine: a new report id, the configured engine,
/// `/dev/kmsg`, the live clock and CPUs. What is printed of the outcome is the caller's.
pub(super) fn run_once(
    cfg: &Config,
    backend: discover::Backend,
    flag: signals::StopFlag,
    progress: &dyn env::Progress,
) -> anyhow::Result<factory::RunOutcome> {
    let settings = RunSettings {
        unit: unit::identify(&unit::IdentitySources::default()),
        report_id: crate::report::schema::new_report_id(),
        fallback_report_dirs: factory::default_fallback_report_dirs(),
        config: cfg.clone(),
    };
    let engine =
        LiveEngine::new(engine::select(cfg.engine).context("cannot start the I/O engine")?);
    let kernel_log = events::KmsgWatcher::open(Path::new("/dev/kmsg"))
        .map(|k| Box::new(k) as Box<dyn env::KernelLog>)
        .map_err(|e| e.to_string());
    let clock = SystemClock::new();
    let env = Env {
        sysfs: SysfsRoot::live(),
        backend,
        kernel_log,
        system: &LiveSystem,
        clock: &clock,
        engine: &engine,
        stop: flag,
        progress,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    factory::run(env, settings).map_err(run_error)
}

/// A factory run's error as the exit code table says: the discovery errors the user fixes
/// (a backend this build lacks) are usage errors (2), as `list --backend udev` says them.
fn run_error(e: factory::RunError) -> anyhow::Error {
    match e {
        factory::RunError::Discover(d) => super::discover_error(d),
    }
}

/// `fallback` is the configured report directory when the report had to go elsewhere, with
/// the filesystem that loses it at the next boot, if it is on one.
fn print_summary(
    report: &Report,
    place: &ReportPlace,
    fallback: Option<(&Path, Option<&str>)>,
    width: usize,
) {
    let say =
        |line: String, indent: &str| crate::outln!("{}", crate::out::wrap(&line, width, indent));
    let place = match place {
        ReportPlace::File(p) => match fallback {
            None => format!("report {}", p.display()),
            // /run and /tmp are tmpfs on most images: the factory record would be gone at
            // the next boot unless it is copied or uploaded first.
            Some((dir, Some(fs))) => format!(
                "report {} is NOT in the configured directory {} (which cannot be written) \
                 but on {fs}, emptied at the next boot: ERROR (exit 4) until report_dir can be \
                 written; copy the report now (the full report is also on standard output \
                 above)",
                p.display(),
                dir.display()
            ),
            Some((dir, None)) => format!(
                "report {} is NOT in the configured directory {} (which cannot be written); \
                 fix report_dir so the next run's report goes where the station looks",
                p.display(),
                dir.display()
            ),
        },
        ReportPlace::Stale(p, e) => format!(
            "report {} is INCOMPLETE (the last write failed: {e}); the full report is on \
             standard output above",
            p.display()
        ),
        ReportPlace::Nowhere(e) => format!(
            "report NOT WRITTEN to any file ({e}); the full report is on standard output above"
        ),
    };
    say(
        format!(
            "usbperf-matrix: {} device(s), verdict {}; {place}",
            report.devices.len(),
            if report.verdict.pass { "PASS" } else { "FAIL" },
        ),
        "  ",
    );
    if report.devices.is_empty() {
        // A missing device is one of the verdict's reasons too: it is said once, below.
        for reason in &report.verdict.reasons {
            if reason.kind != crate::report::verdict::ReasonKind::MissingDevice {
                say(format!("  {}", reason.text), "    ");
            }
        }
    }
    for d in &report.devices {
        // `PASS`, `PASS (marginal)`, `PASS after 1 retest`, `FAIL after 2 retests`.
        let words = d.verdict.words();
        let (word, rest) = words.split_once(' ').unwrap_or((words.as_str(), ""));
        say(
            format!(
                "  {:<10} {:<6} {} {rest}",
                d.name,
                d.disk.class,
                word.to_uppercase()
            )
            .trim_end()
            .to_string(),
            "    ",
        );
        for reason in &d.verdict.reasons {
            say(format!("      {}", reason.text), "        ");
        }
    }
    for m in &report.missing_devices {
        say(format!("  missing: {m}"), "    ");
    }
    if report.status == RunStatus::Interrupted {
        say(
            format!(
                "  interrupted by {}: the report is marked incomplete",
                report.interrupted_by.as_deref().unwrap_or("a signal")
            ),
            "    ",
        );
    }
}

#[cfg(test)]
mod exit_tests {
    use super::*;

    /// `run --backend udev` on a build without libudev exits 2, like `list`.
    #[test]
    fn a_backend_this_build_lacks_is_a_usage_error() {
        let e = run_error(factory::RunError::Discover(
            discover::DiscoverError::UdevNotBuilt,
        ));
        assert_eq!(super::super::exit_of(&e), Exit::Usage, "{e:#}");
        let e = run_error(factory::RunError::Discover(discover::DiscoverError::Udev(
            std::io::Error::from_raw_os_error(libc::EIO),
        )));
        assert_eq!(super::super::exit_of(&e), Exit::Error, "{e:#}");
    }
}
