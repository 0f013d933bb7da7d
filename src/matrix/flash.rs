//! Owns the verdict on raw flash: each MTD and UBI device's health counters, a read scan's
//! findings and a speed test's rates, each against the board profile's `flash:` limit. A
//! figure that could not be read is never a pass where a limit asks for it.

use serde::{Deserialize, Serialize};

use crate::config::FlashProfile;
use crate::discover::mtd::RawFlash;
use crate::workload::mtd::{FlashScan, FlashSpeed};

/// One figure of one flash device against its limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FlashCheck {
    /// `mtd2`, `ubi0`.
    pub device: String,
    /// The figure (`bad_blocks`, `scan.uncorrectable_pages`, `speed.write_mib_per_s`).
    pub figure: String,
    /// `None`: the figure could not be read (the reason says why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// The profile's key and its limit.
    pub key: &'static str,
    pub limit: f64,
    pub pass: bool,
    pub reason: String,
}

fn check(
    out: &mut Vec<FlashCheck>,
    device: &str,
    figure: &str,
    value: Option<f64>,
    key: &'static str,
    limit: Option<f64>,
    minimum: bool,
) {
    let Some(limit) = limit else { return };
    let (pass, reason) = match value {
        None => (
            false,
            format!("{device}: {figure} could not be read, and {key} limits it: not a pass"),
        ),
        Some(v) if (minimum && v < limit) || (!minimum && v > limit) => (
            false,
            format!(
                "{device}: {figure} {v} is {} the {} {limit} ({key})",
                if minimum { "below" } else { "above" },
                if minimum { "minimum" } else { "maximum" }
            ),
        ),
        Some(v) => (true, format!("{device}: {figure} {v} within {key} {limit}")),
    };
    out.push(FlashCheck {
        device: device.to_string(),
        figure: figure.to_string(),
        value,
        key,
        limit,
        pass,
        reason,
    });
}

fn f(v: Option<u64>) -> Option<f64> {
    v.map(|v| v as f64)
}

/// The health counters of every NAND MTD device and every UBI device against the profile.
pub fn judge_health(flash: &RawFlash, p: &FlashProfile) -> Vec<FlashCheck> {
    let mut out = Vec::new();
    for m in flash.mtd.iter().filter(|m| m.kind.is_nand()) {
        let h = &m.health;
        let lim = |v: Option<u64>| f(v);
        check(
            &mut out,
            &m.name,
            "bad_blocks",
            f(h.bad_blocks),
            "max_bad_blocks",
            lim(p.max_bad_blocks),
            false,
        );
        check(
            &mut out,
            &m.name,
            "ecc_failures",
            f(h.ecc_failures),
            "max_ecc_failures",
            lim(p.max_ecc_failures),
            false,
        );
        check(
            &mut out,
            &m.name,
            "corrected_bits",
            f(h.corrected_bits),
            "max_corrected_bits",
            lim(p.max_corrected_bits),
            false,
        );
    }
    for u in &flash.ubi {
        let h = &u.health;
        check(
            &mut out,
            &u.name,
            "max_erase_count",
            f(h.max_erase_count),
            "max_erase_count",
            f(p.max_erase_count),
            false,
        );
        check(
            &mut out,
            &u.name,
            "bad_pebs",
            f(h.bad_pebs),
            "max_bad_blocks",
            f(p.max_bad_blocks),
            false,
        );
        check(
            &mut out,
            &u.name,
            "reserved_for_bad",
            f(h.reserved_for_bad),
            "min_reserved_for_bad",
            f(p.min_reserved_for_bad),
            true,
        );
    }
    out
}

/// A read scan's findings against the profile.
pub fn judge_scan(s: &FlashScan, p: &FlashProfile) -> Vec<FlashCheck> {
    let mut out = Vec::new();
    let bad = Some(s.bad_blocks.len() as f64);
    check(
        &mut out,
        &s.mtd,
        "scan.bad_blocks",
        bad,
        "max_bad_blocks",
        f(p.max_bad_blocks),
        false,
    );
    check(
        &mut out,
        &s.mtd,
        "scan.uncorrectable_pages",
        f(Some(s.uncorrectable_pages)),
        "max_ecc_failures",
        f(p.max_ecc_failures),
        false,
    );
    check(
        &mut out,
        &s.mtd,
        "scan.corrected_bits",
        f(Some(s.corrected_bits)),
        "max_corrected_bits",
        f(p.max_corrected_bits),
        false,
    );
    out
}

