//! Owns the one description of a report as every reader takes it from elsewhere (`show`, the
//! factory run's closing table, `fleet`, the collector's ingest): the fields any of them
//! reads, each once, and the one entry point [`read`] that bounds, decodes and versions a
//! report's bytes.
//!
//! Lenient where a newer build may differ and nothing is lost by it: unknown fields are
//! ignored, and workloads, statuses, classes and reason kinds stay text, so a report with a
//! new field, workload or status word still reads. Strict where the writer always writes a
//! field and a reader needs it: the start time, the verdicts (written last, so a file cut
//! short fails instead of reading with devices silently missing), a result's figures.
//!
//! The unit's strict `report::schema::Report` is what its build writes; it cannot read a newer
//! build's report (its `config` denies unknown keys and its enums refuse names they do not
//! know), so it is never used to read a report from elsewhere.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::decode::{self, capped, is_json, parse, Probe, MAX_CELLS, MAX_DEVICES};
use crate::metric::{self, Metric};
use crate::SCHEMA_VERSION;

/// Why bytes could not be read as a report; the path names the file (or the upload).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReadError {
    #[error("{}: not a usbperf report: {msg}", path.display())]
    NotAReport { path: PathBuf, msg: String },
    #[error(
        "{}: schema_version {version} is newer than this build reads ({supported}){}",
        path.display(),
        match msg {
            Some(m) => format!(" and its shape changed ({m})"),
            None => String::new(),
        }
    )]
    TooNew {
        path: PathBuf,
        version: u32,
        supported: u32,
        /// Why the newer report did not decode; `None` when it was refused for its version
        /// alone.
        msg: Option<String>,
    },
}

/// What to do with a report of a newer schema version than this build writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Newer {
    /// Read it when the fields read still decode: a person looking at one report wants to
    /// see whatever can be shown.
    ReadWhatDecodes,
    /// Refuse it: a fleet's figures must mean the same in every report it adds up.
    Refuse,
}

/// A report as read. Only what some reader uses; see the module's rules.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    /// A unique id per report (a UUID since schema 2; 16 hex digits or absent in schema 1);
    /// when present it is the report's identity for deduplication.
    #[serde(default)]
    pub report_id: Option<String>,
    #[serde(default)]
    pub tool: Tool,
    pub started_at: DateTime<Utc>,
    /// Text, as written: the collector checks it and stores it.
    #[serde(default)]
    pub finished_at: Option<String>,
    /// `running`, `complete`, `interrupted`, or a newer word.
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub interrupted_by: Option<String>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub unit: Unit,
    #[serde(default)]
    pub config: Config,
    #[serde(default, deserialize_with = "capped::<_, _, MAX_DEVICES>")]
    pub devices: Vec<Device>,
    #[serde(default, deserialize_with = "capped::<_, _, MAX_DEVICES>")]
    pub missing_devices: Vec<String>,
    pub verdict: Verdict,
    /// The raw flash (MTD and UBI devices), where the unit has some.
    #[serde(default)]
    pub flash: Option<Flash>,
}

/// The raw flash of a run: its MTD and UBI devices.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Flash {
    #[serde(default, deserialize_with = "capped::<_, _, MAX_DEVICES>")]
    pub devices: Vec<FlashDevice>,
}

