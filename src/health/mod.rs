//! Owns the read-only health readers of flash and links: eMMC/SD, NVMe,
//! SATA, UFS, PCIe and USB, each in its own file as a pure parser plus the thin I/O that feeds
//! it, and the `Health` record discovery attaches to every disk.
//!
//! Read-only, always: sysfs is read through `SysfsRoot`; the three ioctls (MMC_IOC_CMD with
//! SEND_EXT_CSD, NVME_IOCTL_ADMIN_CMD with Get Log Page, SG_IO with ATA SMART READ DATA) only
//! transfer data from the device and are issued on the node opened `O_RDONLY`, and only when
//! the sysfs tree is the running system's (a recorded tree's `/dev` names other devices).
//! Every field that could not be filled is in `missing` with the reason, like the inventory's.

pub mod emmc;
pub mod nvme;
pub mod pcie;
pub mod sata;
pub mod ufs;
pub mod usb;

mod ioctl;

use serde::{Deserialize, Serialize};

use crate::device::{DeviceClass, EmmcArea, Missing};
use crate::sysfs::SysfsRoot;

/// Why a health field has no value. The messages say what would make the field readable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HealthError {
    #[error("{what}: {len} bytes, expected {want}: the device answered a short buffer")]
    Short {
        what: &'static str,
        len: usize,
        want: usize,
    },
    #[error("{what}: {detail}: the buffer is not a valid one (garbage or another command's)")]
    Garbage { what: &'static str, detail: String },
    #[error("{field} = {value}: reserved/absurd value, ignored")]
    Absurd { field: &'static str, value: String },
    #[error("{field} {value:?}: no trained link reported (no PCIe link capability, e.g. an integrated endpoint on the root bus, or the link is down)")]
    NoLink { field: &'static str, value: String },
    #[error("{field}: {value:?} does not parse")]
    Malformed { field: &'static str, value: String },
    #[error(
        "could not open {node} read-only: {err} (run as root, and check that the node exists)"
    )]
    Open { node: String, err: String },
    #[error("{node} is not the block device {devnum} sysfs names (stale /dev?): not queried")]
    NodeMismatch { node: String, devnum: String },
    #[error("{ioctl} on {node} failed: {err} (needs root / CAP_SYS_ADMIN and CAP_SYS_RAWIO; a driver without pass-through answers ENOTTY or EINVAL)")]
    Ioctl {
        ioctl: &'static str,
        node: String,
        err: String,
    },
    #[error("{ioctl} on {node}: the device reported status {status}")]
    DeviceStatus {
        ioctl: &'static str,
        node: String,
        status: String,
    },
}

/// End-of-life state as eMMC PRE_EOL_INFO and UFS bPreEOLInfo both encode it (1..3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum PreEol {
    /// 0x01: reserved blocks consumed normally.
    Normal,
    /// 0x02: 80 % of the reserved blocks consumed.
    Warning,
    /// 0x03: 90 % consumed.
    Urgent,
}

impl PreEol {
    /// JESD84-B51 7.4.79 / JESD220 bPreEOLInfo: 0 = not defined, 1..3 as above, else reserved.
    pub fn from_raw(field: &'static str, v: u8) -> Result<Option<PreEol>, HealthError> {
        match v {
            0 => Ok(None),
            1 => Ok(Some(PreEol::Normal)),
            2 => Ok(Some(PreEol::Warning)),
            3 => Ok(Some(PreEol::Urgent)),
            _ => Err(HealthError::Absurd {
                field,
                value: format!("0x{v:02x}"),
            }),
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            PreEol::Normal => "normal",
            PreEol::Warning => "warning",
            PreEol::Urgent => "urgent",
        }
    }
}

/// A device life-time estimate in 10 % bands (eMMC DEVICE_LIFE_TIME_EST_TYP_A/B, UFS
/// bDeviceLifeTimeEstA/B share the encoding): 0x01 = 0-10 % used .. 0x0A = 90-100 %,
/// 0x0B = the estimate is exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LifeTime {
    pub raw: u8,
    pub used_percent_min: u16,
    /// Upper end of the band; 101 for 0x0B ("exceeded"), so that any limit of 100 or less
    /// fails it, as NVMe's percent used above 100 does.
    pub used_percent_max: u16,
}

