//! Owns the parsing of `/dev/kmsg` records into `KmsgRecord`: pure, no I/O.
//!
//! Record format (Documentation/ABI/testing/dev-kmsg, kernel/printk/printk.c
//! `info_print_ext_header` / `msg_add_ext_text` / `msg_add_dict_text`):
//!
//! ```text
//! prio,seq,ts_usec,flags[,more...];message\n
//!  SUBSYSTEM=usb\n
//!  DEVICE=c189:1\n
//! ```
//!
//! `prio` is `facility << 3 | level`; `flags` is `-` or `c` (continuation); further comma
//! fields (`caller=T123` with CONFIG_PRINTK_CALLER) may follow and are ignored. The kernel
//! escapes every byte below 0x20, from 0x7f up, and `\` itself as `\xHH` in both the message
//! and the dictionary values, so a raw record is plain ASCII and one record never spans two
//! header lines.

use serde::{Deserialize, Serialize};

/// Syslog facility of kernel messages (`LOG_KERN`).
pub const FACILITY_KERNEL: u8 = 0;
/// Syslog facility the kernel gives to lines userspace writes into `/dev/kmsg` without one
/// (`LOG_USER`, kernel/printk/printk.c `devkmsg_write`).
pub const FACILITY_USER: u8 = 1;

/// One `/dev/kmsg` record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KmsgRecord {
    /// Sequence number; consecutive unless records were lost.
    pub seq: u64,
    /// Monotonic timestamp (CLOCK_MONOTONIC since boot, µs): what dmesg prints as `[s.us]`.
    pub ts_usec: u64,
    /// Log level 0 (emerg) … 7 (debug).
    pub level: u8,
    /// Syslog facility: 0 kernel, 1 user (written into /dev/kmsg by a program).
    pub facility: u8,
    /// The message text with `\xHH` escapes undone (what dmesg shows).
    pub message: String,
    /// ` SUBSYSTEM=` dictionary value (`usb`, `scsi`, `block`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subsystem: Option<String>,
    /// ` DEVICE=` dictionary value: `b8:0` (block major:minor), `c189:1` (char), `n2`
    /// (netdev ifindex) or `+subsystem:name` (`+scsi:0:0:0:0`, `+usb:1-1:1.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Records the kernel overwrote (or dropped) right before this one, unread: set by the
    /// watcher from `EPIPE` and sequence gaps, never by the parser.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lost_before: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl KmsgRecord {
    /// The record came from the kernel, not from a program writing into /dev/kmsg.
    pub fn is_kernel(&self) -> bool {
        self.facility == FACILITY_KERNEL
    }
}

/// Why a record did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KmsgParseError {
    #[error("empty kmsg record")]
    Empty,
    #[error("kmsg record has no `;` between header and message: {0:?}")]
    NoMessage(String),
    #[error("kmsg record header {header:?}: field {field} is not a number")]
    BadField { header: String, field: &'static str },
    #[error("kmsg record header {0:?} has fewer than 4 fields (prio,seq,ts_usec,flags)")]
    ShortHeader(String),
}

/// Parses one record as `read(2)` on `/dev/kmsg` returns it (trailing newline optional).
pub fn parse_record(raw: &str) -> Result<KmsgRecord, KmsgParseError> {
    let raw = raw.strip_suffix('\n').unwrap_or(raw);
    if raw.is_empty() {
        return Err(KmsgParseError::Empty);
    }
    let mut lines = raw.split('\n');
    let first = lines.next().unwrap_or_default();
    let (header, message) = first
        .split_once(';')
        .ok_or_else(|| KmsgParseError::NoMessage(first.to_string()))?;
    let mut fields = header.split(',');
    let mut num = |field: &'static str| -> Result<u64, KmsgParseError> {
        let f = fields
            .next()
            .ok_or_else(|| KmsgParseError::ShortHeader(header.to_string()))?;
        f.trim()
            .parse::<u64>()
            .map_err(|_| KmsgParseError::BadField {
                header: header.to_string(),
                field,
            })
    };
    let prio = num("prio")?;
    let seq = num("seq")?;
    let ts_usec = num("ts_usec")?;
    if fields.next().is_none() {
        return Err(KmsgParseError::ShortHeader(header.to_string()));
    }
    let mut rec = KmsgRecord {
        seq,
        ts_usec,
        level: (prio & 7) as u8,
        facility: u8::try_from(prio >> 3).unwrap_or(u8::MAX),
        message: unescape(message),
        subsystem: None,
        device: None,
        lost_before: 0,
    };
    // Dictionary lines start with one space (printk.c `msg_add_dict_text`: " %s=%s\n").
    for line in lines {
        let Some(kv) = line.strip_prefix(' ') else {
            continue;
        };
        match kv.split_once('=') {
            Some(("SUBSYSTEM", v)) => rec.subsystem = Some(unescape(v)),
            Some(("DEVICE", v)) => rec.device = Some(unescape(v)),
            _ => {}
        }
    }
    Ok(rec)
}

