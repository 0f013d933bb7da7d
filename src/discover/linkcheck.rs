//! Owns the USB link check: each port's negotiated speed against what the board profile says
//! the port must give, with the likely cause of every shortfall in words.

use serde::{Deserialize, Serialize};

use super::model::{Disk, UsbLink};
use super::parse::{speed_label, usb_speed_name};

/// "The device on this port must link at least this fast."
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PortExpectation {
    /// `usb:1-1.2` (kernel port path, as `lsusb -t` shows it) or `id_path:<udev ID_PATH
    /// prefix>` (e.g. `id_path:platform-32f10108.usb-usb-0:1`).
    pub port: String,
    pub min_speed_mbps: f64,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ExpectationError {
    #[error(
        "link expectation {0:?}: expected PORT=SPEED, e.g. usb:1-1=480 (speed in Mbit/s: 12, \
         480, 5000, 10000)"
    )]
    Syntax(String),
    #[error(
        "link expectation {0:?}: the port must be usb:BUS-PORT[.PORT...] (kernel port path, as \
         lsusb -t shows it, e.g. usb:1-1.2) or id_path:<udev ID_PATH prefix>"
    )]
    Port(String),
    #[error("link expectation {0:?}: {1:?} is not a speed in Mbit/s (12, 480, 5000, 10000)")]
    Speed(String, String),
}

impl std::str::FromStr for PortExpectation {
    type Err = ExpectationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (port, speed) = s
            .rsplit_once('=')
            .ok_or_else(|| ExpectationError::Syntax(s.to_string()))?;
        let usb_ok = port.strip_prefix("usb:").is_some_and(is_usb_port_path);
        let id_path_ok = port.starts_with("id_path:") && !port.ends_with(':');
        if !(usb_ok || id_path_ok) {
            return Err(ExpectationError::Port(s.to_string()));
        }
        let sp = speed.trim().trim_end_matches('M');
        let v: f64 = sp
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v > 0.0)
            .ok_or_else(|| ExpectationError::Speed(s.to_string(), speed.to_string()))?;
        Ok(PortExpectation {
            port: port.to_string(),
            min_speed_mbps: v,
        })
    }
}

/// A kernel USB port path: `BUS-PORT[.PORT...]`, every part a decimal number (`1-1`, `3-1.4.2`),
/// as `lsusb -t` and `/sys/bus/usb/devices` name devices. The one grammar for `--expect` and
/// for a config selector's `port:`, so a typo is refused in both rather than matching nothing.
pub fn is_usb_port_path(p: &str) -> bool {
    let number = |t: &str| !t.is_empty() && t.len() <= 3 && t.bytes().all(|b| b.is_ascii_digit());
    match p.split_once('-') {
        Some((bus, ports)) => number(bus) && ports.split('.').all(number),
        None => false,
    }
}

/// The outcome for one expected port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkFinding {
    pub port: String,
    /// Disks found behind the port (several for a multi-LUN card reader).
    pub disks: Vec<String>,
    pub expected_mbps: f64,
    /// The device's own negotiated speed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_mbps: Option<f64>,
    /// The slowest hop between the device and the root hub.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_chain_speed_mbps: Option<f64>,
    pub pass: bool,
    /// Why it failed, and what usually causes that; empty when it passed.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cause: String,
}

fn matches(port: &str, disk: &Disk, usb: &UsbLink) -> bool {
    if let Some(p) = port.strip_prefix("usb:") {
        return usb.port_path == p;
    }
    if let Some(p) = port.strip_prefix("id_path:") {
        return disk.id_path.as_deref().is_some_and(|id| {
            id == p || id.starts_with(&format!("{p}:")) || id.starts_with(&format!("{p}-"))
        });
    }
    false
}

