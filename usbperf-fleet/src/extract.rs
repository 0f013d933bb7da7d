//! Owns the step from one parsed report to the compact record the fleet keeps: who (unit,
//! board, tool), when, and per device its group dimensions, metric values and failure
//! reasons. Nothing else of the report survives, which keeps memory flat however large the
//! reports are.
//!
//! Figures come from thousands of units and are untrusted: a figure that
//! is not finite, negative, or beyond what any storage device measures is refused here, with a
//! [`RejectedFigure`] naming the file, device and field. Only that figure goes: the report's
//! verdict was decided on the unit against its own thresholds, and its other figures are
//! separate measurements, so the unit still counts in pass rates and its sane figures in the
//! distributions.

use std::path::{Path, PathBuf};
use usbperf_report::metric;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use usbperf_report::wire::{self, Curve, Reason, Threshold};

/// Ceilings above which a figure is not a measurement. Each is far beyond real hardware, so
/// no real device is refused, and low enough that a refused value cannot flatten a chart:
/// MiB/s: 1e7 (10 TiB/s; page-cache reads on a board reach 1e4, the fastest NVMe 1.4e4);
/// IOPS: 1e9 (the fastest NVMe does about 1e7, the null engine about 1e8);
/// p99 latency: one hour in ms (the kernel's SCSI and MMC timeouts are seconds);
/// link: 1e6 Mbit/s (USB4 v2 is 8e4); capacity: 1 EiB; curve time: 1e7 s (115 days).
pub const MAX_MIB_PER_S: f64 = metric::MIB_PER_S.max;
pub const MAX_IOPS: f64 = metric::IOPS.max;
pub const MAX_P99_LATENCY_MS: f64 = metric::P99_LATENCY_MS.max;
pub const MAX_LINK_MBPS: f64 = metric::LINK_MBPS.max;
pub const MAX_CAPACITY_BYTES: f64 = metric::CAPACITY_BYTES.max;
pub const MAX_CURVE_T_S: f64 = 1e7;

/// The metrics of every workload cell, by suffix: `seq-write.mib_per_s` and so on.
pub const WORKLOAD_METRICS: [&str; 3] = [
    metric::MIB_PER_S.id,
    metric::IOPS.id,
    metric::P99_LATENCY_MS.id,
];
/// The power-cut test's figure: acknowledged blocks not kept.
pub const POWER_CUT_METRIC: &str = "power-cut.lost_blocks";
/// The phase of a power-cut verdict's report (`power-cut verify --report-dir`): no run of the
/// unit, so the fleet counts its figure and leaves its verdict out of the units' and the
/// yields'.
pub const POWER_CUT_PHASE: &str = "power-cut";
/// Device-level metrics.
pub const LINK_METRIC: &str = metric::LINK_MBPS.id;
pub const CAPACITY_METRIC: &str = metric::CAPACITY_BYTES.id;
/// Health metrics: wear in % of the rated life, and error counts. Ceilings: life
/// used can pass 100 (NVMe counts up to 255); a count of 1e12 errors is no device's.
pub const HEALTH_METRICS: [&str; 3] = [
    "health.life_used_percent",
    "health.media_errors",
    "health.udma_crc_errors",
];
pub const MAX_LIFE_USED_PERCENT: f64 = metric::LIFE_USED_PERCENT.max;
pub const MAX_ERROR_COUNT: f64 = metric::MEDIA_ERRORS.max;

