//! Owns the repeatability study (`calibrate --study N`): on a golden unit, the same profile
//! run N times, and per figure how repeatable it is, what share of each limit's tolerance the
//! measurement's own spread takes (the factory's gauge R&R reading), and the shortest runtime
//! per test that would meet the precision target. Pure: reports and limits in, rows out.

use std::collections::BTreeMap;

use crate::config::Threshold;
use crate::discover::model::Disk;
use crate::fleet::stats;
use crate::report::schema::{CellStatus, Report};
use crate::safety::SystemFacts;
use crate::workload::WorkloadKind;

/// A share of the tolerance below this is acceptable (AIAG MSA's reading of %GRR).
pub const ACCEPTABLE_PERCENT: f64 = 10.0;
/// Above this the measurement cannot judge the limit.
pub const UNACCEPTABLE_PERCENT: f64 = 30.0;
/// The precision a runtime is recommended for when the test states none (`precision_percent`).
pub const DEFAULT_TARGET_PERCENT: f64 = 2.0;

/// How a limit's tolerance reads against the measurement's spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Under 10 %: the measurement can judge the limit.
    Acceptable,
    /// 10-30 %: usable with care (a marginal band, retests).
    Marginal,
    /// Over 30 %: the measurement's own spread decides the verdict.
    Unacceptable,
}

impl Reading {
    pub fn of(share_percent: f64) -> Reading {
        if share_percent < ACCEPTABLE_PERCENT {
            Reading::Acceptable
        } else if share_percent <= UNACCEPTABLE_PERCENT {
            Reading::Marginal
        } else {
            Reading::Unacceptable
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Reading::Acceptable => "acceptable",
            Reading::Marginal => "marginal",
            Reading::Unacceptable => "not acceptable",
        }
    }
}

/// One limit on a figure, against the figure's spread.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitShare {
    /// `thresholds[N]`.
    pub rule: String,
    /// The threshold key (a rate's minimum).
    pub key: &'static str,
    pub limit: f64,
    /// 3 standard deviations of the runs over the distance from their mean to the limit, in %
    /// (a one-sided limit's %P/T); 100 % or more when the mean sits on or past the limit.
    pub share_percent: f64,
    pub reading: Reading,
}

/// One (device, test) figure over the study's runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub device: String,
    /// Its index in the device's cells.
    pub cell: usize,
    pub workload: WorkloadKind,
    /// `MiB/s` or `IOPS`: the figure the table shows for the workload.
    pub unit: &'static str,
    /// Each run's figure as limits judge it (`BenchResult::judged`).
    pub values: Vec<f64>,
    pub mean: f64,
    /// The runs' sample standard deviation in % of their mean: the figure's repeatability.
    pub repeat_percent: f64,
    /// The median of the intervals the runs stated (half the 95 % CI, in %).
    pub stated_ci_percent: Option<f64>,
    /// The median time a run of the test took, s.
    pub seconds: f64,
    /// The precision the runtime is recommended for.
    pub target_percent: f64,
    /// The shortest runtime that meets `target_percent` from run to run (2 standard
    /// deviations of the figure within it), s; `None` for a test without a time bound.
    pub recommended_runtime_s: Option<f64>,
    pub limits: Vec<LimitShare>,
}

