//! Owns the `sync` engine: a pread/pwrite thread pool with one thread per in-flight I/O (queue
//! depth × jobs threads). Always built; the fallback when io_uring is missing or forbidden.
//! Each thread is one lane of the job loop (driver.rs) with a depth of one: its I/O is done
//! inside `queue`, as fio's psync engine does it.

use super::driver::{Event, IoEngine, Lane, Queued};
use super::{fill_random, AlignedBuffer, EngineError, EngineKind, JobCtx, OpKind};

pub struct SyncEngine;

/// One thread's buffer and its own open file description of the target.
pub struct SyncLane {
    fd: std::os::fd::RawFd,
    /// Whether `fd` was opened for this lane (and is closed with it).
    owned: bool,
    len: usize,
    buffer: AlignedBuffer,
}

/// A second open file description of the target, with the same flags (`O_DIRECT`, the access
/// mode, `O_DSYNC`): every `pread` on a descriptor shared by many threads takes and drops a
/// reference on one `struct file`, and 64 threads doing so bounce its cache line between the
/// CPUs. fio's psync jobs each open the file themselves; so does each lane here. Reopened
/// through `/proc/self/fd`, which names the very inode already opened (and checked) by the
/// caller, never a path that could have been replaced. `None` when /proc is not mounted: the
/// lane then shares the caller's descriptor.
fn reopen(fd: std::os::fd::RawFd) -> Option<std::os::fd::RawFd> {
    // SAFETY: F_GETFL on a descriptor the caller owns for the whole run.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return None;
    }
    let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).ok()?;
    let keep = libc::O_ACCMODE | libc::O_DIRECT | libc::O_DSYNC | libc::O_SYNC | libc::O_NOATIME;
    // SAFETY: a valid NUL-terminated path; the new descriptor is owned by the lane.
    let new = unsafe { libc::open(path.as_ptr(), (flags & keep) | libc::O_CLOEXEC) };
    (new >= 0).then_some(new)
}

impl Drop for SyncLane {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: the lane opened this descriptor and nothing else holds it.
            unsafe { libc::close(self.fd) };
        }
    }
}

impl IoEngine for SyncEngine {
    type Lane = SyncLane;

    fn engine_kind(&self) -> EngineKind {
        EngineKind::Sync
    }

    /// One lane per in-flight I/O; the lanes share the job's I/O counter, so together they
    /// issue exactly the plan's I/Os, like one ring with `queue_depth` slots.
    fn shape(&self, queue_depth: usize) -> (usize, usize) {
        (queue_depth, 1)
    }

    fn open(&self, ctx: &JobCtx<'_>, lane: usize, _depth: usize) -> Result<SyncLane, EngineError> {
        let len = ctx.plan.block_bytes;
        if i32::try_from(len).is_err() {
            return Err(EngineError::BadPlan("--bs must be below 2G".into()));
        }
        let mut buffer = AlignedBuffer::new(len, 1).ok_or(EngineError::Setup {
            what: "allocating an I/O buffer",
            source: std::io::Error::from_raw_os_error(libc::ENOMEM),
        })?;
        fill_random(buffer.slot_mut(0, len), ctx.plan.seed ^ lane as u64);
        let own = reopen(ctx.fd);
        Ok(SyncLane {
            fd: own.unwrap_or(ctx.fd),
            owned: own.is_some(),
            len,
            buffer,
        })
    }
}

impl Lane for SyncLane {
    fn buffer_mut(&mut self, _slot: usize) -> Option<&mut [u8]> {
        Some(self.buffer.slot_mut(0, self.len))
    }

    fn buffer(&self, _slot: usize) -> Option<&[u8]> {
        Some(self.buffer.slot(0, self.len))
    }

    /// The whole block, retrying EINTR and continuing short transfers: the result is the
    /// block's length, 0 when the target ended first, or -errno.
    fn queue(&mut self, _slot: usize, op: OpKind, offset: u64, _retry: bool) -> Queued {
        let len = self.len;
        let ptr = self.buffer.slot_ptr(0);
        let mut done = 0usize;
        while done < len {
            // SAFETY: `ptr + done .. ptr + len` lies inside the buffer; fd is owned by the caller.
            let res = unsafe {
                match op {
                    OpKind::Read => libc::pread(
                        self.fd,
                        ptr.add(done).cast(),
                        len - done,
                        (offset + done as u64) as libc::off_t,
                    ),
                    OpKind::Write => libc::pwrite(
                        self.fd,
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
                return Queued::Done(-errno);
            }
            if res == 0 {
                return Queued::Done(0);
            }
            done += res as usize;
        }
        // Fits: `open` checked the block size.
        Queued::Done(len as i32)
    }

    fn commit(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    /// Never reached: every I/O is done inside `queue`.
    fn getevents(&mut self, _events: &mut Vec<Event>) -> std::io::Result<()> {
        Ok(())
    }
}
