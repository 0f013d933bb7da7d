//! Owns the tests of raw flash (MTD): the read scan of a whole device, which counts corrected
//! bitflips and uncorrectable pages per erase block without writing anything, and the
//! erase/write/read speed test with verify, which runs only on a test area that
//! `safety::mtd` allowed.
//!
//! Both go through the MTD character device and its ioctls (include/uapi/mtd/mtd-abi.h):
//! `MEMGETINFO` (the geometry), `MEMGETBADBLOCK` (a block's bad-block marker, read only),
//! `ECCGETSTATS` (the kernel's corrected and failed counters, read before and after each
//! page: their difference is that page's count), `MEMERASE64`. A read through the character
//! device returns the data even when the ECC corrected or failed (drivers/mtd/mtdchar.c), so
//! a page's outcome is known only from the counters. Writes go through `write()` in the
//! default (ECC) mode, so the driver writes the ECC and keeps the spare area's bad-block
//! marker; bad blocks are skipped, never erased, and never marked.

use std::fs::File;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::safety::signals::StopFlag;
use crate::units::mib_per_s;

/// The major number of MTD character devices; `/dev/mtdN` is minor 2N, `/dev/mtdNro` 2N+1.
pub const MTD_CHAR_MAJOR: u64 = 90;

/// `struct mtd_info_user`: 32 bytes on every target (the trailing `__u64` aligns to 8).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct MtdInfoUser {
    pub kind: u8,
    pub flags: u32,
    pub size: u32,
    pub erasesize: u32,
    pub writesize: u32,
    pub oobsize: u32,
    pub padding: u64,
}

/// `struct mtd_ecc_stats`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MtdEccStats {
    pub corrected: u32,
    pub failed: u32,
    pub badblocks: u32,
    pub bbtblocks: u32,
}

/// `struct erase_info_user64`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct EraseInfoUser64 {
    pub start: u64,
    pub length: u64,
}

nix::ioctl_read!(mem_get_info, b'M', 1, MtdInfoUser);
nix::ioctl_write_ptr!(mem_get_bad_block, b'M', 11, i64);
nix::ioctl_read!(ecc_get_stats, b'M', 18, MtdEccStats);
nix::ioctl_write_ptr!(mem_erase64, b'M', 20, EraseInfoUser64);

/// Why a flash test could not run or stopped.
#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    #[error(
        "could not open {node}: {err} (run as root; the node must be the MTD character device)"
    )]
    Open { node: String, err: std::io::Error },
    #[error("{node} is not MTD character device {index} (major 90, minor {minor}): a stale or foreign /dev node, not used")]
    NotMtd {
        node: String,
        index: u32,
        minor: u64,
    },
    #[error("{ioctl} on {node} failed: {err}")]
    Ioctl {
        ioctl: &'static str,
        node: String,
        err: nix::Error,
    },
    #[error("{node}: the kernel reports {what} {got}, sysfs said {want}: the device changed under the test")]
    Geometry {
        node: String,
        what: &'static str,
        got: u64,
        want: u64,
    },
    #[error("{node}: {what} at offset {offset}: {err}")]
    Io {
        node: String,
        what: &'static str,
        offset: u64,
        err: std::io::Error,
    },
    #[error("{node} has no good erase block to test")]
    NoGoodBlock { node: String },
}

/// An open MTD character device and its geometry as the kernel gave it.
pub struct MtdDev {
    file: File,
    node: String,
    /// The device's size: `MEMGETINFO`'s is 32 bits, so a larger device's comes from sysfs
    /// (`check_geometry`).
    size: u64,
    pub info: MtdInfoUser,
}

impl MtdDev {
    /// Opens `/dev/mtd<index>` (read-only uses its `ro` node, which the kernel opens for
    /// reading only) and checks it is that device.
    pub fn open(index: u32, write: bool) -> Result<MtdDev, FlashError> {
        let (node, minor) = if write {
            (format!("/dev/mtd{index}"), u64::from(index) * 2)
        } else {
            (format!("/dev/mtd{index}ro"), u64::from(index) * 2 + 1)
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&node)
            .map_err(|err| FlashError::Open {
                node: node.clone(),
                err,
            })?;
        let meta = file.metadata().map_err(|err| FlashError::Open {
            node: node.clone(),
            err,
        })?;
        let rdev = meta.rdev();
        if !meta.file_type().is_char_device()
            || libc::major(rdev) as u64 != MTD_CHAR_MAJOR
            || libc::minor(rdev) as u64 != minor
        {
            return Err(FlashError::NotMtd { node, index, minor });
        }
        let mut info = MtdInfoUser::default();
        // SAFETY: MEMGETINFO fills a `struct mtd_info_user`, which `info` is.
        unsafe { mem_get_info(file.as_raw_fd(), &mut info) }.map_err(|err| FlashError::Ioctl {
            ioctl: "MEMGETINFO",
            node: node.clone(),
            err,
        })?;
        let size = u64::from(info.size);
        Ok(MtdDev {
            file,
            node,
            info,
            size,
        })
    }

