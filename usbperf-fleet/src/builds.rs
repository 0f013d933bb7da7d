//! Owns the comparison of image builds: per board, each build against the one before it (in
//! the order the fleet first saw them), per device class and figure, with a rank test
//! (Mann-Whitney U) and the change of the median; a regression is named only when the test
//! and the size of the change both say so, and a pair with too few reports says that instead.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::sketch::Sketch;

/// Figures of each side a comparison needs; fewer, and the pair says so rather than guess.
pub const MIN_REPORTS: usize = 8;
/// The rank test's bar: two-sided p below this. Strict, because a build pair is compared on
/// tens of figures at once.
pub const MAX_P: f64 = 0.001;
/// A change smaller than this, in % of the earlier build's median, is not named however
/// certain: a factory does not act on 2 %.
pub const MIN_CHANGE_PERCENT: f64 = 5.0;

/// The figures of every (board, build, class, metric), and when each (board, build) was
/// first seen.
#[derive(Debug, Default)]
pub struct BuildValues {
    values: HashMap<(String, String, String, String), Vec<f64>>,
    first: HashMap<(String, String), DateTime<Utc>>,
    reports: HashMap<(String, String), usize>,
}

impl BuildValues {
    /// Notes one report of `board` on `build`, started at `at`.
    pub fn report(&mut self, board: &str, build: &str, at: DateTime<Utc>) {
        let key = (board.to_string(), build.to_string());
        let first = self.first.entry(key.clone()).or_insert(at);
        if at < *first {
            *first = at;
        }
        *self.reports.entry(key).or_default() += 1;
    }

    pub fn add(&mut self, board: &str, build: &str, class: &str, metric: &str, v: f64) {
        if !v.is_finite() {
            return;
        }
        self.values
            .entry((board.into(), build.into(), class.into(), metric.into()))
            .or_default()
            .push(v);
    }

    /// Each board's builds, oldest first, each compared with the one before it.
    pub fn compare(&self) -> Vec<BuildComparison> {
        compare(
            &self.first,
            &self.reports,
            |board, build, class, metric| {
                let v = self.values.get(&(
                    board.to_string(),
                    build.to_string(),
                    class.to_string(),
                    metric.to_string(),
                ))?;
                let mut pairs: Vec<(f64, u64)> = v.iter().map(|x| (*x, 1)).collect();
                super::stats::sort_weighted(&mut pairs);
                Some(pairs)
            },
            |board, build| {
                self.values
                    .keys()
                    .filter(|(bd, bl, _, _)| bd == board && bl == build)
                    .map(|(_, _, c, m)| (c.clone(), m.clone()))
                    .collect()
            },
        )
    }
}

/// The figures of every (board, build, class, metric) as sketches, as the fleet's summaries
/// keep them per day: mergeable, and compared as [`BuildValues`] compares the values (the
/// rank test's ties are a bucket's values, within the sketch's accuracy of each other).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BuildSketches {
    pub values: BTreeMap<(String, String, String, String), Sketch>,
    /// When each (board, build) was first seen, and its reports.
    pub first: BTreeMap<(String, String), (DateTime<Utc>, usize)>,
}

impl BuildSketches {
    /// Notes one report of `board` on `build`, started at `at`.
    pub fn report(&mut self, board: &str, build: &str, at: DateTime<Utc>) {
        let e = self
            .first
            .entry((board.to_string(), build.to_string()))
            .or_insert((at, 0));
        e.0 = e.0.min(at);
        e.1 += 1;
    }

    pub fn add(&mut self, board: &str, build: &str, class: &str, metric: &str, v: f64, ppm: u32) {
        let key = (board.into(), build.into(), class.into(), metric.into());
        let s = self
            .values
            .entry(key)
            .or_insert_with(|| Sketch::new(ppm).expect("a valid accuracy"));
        // Refused values (not finite, negative) are no figure.
        let _ = s.insert(v);
    }

    pub fn merge(&mut self, o: &BuildSketches) {
        for (k, s) in &o.values {
            match self.values.get_mut(k) {
                // Sketches of one accuracy, made by this crate.
                Some(mine) => {
                    let _ = mine.merge(s);
                }
                None => {
                    self.values.insert(k.clone(), s.clone());
                }
            }
        }
        for (k, (at, n)) in &o.first {
            let e = self.first.entry(k.clone()).or_insert((*at, 0));
            e.0 = e.0.min(*at);
            e.1 += n;
        }
    }

