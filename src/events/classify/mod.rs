//! Owns recognising kernel log lines that matter to a storage test: which kind of event a
//! line reports, how bad it is, and which devices (disks, USB ports, SCSI addresses, hosts)
//! it names. Pure: text in, `KernelEvent` out.
//!
//! Every rule below matches a format string of the Linux kernel (cited at the rule), with
//! the `dev_printk` prefix `"<driver or bus> <device name>: "` (drivers/base/core.c
//! `__dev_printk`) and the SCSI prefix `"[<disk>] tag#<n> "` (drivers/scsi/scsi_logging.c
//! `sdev_format_header`) taken apart first. Each subsystem's rules and its table of real
//! kernel lines live in their own file (block, fs, mmc, ata, nvme, usb, uas, scsi).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::kmsg::KmsgRecord;

mod ata;
mod block;
mod fs;
mod mmc;
mod nvme;
mod scsi;
mod uas;
mod usb;

pub use usb::enumerated_speed;

/// What a kernel line reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// Block layer or buffer cache I/O error (block/blk-mq.c, fs/buffer.c, loop).
    IoError,
    /// USB device reset by the hub driver (drivers/usb/core/hub.c `hub_port_init`).
    UsbReset,
    /// USB device gone (drivers/usb/core/hub.c `usb_disconnect`).
    UsbDisconnect,
    /// Enumeration or port failure: descriptor reads, addressing, EMI, over-current.
    UsbEnumerationError,
    /// A USB device enumerated (informational: the link came up, or came back).
    UsbNewDevice,
    /// The device was bound to usb-storage (BOT) instead of uas
    /// (drivers/usb/storage/uas-detect.h).
    UasFallback,
    /// UAS command error, abort or reset (drivers/usb/storage/uas.c).
    UasError,
    /// SCSI command failure, timeout, abort, reset or sense data (drivers/scsi).
    ScsiError,
    /// The SCSI device was taken offline (drivers/scsi/scsi_error.c, scsi_lib.c, sd.c).
    DeviceOffline,
    /// libata exception, link reset or link down (drivers/ata/libata-eh.c).
    AtaError,
    /// NVMe command timeout, abort or controller reset (drivers/nvme/host).
    NvmeError,
    /// Filesystem error (fs/ext4, fs/fat, fs/exfat, fs/jbd2).
    FsError,
    /// Filesystem switched to read-only after an error.
    FsReadOnly,
    /// MMC/SD transfer or host error (drivers/mmc/core/block.c, drivers/mmc/host).
    MmcError,
    /// MMC/SD card removed (drivers/mmc/core/bus.c `mmc_remove_card`).
    MmcRemoved,
    /// An MMC/SD card was initialised (informational).
    MmcNewCard,
    /// The block device disappeared from sysfs (not a kernel line; see `watch`).
    DeviceRemoved,
    /// Kernel log records were overwritten before they were read: errors may be missing.
    RecordsLost,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::IoError => "io_error",
            EventKind::UsbReset => "usb_reset",
            EventKind::UsbDisconnect => "usb_disconnect",
            EventKind::UsbEnumerationError => "usb_enumeration_error",
            EventKind::UsbNewDevice => "usb_new_device",
            EventKind::UasFallback => "uas_fallback",
            EventKind::UasError => "uas_error",
            EventKind::ScsiError => "scsi_error",
            EventKind::DeviceOffline => "device_offline",
            EventKind::AtaError => "ata_error",
            EventKind::NvmeError => "nvme_error",
            EventKind::FsError => "fs_error",
            EventKind::FsReadOnly => "fs_read_only",
            EventKind::MmcError => "mmc_error",
            EventKind::MmcRemoved => "mmc_removed",
            EventKind::MmcNewCard => "mmc_new_card",
            EventKind::DeviceRemoved => "device_removed",
            EventKind::RecordsLost => "records_lost",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether an event attributed to the device under test fails it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Fatal,
    Info,
}

