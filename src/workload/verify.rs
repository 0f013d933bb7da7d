//! Owns the `verify` workload: its data pattern, where every block carries a header (magic,
//! offset, sequence, seed, payload checksum) and a payload derived from the seed and the
//! offset, so a read-back names each bad block and tells corruption from aliasing
//! (fake-capacity media, f3's idea); and its procedure, a write phase and a read-back.

use std::collections::BTreeMap;
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Mismatch {
    pub offset: u64,
    #[serde(flatten)]
    pub kind: MismatchKind,
}

/// Which verify passes to run: both, or only one (write, unplug/replug, then read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum VerifyPhase {
    Both,
    Write,
    Read,
}

/// Full: every block of the region. Quick: `points` blocks spread over the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum VerifyMode {
    Full,
    Quick,
}

/// The verify outcome, as reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct VerifyReport {
    pub mode: VerifyMode,
    pub phase: VerifyPhase,
    pub seed: u64,
    pub blocks_written: u64,
    pub blocks_checked: u64,
    pub mismatched_blocks: u64,
    /// The first mismatches in offset order (at most 100).
    pub mismatches: Vec<Mismatch>,
    /// What the read-back says the medium really holds, when a block was wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Capacity>,
}

/// How a medium fails to keep what was written, as f3probe names the kinds of fake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum DamageKind {
    /// Writes past the real size vanish (reads there give zeros or old data).
    LostWrites,
    /// Offsets past the real size land on the start again, every real size.
    WrapAround,
    /// The upper half of the announced size is the lower half again.
    MirroredHalves,
    /// Some offsets share storage, in no regular pattern.
    Aliased,
    /// Blocks come back with the right header and a wrong payload: failing flash.
    Corrupt,
}

impl DamageKind {
    /// The damage in words, for a verdict's reason.
    pub fn describe(self) -> &'static str {
        match self {
            DamageKind::LostWrites => "fake capacity, writes past the real size are lost",
            DamageKind::WrapAround => "fake capacity, offsets past the real size wrap around",
            DamageKind::MirroredHalves => "fake capacity, the upper half mirrors the lower",
            DamageKind::Aliased => "fake capacity, offsets share storage",
            DamageKind::Corrupt => "the medium corrupts what was written (failing flash)",
        }
    }
}

/// The largest prefix of the region that keeps its own data (f3probe's "usable size"), from
/// one full write then read-back: blocks whose data shows up at another offset share storage,
/// so a prefix is usable only while it holds at most one block of each such group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Capacity {
    pub usable_bytes: u64,
    /// The probe's resolution: the true usable size is at most `usable_bytes` and above
    /// `usable_bytes - step_bytes` (one block for a full verify, the spacing of the points for
    /// quick; a full verify reads every sector's tag, so its estimate is usually exact).
    pub step_bytes: u64,
    pub kind: DamageKind,
    /// The estimate's memory bound was reached: `usable_bytes` is an upper bound.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub upper_bound: bool,
}

/// Every sector of a block carries its own tag (the block's header in the first): a fake
/// medium maps storage sector by sector, so the tags say which offset's data each sector holds
/// even where a real size that is not a whole number of blocks splits a block.
pub const SECTOR_BYTES: usize = 512;
/// The tag at the start of every sector after the first: this word xor the seed, the offset.
const SECTOR_MAGIC: u64 = u64::from_le_bytes(*b"USBPSECT");
const TAG_BYTES: usize = 16;
/// Runs of sectors followed at most: beyond, the estimate is an upper bound.
const MAX_RUNS: usize = 1 << 16;

/// The usable-size estimate built sector by sector during the read-back. A sector that holds
/// the data written at a higher offset `y` shares storage with it (the in-order write left y's
/// data there last): every sector holding y's data belongs to y's storage group. The usable
/// prefix ends at the second-lowest member of any group, at the first sector whose own write
/// is not there, or at the first corrupt sector.
#[derive(Debug, Default)]
struct Estimate {
    /// The lowest offset known not to be usable.
    bound: Option<u64>,
    /// Groups' lowest members seen, as runs: `y_start -> (y_end, x_start)` says the sectors
    /// x_start.. hold the data written at y_start..y_end.
    runs: BTreeMap<u64, (u64, u64)>,
    capped: bool,
    /// Bad sectors by what they hold: another offset's data, nothing of this run, their own tag
    /// with wrong bytes.
    aliased: u64,
    lost: u64,
    corrupt: u64,
}

