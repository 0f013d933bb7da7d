//! Owns what the collector accepts: the body, within `usbperf_report::decode`'s limits
//! (checked before any parser runs), must decode as a usbperf report of a schema version the
//! unit's build writes, through the one report reader every reader uses
//! (`usbperf_report::wire`, unknown fields ignored, so later additions decode here
//! unchanged; the version number alone decides what is refused).
//! That one decoding gives both the indexed columns (a `Record`) and the fleet record stored
//! beside them; the raw bytes are stored as sent.

use std::path::Path;

use chrono::{DateTime, FixedOffset};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use usbperf_fleet::parse_report;
use usbperf_fleet::records::{extract_bytes, extract_report, Extracted};
use usbperf_fleet::FleetError;
use usbperf_report::decode::{self, Limits};
use usbperf_report::metric;
use usbperf_report::wire;

/// The schema versions this collector stores.
pub const SCHEMA_VERSIONS: std::ops::RangeInclusive<u32> = wire::READABLE;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum IngestError {
    #[error("not a usbperf report: {0} (send the YAML or JSON file usbperf-matrix run wrote)")]
    Malformed(String),
    #[error(
        "schema_version {0} is not one this collector stores ({min}..={max}): upgrade \
         usbperf-collect",
        min = SCHEMA_VERSIONS.start(),
        max = SCHEMA_VERSIONS.end()
    )]
    Version(u32),
    #[error("the X-Usbperf-Report-Id header says {header:?} but the report says {body:?}")]
    IdMismatch { header: String, body: String },
    /// A field holds what no unit measures or writes: a time outside the range a report may
    /// carry, a figure that is negative, infinite or past its metric's ceiling (422).
    #[error("{0} (the report is kept on the unit, in its spool's rejected/)")]
    Implausible(String),
    /// Refused by a limit before any parser ran.
    #[error("refused before decoding: {0} (send the YAML or JSON file usbperf-matrix run wrote)")]
    Limit(usbperf_report::decode::Refusal),
}

/// The lowercase hex SHA-256 of a body, as stored in `reports.body_sha256`: the unit's own
/// function, which names its spool entries and checks acknowledgements by the same hash.
pub use usbperf_report::seal::sha256_hex;

/// The unit name of a report that names none (no serial, machine id or hostname): no key is
/// enrolled under it, as it is no one's.
pub const NO_UNIT: &str = "unknown unit";

/// The indexed columns of one report.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub report_id: String,
    /// The SHA-256 of the body as sent (lowercase hex): a re-send with other bytes under the
    /// same id is a conflict, never a duplicate.
    pub sha256: String,
    pub schema_version: u32,
    /// The unit's serial, else its machine-id, else its hostname (as `fleet` names units).
    pub unit: String,
    /// The unit's device-tree / DMI model.
    pub board: Option<String>,
    pub hostname: Option<String>,
    /// RFC 3339, as in the report.
    pub started_at: String,
    pub finished_at: Option<String>,
    pub status: String,
    pub pass: bool,
    pub exit_code: Option<i32>,
    /// `yaml` or `json`: how `raw` is encoded.
    pub format: &'static str,
    pub devices: Vec<DeviceRow>,
    /// What the fleet keeps of the report (table `fleet_records`).
    pub fleet: FleetColumns,
    /// The name of the token that stored it (its line of the token file), set by the server.
    pub token: Option<String>,
    /// The unit key (hex) whose signature of the body the collector verified; `None` for an
    /// unsigned report.
    pub signer_key: Option<String>,
    /// The unit's key was checked against the factory's list (`--unit-keys`): the store
    /// neither enrolls it nor compares it with an enrolled one (the list is the authority,
    /// and a unit the factory gave a new key is not refused for its old one).
    pub key_listed: bool,
}

/// The report as the fleet reads it, extracted once at ingest so `usbperf-collect fleet`
/// never parses raw documents: 100,000 of them take minutes, their records a second.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetColumns {
    /// `<report_id>.<format>`: the name the report's export has, which orders the fleet's
    /// records and names them as a directory run names its files.
    pub file: String,
    /// `started_at` in nanoseconds since 1970 (UTC), for `--since` on an indexed integer
    /// (RFC 3339 text with offsets and fractions does not sort as time).
    pub started_ns: i64,
    /// `record` (`record`: the record, see [`crate::record`]; body empty), `unfinished`
    /// (body: the status) or `error` (body: why the fleet's reader refused what ingest
    /// accepted).
    pub kind: &'static str,
    pub body: String,
    /// The encoded record of kind `record`, else empty (stored as NULL).
    pub record: Vec<u8>,
}