/// Checks every expectation against the inventory; one finding per expectation.
pub fn check_links(disks: &[Disk], expect: &[PortExpectation]) -> Vec<LinkFinding> {
    expect
        .iter()
        .map(|e| {
            let on_port: Vec<(&Disk, &UsbLink)> = disks
                .iter()
                .filter_map(|d| d.usb.as_ref().map(|u| (d, u)))
                .filter(|(d, u)| matches(&e.port, d, u))
                .collect();
            let mut f = LinkFinding {
                port: e.port.clone(),
                disks: on_port.iter().map(|(d, _)| d.name.clone()).collect(),
                expected_mbps: e.min_speed_mbps,
                measured_mbps: None,
                min_chain_speed_mbps: None,
                pass: false,
                cause: String::new(),
            };
            let Some((_, usb)) = on_port.first() else {
                f.cause = format!(
                    "no USB storage device found on port {}: nothing plugged in, a dead port or \
                     cable, or the device failed to enumerate (look for 'device descriptor read' \
                     or 'unable to enumerate' in dmesg)",
                    e.port
                );
                return f;
            };
            f.measured_mbps = usb.speed_mbps;
            f.min_chain_speed_mbps = usb.min_chain_speed_mbps;
            f.cause = cause(e.min_speed_mbps, usb);
            f.pass = f.cause.is_empty();
            f
        })
        .collect()
}