/// A device a kernel line names. Serialised as `kind:name` (`disk:sda`, `usb:1-1.2`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum EventKey {
    /// Block device name as printed: a disk (`sda`, `mmcblk0`, `dm-0`) or a partition
    /// (`sda1`, `mmcblk0p1`).
    Disk(String),
    /// USB device by kernel name: `1-1.2`, or a root hub `usb1`.
    UsbPort(String),
    /// SCSI device `host:channel:target:lun` (`0:0:0:0`).
    ScsiAddress(String),
    /// SCSI host (`host0`).
    ScsiHost(String),
    /// MMC host (`mmc0`).
    MmcHost(String),
    /// libata port (`ata1`).
    AtaPort(String),
    /// NVMe controller (`nvme0`).
    NvmeController(String),
    /// Block device number `major:minor` from the record's ` DEVICE=b8:0` dictionary.
    Devnum(String),
}

/// The report spells a key `kind:name`, one kind for each variant.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for EventKey {
    fn schema_name() -> String {
        "EventKey".into()
    }
    fn json_schema(_: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        serde_json::from_value(serde_json::json!({
            "description": "a device a kernel line names, as kind:name (disk:sda, usb:1-1.2, scsi:0:0:0:0, scsi_host:host0, mmc_host:mmc0, ata:ata1, nvme:nvme0, devnum:8:0)",
            "type": "string",
            "pattern": "^(disk|usb|scsi|scsi_host|mmc_host|ata|nvme|devnum):."
        }))
        .expect("a schema literal")
    }
}

impl EventKey {
    fn parts(&self) -> (&'static str, &str) {
        match self {
            EventKey::Disk(s) => ("disk", s),
            EventKey::UsbPort(s) => ("usb", s),
            EventKey::ScsiAddress(s) => ("scsi", s),
            EventKey::ScsiHost(s) => ("scsi_host", s),
            EventKey::MmcHost(s) => ("mmc_host", s),
            EventKey::AtaPort(s) => ("ata", s),
            EventKey::NvmeController(s) => ("nvme", s),
            EventKey::Devnum(s) => ("devnum", s),
        }
    }

    /// The device name without its kind (`sda`, `1-1.2`).
    pub fn name(&self) -> &str {
        self.parts().1
    }
}

impl fmt::Display for EventKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (k, v) = self.parts();
        write!(f, "{k}:{v}")
    }
}

impl FromStr for EventKey {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (k, v) = s
            .split_once(':')
            .ok_or_else(|| format!("event key {s:?} is not kind:name"))?;
        let v = v.to_string();
        Ok(match k {
            "disk" => EventKey::Disk(v),
            "usb" => EventKey::UsbPort(v),
            "scsi" => EventKey::ScsiAddress(v),
            "scsi_host" => EventKey::ScsiHost(v),
            "mmc_host" => EventKey::MmcHost(v),
            "ata" => EventKey::AtaPort(v),
            "nvme" => EventKey::NvmeController(v),
            "devnum" => EventKey::Devnum(v),
            _ => return Err(format!("event key {s:?}: unknown kind {k:?}")),
        })
    }
}

impl TryFrom<String> for EventKey {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<EventKey> for String {
    fn from(k: EventKey) -> String {
        k.to_string()
    }
}

/// A kernel line that matters, with the devices it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct KernelEvent {
    pub kind: EventKind,
    pub severity: Severity,
    /// Every device the line names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<EventKey>,
    /// The keys that tied it to the device under test (`disk:sda1`, `usb:1-1 (upstream
    /// hub)`); empty until attributed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys_matched: Vec<String>,
    /// The kernel's line, verbatim (escapes undone, as dmesg shows it).
    pub line: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts_usec: Option<u64>,
}

impl KernelEvent {
    pub fn is_fatal(&self) -> bool {
        self.severity == Severity::Fatal
    }

