//! Owns the factory run's raw flash: which MTD and UBI devices are reported, the read scans
//! and speed tests the board profile's `flash:` section asks for, each device's figures, and
//! the verdict on them against that section's limits. A figure that could not be read where
//! a limit asks for it, a test area that could not be tested, and a mismatched page never
//! pass.

use crate::config::FlashProfile;
use crate::discover::mtd::{Mtd, RawFlash, Ubi};
use crate::metric::{self, Metric};
use crate::report::schema::{FlashClass, FlashDeviceReport, FlashFigure, FlashReport};
use crate::report::verdict::{Reason, ReasonKind, Verdict};
use crate::safety::mtd::{check_flash_write, is_named, names};
use crate::safety::signals::StopFlag;
use crate::workload::mtd::{self as ops, FlashScan, FlashSpeed, MtdDev};

/// A figure's name: its group, a dot, its metric's id.
fn name(group: &str, m: &Metric) -> String {
    format!("{group}.{}", m.id)
}

fn push(v: &mut Vec<FlashFigure>, group: &str, m: &Metric, value: Option<u64>) {
    if let Some(value) = value {
        v.push(FlashFigure {
            name: name(group, m),
            value: value as f64,
        });
    }
}

/// An MTD device's figures: the kernel's counters (NAND), a scan's and a speed test's.
pub fn mtd_figures(
    m: &Mtd,
    scan: Option<&FlashScan>,
    speed: Option<&FlashSpeed>,
) -> Vec<FlashFigure> {
    let mut v = Vec::new();
    let h = &m.health;
    push(&mut v, "flash", &metric::FLASH_BAD_BLOCKS, h.bad_blocks);
    push(&mut v, "flash", &metric::ECC_FAILURES, h.ecc_failures);
    push(&mut v, "flash", &metric::CORRECTED_BITS, h.corrected_bits);
    if let Some(s) = scan {
        push(
            &mut v,
            "scan",
            &metric::FLASH_BAD_BLOCKS,
            Some(s.bad_block_count),
        );
        push(
            &mut v,
            "scan",
            &metric::UNCORRECTABLE_PAGES,
            Some(s.uncorrectable_pages),
        );
        push(
            &mut v,
            "scan",
            &metric::CORRECTED_BITS,
            Some(s.corrected_bits),
        );
    }
    if let Some(s) = speed.filter(|s| s.blocks_tested > 0) {
        for (group, r) in [
            ("flash-erase", &s.erase),
            ("flash-write", &s.write),
            ("flash-read", &s.read),
        ] {
            v.push(FlashFigure {
                name: name(group, &metric::MIB_PER_S),
                value: r.mib_per_s,
            });
        }
    }
    v
}

/// A UBI device's figures.
pub fn ubi_figures(u: &Ubi) -> Vec<FlashFigure> {
    let mut v = Vec::new();
    let h = &u.health;
    push(&mut v, "ubi", &metric::ERASE_COUNT, h.max_erase_count);
    push(&mut v, "ubi", &metric::FLASH_BAD_BLOCKS, h.bad_pebs);
    push(&mut v, "ubi", &metric::RESERVED_FOR_BAD, h.reserved_for_bad);
    v
}

/// The limits of the profile, each with the figure names it judges, its metric and its
/// `flash:` key (the rates have one key per operation). The one place a key is tied to its
/// figures.
fn limits(p: &FlashProfile) -> Vec<(Vec<&'static str>, &'static Metric, &'static str, f64)> {
    let u = |v: Option<u64>| v.map(|v| v as f64);
    [
        (
            vec!["flash.bad_blocks", "scan.bad_blocks", "ubi.bad_blocks"],
            &metric::FLASH_BAD_BLOCKS,
            metric::FLASH_BAD_BLOCKS.key(),
            u(p.max_bad_blocks),
        ),
        (
            vec!["flash.ecc_failures", "scan.uncorrectable_pages"],
            &metric::ECC_FAILURES,
            metric::ECC_FAILURES.key(),
            u(p.max_ecc_failures),
        ),
        (
            vec!["flash.corrected_bits", "scan.corrected_bits"],
            &metric::CORRECTED_BITS,
            metric::CORRECTED_BITS.key(),
            u(p.max_corrected_bits),
        ),
        (
            vec!["ubi.erase_count"],
            &metric::ERASE_COUNT,
            metric::ERASE_COUNT.key(),
            u(p.max_erase_count),
        ),
        (
            vec!["ubi.reserved_for_bad"],
            &metric::RESERVED_FOR_BAD,
            metric::RESERVED_FOR_BAD.key(),
            u(p.min_reserved_for_bad),
        ),
        (
            vec!["flash-erase.mib_per_s"],
            &metric::MIB_PER_S,
            "min_erase_mib_per_s",
            p.min_erase_mib_per_s,
        ),
        (
            vec!["flash-write.mib_per_s"],
            &metric::MIB_PER_S,
            "min_write_mib_per_s",
            p.min_write_mib_per_s,
        ),
        (
            vec!["flash-read.mib_per_s"],
            &metric::MIB_PER_S,
            "min_read_mib_per_s",
            p.min_read_mib_per_s,
        ),
    ]
    .into_iter()
    .filter_map(|(names, m, key, l)| Some((names, m, key, l?)))
    .collect()
}

