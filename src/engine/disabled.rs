//! Owns the stand-in for the `uring` engine in builds without the `uring` cargo feature (an image
//! whose kernel has no io_uring, `PACKAGECONFIG:remove = "uring"`): selecting it returns a clear
//! error, and `auto` falls back to the `sync` engine.

use super::{Engine, EngineError, EngineKind, JobCtx, JobStats};

pub struct UringEngine;

fn unavailable() -> EngineError {
    EngineError::UringUnavailable {
        reason: "this usbperf was built without the `uring` cargo feature".into(),
    }
}

impl UringEngine {
    pub fn probe() -> Result<Self, EngineError> {
        Err(unavailable())
    }

    pub fn describe(&self) -> String {
        "io_uring is not built in".to_string()
    }
}

impl Engine for UringEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Uring
    }

    fn run_job(&self, _ctx: &JobCtx<'_>) -> Result<JobStats, EngineError> {
        Err(unavailable())
    }
}
