//! Owns the fleet's aggregation: records folded into per-(group, metric) value vectors as
//! they arrive (plus failure counts, link failures per port, a bounded set of write curves),
//! then summarised: count, pass rate, percentiles, robust outliers naming unit and device,
//! ranked failure reasons and trends by production date.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasher, Hash, Hasher};
use std::path::PathBuf;

use super::distinct::Distinct;
#[cfg(test)]
use super::extract::WORKLOAD_METRICS;
use super::extract::{
    DeviceRecord, FleetReason, RejectedFigure, UnitRecord, CAPACITY_METRIC, LINK_METRIC,
};
use super::load::{self, LoadOptions, Outcome, Skip};
use super::parallel::parallel_map;
use super::stats::{self, Norm, OUTLIER_Z};
pub use super::summary::*;
use super::FleetError;
use usbperf_report::metric;
use usbperf_report::wire::Threshold;

/// How to aggregate.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    pub group_by: Vec<Dimension>,
    pub load: LoadOptions,
    /// Write curves kept per device model for the chart (the first files in path order).
    pub curves_per_model: usize,
    /// Compare each image build with the one before it (`--compare-builds`): keeps every
    /// figure once more, by board, build and class.
    pub compare_builds: bool,
    /// Follow each flash part's wear across reports (`--wear`).
    pub wear: bool,
}

impl Default for FleetOptions {
    fn default() -> Self {
        FleetOptions {
            group_by: vec![Dimension::Board, Dimension::DeviceClass],
            load: LoadOptions::default(),
            curves_per_model: 12,
            compare_builds: false,
            wear: false,
        }
    }
}

/// One device test of one report, as outliers name it.
#[derive(Debug, Clone)]
struct DevRef {
    unit: u32,
    label: String,
    file: u32,
    day: i32,
    pass: bool,
    /// A device test of a run (factory or field); false for a power-cut verdict's device,
    /// whose figure is kept beside the runs' and never counted as a device test.
    tested: bool,
}

#[derive(Debug, Default)]
struct Series {
    values: Vec<f64>,
    devs: Vec<u32>,
    ok: Vec<bool>,
    /// Each value's weight in the norm, and in the passing figures (0 for a device that
    /// failed): see [`stats::device_weight`].
    weights: Vec<(u32, u32)>,
}

#[derive(Debug, Default)]
struct GroupAcc {
    units: BTreeSet<u32>,
    devices: u32,
    passed: u32,
    classes: BTreeSet<String>,
    /// By metric, in order of first sight; found through `series_ids`, or through `order`
    /// first: the series of the n-th value of the group's last device, since devices of a
    /// group list their metrics in the same order, and comparing a name is cheaper than
    /// hashing it (millions of values over a large fleet).
    series: Vec<(String, Series)>,
    series_ids: HashMap<String, u32>,
    order: Vec<u32>,
    reasons: HashMap<String, (u32, String)>,
}

fn skip_kind(s: &Skip) -> &'static str {
    match s {
        Skip::NotRegular { .. } => "not-regular",
        Skip::Unfinished { .. } => "unfinished",
        Skip::BeforeSince { .. } => "before-since",
        Skip::OtherBoard { .. } => "other-board",
        Skip::PowerCutVerdict => "power-cut-verdict",
    }
}

/// Distinct threshold configs counted (a fleet runs a handful; more are left out).
pub(crate) const CONFIGS: usize = 64;

/// The units under a config, as the factory's lines count them: a set (the exact fleet) or
/// a count that merges across days ([`Distinct`], the summarised fleet).
pub(crate) trait UnitSet: Clone {
    fn union(&mut self, other: &Self);
    fn size(&self) -> usize;
}

impl UnitSet for BTreeSet<u32> {
    fn union(&mut self, other: &Self) {
        self.extend(other.iter().copied());
    }
    fn size(&self) -> usize {
        self.len()
    }
}

impl UnitSet for Distinct {
    fn union(&mut self, other: &Self) {
        self.merge(other);
    }
    fn size(&self) -> usize {
        self.count() as usize
    }
}

