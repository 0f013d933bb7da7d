//! Owns the step from one parsed report to the compact record the fleet keeps: who (unit,
//! board, tool), when, and per device its group dimensions, metric values and failure
//! reasons. Nothing else of the report survives, which keeps memory flat however large the
//! reports are.

use std::path::Path;

use chrono::{DateTime, Utc};

use super::reader::{CurveLite, ReportLite, ThresholdLite};

/// The metrics of every workload cell, by suffix: `seq-write.mib_per_s` and so on.
pub const WORKLOAD_METRICS: [&str; 3] = ["mib_per_s", "iops", "p99_latency_ms"];
/// Device-level metrics.
pub const LINK_METRIC: &str = "link_mbps";
pub const CAPACITY_METRIC: &str = "capacity_bytes";

/// One report, reduced.
#[derive(Debug, Clone)]
pub struct UnitRecord {
    /// Index of the file in the sorted input list (records arrive out of order).
    pub file: u32,
    pub unit: String,
    pub board: String,
    pub tool_version: String,
    pub started_at: DateTime<Utc>,
    pub pass: bool,
    pub devices: Vec<DeviceRecord>,
    pub thresholds: Vec<ThresholdLite>,
}

/// One tested device of a report.
#[derive(Debug, Clone)]
pub struct DeviceRecord {
    /// Kernel name, model and serial: what a technician looks for on the bench.
    pub label: String,
    pub class: String,
    /// `usb:1-2` for USB devices (the board profile's port syntax), else the kernel name.
    pub port: String,
    pub model: String,
    pub pass: bool,
    pub reasons: Vec<String>,
    /// (metric, value, the figure's own check passed).
    pub values: Vec<(String, f64, bool)>,
    /// The write curve, if the device ran `write-curve`.
    pub curve: Option<CurveLite>,
}

fn clean(s: &Option<String>) -> Option<String> {
    s.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// Reduces a parsed report. The unit is named by its board serial, else machine-id, else
/// hostname, else the file name (every report names some unit).
pub fn extract(file: u32, path: &Path, r: ReportLite) -> UnitRecord {
    let unit = clean(&r.unit.serial)
        .or_else(|| clean(&r.unit.machine_id))
        .or_else(|| clean(&r.unit.hostname))
        .unwrap_or_else(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
    let board = clean(&r.unit.model).unwrap_or_else(|| "unknown board".into());
    let devices = r
        .devices
        .into_iter()
        .map(|d| {
            let class = clean(&d.disk.class).unwrap_or_else(|| "other".into());
            let model = match (clean(&d.disk.vendor), clean(&d.disk.model)) {
                (Some(v), Some(m)) if !m.starts_with(&v) => format!("{v} {m}"),
                (_, Some(m)) => m,
                (Some(v), None) => v,
                (None, None) => "unknown model".into(),
            };
            let port = match &d.disk.usb {
                Some(u) if !u.port_path.is_empty() => format!("usb:{}", u.port_path),
                _ => d.name.clone(),
            };
            let mut label = format!("{} {model}", d.name);
            if let Some(s) = clean(&d.disk.serial) {
                label.push_str(&format!(" ({s})"));
            }
            if let Some(l) = clean(&d.label) {
                label.push_str(&format!(" [{l}]"));
            }
            let mut values = Vec::with_capacity(d.cells.len() * 3 + 2);
            let mut curve = None;
            for c in d.cells {
                // Figures of a cell that errored, was skipped or interrupted are not a
                // measurement of the device.
                if c.status != "passed" && c.status != "failed" {
                    continue;
                }
                let Some(res) = c.result else { continue };
                let ok = c.status == "passed";
                let w = &c.workload;
                values.push((format!("{w}.mib_per_s"), res.mib_per_s, ok));
                values.push((format!("{w}.iops"), res.iops, ok));
                if res.all.ios > 0 {
                    let ms = res.all.latency.p99_ns as f64 / 1e6;
                    values.push((format!("{w}.p99_latency_ms"), ms, ok));
                }
                if res.curve.as_ref().is_some_and(|c| !c.samples.is_empty()) {
                    curve = res.curve;
                }
            }
            let reasons = d.verdict.reasons;
            if let Some(mbps) = d.disk.usb.as_ref().and_then(|u| u.speed_mbps) {
                let ok = !reasons.iter().any(|r| r.starts_with("link:"));
                values.push((LINK_METRIC.to_string(), mbps, ok));
            }
            if let Some(b) = d.disk.size_bytes {
                let ok = !reasons.iter().any(|r| r.starts_with("capacity:"));
                values.push((CAPACITY_METRIC.to_string(), b as f64, ok));
            }
            DeviceRecord {
                label,
                class,
                port,
                model,
                pass: d.verdict.pass,
                reasons,
                values,
                curve,
            }
        })
        .collect();
    UnitRecord {
        file,
        unit,
        board,
        tool_version: r.tool.version,
        started_at: r.started_at,
        pass: r.verdict.pass,
        devices,
        thresholds: r.config.thresholds,
    }
}

/// A failure reason with its measured figures replaced by `N`, so the same failure on many
/// units counts as one: `seq-write: 3.1 MiB/s < minimum 5 MiB/s [...]` becomes
/// `seq-write: N MiB/s < minimum 5 MiB/s [...]` (limits, ports and rule numbers are kept).
pub fn reason_kind(reason: &str) -> String {
    let words: Vec<&str> = reason.split(' ').collect();
    let mut out = Vec::with_capacity(words.len());
    for (i, w) in words.iter().enumerate() {
        let prev = if i > 0 { words[i - 1] } else { "" };
        let next = words.get(i + 1).copied().unwrap_or("");
        let is_num = !w.is_empty() && w.parse::<f64>().is_ok();
        let unit_follows = matches!(next, "MiB/s" | "IOPS" | "ms" | "s" | "I/O(s)")
            || next.starts_with("s)")
            || w.ends_with("ms");
        let is_limit = matches!(prev, "minimum" | "maximum");
        let latency = prev == "latency" && is_num;
        if (is_num && unit_follows && !is_limit) || latency {
            out.push("N");
        } else {
            out.push(w);
        }
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_kind_hides_measured_figures_and_keeps_limits() {
        assert_eq!(
            reason_kind("seq-write: 3.1 MiB/s < minimum 5 MiB/s [thresholds[1] (class usb)]"),
            "seq-write: N MiB/s < minimum 5 MiB/s [thresholds[1] (class usb)]"
        );
        assert_eq!(
            reason_kind("rand-read: 240 IOPS < minimum 500 IOPS [r]"),
            "rand-read: N IOPS < minimum 500 IOPS [r]"
        );
        assert_eq!(
            reason_kind("rand-read: p99 latency 31.5 ms > maximum 20 ms [r]"),
            "rand-read: p99 latency N ms > maximum 20 ms [r]"
        );
        let link = "link: port 1-2 linked at 12M (full speed) but must give at least 480M";
        assert_eq!(reason_kind(link), link);
    }
}
