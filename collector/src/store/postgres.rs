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

use super::{Store, StoreError, Stored};
use crate::ingest::Record;

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
    received_at timestamptz NOT NULL DEFAULT now()
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
";

pub struct Postgres {
    url: String,
    sessions: Vec<Mutex<Option<Client>>>,
    next: AtomicUsize,
}

fn connect(url: &str) -> Result<Client, StoreError> {
    let mut c = Client::connect(url, NoTls)?;
    c.batch_execute("SET synchronous_commit = on")?;
    Ok(c)
}

impl Postgres {
    pub fn open(url: &str, sessions: usize) -> Result<Postgres, StoreError> {
        let mut first = connect(url)?;
        // Two collectors starting at once may both create the tables: serialise them.
        let mut tx = first.transaction()?;
        tx.batch_execute("SELECT pg_advisory_xact_lock(7715100015)")?;
        tx.batch_execute(SCHEMA)?;
        tx.commit()?;
        let mut v = vec![Mutex::new(Some(first))];
        v.extend((1..sessions).map(|_| Mutex::new(None)));
        Ok(Postgres {
            url: url.to_string(),
            sessions: v,
            next: AtomicUsize::new(0),
        })
    }

    /// Runs `f` on a session, opening (or reopening, after the server restarted) it first.
    fn with_session<T>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<T, ::postgres::Error>,
    ) -> Result<T, StoreError> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.sessions.len();
        let mut slot = self.sessions[i].lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().map_or(true, |c| c.is_closed()) {
            *slot = Some(connect(&self.url)?);
        }
        let client = slot.as_mut().expect("connected above");
        let res = f(client);
        if res.is_err() && client.is_closed() {
            *slot = None;
        }
        Ok(res?)
    }
}

impl Store for Postgres {
    fn insert(&self, r: &Record, raw: &[u8]) -> Result<Stored, StoreError> {
        self.with_session(|c| {
            let mut tx = c.transaction()?;
            let schema_version = r.schema_version as i32;
            let n = tx.execute(
                "INSERT INTO reports (report_id, schema_version, unit, board, hostname, \
                 started_at, finished_at, status, pass, exit_code, format, raw) \
                 VALUES ($1, $2, $3, $4, $5, CAST($6::text AS timestamptz), \
                 CAST($7::text AS timestamptz), $8, $9, $10, $11, $12) \
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
                ],
            )?;
            if n == 0 {
                tx.rollback()?;
                return Ok(Stored::Duplicate);
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

    fn count(&self) -> Result<u64, StoreError> {
        self.with_session(|c| {
            let row = c.query_one("SELECT count(*) FROM reports", &[])?;
            Ok(row.get::<_, i64>(0) as u64)
        })
    }
}
