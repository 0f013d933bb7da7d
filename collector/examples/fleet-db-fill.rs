//! Fills a database for `scripts/bench/bench-fleet-db.py`: N reports made from K distinct ones
//! (from the unit crate's fleet-gen example), each copy with its own report_id and unit serial,
//! so the fleet sees N reports of N units. Each distinct report goes through the collector's own ingest
//! (`ingest::parse`: its columns and fleet record); a copy then only renames the ids in the
//! record, and the rows go in by SQL in one transaction: through HTTP at ~400 reports/s the
//! fill alone would take minutes. What the fleet query reads (`fleet_records`) is what the
//! collector stores; the copies' `raw` is left empty (no fleet query reads it; 100,000 real
//! ones would be 4 GB), and `devices` / `metrics` rows are not written.
//!
//! usage: fleet-db-fill --db URL --from DIR --count N [--dir-out DIR --dir-count M]
//! `--dir-out` also writes the first M copies as report files (ids renamed in the text) for
//! `usbperf-matrix fleet`, named `<report_id>.<format>`.

use std::path::PathBuf;

use anyhow::{bail, Context};
use usbperf_collect::ingest::{self, Record, FLEET_RECORD_VERSION};
use usbperf_collect::record;

struct Copy {
    rec: Record,
    record: Option<Vec<u8>>,
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let db = arg(&args, "--db").context("--db URL")?;
    let from = PathBuf::from(arg(&args, "--from").context("--from DIR")?);
    let count: usize = arg(&args, "--count").context("--count N")?.parse()?;
    let dir_out = arg(&args, "--dir-out").map(PathBuf::from);
    let dir_count: usize = arg(&args, "--dir-count").map_or(Ok(0), |s| s.parse())?;
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&from)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.sort();
    let mut distinct = Vec::new();
    for p in &paths {
        let raw = std::fs::read(p)?;
        let json = p.extension().is_some_and(|e| e == "json");
        let rec = ingest::parse(&raw, json, None, None, &usbperf_report::decode::LIMITS)
            .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
        distinct.push((rec, raw));
    }
    if distinct.is_empty() {
        bail!("{}: no reports", from.display());
    }
    let copy = |i: usize| -> Copy {
        let (r, _) = &distinct[i % distinct.len()];
        let id = format!("{}-{i:06}", r.report_id);
        let unit = format!("{}-{i:06}", r.unit);
        let mut rec = r.clone();
        if !r.fleet.record.is_empty() {
            // The distinct record was just encoded by ingest: it decodes.
            let mut u = record::decode(0, &r.fleet.record).expect("ingest's own record");
            for name in
                std::iter::once(&mut u.unit).chain(u.rejected.iter_mut().map(|f| &mut f.unit))
            {
                if *name == r.unit {
                    name.clone_from(&unit);
                }
            }
            u.identity = u.identity.replace(
                &format!("report_id {}", r.report_id),
                &format!("report_id {id}"),
            );
            rec.fleet.record = record::encode(&u);
        }
        rec.fleet.file = format!("{id}.{}", r.format);
        rec.report_id = id;
        rec.unit = unit;
        Copy {
            record: (!rec.fleet.record.is_empty()).then(|| rec.fleet.record.clone()),
            rec,
        }
    };
    if let Some(dir) = &dir_out {
        std::fs::create_dir_all(dir)?;
        for i in 0..dir_count {
            let (r, raw) = &distinct[i % distinct.len()];
            let c = copy(i);
            let text = String::from_utf8_lossy(raw)
                .replace(&r.report_id, &c.rec.report_id)
                .replace(&format!("'{}'", r.unit), &format!("'{}'", c.rec.unit));
            std::fs::write(dir.join(&c.rec.fleet.file), text)?;
        }
    }
    if let Some(path) = db.strip_prefix("sqlite:") {
        // The collector creates the tables.
        drop(usbperf_collect::store::open(&db, 1, None)?);
        let mut c = rusqlite::Connection::open(path)?;
        let tx = c.transaction()?;
        {
            let mut rep = tx.prepare(
                "INSERT INTO reports (report_id, schema_version, unit, board, hostname, \
                 started_at, finished_at, status, pass, exit_code, format, raw) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, x'')",
            )?;
            let mut fl = tx.prepare(
                "INSERT INTO fleet_records (report_id, file, board, started_ns, kind, body, \
                 version, record) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            for i in 0..count {
                let Copy { rec: r, record } = copy(i);
                rep.execute(rusqlite::params![
                    r.report_id,
                    r.schema_version,
                    r.unit,
                    r.board,
                    r.hostname,
                    r.started_at,
                    r.finished_at,
                    r.status,
                    r.pass,
                    r.exit_code,
                    r.format
                ])?;
                fl.execute(rusqlite::params![
                    r.report_id,
                    r.fleet.file,
                    r.board,
                    r.fleet.started_ns,
                    r.fleet.kind,
                    r.fleet.body,
                    FLEET_RECORD_VERSION,
                    record
                ])?;
            }
        }
        tx.commit()?;
    } else {
        drop(usbperf_collect::store::open(&db, 1, None)?);
        let mut c = postgres::Client::connect(&db, postgres::NoTls)?;
        let mut tx = c.transaction()?;
        let rep = tx.prepare(
            "INSERT INTO reports (report_id, schema_version, unit, board, hostname, \
             started_at, finished_at, status, pass, exit_code, format, raw) \
             VALUES ($1, $2, $3, $4, $5, CAST($6::text AS timestamptz), \
             CAST($7::text AS timestamptz), $8, $9, $10, $11, '')",
        )?;
        let fl = tx.prepare(
            "INSERT INTO fleet_records (report_id, file, board, started_ns, kind, body, \
             version, record) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )?;
        let version = FLEET_RECORD_VERSION as i32;
        for i in 0..count {
            let Copy { rec: r, record } = copy(i);
            let sv = r.schema_version as i32;
            tx.execute(
                &rep,
                &[
                    &r.report_id,
                    &sv,
                    &r.unit,
                    &r.board,
                    &r.hostname,
                    &r.started_at,
                    &r.finished_at,
                    &r.status,
                    &r.pass,
                    &r.exit_code,
                    &r.format,
                ],
            )?;
            tx.execute(
                &fl,
                &[
                    &r.report_id,
                    &r.fleet.file,
                    &r.board,
                    &r.fleet.started_ns,
                    &r.fleet.kind,
                    &r.fleet.body,
                    &version,
                    &record,
                ],
            )?;
        }
        tx.commit()?;
        // Fresh statistics, as autovacuum would have them on a database filled over months.
        c.batch_execute("ANALYZE fleet_records")?;
    }
    println!(
        "fleet-db-fill: {count} reports from {} distinct",
        distinct.len()
    );
    Ok(())
}