/// The factory limits a chart draws, from the configs the reports ran under and the units
/// under each: for each class, figure and bound, the value carried by the most units (a
/// tie keeps each). A config one unit brings (a report written by hand to move the page)
/// never replaces the one the line's units ran under.
pub(crate) fn factory_lines<U: UnitSet>(configs: &[(Vec<Threshold>, U)]) -> Vec<FactoryThreshold> {
    let mut carried: Vec<(FactoryThreshold, U)> = Vec::new();
    for (ts, units) in configs {
        for t in ts {
            if t.select.port.is_some() {
                // Port-specific limits do not belong on a class-wide chart.
                continue;
            }
            let class = if t.select.all_non_system {
                None
            } else {
                match &t.select.class {
                    Some(c) => Some(c.clone()),
                    None => continue,
                }
            };
            for (m, value) in t.limits() {
                let bound = match m.better {
                    metric::Better::Higher => "min",
                    metric::Better::Lower => "max",
                };
                // A device's figure (the link) stands alone; a test's is named by workload.
                let metric = match &t.workload {
                    _ if m.workloads.is_empty() => m.id.to_string(),
                    Some(w) => format!("{w}.{}", m.id),
                    None => continue,
                };
                let ft = FactoryThreshold {
                    class: class.clone(),
                    metric,
                    bound: bound.into(),
                    value,
                    units: 0,
                };
                match carried.iter_mut().find(|c| c.0 == ft) {
                    Some(c) => c.1.union(units),
                    None => carried.push((ft, units.clone())),
                }
            }
        }
    }
    let same = |a: &FactoryThreshold, b: &FactoryThreshold| {
        (&a.class, &a.metric, &a.bound) == (&b.class, &b.metric, &b.bound)
    };
    let mut lines: Vec<FactoryThreshold> = carried
        .iter()
        .filter(|(t, units)| {
            carried
                .iter()
                .filter(|(o, _)| same(o, t))
                .all(|(_, o)| o.size() <= units.size())
        })
        .map(|(t, units)| FactoryThreshold {
            units: units.size(),
            ..t.clone()
        })
        .collect();
    lines.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    lines
}

/// Folds records; `finish` summarises.
pub struct Accumulator {
    opts: FleetOptions,
    files: Vec<PathBuf>,
    /// Groups by key, found through `group_ids` (key hash -> indexes) from the record's
    /// borrowed fields: see [`Accumulator::group_index`].
    groups: Vec<(Vec<String>, GroupAcc)>,
    group_ids: HashMap<u64, Vec<u32>>,
    group_hasher: RandomState,
    /// The distinct threshold configs of the reports, each with the units that ran under
    /// it: the factory's lines are the ones most units carry (see [`factory_lines`]).
    configs: Vec<(Vec<Threshold>, BTreeSet<u32>)>,
    unit_ids: HashMap<String, u32>,
    unit_names: Vec<String>,
    /// Per unit: did its latest report (by start time) pass.
    /// Each unit's latest run verdict; `None` for a unit seen only in power-cut reports.
    unit_latest: Vec<Option<(chrono::DateTime<chrono::Utc>, bool)>>,
    devs: Vec<DevRef>,
    reports: u32,
    boards: BTreeSet<String>,
    reasons: HashMap<String, (u32, String)>,
    ports: BTreeMap<String, (u32, u32)>,
    /// (dimension, value) -> device tests, first-pass passes, passes after a retest, retested,
    /// marginal.
    yields: BTreeMap<(&'static str, String), [u32; 5]>,
    curves: BTreeMap<String, Vec<(u32, CurveTrace)>>,
    errors: Vec<FileIssue>,
    skipped: Vec<FileIssue>,
    /// Report identity -> the file index that counts for it.
    seen: HashMap<String, u32>,
    duplicates: Vec<Duplicate>,
    rejected: Vec<RejectedFigure>,
    /// Boards of the reports `--since` / `--board` left out, for the "nothing matched" hint.
    filtered_boards: BTreeMap<String, usize>,
    /// The latest start among reports `--since` left out.
    latest_before_since: Option<chrono::DateTime<chrono::Utc>>,
    /// Entries with a report's name that were not regular files (also in `skipped`).
    not_regular: usize,
    /// Every figure by board, build and class, when builds are compared.
    builds: Option<super::builds::BuildValues>,
    /// Every reading of every flash part, when wear is followed.
    wear: Option<super::wear::WearValues>,
    /// Reports counted whose signature holds.
    signed: u32,
    /// Per unit, the keys its counted reports were signed with, each by its first 16 hex
    /// digits (a unit has one; 8 bytes a unit, not 64 characters, over millions of units).
    unit_keys: HashMap<u32, Vec<u64>>,
}

fn bump(map: &mut HashMap<String, (u32, String)>, reason: &FleetReason) {
    // Look before cloning: the key and text are only copied for a reason not seen yet.
    match map.get_mut(&reason.key) {
        Some(e) => e.0 += 1,
        None => {
            map.insert(reason.key.clone(), (1, reason.text.clone()));
        }
    }
}

impl Accumulator {
    pub fn new(opts: FleetOptions, files: Vec<PathBuf>) -> Accumulator {
        // A report (and mostly a unit) per file: sized once, not grown (and rehashed) as
        // they arrive.
        let n = files.len();
        let opts_compare = opts.compare_builds;
        let opts_wear = opts.wear;
        Accumulator {
            opts,
            files,
            groups: Vec::new(),
            group_ids: HashMap::new(),
            group_hasher: RandomState::new(),
            configs: Vec::new(),
            unit_ids: HashMap::with_capacity(n),
            unit_names: Vec::with_capacity(n),
            unit_latest: Vec::with_capacity(n),
            devs: Vec::new(),
            reports: 0,
            boards: BTreeSet::new(),
            reasons: HashMap::new(),
            ports: BTreeMap::new(),
            yields: BTreeMap::new(),
            curves: BTreeMap::new(),
            errors: Vec::new(),
            skipped: Vec::new(),
            seen: HashMap::with_capacity(n),
            duplicates: Vec::new(),
            rejected: Vec::new(),
            filtered_boards: BTreeMap::new(),
            latest_before_since: None,
            not_regular: 0,
            builds: opts_compare.then(super::builds::BuildValues::default),
            signed: 0,
            unit_keys: HashMap::new(),
            wear: opts_wear.then(super::wear::WearValues::default),
        }
    }

