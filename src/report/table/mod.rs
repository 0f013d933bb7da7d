//! Owns the matrix view of a report: the table storage write-ups end with (devices against
//! hdparm read, dd read and dd write MB/s), drawn from one or more reports as one row per
//! device and one column group per test of the matrix, in the report's order, with the
//! device verdict; rendered as aligned text (the console), a Markdown pipe table (a wiki, a
//! ticket) or CSV (spreadsheets, scripts).
//!
//! Rules every format keeps: each figure's unit is in its header; a cell that did not give a
//! figure (pending, skipped, error, interrupted, or a status a newer build wrote) shows its
//! status word, never a blank or a zero; a failed cell's figure is marked in text and
//! Markdown. Everything here is a pure function of the reports; each format is its own file.

use std::collections::HashMap;
use std::fmt::Write;

use super::schema::{Report, SCHEMA_VERSION};
use super::wire::{self, Reason};
use crate::metric;

mod compact;
mod csv;
mod markdown;
mod text;

/// The output format of [`render`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Style {
    /// Aligned columns with a two-line header (test, unit) for a console.
    Text,
    /// A GitHub pipe table, for a wiki page or a ticket.
    Markdown,
    /// RFC 4180 quoting, one header row, LF line ends; figures are plain numbers.
    Csv,
}

/// A test of the matrix: its workload and which occurrence of that workload it is (a matrix
/// may run `seq-write` twice, at two block sizes), so cells of several reports line up.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct TestKey {
    workload: String,
    nth: usize,
}

impl TestKey {
    fn label(&self) -> String {
        if self.nth == 0 {
            self.workload.clone()
        } else {
            format!("{}#{}", self.workload, self.nth + 1)
        }
    }
}

/// One figure a test contributes to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Metric {
    MibPerS,
    Iops,
    P99Ms,
    BadBlocks,
    /// Acknowledged blocks a power cut did not keep (a `power-cut verify` report).
    LostBlocks,
}

impl Metric {
    const ALL: [Metric; 5] = [
        Metric::MibPerS,
        Metric::Iops,
        Metric::P99Ms,
        Metric::BadBlocks,
        Metric::LostBlocks,
    ];

