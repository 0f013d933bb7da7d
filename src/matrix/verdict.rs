//! Owns verdicts: each threshold that applies to a device compared with its measured figures
//! and link, every shortfall turned into a reason; a device's verdict from its limits and
//! cells, and the unit's from its devices; a pass only when every check could be made and
//! passed. A reason is a record (report schema 2): what kind of failure, the rule, the metric,
//! the figure measured and the limit with its unit, the device and port, and the sentence for
//! people beside them, so nothing downstream parses English.

use super::select::matches;
use crate::config::Threshold;
use crate::discover::linkcheck::{self, check_links, PortExpectation};
use crate::discover::parse::speed_label;
use crate::discover::Disk;
use crate::metric;
use crate::report::schema::{Cell, CellStatus, DeviceReport, FlashReport};
pub use crate::report::verdict::{texts, Reason, ReasonKind, Verdict};
use crate::safety::SystemFacts;
use crate::units::format_size;
use crate::workload::BenchResult;

/// The unit's reason when the run tested no device at all: a unit whose sticks were never
/// plugged in must not pass.
pub const NO_DEVICE_TESTED: &str = "no device was tested: no disk matched the configuration's \
     device rules (plug in the devices, or select them under devices: in the config; \
     `usbperf-matrix list --all` shows every disk and why)";

/// A device's reason when none of its tests ran (no cell, or every cell skipped): nothing
/// tested is never a pass.
pub fn untested_reason(cells: &[Cell]) -> Option<Reason> {
    if cells.is_empty() {
        return Some(Reason::new(
            ReasonKind::Config,
            "no test ran on this device: the matrix has no test (tests:)",
        ));
    }
    if cells.iter().all(|c| c.status == CellStatus::Skipped) {
        let why = cells
            .iter()
            .flat_map(|c| c.reasons.iter())
            .next()
            .map(|r| r.text.clone())
            .unwrap_or_default();
        return Some(Reason::new(
            ReasonKind::NoTest,
            format!(
                "no test ran on this device: all {} were skipped ({why})",
                cells.len()
            ),
        ));
    }
    None
}

fn rule_name(i: usize, t: &Threshold) -> String {
    let mut parts = Vec::new();
    if t.select.all_non_system {
        parts.push("all_non_system".to_string());
    }
    if t.select.system_disk {
        parts.push("system_disk".to_string());
    }
    if let Some(c) = t.select.class {
        parts.push(format!("class {c}"));
    }
    if let Some(p) = &t.select.port {
        parts.push(p.clone());
    }
    if let Some(p) = &t.select.id_path {
        parts.push(format!("id_path {p}"));
    }
    if let Some(s) = &t.select.serial {
        parts.push(format!("serial {s}"));
    }
    if let Some(n) = &t.select.name {
        parts.push(n.clone());
    }
    format!("thresholds[{i}] ({})", parts.join(", "))
}

/// The thresholds that apply to a disk (its selector matches it).
pub fn applicable<'t>(
    thresholds: &'t [Threshold],
    disk: &Disk,
    facts: &SystemFacts,
) -> Vec<(usize, &'t Threshold)> {
    thresholds
        .iter()
        .enumerate()
        .filter(|(_, t)| matches(&t.select, disk, facts))
        .collect()
}

/// Checks the device-level limits: link speed (USB, SATA) and capacity.
pub fn device_reasons(disk: &Disk, rules: &[(usize, &Threshold)]) -> Vec<Reason> {
    let mut out = Vec::new();
    for (i, t) in rules {
        let rule = rule_name(*i, t);
        let at = |kind, text: String| Reason::new(kind, text).rule(format!("thresholds[{i}]"));
        if let Some(min) = t.min_link_mbps {
            match &disk.usb {
                Some(u) => {
                    if let Some(d) = linkcheck::diagnose(min, u) {
                        out.push(
                            at(ReasonKind::Link, format!("link: {} [{rule}]", d.text))
                                .figure(&metric::LINK_MBPS, u.speed_mbps, min)
                                .device(&disk.name)
                                .port(format!("usb:{}", u.port_path))
                                .cause(d.cause.as_str()),
                        );
                    }
                }
                None => out.push(
                    at(
                        ReasonKind::Link,
                        format!(
                            "link: {} has no USB link, but at least {} is required [{rule}]",
                            disk.name,
                            speed_label(min)
                        ),
                    )
                    .figure(&metric::LINK_MBPS, None, min)
                    .device(&disk.name),
                ),
            }
        }
        if let Some(min) = t.min_sata_gbps {
            let port = disk.sata.as_ref().map(|s| s.port.clone());
            let sata = |r: Reason| {
                let r = r.device(&disk.name);
                match &port {
                    Some(p) => r.port(p.clone()),
                    None => r,
                }
            };
            match disk.sata.as_ref().and_then(|s| s.sata_spd_gbps) {
                Some(g) if g + 1e-9 >= min => {}
                Some(g) => out.push(sata(
                    at(
                        ReasonKind::SataLink,
                        format!(
                            "link: SATA link at {g:.1} Gbps, below the {min:.1} Gbps required: \
                             check the cable and connector, or a speed limit (libata.force) \
                             [{rule}]"
                        ),
                    )
                    .figure(&metric::SATA_GBPS, Some(g), min),
                )),
                None => out.push(sata(
                    at(
                        ReasonKind::SataLink,
                        format!(
                            "link: the SATA link speed of {} is unknown: cannot verify \
                             {min:.1} Gbps [{rule}]",
                            disk.name
                        ),
                    )
                    .figure(&metric::SATA_GBPS, None, min),
                )),
            }
        }
        if let Some(min) = t.min_capacity {
            match disk.size_bytes {
                Some(b) if b >= min.0 => {}
                Some(b) => out.push(
                    at(
                        ReasonKind::Threshold,
                        format!(
                            "capacity: {} is below the {} required [{rule}]",
                            format_size(b),
                            format_size(min.0)
                        ),
                    )
                    .figure(&metric::CAPACITY_BYTES, Some(b as f64), min.0 as f64)
                    .device(&disk.name),
                ),
                None => out.push(
                    at(
                        ReasonKind::Threshold,
                        format!(
                            "capacity: unknown, {} required [{rule}]",
                            format_size(min.0)
                        ),
                    )
                    .figure(&metric::CAPACITY_BYTES, None, min.0 as f64)
                    .device(&disk.name),
                ),
            }
        }
    }
    out
}

