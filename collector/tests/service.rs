//! The collector as a service on a factory network that is not always friendly: requests
//! without the token, slow and idle connections, one host taking every connection, SIGTERM
//! with connections open, a full disk, token files others may read, figures no device
//! measures, and the access log. Each test runs the real binary over HTTP on loopback (client
//! sockets bound to 127.0.0.2 where a second host is needed) and names what it checks.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

const WRONG: &str = "line3-wrong-token-0000000000000";

fn sqlite_db(dir: &TempDir) -> String {
    format!("sqlite:{}", dir.path().join("r.db").display())
}

/// A connection to the collector from `source` (an address of 127.0.0.0/8: loopback takes
/// any of them as a source, and the collector sees it as the peer).
fn connect_from(source: &str, port: u16) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let s = rt.block_on(async {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind(format!("{source}:0").parse().unwrap()).unwrap();
        sock.connect(([127, 0, 0, 1], port).into()).await.unwrap()
    });
    let s = s.into_std().unwrap();
    s.set_nonblocking(false).unwrap();
    s
}

/// Reads until the collector closes the connection (EOF or reset) or `within` passes: what
/// arrived, and whether it closed.
fn read_until_closed(s: &mut TcpStream, within: Duration) -> (String, bool) {
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let t0 = Instant::now();
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    while t0.elapsed() < within {
        match s.read(&mut b) {
            Ok(0) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(n) => got.extend_from_slice(&b[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), true),
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), false)
}

/// Whether the connection is still open: nothing to read within a moment, and no EOF.
fn still_open(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Err(e) if matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    ))
}

/// POST `body` with `authorization` as the header's whole value: (status, body, headers).
fn post_auth(
    url: &str,
    authorization: Option<&str>,
    body: &[u8],
    extra: &[(&str, &str)],
) -> (u16, String, Vec<(String, String)>) {
    let mut req = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build()
        .post(url)
        .set("Content-Type", "application/yaml");
    if let Some(a) = authorization {
        req = req.set("Authorization", a);
    }
    for (k, v) in extra {
        req = req.set(k, v);
    }
    let r = match req.send_bytes(body) {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("POST {url}: {e}"),
    };
    let headers = r
        .headers_names()
        .into_iter()
        .map(|n| (n.clone(), r.header(&n).unwrap_or_default().to_string()))
        .collect();
    (r.status(), r.into_string().unwrap_or_default(), headers)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// GET `path` on the collector: (status, body).
fn get(port: u16, path: &str) -> (u16, String) {
    let url = format!("http://127.0.0.1:{port}{path}");
    match ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build()
        .get(&url)
        .call()
    {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(s, r)) => (s, r.into_string().unwrap_or_default()),
        Err(e) => panic!("GET {url}: {e}"),
    }
}

/// The `report_id:` of a fleet-gen report.
fn report_id(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("report_id:"))
        .map(|v| v.trim().trim_matches('\'').trim_matches('"').to_string())
        .expect("fleet-gen --report-ids writes report_id")
}

/// `text` with the value of the first line whose key is `key` (any indentation) set to `value`.
fn set_first(text: &str, key: &str, value: &str) -> String {
    let mut done = false;
    let mut out = String::new();
    for l in text.lines() {
        let t = l.trim_start();
        if !done && t.starts_with(&format!("{key}:")) {
            let indent = &l[..l.len() - t.len()];
            out.push_str(&format!("{indent}{key}: {value}\n"));
            done = true;
        } else {
            out.push_str(l);
            out.push('\n');
        }
    }
    assert!(done, "no {key}: line");
    out
}

/// `usbperf-matrix upload` of `reports` to `c`, finished: (exit code, stderr, how long).
fn upload(
    c: &Collector,
    spool: &Path,
    reports: &[PathBuf],
    extra: &[&str],
) -> (Option<i32>, String, Duration) {
    let t0 = Instant::now();
    let out = upload_cmd(&c.url(), &c.tokens, spool)
        .args(["--timeout", "5s"])
        .args(extra)
        .args(reports)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        t0.elapsed(),
    )
}

