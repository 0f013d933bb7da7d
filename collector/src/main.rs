//! `usbperf-collect`: parse flags, open the database and the token file, serve until SIGTERM
//! or SIGINT (requests under way finish; every acknowledged report is already committed);
//! `usbperf-collect fleet` prints the fleet of the stored reports and exits.

/// mimalloc, not glibc's malloc: the fleet query allocates its records' strings on decoding
/// threads and frees them on the aggregating one, and glibc then takes the decoding
/// threads' arena locks for every free (a quarter of the query's time over 100,000
/// reports); mimalloc hands such frees back without a lock.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;

use usbperf_collect::fleet::{self as fleetdb, FleetQuery, Format};
use usbperf_collect::server::{self, App, Page};
use usbperf_collect::store::FoldScope;
use usbperf_collect::summaries::FOLD_BATCH;
use usbperf_collect::{store, tls, tokens::Tokens, unit_keys::UnitKeys, DEFAULT_MAX_BODY_BYTES};

/// Collector of usbperf factory reports: units POST to /api/v1/reports; each report is
/// checked and stored once per report_id in SQLite or PostgreSQL before it is acknowledged.
#[derive(Debug, Parser)]
#[command(
    name = "usbperf-collect",
    version,
    about,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Args {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    serve: Serve,
}

#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// The fleet of the stored reports: the tables, learned thresholds or HTML page of
    /// `usbperf-matrix fleet` over the same reports as files.
    Fleet(FleetArgs),
    /// Build the fleet's summaries again from every stored report (after a damaged summary,
    /// or to check them), beside the summaries that answer until the new ones are built;
    /// with --resume, fold only what is still queued (an interrupted rebuild goes on where
    /// it stopped). Progress on standard error.
    FleetRebuild(RebuildArgs),
}

#[derive(Debug, clap::Args)]
struct RebuildArgs {
    /// Database: sqlite:PATH or postgres://USER@HOST/DB.
    #[arg(
        long,
        value_name = "URL",
        default_value = "sqlite:/var/lib/usbperf-collect/reports.db"
    )]
    db: String,
    /// Fold what is queued, without queueing every report again.
    #[arg(long)]
    resume: bool,
    /// Queue every report for new summaries and return: the running collectors build them
    /// (a thread in each folds every 2 s).
    #[arg(long, conflicts_with = "resume")]
    background: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FleetFormat {
    Text,
    Json,
    Html,
}

#[derive(Debug, clap::Args)]
struct FleetArgs {
    /// Database: sqlite:PATH or postgres://USER@HOST/DB.
    #[arg(
        long,
        value_name = "URL",
        default_value = "sqlite:/var/lib/usbperf-collect/reports.db"
    )]
    db: String,
    /// Only reports started on or after DATE (YYYY-MM-DD, UTC, or an RFC 3339 time).
    #[arg(long, value_name = "DATE")]
    since: Option<String>,
    /// Only reports of this board (the unit's device-tree / DMI model, as the table shows it).
    #[arg(long, value_name = "MODEL")]
    board: Option<String>,
    /// Group devices by these, comma-separated: board, device-class, port, device-model,
    /// tool-version.
    #[arg(long, default_value = "board,device-class", value_name = "DIMS")]
    group_by: String,
    #[arg(long, value_enum, default_value_t = FleetFormat::Text)]
    format: FleetFormat,
    /// Print a board-profile `thresholds:` list learned from the devices that passed.
    #[arg(long)]
    suggest_thresholds: bool,
    /// Margin of learned limits below the fleet's 1st percentile (above its p99 latency).
    #[arg(long, default_value_t = 20.0, value_name = "PERCENT")]
    margin_percent: f64,
    /// Write the output here instead of standard output.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Compare each image build with the one before it, per board, device class and figure.
    #[arg(long)]
    compare_builds: bool,
    /// Follow each flash part across the stored reports, factory and field: its wear rate,
    /// when it reaches its limit, and the parts wearing faster than their board's others.
    #[arg(long)]
    wear: bool,
    /// Read every stored report instead of the summaries: exactly `usbperf-matrix fleet` of
    /// the same files (percentiles from the summaries are within 0.1 %), at a cost that grows
    /// with the reports stored.
    #[arg(long)]
    exact: bool,
}

