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
    /// NVMe controller (`nvme0`, the parent of `nvme0n1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvme_controller: Option<String>,
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
        k.mmc_host = disk.mmc.as_ref().and_then(|m| m.host.clone()).or_else(|| {
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
        // .../nvme/nvme0/nvme0n1 (drivers/nvme/host/core.c: namespaces below the controller).
        if let Some(i) = comps.iter().rposition(|c| *c == "nvme") {
            k.nvme_controller = comps
                .get(i + 1)
                .filter(|c| c.strip_prefix("nvme").is_some_and(is_digits))
                .map(|c| c.to_string());
        }
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
            EventKey::NvmeController(n) => eq(&self.nvme_controller, n),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::{MmcInfo, Partition, SataLink, UsbHop, UsbLink};
    use crate::events::classify::classify;

    fn usb_disk() -> Disk {
        Disk {
            name: "sda".into(),
            devnum: Some("8:0".into()),
            devpath: "/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1.2/1-1.2:1.0/host0/target0:0:0/0:0:0:0/block/sda".into(),
            partitions: vec![Partition {
                name: "sda1".into(),
                devnum: Some("8:1".into()),
                ..Partition::default()
            }],
            usb: Some(UsbLink {
                port_path: "1-1.2".into(),
                interface: Some("1-1.2:1.0".into()),
                hubs: vec![UsbHop {
                    port_path: "1-1".into(),
                    ..UsbHop::default()
                }],
                root_hub: Some(UsbHop {
                    port_path: "usb1".into(),
                    ..UsbHop::default()
                }),
                ..UsbLink::default()
            }),
            ..Disk::default()
        }
    }

    #[test]
    fn from_disk_usb() {
        let k = DeviceKeys::from_disk(&usb_disk());
        assert_eq!(k.disk, "sda");
        assert_eq!(k.partitions, ["sda1"]);
        assert_eq!(k.devnums, ["8:0", "8:1"]);
        assert_eq!(k.usb_port.as_deref(), Some("1-1.2"));
        assert_eq!(k.usb_interface.as_deref(), Some("1-1.2:1.0"));
        assert_eq!(k.usb_upstream, ["1-1", "usb1"]);
        assert_eq!(k.scsi_address.as_deref(), Some("0:0:0:0"));
        assert_eq!(k.scsi_host.as_deref(), Some("host0"));
        assert_eq!(k.mmc_host, None);
        assert_eq!(k.ata_port, None);
    }

    #[test]
    fn from_disk_mmc_and_sata() {
        // MMC host from the device path when discovery left `mmc.host` empty, and from
        // `mmc.host` when it did not.
        let mut d = Disk {
            name: "mmcblk0".into(),
            devpath: "/devices/platform/soc/2190000.mmc/mmc_host/mmc0/mmc0:0001/block/mmcblk0"
                .into(),
            ..Disk::default()
        };
        let k = DeviceKeys::from_disk(&d);
        assert_eq!(k.mmc_host.as_deref(), Some("mmc0"));
        assert_eq!((k.scsi_address, k.usb_port, k.ata_port), (None, None, None));
        d.mmc = Some(MmcInfo {
            card: "mmc2:0001".into(),
            host: Some("mmc2".into()),
            ..MmcInfo::default()
        });
        assert_eq!(DeviceKeys::from_disk(&d).mmc_host.as_deref(), Some("mmc2"));

        let mut d = Disk {
            name: "sdf".into(),
            devpath: "/devices/pci0000:00/0000:00:1f.2/ata1/host4/target4:0:0/4:0:0:0/block/sdf"
                .into(),
            ..Disk::default()
        };
        let k = DeviceKeys::from_disk(&d);
        assert_eq!(k.ata_port.as_deref(), Some("ata1"));
        assert_eq!(k.scsi_address.as_deref(), Some("4:0:0:0"));
        assert_eq!(k.scsi_host.as_deref(), Some("host4"));
        d.sata = Some(SataLink {
            port: "ata3".into(),
            ..SataLink::default()
        });
        assert_eq!(DeviceKeys::from_disk(&d).ata_port.as_deref(), Some("ata3"));

        let d = Disk {
            name: "nvme0n1".into(),
            devpath: "/devices/pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0/nvme0n1".into(),
            ..Disk::default()
        };
        let k = DeviceKeys::from_disk(&d);
        assert_eq!(k.nvme_controller.as_deref(), Some("nvme0"));
        assert_eq!((&k.scsi_address, &k.ata_port), (&None, &None));
        let ev = classify("nvme nvme0: I/O 12 QID 3 timeout, reset controller").unwrap();
        assert_eq!(k.matches(&ev), ["nvme:nvme0"]);
        let ev = classify("nvme nvme1: I/O 12 QID 3 timeout, reset controller").unwrap();
        assert!(k.matches(&ev).is_empty());
    }

    fn check(keys: &DeviceKeys, cases: &[(&str, &[&str])]) {
        for (line, want) in cases {
            let ev = classify(line).unwrap_or_else(|| panic!("{line:?} not classified"));
            assert_eq!(keys.matches(&ev), *want, "{line:?}");
            assert_eq!(attribute_event(&ev, keys).is_some(), !want.is_empty());
        }
    }

    #[test]
    fn usb_disk_attribution() {
        let k = DeviceKeys::from_disk(&usb_disk());
        check(
            &k,
            &[
                (
                    "I/O error, dev sda, sector 2048 op 0x1:(WRITE) flags 0x800 phys_seg 1 prio class 2",
                    &["disk:sda"],
                ),
                // Whole names only: sdaa and sd are other disks.
                (
                    "I/O error, dev sdaa, sector 2048 op 0x1:(WRITE) flags 0x800 phys_seg 1 prio class 2",
                    &[],
                ),
                ("blk_update_request: I/O error, dev sd, sector 0", &[]),
                (
                    "Buffer I/O error on dev sda1, logical block 0, async page read",
                    &["disk:sda1"],
                ),
                // A partition made after discovery still belongs to sda.
                (
                    "Buffer I/O error on dev sda3, logical block 0, async page read",
                    &["disk:sda3"],
                ),
                (
                    "Buffer I/O error on dev sdaa1, logical block 0, async page read",
                    &[],
                ),
                (
                    "usb 1-1.2: reset high-speed USB device number 5 using xhci_hcd",
                    &["usb:1-1.2"],
                ),
                // The hub above the device: it takes the device with it.
                (
                    "usb 1-1: reset high-speed USB device number 2 using xhci_hcd",
                    &["usb:1-1 (upstream hub)"],
                ),
                (
                    "usb 1-1: USB disconnect, device number 2",
                    &["usb:1-1 (upstream hub)"],
                ),
                // Siblings, other buses, look-alike names: not ours.
                ("usb 1-1.3: USB disconnect, device number 6", &[]),
                ("usb 1-12: USB disconnect, device number 6", &[]),
                ("usb 2-1.2: USB disconnect, device number 6", &[]),
                ("usb 1-1.2.1: USB disconnect, device number 7", &[]),
                (
                    "hub 1-1:1.0: cannot reset port 2 (err = -71)",
                    &["usb:1-1.2"],
                ),
                ("hub 1-1:1.0: cannot reset port 3 (err = -71)", &[]),
                (
                    "hub 1-1:1.0: hub_ext_port_status failed (err = -71)",
                    &["usb:1-1 (upstream hub)"],
                ),
                (
                    "usb usb1-port1: disabled by hub (EMI?), re-enabling...",
                    &["usb:1-1 (upstream hub)"],
                ),
                ("usb usb2-port1: disabled by hub (EMI?), re-enabling...", &[]),
                (
                    "sd 0:0:0:0: [sda] tag#0 FAILED Result: hostbyte=DID_TIME_OUT driverbyte=DRIVER_OK cmd_age=30s",
                    &["scsi:0:0:0:0", "disk:sda"],
                ),
                (
                    "sd 0:0:0:1: [sdb] tag#0 FAILED Result: hostbyte=DID_TIME_OUT driverbyte=DRIVER_OK cmd_age=30s",
                    &[],
                ),
                (
                    "sd 10:0:0:0: [sdk] tag#0 FAILED Result: hostbyte=DID_TIME_OUT driverbyte=DRIVER_OK cmd_age=30s",
                    &[],
                ),
                (
                    "scsi host0: uas_eh_device_reset_handler start",
                    &["scsi_host:host0"],
                ),
                ("scsi host10: uas_eh_device_reset_handler start", &[]),
                (
                    "EXT4-fs (sda1): Remounting filesystem read-only",
                    &["disk:sda1"],
                ),
                ("mmc0: card 0001 removed", &[]),
                ("ata1: hard resetting link", &[]),
            ],
        );
    }

    #[test]
    fn mmc_disk_attribution() {
        let mut k = DeviceKeys::new("mmcblk0");
        k.partitions = vec!["mmcblk0p1".into()];
        k.mmc_host = Some("mmc0".into());
        check(
            &k,
            &[
                (
                    "mmcblk0: error -110 transferring data, sector 2048, nr 8, cmd response 0x900, card status 0xb00",
                    &["disk:mmcblk0"],
                ),
                (
                    "mmcblk1: error -110 transferring data, sector 2048, nr 8, cmd response 0x900, card status 0xb00",
                    &[],
                ),
                // The boot areas are other block devices of the same card; not the user area.
                (
                    "mmcblk0boot0: error -110 transferring data, sector 0, nr 8, cmd response 0x900, card status 0xb00",
                    &[],
                ),
                (
                    "Buffer I/O error on dev mmcblk0p2, logical block 1, lost async page write",
                    &["disk:mmcblk0p2"],
                ),
                ("mmc0: card 0001 removed", &["mmc_host:mmc0"]),
                ("mmc1: card 0001 removed", &[]),
                (
                    "mmc0: new high speed SD card at address 4567",
                    &["mmc_host:mmc0"],
                ),
            ],
        );
    }

    #[test]
    fn partition_parents() {
        let cases = [
            ("sda1", Some("sda")),
            ("sdaa12", Some("sdaa")),
            ("sda", None),
            ("vdb2", Some("vdb")),
            ("xvda1", Some("xvda")),
            ("mmcblk0p1", Some("mmcblk0")),
            ("mmcblk0", None),
            ("mmcblk0boot0", None),
            ("nvme0n1p2", Some("nvme0n1")),
            ("nvme0n1", None),
            ("loop0", None),
            ("loop0p1", Some("loop0")),
            ("dm-0", None),
            ("sr0", None),
            ("md127", None),
        ];
        for (name, want) in cases {
            assert_eq!(partition_parent(name), want, "{name:?}");
        }
    }

    #[test]
    fn usb_ancestors_by_name() {
        let cases: [(&str, &[&str]); 5] = [
            ("1-1", &["usb1"]),
            ("1-1.2", &["1-1", "usb1"]),
            ("3-10.4.1", &["3-10.4", "3-10", "usb3"]),
            ("usb1", &[]),
            ("garbage", &[]),
        ];
        for (port, want) in cases {
            assert_eq!(usb_ancestors(port), want, "{port:?}");
        }
        let k = DeviceKeys::new("sdb").with_usb_port("2-1.4.3");
        assert_eq!(k.usb_upstream, ["2-1.4", "2-1", "usb2"]);
    }

    #[test]
    fn devnum_from_record_dictionary() {
        let k = DeviceKeys::from_disk(&usb_disk());
        assert_eq!(
            k.match_key(&EventKey::Devnum("8:1".into())).as_deref(),
            Some("devnum:8:1")
        );
        assert_eq!(k.match_key(&EventKey::Devnum("8:16".into())), None);
        assert_eq!(k.match_key(&EventKey::AtaPort("ata1".into())), None);
    }
}
