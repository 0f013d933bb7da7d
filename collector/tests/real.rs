//! The collector with real parts: HTTP on 127.0.0.1, SQLite files and a real
//! PostgreSQL server, `usbperf-matrix upload` and `run` as the units run them, reports from
//! the fleet generator (tests/common/fleet_gen.rs). Each test names the fault it plays.

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

/// POST `body` with `token`; (status, body).
fn post(url: &str, token: Option<&str>, body: &[u8]) -> (u16, String) {
    // A fresh agent each time, as the unit's client does: no pooled connection that the
    // server closed after an earlier answer.
    let mut req = ureq::AgentBuilder::new()
        .build()
        .post(url)
        .set("Content-Type", "application/yaml");
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    match req.send_bytes(body) {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(s, r)) => (s, r.into_string().unwrap_or_default()),
        Err(e) => panic!("POST {url}: {e}"),
    }
}

/// Sends the request head, then up to `body_bytes` of body from another thread while this
/// one reads the answer: (status line, body bytes the server had taken when it answered).
fn raw_send(port: u16, head: &str, body_bytes: u64, chunked: bool) -> (String, u64) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut w = s.try_clone().unwrap();
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sent2 = sent.clone();
    let writer = std::thread::spawn(move || {
        let block = vec![b'x'; 64 << 10];
        let mut done = 0u64;
        while done < body_bytes {
            let n = (body_bytes - done).min(block.len() as u64) as usize;
            let r = if chunked {
                w.write_all(format!("{n:x}\r\n").as_bytes())
                    .and_then(|_| w.write_all(&block[..n]))
                    .and_then(|_| w.write_all(b"\r\n"))
            } else {
                w.write_all(&block[..n])
            };
            if r.is_err() {
                break; // the server closed: it is not reading any more
            }
            done += n as u64;
            sent2.store(done, std::sync::atomic::Ordering::Relaxed);
        }
        if chunked {
            let _ = w.write_all(b"0\r\n\r\n");
        }
    });
    let mut line = String::new();
    BufReader::new(&mut s).read_line(&mut line).unwrap();
    let at_answer = sent.load(std::sync::atomic::Ordering::Relaxed);
    let _ = s.shutdown(std::net::Shutdown::Both);
    let _ = writer.join();
    (line.trim().to_string(), at_answer)
}

