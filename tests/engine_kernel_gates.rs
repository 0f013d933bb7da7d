//! The engine choice when the kernel shuts io_uring off: on a kernel with the
//! `kernel.io_uring_disabled` sysctl (6.6+), each setting ends in a working engine and one line
//! saying which and why. This binary holds a single test because it changes a system-wide
//! setting (cargo runs test binaries one after another); the old value is put back on every
//! path, a panic included. Only in builds with the io_uring engine (there is nothing to gate
//! without it).
#![cfg(feature = "uring")]

mod common;

use std::path::Path;

use common::*;

const SYSCTL: &str = "/proc/sys/kernel/io_uring_disabled";

/// Restores the sysctl when dropped.
struct Restore(String);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write(SYSCTL, &self.0);
    }
}

fn bench(target: &Path, engine: &str) -> std::process::Output {
    common::cmd()
        .args(["bench", "--target"])
        .arg(target)
        .args([
            "--workload",
            "rand-read",
            "--size",
            "1M",
            "--runtime",
            "200ms",
            "--engine",
            engine,
            "--format",
            "json",
        ])
        .output()
        .unwrap()
}

#[test]
fn io_uring_disabled_sysctl_falls_back_to_the_thread_pool_and_says_why() {
    needs_root!("writes kernel.io_uring_disabled");
    require_root("writes kernel.io_uring_disabled");
    let old = std::fs::read_to_string(SYSCTL).unwrap_or_else(|e| {
        panic!("{SYSCTL}: {e}: this kernel is older than 6.6 (run on the CI host's kernel)")
    });
    let _restore = Restore(old.trim().to_string());
    let scratch = Scratch::new("kernel-gates");
    let file = scratch.path("t.bin");
    for (value, auto_engine, why) in [
        ("0", "uring", "uring engine (auto)"),
        ("2", "sync", "kernel.io_uring_disabled = 2"),
    ] {
        std::fs::write(SYSCTL, value).unwrap();
        let out = bench(&file, "auto");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "io_uring_disabled={value}: {stderr}"
        );
        assert!(stderr.contains(why), "io_uring_disabled={value}: {stderr}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["engine"], auto_engine, "io_uring_disabled={value}");
        assert!(v["iops"].as_f64().unwrap() > 0.0);
        // Asked for by name, io_uring is refused with the reason and how to fix it (exit 4:
        // the tool cannot do its job here), never a silent switch.
        if value != "0" {
            let out = bench(&file, "uring");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(4), "{stderr}");
            assert!(
                stderr.contains("io_uring_disabled") && stderr.contains("--engine sync"),
                "{stderr}"
            );
        }
    }
}
