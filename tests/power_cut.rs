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

/// The verdict follows docs/power-cut.schema.json (python3-jsonschema: scripts/test installs it).
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
