//! Owns the USB runtime-power writes of a run: `power/control=on` for a USB disk's device and
//! every hub above it while it is tested, and the old values written back afterwards — on
//! drop, and from the signal thread when a second SIGINT/SIGTERM aborts the run at once.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{Disk, SysfsRoot};

/// Every value changed and not yet restored, process-wide, so an abort can restore them
/// without unwinding (a second signal exits from the signal thread).
static PINNED: Mutex<Vec<(PathBuf, String)>> = Mutex::new(Vec::new());

/// Keeps a USB disk's device and hubs out of runtime autosuspend while it lives: a resume
/// logs the same `reset high-speed USB device` line as an error-recovery reset, which would
/// fail a good device.
#[derive(Debug)]
pub struct UsbAwake {
    restore: Vec<(PathBuf, String)>,
}

impl UsbAwake {
    /// Writes `on` to `power/control` of the disk's USB device and its hubs under the sysfs
    /// root, remembering each old value it replaced. Nothing for a non-USB disk.
    pub fn pin(sys: &SysfsRoot, disk: &Disk) -> UsbAwake {
        let mut restore = Vec::new();
        if let Some(u) = &disk.usb {
            let ports = std::iter::once(u.port_path.clone())
                .chain(u.hubs.iter().map(|h| h.port_path.clone()));
            for port in ports {
                let p = sys
                    .path()
                    .join("bus/usb/devices")
                    .join(port)
                    .join("power/control");
                if let Ok(old) = std::fs::read_to_string(&p) {
                    let old = old.trim().to_string();
                    if old != "on" && std::fs::write(&p, "on").is_ok() {
                        if let Ok(mut all) = PINNED.lock() {
                            all.push((p.clone(), old.clone()));
                        }
                        restore.push((p, old));
                    }
                }
            }
        }
        UsbAwake { restore }
    }

    /// The `power/control` files this value changed.
    pub fn changed(&self) -> Vec<&Path> {
        self.restore.iter().map(|(p, _)| p.as_path()).collect()
    }
}

impl Drop for UsbAwake {
    fn drop(&mut self) {
        for (p, old) in &self.restore {
            let _ = std::fs::write(p, old);
            if let Ok(mut all) = PINNED.lock() {
                all.retain(|(q, _)| q != p);
            }
        }
    }
}

/// Writes back every value still pinned (the abort path); returns how many.
pub fn restore_all_pinned() -> usize {
    let Ok(mut all) = PINNED.lock() else {
        return 0;
    };
    let n = all.len();
    for (p, old) in all.drain(..) {
        let _ = std::fs::write(&p, old);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::{UsbHop, UsbLink};

    #[test]
    fn pins_device_and_hubs_then_restores_on_drop_and_on_abort() {
        let root = std::env::temp_dir().join(format!("usbperf-usbpower-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (port, value) in [("1-1.2", "auto"), ("1-1", "auto"), ("2-1", "on")] {
            let d = root.join("bus/usb/devices").join(port).join("power");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("control"), format!("{value}\n")).unwrap();
        }
        let sys = SysfsRoot::at(&root);
        let control = |port: &str| {
            std::fs::read_to_string(
                root.join("bus/usb/devices")
                    .join(port)
                    .join("power/control"),
            )
            .unwrap()
            .trim()
            .to_string()
        };
        let disk = Disk {
            name: "sda".into(),
            usb: Some(UsbLink {
                port_path: "1-1.2".into(),
                hubs: vec![UsbHop {
                    port_path: "1-1".into(),
                    ..UsbHop::default()
                }],
                ..UsbLink::default()
            }),
            ..Disk::default()
        };
        let awake = UsbAwake::pin(&sys, &disk);
        assert_eq!(
            (control("1-1.2"), control("1-1")),
            ("on".into(), "on".into())
        );
        assert_eq!(awake.changed().len(), 2);
        drop(awake);
        assert_eq!(
            (control("1-1.2"), control("1-1")),
            ("auto".into(), "auto".into())
        );

        // The abort path: the value is never dropped, the signal thread restores it.
        let awake = UsbAwake::pin(&sys, &disk);
        std::mem::forget(awake);
        assert_eq!(control("1-1.2"), "on");
        assert!(restore_all_pinned() >= 2);
        assert_eq!(
            (control("1-1.2"), control("1-1")),
            ("auto".into(), "auto".into())
        );
        // A port that was already `on` is left alone.
        assert_eq!(control("2-1"), "on");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