    /// Each board's builds, oldest first, each compared with the one before it.
    pub fn compare(&self) -> Vec<BuildComparison> {
        let first: HashMap<(String, String), DateTime<Utc>> =
            self.first.iter().map(|(k, v)| (k.clone(), v.0)).collect();
        let reports: HashMap<(String, String), usize> =
            self.first.iter().map(|(k, v)| (k.clone(), v.1)).collect();
        compare(
            &first,
            &reports,
            |board, build, class, metric| {
                let s = self.values.get(&(
                    board.to_string(),
                    build.to_string(),
                    class.to_string(),
                    metric.to_string(),
                ))?;
                Some(s.pairs())
            },
            |board, build| {
                self.values
                    .keys()
                    .filter(|(bd, bl, _, _)| bd == board && bl == build)
                    .map(|(_, _, c, m)| (c.clone(), m.clone()))
                    .collect()
            },
        )
    }
}

/// Each board's builds, oldest first (`first`: when each was first seen), each compared with
/// the one before it; `pairs(board, build, class, metric)` gives a build's figures as
/// (value, times) ascending, `figures(board, build)` the (class, metric) it has.
fn compare(
    first: &HashMap<(String, String), DateTime<Utc>>,
    reports: &HashMap<(String, String), usize>,
    pairs: impl Fn(&str, &str, &str, &str) -> Option<Vec<(f64, u64)>>,
    figures: impl Fn(&str, &str) -> Vec<(String, String)>,
) -> Vec<BuildComparison> {
    let mut boards: HashMap<&str, Vec<(&str, DateTime<Utc>)>> = HashMap::new();
    for ((board, build), at) in first {
        boards.entry(board).or_default().push((build, *at));
    }
    let mut out = Vec::new();
    let mut names: Vec<&&str> = boards.keys().collect();
    names.sort();
    for board in names {
        let mut builds = boards[*board].clone();
        builds.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(b.0)));
        for pair in builds.windows(2) {
            out.push(compare_pair(
                reports, &pairs, &figures, board, pair[0].0, pair[1].0,
            ));
        }
    }
    out
}

fn compare_pair(
    reports: &HashMap<(String, String), usize>,
    pairs: &impl Fn(&str, &str, &str, &str) -> Option<Vec<(f64, u64)>>,
    figures: &impl Fn(&str, &str) -> Vec<(String, String)>,
    board: &str,
    from: &str,
    to: &str,
) -> BuildComparison {
    {
        let count = |b: &str| {
            reports
                .get(&(board.to_string(), b.to_string()))
                .copied()
                .unwrap_or(0)
        };
        let mut keys = figures(board, from);
        keys.sort();
        let mut regressions = Vec::new();
        let mut compared = 0;
        for (class, metric) in &keys {
            let (class, metric) = (class.as_str(), metric.as_str());
            let (Some(a), Some(b)) = (
                pairs(board, from, class, metric),
                pairs(board, to, class, metric),
            ) else {
                continue;
            };
            let n = |v: &[(f64, u64)]| v.iter().map(|p| p.1).sum::<u64>() as usize;
            let (na, nb) = (n(&a), n(&b));
            if na < MIN_REPORTS || nb < MIN_REPORTS {
                continue;
            }
            compared += 1;
            let median =
                |v: &[(f64, u64)]| super::stats::weighted_percentile(v, 50.0).unwrap_or(f64::NAN);
            let (ma, mb) = (median(&a), median(&b));
            if ma == 0.0 {
                continue;
            }
            let change = (mb - ma) / ma.abs() * 100.0;
            let worse = if lower_is_better(metric) {
                change > 0.0
            } else {
                change < 0.0
            };
            let p = mann_whitney_p_pairs(&a, &b);
            if worse && change.abs() >= MIN_CHANGE_PERCENT && p < MAX_P {
                regressions.push(Regression {
                    words: format!(
                        "{metric} on {class}, board {board}: {change:+.0} % from {from} to {to} \
                         ({}, n = {na} / {nb})",
                        p_words(p),
                    ),
                    class: class.into(),
                    metric: metric.into(),
                    change_percent: change,
                    p_value: p,
                    n_from: na,
                    n_to: nb,
                });
            }
        }
        let note = (compared == 0).then(|| {
            format!(
                "too few reports to compare {from} with {to} on board {board} ({} / {}; at \
                 least {MIN_REPORTS} figures of each build are needed)",
                count(from),
                count(to)
            )
        });
        BuildComparison {
            board: board.into(),
            from: from.into(),
            to: to.into(),
            reports_from: count(from),
            reports_to: count(to),
            compared,
            regressions,
            note,
        }
    }
}

/// Whether a larger figure is worse, as the metric table says: the fleet's names are
/// `<workload>.<metric id>` or a device-level id (`link_mbps`).
fn lower_is_better(metric: &str) -> bool {
    let id = metric.rsplit('.').next().unwrap_or(metric);
    usbperf_report::metric::ALL
        .iter()
        .find(|m| m.id == id)
        .is_some_and(|m| m.better == usbperf_report::metric::Better::Lower)
}

