//! Owns the NVMe SMART / Health Information log (log page 0x02, NVMe Base Specification
//! 2.0 figure 207; `struct nvme_smart_log` in include/linux/nvme.h): the 512-byte decoder
//! and the Get Log Page admin command that reads it.

use serde::{Deserialize, Serialize};

use super::ioctl;
use super::{le_u64_sat, Gaps, HealthError, Target};

pub const SMART_LOG_LEN: usize = 512;

/// The SMART / health log, units in the names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NvmeSmart {
    /// Bit 0 spare below threshold, 1 temperature, 2 reliability degraded, 3 read-only,
    /// 4 volatile backup failed, 5 persistent memory region read-only.
    pub critical_warning: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature_celsius: Option<f64>,
    pub available_spare_percent: u8,
    pub available_spare_threshold_percent: u8,
    /// Vendor estimate of the rated endurance used; may exceed 100 (up to 255).
    pub percent_used: u8,
    /// Units of 1000 × 512 bytes, as the log counts them.
    pub data_units_read: u64,
    pub data_units_written: u64,
    pub data_read_bytes: u64,
    pub data_written_bytes: u64,
    pub power_cycles: u64,
    pub power_on_hours: u64,
    pub unsafe_shutdowns: u64,
    pub media_errors: u64,
    pub error_log_entries: u64,
}

/// Decodes the log. Short buffers are refused; an absurd temperature (0 K means "not
/// reported", and none below -60 °C or above 200 °C is a working controller's) or
/// percentages above 100 where the spec caps them leave that field missing.
pub fn decode_smart_log(b: &[u8], gaps: &mut Gaps) -> Result<NvmeSmart, HealthError> {
    if b.len() < SMART_LOG_LEN {
        return Err(HealthError::Short {
            what: "NVMe SMART log",
            len: b.len(),
            want: SMART_LOG_LEN,
        });
    }
    let u128_at = |o: usize| le_u64_sat(&b[o..o + 16]);
    let kelvin = u16::from_le_bytes([b[1], b[2]]);
    let temperature_celsius = match kelvin {
        0 => {
            gaps.note(
                "nvme.temperature_celsius",
                "composite temperature 0 K: not reported",
            );
            None
        }
        k if !(213..=473).contains(&k) => {
            gaps.note(
                "nvme.temperature_celsius",
                HealthError::Absurd {
                    field: "composite temperature",
                    value: format!("{k} K"),
                },
            );
            None
        }
        k => Some(f64::from(k) - 273.15),
    };
    let spare = b[3];
    let spare_thresh = b[4];
    if spare > 100 || spare_thresh > 100 {
        return Err(HealthError::Garbage {
            what: "NVMe SMART log",
            detail: format!("available spare {spare} % / threshold {spare_thresh} % above 100"),
        });
    }
    let dur = u128_at(32);
    let duw = u128_at(48);
    Ok(NvmeSmart {
        critical_warning: b[0],
        temperature_celsius: temperature_celsius.map(|c| (c * 100.0).round() / 100.0),
        available_spare_percent: spare,
        available_spare_threshold_percent: spare_thresh,
        percent_used: b[5],
        data_units_read: dur,
        data_units_written: duw,
        data_read_bytes: dur.saturating_mul(512_000),
        data_written_bytes: duw.saturating_mul(512_000),
        power_cycles: u128_at(112),
        power_on_hours: u128_at(128),
        unsafe_shutdowns: u128_at(144),
        media_errors: u128_at(160),
        error_log_entries: u128_at(176),
    })
}

