//! Owns the process's console output: standard output and standard error written without
//! ever panicking. `println!` panics when the reader has gone (`usbperf-matrix list | head -1`);
//! here a closed pipe silences further output and the command ends with its own exit code, as
//! Unix tools do, while the work itself (a test, a report) is never cut short by it.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);

fn write_to(mut w: impl Write, text: &str, closed: &AtomicBool) {
    if closed.load(Ordering::Relaxed) {
        return;
    }
    if w.write_all(text.as_bytes())
        .and_then(|()| w.flush())
        .is_err()
    {
        // EPIPE: the reader went away. Any other error (EIO on a dead console, ENOSPC on a
        // redirected file) is no reason to stop a factory run either; stop writing there.
        closed.store(true, Ordering::Relaxed);
    }
}

/// Writes `text` to standard output as is.
pub fn out(text: &str) {
    write_to(io::stdout().lock(), text, &STDOUT_CLOSED);
}

/// Writes `text` and a newline to standard error.
pub fn err(text: &str) {
    let mut line = String::with_capacity(text.len() + 1);
    line.push_str(text);
    line.push('\n');
    write_to(io::stderr().lock(), &line, &STDERR_CLOSED);
}

/// `print!` that never panics.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::out(&format!($($arg)*)) };
}

/// `println!` that never panics.
#[macro_export]
macro_rules! outln {
    () => { $crate::out::out("\n") };
    ($($arg:tt)*) => { $crate::out::out(&format!("{}\n", format_args!($($arg)*))) };
}

/// `eprintln!` that never panics.
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => { $crate::out::err(&format!($($arg)*)) };
}