/// Checks the health limits against the disk's read-only health record. A limit on
/// a figure the device does not report fails as unknown, like a link that cannot be verified:
/// a board profile sets health limits only for parts that report them.
pub fn health_reasons(disk: &Disk, rules: &[(usize, &Threshold)]) -> Vec<Reason> {
    let none = crate::health::Health::default();
    let h = disk.health.as_ref().unwrap_or(&none);
    let mut out = Vec::new();
    for (i, t) in rules {
        let rule = rule_name(*i, t);
        // (metric, measured, limit, words for people); a metric better lower has a maximum.
        type Check<'a> = (&'static metric::Metric, Option<f64>, f64, &'a str);
        let mut checks: Vec<Check> = Vec::new();
        if let Some(max) = t.max_life_used_percent {
            checks.push((
                &metric::LIFE_USED_PERCENT,
                h.life_time_used_percent_max.map(f64::from),
                f64::from(max),
                "flash life used",
            ));
        }
        if let Some(max) = t.max_pre_eol {
            checks.push((
                &metric::PRE_EOL,
                h.pre_eol.map(pre_eol_level),
                pre_eol_level(max),
                "pre-EOL state",
            ));
        }
        if let Some(max) = t.max_media_errors {
            checks.push((
                &metric::MEDIA_ERRORS,
                h.media_errors.map(|v| v as f64),
                max as f64,
                "media errors",
            ));
        }
        if let Some(max) = t.max_crc_errors {
            checks.push((
                &metric::UDMA_CRC_ERRORS,
                h.udma_crc_errors.map(|v| v as f64),
                max as f64,
                "interface CRC errors (check the SATA cable)",
            ));
        }
        if let Some(min) = t.min_pcie_gts {
            checks.push((
                &metric::PCIE_GTS,
                h.pcie_gts,
                min,
                "PCIe link speed (a link trained below its speed: reseat the card, check the slot)",
            ));
        }
        if let Some(min) = t.min_pcie_width {
            checks.push((
                &metric::PCIE_WIDTH,
                h.pcie_width.map(f64::from),
                f64::from(min),
                "PCIe link width (lanes missing: reseat the card, check the slot)",
            ));
        }
        if let Some(max) = t.max_over_current {
            checks.push((
                &metric::OVER_CURRENT_COUNT,
                h.over_current_count.map(|v| v as f64),
                max as f64,
                "USB port over-current events (check the port's power and the device)",
            ));
        }
        for (metric, measured, limit, words) in checks {
            let is_max = metric.better == metric::Better::Lower;
            let text = match measured {
                Some(v) if (is_max && v <= limit) || (!is_max && v + 1e-9 >= limit) => continue,
                Some(v) => format!(
                    "health: {words}: {} {} the {} {} [{rule}]",
                    v,
                    if is_max { "exceeds" } else { "is below" },
                    if is_max { "maximum" } else { "minimum" },
                    limit,
                ),
                None => {
                    // The first reason the health readers gave for a field of this figure.
                    let fields: &[&str] = match metric.id {
                        "life_used_percent" => &["life_time", "nvme.smart", "ufs"],
                        "pre_eol" => &["pre_eol", "ufs"],
                        "media_errors" => &["nvme.smart"],
                        "udma_crc_errors" => &["sata.smart", "sata.udma_crc"],
                        "over_current_count" => &["over_current"],
                        _ => &["pcie"],
                    };
                    let why = h
                        .missing
                        .iter()
                        .find(|m| fields.iter().any(|f| m.field.contains(f)))
                        .map(|m| format!(" ({})", m.reason))
                        .unwrap_or_default();
                    format!(
                        "health: {words}: unknown for {}{why}, cannot verify the limit {} \
                         [{rule}]",
                        disk.name, limit
                    )
                }
            };
            out.push(
                Reason::new(ReasonKind::Health, text)
                    .rule(format!("thresholds[{i}]"))
                    .figure(metric, measured, limit)
                    .device(&disk.name),
            );
        }
    }
    out
}

/// PRE_EOL_INFO's own numbers: 1 normal, 2 warning, 3 urgent.
fn pre_eol_level(p: crate::health::PreEol) -> f64 {
    use crate::health::PreEol::*;
    match p {
        Normal => 1.0,
        Warning => 2.0,
        Urgent => 3.0,
    }
}

