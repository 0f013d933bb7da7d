//! Owns `usbperf-matrix flash`: raw flash (MTD/UBI) health against the board profile, the
//! read scan of an MTD device and the speed test of a test area, printed as text or JSON.

use anyhow::Context;

use super::{inventory, Format, UsageError};
use crate::config::{self, FlashProfile};
use crate::discover::mtd::RawFlash;
use crate::exit::Exit;
use crate::matrix;
use crate::report::schema::FlashDeviceReport;
use crate::report::verdict::texts;
use crate::safety::mtd::{check_flash_write, find};
use crate::safety::signals;
use crate::sysfs::SysfsRoot;

const AFTER_HELP: &str = "\
Examples:
  # the MTD and UBI devices with their counters, judged by the board profile's flash: limits
  usbperf-matrix flash health
  # read every page of mtd2, counting corrected bitflips and uncorrectable pages per block
  usbperf-matrix flash scan mtd2
  # erase/write/read speed and verify on the profile's test area (partition name or mtdN)
  usbperf-matrix flash speed usbperf-test --config /etc/usbperf/usbperf.yaml

The scan only reads (through the read-only /dev/mtdNro node). The speed test erases: it runs
only on a partition the profile names under `flash: test_areas:`, and never on one that is
mounted, attached to UBI, read-only, a chip with partitions, or named like a bootloader,
its environment, kernel, device tree, firmware, calibration data or rootfs. It skips bad
blocks (never erases them), writes with the driver's ECC, and leaves the area erased.
`run` does the same for the profile's `flash: scan:` and `test_areas:` lists, in the report.
Exit codes: 0 every figure within its limit; 1 a figure missed its limit (or could not be
read where a limit asks for it); 2 usage error or a refused test area; 3 interrupted;
4 the device could not be read or written.";

#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct FlashArgs {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Debug, clap::Subcommand)]
pub enum What {
    /// Every MTD and UBI device's health counters against the profile's limits.
    Health(Common),
    /// Read a whole MTD device, counting corrected bitflips and uncorrectable pages per erase
    /// block (read-only, safe on any partition).
    Scan(OnDevice),
    /// Erase, write, read back and verify the profile's test area, timing each.
    Speed(SpeedArgs),
}

#[derive(Debug, clap::Args)]
pub struct Common {
    #[command(flatten)]
    pub source: super::SourceArgs,
    /// The configuration whose `flash:` section sets test areas and limits (default:
    /// /etc/usbperf/usbperf.yaml when it exists).
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, clap::Args)]
pub struct OnDevice {
    #[command(flatten)]
    pub common: Common,
    /// The MTD device: `mtd2`, `/dev/mtd2` or its partition name.
    pub mtd: String,
}

#[derive(Debug, clap::Args)]
pub struct SpeedArgs {
    #[command(flatten)]
    pub on: OnDevice,
    /// Test at most this many good erase blocks (default: the profile's `test_blocks`, else
    /// the whole area).
    #[arg(long, value_name = "N")]
    pub blocks: Option<u64>,
}

/// What `flash` prints as YAML or JSON.
#[derive(serde::Serialize)]
struct FlashDoc<'a> {
    #[serde(skip_serializing_if = "RawFlash::is_empty")]
    inventory: &'a RawFlash,
    devices: &'a [FlashDeviceReport],
    pass: bool,
}

fn profile(c: &Common) -> anyhow::Result<FlashProfile> {
    let layers =
        config::load_layers(c.config.as_deref(), None).map_err(|e| UsageError(e.to_string()))?;
    Ok(config::resolve(layers).flash)
}

