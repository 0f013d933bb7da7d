//! Owns the fleet kept as mergeable summaries: what each day's reports of each board add up
//! to, kept as they arrive, so that a fleet of millions of reports is answered by merging a
//! few summaries per group and day instead of reading every report again.
//!
//! A summary per (day, board) holds counters (reports, signatures, device tests and passes,
//! yields, link failures per port, failure reasons), and per group below the board (class,
//! port, device model, tool version) and figure: a [`Sketch`] of the values, sketches of the
//! weighted norm and of the passing figures ([`super::stats::device_weight`]), the units as a
//! [`Distinct`] count, and the most extreme values of [`MAX_OUTLIERS`] distinct units at each
//! end. Summaries merge by adding counters, merging sketches and counts and keeping the
//! extremes of the union: the result does not depend on the order in which days, boards or
//! collectors are merged.
//!
//! [`Partial::finish`] gives the [`FleetSummary`] the exact fleet
//! ([`super::aggregate::Accumulator`]) gives for the same reports, within the stated error:
//! - every percentile: within the sketches' accuracy, 0.1 %; the trend's medians within 1 %
//!   (their own sketch, [`TREND_PPM`], kept small for the [`Trend`] rows a query over
//!   years reads per week); the trend's counts exactly;
//! - the learned limits' percentiles: within 1 % (the norm, within a few % of itself, decides
//!   which passing figures are far from the others);
//! - the histogram: a value near a bin's edge (within 0.2 %) may be counted in the next bin;
//! - units per group: exact up to 1,024 units, within 1.6 % (one standard error) above;
//! - counts, pass rates, yields, link failures, failure reasons, signatures, factory lines:
//!   exact (the factory lines' units are counts of distinct units, as the groups' are);
//! - outliers: the listed ones are the exact fleet's (the most extreme of each unit at either
//!   end are kept), flagged against a norm within the accuracy above; a value whose z-score
//!   is within that accuracy of 3.5 may be flagged by one and not the other, and the total
//!   counts values by their bucket;
//! - a unit's latest verdict (`units`, `unit_pass_rate`) is kept per unit in a [`UnitBook`]
//!   beside the summaries (one entry a unit, never read by a query): the summaries count the
//!   units whose latest run is on each day, moved when a later run arrives.
//!
//! What is kept per day, not per report: `--since` selects whole days (UTC), and duplicates
//! are the store's to refuse (it keeps each `report_id` once). Wear follows single parts
//! and is not summarised here; build comparison is (a sketch per board, build, class and
//! figure, its rank test's ties a bucket's values).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use chrono::{DateTime, Utc};

use super::aggregate::{
    class_weights, date, factory_lines, metric_rank, name_and_limits, passing_stats, port_rows,
    ranked, ratio, yield_rows, Dimension, FleetOptions, FleetSummary, GroupSummary, Histogram,
    MetricSummary, ModelCurves, Outlier, ReasonCount, Signatures, TrendPoint, UnitKeys, CONFIGS,
    MAX_OUTLIERS,
};
use super::builds::BuildSketches;
use super::distinct::Distinct;
use super::extract::{FleetReason, RejectedFigure, UnitRecord, POWER_CUT_PHASE};
use super::sketch::Sketch;
use super::stats::{self, Norm, OUTLIER_Z};
use super::summary::{CurveTrace, FileIssue};
use usbperf_report::wire::Threshold;

/// The accuracy of every summary's sketches: 0.1 %. The norm's median absolute deviation is a
/// few % of a figure, so a bucket's width (0.2 %) moves a modified z-score by a few % of
/// itself; and a histogram's bin is about 1 % of a figure wide. A figure of a fleet spans
/// 20-40 %, about 200 buckets: 2-3 KB a sketch.
pub const SUMMARY_PPM: u32 = 1_000;
/// The accuracy of a trend point's median (1 %): a trend is read by eye, and its buckets
/// are what a query over years reads most of (520 weeks in ten years), so each bucket's
/// figures are kept in a few hundred bytes instead of the 2-3 KB at [`SUMMARY_PPM`].
pub const TREND_PPM: u32 = 10_000;
/// Refused figures kept as examples per day and board (all are counted).
const REJECTED_KEPT: usize = 16;
/// Refused figures a query lists.
const REJECTED_LISTED: usize = 1000;

/// The dimensions below the board a group can be keyed by: class, port, device model and
/// tool version.
pub type Slot = [String; 4];

/// One value at an end of a figure's range, and whose it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Extreme {
    pub value: f64,
    pub unit: String,
    pub device: String,
    pub file: PathBuf,
}

