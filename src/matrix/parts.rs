//! Owns the approved-parts check: the identity of each tested disk (eMMC/SD CID fields, NVMe,
//! SATA and SCSI vendor and model, USB ids) against the `parts:` list of its class, so a board
//! that left the line with a flash part not on its bill of materials, or a counterfeit card
//! whose CID names no known maker, fails with what was found and what was allowed.

use crate::config::{firmware_range, id_number, PartId, PartRule};
use crate::discover::Disk;
use crate::report::verdict::{Reason, ReasonKind};

/// The disk's identity fields as `parts:` names them, those it has.
pub fn identity(disk: &Disk) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut add = |k: &'static str, v: Option<&str>| {
        if let Some(v) = v.map(str::trim).filter(|v| !v.is_empty()) {
            out.push((k, v.to_string()));
        }
    };
    match &disk.mmc {
        // An MMC disk's model is its CID name again: the CID says it all.
        Some(m) => {
            add("manfid", m.manfid.as_deref());
            add("oemid", m.oemid.as_deref());
            add("name", m.name.as_deref());
            add("prv", m.prv.as_deref());
        }
        None => {
            add("vendor", disk.vendor.as_deref());
            add("model", disk.model.as_deref());
        }
    }
    if let Some(u) = &disk.usb {
        if let (Some(v), Some(p)) = (&u.vendor_id, &u.product_id) {
            add("vid_pid", Some(&format!("{v}:{p}")));
        }
    }
    add("firmware", disk.firmware.as_deref());
    out
}

fn same(field: &str, want: &str, got: &str) -> bool {
    let text = || want.trim().eq_ignore_ascii_case(got.trim());
    match field {
        "manfid" | "oemid" | "prv" => match (id_number(want), id_number(got)) {
            (Some(a), Some(b)) => a == b,
            _ => text(),
        },
        // A range holds numbered revisions only (the config refuses other ends); a revision
        // that is no number is outside every range.
        "firmware" => match firmware_range(want) {
            Some((lo, hi)) => id_number(got)
                .is_some_and(|v| lo.map_or(true, |lo| v >= lo) && hi.map_or(true, |hi| v <= hi)),
            None => match (id_number(want), id_number(got)) {
                (Some(a), Some(b)) => a == b,
                _ => text(),
            },
        },
        _ => text(),
    }
}

/// The fields an allowed entry names, as (field, value).
fn fields(p: &PartId) -> Vec<(&'static str, &str)> {
    [
        ("manfid", p.manfid.as_deref()),
        ("oemid", p.oemid.as_deref()),
        ("name", p.name.as_deref()),
        ("vendor", p.vendor.as_deref()),
        ("model", p.model.as_deref()),
        ("vid_pid", p.vid_pid.as_deref()),
        ("prv", p.prv.as_deref()),
        ("firmware", p.firmware.as_deref()),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k, v)))
    .collect()
}