/// The rows of a study: the runs' figures per (device, cell), the limits that apply to each
/// device (by its disk as the first report recorded it, with `facts` of this unit).
pub fn study(reports: &[Report], thresholds: &[Threshold], facts: &SystemFacts) -> Vec<Row> {
    struct Acc {
        workload: WorkloadKind,
        mib: Vec<f64>,
        iops: Vec<f64>,
        ci: Vec<f64>,
        seconds: Vec<f64>,
        time_bound: bool,
        target: Option<f64>,
    }
    let mut disks: BTreeMap<String, Disk> = BTreeMap::new();
    let mut acc: BTreeMap<(String, usize), Acc> = BTreeMap::new();
    for rep in reports {
        for d in &rep.devices {
            disks
                .entry(d.name.clone())
                .or_insert_with(|| d.disk.clone());
            for (i, c) in d.cells.iter().enumerate() {
                let measured = matches!(c.status, CellStatus::Passed | CellStatus::Failed);
                let Some(res) = c.result.as_ref().filter(|_| measured) else {
                    continue;
                };
                if matches!(c.workload, WorkloadKind::Verify | WorkloadKind::WriteCurve) {
                    continue;
                }
                let a = acc.entry((d.name.clone(), i)).or_insert(Acc {
                    workload: c.workload,
                    mib: Vec::new(),
                    iops: Vec::new(),
                    ci: Vec::new(),
                    seconds: Vec::new(),
                    time_bound: res.params.runtime_ms.is_some(),
                    target: res.params.precision_percent,
                });
                let judged = res.judged();
                a.mib.push(judged.mib_per_s);
                a.iops.push(judged.iops);
                a.ci.extend(judged.ci95_percent);
                a.seconds.push(res.seconds);
            }
        }
    }
    let mut rows = Vec::new();
    for ((device, cell), a) in acc {
        let iops_figure = matches!(
            a.workload,
            WorkloadKind::RandRead | WorkloadKind::RandWrite | WorkloadKind::Mixed
        );
        let (unit, values) = if iops_figure {
            ("IOPS", a.iops.clone())
        } else {
            ("MiB/s", a.mib.clone())
        };
        let (mean, sd) = mean_sd(&values);
        let repeat_percent = if mean > 0.0 { sd / mean * 100.0 } else { 0.0 };
        let target_percent = a.target.unwrap_or(DEFAULT_TARGET_PERCENT);
        let seconds = stats::median(a.seconds.clone()).unwrap_or(0.0);
        // The spread of a mean over a time falls as its square root: the runtime at which two
        // standard deviations from run to run fit in the target.
        let recommended_runtime_s = a.time_bound.then(|| {
            let need = seconds * (2.0 * repeat_percent / target_percent).powi(2);
            (need.max(0.5) * 10.0).ceil() / 10.0
        });
        let mut limits = Vec::new();
        if let Some(disk) = disks.get(&device) {
            for (i, t) in crate::matrix::verdict::applicable(thresholds, disk, facts) {
                if t.workload.is_some_and(|w| w != a.workload) {
                    continue;
                }
                // A rate's minimum: the share of the room above it that the spread takes.
                for (metric, limit) in t.figure_limits() {
                    let vals = match metric.id {
                        id if id == crate::metric::MIB_PER_S.id => &a.mib,
                        id if id == crate::metric::IOPS.id => &a.iops,
                        _ => continue,
                    };
                    let (m, s) = mean_sd(vals);
                    let room = m - limit;
                    let share_percent = if room > 0.0 {
                        3.0 * s / room * 100.0
                    } else {
                        f64::INFINITY
                    };
                    limits.push(LimitShare {
                        rule: format!("thresholds[{i}]"),
                        key: metric.key(),
                        limit,
                        share_percent,
                        reading: Reading::of(share_percent),
                    });
                }
            }
        }
        rows.push(Row {
            device,
            cell,
            workload: a.workload,
            unit,
            mean,
            repeat_percent,
            stated_ci_percent: stats::median(a.ci.clone()),
            seconds,
            target_percent,
            recommended_runtime_s,
            limits,
            values,
        });
    }
    rows
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// The study as a table for people, `width` columns wide: a row per figure, its limits under
/// it.
pub fn render(rows: &[Row], runs: usize, width: usize) -> String {
    let mut out = format!(
        "repeatability over {runs} runs (repeat: standard deviation in % of the mean; share: 3 \
         standard deviations over the room to the limit, under {ACCEPTABLE_PERCENT} % \
         acceptable, over {UNACCEPTABLE_PERCENT} % not)\n"
    );
    let mut table = vec![[
        "device",
        "test",
        "mean",
        "repeat",
        "stated CI",
        "cell s",
        "runtime needed",
    ]
    .map(String::from)
    .to_vec()];
    let right = [false, false, true, true, true, true, true];
    let mut limits = Vec::new();
    for r in rows {
        let ci = r
            .stated_ci_percent
            .map_or("not known".to_string(), |c| format!("+-{c:.1} %"));
        let rec = r.recommended_runtime_s.map_or("-".to_string(), |s| {
            format!("{s:.1} s @{:.0} %", r.target_percent)
        });
        table.push(vec![
            r.device.clone(),
            r.workload.as_str().to_string(),
            format!("{:.1} {}", r.mean, r.unit),
            format!("{:.1} %", r.repeat_percent),
            ci,
            format!("{:.2}", r.seconds),
            rec,
        ]);
        for l in &r.limits {
            let share = if l.share_percent.is_finite() {
                format!("{:.1} %", l.share_percent)
            } else {
                "the mean is at or past the limit".into()
            };
            limits.push(format!(
                "  {} {} {} {}: share of tolerance {share}: {}\n",
                crate::untrusted::for_terminal(&r.device),
                l.rule,
                l.key,
                l.limit,
                l.reading.as_str()
            ));
        }
    }
    out.push_str(&crate::out::table(&table, &right, width));
    if !limits.is_empty() {
        out.push_str("limits:\n");
        out.extend(limits);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::station::tests::{report, result};

    /// Runs whose seq-read figure on mmcblk0 is each of `values`.
    fn runs(values: &[f64], seconds: f64) -> Vec<Report> {
        values
            .iter()
            .map(|&v| {
                let mut r = report();
                let mut res = result(v);
                res.seconds = seconds;
                res.params.runtime_ms = Some(1500);
                res.params.precision_percent = Some(2.0);
                r.devices[0].cells[0].result = Some(res);
                r
            })
            .collect()
    }

    fn limit(yaml: &str) -> Vec<Threshold> {
        serde_norway::from_str(yaml).unwrap()
    }

    #[test]
    fn a_figure_s_repeatability_its_share_of_each_tolerance_and_its_runtime() {
        // (runs' figures, minimum, share of the tolerance, reading)
        type Case = (&'static [f64], f64, f64, Reading);
        let cases: &[Case] = &[
            // sd 1 around 100: 3 / (100 - 50) = 6 %
            (&[99.0, 100.0, 101.0], 50.0, 6.0, Reading::Acceptable),
            // 3 / (100 - 80) = 15 %
            (&[99.0, 100.0, 101.0], 80.0, 15.0, Reading::Marginal),
            // 3 / (100 - 95) = 60 %
            (&[99.0, 100.0, 101.0], 95.0, 60.0, Reading::Unacceptable),
            // the mean below the limit: no room at all
            (
                &[99.0, 100.0, 101.0],
                120.0,
                f64::INFINITY,
                Reading::Unacceptable,
            ),
        ];
        for &(values, min, share, reading) in cases {
            let t = limit(&format!(
                "- {{select: {{name: mmcblk0}}, workload: seq-read, min_mib_per_s: {min}}}\n"
            ));
            let rows = study(&runs(values, 1.5), &t, &SystemFacts::default());
            let row = rows
                .iter()
                .find(|r| r.device == "mmcblk0")
                .expect("mmcblk0");
            assert_eq!((row.unit, row.values.len()), ("MiB/s", 3));
            assert!((row.repeat_percent - 1.0).abs() < 1e-9, "{row:?}");
            assert_eq!(row.limits.len(), 1, "{row:?}");
            let l = &row.limits[0];
            assert_eq!(l.rule, "thresholds[0]");
            if share.is_finite() {
                assert!((l.share_percent - share).abs() < 1e-9, "{min}: {l:?}");
            } else {
                assert!(l.share_percent.is_infinite(), "{min}: {l:?}");
            }
            assert_eq!(l.reading, reading, "{min}: {l:?}");
            // 2 x 1 % against 2 %: the runs' 1.5 s already meet it.
            assert_eq!(row.recommended_runtime_s, Some(1.5));
        }
        // A limit for another device or another workload does not apply.
        let t = limit(
            "- {select: {name: sda}, workload: seq-read, min_mib_per_s: 1}\n\
             - {select: {name: mmcblk0}, workload: seq-write, min_mib_per_s: 1}\n",
        );
        let rows = study(&runs(&[99.0, 101.0], 1.5), &t, &SystemFacts::default());
        assert!(rows.iter().all(|r| r.limits.is_empty()), "{rows:?}");
    }

    #[test]
    fn a_noisier_figure_is_recommended_a_longer_runtime() {
        // sd 4 % at 1.5 s: 2 x 4 / 2 = 4, squared 16: 24 s.
        let rows = study(
            &runs(&[96.0, 100.0, 104.0], 1.5),
            &[],
            &SystemFacts::default(),
        );
        let row = rows.iter().find(|r| r.device == "mmcblk0").unwrap();
        assert!((row.repeat_percent - 4.0).abs() < 1e-9, "{row:?}");
        assert_eq!(row.recommended_runtime_s, Some(24.0));
        let text = render(&rows, 3, 80);
        // The table fits 80 columns by itself (the sentence above it is wrapped as prose
        // when printed): a column is never broken inside.
        assert!(
            text.lines().skip(1).all(|l| l.chars().count() <= 80),
            "{text}"
        );
        assert!(text.contains("24.0 s @2 %"), "{text}");
    }
}