    fn new(kind: EventKind, severity: Severity, line: &str, keys: Vec<EventKey>) -> Self {
        let mut k: Vec<EventKey> = Vec::with_capacity(keys.len());
        for key in keys {
            if !k.contains(&key) {
                k.push(key);
            }
        }
        KernelEvent {
            kind,
            severity,
            keys: k,
            keys_matched: Vec::new(),
            line: line.to_string(),
            seq: None,
            ts_usec: None,
        }
    }
}

/// Classifies one record: its message, plus the device its ` DEVICE=` dictionary names.
pub fn classify_record(rec: &KmsgRecord) -> Option<KernelEvent> {
    let mut ev = classify(&rec.message)?;
    ev.seq = Some(rec.seq);
    ev.ts_usec = Some(rec.ts_usec);
    if let Some(key) = rec.device.as_deref().and_then(dict_device_key) {
        if !ev.keys.contains(&key) {
            ev.keys.push(key);
        }
    }
    Some(ev)
}

/// The device a ` DEVICE=` value names, when it is one attribution can use
/// (Documentation/ABI/testing/dev-kmsg: `b8:0`, `c189:1`, `n8`, `+subsystem:name`).
fn dict_device_key(dev: &str) -> Option<EventKey> {
    if let Some(devnum) = dev.strip_prefix('b') {
        let (ma, mi) = devnum.split_once(':')?;
        return (is_digits(ma) && is_digits(mi)).then(|| EventKey::Devnum(devnum.to_string()));
    }
    let (subsys, name) = dev.strip_prefix('+')?.split_once(':')?;
    match subsys {
        "scsi" if is_scsi_address(name) => Some(EventKey::ScsiAddress(name.to_string())),
        "scsi" | "scsi_host" if is_scsi_host(name) => Some(EventKey::ScsiHost(name.to_string())),
        "usb" => usb_key_of_dev_name(name),
        "mmc_host" if is_mmc_host(name) => Some(EventKey::MmcHost(name.to_string())),
        _ => None,
    }
}

/// Classifies one kernel message (without timestamp). `None`: not a line usbperf cares
/// about.
pub fn classify(message: &str) -> Option<KernelEvent> {
    use Severity::*;
    let m = message.trim_end_matches(['\n', '\r']);

    for sub in [block::classify, fs::classify, mmc::classify, ata::classify] {
        if let Some(ev) = sub(m) {
            return Some(ev);
        }
    }
    let (driver, dev, body) = dev_prefix(m)?;
    let mut keys: Vec<EventKey> = usb_key_of_dev_name(dev).into_iter().collect();
    if is_scsi_address(dev) {
        keys.push(EventKey::ScsiAddress(dev.to_string()));
    }
    if driver == "scsi" && is_scsi_host(dev) {
        keys.push(EventKey::ScsiHost(dev.to_string()));
    }
    if driver == "nvme" && dev.strip_prefix("nvme").is_some_and(is_digits) {
        return nvme::classify(m, dev, body);
    }
    // drivers/scsi/scsi_logging.c `sdev_format_header`: "[%s] " disk name, "tag#%d ".
    let mut body = body;
    if let Some(rest) = body.strip_prefix('[') {
        if let Some((disk, tail)) = rest.split_once("] ") {
            if is_block_name(disk) {
                keys.push(EventKey::Disk(disk.to_string()));
                body = tail;
            }
        }
    }
    if let Some(rest) = body.strip_prefix("tag#") {
        let (n, tail) = split_name(rest, ' ');
        if is_digits(n) {
            body = tail.trim_start();
        }
    }

    if let Some(kind) = uas::classify(body) {
        return Some(KernelEvent::new(kind, Fatal, m, keys));
    }
    if driver == "usb" && keys.iter().any(|k| matches!(k, EventKey::UsbPort(_))) {
        return usb::device_line(m, body, &keys);
    }
    if driver == "hub" {
        return usb::hub_line(m, body, &keys);
    }
    let scsi = keys
        .iter()
        .any(|k| matches!(k, EventKey::ScsiAddress(_) | EventKey::ScsiHost(_)));
    if !scsi {
        return None;
    }
    scsi::classify(m, body, &keys)
}

