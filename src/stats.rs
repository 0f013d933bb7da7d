//! Owns the figures every result carries: throughput, IOPS, latency percentiles and stalls from
//! the merged hdrhistogram, and CPU time per I/O; all serde types for the YAML/JSON report.

use serde::{Deserialize, Serialize};

use crate::engine::OpStats;

/// An I/O slower than this is a stall (USB resets, garbage collection, thermal throttling).
pub const STALL_NS: u64 = 1_000_000_000;
/// An I/O slower than this is a long stall (the kind that trips watchdogs).
pub const LONG_STALL_NS: u64 = 5_000_000_000;

/// Completion latency, submit to completion, in ns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LatencySummary {
    pub min_ns: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p99_9_ns: u64,
    pub max_ns: u64,
}

/// I/Os slower than 1 s and 5 s, and the slowest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Stalls {
    pub over_1s: u64,
    pub over_5s: u64,
    pub longest_ns: u64,
}

/// The figures of one direction (reads or writes), or of both merged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct OpFigures {
    pub ios: u64,
    pub bytes: u64,
    pub mib_per_s: f64,
    pub iops: f64,
    pub latency: LatencySummary,
    pub stalls: Stalls,
}

/// CPU time of the threads that ran the jobs (getrusage RUSAGE_THREAD, summed), and per I/O.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CpuFigures {
    pub usr_s: f64,
    pub sys_s: f64,
    /// Of one CPU over the wall time of the run (200 means two CPUs busy).
    pub usr_percent: f64,
    pub sys_percent: f64,
    /// (usr + sys) / I/Os, in ns.
    pub cpu_ns_per_io: f64,
}

impl OpFigures {
    /// Summarises counters gathered over `seconds` of wall time.
    pub fn from_stats(stats: &OpStats, seconds: f64) -> Self {
        let hist = &stats.latency_ns;
        let latency = if stats.ios == 0 {
            LatencySummary::default()
        } else {
            LatencySummary {
                min_ns: hist.min(),
                mean_ns: hist.mean().round() as u64,
                p50_ns: hist.value_at_quantile(0.50),
                p90_ns: hist.value_at_quantile(0.90),
                p99_ns: hist.value_at_quantile(0.99),
                p99_9_ns: hist.value_at_quantile(0.999),
                max_ns: hist.max(),
            }
        };
        let stalls = Stalls {
            over_1s: count_at_least(stats, STALL_NS),
            over_5s: count_at_least(stats, LONG_STALL_NS),
            longest_ns: if stats.ios == 0 { 0 } else { hist.max() },
        };
        OpFigures {
            ios: stats.ios,
            bytes: stats.bytes,
            mib_per_s: crate::units::mib_per_s(stats.bytes, seconds),
            iops: if seconds > 0.0 {
                stats.ios as f64 / seconds
            } else {
                0.0
            },
            latency,
            stalls,
        }
    }
}

fn count_at_least(stats: &OpStats, threshold_ns: u64) -> u64 {
    let hist = &stats.latency_ns;
    if stats.ios == 0 || hist.max() < threshold_ns {
        return 0;
    }
    hist.count_between(threshold_ns, hist.max())
}

