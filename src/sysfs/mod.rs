//! Owns reading a sysfs tree: one `SysfsRoot` (the real `/sys`, a copied tree, or a umockdev
//! testbed) through which every attribute, link and directory listing is read.
//!
//! Why not `std::fs::canonicalize` or `metadata`: under `umockdev-run` only libc calls such as
//! `open`, `readlink` and `opendir` are redirected, and a recorded `driver` link points at a
//! directory that does not exist in the tree. So links are resolved lexically, the way the
//! kernel lays them out (relative `../../..` paths inside sysfs).

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

pub mod node;
pub mod parse;

/// Why an attribute has no value: kept so that an absent field always has a known reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttrError {
    /// The file does not exist (the driver or kernel version does not provide it).
    Absent,
    /// The file exists but could not be read (permissions, I/O error, device gone).
    Unreadable(String),
    /// The content did not parse as the expected type.
    Malformed(String),
}

impl std::fmt::Display for AttrError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttrError::Absent => write!(f, "not present"),
            AttrError::Unreadable(e) => write!(f, "unreadable: {e}"),
            AttrError::Malformed(e) => write!(f, "malformed: {e}"),
        }
    }
}

/// A sysfs tree and the side files that describe the same system.
#[derive(Debug, Clone)]
pub struct SysfsRoot {
    root: PathBuf,
    /// The udev database (`/run/udev/data`), read by the pure-sysfs backend for `ID_*`
    /// properties; only meaningful together with the live `/sys`.
    udev_data: Option<PathBuf>,
    /// `/proc/self/mountinfo` of the same system; a copied tree has none.
    mountinfo: Option<PathBuf>,
}

impl SysfsRoot {
    /// The running system: `/sys`, `/run/udev/data`, `/proc/self/mountinfo`.
    pub fn live() -> Self {
        SysfsRoot {
            root: PathBuf::from("/sys"),
            udev_data: Some(PathBuf::from("/run/udev/data")),
            mountinfo: Some(PathBuf::from("/proc/self/mountinfo")),
        }
    }

    /// A tree copied or recorded elsewhere. `dir` is the sysfs directory itself (holding
    /// `devices/`), or a directory holding `sys/` (as `materialize.sh` and umockdev make).
    /// Mounts and the udev database of this machine do not describe that tree, so none are read.
    pub fn at(dir: &Path) -> Self {
        let root = if !dir.join("devices").is_dir() && dir.join("sys/devices").is_dir() {
            dir.join("sys")
        } else {
            dir.to_path_buf()
        };
        SysfsRoot {
            root,
            udev_data: None,
            mountinfo: None,
        }
    }

    /// Whether `/dev` holds the devices this tree describes, so health ioctls may be sent:
    /// the live `/sys` outside a umockdev testbed (umockdev sets `UMOCKDEV_DIR`; its nodes are
    /// stand-ins, and a copied tree names another machine's disks).
    pub fn nodes_are_live(&self) -> bool {
        self.udev_data.is_some()
            && self.root == Path::new("/sys")
            && std::env::var_os("UMOCKDEV_DIR").is_none()
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Bytes a disk has moved so far (read plus written), from the kernel's own counters of it
    /// (`block/NAME/stat`); `None` when the disk or its counters are gone.
    pub fn block_stat_bytes(&self, name: &str) -> Option<u64> {
        let text = std::fs::read_to_string(self.root.join("block").join(name).join("stat")).ok()?;
        parse::block_stat_bytes(&text)
    }

    /// What a block device (disk or partition) holds now, in bytes (`class/block/NAME/size`
    /// counts 512-byte sectors whatever the logical block); `None` when it is gone or
    /// unreadable.
    pub fn block_size_bytes(&self, name: &str) -> Option<u64> {
        let text = self.attr(&format!("class/block/{name}"), "size").ok()?;
        text.trim().parse::<u64>().ok()?.checked_mul(512)
    }

    /// Whether the tree has the directories block devices are found in.
    pub fn looks_like_sysfs(&self) -> bool {
        self.root.join("devices").is_dir()
            && (self.root.join("class/block").is_dir() || self.root.join("block").is_dir())
    }

    /// The absolute path of a device given as a devpath (`/devices/...`).
    pub fn dir(&self, devpath: &str) -> PathBuf {
        self.root.join(devpath.trim_start_matches('/'))
    }

    /// Reads `devpath/name`, trimmed of trailing whitespace (sysfs ends values with `\n`,
    /// SCSI pads vendor/model with blanks).
    pub fn attr(&self, devpath: &str, name: &str) -> Result<String, AttrError> {
        let p = self.dir(devpath).join(name);
        match fs::read(&p) {
            Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).trim_end().to_string()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(AttrError::Absent),
            Err(e) => Err(AttrError::Unreadable(e.to_string())),
        }
    }

