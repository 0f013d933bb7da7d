//! Owns the fleet's summary: the types every output format (text, JSON, HTML, suggested
//! thresholds) renders, what `aggregate` produces. Plain data, no logic but the histogram.

use std::path::PathBuf;

use serde::Serialize;

use super::extract::RejectedFigure;
use super::FleetError;

/// What a group is keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dimension {
    /// The unit's device-tree / DMI model.
    Board,
    DeviceClass,
    /// `usb:1-2` for USB devices, the kernel name otherwise.
    Port,
    DeviceModel,
    ToolVersion,
}

impl Dimension {
    pub const ALL: [Dimension; 5] = [
        Dimension::Board,
        Dimension::DeviceClass,
        Dimension::Port,
        Dimension::DeviceModel,
        Dimension::ToolVersion,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::Board => "board",
            Dimension::DeviceClass => "device-class",
            Dimension::Port => "port",
            Dimension::DeviceModel => "device-model",
            Dimension::ToolVersion => "tool-version",
        }
    }

    /// Parses `board,device-class` (the `--group-by` syntax).
    pub fn parse_list(s: &str) -> Result<Vec<Dimension>, FleetError> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let d = Dimension::ALL
                .into_iter()
                .find(|d| d.as_str() == part)
                .ok_or_else(|| FleetError::UnknownDimension(part.to_string()))?;
            if !out.contains(&d) {
                out.push(d);
            }
        }
        Ok(out)
    }
}

/// Units whose outliers are listed per group and figure (the most extreme; `outliers_total`
/// counts every value).
pub const MAX_OUTLIERS: usize = 50;

/// The fleet, summarised; what every output format renders.
#[derive(Debug, Clone, Serialize)]
pub struct FleetSummary {
    /// Files with a report's name found (read or not).
    pub files: usize,
    /// Reports aggregated (retests of a unit count each, copies of one report once).
    pub reports: usize,
    /// Distinct units (board serial, else machine-id).
    pub units: usize,
    /// Share of units whose latest report passed.
    pub unit_pass_rate: f64,
    /// Device tests aggregated (devices × reports).
    pub devices: usize,
    pub device_pass_rate: f64,
    pub group_by: Vec<Dimension>,
    pub first_day: Option<String>,
    pub last_day: Option<String>,
    /// `daily` or `weekly`: the trend's bucket.
    pub trend_bucket: String,
    pub failure_reasons: Vec<ReasonCount>,
    pub link_failures_by_port: Vec<PortLinks>,
    /// First-pass yield, retest and marginal rates per board, station, port and class.
    pub yields: Vec<YieldRow>,
    pub groups: Vec<GroupSummary>,
    /// Each image build against the one before it, per board (`--compare-builds`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub builds: Vec<super::builds::BuildComparison>,
    /// Each flash part's wear across reports (`--wear`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wear: Option<super::wear::WearSummary>,
    /// Thresholds the reports' factory configs applied (drawn on the charts).
    pub factory_thresholds: Vec<FactoryThreshold>,
    pub write_curves: Vec<ModelCurves>,
    /// Files that could not be read, with why.
    pub errors: Vec<FileIssue>,
    /// Files read but left out (filters, unfinished runs), and entries that are not regular
    /// files (never opened).
    pub skipped: Vec<FileIssue>,
    /// Copies of a report already counted (same `report_id`, or same unit and start time).
    pub duplicates: Vec<Duplicate>,
    /// Figures refused as no measurement (not finite, negative, beyond a ceiling); the rest
    /// of their report counts.
    pub rejected_figures: Vec<RejectedFigure>,
    /// Which counted reports carry a signature that holds; a report whose signature does not
    /// hold is not counted (it is in `errors`, kind `signature`).
    pub signatures: Signatures,
}

/// The counted reports' signatures (the unit's Ed25519 key over the report's bytes).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Signatures {
    /// Reports whose signature holds (a `.sig` file beside the report file, or the upload's
    /// signature the collector verified on receipt).
    pub signed: usize,
    pub unsigned: usize,
    /// Units whose reports are signed by more than one key: its key was replaced, or
    /// someone else signed a report in its name.
    pub several_keys: Vec<UnitKeys>,
}

