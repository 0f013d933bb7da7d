//! Owns PostgreSQL as the store, for several lines or factories sharing one database: the
//! sync `postgres` client, a fixed set of sessions shared by the server's workers, and the
//! same tables as SQLite. A commit returns after PostgreSQL flushed its WAL (the server's
//! default `synchronous_commit = on`; the collector sets it for its sessions so a tuned
//! server cannot weaken it), so an acknowledged report survives a crash of either process.
//! Exactly once: `ON CONFLICT (report_id) DO NOTHING` — a concurrent re-send waits on the
//! first transaction's unique-index entry and then inserts nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use ::postgres::{Client, NoTls};

use super::{
    now_s, serving_and_building, FleetFilter, FleetRow, FoldScope, GenRow, Generational,
    Generations, Pending, Store, StoreError, Stored, SummaryFilter, BACKFILL_BATCH,
};
use crate::ingest::{Record, FLEET_RECORD_VERSION};
use crate::summaries::{fold_batch, fold_batch_size, within_batch_days, FoldError, RETIRE_AFTER_S};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS reports (
    report_id text PRIMARY KEY,
    schema_version integer NOT NULL,
    unit text NOT NULL,
    board text,
    hostname text,
    started_at timestamptz NOT NULL,
    finished_at timestamptz,
    status text NOT NULL,
    pass boolean NOT NULL,
    exit_code integer,
    format text NOT NULL,
    raw bytea NOT NULL,
    body_sha256 text,
    token text,
    received_at timestamptz NOT NULL DEFAULT now()
);
-- A table from before the body hash: its rows compare by their raw bytes.
ALTER TABLE reports ADD COLUMN IF NOT EXISTS body_sha256 text;
-- A table from before tokens were named: its rows name none.
ALTER TABLE reports ADD COLUMN IF NOT EXISTS token text;
-- The unit key that signed it (hex), verified on receipt; none for an unsigned report.
ALTER TABLE reports ADD COLUMN IF NOT EXISTS signer_key text;
-- Each unit's key, enrolled by its first signed report.
CREATE TABLE IF NOT EXISTS unit_keys (
    unit text PRIMARY KEY,
    key text NOT NULL,
    report_id text NOT NULL,
    enrolled_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS reports_unit ON reports (unit);
CREATE INDEX IF NOT EXISTS reports_board_time ON reports (board, started_at);
CREATE INDEX IF NOT EXISTS reports_time ON reports (started_at);
CREATE TABLE IF NOT EXISTS devices (
    report_id text NOT NULL REFERENCES reports (report_id) ON DELETE CASCADE,
    idx integer NOT NULL,
    name text NOT NULL,
    class text NOT NULL,
    port text NOT NULL,
    model text,
    serial text,
    pass boolean NOT NULL,
    PRIMARY KEY (report_id, idx)
);
CREATE INDEX IF NOT EXISTS devices_serial ON devices (serial);
CREATE INDEX IF NOT EXISTS devices_model ON devices (class, model);
CREATE TABLE IF NOT EXISTS metrics (
    report_id text NOT NULL,
    device_idx integer NOT NULL,
    cell_idx integer NOT NULL,
    workload text NOT NULL,
    status text NOT NULL,
    mib_per_s double precision,
    iops double precision,
    p99_ns bigint,
    PRIMARY KEY (report_id, device_idx, cell_idx),
    FOREIGN KEY (report_id, device_idx) REFERENCES devices (report_id, idx) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS metrics_workload ON metrics (workload);
CREATE TABLE IF NOT EXISTS fleet_records (
    report_id text PRIMARY KEY REFERENCES reports (report_id) ON DELETE CASCADE,
    file text NOT NULL,
    board text,
    started_ns bigint NOT NULL,
    kind text NOT NULL,
    body text NOT NULL,
    version integer NOT NULL,
    record bytea
);
-- A table from before the binary record (version 1): its rows are extracted again by the
-- next fleet query, as their version is older.
ALTER TABLE fleet_records ADD COLUMN IF NOT EXISTS record bytea;
CREATE INDEX IF NOT EXISTS fleet_records_time ON fleet_records (started_ns);
CREATE INDEX IF NOT EXISTS fleet_records_board_time ON fleet_records (board, started_ns);
CREATE INDEX IF NOT EXISTS fleet_records_version ON fleet_records (version);
-- What /readyz writes: emptied and written again at each probe, so the probe needs a new
-- block of the database's storage (a full disk fails it, as it fails an upload).
CREATE TABLE IF NOT EXISTS collector_health_probe (checked_at timestamptz NOT NULL);
-- The generations of the fleet's summaries, each of one build's format and rules (`name`),
-- built beside each other (see collector/src/summaries.rs). `backlog`: every record stored
-- before it was made is queued; `ready`: its queue was empty once, so it answers;
-- `folded_at`: its last fold (seconds since 1970), which keeps it from being dropped.
-- (The tables of the first summaries, fleet_queue, fleet_units, fleet_summaries and
-- fleet_meta, are no longer read: drop them once no collector of that build runs.)
CREATE TABLE IF NOT EXISTS fleet_generations (
    gen bigint PRIMARY KEY,
    name text NOT NULL,
    backlog boolean NOT NULL DEFAULT false,
    ready boolean NOT NULL DEFAULT false,
    folded_at bigint NOT NULL
);
-- Reports stored and not yet folded into a generation's summaries, in the order queued.
CREATE TABLE IF NOT EXISTS fleet_gen_queue (
    seq bigserial PRIMARY KEY,
    gen bigint NOT NULL,
    report_id text NOT NULL,
    UNIQUE (gen, report_id)
);
CREATE INDEX IF NOT EXISTS fleet_gen_queue_order ON fleet_gen_queue (gen, seq);
-- Each unit's latest run and keys (what a unit counts as in the summaries).
CREATE TABLE IF NOT EXISTS fleet_gen_units (
    gen bigint NOT NULL,
    unit text NOT NULL,
    keys integer NOT NULL,
    state bytea NOT NULL,
    PRIMARY KEY (gen, unit)
);
CREATE INDEX IF NOT EXISTS fleet_gen_units_several ON fleet_gen_units (gen, unit) WHERE keys > 1;
-- The fleet's summaries per board and day (span 1), week (7), 13 weeks (91) or 52 weeks
-- (364), and the trends of days and weeks (span -1 and -7), see collector/src/summaries.rs.
CREATE TABLE IF NOT EXISTS fleet_gen_summaries (
    gen bigint NOT NULL,
    span integer NOT NULL,
    start integer NOT NULL,
    board text NOT NULL,
    figures boolean NOT NULL,
    summary bytea NOT NULL,
    PRIMARY KEY (gen, span, start, board)
);
-- The first and last day with figures, without reading the days' summaries (MB each).
CREATE INDEX IF NOT EXISTS fleet_gen_summaries_figures ON fleet_gen_summaries (gen, span, board, start) WHERE figures;
CREATE INDEX IF NOT EXISTS fleet_records_issues ON fleet_records (board, started_ns) WHERE kind <> 'record';
";

/// Held by the one collector folding a generation's queue at a time (transaction-scoped;
/// the generation is the second key).
const FOLD_LOCK: &str = "SELECT pg_advisory_xact_lock(7715, $1::integer)";
/// Taken by ingest (shared) before it queues a report for the generations kept, and by the
/// making of a generation (exclusive): a report is queued by ingest or visible to the new
/// generation's backlog, never neither.
const GEN_SHARED: &str = "SELECT pg_advisory_xact_lock_shared(7715100017)";
const GEN_EXCLUSIVE: &str = "SELECT pg_advisory_xact_lock(7715100017)";

const PUT_FLEET: &str = "INSERT INTO fleet_records (report_id, file, board, started_ns, kind, \
     body, version, record) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (report_id) DO \
     UPDATE SET file = excluded.file, board = excluded.board, started_ns = excluded.started_ns, \
     kind = excluded.kind, body = excluded.body, version = excluded.version, \
     record = excluded.record";

/// The encoded record as stored: NULL for the rows without one.
fn record_value(record: &[u8]) -> Option<&[u8]> {
    (!record.is_empty()).then_some(record)
}

pub struct Postgres {
    config: ::postgres::Config,
    sessions: Vec<Mutex<Option<Client>>>,
    next: AtomicUsize,
    /// The fleet's reads (a query, the page, a stored report), on a session of their own: a
    /// fleet of many reports holds its session for seconds, and no upload waits behind it.
    reader: Mutex<Option<Client>>,
    /// Every stored report had its fleet record of this version when last checked: what this
    /// process stores always has one, so the check (two counts over every report) runs
    /// once, not before every fold and query.
    backfilled: std::sync::atomic::AtomicBool,
    /// A read replica (`--page-db`): no tables made, nothing back-filled or folded (the
    /// collectors on the primary do both).
    replica: bool,
}

fn connect(config: &::postgres::Config) -> Result<Client, StoreError> {
    let mut c = config.connect(NoTls)?;
    c.batch_execute("SET synchronous_commit = on")?;
    Ok(c)
}

impl Postgres {
    /// Opens `url`; `password` is used when the URL holds none (where `ps` and error
    /// messages would show it).
    pub fn open(
        url: &str,
        sessions: usize,
        password: Option<&str>,
    ) -> Result<Postgres, StoreError> {
        let mut config: ::postgres::Config = url.parse()?;
        if let (None, Some(p)) = (config.get_password(), password) {
            config.password(p);
        }
        let mut first = connect(&config)?;
        // Two collectors starting at once may both create the tables: serialise them.
        let mut tx = first.transaction()?;
        tx.batch_execute("SELECT pg_advisory_xact_lock(7715100015)")?;
        tx.batch_execute(SCHEMA)?;
        tx.commit()?;
        let mut v = vec![Mutex::new(Some(first))];
        v.extend((1..sessions).map(|_| Mutex::new(None)));
        Ok(Postgres {
            config,
            sessions: v,
            next: AtomicUsize::new(0),
            reader: Mutex::new(None),
            backfilled: std::sync::atomic::AtomicBool::new(false),
            replica: false,
        })
    }

    /// Opens `url`, a read replica of the collectors' database, for the fleet page's reads:
    /// its tables are the primary's, and it takes no write, so it creates, back-fills and
    /// folds nothing.
    pub fn open_replica(url: &str, password: Option<&str>) -> Result<Postgres, StoreError> {
        let mut config: ::postgres::Config = url.parse()?;
        if let (None, Some(p)) = (config.get_password(), password) {
            config.password(p);
        }
        let first = connect(&config)?;
        Ok(Postgres {
            config,
            sessions: vec![Mutex::new(Some(first))],
            next: AtomicUsize::new(0),
            reader: Mutex::new(None),
            backfilled: std::sync::atomic::AtomicBool::new(true),
            replica: true,
        })
    }

    /// Runs `f` on a session, opening it first when it has none. A session the server closed
    /// (a restart, a lost connection) is dropped and `f` runs once more on a new one: the
    /// client notices a closed connection only when it uses it, so without this each of the
    /// sessions would fail one request after every restart, and the sync client never marks
    /// such a session closed, so it would fail every one after. `f` runs in a transaction or
    /// reads, so running it again after a failure is safe.
    fn with_session<T>(
        &self,
        f: impl FnMut(&mut Client) -> Result<T, ::postgres::Error>,
    ) -> Result<T, StoreError> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.sessions.len();
        self.on(&self.sessions[i], f)
    }

    /// [`Self::with_session`] on the fleet's own session.
    fn with_reader<T>(
        &self,
        f: impl FnMut(&mut Client) -> Result<T, ::postgres::Error>,
    ) -> Result<T, StoreError> {
        self.on(&self.reader, f)
    }

    fn on<T>(
        &self,
        session: &Mutex<Option<Client>>,
        mut f: impl FnMut(&mut Client) -> Result<T, ::postgres::Error>,
    ) -> Result<T, StoreError> {
        let mut slot = session.lock().unwrap_or_else(|e| e.into_inner());
        for fresh in [false, true] {
            if fresh || slot.as_ref().map_or(true, |c| c.is_closed()) {
                *slot = None;
                *slot = Some(connect(&self.config)?);
            }
            let client = slot.as_mut().expect("connected above");
            match f(client) {
                Err(e) if lost(&e, client) && !fresh => continue,
                Err(e) => {
                    if lost(&e, client) {
                        *slot = None;
                    }
                    return Err(e.into());
                }
                Ok(v) => return Ok(v),
            }
        }
        unreachable!("the second pass returns")
    }
}

/// Whether `e` means the session is gone (closed by the server, or its socket failed), as
/// opposed to an error of the statement (a constraint, a full disk), after which the session
/// is still good.
fn lost(e: &::postgres::Error, client: &Client) -> bool {
    use std::error::Error;
    e.is_closed() || client.is_closed() || e.source().is_some_and(|s| s.is::<std::io::Error>())
}

impl Postgres {
    /// Gives every stored report its fleet row of this version; how many it extracted.
    fn backfill_now(&self) -> Result<u64, StoreError> {
        let version = FLEET_RECORD_VERSION as i32;
        // Nothing to do, told by two counts and the version index: the join below visits
        // every report. A fleet row always has its report (foreign key), so equal counts
        // mean each report has one.
        let done: bool = self.with_session(|c| {
            let row = c.query_one(
                "SELECT (SELECT count(*) FROM reports) = (SELECT count(*) FROM fleet_records) \
                 AND NOT EXISTS (SELECT 1 FROM fleet_records WHERE version < $1)",
                &[&version],
            )?;
            Ok(row.get(0))
        })?;
        if done {
            return Ok(0);
        }
        let next = || {
            self.with_session(|c| {
                let rows = c.query(
                    "SELECT r.report_id, r.format, r.board, \
                     (extract(epoch FROM r.started_at) * 1000000)::bigint, r.raw, r.signer_key \
                     FROM reports r LEFT JOIN fleet_records f ON f.report_id = r.report_id \
                     WHERE f.report_id IS NULL OR f.version < $1 LIMIT $2",
                    &[&version, &(BACKFILL_BATCH as i64)],
                )?;
                Ok(rows
                    .into_iter()
                    .map(|r| Pending {
                        report_id: r.get(0),
                        format: r.get(1),
                        board: r.get(2),
                        started_ns: r.get::<_, i64>(3).saturating_mul(1000),
                        raw: r.get(4),
                        signer_key: r.get(5),
                    })
                    .collect())
            })
        };
        let put = |rows: &[(Pending, crate::ingest::FleetColumns)]| {
            self.with_session(|c| {
                let mut tx = c.transaction()?;
                let st = tx.prepare(PUT_FLEET)?;
                for (p, f) in rows {
                    tx.execute(
                        &st,
                        &[
                            &p.report_id,
                            &f.file,
                            &p.board,
                            &f.started_ns,
                            &f.kind,
                            &f.body,
                            &version,
                            &record_value(&f.record),
                        ],
                    )?;
                }
                tx.commit()
            })
        };
        super::backfill(next, put)
    }
}

impl Generational for Postgres {
    fn my_generations(&self, name: &str) -> Result<Vec<GenRow>, StoreError> {
        self.with_session(|c| {
            let rows = c.query(
                "SELECT gen, backlog, ready FROM fleet_generations WHERE name = $1 ORDER BY gen",
                &[&name],
            )?;
            Ok(rows
                .into_iter()
                .map(|r| GenRow {
                    gen: r.get(0),
                    backlog: r.get(1),
                    ready: r.get(2),
                })
                .collect())
        })
    }

    fn new_generation(&self, name: &str, first: bool) -> Result<Option<i64>, StoreError> {
        self.with_session(|c| {
            let mut tx = c.transaction()?;
            tx.batch_execute(GEN_EXCLUSIVE)?;
            let exists = tx
                .query_opt("SELECT 1 FROM fleet_generations WHERE name = $1", &[&name])?
                .is_some();
            if first && exists {
                return Ok(None);
            }
            let row = tx.query_one(
                "INSERT INTO fleet_generations (gen, name, folded_at) \
                 SELECT coalesce(max(gen), 0) + 1, $1, $2 FROM fleet_generations RETURNING gen",
                &[&name, &now_s()],
            )?;
            tx.commit()?;
            Ok(Some(row.get(0)))
        })
    }

    fn queue_backlog(&self, gen: i64) -> Result<u64, StoreError> {
        self.with_session(|c| {
            let mut tx = c.transaction()?;
            tx.execute(FOLD_LOCK, &[&(gen as i32)])?;
            let done: bool = tx
                .query_one(
                    "SELECT backlog FROM fleet_generations WHERE gen = $1",
                    &[&gen],
                )?
                .get(0);
            if !done {
                tx.execute(
                    "INSERT INTO fleet_gen_queue (gen, report_id) SELECT $1, report_id \
                     FROM fleet_records WHERE kind = 'record' ORDER BY started_ns, report_id \
                     ON CONFLICT DO NOTHING",
                    &[&gen],
                )?;
                tx.execute(
                    "UPDATE fleet_generations SET backlog = true WHERE gen = $1",
                    &[&gen],
                )?;
            }
            let n: i64 = tx
                .query_one(
                    "SELECT count(*) FROM fleet_gen_queue WHERE gen = $1",
                    &[&gen],
                )?
                .get(0);
            tx.commit()?;
            Ok(n as u64)
        })
    }

    fn queued_in(&self, gen: i64) -> Result<u64, StoreError> {
        self.with_session(|c| {
            let row = c.query_one(
                "SELECT count(*) FROM fleet_gen_queue WHERE gen = $1",
                &[&gen],
            )?;
            Ok(row.get::<_, i64>(0) as u64)
        })
    }

    fn queued_at_most(&self, gen: i64, n: usize) -> Result<bool, StoreError> {
        self.with_session(|c| {
            let row = c.query_one(
                "SELECT count(*) FROM (SELECT 1 FROM fleet_gen_queue WHERE gen = $1 LIMIT $2) q",
                &[&gen, &(n as i64 + 1)],
            )?;
            Ok(row.get::<_, i64>(0) as u64 <= n as u64)
        })
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
            let step = self.with_session(|c| {
                let mut tx = c.transaction()?;
                // One folder of a generation at a time, whichever collector: the others wait
                // here, then find the queue entries it folded gone.
                tx.execute(FOLD_LOCK, &[&(gen as i32)])?;
                let mut batch = tx.query(
                    "SELECT q.seq, coalesce(f.file, ''), coalesce(f.kind, ''), f.record, \
                     coalesce(f.started_ns, 0) FROM fleet_gen_queue q LEFT JOIN fleet_records f \
                     ON f.report_id = q.report_id WHERE q.gen = $1 ORDER BY q.seq LIMIT $2",
                    &[&gen, &(batch_size as i64)],
                )?;
                batch.truncate(within_batch_days(batch.iter().map(|r| r.get(4))));
                tx.execute(
                    "UPDATE fleet_generations SET folded_at = $2, ready = ready OR $3 \
                     WHERE gen = $1",
                    &[&gen, &now_s(), &batch.is_empty()],
                )?;
                if batch.is_empty() {
                    tx.commit()?;
                    return Ok(Ok(0));
                }
                let records: Vec<(String, Vec<u8>)> = batch
                    .iter()
                    .filter(|r| r.get::<_, String>(2) == "record")
                    .filter_map(|r| Some((r.get(1), r.get::<_, Option<Vec<u8>>>(3)?)))
                    .collect();
                // Both readers use the transaction, one after the other.
                let cell = std::cell::RefCell::new(&mut tx);
                let folded = fold_batch(
                    &records,
                    |units| {
                        let rows = cell.borrow_mut().query(
                            "SELECT unit, state FROM fleet_gen_units \
                             WHERE gen = $1 AND unit = ANY($2)",
                            &[&gen, &units],
                        )?;
                        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
                    },
                    |keys| {
                        let mut tx = cell.borrow_mut();
                        let st = tx.prepare(
                            "SELECT summary FROM fleet_gen_summaries \
                             WHERE gen = $1 AND span = $2 AND start = $3 AND board = $4",
                        )?;
                        let mut got = Vec::new();
                        for k in keys {
                            if let Some(r) = tx.query_opt(&st, &[&gen, &k.0, &k.1, &k.2])? {
                                got.push((k.clone(), r.get(0)));
                            }
                        }
                        Ok(got)
                    },
                );
                let out = match folded {
                    Ok(out) => out,
                    Err(FoldError::Store(e)) => return Err(e),
                    Err(e @ FoldError::Damaged(_)) => return Ok(Err(e.to_string())),
                };
                let put = tx.prepare(
                    "INSERT INTO fleet_gen_summaries (gen, span, start, board, figures, summary) \
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (gen, span, start, board) \
                     DO UPDATE SET figures = excluded.figures, summary = excluded.summary",
                )?;
                for ((span, start, board), figures, bytes) in &out.summaries {
                    tx.execute(&put, &[&gen, span, start, board, figures, bytes])?;
                }
                // One statement for the batch's units (up to 16,384): a round trip each was
                // most of a rebuild's time.
                let names: Vec<&str> = out.units.iter().map(|u| u.0.as_str()).collect();
                let keys: Vec<i32> = out.units.iter().map(|u| u.2).collect();
                let states: Vec<&[u8]> = out.units.iter().map(|u| u.1.as_slice()).collect();
                tx.execute(
                    "INSERT INTO fleet_gen_units (gen, unit, keys, state) \
                     SELECT $1, * FROM unnest($2::text[], $3::integer[], $4::bytea[]) \
                     ON CONFLICT (gen, unit) DO UPDATE SET keys = excluded.keys, \
                     state = excluded.state",
                    &[&gen, &names, &keys, &states],
                )?;
                let seqs: Vec<i64> = batch.iter().map(|r| r.get(0)).collect();
                tx.execute("DELETE FROM fleet_gen_queue WHERE seq = ANY($1)", &[&seqs])?;
                tx.commit()?;
                Ok(Ok(seqs.len() as u64))
            })?;
            match step {
                Ok(0) => return Ok(folded),
                Ok(n) => {
                    folded += n;
                    progress(before + folded, queued);
                }
                Err(damaged) => return Err(StoreError::Summary(damaged)),
            }
        }
    }

    fn retire(&self, name: &str) -> Result<(), StoreError> {
        let keep = serving_and_building(&self.my_generations(name)?)
            .0
            .unwrap_or(0);
        self.with_session(|c| {
            let mut tx = c.transaction()?;
            let old: Vec<i64> = tx
                .query(
                    "SELECT gen FROM fleet_generations WHERE folded_at < $1 \
                     AND NOT (name = $2 AND gen >= $3)",
                    &[&(now_s() - RETIRE_AFTER_S), &name, &keep],
                )?
                .into_iter()
                .map(|r| r.get(0))
                .collect();
            for t in ["fleet_gen_queue", "fleet_gen_units", "fleet_gen_summaries"] {
                tx.execute(&format!("DELETE FROM {t} WHERE gen = ANY($1)"), &[&old])?;
            }
            tx.execute("DELETE FROM fleet_generations WHERE gen = ANY($1)", &[&old])?;
            tx.commit()
        })?;
        Ok(())
    }
}