/// The most extreme values of distinct units at one end: ascending for the low end,
/// descending for the high end, at most [`MAX_OUTLIERS`], each unit once (its most extreme).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extremes {
    pub low: Vec<Extreme>,
    pub high: Vec<Extreme>,
}

impl Extremes {
    fn add(&mut self, e: &Extreme) {
        keep(&mut self.low, e, |a, b| {
            a.value
                .total_cmp(&b.value)
                .then_with(|| a.unit.cmp(&b.unit))
                .then_with(|| a.device.cmp(&b.device))
        });
        keep(&mut self.high, e, |a, b| {
            b.value
                .total_cmp(&a.value)
                .then_with(|| a.unit.cmp(&b.unit))
                .then_with(|| a.device.cmp(&b.device))
        });
    }

    fn merge(&mut self, other: &Extremes) {
        for e in other.low.iter().chain(&other.high) {
            self.add(e);
        }
    }
}

/// Puts `e` in `list` (ordered by `before`) unless its unit is there with a value as
/// extreme; keeps the first [`MAX_OUTLIERS`].
fn keep(
    list: &mut Vec<Extreme>,
    e: &Extreme,
    before: impl Fn(&Extreme, &Extreme) -> std::cmp::Ordering,
) {
    if list.len() >= MAX_OUTLIERS && list.last().is_some_and(|l| before(e, l).is_ge()) {
        return;
    }
    if let Some(i) = list.iter().position(|x| x.unit == e.unit) {
        if before(&list[i], e).is_le() {
            return;
        }
        list.remove(i);
    }
    let at = list.partition_point(|x| before(x, e).is_lt());
    list.insert(at, e.clone());
    list.truncate(MAX_OUTLIERS);
}

/// One figure of one group on one day.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricDay {
    pub values: Sketch,
    /// The same values at [`TREND_PPM`], what the trend's points are read from.
    pub trend: Sketch,
    /// Values whose own check passed.
    pub ok: u64,
    /// Every value at its weight in the norm.
    pub norm: Sketch,
    /// The passing devices' values at their weight among the passing figures.
    pub passing: Sketch,
    pub passing_tests: u64,
    pub extremes: Extremes,
}

impl MetricDay {
    fn new() -> MetricDay {
        let sketch = |ppm| Sketch::new(ppm).expect("a valid accuracy");
        MetricDay {
            values: sketch(SUMMARY_PPM),
            trend: sketch(TREND_PPM),
            ok: 0,
            norm: sketch(SUMMARY_PPM),
            passing: sketch(SUMMARY_PPM),
            passing_tests: 0,
            extremes: Extremes::default(),
        }
    }

    fn merge(&mut self, o: &MetricDay) {
        // Sketches of one accuracy, made here: a merge cannot fail.
        let _ = self.values.merge(&o.values);
        let _ = self.trend.merge(&o.trend);
        let _ = self.norm.merge(&o.norm);
        let _ = self.passing.merge(&o.passing);
        self.ok += o.ok;
        self.passing_tests += o.passing_tests;
        self.extremes.merge(&o.extremes);
    }
}

/// One group below the board on one day.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlotDay {
    /// Device tests of runs (a power-cut verdict's device is a figure, not a test).
    pub devices: u64,
    pub passed: u64,
    pub units: Distinct,
    /// Failure reasons: key -> (count, one verbatim instance).
    pub reasons: BTreeMap<String, (u64, String)>,
    pub metrics: BTreeMap<String, MetricDay>,
}

/// What one day's reports of one board add up to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BoardDay {
    pub reports: u64,
    pub signed: u64,
    /// Units whose latest run among the board's reports is on this day: (passed, failed),
    /// what a query of one board counts.
    pub latest_in_board: (i64, i64),
    /// Units whose latest run is on this day: (passed, failed). Moved by [`UnitBook`] when a
    /// unit's later run arrives, so a day's count can be negative until its runs are all in.
    pub latest: (i64, i64),
    /// (dimension, value) -> device tests, first-pass passes, passes after a retest,
    /// retested, marginal.
    pub yields: BTreeMap<(String, String), [u64; 5]>,
    /// USB port -> (device tests, link failures).
    pub ports: BTreeMap<String, (u64, u64)>,
    /// The distinct threshold configs and the units under each.
    pub configs: Vec<(Vec<Threshold>, Distinct)>,
    /// Write curves per device model, the first by report file name.
    pub curves: BTreeMap<String, Vec<CurveTrace>>,
    pub rejected: u64,
    pub rejected_kept: Vec<RejectedFigure>,
    pub slots: BTreeMap<Slot, SlotDay>,
    /// Every figure of the runs by build, class and metric, for `--compare-builds`.
    pub builds: BuildSketches,
}

