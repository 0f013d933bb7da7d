//! Owns the run's table as CSV (RFC 4180), for spreadsheets and scripts.

use super::*;

use crate::untrusted::csv_cell as csv_field;

/// One header row. Each test has a status column (`passed`, `failed`, `interrupted`, `-` when
/// the device has no such cell) and its figures as plain numbers, empty when there is none
/// (the unit in the column name): a numeric column never holds a word, and an interrupted
/// test's partial figures are kept beside its status. The run's status and the device's
/// reasons are columns, since CSV has no lines around the table.
pub(super) fn render(v: &MatrixTable) -> String {
    let mut head: Vec<String> = lead_headers(v).iter().map(|s| s.to_string()).collect();
    let starts: Vec<bool> = (0..v.columns.len())
        .map(|i| i == 0 || v.columns[i - 1].test != v.columns[i].test)
        .collect();
    for (c, start) in v.columns.iter().zip(&starts) {
        if *start {
            head.push(format!("{} status", c.test.label()));
        }
        head.push(header(c));
    }
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
        for ((c, (status, figure)), start) in v.columns.iter().zip(&r.raw).zip(&starts) {
            if *start {
                cells.push(status.clone());
            }
            cells.push(figure.map(|x| c.metric.machine(x)).unwrap_or_default());
        }
        cells.push(r.verdict.clone());
        cells.push(v.reports[r.report].status.clone());
        cells.push(r.reasons.join("; "));
        push(&mut out, &cells);
    }
    out
}
