//! Owns the structural check of a report's bytes from elsewhere: a streaming walk, by the
//! very parser that decodes the report afterwards, that refuses what the unit's writer never
//! produces and stops at the first limit, before any value is built.
//!
//! Why a walk by the same parser, not a scan of our own: a scanner of our own reads the bytes
//! its own way and can disagree with the parser behind it (a scan that split lines on `\n`
//! let a body whose lines break with CR reach libyaml with anchors in it). Here JSON is walked
//! by serde_json's own streaming deserializer, and YAML by libyaml's own event parser, one
//! event at a time; each stops at the first refusal, so what they hold is bounded by the
//! limits, not by the body. Only a document that passed is then decoded into types: its
//! depth, node count and string sizes are known to be small.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;
use std::hash::BuildHasher;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// What a report from elsewhere may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_bytes: usize,
    /// Collections inside collections.
    pub max_depth: usize,
    pub max_devices: usize,
    pub max_cells: usize,
    /// Items of one list.
    pub max_items: usize,
    /// Keys of one map.
    pub max_keys: usize,
    /// Bytes of one key.
    pub max_key: usize,
    /// Bytes of one text value.
    pub max_string: usize,
    /// Values in the whole document: keys, scalars and collections.
    pub max_nodes: usize,
    /// Bytes of one line, checked on the bytes before any parser sees them (a parser copies
    /// a scalar whole before it can be counted). The writer's longest line is a text of
    /// `max_string` bytes escaped (JSON's `\u001b` is six bytes for one).
    pub max_line: usize,
}

/// A report may have at most 256 devices.
pub const MAX_DEVICES: usize = 256;
/// A device may have at most 1,024 cells (the matrix's tests).
pub const MAX_CELLS: usize = 1024;

/// The limits every reader applies (the collector may lower `max_bytes`).
/// A device of the full profile is about 900 values, its longest list 8 items, its widest map
/// 18 keys, its longest text 155 bytes (measured on a real run), and each figure's precision
/// adds at most 128 samples: the limits leave room for sixteen such devices with long runs
/// (more than any board carries), and refuse what only an attack holds before it costs
/// memory or time (the walk of 32,768 values takes about 8 ms).
pub const LIMITS: Limits = Limits {
    max_bytes: 8 << 20,
    max_depth: 64,
    max_devices: MAX_DEVICES,
    max_cells: MAX_CELLS,
    max_items: 4096,
    max_keys: 256,
    max_key: 128,
    max_string: 16 << 10,
    max_nodes: 1 << 15,
    max_line: 128 << 10,
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
    #[error("a YAML key that is a list or map at line {line}: usbperf's keys are text")]
    ComplexKey { line: usize },
    #[error("a NUL byte at offset {offset}: a report is text")]
    Nul { offset: usize },
    #[error(
        "a {what} line break at line {line}: usbperf writes only LF line breaks (a YAML \
         parser also breaks lines at CR, NEL, LS and PS, so a reader that splits lines \
         at LF only would see another document)"
    )]
    LineBreak { what: &'static str, line: usize },
    #[error("a YAML tag (`!`) at line {line}: usbperf never writes tags")]
    Tag { line: usize },
    #[error("a second YAML document at line {line}: a report is one document")]
    Documents { line: usize },
    #[error("more than {limit} items in one list at line {line}: a report's lists are shorter")]
    TooManyItems { limit: usize, line: usize },
    #[error("more than {limit} keys in one map at line {line}: a report's maps are smaller")]
    TooManyKeys { limit: usize, line: usize },
    #[error("a key longer than {limit} bytes at line {line}: a report's keys are short names")]
    LongKey { limit: usize, line: usize },
    #[error("a text of {bytes} bytes at line {line}: a report's texts have at most {limit}")]
    LongString {
        bytes: usize,
        limit: usize,
        line: usize,
    },
    #[error("a line longer than {limit} bytes at line {line}: the longest line usbperf writes is a text of at most 16 KiB, escaped")]
    LongLine { limit: usize, line: usize },
    #[error("more than {limit} values at line {line}: a report of sixteen devices of the full profile has fewer")]
    TooManyNodes { limit: usize, line: usize },
    #[error("the key {key:?} twice in one map at line {line}: which one holds would depend on the reader")]
    DuplicateKey { key: String, line: usize },
    #[error(
        "a number that is not finite ({value}) at line {line}: usbperf writes only finite figures"
    )]
    NonFinite { value: String, line: usize },
}

