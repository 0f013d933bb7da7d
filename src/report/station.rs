//! Owns what a test station reads on the unit's console at the end of a run: the one
//! `USBPERF-RESULT` line and the LAVA test signals. Pure functions of the finished report, so
//! the grammar is tested without a device; `cli::run` only prints them.
//!
//! The result line (version `v2`), keys always present and always in this order:
//!
//! ```text
//! USBPERF-RESULT v2 unit=<label> report_id=<id> verdict=PASS|FAIL|INCOMPLETE|ERROR exit=<code> devices=<N> failed=<names> report=<path> marginal=<names> retests=<name:count,...>
//! ```
//!
//! `failed` names every device that failed and every required device that is missing, the
//! latter by its rule (`devices[1]`).
//!
//! `v1` is the same line without the last two keys (config `result_line: v1`): `v2` only
//! appends, so a station that reads keys by name reads both.
//!
//! Values never contain a space: every byte outside printable ASCII (`!`..`~`) and the bytes
//! ` `, `%`, `=` and `,` are written `%XX` (upper-case hex of the UTF-8 byte), so a value is
//! split on `,` before it is decoded. A value that is absent is `-`; a value that really is
//! `-` is written `%2D`.

use std::path::Path;

use super::schema::{Cell, CellStatus, Report};
use crate::config::ResultLine;

/// The first word of the line: what a station greps for.
pub const RESULT_TAG: &str = "USBPERF-RESULT";

/// The version word of the line's grammar; a new key or order bumps it.
pub fn version_word(v: ResultLine) -> &'static str {
    match v {
        ResultLine::V1 => "v1",
        ResultLine::V2 => "v2",
    }
}

/// Encoded names joined by `,`, or `-` for none.
fn name_list(names: impl Iterator<Item = String>) -> String {
    let v: Vec<String> = names.collect();
    if v.is_empty() {
        "-".to_string()
    } else {
        v.join(",")
    }
}

/// Percent-encodes `s` for a result-line value (see the module's grammar).
pub fn encode_value(s: &str) -> String {
    if s.is_empty() {
        return "-".into();
    }
    if s == "-" {
        return "%2D".into();
    }
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if (b'!'..=b'~').contains(&b) && !matches!(b, b'%' | b'=' | b',') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The unit as the line names it: serial, else the first 12 digits of the machine-id, else
/// the hostname, as in the report's file name (`report::unit::file_label`), but encoded
/// rather than rewritten, so it can be compared with the unit's label.
fn unit_label(r: &Report) -> String {
    super::unit::name_of(&r.unit).unwrap_or_else(|| "unit".into())
}

/// The station's word for the run: a report in no file is ERROR whatever the tests said (it
/// is a hole in the production record; `run` exits 4), an interrupted run INCOMPLETE (3).
pub fn verdict_word(exit_code: u8, report_path: Option<&Path>) -> &'static str {
    match (report_path, exit_code) {
        (None, _) => "ERROR",
        (_, 0) => "PASS",
        (_, 1) => "FAIL",
        (_, 3) => "INCOMPLETE",
        _ => "ERROR",
    }
}