    fn nand(&self) -> bool {
        // MTD_NANDFLASH (4) and MTD_MLCNANDFLASH (8).
        matches!(self.info.kind, 4 | 8)
    }

    /// Whether the erase block at `offset` is marked bad (NAND only; never bad elsewhere).
    pub fn is_bad(&self, offset: u64) -> Result<bool, FlashError> {
        if !self.nand() {
            return Ok(false);
        }
        let off = offset as i64;
        // SAFETY: MEMGETBADBLOCK reads the `loff_t` the pointer points to.
        let r = unsafe { mem_get_bad_block(self.file.as_raw_fd(), &off) };
        r.map(|v| v > 0).map_err(|err| FlashError::Ioctl {
            ioctl: "MEMGETBADBLOCK",
            node: self.node.clone(),
            err,
        })
    }

    pub fn ecc_stats(&self) -> Result<MtdEccStats, FlashError> {
        let mut s = MtdEccStats::default();
        if !self.nand() {
            return Ok(s);
        }
        // SAFETY: ECCGETSTATS fills a `struct mtd_ecc_stats`, which `s` is.
        unsafe { ecc_get_stats(self.file.as_raw_fd(), &mut s) }.map_err(|err| {
            FlashError::Ioctl {
                ioctl: "ECCGETSTATS",
                node: self.node.clone(),
                err,
            }
        })?;
        Ok(s)
    }

    fn erase(&self, offset: u64, length: u64) -> Result<(), nix::Error> {
        let e = EraseInfoUser64 {
            start: offset,
            length,
        };
        // SAFETY: MEMERASE64 reads the `struct erase_info_user64` the pointer points to.
        unsafe { mem_erase64(self.file.as_raw_fd(), &e) }.map(|_| ())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), FlashError> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|err| FlashError::Io {
                node: self.node.clone(),
                what: "read",
                offset,
                err,
            })
    }

    /// Checks the kernel's geometry against what the inventory read from sysfs.
    pub fn check_geometry(
        &mut self,
        size: Option<u64>,
        erase: Option<u64>,
    ) -> Result<(), FlashError> {
        let kernel = full_size(self.info.size, size);
        self.size = kernel;
        for (what, got, want) in [
            ("size", kernel, size),
            ("erase block", u64::from(self.info.erasesize), erase),
        ] {
            if let Some(want) = want {
                if got != want {
                    return Err(FlashError::Geometry {
                        node: self.node.clone(),
                        what,
                        got,
                        want,
                    });
                }
            }
        }
        Ok(())
    }

    /// The unit a scan reads and a verify compares: a NAND page, else 4 KiB (NOR and RAM
    /// write bytes), never more than an erase block.
    fn page(&self) -> u64 {
        let w = u64::from(self.info.writesize.max(1));
        let unit = if w > 1 { w } else { 4096 };
        unit.min(u64::from(self.info.erasesize.max(1)))
    }
}

/// How many block numbers, findings or failures a scan or speed test lists: the worst
/// ones, with the counts of all. A report stays within the readers' bounds
/// (`usbperf_report::bounds`: 4,096 items a list, 32,768 values in all) however bad the
/// flash.
pub const MAX_LISTED: usize = 64;

/// A device's size from `MEMGETINFO`'s 32-bit one and sysfs's: a device of 4 GiB or more
/// has only its low 32 bits there, and sysfs's size is taken when those bits agree.
pub fn full_size(memgetinfo: u32, sysfs: Option<u64>) -> u64 {
    match sysfs {
        Some(s) if s > u64::from(u32::MAX) && s & u64::from(u32::MAX) == u64::from(memgetinfo) => s,
        _ => u64::from(memgetinfo),
    }
}