impl CpuFigures {
    pub fn new(usr_ns: u64, sys_ns: u64, wall_ns: u64, ios: u64) -> Self {
        let pct = |ns: u64| {
            if wall_ns > 0 {
                ns as f64 * 100.0 / wall_ns as f64
            } else {
                0.0
            }
        };
        CpuFigures {
            usr_s: usr_ns as f64 / 1e9,
            sys_s: sys_ns as f64 / 1e9,
            usr_percent: pct(usr_ns),
            sys_percent: pct(sys_ns),
            cpu_ns_per_io: if ios > 0 {
                (usr_ns + sys_ns) as f64 / ios as f64
            } else {
                0.0
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_stalls_come_from_the_histogram() {
        let mut stats = OpStats::new();
        for i in 1..=1000u64 {
            stats.record(4096, i * 1000);
        }
        stats.record(4096, 2 * STALL_NS);
        stats.record(4096, 6 * STALL_NS);
        let fig = OpFigures::from_stats(&stats, 2.0);
        assert_eq!(fig.ios, 1002);
        assert_eq!(fig.bytes, 1002 * 4096);
        assert_eq!(fig.iops, 501.0);
        assert_eq!(fig.latency.min_ns, 1000);
        // The 1002 values put the median near 501 µs; 3 significant digits keep it within 0.5 %.
        assert!(
            (fig.latency.p50_ns as f64 - 501_000.0).abs() < 2500.0,
            "{fig:?}"
        );
        assert!(
            (fig.latency.p90_ns as f64 - 902_000.0).abs() < 4500.0,
            "{fig:?}"
        );
        assert_eq!(fig.stalls.over_1s, 2);
        assert_eq!(fig.stalls.over_5s, 1);
        assert!(fig.stalls.longest_ns >= 6 * STALL_NS);
    }

    #[test]
    fn empty_stats_are_all_zero() {
        let fig = OpFigures::from_stats(&OpStats::new(), 1.0);
        assert_eq!(fig, OpFigures::default());
    }

    #[test]
    fn cpu_per_io_divides_total_time() {
        let cpu = CpuFigures::new(3_000, 1_000, 8_000, 4);
        assert_eq!(cpu.cpu_ns_per_io, 1000.0);
        assert_eq!(cpu.usr_percent, 37.5);
        assert_eq!(cpu.sys_percent, 12.5);
    }
}

/// How repeatable a result's figure is, from its rate in windows of about equal length while
/// it ran, each timed at its last completion where the completions pause (whole I/Os over the
/// time they took, a burst never cut): the first window (warm-up) and the last (the drain,
/// the I/O in flight at the bound completing with nothing after it) are dropped; the rest
/// give the mean rate, the 95 % confidence interval of that mean (Student's t over batch
/// means of the windows, see [`batched`]), and the trend (the least-squares line's change over
/// the run, as fio's steady-state `bw_slope` reads it).
/// It holds for MiB/s and IOPS alike (a test's I/Os have one size). A device's own rhythm can
/// be slower than the batches, so the interval is a lower bound of the spread between runs;
/// `calibrate`'s repeated runs measure that.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Precision {
    /// The windows' length.
    pub window_ms: u64,
    /// The rate of each window after the warm-up, MiB/s (at most 128: longer runs merge
    /// neighbouring windows, doubling `window_ms`, so a report stays small).
    pub samples_mib_per_s: Vec<f64>,
    /// Half the 95 % confidence interval of the mean rate, in % of it; absent with fewer
    /// than [`MIN_WINDOWS`] windows: the figure's precision is then not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci95_percent: Option<f64>,
    /// The rate's change from the first window to the last along the least-squares line, in
    /// % of the mean (a write cache filling shows as a large negative trend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trend_percent: Option<f64>,
    /// Steady state reached: the windows the judged rate rests on (after a drop, those
    /// after it) are at least [`MIN_WINDOWS`] and their trend is within
    /// ±[`STEADY_TREND_PERCENT`] %.
    pub steady: bool,
    /// The rate after a drop (a write cache that filled): absent when the rate held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop: Option<Drop>,
    /// The rate of the windows after the warm-up, MiB/s (the median of the slopes between
    /// every two window edges of the MiB done, Theil-Sen), without the drain: the device's
    /// steady rate, which limits judge and tables show (a burst the device allows after idle,
    /// or a ramp-up, is not the device's rate); absent with fewer than [`MIN_WINDOWS`]
    /// windows, when the whole test's figure stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_mib_per_s: Option<f64>,
}

/// A fall of the rate partway through a run, as a stick's write cache filling makes it: the
/// windows split where two levels fit them best, the later level at most
/// [`DROP_RATIO`] of the earlier and the split explaining at least [`DROP_FIT`] of the
/// windows' variance (one slow window in a steady run is noise, not a drop).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Drop {
    /// Seconds from the first kept window to the drop.
    pub at_s: f64,
    /// The rate before it (the burst, e.g. into the cache), MiB/s.
    pub burst_mib_per_s: f64,
    /// The rate after it, MiB/s: the sustained figure that limits judge.
    pub sustained_mib_per_s: f64,
    /// Half the 95 % confidence interval of the sustained rate, in % of it; absent with
    /// fewer than [`MIN_WINDOWS`] windows after the drop: steady state was not reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci95_percent: Option<f64>,
}

/// The later level of a drop is at most this share of the earlier one.
pub const DROP_RATIO: f64 = 0.6;
/// The share of the windows' variance the two levels explain, at least.
pub const DROP_FIT: f64 = 0.6;

/// Windows (after the warm-up) a figure needs before its precision is stated.
pub const MIN_WINDOWS: usize = 4;
/// The largest trend over a run that is still steady (fio's `ss=bw_slope:10%` reads alike).
pub const STEADY_TREND_PERCENT: f64 = 10.0;
/// Windows kept in a report; a longer run merges neighbours.
const MAX_WINDOWS: usize = 128;

/// Student's t for a two-sided 95 % interval with `df` degrees of freedom.
fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => T[df - 1],
        31..=60 => 2.000,
        61..=120 => 1.980,
        _ => 1.960,
    }
}

