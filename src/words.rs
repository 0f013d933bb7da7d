//! Owns the wording of serde's decoding errors for people: `invalid type: string "fast",
//! expected f64` names a Rust type the operator never wrote; the one rewrite here says what
//! the key takes instead ("a number of MiB/s, such as 25"), for configs and reports alike.
//! And counts with their noun in the right number ("1 unit").

pub use usbperf_report::words::{json_error, serde_message};

/// An error and its causes as one line, each said once: a cause whose words the line already
/// holds (a library error that quotes its own source) is left out, and the kernel's `(os
/// error N)` is dropped (its words are said; the number helps no operator).
pub fn said_once<'a>(
    chain: impl IntoIterator<Item = &'a (dyn std::error::Error + 'static)>,
) -> String {
    let mut line = String::new();
    for e in chain {
        let part = without_os_codes(&e.to_string());
        if part.is_empty() || line.contains(&part) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&part);
    }
    line
}

/// `text` without the ` (os error N)` std appends to a system error's words.
pub fn without_os_codes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(" (os error ") {
        out.push_str(&rest[..at]);
        let tail = &rest[at + " (os error ".len()..];
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && tail[digits..].starts_with(')') {
            rest = &tail[digits + 1..];
        } else {
            out.push_str(" (os error ");
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// `1 unit`, `2 units`: a count with its noun in the right number.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::{count, said_once, serde_message, without_os_codes};

    /// A cause already quoted by the error above it is not said again, and `(os error N)`
    /// is dropped: the line an operator read was "Operation not permitted (os error 1);
    /// check free space and permissions: Operation not permitted (os error 1)".
    #[test]
    fn an_error_chain_says_each_cause_once() {
        let io = std::io::Error::from_raw_os_error(1);
        let e = anyhow::Error::new(io)
            .context(
                "cannot create the test file /x: Operation not permitted (os error 1); check \
                 free space and permissions",
            )
            .context("bench on /dev/sdx");
        assert_eq!(
            said_once(e.chain()),
            "bench on /dev/sdx: cannot create the test file /x: Operation not permitted; check \
             free space and permissions"
        );
        for (text, want) in [
            ("No such file (os error 2)", "No such file"),
            ("a (os error 2) b (os error 13)", "a b"),
            ("kept (os error x)", "kept (os error x)"),
            ("none", "none"),
        ] {
            assert_eq!(without_os_codes(text), want);
        }
    }

    #[test]
    fn counts_agree_with_their_noun() {
        assert_eq!(count(1, "unit", "units"), "1 unit");
        assert_eq!(count(0, "unit", "units"), "0 units");
        assert_eq!(count(2, "device test", "device tests"), "2 device tests");
    }

    #[test]
    fn rust_type_names_become_what_to_write() {
        let table = [
            (
                "thresholds[0].min_mib_per_s: invalid type: string \"fast\", expected f64",
                "thresholds[0].min_mib_per_s: \"fast\" is not a number: give a number of MiB/s, such as 25",
            ),
            (
                "invalid type: string \"x\", expected f64 at line 1 column 9",
                "\"x\" is not a number: give a number, such as 25 (line 1, character 9)",
            ),
            (
                "invalid type: sequence, expected struct ConfigFile",
                "a list is not a config: give a mapping of keys",
            ),
            (
                "devices[0].select.class: invalid type: sequence, expected a YAML tag starting with '!'",
                "devices[0].select.class: a list is not one of the key's names",
            ),
            (
                "required: invalid type: string \"maybe\", expected a boolean",
                "required: \"maybe\" is not true or false",
            ),
            (
                "tests[0].qd: invalid type: boolean `true`, expected u32",
                "tests[0].qd: true is not a whole number: give a whole number, such as 4",
            ),
            // Already in words: kept.
            ("unknown field `sizee`", "unknown field `sizee`"),
            (
                "size: invalid type: sequence, expected a size such as 64M",
                "size: a list is not a size such as 64M",
            ),
        ];
        for (msg, want) in table {
            let got = serde_message(msg);
            assert!(got.starts_with(want), "{msg}: got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn a_json_error_says_where_and_what_in_words() {
        let err = |text: &str| {
            super::json_error(
                &serde_json::from_str::<std::collections::BTreeMap<String, u64>>(text).unwrap_err(),
            )
        };
        let table = [
            ("format: x\n", "line 1, character 2: not valid JSON"),
            (
                "{\"run_id\": 99999999999999999999999}",
                "line 1, character 34: 1e+23 is not a whole number",
            ),
            ("{\"run_id\": ", "line 1, character 11: the JSON ends early"),
        ];
        for (text, want) in table {
            let got = err(text);
            assert!(got.starts_with(want), "{text:?}: {got}");
            for leak in ["expected", "u64", "ident", "column"] {
                assert!(!got.contains(leak), "{text:?}: {got}");
            }
        }
    }
}