    /// Its row of the report's metric table.
    fn def(self) -> &'static metric::Metric {
        match self {
            Metric::MibPerS => &metric::MIB_PER_S,
            Metric::Iops => &metric::IOPS,
            Metric::P99Ms => &metric::P99_LATENCY_MS,
            Metric::BadBlocks => &metric::MISMATCHED_BLOCKS,
            Metric::LostBlocks => &metric::CUT_LOST_BLOCKS,
        }
    }

    /// The figures a workload is judged by, from the metric table (as dd and hdparm
    /// gave MB/s, fio's random jobs IOPS and the 99th percentile completion latency). A
    /// workload this build does not know still has a throughput: every result carries
    /// `mib_per_s`.
    fn of(workload: &str) -> Vec<Metric> {
        let v: Vec<Metric> = Metric::ALL
            .into_iter()
            .filter(|m| m.def().of_workload(workload))
            .collect();
        if v.is_empty() {
            vec![Metric::MibPerS]
        } else {
            v
        }
    }

    fn label(self) -> &'static str {
        self.def().label
    }

    /// The figure a limit judges (as `BenchResult::judged`): a rate that fell partway (a
    /// write cache that filled) at its sustained level, else the steady rate after the
    /// warm-up; IOPS alike (one I/O size).
    fn figure(self, r: &wire::Figures) -> Option<f64> {
        let (mib_per_s, iops) = r.judged();
        match self {
            Metric::MibPerS => Some(mib_per_s),
            Metric::Iops => Some(iops),
            Metric::P99Ms => Some(r.all.latency.p99_ns / 1e6),
            Metric::BadBlocks => r
                .verify
                .as_ref()
                .and_then(|v| v.mismatched_blocks)
                .map(|n| n as f64),
            // A device's power-cut verdict, not a cell's result: see `power_cut_value`.
            Metric::LostBlocks => None,
        }
    }

    /// For people: about three significant digits, like the fleet's table; bad or lost
    /// blocks as a count with `ok` for none.
    fn people(self, v: f64) -> String {
        if matches!(self, Metric::BadBlocks | Metric::LostBlocks) {
            return if v == 0.0 {
                "ok".into()
            } else {
                format!("{v:.0}")
            };
        }
        crate::units::three_digits(v)
    }

    /// For programs: plain numbers at the precision the report's figures mean something
    /// (IOPS to 0.1, MiB/s and ms to 0.001, blocks exact).
    fn machine(self, v: f64) -> String {
        let step = match self {
            Metric::Iops => 10.0,
            Metric::BadBlocks | Metric::LostBlocks => 1.0,
            Metric::MibPerS | Metric::P99Ms => 1000.0,
        };
        format!("{}", (v * step).round() / step)
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Column {
    test: TestKey,
    metric: Metric,
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    /// A measured figure; `failed` when the cell failed (the figure was measured, and a
    /// threshold, a kernel event or a verify mismatch failed it).
    Figure {
        v: f64,
        failed: bool,
        /// Half the figure's 95 % confidence interval, in % (rates and IOPS that state it).
        ci: Option<f64>,
        /// The rate before it fell (a write cache's burst): `v` is then the sustained rate.
        burst: Option<f64>,
    },
    /// The cell gave no figure: its status word, or why not.
    Word(String),
}

/// The power-cut test's column, from a device's `power_cut` verdict.
const POWER_CUT: &str = crate::report::powercut::WORKLOAD;

/// A power-cut verdict as the table shows it (the blocks not kept; the word when the test
/// proved nothing) and as CSV carries it (status, figure).
fn power_cut_value(p: Option<&wire::PowerCut>) -> (Value, (String, Option<f64>)) {
    let Some(p) = p else {
        return (
            Value::Word(NOT_IN_MATRIX.into()),
            (NOT_IN_MATRIX.into(), None),
        );
    };
    match p.verdict.as_str() {
        "pass" | "fail" => {
            let v = p.lost_blocks() as f64;
            let failed = p.verdict == "fail";
            let status = if failed { "failed" } else { "passed" };
            (
                Value::Figure {
                    v,
                    failed,
                    ci: None,
                    burst: None,
                },
                (status.into(), Some(v)),
            )
        }
        word => (Value::Word(word.into()), (word.into(), None)),
    }
}

/// A test the device has no cell for (several reports with different matrices).
const NOT_IN_MATRIX: &str = "-";

#[derive(Debug, Clone, PartialEq)]
struct Row {
    report: usize,
    device: String,
    label: String,
    class: String,
    link: String,
    values: Vec<Value>,
    /// Per column, for programs: the cell's status word (`-` when the device has no such
    /// cell) and its figure whatever the status (an interrupted cell's partial figure too).
    raw: Vec<(String, Option<f64>)>,
    /// `PASS`, `FAIL`, or the run's status word while it has no verdicts yet.
    verdict: String,
    reasons: Vec<String>,
}

/// What the table says about each report it was drawn from.
#[derive(Debug, Clone, PartialEq)]
struct ReportLine {
    source: Option<String>,
    unit: String,
    model: Option<String>,
    started: Option<String>,
    status: String,
    interrupted_by: Option<String>,
    /// `None` while the run has not judged (a `running` report).
    pass: Option<bool>,
    schema_version: u32,
    missing_devices: Vec<String>,
}

/// The table of one or more reports, ready to render.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixTable {
    reports: Vec<ReportLine>,
    columns: Vec<Column>,
    rows: Vec<Row>,
}

/// Keys of a list of workloads in order: the n-th `seq-write` is `(seq-write, n)`.
fn keys<'a>(workloads: impl Iterator<Item = &'a str>) -> Vec<TestKey> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    workloads
        .map(|w| {
            let n = seen.entry(w).or_insert(0);
            *n += 1;
            TestKey {
                workload: w.to_string(),
                nth: *n - 1,
            }
        })
        .collect()
}

/// `usb 1-1 480M`, `sata 6.0 Gbps`, `mmc HS200`: the link as the disk record has it.
fn link(d: &wire::Disk) -> String {
    if let Some(u) = &d.usb {
        let mut s = "usb".to_string();
        if let Some(p) = Some(u.port_path.as_str()).filter(|p| !p.is_empty()) {
            let _ = write!(s, " {p}");
        }
        if let Some(m) = u.speed_mbps {
            let _ = write!(s, " {}", crate::discover::parse::speed_label(m));
        }
        return s;
    }
    if let Some(sata) = &d.sata {
        // libata leaves the speed out when the link is down.
        return match sata.sata_spd_gbps {
            Some(g) => format!("sata {g:.1} Gbps"),
            None => "sata link down".into(),
        };
    }
    if let Some(m) = &d.mmc {
        // debugfs already says `mmc HS400 enhanced strobe`; the card type is the fallback
        // when debugfs was not mounted.
        return match (&m.timing, &m.card_type) {
            (Some(t), _) if t.starts_with("mmc") || t.starts_with("sd") => t.clone(),
            (Some(t), _) => format!("mmc {t}"),
            (None, Some(c)) => format!("mmc {c}"),
            (None, None) => "mmc".into(),
        };
    }
    "-".into()
}

