//! `usbperf-matrix show` on report files: synthetic but schema-valid fleets from
//! `tests/common/fleet_gen.rs`, the same reports damaged, unfinished or from a "newer build", and the
//! report of a real run of the product on a loop device. Every expected figure is read from
//! the report itself.

mod common;
#[path = "common/fleet_gen.rs"]
mod fleet_gen;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use common::*;
use serde_json::Value;
use usbperf::report::schema::Report;
use usbperf::report::table::{render, MatrixTable, Style};
use usbperf::report::wire::{self, Newer};

/// Writes `units` synthetic reports (tests/common/fleet_gen.rs); returns their paths, sorted.
fn generate(out: &Path, units: u32, format: &str) -> Vec<PathBuf> {
    let units = units.to_string();
    let out = out.to_str().unwrap();
    let args = [
        "--units", &units, "--format", format, "--seed", "12", "--out", out,
    ];
    let files = fleet_gen::generate_args(&args).files;
    assert_eq!(files.len().to_string(), units);
    files
}

fn show(args: &[&str], files: &[&Path]) -> Output {
    common::cmd()
        .arg("show")
        .args(args)
        .args(files)
        .output()
        .unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The report as the test reads it: plain YAML (or JSON) data, not the product's types.
fn load(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_norway::from_str(&text).unwrap()
}

fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// One figure the table must show: (device, column header, value from the report).
fn figures(report: &Value) -> Vec<(String, String, f64)> {
    let mut out = Vec::new();
    for d in report["devices"].as_array().unwrap() {
        let name = d["name"].as_str().unwrap().to_string();
        for c in d["cells"].as_array().unwrap() {
            let w = c["workload"].as_str().unwrap();
            let r = &c["result"];
            if !matches!(c["status"].as_str(), Some("passed") | Some("failed")) {
                continue;
            }
            let mut add = |unit: &str, v: &Value| {
                out.push((name.clone(), format!("{w} {unit}"), v.as_f64().unwrap()));
            };
            match w {
                "rand-read" | "rand-write" | "mixed" => {
                    add("IOPS", &r["iops"]);
                    let p99_ms = r["all"]["latency"]["p99_ns"].as_f64().unwrap() / 1e6;
                    add("p99 ms", &Value::from(p99_ms));
                }
                "verify" => add("bad blocks", &r["verify"]["mismatched_blocks"]),
                _ => add("MiB/s", &r["mib_per_s"]),
            }
        }
    }
    out
}

/// Splits a CSV text into records (RFC 4180; these records hold no line breaks).
fn csv_records(s: &str) -> Vec<Vec<String>> {
    s.lines()
        .map(|l| {
            let mut fields = Vec::new();
            let mut cur = String::new();
            let mut quoted = false;
            let mut chars = l.chars().peekable();
            while let Some(c) = chars.next() {
                match (c, quoted) {
                    ('"', true) if chars.peek() == Some(&'"') => {
                        cur.push('"');
                        chars.next();
                    }
                    ('"', _) => quoted = !quoted,
                    (',', false) => fields.push(std::mem::take(&mut cur)),
                    _ => cur.push(c),
                }
            }
            fields.push(cur);
            fields
        })
        .collect()
}

/// A Markdown pipe table as its header and rows of cells (escaped pipes kept inside).
fn markdown_table(s: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut rows = s
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .replace("\\|", "\u{1}")
                .split('|')
                .map(|c| c.trim().replace('\u{1}', "|"))
                .collect::<Vec<String>>()
        })
        .collect::<Vec<_>>();
    let head = rows.remove(0);
    rows.remove(0); // the alignment row
    (head, rows)
}

/// Within the rounding of a CSV figure: IOPS to 0.1, the others to 0.001.
fn csv_close(header: &str, got: f64, want: f64) -> bool {
    let half_step = if header.ends_with("IOPS") {
        0.05
    } else {
        0.0005
    };
    (got - want).abs() <= half_step + want.abs() * 1e-12
}

/// Within the rounding of a figure shown to three significant digits.
fn close(shown: f64, actual: f64) -> bool {
    (shown - actual).abs() <= 0.006 * actual.abs().max(1.0)
}

