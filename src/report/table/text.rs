//! Owns the run's table as aligned text: the console's and `show`'s default.

use std::fmt::Write;

use super::*;

/// Aligned columns: identity columns left-aligned, figures right-aligned under a two-line
/// header (the test over its group of figures, each figure's unit under it), which keeps a
/// matrix of eight tests within a wide console.
pub(super) fn render(v: &MatrixTable) -> String {
    let lead = lead_headers(v);
    let nl = lead.len();
    // In a column with a marked figure every other cell gets a space where the mark would
    // be, so the digits stay aligned.
    let marked: Vec<bool> = (0..v.columns.len())
        .map(|c| {
            v.rows
                .iter()
                .any(|r| matches!(r.values[c], Value::Figure { failed: true, .. }))
        })
        .collect();
    let body: Vec<Vec<String>> =
        v.rows
            .iter()
            .map(|r| {
                let mut cells = lead_values(v, r);
                cells.extend(r.values.iter().zip(&v.columns).zip(&marked).map(
                    |((x, c), &marked)| match x {
                        Value::Figure { failed: true, .. } => people(x, c.metric, "*"),
                        _ if marked => format!("{} ", people(x, c.metric, "*")),
                        _ => people(x, c.metric, "*"),
                    },
                ));
                cells.push(r.verdict.clone());
                cells
            })
            .collect();
    let mut top: Vec<String> = lead.iter().map(|s| s.to_string()).collect();
    let mut units: Vec<String> = vec![String::new(); nl];
    for c in &v.columns {
        units.push(c.metric.label().to_string());
        top.push(String::new());
    }
    top.push("verdict".into());
    units.push(String::new());
    let ncols = top.len();
    let mut widths: Vec<usize> = (0..ncols)
        .map(|i| {
            body.iter()
                .map(|r| r[i].chars().count())
                .chain([units[i].chars().count()])
                .chain((i < nl || i == ncols - 1).then(|| top[i].chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    // Each test's name sits over its group of columns; widen the group's last column when
    // the name is longer than the group.
    let mut i = nl;
    let mut groups = Vec::new();
    while i < nl + v.columns.len() {
        let test = &v.columns[i - nl].test;
        let mut j = i;
        while j < nl + v.columns.len() && &v.columns[j - nl].test == test {
            j += 1;
        }
        let label = test.label();
        let span: usize = widths[i..j].iter().sum::<usize>() + 2 * (j - i - 1);
        let need = label.chars().count();
        if need > span {
            widths[j - 1] += need - span;
        }
        groups.push((i, j, label));
        i = j;
    }
    let mut out = String::new();
    for s in report_sentences(v) {
        out.push_str(&s);
        out.push('\n');
    }
    out.push('\n');
    // The first header line, with the test names spanning their groups.
    let mut line = String::new();
    for (c, w) in widths.iter().enumerate().take(nl) {
        let _ = write!(line, "{:<w$}  ", top[c]);
    }
    for (i, j, label) in &groups {
        let span: usize = widths[*i..*j].iter().sum::<usize>() + 2 * (j - i - 1);
        let _ = write!(line, "{label:>span$}  ");
    }
    line.push_str(&top[ncols - 1]);
    out.push_str(line.trim_end());
    out.push('\n');
    let aligned = |cells: &[String]| {
        let mut line = String::new();
        for (c, cell) in cells.iter().enumerate() {
            let w = widths[c];
            if c < nl || c == ncols - 1 {
                let _ = write!(line, "{cell:<w$}  ");
            } else {
                let _ = write!(line, "{cell:>w$}  ");
            }
        }
        line.trim_end().to_string()
    };
    let unit_line = aligned(&units);
    if !unit_line.is_empty() {
        out.push_str(&unit_line);
        out.push('\n');
    }
    for r in &body {
        out.push_str(&aligned(r));
        out.push('\n');
    }
    let notes = notes(v, "*");
    if !notes.is_empty() {
        out.push('\n');
        for n in notes {
            out.push_str(&n);
            out.push('\n');
        }
    }
    out
}
