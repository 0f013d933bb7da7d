//! Owns ATA SMART: the 512-byte SMART READ DATA decoder (ATA/ATAPI-8 ACS, the 30 vendor
//! attribute entries smartmontools prints) and the SG_IO ATA PASS-THROUGH(16) that reads it.

use serde::{Deserialize, Serialize};

use super::ioctl;
use super::{Gaps, HealthError, Target};

pub const SMART_DATA_LEN: usize = 512;
pub const ATTR_REALLOCATED: u8 = 5;
pub const ATTR_POWER_ON_HOURS: u8 = 9;
pub const ATTR_AIRFLOW_TEMPERATURE: u8 = 190;
pub const ATTR_TEMPERATURE: u8 = 194;
pub const ATTR_PENDING: u8 = 197;
pub const ATTR_OFFLINE_UNCORRECTABLE: u8 = 198;
pub const ATTR_UDMA_CRC: u8 = 199;

/// The attributes a factory judges (sectors, cable, age, heat): each absent one is noted.
const JUDGED: [u8; 6] = [
    ATTR_REALLOCATED,
    ATTR_POWER_ON_HOURS,
    ATTR_TEMPERATURE,
    ATTR_PENDING,
    ATTR_OFFLINE_UNCORRECTABLE,
    ATTR_UDMA_CRC,
];

/// Also kept: 190, the temperature drives without 194 report (QEMU's AHCI among them).
const KEPT: [u8; 7] = [
    ATTR_REALLOCATED,
    ATTR_POWER_ON_HOURS,
    ATTR_AIRFLOW_TEMPERATURE,
    ATTR_TEMPERATURE,
    ATTR_PENDING,
    ATTR_OFFLINE_UNCORRECTABLE,
    ATTR_UDMA_CRC,
];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SmartAttribute {
    pub id: u8,
    pub name: String,
    /// Normalised current value (1..253, higher is better).
    pub value: u8,
    pub worst: u8,
    /// The 48-bit raw counter, little-endian.
    pub raw: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SataSmart {
    pub revision: u16,
    pub attributes: Vec<SmartAttribute>,
    /// Attribute 9's raw low 32 bits (drives keep minutes or milliseconds above them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_on_hours: Option<u64>,
    /// Attribute 194's raw lowest byte (the upper bytes hold min/max on many drives), else
    /// 190's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature_celsius: Option<u8>,
}

impl SataSmart {
    pub fn attribute(&self, id: u8) -> Option<&SmartAttribute> {
        self.attributes.iter().find(|a| a.id == id)
    }
}

pub fn attribute_name(id: u8) -> &'static str {
    match id {
        ATTR_REALLOCATED => "reallocated_sector_count",
        ATTR_POWER_ON_HOURS => "power_on_hours",
        ATTR_AIRFLOW_TEMPERATURE => "airflow_temperature_celsius",
        ATTR_TEMPERATURE => "temperature_celsius",
        ATTR_PENDING => "current_pending_sector",
        ATTR_OFFLINE_UNCORRECTABLE => "offline_uncorrectable",
        ATTR_UDMA_CRC => "udma_crc_error_count",
        _ => "other",
    }
}