/// What a read scan found in one erase block that was not clean.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BlockFinding {
    /// The erase block's number in the device.
    pub block: u64,
    /// Bits the ECC corrected in it.
    pub corrected_bits: u64,
    /// Pages (their number within the block) the ECC could not correct.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uncorrectable_pages: Vec<u64>,
}

/// The outcome of a read scan of a whole MTD device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FlashScan {
    pub mtd: String,
    pub label: String,
    pub erase_blocks: u64,
    pub page_bytes: u64,
    pub pages_read: u64,
    /// Erase blocks marked bad (skipped).
    pub bad_block_count: u64,
    /// Their numbers, the first [`MAX_LISTED`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bad_blocks: Vec<u64>,
    pub corrected_bits: u64,
    pub uncorrectable_pages: u64,
    /// Blocks with a corrected bit or an uncorrectable page.
    pub blocks_with_findings: u64,
    /// The worst [`MAX_LISTED`] of them (uncorrectable pages first, then corrected bits), in
    /// block order; each lists at most [`MAX_LISTED`] pages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<BlockFinding>,
    pub seconds: f64,
    pub mib_per_s: f64,
    /// The scan stopped early (a signal): later blocks were not read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

/// Reads every good erase block of `dev` page by page; writes nothing.
pub fn scan(
    dev: &MtdDev,
    mtd: &str,
    label: &str,
    stop: &StopFlag,
) -> Result<FlashScan, FlashError> {
    let eb = u64::from(dev.info.erasesize.max(1));
    let size = dev.size;
    let page = dev.page();
    let mut buf = vec![0u8; page as usize];
    let mut out = FlashScan {
        mtd: mtd.to_string(),
        label: label.to_string(),
        erase_blocks: size / eb,
        page_bytes: page,
        pages_read: 0,
        bad_block_count: 0,
        bad_blocks: Vec::new(),
        corrected_bits: 0,
        uncorrectable_pages: 0,
        blocks_with_findings: 0,
        blocks: Vec::new(),
        seconds: 0.0,
        mib_per_s: 0.0,
        interrupted: false,
    };
    let mut findings: Vec<(u64, BlockFinding)> = Vec::new();
    let t0 = Instant::now();
    for block in 0..size / eb {
        if stop.requested() {
            out.interrupted = true;
            break;
        }
        let base = block * eb;
        if dev.is_bad(base)? {
            out.bad_block_count += 1;
            if out.bad_blocks.len() < MAX_LISTED {
                out.bad_blocks.push(block);
            }
            continue;
        }
        let mut finding = BlockFinding {
            block,
            corrected_bits: 0,
            uncorrectable_pages: Vec::new(),
        };
        let mut uncorrectable = 0u64;
        // One ECCGETSTATS a page: a page's "after" is the next one's "before". Read afresh
        // at each block, after its bad-block check (which may read the spare area).
        let mut before = dev.ecc_stats()?;
        for p in 0..eb / page {
            dev.read_at(&mut buf, base + p * page)?;
            let after = dev.ecc_stats()?;
            out.pages_read += 1;
            finding.corrected_bits += u64::from(after.corrected.wrapping_sub(before.corrected));
            if after.failed != before.failed {
                uncorrectable += 1;
                if finding.uncorrectable_pages.len() < MAX_LISTED {
                    finding.uncorrectable_pages.push(p);
                }
            }
            before = after;
        }
        out.corrected_bits += finding.corrected_bits;
        out.uncorrectable_pages += uncorrectable;
        if finding.corrected_bits > 0 || uncorrectable > 0 {
            out.blocks_with_findings += 1;
            findings.push((uncorrectable, finding));
        }
    }
    out.blocks = worst_blocks(findings);
    out.seconds = t0.elapsed().as_secs_f64();
    out.mib_per_s = mib_per_s(out.pages_read * page, out.seconds);
    Ok(out)
}

/// The [`MAX_LISTED`] worst of a scan's findings (each with its count of uncorrectable
/// pages): most uncorrectable pages first, then most corrected bits; in block order.
pub fn worst_blocks(mut findings: Vec<(u64, BlockFinding)>) -> Vec<BlockFinding> {
    findings.sort_by(|(ua, a), (ub, b)| {
        ub.cmp(ua)
            .then(b.corrected_bits.cmp(&a.corrected_bits))
            .then(a.block.cmp(&b.block))
    });
    let mut out: Vec<BlockFinding> = findings
        .into_iter()
        .take(MAX_LISTED)
        .map(|(_, f)| f)
        .collect();
    out.sort_by_key(|f| f.block);
    out
}