    /// Folds one file's outcome in. Records must arrive in path order (as [`load::load`]
    /// delivers them) for "the first copy counts" to mean the first by name.
    pub fn add_outcome(&mut self, o: Outcome) {
        match o {
            Outcome::Record(r) => self.add(*r),
            Outcome::Skipped { path, why } => {
                match &why {
                    Skip::NotRegular { .. } => self.not_regular += 1,
                    Skip::Unfinished { .. } | Skip::PowerCutVerdict => {}
                    Skip::BeforeSince { started_at, board } => {
                        *self.filtered_boards.entry(board.clone()).or_default() += 1;
                        if self.latest_before_since.map_or(true, |t| t < *started_at) {
                            self.latest_before_since = Some(*started_at);
                        }
                    }
                    Skip::OtherBoard { board } => {
                        *self.filtered_boards.entry(board.clone()).or_default() += 1
                    }
                }
                self.skipped.push(FileIssue {
                    file: path,
                    issue: why.to_string(),
                    kind: skip_kind(&why),
                })
            }
            Outcome::Error(e) => {
                let file = match &e {
                    FleetError::Read { path, .. }
                    | FleetError::Malformed { path, .. }
                    | FleetError::SchemaTooNew { path, .. }
                    | FleetError::NotRegular { path, .. }
                    | FleetError::TooLarge { path, .. }
                    | FleetError::Unsealed { path, .. } => path.clone(),
                    _ => PathBuf::new(),
                };
                let kind = match e {
                    FleetError::Unsealed { .. } => "signature",
                    _ => "unreadable",
                };
                self.errors.push(FileIssue {
                    file,
                    issue: e.to_string(),
                    kind,
                })
            }
        }
    }

    /// Notes the entries [`load::collect_paths`] left out unopened.
    pub fn add_unopened(&mut self, skipped: Vec<(PathBuf, Skip)>) {
        for (path, why) in skipped {
            self.add_outcome(Outcome::Skipped { path, why });
        }
    }

    /// When no report was aggregated: why, as the error the CLI exits with. A filter that
    /// left out every readable report is the command line's fault
    /// ([`FleetError::FilterMatchedNothing`]); no readable report at all is the directory's
    /// ([`FleetError::NothingUsable`]). `None` when something was aggregated.
    pub fn nothing_matched(&self) -> Option<FleetError> {
        if self.reports > 0 {
            return None;
        }
        let filtered: usize = self.filtered_boards.values().sum();
        let files = self.files.len() + self.not_regular;
        if filtered > 0 {
            let boards = self
                .filtered_boards
                .iter()
                .map(|(b, n)| format!("{b:?} ({n})"))
                .collect::<Vec<_>>()
                .join(", ");
            let mut why = Vec::new();
            if let Some(b) = &self.opts.load.board {
                why.push(format!(
                    "--board {b:?} matched none of them; the boards in them (reports): {boards}"
                ));
            }
            if let (Some(since), Some(latest)) = (self.opts.load.since, self.latest_before_since) {
                why.push(format!(
                    "--since {} left out those started before it (the latest started {latest})",
                    since.format("%Y-%m-%d %H:%M:%S UTC")
                ));
            }
            let hint = if self.opts.load.board.is_some() {
                " (--board takes the board exactly as listed)"
            } else {
                ""
            };
            return Some(FleetError::FilterMatchedNothing(format!(
                "no report matched: {filtered} readable report files, {}; check the filter{hint}",
                why.join("; ")
            )));
        }
        let unfinished = self
            .skipped
            .iter()
            .filter(|s| s.kind == "unfinished")
            .count();
        let mut reasons: Vec<String> = self
            .errors
            .iter()
            .chain(self.skipped.iter().filter(|s| s.kind != "unfinished"))
            .take(3)
            .map(|e| e.issue.clone())
            .collect();
        if unfinished > 0 && reasons.len() < 3 {
            reasons.extend(
                self.skipped
                    .iter()
                    .filter(|s| s.kind == "unfinished")
                    .take(3 - reasons.len())
                    .map(|s| format!("{}: {}", s.file.display(), s.issue)),
            );
        }
        Some(FleetError::NothingUsable(format!(
            "no usable report: {files} report files, {} unreadable, {} not regular files, \
             {unfinished} unfinished runs; first reasons: {}",
            self.errors.len(),
            self.not_regular,
            reasons.join(" | ")
        )))
    }