impl Store for Postgres {
    fn insert(&self, r: &Record, raw: &[u8]) -> Result<Stored, StoreError> {
        self.with_session(|c| {
            let mut tx = c.transaction()?;
            // The unit's key first: its first signed report enrolls it (a concurrent one waits
            // on the key's index entry and then reads it), and a report under another key or
            // none is not stored.
            if r.unit != super::NO_UNIT && !r.key_listed {
                if let Some(key) = &r.signer_key {
                    tx.execute(
                        "INSERT INTO unit_keys (unit, key, report_id) VALUES ($1, $2, $3) \
                         ON CONFLICT (unit) DO NOTHING",
                        &[&r.unit, key, &r.report_id],
                    )?;
                }
                let enrolled: Option<String> = tx
                    .query_opt("SELECT key FROM unit_keys WHERE unit = $1", &[&r.unit])?
                    .map(|row| row.get(0));
                if let Some(enrolled) = enrolled.filter(|k| Some(k) != r.signer_key.as_ref()) {
                    tx.rollback()?;
                    return Ok(Stored::Forged { enrolled });
                }
            }
            let schema_version = r.schema_version as i32;
            let n = tx.execute(
                "INSERT INTO reports (report_id, schema_version, unit, board, hostname, \
                 started_at, finished_at, status, pass, exit_code, format, raw, body_sha256, \
                 token, signer_key) VALUES ($1, $2, $3, $4, $5, CAST($6::text AS timestamptz), \
                 CAST($7::text AS timestamptz), $8, $9, $10, $11, $12, $13, $14, $15) \
                 ON CONFLICT (report_id) DO NOTHING",
                &[
                    &r.report_id,
                    &schema_version,
                    &r.unit,
                    &r.board,
                    &r.hostname,
                    &r.started_at,
                    &r.finished_at,
                    &r.status,
                    &r.pass,
                    &r.exit_code,
                    &r.format,
                    &raw,
                    &r.sha256,
                    &r.token,
                    &r.signer_key,
                ],
            )?;
            if n == 0 {
                let row = tx.query_one(
                    "SELECT body_sha256, raw FROM reports WHERE report_id = $1",
                    &[&r.report_id],
                )?;
                let (sha, stored): (Option<String>, Vec<u8>) = (row.get(0), row.get(1));
                tx.rollback()?;
                return Ok(super::compare(sha, &stored, &r.sha256));
            }
            let version = FLEET_RECORD_VERSION as i32;
            tx.execute(
                PUT_FLEET,
                &[
                    &r.report_id,
                    &r.fleet.file,
                    &r.board,
                    &r.fleet.started_ns,
                    &r.fleet.kind,
                    &r.fleet.body,
                    &version,
                    &record_value(&r.fleet.record),
                ],
            )?;
            if r.fleet.kind == "record" {
                tx.batch_execute(GEN_SHARED)?;
                tx.execute(
                    "INSERT INTO fleet_gen_queue (gen, report_id) \
                     SELECT gen, $1 FROM fleet_generations g WHERE NOT EXISTS \
                     (SELECT 1 FROM fleet_generations n \
                     WHERE n.name = g.name AND n.ready AND n.gen > g.gen) \
                     ON CONFLICT DO NOTHING",
                    &[&r.report_id],
                )?;
            }
            let dev = tx.prepare(
                "INSERT INTO devices (report_id, idx, name, class, port, model, serial, pass) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )?;
            let met = tx.prepare(
                "INSERT INTO metrics (report_id, device_idx, cell_idx, workload, status, \
                 mib_per_s, iops, p99_ns) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )?;
            for (i, d) in r.devices.iter().enumerate() {
                let i = i as i32;
                tx.execute(
                    &dev,
                    &[
                        &r.report_id,
                        &i,
                        &d.name,
                        &d.class,
                        &d.port,
                        &d.model,
                        &d.serial,
                        &d.pass,
                    ],
                )?;
                for (j, m) in d.metrics.iter().enumerate() {
                    let j = j as i32;
                    tx.execute(
                        &met,
                        &[
                            &r.report_id,
                            &i,
                            &j,
                            &m.workload,
                            &m.status,
                            &m.mib_per_s,
                            &m.iops,
                            &m.p99_ns,
                        ],
                    )?;
                }
            }
            tx.commit()?;
            Ok(Stored::New)
        })
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
        let mut sql = String::from("SELECT file, kind, body, record FROM fleet_records WHERE true");
        let board = f.board.as_deref().map(str::trim);
        let mut args: Vec<&(dyn ::postgres::types::ToSql + Sync)> = Vec::new();
        if let Some(t) = &f.since_ns {
            args.push(t);
            sql.push_str(&format!(" AND started_ns >= ${}", args.len()));
        }
        // The board as `fleet` lists it: "unknown board" is a unit that named none.
        match &board {
            Some(b) if *b == usbperf_fleet::extract::UNKNOWN_BOARD => {
                sql.push_str(" AND board IS NULL")
            }
            Some(b) => {
                args.push(b);
                sql.push_str(&format!(" AND board = ${}", args.len()));
            }
            None => {}
        }
        self.with_reader(|c| {
            use ::postgres::fallible_iterator::FallibleIterator;
            // Row by row as the server sends them, not `query`'s whole result first: that
            // held every row twice (180 MB of records over 100,000 reports) until the copy.
            let rows = c.query_raw(sql.as_str(), args.iter().copied())?;
            rows.map(|r| {
                Ok(FleetRow {
                    file: r.try_get(0)?,
                    kind: r.try_get(1)?,
                    body: r.try_get(2)?,
                    record: r.try_get::<_, Option<Vec<u8>>>(3)?.unwrap_or_default(),
                })
            })
            .collect()
        })
    }

    fn raw(&self, report_id: &str) -> Result<Option<(String, Vec<u8>)>, StoreError> {
        self.with_reader(|c| {
            let row = c.query_opt(
                "SELECT format, raw FROM reports WHERE report_id = $1",
                &[&report_id],
            )?;
            Ok(row.map(|r| (r.get(0), r.get(1))))
        })
    }

    fn fleet_boards(&self) -> Result<Vec<(Option<String>, u64)>, StoreError> {
        self.with_reader(|c| {
            let rows = c.query(
                "SELECT board, count(*) FROM fleet_records GROUP BY board ORDER BY board",
                &[],
            )?;
            Ok(rows
                .into_iter()
                .map(|r| (r.get(0), r.get::<_, i64>(1) as u64))
                .collect())
        })
    }

    fn fleet_fold(
        &self,
        scope: FoldScope,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<u64, StoreError> {
        if self.replica {
            return Ok(0);
        }
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
        self.with_reader(|c| {
            let row = c.query_one(
                "SELECT min(start), max(start) FROM fleet_gen_summaries WHERE gen = $3 \
                 AND span = 1 AND figures AND ($1::integer IS NULL OR start >= $1) \
                 AND ($2::text IS NULL OR board = $2)",
                &[&from_day, &board, &gen],
            )?;
            Ok(match (row.get::<_, Option<i32>>(0), row.get(1)) {
                (Some(a), Some(b)) => Some((a, b)),
                _ => None,
            })
        })
    }

    fn fleet_summaries(
        &self,
        f: &SummaryFilter,
        each: &mut dyn FnMut(i32, String, Vec<u8>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        // Row by row as the server sends them; an error of `each` stops the read and is
        // returned as it is.
        let mut failed: Option<StoreError> = None;
        self.with_reader(|c| {
            use ::postgres::fallible_iterator::FallibleIterator;
            let mut rows = c.query_raw(
                "SELECT start, board, summary FROM fleet_gen_summaries WHERE gen = $5 \
                 AND span = $1 AND ($2::integer IS NULL OR start >= $2) \
                 AND ($3::integer IS NULL OR start < $3) AND ($4::text IS NULL OR board = $4) \
                 ORDER BY start, board",
                [
                    &f.span as &(dyn ::postgres::types::ToSql + Sync),
                    &f.from_day,
                    &f.until_day,
                    &f.board,
                    &f.gen,
                ],
            )?;
            while let Some(r) = rows.next()? {
                if failed.is_none() {
                    if let Err(e) = each(r.try_get(0)?, r.try_get(1)?, r.try_get(2)?) {
                        failed = Some(e);
                    }
                }
            }
            Ok(())
        })?;
        failed.map_or(Ok(()), Err)
    }

    fn fleet_several_keys(&self, gen: i64) -> Result<Vec<(String, i32)>, StoreError> {
        self.with_reader(|c| {
            let rows = c.query(
                "SELECT unit, keys FROM fleet_gen_units WHERE gen = $1 AND keys > 1 \
                 ORDER BY unit",
                &[&gen],
            )?;
            Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    fn fleet_issues(
        &self,
        f: &FleetFilter,
        limit: usize,
    ) -> Result<(Vec<FleetRow>, u64), StoreError> {
        let board = f.board.as_deref().map(str::trim);
        let unknown = board == Some(usbperf_fleet::extract::UNKNOWN_BOARD);
        let board = board.filter(|_| !unknown);
        let cond = "kind <> 'record' AND ($1::bigint IS NULL OR started_ns >= $1) \
                    AND ($2::text IS NULL OR board = $2) AND (NOT $3 OR board IS NULL)";
        self.with_reader(|c| {
            let total: i64 = c
                .query_one(
                    &format!("SELECT count(*) FROM fleet_records WHERE {cond}"),
                    &[&f.since_ns, &board, &unknown],
                )?
                .get(0);
            let rows = c.query(
                &format!(
                    "SELECT file, kind, body FROM fleet_records WHERE {cond} \
                     ORDER BY file COLLATE \"C\" LIMIT {limit}"
                ),
                &[&f.since_ns, &board, &unknown],
            )?;
            Ok((
                rows.into_iter()
                    .map(|r| FleetRow {
                        file: r.get(0),
                        kind: r.get(1),
                        body: r.get(2),
                        record: Vec::new(),
                    })
                    .collect(),
                total as u64,
            ))
        })
    }

    fn lookup(&self, report_id: &str, sha256: &str) -> Result<Option<Stored>, StoreError> {
        let row = self.with_session(|c| {
            c.query_opt(
                "SELECT body_sha256, CASE WHEN body_sha256 IS NULL THEN raw ELSE ''::bytea END \
                 FROM reports WHERE report_id = $1",
                &[&report_id],
            )
        })?;
        Ok(row.map(|row| super::compare(row.get(0), &row.get::<_, Vec<u8>>(1), sha256)))
    }

    fn health(&self) -> Result<(), StoreError> {
        // TRUNCATE gives the table a new, empty file: the insert must extend it, which is
        // what a full disk refuses (an update in place of an existing row never would).
        self.with_session(|c| {
            let mut tx = c.transaction()?;
            tx.batch_execute(
                "TRUNCATE collector_health_probe; \
                 INSERT INTO collector_health_probe (checked_at) VALUES (now())",
            )?;
            tx.commit()
        })
    }

    fn count(&self) -> Result<u64, StoreError> {
        self.with_session(|c| {
            let row = c.query_one("SELECT count(*) FROM reports", &[])?;
            Ok(row.get::<_, i64>(0) as u64)
        })
    }
}
