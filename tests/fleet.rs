//! `usbperf-matrix fleet` on synthetic fleets with planted problems (scripts/fleet-gen), on
//! damaged and newer reports, and on reports of real runs of the product on loop devices.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Writes a synthetic fleet with scripts/fleet-gen; returns the planted (unit, device,
/// problem) list.
fn generate(out: &Path, units: u32, format: &str, extra: &[&str]) -> Vec<(String, String, String)> {
    let truth = out.with_extension("truth.json");
    let o = Command::new("python3")
        .arg(repo().join("scripts/fleet-gen"))
        .args(["--units", &units.to_string(), "--format", format, "--out"])
        .arg(out)
        .arg("--truth")
        .arg(&truth)
        .args(extra)
        .output()
        .expect("python3 runs scripts/fleet-gen (apt-get install python3)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t: Value = serde_json::from_slice(&std::fs::read(&truth).unwrap()).unwrap();
    t.as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["unit"].as_str().unwrap().to_string(),
                x["device"].as_str().unwrap().to_string(),
                x["problem"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn fleet(args: &[&str]) -> Output {
    Command::new(bin())
        .arg("fleet")
        .args(args)
        .output()
        .unwrap()
}

fn fleet_json(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["--format", "json"]);
    let o = fleet(&a);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// (unit, device kernel name) of every outlier in the summary.
fn flagged(s: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for g in s["groups"].as_array().unwrap() {
        for m in g["metrics"].as_array().unwrap() {
            for o in m["outliers"].as_array().unwrap() {
                let dev = o["device"].as_str().unwrap().split(' ').next().unwrap();
                out.insert((o["unit"].as_str().unwrap().to_string(), dev.to_string()));
            }
        }
    }
    out
}

fn group<'v>(s: &'v Value, needle: &str) -> &'v Value {
    s["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"].as_str().unwrap().contains(needle))
        .unwrap_or_else(|| panic!("no group {needle}"))
}

fn metric<'v>(g: &'v Value, name: &str) -> &'v Value {
    g["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == name)
        .unwrap_or_else(|| panic!("no metric {name}"))
}