impl BoardDay {
    /// Adds another summary of the same board and span (another batch of reports).
    pub fn merge(&mut self, o: &BoardDay, curves_per_model: usize) {
        self.reports += o.reports;
        self.signed += o.signed;
        self.latest.0 += o.latest.0;
        self.latest.1 += o.latest.1;
        self.latest_in_board.0 += o.latest_in_board.0;
        self.latest_in_board.1 += o.latest_in_board.1;
        for (k, v) in &o.yields {
            let e = self.yields.entry(k.clone()).or_default();
            for (a, b) in e.iter_mut().zip(v) {
                *a += b;
            }
        }
        for (k, v) in &o.ports {
            let e = self.ports.entry(k.clone()).or_default();
            e.0 += v.0;
            e.1 += v.1;
        }
        for (ts, units) in &o.configs {
            add_config(&mut self.configs, ts, units);
        }
        for (model, list) in &o.curves {
            let mine = self.curves.entry(model.clone()).or_default();
            for c in list {
                keep_curve(mine, c, curves_per_model);
            }
        }
        self.rejected += o.rejected;
        for r in &o.rejected_kept {
            keep_rejected(&mut self.rejected_kept, r, REJECTED_KEPT);
        }
        self.builds.merge(&o.builds);
        for (slot, sd) in &o.slots {
            let mine = self.slots.entry(slot.clone()).or_default();
            mine.devices += sd.devices;
            mine.passed += sd.passed;
            mine.units.merge(&sd.units);
            for (k, (n, ex)) in &sd.reasons {
                merge_reason(&mut mine.reasons, k, *n, ex);
            }
            for (m, md) in &sd.metrics {
                match mine.metrics.get_mut(m) {
                    Some(x) => x.merge(md),
                    None => {
                        mine.metrics.insert(m.clone(), md.clone());
                    }
                }
            }
        }
    }
}

/// A reason's count and its example: the example kept is the least by text, whichever
/// summary saw it first.
fn merge_reason(map: &mut BTreeMap<String, (u64, String)>, key: &str, n: u64, example: &str) {
    match map.get_mut(key) {
        Some(e) => {
            e.0 += n;
            if example < e.1.as_str() {
                e.1 = example.to_string();
            }
        }
        None => {
            map.insert(key.to_string(), (n, example.to_string()));
        }
    }
}

fn add_config(configs: &mut Vec<(Vec<Threshold>, Distinct)>, ts: &[Threshold], units: &Distinct) {
    let full = configs.len() >= CONFIGS;
    match configs.iter_mut().find(|c| c.0 == ts) {
        Some(c) => c.1.merge(units),
        None if !full => configs.push((ts.to_vec(), units.clone())),
        None => {}
    }
}

fn keep_curve(list: &mut Vec<CurveTrace>, c: &CurveTrace, keep: usize) {
    if keep == 0
        || list
            .iter()
            .any(|x| x.file == c.file && x.device == c.device)
    {
        return;
    }
    let at = list.partition_point(|x| (&x.file, &x.device) < (&c.file, &c.device));
    if at < keep {
        list.insert(at, c.clone());
        list.truncate(keep);
    }
}

/// Puts `r` in `list` (ordered by file, device and field, each once), keeping the first
/// `cap`.
fn keep_rejected(list: &mut Vec<RejectedFigure>, r: &RejectedFigure, cap: usize) {
    let key = |x: &RejectedFigure| (x.file.clone(), x.device.clone(), x.field.clone());
    let at = list.partition_point(|x| key(x) < key(r));
    if at < cap && list.get(at).map_or(true, |x| key(x) != key(r)) {
        list.insert(at, r.clone());
        list.truncate(cap);
    }
}

/// A unit's latest run, `was`, replaced by `now` unless `was` is later: the unit's count moves
/// from `was`'s day to `now`'s (among the board's own counts when `in_board`). Whether it was
/// replaced.
fn move_latest(
    days: &mut BTreeMap<(i32, String), BoardDay>,
    was: Option<&(DateTime<Utc>, i32, String, bool)>,
    now: &(DateTime<Utc>, i32, String, bool),
    in_board: bool,
) -> bool {
    if was.is_some_and(|w| w.0 > now.0) {
        return false;
    }
    let mut count = |d: i32, board: &str, pass: bool, by: i64| {
        let bd = days.entry((d, board.to_string())).or_default();
        let c = if in_board {
            &mut bd.latest_in_board
        } else {
            &mut bd.latest
        };
        if pass {
            c.0 += by;
        } else {
            c.1 += by;
        }
    };
    if let Some((_, d, board, pass)) = was {
        count(*d, board, *pass, -1);
    }
    count(now.1, &now.2, now.3, 1);
    true
}

