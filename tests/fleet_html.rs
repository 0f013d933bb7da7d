//! The fleet's HTML page in a real headless browser (Debian's chromium): it loads without
//! script errors, draws the expected charts, threshold lines and knee markers, fetches
//! nothing, and renders to a screenshot.

mod common;
#[path = "common/fleet_gen.rs"]
mod fleet_gen;

use std::path::Path;
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

const CHROMIUM: &str = "/usr/bin/chromium";

fn chromium(profile: &Path, extra: &[&str], page: &Path) -> Output {
    assert!(
        Path::new(CHROMIUM).exists(),
        "chromium is missing: this test renders the fleet page in a real browser; install it \
         with `apt-get install -y chromium` (scripts/test.sh does)"
    );
    Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium starts")
}

/// The `data-*` attributes of `<body>` in the DOM chromium dumped.
fn body_attr(dom: &str, name: &str) -> Option<String> {
    let body = &dom[dom.find("<body")?..];
    let tag = &body[..body.find('>')?];
    let key = format!("data-{name}=\"");
    let at = tag.find(&key)? + key.len();
    Some(tag[at..at + tag[at..].find('"')?].to_string())
}

#[test]
fn html_page_renders_in_chromium_with_its_charts() {
    let d = TempDir::new("fleet-html");
    let dir = d.path().join("reports");
    fleet_gen::generate_args(&["--units", "150", "--out", dir.to_str().unwrap()]);
    // One unreadable report, listed on the page.
    std::fs::write(dir.join("broken.yaml"), "schema_version: 1\nstarted_at: [").unwrap();

    let page = d.path().join("fleet.html");
    let run = |extra: &[&str]| {
        let mut a = vec!["fleet", dir.to_str().unwrap()];
        a.extend(extra);
        let o = common::cmd().args(&a).output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        o
    };
    run(&["--format", "html", "--out", page.to_str().unwrap()]);
    let summary: Value = serde_json::from_slice(&run(&["--format", "json"]).stdout).unwrap();
    let html = std::fs::read_to_string(&page).unwrap();
    // Self-contained: nothing to fetch.
    for needle in ["http://", "https://", "<link", "src=", "@import"] {
        assert!(!html.contains(needle), "the page references {needle}");
    }

    let charts: usize = summary["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["metrics"].as_array().unwrap().len())
        .sum();
    let models = summary["write_curves"].as_array().unwrap().len();
    assert_eq!(models, 2, "two stick models ran write-curve");

    let profile = TempDir::new("chromium-profile");
    let o = chromium(profile.path(), &["--dump-dom"], &page);
    let dom = String::from_utf8_lossy(&o.stdout);
    let log = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        body_attr(&dom, "rendered").as_deref(),
        Some("ok"),
        "the page's load handler did not run\n{log}"
    );
    assert_eq!(body_attr(&dom, "errors"), None, "script errors");
    assert!(!log.contains("Uncaught"), "console errors:\n{log}");
    let n = |k: &str| -> usize { body_attr(&dom, k).unwrap().parse().unwrap() };
    assert_eq!(
        n("dist-charts"),
        charts,
        "one distribution chart per group and metric"
    );
    assert_eq!(n("curve-charts"), models);
    assert_eq!(n("curves"), 24, "12 curves per model");
    // The Kingston model's curves have a knee, the SanDisk's none.
    assert_eq!(n("knees"), 12);
    // Factory thresholds (seq-write, rand-read, link on USB; seq-write on eMMC) on every
    // board, learned ones on top.
    assert!(n("threshold-lines") >= 8, "{}", n("threshold-lines"));
    assert!(n("outlier-rows") >= 5, "{}", n("outlier-rows"));
    let throughput_charts = summary["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["metrics"].as_array().unwrap())
        .filter(|m| m["metric"].as_str().unwrap().ends_with(".mib_per_s"))
        .count();
    assert_eq!(
        n("trends"),
        throughput_charts,
        "a trend under every MiB/s chart"
    );
    assert!(
        dom.contains("broken.yaml"),
        "the unreadable report is listed"
    );
    assert!(dom.contains("usb:1-2"), "the worst port is named");
    assert!(
        dom.contains("href=\"file:///"),
        "outliers link to their reports"
    );

    let shot = d.path().join("fleet.png");
    let profile = TempDir::new("chromium-profile");
    let o = chromium(
        profile.path(),
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,1800",
            "--hide-scrollbars",
        ],
        &page,
    );
    let png = std::fs::read(&shot).unwrap_or_else(|e| {
        panic!(
            "no screenshot ({e}): {}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(
        png.len() > 20_000,
        "a blank page compresses to less: {} bytes",
        png.len()
    );
}