#[test]
fn each_request_fault_is_answered_and_stores_nothing_wrong() {
    let dir = TempDir::new("faults");
    let db = format!("sqlite:{}", dir.path().join("r.db").display());
    let c = Collector::start(&db);
    let reports = fleet(3, 11, "yaml", &dir.path().join("fleet"));
    let first = std::fs::read(&reports[0]).unwrap();

    // Stored once; a re-send says "duplicate" and stores nothing new.
    let (s, b) = post(&c.url(), Some(TOKEN), &first);
    assert_eq!(s, 201, "{b}");
    assert!(b.contains("\"stored\":\"new\""), "{b}");
    let (s, b) = post(&c.url(), Some(TOKEN), &first);
    assert_eq!(
        (s, b.contains("\"stored\":\"duplicate\"")),
        (200, true),
        "{b}"
    );
    assert_eq!(count(&db, "reports"), 1);
    assert_eq!(
        count(&db, "devices"),
        2,
        "the fleet's units have two devices"
    );

    // A wrong or missing token: 401, nothing stored.
    let second = std::fs::read(&reports[1]).unwrap();
    for token in [Some("line3-wrong-token-0000000000000"), None] {
        let (s, b) = post(&c.url(), token, &second);
        assert_eq!(s, 401, "{token:?}: {b}");
    }
    // The unit's client says the token is wrong (no retry loop) and keeps the report.
    let bad = dir.path().join("bad-token");
    write_token_file(&bad, "line3-wrong-token-0000000000000\n");
    let spool = dir.path().join("bad-spool");
    let out = upload_cmd(&c.url(), &bad, &spool)
        .arg(&reports[1])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("HTTP 401") && err.contains("token is wrong"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&spool).unwrap().count(),
        1,
        "still queued"
    );
    assert_eq!(count(&db, "reports"), 1);

    // A truncated document: 400.
    let (s, b) = post(&c.url(), Some(TOKEN), &second[..second.len() / 2]);
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("not a usbperf report"), "{b}");
    // A body that ends before its Content-Length (the unit lost power mid-send).
    let head = format!(
        "POST /api/v1/reports HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: {}\r\n\r\n",
        second.len()
    );
    {
        let mut s = TcpStream::connect(("127.0.0.1", c.port)).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(&second[..100]).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 400"),
            "{answer}"
        );
    }
    assert_eq!(count(&db, "reports"), 1);

    // 100 MB, declared: 413 before the server read the body.
    let hundred_mb = 100u64 << 20;
    let head = format!(
        "POST /api/v1/reports HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: {hundred_mb}\r\n\r\n"
    );
    let (line, taken) = raw_send(c.port, &head, hundred_mb, false);
    assert!(line.starts_with("HTTP/1.1 413"), "{line}");
    assert!(
        taken < hundred_mb,
        "the answer came only after all 100 MB were sent"
    );
    // 100 MB chunked (no length to refuse on): cut off at the 8 MiB limit.
    let head = format!(
        "POST /api/v1/reports HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    );
    let (line, taken) = raw_send(c.port, &head, hundred_mb, true);
    assert!(line.starts_with("HTTP/1.1 413"), "{line}");
    assert!(
        taken < hundred_mb,
        "the answer came only after all 100 MB were sent"
    );
    let peak = c.peak_rss_bytes();
    assert!(
        peak < 64 << 20,
        "the collector's peak memory is {peak} bytes: it buffered the large bodies"
    );
    assert_eq!(count(&db, "reports"), 1);

    // Schema 1 (fleet-gen's) and 2 are stored; 99 is refused.
    let (s, b) = post(&c.url(), Some(TOKEN), &second);
    assert_eq!(s, 201, "v1: {b}");
    let v2 = String::from_utf8(std::fs::read(&reports[2]).unwrap())
        .unwrap()
        .replacen("schema_version: 1", "schema_version: 2", 1);
    let (s, b) = post(&c.url(), Some(TOKEN), v2.as_bytes());
    assert_eq!(s, 201, "v2: {b}");
    let v99 = String::from_utf8(first.clone())
        .unwrap()
        .replacen("schema_version: 1", "schema_version: 99", 1)
        .replace("report_id: ", "report_id: 99");
    let (s, b) = post(&c.url(), Some(TOKEN), v99.as_bytes());
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("schema_version 99"), "{b}");
    // JSON, as `report_format: json` units send it.
    let json = fleet(1, 12, "json", &dir.path().join("json"));
    let out = upload_cmd(&c.url(), &c.tokens, &dir.path().join("spool"))
        .arg(&json[0])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(count(&db, "reports"), 4);
    let ids = stored_ids(&db);
    assert_eq!(ids.len(), ids.iter().collect::<HashSet<_>>().len());
}

/// A loop device on a sparse file, detached on drop (the factory run needs a real disk).
struct Loop {
    dev: String,
    _file: TempDir,
}

