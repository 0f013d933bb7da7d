//! Owns how a report file's bytes are decoded, for every reader of collected reports (`show`,
//! `fleet`): JSON or YAML told apart the same way, and the schema version probed alone when
//! the whole document does not decode.

use std::path::Path;

use serde::Deserialize;

/// Only the version, to explain a report that does not decode.
#[derive(Deserialize)]
pub struct Probe {
    #[serde(default)]
    pub schema_version: Option<u32>,
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

/// Decodes JSON or YAML into `T`, the decoder's message as the error.
pub fn decode<'a, T: Deserialize<'a>>(json: bool, bytes: &'a [u8]) -> Result<T, String> {
    if json {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    } else {
        serde_norway::from_slice(bytes).map_err(|e| e.to_string())
    }
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
}
