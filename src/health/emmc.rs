//! Owns the MMC health readers: an eMMC's life-time estimates, pre-EOL state and EXT_CSD
//! (decoded per JEDEC JESD84-B51), and an SD card's speed class and UHS mode.
//!
//! Sources, most direct first: the card's sysfs `life_time`/`pre_eol_info`/`fwrev` (kernel
//! 4.13+, drivers/mmc/core/mmc.c); EXT_CSD through MMC_IOC_CMD (CMD8 SEND_EXT_CSD) on the
//! user-area node; else the kernel's own copy in debugfs (`mmcX/mmcX:RCA/ext_csd`, hex).
//! Offsets are include/linux/mmc/mmc.h's `EXT_CSD_*` (checked against mmc-utils' mmc.h).

use serde::{Deserialize, Serialize};

use super::ioctl;
use super::{parse_hex_u8, Gaps, HealthError, LifeTime, PreEol, Target};
use crate::device::EmmcArea;
use crate::sysfs::SysfsRoot;

/// EXT_CSD byte offsets (include/linux/mmc/mmc.h; JESD84-B51 section 7.4).
pub mod off {
    pub const RPMB_SIZE_MULT: usize = 168;
    pub const BOOT_WP: usize = 173;
    pub const PARTITION_CONFIG: usize = 179;
    pub const BUS_WIDTH: usize = 183;
    pub const HS_TIMING: usize = 185;
    pub const EXT_CSD_REV: usize = 192;
    pub const EXT_CSD_STRUCTURE: usize = 194;
    pub const BOOT_SIZE_MULT: usize = 226;
    pub const CACHE_SIZE: usize = 249; // 4 bytes, little-endian
    pub const FIRMWARE_VERSION: usize = 254; // 8 bytes
    pub const PRE_EOL_INFO: usize = 267;
    pub const DEVICE_LIFE_TIME_EST_TYP_A: usize = 268;
    pub const DEVICE_LIFE_TIME_EST_TYP_B: usize = 269;
}

pub const EXT_CSD_LEN: usize = 512;

/// The decoded EXT_CSD fields the factory cares about.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ExtCsd {
    /// Where the bytes came from: `ioctl` (MMC_IOC_CMD) or `debugfs`.
    pub source: String,
    pub ext_csd_rev: u8,
    /// The eMMC version that revision stands for (`5.1` for 8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emmc_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub life_time_a: Option<LifeTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub life_time_b: Option<LifeTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_eol: Option<PreEol>,
    /// FIRMWARE_VERSION [254..261] as hex, byte 254 first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub firmware_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_size_kib: Option<u32>,
    pub partition_config: u8,
    /// BOOT_PARTITION_ENABLE (PARTITION_CONFIG bits 5:3): `none`, `boot0`, `boot1`, `user`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_partition_enabled: Option<String>,
    /// BOOT_ACK (bit 6).
    pub boot_ack: bool,
    /// BOOT_WP [173] raw (power-on / permanent write protection of the boot areas).
    pub boot_wp: u8,
    /// BOOT_SIZE_MULT × 128 KiB, each boot area.
    pub boot_size_kib: u32,
    /// RPMB_SIZE_MULT × 128 KiB.
    pub rpmb_size_kib: u32,
    /// BUS_WIDTH [183]: `1`, `4`, `8`, `4-ddr`, `8-ddr` (+ ` strobe`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bus_width: Option<String>,
    /// HS_TIMING [185] low nibble: `legacy`, `hs`, `hs200`, `hs400`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hs_timing: Option<String>,
}

/// What discovery reports about an eMMC's health.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EmmcHealth {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub life_time_a: Option<LifeTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub life_time_b: Option<LifeTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_eol: Option<PreEol>,
    /// `sysfs` or `ext_csd`: where the three above were read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub life_source: Option<String>,
    /// The card's sysfs `fwrev`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fwrev: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ext_csd: Option<ExtCsd>,
}

