//! The fleet from the database with real parts: reports uploaded over
//! HTTP to collectors on SQLite and on a private PostgreSQL server, then
//! `usbperf-collect fleet` beside `usbperf-matrix fleet` over the same reports as files named
//! as the database's export names them (`<report_id>.<format>`), and the served page.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// Reports from the fleet generator of schema `schema` (with report ids), over 40 days.
fn gen(n: usize, seed: u32, schema: u32, format: &str, dir: &Path) -> Vec<PathBuf> {
    let schema = schema.to_string();
    let extra = ["--schema", &schema, "--start", "2026-09-01", "--days", "40"];
    fleet_with(n, seed, format, dir, &extra)
}

/// Uploads every report to `url`; copies each into `named` as `<report_id>.<format>`.
fn upload_all(url: &str, reports: &[PathBuf], named: &Path) {
    std::fs::create_dir_all(named).unwrap();
    for p in reports {
        let body = std::fs::read(p).unwrap();
        let json = p.extension().is_some_and(|e| e == "json");
        let resp = authorized_post(url, json, std::time::Duration::from_secs(60))
            .send_bytes(&body)
            .unwrap_or_else(|e| panic!("POST {}: {e}", p.display()));
        let v: serde_json::Value = serde_json::from_str(&resp.into_string().unwrap()).unwrap();
        let id = v["report_id"].as_str().unwrap();
        let ext = if json { "json" } else { "yaml" };
        std::fs::write(named.join(format!("{id}.{ext}")), &body).unwrap();
    }
}

/// `usbperf-matrix fleet` over the files of `dir`, run in it with their bare names.
fn dir_fleet(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    // The collector's text is laid out for 80 columns in UTF-8: the unit's console the same.
    let out = Command::new(matrix_bin())
        .arg("fleet")
        .args(args)
        .args(&names)
        .current_dir(dir)
        .env("COLUMNS", "80")
        .env("LC_ALL", "C.UTF-8")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn db_fleet(db: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(collect_bin())
        .args(["fleet", "--db", db])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Equal, or both written to the temporary directory and a line of their diff shown.
fn same(got: &str, want: &str, what: &str) {
    if got == want {
        return;
    }
    let d = std::env::temp_dir();
    std::fs::write(d.join("fleetdb-got"), got).unwrap();
    std::fs::write(d.join("fleetdb-want"), want).unwrap();
    let first = got
        .lines()
        .zip(want.lines())
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| format!("line {}: {a:?} != {b:?}", i + 1))
        .unwrap_or_else(|| "one is a prefix of the other".into());
    panic!(
        "{what}: differs from the directory's ({first}; both in {})",
        d.display()
    );
}

/// The fleet from summaries agrees with the exact one (`want`) within the stated error:
/// counts, pass rates, extremes and groups exactly; percentiles within 0.1 %, a trend's
/// medians within 1 %; a group's units within 5 % (a HyperLogLog count above 1,024 units,
/// exact below).
fn agree(got: &str, want: &str, what: &str) {
    let g: serde_json::Value = serde_json::from_str(got).unwrap();
    let w: serde_json::Value = serde_json::from_str(want).unwrap();
    for k in [
        "reports",
        "units",
        "unit_pass_rate",
        "devices",
        "device_pass_rate",
    ] {
        assert_eq!(g[k], w[k], "{what}: {k}");
    }
    assert_eq!(
        g["signatures"]["signed"], w["signatures"]["signed"],
        "{what}"
    );
    let counts = |v: &serde_json::Value| -> Vec<(String, u64)> {
        let mut c: Vec<(String, u64)> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["reason"].to_string(), r["count"].as_u64().unwrap()))
            .collect();
        c.sort();
        c
    };
    assert_eq!(
        counts(&g["failure_reasons"]),
        counts(&w["failure_reasons"]),
        "{what}: failure reasons"
    );
    let (gg, wg) = (
        g["groups"].as_array().unwrap(),
        w["groups"].as_array().unwrap(),
    );
    assert_eq!(gg.len(), wg.len(), "{what}: groups");
    for (a, b) in gg.iter().zip(wg) {
        assert_eq!(a["key"], b["key"], "{what}");
        let (ua, ub) = (a["units"].as_f64().unwrap(), b["units"].as_f64().unwrap());
        assert!(
            (ua - ub).abs() <= 0.05 * ub,
            "{what}: units {ua} against {ub}"
        );
        assert_eq!(a["devices"], b["devices"], "{what}");
        let (ma, mb) = (
            a["metrics"].as_array().unwrap(),
            b["metrics"].as_array().unwrap(),
        );
        assert_eq!(ma.len(), mb.len(), "{what}: {} metrics", a["key"]);
        for (x, y) in ma.iter().zip(mb) {
            let name = format!("{what}: {} {}", a["key"], x["metric"]);
            for k in ["metric", "count", "pass_rate", "min", "max"] {
                assert_eq!(x[k], y[k], "{name} {k}");
            }
            for k in ["p5", "median", "p95"] {
                let (p, q) = (x[k].as_f64().unwrap(), y[k].as_f64().unwrap());
                assert!(
                    (p - q).abs() <= 0.001 * q.abs(),
                    "{name} {k}: {p} against {q}"
                );
            }
            // The trend: the same buckets with the same counts, each median within 1 %.
            let (ta, tb) = (
                x["trend"].as_array().unwrap(),
                y["trend"].as_array().unwrap(),
            );
            assert_eq!(ta.len(), tb.len(), "{name}: trend buckets");
            for (p, q) in ta.iter().zip(tb) {
                assert_eq!(
                    (&p["start"], &p["count"]),
                    (&q["start"], &q["count"]),
                    "{name}"
                );
                let (p, q) = (p["median"].as_f64().unwrap(), q["median"].as_f64().unwrap());
                assert!(
                    (p - q).abs() <= 0.01 * q.abs(),
                    "{name} trend median: {p} against {q}"
                );
            }
        }
    }
}

