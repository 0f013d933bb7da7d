//! Owns `usbperf-matrix power-cut`: `write` (the phase a power cut interrupts) and `verify`
//! (the next boot's judgement), printed as text or JSON.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::UsageError;
use crate::config;
use crate::exit::Exit;
use crate::report::write;
use crate::safety::signals;
use crate::safety::target::{check_target, TargetUse};
use crate::units::{format_size, parse_size};
use crate::workload::powercut::{self, Judgement, PowerCutError, Sync, Verdict, WriteEnd};
use crate::workload::target::TargetKind;

const AFTER_HELP: &str = "\
Examples:
  # write phase: cut the power at any moment of it
  usbperf-matrix power-cut write --target /media/emmc/pc.bin --size 64M \\
      --state /media/emmc/usbperf-power-cut.state
  # next boot (the boot service does this first when POWER_CUT_STATE exists)
  usbperf-matrix power-cut verify --state /media/emmc/usbperf-power-cut.state

The write phase writes the region once, each block headed with the test's id and its index,
and after every --flush-every blocks calls fdatasync (or writes with O_DSYNC) and only then
records, in the state file (replaced atomically), how many blocks the medium acknowledged.
The verify phase reads the region back: an acknowledged block lost, torn or misplaced fails
the test; blocks written after the last acknowledgement are counted, not judged. Keep the
state file on the medium under test (a cut then leaves the two consistent) or on the rootfs.

A block device is written only with --allow-write-device, and never when it is mounted, holds
the root or boot filesystem, swap, a RAID/LVM member or an eMMC boot/RPMB area.
Exit codes: write: 0 region written and acknowledged (verify next); 2 usage error, refused
target, or a state file that waits for its verify; 3 interrupted (test file and state
removed); 4 I/O failure (the state is kept for the verify).
verify: 0 pass; 1 fail; 2 no or bad state file; 4 untested (nothing acknowledged, or the
region unreadable: the state is kept).";

#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct PowerCutArgs {
    #[command(subcommand)]
    pub phase: Phase,
}

#[derive(Debug, clap::Subcommand)]
pub enum Phase {
    /// Write the region block after block, recording what the medium acknowledged.
    Write(WriteArgs),
    /// Read the region back and judge the acknowledged blocks.
    Verify(VerifyArgs),
}

fn size_arg(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| e.to_string())
}

#[derive(Debug, clap::Args)]
pub struct WriteArgs {
    /// The file (created at --size, kept for the verify) or block device to write.
    #[arg(long, value_name = "PATH")]
    pub target: PathBuf,
    /// The state file; it must not exist (an earlier test waiting for its verify).
    #[arg(long, value_name = "FILE")]
    pub state: PathBuf,
    /// The region (units: 64M, 1G); a device's whole size when not given.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub size: Option<u64>,
    /// Block size: a multiple of 512 up to 1M.
    #[arg(long, value_parser = size_arg, value_name = "SIZE", default_value = "4k")]
    pub bs: u64,
    /// Blocks written between two acknowledgements (fdatasync and state update).
    #[arg(long, value_name = "N", default_value_t = 64,
          value_parser = |s: &str| super::whole_in::<u64>(s, 1, 1 << 20))]
    pub flush_every: u64,
    /// Open with O_DSYNC (each write returns when the medium has it) instead of fdatasync.
    #[arg(long)]
    pub dsync: bool,
    /// Allow writing to a block device (destroys its data).
    #[arg(long)]
    pub allow_write_device: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VerdictFormat {
    /// A few lines for people.
    Text,
    /// The verdict as one JSON object.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The state file the write phase left.
    #[arg(long, value_name = "FILE")]
    pub state: PathBuf,
    /// Read the region from this path instead of the state's (a disk that came back under
    /// another name).
    #[arg(long, value_name = "PATH")]
    pub target: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = VerdictFormat::Text)]
    pub format: VerdictFormat,
    /// Also write the verdict as JSON to this new file (never replaces one).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Also write the verdict as a usbperf report (JSON: the unit, the disk that holds the
    /// region, the verdict) into this directory, for `upload` and `fleet`.
    #[arg(long, value_name = "DIR")]
    pub report_dir: Option<PathBuf>,
    /// Keep the state file and the test file after the verdict.
    #[arg(long)]
    pub keep: bool,
}

