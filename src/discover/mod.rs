//! Owns finding block devices and their buses (USB, SATA, MMC, NVMe, virtio): enumeration by
//! libudev or by a plain sysfs walk, both reading through one injectable `SysfsRoot`.

mod build;
pub mod linkcheck;
pub mod model;
pub mod mtd;
pub mod parse;
#[cfg(feature = "udev")]
mod udev_backend;
pub mod usbpower;
pub mod usbtree;

pub use crate::sysfs::SysfsRoot;
pub use model::*;

use crate::sysfs::node::{self, SysNode};

/// Which enumerator to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// libudev when built in and usable, else sysfs.
    Auto,
    Udev,
    Sysfs,
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error(
        "{0} does not look like a sysfs tree (no devices/ and class/block/ or block/): pass the \
         directory that holds them, or its parent holding sys/"
    )]
    NotSysfs(String),
    #[error(
        "this build has no libudev support (cargo feature `udev` off): use --backend sysfs or \
         rebuild with the default features"
    )]
    UdevNotBuilt,
    #[error("libudev enumeration failed: {0} (try --backend sysfs)")]
    Udev(std::io::Error),
}

impl crate::exit::Classify for DiscoverError {
    /// A backend this build lacks or a path that is no sysfs tree is the user's to fix;
    /// libudev failing is not.
    fn exit(&self) -> crate::exit::Exit {
        match self {
            DiscoverError::NotSysfs(_) | DiscoverError::UdevNotBuilt => crate::exit::Exit::Usage,
            DiscoverError::Udev(_) => crate::exit::Exit::Error,
        }
    }
}

/// Finds every whole disk on the system described by `sys`.
pub fn discover(sys: &SysfsRoot, backend: Backend) -> Result<Inventory, DiscoverError> {
    if !sys.looks_like_sysfs() {
        return Err(DiscoverError::NotSysfs(sys.path().display().to_string()));
    }
    let mut inv = Inventory {
        sysfs_root: sys.path().display().to_string(),
        ..Inventory::default()
    };
    let mounts = match sys.mountinfo() {
        Some(Ok(text)) => parse::mountinfo(&text),
        Some(Err(e)) => {
            inv.warnings.push(format!(
                "mount table unreadable ({e}): mounts are unknown, treat every disk as in use"
            ));
            Vec::new()
        }
        None => Vec::new(),
    };

    let (use_udev, reason) = choose(backend)?;
    if use_udev {
        #[cfg(feature = "udev")]
        {
            let nodes = udev_backend::enumerate(sys).map_err(DiscoverError::Udev)?;
            inv.backend = "udev".into();
            inv.backend_reason = reason;
            inv.disks = nodes
                .iter()
                .filter(|n| !is_hidden(*n))
                .map(|n| build::disk(sys, n, &mounts))
                .collect();
        }
    } else {
        inv.backend = "sysfs".into();
        inv.backend_reason = reason;
        inv.disks = sysfs_disks(sys)
            .into_iter()
            .map(|p| SysNode::new(sys, p))
            .filter(|n| !is_hidden(n))
            .map(|n| build::disk(sys, &n, &mounts))
            .collect();
    }
    inv.disks.sort_by_key(|d| natural_key(&d.name));
    inv.flash = mtd::read(sys, &mounts);
    Ok(inv)
}

/// A disk the kernel keeps hidden (`hidden` = 1): the per-controller paths of an NVMe
/// multipath namespace (`nvme0c0n1`, on every kernel with NVME_MULTIPATH, Debian's among them)
/// have no device node; the namespace itself (`nvme0n1`) is the disk, listed once.
fn is_hidden<'a>(n: &dyn node::DevNode<'a>) -> bool {
    n.attr("hidden").is_ok_and(|v| v.trim() == "1")
}

fn choose(backend: Backend) -> Result<(bool, String), DiscoverError> {
    let built = cfg!(feature = "udev");
    match backend {
        Backend::Udev if !built => Err(DiscoverError::UdevNotBuilt),
        Backend::Udev => Ok((true, "requested with --backend udev".into())),
        Backend::Sysfs => Ok((false, "requested with --backend sysfs".into())),
        Backend::Auto if built => Ok((true, "libudev built in (default)".into())),
        Backend::Auto => Ok((
            false,
            "libudev not built in (cargo feature `udev` off)".into(),
        )),
    }
}

/// Whole disks found by listing `class/block` (or the older `block/`) and keeping entries
/// whose uevent says `DEVTYPE=disk`.
fn sysfs_disks(sys: &SysfsRoot) -> Vec<String> {
    let dir = if sys.path().join("class/block").is_dir() {
        "/class/block"
    } else {
        "/block"
    };
    sys.list(dir, "")
        .into_iter()
        .filter_map(|n| sys.resolve(&format!("{dir}/{n}")))
        .filter(|p| p.starts_with("/devices/"))
        .filter(|p| {
            let ev = sys.uevent(p);
            match ev.iter().find(|(k, _)| k == "DEVTYPE") {
                Some((_, t)) => t == "disk",
                None => !sys.exists(p, "partition"),
            }
        })
        .collect()
}

/// Sort key that puts `sdb` before `sdaa` and `loop2` before `loop10`.
fn natural_key(name: &str) -> (usize, String, u64, String) {
    let alpha: String = name.chars().take_while(|c| !c.is_ascii_digit()).collect();
    let rest = &name[alpha.len()..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    (
        alpha.len(),
        alpha.clone(),
        digits.parse().unwrap_or(0),
        rest[digits.len()..].to_string(),
    )
}
