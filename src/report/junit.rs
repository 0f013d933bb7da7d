//! Owns the JUnit XML export of a report (`run --junit FILE`), the format CI servers and test
//! stations (Jenkins, GitLab, LAVA's junit parsers) show as pass/fail per test. Pure: a
//! report in, the document out; written by hand with full escaping, as the unit's binary
//! takes no XML crate (every crate is listed in the Yocto recipe).
//!
//! The shape: `<testsuites name="usbperf-matrix">` holds one `<testsuite>` per device
//! (`sda (front USB)`), with one `<testcase>` per cell (classname `usbperf.<class>`, name the
//! workload), one per USB link check (`link usb:1-1`) and one `verdict` carrying the device
//! verdict's reasons; then a `unit` suite: `devices` (fails when no device was tested),
//! `required devices` (fails when one is missing) and `run` (an error when interrupted).

use std::fmt::Write;

use super::schema::{CellStatus, Report, RunStatus};
use super::station::cell_names;
use super::verdict::{texts, Reason};

/// How one test case ended.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Pass,
    /// A check failed (threshold, kernel event, verify mismatch, link).
    Failure(Vec<String>),
    /// The test could not run or finish (I/O error, device vanished, interrupted run).
    Error(Vec<String>),
    Skipped(String),
}

struct Case {
    classname: String,
    name: String,
    time_seconds: f64,
    outcome: Outcome,
    /// Figures and notes, for people reading the CI page.
    system_out: Vec<String>,
}

struct Suite {
    name: String,
    cases: Vec<Case>,
}