/// Checks one test's figures against the thresholds for its workload.
pub fn result_reasons(r: &BenchResult, rules: &[(usize, &Threshold)]) -> Vec<Reason> {
    let mut out = Vec::new();
    let w = r.workload.as_str().to_string();
    for (i, t) in rules {
        if t.workload.is_some_and(|tw| tw != r.workload) {
            continue;
        }
        let rule = rule_name(*i, t);
        let at = |text: String| {
            Reason::new(ReasonKind::Threshold, text)
                .rule(format!("thresholds[{i}]"))
                .workload(r.workload)
        };
        // A figure within `marginal_percent` of its limit, on either side, is marginal: a
        // miss that may be the measurement's noise (retested when the rule says so), or a pass
        // with little to spare (a note, never a failure).
        let band = t.marginal_percent.map(f64::from);
        let in_band = |figure: f64, limit: f64| {
            band.is_some_and(|b| (figure - limit).abs() < limit.abs() * b / 100.0)
        };
        // A rate whose fall partway (a write cache that filled) left it lower is judged at its
        // sustained level, never at the burst; a fall with too few windows after it is
        // inconclusive, never a pass.
        let drop = r.precision.as_ref().and_then(|p| p.drop.as_ref());
        let judged = r.judged();
        let (mib_per_s, iops) = (judged.mib_per_s, judged.iops);
        let sustained = if judged.sustained { "sustained " } else { "" };
        let inconclusive = |what: &str, m: &metric::Metric, limit: f64| {
            let d = drop.expect("only after a drop");
            at(format!(
                "{w}: inconclusive: the rate fell from {:.1} to {:.1} MiB/s after {:.1} s and \
                 the runtime ended before that rate was steady, so {what} cannot be judged: \
                 give the test a longer runtime [{rule}]",
                d.burst_mib_per_s, d.sustained_mib_per_s, d.at_s
            ))
            .figure(m, None, limit)
        };
        let unsteady = drop.is_some_and(|d| d.ci95_percent.is_none());
        // A rate or IOPS whose limit lies inside its own 95 % confidence interval is marginal
        // as well: the measurement cannot tell it from its limit, whatever the rule's band.
        let ci = judged.ci95_percent;
        let near_why = |figure: f64, limit: f64, rate: bool| -> Option<String> {
            if in_band(figure, limit) {
                return Some(format!(
                    "within {}% of the limit",
                    t.marginal_percent.unwrap_or(0)
                ));
            }
            ci.filter(|c| rate && (figure - limit).abs() <= figure.abs() * c / 100.0)
                .map(|c| format!("indistinguishable from its limit, +-{c:.1} %"))
        };
        let mut marginal_pass =
            |what: String, m: &metric::Metric, figure: f64, limit: f64, why: String| {
                out.push(
                    Reason::new(
                        ReasonKind::Note,
                        format!("{w}: marginal: {what}, {why} [{rule}]"),
                    )
                    .rule(format!("thresholds[{i}]"))
                    .workload(r.workload)
                    .figure(m, Some(figure), limit)
                    .marginal(),
                );
            };
        let mut fails: Vec<Reason> = Vec::new();
        let mut miss = |reason: Reason, why: Option<String>| {
            fails.push(match why {
                Some(why) => {
                    let text = if why.starts_with("within") {
                        format!("{} (marginal)", reason.text)
                    } else {
                        format!("{} (marginal: {why})", reason.text)
                    };
                    let mut r = reason.marginal();
                    r.text = text;
                    r
                }
                None => reason,
            });
        };
        for (m, limit) in t.figure_limits() {
            // Rates are judged at their judged level (sustained after a drop, else steady);
            // the p99 only when an I/O completed.
            let figure = match m.id {
                id if id == metric::MIB_PER_S.id => mib_per_s,
                id if id == metric::IOPS.id => iops,
                _ if r.all.ios == 0 => continue,
                _ => r.all.latency.p99_ns as f64 / 1e6,
            };
            let bound = m.bound();
            let said = if m.is_rate() { sustained } else { "" };
            let why = near_why(figure, limit, m.is_rate());
            if unsteady && m.is_rate() {
                let what = format!("its {bound} of {limit} {}", m.unit);
                miss(inconclusive(&what, m, limit), None);
            } else if m.misses(figure, limit) {
                let op = if m.better == metric::Better::Higher {
                    "<"
                } else {
                    ">"
                };
                let text = format!(
                    "{w}: {said}{} {op} {bound} {limit} {} [{rule}]",
                    m.show(figure),
                    m.unit
                );
                miss(at(text).figure(m, Some(figure), limit), why);
            } else if let Some(why) = why {
                let what = format!(
                    "{said}{} against a {bound} of {limit} {}",
                    m.show(figure),
                    m.unit
                );
                marginal_pass(what, m, figure, limit, why);
            }
        }
        out.extend(fails);
        if let Some(max) = t.max_stalls {
            if r.all.stalls.over_1s > max {
                out.push(
                    at(format!(
                        "{w}: {} I/O(s) took over 1 s (longest {:.1} s) > maximum {max} [{rule}]",
                        r.all.stalls.over_1s,
                        r.all.stalls.longest_ns as f64 / 1e9
                    ))
                    .figure(
                        &metric::STALLS_OVER_1S,
                        Some(r.all.stalls.over_1s as f64),
                        max as f64,
                    ),
                );
            }
        }
    }
    if let Some(v) = &r.verify {
        if v.mismatched_blocks > 0 {
            out.push(
                Reason::new(
                    ReasonKind::Verify,
                    match &v.capacity {
                        Some(c) => format!(
                            "{w}: {} of {} blocks read back wrong: {}; usable capacity {} {} \
                             (to within {})",
                            v.mismatched_blocks,
                            v.blocks_checked,
                            c.kind.describe(),
                            if c.upper_bound { "at most" } else { "about" },
                            crate::units::human_bytes(c.usable_bytes),
                            crate::units::human_bytes(c.step_bytes)
                        ),
                        None => format!(
                            "{w}: {} of {} blocks read back wrong (first at byte offset {}): the \
                             device loses or misplaces data (fake capacity or failing flash)",
                            v.mismatched_blocks,
                            v.blocks_checked,
                            v.mismatches.first().map(|m| m.offset).unwrap_or(0)
                        ),
                    },
                )
                .workload(r.workload)
                .figure(
                    &metric::MISMATCHED_BLOCKS,
                    Some(v.mismatched_blocks as f64),
                    0.0,
                ),
            );
        }
    }
    out
}

