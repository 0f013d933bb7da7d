//! Owns the run's table as CSV (RFC 4180), for spreadsheets and scripts.

use super::*;

/// RFC 4180: a field with a comma, a quote or a line break is quoted, quotes doubled.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One header row; figures as plain numbers (the unit in the column name), and the run's
/// status and the device's reasons as columns, since CSV has no lines around the table.
pub(super) fn render(v: &MatrixView) -> String {
    let mut head: Vec<String> = lead_headers(v).iter().map(|s| s.to_string()).collect();
    head.extend(v.columns.iter().map(header));
    head.extend(["verdict", "run status", "reasons"].map(String::from));
    let mut out = String::new();
    let push = |out: &mut String, cells: &[String]| {
        let cells: Vec<String> = cells.iter().map(|c| csv_field(c)).collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    };
    push(&mut out, &head);
    for r in &v.rows {
        let mut cells = lead_values(v, r);
        cells.extend(v.columns.iter().zip(&r.values).map(|(c, x)| match x {
            Value::Figure { v, .. } => c.metric.machine(*v),
            Value::Word(w) => w.clone(),
        }));
        cells.push(r.verdict.clone());
        cells.push(v.reports[r.report].status.clone());
        cells.push(r.reasons.join("; "));
        push(&mut out, &cells);
    }
    out
}