impl Precision {
    /// From progress samples `(seconds since the start, bytes done)`, taken every
    /// `window_ms`, the last one at the end of the run (a last window shorter than half a
    /// window is dropped: its rate would rest on too little).
    pub fn from_progress(points: &[(f64, u64)], window_ms: u64) -> Precision {
        let w = window_ms as f64 / 1000.0;
        // Windows as (seconds, MiB): a span shorter than half a window joins the next one (a
        // last one joins the one before), so no rate rests on too little time.
        let mut spans: Vec<(f64, f64)> = Vec::new();
        let mut pending = (0.0, 0.0);
        for p in points.windows(2) {
            pending.0 += p[1].0 - p[0].0;
            pending.1 += p[1].1.saturating_sub(p[0].1) as f64 / (1 << 20) as f64;
            if pending.0 >= w / 2.0 {
                spans.push(std::mem::take(&mut pending));
            }
        }
        if let Some(last) = spans.last_mut() {
            last.0 += pending.0;
            last.1 += pending.1;
        }
        // The first window is warm-up, the last the drain (the I/O in flight at the bound,
        // completing with nothing issued after it): neither is a window of the steady rate.
        spans.pop();
        // A burst that fits in the warm-up (a write cache taking its fill in the first
        // window) still counts for the drop: the warm-up may be its whole "before".
        let with_warm_up: Vec<f64> = spans.iter().map(|&(t, m)| m / t).collect();
        let warm_up = (!spans.is_empty()).then(|| spans.remove(0));
        let mut window_ms = window_ms;
        while spans.len() > MAX_WINDOWS {
            spans = spans.chunks(2).map(merged).collect();
            window_ms *= 2;
        }
        let rates: Vec<f64> = spans.iter().map(|&(t, m)| m / t).collect();
        let n = rates.len();
        // The steady rate: the windows after the warm-up, the median of the slopes of the MiB
        // done between every two window edges (Theil-Sen, [`steady_rate`]). The drain stays
        // out: it is the I/O left in flight at the bound completing with nothing behind it (on
        // a throttle, the last I/O waiting for its next slice), and read 10 % low on a 30
        // MiB/s throttle whose windows all read 30. The slope rests on every edge, where bytes
        // over time rest on the first and the last, and the median of the slopes leaves out
        // the few edges a hiccup moved (the host late to submit for a window, a point taken
        // inside a burst), which move a least-squares line: on 30 recorded runs of the quick
        // profile on a throttled stick the figure's spread (one sigma) went from 1.06 % to
        // 0.62 % for random reads and from 0.19 % to 0.02 % for read-buffered, a sequential
        // write's 0.17 % low reading went away, and a 70/30 mix went from 0.37 % to 0.46 %
        // (0.27-0.50 % on 46 more runs with edges where the completions pause).
        let whole = steady_rate(&spans);
        let round = |v: f64| (v * 1000.0).round() / 1000.0;
        let hundredths = |v: f64| (v * 100.0).round() / 100.0;
        // Indices of `with_warm_up`: window k there is window k - 1 of `spans`. The warm-up
        // joins the "before" only alone (a slow ramp-up would spoil the fit of a real one).
        let found = find_drop(&rates, 1..=n.saturating_sub(2))
            .map(|(k, before, after)| (k + 1, before, after))
            .or_else(|| find_drop(&with_warm_up, 1..=1));
        // After a drop the sustained rate is measured as the steady rate is, over the windows
        // after it (the same median of slopes, the same batches for its interval): a burst
        // that fits in the warm-up (64 random I/Os landing at once before a throttle queues
        // them) leaves the same windows, and a mean of window rates there moved 1.1 % (one
        // sigma) from run to run on a 70/30 mix where the slope moved 0.8 %.
        let after = found.map(|(k, _, _)| steady_rate(&spans[k - 1..]));
        let drop = found
            .zip(after.as_ref())
            .map(|((k, before, after), rate)| Drop {
                at_s: hundredths(
                    warm_up.map_or(0.0, |w| w.0) + spans[..k - 1].iter().map(|s| s.0).sum::<f64>(),
                ),
                burst_mib_per_s: round(before),
                sustained_mib_per_s: round(rate.slope.unwrap_or(after)),
                ci95_percent: rate.ci95_percent.map(hundredths),
            });
        // Steady state: the windows the judged rate rests on (after a drop, those after it)
        // are enough to state its precision and hold their level. A cache that filled in the
        // warm-up leaves a steady run after it; one that fills later leaves few windows.
        let judged_rate = after.as_ref().unwrap_or(&whole);
        let steady = judged_rate.ci95_percent.is_some()
            && judged_rate
                .trend_percent
                .is_some_and(|t| t.abs() <= STEADY_TREND_PERCENT);
        Precision {
            window_ms,
            samples_mib_per_s: rates.into_iter().map(round).collect(),
            ci95_percent: whole.ci95_percent.map(hundredths),
            trend_percent: whole.trend_percent.map(hundredths),
            steady,
            drop,
            steady_mib_per_s: whole.slope.map(round),
        }
    }