/// The tests that did not run (no writable target) but whose figures the verdict needs: a
/// threshold limits a figure of that test, or every test of the device is `expected` (its
/// rule is `required` and does not ask for reads only). A figure that was not measured never
/// passes; the reason says why the test could not run, so the operator knows what to fix
/// (mount it writable, format it, free space).
pub fn unmeasured_reasons(
    cells: &[Cell],
    rules: &[(usize, &Threshold)],
    expected: bool,
) -> Vec<Reason> {
    let mut out = Vec::new();
    for c in cells.iter().filter(|c| c.status == CellStatus::Skipped) {
        let w = c.workload.as_str();
        let why = c
            .reasons
            .first()
            .map(|r| r.text.strip_prefix(&format!("{w}: ")).unwrap_or(&r.text))
            .unwrap_or("it was skipped");
        let limit = rules.iter().find(|(_, t)| {
            t.workload.map_or(true, |tw| tw == c.workload) && t.limits_a_figure(c.workload)
        });
        let text = match (limit, expected) {
            (Some((i, t)), _) => format!(
                "{w}: {why}; {} sets a limit on it, and a figure not measured never passes",
                rule_name(*i, t)
            ),
            (None, true) => format!(
                "{w}: {why}; the device is required, and a required device passes only when \
                 every test of it ran"
            ),
            (None, false) => continue,
        };
        let mut r = Reason::new(ReasonKind::NoTest, text).workload(c.workload);
        if let Some((i, _)) = limit {
            r = r.rule(format!("thresholds[{i}]"));
        }
        out.push(r);
    }
    out
}

/// Judges a device whose cells ran: its link, SATA and capacity limits, every failed or
/// errored cell's reasons, and never a pass when a test did not run to the end or no test
/// ran at all, or when a test the verdict needs did not run ([`unmeasured_reasons`]). Also
/// records each USB link check as data (`link_checks`). `part`: the device's failure of the
/// approved-parts list, if any (`parts::check`); `expected`: every test of the device must
/// run (a required device that is not read-only).
pub fn judge_device(
    d: &mut DeviceReport,
    rules: &[(usize, &Threshold)],
    part: Option<Reason>,
    expected: bool,
) {
    let mut reasons = device_reasons(&d.disk, rules);
    reasons.extend(unmeasured_reasons(&d.cells, rules, expected));
    reasons.extend(part);
    reasons.extend(speed_change(d));
    reasons.extend(sd_claim_reasons(d, rules));
    reasons.extend(health_reasons(&d.disk, rules));
    // The structured record of each link check, passed or not.
    if let Some(u) = &d.disk.usb {
        let expect: Vec<PortExpectation> = rules
            .iter()
            .filter_map(|(_, t)| t.min_link_mbps)
            .map(|min| PortExpectation {
                port: format!("usb:{}", u.port_path),
                min_speed_mbps: min,
            })
            .collect();
        d.link_checks = check_links(std::slice::from_ref(&d.disk), &expect);
    }
    for cell in &d.cells {
        if matches!(cell.status, CellStatus::Failed | CellStatus::Error) {
            reasons.extend(cell.reasons.iter().cloned());
        }
    }
    let unfinished = d
        .cells
        .iter()
        .filter(|c| matches!(c.status, CellStatus::Pending | CellStatus::Interrupted))
        .count();
    if unfinished > 0 {
        // An incomplete device is never a pass, whatever the tests that ran said.
        reasons.push(Reason::new(
            ReasonKind::Interrupted,
            format!(
                "{unfinished} of {} tests did not run to the end (run interrupted)",
                d.cells.len()
            ),
        ));
    } else if let Some(r) = untested_reason(&d.cells) {
        reasons.push(r);
    }
    for r in &mut reasons {
        r.device.get_or_insert_with(|| d.name.clone());
    }
    d.verdict = Verdict::from_reasons(reasons);
    d.verdict.retests = d.cells.iter().map(|c| c.attempts.len() as u32).sum();
    d.verdict.marginal = d.cells.iter().any(Cell::marginal);
}

