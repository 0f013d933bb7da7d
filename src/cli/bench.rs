//! Owns `usbperf-matrix bench`: one fio-like test on one target, printed as a table, YAML or
//! JSON; SIGINT/SIGTERM stop it cleanly (in-flight I/O drained, exit code 3).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::ValueEnum;

use super::{EngineArg, Format, UsageError};
use crate::engine::{self, StopReason};
use crate::exit::Exit;
use crate::matrix::watch::watch;
use crate::safety::signals;
use crate::safety::target::{check_target, TargetUse};
use crate::stats::OpFigures;
use crate::sysfs::SysfsRoot;
use crate::units::{format_size, parse_duration, parse_size};
use crate::workload::verify::{VerifyMode, VerifyPhase};
use crate::workload::{
    self, BenchResult, CacheMode, Overrides, RunOptions, WorkloadKind, WorkloadParams,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VerifyModeArg {
    /// Write and read back every block of the region.
    Full,
    /// Write and read back --verify-points blocks spread over the region.
    Quick,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VerifyPhaseArg {
    /// Write the pattern, then read it back.
    Both,
    /// Only write the pattern (then replug, and run again with `read`).
    Write,
    /// Only read back a pattern written before with the same --seed.
    Read,
}

fn size_arg(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| e.to_string())
}

fn duration_arg(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

/// One storage test, fio-like: a workload on a file or block device.
const AFTER_HELP: &str = "\
Examples:
  usbperf-matrix bench --target /media/usb/t.bin --size 256M --workload seq-write
  usbperf-matrix bench --target /media/usb/t.bin --size 256M --workload rand-read --runtime 30s
  # reads only: no flag needed
  usbperf-matrix bench --target /dev/sdb --workload read-buffered
  usbperf-matrix bench --target /media/sd/t.bin --size 1G --workload write-curve --runtime 10m
  usbperf-matrix bench --target /media/emmc/t.bin --size 64M --workload verify --format json

A block device is written only with --allow-write-device, and never when it is mounted, holds
the root or boot filesystem, swap, a RAID/LVM member or an eMMC boot/RPMB area.
Exit codes: 0 done; 1 verify found bad blocks; 2 usage error or refused target; 3 interrupted;
4 I/O failure.";

#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct BenchArgs {
    /// The file or block device to test; a file that does not exist is created at --size
    /// and deleted afterwards (unless --keep).
    #[arg(long, value_name = "PATH")]
    pub target: PathBuf,
    #[arg(long, value_enum)]
    pub workload: WorkloadKind,
    /// Block size (units: 512, 4k, 1M).
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub bs: Option<u64>,
    /// I/Os in flight per job (1 to 4096).
    #[arg(long, value_parser = |s: &str| super::whole_in::<u32>(s, 1, u64::from(workload::MAX_QUEUE_DEPTH)))]
    pub qd: Option<u32>,
    /// Parallel jobs (threads, one ring each; 1 to 1024).
    #[arg(long, value_parser = |s: &str| super::whole_in::<u32>(s, 1, u64::from(workload::MAX_JOBS)))]
    pub jobs: Option<u32>,
    /// Time bound (500ms, 5s, 2m); 0 for none.
    #[arg(long, value_parser = duration_arg, value_name = "DURATION")]
    pub runtime: Option<Duration>,
    /// The region to test, and the size of a created file (units: 256M, 1G).
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub size: Option<u64>,
    /// How the I/O is issued.
    #[arg(long, value_enum, default_value_t = EngineArg::Auto)]
    pub engine: EngineArg,
    /// How the result is printed.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// direct (O_DIRECT), fdatasync (buffered + final flush, timed), dsync (O_DSYNC), buffered.
    #[arg(long, value_enum)]
    pub cache: Option<CacheMode>,
    /// Share of reads for `mixed`, in %.
    #[arg(long, value_parser = |s: &str| super::whole_in::<u8>(s, 0, 100))]
    pub read_percent: Option<u8>,
    /// Keep going over the region until --runtime (fio's time_based).
    #[arg(long)]
    pub time_based: bool,
    /// Stop before --runtime once the rate is steady and half its 95 % confidence interval is
    /// at most PERCENT of it (e.g. 2): the figure is known, as the factory run's cells do.
    #[arg(long, value_name = "PERCENT")]
    pub precision: Option<f64>,
    /// Seed of the random offsets and of the verify pattern.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Sampling interval of `write-curve`.
    #[arg(long, value_parser = duration_arg, value_name = "DURATION")]
    pub interval: Option<Duration>,
    /// How much of the region `verify` checks (default full).
    #[arg(long, value_enum)]
    pub verify_mode: Option<VerifyModeArg>,
    /// Run only the write or the read pass of `verify` (write, replug, read).
    #[arg(long, value_enum)]
    pub verify_phase: Option<VerifyPhaseArg>,
    /// Probes of a quick `verify`.
    #[arg(long)]
    pub verify_points: Option<u64>,
    /// Keep a test file we created.
    #[arg(long)]
    pub keep: bool,
    /// Allow writing to a block device (destroys its data).
    #[arg(long)]
    pub allow_write_device: bool,
}

impl BenchArgs {
    /// The workload's defaults, overridden by every flag given.
    pub fn params(&self) -> WorkloadParams {
        let mut p = self.overrides().params(self.workload, self.target.clone());
        p.engine = self.engine.into();
        p.keep = self.keep;
        p.allow_write_device = self.allow_write_device;
        p
    }

    /// The flags as the workload overrides a config file's `tests:` entries also fill.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            block_bytes: self.bs,
            queue_depth: self.qd,
            jobs: self.jobs,
            size_bytes: self.size,
            runtime: self.runtime,
            cache: self.cache,
            read_percent: self.read_percent,
            time_based: Some(self.time_based),
            precision_percent: self.precision,
            seed: self.seed,
            sample_interval: self.interval,
            verify_mode: self.verify_mode.map(|m| match m {
                VerifyModeArg::Full => VerifyMode::Full,
                VerifyModeArg::Quick => VerifyMode::Quick,
            }),
            verify_phase: self.verify_phase.map(|ph| match ph {
                VerifyPhaseArg::Both => VerifyPhase::Both,
                VerifyPhaseArg::Write => VerifyPhase::Write,
                VerifyPhaseArg::Read => VerifyPhase::Read,
            }),
            verify_points: self.verify_points,
        }
    }
}