/// The kernel's sysfs `life_time` (`0x01 0x02`: type A then type B).
pub fn parse_life_time(s: &str) -> Result<(Option<LifeTime>, Option<LifeTime>), HealthError> {
    let mut it = s.split_whitespace();
    let (Some(a), Some(b), None) = (it.next(), it.next(), it.next()) else {
        return Err(HealthError::Malformed {
            field: "life_time",
            value: s.to_string(),
        });
    };
    let p = |v: &str| {
        parse_hex_u8(v).ok_or_else(|| HealthError::Malformed {
            field: "life_time",
            value: s.to_string(),
        })
    };
    Ok((
        LifeTime::from_raw("life_time A", p(a)?)?,
        LifeTime::from_raw("life_time B", p(b)?)?,
    ))
}

/// The sysfs `pre_eol_info` (`0x01`).
pub fn parse_pre_eol(s: &str) -> Result<Option<PreEol>, HealthError> {
    let v = parse_hex_u8(s).ok_or_else(|| HealthError::Malformed {
        field: "pre_eol_info",
        value: s.to_string(),
    })?;
    PreEol::from_raw("pre_eol_info", v)
}

/// debugfs `ext_csd`: 512 bytes as 1024 hex digits, byte 0 first (drivers/mmc/core/debugfs.c).
pub fn parse_ext_csd_hex(s: &str) -> Result<Vec<u8>, HealthError> {
    let s = s.trim();
    if s.len() % 2 != 0 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(HealthError::Garbage {
            what: "EXT_CSD (debugfs)",
            detail: format!("{} characters, not pairs of hex digits", s.len()),
        });
    }
    Ok((0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0))
        .collect())
}

