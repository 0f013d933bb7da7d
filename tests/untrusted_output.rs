//! Text from elsewhere cannot be turned against its reader: a report whose board and device
//! models carry terminal escape sequences (a screen clear, an OSC title change, an OSC 8
//! hyperlink), a right-to-left override and a spreadsheet formula, read by `show` and `fleet`
//! in text and CSV. Nothing a terminal would act on reaches standard output or standard error
//! raw (`cat -v` would show no `^[`), and no CSV cell starts a formula.

#[path = "common/fleet_gen.rs"]
mod fleet_gen;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_usbperf-matrix"))
}

const HOSTILE: &str = "=HYPERLINK(\"http://evil/\")\u{1b}[2J\u{1b}]0;pwned\u{7}\
                       \u{1b}]8;;http://evil/\u{1b}\\link\u{1b}]8;;\u{1b}\\\u{202e}txt.exe\u{9b}31m";

/// Every `model` of the report (the board's and each device's) set to [`HOSTILE`].
fn poison(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if k == "model" && x.is_string() {
                    *x = Value::String(HOSTILE.into());
                } else {
                    poison(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(poison),
        _ => {}
    }
}

fn hostile_fleet(dir: &Path) -> Vec<PathBuf> {
    let out = dir.to_str().unwrap();
    fleet_gen::generate_args(&[
        "--units", "3", "--format", "json", "--seed", "5", "--out", out,
    ]);
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in &files {
        let mut v: Value = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
        poison(&mut v);
        std::fs::write(f, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    }
    files
}

fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .env("COLUMNS", "1000")
        .args(args)
        .output()
        .unwrap()
}

/// The characters a terminal acts on: ESC, BEL, CSI (U+009B), the RLO override.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| matches!(c, '\u{1b}' | '\u{7}' | '\u{9b}' | '\u{202e}'))
        .collect()
}

#[test]
fn show_and_fleet_print_escapes_and_formulas_as_text() {
    let dir = std::env::temp_dir().join(format!("usbperf-untrusted-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let files = hostile_fleet(&dir);
    let first = files[0].to_str().unwrap();
    let d = dir.to_str().unwrap();
    let runs = [
        vec!["show", first],
        vec!["show", "--format", "csv", first],
        vec!["fleet", d],
        vec!["fleet", "--format", "csv", d],
    ];
    for args in &runs {
        let o = run(args);
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        );
        assert!(o.status.code().is_some(), "{args:?}: {err}");
        assert!(!out.is_empty(), "{args:?}: nothing printed: {err}");
        assert_eq!(raw_controls(&out), vec![], "{args:?} stdout:\n{out}");
        assert_eq!(raw_controls(&err), vec![], "{args:?} stderr:\n{err}");
        // What was escaped is still there for a reader to see: `show`'s text names the
        // board model in its first line.
        if args.len() == 2 && args[0] == "show" {
            assert!(out.contains("\\x1b]0;pwned\\x07"), "{args:?}:\n{out}");
        }
        if args.contains(&"csv") {
            for line in out.lines() {
                for cell in line.split(',') {
                    let cell = cell.trim_start_matches('"');
                    assert!(
                        !cell.starts_with(['=', '@']),
                        "{args:?}: a formula cell {cell:?} in\n{line}"
                    );
                }
            }
        }
    }
    // The board's name is in the fleet's CSV, as text.
    let csv = String::from_utf8_lossy(&run(&["fleet", "--format", "csv", d]).stdout).into_owned();
    assert!(csv.contains("'=HYPERLINK"), "{csv}");
    let _ = std::fs::remove_dir_all(&dir);
}
