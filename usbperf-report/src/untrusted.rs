//! Owns how text that came from elsewhere (a USB device's model string, a report from another
//! unit, a collector's answer) is rendered so that it cannot be turned against its reader: on
//! a terminal (no escape sequence, title change, hyperlink or reordering reaches it raw) and
//! in a spreadsheet (no cell is read as a formula).

use std::borrow::Cow;
use std::fmt::Write;

/// Whether a terminal would act on `c` instead of showing it: C0 controls but line feed and
/// tab, DEL, C1 controls (a lone U+009B is CSI on some terminals), the line and paragraph
/// separators, and the bidirectional controls that reorder what follows (Trojan Source).
fn acts(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}'
        | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every character a terminal would act on written as an escape a reader can see
/// (`\x1b`, `\u202e`); line feeds and tabs stay, the text is unchanged when it has none.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !acts(c) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            // Every such character is in the BMP: `\uXXXX` is also the JSON and YAML escape of
            // the same character, so a JSON or YAML document printed here stays valid.
            let _ = write!(out, "\\u{:04x}", c as u32);
        }
    }
    Cow::Owned(out)
}

/// One CSV cell (RFC 4180: quoted when it holds a comma, quote or line break, quotes doubled).
/// A text cell that a spreadsheet would read as a formula (it starts with `=`, `+`, `-`, `@`,
/// tab or CR) is written as text, with a leading `'` as OWASP's CSV injection guidance says;
/// a number (`-5`, `+1.5e3`) stays a number, and a lone `-` stays the table's "none".
pub fn csv_cell(s: &str) -> String {
    // A lone `-` (the table's "none") or `=` is no formula.
    let formula =
        s.len() > 1 && s.starts_with(['=', '+', '-', '@', '\t', '\r']) && s.parse::<f64>().is_err();
    let s: Cow<str> = if formula {
        Cow::Owned(format!("'{s}"))
    } else {
        Cow::Borrowed(s)
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.into_owned()
    }
}

/// The bytes of a file from elsewhere (a config, a token, a report), bounded before they are
/// read: a FIFO, socket or device is refused at once instead of blocking the run forever
/// (the file is opened non-blocking and must be a regular file), and a file over `limit`
/// bytes is refused with the limit it hit.
pub fn read_file(path: &std::path::Path, limit: u64) -> std::io::Result<Vec<u8>> {
    read_file_where(path, limit, |_| Ok(()))
}

/// [`read_file`], refusing the file when `check` refuses the metadata of the file opened (a
/// secret's permission bits, say): what is checked is what is read, never a path looked up
/// twice.
pub fn read_file_where(
    path: &std::path::Path,
    limit: u64,
    check: impl FnOnce(&std::fs::Metadata) -> std::io::Result<()>,
) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let md = f.metadata()?;
    if !md.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a FIFO, socket or device would never end): give a file",
        ));
    }
    check(&md)?;
    if md.len() > limit {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!(
                "{} bytes, more than the {limit} bytes such a file may have",
                md.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(md.len() as usize);
    // A file that grows while it is read stops at the limit all the same.
    f.take(limit + 1).read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("more than the {limit} bytes such a file may have"),
        ));
    }
    Ok(out)
}

/// [`read_file`] as UTF-8 text.
pub fn read_text(path: &std::path::Path, limit: u64) -> std::io::Result<String> {
    read_text_where(path, limit, |_| Ok(()))
}

/// [`read_file_where`] as UTF-8 text.
pub fn read_text_where(
    path: &std::path::Path,
    limit: u64,
    check: impl FnOnce(&std::fs::Metadata) -> std::io::Result<()>,
) -> std::io::Result<String> {
    String::from_utf8(read_file_where(path, limit, check)?).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 text (byte {} is not): save it as UTF-8",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_or_an_oversized_file_is_refused_without_blocking() {
        let dir = std::env::temp_dir().join(format!("usbperf-untrusted-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        nix::unistd::mkfifo(
            &fifo,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .unwrap();
        let e = read_file(&fifo, 1024).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let big = dir.join("big");
        std::fs::write(&big, [b'a'; 2048]).unwrap();
        let e = read_file(&big, 1024).unwrap_err();
        assert!(
            e.to_string().contains("2048 bytes, more than the 1024"),
            "{e}"
        );
        assert_eq!(read_file(&big, 4096).unwrap().len(), 2048);
        std::fs::write(&big, b"caf\xe9").unwrap();
        let e = read_text(&big, 4096).unwrap_err();
        assert!(e.to_string().contains("not UTF-8 text (byte 3"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_terminal_sees_escapes_never_acts_on_them() {
        let table: &[(&str, &str)] = &[
            ("Kingston DataTraveler", "Kingston DataTraveler"),
            ("two\nlines\tand a tab", "two\nlines\tand a tab"),
            ("\x1b[2J\x1b]0;title\x07", "\\x1b[2J\\x1b]0;title\\x07"),
            (
                "\x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\",
                "\\x1b]8;;http://evil/\\x1b\\link\\x1b]8;;\\x1b\\",
            ),
            ("cr\rover", "cr\\x0dover"),
            ("csi\u{9b}31m", "csi\\u009b31m"),
            ("abc\u{202e}fed", "abc\\u202efed"),
            ("\u{2066}x\u{2069}", "\\u2066x\\u2069"),
            ("ls\u{2028}ps\u{2029}", "ls\\u2028ps\\u2029"),
            ("µs ± 3 % × 2", "µs ± 3 % × 2"),
            ("del\u{7f}", "del\\x7f"),
        ];
        for (raw, want) in table {
            assert_eq!(for_terminal(raw), *want, "{raw:?}");
            assert!(!for_terminal(raw).contains('\x1b'));
        }
        assert!(matches!(for_terminal("plain"), Cow::Borrowed(_)));
        // A JSON document printed through it stays the same JSON.
        let doc = serde_json::json!({"model": "a\u{202e}b\u{85}c\u{1b}d\u{2028}"});
        let printed = for_terminal(&doc.to_string()).into_owned();
        assert!(!printed.contains(['\u{202e}', '\u{85}', '\u{1b}', '\u{2028}']));
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&printed).unwrap(),
            doc
        );
    }

    #[test]
    fn a_csv_cell_is_never_a_formula_and_a_number_stays_one() {
        let table: &[(&str, &str)] = &[
            ("sda", "sda"),
            (
                "=HYPERLINK(\"http://x\")",
                "\"'=HYPERLINK(\"\"http://x\"\")\"",
            ),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("+cmd", "'+cmd"),
            ("-cmd|' /C calc'!A0", "'-cmd|' /C calc'!A0"),
            ("\tx", "'\tx"),
            ("\rx", "\"'\rx\""),
            ("-5", "-5"),
            ("+1.5e3", "+1.5e3"),
            ("a,b", "\"a,b\""),
            ("say \"hi\"", "\"say \"\"hi\"\"\""),
            ("", ""),
            ("-", "-"),
        ];
        for (raw, want) in table {
            assert_eq!(csv_cell(raw), *want, "{raw:?}");
        }
    }
}
