//! Owns the power-cut test: the write phase that heads every block and records, in a state
//! file replaced atomically, how many blocks the medium acknowledged (fdatasync or O_DSYNC),
//! and the verify phase of the next boot, which reads the region back and judges the
//! acknowledged blocks only: a block written after the last acknowledgement may or may not
//! have reached the medium when the power went, so it is counted, never judged.
//!
//! The region is written once, block after block, never overwritten: an acknowledged block is
//! then never the target of a later write in flight, and a cut cannot tear it legitimately.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

use super::target::{OpenMode, Preparation, Target, TargetKind};
use super::WorkloadError;
use crate::engine::mix64;
use crate::engine::AlignedBuffer;

/// What the state file says it is.
pub const STATE_FORMAT: &str = "usbperf-power-cut-state";
/// What a verdict says it is.
pub use usbperf_report::POWER_CUT_FORMAT as VERDICT_FORMAT;
pub const VERSION: u32 = 1;
/// A state file is a few hundred bytes; one larger than this is not ours.
pub const STATE_MAX_BYTES: u64 = 64 * 1024;
/// The longest target path a state file may name (Linux's PATH_MAX).
pub const MAX_PATH_BYTES: usize = 4096;
/// The largest region: 1 TiB; a power-cut test needs far less.
pub const MAX_REGION_BYTES: u64 = 1 << 40;
/// How many ranges of lost or torn blocks a verdict lists (the counts are always whole).
pub const MAX_RANGES: usize = 16;

const MAGIC: &[u8; 8] = b"USBPCUT1";
const HEADER_BYTES: usize = 32;

/// How a block is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sync {
    /// Buffered writes, then fdatasync for each group.
    Fdatasync,
    /// O_DSYNC: each write returns when the medium has it.
    Dsync,
}

/// The state file: the test's parameters and how far the medium acknowledged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    pub format: String,
    pub version: u32,
    /// Heads every block: data of an earlier test is never taken for this one's.
    pub run_id: u64,
    pub target: PathBuf,
    pub target_kind: TargetKind,
    /// The write phase created the target file: the verify phase removes it.
    pub created_file: bool,
    pub block_bytes: u64,
    pub blocks: u64,
    pub sync: Sync,
    /// Blocks 0..acknowledged were written and acknowledged by the medium.
    pub acknowledged: u64,
    /// The write phase wrote and acknowledged the whole region.
    pub complete: bool,
    /// When the write phase started (RFC 3339, UTC).
    pub started: String,
}