/// One report, reduced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnitRecord {
    /// Index of the file in the sorted input list (records arrive out of order).
    pub file: u32,
    pub unit: String,
    pub board: String,
    /// The test station (`station:`, `USBPERF_STATION`), or `unknown station`.
    #[serde(default)]
    pub station: String,
    /// The image build the unit ran (os-release), or `unknown build`.
    #[serde(default)]
    pub build: String,
    /// `factory` (the run on the line, the default) or `field` (a later boot).
    #[serde(default = "factory")]
    pub phase: String,
    pub tool_version: String,
    pub started_at: DateTime<Utc>,
    pub pass: bool,
    pub devices: Vec<DeviceRecord>,
    pub thresholds: Vec<Threshold>,
    /// What makes two copies of this report the same report, see [`report_identity`].
    pub identity: String,
    /// Figures refused as no measurement (left out of `devices` and `thresholds`).
    pub rejected: Vec<RejectedFigure>,
    /// The unit key (hex) whose signature of the report holds: the signature file beside a
    /// report file, or the upload's signature the collector verified; `None`: unsigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
}

fn factory() -> String {
    FACTORY.into()
}

/// The phase of a report that says none: every report before `phase:` was a factory run's.
pub const FACTORY: &str = "factory";

/// The build of a report whose unit wrote no os-release image.
pub const UNKNOWN_BUILD: &str = "unknown build";

/// A figure the fleet refused, and where it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RejectedFigure {
    pub file: PathBuf,
    pub unit: String,
    /// The device label (kernel name, model, serial), or `config` for a threshold.
    pub device: String,
    /// `seq-write.mib_per_s`, `link_mbps`, `write-curve.curve`, `thresholds[1].min_iops`.
    pub field: String,
    /// The value as read (`NaN`, `inf`, `-5`, `1e308`).
    pub value: String,
    /// `not finite`, `negative` or the ceiling it is above.
    pub why: String,
}

/// Why `v` is no measurement of a figure whose ceiling is `max` (`unit` names it), if so.
fn refuse(v: f64, max: f64, unit: &str) -> Option<String> {
    if !v.is_finite() {
        Some("not finite".into())
    } else if v < 0.0 {
        Some("negative".into())
    } else if v > max {
        Some(format!("above {max:e} {unit}, not a measurement"))
    } else {
        None
    }
}