    /// Folds one record in; a copy of a report already folded in (same identity) is only
    /// noted.
    pub fn add(&mut self, mut r: UnitRecord) {
        if !r.identity.is_empty() {
            if let Some(&kept) = self.seen.get(&r.identity) {
                let name = |i: u32| self.files.get(i as usize).cloned().unwrap_or_default();
                self.duplicates.push(Duplicate {
                    file: name(r.file),
                    kept: name(kept),
                    identity: std::mem::take(&mut r.identity),
                });
                return;
            }
            self.seen.insert(std::mem::take(&mut r.identity), r.file);
        }
        self.rejected.append(&mut r.rejected);
        self.reports += 1;
        // Before the unit's name moves into the unit table below.
        if let Some(w) = &mut self.wear {
            w.add(&r);
        }
        // Look before cloning: 100,000 records of a handful of boards, units and ports
        // would otherwise allocate a key each time (the fleet from a database).
        if !self.boards.contains(&r.board) {
            self.boards.insert(r.board.clone());
        }
        let next_id = self.unit_names.len() as u32;
        let unit = match self.unit_ids.get(&r.unit) {
            Some(&u) => u,
            None => {
                self.unit_ids.insert(r.unit.clone(), next_id);
                next_id
            }
        };
        if let Some(key) = &r.signer {
            self.signed += 1;
            let short = key
                .get(..16)
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .unwrap_or(0);
            let keys = self.unit_keys.entry(unit).or_default();
            if !keys.contains(&short) {
                keys.push(short);
            }
        }
        // Configs repeat across a fleet: a handful of distinct ones, each with its units.
        let full = self.configs.len() >= CONFIGS;
        match self.configs.iter_mut().find(|c| c.0 == r.thresholds) {
            Some(c) => {
                c.1.insert(unit);
            }
            None if !full => {
                self.configs
                    .push((std::mem::take(&mut r.thresholds), BTreeSet::from([unit])));
            }
            None => {}
        }
        // A power-cut verdict is no run of the unit: its figure joins the fleet's, its verdict
        // replaces no run's, and its device is no device test of the yields.
        let run = r.phase != super::extract::POWER_CUT_PHASE;
        if unit == next_id {
            self.unit_names.push(std::mem::take(&mut r.unit));
            self.unit_latest.push(None);
        }
        match &mut self.unit_latest[unit as usize] {
            _ if !run => {}
            Some((t, _)) if *t > r.started_at => {}
            // A retest replaces the unit's earlier verdict.
            latest => *latest = Some((r.started_at, r.pass)),
        }
        if let Some(b) = self.builds.as_mut().filter(|_| run) {
            b.report(&r.board, &r.build, r.started_at);
            for d in &r.devices {
                for (metric, v, _) in &d.values {
                    b.add(&r.board, &r.build, &d.class, metric, *v);
                }
            }
        }
        let day = stats::epoch_day(r.started_at);
        let weights = class_weights(&r.devices);
        for mut d in r.devices {
            let w = weights(&d.class, d.pass);
            let dev = self.devs.len() as u32;
            let gi = self.group_index(|dim| match dim {
                Dimension::Board => &r.board,
                Dimension::DeviceClass => &d.class,
                Dimension::Port => &d.port,
                Dimension::DeviceModel => &d.model,
                Dimension::ToolVersion => &r.tool_version,
            });
            self.devs.push(DevRef {
                unit,
                label: std::mem::take(&mut d.label),
                file: r.file,
                day,
                pass: d.pass,
                tested: run,
            });
            if run {
                let g = &mut self.groups[gi].1;
                g.units.insert(unit);
                g.devices += 1;
                g.passed += u32::from(d.pass);
                self.count_test(gi, &r.board, &r.station, &d);
            }
            let g = &mut self.groups[gi].1;
            if !g.classes.contains(&d.class) {
                g.classes.insert(d.class.clone());
            }
            for (n, (metric, v, ok)) in d.values.into_iter().enumerate() {
                if !v.is_finite() {
                    continue;
                }
                let i = match g.order.get(n) {
                    Some(&i) if g.series[i as usize].0 == metric => i,
                    _ => {
                        let i = match g.series_ids.get(&metric) {
                            Some(&i) => i,
                            None => {
                                let i = g.series.len() as u32;
                                g.series_ids.insert(metric.clone(), i);
                                g.series.push((metric, Series::default()));
                                i
                            }
                        };
                        match g.order.get_mut(n) {
                            Some(o) => *o = i,
                            None => g.order.push(i),
                        }
                        i
                    }
                };
                let s = &mut g.series[i as usize].1;
                s.values.push(v);
                s.devs.push(dev);
                s.ok.push(ok);
                s.weights.push(w);
            }
            if let Some(c) = d.curve {
                let keep = self.opts.curves_per_model;
                let list = self.curves.entry(d.model.clone()).or_default();
                let full = list.len() >= keep;
                if keep > 0 && (!full || list.last().is_some_and(|l| l.0 > r.file)) {
                    let trace = CurveTrace {
                        unit: self.unit_names[unit as usize].clone(),
                        device: self.devs[dev as usize].label.clone(),
                        file: self.files.get(r.file as usize).cloned().unwrap_or_default(),
                        samples: c.samples.iter().map(|s| (s.t_s, s.mib_per_s)).collect(),
                        knee: c
                            .knee
                            .map(|k| (k.t_s, k.before_mib_per_s, k.after_mib_per_s)),
                    };
                    let at = list.partition_point(|l| l.0 < r.file);
                    list.insert(at, (r.file, trace));
                    list.truncate(keep);
                }
            }
        }
    }