/// The reasons a device's figures fail the profile. `expected` are the figures this device
/// must have (a NAND's counters, a test's results): one without a value fails where a limit
/// asks for it.
pub fn judge_figures(
    device: &str,
    figures: &[FlashFigure],
    expected: &[&str],
    p: &FlashProfile,
) -> Vec<Reason> {
    let mut out = Vec::new();
    for (names, m, key, limit) in limits(p) {
        for n in names.iter().filter(|n| expected.contains(n)) {
            let value = figures.iter().find(|f| f.name == *n).map(|f| f.value);
            // The figure in its own unit (a scan's uncorrectable pages are pages), against
            // the limit its key sets.
            let shown = n.rsplit('.').next().and_then(metric::by_id).unwrap_or(m);
            let (kind, group) = if m.id == metric::MIB_PER_S.id {
                (ReasonKind::Threshold, n.split('.').next().unwrap_or(n))
            } else {
                (ReasonKind::Health, *n)
            };
            let text = match value {
                None => format!("{n} could not be read, and `flash: {key}` limits it"),
                Some(v) if m.misses(v, limit) => format!(
                    "{group} {} is {} the {} {} (flash: {})",
                    shown.show(v),
                    if m.better == metric::Better::Higher {
                        "below"
                    } else {
                        "above"
                    },
                    m.bound(),
                    shown.show(limit),
                    key
                ),
                Some(_) => continue,
            };
            out.push(
                Reason::new(kind, text)
                    .figure(m, value, limit)
                    .device(device)
                    .rule(format!("flash.{key}")),
            );
        }
    }
    out
}

/// The verify's reasons: a page read back wrong, an erase that failed, an ECC failure while
/// reading back what was just written, no block tested, a test cut short.
pub fn judge_speed(device: &str, s: &FlashSpeed) -> Vec<Reason> {
    let mut out = Vec::new();
    if s.mismatched_pages > 0 {
        out.push(
            Reason::new(
                ReasonKind::Verify,
                format!(
                    "{} pages read back different from what was written",
                    s.mismatched_pages
                ),
            )
            .device(device),
        );
    }
    let unlisted = s
        .erase_failure_count
        .saturating_sub(s.erase_failures.len() as u64);
    if unlisted > 0 {
        out.push(
            Reason::new(
                ReasonKind::Verify,
                format!("{unlisted} more erase failures than listed"),
            )
            .device(device),
        );
    }
    for e in &s.erase_failures {
        out.push(
            Reason::new(
                ReasonKind::Verify,
                format!("erase failed at {e}: a block going bad"),
            )
            .device(device),
        );
    }
    if s.ecc_failures > 0 {
        out.push(
            Reason::new(
                ReasonKind::Verify,
                format!(
                    "{} ECC steps uncorrectable reading back fresh data",
                    s.ecc_failures
                ),
            )
            .device(device),
        );
    }
    if s.blocks_tested == 0 {
        out.push(
            Reason::new(ReasonKind::NoTest, "no erase block was tested".to_string()).device(device),
        );
    }
    if s.interrupted {
        out.push(
            Reason::new(
                ReasonKind::Interrupted,
                "the speed test was interrupted".to_string(),
            )
            .device(device),
        );
    }
    out
}

/// Whether `m` is named by the profile's `scan` list (`all` names every device).
fn scanned(list: &[String], m: &Mtd) -> bool {
    list.iter().any(|a| a == "all") || is_named(list, m)
}