/// Checks everything about the command before any file is created or any I/O is done: the
/// workload's parameters (the same rules a config file's tests obey), then the target
/// (`safety::target`: its kind, room for a test file, and for a block device every safety rule
/// of the factory run).
fn check_command(params: &WorkloadParams) -> anyhow::Result<()> {
    if params.size_bytes == Some(0) {
        return Err(
            UsageError("--size 0: give the size of the region to test, e.g. 16M".into()).into(),
        );
    }
    workload::check_params(params).map_err(|e| UsageError(e.as_flag()))?;
    let target = TargetUse {
        path: &params.target,
        size_bytes: params.size_bytes,
        writes: params.writes(),
        allow_write_device: params.allow_write_device,
        workload: params.workload.as_str(),
    };
    Ok(check_target(&target)?)
}

pub fn run(args: &BenchArgs) -> anyhow::Result<Exit> {
    let params = args.params();
    // bench tests the live system: its target's queue settings come from /sys.
    let options = RunOptions::default();
    // Before anything is created: every thread spawned later inherits the blocked signals,
    // and a SIGINT after a test file exists always reaches the cleanup.
    let flag = signals::install("the figures so far are printed, marked interrupted")
        .context("cannot set up signal handling")?;
    let options = RunOptions {
        stop: flag.stop.clone(),
        ..options
    };
    check_command(&params)?;
    let say = |line: String| crate::out::err(&line);
    let selected = engine::select(params.engine)?;
    say(format!("usbperf-matrix: engine: {}", selected.reason));
    let name = params.workload.as_str().to_string();
    let result = match with_progress(&params, || workload::run(&params, &selected, &options)) {
        Ok(r) => r,
        // The error says its exit code (WorkloadError's Classify): what the command line asked
        // of the target is the user's to change (2), an I/O failure is not (4).
        Err(e) => {
            return Err(
                anyhow::Error::new(e).context(format!("{name} on {}", params.target.display()))
            )
        }
    };
    if result.engine_reason != selected.reason {
        // `auto` chose another engine for this very target: say which one ran and why.
        say(format!(
            "usbperf-matrix: engine for this target: {}",
            result.engine_reason
        ));
    }
    match args.format {
        Format::Table => crate::out!("{}", table(&result)),
        Format::Yaml => crate::out::data(&serde_norway::to_string(&result)?),
        Format::Json => crate::out::data(&(serde_json::to_string_pretty(&result)? + "\n")),
    }
    if result.stopped_by == StopReason::Interrupted {
        return Ok(Exit::Incomplete);
    }
    if result
        .verify
        .as_ref()
        .is_some_and(|v| v.mismatched_blocks > 0)
    {
        return Ok(Exit::VerdictFailed);
    }
    Ok(Exit::Pass)
}