/// The `USBPERF-RESULT` line (no newline) for a finished run: `exit_code` is the process's
/// exit status, `report_path` the file holding the report, `None` when it reached none.
pub fn result_line(
    r: &Report,
    exit_code: u8,
    report_path: Option<&Path>,
    version: ResultLine,
) -> String {
    // A required device that is missing failed too: named by its rule (`devices[1]`).
    let missing = r
        .verdict
        .reasons
        .iter()
        .filter(|x| x.kind == super::verdict::ReasonKind::MissingDevice)
        .filter_map(|x| x.rule.as_deref())
        .map(encode_value);
    // Raw flash devices (MTD partitions, UBI devices) count among the devices.
    let flash = r.flash.as_ref().map_or(&[][..], |f| &f.devices[..]);
    let failed = name_list(
        r.devices
            .iter()
            .filter(|d| !d.verdict.pass)
            .map(|d| encode_value(&d.name))
            .chain(
                flash
                    .iter()
                    .filter(|d| !d.verdict.pass)
                    .map(|d| encode_value(&d.name)),
            )
            .chain(missing),
    );
    let report = report_path
        .map(|p| encode_value(&p.to_string_lossy()))
        .unwrap_or_else(|| "-".into());
    let mut line = format!(
        "{RESULT_TAG} {} unit={} report_id={} verdict={} exit={exit_code} \
         devices={} failed={failed} report={report}",
        version_word(version),
        encode_value(&unit_label(r)),
        encode_value(r.report_id.as_deref().unwrap_or("")),
        verdict_word(exit_code, report_path),
        r.devices.len() + flash.len(),
    );
    if version == ResultLine::V2 {
        // A marginal device passed or failed within its band; a retested one was measured
        // again: the station can count first-pass yield without reading the report.
        let marginal = name_list(
            r.devices
                .iter()
                .filter(|d| d.verdict.marginal)
                .map(|d| encode_value(&d.name)),
        );
        let retests = name_list(
            r.devices
                .iter()
                .filter(|d| d.verdict.retests > 0)
                // `:` is encoded in the name, so the entry splits on it once.
                .map(|d| {
                    format!(
                        "{}:{}",
                        encode_value(&d.name).replace(':', "%3A"),
                        d.verdict.retests
                    )
                }),
        );
        line.push_str(&format!(" marginal={marginal} retests={retests}"));
    }
    line
}

/// Names of a device's cells that are unique within it: the workload, then `-2`, `-3` for a
/// workload the matrix runs more than once (two seq-read sizes).
pub fn cell_names(cells: &[Cell]) -> Vec<String> {
    let mut out = Vec::with_capacity(cells.len());
    for (i, c) in cells.iter().enumerate() {
        let w = c.workload.as_str();
        let n = cells[..i]
            .iter()
            .filter(|p| p.workload == c.workload)
            .count();
        out.push(if n == 0 {
            w.to_string()
        } else {
            format!("{w}-{}", n + 1)
        });
    }
    out
}

/// A LAVA test case id: LAVA accepts `[A-Za-z0-9_.-]` only (lava_test_shell's
/// `lava-test-case`), everything else becomes `_`.
pub fn lava_id(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn lava_result(status: CellStatus) -> &'static str {
    match status {
        CellStatus::Passed => "pass",
        CellStatus::Failed | CellStatus::Error => "fail",
        // Not run, or not run to the end: no result of its own; the device verdict fails.
        CellStatus::Skipped | CellStatus::Pending | CellStatus::Interrupted => "skip",
    }
}

fn lava_line(id: &str, result: &str, mib_per_s: Option<f64>) -> String {
    let m = mib_per_s
        .filter(|v| v.is_finite())
        .map(|v| format!(" MEASUREMENT={v:.3} UNITS=MiB/s"))
        .unwrap_or_default();
    format!(
        "<LAVA_SIGNAL_TESTCASE TEST_CASE_ID={} RESULT={result}{m}>",
        lava_id(id)
    )
}

