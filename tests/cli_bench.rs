//! Integration tests of `usbperf-matrix bench` as a user runs it: units on the command line,
//! output formats, exit codes, the created file removed afterwards.

mod common;

use std::process::Command;

use common::Scratch;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_usbperf-matrix"))
        .arg("bench")
        .args(args)
        .output()
        .unwrap()
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
    assert!(
        stderr.contains("engine: uring"),
        "one line says which engine ran: {stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["bytes"], 4 << 20);
    assert_eq!(v["params"]["queue_depth"], 8);
    assert_eq!(v["engine"], "uring");
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
