//! Signed reports, on both databases: the real `usbperf-matrix upload` signs this unit's
//! reports with its key (created on first use, mode 0600, beside the spool) and forwards
//! other units' unsigned; the collector enrolls the key with the unit's first signed report
//! and refuses, with 403, a report in that unit's name under another key, unsigned, or whose
//! signature does not hold for its bytes. Nothing is stored of a refused report; the honest
//! unit's later reports are still stored, and other units' unsigned ones too.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::*;
use usbperf::upload::key::{UnitKey, KEY_FILE, KEY_HEADER, SIGNATURE_HEADER};

/// Two reports of one unit (schema 2, distinct ids): its factory report and a field report
/// a month later, from the fleet generator.
fn two_reports_of_one_unit(dir: &Path) -> (PathBuf, PathBuf) {
    let args = "--units 1 --seed 7 --format json --schema 2 --field-months 1";
    let files = fleet_gen(&args.split(' ').map(String::from).collect::<Vec<_>>(), dir);
    assert_eq!(files.len(), 2, "{files:?}");
    (files[0].clone(), files[1].clone())
}

/// `usbperf-matrix upload` of `report` through `spool`, which must deliver it.
fn uploaded(c: &Collector, spool: &Path, report: &Path) {
    let out = upload_cmd(&c.url(), &c.tokens, spool)
        .arg(report)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The report at `path` as this machine's own: its unit identity replaced by the one `run`
/// would record here (so `upload` signs it).
fn as_this_unit(path: &Path) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let me = usbperf::report::unit::identify(&Default::default());
    let unit = v["unit"].as_object_mut().unwrap();
    for (k, x) in [
        ("serial", me.serial),
        ("machine_id", me.machine_id),
        ("hostname", me.hostname),
    ] {
        match x {
            Some(x) => unit.insert(k.into(), x.into()),
            None => unit.remove(k),
        };
    }
    serde_json::to_vec_pretty(&v).unwrap()
}

/// POSTs `body` with this collector's token, signed by `key` when given (or with the
/// headers as given); the status and the answer.
fn post(url: &str, body: &[u8], headers: &[(&str, String)]) -> (u16, String) {
    let mut req = authorized_post(url, true, std::time::Duration::from_secs(10));
    for (k, v) in headers {
        req = req.set(k, v);
    }
    match req.send_bytes(body) {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(s, r)) => (s, r.into_string().unwrap_or_default()),
        Err(e) => panic!("POST {url}: {e}"),
    }
}

fn signed(key: &UnitKey, body: &[u8]) -> Vec<(&'static str, String)> {
    vec![
        (KEY_HEADER, key.public_hex()),
        (SIGNATURE_HEADER, key.sign_hex(body)),
    ]
}

