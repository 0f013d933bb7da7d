//! Shared helpers of the integration tests: the built binary, the shared fixtures, loop
//! devices and mounted filesystems, scratch paths on a real filesystem, one-call workload
//! runs, and preconditions that fail loudly (a test that cannot run must never pass).
#![allow(dead_code)]

use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use usbperf::engine::{self, EngineRequest};
use usbperf::workload::{
    self, BenchResult, RunOptions, WorkloadError, WorkloadKind, WorkloadParams,
};

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_usbperf-matrix"))
}

/// The console width the tests give the binary: wide, so a test that reads the words finds
/// each sentence on one line (the default without a terminal is 80, a serial console's).
/// The tests of the console's width give their own `COLUMNS`.
pub const WIDE: &str = "1000";

/// The binary as a command on a wide console ([`WIDE`]).
pub fn cmd() -> Command {
    let mut c = Command::new(bin());
    c.env("COLUMNS", WIDE);
    c
}

/// The recorded device trees and kernel lines, inside the repository (`tests/fixtures/`, with
/// each source's licence and provenance in its README).
pub fn fixtures() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    assert!(
        p.join("README.md").is_file(),
        "the fixtures are missing at {}: the tests read recorded device trees from there",
        p.display()
    );
    p.canonicalize().unwrap()
}

/// The recording and conversion tools (`scripts/vm/tools/`: materialize.sh, sysdump.sh,
/// dump2umockdev.py, exportdb2umockdev.py, ...), maintained here.
pub fn tools() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/vm/tools")
}

/// Fails (not skips) when a tool the test needs is missing: scripts/test.sh installs them all.
pub fn require_tool(tool: &str, package: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "{tool} is not installed: run scripts/test.sh, or apt-get install {package}"
    );
}

/// Whether the running test must be skipped because it needs root (loop devices, mounts,
/// the kernel's log) and this run is not root. The skip is said on the terminal, past the
/// harness's capture, with the test's name and why, so `cargo test` as a normal user lists
/// every test it did not run; `scripts/test.sh` (run as root, as CI does) fails when any test
/// says it was skipped. Use it through [`needs_root!`].
pub fn skip_unless_root(why: &str) -> bool {
    if is_root() {
        return false;
    }
    // libtest runs each test on a thread named after it.
    let name = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let line =
        format!("SKIPPED {name}: needs root ({why}); run it as root, as scripts/test.sh does\n");
    // SAFETY: write(2) of a live buffer of that length to standard error, which the test
    // harness does not capture (it captures print! and eprint! only).
    unsafe { libc::write(libc::STDERR_FILENO, line.as_ptr().cast(), line.len()) };
    true
}

/// Returns from the test, said as skipped, when it needs root and the run is not root.
#[macro_export]
macro_rules! needs_root {
    ($why:expr) => {
        if common::skip_unless_root($why) {
            return;
        }
    };
}

pub fn require_root(why: &str) {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "this test needs root ({why}); run it as root, as scripts/test.sh and CI do"
    );
}

/// A fresh temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let tmpl = std::env::temp_dir().join(format!("usbperf-test-{tag}-XXXXXX"));
        let p = nix::unistd::mkdtemp(&tmpl).expect("mkdtemp");
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

/// Runs the binary with `args`, optionally under `umockdev-run --device FILE`.
pub fn run_bin(umockdev: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = match umockdev {
        Some(f) => {
            let mut c = Command::new("umockdev-run");
            c.arg("--device").arg(f).arg("--").arg(bin());
            c
        }
        None => Command::new(bin()),
    };
    cmd.env("COLUMNS", WIDE)
        .args(args)
        .output()
        .expect("could not start the binary")
}

pub fn stdout_json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(1),
        "exit {:?}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "output is not JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A loop device over a sparse file, detached on drop.
pub struct Loop {
    pub dev: String,
    pub dir: TempDir,
    // Last: released after the device is detached.
    _numbers: NumberHold,
}

impl Loop {
    pub fn new(size_bytes: u64) -> Loop {
        Loop::with_hold(size_bytes, NumberHold::shared())
    }

    /// A loop device the test may detach while a run still tests it by name: no other test
    /// of this binary holds a loop device meanwhile (see [`NumberHold`]).
    pub fn new_alone(size_bytes: u64) -> Loop {
        Loop::with_hold(size_bytes, NumberHold::alone())
    }

    fn with_hold(size_bytes: u64, hold: NumberHold) -> Loop {
        require_root("losetup needs root");
        require_tool("losetup", "mount");
        let dir = TempDir::new("loop");
        let img = dir.path().join("disk.img");
        let f = std::fs::File::create(&img).unwrap();
        f.set_len(size_bytes).unwrap();
        Loop {
            dev: attach_loop(&img),
            dir,
            _numbers: hold,
        }
    }
    pub fn name(&self) -> &str {
        self.dev.trim_start_matches("/dev/")
    }
}