/// Decodes a 512-byte EXT_CSD. A short buffer, or one whose revision or structure no eMMC
/// has (the kernel's own checks in mmc_decode_ext_csd), is refused whole; a reserved value in
/// one field leaves that field missing with its reason.
pub fn decode_ext_csd(b: &[u8], source: &str, gaps: &mut Gaps) -> Result<ExtCsd, HealthError> {
    if b.len() < EXT_CSD_LEN {
        return Err(HealthError::Short {
            what: "EXT_CSD",
            len: b.len(),
            want: EXT_CSD_LEN,
        });
    }
    let rev = b[off::EXT_CSD_REV];
    let structure = b[off::EXT_CSD_STRUCTURE];
    if rev > 8 || structure > 2 {
        return Err(HealthError::Garbage {
            what: "EXT_CSD",
            detail: format!(
                "EXT_CSD_REV {rev} (JESD84-B51 defines up to 8) / EXT_CSD_STRUCTURE {structure}"
            ),
        });
    }
    let mut e = ExtCsd {
        source: source.to_string(),
        ext_csd_rev: rev,
        emmc_version: emmc_version(rev).map(str::to_string),
        partition_config: b[off::PARTITION_CONFIG],
        boot_ack: b[off::PARTITION_CONFIG] & 0x40 != 0,
        boot_wp: b[off::BOOT_WP],
        boot_size_kib: u32::from(b[off::BOOT_SIZE_MULT]) * 128,
        rpmb_size_kib: u32::from(b[off::RPMB_SIZE_MULT]) * 128,
        ..ExtCsd::default()
    };
    e.boot_partition_enabled = match (b[off::PARTITION_CONFIG] >> 3) & 7 {
        0 => Some("none".into()),
        1 => Some("boot0".into()),
        2 => Some("boot1".into()),
        7 => Some("user".into()),
        v => {
            gaps.note(
                "emmc.ext_csd.boot_partition_enabled",
                format!("BOOT_PARTITION_ENABLE {v}: reserved"),
            );
            None
        }
    };
    let bw = b[off::BUS_WIDTH];
    e.bus_width = match bw & 0x0f {
        0 => Some("1"),
        1 => Some("4"),
        2 => Some("8"),
        5 => Some("4-ddr"),
        6 => Some("8-ddr"),
        _ => None,
    }
    .map(|w| {
        if bw & 0x80 != 0 {
            format!("{w} strobe")
        } else {
            w.to_string()
        }
    });
    if e.bus_width.is_none() {
        gaps.note(
            "emmc.ext_csd.bus_width",
            format!("BUS_WIDTH 0x{bw:02x}: reserved"),
        );
    }
    let hs = b[off::HS_TIMING] & 0x0f;
    e.hs_timing = match hs {
        0 => Some("legacy".into()),
        1 => Some("hs".into()),
        2 => Some("hs200".into()),
        3 => Some("hs400".into()),
        _ => {
            gaps.note(
                "emmc.ext_csd.hs_timing",
                format!("HS_TIMING 0x{:02x}: reserved", b[off::HS_TIMING]),
            );
            None
        }
    };
    // Cache, firmware version and the health fields are eMMC 4.5 / 5.0 additions: reserved
    // (and meaningless) bytes on older revisions.
    if rev >= 6 {
        let c = &b[off::CACHE_SIZE..off::CACHE_SIZE + 4];
        e.cache_size_kib = Some(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    } else {
        gaps.note(
            "emmc.ext_csd.cache_size_kib",
            format!("EXT_CSD_REV {rev} < 6 (eMMC 4.5): no CACHE_SIZE"),
        );
    }
    if rev >= 7 {
        let fw = &b[off::FIRMWARE_VERSION..off::FIRMWARE_VERSION + 8];
        e.firmware_version = Some(usbperf_report::seal::hex(fw));
        e.pre_eol = gaps
            .take(
                "emmc.ext_csd.pre_eol",
                PreEol::from_raw("PRE_EOL_INFO", b[off::PRE_EOL_INFO]),
            )
            .flatten();
        e.life_time_a = gaps
            .take(
                "emmc.ext_csd.life_time_a",
                LifeTime::from_raw(
                    "DEVICE_LIFE_TIME_EST_TYP_A",
                    b[off::DEVICE_LIFE_TIME_EST_TYP_A],
                ),
            )
            .flatten();
        e.life_time_b = gaps
            .take(
                "emmc.ext_csd.life_time_b",
                LifeTime::from_raw(
                    "DEVICE_LIFE_TIME_EST_TYP_B",
                    b[off::DEVICE_LIFE_TIME_EST_TYP_B],
                ),
            )
            .flatten();
        for (f, v) in [
            ("emmc.ext_csd.pre_eol", b[off::PRE_EOL_INFO]),
            (
                "emmc.ext_csd.life_time_a",
                b[off::DEVICE_LIFE_TIME_EST_TYP_A],
            ),
            (
                "emmc.ext_csd.life_time_b",
                b[off::DEVICE_LIFE_TIME_EST_TYP_B],
            ),
        ] {
            if v == 0 {
                gaps.note(f, "0x00: not defined by the device");
            }
        }
    } else {
        gaps.note(
            "emmc.ext_csd.life_time_a",
            format!("EXT_CSD_REV {rev} < 7 (eMMC 5.0): no life-time estimate or pre-EOL"),
        );
    }
    Ok(e)
}

fn emmc_version(rev: u8) -> Option<&'static str> {
    Some(match rev {
        0 => "4.0",
        1 => "4.1",
        2 => "4.2",
        3 => "4.3",
        5 => "4.41",
        6 => "4.5",
        7 => "5.0",
        8 => "5.1",
        _ => return None,
    })
}

