//! Owns learned thresholds: from the devices of a fleet that passed, a limit per device class
//! (and port, when grouped by port) and figure, written as the `thresholds:` list of a board
//! profile that the factory run accepts as is.
//!
//! The rule (documented in docs/fleet.md): a minimum is the 1st percentile of passing devices
//! times (1 - margin), rounded down to two significant digits; a p99-latency maximum is the
//! 99th percentile times (1 + margin), rounded up; a link minimum is the 1st-percentile link
//! speed itself (speeds are discrete: 12, 480, 5000 ...); a capacity minimum is the 1st
//! percentile less 5 % (media of one nominal size differ by a few %). With the default margin
//! of 20 %, a good unit at the edge of today's fleet still passes and a unit half as fast fails.

use std::fmt::Write;
use usbperf_report::metric;

use super::aggregate::{Dimension, FleetSummary, MetricSummary};
use super::extract::{CAPACITY_METRIC, LINK_METRIC};

/// How limits are derived.
#[derive(Debug, Clone, Copy)]
pub struct SuggestOptions {
    /// Margin below the low percentile (above the high one), as a share: 0.2 = 20 %.
    pub margin: f64,
    /// Fewer passing devices than this in a group: no limit (too few to learn from).
    pub min_devices: usize,
}

impl Default for SuggestOptions {
    fn default() -> Self {
        SuggestOptions {
            margin: 0.2,
            min_devices: 20,
        }
    }
}

/// One proposed limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Suggestion {
    /// The summary group it was learned from (its `name`).
    pub group: String,
    /// The summary metric it limits (`seq-write.mib_per_s`).
    pub metric: String,
    pub class: String,
    /// `usb:1-2` when the fleet was grouped by port.
    pub port: Option<String>,
    pub workload: Option<String>,
    /// The threshold key (the metric table's) that sets the limit.
    pub field: &'static str,
    pub value: f64,
    /// Why this value: the figures it came from.
    pub basis: String,
}

/// Rounds to two significant digits, down or up.
fn round2(v: f64, up: bool) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 0.0;
    }
    let scale = 10f64.powi(v.log10().floor() as i32 - 1);
    let q = v / scale;
    // The epsilon keeps 12.0 from becoming 11 through float noise.
    let r = if up {
        (q - 1e-9).ceil()
    } else {
        (q + 1e-9).floor()
    };
    r * scale
}

fn derive(m: &MetricSummary, o: &SuggestOptions) -> Option<(Option<String>, &'static str, f64)> {
    let p = &m.passing;
    if p.count < o.min_devices {
        return None;
    }
    let (w, fig) = match m.metric.split_once('.') {
        Some((w, f)) => (Some(w.to_string()), f),
        None => (None, m.metric.as_str()),
    };
    let wl = w.as_deref().unwrap_or("");
    let v = match metric::by_id(fig) {
        Some(m) if m.id == CAPACITY_METRIC => {
            // Whole MiB, so the profile shows a readable size.
            let mib = (p.p1 * 0.95 / 1048576.0).floor();
            (m.key(), mib * 1048576.0)
        }
        // The link is what it trained at: no margin under a speed the fleet all reached.
        Some(m) if m.id == LINK_METRIC => (m.key(), p.p1),
        // A figure a workload's cells are judged by: its 1st percentile less the margin for a
        // minimum, its 99th plus the margin for a maximum.
        Some(m) if m.limit.is_some() && m.of_workload(wl) => match m.better {
            metric::Better::Higher => (m.key(), round2(p.p1 * (1.0 - o.margin), false)),
            metric::Better::Lower => (m.key(), round2(p.p99 * (1.0 + o.margin), true)),
        },
        _ => return None,
    };
    (v.1 > 0.0).then_some((w, v.0, v.1))
}

/// Proposes limits from a summary grouped by device class (and optionally port).
pub fn suggest(s: &FleetSummary, o: &SuggestOptions) -> Vec<Suggestion> {
    let pos = |d: Dimension| s.group_by.iter().position(|x| *x == d);
    let (class_i, port_i) = (pos(Dimension::DeviceClass), pos(Dimension::Port));
    let mut out = Vec::new();
    for g in &s.groups {
        let class = match class_i {
            Some(i) => g.key[i].clone(),
            None if g.classes.len() == 1 => g.classes[0].clone(),
            None => continue,
        };
        let port = port_i
            .map(|i| g.key[i].clone())
            .filter(|p| p.starts_with("usb:"));
        for m in &g.metrics {
            if m.metric == LINK_METRIC && class != "usb" {
                continue;
            }
            let Some((workload, field, value)) = derive(m, o) else {
                continue;
            };
            let p = &m.passing;
            let f = |v: f64| super::text::fmt_value(&m.metric, v);
            out.push(Suggestion {
                group: g.name.clone(),
                metric: m.metric.clone(),
                class: class.clone(),
                port: port.clone(),
                workload,
                field,
                value,
                basis: format!(
                    "{}: {} passing device tests of {} reports{}, p1 {}, median {}, p99 {}",
                    m.metric,
                    p.count,
                    p.reports,
                    match p.reports_left_out {
                        0 => String::new(),
                        n => format!(" ({n} far from the others left out)"),
                    },
                    f(p.p1),
                    f(p.median),
                    f(p.p99)
                ),
            });
        }
    }
    out
}

fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        // Two significant digits never need more than this.
        let s = format!("{v:.6}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// The board-profile snippet: a `thresholds:` list with one comment per limit saying where
/// it came from. Paste it into the board's profile (it replaces the profile's list).
pub fn render_snippet(
    board: &str,
    s: &FleetSummary,
    sug: &[Suggestion],
    o: &SuggestOptions,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Thresholds learned by `usbperf-matrix fleet --suggest-thresholds` for board:\n\
         #   {board}\n\
         # from {} reports of {} units ({} .. {}), devices that passed only.\n\
         # Rule: minimum = p1 x {:.2} rounded down to 2 significant digits; p99 latency maximum =\n\
         # p99 x {:.2} rounded up; link = the p1 link speed; capacity = p1 - 5 %. Percentiles are\n\
         # over passing device tests, each report weighing one per class (its n devices 1/n\n\
         # each); a figure far outside the others is left out. Groups with fewer than {}\n\
         # passing device tests get no limit. Review before use.",
        s.reports,
        s.units,
        s.first_day.as_deref().unwrap_or("-"),
        s.last_day.as_deref().unwrap_or("-"),
        1.0 - o.margin,
        1.0 + o.margin,
        o.min_devices,
    );
    if sug.is_empty() {
        out.push_str("thresholds: []\n");
        return out;
    }
    out.push_str("thresholds:\n");
    for t in sug {
        let _ = writeln!(out, "  # {}", t.basis);
        let mut sel = format!("class: {}", t.class);
        if let Some(p) = &t.port {
            let _ = write!(sel, ", port: \"{p}\"");
        }
        let mut line = format!("  - {{select: {{{sel}}}");
        if let Some(w) = &t.workload {
            let _ = write!(line, ", workload: {w}");
        }
        let _ = write!(line, ", {}: {}}}", t.field, num(t.value));
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_to_two_significant_digits() {
        assert_eq!(round2(11.37, false), 11.0);
        assert_eq!(round2(12.0, false), 12.0);
        assert_eq!(round2(0.876, false), 0.87);
        assert_eq!(round2(1834.0, false), 1800.0);
        assert_eq!(round2(31.2, true), 32.0);
        assert_eq!(num(480.0), "480");
        assert_eq!(num(0.87), "0.87");
    }
}
