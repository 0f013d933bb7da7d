//! Owns the `null` engine: it walks the same plan as the real engines, with the same batching,
//! clock reads and histogram updates, and completes every I/O at once without touching the
//! target; its figures are the cost of usbperf itself.

use std::sync::atomic::Ordering;

use super::{Engine, EngineError, EngineKind, JobCtx, JobStats, OpKind, StopReason};

pub struct NullEngine;

impl Engine for NullEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Null
    }

    fn run_job(&self, ctx: &JobCtx<'_>) -> Result<JobStats, EngineError> {
        let plan = ctx.plan;
        let limit = plan.io_limit.unwrap_or(u64::MAX);
        let bytes = plan.block_bytes as u64;
        let mut stats = JobStats::new();
        let mut batch: Vec<OpKind> = Vec::with_capacity(plan.queue_depth);
        let mut index = 0u64;
        loop {
            if ctx.should_stop() {
                stats.stopped_by = StopReason::Interrupted;
                break;
            }
            let count = (limit - index).min(plan.queue_depth as u64);
            if count == 0 {
                stats.stopped_by = StopReason::Size;
                break;
            }
            let submit_ns = super::now_ns();
            batch.clear();
            for i in index..index + count {
                let (op, offset) = plan.io_at(i);
                std::hint::black_box(offset);
                batch.push(op);
            }
            let done_ns = super::now_ns();
            for &op in &batch {
                stats.record(op, bytes, done_ns - submit_ns);
            }
            index += count;
            ctx.progress.store(stats.bytes(), Ordering::Relaxed);
            if ctx.deadline_ns.is_some_and(|d| done_ns >= d) {
                stats.stopped_by = StopReason::Time;
                break;
            }
        }
        Ok(stats)
    }
}