pub fn run(args: &PowerCutArgs) -> anyhow::Result<Exit> {
    match &args.phase {
        Phase::Write(a) => write_phase(a),
        Phase::Verify(a) => verify_phase(a),
    }
}

fn write_phase(args: &WriteArgs) -> anyhow::Result<Exit> {
    let target = TargetUse {
        path: &args.target,
        size_bytes: args.size,
        writes: true,
        allow_write_device: args.allow_write_device,
        workload: "power-cut",
    };
    check_target(&target)?;
    let flag =
        signals::install("the state file is removed: an interrupted write phase is no power cut")
            .context("cannot set up signal handling")?;
    let req = powercut::WriteRequest {
        target: &args.target,
        state: &args.state,
        size_bytes: args.size,
        block_bytes: args.bs,
        flush_every: args.flush_every,
        sync: if args.dsync {
            Sync::Dsync
        } else {
            Sync::Fdatasync
        },
        run_id: powercut::fresh_run_id(),
        allow_write_device: args.allow_write_device,
        stop: &flag.stop,
    };
    let say = |line: String| crate::out::err(&line);
    // A line at most every second, and the last: a factory cuts the power on seeing one.
    let mut last: Option<Instant> = None;
    let mut progress = |done: u64, blocks: u64| {
        if done == blocks || last.map_or(true, |t| t.elapsed() >= Duration::from_secs(1)) {
            say(format!("power-cut: acknowledged {done} of {blocks} blocks"));
            last = Some(Instant::now());
        }
    };
    match powercut::write(&req, &mut progress) {
        Ok(WriteEnd::Complete { blocks }) => {
            say(format!(
                "power-cut: the whole region ({blocks} blocks of {}) is written and \
                 acknowledged; run `usbperf-matrix power-cut verify --state {}` (after the cut, \
                 or now)",
                format_size(args.bs),
                args.state.display()
            ));
            Ok(Exit::Pass)
        }
        Ok(WriteEnd::Interrupted {
            acknowledged,
            blocks,
        }) => {
            say(format!(
                "power-cut: interrupted by {} after {acknowledged} of {blocks} blocks; the test \
                 file and the state are removed",
                flag.signal_name().unwrap_or_else(|| "a signal".into())
            ));
            Ok(Exit::Incomplete)
        }
        // The error says its exit code (PowerCutError's Classify): a state already there,
        // parameters or what was asked of the target are the user's (2), I/O is not (4).
        Err(e @ (PowerCutError::StateExists(_) | PowerCutError::BadParams(_))) => Err(e.into()),
        Err(e @ PowerCutError::Target(_)) => {
            Err(anyhow::Error::new(e)
                .context(format!("power-cut write on {}", args.target.display())))
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!(
            "power-cut write on {} (the state {} is kept: verify judges what was acknowledged)",
            args.target.display(),
            args.state.display()
        ))),
    }
}

