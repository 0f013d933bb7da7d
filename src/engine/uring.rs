//! Owns the `uring` engine: one io_uring per job, registered buffers and files when the kernel
//! takes them, and the three moves the job loop (driver.rs) makes with it: queue an entry,
//! commit the queued entries (`io_uring_enter` without waiting), and commit with a wait for one
//! completion, then reap every completion ready.

use std::os::fd::RawFd;

use io_uring::{opcode, squeue, types, IoUring, Probe};

use super::driver::{Event, IoEngine, Lane, Queued};
use super::{fill_random, AlignedBuffer, EngineError, EngineKind, JobCtx, OpKind};

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

/// One job's ring: its slots' buffers, registered with it when the kernel lets us.
pub struct UringLane {
    // Dropped before `buffer` (fields drop in order): the kernel may hold the buffer until the
    // ring is gone.
    ring: IoUring,
    /// `None` once abandoned (leaked with I/O in flight).
    buffer: Option<AlignedBuffer>,
    /// Raw slot addresses, so building an entry does not borrow the buffer.
    base: *mut u8,
    stride: usize,
    len: usize,
    len_u32: u32,
    fd: RawFd,
    fixed_files: bool,
    fixed_buffers: bool,
}

impl IoEngine for UringEngine {
    type Lane = UringLane;

    fn engine_kind(&self) -> EngineKind {
        EngineKind::Uring
    }

    fn shape(&self, queue_depth: usize) -> (usize, usize) {
        (1, queue_depth)
    }

    fn open(&self, ctx: &JobCtx<'_>, _lane: usize, depth: usize) -> Result<UringLane, EngineError> {
        let plan = ctx.plan;
        let len = plan.block_bytes;
        let len_u32 =
            u32::try_from(len).map_err(|_| EngineError::BadPlan("--bs must be below 4G".into()))?;
        let mut buffer = AlignedBuffer::new(len, depth).ok_or(EngineError::Setup {
            what: "allocating I/O buffers",
            source: std::io::Error::from_raw_os_error(libc::ENOMEM),
        })?;
        for slot in 0..depth {
            fill_random(buffer.slot_mut(slot, len), plan.seed ^ slot as u64);
        }
        let entries =
            u32::try_from(depth).map_err(|_| EngineError::BadPlan("--qd is too large".into()))?;
        let ring = build_ring(self.flags, entries).map_err(|e| EngineError::Setup {
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
        // SAFETY: the iovecs point into `buffer`, which outlives the ring (dropped after it).
        let fixed_buffers = depth <= usize::from(u16::MAX)
            && unsafe { ring.submitter().register_buffers(&iovecs) }.is_ok();
        Ok(UringLane {
            ring,
            base: buffer.slot_ptr(0),
            stride: buffer.stride(),
            buffer: Some(buffer),
            len,
            len_u32,
            fd: ctx.fd,
            fixed_files,
            fixed_buffers,
        })
    }
}

impl UringLane {
    #[inline]
    fn sqe(&self, op: OpKind, slot: usize, offset: u64) -> squeue::Entry {
        // SAFETY: slot < depth: the slots are `stride` bytes apart in one allocation.
        let ptr = unsafe { self.base.add(slot * self.stride) };
        let len_u32 = self.len_u32;
        let fixed_buffers = self.fixed_buffers;
        macro_rules! entry {
            ($fd:expr) => {
                match (op, fixed_buffers) {
                    (OpKind::Read, true) => opcode::ReadFixed::new($fd, ptr, len_u32, slot as u16)
                        .offset(offset)
                        .build(),
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
        let sqe = if self.fixed_files {
            entry!(types::Fixed(0))
        } else {
            entry!(types::Fd(self.fd))
        };
        sqe.user_data(slot as u64)
    }
}

impl Lane for UringLane {
    fn buffer_mut(&mut self, slot: usize) -> Option<&mut [u8]> {
        let len = self.len;
        self.buffer.as_mut().map(|b| b.slot_mut(slot, len))
    }

    fn buffer(&self, slot: usize) -> Option<&[u8]> {
        self.buffer.as_ref().map(|b| b.slot(slot, self.len))
    }

    /// A retry goes through the kernel's worker (IOSQE_ASYNC), which submits it without
    /// REQ_NOWAIT.
    #[inline]
    fn queue(&mut self, slot: usize, op: OpKind, offset: u64, retry: bool) -> Queued {
        let mut sqe = self.sqe(op, slot, offset);
        if retry {
            sqe = sqe.flags(squeue::Flags::ASYNC);
        }
        // SAFETY: the buffer slot stays valid and untouched until its completion.
        match unsafe { self.ring.submission().push(&sqe) } {
            Ok(()) => Queued::Pending,
            Err(_) => Queued::Full,
        }
    }

    #[inline]
    fn commit(&mut self) -> std::io::Result<()> {
        self.ring.submit().map(drop)
    }

    #[inline]
    fn getevents(&mut self, events: &mut Vec<Event>) -> std::io::Result<()> {
        let waited = self.ring.submit_and_wait(1).map(drop);
        // Drained also after a failed wait: what completed is still accounted.
        events.extend(self.ring.completion().map(|cqe| Event {
            slot: cqe.user_data() as usize,
            res: cqe.result(),
        }));
        waited
    }

    /// The kernel puts a ring's registered files in its teardown, which runs in a workqueue
    /// after the ring's fd is closed: a raw device opened O_EXCL stayed claimed for a while
    /// after the job ended, and the next test's exclusive open got EBUSY (seconds under load,
    /// past the open's retry: tests/engine_block_devices.rs engines_agree_on_a_loop_device, flaky
    /// in CI). Unregistering puts them here, in this task, before the caller closes the fd.
    fn close(&mut self, drained: bool) {
        if self.fixed_files && drained {
            let _ = self.ring.submitter().unregister_files();
        }
    }

    /// The kernel may still write into these slots after the ring is gone (its teardown
    /// cancels asynchronously): never hand their memory back to the allocator.
    fn abandon(&mut self) {
        std::mem::forget(self.buffer.take());
    }
}

#[cfg(test)]
mod abi {
    /// The entries the engine builds are the kernel's `struct io_uring_sqe` (64 bytes) and
    /// `struct io_uring_cqe` (16 bytes), whose fields are fixed-width (`__u64 addr`, `__u32
    /// len`) on every architecture (include/uapi/linux/io_uring.h): no pointer-sized field, so
    /// 32-bit ARM has the same layout. Run on armv7 by scripts/ci/cross-build.sh --arch armv7
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