#[test]
fn csv_markdown_and_text_show_every_device_with_the_reports_figures() {
    let d = TempDir::new("show-formats");
    let files = generate(&d.path().join("r"), 2, "yaml");
    let report = load(&files[0]);
    let devices = report["devices"].as_array().unwrap();
    let expected = figures(&report);
    assert!(expected.len() > 10, "the report has figures to compare");

    // CSV: plain numbers under headers that carry the unit.
    let o = show(&["--format", "csv"], &[&files[0]]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let recs = csv_records(&out(&o));
    assert_eq!(recs.len(), 1 + devices.len(), "{}", out(&o));
    let head = &recs[0];
    let col = |h: &str| {
        head.iter()
            .position(|x| x == h)
            .unwrap_or_else(|| panic!("no CSV column {h:?}: {head:?}"))
    };
    let row = |name: &str| {
        recs.iter()
            .find(|r| r[col("device")] == name)
            .unwrap_or_else(|| panic!("no CSV row for {name}"))
    };
    for (dev, header, want) in &expected {
        let got: f64 = row(dev)[col(header)]
            .parse()
            .unwrap_or_else(|_| panic!("{dev} {header}: {:?}", row(dev)[col(header)]));
        assert!(
            csv_close(header, got, *want),
            "{dev} {header}: {got} vs {want}"
        );
    }
    for dv in devices {
        let r = row(dv["name"].as_str().unwrap());
        let pass = dv["verdict"]["pass"].as_bool().unwrap();
        assert_eq!(r[col("verdict")], if pass { "PASS" } else { "FAIL" });
        assert_eq!(r[col("label")], dv["label"].as_str().unwrap());
        assert_eq!(r[col("class")], dv["disk"]["class"].as_str().unwrap());
        if let Some(port) = dv["disk"]["usb"]["port_path"].as_str() {
            let mbps = dv["disk"]["usb"]["speed_mbps"].as_f64().unwrap();
            assert_eq!(r[col("link")], format!("usb {port} {mbps}M"));
        }
    }

    // Markdown: the same figures to three significant digits, numeric columns right-aligned.
    let o = show(&["--format", "markdown"], &[&files[0]]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let md = out(&o);
    let (mhead, mrows) = markdown_table(&md);
    // The same columns as the CSV, which adds a status column per test.
    let figures_only: Vec<&String> = recs[0].iter().filter(|h| !h.ends_with(" status")).collect();
    assert_eq!(
        mhead.iter().collect::<Vec<_>>()[..],
        figures_only[..mhead.len()],
        "same columns as the CSV"
    );
    assert_eq!(mrows.len(), devices.len());
    let mrow = |name: &str| mrows.iter().find(|r| r[0] == name).unwrap();
    let text = out(&show(&[], &[&files[0]]));
    for (dev, header, want) in &expected {
        let c = mhead.iter().position(|h| h == header).unwrap();
        let cell = mrow(dev)[c].trim_end_matches("\\*").to_string();
        let shown = if cell == "ok" {
            0.0
        } else {
            cell.parse().unwrap()
        };
        assert!(close(shown, *want), "{dev} {header}: {cell} vs {want}");
        // Text shows the very same figure, in the device's row.
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{dev} ")))
            .unwrap();
        assert!(
            line.split_whitespace()
                .any(|t| t.trim_end_matches('*') == cell),
            "{dev} {header} {cell} not in text row {line:?}"
        );
    }
    // Text: a two-line header, every test named with its unit under it.
    let lines: Vec<&str> = text.lines().collect();
    let h = lines.iter().position(|l| l.starts_with("device")).unwrap();
    for t in report["config"]["tests"].as_array().unwrap() {
        assert!(lines[h].contains(t["workload"].as_str().unwrap()), "{text}");
    }
    for unit in ["MiB/s", "IOPS", "p99 ms", "bad blocks"] {
        assert!(lines[h + 1].contains(unit), "{text}");
    }
    // Every failure reason of the report is printed under the table.
    for dv in devices {
        for r in dv["verdict"]["reasons"].as_array().into_iter().flatten() {
            // A sentence (schema 1), or a record's `text` (schema 2).
            let r = r.as_str().or_else(|| r["text"].as_str()).unwrap();
            assert!(text.contains(r), "{r} missing from {text}");
            assert!(md.contains(r), "{r} missing from {md}");
        }
    }
}

#[test]
fn several_reports_make_one_table_with_a_row_per_device_per_report() {
    let d = TempDir::new("show-many");
    let files = generate(&d.path().join("r"), 3, "yaml");
    let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let o = show(&["--format", "csv"], &refs);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let recs = csv_records(&out(&o));
    assert_eq!(&recs[0][..3], ["unit", "report", "device"]);
    let mut want = Vec::new();
    for f in &files {
        let r = load(f);
        for dv in r["devices"].as_array().unwrap() {
            want.push((
                r["unit"]["serial"].as_str().unwrap().to_string(),
                file_name(f),
                dv["name"].as_str().unwrap().to_string(),
            ));
        }
    }
    let got: Vec<(String, String, String)> = recs[1..]
        .iter()
        .map(|r| (r[0].clone(), r[1].clone(), r[2].clone()))
        .collect();
    assert_eq!(got, want);
    // One header for all: the text table names each report above it.
    let text = out(&show(&[], &refs));
    let heads = text
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .take(3)
                .eq(["unit", "report", "device"])
        })
        .count();
    assert_eq!(heads, 1, "{text}");
    for f in &files {
        assert!(
            text.contains(&format!("report {}: unit", file_name(f))),
            "{text}"
        );
    }
}

