//! Owns what travels beside a report's bytes when a unit sends it: the headers of the unit's
//! public key and of its Ed25519 signature over the exact bytes, their hex form, and the
//! SHA-256 digest that names a body. The unit signs (`usbperf::upload::key`), the collector
//! verifies; both read the same names here.

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

#[cfg(test)]
mod tests {
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
