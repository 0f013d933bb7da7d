//! Owns the embedded database: one SQLite file in WAL mode with `synchronous=FULL`, so a
//! commit is on disk (WAL fsync'd) before `insert` returns; a collector killed at any moment
//! reopens it with every committed report. One connection behind a mutex: SQLite has a
//! single writer, and a report's transaction is well under a millisecond.

use std::sync::Mutex;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use super::{
    now_s, serving_and_building, FleetFilter, FleetRow, FoldScope, GenRow, Generational,
    Generations, Pending, Store, StoreError, Stored, SummaryFilter, BACKFILL_BATCH,
};
use crate::ingest::{rfc3339_ns, Record, FLEET_RECORD_VERSION};
use crate::summaries::{fold_batch, fold_batch_size, within_batch_days, RETIRE_AFTER_S};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS reports (
    report_id TEXT PRIMARY KEY,
    schema_version INTEGER NOT NULL,
    unit TEXT NOT NULL,
    board TEXT,
    hostname TEXT,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    pass INTEGER NOT NULL,
    exit_code INTEGER,
    format TEXT NOT NULL,
    raw BLOB NOT NULL,
    body_sha256 TEXT,
    -- The name of the token that stored it (the token file's NAME, or line-N).
    token TEXT,
    -- The unit key that signed it (hex), verified on receipt; none for an unsigned report.
    signer_key TEXT,
    received_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
-- Each unit's key, enrolled by its first signed report.
CREATE TABLE IF NOT EXISTS unit_keys (
    unit TEXT PRIMARY KEY,
    key TEXT NOT NULL,
    report_id TEXT NOT NULL,
    enrolled_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX IF NOT EXISTS reports_unit ON reports (unit);
CREATE INDEX IF NOT EXISTS reports_board_time ON reports (board, started_at);
CREATE INDEX IF NOT EXISTS reports_time ON reports (started_at);
CREATE TABLE IF NOT EXISTS devices (
    report_id TEXT NOT NULL REFERENCES reports (report_id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    name TEXT NOT NULL,
    class TEXT NOT NULL,
    port TEXT NOT NULL,
    model TEXT,
    serial TEXT,
    pass INTEGER NOT NULL,
    PRIMARY KEY (report_id, idx)
);
CREATE INDEX IF NOT EXISTS devices_serial ON devices (serial);
CREATE INDEX IF NOT EXISTS devices_model ON devices (class, model);
CREATE TABLE IF NOT EXISTS metrics (
    report_id TEXT NOT NULL,
    device_idx INTEGER NOT NULL,
    cell_idx INTEGER NOT NULL,
    workload TEXT NOT NULL,
    status TEXT NOT NULL,
    mib_per_s REAL,
    iops REAL,
    p99_ns INTEGER,
    PRIMARY KEY (report_id, device_idx, cell_idx),
    FOREIGN KEY (report_id, device_idx) REFERENCES devices (report_id, idx) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS metrics_workload ON metrics (workload);
CREATE TABLE IF NOT EXISTS fleet_records (
    report_id TEXT PRIMARY KEY REFERENCES reports (report_id) ON DELETE CASCADE,
    file TEXT NOT NULL,
    board TEXT,
    started_ns INTEGER NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    version INTEGER NOT NULL,
    record BLOB
);
CREATE INDEX IF NOT EXISTS fleet_records_time ON fleet_records (started_ns);
CREATE INDEX IF NOT EXISTS fleet_records_board_time ON fleet_records (board, started_ns);
CREATE INDEX IF NOT EXISTS fleet_records_version ON fleet_records (version);
CREATE TABLE IF NOT EXISTS collector_health (id INTEGER PRIMARY KEY, checked_at TEXT NOT NULL);
-- The generations of the fleet's summaries, each of one build's format and rules (`name`),
-- built beside each other (see collector/src/summaries.rs). `backlog`: every record stored
-- before it was made is queued; `ready`: its queue was empty once, so it answers;
-- `folded_at`: its last fold (seconds since 1970), which keeps it from being dropped.
-- (The tables of the first summaries, fleet_queue, fleet_units, fleet_summaries and
-- fleet_meta, are no longer read: drop them once no collector of that build runs.)
CREATE TABLE IF NOT EXISTS fleet_generations (
    gen INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    backlog INTEGER NOT NULL DEFAULT 0,
    ready INTEGER NOT NULL DEFAULT 0,
    folded_at INTEGER NOT NULL
);
-- Reports stored and not yet folded into a generation's summaries, in the order queued.
CREATE TABLE IF NOT EXISTS fleet_gen_queue (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    gen INTEGER NOT NULL,
    report_id TEXT NOT NULL,
    UNIQUE (gen, report_id)
);
CREATE INDEX IF NOT EXISTS fleet_gen_queue_order ON fleet_gen_queue (gen, seq);
-- Each unit's latest run and keys (what a unit counts as in the summaries).
CREATE TABLE IF NOT EXISTS fleet_gen_units (
    gen INTEGER NOT NULL,
    unit TEXT NOT NULL,
    keys INTEGER NOT NULL,
    state BLOB NOT NULL,
    PRIMARY KEY (gen, unit)
);
CREATE INDEX IF NOT EXISTS fleet_gen_units_several ON fleet_gen_units (gen, unit) WHERE keys > 1;
-- The fleet's summaries per board and day (span 1), week (7), 13 weeks (91) or 52 weeks
-- (364), and the trends of days and weeks (span -1 and -7), see collector/src/summaries.rs.
CREATE TABLE IF NOT EXISTS fleet_gen_summaries (
    gen INTEGER NOT NULL,
    span INTEGER NOT NULL,
    start INTEGER NOT NULL,
    board TEXT NOT NULL,
    figures INTEGER NOT NULL,
    summary BLOB NOT NULL,
    PRIMARY KEY (gen, span, start, board)
);
-- The first and last day with figures, without reading the days' summaries (MB each).
CREATE INDEX IF NOT EXISTS fleet_gen_summaries_figures ON fleet_gen_summaries (gen, span, board, start) WHERE figures;
CREATE INDEX IF NOT EXISTS fleet_records_issues ON fleet_records (board, started_ns) WHERE kind <> 'record';
";

/// A stored report queued for every generation of summaries kept but one a newer ready
/// generation of its build replaced (one writer: a generation made meanwhile is made before
/// or after, never during). SQLite parses an upsert after a SELECT only behind a WHERE.
const QUEUE: &str = "INSERT INTO fleet_gen_queue (gen, report_id) \
     SELECT gen, ?1 FROM fleet_generations g WHERE NOT EXISTS (SELECT 1 FROM \
     fleet_generations n WHERE n.name = g.name AND n.ready AND n.gen > g.gen) \
     ON CONFLICT DO NOTHING";

/// A queue entry as a fold reads it: (seq, file, kind, record, started_ns).
type QueueRow = (i64, String, String, Option<Vec<u8>>, i64);

const PUT_FLEET: &str = "INSERT INTO fleet_records (report_id, file, board, started_ns, kind, \
     body, version, record) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (report_id) DO \
     UPDATE SET file = excluded.file, board = excluded.board, started_ns = excluded.started_ns, \
     kind = excluded.kind, body = excluded.body, version = excluded.version, \
     record = excluded.record";

/// Does every report have its fleet row, of this version (`?1`)?
const FLEET_DONE: &str = "SELECT (SELECT count(*) FROM reports) = (SELECT count(*) FROM \
     fleet_records) AND NOT EXISTS (SELECT 1 FROM fleet_records WHERE version < ?1)";

/// The encoded record as stored: NULL for the rows without one.
fn record_value(record: &[u8]) -> Option<&[u8]> {
    (!record.is_empty()).then_some(record)
}

pub struct Sqlite {
    path: String,
    conn: Mutex<Connection>,
    /// Every stored report had its fleet record of this version when last checked: what this
    /// process stores always has one, so the check (two counts over every report) runs
    /// once, not before every fold and query.
    backfilled: std::sync::atomic::AtomicBool,
}

impl Sqlite {
    pub fn open(path: &str) -> Result<Sqlite, StoreError> {
        let err = |err| StoreError::Sqlite {
            path: path.to_string(),
            err,
        };
        let conn = Connection::open(path).map_err(err)?;
        // WAL: readers (a fleet query, a backup) do not block the writer. FULL: the WAL is
        // fsync'd at every commit — NORMAL would lose the last commits on a power cut, and
        // they were acknowledged.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(err)?;
        conn.execute_batch(SCHEMA).map_err(err)?;
        // Columns added since the first release, added to a database from before them:
        // - fleet_records.record (the binary record): rows without it are extracted again by
        //   the next fleet query, as their version is older;
        // - reports.body_sha256: rows without it compare by their raw bytes;
        // - reports.token (the name of the token that stored it): older rows name none;
        // - reports.signer_key (the unit key that signed it): older rows name none.
        for (table, column, kind) in [
            ("fleet_records", "record", "BLOB"),
            ("reports", "body_sha256", "TEXT"),
            ("reports", "token", "TEXT"),
            ("reports", "signer_key", "TEXT"),
        ] {
            let has: bool = conn
                .query_row(
                    "SELECT count(*) > 0 FROM pragma_table_info(?1) WHERE name = ?2",
                    [table, column],
                    |row| row.get(0),
                )
                .map_err(err)?;
            if !has {
                conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind}"))
                    .map_err(err)?;
            }
        }
        Ok(Sqlite {
            path: path.to_string(),
            conn: Mutex::new(conn),
            backfilled: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// A read-only connection of its own: WAL readers do not block the writer, so the page's
    /// query never holds up a unit's upload.
    fn reader(&self) -> Result<Connection, StoreError> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| self.err(e))?;
        // Read through a memory map: the rows are hundreds of MB for a large fleet, and
        // page-sized read() calls cost more than the copy.
        conn.pragma_update(None, "mmap_size", 1i64 << 32)
            .map_err(|e| self.err(e))?;
        Ok(conn)
    }

    /// How many rows `table` holds.
    fn rows_in(&self, table: &str) -> Result<u64, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
            row.get::<_, i64>(0)
        })
        .map(|n| n as u64)
        .map_err(|e| self.err(e))
    }

    fn err(&self, err: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.clone(),
            err,
        }
    }
}

impl Sqlite {
    /// Gives every stored report its fleet row of this version; how many it extracted.
    fn backfill_now(&self) -> Result<u64, StoreError> {
        // Nothing to do, told by two counts (each over the smallest index) and the version
        // index: the join below visits every report, a tenth of a second over 100,000.
        // A fleet row always has its report (foreign key), so equal counts mean each
        // report has one.
        let done: bool = {
            let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            conn.query_row(FLEET_DONE, params![FLEET_RECORD_VERSION], |row| row.get(0))
                .map_err(|e| self.err(e))?
        };
        if done {
            return Ok(0);
        }
        let next = || {
            let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            let mut st = conn
                .prepare_cached(
                    "SELECT r.report_id, r.format, r.board, r.started_at, r.raw, r.signer_key \
                     FROM reports r \
                     LEFT JOIN fleet_records f ON f.report_id = r.report_id \
                     WHERE f.report_id IS NULL OR f.version < ?1 LIMIT ?2",
                )
                .map_err(|e| self.err(e))?;
            let rows = st
                .query_map(
                    params![FLEET_RECORD_VERSION, BACKFILL_BATCH as i64],
                    |row| {
                        Ok(Pending {
                            report_id: row.get(0)?,
                            format: row.get(1)?,
                            board: row.get(2)?,
                            started_ns: rfc3339_ns(&row.get::<_, String>(3)?),
                            raw: row.get(4)?,
                            signer_key: row.get(5)?,
                        })
                    },
                )
                .map_err(|e| self.err(e))?;
            rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
        };
        let put = |rows: &[(Pending, crate::ingest::FleetColumns)]| {
            let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            let tx = conn.transaction().map_err(|e| self.err(e))?;
            {
                let mut st = tx.prepare_cached(PUT_FLEET).map_err(|e| self.err(e))?;
                for (p, c) in rows {
                    st.execute(params![
                        p.report_id,
                        c.file,
                        p.board,
                        c.started_ns,
                        c.kind,
                        c.body,
                        FLEET_RECORD_VERSION,
                        record_value(&c.record)
                    ])
                    .map_err(|e| self.err(e))?;
                }
            }
            tx.commit().map_err(|e| self.err(e))
        };
        super::backfill(next, put)
    }
}

impl Generational for Sqlite {
    fn my_generations(&self, name: &str) -> Result<Vec<GenRow>, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = conn
            .prepare_cached(
                "SELECT gen, backlog, ready FROM fleet_generations WHERE name = ?1 ORDER BY gen",
            )
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params![name], |row| {
                Ok(GenRow {
                    gen: row.get(0)?,
                    backlog: row.get(1)?,
                    ready: row.get(2)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    fn new_generation(&self, name: &str, first: bool) -> Result<Option<i64>, StoreError> {
        let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let exists = tx
            .query_row(
                "SELECT 1 FROM fleet_generations WHERE name = ?1",
                params![name],
                |_| Ok(()),
            )
            .optional()
            .map_err(|e| self.err(e))?
            .is_some();
        if first && exists {
            return Ok(None);
        }
        let gen = tx
            .query_row(
                "INSERT INTO fleet_generations (gen, name, folded_at) \
                 SELECT coalesce(max(gen), 0) + 1, ?1, ?2 FROM fleet_generations RETURNING gen",
                params![name, now_s()],
                |row| row.get(0),
            )
            .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(Some(gen))
    }

    fn queue_backlog(&self, gen: i64) -> Result<u64, StoreError> {
        let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let done: bool = tx
            .query_row(
                "SELECT backlog FROM fleet_generations WHERE gen = ?1",
                params![gen],
                |row| row.get(0),
            )
            .map_err(|e| self.err(e))?;
        if !done {
            tx.execute(
                "INSERT INTO fleet_gen_queue (gen, report_id) SELECT ?1, report_id \
                 FROM fleet_records WHERE kind = 'record' ORDER BY started_ns, report_id \
                 ON CONFLICT DO NOTHING",
                params![gen],
            )
            .map_err(|e| self.err(e))?;
            tx.execute(
                "UPDATE fleet_generations SET backlog = 1 WHERE gen = ?1",
                params![gen],
            )
            .map_err(|e| self.err(e))?;
        }
        let n: i64 = tx
            .query_row(
                "SELECT count(*) FROM fleet_gen_queue WHERE gen = ?1",
                params![gen],
                |row| row.get(0),
            )
            .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(n as u64)
    }

    fn queued_in(&self, gen: i64) -> Result<u64, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        conn.query_row(
            "SELECT count(*) FROM fleet_gen_queue WHERE gen = ?1",
            params![gen],
            |row| row.get::<_, i64>(0),
        )
        .map(|n| n as u64)
        .map_err(|e| self.err(e))
    }

    fn queued_at_most(&self, gen: i64, n: usize) -> Result<bool, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        conn.query_row(
            "SELECT count(*) FROM (SELECT 1 FROM fleet_gen_queue WHERE gen = ?1 LIMIT ?2)",
            params![gen, n as i64 + 1],
            |row| row.get::<_, i64>(0),
        )
        .map(|c| c as u64 <= n as u64)
        .map_err(|e| self.err(e))
    }

    fn fold_generation(
        &self,
        gen: i64,
        queued: u64,
        before: u64,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<u64, StoreError> {
        let batch_size = fold_batch_size(queued);
        let mut folded = 0u64;
        loop {
            let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.err(e))?;
            let mut batch: Vec<QueueRow> = {
                let mut st = tx
                    .prepare_cached(
                        "SELECT q.seq, coalesce(f.file, ''), coalesce(f.kind, ''), f.record, \
                         coalesce(f.started_ns, 0) FROM fleet_gen_queue q \
                         LEFT JOIN fleet_records f ON f.report_id = q.report_id \
                         WHERE q.gen = ?1 ORDER BY q.seq LIMIT ?2",
                    )
                    .map_err(|e| self.err(e))?;
                let rows = st
                    .query_map(params![gen, batch_size as i64], |row| {
                        Ok((
                            row.get(0)?,
                            row.get(1)?,
                            row.get(2)?,
                            row.get(3)?,
                            row.get(4)?,
                        ))
                    })
                    .map_err(|e| self.err(e))?;
                rows.collect::<Result<_, _>>().map_err(|e| self.err(e))?
            };
            batch.truncate(within_batch_days(batch.iter().map(|b| b.4)));
            tx.execute(
                "UPDATE fleet_generations SET folded_at = ?2, ready = ready OR ?3 WHERE gen = ?1",
                params![gen, now_s(), batch.is_empty()],
            )
            .map_err(|e| self.err(e))?;
            if batch.is_empty() {
                tx.commit().map_err(|e| self.err(e))?;
                return Ok(folded);
            }
            let records: Vec<(String, Vec<u8>)> = batch
                .iter()
                .filter(|b| b.2 == "record")
                .filter_map(|b| Some((b.1.clone(), b.3.clone()?)))
                .collect();
            let out = fold_batch(
                &records,
                |units| {
                    let mut st = tx
                        .prepare_cached(
                            "SELECT state FROM fleet_gen_units WHERE gen = ?1 AND unit = ?2",
                        )
                        .map_err(|e| self.err(e))?;
                    let mut got = Vec::new();
                    for u in units {
                        if let Some(b) = st
                            .query_row(params![gen, u], |row| row.get::<_, Vec<u8>>(0))
                            .optional()
                            .map_err(|e| self.err(e))?
                        {
                            got.push((u.clone(), b));
                        }
                    }
                    Ok(got)
                },
                |keys| {
                    let mut st = tx
                        .prepare_cached(
                            "SELECT summary FROM fleet_gen_summaries \
                             WHERE gen = ?1 AND span = ?2 AND start = ?3 AND board = ?4",
                        )
                        .map_err(|e| self.err(e))?;
                    let mut got = Vec::new();
                    for k in keys {
                        if let Some(b) = st
                            .query_row(params![gen, k.0, k.1, k.2], |row| row.get::<_, Vec<u8>>(0))
                            .optional()
                            .map_err(|e| self.err(e))?
                        {
                            got.push((k.clone(), b));
                        }
                    }
                    Ok(got)
                },
            )?;
            {
                let mut put = tx
                    .prepare_cached(
                        "INSERT INTO fleet_gen_summaries (gen, span, start, board, figures, \
                         summary) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                         ON CONFLICT (gen, span, start, board) DO UPDATE \
                         SET figures = excluded.figures, summary = excluded.summary",
                    )
                    .map_err(|e| self.err(e))?;
                for ((span, start, board), figures, bytes) in &out.summaries {
                    put.execute(params![gen, span, start, board, figures, bytes])
                        .map_err(|e| self.err(e))?;
                }
                let mut unit = tx
                    .prepare_cached(
                        "INSERT INTO fleet_gen_units (gen, unit, keys, state) \
                         VALUES (?1, ?2, ?3, ?4) ON CONFLICT (gen, unit) DO UPDATE \
                         SET keys = excluded.keys, state = excluded.state",
                    )
                    .map_err(|e| self.err(e))?;
                for (u, bytes, keys) in &out.units {
                    unit.execute(params![gen, u, keys, bytes])
                        .map_err(|e| self.err(e))?;
                }
                let mut gone = tx
                    .prepare_cached("DELETE FROM fleet_gen_queue WHERE seq = ?1")
                    .map_err(|e| self.err(e))?;
                for b in &batch {
                    gone.execute(params![b.0]).map_err(|e| self.err(e))?;
                }
            }
            tx.commit().map_err(|e| self.err(e))?;
            folded += batch.len() as u64;
            progress(before + folded, queued);
        }
    }

    fn retire(&self, name: &str) -> Result<(), StoreError> {
        let keep = serving_and_building(&self.my_generations(name)?)
            .0
            .unwrap_or(0);
        let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let old = "SELECT gen FROM fleet_generations WHERE folded_at < ?1 \
                   AND NOT (name = ?2 AND gen >= ?3)";
        for t in [
            "fleet_gen_queue",
            "fleet_gen_units",
            "fleet_gen_summaries",
            "fleet_generations",
        ] {
            tx.execute(
                &format!("DELETE FROM {t} WHERE gen IN ({old})"),
                params![now_s() - RETIRE_AFTER_S, name, keep],
            )
            .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))
    }
}

impl Store for Sqlite {
    fn insert(&self, r: &Record, raw: &[u8]) -> Result<Stored, StoreError> {
        // A panic in another worker while holding the lock left no open transaction (it is
        // rolled back on drop), so the connection is still good.
        let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        // The unit's key first: its first signed report enrolls it, and a report under another
        // key or none is not stored.
        if r.unit != super::NO_UNIT && !r.key_listed {
            if let Some(key) = &r.signer_key {
                tx.execute(
                    "INSERT INTO unit_keys (unit, key, report_id) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (unit) DO NOTHING",
                    params![r.unit, key, r.report_id],
                )
                .map_err(|e| self.err(e))?;
            }
            let enrolled: Option<String> = tx
                .query_row(
                    "SELECT key FROM unit_keys WHERE unit = ?1",
                    params![r.unit],
                    |row| row.get(0),
                )
                .optional()
                .map_err(|e| self.err(e))?;
            if let Some(enrolled) = enrolled.filter(|k| Some(k) != r.signer_key.as_ref()) {
                return Ok(Stored::Forged { enrolled });
            }
        }
        let n = tx
            .execute(
                "INSERT INTO reports (report_id, schema_version, unit, board, hostname, \
                 started_at, finished_at, status, pass, exit_code, format, raw, body_sha256, \
                 token, signer_key) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, \
                 ?13, ?14, ?15) \
                 ON CONFLICT (report_id) DO NOTHING",
                params![
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
                    r.format,
                    raw,
                    r.sha256,
                    r.token,
                    r.signer_key
                ],
            )
            .map_err(|e| self.err(e))?;
        if n == 0 {
            let (sha, stored): (Option<String>, Vec<u8>) = tx
                .query_row(
                    "SELECT body_sha256, raw FROM reports WHERE report_id = ?1",
                    params![r.report_id],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .map_err(|e| self.err(e))?;
            return Ok(super::compare(sha, &stored, &r.sha256));
        }
        tx.execute(
            PUT_FLEET,
            params![
                r.report_id,
                r.fleet.file,
                r.board,
                r.fleet.started_ns,
                r.fleet.kind,
                r.fleet.body,
                FLEET_RECORD_VERSION,
                record_value(&r.fleet.record)
            ],
        )
        .map_err(|e| self.err(e))?;
        if r.fleet.kind == "record" {
            tx.execute(QUEUE, params![r.report_id])
                .map_err(|e| self.err(e))?;
        }
        {
            let mut dev = tx
                .prepare_cached(
                    "INSERT INTO devices (report_id, idx, name, class, port, model, serial, pass) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .map_err(|e| self.err(e))?;
            let mut met = tx
                .prepare_cached(
                    "INSERT INTO metrics (report_id, device_idx, cell_idx, workload, status, \
                     mib_per_s, iops, p99_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .map_err(|e| self.err(e))?;
            for (i, d) in r.devices.iter().enumerate() {
                dev.execute(params![
                    r.report_id,
                    i as i64,
                    d.name,
                    d.class,
                    d.port,
                    d.model,
                    d.serial,
                    d.pass
                ])
                .map_err(|e| self.err(e))?;
                for (j, m) in d.metrics.iter().enumerate() {
                    met.execute(params![
                        r.report_id,
                        i as i64,
                        j as i64,
                        m.workload,
                        m.status,
                        m.mib_per_s,
                        m.iops,
                        m.p99_ns
                    ])
                    .map_err(|e| self.err(e))?;
                }
            }
        }
        tx.commit().map_err(|e| self.err(e))?;
        Ok(Stored::New)
    }

    fn fleet_backfill(&self) -> Result<u64, StoreError> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.backfilled.load(Relaxed) {
            return Ok(0);
        }
        let n = self.backfill_now()?;
        self.backfilled.store(true, Relaxed);
        Ok(n)
    }

    fn fleet_rows(&self, f: &FleetFilter) -> Result<Vec<FleetRow>, StoreError> {
        let conn = self.reader()?;
        let (sql, args) = filtered(
            "SELECT file, kind, body, record FROM fleet_records WHERE 1 = 1",
            f,
        );
        let mut st = conn.prepare(&sql).map_err(|e| self.err(e))?;
        let rows = st
            .query_map(rusqlite::params_from_iter(args), |row| {
                Ok(FleetRow {
                    file: row.get(0)?,
                    kind: row.get(1)?,
                    body: row.get(2)?,
                    record: row.get::<_, Option<Vec<u8>>>(3)?.unwrap_or_default(),
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    fn raw(&self, report_id: &str) -> Result<Option<(String, Vec<u8>)>, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        conn.query_row(
            "SELECT format, raw FROM reports WHERE report_id = ?1",
            params![report_id],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()
        .map_err(|e| self.err(e))
    }

    fn fleet_boards(&self) -> Result<Vec<(Option<String>, u64)>, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = conn
            .prepare("SELECT board, count(*) FROM fleet_records GROUP BY board ORDER BY board")
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([], |row| Ok((row.get(0)?, row.get::<_, i64>(1)? as u64)))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    fn fleet_fold(
        &self,
        scope: FoldScope,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<u64, StoreError> {
        self.fleet_backfill()?;
        super::fold(self, scope, progress)
    }

    fn fleet_rebuild(&self) -> Result<u64, StoreError> {
        self.fleet_backfill()?;
        super::rebuild(self)
    }

    fn fleet_queued(&self) -> Result<u64, StoreError> {
        super::queued(self)
    }

    fn fleet_generations(&self) -> Result<Generations, StoreError> {
        super::generations(self)
    }

    fn fleet_summary_days(
        &self,
        gen: i64,
        from_day: Option<i32>,
        board: Option<&str>,
    ) -> Result<Option<(i32, i32)>, StoreError> {
        let conn = self.reader()?;
        conn.query_row(
            "SELECT min(start), max(start) FROM fleet_gen_summaries WHERE gen = ?3 \
             AND span = 1 AND figures AND (?1 IS NULL OR start >= ?1) \
             AND (?2 IS NULL OR board = ?2)",
            params![from_day, board, gen],
            |row| {
                Ok(match (row.get::<_, Option<i32>>(0)?, row.get(1)?) {
                    (Some(a), Some(b)) => Some((a, b)),
                    _ => None,
                })
            },
        )
        .map_err(|e| self.err(e))
    }

    fn fleet_summaries(
        &self,
        f: &SummaryFilter,
        each: &mut dyn FnMut(i32, String, Vec<u8>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let conn = self.reader()?;
        let mut st = conn
            .prepare(
                "SELECT start, board, summary FROM fleet_gen_summaries WHERE gen = ?5 \
                 AND span = ?1 AND (?2 IS NULL OR start >= ?2) AND (?3 IS NULL OR start < ?3) \
                 AND (?4 IS NULL OR board = ?4) ORDER BY start, board",
            )
            .map_err(|e| self.err(e))?;
        let mut rows = st
            .query(params![f.span, f.from_day, f.until_day, f.board, f.gen])
            .map_err(|e| self.err(e))?;
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            each(
                row.get(0).map_err(|e| self.err(e))?,
                row.get(1).map_err(|e| self.err(e))?,
                row.get(2).map_err(|e| self.err(e))?,
            )?;
        }
        Ok(())
    }

    fn fleet_several_keys(&self, gen: i64) -> Result<Vec<(String, i32)>, StoreError> {
        let conn = self.reader()?;
        let mut st = conn
            .prepare(
                "SELECT unit, keys FROM fleet_gen_units WHERE gen = ?1 AND keys > 1 \
                 ORDER BY unit",
            )
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params![gen], |row| Ok((row.get(0)?, row.get(1)?)))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    fn fleet_issues(
        &self,
        f: &FleetFilter,
        limit: usize,
    ) -> Result<(Vec<FleetRow>, u64), StoreError> {
        let conn = self.reader()?;
        let (sql, args) = filtered(
            "SELECT file, kind, body FROM fleet_records WHERE kind <> 'record'",
            f,
        );
        let total: i64 = conn
            .query_row(
                &format!("SELECT count(*) FROM ({sql})"),
                rusqlite::params_from_iter(args.clone()),
                |row| row.get(0),
            )
            .map_err(|e| self.err(e))?;
        let mut st = conn
            .prepare(&format!("{sql} ORDER BY file LIMIT {limit}"))
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map(rusqlite::params_from_iter(args), |row| {
                Ok(FleetRow {
                    file: row.get(0)?,
                    kind: row.get(1)?,
                    body: row.get(2)?,
                    record: Vec::new(),
                })
            })
            .map_err(|e| self.err(e))?;
        let rows = rows
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err(e))?;
        Ok((rows, total as u64))
    }

    fn lookup(&self, report_id: &str, sha256: &str) -> Result<Option<Stored>, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let row: Option<(Option<String>, Vec<u8>)> = conn
            .query_row(
                "SELECT body_sha256, CASE WHEN body_sha256 IS NULL THEN raw ELSE x'' END \
                 FROM reports WHERE report_id = ?1",
                params![report_id],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })
            .map_err(|e| self.err(e))?;
        Ok(row.map(|(sha, raw)| super::compare(sha, &raw, sha256)))
    }

    fn health(&self) -> Result<(), StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        conn.execute(
            "INSERT INTO collector_health (id, checked_at) VALUES (1, \
             strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) ON CONFLICT (id) DO UPDATE SET \
             checked_at = excluded.checked_at",
            [],
        )
        .map(|_| ())
        .map_err(|e| self.err(e))
    }

    fn count(&self) -> Result<u64, StoreError> {
        self.rows_in("reports")
    }
}

/// `select` (a query ending in a WHERE clause) with `f`'s filters: (SQL, its arguments).
fn filtered(select: &str, f: &FleetFilter) -> (String, Vec<rusqlite::types::Value>) {
    let mut sql = String::from(select);
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    if let Some(t) = f.since_ns {
        args.push(t.into());
        sql.push_str(&format!(" AND started_ns >= ?{}", args.len()));
    }
    // The board as `fleet` lists it: "unknown board" is a unit that named none.
    match f.board.as_deref().map(str::trim) {
        Some(usbperf_fleet::extract::UNKNOWN_BOARD) => sql.push_str(" AND board IS NULL"),
        Some(b) => {
            args.push(b.to_string().into());
            sql.push_str(&format!(" AND board = ?{}", args.len()));
        }
        None => {}
    }
    (sql, args)
}
