//! The test fleets are written through the report's own types (tests/common/fleet_gen.rs), and
//! what those types write must read back as itself. Every generated schema 2 report decodes
//! through the one bounded decoder into `Report` and encodes back to the same document, field
//! for field: a serde attribute that writes what it does not read (or the reverse) fails here,
//! instead of the fleet's tests passing on data the reader takes differently. The generator's
//! schema 1 reports (what builds before schema 2 wrote) read through the same decoder, their
//! reasons as sentences. And what the types encode is valid against docs/report.schema.json,
//! which is generated from the same types (tests/report_schema.rs keeps it so).

#[path = "common/fleet_gen.rs"]
mod fleet_gen;

use std::path::Path;

use serde_json::Value;
use usbperf::report::decode;
use usbperf::report::schema::Report;

fn same_time(a: &str, b: &str) -> bool {
    match (
        chrono::DateTime::parse_from_rfc3339(a),
        chrono::DateTime::parse_from_rfc3339(b),
    ) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// Where `written` (the generator's document) and `typed` (the types' encoding of it) differ.
fn diff(path: &str, written: &Value, typed: &Value, out: &mut Vec<String>) {
    match (written, typed) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    Some(w) => diff(&format!("{path}.{k}"), v, w, out),
                    None => out.push(format!("{path}.{k}: not read back by the types")),
                }
            }
            for k in y.keys().filter(|k| !x.contains_key(*k)) {
                out.push(format!(
                    "{path}.{k}: written by the types, lost when read back"
                ));
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}[{i}]"), v, w, out);
            }
        }
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => {}
        (Value::String(x), Value::String(y)) if x == y || same_time(x, y) => {}
        _ if written == typed => {}
        _ => out.push(format!("{path}: {written} became {typed}")),
    }
}

fn generate(format: &str, schema: &str, dir: &Path) -> Vec<std::path::PathBuf> {
    let out = dir.to_str().unwrap();
    let args = [
        "--units",
        "40",
        "--schema",
        schema,
        "--seed",
        "11",
        "--outliers",
        "3",
    ];
    // a field report per unit too: the part's CID and wear, the phase
    let more = ["--slow-port-percent", "10", "--field-months", "1"];
    let tail = ["--format", format, "--out", out];
    let all: Vec<&str> = args.iter().chain(&more).chain(&tail).copied().collect();
    fleet_gen::generate_args(&all).files
}

#[test]
fn generated_reports_read_back_as_what_the_types_wrote() {
    for format in ["json", "yaml"] {
        let dir = std::env::temp_dir().join(format!(
            "usbperf-report-types-{format}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let files = generate(format, "2", &dir);
        assert_eq!(files.len(), 80);
        let mut failed_devices = 0;
        let typed_dir = dir.join("typed");
        std::fs::create_dir_all(&typed_dir).unwrap();
        for p in &files {
            let bytes = std::fs::read(p).unwrap();
            let json = format == "json";
            let r: Report = decode::decode(json, &bytes)
                .unwrap_or_else(|e| panic!("{}: does not decode as a Report: {e}", p.display()));
            failed_devices += r.devices.iter().filter(|d| !d.verdict.pass).count();
            let written: Value = if json {
                serde_json::from_slice(&bytes).unwrap()
            } else {
                serde_norway::from_slice(&bytes).unwrap()
            };
            let typed = serde_json::to_value(&r).unwrap();
            std::fs::write(
                typed_dir.join(p.with_extension("json").file_name().unwrap()),
                serde_json::to_vec_pretty(&typed).unwrap(),
            )
            .unwrap();
            let mut out = Vec::new();
            diff("", &written, &typed, &mut out);
            assert!(out.is_empty(), "{}:\n{}", p.display(), out.join("\n"));
        }
        // The planted problems are in the data compared, not only passing devices.
        assert!(
            failed_devices >= 3,
            "{format}: {failed_devices} failed devices"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Where a document holds a reason that is not a sentence.
fn reason_records(path: &str, v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let at = format!("{path}.{k}");
                match (k.as_str(), x) {
                    ("reasons", Value::Array(a)) => out.extend(
                        a.iter()
                            .enumerate()
                            .filter(|(_, r)| !r.is_string())
                            .map(|(i, _)| format!("{at}[{i}]")),
                    ),
                    _ => reason_records(&at, x, out),
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                reason_records(&format!("{path}[{i}]"), x, out);
            }
        }
        _ => {}
    }
}

/// The generator's schema 1 reports read through the one decoder as builds before schema 2
/// wrote them: every reason a sentence, the same verdicts as their schema 2 twins.
#[test]
fn schema_1_reports_read_with_their_reasons_as_sentences() {
    for format in ["json", "yaml"] {
        let base = std::env::temp_dir().join(format!(
            "usbperf-report-types-v1-{format}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&base);
        let v1 = generate(format, "1", &base.join("v1"));
        let v2 = generate(format, "2", &base.join("v2"));
        assert_eq!(v1.len(), v2.len());
        let json = format == "json";
        let mut failed = 0;
        for (a, b) in v1.iter().zip(&v2) {
            let old: Report = decode::decode(json, &std::fs::read(a).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", a.display()));
            let new: Report = decode::decode(json, &std::fs::read(b).unwrap()).unwrap();
            assert_eq!(old.schema_version, 1);
            assert_eq!(old.report_id, None, "{}", a.display());
            assert_eq!(old.verdict.pass, new.verdict.pass, "{}", a.display());
            let texts = |r: &Report| -> Vec<String> {
                r.verdict.reasons.iter().map(|x| x.text.clone()).collect()
            };
            assert_eq!(texts(&old), texts(&new), "{}", a.display());
            let bytes = std::fs::read(a).unwrap();
            let doc: Value = if json {
                serde_json::from_slice(&bytes).unwrap()
            } else {
                serde_norway::from_slice(&bytes).unwrap()
            };
            let mut records = Vec::new();
            reason_records("", &doc, &mut records);
            assert!(records.is_empty(), "{}: {records:?}", a.display());
            failed += usize::from(!old.verdict.pass);
        }
        assert!(failed >= 3, "{format}: {failed} failed units");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
