//! A report's signature file (`<report>.sig`): a run whose config uploads writes one beside its
//! report with the unit's key; `show` says whether each report's signature holds and exits 2
//! for one that does not; `fleet` counts signed and unsigned reports, leaves out one whose
//! signature does not hold (an error of kind `signature`), and names a unit whose reports
//! carry more than one key.

mod common;
#[path = "common/fleet_gen.rs"]
mod fleet_gen;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;
use usbperf::upload::key::UnitKey;
use usbperf_report::seal::{key_short, seal_path};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn matrix(args: &[&std::ffi::OsStr]) -> Output {
    cmd().args(args).output().unwrap()
}

/// A byte of the report changed after it was signed: its last newline becomes a space.
fn tamper(report: &Path) {
    let mut b = std::fs::read(report).unwrap();
    let last = b.len() - 1;
    b[last] = b' ';
    std::fs::write(report, b).unwrap();
}

#[test]
fn a_run_that_uploads_signs_its_report_and_show_checks_the_signature() {
    let rd = RunDir::new();
    let dir = rd.dir.path();
    let token = dir.join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    // No device matches: the run fails (exit 1) and still writes, signs and queues its
    // report; the collector's port is closed, so the report stays in the spool.
    let cfg = rd.config(&format!(
        "devices:\n  - select: {{name: no-such-disk}}\nupload:\n  url: \
         http://127.0.0.1:1/api/v1/reports\n  token_file: {}\n  spool: {}\n  timeout: 1s\n",
        token.display(),
        dir.join("spool").display()
    ));
    let out = rd.run(Some(&cfg), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let (report, _) = rd.report();
    let sig = seal_path(&report);
    let key = UnitKey::load_or_create(&dir.join("unit.key")).unwrap();
    let written = std::fs::read_to_string(&sig).unwrap();
    assert!(
        written.starts_with("usbperf-signature 1\n")
            && written.contains(&format!("key {}\n", key.public_hex())),
        "{written}"
    );
    assert_eq!(
        std::fs::metadata(&sig).unwrap().permissions().mode() & 0o022,
        0,
        "no one else may change the signature file"
    );

    let out = matrix(&["show".as_ref(), report.as_os_str()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.contains(&format!("holds, unit key {}", key_short(&key.public_hex()))),
        "{shown}"
    );

    // The same report with one byte changed, beside an untouched one.
    let copy = dir.join("copy.yaml");
    std::fs::copy(&report, &copy).unwrap();
    std::fs::copy(&sig, seal_path(&copy)).unwrap();
    tamper(&copy);
    let out = matrix(&["show".as_ref(), report.as_os_str(), copy.as_os_str()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "copy.yaml: its signature does not hold: the report changed after the unit signed it"
        ),
        "{err}"
    );
    let shown = text(&out.stdout);
    assert!(shown.contains("copy.yaml: DOES NOT HOLD"), "{shown}");
    assert!(shown.contains("holds, unit key"), "{shown}");

    // Unsigned reports alone: no signature lines, as before signing existed.
    std::fs::remove_file(&sig).unwrap();
    let out = matrix(&["show".as_ref(), report.as_os_str()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !text(&out.stdout).contains("signatures"),
        "{}",
        text(&out.stdout)
    );
}

/// The unit each generated report belongs to (its serial), by file.
fn units_of(files: &[PathBuf]) -> BTreeMap<String, Vec<PathBuf>> {
    let mut by_unit: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for f in files {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
        let unit = v["unit"]["serial"].as_str().unwrap().to_string();
        by_unit.entry(unit).or_default().push(f.clone());
    }
    by_unit
}

#[test]
fn the_fleet_counts_signatures_and_leaves_out_a_report_whose_signature_does_not_hold() {
    let dir = TempDir::new("fleet-seal");
    let out = dir.path().join("fleet");
    let fleet = fleet_gen::generate_args(&[
        "--units",
        "8",
        "--seed",
        "11",
        "--format",
        "json",
        "--field-months",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    let by_unit = units_of(&fleet.files);
    assert!(by_unit.values().all(|f| f.len() == 2), "{by_unit:?}");
    let units: Vec<&String> = by_unit.keys().collect();
    // Each unit signs its reports with its own key; the first unit's field report is signed
    // with another key, the second unit's field report is changed after signing, and the
    // third unit's reports stay unsigned.
    for (i, (unit, files)) in by_unit.iter().enumerate() {
        let key = UnitKey::load_or_create(&dir.path().join(format!("{unit}.key"))).unwrap();
        let other = UnitKey::load_or_create(&dir.path().join("other.key")).unwrap();
        match i {
            0 => {
                key.seal_file(&files[0]).unwrap();
                other.seal_file(&files[1]).unwrap();
            }
            1 => {
                key.seal_file(&files[0]).unwrap();
                key.seal_file(&files[1]).unwrap();
                tamper(&files[1]);
            }
            2 => {}
            _ => {
                for f in files {
                    key.seal_file(f).unwrap();
                }
            }
        }
    }
    let tampered = &by_unit[units[1]][1];

    let run = matrix(&[
        "fleet".as_ref(),
        out.as_os_str(),
        "--format".as_ref(),
        "json".as_ref(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&run.stderr)));
    let sig = &v["signatures"];
    assert_eq!(sig["signed"], 13, "{sig}");
    assert_eq!(sig["unsigned"], 2, "{sig}");
    assert_eq!(
        sig["several_keys"],
        serde_json::json!([{"unit": units[0], "keys": 2}]),
        "{sig}"
    );
    assert_eq!(v["reports"], 15);
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["kind"], "signature");
    assert_eq!(errors[0]["file"], tampered.to_str().unwrap());
    assert!(
        errors[0]["issue"]
            .as_str()
            .unwrap()
            .contains("changed after the unit signed it"),
        "{errors:?}"
    );

    // Named one by one (`fleet reports/*`), the signature files are read with their reports,
    // never as reports.
    let mut named: Vec<std::ffi::OsString> = vec!["fleet".into(), "--format".into(), "json".into()];
    for f in &fleet.files {
        named.push(f.clone().into());
        if seal_path(f).exists() {
            named.push(seal_path(f).into());
        }
    }
    let run = cmd().args(&named).output().unwrap();
    let by_name: serde_json::Value = serde_json::from_slice(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&run.stderr)));
    assert_eq!(by_name["files"], 16, "{}", by_name["errors"]);
    assert_eq!(by_name["errors"], v["errors"]);
    assert_eq!(by_name["signatures"], v["signatures"]);

    let run = matrix(&["fleet".as_ref(), out.as_os_str()]);
    let shown = text(&run.stdout);
    assert!(
        shown.contains("signatures: 13 hold, 2 unsigned, 1 unit signed by several keys"),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("  {}: 2 keys", units[0])),
        "{shown}"
    );
}