/// Decodes SMART READ DATA. The checksum (byte 511 makes the sum of all 512 bytes 0) tells a
/// real answer from garbage; a bad one refuses the buffer whole.
pub fn decode_smart_data(b: &[u8], gaps: &mut Gaps) -> Result<SataSmart, HealthError> {
    if b.len() < SMART_DATA_LEN {
        return Err(HealthError::Short {
            what: "ATA SMART data",
            len: b.len(),
            want: SMART_DATA_LEN,
        });
    }
    let b = &b[..SMART_DATA_LEN];
    let sum = b.iter().fold(0u8, |a, x| a.wrapping_add(*x));
    if sum != 0 {
        return Err(HealthError::Garbage {
            what: "ATA SMART data",
            detail: format!("checksum: the 512 bytes sum to 0x{sum:02x}, not 0"),
        });
    }
    if b.iter().all(|x| *x == 0) {
        return Err(HealthError::Garbage {
            what: "ATA SMART data",
            detail: "all zero".into(),
        });
    }
    let mut s = SataSmart {
        revision: u16::from_le_bytes([b[0], b[1]]),
        ..SataSmart::default()
    };
    for e in b[2..2 + 30 * 12].chunks_exact(12) {
        let id = e[0];
        if id == 0 || !KEPT.contains(&id) {
            continue;
        }
        let mut raw = 0u64;
        for (i, x) in e[5..11].iter().enumerate() {
            raw |= u64::from(*x) << (8 * i);
        }
        s.attributes.push(SmartAttribute {
            id,
            name: attribute_name(id).to_string(),
            value: e[3],
            worst: e[4],
            raw,
        });
    }
    s.power_on_hours = s
        .attribute(ATTR_POWER_ON_HOURS)
        .map(|a| a.raw & 0xffff_ffff);
    let temp = s
        .attribute(ATTR_TEMPERATURE)
        .or_else(|| s.attribute(ATTR_AIRFLOW_TEMPERATURE));
    s.temperature_celsius = match temp {
        Some(a) if (a.raw & 0xff) as u8 <= 150 => Some((a.raw & 0xff) as u8),
        Some(a) => {
            gaps.note(
                "sata.temperature_celsius",
                HealthError::Absurd {
                    field: "temperature attribute",
                    value: format!("{} C", a.raw & 0xff),
                },
            );
            None
        }
        None => None,
    };
    for id in JUDGED {
        if id == ATTR_TEMPERATURE && s.temperature_celsius.is_some() {
            continue;
        }
        if s.attribute(id).is_none() {
            gaps.note(
                &format!("sata.{}", attribute_name(id)),
                format!("attribute {id} not in the drive's SMART data"),
            );
        }
    }
    Ok(s)
}

/// The ATA PASS-THROUGH(16) CDB of SMART READ DATA (SAT-4 12.2.2; as smartmontools builds
/// it): protocol 4 (PIO data-in); T_DIR from the device, BYTE_BLOCK, T_LENGTH in the sector
/// count; FEATURE 0xD0, COUNT 1, LBA mid/high 0x4F/0xC2 (the SMART signature), COMMAND 0xB0.
pub fn smart_read_data_cdb() -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = 0x85; // ATA PASS-THROUGH(16)
    c[1] = 4 << 1; // PIO data-in, no 48-bit extension
    c[2] = 0x0e; // T_DIR=1, BYTE_BLOCK=1, T_LENGTH=2 (sector count)
    c[4] = 0xd0; // FEATURE: SMART READ DATA
    c[6] = 1; // one 512-byte sector
    c[10] = 0x4f; // LBA mid
    c[12] = 0xc2; // LBA high
    c[14] = 0xb0; // COMMAND: SMART
    c
}

pub fn read_smart_data_ioctl(node: &str, devnum: Option<&str>) -> Result<Vec<u8>, HealthError> {
    const SG_DXFER_FROM_DEV: libc::c_int = -3;
    let f = ioctl::open_ro(node, devnum)?;
    let mut buf = vec![0u8; SMART_DATA_LEN];
    let mut cdb = smart_read_data_cdb();
    let mut sense = [0u8; 32];
    let mut hdr = ioctl::SgIoHdr {
        interface_id: b'S' as libc::c_int,
        dxfer_direction: SG_DXFER_FROM_DEV,
        cmd_len: cdb.len() as u8,
        mx_sb_len: sense.len() as u8,
        iovec_count: 0,
        dxfer_len: SMART_DATA_LEN as u32,
        dxferp: buf.as_mut_ptr().cast(),
        cmdp: cdb.as_mut_ptr(),
        sbp: sense.as_mut_ptr(),
        timeout: 10_000,
        flags: 0,
        pack_id: 0,
        usr_ptr: std::ptr::null_mut(),
        status: 0,
        masked_status: 0,
        msg_status: 0,
        sb_len_wr: 0,
        host_status: 0,
        driver_status: 0,
        resid: 0,
        duration: 0,
        info: 0,
    };
    use std::os::fd::AsRawFd;
    // SAFETY: `hdr` is the kernel's sg_io_hdr; its three pointers address `buf` (dxfer_len
    // bytes), `cdb` (cmd_len) and `sense` (mx_sb_len), all alive until the call returns.
    unsafe { ioctl::sg_io(f.as_raw_fd(), &mut hdr) }.map_err(|e| HealthError::Ioctl {
        ioctl: "SG_IO (ATA PASS-THROUGH SMART READ DATA)",
        node: node.to_string(),
        err: ioctl::errno_text(e),
    })?;
    if hdr.status != 0 || hdr.host_status != 0 || (hdr.driver_status & 0x0f) != 0 {
        return Err(HealthError::DeviceStatus {
            ioctl: "SG_IO (ATA PASS-THROUGH SMART READ DATA)",
            node: node.to_string(),
            status: format!(
                "SCSI 0x{:02x} host 0x{:x} driver 0x{:x} sense {:02x?} (SMART disabled or not \
                 supported?)",
                hdr.status,
                hdr.host_status,
                hdr.driver_status,
                &sense[..usize::from(hdr.sb_len_wr).min(sense.len())]
            ),
        });
    }
    let got = SMART_DATA_LEN.saturating_sub(usize::try_from(hdr.resid).unwrap_or(0));
    buf.truncate(got);
    Ok(buf)
}

