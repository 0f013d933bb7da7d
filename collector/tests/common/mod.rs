//! Shared parts of the collector's tests, all real: the collector binary on 127.0.0.1, a
//! PostgreSQL server of the Debian packages started in a temporary directory as the
//! `postgres` user (the server refuses root), `usbperf-matrix upload` processes, and reports
//! the unit crate's fleet generator writes (tests/common/fleet_gen.rs, through the report's
//! own types). A missing part fails the test with what to install; nothing
//! passes silently.
#![allow(dead_code)]

#[path = "../../../tests/common/fleet_gen.rs"]
pub mod fleet_gen;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const TOKEN: &str = "line3-0123456789abcdef0123456789";

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `usbperf-matrix`, built from the repository root (scripts/ci/test-collect.sh builds it and sets
/// USBPERF_MATRIX_BIN; else the debug binary of the same target directory).
pub fn matrix_bin() -> PathBuf {
    let p = match std::env::var_os("USBPERF_MATRIX_BIN") {
        Some(p) => PathBuf::from(p),
        None => {
            // target/debug/deps/real-… → target/debug/usbperf-matrix
            let exe = std::env::current_exe().unwrap();
            exe.parent()
                .unwrap()
                .parent()
                .unwrap()
                .join("usbperf-matrix")
        }
    };
    assert!(
        p.is_file(),
        "usbperf-matrix is not built at {}: run scripts/ci/test-collect.sh (or cargo build at the \
         repository root and set USBPERF_MATRIX_BIN)",
        p.display()
    );
    p
}

pub fn collect_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_usbperf-collect"))
}

pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the effective user.
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// A temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("usbperf-collect-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `n` distinct reports (with report ids) from the fleet generator.
pub fn fleet(n: usize, seed: u32, format: &str, dir: &Path) -> Vec<PathBuf> {
    fleet_with(n, seed, format, dir, &[])
}