    /// Whether the figure is known to `target_percent`: steady, and its interval at most that.
    pub fn known_to(&self, target_percent: f64) -> bool {
        self.steady && self.ci95_percent.is_some_and(|c| c <= target_percent)
    }
}

/// The steady rate of windows `(seconds, MiB)` and what is known of it.
struct SteadyRate {
    /// The median of the slopes of the MiB done between every two window edges, MiB/s.
    slope: Option<f64>,
    /// Half the 95 % confidence interval of the batches' mean rate, in % of it.
    ci95_percent: Option<f64>,
    /// The batches' rate change over the run along their least-squares line, in % of it.
    trend_percent: Option<f64>,
}

/// The rate of `spans` (the median of the slopes between their edges) and its interval and
/// trend from whole batches ([`batched`]): all `None` with fewer than [`MIN_WINDOWS`] windows.
fn steady_rate(spans: &[(f64, f64)]) -> SteadyRate {
    let batch_spans = batched(spans);
    let mut out = SteadyRate {
        slope: theil_sen(spans).filter(|_| spans.len() >= MIN_WINDOWS),
        ci95_percent: None,
        trend_percent: None,
    };
    if let Some(batches) = batch_spans.as_ref().map(|(b, _)| rates_of(b)) {
        let m = batches.len();
        let mean = batches.iter().sum::<f64>() / m as f64;
        if mean > 0.0 {
            out.ci95_percent = ci95(&batches);
            let xm = (m - 1) as f64 / 2.0;
            let (mut sxy, mut sxx) = (0.0, 0.0);
            for (i, r) in batches.iter().enumerate() {
                sxy += (i as f64 - xm) * (r - mean);
                sxx += (i as f64 - xm).powi(2);
            }
            out.trend_percent = Some(sxy / sxx * (m - 1) as f64 / mean * 100.0);
        }
    }
    out
}

/// Two windows as one: their time and their MiB added.
fn merged(c: &[(f64, f64)]) -> (f64, f64) {
    c.iter().fold((0.0, 0.0), |a, s| (a.0 + s.0, a.1 + s.1))
}

/// The Theil-Sen slope, MiB/s, of the MiB done against the time at the edges of consecutive
/// spans `(seconds, MiB)`: the median of the slopes between every two edges (at most 129
/// edges, as windows are merged past 128); `None` for no time.
fn theil_sen(spans: &[(f64, f64)]) -> Option<f64> {
    let mut edges = vec![(0.0, 0.0)];
    for &(t, m) in spans {
        let (x, y) = edges[edges.len() - 1];
        edges.push((x + t, y + m));
    }
    let mut slopes: Vec<f64> = edges
        .iter()
        .enumerate()
        .flat_map(|(i, a)| edges[i + 1..].iter().map(move |b| (a, b)))
        .filter(|(a, b)| b.0 > a.0)
        .map(|(a, b)| (b.1 - a.1) / (b.0 - a.0))
        .collect();
    slopes.sort_by(f64::total_cmp);
    let n = slopes.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(slopes[n / 2]),
        _ => Some((slopes[n / 2 - 1] + slopes[n / 2]) / 2.0),
    }
}

