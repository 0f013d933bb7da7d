//! Owns the factory-run configuration: the YAML schema (unknown keys are errors), built-in and
//! board profiles, layering (profile < config file < flags) into one resolved `Config`, and
//! errors that name the file, line and column.

pub mod upload;

pub use upload::UploadConfig;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use crate::discover::DeviceClass;
use crate::engine::EngineRequest;
use crate::metric::{self, Metric};
use crate::units;
use crate::workload::verify::VerifyMode;
use crate::workload::{
    CacheMode, Overrides, WorkloadKind, WorkloadParams, MAX_JOBS, MAX_QUEUE_DEPTH,
};

/// Built-in profiles: the name `profile:` takes, and the YAML shipped in the binary.
/// How the run orders its devices.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ScheduleMode {
    /// One device after another, one cell at a time.
    #[default]
    Serial,
    /// Lanes at the same time; CPU-bound cells alone.
    Auto,
}

impl ScheduleMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleMode::Serial => "serial",
            ScheduleMode::Auto => "auto",
        }
    }
}

/// A lane key as a config names it (`shared_lanes:`), checked when the file is read.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct LaneKey(pub String);

/// The kinds of lane `matrix::schedule::lane_key` gives.
const LANE_KINDS: [&str; 6] = ["usb:", "mmc:", "ata:", "nvme:", "host:", "disk:"];

impl<'de> Deserialize<'de> for LaneKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if LANE_KINDS
            .iter()
            .any(|k| s.len() > k.len() && s.starts_with(k))
        {
            Ok(LaneKey(s))
        } else {
            Err(serde::de::Error::custom(format!(
                "{s:?} is not a lane: use a key as the run prints it at its start and records \
                 under schedule.lanes (usb:usb1, mmc:mmc0, ata:ata1, nvme:nvme-subsys0, \
                 host:/devices/..., disk:vda)"
            )))
        }
    }
}

pub const BUILTIN_PROFILES: &[(&str, &str)] = &[
    ("quick", include_str!("../../profiles/quick.yaml")),
    ("full", include_str!("../../profiles/full.yaml")),
];

/// A byte count written with a unit (`64M`, `1G`, `4k`) or as a plain integer of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NumOrText(
            "a size such as 64M, 1G or 4k",
            |s| units::parse_size(s).map(Size).map_err(|e| e.to_string()),
            |n| Ok(Size(n)),
        ))
    }
}

/// A visitor for values written as an integer or as text with a unit; it keeps serde's
/// position, so errors point at the value itself.
struct NumOrText<T>(
    &'static str,
    fn(&str) -> Result<T, String>,
    fn(u64) -> Result<T, String>,
);

impl<'de, T> de::Visitor<'de> for NumOrText<T> {
    type Value = T;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        (self.2)(v).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        let v = u64::try_from(v).map_err(|_| E::custom(format!("{v} is negative: {}", self.0)))?;
        (self.2)(v).map_err(E::custom)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        // The parser's own message already says how to write the value, with examples.
        (self.1)(v).map_err(E::custom)
    }
}

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&units::format_size(self.0))
    }
}

/// A duration written with a unit (`500ms`, `5s`, `2m`) or as an integer of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NumOrText(
            "a duration such as 500ms, 5s or 2m",
            |s| units::parse_duration(s).map(Dur).map_err(|e| e.to_string()),
            |n| {
                units::duration_from_secs(n)
                    .map(Dur)
                    .map_err(|e| e.to_string())
            },
        ))
    }
}

/// How the writer spells a size, a duration and a target (strings with units, a keyword or a
/// one-key map), for the report's JSON Schema.
#[cfg(feature = "schema")]
mod json_schema {
    use schemars::gen::SchemaGenerator;
    use schemars::schema::Schema;
    use schemars::JsonSchema;
    use serde_json::json;

    fn schema(v: serde_json::Value) -> Schema {
        serde_json::from_value(v).expect("a schema literal")
    }

    impl JsonSchema for super::Size {
        fn schema_name() -> String {
            "Size".into()
        }
        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            schema(json!({
                "description": "a byte count with its unit as the writer spells it (64M, 1G, 4k, 512)",
                "type": "string",
                "pattern": "^[0-9]+[kMGTP]?$"
            }))
        }
    }

    impl JsonSchema for super::Dur {
        fn schema_name() -> String {
            "Duration".into()
        }
        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            schema(json!({
                "description": "a duration with its unit (500ms, 5s, 2m, 1h; under a millisecond in us)",
                "type": "string",
                "pattern": "^[0-9]+(us|ms|s|m|h)$"
            }))
        }
    }

    impl JsonSchema for super::TargetSpec {
        fn schema_name() -> String {
            "TargetSpec".into()
        }
        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            schema(json!({
                "description": "where a selected disk's write tests go: auto, read-only, raw, or a directory",
                "oneOf": [
                    {"enum": ["auto", "read-only", "raw"]},
                    {"type": "object", "required": ["dir"], "additionalProperties": false,
                     "properties": {"dir": {"type": "string", "pattern": "^/"}}}
                ]
            }))
        }
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&units::format_duration(self.0))
    }
}

/// Which disks a rule applies to. Every given field must match; an empty selector matches
/// nothing (a typo must not select every disk).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, try_from = "SelectorRaw")]
pub struct Selector {
    /// Every disk that is not a system disk (root, boot, swap, RAID/LVM members, eMMC boot
    /// areas) and not a loop/zram/dm device.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_non_system: bool,
    /// The disk that holds the root filesystem `/` (the eMMC of most boards, the only disk of
    /// a VM): tested through test files in a directory of it, never raw.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub system_disk: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<DeviceClass>,
    /// USB port path as `usb:1-1.2` (kernel port path, as `lsusb -t` shows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    /// udev `ID_PATH`, or a prefix of it ending at a component boundary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// Kernel name (`mmcblk0`): stable for on-board eMMC/SD, not for `sdX`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Selector {
    /// The selector as a config writes it, in words: `serial NOSUCHSERIAL, class usb`.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if self.all_non_system {
            parts.push("all_non_system".into());
        }
        if self.system_disk {
            parts.push("system_disk".into());
        }
        if let Some(c) = &self.class {
            let c = serde_norway::to_string(c).unwrap_or_default();
            parts.push(format!("class {}", c.trim()));
        }
        for (key, v) in [
            ("port", &self.port),
            ("id_path", &self.id_path),
            ("serial", &self.serial),
            ("name", &self.name),
        ] {
            if let Some(v) = v {
                parts.push(format!("{key} {v}"));
            }
        }
        parts.join(", ")
    }
}