#[derive(Debug, thiserror::Error)]
pub enum PowerCutError {
    #[error("{path}: {why}")]
    BadState { path: PathBuf, why: String },
    #[error("cannot read the state file {path}: {source}")]
    ReadState {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the state file {path}: {source}; the test cannot record what the medium acknowledged")]
    WriteState {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} already exists: a power-cut test is waiting for its verify (`usbperf-matrix power-cut verify --state {0}`); verify it first, or remove it to give that test up")]
    StateExists(PathBuf),
    #[error(transparent)]
    Target(#[from] WorkloadError),
    #[error("writing block {block} of {path} failed: {source}")]
    Write {
        path: PathBuf,
        block: u64,
        source: std::io::Error,
    },
    #[error("fdatasync of {path} failed after block {block}: {source}; blocks after the last acknowledgement are not judged")]
    Flush {
        path: PathBuf,
        block: u64,
        source: std::io::Error,
    },
    #[error("{0}")]
    BadParams(String),
    #[error("{0} is empty: the power went before the write phase had started; nothing was written to judge")]
    EmptyState(PathBuf),
}

impl crate::exit::Classify for PowerCutError {
    /// A state that is bad, already there or empty, and parameters out of range are the
    /// user's to settle; the target's errors say their own; writing and flushing are I/O.
    fn exit(&self) -> crate::exit::Exit {
        use crate::exit::Exit::{Error, Usage};
        match self {
            PowerCutError::BadState { .. }
            | PowerCutError::StateExists(_)
            | PowerCutError::BadParams(_) => Usage,
            PowerCutError::Target(e) => e.exit(),
            PowerCutError::ReadState { .. }
            | PowerCutError::WriteState { .. }
            | PowerCutError::Write { .. }
            | PowerCutError::Flush { .. }
            | PowerCutError::EmptyState(_) => Error,
        }
    }
}

impl State {
    /// Checks a decoded state against every bound before anything is read with it.
    fn check(&self) -> Result<(), String> {
        if self.format != STATE_FORMAT {
            return Err(format!(
                "format is {:?}, expected {STATE_FORMAT:?}: not a usbperf power-cut state",
                self.format
            ));
        }
        if self.version != VERSION {
            return Err(format!(
                "version {} is not supported (this usbperf reads version {VERSION})",
                self.version
            ));
        }
        check_geometry(self.block_bytes, self.blocks)?;
        if self.acknowledged > self.blocks {
            return Err(format!(
                "acknowledged {} is more than the region's {} blocks",
                self.acknowledged, self.blocks
            ));
        }
        if self.complete && self.acknowledged != self.blocks {
            return Err("complete, but not every block acknowledged".into());
        }
        let p = self.target.as_os_str().len();
        if !self.target.is_absolute() || p > MAX_PATH_BYTES {
            return Err(format!(
                "target must be an absolute path of at most {MAX_PATH_BYTES} bytes"
            ));
        }
        Ok(())
    }
}

fn check_geometry(block_bytes: u64, blocks: u64) -> Result<(), String> {
    if block_bytes < 512 || block_bytes % 512 != 0 || block_bytes > 1 << 20 {
        return Err(format!(
            "block size {block_bytes}: give a multiple of 512 bytes from 512 to 1M"
        ));
    }
    if blocks == 0 || blocks.saturating_mul(block_bytes) > MAX_REGION_BYTES {
        return Err(format!(
            "{blocks} blocks of {block_bytes} bytes: the region must hold at least one block and at most 1 TiB"
        ));
    }
    Ok(())
}

/// Reads a state file, capped at [`STATE_MAX_BYTES`] before it is parsed.
pub fn read_state(path: &Path) -> Result<State, PowerCutError> {
    let bad = |why: String| PowerCutError::BadState {
        path: path.to_path_buf(),
        why,
    };
    // O_NONBLOCK: a FIFO planted at the path must not hang the boot.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|source| PowerCutError::ReadState {
            path: path.to_path_buf(),
            source,
        })?;
    let regular = file.metadata().map(|m| m.is_file()).unwrap_or(false);
    if !regular {
        return Err(bad(
            "not a regular file: not a usbperf power-cut state".into()
        ));
    }
    let mut text = Vec::new();
    file.take(STATE_MAX_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|source| PowerCutError::ReadState {
            path: path.to_path_buf(),
            source,
        })?;
    if text.is_empty() {
        return Err(PowerCutError::EmptyState(path.to_path_buf()));
    }
    if text.len() as u64 > STATE_MAX_BYTES {
        return Err(bad(format!(
            "over {STATE_MAX_BYTES} bytes: not a usbperf power-cut state"
        )));
    }
    let state: State = serde_json::from_slice(&text).map_err(|e| {
        bad(format!(
            "not a usbperf power-cut state: {}",
            crate::words::json_error(&e)
        ))
    })?;
    state.check().map_err(bad)?;
    Ok(state)
}

/// Replaces the state file atomically: a temporary file beside it, flushed, renamed over it,
/// and the directory flushed, so a cut at any moment leaves the old state or the new one.
pub fn write_state(path: &Path, state: &State) -> std::io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the state path names no file"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    let tmp = dir_of(path).join(tmp_name);
    // A temporary file left by a cut during an earlier replacement is ours: its name says so.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    write_new(&tmp, state)?;
    std::fs::rename(&tmp, path)?;
    File::open(dir_of(path))?.sync_all()
}

/// The first state: created exclusively, written, flushed with its directory.
fn create_state(path: &Path, state: &State) -> std::io::Result<()> {
    write_new(path, state)?;
    File::open(dir_of(path))?.sync_all()
}

/// Creates `path` exclusively with the state in it, flushed.
fn write_new(path: &Path, state: &State) -> std::io::Result<()> {
    let mut f = create_new(path)?;
    let mut text = serde_json::to_vec_pretty(state).map_err(std::io::Error::other)?;
    text.push(b'\n');
    f.write_all(&text)?;
    f.sync_all()
}

fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

fn create_new(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// The image of block `index` of test `run_id`: a header (magic, run id, index, size), then
/// data no other block and no other test has.
pub fn block_image(run_id: u64, index: u64, buf: &mut [u8]) {
    let key = mix64(run_id ^ mix64(index));
    for (i, w) in buf.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&mix64(key.wrapping_add(i as u64)).to_le_bytes());
    }
    buf[..8].copy_from_slice(MAGIC);
    buf[8..16].copy_from_slice(&run_id.to_le_bytes());
    buf[16..24].copy_from_slice(&index.to_le_bytes());
    let len = buf.len() as u64;
    buf[24..32].copy_from_slice(&len.to_le_bytes());
}

