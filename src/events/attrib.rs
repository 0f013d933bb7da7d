//! Owns deciding whether a kernel event concerns the device under test: the device's
//! identity (`DeviceKeys`: disk, partitions, USB port and upstream hubs, SCSI address and
//! host, MMC host, ATA port) and exact-name matching against the keys an event names.
//!
//! Matching is by whole names only: `sda` never matches `sdaa`, `usb 1-1` never matches
//! `1-1.2` unless `1-1` is a hub upstream of the device (USB device names are the parent
//! hub's name plus `.port`, drivers/usb/core/hub.c `hub_port_connect`, so a hub's reset or
//! disconnect takes every device below it down).

use serde::{Deserialize, Serialize};

use super::classify::{is_scsi_address, is_usb_port_path, EventKey, KernelEvent};
use crate::discover::Disk;

/// Everything the kernel may call the device under test by.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceKeys {
    /// Whole-disk kernel name (`sda`, `mmcblk0`).
    pub disk: String,
    /// Partition names (`sda1`). Partitions made after discovery are still matched by name
    /// (`sda3` belongs to `sda`), see `partition_parent`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<String>,
    /// `major:minor` of the disk and its partitions (` DEVICE=b8:0` in kmsg records).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devnums: Vec<String>,
    /// USB device (`1-1.2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usb_port: Option<String>,
    /// Mass-storage interface (`1-1.2:1.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usb_interface: Option<String>,
    /// Hubs between the device and the host, nearest first, root hub (`usb1`) last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usb_upstream: Vec<String>,
    /// SCSI device (`0:0:0:0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scsi_address: Option<String>,
    /// SCSI host (`host0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scsi_host: Option<String>,
    /// MMC host (`mmc0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mmc_host: Option<String>,
    /// libata port (`ata1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ata_port: Option<String>,
}

impl DeviceKeys {
    /// Keys for a disk known by name only.
    pub fn new(disk: impl Into<String>) -> DeviceKeys {
        DeviceKeys {
            disk: disk.into(),
            ..DeviceKeys::default()
        }
    }

    /// Sets the USB device and adds every hub its name says is upstream (`1-1.2.3` → `1-1.2`,
    /// `1-1`, `usb1`).
    pub fn with_usb_port(mut self, port: impl Into<String>) -> DeviceKeys {
        let port = port.into();
        for hub in usb_ancestors(&port) {
            self.add_upstream(hub);
        }
        self.usb_port = Some(port);
        self
    }

    fn add_upstream(&mut self, hub: String) {
        if !hub.is_empty() && !self.usb_upstream.contains(&hub) {
            self.usb_upstream.push(hub);
        }
    }

    /// Derives the keys discovery found for `disk`: partitions, device numbers, the USB
    /// device with its hubs and root hub, the SCSI address and host from the device path
    /// (`.../host0/target0:0:0/0:0:0:0/block/sda`), the MMC host and the ATA port.
    pub fn from_disk(disk: &Disk) -> DeviceKeys {
        let mut k = DeviceKeys::new(disk.name.clone());
        k.partitions = disk.partitions.iter().map(|p| p.name.clone()).collect();
        k.devnums = disk
            .devnum
            .iter()
            .chain(disk.partitions.iter().filter_map(|p| p.devnum.as_ref()))
            .cloned()
            .collect();
        if let Some(usb) = &disk.usb {
            let hubs = usb
                .hubs
                .iter()
                .chain(usb.root_hub.iter())
                .map(|h| h.port_path.clone());
            for hub in hubs {
                k.add_upstream(hub);
            }
            k = k.with_usb_port(usb.port_path.clone());
            k.usb_interface = usb.interface.clone();
        }
        let comps: Vec<&str> = disk.devpath.split('/').filter(|c| !c.is_empty()).collect();
        // The SCSI device is the directory holding `block/<disk>`; the host is the nearest
        // `hostN` above it (drivers/scsi/hosts.c names it "host%d").
        if let Some(i) = comps.iter().rposition(|c| *c == "block") {
            if i > 0 && is_scsi_address(comps[i - 1]) {
                k.scsi_address = Some(comps[i - 1].to_string());
            }
        }
        if k.scsi_address.is_some() {
            k.scsi_host = comps
                .iter()
                .rev()
                .find(|c| c.strip_prefix("host").is_some_and(is_digits))
                .map(|c| c.to_string());
        }
        k.mmc_host = disk
            .mmc
            .as_ref()
            .and_then(|m| m.host.clone())
            .or_else(|| {
                // .../mmc_host/mmc0/mmc0:0001/block/mmcblk0
                let i = comps.iter().rposition(|c| *c == "mmc_host")?;
                comps.get(i + 1).map(|c| c.to_string())
            });
        k.ata_port = disk.sata.as_ref().map(|s| s.port.clone()).or_else(|| {
            comps
                .iter()
                .rev()
                .find(|c| c.strip_prefix("ata").is_some_and(is_digits))
                .map(|c| c.to_string())
        });
        k
    }