fn forged_reports_are_refused(db: &str) {
    let c = Collector::start(db);
    let dir = TempDir::new("signatures");
    let (first, second) = two_reports_of_one_unit(&dir.path().join("fleet"));
    let spool = dir.path().join("spool");

    // Another unit's report, forwarded (as a station would): sent unsigned, stored, and no
    // key enrolled for it.
    let other_unit = fleet_with(1, 8, "json", &dir.path().join("other"), &["--schema", "2"]);
    uploaded(&c, &spool, &other_unit[0]);
    assert_eq!(count(&c.db, "reports"), 1);
    assert_eq!(
        count(&c.db, "unit_keys"),
        0,
        "a forwarded report enrolls no key"
    );

    // The unit's own report: signed with a key made on first use, root-only, beside the spool.
    let own = dir.path().join("own.json");
    std::fs::write(&own, as_this_unit(&first)).unwrap();
    uploaded(&c, &spool, &own);
    let key_path = usbperf::upload::key::default_path(&spool);
    assert_eq!(
        key_path,
        dir.path().join(KEY_FILE),
        "beside the spool, not in it"
    );
    let mode = std::fs::metadata(&key_path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the unit's key is root-only");
    let unit_key = UnitKey::load_or_create(&key_path).unwrap();
    assert_eq!(count(&c.db, "reports"), 2);
    assert_eq!(count(&c.db, "unit_keys"), 1);

    let body = as_this_unit(&second);
    // Another key claiming the same unit (a token holder writing in its name): 403, and
    // nothing stored.
    let other = UnitKey::load_or_create(&dir.path().join("other.key")).unwrap();
    let (status, answer) = post(&c.url(), &body, &signed(&other, &body));
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("another signing key"), "{answer}");
    assert!(answer.contains(r#""refused":"signature""#), "{answer}");
    // Unsigned, in a unit's name whose key is known: 403.
    let (status, answer) = post(&c.url(), &body, &[]);
    assert_eq!(status, 403, "{answer}");
    // The unit's own key over other bytes: the signature does not hold.
    let mut tampered = body.clone();
    let at = tampered.len() / 2;
    tampered[at] ^= 0x01;
    let (status, answer) = post(&c.url(), &tampered, &signed(&unit_key, &body));
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("does not hold"), "{answer}");
    // Half of the pair: refused, not taken as unsigned.
    let half = vec![(KEY_HEADER, unit_key.public_hex())];
    assert_eq!(post(&c.url(), &body, &half).0, 403);
    assert_eq!(count(&c.db, "reports"), 2, "no refused report is stored");

    // The same unit's report through a spool whose key is another (a unit whose key was
    // replaced): the collector refuses that report's signature, so `upload` sets it aside
    // with the reason and still delivers the report queued behind it.
    let replaced = dir.path().join("replaced").join("spool");
    let own_again = dir.path().join("own-again.json");
    std::fs::write(&own_again, &body).unwrap();
    let forwarded = fleet_with(1, 9, "json", &dir.path().join("third"), &["--schema", "2"]);
    let out = upload_cmd(&c.url(), &c.tokens, &replaced)
        .arg(&own_again)
        .arg(&forwarded[0])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let summary = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        summary.contains("1 delivered") && summary.contains("1 rejected"),
        "{summary}{err}"
    );
    let set_aside = std::fs::read_dir(replaced.join("rejected"))
        .unwrap()
        .count();
    assert_eq!(set_aside, 2, "the report and its .reason: {err}");
    assert_eq!(
        count(&c.db, "reports"),
        3,
        "the forwarded report behind it is stored"
    );

    // The unit itself, with its key: stored, and the key it was signed with recorded.
    let (status, answer) = post(&c.url(), &body, &signed(&unit_key, &body));
    assert_eq!(status, 201, "{answer}");
    assert_eq!(count(&c.db, "reports"), 4);
    assert!(
        c.stderr().contains("refused with 403"),
        "the refusals are logged: {}",
        c.stderr()
    );

    // The fleet from the database counts the reports whose signature the collector
    // verified: the unit's own two, not the two forwarded ones.
    let out = std::process::Command::new(collect_bin())
        .args(["fleet", "--db", &c.db, "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        v["signatures"],
        serde_json::json!({"signed": 2, "unsigned": 2, "several_keys": []}),
        "{}",
        v["signatures"]
    );
}

#[test]
fn forged_reports_are_refused_on_sqlite() {
    let dir = TempDir::new("signatures-db");
    forged_reports_are_refused(&format!("sqlite:{}", dir.path().join("r.db").display()));
}

#[test]
fn forged_reports_are_refused_on_postgres() {
    let pg = Pg::start();
    forged_reports_are_refused(&pg.url());
}

/// With the factory's list of unit keys (`--unit-keys`), no key is learnt from a first report:
/// a listed unit's report signed with its listed key is stored; unlisted units, other keys
/// and unsigned reports in a listed unit's name get 403 and nothing is stored. The unit's line
/// comes from the unit itself (`upload --print-key`); SIGHUP reads a longer list.
#[test]
fn with_the_factorys_list_only_listed_units_signed_by_their_key_are_stored() {
    let dir = TempDir::new("unit-keys");
    let db = format!("sqlite:{}", dir.path().join("r.db").display());
    let spool = dir.path().join("spool");
    let out = std::process::Command::new(matrix_bin())
        .args(["upload", "--print-key", "--spool"])
        .arg(&spool)
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unit_key = UnitKey::load_or_create(&usbperf::upload::key::default_path(&spool)).unwrap();
    let me = usbperf::upload::this_unit().unwrap();
    assert_eq!(line, format!("{} {me}", unit_key.public_hex()));

    let (first, second) = two_reports_of_one_unit(&dir.path().join("fleet"));
    let other = UnitKey::load_or_create(&dir.path().join("other.key")).unwrap();
    // Before the list, a token holder enrolled a key of their own for this unit (first use).
    let body = as_this_unit(&second);
    {
        let before = Collector::start(&db);
        let (status, answer) = post(&before.url(), &body, &signed(&other, &body));
        assert_eq!(status, 201, "{answer}");
    }
    assert_eq!(count(&db, "unit_keys"), 1);

    let list = dir.path().join("unit-keys");
    std::fs::write(&list, format!("# line 3, provisioned\n{line}\n")).unwrap();
    let c = Collector::start_with(&db, &["--unit-keys", list.to_str().unwrap()]);

    // The listed unit, through its own upload (signed with its key): stored, the list
    // ruling over the key enrolled before it.
    let own = dir.path().join("own.json");
    std::fs::write(&own, as_this_unit(&first)).unwrap();
    uploaded(&c, &spool, &own);
    assert_eq!(count(&c.db, "reports"), 2);

    let body = as_this_unit(&first);
    let (status, answer) = post(&c.url(), &body, &signed(&other, &body));
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("listed with another key"), "{answer}");
    let (status, answer) = post(&c.url(), &body, &[]);
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("not signed"), "{answer}");

    // An unlisted unit, signed or not: 403 (its first report enrolls nothing).
    let stranger = fleet_with(1, 8, "json", &dir.path().join("other"), &["--schema", "2"]);
    let stranger = std::fs::read(&stranger[0]).unwrap();
    let (status, answer) = post(&c.url(), &stranger, &signed(&other, &stranger));
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("not in the factory's list"), "{answer}");
    assert!(answer.contains(r#""refused":"signature""#), "{answer}");
    assert_eq!(count(&c.db, "reports"), 2, "no refused report is stored");
    assert_eq!(
        count(&c.db, "unit_keys"),
        1,
        "the list is not learnt into the table"
    );

    // The factory lists the other unit's key: after SIGHUP its signed report is stored.
    let v: serde_json::Value = serde_json::from_slice(&stranger).unwrap();
    let name = v["unit"]["serial"].as_str().unwrap().to_string();
    std::fs::write(&list, format!("{line}\n{} {name}\n", other.public_hex())).unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-HUP", &c.pid().to_string()])
        .status();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !c.stderr().contains("2 unit key(s) read again") {
        assert!(std::time::Instant::now() < end, "{}", c.stderr());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (status, answer) = post(&c.url(), &stranger, &signed(&other, &stranger));
    assert_eq!(status, 201, "{answer}");
    assert_eq!(count(&c.db, "reports"), 3);
    assert!(
        c.stderr().contains("refused with 403"),
        "logged: {}",
        c.stderr()
    );
}
