//! Owns what travels beside a report's bytes: the headers of the unit's public key and of its
//! Ed25519 signature over the exact bytes when a unit sends it, the signature file that sits
//! beside a report file (`<report>.sig`), the one check of a signature, their hex form, and
//! the SHA-256 digest that names a body. The unit signs (`usbperf::upload::key`); the
//! collector, `show` and `fleet` verify, all through [`verify`].

use std::path::{Path, PathBuf};

/// The header with the report's id, so the collector (and a proxy's log) sees it before
/// reading the body.
pub const REPORT_ID_HEADER: &str = "X-Usbperf-Report-Id";
/// The header with the unit's public key (64 hex digits).
pub const KEY_HEADER: &str = "X-Usbperf-Key";
/// The header with the signature of the body's bytes (128 hex digits).
pub const SIGNATURE_HEADER: &str = "X-Usbperf-Signature";

/// Bytes as lowercase hex digits.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `N` bytes from exactly `2 N` hex digits.
pub fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let s = s.as_bytes();
    if s.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = digit(s[2 * i])? << 4 | digit(s[2 * i + 1])?;
    }
    Some(out)
}

/// The SHA-256 of `bytes`, 64 hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex(&Sha256::digest(bytes))
}

/// Why a key and signature do not vouch for some bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("the key is not an Ed25519 public key (64 hex digits)")]
    Key,
    #[error("the signature is not an Ed25519 signature (128 hex digits)")]
    Signature,
    #[error("the signature does not hold for these bytes under its key")]
    DoesNotHold,
}

/// Checks that `signature_hex` is `key_hex`'s Ed25519 signature of exactly `bytes` (strict
/// verification: no malleable or small-order forms). The key, lowercase, when it holds.
pub fn verify(key_hex: &str, signature_hex: &str, bytes: &[u8]) -> Result<String, SealError> {
    let key = parse_hex::<32>(key_hex.trim())
        .and_then(|k| ed25519_dalek::VerifyingKey::from_bytes(&k).ok())
        .ok_or(SealError::Key)?;
    let sig = parse_hex::<64>(signature_hex.trim())
        .map(|s| ed25519_dalek::Signature::from_bytes(&s))
        .ok_or(SealError::Signature)?;
    key.verify_strict(bytes, &sig)
        .map_err(|_| SealError::DoesNotHold)?;
    Ok(key_hex.trim().to_ascii_lowercase())
}

/// The signature file of a report file: its name with `.sig` added
/// (`usbperf-vm-20261206T101500Z.yaml.sig`).
pub fn seal_path(report: &Path) -> PathBuf {
    let mut name = report.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

/// A signature file is two short lines; anything larger is not one, and is not read.
pub const MAX_SEAL_BYTES: u64 = 1024;

/// The first line of a signature file, naming its layout.
const SEAL_MAGIC: &str = "usbperf-signature 1";

/// The text of a signature file: the layout's name, then the unit's public key and the
/// signature of the report file's exact bytes, as `key <hex>` and `signature <hex>` lines.
pub fn seal_text(key_hex: &str, signature_hex: &str) -> String {
    format!("{SEAL_MAGIC}\nkey {key_hex}\nsignature {signature_hex}\n")
}

/// What a report file's signature says of its bytes, as `show` and `fleet` tell it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealState {
    /// No signature file beside the report: the unit signed nothing (it has no `upload:`
    /// section), or the file was not copied with the report.
    Unsigned,
    /// The signature holds: the bytes are the ones the holder of this key (hex) signed.
    Holds { key: String },
    /// A signature file is there and does not vouch for these bytes: why, in words.
    Broken { why: String },
}

/// The state of `bytes`, read from `report`, against the signature file beside it (read
/// bounded to [`MAX_SEAL_BYTES`], a regular file only).
pub fn check_beside(report: &Path, bytes: &[u8]) -> SealState {
    let path = seal_path(report);
    let text = match crate::untrusted::read_file(&path, MAX_SEAL_BYTES) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return SealState::Unsigned,
        Err(e) => {
            return SealState::Broken {
                why: format!("its signature file {} cannot be read: {e}", path.display()),
            }
        }
        Ok(b) => b,
    };
    let broken = |why: String| SealState::Broken { why };
    let text = match String::from_utf8(text) {
        Ok(t) => t,
        Err(_) => return broken(format!("{} is not a signature file", path.display())),
    };
    let mut lines = text.lines();
    let field = |line: Option<&str>, name: &str| {
        line.and_then(|l| l.strip_prefix(name))
            .and_then(|v| v.strip_prefix(' '))
            .map(str::to_owned)
    };
    let magic = lines.next();
    let (key, sig) = (field(lines.next(), "key"), field(lines.next(), "signature"));
    let (Some(key), Some(sig)) = (key, sig) else {
        return broken(format!(
            "{} is not a signature file (expected `{SEAL_MAGIC}`, a `key` and a `signature` \
             line)",
            path.display()
        ));
    };
    if magic != Some(SEAL_MAGIC) || lines.next().is_some() {
        return broken(format!(
            "{} is not a signature file this version reads (expected `{SEAL_MAGIC}` and two \
             lines)",
            path.display()
        ));
    }
    match verify(&key, &sig, bytes) {
        Ok(key) => SealState::Holds { key },
        Err(SealError::DoesNotHold) => broken(
            "its signature does not hold: the report changed after the unit signed it, or the \
             signature file belongs to another report"
                .into(),
        ),
        Err(e) => broken(format!("{}: {e}", path.display())),
    }
}

