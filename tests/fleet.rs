//! `usbperf-matrix fleet` on synthetic fleets with planted problems (tests/common/fleet_gen.rs), on
//! damaged and newer reports, and on reports of real runs of the product on loop devices.

mod common;
#[path = "common/fleet_gen.rs"]
mod fleet_gen;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Writes a synthetic fleet (tests/common/fleet_gen.rs); returns the planted (unit, device,
/// problem) list.
fn generate(out: &Path, units: u32, format: &str, extra: &[&str]) -> Vec<(String, String, String)> {
    let mut args = vec!["--units".to_string(), units.to_string(), "--format".into()];
    args.extend([
        format.to_string(),
        "--out".into(),
        out.display().to_string(),
    ]);
    let truth = out.with_extension("truth.json");
    args.extend(["--truth".to_string(), truth.display().to_string()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    fleet_gen::generate_args(&args)
        .truth
        .into_iter()
        .map(|t| (t.unit, t.device, t.problem))
        .collect()
}

fn fleet(args: &[&str]) -> Output {
    common::cmd().arg("fleet").args(args).output().unwrap()
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
        .replacen("schema_version: 1", "schema_version: 3", 1)
        .replacen(
            "devices:\n-",
            "devices: {changed: true}\nold_devices:\n-",
            1,
        );
    std::fs::write(dir.join("newer.yaml"), newer).unwrap();
    // Version 1 with fields this build does not know: loads. (A retest, so that it is not
    // a copy of the report it was made from.)
    let extra = set_line(&text, "started_at: ", "2027-03-01T00:00:00Z").replacen(
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
    assert!(find("newer.yaml").contains("schema_version 3 is newer"));
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
    let cf =
        usbperf::config::parse(&text, "thresholds.yaml").unwrap_or_else(|e| panic!("{e}\n{text}"));
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
    needs_root!("loop devices");
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
        let o = common::cmd()
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

/// Runs the fleet with stdout and stderr in files (a pipe could fill and stall it), killing it
/// after `limit`: `None` when it had to be killed (it hung).
fn fleet_bounded(
    dir: &Path,
    args: &[&str],
    limit: std::time::Duration,
) -> Option<(i32, String, String)> {
    let (out, errf) = (dir.join("fleet.stdout"), dir.join("fleet.stderr"));
    let mut child = common::cmd()
        .arg("fleet")
        .args(args)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&errf).unwrap())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let read = |p: &Path| std::fs::read_to_string(p).unwrap();
            return Some((st.code().unwrap_or(-1), read(&out), read(&errf)));
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn sorted_reports(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "json"))
        .collect();
    files.sort();
    files
}

/// A FIFO among the reports made the fleet block in `open` forever.
#[test]
fn fifo_socket_and_symlinks_to_them_are_skipped_unopened() {
    let d = TempDir::new("fleet-fifo");
    let dir = d.path().join("r");
    let units = 4;
    generate(&dir, units, "yaml", &["--outliers", "0"]);
    // A report elsewhere, linked in: a symlink to a regular file is read like the file.
    let other = d.path().join("other");
    generate(&other, 1, "yaml", &["--seed", "99", "--outliers", "0"]);
    let linked = sorted_reports(&other).remove(0);
    std::os::unix::fs::symlink(&linked, dir.join("linked.yaml")).unwrap();
    nix::unistd::mkfifo(&dir.join("fifo.yaml"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::os::unix::fs::symlink(dir.join("fifo.yaml"), dir.join("to-fifo.yaml")).unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(dir.join("sock.json")).unwrap();

    let args = [dir.to_str().unwrap(), "--format", "json"];
    let Some((code, out, stderr)) =
        fleet_bounded(d.path(), &args, std::time::Duration::from_secs(60))
    else {
        panic!("the fleet hung on a FIFO among the reports (killed after 60 s)");
    };
    assert_eq!(code, 0, "{stderr}");
    let s: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["reports"], units + 1, "the reports and the linked one");
    let odd: BTreeSet<String> = s["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "not-regular")
        .map(|e| {
            let name = Path::new(e["file"].as_str().unwrap()).file_name().unwrap();
            name.to_string_lossy().into_owned()
        })
        .collect();
    let want: BTreeSet<String> = ["fifo.yaml", "to-fifo.yaml", "sock.json"]
        .map(String::from)
        .into();
    assert_eq!(odd, want);
    assert!(
        s["errors"].as_array().unwrap().is_empty(),
        "{}",
        s["errors"]
    );
    for name in &want {
        assert!(stderr.contains(name.as_str()), "{name} not noted: {stderr}");
    }
    // The table lists them too.
    let (code, table, _) = fleet_bounded(
        d.path(),
        &[dir.to_str().unwrap()],
        std::time::Duration::from_secs(60),
    )
    .expect("no hang");
    assert_eq!(code, 0);
    assert!(
        table.contains("not regular files (skipped, never opened)"),
        "{table}"
    );
    assert!(
        table.contains("fifo.yaml: not a regular file (a FIFO)"),
        "{table}"
    );
}

/// Replaces the value of the first line starting with `key` (at the line's start).
fn set_line(text: &str, key: &str, value: &str) -> String {
    let at = text.find(&format!("\n{key}")).expect("key present") + 1;
    let end = at + text[at..].find('\n').unwrap();
    format!("{}{key}{value}{}", &text[..at], &text[end..])
}

/// A report copied twice (or collected again) counted twice.
#[test]
fn copies_of_a_report_count_once() {
    let d = TempDir::new("fleet-dup");
    let dir = d.path().join("r");
    let units = 6;
    generate(&dir, units, "yaml", &["--outliers", "0"]);
    let files = sorted_reports(&dir);
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    // The same bytes under another name (sorts after the original: the original counts).
    std::fs::copy(&files[0], dir.join("zz-copy.yaml")).unwrap();
    // The same report collected again, with a field added on the way: same unit, same start.
    std::fs::create_dir(dir.join("zz-again")).unwrap();
    let again = read(&files[1]).replacen("status: complete", "status: complete\ncollected: 2", 1);
    std::fs::write(dir.join("zz-again/recollected.yaml"), again).unwrap();
    // A retest of a unit: the same unit, a later start. Two reports, one unit.
    let t = read(&files[2]);
    std::fs::write(
        dir.join("retest.yaml"),
        set_line(&t, "started_at: ", "2027-01-05T10:00:00Z"),
    )
    .unwrap();
    // A report with an id (schema 2's field): its id is its identity, even with another
    // start time written in the copy.
    let t = read(&files[3]);
    let with_id = |start: &str| {
        set_line(&t, "started_at: ", start).replacen(
            "schema_version: 1",
            "schema_version: 1\nreport_id: 6f1c2a",
            1,
        )
    };
    std::fs::write(dir.join("id-a.yaml"), with_id("2027-02-01T00:00:00Z")).unwrap();
    std::fs::write(dir.join("id-b.yaml"), with_id("2027-02-02T00:00:00Z")).unwrap();
    // A report without an id that claims another's unit and start with other figures, named
    // to sort first: it cannot take the real one's place, both count.
    let t = read(&files[4]);
    let (at, end, _, _) = figure_at(&t, "mib_per_s", 0);
    let forged = format!("{}0.5{}", &t[..at], &t[end..]);
    std::fs::write(dir.join("aaa-forged.yaml"), forged).unwrap();

    let s = fleet_json(&[dir.to_str().unwrap()]);
    assert_eq!(
        s["reports"],
        units + 3,
        "the originals, the retest, id-a and the forged one beside the real one"
    );
    assert_eq!(s["units"], units);
    let dups: BTreeSet<(String, String)> = s["duplicates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            let name = |k: &str| {
                let p = Path::new(x[k].as_str().unwrap());
                p.strip_prefix(&dir).unwrap().display().to_string()
            };
            (name("file"), name("kept"))
        })
        .collect();
    let base = |i: usize| files[i].file_name().unwrap().to_string_lossy().into_owned();
    let want: BTreeSet<(String, String)> = [
        ("zz-copy.yaml".to_string(), base(0)),
        ("zz-again/recollected.yaml".to_string(), base(1)),
        ("id-b.yaml".to_string(), "id-a.yaml".to_string()),
    ]
    .into();
    assert_eq!(dups, want);
    let o = fleet(&[dir.to_str().unwrap()]);
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains(&format!("{} duplicate reports dropped", want.len())),
        "{table}"
    );
    assert!(err(&o).contains(&format!("dropped {} duplicate reports", want.len())));
}

/// The nth figure line `      <field>: <number>` (a cell result's own figure) of a report,
/// with its workload and device: where to plant a bad value and what the note must name.
fn figure_at(text: &str, field: &str, nth: usize) -> (usize, usize, String, String) {
    let key = format!("\n      {field}: ");
    let at = text.match_indices(&key).nth(nth).expect("figure present").0 + key.len();
    let end = at + text[at..].find('\n').unwrap();
    let before = &text[..at];
    let after_key = |k: &str| {
        let i = before.rfind(k).expect("context") + k.len();
        before[i..i + before[i..].find('\n').unwrap()].to_string()
    };
    let workload = after_key("\n      workload: ");
    let device = after_key("\n- name: ");
    (at, end, workload, device)
}

/// `1e308`, `.nan`, `.inf` and negative figures were accepted and broke the
/// table (a 309-digit column) and the charts. A number past its metric's ceiling or negative is
/// refused with a note and the report still counts; an infinity or NaN is nothing a unit
/// writes, so the report holding one is refused as a whole, named with the reason.
#[test]
fn absurd_figures_are_refused_with_a_note_and_the_report_still_counts() {
    let d = TempDir::new("fleet-figures");
    let dir = d.path().join("r");
    let units = 8;
    generate(&dir, units, "yaml", &["--outliers", "0"]);
    let clean = fleet_json(&[dir.to_str().unwrap()]);
    let files = sorted_reports(&dir);
    // (file, field, occurrence, bad value as YAML)
    let plants = [(0, "mib_per_s", 1, "1e308"), (2, "iops", 3, "-5")];
    let mut want = BTreeSet::new();
    for (i, field, nth, bad) in plants {
        let t = std::fs::read_to_string(&files[i]).unwrap();
        let (at, end, workload, device) = figure_at(&t, field, nth);
        std::fs::write(&files[i], format!("{}{bad}{}", &t[..at], &t[end..])).unwrap();
        let name = files[i].file_name().unwrap().to_string_lossy().into_owned();
        want.insert((name, device, format!("{workload}.{field}")));
    }
    let s = fleet_json(&[dir.to_str().unwrap()]);
    // The reports still count, with their verdicts.
    assert_eq!(s["reports"], clean["reports"]);
    assert_eq!(s["devices"], clean["devices"]);
    assert_eq!(s["device_pass_rate"], clean["device_pass_rate"]);
    let got: BTreeSet<(String, String, String)> = s["rejected_figures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let file = Path::new(f["file"].as_str().unwrap()).file_name().unwrap();
            let dev = f["device"].as_str().unwrap().split(' ').next().unwrap();
            (
                file.to_string_lossy().into_owned(),
                dev.to_string(),
                f["field"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(got, want);
    // Only the refused figures are missing from the distributions, and every figure left is
    // a finite, non-negative number (JSON writes NaN as null).
    let count = |s: &Value| -> u64 {
        s["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["metrics"].as_array().unwrap())
            .map(|m| m["count"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(count(&s), count(&clean) - want.len() as u64);
    for g in s["groups"].as_array().unwrap() {
        for m in g["metrics"].as_array().unwrap() {
            for k in ["min", "p5", "median", "p95", "max"] {
                let v = m[k].as_f64().unwrap_or(f64::NAN);
                assert!(v.is_finite() && v >= 0.0, "{} {k} = {}", m["metric"], m[k]);
            }
        }
    }
    // The table and the page show no monster figure and say what was refused.
    let o = fleet(&[dir.to_str().unwrap()]);
    let table = String::from_utf8_lossy(&o.stdout).into_owned();
    let longest_number = table
        .split(|c: char| !c.is_ascii_digit())
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert!(
        longest_number < 20,
        "a {longest_number}-digit figure in the table"
    );
    assert!(
        table.contains(&format!("{} figures refused", want.len())),
        "{table}"
    );
    for (file, _, field) in &want {
        assert!(
            table
                .lines()
                .any(|l| l.contains(file.as_str()) && l.contains(field.as_str())),
            "{file} {field} not noted:\n{table}"
        );
    }
    let o = fleet(&[dir.to_str().unwrap(), "--format", "html"]);
    let html = String::from_utf8_lossy(&o.stdout);
    // The note quotes the refused values; nothing before it may hold one.
    let charts = &html[..html
        .find("<h2>Refused figures")
        .expect("the page lists them")];
    assert!(
        !charts.contains("NaN") && !charts.contains("inf"),
        "NaN or inf drawn"
    );
    // An infinity or NaN: the report is refused, named, and the others still count.
    for (i, field, nth, bad) in [(1, "mib_per_s", 2, ".nan"), (3, "iops", 0, ".inf")] {
        let t = std::fs::read_to_string(&files[i]).unwrap();
        let (at, end, _, _) = figure_at(&t, field, nth);
        std::fs::write(&files[i], format!("{}{bad}{}", &t[..at], &t[end..])).unwrap();
    }
    let s = fleet_json(&[dir.to_str().unwrap()]);
    assert_eq!(
        s["reports"].as_u64().unwrap(),
        clean["reports"].as_u64().unwrap() - 2,
        "{s}"
    );
    let errors = s["errors"].to_string();
    for i in [1, 3] {
        let name = files[i].file_name().unwrap().to_string_lossy().into_owned();
        assert!(errors.contains(&name), "{name} not named: {errors}");
    }
    assert!(errors.contains("not finite"), "{errors}");
}

/// A `--board` typo or a directory of garbage gave "0 reports" and exit 0.
#[test]
fn nothing_matched_says_why_and_exits_non_zero() {
    let d = TempDir::new("fleet-none");
    let dir = d.path().join("r");
    generate(&dir, 10, "json", &[]);
    let s = fleet_json(&[dir.to_str().unwrap()]);
    let boards: BTreeSet<String> = s["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["key"][0].as_str().unwrap().to_string())
        .collect();
    assert!(boards.len() > 1, "the generator writes several boards");
    let out = d.path().join("fleet.html");
    let typo = "Toradex Apalis";
    let o = fleet(&[
        dir.to_str().unwrap(),
        "--board",
        typo,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a filter that matched nothing: {}",
        err(&o)
    );
    assert!(
        err(&o).contains(&format!("--board {typo:?} matched none")),
        "{}",
        err(&o)
    );
    for b in &boards {
        assert!(err(&o).contains(b.as_str()), "{b} not listed: {}", err(&o));
    }
    assert!(!out.exists(), "nothing is written when nothing matched");
    let o = fleet(&[dir.to_str().unwrap(), "--since", "2999-01-01"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("--since 2999-01-01"), "{}", err(&o));

    // Garbage only: exit 4, with counts and the first reasons.
    let junk = d.path().join("junk");
    std::fs::create_dir(&junk).unwrap();
    let names = ["a.yaml", "b.json", "c.yml"];
    for n in names {
        std::fs::write(junk.join(n), "not: [a report").unwrap();
    }
    let o = fleet(&[junk.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    let e = err(&o);
    let last = e.lines().last().unwrap_or("");
    assert!(
        last.contains(&format!(
            "{} report files, {} unreadable",
            names.len(),
            names.len()
        )),
        "{e}"
    );
    assert!(last.contains("a.yaml"), "the first reason is named: {e}");

    // Only unfinished runs: readable, but nothing to aggregate either.
    let running = d.path().join("running");
    std::fs::create_dir(&running).unwrap();
    let f = &sorted_reports(&dir)[0];
    let t = std::fs::read_to_string(f).unwrap().replacen(
        "\"status\": \"complete\"",
        "\"status\": \"running\"",
        1,
    );
    assert!(t.contains("\"running\""));
    std::fs::write(running.join("r.json"), t).unwrap();
    let o = fleet(&[running.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    assert!(err(&o).contains("1 unfinished runs"), "{}", err(&o));
}

/// Values that broke or could break the reader or the renderers, written
/// as YAML and JSON spell them, valid or not.
const BAD_NUMBERS: [&str; 14] = [
    "1e308",
    "-1e308",
    ".nan",
    ".inf",
    "-.inf",
    "NaN",
    "-5",
    "0",
    "-0",
    "1e-320",
    "18446744073709551616",
    "99999999999999999999999",
    "1e999",
    "-9223372036854775809",
];

/// Keys of the figures the fleet reads (YAML `key: v` and JSON `"key": v` alike).
const FIGURE_KEYS: [&str; 7] = [
    "mib_per_s",
    "iops",
    "p99_ns",
    "speed_mbps",
    "size_bytes",
    "t_s",
    "min_mib_per_s",
];

fn lines_of(b: &[u8]) -> Vec<Vec<u8>> {
    b.split_inclusive(|&c| c == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

/// One to three mutations of a real report: byte flips, truncation, duplicated, removed,
/// swapped or re-indented lines, inserted garbage, numbers replaced by bad ones.
fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(3) {
        if b.is_empty() {
            break;
        }
        match rng.below(9) {
            0 => {
                for _ in 0..1 + rng.below(8) {
                    let i = rng.below(b.len());
                    b[i] ^= 1 << rng.below(8);
                }
            }
            1 => b.truncate(rng.below(b.len())),
            2..=4 => {
                let mut l = lines_of(&b);
                let i = rng.below(l.len());
                match rng.below(4) {
                    0 => {
                        let dup = l[i].clone();
                        l.insert(i, dup);
                    }
                    1 => {
                        l.remove(i);
                    }
                    2 => {
                        let j = rng.below(l.len());
                        l.swap(i, j);
                    }
                    _ => {
                        l[i].splice(0..0, *b"  ");
                    }
                }
                b = l.concat();
            }
            5 => {
                let at = rng.below(b.len());
                let junk: Vec<u8> = (0..1 + rng.below(16)).map(|_| rng.next() as u8).collect();
                b.splice(at..at, junk);
            }
            n => {
                // A number token (digits, '.', 'e', '-') replaced by a bad value: any number,
                // or (most numbers are in fields the fleet does not read) one the fleet reads.
                let starts: Vec<usize> = if n == 6 {
                    (0..b.len())
                        .filter(|&i| {
                            b[i].is_ascii_digit() && (i == 0 || b" :[,-".contains(&b[i - 1]))
                        })
                        .collect()
                } else {
                    let key = FIGURE_KEYS[rng.below(FIGURE_KEYS.len())].as_bytes();
                    (0..b.len())
                        .filter(|&i| b[i..].starts_with(key))
                        .map(|i| i + key.len())
                        .filter_map(|i| match b.get(i..i + 2) {
                            Some([b':', _]) => Some(i + 1),
                            Some(b"\":") => Some(i + 2),
                            _ => None,
                        })
                        .map(|i| i + b[i..].iter().take_while(|c| **c == b' ').count())
                        .collect()
                };
                if starts.is_empty() {
                    continue;
                }
                let s = starts[rng.below(starts.len())];
                let e = s + b[s..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit() || b".e-+".contains(c))
                    .count();
                let v = BAD_NUMBERS[rng.below(BAD_NUMBERS.len())];
                b.splice(s..e, v.bytes());
            }
        }
    }
    b
}

/// What a fuzz run did.
#[derive(Debug, Default)]
struct FuzzCount {
    inputs: usize,
    panics: usize,
    /// Mutated reports that still loaded (so the figures' checks, not only the parser, ran).
    loaded: usize,
    rejected_figures: usize,
}

/// Feeds batches of mutated reports (plus one intact one, so aggregation has data) through
/// the whole pipeline: walk, read, parse, extract, dedupe, aggregate, every renderer. Stops
/// after `batches` or at `deadline`.
fn fuzz_fleet(seed: u64, batches: usize, deadline: Option<std::time::Instant>) -> FuzzCount {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use usbperf::fleet::aggregate::{aggregate, FleetOptions};
    use usbperf::fleet::{html, text, thresholds};

    let d = TempDir::new("fleet-fuzz");
    let seeds_dir = d.path().join("seeds");
    generate(&seeds_dir.join("y"), 3, "yaml", &["--seed", "5"]);
    generate(&seeds_dir.join("j"), 2, "json", &["--seed", "6"]);
    let seeds: Vec<(Vec<u8>, &str)> = ["y", "j"]
        .iter()
        .flat_map(|f| sorted_reports(&seeds_dir.join(f)))
        .map(|p| {
            let ext = if p.extension().is_some_and(|e| e == "json") {
                "json"
            } else {
                "yaml"
            };
            (std::fs::read(&p).unwrap(), ext)
        })
        .collect();
    let mut rng = Rng(seed | 1);
    let mut c = FuzzCount::default();
    let batch_dir = d.path().join("batch");
    for batch in 0..batches {
        if deadline.is_some_and(|t| std::time::Instant::now() >= t) {
            break;
        }
        let _ = std::fs::remove_dir_all(&batch_dir);
        std::fs::create_dir(&batch_dir).unwrap();
        let (good, ext) = &seeds[rng.below(seeds.len())];
        // Named to sort last: a mutant with the seed's identity is then the copy that counts.
        std::fs::write(batch_dir.join(format!("zz-good.{ext}")), good).unwrap();
        let n = 1 + rng.below(4);
        for i in 0..n {
            let (s, ext) = &seeds[rng.below(seeds.len())];
            std::fs::write(batch_dir.join(format!("m{i}.{ext}")), mutate(s, &mut rng)).unwrap();
        }
        c.inputs += n;
        let dir = batch_dir.clone();
        let run = catch_unwind(AssertUnwindSafe(|| {
            let opts = FleetOptions {
                load: usbperf::fleet::load::LoadOptions {
                    threads: 1,
                    ..Default::default()
                },
                ..FleetOptions::default()
            };
            let acc = aggregate(&[dir], opts).expect("the batch holds files");
            let _ = acc.nothing_matched();
            let boards = acc.boards();
            let s = acc.finish();
            let sopts = thresholds::SuggestOptions::default();
            let sug = thresholds::suggest(&s, &sopts);
            let mut len = text::render_table(&s, 80).len() + text::render_csv(&s).len();
            len += html::render_html(&s, &sug).len();
            len += thresholds::render_snippet(boards.first().map_or("", |b| b), &s, &sug, &sopts)
                .len();
            len += serde_json::to_string(&s).unwrap().len();
            len += serde_norway::to_string(&s).unwrap().len();
            assert!(len > 0);
            // The intact report counts once, as a record or as a copy of a mutant.
            (s.reports + s.duplicates.len() - 1, s.rejected_figures.len())
        }));
        if let Ok((loaded, rejected)) = run {
            c.loaded += loaded;
            c.rejected_figures += rejected;
        } else {
            c.panics += 1;
            let keep = std::env::temp_dir().join(format!("usbperf-fuzz-fleet-{seed}-{batch}"));
            let _ = std::fs::rename(&batch_dir, &keep);
            eprintln!(
                "fuzz fleet: panic on batch {batch}, inputs kept in {}",
                keep.display()
            );
        }
    }
    c
}

/// The fleet reader and renderers on mutated real reports: no input may panic. Fixed seed and
/// size, a few seconds; `fuzz_fleet_long` runs for as long as asked.
#[test]
fn fuzz_fleet_reader_and_renderers_do_not_panic() {
    let start = std::time::Instant::now();
    let batches = 100;
    let c = fuzz_fleet(0x9e37_79b9_7f4a_7c15, batches, None);
    println!(
        "fuzz fleet: {} inputs, {} panics, {:.1} s ({c:?})",
        c.inputs,
        c.panics,
        start.elapsed().as_secs_f64()
    );
    assert!(
        c.inputs >= batches,
        "every batch holds at least one mutated report"
    );
    // A fuzz that only ever hits parse errors tests little: some mutants must load and some
    // bad figures must reach the checks.
    assert!(c.loaded > 0 && c.rejected_figures > 0, "{c:?}");
    assert_eq!(
        c.panics, 0,
        "inputs that panicked are kept under the temp dir"
    );
}

/// The long fuzz run: `USBPERF_FUZZ_SECS` (default 60) seconds, seed from `USBPERF_FUZZ_SEED`
/// or the clock (printed, to replay a failure).
#[test]
#[ignore = "long: cargo test --test fleet fuzz_fleet_long -- --ignored --nocapture"]
fn fuzz_fleet_long() {
    let secs = common::fuzz_secs();
    let seed = common::fuzz_seed();
    let start = std::time::Instant::now();
    let deadline = start + std::time::Duration::from_secs(secs);
    let c = fuzz_fleet(seed, usize::MAX, Some(deadline));
    println!(
        "fuzz fleet: {} inputs, {} panics ({:.0} s, seed {seed}; {} loaded, {} figures refused)",
        c.inputs,
        c.panics,
        start.elapsed().as_secs_f64(),
        c.loaded,
        c.rejected_figures
    );
    assert_eq!(
        c.panics, 0,
        "inputs that panicked are kept under the temp dir"
    );
}

/// Every `text` of every reason in a JSON report replaced: the sentences people read, which
/// may be reworded in any release.
fn reword(v: &mut Value, n: &mut usize) {
    match v {
        Value::Object(m) => {
            if m.contains_key("kind") && m.get("text").is_some_and(Value::is_string) {
                *n += 1;
                m.insert(
                    "text".into(),
                    Value::String(format!("reworded message {n}")),
                );
            }
            for x in m.values_mut() {
                reword(x, n);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| reword(x, n)),
        _ => {}
    }
}

/// What the fleet ranks, without the one verbatim sentence shown per reason.
fn figures(mut v: Value) -> Value {
    let strip = |rs: &mut Value| {
        for r in rs.as_array_mut().unwrap() {
            r["example"] = Value::Null;
        }
    };
    strip(&mut v["failure_reasons"]);
    for g in v["groups"].as_array_mut().unwrap() {
        strip(&mut g["failure_reasons"]);
        for m in g["metrics"].as_array_mut().unwrap() {
            for o in m["outliers"].as_array_mut().unwrap() {
                o["file"] = Value::Null;
            }
        }
    }
    v["write_curves"] = Value::Null;
    v
}

#[test]
fn rewording_every_verdict_message_leaves_the_fleet_figures_unchanged() {
    // Schema 2 ranks failures and link failures by the records, so a
    // release that rewords every sentence changes no ranking, count or port figure.
    let d = TempDir::new("fleet-reword");
    let v2 = d.path().join("v2");
    let reworded = d.path().join("reworded");
    generate(
        &v2,
        120,
        "json",
        &["--seed", "5", "--schema", "2", "--slow-port-percent", "6"],
    );
    std::fs::create_dir_all(&reworded).unwrap();
    let mut n = 0;
    for f in sorted_reports(&v2) {
        let mut doc: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        reword(&mut doc, &mut n);
        std::fs::write(
            reworded.join(f.file_name().unwrap()),
            serde_json::to_vec_pretty(&doc).unwrap(),
        )
        .unwrap();
    }
    assert!(n > 20, "only {n} reasons reworded");
    let a = fleet_json(&[v2.to_str().unwrap()]);
    let b = fleet_json(&[reworded.to_str().unwrap()]);
    assert!(
        b["failure_reasons"][0]["example"]
            .as_str()
            .unwrap()
            .starts_with("reworded message"),
        "the sentences did change: {}",
        b["failure_reasons"]
    );
    let (a, b) = (figures(a), figures(b));
    assert!(a["failure_reasons"].as_array().unwrap().len() >= 3);
    let slow = &a["link_failures_by_port"][0];
    assert!(slow["link_failures"].as_u64().unwrap() > 0, "{slow}");
    for k in [
        "groups",
        "failure_reasons",
        "link_failures_by_port",
        "units",
        "devices",
    ] {
        if let Some(path) = differs(&a[k], &b[k], k.to_string()) {
            panic!("rewording the messages changed the fleet at {path}");
        }
    }
}

#[test]
fn schema_1_and_schema_2_of_the_same_fleet_count_the_same() {
    // The same fleet written by a schema 1 build and a schema 2 build: the same units,
    // passes, reason counts and link failures per port (the reasons' keys differ: masked
    // sentences against records).
    let d = TempDir::new("fleet-v1-v2");
    for (dir, schema) in [("v1", "1"), ("v2", "2")] {
        generate(
            &d.path().join(dir),
            80,
            "yaml",
            &["--seed", "9", "--schema", schema],
        );
    }
    let one = fleet_json(&[d.path().join("v1").to_str().unwrap()]);
    let two = fleet_json(&[d.path().join("v2").to_str().unwrap()]);
    let counts = |v: &Value| {
        let mut c: Vec<u64> = v["failure_reasons"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["count"].as_u64().unwrap())
            .collect();
        c.sort_unstable();
        c
    };
    assert_eq!(counts(&one), counts(&two));
    for k in [
        "link_failures_by_port",
        "units",
        "devices",
        "unit_pass_rate",
    ] {
        if let Some(path) = differs(&one[k], &two[k], k.to_string()) {
            panic!("schema 1 and 2 differ at {path}");
        }
    }
}

#[test]
fn a_schema_1_report_of_commit_4124e44_still_reads() {
    // tests/fixtures/reports/v1-4124e44.yaml: written by the build at 4124e44 (schema 1, no
    // report_id, reasons as sentences); the fleet and show read it as they did.
    let f = fixtures().join("reports/v1-4124e44.yaml");
    validate_reports(std::slice::from_ref(&f));
    let s = fleet_json(&[f.to_str().unwrap()]);
    assert_eq!(s["reports"], 1);
    assert_eq!(s["devices"], 1);
    assert_eq!(s["device_pass_rate"], 0.0);
    let reasons: Vec<(String, u64)> = s["failure_reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["reason"].as_str().unwrap().to_string(),
                r["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    // The schema 1 fallback: measured figures masked in the sentence, limits kept.
    assert!(
        reasons.iter().any(|(r, n)| *n == 1
            && r == "seq-write: N MiB/s < minimum 1000000 MiB/s [thresholds[0] (class loop)]"),
        "{reasons:?}"
    );
    let o = common::cmd()
        .args(["show", f.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("loop0: capacity: 64M is below the 1G required"),
        "{text}"
    );
}

/// First-pass yield, retest and marginal rates from a generated fleet with planted rates: every
/// fourth unit's first device passed after a retest, every fifth one's carried a marginal
/// figure, and the units alternate between two stations.
#[test]
fn first_pass_yield_retest_and_marginal_rates_per_board_station_and_class() {
    let d = TempDir::new("fleet-yield");
    let dir = d.path().join("r");
    let units = 20;
    generate(&dir, units, "yaml", &["--outliers", "0"]);
    let files = sorted_reports(&dir);
    assert_eq!(files.len(), units as usize);
    let (mut devices, mut first_pass, mut retested, mut marginal) = (0usize, 0, 0, 0);
    let mut by_station: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (i, f) in files.iter().enumerate() {
        let mut v: serde_norway::Value =
            serde_norway::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        let station = if i % 2 == 0 { "st-A" } else { "st-B" };
        v["config"]["station"] = station.into();
        let devs = v["devices"].as_sequence_mut().unwrap();
        for (k, dev) in devs.iter_mut().enumerate() {
            let verdict = &mut dev["verdict"];
            let pass = verdict["pass"].as_bool().unwrap();
            let retest = k == 0 && i % 4 == 0 && pass;
            if retest {
                verdict["retests"] = 1.into();
            }
            let m = k == 0 && i % 5 == 0;
            if m {
                verdict["marginal"] = true.into();
            }
            devices += 1;
            first_pass += usize::from(pass && !retest);
            retested += usize::from(retest);
            marginal += usize::from(m);
            let e = by_station.entry(station.into()).or_default();
            e.0 += 1;
            e.1 += usize::from(pass && !retest);
        }
        std::fs::write(f, serde_norway::to_string(&v).unwrap()).unwrap();
    }
    let s = fleet_json(&[dir.to_str().unwrap()]);
    let rows = s["yields"].as_array().unwrap();
    let row = |dim: &str, value: &str| {
        rows.iter()
            .find(|r| r["dimension"] == dim && r["value"] == value)
            .unwrap_or_else(|| panic!("no {dim}={value} in {rows:#?}"))
    };
    let close = |got: &Value, want: f64| (got.as_f64().unwrap() - want).abs() < 1e-9;
    // Over all classes, the per-class rows add up to the planted totals.
    let classes: Vec<&Value> = rows
        .iter()
        .filter(|r| r["dimension"] == "device-class")
        .collect();
    let n: u64 = classes.iter().map(|r| r["devices"].as_u64().unwrap()).sum();
    assert_eq!(n as usize, devices);
    let sum = |field: &str| -> f64 {
        classes
            .iter()
            .map(|r| r[field].as_f64().unwrap() * r["devices"].as_f64().unwrap())
            .sum()
    };
    assert!((sum("first_pass_yield") - first_pass as f64).abs() < 1e-6);
    assert!((sum("retest_rate") - retested as f64).abs() < 1e-6);
    assert!((sum("marginal_rate") - marginal as f64).abs() < 1e-6);
    let retested_after: u64 = classes
        .iter()
        .map(|r| r["passed_after_retest"].as_u64().unwrap())
        .sum();
    assert_eq!(retested_after as usize, retested);
    for (station, (n, first)) in &by_station {
        let r = row("station", station);
        assert_eq!(r["devices"], *n as u64, "{r}");
        assert!(
            close(&r["first_pass_yield"], *first as f64 / *n as f64),
            "{r}"
        );
    }
    assert!(rows.iter().any(|r| r["dimension"] == "board"), "{rows:#?}");
    // The text output shows the table once reports carry retests.
    let o = fleet(&[dir.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("first-pass yield (device tests):"), "{text}");
    assert!(text.contains("st-A"), "{text}");
}

/// The distance of each group's figures to the factory limits on them: from the generated
/// fleet's own thresholds (seq-write at least 10 MiB/s on eMMC, 5 MiB/s and 500 IOPS on USB,
/// a 480M link), checked against the figures read straight from the reports.
#[test]
fn each_groups_distance_to_its_class_limits() {
    let d = TempDir::new("fleet-limits");
    let dir = d.path().join("r");
    generate(&dir, 30, "yaml", &["--outliers", "0"]);
    // (board, class, metric) -> every figure of the reports.
    let mut figures: BTreeMap<(String, String, String), Vec<f64>> = BTreeMap::new();
    for f in sorted_reports(&dir) {
        let v: Value = serde_norway::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let board = v["unit"]["model"]
            .as_str()
            .unwrap_or("unknown board")
            .to_string();
        for dev in v["devices"].as_array().unwrap() {
            let class = dev["disk"]["class"].as_str().unwrap().to_string();
            for c in dev["cells"].as_array().unwrap() {
                if let Some(m) = c["result"]["mib_per_s"].as_f64() {
                    let w = c["workload"].as_str().unwrap();
                    figures
                        .entry((board.clone(), class.clone(), format!("{w}.mib_per_s")))
                        .or_default()
                        .push(m);
                }
            }
        }
    }
    let s = fleet_json(&[dir.to_str().unwrap()]);
    let mut checked = 0;
    for g in s["groups"].as_array().unwrap() {
        let key: Vec<&str> = g["key"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        let (board, class) = (key[0], key[1]);
        for m in g["metrics"].as_array().unwrap() {
            let metric = m["metric"].as_str().unwrap();
            let limits = m.get("limits").and_then(Value::as_array);
            let want: Option<f64> = match (class, metric) {
                ("emmc", "seq-write.mib_per_s") => Some(10.0),
                ("usb", "seq-write.mib_per_s") => Some(5.0),
                ("usb", "rand-read.iops") => Some(500.0),
                ("usb", "link_mbps") => Some(480.0),
                _ => None,
            };
            let Some(limit) = want else {
                assert!(
                    limits.is_none(),
                    "{board}/{class} {metric}: no limit on it: {m}"
                );
                continue;
            };
            let l = &limits.unwrap_or_else(|| panic!("{board}/{class} {metric}: {m}"))[0];
            assert_eq!(l["bound"], "min");
            assert_eq!(l["limit"].as_f64(), Some(limit));
            // Which limit: the factory's, with the units that ran under it (every generated
            // unit of this board ran under its board's config).
            let units = l["units"].as_u64().unwrap();
            assert!(
                units > 0 && units <= s["units"].as_u64().unwrap(),
                "{l}: units {units}"
            );
            let pct = |v: f64| (v - limit) / limit * 100.0;
            let close = |got: &Value, want: f64| (got.as_f64().unwrap() - want).abs() < 1e-6;
            assert!(
                close(&l["median_percent"], pct(m["median"].as_f64().unwrap())),
                "{l}"
            );
            assert!(
                close(&l["p5_percent"], pct(m["p5"].as_f64().unwrap())),
                "{l}"
            );
            if metric == "seq-write.mib_per_s" {
                // The worst figure, found in the reports themselves.
                let raw = &figures[&(board.to_string(), class.to_string(), metric.to_string())];
                let worst = raw.iter().cloned().fold(f64::INFINITY, f64::min);
                assert!(
                    close(&l["worst_percent"], pct(worst)),
                    "{l} against {worst}"
                );
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 2,
        "both classes' seq-write limits were checked: {checked}"
    );
    // Grouped by board alone, a group holds several classes: no class's limit applies to it.
    let s = fleet_json(&[dir.to_str().unwrap(), "--group-by", "board"]);
    for g in s["groups"].as_array().unwrap() {
        for m in g["metrics"].as_array().unwrap() {
            assert!(m.get("limits").is_none(), "{m}");
        }
    }
    // The page has them as a table, a row per group, metric and limit.
    let o = fleet(&[dir.to_str().unwrap(), "--format", "html"]);
    let page = String::from_utf8_lossy(&o.stdout);
    assert!(
        page.contains("<h2>Distance to the limits</h2>"),
        "no limits table"
    );
    assert!(
        page.contains("<td>seq-write.mib_per_s</td><td>min 10</td>"),
        "no eMMC seq-write row"
    );
    // The terminal says the same, per group.
    let o = fleet(&[dir.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("distance to the factory's limits, the ones most units ran under"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("metric")
            && l.contains(" limit ")
            && l.contains(" units ")),
        "{text}"
    );
    assert!(
        page.contains("<th>limit</th><th>units</th>"),
        "no units column"
    );
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("seq-write.mib_per_s") && l.contains("min 10")),
        "{text}"
    );
}

/// Regressions between image builds on generated fleets: one with an 18 % slower eMMC
/// seq-write planted in its second build, and one of noise only. The first is named, on every
/// board, for that figure alone; the second names nothing.
#[test]
fn a_planted_regression_between_builds_is_named_and_noise_is_not() {
    let d = TempDir::new("fleet-builds");
    let builds = |name: &str, extra: &[&str]| {
        let dir = d.path().join(name);
        let mut args = vec!["--outliers", "0", "--slow-port-percent", "0"];
        args.extend(["--builds", "7.1.0,7.2.0"]);
        args.extend(extra);
        generate(&dir, 200, "yaml", &args);
        let s = fleet_json(&[dir.to_str().unwrap(), "--compare-builds"]);
        s["builds"].as_array().cloned().unwrap_or_default()
    };
    let planted = builds("planted", &["--regress", "emmc:seq-write:-18"]);
    assert_eq!(planted.len(), 2, "a pair per board: {planted:#?}");
    for b in &planted {
        assert_eq!(
            (b["from"].as_str(), b["to"].as_str()),
            (Some("acme 7.1.0"), Some("acme 7.2.0"))
        );
        let named: Vec<&str> = b["regressions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["metric"].as_str().unwrap())
            .collect();
        assert_eq!(named, ["seq-write.iops", "seq-write.mib_per_s"], "{b:#}");
        for r in b["regressions"].as_array().unwrap() {
            assert_eq!(r["class"], "emmc");
            let change = r["change_percent"].as_f64().unwrap();
            assert!((-22.0..-14.0).contains(&change), "{r}");
            assert!(r["p_value"].as_f64().unwrap() < 0.001, "{r}");
            assert!(
                r["words"]
                    .as_str()
                    .unwrap()
                    .contains("from acme 7.1.0 to acme 7.2.0 (p < 0.001"),
                "{r}"
            );
        }
    }
    let noise = builds("noise", &[]);
    assert_eq!(noise.len(), 2);
    for b in &noise {
        assert!(b["compared"].as_u64().unwrap() > 20, "{b:#}");
        assert_eq!(b["regressions"].as_array().map(Vec::len), Some(0), "{b:#}");
    }
    // Without --compare-builds the summary has no builds, and reports without an image are
    // one build: nothing to compare.
    let plain = fleet_json(&[d.path().join("noise").to_str().unwrap()]);
    assert!(plain.get("builds").is_none());
}

/// Wear per part on generated fleets followed a year into the field: 40 units, a factory
/// report and twelve monthly field reports each, one eMMC wearing at 4 %/month against the
/// others' 0.5-1.1. The fast one is named with its rate and the date it reaches the 70 % limit
/// the factory config sets; the output follows docs/fleet-wear.schema.json; the page draws
/// its chart. A fleet of normal parts only names none.
#[test]
fn a_fast_wearing_part_is_named_with_its_rate_and_projected_date() {
    let d = TempDir::new("fleet-wear");
    let dir = d.path().join("planted");
    let truth = generate(
        &dir,
        40,
        "json",
        &["--schema", "2", "--field-months", "12", "--outliers", "0"],
    );
    let fast: Vec<&(String, String, String)> =
        truth.iter().filter(|t| t.2 == "fast-wear").collect();
    assert_eq!(fast.len(), 1, "{truth:?}");
    let t: Value =
        serde_json::from_slice(&std::fs::read(dir.with_extension("truth.json")).unwrap()).unwrap();
    let part = t
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["problem"] == "fast-wear")
        .unwrap()["part"]
        .as_str()
        .unwrap()
        .to_string();
    let s = fleet_json(&[dir.to_str().unwrap(), "--wear"]);
    let w = &s["wear"];
    assert_eq!(
        (w["parts"].as_u64(), w["fast"].as_u64()),
        (Some(40), Some(1)),
        "{w:#}"
    );
    let flagged: Vec<&Value> = w["followed"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["fast"] == true)
        .collect();
    assert_eq!(flagged[0]["part"], part.as_str());
    assert_eq!(flagged[0]["units"][0], fast[0].0.as_str());
    let rate = flagged[0]["rate_percent_per_month"].as_f64().unwrap();
    assert!((3.5..4.5).contains(&rate), "{rate}");
    assert_eq!(flagged[0]["baseline"]["phase"], "factory");
    assert_eq!(flagged[0]["readings"], 13);
    assert_eq!(flagged[0]["limit_percent"], 70.0);
    let date = flagged[0]["projected_limit_date"].as_str().unwrap();
    assert!(date.len() == 10 && date > "2027-01-01", "{date}");
    assert!(
        flagged[0]["words"]
            .as_str()
            .unwrap()
            .contains(&format!("reaches its 70 % limit about {date}")),
        "{}",
        flagged[0]["words"]
    );
    for p in w["followed"].as_array().unwrap() {
        if p["fast"] == false {
            let r = p["rate_percent_per_month"].as_f64().unwrap();
            assert!(r < 2.0, "a normal part at {r} %/month: {p:#}");
        }
    }
    // The output's schema, checked by python3-jsonschema (scripts/test.sh installs it).
    let schema = repo().join("docs/fleet-wear.schema.json");
    let o = Command::new("python3")
        .args([
            "-c",
            "import json,sys,jsonschema; jsonschema.validate(json.load(sys.stdin), \
             json.load(open(sys.argv[1])), format_checker=jsonschema.FormatChecker())",
        ])
        .arg(&schema)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .unwrap()
                .write_all(w.to_string().as_bytes())?;
            c.wait_with_output()
        })
        .expect("python3 with jsonschema");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text =
        String::from_utf8_lossy(&fleet(&[dir.to_str().unwrap(), "--wear"]).stdout).into_owned();
    assert!(text.contains(&format!("    fast: {part} on ")), "{text}");
    let page = String::from_utf8_lossy(
        &fleet(&[dir.to_str().unwrap(), "--wear", "--format", "html"]).stdout,
    )
    .into_owned();
    assert!(page.contains("<h2>Wear per part</h2>"));
    assert_eq!(page.matches("<svg class=\"wear\"").count(), 1);

    let noise = d.path().join("noise");
    generate(
        &noise,
        40,
        "json",
        &["--schema", "2", "--field-months", "12", "--fast-wear", "0"],
    );
    let s = fleet_json(&[noise.to_str().unwrap(), "--wear"]);
    assert_eq!(s["wear"]["fast"], 0, "{:#}", s["wear"]["boards"]);
    // Without --wear there is no wear section.
    assert!(fleet_json(&[noise.to_str().unwrap()]).get("wear").is_none());
}

/// `--board` takes a board exactly as `fleet` lists it: "unknown board" (units whose report
/// names no model: no device tree, no DMI) selects those units, and only them.
#[test]
fn the_unknown_board_is_selected_by_its_listed_name() {
    let d = TempDir::new("fleet-unknown-board");
    let dir = d.path().join("r");
    generate(&dir, 12, "json", &[]);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let total = files.len() as u64;
    for f in files.iter().take(3) {
        let mut v: Value = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
        v["unit"].as_object_mut().unwrap().remove("model");
        std::fs::write(f, serde_json::to_vec(&v).unwrap()).unwrap();
    }
    let all = fleet_json(&[dir.to_str().unwrap(), "--group-by", "board"]);
    assert_eq!(all["reports"].as_u64(), Some(total), "{all}");
    assert!(all.to_string().contains("unknown board"), "listed: {all}");
    let unknown = fleet_json(&[dir.to_str().unwrap(), "--board", "unknown board"]);
    assert_eq!(unknown["reports"], 3, "{unknown}");
}

/// One token holder's report cannot rewrite what the fleet learned or shows: a report
/// claiming an honest unit, dated 2262, with 256 passing sticks at 0.01 MiB/s and its own
/// lax limit in its config leaves every learned limit within 5 % of the honest fleet's, and
/// the factory's lines on the page are still the ones the line's units ran under.
#[test]
fn a_poisoning_report_moves_no_learned_limit_and_no_factory_line() {
    use usbperf::fleet::aggregate::{aggregate, FleetOptions};
    use usbperf::fleet::load::LoadOptions;
    use usbperf::fleet::thresholds::{suggest, SuggestOptions};
    use usbperf::fleet::Dimension;
    let d = TempDir::new("fleet-poison");
    let dir = d.path().join("r");
    generate(&dir, 120, "json", &[]);
    let board = "Toradex Apalis iMX8QM V1.1 on Apalis Evaluation Board";
    let learn = || {
        let opts = FleetOptions {
            group_by: vec![Dimension::DeviceClass],
            load: LoadOptions {
                board: Some(board.into()),
                ..LoadOptions::default()
            },
            ..FleetOptions::default()
        };
        let s = aggregate(std::slice::from_ref(&dir), opts)
            .unwrap()
            .finish();
        assert!(s.errors.is_empty(), "{:?}", s.errors);
        let learned: BTreeMap<(String, &'static str), f64> =
            suggest(&s, &SuggestOptions::default())
                .into_iter()
                .map(|t| ((format!("{} {}", t.group, t.metric), t.field), t.value))
                .collect();
        let outliers: BTreeSet<(String, String, String)> = s
            .groups
            .iter()
            .flat_map(|g| {
                g.metrics.iter().flat_map(|m| {
                    m.outliers
                        .iter()
                        .map(|o| (m.metric.clone(), o.unit.clone(), o.device.clone()))
                })
            })
            .collect();
        (learned, s.factory_thresholds, outliers)
    };
    let (honest, honest_lines, honest_outliers) = learn();
    assert!(honest.len() >= 4, "{honest:?}");

    // The poisoning report: an honest unit's identity (one of the board learned), a far
    // future, 256 slow passing sticks.
    let mut r: Value = sorted_reports(&dir)
        .iter()
        .map(|p| serde_json::from_slice::<Value>(&std::fs::read(p).unwrap()).unwrap())
        .find(|r| r["unit"]["model"] == board)
        .expect("a unit of the board");
    r["report_id"] = "poison-0000-4000-8000-000000000000".into();
    r["started_at"] = "2262-01-01T00:00:00Z".into();
    r["finished_at"] = "2262-01-01T00:01:00Z".into();
    let cell = |w: &str| {
        serde_json::json!({"workload": w, "status": "passed",
            "result": {"mib_per_s": 0.01, "iops": 0.01, "all": {"latency": {"p99_ns": 4_200_000_000_000u64}}}})
    };
    let devices: Vec<Value> = (0..256)
        .map(|i| {
            serde_json::json!({
                "name": format!("sdp{i}"),
                "disk": {"name": format!("sdp{i}"), "class": "usb", "model": "Poison",
                         "serial": format!("P{i:04}"), "usb": {"port_path": format!("9-{i}")}},
                "cells": [cell("seq-write"), cell("seq-read"), cell("rand-read")],
                "verdict": {"pass": true}
            })
        })
        .collect();
    r["devices"] = Value::Array(devices);
    r["config"]["thresholds"] = serde_json::json!([
        {"select": {"class": "usb"}, "workload": "seq-write", "min_mib_per_s": 0.001}
    ]);
    std::fs::write(
        dir.join("zz-poison.json"),
        serde_json::to_vec_pretty(&r).unwrap(),
    )
    .unwrap();

    let (poisoned, lines, outliers) = learn();
    // Every planted outlier of the honest fleet is still found: the 256 sticks of one unit
    // do not become the baseline they are measured against.
    assert!(!honest_outliers.is_empty());
    let lost: Vec<_> = honest_outliers.difference(&outliers).collect();
    assert!(lost.is_empty(), "outliers no longer found: {lost:?}");
    for (k, v) in &honest {
        let p = poisoned
            .get(k)
            .unwrap_or_else(|| panic!("{k:?} no longer learned: {poisoned:?}"));
        assert!(
            (p - v).abs() <= v.abs() * 0.05,
            "{k:?}: honest {v}, poisoned {p}"
        );
    }
    assert_eq!(lines, honest_lines, "the factory's lines on the page");
    assert!(
        !lines.iter().any(|t| t.value == 0.001),
        "the report's own limit is drawn: {lines:?}"
    );
}

#[test]
fn a_figure_lists_its_most_extreme_outliers_and_counts_them_all() {
    let d = TempDir::new("fleet-outlier-cap");
    let dir = d.path().join("reports");
    // 80 planted seq-write outliers among 500 units of one class: more than a figure lists.
    let truth = generate(
        &dir,
        500,
        "yaml",
        &[
            "--seed",
            "5",
            "--outliers",
            "80",
            "--slow-port-percent",
            "0",
        ],
    );
    let planted = truth.iter().filter(|t| t.2 == "seq-write-outlier").count();
    assert_eq!(planted, 80);
    let s = fleet_json(&[dir.to_str().unwrap(), "--group-by", "device-class"]);
    let usb = group(&s, "device-class=usb");
    let sw = metric(usb, "seq-write.mib_per_s");
    let listed = sw["outliers"].as_array().unwrap();
    let total = sw["outliers_total"].as_u64().unwrap() as usize;
    assert!(total >= planted, "{total} flagged, {planted} planted");
    assert_eq!(listed.len(), usbperf::fleet::aggregate::MAX_OUTLIERS);
    // The listed ones are the most extreme, largest |z| first.
    let z: Vec<f64> = listed
        .iter()
        .map(|o| o["modified_z"].as_f64().unwrap().abs())
        .collect();
    assert!(z.windows(2).all(|w| w[0] >= w[1]), "{z:?}");
    let units: BTreeSet<&str> = listed.iter().map(|o| o["unit"].as_str().unwrap()).collect();
    assert_eq!(units.len(), listed.len(), "a value per unit");
    // The text table counts them all and says how many are listed.
    let o = fleet(&[dir.to_str().unwrap(), "--group-by", "device-class"]);
    let text = String::from_utf8_lossy(&o.stdout);
    let all: u64 = usb["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["outliers_total"].as_u64().unwrap())
        .sum();
    assert!(
        text.contains(&format!("most extreme of {all} values")),
        "{text}"
    );
}