fn value(cell: Option<&wire::Cell>, metric: Metric) -> Value {
    let Some(c) = cell else {
        return Value::Word(NOT_IN_MATRIX.into());
    };
    match c.status.as_str() {
        "passed" | "failed" => {
            // A failed cell marks the figures its failures name (the IOPS limit missed: the
            // IOPS, not the p99 beside it); every figure when none names one.
            let failures: Vec<Option<&str>> = c
                .reasons
                .iter()
                .filter_map(|r| match r {
                    Reason::Record(r) if r.kind != "note" => Some(r.metric.as_deref()),
                    Reason::Record(_) => None,
                    Reason::Text(_) => Some(None),
                })
                .collect();
            let named = failures.iter().any(|m| m.is_some());
            let failed =
                c.status == "failed" && (!named || failures.contains(&Some(metric.def().id)));
            match c.result.as_ref().map(|r| metric.figure(r)) {
                Some(Some(v)) if v.is_finite() => {
                    let rate = matches!(metric, Metric::MibPerS | Metric::Iops);
                    let precision = c.result.as_ref().and_then(|r| r.precision.as_ref());
                    let drop = precision.and_then(|p| p.drop.as_ref()).filter(|_| rate);
                    Value::Figure {
                        v,
                        failed,
                        ci: match drop {
                            Some(d) => d.ci95_percent,
                            None => precision.and_then(|p| p.ci95_percent).filter(|_| rate),
                        },
                        burst: drop
                            .and_then(|d| d.burst_mib_per_s)
                            .filter(|_| metric == Metric::MibPerS),
                    }
                }
                // A failed cell without the figure still says that it failed.
                _ if failed => Value::Word("failed".into()),
                Some(_) => Value::Word("n/a".into()),
                None => Value::Word("no result".into()),
            }
        }
        // pending, skipped, error, interrupted, or a word from a newer build: a figure of an
        // interrupted cell covers part of the test only, so it is not shown as the figure.
        other => Value::Word(other.to_string()),
    }
}

/// Serial, else hostname, else the start of the machine id: how a factory names a unit.
fn unit_name(r: &wire::Report) -> String {
    let u = &r.unit;
    super::unit::unit_name(
        u.serial.as_deref(),
        u.machine_id.as_deref(),
        u.hostname.as_deref(),
    )
    .unwrap_or_else(|| "-".into())
}

fn started(r: &wire::Report) -> Option<String> {
    Some(r.started_at.format("%Y-%m-%d %H:%M:%S UTC").to_string())
}

impl MatrixTable {
    /// The table of reports read from files; `source` names each (its file) when there is
    /// more than one. Rows follow the reports' order, then their devices' order.
    pub fn new(reports: &[(String, wire::Report)]) -> MatrixTable {
        let items: Vec<(Option<&str>, &wire::Report)> =
            reports.iter().map(|(s, r)| (Some(s.as_str()), r)).collect();
        Self::build(&items)
    }

    /// The table of an in-memory report: what the factory run prints at its end without
    /// reading the file back.
    pub fn from_report(report: &Report) -> MatrixTable {
        let view = report.as_read();
        Self::build(&[(None, &view)])
    }

    fn build(reports: &[(Option<&str>, &wire::Report)]) -> MatrixTable {
        // Columns: the tests of every report in the order they first appear (the config's
        // list, then any cell the config did not name, as a newer build might write).
        let mut tests: Vec<TestKey> = Vec::new();
        let mut add = |ks: Vec<TestKey>| {
            for k in ks {
                if !tests.contains(&k) {
                    tests.push(k);
                }
            }
        };
        for (_, r) in reports {
            add(keys(r.config.tests.iter().map(|t| t.workload.as_str())));
            for d in &r.devices {
                add(keys(d.cells.iter().map(|c| c.workload.as_str())));
                if d.power_cut.is_some() {
                    add(keys([POWER_CUT].into_iter()));
                }
            }
        }
        let columns: Vec<Column> = tests
            .iter()
            .flat_map(|t| {
                Metric::of(&t.workload).into_iter().map(|metric| Column {
                    test: t.clone(),
                    metric,
                })
            })
            .collect();

        let mut lines = Vec::new();
        let mut rows = Vec::new();
        for (ri, (source, r)) in reports.iter().enumerate() {
            let judged = r.judged();
            let status = r.status.clone().unwrap_or_else(|| "unknown".into());
            lines.push(ReportLine {
                source: source.map(str::to_string),
                unit: unit_name(r),
                model: r.unit.model.clone(),
                started: started(r),
                status: status.clone(),
                interrupted_by: r.interrupted_by.clone(),
                pass: judged.then_some(r.verdict.pass),
                schema_version: r.schema_version,
                missing_devices: r.missing_devices.clone(),
            });
            for d in &r.devices {
                rows.push(row(ri, d, &columns, judged, &status));
            }
            // Raw flash: a row per MTD partition and UBI device, with its verdict (its
            // figures are in the report's `flash` section, not in the matrix's columns).
            for d in r.flash.iter().flat_map(|f| &f.devices) {
                rows.push(Row {
                    report: ri,
                    device: d.name.clone(),
                    label: d.label.clone().unwrap_or_else(|| "-".into()),
                    class: d.class.clone().unwrap_or_else(|| "-".into()),
                    link: "-".into(),
                    values: columns
                        .iter()
                        .map(|_| Value::Word(NOT_IN_MATRIX.into()))
                        .collect(),
                    raw: columns
                        .iter()
                        .map(|_| (NOT_IN_MATRIX.to_string(), None))
                        .collect(),
                    verdict: match (judged, d.verdict.pass) {
                        (true, true) => "PASS".into(),
                        (true, false) => "FAIL".into(),
                        (false, _) => status.clone(),
                    },
                    reasons: if judged {
                        d.verdict.texts()
                    } else {
                        Vec::new()
                    },
                });
            }
        }
        MatrixTable {
            reports: lines,
            columns,
            rows,
        }
    }

