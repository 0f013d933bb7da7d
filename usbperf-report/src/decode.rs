//! Owns how a report's bytes are decoded, for every reader of reports that come from
//! elsewhere (`show`, `fleet`, `upload`'s check before queueing, the collector's ingest):
//! JSON or YAML told apart the same way, bounded before any value is built, and the schema
//! version probed alone when the whole document does not decode.
//!
//! The bounds ([`Limits`], every refusal names the limit it hit) are checked by a streaming
//! walk of the very parser that decodes afterwards (serde_json's deserializer, libyaml's
//! event parser: [`super::bounds`]), which stops at the first limit:
//! - the bytes ([`Limits::max_bytes`]): a report is tens of kilobytes;
//! - nesting ([`Limits::max_depth`]): a report nests about ten levels;
//! - per list, per map, per text and in all ([`Limits::max_items`], [`Limits::max_keys`],
//!   [`Limits::max_string`], [`Limits::max_nodes`]): what is built is bounded, not only the
//!   bytes (two million reasons in 4 MB are refused at the 4,097th);
//! - what the writer never produces: anchors, aliases and tags (one alias repeated expands a
//!   100 KB body into millions of values), line breaks other than LF, duplicate keys, a key
//!   that is not text, more than one document. (An infinite or not-a-number figure is
//!   refused per figure by the fleet's extraction, the report still counts: today's writer
//!   can produce one.)
//!
//! [`Limits::max_devices`] and [`Limits::max_cells`] are counted while decoding ([`capped`]).

use std::fmt;
use std::path::Path;

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};

/// Only the version, to explain a report that does not decode.
#[derive(serde::Deserialize)]
pub struct Probe {
    #[serde(default)]
    pub schema_version: Option<u32>,
}

pub use crate::bounds::{Limits, Refusal, LIMITS, MAX_CELLS, MAX_DEVICES};

/// Why a report could not be decoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecodeError {
    /// Refused by a limit before parsing.
    #[error("{0}")]
    Refused(#[from] Refusal),
    /// The decoder's own message.
    #[error("{0}")]
    Malformed(String),
}