/// The rates of spans `(seconds, MiB)`.
fn rates_of(spans: &[(f64, f64)]) -> Vec<f64> {
    spans.iter().map(|&(t, m)| m / t).collect()
}

/// The windows as batches `(seconds, MiB)` and how many windows each holds, for the interval
/// and the trend: neighbouring windows are merged, two by two, while the batches' rates still
/// follow each other (their lag-1 autocorrelation beyond what chance gives), as long as
/// [`MIN_WINDOWS`] batches remain; `None` with fewer than [`MIN_WINDOWS`] windows.
/// A device that completes I/O in bursts (a throttle's time slices, a controller's rhythm)
/// alternates fast and slow windows around a steady rate; counted as independent they would
/// overstate the spread of the rate many times.
fn batched(spans: &[(f64, f64)]) -> Option<(Vec<(f64, f64)>, usize)> {
    let (mut batches, mut size) = (spans.to_vec(), 1);
    loop {
        let rates = rates_of(&batches);
        let n = rates.len();
        if n < MIN_WINDOWS {
            return None;
        }
        let limit = (2.0 / (n as f64).sqrt()).max(0.2);
        if n / 2 < MIN_WINDOWS || lag1(&rates).abs() <= limit {
            return Some((batches, size));
        }
        // With an odd count the oldest window stays out: a batch of one or of three would
        // weigh the rhythm's phases unevenly.
        let from = batches.len() % 2;
        batches = batches[from..].chunks(2).map(merged).collect();
        size *= 2;
    }
}

/// The lag-1 autocorrelation of a series (0 for a constant one).
fn lag1(x: &[f64]) -> f64 {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var: f64 = x.iter().map(|v| (v - mean).powi(2)).sum();
    if var <= 0.0 {
        return 0.0;
    }
    x.windows(2)
        .map(|p| (p[0] - mean) * (p[1] - mean))
        .sum::<f64>()
        / var
}

/// The rate and IOPS a limit judges, one rule for the report, its tables and the fleet (it
/// lives with the report as read).
pub use usbperf_report::judged_figures;

/// The mean of `values` and half its 95 % confidence interval, in their unit (Student's t);
/// `None` with fewer than two.
pub fn mean_ci95(values: &[f64]) -> Option<(f64, f64)> {
    let n = values.len();
    if n < 2 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let var = values.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    Some((mean, t95(n - 1) * (var / n as f64).sqrt()))
}

/// Half the 95 % confidence interval of the rates' mean, in % of it (Student's t).
fn ci95(rates: &[f64]) -> Option<f64> {
    let n = rates.len();
    let mean = rates.iter().sum::<f64>() / n as f64;
    if n < 2 || mean <= 0.0 {
        return None;
    }
    let var = rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    Some(t95(n - 1) * (var / n as f64).sqrt() / mean * 100.0)
}

/// Where two levels fit the windows best, when the later one is a drop ([`Drop`]):
/// (the first window after it, the level before, the level after), trying the `splits`
/// given. The later side keeps at least two windows, so a single slow last window never
/// makes a drop.
fn find_drop(rates: &[f64], splits: std::ops::RangeInclusive<usize>) -> Option<(usize, f64, f64)> {
    let n = rates.len();
    if n < 4 || *splits.end() + 2 > n || splits.is_empty() {
        return None;
    }
    let mean = rates.iter().sum::<f64>() / n as f64;
    let total: f64 = rates.iter().map(|r| (r - mean).powi(2)).sum();
    if total <= 0.0 {
        return None;
    }
    let sse = |s: &[f64]| {
        let m = s.iter().sum::<f64>() / s.len() as f64;
        (m, s.iter().map(|r| (r - m).powi(2)).sum::<f64>())
    };
    let (k, before, after, residual) = splits
        .map(|k| {
            let ((b, e1), (a, e2)) = (sse(&rates[..k]), sse(&rates[k..]));
            (k, b, a, e1 + e2)
        })
        .min_by(|x, y| x.3.total_cmp(&y.3))?;
    (after <= before * DROP_RATIO && 1.0 - residual / total >= DROP_FIT)
        .then_some((k, before, after))
}

