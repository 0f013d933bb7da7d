//! Owns the stand-in for the `uring` engine in builds without the `uring` cargo feature (an image
//! whose kernel has no io_uring, `PACKAGECONFIG:remove = "uring"`): selecting it returns a clear
//! error, and `auto` falls back to the `sync` engine.

use super::driver::{Event, IoEngine, Lane, Queued};
use super::{EngineError, EngineKind, JobCtx, OpKind};

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

/// No lane can be opened: the type has no values.
pub enum NoLane {}

impl IoEngine for UringEngine {
    type Lane = NoLane;

    fn engine_kind(&self) -> EngineKind {
        EngineKind::Uring
    }

    fn shape(&self, queue_depth: usize) -> (usize, usize) {
        (1, queue_depth)
    }

    fn open(&self, _ctx: &JobCtx<'_>, _lane: usize, _depth: usize) -> Result<NoLane, EngineError> {
        Err(unavailable())
    }
}

impl Lane for NoLane {
    fn buffer_mut(&mut self, _slot: usize) -> Option<&mut [u8]> {
        match *self {}
    }

    fn buffer(&self, _slot: usize) -> Option<&[u8]> {
        match *self {}
    }

    fn queue(&mut self, _slot: usize, _op: OpKind, _offset: u64, _retry: bool) -> Queued {
        match *self {}
    }

    fn commit(&mut self) -> std::io::Result<()> {
        match *self {}
    }

    fn getevents(&mut self, _events: &mut Vec<Event>) -> std::io::Result<()> {
        match *self {}
    }
}