impl LifeTime {
    /// `Ok(None)` for 0x00 (not defined: the device does not estimate).
    pub fn from_raw(field: &'static str, v: u8) -> Result<Option<LifeTime>, HealthError> {
        match v {
            0 => Ok(None),
            1..=10 => Ok(Some(LifeTime {
                raw: v,
                used_percent_min: u16::from(v - 1) * 10,
                used_percent_max: u16::from(v) * 10,
            })),
            11 => Ok(Some(LifeTime {
                raw: v,
                used_percent_min: 100,
                used_percent_max: 101,
            })),
            _ => Err(HealthError::Absurd {
                field,
                value: format!("0x{v:02x}"),
            }),
        }
    }
}

/// The health of one disk. The flat fields at the top are the summary a threshold reads
/// (worst of the sources below); the per-source records carry the detail.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Health {
    /// Worst life used: eMMC/UFS type A/B band tops, NVMe percent used (above 100 = past the
    /// rated endurance).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub life_time_used_percent_max: Option<u16>,
    /// eMMC PRE_EOL_INFO or UFS bPreEOLInfo.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_eol: Option<PreEol>,
    /// NVMe media and data integrity errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_errors: Option<u64>,
    /// SATA attribute 199 raw value (interface CRC errors: the cable's signal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udma_crc_errors: Option<u64>,
    /// Current PCIe link speed of the disk's PCI function, GT/s per lane.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcie_gts: Option<f64>,
    /// Current PCIe link width, lanes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcie_width: Option<u32>,
    /// Over-current events of the USB port the device hangs on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over_current_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature_celsius: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emmc: Option<emmc::EmmcHealth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sd: Option<emmc::SdHealth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme: Option<nvme::NvmeSmart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sata: Option<sata::SataSmart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ufs: Option<ufs::UfsHealth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcie: Option<pcie::PcieLink>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usb: Option<usb::UsbHealth>,
    /// Every health field that could not be filled, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<Missing>,
}

/// What discovery knows about a disk that the health readers need.
#[derive(Debug, Clone, Default)]
pub struct Target<'a> {
    pub name: &'a str,
    /// The disk's own devpath.
    pub devpath: &'a str,
    pub dev_node: &'a str,
    /// `major:minor` from sysfs, to check the node is that device before an ioctl.
    pub devnum: Option<&'a str>,
    pub class: DeviceClass,
    /// MMC card device (`/devices/.../mmc0/mmc0:0001`).
    pub mmc_card: Option<String>,
    pub mmc_type: Option<&'a str>,
    pub emmc_area: Option<EmmcArea>,
    /// debugfs timing already parsed by discovery (`sd uhs SDR104`).
    pub mmc_timing: Option<&'a str>,
    /// The USB device the disk is on (`/devices/.../1-1`).
    pub usb_device: Option<String>,
    /// Nearest PCI function above the disk (the NVMe controller, AHCI, UFS or SDHCI host).
    pub pci_function: Option<String>,
    /// Ancestors' devpaths, nearest first (the UFS host is found among them).
    pub ancestors: Vec<String>,
}

/// Collects `field`/`reason` pairs: what a parser could not fill and why.
#[derive(Debug, Default)]
pub struct Gaps(pub Vec<Missing>);

impl Gaps {
    pub fn note(&mut self, field: &str, reason: impl std::fmt::Display) {
        self.0.push(Missing {
            field: field.to_string(),
            reason: reason.to_string(),
        });
    }
    pub fn take<T, E: std::fmt::Display>(&mut self, field: &str, r: Result<T, E>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.note(field, e);
                None
            }
        }
    }
}

/// Whether ioctls may be sent for the disks of `sys`, and if not, why.
pub fn ioctl_allowed(sys: &SysfsRoot) -> Result<(), String> {
    if sys.nodes_are_live() {
        Ok(())
    } else {
        Err(
            "not queried: the sysfs tree is a recording (--sysfs-root or a umockdev testbed), \
             its /dev nodes are not these devices"
                .into(),
        )
    }
}