#[cfg(test)]
mod precision_tests {
    use super::*;

    /// Progress points of a run at `rates` MiB/s, one window each, 100 ms windows, and a
    /// drain window at 1 MiB/s after them (always dropped).
    fn points(rates: &[f64]) -> Vec<(f64, u64)> {
        let mut out = vec![(0.0, 0u64)];
        let mut bytes = 0.0;
        for (i, r) in rates.iter().chain([1.0].iter()).enumerate() {
            bytes += r * 0.1 * (1 << 20) as f64;
            out.push(((i + 1) as f64 * 0.1, bytes as u64));
        }
        out
    }

    #[test]
    fn a_steady_rate_has_a_narrow_interval_and_no_trend() {
        // The warm-up window (5 MiB/s) is dropped.
        let p = Precision::from_progress(&points(&[5.0, 30.0, 30.3, 29.7, 30.0, 30.2, 29.8]), 100);
        assert_eq!(p.samples_mib_per_s.len(), 6);
        // The steady rate leaves the warm-up (5) and the drain (1) out: six windows at 30.
        assert!((p.steady_mib_per_s.unwrap() - 30.0).abs() < 0.01, "{p:?}");
        let ci = p.ci95_percent.unwrap();
        // sd 0.2280 over 6 windows: t(5) 2.571 * 0.2280 / sqrt(6) / 30 = 0.80 %.
        assert!((ci - 0.80).abs() < 0.011, "{ci}");
        assert!(p.trend_percent.unwrap().abs() < 1.0, "{p:?}");
        assert!(p.steady);
    }

    /// Progress points recorded by the quick profile on a loop device held by cgroup v1's
    /// blkio throttle to 30 MiB/s read and 15 MiB/s write (1 MiB, QD1): a burst of 3 MiB at
    /// the start, reads landing in 100 ms slices, writes alternating 7.6 and 29 MiB/s
    /// windows, and a last I/O that waited for its slice (the drain).
    const THROTTLED_SEQ_READ: [(f64, u64); 9] = [
        (0.0, 0),
        (0.002144153, 3145728),
        (0.136545676, 6291456),
        (0.237279354, 9437184),
        (0.336425229, 12582912),
        (0.436656495, 15728640),
        (0.536803348, 18874368),
        (0.637456075, 22020096),
        (0.735927915, 23068672),
    ];
    const THROTTLED_SEQ_WRITE: [(f64, u64); 22] = [
        (0.0, 0),
        (0.002634128, 1048576),
        (0.139249697, 3145728),
        (0.269848797, 4194304),
        (0.338586962, 6291456),
        (0.470158274, 7340032),
        (0.539218562, 9437184),
        (0.669704447, 10485760),
        (0.738334385, 12582912),
        (0.869584361, 13631488),
        (0.938751058, 15728640),
        (1.069458731, 16777216),
        (1.137933997, 18874368),
        (1.268895535, 19922944),
        (1.33755288, 22020096),
        (1.468997741, 23068672),
        (1.537504776, 25165824),
        (1.672436753, 26214400),
        (1.739669958, 28311552),
        (1.869759705, 29360128),
        (1.938117444, 31457280),
        (2.069482327, 32505856),
    ];

    #[test]
    fn the_steady_rate_of_a_throttle_is_its_rate_whatever_the_drain_and_the_phase() {
        let p = Precision::from_progress(&THROTTLED_SEQ_READ, 100);
        let steady = p.steady_mib_per_s.unwrap();
        assert!((steady / 30.0 - 1.0).abs() < 0.005, "{steady} {p:?}");
        // The writes' rhythm has two windows; with one window less the span begins in the
        // other phase than it ends, which the median of the slopes between every two edges
        // does not mind.
        for cut in 0..4 {
            let points = &THROTTLED_SEQ_WRITE[..THROTTLED_SEQ_WRITE.len() - cut];
            let p = Precision::from_progress(points, 100);
            let steady = p.steady_mib_per_s.unwrap();
            assert!(
                (steady / 15.0 - 1.0).abs() < 0.01,
                "cut {cut}: {steady} {p:?}"
            );
        }
    }

