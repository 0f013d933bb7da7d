//! Owns `usbperf-matrix calibrate` on the command line: the profile's runs on the live
//! machine for `matrix::calibrate`, their reports in a directory of their own, and the
//! board-profile snippet it finds, printed and written.

use std::path::PathBuf;

use anyhow::Context;

use super::run::{ensure_own_dirs, load_config, run_once, Progress, RunArgs};
use crate::exit::Exit;
use crate::matrix::calibrate::{self, Finding};
use crate::report::write;
use crate::safety::{lock::RunLock, signals};

const AFTER_HELP: &str = "\
On a golden unit, before `schedule: auto` goes into a board's profile: the profile runs
serial and auto in alternation (the order swaps every round), ROUNDS times each. Each round
gives every figure an auto/serial ratio. A figure that ran beside another lane holds when
the 95 % interval of its ratios lies within +-5 % of serial; it moved when their mean is
beyond +-5 % and the interval keeps clear of serial, and then its lanes are joined
(`shared_lanes:`). When
its rounds show neither, the phase runs more rounds, up to 6, and a figure still undecided
then is decided by its mean over them (a figure shown to move leads when lanes are joined). The joined schedule is measured again the same way, until every
figure holds or every lane is joined (then: stay serial). The snippet ends with what the
last phase measured: the speed-up is measured, not estimated.

Examples:
  usbperf-matrix calibrate --profile toradex-apalis-imx8 --out /tmp/schedule.yaml
  usbperf-matrix calibrate --config /etc/usbperf/usbperf.yaml --rounds 5

Every run writes its report (to --report-dir, by default the config's report directory's
`calibrate/`), so each figure the finding rests on can be read again. Nothing runs that
`run` would refuse: the runs are `run`'s.

--study N is the repeatability study instead: the profile runs N times serial, and per
figure it prints how repeatable it is (the runs' standard deviation in % of their mean), the
interval each run stated, the shortest runtime that meets the test's precision_percent (2 %
when it states none) from run to run, and for every min_mib_per_s and min_iops that applies,
the share of the tolerance the measurement's own spread takes (3 standard deviations over the
room between the mean and the limit): under 10 % acceptable, 10-30 % marginal, over 30 % not,
as a factory's gauge R&R reads it.
  usbperf-matrix calibrate --profile renesas-rzg2ul --study 10

Exit codes: 0 a finding (auto with its shared lanes, or serial), or a study; 2 usage or
config error; 3 interrupted; 4 a run failed or measured nothing to compare.";

#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct CalibrateArgs {
    #[command(flatten)]
    pub backend: super::BackendFlag,
    /// Configuration file (as for `run`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Base profile (as for `run`).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Directory for the calibration's reports (default: the config's report directory's
    /// `calibrate/`, apart from the unit's factory record).
    #[arg(long, value_name = "DIR")]
    pub report_dir: Option<PathBuf>,
    /// Runs of each mode per phase, at least (more, up to 6, while a figure shows neither a
    /// hold nor a move).
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = |s: &str| super::whole_in::<u8>(s, 1, 20))]
    pub rounds: u8,
    /// Instead of the schedule: the repeatability study, the profile run N times serial.
    #[arg(long, value_name = "N", conflicts_with = "out",
          value_parser = |s: &str| super::whole_in::<u8>(s, 2, 50))]
    pub study: Option<u8>,
    /// Also write the snippet to FILE (created; an existing file is not replaced).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// I/O engine (as for `run`).
    #[arg(long, value_enum)]
    pub engine: Option<super::EngineArg>,
    /// Lock file that keeps runs from overlapping.
    #[arg(long, value_name = "FILE", default_value = "/run/usbperf.lock")]
    pub lock_file: PathBuf,
}