/// The trend's part of a summary: per group and figure, its values at [`TREND_PPM`]. Stored
/// per day and week beside the summaries, so that a query over years reads each week's
/// trend (a few KB) and the summaries of whole quarters and years, not every week's
/// summary (up to a few MB each).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trend {
    pub slots: BTreeMap<Slot, BTreeMap<String, Sketch>>,
}

impl Trend {
    /// The trend of `bd`'s figures.
    pub fn of(bd: &BoardDay) -> Trend {
        Trend {
            slots: bd
                .slots
                .iter()
                .map(|(slot, sd)| {
                    let m = sd
                        .metrics
                        .iter()
                        .map(|(name, md)| (name.clone(), md.trend.clone()))
                        .collect();
                    (slot.clone(), m)
                })
                .collect(),
        }
    }
}

/// Each unit's latest run and its keys: the state a store keeps beside the summaries (one
/// row a unit), so that a unit counts once, under the day of its latest run.
#[derive(Debug, Clone, Default)]
pub struct UnitBook {
    units: HashMap<String, UnitState>,
}

/// One unit's entry in the [`UnitBook`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UnitState {
    /// The latest run: when, its day and board, and whether it passed.
    pub latest: Option<(DateTime<Utc>, i32, String, bool)>,
    /// The latest run among each board's reports (one board, unless a serial is reused or
    /// a unit moved to another board).
    pub by_board: Vec<(DateTime<Utc>, i32, String, bool)>,
    /// The keys its reports were signed with (their first 16 hex digits).
    pub keys: Vec<u64>,
}

impl UnitBook {
    /// Puts a unit's entry as a store read it, before reports of the unit are folded in.
    pub fn put(&mut self, unit: String, state: UnitState) {
        self.units.insert(unit, state);
    }

    pub fn get(&self, unit: &str) -> Option<&UnitState> {
        self.units.get(unit)
    }

    /// Every unit's entry, for a store to write back.
    pub fn entries(&self) -> impl Iterator<Item = (&String, &UnitState)> {
        self.units.iter()
    }

    pub fn len(&self) -> usize {
        self.units.len()
    }

    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }
}

/// The fleet as mergeable summaries per day and board.
#[derive(Debug, Clone, Default)]
pub struct Partial {
    pub days: BTreeMap<(i32, String), BoardDay>,
    /// Units whose reports carry more than one key, and how many.
    pub several_keys: BTreeMap<String, usize>,
    /// Write curves kept per device model (as `FleetOptions::curves_per_model`).
    pub curves_per_model: usize,
}

/// Which summaries a query merges.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// The first day (days since the epoch, UTC) whose summaries count.
    pub since_day: Option<i32>,
    pub board: Option<String>,
}

impl Partial {
    pub fn new(curves_per_model: usize) -> Partial {
        Partial {
            curves_per_model,
            ..Partial::default()
        }
    }

