//! Owns `usbperf-matrix list`: the block-device inventory as a table, YAML or JSON, and the
//! link check against `--expect PORT=SPEED`.

use anyhow::Context;

use super::{inventory, link_findings, print_findings, Format, UsageError};
use crate::config;
use crate::discover::mtd::RawFlash;
use crate::discover::parse::speed_label;
use crate::discover::{linkcheck::PortExpectation, Disk, Inventory};
use crate::exit::Exit;
use crate::matrix::plan::{self, DiskPlan};
use crate::safety::SystemFacts;
use crate::sysfs::SysfsRoot;
use crate::units::human_bytes;

const AFTER_HELP: &str = "\
Examples:
  # every disk of this machine
  usbperf-matrix list
  # and check the stick on port 2-1 is SuperSpeed
  usbperf-matrix list --expect usb:2-1=5000M
  # for a script
  usbperf-matrix list --format json > inventory.json
  # a sysfs tree recorded on another unit
  usbperf-matrix list --sysfs-root ./recorded-sys

Exit codes: 0 listed (and every --expect met); 1 a link check failed; 2 usage error.";

#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct ListArgs {
    #[command(flatten)]
    pub source: super::SourceArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also list disks of size 0 (detached loop devices, empty card readers).
    #[arg(long)]
    pub all: bool,
    /// Check that the USB device on PORT linked at least at SPEED Mbit/s, e.g. `usb:1-1=480`
    /// (repeatable). A shortfall makes the exit code 1.
    #[arg(long, value_name = "PORT=SPEED")]
    pub expect: Vec<PortExpectation>,
    /// The configuration whose run the RUN column shows (default: /etc/usbperf/usbperf.yaml
    /// when it exists, else the built-in `quick` profile, as `run` does).
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
}

/// What `run` would do with each disk, for the live system only: a recorded tree's (or a
/// umockdev testbed's) mounts and holders are not this machine's. A configuration that does not load hides the column
/// with a note, unless it was named with --config (then it is the user's error, exit 2).
fn run_plan(args: &ListArgs, inv: &Inventory) -> anyhow::Result<Result<Vec<DiskPlan>, String>> {
    let sys = SysfsRoot::live();
    if args.source.sysfs_root.is_some() || !sys.nodes_are_live() {
        return Ok(Err(
            "a recorded tree: the run plan needs the live system".into()
        ));
    }
    let cfg = match config::load_layers(args.config.as_deref(), None) {
        Ok(layers) => config::resolve(layers),
        Err(e) if args.config.is_some() => return Err(UsageError(e.to_string()).into()),
        Err(e) => return Ok(Err(format!("the run plan is not shown: {e}"))),
    };
    Ok(Ok(plan::every_disk(&cfg, inv, &SystemFacts::live(), &sys)))
}

pub fn run(args: &ListArgs) -> anyhow::Result<Exit> {
    let mut inv = inventory(&args.source)?;
    if !args.all {
        inv.disks.retain(|d| d.size_bytes != Some(0));
    }
    let findings = link_findings(&inv, &args.expect);
    let plan = run_plan(args, &inv)?;
    match args.format {
        Format::Table => {
            crate::out!(
                "{}",
                table(
                    &inv,
                    plan.as_ref().ok().map(Vec::as_slice),
                    crate::out::console_width()
                )
            );
            match &plan {
                Ok(p) => {
                    for d in p {
                        crate::outln!("{}: {}", d.name, d.detail);
                    }
                }
                Err(note) => crate::outln!("{note}"),
            }
            print_findings(&findings);
        }
        Format::Yaml | Format::Json => {
            let doc = ListDoc {
                inventory: &inv,
                link_check: &findings,
                run_plan: plan.as_ref().ok().map(Vec::as_slice).unwrap_or(&[]),
            };
            let text = if args.format == Format::Yaml {
                serde_norway::to_string(&doc).context("could not encode the inventory as YAML")?
            } else {
                serde_json::to_string_pretty(&doc)
                    .context("could not encode the inventory as JSON")?
                    + "\n"
            };
            crate::out::data(&text);
        }
    }
    Ok(if findings.iter().all(|f| f.pass) {
        Exit::Pass
    } else {
        Exit::VerdictFailed
    })
}

#[derive(serde::Serialize)]
struct ListDoc<'a> {
    #[serde(flatten)]
    inventory: &'a Inventory,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    link_check: &'a [crate::discover::linkcheck::LinkFinding],
    /// What `run` with the configuration does with each disk (live system only).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    run_plan: &'a [DiskPlan],
}

fn link_col(d: &Disk) -> String {
    if let Some(u) = &d.usb {
        let sp = u.speed_mbps.map(speed_label).unwrap_or_else(|| "?".into());
        let drv = u.driver.as_deref().unwrap_or("?");
        let chain = match (u.min_chain_speed_mbps, u.speed_mbps) {
            (Some(m), Some(s)) if m < s => format!(" (chain {})", speed_label(m)),
            _ => String::new(),
        };
        return format!("usb {} {sp} {drv}{chain}", u.port_path);
    }
    if let Some(s) = &d.sata {
        let spd = s
            .sata_spd_gbps
            .map(|g| format!("{g:.1} Gbps"))
            .unwrap_or_else(|| "link ?".into());
        return format!("{} {spd}", s.port);
    }
    if let Some(m) = &d.mmc {
        let mut s = format!("{} {}", m.card, m.card_type.as_deref().unwrap_or("?"));
        if let Some(t) = &m.timing {
            s.push(' ');
            s.push_str(t);
        }
        if let Some(a) = &m.area {
            s.push_str(&format!(
                " area={}",
                serde_json::to_value(a).unwrap_or_default()
            ));
        }
        return s;
    }
    String::new()
}