/// What the medium holds where a block was to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// The block, whole.
    Intact,
    /// No header of this test: never written, or the write was lost.
    Absent,
    /// This block's header, but not all of its data: a write cut or lost in part.
    Torn,
    /// A header of this test naming another block: a write landed in the wrong place.
    Misplaced,
    /// The medium returned an error for it.
    Unreadable,
}

/// Compares what was read with the block's image (`scratch` has the block's size).
pub fn classify(run_id: u64, index: u64, read: &[u8], scratch: &mut [u8]) -> Found {
    let header_ok = read.len() >= HEADER_BYTES
        && &read[..8] == MAGIC
        && read[8..16] == run_id.to_le_bytes()
        && read[24..32] == (read.len() as u64).to_le_bytes();
    if !header_ok {
        return Found::Absent;
    }
    if read[16..24] != index.to_le_bytes() {
        return Found::Misplaced;
    }
    block_image(run_id, index, scratch);
    if read == &scratch[..] {
        Found::Intact
    } else {
        Found::Torn
    }
}

/// The judgement of the verify phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Judgement {
    /// Every acknowledged block is intact.
    Pass,
    /// An acknowledged block was lost, torn or misplaced.
    Fail,
    /// Nothing was acknowledged, or the region could not be read: nothing was proven.
    Untested,
}

/// The verify phase's verdict, as printed with `--format json` and written with `--out`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(rename = "PowerCutVerdict"))]
pub struct Verdict {
    pub format: String,
    pub version: u32,
    pub verdict: Judgement,
    pub target: PathBuf,
    pub block_bytes: u64,
    pub blocks: u64,
    pub acknowledged: u64,
    /// The write phase ended by itself: the cut, if any, came after it.
    pub write_complete: bool,
    pub intact: u64,
    pub lost: u64,
    pub torn: u64,
    pub misplaced: u64,
    /// Acknowledged blocks the medium returned an I/O error for.
    #[serde(default)]
    pub unreadable: u64,
    /// Blocks after the last acknowledgement that reached the medium (whole or in part).
    pub written_unacknowledged: u64,
    /// Blocks after the last acknowledgement without this block's header on the medium
    /// (never written, or written without its first sector), or unreadable.
    pub never_written: u64,
    /// The first ranges of lost and unreadable blocks, as inclusive block indexes.
    pub lost_ranges: Vec<[u64; 2]>,
    /// The first ranges of torn or misplaced blocks.
    pub torn_ranges: Vec<[u64; 2]>,
    /// The verdict in words.
    pub reason: String,
    /// When the write phase started.
    pub started: String,
}

/// Collects block findings into ranges, keeping the first [`MAX_RANGES`].
#[derive(Default)]
struct Ranges(Vec<[u64; 2]>);

impl Ranges {
    fn add(&mut self, i: u64) {
        if let Some(r) = self.0.last_mut() {
            if r[1] + 1 == i {
                r[1] = i;
                return;
            }
        }
        if self.0.len() < MAX_RANGES {
            self.0.push([i, i]);
        }
    }
}

/// The counts of a verify so far, block after block: the region is never held in memory.
#[derive(Default)]
struct Tally {
    intact: u64,
    lost: u64,
    torn: u64,
    misplaced: u64,
    unreadable: u64,
    late: u64,
    never: u64,
    lost_r: Ranges,
    torn_r: Ranges,
}

impl Tally {
    fn add(&mut self, acknowledged: u64, i: u64, f: Found) {
        if i < acknowledged {
            match f {
                Found::Intact => self.intact += 1,
                Found::Absent => {
                    self.lost += 1;
                    self.lost_r.add(i);
                }
                Found::Torn => {
                    self.torn += 1;
                    self.torn_r.add(i);
                }
                Found::Misplaced => {
                    self.misplaced += 1;
                    self.torn_r.add(i);
                }
                Found::Unreadable => {
                    self.unreadable += 1;
                    self.lost_r.add(i);
                }
            }
        } else if matches!(f, Found::Absent | Found::Unreadable) {
            self.never += 1;
        } else {
            self.late += 1;
        }
    }
}

