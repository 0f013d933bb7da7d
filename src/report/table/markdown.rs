//! Owns the run's table as a Markdown pipe table, for a wiki page or a ticket.

use std::fmt::Write;

use super::*;

/// A pipe inside a cell would end it; Markdown escapes it with a backslash.
fn md_cell(s: &str) -> String {
    s.replace('|', "\\|")
}

pub(super) fn render(v: &MatrixTable) -> String {
    let mut out = String::new();
    for s in report_sentences(v) {
        let _ = writeln!(out, "- {s}");
    }
    out.push('\n');
    let mut head: Vec<String> = lead_headers(v).iter().map(|s| s.to_string()).collect();
    let nl = head.len();
    head.extend(v.columns.iter().map(header));
    head.push("verdict".into());
    let align: Vec<&str> = (0..head.len())
        .map(|i| {
            if i >= nl && i < head.len() - 1 {
                "---:"
            } else {
                "---"
            }
        })
        .collect();
    let line = |cells: &[String]| {
        let cells: Vec<String> = cells.iter().map(|c| md_cell(c)).collect();
        format!("| {} |\n", cells.join(" | "))
    };
    out.push_str(&line(&head));
    out.push_str(&format!("|{}|\n", align.join("|")));
    for r in &v.rows {
        let mut cells = lead_values(v, r);
        // `*` alone is literal in a cell, but escaped it can never start emphasis.
        cells.extend(
            r.values
                .iter()
                .zip(&v.columns)
                .map(|(x, c)| people(x, c.metric, "\\*")),
        );
        cells.push(format!("**{}**", r.verdict));
        out.push_str(&line(&cells));
    }
    let notes = notes(v, "\\*");
    if !notes.is_empty() {
        out.push('\n');
        for n in notes {
            let _ = writeln!(out, "- {n}");
        }
    }
    out
}
