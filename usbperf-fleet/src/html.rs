//! Owns the fleet's HTML page: one self-contained file (inline CSS, inline SVG charts, a few
//! lines of inline script; nothing fetched) with summary tiles, failure, port and outlier
//! tables linking to each unit's report, write curves per device model with knees, and a
//! distribution chart per group and metric with the factory's and the learned thresholds
//! (throughput charts with their production trend underneath).
//!
//! The script only checks the page: it records script errors and, once loaded, counts the
//! charts into `data-*` attributes of `<body>`, which a headless browser test reads back.

use std::fmt::Write;
use std::path::Path;

use super::aggregate::{FleetSummary, GroupSummary, MetricSummary, MAX_OUTLIERS};
use super::text::fmt_value;
use super::thresholds::Suggestion;

/// Outlier rows shown (the YAML/JSON output has them all).
const MAX_OUTLIER_ROWS: usize = 300;
const PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A `file://` link to a report, absolute so the page works wherever it is saved.
fn file_url(p: &Path) -> String {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    };
    let mut url = String::from("file://");
    for b in abs.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~:".contains(&b) {
            url.push(b as char);
        } else {
            let _ = write!(url, "%{b:02X}");
        }
    }
    url
}

fn pct(r: f64) -> String {
    format!("{:.1} %", r * 100.0)
}