fn p_words(p: f64) -> String {
    if p < 0.001 {
        "p < 0.001".into()
    } else {
        format!("p = {p:.3}")
    }
}

/// One build against the one before it on one board.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BuildComparison {
    pub board: String,
    pub from: String,
    pub to: String,
    pub reports_from: usize,
    pub reports_to: usize,
    /// Figures (class and metric) with enough reports on both sides to be compared.
    pub compared: usize,
    pub regressions: Vec<Regression>,
    /// Why nothing was compared, when nothing was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A figure that got worse from one build to the next, beyond noise and beyond a trifle.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Regression {
    pub class: String,
    pub metric: String,
    /// The change of the median, in % of the earlier build's.
    pub change_percent: f64,
    /// Two-sided p of the Mann-Whitney U test.
    pub p_value: f64,
    pub n_from: usize,
    pub n_to: usize,
    pub words: String,
}

/// The two-sided p of the Mann-Whitney U test of `a` against `b`: the normal approximation
/// with the tie correction and a continuity correction of 0.5, good from about 8 values a
/// side (the comparison's minimum). 1 when every value is equal.
pub fn mann_whitney_p(a: &[f64], b: &[f64]) -> f64 {
    let pairs = |v: &[f64]| {
        let mut p: Vec<(f64, u64)> = v.iter().map(|x| (*x, 1)).collect();
        super::stats::sort_weighted(&mut p);
        p
    };
    mann_whitney_p_pairs(&pairs(a), &pairs(b))
}

/// [`mann_whitney_p`] of values given as (value, times), ascending (as
/// [`super::stats::sort_weighted`] leaves them, or a sketch's pairs): equal values are ties.
pub fn mann_whitney_p_pairs(a: &[(f64, u64)], b: &[(f64, u64)]) -> f64 {
    let n1 = a.iter().map(|p| p.1).sum::<u64>() as f64;
    let n2 = b.iter().map(|p| p.1).sum::<u64>() as f64;
    if n1 == 0.0 || n2 == 0.0 {
        return 1.0;
    }
    // Walk both in order: each distinct value is a tie group of its counts on either side,
    // ranked at the average of the ranks it spans.
    let (mut i, mut j) = (0, 0);
    let mut below = 0.0;
    let mut rank_a = 0.0;
    let mut tie_term = 0.0;
    while i < a.len() || j < b.len() {
        let v = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) => x.0.min(y.0),
            (Some(x), None) => x.0,
            (None, Some(y)) => y.0,
            (None, None) => break,
        };
        let mut ca = 0.0;
        while i < a.len() && a[i].0 == v {
            ca += a[i].1 as f64;
            i += 1;
        }
        let mut cb = 0.0;
        while j < b.len() && b[j].0 == v {
            cb += b[j].1 as f64;
            j += 1;
        }
        let t = ca + cb;
        let avg = below + (t + 1.0) / 2.0;
        tie_term += t * t * t - t;
        rank_a += avg * ca;
        below += t;
    }
    let u1 = rank_a - n1 * (n1 + 1.0) / 2.0;
    let mean = n1 * n2 / 2.0;
    let n = n1 + n2;
    let var = n1 * n2 / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)));
    if var <= 0.0 {
        return 1.0;
    }
    let z = ((u1 - mean).abs() - 0.5).max(0.0) / var.sqrt();
    (2.0 * normal_upper_tail(z)).min(1.0)
}

