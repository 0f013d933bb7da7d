//! Owns how a report's bytes are decoded, for every reader of reports that come from
//! elsewhere (`show`, `fleet`, `upload`'s check before queueing, the collector's ingest):
//! JSON or YAML told apart the same way, bounded before any parser runs, and the schema
//! version probed alone when the whole document does not decode.
//!
//! The bounds, and why each exists (every refusal names the limit and the figure):
//! - [`Limits::max_bytes`]: a report is tens of kilobytes; the collector's body cap is the
//!   same figure by default.
//! - [`Limits::max_depth`]: nesting is checked by a linear scan *before* libyaml or
//!   serde_json sees the bytes. libyaml's scanner is quadratic in flow nesting (100,000 `[`
//!   took a minute of CPU) and serde's recursion limit only applies after the scanner ran.
//!   A report nests about ten levels; the scan's estimate may be up to twice the real
//!   depth, never less than half of it.
//! - No anchors (`&`) or aliases (`*`): the unit never writes them, and one alias repeated
//!   expands a 100 KB body into millions of values. The scan refuses them, so what the
//!   parser builds is proportional to the bytes.
//! - [`Limits::max_devices`] and [`Limits::max_cells`]: counted while decoding
//!   ([`capped`]), so rows stored per report are bounded, not only bytes.

use std::fmt;
use std::path::Path;

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};

/// Only the version, to explain a report that does not decode.
#[derive(serde::Deserialize)]
pub struct Probe {
    #[serde(default)]
    pub schema_version: Option<u32>,
}

/// What makes bytes a usbperf report at all, read before a report is queued for upload: a
/// schema version this build knows, the tool's name, a start time that is a time.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct ReportHead {
    pub schema_version: u32,
    #[serde(default)]
    pub report_id: Option<String>,
    pub tool: ToolName,
    pub started_at: chrono::DateTime<chrono::Utc>,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct ToolName {
    pub name: String,
}

/// The head of a report, or why these bytes are not one (in the user's words).
pub fn report_head(json: bool, bytes: &[u8]) -> Result<ReportHead, DecodeError> {
    let head: ReportHead = decode(json, bytes).map_err(|e| match e {
        DecodeError::Malformed(m) => {
            DecodeError::Malformed(format!("it does not decode as a usbperf report ({m})"))
        }
        e => e,
    })?;
    let newest = crate::report::schema::SCHEMA_VERSION;
    if !(1..=newest).contains(&head.schema_version) {
        return Err(DecodeError::Malformed(format!(
            "schema_version {} is not one this build writes (1 to {newest})",
            head.schema_version
        )));
    }
    if head.tool.name != "usbperf-matrix" {
        return Err(DecodeError::Malformed(format!(
            "tool.name is {:?}, not usbperf-matrix",
            head.tool.name
        )));
    }
    Ok(head)
}

/// What a report from elsewhere may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_bytes: usize,
    pub max_depth: usize,
    pub max_devices: usize,
    pub max_cells: usize,
}

/// A report may have at most 256 devices.
pub const MAX_DEVICES: usize = 256;
/// A device may have at most 1,024 cells (the matrix's tests).
pub const MAX_CELLS: usize = 1024;

/// The limits every reader applies (the collector may lower `max_bytes`).
pub const LIMITS: Limits = Limits {
    max_bytes: 8 << 20,
    max_depth: 64,
    max_devices: MAX_DEVICES,
    max_cells: MAX_CELLS,
};

/// Why bytes were refused before they were parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{bytes} bytes: a report may have at most {limit} bytes")]
    TooLarge { bytes: usize, limit: usize },
    #[error(
        "nested {depth} levels deep at line {line}: a report nests at most {limit} levels \
         (one the unit wrote nests about ten)"
    )]
    TooDeep {
        depth: usize,
        limit: usize,
        line: usize,
    },
    #[error(
        "a YAML {what} at line {line}: usbperf never writes anchors or aliases, and one alias \
         can expand a small body into millions of values"
    )]
    Alias { what: &'static str, line: usize },
    #[error("a YAML complex key (`? `) at line {line}: usbperf never writes them")]
    ComplexKey { line: usize },
    #[error("a NUL byte at offset {offset}: a report is text")]
    Nul { offset: usize },
}

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