    /// The number of device rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    fn many(&self) -> bool {
        self.reports.len() > 1
    }
}

/// PASS or FAIL, and how it was reached: "PASS after 2 retests" when cells were measured
/// again, "(marginal)" when a figure was indistinguishable from its limit or within its band.
fn verdict_word(d: &wire::Device, pass: bool) -> String {
    let mut w = String::from(if pass { "PASS" } else { "FAIL" });
    let retests: usize = d.cells.iter().map(|c| c.attempts.len()).sum();
    match retests {
        0 => {}
        1 => w.push_str(" after 1 retest"),
        n => w.push_str(&format!(" after {n} retests")),
    }
    let marginal = d
        .cells
        .iter()
        .flat_map(|c| &c.reasons)
        .any(|r| matches!(r, Reason::Record(r) if r.marginal));
    if marginal {
        w.push_str(" (marginal)");
    }
    w
}

fn row(ri: usize, d: &wire::Device, columns: &[Column], judged: bool, status: &str) -> Row {
    let cells: HashMap<TestKey, &wire::Cell> = keys(d.cells.iter().map(|c| c.workload.as_str()))
        .into_iter()
        .zip(&d.cells)
        .collect();
    Row {
        report: ri,
        device: d.name.clone(),
        label: d.label.clone().unwrap_or_else(|| "-".into()),
        class: d.disk.class.clone().unwrap_or_else(|| "-".into()),
        link: link(&d.disk),
        values: columns
            .iter()
            .map(|c| match c.metric {
                Metric::LostBlocks => power_cut_value(d.power_cut.as_ref()).0,
                _ => value(cells.get(&c.test).copied(), c.metric),
            })
            .collect(),
        raw: columns
            .iter()
            .map(|c| match (c.metric, cells.get(&c.test)) {
                (Metric::LostBlocks, _) => power_cut_value(d.power_cut.as_ref()).1,
                (_, Some(cell)) => (
                    cell.status.clone(),
                    cell.result
                        .as_ref()
                        .and_then(|r| c.metric.figure(r))
                        .filter(|v| v.is_finite()),
                ),
                (_, None) => (NOT_IN_MATRIX.to_string(), None),
            })
            .collect(),
        verdict: match (judged, d.verdict.pass) {
            (true, pass) => verdict_word(d, pass),
            (false, _) => status.to_string(),
        },
        reasons: if judged {
            d.verdict.texts()
        } else {
            Vec::new()
        },
    }
}

/// Renders the table; text and Markdown add one line per report above it (unit, start,
/// run status, verdict) and the failure reasons below, CSV carries them as columns.
/// The console's table at `width` columns: the wide table when every line of it fits, else
/// one block per device (a board's 80-column serial console).
pub fn render_fit(view: &MatrixTable, width: usize) -> String {
    let wide = text::render(view);
    if wide.lines().all(|l| l.chars().count() <= width) {
        wide
    } else {
        compact::render(view, width)
    }
}

pub fn render(view: &MatrixTable, style: Style) -> String {
    match style {
        Style::Text => text::render(view),
        Style::Markdown => markdown::render(view),
        Style::Csv => csv::render(view),
    }
}

/// The identity columns before the figures: unit and report only when there are several.
fn lead_headers(v: &MatrixTable) -> Vec<&'static str> {
    let mut h = Vec::new();
    if v.many() {
        h.extend(["unit", "report"]);
    }
    h.extend(["device", "label", "class", "link"]);
    h
}

fn lead_values(v: &MatrixTable, r: &Row) -> Vec<String> {
    let mut out = Vec::new();
    if v.many() {
        let line = &v.reports[r.report];
        out.push(line.unit.clone());
        out.push(line.source.clone().unwrap_or_else(|| "-".into()));
    }
    out.extend([
        r.device.clone(),
        r.label.clone(),
        r.class.clone(),
        r.link.clone(),
    ]);
    out
}

/// A figure for people; a failed cell's figure carries `mark`.
fn people(v: &Value, metric: Metric, mark: &str) -> String {
    match v {
        Value::Figure { v, failed, .. } => {
            let s = metric.people(*v);
            if *failed {
                format!("{s}{mark}")
            } else {
                s
            }
        }
        Value::Word(w) => w.clone(),
    }
}

