//! Owns who may upload: the token file (one token a line, `#` comments, blank lines ignored;
//! a line may be per unit or per test line) and the constant-time comparison of a request's
//! `Authorization: Bearer …` against it.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read the token file {path}: {err} (give --token-file a readable file)")]
    Read { path: PathBuf, err: std::io::Error },
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
        "the token file {path} may be read by other users (mode {mode:04o}): anyone who reads \
         it may store reports; `chmod 0640 {path}` with the collector's group, or 0600 \
         (--allow-readable-token to use it anyway)"
    )]
    Readable { path: PathBuf, mode: u32 },
}

/// The accepted tokens.
#[derive(Debug, Clone)]
pub struct Tokens(Vec<Vec<u8>>);

impl Tokens {
    /// Reads the token file; one other users may read or write is refused unless
    /// `allow_readable`.
    pub fn load(path: &Path, allow_readable: bool) -> Result<Tokens, TokenError> {
        use std::os::unix::fs::PermissionsExt;
        let read_err = |err| TokenError::Read {
            path: path.to_path_buf(),
            err,
        };
        let mode = std::fs::metadata(path)
            .map_err(read_err)?
            .permissions()
            .mode()
            & 0o7777;
        if mode & 0o007 != 0 {
            if !allow_readable {
                return Err(TokenError::Readable {
                    path: path.to_path_buf(),
                    mode,
                });
            }
            eprintln!(
                "usbperf-collect: warning: the token file {} may be read by other users (mode \
                 {mode:04o}); --allow-readable-token lets it be used",
                path.display()
            );
        }
        let text = std::fs::read_to_string(path).map_err(read_err)?;
        Tokens::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Tokens, TokenError> {
        let mut v = Vec::new();
        for (i, l) in text.lines().enumerate() {
            let t = l.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            if t.len() < 16 {
                return Err(TokenError::Short {
                    path: path.to_path_buf(),
                    line: i + 1,
                });
            }
            v.push(t.as_bytes().to_vec());
        }
        if v.is_empty() {
            return Err(TokenError::Empty(path.to_path_buf()));
        }
        Ok(Tokens(v))
    }

    /// Whether an `Authorization` header value carries an accepted token.
    pub fn allows(&self, authorization: Option<&str>) -> bool {
        // The scheme is case-insensitive (RFC 9110, section 11.1); the token is not.
        let Some(given) = authorization.map(str::trim).and_then(|h| {
            let (scheme, rest) = h.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(rest)
        }) else {
            return false;
        };
        let given = given.trim().as_bytes();
        // Every token is compared in full, so the time taken does not say how much matched.
        let mut ok = false;
        for t in &self.0 {
            ok |= ct_eq(t, given);
        }
        ok
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
}
