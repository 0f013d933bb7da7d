//! Benchmark: what bodies built to exhaust the parser cost the running collector. The real
//! usbperf-collect (the build cargo made for these tests) on a SQLite file in a temporary
//! directory receives, 20 times each: (a) a ~160 KB YAML report whose one anchored device of
//! 1,000 cells is named 10,000 times by aliases, (b) a report nested 100,000 levels deep under
//! a key it ignores, and every body of `hostile::cases()`: the alias body with its lines
//! broken by CR, NEL and LS, a body nested 1,000,000 deep (after a CR, and plain), 2,000,000
//! reasons in 4 MB, 700,000 unknown keys, 256 devices of 1,024 cells. Printed per body: the
//! time from the body's last byte to the answer (median and worst), the collector's resident
//! memory (VmRSS) before and after and its peak (VmHWM, reset before each body), and the rows
//! stored. Then four of each body at once (peak within 100 MB), and `show` and `fleet` of
//! usbperf-matrix on each body as a file (refused, peak RSS within 50 MB). It fails (non-zero
//! exit) when an answer took over 50 ms, the memory grew by over 20 MB, or any row was stored.
//!
//! Run: cargo test --release --manifest-path collector/Cargo.toml --test bench_hostile --
//! --ignored --nocapture (scripts/ci/test-collect.sh runs it after the tests). Needs root
//! (/proc/PID/clear_refs).

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

/// One POST on a fresh connection, written by hand so the clock starts at the body's last
/// byte: (status, time from the last byte written to the answer's status line).
fn timed_post(url: &str, body: &[u8], json: bool) -> (u16, Duration) {
    use std::io::{BufRead, BufReader, Write};
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (host, path) = rest.split_at(rest.find('/').expect("a path"));
    let mut s = std::net::TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        if json { "json" } else { "yaml" },
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    // The collector may answer and close before the whole body is read (a refusal on the
    // bytes seen so far): the answer is what counts, from the last byte it was sent.
    let _ = s.write_all(body);
    let _ = s.flush();
    let t0 = Instant::now();
    let mut status_line = String::new();
    BufReader::new(&s).read_line(&mut status_line).unwrap();
    let elapsed = t0.elapsed();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {status_line:?}"));
    (status, elapsed)
}

/// Resets the process's peak resident memory (VmHWM) to its current one, so a figure's peak
/// is its own, not an earlier body's (proc(5), clear_refs "5"; needs root).
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("clear_refs (needs root)");
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
    reset_peak(c.pid());
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

/// Four of each body posted at once, on four connections: the peak memory over the memory
/// before must stay within 100 MB (the bodies themselves are up to 8 MB each).
fn four_at_once(
    c: &Collector,
    db: &str,
    cases: &[(&'static str, String, &'static str)],
    over: &mut Vec<String>,
) {
    const MAX_FOUR: u64 = 100 << 20;
    println!("\nbench-hostile: four of a body at once");
    for (name, body, _) in cases {
        let rows_before = rows(db);
        reset_peak(c.pid());
        let (rss_before, _) = memory(c.pid());
        let statuses: Vec<u16> = std::thread::scope(|s| {
            let posts: Vec<_> = (0..4)
                .map(|_| s.spawn(|| timed_post(&c.url(), body.as_bytes(), false).0))
                .collect();
            posts.into_iter().map(|p| p.join().unwrap()).collect()
        });
        let (_, hwm) = memory(c.pid());
        let peak = hwm.saturating_sub(rss_before);
        println!(
            "{name:<42} statuses {statuses:?}  peak over before {:>6.1} MB (bound {} MB)",
            mb(peak),
            MAX_FOUR >> 20
        );
        if peak > MAX_FOUR {
            over.push(format!(
                "four of {name} at once: peak grew {:.1} MB",
                mb(peak)
            ));
        }
        if statuses.iter().any(|&s| s != 400) || rows(db) != rows_before {
            over.push(format!("four of {name} at once: {statuses:?}, rows stored"));
        }
    }
}

