//! Owns the `null` engine: it queues and reaps like a real engine and completes every I/O at
//! once without touching the target, so the job loop it runs under is the one every engine
//! runs (driver.rs), with the same batching, clock reads and histogram updates; its figures are
//! the cost of usbperf itself.

use super::driver::{Event, IoEngine, Lane, Queued};
use super::{EngineError, EngineKind, JobCtx, OpKind};

pub struct NullEngine;

/// The I/Os queued since the last reap, by slot.
pub struct NullLane {
    queued: Vec<usize>,
    res: i32,
}

impl IoEngine for NullEngine {
    type Lane = NullLane;

    fn engine_kind(&self) -> EngineKind {
        EngineKind::Null
    }

    fn shape(&self, queue_depth: usize) -> (usize, usize) {
        (1, queue_depth)
    }

    fn open(&self, ctx: &JobCtx<'_>, _lane: usize, depth: usize) -> Result<NullLane, EngineError> {
        Ok(NullLane {
            queued: Vec::with_capacity(depth),
            res: i32::try_from(ctx.plan.block_bytes)
                .map_err(|_| EngineError::BadPlan("--bs must be below 2G".into()))?,
        })
    }
}

impl Lane for NullLane {
    fn buffer_mut(&mut self, _slot: usize) -> Option<&mut [u8]> {
        None
    }

    fn buffer(&self, _slot: usize) -> Option<&[u8]> {
        None
    }

    #[inline]
    fn queue(&mut self, slot: usize, _op: OpKind, offset: u64, _retry: bool) -> Queued {
        std::hint::black_box(offset);
        self.queued.push(slot);
        Queued::Pending
    }

    #[inline]
    fn commit(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    #[inline]
    fn getevents(&mut self, events: &mut Vec<Event>) -> std::io::Result<()> {
        let res = self.res;
        events.extend(self.queued.drain(..).map(|slot| Event { slot, res }));
        Ok(())
    }
}