impl Loop {
    fn new() -> Loop {
        let dir = TempDir::new("loop");
        let img = dir.path().join("img");
        std::fs::File::create(&img)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&img)
            .output()
            .expect("losetup (util-linux) is needed");
        assert!(
            out.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Loop {
            dev: String::from_utf8(out.stdout).unwrap().trim().to_string(),
            _file: dir,
        }
    }
    fn name(&self) -> &str {
        self.dev.trim_start_matches("/dev/")
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

#[test]
fn network_down_run_keeps_its_exit_code_and_the_spool_drains_later() {
    assert!(
        is_root(),
        "this test runs the factory run on a loop device: run it as root (scripts/test.sh does)"
    );
    let dir = TempDir::new("netdown");
    let disk = Loop::new();
    let port = free_port(); // nothing listens there: the network is down
    let spool = dir.path().join("outbox");
    let token = dir.path().join("token");
    write_token_file(&token, &format!("{TOKEN}\n"));
    let url = format!("http://127.0.0.1:{port}/api/v1/reports");
    let base = format!(
        "profile: quick\ndevices:\n  - {{select: {{name: {}}}, target: raw}}\n\
         tests:\n  - {{workload: seq-read, size: 16M, runtime: 1s}}\n",
        disk.name()
    );
    let run = |cfg_text: &str, tag: &str| {
        let cfg = dir.path().join(format!("{tag}.yaml"));
        std::fs::write(&cfg, cfg_text).unwrap();
        let t0 = Instant::now();
        let out = Command::new(matrix_bin())
            .env("COLUMNS", "1000")
            .args(["run", "--report-dir"])
            .arg(dir.path().join(format!("reports-{tag}")))
            .arg("--lock-file")
            .arg(dir.path().join("lock"))
            .arg("--config")
            .arg(&cfg)
            .output()
            .unwrap();
        (out, t0.elapsed())
    };
    let (plain, plain_took) = run(&base, "plain");
    let with_upload = format!(
        "{base}upload:\n  url: {url}\n  token_file: {}\n  spool: {}\n  timeout: 4s\n",
        token.display(),
        spool.display()
    );
    let (out, took) = run(&with_upload, "upload");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), plain.status.code(), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout
            .trim_end()
            .lines()
            .last()
            .unwrap()
            .contains("verdict=PASS"),
        "the station's line stays last and unchanged: {stdout}"
    );
    assert!(stderr.contains("stay queued"), "{stderr}");
    // A seq-read of 16 MiB takes a fraction of a second; the hand-off is bounded by 4 s.
    assert!(took < Duration::from_secs(20), "run took {took:?}");
    let queued: Vec<PathBuf> = std::fs::read_dir(&spool)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(queued.len(), 1, "{queued:?}");
    let (reports, seals): (Vec<PathBuf>, Vec<PathBuf>) =
        std::fs::read_dir(dir.path().join("reports-upload"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .partition(|p| p.extension().map_or(true, |e| e != "sig"));
    // The run that uploads signs its report file too.
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(seals, vec![usbperf_report::seal::seal_path(&reports[0])]);
    let local = std::fs::read_to_string(&reports[0]).unwrap();
    // The entry is the run's report, named by the SHA-256 of its bytes.
    let entry = std::fs::read(&queued[0]).unwrap();
    let id = local
        .lines()
        .find_map(|l| l.strip_prefix("report_id: "))
        .expect("the report has its id")
        .trim_matches('\'');
    assert!(
        String::from_utf8_lossy(&entry).contains(id),
        "the queued entry is not report {id}"
    );
    let stem = queued[0].file_stem().unwrap().to_str().unwrap().to_string();
    assert_eq!(stem, usbperf_collect::ingest::sha256_hex(&entry));

    // A collector that accepts the connection and never answers (a hung server, a
    // firewall that swallows packets after the handshake) delays run by at most `timeout`.
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hole_url = format!("http://{}/api/v1/reports", hole.local_addr().unwrap());
    let held = std::thread::spawn(move || {
        let mut kept = Vec::new();
        for c in hole.incoming().take(3) {
            kept.push(c); // accepted, never read, never answered
        }
        std::thread::sleep(Duration::from_secs(30));
    });
    let hung = with_upload.replace(&url, &hole_url).replace(
        &spool.display().to_string(),
        &dir.path().join("outbox-hung").display().to_string(),
    );
    let (out, hung_took) = run(&hung, "hung");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        hung_took < plain_took + Duration::from_secs(4 + 3),
        "a hung collector delayed run by {:?} (timeout 4s)",
        hung_took.saturating_sub(plain_took)
    );
    assert_eq!(
        std::fs::read_dir(dir.path().join("outbox-hung"))
            .unwrap()
            .count(),
        1
    );
    drop(held);

    // No collector named anywhere: a usage error (2); the boot service's --if-configured: 0.
    let plain_cfg = dir.path().join("plain.yaml");
    for (extra, code) in [(&[][..], 2), (&["--if-configured"][..], 0)] {
        let out = Command::new(matrix_bin())
            .env("COLUMNS", "1000")
            .args(["upload", "--config"])
            .arg(&plain_cfg)
            .arg("--spool")
            .arg(&spool)
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(queued[0].is_file());

    // Still down: upload --spool keeps it and says so (exit 4).
    let out = upload_cmd(&url, &token, &spool)
        .args(["--attempts", "2"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(queued[0].is_file());

    // The collector comes up: the next drain delivers and empties the spool.
    let db = format!("sqlite:{}", dir.path().join("r.db").display());
    let c = Collector::start_on(&db, port);
    write_token_file(&token, &format!("{TOKEN}\n"));
    let out = upload_cmd(&c.url(), &token, &spool).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_dir(&spool).unwrap().count(), 0);
    assert_eq!(stored_ids(&db), vec![id]);
}

/// 50 uploader processes, each queuing and sending its share of `reports`.
/// 50 uploaders, each sending its share of `reports` to `c`.
fn uploaders(
    c: &Collector,
    reports: &[PathBuf],
    spools: &Path,
    extra: &[&str],
    delivered: &Arc<Mutex<HashSet<String>>>,
) -> Vec<(std::process::Child, std::thread::JoinHandle<()>)> {
    const UPLOADERS: usize = 50;
    let per = reports.len().div_ceil(UPLOADERS);
    reports
        .chunks(per)
        .enumerate()
        .map(|(i, chunk)| {
            let mut cmd = upload_cmd(&c.url(), &c.tokens, &spools.join(format!("u{i}")));
            cmd.args(extra).args(chunk);
            spawn_uploader(cmd, delivered)
        })
        .collect()
}

/// Starts one uploader; its reader thread notes each report it says was delivered.
fn spawn_uploader(
    mut cmd: Command,
    delivered: &Arc<Mutex<HashSet<String>>>,
) -> (std::process::Child, std::thread::JoinHandle<()>) {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let seen = delivered.clone();
    // "delivered ID (…)" is printed after the acknowledgement arrived.
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let line = line.unwrap();
            if let Some(rest) = line.strip_prefix("usbperf-matrix upload: delivered ") {
                let id = rest.split_whitespace().next().unwrap().to_string();
                seen.lock().unwrap().insert(id);
            }
        }
    });
    (child, reader)
}