/// `Selector` as written, checked before it becomes one (so errors carry the position).
#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct SelectorRaw {
    all_non_system: bool,
    system_disk: bool,
    class: Option<DeviceClass>,
    port: Option<String>,
    id_path: Option<String>,
    serial: Option<String>,
    name: Option<String>,
}

impl TryFrom<SelectorRaw> for Selector {
    type Error = String;
    fn try_from(r: SelectorRaw) -> Result<Self, String> {
        let s = Selector {
            all_non_system: r.all_non_system,
            system_disk: r.system_disk,
            class: r.class,
            port: r.port,
            id_path: r.id_path,
            serial: r.serial,
            name: r.name,
        };
        if s == Selector::default() {
            return Err(
                "empty selector: name at least one of all_non_system, system_disk, class, \
                        port, id_path, serial, name"
                    .into(),
            );
        }
        if let Some(p) = &s.port {
            let path = p.strip_prefix("usb:").unwrap_or("");
            if !crate::discover::linkcheck::is_usb_port_path(path) {
                return Err(format!(
                    "port {p:?}: write USB ports as usb:BUS-PORT[.PORT...], e.g. usb:1-1.2"
                ));
            }
        }
        Ok(s)
    }
}

/// Where a selected disk's write tests go. YAML: `auto`, `read-only`, `raw`, or `{dir: PATH}`.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum TargetSpec {
    /// A test file on the disk's mounted, writable, non-system filesystem if it has one;
    /// otherwise read-only tests on the raw device.
    #[default]
    Auto,
    /// Only read tests, on the raw device.
    ReadOnly,
    /// A test file in this directory (on a filesystem of the selected disk).
    Dir(PathBuf),
    /// The raw device, destroying its contents: only when every safety check passes.
    Raw,
}

impl Serialize for TargetSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            TargetSpec::Auto => s.serialize_str("auto"),
            TargetSpec::ReadOnly => s.serialize_str("read-only"),
            TargetSpec::Raw => s.serialize_str("raw"),
            TargetSpec::Dir(p) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("dir", p)?;
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for TargetSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const WANT: &str = "auto, read-only, raw, or {dir: /absolute/path}";
        impl<'de> de::Visitor<'de> for V {
            type Value = TargetSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(WANT)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TargetSpec, E> {
                match v {
                    "auto" => Ok(TargetSpec::Auto),
                    "read-only" => Ok(TargetSpec::ReadOnly),
                    "raw" => Ok(TargetSpec::Raw),
                    other => Err(E::custom(format!(
                        "unknown target {other:?}: expected {WANT}"
                    ))),
                }
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut m: A) -> Result<TargetSpec, A::Error> {
                let key: Option<String> = m.next_key()?;
                match key.as_deref() {
                    Some("dir") => {
                        let p: PathBuf = m.next_value()?;
                        if !p.is_absolute() {
                            return Err(de::Error::custom(format!(
                                "dir {p:?} must be an absolute path"
                            )));
                        }
                        if let Some(k) = m.next_key::<String>()? {
                            return Err(de::Error::custom(format!(
                                "unexpected key {k:?} beside dir"
                            )));
                        }
                        Ok(TargetSpec::Dir(p))
                    }
                    Some(k) => Err(de::Error::custom(format!(
                        "unknown key {k:?}: expected {WANT}"
                    ))),
                    None => Err(de::Error::custom(format!("empty map: expected {WANT}"))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// One device rule: which disks, how to test them, what link they must have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DeviceRule {
    pub select: Selector,
    #[serde(default)]
    pub target: TargetSpec,
    /// The device must be present (fails the unit when missing); `--wait-devices` waits for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// A label for the report ("front USB", "on-module eMMC").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// One column of the matrix: a workload and its parameters (unset ones take the workload's
/// defaults). Checked when it is read against the same rules the engine enforces, so a value
/// no device could run is a configuration error with its position, never a failed device.
// Each key is declared here once: serde derives the decoding as an inherent function
// (`remote = "Self"`), and the `Deserialize` impl below runs it, then the check. (A plain
// comment: the doc comment above is the report schema's description of a test.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct TestSpec {
    pub workload: WorkloadKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bs: Option<Size>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "queue_depth"
    )]
    pub qd: Option<u32>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "job_count"
    )]
    pub jobs: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Size>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Dur>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheMode>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "percent"
    )]
    pub read_percent: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_mode: Option<VerifyMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_interval: Option<Dur>,
    /// Pass over the region again until the runtime (fio's time_based). Unset: yes for every
    /// entry that gives a runtime, but `write-curve` and `verify`; one pass for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_based: Option<bool>,
    /// End the test early once its figure is known to this (half the 95 % confidence
    /// interval, in %); the runtime is then the budget. Unset: run the whole runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision_percent: Option<f64>,
}

impl<'de> Deserialize<'de> for TestSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let t = TestSpec::deserialize(d)?;
        t.check().map_err(de::Error::custom)?;
        Ok(t)
    }
}

impl Serialize for TestSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        TestSpec::serialize(self, s)
    }
}

impl TestSpec {
    /// The rules an entry obeys beyond each key's own: those the engine enforces on the
    /// parameters it gives.
    fn check(&self) -> Result<(), String> {
        if self.sample_interval.is_some_and(|d| d.0.is_zero()) {
            return Err("sample_interval 0s: must be at least 1ms, e.g. 500ms or 1s".into());
        }
        let p = self.params(PathBuf::new(), EngineRequest::Auto);
        crate::workload::check_params(&p).map_err(|e| e.to_string())
    }

    /// The workload's defaults with this entry's values on top: what a cell runs.
    /// A `runtime` of 0 means no time bound, as bench's `--runtime 0` does.
    pub fn params(&self, target: PathBuf, engine: EngineRequest) -> WorkloadParams {
        let mut p = self.overrides().params(self.workload, target);
        p.engine = engine;
        // A factory cell measures for its runtime, over its region again and again, so a
        // small region never ends it after a fraction of a second (see `time_based`).
        // An entry that gives no runtime of its own is bound by its size: one pass.
        if self.time_based.is_none() {
            p.time_based = self.runtime.is_some_and(|r| !r.0.is_zero())
                && !matches!(
                    self.workload,
                    WorkloadKind::WriteCurve | WorkloadKind::Verify
                );
        }
        p
    }