/// What text and Markdown say about each report, one sentence per line.
fn report_sentences(v: &MatrixTable) -> Vec<String> {
    v.reports
        .iter()
        .map(|l| {
            let mut s = match &l.source {
                Some(src) => format!("report {src}: unit {}", l.unit),
                None => format!("unit {}", l.unit),
            };
            if let Some(m) = &l.model {
                let _ = write!(s, " ({m})");
            }
            if let Some(t) = &l.started {
                let _ = write!(s, ", started {t}");
            }
            match l.status.as_str() {
                "complete" => s.push_str(", run complete"),
                "interrupted" => {
                    let _ = write!(
                        s,
                        ", run interrupted by {}: tests that did not run show `pending`",
                        l.interrupted_by.as_deref().unwrap_or("a signal")
                    );
                }
                "running" => {
                    s.push_str(", run still running: a partial report, no verdicts yet");
                }
                other => {
                    let _ = write!(s, ", run status {other}");
                }
            }
            match l.pass {
                Some(true) => s.push_str(", verdict PASS"),
                Some(false) => s.push_str(", verdict FAIL"),
                None => {}
            }
            if l.schema_version > SCHEMA_VERSION {
                let _ = write!(
                    s,
                    " (schema_version {} is newer than this build's {SCHEMA_VERSION}: fields \
                     it added are not shown)",
                    l.schema_version
                );
            }
            s
        })
        .collect()
}

/// Lines below the table: why each failed device failed, missing required devices, and the
/// legend of the marks the table used.
fn notes(v: &MatrixTable, mark: &str) -> Vec<String> {
    let who = |r: &Row| {
        if v.many() {
            format!("{} {}", v.reports[r.report].unit, r.device)
        } else {
            r.device.clone()
        }
    };
    let mut out = Vec::new();
    for r in &v.rows {
        for reason in &r.reasons {
            out.push(format!("{}: {reason}", who(r)));
        }
    }
    for l in &v.reports {
        for m in &l.missing_devices {
            if v.many() {
                out.push(format!("{}: missing: {m}", l.unit));
            } else {
                out.push(format!("missing: {m}"));
            }
        }
    }
    if v.columns.is_empty() {
        // A config that names no tests (a `--config` file without a base profile) runs
        // none: say so, or the table looks as if the figures were lost.
        out.push("the matrix has no tests: the report's config lists none".into());
    }
    let values = || v.rows.iter().flat_map(|r| r.values.iter());
    if values().any(|x| matches!(x, Value::Figure { failed: true, .. })) {
        out.push(format!(
            "{mark} the cell failed: its figure was measured, and a threshold, a kernel event \
             or a verify mismatch failed it"
        ));
    }
    if values().any(|x| matches!(x, Value::Word(w) if w == NOT_IN_MATRIX)) {
        out.push(format!(
            "\"{NOT_IN_MATRIX}\": the device's report has no cell for that test"
        ));
    }
    out
}