#[derive(Debug, clap::Args)]
struct Serve {
    /// Address to listen on: https with --tls-cert and --tls-key, else plain HTTP. Port 0
    /// picks a free port; the URL is printed on standard output.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: String,
    /// Serve https with this certificate (PEM: the server's certificate, then its CA chain),
    /// on --listen and --page-listen. Read again on SIGHUP.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM; only its owner may read it).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Database: sqlite:PATH (embedded, one file) or postgres://USER@HOST/DB.
    #[arg(
        long,
        value_name = "URL",
        default_value = "sqlite:/var/lib/usbperf-collect/reports.db"
    )]
    db: String,
    /// Accepted tokens, one per line (# comments allowed): per unit or per test line.
    #[arg(long, value_name = "FILE", required = true)]
    token_file: Option<PathBuf>,
    /// Largest report body accepted (413 above it).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    max_body_bytes: u64,
    /// PostgreSQL sessions shared by the request workers.
    #[arg(long, value_name = "N", default_value_t = 8)]
    db_sessions: usize,
    /// PostgreSQL's password, read from this file (only its owner may read it), when the
    /// --db URL holds none; else the PGPASSWORD environment variable is used. A password in
    /// the URL is visible to every user in `ps`.
    #[arg(long, value_name = "FILE")]
    db_password_file: Option<PathBuf>,
    /// Also serve the fleet page, token-free and read-only, on this address: GET /fleet
    /// (HTML, refreshing itself) and /fleet.json, with ?since=DATE&board=MODEL.
    #[arg(long, value_name = "ADDR")]
    page_listen: Option<String>,
    /// The page reads the fleet and stored reports from this database: a read replica of
    /// the PostgreSQL database --db names, so the page's queries load the replica, not the
    /// primary the uploads are stored in. The collectors on --db fold what arrives into the
    /// summaries every 2 s; the page lags by that and by the replica's delay.
    #[arg(long, value_name = "URL", requires = "page_listen")]
    page_db: Option<String>,
    /// Fold the reports stored into the fleet's summaries at least this often (seconds; at
    /// once when 512 wait). Each fold rewrites the summaries its reports fall in (a few MB
    /// once a year's are full), so a line's trickle is folded in batches; a query folds what
    /// it needs first, so it sees every report either way.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    fold_every: u32,
    /// Seconds between the page's reloads in the browser.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    page_refresh: u32,
    /// The factory's list of unit keys (`KEY UNIT` a line, as `usbperf-matrix upload
    /// --print-key` prints it): a report is stored only for a listed unit, signed with its
    /// key. Without it, a unit's key is enrolled with its first signed report. Read again on
    /// SIGHUP.
    #[arg(long, value_name = "FILE")]
    unit_keys: Option<PathBuf>,
    /// Use a token file other users may read (refused by default, with a warning when used).
    #[arg(long)]
    allow_readable_token: bool,
    /// Connections open at once (more wait in the listen backlog); keep it under the
    /// process's file limit (the shipped systemd unit sets LimitNOFILE=65536).
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_connections: u32,
    /// Connections open at once from one address (past it a new one is closed at once): one
    /// host cannot take every slot. A NAT in front of a whole line counts as one address.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_per_address: u32,
    /// Report bodies read and stored at once; memory for bodies is at most this times
    /// --max-body-bytes.
    #[arg(long, value_name = "N", default_value_t = server::INGEST_SLOTS as u32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    ingest_slots: u32,
    /// Seconds a client has to send a request's headers (and an idle keep-alive connection
    /// stays open).
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    header_timeout: u64,
    /// Seconds an answer may make no progress before its connection is closed (a client
    /// that stops reading a page frees its connection slot).
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    write_timeout: u64,
    /// Seconds a client has to send a report's body.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    body_timeout: u64,
}