/// An RFC 3339 time in ns since 1970; 0 when it is none (ingest refused those already).
pub fn rfc3339_ns(t: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(t)
        .ok()
        .and_then(|t| t.timestamp_nanos_opt())
        .unwrap_or(0)
}

/// Bumped when the fleet record's shape, encoding or extraction changes: rows of an older
/// version are extracted again from `raw` on the next fleet query. 1: the record as JSON in
/// `body`; 2: the binary record in `record` ([`crate::record`]); 3: with the station, and
/// each device's retests and marginal flag; 4: with the image build; 5: with the phase and
/// each flash part's wear sample; 6: a report without an id is known by its figures too; 7:
/// with the key whose signature of the report the collector verified.
pub const FLEET_RECORD_VERSION: i64 = 7;

/// Extracts the fleet's columns from a report's bytes (also used to back-fill reports
/// stored before the fleet table existed).
/// `started` is the report's start in ns, for the rows without a record; `signer` the key
/// whose signature of `body` was verified when it was received.
pub fn fleet_columns(
    report_id: &str,
    format: &str,
    started: i64,
    body: &[u8],
    signer: Option<&str>,
) -> FleetColumns {
    let file = format!("{report_id}.{format}");
    let extracted = extract_bytes(Path::new(&file), body);
    fleet_columns_of(file, started, extracted, signer)
}