/// YAML 1.1/1.2's spellings of an infinity or NaN, as serde_norway reads them into an f64.
fn non_finite(value: &[u8]) -> bool {
    let v = value
        .strip_prefix(b"+")
        .or_else(|| value.strip_prefix(b"-"))
        .unwrap_or(value);
    matches!(v, b".inf" | b".Inf" | b".INF" | b".nan" | b".NaN" | b".NAN")
        && (v.len() == value.len() || !v.starts_with(b".n") && !v.starts_with(b".N"))
}

impl Refusal {
    /// Sets where the refusal was found, once the parser knows the line.
    pub(crate) fn set_line(&mut self, at: usize) {
        match self {
            Refusal::TooDeep { line, .. }
            | Refusal::Alias { line, .. }
            | Refusal::ComplexKey { line }
            | Refusal::LineBreak { line, .. }
            | Refusal::Tag { line }
            | Refusal::Documents { line }
            | Refusal::TooManyItems { line, .. }
            | Refusal::TooManyKeys { line, .. }
            | Refusal::LongKey { line, .. }
            | Refusal::LongString { line, .. }
            | Refusal::LongLine { line, .. }
            | Refusal::TooManyNodes { line, .. }
            | Refusal::DuplicateKey { line, .. }
            | Refusal::NonFinite { line, .. } => *line = at,
            Refusal::TooLarge { .. } | Refusal::Nul { .. } => {}
        }
    }
}

/// Walks JSON bytes with serde_json's streaming deserializer under `limits`. A syntax error is
/// not a refusal: the typed decode that follows reports it in its own words.
pub fn walk_json(bytes: &[u8], limits: &Limits) -> Result<(), Refusal> {
    let state = RefCell::new(State::new(limits));
    let mut de = serde_json::Deserializer::from_slice(bytes);
    // serde_json's own recursion limit (128) is above ours; the walk stops at ours first.
    let result = Node {
        state: &state,
        depth: 0,
    }
    .deserialize(&mut de);
    match result {
        Ok(()) => Ok(()),
        Err(e) => match state.into_inner().refusal {
            Some(mut r) => {
                r.set_line(e.line());
                Err(r)
            }
            None => Ok(()),
        },
    }
}

/// What a walk has seen so far, and the refusal that stopped it.
struct State<'l> {
    limits: &'l Limits,
    nodes: usize,
    refusal: Option<Refusal>,
}

impl<'l> State<'l> {
    fn new(limits: &'l Limits) -> State<'l> {
        State {
            limits,
            nodes: 0,
            refusal: None,
        }
    }
}

/// One value of the JSON document, `depth` collections deep.
struct Node<'s, 'l> {
    state: &'s RefCell<State<'l>>,
    depth: usize,
}

impl<'s, 'l> Node<'s, 'l> {
    /// Records why the walk stops; the error's text is never shown (the refusal is).
    fn refuse<E: de::Error>(&self, r: Refusal) -> E {
        self.state.borrow_mut().refusal = Some(r);
        E::custom("refused")
    }

    fn count<E: de::Error>(&self) -> Result<(), E> {
        let mut s = self.state.borrow_mut();
        s.nodes += 1;
        if s.nodes > s.limits.max_nodes {
            let limit = s.limits.max_nodes;
            drop(s);
            return Err(self.refuse(Refusal::TooManyNodes { limit, line: 0 }));
        }
        Ok(())
    }

    fn text<E: de::Error>(&self, len: usize) -> Result<(), E> {
        self.count()?;
        let limit = self.state.borrow().limits.max_string;
        if len > limit {
            return Err(self.refuse(Refusal::LongString {
                bytes: len,
                limit,
                line: 0,
            }));
        }
        Ok(())
    }

    fn enter<E: de::Error>(&self) -> Result<usize, E> {
        self.count()?;
        let depth = self.depth + 1;
        let limit = self.state.borrow().limits.max_depth;
        if depth > limit {
            return Err(self.refuse(Refusal::TooDeep {
                depth,
                limit,
                line: 0,
            }));
        }
        Ok(depth)
    }

