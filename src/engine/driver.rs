//! Owns the one job loop every engine runs under, as fio's backend does for its engines: which
//! I/O comes next (the plan), when to stop (size, time, a stop request, an error), the latency
//! clock and the counters, the completion policy (-EAGAIN is retried, 0 bytes is the end of the
//! target, a negative result is the device's error) and the merge of why the job stopped.
//!
//! An engine only moves I/O: it queues one I/O into a slot, commits what it queued, and reaps
//! completions ([`Lane`]). A job runs as one or more lanes, each on its own thread: io_uring and
//! `null` run one lane holding the whole queue depth; the `sync` pool runs one lane per in-flight
//! I/O, each a depth of one whose I/O completes inside `queue`, and its lanes share the job's
//! I/O counter, so together they issue exactly the plan's I/Os.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::{Access, EngineError, EngineKind, JobCtx, JobStats, OpKind, StopReason};

/// What `queue` did with an I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queued {
    /// Taken: it completes through `getevents`, after a `commit` or the wait.
    Pending,
    /// Already done, with this result (bytes moved, or -errno), as a CQE's `res`.
    Done(i32),
    /// No room in the submission queue: try again after reaping.
    Full,
}

/// One completion: the slot it belongs to and the result (bytes moved, or -errno).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    pub slot: usize,
    pub res: i32,
}

/// One lane's I/O mechanism: `depth` slots, each with a buffer of the job's block size.
pub(crate) trait Lane {
    /// The slot's buffer, for the data hook (`None`: the engine moves no data, and the hook is
    /// not called).
    fn buffer_mut(&mut self, slot: usize) -> Option<&mut [u8]>;
    fn buffer(&self, slot: usize) -> Option<&[u8]>;
    /// Queues one I/O of the job's block size from or into the slot's buffer. `retry`: it
    /// completed -EAGAIN before and goes again (io_uring sends it through its worker).
    fn queue(&mut self, slot: usize, op: OpKind, offset: u64, retry: bool) -> Queued;
    /// Hands what was queued to the kernel without waiting.
    fn commit(&mut self) -> std::io::Result<()>;
    /// Hands what was queued to the kernel, waits for at least one completion, and appends
    /// every completion ready to `events`.
    fn getevents(&mut self, events: &mut Vec<Event>) -> std::io::Result<()>;
    /// The loop is over; `drained`: nothing is in flight any more.
    fn close(&mut self, _drained: bool) {}
    /// The loop gives up with I/O still in flight: the kernel may still write into the slots'
    /// memory after the lane is gone, so that memory must never go back to the allocator.
    fn abandon(&mut self) {}
}

/// An engine: how a job's queue depth is split into lanes, and how a lane is opened.
pub(crate) trait IoEngine: Send + Sync {
    type Lane: Lane;
    fn engine_kind(&self) -> EngineKind;
    /// (lanes, depth per lane) for this plan.
    fn shape(&self, queue_depth: usize) -> (usize, usize);
    /// Opens lane number `lane` of the job, on the thread that will run it.
    fn open(&self, ctx: &JobCtx<'_>, lane: usize, depth: usize) -> Result<Self::Lane, EngineError>;
}

impl StopReason {
    /// Why several jobs (or a job's lanes) stopped together: an interruption anywhere wins over
    /// the time bound, which wins over the size bound.
    pub fn merge(self, other: StopReason) -> StopReason {
        match (self, other) {
            (StopReason::Interrupted, _) | (_, StopReason::Interrupted) => StopReason::Interrupted,
            (StopReason::Time | StopReason::Known, _)
            | (_, StopReason::Time | StopReason::Known) => StopReason::Time,
            _ => StopReason::Size,
        }
    }
}

/// Consecutive failed waits (`io_uring_enter`) after which a lane gives up draining.
const MAX_ENTER_FAILURES: u32 = 100;

/// How often one I/O may complete with -EAGAIN before it counts as failed. A retry goes to
/// the kernel's worker (IOSQE_ASYNC), which submits without REQ_NOWAIT and may block, so a
/// second -EAGAIN is already unexpected; the bound only keeps a broken kernel from looping.
const MAX_EAGAIN_RETRIES: u32 = 8;

/// What one completion means for its I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Completion {
    /// Moved this many bytes.
    Done(u64),
    /// Not done, and no device error: submit it again, from the kernel's worker.
    Retry,
    /// A read at or past the end.
    Eof,
    /// The device or filesystem failed it with this errno.
    Failed(i32),
}

