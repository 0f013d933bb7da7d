//! Owns the `verify` workload: its data pattern, where every block carries a header (magic,
//! offset, sequence, seed, payload checksum) and a payload derived from the seed and the
//! offset, so a read-back names each bad block and tells corruption from aliasing
//! (fake-capacity media, f3's idea); and its procedure, a write phase and a read-back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::{plans, timed_flush, Measured, Procedure, WorkloadError};
use crate::engine::{self, mix64, Access, DataHook, StopReason};

const MAGIC: [u8; 8] = *b"USBPVRFY";
/// Header: magic, offset, sequence (block number), seed, payload checksum; 8 bytes each.
pub const HEADER_BYTES: usize = 40;
/// The report keeps this many mismatches in detail; the count covers all of them.
const KEEP_MISMATCHES: usize = 100;

/// What is wrong with a block read back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum MismatchKind {
    /// No header: never written, or overwritten by something else.
    NoPattern,
    /// The block holds the data written for another offset: the medium maps two offsets to
    /// the same storage (fake capacity) or misdirected a write.
    Aliased { holds_offset: u64 },
    /// A block of another verify run (another seed): this run's write was lost.
    Stale { seed: u64 },
    /// Header right, payload wrong: bit rot, torn or corrupted write.
    Corrupt {
        bytes_differing: u64,
        first_at_byte: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mismatch {
    pub offset: u64,
    #[serde(flatten)]
    pub kind: MismatchKind,
}

/// Which verify passes to run: both, or only one (write, unplug/replug, then read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VerifyPhase {
    Both,
    Write,
    Read,
}

/// Full: every block of the region. Quick: `points` blocks spread over the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VerifyMode {
    Full,
    Quick,
}

/// The verify outcome, as reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    pub mode: VerifyMode,
    pub phase: VerifyPhase,
    pub seed: u64,
    pub blocks_written: u64,
    pub blocks_checked: u64,
    pub mismatched_blocks: u64,
    /// The first mismatches in offset order (at most 100).
    pub mismatches: Vec<Mismatch>,
}

impl MismatchKind {
    /// What is wrong, in words.
    pub fn describe(&self) -> String {
        use crate::units::human_bytes;
        match self {
            MismatchKind::NoPattern => "no pattern (never written, or overwritten)".into(),
            MismatchKind::Aliased { holds_offset } => {
                format!(
                    "aliased: holds the block written at {}",
                    human_bytes(*holds_offset)
                )
            }
            MismatchKind::Stale { seed } => {
                format!(
                    "stale: a block of another verify run (seed {seed:#x}); this write was lost"
                )
            }
            MismatchKind::Corrupt {
                bytes_differing,
                first_at_byte,
            } => format!(
                "corrupt: {bytes_differing} bytes differ, the first at byte {first_at_byte}"
            ),
        }
    }
}

/// How many bad blocks the human summary lists one by one (the report keeps up to 100).
pub const SUMMARY_LISTED: usize = 5;