impl Estimate {
    fn limit(&mut self, at: u64) {
        if self.bound.map_or(true, |b| at < b) {
            self.bound = Some(at);
        }
    }

    /// A sector at `x` that holds the `len` bytes written at `y`.
    fn holds(&mut self, x: u64, y: u64, len: u64) {
        if y < x {
            // The sector's own write went elsewhere: it is lost here.
            self.limit(x);
            return;
        }
        // `x` and `y` share storage: no usable prefix holds both.
        self.limit(y);
        if self.bound.is_some_and(|b| x >= b) {
            return;
        }
        let found = self
            .runs
            .range(..=y)
            .next_back()
            .filter(|(_, &(y_end, _))| y < y_end)
            .map(|(&y_start, &(_, x_start))| x_start + (y - y_start));
        match found {
            // A second member below y: the prefix ends at the higher of the two.
            Some(x1) if x1 != x => self.limit(x1.max(x)),
            Some(_) => {}
            None => self.extend_run(x, y, len),
        }
    }

    fn extend_run(&mut self, x: u64, y: u64, len: u64) {
        // Sectors read in order extend the run that ends just before them.
        let prev = self.runs.range(..y).next_back().map(|(&k, &v)| (k, v));
        if let Some((y_start, (y_end, x_start))) = prev {
            if y_end == y && x_start + (y - y_start) == x {
                self.runs.insert(y_start, (y + len, x_start));
                return;
            }
        }
        if self.runs.len() < MAX_RUNS {
            self.runs.insert(y, (y + len, x));
        } else {
            self.capped = true;
        }
    }

    /// The estimate over a region read back with blocks `step` apart; `mismatches` are the
    /// kept ones (in offset order) that tell a regular wrap-around from other aliasing.
    fn capacity(&self, region: u64, step: u64, mismatches: &[Mismatch]) -> Option<Capacity> {
        let usable = self.bound?;
        // The kind is what most bad sectors say, not only the first one: a real size that ends
        // inside a block leaves that block half written (corrupt) before the lost ones.
        let kind = if self.aliased * 2 >= self.aliased + self.lost + self.corrupt {
            if usable > 0 && wraps_every(usable, step, region, mismatches) {
                if region.abs_diff(usable.saturating_mul(2)) < 2 * step {
                    DamageKind::MirroredHalves
                } else {
                    DamageKind::WrapAround
                }
            } else {
                DamageKind::Aliased
            }
        } else if self.lost >= self.corrupt {
            DamageKind::LostWrites
        } else {
            DamageKind::Corrupt
        };
        Some(Capacity {
            usable_bytes: usable,
            step_bytes: step,
            kind,
            upper_bound: self.capped,
        })
    }
}

/// Whether every aliased block holds what a wrap-around every `period` leaves there after one
/// in-order write of the region: the data of the highest offset a whole number of periods above
/// it. To within the probe's resolution: a real size that is not a whole number of blocks moves
/// each repetition by up to one step.
fn wraps_every(period: u64, step: u64, region: u64, mismatches: &[Mismatch]) -> bool {
    let mut any = false;
    for m in mismatches {
        if let MismatchKind::Aliased { holds_offset } = m.kind {
            let turns = region.saturating_sub(m.offset + 1) / period;
            let expected = m.offset + turns * period;
            if turns == 0 || holds_offset.abs_diff(expected) > (turns + 1) * step {
                return false;
            }
            any = true;
        }
    }
    any
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
    let pct = |bytes: u64| bytes as f64 * 100.0 / announced_bytes.max(1) as f64;
    match &v.capacity {
        Some(c) => {
            let about = if c.upper_bound { "at most" } else { "about" };
            out.push(format!(
                "usable capacity {about} {} ({:.1} % of the announced size), to within {}",
                human_bytes(c.usable_bytes),
                pct(c.usable_bytes),
                human_bytes(c.step_bytes)
            ));
            let usable = human_bytes(c.usable_bytes);
            out.push(match c.kind {
                DamageKind::LostWrites => format!(
                    "FAIL: fake capacity: writes from {usable} on are lost (the medium holds {usable})"
                ),
                DamageKind::WrapAround => format!(
                    "FAIL: fake capacity: offsets from {usable} on wrap around onto the start (the \
                     medium holds {usable})"
                ),
                DamageKind::MirroredHalves => format!(
                    "FAIL: fake capacity: the upper half is the lower half again (the medium holds \
                     {usable})"
                ),
                DamageKind::Aliased => format!(
                    "FAIL: fake capacity: offsets share storage from {usable} on (the medium maps \
                     blocks onto others)"
                ),
                DamageKind::Corrupt => {
                    "FAIL: the medium does not return what was written (corrupted writes)".into()
                }
            });
        }
        None => {
            out.push(format!(
                "first bad block at {} ({:.1} % of the announced size)",
                human_bytes(first.offset),
                pct(first.offset)
            ));
            out.push("FAIL: the medium does not return what was written".into());
        }
    }
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
    estimate: Mutex<Estimate>,
}

