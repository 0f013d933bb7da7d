//! Owns the fleet's text outputs: the aligned terminal table and CSV (one row per group and
//! metric). YAML and JSON are the summary serialised as is (see the CLI).

use std::fmt::Write;

use super::aggregate::{FleetSummary, MetricSummary};
use super::extract::{RejectedFigure, CAPACITY_METRIC};
use usbperf_report::units::format_size;
use usbperf_report::words::count;

/// A figure for people: sizes with a unit, other figures to about three significant digits.
pub fn fmt_value(metric: &str, v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    if metric == CAPACITY_METRIC {
        // `256M` when the size is a round one, else `14.7 GiB` (a chart's axis end, a median):
        // never a count of bytes.
        let bytes = v.max(0.0) as u64;
        let exact = format_size(bytes);
        return if exact.len() <= 5 {
            exact
        } else {
            usbperf_report::units::human_bytes(bytes)
        };
    }
    usbperf_report::units::three_digits(v)
}

/// One refused figure for people: file, unit, device, field, value and why.
pub fn rejected_line(f: &RejectedFigure) -> String {
    format!(
        "{}: unit {}, device {}: {} = {} refused ({})",
        f.file.display(),
        f.unit,
        f.device,
        f.field,
        f.value,
        f.why
    )
}

/// Duplicate and refused-figure rows the terminal shows (all are in YAML / JSON / HTML).
const NOTE_ROWS: usize = 20;

/// Trend points the terminal table shows per group.
const TREND_POINTS: usize = 8;

fn pct(r: f64) -> String {
    format!("{:.1}%", r * 100.0)
}

/// Left-aligns the first `left` columns, right-aligns the rest, in at most `width` columns.
fn table(rows: &[Vec<String>], left: usize, width: usize, out: &mut String) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let right: Vec<bool> = (0..cols).map(|c| c >= left).collect();
    out.push_str(&usbperf_report::out::table(rows, &right, width));
}

fn metric_row(m: &MetricSummary) -> Vec<String> {
    let f = |v: f64| fmt_value(&m.metric, v);
    vec![
        m.metric.clone(),
        m.count.to_string(),
        pct(m.pass_rate),
        f(m.min),
        f(m.p5),
        f(m.median),
        f(m.p95),
        f(m.max),
        m.outliers_total.to_string(),
    ]
}

/// A signed distance in % of the limit: `+42%` room to spare, `-3%` a miss.
fn margin(p: f64) -> String {
    format!("{p:+.0}%")
}

/// The group's distance to each factory limit on its figures, when there is one.
fn limit_rows(g: &super::aggregate::GroupSummary, width: usize, out: &mut String) {
    if g.metrics.iter().all(|m| m.limits.is_empty()) {
        return;
    }
    // Which limit: the one most units ran under, measured on every figure of the group;
    // the pass column above judged each report by the limits it ran under.
    let _ = writeln!(
        out,
        "  distance to the factory's limits, the ones most units ran under (units: how many \
         did), over all the group's figures (% of the limit; + is room to spare, - a miss; \
         pass above judges each report by its own limits):"
    );
    let mut rows = vec![
        ["  metric", "limit", "units", "median", "worst 5%", "worst"]
            .map(String::from)
            .to_vec(),
    ];
    for m in &g.metrics {
        for l in &m.limits {
            rows.push(vec![
                format!("  {}", m.metric),
                format!("{} {}", l.bound, fmt_value(&m.metric, l.limit)),
                l.units.to_string(),
                margin(l.median_percent),
                margin(l.p5_percent),
                margin(l.worst_percent),
            ]);
        }
    }
    table(&rows, 2, width, out);
}

/// One outlier value and the metric it belongs to.
type Flagged<'a> = (&'a MetricSummary, &'a super::aggregate::Outlier);

/// Outlier rows shown per group in the terminal (all are in YAML / JSON / HTML).
const OUTLIER_ROWS: usize = 20;

