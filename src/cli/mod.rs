//! Owns the command line: clap definitions, dispatch to one file per subcommand, error printing.

mod bench;
mod list;
mod tree;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::exit::Exit;

/// Storage inventory, USB link check and I/O test matrix for embedded Linux boards.
#[derive(Debug, Parser)]
#[command(name = "usbperf-matrix", version, about, propagate_version = true)]
pub struct Cli {
    /// Read devices from this sysfs tree instead of /sys (a copied or recorded tree; the
    /// directory that holds `block/`, `class/` and `devices/`, or its parent holding `sys/`).
    #[arg(long, global = true, value_name = "DIR")]
    pub sysfs_root: Option<PathBuf>,

    /// How to enumerate block devices: `udev` (libudev), `sysfs` (pure sysfs walk) or `auto`
    /// (libudev when it is built in and usable, sysfs otherwise; always sysfs with --sysfs-root).
    #[arg(long, global = true, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,

    #[command(subcommand)]
    pub command: Command,
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
    /// Show USB storage as a tree from each root hub (like `lsusb -t`), with speeds and drivers.
    Tree(tree::TreeArgs),
    /// Run one storage test (fio-like): a workload on a file or block device.
    Bench(bench::BenchArgs),
}

/// Parses the command line, runs it, prints any error with its causes, returns the exit code.
pub fn main() -> Exit {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    Exit::Pass
                }
                _ => Exit::Usage,
            };
        }
    };
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("usbperf-matrix: error: {e:#}");
            match e.downcast_ref::<UsageError>() {
                Some(_) => Exit::Usage,
                None => Exit::Error,
            }
        }
    }
}

fn run(cli: &Cli) -> anyhow::Result<Exit> {
    match &cli.command {
        Command::List(args) => list::run(cli, args),
        Command::Tree(args) => tree::run(cli, args),
        Command::Bench(args) => bench::run(cli, args),
    }
}

/// An error the user fixes by changing the command line or a config file (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);