pub fn read(t: &Target<'_>, ioctl_ok: &Result<(), String>, gaps: &mut Gaps) -> Option<SataSmart> {
    if let Err(why) = ioctl_ok {
        gaps.note("sata.smart", why);
        return None;
    }
    let bytes = gaps.take(
        "sata.smart",
        super::once("ata-smart", t.dev_node, t.devnum, || {
            read_smart_data_ioctl(t.dev_node, t.devnum)
        }),
    )?;
    super::record_raw(t.name, "ata-smart-data", &bytes);
    let r = decode_smart_data(&bytes, gaps);
    gaps.take("sata.smart", r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SMART data block from (id, value, worst, raw) rows, with a valid checksum.
    pub fn block(rows: &[(u8, u8, u8, u64)]) -> Vec<u8> {
        let mut b = vec![0u8; 512];
        b[0] = 0x10;
        for (i, (id, v, w, raw)) in rows.iter().enumerate() {
            let e = &mut b[2 + i * 12..2 + (i + 1) * 12];
            e[0] = *id;
            e[3] = *v;
            e[4] = *w;
            e[5..11].copy_from_slice(&raw.to_le_bytes()[..6]);
        }
        let sum = b[..511].iter().fold(0u8, |a, x| a.wrapping_add(*x));
        b[511] = 0u8.wrapping_sub(sum);
        b
    }

    #[test]
    fn decodes_kept_attributes() {
        let b = block(&[
            (1, 100, 100, 0),
            (5, 100, 100, 3),
            (9, 99, 99, 0x0000_1234_0000_0010),
            (194, 36, 53, 0x0000_0030_0024),
            (199, 200, 200, 7),
        ]);
        let mut g = Gaps::default();
        let s = decode_smart_data(&b, &mut g).unwrap();
        assert_eq!(s.attribute(5).unwrap().raw, 3);
        assert_eq!(s.attribute(1), None, "attribute 1 is not kept");
        assert_eq!(s.power_on_hours, Some(0x1234_0000_0010 & 0xffff_ffff));
        assert_eq!(s.temperature_celsius, Some(0x24));
        assert_eq!(s.attribute(199).unwrap().worst, 200);
        assert!(g.0.iter().any(|m| m.field == "sata.current_pending_sector"));
    }

    #[test]
    fn bad_buffers() {
        let mut g = Gaps::default();
        assert!(matches!(
            decode_smart_data(&[1u8; 100], &mut g),
            Err(HealthError::Short { .. })
        ));
        let mut b = block(&[(5, 100, 100, 0)]);
        b[20] ^= 0x55;
        assert!(matches!(
            decode_smart_data(&b, &mut g),
            Err(HealthError::Garbage { .. })
        ));
        assert!(decode_smart_data(&[0u8; 512], &mut g).is_err());
        let hot = block(&[(194, 1, 1, 250)]);
        assert_eq!(
            decode_smart_data(&hot, &mut g).unwrap().temperature_celsius,
            None
        );
    }

    #[test]
    fn cdb_is_smart_read_data() {
        let c = smart_read_data_cdb();
        assert_eq!(
            (c[0], c[1], c[2], c[4], c[6], c[10], c[12], c[14]),
            (0x85, 0x08, 0x0e, 0xd0, 1, 0x4f, 0xc2, 0xb0)
        );
    }
}