/// One figure of the speed test: its rate over the blocks and half its 95 % confidence
/// interval (the blocks are its samples).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FlashRate {
    /// Bytes over the summed time of the blocks.
    pub mib_per_s: f64,
    /// Half the 95 % confidence interval of the per-block rates' mean, in % of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci95_percent: Option<f64>,
}

/// The outcome of the erase/write/read speed test with verify on a test area.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FlashSpeed {
    pub mtd: String,
    pub label: String,
    pub blocks_tested: u64,
    pub bytes_per_block: u64,
    /// Bad blocks skipped, never erased.
    pub bad_block_count: u64,
    /// Their numbers, the first [`MAX_LISTED`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bad_blocks: Vec<u64>,
    pub erase: FlashRate,
    pub write: FlashRate,
    pub read: FlashRate,
    /// Pages read back different from what was written.
    pub mismatched_pages: u64,
    /// Blocks the erase failed on (a block going bad: the driver leaves its marking to the
    /// filesystem that owns the area).
    pub erase_failure_count: u64,
    /// The first [`MAX_LISTED`] of them, with the error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub erase_failures: Vec<String>,
    /// Bits the ECC corrected while reading back, and steps it could not.
    pub corrected_bits: u64,
    pub ecc_failures: u64,
    /// The area is left erased (all blocks but the bad ones and those that failed).
    pub left_erased: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

