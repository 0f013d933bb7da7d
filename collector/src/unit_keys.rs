//! Owns the factory's list of unit keys (`--unit-keys FILE`): which Ed25519 key signs each
//! unit's reports. With a list, a unit's key is not learnt from its first report: a report is
//! stored only when its unit is listed and it is signed with that unit's key, so a token
//! holder can neither enroll a unit before it reports nor write in an unlisted unit's name.
//!
//! The file: one unit a line, `KEY UNIT` (the key's 64 hex digits, then the unit's name as its
//! reports give it, spaces allowed), `#` comments. `usbperf-matrix upload --print-key` prints
//! a unit's line. Read again on SIGHUP.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The largest list read: a million units at about 90 bytes a line.
pub const MAX_FILE_BYTES: u64 = 128 << 20;

/// The longest unit name (the collector's own limit on a unit column).
pub const MAX_NAME_CHARS: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum UnitKeysError {
    #[error("the unit key list: {0}")]
    File(#[from] crate::files::FileError),
    #[error(
        "{path}:{line}: expected `KEY UNIT` (the unit's key in 64 hex digits, a space, then \
         the unit's name of at most {MAX_NAME_CHARS} characters), as `usbperf-matrix upload \
         --print-key` prints it"
    )]
    BadLine { path: PathBuf, line: usize },
    #[error("{path}:{line}: unit {unit:?} is listed twice (first on line {first})")]
    Twice {
        path: PathBuf,
        line: usize,
        first: usize,
        unit: String,
    },
    #[error("the unit key list {0} lists no unit: every report would be refused")]
    Empty(PathBuf),
}

/// The listed keys, by unit name (keys as lowercase hex, as units send them).
#[derive(Debug, Clone)]
pub struct UnitKeys {
    keys: HashMap<String, (String, usize)>,
}

impl UnitKeys {
    /// Reads the list: a regular file within [`MAX_FILE_BYTES`] that only its owner may
    /// change.
    pub fn load(path: &Path) -> Result<UnitKeys, UnitKeysError> {
        let (text, _) = crate::files::read_text(
            path,
            MAX_FILE_BYTES,
            Some(crate::files::Forbid {
                bits: 0o022,
                what: "changed",
                fix: "anyone on this server could list a key of their own; chmod go-w it",
            }),
        )?;
        UnitKeys::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<UnitKeys, UnitKeysError> {
        let mut keys: HashMap<String, (String, usize)> = HashMap::new();
        for (i, l) in text.lines().enumerate() {
            let line = i + 1;
            let t = l.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let bad = || UnitKeysError::BadLine {
                path: path.to_path_buf(),
                line,
            };
            let (key, unit) = t.split_once(char::is_whitespace).ok_or_else(bad)?;
            let unit = unit.trim();
            let key_ok = key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit());
            let unit_ok = !unit.is_empty()
                && unit.chars().count() <= MAX_NAME_CHARS
                && !unit.chars().any(char::is_control);
            if !key_ok || !unit_ok {
                return Err(bad());
            }
            if let Some((_, first)) = keys.get(unit) {
                return Err(UnitKeysError::Twice {
                    path: path.to_path_buf(),
                    line,
                    first: *first,
                    unit: unit.to_string(),
                });
            }
            keys.insert(unit.to_string(), (key.to_ascii_lowercase(), line));
        }
        if keys.is_empty() {
            return Err(UnitKeysError::Empty(path.to_path_buf()));
        }
        Ok(UnitKeys { keys })
    }

    /// How many units are listed.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether a report of `unit`, signed by `signer` (its verified key, `None` when
    /// unsigned), may be stored; else why not, in the words of the 403.
    pub fn check(&self, unit: &str, signer: Option<&str>) -> Result<(), String> {
        let Some((listed, _)) = self.keys.get(unit) else {
            return Err(format!(
                "unit {unit:?} is not in the factory's list of unit keys: add its line \
                 (`usbperf-matrix upload --print-key` on the unit) and send SIGHUP to the \
                 collector"
            ));
        };
        match signer {
            Some(k) if k.eq_ignore_ascii_case(listed) => Ok(()),
            Some(_) => Err(format!(
                "unit {unit:?} is listed with another key: a report in its name must be \
                 signed with the listed key"
            )),
            None => Err(format!(
                "unit {unit:?} is listed with a key, and this report is not signed"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";
    const K2: &str = "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025";

    #[test]
    fn the_list_is_read_strictly_and_says_where_it_is_wrong() {
        let p = Path::new("/etc/usbperf-collect/unit-keys");
        let ok = UnitKeys::parse(
            &format!(
                "# line 3\n{K1} 15000001\n\n{} Apalis unit 7\n",
                K2.to_uppercase()
            ),
            p,
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok.check("15000001", Some(K1)), Ok(()));
        assert_eq!(
            ok.check("Apalis unit 7", Some(K2)),
            Ok(()),
            "case of the hex"
        );
        for (text, want) in [
            (format!("{K1}\n"), ":1: expected `KEY UNIT`"),
            (format!("{} u\n", &K1[..60]), ":1: expected"),
            (
                format!("{K1} u\n{K2} u\n"),
                ":2: unit \"u\" is listed twice (first on line 1)",
            ),
            (format!("{K1} {}\n", "x".repeat(257)), ":1: expected"),
            ("# nothing\n".to_string(), "lists no unit"),
        ] {
            let e = UnitKeys::parse(&text, p).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_report_is_stored_only_for_a_listed_unit_signed_by_its_key() {
        let keys = UnitKeys::parse(&format!("{K1} 15000001\n"), Path::new("k")).unwrap();
        let e = keys.check("15000001", Some(K2)).unwrap_err();
        assert!(e.contains("another key"), "{e}");
        let e = keys.check("15000001", None).unwrap_err();
        assert!(e.contains("not signed"), "{e}");
        let e = keys.check("15000002", Some(K1)).unwrap_err();
        assert!(e.contains("not in the factory's list"), "{e}");
    }
}