/// A refused value as text: exponent form for huge ones (1e308 has 309 digits otherwise).
fn show(v: f64) -> String {
    if v.is_finite() && v.abs() >= 1e15 {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// The ceiling and unit of a metric by its name (`<workload>.mib_per_s` ...).
fn limit_of(name: &str) -> (f64, &'static str) {
    let fig = name.rsplit('.').next().unwrap_or(name);
    match metric::by_id(fig) {
        Some(m) => (m.max, m.unit),
        None => (MAX_MIB_PER_S, ""),
    }
}

/// Why a write curve is no measurement, if so: its first bad sample or knee figure.
fn refuse_curve(c: &Curve) -> Option<(f64, String)> {
    let mut figs: Vec<(f64, f64, &str)> = Vec::with_capacity(c.samples.len() * 2 + 3);
    for s in &c.samples {
        figs.push((s.t_s, MAX_CURVE_T_S, "s"));
        figs.push((s.mib_per_s, MAX_MIB_PER_S, metric::MIB_PER_S.unit));
    }
    if let Some(k) = &c.knee {
        figs.push((k.t_s, MAX_CURVE_T_S, "s"));
        figs.push((k.before_mib_per_s, MAX_MIB_PER_S, metric::MIB_PER_S.unit));
        figs.push((k.after_mib_per_s, MAX_MIB_PER_S, metric::MIB_PER_S.unit));
    }
    figs.into_iter()
        .find_map(|(v, max, unit)| refuse(v, max, unit).map(|why| (v, why)))
}

/// What `fleet` lists, and `--board` takes, for units that name no model (no device tree, no
/// DMI).
pub const UNKNOWN_BOARD: &str = "unknown board";

/// The board a report names (the unit's device-tree / DMI model).
pub fn board_of(r: &wire::Report) -> String {
    clean(&r.unit.model).unwrap_or_else(|| UNKNOWN_BOARD.into())
}

/// What makes two files the same report: its `report_id` when it has one (always since schema
/// 2, unique per run); else the unit as the report names it (machine-id, serial, hostname,
/// each as written) and `started_at` to the nanosecond, since one unit starts one run at a
/// time; and for a report that names no unit at all, its bytes (so only exact copies match).
pub fn report_identity(r: &wire::Report, bytes: &[u8]) -> String {
    if let Some(id) = clean(&r.report_id) {
        return format!("report_id {id}");
    }
    let u = &r.unit;
    let (m, s, h) = (clean(&u.machine_id), clean(&u.serial), clean(&u.hostname));
    if m.is_none() && s.is_none() && h.is_none() {
        // FNV-1a: stable across runs and builds, unlike the std hasher's promise.
        let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        return format!("content {hash:016x} ({} bytes)", bytes.len());
    }
    format!(
        "machine_id {:?} serial {:?} hostname {:?} started_at {}",
        m.unwrap_or_default(),
        s.unwrap_or_default(),
        h.unwrap_or_default(),
        r.started_at
            .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
    )
}

/// The identity [`report_identity`] gives, and for a report without an id its figures too:
/// such a report is known by its unit and start, so a copy (the same run as YAML and as
/// JSON) still counts once, while a report that claims a unit and start it did not run, with
/// other figures, cannot take the real one's place.
pub fn with_figures(identity: String, rec: &UnitRecord) -> String {
    if identity.starts_with("machine_id ") {
        format!("{identity} figures {:016x}", figures_hash(rec))
    } else {
        identity
    }
}

/// FNV-1a over each device's label and figures, exactly as extracted: the same run read from
/// YAML or JSON hashes the same (both parse to the very f64s).
fn figures_hash(rec: &UnitRecord) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    for d in &rec.devices {
        eat(d.label.as_bytes());
        for (metric, v, ok) in &d.values {
            eat(metric.as_bytes());
            eat(&v.to_bits().to_le_bytes());
            eat(&[u8::from(*ok)]);
        }
    }
    h
}

/// One tested device of a report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceRecord {
    /// Kernel name, model and serial: what a technician looks for on the bench.
    pub label: String,
    pub class: String,
    /// `usb:1-2` for USB devices (the board profile's port syntax), else the kernel name.
    pub port: String,
    pub model: String,
    pub pass: bool,
    /// Cells measured again because their only failures were marginal.
    #[serde(default)]
    pub retests: u32,
    /// A figure the verdict rests on was within its marginal band.
    #[serde(default)]
    pub marginal: bool,
    pub reasons: Vec<FleetReason>,
    /// (metric, value, the figure's own check passed).
    pub values: Vec<(String, f64, bool)>,
    /// The write curve, if the device ran `write-curve`.
    pub curve: Option<Curve>,
    /// The flash part's identity and wear, where the device names itself (a CID serial, an
    /// NVMe or SATA serial) and reads its wear.
    #[serde(default)]
    pub part: Option<PartSample>,
}

/// One reading of a flash part's wear, in one report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartSample {
    /// What follows the part from report to report, whatever unit or port it is in:
    /// `emmc 0x000015 0x0100 DG4016 0x1a2b3c4d` (class, CID manfid, OEM id and name where the
    /// card gives them, and serial), `nvme SAMSUNG MZ... S4EVNX0N`.
    pub id: String,
    /// eMMC life time estimates A and B (band tops, %), NVMe percent used.
    pub life_a: Option<f64>,
    pub life_b: Option<f64>,
    pub percent_used: Option<f64>,
    /// `normal`, `warning`, `urgent`.
    pub pre_eol: Option<String>,
    /// NVMe data written, bytes.
    pub data_written_bytes: Option<f64>,
    /// The lowest `max_life_used_percent` of the unit's thresholds for its class.
    pub limit: Option<f64>,
}

impl PartSample {
    /// The most life used the part reports, in %.
    pub fn life_used(&self) -> Option<f64> {
        [self.life_a, self.life_b, self.percent_used]
            .into_iter()
            .flatten()
            .reduce(f64::max)
    }
}

