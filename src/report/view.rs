//! Owns the lenient view of one report that the matrix table is drawn from: only the fields
//! the table shows, unknown fields ignored and workloads, statuses and classes kept as text,
//! so a report from a newer build (a new field, a new workload or status name, a config key
//! this build refuses) still shows. The strict [`Report`] type cannot do that: its `config`
//! denies unknown keys and its enums refuse names they do not know.
//!
//! Kept apart from `crate::fleet::reader` on purpose: the fleet reads other fields (curves,
//! thresholds) and rejects newer schema versions, while a person looking at one report wants
//! to see whatever can be shown.

use std::path::Path;

use serde::Deserialize;

use crate::report::decode::{decode, is_json, parse, DecodeError, Probe};

use super::schema::{Report, SCHEMA_VERSION};

/// Why a file could not be shown as a report. The CLI maps every variant to exit code 2
/// (the file is wrong, not the tool).
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("{path}: not a usbperf report: {msg}")]
    NotAReport { path: String, msg: String },
    #[error(
        "{path}: schema_version {version} is newer than this build reads ({supported}) and \
         its shape changed ({msg}): show it with a newer usbperf-matrix"
    )]
    TooNew {
        path: String,
        version: u32,
        supported: u32,
        msg: String,
    },
}

/// The parts of a report the matrix shows. `verdict` is required at both levels, as in the
/// fleet: it is written last, so a file cut short fails here instead of showing devices
/// silently missing.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ReportView {
    pub schema_version: u32,
    /// `running`, `complete`, `interrupted`, or a newer word.
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub interrupted_by: Option<String>,
    /// RFC 3339 as written; text, since the table only prints it.
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub unit: UnitView,
    #[serde(default)]
    pub config: ConfigView,
    #[serde(
        default,
        deserialize_with = "crate::report::decode::capped::<_, _, { crate::report::decode::MAX_DEVICES }>"
    )]
    pub devices: Vec<DeviceView>,
    #[serde(default)]
    pub missing_devices: Vec<String>,
    pub verdict: VerdictView,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct UnitView {
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub machine_id: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub serial: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ConfigView {
    /// The matrix's tests in order: the table's columns.
    #[serde(default)]
    pub tests: Vec<TestView>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TestView {
    pub workload: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct VerdictView {
    #[serde(default)]
    pub pass: bool,
    /// The sentences of the reasons: schema 1 stores them as they are, schema 2 as the
    /// `text` of each record.
    #[serde(default, deserialize_with = "reason_texts")]
    pub reasons: Vec<String>,
}

/// A reason of either schema, as its sentence.
#[derive(Deserialize)]
#[serde(untagged)]
enum ReasonText {
    Text(String),
    Record { text: String },
}

fn reason_texts<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let v: Vec<ReasonText> = Vec::deserialize(d)?;
    Ok(v.into_iter()
        .map(|r| match r {
            ReasonText::Text(t) | ReasonText::Record { text: t } => t,
        })
        .collect())
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct DeviceView {
    pub name: String,
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub disk: DiskView,
    #[serde(
        default,
        deserialize_with = "crate::report::decode::capped::<_, _, { crate::report::decode::MAX_CELLS }>"
    )]
    pub cells: Vec<CellView>,
    pub verdict: VerdictView,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct DiskView {
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub usb: Option<UsbView>,
    #[serde(default)]
    pub sata: Option<SataView>,
    #[serde(default)]
    pub mmc: Option<MmcView>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct UsbView {
    #[serde(default)]
    pub port_path: Option<String>,
    #[serde(default)]
    pub speed_mbps: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SataView {
    #[serde(default)]
    pub port: Option<String>,
    #[serde(default)]
    pub sata_spd_gbps: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct MmcView {
    /// debugfs bus timing (`mmc HS200`); absent without debugfs.
    #[serde(default)]
    pub timing: Option<String>,
    /// `MMC`, `SD`, `SDIO`.
    #[serde(default)]
    pub card_type: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CellView {
    pub workload: String,
    pub status: String,
    #[serde(default)]
    pub result: Option<ResultView>,
    /// What failed the cell or was noted on it: which figure, and whether marginal.
    #[serde(
        default,
        deserialize_with = "crate::report::decode::capped::<_, _, { crate::report::decode::MAX_CELLS }>"
    )]
    pub reasons: Vec<CellReasonView>,
    /// The earlier attempts of a cell measured again (retests): only their count is shown.
    #[serde(
        default,
        deserialize_with = "crate::report::decode::capped::<_, _, { crate::report::decode::MAX_CELLS }>"
    )]
    pub attempts: Vec<serde::de::IgnoredAny>,
}

/// A cell's reason as the table reads it (schema 2; schema 1's are sentences only).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum CellReasonView {
    Record {
        #[serde(default)]
        kind: Option<String>,
        #[serde(default)]
        metric: Option<String>,
        #[serde(default)]
        marginal: bool,
    },
    Sentence(serde::de::IgnoredAny),
}

/// Every figure optional: a newer build that drops or renames one loses that figure only.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ResultView {
    #[serde(default)]
    pub mib_per_s: Option<f64>,
    #[serde(default)]
    pub iops: Option<f64>,
    #[serde(default)]
    pub all: Option<OpView>,
    #[serde(default)]
    pub verify: Option<VerifyView>,
    #[serde(default)]
    pub precision: Option<PrecisionView>,
}

