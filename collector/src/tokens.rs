//! Owns who may upload: the token file (one token a line, `#` comments, blank lines ignored;
//! a line is `NAME TOKEN`, naming the test line, station or unit that holds it, or a bare
//! `TOKEN` named by its line) and the constant-time comparison of a request's
//! `Authorization: Bearer …` against it, which says whose token it is: each stored report
//! records that name.

use std::path::{Path, PathBuf};

/// The largest token file read: a token a line for every station and unit of a factory.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("the token file (--token-file): {0}")]
    File(#[from] crate::files::FileError),
    #[error(
        "the token file {0} holds no token: put one token per line (e.g. `openssl rand -hex 32`)"
    )]
    Empty(PathBuf),
    #[error(
        "{path}:{line}: a token shorter than 16 characters is guessable: use `openssl rand \
         -hex 32`"
    )]
    Short { path: PathBuf, line: usize },
    #[error(
        "{path}:{line}: a token's name is letters, digits, `.`, `_` and `-`, at most 64 of \
         them, then the token after a space (`line-3 0123…`)"
    )]
    BadName { path: PathBuf, line: usize },
    #[error("{path}:{line}: the name {name:?} is given twice: give each holder its own name")]
    NameTwice {
        path: PathBuf,
        line: usize,
        name: String,
    },
}

/// The accepted tokens, each with its holder's name.
#[derive(Debug, Clone)]
pub struct Tokens(Vec<(String, Vec<u8>)>);

impl Tokens {
    /// Reads the token file; one that others than its owner may read or change (group or
    /// other bits) is refused unless `allow_readable`.
    pub fn load(path: &Path, allow_readable: bool) -> Result<Tokens, TokenError> {
        // The bits are those of the file opened and read (a FIFO or a huge file is refused,
        // never waited on or read whole), not of a path looked up twice.
        let forbid = (!allow_readable).then_some(crate::files::Forbid {
            bits: 0o077,
            what: "read or changed",
            fix: "anyone who reads it may store reports, anyone who changes it may let others \
                  in; chmod 0600 it (--allow-readable-token to use it anyway)",
        });
        let (text, mode) = crate::files::read_text(path, MAX_FILE_BYTES, forbid)?;
        if mode & 0o077 != 0 {
            eprintln!(
                "usbperf-collect: warning: the token file {} may be read or changed by other \
                 users (mode {mode:04o}); --allow-readable-token lets it be used",
                path.display()
            );
        }
        Tokens::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Tokens, TokenError> {
        let mut v: Vec<(String, Vec<u8>)> = Vec::new();
        for (i, l) in text.lines().enumerate() {
            let t = l.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let at = |line| (path.to_path_buf(), line);
            let (name, token) = match t.split_once(char::is_whitespace) {
                Some((name, token)) => {
                    let ok = name.len() <= 64
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
                    if !ok || token.trim().contains(char::is_whitespace) {
                        let (path, line) = at(i + 1);
                        return Err(TokenError::BadName { path, line });
                    }
                    (name.to_string(), token.trim())
                }
                None => (format!("line-{}", i + 1), t),
            };
            if token.len() < 16 {
                let (path, line) = at(i + 1);
                return Err(TokenError::Short { path, line });
            }
            if v.iter().any(|(n, _)| *n == name) {
                let (path, line) = at(i + 1);
                return Err(TokenError::NameTwice { path, line, name });
            }
            v.push((name, token.as_bytes().to_vec()));
        }
        if v.is_empty() {
            return Err(TokenError::Empty(path.to_path_buf()));
        }
        Ok(Tokens(v))
    }

    /// How many tokens it holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds none (never, once parsed).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether an `Authorization` header value carries an accepted token.
    pub fn allows(&self, authorization: Option<&str>) -> bool {
        self.holder(authorization).is_some()
    }

    /// The name of the token an `Authorization` header value carries, if it is accepted.
    pub fn holder(&self, authorization: Option<&str>) -> Option<&str> {
        // The scheme is case-insensitive (RFC 9110, section 11.1); the token is not.
        let given = authorization.map(str::trim).and_then(|h| {
            let (scheme, rest) = h.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(rest)
        })?;
        let given = given.trim().as_bytes();
        // Every token is compared in full and every one is compared, so the time taken does
        // not say how much of a token matched.
        let mut holder = None;
        for (name, t) in &self.0 {
            if ct_eq(t, given) {
                holder = Some(name.as_str());
            }
        }
        holder
    }
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    // Lengths differ: not equal (subtle compares equal lengths only; a token's length is no
    // secret worth hiding, they are all 16 characters or more).
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_file_and_headers() {
        let p = Path::new("tokens");
        let t = Tokens::parse("# line 3\n0123456789abcdef\n\n  fedcba9876543210  \n", p).unwrap();
        let table = [
            (Some("Bearer 0123456789abcdef"), true),
            (Some("Bearer fedcba9876543210"), true),
            (Some("Bearer 0123456789abcdeX"), false),
            (Some("Bearer 0123456789abcde"), false),
            (Some("Basic 0123456789abcdef"), false),
            (Some("bearer 0123456789abcdef"), true),
            (Some("BEARER  0123456789abcdef"), true),
            (Some("Bearer 0123456789ABCDEF"), false),
            (Some("Bearer"), false),
            (Some(""), false),
            (None, false),
        ];
        for (h, want) in table {
            assert_eq!(t.allows(h), want, "{h:?}");
        }
        assert!(matches!(
            Tokens::parse("# none\n", p),
            Err(TokenError::Empty(_))
        ));
        assert!(matches!(
            Tokens::parse("short\n", p),
            Err(TokenError::Short { line: 1, .. })
        ));
    }

    /// A line names its token's holder (`NAME TOKEN`), or its line number names it; the
    /// header's token says whose it is.
    #[test]
    fn named_tokens_say_whose_they_are() {
        let p = Path::new("tokens");
        let t = Tokens::parse(
            "line-a 0123456789abcdef\n# station 2\nstation_2.b\tfedcba9876543210\n\
             aaaaaaaaaaaaaaaa\n",
            p,
        )
        .unwrap();
        for (h, who) in [
            ("Bearer 0123456789abcdef", Some("line-a")),
            ("Bearer fedcba9876543210", Some("station_2.b")),
            ("Bearer aaaaaaaaaaaaaaaa", Some("line-4")),
            ("Bearer line-a", None),
            ("Bearer line-a 0123456789abcdef", None),
        ] {
            assert_eq!(t.holder(Some(h)), who, "{h}");
        }
        for (text, line) in [
            ("a/b 0123456789abcdef\n", 1),
            ("a 0123456789abcdef x\n", 1),
            (&format!("{} 0123456789abcdef\n", "n".repeat(65)), 1),
        ] {
            assert!(
                matches!(Tokens::parse(text, p), Err(TokenError::BadName { line: l, .. }) if l == line),
                "{text}"
            );
        }
        assert!(matches!(
            Tokens::parse("a 0123456789abcdef\na fedcba9876543210\n", p),
            Err(TokenError::NameTwice { line: 2, .. })
        ));
        assert!(matches!(
            Tokens::parse("a short\n", p),
            Err(TokenError::Short { line: 1, .. })
        ));
    }
}