/// The health summary (`life A 10% B 0% eol normal`, `used 3% spare 100%`, `crc 0`), `-`
/// when nothing was read; the reasons are in the YAML/JSON `health.missing`.
pub fn health_col(d: &Disk) -> String {
    d.health
        .as_ref()
        .map(|h| h.short())
        .unwrap_or_else(|| "-".into())
}

fn mounts_col(d: &Disk) -> String {
    let mut v: Vec<String> = d.mounts.iter().map(|m| m.mountpoint.clone()).collect();
    for p in &d.partitions {
        for m in &p.mounts {
            v.push(format!("{}:{}", p.name, m.mountpoint));
        }
    }
    if !d.holders.is_empty() {
        v.push(format!("held by {}", d.holders.join(",")));
    }
    v.join(" ")
}

/// A plain aligned table of at most `width` columns: one disk a line (two when the console
/// is narrow); with a plan, what `run` does with it (RUN).
pub fn table(inv: &Inventory, plan: Option<&[DiskPlan]>, width: usize) -> String {
    let mut rows: Vec<[String; 9]> = vec![[
        "NAME".into(),
        "CLASS".into(),
        "SIZE".into(),
        "MODEL".into(),
        "SERIAL".into(),
        "LINK".into(),
        "HEALTH".into(),
        if plan.is_some() { "RUN" } else { "" }.into(),
        "MOUNTS".into(),
    ]];
    for d in &inv.disks {
        let model = [d.vendor.as_deref(), d.model.as_deref()]
            .iter()
            .flatten()
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        rows.push([
            d.name.clone(),
            d.class.to_string(),
            d.size_bytes.map(human_bytes).unwrap_or_else(|| "?".into()),
            model,
            d.serial.clone().unwrap_or_default(),
            link_col(d),
            health_col(d),
            plan.and_then(|p| p.iter().find(|x| x.name == d.name))
                .map(|x| x.how.to_string())
                .unwrap_or_default(),
            mounts_col(d),
        ]);
    }
    let rows: Vec<Vec<String>> = rows.into_iter().map(Vec::from).collect();
    let mut out = crate::out::table(&rows, &[], width);
    out.push_str(&format!(
        "{} disk(s), backend {} ({})\n",
        inv.disks.len(),
        inv.backend,
        inv.backend_reason
    ));
    if !inv.flash.is_empty() {
        out.push_str(&flash_table(&inv.flash, width));
    }
    for w in &inv.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}

/// The raw flash: an MTD device a line (its geometry, counters and users), then each UBI
/// device with its wear and volumes.
pub fn flash_table(flash: &RawFlash, width: usize) -> String {
    let size = |v: Option<u64>| v.map(human_bytes).unwrap_or_else(|| "?".into());
    let mut rows: Vec<Vec<String>> = vec![[
        "MTD", "TYPE", "SIZE", "ERASE", "PAGE+OOB", "ECC", "LABEL", "HEALTH", "USERS",
    ]
    .map(String::from)
    .to_vec()];
    for m in &flash.mtd {
        let page = match (m.page_bytes, m.oob_bytes) {
            (Some(p), Some(o)) if o > 0 => format!("{p}+{o}"),
            (Some(p), _) => p.to_string(),
            _ => "?".into(),
        };
        let ecc = match (m.ecc_strength_bits, m.ecc_step_bytes) {
            (Some(s), Some(st)) if s > 0 => format!("{s}b/{st}"),
            _ => "-".into(),
        };
        let h = &m.health;
        let health = match (h.bad_blocks, h.corrected_bits, h.ecc_failures) {
            (None, None, None) => "-".to_string(),
            _ => format!(
                "bad {} corrected {} failed {}",
                opt(h.bad_blocks),
                opt(h.corrected_bits),
                opt(h.ecc_failures)
            ),
        };
        let users: Vec<String> = m.users.iter().map(|u| u.short()).collect();
        rows.push(vec![
            m.name.clone(),
            m.kind.as_str().to_string(),
            size(m.size_bytes),
            size(m.erase_block_bytes),
            page,
            ecc,
            m.label.clone(),
            health,
            users.join(", "),
        ]);
    }
    let mut out = crate::out::table(&rows, &[], width);
    out.push_str(&format!("{} MTD device(s)\n", flash.mtd.len()));
    for u in &flash.ubi {
        let h = &u.health;
        out.push_str(&format!(
            "{} on {}: {} of {} erase blocks free, erase count max {}{}, bad {}, reserved for bad {}\n",
            u.name,
            u.mtd.as_deref().unwrap_or("?"),
            opt(u.available_pebs),
            opt(u.total_pebs),
            opt(h.max_erase_count),
            h.mean_erase_count.map(|m| format!(" mean {m}")).unwrap_or_default(),
            opt(h.bad_pebs),
            opt(h.reserved_for_bad),
        ));
        for v in &u.volumes {
            let mounts: Vec<String> = v.mounts.iter().map(|m| m.short()).collect();
            out.push_str(&format!(
                "  {} {:?} {} {}{}{}\n",
                v.name,
                v.label,
                v.kind.as_deref().unwrap_or("?"),
                size(v.size_bytes),
                if v.corrupted { " CORRUPTED" } else { "" },
                if mounts.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", mounts.join(", "))
                },
            ));
        }
    }
    out
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "?".into(), |v| v.to_string())
}
