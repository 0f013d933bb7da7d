//! A limit judged against its figure's own precision, on a real loop device held by the blkio
//! throttle (cgroup v1) to a stick's 15 MiB/s of writing: a limit inside the figure's 95 %
//! confidence interval is marginal, one outside it a clear pass or fail, as the report's own
//! figure and interval say. Limits far above and below the throttle are clear every time;
//! limits near it land inside or outside the interval run by run, and each is checked
//! against the interval the run stated.

mod common;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use common::*;

/// A blkio cgroup (v1) that holds one device to `write_bps`; removed on drop.
struct Throttle(PathBuf);

impl Throttle {
    fn new(dev: &str, write_bps: u64) -> Option<Throttle> {
        let root = PathBuf::from("/sys/fs/cgroup/blkio");
        if !root.join("blkio.throttle.write_bps_device").exists() {
            return None;
        }
        let dir = root.join(format!("usbperf-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rdev = std::fs::metadata(dev).map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.rdev()
        });
        let rdev = rdev.unwrap();
        let (major, minor) = (libc::major(rdev), libc::minor(rdev));
        std::fs::write(
            dir.join("blkio.throttle.write_bps_device"),
            format!("{major}:{minor} {write_bps}\n"),
        )
        .unwrap();
        Some(Throttle(dir))
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The reasons a rule gave in a cell.
fn reasons_of<'a>(reasons: &'a serde_json::Value, rule: &str) -> Vec<&'a serde_json::Value> {
    reasons
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["rule"] == rule)
        .collect()
}

#[test]
fn a_limit_inside_the_figure_s_interval_is_marginal_outside_it_clear() {
    needs_root!("the blkio cgroup and loop devices");
    require_root("loop devices and the blkio cgroup");
    let lo = Loop::new(64 << 20);
    let Some(throttle) = Throttle::new(&lo.dev, 15 << 20) else {
        panic!(
            "no blkio controller of cgroup v1 at /sys/fs/cgroup/blkio: this test needs one \
             (the machine CI runs on has it)"
        );
    };
    let limits = [2.0, 14.5, 14.9, 15.0, 15.1, 15.5, 60.0];
    let mut cfg = format!(
        "devices:\n  - {{select: {{name: {}}}, required: true, target: raw}}\n\
         retest: 0\n\
         tests:\n  - {{workload: seq-write, bs: 1M, size: 16M, runtime: 2s, cache: direct, \
         precision_percent: 2}}\n\
         thresholds:\n",
        lo.name()
    );
    for l in limits {
        cfg.push_str(&format!(
            "  - {{select: {{name: {}}}, workload: seq-write, min_mib_per_s: {l}}}\n",
            lo.name()
        ));
    }
    let rd = RunDir::new();
    let cfg = rd.config(&cfg);
    let procs = throttle.0.join("cgroup.procs");
    let mut cmd = common::cmd();
    cmd.args(rd.args(Some(&cfg)))
        .args(["--format", "json", "--engine", "sync"]);
    // The run joins the throttled group before it starts: its writes are held to 15 MiB/s.
    unsafe {
        cmd.pre_exec(move || std::fs::write(&procs, std::process::id().to_string()));
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let files = rd.report_files();
    assert_eq!(files.len(), 1, "{stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    let cell = &report["devices"][0]["cells"][0];
    let res = &cell["result"];
    let p = &res["precision"];
    // The figure a limit judges: the sustained rate after a drop (the throttle lets a burst
    // through after idle), else the steady rate after the warm-up; with its interval.
    let drop = &p["drop"];
    let (figure, ci) = if drop.is_object() {
        (
            drop["sustained_mib_per_s"].as_f64().unwrap(),
            drop["ci95_percent"].as_f64(),
        )
    } else {
        (
            p["steady_mib_per_s"]
                .as_f64()
                .or_else(|| res["mib_per_s"].as_f64())
                .unwrap(),
            p["ci95_percent"].as_f64(),
        )
    };
    assert!(
        (13.5..16.5).contains(&figure),
        "the throttle holds the write near 15 MiB/s: {cell:#}"
    );
    let Some(ci) = ci else {
        // Steady state not reached within the budget: every rate limit is inconclusive.
        for (i, _) in limits.iter().enumerate() {
            let rule = format!("thresholds[{i}]");
            assert!(
                reasons_of(&cell["reasons"], &rule)
                    .iter()
                    .any(|r| r["text"].as_str().unwrap().contains("inconclusive")),
                "{rule}: {cell:#}"
            );
        }
        return;
    };
    for (i, l) in limits.iter().enumerate() {
        let rule = format!("thresholds[{i}]");
        let of_rule = reasons_of(&cell["reasons"], &rule);
        let inside = (figure - l).abs() <= figure * ci / 100.0;
        let what = format!("{rule} min {l} against {figure:.3} +-{ci} %: {of_rule:?}");
        if inside {
            assert!(
                !of_rule.is_empty() && of_rule.iter().all(|r| r["marginal"] == true),
                "inside the interval: marginal: {what}"
            );
        } else if figure < *l {
            assert!(
                of_rule
                    .iter()
                    .any(|r| r["marginal"] != true && r["kind"] == "threshold"),
                "below, outside the interval: a clear failure: {what}"
            );
        } else {
            assert!(
                of_rule.is_empty(),
                "above, outside the interval: a clear pass: {what}"
            );
        }
    }
    assert_eq!(
        out.status.code(),
        Some(1),
        "60 MiB/s is never met: {stderr}"
    );
}