fn describe(f: &[(&str, &str)]) -> String {
    f.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether the disk is the part `p` names: every field `p` gives matches (an entry that gives
/// none matches nothing).
pub fn matches(p: &PartId, id: &[(&'static str, String)]) -> bool {
    let f = fields(p);
    !f.is_empty()
        && f.iter().all(|(k, want)| {
            id.iter()
                .any(|(field, got)| field == k && same(k, want, got))
        })
}

/// The reason a disk fails the parts list, if it does: the rules of its class (and of this
/// board revision, where a rule names one) apply; the disk must match one allowed entry of
/// each.
pub fn check(disk: &Disk, rules: &[PartRule], board_revision: Option<&str>) -> Option<Reason> {
    let id = identity(disk);
    for (i, r) in rules.iter().enumerate() {
        if r.class != disk.class {
            continue;
        }
        if let Some(rev) = &r.board_revision {
            if board_revision.map(str::trim) != Some(rev.trim()) {
                continue;
            }
        }
        if r.allowed.iter().any(|p| matches(p, &id)) {
            continue;
        }
        let found = if id.is_empty() {
            "a part of unknown identity (no CID, vendor or model could be read)".to_string()
        } else {
            let f: Vec<(&str, &str)> = id.iter().map(|(k, v)| (*k, v.as_str())).collect();
            describe(&f)
        };
        let allowed: Vec<String> = r.allowed.iter().map(|p| describe(&fields(p))).collect();
        let rev = r
            .board_revision
            .as_deref()
            .map(|v| format!(" on board revision {v}"))
            .unwrap_or_default();
        return Some(
            Reason::new(
                ReasonKind::Part,
                format!(
                    "part: {} is {found}, not an approved {} part{rev} (allowed: {}); check the \
                     board's bill of materials, or add the part to the profile's parts list",
                    disk.name,
                    disk.class.as_str(),
                    if allowed.is_empty() {
                        "none".into()
                    } else {
                        allowed.join("; ")
                    }
                ),
            )
            .rule(format!("parts[{i}]"))
            .device(&disk.name),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceClass;
    use crate::discover::model::MmcInfo;

    fn emmc(manfid: &str, name: &str) -> Disk {
        Disk {
            name: "mmcblk0".into(),
            class: DeviceClass::Emmc,
            mmc: Some(MmcInfo {
                card: "mmc0:0001".into(),
                manfid: Some(manfid.into()),
                oemid: Some("0x0100".into()),
                name: Some(name.into()),
                ..MmcInfo::default()
            }),
            ..Disk::default()
        }
    }

    fn rule(yaml: &str) -> PartRule {
        serde_norway::from_str(yaml).unwrap()
    }

    #[test]
    fn parts_are_matched_by_every_field_an_entry_gives() {
        let r = rule("{class: emmc, allowed: [{manfid: '0x15', name: 8GTF4R}, {manfid: '0x45'}]}");
        let rows = [
            (emmc("0x000015", "8GTF4R"), true, "the listed part"),
            (
                emmc("0x000015", "8gtf4r "),
                true,
                "names compare without case or blanks",
            ),
            (
                emmc("0x000045", "anything"),
                true,
                "an entry naming only the maker",
            ),
            (
                emmc("0x000015", "4FTE4R"),
                false,
                "the right maker, another part",
            ),
            (
                emmc("0x000000", "SAMSUNG"),
                false,
                "a CID with maker 0: a counterfeit",
            ),
        ];
        for (d, pass, what) in rows {
            let got = check(&d, std::slice::from_ref(&r), None);
            assert_eq!(got.is_none(), pass, "{what}: {got:?}");
            if let Some(reason) = got {
                assert_eq!(reason.kind, ReasonKind::Part);
                assert_eq!(reason.rule.as_deref(), Some("parts[0]"));
                assert!(reason
                    .text
                    .contains("allowed: manfid 0x15 name 8GTF4R; manfid 0x45"));
            }
        }
    }

    #[test]
    fn a_rule_applies_to_its_class_and_board_revision_only() {
        let r = rule("{class: emmc, board_revision: B, allowed: [{manfid: '0x15'}]}");
        let d = emmc("0x000045", "X");
        assert!(check(&d, std::slice::from_ref(&r), Some("A")).is_none());
        assert!(check(&d, std::slice::from_ref(&r), None).is_none());
        assert!(check(&d, std::slice::from_ref(&r), Some("B")).is_some());
        let sd = rule("{class: sd, allowed: [{manfid: '0x03'}]}");
        assert!(check(&d, std::slice::from_ref(&sd), None).is_none());
        // An identity that cannot be read fails where a list is set.
        let mut blank = emmc("", "");
        blank.mmc.as_mut().unwrap().oemid = None;
        let r = rule("{class: emmc, allowed: [{manfid: '0x15'}]}");
        let why = check(&blank, std::slice::from_ref(&r), None).unwrap();
        assert!(why.text.contains("unknown identity"), "{}", why.text);
    }

    #[test]
    fn firmware_is_one_revision_or_a_numbered_range() {
        let with_fw = |fw: &str| Disk {
            firmware: Some(fw.into()),
            ..emmc("0x000015", "8GTF4R")
        };
        let rows = [
            ("0x0100..0x01ff", "0x0100", true, "the lower end is inside"),
            ("0x0100..0x01ff", "0x1ff", true, "the upper end is inside"),
            ("0x0100..0x01ff", "0x0200", false, "past the upper end"),
            ("0x0100..0x01ff", "0x00ff", false, "below the lower end"),
            ("0x0200..", "0x0300000000000000", true, "an open upper end"),
            ("..7", "7", true, "an open lower end"),
            ("..7", "8", false, "past an open lower end's upper end"),
            (
                "0x0100..0x01ff",
                "V1.2",
                false,
                "a revision that is no number",
            ),
            ("10.0.2", "10.0.2", true, "one revision, as text"),
            ("10.0.2", "10.0.3", false, "another revision"),
            (
                "0x300",
                "0x0300",
                true,
                "one numbered revision, as a number",
            ),
        ];
        for (spec, fw, pass, what) in rows {
            let r = rule(&format!(
                "{{class: emmc, allowed: [{{manfid: '0x15', firmware: '{spec}'}}]}}"
            ));
            let got = check(&with_fw(fw), std::slice::from_ref(&r), None);
            assert_eq!(got.is_none(), pass, "{what} ({spec} / {fw}): {got:?}");
            if let Some(why) = got {
                assert!(why.text.contains(&format!("firmware {fw}")), "{}", why.text);
                assert!(
                    why.text.contains(&format!("firmware {spec}")),
                    "{}",
                    why.text
                );
            }
        }
        // A part that says no firmware at all is outside a list that names one.
        let r = rule("{class: emmc, allowed: [{firmware: '0x1..0x2'}]}");
        assert!(check(&emmc("0x15", "A"), std::slice::from_ref(&r), None).is_some());
    }

    #[test]
    fn a_firmware_range_that_cannot_hold_is_a_config_error() {
        for (spec, words) in [
            ("0x20..0x10", "runs backwards"),
            ("..", "names no revision"),
            ("1.2..1.9", "its ends must be numbers"),
            ("", "firmware is empty"),
        ] {
            let e = serde_norway::from_str::<PartRule>(&format!(
                "{{class: emmc, allowed: [{{firmware: '{spec}'}}]}}"
            ))
            .unwrap_err();
            assert!(e.to_string().contains(words), "{spec}: {e}");
        }
    }

    #[test]
    fn an_entry_that_names_nothing_matches_nothing() {
        assert!(!matches(&PartId::default(), &identity(&emmc("0x15", "A"))));
    }
}
