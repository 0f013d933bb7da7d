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

/// Writes `text` to standard output. Whatever a terminal would act on (escape sequences in a
/// device's model string, a report from elsewhere, a collector's answer) is shown escaped:
/// every line the tool prints passes here ([`crate::untrusted::for_terminal`]).
pub fn out(text: &str) {
    let text = crate::untrusted::for_terminal(text);
    write_to(io::stdout().lock(), &text, &STDOUT_CLOSED);
}

/// Writes `text` and a newline to standard error, escaped as [`out`] does.
pub fn err(text: &str) {
    let text = crate::untrusted::for_terminal(text);
    let mut line = String::with_capacity(text.len() + 1);
    line.push_str(&text);
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

/// The console's width in columns: `COLUMNS` when it holds a number, else the terminal's
/// size (standard output's, else standard error's), else 80 — the serial console of a board's
/// UART, and what a pipe or the journal gets.
pub fn console_width() -> usize {
    let terminal = [libc::STDOUT_FILENO, libc::STDERR_FILENO]
        .into_iter()
        .find_map(|fd| {
            // SAFETY: TIOCGWINSZ fills a winsize the size of the one given; a descriptor that
            // is not a terminal fails with ENOTTY and leaves it untouched.
            let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
            (unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0).then_some(ws.ws_col)
        });
    width_from(std::env::var("COLUMNS").ok().as_deref(), terminal)
}

/// The width `COLUMNS` and the terminal's column count give; below 20 columns a value is
/// taken for a mistake (an unset size reads 0).
fn width_from(columns: Option<&str>, terminal: Option<u16>) -> usize {
    columns
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n >= 20)
        .or_else(|| terminal.map(usize::from).filter(|n| *n >= 20))
        .unwrap_or(80)
}

/// Writes `text` to standard error wrapped to `width` columns, continuation lines indented:
/// the console's form of a progress or error line.
pub fn err_wrapped(text: &str, width: usize) {
    err(&wrap(text, width, "    "));
}

/// `text` broken at spaces into lines of at most `width` characters; every line after the
/// first starts with `indent`. A line that fits is kept as it is (its alignment too); a word
/// longer than the width (a path) keeps a line to itself, unindented.
pub fn wrap(text: &str, width: usize, indent: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for (n, para) in text.split('\n').enumerate() {
        if n > 0 {
            out.push('\n');
        }
        if para.chars().count() <= width {
            out.push_str(para);
            continue;
        }
        let mut len = 0;
        let mut rest = para;
        while !rest.is_empty() {
            let gap = rest.len() - rest.trim_start_matches(' ').len();
            let after = &rest[gap..];
            let word = after.split(' ').next().unwrap_or("");
            let (g, w) = (gap, word.chars().count());
            if len == 0 {
                // The line's own indentation is kept.
                out.push_str(&rest[..gap + word.len()]);
                len = g + w;
            } else if len + g + w > width {
                out.push('\n');
                // A word that does not fit even indented (a long path) starts its line, so
                // it can still be selected and copied whole.
                let ind = if indent.chars().count() + w <= width {
                    indent
                } else {
                    ""
                };
                out.push_str(ind);
                out.push_str(word);
                len = ind.chars().count() + w;
            } else {
                out.push_str(&rest[..gap + word.len()]);
                len += g + w;
            }
            rest = &after[word.len()..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_keeps_every_word_and_the_width() {
        let table: &[(&str, usize, &str, &str)] = &[
            ("short", 80, "  ", "short"),
            ("aaa bbb ccc ddd", 7, "  ", "aaa bbb\n  ccc\n  ddd"),
            ("aaa bbb ccc", 11, "", "aaa bbb ccc"),
            (
                "report /var/lib/usbperf/reports/usbperf-x.yaml",
                20,
                "  ",
                "report\n/var/lib/usbperf/reports/usbperf-x.yaml",
            ),
            ("  indented line", 80, "    ", "  indented line"),
            ("a   b", 80, "", "a   b"),
            (
                "  lead  aligned  words",
                15,
                "    ",
                "  lead  aligned\n    words",
            ),
            ("one\ntwo three", 6, " ", "one\ntwo\n three"),
            ("one\ntwo three", 5, " ", "one\ntwo\nthree"),
        ];
        for (text, width, indent, want) in table {
            assert_eq!(wrap(text, *width, indent), *want, "{text:?} at {width}");
        }
    }

    #[test]
    fn columns_then_the_terminal_then_80() {
        let table: &[(Option<&str>, Option<u16>, usize)] = &[
            (Some("132"), Some(100), 132),
            (Some(" 90\n"), None, 90),
            (Some("narrow"), Some(100), 100),
            (Some("5"), Some(100), 100),
            (None, Some(120), 120),
            (None, Some(0), 80),
            (Some(""), None, 80),
            (None, None, 80),
        ];
        for (columns, terminal, want) in table {
            assert_eq!(
                width_from(*columns, *terminal),
                *want,
                "{columns:?} {terminal:?}"
            );
        }
    }
}
