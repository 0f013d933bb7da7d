//! Shared helpers of the integration tests: scratch paths on a real file system (O_DIRECT
//! needs one: not tmpfs) removed on drop, and one-call workload runs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use usbperf::engine::{self, EngineRequest};
use usbperf::workload::{
    self, BenchResult, RunOptions, WorkloadError, WorkloadKind, WorkloadParams,
};

/// A path in a scratch directory on the disk under test, deleted (with the directory) on drop.
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(name: &str) -> Self {
        // CARGO_TARGET_TMPDIR is on the build disk (a real file system), unlike /tmp on tmpfs.
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let dir = base.join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch { dir }
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn params(kind: WorkloadKind, target: &Path) -> WorkloadParams {
    WorkloadParams::defaults(kind, target.to_path_buf())
}

pub fn run(params: &WorkloadParams, engine: EngineRequest) -> Result<BenchResult, WorkloadError> {
    let selected = engine::select(engine).expect("engine selection");
    workload::run(params, &selected, &RunOptions::default())
}

/// The engines this build has: `uring` only with the `uring` feature (armv7 builds lack it).
pub fn engines() -> Vec<EngineRequest> {
    let mut engines = vec![EngineRequest::Sync];
    if cfg!(feature = "uring") {
        engines.insert(0, EngineRequest::Uring);
    }
    engines
}

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}
