//! Owns human units on the command line and in reports: sizes (`4k`, `1M`, `1G`, `512`, binary
//! multiples of 1024) and durations (`500ms`, `5s`, `2m`, `1h`).

use std::time::Duration;

/// A size or duration the user typed that we cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("size {0:?} is not understood: write a whole number with an optional binary suffix k, M, G or T (k = 1024 bytes), e.g. 4k, 1M, 512")]
    BadSize(String),
    #[error("size {0:?} is too large: the largest size is 16E (2^64 - 1 bytes)")]
    SizeOverflow(String),
    #[error(
        "size {0:?} reads as bits (a lowercase b after a multiple): write bytes, e.g. {1} or {1}B \
         (binary: k = 1024)"
    )]
    Bits(String, String),
    #[error("duration {0:?} is not understood: write a whole number with a suffix ms, s, m or h, e.g. 500ms, 5s, 2m (a bare number means seconds)")]
    BadDuration(String),
    #[error(
        "duration {0:?} is too long: the longest duration is {MAX_DURATION_SECS}s (about 31 years)"
    )]
    DurationTooLong(String),
}

/// The longest duration any setting takes; one bound for text and bare numbers alike, so a
/// value that was read is always written back in a form that reads again.
pub const MAX_DURATION_SECS: u64 = 1_000_000_000;

const SIZE_SUFFIXES: [(&str, u32); 6] = [
    ("", 0),
    ("k", 10),
    ("m", 20),
    ("g", 30),
    ("t", 40),
    ("p", 50),
];

/// Parses `512`, `4k`, `4K`, `4KiB`, `1M`, `1MB`, `1G`: every multiple is binary (k = 1024)
/// because block sizes and device sizes are powers of two, as in fio and dd.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, suffix) = trimmed.split_at(digits_end);
    if number.is_empty() {
        return Err(UnitError::BadSize(text.to_string()));
    }
    // `7Gb` is gigabits to anyone who reads it: refused, not taken as 7 GiB. A lone `b` is
    // bytes (`100b`), as in dd.
    let raw_suffix = suffix.trim();
    if raw_suffix.len() == 2 && raw_suffix.ends_with('b') && raw_suffix != "bb" {
        let multiple = &raw_suffix[..1];
        if SIZE_SUFFIXES[1..]
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case(multiple))
        {
            return Err(UnitError::Bits(
                text.to_string(),
                format!(
                    "{number}{}",
                    multiple.to_ascii_uppercase().replace('K', "k")
                ),
            ));
        }
    }
    let suffix = raw_suffix.to_ascii_lowercase();
    // Accept `k`, `kb`, `kib` alike; `b` alone means bytes.
    let core = suffix
        .strip_suffix("ib")
        .or_else(|| suffix.strip_suffix('b'))
        .unwrap_or(&suffix);
    let shift = SIZE_SUFFIXES
        .iter()
        .find(|(name, _)| *name == core)
        .map(|(_, shift)| *shift)
        .ok_or_else(|| UnitError::BadSize(text.to_string()))?;
    let value: u64 = number
        .parse()
        .map_err(|_| UnitError::SizeOverflow(text.to_string()))?;
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| UnitError::SizeOverflow(text.to_string()))
}

/// Prints a size with the largest binary suffix that divides it exactly (`4k`, `1M`, `1536k`),
/// so that `parse_size(format_size(x)) == x`.
pub fn format_size(bytes: u64) -> String {
    if bytes == 0 {
        return "0".to_string();
    }
    for (name, shift) in SIZE_SUFFIXES.iter().rev() {
        let unit = 1u64 << shift;
        if *shift > 0 && bytes % unit == 0 {
            return format!(
                "{}{}",
                bytes / unit,
                name.to_ascii_uppercase().replace('K', "k")
            );
        }
    }
    bytes.to_string()
}

