//! Owns `usbperf-matrix bench`: one fio-like test on one target, printed as a table, YAML or
//! JSON; SIGINT/SIGTERM stop it cleanly (in-flight I/O drained, exit code 3).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::ValueEnum;

use super::{Format, UsageError};
use crate::discover::{self, Backend, SysfsRoot};
use crate::engine::{self, EngineRequest, StopReason};
use crate::exit::Exit;
use crate::safety::{self, signals, SystemFacts};
use crate::stats::OpFigures;
use crate::units::{format_size, parse_duration, parse_size};
use crate::workload::verify::{VerifyMode, VerifyPhase};
use crate::workload::{
    self, BenchResult, CacheMode, Overrides, RunOptions, WorkloadKind, WorkloadParams,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// io_uring when the kernel allows it, the sync thread pool otherwise.
    Auto,
    Uring,
    Sync,
    Null,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VerifyModeArg {
    Full,
    Quick,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VerifyPhaseArg {
    Both,
    Write,
    Read,
}

fn size_arg(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| e.to_string())
}

fn duration_arg(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

/// One storage test, fio-like: a workload on a file or block device.
#[derive(Debug, clap::Args)]
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
    /// I/Os in flight per job.
    #[arg(long)]
    pub qd: Option<u32>,
    /// Parallel jobs (threads, one ring each).
    #[arg(long)]
    pub jobs: Option<u32>,
    /// Time bound (500ms, 5s, 2m); 0 for none.
    #[arg(long, value_parser = duration_arg, value_name = "DURATION")]
    pub runtime: Option<Duration>,
    /// The region to test, and the size of a created file (units: 256M, 1G).
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub size: Option<u64>,
    #[arg(long, value_enum, default_value_t = EngineArg::Auto)]
    pub engine: EngineArg,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// direct (O_DIRECT), fdatasync (buffered + final flush, timed), dsync (O_DSYNC), buffered.
    #[arg(long, value_enum)]
    pub cache: Option<CacheMode>,
    /// Share of reads for `mixed`, in %.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub read_percent: Option<u8>,
    /// Keep going over the region until --runtime (fio's time_based).
    #[arg(long)]
    pub time_based: bool,
    /// Seed of the random offsets and of the verify pattern.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Sampling interval of `write-curve`.
    #[arg(long, value_parser = duration_arg, value_name = "DURATION")]
    pub interval: Option<Duration>,
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
        p.engine = match self.engine {
            EngineArg::Auto => EngineRequest::Auto,
            EngineArg::Uring => EngineRequest::Uring,
            EngineArg::Sync => EngineRequest::Sync,
            EngineArg::Null => EngineRequest::Null,
        };
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

/// Checks everything about the command before any file is created or any I/O is done:
/// the workload's parameters (the same rules a config file's tests obey), the kind of target,
/// and for a block device every safety rule of the factory run. `--allow-write-device` only
/// lifts "this is a device"; a mounted, system, swap, RAID/LVM member or eMMC boot device is
/// refused whatever the flags say.
fn check_command(params: &WorkloadParams) -> anyhow::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    if params.size_bytes == Some(0) {
        return Err(
            UsageError("--size 0: give the size of the region to test, e.g. 16M".into()).into(),
        );
    }
    workload::check_params(params).map_err(|e| UsageError(e.as_flag()))?;
    let path = &params.target;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(UsageError(format!("--target {}: {e}", path.display())).into());
        }
    };
    let Some(meta) = meta else {
        if params.size_bytes.is_none() {
            return Err(UsageError(format!(
                "--target {} does not exist: give --size to create a test file of that size there",
                path.display()
            ))
            .into());
        }
        return check_new_file(path, params.size_bytes.unwrap_or(0));
    };
    // Follow a /dev/disk/by-id/... link to what it names; a symlink to a file is refused by
    // the target itself (a test file path must never redirect writes).
    let followed = if meta.file_type().is_symlink() {
        std::fs::metadata(path).ok()
    } else {
        Some(meta.clone())
    };
    let Some(real) = followed else {
        return Err(UsageError(format!(
            "--target {}: dangling symbolic link",
            path.display()
        ))
        .into());
    };
    if real.is_dir() {
        return Err(UsageError(format!(
            "--target {} is a directory: name a file in it (created at --size and removed \
             afterwards), e.g. {}/usbperf.bin",
            path.display(),
            path.display()
        ))
        .into());
    }
    if !(real.is_file() || real.file_type().is_block_device()) {
        return Err(UsageError(format!(
            "--target {} is neither a regular file nor a block device (character device, FIFO \
             or socket): point it at a file or a /dev/sdX-like disk",
            path.display()
        ))
        .into());
    }
    if real.is_file() && params.writes() {
        // Growing an existing file to --size takes room like a new file does: keep the
        // headroom for what is added.
        let grow = params.size_bytes.unwrap_or(0).saturating_sub(real.len());
        if grow > 0 {
            check_new_file(path, grow)?;
        }
    }
    if real.file_type().is_block_device() && params.writes() {
        if !params.allow_write_device {
            return Err(UsageError(format!(
                "{} is a block device and {} writes to it, destroying its data: add \
                 --allow-write-device if that is intended",
                path.display(),
                params.workload.as_str()
            ))
            .into());
        }
        // Always the live system: a recorded tree cannot prove this machine's disk is unused.
        let inv = discover::discover(&SysfsRoot::live(), Backend::Sysfs)
            .context("cannot enumerate block devices to check the target is safe to write")?;
        let facts = SystemFacts::live();
        if let Err(refusals) = safety::check_device_write(path, &inv, &facts) {
            let why: Vec<String> = refusals.iter().map(|r| r.to_string()).collect();
            return Err(UsageError(format!(
                "refusing to write to {}: {}",
                path.display(),
                why.join("; ")
            ))
            .into());
        }
    }
    Ok(())
}

