//! Owns one question about an open target: can it do non-blocking I/O (`RWF_NOWAIT`)? The answer
//! decides whether io_uring can issue I/O inline or must hand every I/O to its worker threads.
//!
//! io_uring first tries each request without blocking. When the file was opened without
//! `FMODE_NOWAIT` (block devices whose driver lacks nowait support, such as zram; filesystems
//! such as vfat), the kernel skips that attempt and queues every request to an io-wq worker,
//! which then blocks in its place: two extra thread hand-offs per I/O. `preadv2(RWF_NOWAIT)`
//! checks the same `FMODE_NOWAIT` bit and answers `EOPNOTSUPP` when it is missing, so one
//! read-only probe tells us beforehand. That is io_uring's own criterion for files since Linux
//! 6.2 and, once the block layer set `FMODE_NOWAIT` only for capable queues (the 6.6 LTS has
//! it), for block devices too; on older kernels a refusing block device answers `EAGAIN`, is
//! taken as capable, and keeps io_uring as before.

use std::os::fd::RawFd;

use super::AlignedBuffer;

/// What the probe found out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nowait {
    /// The target takes non-blocking I/O: io_uring issues it inline.
    Supported,
    /// `RWF_NOWAIT` is refused (`EOPNOTSUPP`): io_uring would punt every I/O to io-wq.
    Unsupported,
    /// The probe could not tell (an unaligned length, an old kernel, an I/O error); the reason.
    Unknown(String),
}

/// Reads `len` bytes at `offset` with `RWF_NOWAIT` and classifies the answer. Never writes.
/// `len` and `offset` must suit the open mode (multiples of the logical block size under
/// O_DIRECT), otherwise the answer is `Unknown`.
pub fn probe(fd: RawFd, len: usize, offset: u64) -> Nowait {
    // SAFETY: F_GETFD only reads the descriptor's flags. A closed descriptor is no target:
    // checked first, since an emulator (qemu-user) may answer preadv2 for one anyway.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Nowait::Unknown(format!(
            "preadv2(RWF_NOWAIT) not tried: {}",
            std::io::Error::last_os_error()
        ));
    }
    let Some(mut buffer) = AlignedBuffer::new(len.max(1), 1) else {
        return Nowait::Unknown("cannot allocate the probe buffer".into());
    };
    let iov = libc::iovec {
        iov_base: buffer.slot_mut(0, len.max(1)).as_mut_ptr().cast(),
        iov_len: len,
    };
    let Ok(offset) = libc::off_t::try_from(offset) else {
        return Nowait::Unknown(format!("offset {offset} does not fit off_t"));
    };
    // SAFETY: one iovec pointing into `buffer`, which outlives the call; the fd is the caller's.
    let res = unsafe { libc::preadv2(fd, &iov, 1, offset, libc::RWF_NOWAIT) };
    if res >= 0 {
        return Nowait::Supported;
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        // Non-blocking I/O is supported; it just could not complete without waiting right now.
        Some(libc::EAGAIN) => Nowait::Supported,
        Some(libc::EOPNOTSUPP) => Nowait::Unsupported,
        _ => Nowait::Unknown(format!("preadv2(RWF_NOWAIT) failed: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_file_in_the_temp_dir_gets_an_answer_and_a_bad_fd_is_unknown() {
        // Which answer depends on the filesystem of the temporary directory; tests/engine_block_devices.rs
        // pins the answers on ext4, loop and zram.
        let path = std::env::temp_dir().join(format!("nowait-probe-{}", std::process::id()));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&[7u8; 8192]).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let answer = probe(f.as_raw_fd(), 4096, 0);
        std::fs::remove_file(&path).unwrap();
        assert!(
            matches!(answer, Nowait::Supported | Nowait::Unsupported),
            "{answer:?}"
        );
        // EBADF natively; qemu-user (scripts/ci/cross-build.sh runs these tests under it) may word
        // the refusal otherwise, but it is never an answer.
        assert!(matches!(probe(-1, 4096, 0), Nowait::Unknown(ref why) if why.contains("preadv2")));
    }
}