/// One line per flagged device test: how many of its figures stand out, and the most
/// extreme one.
fn outlier_rows(g: &super::aggregate::GroupSummary, width: usize, out: &mut String) {
    let mut by_dev: Vec<(&str, &str, Vec<Flagged>)> = Vec::new();
    for m in &g.metrics {
        for o in &m.outliers {
            match by_dev.iter_mut().find(|d| d.0 == o.unit && d.1 == o.device) {
                Some(d) => d.2.push((m, o)),
                None => by_dev.push((&o.unit, &o.device, vec![(m, o)])),
            }
        }
    }
    if by_dev.is_empty() {
        return;
    }
    let worst = |v: &[Flagged]| {
        v.iter()
            .map(|x| x.1.modified_z.abs())
            .fold(0.0f64, f64::max)
    };
    by_dev.sort_by(|a, b| worst(&b.2).total_cmp(&worst(&a.2)).then(a.0.cmp(b.0)));
    let values: usize = g.metrics.iter().map(|m| m.outliers_total).sum();
    let listed: usize = g.metrics.iter().map(|m| m.outliers.len()).sum();
    let _ = writeln!(
        out,
        "  outliers (|modified z| > 3.5): {} device tests{}",
        by_dev.len(),
        if values > listed {
            format!(
                " with the {} most extreme of {values} values (a value per unit, {} units per figure)",
                listed,
                super::aggregate::MAX_OUTLIERS
            )
        } else {
            String::new()
        }
    );
    let mut rows = Vec::new();
    for (unit, device, ms) in by_dev.iter().take(OUTLIER_ROWS) {
        let (m, o) = ms
            .iter()
            .max_by(|a, b| a.1.modified_z.abs().total_cmp(&b.1.modified_z.abs()))
            .expect("at least one");
        rows.push(vec![
            format!("    unit {unit}"),
            device.to_string(),
            format!("{} figures", ms.len()),
            format!(
                "worst {} {} (median {}, z {:.1})",
                m.metric,
                fmt_value(&m.metric, o.value),
                fmt_value(&m.metric, o.median),
                o.modified_z
            ),
        ]);
    }
    table(&rows, 4, width, out);
    if by_dev.len() > OUTLIER_ROWS {
        let _ = writeln!(
            out,
            "    ... and {} more (all in --format yaml, json, html)",
            by_dev.len() - OUTLIER_ROWS
        );
    }
}

