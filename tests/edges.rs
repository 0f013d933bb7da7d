//! The promises at their edges, as a new user meets them in the first hour: each
//! test drives the built binary on real loop devices and filesystems, and each failed on
//! 4124e44. Writes to a mounted device, runs that test nothing, reports that replace each
//! other, config mistakes that surface as hardware failures, closed pipes, exit codes,
//! unwritable report directories, names that leak from the code.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::*;
use serde_json::Value;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn usbperf(args: &[&str]) -> Output {
    common::cmd().args(args).output().unwrap()
}

// 1. bench --allow-write-device on a mounted filesystem.
#[test]
fn bench_never_writes_a_mounted_device_whatever_the_flags() {
    needs_root!("loop devices and mounts");
    let m = Mounted::new(64 << 20, "ext4");
    let marker = m.path().join("precious.txt");
    std::fs::write(&marker, "customer data\n").unwrap();
    let out = usbperf(&[
        "bench",
        "--target",
        &m.lo.dev,
        "--workload",
        "seq-write",
        "--size",
        "16M",
        "--allow-write-device",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is mounted at"),
        "the refusal names the mount: {}",
        stderr(&out)
    );
    // The filesystem is intact: unmount and check it.
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "customer data\n");
    let dev = m.lo.dev.clone();
    let st = Command::new("umount").arg(m.path()).status().unwrap();
    assert!(st.success());
    let fsck = Command::new("e2fsck").args(["-fn", &dev]).output().unwrap();
    assert!(
        fsck.status.success(),
        "fsck after the refused bench: {}",
        stdout(&fsck)
    );
}

#[test]
fn bench_writes_an_unused_device_only_with_the_flag() {
    needs_root!("loop devices");
    let lo = Loop::new(32 << 20);
    let args = [
        "bench",
        "--target",
        &lo.dev,
        "--workload",
        "seq-write",
        "--size",
        "4M",
    ];
    let refused = usbperf(&args);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--allow-write-device"));
    let mut with_flag = args.to_vec();
    with_flag.push("--allow-write-device");
    let ok = usbperf(&with_flag);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
}