/// Reads every health source that applies to the disk; `None` for classes with no health
/// (loop, virtio, plain SCSI without a PCI link).
pub fn collect(sys: &SysfsRoot, t: &Target<'_>) -> Option<Health> {
    let mut h = Health::default();
    let mut gaps = Gaps::default();
    let ioctl_ok = ioctl_allowed(sys);
    match t.class {
        DeviceClass::Emmc => {
            let card = t.mmc_card.as_deref()?;
            h.emmc = Some(emmc::read_emmc(sys, card, t, &ioctl_ok, &mut gaps));
        }
        DeviceClass::Sd => {
            let card = t.mmc_card.as_deref()?;
            h.sd = Some(emmc::read_sd(sys, card, t.mmc_timing, &mut gaps));
        }
        DeviceClass::Nvme => {
            h.nvme = nvme::read(t, &ioctl_ok, &mut gaps);
        }
        DeviceClass::Sata => {
            h.sata = sata::read(t, &ioctl_ok, &mut gaps);
        }
        DeviceClass::Ufs => {
            h.ufs = ufs::read(sys, &t.ancestors, &mut gaps);
        }
        DeviceClass::Usb => {
            gaps.note(
                "sata.smart",
                "not queried: SMART pass-through is off for USB disks (UAS and some \
                 Bulk-Only bridges have been known to reset on ATA PASS-THROUGH)",
            );
            if let Some(dev) = &t.usb_device {
                h.usb = Some(usb::read(sys, dev, &mut gaps));
            }
        }
        _ => {}
    }
    // A multipath NVMe namespace (`nvme0n1` under /devices/virtual/nvme-subsystem) has no PCI
    // parent: its controller paths (`multipath/nvme0c0n1`) do.
    let pci_function = t.pci_function.clone().or_else(|| {
        (t.class == DeviceClass::Nvme)
            .then(|| nvme_path_pci_function(sys, t.devpath))
            .flatten()
    });
    if let Some(pci) = &pci_function {
        if matches!(
            t.class,
            DeviceClass::Nvme
                | DeviceClass::Sata
                | DeviceClass::Ufs
                | DeviceClass::Emmc
                | DeviceClass::Sd
                | DeviceClass::Scsi
        ) {
            h.pcie = pcie::read(sys, pci, t.class == DeviceClass::Nvme, &mut gaps);
        }
    }
    if h.emmc.is_none()
        && h.sd.is_none()
        && h.nvme.is_none()
        && h.sata.is_none()
        && h.ufs.is_none()
        && h.pcie.is_none()
        && h.usb.is_none()
        && gaps.0.is_empty()
    {
        return None;
    }
    h.summarize();
    h.missing = gaps.0;
    Some(h)
}

/// The PCI function above the first controller path of a multipath NVMe namespace.
/// The paths are listed in `multipath/`; a tree recorded without that directory's links
/// still lists them in `class/block` by their names (`nvme0c0n1` for `nvme0n1`).
fn nvme_path_pci_function(sys: &SysfsRoot, devpath: &str) -> Option<String> {
    let name = devpath.rsplit('/').next()?;
    let mut cur = match sys.list(devpath, "multipath").into_iter().next() {
        Some(p) => sys.resolve(&format!("{devpath}/multipath/{p}"))?,
        None => {
            let (subsys, ns) = name.strip_prefix("nvme")?.split_once('n')?;
            let path = sys.list("/class/block", "").into_iter().find(|b| {
                b.strip_prefix("nvme")
                    .and_then(|r| r.split_once('c'))
                    .and_then(|(s, rest)| rest.split_once('n').map(|(_, n)| (s, n)))
                    == Some((subsys, ns))
            })?;
            sys.resolve(&format!("/class/block/{path}"))?
        }
    };
    while let Some((up, _)) = cur.rsplit_once('/') {
        cur = up.to_string();
        if cur.is_empty() || cur == "/devices" {
            return None;
        }
        if sys.link_name(&cur, "subsystem").as_deref() == Some("pci") {
            return Some(cur);
        }
    }
    None
}

impl Health {
    /// Fills the flat summary from the per-source records (worst case wins).
    pub fn summarize(&mut self) {
        let mut life: Vec<u16> = Vec::new();
        let mut eol: Vec<PreEol> = Vec::new();
        if let Some(e) = &self.emmc {
            life.extend(
                [e.life_time_a, e.life_time_b]
                    .iter()
                    .flatten()
                    .map(|l| l.used_percent_max),
            );
            eol.extend(e.pre_eol);
        }
        if let Some(u) = &self.ufs {
            life.extend(
                [u.life_time_a, u.life_time_b]
                    .iter()
                    .flatten()
                    .map(|l| l.used_percent_max),
            );
            eol.extend(u.pre_eol);
        }
        if let Some(n) = &self.nvme {
            life.push(u16::from(n.percent_used));
            self.media_errors = Some(n.media_errors);
            self.temperature_celsius = n.temperature_celsius;
        }
        if let Some(s) = &self.sata {
            self.udma_crc_errors = s.attribute(sata::ATTR_UDMA_CRC).map(|a| a.raw);
            self.temperature_celsius = s.temperature_celsius.map(f64::from);
        }
        self.life_time_used_percent_max = life.into_iter().max();
        self.pre_eol = eol.into_iter().max();
        if let Some(p) = &self.pcie {
            self.pcie_gts = p.current_gts;
            self.pcie_width = p.current_width;
        }
        if let Some(u) = &self.usb {
            self.over_current_count = u.over_current_count;
        }
    }

