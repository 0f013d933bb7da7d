//! Owns the `uring` engine: one io_uring per job, the queue kept full, registered buffers and
//! files when the kernel takes them, each I/O handed to the kernel as soon as its slot is free
//! (the last refill rides with the wait for a completion), every completion drained, and all
//! in-flight I/O reaped before returning.

use std::sync::atomic::Ordering;

use io_uring::{opcode, squeue, types, IoUring, Probe};

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
    /// -EAGAIN completions of this I/O so far.
    retries: u32,
}

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

/// The policy for a CQE's result. -EAGAIN is never a device error: the kernel gives it when
/// an I/O it tried without blocking could not get a request (tag exhaustion), and also when a
/// large O_DIRECT I/O is split into several bios against the queue's limits and one of them
/// could not: the whole I/O then completes -EAGAIN although the device is healthy (liburing
/// issue #766). Debian 11's 5.10 guest shows it on the EHCI and OHCI sticks' 1-2 MiB raw
/// reads (scripts/vm-e2e --kernel 5.10); the 6.1 and 6.12 guests do not.
fn completion(res: i32, retries: u32) -> Completion {
    match res {
        r if r > 0 => Completion::Done(r as u64),
        0 => Completion::Eof,
        r if -r == libc::EAGAIN && retries < MAX_EAGAIN_RETRIES => Completion::Retry,
        r => Completion::Failed(-r),
    }
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
                retries: 0,
            };
            depth
        ];
        let mut retry: Vec<usize> = Vec::new();
        let mut free: Vec<usize> = (0..depth).rev().collect();
        let mut stats = JobStats::new();
        let mut in_flight = 0usize;
        let mut index = 0u64;
        let mut stopping: Option<StopReason> = None;
        let mut first_error: Option<EngineError> = None;
        let fd = ctx.fd;
        let mut enter_failures = 0u32;
        // Raw slot addresses, so building an entry does not borrow the buffer (writes fill
        // their slot through it while entries are built).
        let base = buffer.slot_ptr(0);
        let stride = buffer.stride();
        let slot_ptr = |slot: usize| {
            // SAFETY: slot < depth: the slots are `stride` bytes apart in one allocation.
            unsafe { base.add(slot * stride) }
        };
        let make_sqe = |op: OpKind, slot: usize, offset: u64| -> squeue::Entry {
            let ptr = slot_ptr(slot);
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
            };
            sqe.user_data(slot as u64)
        };

        loop {
            // I/Os that completed -EAGAIN go back first, through the kernel's worker, which
            // submits them without REQ_NOWAIT; they are still in flight and keep their slot
            // and their first submission time (the retry is part of their latency).
            while let Some(slot) = retry.pop() {
                let Slot { op, offset, .. } = slots[slot];
                let sqe = make_sqe(op, slot, offset).flags(squeue::Flags::ASYNC);
                // SAFETY: the slot's buffer is untouched until this I/O completes.
                if unsafe { ring.submission().push(&sqe) }.is_err() {
                    // The ring has a place per slot, so this cannot happen; keep it for later.
                    retry.push(slot);
                    break;
                }
            }
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
                    let sqe = make_sqe(op, slot, offset);
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
                        retries: 0,
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
                        if in_flight > 0 {
                            // The kernel may still write into these slots after the ring is
                            // gone (its teardown cancels asynchronously): never hand their
                            // memory back to the allocator. A leak on a path that ends the
                            // test, instead of heap corruption.
                            std::mem::forget(buffer);
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
            for cqe in ring.completion() {
                let slot = cqe.user_data() as usize;
                let res = cqe.result();
                let Slot {
                    op,
                    offset,
                    submit_ns,
                    retries,
                } = slots[slot];
                let bytes = match completion(res, retries) {
                    Completion::Retry if stopping != Some(StopReason::Interrupted) => {
                        slots[slot].retries += 1;
                        stats.eagain_retries += 1;
                        retry.push(slot);
                        continue;
                    }
                    Completion::Done(b) => b,
                    Completion::Retry => {
                        // Stopping anyway: the I/O is simply not done.
                        free.push(slot);
                        in_flight -= 1;
                        continue;
                    }
                    Completion::Eof => {
                        free.push(slot);
                        in_flight -= 1;
                        first_error.get_or_insert(EngineError::UnexpectedEof { op, offset });
                        stopping = Some(StopReason::Interrupted);
                        continue;
                    }
                    Completion::Failed(errno) => {
                        free.push(slot);
                        in_flight -= 1;
                        first_error.get_or_insert_with(|| ctx.io_error(op, offset, errno));
                        stopping = Some(StopReason::Interrupted);
                        continue;
                    }
                };
                free.push(slot);
                in_flight -= 1;
                stats.record(op, bytes, done_ns.saturating_sub(submit_ns));
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
        // The kernel puts a ring's registered files in its teardown, which runs in a workqueue
        // after the ring's fd is closed: a raw device opened O_EXCL stayed claimed for a while
        // after the job ended, and the next test's exclusive open got EBUSY (seconds under
        // load, past the open's retry: tests/engine_block_devices.rs engines_agree_on_a_loop_device, flaky
        // in CI). Unregistering puts them here, in this task, before the caller closes the fd.
        if fixed_files && in_flight == 0 {
            let _ = ring.submitter().unregister_files();
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        stats.stopped_by = stopping.unwrap_or(StopReason::Size);
        Ok(stats)
    }
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
}

#[cfg(test)]
mod abi {
    /// The entries the engine builds are the kernel's `struct io_uring_sqe` (64 bytes) and
    /// `struct io_uring_cqe` (16 bytes), whose fields are fixed-width (`__u64 addr`, `__u32
    /// len`) on every architecture (include/uapi/linux/io_uring.h): no pointer-sized field, so
    /// 32-bit ARM has the same layout. Run on armv7 by scripts/cross-build --arch armv7
    /// (under qemu-arm-static), this is the proof the crate's types fit that ABI there.
    #[test]
    fn ring_entries_have_the_kernel_abi_layout_on_this_target() {
        use std::mem::{align_of, size_of};
        assert_eq!(size_of::<io_uring::squeue::Entry>(), 64);
        assert_eq!(size_of::<io_uring::squeue::Entry128>(), 128);
        assert_eq!(size_of::<io_uring::cqueue::Entry>(), 16);
        assert_eq!(size_of::<io_uring::cqueue::Entry32>(), 32);
        assert!(align_of::<io_uring::squeue::Entry>() >= 8);
        // A user_data and an offset beyond 4 GiB survive on a 32-bit target.
        let e = io_uring::opcode::Read::new(io_uring::types::Fd(3), std::ptr::null_mut(), 4096)
            .offset(5 << 30)
            .build()
            .user_data(u64::MAX - 1);
        assert_eq!(e.get_user_data(), u64::MAX - 1);
    }
}