    /// Random 4 KiB reads (QD16 x 4 jobs, sync engine) on a loop device held to 2,500 IOPS
    /// (9.766 MiB/s), recorded: the test stopped after 0.8 s with its figure known, and its
    /// last window before the drain caught a burst landing (12.7 MiB/s).
    const THROTTLED_RAND_READ: [(f64, u64); 9] = [
        (0.0, 0),
        (0.100193506, 2326528),
        (0.199564556, 3338240),
        (0.299635941, 4362240),
        (0.400613987, 5390336),
        (0.500612249, 6426624),
        (0.600017009, 7434240),
        (0.700517431, 8777728),
        (0.799677453, 9396224),
    ];

    #[test]
    fn an_edge_a_burst_moved_does_not_move_the_steady_rate() {
        // A least-squares line through these edges reads 10.07 MiB/s, 3 % high.
        let p = Precision::from_progress(&THROTTLED_RAND_READ, 100);
        let steady = p.steady_mib_per_s.unwrap();
        assert!((steady / 9.766 - 1.0).abs() < 0.005, "{steady} {p:?}");
        // A 30 MiB/s rate whose edge at 1.7 s a hiccup moved half a window low (a slow window
        // and a fast one): a least-squares line moves 0.45 %, the median of the slopes not.
        let mut rates = vec![30.0; 21];
        rates[17] = 15.0;
        rates[18] = 45.0;
        let p = Precision::from_progress(&points(&rates), 100);
        let steady = p.steady_mib_per_s.unwrap();
        assert!((steady / 30.0 - 1.0).abs() < 0.001, "{steady} {p:?}");
    }

    #[test]
    fn a_cache_that_fills_is_a_large_negative_trend_and_steady_only_after_it() {
        let p = Precision::from_progress(
            &points(&[300.0, 300.0, 300.0, 300.0, 4.0, 4.0, 4.0, 4.0]),
            100,
        );
        let t = p.trend_percent.unwrap();
        assert!(t < -100.0, "{t}");
        // Four windows at 4 MiB/s after the drop: steady state at the sustained rate, but the
        // run's own interval says the whole is not known.
        assert!(p.steady);
        assert!(p.ci95_percent.unwrap() > 50.0);
        assert!(!p.known_to(50.0));
        // The drop: after the warm-up, three windows at 300, then four at 4 MiB/s.
        let d = p.drop.unwrap();
        assert_eq!((d.burst_mib_per_s, d.sustained_mib_per_s), (300.0, 4.0));
        assert_eq!(d.at_s, 0.4);
        assert_eq!(d.ci95_percent, Some(0.0));
    }