/// The kernel gives a freed loop number to the next `losetup --find` at once. A test that
/// detaches its device while its run still tests `/dev/loopN` by name would see another
/// test's new device take that name, and both tests would measure the wrong device. So every
/// loop device of a test holds the numbers shared, and one that is detached mid-run holds
/// them alone: it waits until no other test of its binary holds a loop device, and others
/// wait for it. A shared hold never waits for a waiting alone one, so a test holding two
/// devices cannot deadlock.
pub struct NumberHold {
    alone: bool,
}

struct Numbers {
    shared: usize,
    alone: bool,
}

static NUMBERS: std::sync::Mutex<Numbers> = std::sync::Mutex::new(Numbers {
    shared: 0,
    alone: false,
});
static NUMBERS_FREED: std::sync::Condvar = std::sync::Condvar::new();

impl NumberHold {
    fn take(alone: bool) -> NumberHold {
        let poisoned = std::sync::PoisonError::into_inner;
        let mut n = NUMBERS.lock().unwrap_or_else(poisoned);
        while n.alone || (alone && n.shared > 0) {
            n = NUMBERS_FREED.wait(n).unwrap_or_else(poisoned);
        }
        if alone {
            n.alone = true;
        } else {
            n.shared += 1;
        }
        NumberHold { alone }
    }

    pub fn shared() -> NumberHold {
        NumberHold::take(false)
    }

    pub fn alone() -> NumberHold {
        NumberHold::take(true)
    }
}

impl Drop for NumberHold {
    fn drop(&mut self) {
        let mut n = NUMBERS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.alone {
            n.alone = false;
        } else {
            n.shared -= 1;
        }
        NUMBERS_FREED.notify_all();
    }
}