/// The terminal report: fleet totals, then per group the metric table, its outliers and
/// failure reasons; then link failures per port, trends of throughput, and unreadable files.
/// Tables fit `width` columns; the caller fits the other lines (the console layer does).
pub fn render_table(s: &FleetSummary, width: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "fleet: {}, {} ({} passed), {} ({} passed), {} .. {}",
        count(s.reports, "report", "reports"),
        count(s.units, "unit", "units"),
        pct(s.unit_pass_rate),
        count(s.devices, "device test", "device tests"),
        pct(s.device_pass_rate),
        s.first_day.as_deref().unwrap_or("-"),
        s.last_day.as_deref().unwrap_or("-"),
    );
    if !s.errors.is_empty() || !s.skipped.is_empty() {
        let _ = writeln!(
            out,
            "       {} unreadable (listed at the end), {} skipped",
            count(s.errors.len(), "file", "files"),
            s.skipped.len()
        );
    }
    let sig = &s.signatures;
    if sig.signed > 0 {
        let _ = writeln!(
            out,
            "       signatures: {} hold, {} unsigned{}",
            sig.signed,
            sig.unsigned,
            if sig.several_keys.is_empty() {
                String::new()
            } else {
                format!(
                    ", {} signed by several keys (listed at the end)",
                    count(sig.several_keys.len(), "unit", "units")
                )
            }
        );
    }
    if !s.duplicates.is_empty() || !s.rejected_figures.is_empty() {
        let _ = writeln!(
            out,
            "       {} dropped, {} refused (listed at the end)",
            count(s.duplicates.len(), "duplicate report", "duplicate reports"),
            count(s.rejected_figures.len(), "figure", "figures")
        );
    }
    for g in &s.groups {
        let _ = writeln!(
            out,
            "\n== {}: {}, {}, {} passed",
            g.name,
            count(g.units, "unit", "units"),
            count(g.devices, "device test", "device tests"),
            pct(g.device_pass_rate)
        );
        let mut rows = vec![[
            "metric", "count", "pass", "min", "p5", "median", "p95", "max", "outliers",
        ]
        .map(String::from)
        .to_vec()];
        rows.extend(g.metrics.iter().map(metric_row));
        table(&rows, 1, width, &mut out);
        limit_rows(g, width, &mut out);
        outlier_rows(g, width, &mut out);
        if !g.failure_reasons.is_empty() {
            let _ = writeln!(out, "  failure reasons:");
            for r in g.failure_reasons.iter().take(10) {
                let _ = writeln!(out, "    {:>6}  {}", r.count, r.reason);
            }
        }
    }
    if !s.link_failures_by_port.is_empty() {
        let _ = writeln!(out, "\nlink-speed failures by port:");
        let mut rows = vec![vec![
            "  port".to_string(),
            "devices".into(),
            "failures".into(),
            "rate".into(),
        ]];
        for p in &s.link_failures_by_port {
            rows.push(vec![
                format!("  {}", p.port),
                p.devices.to_string(),
                p.link_failures.to_string(),
                pct(p.failure_rate),
            ]);
        }
        table(&rows, 1, width, &mut out);
    }
    if !s.builds.is_empty() {
        let _ = writeln!(
            out,
            "\nbuilds, each against the one before it (Mann-Whitney U, p < {}, a change of at \
             least {} % of the median):",
            super::builds::MAX_P,
            super::builds::MIN_CHANGE_PERCENT
        );
        for b in &s.builds {
            let _ = writeln!(
                out,
                "  {}: {} ({}) -> {} ({}): {}",
                b.board,
                b.from,
                count(b.reports_from, "report", "reports"),
                b.to,
                count(b.reports_to, "report", "reports"),
                match (&b.note, b.regressions.len()) {
                    (Some(n), _) => n.clone(),
                    (None, 0) => format!("no regression in {} figures", b.compared),
                    (None, n) => format!(
                        "{} in {} figures",
                        count(n, "regression", "regressions"),
                        b.compared
                    ),
                }
            );
            for r in &b.regressions {
                let _ = writeln!(out, "    regression: {}", r.words);
            }
        }
    }
    if let Some(w) = &s.wear {
        let _ = writeln!(
            out,
            "\nwear per part: {} followed, {} wearing faster than its board's others",
            count(w.parts, "part", "parts"),
            w.fast
        );
        for b in &w.boards {
            let _ = writeln!(
                out,
                "  {}: {}, {} with a rate, median {}{}",
                b.board,
                count(b.parts, "part", "parts"),
                b.with_rate,
                b.median_rate_percent_per_month
                    .map_or("-".into(), |m| format!("{m:.2} %/month")),
                b.note.as_ref().map_or(String::new(), |n| format!(" ({n})"))
            );
        }
        for p in w.followed.iter().filter(|p| p.fast) {
            let _ = writeln!(out, "    fast: {}", p.words);
        }
    }
    if s.yields_worth_showing() {
        let _ = writeln!(out, "\nfirst-pass yield (device tests):");
        let mut rows = vec![vec![
            "  by".to_string(),
            "value".into(),
            "devices".into(),
            "first pass".into(),
            "after retest".into(),
            "retested".into(),
            "marginal".into(),
        ]];
        for y in &s.yields {
            rows.push(vec![
                format!("  {}", y.dimension),
                y.value.clone(),
                y.devices.to_string(),
                pct(y.first_pass_yield),
                y.passed_after_retest.to_string(),
                pct(y.retest_rate),
                pct(y.marginal_rate),
            ]);
        }
        table(&rows, 2, width, &mut out);
    }
    let _ = writeln!(
        out,
        "\ntrend of seq-write MiB/s (last {TREND_POINTS} {} medians; all of them in yaml, json, html):",
        s.trend_bucket
    );
    for g in &s.groups {
        for m in g
            .metrics
            .iter()
            .filter(|m| m.metric == "seq-write.mib_per_s")
        {
            let skip = m.trend.len().saturating_sub(TREND_POINTS);
            let pts: Vec<String> = m
                .trend
                .iter()
                .skip(skip)
                .map(|t| format!("{} {}", &t.start[5..], fmt_value(&m.metric, t.median)))
                .collect();
            let _ = writeln!(out, "  {} {}: {}", g.name, m.metric, pts.join(", "));
        }
    }
    if !s.errors.is_empty() {
        let _ = writeln!(out, "\nunreadable reports (skipped):");
        for e in &s.errors {
            let _ = writeln!(out, "  {}", e.issue);
        }
    }
    let odd: Vec<_> = s
        .skipped
        .iter()
        .filter(|e| e.kind == "not-regular")
        .collect();
    if !odd.is_empty() {
        let _ = writeln!(out, "\nnot regular files (skipped, never opened):");
        for e in odd {
            let _ = writeln!(out, "  {}: {}", e.file.display(), e.issue);
        }
    }
    if !s.duplicates.is_empty() {
        let _ = writeln!(
            out,
            "\nduplicate reports (dropped: {}; the first copy by path counts):",
            s.duplicates.len()
        );
        for d in s.duplicates.iter().take(NOTE_ROWS) {
            let _ = writeln!(out, "  {} (copy of {})", d.file.display(), d.kept.display());
        }
        more(&mut out, s.duplicates.len());
    }
    if !sig.several_keys.is_empty() {
        let _ = writeln!(
            out,
            "\nunits whose reports are signed by several keys ({}; a key replaced, or a \
             report signed in the unit's name by someone else):",
            sig.several_keys.len()
        );
        for u in sig.several_keys.iter().take(NOTE_ROWS) {
            let _ = writeln!(out, "  {}: {} keys", u.unit, u.keys);
        }
        more(&mut out, sig.several_keys.len());
    }
    if !s.rejected_figures.is_empty() {
        let _ = writeln!(
            out,
            "\nrefused figures ({}; not finite, negative or beyond a ceiling; the rest of each \
             report counts):",
            s.rejected_figures.len()
        );
        for f in s.rejected_figures.iter().take(NOTE_ROWS) {
            let _ = writeln!(out, "  {}", rejected_line(f));
        }
        more(&mut out, s.rejected_figures.len());
    }
    out
}

