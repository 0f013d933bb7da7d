//! Owns enumeration through libudev (crate `udev`): the disks libudev lists, with udev's
//! properties (`ID_PATH`, `ID_SERIAL_SHORT`) and its parent walk.

use std::ffi::OsStr;

use crate::sysfs::node::DevNode;
use crate::sysfs::{AttrError, SysfsRoot};

/// A device as libudev sees it; attributes libudev cannot give are asked of sysfs for the
/// precise reason (libudev only says "no value").
pub struct UdevNode<'a> {
    dev: udev::Device,
    sys: &'a SysfsRoot,
}

fn s(v: Option<&OsStr>) -> Option<String> {
    v.map(|v| v.to_string_lossy().into_owned())
}

impl<'a> DevNode<'a> for UdevNode<'a> {
    fn devpath(&self) -> String {
        self.dev.devpath().to_string_lossy().into_owned()
    }
    fn sysname(&self) -> String {
        self.dev.sysname().to_string_lossy().into_owned()
    }
    fn subsystem(&self) -> Option<String> {
        s(self.dev.subsystem())
    }
    fn devtype(&self) -> Option<String> {
        s(self.dev.devtype())
    }
    fn driver(&self) -> Option<String> {
        // The kernel also names the driver in uevent's DRIVER (kept in recordings where the
        // `driver` link was not); the sysfs walker reads both, so must this.
        s(self.dev.driver()).or_else(|| self.property("DRIVER"))
    }
    fn attr(&self, name: &str) -> Result<String, AttrError> {
        match self.dev.attribute_value(name) {
            Some(v) => Ok(v.to_string_lossy().trim_end().to_string()),
            None => match self.sys.attr(&self.devpath(), name) {
                // libudev refuses some values (e.g. over its size limit); sysfs has them.
                Ok(v) => Ok(v),
                Err(e) => Err(e),
            },
        }
    }
    // libudev cuts binary values at the first NUL and resolves no links: both are read from
    // the device's directory itself.
    fn attr_bytes(&self, name: &str, cap: usize) -> Result<Vec<u8>, AttrError> {
        self.sys.attr_bytes(&self.devpath(), name, cap)
    }
    fn link(&self, name: &str) -> Option<String> {
        self.sys.link_name(&self.devpath(), name)
    }
    fn property(&self, key: &str) -> Option<String> {
        s(self.dev.property_value(key))
    }
    fn parent(&self) -> Option<Box<dyn DevNode<'a> + 'a>> {
        let p = self.dev.parent()?;
        Some(Box::new(UdevNode {
            dev: p,
            sys: self.sys,
        }))
    }
}

/// Lists whole disks (subsystem `block`, devtype `disk`) through libudev.
pub fn enumerate<'a>(sys: &'a SysfsRoot) -> std::io::Result<Vec<UdevNode<'a>>> {
    let mut e = udev::Enumerator::new()?;
    e.match_subsystem("block")?;
    e.match_property("DEVTYPE", "disk")?;
    Ok(e.scan_devices()?.map(|dev| UdevNode { dev, sys }).collect())
}
