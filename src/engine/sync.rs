//! Owns the `sync` engine: a pread/pwrite thread pool with one thread per in-flight I/O (queue
//! depth × jobs threads). Always built; the fallback when io_uring is missing or forbidden.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::{
    fill_random, AlignedBuffer, Engine, EngineError, EngineKind, JobCtx, JobStats, OpKind,
    StopReason,
};

pub struct SyncEngine;

impl Engine for SyncEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Sync
    }

    fn run_job(&self, ctx: &JobCtx<'_>) -> Result<JobStats, EngineError> {
        // The threads of one job share the I/O counter, so together they issue exactly the
        // plan's I/Os, like one ring with `queue_depth` slots.
        let next_index = AtomicU64::new(0);
        let job_bytes = AtomicU64::new(0);
        let time_up = AtomicBool::new(false);
        let results: Vec<Result<JobStats, EngineError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..ctx.plan.queue_depth)
                .map(|slot| {
                    let next_index = &next_index;
                    let job_bytes = &job_bytes;
                    let time_up = &time_up;
                    scope.spawn(move || {
                        // The pool's threads do the I/O: their CPU is the job's.
                        let cpu0 = super::thread_cpu_ns();
                        worker(ctx, slot, next_index, job_bytes, time_up).map(|mut stats| {
                            stats.add_thread_cpu(cpu0);
                            stats
                        })
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(Err(EngineError::Panicked)))
                .collect()
        });
        let mut total = JobStats::new();
        for result in results {
            let stats = result?;
            total.read.merge(&stats.read);
            total.write.merge(&stats.write);
            total.cpu_usr_ns += stats.cpu_usr_ns;
            total.cpu_sys_ns += stats.cpu_sys_ns;
            total.stopped_by = match (total.stopped_by, stats.stopped_by) {
                (StopReason::Interrupted, _) | (_, StopReason::Interrupted) => {
                    StopReason::Interrupted
                }
                (StopReason::Time, _) | (_, StopReason::Time) => StopReason::Time,
                _ => StopReason::Size,
            };
        }
        Ok(total)
    }
}

fn worker(
    ctx: &JobCtx<'_>,
    slot: usize,
    next_index: &AtomicU64,
    job_bytes: &AtomicU64,
    time_up: &AtomicBool,
) -> Result<JobStats, EngineError> {
    let plan = ctx.plan;
    let len = plan.block_bytes;
    let limit = plan.io_limit.unwrap_or(u64::MAX);
    let mut buffer = AlignedBuffer::new(len, 1).ok_or(EngineError::Setup {
        what: "allocating an I/O buffer",
        source: std::io::Error::from_raw_os_error(libc::ENOMEM),
    })?;
    fill_random(buffer.slot_mut(0, len), plan.seed ^ slot as u64);
    let mut stats = JobStats::new();
    loop {
        if ctx.should_stop() {
            stats.stopped_by = StopReason::Interrupted;
            break;
        }
        if time_up.load(Ordering::Relaxed) {
            stats.stopped_by = StopReason::Time;
            break;
        }
        let index = next_index.fetch_add(1, Ordering::Relaxed);
        if index >= limit {
            stats.stopped_by = StopReason::Size;
            break;
        }
        let (op, offset) = plan.io_at(index);
        if op == OpKind::Write {
            if let Some(hook) = ctx.data {
                hook.fill(offset, buffer.slot_mut(0, len));
            }
        }
        let start_ns = super::now_ns();
        let mut done = 0usize;
        while done < len {
            let ptr = buffer.slot_ptr(0);
            // SAFETY: `ptr + done .. ptr + len` lies inside the buffer; fd is owned by the caller.
            let res = unsafe {
                match op {
                    OpKind::Read => libc::pread(
                        ctx.fd,
                        ptr.add(done).cast(),
                        len - done,
                        (offset + done as u64) as libc::off_t,
                    ),
                    OpKind::Write => libc::pwrite(
                        ctx.fd,
                        ptr.add(done).cast(),
                        len - done,
                        (offset + done as u64) as libc::off_t,
                    ),
                }
            };
            if res < 0 {
                let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                if errno == libc::EINTR {
                    continue;
                }
                return Err(ctx.io_error(op, offset, errno));
            }
            if res == 0 {
                return Err(EngineError::UnexpectedEof { op, offset });
            }
            done += res as usize;
        }
        let end_ns = super::now_ns();
        stats.record(op, len as u64, end_ns - start_ns);
        if op == OpKind::Read {
            if let Some(hook) = ctx.data {
                hook.check(offset, buffer.slot(0, len));
            }
        }
        let total = job_bytes.fetch_add(len as u64, Ordering::Relaxed) + len as u64;
        ctx.progress.fetch_max(total, Ordering::Relaxed);
        if ctx.deadline_ns.is_some_and(|d| end_ns >= d) {
            time_up.store(true, Ordering::Relaxed);
        }
    }
    Ok(stats)
}
