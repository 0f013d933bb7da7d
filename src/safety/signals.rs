//! Owns SIGINT/SIGTERM/SIGHUP: the first asks the run to stop (in-flight I/O drains, test
//! files are removed, the report is written marked incomplete, exit 3); a second one removes
//! the registered test files, writes back the USB power settings the run changed, and exits 3
//! at once.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use nix::sys::signal::{SigSet, SigmaskHow, Signal};

/// What the rest of the run looks at.
#[derive(Debug, Clone)]
pub struct StopFlag {
    pub stop: Arc<AtomicBool>,
    signal: Arc<AtomicI32>,
}

impl Default for StopFlag {
    fn default() -> Self {
        StopFlag::new()
    }
}

impl StopFlag {
    /// A flag no signal is wired to: `install` connects one to SIGINT/SIGTERM/SIGHUP, and
    /// tests raise it with `request`.
    pub fn new() -> StopFlag {
        StopFlag {
            stop: Arc::new(AtomicBool::new(false)),
            signal: Arc::new(AtomicI32::new(0)),
        }
    }
    /// Asks the run to stop, as `signal` would (`None`: no signal, e.g. a test).
    pub fn request(&self, signal: Option<Signal>) {
        if let Some(s) = signal {
            self.signal.store(s as i32, Ordering::SeqCst);
        }
        self.stop.store(true, Ordering::SeqCst);
    }
    pub fn requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
    /// The signal that asked to stop (`SIGTERM`), if any.
    pub fn signal_name(&self) -> Option<String> {
        let n = self.signal.load(Ordering::SeqCst);
        if n == 0 {
            return None;
        }
        Signal::try_from(n).ok().map(|s| s.as_str().to_string())
    }
}

/// Blocks the signals in the calling thread (call it before spawning any thread so every
/// thread inherits the mask) and handles them on a dedicated thread with `sigwait`: no code
/// runs in signal context.
/// `kept` says what the command keeps of an interrupted test, for the message the first
/// signal prints (`the report is written marked incomplete`).
pub fn install(kept: &'static str) -> std::io::Result<StopFlag> {
    let mut set = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(s);
    }
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None)?;
    let flag = StopFlag::new();
    let f = flag.clone();
    std::thread::Builder::new()
        .name("usbperf-signals".into())
        .spawn(move || loop {
            let Ok(sig) = set.wait() else { continue };
            if f.stop.swap(true, Ordering::SeqCst) {
                let n = super::testfile::remove_all_registered();
                // process::exit runs no destructor: what a Drop would undo is undone here.
                let pins = crate::discover::usbpower::restore_all_pinned();
                crate::out::err(&format!(
                    "usbperf-matrix: second {}: removed {n} test file(s), restored {pins} USB \
                     power setting(s), exiting now (exit 3)",
                    sig.as_str()
                ));
                std::process::exit(3);
            }
            f.signal.store(sig as i32, Ordering::SeqCst);
            crate::out::err(&format!(
                "usbperf-matrix: {} received: stopping after in-flight I/O; test files are \
                 removed and {kept} (send again to abort now)",
                sig.as_str()
            ));
        })?;
    Ok(flag)
}