/// P(Z > z) for a standard normal Z: `erfc(z / sqrt 2) / 2`, with erfc from W. J. Cody's
/// rational approximation as in Numerical Recipes' `erfcc` (fractional error below 1.2e-7).
fn normal_upper_tail(z: f64) -> f64 {
    let x = z / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * x.abs());
    let poly = -x * x - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    let erfc = if x >= 0.0 { erfc } else { 2.0 - erfc };
    erfc / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_normal_tail_matches_the_table() {
        // Standard normal upper tail probabilities (any statistics table).
        for (z, p) in [
            (0.0, 0.5),
            (1.0, 0.158_655_25),
            (1.959_963_98, 0.025),
            (3.290_526_73, 0.000_5),
            (-1.0, 0.841_344_75),
        ] {
            assert!(
                (normal_upper_tail(z) - p).abs() < 2e-7,
                "{z}: {}",
                normal_upper_tail(z)
            );
        }
    }

    #[test]
    fn the_rank_test_separates_shifted_samples_and_not_equal_ones() {
        let a: Vec<f64> = (0..20).map(|i| 100.0 + i as f64).collect();
        // The same values: U is its mean, p is 1.
        assert!((mann_whitney_p(&a, &a) - 1.0).abs() < 1e-9);
        // Every value of b below every value of a: U = 0, the most extreme outcome.
        let b: Vec<f64> = (0..20).map(|i| 50.0 + i as f64).collect();
        let p = mann_whitney_p(&a, &b);
        // z = (200 - 0.5) / sqrt(20 * 20 * 41 / 12) = 5.3973; 2 * P(Z > z) = 6.8e-8.
        assert!(p < 1e-7 && p > 1e-8, "{p}");
        // Symmetric in its arguments.
        assert!((mann_whitney_p(&b, &a) - p).abs() < 1e-15);
        // Ties: all equal on both sides.
        assert_eq!(mann_whitney_p(&[3.0; 9], &[3.0; 9]), 1.0);
        // Interleaved: no evidence.
        let odd: Vec<f64> = (0..20).map(|i| (2 * i + 1) as f64).collect();
        let even: Vec<f64> = (0..20).map(|i| (2 * i) as f64).collect();
        assert!(mann_whitney_p(&odd, &even) > 0.5);
    }

    fn t(day: u32) -> DateTime<Utc> {
        format!("2026-10-{day:02}T08:00:00Z").parse().unwrap()
    }

    #[test]
    fn a_slower_build_is_named_and_noise_or_a_small_pair_is_not() {
        let mut v = BuildValues::default();
        for i in 0..30 {
            let wobble = (i % 7) as f64 * 0.3;
            v.report("B", "acme 7.1.0", t(1 + i / 10));
            v.add(
                "B",
                "acme 7.1.0",
                "emmc",
                "seq-write.mib_per_s",
                50.0 + wobble,
            );
            v.add(
                "B",
                "acme 7.1.0",
                "emmc",
                "seq-read.mib_per_s",
                90.0 + wobble,
            );
            v.report("B", "acme 7.2.0", t(10 + i / 10));
            // 18 % slower writes; reads the same but for the noise.
            v.add(
                "B",
                "acme 7.2.0",
                "emmc",
                "seq-write.mib_per_s",
                41.0 + wobble,
            );
            v.add(
                "B",
                "acme 7.2.0",
                "emmc",
                "seq-read.mib_per_s",
                90.1 + wobble,
            );
        }
        for i in 0..3 {
            v.report("B", "acme 7.3.0", t(20 + i));
            v.add("B", "acme 7.3.0", "emmc", "seq-write.mib_per_s", 20.0);
        }
        let c = v.compare();
        assert_eq!(c.len(), 2, "{c:#?}");
        assert_eq!(
            (c[0].from.as_str(), c[0].to.as_str()),
            ("acme 7.1.0", "acme 7.2.0")
        );
        assert_eq!(c[0].compared, 2);
        assert_eq!(c[0].regressions.len(), 1, "{:#?}", c[0].regressions);
        let r = &c[0].regressions[0];
        assert_eq!(r.metric, "seq-write.mib_per_s");
        // The median wobble is 0.9: -9 / 50.9.
        assert!(
            (r.change_percent - -9.0 / 50.9 * 100.0).abs() < 1e-9,
            "{r:?}"
        );
        assert!(
            r.words.starts_with(
                "seq-write.mib_per_s on emmc, board B: -18 % from acme 7.1.0 to acme 7.2.0 \
                 (p < 0.001, n = 30 / 30)"
            ),
            "{}",
            r.words
        );
        // Three reports of 7.3.0: said, not guessed, however slow they look.
        assert!(c[1].regressions.is_empty());
        assert_eq!(
            c[1].note.as_deref(),
            Some(
                "too few reports to compare acme 7.2.0 with acme 7.3.0 on board B (30 / 3; at \
                 least 8 figures of each build are needed)"
            )
        );
    }

    #[test]
    fn faster_and_lower_latency_are_no_regression_and_higher_latency_is() {
        let mut v = BuildValues::default();
        for i in 0..12 {
            let w = i as f64 * 0.1;
            v.report("B", "1", t(1));
            v.report("B", "2", t(2));
            v.add("B", "1", "usb", "rand-read.iops", 1000.0 + w);
            v.add("B", "2", "usb", "rand-read.iops", 1300.0 + w);
            v.add("B", "1", "usb", "rand-read.p99_latency_ms", 10.0 + w);
            v.add("B", "2", "usb", "rand-read.p99_latency_ms", 14.0 + w);
        }
        let c = v.compare();
        let names: Vec<&str> = c[0].regressions.iter().map(|r| r.metric.as_str()).collect();
        assert_eq!(names, ["rand-read.p99_latency_ms"]);
    }
}