/// The policy for a completion's result. -EAGAIN is never a device error: the kernel gives it
/// when an I/O it tried without blocking could not get a request (tag exhaustion), and also
/// when a large O_DIRECT I/O is split into several bios against the queue's limits and one of
/// them could not: the whole I/O then completes -EAGAIN although the device is healthy
/// (liburing issue #766). Debian 11's 5.10 guest shows it on the EHCI and OHCI sticks' 1-2 MiB
/// raw reads (scripts/vm-e2e.sh --kernel 5.10); the 6.1 and 6.12 guests do not.
fn completion(res: i32, retries: u32) -> Completion {
    match res {
        r if r > 0 => Completion::Done(r as u64),
        0 => Completion::Eof,
        r if -r == libc::EAGAIN && retries < MAX_EAGAIN_RETRIES => Completion::Retry,
        r => Completion::Failed(-r),
    }
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    op: OpKind,
    offset: u64,
    submit_ns: u64,
    /// -EAGAIN completions of this I/O so far.
    retries: u32,
}

/// State the lanes of one job share.
struct Shared {
    /// The next I/O number of the plan.
    next_index: AtomicU64,
    /// A lane passed the deadline: the others stop too.
    time_up: AtomicBool,
}

/// Where a lane takes its I/O numbers from: its own counter when it is the job's only lane
/// (no atomic per I/O), the job's shared counter otherwise. A shared counter hands out runs
/// of `batch` numbers: on random access the order of the numbers does not matter, and one
/// locked add per run instead of per I/O keeps 64 threads of a thread pool from bouncing the
/// counter's cache line between CPUs (fio's psync jobs share nothing either). Sequential
/// access takes them one at a time, so the lanes together still walk the region in order.
enum Issue<'a> {
    Own(u64),
    Shared {
        shared: &'a Shared,
        next: u64,
        end: u64,
        batch: u64,
    },
}

/// The run of I/O numbers a lane of a shared random job takes at once.
const SHARED_BATCH: u64 = 16;

/// Bytes a lane of a shared job completes before it adds them to the job's progress (one
/// locked add per this many bytes, not per I/O; samplers read it every 100 ms or more).
const SHARED_PROGRESS_BYTES: u64 = 256 << 10;

/// A shared lane also adds its bytes once this much time has passed since it last did, so a
/// sampler's 100 ms window is off by at most 1 % of it on a slow device (at 15 MiB/s and four
/// lanes, 256 KiB is 70 ms of one lane's I/O): a figure's stated precision measures the
/// device, not the counter's batching.
const SHARED_PROGRESS_NS: u64 = 1_000_000;