/// A unit whose reports carry several keys, and how many.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnitKeys {
    pub unit: String,
    pub keys: usize,
}

impl FleetSummary {
    /// Whether the yields say more than the pass rates: once any report carries a retest or
    /// a marginal figure (older reports carry neither).
    pub fn yields_worth_showing(&self) -> bool {
        self.yields
            .iter()
            .any(|y| y.retest_rate > 0.0 || y.marginal_rate > 0.0)
    }
}

/// How device tests of one board, station, port or class went the first time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct YieldRow {
    /// `board`, `station`, `port` or `device-class`.
    pub dimension: String,
    pub value: String,
    /// Device tests (devices × reports).
    pub devices: usize,
    /// Passed with no retest: the share a factory ships without touching the unit again.
    pub first_pass_yield: f64,
    /// Passed after a retest of a marginal figure.
    pub passed_after_retest: usize,
    /// Had at least one cell measured again.
    pub retest_rate: f64,
    /// Had a figure within its marginal band, in its final verdict.
    pub marginal_rate: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupSummary {
    /// `board=..., device-class=usb`.
    pub name: String,
    /// The values of `group_by`, in its order.
    pub key: Vec<String>,
    pub units: usize,
    pub devices: usize,
    pub device_pass_rate: f64,
    /// Device classes in the group (one when grouped by device-class).
    pub classes: Vec<String>,
    pub failure_reasons: Vec<ReasonCount>,
    pub metrics: Vec<MetricSummary>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MetricSummary {
    /// `seq-write.mib_per_s`, `rand-read.iops`, `mixed.p99_latency_ms`, `link_mbps`,
    /// `capacity_bytes`.
    pub metric: String,
    pub count: usize,
    /// Share of values whose own check passed (the cell; for link and capacity the
    /// device's link / capacity check).
    pub pass_rate: f64,
    pub min: f64,
    pub p5: f64,
    pub median: f64,
    pub p95: f64,
    pub max: f64,
    /// The same figure over devices that passed, for threshold suggestions.
    pub passing: PassingStats,
    /// Values with modified z-score beyond ±3.5: how many in all.
    pub outliers_total: usize,
    /// The most extreme of them, largest |z| first: each unit's most extreme value, for at
    /// most [`MAX_OUTLIERS`] units. A whole product line's slow parts are a count and the
    /// worst few to look at, not a list that grows with the fleet, and one unit cannot fill
    /// it.
    pub outliers: Vec<Outlier>,
    /// Median per production day or week (`trend_bucket`).
    pub trend: Vec<TrendPoint>,
    pub histogram: Histogram,
    /// How far the figures sit from each factory limit on them, for a group of one class.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<LimitDistance>,
}

/// How far a group's figures sit from one of the factory's limits, in % of the limit:
/// positive is room to spare, negative a miss. A line engineer reads the worst 5 % to know
/// how many units a small drift of the process would fail.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimitDistance {
    /// `min` or `max`.
    pub bound: String,
    pub limit: f64,
    /// The units whose reports ran under this limit (the group's figures are all measured
    /// against it, also those of units whose reports had another or none: their own pass
    /// rate is the metric's `pass_rate`).
    pub units: usize,
    pub median_percent: f64,
    /// The 5 % of figures nearest the limit: the p5 of a minimum, the p95 of a maximum.
    pub p5_percent: f64,
    /// The figure nearest the limit, or the worst miss: the min of a minimum, the max of a
    /// maximum.
    pub worst_percent: f64,
}

impl LimitDistance {
    /// The distance of `m`'s figures to `t`, when `t` limits this metric (and its limit is
    /// not 0, which has no percent).
    pub fn of(m: &MetricSummary, t: &FactoryThreshold) -> Option<LimitDistance> {
        if t.metric != m.metric || m.count == 0 || !t.value.is_finite() || t.value == 0.0 {
            return None;
        }
        let l = t.value;
        let (towards, near, worst) = match t.bound.as_str() {
            "min" => (1.0, m.p5, m.min),
            "max" => (-1.0, m.p95, m.max),
            _ => return None,
        };
        let percent = |v: f64| towards * (v - l) / l.abs() * 100.0;
        Some(LimitDistance {
            bound: t.bound.clone(),
            limit: l,
            units: t.units,
            median_percent: percent(m.median),
            p5_percent: percent(near),
            worst_percent: percent(worst),
        })
    }
}