    /// This entry as the workload overrides `bench`'s flags also fill.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            block_bytes: self.bs.map(|v| v.0),
            queue_depth: self.qd,
            jobs: self.jobs,
            size_bytes: self.size.map(|v| v.0),
            runtime: self.runtime.map(|v| v.0),
            cache: self.cache,
            read_percent: self.read_percent,
            verify_mode: self.verify_mode,
            sample_interval: self.sample_interval.map(|v| v.0),
            time_based: self.time_based,
            precision_percent: self.precision_percent,
            ..Overrides::default()
        }
    }
}

/// Limits a device must meet. Applies to the disks its `select` matches (class, port, name,
/// serial) and, when `workload` is set, only to that workload's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Threshold {
    pub select: Selector,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadKind>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "min_mib_per_s"
    )]
    pub min_mib_per_s: Option<f64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "min_iops"
    )]
    pub min_iops: Option<f64>,
    /// p99 completion latency limit in milliseconds.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "max_p99_latency_ms"
    )]
    pub max_p99_latency_ms: Option<f64>,
    /// I/Os slower than 1 s allowed (0 = none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_stalls: Option<u64>,
    /// Negotiated USB link speed the device must reach (Mbit/s; also every hub on its path).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "min_link_mbps"
    )]
    pub min_link_mbps: Option<f64>,
    /// Negotiated SATA link speed (Gbit/s).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "min_sata_gbps"
    )]
    pub min_sata_gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_capacity: Option<Size>,
    /// Flash health, read-only from the device: the most life used (eMMC/UFS
    /// type A/B estimate band tops, NVMe percent used), in %.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_life_used_percent: Option<u16>,
    /// The worst end-of-life state allowed (eMMC PRE_EOL_INFO, UFS bPreEOLInfo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pre_eol: Option<crate::health::PreEol>,
    /// NVMe media and data integrity errors allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_media_errors: Option<u64>,
    /// SATA interface CRC errors allowed (SMART 199: the cable's signal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_crc_errors: Option<u64>,
    /// PCIe link speed the disk's function must have trained at (GT/s per lane: 2.5, 5, 8,
    /// 16, 32).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "min_pcie_gts"
    )]
    pub min_pcie_gts: Option<f64>,
    /// PCIe link width (lanes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_pcie_width: Option<u32>,
    /// Over-current events allowed on the USB port the device hangs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_over_current: Option<u64>,
    /// An SD card's sequential write must reach what its SD Status claims (Speed Class, UHS
    /// Speed Grade, Video Speed Class): a card that claims more than it writes is counterfeit
    /// or worn.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sd_speed_claim: bool,
    /// The band around the figure limits (`min_mib_per_s`, `min_iops`, `max_p99_latency_ms`),
    /// in % of the limit: a figure that misses by less, or passes by less, is marginal.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "marginal_percent"
    )]
    pub marginal_percent: Option<u8>,
    /// How many times a cell whose only failures are marginal misses of this rule is measured
    /// again (the profile's `retest` when absent).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "retest_count"
    )]
    pub retest: Option<u8>,
}

impl Threshold {
    /// Whether the rule limits a figure that a run of `workload` measures: its rate, IOPS,
    /// p99 latency or stalls, or (for `seq-write`) the SD card's claimed speed.
    pub fn limits_a_figure(&self, workload: WorkloadKind) -> bool {
        self.figure_limits().next().is_some()
            || self.max_stalls.is_some()
            || (self.sd_speed_claim && workload == WorkloadKind::SeqWrite)
    }

    /// The limits it sets on a test's figures, each with its metric (whose direction says
    /// whether it is a minimum or a maximum), in the order reasons list them. The one place a
    /// figure's field is tied to its metric.
    pub fn figure_limits(&self) -> impl Iterator<Item = (&'static Metric, f64)> {
        [
            (&metric::MIB_PER_S, self.min_mib_per_s),
            (&metric::IOPS, self.min_iops),
            (&metric::P99_LATENCY_MS, self.max_p99_latency_ms),
        ]
        .into_iter()
        .filter_map(|(m, v)| Some((m, v?)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ReportFormat {
    #[default]
    Yaml,
    Json,
}

/// The grammar of the station's `USBPERF-RESULT` line. `v2` is `v1` with two keys appended
/// (`marginal`, `retests`); a station written for `v1` pins it until it reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ResultLine {
    V1,
    #[default]
    V2,
}

impl ResultLine {
    pub fn is_default(&self) -> bool {
        *self == ResultLine::default()
    }
}

/// Which moment of a unit's life a run records: the run on the production line, or a later
/// boot in the field (the boot service's field mode), followed by the fleet's wear view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    #[default]
    Factory,
    Field,
}

impl Phase {
    pub fn is_default(&self) -> bool {
        *self == Phase::default()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Factory => "factory",
            Phase::Field => "field",
        }
    }

    /// `USBPERF_PHASE`'s value; the error says what it takes.
    pub fn parse(s: &str) -> Result<Phase, String> {
        match s.trim() {
            "factory" => Ok(Phase::Factory),
            "field" => Ok(Phase::Field),
            other => Err(format!(
                "USBPERF_PHASE={other:?} is not a phase: use factory (the run on the line) or \
                 field (a later boot)"
            )),
        }
    }
}

/// A config file or profile as written: every key optional, unknown keys rejected.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The profile this file extends: `quick`, `full`, or a path to another YAML file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_dir: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_format: Option<ReportFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineRequest>,
    /// How long to wait for `required` devices to appear before testing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_devices: Option<Dur>,
    /// Free space kept on a filesystem under test, in % of its size (at least 10 advised).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "headroom"
    )]
    pub headroom_percent: Option<u8>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "non_empty_devices"
    )]
    pub devices: Option<Vec<DeviceRule>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "non_empty_tests"
    )]
    pub tests: Option<Vec<TestSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thresholds: Option<Vec<Threshold>>,
    /// Send the report to a collector after writing it (`crate::upload`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<UploadConfig>,
    /// `serial` (one device after another) or `auto` (devices on independent buses at the
    /// same time; `matrix::schedule`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleMode>,
    /// Groups of lanes that share a limit their paths do not show (found by comparing
    /// `--schedule serial` and `auto` on the board): each group runs as one lane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_lanes: Option<Vec<Vec<LaneKey>>>,
    /// How many times a cell whose only failures are marginal is measured again, for every
    /// threshold without a `retest` of its own.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "retest_count"
    )]
    pub retest: Option<u8>,
    /// The test station's name, recorded in the report (`USBPERF_STATION` overrides it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub station: Option<String>,
    /// The parts the board may carry, per device class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<Vec<PartRule>>,
    /// This board's revision, for the `parts` entries that name one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board_revision: Option<String>,
    /// The result line's version: `v2` (the default) or `v1` for a station that reads only it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_line: Option<ResultLine>,
    /// `factory` (the default) or `field`: recorded in the report (`USBPERF_PHASE` overrides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Raw flash: the speed test's test areas and the health limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flash: Option<FlashProfile>,
}