// 2. Nothing tested is never a pass.
#[test]
fn a_run_that_tests_no_device_fails_with_the_reason_in_the_report() {
    let rd = RunDir::new();
    let cfg = rd.config("devices:\n  - select: {name: no-such-disk}\n");
    let out = rd.run(Some(&cfg), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let (_, rep) = rd.report();
    assert_eq!(rep["verdict"]["pass"], false);
    let reasons = rep["verdict"]["reasons"].to_string();
    assert!(reasons.contains("no device was tested"), "{reasons}");
    assert!(stdout(&out).contains("verdict FAIL"), "{}", stdout(&out));
}

#[test]
fn a_config_without_profile_runs_the_default_matrix_and_a_device_with_no_test_fails() {
    needs_root!("loop devices");
    let lo = Loop::new(32 << 20);
    let rd = RunDir::new();
    // No `profile:`: the documented default (quick) is the base, so the device gets tests.
    let cfg = rd.config(&format!(
        "devices:\n  - {{select: {{name: {}}}, target: read-only, required: true}}\n",
        lo.name()
    ));
    let out = rd.run(Some(&cfg), &[]);
    let (_, rep) = rd.report();
    assert_eq!(rep["config"]["sources"][0], "builtin:quick");
    let cells = rep["devices"][0]["cells"].as_array().unwrap();
    assert!(cells.len() >= 5, "quick's tests: {cells:?}");
    // Read-only target: the write tests are skipped, the read tests ran and passed.
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // Only write tests on a read-only target: every cell skipped, so nothing was tested.
    let rd = RunDir::new();
    let cfg = rd.config(&format!(
        "devices:\n  - {{select: {{name: {}}}, target: read-only}}\n\
         tests:\n  - {{workload: seq-write, size: 4M}}\n",
        lo.name()
    ));
    let out = rd.run(Some(&cfg), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let (_, rep) = rd.report();
    let reasons = rep["devices"][0]["verdict"]["reasons"].to_string();
    assert!(reasons.contains("no test ran on this device"), "{reasons}");
}

#[test]
fn empty_lists_and_bad_ports_are_config_errors() {
    let rd = RunDir::new();
    for (yaml, want) in [
        ("tests: []\n", "tests: the list is empty"),
        ("devices: []\n", "devices: the list is empty"),
        (
            "devices:\n  - select: {port: 'usb:garbage'}\n",
            "write USB ports as usb:BUS-PORT",
        ),
    ] {
        let cfg = rd.config(yaml);
        let out = rd.run(Some(&cfg), &["--dry-run"]);
        assert_eq!(out.status.code(), Some(2), "{yaml}: {}", stderr(&out));
        assert!(stderr(&out).contains(want), "{yaml}: {}", stderr(&out));
    }
    let out = usbperf(&["list", "--expect", "usb:garbage=480"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

// 3. The main job tests something real: the system disk through scratch files.
#[test]
fn run_without_arguments_tests_the_system_disk_through_files_never_raw() {
    needs_root!("the default run's test files under /var/lib/usbperf/scratch");
    let rd = RunDir::new();
    let out = rd.run(None, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (_, rep) = rd.report();
    let sys: Vec<&Value> = rep["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["label"] == "system disk")
        .collect();
    assert_eq!(
        sys.len(),
        1,
        "the disk holding / is tested: {:#}",
        rep["devices"]
    );
    let d = sys[0];
    assert_eq!(d["placement"]["mode"], "file", "{:#}", d["placement"]);
    assert_eq!(d["placement"]["dir"], "/var/lib/usbperf/scratch");
    for c in d["cells"].as_array().unwrap() {
        assert_eq!(c["status"], "passed", "{c:#}");
        let r = &c["result"];
        assert!(
            r["mib_per_s"].as_f64().unwrap() > 0.0,
            "a real figure: {r:#}"
        );
        if c["workload"] != "read-buffered" {
            assert_eq!(r["target"]["kind"], "file", "{r:#}");
        }
    }
    assert!(
        test_files_in(Path::new("/var/lib/usbperf/scratch")).is_empty(),
        "no test file left"
    );
    // The matrix table is printed at the end.
    let o = stdout(&out);
    assert!(
        o.contains("read-buffered") && o.contains("seq-write"),
        "{o}"
    );
}

// 4. Reports never replace each other.
#[test]
fn five_runs_in_a_row_leave_five_reports() {
    let rd = RunDir::new();
    let cfg = rd.config("devices:\n  - select: {name: no-such-disk}\n");
    for _ in 0..5 {
        let out = rd.run(Some(&cfg), &[]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    }
    let files = rd.report_files();
    assert_eq!(files.len(), 5, "{files:?}");
    let mut ids: Vec<String> = files
        .iter()
        .map(|f| {
            let v: Value = serde_norway::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
            v["report_id"].as_str().unwrap().to_string()
        })
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 5, "every run has its own id");
}

// 5. Workload mistakes are configuration errors, before any I/O.
#[test]
fn workload_mistakes_are_config_errors_with_position_and_range() {
    let rd = RunDir::new();
    let table = [
        (
            "{workload: seq-write, bs: 3}",
            "bs 3: must be a multiple of 512",
        ),
        ("{workload: seq-write, bs: 0}", "bs 0: must be between 512"),
        (
            "{workload: seq-write, size: 0}",
            "size 0: must be at least one block",
        ),
        (
            "{workload: rand-read, jobs: 2000}",
            "jobs must be from 1 to 1024",
        ),
        (
            "{workload: seq-write, bs: 1G, size: 16M}",
            "bs 1G: must be between 512",
        ),
        (
            "{workload: seq-write, bs: 64M, size: 16M}",
            "size 16M: is smaller than one block",
        ),
    ];
    for (entry, want) in table {
        let cfg = rd.config(&format!("tests:\n  - {entry}\n"));
        for extra in [&["--dry-run"][..], &[][..]] {
            let out = rd.run(Some(&cfg), extra);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{entry} {extra:?}: {}",
                stderr(&out)
            );
            let err = stderr(&out);
            assert!(
                err.contains(&format!("{}:2:", cfg.display())) && err.contains(want),
                "{entry}: want file:line and {want:?}: {err}"
            );
            assert!(!err.contains("--bs") && !err.contains("--jobs"), "{err}");
        }
        assert!(rd.report_files().is_empty(), "nothing run for {entry}");
    }
}

#[test]
fn an_oversized_test_is_clamped_to_the_device_and_says_so() {
    needs_root!("loop devices");
    let lo = Loop::new(32 << 20);
    let rd = RunDir::new();
    let cfg = rd.config(&format!(
        "devices:\n  - {{select: {{name: {}}}, target: read-only}}\n\
         tests:\n  - {{workload: seq-read, size: 999P, runtime: 1s}}\n",
        lo.name()
    ));
    let out = rd.run(Some(&cfg), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (_, rep) = rd.report();
    let reasons = rep["devices"][0]["cells"][0]["reasons"].to_string();
    assert!(
        reasons.contains("size reduced from 999P to 32M to the size of the device"),
        "{reasons}"
    );
}

// 6. A closed pipe never panics.
fn with_closed_stdout(args: &[&str]) -> (Option<i32>, String) {
    let mut child = common::cmd()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before the first line, as `| head -0` would.
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let st = child.wait().unwrap();
    (st.code(), err)
}

#[test]
fn a_closed_pipe_is_quiet_in_every_subcommand() {
    let scratch = Scratch::new("edges-pipe");
    let t = scratch.path("t.bin");
    let rd = RunDir::new();
    let cfg = rd.config("devices:\n  - select: {name: no-such-disk}\n");
    let lock = rd.dir.path().join("lock2").display().to_string();
    let reports = rd.reports().display().to_string();
    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["list", "--all"], 0),
        (vec!["list", "--all", "--format", "json"], 0),
        (vec!["tree"], 0),
        (vec!["--help"], 0),
        (
            vec![
                "bench",
                "--target",
                t.to_str().unwrap(),
                "--workload",
                "seq-write",
                "--size",
                "1M",
            ],
            0,
        ),
        (
            vec![
                "run",
                "--config",
                cfg.to_str().unwrap(),
                "--report-dir",
                &reports,
                "--lock-file",
                &lock,
            ],
            1,
        ),
        (
            vec!["run", "--config", cfg.to_str().unwrap(), "--dry-run"],
            0,
        ),
    ];
    for (args, want) in cases {
        let (code, err) = with_closed_stdout(&args);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(code, Some(want), "{args:?}: {err}");
    }
}

// 7. Exit codes as documented, for every subcommand.
#[test]
fn bad_input_gives_the_documented_exit_code_in_every_subcommand() {
    needs_root!("loop devices");
    let scratch = Scratch::new("edges-exit");
    let dir = scratch.dir.display().to_string();
    let missing = scratch.path("none.bin").display().to_string();
    let not_report = scratch.path("notes.txt");
    std::fs::write(&not_report, "hello\n").unwrap();
    let not_report = not_report.display().to_string();
    let empty_fleet = scratch.path("fleet");
    std::fs::create_dir_all(&empty_fleet).unwrap();
    let empty_fleet = empty_fleet.display().to_string();
    let rd = RunDir::new();
    let bad_cfg = rd.config("tests:\n  - {workload: seq-write, bs: 3}\n");
    let bad_cfg = bad_cfg.display().to_string();
    let lo = Loop::new(8 << 20);
    let file = scratch.path("f.bin").display().to_string();
    let token = scratch.path("token");
    std::fs::write(&token, "0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let token = token.display().to_string();
    // A token others may read: refused before anything is queued.
    let open_token = scratch.path("open-token");
    std::fs::write(&open_token, "0123456789abcdef\n").unwrap();
    std::fs::set_permissions(
        &open_token,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let open_token = open_token.display().to_string();
    let spool = scratch.path("spool").display().to_string();
    let not_report_file = not_report.clone();
    let upload = |extra: &[&str]| -> Vec<String> {
        let mut v = vec!["upload".to_string(), "--spool".into(), spool.clone()];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let bench = |extra: &[&str]| -> Vec<String> {
        let mut v = vec!["bench".to_string()];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let table: Vec<(Vec<String>, i32, &str)> = vec![
        (vec!["no-such-command".into()], 2, ""),
        (
            vec!["list".into(), "--expect".into(), "usb:1-1".into()],
            2,
            "PORT=SPEED",
        ),
        (
            vec!["list".into(), "--sysfs-root".into(), dir.clone()],
            2,
            "sysfs tree",
        ),
        (
            vec!["tree".into(), "--expect".into(), "x=480".into()],
            2,
            "usb:",
        ),
        (
            vec!["run".into(), "--config".into(), missing.clone()],
            2,
            "cannot read the config",
        ),
        (
            vec!["run".into(), "--config".into(), bad_cfg, "--dry-run".into()],
            2,
            "bs 3",
        ),
        (
            vec![
                "run".into(),
                "--engine".into(),
                "warp".into(),
                "--dry-run".into(),
            ],
            2,
            "--engine",
        ),
        (
            vec!["run".into(), "--sysfs-root".into(), dir.clone()],
            2,
            "--sysfs-root",
        ),
        (
            bench(&[
                "--target",
                &file,
                "--workload",
                "rand-read",
                "--size",
                "1M",
                "--qd",
                "0",
            ]),
            2,
            "'--qd <QD>': 0 is out of range: give a whole number from 1 to 4096",
        ),
        (
            bench(&[
                "--target",
                &file,
                "--workload",
                "rand-read",
                "--size",
                "1M",
                "--bs",
                "3",
            ]),
            2,
            "--bs 3",
        ),
        (
            bench(&["--target", &dir, "--workload", "seq-read"]),
            2,
            "is a directory",
        ),
        (
            bench(&["--target", "/dev/null", "--workload", "seq-read"]),
            2,
            "neither a regular file",
        ),
        (
            bench(&["--target", &missing, "--workload", "seq-read"]),
            2,
            "give --size",
        ),
        (
            bench(&[
                "--target",
                &lo.dev,
                "--workload",
                "seq-write",
                "--size",
                "1M",
            ]),
            2,
            "--allow-write-device",
        ),
        (vec!["show".into(), not_report], 2, "not a usbperf report"),
        (vec!["show".into(), missing.clone()], 4, "cannot read"),
        (
            vec!["show".into(), "/dev/zero".into()],
            2,
            "not a regular file",
        ),
        (vec!["fleet".into(), empty_fleet], 2, "no reports"),
        // upload: a URL without its scheme, a URL without a token, a zero timeout are
        // usage errors at once, not network errors retried.
        (
            upload(&["--url", "127.0.0.1:18080", "--token-file", &token]),
            2,
            "is not a collector's URL",
        ),
        (
            upload(&["--url", "http://127.0.0.1:1/api/v1/reports"]),
            2,
            "give --token-file",
        ),
        (
            upload(&[
                "--url",
                "http://127.0.0.1:1/",
                "--token-file",
                &token,
                "--timeout",
                "0",
            ]),
            2,
            "time out at once",
        ),
        (
            upload(&[
                "--url",
                "http://127.0.0.1:1/",
                "--token-file",
                &token,
                &not_report_file,
            ]),
            2,
            "not a usbperf report",
        ),
        // upload refuses what it could never deliver before it queues anything: a token
        // others may read, https:// on a build without TLS (with TLS: a CA file that holds
        // no certificate).
        (
            upload(&[
                "--url",
                "http://127.0.0.1:1/",
                "--token-file",
                &open_token,
                &not_report_file,
            ]),
            2,
            "nothing was queued",
        ),
        if cfg!(feature = "upload-tls") {
            (
                upload(&[
                    "--url",
                    "https://127.0.0.1:1/",
                    "--token-file",
                    &token,
                    "--ca-file",
                    &not_report_file,
                    &not_report_file,
                ]),
                2,
                "no CERTIFICATE block",
            )
        } else {
            (
                upload(&["--url", "https://127.0.0.1:1/", "--token-file", &token]),
                2,
                "upload-tls",
            )
        },
    ];
    for (args, want, text) in table {
        let out = common::cmd().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(want), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(text),
            "{args:?}: want {text:?} in {}",
            stderr(&out)
        );
        assert!(!stderr(&out).contains("panicked"), "{args:?}");
    }
    assert!(
        !Path::new(&missing).exists(),
        "nothing created for a refused bench"
    );
    assert!(
        !Path::new(&spool).exists(),
        "nothing queued for a refused upload"
    );
}

// 8. A report directory that cannot be written.
#[test]
fn an_unwritable_report_dir_still_tests_and_the_report_is_kept() {
    needs_root!("loop devices");
    let lo = Loop::new(16 << 20);
    let rd = RunDir::new();
    let cfg = rd.config(&format!(
        "devices:\n  - {{select: {{name: {}}}, target: read-only}}\n\
         tests:\n  - {{workload: seq-read, size: 4M}}\n",
        lo.name()
    ));
    // /proc refuses new directories even to root: the configured place cannot be written.
    let out = rd.run_in(Path::new("/proc/usbperf-reports"), Some(&cfg), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let o = stdout(&out);
    // The whole report is on standard output (the journal)...
    let yaml_start = o.find("schema_version:").expect("report on stdout");
    let doc: Value =
        serde_norway::from_str(o[yaml_start..].split("\nunit ").next().unwrap()).unwrap();
    assert_eq!(doc["devices"][0]["cells"][0]["status"], "passed");
    // ...and in the fallback directory, which the summary and the station's line name.
    assert!(o.contains("verdict PASS; report"), "summary line: {o}");
    let line = o
        .lines()
        .find(|l| l.starts_with("USBPERF-RESULT "))
        .unwrap_or_else(|| panic!("result line: {o}"));
    let path = PathBuf::from(
        line.split(' ')
            .find_map(|w| w.strip_prefix("report="))
            .unwrap_or_else(|| panic!("report= in {line}")),
    );
    assert!(path.starts_with("/run/usbperf/reports"), "{line}");
    assert!(
        o.contains(&path.display().to_string()),
        "the summary names it: {o}"
    );
    let kept: Value = serde_norway::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(kept["report_id"], doc["report_id"]);
    assert!(kept["warnings"].to_string().contains("cannot be written"));
    std::fs::remove_file(&path).unwrap();
}

// 10. Hygiene.
#[test]
fn dry_run_speaks_json_when_asked() {
    let rd = RunDir::new();
    let out = rd.run(None, &["--dry-run", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert!(v["config"]["tests"]
        .as_array()
        .is_some_and(|t| !t.is_empty()));
}

// 11. What a person reads.
#[test]
fn bench_speaks_words_not_rust_names() {
    needs_root!("loop devices");
    let lo = Loop::new(16 << 20);
    let out = usbperf(&[
        "bench",
        "--target",
        &lo.dev,
        "--workload",
        "seq-read",
        "--size",
        "16M",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let t = stdout(&out);
    let first = t.lines().next().unwrap();
    assert!(
        first.starts_with(&format!("seq-read on {} (16.0 MiB)", lo.dev)),
        "{first}"
    );
    assert!(first.contains("stopped by the size bound"), "{first}");
    assert!(t.contains("total  16.0 MiB (16777216 bytes)"), "{t}");
    for leak in ["SeqRead", "Size", "ReadBuffered"] {
        assert!(!t.contains(leak), "{leak} in {t}");
    }
    let out = usbperf(&[
        "bench",
        "--target",
        &lo.dev,
        "--workload",
        "seq-read",
        "--size",
        "4M",
        "--format",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["target"]["path"],
        lo.dev.as_str(),
        "the device keeps its name"
    );
}

// 10. bench on safety/signals: a second signal aborts at once and still removes its file.
#[test]
fn a_second_sigint_aborts_bench_at_once_and_removes_its_file() {
    let scratch = Scratch::new("edges-sig2");
    let path = scratch.path("big.bin");
    // A read test on a new 2 GiB file: the file is created and filled first, which takes
    // seconds, so both signals land while it is being prepared.
    let mut child = common::cmd()
        .args(["bench", "--target"])
        .arg(&path)
        .args(["--workload", "seq-read", "--size", "2G"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut buf = [0u8; 512];
    let n = stderr.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("engine:"));
    // Wait until the file exists, then interrupt twice.
    let t0 = std::time::Instant::now();
    while !path.exists() && t0.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(path.exists(), "the test file was created");
    for _ in 0..2 {
        // SAFETY: signalling our own child, not yet waited for.
        assert_eq!(
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
            0
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(3), "{rest}");
    assert!(
        rest.contains("second SIGINT: removed 1 test file(s)"),
        "the abort removed the registered file: {rest}"
    );
    assert!(!path.exists(), "no file left after the abort");
}

// Review finding: a JUnit (or any) file named without a directory is written in the working
// directory, not refused because its parent is "".
#[test]
fn a_junit_file_without_a_directory_lands_in_the_working_directory() {
    let rd = RunDir::new();
    let cfg = rd.config("devices:\n  - select: {name: no-such-disk}\n");
    let mut a = rd.args(Some(&cfg));
    a.extend(["--junit".to_string(), "junit.xml".to_string()]);
    let out = common::cmd()
        .args(&a)
        .current_dir(rd.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("cannot write the JUnit"),
        "{}",
        stderr(&out)
    );
    let xml = std::fs::read_to_string(rd.dir.path().join("junit.xml")).unwrap();
    assert!(xml.contains("<testsuites"), "{xml}");
}

// Review finding: growing an existing file to --size keeps the free-space headroom.
#[test]
fn bench_never_grows_an_existing_file_past_the_headroom() {
    let scratch = Scratch::new("edges-grow");
    let f = scratch.path("existing.bin");
    std::fs::write(&f, vec![7u8; 1 << 20]).unwrap();
    let out = usbperf(&[
        "bench",
        "--target",
        f.to_str().unwrap(),
        "--workload",
        "seq-write",
        "--size",
        "900T",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("headroom"), "{}", stderr(&out));
    assert_eq!(
        std::fs::metadata(&f).unwrap().len(),
        1 << 20,
        "the file was not grown"
    );
}

/// A FIFO given as the config or the token file is refused at once (exit 2, "not a regular
/// file"), never waited on: `run` and `upload` used to block forever reading it.
#[test]
fn a_fifo_as_config_or_token_is_refused_not_waited_on() {
    let dir = TempDir::new("fifo");
    let cfg = dir.path().join("cfg.yaml");
    let tok = dir.path().join("token");
    for p in [&cfg, &tok] {
        nix::unistd::mkfifo(
            p.as_path(),
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .unwrap();
    }
    let reports = dir.path().join("reports");
    let spool = dir.path().join("spool");
    let runs: [Vec<&str>; 2] = [
        vec![
            "run",
            "--dry-run",
            "--config",
            cfg.to_str().unwrap(),
            "--report-dir",
            reports.to_str().unwrap(),
        ],
        vec![
            "upload",
            "--url",
            "http://127.0.0.1:9/api/v1/reports",
            "--token-file",
            tok.to_str().unwrap(),
            "--spool",
            spool.to_str().unwrap(),
        ],
    ];
    for args in runs {
        let mut child = common::cmd()
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A hang is what this guards against: the child is killed after 20 s.
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if started.elapsed() > std::time::Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = status.unwrap_or_else(|| panic!("{args:?} blocked on the FIFO: {err}"));
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("not a regular file"), "{args:?}: {err}");
    }
}

/// The link check's failure names its port and cause in a sentence or two; on an 80-column
/// serial console it is wrapped, never one line of 200 characters.
#[test]
fn a_failed_link_check_fits_the_console_width() {
    let o = common::cmd()
        .args(["list", "--expect", "usb:9-9=480"])
        .env("COLUMNS", "80")
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{}", stderr(&o));
    assert!(out.contains("link usb:9-9: FAIL"), "{out}");
    for l in out.lines() {
        assert!(
            l.chars().count() <= 80,
            "{} columns: {l}",
            l.chars().count()
        );
    }
}

/// A board's serial console often runs in the C locale, where `µ`, `±` or `×` come out as
/// garbage: every subcommand's help is plain ASCII.
#[test]
fn every_help_is_ascii_for_a_serial_console() {
    for args in [
        vec!["--help"],
        vec!["list", "--help"],
        vec!["tree", "--help"],
        vec!["run", "--help"],
        vec!["bench", "--help"],
        vec!["show", "--help"],
        vec!["fleet", "--help"],
        vec!["upload", "--help"],
        vec!["power-cut", "write", "--help"],
        vec!["power-cut", "verify", "--help"],
        vec!["calibrate", "--help"],
    ] {
        let o = usbperf(&args);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        if let Some(l) = out.lines().find(|l| !l.is_ascii()) {
            panic!("{args:?}: {l}");
        }
    }
}