/// A loop device over `file` (`/dev/loopN`); the caller detaches it.
pub fn attach_loop(file: &Path) -> String {
    let out = Command::new("losetup")
        .args(["--find", "--show"])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "losetup over {} failed (is the loop module available?): {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

/// A loop device with a fresh filesystem mounted on a temporary directory; unmounted and
/// detached on drop.
pub struct Mounted {
    pub lo: Loop,
    pub mnt: TempDir,
}

impl Mounted {
    pub fn new(size_bytes: u64, fstype: &str) -> Mounted {
        let lo = Loop::new(size_bytes);
        let mkfs = format!("mkfs.{fstype}");
        let package = match fstype {
            "vfat" => "dosfstools",
            "xfs" => "xfsprogs",
            _ => "e2fsprogs",
        };
        require_tool(&mkfs, package);
        let mut cmd = Command::new(&mkfs);
        if fstype.starts_with("ext") || fstype == "xfs" {
            cmd.arg("-q");
        }
        let out = cmd.arg(&lo.dev).output().unwrap();
        assert!(
            out.status.success(),
            "{mkfs}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mnt = TempDir::new("mnt");
        let out = Command::new("mount")
            .arg(&lo.dev)
            .arg(mnt.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Mounted { lo, mnt }
    }
    pub fn path(&self) -> &Path {
        self.mnt.path()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // A test may have unmounted it already; a busy or damaged filesystem is detached lazily
        // so no mount outlives the test (it would show up in every later inventory).
        let out = Command::new("umount").arg(self.mnt.path()).output();
        let mounted = std::fs::read_to_string("/proc/self/mounts")
            .map(|m| m.contains(&format!(" {} ", self.mnt.path().display())))
            .unwrap_or(false);
        if out.is_err() || mounted {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.mnt.path())
                .status();
        }
    }
}

/// Files left in `dir` whose name marks them as usbperf test files.
pub fn test_files_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .map(|n| n.to_string_lossy().starts_with(".usbperf-testfile-"))
                        .unwrap_or(false)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Validates reports against the schema of their version (scripts/ci/validate-report.py:
/// docs/report.schema.json, or docs/report.v1.schema.json for schema 1).
pub fn validate_reports(paths: &[PathBuf]) {
    require_tool("python3", "python3");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/ci/validate-report.py");
    let out = Command::new(script).args(paths).output().unwrap();
    assert!(
        out.status.success(),
        "report invalid against its schema (docs/report.schema.json or report.v1.schema.json):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A loop device over a write-sealed memfd: every write fails with EPERM in the backing
/// file, loop completes the request with an error and the block layer logs
/// "I/O error, dev loopN, sector ..." (device-mapper's `error` target would do too, but
/// this kernel may lack device-mapper; loop is always there where the live tests run).
pub struct SealedLoop {
    pub dev: String,
    _memfd: std::os::fd::OwnedFd,
    _numbers: NumberHold,
}

impl SealedLoop {
    pub fn new() -> SealedLoop {
        require_tool("losetup", "mount");
        let numbers = NumberHold::shared();
        let name = std::ffi::CString::new("usbperf-events-ioerr").unwrap();
        // SAFETY: a NUL-terminated name and flags; the fd is owned right after.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_ALLOW_SEALING) };
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: fd is a fresh, valid descriptor owned by nobody else.
        let memfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // SAFETY: valid fd; length and seal flags are plain integers.
        unsafe {
            assert_eq!(libc::ftruncate(fd, 1 << 20), 0, "ftruncate");
            let seals = libc::F_SEAL_WRITE | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
            assert_eq!(
                libc::fcntl(fd, libc::F_ADD_SEALS, seals),
                0,
                "F_ADD_SEALS: {}",
                std::io::Error::last_os_error()
            );
        }
        let backing = format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            std::os::fd::AsRawFd::as_raw_fd(&memfd)
        );
        let out = Command::new("losetup")
            .args(["--find", "--show", &backing])
            .output()
            .expect("run losetup");
        assert!(
            out.status.success(),
            "precondition: losetup failed (loop driver available?): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SealedLoop {
            dev: String::from_utf8(out.stdout).unwrap().trim().to_string(),
            _memfd: memfd,
            _numbers: numbers,
        }
    }

    pub fn name(&self) -> &str {
        self.dev.trim_start_matches("/dev/")
    }
}

impl Drop for SealedLoop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

// ---- workload helpers ----

/// A path in a scratch directory on the disk under test, deleted (with the directory) on drop.
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(name: &str) -> Self {
        // CARGO_TARGET_TMPDIR is on the build disk (a real file system), unlike /tmp on tmpfs.
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let dir = base.join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch { dir }
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn params(kind: WorkloadKind, target: &Path) -> WorkloadParams {
    WorkloadParams::defaults(kind, target.to_path_buf())
}

pub fn run(params: &WorkloadParams, engine: EngineRequest) -> Result<BenchResult, WorkloadError> {
    let selected = engine::select(engine).expect("engine selection");
    workload::run(params, &selected, &RunOptions::default())
}

/// The engines this build has: `uring` only with the `uring` feature (armv7 builds lack it).
pub fn engines() -> Vec<EngineRequest> {
    let mut engines = vec![EngineRequest::Sync];
    if cfg!(feature = "uring") {
        engines.insert(0, EngineRequest::Uring);
    }
    engines
}

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// xorshift64*: the deterministic stream of the fuzz tests, no crate needed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A factory run's own working directory: config, report directory and lock file, so runs in
/// parallel tests never meet.
pub struct RunDir {
    pub dir: TempDir,
}

impl RunDir {
    pub fn new() -> RunDir {
        RunDir {
            dir: TempDir::new("run"),
        }
    }
    pub fn config(&self, yaml: &str) -> PathBuf {
        let p = self.dir.path().join("cfg.yaml");
        std::fs::write(&p, yaml).unwrap();
        p
    }
    pub fn reports(&self) -> PathBuf {
        self.dir.path().join("reports")
    }
    /// `run` with this directory's report dir (or `report_dir`) and lock, and `cfg`.
    pub fn args_in(&self, report_dir: &Path, cfg: Option<&Path>) -> Vec<String> {
        let mut a = vec![
            "run".to_string(),
            "--report-dir".into(),
            report_dir.display().to_string(),
            "--lock-file".into(),
            self.dir.path().join("lock").display().to_string(),
        ];
        if let Some(c) = cfg {
            a.push("--config".into());
            a.push(c.display().to_string());
        }
        a
    }
    pub fn args(&self, cfg: Option<&Path>) -> Vec<String> {
        self.args_in(&self.reports(), cfg)
    }
    pub fn run_in(&self, report_dir: &Path, cfg: Option<&Path>, extra: &[&str]) -> Output {
        let mut a = self.args_in(report_dir, cfg);
        a.extend(extra.iter().map(|s| s.to_string()));
        cmd().args(&a).output().unwrap()
    }
    pub fn run(&self, cfg: Option<&Path>, extra: &[&str]) -> Output {
        self.run_in(&self.reports(), cfg, extra)
    }
    /// The report files written so far (temporaries and signature files left out), sorted.
    pub fn report_files(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.reports())
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        v.retain(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            !name.starts_with('.') && !name.ends_with(".sig")
        });
        v.sort();
        v
    }
    /// The single report the run wrote, parsed (YAML or JSON by its extension).
    pub fn report(&self) -> (PathBuf, serde_json::Value) {
        let files = self.report_files();
        assert_eq!(files.len(), 1, "exactly one report: {files:?}");
        let text = std::fs::read_to_string(&files[0]).unwrap();
        let v: serde_json::Value = if files[0].extension().unwrap() == "json" {
            serde_json::from_str(&text).unwrap()
        } else {
            serde_norway::from_str(&text).unwrap()
        };
        (files[0].clone(), v)
    }
}

/// How long a long fuzz runs: `USBPERF_FUZZ_SECS`, 60 s by default.
pub fn fuzz_secs() -> u64 {
    std::env::var("USBPERF_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60)
}

/// A long fuzz's seed: `USBPERF_FUZZ_SEED` (the seed a failed run printed, to replay it), else
/// the clock.
pub fn fuzz_seed() -> u64 {
    std::env::var("USBPERF_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// The device named `name` of a report read as JSON data.
pub fn device_in<'v>(report: &'v serde_json::Value, name: &str) -> &'v serde_json::Value {
    report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in report"))
}