    fn child(&self, depth: usize) -> Node<'s, 'l> {
        Node {
            state: self.state,
            depth,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a report")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.count()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.count()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.count()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.count()
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.text(v.len())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.count()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.count()
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let depth = self.enter()?;
        let limit = self.state.borrow().limits.max_items;
        let mut n = 0usize;
        while seq.next_element_seed(self.child(depth))?.is_some() {
            n += 1;
            if n > limit {
                return Err(self.refuse(Refusal::TooManyItems { limit, line: 0 }));
            }
        }
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let depth = self.enter()?;
        let (limit, key_limit) = {
            let s = self.state.borrow();
            (s.limits.max_keys, s.limits.max_key)
        };
        let mut keys: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key_seed(Key {
            node: self.child(depth),
            limit: key_limit,
        })? {
            if keys.len() == limit {
                return Err(self.refuse(Refusal::TooManyKeys { limit, line: 0 }));
            }
            if !keys.insert(key.clone()) {
                return Err(self.refuse(Refusal::DuplicateKey { key, line: 0 }));
            }
            map.next_value_seed(self.child(depth))?;
        }
        Ok(())
    }
}

/// A JSON object's key: text of at most `limit` bytes, kept to find duplicates.
struct Key<'s, 'l> {
    node: Node<'s, 'l>,
    limit: usize,
}

impl<'de> DeserializeSeed<'de> for Key<'_, '_> {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_, '_> {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        self.node.count()?;
        if v.len() > self.limit {
            return Err(self.node.refuse(Refusal::LongKey {
                limit: self.limit,
                line: 0,
            }));
        }
        Ok(v.to_owned())
    }
}

/// Walks YAML bytes with libyaml's event parser under `limits`, one event at a time, after
/// [`line_breaks`] passed them. A syntax error is not a refusal: the typed decode that follows
/// reports it (its loader meets the same events up to the same error).
pub fn walk_yaml(bytes: &[u8], limits: &Limits) -> Result<(), Refusal> {
    let mut parser = yaml::Parser::new(bytes);
    let mut frames: Vec<Frame> = Vec::new();
    let hasher = std::collections::hash_map::RandomState::new();
    let mut nodes = 0usize;
    let mut documents = 0usize;
    loop {
        let (event, line) = match parser.next() {
            Some(Ok(e)) => e,
            Some(Err(())) | None => return Ok(()),
        };
        // One more value in all, and one more item of the list it is in.
        let node = |frames: &mut Vec<Frame>, nodes: &mut usize| -> Result<(), Refusal> {
            *nodes += 1;
            if *nodes > limits.max_nodes {
                return Err(Refusal::TooManyNodes {
                    limit: limits.max_nodes,
                    line,
                });
            }
            if let Some(top) = frames.last_mut().filter(|f| !f.map) {
                top.items += 1;
                if top.items > limits.max_items {
                    return Err(Refusal::TooManyItems {
                        limit: limits.max_items,
                        line,
                    });
                }
            }
            Ok(())
        };
        match event {
            yaml::Event::DocumentStart => {
                documents += 1;
                if documents > 1 {
                    return Err(Refusal::Documents { line });
                }
            }
            yaml::Event::StreamEnd => return Ok(()),
            yaml::Event::Other => {}
            yaml::Event::Alias => {
                return Err(Refusal::Alias {
                    what: "alias (`*`)",
                    line,
                })
            }
            yaml::Event::Scalar {
                anchor,
                tag,
                plain,
                value,
            } => {
                refuse_anchor_tag(anchor, tag, line)?;
                // YAML's infinities and NaN (`.inf`, `-.Inf`, `.NaN`): a figure or a limit the
                // writer never emits, which would compare false with every limit.
                if plain && non_finite(value) {
                    return Err(Refusal::NonFinite {
                        value: String::from_utf8_lossy(value).into_owned(),
                        line,
                    });
                }
                let key = frames.last().is_some_and(|f| f.map && f.want_key);
                if key {
                    let top = frames.last_mut().expect("a map is open");
                    if top.seen.len() == limits.max_keys {
                        return Err(Refusal::TooManyKeys {
                            limit: limits.max_keys,
                            line,
                        });
                    }
                    if value.len() > limits.max_key {
                        return Err(Refusal::LongKey {
                            limit: limits.max_key,
                            line,
                        });
                    }
                    let h = hasher.hash_one(value);
                    if top.seen.contains(&h) {
                        return Err(Refusal::DuplicateKey {
                            key: String::from_utf8_lossy(value).into_owned(),
                            line,
                        });
                    }
                    top.seen.push(h);
                    top.want_key = false;
                }
                node(&mut frames, &mut nodes)?;
                if key {
                    continue;
                }
                if value.len() > limits.max_string {
                    return Err(Refusal::LongString {
                        bytes: value.len(),
                        limit: limits.max_string,
                        line,
                    });
                }
                if let Some(top) = frames.last_mut() {
                    top.want_key = top.map;
                }
            }
            yaml::Event::Start { map, anchor, tag } => {
                refuse_anchor_tag(anchor, tag, line)?;
                if frames.last().is_some_and(|f| f.map && f.want_key) {
                    return Err(Refusal::ComplexKey { line });
                }
                node(&mut frames, &mut nodes)?;
                if let Some(top) = frames.last_mut() {
                    // The next event after this collection ends is the parent's next key.
                    top.want_key = top.map;
                }
                frames.push(Frame {
                    map,
                    want_key: map,
                    items: 0,
                    seen: Vec::new(),
                });
                if frames.len() > limits.max_depth {
                    return Err(Refusal::TooDeep {
                        depth: frames.len(),
                        limit: limits.max_depth,
                        line,
                    });
                }
            }
            yaml::Event::End => {
                frames.pop();
            }
        }
    }
}

/// An open YAML collection.
struct Frame {
    map: bool,
    /// In a map: the next scalar is a key.
    want_key: bool,
    /// Items of a list.
    items: usize,
    /// A map's keys, as hashes (SipHash with this walk's random keys: two different keys that
    /// collide cannot be made on purpose), searched in order: a map has few keys.
    seen: Vec<u64>,
}

fn refuse_anchor_tag(anchor: bool, tag: bool, line: usize) -> Result<(), Refusal> {
    if anchor {
        return Err(Refusal::Alias {
            what: "anchor (`&`)",
            line,
        });
    }
    if tag {
        return Err(Refusal::Tag { line });
    }
    Ok(())
}

/// The line breaks libyaml knows besides LF: CR, NEL (U+0085), LS (U+2028), PS (U+2029). The
/// unit writes only LF (its writer escapes the others inside texts).
pub fn line_breaks(bytes: &[u8]) -> Result<(), Refusal> {
    // Only three lead bytes can start one: a search for them, then a closer look.
    let mut from = 0;
    while let Some(off) = bytes[from..]
        .iter()
        .position(|&b| b == b'\r' || b == 0xC2 || b == 0xE2)
    {
        let i = from + off;
        let what = match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'\r', _, _) => "CR (\\r)",
            (0xC2, Some(0x85), _) => "NEL (U+0085)",
            (0xE2, Some(0x80), Some(0xA8)) => "LS (U+2028)",
            (0xE2, Some(0x80), Some(0xA9)) => "PS (U+2029)",
            _ => {
                from = i + 1;
                continue;
            }
        };
        let line = bytes[..i].iter().filter(|&&b| b == b'\n').count() + 1;
        return Err(Refusal::LineBreak { what, line });
    }
    Ok(())
}