/// The verify outcome as f3 words it: what was checked, the announced size, where the data
/// starts to be lost, the usable capacity below that, what kind of damage it is, and a
/// verdict line, then the first few bad blocks. A fake-capacity stick gives a handful of
/// lines, not one per bad block.
pub fn summary(v: &VerifyReport, announced_bytes: u64) -> Vec<String> {
    use crate::units::human_bytes;
    let mut out = vec![format!(
        "{} blocks written, {} checked, {} bad",
        v.blocks_written, v.blocks_checked, v.mismatched_blocks
    )];
    if v.phase == VerifyPhase::Write {
        out.push("write phase only: read it back with --verify-phase read".into());
        return out;
    }
    out.push(format!("announced size {}", human_bytes(announced_bytes)));
    let Some(first) = v.mismatches.first() else {
        let verdict = if v.blocks_checked > 0 {
            "OK: every block checked holds what was written"
        } else {
            "NOT CHECKED: no block was read back"
        };
        out.push(verdict.into());
        return out;
    };
    let aliased = v
        .mismatches
        .iter()
        .filter(|m| matches!(m.kind, MismatchKind::Aliased { .. }))
        .count();
    out.push(format!(
        "data is lost from {} on: usable capacity about {} ({:.1} % of the announced size)",
        human_bytes(first.offset),
        human_bytes(first.offset),
        first.offset as f64 * 100.0 / announced_bytes.max(1) as f64
    ));
    let verdict = if aliased * 2 >= v.mismatches.len() {
        "FAIL: fake capacity: the medium maps offsets beyond its real size onto earlier ones"
    } else {
        "FAIL: the medium does not return what was written (corrupted or lost writes)"
    };
    out.push(verdict.into());
    for m in v.mismatches.iter().take(SUMMARY_LISTED) {
        out.push(format!(
            "bad block at {}: {}",
            human_bytes(m.offset),
            m.kind.describe()
        ));
    }
    if v.mismatched_blocks > SUMMARY_LISTED as u64 {
        out.push(format!(
            "... and {} more bad blocks (the YAML or JSON result lists up to {KEEP_MISMATCHES})",
            v.mismatched_blocks - SUMMARY_LISTED as u64
        ));
    }
    out
}

/// Writes and checks the pattern; shared by all I/O threads.
pub struct PatternHook {
    seed: u64,
    checked: AtomicU64,
    mismatched: AtomicU64,
    kept: Mutex<Vec<Mismatch>>,
}

impl PatternHook {
    pub fn new(seed: u64) -> Self {
        PatternHook {
            seed,
            checked: AtomicU64::new(0),
            mismatched: AtomicU64::new(0),
            kept: Mutex::new(Vec::new()),
        }
    }

    pub fn checked_blocks(&self) -> u64 {
        self.checked.load(Ordering::Relaxed)
    }

    pub fn mismatched_blocks(&self) -> u64 {
        self.mismatched.load(Ordering::Relaxed)
    }

    /// The kept mismatches sorted by offset.
    pub fn mismatches(&self) -> Vec<Mismatch> {
        let mut kept = self.kept.lock().map(|k| k.clone()).unwrap_or_default();
        kept.sort_by_key(|m| m.offset);
        kept
    }

    fn payload_word(&self, offset: u64, index: usize) -> u64 {
        mix64(
            self.seed ^ offset.rotate_left(32) ^ (index as u64).wrapping_mul(0xA076_1D64_78BD_642F),
        )
    }

    fn record(&self, offset: u64, kind: MismatchKind) {
        self.mismatched.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut kept) = self.kept.lock() {
            if kept.len() < KEEP_MISMATCHES {
                kept.push(Mismatch { offset, kind });
            }
        }
    }
}

fn word(buf: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(bytes)
}