#[test]
fn planted_outliers_and_slow_port_are_found_and_nothing_else() {
    let d = TempDir::new("fleet-planted");
    let dir = d.path().join("reports");
    let truth = generate(&dir, 600, "yaml", &["--seed", "11"]);
    // Grouped by board and class (the default): the two boards' eMMCs are different
    // populations, and a robust z-score assumes one population per group.
    let s = fleet_json(&[dir.to_str().unwrap()]);
    assert_eq!(s["reports"], 600);
    assert_eq!(s["units"], 600);
    assert!(
        s["errors"].as_array().unwrap().is_empty(),
        "{}",
        s["errors"]
    );

    let planted: BTreeSet<(String, String)> =
        truth.iter().map(|t| (t.0.clone(), t.1.clone())).collect();
    assert_eq!(
        flagged(&s),
        planted,
        "flagged devices are exactly the planted ones"
    );

    // Every planted seq-write outlier stands out on its own figure.
    let usb_groups: Vec<&Value> = s["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["key"][1] == "usb")
        .collect();
    assert_eq!(usb_groups.len(), 2, "two boards");
    let sw: BTreeSet<String> = usb_groups
        .iter()
        .flat_map(|g| {
            metric(g, "seq-write.mib_per_s")["outliers"]
                .as_array()
                .unwrap()
        })
        .map(|o| o["unit"].as_str().unwrap().to_string())
        .collect();
    for t in truth.iter().filter(|t| t.2 == "seq-write-outlier") {
        assert!(sw.contains(&t.0), "{} missing from seq-write outliers", t.0);
    }
    // The slow port is the port with the link failures, one per slow unit.
    let slow = truth.iter().filter(|t| t.2 == "slow-port").count();
    assert_eq!(slow, 18, "3 % of 600");
    let ports = s["link_failures_by_port"].as_array().unwrap();
    assert_eq!(ports[0]["port"], "usb:1-2");
    assert_eq!(ports[0]["link_failures"], slow);
    let link_outliers: usize = usb_groups
        .iter()
        .map(|g| {
            let link = metric(g, "link_mbps");
            assert_eq!(link["median"], 480.0);
            link["outliers"].as_array().unwrap().len()
        })
        .sum();
    assert_eq!(link_outliers, slow);
    // Failure reasons are ranked, most frequent first, figures folded.
    let reasons = s["failure_reasons"].as_array().unwrap();
    let counts: Vec<u64> = reasons
        .iter()
        .map(|r| r["count"].as_u64().unwrap())
        .collect();
    assert!(counts.windows(2).all(|w| w[0] >= w[1]), "{counts:?}");
    assert!(reasons[0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("seq-write: N MiB/s < minimum 5"));
    assert_eq!(counts[0] as usize, slow + 5);
    // No eMMC value is an outlier: nothing was planted there.
    let emmc = group(&s, "device-class=emmc");
    for m in emmc["metrics"].as_array().unwrap() {
        assert!(
            m["outliers"].as_array().unwrap().is_empty(),
            "{}",
            m["metric"]
        );
    }
    // Percentiles are ordered and the trend covers the production period.
    let m = metric(emmc, "seq-read.mib_per_s");
    let f = |k: &str| m[k].as_f64().unwrap();
    assert!(f("min") <= f("p5") && f("p5") <= f("median") && f("median") <= f("p95"));
    assert!(f("p95") <= f("max"));
    assert_eq!(s["trend_bucket"], "daily");
    let trend_n: u64 = m["trend"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["count"].as_u64().unwrap())
        .sum();
    assert_eq!(trend_n, emmc["devices"].as_u64().unwrap());
}

/// The first place two values differ, numbers compared to 1e-12 relative (serde_json's fast
/// float parser may be one ulp off the YAML parser's).
fn differs(a: &Value, b: &Value, path: String) -> Option<String> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            ((x - y).abs() > 1e-12 * x.abs().max(y.abs())).then(|| format!("{path}: {x} vs {y}"))
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (x, y))| differs(x, y, format!("{path}[{i}]"))),
        (Value::Object(x), Value::Object(y)) if x.len() == y.len() => x
            .iter()
            .find_map(|(k, v)| differs(v, &y[k], format!("{path}.{k}"))),
        _ => (a != b).then(|| format!("{path}: {a} vs {b}")),
    }
}

#[test]
fn yaml_and_json_reports_give_the_same_figures() {
    let d = TempDir::new("fleet-formats");
    generate(&d.path().join("y"), 80, "yaml", &["--seed", "3"]);
    generate(&d.path().join("j"), 80, "json", &["--seed", "3"]);
    let strip = |mut v: Value| {
        // Only the file names differ.
        for g in v["groups"].as_array_mut().unwrap() {
            for m in g["metrics"].as_array_mut().unwrap() {
                for o in m["outliers"].as_array_mut().unwrap() {
                    o["file"] = Value::Null;
                }
            }
        }
        v["write_curves"] = Value::Null;
        v
    };
    let y = strip(fleet_json(&[d.path().join("y").to_str().unwrap()]));
    let j = strip(fleet_json(&[d.path().join("j").to_str().unwrap()]));
    for k in ["groups", "failure_reasons", "link_failures_by_port"] {
        if let Some(path) = differs(&y[k], &j[k], k.to_string()) {
            panic!("YAML and JSON fleets differ at {path}");
        }
    }
}