    /// Counts one device test of a run: its group's and the fleet's failure reasons, the
    /// yields by board, station, port and class, and a USB port's link failures.
    fn count_test(&mut self, gi: usize, board: &str, station: &str, d: &DeviceRecord) {
        let g = &mut self.groups[gi].1;
        for reason in &d.reasons {
            bump(&mut g.reasons, reason);
            bump(&mut self.reasons, reason);
        }
        for key in [
            ("board", board),
            ("station", station),
            ("port", d.port.as_str()),
            ("device-class", d.class.as_str()),
        ] {
            let e = match self.yields.get_mut(&(key.0, key.1.to_string())) {
                Some(e) => e,
                None => self.yields.entry((key.0, key.1.to_string())).or_default(),
            };
            e[0] += 1;
            e[1] += u32::from(d.pass && d.retests == 0);
            e[2] += u32::from(d.pass && d.retests > 0);
            e[3] += u32::from(d.retests > 0);
            e[4] += u32::from(d.marginal);
        }
        if d.port.starts_with("usb:") {
            let link_fail = d.reasons.iter().any(|r| r.link);
            let e = match self.ports.get_mut(&d.port) {
                Some(e) => e,
                None => self.ports.entry(d.port.clone()).or_insert((0, 0)),
            };
            e.0 += 1;
            e.1 += u32::from(link_fail);
        }
    }

    /// The index in `groups` of the group whose key is `part` of each dimension, made if
    /// new. Found by the borrowed parts: a key cloned for each device test was hundreds of
    /// thousands of allocations over a large fleet.
    fn group_index<'a>(&mut self, part: impl Fn(Dimension) -> &'a str) -> usize {
        let dims = &self.opts.group_by;
        let mut h = self.group_hasher.build_hasher();
        for &dim in dims {
            part(dim).hash(&mut h);
        }
        let bucket = self.group_ids.entry(h.finish()).or_default();
        let groups = &mut self.groups;
        let same = |i: &&u32| {
            let key = &groups[**i as usize].0;
            dims.iter().zip(key).all(|(&dim, v)| part(dim) == v)
        };
        if let Some(&i) = bucket.iter().find(same) {
            return i as usize;
        }
        bucket.push(groups.len() as u32);
        let key = dims.iter().map(|&dim| part(dim).to_string()).collect();
        groups.push((key, GroupAcc::default()));
        groups.len() - 1
    }

    /// Boards seen, for `--suggest-thresholds`' one-board rule.
    pub fn boards(&self) -> Vec<String> {
        self.boards.iter().cloned().collect()
    }