/// The columns of what the fleet's reader made of a report (`started`: its start in ns, for
/// the rows without a record).
fn fleet_columns_of(
    file: String,
    started: i64,
    extracted: Result<Extracted, FleetError>,
    signer: Option<&str>,
) -> FleetColumns {
    let mut record = Vec::new();
    let (kind, body, started_ns) = match extracted {
        Ok(Extracted::Record(mut r)) => {
            let ns = r.started_at.timestamp_nanos_opt().unwrap_or(started);
            r.signer = signer.map(str::to_owned);
            record = crate::record::encode(&r);
            ("record", String::new(), ns)
        }
        Ok(Extracted::Unfinished { status }) => ("unfinished", status, started),
        Err(FleetError::Malformed { msg, .. }) => ("error", msg, started),
        Err(e) => ("error", e.to_string(), started),
    };
    FleetColumns {
        file,
        started_ns,
        kind,
        body,
        record,
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeviceRow {
    pub name: String,
    pub class: String,
    /// `usb:1-2` for a USB device, else the kernel name (as `fleet` groups ports).
    pub port: String,
    pub model: Option<String>,
    pub serial: Option<String>,
    pub pass: bool,
    pub metrics: Vec<MetricRow>,
}

/// One cell's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricRow {
    pub workload: String,
    pub status: String,
    pub mib_per_s: Option<f64>,
    pub iops: Option<f64>,
    pub p99_ns: Option<i64>,
}

/// The start time as written, to say why a report whose time is no time does not decode.
#[derive(Deserialize)]
struct TimeProbe {
    started_at: String,
}

/// A figure no device measures: negative, infinite, NaN, or beyond the metric's ceiling (the
/// same ceilings the fleet refuses figures at).
fn plausible(v: f64, m: &metric::Metric) -> bool {
    v.is_finite() && (0.0..=m.max).contains(&v)
}

/// The first implausible figure of a report, named by its place.
fn implausible(devices: &[wire::Device]) -> Option<String> {
    for (i, d) in devices.iter().enumerate() {
        for (j, c) in d.cells.iter().enumerate() {
            let Some(r) = &c.result else { continue };
            for (field, v, m) in [
                ("mib_per_s", r.mib_per_s, &metric::MIB_PER_S),
                ("iops", r.iops, &metric::IOPS),
                (
                    "all.latency.p99_ns",
                    r.all.latency.p99_ns / 1e6,
                    &metric::P99_LATENCY_MS,
                ),
            ] {
                if !plausible(v, m) {
                    return Some(format!(
                        "devices[{i}].cells[{j}].result.{field} is {v}: no device measures \
                         that (from 0 to {} {})",
                        m.max, m.unit
                    ));
                }
            }
        }
    }
    None
}

fn clean(s: Option<String>) -> Option<String> {
    s.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// JSON when the content type or the first non-blank byte says so; YAML otherwise.
pub fn is_json(content_type: Option<&str>, body: &[u8]) -> bool {
    match content_type.map(|c| c.split(';').next().unwrap_or("").trim()) {
        Some("application/json") => true,
        Some("application/yaml") | Some("application/x-yaml") | Some("text/yaml") => false,
        _ => body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{'),
    }
}

/// A report id usable as a key: what units write (16 hex digits), or any short token of
/// letters, digits, `-` and `_`.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The earliest and latest times a report may carry: a unit without a clock starts at
/// 1970; after 2262 the time has no nanosecond count (`--since` compares those).
fn valid_time(t: &str) -> Result<DateTime<FixedOffset>, TimeError> {
    let parsed = DateTime::parse_from_rfc3339(t.trim())
        .map_err(|e| TimeError::Shape(format!("{t:?} is not an RFC 3339 time ({e})")))?;
    match parsed.timestamp_nanos_opt() {
        Some(ns) if ns >= 0 => Ok(parsed),
        _ => Err(TimeError::Range(format!(
            "{t:?} is outside 1970-01-01 .. 2262-04-11, the times a report may carry"
        ))),
    }
}

enum TimeError {
    Shape(String),
    Range(String),
}

/// The text columns cannot hold NUL (PostgreSQL refuses it; a JSON `\u0000` escape gets
/// past the byte check).
fn no_nul<'a>(what: &str, s: impl IntoIterator<Item = &'a str>) -> Result<(), IngestError> {
    match s.into_iter().find(|s| s.contains('\0')) {
        Some(_) => Err(IngestError::Malformed(format!(
            "{what} holds a NUL character: a report's text has none"
        ))),
        None => Ok(()),
    }
}

/// The longest name a report's unit or device fields may carry, in bytes: a serial, model,
/// hostname or port is tens of bytes; these are indexed, and PostgreSQL cannot index a row
/// of more than about 2,700 bytes (a longer one would be refused forever, as 503).
pub const MAX_NAME_BYTES: usize = 256;

/// How far past the collector's clock a report may start: a unit's clock a little ahead is
/// a unit's clock; a report from next year would stretch the fleet's time range and sort
/// after every honest report.
pub const MAX_FUTURE: chrono::Duration = chrono::Duration::days(1);

/// Refuses a name longer than [`MAX_NAME_BYTES`], naming the field.
fn short<'a>(what: &str, s: impl IntoIterator<Item = &'a str>) -> Result<(), IngestError> {
    match s.into_iter().find(|s| s.len() > MAX_NAME_BYTES) {
        Some(v) => Err(IngestError::Implausible(format!(
            "{what} is {} bytes long, more than the {MAX_NAME_BYTES} a name may have",
            v.len()
        ))),
        None => Ok(()),
    }
}

/// Decodes and checks a body within `limits`, once: the fleet's reader gives both the
/// columns and the fleet record. `header_id` is the `X-Usbperf-Report-Id` the unit sent.
pub fn parse(
    body: &[u8],
    json: bool,
    header_id: Option<&str>,
    signer: Option<&str>,
    limits: &Limits,
) -> Result<Record, IngestError> {
    decode::check(json, body, limits).map_err(IngestError::Limit)?;
    let named = Path::new(if json { "report.json" } else { "report.yaml" });
    let lite: wire::Report = match parse_report(named, body) {
        Ok(l) => l,
        Err(FleetError::SchemaTooNew { version, .. }) => return Err(IngestError::Version(version)),
        Err(e) => {
            // A wrong version, or a start that is no time, is said as such, not as the
            // decoder's field error (probes of bytes already checked, on this path only).
            if let Ok(decode::Probe {
                schema_version: Some(v),
            }) = decode::parse(json, body)
            {
                if !SCHEMA_VERSIONS.contains(&v) {
                    return Err(IngestError::Version(v));
                }
            }
            if let Ok(p) = decode::parse::<TimeProbe>(json, body) {
                if let Err(TimeError::Shape(why)) = valid_time(&p.started_at) {
                    return Err(IngestError::Malformed(format!("started_at {why}")));
                }
            }
            return Err(IngestError::Malformed(match e {
                FleetError::Malformed { msg, .. } => msg,
                e => e.to_string(),
            }));
        }
    };
    if !SCHEMA_VERSIONS.contains(&lite.schema_version) {
        return Err(IngestError::Version(lite.schema_version));
    }
    if lite.tool.name != "usbperf-matrix" {
        return Err(IngestError::Malformed(format!(
            "tool.name is {:?}, not usbperf-matrix",
            lite.tool.name
        )));
    }
    let started_ns = match lite.started_at.timestamp_nanos_opt() {
        Some(ns) if ns >= 0 => ns,
        _ => {
            return Err(IngestError::Implausible(format!(
                "started_at {} is outside 1970-01-01 .. 2262-04-11, the times a report may \
                 carry",
                lite.started_at.to_rfc3339()
            )))
        }
    };
    let now = chrono::Utc::now();
    if lite.started_at > now + MAX_FUTURE {
        return Err(IngestError::Implausible(format!(
            "started_at {} is more than a day after the collector's clock ({}): set the unit's \
             clock (NTP or its RTC) and run again",
            lite.started_at.to_rfc3339(),
            now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )));
    }
    let started_at = lite
        .started_at
        .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    if let Some(t) = &lite.finished_at {
        valid_time(t).map_err(|e| match e {
            TimeError::Shape(e) => IngestError::Malformed(format!("finished_at {e}")),
            TimeError::Range(e) => IngestError::Implausible(format!("finished_at {e}")),
        })?;
    }
    // Reports before report_id existed get one from their bytes: a re-send of the same
    // file is the same report.
    let report_id = match clean(lite.report_id.clone()) {
        Some(id) => id,
        None => {
            let digest = Sha256::digest(body);
            format!("sha256-{}", usbperf_report::seal::hex(&digest[..16]))
        }
    };
    if !valid_id(&report_id) {
        return Err(IngestError::Malformed(format!(
            "report_id {report_id:?} is not 1..128 letters, digits, - or _"
        )));
    }
    if let Some(h) = header_id.map(str::trim).filter(|h| !h.is_empty()) {
        if h != report_id {
            return Err(IngestError::IdMismatch {
                header: h.to_string(),
                body: report_id,
            });
        }
    }
    if let Some(why) = implausible(&lite.devices) {
        return Err(IngestError::Implausible(why));
    }
    let u = &lite.unit;
    no_nul(
        "the unit",
        [&u.hostname, &u.machine_id, &u.model, &u.serial]
            .into_iter()
            .flatten()
            .map(String::as_str),
    )?;
    for (what, v) in [
        ("unit.hostname", &u.hostname),
        ("unit.machine_id", &u.machine_id),
        ("unit.model", &u.model),
        ("unit.serial", &u.serial),
    ] {
        short(what, v.as_deref())?;
    }
    no_nul("status", lite.status.as_deref())?;
    for d in &lite.devices {
        let disk = &d.disk;
        short(
            &format!(
                "device {:?}: its name, class, vendor, model, serial or port",
                d.name.chars().take(32).collect::<String>()
            ),
            [&disk.class, &disk.vendor, &disk.model, &disk.serial]
                .into_iter()
                .flatten()
                .map(String::as_str)
                .chain([d.name.as_str()])
                .chain(disk.usb.iter().map(|u| u.port_path.as_str())),
        )?;
        no_nul(
            "a device",
            [&disk.class, &disk.vendor, &disk.model, &disk.serial]
                .into_iter()
                .flatten()
                .map(String::as_str)
                .chain([d.name.as_str()])
                .chain(disk.usb.iter().map(|u| u.port_path.as_str()))
                .chain(
                    d.cells
                        .iter()
                        .flat_map(|c| [c.workload.as_str(), c.status.as_str()]),
                ),
        )?;
    }
    let hostname = clean(u.hostname.clone());
    let unit = usbperf_report::wire::unit_name(
        u.serial.as_deref(),
        u.machine_id.as_deref(),
        u.hostname.as_deref(),
    )
    .unwrap_or_else(|| NO_UNIT.into());
    let devices = lite
        .devices
        .iter()
        .map(|d| {
            let port = match &d.disk.usb {
                Some(u) if !u.port_path.is_empty() => format!("usb:{}", u.port_path),
                _ => d.name.clone(),
            };
            let model = match (clean(d.disk.vendor.clone()), clean(d.disk.model.clone())) {
                (Some(v), Some(m)) if !m.starts_with(&v) => Some(format!("{v} {m}")),
                (_, Some(m)) => Some(m),
                (v, None) => v,
            };
            DeviceRow {
                class: clean(d.disk.class.clone()).unwrap_or_else(|| "other".into()),
                port,
                model,
                serial: clean(d.disk.serial.clone()),
                pass: d.verdict.pass,
                metrics: d
                    .cells
                    .iter()
                    .map(|c| MetricRow {
                        workload: c.workload.clone(),
                        status: c.status.clone(),
                        mib_per_s: c.result.as_ref().map(|r| r.mib_per_s),
                        iops: c.result.as_ref().map(|r| r.iops),
                        // Checked plausible above: at most an hour, in range of an i64.
                        p99_ns: c.result.as_ref().map(|r| r.all.latency.p99_ns as i64),
                    })
                    .collect(),
                name: d.name.clone(),
            }
        })
        .collect();
    let format = if json { "json" } else { "yaml" };
    let board = clean(u.model.clone());
    let status = lite.status.clone().unwrap_or_else(|| "complete".into());
    let (schema_version, pass, exit_code, finished_at) = (
        lite.schema_version,
        lite.verdict.pass,
        lite.exit_code,
        lite.finished_at.clone(),
    );
    let file = format!("{report_id}.{format}");
    let extracted = extract_report(Path::new(&file), lite, body);
    let fleet = fleet_columns_of(file, started_ns, Ok(extracted), signer);
    Ok(Record {
        report_id,
        sha256: sha256_hex(body),
        schema_version,
        unit,
        board,
        hostname,
        started_at,
        finished_at,
        status,
        pass,
        exit_code,
        format,
        devices,
        fleet,
        token: None,
        signer_key: None,
        key_listed: false,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const V1: &str = "schema_version: 1\nreport_id: fae37a7d3302b159\ntool: {name: usbperf-matrix, version: 0.1.0, features: []}\nstarted_at: 2026-11-30T10:23:45.912Z\nfinished_at: 2026-11-30T10:23:47.801Z\nstatus: complete\nexit_code: 0\nunit: {hostname: vm, machine_id: 3d1219c7, model: Toradex Apalis, cpu_count: 2, memory_bytes: 1}\nconfig: {sources: [builtin:quick]}\ninventory_backend: sysfs\ndevices:\n- name: sda\n  disk: {name: sda, class: usb, vendor: Kingston, model: DataTraveler 3.0, serial: ABC, usb: {port_path: 1-2}}\n  cells:\n  - workload: seq-write\n    status: passed\n    result: {mib_per_s: 14.5, iops: 14.5, all: {latency: {p99_ns: 647167}}}\n  - {workload: verify, status: skipped}\n  verdict: {pass: true}\nverdict: {pass: true}\n";

    #[test]
    fn a_v1_report_becomes_its_columns() {
        let r = parse(
            V1.as_bytes(),
            false,
            Some("fae37a7d3302b159"),
            None,
            &decode::LIMITS,
        )
        .unwrap();
        assert_eq!(r.report_id, "fae37a7d3302b159");
        assert_eq!(r.unit, "3d1219c7");
        assert_eq!(r.board.as_deref(), Some("Toradex Apalis"));
        assert!(r.pass);
        let d = &r.devices[0];
        assert_eq!((d.class.as_str(), d.port.as_str()), ("usb", "usb:1-2"));
        assert_eq!(d.model.as_deref(), Some("Kingston DataTraveler 3.0"));
        assert_eq!(d.metrics[0].p99_ns, Some(647167));
        assert_eq!(d.metrics[1].mib_per_s, None);
    }

    #[test]
    fn figures_no_device_measures_are_refused_naming_the_field() {
        for (fig, ok) in [
            ("14.5", true),
            ("0", true),
            ("1e308", false),
            ("-5e10", false),
        ] {
            let body = V1.replace("mib_per_s: 14.5", &format!("mib_per_s: {fig}"));
            match parse(body.as_bytes(), false, None, None, &decode::LIMITS) {
                Ok(r) => assert!(ok, "{fig} stored as {:?}", r.devices[0].metrics[0]),
                Err(e) => {
                    assert!(!ok, "{fig}: {e}");
                    assert!(matches!(e, IngestError::Implausible(_)), "{fig}: {e}");
                    assert!(
                        e.to_string()
                            .contains("devices[0].cells[0].result.mib_per_s"),
                        "{e}"
                    );
                }
            }
        }
        // YAML's infinities and NaN are refused by the walk before any value is built.
        for fig in [".nan", ".inf", "-.Inf"] {
            let body = V1.replace("mib_per_s: 14.5", &format!("mib_per_s: {fig}"));
            let e = parse(body.as_bytes(), false, None, None, &decode::LIMITS).unwrap_err();
            assert!(matches!(e, IngestError::Limit(_)), "{fig}: {e}");
            assert!(e.to_string().contains("not finite"), "{e}");
        }
        let late = V1.replace("2026-11-30T10:23:45.912Z", "9999-01-01T00:00:00Z");
        let e = parse(late.as_bytes(), false, None, None, &decode::LIMITS).unwrap_err();
        assert!(matches!(e, IngestError::Implausible(_)), "{e}");
    }

    #[test]
    fn bodies_are_refused_as_the_table_says() {
        let v2 = V1.replace("schema_version: 1", "schema_version: 2");
        let v99 = V1.replace("schema_version: 1", "schema_version: 99");
        let truncated = &V1[..V1.len() / 2];
        let other_tool = V1.replace("name: usbperf-matrix", "name: fio");
        let bad_time = V1.replace("2026-11-30T10:23:45.912Z", "yesterday");
        let bad_id = V1.replace("fae37a7d3302b159", "'../x'");
        let bad_month = V1.replace("2026-11-30T10:23:45.912Z", "2026-99-99T99:99:99Z");
        let year_zero = V1.replace("2026-11-30T10:23:45.912Z", "0000-01-01T00:00:00Z");
        let year_9999 = V1.replace("2026-11-30T10:23:45.912Z", "9999-01-01T00:00:00Z");
        let nul_escape = V1.replace("hostname: vm", "hostname: \"v\\0m\"");
        let alias = V1.replace(
            "devices:\n- name: sda",
            "spare: &d {a: 1}\ndevices:\n- name: sda",
        );
        let table: Vec<(&str, Option<&str>, Result<(), &str>)> = vec![
            (&v2, None, Ok(())),
            (&v99, None, Err("schema_version 99")),
            ("schema_version: 99\n", None, Err("schema_version 99")),
            (truncated, None, Err("not a usbperf report")),
            ("", None, Err("not a usbperf report")),
            (&other_tool, None, Err("tool.name")),
            (&bad_time, None, Err("RFC 3339")),
            (&bad_id, None, Err("report_id")),
            (&bad_month, None, Err("not an RFC 3339 time")),
            (&year_zero, None, Err("outside 1970-01-01")),
            (&year_9999, None, Err("outside 1970-01-01")),
            (&nul_escape, None, Err("NUL")),
            (&alias, None, Err("anchor")),
            (V1, Some("0000000000000000"), Err("header says")),
        ];
        for (body, header, want) in table {
            let got = parse(body.as_bytes(), false, header, None, &decode::LIMITS)
                .map(|_| ())
                .map_err(|e| e.to_string());
            match (want, got) {
                (Ok(()), Ok(())) => {}
                (Err(w), Err(g)) => assert!(g.contains(w), "{body:.40?}: {g}"),
                (w, g) => panic!("{body:.40?}: want {w:?} got {g:?}"),
            }
        }
    }

    #[test]
    fn a_report_without_id_is_keyed_by_its_bytes() {
        let no_id = V1.replace("report_id: fae37a7d3302b159\n", "");
        let a = parse(no_id.as_bytes(), false, None, None, &decode::LIMITS).unwrap();
        let b = parse(no_id.as_bytes(), false, None, None, &decode::LIMITS).unwrap();
        assert!(a.report_id.starts_with("sha256-"));
        assert_eq!(a.report_id, b.report_id);
    }
}
