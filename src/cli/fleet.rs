//! Owns `usbperf-matrix fleet`: many factory reports aggregated into distributions,
//! outliers, failure rankings, trends, learned thresholds or an HTML page.

use std::path::PathBuf;

use anyhow::Context;
use chrono::{DateTime, Utc};

use super::UsageError;
use crate::exit::Exit;
use crate::fleet::aggregate::{aggregate, Dimension, FleetOptions};
use crate::fleet::load::LoadOptions;
use crate::fleet::thresholds::{render_snippet, suggest, SuggestOptions};
use crate::fleet::{html, text, FleetError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FleetFormat {
    Table,
    Csv,
    Yaml,
    Json,
    Html,
}

/// Shown under `usbperf-matrix fleet --help`; docs/fleet.md has the full rules.
const AFTER_HELP: &str = "\
Examples:
  # distributions per board and class
  usbperf-matrix fleet /srv/reports/
  usbperf-matrix fleet /srv/reports/ --format html --out fleet.html
  usbperf-matrix fleet /srv/reports/ --since 2026-11-01 --board \"Toradex Apalis iMX8\"
  usbperf-matrix fleet /srv/reports/ --suggest-thresholds --group-by port

Input is untrusted: only regular files are opened (FIFOs, sockets, device nodes and symlinks \
to them are listed as skipped); a copy of a report already counted (same report_id, or same \
unit and started_at) is dropped and counted; a figure that is not finite, negative or beyond \
a ceiling (1e7 MiB/s, 1e9 IOPS, 1 h p99 latency, 1e6 Mbit/s link, 1 EiB) is refused with a \
note and the rest of its report counts.

Exit codes: 0 something was aggregated (unreadable files are listed, not fatal); 2 usage \
error, including --since / --board leaving out every readable report (the boards seen are \
listed); 4 no usable report at all (every file unreadable, not regular or unfinished).";

#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct FleetArgs {
    /// Report files, or directories searched recursively for *.yaml, *.yml and *.json.
    #[arg(required = true, value_name = "DIR|FILE")]
    pub inputs: Vec<PathBuf>,
    /// Group devices by these, comma-separated: board, device-class, port, device-model,
    /// tool-version.
    #[arg(long, default_value = "board,device-class", value_name = "DIMS")]
    pub group_by: String,
    #[arg(long, value_enum, default_value_t = FleetFormat::Table)]
    pub format: FleetFormat,
    /// Write the output here instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Only reports started on or after DATE (YYYY-MM-DD, UTC, or an RFC 3339 time).
    #[arg(long, value_name = "DATE")]
    pub since: Option<String>,
    /// Only reports of this board (the unit's device-tree / DMI model, as the table shows it).
    #[arg(long, value_name = "MODEL")]
    pub board: Option<String>,
    /// Print a board-profile `thresholds:` list learned from the devices that passed,
    /// per device class (and per port with --group-by port), instead of the summary.
    #[arg(long)]
    pub suggest_thresholds: bool,
    /// Margin of learned limits below the fleet's 1st percentile (above its p99 latency).
    #[arg(long, default_value_t = 20.0, value_name = "PERCENT")]
    pub margin_percent: f64,
    /// Parser threads (0 = one per CPU).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Compare each image build (the units' os-release) with the one before it, per board,
    /// device class and figure, and name the regressions.
    #[arg(long)]
    pub compare_builds: bool,
    /// Follow each flash part (eMMC/SD by CID, NVMe and SATA by serial) across the reports,
    /// factory and field: its day-0 wear, its rate per month, when it reaches its limit, and
    /// the parts wearing faster than their board's others.
    #[arg(long)]
    pub wear: bool,
}

fn parse_since(s: &str) -> anyhow::Result<DateTime<Utc>> {
    crate::fleet::records::parse_since(s).map_err(|e| UsageError(e).into())
}

pub fn run(args: &FleetArgs) -> anyhow::Result<Exit> {
    let margin = crate::fleet::learn_margin(args.margin_percent)?;
    let mut group_by = Dimension::parse_list(&args.group_by)?;
    if args.suggest_thresholds {
        group_by = crate::fleet::learning_groups(&group_by);
    }
    let opts = FleetOptions {
        group_by,
        load: LoadOptions {
            since: args.since.as_deref().map(parse_since).transpose()?,
            board: args.board.clone(),
            threads: args.threads,
        },
        compare_builds: args.compare_builds,
        wear: args.wear,
        ..FleetOptions::default()
    };
    let acc = aggregate(&args.inputs, opts)?;
    let nothing = acc.nothing_matched();
    let boards = acc.boards();
    let summary = acc.finish();
    for e in &summary.errors {
        crate::errln!("usbperf-matrix fleet: skipped {}", e.issue);
    }
    for e in summary.skipped.iter().filter(|s| s.kind == "not-regular") {
        crate::errln!(
            "usbperf-matrix fleet: skipped {}: {}",
            e.file.display(),
            e.issue
        );
    }
    if !summary.duplicates.is_empty() {
        crate::errln!(
            "usbperf-matrix fleet: dropped {} duplicate reports (copies of a report already \
             counted; listed under `duplicates`)",
            summary.duplicates.len()
        );
    }
    // A garbage fleet could refuse thousands: the first few here, all in the output.
    const STDERR_FIGURES: usize = 10;
    for f in summary.rejected_figures.iter().take(STDERR_FIGURES) {
        crate::errln!("usbperf-matrix fleet: {}", text::rejected_line(f));
    }
    if summary.rejected_figures.len() > STDERR_FIGURES {
        crate::errln!(
            "usbperf-matrix fleet: ... and {} more refused figures (all in the output)",
            summary.rejected_figures.len() - STDERR_FIGURES
        );
    }
    if let Some(e) = nothing {
        // Nothing is written: an empty summary must not replace yesterday's page (--out).
        return Err(e.into());
    }
    let sopts = SuggestOptions {
        margin,
        ..SuggestOptions::default()
    };
    let body = if args.suggest_thresholds {
        match boards.len() {
            0 => return Err(FleetError::Empty.into()),
            1 => {}
            _ => return Err(FleetError::ManyBoards(boards).into()),
        }
        render_snippet(&boards[0], &summary, &suggest(&summary, &sopts), &sopts)
    } else {
        match args.format {
            FleetFormat::Table => text::render_table(&summary, crate::out::console_width()),
            FleetFormat::Csv => text::render_csv(&summary),
            FleetFormat::Yaml => serde_norway::to_string(&summary)?,
            FleetFormat::Json => serde_json::to_string_pretty(&summary)? + "\n",
            FleetFormat::Html => html::render_html(&summary, &suggest(&summary, &sopts)),
        }
    };
    match &args.out {
        Some(p) => {
            std::fs::write(p, body).with_context(|| format!("cannot write {}", p.display()))?
        }
        // A table is console text, fitted to its width; the other formats are data.
        None if args.format == FleetFormat::Table && !args.suggest_thresholds => {
            crate::out::out(&body)
        }
        None => crate::out::data(&body),
    }
    Ok(Exit::Pass)
}
