//! Owns the `uring` engine: one io_uring per job, the queue kept full, registered buffers and
//! files when the kernel takes them, each I/O handed to the kernel as soon as its slot is free
//! (the last refill rides with the wait for a completion), every completion drained, and all
//! in-flight I/O reaped before returning.

use std::sync::atomic::Ordering;

use io_uring::{opcode, types, IoUring, Probe};

use super::{
    fill_random, AlignedBuffer, Engine, EngineError, EngineKind, JobCtx, JobStats, OpKind,
    StopReason,
};

/// The ring set-up flags the kernel accepted at probe time, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RingFlags {
    /// SINGLE_ISSUER | DEFER_TASKRUN | COOP_TASKRUN (6.1+): completions run in our own
    /// `io_uring_enter`, no inter-processor interrupts to wake task work.
    DeferTaskrun,
    /// COOP_TASKRUN (5.19+).
    CoopTaskrun,
    /// Plain ring.
    Plain,
}

pub struct UringEngine {
    flags: RingFlags,
}

fn build_ring(flags: RingFlags, entries: u32) -> std::io::Result<IoUring> {
    let mut builder = IoUring::builder();
    match flags {
        RingFlags::DeferTaskrun => {
            builder
                .setup_single_issuer()
                .setup_defer_taskrun()
                .setup_coop_taskrun();
        }
        RingFlags::CoopTaskrun => {
            builder.setup_coop_taskrun();
        }
        RingFlags::Plain => {}
    }
    builder.build(entries)
}

/// Explains why io_uring cannot be set up, naming the usual culprits.
fn unavailable_reason(err: &std::io::Error) -> String {
    let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()
        .map(|s| s.trim().to_string());
    match err.raw_os_error() {
        Some(libc::ENOSYS) => {
            "io_uring_setup returned ENOSYS: the kernel is built without io_uring (CONFIG_IO_URING) \
             or a seccomp filter hides it"
                .to_string()
        }
        Some(libc::EPERM) => match sysctl.as_deref() {
            Some(v) if v != "0" => format!(
                "io_uring_setup returned EPERM: kernel.io_uring_disabled = {v} (set it to 0, or run \
                 as a member of kernel.io_uring_group)"
            ),
            _ => "io_uring_setup returned EPERM: a seccomp filter or an LSM (container runtime, \
                  SELinux) forbids io_uring"
                .to_string(),
        },
        _ => format!("io_uring_setup failed: {err}"),
    }
}

impl UringEngine {
    /// Checks at run time that a ring can be built and has the opcodes we use, and which set-up
    /// flags the kernel accepts.
    pub fn probe() -> Result<Self, EngineError> {
        let ring = IoUring::new(4).map_err(|e| EngineError::UringUnavailable {
            reason: unavailable_reason(&e),
        })?;
        let mut probe = Probe::new();
        ring.submitter()
            .register_probe(&mut probe)
            .map_err(|e| EngineError::UringUnavailable {
                reason: format!(
                    "IORING_REGISTER_PROBE failed ({e}): the kernel is older than 5.6, too old \
                     for this engine"
                ),
            })?;
        for (code, name) in [
            (opcode::Read::CODE, "READ"),
            (opcode::Write::CODE, "WRITE"),
            (opcode::ReadFixed::CODE, "READ_FIXED"),
            (opcode::WriteFixed::CODE, "WRITE_FIXED"),
        ] {
            if !probe.is_supported(code) {
                return Err(EngineError::UringUnavailable {
                    reason: format!("the kernel's io_uring lacks the {name} opcode"),
                });
            }
        }
        drop(ring);
        // USBPERF_URING_SETUP=defer|coop|plain caps the flags tried: a knob to compare kernels'
        // behaviour or to work around a kernel bug in one of them.
        let candidates: &[RingFlags] = match std::env::var("USBPERF_URING_SETUP").as_deref() {
            Ok("plain") => &[],
            Ok("coop") => &[RingFlags::CoopTaskrun],
            _ => &[RingFlags::DeferTaskrun, RingFlags::CoopTaskrun],
        };
        let flags = candidates
            .iter()
            .copied()
            .find(|&f| build_ring(f, 4).is_ok())
            .unwrap_or(RingFlags::Plain);
        Ok(UringEngine { flags })
    }

