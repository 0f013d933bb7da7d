//! Nothing untested passes, per figure, on real loop devices: a required device whose write
//! tests could not run (its filesystem mounted read-only, no filesystem at all, a filesystem
//! too full to hold a test file) fails when a threshold limits the write figure, and when the
//! device is required even without one; the reason is on the console and the device is named
//! in the result line. A device neither required nor limited keeps its not-applicable writes.

mod common;

use std::process::Command;

use common::*;

use common::device_in as device;

/// The `failed=` names of the result line on standard output.
fn failed_names(stdout: &str) -> Vec<String> {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("USBPERF-RESULT"))
        .unwrap_or_else(|| panic!("no result line in {stdout}"));
    let v = line
        .split(' ')
        .find_map(|kv| kv.strip_prefix("failed="))
        .expect("failed=");
    v.split(',')
        .map(|s| s.replace("%5B", "[").replace("%5D", "]"))
        .collect()
}

/// Fills a mounted filesystem so that less than the run's free-space headroom stays free.
fn fill(m: &Mounted) {
    let st = nix::sys::statvfs::statvfs(m.path()).unwrap();
    let avail = st.blocks_available() as u64 * st.fragment_size() as u64;
    let keep_free = (st.blocks() as u64 * st.fragment_size() as u64) / 20;
    let f = std::fs::File::create(m.path().join("user-data.bin")).unwrap();
    nix::fcntl::posix_fallocate(
        std::os::unix::io::AsRawFd::as_raw_fd(&f),
        0,
        (avail - keep_free) as i64,
    )
    .unwrap();
}

#[test]
fn skipped_writes_of_a_required_or_limited_device_fail_with_the_reason() {
    needs_root!("loop devices and mounts");
    require_root("loop devices and mounts");
    let ro = Mounted::new(64 << 20, "ext4");
    let st = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(ro.path())
        .status()
        .unwrap();
    assert!(st.success(), "remount read-only");
    let bare = Loop::new(64 << 20);
    let full = Mounted::new(32 << 20, "ext4");
    fill(&full);
    // Required, no threshold: its writes are expected all the same.
    let required_only = Loop::new(64 << 20);
    // Neither required nor limited: writes not applicable, the reads pass.
    let free = Loop::new(64 << 20);

    let rd = RunDir::new();
    let cfg = rd.config(&format!(
        "devices:\n\
         \x20 - {{select: {{name: {}}}, required: true, label: read-only}}\n\
         \x20 - {{select: {{name: {}}}, required: true, label: unformatted}}\n\
         \x20 - {{select: {{name: {}}}, required: true, label: full}}\n\
         \x20 - {{select: {{name: {}}}, required: true, label: required only}}\n\
         \x20 - {{select: {{name: {}}}, label: free}}\n\
         tests:\n\
         \x20 - {{workload: seq-read, size: 4M}}\n\
         \x20 - {{workload: seq-write, size: 4M}}\n\
         thresholds:\n\
         \x20 - {{select: {{name: {}}}, workload: seq-write, min_mib_per_s: 1}}\n\
         \x20 - {{select: {{name: {}}}, workload: seq-write, min_mib_per_s: 1}}\n\
         \x20 - {{select: {{name: {}}}, workload: seq-write, min_mib_per_s: 1}}\n",
        ro.lo.name(),
        bare.name(),
        full.lo.name(),
        required_only.name(),
        free.name(),
        ro.lo.name(),
        bare.name(),
        full.lo.name(),
    ));
    let out = rd.run(Some(&cfg), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let console = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{console}");
    let (path, rep) = rd.report();
    validate_reports(&[path]);
    let failed = failed_names(&stdout);
    for (name, limited) in [
        (ro.lo.name(), true),
        (bare.name(), true),
        (full.lo.name(), true),
        (required_only.name(), false),
    ] {
        let d = device(&rep, name);
        assert_eq!(d["verdict"]["pass"], false, "{name}: {d:#}");
        let reasons = d["verdict"]["reasons"].to_string();
        let want = if limited {
            "a figure not measured never passes"
        } else {
            "a required device passes only when every test of it ran"
        };
        assert!(reasons.contains(want), "{name}: {reasons}");
        assert!(reasons.contains("\"no_test\""), "{name}: {reasons}");
        assert!(
            console.contains(want),
            "{name}: not on the console:\n{console}"
        );
        assert!(
            failed.iter().any(|f| f == name),
            "{name} not in failed={failed:?}"
        );
        // The read test ran and passed: only the missing figure fails the device.
        assert_eq!(d["cells"][0]["status"], "passed", "{name}");
        assert_eq!(d["cells"][1]["status"], "skipped", "{name}");
    }
    let d = device(&rep, free.name());
    assert_eq!(d["verdict"]["pass"], true, "{d:#}");
    assert!(!failed.iter().any(|f| f == free.name()));
}

#[test]
fn a_missing_required_device_is_named_in_the_result_line() {
    needs_root!("loop devices");
    require_root("loop devices");
    let present = Loop::new(32 << 20);
    let rd = RunDir::new();
    let cfg = rd.config(&format!(
        "devices:\n\
         \x20 - {{select: {{name: {}}}}}\n\
         \x20 - {{select: {{serial: no-such-stick}}, required: true, label: stick}}\n\
         wait_devices: 0s\n\
         tests:\n  - {{workload: seq-read, size: 4M}}\n",
        present.name()
    ));
    let out = rd.run(Some(&cfg), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert_eq!(
        failed_names(&stdout),
        vec!["devices[1]".to_string()],
        "{stdout}"
    );
}
