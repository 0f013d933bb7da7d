//! The power-cut test through the binary, on real files and loop devices: the write phase
//! killed with SIGKILL mid-write (what a power cut leaves of the process), planted losses
//! the verify must name with their counts and places, the refusals, and the state file's
//! bounds.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};

use common::{run_bin, Loop, Mounted, TempDir};

fn verify_json(state: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mut args = vec!["power-cut", "verify", "--state", state.to_str().unwrap()];
    args.extend(["--format", "json"]);
    args.extend(extra);
    let out = run_bin(None, &args);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "verify printed no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), v)
}

fn write(target: &Path, state: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "power-cut",
        "write",
        "--target",
        target.to_str().unwrap(),
        "--state",
        state.to_str().unwrap(),
    ];
    args.extend(extra);
    run_bin(None, &args)
}

/// The verdict follows docs/power-cut.schema.json (python3-jsonschema: scripts/test.sh installs it).
fn schema_valid(v: &serde_json::Value) {
    use std::io::Write;
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/power-cut.schema.json");
    let mut c = Command::new("python3")
        .args([
            "-c",
            "import json,sys,jsonschema; jsonschema.validate(json.load(sys.stdin), json.load(open(sys.argv[1])))",
        ])
        .arg(&schema)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 with jsonschema");
    c.stdin
        .take()
        .unwrap()
        .write_all(v.to_string().as_bytes())
        .unwrap();
    let o = c.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn n(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn a_written_region_passes_and_each_planted_fault_is_named_with_its_count_and_place() {
    let d = TempDir::new("pc-faults");
    let t = d.path().join("pc.bin");
    let s = d.path().join("pc.state");
    let out = write(&t, &s, &["--size", "4M"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, v) = verify_json(&s, &["--keep"]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["verdict"], "pass");
    assert_eq!(
        (n(&v, "blocks"), n(&v, "acknowledged"), n(&v, "intact")),
        (1024, 1024, 1024)
    );

    // Lost: blocks 10-19 zeroed. Torn: the second half of block 40 replaced. Misplaced:
    // block 3 copied over block 70.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .open(&t)
        .unwrap();
    f.write_all_at(&vec![0u8; 10 * 4096], 10 * 4096).unwrap();
    f.write_all_at(&[0xAB; 2048], 40 * 4096 + 2048).unwrap();
    let mut b3 = vec![0u8; 4096];
    f.read_exact_at(&mut b3, 3 * 4096).unwrap();
    f.write_all_at(&b3, 70 * 4096).unwrap();
    drop(f);
    let (code, v) = verify_json(&s, &["--keep"]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["verdict"], "fail");
    assert_eq!(
        (
            n(&v, "lost"),
            n(&v, "torn"),
            n(&v, "misplaced"),
            n(&v, "intact")
        ),
        (10, 1, 1, 1012)
    );
    assert_eq!(v["lost_ranges"], serde_json::json!([[10, 19]]));
    assert_eq!(v["torn_ranges"], serde_json::json!([[40, 40], [70, 70]]));
    assert!(v["reason"].as_str().unwrap().contains("12 of 1024"), "{v}");
    schema_valid(&v);

    // A cut after block 511 was acknowledged: what came after is counted, not judged.
    let mut st: serde_json::Value = serde_json::from_slice(&std::fs::read(&s).unwrap()).unwrap();
    st["acknowledged"] = 512.into();
    st["complete"] = false.into();
    std::fs::write(&s, serde_json::to_vec(&st).unwrap()).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&t).unwrap();
    f.write_all_at(&vec![0u8; 500 * 4096], 524 * 4096).unwrap();
    drop(f);
    let (code, v) = verify_json(&s, &[]);
    assert_eq!(
        code,
        Some(1),
        "the planted faults below 512 still fail: {v}"
    );
    assert_eq!((n(&v, "acknowledged"), n(&v, "lost")), (512, 10));
    assert_eq!(
        (n(&v, "written_unacknowledged"), n(&v, "never_written")),
        (12, 500)
    );
    // The verdict removes the test file and the state.
    assert!(!t.exists() && !s.exists());
}

#[test]
fn sigkill_mid_write_on_a_loop_device_leaves_a_state_whose_every_acknowledged_block_survives() {
    needs_root!("loop devices");
    let lo = Loop::new(64 << 20);
    let d = TempDir::new("pc-kill");
    let s = d.path().join("pc.state");
    // One fdatasync per block: the write phase takes seconds, the kill lands inside it.
    let mut child = common::cmd()
        .args([
            "power-cut",
            "write",
            "--target",
            &lo.dev,
            "--allow-write-device",
        ])
        .args(["--flush-every", "1", "--state"])
        .arg(&s)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().expect("a progress line").unwrap();
    assert!(first.starts_with("power-cut: acknowledged "), "{first}");
    child.kill().unwrap();
    assert!(!child.wait().unwrap().success());
    // Before the verify, nothing may be cached above the medium: drop the loop's pages.
    std::fs::write("/proc/sys/vm/drop_caches", "1").unwrap();
    let (code, v) = verify_json(&s, &[]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["verdict"], "pass");
    assert_eq!(v["write_complete"], false);
    schema_valid(&v);
    let acked = n(&v, "acknowledged");
    assert!(acked >= 1 && acked < n(&v, "blocks"), "{v}");
    assert_eq!(n(&v, "intact"), acked);
    assert_eq!(
        acked + n(&v, "written_unacknowledged") + n(&v, "never_written"),
        n(&v, "blocks")
    );
    assert!(!s.exists(), "the verdict removes the state");
}

#[test]
fn sigterm_removes_the_test_file_and_the_state() {
    let d = TempDir::new("pc-term");
    let t = d.path().join("pc.bin");
    let s = d.path().join("pc.state");
    let mut child = common::cmd()
        .args([
            "power-cut",
            "write",
            "--size",
            "64M",
            "--flush-every",
            "1",
            "--target",
        ])
        .arg(&t)
        .arg("--state")
        .arg(&s)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    lines.next().expect("a progress line").unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert_eq!(child.wait().unwrap().code(), Some(3), "{rest:?}");
    assert!(!t.exists() && !s.exists(), "{rest:?}");
}

#[test]
fn a_mounted_device_an_existing_state_and_a_hostile_state_file_are_refused() {
    needs_root!("loop devices and mounts");
    let m = Mounted::new(32 << 20, "ext4");
    let d = TempDir::new("pc-refuse");
    let s = d.path().join("pc.state");
    let out = write(Path::new(&m.lo.dev), &s, &["--allow-write-device"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mounted"), "{err}");
    assert!(!s.exists(), "a refused test leaves no state");

    // A state waiting for its verify is never replaced, and its test is not touched.
    std::fs::write(&s, "{}").unwrap();
    let t = d.path().join("pc.bin");
    let out = write(&t, &s, &["--size", "1M"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("verify it first"));
    assert!(!t.exists());

    // Over the size cap, not JSON, another format: refused with what it broke (exit 2).
    for (text, says) in [
        (" ".repeat(70 * 1024), "over 65536 bytes"),
        ("not json".to_string(), "not a usbperf power-cut state"),
        (
            r#"{"format":"other","version":1,"run_id":1,"target":"/x","target_kind":"file","created_file":true,"block_bytes":4096,"blocks":1,"sync":"dsync","acknowledged":0,"complete":false,"started":""}"#.to_string(),
            "expected \"usbperf-power-cut-state\"",
        ),
        (
            r#"{"format":"usbperf-power-cut-state","version":1,"run_id":1,"target":"/x","target_kind":"file","created_file":true,"block_bytes":4096,"blocks":1,"sync":"dsync","acknowledged":5,"complete":false,"started":""}"#.to_string(),
            "more than the region",
        ),
    ] {
        std::fs::write(&s, text).unwrap();
        let out = run_bin(None, &["power-cut", "verify", "--state", s.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{says}: {err}");
    }
}

#[test]
fn a_hostile_or_empty_state_removes_nothing_it_names_and_a_gone_file_is_not_retried() {
    let d = TempDir::new("pc-hostile");
    let s = d.path().join("pc.state");
    // A state claiming to have created a file that is not the test's: judged (untested,
    // nothing acknowledged), and the file stays.
    let victim = d.path().join("precious.txt");
    std::fs::write(&victim, "not a power-cut block").unwrap();
    let state = format!(
        r#"{{"format":"usbperf-power-cut-state","version":1,"run_id":1,"target":"{}","target_kind":"file","created_file":true,"block_bytes":512,"blocks":1,"sync":"dsync","acknowledged":0,"complete":false,"started":""}}"#,
        victim.display()
    );
    std::fs::write(&s, &state).unwrap();
    let out = run_bin(
        None,
        &["power-cut", "verify", "--state", s.to_str().unwrap()],
    );
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        victim.exists(),
        "a state from a medium made root remove a file it named"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("remove it by hand"));
    assert!(!s.exists());

    // Empty (the power went while the first state was written): removed, exit 4.
    std::fs::write(&s, "").unwrap();
    let out = run_bin(
        None,
        &["power-cut", "verify", "--state", s.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is empty"));
    assert!(!s.exists());

    // A FIFO is refused at once, not waited on.
    nix::unistd::mkfifo(&s, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let out = run_bin(
        None,
        &["power-cut", "verify", "--state", s.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a regular file"));
    std::fs::remove_file(&s).unwrap();

    // The test file is gone: untested, and the state goes too (it will not come back).
    let t = d.path().join("pc.bin");
    assert_eq!(write(&t, &s, &["--size", "1M"]).status.code(), Some(0));
    std::fs::remove_file(&t).unwrap();
    let (code, v) = verify_json(&s, &[]);
    assert_eq!(code, Some(4));
    assert_eq!(v["verdict"], "untested");
    assert!(v["reason"].as_str().unwrap().contains("is gone"), "{v}");
    assert!(!s.exists());
}

/// A verdict leaves the unit as a report: `--report-dir` writes one per verify, valid
/// against docs/report.schema.json, that `show` puts in a `power-cut` column and `fleet`
/// counts per board and part (a pass and a fail here: one of two kept every block).
#[test]
fn each_verdict_is_a_report_that_show_and_the_fleet_count_per_board_and_part() {
    let d = TempDir::new("pc-report");
    let t = d.path().join("pc.bin");
    let s = d.path().join("pc.state");
    let reports = d.path().join("reports");
    std::fs::create_dir(&reports).unwrap();
    let dir = reports.to_str().unwrap();
    let out = write(&t, &s, &["--size", "1M"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let (code, v) = verify_json(&s, &["--keep", "--report-dir", dir]);
    assert_eq!(
        (code, v["verdict"].as_str()),
        (Some(0), Some("pass")),
        "{v}"
    );
    let f = std::fs::OpenOptions::new().write(true).open(&t).unwrap();
    f.write_all_at(&vec![0u8; 5 * 4096], 7 * 4096).unwrap();
    drop(f);
    let (code, v) = verify_json(&s, &["--report-dir", dir]);
    assert_eq!(
        (code, v["verdict"].as_str()),
        (Some(1), Some("fail")),
        "{v}"
    );

    let mut files: Vec<_> = std::fs::read_dir(&reports)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    common::validate_reports(&files);
    let verdicts: Vec<serde_json::Value> = files
        .iter()
        .map(|f| serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap())
        .collect();
    let lost: Vec<u64> = verdicts
        .iter()
        .map(|r| n(&r["devices"][0]["power_cut"], "lost"))
        .collect();
    assert!(lost.contains(&0) && lost.contains(&5), "{lost:?}");
    for r in &verdicts {
        let pass = n(&r["devices"][0]["power_cut"], "lost") == 0;
        assert_eq!(r["verdict"]["pass"], pass, "{r}");
        assert_eq!(r["exit_code"], if pass { 0 } else { 1 }, "{r}");
        assert!(r["unit"]["machine_id"].is_string(), "{r}");
    }

    let out = run_bin(
        None,
        &["show", "--format", "csv", files[0].to_str().unwrap()],
    );
    let csv = String::from_utf8_lossy(&out.stdout);
    assert!(
        csv.starts_with("device,label,class,link,power-cut status,power-cut lost,"),
        "{csv}"
    );

    let out = run_bin(
        None,
        &[
            "fleet",
            "--format",
            "json",
            "--group-by",
            "board,device-model",
            dir,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let f: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(f["reports"], 2, "{f}");
    let groups = f["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "one board and part: {f}");
    let m = groups[0]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "power-cut.lost_blocks")
        .unwrap_or_else(|| panic!("no power-cut figure: {f}"));
    assert_eq!(
        (m["count"].as_u64(), m["pass_rate"].as_f64()),
        (Some(2), Some(0.5)),
        "{m}"
    );
    assert_eq!(m["max"], 5.0, "{m}");
    assert_eq!(
        (f["units"].as_u64(), f["devices"].as_u64()),
        (Some(0), Some(0)),
        "{f}"
    );
    // The verdict itself beside its reports (as the boot service keeps them) is skipped as
    // what it is, not an unreadable report.
    std::fs::write(
        reports.join("power-cut-20261205T000000Z-1.json"),
        v.to_string(),
    )
    .unwrap();
    let f = fleet_of(&reports);
    assert_eq!(f["reports"], 2, "{f}");
    assert_eq!(f["errors"], serde_json::json!([]), "{f}");
    assert_eq!(f["skipped"][0]["kind"], "power-cut-verdict", "{f}");

    // A power-cut verdict is no run: a later passing one of a unit whose factory run failed
    // leaves the unit failed, its device tests as they were, and adds its figure.
    let run = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/vm/x86_64-6.1/out/usbperf-VMUNIT0001-20261202T072325Z-749bf791.yaml");
    let both = d.path().join("both");
    std::fs::create_dir(&both).unwrap();
    std::fs::copy(&run, both.join("run.yaml")).unwrap();
    let alone = fleet_of(&both);
    let mut same_unit = verdicts
        .iter()
        .find(|r| r["verdict"]["pass"] == true)
        .unwrap()
        .clone();
    same_unit["unit"]["serial"] = "VMUNIT0001".into();
    same_unit["started_at"] = "2026-12-03T00:00:00Z".into();
    std::fs::write(both.join("cut.json"), same_unit.to_string()).unwrap();
    let with_cut = fleet_of(&both);
    assert_eq!(alone["unit_pass_rate"], 0.0, "{alone}");
    for k in [
        "units",
        "unit_pass_rate",
        "devices",
        "device_pass_rate",
        "yields",
    ] {
        assert_eq!(with_cut[k], alone[k], "{k}");
    }
    assert_eq!(with_cut["reports"], 2);
    let cut: Vec<&serde_json::Value> = with_cut["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["metrics"].as_array().unwrap())
        .filter(|m| m["metric"] == "power-cut.lost_blocks")
        .collect();
    assert_eq!(cut.len(), 1, "{with_cut}");
    assert_eq!(cut[0]["pass_rate"], 1.0);
}

fn fleet_of(dir: &Path) -> serde_json::Value {
    let out = run_bin(None, &["fleet", "--format", "json", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}