/// FNV-1a over the payload, 8 bytes at a time: cheap, and any flipped bit changes it.
fn checksum(payload: &[u8]) -> u64 {
    payload.chunks(8).fold(0xCBF2_9CE4_8422_2325, |h, chunk| {
        let mut bytes = [0u8; 8];
        bytes[..chunk.len()].copy_from_slice(chunk);
        (h ^ u64::from_le_bytes(bytes)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

impl DataHook for PatternHook {
    fn fill(&self, offset: u64, buf: &mut [u8]) {
        let block_bytes = buf.len() as u64;
        let (header, payload) = buf.split_at_mut(HEADER_BYTES.min(buf.len()));
        for (i, chunk) in payload.chunks_mut(8).enumerate() {
            let w = self.payload_word(offset, i).to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
        let sum = checksum(payload);
        let fields = [
            u64::from_le_bytes(MAGIC),
            offset,
            offset / block_bytes.max(1),
            self.seed,
            sum,
        ];
        for (i, f) in fields.iter().enumerate() {
            if header.len() >= (i + 1) * 8 {
                header[i * 8..(i + 1) * 8].copy_from_slice(&f.to_le_bytes());
            }
        }
    }

    fn check(&self, offset: u64, buf: &[u8]) {
        self.checked.fetch_add(1, Ordering::Relaxed);
        if buf.len() < HEADER_BYTES || buf[..8] != MAGIC {
            self.record(offset, MismatchKind::NoPattern);
            return;
        }
        let stored_offset = word(buf, 8);
        let stored_seed = word(buf, 24);
        if stored_seed != self.seed {
            self.record(offset, MismatchKind::Stale { seed: stored_seed });
            return;
        }
        if stored_offset != offset {
            self.record(
                offset,
                MismatchKind::Aliased {
                    holds_offset: stored_offset,
                },
            );
            return;
        }
        let payload = &buf[HEADER_BYTES..];
        if checksum(payload) == word(buf, 32) {
            return;
        }
        let mut differing = 0u64;
        let mut first = None;
        for (i, chunk) in payload.chunks(8).enumerate() {
            let want = self.payload_word(offset, i).to_le_bytes();
            for (j, (&got, &exp)) in chunk.iter().zip(want.iter()).enumerate() {
                if got != exp {
                    differing += 1;
                    first.get_or_insert((HEADER_BYTES + i * 8 + j) as u64);
                }
            }
        }
        self.record(
            offset,
            MismatchKind::Corrupt {
                bytes_differing: differing,
                first_at_byte: first.unwrap_or(32),
            },
        );
    }
}

/// What the verify procedure leaves besides its counters.
pub(super) struct Verified {
    pub report: VerifyReport,
    /// The timed fdatasync after a buffered write phase.
    pub flush_ns: Option<u64>,
    /// How the page cache was dropped before a buffered read-back.
    pub cache_drop: Option<String>,
}

/// The `verify` procedure: one job writes the pattern over the region (sequentially, or at
/// spread points in quick mode), then reads back exactly what was written and checks each
/// block; either phase alone when asked. A buffered write is flushed (timed) and the cache
/// dropped before the read-back, so the read comes from the medium.
pub(super) fn run(p: &Procedure<'_>, measured: &mut Measured) -> Result<Verified, WorkloadError> {
    let params = p.params;
    let mut flush_ns = None;
    let mut cache_drop = None;
    let mut verify_params = params.clone();
    verify_params.jobs = 1;
    verify_params.time_based = false;
    let access = match params.verify_mode {
        VerifyMode::Full => Access::Sequential,
        VerifyMode::Quick => Access::Spread {
            points: params.verify_points,
        },
    };
    let hook = Arc::new(PatternHook::new(params.seed));
    let mut written = 0;
    if params.verify_phase != VerifyPhase::Read {
        let mut s = p.spec(plans(&verify_params, p.region_bytes, access, 0)?, p.runtime);
        s.data = Some(hook.clone());
        let outcome = engine::run(p.engine, &s)?;
        written = outcome.write.ios;
        measured.add(&outcome);
        if !p.direct {
            flush_ns = Some(timed_flush(p.target)?);
            cache_drop = Some(p.target.drop_cache());
        }
    }
    if params.verify_phase != VerifyPhase::Write && measured.stopped_by != StopReason::Interrupted {
        let mut read_plans = plans(&verify_params, p.region_bytes, access, 100)?;
        if params.verify_phase == VerifyPhase::Both {
            // Read back exactly what was written (a time bound may have cut the write).
            read_plans[0].io_limit = Some(written);
        }
        let mut s = p.spec(read_plans, None);
        s.data = Some(hook.clone());
        measured.add(&engine::run(p.engine, &s)?);
    }
    Ok(Verified {
        report: VerifyReport {
            mode: params.verify_mode,
            phase: params.verify_phase,
            seed: params.seed,
            blocks_written: written,
            blocks_checked: hook.checked_blocks(),
            mismatched_blocks: hook.mismatched_blocks(),
            mismatches: hook.mismatches(),
        },
        flush_ns,
        cache_drop,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_checks_clean_and_names_each_fault() {
        let hook = PatternHook::new(7);
        let mut block = vec![0u8; 4096];
        hook.fill(8192, &mut block);
        hook.check(8192, &block);
        assert_eq!(hook.mismatched_blocks(), 0);

        // The same data read at another offset: aliasing.
        hook.check(1 << 30, &block);
        // A flipped byte in the payload.
        let mut corrupt = block.clone();
        corrupt[1000] ^= 0x40;
        hook.check(8192, &corrupt);
        // Zeros: never written.
        hook.check(4096, &[0u8; 4096]);
        // Another run's block.
        let mut other = vec![0u8; 4096];
        PatternHook::new(8).fill(12288, &mut other);
        hook.check(12288, &other);

        assert_eq!(hook.checked_blocks(), 5);
        assert_eq!(hook.mismatched_blocks(), 4);
        let m = hook.mismatches();
        assert_eq!(m[0].offset, 4096);
        assert_eq!(m[0].kind, MismatchKind::NoPattern);
        assert_eq!(
            m[1].kind,
            MismatchKind::Corrupt {
                bytes_differing: 1,
                first_at_byte: 1000
            }
        );
        assert_eq!(m[2].kind, MismatchKind::Stale { seed: 8 });
        assert_eq!(m[3].offset, 1 << 30);
        assert_eq!(m[3].kind, MismatchKind::Aliased { holds_offset: 8192 });
    }
}

#[cfg(test)]
mod summary_tests {
    use super::*;

    fn report(mismatches: Vec<Mismatch>, bad: u64) -> VerifyReport {
        VerifyReport {
            mode: VerifyMode::Full,
            phase: VerifyPhase::Both,
            seed: 1,
            blocks_written: 1024,
            blocks_checked: 1024,
            mismatched_blocks: bad,
            mismatches,
        }
    }

    #[test]
    fn a_fake_capacity_stick_is_a_few_lines_naming_the_usable_size() {
        // 1 GiB announced, 64 MiB real: every block from 64 MiB on holds an earlier one.
        let mib = 1u64 << 20;
        let bad: Vec<Mismatch> = (64..164)
            .map(|i| Mismatch {
                offset: i * mib,
                kind: MismatchKind::Aliased {
                    holds_offset: (i - 64) * mib,
                },
            })
            .collect();
        let lines = summary(&report(bad, 960), 1 << 30);
        assert!(lines.len() <= 4 + SUMMARY_LISTED + 1, "{lines:#?}");
        let text = lines.join("\n");
        for want in [
            "announced size 1.00 GiB",
            "data is lost from 64.0 MiB on: usable capacity about 64.0 MiB (6.2 %",
            "FAIL: fake capacity",
            "bad block at 64.0 MiB: aliased: holds the block written at 0 B",
            "and 955 more bad blocks",
        ] {
            assert!(text.contains(want), "{want:?} not in:\n{text}");
        }
        assert!(!text.contains("Aliased {"), "no Rust names: {text}");
    }

    #[test]
    fn good_and_corrupt_media_have_their_own_verdicts() {
        let ok = summary(&report(Vec::new(), 0), 16 << 20).join("\n");
        assert!(ok.contains("OK: every block checked"), "{ok}");
        let corrupt = vec![Mismatch {
            offset: 4096,
            kind: MismatchKind::Corrupt {
                bytes_differing: 3,
                first_at_byte: 100,
            },
        }];
        let bad = summary(&report(corrupt, 1), 16 << 20).join("\n");
        assert!(bad.contains("does not return what was written"), "{bad}");
        assert!(
            bad.contains("corrupt: 3 bytes differ, the first at byte 100"),
            "{bad}"
        );
    }
}
