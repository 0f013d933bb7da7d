//! Owns the command line: clap definitions, dispatch to one file per subcommand, error printing.

mod bench;
mod calibrate;
mod flash;
mod fleet;
mod list;
mod powercut;
mod run;
mod show;
mod tree;
mod upload;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::discover::linkcheck::{check_links, LinkFinding, PortExpectation};
use crate::discover::{self, Backend, Inventory, SysfsRoot};
use crate::exit::{Classify, Exit};

/// Storage inventory, USB link check and I/O test matrix for embedded Linux boards.
#[derive(Debug, Parser)]
#[command(name = "usbperf-matrix", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Where `list` and `tree` read the devices from: the live system or a recorded tree.
#[derive(Debug, Clone, clap::Args)]
pub struct SourceArgs {
    /// Read devices from this sysfs tree instead of /sys (a copied or recorded tree; the
    /// directory that holds `block/`, `class/` and `devices/`, or its parent holding `sys/`).
    #[arg(long, value_name = "DIR")]
    pub sysfs_root: Option<PathBuf>,
    #[command(flatten)]
    pub backend: BackendFlag,
}

/// `--backend`, for the subcommands that enumerate devices (`list`, `tree`, `run`).
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct BackendFlag {
    /// How to enumerate block devices: `udev` (libudev), `sysfs` (pure sysfs walk) or `auto`
    /// (libudev when it is built in and usable, sysfs otherwise; always sysfs with --sysfs-root).
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
}

impl BackendFlag {
    /// The enumerator for the live system.
    pub fn live(self) -> Backend {
        match self.backend {
            BackendArg::Sysfs => Backend::Sysfs,
            BackendArg::Udev => Backend::Udev,
            BackendArg::Auto => Backend::Auto,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Auto,
    Udev,
    Sysfs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List block devices with bus, class, identity, size and USB/SATA/MMC link data.
    List(list::ListArgs),
    /// The factory run: test every configured device, judge it, write the YAML report.
    Run(run::RunArgs),
    /// Show USB storage as a tree from each root hub (like `lsusb -t`), with speeds and drivers.
    Tree(tree::TreeArgs),
    /// Run one storage test (fio-like): a workload on a file or block device.
    Bench(bench::BenchArgs),
    /// Aggregate many factory reports: distributions, outliers, failures, trends, learned
    /// thresholds, or an HTML page of charts.
    Fleet(fleet::FleetArgs),
    /// Show reports as one table: a row per device, a column per test
    /// (MiB/s, IOPS, p99 latency, bad blocks), the verdict; as text, Markdown or CSV.
    Show(show::ShowArgs),
    /// On a golden unit: run the profile serial and auto in alternation, find the lanes whose
    /// figures move beside each other, and print the `schedule:`/`shared_lanes:` snippet for
    /// the board's profile with the speed-up measured.
    Calibrate(calibrate::CalibrateArgs),
    /// A power-cut test: `write` the region recording what the medium acknowledged, cut the
    /// power, and `verify` on the next boot that every acknowledged block survived.
    PowerCut(powercut::PowerCutArgs),
    /// Raw flash (MTD NAND/NOR, UBI): health counters against the profile, a read scan
    /// counting bitflips per erase block, and the speed test of the profile's test area.
    Flash(flash::FlashArgs),
    /// Send reports to a collector: queue REPORT files in the spool, then deliver the spool
    /// with retries; a report leaves the spool only when the collector acknowledged it.
    Upload(upload::UploadArgs),
}

/// Parses the command line, runs it, prints any error with its causes, returns the exit code.
pub fn main() -> Exit {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    let _ = e.print();
                    Exit::Pass
                }
                _ => {
                    // A usage error is console text like every other: fitted to the width.
                    crate::out::err(e.render().to_string().trim_end());
                    Exit::Usage
                }
            };
        }
    };
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            crate::errln!(
                "usbperf-matrix: error: {}",
                crate::words::said_once(e.chain())
            );
            exit_of(&e)
        }
    }
}

fn run(cli: &Cli) -> anyhow::Result<Exit> {
    match &cli.command {
        Command::List(args) => list::run(args),
        Command::Tree(args) => tree::run(args),
        Command::Run(args) => run::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Fleet(args) => fleet::run(args),
        Command::Show(args) => show::run(args),
        Command::Upload(args) => upload::run(args),
        Command::Calibrate(args) => calibrate::run(args),
        Command::PowerCut(args) => powercut::run(args),
        Command::Flash(args) => flash::run(args),
    }
}