/// The LAVA signals of a finished run, one line each (no newline): every cell
/// (`<device>-<workload>`, with its MiB/s when it has a figure), every device verdict
/// (`<device>-verdict`) and the unit (`usbperf-unit`, a pass only when the run exits 0).
pub fn lava_signals(r: &Report, exit_code: u8) -> Vec<String> {
    let mut out = Vec::new();
    for d in &r.devices {
        for (c, name) in d.cells.iter().zip(cell_names(&d.cells)) {
            out.push(lava_line(
                &format!("{}-{name}", d.name),
                lava_result(c.status),
                c.result.as_ref().map(|res| res.mib_per_s),
            ));
        }
        let v = if d.verdict.pass { "pass" } else { "fail" };
        out.push(lava_line(&format!("{}-verdict", d.name), v, None));
    }
    let unit = if exit_code == 0 && r.verdict.pass {
        "pass"
    } else {
        "fail"
    };
    out.push(lava_line("usbperf-unit", unit, None));
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::discover::{DeviceClass, Disk};
    use crate::report::schema::Placement;
    use crate::report::schema::{DeviceReport, RunStatus};
    use crate::report::verdict::{Reason, ReasonKind, Verdict};
    use crate::workload::{BenchResult, WorkloadKind};
    use std::collections::BTreeMap;

    /// A real result from the null engine (no device I/O) over a small file, with the
    /// figures the tests name.
    pub(crate) fn result(mib_per_s: f64) -> BenchResult {
        use crate::engine::{self, EngineRequest};
        use crate::workload::{self, RunOptions, WorkloadKind, WorkloadParams};
        let dir = std::env::temp_dir().join(format!(
            "usbperf-station-{}-{}",
            std::process::id(),
            crate::report::schema::new_report_id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = WorkloadParams::defaults(WorkloadKind::SeqRead, dir.join("f"));
        p.engine = EngineRequest::Null;
        p.size_bytes = Some(1 << 20);
        p.cache = crate::workload::CacheMode::Buffered;
        let sel = engine::select(EngineRequest::Null).unwrap();
        let mut res = workload::run(&p, &sel, &RunOptions::default()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        res.mib_per_s = mib_per_s;
        res.iops = 42.0;
        res.all.latency.p99_ns = 2_500_000;
        res
    }

    fn cell(workload: WorkloadKind, status: CellStatus, reasons: &[&str]) -> Cell {
        Cell {
            workload,
            status,
            reasons: reasons
                .iter()
                .map(|s| Reason::new(ReasonKind::Threshold, *s))
                .collect(),
            started_at: None,
            wall_seconds: Some(1.5),
            params: None,
            result: None,
            kernel_events: Vec::new(),
            concurrent_with: Vec::new(),
            machine_busy_percent: None,
            attempts: Vec::new(),
        }
    }

    fn device(name: &str, label: &str, class: DeviceClass, cells: Vec<Cell>) -> DeviceReport {
        let mut reasons: Vec<Reason> = Vec::new();
        for c in &cells {
            if matches!(c.status, CellStatus::Failed | CellStatus::Error) {
                reasons.extend(c.reasons.iter().cloned());
            }
        }
        DeviceReport {
            name: name.into(),
            label: Some(label.into()),
            rule: 0,
            disk: Disk {
                name: name.into(),
                class,
                ..Disk::default()
            },
            placement: Placement::RawRead {
                why: "target: read-only".into(),
            },
            link_checks: Vec::new(),
            cells,
            power_cut: None,
            verdict: Verdict::from_reasons(reasons),
        }
    }

    /// A report of two devices as a finished run leaves it: mmcblk0 passes (a workload twice,
    /// the second skipped), sda fails a threshold and errs; the unit is named by its serial.
    pub(crate) fn report() -> Report {
        use WorkloadKind::*;
        let mut passed = cell(SeqRead, CellStatus::Passed, &[]);
        passed.result = Some(result(123.4567));
        let devices = vec![
            device(
                "mmcblk0",
                "on-module eMMC",
                DeviceClass::Emmc,
                vec![
                    passed,
                    cell(SeqRead, CellStatus::Skipped, &["not applicable"]),
                ],
            ),
            device(
                "sda",
                "front USB",
                DeviceClass::Usb,
                vec![
                    cell(
                        RandRead,
                        CellStatus::Failed,
                        &["rand-read: 3 IOPS < minimum 5 IOPS [r]"],
                    ),
                    cell(Verify, CellStatus::Error, &["verify: boom"]),
                ],
            ),
        ];
        Report {
            schema_version: crate::report::schema::SCHEMA_VERSION,
            report_id: Some("0123456789abcdef".into()),
            tool: crate::report::schema::Tool::this(),
            started_at: "2026-11-30T10:23:45Z".parse().unwrap(),
            finished_at: None,
            status: RunStatus::Complete,
            interrupted_by: None,
            exit_code: Some(1),
            unit: crate::report::unit::UnitIdentity {
                serial: Some("SN 42=x".into()),
                ..Default::default()
            },
            config: crate::config::resolve(Vec::new()),
            inventory_backend: "sysfs".into(),
            devices,
            missing_devices: Vec::new(),
            verdict: Verdict::from_reasons(vec![Reason::new(
                ReasonKind::DeviceFailed,
                "sda: failed",
            )]),
            warnings: Vec::new(),
            schedule: None,
            flash: None,
        }
    }

    /// The station's side: split on spaces, check tag and version, decode every value.
    fn parse(line: &str, version: ResultLine) -> (Vec<String>, BTreeMap<String, String>) {
        let mut words = line.split(' ');
        assert_eq!(words.next(), Some(RESULT_TAG));
        assert_eq!(words.next(), Some(version_word(version)));
        let mut keys = Vec::new();
        let mut map = BTreeMap::new();
        for w in words {
            let (k, v) = w.split_once('=').expect("key=value");
            assert!(!v.contains('='), "{w}");
            keys.push(k.to_string());
            map.insert(k.to_string(), v.to_string());
        }
        (keys, map)
    }

    fn decode(v: &str) -> String {
        if v == "-" {
            return String::new();
        }
        let b = v.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%' {
                out.push(u8::from_str_radix(&v[i + 1..i + 3], 16).unwrap());
                i += 3;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn values_are_percent_encoded() {
        for (raw, want) in [
            ("sda", "sda"),
            ("", "-"),
            ("-", "%2D"),
            ("a-b", "a-b"),
            ("SN 42", "SN%2042"),
            ("a=b", "a%3Db"),
            ("50%", "50%25"),
            ("a,b", "a%2Cb"),
            ("tab\there", "tab%09here"),
            ("nl\n", "nl%0A"),
            ("del\x7f", "del%7F"),
            ("µ", "%C2%B5"),
            (
                "/var/lib/usbperf/reports/x.yaml",
                "/var/lib/usbperf/reports/x.yaml",
            ),
        ] {
            assert_eq!(encode_value(raw), want, "{raw:?}");
            assert_eq!(decode(want), raw, "{want}");
        }
    }

    #[test]
    fn verdict_words_follow_the_exit_code_and_the_report_place() {
        let p = Some(Path::new("/r.yaml"));
        for (exit, path, want) in [
            (0, p, "PASS"),
            (1, p, "FAIL"),
            (3, p, "INCOMPLETE"),
            (4, p, "ERROR"),
            // A report in no file is an error even when every test passed.
            (0, None, "ERROR"),
            (3, None, "ERROR"),
            (4, None, "ERROR"),
        ] {
            assert_eq!(verdict_word(exit, path), want, "{exit} {path:?}");
        }
    }

    #[test]
    fn the_result_line_round_trips() {
        let r = report();
        let path = Path::new("/var/lib/usbperf/my reports/r.yaml");
        for (exit, place, verdict, report_value) in [
            (1, Some(path), "FAIL", "/var/lib/usbperf/my reports/r.yaml"),
            (
                3,
                Some(path),
                "INCOMPLETE",
                "/var/lib/usbperf/my reports/r.yaml",
            ),
            (4, None, "ERROR", ""),
        ] {
            for version in [ResultLine::V1, ResultLine::V2] {
                let line = result_line(&r, exit, place, version);
                assert!(!line.contains('\n'), "{line}");
                let (keys, map) = parse(&line, version);
                let mut want = vec![
                    "unit",
                    "report_id",
                    "verdict",
                    "exit",
                    "devices",
                    "failed",
                    "report",
                ];
                if version == ResultLine::V2 {
                    want.extend(["marginal", "retests"]);
                    assert_eq!(map["marginal"], "-", "{line}");
                    assert_eq!(map["retests"], "-", "{line}");
                }
                assert_eq!(keys, want, "{line}");
                assert_eq!(decode(&map["unit"]), "SN 42=x");
                assert_eq!(decode(&map["report_id"]), "0123456789abcdef");
                assert_eq!(map["verdict"], verdict);
                assert_eq!(map["exit"], exit.to_string());
                assert_eq!(map["devices"], "2");
                let failed: Vec<String> = map["failed"].split(',').map(decode).collect();
                assert_eq!(failed, ["sda"]);
                assert_eq!(decode(&map["report"]), report_value);
            }
        }
    }

    #[test]
    fn v2_names_marginal_and_retested_devices() {
        let mut r = report();
        r.devices[0].verdict.marginal = true;
        r.devices[0].verdict.retests = 2;
        r.devices[1].name = "usb:1 a".into();
        r.devices[1].verdict.retests = 1;
        let line = result_line(&r, 1, Some(Path::new("/r.yaml")), ResultLine::V2);
        let (_, map) = parse(&line, ResultLine::V2);
        let marginal: Vec<String> = map["marginal"].split(',').map(decode).collect();
        assert_eq!(marginal, ["mmcblk0"]);
        let retests: Vec<(String, u32)> = map["retests"]
            .split(',')
            .map(|e| {
                let (name, n) = e.split_once(':').expect("name:count");
                (decode(name), n.parse().unwrap())
            })
            .collect();
        assert_eq!(
            retests,
            [("mmcblk0".to_string(), 2), ("usb:1 a".to_string(), 1)]
        );
        // v1 is the same line without the last two keys.
        let v1 = result_line(&r, 1, Some(Path::new("/r.yaml")), ResultLine::V1);
        let v2_head = line.replacen(" v2 ", " v1 ", 1);
        assert!(v2_head.starts_with(&v1), "{v1}\n{line}");
        assert!(!v1.contains("marginal="), "{v1}");
    }

    #[test]
    fn a_missing_required_device_is_named_among_the_failed() {
        use crate::report::verdict::{Reason, ReasonKind};
        let mut r = report();
        r.devices.retain(|d| !d.verdict.pass);
        r.verdict.reasons.push(
            Reason::new(
                ReasonKind::MissingDevice,
                "devices[1] \"stick\": required, not found",
            )
            .rule("devices[1]"),
        );
        let line = result_line(&r, 1, Some(Path::new("/r.yaml")), ResultLine::V2);
        let (_, map) = parse(&line, ResultLine::V2);
        let failed: Vec<String> = map["failed"].split(',').map(decode).collect();
        let mut want: Vec<String> = r.devices.iter().map(|d| d.name.clone()).collect();
        want.push("devices[1]".into());
        assert_eq!(failed, want, "{line}");
    }

    #[test]
    fn a_run_without_devices_says_so_in_the_line() {
        let mut r = report();
        r.devices.clear();
        r.report_id = None;
        r.unit.serial = None;
        r.unit.hostname = Some("board".into());
        let line = result_line(&r, 1, Some(Path::new("/r.yaml")), ResultLine::V2);
        assert_eq!(
            line,
            "USBPERF-RESULT v2 unit=board report_id=- verdict=FAIL exit=1 devices=0 failed=- \
             report=/r.yaml marginal=- retests=-"
        );
    }

    #[test]
    fn lava_ids_keep_only_lavas_characters() {
        for (raw, want) in [
            ("sda-seq-read", "sda-seq-read"),
            ("mmcblk0.p1_x", "mmcblk0.p1_x"),
            ("a b/c:d", "a_b_c_d"),
            ("µ", "_"),
        ] {
            assert_eq!(lava_id(raw), want);
        }
    }

    #[test]
    fn lava_signals_cover_every_cell_device_and_the_unit() {
        let r = report();
        assert_eq!(
            lava_signals(&r, 1),
            [
                "<LAVA_SIGNAL_TESTCASE TEST_CASE_ID=mmcblk0-seq-read RESULT=pass \
                 MEASUREMENT=123.457 UNITS=MiB/s>",
                "<LAVA_SIGNAL_TESTCASE TEST_CASE_ID=mmcblk0-seq-read-2 RESULT=skip>",
                "<LAVA_SIGNAL_TESTCASE TEST_CASE_ID=mmcblk0-verdict RESULT=pass>",
                "<LAVA_SIGNAL_TESTCASE TEST_CASE_ID=sda-rand-read RESULT=fail>",
                "<LAVA_SIGNAL_TESTCASE TEST_CASE_ID=sda-verify RESULT=fail>",
                "<LAVA_SIGNAL_TESTCASE TEST_CASE_ID=sda-verdict RESULT=fail>",
                "<LAVA_SIGNAL_TESTCASE TEST_CASE_ID=usbperf-unit RESULT=fail>",
            ]
        );
    }
}
