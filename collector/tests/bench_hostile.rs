//! Benchmark: what bodies built to exhaust the parser cost the running collector. The real
//! usbperf-collect (the build cargo made for these tests) on a SQLite file in a temporary
//! directory receives, 20 times each, (a) a ~160 KB YAML report whose one anchored device of
//! 1,000 cells is named 10,000 times by aliases, and (b) a report nested 100,000 levels deep
//! under a key it ignores. Printed per body: the time from the request's start to the whole
//! answer (median and worst), the collector's resident memory (VmRSS) before and after and
//! its peak (VmHWM), and the rows stored. It fails (non-zero exit) when an answer took over
//! 50 ms, the memory grew by over 20 MB, or any row was stored.
//!
//! Run: cargo test --manifest-path collector/Cargo.toml --test bench_hostile -- --ignored
//! --nocapture (scripts/test-collect runs it after the tests).

mod common;
mod hostile;

use std::time::{Duration, Instant};

use common::*;

const POSTS: usize = 20;
const MAX_ANSWER: Duration = Duration::from_millis(50);
const MAX_GROWTH: u64 = 20 << 20;

/// (VmRSS, VmHWM) of `pid`, bytes.
fn memory(pid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// One POST on a fresh connection: (status, time from the request's start to the whole
/// answer).
fn timed_post(url: &str, body: &[u8], json: bool) -> (u16, Duration) {
    let req = authorized_post(url, json, Duration::from_secs(120));
    let t0 = Instant::now();
    let status = match req.send_bytes(body) {
        Ok(r) => {
            let s = r.status();
            let _ = r.into_string();
            s
        }
        Err(ureq::Error::Status(s, r)) => {
            let _ = r.into_string();
            s
        }
        Err(e) => panic!("POST {url}: {e}"),
    };
    (status, t0.elapsed())
}

fn rows(db: &str) -> u64 {
    ["reports", "devices", "metrics", "fleet_records"]
        .iter()
        .map(|t| count(db, t))
        .sum()
}

struct Figures {
    name: &'static str,
    bytes: usize,
    statuses: Vec<u16>,
    median: Duration,
    worst: Duration,
    rss_before: u64,
    rss_after: u64,
    hwm_after: u64,
    rows: u64,
}

impl Figures {
    fn growth(&self) -> u64 {
        self.rss_after.saturating_sub(self.rss_before)
    }
    /// The peak over the memory before: VmHWM is the process's peak since it started, so
    /// this counts any spike while these bodies were answered.
    fn peak_growth(&self) -> u64 {
        self.hwm_after.saturating_sub(self.rss_before)
    }
}

fn measure(c: &Collector, db: &str, name: &'static str, body: &[u8], json: bool) -> Figures {
    let rows_before = rows(db);
    let (rss_before, _) = memory(c.pid());
    let mut times = Vec::with_capacity(POSTS);
    let mut statuses = Vec::new();
    for _ in 0..POSTS {
        let (s, t) = timed_post(&c.url(), body, json);
        times.push(t);
        if !statuses.contains(&s) {
            statuses.push(s);
        }
    }
    let (rss_after, hwm_after) = memory(c.pid());
    times.sort();
    Figures {
        name,
        bytes: body.len(),
        statuses,
        median: times[POSTS / 2],
        worst: times[POSTS - 1],
        rss_before,
        rss_after,
        hwm_after,
        rows: rows(db) - rows_before,
    }
}

fn mb(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[test]
#[ignore = "a benchmark: run with --ignored --nocapture (scripts/test-collect does)"]
fn hostile_bodies_are_answered_fast_in_bounded_memory_and_store_nothing() {
    let dir = TempDir::new("bench-hostile");
    let db = format!("sqlite:{}", dir.path().join("r.db").display());
    let c = Collector::start(&db);
    let alias = hostile::alias_bomb("a11a5a11a5a11a50");
    let deep = hostile::deep_yaml("dee9dee9dee9dee9", 100_000);
    // Warm up the connection path and the database once, with a body refused early.
    let _ = timed_post(&c.url(), b"hello: world\n", false);
    let hostile = [
        measure(
            &c,
            &db,
            "(a) 10,000 aliases of a 1,000-cell device",
            alias.as_bytes(),
            false,
        ),
        measure(
            &c,
            &db,
            "(b) flow sequence 100,000 deep",
            deep.as_bytes(),
            false,
        ),
    ];
    // For scale, not checked: an ordinary report of the same kind (stored on the first post,
    // a duplicate answered from the index after).
    let ordinary = hostile::alias_free("a11a5a11a5a11a51");
    let reference = measure(
        &c,
        &db,
        "(ref) same report, no aliases, decoded",
        ordinary.as_bytes(),
        false,
    );

    println!(
        "\nbench-hostile: usbperf-collect ({} build) on SQLite, {POSTS} posts per body, each \
         on a new connection",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    println!(
        "{:<42} {:>8} {:>7} {:>9} {:>8} {:>10} {:>9} {:>9} {:>8} {:>11} {:>5}",
        "body",
        "bytes",
        "status",
        "median ms",
        "worst ms",
        "RSS bef MB",
        "RSS aft MB",
        "growth MB",
        "HWM MB",
        "peak grw MB",
        "rows"
    );
    for f in hostile.iter().chain([&reference]) {
        let statuses: Vec<String> = f.statuses.iter().map(u16::to_string).collect();
        println!(
            "{:<42} {:>8} {:>7} {:>9.2} {:>8.2} {:>10.1} {:>9.1} {:>9.1} {:>8.1} {:>11.1} {:>5}",
            f.name,
            f.bytes,
            statuses.join("/"),
            ms(f.median),
            ms(f.worst),
            mb(f.rss_before),
            mb(f.rss_after),
            mb(f.growth()),
            mb(f.hwm_after),
            mb(f.peak_growth()),
            f.rows
        );
    }

    let mut over = Vec::new();
    for f in &hostile {
        if f.statuses != [400] {
            over.push(format!("{}: answered {:?}, not 400", f.name, f.statuses));
        }
        if f.median > MAX_ANSWER {
            over.push(format!(
                "{}: median answer {:.1} ms > {} ms",
                f.name,
                ms(f.median),
                MAX_ANSWER.as_millis()
            ));
        }
        if f.growth() > MAX_GROWTH || f.peak_growth() > MAX_GROWTH {
            over.push(format!(
                "{}: memory grew {:.1} MB (peak {:.1} MB) > {} MB",
                f.name,
                mb(f.growth()),
                mb(f.peak_growth()),
                MAX_GROWTH >> 20
            ));
        }
        if f.rows != 0 {
            over.push(format!("{}: {} rows stored", f.name, f.rows));
        }
    }
    assert!(over.is_empty(), "over the bounds:\n  {}", over.join("\n  "));
}