/// Raw flash (MTD partitions and the UBI devices on them): the partitions the speed test may
/// erase, and the limits every MTD and UBI device's health is judged by.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FlashProfile {
    /// MTD partitions (by partition name or `mtdN`) the erase/write/read speed test may
    /// erase. A partition that is mounted, attached to UBI, read-only or named like a
    /// bootloader, kernel, environment, firmware or rootfs is refused even when named here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub test_areas: Vec<String>,
    /// MTD devices (partition names or `mtdN`, or `all`) the run reads whole, counting
    /// corrected bitflips and uncorrectable pages per erase block (read-only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scan: Vec<String>,
    /// Erase blocks the speed test uses per area (default: all of its good blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_blocks: Option<u64>,
    /// Bad erase blocks an MTD device may have (factory-marked and grown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bad_blocks: Option<u64>,
    /// ECC steps that could not be corrected, since boot (the kernel's counter) or in a scan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ecc_failures: Option<u64>,
    /// Bits the ECC corrected, since boot or in a scan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_corrected_bits: Option<u64>,
    /// The highest UBI erase counter (the flash's rated cycles less a margin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_erase_count: Option<u64>,
    /// UBI erase blocks still reserved to replace bad ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_reserved_for_bad: Option<u64>,
    /// The speed test's erase, write and read rates (MiB/s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_erase_mib_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_write_mib_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_read_mib_per_s: Option<f64>,
}

impl FlashProfile {
    pub fn is_default(&self) -> bool {
        *self == FlashProfile::default()
    }
}

/// The parts a board may carry in one device class (on one board revision when
/// `board_revision` is set): a disk of that class must match one `allowed` identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PartRule {
    pub class: crate::device::DeviceClass,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board_revision: Option<String>,
    pub allowed: Vec<PartId>,
}

/// One approved identity: every field given must match the disk's (text compared without
/// case or surrounding blanks; `manfid` and `oemid` as numbers, so `0x15` is `0x000015`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PartId {
    /// eMMC/SD CID manufacturer id (`0x000015`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manfid: Option<String>,
    /// eMMC/SD CID OEM/application id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oemid: Option<String>,
    /// eMMC/SD CID product name (`8GTF4R`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// NVMe, SATA, SCSI or USB vendor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    /// NVMe, SATA, SCSI or USB model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// USB `vendor:product` ids (`0781:5581`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vid_pid: Option<String>,
    /// eMMC/SD CID product revision (`0x1`), compared as a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prv: Option<String>,
    /// The firmware the part may run: one revision (`10.0.2`, `0x0300`), or an inclusive range
    /// of numbered revisions (`0x0100..0x01ff`, `0x0200..`, `..7`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "firmware_spec"
    )]
    pub firmware: Option<String>,
}

/// A part's id or revision as a number: `0x`-prefixed hex (`0x000015`, `0x15`) or decimal
/// (`21`; `0300` is 300), so the spellings of one number compare equal.
pub fn id_number(s: &str) -> Option<u64> {
    let t = s.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) if !h.is_empty() => u64::from_str_radix(h, 16).ok(),
        Some(_) => None,
        None => t.parse().ok(),
    }
}

/// A firmware range's ends, `None` for an open end; `None` overall when `spec` is one
/// revision rather than a range.
pub fn firmware_range(spec: &str) -> Option<(Option<u64>, Option<u64>)> {
    let (lo, hi) = spec.split_once("..")?;
    let end = |t: &str| {
        if t.trim().is_empty() {
            Some(None)
        } else {
            id_number(t).map(Some)
        }
    };
    Some((end(lo)?, end(hi)?))
}

fn firmware_spec<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    if s.trim().is_empty() {
        return Err(de::Error::custom(
            "firmware is empty: give a revision such as 10.0.2, or a range such as 0x0100..0x01ff",
        ));
    }
    if s.contains("..") {
        match firmware_range(&s) {
            Some((Some(lo), Some(hi))) if lo > hi => {
                return Err(de::Error::custom(format!(
                    "firmware range {s:?} runs backwards: write the lower revision first"
                )))
            }
            Some((None, None)) => return Err(de::Error::custom(
                "firmware range \"..\" names no revision: give at least one end, such as 0x0200..",
            )),
            Some(_) => {}
            None => {
                return Err(de::Error::custom(format!(
                    "firmware range {s:?} is not understood: its ends must be numbers, such as \
                     0x0100..0x01ff or 7..9; a revision that is not a number (10.0.2) is given \
                     alone, one allowed entry per revision"
                )))
            }
        }
    }
    Ok(Some(s))
}

/// Retests a cell may get: at most 5, so a board that is really slow fails in bounded time.
pub const MAX_RETEST: u64 = 5;

fn retest_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
    bounded(d, 0, MAX_RETEST, "retest").map(|v| Some(v as u8))
}

fn marginal_percent<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
    bounded(d, 1, 50, "marginal_percent").map(|v| Some(v as u8))
}

/// An integer in `min..=max`, checked inside the visitor so the error points at the value.
fn bounded<'de, D: Deserializer<'de>>(
    d: D,
    min: u64,
    max: u64,
    what: &'static str,
) -> Result<u64, D::Error> {
    struct V(u64, u64, &'static str);
    impl<'de> de::Visitor<'de> for V {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a whole number from {} to {}", self.0, self.1)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            if v < self.0 || v > self.1 {
                return Err(E::custom(format!(
                    "{v} is out of range: {} must be from {} to {}",
                    self.2, self.0, self.1
                )));
            }
            Ok(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            match u64::try_from(v) {
                Ok(v) => self.visit_u64(v),
                Err(_) => Err(E::custom(format!(
                    "{v} is negative: {} must be from {} to {}",
                    self.2, self.0, self.1
                ))),
            }
        }
    }
    d.deserialize_any(V(min, max, what))
}