/// A USB device that enumerated again at another speed while it was tested (the kernel's
/// `reset`/`new ... USB device` line names the speed): a link that re-negotiated under load,
/// the mark of a marginal cable or connector. The first such line is named.
pub fn speed_change(d: &DeviceReport) -> Option<Reason> {
    let u = d.disk.usb.as_ref()?;
    let was = u.speed_mbps?;
    let (line, now) = d
        .cells
        .iter()
        .flat_map(|c| c.kernel_events.iter())
        .filter_map(|e| {
            let (port, mbps) = crate::events::enumerated_speed(&e.line)?;
            (port == u.port_path && mbps != was).then_some((e.line.as_str(), mbps))
        })
        .next()?;
    Some(
        Reason::new(
            ReasonKind::Link,
            format!(
                "link: port {} changed speed while it was tested: it came up at {} and the kernel \
                 then said \"{line}\" ({}): the link re-negotiated under load, which points at \
                 a marginal cable or connector",
                u.port_path,
                speed_label(was),
                speed_label(now)
            ),
        )
        .figure(&metric::LINK_MBPS, Some(now), was)
        .device(&d.name)
        .port(format!("usb:{}", u.port_path))
        .cause(linkcheck::LinkCause::SpeedChanged.as_str())
        .rule("link speed change"),
    )
}

/// An SD card whose sequential write fell short of what its SD Status claims, where a rule
/// with `sd_speed_claim: true` applies: the best `seq-write` of the device against the highest
/// of its Speed Class, UHS Speed Grade and Video Speed Class (in MB/s, 10^6 bytes).
pub fn sd_claim_reasons(d: &DeviceReport, rules: &[(usize, &Threshold)]) -> Option<Reason> {
    let (i, _) = rules.iter().find(|(_, t)| t.sd_speed_claim)?;
    let claims = d.disk.mmc.as_ref()?.speed_claims?;
    let claim = claims.min_write_mb_per_s();
    if claim == 0 {
        return None;
    }
    let best = d
        .cells
        .iter()
        .filter(|c| c.workload == crate::workload::WorkloadKind::SeqWrite)
        .filter_map(|c| c.result.as_ref().map(|r| r.mib_per_s))
        .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.max(v))))?;
    let limit_mib = f64::from(claim) * 1e6 / f64::from(1u32 << 20);
    if best >= limit_mib {
        return None;
    }
    let mut said = Vec::new();
    if claims.speed_class > 0 {
        said.push(format!("Class {}", claims.speed_class));
    }
    if claims.uhs_speed_grade > 0 {
        said.push(format!("U{}", claims.uhs_speed_grade));
    }
    if claims.video_speed_class > 0 {
        said.push(format!("V{}", claims.video_speed_class));
    }
    Some(
        Reason::new(
            ReasonKind::Threshold,
            format!(
                "seq-write: {:.1} MB/s is below the {claim} MB/s the card claims ({} in its SD \
                 Status): a counterfeit or worn card, or a test file on a full or fragmented \
                 filesystem [thresholds[{i}]]",
                best * f64::from(1u32 << 20) / 1e6,
                said.join(", ")
            ),
        )
        .rule(format!("thresholds[{i}]"))
        .workload(crate::workload::WorkloadKind::SeqWrite)
        .figure(&metric::MIB_PER_S, Some(best), limit_mib)
        .device(&d.name),
    )
}

/// How many retests a cell whose failures are all marginal may get: the most any of its
/// failing rules allows (a rule's `retest`, else the profile's).
pub fn retest_budget(cell: &Cell, cfg: &crate::config::Config) -> u8 {
    cell.reasons
        .iter()
        .filter(|r| r.marginal && r.kind == ReasonKind::Threshold)
        .filter_map(|r| {
            let i: usize = r
                .rule
                .as_deref()?
                .strip_prefix("thresholds[")?
                .strip_suffix(']')?
                .parse()
                .ok()?;
            Some(cfg.thresholds.get(i)?.retest.unwrap_or(cfg.retest))
        })
        .max()
        .unwrap_or(0)
}

