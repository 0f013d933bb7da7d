//! `usbperf-collect`: parse flags, open the database and the token file, serve until SIGTERM
//! or SIGINT (requests under way finish; every acknowledged report is already committed).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;

use usbperf_collect::server::{self, App};
use usbperf_collect::{store, tokens::Tokens, DEFAULT_MAX_BODY_BYTES};

/// Collector of usbperf factory reports: units POST to /api/v1/reports; each report is
/// checked and stored once per report_id in SQLite or PostgreSQL before it is acknowledged.
#[derive(Debug, Parser)]
#[command(name = "usbperf-collect", version, about)]
struct Args {
    /// Address to listen on (plain HTTP; put a TLS proxy in front, see README). Port 0
    /// picks a free port; the address is printed on standard output.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: String,
    /// Database: sqlite:PATH (embedded, one file) or postgres://USER@HOST/DB.
    #[arg(
        long,
        value_name = "URL",
        default_value = "sqlite:/var/lib/usbperf-collect/reports.db"
    )]
    db: String,
    /// Accepted tokens, one per line (# comments allowed): per unit or per test line.
    #[arg(long, value_name = "FILE")]
    token_file: PathBuf,
    /// Largest report body accepted (413 above it).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    max_body_bytes: u64,
    /// PostgreSQL sessions shared by the request workers.
    #[arg(long, value_name = "N", default_value_t = 8)]
    db_sessions: usize,
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("usbperf-collect: error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let tokens = Tokens::load(&args.token_file)?;
    let store: Arc<dyn store::Store> = Arc::from(
        store::open(&args.db, args.db_sessions)
            .with_context(|| format!("cannot open the database {}", args.db))?,
    );
    let app = Arc::new(App {
        store,
        tokens,
        max_body_bytes: args.max_body_bytes,
    });
    // The sync PostgreSQL client runs its own small runtime and must not be dropped inside
    // tokio's: this handle keeps the store alive until the server's runtime is gone.
    let keep = app.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let served = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .with_context(|| {
                format!(
                    "cannot listen on {} (in use? a privileged port?)",
                    args.listen
                )
            })?;
        let addr = listener.local_addr()?;
        println!(
            "usbperf-collect: listening on http://{addr}{}",
            server::REPORTS_PATH
        );
        axum::serve(listener, server::router(app))
            .with_graceful_shutdown(shutdown())
            .await
            .context("the HTTP server stopped")
    });
    drop(rt);
    drop(keep);
    served
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
