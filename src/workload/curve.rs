//! Owns the `write-curve` workload: a long sequential write sampled over time, its throughput
//! curve and knee detection (where sustained throughput drops, e.g. when an SLC cache is
//! exhausted).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{plans, Measured, Procedure, WorkloadError};
use crate::engine::Access;

/// One sample: the interval ending at `t_s` seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CurveSample {
    pub t_s: f64,
    pub cumulative_mib: f64,
    pub mib_per_s: f64,
}

/// The point where throughput drops for good.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Knee {
    /// Time from the start of the write to the knee.
    pub t_s: f64,
    /// Data written before the knee.
    pub cumulative_mib: f64,
    pub before_mib_per_s: f64,
    pub after_mib_per_s: f64,
    pub drop_percent: f64,
}

/// The curve and its knee, as reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CurveReport {
    pub interval_ms: u64,
    pub samples: Vec<CurveSample>,
    pub knee: Option<Knee>,
}

/// Each side of a knee needs this many samples, so one slow sample is not a knee.
const MIN_SIDE_SAMPLES: usize = 3;
/// A knee is a drop of sustained throughput by at least this share.
const MIN_DROP: f64 = 0.20;
/// The two-level fit must explain at least this share of the variance of the rates: a noisy
/// but flat curve has no step worth reporting.
const MIN_EXPLAINED: f64 = 0.5;

/// Builds samples from cumulative byte counts taken at `times_s` (the first pair is the start).
pub fn samples_from_progress(points: &[(f64, u64)]) -> Vec<CurveSample> {
    points
        .windows(2)
        .filter(|w| w[1].0 > w[0].0)
        .map(|w| {
            let (t0, b0) = w[0];
            let (t1, b1) = w[1];
            CurveSample {
                t_s: t1,
                cumulative_mib: b1 as f64 / 1048576.0,
                mib_per_s: (b1 - b0) as f64 / 1048576.0 / (t1 - t0),
            }
        })
        .collect()
}

/// Finds the knee by fitting two constant levels (before and after a split) to the per-sample
/// rates and keeping the split with the least squared error; it is a knee when the later level
/// is at least 20 % lower and the step explains most of the variance.
pub fn detect_knee(samples: &[CurveSample]) -> Option<Knee> {
    let n = samples.len();
    if n < 2 * MIN_SIDE_SAMPLES {
        return None;
    }
    let rates: Vec<f64> = samples.iter().map(|s| s.mib_per_s).collect();
    let mut sum = vec![0.0; n + 1];
    let mut sum_sq = vec![0.0; n + 1];
    for (i, r) in rates.iter().enumerate() {
        sum[i + 1] = sum[i] + r;
        sum_sq[i + 1] = sum_sq[i] + r * r;
    }
    // Squared error of rates[a..b] around their mean.
    let sse = |a: usize, b: usize| {
        let count = (b - a) as f64;
        let s = sum[b] - sum[a];
        (sum_sq[b] - sum_sq[a]) - s * s / count
    };
    let total = sse(0, n);
    let (split, best) = (MIN_SIDE_SAMPLES..=n - MIN_SIDE_SAMPLES)
        .map(|k| (k, sse(0, k) + sse(k, n)))
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    let before = (sum[split] - sum[0]) / split as f64;
    let after = (sum[n] - sum[split]) / (n - split) as f64;
    if before <= 0.0 || after > before * (1.0 - MIN_DROP) {
        return None;
    }
    if total > 0.0 && (total - best) / total < MIN_EXPLAINED {
        return None;
    }
    let last_fast = &samples[split - 1];
    Some(Knee {
        t_s: last_fast.t_s,
        cumulative_mib: last_fast.cumulative_mib,
        before_mib_per_s: before,
        after_mib_per_s: after,
        drop_percent: (1.0 - after / before) * 100.0,
    })
}

