//! Owns the inventory's data types: what discovery found about each disk and its bus, with
//! units in field names and the reason for every field it could not fill.

use serde::{Deserialize, Serialize};

pub use crate::device::{DeviceClass, EmmcArea, Missing};

/// The complete inventory of one system.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    /// Which enumerator produced it: `udev` (libudev) or `sysfs`.
    pub backend: String,
    /// Why that backend (e.g. libudev not built in, or `--sysfs-root` given).
    pub backend_reason: String,
    pub sysfs_root: String,
    pub disks: Vec<Disk>,
    /// Raw flash (MTD and UBI devices): not block devices, so not among the disks.
    #[serde(default, skip_serializing_if = "super::mtd::RawFlash::is_empty")]
    pub flash: super::mtd::RawFlash,
    /// Problems that concern the whole inventory (e.g. the mount table could not be read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// One whole block device (not a partition).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Disk {
    /// Kernel name (`sda`, `mmcblk0`).
    pub name: String,
    /// `major:minor`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub devnum: Option<String>,
    /// Device node (`/dev/sda`).
    pub dev_node: String,
    /// Kernel device path below the sysfs root (`/devices/pci0000:00/.../block/sda`).
    pub devpath: String,
    pub class: DeviceClass,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The firmware revision the device reports: SCSI/SATA/USB `rev` (INQUIRY), NVMe
    /// `firmware_rev`, eMMC/SD `fwrev` (the EXT_CSD firmware version, or the CID's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// udev `ID_PATH` (the stable port path, e.g. `pci-0000:00:1d.7-usb-0:1:1.0-scsi-0:0:0:0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logical_block_size_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physical_block_size_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rotational: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removable: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// Mount points of the whole disk itself (a filesystem without a partition table).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<Partition>,
    /// Devices stacked on the disk (`dm-0`, `md127`): it is an LVM, RAID or crypt member.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usb: Option<UsbLink>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sata: Option<SataLink>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mmc: Option<MmcInfo>,
    /// Flash and link health (life time, SMART, PCIe link, USB counters), read-only; its own
    /// `missing` says what could not be read and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<crate::health::Health>,
    /// Every field discovery could not fill, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<Missing>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Mount {
    pub mountpoint: String,
    pub fstype: String,
    pub read_only: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Partition {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub devnum: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub number: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_sector: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<String>,
}

/// One USB device on the way from the disk to the root hub.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UsbHop {
    /// Kernel name: `1-1.2` for a device, `usb1` for a root hub.
    pub port_path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speed_mbps: Option<f64>,
    /// `bcdUSB` (`2.00`): what the device claims to support, not what it negotiated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vendor_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    /// Number of downstream ports (hubs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ports: Option<u32>,
}

/// The USB link of a disk: the storage device, its interface driver and the hub chain.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UsbLink {
    /// Bus number (`lsusb -t` "Bus 01").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bus: Option<u32>,
    /// Kernel port path of the storage device (`1-1.2`: bus 1, root port 1, hub port 2); the
    /// board profile names ports by it (`usb:1-1.2`).
    pub port_path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub devnum: Option<u32>,
    /// Negotiated speed in Mbit/s (1.5, 12, 480, 5000, 10000, 20000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speed_mbps: Option<f64>,
    /// `bcdUSB`; a USB 1.1 link can still say 2.00, so never judge by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The fastest the device says it can signal, in Mbit/s (12, 480, 5000, 10000): from its
    /// BOS descriptor's capabilities where it has one, else from `bcdUSB`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capable_mbps: Option<f64>,
    /// `capable_mbps` comes from the BOS descriptor (not only `bcdUSB`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub capable_from_bos: bool,
    /// The hub port the device is plugged into (`usb1-port2`, `1-1-port3`: its `port` link).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    /// That port's SuperSpeed twin (`usb2-port2`, its `peer` link): a USB 2 port with
    /// SuperSpeed lanes beside it. Absent on a USB 2 only port, or when `port` is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_peer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vendor_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// Mass-storage interface (`1-1.2:1.0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// Interface driver: `usb-storage` (Bulk-Only Transport) or `uas`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// Hubs between the device and the root hub, nearest first (not the root hub).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hubs: Vec<UsbHop>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root_hub: Option<UsbHop>,
    /// The root hub's speed was inferred from its USB product id, not read (udev exports).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub root_hub_speed_inferred: bool,
    /// The lowest speed on the path device → hubs → root hub: what the data can move at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_chain_speed_mbps: Option<f64>,
    /// USB host controller driver (`ehci-pci`, `xhci_hcd`), from the controller above the
    /// root hub.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_controller_driver: Option<String>,
}

/// The libata link of a SATA disk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SataLink {
    /// libata port (`ata1`).
    pub port: String,
    /// libata link (`link1`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// Negotiated link speed in Gbit/s (1.5, 3.0, 6.0); absent when the link is down.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sata_spd_gbps: Option<f64>,
    /// Speed limit set on the link (`sata_spd_limit`), Gbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sata_spd_limit_gbps: Option<f64>,
    /// What the controller supports (`hw_sata_spd_limit`), Gbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hw_sata_spd_limit_gbps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xfer_mode: Option<String>,
}

/// The MMC card behind an `mmcblk` device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MmcInfo {
    /// Card device (`mmc0:0001`).
    pub card: String,
    /// `MMC` (eMMC), `SD` or `SDIO`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub card_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manfid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oemid: Option<String>,
    /// CID product revision (`0x1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prv: Option<String>,
    /// Manufacturing date as the card reports it (`MM/YYYY`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub csd: Option<String>,
    /// eMMC hardware area of this block device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub area: Option<EmmcArea>,
    /// Host controller (`mmc0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// What an SD card claims to write at (its SSR): Speed Class, UHS and Video Speed Class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speed_claims: Option<super::parse::SdSpeedClaims>,
    /// Bus timing from debugfs `ios` (`mmc HS400 enhanced strobe`); needs debugfs mounted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timing: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_hz: Option<u64>,
}