/// Fills `buf` with the pattern of page `seed` (its number in the device: a different
/// sequence per page, so a page written to the wrong place shows).
fn pattern(seed: u64, buf: &mut [u8]) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// Erases, writes, reads back and verifies every good block of `dev` up to `max_blocks`,
/// then erases them again. The caller has checked the area with `safety::mtd`.
pub fn speed(
    dev: &MtdDev,
    mtd: &str,
    label: &str,
    max_blocks: Option<u64>,
    stop: &StopFlag,
) -> Result<FlashSpeed, FlashError> {
    let eb = u64::from(dev.info.erasesize.max(1));
    let page = dev.page();
    let blocks = dev.size / eb;
    let mut good = Vec::new();
    let mut bad = Vec::new();
    let mut bad_count = 0u64;
    for b in 0..blocks {
        if dev.is_bad(b * eb)? {
            bad_count += 1;
            if bad.len() < MAX_LISTED {
                bad.push(b);
            }
        } else if max_blocks.map_or(true, |m| (good.len() as u64) < m) {
            good.push(b);
        }
    }
    if good.is_empty() {
        return Err(FlashError::NoGoodBlock {
            node: dev.node.clone(),
        });
    }
    let (mut erase_s, mut write_s, mut read_s) = (Vec::new(), Vec::new(), Vec::new());
    let mut failures = Vec::new();
    let mut failure_count = 0u64;
    let mut mismatched = 0;
    let mut tested = Vec::new();
    let mut wbuf = vec![0u8; eb as usize];
    let mut rbuf = vec![0u8; eb as usize];
    let before = dev.ecc_stats()?;
    let mut interrupted = false;
    for &b in &good {
        if stop.requested() {
            interrupted = true;
            break;
        }
        let off = b * eb;
        let t = Instant::now();
        if let Err(e) = dev.erase(off, eb) {
            failure_count += 1;
            if failures.len() < MAX_LISTED {
                failures.push(format!("block {b}: {e}"));
            }
            continue;
        }
        erase_s.push(t.elapsed().as_secs_f64());
        for (p, chunk) in wbuf.chunks_mut(page as usize).enumerate() {
            pattern(b * (eb / page) + p as u64, chunk);
        }
        let t = Instant::now();
        dev.file
            .write_all_at(&wbuf, off)
            .map_err(|err| FlashError::Io {
                node: dev.node.clone(),
                what: "write",
                offset: off,
                err,
            })?;
        write_s.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        dev.read_at(&mut rbuf, off)?;
        read_s.push(t.elapsed().as_secs_f64());
        mismatched += wbuf
            .chunks(page as usize)
            .zip(rbuf.chunks(page as usize))
            .filter(|(w, r)| w != r)
            .count() as u64;
        tested.push(b);
    }
    let after = dev.ecc_stats()?;
    // Leave the area as the test found it usable: erased, so whatever formats it next
    // (UBI, JFFS2) finds empty flash.
    let mut left_erased = true;
    for &b in &tested {
        if dev.erase(b * eb, eb).is_err() {
            left_erased = false;
        }
    }
    let figure = |times: &[f64]| {
        let total: f64 = times.iter().sum();
        let rates: Vec<f64> = times.iter().map(|t| mib_per_s(eb, *t)).collect();
        FlashRate {
            mib_per_s: mib_per_s(eb * times.len() as u64, total),
            ci95_percent: crate::stats::mean_ci95(&rates)
                .filter(|(m, _)| *m > 0.0)
                .map(|(m, h)| h / m * 100.0),
        }
    };
    Ok(FlashSpeed {
        mtd: mtd.to_string(),
        label: label.to_string(),
        blocks_tested: tested.len() as u64,
        bytes_per_block: eb,
        bad_block_count: bad_count,
        bad_blocks: bad,
        erase: figure(&erase_s),
        write: figure(&write_s),
        read: figure(&read_s),
        mismatched_pages: mismatched,
        erase_failure_count: failure_count,
        erase_failures: failures,
        corrected_bits: u64::from(after.corrected.wrapping_sub(before.corrected)),
        ecc_failures: u64::from(after.failed.wrapping_sub(before.failed)),
        left_erased,
        interrupted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_structures_have_the_kernels_layout() {
        assert_eq!(std::mem::size_of::<MtdInfoUser>(), 32);
        assert_eq!(std::mem::size_of::<MtdEccStats>(), 16);
        assert_eq!(std::mem::size_of::<EraseInfoUser64>(), 16);
        // The ioctl numbers of include/uapi/mtd/mtd-abi.h.
        assert_eq!(
            nix::request_code_read!(b'M', 1, std::mem::size_of::<MtdInfoUser>()) as u32,
            0x8020_4d01
        );
        assert_eq!(
            nix::request_code_write!(b'M', 11, std::mem::size_of::<i64>()) as u32,
            0x4008_4d0b
        );
        assert_eq!(
            nix::request_code_read!(b'M', 18, std::mem::size_of::<MtdEccStats>()) as u32,
            0x8010_4d12
        );
        assert_eq!(
            nix::request_code_write!(b'M', 20, std::mem::size_of::<EraseInfoUser64>()) as u32,
            0x4010_4d14
        );
    }

    #[test]
    fn a_flash_bad_everywhere_lists_its_worst_blocks_only() {
        // Every one of 8,192 blocks has a corrected bit; three have uncorrectable pages.
        let findings: Vec<(u64, BlockFinding)> = (0..8192u64)
            .map(|b| {
                let unc = if [7, 4000, 8000].contains(&b) {
                    b % 3 + 1
                } else {
                    0
                };
                (
                    unc,
                    BlockFinding {
                        block: b,
                        corrected_bits: b % 100,
                        uncorrectable_pages: (0..unc).collect(),
                    },
                )
            })
            .collect();
        let w = worst_blocks(findings);
        assert_eq!(w.len(), MAX_LISTED);
        assert!(w.windows(2).all(|p| p[0].block < p[1].block));
        for b in [7, 4000, 8000] {
            assert!(w.iter().any(|f| f.block == b), "block {b} kept");
        }
        // The rest are those with the most corrected bits (99, 98, ...).
        assert!(w
            .iter()
            .filter(|f| f.uncorrectable_pages.is_empty())
            .all(|f| f.corrected_bits >= 97));
    }

    #[test]
    fn sizes_of_4_gib_and_more() {
        for (info, sysfs, want) in [
            (128 << 20, Some(128 << 20), 128 << 20),
            (0, Some(4 << 30), 4 << 30),
            (1 << 30, Some(5 << 30), 5 << 30),
            // A sysfs size whose low bits disagree is not taken: the check then refuses it.
            (1 << 20, Some(5 << 30), 1 << 20),
            (1 << 20, None, 1 << 20),
        ] {
            assert_eq!(full_size(info, sysfs), want, "{info} {sysfs:?}");
        }
    }

    #[test]
    fn patterns_differ_by_page_and_repeat_by_seed() {
        let (mut a, mut b, mut c) = (vec![0; 2048], vec![0; 2048], vec![0; 2048]);
        pattern(7, &mut a);
        pattern(8, &mut b);
        pattern(7, &mut c);
        assert_ne!(a, b);
        assert_eq!(a, c);
        assert!(a.iter().any(|&x| x != 0xff) && a.iter().any(|&x| x != 0));
    }
}