/// The figure over the devices that passed, for learned limits: each report weighs one per
/// device class (its `k` passing devices of a class `1/k` each), and a figure far outside the
/// others (its modified z-score beyond ±3.5) is left out, so one report sending many devices
/// or figures no other report has cannot move a limit the fleet learns.
#[derive(Debug, Clone, Serialize)]
pub struct PassingStats {
    /// Passing device tests.
    pub count: usize,
    /// Reports the percentiles are over (each weighing one; rounded where a report's devices
    /// fall in several groups).
    pub reports: usize,
    /// Reports' worth of figures left out as far outside the others.
    pub reports_left_out: usize,
    pub p1: f64,
    pub p5: f64,
    pub median: f64,
    pub p95: f64,
    pub p99: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Outlier {
    pub unit: String,
    pub device: String,
    pub file: PathBuf,
    pub value: f64,
    pub median: f64,
    pub modified_z: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TrendPoint {
    /// First day of the bucket (YYYY-MM-DD).
    pub start: String,
    pub count: usize,
    pub median: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReasonCount {
    /// What the reasons counted here share: a schema 2 record's kind and fields (never its
    /// measured figure or sentence), or a schema 1 sentence with measured figures replaced
    /// by N.
    pub reason: String,
    pub count: usize,
    /// One verbatim instance.
    pub example: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct PortLinks {
    pub port: String,
    pub devices: usize,
    pub link_failures: usize,
    pub failure_rate: f64,
}

/// Equal-width bins over [lo, hi] (the chart's bars).
#[derive(Debug, Clone, Serialize)]
pub struct Histogram {
    pub lo: f64,
    pub hi: f64,
    pub counts: Vec<u32>,
}

impl Histogram {
    pub(super) fn of(sorted: &[f64], bins: usize) -> Histogram {
        Histogram::of_pairs(sorted.iter().map(|v| (*v, 1)), bins)
    }

    /// The histogram of values given ascending, each with how many times it occurs (a
    /// sketch's [`super::sketch::Sketch::pairs`]).
    pub(super) fn of_pairs(
        sorted: impl Iterator<Item = (f64, u64)> + Clone,
        bins: usize,
    ) -> Histogram {
        let lo = sorted.clone().next().map_or(0.0, |p| p.0);
        let hi = sorted.clone().last().map_or(0.0, |p| p.0);
        let mut counts = vec![0u32; bins];
        let width = (hi - lo) / bins as f64;
        for (v, n) in sorted {
            let i = if width > 0.0 {
                (((v - lo) / width) as usize).min(bins - 1)
            } else {
                0
            };
            counts[i] = counts[i].saturating_add(n.min(u64::from(u32::MAX)) as u32);
        }
        Histogram { lo, hi, counts }
    }
}

/// A file the fleet did not use, and why.
#[derive(Debug, Clone, Serialize)]
pub struct FileIssue {
    pub file: PathBuf,
    pub issue: String,
    /// For programs: `unreadable`, `signature` (its signature does not hold),
    /// `not-regular`, `unfinished`, `before-since`, `other-board`.
    pub kind: &'static str,
}

/// A report dropped as a copy of one already counted.
#[derive(Debug, Clone, Serialize)]
pub struct Duplicate {
    pub file: PathBuf,
    /// The copy that counts: the first in path order.
    pub kept: PathBuf,
    /// What the two share (`report_id`, or the unit and `started_at`).
    pub identity: String,
}

/// A threshold the factory runs applied (from the reports' own config), drawn on the charts.
#[derive(Debug, Clone, PartialEq, PartialOrd, Serialize)]
pub struct FactoryThreshold {
    /// Device class it applies to; `None` = every non-system device.
    pub class: Option<String>,
    pub metric: String,
    /// `min` or `max`.
    pub bound: String,
    pub value: f64,
    /// The units whose reports ran under this limit: the page says which limit a figure is
    /// measured against and how many units it binds.
    pub units: usize,
}

/// One write curve of one device test.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurveTrace {
    pub unit: String,
    pub device: String,
    pub file: PathBuf,
    /// (t_s, mib_per_s) per sample.
    pub samples: Vec<(f64, f64)>,
    /// (t_s, before_mib_per_s, after_mib_per_s).
    pub knee: Option<(f64, f64, f64)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelCurves {
    pub model: String,
    pub curves: Vec<CurveTrace>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_to_a_limit_is_room_to_spare_on_either_bound() {
        let m = |metric: &str, min, p5, median, p95, max| MetricSummary {
            metric: metric.into(),
            count: 10,
            pass_rate: 1.0,
            min,
            p5,
            median,
            p95,
            max,
            passing: PassingStats {
                count: 10,
                reports: 10,
                reports_left_out: 0,
                p1: min,
                p5,
                median,
                p95,
                p99: max,
            },
            outliers_total: 0,
            outliers: Vec::new(),
            trend: Vec::new(),
            histogram: Histogram::of(&[], 1),
            limits: Vec::new(),
        };
        let t = |metric: &str, bound: &str, value| FactoryThreshold {
            class: None,
            metric: metric.into(),
            bound: bound.into(),
            value,
            units: 7,
        };
        let w = "seq-write.mib_per_s";
        let lat = "rand-read.p99_latency_ms";
        // (summary, threshold, (median, worst 5 %, worst) in % of the limit)
        let rows = [
            (
                m(w, 9.0, 11.0, 15.0, 20.0, 30.0),
                t(w, "min", 10.0),
                Some((50.0, 10.0, -10.0)),
            ),
            (
                m(lat, 1.0, 2.0, 4.0, 8.0, 12.0),
                t(lat, "max", 10.0),
                Some((60.0, 20.0, -20.0)),
            ),
            (m(w, 9.0, 11.0, 15.0, 20.0, 30.0), t(lat, "max", 10.0), None),
            (m(w, 9.0, 11.0, 15.0, 20.0, 30.0), t(w, "min", 0.0), None),
            (
                m(w, 9.0, 11.0, 15.0, 20.0, 30.0),
                t(w, "exactly", 10.0),
                None,
            ),
        ];
        for (summary, threshold, want) in rows {
            let got = LimitDistance::of(&summary, &threshold)
                .map(|l| (l.median_percent, l.p5_percent, l.worst_percent));
            match (got, want) {
                (Some(g), Some(w)) => {
                    for (a, b) in [(g.0, w.0), (g.1, w.1), (g.2, w.2)] {
                        assert!((a - b).abs() < 1e-9, "{threshold:?}: {g:?} against {w:?}");
                    }
                }
                (g, w) => assert_eq!(g.is_some(), w.is_some(), "{threshold:?}: {g:?}"),
            }
        }
    }

    #[test]
    fn histogram_bins_are_equal_and_hold_every_value() {
        let v = [1.0, 1.5, 2.0, 2.5, 3.0, 5.0];
        let h = Histogram::of(&v, 4);
        assert_eq!((h.lo, h.hi), (1.0, 5.0));
        // Width 1: [1,2) [2,3) [3,4) [4,5]; the top value goes in the last bin.
        assert_eq!(h.counts, [2, 2, 1, 1]);
        assert_eq!(Histogram::of(&[7.0, 7.0], 3).counts, [2, 0, 0]);
        assert_eq!(Histogram::of(&[], 2).counts, [0, 0]);
    }

    #[test]
    fn group_by_lists_parse_once_each_and_refuse_unknown_names() {
        assert_eq!(
            Dimension::parse_list(" board, device-class,board ,").unwrap(),
            [Dimension::Board, Dimension::DeviceClass]
        );
        let e = Dimension::parse_list("board,colour")
            .unwrap_err()
            .to_string();
        assert!(e.contains("colour"), "{e}");
        for d in Dimension::ALL {
            assert_eq!(Dimension::parse_list(d.as_str()).unwrap(), [d]);
        }
    }
}