    /// The short form of the `list` HEALTH column: `life A 10% B 0% eol normal`,
    /// `used 3% spare 100%`, `crc 0`; `-` when nothing is known.
    pub fn short(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        let band = |l: &Option<LifeTime>| match l {
            Some(l) if l.raw == 11 => ">100%".to_string(),
            Some(l) => format!("{}%", l.used_percent_max),
            None => "?".into(),
        };
        if let Some(e) = &self.emmc {
            if e.life_time_a.is_some() || e.life_time_b.is_some() {
                parts.push(format!(
                    "life A {} B {}",
                    band(&e.life_time_a),
                    band(&e.life_time_b)
                ));
            }
            if let Some(p) = e.pre_eol {
                parts.push(format!("eol {}", p.as_str()));
            }
            // An eMMC older than 5.0 has no life-time registers at all: say so, not `-`.
            match &e.ext_csd {
                Some(x)
                    if e.life_time_a.is_none() && e.life_time_b.is_none() && x.ext_csd_rev < 7 =>
                {
                    parts.push(format!(
                        "life n/a (eMMC {})",
                        x.emmc_version.as_deref().unwrap_or("< 5.0")
                    ));
                }
                _ => {}
            }
        }
        if let Some(u) = &self.ufs {
            if u.life_time_a.is_some() || u.life_time_b.is_some() {
                parts.push(format!(
                    "life A {} B {}",
                    band(&u.life_time_a),
                    band(&u.life_time_b)
                ));
            }
            if let Some(p) = u.pre_eol {
                parts.push(format!("eol {}", p.as_str()));
            }
        }
        if let Some(s) = &self.sd {
            if let Some(c) = &s.speed_class {
                parts.push(c.clone());
            }
            if let Some(m) = &s.uhs_mode {
                parts.push(m.clone());
            }
        }
        if let Some(n) = &self.nvme {
            parts.push(format!(
                "used {}% spare {}%",
                n.percent_used, n.available_spare_percent
            ));
            if n.media_errors > 0 {
                parts.push(format!("media-err {}", n.media_errors));
            }
            if n.critical_warning != 0 {
                parts.push(format!("crit 0x{:02x}", n.critical_warning));
            }
        }
        if let Some(c) = self.udma_crc_errors {
            parts.push(format!("crc {c}"));
        }
        if let Some(s) = &self.sata {
            for (id, name) in [
                (sata::ATTR_REALLOCATED, "realloc"),
                (sata::ATTR_PENDING, "pending"),
            ] {
                if let Some(a) = s.attribute(id) {
                    parts.push(format!("{name} {}", a.raw));
                }
            }
        }
        if let Some(p) = &self.pcie {
            if let (Some(g), Some(w)) = (p.current_gts, p.current_width) {
                let mut s = format!("pcie {g} GT/s x{w}");
                if p.below_max() {
                    s.push_str(" (below max)");
                }
                parts.push(s);
            }
        }
        if let Some(t) = self.temperature_celsius {
            parts.push(format!("{t:.0} C"));
        }
        if let Some(u) = &self.usb {
            if let Some(oc) = u.over_current_count.filter(|c| *c > 0) {
                parts.push(format!("over-current {oc}"));
            }
            if let (Some(r), Some(t)) = (u.rx_lanes, u.tx_lanes) {
                if r > 1 || t > 1 {
                    parts.push(format!("lanes {r}x{t}"));
                }
            }
        }
        if parts.is_empty() {
            "-".into()
        } else {
            parts.join(" ")
        }
    }
}

/// The answer of one device command, asked once per process: `run` rediscovers while it waits
/// for required devices and `bench` before it writes, and neither needs the device asked
/// again (a failed answer is kept too: a device that refused will refuse again).
pub(crate) fn once(
    kind: &'static str,
    node: &str,
    devnum: Option<&str>,
    ask: impl FnOnce() -> Result<Vec<u8>, HealthError>,
) -> Result<Vec<u8>, HealthError> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    type Answers = HashMap<(&'static str, String, String), Result<Vec<u8>, HealthError>>;
    static ANSWERS: OnceLock<Mutex<Answers>> = OnceLock::new();
    let key = (kind, node.to_string(), devnum.unwrap_or("").to_string());
    let map = ANSWERS.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(a) = map.lock().ok().and_then(|m| m.get(&key).cloned()) {
        return a;
    }
    let a = ask();
    if let Ok(mut m) = map.lock() {
        m.insert(key, a.clone());
    }
    a
}

