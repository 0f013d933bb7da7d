//! Owns the UFS health descriptor as ufshcd exports it (drivers/ufs/core/ufs-sysfs.c,
//! `health_descriptor/` on the host's device): bPreEOLInfo and bDeviceLifeTimeEstA/B,
//! encoded like eMMC's (JESD220 14.1.4.19).

use serde::{Deserialize, Serialize};

use super::{parse_hex_u8, Gaps, HealthError, LifeTime, PreEol};
use crate::sysfs::SysfsRoot;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UfsHealth {
    /// The UFS host device the descriptor was read from.
    pub host: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_eol: Option<PreEol>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub life_time_a: Option<LifeTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub life_time_b: Option<LifeTime>,
}

fn byte(field: &'static str, s: &str) -> Result<u8, HealthError> {
    parse_hex_u8(s).ok_or_else(|| HealthError::Malformed {
        field,
        value: s.to_string(),
    })
}

/// Finds the host (the first ancestor with `health_descriptor/`) and reads its three values.
pub fn read(sys: &SysfsRoot, ancestors: &[String], gaps: &mut Gaps) -> Option<UfsHealth> {
    let Some(host) = ancestors
        .iter()
        .find(|a| sys.exists(a, "health_descriptor/eol_info"))
    else {
        gaps.note(
            "ufs",
            "no health_descriptor/ on any parent (kernel < 5.6, or not a ufshcd host)",
        );
        return None;
    };
    let mut h = UfsHealth {
        host: host.clone(),
        ..UfsHealth::default()
    };
    let get = |name: &str| {
        sys.attr(host, &format!("health_descriptor/{name}"))
            .map_err(|e| format!("{host}/health_descriptor/{name}: {e}"))
    };
    match get("eol_info").and_then(|s| {
        byte("eol_info", &s)
            .and_then(|v| PreEol::from_raw("bPreEOLInfo", v))
            .map_err(|e| e.to_string())
    }) {
        Ok(Some(p)) => h.pre_eol = Some(p),
        Ok(None) => gaps.note("ufs.pre_eol", "bPreEOLInfo 0x00: not defined by the device"),
        Err(e) => gaps.note("ufs.pre_eol", e),
    }
    for (name, field, slot) in [
        (
            "life_time_estimation_a",
            "ufs.life_time_a",
            &mut h.life_time_a,
        ),
        (
            "life_time_estimation_b",
            "ufs.life_time_b",
            &mut h.life_time_b,
        ),
    ] {
        match get(name).and_then(|s| {
            byte("life_time_estimation", &s)
                .and_then(|v| LifeTime::from_raw("bDeviceLifeTimeEst", v))
                .map_err(|e| e.to_string())
        }) {
            Ok(Some(l)) => *slot = Some(l),
            Ok(None) => gaps.note(field, format!("{name} 0x00: not defined by the device")),
            Err(e) => gaps.note(field, e),
        }
    }
    Some(h)
}
