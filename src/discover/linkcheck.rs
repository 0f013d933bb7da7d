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
    #[error("link expectation {0:?}: the port must start with usb: or id_path:")]
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
        if !(port.starts_with("usb:") || port.starts_with("id_path:")) || port.ends_with(':') {
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
