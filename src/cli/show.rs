//! Owns `usbperf-matrix show`: report files → the matrix table (`crate::report::table`) on
//! standard output. Reads, decodes, renders, prints; every rule of the table is in the
//! library.

use std::path::PathBuf;

use anyhow::Context;

use crate::exit::Exit;
use crate::fleet::load::MAX_REPORT_BYTES;
use crate::report::table::{render, render_fit, MatrixTable, Style};
use crate::report::wire::{self, Newer};
use usbperf_report::seal::{self, SealState};

const AFTER_HELP: &str = "\
Examples:
  # one table: a row per device, a column per test
  usbperf-matrix show /var/lib/usbperf/reports/usbperf-*.yaml
  usbperf-matrix show --format markdown report.yaml >> ticket.md
  usbperf-matrix show --format csv reports/*.json > line-3.csv

A report signed by its unit has a signature file beside it (`<report>.sig`, written by a run
whose config has an `upload:` section); show says whether each one holds: whether the file is
byte for byte what the holder of that unit key signed. A report without one is unsigned.

Exit codes: 0 shown; 2 a file is not a usbperf report (the limit it broke is named), or its
signature does not hold; 4 a file cannot be read. The other files are still shown.";

#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct ShowArgs {
    /// Output format: aligned `text` for a console, a `markdown` pipe table for a wiki or a
    /// ticket, or `csv` (one header row, plain numbers) for a spreadsheet.
    #[arg(long, value_enum, default_value_t = Style::Text)]
    pub format: Style,
    /// Report files (YAML or JSON, as `usbperf-matrix run` writes them); several make one
    /// table with a row per device per report.
    #[arg(required = true, value_name = "REPORT")]
    pub reports: Vec<PathBuf>,
}

pub fn run(args: &ShowArgs) -> anyhow::Result<Exit> {
    // A bad file does not hide the others: each is reported, the rest still render, and the
    // exit code is the worst seen (4, a file that cannot be read, over 2, not a report).
    let mut exit = Exit::Pass;
    let mut views = Vec::new();
    let mut seals = Vec::new();
    for path in &args.reports {
        // A report is kilobytes; a device node or a runaway file must not exhaust memory:
        // the fleet's bound on a report file.
        if let Ok(md) = std::fs::metadata(path) {
            if !md.is_file() || md.len() > MAX_REPORT_BYTES {
                crate::errln!(
                    "usbperf-matrix show: {}: not a report file ({}): give the YAML or JSON \
                     file run wrote",
                    path.display(),
                    if md.is_file() {
                        "larger than 64 MiB"
                    } else {
                        "not a regular file"
                    }
                );
                if exit == Exit::Pass {
                    exit = Exit::Usage;
                }
                continue;
            }
        }
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                crate::errln!(
                    "usbperf-matrix show: {}: cannot read the file: {e}",
                    path.display()
                );
                exit = Exit::Error;
                continue;
            }
        };
        match wire::read(path, &bytes, Newer::ReadWhatDecodes) {
            Ok(v) => {
                // The file name is enough to tell reports apart: run names them
                // `usbperf-<machine>-<start>.yaml`.
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| path.display().to_string());
                let state = seal::check_beside(path, &bytes);
                if let SealState::Broken { why } = &state {
                    crate::errln!(
                        "usbperf-matrix show: {}: {why}; it is shown as the file is now, not as \
                         its unit wrote it",
                        path.display()
                    );
                    if exit == Exit::Pass {
                        exit = Exit::Usage;
                    }
                }
                seals.push((name.clone(), state));
                views.push((name, v));
            }
            Err(e) => {
                crate::errln!("usbperf-matrix show: {e}");
                if exit == Exit::Pass {
                    exit = Exit::Usage;
                }
            }
        }
    }
    if views.is_empty() {
        return Ok(exit);
    }
    // Names and reasons come from reports made elsewhere: both writers escape them. Text is
    // console text, fitted to its width (a block per device when the table is too wide);
    // Markdown and CSV are data for a file.
    let view = MatrixTable::new(&views);
    let written = match args.format {
        Style::Text => crate::out::try_out(&format!(
            "{}{}",
            render_fit(&view, crate::out::console_width()),
            signatures(&seals)
        )),
        style => crate::out::try_data(&render(&view, style)),
    };
    written.context("could not write the table to standard output")?;
    Ok(exit)
}

/// The text table's last lines: each report's signature, once any report has a signature
/// file (a set of unsigned reports gets none, as before signing existed).
fn signatures(seals: &[(String, SealState)]) -> String {
    use std::fmt::Write;
    if seals.iter().all(|(_, s)| *s == SealState::Unsigned) {
        return String::new();
    }
    let mut out = String::from("\nsignatures:\n");
    for (name, state) in seals {
        let said = match state {
            SealState::Unsigned => "unsigned (no .sig file beside it)".to_string(),
            SealState::Holds { key } => format!("holds, unit key {}", seal::key_short(key)),
            SealState::Broken { .. } => "DOES NOT HOLD (see above)".to_string(),
        };
        let _ = writeln!(out, "  {name}: {said}");
    }
    out
}