/// Escapes text for XML content or a double-quoted attribute. Characters XML 1.0 cannot hold
/// (controls other than tab, newline and carriage return) become U+FFFD; in attributes tab,
/// newline and carriage return are written as references, since a parser would otherwise
/// normalise them to spaces (XML 1.0 §3.3.3).
pub fn escape(s: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\r' => out.push_str("&#13;"),
            '\t' | '\n' if attribute => {
                let _ = write!(out, "&#{};", c as u32);
            }
            '\t' | '\n' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

fn figures(res: &crate::workload::BenchResult) -> String {
    format!(
        "mib_per_s={:.3} iops={:.1} p99_ms={:.3}",
        res.mib_per_s,
        res.iops,
        res.all.latency.p99_ns as f64 / 1e6
    )
}

/// The sentences of `reasons`, or `word` when there are none.
fn or_default(reasons: &[Reason], word: &str) -> Vec<String> {
    if reasons.is_empty() {
        vec![word.to_string()]
    } else {
        texts(reasons)
    }
}

fn suites(r: &Report) -> Vec<Suite> {
    let interrupted = r.status == RunStatus::Interrupted;
    let mut out = Vec::new();
    for d in &r.devices {
        let classname = format!("usbperf.{}", d.disk.class);
        let mut cases = Vec::new();
        for (c, name) in d.cells.iter().zip(cell_names(&d.cells)) {
            let outcome = match c.status {
                CellStatus::Passed => Outcome::Pass,
                CellStatus::Failed => Outcome::Failure(or_default(&c.reasons, "failed")),
                CellStatus::Error => Outcome::Error(or_default(&c.reasons, "error")),
                CellStatus::Skipped => {
                    Outcome::Skipped(or_default(&c.reasons, "skipped").join("; "))
                }
                CellStatus::Pending if interrupted => {
                    Outcome::Skipped("not run: interrupted".into())
                }
                CellStatus::Pending => Outcome::Skipped("not run".into()),
                // Stopped by the signal: its figures cover only the part that ran; the
                // device's verdict case fails for it.
                CellStatus::Interrupted => {
                    Outcome::Skipped("interrupted: the test was stopped before its end".into())
                }
            };
            let mut system_out: Vec<String> = c.result.iter().map(figures).collect();
            if matches!(outcome, Outcome::Pass) {
                // Notes of a passed cell (a size clamped to the device) are no failure.
                system_out.extend(texts(&c.reasons));
            }
            // A retested cell says so, with what each earlier attempt measured.
            for (n, a) in c.attempts.iter().enumerate() {
                system_out.push(format!(
                    "attempt {} of {}: {}{}",
                    n + 1,
                    c.attempts.len() + 1,
                    a.status.as_str(),
                    a.result
                        .as_ref()
                        .map(|r| format!(" {}", figures(r)))
                        .unwrap_or_default()
                ));
            }
            cases.push(Case {
                classname: classname.clone(),
                name,
                time_seconds: c.wall_seconds.unwrap_or(0.0),
                outcome,
                system_out,
            });
        }
        for l in &d.link_checks {
            let mut seen = Vec::new();
            if let Some(m) = l.measured_mbps {
                seen.push(format!("measured_mbps={m}"));
            }
            if let Some(m) = l.min_chain_speed_mbps {
                seen.push(format!("min_chain_speed_mbps={m}"));
            }
            seen.push(format!("expected_mbps={}", l.expected_mbps));
            cases.push(Case {
                classname: classname.clone(),
                name: format!("link {}", l.port),
                time_seconds: 0.0,
                outcome: if l.pass {
                    Outcome::Pass
                } else {
                    Outcome::Failure(vec![if l.cause.is_empty() {
                        "link".to_string()
                    } else {
                        l.cause.clone()
                    }])
                },
                system_out: vec![seen.join(" ")],
            });
        }
        cases.push(Case {
            classname: classname.clone(),
            name: "verdict".into(),
            time_seconds: 0.0,
            outcome: if d.verdict.pass {
                Outcome::Pass
            } else {
                let mut why = or_default(&d.verdict.reasons, "failed");
                if d.verdict.retests > 0 {
                    why.insert(0, d.verdict.words());
                }
                Outcome::Failure(why)
            },
            // `pass (marginal)`, `pass after 1 retest`: what the verdict rests on.
            system_out: if d.verdict.retests > 0 || d.verdict.marginal {
                vec![d.verdict.words()]
            } else {
                Vec::new()
            },
        });
        out.push(Suite {
            name: match &d.label {
                Some(l) => format!("{} ({l})", d.name),
                None => d.name.clone(),
            },
            cases,
        });
    }

    let unit_case = |name: &str, outcome: Outcome, system_out: Vec<String>| Case {
        classname: "usbperf.unit".into(),
        name: name.into(),
        time_seconds: 0.0,
        outcome,
        system_out,
    };
    let mut unit = vec![if r.devices.is_empty() {
        // Nothing tested is never a pass.
        unit_case(
            "devices",
            Outcome::Failure(or_default(&r.verdict.reasons, "no device was tested")),
            Vec::new(),
        )
    } else {
        unit_case(
            "devices",
            Outcome::Pass,
            vec![format!("{} device(s) tested", r.devices.len())],
        )
    }];
    unit.push(if r.missing_devices.is_empty() {
        unit_case("required devices", Outcome::Pass, Vec::new())
    } else {
        unit_case(
            "required devices",
            Outcome::Failure(r.missing_devices.clone()),
            Vec::new(),
        )
    });
    unit.push(if interrupted {
        unit_case(
            "run",
            Outcome::Error(vec![format!(
                "the run was interrupted by {}: the results are incomplete",
                r.interrupted_by.as_deref().unwrap_or("a signal")
            )]),
            Vec::new(),
        )
    } else {
        unit_case("run", Outcome::Pass, Vec::new())
    });
    out.push(Suite {
        name: "unit".into(),
        cases: unit,
    });
    out
}

#[derive(Default)]
struct Counts {
    tests: usize,
    failures: usize,
    errors: usize,
    skipped: usize,
    time_seconds: f64,
}

impl Counts {
    fn of(cases: &[Case]) -> Counts {
        let mut n = Counts::default();
        for c in cases {
            n.tests += 1;
            n.time_seconds += c.time_seconds;
            match c.outcome {
                Outcome::Pass => {}
                Outcome::Failure(_) => n.failures += 1,
                Outcome::Error(_) => n.errors += 1,
                Outcome::Skipped(_) => n.skipped += 1,
            }
        }
        n
    }
    fn attrs(&self) -> String {
        format!(
            "tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3}\"",
            self.tests, self.failures, self.errors, self.skipped, self.time_seconds
        )
    }
}

/// The JUnit XML document of a report.
pub fn render(r: &Report) -> String {
    let suites = suites(r);
    let all: Vec<&Case> = suites.iter().flat_map(|s| s.cases.iter()).collect();
    let mut total = Counts::default();
    for s in &suites {
        let n = Counts::of(&s.cases);
        total.tests += n.tests;
        total.failures += n.failures;
        total.errors += n.errors;
        total.skipped += n.skipped;
        total.time_seconds += n.time_seconds;
    }
    debug_assert_eq!(total.tests, all.len());
    let a = |s: &str| escape(s, true);
    let t = |s: &str| escape(s, false);
    let hostname = r.unit.hostname.as_deref().unwrap_or("unit");
    let timestamp = r.started_at.format("%Y-%m-%dT%H:%M:%S").to_string();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(x, "<testsuites name=\"usbperf-matrix\" {}>", total.attrs());
    for (i, s) in suites.iter().enumerate() {
        let _ = writeln!(
            x,
            "  <testsuite name=\"{}\" id=\"{i}\" {} timestamp=\"{timestamp}\" hostname=\"{}\">",
            a(&s.name),
            Counts::of(&s.cases).attrs(),
            a(hostname)
        );
        x.push_str("    <properties>\n");
        for (k, v) in [
            ("report_id", r.report_id.as_deref().unwrap_or("")),
            ("tool_version", r.tool.version.as_str()),
        ] {
            let _ = writeln!(x, "      <property name=\"{k}\" value=\"{}\"/>", a(v));
        }
        x.push_str("    </properties>\n");
        for c in &s.cases {
            let _ = write!(
                x,
                "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\"",
                a(&c.classname),
                a(&c.name),
                c.time_seconds
            );
            if c.outcome == Outcome::Pass && c.system_out.is_empty() {
                x.push_str("/>\n");
                continue;
            }
            x.push_str(">\n");
            match &c.outcome {
                Outcome::Pass => {}
                Outcome::Failure(reasons) | Outcome::Error(reasons) => {
                    let tag = if matches!(c.outcome, Outcome::Failure(_)) {
                        "failure"
                    } else {
                        "error"
                    };
                    let _ = writeln!(
                        x,
                        "      <{tag} message=\"{}\">{}</{tag}>",
                        a(&reasons.join("; ")),
                        t(&reasons.join("\n"))
                    );
                }
                Outcome::Skipped(why) => {
                    let _ = writeln!(x, "      <skipped message=\"{}\"/>", a(why));
                }
            }
            if !c.system_out.is_empty() {
                let _ = writeln!(
                    x,
                    "      <system-out>{}</system-out>",
                    t(&c.system_out.join("\n"))
                );
            }
            x.push_str("    </testcase>\n");
        }
        x.push_str("  </testsuite>\n");
    }
    x.push_str("</testsuites>\n");
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::station::tests::report;

    #[test]
    fn escaping_of_text_and_attributes() {
        for (raw, text, attr) in [
            ("plain", "plain", "plain"),
            ("a & b", "a &amp; b", "a &amp; b"),
            ("<x>", "&lt;x&gt;", "&lt;x&gt;"),
            (
                "\"q\" 'a'",
                "&quot;q&quot; &apos;a&apos;",
                "&quot;q&quot; &apos;a&apos;",
            ),
            ("l1\nl2\tt", "l1\nl2\tt", "l1&#10;l2&#9;t"),
            ("cr\r", "cr&#13;", "cr&#13;"),
            (
                "nul\0bell\x07esc\x1b",
                "nul\u{FFFD}bell\u{FFFD}esc\u{FFFD}",
                "nul\u{FFFD}bell\u{FFFD}esc\u{FFFD}",
            ),
            ("\u{FFFF}µ", "\u{FFFD}µ", "\u{FFFD}µ"),
        ] {
            assert_eq!(escape(raw, false), text, "{raw:?}");
            assert_eq!(escape(raw, true), attr, "{raw:?}");
        }
    }

    #[test]
    fn one_suite_per_device_and_counts_that_add_up() {
        let x = render(&report());
        for want in [
            "<testsuites name=\"usbperf-matrix\" tests=\"9\" failures=\"2\" errors=\"1\" \
             skipped=\"1\" time=\"6.000\">",
            "<testsuite name=\"mmcblk0 (on-module eMMC)\" id=\"0\" tests=\"3\" failures=\"0\" \
             errors=\"0\" skipped=\"1\" time=\"3.000\"",
            "<testsuite name=\"sda (front USB)\" id=\"1\" tests=\"3\" failures=\"2\" errors=\"1\" \
             skipped=\"0\" time=\"3.000\"",
            "<testsuite name=\"unit\" id=\"2\" tests=\"3\" failures=\"0\" errors=\"0\"",
            "<testcase classname=\"usbperf.emmc\" name=\"seq-read\" time=\"1.500\">",
            "<system-out>mib_per_s=123.457 iops=42.0 p99_ms=2.500</system-out>",
            "<testcase classname=\"usbperf.emmc\" name=\"seq-read-2\" time=\"1.500\">\n      \
             <skipped message=\"not applicable\"/>",
            "<failure message=\"rand-read: 3 IOPS &lt; minimum 5 IOPS [r]\">",
            "<error message=\"verify: boom\">verify: boom</error>",
            "<testcase classname=\"usbperf.usb\" name=\"verdict\" time=\"0.000\">\n      \
             <failure message=\"rand-read: 3 IOPS &lt; minimum 5 IOPS [r]; verify: boom\">",
            "<testcase classname=\"usbperf.emmc\" name=\"verdict\" time=\"0.000\"/>",
            "<property name=\"report_id\" value=\"0123456789abcdef\"/>",
        ] {
            assert!(x.contains(want), "missing {want:?} in\n{x}");
        }
    }

    #[test]
    fn nothing_tested_missing_devices_and_interruptions_fail_the_unit_suite() {
        let mut r = report();
        r.devices.clear();
        r.missing_devices = vec!["devices[0] \"rear\": required, not found".into()];
        r.verdict.reasons = vec![Reason::new(
            crate::report::verdict::ReasonKind::NoTest,
            "no device was tested: <none>",
        )];
        r.status = RunStatus::Interrupted;
        r.interrupted_by = Some("SIGTERM".into());
        let x = render(&r);
        for want in [
            "<testsuites name=\"usbperf-matrix\" tests=\"3\" failures=\"2\" errors=\"1\" \
             skipped=\"0\"",
            "<testcase classname=\"usbperf.unit\" name=\"devices\" time=\"0.000\">\n      \
             <failure message=\"no device was tested: &lt;none&gt;\">",
            "<failure message=\"devices[0] &quot;rear&quot;: required, not found\">",
            "<error message=\"the run was interrupted by SIGTERM: the results are incomplete\">",
        ] {
            assert!(x.contains(want), "missing {want:?} in\n{x}");
        }
    }

    #[test]
    fn pending_cells_of_an_interrupted_run_are_skipped_as_not_run() {
        let mut r = report();
        r.status = RunStatus::Interrupted;
        r.devices[1].cells[1].status = CellStatus::Pending;
        r.devices[1].cells[0].status = CellStatus::Interrupted;
        let x = render(&r);
        assert!(
            x.contains(
                "name=\"verify\" time=\"1.500\">\n      <skipped message=\"not run: interrupted\"/>"
            ),
            "{x}"
        );
        assert!(
            x.contains("<skipped message=\"interrupted: the test was stopped before its end\"/>"),
            "{x}"
        );
    }
}