/// The summary without what the filters change by design: a directory run counts and lists
/// the files a filter dropped (`files`, `skipped`), SQL never reads them.
fn without_file_counts(json: &str) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
    let o = v.as_object_mut().unwrap();
    o.remove("files");
    o.remove("skipped");
    v
}

fn get(url: &str) -> (u16, String) {
    match ureq::get(url).call() {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(s, r)) => (s, r.into_string().unwrap_or_default()),
        Err(e) => panic!("GET {url}: {e}"),
    }
}

/// Boards in the directory's summary, by reports.
fn boards(json: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    let mut b: Vec<String> = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["key"][0].as_str().unwrap().to_string())
        .collect();
    b.sort();
    b.dedup();
    b
}

#[test]
fn fleet_from_sqlite_and_postgres_is_the_fleet_from_a_directory_and_the_page_serves_it() {
    let tmp = TempDir::new("fleetdb");
    // Schema 1 YAML and schema 2 JSON, as a factory with old and new builds has them.
    let mut reports = gen(60, 21, 1, "yaml", &tmp.path().join("v1"));
    reports.extend(gen(60, 22, 2, "json", &tmp.path().join("v2")));
    let pg = Pg::start();
    let sqlite = format!("sqlite:{}", tmp.path().join("r.db").display());
    let named = tmp.path().join("named");
    for (i, db) in [sqlite.clone(), pg.url()].iter().enumerate() {
        let c = Collector::start_with(db, &[]);
        upload_all(&c.url(), &reports, &tmp.path().join(format!("named{i}")));
    }
    std::fs::rename(tmp.path().join("named0"), &named).unwrap();

    let (code, dir_json, err) = dir_fleet(&named, &["--format", "json"]);
    assert_eq!(code, 0, "usbperf-matrix fleet: {err}");
    let v: serde_json::Value = serde_json::from_str(&dir_json).unwrap();
    assert_eq!(v["reports"], 120);
    for db in [&sqlite, &pg.url()] {
        let (code, json, err) = db_fleet(db, &["--exact", "--format", "json"]);
        assert_eq!(code, 0, "usbperf-collect fleet --db {db}: {err}");
        same(
            &json,
            &dir_json,
            &format!("{db}: fleet --exact --format json"),
        );
        // From the summaries (the default): the same tables within their stated error.
        let (code, json, err) = db_fleet(db, &["--format", "json"]);
        assert_eq!(code, 0, "usbperf-collect fleet --db {db}: {err}");
        agree(&json, &dir_json, &format!("{db}: fleet from summaries"));
        let (_, text, _) = db_fleet(db, &["--exact", "--format", "text"]);
        same(
            &text,
            &dir_fleet(&named, &["--format", "table"]).1,
            &format!("{db}: text"),
        );
        // The one difference: the page links each report by the name the export writes
        // beside it, not by a file:// URL into the directory.
        let (_, html, _) = db_fleet(db, &["--exact", "--format", "html"]);
        let dir_html = dir_fleet(&named, &["--format", "html"]).1;
        let local = format!("href=\"file://{}/", named.display());
        assert!(dir_html.contains(&local));
        same(
            &html,
            &dir_html.replace(&local, "href=\""),
            &format!("{db}: html"),
        );
    }

    // Filters: the same reports as the directory run keeps, on both databases.
    let board = boards(&dir_json)[0].clone();
    for args in [
        vec!["--since", "2026-09-20"],
        vec!["--board", board.as_str()],
        vec![
            "--since",
            "2026-09-20T12:00:00+02:00",
            "--board",
            board.as_str(),
        ],
    ] {
        let mut a = args.clone();
        a.extend(["--format", "json"]);
        let (code, want, err) = dir_fleet(&named, &a);
        assert_eq!(code, 0, "{args:?}: {err}");
        let w: serde_json::Value = serde_json::from_str(&want).unwrap();
        assert!(
            w["reports"].as_u64().unwrap() < 120,
            "{args:?} filters nothing out"
        );
        for db in [&sqlite, &pg.url()] {
            let mut exact = a.clone();
            exact.push("--exact");
            let (code, got, err) = db_fleet(db, &exact);
            assert_eq!(code, 0, "{db} {args:?}: {err}");
            assert_eq!(
                without_file_counts(&got),
                without_file_counts(&want),
                "{db} {args:?}"
            );
            // Summaries take whole days: a day's start is the same selection.
            if !args.iter().any(|a| a.contains('T')) {
                let (code, got, err) = db_fleet(db, &a);
                assert_eq!(code, 0, "{db} {args:?}: {err}");
                agree(&got, &want, &format!("{db} {args:?} from summaries"));
            }
        }
    }
    for db in [&sqlite, &pg.url()] {
        // "unknown board" (units naming no model) is a board `--board` takes, as the
        // directory run does; this fleet has none, so it matches nothing in both.
        let (code, _, err) = db_fleet(db, &["--board", "unknown board"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("no report matched"), "{err}");
        assert_eq!(dir_fleet(&named, &["--board", "unknown board"]).0, 2);
        let (code, _, err) = db_fleet(db, &["--board", "No Such Board"]);
        assert_eq!(code, 2, "a board matching nothing is a usage error: {err}");
        assert!(err.contains(&board), "the boards stored are listed: {err}");
        let (code, _, err) = db_fleet(db, &["--since", "last week"]);
        assert_eq!(code, 2, "{err}");
    }
    let missing = format!("sqlite:{}", tmp.path().join("no.db").display());
    let (code, _, err) = db_fleet(&missing, &[]);
    assert_eq!(
        code, 2,
        "a missing database file is not an empty fleet: {err}"
    );
    assert!(!tmp.path().join("no.db").exists());

    // The page: token-free, on its own address, the same JSON, HTML with the counts.
    for db in [&sqlite, &pg.url()] {
        let page_port = free_port();
        let page = format!("127.0.0.1:{page_port}");
        let _c = Collector::start_with(db, &["--page-listen", &page, "--page-refresh", "7"]);
        let base = format!("http://{page}");
        let (status, json) = get(&format!("{base}/fleet.json"));
        assert_eq!(status, 200);
        same(
            &json,
            &db_fleet(db, &["--format", "json"]).1,
            &format!("{db}: /fleet.json is `fleet` from the summaries"),
        );
        agree(&json, &dir_json, &format!("{db}: /fleet.json"));
        let (status, html) = get(&format!("{base}/fleet"));
        assert_eq!(status, 200);
        assert!(html.contains("<meta http-equiv=\"refresh\" content=\"7\">"));
        assert!(
            html.contains("<div>120 reports, "),
            "{db}: the page counts 120 reports"
        );
        // Its links to outliers' reports are served, token-free, as they were sent.
        let at = html
            .find("href=\"reports/")
            .expect("the page links an outlier's report")
            + 6;
        let link = &html[at..at + html[at..].find('"').unwrap()];
        let (status, raw) = get(&format!("{base}/{link}"));
        assert_eq!(status, 200);
        let name = link.trim_start_matches("reports/");
        assert_eq!(
            raw.as_bytes(),
            std::fs::read(named.join(name)).unwrap(),
            "{link}"
        );
        let enc = board.replace(' ', "%20");
        let (_, want, _) = dir_fleet(&named, &["--board", &board, "--format", "json"]);
        let n = serde_json::from_str::<serde_json::Value>(&want).unwrap()["reports"].clone();
        let (status, html) = get(&format!("{base}/fleet?board={enc}"));
        assert_eq!(status, 200);
        assert!(
            html.contains(&format!("<div>{n} reports, ")),
            "{db}: ?board= counts {n}"
        );
        let (status, _) = get(&format!("{base}/fleet?since=never"));
        assert_eq!(status, 400);
        let (status, body) = get(&format!("{base}/fleet?board=Nope"));
        assert_eq!(status, 404, "{body}");
        // The upload endpoint is not on the page's address.
        let (status, _) = get(&format!("{base}/api/v1/reports"));
        assert_eq!(status, 404);
    }
}

/// 30 reports uploaded to a SQLite collector, its tables then changed by `older` (SQL) into
/// those of an older collector, and the fleet of the result beside the directory's: the
/// first fleet query back-fills what the older collector did not store.
fn back_filled(seed: u32, older: &str) -> (TempDir, String) {
    let tmp = TempDir::new("fleetdb-old");
    let reports = gen(30, seed, 2, "yaml", &tmp.path().join("fleet"));
    let db = format!("sqlite:{}", tmp.path().join("r.db").display());
    let named = tmp.path().join("named");
    {
        let c = Collector::start(&db);
        upload_all(&c.url(), &reports, &named);
    }
    let conn = rusqlite::Connection::open(tmp.path().join("r.db")).unwrap();
    conn.execute_batch(older).unwrap();
    drop(conn);
    let (code, json, err) = db_fleet(&db, &["--exact", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    same(&json, &dir_fleet(&named, &["--format", "json"]).1, older);
    (tmp, db)
}

#[test]
fn a_database_from_before_the_fleet_table_is_back_filled_on_first_use() {
    // As a collector before the table wrote it: no fleet_records at all.
    let (_tmp, db) = back_filled(23, "DROP TABLE fleet_records");
    assert_eq!(count(&db, "fleet_records"), 30);
}

/// Version 1 stored each record as JSON in `body`, in a table without the `record` column:
/// opening such a database adds the column, and the first fleet query extracts its reports
/// again from their raw documents (the current version, the binary record), with the same
/// fleet.
#[test]
fn a_database_of_json_records_is_back_filled_to_the_binary_record() {
    // The version 1 table, as that collector created it, with rows of its kind.
    let (tmp, _db) = back_filled(
        29,
        "DROP TABLE fleet_records;
         CREATE TABLE fleet_records (
             report_id TEXT PRIMARY KEY REFERENCES reports (report_id) ON DELETE CASCADE,
             file TEXT NOT NULL, board TEXT, started_ns INTEGER NOT NULL, kind TEXT NOT NULL,
             body TEXT NOT NULL, version INTEGER NOT NULL);
         INSERT INTO fleet_records SELECT report_id, report_id || '.yaml', board, 0,
             'record', '{\"not\": \"a record of this version\"}', 1 FROM reports;",
    );
    let conn = rusqlite::Connection::open(tmp.path().join("r.db")).unwrap();
    let (current, with_record): (i64, i64) = conn
        .query_row(
            "SELECT count(*) FILTER (WHERE version = ?1), count(record) FROM fleet_records",
            [usbperf_collect::ingest::FLEET_RECORD_VERSION],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((current, with_record), (30, 30));
}

/// The wear of each part from the database is the wear from the directory, on both
/// databases: a generated fleet of 15 units followed six months into the field (factory and
/// field reports, phase set by config), one part wearing at 4 %/month.
#[test]
fn wear_per_part_from_sqlite_and_postgres_is_the_wear_from_a_directory() {
    let tmp = TempDir::new("fleetdb-wear");
    let dir = tmp.path().join("gen");
    let mut args = vec![
        "--units", "15", "--seed", "31", "--format", "json", "--schema", "2",
    ];
    // Six months of field reports that all lie before today: the collector refuses a report
    // dated more than a day after its clock.
    args.extend(["--start", "2025-09-01", "--field-months", "6", "--out"]);
    args.push(dir.to_str().unwrap());
    let reports = fleet_gen::generate_args(&args).files;
    assert_eq!(reports.len(), 15 * 7);
    let pg = Pg::start();
    let sqlite = format!("sqlite:{}", tmp.path().join("w.db").display());
    for (i, db) in [sqlite.clone(), pg.url()].iter().enumerate() {
        let c = Collector::start_with(db, &[]);
        upload_all(&c.url(), &reports, &tmp.path().join(format!("named{i}")));
    }
    let named = tmp.path().join("named0");
    let (code, dir_json, err) = dir_fleet(&named, &["--wear", "--format", "json"]);
    assert_eq!(code, 0, "usbperf-matrix fleet --wear: {err}");
    let v: serde_json::Value = serde_json::from_str(&dir_json).unwrap();
    assert_eq!(v["wear"]["parts"], 15, "{:#}", v["wear"]);
    assert_eq!(v["wear"]["fast"], 1, "{:#}", v["wear"]);
    for db in [&sqlite, &pg.url()] {
        let (code, json, err) = db_fleet(db, &["--wear", "--format", "json"]);
        assert_eq!(code, 0, "usbperf-collect fleet --db {db} --wear: {err}");
        same(
            &json,
            &dir_json,
            &format!("{db}: fleet --wear --format json"),
        );
        let (_, text, _) = db_fleet(db, &["--wear", "--format", "text"]);
        same(
            &text,
            &dir_fleet(&named, &["--wear", "--format", "table"]).1,
            &format!("{db}: fleet --wear text"),
        );
        assert!(text.contains("    fast: emmc 0x000015 "), "{text}");
    }
    // Seven months: the summaries a query reads are days, weeks, 13 weeks and years (the
    // spans begin on Mondays counted from 1970: a year on 2025-10-20, 13 weeks on
    // 2026-01-19), chosen by where `--since` falls; each cover agrees with the directory.
    for since in [
        None,
        Some("2025-09-10"),
        Some("2025-11-05"),
        Some("2026-01-21"),
    ] {
        let mut a = vec!["--format", "json"];
        if let Some(d) = since {
            a.extend(["--since", d]);
        }
        let (code, want, err) = dir_fleet(&named, &a);
        assert_eq!(code, 0, "{a:?}: {err}");
        for db in [&sqlite, &pg.url()] {
            let (code, got, err) = db_fleet(db, &a);
            assert_eq!(code, 0, "{db} {a:?}: {err}");
            agree(&got, &want, &format!("{db} {a:?} from summaries"));
        }
    }
}

/// Runs the power-cut test's two phases on a file in `work` and writes each verdict's report
/// into `reports`: one that kept every block, then one with five acknowledged blocks zeroed.
fn power_cut_reports(work: &Path, reports: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::FileExt;
    std::fs::create_dir_all(reports).unwrap();
    let (t, s) = (work.join("pc.bin"), work.join("pc.state"));
    let run = |args: &[&str]| {
        let out = Command::new(matrix_bin())
            .args(args)
            .env("COLUMNS", "1000")
            .output()
            .unwrap();
        out.status.code()
    };
    let (t_s, s_s, r_s) = (
        t.to_str().unwrap(),
        s.to_str().unwrap(),
        reports.to_str().unwrap(),
    );
    let write = ["power-cut", "write", "--target", t_s, "--state", s_s];
    assert_eq!(run(&[&write[..], &["--size", "1M"]].concat()), Some(0));
    let verify = ["power-cut", "verify", "--state", s_s, "--report-dir", r_s];
    assert_eq!(run(&[&verify[..], &["--keep"]].concat()), Some(0));
    let f = std::fs::OpenOptions::new().write(true).open(&t).unwrap();
    f.write_all_at(&vec![0u8; 5 * 4096], 3 * 4096).unwrap();
    drop(f);
    assert_eq!(run(&verify), Some(1), "the zeroed blocks fail the verify");
    let mut files: Vec<PathBuf> = std::fs::read_dir(reports)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    files
}

/// A power-cut verdict leaves the unit like a factory report: `usbperf-matrix upload` sends
/// it, the collector stores it, and the fleet from the database counts its passes and
/// failures per board and part exactly as the fleet from a directory of the same files.
#[test]
fn power_cut_verdicts_uploaded_are_counted_by_the_fleet_from_the_database_as_from_files() {
    let tmp = TempDir::new("fleetdb-pc");
    let mut reports = gen(5, 31, 2, "json", &tmp.path().join("gen"));
    let cuts = power_cut_reports(tmp.path(), &tmp.path().join("cuts"));
    let pg = Pg::start();
    let sqlite = format!("sqlite:{}", tmp.path().join("r.db").display());
    let named = tmp.path().join("named");
    for (i, db) in [sqlite.clone(), pg.url()].iter().enumerate() {
        let c = Collector::start_with(db, &[]);
        upload_all(&c.url(), &reports, &tmp.path().join(format!("named{i}")));
        let out = upload_cmd(&c.url(), &c.tokens, &tmp.path().join(format!("spool{i}")))
            .args(&cuts)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    // The directory run reads the same files, named as the database's export names them.
    // `upload` signed them (this machine's own reports) with the key beside the spools: the
    // files carry the same key's signature, so both fleets count them signed.
    let key = usbperf::upload::key::UnitKey::load_or_create(&usbperf::upload::key::default_path(
        &tmp.path().join("spool0"),
    ))
    .unwrap();
    for p in &cuts {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
        let id = v["report_id"].as_str().unwrap();
        let copy = tmp.path().join(format!("named0/{id}.json"));
        std::fs::copy(p, &copy).unwrap();
        key.seal_file(&copy).unwrap();
    }
    reports.extend(cuts);
    std::fs::rename(tmp.path().join("named0"), &named).unwrap();

    let args = ["--format", "json", "--group-by", "board,device-model"];
    let (code, dir_json, err) = dir_fleet(&named, &args);
    assert_eq!(code, 0, "usbperf-matrix fleet: {err}");
    let v: serde_json::Value = serde_json::from_str(&dir_json).unwrap();
    assert_eq!(v["reports"], 7, "{v}");
    let cut: Vec<&serde_json::Value> = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["metrics"].as_array().unwrap())
        .filter(|m| m["metric"] == "power-cut.lost_blocks")
        .collect();
    assert_eq!(cut.len(), 1, "one board and part ran the power cut: {v}");
    assert_eq!(
        (cut[0]["count"].as_u64(), cut[0]["pass_rate"].as_f64()),
        (Some(2), Some(0.5)),
        "{}",
        cut[0]
    );
    for db in [&sqlite, &pg.url()] {
        let mut exact = args.to_vec();
        exact.push("--exact");
        let (code, json, err) = db_fleet(db, &exact);
        assert_eq!(code, 0, "usbperf-collect fleet --db {db}: {err}");
        same(&json, &dir_json, &format!("{db}: fleet with power cuts"));
        let (code, json, err) = db_fleet(db, &args);
        assert_eq!(code, 0, "usbperf-collect fleet --db {db}: {err}");
        agree(
            &json,
            &dir_json,
            &format!("{db}: power cuts from summaries"),
        );
    }
}

/// A rebuild makes new summaries beside the ones that answer, which keep answering, and
/// keep taking new reports, until the new ones are built; reports that arrive meanwhile are
/// in both. A generation no collector has folded for an hour (the one replaced, one of a
/// build that no longer runs) is dropped by the next fold. SQLite and PostgreSQL.
#[test]
fn a_rebuild_builds_new_summaries_beside_the_ones_that_answer_until_they_are_built() {
    let tmp = TempDir::new("fleetdb-gen");
    let reports = gen(40, 41, 2, "json", &tmp.path().join("gen"));
    let pg = Pg::start();
    let sqlite = format!("sqlite:{}", tmp.path().join("g.db").display());
    for (i, db) in [sqlite, pg.url()].iter().enumerate() {
        let named = tmp.path().join(format!("named{i}"));
        let db = db.as_str();
        // A collector whose own folder waits (an hour, or 512 reports): the queries and
        // `fleet-rebuild` fold here, so each step is known.
        let idle = Collector::start_with(db, &["--fold-every", "3600"]);
        upload_all(&idle.url(), &reports[..30], &named);
        let (code, first, err) = db_fleet(db, &["--format", "json"]);
        assert_eq!(code, 0, "{db}: {err}");
        let v: serde_json::Value = serde_json::from_str(&first).unwrap();
        assert_eq!(
            v["reports"], 30,
            "{db}: the first fold builds the first summaries"
        );
        let out = Command::new(collect_bin())
            .args(["fleet-rebuild", "--db", db, "--background"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{db}: {err}");
        assert!(err.contains("30 reports to fold"), "{db}: {err}");
        assert_eq!(count(db, "fleet_generations WHERE NOT ready"), 1, "{db}");
        // The summaries that answer are the first ones, and a query leaves the new ones to
        // the collectors' folders.
        let (_, again, _) = db_fleet(db, &["--format", "json"]);
        same(&again, &first, &format!("{db}: during the rebuild"));
        assert_eq!(count(db, "fleet_gen_queue WHERE gen = 2"), 30, "{db}");
        // Reports stored while it builds are queued for both: the summaries that answer
        // take them, and so will the new ones.
        upload_all(&idle.url(), &reports[30..], &named);
        assert_eq!(count(db, "fleet_gen_queue WHERE gen = 2"), 40, "{db}");
        let (_, during, _) = db_fleet(db, &["--format", "json"]);
        let v: serde_json::Value = serde_json::from_str(&during).unwrap();
        assert_eq!(
            v["reports"], 40,
            "{db}: the serving summaries take new reports"
        );
        assert_eq!(count(db, "fleet_gen_queue WHERE gen = 2"), 40, "{db}");
        drop(idle);
        // A collector's folder builds them (its first fold, at start).
        let c = Collector::start_with(db, &["--fold-every", "2"]);
        let t0 = std::time::Instant::now();
        while count(db, "fleet_gen_queue") > 0 || count(db, "fleet_generations WHERE ready") < 2 {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(120),
                "{db}: the collector did not build the new summaries: {} queued, {} ready; \
                 its log: {}",
                count(db, "fleet_gen_queue"),
                count(db, "fleet_generations WHERE ready"),
                c.stderr_all()
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        drop(c);
        let (_, dir_json, _) = dir_fleet(&named, &["--format", "json"]);
        let (_, now, _) = db_fleet(db, &["--format", "json"]);
        agree(&now, &dir_json, &format!("{db}: after the rebuild"));
        let v: serde_json::Value = serde_json::from_str(&now).unwrap();
        assert_eq!(v["reports"], 40, "{db}");
        // The first generation, no longer folded, and one of a build that no longer runs:
        // an hour after their last fold, the next fold drops them.
        execute(
            db,
            "UPDATE fleet_generations SET folded_at = folded_at - 7200 WHERE gen = 1; \
             INSERT INTO fleet_generations (gen, name, backlog, ready, folded_at) \
             VALUES (9, 'summaries 0 records 0 rules 0', true, true, 0); \
             INSERT INTO fleet_gen_queue (gen, report_id) VALUES (9, 'gone');",
        );
        let out = Command::new(collect_bin())
            .args(["fleet-rebuild", "--db", db, "--resume"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{db}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(count(db, "fleet_generations"), 1, "{db}");
        assert_eq!(count(db, "fleet_generations WHERE gen = 2"), 1, "{db}");
        for t in ["fleet_gen_queue", "fleet_gen_units", "fleet_gen_summaries"] {
            assert_eq!(count(db, &format!("{t} WHERE gen <> 2")), 0, "{db}: {t}");
        }
        let (_, last, _) = db_fleet(db, &["--format", "json"]);
        same(
            &last,
            &now,
            &format!("{db}: after the old summaries were dropped"),
        );
    }
}

/// 10,000 reports (2,500 units, each a factory report and three monthly field reports, two
/// boards, three image builds with a planted regression, 30 planted outliers) stored by the
/// collector's own ingest into SQLite: the fleet from its summaries agrees with the fleet
/// of the same reports as files within the stated error, grouped both ways.
#[test]
fn ten_thousand_reports_from_the_database_agree_with_the_directory_within_the_stated_error() {
    let tmp = TempDir::new("fleetdb-10k");
    let gen_dir = tmp.path().join("gen");
    let args: Vec<String> = [
        "--units",
        "2500",
        "--seed",
        "37",
        "--format",
        "json",
        "--start",
        "2025-09-01",
        "--out",
        gen_dir.to_str().unwrap(),
    ]
    .iter()
    .chain(&fleet_gen::TEN_THOUSAND)
    .map(|s| s.to_string())
    .collect();
    let reports = fleet_gen::generate_args(&args).files;
    assert_eq!(reports.len(), 10_000);
    let db = format!("sqlite:{}", tmp.path().join("10k.db").display());
    let named = tmp.path().join("named");
    std::fs::create_dir_all(&named).unwrap();
    {
        // The collector's ingest and store, in process: 10,000 POSTs add nothing the other
        // tests do not check, and would take minutes.
        let store = usbperf_collect::store::open(&db, 1, None).unwrap();
        for p in &reports {
            let raw = std::fs::read(p).unwrap();
            let rec = usbperf_collect::ingest::parse(
                &raw,
                true,
                None,
                None,
                &usbperf_report::decode::LIMITS,
            )
            .unwrap();
            std::fs::write(named.join(&rec.fleet.file), &raw).unwrap();
            store.insert(&rec, &raw).unwrap();
        }
    }
    for group_by in [None, Some("device-class,port,device-model")] {
        let mut a = vec!["--format", "json"];
        if let Some(g) = group_by {
            a.extend(["--group-by", g]);
        }
        let (code, want, err) = dir_fleet(&named, &a);
        assert_eq!(code, 0, "{a:?}: {err}");
        let (code, got, err) = db_fleet(&db, &a);
        assert_eq!(code, 0, "{a:?}: {err}");
        let w: serde_json::Value = serde_json::from_str(&want).unwrap();
        assert_eq!(w["reports"], 10_000);
        agree(&got, &want, &format!("10,000 reports {a:?}"));
    }
}