/// `show` and `fleet` of usbperf-matrix on each body as a file: refused (exit 2 or 1 with
/// the refusal named), peak resident memory at most 50 MB (getrusage of the child).
fn readers(cases: &[(&'static str, String, &'static str)], over: &mut Vec<String>) {
    const MAX_READER: u64 = 50 << 20;
    let dir = TempDir::new("bench-hostile-readers");
    let floor = launcher_floor();
    println!(
        "\nbench-hostile: show and fleet of usbperf-matrix on the same bodies as files \
         (peaks include the launcher's {:.1} MB, `true` started the same way)",
        mb(floor)
    );
    for (i, (name, body, want)) in cases.iter().enumerate() {
        let sub = dir.path().join(format!("case{i}"));
        std::fs::create_dir_all(&sub).unwrap();
        let file = sub.join("report.yaml");
        std::fs::write(&file, body).unwrap();
        for args in [
            vec!["show".to_string(), file.display().to_string()],
            vec!["fleet".to_string(), sub.display().to_string()],
        ] {
            let (out, peak) = peak_rss_of(&args);
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let refused = said.contains(want);
            println!(
                "{name:<42} {:<6} exit {:?} refused {refused:<5} peak RSS {:>6.1} MB (bound {} MB)",
                args[0],
                out.status.code(),
                mb(peak),
                MAX_READER >> 20
            );
            if !refused || out.status.success() {
                over.push(format!("{} of {name}: not refused: {said}", args[0]));
            }
            if peak > MAX_READER {
                over.push(format!(
                    "{} of {name}: peak RSS {:.1} MB",
                    args[0],
                    mb(peak)
                ));
            }
        }
    }
}

/// Runs usbperf-matrix with `args` under GNU time (`/usr/bin/time -f %M`): its output and its
/// peak resident memory. A child's peak counts the memory of the process that started it
/// (Linux keeps the larger of the two across exec), so the small `time` starts it, not this
/// test process, which holds every body.
fn peak_rss_of(args: &[String]) -> (std::process::Output, u64) {
    // A wide console: the refusal's words are read whole (80 columns would wrap them).
    let mut out = std::process::Command::new("/usr/bin/time")
        .env("COLUMNS", "1000")
        .args(["-f", "\nmaxrss-kb %M"])
        .arg(matrix_bin())
        .args(args)
        .output()
        .expect("/usr/bin/time (Debian's package time)");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    const MARK: &str = "\nmaxrss-kb ";
    let at = err.rfind(MARK).expect("GNU time's figure");
    let kb: u64 = err[at + MARK.len()..].trim().parse().unwrap();
    out.stderr.truncate(at);
    (out, kb * 1024)
}

/// GNU time's own share of a child's peak: `true` started the same way.
fn launcher_floor() -> u64 {
    peak_rss_of_cmd("true")
}

fn peak_rss_of_cmd(cmd: &str) -> u64 {
    let out = std::process::Command::new("/usr/bin/time")
        .args(["-f", "%M", cmd])
        .output()
        .expect("/usr/bin/time");
    let kb: u64 = String::from_utf8_lossy(&out.stderr).trim().parse().unwrap();
    kb * 1024
}

fn mb(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[test]
#[ignore = "a benchmark: run with --ignored --nocapture (scripts/ci/test-collect.sh does)"]
fn hostile_bodies_are_answered_fast_in_bounded_memory_and_store_nothing() {
    let dir = TempDir::new("bench-hostile");
    let db = format!("sqlite:{}", dir.path().join("r.db").display());
    let c = Collector::start(&db);
    let alias = hostile::alias_bomb("a11a5a11a5a11a50");
    let deep = hostile::deep_yaml("dee9dee9dee9dee9", 100_000);
    // Warm up the connection path and the database once, with a body refused early.
    let _ = timed_post(&c.url(), b"hello: world\n", false);
    let mut hostile = vec![
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
    let cases = hostile::cases();
    for (name, body, _) in &cases {
        hostile.push(measure(&c, &db, name, body.as_bytes(), false));
    }
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
    four_at_once(&c, &db, &cases, &mut over);
    readers(&cases, &mut over);
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