    /// How `key` names this device (`disk:sda1`, `usb:1-1 (upstream hub)`), or `None`.
    pub fn match_key(&self, key: &EventKey) -> Option<String> {
        let eq = |v: &Option<String>, n: &str| v.as_deref() == Some(n);
        let hit = match key {
            EventKey::Disk(n) => {
                *n == self.disk
                    || self.partitions.iter().any(|p| p == n)
                    || partition_parent(n) == Some(self.disk.as_str())
            }
            EventKey::Devnum(n) => self.devnums.iter().any(|d| d == n),
            EventKey::UsbPort(n) => {
                if eq(&self.usb_port, n) {
                    true
                } else if self.usb_upstream.iter().any(|h| h == n) {
                    return Some(format!("{key} (upstream hub)"));
                } else {
                    false
                }
            }
            EventKey::ScsiAddress(n) => eq(&self.scsi_address, n),
            EventKey::ScsiHost(n) => eq(&self.scsi_host, n),
            EventKey::MmcHost(n) => eq(&self.mmc_host, n),
            EventKey::AtaPort(n) => eq(&self.ata_port, n),
        };
        hit.then(|| key.to_string())
    }

    /// The keys of `event` that name this device; empty when it concerns another device.
    pub fn matches(&self, event: &KernelEvent) -> Vec<String> {
        event
            .keys
            .iter()
            .filter_map(|k| self.match_key(k))
            .collect()
    }
}

/// Returns `event` with `keys_matched` filled when it concerns `keys`' device.
pub fn attribute_event(event: &KernelEvent, keys: &DeviceKeys) -> Option<KernelEvent> {
    let matched = keys.matches(event);
    if matched.is_empty() {
        return None;
    }
    let mut ev = event.clone();
    ev.keys_matched = matched;
    Some(ev)
}

/// The whole disk a partition name belongs to, by the kernel's naming rules
/// (block/partitions/core.c `bdev_add_partition` via `disk_name`: a `p` goes between a
/// disk name ending in a digit and the partition number): `sda1` → `sda`, `mmcblk0p1` →
/// `mmcblk0`, `nvme0n1p2` → `nvme0n1`. `None` for whole disks and unknown schemes.
pub fn partition_parent(name: &str) -> Option<&str> {
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit());
    if base.len() == name.len() || base.is_empty() {
        return None;
    }
    if let Some(disk) = base.strip_suffix('p') {
        if disk.ends_with(|c: char| c.is_ascii_digit()) {
            return Some(disk);
        }
    }
    // Letter-indexed disks (sd, vd, hd, xvd): partition numbers follow the letters.
    let lettered = ["sd", "vd", "hd", "xvd"].iter().any(|p| {
        base.strip_prefix(p)
            .is_some_and(|l| !l.is_empty() && l.bytes().all(|c| c.is_ascii_lowercase()))
    });
    lettered.then_some(base)
}

/// Hubs above USB device `port` by its name: `1-1.2.3` → [`1-1.2`, `1-1`, `usb1`].
pub fn usb_ancestors(port: &str) -> Vec<String> {
    let mut out = Vec::new();
    if !is_usb_port_path(port) {
        return out;
    }
    let mut cur = port;
    while let Some((parent, _)) = cur.rsplit_once('.') {
        out.push(parent.to_string());
        cur = parent;
    }
    if let Some((bus, _)) = port.split_once('-') {
        out.push(format!("usb{bus}"));
    }
    out
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit())
}