const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:20px;color:#222;background:#fafafa}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ccc}
h3{font-size:15px;margin:18px 0 6px}
.tiles{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.tile{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:120px}
.tile b{display:block;font-size:22px}.tile.bad b{color:#c0392b}
table{border-collapse:collapse;background:#fff;margin:6px 0}
td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.grid{display:flex;flex-wrap:wrap;gap:8px}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:4px}
.card .t{font-size:12px;font-weight:600}.card .s{font-size:11px;color:#555}
.card svg{display:block}
svg text{font:10px system-ui,sans-serif;fill:#333}
.bar{fill:#7fa7d6}.median{stroke:#222;stroke-width:1}
.threshold.factory{stroke:#c0392b;stroke-width:2}
.threshold.suggested{stroke:#e67e22;stroke-width:2;stroke-dasharray:4 3}
.curve{fill:none;stroke-width:1.2;opacity:.8}.knee{fill:#c0392b;stroke:#fff}
polyline.trend{fill:none;stroke:#555;stroke-width:1}
.legend span{margin-right:14px;font-size:12px}
";

const SCRIPT: &str = "
window.onerror=function(m,s,l){var b=document.body;b.dataset.errors=(b.dataset.errors||'')+m+' @'+l+'; ';};
window.addEventListener('load',function(){var b=document.body,q=function(s){return document.querySelectorAll(s).length;};
b.dataset.distCharts=q('svg.dist');b.dataset.thresholdLines=q('svg.dist line.threshold');
b.dataset.curveCharts=q('svg.curves');b.dataset.curves=q('svg.curves polyline.curve');
b.dataset.knees=q('svg.curves circle.knee');b.dataset.trends=q('svg.trend polyline');b.dataset.outlierRows=q('table.outliers tbody tr');
b.dataset.rendered='ok';});
";

/// The whole page.
pub fn render_html(s: &FleetSummary, sug: &[Suggestion]) -> String {
    render_html_linked(s, sug, &file_url)
}

/// [`render_html`] with the outlier table's links to reports made by `link` (the
/// collector's page links to the reports it serves, not to files).
pub fn render_html_linked(
    s: &FleetSummary,
    sug: &[Suggestion],
    link: &dyn Fn(&Path) -> String,
) -> String {
    let mut o = String::with_capacity(256 << 10);
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>usbperf fleet</title><style>{STYLE}</style>\
         <script>{SCRIPT}</script></head><body data-rendered=\"pending\">\n"
    );
    let _ = writeln!(
        o,
        "<h1>usbperf fleet</h1><div>{} reports, {} .. {}, grouped by {}</div>",
        s.reports,
        esc(s.first_day.as_deref().unwrap_or("-")),
        esc(s.last_day.as_deref().unwrap_or("-")),
        esc(&s
            .group_by
            .iter()
            .map(|d| d.as_str())
            .collect::<Vec<_>>()
            .join(", "))
    );
    tiles(&mut o, s);
    failures(&mut o, s);
    ports(&mut o, s);
    yields(&mut o, s);
    limits(&mut o, s);
    builds(&mut o, s);
    wear(&mut o, s);
    curves(&mut o, s);
    o.push_str("<h2>Distributions</h2><div class=\"legend\"><span>bars: devices per bin</span>\
        <span style=\"color:#222\">| median</span>\
        <span style=\"color:#c0392b\">&#9473; factory threshold</span>\
        <span style=\"color:#e67e22\">&#9476; learned threshold (--suggest-thresholds)</span></div>\n");
    for g in &s.groups {
        group(&mut o, s, g, sug);
    }
    outliers(&mut o, s, link);
    if !s.errors.is_empty() {
        o.push_str("<h2>Unreadable reports</h2><ul>");
        for e in &s.errors {
            let _ = write!(o, "<li>{}</li>", esc(&e.issue));
        }
        o.push_str("</ul>\n");
    }
    let odd: Vec<_> = s
        .skipped
        .iter()
        .filter(|e| e.kind == "not-regular")
        .collect();
    if !odd.is_empty() {
        o.push_str("<h2>Not regular files (skipped, never opened)</h2><ul>");
        for e in odd {
            let _ = write!(
                o,
                "<li>{}: {}</li>",
                esc(&e.file.display().to_string()),
                esc(&e.issue)
            );
        }
        o.push_str("</ul>\n");
    }
    if !s.duplicates.is_empty() {
        let _ = write!(
            o,
            "<h2>Duplicate reports ({}, dropped; the first copy by path counts)</h2><ul>",
            s.duplicates.len()
        );
        for d in &s.duplicates {
            let _ = write!(
                o,
                "<li>{} (copy of {})</li>",
                esc(&d.file.display().to_string()),
                esc(&d.kept.display().to_string())
            );
        }
        o.push_str("</ul>\n");
    }
    if !s.signatures.several_keys.is_empty() {
        let _ = write!(
            o,
            "<h2>Units signed by several keys ({}: a key replaced, or a report signed in the \
             unit's name by someone else)</h2><ul>",
            s.signatures.several_keys.len()
        );
        for u in &s.signatures.several_keys {
            let _ = write!(o, "<li>{}: {} keys</li>", esc(&u.unit), u.keys);
        }
        o.push_str("</ul>\n");
    }
    if !s.rejected_figures.is_empty() {
        let _ = write!(
            o,
            "<h2>Refused figures ({}: not finite, negative or beyond a ceiling)</h2><ul>",
            s.rejected_figures.len()
        );
        for f in &s.rejected_figures {
            let _ = write!(o, "<li>{}</li>", esc(&super::text::rejected_line(f)));
        }
        o.push_str("</ul>\n");
    }
    o.push_str("</body></html>\n");
    o
}

fn tiles(o: &mut String, s: &FleetSummary) {
    o.push_str("<div class=\"tiles\">");
    let mut tile = |label: &str, value: String, bad: bool| {
        let _ = write!(
            o,
            "<div class=\"tile{}\"><b>{}</b>{}</div>",
            if bad { " bad" } else { "" },
            esc(&value),
            esc(label)
        );
    };
    tile("units", s.units.to_string(), false);
    tile(
        "units passed",
        pct(s.unit_pass_rate),
        s.unit_pass_rate < 1.0,
    );
    tile("device tests", s.devices.to_string(), false);
    tile(
        "device tests passed",
        pct(s.device_pass_rate),
        s.device_pass_rate < 1.0,
    );
    let worst: Vec<String> = s
        .link_failures_by_port
        .iter()
        .filter(|p| p.link_failures > 0)
        .take(3)
        .map(|p| format!("{} {}", p.port, pct(p.failure_rate)))
        .collect();
    let bad_ports = !worst.is_empty();
    tile(
        "worst ports (link failures)",
        if worst.is_empty() {
            "none".into()
        } else {
            worst.join(", ")
        },
        bad_ports,
    );
    tile(
        "unreadable reports",
        s.errors.len().to_string(),
        !s.errors.is_empty(),
    );
    let sig = &s.signatures;
    if sig.signed > 0 {
        tile(
            "reports signed (signature holds)",
            format!("{} of {}", sig.signed, sig.signed + sig.unsigned),
            !sig.several_keys.is_empty(),
        );
    }
    o.push_str("</div>\n");
}

fn failures(o: &mut String, s: &FleetSummary) {
    o.push_str("<h2>Failure reasons</h2>");
    if s.failure_reasons.is_empty() {
        o.push_str("<p>No device failed.</p>\n");
        return;
    }
    o.push_str("<table class=\"reasons\"><thead><tr><th>devices</th><th>reason (figures as N)</th><th>example</th></tr></thead><tbody>");
    for r in s.failure_reasons.iter().take(30) {
        let _ = write!(
            o,
            "<tr><td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>",
            r.count,
            esc(&r.reason),
            esc(&r.example)
        );
    }
    o.push_str("</tbody></table>\n");
}

fn ports(o: &mut String, s: &FleetSummary) {
    if s.link_failures_by_port.is_empty() {
        return;
    }
    o.push_str("<h2>Link-speed failures by port</h2><table class=\"ports\"><thead><tr><th>port</th><th>devices</th><th>link failures</th><th>rate</th></tr></thead><tbody>");
    for p in &s.link_failures_by_port {
        let _ = write!(
            o,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&p.port),
            p.devices,
            p.link_failures,
            pct(p.failure_rate)
        );
    }
    o.push_str("</tbody></table>\n");
}

/// First-pass yield, retest and marginal rates, one row per board, station, port and class,
/// when they say more than the pass rates.
fn yields(o: &mut String, s: &FleetSummary) {
    if !s.yields_worth_showing() {
        return;
    }
    o.push_str("<h2>First-pass yield</h2><table class=\"yields\"><thead><tr><th>by</th><th>value</th><th>devices</th><th>first-pass yield</th><th>passed after a retest</th><th>retest rate</th><th>marginal rate</th></tr></thead><tbody>");
    for y in &s.yields {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&y.dimension),
            esc(&y.value),
            y.devices,
            pct(y.first_pass_yield),
            y.passed_after_retest,
            pct(y.retest_rate),
            pct(y.marginal_rate)
        );
    }
    o.push_str("</tbody></table>\n");
}

/// Each build against the one before it, per board, with the regressions in words.
fn builds(o: &mut String, s: &FleetSummary) {
    if s.builds.is_empty() {
        return;
    }
    o.push_str("<h2>Builds</h2><table class=\"builds\"><thead><tr><th>board</th><th>from</th><th>to</th><th>reports</th><th>figures compared</th><th>regressions</th></tr></thead><tbody>");
    for b in &s.builds {
        let said = match (&b.note, b.regressions.is_empty()) {
            (Some(n), _) => esc(n),
            (None, true) => "none".into(),
            (None, false) => b
                .regressions
                .iter()
                .map(|r| esc(&r.words))
                .collect::<Vec<_>>()
                .join("<br>"),
        };
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{} / {}</td><td class=\"n\">{}</td><td>{said}</td></tr>",
            esc(&b.board),
            esc(&b.from),
            esc(&b.to),
            b.reports_from,
            b.reports_to,
            b.compared
        );
    }
    o.push_str("</tbody></table>\n");
}

/// The parts wearing faster than their board's others: a row each and one small chart of
/// its life used over time, with its limit.
fn wear(o: &mut String, s: &FleetSummary) {
    let Some(w) = &s.wear else { return };
    let _ = write!(
        o,
        "<h2>Wear per part</h2><p>{} parts followed, {} wearing faster than their board's others.</p>",
        w.parts, w.fast
    );
    for p in w.followed.iter().filter(|p| p.fast) {
        let _ = write!(o, "<div class=\"part\"><p>{}</p>", esc(&p.words));
        wear_chart(o, p);
        o.push_str("</div>\n");
    }
}

fn wear_chart(o: &mut String, p: &super::wear::PartWear) {
    let (w, h, pad) = (360.0, 120.0, 24.0);
    let Some((t0, t1)) = p
        .series
        .first()
        .zip(p.series.last())
        .map(|(a, b)| (a.0, b.0))
    else {
        return;
    };
    let span = ((t1 - t0).num_seconds() as f64).max(1.0);
    let top = p
        .series
        .iter()
        .map(|x| x.1)
        .fold(p.limit_percent, f64::max)
        .max(1.0);
    let x = |t: chrono::DateTime<chrono::Utc>| {
        pad + (t - t0).num_seconds() as f64 / span * (w - 2.0 * pad)
    };
    let y = |v: f64| h - pad - v / top * (h - 2.0 * pad);
    let pts: Vec<String> = p
        .series
        .iter()
        .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v)))
        .collect();
    let _ = write!(
        o,
        "<svg class=\"wear\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">\
         <line x1=\"{pad}\" x2=\"{}\" y1=\"{ly:.1}\" y2=\"{ly:.1}\" stroke=\"#c0392b\"/>\
         <polyline fill=\"none\" stroke=\"#2c3e50\" stroke-width=\"1.5\" points=\"{}\"/>\
         <text x=\"{pad}\" y=\"12\" font-size=\"10\">life used, % (limit {:.0} %)</text>\
         <text x=\"{pad}\" y=\"{}\" font-size=\"10\">{}</text>\
         <text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">{}</text></svg>",
        w - pad,
        pts.join(" "),
        p.limit_percent,
        h - 6.0,
        t0.format("%Y-%m-%d"),
        w - pad,
        h - 6.0,
        t1.format("%Y-%m-%d"),
        ly = y(p.limit_percent),
    );
}

/// The groups' distance to the factory's limits, one row per group, metric and limit.
fn limits(o: &mut String, s: &FleetSummary) {
    let rows: Vec<_> = s
        .groups
        .iter()
        .flat_map(|g| {
            g.metrics
                .iter()
                .flat_map(move |m| m.limits.iter().map(move |l| (g, m, l)))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    o.push_str("<h2>Distance to the limits</h2><p>Each limit is the factory's: the value most units' reports ran under (<em>units</em>: how many did), measured on every figure of the group. The pass rates above judge each report by the limits it ran under. In % of the limit: + is room to spare, \u{2212} a miss. The worst 5 % are the p5 of a minimum, the p95 of a maximum.</p><table class=\"limits\"><thead><tr><th>group</th><th>metric</th><th>limit</th><th>units</th><th>median</th><th>worst 5 %</th><th>worst</th></tr></thead><tbody>");
    let m = |p: f64| format!("{p:+.0}%").replace('-', "\u{2212}");
    for (g, mt, l) in rows {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{} {}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&g.name),
            esc(&mt.metric),
            esc(&l.bound),
            l.limit,
            l.units,
            m(l.median_percent),
            m(l.p5_percent),
            m(l.worst_percent)
        );
    }
    o.push_str("</tbody></table>\n");
}

/// One row per flagged device test: the metrics that stand out, the most extreme first.
fn outliers(o: &mut String, s: &FleetSummary, link: &dyn Fn(&Path) -> String) {
    type Key<'a> = (&'a str, &'a str, &'a str, &'a Path);
    let mut rows: Vec<(Key, Vec<(&MetricSummary, &super::aggregate::Outlier)>)> = Vec::new();
    let mut index: std::collections::HashMap<Key, usize> = std::collections::HashMap::new();
    let mut values = 0;
    let mut capped = false;
    for g in &s.groups {
        for m in &g.metrics {
            values += m.outliers_total;
            capped |= m.outliers_total > m.outliers.len();
            for x in &m.outliers {
                let k: Key = (&g.name, &x.unit, &x.device, &x.file);
                let i = *index.entry(k).or_insert_with(|| {
                    rows.push((k, Vec::new()));
                    rows.len() - 1
                });
                rows[i].1.push((m, x));
            }
        }
    }
    for r in &mut rows {
        r.1.sort_by(|a, b| b.1.modified_z.abs().total_cmp(&a.1.modified_z.abs()));
    }
    rows.sort_by(|a, b| {
        let z = |r: &Vec<(&MetricSummary, &super::aggregate::Outlier)>| {
            r.first().map_or(0.0, |x| x.1.modified_z.abs())
        };
        z(&b.1).total_cmp(&z(&a.1)).then_with(|| a.0.cmp(&b.0))
    });
    let _ = write!(
        o,
        "<h2>Outliers</h2><p>{} values beyond a modified z-score of &#177;3.5 (median absolute \
         deviation within their group){}, in {} device tests listed{}.</p>",
        values,
        if capped {
            format!("; each figure lists its {MAX_OUTLIERS} most extreme units")
        } else {
            String::new()
        },
        rows.len(),
        if rows.len() > MAX_OUTLIER_ROWS {
            format!("; the first {MAX_OUTLIER_ROWS} shown, all in --format json")
        } else {
            String::new()
        }
    );
    if rows.is_empty() {
        return;
    }
    o.push_str(
        "<table class=\"outliers\"><thead><tr><th>unit</th><th>device</th><th>group</th>\
        <th>metrics (value / group median, z)</th><th>report</th></tr></thead><tbody>",
    );
    for ((group, unit, device, file), ms) in rows.into_iter().take(MAX_OUTLIER_ROWS) {
        let figs: Vec<String> = ms
            .iter()
            .map(|(m, x)| {
                format!(
                    "{} {} / {} ({:+.1})",
                    m.metric,
                    fmt_value(&m.metric, x.value),
                    fmt_value(&m.metric, x.median),
                    x.modified_z
                )
            })
            .collect();
        let _ =
            write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><a href=\"{}\">{}</a></td></tr>",
            esc(unit),
            esc(device),
            esc(group),
            esc(&figs.join("; ")),
            esc(&link(file)),
            esc(&file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()),
        );
    }
    o.push_str("</tbody></table>\n");
}

