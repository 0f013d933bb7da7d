//! Owns the device-node abstraction both enumerators share: a device in the kernel's tree with
//! its subsystem, driver, attributes, properties and parent, whether libudev or a plain sysfs
//! walk provides it.

use super::parse;
use super::{parent_devpath, AttrError, SysfsRoot};

/// One device in the kernel's device tree.
pub trait DevNode<'a> {
    /// Kernel device path (`/devices/...`), the same for every backend.
    fn devpath(&self) -> String;
    fn sysname(&self) -> String {
        self.devpath()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string()
    }
    fn subsystem(&self) -> Option<String>;
    fn devtype(&self) -> Option<String>;
    fn driver(&self) -> Option<String>;
    /// A sysfs attribute (file below the device directory), trimmed.
    fn attr(&self, name: &str) -> Result<String, AttrError>;
    /// A binary sysfs attribute (`bos_descriptors`), refused past `cap` bytes.
    fn attr_bytes(&self, name: &str, cap: usize) -> Result<Vec<u8>, AttrError>;
    /// The last component of the target of the link `name` below the device (`port`,
    /// `port/peer`).
    fn link(&self, name: &str) -> Option<String>;
    /// A kernel or udev property (`DEVNAME`, `ID_PATH`).
    fn property(&self, key: &str) -> Option<String>;
    fn parent(&self) -> Option<Box<dyn DevNode<'a> + 'a>>;
}

/// A device read straight from a sysfs tree.
pub struct SysNode<'a> {
    sys: &'a SysfsRoot,
    devpath: String,
    props: Vec<(String, String)>,
}

impl<'a> SysNode<'a> {
    pub fn new(sys: &'a SysfsRoot, devpath: String) -> Self {
        let mut props = sys.uevent(&devpath);
        // Block devices: add the udev database entry, where udev ran (live system only).
        if let Ok(dev) = sys.attr(&devpath, "dev") {
            if sys.exists(&devpath, "subsystem")
                && sys.link_name(&devpath, "subsystem").as_deref() == Some("block")
            {
                for (k, v) in sys.udev_db(&dev) {
                    if !props.iter().any(|(pk, _)| *pk == k) {
                        props.push((k, v));
                    }
                }
            }
        }
        SysNode {
            sys,
            devpath,
            props,
        }
    }
}

impl<'a> DevNode<'a> for SysNode<'a> {
    fn devpath(&self) -> String {
        self.devpath.clone()
    }
    fn subsystem(&self) -> Option<String> {
        self.sys
            .link_name(&self.devpath, "subsystem")
            .or_else(|| self.property("SUBSYSTEM"))
    }
    fn devtype(&self) -> Option<String> {
        self.property("DEVTYPE")
    }
    fn driver(&self) -> Option<String> {
        self.sys
            .link_name(&self.devpath, "driver")
            .or_else(|| self.property("DRIVER"))
    }
    fn attr(&self, name: &str) -> Result<String, AttrError> {
        self.sys.attr(&self.devpath, name)
    }
    fn attr_bytes(&self, name: &str, cap: usize) -> Result<Vec<u8>, AttrError> {
        self.sys.attr_bytes(&self.devpath, name, cap)
    }
    fn link(&self, name: &str) -> Option<String> {
        self.sys.link_name(&self.devpath, name)
    }
    fn property(&self, key: &str) -> Option<String> {
        self.props
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }
    fn parent(&self) -> Option<Box<dyn DevNode<'a> + 'a>> {
        let p = parent_devpath(self.sys, &self.devpath)?;
        Some(Box::new(SysNode::new(self.sys, p)))
    }
}

/// Reads a flag attribute, keeping the reason when it cannot.
pub fn attr_with<T>(
    node: &dyn DevNode<'_>,
    name: &str,
    f: impl FnOnce(&str) -> Option<T>,
) -> Result<T, AttrError> {
    let raw = node.attr(name)?;
    f(&raw).ok_or_else(|| AttrError::Malformed(format!("{raw:?}")))
}

/// Non-empty value or `None` (sysfs strings can be present but blank).
pub fn nonempty(s: Result<String, AttrError>) -> Result<String, AttrError> {
    match s {
        Ok(v) if v.trim().is_empty() => Err(AttrError::Malformed("empty".into())),
        Ok(v) => Ok(v.trim().to_string()),
        Err(e) => Err(e),
    }
}

/// An udev property decoded from its `_ENC` variant when present (keeps inner spaces).
pub fn decoded_property(node: &dyn DevNode<'_>, key: &str) -> Option<String> {
    node.property(&format!("{key}_ENC"))
        .map(|v| parse::udev_unescape(&v).trim().to_string())
        .or_else(|| node.property(key))
        .filter(|v| !v.is_empty())
}