impl<'a> Issue<'a> {
    fn shared(shared: &'a Shared, access: Access) -> Issue<'a> {
        let batch = match access {
            Access::Random => SHARED_BATCH,
            Access::Sequential | Access::Spread { .. } => 1,
        };
        Issue::Shared {
            shared,
            next: 0,
            end: 0,
            batch,
        }
    }

    /// The next I/O number, if the plan has one; taken by `advance` once the I/O is queued,
    /// so a number claimed but not queued (the lane stopped) is never lost.
    #[inline]
    fn claim(&mut self, limit: u64) -> Option<u64> {
        let index = match self {
            Issue::Own(index) => *index,
            Issue::Shared {
                shared,
                next,
                end,
                batch,
            } => {
                if *next == *end {
                    *next = shared.next_index.fetch_add(*batch, Ordering::Relaxed);
                    *end = *next + *batch;
                }
                *next
            }
        };
        (index < limit).then_some(index)
    }

    #[inline]
    fn advance(&mut self) {
        match self {
            Issue::Own(index) => *index += 1,
            Issue::Shared { next, .. } => *next += 1,
        }
    }

    #[inline]
    fn time_up(&self) -> bool {
        match self {
            Issue::Own(_) => false,
            Issue::Shared { shared, .. } => shared.time_up.load(Ordering::Relaxed),
        }
    }

    #[inline]
    fn set_time_up(&self) {
        if let Issue::Shared { shared, .. } = self {
            shared.time_up.store(true, Ordering::Relaxed);
        }
    }
}

/// Runs one job with `engine`: one lane on the calling thread, or one thread per lane.
pub(crate) fn run_job<E: IoEngine>(engine: &E, ctx: &JobCtx<'_>) -> Result<JobStats, EngineError> {
    let (lanes, depth) = engine.shape(ctx.plan.queue_depth);
    if lanes <= 1 {
        return run_lane(engine, ctx, 0, depth, Issue::Own(0));
    }
    let shared = Shared {
        next_index: AtomicU64::new(0),
        time_up: AtomicBool::new(false),
    };
    let results: Vec<Result<JobStats, EngineError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..lanes)
            .map(|lane| {
                let shared = &shared;
                scope.spawn(move || {
                    // The lanes' threads do the I/O: their CPU is the job's.
                    let cpu0 = super::thread_cpu_ns();
                    let issue = Issue::shared(shared, ctx.plan.access);
                    let result = run_lane(engine, ctx, lane, depth, issue);
                    if result.is_err() {
                        // The job has failed: its other lanes stop now, as the other jobs do.
                        ctx.abort.store(true, Ordering::Relaxed);
                    }
                    result.map(|mut stats| {
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
        total.merge(&result?);
    }
    Ok(total)
}

/// The loop of one lane: keep its slots full while the plan has I/O and no bound is reached,
/// then drain everything in flight.
fn run_lane<E: IoEngine>(
    engine: &E,
    ctx: &JobCtx<'_>,
    lane_index: usize,
    depth: usize,
    mut issue: Issue<'_>,
) -> Result<JobStats, EngineError> {
    let plan = ctx.plan;
    let limit = plan.io_limit.unwrap_or(u64::MAX);
    let mut lane = engine.open(ctx, lane_index, depth)?;
    let mut slots = vec![
        Slot {
            op: OpKind::Read,
            offset: 0,
            submit_ns: 0,
            retries: 0,
        };
        depth
    ];
    let mut events: Vec<Event> = Vec::with_capacity(depth);
    let mut retry: Vec<usize> = Vec::new();
    let mut free: Vec<usize> = (0..depth).rev().collect();
    let mut stats = JobStats::new();
    let mut reported_bytes = 0u64;
    let mut reported_ns = 0u64;
    let mut in_flight = 0usize;
    let mut stopping: Option<StopReason> = None;
    let mut first_error: Option<EngineError> = None;
    let mut enter_failures = 0u32;

    // Accounts one completion: counted (and checked), queued again, or the lane's error.
    macro_rules! complete {
        ($slot:expr, $res:expr, $done_ns:expr) => {{
            let slot: usize = $slot;
            let Slot {
                op,
                offset,
                submit_ns,
                retries,
            } = slots[slot];
            match completion($res, retries) {
                Completion::Retry if stopping != Some(StopReason::Interrupted) => {
                    slots[slot].retries += 1;
                    stats.eagain_retries += 1;
                    retry.push(slot);
                }
                Completion::Done(bytes) => {
                    free.push(slot);
                    in_flight -= 1;
                    stats.record(op, bytes, $done_ns.saturating_sub(submit_ns));
                    if op == OpKind::Read {
                        if let Some(hook) = ctx.data {
                            if let Some(buf) = lane.buffer(slot) {
                                hook.check(offset, buf);
                            }
                        }
                    }
                }
                Completion::Retry => {
                    // Stopping anyway: the I/O is simply not done.
                    free.push(slot);
                    in_flight -= 1;
                }
                Completion::Eof => {
                    free.push(slot);
                    in_flight -= 1;
                    first_error.get_or_insert(EngineError::UnexpectedEof { op, offset });
                    stopping = Some(StopReason::Interrupted);
                }
                Completion::Failed(errno) => {
                    free.push(slot);
                    in_flight -= 1;
                    first_error.get_or_insert_with(|| ctx.io_error(op, offset, errno));
                    stopping = Some(StopReason::Interrupted);
                }
            }
        }};
    }
    // After a pass of completions: progress for samplers, and the time bound.
    macro_rules! after_pass {
        ($done_ns:expr) => {{
            let bytes = stats.bytes();
            match issue {
                // The job's only writer of its counter: a plain store, no locked add.
                // (only when bytes completed: the time is that of the last completion)
                Issue::Own(_) if bytes > reported_bytes => {
                    ctx.progress.set(bytes, $done_ns);
                    reported_bytes = bytes;
                }
                Issue::Own(_) => {}
                Issue::Shared { .. }
                    if bytes > reported_bytes
                        && (bytes - reported_bytes >= SHARED_PROGRESS_BYTES
                            || $done_ns >= reported_ns + SHARED_PROGRESS_NS) =>
                {
                    ctx.progress.add(bytes - reported_bytes, $done_ns);
                    reported_bytes = bytes;
                    reported_ns = $done_ns;
                }
                Issue::Shared { .. } => {}
            }
            if stopping.is_none() && ctx.deadline_ns.is_some_and(|d| $done_ns >= d) {
                stopping = Some(StopReason::Time);
                issue.set_time_up();
            }
        }};
    }

    'run: loop {
        // I/Os that completed -EAGAIN go back first, through the kernel's worker, which
        // submits them without REQ_NOWAIT; they are still in flight and keep their slot and
        // their first submission time (the retry is part of their latency).
        while let Some(slot) = retry.pop() {
            let Slot { op, offset, .. } = slots[slot];
            match lane.queue(slot, op, offset, true) {
                Queued::Pending => {}
                Queued::Done(res) => {
                    let done_ns = super::now_ns();
                    complete!(slot, res, done_ns);
                    after_pass!(done_ns);
                }
                Queued::Full => {
                    // The queue has a place per slot, so this cannot happen; keep it for later.
                    retry.push(slot);
                    break;
                }
            }
        }
        if stopping.is_none() && ctx.should_stop() {
            stopping = Some(StopReason::Interrupted);
        }
        // "Known" is read once per pass of the loop, beside the caller's stop: it is set
        // at most every sampling window, so no completion needs to look at it.
        if stopping.is_none() && (issue.time_up() || ctx.known.load(Ordering::Relaxed)) {
            stopping = Some(StopReason::Time);
        }
        if stopping.is_none() {
            // Refills go to the kernel one per `io_uring_enter`, as fio does by default
            // (`iodepth_batch_submit=1`), not all together. io_uring plugs a call that carries
            // three or more entries: the block layer holds those requests until the call ends
            // and hands them to the driver as one batch with one doorbell. On this project's
            // virtio disk that batching cost 7 % of random-read IOPS against a steady stream
            // (paired runs beside fio in docs/benchmarks.md), so the device would be measured
            // under a load fio never gives it. The entry queued last is committed together with
            // the wait below, so a lone refill still costs one call.
            let mut pending = false;
            while let Some(&slot) = free.last() {
                let Some(index) = issue.claim(limit) else {
                    stopping = Some(StopReason::Size);
                    break;
                };
                // On an error the entry stays queued; the wait below submits it or says why.
                if pending && lane.commit().is_err() {
                    break;
                }
                let (op, offset) = plan.io_at(index);
                if op == OpKind::Write {
                    if let Some(hook) = ctx.data {
                        if let Some(buf) = lane.buffer_mut(slot) {
                            hook.fill(offset, buf);
                        }
                    }
                }
                // Stamped per I/O: each one enters the kernel on its own call.
                let stamp_ns = super::now_ns();
                let queued = lane.queue(slot, op, offset, false);
                if queued == Queued::Full {
                    // Cannot happen (the queue has `depth` entries), but never lose a slot.
                    break;
                }
                free.pop();
                slots[slot] = Slot {
                    op,
                    offset,
                    submit_ns: stamp_ns,
                    retries: 0,
                };
                issue.advance();
                in_flight += 1;
                if let Queued::Done(res) = queued {
                    // Done inside `queue` (a blocking call): account it, then look at the stop
                    // conditions again before the next one.
                    let done_ns = super::now_ns();
                    complete!(slot, res, done_ns);
                    after_pass!(done_ns);
                    continue 'run;
                }
                pending = true;
            }
        }
        if in_flight == 0 {
            break;
        }
        match lane.getevents(&mut events) {
            Ok(()) => enter_failures = 0,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => {}
            Err(e) => {
                // Keep reaping what is in flight (the kernel still owns those buffers); give
                // up only if the lane stays unusable.
                enter_failures += 1;
                stopping = Some(StopReason::Interrupted);
                if enter_failures >= MAX_ENTER_FAILURES {
                    if in_flight > 0 {
                        // A leak on a path that ends the test, instead of heap corruption.
                        lane.abandon();
                    }
                    return Err(EngineError::Setup {
                        what: "io_uring_enter",
                        source: e,
                    });
                }
                if first_error.is_none() {
                    first_error = Some(EngineError::Setup {
                        what: "io_uring_enter",
                        source: e,
                    });
                }
            }
        }
        // One clock read for every completion reaped in this pass.
        let done_ns = super::now_ns();
        for &Event { slot, res } in &events {
            complete!(slot, res, done_ns);
        }
        events.clear();
        after_pass!(done_ns);
    }
    lane.close(in_flight == 0);
    // What a shared lane has not added to the job's progress yet.
    let bytes = stats.bytes();
    if bytes > reported_bytes {
        ctx.progress.add(bytes - reported_bytes, super::now_ns());
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    stats.stopped_by = stopping.unwrap_or(StopReason::Size);
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The completion policy, table-driven. The -EAGAIN rows are the 5.10 false fail: a
    /// healthy stick's 2 MiB O_DIRECT read split against max_sectors_kb completed -EAGAIN and
    /// failed the device ("read of 2097152 bytes at offset 2097152 failed: Resource
    /// temporarily unavailable").
    #[test]
    fn eagain_is_retried_never_a_device_error() {
        let eagain = -libc::EAGAIN;
        let table = [
            (2 << 20, 0, Completion::Done(2 << 20)),
            (512, 0, Completion::Done(512)),
            (0, 0, Completion::Eof),
            (eagain, 0, Completion::Retry),
            (eagain, MAX_EAGAIN_RETRIES - 1, Completion::Retry),
            // A kernel that never stops answering -EAGAIN is a failure, not a hang.
            (eagain, MAX_EAGAIN_RETRIES, Completion::Failed(libc::EAGAIN)),
            (-libc::EIO, 0, Completion::Failed(libc::EIO)),
            (-libc::ENOSPC, 0, Completion::Failed(libc::ENOSPC)),
            (-libc::EROFS, 0, Completion::Failed(libc::EROFS)),
        ];
        for (res, retries, want) in table {
            assert_eq!(
                completion(res, retries),
                want,
                "res {res} after {retries} retries"
            );
        }
    }

    #[test]
    fn an_interruption_wins_over_time_which_wins_over_size() {
        use StopReason::*;
        let table = [
            (Size, Size, Size),
            (Size, Time, Time),
            (Time, Size, Time),
            (Time, Time, Time),
            (Size, Interrupted, Interrupted),
            (Interrupted, Time, Interrupted),
            (Time, Interrupted, Interrupted),
        ];
        for (a, b, want) in table {
            assert_eq!(a.merge(b), want, "{a:?} + {b:?}");
        }
    }

    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use crate::engine::{run, Access, Engine, JobPlan, Progress, RunSpec};

    fn plan(queue_depth: usize, io_limit: Option<u64>) -> JobPlan {
        JobPlan {
            access: Access::Sequential,
            read_percent: 100,
            block_bytes: 4096,
            region_offset_bytes: 0,
            region_bytes: 4096 * 64,
            queue_depth,
            io_limit,
            seed: 7,
        }
    }

    fn spec(jobs: Vec<JobPlan>, runtime: Option<Duration>) -> RunSpec {
        RunSpec {
            fd: -1,
            direct: false,
            progress: Arc::new(Progress::new(jobs.len())),
            jobs,
            runtime,
            data: None,
            stop: Arc::new(AtomicBool::new(false)),
            known: Arc::default(),
        }
    }

    /// A scripted engine: `lanes` lanes of `depth` (0: the job's queue depth), I/O done inside
    /// `queue` or reaped later, each result chosen by `res(offset, retry)`; it logs every I/O.
    struct Scripted {
        lanes: usize,
        inline: bool,
        res: fn(u64, bool) -> i32,
        log: Arc<Mutex<Vec<(u64, bool)>>>,
        commits: Arc<AtomicUsize>,
    }

    impl Scripted {
        fn new(lanes: usize, inline: bool, res: fn(u64, bool) -> i32) -> Self {
            Scripted {
                lanes,
                inline,
                res,
                log: Arc::default(),
                commits: Arc::default(),
            }
        }
    }

    struct ScriptedLane {
        inline: bool,
        res: fn(u64, bool) -> i32,
        log: Arc<Mutex<Vec<(u64, bool)>>>,
        commits: Arc<AtomicUsize>,
        queued: Vec<Event>,
    }

    impl IoEngine for Scripted {
        type Lane = ScriptedLane;
        fn engine_kind(&self) -> EngineKind {
            EngineKind::Null
        }
        fn shape(&self, queue_depth: usize) -> (usize, usize) {
            if self.lanes > 1 {
                (self.lanes, 1)
            } else {
                (1, queue_depth)
            }
        }
        fn open(&self, _: &JobCtx<'_>, _: usize, _: usize) -> Result<ScriptedLane, EngineError> {
            Ok(ScriptedLane {
                inline: self.inline,
                res: self.res,
                log: self.log.clone(),
                commits: self.commits.clone(),
                queued: Vec::new(),
            })
        }
    }

    impl Lane for ScriptedLane {
        fn buffer_mut(&mut self, _: usize) -> Option<&mut [u8]> {
            None
        }
        fn buffer(&self, _: usize) -> Option<&[u8]> {
            None
        }
        fn queue(&mut self, slot: usize, _: OpKind, offset: u64, retry: bool) -> Queued {
            self.log.lock().unwrap().push((offset, retry));
            let res = (self.res)(offset, retry);
            if self.inline {
                return Queued::Done(res);
            }
            self.queued.push(Event { slot, res });
            Queued::Pending
        }
        fn commit(&mut self) -> std::io::Result<()> {
            self.commits.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        fn getevents(&mut self, events: &mut Vec<Event>) -> std::io::Result<()> {
            events.append(&mut self.queued);
            Ok(())
        }
    }

    fn ok(_: u64, _: bool) -> i32 {
        4096
    }

    #[test]
    fn the_null_engine_runs_the_real_loop_to_the_exact_io_count() {
        let null = crate::engine::null::NullEngine;
        // Limits that are and are not multiples of the queue depth.
        for (qd, limit) in [(1, 10), (4, 1000), (16, 1001), (7, 3)] {
            let s = spec(vec![plan(qd, Some(limit))], None);
            let out = run(&null, &s).unwrap();
            assert_eq!(out.read.ios, limit, "qd {qd}");
            assert_eq!(out.read.bytes, limit * 4096);
            assert_eq!(out.read.latency_ns.len(), limit);
            assert_eq!(out.write.ios, 0);
            assert_eq!(out.stopped_by, StopReason::Size);
            assert_eq!(s.progress.total_bytes(), limit * 4096);
        }
    }

    #[test]
    fn the_null_engine_stops_at_the_runtime_and_drains() {
        let null = crate::engine::null::NullEngine;
        let s = spec(
            vec![plan(8, None), plan(8, None)],
            Some(Duration::from_millis(30)),
        );
        let out = run(&null, &s).unwrap();
        assert_eq!(out.stopped_by, StopReason::Time);
        assert!(out.elapsed_ns >= 30_000_000, "{}", out.elapsed_ns);
        // Every I/O queued was reaped and counted: whole batches of the queue depth.
        assert!(out.read.ios > 0);
        assert_eq!(out.read.ios % 8, 0, "{}", out.read.ios);
        assert_eq!(s.progress.total_bytes(), out.read.bytes);
    }

    #[test]
    fn a_stop_request_is_an_interruption() {
        let null = crate::engine::null::NullEngine;
        let s = spec(vec![plan(4, None)], None);
        s.stop.store(true, Ordering::Relaxed);
        let out = run(&null, &s).unwrap();
        assert_eq!(out.stopped_by, StopReason::Interrupted);
        assert_eq!(out.read.ios, 0);
    }

    #[test]
    fn lanes_sharing_a_job_issue_each_io_once_and_merge_their_stop_reasons() {
        let engine = Scripted::new(4, true, ok);
        let s = spec(vec![plan(4, Some(640))], None);
        let out = run(&engine, &s).unwrap();
        assert_eq!(out.read.ios, 640);
        assert_eq!(out.stopped_by, StopReason::Size);
        let mut offsets: Vec<u64> = engine.log.lock().unwrap().iter().map(|l| l.0).collect();
        offsets.sort_unstable();
        // 640 I/Os over 64 blocks: each block exactly ten times.
        let want: Vec<u64> = (0..64).flat_map(|b| [b * 4096; 10]).collect();
        assert_eq!(offsets, want);

        let engine = Scripted::new(3, true, ok);
        let s = spec(vec![plan(3, None)], Some(Duration::from_millis(20)));
        let out = run(&engine, &s).unwrap();
        // Every lane stops on time, whichever lane saw the deadline first.
        assert_eq!(out.stopped_by, StopReason::Time);
        assert_eq!(out.read.ios as usize, engine.log.lock().unwrap().len());
    }

    #[test]
    fn each_refill_is_committed_on_its_own_and_the_last_rides_with_the_wait() {
        let engine = Scripted::new(1, false, ok);
        let s = spec(vec![plan(4, Some(4))], None);
        run(&engine, &s).unwrap();
        // Four entries: three commits before the 2nd, 3rd and 4th, the 4th goes with the wait.
        assert_eq!(engine.commits.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn eagain_goes_again_flagged_as_a_retry_and_counts_once() {
        // Block 5 answers -EAGAIN the first time it is tried, then succeeds.
        fn flaky(offset: u64, retry: bool) -> i32 {
            if offset == 5 * 4096 && !retry {
                -libc::EAGAIN
            } else {
                4096
            }
        }
        for inline in [false, true] {
            let engine = Scripted::new(1, inline, flaky);
            let s = spec(vec![plan(4, Some(64))], None);
            let out = run(&engine, &s).unwrap();
            assert_eq!(out.read.ios, 64, "inline {inline}");
            assert_eq!(out.eagain_retries, 1);
            let log = engine.log.lock().unwrap();
            assert_eq!(log.len(), 65);
            assert_eq!(
                log.iter().filter(|l| l.1).collect::<Vec<_>>(),
                [&(5 * 4096, true)]
            );
        }
    }

    #[test]
    fn a_failed_io_is_the_jobs_error_and_stops_it() {
        fn eio_at_9(offset: u64, _: bool) -> i32 {
            if offset == 9 * 4096 {
                -libc::EIO
            } else {
                4096
            }
        }
        fn short_at_3(offset: u64, _: bool) -> i32 {
            if offset == 3 * 4096 {
                0
            } else {
                4096
            }
        }
        for lanes in [1, 4] {
            let engine = Scripted::new(lanes, lanes > 1, eio_at_9);
            let s = spec(vec![plan(4, None)], None);
            let err = run(&engine, &s).unwrap_err();
            assert!(
                matches!(err, EngineError::Io { op: OpKind::Read, offset, ref source, .. }
                    if offset == 9 * 4096 && source.raw_os_error() == Some(libc::EIO)),
                "{err}"
            );
            let engine = Scripted::new(lanes, lanes > 1, short_at_3);
            let s = spec(vec![plan(4, None)], None);
            let err = run(&engine, &s).unwrap_err();
            assert!(
                matches!(err, EngineError::UnexpectedEof { offset, .. } if offset == 3 * 4096),
                "{err}"
            );
        }
    }

    #[test]
    fn the_engine_trait_reports_the_engines_kind() {
        assert_eq!(crate::engine::null::NullEngine.kind(), EngineKind::Null);
        assert_eq!(crate::engine::sync::SyncEngine.kind(), EngineKind::Sync);
    }
}
