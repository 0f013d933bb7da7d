//! Owns the wording of serde's decoding errors for people: `invalid type: string "fast",
//! expected f64` names a Rust type the operator never wrote; the one rewrite here says what
//! the key takes instead ("a number of MiB/s, such as 25"), for configs and reports alike.
//! The unit's crate re-exports it (`usbperf::words`), where its table tests are.

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