/// Splits `"<driver> <device>: <body>"` (drivers/base/core.c `__dev_printk`:
/// "%s %s: " with `dev_driver_string` and `dev_name`).
fn dev_prefix(m: &str) -> Option<(&str, &str, &str)> {
    let (driver, rest) = m.split_once(' ')?;
    if driver.is_empty()
        || !driver
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    {
        return None;
    }
    let (dev, body) = rest.split_once(": ")?;
    if dev.is_empty() || dev.contains(' ') {
        return None;
    }
    Some((driver, dev, body))
}

/// The USB device a device name stands for: a device (`1-1.2`), an interface (`1-1.2:1.0`
/// → `1-1.2`; root hub interface `1-0:1.0` → `usb1`), a hub port (`1-1-port2` → `1-1.2`,
/// `usb1-port2` → `1-2`), or a root hub (`usb1`). Names from drivers/usb/core/hub.c
/// `usb_new_device`/`hub_port_init`, message.c `usb_set_configuration`, port.c.
pub(crate) fn usb_key_of_dev_name(name: &str) -> Option<EventKey> {
    if is_usb_port_path(name) || is_root_hub(name) {
        return Some(EventKey::UsbPort(name.to_string()));
    }
    if let Some((dev, intf)) = name.split_once(':') {
        let (cfg, ifnum) = intf.split_once('.')?;
        if !(is_digits(cfg) && is_digits(ifnum)) {
            return None;
        }
        if let Some(bus) = dev.strip_suffix("-0") {
            if is_digits(bus) {
                return Some(EventKey::UsbPort(format!("usb{bus}")));
            }
        }
        return is_usb_port_path(dev).then(|| EventKey::UsbPort(dev.to_string()));
    }
    let (hub, port) = name.rsplit_once("-port")?;
    if !is_digits(port) {
        return None;
    }
    if is_root_hub(hub) || is_usb_port_path(hub) {
        return Some(EventKey::UsbPort(child_port(hub, port)));
    }
    None
}

/// The kernel name of the device on `port` of hub `hub` (`usb1`+2 → `1-2`, `1-1`+2 → `1-1.2`).
fn child_port(hub: &str, port: &str) -> String {
    match hub.strip_prefix("usb") {
        Some(bus) if is_digits(bus) => format!("{bus}-{port}"),
        _ => format!("{hub}.{port}"),
    }
}

/// `1-1`, `1-1.2`, `3-10.4.1`: bus, dash, dot-separated port numbers.
pub(crate) fn is_usb_port_path(s: &str) -> bool {
    match s.split_once('-') {
        Some((bus, ports)) => {
            is_digits(bus) && !ports.is_empty() && ports.split('.').all(is_digits)
        }
        None => false,
    }
}

fn is_root_hub(s: &str) -> bool {
    s.strip_prefix("usb").is_some_and(is_digits)
}

pub(crate) fn is_scsi_address(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 4 && parts.iter().all(|p| is_digits(p))
}

fn is_scsi_host(s: &str) -> bool {
    s.strip_prefix("host").is_some_and(is_digits)
}

fn is_mmc_host(s: &str) -> bool {
    s.strip_prefix("mmc").is_some_and(is_digits)
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit())
}

/// A plausible block device name (`sda`, `mmcblk0p1`, `dm-0`, `nvme0n1`); blk-mq prints
/// `?` when a request has no disk.
fn is_block_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
        && s.bytes().next().is_some_and(|c| c.is_ascii_alphabetic())
}

fn disk_keys(name: &str) -> Vec<EventKey> {
    if is_block_name(name) {
        vec![EventKey::Disk(name.to_string())]
    } else {
        Vec::new()
    }
}

fn after<'a>(s: &'a str, pat: &str) -> Option<&'a str> {
    s.find(pat).map(|i| &s[i + pat.len()..])
}