    /// Folds one report in. `file` names it (its outliers' and curves' link); `book` holds
    /// each unit's latest run, whichever summaries it is in.
    pub fn add(&mut self, r: UnitRecord, file: PathBuf, book: &mut UnitBook) {
        let day = stats::epoch_day(r.started_at);
        let run = r.phase != POWER_CUT_PHASE;
        let unit_state = book.units.entry(r.unit.clone()).or_default();
        if let Some(key) = &r.signer {
            let short = key
                .get(..16)
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .unwrap_or(0);
            if !unit_state.keys.contains(&short) {
                unit_state.keys.push(short);
                if unit_state.keys.len() > 1 {
                    self.several_keys
                        .insert(r.unit.clone(), unit_state.keys.len());
                }
            }
        }
        // A later run moves the unit's count from its former latest day to this one; a
        // retest replaces the earlier verdict (the later run wins a tie, as in the exact
        // fleet, which reads in name order). Kept twice: over all boards (a query of the
        // whole fleet counts a unit once), and within each board (a query of one board
        // counts the units of its reports).
        if run {
            let now = (r.started_at, day, r.board.clone(), r.pass);
            let i = unit_state.by_board.iter().position(|o| o.2 == r.board);
            let was = i.map(|i| unit_state.by_board[i].clone());
            if move_latest(&mut self.days, was.as_ref(), &now, true) {
                match i {
                    Some(i) => unit_state.by_board[i] = now.clone(),
                    None => unit_state.by_board.push(now.clone()),
                }
            }
            if move_latest(&mut self.days, unit_state.latest.as_ref(), &now, false) {
                unit_state.latest = Some(now);
            }
        }
        let keep_curves = self.curves_per_model;
        let bd = self.days.entry((day, r.board.clone())).or_default();
        bd.reports += 1;
        bd.signed += u64::from(r.signer.is_some());
        bd.rejected += r.rejected.len() as u64;
        for x in &r.rejected {
            keep_rejected(&mut bd.rejected_kept, x, REJECTED_KEPT);
        }
        let unit_hash = super::distinct::unit_hash(&r.unit);
        let mut one = Distinct::default();
        one.insert_hash(unit_hash);
        add_config(&mut bd.configs, &r.thresholds, &one);
        if run {
            bd.builds.report(&r.board, &r.build, r.started_at);
            for d in &r.devices {
                for (metric, v, _) in &d.values {
                    bd.builds
                        .add(&r.board, &r.build, &d.class, metric, *v, SUMMARY_PPM);
                }
            }
        }
        let weights = class_weights(&r.devices);
        for d in r.devices {
            let (w_all, w_pass) = weights(&d.class, d.pass);
            let slot: Slot = [
                d.class.clone(),
                d.port.clone(),
                d.model.clone(),
                r.tool_version.clone(),
            ];
            if run {
                for (dim, value) in [
                    ("board", r.board.as_str()),
                    ("station", r.station.as_str()),
                    ("port", d.port.as_str()),
                    ("device-class", d.class.as_str()),
                ] {
                    let e = bd
                        .yields
                        .entry((dim.to_string(), value.to_string()))
                        .or_default();
                    e[0] += 1;
                    e[1] += u64::from(d.pass && d.retests == 0);
                    e[2] += u64::from(d.pass && d.retests > 0);
                    e[3] += u64::from(d.retests > 0);
                    e[4] += u64::from(d.marginal);
                }
                if d.port.starts_with("usb:") {
                    let e = bd.ports.entry(d.port.clone()).or_default();
                    e.0 += 1;
                    e.1 += u64::from(d.reasons.iter().any(|x: &FleetReason| x.link));
                }
            }
            if let Some(c) = &d.curve {
                let trace = CurveTrace {
                    unit: r.unit.clone(),
                    device: d.label.clone(),
                    file: file.clone(),
                    samples: c.samples.iter().map(|s| (s.t_s, s.mib_per_s)).collect(),
                    knee: c
                        .knee
                        .map(|k| (k.t_s, k.before_mib_per_s, k.after_mib_per_s)),
                };
                keep_curve(
                    bd.curves.entry(d.model.clone()).or_default(),
                    &trace,
                    keep_curves,
                );
            }
            let sd = bd.slots.entry(slot).or_default();
            if run {
                sd.devices += 1;
                sd.passed += u64::from(d.pass);
                sd.units.insert_hash(unit_hash);
                for reason in &d.reasons {
                    merge_reason(&mut sd.reasons, &reason.key, 1, &reason.text);
                }
            }
            for (metric, v, ok) in d.values {
                if !v.is_finite() || v < 0.0 {
                    continue;
                }
                let md = sd.metrics.entry(metric).or_insert_with(MetricDay::new);
                // Finite and not negative: the sketches take it.
                let _ = md.values.insert(v);
                let _ = md.trend.insert(v);
                let _ = md.norm.insert_n(v, u64::from(w_all));
                md.ok += u64::from(ok);
                if w_pass > 0 {
                    let _ = md.passing.insert_n(v, u64::from(w_pass));
                    md.passing_tests += 1;
                }
                md.extremes.add(&Extreme {
                    value: v,
                    unit: r.unit.clone(),
                    device: d.label.clone(),
                    file: file.clone(),
                });
            }
        }
    }

    /// Adds another partial's summaries (another batch of reports, another collector's).
    pub fn merge(&mut self, o: &Partial) {
        for (k, bd) in &o.days {
            match self.days.get_mut(k) {
                Some(mine) => mine.merge(bd, self.curves_per_model),
                None => {
                    self.days.insert(k.clone(), bd.clone());
                }
            }
        }
        for (u, n) in &o.several_keys {
            let e = self.several_keys.entry(u.clone()).or_default();
            *e = (*e).max(*n);
        }
    }

    /// Boards with reports in the selection.
    pub fn boards(&self, sel: &Selection) -> Vec<String> {
        self.selected(sel)
            .filter(|(_, bd)| bd.reports > 0)
            .map(|((_, b), _)| b.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    fn selected<'a>(
        &'a self,
        sel: &'a Selection,
    ) -> impl Iterator<Item = (&'a (i32, String), &'a BoardDay)> + 'a {
        self.days.iter().filter(move |((d, b), _)| {
            sel.since_day.map_or(true, |s| *d >= s) && sel.board.as_ref().map_or(true, |x| x == b)
        })
    }

