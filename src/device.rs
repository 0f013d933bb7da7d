//! Owns the words every layer uses for a storage device before anything is known of its
//! place in the system: the bus class it is judged by, the eMMC hardware area, and a field that
//! could not be filled with the reason.

use serde::{Deserialize, Serialize};

/// The bus a disk sits on, as the factory matrix groups devices.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum DeviceClass {
    Usb,
    Sata,
    Emmc,
    Sd,
    Nvme,
    /// A UFS logical unit (a SCSI disk under a UFS host controller).
    Ufs,
    Virtio,
    Scsi,
    Loop,
    /// A block device over raw flash (`mtdblock3`, `ubiblock0_1`): the flash is tested with
    /// `usbperf-matrix flash`, never written through this device.
    Mtd,
    #[default]
    Other,
}

impl DeviceClass {
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceClass::Usb => "usb",
            DeviceClass::Sata => "sata",
            DeviceClass::Emmc => "emmc",
            DeviceClass::Sd => "sd",
            DeviceClass::Nvme => "nvme",
            DeviceClass::Ufs => "ufs",
            DeviceClass::Virtio => "virtio",
            DeviceClass::Scsi => "scsi",
            DeviceClass::Loop => "loop",
            DeviceClass::Mtd => "mtd",
            DeviceClass::Other => "other",
        }
    }
}

impl std::fmt::Display for DeviceClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The hardware area of an eMMC a block device exposes. Only `user` may ever hold test data:
/// boot areas hold the bootloader, RPMB holds keys and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum EmmcArea {
    User,
    Boot0,
    Boot1,
    Rpmb,
    General(u8),
}

impl EmmcArea {
    /// The name the report spells it with (a general-purpose area is `general`, whatever
    /// its number).
    pub fn as_str(self) -> &'static str {
        match self {
            EmmcArea::User => "user",
            EmmcArea::Boot0 => "boot0",
            EmmcArea::Boot1 => "boot1",
            EmmcArea::Rpmb => "rpmb",
            EmmcArea::General(_) => "general",
        }
    }
}

/// A field left empty and why (attribute absent, unreadable, malformed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Missing {
    pub field: String,
    pub reason: String,
}
