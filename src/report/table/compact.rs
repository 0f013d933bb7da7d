//! Owns the run's table for a narrow console (a board's 80-column serial console): one block
//! per device, its identity and verdict on the first line and one line per test under it, the
//! notes wrapped. The same cells and words as the wide table, laid out to fit `width`.

use super::*;
use crate::out::wrap;

/// A test's figures on one line: `329 MiB/s +-0.8%` (with the figure's stated precision, half
/// its 95 % confidence interval), `45779 IOPS  p99 22.0 ms`, `bad blocks ok`.
fn figures(values: &[(&Value, Metric)]) -> String {
    let one = |x: &Value, m: Metric| {
        let s = people(x, m, "*");
        if let Value::Word(_) = x {
            return s;
        }
        let mut ci = match x {
            // ASCII: a serial console's locale may have no `±`.
            Value::Figure { ci: Some(ci), .. } => format!(" +-{ci:.1}%"),
            _ => String::new(),
        };
        if let Value::Figure { burst: Some(b), .. } = x {
            ci.push_str(&format!(
                " sustained (burst {} MiB/s)",
                Metric::MibPerS.people(*b)
            ));
        }
        match m {
            Metric::MibPerS | Metric::Iops => format!("{s} {}{ci}", m.def().unit),
            Metric::P99Ms => format!("p99 {s} {}", m.def().unit),
            Metric::BadBlocks | Metric::LostBlocks => format!("{} {s}", m.def().label),
        }
    };
    // A test that gave no figure says its word once, not once per figure.
    if let Some((Value::Word(w), _)) = values.first() {
        if values
            .iter()
            .all(|(x, _)| matches!(x, Value::Word(o) if o == w))
        {
            return w.clone();
        }
    }
    values
        .iter()
        .map(|(x, m)| one(x, *m))
        .collect::<Vec<_>>()
        .join("  ")
}

pub(super) fn render(v: &MatrixTable, width: usize) -> String {
    let mut out = String::new();
    for s in report_sentences(v) {
        out.push_str(&wrap(&s, width, "  "));
        out.push('\n');
    }
    // The tests in the matrix's order, each with its columns.
    let mut tests: Vec<(&TestKey, Vec<usize>)> = Vec::new();
    for (i, c) in v.columns.iter().enumerate() {
        match tests.last_mut() {
            Some((t, cols)) if *t == &c.test => cols.push(i),
            _ => tests.push((&c.test, vec![i])),
        }
    }
    let name_w = tests
        .iter()
        .map(|(t, _)| t.label().chars().count())
        .max()
        .unwrap_or(0);
    for r in &v.rows {
        out.push('\n');
        let mut head = lead_values(v, r);
        if r.label.is_empty() {
            head.retain(|c| !c.is_empty());
        }
        if let Some(link) = head.last_mut() {
            *link = format!("link {link}");
        }
        head.push(r.verdict.clone());
        out.push_str(&wrap(&head.join("  "), width, "    "));
        out.push('\n');
        for (t, cols) in &tests {
            let values: Vec<(&Value, Metric)> = cols
                .iter()
                .map(|&c| (&r.values[c], v.columns[c].metric))
                .collect();
            let line = format!("  {:<name_w$}  {}", t.label(), figures(&values));
            out.push_str(&wrap(&line, width, &" ".repeat(name_w + 4)));
            out.push('\n');
        }
    }
    let notes = notes(v, "*");
    if !notes.is_empty() {
        out.push('\n');
        for n in notes {
            out.push_str(&wrap(&n, width, "  "));
            out.push('\n');
        }
    }
    out
}
