//! The factory run (`usbperf-matrix run`) on real block devices: loop devices with real ext4
//! and vfat filesystems, raw loop devices, this machine's root disk. Each refusal of the
//! safety rules is tried; signals, bad configs and the report schema are checked.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn device<'v>(report: &'v Value, name: &str) -> &'v Value {
    report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in report"))
}

fn statuses(dev: &Value) -> Vec<(String, String)> {
    dev["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["workload"].as_str().unwrap().to_string(),
                c["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn quick_matrix_on_ext4_xfs_and_raw_loop_devices() {
    needs_root!("loop devices and mounts");
    let ext4 = Mounted::new(192 << 20, "ext4");
    // vfat is what most sticks ship with, but this machine's kernel has no vfat driver
    // (/proc/filesystems); xfs stands in for a second filesystem with its own O_DIRECT and
    // allocation rules. The QEMU end-to-end tests cover vfat on a real guest kernel.
    let vfat = Mounted::new(320 << 20, "xfs");
    let raw = Loop::new(96 << 20);
    let rd = RunDir::new();
    let cfg = rd.config(&format!(
        "profile: quick\n\
         devices:\n\
         \x20 - {{select: {{name: {}}}, label: ext4 stick}}\n\
         \x20 - {{select: {{name: {}}}, label: xfs card}}\n\
         \x20 - {{select: {{name: {}}}, target: raw}}\n\
         thresholds:\n\
         \x20 - {{select: {{class: loop}}, workload: seq-write, max_p99_latency_ms: 10000}}\n\
         \x20 - {{select: {{class: loop}}, max_stalls: 3, min_capacity: 64M}}\n",
        ext4.lo.name(),
        vfat.lo.name(),
        raw.name()
    ));
    // The seq-write limit is on its latency, not its rate: these loop devices live in RAM, and
    // when another test of this file takes the CPU late in a write their rate falls by half;
    // a fall with too few windows after it is inconclusive, a failure (rightly: a stick's
    // write cache filling looks the same). tests/run_precision.rs and tests/verify_fakes.rs
    // (a stick with a write cache) judge rates after a fall.
    // max_stalls 3, not 0: the twelve other tests of this file run beside this one on two
    // CPUs, and under that load one 2 MiB read of the xfs image took 1.7 s (a stall), a
    // failure of the machine, not of the device. An engine that stalled as a rule would still
    // fail it.
    let out = rd.run(Some(&cfg), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (path, rep) = rd.report();
    validate_reports(&[path]);
    assert_eq!(rep["status"], "complete");
    assert_eq!(rep["verdict"]["pass"], true);
    for (name, mode) in [
        (ext4.lo.name(), "file"),
        (vfat.lo.name(), "file"),
        (raw.name(), "raw-write"),
    ] {
        let d = device(&rep, name);
        assert_eq!(d["placement"]["mode"], mode, "{name}");
        for (w, s) in statuses(d) {
            assert_eq!(s, "passed", "{name} {w}: {d:#}");
        }
        let cells = d["cells"].as_array().unwrap();
        assert_eq!(cells.len(), 7, "the quick matrix has 7 tests");
        for c in cells {
            assert!(c["result"]["bytes"].as_u64().unwrap() > 0, "{c:#}");
        }
    }
    assert_eq!(device(&rep, ext4.lo.name())["placement"]["fstype"], "ext4");
    assert_eq!(device(&rep, vfat.lo.name())["placement"]["fstype"], "xfs");
    // Test files are gone; the filesystems hold only what mkfs made.
    assert!(test_files_in(ext4.path()).is_empty());
    assert!(test_files_in(vfat.path()).is_empty());
    // Every parameter is recorded with its result.
    let c = &device(&rep, raw.name())["cells"][3];
    assert_eq!(c["workload"], "rand-read");
    assert_eq!(c["result"]["params"]["queue_depth"], 16);
    assert_eq!(c["result"]["params"]["jobs"], 4);
    assert_eq!(c["result"]["params"]["block_bytes"], 4096);
}

/// `--schedule auto` on real loop devices (each its own lane): the 4 KiB tests run alone (a
/// loop device is a class whose I/O rate can outrun a core); the large-block tests of the two
/// run at the same time unless the CPUs saturated (a loop device is served by the CPU: on a
/// busy two-core machine they do, and the run falls back to one test at a time, recorded as
/// `machine_cpu` then `fell_back`). Every cell passes either way, the report is valid against
/// the schema, and the test files are gone.
#[test]
fn auto_schedule_on_two_loop_devices() {
    needs_root!("loop devices and mounts");
    let ext4 = Mounted::new(192 << 20, "ext4");
    let raw = Loop::new(96 << 20);
    let rd = RunDir::new();
    let cfg = rd.config(&format!(
        "profile: quick\n\
         devices:\n\
         \x20 - {{select: {{name: {}}}}}\n\
         \x20 - {{select: {{name: {}}}, target: raw}}\n",
        ext4.lo.name(),
        raw.name()
    ));
    let out = rd.run(Some(&cfg), &["--schedule", "auto"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (path, rep) = rd.report();
    validate_reports(&[path]);
    assert_eq!(rep["schedule"]["mode"], "auto");
    assert_eq!(rep["config"]["schedule"], "auto");
    let mut together = 0;
    for (name, other) in [(ext4.lo.name(), raw.name()), (raw.name(), ext4.lo.name())] {
        let d = device(&rep, name);
        for (w, s) in statuses(d) {
            assert_eq!(s, "passed", "{name} {w}: {d:#}");
        }
        for c in d["cells"].as_array().unwrap() {
            let with: Vec<&str> = c["concurrent_with"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
                .unwrap_or_default();
            let bs = c["result"]["params"]["block_bytes"].as_u64().unwrap();
            if bs < 64 << 10 {
                assert!(
                    with.is_empty(),
                    "{name} {}: 4 KiB beside {with:?}",
                    c["workload"]
                );
                let alone = rep["schedule"]["alone"].as_array().unwrap();
                assert!(
                    alone.iter().any(|a| a["device"] == name
                        && a["workload"] == c["workload"]
                        && ["small_blocks_fast_device", "predicted_cpu", "fell_back"]
                            .contains(&a["rule"].as_str().unwrap_or(""))),
                    "{name} {}: {alone:?}",
                    c["workload"]
                );
            } else if with.contains(&other) {
                together += 1;
            }
        }
    }
    let alone = rep["schedule"]["alone"].as_array().unwrap();
    let saturated = alone.iter().any(|a| a["rule"] == "machine_cpu");
    assert!(
        together >= 1 || saturated,
        "no large-block cell ran beside the other device, and the CPUs never saturated: {rep:#}"
    );
    // After the fallback, every later cell of the device whose cell set it off ran alone and
    // says so (the other device's cells may have been under way already).
    for m in alone.iter().filter(|a| a["rule"] == "machine_cpu") {
        let (dev, k) = (&m["device"], m["cell"].as_u64().unwrap());
        let cells = device(&rep, dev.as_str().unwrap())["cells"]
            .as_array()
            .unwrap()
            .len();
        for later in k + 1..cells as u64 {
            assert!(
                alone
                    .iter()
                    .any(|a| a["device"] == *dev && a["cell"] == later && a["rule"] == "fell_back"),
                "{dev} cell {later} after the fallback at cell {k}: {alone:?}"
            );
        }
    }
    assert!(test_files_in(ext4.path()).is_empty());
}

#[test]
fn json_report_and_thresholds_that_fail() {
    needs_root!("loop devices");
    let raw = Loop::new(64 << 20);
    let rd = RunDir::new();
    let cfg = rd.config(&format!(
        "profile: quick\nreport_format: json\n\
         devices:\n  - {{select: {{name: {}}}, target: raw}}\n\
         tests:\n  - {{workload: seq-read, size: 16M, runtime: 1s}}\n\
         thresholds:\n\
         \x20 - {{select: {{name: {}}}, min_mib_per_s: 1000000, min_capacity: 1G}}\n",
        raw.name(),
        raw.name()
    ));
    let out = rd.run(Some(&cfg), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let (path, rep) = rd.report();
    assert_eq!(path.extension().unwrap(), "json");
    validate_reports(&[path]);
    let d = device(&rep, raw.name());
    assert_eq!(statuses(d), vec![("seq-read".into(), "failed".into())]);
    let reasons = d["verdict"]["reasons"].to_string();
    assert!(
        reasons.contains("MiB/s < minimum 1000000 MiB/s"),
        "{reasons}"
    );
    assert!(
        reasons.contains("capacity: 64M is below the 1G required"),
        "{reasons}"
    );
    assert_eq!(rep["exit_code"], 1);
}

#[test]
fn raw_writes_to_mounted_or_system_disks_are_refused() {
    needs_root!("loop devices and mounts");
    let ext4 = Mounted::new(64 << 20, "ext4");
    // The disk holding / on this machine, from the inventory.
    let inv = stdout_json(&run_bin(None, &["list", "--format", "json"]));
    let root = inv["disks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| {
            d["mounts"].to_string().contains("\"mountpoint\":\"/\"")
                || d["partitions"].to_string().contains("\"mountpoint\":\"/\"")
        })
        .expect("a disk holds /")["name"]
        .as_str()
        .unwrap()
        .to_string();
    let rd = RunDir::new();
    let cfg = rd.config(&format!(
        "devices:\n\
         \x20 - {{select: {{name: {}}}, target: raw}}\n\
         \x20 - {{select: {{name: {root}}}, target: raw}}\n\
         tests:\n  - {{workload: seq-write, size: 8M}}\n  - {{workload: read-buffered, runtime: 300ms}}\n",
        ext4.lo.name()
    ));
    let out = rd.run(Some(&cfg), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let (path, rep) = rd.report();
    validate_reports(&[path]);
    let mounted = device(&rep, ext4.lo.name());
    assert_eq!(mounted["placement"]["mode"], "refused");
    assert!(
        mounted["placement"]["refusals"]
            .to_string()
            .contains("is mounted at"),
        "{mounted:#}"
    );
    // The write was refused, the read-only test still ran.
    assert_eq!(
        statuses(mounted),
        vec![
            ("seq-write".into(), "error".into()),
            ("read-buffered".into(), "passed".into())
        ]
    );
    let sys = device(&rep, &root);
    assert!(
        sys["placement"]["refusals"]
            .to_string()
            .contains("system filesystem"),
        "{sys:#}"
    );
    assert_eq!(sys["cells"][0]["status"], "error");
    assert!(test_files_in(ext4.path()).is_empty());
}

#[test]
fn symlinked_test_directory_and_full_filesystem_are_refused() {
    needs_root!("loop devices and mounts");
    let small = Mounted::new(32 << 20, "ext4");
    // Fill it so that less than the 10 % headroom stays free.
    let fill = small.path().join("user-data.bin");
    let st = nix::sys::statvfs::statvfs(small.path()).unwrap();
    let avail = st.blocks_available() as u64 * st.fragment_size() as u64;
    let keep_free = (st.blocks() as u64 * st.fragment_size() as u64) / 20;
    let f = std::fs::File::create(&fill).unwrap();
    nix::fcntl::posix_fallocate(
        std::os::unix::io::AsRawFd::as_raw_fd(&f),
        0,
        (avail - keep_free) as i64,
    )
    .unwrap();
    drop(f);
    let other = Mounted::new(64 << 20, "ext4");
    let link_dir = TempDir::new("links");
    let link = link_dir.path().join("to-mnt");
    std::os::unix::fs::symlink(other.path(), &link).unwrap();

    let rd = RunDir::new();
    let cfg = rd.config(&format!(
        "devices:\n\
         \x20 - {{select: {{name: {}}}, target: {{dir: {}}}}}\n\
         \x20 - {{select: {{name: {}}}, target: {{dir: {}}}}}\n\
         tests:\n  - {{workload: seq-write, size: 4M}}\n",
        small.lo.name(),
        small.path().display(),
        other.lo.name(),
        link.display()
    ));
    let out = rd.run(Some(&cfg), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let (path, rep) = rd.report();
    validate_reports(&[path]);
    let full = device(&rep, small.lo.name());
    assert!(
        full["placement"]["refusals"]
            .to_string()
            .contains("leaves too little"),
        "{full:#}"
    );
    let linked = device(&rep, other.lo.name());
    assert!(
        linked["placement"]["refusals"]
            .to_string()
            .contains("is a symbolic link"),
        "{linked:#}"
    );
    // The user's file is intact and nothing was added beside it.
    assert_eq!(std::fs::metadata(&fill).unwrap().len(), avail - keep_free);
    assert!(test_files_in(small.path()).is_empty());
    assert!(test_files_in(other.path()).is_empty());
}

#[test]
fn sigterm_mid_write_leaves_no_test_file_and_an_incomplete_report() {
    needs_root!("loop devices and mounts");
    let ext4 = Mounted::new(1100 << 20, "ext4");
    let rd = RunDir::new();
    let cfg = rd.config(&format!(
        "devices:\n  - {{select: {{name: {}}}}}\n\
         tests:\n\
         \x20 - {{workload: write-curve, bs: 1M, size: 1G, runtime: 60s, cache: dsync, sample_interval: 200ms}}\n\
         \x20 - {{workload: seq-read, size: 8M}}\n",
        ext4.lo.name()
    ));
    let child = common::cmd()
        .args(rd.args(Some(&cfg)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the write test has its file, then stop the run as systemd would.
    let t0 = Instant::now();
    while test_files_in(ext4.path()).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the test file never appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        test_files_in(ext4.path()).is_empty(),
        "test file left behind"
    );
    let (path, rep) = rd.report();
    validate_reports(&[path]);
    assert_eq!(rep["status"], "interrupted");
    assert_eq!(rep["interrupted_by"], "SIGTERM");
    assert_eq!(rep["exit_code"], 3);
    // An incomplete run never reads as a pass to anything that looks only at the verdict.
    assert_eq!(rep["verdict"]["pass"], false);
    assert!(
        rep["verdict"]["reasons"]
            .to_string()
            .contains("interrupted by SIGTERM"),
        "{}",
        rep["verdict"]
    );
    let d = device(&rep, ext4.lo.name());
    assert_eq!(d["verdict"]["pass"], false);
    assert_eq!(
        statuses(d),
        vec![
            ("write-curve".into(), "interrupted".into()),
            ("seq-read".into(), "pending".into())
        ]
    );
    let written = d["cells"][0]["result"]["bytes"].as_u64().unwrap();
    assert!(
        written > 0 && written < 1 << 30,
        "partial figures kept: {written}"
    );
}

#[test]
fn malformed_config_names_file_and_line_before_any_io() {
    let rd = RunDir::new();
    let cfg = rd.config("profile: quick\ntests:\n  - workload: seq-write\n    blocksize: 4k\n");
    let out = rd.run(Some(&cfg), &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{}:4:5", cfg.display()))
            && err.contains("unknown field `blocksize`"),
        "{err}"
    );
    assert!(
        !rd.reports().exists(),
        "nothing is written on a usage error"
    );

    let out = rd.run(None, &["--profile", "no-such-board"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown profile \"no-such-board\""));
}

#[test]
fn run_without_arguments_tests_only_non_system_devices_and_passes() {
    needs_root!("the default run's test files under /var/lib/usbperf/scratch");
    // No config: the quick profile on every non-system device. On this machine that is none
    // of its disks (the root disk is a system disk; loop devices are never picked by
    // all_non_system), so nothing may be written anywhere but the report.
    let rd = RunDir::new();
    let out = rd.run(None, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (path, rep) = rd.report();
    validate_reports(&[path]);
    assert_eq!(rep["config"]["sources"][0], "builtin:quick");
    for d in rep["devices"].as_array().unwrap() {
        assert_ne!(d["disk"]["class"], "loop");
        assert!(d["placement"]["mode"] != "raw-write", "{d:#}");
    }
}

#[test]
fn one_run_at_a_time() {
    let rd = RunDir::new();
    let lock = rd.dir.path().join("lock");
    let held = std::fs::File::create(&lock).unwrap();
    // SAFETY: flock on a descriptor this test owns.
    let rc = unsafe {
        libc::flock(
            std::os::unix::io::AsRawFd::as_raw_fd(&held),
            libc::LOCK_EX | libc::LOCK_NB,
        )
    };
    assert_eq!(rc, 0);
    let out = rd.run(None, &[]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        stderr(&out).contains("another usbperf run holds"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_io_error_fails_only_its_device_and_quotes_the_kernel() {
    needs_root!("loop devices");
    // Writes to this loop device fail in the kernel (its memfd backing is write-sealed): the
    // block layer logs "I/O error, dev loopN, ...", a real error path as on a dying stick.
    let bad = SealedLoop::new();
    let good = Loop::new(32 << 20);
    let rd = RunDir::new();
    let cfg = rd.config(&format!(
        "devices:\n\
         \x20 - {{select: {{name: {}}}, target: raw}}\n\
         \x20 - {{select: {{name: {}}}, target: raw}}\n\
         tests:\n\
         \x20 - {{workload: seq-write, bs: 256k, size: 1M}}\n\
         \x20 - {{workload: read-buffered, bs: 256k, size: 1M, runtime: 200ms}}\n",
        bad.name(),
        good.name()
    ));
    let out = rd.run(Some(&cfg), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let (path, rep) = rd.report();
    validate_reports(&[path]);
    let b = device(&rep, bad.name());
    assert_eq!(b["cells"][0]["status"], "error", "{b:#}");
    let reasons = b["cells"][0]["reasons"].to_string();
    assert!(
        reasons.contains(&format!("kernel: I/O error, dev {}", bad.name())),
        "the kernel's words are quoted: {reasons}"
    );
    let ev = &b["cells"][0]["kernel_events"][0];
    assert_eq!(ev["kind"], "io_error");
    assert_eq!(ev["severity"], "fatal");
    // Reads of the same device still work and are still measured.
    assert_eq!(b["cells"][1]["status"], "passed", "{b:#}");
    assert_eq!(b["verdict"]["pass"], false);
    // The other device is untouched by the first one's errors.
    let g = device(&rep, good.name());
    assert_eq!(
        statuses(g),
        vec![
            ("seq-write".into(), "passed".into()),
            ("read-buffered".into(), "passed".into())
        ]
    );
    assert!(g["cells"][0]["kernel_events"].is_null(), "{g:#}");
}

#[test]
fn a_symlink_planted_at_a_test_file_name_is_never_followed() {
    needs_root!("loop devices and mounts");
    let ext4 = Mounted::new(64 << 20, "ext4");
    // Someone plants links with the test files' name pattern, pointing at precious data
    // outside the filesystem under test (the next pids too, to cover the name this run gets).
    let outside = TempDir::new("victim");
    let victim = outside.path().join("precious.bin");
    std::fs::write(&victim, b"do not touch").unwrap();
    for n in 0..4 {
        std::os::unix::fs::symlink(
            &victim,
            ext4.path()
                .join(format!(".usbperf-testfile-999999-{n}.tmp")),
        )
        .unwrap();
    }
    let rd = RunDir::new();
    let cfg = rd.config(&format!(
        "devices:\n  - {{select: {{name: {}}}}}\ntests:\n  - {{workload: seq-write, size: 4M}}\n",
        ext4.lo.name()
    ));
    let out = rd.run(Some(&cfg), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (_, rep) = rd.report();
    assert_eq!(std::fs::read(&victim).unwrap(), b"do not touch");
    assert!(
        test_files_in(ext4.path()).is_empty(),
        "planted links removed, not followed"
    );
    let warnings = rep["warnings"].to_string();
    assert!(warnings.contains("removed a stale test file"), "{warnings}");
}

/// On a board's 80-column serial console (or a pipe: 80 columns) the run's table is one block
/// per device and every line a person reads fits; the station's result line is a record for
/// `tail -n 1` and stays one line. A wide console gets the wide table.
#[test]
fn the_run_fits_the_console_width() {
    needs_root!("loop devices");
    let loops: Vec<Loop> = (0..4).map(|_| Loop::new(64 << 20)).collect();
    let rd = RunDir::new();
    let mut cfg = String::from("devices:\n");
    for (i, l) in loops.iter().enumerate() {
        cfg.push_str(&format!(
            "  - {{select: {{name: {}}}, target: raw, label: port {i} stick}}\n",
            l.name()
        ));
    }
    cfg.push_str(
        "tests:\n\
         \x20 - {workload: seq-read, bs: 1M, size: 8M, runtime: 1s}\n\
         \x20 - {workload: rand-read, size: 8M, runtime: 1s}\n\
         \x20 - {workload: read-buffered, size: 8M, runtime: 1s}\n\
         thresholds:\n\
         \x20 - {select: {class: loop}, workload: seq-read, min_mib_per_s: 1000000}\n",
    );
    let cfg = rd.config(&cfg);
    // A report path longer than the console cannot fit: a short report directory, as the
    // default /var/lib/usbperf/reports/ is (its report paths are 77 characters).
    let reports = std::path::PathBuf::from(format!("/tmp/u80-{}", std::process::id()));
    let run = |columns: &str| {
        let mut a = rd.args_in(&reports, Some(&cfg));
        a.push("--engine".into());
        a.push("sync".into());
        common::cmd()
            .args(&a)
            .env("COLUMNS", columns)
            .output()
            .unwrap()
    };
    let narrow = run("80");
    assert_eq!(narrow.status.code(), Some(1), "{}", stderr(&narrow));
    let out = String::from_utf8_lossy(&narrow.stdout);
    let err = stderr(&narrow);
    let long: Vec<&str> = out
        .lines()
        .chain(err.lines())
        .filter(|l| l.chars().count() > 80 && !l.starts_with("USBPERF-RESULT "))
        .collect();
    assert!(long.is_empty(), "lines over 80 columns: {long:#?}\n{out}");
    for l in &loops {
        assert!(
            out.lines()
                .any(|x| x.starts_with(l.name()) && x.ends_with("FAIL")),
            "a block headed by {}:\n{out}",
            l.name()
        );
    }
    assert!(
        out.contains("seq-read: ") && out.contains("< minimum 1000000 MiB/s"),
        "{out}"
    );
    assert!(
        out.lines()
            .last()
            .unwrap()
            .starts_with("USBPERF-RESULT v2 "),
        "{out}"
    );
    let wide = run("250");
    let out = String::from_utf8_lossy(&wide.stdout);
    assert!(
        out.lines()
            .any(|l| l.starts_with("device ") && l.contains("seq-read") && l.contains("rand-read")),
        "the wide table's header:\n{out}"
    );
    std::fs::remove_dir_all(&reports).unwrap();
}

/// `list` shows every disk with what `run` with the configuration does with it: test files on
/// a mounted filesystem, the raw device, or not at all and why.
#[test]
fn list_says_how_each_disk_is_tested_or_why_not() {
    needs_root!("loop devices and mounts");
    let ext4 = Mounted::new(96 << 20, "ext4");
    let raw = Loop::new(64 << 20);
    let spare = Loop::new(64 << 20);
    let rd = RunDir::new();
    let cfg = rd.config(&format!(
        "profile: quick\n\
         devices:\n\
         \x20 - {{select: {{name: {}}}}}\n\
         \x20 - {{select: {{name: {}}}, target: raw}}\n",
        ext4.lo.name(),
        raw.name()
    ));
    let list = |format: &str| {
        common::cmd()
            .args([
                "list",
                "--format",
                format,
                "--config",
                cfg.to_str().unwrap(),
            ])
            .output()
            .unwrap()
    };
    let out = list("json");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let plan = |name: &str| {
        doc["run_plan"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in the run plan: {doc}"))
            .clone()
    };
    let e = plan(ext4.lo.name());
    assert_eq!(
        (e["tested"].as_bool(), e["how"].as_str()),
        (Some(true), Some("files")),
        "{e}"
    );
    assert!(e["detail"].as_str().unwrap().contains("ext4"), "{e}");
    let r = plan(raw.name());
    assert_eq!(r["tested"].as_bool(), Some(true), "{r}");
    assert!(r["how"].as_str().unwrap().starts_with("raw-"), "{r}");
    let s = plan(spare.name());
    assert_eq!(
        (s["tested"].as_bool(), s["how"].as_str()),
        (Some(false), Some("no")),
        "{s}"
    );
    assert!(s["detail"].as_str().unwrap().contains("loop device"), "{s}");
    // The table says the same in a column and a line per disk.
    let out = list("table");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().next().unwrap().contains(" RUN "), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("{}: ", spare.name())) && l.contains("loop device")),
        "{text}"
    );
    // A configuration named with --config that does not load is the user's error.
    let bad = rd.config("devices: 7\n");
    let out = common::cmd()
        .args(["list", "--config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// A loop device detached while the run tests it (as a stick pulled mid-test keeps no node,
/// a detached loop device keeps its node and holds 0 bytes): the test it happened in fails
/// saying the device went away, the device's later tests are not run, and no message asks
/// for a flag `run` does not have.
#[test]
fn a_loop_device_detached_mid_run_fails_with_the_device_gone_and_the_rest_not_run() {
    needs_root!("loop devices");
    use std::io::{BufRead, BufReader};
    // Alone: the number freed by the detach must not go to another test's device while this
    // run still tests it by name.
    let raw = Loop::new_alone(96 << 20);
    let rd = RunDir::new();
    let cfg = rd.config(&format!(
        "profile: quick\n\
         devices:\n\
         \x20 - {{select: {{name: {}}}, target: raw}}\n",
        raw.name()
    ));
    let mut child = common::cmd()
        .args(rd.args(Some(&cfg)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The progress lines on stderr say when the first test started; detach it then. The
    // kernel clears a loop device still open when its last opener closes it.
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let mut line = String::new();
    while err.read_line(&mut line).unwrap() > 0 {
        seen.push_str(&line);
        let started = line.contains("read-buffered: start");
        line.clear();
        if started {
            let st = Command::new("losetup").args(["-d", &raw.dev]).status();
            assert!(st.unwrap().success(), "losetup -d {}", raw.dev);
            break;
        }
    }
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    seen.push_str(&rest);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{seen}{stdout}");
    let (_, rep) = rd.report();
    let d = device(&rep, raw.name());
    let cells = d["cells"].as_array().unwrap();
    let text = |c: &Value| c["reasons"].to_string();
    let gone = cells
        .iter()
        .position(|c| text(c).contains("went away during the test"))
        .unwrap_or_else(|| panic!("no test says the device went away: {d:#}"));
    for c in &cells[gone..] {
        assert_eq!(c["status"], "error", "{c:#}");
    }
    for c in &cells[gone + 1..] {
        assert!(text(c).contains("went away or shrank"), "{c:#}");
    }
    assert!(gone + 1 < cells.len(), "the first tests all ran: {d:#}");
    assert!(
        !seen.contains("--size") && !stdout.contains("--size"),
        "{seen}{stdout}"
    );
}
