//! Owns the fleet's lenient view of a report: only the fields the fleet aggregates, unknown
//! fields ignored (so reports from newer builds with extra fields still load), enums kept as
//! text (so a new workload or status name does not make a whole report unreadable), and the
//! `schema_version` checked with a per-file error.

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::metric::{self, Metric};
use crate::report::decode::{self, is_json, parse, Probe};

use super::FleetError;
use crate::report::schema::SCHEMA_VERSION;

/// The parts of a report the fleet reads. `verdict` is required at both levels: it is written
/// last, so a report cut short (a full disk, a power cut during the write) fails to load
/// instead of loading with devices silently missing.
#[derive(Debug, Deserialize)]
pub struct ReportLite {
    pub schema_version: u32,
    /// A unique id per report (a UUID since schema 2; 16 hex digits or absent in schema 1);
    /// when present it is the report's identity for deduplication.
    #[serde(default)]
    pub report_id: Option<String>,
    #[serde(default)]
    pub tool: ToolLite,
    pub started_at: DateTime<Utc>,
    /// Text, as written: the collector checks it and stores it; the fleet does not read it.
    #[serde(default)]
    pub finished_at: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub unit: UnitLite,
    #[serde(default)]
    pub config: ConfigLite,
    #[serde(
        default,
        deserialize_with = "crate::report::decode::capped::<_, _, { crate::report::decode::MAX_DEVICES }>"
    )]
    pub devices: Vec<DeviceLite>,
    pub verdict: VerdictLite,
}

#[derive(Debug, Default, Deserialize)]
pub struct ToolLite {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub version: String,
}

#[derive(Debug, Default, Deserialize)]
pub struct UnitLite {
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub machine_id: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub serial: Option<String>,
    #[serde(default)]
    pub image: Option<ImageLite>,
}

/// The image the unit ran (os-release), what names a build.
#[derive(Debug, Default, Deserialize)]
pub struct ImageLite {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub version_id: Option<String>,
    #[serde(default)]
    pub build_id: Option<String>,
    #[serde(default)]
    pub image_version: Option<String>,
}

impl ImageLite {
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

#[derive(Debug, Default, Deserialize)]
pub struct ConfigLite {
    #[serde(default)]
    pub thresholds: Vec<ThresholdLite>,
    #[serde(default)]
    pub station: Option<String>,
    /// `factory` or `field` (a unit's later boots); absent before reports said it.
    #[serde(default)]
    pub phase: Option<String>,
}

/// A threshold the factory run applied, for drawing it on the fleet's charts.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct ThresholdLite {
    #[serde(default)]
    pub select: SelectLite,
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

impl ThresholdLite {
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
pub struct SelectLite {
    #[serde(default)]
    pub all_non_system: bool,
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub port: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct VerdictLite {
    #[serde(default)]
    pub pass: bool,
    #[serde(default)]
    pub reasons: Vec<ReasonLite>,
    #[serde(default)]
    pub retests: u32,
    #[serde(default)]
    pub marginal: bool,
}

/// A verdict reason: a sentence (schema 1) or a record (schema 2), whose kind and fields
/// the fleet ranks by; the kind stays text, so a kind a newer build adds still loads.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ReasonLite {
    Text(String),
    Record(RecordLite),
}

#[derive(Debug, Clone, Deserialize)]
pub struct RecordLite {
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
    #[serde(default)]
    pub text: String,
}

#[derive(Debug, Deserialize)]
pub struct DeviceLite {
    pub name: String,
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub disk: DiskLite,
    #[serde(
        default,
        deserialize_with = "crate::report::decode::capped::<_, _, { crate::report::decode::MAX_CELLS }>"
    )]
    pub cells: Vec<CellLite>,
    pub verdict: VerdictLite,
}

#[derive(Debug, Default, Deserialize)]
pub struct DiskLite {
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
    pub usb: Option<UsbLite>,
    /// The health summary, where the unit's build reads it.
    #[serde(default)]
    pub health: Option<HealthLite>,
    /// An eMMC's or SD card's CID fields: who made the part and its serial.
    #[serde(default)]
    pub mmc: Option<MmcLite>,
}

#[derive(Debug, Default, Deserialize)]
pub struct MmcLite {
    #[serde(default)]
    pub manfid: Option<String>,
    #[serde(default)]
    pub oemid: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub serial: Option<String>,
}

/// The health summary figures the fleet keeps (wear and error counts).
#[derive(Debug, Default, Deserialize)]
pub struct HealthLite {
    #[serde(default)]
    pub life_time_used_percent_max: Option<f64>,
    #[serde(default)]
    pub media_errors: Option<f64>,
    #[serde(default)]
    pub udma_crc_errors: Option<f64>,
    #[serde(default)]
    pub pre_eol: Option<String>,
    #[serde(default)]
    pub emmc: Option<EmmcLite>,
    #[serde(default)]
    pub nvme: Option<NvmeLite>,
}

/// An eMMC's life time estimates (a 10 % band each: the band's top is the figure kept).
#[derive(Debug, Default, Deserialize)]
pub struct EmmcLite {
    #[serde(default)]
    pub life_time_a: Option<LifeLite>,
    #[serde(default)]
    pub life_time_b: Option<LifeLite>,
}