fn queue_depth<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    bounded(d, 1, u64::from(MAX_QUEUE_DEPTH), "qd").map(|v| Some(v as u32))
}

fn job_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    bounded(d, 1, u64::from(MAX_JOBS), "jobs").map(|v| Some(v as u32))
}

/// A list that must name at least one entry: an empty `tests:` or `devices:` would make a run
/// that tests nothing, which must never pass. Checked inside the list's visitor, so the error
/// points at the list itself (`tests: []`), not at the start of the file.
fn non_empty<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
    key: &'static str,
) -> Result<Option<Vec<T>>, D::Error> {
    struct List<T>(&'static str, std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> de::Visitor<'de> for List<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a list of {}", self.0)
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut v = Vec::new();
            while let Some(item) = seq.next_element()? {
                v.push(item);
            }
            if v.is_empty() {
                let key = self.0;
                return Err(de::Error::custom(format!(
                    "the list is empty: a run with no {key} tests nothing; give at least one \
                     entry, or remove the key to keep the profile's"
                )));
            }
            Ok(v)
        }
    }
    struct Opt<T>(&'static str, std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> de::Visitor<'de> for Opt<T> {
        type Value = Option<Vec<T>>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a list of {}", self.0)
        }
        // `tests:` with every entry commented out reads as null: the key is as good as absent
        // and the profile's list stays, as it always did.
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_seq(List(self.0, std::marker::PhantomData))
                .map(Some)
        }
    }
    d.deserialize_option(Opt(key, std::marker::PhantomData))
}

fn non_empty_devices<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<DeviceRule>>, D::Error> {
    non_empty(d, "devices")
}

fn non_empty_tests<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<TestSpec>>, D::Error> {
    non_empty(d, "tests")
}

/// A threshold's number: finite, not negative and at most the metric's ceiling, a bound no
/// device reaches (1,000,000 MiB/s, 100,000,000 IOPS, an hour of latency, 100 Gbit/s of USB
/// link, 128 GT/s): `.inf`, `.nan`, `-1e308` or a negative limit is a typo that would judge
/// nothing or fail everything, so the file is refused at its line.
fn limit<'de, D: Deserializer<'de>>(d: D, m: &Metric) -> Result<Option<f64>, D::Error> {
    let v = f64::deserialize(d)?;
    if !v.is_finite() || v.is_sign_negative() || v > m.max {
        // 1e308 as 1e308, not as 309 digits.
        let shown = if v.abs() >= 1e9 {
            format!("{v:e}")
        } else {
            v.to_string()
        };
        return Err(de::Error::custom(format!(
            "{}: {shown} is not a limit: give a number from 0 to {}",
            m.key(),
            m.max
        )));
    }
    Ok(Some(v))
}

fn min_mib_per_s<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    limit(d, &metric::MIB_PER_S)
}

fn min_iops<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    limit(d, &metric::IOPS)
}

fn max_p99_latency_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    limit(d, &metric::P99_LATENCY_MS)
}

fn min_link_mbps<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    limit(d, &metric::LINK_MBPS)
}

fn min_sata_gbps<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    limit(d, &metric::SATA_GBPS)
}

fn min_pcie_gts<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    limit(d, &metric::PCIE_GTS)
}

fn percent<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
    bounded(d, 0, 100, "a percentage").map(|v| Some(v as u8))
}

fn headroom<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
    bounded(d, 0, 99, "headroom_percent (10 is advised)").map(|v| Some(v as u8))
}

/// The configuration a run uses, every value decided; recorded in the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Config {
    /// Where each layer came from, lowest first (`builtin:quick`, `/etc/usbperf/usbperf.yaml`).
    pub sources: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub report_dir: PathBuf,
    pub report_format: ReportFormat,
    pub engine: EngineRequest,
    pub wait_devices: Dur,
    pub headroom_percent: u8,
    pub devices: Vec<DeviceRule>,
    pub tests: Vec<TestSpec>,
    pub thresholds: Vec<Threshold>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<UploadConfig>,
    /// Absent in reports of builds before the schedule existed: those ran serially.
    #[serde(default)]
    pub schedule: ScheduleMode,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_lanes: Vec<Vec<LaneKey>>,
    /// Retests for thresholds without their own `retest` (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retest: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub station: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartRule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board_revision: Option<String>,
    #[serde(default, skip_serializing_if = "ResultLine::is_default")]
    pub result_line: ResultLine,
    #[serde(default, skip_serializing_if = "Phase::is_default")]
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "FlashProfile::is_default")]
    pub flash: FlashProfile,
}

fn is_zero(v: &u8) -> bool {
    *v == 0
}

pub const DEFAULT_REPORT_DIR: &str = "/var/lib/usbperf/reports";

/// The config `run` and `upload` read when no `--config` is given (and it exists).
pub const DEFAULT_CONFIG: &str = "/etc/usbperf/usbperf.yaml";

/// The config file to read: the one given, else the installed one if there is one.
pub fn locate(given: Option<&Path>) -> Option<PathBuf> {
    match given {
        Some(p) => Some(p.to_path_buf()),
        None if Path::new(DEFAULT_CONFIG).is_file() => Some(PathBuf::from(DEFAULT_CONFIG)),
        None => None,
    }
}

/// Where profiles are looked up, in order: beside the config and in its `profiles/`, then
/// the installed ones, then the repository's board profiles (a checkout's `profiles/boards`).
pub fn profile_search(config: Option<&Path>) -> Vec<PathBuf> {
    let mut search: Vec<PathBuf> = Vec::new();
    if let Some(dir) = config.and_then(|p| p.parent()) {
        search.push(dir.to_path_buf());
        search.push(dir.join("profiles"));
    }
    search.extend(
        [
            "/etc/usbperf/profiles",
            "/usr/share/usbperf/profiles",
            "profiles/boards",
        ]
        .iter()
        .map(PathBuf::from),
    );
    search
}
/// The profile a config file without `profile:` extends.
pub const DEFAULT_PROFILE: &str = "quick";
/// Where the system disk's test files go (the state directory usbperf owns on the rootfs).
pub const DEFAULT_SCRATCH_DIR: &str = "/var/lib/usbperf/scratch";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}:{line}:{column}: {msg}")]
    Syntax {
        file: String,
        line: usize,
        column: usize,
        msg: String,
    },
    #[error("cannot read the config {file}: {err}")]
    Read { file: String, err: std::io::Error },
    #[error(
        "unknown profile {0:?}: use one of quick, full, or the path of a YAML profile (board \
         profiles live in profiles/boards/ and /etc/usbperf/profiles/)"
    )]
    UnknownProfile(String),
    #[error("profiles extend each other in a loop: {0}")]
    ProfileLoop(String),
    /// An environment variable the boot service or the station sets, with a value that is
    /// not one it takes.
    #[error("{0}")]
    Environment(String),
}