/// Saves a raw answer to `$USBPERF_HEALTH_RECORD/<disk>.<kind>.bin` when that variable
/// names a directory: how the QEMU guests record the fixtures of tests/fixtures/health/.
/// Best effort: a failure to save never changes the inventory.
pub(crate) fn record_raw(disk: &str, kind: &str, bytes: &[u8]) {
    if let Some(dir) = std::env::var_os("USBPERF_HEALTH_RECORD") {
        let p = std::path::Path::new(&dir).join(format!("{disk}.{kind}.bin"));
        let _ = std::fs::write(p, bytes);
    }
}

/// `0x0a`, `0x0A`, `0a`, `10` → u8 (the kernel prints these registers as `0x%02x`).
pub(crate) fn parse_hex_u8(s: &str) -> Option<u8> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u8::from_str_radix(h, 16).ok(),
        None => u8::from_str_radix(s, 16).ok(),
    }
}

/// Little-endian unsigned integer of `b` (up to 16 bytes); saturates to u64::MAX above 64 bits
/// (a 128-bit NVMe counter beyond u64 is not a real device's).
pub(crate) fn le_u64_sat(b: &[u8]) -> u64 {
    let mut v: u128 = 0;
    for (i, x) in b.iter().enumerate().take(16) {
        v |= u128::from(*x) << (8 * i);
    }
    u64::try_from(v).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn life_time_bands() {
        for (raw, want) in [
            (0u8, None),
            (1, Some((0, 10))),
            (2, Some((10, 20))),
            (10, Some((90, 100))),
            (11, Some((100, 101))),
        ] {
            let got = LifeTime::from_raw("x", raw)
                .unwrap()
                .map(|l| (l.used_percent_min, l.used_percent_max));
            assert_eq!(got, want, "raw {raw}");
        }
        assert!(LifeTime::from_raw("x", 12).is_err());
        assert!(LifeTime::from_raw("x", 0xff).is_err());
    }

    #[test]
    fn pre_eol_values() {
        assert_eq!(PreEol::from_raw("x", 0).unwrap(), None);
        assert_eq!(PreEol::from_raw("x", 1).unwrap(), Some(PreEol::Normal));
        assert_eq!(PreEol::from_raw("x", 3).unwrap(), Some(PreEol::Urgent));
        assert!(PreEol::from_raw("x", 4).is_err());
        assert!(PreEol::Urgent > PreEol::Warning && PreEol::Warning > PreEol::Normal);
    }

    #[test]
    fn hex_and_le() {
        assert_eq!(parse_hex_u8("0x0A\n"), Some(10));
        assert_eq!(parse_hex_u8("0b"), Some(11));
        assert_eq!(parse_hex_u8("zz"), None);
        assert_eq!(le_u64_sat(&[1, 2]), 0x0201);
        let mut big = [0u8; 16];
        big[9] = 1;
        assert_eq!(le_u64_sat(&big), u64::MAX);
    }

    #[test]
    fn summary_takes_the_worst() {
        let mut h = Health {
            emmc: Some(emmc::EmmcHealth {
                life_time_a: LifeTime::from_raw("a", 2).unwrap(),
                life_time_b: LifeTime::from_raw("b", 11).unwrap(),
                pre_eol: Some(PreEol::Warning),
                ..Default::default()
            }),
            ..Default::default()
        };
        h.summarize();
        assert_eq!(h.life_time_used_percent_max, Some(101));
        assert_eq!(h.pre_eol, Some(PreEol::Warning));
        assert_eq!(h.short(), "life A 20% B >100% eol warning");
        assert_eq!(Health::default().short(), "-");
        let mut sata = Health {
            sata: Some(sata::SataSmart {
                attributes: vec![sata::SmartAttribute {
                    id: 199,
                    name: "udma_crc_error_count".into(),
                    value: 200,
                    worst: 200,
                    raw: 0,
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        sata.summarize();
        assert_eq!(
            (sata.udma_crc_errors, sata.short().as_str()),
            (Some(0), "crc 0")
        );
    }
}