/// A whole number from `min` to `max` for a flag, refused in words (clap's own ranges print
/// Rust's `1..=100`).
pub(crate) fn whole_in<T: TryFrom<u64>>(text: &str, min: u64, max: u64) -> Result<T, String> {
    let want = format!("give a whole number from {min} to {max}");
    let v: u64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number: {want}"))?;
    if v < min || v > max {
        return Err(format!("{v} is out of range: {want}"));
    }
    T::try_from(v).map_err(|_| format!("{v} is out of range: {want}"))
}

/// An error the user fixes by changing the command line or a config file (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl Classify for UsageError {
    fn exit(&self) -> Exit {
        Exit::Usage
    }
}

/// The exit code of an error that ends a subcommand: the first error on its chain that
/// classifies itself ([`Classify`]: every library error type does, variant by variant); 4
/// for one that does not (a file the command line could not write, an internal failure).
pub(crate) fn exit_of(e: &anyhow::Error) -> Exit {
    use crate::{config, discover, engine, fleet, matrix, safety, workload};
    for cause in e.chain() {
        macro_rules! classified_as {
            ($($t:ty),* $(,)?) => {
                $(
                    if let Some(x) = cause.downcast_ref::<$t>() {
                        return x.exit();
                    }
                )*
            };
        }
        classified_as!(
            UsageError,
            config::ConfigError,
            discover::DiscoverError,
            engine::EngineError,
            fleet::FleetError,
            matrix::run::RunError,
            safety::lock::LockError,
            safety::target::TargetError,
            workload::WorkloadError,
            workload::powercut::PowerCutError,
        );
    }
    Exit::Error
}

/// The output format of the commands that print one document (list, tree, bench): a table
/// for people, YAML or JSON for programs. `run --format` names the report file's encoding
/// (a config key), `show` and `fleet` have their own renderings.
/// `--engine` of `run` and `bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// io_uring when the kernel allows it, the sync thread pool otherwise.
    Auto,
    /// io_uring: one ring per job, the queue kept full (refused where the kernel disables it).
    Uring,
    /// A pread/pwrite thread pool, one thread per I/O in flight: runs on every kernel.
    Sync,
    /// No I/O at all: measures the tool's own cost, never a device.
    Null,
}