/// A TCP load balancer in front of collectors that keeps each client's address, as a
/// factory's does: each unit reaches it on a port of its own, and it connects on from the
/// unit's own address (127.1.x.y: all of 127.0.0.0/8 is the loopback) to the collectors in
/// turn, trying the next when one refuses, as a balancer's health check would.
struct Balancer {
    rt: tokio::runtime::Runtime,
    backends: Arc<Vec<std::net::SocketAddr>>,
    next: Arc<std::sync::atomic::AtomicUsize>,
}

impl Balancer {
    fn new(backends: &[u16]) -> Balancer {
        Balancer {
            rt: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap(),
            backends: Arc::new(
                backends
                    .iter()
                    .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], *p)))
                    .collect(),
            ),
            next: Arc::default(),
        }
    }

    /// Unit `i`'s address.
    fn address(i: usize) -> std::net::Ipv4Addr {
        std::net::Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250 + 1) as u8)
    }

    /// A front for unit `i`: the port it uploads to, open until the handle is aborted.
    fn front(&self, i: usize) -> (u16, tokio::task::JoinHandle<()>) {
        use std::sync::atomic::Ordering;
        let listener = self
            .rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let from = std::net::SocketAddr::from((Balancer::address(i), 0));
        let (backends, next) = (self.backends.clone(), self.next.clone());
        let task = self.rt.spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let (backends, next) = (backends.clone(), next.clone());
                tokio::spawn(async move {
                    for _ in 0..backends.len() {
                        let to = backends[next.fetch_add(1, Ordering::Relaxed) % backends.len()];
                        let sock = tokio::net::TcpSocket::new_v4().unwrap();
                        sock.bind(from).unwrap();
                        if let Ok(mut server) = sock.connect(to).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                            return;
                        }
                    }
                });
            }
        });
        (port, task)
    }
}