/// Empty when the link is fast enough; otherwise what is wrong and its usual causes.
pub fn cause(expected: f64, usb: &UsbLink) -> String {
    let Some(dev) = usb.speed_mbps else {
        return format!(
            "the negotiated speed of {} is unknown (no `speed` attribute): the link cannot be \
             verified, so it is not passed",
            usb.port_path
        );
    };
    let exp = speed_label(expected);
    let got = speed_label(dev);
    if dev < expected {
        // A device behind a slower hub can only link at the hub's speed: then the hub (or the
        // cable above it) is the fault, not the device.
        if let Some(hub) = usb
            .hubs
            .iter()
            .find(|h| h.speed_mbps.is_some_and(|s| s <= dev))
        {
            return format!(
                "port {} linked at {got} behind hub {} which itself runs at {}: the hub or its \
                 upstream cable limits the link below {exp} ({}); replace or re-seat the hub, \
                 or plug the device into the port directly",
                usb.port_path,
                hub.port_path,
                speed_label(hub.speed_mbps.unwrap_or(dev)),
                usb_speed_name(expected)
            );
        }
        let why = if dev <= 12.0 && expected >= 480.0 {
            "the high-speed handshake (chirp) failed, which on a USB 2.0 port almost always \
             means a bad cable or connector, a damaged stick, or a USB 1.1 device: re-seat or \
             replace the cable and stick; dmesg says 'new full-speed USB device'"
        } else if dev <= 480.0 && expected >= 5000.0 {
            "the SuperSpeed pairs did not connect: a USB 2.0 cable or extension, a USB 2.0 \
             stick, or a dirty or damaged USB 3 connector; dmesg says 'new high-speed USB \
             device' instead of 'new SuperSpeed USB device'"
        } else if dev < 10000.0 && expected >= 10000.0 {
            "the link trained at Gen 1: a cable, hub or device not rated for 10 Gbit/s"
        } else {
            "the device or its cable does not support the port's speed"
        };
        return format!(
            "port {} linked at {got} ({}) but must give at least {exp} ({}): {why}",
            usb.port_path,
            usb_speed_name(dev),
            usb_speed_name(expected)
        );
    }
    match usb.min_chain_speed_mbps {
        Some(min) if min < expected => {
            let slow = usb
                .hubs
                .iter()
                .chain(usb.root_hub.iter())
                .find(|h| h.speed_mbps == Some(min))
                .map(|h| h.port_path.clone())
                .unwrap_or_else(|| "a hub".into());
            format!(
                "port {} linked at {got}, but {slow} on the way to the root hub runs at {}: \
                 that hub or its upstream cable limits the link below {exp}",
                usb.port_path,
                speed_label(min)
            )
        }
        Some(_) => String::new(),
        None => format!(
            "port {} linked at {got}, but the speed of a hub on its path is unknown: the link \
             cannot be verified, so it is not passed",
            usb.port_path
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::model::UsbHop;

    fn disk(name: &str, port: &str, speed: Option<f64>, hubs: &[(&str, f64)], root: f64) -> Disk {
        let hubs: Vec<UsbHop> = hubs
            .iter()
            .map(|(p, s)| UsbHop {
                port_path: p.to_string(),
                speed_mbps: Some(*s),
                ..UsbHop::default()
            })
            .collect();
        let mut speeds: Vec<Option<f64>> = vec![speed];
        speeds.extend(hubs.iter().map(|h| h.speed_mbps));
        speeds.push(Some(root));
        Disk {
            name: name.into(),
            usb: Some(UsbLink {
                port_path: port.into(),
                speed_mbps: speed,
                min_chain_speed_mbps: if speeds.iter().all(Option::is_some) {
                    speeds.iter().flatten().copied().reduce(f64::min)
                } else {
                    None
                },
                hubs,
                root_hub: Some(UsbHop {
                    port_path: "usb1".into(),
                    speed_mbps: Some(root),
                    ..UsbHop::default()
                }),
                ..UsbLink::default()
            }),
            ..Disk::default()
        }
    }

    fn exp(s: &str) -> PortExpectation {
        s.parse().unwrap()
    }

    #[test]
    fn parses_expectations() {
        assert_eq!(
            exp("usb:1-1.2=480"),
            PortExpectation {
                port: "usb:1-1.2".into(),
                min_speed_mbps: 480.0
            }
        );
        assert_eq!(exp("usb:2-1=5000M").min_speed_mbps, 5000.0);
        assert!(matches!(
            "1-1=480".parse::<PortExpectation>(),
            Err(ExpectationError::Port(_))
        ));
        assert!(matches!(
            "usb:1-1".parse::<PortExpectation>(),
            Err(ExpectationError::Syntax(_))
        ));
        for bad in [
            "usb:garbage=480",
            "usb:1=480",
            "usb:1-=480",
            "usb:1-1..2=480",
            "usb:=480",
        ] {
            assert!(
                matches!(
                    bad.parse::<PortExpectation>(),
                    Err(ExpectationError::Port(_))
                ),
                "{bad}"
            );
        }
        let table = [
            ("1-1", true),
            ("3-1.4.2", true),
            ("10-2", true),
            ("1", false),
            ("a-1", false),
            ("1-1.", false),
            ("", false),
        ];
        for (p, ok) in table {
            assert_eq!(is_usb_port_path(p), ok, "{p}");
        }
        assert!(matches!(
            "usb:1-1=fast".parse::<PortExpectation>(),
            Err(ExpectationError::Speed(..))
        ));
    }

    #[test]
    fn verdicts_and_causes() {
        let disks = vec![
            disk("sda", "1-1", Some(480.0), &[], 480.0),
            disk("sdb", "2-1", Some(12.0), &[], 12.0),
            disk("sdc", "3-1", Some(480.0), &[], 5000.0),
            disk("sdd", "1-2.4", Some(480.0), &[("1-2", 12.0)], 480.0),
            disk("sde", "1-3", None, &[], 480.0),
            disk("sdf", "1-4.1", Some(12.0), &[("1-4", 12.0)], 480.0),
        ];
        let table: &[(&str, bool, &str)] = &[
            ("usb:1-1=480", true, ""),
            ("usb:1-1=12", true, ""),
            ("usb:2-1=480", false, "bad cable or connector"),
            ("usb:3-1=5000", false, "SuperSpeed pairs did not connect"),
            (
                "usb:1-2.4=480",
                false,
                "1-2 on the way to the root hub runs at 12M",
            ),
            ("usb:1-3=480", false, "cannot be verified"),
            // A high-speed stick behind a full-speed hub links at 12M: the hub is to blame.
            (
                "usb:1-4.1=480",
                false,
                "behind hub 1-4 which itself runs at 12M",
            ),
            (
                "usb:9-9=480",
                false,
                "no USB storage device found on port usb:9-9",
            ),
        ];
        for (e, pass, cause) in table {
            let f = &check_links(&disks, &[exp(e)])[0];
            assert_eq!(f.pass, *pass, "{e}: {f:?}");
            assert!(f.cause.contains(cause), "{e}: cause {:?}", f.cause);
        }
    }

    #[test]
    fn id_path_prefix_matches_whole_components_only() {
        let mut d = disk("sda", "1-1", Some(480.0), &[], 480.0);
        d.id_path = Some("platform-xhci-hcd.1.auto-usb-0:1:1.0-scsi-0:0:0:0".into());
        let f = check_links(
            &[d.clone()],
            &[exp("id_path:platform-xhci-hcd.1.auto-usb-0:1=480")],
        );
        assert!(f[0].pass && f[0].disks == ["sda"], "{f:?}");
        // `usb-0:1` must not match a device on `usb-0:10`.
        d.id_path = Some("platform-xhci-hcd.1.auto-usb-0:10:1.0-scsi-0:0:0:0".into());
        let f = check_links(&[d], &[exp("id_path:platform-xhci-hcd.1.auto-usb-0:1=480")]);
        assert!(!f[0].pass && f[0].disks.is_empty(), "{f:?}");
    }
}