/// A speed test against the profile; a mismatched page or a failed erase always fails.
pub fn judge_speed(s: &FlashSpeed, p: &FlashProfile) -> Vec<FlashCheck> {
    let mut out = Vec::new();
    check(
        &mut out,
        &s.mtd,
        "speed.erase_mib_per_s",
        Some(s.erase.mib_per_s),
        "min_erase_mib_per_s",
        p.min_erase_mib_per_s,
        true,
    );
    check(
        &mut out,
        &s.mtd,
        "speed.write_mib_per_s",
        Some(s.write.mib_per_s),
        "min_write_mib_per_s",
        p.min_write_mib_per_s,
        true,
    );
    check(
        &mut out,
        &s.mtd,
        "speed.read_mib_per_s",
        Some(s.read.mib_per_s),
        "min_read_mib_per_s",
        p.min_read_mib_per_s,
        true,
    );
    check(
        &mut out,
        &s.mtd,
        "speed.mismatched_pages",
        f(Some(s.mismatched_pages)),
        "verify",
        Some(0.0),
        false,
    );
    check(
        &mut out,
        &s.mtd,
        "speed.erase_failures",
        Some(s.erase_failures.len() as f64),
        "verify",
        Some(0.0),
        false,
    );
    check(
        &mut out,
        &s.mtd,
        "speed.ecc_failures",
        f(Some(s.ecc_failures)),
        "verify",
        Some(0.0),
        false,
    );
    if s.blocks_tested == 0 {
        out.push(FlashCheck {
            device: s.mtd.clone(),
            figure: "speed.blocks_tested".into(),
            value: Some(0.0),
            key: "test_blocks",
            limit: 1.0,
            pass: false,
            reason: format!("{}: no block was tested: not a pass", s.mtd),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::mtd::{FlashType, Mtd, MtdHealth, Ubi, UbiHealth};
    use crate::workload::mtd::FlashRate;

    fn nand(health: MtdHealth) -> Mtd {
        Mtd {
            name: "mtd1".into(),
            label: "data".into(),
            dev_node: "/dev/mtd1".into(),
            devpath: "/devices/virtual/mtd/mtd1".into(),
            kind: FlashType::Nand,
            size_bytes: None,
            erase_block_bytes: None,
            page_bytes: None,
            subpage_bytes: None,
            oob_bytes: None,
            ecc_strength_bits: None,
            ecc_step_bytes: None,
            bitflip_threshold: None,
            offset_bytes: None,
            writable: Some(true),
            health,
            users: Vec::new(),
            partitions: Vec::new(),
            missing: Vec::new(),
        }
    }

    #[test]
    fn health_limits_and_unread_counters() {
        let p = FlashProfile {
            max_bad_blocks: Some(2),
            max_ecc_failures: Some(0),
            min_reserved_for_bad: Some(10),
            ..FlashProfile::default()
        };
        let flash = RawFlash {
            mtd: vec![nand(MtdHealth {
                bad_blocks: Some(3),
                bbt_blocks: Some(4),
                corrected_bits: Some(7),
                ecc_failures: None,
            })],
            ubi: vec![Ubi {
                name: "ubi0".into(),
                mtd: Some("mtd1".into()),
                total_pebs: None,
                available_pebs: None,
                erase_block_bytes: None,
                min_io_bytes: None,
                read_only: None,
                health: UbiHealth {
                    max_erase_count: Some(5),
                    mean_erase_count: Some(1),
                    bad_pebs: Some(0),
                    reserved_for_bad: Some(9),
                },
                volumes: Vec::new(),
                missing: Vec::new(),
            }],
        };
        let got: Vec<(String, bool)> = judge_health(&flash, &p)
            .into_iter()
            .map(|c| (format!("{}:{}", c.device, c.figure), c.pass))
            .collect();
        let want: Vec<(String, bool)> = [
            ("mtd1:bad_blocks", false),
            ("mtd1:ecc_failures", false),
            ("ubi0:bad_pebs", true),
            ("ubi0:reserved_for_bad", false),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), *b))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_speed_test_that_tested_nothing_or_misread_fails() {
        let rate = FlashRate {
            mib_per_s: 5.0,
            ci95_percent: Some(1.0),
        };
        let mut s = FlashSpeed {
            mtd: "mtd3".into(),
            label: "test".into(),
            blocks_tested: 4,
            bytes_per_block: 131_072,
            bad_blocks: vec![],
            erase: rate,
            write: rate,
            read: rate,
            mismatched_pages: 0,
            erase_failures: vec![],
            corrected_bits: 0,
            ecc_failures: 0,
            left_erased: true,
            interrupted: false,
        };
        let p = FlashProfile {
            min_write_mib_per_s: Some(4.0),
            ..FlashProfile::default()
        };
        assert!(judge_speed(&s, &p).iter().all(|c| c.pass));
        s.mismatched_pages = 1;
        assert!(!judge_speed(&s, &p).iter().all(|c| c.pass));
        s.mismatched_pages = 0;
        s.blocks_tested = 0;
        assert!(!judge_speed(&s, &p).iter().all(|c| c.pass));
        s.blocks_tested = 4;
        s.write.mib_per_s = 3.0;
        assert!(!judge_speed(&s, &p).iter().all(|c| c.pass));
    }
}