fn wait_all(procs: Vec<(std::process::Child, std::thread::JoinHandle<()>)>) {
    for (mut child, reader) in procs {
        let st = child.wait().unwrap();
        reader.join().unwrap();
        assert!(
            st.success(),
            "an uploader exited {st}: its reports are not all delivered"
        );
    }
}

fn empty_spools(spools: &Path) -> usize {
    // The uploaders' spools, not the signing key they keep beside them (`unit.key`).
    std::fs::read_dir(spools)
        .unwrap()
        .map(|d| d.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| std::fs::read_dir(p).unwrap().count())
        .sum()
}

fn load_exactly_once(db: &str, tag: &str) {
    let dir = TempDir::new(tag);
    let reports = fleet(1000, 15, "yaml", &dir.path().join("fleet"));
    let c = Collector::start(db);
    let delivered = Arc::new(Mutex::new(HashSet::new()));
    let t0 = Instant::now();
    wait_all(uploaders(
        &c,
        &reports,
        &dir.path().join("spools"),
        &[],
        &delivered,
    ));
    eprintln!(
        "{tag}: 1000 reports from 50 uploaders in {:?}",
        t0.elapsed()
    );
    assert_eq!(delivered.lock().unwrap().len(), 1000);
    assert_eq!(count(db, "reports"), 1000);
    assert_eq!(count(db, "devices"), 2000);
    assert_eq!(empty_spools(&dir.path().join("spools")), 0);
    // Everything again: acknowledged as duplicates, nothing new stored.
    let again = Arc::new(Mutex::new(HashSet::new()));
    wait_all(uploaders(
        &c,
        &reports,
        &dir.path().join("spools2"),
        &[],
        &again,
    ));
    assert_eq!(again.lock().unwrap().len(), 1000);
    assert_eq!(count(db, "reports"), 1000);
    assert_eq!(count(db, "devices"), 2000);
    assert!(c.stderr().is_empty(), "{}", c.stderr());
}

