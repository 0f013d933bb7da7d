//! Fills a database for `scripts/bench/bench-fleet-db.py`: N reports made from K distinct ones
//! (from the unit crate's fleet-gen example), each copy with its own report_id and unit serial,
//! so the fleet sees N reports of N units. Each distinct report goes through the collector's own ingest
//! (`ingest::parse`: its columns and fleet record); a copy then only renames the ids in the
//! record, and the rows go in by SQL in one transaction: through HTTP at ~400 reports/s the
//! fill alone would take minutes. What the fleet query reads (`fleet_records`) is what the
//! collector stores; the copies' `raw` is left empty (no fleet query reads it; 100,000 real
//! ones would be 4 GB), and `devices` / `metrics` rows are not written.
//!
//! usage: fleet-db-fill --db URL --from DIR --count N [--spread-days D]
//!                      [--dir-out DIR --dir-count M]
//! `--spread-days D` moves each round of K copies later in time, the last round D days after
//! the first, so N reports span a product line's years (D = 3650: ten) instead of piling
//! onto the K reports' own days: the summaries a query merges grow with the days, and a
//! benchmark of a line's whole life has its days. `--dir-out` also writes the first M copies
//! (unmoved) as report files (ids renamed in the text) for `usbperf-matrix fleet`, named
//! `<report_id>.<format>`.
//!
//! PostgreSQL takes the rows through `COPY` (text format), as a bulk load is done there: row
//! by row, ten million took most of an hour.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context};
use chrono::{DateTime, Duration, SecondsFormat};
use usbperf_collect::ingest::{self, Record, FLEET_RECORD_VERSION};
use usbperf_collect::record;
use usbperf_report::seal;

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
    let spread_days: i64 = arg(&args, "--spread-days").map_or(Ok(0), |s| s.parse())?;
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
    let rounds = count.div_ceil(distinct.len()).max(2) as i64 - 1;
    // Copy i's shift in time: its round's share of the spread, in whole days.
    let shift = |i: usize| Duration::days((i / distinct.len()) as i64 * spread_days / rounds);
    let moved = |text: &str, by: Duration| -> String {
        match DateTime::parse_from_rfc3339(text) {
            Ok(t) => (t + by).to_rfc3339_opts(SecondsFormat::AutoSi, true),
            Err(_) => text.to_string(),
        }
    };
    let copy = |i: usize| -> Copy {
        let (r, _) = &distinct[i % distinct.len()];
        let by = shift(i);
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
            u.started_at += by;
            rec.fleet.record = record::encode(&u);
        }
        if by != Duration::zero() {
            rec.started_at = moved(&r.started_at, by);
            rec.finished_at = r.finished_at.as_deref().map(|t| moved(t, by));
            rec.fleet.started_ns += by.num_nanoseconds().unwrap_or(0);
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
            if shift(i) != Duration::zero() {
                bail!("--dir-out writes unmoved copies: give --dir-count at most K with --spread-days");
            }
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
        // The reports first: the records reference them.
        {
            let mut w = std::io::BufWriter::with_capacity(
                1 << 20,
                tx.copy_in(
                    "COPY reports (report_id, schema_version, unit, board, hostname, \
                     started_at, finished_at, status, pass, exit_code, format, raw) FROM STDIN",
                )?,
            );
            for i in 0..count {
                let r = copy(i).rec;
                let fields = [
                    text(&r.report_id),
                    r.schema_version.to_string(),
                    text(&r.unit),
                    opt(r.board.as_deref()),
                    opt(r.hostname.as_deref()),
                    text(&r.started_at),
                    opt(r.finished_at.as_deref()),
                    text(&r.status),
                    r.pass.to_string(),
                    r.exit_code.map_or(NULL.to_string(), |c| c.to_string()),
                    text(r.format),
                    String::new(),
                ];
                writeln!(w, "{}", fields.join("\t"))?;
            }
            w.into_inner().map_err(|e| e.into_error())?.finish()?;
        }
        {
            let mut w = std::io::BufWriter::with_capacity(
                1 << 20,
                tx.copy_in(
                    "COPY fleet_records (report_id, file, board, started_ns, kind, body, \
                     version, record) FROM STDIN",
                )?,
            );
            for i in 0..count {
                let Copy { rec: r, record } = copy(i);
                let fields = [
                    text(&r.report_id),
                    text(&r.fleet.file),
                    opt(r.board.as_deref()),
                    r.fleet.started_ns.to_string(),
                    text(r.fleet.kind),
                    text(&r.fleet.body),
                    FLEET_RECORD_VERSION.to_string(),
                    record.map_or(NULL.to_string(), |b| format!("\\\\x{}", seal::hex(&b))),
                ];
                writeln!(w, "{}", fields.join("\t"))?;
            }
            w.into_inner().map_err(|e| e.into_error())?.finish()?;
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

/// `COPY`'s text format's NULL.
const NULL: &str = "\\N";

/// A value in `COPY`'s text format: backslash, tab, newline and carriage return escaped.
fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

fn opt(s: Option<&str>) -> String {
    s.map_or(NULL.to_string(), text)
}