    /// Summarises everything folded in.
    pub fn finish(self) -> FleetSummary {
        let (min_day, max_day) = self.devs.iter().fold((i32::MAX, i32::MIN), |(lo, hi), d| {
            (lo.min(d.day), hi.max(d.day))
        });
        // Daily medians up to two months, weekly beyond: a readable number of points. With
        // no devices the fold's start values remain, whose difference overflows.
        let span_days = i64::from(max_day) - i64::from(min_day);
        let bucket_days = if span_days <= 62 { 1 } else { 7 };
        // Every (group, metric) series is summarised on its own (sorts of up to a value per
        // device test each): spread over the CPUs, then put back in place; the order
        // comes from the sorts below, never from the threads.
        let mut jobs: Vec<(usize, String, Series)> = Vec::new();
        let mut keyed: Vec<(Vec<String>, GroupAcc)> = self.groups;
        for (gi, (_, g)) in keyed.iter_mut().enumerate() {
            jobs.extend(
                std::mem::take(&mut g.series)
                    .into_iter()
                    .map(|(m, s)| (gi, m, s)),
            );
        }
        let summarised = {
            let (devs, units, files) = (&self.devs, &self.unit_names, &self.files);
            parallel_map(jobs, |(gi, metric, s)| {
                let file = |i: u32| files.get(i as usize).cloned().unwrap_or_default();
                (
                    gi,
                    summarise_metric(metric, &s, devs, units, file, bucket_days, &date),
                )
            })
        };
        let thresholds = factory_lines(&self.configs);
        let mut per_group: Vec<Vec<MetricSummary>> = keyed.iter().map(|_| Vec::new()).collect();
        for (gi, m) in summarised {
            per_group[gi].push(m);
        }
        let mut groups: Vec<GroupSummary> = keyed
            .into_iter()
            .zip(per_group)
            .map(|((key, g), mut metrics)| {
                metrics.sort_by_key(|m| metric_rank(&m.metric));
                let name = name_and_limits(
                    &self.opts.group_by,
                    &key,
                    &g.classes,
                    &thresholds,
                    &mut metrics,
                );
                GroupSummary {
                    name,
                    key,
                    units: g.units.len(),
                    devices: g.devices as usize,
                    device_pass_rate: ratio(g.passed as usize, g.devices as usize),
                    classes: g.classes.into_iter().collect(),
                    failure_reasons: ranked(g.reasons),
                    metrics,
                }
            })
            .collect();
        groups.sort_by(|a, b| a.key.cmp(&b.key));
        let devices = self.devs.iter().filter(|d| d.tested).count();
        let passed_devices = self.devs.iter().filter(|d| d.tested && d.pass).count();
        let units = self.unit_latest.iter().flatten().count();
        let units_passed = self.unit_latest.iter().flatten().filter(|u| u.1).count();
        let ports = port_rows(
            self.ports
                .into_iter()
                .map(|(port, (n, fail))| (port, u64::from(n), u64::from(fail))),
        );
        let mut errors = self.errors;
        errors.sort_by(|a, b| a.file.cmp(&b.file));
        let mut skipped = self.skipped;
        skipped.sort_by(|a, b| a.file.cmp(&b.file));
        let mut duplicates = self.duplicates;
        duplicates.sort_by(|a, b| a.file.cmp(&b.file));
        let mut rejected_figures = self.rejected;
        rejected_figures
            .sort_by(|a, b| (&a.file, &a.device, &a.field).cmp(&(&b.file, &b.device, &b.field)));
        let mut several_keys: Vec<UnitKeys> = self
            .unit_keys
            .iter()
            .filter(|(_, k)| k.len() > 1)
            .map(|(&u, k)| UnitKeys {
                unit: self.unit_names[u as usize].clone(),
                keys: k.len(),
            })
            .collect();
        several_keys.sort_by(|a, b| a.unit.cmp(&b.unit));
        let signatures = Signatures {
            signed: self.signed as usize,
            unsigned: self.reports as usize - self.signed as usize,
            several_keys,
        };
        FleetSummary {
            files: self.files.len() + self.not_regular,
            reports: self.reports as usize,
            units,
            unit_pass_rate: ratio(units_passed, units),
            devices,
            device_pass_rate: ratio(passed_devices, devices),
            group_by: self.opts.group_by.clone(),
            first_day: (devices > 0).then(|| date(min_day)),
            last_day: (devices > 0).then(|| date(max_day)),
            trend_bucket: if bucket_days == 1 { "daily" } else { "weekly" }.into(),
            failure_reasons: ranked(self.reasons),
            link_failures_by_port: ports,
            yields: yield_rows(
                self.yields
                    .into_iter()
                    .map(|((d, v), c)| (d.to_string(), v, c.map(u64::from))),
            ),
            groups,
            builds: self.builds.map(|b| b.compare()).unwrap_or_default(),
            wear: self.wear.map(|w| w.summarize()),
            factory_thresholds: thresholds,
            write_curves: self
                .curves
                .into_iter()
                .map(|(model, list)| ModelCurves {
                    model,
                    curves: list.into_iter().map(|c| c.1).collect(),
                })
                .collect(),
            errors,
            skipped,
            duplicates,
            rejected_figures,
            signatures,
        }
    }
}

/// The weights of a report's devices in the norm, by class and verdict: each of its `k`
/// devices of a class weighs [`stats::device_weight`]`(k)`, and among the passing figures each
/// of its `j` passing devices of the class `device_weight(j)` (0 for a device that failed).
pub fn class_weights(devices: &[DeviceRecord]) -> impl Fn(&str, bool) -> (u32, u32) {
    let mut counts: Vec<(String, usize, usize)> = Vec::new();
    for d in devices {
        match counts.iter_mut().find(|c| c.0 == d.class) {
            Some(c) => {
                c.1 += 1;
                c.2 += usize::from(d.pass);
            }
            None => counts.push((d.class.clone(), 1, usize::from(d.pass))),
        }
    }
    move |class, pass| {
        let (all, passing) = counts
            .iter()
            .find(|c| c.0 == class)
            .map_or((1, 1), |c| (c.1, c.2));
        let w = |k| stats::device_weight(k) as u32;
        (w(all), if pass { w(passing) } else { 0 })
    }
}

/// Link failures per USB port, the most first: (port, device tests, link failures).
pub(crate) fn port_rows(ports: impl IntoIterator<Item = (String, u64, u64)>) -> Vec<PortLinks> {
    let mut rows: Vec<PortLinks> = ports
        .into_iter()
        .map(|(port, n, fail)| PortLinks {
            port,
            devices: n as usize,
            link_failures: fail as usize,
            failure_rate: ratio(fail as usize, n as usize),
        })
        .collect();
    rows.sort_by(|a, b| {
        b.link_failures
            .cmp(&a.link_failures)
            .then_with(|| a.port.cmp(&b.port))
    });
    rows
}

