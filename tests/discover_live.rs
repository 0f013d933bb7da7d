//! Discovery on this machine's real `/sys`: the root disk and a loop device made for the
//! test, through libudev and the sysfs walker, in every output format.

mod common;

use common::*;
use serde_json::Value;

fn holds_root(d: &Value) -> bool {
    let mounted_at_root = |ms: &Value| {
        ms.as_array()
            .map(|a| a.iter().any(|m| m["mountpoint"] == "/"))
            .unwrap_or(false)
    };
    mounted_at_root(&d["mounts"])
        || d["partitions"]
            .as_array()
            .map(|ps| ps.iter().any(|p| mounted_at_root(&p["mounts"])))
            .unwrap_or(false)
}

#[test]
fn lists_the_root_disk_and_a_loop_device_with_both_backends() {
    needs_root!("loop devices");
    let lo = Loop::new(48 * 1024 * 1024);
    for backend in ["udev", "sysfs"] {
        let out = run_bin(None, &["list", "--format", "json", "--backend", backend]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v = stdout_json(&out);
        assert_eq!(v["backend"], backend);
        let disks = v["disks"].as_array().unwrap();
        let root: Vec<&Value> = disks.iter().filter(|d| holds_root(d)).collect();
        assert_eq!(
            root.len(),
            1,
            "[{backend}] exactly one disk must hold / (overlay or tmpfs roots are not disks): {disks:#?}"
        );
        let l = disks
            .iter()
            .find(|d| d["name"] == lo.name())
            .unwrap_or_else(|| panic!("[{backend}] {} not listed", lo.dev));
        assert_eq!(l["class"], "loop");
        assert_eq!(l["size_bytes"], 48 * 1024 * 1024);
        assert_eq!(l["dev_node"], lo.dev.as_str());
        assert_eq!(l["logical_block_size_bytes"], 512);
    }
}

#[test]
fn yaml_and_table_outputs_on_the_live_system() {
    needs_root!("loop devices");
    let lo = Loop::new(16 * 1024 * 1024);
    let out = run_bin(None, &["list", "--format", "yaml"]);
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_norway::from_slice(&out.stdout).expect("list --format yaml is YAML");
    assert!(v["disks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["name"] == lo.name() && d["class"] == "loop"));

    let out = run_bin(None, &["list"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("NAME"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with(lo.name()) && l.contains(" loop ")),
        "{text}"
    );
}

#[test]
fn usage_errors_exit_2() {
    let out = run_bin(None, &["list", "--format", "xml"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run_bin(None, &["list", "--sysfs-root", "/nonexistent/dir"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not look like a sysfs tree"), "{err}");
    let out = run_bin(None, &["list", "--expect", "1-1=480"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run_bin(None, &["list", "--backend", "udev", "--sysfs-root", "/sys"]);
    assert_eq!(out.status.code(), Some(2));
}
