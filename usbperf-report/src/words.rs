//! Owns the wording of serde's decoding errors for people: `invalid type: string "fast",
//! expected f64` names a Rust type the operator never wrote; the one rewrite here says what
//! the key takes instead ("a number of MiB/s, such as 25"), for configs and reports alike.
//! And counts with their noun in the right number ("1 unit"), an error chain said once. The
//! unit's crate re-exports it (`usbperf::words`).

/// What a key takes, in words, for the keys whose unit the type alone does not say: a limit
/// of the metric table or a rate it names, or a duration's seconds.
fn key_hint(key: &str) -> Option<&'static str> {
    if key == "seconds" {
        return Some("a number of seconds, such as 1.5");
    }
    crate::metric::by_limit_key(key)
        .or_else(|| crate::metric::by_id(key).filter(|m| m.is_rate()))
        .and_then(|m| m.limit)
        .map(|l| l.hint)
}

/// Rewrites serde's `invalid type: FOUND, expected TYPE` (and `invalid value`) in `msg` when
/// TYPE is a Rust type name; the key path before it (`thresholds[0].min_mib_per_s: `) and any
/// location after it are kept. Other messages are returned as they are: ours already say what
/// to write.
pub fn serde_message(msg: &str) -> String {
    let Some((start, marker)) = ["invalid type: ", "invalid value: "]
        .iter()
        .filter_map(|m| msg.find(m).map(|i| (i, *m)))
        .min()
    else {
        return msg.to_string();
    };
    let body = &msg[start + marker.len()..];
    let Some((found, rest)) = body.split_once(", expected ") else {
        return msg.to_string();
    };
    // serde_json and serde_norway append the position (`at line 4 column 3`): kept where it
    // was, in words.
    let (expected, tail) = match rest.find(" at line ") {
        Some(i) => (&rest[..i], format!(" ({})", position_words(&rest[i + 4..]))),
        None => (rest, String::new()),
    };
    let prefix = &msg[..start];
    let key = prefix
        .trim_end_matches(": ")
        .rsplit('.')
        .next()
        .unwrap_or("")
        .split('[')
        .next()
        .unwrap_or("");
    let found = found_words(found);
    match expected_words(expected, key) {
        Some((what, give)) if give == what => format!("{prefix}{found} is not {what}{tail}"),
        Some((what, give)) => format!("{prefix}{found} is not {what}: give {give}{tail}"),
        // One of our visitors' own expectations ("a size such as 64M"), already in words.
        None => format!("{prefix}{found} is not {expected}{tail}"),
    }
}

/// A JSON document's error in words: where (line and character) and what, never the
/// parser's grammar (`expected ident`, `expected u64 at line 1 column 79`).
pub fn json_error(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let at = format!("line {}, character {}", e.line(), e.column());
    let full = e.to_string();
    let msg = full
        .rsplit_once(" at line ")
        .map_or(full.as_str(), |(m, _)| m);
    match e.classify() {
        Category::Syntax => format!("{at}: not valid JSON"),
        Category::Eof => format!("{at}: the JSON ends early (a truncated file)"),
        Category::Io => msg.to_string(),
        Category::Data => format!("{at}: {}", serde_message(msg)),
    }
}

/// `line 4 column 3` as `line 4, character 3`; anything else as it is.
fn position_words(pos: &str) -> String {
    match pos.split_once(" column ") {
        Some((line, column)) => format!("{line}, character {column}"),
        None => pos.to_string(),
    }
}

/// What serde's `Unexpected` names, as it was written.
fn found_words(found: &str) -> String {
    for p in [
        "string ",
        "integer ",
        "floating point ",
        "boolean ",
        "char ",
    ] {
        if let Some(v) = found.strip_prefix(p) {
            return v.trim_matches('`').to_string();
        }
    }
    match found {
        "sequence" => "a list".into(),
        "map" => "a mapping".into(),
        "unit value" => "an empty value".into(),
        other => other.to_string(),
    }
}

/// (what the value is not, what to give) for serde's expectation `expected`, or None when it
/// is already in words.
fn expected_words(expected: &str, key: &str) -> Option<(&'static str, String)> {
    let hint = key_hint(key);
    let number = |generic: &str| hint.map_or_else(|| generic.to_string(), |h| h.to_string());
    Some(match expected {
        "f64" | "f32" => ("a number", number("a number, such as 25")),
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" | "i8" | "i16" | "i32" | "i64" | "i128"
        | "isize" => ("a whole number", number("a whole number, such as 4")),
        "a boolean" => ("true or false", "true or false".into()),
        "a string" | "a character" | "a borrowed string" => ("text", "text".into()),
        "a sequence" => (
            "a list",
            "a list of entries, each on a line of its own beginning with `- `".into(),
        ),
        "struct ConfigFile" => (
            "a config",
            "a mapping of keys, one per line, such as profile:, tests:, devices: and \
             thresholds: (docs/config.md lists them)"
                .into(),
        ),
        e if e.starts_with("struct ")
            || e.starts_with("tuple struct ")
            || e.starts_with("a map") =>
        {
            (
                "a mapping",
                "a mapping of keys, such as `key: value` on lines of their own".into(),
            )
        }
        // serde_norway's expectation for an enum given a list or a mapping.
        e if e.starts_with("enum ")
            || e.starts_with("unit struct ")
            || e == "a YAML tag starting with '!'" =>
        {
            ("one of the key's names", "one of the key's names".into())
        }
        "path string" => ("a path", "a path such as /var/lib/usbperf/reports".into()),
        _ => return None,
    })
}

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
mod said_tests {
    use super::{count, json_error, said_once, serde_message, without_os_codes};

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
            json_error(
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
