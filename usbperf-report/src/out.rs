//! Owns the process's console output: standard output and standard error written without
//! ever panicking. `println!` panics when the reader has gone (`usbperf-matrix list | head -1`);
//! here a closed pipe silences further output and the command ends with its own exit code, as
//! Unix tools do, while the work itself (a test, a report) is never cut short by it.

use std::borrow::Cow;
use std::fmt::Write as _;
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

/// Writes console text to standard output: whatever a terminal would act on (escape
/// sequences in a device's model string, a report from elsewhere, a collector's answer) is
/// shown escaped ([`crate::untrusted::for_terminal`]), characters outside ASCII are escaped
/// when the locale is not UTF-8 (a board's serial console in the C locale), and every line
/// is fitted to the console's width ([`fit`]). Every line of text the tool prints passes here.
pub fn out(text: &str) {
    let text = for_console(text, utf8_locale());
    let text = fit(&text, width());
    write_to(io::stdout().lock(), &text, &STDOUT_CLOSED);
}

/// Writes data (JSON, YAML, CSV, the one-line result) to standard output as it is, but for
/// what a terminal would act on: a program reads it, so no line is wrapped and no character
/// outside ASCII is touched.
pub fn data(text: &str) {
    let text = crate::untrusted::for_terminal(text);
    write_to(io::stdout().lock(), &text, &STDOUT_CLOSED);
}

/// [`out`] for a command whose output is its result (`show`): a write that fails for any
/// reason but a reader gone (a full disk behind `>`) is returned, so the exit code says so.
pub fn try_out(text: &str) -> io::Result<()> {
    let text = for_console(text, utf8_locale());
    write_checked(&fit(&text, width()))
}

/// [`data`], with a failed write returned as [`try_out`] does.
pub fn try_data(text: &str) -> io::Result<()> {
    write_checked(&crate::untrusted::for_terminal(text))
}

fn write_checked(text: &str) -> io::Result<()> {
    let mut o = io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// Writes `text` and a newline to standard error, escaped and fitted as [`out`] does.
pub fn err(text: &str) {
    let text = for_console(text, utf8_locale());
    let text = fit(&text, width());
    let mut line = String::with_capacity(text.len() + 1);
    line.push_str(&text);
    line.push('\n');
    write_to(io::stderr().lock(), &line, &STDERR_CLOSED);
}

/// The console's width, read once: a run's lines all fit the same console.
fn width() -> usize {
    static WIDTH: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *WIDTH.get_or_init(console_width)
}

/// Whether the locale prints UTF-8 (`LC_ALL`, else `LC_CTYPE`, else `LANG`, as setlocale
/// reads them); unset, it is the C locale, which is ASCII.
fn utf8_locale() -> bool {
    static UTF8: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *UTF8.get_or_init(|| {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        locale_is_utf8(
            var("LC_ALL")
                .or_else(|| var("LC_CTYPE"))
                .or_else(|| var("LANG"))
                .as_deref(),
        )
    })
}

fn locale_is_utf8(locale: Option<&str>) -> bool {
    locale.is_some_and(|l| {
        let l = l.to_ascii_lowercase();
        l.contains("utf-8") || l.contains("utf8")
    })
}

/// `text` escaped for a terminal, without the ` (os error N)` a system error's words carry
/// (the words say it); outside a UTF-8 locale every character beyond ASCII is written
/// `\uXXXX` (a model string's micro sign would be garbage on a C-locale console).
fn for_console(text: &str, utf8: bool) -> Cow<'_, str> {
    let text = match crate::untrusted::for_terminal(text) {
        t if t.contains(" (os error ") => Cow::Owned(crate::words::without_os_codes(&t)),
        t => t,
    };
    if utf8 || text.is_ascii() {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let _ = write!(out, "\\u{:04x}", c as u32);
        }
    }
    Cow::Owned(out)
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

/// `text` with every line longer than `width` broken at spaces; a continuation line starts
/// four columns right of its line's own indentation (a tree's branch, a block's detail), so
/// what belongs together still reads together. Lines that fit are kept as they are.
pub fn fit(text: &str, width: usize) -> Cow<'_, str> {
    if text.split('\n').all(|l| l.chars().count() <= width) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for (n, line) in text.split('\n').enumerate() {
        if n > 0 {
            out.push('\n');
        }
        if line.chars().count() <= width {
            out.push_str(line);
            continue;
        }
        // Trailing spaces of a long line would make a line of indentation alone.
        let line = line.trim_end();
        let lead = line.len() - line.trim_start_matches(' ').len();
        // A deep indentation would leave too little room: at most half the width.
        let indent = " ".repeat((lead + 4).min(width / 2));
        out.push_str(&wrap(line, width, &indent));
    }
    Cow::Owned(out)
}