impl PatternHook {
    pub fn new(seed: u64) -> Self {
        PatternHook {
            seed,
            checked: AtomicU64::new(0),
            mismatched: AtomicU64::new(0),
            kept: Mutex::new(Vec::new()),
            estimate: Mutex::new(Estimate::default()),
        }
    }

    /// The usable-size estimate of a region read back with blocks `step` apart (none when every
    /// block checked was right).
    pub fn capacity(&self, region: u64, step: u64) -> Option<Capacity> {
        let kept = self.mismatches();
        let estimate = self.estimate.lock().ok()?;
        estimate.capacity(region, step, &kept)
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

    /// Records a bad block, and what each of its sectors holds for the usable-size estimate
    /// (`expected`: the block as written, when the caller has it already).
    fn record(&self, offset: u64, buf: &[u8], expected: Option<Vec<u8>>, kind: MismatchKind) {
        self.mismatched.fetch_add(1, Ordering::Relaxed);
        let expected = expected.unwrap_or_else(|| {
            let mut e = vec![0u8; buf.len()];
            self.fill(offset, &mut e);
            e
        });
        if let Ok(mut estimate) = self.estimate.lock() {
            self.scan_sectors(&mut estimate, offset, buf, &expected);
        }
        if let Ok(mut kept) = self.kept.lock() {
            if kept.len() < KEEP_MISMATCHES {
                kept.push(Mismatch { offset, kind });
            }
        }
    }
}

impl PatternHook {
    /// Reads each sector's tag: the offset whose data it holds (this run's seed), or nothing
    /// of this run; a sector that holds its own offset's tag is compared byte for byte.
    fn scan_sectors(&self, estimate: &mut Estimate, offset: u64, buf: &[u8], expected: &[u8]) {
        for (k, (got, want)) in buf
            .chunks(SECTOR_BYTES)
            .zip(expected.chunks(SECTOR_BYTES))
            .enumerate()
        {
            let x = offset + (k * SECTOR_BYTES) as u64;
            let len = got.len() as u64;
            // Storage moves sector by sector: any sector may hold a block's first sector (the
            // header) or a later one (a tag).
            let holds = if got.len() >= HEADER_BYTES && got[..8] == MAGIC {
                (word(got, 24) == self.seed).then(|| word(got, 8))
            } else {
                (got.len() >= TAG_BYTES && word(got, 0) == SECTOR_MAGIC ^ self.seed)
                    .then(|| word(got, 8))
            };
            match holds {
                None => {
                    estimate.lost += 1;
                    estimate.limit(x);
                }
                Some(y) if y == x => {
                    if got != want {
                        estimate.corrupt += 1;
                        estimate.limit(x);
                    }
                }
                Some(y) => {
                    estimate.aliased += 1;
                    estimate.holds(x, y, len);
                }
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
        // Every later sector starts with its tag (sectors start on 8-byte boundaries of the
        // payload, as HEADER_BYTES and SECTOR_BYTES are multiples of 8).
        for k in 1..block_bytes as usize / SECTOR_BYTES {
            let at = k * SECTOR_BYTES - HEADER_BYTES;
            if at + TAG_BYTES <= payload.len() {
                let sector = offset + (k * SECTOR_BYTES) as u64;
                payload[at..at + 8].copy_from_slice(&(SECTOR_MAGIC ^ self.seed).to_le_bytes());
                payload[at + 8..at + 16].copy_from_slice(&sector.to_le_bytes());
            }
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
            // Storage that moved sector by sector may start the block with a later sector.
            let kind = if buf.len() >= TAG_BYTES && word(buf, 0) == SECTOR_MAGIC ^ self.seed {
                MismatchKind::Aliased {
                    holds_offset: word(buf, 8),
                }
            } else {
                MismatchKind::NoPattern
            };
            self.record(offset, buf, None, kind);
            return;
        }
        let stored_offset = word(buf, 8);
        let stored_seed = word(buf, 24);
        if stored_seed != self.seed {
            self.record(offset, buf, None, MismatchKind::Stale { seed: stored_seed });
            return;
        }
        if stored_offset != offset {
            let kind = MismatchKind::Aliased {
                holds_offset: stored_offset,
            };
            self.record(offset, buf, None, kind);
            return;
        }
        let payload = &buf[HEADER_BYTES..];
        if checksum(payload) == word(buf, 32) {
            return;
        }
        let mut expected = vec![0u8; buf.len()];
        self.fill(offset, &mut expected);
        let mut differing = 0u64;
        let mut first = None;
        for (i, (&got, &exp)) in buf.iter().zip(expected.iter()).enumerate() {
            if got != exp {
                differing += 1;
                first.get_or_insert(i as u64);
            }
        }
        let kind = MismatchKind::Corrupt {
            bytes_differing: differing,
            first_at_byte: first.unwrap_or(32),
        };
        self.record(offset, buf, Some(expected), kind);
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
    // The distance between blocks read back: the estimate's resolution.
    let step = match access {
        Access::Spread { points } => {
            let blocks = (p.region_bytes / params.block_bytes.max(1)).max(1);
            blocks.div_ceil(points.clamp(1, blocks)) * params.block_bytes
        }
        _ => params.block_bytes,
    };
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
            capacity: hook.capacity(p.region_bytes, step),
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
            capacity: None,
        }
    }

    #[test]
    fn a_fake_capacity_stick_is_a_few_lines_naming_the_usable_size() {
        // 1 GiB announced, 64 MiB real: every block from 64 MiB on is lost.
        let mib = 1u64 << 20;
        let hook = PatternHook::new(1);
        for i in 64..1024 {
            hook.check(i * mib, &vec![0u8; 4096]);
        }
        let mut r = report(hook.mismatches(), hook.mismatched_blocks());
        r.capacity = hook.capacity(1 << 30, mib);
        let lines = summary(&r, 1 << 30);
        assert!(lines.len() <= 4 + SUMMARY_LISTED + 1, "{lines:#?}");
        let text = lines.join("\n");
        for want in [
            "announced size 1.00 GiB",
            "usable capacity about 64.0 MiB (6.2 % of the announced size), to within 1.00 MiB",
            "FAIL: fake capacity: writes from 64.0 MiB on are lost",
            "bad block at 64.0 MiB: no pattern",
            "and 955 more bad blocks",
        ] {
            assert!(text.contains(want), "{want:?} not in:\n{text}");
        }
        assert!(!text.contains("NoPattern"), "no Rust names: {text}");
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

#[cfg(test)]
mod capacity_tests {
    use super::*;
    use std::collections::HashMap;

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;

    /// A medium as a map from announced offsets to storage, page by page (4 KiB): `None` where
    /// writes are lost.
    type Map = fn(u64, u64) -> Option<u64>;
    const PAGE: u64 = 4 * KIB;

    /// Writes the pattern over `announced` bytes in `bs` blocks through `map`, as a full verify
    /// does (one pass, in order: the last write to a storage page wins), reads every block back
    /// through the same map, and returns the estimate.
    fn probe(announced: u64, real: u64, bs: u64, map: Map) -> Option<Capacity> {
        let hook = PatternHook::new(0x5eed);
        let mut storage: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut block = vec![0u8; bs as usize];
        for off in (0..announced).step_by(bs as usize) {
            hook.fill(off, &mut block);
            for (i, page) in block.chunks(PAGE as usize).enumerate() {
                if let Some(at) = map(off + i as u64 * PAGE, real) {
                    storage.insert(at, page.to_vec());
                }
            }
        }
        let zeros = vec![0u8; PAGE as usize];
        for off in (0..announced).step_by(bs as usize) {
            let mut got = Vec::with_capacity(bs as usize);
            for i in 0..bs / PAGE {
                let page = map(off + i * PAGE, real).and_then(|at| storage.get(&at));
                got.extend_from_slice(page.unwrap_or(&zeros));
            }
            hook.check(off, &got);
        }
        hook.capacity(announced, bs)
    }

    fn lost(off: u64, real: u64) -> Option<u64> {
        (off < real).then_some(off)
    }
    fn wrap(off: u64, real: u64) -> Option<u64> {
        Some(off % real)
    }
    /// The medium ignores one address bit below the top: every `real` bytes repeat once.
    fn stuck_bit(off: u64, real: u64) -> Option<u64> {
        Some(off & !real)
    }

    #[test]
    fn the_usable_size_of_each_kind_of_fake_is_found_to_within_one_step() {
        let cases: &[(&str, u64, u64, u64, Map, DamageKind)] = &[
            (
                "lost writes",
                64 * MIB,
                20 * MIB,
                MIB,
                lost,
                DamageKind::LostWrites,
            ),
            (
                "lost, unaligned",
                64 * MIB,
                20 * MIB + 300 * KIB,
                MIB,
                lost,
                DamageKind::LostWrites,
            ),
            (
                "mirror, small blocks",
                64 * MIB,
                32 * MIB,
                4 * KIB,
                wrap,
                DamageKind::MirroredHalves,
            ),
            (
                "wrap-around x2",
                64 * MIB,
                32 * MIB,
                MIB,
                wrap,
                DamageKind::MirroredHalves,
            ),
            (
                "wrap-around x3.2",
                64 * MIB,
                20 * MIB,
                MIB,
                wrap,
                DamageKind::WrapAround,
            ),
            (
                "wrap-around x4",
                64 * MIB,
                16 * MIB,
                64 * KIB,
                wrap,
                DamageKind::WrapAround,
            ),
            (
                "wrap, unaligned",
                64 * MIB,
                20 * MIB + 512 * KIB,
                MIB,
                wrap,
                DamageKind::WrapAround,
            ),
            (
                "stuck address bit",
                64 * MIB,
                8 * MIB,
                MIB,
                stuck_bit,
                DamageKind::Aliased,
            ),
        ];
        for &(name, announced, real, bs, map, kind) in cases {
            let c = probe(announced, real, bs, map).unwrap_or_else(|| panic!("{name}: none"));
            // Sector tags place the end of the real storage inside a block.
            assert!(
                c.usable_bytes >= real && c.usable_bytes - real < bs,
                "{name}: usable {} for a real size of {real} (step {bs})",
                c.usable_bytes
            );
            assert_eq!(c.step_bytes, bs, "{name}");
            assert_eq!(c.kind, kind, "{name}");
            assert!(!c.upper_bound, "{name}");
        }
    }

    #[test]
    fn a_good_medium_has_no_estimate_and_failing_flash_is_corrupt_at_its_first_bad_block() {
        assert_eq!(probe(8 * MIB, 8 * MIB, MIB, lost), None);
        let hook = PatternHook::new(3);
        let mut block = vec![0u8; 4096];
        for off in [0u64, 4096, 8192] {
            hook.fill(off, &mut block);
            if off == 4096 {
                block[100] ^= 1;
            }
            hook.check(off, &block);
        }
        let c = hook.capacity(12288, 4096).unwrap();
        assert_eq!((c.usable_bytes, c.kind), (4096, DamageKind::Corrupt));
    }

    #[test]
    fn blocks_read_back_out_of_order_give_the_same_estimate() {
        // Three blocks share storage (wrap every 8 MiB over 24 MiB); the read-back's
        // completions arrive highest first, as a deep queue may deliver them.
        let hook = PatternHook::new(9);
        let mut block = vec![0u8; 4096];
        hook.fill(16 * MIB, &mut block);
        for off in [16 * MIB, 8 * MIB, 0] {
            hook.check(off, &block);
        }
        let c = hook.capacity(24 * MIB, 4096).unwrap();
        assert_eq!(c.usable_bytes, 8 * MIB);
    }
}
