//! The path of one report from the unit's spool to the collector's database, with the
//! reports that used to go wrong on it: the same id with other content, reports without an
//! id that share a file name, a redirecting proxy, files that are not reports, reports the
//! database cannot store, and bodies built to exhaust the parser. Each case runs on SQLite
//! and on a real PostgreSQL server, with the real collector and `usbperf-matrix upload`.

mod common;
mod hostile;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use common::*;
use sha2::{Digest, Sha256};

fn sha_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn sqlite_db(dir: &TempDir) -> String {
    format!("sqlite:{}", dir.path().join("r.db").display())
}

/// POST `body` with the collector's token; (status, body).
fn post(url: &str, body: &[u8], json: bool) -> (u16, String) {
    let req = authorized_post(url, json, Duration::from_secs(60));
    match req.send_bytes(body) {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(s, r)) => (s, r.into_string().unwrap_or_default()),
        Err(e) => panic!("POST {url}: {e}"),
    }
}

/// The counts of `upload: N delivered, N duplicate, N rejected, N still queued in DIR`.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
struct Counts {
    delivered: u64,
    duplicate: u64,
    rejected: u64,
    queued: u64,
}

fn counts(delivered: u64, duplicate: u64, rejected: u64, queued: u64) -> Counts {
    Counts {
        delivered,
        duplicate,
        rejected,
        queued,
    }
}

/// One `usbperf-matrix upload` process, finished.
struct Upload {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "upload exited {:?}\n--- stdout:\n{}--- stderr:\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl Upload {
    /// The summary line's counts; None when there is no such line.
    fn counts(&self) -> Option<Counts> {
        let line = self
            .stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix("upload: "))?;
        let parts: Vec<&str> = line.splitn(4, ", ").collect();
        if parts.len() != 4 {
            return None;
        }
        let num = |part: &str, word: &str| -> Option<u64> {
            let (n, rest) = part.split_once(' ')?;
            if rest.starts_with(word) {
                n.parse().ok()
            } else {
                None
            }
        };
        Some(Counts {
            delivered: num(parts[0], "delivered")?,
            duplicate: num(parts[1], "duplicate")?,
            rejected: num(parts[2], "rejected")?,
            queued: num(parts[3], "still queued in ")?,
        })
    }

    fn assert_counts(&self, want: Counts) {
        assert_eq!(
            self.counts(),
            Some(want),
            "the summary `upload: N delivered, N duplicate, N rejected, N still queued in DIR` \
             differs: {self}"
        );
    }
}