/// Rows as an aligned table of at most `width` columns: two spaces between columns, one when
/// two do not fit; when one does not fit either, the columns that do not fit go to a second
/// line of each row (and a third, ...), indented two columns and aligned among themselves.
/// `right[c]` aligns column `c` right (numbers); a column whose cells are all empty is left
/// out, and the last column of a line is never padded.
pub fn table(rows: &[Vec<String>], right: &[bool], width: usize) -> String {
    fn cell(r: &[String], c: usize) -> &str {
        r.get(c).map(String::as_str).unwrap_or("")
    }
    // A cell takes the columns it takes once escaped for this console (a model string's
    // micro sign is `\u00b5` in the C locale): the padding counts those.
    let utf8 = utf8_locale();
    let shown = |v: &str| for_console(v, utf8).chars().count();
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| shown(cell(r, c))).max().unwrap_or(0))
        .collect();
    let visible: Vec<usize> = (0..cols).filter(|&c| widths[c] > 0).collect();
    let span = |cs: &[usize], gap: usize| -> usize {
        cs.iter().map(|&c| widths[c]).sum::<usize>() + gap * cs.len().saturating_sub(1)
    };
    // The columns each line of a row holds, and the gap between them.
    let (groups, gap): (Vec<&[usize]>, usize) = if span(&visible, 2) <= width {
        (vec![&visible[..]], 2)
    } else if span(&visible, 1) <= width {
        (vec![&visible[..]], 1)
    } else {
        let mut groups = Vec::new();
        let mut rest = &visible[..];
        let mut room = width;
        while !rest.is_empty() {
            let mut k = 1;
            while k < rest.len() && span(&rest[..k + 1], 2) <= room {
                k += 1;
            }
            groups.push(&rest[..k]);
            rest = &rest[k..];
            room = width.saturating_sub(2);
        }
        (groups, 2)
    };
    let mut out = String::new();
    for r in rows {
        for (g, cs) in groups.iter().enumerate() {
            let mut line = String::from(if g == 0 { "" } else { "  " });
            for (i, &c) in cs.iter().enumerate() {
                let v = cell(r, c);
                let pad = " ".repeat(widths[c].saturating_sub(shown(v)));
                if i > 0 {
                    line.push_str(&" ".repeat(gap));
                }
                if right.get(c).copied().unwrap_or(false) {
                    line.push_str(&pad);
                    line.push_str(v);
                } else {
                    line.push_str(v);
                    line.push_str(&pad);
                }
            }
            let line = line.trim_end();
            if g > 0 && line.is_empty() {
                continue;
            }
            out.push_str(line);
            out.push('\n');
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

    #[test]
    fn a_line_too_long_continues_under_its_own_indentation() {
        let table: &[(&str, usize, &str)] = &[
            ("fits", 80, "fits"),
            ("aaa bbb ccc", 9, "aaa bbb\n    ccc"),
            ("aaa bbb ccc", 7, "aaa bbb\n   ccc"),
            (
                "    |__ Port 1 If 0 uas",
                16,
                "    |__ Port 1\n        If 0 uas",
            ),
            ("one\n  two three four", 12, "one\n  two three\n      four"),
            ("aaa bbb ccc  ", 11, "aaa bbb ccc"),
        ];
        for (text, width, want) in table {
            assert_eq!(fit(text, *width), *want, "{text:?} at {width}");
        }
    }

    #[test]
    fn a_table_narrows_its_gaps_then_folds_its_columns() {
        let rows: Vec<Vec<String>> = [
            ["NAME", "SIZE", "MODEL", "LINK"],
            ["sda", "64", "Stick", "usb 1-1 480M"],
        ]
        .iter()
        .map(|r| r.iter().map(|c| c.to_string()).collect())
        .collect();
        let right = [false, true, false, false];
        // 4 + 4 + 5 + 12 = 25 characters of cells, three gaps.
        assert_eq!(
            table(&rows, &right, 31),
            "NAME  SIZE  MODEL  LINK\nsda     64  Stick  usb 1-1 480M\n"
        );
        assert_eq!(
            table(&rows, &right, 28),
            "NAME SIZE MODEL LINK\nsda    64 Stick usb 1-1 480M\n"
        );
        assert_eq!(
            table(&rows, &right, 20),
            "NAME  SIZE  MODEL\n  LINK\nsda     64  Stick\n  usb 1-1 480M\n"
        );
        for w in [31, 28, 20, 16] {
            for l in table(&rows, &right, w).lines() {
                assert!(l.chars().count() <= w, "{l:?} at {w}");
            }
        }
    }

    #[test]
    fn outside_a_utf8_locale_the_console_sees_only_ascii() {
        for (locale, utf8) in [
            (Some("C.UTF-8"), true),
            (Some("en_US.utf8"), true),
            (Some("C"), false),
            (Some("POSIX"), false),
            (None, false),
        ] {
            assert_eq!(locale_is_utf8(locale), utf8, "{locale:?}");
        }
        assert_eq!(
            for_console("1.2 \u{b5}s \x1b[2J", false),
            "1.2 \\u00b5s \\x1b[2J"
        );
        assert_eq!(for_console("1.2 \u{b5}s", true), "1.2 \u{b5}s");
        assert_eq!(
            for_console(
                "/x: No such file or directory (os error 2): create it",
                true
            ),
            "/x: No such file or directory: create it"
        );
    }
}