#[test]
fn damaged_newer_and_unfinished_reports_are_listed_and_skipped() {
    let d = TempDir::new("fleet-bad");
    let dir = d.path().join("r");
    generate(&dir, 12, "yaml", &["--outliers", "0"]);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let text = std::fs::read_to_string(&files[0]).unwrap();
    // Cut mid-way, as a power cut during the write leaves it.
    std::fs::write(dir.join("cut.yaml"), &text[..text.len() / 2]).unwrap();
    // Cut after the devices but before the final verdict.
    let before_verdict = text.rfind("\nverdict:").unwrap();
    std::fs::write(dir.join("cut-late.yaml"), &text[..before_verdict + 1]).unwrap();
    std::fs::write(
        dir.join("garbage.json"),
        "{\"schema_version\": 1, \"tool\": [",
    )
    .unwrap();
    // A newer schema, with a field of a new shape: rejected with the version named.
    let newer = text
        .replacen("schema_version: 1", "schema_version: 2", 1)
        .replacen(
            "devices:\n-",
            "devices: {changed: true}\nold_devices:\n-",
            1,
        );
    std::fs::write(dir.join("newer.yaml"), newer).unwrap();
    // Version 1 with fields this build does not know: loads.
    let extra = text.replacen(
        "status: complete",
        "status: complete\nnew_field: {a: [1, 2]}",
        1,
    );
    std::fs::write(dir.join("extra.yaml"), extra).unwrap();
    let running = text.replacen("status: complete", "status: running", 1);
    std::fs::write(dir.join("running.yaml"), running).unwrap();

    let s = fleet_json(&[dir.to_str().unwrap()]);
    assert_eq!(
        s["reports"], 13,
        "12 good ones and the one with extra fields"
    );
    let errors: Vec<String> = s["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["issue"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(errors.len(), 4, "{errors:#?}");
    let find = |name: &str| {
        errors
            .iter()
            .find(|e| e.contains(name))
            .unwrap_or_else(|| panic!("{name} not listed: {errors:#?}"))
    };
    assert!(find("cut.yaml").contains("truncated"));
    assert!(find("cut-late.yaml").contains("verdict"));
    assert!(find("garbage.json").contains("not a usbperf report"));
    assert!(find("newer.yaml").contains("schema_version 2 is newer"));
    let skipped = s["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1);
    assert!(skipped[0]["issue"]
        .as_str()
        .unwrap()
        .contains("status running"));
    // The table says so too, and the run still succeeds.
    let o = fleet(&[dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert!(err(&o).contains("newer.yaml"), "{}", err(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("4 files unreadable"));
}

#[test]
fn suggested_thresholds_are_a_profile_the_factory_run_accepts() {
    let d = TempDir::new("fleet-suggest");
    let dir = d.path().join("r");
    generate(&dir, 300, "json", &[]);
    let board = "Toradex Apalis iMX8QM V1.1 on Apalis Evaluation Board";
    let out = d.path().join("thresholds.yaml");
    let o = fleet(&[
        dir.to_str().unwrap(),
        "--board",
        board,
        "--suggest-thresholds",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    let cf = usbperf::matrix::config::parse(&text, "thresholds.yaml")
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    let ts = cf.thresholds.expect("a thresholds list");
    use usbperf::discover::DeviceClass;
    use usbperf::workload::WorkloadKind;
    let find = |class: DeviceClass, w: Option<WorkloadKind>| {
        ts.iter()
            .filter(|t| t.select.class == Some(class) && t.workload == w)
            .collect::<Vec<_>>()
    };
    // The board's eMMC writes at 42 MiB/s +-16 %: p1 about 36, less 20 %, 2 digits.
    let sw = find(DeviceClass::Emmc, Some(WorkloadKind::SeqWrite));
    let v = sw[0].min_mib_per_s.unwrap();
    assert!((25.0..=34.0).contains(&v), "{v}\n{text}");
    // USB limits come from passing sticks only: the 12M units and the slow writers failed.
    let sw = find(DeviceClass::Usb, Some(WorkloadKind::SeqWrite));
    let v = sw[0].min_mib_per_s.unwrap();
    assert!((8.0..=12.0).contains(&v), "{v}\n{text}");
    let link = find(DeviceClass::Usb, None);
    assert!(
        link.iter().any(|t| t.min_link_mbps == Some(480.0)),
        "{text}"
    );
    assert!(find(DeviceClass::Usb, Some(WorkloadKind::RandRead))
        .iter()
        .any(|t| t.min_iops.is_some() && t.max_p99_latency_ms.is_none()));
    assert!(text.contains("# Rule: minimum = p1 x 0.80"));

    // Two boards in one fleet: thresholds are per board, so --board is asked for.
    let o = fleet(&[dir.to_str().unwrap(), "--suggest-thresholds"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("--board"), "{}", err(&o));
}

#[test]
fn csv_table_since_and_group_by() {
    let d = TempDir::new("fleet-csv");
    let dir = d.path().join("r");
    generate(&dir, 60, "json", &["--start", "2026-09-01", "--days", "20"]);
    let o = fleet(&[
        dir.to_str().unwrap(),
        "--format",
        "csv",
        "--group-by",
        "device-model,port",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let csv = String::from_utf8(o.stdout).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "device-model,port,metric,count,pass_rate,min,p5,median,p95,max,outliers,units"
    );
    let rows: Vec<&str> = lines.collect();
    assert!(rows
        .iter()
        .any(|r| r.starts_with("Kingston DataTraveler 3.0,usb:1-2,seq-write.mib_per_s,")));
    assert!(rows
        .iter()
        .any(|r| r.starts_with("DG4016,mmcblk0,capacity_bytes,")));

    let all = fleet_json(&[dir.to_str().unwrap()]);
    let late = fleet_json(&[dir.to_str().unwrap(), "--since", "2026-09-11"]);
    let (n_all, n_late) = (
        all["reports"].as_u64().unwrap(),
        late["reports"].as_u64().unwrap(),
    );
    assert!(n_late > 0 && n_late < n_all, "{n_late} of {n_all}");
    assert_eq!(
        late["skipped"].as_array().unwrap().len() as u64,
        n_all - n_late
    );
    assert_eq!(late["first_day"], "2026-09-11");

    let o = fleet(&[dir.to_str().unwrap()]);
    let table = String::from_utf8(o.stdout).unwrap();
    assert!(table.contains("link-speed failures by port"));
    assert!(table.contains("seq-write.mib_per_s"));

    let o = fleet(&[dir.to_str().unwrap(), "--group-by", "board,colour"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("unknown --group-by dimension \"colour\""));
    let o = fleet(&[dir.to_str().unwrap(), "--since", "last tuesday"]);
    assert_eq!(o.status.code(), Some(2));
    let o = fleet(&[d.path().join("nowhere").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("no such file, or no reports"),
        "{}",
        err(&o)
    );
}

/// Reports of the product's own runs on a loop device: the fleet reads what the factory writes.
#[test]
fn reports_of_real_runs_aggregate() {
    let raw = Loop::new(64 << 20);
    let d = TempDir::new("fleet-real");
    let cfg = d.path().join("cfg.yaml");
    std::fs::write(
        &cfg,
        format!(
            "devices:\n  - {{select: {{name: {}}}, target: raw}}\n\
             tests:\n  - {{workload: seq-write, size: 8M}}\n  - {{workload: seq-read, size: 8M}}\n\
             \x20 - {{workload: write-curve, bs: 1M, size: 48M, runtime: 2s, cache: dsync, sample_interval: 100ms}}\n\
             thresholds:\n  - {{select: {{class: loop}}, workload: seq-write, min_mib_per_s: 1}}\n",
            raw.name()
        ),
    )
    .unwrap();
    let reports = d.path().join("reports");
    for (i, format) in ["yaml", "json"].iter().enumerate() {
        let o = Command::new(bin())
            .args(["run", "--config"])
            .arg(&cfg)
            .arg("--report-dir")
            .arg(&reports)
            .arg("--lock-file")
            .arg(d.path().join("lock"))
            .args(["--format", format])
            .output()
            .unwrap();
        assert!(o.status.code() == Some(0), "run {i}: {}", err(&o));
        // Report names carry the start second.
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    let s = fleet_json(&[reports.to_str().unwrap()]);
    assert_eq!(s["reports"], 2, "{s}");
    assert_eq!(s["units"], 1, "one machine ran both");
    assert!(
        s["errors"].as_array().unwrap().is_empty(),
        "{}",
        s["errors"]
    );
    let g = group(&s, "device-class=loop");
    assert_eq!(metric(g, "seq-write.mib_per_s")["count"], 2);
    assert_eq!(metric(g, "seq-write.mib_per_s")["pass_rate"], 1.0);
    assert_eq!(metric(g, "capacity_bytes")["median"], (64u64 << 20) as f64);
    assert!(
        metric(g, "seq-read.p99_latency_ms")["median"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    let drawn = s["factory_thresholds"].as_array().unwrap();
    assert!(drawn
        .iter()
        .any(|t| t["metric"] == "seq-write.mib_per_s" && t["value"] == 1.0));
    let curves = s["write_curves"].as_array().unwrap();
    assert_eq!(curves[0]["curves"].as_array().unwrap().len(), 2);
}