/// A tmpfs of `size` on `dir`, unmounted on drop (declare it before what uses it).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        assert!(
            is_root(),
            "this test fills a filesystem of its own (mount -t tmpfs): run it as root \
             (scripts/ci/test-collect.sh does)"
        );
        std::fs::create_dir_all(dir).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("mount (util-linux) is needed");
        assert!(st.success(), "mount -t tmpfs on {}: {st}", dir.display());
        Tmpfs(dir.to_path_buf())
    }

    /// Writes `fill` until ENOSPC; its path.
    fn fill(&self) -> PathBuf {
        let path = self.0.join("fill");
        let mut f = std::fs::File::create(&path).unwrap();
        for chunk in [1usize << 20, 4096] {
            let buf = vec![0u8; chunk];
            loop {
                match f.write_all(&buf) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
                    Err(e) => panic!("filling {}: {e}", path.display()),
                }
            }
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// A collector started here with its own flags (the token file named by the test); killed
/// on drop.
struct Started {
    child: Child,
    port: u16,
}

impl Started {
    fn spawn(args: &[&str], token_file: &Path, log: &Path) -> Started {
        let mut child = Command::new(collect_bin())
            .args(["--listen", "127.0.0.1:0", "--token-file"])
            .arg(token_file)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(
            line.contains("listening on"),
            "the collector did not start: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.split('/').next())
            .and_then(|p| p.parse().ok())
            .unwrap();
        Started { child, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/api/v1/reports", self.port)
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A request without a valid token is refused from its headers: no `100 Continue` is sent
/// for a body the collector will not read, and a large body is not read before the 401.
#[test]
fn unauthenticated_body_is_not_read_and_no_100_continue() {
    let dir = TempDir::new("svc-unauth");
    let db = sqlite_db(&dir);
    let c = Collector::start(&db);

    // Expect: 100-continue with a wrong token: the 401 is the first (and only) answer.
    let mut s = TcpStream::connect(("127.0.0.1", c.port)).unwrap();
    s.write_all(
        format!(
            "POST /api/v1/reports HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {WRONG}\r\n\
             Content-Type: application/yaml\r\nContent-Length: 1000000\r\n\
             Expect: 100-continue\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let (answer, closed) = read_until_closed(&mut s, Duration::from_secs(5));
    assert!(
        answer.starts_with("HTTP/1.1 401"),
        "the first answer to Expect: 100-continue with a wrong token: {answer:?}"
    );
    assert!(
        !answer.contains("100 Continue"),
        "100 Continue sent for a body that is refused: {answer:?}"
    );
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer:?}"
    );
    assert!(
        closed,
        "the connection stayed open after the 401: {answer:?}"
    );

    // 8 MiB declared and sent, no Expect, no token: 401 before the body is read, then the
    // connection is closed.
    let size = 8u64 << 20;
    let mut s = TcpStream::connect(("127.0.0.1", c.port)).unwrap();
    s.write_all(
        format!(
            "POST /api/v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/yaml\r\n\
             Content-Length: {size}\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut w = s.try_clone().unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let sent2 = sent.clone();
    let writer = std::thread::spawn(move || {
        let block = vec![b'x'; 64 << 10];
        let mut done = 0u64;
        while done < size {
            if w.write_all(&block).is_err() {
                break; // closed: the collector does not read it
            }
            done += block.len() as u64;
            sent2.store(done, Ordering::Relaxed);
        }
    });
    let mut first = String::new();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    r.read_line(&mut first).unwrap();
    let at_answer = sent.load(Ordering::Relaxed);
    assert!(first.starts_with("HTTP/1.1 401"), "{first:?}");
    assert!(
        at_answer < size,
        "the 401 came only after all {size} bytes were sent"
    );
    let (_, closed) = read_until_closed(&mut s, Duration::from_secs(10));
    assert!(closed, "the connection stayed open after the 401");
    let _ = s.shutdown(std::net::Shutdown::Both);
    writer.join().unwrap();
    assert_eq!(count(&db, "reports"), 0);
}

/// Strangers who declare a small body and never send it cost nothing: each is answered 401
/// and closed within a second, and a unit's upload from another address meanwhile is stored
/// at once.
#[test]
fn stalled_bodies_without_a_token_are_closed_at_once() {
    let dir = TempDir::new("svc-stall");
    let db = sqlite_db(&dir);
    let c = Collector::start(&db);
    let reports = fleet(1, 33, "yaml", &dir.path().join("fleet"));
    let body = std::fs::read(&reports[0]).unwrap();
    let t0 = Instant::now();
    let mut stalled: Vec<TcpStream> = Vec::new();
    for source in ["127.0.0.2", "127.0.0.3"] {
        for _ in 0..60 {
            let mut s = connect_from(source, c.port);
            s.write_all(
                b"POST /api/v1/reports HTTP/1.1\r\nHost: x\r\n\
                  Content-Type: application/yaml\r\nContent-Length: 65536\r\n\r\n",
            )
            .unwrap();
            stalled.push(s);
        }
    }
    let sent = Instant::now();
    let (status, b, _) = post_auth(&c.url(), Some(&format!("Bearer {TOKEN}")), &body, &[]);
    assert_eq!(status, 201, "{b}");
    let upload_s = sent.elapsed().as_secs_f64();
    assert!(
        upload_s <= 2.0,
        "the upload took {upload_s:.1} s beside 120 stalled bodies"
    );
    for (i, s) in stalled.iter_mut().enumerate() {
        let (answer, closed) = read_until_closed(s, Duration::from_secs(5));
        // 401, or 429 past the limit of failures from one address.
        let refused = ["HTTP/1.1 401", "HTTP/1.1 429"];
        assert!(
            refused.iter().any(|r| answer.starts_with(r)),
            "stalled {i}: {answer:?}"
        );
        assert!(closed, "stalled {i} still open");
    }
    let all_s = t0.elapsed().as_secs_f64();
    assert!(
        all_s <= 5.0,
        "120 stalled bodies were closed only after {all_s:.1} s"
    );
    assert_eq!(count(&db, "reports"), 1);
}

/// A 401 tells the client how to authenticate (`WWW-Authenticate: Bearer`), and the scheme
/// name is accepted in any case, as HTTP has it; the token itself is not.
#[test]
fn www_authenticate_and_case_insensitive_bearer() {
    let dir = TempDir::new("svc-bearer");
    let db = sqlite_db(&dir);
    let c = Collector::start(&db);
    let reports = fleet(3, 31, "yaml", &dir.path().join("fleet"));

    let body = std::fs::read(&reports[0]).unwrap();
    for auth in [
        None,
        Some(format!("Bearer {WRONG}")),
        Some(format!("Bearer {}", TOKEN.to_uppercase())),
        Some(format!("Basic {TOKEN}")),
    ] {
        let (status, b, h) = post_auth(&c.url(), auth.as_deref(), &body, &[]);
        assert_eq!(status, 401, "{auth:?}: {b}");
        assert_eq!(
            header(&h, "www-authenticate"),
            Some("Bearer realm=\"usbperf-collect\""),
            "{auth:?}: {h:?}"
        );
    }
    for (report, auth) in [
        (&reports[0], format!("bearer {TOKEN}")),
        (&reports[1], format!("BEARER {TOKEN}")),
        (&reports[2], format!("Bearer {TOKEN}")),
    ] {
        let (status, b, _) = post_auth(&c.url(), Some(&auth), &std::fs::read(report).unwrap(), &[]);
        assert_eq!(status, 201, "{auth}: {b}");
    }
    assert_eq!(count(&db, "reports"), 3);
}

/// Wrong tokens from one address are said on standard error in a few summary lines, not one
/// a request, and past 30 a minute that address is answered 429 with Retry-After, while
/// other addresses and a right token are not affected.
#[test]
fn failed_auth_is_logged_rate_limited_and_429_past_the_limit() {
    let dir = TempDir::new("svc-429");
    let db = sqlite_db(&dir);
    let c = Collector::start(&db);
    let reports = fleet(1, 32, "yaml", &dir.path().join("fleet"));
    let body = std::fs::read(&reports[0]).unwrap();

    let bad = format!("Bearer {WRONG}");
    let mut statuses = Vec::new();
    for i in 0..40 {
        let (status, b, h) = post_auth(&c.url(), Some(&bad), b"x", &[]);
        if i >= 30 {
            assert_eq!(status, 429, "failure {}: {b}", i + 1);
            assert!(header(&h, "retry-after").is_some(), "{h:?}");
        }
        statuses.push(status);
    }
    assert!(
        statuses[..30].iter().all(|&s| s == 401),
        "the first 30 failures are 401: {statuses:?}"
    );

    // Another address is counted on its own.
    let mut s = connect_from("127.0.0.2", c.port);
    s.write_all(
        format!(
            "POST /api/v1/reports HTTP/1.1\r\nHost: x\r\nAuthorization: {bad}\r\n\
             Content-Length: 1\r\n\r\nx"
        )
        .as_bytes(),
    )
    .unwrap();
    let (answer, _) = read_until_closed(&mut s, Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 401"), "127.0.0.2: {answer:?}");

    // The right token from the limited address still stores.
    let (status, b, _) = post_auth(&c.url(), Some(&format!("Bearer {TOKEN}")), &body, &[]);
    assert_eq!(status, 201, "{b}");

    let err = c.stderr();
    let lines = err
        .lines()
        .filter(|l| l.contains("missing or wrong token"))
        .count();
    assert!(
        (1..=3).contains(&lines),
        "41 failed requests gave {lines} lines on standard error (a summary at most every \
         10 s is expected):\n{err}"
    );
}

/// A client that sends its request head one byte a second, a connection that never sends
/// anything, and a keep-alive connection left idle after its answer are all closed after
/// `--header-timeout`.
#[test]
fn slow_headers_and_idle_connections_are_closed() {
    let dir = TempDir::new("svc-slow");
    let c = Collector::start_with(&sqlite_db(&dir), &["--header-timeout", "2"]);

    // One header byte a second.
    let head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut s = TcpStream::connect(("127.0.0.1", c.port)).unwrap();
    let t0 = Instant::now();
    let mut closed_after = None;
    for b in head.iter() {
        if s.write_all(std::slice::from_ref(b)).is_err() {
            closed_after = Some(t0.elapsed());
            break;
        }
        let (got, closed) = read_until_closed(&mut s, Duration::from_secs(1));
        if closed {
            closed_after = Some(t0.elapsed());
            assert!(
                !got.starts_with("HTTP/1.1 200"),
                "the slow head was answered: {got:?}"
            );
            break;
        }
    }
    let took = closed_after.expect("a head sent one byte a second was never cut off");
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(5),
        "the slow head was closed after {took:?} (--header-timeout 2)"
    );

    // Nothing sent at all.
    let mut s = TcpStream::connect(("127.0.0.1", c.port)).unwrap();
    let t0 = Instant::now();
    let (_, closed) = read_until_closed(&mut s, Duration::from_secs(8));
    assert!(closed, "a silent connection stayed open for 8 s");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());

    // Idle after one answer (keep-alive).
    let mut s = TcpStream::connect(("127.0.0.1", c.port)).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 1024];
    let n = s.read(&mut b).unwrap();
    assert!(b[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &b[..n]);
    let t0 = Instant::now();
    let (_, closed) = read_until_closed(&mut s, Duration::from_secs(8));
    assert!(closed, "an idle keep-alive connection stayed open for 8 s");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

/// One host holding its share of connections (`--max-per-address`) has its next one closed
/// at once, and a unit at another address still uploads.
#[test]
fn one_address_cannot_take_every_slot() {
    let dir = TempDir::new("svc-per-address");
    let db = sqlite_db(&dir);
    let c = Collector::start_with(
        &db,
        &[
            "--max-per-address",
            "4",
            "--max-connections",
            "8",
            "--header-timeout",
            "60",
        ],
    );
    let reports = fleet(1, 33, "yaml", &dir.path().join("fleet"));

    let mut held: Vec<TcpStream> = (0..4).map(|_| connect_from("127.0.0.2", c.port)).collect();
    std::thread::sleep(Duration::from_millis(300)); // accepted
    let mut fifth = connect_from("127.0.0.2", c.port);
    let t0 = Instant::now();
    let (got, closed) = read_until_closed(&mut fifth, Duration::from_secs(3));
    assert!(
        closed && got.is_empty(),
        "the fifth connection from 127.0.0.2 stayed open (or was answered: {got:?})"
    );
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert!(
        held.iter_mut().all(still_open),
        "the four within the limit are kept"
    );

    let (code, err, took) = upload(&c, &dir.path().join("spool"), &reports, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(took < Duration::from_secs(5), "the upload took {took:?}");
    assert_eq!(stored_ids(&db), vec![report_id(&reports[0])]);
    drop(held);
}

/// SIGTERM while clients hold connections with half-sent requests: the collector exits
/// cleanly within its 10 s grace instead of waiting for them.
#[test]
fn sigterm_with_slow_connections_exits_in_time() {
    let dir = TempDir::new("svc-sigterm");
    // A header timeout far past the grace: the grace is what ends them.
    let c = Collector::start_with(&sqlite_db(&dir), &["--header-timeout", "120"]);
    let socks: Vec<TcpStream> = (0..5)
        .map(|_| TcpStream::connect(("127.0.0.1", c.port)).unwrap())
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let mut writers: Vec<TcpStream> = socks.iter().map(|s| s.try_clone().unwrap()).collect();
    let trickle = std::thread::spawn(move || {
        let head = b"POST /api/v1/reports HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaa";
        let mut i = 0;
        while !stop2.load(Ordering::Relaxed) && i < head.len() {
            for w in &mut writers {
                let _ = w.write_all(&head[i..i + 1]);
            }
            i += 1;
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    std::thread::sleep(Duration::from_millis(700));

    let (tx, rx) = std::sync::mpsc::channel();
    let pid = c.pid();
    let t0 = Instant::now();
    let stopper = std::thread::spawn(move || {
        let mut c = c;
        let st = c.terminate();
        let _ = tx.send((st, t0.elapsed(), c.stderr()));
    });
    let got = rx.recv_timeout(Duration::from_secs(20));
    stop.store(true, Ordering::Relaxed);
    trickle.join().unwrap();
    let Ok((st, took, err)) = got else {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        let _ = stopper.join();
        panic!("the collector was still running 20 s after SIGTERM with 5 slow connections");
    };
    stopper.join().unwrap();
    assert!(st.success(), "SIGTERM: {st}: {err}");
    assert!(
        took < Duration::from_secs(10),
        "exited {took:?} after SIGTERM (grace 8 s, at most 10 s)"
    );
    assert!(
        err.contains("still open 8 s after SIGTERM"),
        "the slow connections were closed when the grace ran out, and it says so: {err}"
    );
    drop(socks);
}

/// `/readyz` answers 200 only while the database takes a write: 503 naming the cause while
/// its filesystem is full, 200 again once there is room, without a restart; `/healthz`
/// answers 200 throughout (the process is alive).
#[test]
fn readyz_follows_the_database_and_healthz_is_liveness() {
    let dir = TempDir::new("svc-readyz");
    let fs = Tmpfs::mount(&dir.path().join("small"), "4m");
    let db = format!("sqlite:{}", fs.0.join("r.db").display());
    let c = Collector::start(&db);
    let reports = fleet(1, 34, "yaml", &dir.path().join("fleet"));
    let pid = c.pid();

    assert_eq!(get(c.port, "/readyz"), (200, "ok\n".to_string()));
    assert_eq!(get(c.port, "/healthz").0, 200);

    let fill = fs.fill();
    // A probe's answer is reused for a second: the next one asks the database.
    std::thread::sleep(Duration::from_millis(1100));
    let (status, body) = get(c.port, "/readyz");
    assert_eq!(status, 503, "/readyz on a full filesystem: {body}");
    assert!(body.contains("full"), "the reason is given: {body}");
    assert_eq!(
        get(c.port, "/healthz").0,
        200,
        "liveness does not depend on the database"
    );
    let (code, err, _) = upload(
        &c,
        &dir.path().join("spool"),
        &reports,
        &["--attempts", "1"],
    );
    assert_eq!(
        code,
        Some(4),
        "the unit keeps the report while the disk is full: {err}"
    );

    std::fs::remove_file(&fill).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(get(c.port, "/readyz"), (200, "ok\n".to_string()));
    assert_eq!(c.pid(), pid);
    let (code, err, _) = upload(&c, &dir.path().join("spool"), &[], &[]);
    assert_eq!(code, Some(0), "the spool drains once there is room: {err}");
    assert_eq!(stored_ids(&db), vec![report_id(&reports[0])]);
    drop(c);
    drop(fs);
}

/// A token file other users may read is refused by the collector (it exits, naming chmod)
/// and by `usbperf-matrix upload` (exit 2, the report kept in the spool); both take it with
/// `--allow-readable-token`.
#[test]
fn token_file_others_may_read_is_refused_on_both_sides() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("svc-token-mode");
    let db = sqlite_db(&dir);
    let readable = dir.path().join("readable-token");
    std::fs::write(&readable, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o644)).unwrap();
    let reports = fleet(1, 35, "yaml", &dir.path().join("fleet"));

    let out = Command::new(collect_bin())
        .args(["--listen", "127.0.0.1:0", "--db", &db, "--token-file"])
        .arg(&readable)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the collector started: {err}");
    assert!(
        err.contains("chmod") && err.contains("0644"),
        "the collector says what to do: {err}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).is_empty(),
        "it did not listen"
    );

    let c = Started::spawn(
        &["--db", &db, "--allow-readable-token"],
        &readable,
        &dir.path().join("stderr"),
    );
    let log = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    assert!(
        log.contains("warning"),
        "it warns when told to use it: {log}"
    );

    let spool = dir.path().join("spool");
    let out = upload_cmd(&c.url(), &readable, &spool)
        .arg(&reports[0])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("chmod 0600"), "{err}");
    // Exit 2 means nothing was queued: the token is refused before the report is.
    assert!(err.contains("nothing was queued"), "{err}");
    assert_eq!(
        std::fs::read_dir(&spool).map_or(0, |d| d.count()),
        0,
        "nothing is queued for a token that cannot be used"
    );
    assert_eq!(count(&db, "reports"), 0);

    let out = upload_cmd(&c.url(), &readable, &spool)
        .arg("--allow-readable-token")
        .arg(&reports[0])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stored_ids(&db), vec![report_id(&reports[0])]);
}

/// A report whose figures no device measures (1e308 MiB/s, a negative rate), whose time is
/// outside what a report may carry (year 9999) or years after the collector's clock, or whose
/// board name is longer than a name may be (PostgreSQL cannot index 3,000 bytes) is answered
/// 422 naming the field, and nothing is stored; the same report as the unit wrote it is
/// stored after.
#[test]
fn implausible_figures_and_times_are_422_naming_the_field() {
    let dir = TempDir::new("svc-422");
    let db = sqlite_db(&dir);
    let c = Collector::start(&db);
    let reports = fleet(1, 36, "yaml", &dir.path().join("fleet"));
    let text = std::fs::read_to_string(&reports[0]).unwrap();
    let auth = format!("Bearer {TOKEN}");

    for (key, value, named) in [
        ("mib_per_s", "1e308", "mib_per_s"),
        ("mib_per_s", "-5e10", "mib_per_s"),
        ("started_at", "9999-01-01T00:00:00Z", "started_at"),
        (
            "started_at",
            "2262-01-01T00:00:00Z",
            "more than a day after",
        ),
        ("model", &"x".repeat(3000), "unit.model is 3000 bytes long"),
    ] {
        let body = set_first(&text, key, value);
        let (status, b, _) = post_auth(&c.url(), Some(&auth), body.as_bytes(), &[]);
        assert_eq!(status, 422, "{key}: {value}: {b}");
        assert!(
            b.contains(named),
            "{key}: {value}: the answer names it: {b}"
        );
    }
    assert_eq!(count(&db, "reports"), 0);
    let (status, b, _) = post_auth(&c.url(), Some(&auth), text.as_bytes(), &[]);
    assert_eq!(status, 201, "{b}");
}

/// Each request has a line on standard error: `access: ADDRESS METHOD PATH STATUS BYTESB
/// MILLISECONDSms report=ID`; probes (`/healthz`, `/readyz`) have none.
#[test]
fn access_log_names_each_request() {
    let dir = TempDir::new("svc-access");
    let db = sqlite_db(&dir);
    let c = Collector::start(&db);
    let reports = fleet(2, 37, "yaml", &dir.path().join("fleet"));
    let auth = format!("Bearer {TOKEN}");
    let body = std::fs::read(&reports[0]).unwrap();
    let id = report_id(&reports[0]);

    let with_id = [("X-Usbperf-Report-Id", id.as_str())];
    assert_eq!(post_auth(&c.url(), Some(&auth), &body, &with_id).0, 201);
    assert_eq!(post_auth(&c.url(), Some(&auth), &body, &with_id).0, 200);
    assert_eq!(
        post_auth(&c.url(), Some(&auth), b"not: a report\n", &[]).0,
        400
    );
    assert_eq!(get(c.port, "/nowhere").0, 404);
    assert_eq!(get(c.port, "/healthz").0, 200);
    assert_eq!(get(c.port, "/readyz").0, 200);
    let (code, err, _) = upload(&c, &dir.path().join("spool"), &reports[1..], &[]);
    assert_eq!(code, Some(0), "{err}");
    let id2 = report_id(&reports[1]);
    // `upload` sends the report's wire form, JSON.
    let len2 =
        usbperf_report::wire::to_store_as_json(&reports[1], &std::fs::read(&reports[1]).unwrap())
            .unwrap()
            .1
            .len();

    let log = c.access_log();
    let access: Vec<Vec<&str>> = log.iter().map(|l| l.split_whitespace().collect()).collect();
    let want: Vec<(&str, &str, &str, String, Option<String>)> = vec![
        (
            "POST",
            "/api/v1/reports",
            "201",
            format!("{}B", body.len()),
            Some(id.clone()),
        ),
        (
            "POST",
            "/api/v1/reports",
            "200",
            format!("{}B", body.len()),
            Some(id.clone()),
        ),
        ("POST", "/api/v1/reports", "400", "14B".to_string(), None),
        ("GET", "/nowhere", "404", "0B".to_string(), None),
        (
            "POST",
            "/api/v1/reports",
            "201",
            format!("{len2}B"),
            Some(id2),
        ),
    ];
    assert_eq!(
        access.len(),
        want.len(),
        "one line a request, none for the probes:\n{}",
        c.stderr_all()
    );
    for (line, (method, path, status, bytes, rid)) in access.iter().zip(&want) {
        assert_eq!(line[1], "127.0.0.1", "{line:?}");
        assert_eq!(
            (line[2], line[3], line[4], line[5]),
            (*method, *path, *status, bytes.as_str()),
            "{line:?}"
        );
        assert!(
            line[6].ends_with("ms") && line[6].trim_end_matches("ms").parse::<u64>().is_ok(),
            "{line:?}"
        );
        let report = line.get(7).and_then(|r| r.strip_prefix("report="));
        assert_eq!(report, rid.as_deref(), "{line:?}");
    }
}

/// SIGHUP reads the token file again: a removed token is refused from then on, a new one
/// stores, a connection opened before stays open, and a file that cannot be used keeps the
/// tokens in force. Each stored report names the token that stored it.
#[test]
fn sighup_reloads_the_tokens_and_each_report_names_its_token() {
    use std::os::unix::fs::PermissionsExt;
    const OTHER: &str = "station-b-token-000000000000001";
    let dir = TempDir::new("svc-hup");
    let db = sqlite_db(&dir);
    let c = Collector::start(&db);
    let reports = fleet(3, 34, "yaml", &dir.path().join("fleet"));
    let body = |i: usize| std::fs::read(&reports[i]).unwrap();
    let bearer = |t: &str| format!("Bearer {t}");
    let hup_said = |what: &str, n: usize| {
        let st = Command::new("kill")
            .args(["-HUP", &c.pid().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let t0 = Instant::now();
        while c.stderr().matches(what).count() < n {
            assert!(t0.elapsed() < Duration::from_secs(10), "{}", c.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    assert_eq!(
        post_auth(&c.url(), Some(&bearer(TOKEN)), &body(0), &[]).0,
        201
    );

    let mut idle = TcpStream::connect(("127.0.0.1", c.port)).unwrap();
    write_token_file(&c.tokens, &format!("station-b {OTHER}\n"));
    hup_said("SIGHUP: 1 token(s) read again", 1);
    assert!(still_open(&mut idle), "SIGHUP closed a connection");
    let (status, b, _) = post_auth(&c.url(), Some(&bearer(TOKEN)), &body(1), &[]);
    assert_eq!(status, 401, "the removed token: {b}");
    assert_eq!(
        post_auth(&c.url(), Some(&bearer(OTHER)), &body(1), &[]).0,
        201
    );

    // A file others may read: refused, the tokens in force kept.
    std::fs::write(&c.tokens, format!("station-c {TOKEN}\n")).unwrap();
    std::fs::set_permissions(&c.tokens, std::fs::Permissions::from_mode(0o644)).unwrap();
    hup_said("the tokens in force are kept", 1);
    assert_eq!(
        post_auth(&c.url(), Some(&bearer(OTHER)), &body(2), &[]).0,
        201
    );
    assert_eq!(get(c.port, "/healthz").0, 200);

    let path = db.strip_prefix("sqlite:").unwrap();
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut q = conn
        .prepare("SELECT token FROM reports ORDER BY received_at, rowid")
        .unwrap();
    let names: Vec<String> = q
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    // The collector's first token file holds its token on line 2, unnamed.
    assert_eq!(names, ["line-2", "station-b", "station-b"]);
}