/// SEND_EXT_CSD through MMC_IOC_CMD: CMD8, argument 0, one 512-byte block from the card,
/// `write_flag = 0`. Flags as mmc-utils' read_extcsd: MMC_RSP_SPI_R1 | MMC_RSP_R1 |
/// MMC_CMD_ADTC (include/linux/mmc/core.h).
pub fn read_ext_csd_ioctl(node: &str, devnum: Option<&str>) -> Result<Vec<u8>, HealthError> {
    const MMC_SEND_EXT_CSD: u32 = 8;
    const MMC_RSP_PRESENT: u32 = 1 << 0;
    const MMC_RSP_CRC: u32 = 1 << 2;
    const MMC_RSP_OPCODE: u32 = 1 << 4;
    const MMC_CMD_ADTC: u32 = 1 << 5;
    const MMC_RSP_SPI_S1: u32 = 1 << 7;
    let f = ioctl::open_ro(node, devnum)?;
    let mut buf = vec![0u8; EXT_CSD_LEN];
    let mut cmd = ioctl::MmcIocCmd {
        write_flag: 0,
        opcode: MMC_SEND_EXT_CSD,
        arg: 0,
        flags: MMC_RSP_SPI_S1 | MMC_RSP_PRESENT | MMC_RSP_CRC | MMC_RSP_OPCODE | MMC_CMD_ADTC,
        blksz: EXT_CSD_LEN as u32,
        blocks: 1,
        data_ptr: buf.as_mut_ptr() as usize as u64,
        ..Default::default()
    };
    use std::os::fd::AsRawFd;
    // SAFETY: `cmd` is the kernel's struct mmc_ioc_cmd; data_ptr points at `buf`, 512 bytes
    // (blksz × blocks), alive until the call returns.
    unsafe { ioctl::mmc_ioc_cmd(f.as_raw_fd(), &mut cmd) }.map_err(|e| HealthError::Ioctl {
        ioctl: "MMC_IOC_CMD (SEND_EXT_CSD)",
        node: node.to_string(),
        err: ioctl::errno_text(e),
    })?;
    Ok(buf)
}

/// Reads an eMMC's health: sysfs first, EXT_CSD beside it (user area only).
pub fn read_emmc(
    sys: &SysfsRoot,
    card: &str,
    t: &Target<'_>,
    ioctl_ok: &Result<(), String>,
    gaps: &mut Gaps,
) -> EmmcHealth {
    let mut h = EmmcHealth::default();
    match sys.attr(card, "life_time") {
        Ok(s) => match parse_life_time(&s) {
            Ok((a, b)) => {
                if a.is_none() {
                    gaps.note(
                        "emmc.life_time_a",
                        format!("{card}/life_time: 0x00, not defined by the device"),
                    );
                }
                if b.is_none() {
                    gaps.note(
                        "emmc.life_time_b",
                        format!("{card}/life_time: 0x00, not defined by the device"),
                    );
                }
                if a.is_some() || b.is_some() {
                    h.life_source = Some("sysfs".into());
                }
                h.life_time_a = a;
                h.life_time_b = b;
            }
            Err(e) => gaps.note("emmc.life_time_a", format!("{card}/life_time: {e}")),
        },
        Err(e) => gaps.note(
            "emmc.life_time_a",
            format!("{card}/life_time: {e} (kernel < 4.13?)"),
        ),
    }
    match sys.attr(card, "pre_eol_info") {
        Ok(s) => match parse_pre_eol(&s) {
            Ok(Some(p)) => h.pre_eol = Some(p),
            Ok(None) => gaps.note(
                "emmc.pre_eol",
                format!("{card}/pre_eol_info: 0x00, not defined by the device"),
            ),
            Err(e) => gaps.note("emmc.pre_eol", format!("{card}/pre_eol_info: {e}")),
        },
        Err(e) => gaps.note("emmc.pre_eol", format!("{card}/pre_eol_info: {e}")),
    }
    h.fwrev = gaps.take(
        "emmc.fwrev",
        sys.attr(card, "fwrev")
            .map_err(|e| format!("{card}/fwrev: {e}")),
    );

    // EXT_CSD only through the user-area node: an ioctl on a boot or RPMB node makes the
    // kernel switch the card's PARTITION_ACCESS first (mmc_blk_part_switch), a CMD6 write.
    let raw = if t.emmc_area != Some(EmmcArea::User) {
        Err(
            "not read on a boot/RPMB area node (the kernel would switch the card's partition \
             first): see the user-area disk"
                .to_string(),
        )
    } else {
        let via_ioctl = match ioctl_ok {
            Ok(()) => super::once("ext-csd", t.dev_node, t.devnum, || {
                read_ext_csd_ioctl(t.dev_node, t.devnum)
            })
            .map_err(|e| e.to_string()),
            Err(why) => Err(why.clone()),
        };
        via_ioctl.map(|b| (b, "ioctl")).or_else(|ioctl_err| {
            // debugfs holds the kernel's own read of the register (root, debugfs mounted).
            let host = std::path::Path::new(card)
                .parent()
                .and_then(|p| p.file_name())
                .map(|s| s.to_string_lossy().into_owned());
            let cname = std::path::Path::new(card)
                .file_name()
                .map(|s| s.to_string_lossy().into_owned());
            match (host, cname) {
                (Some(hn), Some(cn)) => {
                    let dir = format!("/kernel/debug/{hn}/{cn}");
                    match sys.attr(&dir, "ext_csd") {
                        Ok(text) => parse_ext_csd_hex(&text)
                            .map(|b| (b, "debugfs"))
                            .map_err(|e| format!("ioctl: {ioctl_err}; debugfs: {e}")),
                        Err(e) => Err(format!("ioctl: {ioctl_err}; {dir}/ext_csd: {e}")),
                    }
                }
                _ => Err(ioctl_err),
            }
        })
    };
    match raw {
        Ok((bytes, source)) => {
            super::record_raw(t.name, &format!("ext-csd-{source}"), &bytes);
            match decode_ext_csd(&bytes, source, gaps) {
                Ok(e) => {
                    if h.life_source.is_none()
                        && (e.life_time_a.is_some() || e.life_time_b.is_some())
                    {
                        h.life_time_a = e.life_time_a;
                        h.life_time_b = e.life_time_b;
                        h.life_source = Some("ext_csd".into());
                    }
                    if h.pre_eol.is_none() {
                        h.pre_eol = e.pre_eol;
                    }
                    h.ext_csd = Some(e);
                }
                Err(e) => gaps.note("emmc.ext_csd", e),
            }
        }
        Err(why) => gaps.note("emmc.ext_csd", why),
    }
    h
}