/// Kills `c` with SIGKILL once 300 reports are acknowledged, and checks that every report
/// acknowledged by then is stored: (acknowledged, stored).
fn kill9_when_300_delivered(
    c: &mut Collector,
    delivered: &Arc<Mutex<HashSet<String>>>,
    db: &str,
) -> (HashSet<String>, HashSet<String>) {
    let t0 = Instant::now();
    while delivered.lock().unwrap().len() < 300 {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the load did not start"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    c.kill9();
    let acked: HashSet<String> = delivered.lock().unwrap().clone();
    let stored: HashSet<String> = stored_ids(db).into_iter().collect();
    let lost: Vec<&String> = acked.difference(&stored).collect();
    assert!(
        lost.is_empty(),
        "acknowledged but not stored after kill -9: {lost:?}"
    );
    (acked, stored)
}

fn kill9_mid_load(db: &str, tag: &str) {
    let dir = TempDir::new(tag);
    let reports = fleet(1000, 16, "yaml", &dir.path().join("fleet"));
    let mut c = Collector::start(db);
    let delivered = Arc::new(Mutex::new(HashSet::new()));
    // Enough attempts (with backoff up to 30 s) to outlast the restart.
    let procs = uploaders(
        &c,
        &reports,
        &dir.path().join("spools"),
        &["--attempts", "40", "--timeout", "5s"],
        &delivered,
    );
    let (acked, stored) = kill9_when_300_delivered(&mut c, &delivered, db);
    eprintln!(
        "{tag}: killed with {} acknowledged, {} stored (in flight: committed, not yet acknowledged)",
        acked.len(),
        stored.len()
    );
    std::thread::sleep(Duration::from_millis(500));
    c.restart();
    wait_all(procs);
    assert_eq!(count(db, "reports"), 1000, "the rest came from the spools");
    assert_eq!(stored_ids(db).len(), 1000);
    assert_eq!(
        count(db, "devices"),
        2000,
        "no report stored twice or in part"
    );
    assert_eq!(empty_spools(&dir.path().join("spools")), 0);
    // systemd's stop: a clean exit (the database client is closed outside the runtime).
    let st = c.terminate();
    assert!(st.success(), "SIGTERM: {st}: {}", c.stderr());
}

#[test]
fn load_sqlite_1000_reports_from_50_uploaders_stored_exactly_once() {
    let dir = TempDir::new("sqlite-load-db");
    load_exactly_once(
        &format!("sqlite:{}", dir.path().join("r.db").display()),
        "sqlite-load",
    );
}

#[test]
fn load_postgres_1000_reports_from_50_uploaders_stored_exactly_once() {
    let pg = Pg::start();
    load_exactly_once(&pg.url(), "pg-load");
}

/// Two collectors on one PostgreSQL, as behind a load balancer: 1,000 reports from 50
/// uploaders through both, one collector killed -9 mid-load and started again. Every
/// acknowledged report is stored exactly once, the fleet's summaries (folded by both
/// collectors' threads and queries, one at a time under the database's lock) count each
/// report once, and both pages are the same page.
#[test]
fn two_collectors_on_one_postgres_store_and_summarise_each_report_once() {
    let pg = Pg::start();
    let dir = TempDir::new("pg-two");
    let reports = fleet(1000, 23, "yaml", &dir.path().join("fleet"));
    let pages = [free_port(), free_port()];
    let page = |i: usize| format!("127.0.0.1:{}", pages[i]);
    let mut a = Collector::start_with(&pg.url(), &["--page-listen", &page(0)]);
    let b = Collector::start_with(&pg.url(), &["--page-listen", &page(1)]);
    let delivered = Arc::new(Mutex::new(HashSet::new()));
    // 1,000 units, each its own uploader with its own key and address, through a balancer
    // in front of both collectors; at most 100 at a time.
    let balancer = Balancer::new(&[a.port, b.port]);
    let load = {
        let (reports, spools, delivered) = (
            reports.clone(),
            dir.path().join("spools"),
            delivered.clone(),
        );
        let tokens = b.tokens.clone();
        std::thread::spawn(move || {
            let mut running = std::collections::VecDeque::new();
            for (i, r) in reports.iter().enumerate() {
                if running.len() == 100 {
                    let (child, reader, front): (_, _, tokio::task::JoinHandle<()>) =
                        running.pop_front().unwrap();
                    wait_all(vec![(child, reader)]);
                    front.abort();
                }
                let (port, front) = balancer.front(i);
                let url = format!("http://127.0.0.1:{port}/api/v1/reports");
                let mut cmd = upload_cmd(&url, &tokens, &spools.join(format!("u{i}")));
                cmd.args(["--attempts", "40", "--timeout", "5s"]).arg(r);
                let (child, reader) = spawn_uploader(cmd, &delivered);
                running.push_back((child, reader, front));
            }
            for (child, reader, front) in running {
                wait_all(vec![(child, reader)]);
                front.abort();
            }
        })
    };
    kill9_when_300_delivered(&mut a, &delivered, &pg.url());
    std::thread::sleep(Duration::from_millis(500));
    a.restart();
    load.join().expect("every uploader delivered all it had");
    assert_eq!(count(&pg.url(), "reports"), 1000);
    assert_eq!(stored_ids(&pg.url()).len(), 1000);
    assert_eq!(
        count(&pg.url(), "devices"),
        2000,
        "no report stored twice or in part"
    );
    // Both pages: the same summaries, every report in them once.
    let get = |i: usize| -> String {
        ureq::get(&format!("http://{}/fleet.json", page(i)))
            .call()
            .unwrap()
            .into_string()
            .unwrap()
    };
    let (pa, pb) = (get(0), get(1));
    assert_eq!(pa, pb, "the two collectors serve the same page");
    let v: serde_json::Value = serde_json::from_str(&pa).unwrap();
    assert_eq!(v["reports"], 1000, "each report folded once");
    assert_eq!(
        count(&pg.url(), "fleet_gen_queue"),
        0,
        "nothing left to fold"
    );
    let exact = Command::new(collect_bin())
        .args(["fleet", "--db", &pg.url(), "--exact", "--format", "json"])
        .output()
        .unwrap();
    let e: serde_json::Value = serde_json::from_slice(&exact.stdout).unwrap();
    for k in ["reports", "units", "devices", "device_pass_rate"] {
        assert_eq!(v[k], e[k], "{k}: the summaries against every record");
    }
    // Each report was taken from its unit's own address, through one collector or the other.
    let mut from: std::collections::HashMap<String, String> = Default::default();
    for c in [&a, &b] {
        for line in c.access_log() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if let (Some(peer), Some(id)) = (f.get(1), line.split(" report=").nth(1)) {
                if f.get(4).is_some_and(|s| s.starts_with('2')) {
                    from.insert(id.to_string(), peer.to_string());
                }
            }
        }
    }
    let peers: HashSet<&String> = from.values().collect();
    assert_eq!(
        from.len(),
        1000,
        "every report taken, as the access logs say"
    );
    assert!(
        peers.len() == 1000 && peers.iter().all(|p| p.starts_with("127.1.")),
        "{} distinct unit addresses among 1,000 reports taken",
        peers.len()
    );
}

