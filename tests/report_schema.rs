//! The published JSON Schemas are what the writer's types give: docs/report.schema.json and
//! docs/power-cut.schema.json must equal `report::json_schema::files()`, byte for byte. A
//! change to a report type that is not regenerated (`scripts/maint/gen-schema.sh`, which runs this
//! test with USBPERF_WRITE_SCHEMA=1) fails here. Built only with the `schema` feature
//! (scripts/test.sh runs the suite with it).
#![cfg(feature = "schema")]

use std::path::Path;

#[test]
fn the_schemas_in_docs_are_the_ones_the_types_give() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let write = std::env::var_os("USBPERF_WRITE_SCHEMA").is_some();
    let mut drifted = Vec::new();
    for (name, want) in usbperf::report::json_schema::files() {
        if write {
            std::fs::write(docs.join(name), &want).unwrap();
            eprintln!("wrote docs/{name}");
        }
        let have = std::fs::read_to_string(docs.join(name)).unwrap_or_default();
        if have != want {
            drifted.push(name);
        }
    }
    assert!(
        drifted.is_empty(),
        "docs/{} differ from the report's types: run scripts/maint/gen-schema.sh and commit the result",
        drifted.join(", docs/")
    );
}

/// The generated schema refuses what the writer never writes: a key no type has, a failed
/// cell without its reasons, a finished report without its exit code, an unknown metric in a
/// reason, a time in another spelling. A real report of the 6.1 guest is the base, valid as
/// it is.
#[test]
fn the_generated_schema_refuses_what_the_writer_never_writes() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let base = repo.join(
        "tests/fixtures/vm/x86_64-6.1/out/enospc/usbperf-VMUNIT0001-20261202T072357Z-f0980714.yaml",
    );
    let text = std::fs::read_to_string(&base).unwrap();
    let doc: serde_json::Value = serde_norway::from_str(&text).unwrap();
    type Edit = fn(&mut serde_json::Value);
    let cases: [(&str, bool, Edit); 6] = [
        ("as written", true, |_| {}),
        ("an unknown key on a device", false, |d| {
            d["devices"][0]["colour"] = "red".into();
        }),
        ("a failed cell without reasons", false, |d| {
            let c = &mut d["devices"][0]["cells"][0];
            c["status"] = "failed".into();
            c.as_object_mut().unwrap().remove("reasons");
        }),
        ("a complete report without its exit code", false, |d| {
            d["status"] = "complete".into();
            d.as_object_mut().unwrap().remove("exit_code");
        }),
        ("a reason with a metric the table lacks", false, |d| {
            d["verdict"]["reasons"] = serde_json::json!([
                {"kind": "threshold", "rule": "thresholds[0]", "metric": "furlongs",
                 "limit": 1.0, "unit": "MiB/s", "text": "slow"}
            ]);
        }),
        ("a start time that is not RFC 3339", false, |d| {
            d["started_at"] = "yesterday".into();
        }),
    ];
    let dir = std::env::temp_dir().join(format!("usbperf-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (what, valid, edit) in cases {
        let mut d = doc.clone();
        edit(&mut d);
        let path = dir.join("report.json");
        std::fs::write(&path, serde_json::to_vec(&d).unwrap()).unwrap();
        let out = std::process::Command::new(repo.join("scripts/ci/validate-report.py"))
            .arg(&path)
            .output()
            .expect("python3 with jsonschema and pyyaml (scripts/test.sh installs them)");
        assert_eq!(
            out.status.success(),
            valid,
            "{what}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