    /// The first and last day with figures among the selected summaries.
    pub fn span(&self, sel: &Selection) -> Option<(i32, i32)> {
        let mut days = self
            .selected(sel)
            .filter(|(_, bd)| !bd.slots.is_empty())
            .map(|((d, _), _)| *d);
        let first = days.next()?;
        Some(days.fold((first, first), |(lo, hi), d| (lo.min(d), hi.max(d))))
    }

    /// The fleet summary of the selected summaries, grouped as `opts` says. `files`,
    /// `errors` and `skipped` are the caller's (what it read or refused); `opts.wear` follows
    /// single parts, which summaries do not keep, and is left empty.
    pub fn finish(
        &self,
        sel: &Selection,
        opts: &FleetOptions,
        files: usize,
        errors: Vec<FileIssue>,
        skipped: Vec<FileIssue>,
    ) -> FleetSummary {
        let mut sum = Summarizer::new(opts, self.span(sel));
        for ((day, board), bd) in self.selected(sel) {
            sum.add(board, bd);
            sum.add_trend(*day, board, &Trend::of(bd));
        }
        sum.finish(files, errors, skipped, &self.several_keys)
    }
}

/// `m`'s figure among a group's, new if it has none yet.
fn metric_agg<'a>(metrics: &'a mut BTreeMap<String, MetricAgg>, m: &str) -> &'a mut MetricAgg {
    if !metrics.contains_key(m) {
        metrics.insert(
            m.to_string(),
            MetricAgg {
                all: MetricDay::new(),
                bucket: None,
                trend: Vec::new(),
            },
        );
    }
    metrics.get_mut(m).expect("inserted above")
}

/// One figure of one group, merged over the summaries read so far.
struct MetricAgg {
    all: MetricDay,
    /// The trend bucket being read, and its values so far.
    bucket: Option<(i32, Sketch)>,
    trend: Vec<TrendPoint>,
}

impl MetricAgg {
    fn close_bucket(&mut self, date: &dyn Fn(i32) -> String) {
        if let Some((start, s)) = self.bucket.take() {
            self.trend.push(TrendPoint {
                start: date(start),
                count: s.count() as usize,
                median: s.percentile(50.0).unwrap_or(f64::NAN),
            });
        }
    }
}

#[derive(Default)]
struct GroupAgg {
    units: Distinct,
    devices: u64,
    passed: u64,
    classes: BTreeSet<String>,
    reasons: BTreeMap<String, (u64, String)>,
    metrics: BTreeMap<String, MetricAgg>,
}

/// Merges summaries, read in order of their first day, into a fleet summary: the groups'
/// merged figures, and each trend bucket's median once its summaries are read, so that
/// memory holds one bucket of values per figure however many days are read.
pub struct Summarizer<'o> {
    opts: &'o FleetOptions,
    span: Option<(i32, i32)>,
    bucket_days: i32,
    groups: BTreeMap<Vec<String>, GroupAgg>,
    boards: BTreeSet<String>,
    reports: u64,
    signed: u64,
    latest: (i64, i64),
    yields: BTreeMap<(String, String), [u64; 5]>,
    ports: BTreeMap<String, (u64, u64)>,
    configs: Vec<(Vec<Threshold>, Distinct)>,
    curves: BTreeMap<String, Vec<CurveTrace>>,
    rejected: Vec<RejectedFigure>,
    /// Summaries of one board are read: a unit counts by its latest run of that board.
    one_board: bool,
    /// Every figure by build, when builds are compared.
    builds: Option<BuildSketches>,
}