#[test]
fn kill9_sqlite_mid_load_loses_no_acknowledged_report() {
    let dir = TempDir::new("sqlite-kill-db");
    kill9_mid_load(
        &format!("sqlite:{}", dir.path().join("r.db").display()),
        "sqlite-kill9",
    );
}

#[test]
fn kill9_postgres_mid_load_loses_no_acknowledged_report() {
    let pg = Pg::start();
    kill9_mid_load(&pg.url(), "pg-kill9");
}

#[test]
fn postgres_down_is_503_and_the_unit_keeps_the_report_until_it_is_back() {
    let mut pg = Pg::start();
    let dir = TempDir::new("pg-down");
    let c = Collector::start(&pg.url());
    let reports = fleet(2, 17, "yaml", &dir.path().join("fleet"));
    let spool = dir.path().join("outbox");
    let out = upload_cmd(&c.url(), &c.tokens, &spool)
        .arg(&reports[0])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    pg.stop();
    let out = upload_cmd(&c.url(), &c.tokens, &spool)
        .args(["--attempts", "1"])
        .arg(&reports[1])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("HTTP 503"), "{err}");
    assert_eq!(
        std::fs::read_dir(&spool).unwrap().count(),
        1,
        "still queued"
    );

    // The database is back: the collector reconnects, the spool drains.
    pg.resume();
    let out = upload_cmd(&c.url(), &c.tokens, &spool).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_dir(&spool).unwrap().count(), 0);
    assert_eq!(count(&pg.url(), "reports"), 2);
}