impl From<EngineArg> for crate::engine::EngineRequest {
    fn from(a: EngineArg) -> Self {
        match a {
            EngineArg::Auto => Self::Auto,
            EngineArg::Uring => Self::Uring,
            EngineArg::Sync => Self::Sync,
            EngineArg::Null => Self::Null,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns for a console.
    Table,
    /// The same figures as YAML, for programs.
    Yaml,
    /// The same figures as JSON, for programs.
    Json,
}

/// Runs discovery as `--sysfs-root` and `--backend` say.
pub(crate) fn inventory(src: &SourceArgs) -> anyhow::Result<Inventory> {
    let sys = match &src.sysfs_root {
        Some(dir) => SysfsRoot::at(dir),
        None => SysfsRoot::live(),
    };
    let backend =
        match (src.backend.backend, src.sysfs_root.is_some()) {
            // libudev always reads the live /sys: a copied tree can only be walked directly.
            (BackendArg::Udev, true) => return Err(UsageError(
                "--backend udev reads the live /sys only; with --sysfs-root use --backend sysfs \
                 (or run under umockdev-run to give libudev a recorded tree)"
                    .into(),
            )
            .into()),
            (_, true) | (BackendArg::Sysfs, false) => Backend::Sysfs,
            (BackendArg::Udev, false) => Backend::Udev,
            (BackendArg::Auto, false) => Backend::Auto,
        };
    let mut inv = discover::discover(&sys, backend).map_err(discover_error)?;
    if src.sysfs_root.is_some() && src.backend.backend == BackendArg::Auto {
        // Not the user's --backend: the recorded tree is what decided it.
        inv.backend_reason =
            "--sysfs-root names a recorded tree, which only the sysfs walk reads".into();
    }
    Ok(inv)
}

/// A discovery failure as the exit code table says: a backend this build lacks or a path that
/// is no sysfs tree is the user's to fix (2), anything else the tool's (4). Every subcommand
/// maps it here, so `run --backend udev` and `list --backend udev` agree.
pub(crate) fn discover_error(e: discover::DiscoverError) -> anyhow::Error {
    match e.exit() {
        Exit::Usage => anyhow::Error::new(e),
        _ => anyhow::Error::new(e).context("could not enumerate block devices"),
    }
}

pub(crate) fn link_findings(inv: &Inventory, expect: &[PortExpectation]) -> Vec<LinkFinding> {
    check_links(&inv.disks, expect)
}

pub(crate) fn print_findings(findings: &[LinkFinding]) {
    for f in findings {
        let measured = f
            .measured_mbps
            .map(discover::parse::speed_label)
            .unwrap_or_else(|| "-".into());
        if f.pass {
            crate::outln!(
                "link {}: PASS {} >= {}",
                f.port,
                measured,
                discover::parse::speed_label(f.expected_mbps)
            );
        } else {
            // The cause is a sentence or two: the console layer fits it to the width.
            crate::outln!("link {}: FAIL {}", f.port, f.cause);
        }
    }
}

#[cfg(test)]
mod exit_tests {
    use std::io;
    use std::path::PathBuf;

    use super::*;
    use crate::config::ConfigError;
    use crate::discover::DiscoverError;
    use crate::engine::{EngineError, OpKind};
    use crate::fleet::FleetError;
    use crate::matrix::run::RunError;
    use crate::safety::lock::LockError;
    use crate::safety::target::TargetError;
    use crate::workload::powercut::PowerCutError;
    use crate::workload::WorkloadError;

    fn io() -> io::Error {
        io::Error::from_raw_os_error(libc::EIO)
    }

    /// Every kind of error a subcommand can end with, and its documented exit code: 2 when the
    /// user fixes the command line or a config file, 4 when the tool could not do its job. A
    /// new variant does not compile until its type's `Classify` decides it; this table pins
    /// the decision. Each error is also wrapped in a context, as the subcommands add one.
    #[test]
    fn every_error_kind_has_its_exit_code() {
        let p = || PathBuf::from("/dev/sdx");
        let engine = |e: EngineError| e;
        let cases: Vec<(anyhow::Error, Exit)> = vec![
            (UsageError("bad flag".into()).into(), Exit::Usage),
            // the target: what was asked of it, then I/O
            (WorkloadError::NeedSize(p()).into(), Exit::Usage),
            (WorkloadError::NoDevice(p()).into(), Exit::Usage),
            (WorkloadError::NotATarget(p()).into(), Exit::Usage),
            (WorkloadError::Symlink(p()).into(), Exit::Usage),
            (WorkloadError::DeviceWriteRefused(p()).into(), Exit::Usage),
            (WorkloadError::DeviceBusy(p()).into(), Exit::Usage),
            (WorkloadError::DirectUnsupported(p()).into(), Exit::Usage),
            (
                WorkloadError::TooSmall {
                    path: p(),
                    actual_bytes: 1,
                    wanted_bytes: 2,
                }
                .into(),
                Exit::Usage,
            ),
            (WorkloadError::Alignment(1000).into(), Exit::Usage),
            (WorkloadError::BadParams("qd 0".into()).into(), Exit::Usage),
            (
                WorkloadError::Open {
                    path: p(),
                    source: io(),
                }
                .into(),
                Exit::Error,
            ),
            (
                WorkloadError::Prepare {
                    path: p(),
                    source: io(),
                }
                .into(),
                Exit::Error,
            ),
            (
                WorkloadError::Flush {
                    path: p(),
                    source: io(),
                }
                .into(),
                Exit::Error,
            ),
            (
                WorkloadError::Engine(EngineError::BadPlan("no jobs".into())).into(),
                Exit::Usage,
            ),
            (
                WorkloadError::Engine(EngineError::Io {
                    op: OpKind::Read,
                    offset: 0,
                    len: 4096,
                    source: io(),
                    hint: String::new(),
                })
                .into(),
                Exit::Error,
            ),
            (
                engine(EngineError::UringUnavailable {
                    reason: "disabled".into(),
                })
                .into(),
                Exit::Error,
            ),
            (
                EngineError::UnexpectedEof {
                    op: OpKind::Write,
                    offset: 0,
                }
                .into(),
                Exit::Error,
            ),
            (
                EngineError::Setup {
                    what: "ring",
                    source: io(),
                }
                .into(),
                Exit::Error,
            ),
            (EngineError::Panicked.into(), Exit::Error),
            (TargetError::Refused("mounted".into()).into(), Exit::Usage),
            (
                TargetError::Inventory {
                    what: "x",
                    source: DiscoverError::NotSysfs("/x".into()),
                }
                .into(),
                Exit::Error,
            ),
            // power-cut
            (
                PowerCutError::BadState {
                    path: p(),
                    why: "x".into(),
                }
                .into(),
                Exit::Usage,
            ),
            (PowerCutError::StateExists(p()).into(), Exit::Usage),
            (PowerCutError::BadParams("bs".into()).into(), Exit::Usage),
            (
                PowerCutError::Target(WorkloadError::DeviceBusy(p())).into(),
                Exit::Usage,
            ),
            (
                PowerCutError::Target(WorkloadError::Prepare {
                    path: p(),
                    source: io(),
                })
                .into(),
                Exit::Error,
            ),
            (
                PowerCutError::ReadState {
                    path: p(),
                    source: io(),
                }
                .into(),
                Exit::Error,
            ),
            (
                PowerCutError::WriteState {
                    path: p(),
                    source: io(),
                }
                .into(),
                Exit::Error,
            ),
            (
                PowerCutError::Write {
                    path: p(),
                    block: 1,
                    source: io(),
                }
                .into(),
                Exit::Error,
            ),
            (
                PowerCutError::Flush {
                    path: p(),
                    block: 1,
                    source: io(),
                }
                .into(),
                Exit::Error,
            ),
            (PowerCutError::EmptyState(p()).into(), Exit::Error),
            // the config, the inventory, the run
            (
                ConfigError::Syntax {
                    file: "c.yaml".into(),
                    line: 1,
                    column: 1,
                    msg: "x".into(),
                }
                .into(),
                Exit::Usage,
            ),
            (
                ConfigError::Read {
                    file: "c.yaml".into(),
                    err: io(),
                }
                .into(),
                Exit::Usage,
            ),
            (ConfigError::UnknownProfile("x".into()).into(), Exit::Usage),
            (ConfigError::ProfileLoop("x".into()).into(), Exit::Usage),
            (ConfigError::Environment("x".into()).into(), Exit::Usage),
            (DiscoverError::NotSysfs("/x".into()).into(), Exit::Usage),
            (DiscoverError::UdevNotBuilt.into(), Exit::Usage),
            (DiscoverError::Udev(io()).into(), Exit::Error),
            (
                RunError::Discover(DiscoverError::UdevNotBuilt).into(),
                Exit::Usage,
            ),
            (
                RunError::Discover(DiscoverError::Udev(io())).into(),
                Exit::Error,
            ),
            (
                LockError::Busy {
                    path: p(),
                    pid: "1".into(),
                }
                .into(),
                Exit::Error,
            ),
            (
                LockError::Open {
                    path: p(),
                    err: io(),
                }
                .into(),
                Exit::Error,
            ),
            (
                LockError::Dir {
                    path: p(),
                    err: io(),
                }
                .into(),
                Exit::Error,
            ),
            // the fleet
            (FleetError::UnknownDimension("x".into()).into(), Exit::Usage),
            (FleetError::BadMargin(100.0).into(), Exit::Usage),
            (FleetError::ManyBoards(vec![]).into(), Exit::Usage),
            (FleetError::Empty.into(), Exit::Usage),
            (
                FleetError::FilterMatchedNothing("x".into()).into(),
                Exit::Usage,
            ),
            (FleetError::NoReports { path: p() }.into(), Exit::Usage),
            (
                FleetError::Read {
                    path: p(),
                    err: io(),
                }
                .into(),
                Exit::Error,
            ),
            (
                FleetError::Malformed {
                    path: p(),
                    msg: "x".into(),
                }
                .into(),
                Exit::Error,
            ),
            (
                FleetError::SchemaTooNew {
                    path: p(),
                    version: 9,
                    supported: 2,
                }
                .into(),
                Exit::Error,
            ),
            (
                FleetError::NotRegular {
                    path: p(),
                    kind: "a FIFO",
                }
                .into(),
                Exit::Error,
            ),
            (
                FleetError::TooLarge {
                    path: p(),
                    bytes: 2,
                    limit: 1,
                }
                .into(),
                Exit::Error,
            ),
            (FleetError::NothingUsable("x".into()).into(), Exit::Error),
            // no classified error on the chain: the tool's
            (anyhow::anyhow!("cannot write the snippet"), Exit::Error),
        ];
        for (e, want) in cases {
            let what = format!("{e:#}");
            assert_eq!(exit_of(&e), want, "{what}");
            let wrapped = e.context("bench on /dev/sdx");
            assert_eq!(exit_of(&wrapped), want, "wrapped: {what}");
        }
    }
}