/// What the run does with the raw flash: every NAND MTD device's counters and every UBI
/// device, judged; the scans of the profile's `scan` list; the speed test of each
/// `test_areas` device. `live`: the devices are this system's (a recorded tree's `/dev` is
/// not), so the tests may open them. `None` when the unit has no raw flash and the profile
/// asks for none.
pub fn run(flash: &RawFlash, p: &FlashProfile, live: bool, stop: &StopFlag) -> Option<FlashReport> {
    if flash.is_empty() && p.is_default() {
        return None;
    }
    let mut devices = Vec::new();
    for m in &flash.mtd {
        let scan_it = scanned(&p.scan, m);
        let speed_it = is_named(&p.test_areas, m);
        if !m.kind.is_nand() && !scan_it && !speed_it {
            continue;
        }
        let mut reasons = Vec::new();
        let mut scan = None;
        let mut speed = None;
        let index = crate::discover::mtd::mtd_index(&m.name).unwrap_or(u32::MAX);
        let open = |write: bool| -> Result<MtdDev, String> {
            if !live {
                return Err("a recorded tree: its devices cannot be opened".into());
            }
            let mut dev = MtdDev::open(index, write).map_err(|e| e.to_string())?;
            dev.check_geometry(m.size_bytes, m.erase_block_bytes)
                .map_err(|e| e.to_string())?;
            Ok(dev)
        };
        if scan_it && !stop.requested() {
            match open(false)
                .and_then(|d| ops::scan(&d, &m.name, &m.label, stop).map_err(|e| e.to_string()))
            {
                Ok(s) => scan = Some(s),
                Err(e) => reasons.push(
                    Reason::new(
                        ReasonKind::IoError,
                        format!("the read scan could not run: {e}"),
                    )
                    .device(&m.name),
                ),
            }
        }
        if speed_it && !stop.requested() {
            match check_flash_write(m, flash, &p.test_areas) {
                Err(refusals) => {
                    let why: Vec<String> = refusals.iter().map(ToString::to_string).collect();
                    reasons.push(
                        Reason::new(
                            ReasonKind::Refused,
                            format!(
                                "the profile names it a test area, and it cannot be tested: {}",
                                why.join("; ")
                            ),
                        )
                        .device(&m.name),
                    );
                }
                Ok(()) => match open(true).and_then(|d| {
                    ops::speed(&d, &m.name, &m.label, p.test_blocks, stop)
                        .map_err(|e| e.to_string())
                }) {
                    Ok(s) => {
                        reasons.extend(judge_speed(&m.name, &s));
                        speed = Some(s);
                    }
                    Err(e) => reasons.push(
                        Reason::new(
                            ReasonKind::IoError,
                            format!("the speed test could not run: {e}"),
                        )
                        .device(&m.name),
                    ),
                },
            }
        }
        let figures = mtd_figures(m, scan.as_ref(), speed.as_ref());
        let mut expected: Vec<&str> = Vec::new();
        if m.kind.is_nand() {
            expected.extend([
                "flash.bad_blocks",
                "flash.ecc_failures",
                "flash.corrected_bits",
            ]);
        }
        if scan_it {
            expected.extend([
                "scan.bad_blocks",
                "scan.uncorrectable_pages",
                "scan.corrected_bits",
            ]);
        }
        if speed_it {
            expected.extend([
                "flash-erase.mib_per_s",
                "flash-write.mib_per_s",
                "flash-read.mib_per_s",
            ]);
        }
        reasons.extend(judge_figures(&m.name, &figures, &expected, p));
        devices.push(FlashDeviceReport {
            name: m.name.clone(),
            class: FlashClass::Mtd,
            label: m.label.clone(),
            mtd: Some(m.clone()),
            ubi: None,
            figures,
            scan,
            speed,
            verdict: Verdict::from_reasons(reasons),
        });
    }
    for u in &flash.ubi {
        let figures = ubi_figures(u);
        let expected = ["ubi.erase_count", "ubi.bad_blocks", "ubi.reserved_for_bad"];
        let reasons = judge_figures(&u.name, &figures, &expected, p);
        devices.push(FlashDeviceReport {
            name: u.name.clone(),
            class: FlashClass::Ubi,
            label: u.mtd.clone().unwrap_or_default(),
            mtd: None,
            ubi: Some(u.clone()),
            figures,
            scan: None,
            speed: None,
            verdict: Verdict::from_reasons(reasons),
        });
    }
    // A scan or test area the profile names that is on no device is a test that did not run.
    for area in p.scan.iter().filter(|a| *a != "all").chain(&p.test_areas) {
        if !flash.mtd.iter().any(|m| names(area, m)) {
            devices.push(FlashDeviceReport {
                name: area.clone(),
                class: FlashClass::Mtd,
                label: area.clone(),
                mtd: None,
                ubi: None,
                figures: Vec::new(),
                scan: None,
                speed: None,
                verdict: Verdict::from_reasons(vec![Reason::new(
                    ReasonKind::MissingDevice,
                    format!("flash: {area:?} is named by the profile and is on no MTD device: not tested"),
                )
                .device(area)]),
            });
        }
    }
    Some(FlashReport { devices })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::mtd::{MtdHealth, UbiHealth};
    use crate::workload::mtd::FlashRate;

    fn nand(health: MtdHealth) -> Mtd {
        Mtd {
            health,
            ..Mtd::named("mtd1", "data")
        }
    }

    fn ubi() -> Ubi {
        Ubi {
            health: UbiHealth {
                max_erase_count: Some(5),
                mean_erase_count: None,
                bad_pebs: Some(0),
                reserved_for_bad: Some(9),
            },
            ..Ubi::on("ubi0", "mtd1")
        }
    }

    fn failed(r: &FlashReport) -> Vec<(String, Vec<String>)> {
        r.devices
            .iter()
            .filter(|d| !d.verdict.pass)
            .map(|d| {
                (
                    d.name.clone(),
                    d.verdict.reasons.iter().map(|r| r.text.clone()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn counters_judged_and_unread_ones_never_pass() {
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
            ubi: vec![ubi()],
        };
        let r = run(&flash, &p, false, &StopFlag::new()).unwrap();
        assert_eq!(
            failed(&r),
            vec![
                (
                    "mtd1".to_string(),
                    vec![
                        "flash.bad_blocks 3 blocks is above the maximum 2 blocks (flash: max_bad_blocks)".to_string(),
                        "flash.ecc_failures could not be read, and `flash: max_ecc_failures` limits it"
                            .to_string()
                    ]
                ),
                (
                    "ubi0".to_string(),
                    vec!["ubi.reserved_for_bad 9 blocks reserved is below the minimum 10 blocks reserved (flash: min_reserved_for_bad)".to_string()]
                )
            ]
        );
        let names: Vec<&str> = r.devices[0]
            .figures
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(names, ["flash.bad_blocks", "flash.corrected_bits"]);
    }

    #[test]
    fn named_areas_that_do_not_run_fail() {
        let p = FlashProfile {
            test_areas: vec!["data".into(), "gone".into()],
            scan: vec!["mtd1".into()],
            ..FlashProfile::default()
        };
        let flash = RawFlash {
            mtd: vec![nand(MtdHealth::default())],
            ubi: Vec::new(),
        };
        // A recorded tree: nothing can be opened, so the scan and the speed test fail.
        let r = run(&flash, &p, false, &StopFlag::new()).unwrap();
        let f = failed(&r);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0]
            .1
            .iter()
            .any(|t| t.starts_with("the read scan could not run")));
        assert!(f[0]
            .1
            .iter()
            .any(|t| t.starts_with("the speed test could not run")));
        assert!(f[1].1[0].contains("is on no MTD device"), "{f:?}");
        // Nothing to report, nothing asked: no section.
        assert_eq!(
            run(
                &RawFlash::default(),
                &FlashProfile::default(),
                true,
                &StopFlag::new()
            ),
            None
        );
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
            bad_block_count: 0,
            bad_blocks: vec![],
            erase: rate,
            write: rate,
            read: rate,
            mismatched_pages: 0,
            erase_failure_count: 0,
            erase_failures: vec![],
            corrected_bits: 0,
            ecc_failures: 0,
            left_erased: true,
            interrupted: false,
        };
        assert!(judge_speed("mtd3", &s).is_empty());
        s.mismatched_pages = 1;
        assert_eq!(judge_speed("mtd3", &s).len(), 1);
        s.mismatched_pages = 0;
        s.blocks_tested = 0;
        assert_eq!(judge_speed("mtd3", &s).len(), 1);
        s.blocks_tested = 4;
        s.erase_failures = vec!["block 5: EIO".into()];
        s.erase_failure_count = 1;
        assert_eq!(judge_speed("mtd3", &s).len(), 1);
        let p = FlashProfile {
            min_write_mib_per_s: Some(6.0),
            ..FlashProfile::default()
        };
        let m = nand(MtdHealth::default());
        let figs = mtd_figures(&m, None, Some(&s));
        let r = judge_figures("mtd3", &figs, &["flash-write.mib_per_s"], &p);
        assert_eq!(r.len(), 1);
        assert!(r[0].text.contains("below the minimum"), "{}", r[0].text);
    }
}