pub fn run(args: &FlashArgs) -> anyhow::Result<Exit> {
    let common = match &args.what {
        What::Health(c) => c,
        What::Scan(on) => &on.common,
        What::Speed(s) => &s.on.common,
    };
    let full = profile(common)?;
    let inv = inventory(&common.source)?;
    let flash = &inv.flash;
    let live = common.source.sysfs_root.is_none() && SysfsRoot::live().nodes_are_live();
    // Only what the subcommand asks for: the profile's limits, and its own scan or test.
    let mut p = FlashProfile {
        scan: Vec::new(),
        test_areas: Vec::new(),
        ..full.clone()
    };
    let mut only = None;
    match &args.what {
        What::Health(_) => {}
        What::Scan(on) => {
            let m = find(flash, &on.mtd).map_err(|e| UsageError(e.to_string()))?;
            p.scan = vec![m.name.clone()];
            only = Some(m);
        }
        What::Speed(s) => {
            let m = find(flash, &s.on.mtd).map_err(|e| UsageError(e.to_string()))?;
            if let Err(refusals) = check_flash_write(m, flash, &full.test_areas) {
                let why: Vec<String> = refusals.iter().map(ToString::to_string).collect();
                return Err(UsageError(format!(
                    "refusing to erase {}: {}",
                    m.name,
                    why.join("; ")
                ))
                .into());
            }
            p.test_areas = vec![m.name.clone()];
            p.test_blocks = s.blocks.or(full.test_blocks);
            only = Some(m);
        }
    }
    let flag = signals::install("the test stops after the current erase block")
        .context("could not install the signal handlers")?;
    let mut devices = matrix::flash::run(flash, &p, live, &flag)
        .map(|r| r.devices)
        .unwrap_or_default();
    if let Some(m) = only {
        devices.retain(|d| d.name == m.name || d.label == m.name);
    }
    let interrupted = flag.requested();
    let pass = !devices.is_empty() && devices.iter().all(|d| d.verdict.pass);
    let doc = FlashDoc {
        inventory: flash,
        devices: &devices,
        pass,
    };
    match common.format {
        Format::Table => print_text(&doc),
        Format::Yaml => crate::out::data(
            &serde_norway::to_string(&doc).context("could not encode the result as YAML")?,
        ),
        Format::Json => crate::out::data(
            &(serde_json::to_string_pretty(&doc).context("could not encode the result as JSON")?
                + "\n"),
        ),
    }
    Ok(if interrupted {
        Exit::Incomplete
    } else if pass {
        Exit::Pass
    } else {
        Exit::VerdictFailed
    })
}

fn print_text(doc: &FlashDoc<'_>) {
    let width = crate::out::console_width();
    if doc
        .devices
        .iter()
        .all(|d| d.scan.is_none() && d.speed.is_none())
    {
        crate::out!("{}", super::list::flash_table(doc.inventory, width));
    }
    for d in doc.devices {
        if let Some(s) = &d.scan {
            crate::outln!(
                "{} ({:?}): {} erase blocks, {} pages read in {:.1} s ({:.1} MiB/s){}",
                s.mtd,
                s.label,
                s.erase_blocks,
                s.pages_read,
                s.seconds,
                s.mib_per_s,
                if s.interrupted { ", INTERRUPTED" } else { "" }
            );
            crate::outln!(
                "  bad blocks {}{}; corrected bits {}; uncorrectable pages {}",
                s.bad_block_count,
                list_of(&s.bad_blocks, s.bad_block_count),
                s.corrected_bits,
                s.uncorrectable_pages
            );
            let unlisted = s.blocks_with_findings.saturating_sub(s.blocks.len() as u64);
            if unlisted > 0 {
                crate::outln!(
                    "  {} blocks with corrected bits or uncorrectable pages; the worst {} follow",
                    s.blocks_with_findings,
                    s.blocks.len()
                );
            }
            for b in &s.blocks {
                crate::outln!(
                    "  block {}: corrected {} bits, uncorrectable pages {}",
                    b.block,
                    b.corrected_bits,
                    if b.uncorrectable_pages.is_empty() {
                        "none".to_string()
                    } else {
                        list_of(&b.uncorrectable_pages, b.uncorrectable_pages.len() as u64)
                            .trim()
                            .to_string()
                    }
                );
            }
        }
        if let Some(s) = &d.speed {
            let r = |x: &crate::workload::mtd::FlashRate| match x.ci95_percent {
                Some(c) => format!("{:.2} MiB/s ±{c:.1} %", x.mib_per_s),
                None => format!("{:.2} MiB/s", x.mib_per_s),
            };
            crate::outln!(
                "{} ({:?}): {} blocks of {} bytes; erase {}, write {}, read {}",
                s.mtd,
                s.label,
                s.blocks_tested,
                s.bytes_per_block,
                r(&s.erase),
                r(&s.write),
                r(&s.read)
            );
            crate::outln!(
                "  verify: {} mismatched pages, {} erase failures, ECC corrected {} failed {}; \
                 bad blocks skipped {}; left erased: {}",
                s.mismatched_pages,
                s.erase_failure_count,
                s.corrected_bits,
                s.ecc_failures,
                s.bad_block_count,
                s.left_erased
            );
        }
        if d.verdict.pass {
            crate::outln!("PASS {} ({})", d.name, d.label);
        } else {
            crate::outln!(
                "FAIL {} ({}): {}",
                d.name,
                d.label,
                texts(&d.verdict.reasons).join("; ")
            );
        }
    }
    crate::outln!("flash: {}", if doc.pass { "PASS" } else { "FAIL" });
}

/// The first 16 numbers of a list of `count` (the list itself may be cut short).
fn list_of(v: &[u64], count: u64) -> String {
    if v.is_empty() {
        return String::new();
    }
    let shown: Vec<String> = v.iter().take(16).map(u64::to_string).collect();
    let more = count.saturating_sub(shown.len() as u64);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(" ({}{more})", shown.join(", "))
}
