//! Owns what a user may change about a workload: the one set of overrides that `bench`'s flags
//! and a config file's `tests:` entries both fill, applied over the workload's defaults in one
//! place, so both get the same parameters for the same values (and `check_params` judges
//! them the same way).

use std::path::PathBuf;
use std::time::Duration;

use super::{CacheMode, VerifyMode, VerifyPhase, WorkloadKind, WorkloadParams};

/// Every field is optional: unset keeps the workload's default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    pub block_bytes: Option<u64>,
    pub queue_depth: Option<u32>,
    pub jobs: Option<u32>,
    /// The region to test (and the size of a created file).
    pub size_bytes: Option<u64>,
    /// Zero means no time bound.
    pub runtime: Option<Duration>,
    pub cache: Option<CacheMode>,
    pub read_percent: Option<u8>,
    pub time_based: Option<bool>,
    pub precision_percent: Option<f64>,
    pub seed: Option<u64>,
    pub sample_interval: Option<Duration>,
    pub verify_mode: Option<VerifyMode>,
    pub verify_phase: Option<VerifyPhase>,
    pub verify_points: Option<u64>,
}

impl Overrides {
    /// The workload's defaults with every override applied.
    pub fn params(&self, workload: WorkloadKind, target: PathBuf) -> WorkloadParams {
        let mut p = WorkloadParams::defaults(workload, target);
        self.apply(&mut p);
        p
    }

    /// Applies every override that is set.
    pub fn apply(&self, p: &mut WorkloadParams) {
        if let Some(v) = self.block_bytes {
            p.block_bytes = v;
        }
        if let Some(v) = self.queue_depth {
            p.queue_depth = v;
        }
        if let Some(v) = self.jobs {
            p.jobs = v;
        }
        if let Some(v) = self.size_bytes {
            p.size_bytes = Some(v);
        }
        if let Some(v) = self.runtime {
            p.runtime_ms = (!v.is_zero()).then_some(v.as_millis() as u64);
        }
        if let Some(v) = self.cache {
            p.cache = v;
        }
        if let Some(v) = self.read_percent {
            p.read_percent = v;
        }
        if let Some(v) = self.time_based {
            p.time_based = v;
        }
        if let Some(v) = self.precision_percent {
            p.precision_percent = Some(v);
        }
        if let Some(v) = self.seed {
            p.seed = v;
        }
        if let Some(v) = self.sample_interval {
            p.sample_interval_ms = v.as_millis() as u64;
        }
        if let Some(v) = self.verify_mode {
            p.verify_mode = v;
        }
        if let Some(v) = self.verify_phase {
            p.verify_phase = v;
        }
        if let Some(v) = self.verify_points {
            p.verify_points = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_keeps_the_default_and_a_zero_runtime_means_no_bound() {
        let d = WorkloadParams::defaults(WorkloadKind::RandRead, "x".into());
        let same = Overrides::default().params(WorkloadKind::RandRead, "x".into());
        assert_eq!(
            (
                same.block_bytes,
                same.queue_depth,
                same.jobs,
                same.runtime_ms
            ),
            (d.block_bytes, d.queue_depth, d.jobs, d.runtime_ms)
        );
        let o = Overrides {
            block_bytes: Some(65536),
            queue_depth: Some(4),
            runtime: Some(Duration::ZERO),
            ..Overrides::default()
        };
        let p = o.params(WorkloadKind::RandRead, "x".into());
        assert_eq!((p.block_bytes, p.queue_depth, p.jobs), (65536, 4, d.jobs));
        assert_eq!(p.runtime_ms, None);
    }
}