/// The yields' rows from (dimension, value, [device tests, first-pass passes, passes after a
/// retest, retested, marginal]).
pub(crate) fn yield_rows(
    counts: impl IntoIterator<Item = (String, String, [u64; 5])>,
) -> Vec<YieldRow> {
    counts
        .into_iter()
        .map(
            |(dimension, value, [n, first, after, retested, marginal])| {
                let n = n as usize;
                YieldRow {
                    dimension,
                    value,
                    devices: n,
                    first_pass_yield: ratio(first as usize, n),
                    passed_after_retest: after as usize,
                    retest_rate: ratio(retested as usize, n),
                    marginal_rate: ratio(marginal as usize, n),
                }
            },
        )
        .collect()
}

/// A group's name (`board=..., device-class=usb`), and each of its figures' distance to the
/// factory's limits on it when the group is of one class: a group of one class is measured
/// against the limits on that class and on every non-system device.
pub(crate) fn name_and_limits(
    group_by: &[Dimension],
    key: &[String],
    classes: &BTreeSet<String>,
    thresholds: &[FactoryThreshold],
    metrics: &mut [MetricSummary],
) -> String {
    if let [class] = classes.iter().collect::<Vec<_>>()[..] {
        for m in metrics.iter_mut() {
            m.limits = thresholds
                .iter()
                .filter(|t| t.class.as_ref().map_or(true, |c| c == class))
                .filter_map(|t| LimitDistance::of(m, t))
                .collect();
        }
    }
    group_by
        .iter()
        .zip(key)
        .map(|(d, v)| format!("{}={v}", d.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A day (days since 1970-01-01) as YYYY-MM-DD.
pub(crate) fn date(d: i32) -> String {
    chrono::NaiveDate::from_num_days_from_ce_opt(d + 719_163)
        .map(|d| d.to_string())
        .unwrap_or_default()
}

pub(crate) fn ratio(n: usize, d: usize) -> f64 {
    if d == 0 {
        0.0
    } else {
        n as f64 / d as f64
    }
}

pub(crate) fn ranked(map: HashMap<String, (u32, String)>) -> Vec<ReasonCount> {
    let mut v: Vec<ReasonCount> = map
        .into_iter()
        .map(|(reason, (count, example))| ReasonCount {
            reason,
            count: count as usize,
            example,
        })
        .collect();
    v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.reason.cmp(&b.reason)));
    v
}

/// The workloads in the factory matrix's order, then any other metric by name.
pub(crate) fn metric_rank(m: &str) -> (usize, String) {
    const ORDER: [&str; 9] = [
        "read-buffered",
        "seq-write",
        "seq-read",
        "rand-read",
        "rand-write",
        "mixed",
        "write-curve",
        "verify",
        "power-cut",
    ];
    let (w, fig) = m.split_once('.').unwrap_or((m, ""));
    let fig_rank = super::extract::WORKLOAD_METRICS
        .iter()
        .position(|f| *f == fig)
        .unwrap_or(3);
    let rank = match ORDER.iter().position(|o| *o == w) {
        Some(i) => i * 4 + fig_rank,
        None if m == LINK_METRIC => 100,
        None if m == CAPACITY_METRIC => 101,
        None => 50,
    };
    (rank, m.to_string())
}

fn summarise_metric(
    metric: String,
    s: &Series,
    devs: &[DevRef],
    units: &[String],
    file: impl Fn(u32) -> PathBuf,
    bucket_days: i32,
    date: &(dyn Fn(i32) -> String + Sync),
) -> MetricSummary {
    let mut sorted = s.values.clone();
    stats::sort_f64(&mut sorted);
    let p = |q: f64| stats::percentile(&sorted, q).unwrap_or(f64::NAN);
    let median = p(50.0);
    // The outliers' norm weighs each report once per class (its devices share the report's
    // weight), so a report that sends many devices cannot make its own figures the norm.
    let mut base: Vec<(f64, u64)> = s
        .values
        .iter()
        .zip(&s.weights)
        .map(|(v, w)| (*v, u64::from(w.0)))
        .collect();
    stats::sort_weighted(&mut base);
    let norm = Norm::of(&base);
    let mut outliers: Vec<Outlier> = match norm {
        Some(norm) => s
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| (i, norm.z(*v)))
            .filter(|(_, z)| z.abs() > OUTLIER_Z)
            .map(|(i, z)| {
                let d = &devs[s.devs[i] as usize];
                Outlier {
                    unit: units[d.unit as usize].clone(),
                    device: d.label.clone(),
                    file: file(d.file),
                    value: s.values[i],
                    median: norm.median,
                    modified_z: z,
                }
            })
            .collect(),
        None => Vec::new(),
    };
    outliers.sort_by(|a, b| {
        b.modified_z
            .abs()
            .total_cmp(&a.modified_z.abs())
            .then_with(|| a.unit.cmp(&b.unit))
            .then_with(|| a.device.cmp(&b.device))
    });
    // Listed: each unit's most extreme value, so that one report of 256 slow sticks takes
    // one line and cannot push the rest of the fleet's outliers off the list.
    let outliers_total = outliers.len();
    let mut listed_units = BTreeSet::new();
    outliers.retain(|o| listed_units.len() < MAX_OUTLIERS && listed_units.insert(o.unit.clone()));
    let days: Vec<i32> = s.devs.iter().map(|&i| devs[i as usize].day).collect();
    let trend = stats::bucket_medians(&days, &s.values, bucket_days)
        .into_iter()
        .map(|(d, count, median)| TrendPoint {
            start: date(d),
            count,
            median,
        })
        .collect();
    // Learned limits: the passing figures, each report weighing one per class; a figure
    // far outside the others is left out (see `PassingStats`).
    let mut passing: Vec<(f64, u64)> = s
        .values
        .iter()
        .zip(&s.weights)
        .filter(|(_, w)| w.1 > 0)
        .map(|(v, w)| (*v, u64::from(w.1)))
        .collect();
    let passing_tests = passing.len();
    stats::sort_weighted(&mut passing);
    let passing = passing_stats(passing_tests, passing);
    let histogram = Histogram::of(&sorted, 30);
    MetricSummary {
        count: s.values.len(),
        pass_rate: ratio(s.ok.iter().filter(|o| **o).count(), s.ok.len()),
        min: p(0.0),
        p5: p(5.0),
        median,
        p95: p(95.0),
        max: p(100.0),
        passing,
        outliers_total,
        outliers,
        trend,
        histogram,
        metric,
        limits: Vec::new(),
    }
}