/// One MTD or UBI device: its figures and verdict.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FlashDevice {
    pub name: String,
    /// `mtd` or `ubi`, or a newer word.
    #[serde(default)]
    pub class: Option<String>,
    /// The partition's name (`mtd`), the MTD device it is on (`ubi`).
    #[serde(default)]
    pub label: Option<String>,
    /// `flash.bad_blocks`, `scan.uncorrectable_pages`, `flash-write.mib_per_s`: the part
    /// after the dot is the metric.
    #[serde(default, deserialize_with = "capped::<_, _, MAX_CELLS>")]
    pub figures: Vec<FlashFigure>,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FlashFigure {
    pub name: String,
    pub value: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Tool {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub version: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Unit {
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub machine_id: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub serial: Option<String>,
    #[serde(default)]
    pub image: Option<Image>,
}

/// The image the unit ran (os-release), what names a build.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Image {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub version_id: Option<String>,
    #[serde(default)]
    pub build_id: Option<String>,
    #[serde(default)]
    pub image_version: Option<String>,
}

impl Image {
    /// The build as the fleet names it: the image's own version where the distro writes one
    /// (`IMAGE_VERSION`, else `BUILD_ID`), else the distro's `VERSION_ID`; prefixed with the
    /// distro's `ID`.
    pub fn build(&self) -> Option<String> {
        fn pick(v: &Option<String>) -> Option<&str> {
            v.as_deref().map(str::trim).filter(|v| !v.is_empty())
        }
        let version = pick(&self.image_version)
            .or_else(|| pick(&self.build_id))
            .or_else(|| pick(&self.version_id))?;
        Some(match pick(&self.id) {
            Some(id) => format!("{id} {version}"),
            None => version.to_string(),
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Config {
    /// The matrix's tests in order: the table's columns.
    #[serde(default, deserialize_with = "capped::<_, _, MAX_CELLS>")]
    pub tests: Vec<Test>,
    #[serde(default, deserialize_with = "capped::<_, _, MAX_CELLS>")]
    pub thresholds: Vec<Threshold>,
    #[serde(default)]
    pub station: Option<String>,
    /// `factory` or `field` (a unit's later boots); absent before reports said it.
    #[serde(default)]
    pub phase: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Test {
    pub workload: String,
}

/// A threshold the factory run applied, for drawing it on the fleet's charts; stored by the
/// collector as it was read.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct Threshold {
    #[serde(default)]
    pub select: Select,
    #[serde(default)]
    pub workload: Option<String>,
    #[serde(default)]
    pub min_mib_per_s: Option<f64>,
    #[serde(default)]
    pub min_iops: Option<f64>,
    #[serde(default)]
    pub max_p99_latency_ms: Option<f64>,
    #[serde(default)]
    pub min_link_mbps: Option<f64>,
    /// The wear a part may reach, for its projected end of life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_life_used_percent: Option<f64>,
}

impl Threshold {
    /// Its limits on figures, each with its metric: the one place a field of it is tied to
    /// its metric.
    pub fn limits_mut(&mut self) -> [(&'static Metric, &mut Option<f64>); 4] {
        [
            (&metric::MIB_PER_S, &mut self.min_mib_per_s),
            (&metric::IOPS, &mut self.min_iops),
            (&metric::P99_LATENCY_MS, &mut self.max_p99_latency_ms),
            (&metric::LINK_MBPS, &mut self.min_link_mbps),
        ]
    }

    /// The limits it sets, each with its metric (read through [`Self::limits_mut`], so the
    /// fields are listed once; a config is a handful of small rules).
    pub fn limits(&self) -> Vec<(&'static Metric, f64)> {
        let mut t = self.clone();
        let slots = t.limits_mut();
        slots
            .into_iter()
            .filter_map(|(m, v)| Some((m, (*v)?)))
            .collect()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct Select {
    #[serde(default)]
    pub all_non_system: bool,
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub port: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Verdict {
    #[serde(default)]
    pub pass: bool,
    #[serde(default, deserialize_with = "capped::<_, _, MAX_CELLS>")]
    pub reasons: Vec<Reason>,
    #[serde(default)]
    pub retests: u32,
    #[serde(default)]
    pub marginal: bool,
}

impl Verdict {
    /// The sentences of its reasons, in order.
    pub fn texts(&self) -> Vec<String> {
        self.reasons.iter().map(|r| r.text().to_string()).collect()
    }
}

/// A verdict's or a cell's reason: a sentence (schema 1) or a record (schema 2), whose kind
/// and fields the fleet ranks by and the table marks figures by; the kind stays text, so a
/// kind a newer build adds still reads.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Reason {
    Text(String),
    Record(Record),
}

impl Reason {
    pub fn text(&self) -> &str {
        match self {
            Reason::Text(t) => t,
            Reason::Record(r) => &r.text,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Record {
    pub kind: String,
    #[serde(default)]
    pub rule: Option<String>,
    #[serde(default)]
    pub workload: Option<String>,
    #[serde(default)]
    pub metric: Option<String>,
    #[serde(default)]
    pub limit: Option<f64>,
    #[serde(default)]
    pub unit: Option<String>,
    #[serde(default)]
    pub port: Option<String>,
    #[serde(default)]
    pub event: Option<String>,
    /// The figure was indistinguishable from its limit, or within its marginal band.
    #[serde(default)]
    pub marginal: bool,
    #[serde(default)]
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Device {
    pub name: String,
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub disk: Disk,
    #[serde(default, deserialize_with = "capped::<_, _, MAX_CELLS>")]
    pub cells: Vec<Cell>,
    /// A power-cut test's verdict on the device (a report `power-cut verify` wrote).
    #[serde(default)]
    pub power_cut: Option<PowerCut>,
    pub verdict: Verdict,
}

/// A power-cut verdict's judgement and the counts of the acknowledged blocks.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PowerCut {
    /// `pass`, `fail`, `untested`, or a newer word.
    pub verdict: String,
    #[serde(default)]
    pub acknowledged: u64,
    #[serde(default)]
    pub lost: u64,
    #[serde(default)]
    pub torn: u64,
    #[serde(default)]
    pub misplaced: u64,
    #[serde(default)]
    pub unreadable: u64,
}

impl PowerCut {
    /// Acknowledged blocks the medium did not keep.
    pub fn lost_blocks(&self) -> u64 {
        self.lost
            .saturating_add(self.torn)
            .saturating_add(self.misplaced)
            .saturating_add(self.unreadable)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Disk {
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub vendor: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub serial: Option<String>,
    #[serde(default)]
    pub size_bytes: Option<u64>,
    #[serde(default)]
    pub usb: Option<Usb>,
    #[serde(default)]
    pub sata: Option<Sata>,
    /// An eMMC's or SD card's CID fields and bus timing.
    #[serde(default)]
    pub mmc: Option<Mmc>,
    /// The health summary, where the unit's build reads it.
    #[serde(default)]
    pub health: Option<Health>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Usb {
    #[serde(default)]
    pub port_path: String,
    #[serde(default)]
    pub speed_mbps: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Sata {
    #[serde(default)]
    pub port: Option<String>,
    #[serde(default)]
    pub sata_spd_gbps: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Mmc {
    #[serde(default)]
    pub manfid: Option<String>,
    #[serde(default)]
    pub oemid: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub serial: Option<String>,
    /// debugfs bus timing (`mmc HS200`); absent without debugfs.
    #[serde(default)]
    pub timing: Option<String>,
    /// `MMC`, `SD`, `SDIO`.
    #[serde(default)]
    pub card_type: Option<String>,
}

/// The health summary figures read (wear and error counts).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Health {
    #[serde(default)]
    pub life_time_used_percent_max: Option<f64>,
    #[serde(default)]
    pub media_errors: Option<f64>,
    #[serde(default)]
    pub udma_crc_errors: Option<f64>,
    #[serde(default)]
    pub pre_eol: Option<String>,
    #[serde(default)]
    pub emmc: Option<Emmc>,
    #[serde(default)]
    pub nvme: Option<Nvme>,
}

/// An eMMC's life time estimates (a 10 % band each: the band's top is the figure kept).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Emmc {
    #[serde(default)]
    pub life_time_a: Option<Life>,
    #[serde(default)]
    pub life_time_b: Option<Life>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Life {
    #[serde(default)]
    pub used_percent_max: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Nvme {
    #[serde(default)]
    pub percent_used: Option<f64>,
    #[serde(default)]
    pub data_written_bytes: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Cell {
    pub workload: String,
    pub status: String,
    #[serde(default)]
    pub result: Option<Figures>,
    /// What failed the cell or was noted on it: which figure, and whether marginal.
    #[serde(default, deserialize_with = "capped::<_, _, MAX_CELLS>")]
    pub reasons: Vec<Reason>,
    /// The earlier attempts of a cell measured again (retests): only their count is read.
    #[serde(default, deserialize_with = "capped::<_, _, MAX_CELLS>")]
    pub attempts: Vec<IgnoredAny>,
}

/// A cell's result: the figures the writer always gives, and the ones it gives when known.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Figures {
    pub mib_per_s: f64,
    pub iops: f64,
    pub all: Op,
    #[serde(default)]
    pub verify: Option<Verify>,
    #[serde(default)]
    pub precision: Option<Precision>,
    #[serde(default)]
    pub curve: Option<Curve>,
}

impl Figures {
    /// The rate and IOPS a limit judges (as `BenchResult::judged`): after a drop (a write
    /// cache that filled) the sustained ones, else the steady ones after the warm-up.
    pub fn judged(&self) -> (f64, f64) {
        let p = self.precision.as_ref();
        crate::judged_figures(
            self.mib_per_s,
            self.iops,
            p.and_then(|p| Some(p.drop.as_ref()?.sustained_mib_per_s)),
            p.and_then(|p| p.steady_mib_per_s),
        )
    }
}

/// The figure's stated precision: half its 95 % confidence interval, in %; and the rate
/// after a drop (a write cache that filled), the figure that limits judge.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Precision {
    #[serde(default)]
    pub ci95_percent: Option<f64>,
    #[serde(default)]
    pub drop: Option<Drop>,
    #[serde(default)]
    pub steady_mib_per_s: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Drop {
    #[serde(default)]
    pub burst_mib_per_s: Option<f64>,
    pub sustained_mib_per_s: f64,
    #[serde(default)]
    pub ci95_percent: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Op {
    #[serde(default)]
    pub ios: u64,
    pub latency: Latency,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Latency {
    /// Nanoseconds; read as a float so a newer build writing a fraction still reads.
    pub p99_ns: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Verify {
    #[serde(default)]
    pub mismatched_blocks: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Curve {
    #[serde(default, deserialize_with = "capped::<_, _, MAX_SAMPLES>")]
    pub samples: Vec<Sample>,
    #[serde(default)]
    pub knee: Option<Knee>,
}

/// A write curve's samples: one per interval of a long write, a few thousand at most.
pub const MAX_SAMPLES: usize = 65_536;

#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub mib_per_s: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
pub struct Knee {
    pub t_s: f64,
    pub before_mib_per_s: f64,
    pub after_mib_per_s: f64,
}

impl Report {
    /// The run is over (complete or interrupted), so its verdicts were given. A `running`
    /// report carries placeholder verdicts (`pass: false` before any judging), and a status
    /// word from a newer build may mean the same: only these two are trusted.
    pub fn judged(&self) -> bool {
        matches!(
            self.status.as_deref(),
            Some("complete") | Some("interrupted") | None
        )
    }
}

/// The schema versions this build reads (and the collector stores): every one it ever wrote.
pub const READABLE: std::ops::RangeInclusive<u32> = 1..=SCHEMA_VERSION;

/// Reads a report that is to leave the unit or be stored (`upload`'s check before queueing,
/// the collector's ingest): as [`read`] with newer versions refused, and written by
/// usbperf-matrix.
pub fn read_to_store(path: &Path, bytes: &[u8]) -> Result<Report, ReadError> {
    let r = read(path, bytes, Newer::Refuse)?;
    if r.tool.name != "usbperf-matrix" {
        return Err(ReadError::NotAReport {
            path: path.to_path_buf(),
            msg: format!("tool.name is {:?}, not usbperf-matrix", r.tool.name),
        });
    }
    Ok(r)
}

/// A report to leave the unit in its canonical wire form, JSON, after [`read_to_store`]
/// accepted it: JSON bytes as they are, a YAML report re-encoded field for field in its own
/// order (every figure parses back to the same number). What the collector stores is then
/// one form, whatever `report_format` the unit writes its files in.
pub fn to_store_as_json(path: &Path, bytes: &[u8]) -> Result<(Report, Vec<u8>), ReadError> {
    let report = read_to_store(path, bytes)?;
    if is_json(path, bytes) {
        return Ok((report, bytes.to_vec()));
    }
    // The bytes were bounded and decoded above: a YAML mapping of text keys, finite numbers,
    // no anchors or tags.
    let not_json = |e: String| ReadError::NotAReport {
        path: path.to_path_buf(),
        msg: format!("cannot be written as JSON: {e}"),
    };
    let value: serde_norway::Value =
        serde_norway::from_slice(bytes).map_err(|e| not_json(e.to_string()))?;
    let mut out = serde_json::to_vec_pretty(&value).map_err(|e| not_json(e.to_string()))?;
    out.push(b'\n');
    Ok((report, out))
}

/// Reads one report's bytes (YAML or JSON, told apart by [`is_json`]); `path` names it in
/// errors. The bytes are bounded ([`decode::check`]) before anything is built from them.
pub fn read(path: &Path, bytes: &[u8], newer: Newer) -> Result<Report, ReadError> {
    let json = is_json(path, bytes);
    let not_a_report = |msg: String| ReadError::NotAReport {
        path: path.to_path_buf(),
        msg,
    };
    let too_new = |version: u32, msg: Option<String>| ReadError::TooNew {
        path: path.to_path_buf(),
        version,
        supported: SCHEMA_VERSION,
        msg,
    };
    decode::check(json, bytes, &decode::LIMITS).map_err(|e| not_a_report(e.to_string()))?;
    if !json {
        // The fast path; any failure falls through to the full parse, whose error is the
        // one given.
        if let Ok(r) = parse::<Report>(false, &prune_yaml(bytes)) {
            if r.schema_version == SCHEMA_VERSION {
                return Ok(r);
            }
        }
    }
    match parse::<Report>(json, bytes) {
        Ok(r) if r.schema_version == 0 => Err(not_a_report(
            "schema_version 0 does not exist (reports start at 1)".into(),
        )),
        Ok(r) if r.schema_version > SCHEMA_VERSION && newer == Newer::Refuse => {
            Err(too_new(r.schema_version, None))
        }
        Ok(r) => Ok(r),
        // A newer schema may have changed a field read here: say so rather than name the
        // field.
        Err(msg) => match parse::<Probe>(json, bytes) {
            Ok(Probe {
                schema_version: Some(v),
            }) if v > SCHEMA_VERSION => {
                Err(too_new(v, (newer == Newer::ReadWhatDecodes).then_some(msg)))
            }
            _ => Err(not_a_report(match shape(json, bytes) {
                Some(kind) => format!("the document is {kind}, not a mapping of report fields"),
                // serde names the field in backticks; people read it without.
                None => shorten_quotes(&msg.replace('`', ""))
                    .replace("struct Report", "the mapping of a report"),
            })),
        },
    }
}

/// What the document is when it parses but is not a mapping (a text file parses as one YAML
/// string): serde's own message would quote the whole file. Called on bytes already bounded.
fn shape(json: bool, bytes: &[u8]) -> Option<&'static str> {
    let kind = |null: bool, seq: bool, map: bool| match (null, seq, map) {
        (_, _, true) => None,
        (true, _, _) => Some("empty"),
        (_, true, _) => Some("a list"),
        _ => Some("a single value (plain text?)"),
    };
    if json {
        let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        kind(v.is_null(), v.is_array(), v.is_object())
    } else {
        let v: serde_norway::Value = serde_norway::from_slice(bytes).ok()?;
        kind(v.is_null(), v.is_sequence(), v.is_mapping())
    }
}

/// Cuts every quoted string of a decoder message to its start: serde quotes the offending
/// value whole, and a text file given by mistake is one long value.
fn shorten_quotes(msg: &str) -> String {
    const KEEP: usize = 40;
    let mut out = String::with_capacity(msg.len().min(200));
    let mut quoted: Option<usize> = None;
    for c in msg.chars() {
        match (c, quoted) {
            ('"', None) => {
                quoted = Some(0);
                out.push(c);
            }
            ('"', Some(_)) => {
                quoted = None;
                out.push(c);
            }
            (_, Some(n)) => {
                if n < KEEP {
                    out.push(c);
                } else if n == KEEP {
                    out.push_str("...");
                }
                quoted = Some(n + 1);
            }
            (_, None) => out.push(c),
        }
    }
    out
}

/// Keys no field of [`Report`] (or [`Probe`]) reads, at any depth: per-test parameters,
/// targets, per-direction and CPU figures, placements, partitions, config sections and the
/// identity details, which make up four fifths of a report's lines. A test checks that
/// pruning leaves what is read the same.
fn unread(key: &[u8]) -> bool {
    matches!(
        key,
        b"params"
            | b"target"
            | b"read"
            | b"write"
            | b"cpu"
            | b"stalls"
            | b"placement"
            | b"partitions"
            | b"mounts"
            | b"holders"
            | b"kernel_events"
            | b"missing"
            | b"hubs"
            | b"root_hub"
            | b"warnings"
            | b"engine"
            | b"engine_reason"
            | b"stopped_by"
            | b"bytes"
            | b"seconds"
            | b"min_ns"
            | b"mean_ns"
            | b"p50_ns"
            | b"p90_ns"
            | b"p99_9_ns"
            | b"max_ns"
            | b"wall_seconds"
            | b"devnum"
            | b"dev_node"
            | b"devpath"
            | b"id_path"
            | b"logical_block_size_bytes"
            | b"physical_block_size_bytes"
            | b"rotational"
            | b"removable"
            | b"read_only"
            | b"bus"
            | b"vendor_id"
            | b"product_id"
            | b"manufacturer"
            | b"product"
            | b"interface"
            | b"driver"
            | b"min_chain_speed_mbps"
            | b"root_hub_speed_inferred"
            | b"host_controller_driver"
            | b"kernel_release"
            | b"architecture"
            | b"cpu_model"
            | b"cpu_count"
            | b"memory_bytes"
            | b"identity_source"
            | b"sources"
            | b"description"
            | b"report_dir"
            | b"report_format"
            | b"wait_devices"
            | b"headroom_percent"
            | b"cumulative_mib"
            | b"interval_ms"
            | b"drop_percent"
            | b"inventory_backend"
            | b"features"
            | b"cache_drop"
            | b"flush_ns"
    )
}

/// Drops the block-style YAML subtrees and lines of [`unread`] keys before parsing: libyaml's
/// event parser, not serde, is where the time goes, and these lines are about four fifths of
/// a report. A key line `<indent>key:` owns every following line indented
/// deeper, plus `- ` items at its own indent (serde_norway writes a sequence under a key at
/// the key's indent). Blank and comment lines inside a dropped subtree go with it. Only the
/// bytes the reader ignores anyway are removed, so the result has the same meaning for it;
/// anything unusual is caught by the caller, which parses the original on failure.
fn prune_yaml(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() / 3);
    // The indent of the key being dropped, while dropping.
    let mut dropping: Option<usize> = None;
    for line in text.split_inclusive(|&b| b == b'\n') {
        let indent = line.iter().take_while(|&&b| b == b' ').count();
        let rest = &line[indent..];
        let blank = rest.iter().all(|b| b.is_ascii_whitespace()) || rest.first() == Some(&b'#');
        if let Some(k) = dropping {
            if blank || indent > k || (indent == k && rest.starts_with(b"- ")) {
                continue;
            }
            dropping = None;
        }
        let key_end = rest.iter().position(|&b| b == b':');
        if let Some(e) = key_end {
            let after = rest.get(e + 1).copied();
            if matches!(after, Some(b' ') | Some(b'\n') | Some(b'\r') | None) && unread(&rest[..e])
            {
                dropping = Some(indent);
                continue;
            }
        }
        out.extend_from_slice(line);
    }
    out
}

/// The unit's one name, the same in `show`, the result line, the report's file name, the
/// fleet and the collector: the board's serial, else the first 12 hex digits of the
/// machine-id (unique per installed image, unlike the hostname every unit of an image
/// shares), else the hostname. Blank values count as absent.
pub fn unit_name(
    serial: Option<&str>,
    machine_id: Option<&str>,
    hostname: Option<&str>,
) -> Option<String> {
    fn given(s: Option<&str>) -> Option<&str> {
        s.map(str::trim).filter(|s| !s.is_empty())
    }
    given(serial)
        .map(str::to_string)
        .or_else(|| given(machine_id).map(|m| m.chars().take(12).collect()))
        .or_else(|| given(hostname).map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(name: &str, text: &str) -> Result<Report, ReadError> {
        read(Path::new(name), text.as_bytes(), Newer::ReadWhatDecodes)
    }

    const MINIMAL: &str = "schema_version: 1\nstarted_at: 2026-11-30T10:00:00Z\n\
                           status: complete\ndevices:\n- name: sda\n  \
                           cells:\n  - {workload: seq-write, status: passed, result: \
                           {mib_per_s: 12.5, iops: 12.5, all: {latency: {p99_ns: 1000}}}}\n  \
                           verdict: {pass: true}\nverdict: {pass: true}\n";

    #[test]
    fn unknown_fields_workloads_and_statuses_are_kept() {
        let text = MINIMAL
            .replace("status: complete", "status: paused\nnew_top: {a: [1]}")
            .replace("workload: seq-write", "workload: trim-curve, new_cell: 3")
            .replace("status: passed", "status: passed-with-notes");
        let r = show("r.yaml", &text).unwrap();
        assert_eq!(r.status.as_deref(), Some("paused"));
        assert_eq!(r.devices[0].cells[0].workload, "trim-curve");
        assert_eq!(r.devices[0].cells[0].status, "passed-with-notes");
    }

    #[test]
    fn files_that_are_not_reports_are_named_with_the_reason() {
        // (file, contents, words the error must contain)
        let cases = [
            (
                "notes.txt",
                "just some words\n",
                "a single value (plain text?)",
            ),
            ("list.yaml", "- a\n- b\n", "the document is a list"),
            ("blank.yaml", "\n", "the document is empty"),
            ("empty.yaml", "{}\n", "missing field schema_version"),
            (
                "cut.yaml",
                "schema_version: 1\nstarted_at: 2026-11-30T10:00:00Z\ndevices: []\n",
                "missing field verdict",
            ),
            (
                "zero.json",
                r#"{"schema_version": 0, "started_at": "2026-11-30T10:00:00Z", "verdict": {}}"#,
                "schema_version 0",
            ),
            ("bad.json", r#"{"schema_version": 1, "devices": ["#, "EOF"),
        ];
        for (file, text, want) in cases {
            let e = show(file, text).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("{file}: not a usbperf report: ")),
                "{e}"
            );
            assert!(e.contains(want), "{file}: {e}");
        }
    }

    #[test]
    fn long_quoted_values_are_cut_in_messages() {
        let long = "x".repeat(500);
        let msg = format!("invalid type: string \"{long}\", expected struct Report");
        let short = shorten_quotes(&msg);
        assert_eq!(
            short,
            format!(
                "invalid type: string \"{}...\", expected struct Report",
                &long[..40]
            )
        );
        assert_eq!(
            shorten_quotes("missing field schema_version"),
            "missing field schema_version"
        );
    }

    #[test]
    fn a_newer_schema_is_read_by_show_when_it_decodes_and_refused_by_the_fleet() {
        let newer = MINIMAL.replace("schema_version: 1", "schema_version: 9");
        assert_eq!(show("n.yaml", &newer).unwrap().schema_version, 9);
        let e = read(Path::new("n.yaml"), newer.as_bytes(), Newer::Refuse).unwrap_err();
        assert_eq!(
            e.to_string(),
            "n.yaml: schema_version 9 is newer than this build reads (2)"
                .replace("(2)", &format!("({SCHEMA_VERSION})"))
        );
        let changed = newer.replace("devices:\n-", "devices: {moved: true}\nold:\n-");
        let e = show("n.yaml", &changed).unwrap_err().to_string();
        assert!(e.contains("schema_version 9 is newer"), "{e}");
        assert!(e.contains("its shape changed"), "{e}");
        let e = read(
            Path::new("r.json"),
            br#"{"schema_version": 7, "devices": 3}"#,
            Newer::Refuse,
        )
        .unwrap_err();
        assert!(e.to_string().contains("schema_version 7 is newer"), "{e}");
    }

    #[test]
    fn json_is_told_from_yaml_by_extension_then_first_byte() {
        let json = r#"{"schema_version": 1, "started_at": "2026-11-30T10:00:00Z", "verdict": {"pass": true}}"#;
        assert!(show("r.json", json).is_ok());
        assert!(show("r", json).is_ok());
        assert!(show("r.yaml", MINIMAL).is_ok());
    }

    #[test]
    fn running_reports_are_not_judged() {
        let running = MINIMAL.replace("status: complete", "status: running");
        assert!(!show("r.yaml", &running).unwrap().judged());
        assert!(show("r.yaml", MINIMAL).unwrap().judged());
    }

    #[test]
    fn prune_drops_unread_subtrees_and_keeps_the_rest() {
        let text = b"a:\n  params:\n    x: 1\n\n    y: [1,\n      2]\n  keep: 2\n  sources:\n  - x\n  - y\n  mounts: []\nverdict:\n  pass: true\n";
        let out = String::from_utf8(prune_yaml(text)).unwrap();
        assert_eq!(out, "a:\n  keep: 2\nverdict:\n  pass: true\n");
    }

    /// Every field read, present in one report: pruning must leave each of them. (The eMMC's
    /// CID under `mmc`, the SATA link and the matrix's `tests` were once pruned, and a
    /// YAML fleet lost the eMMC's part identity.)
    #[test]
    fn pruning_keeps_every_field_read() {
        let text = format!(
            "schema_version: {SCHEMA_VERSION}\nreport_id: r1\ntool:\n  name: usbperf-matrix\n  \
             version: 0.1.0\n  features: [udev]\nstarted_at: 2026-11-30T10:00:00Z\n\
             finished_at: 2026-11-30T10:01:00Z\nstatus: interrupted\ninterrupted_by: SIGTERM\n\
             exit_code: 4\nunit:\n  hostname: h\n  machine_id: m\n  model: M\n  serial: S\n  \
             cpu_count: 2\n  image:\n    id: poky\n    version_id: '5.0'\n    build_id: b\n    \
             image_version: i\nconfig:\n  sources:\n  - builtin:quick\n  tests:\n  - workload: \
             seq-write\n    params:\n      bs: 1M\n  thresholds:\n  - select:\n      class: usb\n    \
             workload: seq-write\n    min_mib_per_s: 10\n    max_life_used_percent: 80\n  \
             station: st1\n  phase: factory\ndevices:\n- name: mmcblk0\n  label: boot\n  disk:\n    \
             class: emmc\n    vendor: V\n    model: M\n    serial: '0x1'\n    size_bytes: 8\n    \
             removable: false\n    usb:\n      port_path: 1-2\n      speed_mbps: 480\n      \
             vendor_id: abcd\n    sata:\n      port: ata1\n      sata_spd_gbps: 6.0\n    mmc:\n      \
             manfid: '0x000015'\n      oemid: '0x0100'\n      name: DG4016\n      serial: \
             '0x1a2b'\n      timing: mmc HS200\n      card_type: MMC\n    health:\n      \
             life_time_used_percent_max: 20\n      media_errors: 0\n      pre_eol: normal\n      \
             emmc:\n        life_time_a:\n          used_percent_max: 20\n  cells:\n  - workload: \
             seq-write\n    status: failed\n    params:\n      bs: 1M\n    result:\n      \
             mib_per_s: 12.5\n      iops: 12.5\n      seconds: 2\n      all:\n        ios: 25\n        \
             latency:\n          p50_ns: 1\n          p99_ns: 1000\n      verify:\n        \
             mismatched_blocks: 0\n      precision:\n        ci95_percent: 1.5\n        \
             steady_mib_per_s: 12\n        drop:\n          burst_mib_per_s: 30\n          \
             sustained_mib_per_s: 4\n          ci95_percent: 2\n      curve:\n        samples:\n        \
             - t_s: 1\n          mib_per_s: 30\n        knee:\n          t_s: 1\n          \
             before_mib_per_s: 30\n          after_mib_per_s: 4\n    reasons:\n    - kind: limit\n      \
             metric: mib_per_s\n      marginal: true\n      text: slow\n    attempts:\n    - \
             {{status: failed}}\n  verdict:\n    pass: false\n    retests: 1\n    marginal: true\n    \
             reasons:\n    - kind: limit\n      rule: r\n      workload: seq-write\n      metric: \
             mib_per_s\n      limit: 10\n      unit: MiB/s\n      port: usb:1-2\n      event: e\n      \
             text: slow\nmissing_devices:\n- usb:1-3\nverdict:\n  pass: false\n  reasons:\n  - \
             old sentence\n"
        );
        let full: Report = parse(false, text.as_bytes()).unwrap();
        let pruned: Report = parse(false, &prune_yaml(text.as_bytes())).unwrap();
        assert_eq!(pruned, full);
        // And every optional field above was read, so the comparison covers it.
        let d = &full.devices[0];
        assert!(d.disk.mmc.as_ref().unwrap().manfid.is_some());
        assert!(d.disk.sata.is_some() && !full.config.tests.is_empty());
        assert!(d.cells[0].result.as_ref().unwrap().verify.is_some());
        assert_eq!(full.missing_devices, ["usb:1-3"]);
        assert_eq!(full.interrupted_by.as_deref(), Some("SIGTERM"));
    }

    #[test]
    fn the_written_report_reads_back_whole() {
        let yaml = include_str!("../../tests/fixtures/reports/v1-4124e44.yaml");
        let r = show("v1.yaml", yaml).unwrap();
        assert!(!r.devices.is_empty());
    }

    /// A YAML report leaves as JSON that reads back to the same report, its fields in their
    /// order; a JSON one leaves as it is.
    #[test]
    fn a_report_leaves_as_json_that_reads_back_the_same() {
        let yaml = include_str!("../../tests/fixtures/reports/v1-4124e44.yaml");
        let (r, json) = to_store_as_json(Path::new("r.yaml"), yaml.as_bytes()).unwrap();
        let text = std::str::from_utf8(&json).unwrap();
        assert!(
            text.starts_with("{\n  \"schema_version\": 1,\n  \"tool\""),
            "{text:.80}"
        );
        let back = read_to_store(Path::new("r.json"), &json).unwrap();
        assert_eq!(back, r);
        let full: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let orig: serde_json::Value = serde_norway::from_str(yaml).unwrap();
        assert_eq!(full, orig, "every field, not only those read");
        let (_, again) = to_store_as_json(Path::new("r.json"), &json).unwrap();
        assert_eq!(again, json);
    }

    #[test]
    fn only_a_usbperf_report_is_stored() {
        let good = "schema_version: 2\nreport_id: ab\ntool: {name: usbperf-matrix}\n\
                    started_at: 2026-11-30T10:23:45Z\nverdict: {pass: true}\n";
        let store = |doc: &str| read_to_store(Path::new("r.yaml"), doc.as_bytes());
        assert_eq!(store(good).unwrap().report_id.as_deref(), Some("ab"));
        let table: &[(&str, &str)] = &[
            (
                "hello: world\n",
                "not a usbperf report: missing field schema_version",
            ),
            (
                "just text",
                "not a usbperf report: the document is a single value",
            ),
            (
                &good.replace("usbperf-matrix", "fio"),
                "tool.name is \"fio\"",
            ),
            (
                &good.replace("schema_version: 2", "schema_version: 9"),
                "schema_version 9 is newer",
            ),
            (
                &good.replace("2026-11-30", "2026-99-99"),
                "not a usbperf report",
            ),
            (&good.replace("ab\n", "&a ab\n"), "anchor"),
            (
                &good.replace("verdict: {pass: true}\n", ""),
                "missing field verdict",
            ),
        ];
        for (doc, want) in table {
            let e = store(doc).unwrap_err().to_string();
            assert!(e.starts_with("r.yaml: "), "{doc:?}: {e}");
            assert!(e.contains(want), "{doc:?}: {e}");
        }
    }
}