/// Undoes the kernel's `\xHH` escaping; anything else (including a malformed escape) stays
/// as it is. Bytes that do not form UTF-8 become U+FFFD.
pub fn unescape(s: &str) -> String {
    if !s.contains("\\x") {
        return s.to_string();
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1] == b'x' {
            if let (Some(hi), Some(lo)) = (hex_digit(b[i + 2]), hex_digit(b[i + 3])) {
                out.push(hi << 4 | lo);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Case {
        raw: &'static str,
        seq: u64,
        ts: u64,
        level: u8,
        facility: u8,
        message: &'static str,
        subsystem: Option<&'static str>,
        device: Option<&'static str>,
    }

    #[test]
    fn parses_records() {
        let cases = [
            // Documentation/ABI/testing/dev-kmsg, first example.
            Case {
                raw: "7,160,424069,-;pci_root PNP0A03:00: host bridge window [io  0x0000-0x0cf7] (ignored)\n SUBSYSTEM=acpi\n DEVICE=+acpi:PNP0A03:00\n",
                seq: 160,
                ts: 424069,
                level: 7,
                facility: 0,
                message: "pci_root PNP0A03:00: host bridge window [io  0x0000-0x0cf7] (ignored)",
                subsystem: Some("acpi"),
                device: Some("+acpi:PNP0A03:00"),
            },
            // A USB device (char major 189) and a SCSI device (no devt: `+scsi:`); texts from
            // tests/fixtures/qemu/meta/x86-mixed.console.txt.
            Case {
                raw: "6,512,5554029,-;usb 1-1: new high-speed USB device number 2 using ehci-pci\n SUBSYSTEM=usb\n DEVICE=c189:1\n",
                seq: 512,
                ts: 5554029,
                level: 6,
                facility: 0,
                message: "usb 1-1: new high-speed USB device number 2 using ehci-pci",
                subsystem: Some("usb"),
                device: Some("c189:1"),
            },
            Case {
                raw: "5,530,5849711,-;sd 0:0:0:0: [sda] 131072 512-byte logical blocks: (67.1 MB/64.0 MiB)\n SUBSYSTEM=scsi\n DEVICE=+scsi:0:0:0:0\n",
                seq: 530,
                ts: 5849711,
                level: 5,
                facility: 0,
                message: "sd 0:0:0:0: [sda] 131072 512-byte logical blocks: (67.1 MB/64.0 MiB)",
                subsystem: Some("scsi"),
                device: Some("+scsi:0:0:0:0"),
            },
            // Block layer error: no dictionary (block/blk-mq.c `blk_print_req_error` is a plain
            // printk_ratelimited). Recorded on this machine from a loop device.
            Case {
                raw: "3,348,762403318,-;I/O error, dev loop0, sector 0 op 0x1:(WRITE) flags 0x8800 phys_seg 1 prio class 2\n",
                seq: 348,
                ts: 762403318,
                level: 3,
                facility: 0,
                message: "I/O error, dev loop0, sector 0 op 0x1:(WRITE) flags 0x8800 phys_seg 1 prio class 2",
                subsystem: None,
                device: None,
            },
            // Written by a program: `<3>` level with the default user facility (prio 11).
            Case {
                raw: "11,347,751052343,-;usbperf-probe: hello\n",
                seq: 347,
                ts: 751052343,
                level: 3,
                facility: 1,
                message: "usbperf-probe: hello",
                subsystem: None,
                device: None,
            },
            // CONFIG_PRINTK_CALLER adds a field after flags; a block device dictionary.
            Case {
                raw: "4,99,1000,-,caller=T42;sda: sda1\n SUBSYSTEM=block\n DEVICE=b8:0",
                seq: 99,
                ts: 1000,
                level: 4,
                facility: 0,
                message: "sda: sda1",
                subsystem: Some("block"),
                device: Some("b8:0"),
            },
            // Escapes: a backslash, a tab and a UTF-8 sequence; a continuation flag.
            Case {
                raw: "6,7,8,c;a\\x5cb\\x09c \\xc3\\xa9\n",
                seq: 7,
                ts: 8,
                level: 6,
                facility: 0,
                message: "a\\b\tc é",
                subsystem: None,
                device: None,
            },
            // A `;` inside the message belongs to the message.
            Case {
                raw: "6,1,2,-;x; y\n",
                seq: 1,
                ts: 2,
                level: 6,
                facility: 0,
                message: "x; y",
                subsystem: None,
                device: None,
            },
        ];
        for c in cases {
            let r = parse_record(c.raw).unwrap_or_else(|e| panic!("{:?}: {e}", c.raw));
            assert_eq!(r.seq, c.seq, "{:?}", c.raw);
            assert_eq!(r.ts_usec, c.ts, "{:?}", c.raw);
            assert_eq!(r.level, c.level, "{:?}", c.raw);
            assert_eq!(r.facility, c.facility, "{:?}", c.raw);
            assert_eq!(r.message, c.message, "{:?}", c.raw);
            assert_eq!(r.subsystem.as_deref(), c.subsystem, "{:?}", c.raw);
            assert_eq!(r.device.as_deref(), c.device, "{:?}", c.raw);
            assert_eq!(r.lost_before, 0);
        }
    }

    #[test]
    fn rejects_malformed_records() {
        let cases: [(&str, KmsgParseError); 5] = [
            ("", KmsgParseError::Empty),
            ("\n", KmsgParseError::Empty),
            (
                "no header here\n",
                KmsgParseError::NoMessage("no header here".into()),
            ),
            ("6,1,2;msg", KmsgParseError::ShortHeader("6,1,2".into())),
            (
                "6,x,2,-;msg",
                KmsgParseError::BadField {
                    header: "6,x,2,-".into(),
                    field: "seq",
                },
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(parse_record(raw), Err(want), "{raw:?}");
        }
    }

    #[test]
    fn unescape_keeps_malformed_escapes() {
        let cases = [
            ("plain", "plain"),
            ("\\x4", "\\x4"),
            ("\\xzz1", "\\xzz1"),
            ("end\\x", "end\\x"),
            ("\\x41\\x42", "AB"),
            ("\\xff", "\u{fffd}"),
        ];
        for (input, want) in cases {
            assert_eq!(unescape(input), want, "{input:?}");
        }
    }
}
