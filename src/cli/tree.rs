//! Owns `usbperf-matrix tree`: USB storage drawn from each root hub down, like `lsusb -t`,
//! with speeds, drivers and the block devices under each port.

use super::{inventory, link_findings, print_findings, Format};
use crate::discover::parse::speed_label;
use crate::discover::usbtree::{self, port_number, Bus, TreeNode};
use crate::discover::{linkcheck::PortExpectation, Inventory};
use crate::exit::Exit;
use crate::units::human_bytes;

const AFTER_HELP: &str = "\
Examples:
  # USB storage from each root hub, like lsusb -t
  usbperf-matrix tree
  # and check the link on port 1-1
  usbperf-matrix tree --expect usb:1-1=480M
  usbperf-matrix tree --format yaml

Exit codes: 0 shown (and every --expect met); 1 a link check failed; 2 usage error.";

#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct TreeArgs {
    #[command(flatten)]
    pub source: super::SourceArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Check that the USB device on PORT linked at least at SPEED Mbit/s, e.g. `usb:1-1=480`
    /// (repeatable). A shortfall makes the exit code 1.
    #[arg(long, value_name = "PORT=SPEED")]
    pub expect: Vec<PortExpectation>,
}

pub fn run(args: &TreeArgs) -> anyhow::Result<Exit> {
    let inv = inventory(&args.source)?;
    let buses = usbtree::build(&inv.disks);
    let findings = link_findings(&inv, &args.expect);
    match args.format {
        Format::Table => {
            crate::out!("{}", render(&buses, &inv));
            print_findings(&findings);
        }
        Format::Yaml => crate::out::data(&serde_norway::to_string(&buses)?),
        Format::Json => crate::out::data(&(serde_json::to_string_pretty(&buses)? + "\n")),
    }
    Ok(if findings.iter().all(|f| f.pass) {
        Exit::Pass
    } else {
        Exit::VerdictFailed
    })
}

fn speed(s: Option<f64>) -> String {
    s.map(speed_label).unwrap_or_else(|| "?M".into())
}

/// Renders the tree as text.
pub fn render(buses: &[Bus], inv: &Inventory) -> String {
    let mut out = String::new();
    if buses.is_empty() {
        out.push_str("no USB storage devices found\n");
        return out;
    }
    for b in buses {
        let r = &b.root;
        out.push_str(&format!(
            "/:  Bus {:03} {}: Class=root_hub, Driver={}, {}{}\n",
            b.bus.unwrap_or(0),
            r.hop.port_path,
            b.host_controller_driver.as_deref().unwrap_or("?"),
            speed(r.hop.speed_mbps),
            r.hop
                .version
                .as_ref()
                .map(|v| format!(", USB {v}"))
                .unwrap_or_default(),
        ));
        for c in &r.children {
            node(&mut out, c, 1, inv);
        }
    }
    out
}

fn node(out: &mut String, n: &TreeNode, depth: usize, inv: &Inventory) {
    let indent = "    ".repeat(depth);
    let port = port_number(&n.hop.port_path)
        .map(|p| p.to_string())
        .unwrap_or_else(|| "?".into());
    let id = match (&n.hop.vendor_id, &n.hop.product_id) {
        (Some(v), Some(p)) => format!(" {v}:{p}"),
        _ => String::new(),
    };
    let what = if n.disks.is_empty() {
        "Class=Hub".to_string()
    } else {
        format!(
            "If {}, Class=Mass Storage, Driver={}",
            n.interface
                .as_deref()
                .and_then(|i| i.rsplit('.').next())
                .unwrap_or("?"),
            n.driver.as_deref().unwrap_or("?")
        )
    };
    out.push_str(&format!(
        "{indent}|__ Port {port} ({}){id}: {what}, {}{}\n",
        n.hop.port_path,
        speed(n.hop.speed_mbps),
        n.hop
            .version
            .as_ref()
            .map(|v| format!(", USB {v}"))
            .unwrap_or_default(),
    ));
    for name in &n.disks {
        let d = inv.disks.iter().find(|d| &d.name == name);
        let size = d
            .and_then(|d| d.size_bytes)
            .map(human_bytes)
            .unwrap_or_default();
        let model = d
            .map(|d| {
                [d.vendor.as_deref(), d.model.as_deref()]
                    .iter()
                    .flatten()
                    .copied()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        let health = d
            .and_then(|d| d.health.as_ref())
            .map(|h| h.short())
            .filter(|h| h != "-")
            .map(|h| format!("  health: {h}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{indent}    `-> {name}  {size}  {model}{health}\n"
        ));
    }
    for c in &n.children {
        node(out, c, depth + 1, inv);
    }
}