/// The passing figures' statistics from their weighted values (sorted): `tests` passing
/// device tests, those whose modified z-score against the others is beyond ±3.5 left out.
pub fn passing_stats(tests: usize, sorted: Vec<(f64, u64)>) -> PassingStats {
    type Pairs = Vec<(f64, u64)>;
    let (kept, left_out): (Pairs, Pairs) = match Norm::of(&sorted) {
        Some(norm) => sorted
            .into_iter()
            .partition(|(v, _)| norm.z(*v).abs() <= OUTLIER_Z),
        None => (sorted, Vec::new()),
    };
    let pp = |q: f64| stats::weighted_percentile(&kept, q).unwrap_or(f64::NAN);
    let reports = |v: &[(f64, u64)]| {
        (v.iter().map(|p| p.1).sum::<u64>() as f64 / stats::REPORT_WEIGHT as f64).round() as usize
    };
    PassingStats {
        count: tests,
        reports: reports(&kept),
        reports_left_out: reports(&left_out),
        p1: pp(1.0),
        p5: pp(5.0),
        median: pp(50.0),
        p95: pp(95.0),
        p99: pp(99.0),
    }
}

/// Reads every file and aggregates it: the whole fleet pipeline behind `usbperf-matrix fleet`.
pub fn aggregate(inputs: &[PathBuf], opts: FleetOptions) -> Result<Accumulator, FleetError> {
    let found = load::collect_paths(inputs)?;
    let load_opts = opts.load.clone();
    let mut acc = Accumulator::new(opts, found.paths.clone());
    acc.add_unopened(found.skipped);
    load::load(&found.paths, &load_opts, |o| acc.add_outcome(o));
    Ok(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_rank_by_count_then_by_name() {
        let mut m: HashMap<String, (u32, String)> = HashMap::new();
        m.insert("b".into(), (2, "b once".into()));
        m.insert("a".into(), (2, "a once".into()));
        m.insert("c".into(), (5, "c once".into()));
        let got: Vec<(String, usize)> =
            ranked(m).into_iter().map(|r| (r.reason, r.count)).collect();
        assert_eq!(got, [("c".into(), 5), ("a".into(), 2), ("b".into(), 2)]);
    }

    #[test]
    fn metrics_in_the_factory_matrix_order_then_link_and_capacity() {
        let mut v = vec![
            CAPACITY_METRIC.to_string(),
            "zzz.other".to_string(),
            LINK_METRIC.to_string(),
            format!("rand-read.{}", WORKLOAD_METRICS[0]),
            format!("seq-write.{}", WORKLOAD_METRICS[1]),
            format!("seq-write.{}", WORKLOAD_METRICS[0]),
            format!("read-buffered.{}", WORKLOAD_METRICS[0]),
        ];
        v.sort_by_key(|m| metric_rank(m));
        assert_eq!(
            v,
            [
                format!("read-buffered.{}", WORKLOAD_METRICS[0]),
                format!("seq-write.{}", WORKLOAD_METRICS[0]),
                format!("seq-write.{}", WORKLOAD_METRICS[1]),
                format!("rand-read.{}", WORKLOAD_METRICS[0]),
                "zzz.other".to_string(),
                LINK_METRIC.to_string(),
                CAPACITY_METRIC.to_string(),
            ]
        );
    }

    #[test]
    fn a_share_of_nothing_is_zero() {
        assert_eq!(ratio(0, 0), 0.0);
        assert_eq!(ratio(3, 4), 0.75);
    }
}
