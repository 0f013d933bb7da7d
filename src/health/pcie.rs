//! Owns the PCIe link of a disk's PCI function: `current_link_speed`/`width` against
//! `max_link_speed`/`width` (drivers/pci/pci-sysfs.c), parsed into GT/s and lanes. A link
//! trained below its capability is a factory fault like a USB stick at 12M.

use serde::{Deserialize, Serialize};

use super::{Gaps, HealthError};
use crate::sysfs::SysfsRoot;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PcieLink {
    /// The PCI function's devpath (`/devices/pci0000:00/0000:00:1c.0/0000:01:00.0`).
    pub function_devpath: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_gts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_gts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_width: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_width: Option<u32>,
}

impl PcieLink {
    /// Whether the link trained slower or narrower than both ends allow.
    pub fn below_max(&self) -> bool {
        matches!((self.current_gts, self.max_gts), (Some(c), Some(m)) if c < m)
            || matches!((self.current_width, self.max_width), (Some(c), Some(m)) if c < m)
    }
}

/// `8.0 GT/s PCIe` (5.x+), `8 GT/s` (older), `2.5 GT/s` → GT/s; `Unknown` (no link
/// capability: a root-complex integrated endpoint, QEMU's root bus) is an error with that
/// reason.
pub fn parse_speed(s: &str) -> Result<f64, HealthError> {
    let t = s.trim();
    if t == "Unknown" {
        return Err(HealthError::NoLink {
            field: "link speed",
            value: t.to_string(),
        });
    }
    let num = t
        .split_whitespace()
        .next()
        .filter(|_| t.contains("GT/s"))
        .and_then(|n| n.parse::<f64>().ok())
        .filter(|v| *v > 0.0 && *v <= 256.0);
    num.ok_or_else(|| HealthError::Malformed {
        field: "link speed",
        value: t.to_string(),
    })
}

/// `4` or `x4` → 4; 0 (no link) is refused.
pub fn parse_width(s: &str) -> Result<u32, HealthError> {
    let t = s.trim();
    // 0 = no link; 255 is what a function without the capability reads (0xff of an absent
    // register).
    if t == "0" || t == "255" {
        return Err(HealthError::NoLink {
            field: "link width",
            value: t.to_string(),
        });
    }
    t.trim_start_matches('x')
        .parse::<u32>()
        .ok()
        .filter(|w| (1..=32).contains(w))
        .ok_or_else(|| HealthError::Malformed {
            field: "link width",
            value: t.to_string(),
        })
}

/// Reads the link of `function` (a devpath); `None` when it has no link attributes at all
/// (conventional PCI, not a PCIe function). Only the NVMe disk notes the absence: for a SATA
/// or SD host on a conventional bus it is not a fault.
pub fn read(
    sys: &SysfsRoot,
    function: &str,
    note_absent: bool,
    gaps: &mut Gaps,
) -> Option<PcieLink> {
    if !sys.exists(function, "current_link_speed") {
        if note_absent {
            gaps.note(
                "pcie",
                format!("{function}: no current_link_speed (not a PCIe function)"),
            );
        }
        return None;
    }
    let mut l = PcieLink {
        function_devpath: function.to_string(),
        ..PcieLink::default()
    };
    let mut one = |attr: &str, field: &str, f: &dyn Fn(&str) -> Result<f64, HealthError>| match sys
        .attr(function, attr)
    {
        Ok(s) => gaps.take(field, f(&s).map_err(|e| format!("{function}/{attr}: {e}"))),
        Err(e) => {
            gaps.note(field, format!("{function}/{attr}: {e}"));
            None
        }
    };
    l.current_gts = one("current_link_speed", "pcie.current_gts", &parse_speed);
    l.max_gts = one("max_link_speed", "pcie.max_gts", &parse_speed);
    l.current_width = one("current_link_width", "pcie.current_width", &|s| {
        parse_width(s).map(f64::from)
    })
    .map(|v| v as u32);
    l.max_width = one("max_link_width", "pcie.max_width", &|s| {
        parse_width(s).map(f64::from)
    })
    .map(|v| v as u32);
    Some(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds_and_widths() {
        for (s, want) in [
            ("8.0 GT/s PCIe\n", Some(8.0)),
            ("16.0 GT/s PCIe", Some(16.0)),
            ("2.5 GT/s", Some(2.5)),
            ("8 GT/s", Some(8.0)),
            ("Unknown", None),
            ("", None),
            ("-1 GT/s", None),
        ] {
            assert_eq!(parse_speed(s).ok(), want, "{s:?}");
        }
        for (s, want) in [
            ("4", Some(4)),
            ("x2", Some(2)),
            ("0", None),
            ("99", None),
            ("x", None),
        ] {
            assert_eq!(parse_width(s).ok(), want, "{s:?}");
        }
        let l = PcieLink {
            current_gts: Some(5.0),
            max_gts: Some(8.0),
            current_width: Some(4),
            max_width: Some(4),
            ..Default::default()
        };
        assert!(l.below_max());
    }
}