/// `usbperf-matrix upload --url URL --token-file … --spool SPOOL --attempts 1 ARGS…`.
fn upload(url: &str, tokens: &Path, spool: &Path, args: &[&Path]) -> Upload {
    let out = upload_cmd(url, tokens, spool)
        .args(["--attempts", "1", "--timeout", "5s"])
        .args(args)
        .output()
        .unwrap();
    Upload {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The names of the entries queued in `spool` (its own files; not rejected/, not
/// temporaries), sorted.
fn queued(spool: &Path) -> Vec<String> {
    names(spool)
        .into_iter()
        .filter(|n| !n.starts_with('.') && (n.ends_with(".yaml") || n.ends_with(".json")))
        .collect()
}

/// The names of the files in `dir` (none when it does not exist), sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap())
            .filter(|e| e.file_type().unwrap().is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

fn rejected(spool: &Path) -> Vec<String> {
    names(&spool.join("rejected"))
}

/// The reason file of the rejected entry `name`, which must be there beside it.
fn reason(spool: &Path, name: &str, u: &Upload) -> String {
    let dir = spool.join("rejected");
    assert!(
        dir.join(name).is_file(),
        "{name} is not in {}: {:?}\n{u}",
        dir.display(),
        names(&dir)
    );
    let p = dir.join(format!("{name}.reason"));
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("no reason file {}: {e}\n{u}", p.display()))
}

/// The spool entry's name for these bytes.
/// What `upload` queues and sends of the report file `path`: its wire form, JSON.
fn wire_form(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap();
    usbperf_report::wire::to_store_as_json(path, &bytes)
        .unwrap()
        .1
}

fn entry_name(bytes: &[u8], json: bool) -> String {
    format!("{}.{}", sha_hex(bytes), if json { "json" } else { "yaml" })
}

/// (raw, status, pass) of a stored report, read with the database's own client.
fn stored_row(db: &str, id: &str) -> Option<(Vec<u8>, String, bool)> {
    let q = "SELECT raw, status, pass FROM reports WHERE report_id = ";
    if let Some(path) = db.strip_prefix("sqlite:") {
        let c = rusqlite::Connection::open(path).unwrap();
        let mut st = c.prepare(&format!("{q}?1")).unwrap();
        let mut rows = st.query([id]).unwrap();
        rows.next().unwrap().map(|r| {
            (
                r.get::<_, Vec<u8>>(0).unwrap(),
                r.get::<_, String>(1).unwrap(),
                r.get::<_, i64>(2).unwrap() != 0,
            )
        })
    } else {
        let mut c = postgres::Client::connect(db, postgres::NoTls).unwrap();
        c.query_opt(format!("{q}$1").as_str(), &[&id])
            .unwrap()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
    }
}

/// The value of the report's top-level `report_id:` line.
fn yaml_report_id(text: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix("report_id: "))
        .expect("a report_id line")
        .trim()
        .trim_matches('\'')
        .to_string()
}

/// `text` with its top-level line `key: …` replaced by `line`.
fn replace_line(text: &str, key: &str, line: &str) -> String {
    let mut found = false;
    let out: Vec<&str> = text
        .lines()
        .map(|l| {
            if !found && l.starts_with(key) {
                found = true;
                line
            } else {
                l
            }
        })
        .collect();
    assert!(found, "no line starting with {key:?}");
    out.join("\n") + "\n"
}

fn assert_nothing_stored(db: &str) {
    for table in ["reports", "devices", "metrics"] {
        assert_eq!(count(db, table), 0, "rows in {table}");
    }
}

// --- 1. The same report id with other content --------------------------------------------

fn same_id_other_content(db: &str, tag: &str) {
    let dir = TempDir::new(tag);
    let c = Collector::start(db);
    let reports = fleet(1, 21, "yaml", &dir.path().join("fleet"));
    let first = std::fs::read_to_string(&reports[0]).unwrap();
    let id = yaml_report_id(&first);
    let spool = dir.path().join("spool");

    let sent = upload(&c.url(), &c.tokens, &spool, &[&reports[0]]);
    assert_eq!(sent.code, Some(0), "{sent}");
    assert_eq!(queued(&spool), Vec::<String>::new(), "{sent}");

    // The same run's report edited afterwards: aborted, and its verdicts turned around.
    let edited = first
        .replacen("status: complete", "status: aborted", 1)
        .replace("pass: true", "pass: TRUE_WAS")
        .replace("pass: false", "pass: true")
        .replace("pass: TRUE_WAS", "pass: false");
    assert_ne!(edited, first);
    assert_eq!(yaml_report_id(&edited), id);
    let edited_file = dir.path().join("edited").join("report.yaml");
    std::fs::create_dir_all(edited_file.parent().unwrap()).unwrap();
    std::fs::write(&edited_file, &edited).unwrap();

    let u = upload(&c.url(), &c.tokens, &spool, &[&edited_file]);
    assert!(
        !u.stderr.contains(&format!("delivered {id}")),
        "the edited copy was taken for delivered: {u}"
    );
    let sent_edited = wire_form(&edited_file);
    let name = entry_name(&sent_edited, true);
    let why = reason(&spool, &name, &u);
    assert!(why.contains("409"), "reason: {why}");
    assert!(
        why.contains("already stored with other content"),
        "reason: {why}"
    );
    assert_eq!(
        std::fs::read(spool.join("rejected").join(&name)).unwrap(),
        sent_edited,
        "the rejected entry is the edited copy, as sent"
    );
    assert_eq!(queued(&spool), Vec::<String>::new(), "{u}");
    assert_eq!(u.code, Some(4), "{u}");
    u.assert_counts(counts(0, 0, 1, 0));

    // The database still has the first version, once.
    assert_eq!(count(db, "reports"), 1);
    let (raw, status, pass) = stored_row(db, &id).expect("the first version is stored");
    let sent_first = wire_form(&reports[0]);
    assert!(raw == sent_first, "the stored bytes were replaced");
    assert_eq!(status, "complete");
    let first_pass = first.contains("\nverdict:\n  pass: true");
    assert_eq!(pass, first_pass, "the stored verdict was replaced");

    // The collector's answer itself: 409 naming both digests.
    let (s, b) = post(&c.url(), edited.as_bytes(), false);
    assert_eq!(s, 409, "{b}");
    let v: serde_json::Value = serde_json::from_str(&b).unwrap();
    assert_eq!(v["report_id"], id.as_str(), "{b}");
    assert_eq!(v["sha256"], sha_hex(edited.as_bytes()).as_str(), "{b}");
    assert_eq!(v["stored_sha256"], sha_hex(&sent_first).as_str(), "{b}");

    // A later drain does not send the rejected copy again.
    let u = upload(&c.url(), &c.tokens, &spool, &[]);
    assert_eq!(u.code, Some(0), "{u}");
    u.assert_counts(counts(0, 0, 0, 0));
    assert_eq!(count(db, "reports"), 1);
    sent.assert_counts(counts(1, 0, 0, 0));
}

/// A report sent again under the same report_id with other content is refused (409), set
/// aside in rejected/ with its reason, never counted delivered, and the stored one is kept.
#[test]
fn same_id_other_content_sqlite_is_rejected_and_the_first_is_kept() {
    let dir = TempDir::new("conflict-db");
    same_id_other_content(&sqlite_db(&dir), "conflict-sqlite");
}

/// A report sent again under the same report_id with other content is refused (409), set
/// aside in rejected/ with its reason, never counted delivered, and the stored one is kept.
#[test]
fn same_id_other_content_postgres_is_rejected_and_the_first_is_kept() {
    let pg = Pg::start();
    same_id_other_content(&pg.url(), "conflict-pg");
}

// --- 2. Reports without an id, with the same file name -----------------------------------

fn same_name_no_id(db: &str, tag: &str) {
    let dir = TempDir::new(tag);
    let c = Collector::start(db);
    let reports = fleet(2, 22, "yaml", &dir.path().join("fleet"));
    let mut files: Vec<PathBuf> = Vec::new();
    let mut ids = Vec::new();
    for (sub, r) in ["a", "b"].iter().zip(&reports) {
        // A report from a build before report_id existed: schema 1, no id.
        let text = std::fs::read_to_string(r).unwrap();
        let text = replace_line(&text, "schema_version: ", "schema_version: 1");
        let without: String = text
            .lines()
            .filter(|l| !l.starts_with("report_id:"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(!without.contains("report_id"));
        let f = dir.path().join(sub).join("report.yaml");
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(&f, &without).unwrap();
        // The collector keys such a report by the bytes it was sent: the wire form.
        ids.push(format!("sha256-{}", &sha_hex(&wire_form(&f))[..32]));
        files.push(f);
    }
    ids.sort();
    let spool = dir.path().join("spool");
    let u = upload(&c.url(), &c.tokens, &spool, &[&files[0], &files[1]]);
    assert_eq!(count(db, "reports"), 2, "both reports are stored: {u}");
    assert_eq!(stored_ids(db), ids);
    assert_eq!(u.code, Some(0), "{u}");
    u.assert_counts(counts(2, 0, 0, 0));
    assert_eq!(queued(&spool), Vec::<String>::new());
    assert_eq!(rejected(&spool), Vec::<String>::new());
}

/// Two reports without a report_id, both named report.yaml in different directories, are
/// queued side by side and both delivered and stored.
#[test]
fn same_file_name_without_id_sqlite_both_stored() {
    let dir = TempDir::new("noid-db");
    same_name_no_id(&sqlite_db(&dir), "noid-sqlite");
}

/// Two reports without a report_id, both named report.yaml in different directories, are
/// queued side by side and both delivered and stored.
#[test]
fn same_file_name_without_id_postgres_both_stored() {
    let pg = Pg::start();
    same_name_no_id(&pg.url(), "noid-pg");
}

// --- 3. Redirects ------------------------------------------------------------------------

/// One request as a tiny HTTP server received it.
#[derive(Debug, Clone)]
struct Seen {
    request_line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A one-thread HTTP/1.1 server on 127.0.0.1 that answers every request with what `answer`
/// makes of it and closes the connection; it keeps what it received.
struct Tiny {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn read_request(s: &mut TcpStream) -> Option<Seen> {
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut seen = Seen {
        request_line,
        headers,
        body: buf[head_end..].to_vec(),
    };
    let len: usize = seen
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while seen.body.len() < len {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        seen.body.extend_from_slice(&chunk[..n]);
    }
    Some(seen)
}

impl Tiny {
    fn start(answer: impl Fn(&Seen) -> String + Send + 'static) -> Tiny {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        s.set_nonblocking(false).unwrap();
                        if let Some(req) = read_request(&mut s) {
                            let reply = answer(&req);
                            seen2.lock().unwrap().push(req);
                            let _ = s.write_all(reply.as_bytes());
                        }
                        let _ = s.shutdown(std::net::Shutdown::Both);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            }
        });
        Tiny {
            port,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/api/v1/reports", self.port)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Tiny {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn http_answer(status: &str, extra_headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\n{extra_headers}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A redirect from the collector's address is not followed and is no acknowledgement: the
/// report stays queued (exit 4) and the redirect's target receives nothing. No database is
/// involved, so this is one test, not a SQLite and a PostgreSQL one.
#[test]
fn redirect_is_not_followed_and_the_report_stays_queued() {
    let dir = TempDir::new("redirect");
    let reports = fleet(1, 23, "yaml", &dir.path().join("fleet"));
    let id = yaml_report_id(&std::fs::read_to_string(&reports[0]).unwrap());
    let bytes = wire_form(&reports[0]);
    let sha = sha_hex(&bytes);
    // Where the redirect points: a server that acknowledges anything, as a collector would
    // acknowledge these very bytes.
    let (id2, sha2) = (id.clone(), sha.clone());
    let target = Tiny::start(move |req| {
        let rid = req.header("x-usbperf-report-id").unwrap_or(&id2);
        http_answer(
            "201 Created",
            "",
            &format!(r#"{{"report_id": "{rid}", "sha256": "{sha2}", "stored": "new"}}"#),
        )
    });
    let tokens = dir.path().join("token");
    write_token_file(&tokens, &format!("{TOKEN}\n"));
    for status in [
        "301 Moved Permanently",
        "302 Found",
        "303 See Other",
        "307 Temporary Redirect",
        "308 Permanent Redirect",
    ] {
        let location = format!("Location: {}\r\n", target.url());
        let st = status.to_string();
        let proxy = Tiny::start(move |_| http_answer(&st, &location, ""));
        let spool = dir.path().join(format!("spool-{}", &status[..3]));
        let u = upload(&proxy.url(), &tokens, &spool, &[&reports[0]]);
        assert_eq!(
            queued(&spool),
            vec![entry_name(&bytes, true)],
            "{status}: the entry left the spool: {u}"
        );
        let followed = target.seen();
        assert!(
            followed.is_empty(),
            "{status}: the unit followed the redirect: {:?}\n{u}",
            followed
                .iter()
                .map(|s| s.request_line.as_str())
                .collect::<Vec<_>>()
        );
        assert!(
            !proxy.seen().is_empty(),
            "{status}: the unit did not send to its URL: {u}"
        );
        assert_eq!(
            rejected(&spool),
            Vec::<String>::new(),
            "{status}: a redirect is no verdict on the report: {u}"
        );
        assert_eq!(u.code, Some(4), "{status}: {u}");
        u.assert_counts(counts(0, 0, 0, 1));
    }
}

// --- 4. Files that are not reports -------------------------------------------------------

fn not_a_report(db: &str, tag: &str) {
    let dir = TempDir::new(tag);
    let c = Collector::start(db);
    let spool = dir.path().join("spool");
    let junk: [(&str, &[u8]); 5] = [
        ("garbage.yaml", b"hello: world\n"),
        (
            "notes.yaml",
            b"The quick brown fox jumps over the lazy dog.\n",
        ),
        ("broken.yaml", b"schema_version: 1\nreport_id: [unclosed\n"),
        ("other.json", br#"{"hello": "world"}"#),
        ("empty.yaml", b""),
    ];
    for (name, bytes) in junk {
        let f = dir.path().join(name);
        std::fs::write(&f, bytes).unwrap();
        let u = upload(&c.url(), &c.tokens, &spool, &[&f]);
        assert_eq!(
            queued(&spool),
            Vec::<String>::new(),
            "{name} was queued: {u}"
        );
        assert_eq!(u.code, Some(2), "{name}: {u}");
    }
    assert_eq!(rejected(&spool), Vec::<String>::new());
    assert_nothing_stored(db);

    // A real report after them goes through.
    let reports = fleet(1, 24, "yaml", &dir.path().join("fleet"));
    let u = upload(&c.url(), &c.tokens, &spool, &[&reports[0]]);
    assert_eq!(u.code, Some(0), "{u}");
    u.assert_counts(counts(1, 0, 0, 0));
    assert_eq!(count(db, "reports"), 1);

    // A report given beside files that are not reports is queued and delivered; the others
    // are named and the command exits 2.
    let more = fleet(2, 25, "yaml", &dir.path().join("fleet2"));
    let junk = dir.path().join("garbage.yaml");
    let u = upload(&c.url(), &c.tokens, &spool, &[&more[0], &junk, &more[1]]);
    assert_eq!(u.code, Some(2), "{u}");
    assert!(
        u.stderr.contains("garbage.yaml: not a usbperf report"),
        "{u}"
    );
    u.assert_counts(counts(2, 0, 0, 0));
    assert_eq!(count(db, "reports"), 3);

    // A non-report in the spool itself, as an older version queued anything it was given:
    // the collector refuses it (400), the unit sets it aside with the reason.
    std::fs::create_dir_all(&spool).unwrap();
    std::fs::write(spool.join("garbage.yaml"), b"hello: world\n").unwrap();
    let u = upload(&c.url(), &c.tokens, &spool, &[]);
    let why = reason(&spool, "garbage.yaml", &u);
    assert!(why.contains("400"), "reason: {why}");
    assert!(why.contains("not a usbperf report"), "reason: {why}");
    assert_eq!(queued(&spool), Vec::<String>::new(), "{u}");
    assert_eq!(u.code, Some(4), "{u}");
    u.assert_counts(counts(0, 0, 1, 0));
    // Set aside for good: the next drain has nothing to do.
    let u = upload(&c.url(), &c.tokens, &spool, &[]);
    assert_eq!(u.code, Some(0), "{u}");
    u.assert_counts(counts(0, 0, 0, 0));
    assert_eq!(count(db, "reports"), 3);
}

/// A file that is not a usbperf report is refused at once (exit 2) and never queued; one
/// already in the spool is refused by the collector (400) and set aside with its reason.
#[test]
fn not_a_report_sqlite_is_refused_and_set_aside() {
    let dir = TempDir::new("junk-db");
    not_a_report(&sqlite_db(&dir), "junk-sqlite");
}

/// A file that is not a usbperf report is refused at once (exit 2) and never queued; one
/// already in the spool is refused by the collector (400) and set aside with its reason.
#[test]
fn not_a_report_postgres_is_refused_and_set_aside() {
    let pg = Pg::start();
    not_a_report(&pg.url(), "junk-pg");
}

// --- 5. Reports the database cannot store ------------------------------------------------

fn unstorable_first(db: &str, tag: &str) {
    let dir = TempDir::new(tag);
    let c = Collector::start(db);
    let yaml = fleet(6, 25, "yaml", &dir.path().join("fleet"));
    let json = fleet(1, 26, "json", &dir.path().join("fleet-json"));
    let text = |p: &Path| std::fs::read_to_string(p).unwrap();
    // (what, bytes, json, the collector's status, what its message names): a time that is
    // not one or a NUL is malformed (400); a real time no unit can have is implausible (422).
    let bad: Vec<(&str, String, bool, u16, &str)> = vec![
        (
            "month 99",
            replace_line(
                &text(&yaml[0]),
                "started_at: ",
                "started_at: 2026-99-99T99:99:99Z",
            ),
            false,
            400,
            "not an RFC 3339 time",
        ),
        (
            "year 0",
            replace_line(
                &text(&yaml[1]),
                "started_at: ",
                "started_at: 0000-01-01T00:00:00Z",
            ),
            false,
            422,
            "outside 1970-01-01",
        ),
        (
            "NUL in a YAML hostname",
            replace_line(
                &text(&yaml[2]),
                "  hostname: ",
                "  hostname: \"apalis\\0nul\"",
            ),
            false,
            400,
            "NUL",
        ),
        (
            "NUL in a JSON hostname",
            text(&json[0]).replacen("\"hostname\": \"", "\"hostname\": \"nul\\u0000", 1),
            true,
            400,
            "NUL",
        ),
    ];
    let spool = dir.path().join("spool");
    std::fs::create_dir_all(&spool).unwrap();
    // Queued before the good ones (oldest first), as an earlier version queued them.
    let now = SystemTime::now();
    assert!(
        bad[3].1.contains("\\u0000"),
        "the JSON report has no hostname"
    );
    for (i, (_, bytes, is_json, _, _)) in bad.iter().enumerate() {
        let p = spool.join(entry_name(bytes.as_bytes(), *is_json));
        std::fs::write(&p, bytes).unwrap();
        let f = std::fs::File::options().write(true).open(&p).unwrap();
        f.set_modified(now - Duration::from_secs(600 - 100 * i as u64))
            .unwrap();
    }
    let good = &yaml[3..];
    let mut good_ids: Vec<String> = good.iter().map(|p| yaml_report_id(&text(p))).collect();
    good_ids.sort();
    let args: Vec<&Path> = good.iter().map(PathBuf::as_path).collect();
    let u = upload(&c.url(), &c.tokens, &spool, &args);

    assert_eq!(
        stored_ids(db),
        good_ids,
        "the good reports behind the unstorable ones are stored: {u}"
    );
    for (what, bytes, is_json, status, names) in &bad {
        let why = reason(&spool, &entry_name(bytes.as_bytes(), *is_json), &u);
        assert!(why.contains(&status.to_string()), "{what}: reason: {why}");
        assert!(why.contains(names), "{what}: reason: {why}");
    }
    assert_eq!(queued(&spool), Vec::<String>::new(), "{u}");
    assert_eq!(u.code, Some(4), "{u}");
    u.assert_counts(counts(3, 0, bad.len() as u64, 0));

    // The collector's own answer to each: a 4xx, never 503 (nothing is wrong with the
    // database).
    for (what, bytes, is_json, status, names) in &bad {
        let (s, b) = post(&c.url(), bytes.as_bytes(), *is_json);
        assert_eq!(s, *status, "{what}: {b}");
        assert!(b.contains(names), "{what}: {b}");
    }
    assert!(
        !c.stderr().contains("store:"),
        "the database failed: {}",
        c.stderr()
    );
    assert_eq!(count(db, "reports"), 3);
    let u = upload(&c.url(), &c.tokens, &spool, &[]);
    assert_eq!(u.code, Some(0), "{u}");
    u.assert_counts(counts(0, 0, 0, 0));
}

/// Reports with impossible times or a NUL in their text are refused (400) and set aside,
/// and the good reports queued behind them are still delivered and stored.
#[test]
fn unstorable_reports_sqlite_do_not_block_the_spool() {
    let dir = TempDir::new("unstorable-db");
    unstorable_first(&sqlite_db(&dir), "unstorable-sqlite");
}

/// Reports with impossible times or a NUL in their text are refused (400) and set aside,
/// and the good reports queued behind them are still delivered and stored.
#[test]
fn unstorable_reports_postgres_do_not_block_the_spool() {
    let pg = Pg::start();
    unstorable_first(&pg.url(), "unstorable-pg");
}

// --- 6. Aliases --------------------------------------------------------------------------

fn alias_body(db: &str, tag: &str) {
    let _dir = TempDir::new(tag);
    let c = Collector::start(db);
    let bomb = hostile::alias_bomb("a11a5a11a5a11a50");
    assert!(
        (100_000..180_000).contains(&bomb.len()),
        "{} bytes",
        bomb.len()
    );
    let t0 = std::time::Instant::now();
    let (s, b) = post(&c.url(), bomb.as_bytes(), false);
    eprintln!(
        "{tag}: {} bytes with 10,000 aliases answered {s} in {:?}",
        bomb.len(),
        t0.elapsed()
    );
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("anchor"), "{b}");
    assert_nothing_stored(db);

    // The same report written out without aliases is stored: only the aliases are refused.
    let (s, b) = post(
        &c.url(),
        hostile::alias_free("a11a5a11a5a11a51").as_bytes(),
        false,
    );
    assert_eq!(s, 201, "{b}");
    assert_eq!(
        (
            count(db, "reports"),
            count(db, "devices"),
            count(db, "metrics")
        ),
        (1, 1, 1000)
    );
}

/// A small YAML body whose one anchored device is repeated 10,000 times by aliases is
/// refused (400) without storing anything.
#[test]
fn alias_expansion_sqlite_is_refused() {
    let dir = TempDir::new("alias-db");
    alias_body(&sqlite_db(&dir), "alias-sqlite");
}

/// A small YAML body whose one anchored device is repeated 10,000 times by aliases is
/// refused (400) without storing anything.
#[test]
fn alias_expansion_postgres_is_refused() {
    let pg = Pg::start();
    alias_body(&pg.url(), "alias-pg");
}

// --- 7. Nesting --------------------------------------------------------------------------

fn deep_body(db: &str, tag: &str) {
    let dir = TempDir::new(tag);
    let c = Collector::start(db);
    let json = fleet(1, 27, "json", &dir.path().join("fleet"));
    let bodies = [
        (hostile::deep_yaml("dee9dee9dee9dee9", 100_000), false),
        (
            hostile::deep_json(&std::fs::read_to_string(&json[0]).unwrap(), 100_000),
            true,
        ),
    ];
    for (body, is_json) in &bodies {
        let t0 = std::time::Instant::now();
        let (s, b) = post(&c.url(), body.as_bytes(), *is_json);
        eprintln!(
            "{tag}: {} bytes nested 100,000 deep ({}) answered {s} in {:?}",
            body.len(),
            if *is_json { "JSON" } else { "YAML" },
            t0.elapsed()
        );
        assert_eq!(s, 400, "{b}");
        assert!(b.contains("nests at most 64 levels"), "{b}");
    }
    assert_nothing_stored(db);
    // Not nested: the same report is stored (the depth alone was refused).
    let (s, b) = post(
        &c.url(),
        hostile::deep_yaml("dee9dee9dee9dee9", 3).as_bytes(),
        false,
    );
    assert_eq!(s, 201, "{b}");
    assert_eq!(count(db, "reports"), 1);
}

/// A body nested 100,000 levels deep under a key the collector ignores is refused (400)
/// with a message naming the nesting limit, and nothing is stored.
#[test]
fn deep_nesting_sqlite_is_refused() {
    let dir = TempDir::new("deep-db");
    deep_body(&sqlite_db(&dir), "deep-sqlite");
}

/// A body nested 100,000 levels deep under a key the collector ignores is refused (400)
/// with a message naming the nesting limit, and nothing is stored.
#[test]
fn deep_nesting_postgres_is_refused() {
    let pg = Pg::start();
    deep_body(&pg.url(), "deep-pg");
}

// --- 8. What the writer never produces ---------------------------------------------------

/// Bodies built to exhaust a reader (alias bombs whose lines break at CR, NEL or LS, a
/// million-deep body after a CR, two million reasons, 700,000 unknown keys, an 8 MB name,
/// 256 devices of 1,024 cells) are each refused with the limit they hit, nothing is stored,
/// and the next, honest report is stored: a refused body never blocks the next.
#[test]
fn bodies_the_writer_never_produces_are_refused_and_the_next_is_stored() {
    let dir = TempDir::new("never-written");
    let db = sqlite_db(&dir);
    let c = Collector::start(&db);
    let mut cases = hostile::cases();
    cases.push((
        "8 MB board name",
        hostile::long_name("b0a4db0a4db0a4d0", 8_000_000),
        "a line longer than 131072 bytes",
    ));
    cases.push((
        "100 KB board name",
        hostile::long_name("b0a4db0a4db0a4d1", 100_000),
        "a text of 100000 bytes at line 8",
    ));
    for (name, body, want) in cases {
        let t0 = std::time::Instant::now();
        let (s, b) = post(&c.url(), body.as_bytes(), false);
        eprintln!(
            "{name}: {} bytes answered {s} in {:?}",
            body.len(),
            t0.elapsed()
        );
        assert_eq!(s, 400, "{name}: {b}");
        assert!(b.contains(want), "{name}: want {want:?} in {b}");
        assert_nothing_stored(&db);
    }
    let (s, b) = post(
        &c.url(),
        hostile::alias_free("a11a5a11a5a11a51").as_bytes(),
        false,
    );
    assert_eq!(s, 201, "{b}");
    assert_eq!(count(&db, "reports"), 1);
}