/// A device's failure reason as the fleet counts it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetReason {
    /// What makes two reasons the same failure (see [`FleetReason::from_wire`]).
    pub key: String,
    /// The sentence, for people (one instance is shown per key).
    pub text: String,
    /// A USB link failure (counted per port).
    pub link: bool,
    /// A capacity shortfall (the capacity figure's own check failed).
    pub capacity: bool,
}

impl FleetReason {
    /// Schema 2: the record's fields give the key (kind, rule, workload, metric, limit and
    /// unit, port, kernel event kind; never the measured figure or the sentence), so a
    /// reworded message ranks the same. Schema 1 has only the sentence: the key is the
    /// sentence with its measured figures masked, and link and capacity failures are told by
    /// their `link:` and `capacity:` prefixes.
    pub fn from_wire(r: Reason) -> FleetReason {
        match r {
            Reason::Text(text) => FleetReason {
                key: reason_kind(&text),
                link: text.starts_with("link:"),
                capacity: text.starts_with("capacity:"),
                text,
            },
            Reason::Record(r) if r.kind == "unclassified" => {
                FleetReason::from_wire(Reason::Text(r.text))
            }
            Reason::Record(r) => {
                let mut key = vec![r.kind.clone()];
                key.extend(r.rule.iter().map(|x| format!("[{x}]")));
                key.extend(r.workload.iter().cloned());
                key.extend(r.metric.iter().cloned());
                if let Some(l) = r.limit {
                    key.push(format!("limit {l}"));
                }
                key.extend(r.unit.iter().cloned());
                key.extend(r.port.iter().cloned());
                key.extend(r.event.iter().cloned());
                FleetReason {
                    key: key.join(" "),
                    link: r.kind == "link",
                    capacity: r.kind == "threshold" && r.metric.as_deref() == Some(CAPACITY_METRIC),
                    text: r.text,
                }
            }
        }
    }
}