impl<'o> Summarizer<'o> {
    /// `span`: the first and last day with figures among the summaries to be read (which
    /// sets the trend's bucket, daily up to 62 days, weekly beyond, as the exact fleet's).
    pub fn new(opts: &'o FleetOptions, span: Option<(i32, i32)>) -> Summarizer<'o> {
        let days = span.map_or(0, |(a, b)| i64::from(b) - i64::from(a));
        Summarizer {
            one_board: opts.load.board.is_some(),
            builds: opts.compare_builds.then(BuildSketches::default),
            opts,
            span,
            bucket_days: if days <= 62 { 1 } else { 7 },
            groups: BTreeMap::new(),
            boards: BTreeSet::new(),
            reports: 0,
            signed: 0,
            latest: (0, 0),
            yields: BTreeMap::new(),
            ports: BTreeMap::new(),
            configs: Vec::new(),
            curves: BTreeMap::new(),
            rejected: Vec::new(),
        }
    }

    /// The trend's bucket in days (1 or 7): the span of summaries a store may give as one.
    pub fn bucket_days(&self) -> i32 {
        self.bucket_days
    }

    /// Boards with reports among the summaries read.
    pub fn boards(&self) -> Vec<String> {
        self.boards.iter().cloned().collect()
    }

    /// Reports among the summaries read.
    pub fn reports(&self) -> u64 {
        self.reports
    }

    /// Adds a summary of `board` (of a day, a week, a quarter or a year, in any order): all
    /// but the trend, which [`Summarizer::add_trend`] reads.
    pub fn add(&mut self, board: &str, bd: &BoardDay) {
        if bd.reports > 0 {
            self.boards.insert(board.to_string());
        }
        self.reports += bd.reports;
        self.signed += bd.signed;
        let latest = if self.one_board {
            bd.latest_in_board
        } else {
            bd.latest
        };
        self.latest.0 += latest.0;
        self.latest.1 += latest.1;
        for (k, v) in &bd.yields {
            let e = self.yields.entry(k.clone()).or_default();
            for (a, b) in e.iter_mut().zip(v) {
                *a += b;
            }
        }
        for (k, v) in &bd.ports {
            let e = self.ports.entry(k.clone()).or_default();
            e.0 += v.0;
            e.1 += v.1;
        }
        for (ts, u) in &bd.configs {
            add_config(&mut self.configs, ts, u);
        }
        for (model, list) in &bd.curves {
            let mine = self.curves.entry(model.clone()).or_default();
            for c in list {
                keep_curve(mine, c, self.opts.curves_per_model);
            }
        }
        for r in &bd.rejected_kept {
            keep_rejected(&mut self.rejected, r, REJECTED_LISTED);
        }
        if let Some(b) = &mut self.builds {
            b.merge(&bd.builds);
        }
        for (slot, sd) in &bd.slots {
            let g = self.groups.entry(self.key(board, slot)).or_default();
            g.units.merge(&sd.units);
            g.devices += sd.devices;
            g.passed += sd.passed;
            if !g.classes.contains(&slot[0]) {
                g.classes.insert(slot[0].clone());
            }
            for (k, (n, ex)) in &sd.reasons {
                merge_reason(&mut g.reasons, k, *n, ex);
            }
            for (m, md) in &sd.metrics {
                metric_agg(&mut g.metrics, m).all.merge(md);
            }
        }
    }

    /// Adds the trend of `board` from `start` (a day, or the first day of a trend bucket it
    /// covers whole); called in order of `start`.
    pub fn add_trend(&mut self, start: i32, board: &str, t: &Trend) {
        let bucket = stats::bucket_start(start, self.bucket_days);
        for (slot, figures) in &t.slots {
            let key = self.key(board, slot);
            let g = self.groups.entry(key).or_default();
            for (m, values) in figures {
                let agg = metric_agg(&mut g.metrics, m);
                if agg.bucket.as_ref().is_some_and(|b| b.0 != bucket) {
                    agg.close_bucket(&date);
                }
                let (_, s) = agg.bucket.get_or_insert_with(|| {
                    (bucket, Sketch::new(TREND_PPM).expect("a valid accuracy"))
                });
                let _ = s.merge(values);
            }
        }
    }

    /// The group a slot of `board` falls in.
    fn key(&self, board: &str, slot: &Slot) -> Vec<String> {
        self.opts
            .group_by
            .iter()
            .map(|dim| match dim {
                Dimension::Board => board.to_string(),
                Dimension::DeviceClass => slot[0].clone(),
                Dimension::Port => slot[1].clone(),
                Dimension::DeviceModel => slot[2].clone(),
                Dimension::ToolVersion => slot[3].clone(),
            })
            .collect()
    }

    /// The fleet summary; `several_keys` the units whose reports carry more than one key.
    pub fn finish(
        self,
        files: usize,
        errors: Vec<FileIssue>,
        skipped: Vec<FileIssue>,
        several_keys: &BTreeMap<String, usize>,
    ) -> FleetSummary {
        let opts = self.opts;
        let thresholds = factory_lines(&self.configs);
        let mut fleet_reasons: BTreeMap<String, (u64, String)> = BTreeMap::new();
        let mut passed_devices = 0u64;
        let mut devices = 0u64;
        let mut out_groups: Vec<GroupSummary> = Vec::new();
        for (key, g) in self.groups {
            devices += g.devices;
            passed_devices += g.passed;
            for (k, (n, ex)) in &g.reasons {
                merge_reason(&mut fleet_reasons, k, *n, ex);
            }
            let mut metrics: Vec<MetricSummary> = g
                .metrics
                .into_iter()
                .map(|(metric, mut agg)| {
                    agg.close_bucket(&date);
                    summarise(metric, agg.all, agg.trend)
                })
                .collect();
            metrics.sort_by_key(|m| metric_rank(&m.metric));
            let name = name_and_limits(&opts.group_by, &key, &g.classes, &thresholds, &mut metrics);
            out_groups.push(GroupSummary {
                name,
                key,
                units: g.units.count() as usize,
                devices: g.devices as usize,
                device_pass_rate: ratio(g.passed as usize, g.devices as usize),
                classes: g.classes.into_iter().collect(),
                failure_reasons: ranked_u64(g.reasons),
                metrics,
            });
        }
        let link_failures_by_port =
            port_rows(self.ports.into_iter().map(|(p, (n, fail))| (p, n, fail)));
        let (units_passed, units_failed) = (self.latest.0.max(0), self.latest.1.max(0));
        let units = (units_passed + units_failed) as usize;
        let with_devices = devices > 0 && self.span.is_some();
        let (first, last) = self.span.unwrap_or((0, 0));
        FleetSummary {
            files,
            reports: self.reports as usize,
            units,
            unit_pass_rate: ratio(units_passed as usize, units),
            devices: devices as usize,
            device_pass_rate: ratio(passed_devices as usize, devices as usize),
            group_by: opts.group_by.clone(),
            first_day: with_devices.then(|| date(first)),
            last_day: with_devices.then(|| date(last)),
            trend_bucket: if self.bucket_days == 1 {
                "daily"
            } else {
                "weekly"
            }
            .into(),
            failure_reasons: ranked_u64(fleet_reasons),
            link_failures_by_port,
            yields: yield_rows(self.yields.into_iter().map(|((d, v), c)| (d, v, c))),
            groups: out_groups,
            builds: self.builds.map(|b| b.compare()).unwrap_or_default(),
            wear: None,
            factory_thresholds: thresholds,
            write_curves: self
                .curves
                .into_iter()
                .map(|(model, curves)| ModelCurves { model, curves })
                .collect(),
            errors,
            skipped,
            duplicates: Vec::new(),
            rejected_figures: self.rejected,
            signatures: Signatures {
                signed: self.signed as usize,
                unsigned: (self.reports - self.signed) as usize,
                several_keys: several_keys
                    .iter()
                    .map(|(u, n)| UnitKeys {
                        unit: u.clone(),
                        keys: *n,
                    })
                    .collect(),
            },
        }
    }
}

fn ranked_u64(map: BTreeMap<String, (u64, String)>) -> Vec<ReasonCount> {
    ranked(
        map.into_iter()
            .map(|(k, (n, ex))| (k, (n.min(u64::from(u32::MAX)) as u32, ex)))
            .collect(),
    )
}

/// One figure of one group from its merged summaries, read as the exact fleet reads its
/// values.
fn summarise(metric: String, m: MetricDay, trend: Vec<TrendPoint>) -> MetricSummary {
    let p = |q: f64| m.values.percentile(q).unwrap_or(f64::NAN);
    let values = m.values.pairs();
    let norm = Norm::of(&m.norm.pairs());
    let (outliers_total, outliers) = match norm {
        Some(norm) => {
            let total: u64 = values
                .iter()
                .filter(|(v, _)| norm.z(*v).abs() > OUTLIER_Z)
                .map(|p| p.1)
                .sum();
            let mut flagged: Vec<Outlier> = m
                .extremes
                .low
                .iter()
                .chain(&m.extremes.high)
                .map(|e| (e, norm.z(e.value)))
                .filter(|(_, z)| z.abs() > OUTLIER_Z)
                .map(|(e, z)| Outlier {
                    unit: e.unit.clone(),
                    device: e.device.clone(),
                    file: e.file.clone(),
                    value: e.value,
                    median: norm.median,
                    modified_z: z,
                })
                .collect();
            flagged.sort_by(|a, b| {
                b.modified_z
                    .abs()
                    .total_cmp(&a.modified_z.abs())
                    .then_with(|| a.unit.cmp(&b.unit))
                    .then_with(|| a.device.cmp(&b.device))
            });
            let mut listed = BTreeSet::new();
            flagged.retain(|o| listed.len() < MAX_OUTLIERS && listed.insert(o.unit.clone()));
            (total as usize, flagged)
        }
        None => (0, Vec::new()),
    };
    MetricSummary {
        count: m.values.count() as usize,
        pass_rate: ratio(m.ok as usize, m.values.count() as usize),
        min: p(0.0),
        p5: p(5.0),
        median: p(50.0),
        p95: p(95.0),
        max: p(100.0),
        passing: passing_stats(m.passing_tests as usize, m.passing.pairs()),
        outliers_total,
        outliers,
        trend,
        histogram: Histogram::of_pairs(values.iter().copied(), 30),
        metric,
        limits: Vec::new(),
    }
}