fn header(c: &Column) -> String {
    format!("{} {}", c.test.label(), c.metric.label())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn view(yaml: &str) -> wire::Report {
        wire::read(
            Path::new("r.yaml"),
            yaml.as_bytes(),
            wire::Newer::ReadWhatDecodes,
        )
        .unwrap()
    }

    /// A report with one device per bus of a bring-up guide's table and one cell per status.
    const REPORT: &str = r#"
schema_version: 1
status: complete
started_at: 2026-11-30T10:23:45.912Z
unit: {hostname: apalis, serial: '15000024', model: Toradex Apalis iMX8}
config:
  tests:
  - {workload: read-buffered}
  - {workload: seq-write}
  - {workload: rand-read}
  - {workload: verify}
devices:
- name: mmcblk0
  label: on-module eMMC
  disk: {class: emmc, mmc: {card: 'mmc0:0001', timing: mmc HS200}}
  cells:
  - {workload: read-buffered, status: passed, result: {mib_per_s: 162.4, iops: 81.2, all: {latency: {p99_ns: 0}}}}
  - {workload: seq-write, status: passed, result: {mib_per_s: 43.04, iops: 43.04, all: {latency: {p99_ns: 0}}}}
  - {workload: rand-read, status: passed, result: {mib_per_s: 20.1, iops: 5150.4, all: {latency: {p99_ns: 4500000}}}}
  - {workload: verify, status: passed, result: {mib_per_s: 30.0, iops: 30.0, all: {latency: {p99_ns: 0}}, verify: {mismatched_blocks: 0}}}
  verdict: {pass: true}
- name: sda
  label: USB, stick "A"
  disk: {class: usb, usb: {port_path: 1-1, speed_mbps: 480.0}}
  cells:
  - {workload: read-buffered, status: error, reasons: [x]}
  - {workload: seq-write, status: failed, result: {mib_per_s: 3.4, iops: 3.4, all: {latency: {p99_ns: 0}}}}
  - {workload: rand-read, status: skipped, reasons: [y]}
  - {workload: verify, status: failed, result: {mib_per_s: 5.0, iops: 5.0, all: {latency: {p99_ns: 0}}, verify: {mismatched_blocks: 7}}}
  verdict: {pass: false, reasons: ['seq-write: 3.4 MiB/s < minimum 5.0 MiB/s']}
- name: sdb
  disk: {class: sata, sata: {port: ata1, sata_spd_gbps: 6.0}}
  cells:
  - {workload: read-buffered, status: pending}
  - {workload: seq-write, status: interrupted, result: {mib_per_s: 99.0, iops: 99.0, all: {latency: {p99_ns: 0}}}}
  - {workload: rand-read, status: passed, result: {mib_per_s: 1.0, iops: 256.0, all: {latency: {p99_ns: 8000000}}}}
  - {workload: verify, status: new-word}
  verdict: {pass: false}
verdict: {pass: false}
"#;

    /// A device that passed after retests inside its marginal band says so; a cell failed by
    /// its IOPS limit marks the IOPS, not the p99 latency beside it.
    #[test]
    fn retests_and_marginal_passes_are_said_and_only_the_failed_figure_is_marked() {
        let yaml = r#"
schema_version: 2
status: complete
started_at: 2026-11-30T10:23:45.912Z
unit: {serial: '1'}
config:
  tests:
  - {workload: seq-read}
  - {workload: rand-read}
devices:
- name: sda
  disk: {class: usb}
  cells:
  - workload: seq-read
    status: passed
    result: {mib_per_s: 30.2, iops: 30.2, all: {latency: {p99_ns: 0}}}
    reasons: [{kind: note, metric: mib_per_s, marginal: true, text: 'seq-read: marginal'}]
    attempts: [{status: failed}, {status: failed}]
  - {workload: rand-read, status: passed, result: {mib_per_s: 20.1, iops: 5150.4, all: {latency: {p99_ns: 4500000}}}}
  verdict: {pass: true}
- name: sdb
  disk: {class: usb}
  cells:
  - {workload: seq-read, status: passed, result: {mib_per_s: 30.0, iops: 30.0, all: {latency: {p99_ns: 0}}}}
  - workload: rand-read
    status: failed
    result: {mib_per_s: 1.2, iops: 300.0, all: {latency: {p99_ns: 4500000}}}
    reasons: [{kind: threshold, metric: iops, text: 'rand-read: 300 IOPS < minimum 500 IOPS'}]
  verdict: {pass: false, reasons: [{kind: device_failed, text: 'sdb: failed'}]}
verdict: {pass: false}
"#;
        let m = MatrixTable::new(&[("r.yaml".into(), view(yaml))]);
        let t = render(&m, Style::Text);
        let sda = t.lines().find(|l| l.starts_with("sda")).unwrap();
        let sdb = t.lines().find(|l| l.starts_with("sdb")).unwrap();
        assert!(sda.ends_with("PASS after 2 retests (marginal)"), "{t}");
        assert!(sdb.contains("300*"), "{t}");
        assert!(sdb.contains("4.50") && !sdb.contains("4.50*"), "{t}");
        assert!(sdb.ends_with("FAIL"), "{t}");
    }

    fn csv_rows(s: &str) -> Vec<Vec<String>> {
        // The fields of this table hold no line breaks, so a line is a record.
        s.lines()
            .map(|l| {
                let mut fields = Vec::new();
                let mut cur = String::new();
                let mut quoted = false;
                let mut chars = l.chars().peekable();
                while let Some(c) = chars.next() {
                    match (c, quoted) {
                        ('"', true) if chars.peek() == Some(&'"') => {
                            cur.push('"');
                            chars.next();
                        }
                        ('"', _) => quoted = !quoted,
                        (',', false) => fields.push(std::mem::take(&mut cur)),
                        _ => cur.push(c),
                    }
                }
                fields.push(cur);
                fields
            })
            .collect()
    }

    #[test]
    fn links_as_the_disk_record_has_them() {
        let disk = |y: &str| -> wire::Disk { serde_norway::from_str(y).unwrap() };
        // (disk record, link shown)
        let cases = [
            ("{usb: {port_path: 1-1, speed_mbps: 480.0}}", "usb 1-1 480M"),
            ("{usb: {port_path: 1-2, speed_mbps: 1.5}}", "usb 1-2 1.5M"),
            ("{usb: {port_path: 2-1}}", "usb 2-1"),
            ("{sata: {port: ata1, sata_spd_gbps: 6.0}}", "sata 6.0 Gbps"),
            ("{sata: {port: ata2}}", "sata link down"),
            ("{mmc: {timing: mmc HS200}}", "mmc HS200"),
            ("{mmc: {timing: sd uhs SDR104}}", "sd uhs SDR104"),
            ("{mmc: {timing: legacy}}", "mmc legacy"),
            ("{mmc: {card_type: SD}}", "mmc SD"),
            ("{class: loop}", "-"),
        ];
        for (y, want) in cases {
            assert_eq!(link(&disk(y)), want, "{y}");
        }
    }

    #[test]
    fn cells_show_figures_or_their_status_word() {
        let m = MatrixTable::new(&[("r.yaml".into(), view(REPORT))]);
        let csv = render(&m, Style::Csv);
        let rows = csv_rows(&csv);
        let col = |name: &str| {
            rows[0]
                .iter()
                .position(|h| h == name)
                .unwrap_or_else(|| panic!("no column {name}: {:?}", rows[0]))
        };
        // (device row, column, CSV field)
        let cases = [
            (1, "read-buffered MiB/s", "162.4"),
            (1, "seq-write MiB/s", "43.04"),
            (1, "rand-read IOPS", "5150.4"),
            (1, "rand-read p99 ms", "4.5"),
            (1, "verify bad blocks", "0"),
            (1, "verdict", "PASS"),
            (1, "link", "mmc HS200"),
            // A status has its own column; a figure column holds a number or nothing.
            (2, "read-buffered status", "error"),
            (2, "read-buffered MiB/s", ""),
            (2, "seq-write MiB/s", "3.4"),
            (2, "rand-read status", "skipped"),
            (2, "rand-read IOPS", ""),
            (2, "rand-read p99 ms", ""),
            (2, "verify bad blocks", "7"),
            (2, "verdict", "FAIL"),
            (2, "label", "USB, stick \"A\""),
            (2, "reasons", "seq-write: 3.4 MiB/s < minimum 5.0 MiB/s"),
            (3, "read-buffered status", "pending"),
            (3, "seq-write status", "interrupted"),
            (3, "rand-read status", "passed"),
            (3, "rand-read p99 ms", "8"),
            (3, "verify status", "new-word"),
            (3, "verify bad blocks", ""),
            (3, "label", "-"),
            (3, "run status", "complete"),
        ];
        for (r, c, want) in cases {
            assert_eq!(rows[r][col(c)], want, "row {r} column {c}");
        }
        assert_eq!(rows.len(), 4, "{csv}");
        assert!(rows.iter().all(|r| r.len() == rows[0].len()), "{csv}");
        assert!(
            csv.contains("\"USB, stick \"\"A\"\"\""),
            "RFC 4180 quoting: {csv}"
        );
    }

    #[test]
    fn text_aligns_marks_failed_figures_and_lists_reasons() {
        let m = MatrixTable::new(&[("r.yaml".into(), view(REPORT))]);
        let t = render(&m, Style::Text);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "report r.yaml: unit 15000024 (Toradex Apalis iMX8), started 2026-11-30 10:23:45 \
             UTC, run complete, verdict FAIL"
        );
        let head = lines.iter().position(|l| l.starts_with("device")).unwrap();
        for test in [
            "read-buffered",
            "seq-write",
            "rand-read",
            "verify",
            "verdict",
        ] {
            assert!(lines[head].contains(test), "{t}");
        }
        for unit in ["MiB/s", "IOPS", "p99 ms", "bad blocks"] {
            assert!(lines[head + 1].contains(unit), "{t}");
        }
        let emmc = lines[head + 2];
        let sda = lines[head + 3];
        for f in ["162", "43.0", "5150", "4.50", "ok", "PASS", "mmc HS200"] {
            assert!(emmc.contains(f), "{f}: {t}");
        }
        assert!(
            sda.contains("3.40*") && sda.contains("7*") && sda.contains("FAIL"),
            "{t}"
        );
        // Figures are right-aligned: seq-write's ends where its unit (the second MiB/s) ends.
        let second_mib = lines[head + 1].match_indices("MiB/s").nth(1).unwrap().0 + 5;
        assert_eq!(emmc.find("43.0").unwrap() + 4, second_mib - 1, "{t}");
        assert_eq!(
            sda.find("3.40*").unwrap() + 4,
            second_mib - 1,
            "digits align: {t}"
        );
        assert!(
            t.contains("sda: seq-write: 3.4 MiB/s < minimum 5.0 MiB/s"),
            "{t}"
        );
        assert!(t.contains("* the cell failed"), "{t}");
        // Every row has the same width up to the verdict column.
        let v = lines[head].find("verdict").unwrap();
        for l in &lines[head + 2..head + 5] {
            assert!(
                l[v..].starts_with("PASS") || l[v..].starts_with("FAIL"),
                "{t}"
            );
        }
    }

    #[test]
    fn markdown_is_a_pipe_table_with_numeric_columns_right_aligned() {
        let m = MatrixTable::new(&[("r.yaml".into(), view(REPORT))]);
        let md = render(&m, Style::Markdown);
        let table: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(table.len(), 2 + 3, "{md}");
        assert_eq!(
            table[0],
            "| device | label | class | link | read-buffered MiB/s | seq-write MiB/s | \
             rand-read IOPS | rand-read p99 ms | verify bad blocks | verdict |"
        );
        assert_eq!(table[1], "|---|---|---|---|---:|---:|---:|---:|---:|---|");
        assert!(table[3].contains("| 3.40\\* |"), "{md}");
        let pipes = |l: &str| l.matches(" | ").count();
        assert!(
            table.iter().skip(2).all(|l| pipes(l) == pipes(table[0])),
            "{md}"
        );
    }

    #[test]
    fn pipes_in_cells_are_escaped_in_markdown() {
        let y = REPORT.replace("label: on-module eMMC", "label: 'a|b'");
        let md = render(
            &MatrixTable::new(&[("r".into(), view(&y))]),
            Style::Markdown,
        );
        assert!(md.contains("| a\\|b |"), "{md}");
    }

    #[test]
    fn unfinished_runs_show_their_status() {
        let running = REPORT.replace("status: complete", "status: running");
        let m = MatrixTable::new(&[("r.yaml".into(), view(&running))]);
        let t = render(&m, Style::Text);
        assert!(t.contains("run still running"), "{t}");
        assert!(
            !t.contains("PASS") && !t.contains("FAIL"),
            "no verdicts yet: {t}"
        );
        let csv = render(&m, Style::Csv);
        assert!(
            csv.lines().skip(1).all(|l| l.contains(",running,")),
            "{csv}"
        );

        let interrupted = REPORT.replace(
            "status: complete",
            "status: interrupted\ninterrupted_by: SIGTERM",
        );
        let t = render(
            &MatrixTable::new(&[("r.yaml".into(), view(&interrupted))]),
            Style::Text,
        );
        assert!(t.contains("run interrupted by SIGTERM"), "{t}");
        assert!(t.contains("FAIL"), "an interrupted run has verdicts: {t}");
    }

    #[test]
    fn several_reports_make_one_table_with_unit_and_report_columns() {
        let other = REPORT.replace("'15000024'", "'15000025'").replace(
            "- {workload: verify}\n",
            "- {workload: verify}\n  - {workload: seq-write}\n",
        );
        let m = MatrixTable::new(&[
            ("a.yaml".into(), view(REPORT)),
            ("b.yaml".into(), view(&other)),
        ]);
        assert_eq!(m.len(), 6);
        let rows = csv_rows(&render(&m, Style::Csv));
        assert_eq!(&rows[0][..3], ["unit", "report", "device"]);
        assert!(
            rows[0].contains(&"seq-write#2 MiB/s".to_string()),
            "{:?}",
            rows[0]
        );
        assert_eq!((&*rows[1][0], &*rows[1][1]), ("15000024", "a.yaml"));
        assert_eq!((&*rows[4][0], &*rows[4][1]), ("15000025", "b.yaml"));
        // No report ran the second seq-write: its status says so, and it has no figure.
        let at = |name: &str| rows[0].iter().position(|h| h == name).unwrap();
        let (st, fig) = (at("seq-write#2 status"), at("seq-write#2 MiB/s"));
        assert!(rows[1..]
            .iter()
            .all(|r| r[st] == NOT_IN_MATRIX && r[fig].is_empty()));
        let t = render(&m, Style::Text);
        assert!(t.contains("15000025 sda: seq-write"), "{t}");
        assert!(t.contains("has no cell for that test"), "{t}");
    }

    #[test]
    fn a_matrix_without_tests_says_so() {
        let y = "schema_version: 1\nstarted_at: 2026-11-30T10:23:45Z\nstatus: complete\n\
                 config: {tests: []}\ndevices:\n\
                 - {name: loop0, cells: [], verdict: {pass: true}}\nverdict: {pass: true}\n";
        let t = render(&MatrixTable::new(&[("r".into(), view(y))]), Style::Text);
        assert!(t.contains("loop0") && t.contains("has no tests"), "{t}");
    }

    #[test]
    fn a_single_report_has_no_unit_or_report_column() {
        let m = MatrixTable::new(&[("r.yaml".into(), view(REPORT))]);
        let csv = render(&m, Style::Csv);
        assert!(csv.starts_with("device,label,class,link,"), "{csv}");
    }

    #[test]
    fn machine_figures_are_plain_numbers() {
        // (metric, value, CSV text)
        let cases = [
            (Metric::MibPerS, 147.68212751038106, "147.682"),
            (Metric::MibPerS, 12.0, "12"),
            (Metric::Iops, 5150.449, "5150.4"),
            (Metric::P99Ms, 0.6471, "0.647"),
            (Metric::BadBlocks, 3.0, "3"),
        ];
        for (m, v, want) in cases {
            assert_eq!(m.machine(v), want, "{m:?} {v}");
            assert!(want.parse::<f64>().is_ok());
        }
    }
}