/// An SD card's speed grades (SD Status register, `ssr`) and bus mode.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SdHealth {
    /// SPEED_CLASS: `C2`, `C4`, `C6`, `C10`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speed_class: Option<String>,
    /// UHS_SPEED_GRADE: `U1`, `U3`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uhs_speed_grade: Option<String>,
    /// VIDEO_SPEED_CLASS: `V6` .. `V90`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub video_speed_class: Option<String>,
    /// The UHS-I bus mode in use (`SDR104`, `DDR50`), from the debugfs timing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uhs_mode: Option<String>,
}

/// The speed grades of an `ssr` attribute: 512 bits as 128 hex digits, bit 511 first
/// (drivers/mmc/core/sd.c). SD Physical Layer spec 4.10.2: SPEED_CLASS [447:440] = byte 8,
/// UHS_SPEED_GRADE [399:396] = byte 14 high nibble, VIDEO_SPEED_CLASS [391:384] = byte 15.
pub fn parse_ssr(s: &str, gaps: &mut Gaps) -> Result<SdHealth, HealthError> {
    let b = parse_ext_csd_hex(s).map_err(|_| HealthError::Malformed {
        field: "ssr",
        value: s.to_string(),
    })?;
    if b.len() != 64 {
        return Err(HealthError::Short {
            what: "SD status (ssr)",
            len: b.len(),
            want: 64,
        });
    }
    let speed_class = match b[8] {
        0 => {
            gaps.note("sd.speed_class", "SPEED_CLASS 0: the card states no class");
            None
        }
        1 => Some("C2".into()),
        2 => Some("C4".into()),
        3 => Some("C6".into()),
        4 => Some("C10".into()),
        v => {
            gaps.note("sd.speed_class", format!("SPEED_CLASS {v}: reserved"));
            None
        }
    };
    let uhs_speed_grade = match b[14] >> 4 {
        0 => None,
        1 => Some("U1".into()),
        3 => Some("U3".into()),
        v => {
            gaps.note(
                "sd.uhs_speed_grade",
                format!("UHS_SPEED_GRADE {v}: reserved"),
            );
            None
        }
    };
    let video_speed_class = match b[15] {
        0 => None,
        v @ (6 | 10 | 30 | 60 | 90) => Some(format!("V{v}")),
        v => {
            gaps.note(
                "sd.video_speed_class",
                format!("VIDEO_SPEED_CLASS {v}: reserved"),
            );
            None
        }
    };
    Ok(SdHealth {
        speed_class,
        uhs_speed_grade,
        video_speed_class,
        uhs_mode: None,
    })
}