/// A file bench will create: its directory must be a real directory on a writable filesystem
/// with room for it above the free-space headroom (10 %), as a factory run's test files.
fn check_new_file(path: &std::path::Path, size: u64) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // An inventory that cannot be read proves nothing (an eMMC boot area could hold the
    // directory): refuse, as everywhere else.
    let inv = discover::discover(&SysfsRoot::live(), Backend::Sysfs)
        .context("cannot enumerate block devices to check where the test file would go")?;
    let facts = SystemFacts::live();
    safety::check_file_dir(&dir, &facts, &inv, 10, 0, size)
        .map(|_| ())
        .map_err(|r| UsageError(format!("cannot create {}: {r}", path.display())).into())
}

pub fn run(cli: &super::Cli, args: &BenchArgs) -> anyhow::Result<Exit> {
    let params = args.params();
    let options = RunOptions {
        sysfs_root: cli
            .sysfs_root
            .clone()
            .unwrap_or_else(|| PathBuf::from("/sys")),
        ..RunOptions::default()
    };
    // Before anything is created: every thread spawned later inherits the blocked signals,
    // and a SIGINT after a test file exists always reaches the cleanup.
    let flag = signals::install().context("cannot set up signal handling")?;
    let options = RunOptions {
        stop: flag.stop.clone(),
        ..options
    };
    check_command(&params)?;
    let selected = engine::select(params.engine)?;
    crate::errln!("usbperf-matrix: engine: {}", selected.reason);
    let name = params.workload.as_str().to_string();
    let result = with_progress(&params, || workload::run(&params, &selected, &options))
        .with_context(|| format!("{name} on {}", params.target.display()))?;
    if result.engine_reason != selected.reason {
        // `auto` chose another engine for this very target: say which one ran and why.
        crate::errln!(
            "usbperf-matrix: engine for this target: {}",
            result.engine_reason
        );
    }
    match args.format {
        Format::Table => crate::out!("{}", table(&result)),
        Format::Yaml => crate::out!("{}", serde_norway::to_string(&result)?),
        Format::Json => crate::outln!("{}", serde_json::to_string_pretty(&result)?),
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

/// A spinner with the elapsed time on a terminal while the test runs; nothing otherwise (a
/// script reading the table must not get spinner frames).
fn with_progress<T: Send>(params: &WorkloadParams, f: impl FnOnce() -> T + Send) -> T {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return f();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.enable_steady_tick(Duration::from_millis(200));
    let what = format!(
        "{} on {}",
        params.workload.as_str(),
        params.target.display()
    );
    std::thread::scope(|scope| {
        let handle = scope.spawn(f);
        let t0 = std::time::Instant::now();
        while !handle.is_finished() {
            bar.set_message(format!("{what}: {:.0} s", t0.elapsed().as_secs_f64()));
            std::thread::sleep(Duration::from_millis(100));
        }
        bar.finish_and_clear();
        match handle.join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        }
    })
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

fn op_line(name: &str, f: &OpFigures) -> String {
    format!(
        "{name:<6} {:>10.1} MiB/s {:>11.0} IOPS  lat µs min {} mean {} p50 {} p90 {} p99 {} p99.9 {} max {}  stalls >1s {} >5s {}\n",
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
