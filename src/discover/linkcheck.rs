//! Owns the USB link check: each port's negotiated speed against what the board profile says
//! the port must give, with the likely cause of every shortfall in words.

use serde::{Deserialize, Serialize};

use super::model::{Disk, UsbLink};
use super::parse::{speed_label, usb_speed_name, usb_version_number, BosCaps};

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
    #[error(
        "link expectation {0:?}: {1:?} is not a speed in Mbit/s: give one from 1 to 100000 \
         (12, 480, 5000, 10000)"
    )]
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
            // No link is faster than the metric's ceiling: a longer number is a typo.
            .filter(|v: &f64| v.is_finite() && *v > 0.0 && *v <= crate::metric::LINK_MBPS.max)
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cause: String,
    /// Which end is at fault, as data; absent when it passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause_kind: Option<LinkCause>,
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
                cause_kind: None,
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
            let d = diagnose(e.min_speed_mbps, usb);
            f.pass = d.is_none();
            if let Some(d) = d {
                f.cause = d.text;
                f.cause_kind = Some(d.cause);
            }
            f
        })
        .collect()
}

/// Which end of a slow USB link is at fault, as data (the reason's `cause`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum LinkCause {
    /// A SuperSpeed device came up on the USB 2 lines of a port that has SuperSpeed lanes.
    SuperspeedLanes,
    /// The device cannot go faster (a USB 2.0-only or USB 1.1 device): not a board fault.
    DeviceLimit,
    /// A hub on the path runs slower than required.
    SlowHub,
    /// The port cannot give the speed: its controller (root hub) is slower, or a USB 2 port
    /// has no SuperSpeed lanes.
    PortLimit,
    /// A high-speed device linked at full speed on a high-speed port: the D+/D- pair.
    HighSpeedHandshake,
    /// A SuperSpeedPlus device trained at Gen 1.
    Gen1Link,
    /// The device enumerated again at another speed while it was tested.
    SpeedChanged,
    /// The speed of the device or of a hub on its path is unknown.
    Unknown,
}

impl LinkCause {
    /// The cause's name in reports (`superspeed-lanes`).
    pub fn as_str(self) -> &'static str {
        match self {
            LinkCause::SuperspeedLanes => "superspeed-lanes",
            LinkCause::DeviceLimit => "device-limit",
            LinkCause::SlowHub => "slow-hub",
            LinkCause::PortLimit => "port-limit",
            LinkCause::HighSpeedHandshake => "high-speed-handshake",
            LinkCause::Gen1Link => "gen1-link",
            LinkCause::SpeedChanged => "speed-changed",
            LinkCause::Unknown => "unknown",
        }
    }
}

/// A slow link's cause: the kind, and the same in words naming the port (and the hub).
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnosis {
    pub cause: LinkCause,
    pub text: String,
}