/// Checks bytes against `limits` without parsing them: size, NUL, nesting, anchors.
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
    if json {
        json_depth(bytes, limits.max_depth)
    } else {
        YamlScan::new(limits.max_depth).run(bytes)
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

/// JSON nesting: brackets outside strings.
fn json_depth(bytes: &[u8], limit: usize) -> Result<(), Refusal> {
    let (mut depth, mut line, mut in_str, mut esc) = (0usize, 1usize, false, false);
    for &b in bytes {
        if b == b'\n' {
            line += 1;
        }
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Err(Refusal::TooDeep { depth, limit, line });
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// A linear scan of YAML that estimates the nesting depth at every node and finds anchors,
/// aliases and complex keys, following libyaml's rules for where a token may start: a
/// quote, bracket, `&` or `*` starts a token only where a node may begin (after the
/// indentation, `- `, `: `, or in a flow collection after `[`, `{`, `,`); elsewhere it is a
/// character of a plain scalar. Lines that continue a plain or block scalar are text.
struct YamlScan {
    limit: usize,
    line: usize,
    /// Indentation of the open block collections, strictly increasing.
    indents: Vec<usize>,
    /// Open flow collections.
    flow: usize,
    /// Inside them, a node may start where the last line ended (else a plain scalar goes
    /// on: a quote at the next line's start is its text).
    flow_node: bool,
    /// A quoted scalar continues on the next line (the quote byte).
    quote: Option<u8>,
    /// A block scalar (`|`, `>`) is open: the column of its parent node, and the content's
    /// indentation once known.
    block: Option<(usize, Option<usize>)>,
    /// The last line ended in a plain scalar value of the node at this column: deeper lines
    /// continue it.
    plain: Option<usize>,
}

impl YamlScan {
    fn new(limit: usize) -> YamlScan {
        YamlScan {
            limit,
            line: 0,
            indents: Vec::new(),
            flow: 0,
            flow_node: true,
            quote: None,
            block: None,
            plain: None,
        }
    }

    fn run(mut self, bytes: &[u8]) -> Result<(), Refusal> {
        for raw in bytes.split(|&b| b == b'\n') {
            self.line += 1;
            let l = raw.strip_suffix(b"\r").unwrap_or(raw);
            self.scan_line(l)?;
        }
        Ok(())
    }

    fn depth_check(&self, extra: usize) -> Result<(), Refusal> {
        let depth = self.indents.len() + extra + self.flow;
        if depth > self.limit {
            return Err(Refusal::TooDeep {
                depth,
                limit: self.limit,
                line: self.line,
            });
        }
        Ok(())
    }

    fn scan_line(&mut self, l: &[u8]) -> Result<(), Refusal> {
        let ind = l.iter().take_while(|&&b| b == b' ').count();
        let blank = l[ind..].iter().all(|&b| b == b' ' || b == b'\t');
        if let Some(q) = self.quote {
            match close_quote(l, 0, q) {
                Some(end) => {
                    self.quote = None;
                    if self.flow > 0 {
                        return self.scan_flow(l, end, false);
                    }
                    return self.scan_rest(l, end, false, 0, ind);
                }
                None => return Ok(()),
            }
        }
        if let Some((parent, content)) = self.block {
            if blank {
                return Ok(());
            }
            match content {
                None if ind > parent => {
                    self.block = Some((parent, Some(ind)));
                    return Ok(());
                }
                Some(m) if ind >= m => return Ok(()),
                _ => self.block = None,
            }
        }
        if self.flow > 0 {
            return self.scan_flow(l, 0, self.flow_node);
        }
        if blank {
            return Ok(());
        }
        if l[ind] == b'#' {
            // A comment line ends a multi-line plain scalar.
            self.plain = None;
            return Ok(());
        }
        if let Some(col) = self.plain {
            if ind > col {
                // Text of the scalar; a comment on it ends the scalar.
                if has_comment(l, ind) {
                    self.plain = None;
                }
                return Ok(());
            }
            self.plain = None;
        }
        if ind == 0 && (l.starts_with(b"---") || l.starts_with(b"...")) {
            let rest = &l[3..];
            if rest.is_empty() || rest[0] == b' ' || rest[0] == b'\t' {
                self.indents.clear();
                return self.scan_rest(l, 3, true, 0, 0);
            }
        }
        while self.indents.last().is_some_and(|&top| top > ind) {
            self.indents.pop();
        }
        if self.indents.last() != Some(&ind) {
            self.indents.push(ind);
        }
        self.scan_rest(l, ind, true, 0, ind)
    }

    /// Block context from `p`: `node` when a node may start there, `extra` the `- ` entries
    /// seen on this line, `parent` the column of the innermost node begun on it.
    fn scan_rest(
        &mut self,
        l: &[u8],
        mut p: usize,
        mut node: bool,
        mut extra: usize,
        mut parent: usize,
    ) -> Result<(), Refusal> {
        loop {
            while p < l.len() && (l[p] == b' ' || l[p] == b'\t') {
                p += 1;
            }
            if p >= l.len() {
                return Ok(());
            }
            let c = l[p];
            let spaced = p == 0 || l[p - 1] == b' ' || l[p - 1] == b'\t';
            if c == b'#' && spaced {
                return Ok(());
            }
            let next_blank = l.get(p + 1).map_or(true, |&b| b == b' ' || b == b'\t');
            if !node {
                // After a quoted scalar or a flow collection: a key's `:` or nothing.
                if c == b':' && next_blank {
                    node = true;
                    p += 1;
                    self.depth_check(extra + 1)?;
                    continue;
                }
                return Ok(());
            }
            match c {
                b'-' if next_blank => {
                    extra += 1;
                    parent = p;
                    self.depth_check(extra)?;
                    p += 1;
                }
                b'?' if next_blank => return Err(Refusal::ComplexKey { line: self.line }),
                b'[' | b'{' => {
                    self.flow += 1;
                    self.depth_check(extra)?;
                    self.scan_flow(l, p + 1, true)?;
                    return Ok(());
                }
                b'\'' | b'"' => match close_quote(l, p + 1, c) {
                    Some(end) => {
                        p = end;
                        node = false;
                    }
                    None => {
                        self.quote = Some(c);
                        return Ok(());
                    }
                },
                b'&' => {
                    return Err(Refusal::Alias {
                        what: "anchor (`&`)",
                        line: self.line,
                    })
                }
                b'*' => {
                    return Err(Refusal::Alias {
                        what: "alias (`*`)",
                        line: self.line,
                    })
                }
                b'!' => {
                    while p < l.len() && l[p] != b' ' && l[p] != b'\t' {
                        p += 1;
                    }
                }
                b'|' | b'>' => {
                    self.block = Some((parent, None));
                    return Ok(());
                }
                _ => {
                    // A plain scalar: a key if `: ` ends it on this line, else a value that
                    // deeper lines may continue.
                    let start = p;
                    loop {
                        if p >= l.len() {
                            self.plain = Some(parent);
                            return Ok(());
                        }
                        let b = l[p];
                        let nb = l.get(p + 1).map_or(true, |&b| b == b' ' || b == b'\t');
                        if b == b':' && nb {
                            parent = start;
                            extra += 1;
                            self.depth_check(extra)?;
                            p += 1;
                            break;
                        }
                        if b == b'#' && p > start && (l[p - 1] == b' ' || l[p - 1] == b'\t') {
                            return Ok(());
                        }
                        p += 1;
                    }
                }
            }
        }
    }

    /// Flow context from `p` (inside `self.flow` collections).
    fn scan_flow(&mut self, l: &[u8], mut p: usize, mut node: bool) -> Result<(), Refusal> {
        while p < l.len() {
            let c = l[p];
            let spaced = p == 0 || l[p - 1] == b' ' || l[p - 1] == b'\t';
            match c {
                b' ' | b'\t' => p += 1,
                b'#' if spaced => return Ok(()),
                b'[' | b'{' => {
                    self.flow += 1;
                    self.depth_check(0)?;
                    node = true;
                    p += 1;
                }
                b']' | b'}' => {
                    self.flow = self.flow.saturating_sub(1);
                    p += 1;
                    node = false;
                    if self.flow == 0 {
                        return self.scan_rest(l, p, false, 0, 0);
                    }
                }
                b',' | b':' | b'?' => {
                    node = true;
                    p += 1;
                }
                b'\'' | b'"' if node => match close_quote(l, p + 1, c) {
                    Some(end) => {
                        p = end;
                        node = false;
                    }
                    None => {
                        self.quote = Some(c);
                        self.flow_node = false;
                        return Ok(());
                    }
                },
                b'&' if node => {
                    return Err(Refusal::Alias {
                        what: "anchor (`&`)",
                        line: self.line,
                    })
                }
                b'*' if node => {
                    return Err(Refusal::Alias {
                        what: "alias (`*`)",
                        line: self.line,
                    })
                }
                _ => {
                    // A plain scalar (or a tag): ends at a flow indicator, at `: `, or at
                    // ` #`; libyaml's rule for `:` in flow context.
                    while p < l.len() {
                        let b = l[p];
                        if matches!(b, b',' | b'[' | b']' | b'{' | b'}') {
                            break;
                        }
                        if b == b':'
                            && l.get(p + 1).map_or(true, |&n| {
                                matches!(n, b' ' | b'\t' | b',' | b'[' | b']' | b'{' | b'}')
                            })
                        {
                            break;
                        }
                        if b == b'#' && (l[p - 1] == b' ' || l[p - 1] == b'\t') {
                            return Ok(());
                        }
                        p += 1;
                    }
                    node = false;
                }
            }
        }
        self.flow_node = node;
        Ok(())
    }
}

/// Where the quoted scalar opened before `from` closes (the index after its closing quote),
/// if on this line. `''` is a quote inside single quotes; `\` escapes inside double quotes.
fn close_quote(l: &[u8], from: usize, q: u8) -> Option<usize> {
    let mut i = from;
    while i < l.len() {
        let b = l[i];
        if q == b'"' && b == b'\\' {
            i += 2;
            continue;
        }
        if b == q {
            if q == b'\'' && l.get(i + 1) == Some(&b'\'') {
                i += 2;
                continue;
            }
            return Some(i + 1);
        }
        i += 1;
    }
    None
}

/// A ` #` comment on a line of plain text.
fn has_comment(l: &[u8], from: usize) -> bool {
    (from.max(1)..l.len()).any(|i| l[i] == b'#' && (l[i - 1] == b' ' || l[i - 1] == b'\t'))
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

    /// The depth estimate of small documents: never below half the real depth, and what
    /// is not a token (a quote or bracket inside a plain scalar) is text.
    #[test]
    fn yaml_depth_is_estimated_from_tokens_where_libyaml_starts_them() {
        let limits = Limits {
            max_depth: 4,
            ..LIMITS
        };
        let table: &[(&str, Result<(), &str>)] = &[
            ("a: 1\nb:\n  c: [1, 2]\n", Ok(())),
            ("a: [[[[1]]]]\n", Err("nested 5 levels deep at line 1")),
            ("a: \"[[[[[\"\nb: '[[[[[[ it''s'\n", Ok(())),
            ("a: x [[[[[ y\n", Ok(())),
            ("- - - - - x\n", Err("nested 5")),
            (
                "a:\n  b:\n    c:\n      d:\n        e: 1\n",
                Err("nested 5"),
            ),
            // A quote inside a plain scalar is text: the brackets after it are counted.
            (
                "a: it's\nb: [[[[[1]]]]]\n",
                Err("nested 5 levels deep at line 2"),
            ),
            // Lines continuing a plain scalar are text, as libyaml reads them.
            ("a: x\n  [[[[[[ y\nb: 1\n", Ok(())),
            ("a: x\n  'q\nb: [[[[[1]]]]]\n", Err("line 3")),
            // A multi-line quoted scalar hides nothing after it closes.
            ("a: \"x\n  y\" \nb: [[[[[1]]]]]\n", Err("line 3")),
            ("a: |\n  [[[[[[[\n  - - - - - -\nb: 1\n", Ok(())),
            ("a: |\nb: [[[[[1]]]]]\n", Err("line 2")),
            ("a: [1,\n  [2, [3, [4, [5]]]]]\n", Err("line 2")),
            ("a: &x 1\n", Err("anchor")),
            ("a: *x\n", Err("alias")),
            ("a: [1, *x]\n", Err("alias")),
            ("a: x&y*z\n", Ok(())),
            ("? a\n: b\n", Err("complex key")),
            ("a: 1 # [[[[[[ '\nb: [[[[[1]]]]]\n", Err("line 2")),
            ("a: !!str 1\n", Ok(())),
            // In a flow collection a plain scalar goes on across lines: a quote there is text.
            ("a: [x\n'\n[[[[[1]]]]]\n'] \n", Err("line 3")),
            ("a: [\"x\n\", [[[[1]]]]]\n", Err("line 2")),
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
        let deep = format!("a: {}\n", "[".repeat(100_000));
        let t = std::time::Instant::now();
        let e = check(false, deep.as_bytes(), &LIMITS).unwrap_err();
        assert!(matches!(e, Refusal::TooDeep { depth: 65, .. }), "{e}");
        // The check is what stops it, not a timer: the figure is only printed.
        eprintln!("refused 100,000-deep YAML in {:?}", t.elapsed());
    }

    #[test]
    fn only_a_report_has_a_head() {
        let good = "schema_version: 2\nreport_id: ab\ntool: {name: usbperf-matrix}\n\
                    started_at: 2026-11-30T10:23:45Z\n";
        assert_eq!(
            report_head(false, good.as_bytes())
                .unwrap()
                .report_id
                .as_deref(),
            Some("ab")
        );
        let table: &[(&str, &str)] = &[
            ("hello: world\n", "does not decode as a usbperf report"),
            ("just text", "does not decode as a usbperf report"),
            (&good.replace("usbperf-matrix", "fio"), "tool.name"),
            (
                &good.replace("schema_version: 2", "schema_version: 9"),
                "schema_version 9",
            ),
            (&good.replace("2026-11-30", "2026-99-99"), "does not decode"),
            (&good.replace("ab\n", "&a ab\n"), "anchor"),
        ];
        for (doc, want) in table {
            let e = report_head(false, doc.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(want), "{doc:?}: {e}");
        }
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