/// While the test runs: on a terminal a spinner with the time, the bytes moved and the rate;
/// without one (a serial console, a pipe, the journal) a line every 10 s on standard error, so
/// a long test never looks hung. Standard output keeps only the result, for scripts.
fn with_progress<T: Send>(params: &WorkloadParams, f: impl FnOnce() -> T + Send) -> T {
    use std::io::IsTerminal;
    let what = format!(
        "{} on {}",
        params.workload.as_str(),
        params.target.display()
    );
    let stat = stat_of(&params.target);
    let counter = || {
        stat.as_ref().and_then(|(sys, dev)| {
            sys.attr(dev, "stat")
                .ok()
                .and_then(|t| crate::sysfs::parse::block_stat_bytes(&t))
        })
    };
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new_spinner();
        b.enable_steady_tick(Duration::from_millis(200));
        b
    });
    let out = watch(
        counter,
        Duration::from_secs(10),
        |t| match &bar {
            Some(b) => b.set_message(format!("{what}: {}", t.words())),
            None if t.line_due => {
                let line = format!("usbperf-matrix: {what}: running {}", t.words());
                crate::out::err(&line);
            }
            None => {}
        },
        f,
    );
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    out
}

/// The sysfs directory of the block device that holds `target` (the device itself, or the
/// filesystem's device for a file), whose `stat` counts its bytes; none on a filesystem
/// without one (tmpfs, overlay).
fn stat_of(target: &std::path::Path) -> Option<(SysfsRoot, String)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    // The file may not exist yet (bench creates it): its directory is on the same device.
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let md = std::fs::metadata(target)
        .or_else(|_| std::fs::metadata(dir))
        .ok()?;
    let dev = if md.file_type().is_block_device() {
        md.rdev()
    } else {
        md.dev()
    };
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let sys = SysfsRoot::live();
    let dir = format!("dev/block/{major}:{minor}");
    sys.exists(&dir, "stat").then_some((sys, dir))
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

fn op_line(name: &str, f: &OpFigures) -> String {
    format!(
        "{name:<6} {:>10.1} MiB/s {:>11.0} IOPS  lat us min {} mean {} p50 {} p90 {} p99 {} p99.9 {} max {}  stalls >1s {} >5s {}\n",
        f.mib_per_s,
        f.iops,
        us(f.latency.min_ns),
        us(f.latency.mean_ns),
        us(f.latency.p50_ns),
        us(f.latency.p90_ns),
        us(f.latency.p99_ns),
        us(f.latency.p99_9_ns),
        us(f.latency.max_ns),
        f.stalls.over_1s,
        f.stalls.over_5s,
    )
}

/// How the test ended, in words.
fn stopped_by(r: &BenchResult) -> &'static str {
    match r.stopped_by {
        StopReason::Size => "the size bound (every block done)",
        StopReason::Time => "the time bound",
        StopReason::Interrupted => "an interrupt",
        StopReason::Known => "its precision target (the figure was known)",
    }
}

/// The human summary: one line per direction, then CPU, target and extras.
pub fn table(r: &BenchResult) -> String {
    let p = &r.params;
    let mut out = format!(
        "{} on {} ({}): bs {} qd {} jobs {} engine {}, stopped by {}\n",
        r.workload.as_str(),
        r.target.path.display(),
        crate::units::human_bytes(r.target.region_bytes),
        format_size(p.block_bytes),
        p.queue_depth,
        p.jobs,
        r.engine,
        stopped_by(r)
    );
    out.push_str(&format!(
        "total  {} ({} bytes) in {:.3} s\n",
        crate::units::human_bytes(r.bytes),
        r.bytes,
        r.seconds
    ));
    if let Some(f) = &r.read {
        out.push_str(&op_line("read", f));
    }
    if let Some(f) = &r.write {
        out.push_str(&op_line("write", f));
    }
    out.push_str(&format!(
        "cpu    usr {:.1}% sys {:.1}%  {:.0} ns per I/O\n",
        r.cpu.usr_percent, r.cpu.sys_percent, r.cpu.cpu_ns_per_io
    ));
    if let Some(q) = &r.target.queue {
        out.push_str(&format!(
            "queue  {} read_ahead_kb {} scheduler {}\n",
            q.device,
            q.read_ahead_kb.map_or("n/a".into(), |v| v.to_string()),
            q.scheduler.as_deref().unwrap_or("n/a")
        ));
    }
    if let Some(ns) = r.flush_ns {
        out.push_str(&format!("flush  {:.3} s (included)\n", ns as f64 / 1e9));
    }
    if let Some(c) = &r.curve {
        for s in &c.samples {
            out.push_str(&format!(
                "curve  {:>8.2} s {:>10.1} MiB {:>8.1} MiB/s\n",
                s.t_s, s.cumulative_mib, s.mib_per_s
            ));
        }
        match &c.knee {
            Some(k) => out.push_str(&format!(
                "knee   at {:.1} s after {:.1} MiB: {:.1} -> {:.1} MiB/s ({:.0}% drop)\n",
                k.t_s, k.cumulative_mib, k.before_mib_per_s, k.after_mib_per_s, k.drop_percent
            )),
            None => out.push_str("knee   none (no sustained drop)\n"),
        }
    }
    if let Some(v) = &r.verify {
        for line in crate::workload::verify::summary(v, r.target.region_bytes) {
            out.push_str(&format!("verify {line}\n"));
        }
    }
    out
}