#[test]
fn json_reports_render_as_their_yaml_twins() {
    let d = TempDir::new("show-json");
    let yaml = generate(&d.path().join("y"), 1, "yaml");
    let json = generate(&d.path().join("j"), 1, "json");
    for style in ["text", "markdown", "csv"] {
        let a = out(&show(&["--format", style], &[&yaml[0]]));
        let b = out(&show(&["--format", style], &[&json[0]]));
        assert_eq!(
            a.replace(&file_name(&yaml[0]), "R"),
            b.replace(&file_name(&json[0]), "R"),
            "{style}"
        );
    }
}

#[test]
fn a_file_that_is_not_a_report_is_named_exit_2_and_the_others_still_render() {
    let d = TempDir::new("show-bad");
    let files = generate(&d.path().join("r"), 1, "yaml");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let notes = d.path().join("notes.txt");
    std::fs::write(&notes, "unit 15 had a loose cable, re-seated it\n").unwrap();
    let cut = d.path().join("cut.yaml");
    std::fs::write(&cut, &text[..text.rfind("\nverdict:").unwrap() + 1]).unwrap();
    let nosv = d.path().join("nosv.yaml");
    std::fs::write(&nosv, text.replacen("schema_version: 1\n", "", 1)).unwrap();

    let o = show(&[], &[&notes, &files[0], &cut, &nosv]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let e = err(&o);
    // (file, why the error says it is not a report)
    for (f, why) in [
        (&notes, "the document is a single value"),
        (&cut, "missing field verdict"),
        (&nosv, "missing field schema_version"),
    ] {
        let line = e
            .lines()
            .find(|l| l.contains(&*f.to_string_lossy()))
            .unwrap_or_else(|| panic!("{} not named: {e}", f.display()));
        assert!(
            line.contains("not a usbperf report") && line.contains(why),
            "{line}"
        );
    }
    assert_eq!(e.lines().count(), 3, "{e}");
    let s = out(&o);
    for dv in load(&files[0])["devices"].as_array().unwrap() {
        assert!(s.contains(dv["name"].as_str().unwrap()), "{s}");
    }
}

#[test]
fn a_file_that_cannot_be_read_is_exit_4() {
    let d = TempDir::new("show-unreadable");
    let files = generate(&d.path().join("r"), 1, "yaml");
    let gone = d.path().join("gone.yaml");
    let o = show(&[], &[&gone, &files[0]]);
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    assert!(err(&o).contains("gone.yaml: cannot read"), "{}", err(&o));
    assert!(
        out(&o).contains("device"),
        "the readable report still renders"
    );
    // Usage errors are 2, as for every subcommand.
    assert_eq!(
        show(&["--format", "html"], &[&files[0]]).status.code(),
        Some(2)
    );
    assert_eq!(show(&[], &[]).status.code(), Some(2));
}

#[test]
fn unfinished_reports_and_reports_of_newer_builds_render_with_their_status() {
    let d = TempDir::new("show-status");
    let files = generate(&d.path().join("r"), 1, "yaml");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    // (name, report text, words the table must show)
    let interrupted = text
        .replacen(
            "status: complete",
            "status: interrupted\ninterrupted_by: SIGTERM",
            1,
        )
        .replacen(
            "  - workload: seq-read\n    status: passed",
            "  - workload: seq-read\n    status: pending",
            1,
        );
    let running = text.replacen("status: complete", "status: running", 1);
    let newer = text
        .replacen("schema_version: 1", "schema_version: 3", 1)
        .replacen(
            "status: complete",
            "status: complete\nnew_section: {a: [1]}",
            1,
        )
        .replacen(
            "  tests:\n",
            "  tests:\n  - workload: trim-curve\n    new_key: 1\n",
            1,
        );
    let cases = [
        (
            "interrupted.yaml",
            interrupted,
            vec!["run interrupted by SIGTERM", "pending"],
        ),
        (
            "running.yaml",
            running,
            vec!["run still running", "running"],
        ),
        (
            "newer.yaml",
            newer,
            vec!["schema_version 3 is newer", "trim-curve"],
        ),
    ];
    for (name, body, words) in cases {
        let p = d.path().join(name);
        std::fs::write(&p, body).unwrap();
        let o = show(&[], &[&p]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", err(&o));
        for w in words {
            assert!(out(&o).contains(w), "{name}: {w} missing: {}", out(&o));
        }
        if name == "running.yaml" {
            // No verdict is given before the run has judged.
            assert!(
                !out(&o).contains("PASS") && !out(&o).contains("FAIL"),
                "{}",
                out(&o)
            );
        }
    }
}

/// `show ... | head -1`: the reader goes away; the writer must not panic (exit 101).
#[test]
fn a_closed_pipe_does_not_panic() {
    let d = TempDir::new("show-pipe");
    let files = generate(&d.path().join("r"), 1, "yaml");
    // The same report 500 times: a table far larger than a pipe's buffer (64 KiB), so the
    // writer is still writing when the reader has gone.
    let mut cmd = common::cmd();
    cmd.arg("show");
    for _ in 0..500 {
        cmd.arg(&files[0]);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("report "), "{first}");
    // The reader (BufReader and the pipe's read end) was dropped above.
    let o = child.wait_with_output().unwrap();
    assert_ne!(o.status.code(), Some(101), "panicked: {}", err(&o));
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(!err(&o).contains("panicked"), "{}", err(&o));
}

/// What the factory run will print at its end (from the in-memory report) is what `show`
/// prints of the file it wrote.
#[test]
fn the_in_memory_report_renders_as_its_file() {
    let d = TempDir::new("show-memory");
    let files = generate(&d.path().join("r"), 1, "yaml");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let report: Report = serde_norway::from_str(&text).expect("fleet-gen writes v1 reports");
    let from_file = wire::read(&files[0], text.as_bytes(), Newer::ReadWhatDecodes).unwrap();
    let name = file_name(&files[0]);
    for style in [Style::Text, Style::Markdown, Style::Csv] {
        let memory = render(&MatrixTable::from_report(&report), style);
        let file = render(
            &MatrixTable::new(&[(name.clone(), from_file.clone())]),
            style,
        );
        assert_eq!(
            memory,
            file.replacen(&format!("report {name}: "), "", 1),
            "{style:?}"
        );
        assert_eq!(
            file,
            out(&show(
                &["--format", &format!("{style:?}").to_lowercase()],
                &[&files[0]]
            ))
        );
    }
}

/// A report of a real run of the product (a raw loop device): what the factory writes shows.
#[test]
fn the_report_of_a_real_run_renders() {
    needs_root!("loop devices");
    let raw = Loop::new(64 << 20);
    let d = TempDir::new("show-real");
    let cfg = d.path().join("cfg.yaml");
    std::fs::write(
        &cfg,
        format!(
            "devices:\n  - {{select: {{name: {}}}, target: raw, label: bench disk}}\n\
             tests:\n  - {{workload: seq-write, size: 8M}}\n  - {{workload: seq-read, size: 8M}}\n\
             \x20 - {{workload: rand-read, size: 8M, runtime: 500ms}}\n\
             thresholds:\n  - {{select: {{class: loop}}, workload: seq-write, min_mib_per_s: 1}}\n",
            raw.name()
        ),
    )
    .unwrap();
    let reports = d.path().join("reports");
    let o = common::cmd()
        .args(["run", "--config"])
        .arg(&cfg)
        .arg("--report-dir")
        .arg(&reports)
        .arg("--lock-file")
        .arg(d.path().join("lock"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let file = std::fs::read_dir(&reports)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let report = load(&file);
    let o = show(&["--format", "csv"], &[&file]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let recs = csv_records(&out(&o));
    assert_eq!(recs.len(), 2, "{}", out(&o));
    let expected = figures(&report);
    assert_eq!(
        expected.len(),
        4,
        "seq-write, seq-read, rand-read IOPS and p99"
    );
    for (dev, header, want) in expected {
        let c = recs[0].iter().position(|h| *h == header).unwrap();
        assert_eq!(recs[1][0], dev);
        let got: f64 = recs[1][c].parse().unwrap();
        assert!(csv_close(&header, got, want), "{header}: {got} vs {want}");
    }
    assert_eq!(recs[1][1], "bench disk");
    assert!(recs[1].contains(&"PASS".to_string()), "{:?}", recs[1]);
}

/// CSV is for programs: a numeric column holds a number or nothing, never a word; each test's
/// status has its own column, and an interrupted test keeps the figures it did measure.
#[test]
fn csv_numbers_are_numbers_and_statuses_have_their_own_column() {
    let d = TempDir::new("show-csv-status");
    let files = generate(&d.path().join("r"), 1, "yaml");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let interrupted = text
        .replacen(
            "status: complete",
            "status: interrupted\ninterrupted_by: SIGTERM",
            1,
        )
        .replacen(
            "  - workload: seq-read\n    status: passed",
            "  - workload: seq-read\n    status: interrupted",
            1,
        )
        .replacen(
            "  - workload: seq-write\n    status: passed",
            "  - workload: seq-write\n    status: pending",
            1,
        );
    let p = d.path().join("interrupted.yaml");
    std::fs::write(&p, interrupted).unwrap();
    let o = show(&["--format", "csv"], &[&p]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let recs = csv_records(&out(&o));
    let head = &recs[0];
    let at = |h: &str| {
        head.iter()
            .position(|x| x == h)
            .unwrap_or_else(|| panic!("{h}: {head:?}"))
    };
    let statuses: Vec<&str> = recs[1..]
        .iter()
        .map(|r| r[at("seq-read status")].as_str())
        .collect();
    assert!(statuses.contains(&"interrupted"), "{statuses:?}");
    assert!(recs[1..]
        .iter()
        .any(|r| r[at("seq-write status")] == "pending"));
    // The interrupted cell's measured throughput is still a number.
    let row = recs[1..]
        .iter()
        .find(|r| r[at("seq-read status")] == "interrupted")
        .unwrap();
    assert!(row[at("seq-read MiB/s")].parse::<f64>().is_ok(), "{row:?}");
    let first_figure = head.iter().position(|h| h.ends_with(" status")).unwrap();
    let last_figure = at("verdict");
    for r in &recs[1..] {
        for (h, v) in head.iter().zip(r).take(last_figure).skip(first_figure) {
            if !h.ends_with(" status") {
                assert!(
                    v.is_empty() || v.parse::<f64>().is_ok(),
                    "{h}: {v:?} is not a number"
                );
            }
        }
    }
}