/// `None` when the link is fast enough. Reads both ends: what the device says it can do (its
/// BOS capabilities, else `bcdUSB`: `capable_mbps`), and what the port can give (the speed of
/// each hub and of the root hub on the path, and whether the port has a SuperSpeed `peer`).
pub fn diagnose(expected: f64, usb: &UsbLink) -> Option<Diagnosis> {
    let port = &usb.port_path;
    let said = |cause, text: String| Some(Diagnosis { cause, text });
    let Some(dev) = usb.speed_mbps else {
        return said(
            LinkCause::Unknown,
            format!(
                "the negotiated speed of {port} is unknown (no `speed` attribute): the link \
                 cannot be verified, so it is not passed"
            ),
        );
    };
    let exp = speed_label(expected);
    let got = speed_label(dev);
    let linked = format!(
        "port {port} linked at {got} ({}) but must give at least {exp} ({})",
        usb_speed_name(dev),
        usb_speed_name(expected)
    );
    let version = usb
        .version
        .as_deref()
        .map(|v| format!("bcdUSB {}", v.trim()))
        .unwrap_or_else(|| "bcdUSB unknown".into());
    if dev >= expected {
        return match usb.min_chain_speed_mbps {
            Some(min) if min < expected => {
                let (slow, is_root) = slowest_hop(usb, min);
                said(
                    if is_root {
                        LinkCause::PortLimit
                    } else {
                        LinkCause::SlowHub
                    },
                    format!(
                        "port {port} linked at {got}, but {slow} on the way to the root hub runs \
                         at {}: that hub or its upstream cable limits the link below {exp}",
                        speed_label(min)
                    ),
                )
            }
            Some(_) => None,
            None => said(
                LinkCause::Unknown,
                format!(
                    "port {port} linked at {got}, but the speed of a hub on its path is unknown: \
                     the link cannot be verified, so it is not passed"
                ),
            ),
        };
    }
    // The device can do no better than it did: whatever the board, this link is its best.
    if usb.capable_mbps.is_some_and(|c| c <= dev) {
        let fix = if expected >= 5000.0 {
            "test the port with a SuperSpeed stick"
        } else {
            "test the port with a high-speed (USB 2.0) stick"
        };
        return said(
            LinkCause::DeviceLimit,
            format!(
                "{linked}: {got} is this device's maximum ({version}{}): not a board fault; the \
                 profile requires {exp} on this port, so {fix}",
                if usb.capable_from_bos {
                    ", and its BOS descriptor lists nothing faster"
                } else {
                    ""
                }
            ),
        );
    }
    // A hub at or below the device's speed bounds it: the hub, not the device, is the fault.
    // Not for a SuperSpeed limit when the device's port has SuperSpeed lanes (`peer`): a device
    // on the USB 2 side of such a port has a high-speed parent by design. Nor when the port is
    // not known and the controller may be an xHCI (a recording without port links): an xHCI's
    // high-speed root hub has a SuperSpeed twin, so a high-speed parent proves nothing there.
    let may_have_twin = usb
        .host_controller_driver
        .as_deref()
        .map_or(true, |d| d.contains("xhci"));
    let ss_twin = expected >= 5000.0
        && dev <= 480.0
        && (usb.port_peer.is_some() || (usb.port.is_none() && may_have_twin));
    if !ss_twin {
        if let Some(hub) = usb
            .hubs
            .iter()
            .find(|h| h.speed_mbps.is_some_and(|s| s <= dev && s < expected))
        {
            return said(
                LinkCause::SlowHub,
                format!(
                    "port {port} linked at {got} behind hub {} which itself runs at {}: the hub \
                     or its upstream cable limits the link below {exp} ({}); replace or re-seat \
                     the hub, or plug the device into the port directly",
                    hub.port_path,
                    speed_label(hub.speed_mbps.unwrap_or(dev)),
                    usb_speed_name(expected)
                ),
            );
        }
        if let Some(root) = usb
            .root_hub
            .as_ref()
            .filter(|r| r.speed_mbps.is_some_and(|s| s <= dev && s < expected))
        {
            let hcd = usb
                .host_controller_driver
                .as_deref()
                .map(|d| format!(", driver {d}"))
                .unwrap_or_default();
            return said(
                LinkCause::PortLimit,
                format!(
                    "{linked}: the port's controller runs at {} only (root hub {}{hcd}): this \
                     port cannot give {exp}; plug the device into a faster port, or correct the \
                     profile's limit for this port",
                    speed_label(root.speed_mbps.unwrap_or(dev)),
                    root.port_path
                ),
            );
        }
    }
    if dev <= 480.0 && expected >= 5000.0 {
        let ss_capable = usb.capable_mbps.map(|c| c >= 5000.0);
        return match (ss_capable, &usb.port_peer, &usb.port) {
            (Some(true) | None, Some(peer), _) => said(
                LinkCause::SuperspeedLanes,
                format!(
                    "{linked}: {} came up on the port's USB 2 lines although the port has \
                     SuperSpeed lanes ({peer}): the cable, the connector or the port's \
                     SuperSpeed lanes; dmesg says 'new high-speed USB device' instead of 'new \
                     SuperSpeed USB device'",
                    if ss_capable == Some(true) {
                        "a SuperSpeed device"
                    } else {
                        "the device"
                    }
                ),
            ),
            (_, None, Some(p)) => said(
                LinkCause::PortLimit,
                format!(
                    "{linked}: port {p} has no SuperSpeed twin (no `peer`): it is a USB 2 port, \
                     or behind a USB 2 hub, and cannot give {exp}; plug the device into a \
                     SuperSpeed port, or correct the profile's limit for this port"
                ),
            ),
            _ => said(
                LinkCause::SuperspeedLanes,
                format!(
                    "{linked}: the SuperSpeed pairs did not connect: a USB 2.0 cable or \
                     extension, a USB 2.0 stick, or a dirty or damaged USB 3 connector; dmesg \
                     says 'new high-speed USB device' instead of 'new SuperSpeed USB device'"
                ),
            ),
        };
    }
    if dev <= 12.0 && expected >= 480.0 {
        return said(
            LinkCause::HighSpeedHandshake,
            format!(
                "{linked}: the high-speed handshake (chirp) failed on a high-speed port: the D+/D- \
                 pair (a bad cable or connector, a damaged stick), or a full-speed-only device \
                 that reports {version}; re-seat or replace the cable and stick; dmesg says 'new \
                 full-speed USB device'"
            ),
        );
    }
    if dev < 10000.0 && expected >= 10000.0 {
        return said(
            LinkCause::Gen1Link,
            format!(
                "{linked}: the link trained at Gen 1: a cable, hub or connector not rated for 10 \
                 Gbit/s"
            ),
        );
    }
    said(
        LinkCause::Unknown,
        format!("{linked}: the device or its cable does not support the port's speed"),
    )
}