/// Judges the findings of blocks `0..state.blocks`, in order.
pub fn judge(state: &State, found: impl IntoIterator<Item = Found>) -> Verdict {
    let mut t = Tally::default();
    for (i, f) in (0..state.blocks).zip(found) {
        t.add(state.acknowledged, i, f);
    }
    finish(state, t)
}

fn finish(state: &State, t: Tally) -> Verdict {
    let Tally {
        intact,
        lost,
        torn,
        misplaced,
        unreadable,
        late,
        never,
        lost_r,
        torn_r,
    } = t;
    let bad = lost + torn + misplaced + unreadable;
    let (verdict, reason) = if state.acknowledged == 0 {
        (
            Judgement::Untested,
            "the medium acknowledged no block before the cut: nothing to judge; cut later in \
             the write phase"
                .to_string(),
        )
    } else if bad == 0 {
        (
            Judgement::Pass,
            format!("all {} acknowledged blocks survived", state.acknowledged),
        )
    } else {
        let mut parts = Vec::new();
        if lost > 0 {
            parts.push(format!(
                "{lost} lost (blocks {})",
                show_ranges(&lost_r.0, lost + unreadable)
            ));
        }
        if unreadable > 0 {
            parts.push(format!(
                "{unreadable} unreadable (the medium returned an I/O error)"
            ));
        }
        if torn + misplaced > 0 {
            parts.push(format!(
                "{} torn or misplaced (blocks {})",
                torn + misplaced,
                show_ranges(&torn_r.0, torn + misplaced)
            ));
        }
        (
            Judgement::Fail,
            format!(
                "{bad} of {} acknowledged blocks did not survive: {}; the medium (or a cache \
                 on its way) acknowledged writes it did not keep",
                state.acknowledged,
                parts.join(", ")
            ),
        )
    };
    Verdict {
        format: VERDICT_FORMAT.into(),
        version: VERSION,
        verdict,
        target: state.target.clone(),
        block_bytes: state.block_bytes,
        blocks: state.blocks,
        acknowledged: state.acknowledged,
        write_complete: state.complete,
        intact,
        lost,
        torn,
        misplaced,
        unreadable,
        written_unacknowledged: late,
        never_written: never,
        lost_ranges: lost_r.0,
        torn_ranges: torn_r.0,
        reason,
        started: state.started.clone(),
    }
}

fn show_ranges(r: &[[u64; 2]], count: u64) -> String {
    let listed: u64 = r.iter().map(|[a, b]| b - a + 1).sum();
    let mut s: Vec<String> = r
        .iter()
        .map(|[a, b]| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    if listed < count {
        s.push("...".into());
    }
    s.join(", ")
}

/// The verdict when the region could not be read: untested, with the reason.
pub fn unreadable(state: &State, why: String) -> Verdict {
    let mut v = judge(state, std::iter::empty());
    v.verdict = Judgement::Untested;
    v.intact = 0;
    v.never_written = 0;
    v.reason = format!("the region could not be read, so nothing was proven: {why}");
    v
}

/// What the write phase is asked to do.
pub struct WriteRequest<'a> {
    pub target: &'a Path,
    pub state: &'a Path,
    /// The region; a file that does not exist is created at this size.
    pub size_bytes: Option<u64>,
    pub block_bytes: u64,
    /// Blocks per fdatasync (and state update).
    pub flush_every: u64,
    pub sync: Sync,
    pub run_id: u64,
    pub allow_write_device: bool,
    pub stop: &'a AtomicBool,
}

/// How the write phase ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteEnd {
    /// The whole region written and acknowledged; the state waits for the verify.
    Complete { blocks: u64 },
    /// A signal: the test file and the state were removed.
    Interrupted { acknowledged: u64, blocks: u64 },
}