/// `(text before stop, text from stop on)`; all of `s` when `stop` is absent.
fn split_name(s: &str, stop: char) -> (&str, &str) {
    match s.find(stop) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use EventKind::*;
    use Severity::*;

    /// `(line, expected)`: `None` when the line must not be classified, else the kind, the
    /// severity and the keys in `kind:name` form.
    pub(super) type Case = (
        &'static str,
        Option<(EventKind, Severity, &'static [&'static str])>,
    );

    pub(super) fn check(cases: &[Case]) {
        for (line, want) in cases {
            let got = classify(line).map(|e| {
                let keys: Vec<String> = e.keys.iter().map(|k| k.to_string()).collect();
                assert_eq!(e.line, *line, "line must be kept verbatim");
                assert!(e.keys_matched.is_empty());
                (e.kind, e.severity, keys)
            });
            let want = want.map(|(k, s, keys)| {
                let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
                (k, s, keys)
            });
            assert_eq!(got, want, "{line:?}");
        }
    }

    /// Real lines from tests/fixtures/qemu/meta/x86-mixed.console.txt and
    /// arm64-mixed.console.txt (timestamps cut: /dev/kmsg messages carry none).
    #[test]
    fn fixture_boot_lines() {
        check(&[
            (
                "usb 1-1: new high-speed USB device number 2 using ehci-pci",
                Some((UsbNewDevice, Info, &["usb:1-1"])),
            ),
            (
                "usb 3-1: new full-speed USB device number 2 using uhci_hcd",
                Some((UsbNewDevice, Info, &["usb:3-1"])),
            ),
            (
                "usb 5-1: new SuperSpeed USB device number 2 using xhci_hcd",
                Some((UsbNewDevice, Info, &["usb:5-1"])),
            ),
            (
                "usb 1-1: New USB device found, idVendor=46f4, idProduct=0001, bcdDevice= 0.00",
                None,
            ),
            (
                "usb 3-1: not running at top speed; connect to a high speed hub",
                None,
            ),
            ("usbcore: registered new interface driver uas", None),
            ("hub 1-0:1.0: USB hub found", None),
            ("hub 1-0:1.0: 6 ports detected", None),
            ("scsi host0: usb-storage 1-1:1.0", None),
            ("scsi host3: uas", None),
            ("scsi host4: ahci", None),
            (
                "sd 0:0:0:0: [sda] 131072 512-byte logical blocks: (67.1 MB/64.0 MiB)",
                None,
            ),
            ("sd 0:0:0:0: [sda] Write Protect is off", None),
            ("sd 0:0:0:0: [sda] Mode Sense: 63 00 00 08", None),
            (
                "sd 0:0:0:0: [sda] Write cache: enabled, read cache: enabled, doesn't support DPO or FUA",
                None,
            ),
            ("sd 4:0:0:0: [sdf] Preferred minimum I/O size 512 bytes", None),
            ("sd 0:0:0:0: [sda] Attached SCSI removable disk", None),
            (
                "sd 3:0:0:0: Power-on or device reset occurred",
                Some((ScsiError, Fatal, &["scsi:3:0:0:0"])),
            ),
            (
                "ata1: SATA max UDMA/133 abar m4096@0xfebdc000 port 0xfebdc100 irq 27",
                None,
            ),
            ("ata1: SATA link up 1.5 Gbps (SStatus 113 SControl 300)", None),
            (
                "ata2: SATA link down (SStatus 0 SControl 300)",
                Some((AtaError, Fatal, &["ata:ata2"])),
            ),
            ("ata1.00: ATA-7: QEMU-SATA-SSD, 2.5+, max UDMA/100", None),
            ("ata1.00: configured for UDMA/100", None),
            ("mmc0: SDHCI controller on PCI [0000:00:07.0] using ADMA", None),
            (
                "mmc0: new high speed SD card at address 4567",
                Some((MmcNewCard, Info, &["mmc_host:mmc0"])),
            ),
            ("mmcblk0: mmc0:4567 QEMU! 64.0 MiB ", None),
        ]);
    }

    #[test]
    fn lines_of_no_subsystem() {
        check(&[
            // Host controller death is not classified (the disconnects that follow are).
            (
                "xhci_hcd 0000:00:14.0: xHCI host controller not responding, assume dead",
                None,
            ),
        ]);
    }

    #[test]
    fn record_dictionary_adds_device() {
        let cases: [(&str, Option<&str>, &[&str]); 5] = [
            // sd_printk carries DEVICE=+scsi:<addr>: already named by the text.
            (
                "sd 0:0:0:0: [sda] tag#0 FAILED Result: hostbyte=DID_ERROR driverbyte=DRIVER_OK cmd_age=0s",
                Some("+scsi:0:0:0:0"),
                &["scsi:0:0:0:0", "disk:sda"],
            ),
            (
                "I/O error, dev sda, sector 0 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0",
                Some("b8:0"),
                &["disk:sda", "devnum:8:0"],
            ),
            // A USB char device number (c189:N) is no port path: ignored.
            (
                "usb 1-1: reset high-speed USB device number 2 using ehci-pci",
                Some("c189:1"),
                &["usb:1-1"],
            ),
            (
                "usb-storage 1-1.2:1.0: USB Mass Storage device detected",
                None,
                &[],
            ),
            (
                "Buffer I/O error on dev sdb1, logical block 0, async page read",
                Some("+usb:1-1.2:1.0"),
                &["disk:sdb1", "usb:1-1.2"],
            ),
        ];
        for (msg, device, want) in cases {
            let rec = KmsgRecord {
                seq: 42,
                ts_usec: 7,
                level: 3,
                facility: 0,
                message: msg.to_string(),
                subsystem: None,
                device: device.map(str::to_string),
                lost_before: 0,
            };
            let ev = classify_record(&rec);
            if want.is_empty() {
                assert_eq!(ev, None, "{msg:?}");
                continue;
            }
            let ev = ev.unwrap_or_else(|| panic!("{msg:?} not classified"));
            let keys: Vec<String> = ev.keys.iter().map(|k| k.to_string()).collect();
            assert_eq!(keys, *want, "{msg:?}");
            assert_eq!((ev.seq, ev.ts_usec), (Some(42), Some(7)));
        }
    }

    #[test]
    fn usb_device_names() {
        let cases: [(&str, Option<&str>); 10] = [
            ("1-1", Some("1-1")),
            ("3-10.4.1", Some("3-10.4.1")),
            ("usb2", Some("usb2")),
            ("1-1.2:1.0", Some("1-1.2")),
            ("2-0:1.0", Some("usb2")),
            ("usb1-port4", Some("1-4")),
            ("1-1.2-port3", Some("1-1.2.3")),
            ("0:0:0:0", None),
            ("1-", None),
            ("usbx-port1", None),
        ];
        for (name, want) in cases {
            let got = usb_key_of_dev_name(name);
            assert_eq!(got, want.map(|w| EventKey::UsbPort(w.into())), "{name:?}");
        }
    }

    #[test]
    fn event_serialises_with_string_keys_and_round_trips() {
        let mut ev = classify("usb 1-1: USB disconnect, device number 2").unwrap();
        ev.keys_matched = vec!["usb:1-1".into()];
        ev.seq = Some(9);
        let json = serde_json::to_value(&ev).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "kind": "usb_disconnect",
                "severity": "fatal",
                "keys": ["usb:1-1"],
                "keys_matched": ["usb:1-1"],
                "line": "usb 1-1: USB disconnect, device number 2",
                "seq": 9
            })
        );
        let back: KernelEvent = serde_json::from_value(json).unwrap();
        assert_eq!(back, ev);
        assert!(serde_json::from_str::<EventKey>("\"floppy:fd0\"").is_err());
        assert!(serde_json::from_str::<EventKey>("\"sda\"").is_err());
        for k in ["disk:sda", "scsi:0:0:0:0", "devnum:8:1", "ata:ata1"] {
            assert_eq!(k.parse::<EventKey>().unwrap().to_string(), k);
        }
    }
}