/// As [`fleet`], with more of fleet-gen's options (`--schema 2`, `--start`, ...).
pub fn fleet_with(n: usize, seed: u32, format: &str, dir: &Path, extra: &[&str]) -> Vec<PathBuf> {
    let mut args = vec!["--units".to_string(), n.to_string(), "--seed".into()];
    args.extend([
        seed.to_string(),
        "--format".into(),
        format.into(),
        "--report-ids".into(),
    ]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let v = fleet_gen(&args, dir);
    assert_eq!(v.len(), n, "fleet-gen wrote {} reports, not {n}", v.len());
    v
}

/// The reports the unit crate's fleet generator (tests/common/fleet_gen.rs) writes into `dir`
/// with `args`, sorted.
pub fn fleet_gen(args: &[String], dir: &Path) -> Vec<PathBuf> {
    let mut args = args.to_vec();
    args.extend(["--out".to_string(), dir.display().to_string()]);
    fleet_gen::generate_args(&args).files
}

/// The collector process.
pub struct Collector {
    child: Option<Child>,
    pub port: u16,
    pub db: String,
    pub tokens: PathBuf,
    pub dir: TempDir,
    /// More flags (`--page-listen ADDR`).
    pub extra: Vec<String>,
}

impl Collector {
    pub fn start(db: &str) -> Collector {
        Collector::start_on(db, free_port())
    }

    /// With more flags; `--page-listen` makes it wait for the page's line too.
    pub fn start_with(db: &str, extra: &[&str]) -> Collector {
        Collector::start_full(db, free_port(), extra)
    }

    pub fn start_on(db: &str, port: u16) -> Collector {
        Collector::start_full(db, port, &[])
    }

    fn start_full(db: &str, port: u16, extra: &[&str]) -> Collector {
        let dir = TempDir::new("collector");
        let tokens = dir.path().join("tokens");
        write_token_file(&tokens, &format!("# line 3\n{TOKEN}\n"));
        let mut c = Collector {
            child: None,
            port,
            db: db.to_string(),
            tokens,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        c.spawn();
        c
    }

    fn spawn(&mut self) {
        // Appended: a restarted collector's log follows the log of the one it replaced.
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.dir.path().join("stderr"))
            .unwrap();
        let mut child = Command::new(collect_bin())
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .args(["--db", &self.db, "--token-file"])
            .arg(&self.tokens)
            .args(&self.extra)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        // It prints its address once it listens; EOF means it exited.
        // Every line it prints is read before the pipe is dropped (a later print would fail).
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let lines = 1 + usize::from(self.extra.iter().any(|a| a == "--page-listen"));
        for _ in 0..lines {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            assert!(
                line.contains("listening on") || line.contains("fleet page on"),
                "the collector did not start: {}",
                self.stderr()
            );
        }
        self.child = Some(child);
    }

    /// What the collector said on standard error besides its access log: empty when
    /// nothing went wrong.
    pub fn stderr(&self) -> String {
        self.stderr_all()
            .lines()
            .filter(|l| !l.starts_with("access: "))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    /// Its access log: one line per request.
    pub fn access_log(&self) -> Vec<String> {
        self.stderr_all()
            .lines()
            .filter(|l| l.starts_with("access: "))
            .map(str::to_string)
            .collect()
    }

    pub fn stderr_all(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// SIGKILL: no shutdown path runs.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// SIGTERM: the graceful stop systemd sends; the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        c.wait().unwrap()
    }

    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/api/v1/reports", self.port)
    }

    /// The collector's peak resident memory (VmHWM), bytes.
    pub fn peak_rss_bytes(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let kb: u64 = s
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap();
        kb * 1024
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The report ids stored in the database `db` (a --db URL), read with the database's own
/// client, beside the collector.
pub fn stored_ids(db: &str) -> Vec<String> {
    let mut v: Vec<String> = if let Some(path) = db.strip_prefix("sqlite:") {
        let c = rusqlite::Connection::open(path).unwrap();
        let mut st = c.prepare("SELECT report_id FROM reports").unwrap();
        let rows = st.query_map([], |r| r.get::<_, String>(0)).unwrap();
        rows.map(Result::unwrap).collect()
    } else {
        let mut c = postgres::Client::connect(db, postgres::NoTls).unwrap();
        c.query("SELECT report_id FROM reports", &[])
            .unwrap()
            .into_iter()
            .map(|r| r.get::<_, String>(0))
            .collect()
    };
    v.sort();
    v
}

/// One count of a table.
pub fn count(db: &str, table: &str) -> u64 {
    let q = format!("SELECT count(*) FROM {table}");
    if let Some(path) = db.strip_prefix("sqlite:") {
        let c = rusqlite::Connection::open(path).unwrap();
        c.query_row(&q, [], |r| r.get::<_, i64>(0)).unwrap() as u64
    } else {
        let mut c = postgres::Client::connect(db, postgres::NoTls).unwrap();
        c.query_one(q.as_str(), &[]).unwrap().get::<_, i64>(0) as u64
    }
}

/// Runs `sql` (statements without results) on the database `db`, beside the collector.
pub fn execute(db: &str, sql: &str) {
    if let Some(path) = db.strip_prefix("sqlite:") {
        rusqlite::Connection::open(path)
            .unwrap()
            .execute_batch(sql)
            .unwrap();
    } else {
        let mut c = postgres::Client::connect(db, postgres::NoTls).unwrap();
        c.batch_execute(sql).unwrap();
    }
}

/// A private PostgreSQL server: initdb in a temporary directory, listening on 127.0.0.1 and
/// a socket in that directory, run as the `postgres` user when the tests run as root.
pub struct Pg {
    child: Option<Child>,
    pub port: u16,
    bin: PathBuf,
    dir: TempDir,
}

fn pg_bindir() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| rd.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    dirs.retain(|d| d.join("initdb").is_file());
    // Newest major version last.
    dirs.sort_by_key(|d| {
        d.parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
    });
    dirs.pop().expect(
        "PostgreSQL is not installed: run scripts/ci/test-collect.sh, or apt-get install postgresql",
    )
}

/// uid and gid of the `postgres` user the Debian package creates.
fn postgres_user() -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let l = passwd
        .lines()
        .find(|l| l.starts_with("postgres:"))
        .expect("no postgres user: apt-get install postgresql creates it");
    let f: Vec<&str> = l.split(':').collect();
    (f[2].parse().unwrap(), f[3].parse().unwrap())
}

fn as_postgres_user(c: &mut Command) {
    if is_root() {
        let (uid, gid) = postgres_user();
        c.uid(uid).gid(gid);
    }
}

impl Pg {
    pub fn start() -> Pg {
        let bin = pg_bindir();
        let dir = TempDir::new("pg");
        if is_root() {
            let (uid, gid) = postgres_user();
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let mut init = Command::new(bin.join("initdb"));
        init.arg("-D")
            .arg(dir.path().join("data"))
            .args(["-A", "trust", "-U", "usbperf", "-E", "UTF8", "--locale=C"])
            .current_dir(dir.path())
            .env("LC_ALL", "C");
        as_postgres_user(&mut init);
        let out = init.output().unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut pg = Pg {
            child: None,
            port: free_port(),
            bin,
            dir,
        };
        pg.resume();
        pg
    }

    /// Starts the server (again) on its data directory and port; returns once it accepts.
    pub fn resume(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("log"))
            .unwrap();
        let mut server = Command::new(self.bin.join("postgres"));
        server
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(self.dir.path())
            // Durability as a production server has it: fsync and synchronous commit on.
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=on"])
            .args(["-c", "synchronous_commit=on", "-c", "max_connections=200"])
            .current_dir(self.dir.path())
            .stdout(Stdio::null())
            .stderr(log);
        as_postgres_user(&mut server);
        self.child = Some(server.spawn().unwrap());
        let t0 = Instant::now();
        loop {
            if postgres::Client::connect(&self.url(), postgres::NoTls).is_ok() {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "PostgreSQL did not start: {}",
                std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A streaming read replica of this server (`pg_basebackup -R`, a hot standby) on a
    /// port of its own.
    pub fn replica(&self) -> Pg {
        let dir = TempDir::new("pg-replica");
        if is_root() {
            let (uid, gid) = postgres_user();
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let mut base = Command::new(self.bin.join("pg_basebackup"));
        base.arg("-D")
            .arg(dir.path().join("data"))
            .args(["-R", "-X", "stream", "-h", "127.0.0.1", "-U", "usbperf"])
            .args(["-p", &self.port.to_string()])
            .current_dir(dir.path());
        as_postgres_user(&mut base);
        let out = base.output().unwrap();
        assert!(
            out.status.success(),
            "pg_basebackup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut pg = Pg {
            child: None,
            port: free_port(),
            bin: self.bin.clone(),
            dir,
        };
        pg.resume();
        pg
    }

    /// Fast shutdown (SIGINT), waited for: the database is down.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-INT", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }

    pub fn url(&self) -> String {
        format!("postgres://usbperf@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A POST to `url` with this collector's token and the body's content type, as a unit sends
/// it (the caller sends the body).
pub fn authorized_post(url: &str, json: bool, timeout: std::time::Duration) -> ureq::Request {
    let ctype = if json {
        "application/json"
    } else {
        "application/yaml"
    };
    ureq::AgentBuilder::new()
        .timeout(timeout)
        .build()
        .post(url)
        .set("Authorization", &format!("Bearer {TOKEN}"))
        .set("Content-Type", ctype)
}

/// A token file as docs/collector.md installs it: only its owner may read it (both sides refuse one
/// that others may read).
pub fn write_token_file(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// `usbperf-matrix upload` with this collector's URL and a token file.
pub fn upload_cmd(url: &str, token_file: &Path, spool: &Path) -> Command {
    let mut c = Command::new(matrix_bin());
    // A wide console: the tests read the unit's sentences whole (80 columns, the default
    // without a terminal, would wrap them).
    c.env("COLUMNS", "1000");
    c.args(["upload", "--url", url, "--token-file"])
        .arg(token_file)
        .arg("--spool")
        .arg(spool);
    c
}
