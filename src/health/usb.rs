//! Owns the USB link counters beyond speed: lanes (`rx_lanes`/`tx_lanes`, 2 for Gen 2x2),
//! the port's `over_current_count` and the LPM state (drivers/usb/core/sysfs.c, port.c).

use serde::{Deserialize, Serialize};

use super::Gaps;
use crate::sysfs::SysfsRoot;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UsbHealth {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_lanes: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_lanes: Option<u32>,
    /// The hub port the device is on (`usb4-port1`, `3-4-port1`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over_current_count: Option<u64>,
    /// USB 3 link power management: `power/usb3_hardware_lpm_u1`/`_u2` (`enabled`/`disabled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lpm_u1: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lpm_u2: Option<String>,
    /// USB 2 hardware LPM (`power/usb2_hardware_lpm`: `y`/`n`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usb2_hardware_lpm: Option<String>,
}

fn count(s: &str) -> Option<u64> {
    s.trim().parse().ok()
}

/// `port_path` `1-1.2` → (hub `1-1`, port 2); `3-4` → (root hub `usb3`, port 4).
pub fn hub_and_port(port_path: &str) -> Option<(String, u32)> {
    let (bus, chain) = port_path.split_once('-')?;
    match chain.rsplit_once('.') {
        Some((up, p)) => Some((format!("{bus}-{up}"), p.parse().ok()?)),
        None => Some((format!("usb{bus}"), chain.parse().ok()?)),
    }
}

/// Reads the counters of USB device `dev` (a devpath ending in its port path).
pub fn read(sys: &SysfsRoot, dev: &str, gaps: &mut Gaps) -> UsbHealth {
    let mut h = UsbHealth::default();
    let lanes = |name: &str, field: &str, gaps: &mut Gaps| match sys.attr_parse(dev, name, |s| {
        s.trim().parse::<u32>().ok().filter(|v| (1..=4).contains(v))
    }) {
        Ok(v) => Some(v),
        Err(e) => {
            gaps.note(field, format!("{dev}/{name}: {e} (kernel < 4.18?)"));
            None
        }
    };
    h.rx_lanes = lanes("rx_lanes", "usb.rx_lanes", gaps);
    h.tx_lanes = lanes("tx_lanes", "usb.tx_lanes", gaps);
    // The device's `port` link names its port (kernel 4.x+); else the port directory is
    // found under the parent hub's interface, `<hub>:1.0/<hub>-port<N>`.
    let name = dev.rsplit('/').next().unwrap_or(dev);
    let port_dir = sys
        .resolve(&format!("{dev}/port"))
        .filter(|p| sys.exists(p, "over_current_count"))
        .or_else(|| {
            let (hub, n) = hub_and_port(name)?;
            let parent = dev.rsplit_once('/')?.0;
            // A root hub's interface is `<bus>-0:1.0`, another hub's `<hub>:1.0`.
            let iface = match hub.strip_prefix("usb") {
                Some(bus) => format!("{bus}-0:1.0"),
                None => format!("{hub}:1.0"),
            };
            let p = format!("{parent}/{iface}/{hub}-port{n}");
            sys.exists(&p, "over_current_count").then_some(p)
        });
    match port_dir {
        Some(p) => {
            h.port = p.rsplit('/').next().map(str::to_string);
            h.over_current_count = gaps.take(
                "usb.over_current_count",
                sys.attr_parse(&p, "over_current_count", count)
                    .map_err(|e| format!("{p}/over_current_count: {e}")),
            );
        }
        None => gaps.note(
            "usb.over_current_count",
            format!("{dev}: no port device found (port link and hub port directory absent)"),
        ),
    }
    h.lpm_u1 = sys.attr(dev, "power/usb3_hardware_lpm_u1").ok();
    h.lpm_u2 = sys.attr(dev, "power/usb3_hardware_lpm_u2").ok();
    h.usb2_hardware_lpm = sys.attr(dev, "power/usb2_hardware_lpm").ok();
    if h.lpm_u1.is_none() && h.usb2_hardware_lpm.is_none() {
        gaps.note(
            "usb.lpm",
            format!("{dev}/power: no usb3_hardware_lpm_u1 or usb2_hardware_lpm (the host controller does not offer hardware LPM)"),
        );
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_and_port_of_a_path() {
        assert_eq!(hub_and_port("1-1.2"), Some(("1-1".into(), 2)));
        assert_eq!(hub_and_port("3-4"), Some(("usb3".into(), 4)));
        assert_eq!(hub_and_port("3-4.1.3"), Some(("3-4.1".into(), 3)));
        assert_eq!(hub_and_port("usb1"), None);
    }
}