    pub fn describe(&self) -> String {
        let flags = match self.flags {
            RingFlags::DeferTaskrun => "SINGLE_ISSUER|DEFER_TASKRUN|COOP_TASKRUN",
            RingFlags::CoopTaskrun => "COOP_TASKRUN",
            RingFlags::Plain => "no set-up flags",
        };
        format!("io_uring with {flags}, one ring per job, registered buffers and files")
    }
}

/// Consecutive failed `io_uring_enter` calls after which a job gives up draining its ring.
const MAX_ENTER_FAILURES: u32 = 100;

#[derive(Debug, Clone, Copy)]
struct Slot {
    op: OpKind,
    offset: u64,
    submit_ns: u64,
}

impl Engine for UringEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Uring
    }

    fn run_job(&self, ctx: &JobCtx<'_>) -> Result<JobStats, EngineError> {
        let plan = ctx.plan;
        let depth = plan.queue_depth;
        let len = plan.block_bytes;
        let len_u32 =
            u32::try_from(len).map_err(|_| EngineError::BadPlan("--bs must be below 4G".into()))?;
        let limit = plan.io_limit.unwrap_or(u64::MAX);
        // Declared before the ring so it is dropped after it: the kernel may still hold it.
        let mut buffer = AlignedBuffer::new(len, depth).ok_or(EngineError::Setup {
            what: "allocating I/O buffers",
            source: std::io::Error::from_raw_os_error(libc::ENOMEM),
        })?;
        for slot in 0..depth {
            fill_random(buffer.slot_mut(slot, len), plan.seed ^ slot as u64);
        }
        let entries =
            u32::try_from(depth).map_err(|_| EngineError::BadPlan("--qd is too large".into()))?;
        let mut ring = build_ring(self.flags, entries).map_err(|e| EngineError::Setup {
            what: "creating the io_uring",
            source: e,
        })?;
        // Registration saves the kernel a file lookup and a page pinning per I/O; both are
        // optional (old kernels, memlock limits), so failures fall back to plain opcodes.
        let fixed_files = ring.submitter().register_files(&[ctx.fd]).is_ok();
        let iovecs: Vec<libc::iovec> = (0..depth)
            .map(|slot| libc::iovec {
                iov_base: buffer.slot_ptr(slot).cast(),
                iov_len: len,
            })
            .collect();
        // SAFETY: the iovecs point into `buffer`, which outlives the ring.
        let fixed_buffers = depth <= usize::from(u16::MAX)
            && unsafe { ring.submitter().register_buffers(&iovecs) }.is_ok();

        let mut slots = vec![
            Slot {
                op: OpKind::Read,
                offset: 0,
                submit_ns: 0,
            };
            depth
        ];
        let mut free: Vec<usize> = (0..depth).rev().collect();
        let mut stats = JobStats::new();
        let mut in_flight = 0usize;
        let mut index = 0u64;
        let mut stopping: Option<StopReason> = None;
        let mut first_error: Option<EngineError> = None;
        let fd = ctx.fd;
        let mut enter_failures = 0u32;

        loop {
            if stopping.is_none() && ctx.should_stop() {
                stopping = Some(StopReason::Interrupted);
            }
            if stopping.is_none() {
                // Refills go to the kernel one per `io_uring_enter`, as fio does by default
                // (`iodepth_batch_submit=1`), not all together. io_uring plugs a call that
                // carries three or more entries: the block layer holds those requests until the
                // call ends and hands them to the driver as one batch with one doorbell. On this
                // project's virtio disk that batching cost 7 % of random-read IOPS against a
                // steady stream (paired runs beside fio in docs/benchmarks.md), so the device
                // would be measured under a load fio never gives it. The entry pushed last is
                // submitted together with the wait below, so a lone refill still costs one call.
                let mut pending = false;
                while let Some(&slot) = free.last() {
                    if index >= limit {
                        stopping = Some(StopReason::Size);
                        break;
                    }
                    // On an error the entry stays queued; the wait below submits it or says why.
                    if pending && ring.submit().is_err() {
                        break;
                    }
                    let (op, offset) = plan.io_at(index);
                    if op == OpKind::Write {
                        if let Some(hook) = ctx.data {
                            hook.fill(offset, buffer.slot_mut(slot, len));
                        }
                    }
                    let ptr = buffer.slot_ptr(slot);
                    macro_rules! entry {
                        ($fd:expr) => {
                            match (op, fixed_buffers) {
                                (OpKind::Read, true) => {
                                    opcode::ReadFixed::new($fd, ptr, len_u32, slot as u16)
                                        .offset(offset)
                                        .build()
                                }
                                (OpKind::Read, false) => {
                                    opcode::Read::new($fd, ptr, len_u32).offset(offset).build()
                                }
                                (OpKind::Write, true) => {
                                    opcode::WriteFixed::new($fd, ptr, len_u32, slot as u16)
                                        .offset(offset)
                                        .build()
                                }
                                (OpKind::Write, false) => {
                                    opcode::Write::new($fd, ptr, len_u32).offset(offset).build()
                                }
                            }
                        };
                    }
                    let sqe = if fixed_files {
                        entry!(types::Fixed(0))
                    } else {
                        entry!(types::Fd(fd))
                    }
                    .user_data(slot as u64);
                    // Stamped per I/O: each one enters the kernel on its own call.
                    let stamp_ns = super::now_ns();
                    // SAFETY: the buffer slot stays valid and untouched until its completion.
                    if unsafe { ring.submission().push(&sqe) }.is_err() {
                        // Cannot happen (the ring has `depth` entries), but never lose a slot.
                        break;
                    }
                    pending = true;
                    free.pop();
                    slots[slot] = Slot {
                        op,
                        offset,
                        submit_ns: stamp_ns,
                    };
                    index += 1;
                    in_flight += 1;
                }
            }
            if in_flight == 0 {
                break;
            }
            match ring.submit_and_wait(1) {
                Ok(_) => enter_failures = 0,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => {}
                Err(e) => {
                    // Keep reaping what is in flight (the kernel still owns those buffers);
                    // give up only if the ring stays unusable.
                    enter_failures += 1;
                    stopping = Some(StopReason::Interrupted);
                    if enter_failures >= MAX_ENTER_FAILURES {
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
            for cqe in ring.completion() {
                let slot = cqe.user_data() as usize;
                let res = cqe.result();
                let Slot {
                    op,
                    offset,
                    submit_ns,
                } = slots[slot];
                free.push(slot);
                in_flight -= 1;
                if res <= 0 {
                    if first_error.is_none() {
                        first_error = Some(if res == 0 {
                            EngineError::UnexpectedEof { op, offset }
                        } else {
                            ctx.io_error(op, offset, -res)
                        });
                    }
                    stopping = Some(StopReason::Interrupted);
                    continue;
                }
                stats.record(op, res as u64, done_ns.saturating_sub(submit_ns));
                if op == OpKind::Read {
                    if let Some(hook) = ctx.data {
                        hook.check(offset, buffer.slot(slot, len));
                    }
                }
            }
            ctx.progress.store(stats.bytes(), Ordering::Relaxed);
            if stopping.is_none() && ctx.deadline_ns.is_some_and(|d| done_ns >= d) {
                stopping = Some(StopReason::Time);
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        stats.stopped_by = stopping.unwrap_or(StopReason::Size);
        Ok(stats)
    }
}