    /// Reads a binary attribute (`bos_descriptors`) of at most `cap` bytes; a larger file is
    /// refused as malformed, unread past the cap.
    pub fn attr_bytes(&self, devpath: &str, name: &str, cap: usize) -> Result<Vec<u8>, AttrError> {
        use std::io::Read;
        let p = self.dir(devpath).join(name);
        let f = match fs::File::open(&p) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(AttrError::Absent),
            Err(e) => return Err(AttrError::Unreadable(e.to_string())),
        };
        let mut bytes = Vec::new();
        f.take(cap as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| AttrError::Unreadable(e.to_string()))?;
        if bytes.len() > cap {
            return Err(AttrError::Malformed(format!("larger than {cap} bytes")));
        }
        Ok(bytes)
    }

    /// Reads and parses an attribute with `f`, keeping the reason when it fails.
    pub fn attr_parse<T>(
        &self,
        devpath: &str,
        name: &str,
        f: impl FnOnce(&str) -> Option<T>,
    ) -> Result<T, AttrError> {
        let raw = self.attr(devpath, name)?;
        f(&raw).ok_or_else(|| AttrError::Malformed(format!("{raw:?}")))
    }

    /// The last component of the target of link `devpath/name` (`driver`, `subsystem`);
    /// the target itself need not exist.
    pub fn link_name(&self, devpath: &str, name: &str) -> Option<String> {
        let target = fs::read_link(self.dir(devpath).join(name)).ok()?;
        target.file_name().map(|s| s.to_string_lossy().into_owned())
    }

    /// Resolves a path inside the tree that may cross symlinks (e.g. `/class/block/sda`) to a
    /// devpath (`/devices/.../block/sda`), following each link lexically.
    pub fn resolve(&self, path: &str) -> Option<String> {
        let mut cur = PathBuf::from("/");
        let mut pending: std::collections::VecDeque<String> = split(path).into();
        let mut hops = 0;
        while let Some(comp) = pending.pop_front() {
            if comp == ".." {
                cur.pop();
                continue;
            }
            let candidate = cur.join(&comp);
            match fs::read_link(self.dir(&candidate.to_string_lossy())) {
                Ok(target) => {
                    hops += 1;
                    if hops > 40 {
                        return None; // a loop: not a kernel-made tree
                    }
                    let mut parts = split(&target.to_string_lossy());
                    if target.is_absolute() {
                        // An absolute link in a copied tree points into the original /sys.
                        cur = PathBuf::from("/");
                        if parts.first().map(String::as_str) == Some("sys") {
                            parts.remove(0);
                        }
                    }
                    for part in parts.into_iter().rev() {
                        pending.push_front(part);
                    }
                }
                Err(_) => cur = candidate,
            }
        }
        Some(normalize(&cur).to_string_lossy().into_owned())
    }

    /// Names in directory `devpath/sub`, sorted; empty when it does not exist.
    pub fn list(&self, devpath: &str, sub: &str) -> Vec<String> {
        let mut p = self.dir(devpath);
        if !sub.is_empty() {
            p = p.join(sub);
        }
        let mut names: Vec<String> = match fs::read_dir(&p) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        };
        names.sort();
        names
    }

    pub fn exists(&self, devpath: &str, name: &str) -> bool {
        fs::symlink_metadata(self.dir(devpath).join(name)).is_ok()
            || fs::read_link(self.dir(devpath).join(name)).is_ok()
            || fs::File::open(self.dir(devpath).join(name)).is_ok()
    }

    /// Kernel `uevent` properties of a device (plus, in a umockdev testbed, the recorded udev
    /// properties, which umockdev writes into the same file).
    pub fn uevent(&self, devpath: &str) -> Vec<(String, String)> {
        self.attr(devpath, "uevent")
            .map(|s| parse::uevent(&s))
            .unwrap_or_default()
    }

    /// udev database entry (`E:` lines) of a block device, from `/run/udev/data/bMAJ:MIN`.
    pub fn udev_db(&self, devnum: &str) -> Vec<(String, String)> {
        let Some(dir) = &self.udev_data else {
            return Vec::new();
        };
        fs::read_to_string(dir.join(format!("b{devnum}")))
            .map(|s| parse::udev_db(&s))
            .unwrap_or_default()
    }

    /// The mount table of the running system, when this root describes it.
    pub fn mountinfo(&self) -> Option<Result<String, String>> {
        let p = self.mountinfo.as_ref()?;
        Some(fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display())))
    }

    /// Uses another mount table (tests, or a table saved beside a copied tree).
    pub fn with_mountinfo(mut self, path: Option<PathBuf>) -> Self {
        self.mountinfo = path;
        self
    }
}

fn split(p: &str) -> Vec<String> {
    p.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_string)
        .collect()
}

/// Lexical normalisation: resolves `..` without touching the filesystem.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(s) => out.push(s),
            _ => {}
        }
    }
    out
}

/// The devpath of the parent directory that is a device (has a `uevent` file), as libudev's
/// `udev_device_get_parent` finds it; `None` at `/devices`.
pub fn parent_devpath(sys: &SysfsRoot, devpath: &str) -> Option<String> {
    let mut p = PathBuf::from(devpath);
    loop {
        if !p.pop() {
            return None;
        }
        let s = p.to_string_lossy().into_owned();
        if s == "/devices" || s == "/" || !s.starts_with("/devices") {
            return None;
        }
        if sys.exists(&s, "uevent") {
            return Some(s);
        }
    }
}