fn verify_phase(args: &VerifyArgs) -> anyhow::Result<Exit> {
    if let Some(out) = &args.out {
        if out.exists() {
            return Err(UsageError(format!(
                "{} already exists: give --out a new file (a verdict never replaces another)",
                out.display()
            ))
            .into());
        }
    }
    let state = match powercut::read_state(&args.state) {
        Ok(s) => s,
        Err(e @ PowerCutError::EmptyState(_)) => {
            // Nothing to judge and nothing to come back for: the next write phase may start.
            crate::errln!("usbperf-matrix: power-cut: {e}; the empty state is removed");
            std::fs::remove_file(&args.state)
                .with_context(|| format!("cannot remove {}", args.state.display()))?;
            return Ok(Exit::Error);
        }
        Err(e) => {
            return Err(UsageError(format!(
                "{e}; remove it to give that test up (the next write phase can then start)"
            ))
            .into())
        }
    };
    let verdict = powercut::verify(&state, args.target.as_deref());
    let json = serde_json::to_string_pretty(&verdict)? + "\n";
    match args.format {
        VerdictFormat::Text => crate::out!("{}", text(&verdict)),
        VerdictFormat::Json => crate::out::data(&json),
    }
    if let Some(out) = &args.out {
        write::atomic_create(out, json.as_bytes()).with_context(|| {
            format!(
                "the verdict ({}) is printed above but could not be saved to {}; the state is \
                 kept",
                verdict_word(verdict.verdict),
                out.display()
            )
        })?;
    }
    if let Some(dir) = &args.report_dir {
        let target = args.target.as_deref().unwrap_or(&state.target);
        let path = save_report(&verdict, target, state.target_kind, dir).with_context(|| {
            format!(
                "the verdict ({}) is printed above but its report could not be written to {}; \
                 the state is kept",
                verdict_word(verdict.verdict),
                dir.display()
            )
        })?;
        crate::errln!("usbperf-matrix: power-cut: report {}", path.display());
    }
    let file_gone = state.target_kind == TargetKind::File
        && std::fs::symlink_metadata(args.target.as_deref().unwrap_or(&state.target)).is_err();
    if !powercut::keep_state(&verdict, args.keep, file_gone) {
        for left in powercut::clean_up(&state, &args.state) {
            crate::errln!("usbperf-matrix: power-cut: could not remove {left}");
        }
    }
    Ok(verdict.verdict.exit())
}

/// Writes the verdict's report (`report::powercut`) as a new JSON file in `dir`.
fn save_report(
    verdict: &powercut::Verdict,
    target: &Path,
    kind: TargetKind,
    dir: &Path,
) -> anyhow::Result<PathBuf> {
    let sys = crate::sysfs::SysfsRoot::live();
    let inventory = crate::discover::discover(&sys, crate::discover::Backend::Auto)
        .map_err(super::discover_error)?;
    let cfg = crate::report::powercut::config(dir, |k| std::env::var(k).ok())?;
    let facts = crate::report::powercut::Facts {
        unit: crate::report::unit::identify(&Default::default()),
        inventory_backend: inventory.backend.clone(),
        inventory: &inventory,
        mounts: &crate::safety::SystemFacts::live().mounts,
        target_devnum: crate::safety::devnum_of(target),
        target_is_file: kind == TargetKind::File,
        config: cfg,
        finished_at: chrono::Utc::now(),
    };
    let report = crate::report::powercut::report(verdict, facts);
    let id = report.report_id.clone().unwrap_or_default();
    let name = crate::matrix::run::report_file_name(
        &report.unit,
        report.started_at,
        &id,
        config::ReportFormat::Json,
    );
    let path = dir.join(name.replacen("usbperf-", "usbperf-power-cut-", 1));
    let bytes = report.encode(true).map_err(anyhow::Error::msg)?;
    write::atomic_create(&path, &bytes)?;
    Ok(path)
}

fn verdict_word(j: Judgement) -> &'static str {
    match j {
        Judgement::Pass => "pass",
        Judgement::Fail => "fail",
        Judgement::Untested => "untested",
    }
}

/// The verdict for people: the judgement and its reason, then the counts.
pub fn text(v: &Verdict) -> String {
    let word = verdict_word(v.verdict).to_uppercase();
    let cut = if v.write_complete {
        "the write phase had ended"
    } else {
        "cut during the write phase"
    };
    format!(
        "power-cut verify {}: {word}: {}\n  {} blocks of {} ({cut}): {} acknowledged, {} intact, \
         {} lost, {} torn, {} misplaced, {} unreadable; after the last acknowledgement {} reached the medium, \
         {} did not\n",
        v.target.display(),
        v.reason,
        v.blocks,
        format_size(v.block_bytes),
        v.acknowledged,
        v.intact,
        v.lost,
        v.torn,
        v.misplaced,
        v.unreadable,
        v.written_unacknowledged,
        v.never_written
    )
}
