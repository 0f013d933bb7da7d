//! What a test station reads on the unit: the `USBPERF-RESULT v2` line as
//! the last line of standard output, `run --junit FILE` and `run --lava`, driven through the
//! built binary on real loop devices (root), like tests/edges.rs.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Where the station run writes its JUnit file.
fn junit_path(rd: &RunDir) -> PathBuf {
    rd.dir.path().join("junit.xml")
}

/// `run` with this config and `--junit`, in the run's own directory.
fn run(rd: &RunDir, yaml: &str, extra: &[&str]) -> Output {
    let cfg = rd.config(yaml);
    let j = junit_path(rd).display().to_string();
    let mut a = vec!["--junit", j.as_str()];
    a.extend_from_slice(extra);
    rd.run(Some(&cfg), &a)
}

/// Percent-decoding of a result-line value (docs/guide.md, "At the test station").
fn decode(v: &str) -> String {
    if v == "-" {
        return String::new();
    }
    let b = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            out.push(u8::from_str_radix(&v[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// The last line of standard output, parsed as the station does: tag, version, then
/// key=value pairs in the documented order.
fn result_line(out: &Output) -> BTreeMap<String, String> {
    let text = stdout(out);
    let last = text.lines().last().unwrap_or_default().to_string();
    let mut words = last.split(' ');
    assert_eq!(words.next(), Some("USBPERF-RESULT"), "last line: {last}");
    assert_eq!(words.next(), Some("v2"), "{last}");
    let mut keys = Vec::new();
    let mut map = BTreeMap::new();
    for w in words {
        let (k, v) = w.split_once('=').unwrap_or_else(|| panic!("{w} in {last}"));
        keys.push(k.to_string());
        map.insert(k.to_string(), v.to_string());
    }
    assert_eq!(
        keys,
        [
            "unit",
            "report_id",
            "verdict",
            "exit",
            "devices",
            "failed",
            "report",
            "marginal",
            "retests"
        ],
        "{last}"
    );
    assert_eq!(
        map["exit"],
        out.status.code().unwrap().to_string(),
        "the line states the real exit code"
    );
    map
}

fn load_report(line: &BTreeMap<String, String>) -> Value {
    let path = decode(&line["report"]);
    assert!(Path::new(&path).is_file(), "report= names a file: {path}");
    let rep: Value = serde_norway::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(
        rep["report_id"].as_str(),
        Some(decode(&line["report_id"]).as_str())
    );
    assert_eq!(
        line["devices"],
        rep["devices"].as_array().unwrap().len().to_string()
    );
    rep
}

/// The JUnit file parsed by Python's XML parser, summarised as JSON: the root's counts, the
/// sum of the suites' counts, and every test case with its outcome and message.
fn junit(path: &Path) -> Value {
    require_tool("python3", "python3");
    let script = r#"
import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
keys = ("tests", "failures", "errors", "skipped")
sums = {k: sum(int(s.get(k)) for s in root.iter("testsuite")) for k in keys}
cases = []
for s in root.iter("testsuite"):
    for c in s.iter("testcase"):
        kind, msg = "pass", ""
        for k in ("failure", "error", "skipped"):
            e = c.find(k)
            if e is not None:
                kind, msg = k, e.get("message")
        out = c.find("system-out")
        cases.append({"suite": s.get("name"), "classname": c.get("classname"),
                      "name": c.get("name"), "kind": kind, "message": msg,
                      "out": out.text if out is not None else ""})
counted = {"tests": len(cases)}
for k, tag in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
    counted[k] = sum(1 for c in cases if c["kind"] == tag)
print(json.dumps({"name": root.get("name"), "root": {k: int(root.get(k)) for k in keys},
                  "sums": sums, "counted": counted, "cases": cases}))
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "JUnit file does not parse as XML: {}",
        stderr(&out)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["name"], "usbperf-matrix");
    assert_eq!(
        v["root"], v["sums"],
        "the root's counts are the suites' sums"
    );
    assert_eq!(
        v["root"], v["counted"],
        "the counts are the cases' outcomes"
    );
    v
}

fn case<'a>(j: &'a Value, suite: &str, name: &str) -> &'a Value {
    j["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["suite"] == suite && c["name"] == name)
        .unwrap_or_else(|| panic!("no case {name:?} in suite {suite:?}: {}", j["cases"]))
}

#[test]
fn a_passing_run_ends_with_the_result_line_and_writes_junit_and_lava() {
    needs_root!("loop devices");
    let lo = Loop::new(16 << 20);
    let rd = RunDir::new();
    let out = run(
        &rd,
        &format!(
            "devices:\n  - {{select: {{name: {}}}, label: front USB, target: read-only}}\n\
             tests:\n  - {{workload: seq-read, size: 4M, runtime: 1s}}\n\
             \x20 - {{workload: rand-read, size: 4M, runtime: 1s}}\n",
            lo.name()
        ),
        &["--lava"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let line = result_line(&out);
    assert_eq!(line["verdict"], "PASS");
    assert_eq!(line["devices"], "1");
    assert_eq!(line["failed"], "-");
    let rep = load_report(&line);
    assert_eq!(rep["verdict"]["pass"], true);

    let j = junit(&junit_path(&rd));
    let suite = format!("{} (front USB)", lo.name());
    assert_eq!(
        j["root"]["tests"],
        2 + 1 + 3,
        "2 cells, the verdict, the unit's 3"
    );
    assert_eq!(j["root"]["failures"], 0);
    for w in ["seq-read", "rand-read"] {
        let c = case(&j, &suite, w);
        assert_eq!(c["classname"], "usbperf.loop");
        assert_eq!(c["kind"], "pass");
        assert!(c["out"].as_str().unwrap().contains("mib_per_s="), "{c}");
    }
    assert_eq!(case(&j, &suite, "verdict")["kind"], "pass");
    assert_eq!(case(&j, "unit", "devices")["kind"], "pass");

    let text = stdout(&out);
    for w in ["seq-read", "rand-read"] {
        let id = format!("TEST_CASE_ID={}-{w} RESULT=pass MEASUREMENT=", lo.name());
        let l = text
            .lines()
            .find(|l| l.starts_with("<LAVA_SIGNAL_TESTCASE ") && l.contains(&id))
            .unwrap_or_else(|| panic!("no LAVA signal {id}:\n{text}"));
        assert!(l.ends_with(" UNITS=MiB/s>"), "{l}");
    }
    for l in [
        format!(
            "<LAVA_SIGNAL_TESTCASE TEST_CASE_ID={}-verdict RESULT=pass>",
            lo.name()
        ),
        "<LAVA_SIGNAL_TESTCASE TEST_CASE_ID=usbperf-unit RESULT=pass>".to_string(),
    ] {
        assert!(text.lines().any(|x| x == l), "{l} missing:\n{text}");
    }
}

#[test]
fn a_failed_threshold_is_fail_in_the_line_and_a_junit_failure() {
    needs_root!("loop devices");
    let lo = Loop::new(16 << 20);
    let rd = RunDir::new();
    let out = run(
        &rd,
        &format!(
            "devices:\n  - {{select: {{name: {0}}}, target: read-only}}\n\
             tests:\n  - {{workload: seq-read, size: 4M, runtime: 1s}}\n\
             thresholds:\n  - {{select: {{name: {0}}}, workload: seq-read, min_mib_per_s: 1e6}}\n",
            lo.name()
        ),
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let line = result_line(&out);
    assert_eq!(line["verdict"], "FAIL");
    assert_eq!(decode(&line["failed"]), lo.name());
    let rep = load_report(&line);
    assert_eq!(rep["devices"][0]["verdict"]["pass"], false);
    // Without --lava no signal is printed.
    assert!(!stdout(&out).contains("LAVA_SIGNAL"), "{}", stdout(&out));

    let j = junit(&junit_path(&rd));
    let c = case(&j, lo.name(), "seq-read");
    assert_eq!(c["kind"], "failure", "{c}");
    let msg = c["message"].as_str().unwrap();
    assert!(
        msg.contains("seq-read: ") && msg.contains("< minimum 1000000 MiB/s"),
        "{msg}"
    );
    let v = case(&j, lo.name(), "verdict");
    assert_eq!(v["kind"], "failure");
    assert!(v["message"].as_str().unwrap().contains("< minimum"), "{v}");
}

#[test]
fn a_run_that_tests_no_device_is_fail_with_devices_0_and_a_failing_devices_case() {
    let rd = RunDir::new();
    let out = run(
        &rd,
        "devices:\n  - select: {name: no-such-disk}\n",
        &["--lava"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let line = result_line(&out);
    assert_eq!(line["verdict"], "FAIL");
    assert_eq!(line["devices"], "0");
    assert_eq!(line["failed"], "-");
    load_report(&line);
    assert!(stdout(&out)
        .lines()
        .any(|l| l == "<LAVA_SIGNAL_TESTCASE TEST_CASE_ID=usbperf-unit RESULT=fail>"));

    let j = junit(&junit_path(&rd));
    let c = case(&j, "unit", "devices");
    assert_eq!(c["kind"], "failure", "{c}");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("no device was tested"),
        "{c}"
    );
    assert_eq!(j["root"]["tests"], 3, "only the unit's cases");
}

#[test]
fn a_missing_required_device_is_a_failing_junit_case() {
    let rd = RunDir::new();
    let out = run(
        &rd,
        "devices:\n  - {select: {name: no-such-disk}, label: rear USB, required: true}\n",
        &["--wait-devices", "0s"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(result_line(&out)["verdict"], "FAIL");
    let j = junit(&junit_path(&rd));
    let c = case(&j, "unit", "required devices");
    assert_eq!(c["kind"], "failure", "{c}");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("\"rear USB\": required, not found"),
        "{c}"
    );
}

#[test]
fn an_unwritable_junit_file_is_an_error_line_and_the_exit_code_stays() {
    let rd = RunDir::new();
    let cfg = rd.dir.path().join("cfg.yaml");
    std::fs::write(&cfg, "devices:\n  - select: {name: no-such-disk}\n").unwrap();
    let out = common::cmd()
        .args(["run", "--config"])
        .arg(&cfg)
        .arg("--report-dir")
        .arg(rd.dir.path().join("reports"))
        .arg("--lock-file")
        .arg(rd.dir.path().join("lock"))
        .args(["--junit", "/proc/usbperf-no/junit.xml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot write the JUnit file /proc/usbperf-no/junit.xml"),
        "{}",
        stderr(&out)
    );
    assert_eq!(result_line(&out)["verdict"], "FAIL");
}

/// `--report-dir` naming a regular file: the run says what is wrong in words, the report goes
/// to a fallback directory, and when that one is emptied at the next boot (tmpfs, as /run is on
/// most images) the run is ERROR with exit 4 whatever the tests said.
#[test]
fn a_report_dir_that_is_a_file_falls_back_and_a_report_lost_at_reboot_is_an_error() {
    needs_root!("loop devices");
    let lo = Loop::new(16 << 20);
    let rd = RunDir::new();
    let not_a_dir = rd.dir.path().join("reports-file");
    std::fs::write(&not_a_dir, b"").unwrap();
    let cfg = rd.config(&format!(
        "devices:\n  - {{select: {{name: {}}}, target: read-only}}\n\
         tests:\n  - {{workload: seq-read, size: 4M, runtime: 1s}}\n",
        lo.name()
    ));
    let out = rd.run_in(&not_a_dir, Some(&cfg), &[]);
    let err = stderr(&out);
    let line = result_line(&out);
    let landed = PathBuf::from(&line["report"]);
    assert!(
        !landed.starts_with(&not_a_dir) && landed.is_file(),
        "the report is in a fallback directory: {landed:?}"
    );
    // Folded back from the console's line breaks.
    let said = format!("{err}{}", stdout(&out))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(said.contains("is a file, not a directory"), "{said}");
    assert!(said.contains("NOT in the configured directory"), "{said}");
    // coreutils' answer, not the tool's: which filesystem holds the fallback.
    let fs = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(landed.parent().unwrap())
        .output()
        .unwrap();
    let volatile = matches!(
        String::from_utf8_lossy(&fs.stdout).trim(),
        "tmpfs" | "ramfs"
    );
    let (code, verdict) = if volatile { (4, "ERROR") } else { (0, "PASS") };
    assert_eq!(out.status.code(), Some(code), "{said}");
    assert_eq!(line["verdict"], verdict);
    assert_eq!(
        said.contains("emptied at the next boot"),
        volatile,
        "{said}"
    );
    let text = std::fs::read_to_string(&landed).unwrap();
    assert!(text.contains(&format!("exit_code: {code}")), "{text}");
    std::fs::remove_file(&landed).unwrap();
}