impl crate::exit::Classify for ConfigError {
    /// Every configuration error is fixed in the file or the command line that named it.
    fn exit(&self) -> crate::exit::Exit {
        match self {
            ConfigError::Syntax { .. }
            | ConfigError::Read { .. }
            | ConfigError::UnknownProfile(_)
            | ConfigError::ProfileLoop(_)
            | ConfigError::Environment(_) => crate::exit::Exit::Usage,
        }
    }
}

/// Parses one YAML document; errors carry file, line and column.
pub fn parse(text: &str, file: &str) -> Result<ConfigFile, ConfigError> {
    let cf: ConfigFile = serde_norway::from_str(text).map_err(|e| {
        let (line, column) = e
            .location()
            .map(|l| (l.line(), l.column()))
            .unwrap_or((0, 0));
        ConfigError::Syntax {
            file: file.to_string(),
            line,
            column,
            msg: syntax_message(&e.to_string(), line, column),
        }
    })?;
    Ok(cf)
}

/// serde_norway's message for a config error: the location the error's `file:line:column`
/// already gives is dropped from it, and serde's type names become what the key takes.
fn syntax_message(msg: &str, line: usize, column: usize) -> String {
    let msg = msg.replacen(&format!(" at line {line} column {column}"), "", 1);
    crate::words::serde_message(&msg)
}

/// Loads a profile by name or path, following `profile:` chains; returns the layers lowest
/// first with their source names.
/// The layers a run starts from: the config file (`given`, else the installed one when it
/// exists) over its profile (or `profile`, replacing the file's), else the `profile` alone
/// (default `quick`). Profiles are looked up in `profile_search`'s directories.
/// The layers the environment adds over the files and flags, last: the station a unit is
/// tested on is the station's to say, not the image's (`USBPERF_STATION`); factory or field
/// is the boot service's (`USBPERF_PHASE`). `var` reads a variable (the process environment,
/// or a table in a test); an empty value is no layer.
pub fn environment_layers(
    var: impl Fn(&str) -> Option<String>,
) -> Result<Vec<(String, ConfigFile)>, ConfigError> {
    let mut layers = Vec::new();
    if let Some(station) = var("USBPERF_STATION").filter(|s| !s.trim().is_empty()) {
        layers.push((
            "USBPERF_STATION".into(),
            ConfigFile {
                station: Some(station),
                ..ConfigFile::default()
            },
        ));
    }
    if let Some(phase) = var("USBPERF_PHASE").filter(|s| !s.trim().is_empty()) {
        let phase = Phase::parse(&phase).map_err(ConfigError::Environment)?;
        layers.push((
            "USBPERF_PHASE".into(),
            ConfigFile {
                phase: Some(phase),
                ..ConfigFile::default()
            },
        ));
    }
    Ok(layers)
}

pub fn load_layers(
    given: Option<&Path>,
    profile: Option<&str>,
) -> Result<Vec<(String, ConfigFile)>, ConfigError> {
    let path = locate(given);
    let search = profile_search(path.as_deref());
    match &path {
        Some(c) => load_file(c, profile, &search),
        None => load_profile(profile.unwrap_or("quick"), &search, &mut Vec::new()),
    }
}

pub fn load_profile(
    name: &str,
    search: &[PathBuf],
    seen: &mut Vec<String>,
) -> Result<Vec<(String, ConfigFile)>, ConfigError> {
    if seen.iter().any(|s| s == name) {
        seen.push(name.to_string());
        return Err(ConfigError::ProfileLoop(seen.join(" -> ")));
    }
    seen.push(name.to_string());
    let (source, text) = if let Some((_, t)) = BUILTIN_PROFILES.iter().find(|(n, _)| *n == name) {
        (format!("builtin:{name}"), t.to_string())
    } else {
        let candidates: Vec<PathBuf> = if name.contains('/') || name.ends_with(".yaml") {
            vec![PathBuf::from(name)]
        } else {
            search
                .iter()
                .map(|d| d.join(format!("{name}.yaml")))
                .collect()
        };
        let found = candidates
            .iter()
            .find(|p| p.is_file())
            .ok_or_else(|| ConfigError::UnknownProfile(name.to_string()))?;
        let text = crate::untrusted::read_text(found, MAX_CONFIG_BYTES).map_err(|err| {
            ConfigError::Read {
                file: found.display().to_string(),
                err,
            }
        })?;
        (found.display().to_string(), text)
    };
    let cf = parse(&text, &source)?;
    let builtin = source.starts_with("builtin:");
    let mut layers = match (&cf.profile, builtin) {
        (Some(base), _) => load_profile(base, search, seen)?,
        // The built-in profiles are complete; a file of the user's extends the default.
        (None, true) => Vec::new(),
        (None, false) => load_profile(DEFAULT_PROFILE, search, seen)?,
    };
    layers.push((source, cf));
    Ok(layers)
}

/// A config or board profile is a few kilobytes; a larger file is refused before it is read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Loads a config file and everything it extends; `base` replaces the file's own `profile:`
/// (what `--profile` does: the file's other keys still apply on top).
pub fn load_file(
    path: &Path,
    base: Option<&str>,
    search: &[PathBuf],
) -> Result<Vec<(String, ConfigFile)>, ConfigError> {
    let file = path.display().to_string();
    let text =
        crate::untrusted::read_text(path, MAX_CONFIG_BYTES).map_err(|err| ConfigError::Read {
            file: file.clone(),
            err,
        })?;
    let mut cf = parse(&text, &file)?;
    if let Some(b) = base {
        cf.profile = Some(b.to_string());
    }
    // A file without `profile:` extends the default profile, as documented: without a base it
    // would run no test at all.
    let base = cf
        .profile
        .clone()
        .unwrap_or_else(|| DEFAULT_PROFILE.to_string());
    let mut layers = load_profile(&base, search, &mut vec![file.clone()])?;
    layers.push((file, cf));
    Ok(layers)
}