fn curves(o: &mut String, s: &FleetSummary) {
    if s.write_curves.is_empty() {
        return;
    }
    o.push_str("<h2>Write curves by device model</h2><div class=\"grid\">");
    let (w, h, ml, mb) = (420.0, 220.0, 40.0, 24.0);
    for mc in &s.write_curves {
        let t_max = mc
            .curves
            .iter()
            .flat_map(|c| c.samples.iter().map(|p| p.0))
            .fold(1.0f64, f64::max);
        let y_max = mc
            .curves
            .iter()
            .flat_map(|c| c.samples.iter().map(|p| p.1))
            .fold(1.0f64, f64::max)
            * 1.1;
        let x = |t: f64| ml + t / t_max * (w - ml - 8.0);
        let y = |v: f64| (h - mb) - v / y_max * (h - mb - 8.0);
        let knees = mc.curves.iter().filter(|c| c.knee.is_some()).count();
        let _ = write!(
            o,
            "<div class=\"card\"><div class=\"t\">{}</div><div class=\"s\">{} curves, {} with a knee</div>\
             <svg class=\"curves\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">\
             <line x1=\"{ml}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#999\"/>\
             <line x1=\"{ml}\" y1=\"8\" x2=\"{ml}\" y2=\"{b}\" stroke=\"#999\"/>\
             <text x=\"{ml}\" y=\"{ty}\">0 s</text><text x=\"{r}\" y=\"{ty}\" text-anchor=\"end\">{:.0} s</text>\
             <text x=\"{lx}\" y=\"{b}\" text-anchor=\"end\">0</text><text x=\"{lx}\" y=\"14\" text-anchor=\"end\">{:.0}</text>\
             <text x=\"{lx}\" y=\"{my}\" text-anchor=\"end\">MiB/s</text>",
            esc(&mc.model),
            mc.curves.len(),
            knees,
            t_max,
            y_max,
            b = h - mb,
            r = w - 8.0,
            ty = h - 8.0,
            lx = ml - 3.0,
            my = h / 2.0,
        );
        for (i, c) in mc.curves.iter().enumerate() {
            let pts: Vec<String> = c
                .samples
                .iter()
                .map(|p| format!("{:.1},{:.1}", x(p.0), y(p.1)))
                .collect();
            let _ = write!(
                o,
                "<polyline class=\"curve\" stroke=\"{}\" points=\"{}\"><title>{} {}</title></polyline>",
                PALETTE[i % PALETTE.len()],
                pts.join(" "),
                esc(&c.unit),
                esc(&c.device)
            );
            if let Some((t, before, after)) = c.knee {
                let _ = write!(
                    o,
                    "<circle class=\"knee\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\"><title>knee at {t:.0} s: {before:.1} to {after:.1} MiB/s ({})</title></circle>",
                    x(t),
                    y(before),
                    esc(&c.unit)
                );
            }
        }
        o.push_str("</svg></div>");
    }
    o.push_str("</div>\n");
}