/// A mistake in the command line (exit 2, as `usbperf-matrix fleet` has it).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Usage(String);

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let res = match &args.command {
        Some(Cmd::Fleet(f)) => fleet(f),
        Some(Cmd::FleetRebuild(r)) => rebuild(r),
        None => run(args.serve),
    };
    match res {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("usbperf-collect: error: {e:#}");
            let usage = e.downcast_ref::<Usage>().is_some();
            std::process::ExitCode::from(if usage { 2 } else { 1 })
        }
    }
}

/// The database a command names, which must exist when it is a SQLite file: opening creates
/// a missing one, and a mistyped path would show an empty fleet.
fn existing_store(db: &str) -> anyhow::Result<Box<dyn store::Store>> {
    if let Some(path) = db.strip_prefix("sqlite:") {
        let path = path.strip_prefix("//").unwrap_or(path);
        if !std::path::Path::new(path).is_file() {
            return Err(Usage(format!(
                "--db {db}: no such database file (the collector's --db, e.g. \
                 sqlite:/var/lib/usbperf-collect/reports.db)"
            ))
            .into());
        }
    }
    let password = db_password(None)?;
    store::open(db, 1, password.as_deref())
        .with_context(|| format!("cannot open the database {}", store::shown(db)))
}

fn rebuild(args: &RebuildArgs) -> anyhow::Result<()> {
    let store = existing_store(&args.db)?;
    let queued = if args.resume {
        store.fleet_queued()?
    } else {
        store.fleet_rebuild()?
    };
    eprintln!("usbperf-collect: {queued} reports to fold into the fleet's summaries");
    if args.background {
        eprintln!(
            "usbperf-collect: the running collectors fold them; the summaries they replace \
             answer until then"
        );
        return Ok(());
    }
    let started = std::time::Instant::now();
    let mut shown = 0u64;
    let folded = store.fleet_fold(FoldScope::All, &mut |done, of| {
        // A line per tenth, and the last: a million reports print ten lines, not two thousand.
        if done * 10 / of.max(1) > shown * 10 / of.max(1) || done == of {
            shown = done;
            eprintln!(
                "usbperf-collect: folded {done} of {of} ({:.0} %, {:.0} s)",
                done as f64 * 100.0 / of.max(1) as f64,
                started.elapsed().as_secs_f64()
            );
        }
    })?;
    eprintln!(
        "usbperf-collect: the fleet's summaries hold every stored report ({folded} folded in \
         {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn fleet(args: &FleetArgs) -> anyhow::Result<()> {
    let margin =
        usbperf_fleet::learn_margin(args.margin_percent).map_err(|e| Usage(e.to_string()))?;
    let mut group_by =
        usbperf_fleet::Dimension::parse_list(&args.group_by).map_err(|e| Usage(e.to_string()))?;
    if args.suggest_thresholds {
        // As `usbperf-matrix fleet`: the library's groups.
        group_by = usbperf_fleet::learning_groups(&group_by);
    }
    let q = FleetQuery {
        since: args
            .since
            .as_deref()
            .map(usbperf_fleet::records::parse_since)
            .transpose()
            .map_err(Usage)?,
        board: args.board.clone(),
        group_by,
        compare_builds: args.compare_builds,
        wear: args.wear,
        exact: args.exact,
    };
    let store = existing_store(&args.db)?;
    let view = match fleetdb::fleet(store.as_ref(), &q) {
        Ok(v) => v,
        Err(e @ fleetdb::FleetDbError::NothingMatched(_)) => {
            return Err(Usage(e.to_string()).into())
        }
        Err(e) => return Err(e.into()),
    };
    let body = if args.suggest_thresholds {
        fleetdb::render_thresholds(&view, margin).map_err(|e| Usage(e.to_string()))?
    } else {
        let format = match args.format {
            FleetFormat::Text => Format::Text,
            FleetFormat::Json => Format::Json,
            FleetFormat::Html => Format::Html,
        };
        fleetdb::render(&view, format, "")
    };
    match &args.out {
        Some(p) => std::fs::write(p, body).with_context(|| format!("cannot write {}", p.display())),
        None => {
            use std::io::Write;
            // A closed pipe (`| head`) is not an error worth a message.
            let _ = std::io::stdout().lock().write_all(body.as_bytes());
            Ok(())
        }
    }
}

fn run(args: Serve) -> anyhow::Result<()> {
    let token_file = args
        .token_file
        .clone()
        .context("--token-file is required")?;
    let tokens = Tokens::load(&token_file, args.allow_readable_token)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(Arc::new(tls::Tls::load(cert, key)?)),
        _ => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let unit_keys = args
        .unit_keys
        .as_deref()
        .map(UnitKeys::load)
        .transpose()?
        .map(Arc::new);
    let password = db_password(args.db_password_file.as_deref())?;
    let store: Arc<dyn store::Store> = Arc::from(
        store::open(&args.db, args.db_sessions, password.as_deref())
            .with_context(|| format!("cannot open the database {}", store::shown(&args.db)))?,
    );
    let page_store: Option<Arc<dyn store::Store>> = match &args.page_db {
        Some(url) => Some(Arc::from(
            store::open_replica(url, password.as_deref()).with_context(|| {
                format!("cannot open the page's database {}", store::shown(url))
            })?,
        )),
        None => None,
    };
    let app = Arc::new(App {
        store,
        page_store,
        tokens: std::sync::RwLock::new(tokens),
        max_body_bytes: args.max_body_bytes,
        page: Page::new(args.page_refresh),
        ingest_slots: tokio::sync::Semaphore::new(args.ingest_slots as usize),
        body_timeout: std::time::Duration::from_secs(args.body_timeout),
        auth_failures: server::AuthFailures::default(),
        unit_keys: std::sync::RwLock::new(unit_keys),
        ready: tokio::sync::Mutex::new(None),
    });
    // Folds what units send into the fleet's summaries, so that a page or a `fleet` query
    // folds only the last reports before it reads. A fold rewrites the summaries of the
    // days, weeks, 13 weeks and years its reports fall in (a few MB each once full), so it
    // folds when FOLD_BATCH reports wait or --fold-every has passed (a minute), not every
    // report as it comes: a line's trickle would rewrite them every few seconds. Uploads
    // come first: while one is being taken (an ingest slot in use) the fold waits, up to
    // 10 s, so a burst is stored at the speed it was without summaries. A query folds what
    // it needs first in any case.
    {
        const ROUND: std::time::Duration = std::time::Duration::from_secs(2);
        const BUSY_ROUNDS: u32 = 5;
        let idle_rounds = (args.fold_every / 2).max(1);
        let app = app.clone();
        let slots = args.ingest_slots as usize;
        std::thread::Builder::new()
            .name("fleet-fold".into())
            .spawn(move || {
                let mut said: Option<String> = None;
                // The first fold is at once: it makes this build's generation when it has
                // none, so ingest queues for it from the start.
                let (mut busy, mut idle, mut first) = (0, idle_rounds, true);
                loop {
                    if !first {
                        std::thread::sleep(ROUND);
                    }
                    first = false;
                    if app.ingest_slots.available_permits() < slots && busy < BUSY_ROUNDS {
                        busy += 1;
                        continue;
                    }
                    busy = 0;
                    let waiting = app.store.fleet_queued().unwrap_or(u64::MAX);
                    if waiting < FOLD_BATCH as u64 {
                        // Little that can wait, or nothing: the generations are still
                        // folded (a new one started, old ones dropped) every --fold-every.
                        idle += 1;
                        if idle < idle_rounds {
                            continue;
                        }
                    }
                    idle = 0;
                    match app.store.fleet_fold(FoldScope::All, &mut |_, _| {}) {
                        Ok(_) => said = None,
                        Err(e) => {
                            let m = e.to_string();
                            if said.as_deref() != Some(m.as_str()) {
                                eprintln!("usbperf-collect: the fleet's summaries: {m}");
                                said = Some(m);
                            }
                        }
                    }
                }
            })
            .context("cannot start the fleet's folding thread")?;
    }
    let limits = server::ServeLimits {
        max_connections: args.max_connections as usize,
        max_per_address: args.max_per_address as usize,
        header_timeout: std::time::Duration::from_secs(args.header_timeout),
        write_timeout: std::time::Duration::from_secs(args.write_timeout),
        ..server::ServeLimits::default()
    };
    // The sync PostgreSQL client runs its own small runtime and must not be dropped inside
    // tokio's: this handle keeps the store alive until the server's runtime is gone.
    let keep = app.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let served = rt.block_on(async move {
        let listener = server::bind(&args.listen).await.with_context(|| {
            format!(
                "cannot listen on {} (in use? a privileged port?)",
                args.listen
            )
        })?;
        let addr = listener.local_addr()?;
        println!(
            "usbperf-collect: listening on {scheme}://{addr}{}",
            server::REPORTS_PATH
        );
        let page = match &args.page_listen {
            Some(a) => {
                let l = server::bind(a)
                    .await
                    .with_context(|| format!("cannot listen on {a} (--page-listen)"))?;
                println!(
                    "usbperf-collect: fleet page on {scheme}://{}/fleet",
                    l.local_addr()?
                );
                let router = server::page_router(app.clone());
                Some(tokio::spawn(server::serve(
                    l,
                    router,
                    limits,
                    tls.clone(),
                    shutdown(),
                )))
            }
            None => None,
        };
        // SIGHUP reads the token file again: a removed token is refused from the next
        // request on, connections and requests under way are left alone. A file that cannot
        // be used keeps the tokens in force.
        let reload = tokio::spawn(reload_on_hup(
            app.clone(),
            token_file.clone(),
            args.allow_readable_token,
            tls.clone(),
            args.unit_keys.clone(),
        ));
        server::serve(listener, server::router(app), limits, tls, shutdown()).await;
        reload.abort();
        if let Some(p) = page {
            p.abort();
        }
        anyhow::Ok(())
    });
    drop(rt);
    drop(keep);
    served
}

/// SIGHUP reads the token file again, the unit key list when one is given, and the
/// certificate and key when https is served (a renewed certificate is served from the next
/// connection on). What cannot be used keeps what is in force.
async fn reload_on_hup(
    app: Arc<App>,
    path: PathBuf,
    allow_readable: bool,
    tls: Option<Arc<tls::Tls>>,
    unit_keys: Option<PathBuf>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        return;
    };
    while hup.recv().await.is_some() {
        match Tokens::load(&path, allow_readable) {
            Ok(t) => {
                let n = t.len();
                *app.tokens.write().unwrap_or_else(|e| e.into_inner()) = t;
                eprintln!(
                    "usbperf-collect: SIGHUP: {n} token(s) read again from {}",
                    path.display()
                );
            }
            Err(e) => eprintln!("usbperf-collect: SIGHUP: the tokens in force are kept: {e}"),
        }
        if let Some(path) = &unit_keys {
            match UnitKeys::load(path) {
                Ok(k) => {
                    let n = k.len();
                    *app.unit_keys.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(k));
                    eprintln!(
                        "usbperf-collect: SIGHUP: {n} unit key(s) read again from {}",
                        path.display()
                    );
                }
                Err(e) => {
                    eprintln!("usbperf-collect: SIGHUP: the unit keys in force are kept: {e}")
                }
            }
        }
        if let Some(tls) = &tls {
            match tls.reload() {
                Ok(()) => eprintln!(
                    "usbperf-collect: SIGHUP: certificate read again from {}",
                    tls.cert_path().display()
                ),
                Err(e) => {
                    eprintln!("usbperf-collect: SIGHUP: the certificate in force is kept: {e}")
                }
            }
        }
    }
}

/// PostgreSQL's password when the URL holds none: from `file` (refused when others may read
/// it, as the token file is), else from `PGPASSWORD`, as libpq's own clients take it.
fn db_password(file: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    use std::os::unix::fs::PermissionsExt;
    let Some(file) = file else {
        return Ok(std::env::var("PGPASSWORD").ok().filter(|p| !p.is_empty()));
    };
    let mode = std::fs::metadata(file)
        .with_context(|| format!("cannot read --db-password-file {}", file.display()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(Usage(format!(
            "--db-password-file {}: other users may read or change it (mode {:04o}): `chmod 0600 {}`",
            file.display(),
            mode & 0o7777,
            file.display()
        ))
        .into());
    }
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read --db-password-file {}", file.display()))?;
    Ok(Some(text.trim_end_matches(['\n', '\r']).to_string()))
}

async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