/// The `write-curve` procedure: a sequential write, its progress sampled every
/// `sample_interval_ms` (10 ms at least) while it runs, and the knee of the curve.
pub(super) fn run(
    p: &Procedure<'_>,
    measured: &mut Measured,
) -> Result<CurveReport, WorkloadError> {
    let params = p.params;
    let s = p.spec(
        plans(params, p.region_bytes, Access::Sequential, 0)?,
        p.runtime,
    );
    let interval = Duration::from_millis(params.sample_interval_ms.max(10));
    let (outcome, points) = super::run_sampled(p.engine, &s, interval, false, None);
    let outcome = outcome?;
    measured.add(&outcome);
    let samples = samples_from_progress(&points);
    let knee = detect_knee(&samples);
    Ok(CurveReport {
        interval_ms: params.sample_interval_ms,
        samples,
        knee,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic ±3 % noise, so the tests do not depend on a random generator.
    fn noise(i: usize) -> f64 {
        1.0 + 0.03 * (((i * 7919) % 13) as f64 / 6.0 - 1.0)
    }

    /// Shaped like the Zynq seed (dd to a USB stick): ~23.3 MB/s while the cache lasts
    /// (176 MB), then 12.5 MB/s for good, sampled every second up to 2.5 GB. The average so far
    /// is 23.32 MB/s at 100 MB and ~14.9 MB/s at 500 MB, then flattens after ~2 GB.
    fn zynq_like() -> (Vec<CurveSample>, Vec<(f64, u64)>) {
        let mb = 1_000_000.0;
        let (fast, slow, cache) = (23.32 * mb, 12.5 * mb, 176.0 * mb);
        let cache_s = cache / fast;
        let mut points = vec![(0.0, 0u64)];
        let mut t = 0.0;
        let mut i = 0;
        while points.last().unwrap().1 < 2_500_000_000 {
            t += 1.0;
            i += 1;
            let ideal = if t <= cache_s {
                fast * t
            } else {
                cache + slow * (t - cache_s)
            };
            // Noise on each interval's increment, never going backwards.
            let prev = points.last().unwrap().1 as f64;
            let prev_ideal = if t - 1.0 <= cache_s {
                fast * (t - 1.0)
            } else {
                cache + slow * (t - 1.0 - cache_s)
            };
            let bytes = prev + (ideal - prev_ideal) * noise(i);
            points.push((t, bytes as u64));
        }
        (samples_from_progress(&points), points)
    }

    #[test]
    fn zynq_shaped_curve_has_its_knee_at_the_cache_size() {
        let (samples, points) = zynq_like();
        // The data really has the seed's shape: average so far at 100 MB and at 500 MB.
        let avg_at = |bytes: f64| {
            let &(t, b) = points.iter().find(|p| p.1 as f64 >= bytes).unwrap();
            b as f64 / 1e6 / t
        };
        assert!((avg_at(100e6) - 23.32).abs() < 1.0, "{}", avg_at(100e6));
        assert!((avg_at(500e6) - 14.94).abs() < 1.0, "{}", avg_at(500e6));
        let knee = detect_knee(&samples).expect("the drop after the cache is a knee");
        // The cache runs out at 176 MB = 7.55 s.
        assert!((6.0..=9.0).contains(&knee.t_s), "{knee:?}");
        let knee_mb = knee.cumulative_mib * 1048576.0 / 1e6;
        assert!((150.0..=200.0).contains(&knee_mb), "{knee:?}");
        let mib = 1e6 / 1048576.0;
        assert!(
            (knee.before_mib_per_s - 23.32 * mib).abs() < 1.5,
            "{knee:?}"
        );
        assert!((knee.after_mib_per_s - 12.5 * mib).abs() < 0.5, "{knee:?}");
        assert!(knee.drop_percent > 40.0, "{knee:?}");
    }

    #[test]
    fn flat_noisy_curve_has_no_knee() {
        let samples: Vec<CurveSample> = (1..=60)
            .map(|i| CurveSample {
                t_s: i as f64,
                cumulative_mib: 20.0 * i as f64,
                mib_per_s: 20.0 * noise(i),
            })
            .collect();
        assert_eq!(detect_knee(&samples), None);
    }

    #[test]
    fn one_slow_sample_is_not_a_knee() {
        let samples: Vec<CurveSample> = (1..=30)
            .map(|i| CurveSample {
                t_s: i as f64,
                cumulative_mib: 0.0,
                mib_per_s: if i == 29 { 2.0 } else { 20.0 },
            })
            .collect();
        assert_eq!(detect_knee(&samples), None);
    }

    #[test]
    fn short_curves_have_no_knee() {
        let samples: Vec<CurveSample> = (1..=5)
            .map(|i| CurveSample {
                t_s: i as f64,
                cumulative_mib: 0.0,
                mib_per_s: if i < 3 { 100.0 } else { 10.0 },
            })
            .collect();
        assert_eq!(detect_knee(&samples), None);
    }

    #[test]
    fn samples_are_rates_between_points() {
        let s = samples_from_progress(&[(0.0, 0), (1.0, 1 << 20), (3.0, 5 << 20)]);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].mib_per_s, 1.0);
        assert_eq!(s[1].mib_per_s, 2.0);
        assert_eq!(s[1].cumulative_mib, 5.0);
    }
}