/// The figure's stated precision: half its 95 % confidence interval, in %; and the rate
/// after a drop (a write cache that filled), the figure that limits judge.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct PrecisionView {
    #[serde(default)]
    pub ci95_percent: Option<f64>,
    #[serde(default)]
    pub drop: Option<DropView>,
    #[serde(default)]
    pub steady_mib_per_s: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct DropView {
    #[serde(default)]
    pub burst_mib_per_s: Option<f64>,
    #[serde(default)]
    pub sustained_mib_per_s: Option<f64>,
    #[serde(default)]
    pub ci95_percent: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct OpView {
    #[serde(default)]
    pub latency: Option<LatencyView>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct LatencyView {
    /// Nanoseconds; read as a float so a newer build writing a fraction still loads.
    #[serde(default)]
    pub p99_ns: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct VerifyView {
    #[serde(default)]
    pub mismatched_blocks: Option<u64>,
}

/// What the document is when it parses but is not a mapping (a text file parses as one YAML
/// string): serde's own message would quote the whole file.
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

impl ReportView {
    /// Decodes one report file's bytes (YAML or JSON); `path` names it in errors. A newer
    /// `schema_version` is accepted when the fields shown still decode: showing what can be
    /// shown is this view's purpose.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<ReportView, ViewError> {
        let json = is_json(path, bytes);
        let name = path.display().to_string();
        match decode::<ReportView>(json, bytes) {
            Ok(r) if r.schema_version == 0 => Err(ViewError::NotAReport {
                path: name,
                msg: "schema_version 0 does not exist (reports start at 1)".into(),
            }),
            Ok(r) => Ok(r),
            Err(DecodeError::Refused(r)) => Err(ViewError::NotAReport {
                path: name,
                msg: r.to_string(),
            }),
            Err(DecodeError::Malformed(msg)) => match parse::<Probe>(json, bytes) {
                Ok(Probe {
                    schema_version: Some(v),
                }) if v > SCHEMA_VERSION => Err(ViewError::TooNew {
                    path: name,
                    version: v,
                    supported: SCHEMA_VERSION,
                    msg,
                }),
                _ => Err(ViewError::NotAReport {
                    path: name,
                    msg: match shape(json, bytes) {
                        Some(kind) => {
                            format!("the document is {kind}, not a mapping of report fields")
                        }
                        // serde names the field in backticks; people read it without.
                        None => shorten_quotes(&msg.replace('`', ""))
                            .replace("struct ReportView", "the mapping of a report"),
                    },
                }),
            },
        }
    }

    /// The same view of an in-memory report (the factory run at its end), field by field, so
    /// the run prints exactly what `show` prints of the file it wrote.
    pub fn from_report(r: &Report) -> ReportView {
        ReportView {
            schema_version: r.schema_version,
            status: Some(r.status.as_str().to_string()),
            interrupted_by: r.interrupted_by.clone(),
            started_at: Some(
                r.started_at
                    .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            ),
            unit: UnitView {
                hostname: r.unit.hostname.clone(),
                machine_id: r.unit.machine_id.clone(),
                model: r.unit.model.clone(),
                serial: r.unit.serial.clone(),
            },
            config: ConfigView {
                tests: r
                    .config
                    .tests
                    .iter()
                    .map(|t| TestView {
                        workload: t.workload.as_str().to_string(),
                    })
                    .collect(),
            },
            devices: r
                .devices
                .iter()
                .map(|d| DeviceView {
                    name: d.name.clone(),
                    label: d.label.clone(),
                    disk: DiskView {
                        class: Some(d.disk.class.as_str().to_string()),
                        usb: d.disk.usb.as_ref().map(|u| UsbView {
                            port_path: Some(u.port_path.clone()),
                            speed_mbps: u.speed_mbps,
                        }),
                        sata: d.disk.sata.as_ref().map(|s| SataView {
                            port: Some(s.port.clone()),
                            sata_spd_gbps: s.sata_spd_gbps,
                        }),
                        mmc: d.disk.mmc.as_ref().map(|m| MmcView {
                            timing: m.timing.clone(),
                            card_type: m.card_type.clone(),
                        }),
                    },
                    cells: d
                        .cells
                        .iter()
                        .map(|c| CellView {
                            workload: c.workload.as_str().to_string(),
                            status: c.status.as_str().to_string(),
                            reasons: c
                                .reasons
                                .iter()
                                .map(|r| CellReasonView::Record {
                                    kind: Some(r.kind.as_str().to_string()),
                                    metric: r.metric.clone(),
                                    marginal: r.marginal,
                                })
                                .collect(),
                            attempts: c.attempts.iter().map(|_| serde::de::IgnoredAny).collect(),
                            result: c.result.as_ref().map(|res| ResultView {
                                mib_per_s: Some(res.mib_per_s),
                                iops: Some(res.iops),
                                all: Some(OpView {
                                    latency: Some(LatencyView {
                                        p99_ns: Some(res.all.latency.p99_ns as f64),
                                    }),
                                }),
                                verify: res.verify.as_ref().map(|v| VerifyView {
                                    mismatched_blocks: Some(v.mismatched_blocks),
                                }),
                                precision: res.precision.as_ref().map(|p| PrecisionView {
                                    ci95_percent: p.ci95_percent,
                                    drop: p.drop.as_ref().map(|d| DropView {
                                        burst_mib_per_s: Some(d.burst_mib_per_s),
                                        sustained_mib_per_s: Some(d.sustained_mib_per_s),
                                        ci95_percent: d.ci95_percent,
                                    }),
                                    steady_mib_per_s: p.steady_mib_per_s,
                                }),
                            }),
                        })
                        .collect(),
                    verdict: VerdictView {
                        pass: d.verdict.pass,
                        reasons: super::verdict::texts(&d.verdict.reasons),
                    },
                })
                .collect(),
            missing_devices: r.missing_devices.clone(),
            verdict: VerdictView {
                pass: r.verdict.pass,
                reasons: super::verdict::texts(&r.verdict.reasons),
            },
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(name: &str, text: &str) -> Result<ReportView, ViewError> {
        ReportView::parse(Path::new(name), text.as_bytes())
    }

    const MINIMAL: &str = "schema_version: 1\nstatus: complete\ndevices:\n- name: sda\n  \
                           cells:\n  - {workload: seq-write, status: passed, result: \
                           {mib_per_s: 12.5, iops: 12.5}}\n  verdict: {pass: true}\n\
                           verdict: {pass: true}\n";

    #[test]
    fn unknown_fields_workloads_and_statuses_are_kept() {
        let text = MINIMAL
            .replace("status: complete", "status: paused\nnew_top: {a: [1]}")
            .replace("workload: seq-write", "workload: trim-curve, new_cell: 3")
            .replace("status: passed", "status: passed-with-notes");
        let r = parse("r.yaml", &text).unwrap();
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
                "schema_version: 1\ndevices: []\n",
                "missing field verdict",
            ),
            (
                "zero.json",
                r#"{"schema_version": 0, "verdict": {}}"#,
                "schema_version 0",
            ),
            ("bad.json", r#"{"schema_version": 1, "devices": ["#, "EOF"),
        ];
        for (file, text, want) in cases {
            let e = parse(file, text).unwrap_err().to_string();
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
        let msg = format!("invalid type: string \"{long}\", expected struct ReportView");
        let short = shorten_quotes(&msg);
        assert_eq!(
            short,
            format!(
                "invalid type: string \"{}...\", expected struct ReportView",
                &long[..40]
            )
        );
        assert_eq!(
            shorten_quotes("missing field schema_version"),
            "missing field schema_version"
        );
    }

    #[test]
    fn newer_schema_renders_when_it_decodes_and_is_named_when_not() {
        let newer = MINIMAL.replace("schema_version: 1", "schema_version: 9");
        assert_eq!(parse("n.yaml", &newer).unwrap().schema_version, 9);
        let changed = newer.replace("devices:\n-", "devices: {moved: true}\nold:\n-");
        let e = parse("n.yaml", &changed).unwrap_err().to_string();
        assert!(e.contains("schema_version 9 is newer"), "{e}");
    }

    #[test]
    fn json_is_told_from_yaml_by_extension_then_first_byte() {
        let json = r#"{"schema_version": 1, "verdict": {"pass": true}}"#;
        assert!(parse("r.json", json).is_ok());
        assert!(parse("r", json).is_ok());
        assert!(parse("r.yaml", MINIMAL).is_ok());
    }

    #[test]
    fn running_reports_are_not_judged() {
        let running = MINIMAL.replace("status: complete", "status: running");
        assert!(!parse("r.yaml", &running).unwrap().judged());
        assert!(parse("r.yaml", MINIMAL).unwrap().judged());
    }
}
