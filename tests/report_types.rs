//! The report's description is its Rust types: what scripts/testdata/fleet-gen.py writes for the fleet's
//! and the collector's tests must be exactly what those types write. Every generated schema 2
//! report decodes through the one bounded decoder into `Report` and encodes back to the same
//! document, field for field (times compared as instants: the generator writes nanoseconds,
//! chrono microseconds). A field the types gain, lose or rename without the generator
//! following fails here, instead of the fleet's tests passing on data no unit writes. And
//! what the types encode is valid against docs/report.schema.json, which is generated from
//! the same types (tests/report_schema.rs keeps it so).

use std::path::Path;
use std::process::Command;

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
                    None => out.push(format!("{path}.{k}: not a field of the types")),
                }
            }
            for k in y.keys().filter(|k| !x.contains_key(*k)) {
                out.push(format!(
                    "{path}.{k}: written by the types, not by fleet-gen"
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

fn generate(format: &str, dir: &Path) {
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testdata/fleet-gen.py"))
        .args(["--units", "40", "--schema", "2", "--seed", "11"])
        .args([
            "--outliers",
            "3",
            "--slow-port-percent",
            "10",
            // a field report per unit too: the part's CID and wear, the phase
            "--field-months",
            "1",
            "--format",
            format,
        ])
        .arg("--out")
        .arg(dir)
        .output()
        .expect("python3 is needed for scripts/testdata/fleet-gen.py (apt-get install python3)");
    assert!(
        out.status.success(),
        "fleet-gen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn fleet_gen_writes_what_the_report_types_write() {
    for format in ["json", "yaml"] {
        let dir = std::env::temp_dir().join(format!(
            "usbperf-report-types-{format}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        generate(format, &dir);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
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