/// The unit's verdict: every required device that is missing, every failed device, no
/// device at all, an interrupted run (`interrupted`: `Some` with the signal's name, when one
/// is known).
pub fn judge_unit(
    devices: &[DeviceReport],
    flash: Option<&FlashReport>,
    missing: &[Reason],
    interrupted: Option<Option<String>>,
) -> Verdict {
    let mut reasons: Vec<Reason> = missing.to_vec();
    let flash = flash.map_or(&[][..], |f| &f.devices[..]);
    let failed = devices
        .iter()
        .map(|d| (&d.name, &d.verdict))
        .chain(flash.iter().map(|d| (&d.name, &d.verdict)));
    for (name, verdict) in failed.filter(|(_, v)| !v.pass) {
        reasons.push(
            Reason::new(
                ReasonKind::DeviceFailed,
                format!("{name}: {}", texts(&verdict.reasons).join("; ")),
            )
            .device(name),
        );
    }
    // Raw flash that was scanned or speed-tested counts as tested; its counters alone do not.
    let flash_tested = flash.iter().any(|d| d.scan.is_some() || d.speed.is_some());
    if devices.is_empty() && !flash_tested {
        reasons.push(Reason::new(ReasonKind::NoTest, NO_DEVICE_TESTED));
    }
    if let Some(signal) = interrupted {
        reasons.push(Reason::new(
            ReasonKind::Interrupted,
            format!(
                "the run was interrupted by {} before every test ran: the results are incomplete",
                signal.unwrap_or_else(|| "a signal".into())
            ),
        ));
    }
    Verdict::from_reasons(reasons)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::{DeviceClass, SataLink, UsbHop, UsbLink};
    use crate::engine::{self, EngineRequest};
    use crate::workload::{self, RunOptions, WorkloadParams};

    fn rules(y: &str) -> Vec<Threshold> {
        serde_norway::from_str(y).unwrap()
    }

    fn usb_disk(speed: f64) -> Disk {
        Disk {
            name: "sda".into(),
            class: DeviceClass::Usb,
            size_bytes: Some(8 << 30),
            usb: Some(UsbLink {
                port_path: "1-1".into(),
                speed_mbps: Some(speed),
                min_chain_speed_mbps: Some(speed),
                root_hub: Some(UsbHop {
                    port_path: "usb1".into(),
                    speed_mbps: Some(480.0),
                    ..UsbHop::default()
                }),
                ..UsbLink::default()
            }),
            ..Disk::default()
        }
    }

    /// Every metric and unit a health reason (and the block note) writes is one the report's
    /// JSON Schema allows: a new figure without a schema entry fails here, not on a unit.
    #[test]
    fn health_metrics_and_units_are_in_the_report_schema() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../docs/report.schema.json")).unwrap();
        let allowed = |k: &str| -> Vec<String> {
            schema["definitions"]["Reason"]["properties"][k]["enum"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        let (metrics, units) = (allowed("metric"), allowed("unit"));
        let t = rules(
            "- {select: {class: emmc}, max_life_used_percent: 50, max_pre_eol: warning, \
             max_media_errors: 0, max_crc_errors: 10, min_pcie_gts: 8, min_pcie_width: 4, \
             max_over_current: 0}\n",
        );
        // nothing reported: every limit gives its reason
        let disk = Disk {
            name: "mmcblk0".into(),
            class: DeviceClass::Emmc,
            ..Disk::default()
        };
        let r = health_reasons(&disk, &applicable(&t, &disk, &SystemFacts::default()));
        assert_eq!(r.len(), 7, "{r:?}");
        for x in r
            .iter()
            .chain(std::iter::once(&Reason::new(ReasonKind::Note, "n").figure(
                &metric::BLOCK_BYTES,
                Some(1.0),
                2.0,
            )))
        {
            let (m, u) = (x.metric.clone().unwrap(), x.unit.clone().unwrap());
            assert!(metrics.contains(&m), "metric {m} not in the schema");
            assert!(units.contains(&u), "unit {u} not in the schema");
        }
    }

    #[test]
    fn health_limits_fail_beyond_and_on_unknown_never_within() {
        use crate::health::{Health, PreEol};
        let t = rules(
            "- {select: {class: emmc}, max_life_used_percent: 50, max_pre_eol: warning, \
             max_media_errors: 0, max_crc_errors: 10, min_pcie_gts: 8, min_pcie_width: 4, \
             max_over_current: 0}\n",
        );
        let facts = SystemFacts::default();
        let fine = Health {
            life_time_used_percent_max: Some(50),
            pre_eol: Some(PreEol::Warning),
            media_errors: Some(0),
            udma_crc_errors: Some(10),
            pcie_gts: Some(8.0),
            pcie_width: Some(4),
            over_current_count: Some(0),
            ..Health::default()
        };
        // (a change to a fine record, the metric that must fail, its measured figure)
        type Bad = (fn(&mut Health), &'static str, Option<f64>);
        let cases: &[Bad] = &[
            (|_| {}, "", None),
            (
                |h| h.life_time_used_percent_max = Some(60),
                "life_used_percent",
                Some(60.0),
            ),
            (|h| h.pre_eol = Some(PreEol::Urgent), "pre_eol", Some(3.0)),
            (|h| h.media_errors = Some(2), "media_errors", Some(2.0)),
            (
                |h| h.udma_crc_errors = Some(11),
                "udma_crc_errors",
                Some(11.0),
            ),
            (|h| h.pcie_gts = Some(5.0), "pcie_gts", Some(5.0)),
            (|h| h.pcie_width = Some(2), "pcie_width", Some(2.0)),
            (
                |h| h.over_current_count = Some(1),
                "over_current_count",
                Some(1.0),
            ),
            // a part that does not report its life: unknown is not a pass
            (
                |h| h.life_time_used_percent_max = None,
                "life_used_percent",
                None,
            ),
        ];
        for (change, metric, measured) in cases {
            let mut h = fine.clone();
            change(&mut h);
            let disk = Disk {
                name: "mmcblk0".into(),
                class: DeviceClass::Emmc,
                health: Some(h),
                ..Disk::default()
            };
            let r = health_reasons(&disk, &applicable(&t, &disk, &facts));
            if metric.is_empty() {
                assert!(r.is_empty(), "every figure at its limit passes: {r:?}");
                continue;
            }
            assert_eq!(r.len(), 1, "{metric}: {r:?}");
            assert_eq!(r[0].kind, ReasonKind::Health);
            assert_eq!(r[0].metric.as_deref(), Some(*metric));
            assert_eq!(r[0].measured, *measured, "{metric}");
            assert!(r[0].limit.is_some() && r[0].rule.as_deref() == Some("thresholds[0]"));
            assert!(r[0].text.starts_with("health: "), "{}", r[0].text);
        }
    }

    /// Each reason names the rule it failed once, in its closing brackets.
    #[test]
    fn a_reason_names_its_rule_once() {
        let t = rules("- {select: {class: loop}, min_link_mbps: 480}\n");
        let facts = SystemFacts::default();
        let disk = Disk {
            name: "loop0".into(),
            class: DeviceClass::Loop,
            ..Disk::default()
        };
        let r = device_reasons(&disk, &applicable(&t, &disk, &facts));
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(
            r[0].text,
            "link: loop0 has no USB link, but at least 480M is required [thresholds[0] (class loop)]"
        );
    }

    #[test]
    fn device_limits() {
        let t = rules(
            "- {select: {class: usb}, min_link_mbps: 480, min_capacity: 16G}\n\
             - {select: {class: sata}, min_sata_gbps: 6}\n",
        );
        let facts = SystemFacts::default();
        let good = usb_disk(480.0);
        let r = device_reasons(&good, &applicable(&t, &good, &facts));
        assert_eq!(r.len(), 1, "only capacity fails: {r:?}");
        assert!(
            r[0].text
                .starts_with("capacity: 8G is below the 16G required [thresholds[0]"),
            "{r:?}"
        );

        let slow = usb_disk(12.0);
        let r = device_reasons(&slow, &applicable(&t, &slow, &facts));
        assert!(
            r.iter().any(|x| x.text.contains("port 1-1 linked at 12M")),
            "{r:?}"
        );

        let mut sata = Disk {
            name: "sdb".into(),
            class: DeviceClass::Sata,
            sata: Some(SataLink {
                port: "ata1".into(),
                sata_spd_gbps: Some(3.0),
                ..SataLink::default()
            }),
            ..Disk::default()
        };
        let r = device_reasons(&sata, &applicable(&t, &sata, &facts));
        assert!(
            r[0].text
                .contains("SATA link at 3.0 Gbps, below the 6.0 Gbps"),
            "{r:?}"
        );
        sata.sata.as_mut().unwrap().sata_spd_gbps = None;
        let r = device_reasons(&sata, &applicable(&t, &sata, &facts));
        assert!(
            r[0].text.contains("unknown"),
            "an unknown link is not a pass: {r:?}"
        );
    }

    #[test]
    fn result_limits_on_a_real_result() {
        // A real result from the null engine (no device I/O) over a real file.
        let dir = std::env::temp_dir().join(format!("usbperf-verdict-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut p =
            WorkloadParams::defaults(crate::workload::WorkloadKind::RandRead, dir.join("f"));
        p.engine = EngineRequest::Null;
        p.size_bytes = Some(1 << 20);
        p.cache = crate::workload::CacheMode::Buffered;
        let sel = engine::select(EngineRequest::Null).unwrap();
        let res = workload::run(&p, &sel, &RunOptions::default()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(res.iops > 0.0);

        let t = rules(
            "- {select: {class: usb}, workload: rand-read, min_iops: 1.0e8, min_mib_per_s: 1.0e6}\n\
             - {select: {class: usb}, workload: seq-write, min_iops: 1.0e8}\n\
             - {select: {class: usb}, min_iops: 1, max_stalls: 0, max_p99_latency_ms: 60000}\n",
        );
        let d = usb_disk(480.0);
        let r = result_reasons(&res, &applicable(&t, &d, &SystemFacts::default()));
        assert_eq!(r.len(), 2, "only rule 0 applies and fails, twice: {r:?}");
        assert!(r[0].text.contains("MiB/s < minimum"), "{r:?}");
        assert!(
            r[1].text
                .contains("IOPS < minimum 100000000 IOPS [thresholds[0] (class usb)]"),
            "{r:?}"
        );
    }

    /// A limit inside the figure's own 95 % confidence interval is marginal on either side
    /// (a miss retested, a pass noted), "indistinguishable from its limit"; outside it the
    /// outcome is clear. The rule has no band of its own.
    #[test]
    fn a_limit_inside_the_figures_interval_is_marginal() {
        let mut res = crate::report::station::tests::result(100.0);
        res.precision = Some(crate::stats::Precision {
            drop: None,
            steady_mib_per_s: None,
            window_ms: 100,
            samples_mib_per_s: vec![100.0; 8],
            ci95_percent: Some(3.0),
            trend_percent: Some(0.0),
            steady: true,
        });
        let d = usb_disk(480.0);
        let judge = |res: &BenchResult, min: f64| {
            let t = rules(&format!(
                "- {{select: {{class: usb}}, workload: seq-read, min_mib_per_s: {min}}}\n"
            ));
            result_reasons(res, &applicable(&t, &d, &SystemFacts::default()))
        };
        // 102 is 2 % above the figure: a miss that the measurement cannot tell from a pass.
        let r = judge(&res, 102.0);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].marginal && r[0].kind == ReasonKind::Threshold, "{r:?}");
        assert!(
            r[0].text
                .ends_with("(marginal: indistinguishable from its limit, +-3.0 %)"),
            "{r:?}"
        );
        // 98: a pass with nothing to spare, noted.
        let r = judge(&res, 98.0);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].marginal && r[0].kind == ReasonKind::Note, "{r:?}");
        assert!(
            r[0].text.contains("indistinguishable from its limit"),
            "{r:?}"
        );
        // 110 and 90: outside the interval, a clear fail and a clear pass.
        let r = judge(&res, 110.0);
        assert!(r.len() == 1 && !r[0].marginal, "{r:?}");
        assert!(judge(&res, 90.0).is_empty());
        // The steady rate after the warm-up is what a limit judges, not the whole test's
        // average that a burst after idle lifted.
        res.precision.as_mut().unwrap().steady_mib_per_s = Some(90.0);
        let r = judge(&res, 95.0);
        assert!(
            r.len() == 1 && r[0].text.contains("90.0 MiB/s < minimum 95"),
            "{r:?}"
        );
        assert_eq!(r[0].measured, Some(90.0));
        res.precision.as_mut().unwrap().steady_mib_per_s = None;
        // Without a stated precision, only the rule's band makes a figure marginal.
        res.precision = None;
        let r = judge(&res, 102.0);
        assert!(r.len() == 1 && !r[0].marginal, "{r:?}");
    }

    /// A rate that fell partway (a write cache filling) is judged at its sustained level:
    /// a limit between the burst and the sustained rate fails naming the sustained rate;
    /// a fall too late to measure the sustained rate is inconclusive, a failure.
    #[test]
    fn a_rate_that_fell_is_judged_at_its_sustained_level_or_is_inconclusive() {
        let mut res = crate::report::station::tests::result(27.7);
        let mut precision = crate::stats::Precision {
            steady_mib_per_s: None,
            window_ms: 100,
            samples_mib_per_s: vec![],
            ci95_percent: Some(150.0),
            trend_percent: Some(-200.0),
            steady: false,
            drop: Some(crate::stats::Drop {
                at_s: 0.2,
                burst_mib_per_s: 300.0,
                sustained_mib_per_s: 4.0,
                ci95_percent: Some(1.5),
            }),
        };
        res.precision = Some(precision.clone());
        let d = usb_disk(480.0);
        let judge = |res: &BenchResult, rule: &str| {
            let t = rules(&format!(
                "- {{select: {{class: usb}}, workload: seq-read, {rule}}}\n"
            ));
            result_reasons(res, &applicable(&t, &d, &SystemFacts::default()))
        };
        // The whole run averaged 27.7 MiB/s, which would pass 10; the sustained 4 does not.
        let r = judge(&res, "min_mib_per_s: 10");
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(
            !r[0].marginal && r[0].kind == ReasonKind::Threshold,
            "{r:?}"
        );
        assert!(
            r[0].text.contains("sustained 4.0 MiB/s < minimum 10"),
            "{r:?}"
        );
        assert_eq!(r[0].measured, Some(4.0));
        // IOPS scale with the rate (one I/O size).
        let iops = res.iops * 4.0 / 27.7;
        let r = judge(&res, &format!("min_iops: {}", (iops * 1.5).round()));
        assert!(r.len() == 1 && r[0].text.contains("sustained"), "{r:?}");
        assert!(judge(&res, "min_mib_per_s: 3").is_empty());
        // Too few windows after the fall: inconclusive, never a pass, even for a low limit.
        precision.drop.as_mut().unwrap().ci95_percent = None;
        res.precision = Some(precision);
        for rule in ["min_mib_per_s: 3", "min_iops: 1"] {
            let r = judge(&res, rule);
            assert_eq!(r.len(), 1, "{rule}: {r:?}");
            assert!(
                r[0].kind == ReasonKind::Threshold && !r[0].marginal,
                "{r:?}"
            );
            assert!(r[0].text.contains("inconclusive"), "{r:?}");
            assert!(r[0].text.contains("longer runtime"), "{r:?}");
        }
    }

    /// Every limit on a test's figures is judged by the one rule in its metric's direction
    /// (a minimum for a rate, a maximum for a latency): a miss names the figure, its bound and
    /// unit, and carries the metric as a record; a figure on the right side passes silently.
    #[test]
    fn every_figure_limit_is_judged_in_its_metrics_direction() {
        // 27.7 MiB/s, 42 IOPS, p99 2.5 ms, no stated precision (only the band is marginal).
        let mut res = crate::report::station::tests::result(27.7);
        res.precision = None;
        let d = usb_disk(480.0);
        // The rule, and the miss it gives: the metric, the figure and the words.
        type Miss = (&'static metric::Metric, f64, &'static str);
        let table: &[(&str, Option<Miss>)] = &[
            (
                "min_mib_per_s: 30",
                Some((&metric::MIB_PER_S, 27.7, "27.7 MiB/s < minimum 30 MiB/s")),
            ),
            ("min_mib_per_s: 20", None),
            (
                "min_iops: 50",
                Some((&metric::IOPS, 42.0, "42 IOPS < minimum 50 IOPS")),
            ),
            ("min_iops: 40", None),
            (
                "max_p99_latency_ms: 2",
                Some((
                    &metric::P99_LATENCY_MS,
                    2.5,
                    "p99 latency 2.5 ms > maximum 2 ms",
                )),
            ),
            ("max_p99_latency_ms: 3", None),
        ];
        for (rule, expected) in table {
            let t = rules(&format!(
                "- {{select: {{class: usb}}, workload: seq-read, {rule}}}\n"
            ));
            let r = result_reasons(&res, &applicable(&t, &d, &SystemFacts::default()));
            match expected {
                None => assert!(r.is_empty(), "{rule}: {r:?}"),
                Some((m, measured, text)) => {
                    assert_eq!(r.len(), 1, "{rule}: {r:?}");
                    assert!(r[0].text.contains(text), "{rule}: {}", r[0].text);
                    assert_eq!(r[0].metric.as_deref(), Some(m.id), "{rule}");
                    assert_eq!(r[0].unit.as_deref(), Some(m.unit), "{rule}");
                    assert_eq!(r[0].measured, Some(*measured), "{rule}");
                    assert!(!r[0].marginal, "{rule}");
                }
            }
        }
    }
}