/// Get Log Page (admin opcode 0x02) for log 0x02, all namespaces (0xFFFFFFFF), 512 bytes.
/// CDW10: LID [7:0] = 0x02, RAE [15] = 1 (Retain Asynchronous Event: reading must not even
/// clear a pending event), NUMDL [31:16] = 512/4 - 1. A read of the controller's counters.
pub fn read_smart_log_ioctl(node: &str, devnum: Option<&str>) -> Result<Vec<u8>, HealthError> {
    const GET_LOG_PAGE: u8 = 0x02;
    const LID_SMART: u32 = 0x02;
    const RAE: u32 = 1 << 15;
    let numdl = (SMART_LOG_LEN as u32 / 4) - 1;
    let f = ioctl::open_ro(node, devnum)?;
    let mut buf = vec![0u8; SMART_LOG_LEN];
    let mut cmd = ioctl::NvmeAdminCmd {
        opcode: GET_LOG_PAGE,
        nsid: 0xffff_ffff,
        addr: buf.as_mut_ptr() as usize as u64,
        data_len: SMART_LOG_LEN as u32,
        cdw10: (numdl << 16) | RAE | LID_SMART,
        // A controller that does not answer in 10 s is reported, not waited for a minute
        // (the kernel's default admin timeout).
        timeout_ms: 10_000,
        ..Default::default()
    };
    use std::os::fd::AsRawFd;
    // SAFETY: `cmd` is the kernel's struct nvme_admin_cmd; addr points at `buf` of data_len
    // bytes, alive until the call returns.
    let status = unsafe { ioctl::nvme_admin_cmd(f.as_raw_fd(), &mut cmd) }.map_err(|e| {
        HealthError::Ioctl {
            ioctl: "NVME_IOCTL_ADMIN_CMD (Get Log Page 0x02)",
            node: node.to_string(),
            err: ioctl::errno_text(e),
        }
    })?;
    // A positive return is the NVMe status field of the completion: the command failed.
    if status != 0 {
        return Err(HealthError::DeviceStatus {
            ioctl: "NVME_IOCTL_ADMIN_CMD (Get Log Page 0x02)",
            node: node.to_string(),
            status: format!("0x{status:x}"),
        });
    }
    Ok(buf)
}

pub fn read(t: &Target<'_>, ioctl_ok: &Result<(), String>, gaps: &mut Gaps) -> Option<NvmeSmart> {
    if let Err(why) = ioctl_ok {
        gaps.note("nvme.smart", why);
        return None;
    }
    let bytes = gaps.take(
        "nvme.smart",
        super::once("nvme-smart", t.dev_node, t.devnum, || {
            read_smart_log_ioctl(t.dev_node, t.devnum)
        }),
    )?;
    super::record_raw(t.name, "nvme-smart-log", &bytes);
    let r = decode_smart_log(&bytes, gaps);
    gaps.take("nvme.smart", r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(f: impl FnOnce(&mut [u8; 512])) -> [u8; 512] {
        let mut b = [0u8; 512];
        b[1..3].copy_from_slice(&310u16.to_le_bytes());
        b[3] = 100;
        b[4] = 10;
        f(&mut b);
        b
    }

    #[test]
    fn decodes_fields_and_units() {
        let b = log(|b| {
            b[5] = 3;
            b[32] = 0x10;
            b[48..50].copy_from_slice(&0x0200u16.to_le_bytes());
            b[112] = 7;
            b[128] = 42;
            b[144] = 2;
            b[160] = 1;
        });
        let mut g = Gaps::default();
        let s = decode_smart_log(&b, &mut g).unwrap();
        assert_eq!(s.temperature_celsius, Some(36.85));
        assert_eq!(s.percent_used, 3);
        assert_eq!(s.data_units_read, 16);
        assert_eq!(s.data_read_bytes, 16 * 512_000);
        assert_eq!(s.data_units_written, 512);
        assert_eq!(
            (
                s.power_cycles,
                s.power_on_hours,
                s.unsafe_shutdowns,
                s.media_errors
            ),
            (7, 42, 2, 1)
        );
        assert!(g.0.is_empty(), "{:?}", g.0);
    }

    #[test]
    fn bad_logs() {
        let mut g = Gaps::default();
        assert!(matches!(
            decode_smart_log(&[0u8; 64], &mut g),
            Err(HealthError::Short { len: 64, .. })
        ));
        assert!(decode_smart_log(&[0xffu8; 512], &mut g).is_err());
        let hot = log(|b| b[1..3].copy_from_slice(&0xfff0u16.to_le_bytes()));
        let s = decode_smart_log(&hot, &mut g).unwrap();
        assert_eq!(s.temperature_celsius, None);
        assert!(g.0.iter().any(|m| m.field == "nvme.temperature_celsius"));
        let huge = log(|b| b[160..176].fill(0xff));
        assert_eq!(
            decode_smart_log(&huge, &mut g).unwrap().media_errors,
            u64::MAX
        );
    }
}