/// A figure for people, to about three significant digits: `1132`, `97.1`, `1.75`. The one
/// rule of every human table (the fleet's, the matrix's) and of `human_bytes`.
pub fn three_digits(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A byte count for people: `512 B`, `11.4 MiB`, `3.73 GiB` (binary units, 3 significant
/// digits). `format_size` is the exact form configs and reports take; this one is for reading.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{} {}", three_digits(v), UNITS[i])
}

/// Parses `500ms`, `5s`, `2m`, `1h`, `3` (seconds); fractions such as `1.5s` are accepted.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let trimmed = text.trim();
    let number_end = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, suffix) = trimmed.split_at(number_end);
    let value: f64 = number
        .parse()
        .map_err(|_| UnitError::BadDuration(text.to_string()))?;
    let seconds_per_unit = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "s" | "sec" => 1.0,
        "ms" => 1e-3,
        "us" => 1e-6,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(UnitError::BadDuration(text.to_string())),
    };
    let seconds = value * seconds_per_unit;
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(UnitError::BadDuration(text.to_string()));
    }
    if seconds > MAX_DURATION_SECS as f64 {
        return Err(UnitError::DurationTooLong(text.to_string()));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A duration given as a bare number of seconds, under the same bound as [`parse_duration`].
pub fn duration_from_secs(secs: u64) -> Result<Duration, UnitError> {
    if secs > MAX_DURATION_SECS {
        return Err(UnitError::DurationTooLong(secs.to_string()));
    }
    Ok(Duration::from_secs(secs))
}

/// Prints a duration in the largest unit that holds it exactly (`500ms`, `5s`, `2m`).
pub fn format_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms == 0 {
        return format!("{}us", duration.as_micros());
    }
    if ms % 3_600_000 == 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms % 60_000 == 0 {
        format!("{}m", ms / 60_000)
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Bytes per second in MiB/s (1 MiB = 1048576 bytes), the unit every report uses.
pub fn mib_per_s(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / 1048576.0 / seconds
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_reads_like_a_person_writes() {
        let table = [
            (0, "0 B"),
            (512, "512 B"),
            (16 << 20, "16.0 MiB"),
            (11_985_920, "11.4 MiB"),
            (1 << 30, "1.00 GiB"),
            (4_000_000_000, "3.73 GiB"),
            (u64::MAX, "16.0 EiB"),
        ];
        for (b, want) in table {
            assert_eq!(human_bytes(b), want, "{b}");
        }
    }

    #[test]
    fn sizes_are_binary() {
        assert_eq!(parse_size("512").unwrap(), 512);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("4KiB").unwrap(), 4096);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("1MB").unwrap(), 1 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("2t").unwrap(), 2 << 40);
        assert_eq!(parse_size("100b").unwrap(), 100);
    }

    #[test]
    fn bad_sizes_are_rejected() {
        assert!(matches!(parse_size(""), Err(UnitError::BadSize(_))));
        assert!(matches!(parse_size("k"), Err(UnitError::BadSize(_))));
        assert!(matches!(parse_size("4x"), Err(UnitError::BadSize(_))));
        assert!(matches!(parse_size("-4k"), Err(UnitError::BadSize(_))));
        assert!(matches!(
            parse_size("99999999999P"),
            Err(UnitError::SizeOverflow(_))
        ));
        // Bits, not bytes: refused with the byte spelling to write instead.
        for (bits, bytes) in [("7Gb", "7G"), ("512kb", "512k"), ("1 Mb", "1M")] {
            match parse_size(bits) {
                Err(e @ UnitError::Bits(..)) => {
                    assert!(e.to_string().contains(&format!("{bytes}B")), "{e}")
                }
                other => panic!("{bits}: {other:?}"),
            }
        }
    }

    #[test]
    fn sizes_round_trip() {
        for bytes in [0u64, 1, 512, 4096, 1536 * 1024, 1 << 20, 3 << 30, 1 << 40] {
            assert_eq!(parse_size(&format_size(bytes)).unwrap(), bytes, "{bytes}");
        }
        assert_eq!(format_size(4096), "4k");
        assert_eq!(format_size(1 << 20), "1M");
        assert_eq!(format_size(1000), "1000");
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(
            parse_duration("1000000001"),
            Err(UnitError::DurationTooLong("1000000001".into()))
        );
        assert_eq!(
            duration_from_secs(18446744073709),
            Err(UnitError::DurationTooLong("18446744073709".into()))
        );
        let longest = duration_from_secs(MAX_DURATION_SECS).unwrap();
        assert_eq!(parse_duration(&format_duration(longest)).unwrap(), longest);
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn durations_round_trip() {
        for d in [
            Duration::from_millis(500),
            Duration::from_secs(5),
            Duration::from_secs(120),
            Duration::from_secs(7200),
        ] {
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }
    }

    #[test]
    fn mib_per_s_divides() {
        assert_eq!(mib_per_s(10 << 20, 2.0), 5.0);
        assert_eq!(mib_per_s(10, 0.0), 0.0);
    }
}