fn more(out: &mut String, n: usize) {
    if n > NOTE_ROWS {
        let _ = writeln!(
            out,
            "  ... and {} more (all in --format yaml, json, html)",
            n - NOTE_ROWS
        );
    }
}

use usbperf_report::untrusted::csv_cell as csv_field;

/// One row per (group, metric); the group's dimensions are the first columns. Figures are
/// plain numbers (bytes, MiB/s, IOPS, ms, Mbit/s) for spreadsheets.
pub fn render_csv(s: &FleetSummary) -> String {
    let mut out = String::new();
    let mut head: Vec<String> = s.group_by.iter().map(|d| d.as_str().to_string()).collect();
    head.extend(
        [
            "metric",
            "count",
            "pass_rate",
            "min",
            "p5",
            "median",
            "p95",
            "max",
            "outliers",
            "units",
        ]
        .map(String::from),
    );
    out.push_str(&head.join(","));
    out.push('\n');
    for g in &s.groups {
        for m in &g.metrics {
            let mut row: Vec<String> = g.key.iter().map(|k| csv_field(k)).collect();
            row.push(csv_field(&m.metric));
            row.push(m.count.to_string());
            row.push(format!("{:.4}", m.pass_rate));
            for v in [m.min, m.p5, m.median, m.p95, m.max] {
                row.push(format!("{v}"));
            }
            row.push(m.outliers_total.to_string());
            row.push(g.units.to_string());
            out.push_str(&row.join(","));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacities_read_as_sizes_never_as_byte_counts() {
        for (v, want) in [
            (268435456.0, "256M"),
            (241591910.0, "230 MiB"),
            (17333800140.0, "16.1 GiB"),
            (0.0, "0"),
        ] {
            assert_eq!(fmt_value(CAPACITY_METRIC, v), want, "{v}");
        }
        assert_eq!(fmt_value("seq-write.mib_per_s", 38.61), "38.6");
    }
}
