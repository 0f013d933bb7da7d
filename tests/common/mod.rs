//! Shared helpers of the integration tests: the built binary, the shared fixtures, and
//! preconditions that fail loudly (a test that cannot run must never pass).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_usbperf-matrix"))
}

/// `../shared/fixtures` beside the repository (CI has it at the same place).
pub fn fixtures() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures");
    assert!(
        p.join("README.md").is_file(),
        "the shared fixtures are missing at {}: the tests read recorded device trees from there",
        p.display()
    );
    p.canonicalize().unwrap()
}

/// Fails (not skips) when a tool the test needs is missing: scripts/test installs them all.
pub fn require_tool(tool: &str, package: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "{tool} is not installed: run scripts/test, or apt-get install {package}"
    );
}

pub fn require_root(why: &str) {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "this test needs root ({why}); run it as root, as scripts/test and CI do"
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
pub fn run(umockdev: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = match umockdev {
        Some(f) => {
            let mut c = Command::new("umockdev-run");
            c.arg("--device").arg(f).arg("--").arg(bin());
            c
        }
        None => Command::new(bin()),
    };
    cmd.args(args).output().expect("could not start the binary")
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