#[derive(Debug, Default, Deserialize)]
pub struct LifeLite {
    #[serde(default)]
    pub used_percent_max: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
pub struct NvmeLite {
    #[serde(default)]
    pub percent_used: Option<f64>,
    #[serde(default)]
    pub data_written_bytes: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
pub struct UsbLite {
    #[serde(default)]
    pub port_path: String,
    #[serde(default)]
    pub speed_mbps: Option<f64>,
}

#[derive(Debug, Deserialize)]
pub struct CellLite {
    pub workload: String,
    pub status: String,
    #[serde(default)]
    pub result: Option<ResultLite>,
}

#[derive(Debug, Deserialize)]
pub struct ResultLite {
    pub mib_per_s: f64,
    pub iops: f64,
    pub all: OpLite,
    #[serde(default)]
    pub curve: Option<CurveLite>,
    #[serde(default)]
    pub precision: Option<PrecisionLite>,
}

impl ResultLite {
    /// The rate and IOPS a limit judges (as `BenchResult::judged`): after a drop (a write
    /// cache that filled) the sustained ones, else the steady ones after the warm-up.
    pub fn judged(&self) -> (f64, f64) {
        let p = self.precision.as_ref();
        crate::stats::judged_figures(
            self.mib_per_s,
            self.iops,
            p.and_then(|p| Some(p.drop.as_ref()?.sustained_mib_per_s)),
            p.and_then(|p| p.steady_mib_per_s),
        )
    }
}

#[derive(Debug, Deserialize)]
pub struct PrecisionLite {
    #[serde(default)]
    pub drop: Option<DropLite>,
    #[serde(default)]
    pub steady_mib_per_s: Option<f64>,
}

#[derive(Debug, Deserialize)]
pub struct DropLite {
    pub sustained_mib_per_s: f64,
}

#[derive(Debug, Deserialize)]
pub struct OpLite {
    #[serde(default)]
    pub ios: u64,
    pub latency: LatencyLite,
}

#[derive(Debug, Deserialize)]
pub struct LatencyLite {
    pub p99_ns: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct CurveLite {
    #[serde(default)]
    pub samples: Vec<SampleLite>,
    #[serde(default)]
    pub knee: Option<KneeLite>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
pub struct SampleLite {
    pub t_s: f64,
    pub mib_per_s: f64,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
pub struct KneeLite {
    pub t_s: f64,
    pub before_mib_per_s: f64,
    pub after_mib_per_s: f64,
}

/// Keys no field of [`ReportLite`] (or [`Probe`]) reads, at any depth: per-test parameters,
/// targets, per-direction and CPU figures, placements, partitions, config sections and the
/// identity details, which make up four fifths of a report's lines. A test checks that
/// pruning leaves every record the same.
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
            | b"verify"
            | b"missing"
            | b"hubs"
            | b"root_hub"
            | b"tests"
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
            | b"interrupted_by"
            | b"inventory_backend"
            | b"missing_devices"
            | b"features"
            | b"cache_drop"
            | b"flush_ns"
            | b"sata"
            | b"mmc"
    )
}

/// Drops the block-style YAML subtrees and lines of [`unread`] keys before parsing: libyaml's
/// event parser, not serde, is where the time goes, and these lines are about four fifths of
/// a report. A key line `<indent>key:` owns every following line indented
/// deeper, plus `- ` items at its own indent (serde_norway writes a sequence under a key at
/// the key's indent). Blank and comment lines inside a dropped subtree go with it. Only the
/// bytes the reader ignores anyway are removed, so the result has the same meaning for it;
/// anything unusual is caught by the caller, which parses the original on failure.
pub fn prune_yaml(text: &[u8]) -> Vec<u8> {
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

/// Parses one report's bytes; `path` names it in errors and picks YAML or JSON.
pub fn parse_report(path: &Path, bytes: &[u8]) -> Result<ReportLite, FleetError> {
    let json = is_json(path, bytes);
    decode::check(json, bytes, &decode::LIMITS).map_err(|e| FleetError::Malformed {
        path: path.to_path_buf(),
        msg: e.to_string(),
    })?;
    if !json {
        // The fast path; any failure falls through to the full parse, whose error is the
        // one reported.
        if let Ok(r) = parse::<ReportLite>(false, &prune_yaml(bytes)) {
            if r.schema_version == SCHEMA_VERSION {
                return Ok(r);
            }
        }
    }
    let too_new = |v: u32| FleetError::SchemaTooNew {
        path: path.to_path_buf(),
        version: v,
        supported: SCHEMA_VERSION,
    };
    match parse::<ReportLite>(json, bytes) {
        Ok(r) if r.schema_version > SCHEMA_VERSION => Err(too_new(r.schema_version)),
        Ok(r) if r.schema_version == 0 => Err(FleetError::Malformed {
            path: path.to_path_buf(),
            msg: "schema_version 0 does not exist (reports start at 1)".into(),
        }),
        Ok(r) => Ok(r),
        Err(msg) => {
            // A newer schema may have changed a field this reader needs: say so rather
            // than report the field.
            if let Ok(Probe {
                schema_version: Some(v),
            }) = parse::<Probe>(json, bytes)
            {
                if v > SCHEMA_VERSION {
                    return Err(too_new(v));
                }
            }
            Err(FleetError::Malformed {
                path: path.to_path_buf(),
                msg,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prune_drops_unread_subtrees_and_keeps_the_rest() {
        let text = b"a:\n  params:\n    x: 1\n\n    y: [1,\n      2]\n  keep: 2\n  tests:\n  - workload: x\n  - y\n  mounts: []\nverdict:\n  pass: true\n";
        let out = String::from_utf8(prune_yaml(text)).unwrap();
        assert_eq!(out, "a:\n  keep: 2\nverdict:\n  pass: true\n");
    }

    #[test]
    fn newer_schema_is_named_in_the_error() {
        let p = Path::new("r.json");
        let e = parse_report(p, br#"{"schema_version": 7, "devices": 3}"#).unwrap_err();
        assert!(e.to_string().contains("schema_version 7 is newer"), "{e}");
        let e = parse_report(p, br#"{"schema_version": 1}"#).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
    }
}