/// The hop running at `min` on the way to the root hub, and whether it is the root hub.
fn slowest_hop(usb: &UsbLink, min: f64) -> (String, bool) {
    if let Some(h) = usb.hubs.iter().find(|h| h.speed_mbps == Some(min)) {
        return (h.port_path.clone(), false);
    }
    match usb.root_hub.as_ref().filter(|h| h.speed_mbps == Some(min)) {
        Some(r) => (r.port_path.clone(), true),
        None => ("a hub".into(), false),
    }
}

/// The fastest signalling a USB device can do by its own account, in Mbit/s: its BOS
/// descriptor's capabilities where it has one (a USB 3 device linked at high speed reports
/// `bcdUSB` 2.10, but still lists SuperSpeed there), else its `bcdUSB`. A device without a BOS
/// descriptor cannot be SuperSpeed (USB 3 requires one); below 2.00 it is a USB 1.1 device.
/// Returns (Mbit/s, whether it came from the BOS descriptor).
pub fn capability(version: Option<&str>, bos: Option<&BosCaps>) -> Option<(f64, bool)> {
    if let Some(b) = bos {
        let mbps = if b.superspeed_plus {
            10000.0
        } else if b.superspeed {
            5000.0
        } else {
            480.0
        };
        return Some((mbps, true));
    }
    let (major, minor) = usb_version_number(version?)?;
    let mbps = match (major, minor) {
        (0..=1, _) => 12.0,
        (2, _) => 480.0,
        (3, 0..=9) => 5000.0,
        _ => 10000.0,
    };
    Some((mbps, false))
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
        for e in [
            "usb:1-1=fast",
            "usb:1-1=99999999999999999999",
            "usb:1-1=0",
            "usb:1-1=inf",
        ] {
            assert!(
                matches!(
                    e.parse::<PortExpectation>(),
                    Err(ExpectationError::Speed(..))
                ),
                "{e}"
            );
        }
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
            // On a full-speed root hub (an OHCI controller) the port itself is the limit.
            (
                "usb:2-1=480",
                false,
                "the port's controller runs at 12M only (root hub usb1",
            ),
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

    /// One row per cause: which end of a slow link is at fault, from the device's own
    /// capability (BOS, bcdUSB), the hubs' and the root hub's speeds and the port's `peer`.
    #[test]
    fn each_root_cause_of_a_slow_link_is_named() {
        struct Row {
            what: &'static str,
            dev: f64,
            hubs: &'static [(&'static str, f64)],
            root: f64,
            version: &'static str,
            capable: Option<(f64, bool)>,
            port: Option<&'static str>,
            peer: Option<&'static str>,
            expected: f64,
            cause: LinkCause,
            says: &'static str,
        }
        let rows = [
            Row {
                what: "a SuperSpeed stick on the USB 2 lines of a port with SuperSpeed lanes",
                dev: 480.0,
                hubs: &[],
                root: 480.0,
                version: "2.10",
                capable: Some((5000.0, true)),
                port: Some("usb1-port1"),
                peer: Some("usb2-port1"),
                expected: 5000.0,
                cause: LinkCause::SuperspeedLanes,
                says: "the cable, the connector or the port's SuperSpeed lanes",
            },
            Row {
                what: "a USB 2.0-only stick where the profile asks for SuperSpeed",
                dev: 480.0,
                hubs: &[],
                root: 480.0,
                version: "2.00",
                capable: Some((480.0, false)),
                port: Some("usb1-port1"),
                peer: Some("usb2-port1"),
                expected: 5000.0,
                cause: LinkCause::DeviceLimit,
                says: "480M is this device's maximum (bcdUSB 2.00): not a board fault; the \
                       profile requires 5000M on this port, so test the port with a SuperSpeed \
                       stick",
            },
            Row {
                what: "a high-speed stick at 12M on a high-speed port, no hub",
                dev: 12.0,
                hubs: &[],
                root: 480.0,
                version: "2.00",
                capable: Some((480.0, false)),
                port: Some("usb1-port1"),
                peer: None,
                expected: 480.0,
                cause: LinkCause::HighSpeedHandshake,
                says: "the D+/D- pair",
            },
            Row {
                what: "a high-speed stick behind a full-speed hub",
                dev: 12.0,
                hubs: &[("1-4", 12.0)],
                root: 480.0,
                version: "2.00",
                capable: Some((480.0, false)),
                port: Some("1-4-port1"),
                peer: None,
                expected: 480.0,
                cause: LinkCause::SlowHub,
                says: "behind hub 1-4 which itself runs at 12M",
            },
            Row {
                what: "a high-speed stick on a full-speed controller (OHCI)",
                dev: 12.0,
                hubs: &[],
                root: 12.0,
                version: "2.00",
                capable: Some((480.0, false)),
                port: Some("usb1-port1"),
                peer: None,
                expected: 480.0,
                cause: LinkCause::PortLimit,
                says: "the port's controller runs at 12M only (root hub usb1",
            },
            Row {
                what: "a USB 2 port without SuperSpeed lanes where the profile asks for them",
                dev: 480.0,
                hubs: &[],
                root: 5000.0,
                version: "2.10",
                capable: None,
                port: Some("usb1-port3"),
                peer: None,
                expected: 5000.0,
                cause: LinkCause::PortLimit,
                says: "port usb1-port3 has no SuperSpeed twin",
            },
            Row {
                what: "a USB 1.1 device",
                dev: 12.0,
                hubs: &[],
                root: 480.0,
                version: "1.10",
                capable: Some((12.0, false)),
                port: None,
                peer: None,
                expected: 480.0,
                cause: LinkCause::DeviceLimit,
                says: "12M is this device's maximum (bcdUSB 1.10)",
            },
            Row {
                what: "a 10 Gbit/s device trained at Gen 1",
                dev: 5000.0,
                hubs: &[],
                root: 10000.0,
                version: "3.20",
                capable: Some((10000.0, true)),
                port: None,
                peer: None,
                expected: 10000.0,
                cause: LinkCause::Gen1Link,
                says: "the link trained at Gen 1",
            },
            Row {
                what: "a SuperSpeed stick where nothing says whether the port has lanes",
                dev: 480.0,
                hubs: &[],
                root: 480.0,
                version: "2.10",
                capable: Some((5000.0, true)),
                port: None,
                peer: None,
                expected: 5000.0,
                cause: LinkCause::SuperspeedLanes,
                says: "the SuperSpeed pairs did not connect",
            },
        ];
        for r in rows {
            let mut d = disk("sda", "1-1", Some(r.dev), r.hubs, r.root);
            let u = d.usb.as_mut().unwrap();
            u.version = Some(r.version.into());
            u.capable_mbps = r.capable.map(|c| c.0);
            u.capable_from_bos = r.capable.is_some_and(|c| c.1);
            u.port = r.port.map(String::from);
            u.port_peer = r.peer.map(String::from);
            let got = diagnose(r.expected, u).unwrap_or_else(|| panic!("{}: passed", r.what));
            assert_eq!(got.cause, r.cause, "{}: {}", r.what, got.text);
            assert!(got.text.contains(r.says), "{}: {}", r.what, got.text);
        }
        // Fast enough: no cause at all.
        let d = disk("sda", "1-1", Some(5000.0), &[], 5000.0);
        assert_eq!(diagnose(5000.0, d.usb.as_ref().unwrap()), None);
    }

    #[test]
    fn the_capability_comes_from_bos_before_bcd_usb() {
        let ss = BosCaps {
            superspeed: true,
            ..BosCaps::default()
        };
        let lpm = BosCaps {
            usb2_extension: true,
            ..BosCaps::default()
        };
        // A USB 3 stick linked at high speed says 2.10; its BOS still lists SuperSpeed.
        assert_eq!(capability(Some(" 2.10"), Some(&ss)), Some((5000.0, true)));
        assert_eq!(capability(Some(" 2.01"), Some(&lpm)), Some((480.0, true)));
        assert_eq!(capability(Some(" 2.00"), None), Some((480.0, false)));
        assert_eq!(capability(Some(" 1.10"), None), Some((12.0, false)));
        assert_eq!(capability(Some(" 3.00"), None), Some((5000.0, false)));
        assert_eq!(capability(None, None), None);
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