/// libyaml's event parser, one event at a time (unsafe-libyaml-norway, the libyaml that
/// serde_norway decodes with).
mod yaml {
    use std::mem::MaybeUninit;
    use unsafe_libyaml_norway as unsafe_sys;

    /// What the walk needs of an event.
    pub enum Event<'a> {
        DocumentStart,
        StreamEnd,
        Alias,
        Scalar {
            anchor: bool,
            tag: bool,
            /// Unquoted: a plain scalar is where YAML's numbers are.
            plain: bool,
            value: &'a [u8],
        },
        Start {
            map: bool,
            anchor: bool,
            tag: bool,
        },
        End,
        Other,
    }

    /// The parser lives in a box and never moves: libyaml keeps pointers into its own state.
    pub struct Parser<'input> {
        sys: Box<MaybeUninit<unsafe_sys::yaml_parser_t>>,
        event: Option<Box<MaybeUninit<unsafe_sys::yaml_event_t>>>,
        _input: std::marker::PhantomData<&'input [u8]>,
        done: bool,
    }

    impl<'input> Parser<'input> {
        pub fn new(input: &'input [u8]) -> Parser<'input> {
            let mut sys = Box::new(MaybeUninit::<unsafe_sys::yaml_parser_t>::uninit());
            // SAFETY: initialize fills the parser; the input outlives it ('input), and the
            // box keeps the parser at one address until Drop deletes it.
            unsafe {
                if unsafe_sys::yaml_parser_initialize(sys.as_mut_ptr()).fail {
                    panic!("libyaml could not allocate its parser");
                }
                unsafe_sys::yaml_parser_set_encoding(
                    sys.as_mut_ptr(),
                    unsafe_sys::YAML_UTF8_ENCODING,
                );
                unsafe_sys::yaml_parser_set_input_string(
                    sys.as_mut_ptr(),
                    input.as_ptr(),
                    input.len() as _,
                );
            }
            Parser {
                sys,
                event: None,
                _input: std::marker::PhantomData,
                done: false,
            }
        }

        /// The next event and its line (1-based), `Err` on a syntax error, `None` after one.
        pub fn next(&mut self) -> Option<Result<(Event<'_>, usize), ()>> {
            if self.done {
                return None;
            }
            self.release();
            let mut event = Box::new(MaybeUninit::<unsafe_sys::yaml_event_t>::uninit());
            // SAFETY: the parser was initialized in new(); an event filled by a successful
            // parse is read while `self` is borrowed and deleted by the next call or Drop.
            unsafe {
                if unsafe_sys::yaml_parser_parse(self.sys.as_mut_ptr(), event.as_mut_ptr()).fail {
                    self.done = true;
                    return Some(Err(()));
                }
                self.event = Some(event);
                let e = &*self.event.as_ref().expect("just set").as_ptr();
                let line = e.start_mark.line as usize + 1;
                let ev = match e.type_ {
                    unsafe_sys::YAML_DOCUMENT_START_EVENT => Event::DocumentStart,
                    unsafe_sys::YAML_STREAM_END_EVENT => {
                        self.done = true;
                        Event::StreamEnd
                    }
                    unsafe_sys::YAML_ALIAS_EVENT => Event::Alias,
                    unsafe_sys::YAML_SCALAR_EVENT => {
                        let s = &e.data.scalar;
                        Event::Scalar {
                            anchor: !s.anchor.is_null(),
                            tag: !s.tag.is_null(),
                            plain: s.style == unsafe_sys::YAML_PLAIN_SCALAR_STYLE,
                            value: if s.value.is_null() {
                                &[]
                            } else {
                                std::slice::from_raw_parts(s.value, s.length as usize)
                            },
                        }
                    }
                    unsafe_sys::YAML_SEQUENCE_START_EVENT => Event::Start {
                        map: false,
                        anchor: !e.data.sequence_start.anchor.is_null(),
                        tag: !e.data.sequence_start.tag.is_null(),
                    },
                    unsafe_sys::YAML_MAPPING_START_EVENT => Event::Start {
                        map: true,
                        anchor: !e.data.mapping_start.anchor.is_null(),
                        tag: !e.data.mapping_start.tag.is_null(),
                    },
                    unsafe_sys::YAML_SEQUENCE_END_EVENT | unsafe_sys::YAML_MAPPING_END_EVENT => {
                        Event::End
                    }
                    _ => Event::Other,
                };
                Some(Ok((ev, line)))
            }
        }

        fn release(&mut self) {
            if let Some(mut e) = self.event.take() {
                // SAFETY: the event was filled by a successful yaml_parser_parse.
                unsafe { unsafe_sys::yaml_event_delete(e.as_mut_ptr()) }
            }
        }
    }

    impl Drop for Parser<'_> {
        fn drop(&mut self) {
            self.release();
            // SAFETY: initialized in new(), deleted once.
            unsafe { unsafe_sys::yaml_parser_delete(self.sys.as_mut_ptr()) }
        }
    }
}