fn clean(s: &Option<String>) -> Option<String> {
    s.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// Reduces a parsed report. The unit is named as everywhere (`report::unit::unit_name`), else
/// by the file name (every report names some unit).
pub fn extract(file: u32, path: &Path, r: wire::Report) -> UnitRecord {
    let unit = usbperf_report::wire::unit_name(
        r.unit.serial.as_deref(),
        r.unit.machine_id.as_deref(),
        r.unit.hostname.as_deref(),
    )
    .unwrap_or_else(|| {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let board = board_of(&r);
    let life_limits: Vec<(Option<String>, f64)> = r
        .config
        .thresholds
        .iter()
        .filter_map(|t| Some((t.select.class.clone(), t.max_life_used_percent?)))
        .collect();
    let life_limit = |class: &str| {
        life_limits
            .iter()
            .filter(|(c, _)| c.as_deref().map_or(true, |c| c == class))
            .map(|(_, l)| *l)
            .reduce(f64::min)
    };
    let mut rejected = Vec::new();
    let mut reject = |device: &str, field: String, v: f64, why: String| {
        rejected.push(RejectedFigure {
            file: path.to_path_buf(),
            unit: unit.clone(),
            device: device.to_string(),
            field,
            value: show(v),
            why,
        })
    };
    let power_cut = !r.devices.is_empty()
        && r.devices
            .iter()
            .all(|d| d.power_cut.is_some() && d.cells.is_empty());
    let devices = r
        .devices
        .into_iter()
        .map(|d| {
            let class = clean(&d.disk.class).unwrap_or_else(|| "other".into());
            let model = match (clean(&d.disk.vendor), clean(&d.disk.model)) {
                (Some(v), Some(m)) if !m.starts_with(&v) => format!("{v} {m}"),
                (_, Some(m)) => m,
                (Some(v), None) => v,
                (None, None) => "unknown model".into(),
            };
            let port = match &d.disk.usb {
                Some(u) if !u.port_path.is_empty() => format!("usb:{}", u.port_path),
                _ => d.name.clone(),
            };
            let mut label = format!("{} {model}", d.name);
            if let Some(s) = clean(&d.disk.serial) {
                label.push_str(&format!(" ({s})"));
            }
            if let Some(l) = clean(&d.label) {
                label.push_str(&format!(" [{l}]"));
            }
            let mut values = Vec::with_capacity(d.cells.len() * 3 + 2);
            let mut curve = None;
            for c in d.cells {
                // Figures of a cell that errored, was skipped or interrupted are not a
                // measurement of the device.
                if c.status != "passed" && c.status != "failed" {
                    continue;
                }
                let Some(res) = c.result else { continue };
                let ok = c.status == "passed";
                let w = &c.workload;
                let (mib_per_s, iops) = res.judged();
                values.push((format!("{w}.mib_per_s"), mib_per_s, ok));
                values.push((format!("{w}.iops"), iops, ok));
                if res.all.ios > 0 {
                    let ms = res.all.latency.p99_ns / 1e6;
                    values.push((format!("{w}.p99_latency_ms"), ms, ok));
                }
                if let Some(c) = res.curve.filter(|c| !c.samples.is_empty()) {
                    match refuse_curve(&c) {
                        None => curve = Some(c),
                        Some((v, why)) => reject(&label, format!("{w}.curve"), v, why),
                    }
                }
            }
            // A power-cut verdict: the blocks it did not keep, passed when it kept them all
            // (an untested one proved nothing and gives no figure; its device fails).
            if let Some(p) = d.power_cut.as_ref().filter(|p| p.verdict != "untested") {
                let ok = p.verdict == "pass";
                values.push((POWER_CUT_METRIC.to_string(), p.lost_blocks() as f64, ok));
            }
            let reasons: Vec<FleetReason> = d
                .verdict
                .reasons
                .into_iter()
                .map(FleetReason::from_wire)
                .collect();
            if let Some(mbps) = d.disk.usb.as_ref().and_then(|u| u.speed_mbps) {
                let ok = !reasons.iter().any(|r| r.link);
                values.push((LINK_METRIC.to_string(), mbps, ok));
            }
            if let Some(b) = d.disk.size_bytes {
                let ok = !reasons.iter().any(|r| r.capacity);
                values.push((CAPACITY_METRIC.to_string(), b as f64, ok));
            }
            // Wear and error counts, each judged by its own health limit on the unit.
            if let Some(h) = &d.disk.health {
                let figures = [
                    h.life_time_used_percent_max,
                    h.media_errors,
                    h.udma_crc_errors,
                ];
                for (metric, v) in HEALTH_METRICS.iter().zip(figures) {
                    let Some(v) = v else { continue };
                    let fig = metric.trim_start_matches("health.");
                    // A schema 2 health reason's key names its metric as one word.
                    let ok = !reasons.iter().any(|r| {
                        r.key.starts_with("health ") && r.key.split(' ').any(|k| k == fig)
                    });
                    values.push((metric.to_string(), v, ok));
                }
            }
            let part = part_of(&class, &model, &d.disk, life_limit(&class));
            values.retain(|(metric, v, _)| {
                let (max, unit) = limit_of(metric);
                match refuse(*v, max, unit) {
                    None => true,
                    Some(why) => {
                        reject(&label, metric.clone(), *v, why);
                        false
                    }
                }
            });
            DeviceRecord {
                label,
                class,
                port,
                model,
                pass: d.verdict.pass,
                retests: d.verdict.retests,
                marginal: d.verdict.marginal,
                reasons,
                values,
                curve,
                part,
            }
        })
        .collect::<Vec<DeviceRecord>>();
    // The raw flash: a device per MTD partition and UBI device, its figures judged by the
    // unit's own verdict on it (a figure a reason names failed, the others passed).
    let mut devices = devices;
    for d in r.flash.map(|f| f.devices).unwrap_or_default() {
        let class = clean(&d.class).unwrap_or_else(|| "mtd".into());
        let part = clean(&d.label).unwrap_or_else(|| d.name.clone());
        let label = format!("{} [{part}]", d.name);
        let reasons: Vec<FleetReason> = d
            .verdict
            .reasons
            .into_iter()
            .map(FleetReason::from_wire)
            .collect();
        let mut values = Vec::with_capacity(d.figures.len());
        for f in d.figures {
            let fig = f.name.rsplit('.').next().unwrap_or(&f.name).to_string();
            let group = f.name.split('.').next().unwrap_or("").to_string();
            let ok = !reasons.iter().any(|r| {
                r.text.contains(&f.name) || (r.key.contains(&fig) && r.text.contains(&group))
            });
            let (max, unit) = limit_of(&f.name);
            match refuse(f.value, max, unit) {
                None => values.push((f.name, f.value, ok)),
                Some(why) => reject(&label, f.name, f.value, why),
            }
        }
        devices.push(DeviceRecord {
            label,
            class,
            port: d.name,
            model: part,
            pass: d.verdict.pass,
            retests: 0,
            marginal: d.verdict.marginal,
            reasons,
            values,
            curve: None,
            part: None,
        });
    }
    let mut thresholds = r.config.thresholds;
    for (i, t) in thresholds.iter_mut().enumerate() {
        for (m, slot) in t.limits_mut() {
            if let Some(why) = slot.and_then(|v| refuse(v, m.max, m.unit)) {
                let v = slot.take().unwrap_or_default();
                reject("config", format!("thresholds[{i}].{}", m.key()), v, why);
            }
        }
    }
    let station = clean(&r.config.station).unwrap_or_else(|| "unknown station".into());
    let build = clean(&r.unit.image.as_ref().and_then(|i| i.build()))
        .unwrap_or_else(|| UNKNOWN_BUILD.into());
    let phase = match clean(&r.config.phase) {
        _ if power_cut => POWER_CUT_PHASE.to_string(),
        Some(p) => p,
        None => factory(),
    };
    UnitRecord {
        file,
        unit,
        board,
        station,
        build,
        phase,
        tool_version: r.tool.version,
        started_at: r.started_at,
        pass: r.verdict.pass,
        devices,
        thresholds,
        identity: String::new(),
        rejected,
        signer: None,
    }
}

/// The wear figures a life is made of are percentages: a reading above this is none.
const MAX_WEAR_PERCENT: f64 = 255.0;

/// The part a device is, when it names itself and reads its wear: an eMMC or SD card by its
/// CID manufacturer and serial, an NVMe or SATA disk by its model and serial. A figure out of
/// range is left out of the sample, never read as wear.
fn part_of(class: &str, model: &str, disk: &wire::Disk, limit: Option<f64>) -> Option<PartSample> {
    let h = disk.health.as_ref()?;
    let id = match (class, &disk.mmc) {
        ("emmc" | "sd", Some(m)) => format!("{class} {} {}", clean(&m.manfid)?, clean(&m.serial)?),
        ("nvme" | "sata", _) => format!("{class} {model} {}", clean(&disk.serial)?),
        _ => return None,
    };
    let pct = |v: Option<f64>| v.filter(|v| v.is_finite() && (0.0..=MAX_WEAR_PERCENT).contains(v));
    let emmc = h.emmc.as_ref();
    let nvme = h.nvme.as_ref();
    let s = PartSample {
        id,
        life_a: pct(emmc.and_then(|e| e.life_time_a.as_ref()?.used_percent_max)),
        life_b: pct(emmc.and_then(|e| e.life_time_b.as_ref()?.used_percent_max)),
        percent_used: pct(nvme.and_then(|n| n.percent_used)),
        pre_eol: clean(&h.pre_eol),
        data_written_bytes: nvme
            .and_then(|n| n.data_written_bytes)
            .filter(|v| v.is_finite() && *v >= 0.0 && *v <= 1e21),
        limit: pct(limit),
    };
    (s.life_used().is_some() || s.pre_eol.is_some()).then_some(s)
}

/// A schema 1 failure reason (a sentence) with its measured figures replaced by `N`, so the
/// same failure on many units counts as one: `seq-write: 3.1 MiB/s < minimum 5 MiB/s [...]` becomes
/// `seq-write: N MiB/s < minimum 5 MiB/s [...]` (limits, ports and rule numbers are kept).
pub fn reason_kind(reason: &str) -> String {
    let words: Vec<&str> = reason.split(' ').collect();
    let mut out = Vec::with_capacity(words.len());
    for (i, w) in words.iter().enumerate() {
        let prev = if i > 0 { words[i - 1] } else { "" };
        let next = words.get(i + 1).copied().unwrap_or("");
        let is_num = !w.is_empty() && w.parse::<f64>().is_ok();
        let unit_follows = matches!(next, "MiB/s" | "IOPS" | "ms" | "s" | "I/O(s)")
            || next.starts_with("s)")
            || w.ends_with("ms");
        let is_limit = matches!(prev, "minimum" | "maximum");
        let latency = prev == "latency" && is_num;
        if (is_num && unit_follows && !is_limit) || latency {
            out.push("N");
        } else {
            out.push(w);
        }
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which figures are no measurement, by metric, at and around each
    /// ceiling.
    #[test]
    fn figures_beyond_reason_are_refused() {
        let cases: [(&str, f64, Option<&str>); 12] = [
            ("seq-write.mib_per_s", 42.5, None),
            ("seq-write.mib_per_s", 0.0, None),
            ("seq-write.mib_per_s", MAX_MIB_PER_S, None),
            ("seq-write.mib_per_s", MAX_MIB_PER_S * 1.01, Some("above")),
            ("seq-write.mib_per_s", 1e308, Some("above")),
            ("rand-read.iops", -5.0, Some("negative")),
            ("rand-read.iops", f64::NAN, Some("not finite")),
            ("rand-read.iops", f64::INFINITY, Some("not finite")),
            ("rand-read.iops", MAX_IOPS * 2.0, Some("above")),
            (
                "mixed.p99_latency_ms",
                MAX_P99_LATENCY_MS + 1.0,
                Some("above"),
            ),
            (LINK_METRIC, 480.0, None),
            (CAPACITY_METRIC, MAX_CAPACITY_BYTES * 2.0, Some("above")),
        ];
        for (metric, v, want) in cases {
            let (max, unit) = limit_of(metric);
            let got = refuse(v, max, unit);
            match want {
                None => assert_eq!(got, None, "{metric} {v}"),
                Some(w) => assert!(
                    got.as_deref().is_some_and(|g| g.starts_with(w)),
                    "{metric} {v}: {got:?}"
                ),
            }
        }
        assert_eq!(show(1e308), "1e308");
        assert_eq!(show(-5.0), "-5");
    }

    /// Wear and error counts become fleet figures, each failed only by its own
    /// health reason, and an absurd count is refused like any figure.
    #[test]
    fn health_figures_enter_the_fleet_judged_by_their_own_reasons() {
        let y = "schema_version: 2\nstarted_at: 2026-12-01T10:00:00Z\nunit: {serial: U1}\n\
                 verdict: {pass: false}\n\
                 devices:\n\
                 - name: mmcblk0\n  \
                   disk: {class: emmc, model: M, health: {life_time_used_percent_max: 60, \
                   media_errors: 2e13}}\n  \
                   cells: []\n  \
                   verdict:\n    pass: false\n    reasons:\n    - {kind: health, \
                   rule: 'thresholds[0]', metric: life_used_percent, measured: 60, limit: 50, \
                   unit: '%', text: t}\n\
                 - name: sda\n  \
                   disk: {class: sata, model: S, health: {udma_crc_errors: 0}}\n  \
                   cells: []\n  verdict: {pass: true}\n";
        let r: wire::Report = serde_norway::from_str(y).unwrap();
        let u = extract(0, Path::new("r.yaml"), r);
        let vals = |i: usize| -> Vec<(String, f64, bool)> { u.devices[i].values.clone() };
        assert!(vals(0).contains(&("health.life_used_percent".into(), 60.0, false)));
        assert!(!vals(0).iter().any(|(m, _, _)| m == "health.media_errors"));
        assert_eq!(u.rejected.len(), 1, "{:?}", u.rejected);
        assert!(vals(1).contains(&("health.udma_crc_errors".into(), 0.0, true)));
    }

    #[test]
    fn reasons_count_by_their_record_and_only_schema_1_by_the_sentence() {
        let lite = |y: &str| -> Reason { serde_norway::from_str(y).unwrap() };
        // (reason as stored, key, link failure, capacity failure)
        let cases = [
            (
                "'seq-write: 3.1 MiB/s < minimum 5 MiB/s [thresholds[1] (class usb)]'",
                "seq-write: N MiB/s < minimum 5 MiB/s [thresholds[1] (class usb)]",
                false,
                false,
            ),
            (
                "'link: port 1-2 linked at 12M [r]'",
                "link: port 1-2 linked at 12M [r]",
                true,
                false,
            ),
            (
                "'capacity: 8G is below the 16G required [r]'",
                "capacity: 8G is below the 16G required [r]",
                false,
                true,
            ),
            (
                "{kind: threshold, rule: 'thresholds[1]', workload: seq-write, metric: mib_per_s, \
                 measured: 3.1, limit: 5.0, unit: MiB/s, device: sda, text: anything}",
                "threshold [thresholds[1]] seq-write mib_per_s limit 5 MiB/s",
                false,
                false,
            ),
            (
                "{kind: link, rule: 'thresholds[3]', metric: link_mbps, measured: 12.0, \
                 limit: 480.0, unit: Mbit/s, port: 'usb:1-2', text: 'reworded'}",
                "link [thresholds[3]] link_mbps limit 480 Mbit/s usb:1-2",
                true,
                false,
            ),
            (
                "{kind: threshold, rule: 'thresholds[0]', metric: capacity_bytes, limit: 1.0e9, \
                 unit: bytes, text: x}",
                "threshold [thresholds[0]] capacity_bytes limit 1000000000 bytes",
                false,
                true,
            ),
            (
                "{kind: kernel_event, workload: seq-read, event: io_error, port: 'usb:4-3', \
                 text: 'seq-read: kernel: I/O error, dev sdh, sector 4096'}",
                "kernel_event seq-read usb:4-3 io_error",
                false,
                false,
            ),
            // A kind a newer build adds still counts, by its fields.
            ("{kind: brand_new, text: t}", "brand_new", false, false),
            // A schema 1 sentence read back through the typed report.
            (
                "{kind: unclassified, text: 'link: x'}",
                "link: x",
                true,
                false,
            ),
        ];
        for (stored, key, link, capacity) in cases {
            let r = FleetReason::from_wire(lite(stored));
            assert_eq!(r.key, key, "{stored}");
            assert_eq!((r.link, r.capacity), (link, capacity), "{stored}");
        }
    }

    #[test]
    fn reason_kind_hides_measured_figures_and_keeps_limits() {
        assert_eq!(
            reason_kind("seq-write: 3.1 MiB/s < minimum 5 MiB/s [thresholds[1] (class usb)]"),
            "seq-write: N MiB/s < minimum 5 MiB/s [thresholds[1] (class usb)]"
        );
        assert_eq!(
            reason_kind("rand-read: 240 IOPS < minimum 500 IOPS [r]"),
            "rand-read: N IOPS < minimum 500 IOPS [r]"
        );
        assert_eq!(
            reason_kind("rand-read: p99 latency 31.5 ms > maximum 20 ms [r]"),
            "rand-read: p99 latency N ms > maximum 20 ms [r]"
        );
        let link = "link: port 1-2 linked at 12M (full speed) but must give at least 480M";
        assert_eq!(reason_kind(link), link);
    }
}