/// The write phase. The state file is created first (exclusively: an earlier test waiting
/// for its verify is never overwritten), then the target; on an error the state stays, so
/// the verify can judge what was acknowledged before it.
pub fn write(
    req: &WriteRequest<'_>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<WriteEnd, PowerCutError> {
    if req.flush_every == 0 {
        return Err(PowerCutError::BadParams(
            "--flush-every 0: give the number of blocks per fdatasync, e.g. 64".into(),
        ));
    }
    if let Some(size) = req.size_bytes {
        check_geometry(req.block_bytes, size / req.block_bytes)
            .map_err(PowerCutError::BadParams)?;
    }
    let state_err = |source| PowerCutError::WriteState {
        path: req.state.to_path_buf(),
        source,
    };
    let target_path = absolute(req.target)
        .map_err(|e| PowerCutError::BadParams(format!("{}: {e}", req.target.display())))?;
    let existed = std::fs::symlink_metadata(req.target).ok();
    let is_device = existed
        .as_ref()
        .and_then(|_| std::fs::metadata(req.target).ok())
        .is_some_and(|m| std::os::unix::fs::FileTypeExt::is_block_device(&m.file_type()));
    let mut state = State {
        format: STATE_FORMAT.into(),
        version: VERSION,
        run_id: req.run_id,
        target: target_path,
        target_kind: if is_device {
            TargetKind::BlockDevice
        } else {
            TargetKind::File
        },
        created_file: existed.is_none(),
        block_bytes: req.block_bytes,
        // Until the target is open: what --size asks, or one block.
        blocks: req.size_bytes.map_or(1, |s| (s / req.block_bytes).max(1)),
        sync: req.sync,
        acknowledged: 0,
        complete: false,
        started: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    };
    // The state's name is taken, and a whole state (nothing acknowledged) is on the medium,
    // before the target is touched: a second test on the same state path is refused before it
    // writes anything, and a cut while the target is created leaves a state the verify reads.
    if let Err(e) = create_state(req.state, &state) {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            return Err(PowerCutError::StateExists(req.state.to_path_buf()));
        }
        let _ = std::fs::remove_file(req.state);
        return Err(state_err(e));
    }
    let opened = Target::open(
        req.target,
        OpenMode {
            write: true,
            direct: false,
            dsync: req.sync == Sync::Dsync,
        },
        req.size_bytes,
        Preparation::Preallocate,
        req.allow_write_device,
        false,
    );
    let mut target = match opened {
        Ok(t) => t,
        Err(e) => {
            let _ = std::fs::remove_file(req.state);
            return Err(e.into());
        }
    };
    let blocks = target.size_bytes / req.block_bytes;
    if let Err(why) = check_geometry(req.block_bytes, blocks) {
        let _ = std::fs::remove_file(req.state);
        return Err(PowerCutError::BadParams(format!(
            "{}: {why}",
            req.target.display()
        )));
    }
    state.target_kind = target.kind;
    state.created_file = target.created;
    state.blocks = blocks;
    if let Err(e) = write_state(req.state, &state) {
        let _ = std::fs::remove_file(req.state);
        return Err(state_err(e));
    }
    let written = write_blocks(req, &target, &mut state, progress);
    if !matches!(written, Ok(WriteEnd::Interrupted { .. })) {
        // Complete: the file stays for the verify of the next boot. Failed: the state and
        // the file stay too, so the verify judges what was acknowledged before the error.
        target.keep();
    }
    written
}

fn write_blocks(
    req: &WriteRequest<'_>,
    target: &Target,
    state: &mut State,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<WriteEnd, PowerCutError> {
    let blocks = state.blocks;
    let bs = req.block_bytes as usize;
    let mut buf = vec![0u8; bs];
    let mut i = 0u64;
    while i < blocks {
        if req.stop.load(Ordering::Relaxed) {
            // Interrupted by the operator, not by a power cut: nothing to verify.
            let _ = std::fs::remove_file(req.state);
            return Ok(WriteEnd::Interrupted {
                acknowledged: state.acknowledged,
                blocks,
            });
        }
        let group_end = (i + req.flush_every).min(blocks);
        while i < group_end {
            block_image(req.run_id, i, &mut buf);
            target
                .file
                .write_all_at(&buf, i * req.block_bytes)
                .map_err(|source| PowerCutError::Write {
                    path: req.target.to_path_buf(),
                    block: i,
                    source,
                })?;
            i += 1;
        }
        if req.sync == Sync::Fdatasync {
            target.flush().map_err(|source| PowerCutError::Flush {
                path: req.target.to_path_buf(),
                block: i - 1,
                source,
            })?;
        }
        // Only now, after the medium acknowledged them, do these blocks count.
        state.acknowledged = i;
        state.complete = i == blocks;
        write_state(req.state, state).map_err(|source| PowerCutError::WriteState {
            path: req.state.to_path_buf(),
            source,
        })?;
        progress(i, blocks);
    }
    Ok(WriteEnd::Complete { blocks })
}

/// `p` from the root: the verify may run from another directory, on the next boot.
fn absolute(p: &Path) -> std::io::Result<PathBuf> {
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        Ok(std::env::current_dir()?.join(p))
    }
}