/// `sd uhs SDR104` → `SDR104`; non-UHS timings give none.
pub fn uhs_mode(timing: &str) -> Option<String> {
    let rest = timing.strip_prefix("sd uhs ")?;
    Some(rest.trim().to_string())
}

pub fn read_sd(sys: &SysfsRoot, card: &str, timing: Option<&str>, gaps: &mut Gaps) -> SdHealth {
    let mut h = match sys.attr(card, "ssr") {
        Ok(s) => match parse_ssr(&s, gaps) {
            Ok(h) => h,
            Err(e) => {
                gaps.note("sd.speed_class", format!("{card}/ssr: {e}"));
                SdHealth::default()
            }
        },
        Err(e) => {
            gaps.note("sd.speed_class", format!("{card}/ssr: {e} (kernel < 5.9?)"));
            SdHealth::default()
        }
    };
    match timing {
        Some(t) => {
            h.uhs_mode = uhs_mode(t);
            if h.uhs_mode.is_none() {
                gaps.note(
                    "sd.uhs_mode",
                    format!("bus timing {t:?} is not a UHS-I mode"),
                );
            }
        }
        None => gaps.note("sd.uhs_mode", "no debugfs timing (see mmc.timing's reason)"),
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lt(v: u8) -> Option<LifeTime> {
        LifeTime::from_raw("t", v).unwrap()
    }

    #[test]
    fn sysfs_life_time_and_pre_eol() {
        type Pair = Option<(Option<LifeTime>, Option<LifeTime>)>;
        let cases: &[(&str, Pair)] = &[
            ("0x01 0x02\n", Some((lt(1), lt(2)))),
            ("0x00 0x00", Some((None, None))),
            ("0x0b 0x0a", Some((lt(11), lt(10)))),
            ("0x0c 0x01", None),
            ("0x01", None),
            ("garbage here", None),
            ("", None),
        ];
        for (input, want) in cases {
            assert_eq!(parse_life_time(input).ok(), *want, "{input:?}");
        }
        assert_eq!(parse_pre_eol("0x02").unwrap(), Some(PreEol::Warning));
        assert_eq!(parse_pre_eol("0x00").unwrap(), None);
        assert!(parse_pre_eol("0x09").is_err());
        assert!(parse_pre_eol("").is_err());
    }

    #[test]
    fn ext_csd_short_or_garbage_is_refused() {
        let mut g = Gaps::default();
        assert!(matches!(
            decode_ext_csd(&[0u8; 100], "t", &mut g),
            Err(HealthError::Short { len: 100, .. })
        ));
        assert!(matches!(
            decode_ext_csd(&[0xffu8; 512], "t", &mut g),
            Err(HealthError::Garbage { .. })
        ));
        assert!(parse_ext_csd_hex("0g").is_err());
        assert!(parse_ext_csd_hex("abc").is_err());
    }

    #[test]
    fn ext_csd_reserved_health_values_are_missing_not_fatal() {
        let mut b = [0u8; 512];
        b[off::EXT_CSD_REV] = 8;
        b[off::EXT_CSD_STRUCTURE] = 2;
        b[off::PRE_EOL_INFO] = 0x77;
        b[off::DEVICE_LIFE_TIME_EST_TYP_A] = 0x20;
        b[off::DEVICE_LIFE_TIME_EST_TYP_B] = 0x03;
        b[off::BUS_WIDTH] = 0x86;
        b[off::HS_TIMING] = 0x03;
        let mut g = Gaps::default();
        let e = decode_ext_csd(&b, "t", &mut g).unwrap();
        assert_eq!(e.pre_eol, None);
        assert_eq!(e.life_time_a, None);
        assert_eq!(e.life_time_b, lt(3));
        assert_eq!(e.bus_width.as_deref(), Some("8-ddr strobe"));
        assert_eq!(e.hs_timing.as_deref(), Some("hs400"));
        let fields: Vec<&str> = g.0.iter().map(|m| m.field.as_str()).collect();
        assert!(fields.contains(&"emmc.ext_csd.pre_eol"), "{fields:?}");
        assert!(fields.contains(&"emmc.ext_csd.life_time_a"), "{fields:?}");
    }

    #[test]
    fn ssr_speed_grades() {
        let mut b = [0u8; 64];
        b[8] = 4;
        b[14] = 0x39;
        b[15] = 30;
        let hex = usbperf_report::seal::hex(&b);
        let mut g = Gaps::default();
        let h = parse_ssr(&hex, &mut g).unwrap();
        assert_eq!(h.speed_class.as_deref(), Some("C10"));
        assert_eq!(h.uhs_speed_grade.as_deref(), Some("U3"));
        assert_eq!(h.video_speed_class.as_deref(), Some("V30"));
        assert!(parse_ssr("00", &mut g).is_err());
        assert_eq!(uhs_mode("sd uhs SDR104").as_deref(), Some("SDR104"));
        assert_eq!(uhs_mode("sd high-speed"), None);
    }

    /// The whole reader on a sysfs tree: the card's attributes, and EXT_CSD from debugfs (a
    /// recorded tree is never sent an ioctl), the QEMU 10 register patched to eMMC 5.1.
    #[test]
    fn reader_on_a_tree_uses_sysfs_then_debugfs() {
        let dir = std::env::temp_dir().join(format!("usbperf-emmc-{}", std::process::id()));
        let card = "devices/platform/sdhci/mmc_host/mmc0/mmc0:0001";
        std::fs::create_dir_all(dir.join(card)).unwrap();
        std::fs::create_dir_all(dir.join("class/block")).unwrap();
        std::fs::write(dir.join(card).join("life_time"), "0x02 0x01\n").unwrap();
        std::fs::write(dir.join(card).join("pre_eol_info"), "0x01\n").unwrap();
        std::fs::write(dir.join(card).join("fwrev"), "0x1\n").unwrap();
        let mut ext = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/health/qemu10-armv7-emmc-ext-csd.bin"
        ))
        .unwrap();
        ext[off::EXT_CSD_REV] = 8;
        ext[off::DEVICE_LIFE_TIME_EST_TYP_A] = 3;
        let hex = usbperf_report::seal::hex(&ext);
        std::fs::create_dir_all(dir.join("kernel/debug/mmc0/mmc0:0001")).unwrap();
        std::fs::write(dir.join("kernel/debug/mmc0/mmc0:0001/ext_csd"), hex + "\n").unwrap();
        let sys = SysfsRoot::at(&dir);
        let t = Target {
            name: "mmcblk0",
            dev_node: "/dev/mmcblk0",
            emmc_area: Some(EmmcArea::User),
            ..Target::default()
        };
        let mut g = Gaps::default();
        let h = read_emmc(
            &sys,
            &format!("/{card}"),
            &t,
            &super::super::ioctl_allowed(&sys),
            &mut g,
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(h.life_time_a, lt(2));
        assert_eq!(h.life_time_b, lt(1));
        assert_eq!(h.pre_eol, Some(PreEol::Normal));
        assert_eq!(h.life_source.as_deref(), Some("sysfs"));
        let e = h.ext_csd.as_ref().unwrap();
        assert_eq!((e.source.as_str(), e.ext_csd_rev), ("debugfs", 8));
        assert_eq!(e.life_time_a, lt(3));
        let mut health = super::super::Health {
            emmc: Some(h),
            ..Default::default()
        };
        health.summarize();
        assert_eq!(health.short(), "life A 20% B 10% eol normal");
        // sysfs wins for the summary; EXT_CSD's own figures stay in ext_csd.
        assert_eq!(health.life_time_used_percent_max, Some(20));
    }
}
