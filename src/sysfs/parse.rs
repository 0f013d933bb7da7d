//! Owns the pure parsers of the text a sysfs tree, udev's database and procfs hold for any
//! device (uevent, udev properties, mountinfo, `dev`, `stat`): every function takes `&str`
//! and is tested table-driven, so no reader depends on where the text came from.

/// `KEY=VALUE` lines of a sysfs `uevent` file.
pub fn uevent(s: &str) -> Vec<(String, String)> {
    s.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// `E:KEY=VALUE` lines of a udev database file (`/run/udev/data/b8:0`).
pub fn udev_db(s: &str) -> Vec<(String, String)> {
    s.lines()
        .filter_map(|l| l.strip_prefix("E:"))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// One line of `/proc/self/mountinfo` (see proc(5)), reduced to what safety checks need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// `major:minor` of the mounted block device (`0:NN` for virtual filesystems).
    pub devnum: String,
    pub mountpoint: String,
    pub fstype: String,
    pub source: String,
    pub read_only: bool,
}

/// Parses mountinfo. Fields: id parent maj:min root mountpoint options [optional...] - fstype
/// source superoptions. Mount points escape space, tab, newline and backslash as octal.
pub fn mountinfo(s: &str) -> Vec<MountEntry> {
    s.lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let post: Vec<&str> = post.split(' ').collect();
            if pre.len() < 6 || post.len() < 2 {
                return None;
            }
            Some(MountEntry {
                devnum: pre[2].to_string(),
                mountpoint: unescape_octal(pre[4]),
                fstype: post[0].to_string(),
                source: unescape_octal(post[1]),
                read_only: pre[5].split(',').any(|o| o == "ro"),
            })
        })
        .collect()
}

fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                let v = oct
                    .iter()
                    .fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// udev's `\xNN` escapes (`ID_MODEL_ENC`, `ID_VENDOR_ENC`).
pub fn udev_unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1] == b'x' {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(b[i + 2]), hex(b[i + 3])) {
                out.push((h * 16 + l) as u8);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `dev` attribute `8:0` → (8, 0).
pub fn devnum(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.trim().split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Bytes read plus written so far, from a block device's `stat` file
/// (Documentation/block/stat.rst: fields 3 and 7 are sectors read and written, in 512-byte
/// units whatever the device's block size). The counters restart from zero when a disk is
/// re-created under the same name, so callers subtract with `saturating_sub`.
pub fn block_stat_bytes(text: &str) -> Option<u64> {
    let f: Vec<u64> = text
        .split_whitespace()
        .map(|x| x.parse().ok())
        .collect::<Option<Vec<u64>>>()?;
    let sectors = f.get(2)?.checked_add(*f.get(6)?)?;
    sectors.checked_mul(512)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines() {
        // Lines as proc(5) documents them, including an escaped space and optional fields.
        let text = "\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
36 22 8:1 / /media/usb\\040stick ro,nosuid shared:20 - vfat /dev/sda1 ro,fmask=0022
40 22 0:5 / /dev rw - devtmpfs udev rw
broken line
";
        let m = mountinfo(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].devnum, "253:0");
        assert_eq!(m[0].mountpoint, "/");
        assert!(!m[0].read_only);
        assert_eq!(m[1].mountpoint, "/media/usb stick");
        assert_eq!(m[1].fstype, "vfat");
        assert_eq!(m[1].source, "/dev/sda1");
        assert!(m[1].read_only);
    }

    #[test]
    fn udev_escapes() {
        assert_eq!(udev_unescape("Flash\\x20Disk"), "Flash Disk");
        assert_eq!(udev_unescape("a\\x2"), "a\\x2");
        assert_eq!(udev_unescape("caf\u{e9}\\x21"), "caf\u{e9}!");
        assert_eq!(udev_unescape("\\xzz"), "\\xzz");
    }

    #[test]
    fn block_stat_counts_sectors_of_512_bytes() {
        let table: &[(&str, Option<u64>)] = &[
            // A real line of this VM's /sys/block/vda/stat (6.18: 17 fields).
            (
                "  743796    69376 100677970   589918   664271   213766 111209080   857766        0   117964  1485254   461733       58 127187808    35817    28864     1752\n",
                Some((100_677_970 + 111_209_080) * 512),
            ),
            // 5.10 has 15 fields, 4.x 11: only fields 3 and 7 matter.
            ("1 0 8 0 2 0 16 0 0 0 0\n", Some(24 * 512)),
            ("1 0 8\n", None),
            ("", None),
            ("1 0 x 0 2 0 16 0 0 0 0", None),
            // A counter past u64 is not a figure.
            ("0 0 18446744073709551615 0 0 0 1 0 0 0 0", None),
        ];
        for (text, want) in table {
            assert_eq!(block_stat_bytes(text), *want, "{text:?}");
        }
    }
}