/// Every non-system disk (a test file on its mounted filesystem, read-only tests otherwise), and
/// the system disk through test files in the scratch directory on its filesystem, never raw:
/// as boards' bring-up guides measure the eMMC with `dd` to a file on the rootfs.
pub fn default_devices() -> Vec<DeviceRule> {
    vec![
        DeviceRule {
            select: Selector {
                all_non_system: true,
                ..Selector::default()
            },
            target: TargetSpec::Auto,
            required: false,
            label: None,
        },
        DeviceRule {
            select: Selector {
                system_disk: true,
                ..Selector::default()
            },
            target: TargetSpec::Dir(PathBuf::from(DEFAULT_SCRATCH_DIR)),
            required: false,
            label: Some("system disk".into()),
        },
    ]
}

/// Layers lowest first; a key set in a higher layer replaces the lower one's whole value.
pub fn resolve(layers: Vec<(String, ConfigFile)>) -> Config {
    let mut c = Config {
        sources: Vec::new(),
        description: None,
        report_dir: PathBuf::from(DEFAULT_REPORT_DIR),
        report_format: ReportFormat::Yaml,
        engine: EngineRequest::Auto,
        wait_devices: Dur(Duration::from_secs(0)),
        headroom_percent: 10,
        devices: default_devices(),
        tests: Vec::new(),
        thresholds: Vec::new(),
        upload: None,
        schedule: ScheduleMode::default(),
        shared_lanes: Vec::new(),
        retest: 0,
        station: None,
        parts: Vec::new(),
        board_revision: None,
        result_line: ResultLine::V2,
        phase: Phase::Factory,
        flash: FlashProfile::default(),
    };
    for (source, l) in layers {
        c.sources.push(source);
        if l.description.is_some() {
            c.description = l.description;
        }
        if let Some(v) = l.report_dir {
            c.report_dir = v;
        }
        if let Some(v) = l.report_format {
            c.report_format = v;
        }
        if let Some(v) = l.engine {
            c.engine = v;
        }
        if let Some(v) = l.wait_devices {
            c.wait_devices = v;
        }
        if let Some(v) = l.headroom_percent {
            c.headroom_percent = v;
        }
        if let Some(v) = l.devices {
            c.devices = v;
        }
        if let Some(v) = l.tests {
            c.tests = v;
        }
        if let Some(v) = l.thresholds {
            c.thresholds = v;
        }
        if l.upload.is_some() {
            c.upload = l.upload;
        }
        if let Some(v) = l.schedule {
            c.schedule = v;
        }
        if let Some(v) = l.shared_lanes {
            c.shared_lanes = v;
        }
        if let Some(v) = l.retest {
            c.retest = v;
        }
        if l.station.is_some() {
            c.station = l.station;
        }
        if let Some(v) = l.parts {
            c.parts = v;
        }
        if l.board_revision.is_some() {
            c.board_revision = l.board_revision;
        }
        if let Some(v) = l.result_line {
            c.result_line = v;
        }
        if let Some(v) = l.phase {
            c.phase = v;
        }
        if let Some(v) = l.flash {
            c.flash = v;
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_parse_and_resolve() {
        for (name, _) in BUILTIN_PROFILES {
            let layers = load_profile(name, &[], &mut Vec::new()).unwrap();
            let c = resolve(layers);
            assert!(!c.tests.is_empty(), "{name} has tests");
            assert_eq!(c.sources, vec![format!("builtin:{name}")]);
        }
    }

    #[test]
    fn the_environment_is_the_last_layer_and_says_what_it_takes() {
        // (USBPERF_STATION, USBPERF_PHASE, the layers' names, the error)
        type Case = (
            Option<&'static str>,
            Option<&'static str>,
            &'static [&'static str],
            Option<&'static str>,
        );
        let cases: &[Case] = &[
            (None, None, &[], None),
            (Some(" "), Some(""), &[], None),
            (Some("line-3"), None, &["USBPERF_STATION"], None),
            (
                Some("line-3"),
                Some("field"),
                &["USBPERF_STATION", "USBPERF_PHASE"],
                None,
            ),
            (None, Some("factory"), &["USBPERF_PHASE"], None),
            (
                Some("line-3"),
                Some("lab"),
                &[],
                Some("USBPERF_PHASE=\"lab\" is not a phase: use factory"),
            ),
        ];
        for (station, phase, names, err) in cases {
            let var = |name: &str| match name {
                "USBPERF_STATION" => station.map(str::to_string),
                "USBPERF_PHASE" => phase.map(str::to_string),
                _ => None,
            };
            match (environment_layers(var), err) {
                (Ok(layers), None) => {
                    let got: Vec<&str> = layers.iter().map(|(n, _)| n.as_str()).collect();
                    assert_eq!(&got, names, "{station:?} {phase:?}");
                    let c = resolve(layers);
                    if let Some(s) = station.filter(|s| !s.trim().is_empty()) {
                        assert_eq!(c.station.as_deref(), Some(s));
                    }
                    if phase == &Some("field") {
                        assert_eq!(c.phase, Phase::Field);
                    }
                }
                (Err(e), Some(want)) => {
                    assert!(e.to_string().contains(want), "{e}");
                    assert_eq!(crate::exit::Classify::exit(&e), crate::exit::Exit::Usage);
                }
                (got, want) => panic!("{station:?} {phase:?}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let table: &[(&str, &str)] = &[
            // A typo in a key is an error, not silently ignored.
            (
                "tests:\n  - workload: seq-write\n    sizee: 1G\n",
                "t.yaml:3:5: tests[0]: unknown field `sizee`",
            ),
            (
                "tests:\n  - workload: seq-writ\n",
                "t.yaml:2:15: tests[0].workload: unknown variant `seq-writ`",
            ),
            (
                "tests:\n  - workload: seq-write\n    size: 12Q\n",
                "t.yaml:3:11",
            ),
            (
                "report_dir: [1\n",
                "t.yaml:1:13: report_dir: a list is not a path",
            ),
            // Broken YAML itself (mapping in a plain scalar).
            ("headroom_percent: 10\nreport_dir: a: b\n", "t.yaml:2:14"),
            (
                "schedule: parallel\n",
                "t.yaml:1:11: schedule: unknown variant `parallel`, expected `serial` or `auto`",
            ),
            (
                "schedule: auto\nshared_lanes:\n  - [usb:usb1, ehci]\n",
                "t.yaml:3:5: shared_lanes[0]: \"ehci\" is not a lane",
            ),
            // A limit that is no number a device gives: refused at its line, with the range.
            (
                "thresholds:\n  - {select: {class: usb}, min_mib_per_s: .inf}\n",
                "t.yaml:2:5: thresholds[0]: min_mib_per_s: inf is not a limit: give a number from 0 to 1000000",
            ),
            (
                "thresholds:\n  - {select: {class: usb}, min_iops: .nan}\n",
                "thresholds[0]: min_iops: NaN is not a limit",
            ),
            (
                "thresholds:\n  - {select: {class: usb}, max_p99_latency_ms: -1e308}\n",
                "max_p99_latency_ms: -1e308 is not a limit: give a number from 0 to 3600000",
            ),
            (
                "thresholds:\n  - {select: {class: usb}, min_mib_per_s: -0.0}\n",
                "min_mib_per_s: -0 is not a limit",
            ),
            (
                "thresholds:\n  - {select: {class: usb}, min_link_mbps: 9999999}\n",
                "min_link_mbps: 9999999 is not a limit: give a number from 0 to 100000",
            ),
            (
                "headroom_percent: 150\n",
                "t.yaml:1:19: headroom_percent: 150 is out of range",
            ),
            // A retest budget is bounded, so a slow board fails in bounded time.
            ("retest: 9\n", "t.yaml:1:9: retest: 9 is out of range"),
            (
                "thresholds:\n  - {select: {class: usb}, min_mib_per_s: 30, marginal_percent: 80}\n",
                "marginal_percent must be from 1 to 50",
            ),
            // A selector that selects nothing, or everything by accident, is refused.
            (
                "devices:\n  - select: {}\n",
                "t.yaml:2:5: devices[0]: empty selector",
            ),
            (
                "devices:\n  - select: {port: 1-1}\n",
                "t.yaml:2:5: devices[0]: port \"1-1\": write USB ports as usb:",
            ),
            (
                "devices:\n  - select: {class: usb}\n    target: {dir: data}\n",
                "t.yaml:3:13: devices[0].target: dir \"data\" must be an absolute path",
            ),
            (
                "devices:\n  - select: {class: usb}\n    target: rw\n",
                "unknown target \"rw\"",
            ),
            (
                "tests:\n  - workload: mixed\n    read_percent: 170\n",
                "t.yaml:3:19: tests[0].read_percent: 170 is out of range",
            ),
            (
                "tests:\n  - workload: mixed\n    qd: 0\n",
                "t.yaml:3:9: tests[0].qd: 0 is out of range",
            ),
        ];
        for (text, want) in table {
            let err = parse(text, "t.yaml").unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: got {err:?}, want {want:?}");
            // The location is said once, as file:line:column.
            let (line, column) = {
                let mut it = err.split(':').skip(1).map(|n| n.parse::<usize>().unwrap());
                (it.next().unwrap(), it.next().unwrap())
            };
            assert!(
                !err.contains(&format!("line {line} column {column}")),
                "{text:?}: {err}"
            );
        }
    }

    #[test]
    fn a_null_list_keeps_the_profiles_and_an_empty_one_is_refused() {
        let null = parse("tests:\ndevices:\n", "t.yaml").unwrap();
        assert_eq!((null.tests, null.devices), (None, None));
        // The error points at the list's own line, not at the start of the file.
        let err = parse("report_dir: /r\ntests: []\n", "t.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.yaml:2:8: tests: the list is empty"),
            "{err}"
        );
    }

    #[test]
    fn layers_replace_whole_keys_and_flags_are_last() {
        let base = parse(
            "report_dir: /a\nheadroom_percent: 20\ntests:\n  - workload: seq-read\n",
            "b",
        )
        .unwrap();
        let top = parse(
            "report_dir: /b\ntests:\n  - workload: rand-read\n    qd: 8\n",
            "t",
        )
        .unwrap();
        let c = resolve(vec![("b".into(), base), ("t".into(), top)]);
        assert_eq!(c.report_dir, PathBuf::from("/b"));
        assert_eq!(c.headroom_percent, 20);
        assert_eq!(c.tests.len(), 1);
        assert_eq!(c.tests[0].workload, WorkloadKind::RandRead);
        assert_eq!(c.tests[0].qd, Some(8));
        assert_eq!(c.sources, vec!["b", "t"]);
    }

    #[test]
    fn target_forms() {
        let c = parse(
            "devices:\n  - select: {class: usb}\n    target: raw\n  - select: {name: mmcblk0}\n    target: {dir: /data}\n  - select: {all_non_system: true}\n",
            "t",
        )
        .unwrap();
        let d = c.devices.unwrap();
        assert_eq!(d[0].target, TargetSpec::Raw);
        assert_eq!(d[1].target, TargetSpec::Dir(PathBuf::from("/data")));
        assert_eq!(d[2].target, TargetSpec::Auto);
    }

    #[test]
    fn profile_loops_are_reported() {
        let dir = std::env::temp_dir().join(format!("usbperf-loop-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.yaml"), "profile: b\n").unwrap();
        std::fs::write(dir.join("b.yaml"), "profile: a\n").unwrap();
        let err = load_profile("a", std::slice::from_ref(&dir), &mut Vec::new()).unwrap_err();
        assert!(matches!(err, ConfigError::ProfileLoop(_)), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(test)]
mod board_profiles {
    use super::*;

    /// The example board profiles in the repository parse, extend `quick`, and every
    /// threshold they set names a workload the matrix runs.
    #[test]
    fn example_board_profiles_resolve() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/boards");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let layers = load_file(&p, None, &[]).unwrap_or_else(|e| panic!("{e}"));
            let c = resolve(layers);
            assert_eq!(c.sources[0], "builtin:quick", "{}", p.display());
            assert!(!c.thresholds.is_empty() && !c.devices.is_empty());
            for t in &c.thresholds {
                if let Some(w) = t.workload {
                    assert!(
                        c.tests.iter().any(|s| s.workload == w),
                        "{}: {w:?}",
                        p.display()
                    );
                }
            }
            n += 1;
        }
        assert_eq!(n, 2);
    }
}