pub fn run(args: &CalibrateArgs) -> anyhow::Result<Exit> {
    let mut cfg = load_config(&RunArgs {
        backend: args.backend,
        config: args.config.clone(),
        profile: args.profile.clone(),
        report_dir: None,
        format: None,
        engine: args.engine,
        wait_devices: None,
        headroom_percent: None,
        lock_file: args.lock_file.clone(),
        dry_run: false,
        junit: None,
        lava: false,
        schedule: None,
    })?;
    cfg.report_dir = args
        .report_dir
        .clone()
        .unwrap_or_else(|| cfg.report_dir.join("calibrate"));
    // Nothing measured is lost to a snippet that cannot be written: refused before any run.
    if let Some(out) = &args.out {
        if out.exists() {
            return Err(super::UsageError(format!(
                "{} already exists: give --out a new file (the calibration does not replace \
                 one)",
                out.display()
            ))
            .into());
        }
    }
    let flag = signals::install("the run's report is written marked incomplete")
        .context("cannot set up signal handling")?;
    ensure_own_dirs(&cfg);
    std::fs::create_dir_all(&cfg.report_dir).with_context(|| {
        format!(
            "cannot create the calibration's report directory {}",
            cfg.report_dir.display()
        )
    })?;
    let _lock = RunLock::acquire_or_in(&args.lock_file, &cfg.report_dir)?;
    let width = crate::out::console_width();
    let progress = Progress::new(width);
    let backend = args.backend.live();
    let mut unit = String::from("this unit");
    let said = |line: &str| crate::out::err(line);
    if let Some(n) = args.study {
        let mut reports = Vec::new();
        for round in 1..=n {
            let mut c = cfg.clone();
            c.schedule = crate::config::ScheduleMode::Serial;
            said(&format!(
                "usbperf-matrix calibrate: study, run {round} of {n}"
            ));
            let done = run_once(&c, backend, flag.clone(), &progress)
                .with_context(|| format!("the study's run {round} failed"))?;
            if flag.requested() {
                crate::errln!("usbperf-matrix: calibrate: the study was interrupted");
                return Ok(Exit::Incomplete);
            }
            reports.push(done.report);
        }
        let rows = crate::matrix::study::study(
            &reports,
            &cfg.thresholds,
            &crate::safety::SystemFacts::live(),
        );
        if rows.is_empty() {
            anyhow::bail!("the study's runs measured no figure to compare");
        }
        let width = crate::out::console_width();
        crate::out!(
            "{}",
            crate::matrix::study::render(&rows, reports.len(), width)
        );
        return Ok(Exit::Pass);
    }
    let found = calibrate::calibrate(
        usize::from(args.rounds),
        cfg.shared_lanes.clone(),
        |mode, shared, phase, round| {
            let mut c = cfg.clone();
            c.schedule = mode;
            c.shared_lanes = shared.to_vec();
            said(&format!(
                "usbperf-matrix calibrate: phase {phase}, round {round}: {} run",
                mode.as_str()
            ));
            let done =
                run_once(&c, backend, flag.clone(), &progress).map_err(|e| format!("{e:#}"))?;
            if flag.requested() {
                return Err("interrupted".into());
            }
            unit = crate::report::unit::name_of(&done.report.unit).unwrap_or(unit.clone());
            Ok(done.report)
        },
        said,
        || flag.requested(),
    );
    let found = match found {
        Ok(f) => f,
        Err(e) if flag.requested() => {
            crate::errln!("usbperf-matrix: calibrate: {e}");
            return Ok(Exit::Incomplete);
        }
        Err(e) => return Err(e).context("the calibration has no finding"),
    };
    let snippet = found.snippet(&unit, chrono::Utc::now());
    crate::out::data(&snippet);
    if let Some(out) = &args.out {
        write::atomic_create(out, snippet.as_bytes())
            .with_context(|| format!("cannot write the snippet to {}", out.display()))?;
        crate::errln!(
            "usbperf-matrix: calibrate: snippet written to {}",
            out.display()
        );
    }
    let last = found.phases.last().map(|p| &p.comparison);
    let words = match (&found.finding, last) {
        (Finding::Auto(_), Some(c)) => format!(
            "schedule auto holds every figure within +-{} % of serial: {:.2}x faster, measured \
             (serial {:.1} s, auto {:.1} s)",
            calibrate::TOLERANCE_PERCENT,
            c.speed_up().unwrap_or(0.0),
            c.serial_seconds.unwrap_or(0.0),
            c.auto_seconds.unwrap_or(0.0)
        ),
        (Finding::Serial(why), _) => format!("stay serial: {why}"),
        (Finding::Auto(_), None) => "no phase ran".into(),
    };
    crate::errln!("usbperf-matrix: calibrate: {words}");
    Ok(Exit::Pass)
}