/// A threshold line on a chart: (value, css class, label).
type Line = (f64, &'static str, String);

fn group(o: &mut String, s: &FleetSummary, g: &GroupSummary, sug: &[Suggestion]) {
    let _ = write!(
        o,
        "<h3>{}</h3><div class=\"s\">{}, {}, {} passed</div><div class=\"grid\">",
        esc(&g.name),
        usbperf_report::words::count(g.units, "unit", "units"),
        usbperf_report::words::count(g.devices, "device test", "device tests"),
        pct(g.device_pass_rate)
    );
    for m in &g.metrics {
        let mut lines: Vec<Line> = Vec::new();
        for t in &s.factory_thresholds {
            let applies = match &t.class {
                None => true,
                Some(c) => g.classes.iter().any(|gc| gc == c),
            };
            if applies && t.metric == m.metric {
                lines.push((
                    t.value,
                    "factory",
                    format!("factory {} {}", t.bound, t.value),
                ));
            }
        }
        for t in sug
            .iter()
            .filter(|t| t.group == g.name && t.metric == m.metric)
        {
            lines.push((
                t.value,
                "suggested",
                format!("learned {} {}", t.field, t.value),
            ));
        }
        dist_chart(o, m, &lines);
    }
    o.push_str("</div>\n");
}

fn dist_chart(o: &mut String, m: &MetricSummary, lines: &[Line]) {
    let (w, h, pad, mb) = (250.0, 110.0, 6.0, 18.0);
    let hgm = &m.histogram;
    let mut lo = hgm.lo;
    let mut hi = hgm.hi;
    for l in lines {
        lo = lo.min(l.0);
        hi = hi.max(l.0);
    }
    if hi <= lo {
        // One value: centre it.
        let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        lo -= d;
        hi += d;
    }
    let x = |v: f64| pad + (v - lo) / (hi - lo) * (w - 2.0 * pad);
    let max_count = hgm.counts.iter().copied().max().unwrap_or(1).max(1) as f64;
    let _ = write!(
        o,
        "<div class=\"card\"><div class=\"t\">{}</div><div class=\"s\">n {}, pass {}, median {}, outliers {}</div>\
         <svg class=\"dist\" data-metric=\"{}\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">",
        esc(&m.metric),
        m.count,
        pct(m.pass_rate),
        esc(&fmt_value(&m.metric, m.median)),
        m.outliers_total,
        esc(&m.metric)
    );
    let bins = hgm.counts.len().max(1) as f64;
    let bw = (hgm.hi - hgm.lo) / bins;
    for (i, &c) in hgm.counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        let (x0, x1) = if bw > 0.0 {
            (x(hgm.lo + bw * i as f64), x(hgm.lo + bw * (i + 1) as f64))
        } else {
            (x(hgm.lo) - 3.0, x(hgm.lo) + 3.0)
        };
        let bh = (c as f64 / max_count) * (h - mb - 6.0);
        let _ = write!(
            o,
            "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"><title>{c}</title></rect>",
            x0,
            h - mb - bh,
            (x1 - x0 - 0.5).max(1.0),
            bh
        );
    }
    let mx = x(m.median);
    let _ = write!(
        o,
        "<line class=\"median\" x1=\"{mx:.1}\" y1=\"4\" x2=\"{mx:.1}\" y2=\"{:.1}\"/>",
        h - mb
    );
    for (v, class, label) in lines {
        let lx = x(*v);
        let _ = write!(
            o,
            "<line class=\"threshold {class}\" x1=\"{lx:.1}\" y1=\"2\" x2=\"{lx:.1}\" y2=\"{:.1}\"><title>{}</title></line>",
            h - mb,
            esc(label)
        );
    }
    let _ = write!(
        o,
        "<line x1=\"{pad}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#999\"/>\
         <text x=\"{pad}\" y=\"{ty}\">{}</text><text x=\"{r}\" y=\"{ty}\" text-anchor=\"end\">{}</text></svg>",
        esc(&fmt_value(&m.metric, lo)),
        esc(&fmt_value(&m.metric, hi)),
        b = h - mb,
        r = w - pad,
        ty = h - 5.0,
    );
    trend_line(o, m, w);
    o.push_str("</div>");
}