    #[test]
    fn a_drop_is_two_levels_that_explain_the_windows_never_one_slow_window() {
        // (rates per 100 ms window, the first dropped as warm-up; a drop found, its sustained
        // rate and whether that rate's precision is known)
        type Case = (&'static [f64], Option<(f64, bool)>);
        let cases: &[Case] = &[
            // one slow window at the end: noise, never a drop
            (&[30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 15.0], None),
            // one slow window inside a steady run
            (&[30.0, 30.0, 30.0, 12.0, 30.0, 30.0, 30.0, 30.0], None),
            // noise of +-10 %
            (&[30.0, 33.0, 27.0, 31.0, 29.0, 32.0, 28.0, 30.0], None),
            // a cache that filled after two windows: sustained known after four more
            // (the median of the slopes between the four windows' edges: 4.15)
            (&[9.0, 300.0, 290.0, 5.0, 4.0, 4.2, 3.8], Some((4.15, true))),
            // the cache filled late: too few windows after it to know the sustained rate
            (
                &[9.0, 300.0, 300.0, 300.0, 300.0, 4.0, 4.0],
                Some((4.0, false)),
            ),
            // the whole burst inside the warm-up window (a large cache, a fast first window)
            (&[137.0, 4.0, 4.0, 4.1, 3.9, 4.0], Some((4.0, true))),
            // a slow warm-up (ramp-up) is no drop
            (&[3.0, 30.0, 30.0, 30.0, 30.0, 30.0], None),
            // a fall to 70 %: not a drop (throttling within a band)
            (&[30.0, 30.0, 30.0, 30.0, 21.0, 21.0, 21.0, 21.0], None),
        ];
        for (rates, want) in cases {
            let p = Precision::from_progress(&points(rates), 100);
            let got = p
                .drop
                .as_ref()
                .map(|d| (d.sustained_mib_per_s, d.ci95_percent.is_some()));
            assert_eq!(got, *want, "{rates:?}: {p:?}");
            // A drop with too few windows after it never reached steady state.
            let unknown = p.drop.as_ref().is_some_and(|d| d.ci95_percent.is_none());
            assert!(!(p.steady && unknown), "{rates:?}: {p:?}");
        }
    }

    #[test]
    fn a_burst_inside_the_warm_up_leaves_the_steady_rate_judged_and_known() {
        // A 70/30 mix on a throttle: 64 I/Os land at once before the throttle queues them
        // (18 MiB/s in the warm-up window), then windows of 3.4-7.3 MiB/s around 5.2.
        let rates = [
            18.3, 3.4, 4.0, 6.1, 5.9, 5.1, 5.8, 5.5, 5.9, 4.4, 5.2, 5.3, 6.6, 5.1, 4.2, 5.6, 4.6,
            5.5, 6.2, 3.5, 4.5,
        ];
        let p = Precision::from_progress(&points(&rates), 100);
        let d = p.drop.as_ref().expect("the burst is a drop");
        // The sustained rate is the steady rate: the same windows, the same slope.
        assert_eq!(Some(d.sustained_mib_per_s), p.steady_mib_per_s, "{p:?}");
        assert_eq!(d.ci95_percent, p.ci95_percent);
        assert!(p.steady, "{p:?}");
        assert!(p.known_to(50.0) && !p.known_to(1.0), "{p:?}");
    }

    #[test]
    fn windows_that_alternate_around_a_steady_rate_are_batched_before_the_interval() {
        // A throttle's slices: 7.6 and 22.4 MiB/s in turn, 15 MiB/s over every pair.
        let mut rates = vec![5.0];
        for _ in 0..10 {
            rates.extend([7.6, 22.4]);
        }
        let p = Precision::from_progress(&points(&rates), 100);
        assert!(p.ci95_percent.unwrap() < 0.5, "{p:?}");
        assert!(p.steady && p.drop.is_none(), "{p:?}");
        // Independent noise is not batched away: the same values shuffled keep a wide interval.
        let mut shuffled = vec![5.0, 7.6, 7.6, 22.4, 7.6, 22.4, 22.4, 7.6, 22.4, 22.4, 7.6];
        shuffled.extend([7.6, 22.4, 22.4, 7.6, 7.6, 22.4, 7.6, 22.4, 7.6, 22.4]);
        let q = Precision::from_progress(&points(&shuffled), 100);
        assert!(q.ci95_percent.unwrap() > 10.0, "{q:?}");
    }

    #[test]
    fn known_means_steady_and_within_the_target() {
        let p = Precision::from_progress(&points(&[5.0, 30.0, 30.3, 29.7, 30.0, 30.2, 29.8]), 100);
        assert!(p.known_to(2.0) && !p.known_to(0.5));
        let q = Precision::from_progress(&points(&[9.0, 300.0, 290.0, 5.0, 4.0, 4.2, 3.8]), 100);
        assert!(!q.known_to(1000.0));
    }

    #[test]
    fn too_few_windows_state_no_precision() {
        let p = Precision::from_progress(&points(&[30.0, 30.0, 30.0]), 100);
        assert_eq!(p.ci95_percent, None);
        assert_eq!(p.steady_mib_per_s, None);
        assert_eq!(p.trend_percent, None);
        assert!(!p.steady);
        // A run shorter than one window has no sample at all.
        let p = Precision::from_progress(&[(0.0, 0), (0.03, 1 << 20)], 100);
        assert!(p.samples_mib_per_s.is_empty());
    }

    #[test]
    fn a_long_run_keeps_at_most_128_windows() {
        let p = Precision::from_progress(&points(&vec![10.0; 2001]), 100);
        assert!(
            p.samples_mib_per_s.len() <= 128,
            "{}",
            p.samples_mib_per_s.len()
        );
        assert_eq!(p.window_ms, 1600);
        assert_eq!(p.ci95_percent, Some(0.0));
    }
}