/// Reads the region back and judges it. `target` overrides the state's path (a disk that
/// came back under another name).
pub fn verify(state: &State, target: Option<&Path>) -> Verdict {
    let path = target.unwrap_or(&state.target);
    let mut t = Tally::default();
    let mut i = 0u64;
    let read = read_back(state, path, &mut |f| {
        t.add(state.acknowledged, i, f);
        i += 1;
    });
    match read {
        Ok(()) => finish(state, t),
        Err(why) => unreadable(state, why),
    }
}

/// Reads the region block after block, handing each block's finding to `found`.
fn read_back(state: &State, path: &Path, found: &mut dyn FnMut(Found)) -> Result<(), String> {
    let mode = OpenMode {
        write: false,
        direct: true,
        dsync: false,
    };
    if let Err(e) = std::fs::symlink_metadata(path) {
        return Err(if e.kind() == std::io::ErrorKind::NotFound {
            format!("{} is gone (unplugged, or removed)", path.display())
        } else {
            format!("{}: {e}", path.display())
        });
    }
    let open = |mode| Target::open(path, mode, None, Preparation::Preallocate, false, true);
    // O_DIRECT: after a cut in the same boot (a test, a dm table swap), the page cache could
    // still hold what the medium lost. A filesystem without it (tmpfs) is read through the
    // cache after dropping the file's pages.
    let buffered = || -> Result<Target, String> {
        let t = open(OpenMode {
            direct: false,
            ..mode
        })
        .map_err(|e| e.to_string())?;
        // SAFETY: a valid fd; advice over the whole file.
        unsafe { libc::posix_fadvise(t.fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        Ok(t)
    };
    let (mut target, mut direct) = match open(mode) {
        Ok(t) => (t, true),
        Err(WorkloadError::DirectUnsupported(_)) => (buffered()?, false),
        Err(e) => return Err(e.to_string()),
    };
    let region = state.blocks * state.block_bytes;
    if target.size_bytes < region {
        return Err(format!(
            "{} holds {} bytes, less than the {region}-byte region written: another disk, or \
             the file was cut short",
            path.display(),
            target.size_bytes
        ));
    }
    let bs = state.block_bytes as usize;
    let per_read = ((1usize << 20) / bs).max(1);
    let mut buf = AlignedBuffer::new(bs * per_read, 1).ok_or("out of memory")?;
    let mut scratch = vec![0u8; bs];
    let mut i = 0u64;
    while i < state.blocks {
        let n = (state.blocks - i).min(per_read as u64) as usize;
        let chunk = buf.slot_mut(0, n * bs);
        match target.file.read_exact_at(chunk, i * state.block_bytes) {
            Ok(()) => {
                for (k, block) in chunk.chunks_exact(bs).enumerate() {
                    found(classify(state.run_id, i + k as u64, block, &mut scratch));
                }
            }
            Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => {
                // A block size or a last read below the device's sector size: O_DIRECT
                // refuses it. Read the rest through the cache, its pages dropped first.
                target = buffered()?;
                direct = false;
                continue;
            }
            Err(_) => {
                // One bad place must not hide the rest: block by block, a block the medium
                // cannot return is unreadable (an acknowledged one did not survive).
                for (k, block) in chunk.chunks_exact_mut(bs).enumerate() {
                    let b = i + k as u64;
                    found(
                        match target.file.read_exact_at(block, b * state.block_bytes) {
                            Ok(()) => classify(state.run_id, b, block, &mut scratch),
                            Err(_) => Found::Unreadable,
                        },
                    );
                }
            }
        }
        i += n as u64;
    }
    Ok(())
}

impl Verdict {
    /// Acknowledged blocks the medium did not keep: lost, torn, misplaced or unreadable.
    pub fn not_kept(&self) -> u64 {
        self.lost + self.torn + self.misplaced + self.unreadable
    }
}

impl Judgement {
    /// The verify's exit code: 0 pass, 1 fail, 4 untested (nothing proven is no pass).
    pub fn exit(self) -> crate::exit::Exit {
        match self {
            Judgement::Pass => crate::exit::Exit::Pass,
            Judgement::Fail => crate::exit::Exit::VerdictFailed,
            Judgement::Untested => crate::exit::Exit::Error,
        }
    }
}

/// Whether the state (and the test file) stay after a verify: when asked (`--keep`), or when
/// the verdict is untested with blocks acknowledged and the region may come back (a device
/// plugged again; a test file that is gone will not, so it is not retried every boot).
/// `file_gone`: the target is a test file and it is no longer there.
pub fn keep_state(verdict: &Verdict, asked: bool, file_gone: bool) -> bool {
    let retry = verdict.verdict == Judgement::Untested && verdict.acknowledged > 0 && !file_gone;
    asked || retry
}

/// After the verdict: the state goes, then the test file the write phase created, if it
/// holds this test's first block (a state is input from a medium: it must not make root
/// remove a file it names). A device's region is left as it is. Says what was left.
pub fn clean_up(state: &State, state_path: &Path) -> Vec<String> {
    let mut left = Vec::new();
    if let Err(e) = std::fs::remove_file(state_path) {
        left.push(format!("{}: {e}", state_path.display()));
    }
    if state.created_file && state.target_kind == TargetKind::File {
        match ours(state) {
            Ok(true) => {
                if let Err(e) = std::fs::remove_file(&state.target) {
                    left.push(format!("{}: {e}", state.target.display()));
                }
            }
            Ok(false) => left.push(format!(
                "{}: it does not start with this test's first block (never acknowledged, or \
                 not the test's file); remove it by hand if it is",
                state.target.display()
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => left.push(format!("{}: {e}", state.target.display())),
        }
    }
    left
}

/// Whether the file the state names is a regular file whose block 0 is this test's.
fn ours(state: &State) -> std::io::Result<bool> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(&state.target)?;
    if !f.metadata()?.is_file() {
        return Ok(false);
    }
    let mut block = vec![0u8; state.block_bytes as usize];
    let mut scratch = block.clone();
    if f.read_exact_at(&mut block, 0).is_err() {
        return Ok(false);
    }
    Ok(classify(state.run_id, 0, &block, &mut scratch) != Found::Absent)
}

/// A run id for a test not given one: the time and the process, mixed.
pub fn fresh_run_id() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut r = [0u8; 8];
    // Each cycle its own id, whatever the clock says after a cut: an old cycle's block left
    // on the medium is never taken for this one's.
    let _ = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut r));
    mix64(t ^ (u64::from(std::process::id()) << 32) ^ mix64(u64::from_le_bytes(r)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(blocks: u64, acknowledged: u64) -> State {
        State {
            format: STATE_FORMAT.into(),
            version: VERSION,
            run_id: 42,
            target: "/media/emmc/pc.bin".into(),
            target_kind: TargetKind::File,
            created_file: true,
            block_bytes: 512,
            blocks,
            sync: Sync::Fdatasync,
            acknowledged,
            complete: acknowledged == blocks,
            started: "2026-12-02T18:00:00Z".into(),
        }
    }

    #[test]
    fn the_state_stays_only_when_asked_or_when_the_region_may_come_back() {
        // (judgement, acknowledged, --keep, the test file gone, kept, exit)
        use crate::exit::Exit;
        let cases = [
            (Judgement::Pass, 6, false, false, false, Exit::Pass),
            (Judgement::Fail, 6, false, false, false, Exit::VerdictFailed),
            (Judgement::Pass, 6, true, false, true, Exit::Pass),
            // unreadable now, may be readable after a replug: retried at the next boot
            (Judgement::Untested, 6, false, false, true, Exit::Error),
            // a test file that is gone does not come back: not retried every boot
            (Judgement::Untested, 6, false, true, false, Exit::Error),
            // nothing acknowledged: nothing to come back for
            (Judgement::Untested, 0, false, false, false, Exit::Error),
        ];
        for (j, acked, asked, gone, kept, exit) in cases {
            let mut v = unreadable(&state(10, acked), "x".into());
            v.verdict = j;
            v.acknowledged = acked;
            assert_eq!(
                keep_state(&v, asked, gone),
                kept,
                "{j:?} {acked} {asked} {gone}"
            );
            assert_eq!(j.exit(), exit);
        }
    }

    #[test]
    fn what_the_medium_holds_is_told_apart() {
        let mut img = vec![0u8; 512];
        let mut scratch = vec![0u8; 512];
        block_image(42, 5, &mut img);
        let mut torn = img.clone();
        torn[300..].fill(0);
        let mut other_run = vec![0u8; 512];
        block_image(43, 5, &mut other_run);
        let mut other_block = vec![0u8; 512];
        block_image(42, 6, &mut other_block);
        let mut short_header = img.clone();
        short_header[..8].copy_from_slice(b"USBPCUT0");
        for (read, found) in [
            (&img, Found::Intact),
            (&torn, Found::Torn),
            (&vec![0u8; 512], Found::Absent),
            (&other_run, Found::Absent),
            (&other_block, Found::Misplaced),
            (&short_header, Found::Absent),
        ] {
            assert_eq!(classify(42, 5, read, &mut scratch), found);
        }
        // Two blocks' data differ beyond the header: a copy is never intact elsewhere.
        assert_ne!(img[32..], other_block[32..]);
    }

    #[test]
    fn only_acknowledged_blocks_are_judged_and_ranges_are_bounded() {
        use Found::*;
        let found = [
            Intact, Intact, Absent, Absent, Torn, Intact, Absent, Intact, Torn, Absent,
        ];
        let v = judge(&state(10, 6), found);
        assert_eq!(v.verdict, Judgement::Fail);
        assert_eq!((v.intact, v.lost, v.torn, v.misplaced), (3, 2, 1, 0));
        assert_eq!((v.written_unacknowledged, v.never_written), (2, 2));
        assert_eq!(v.lost_ranges, [[2, 3]]);
        assert_eq!(v.torn_ranges, [[4, 4]]);
        assert!(
            v.reason.contains("3 of 6") && v.reason.contains("blocks 2-3"),
            "{}",
            v.reason
        );

        let v = judge(&state(10, 2), found);
        assert_eq!(v.verdict, Judgement::Pass);
        // A block the medium cannot return did not survive; after the acknowledgement it is
        // only counted.
        let v = judge(&state(3, 2), [Intact, Unreadable, Unreadable]);
        assert_eq!(v.verdict, Judgement::Fail);
        assert_eq!((v.unreadable, v.never_written), (1, 1));
        assert_eq!(v.lost_ranges, [[1, 1]]);
        assert!(v.reason.contains("1 unreadable"), "{}", v.reason);
        let v = judge(&state(10, 0), found);
        assert_eq!(v.verdict, Judgement::Untested);

        // Every other block lost: 500 ranges, 16 listed, the count whole.
        let found: Vec<Found> = (0..1000)
            .map(|i| if i % 2 == 0 { Absent } else { Intact })
            .collect();
        let v = judge(&state(1000, 1000), found);
        assert_eq!((v.lost, v.lost_ranges.len()), (500, MAX_RANGES));
        assert!(v.reason.contains("..."), "{}", v.reason);
    }

    #[test]
    fn a_state_out_of_bounds_is_refused_with_the_bound() {
        let good = state(8, 8);
        assert!(good.check().is_ok());
        let cases: Vec<(State, &str)> = vec![
            (
                State {
                    version: 2,
                    ..good.clone()
                },
                "version 2",
            ),
            (
                State {
                    block_bytes: 1000,
                    ..good.clone()
                },
                "multiple of 512",
            ),
            (
                State {
                    block_bytes: 2 << 20,
                    ..good.clone()
                },
                "from 512 to 1M",
            ),
            (
                State {
                    blocks: 0,
                    acknowledged: 0,
                    ..good.clone()
                },
                "at least one block",
            ),
            (
                State {
                    blocks: 1 << 40,
                    acknowledged: 0,
                    complete: false,
                    ..good.clone()
                },
                "1 TiB",
            ),
            (
                State {
                    acknowledged: 9,
                    ..good.clone()
                },
                "more than the region",
            ),
            (
                State {
                    acknowledged: 4,
                    ..good.clone()
                },
                "complete, but",
            ),
            (
                State {
                    target: "pc.bin".into(),
                    ..good.clone()
                },
                "absolute path",
            ),
        ];
        for (s, says) in cases {
            let e = s.check().unwrap_err();
            assert!(e.contains(says), "{says}: {e}");
        }
    }

    #[test]
    fn the_state_is_replaced_whole_and_read_back() {
        let dir = std::env::temp_dir().join(format!("usbperf-pc-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("pc.state");
        // A temporary file a cut left behind does not stop the next replacement.
        std::fs::write(dir.join(".pc.state.tmp"), "half").unwrap();
        let mut s = state(8, 3);
        s.complete = false;
        write_state(&p, &s).unwrap();
        assert_eq!(read_state(&p).unwrap(), s);
        s.acknowledged = 8;
        s.complete = true;
        write_state(&p, &s).unwrap();
        assert_eq!(read_state(&p).unwrap(), s);
        assert!(!dir.join(".pc.state.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