/// Whether the bytes are JSON: by extension, else by the first non-blank byte (the factory
/// writes `report_format: json` reports as pretty JSON objects); YAML otherwise.
pub fn is_json(path: &Path, bytes: &[u8]) -> bool {
    match path.extension().and_then(|e| e.to_str()) {
        Some("json") => true,
        Some("yaml") | Some("yml") => false,
        _ => bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{'),
    }
}

/// Checks bytes against `limits` before they are decoded: size and NUL here, then the
/// streaming walk of the decoder's own parser ([`super::bounds`]).
pub fn check(json: bool, bytes: &[u8], limits: &Limits) -> Result<(), Refusal> {
    if bytes.len() > limits.max_bytes {
        return Err(Refusal::TooLarge {
            bytes: bytes.len(),
            limit: limits.max_bytes,
        });
    }
    if let Some(offset) = bytes.iter().position(|&b| b == 0) {
        return Err(Refusal::Nul { offset });
    }
    // LF is the only line break of JSON outside strings, and YAML's others are refused
    // first: lines are the same for every reader.
    if !json {
        crate::bounds::line_breaks(bytes)?;
    }
    for (n, l) in bytes.split(|&b| b == b'\n').enumerate() {
        if l.len() > limits.max_line {
            return Err(Refusal::LongLine {
                limit: limits.max_line,
                line: n + 1,
            });
        }
    }
    if json {
        crate::bounds::walk_json(bytes, limits)
    } else {
        crate::bounds::walk_yaml(bytes, limits)
    }
}

/// Decodes bytes from elsewhere into `T` after [`check`] with [`LIMITS`].
pub fn decode<'a, T: Deserialize<'a>>(json: bool, bytes: &'a [u8]) -> Result<T, DecodeError> {
    check(json, bytes, &LIMITS)?;
    parse(json, bytes).map_err(DecodeError::Malformed)
}

/// Decodes bytes already [`check`]ed (a probe of the same bytes, a pruned copy of them).
/// Errors name the key path (YAML) and the position, with serde's type names in words.
pub fn parse<'a, T: Deserialize<'a>>(json: bool, bytes: &'a [u8]) -> Result<T, String> {
    let msg = if json {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    } else {
        serde_norway::from_slice(bytes).map_err(|e| e.to_string())
    };
    msg.map_err(|m| crate::words::serde_message(&m))
}

/// A sequence of at most `N` items, refused at the first one over: `#[serde(deserialize_with
/// = "capped::<_, _, N>")]` on the report's `devices` and `cells`.
pub fn capped<'de, D, T, const N: usize>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Capped<T, const N: usize>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for Capped<T, N> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "a list of at most {N} items")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(N));
            while let Some(v) = seq.next_element()? {
                if out.len() == N {
                    return Err(de::Error::custom(format!(
                        "more than {N} items: a report may have at most {N} devices, and a \
                         device at most {MAX_CELLS} cells"
                    )));
                }
                out.push(v);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(Capped::<T, N>(std::marker::PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_told_from_yaml_by_extension_then_first_byte() {
        let table: &[(&str, &[u8], bool)] = &[
            ("r.json", b"schema_version: 1", true),
            ("r.yaml", b"{\"a\": 1}", false),
            ("r", b"  \n{\"a\": 1}", true),
            ("r", b"schema_version: 1", false),
        ];
        for (name, bytes, want) in table {
            assert_eq!(is_json(Path::new(name), bytes), *want, "{name}");
        }
        let p: Probe = decode(false, b"schema_version: 7\nother: x\n").unwrap();
        assert_eq!(p.schema_version, Some(7));
    }

    /// The walk is libyaml's own: depth is exact, and what is not a token (a quote or
    /// bracket inside a plain or block scalar) is text, however the lines break.
    #[test]
    fn yaml_is_walked_by_libyaml_itself() {
        let limits = Limits {
            max_depth: 4,
            ..LIMITS
        };
        let table: &[(&str, Result<(), &str>)] = &[
            ("a: 1\nb:\n  c: [1, 2]\n", Ok(())),
            ("a: [[[1]]]\n", Ok(())),
            ("a: [[[[1]]]]\n", Err("nested 5 levels deep at line 1")),
            ("a: \"[[[[[\"\nb: '[[[[[[ it''s'\n", Ok(())),
            ("a: x [[[[[ y\n", Ok(())),
            ("- - - - - x\n", Err("nested 5")),
            (
                "a:\n  b:\n    c:\n      d:\n        e: 1\n",
                Err("nested 5 levels deep at line 5"),
            ),
            (
                "a: it's\nb: [[[[1]]]]\n",
                Err("nested 5 levels deep at line 2"),
            ),
            ("a: x\n  [[[[[[ y\nb: 1\n", Ok(())),
            ("a: |\n  [[[[[[[\n  - - - - - -\nb: 1\n", Ok(())),
            ("a: [1,\n  [2, [3, [4]]]]\n", Err("line 2")),
            ("a: &x 1\n", Err("anchor (`&`) at line 1")),
            ("a: 1\nb: *x\n", Err("alias (`*`) at line 2")),
            ("a: x&y*z\n", Ok(())),
            ("? [a]\n: b\n", Err("a list or map at line 1")),
            ("? a\n: b\n", Ok(())),
            ("a: !!str 1\n", Err("tag")),
            ("a: !Foo {b: 1}\n", Err("tag")),
            (
                "a: 1\na: 2\n",
                Err("the key \"a\" twice in one map at line 2"),
            ),
            ("a: {b: 1, b: 2}\n", Err("the key \"b\" twice")),
            ("- {a: 1}\n- {a: 1}\n", Ok(())),
            ("a: 1\n---\nb: 2\n", Err("a second YAML document at line 2")),
            // Every line break libyaml knows besides LF, wherever it is.
            ("a: 1\r\nb: 2\n", Err("CR (\\r) line break at line 1")),
            (
                "a: 1\nb: \"x\u{85}y\"\n",
                Err("NEL (U+0085) line break at line 2"),
            ),
            ("a: x\u{2028}y\n", Err("LS (U+2028)")),
            ("a: x\u{2029}y\n", Err("PS (U+2029)")),
            // Numbers the writer never emits: an infinity or NaN, unquoted; quoted, a text.
            (
                "mib_per_s: .nan\n",
                Err("a number that is not finite (.nan) at line 1"),
            ),
            ("a: 1\nb: [-.Inf]\n", Err("not finite (-.Inf) at line 2")),
            ("a: .INF\n", Err("not finite")),
            ("a: '.nan'\nb: \".inf\"\nc: nan\nd: +.nan\n", Ok(())),
            // Not YAML at all: the typed decode that follows says why, in its words.
            ("a: [1\n", Ok(())),
        ];
        for (doc, want) in table {
            let got = check(false, doc.as_bytes(), &limits).map_err(|e| e.to_string());
            match (want, got) {
                (Ok(()), Ok(())) => {}
                (Err(w), Err(g)) => assert!(g.contains(w), "{doc:?}: {g}"),
                (w, g) => panic!("{doc:?}: want {w:?}, got {g:?}"),
            }
        }
    }

    /// The counts that bound what a decode builds: per list, per map, per text, in all.
    #[test]
    fn lists_maps_texts_and_values_are_counted_in_both_formats() {
        let limits = Limits {
            max_items: 3,
            max_keys: 2,
            max_key: 4,
            max_string: 5,
            max_nodes: 11,
            ..LIMITS
        };
        let table: &[(&str, &str, Result<(), &str>)] = &[
            ("a: [1, 2, 3]\n", r#"{"a": [1, 2, 3]}"#, Ok(())),
            (
                "a: [1, 2, 3, 4]\n",
                r#"{"a": [1, 2, 3, 4]}"#,
                Err("more than 3 items"),
            ),
            (
                "a: 1\nb: 2\nc: 3\n",
                r#"{"a": 1, "b": 2, "c": 3}"#,
                Err("more than 2 keys"),
            ),
            (
                "abcde: 1\n",
                r#"{"abcde": 1}"#,
                Err("a key longer than 4 bytes"),
            ),
            (
                "a: abcdef\n",
                r#"{"a": "abcdef"}"#,
                Err("a text of 6 bytes"),
            ),
            ("a: abcde\n", r#"{"a": "abcde"}"#, Ok(())),
            (
                "a: [[1, 2], [3, 4], [5, 6]]\n",
                r#"{"a": [[1, 2], [3, 4], [5, 6]]}"#,
                Err("more than 11 values"),
            ),
            (
                "a: 1\na: 2\n",
                r#"{"a": 1, "a": 2}"#,
                Err("the key \"a\" twice"),
            ),
            ("a: [[[1]]]\n", r#"{"a": [[[1]]]}"#, Ok(())),
        ];
        for (yaml, json, want) in table {
            for (is_json, doc) in [(false, yaml), (true, json)] {
                let got = check(is_json, doc.as_bytes(), &limits).map_err(|e| e.to_string());
                match (want, got) {
                    (Ok(()), Ok(())) => {}
                    (Err(w), Err(g)) => assert!(g.contains(w), "{doc:?}: {g}"),
                    (w, g) => panic!("{doc:?}: want {w:?}, got {g:?}"),
                }
            }
        }
        // A line over the limit is refused on the bytes, before a parser copies it.
        let limits = Limits {
            max_line: 8,
            ..limits
        };
        for (json, doc) in [
            (false, "a: 1\nb: 123456\n"),
            (true, "{\"a\":\n\"1234567\"}"),
        ] {
            let e = check(json, doc.as_bytes(), &limits).unwrap_err();
            assert_eq!(e, Refusal::LongLine { limit: 8, line: 2 }, "{doc}");
        }
        // JSON's refusals say the line the parser was on.
        let e = check(true, b"{\"a\": 1,\n \"a\": 2}", &limits).unwrap_err();
        assert!(e.to_string().contains("at line 2"), "{e}");
    }

    /// What the unit's own writer produces from hostile text (a USB device's model string
    /// with control characters, line and paragraph separators) passes the walk: the writer
    /// escapes what the walk refuses, so a unit's report is never refused for its content.
    #[test]
    fn the_writers_output_of_hostile_text_passes_the_walk() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct T {
            model: String,
            reasons: Vec<String>,
            figure: f64,
        }
        let t = T {
            model: "x\ry\u{85}z\u{2028}w\u{2029}v\x1b]0;pwned\x07 &a *b !c \u{202e}".into(),
            reasons: vec!["line one\nline two".into(), "- [ { # ".into(), "".into()],
            figure: -0.0,
        };
        let yaml = serde_norway::to_string(&t).unwrap();
        check(false, yaml.as_bytes(), &LIMITS).unwrap_or_else(|e| panic!("{e}:\n{yaml}"));
        assert_eq!(parse::<T>(false, yaml.as_bytes()).unwrap(), t);
        let json = serde_json::to_string_pretty(&t).unwrap();
        check(true, json.as_bytes(), &LIMITS).unwrap();
        assert_eq!(parse::<T>(true, json.as_bytes()).unwrap(), t);
    }

    #[test]
    fn json_depth_and_size_are_checked_before_parsing() {
        let limits = Limits {
            max_depth: 3,
            max_bytes: 40,
            ..LIMITS
        };
        assert!(check(true, br#"{"a": [[1]], "b": "[[[[["}"#, &limits).is_ok());
        let e = check(true, br#"{"a": [[[1]]]}"#, &limits).unwrap_err();
        assert_eq!(
            e,
            Refusal::TooDeep {
                depth: 4,
                limit: 3,
                line: 1
            }
        );
        let e = check(true, &[b' '; 41], &limits).unwrap_err();
        assert!(e
            .to_string()
            .contains("41 bytes: a report may have at most 40"));
        let e = check(false, b"a: \0", &limits).unwrap_err();
        assert_eq!(e, Refusal::Nul { offset: 3 });
    }

    #[test]
    fn a_deep_body_is_refused_in_linear_time() {
        let deep = format!("a: {}\n", "[\n ".repeat(100_000));
        let t = std::time::Instant::now();
        let e = check(false, deep.as_bytes(), &LIMITS).unwrap_err();
        assert!(matches!(e, Refusal::TooDeep { depth: 65, .. }), "{e}");
        // The check is what stops it, not a timer: the figure is only printed.
        eprintln!("refused 100,000-deep YAML in {:?}", t.elapsed());
    }

    #[test]
    fn lists_over_the_cap_are_refused_while_decoding() {
        #[derive(serde::Deserialize, Debug)]
        struct R {
            #[serde(deserialize_with = "capped::<_, _, 2>")]
            devices: Vec<u8>,
        }
        assert_eq!(
            parse::<R>(false, b"devices: [1, 2]").unwrap().devices,
            vec![1, 2]
        );
        let e = parse::<R>(false, b"devices: [1, 2, 3]").unwrap_err();
        assert!(e.contains("more than 2 items"), "{e}");
        let e = parse::<R>(true, br#"{"devices": [1, 2, 3]}"#).unwrap_err();
        assert!(e.contains("more than 2 items"), "{e}");
    }
}