/// The median per production day or week under the histogram, for throughput metrics (a
/// drift in a supplier's parts shows there first).
fn trend_line(o: &mut String, m: &MetricSummary, w: f64) {
    if !m.metric.ends_with(".mib_per_s") || m.trend.len() < 2 {
        return;
    }
    let h = 34.0;
    let (lo, hi) = m.trend.iter().fold((f64::MAX, f64::MIN), |(lo, hi), t| {
        (lo.min(t.median), hi.max(t.median))
    });
    let span = if hi > lo { hi - lo } else { 1.0 };
    let n = (m.trend.len() - 1) as f64;
    let pts: Vec<String> = m
        .trend
        .iter()
        .enumerate()
        .map(|(i, t)| {
            format!(
                "{:.1},{:.1}",
                6.0 + i as f64 / n * (w - 12.0),
                h - 4.0 - (t.median - lo) / span * (h - 14.0)
            )
        })
        .collect();
    let first = &m.trend[0];
    let last = &m.trend[m.trend.len() - 1];
    let _ = write!(
        o,
        "<svg class=\"trend\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">\
         <text x=\"6\" y=\"9\">median {} .. {}: {} .. {}</text>\
         <polyline class=\"trend\" points=\"{}\"/></svg>",
        esc(&first.start),
        esc(&last.start),
        esc(&fmt_value(&m.metric, lo)),
        esc(&fmt_value(&m.metric, hi)),
        pts.join(" ")
    );
}
