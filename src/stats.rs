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
pub struct Stalls {
    pub over_1s: u64,
    pub over_5s: u64,
    pub longest_ns: u64,
}

/// The figures of one direction (reads or writes), or of both merged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