/// A key as people compare it by eye: its first and last 8 hex digits.
pub fn key_short(key_hex: &str) -> String {
    match (
        key_hex.get(..8),
        key_hex.get(key_hex.len().saturating_sub(8)..),
    ) {
        (Some(a), Some(b)) if key_hex.len() > 16 => format!("{a}..{b}"),
        _ => key_hex.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key from a fixed seed: the tests need a signature, not a secret.
    fn signed(bytes: &[u8]) -> (String, String) {
        use ed25519_dalek::{Signer, SigningKey};
        let key = SigningKey::from_bytes(&[7u8; 32]);
        (
            hex(key.verifying_key().as_bytes()),
            hex(&key.sign(bytes).to_bytes()),
        )
    }

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("usbperf-seal-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_signature_holds_for_its_bytes_and_for_no_others() {
        let (key, sig) = signed(b"report");
        assert_eq!(verify(&key, &sig, b"report"), Ok(key.clone()));
        assert_eq!(verify(&key, &sig, b"report "), Err(SealError::DoesNotHold));
        assert_eq!(verify(&key[2..], &sig, b"report"), Err(SealError::Key));
        assert_eq!(
            verify(&key, &sig[2..], b"report"),
            Err(SealError::Signature)
        );
        // Another key's signature of the same bytes does not hold under this key.
        let other = {
            use ed25519_dalek::{Signer, SigningKey};
            hex(&SigningKey::from_bytes(&[9u8; 32])
                .sign(b"report")
                .to_bytes())
        };
        assert_eq!(verify(&key, &other, b"report"), Err(SealError::DoesNotHold));
    }

    #[test]
    fn the_file_beside_a_report_says_whether_it_holds() {
        let d = dir("beside");
        let report = d.join("r.yaml");
        let bytes = b"schema_version: 2\n";
        std::fs::write(&report, bytes).unwrap();
        assert_eq!(check_beside(&report, bytes), SealState::Unsigned);

        let (key, sig) = signed(bytes);
        std::fs::write(seal_path(&report), seal_text(&key, &sig)).unwrap();
        assert_eq!(d.join("r.yaml.sig"), seal_path(&report));
        assert_eq!(
            check_beside(&report, bytes),
            SealState::Holds { key: key.clone() }
        );

        // One byte changed after signing.
        let state = check_beside(&report, b"schema_version: 3\n");
        assert!(
            matches!(&state, SealState::Broken { why } if why.contains("changed after the unit signed")),
            "{state:?}"
        );
        // Not a signature file, a damaged one, and one too large to be one.
        for (text, says) in [
            ("hello\n".to_string(), "is not a signature file"),
            (seal_text(&key, &sig[..100]), "128 hex digits"),
            (format!("{}extra\n", seal_text(&key, &sig)), "two lines"),
            ("x".repeat(2000), "more than the 1024 bytes"),
        ] {
            std::fs::write(seal_path(&report), &text).unwrap();
            let state = check_beside(&report, bytes);
            assert!(
                matches!(&state, SealState::Broken { why } if why.contains(says)),
                "{text:?}: {state:?}"
            );
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_key_is_shortened_for_the_eye_only_when_long() {
        assert_eq!(key_short(&"ab".repeat(32)), "abababab..abababab");
        assert_eq!(key_short("abcd"), "abcd");
    }

    #[test]
    fn hex_round_trips_and_refuses_a_wrong_length_or_digit() {
        let b = [0x00, 0x7f, 0xa5, 0xff];
        assert_eq!(super::hex(&b), "007fa5ff");
        assert_eq!(super::parse_hex::<4>("007fa5ff"), Some(b));
        assert_eq!(super::parse_hex::<4>("007FA5FF"), Some(b));
        for bad in ["007fa5f", "007fa5ff0", "007fa5fg", ""] {
            assert_eq!(super::parse_hex::<4>(bad), None, "{bad}");
        }
        // The digest of nothing, as sha256sum prints it.
        assert_eq!(
            super::sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
