//! Integration tests of `usbperf-matrix bench` as a user runs it: units on the command line,
//! output formats, exit codes, the created file removed afterwards.

mod common;

use common::Scratch;

fn bench(args: &[&str]) -> std::process::Output {
    common::cmd().arg("bench").args(args).output().unwrap()
}

#[test]
fn json_run_on_a_new_file_passes_and_cleans_up() {
    let scratch = Scratch::new("cli-json");
    let path = scratch.path("t.dat");
    let out = bench(&[
        "--target",
        path.to_str().unwrap(),
        "--workload",
        "rand-read",
        "--bs",
        "4k",
        "--qd",
        "8",
        "--jobs",
        "2",
        "--runtime",
        "5s",
        "--size",
        "4M",
        "--format",
        "json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let engine = if cfg!(feature = "uring") {
        "uring"
    } else {
        "sync"
    };
    assert!(
        stderr.contains(&format!("engine: {engine}")),
        "one line says which engine ran: {stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["bytes"], 4 << 20);
    assert_eq!(v["params"]["queue_depth"], 8);
    assert_eq!(v["engine"], engine);
    assert!(v["read"]["latency"]["p99_ns"].as_u64().unwrap() > 0);
    assert!(!path.exists(), "the created file is deleted without --keep");
}

#[test]
fn yaml_output_round_trips_into_the_result_type() {
    let scratch = Scratch::new("cli-yaml");
    let path = scratch.path("t.dat");
    let out = bench(&[
        "--target",
        path.to_str().unwrap(),
        "--workload",
        "seq-write",
        "--size",
        "2M",
        "--engine",
        "sync",
        "--format",
        "yaml",
        "--keep",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: usbperf::workload::BenchResult = serde_norway::from_slice(&out.stdout).unwrap();
    assert_eq!(r.bytes, 2 << 20);
    assert_eq!(r.engine, usbperf::engine::EngineKind::Sync);
    assert!(path.exists(), "--keep keeps the file");
}

#[test]
fn a_bad_size_is_a_usage_error() {
    let out = bench(&[
        "--target",
        "/nonexistent",
        "--workload",
        "rand-read",
        "--size",
        "4x",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("binary suffix"));
}

#[test]
fn a_failed_verify_is_a_failed_verdict() {
    let scratch = Scratch::new("cli-verify");
    let path = scratch.path("t.dat");
    // A file of zeros has no pattern: a read-only verify must fail its verdict (exit 1).
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
    let out = bench(&[
        "--target",
        path.to_str().unwrap(),
        "--workload",
        "verify",
        "--verify-phase",
        "read",
        "--bs",
        "64k",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("16 bad"));
}

#[test]
fn sigint_stops_the_run_cleanly_with_exit_code_3() {
    let scratch = Scratch::new("cli-sigint");
    let path = scratch.path("t.dat");
    let mut child = common::cmd()
        .args(["bench", "--target"])
        .arg(&path)
        .args([
            "--workload",
            "rand-read",
            "--size",
            "8M",
            "--qd",
            "2",
            "--jobs",
            "1",
            "--time-based",
            "--runtime",
            "10m",
            "--format",
            "json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the run has started (the engine line is printed before it), then interrupt.
    let mut stderr = child.stderr.take().unwrap();
    let mut line = [0u8; 256];
    let n = std::io::Read::read(&mut stderr, &mut line).unwrap();
    assert!(String::from_utf8_lossy(&line[..n]).contains("engine:"));
    // SAFETY: signalling our own child, which has not been waited for yet.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "killed instead of stopping: {:?}",
        out.status
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stopped_by"], "interrupted");
    assert!(
        !path.exists(),
        "the created file is removed after an interrupt too"
    );
}

/// A file on tmpfs refuses non-blocking I/O (`RWF_NOWAIT`), so io_uring would punt every I/O to
/// its worker threads: `auto` runs the thread pool there, says so on stderr and in the result,
/// and `--engine uring` still runs io_uring because it was asked for by name.
#[cfg(feature = "uring")]
#[test]
fn auto_says_which_engine_ran_on_a_target_without_nonblocking_io() {
    let shm = std::path::Path::new("/dev/shm");
    let is_tmpfs = nix::sys::statfs::statfs(shm)
        .map(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
        .unwrap_or(false);
    assert!(
        is_tmpfs,
        "/dev/shm must be a tmpfs for this test (it is on Debian and Ubuntu)"
    );
    let path = shm.join(format!("usbperf-test-auto-{}.dat", std::process::id()));
    let target = path.to_str().unwrap();
    let args = |engine: &'static str| {
        vec![
            "--target",
            target,
            "--workload",
            "rand-read",
            "--size",
            "4M",
            "--engine",
            engine,
            "--format",
            "json",
        ]
    };
    let out = bench(&args("auto"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("engine for this target: sync engine (auto)")
            && stderr.contains("RWF_NOWAIT"),
        "{stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["engine"], "sync");
    assert_eq!(v["bytes"], 4 << 20);

    let out = bench(&args("uring"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("engine for this target"), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["engine"], "uring");
    assert_eq!(v["bytes"], 4 << 20);
    assert!(!path.exists(), "the created file is deleted without --keep");
}

/// Without a terminal (a serial console, a pipe, the journal) a long bench says it is alive
/// every 10 s on standard error, with the bytes moved and the rate; standard output keeps
/// only the result.
#[test]
fn a_long_bench_prints_progress_lines_without_a_terminal() {
    let scratch = Scratch::new("cli-progress");
    let path = scratch.path("t.dat");
    let out = bench(&[
        "--target",
        path.to_str().unwrap(),
        "--workload",
        "seq-read",
        "--size",
        "16M",
        "--time-based",
        "--runtime",
        "25s",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Lines are wrapped to the console (80 columns here): a progress line may break at any
    // space, so the words are counted with the breaks folded back into single spaces.
    let err = String::from_utf8_lossy(&out.stderr)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let progress = err.matches("seq-read on ").count();
    assert!(progress >= 2, "progress lines:\n{err}");
    assert_eq!(err.matches(" moved, ").count(), progress, "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("running "),
        "progress stays off standard output:\n{stdout}"
    );
    assert!(stdout.contains("stopped by the time bound"), "{stdout}");
}

/// What the command line asks of its target is a usage error (exit 2) in the user's units: a
/// --size larger than the device, a device node that is not there.
#[test]
fn a_target_that_cannot_hold_the_command_is_a_usage_error_in_units() {
    needs_root!("loop devices");
    let lo = common::Loop::new(64 << 20);
    let dev = format!("/dev/{}", lo.name());
    let out = bench(&["--target", &dev, "--workload", "seq-read", "--size", "100G"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("64.0 MiB") && err.contains("100G"), "{err}");
    assert!(
        !err.contains("67108864") && !err.contains("107374182400"),
        "{err}"
    );
    let out = bench(&[
        "--target",
        "/dev/usbperf-no-such-disk",
        "--workload",
        "seq-read",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no such device") && err.contains("usbperf-matrix list"),
        "{err}"
    );
    assert!(
        !err.contains("give --size"),
        "advice that cannot work: {err}"
    );
}

/// A time-based test on a real file states its figure's precision: 100 ms windows after a
/// warm-up, the 95 % confidence interval of the mean rate and the trend; a one-pass test too
/// short for four windows says the precision is not known (no interval), never a made-up one.
#[test]
fn a_figure_states_its_precision_or_that_it_is_not_known() {
    let scratch = Scratch::new("cli-precision");
    let path = scratch.path("t.dat");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--target",
            path.to_str().unwrap(),
            "--workload",
            "rand-read",
            "--bs",
            "4k",
            "--size",
            "4M",
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let out = bench(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let v = run(&["--runtime", "1500ms", "--time-based"]);
    let p = &v["precision"];
    assert_eq!(p["window_ms"], 100, "{p:#}");
    let samples = p["samples_mib_per_s"].as_array().unwrap();
    // 1.5 s in 100 ms windows, the first dropped as warm-up.
    assert!((10..=15).contains(&samples.len()), "{p:#}");
    let mean = samples.iter().map(|s| s.as_f64().unwrap()).sum::<f64>() / samples.len() as f64;
    // The windows are the run's own rate: their mean is the figure, within the interval.
    let mib = v["mib_per_s"].as_f64().unwrap();
    let ci = p["ci95_percent"].as_f64().unwrap();
    assert!(ci >= 0.0, "{p:#}");
    assert!(
        ((mean - mib) / mib).abs() < 0.15,
        "windows' mean {mean} against the figure {mib}: {p:#}"
    );
    assert!(p["trend_percent"].is_number(), "{p:#}");
    eprintln!(
        "rand-read 4k on a file: {mib:.1} MiB/s, 95 % CI +-{ci:.2} %, {} windows",
        samples.len()
    );
    // One pass of 4 MiB is over in milliseconds: too few windows for a precision.
    let v = run(&["--runtime", "5s"]);
    assert!(
        v["precision"]["ci95_percent"].is_null(),
        "{:#}",
        v["precision"]
    );
    assert_eq!(v["precision"]["steady"], false);
}