/// A routine PostgreSQL restart (a fast shutdown, then the server back on its data): every
/// session the collector held is gone, and the first upload on each must still be stored,
/// not answered 503 until the collector is restarted.
#[test]
fn postgres_restart_is_survived_without_a_failed_upload() {
    let mut pg = Pg::start();
    let dir = TempDir::new("pg-restart");
    let c = Collector::start_with(&pg.url(), &["--db-sessions", "4"]);
    let reports = fleet(12, 19, "yaml", &dir.path().join("fleet"));
    let spool = dir.path().join("outbox");
    let send = |r: &Path| {
        let out = upload_cmd(&c.url(), &c.tokens, &spool)
            .args(["--attempts", "1"])
            .arg(r)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            r.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // Every session opened.
    for r in &reports[..4] {
        send(r);
    }
    pg.stop();
    pg.resume();
    let back = Instant::now();
    // One attempt each, on each of the sessions the restart closed.
    for r in &reports[4..] {
        send(r);
    }
    assert!(back.elapsed() < Duration::from_secs(10));
    assert_eq!(count(&pg.url(), "reports"), 12);
}

/// The page read from a streaming read replica (`--page-db`): the collector on the primary
/// stores and folds, the replica, which takes no write, answers the page with the same fleet
/// as the primary and serves the stored reports the page links.
#[test]
fn the_page_from_a_read_replica_is_the_fleet_of_the_primary() {
    let pg = Pg::start();
    let replica = pg.replica();
    let dir = TempDir::new("pg-replica-page");
    let reports = fleet(55, 29, "yaml", &dir.path().join("fleet"));
    let page = format!("127.0.0.1:{}", free_port());
    let c = Collector::start_with(
        &pg.url(),
        &[
            "--page-listen",
            &page,
            "--page-db",
            &replica.url(),
            "--fold-every",
            "2",
        ],
    );
    let upload = |r: &[PathBuf]| {
        let out = upload_cmd(&c.url(), &c.tokens, &dir.path().join("spool"))
            .args(r)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
    };
    // The primary's collector folds every 2 s here; the replica follows.
    let folded = |db: &str, n: u64| {
        let t0 = Instant::now();
        while count(db, "reports") < n
            || count(db, "fleet_gen_queue") > 0
            || count(db, "fleet_generations WHERE ready") == 0
        {
            assert!(t0.elapsed() < Duration::from_secs(60), "{db}: not folded");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    upload(&reports[..50]);
    folded(&replica.url(), 50);
    let get = |path: &str| -> (u16, String) {
        match ureq::get(&format!("http://{page}{path}")).call() {
            Ok(r) => (r.status(), r.into_string().unwrap()),
            Err(ureq::Error::Status(s, r)) => (s, r.into_string().unwrap_or_default()),
            Err(e) => panic!("GET {path}: {e}"),
        }
    };
    let (status, json) = get("/fleet.json");
    assert_eq!(status, 200, "{json}");
    let want = Command::new(collect_bin())
        .args(["fleet", "--db", &pg.url(), "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        json,
        String::from_utf8(want.stdout).unwrap(),
        "the primary's fleet"
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["reports"], 50);
    // A report the page links, as the unit sent it (the upload sends JSON).
    let id = stored_ids(&replica.url()).remove(0);
    let (status, body) = get(&format!("/reports/{id}.json"));
    assert_eq!(status, 200, "/reports/{id}.json: {body}");
    assert!(body.contains("schema_version"), "{body}");
    let mut r = postgres::Client::connect(&replica.url(), postgres::NoTls).unwrap();
    let standby: bool = r
        .query_one("SELECT pg_is_in_recovery()", &[])
        .unwrap()
        .get(0);
    assert!(standby, "the page's database is a read-only standby");
    // The page reads the replica: while it replays nothing, the page keeps the 50 reports
    // the primary has 55 of; once it replays, the page has them (each query another
    // `since=`, so the page's cache does not answer it).
    r.batch_execute("SELECT pg_wal_replay_pause()").unwrap();
    upload(&reports[50..]);
    folded(&pg.url(), 55);
    let reports_in = |json: &str| -> u64 {
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        v["reports"].as_u64().unwrap()
    };
    assert_eq!(reports_in(&get("/fleet.json?since=2000-01-01").1), 50);
    r.batch_execute("SELECT pg_wal_replay_resume()").unwrap();
    folded(&replica.url(), 55);
    assert_eq!(reports_in(&get("/fleet.json?since=2000-01-02").1), 55);
}
