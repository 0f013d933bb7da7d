//! Owns the HTTP side: `POST /api/v1/reports` and `GET /healthz` on axum (hyper, tokio).
//! The order of checks is the point, and each is a tower layer of its own ([`router`],
//! outermost first):
//!
//! 1. the access log ([`access_log`], every route of both routers): one line per request;
//! 2. the token ([`authenticate`]) before any of the body is used: 401, or 429 past the
//!    failed-auth limit; a small body is read and dropped first so the client sees the
//!    answer, a larger one is never read;
//! 3. the declared length ([`declared_length`]) before the body is read: 413, so a 100 MB
//!    body is refused without being buffered (a chunked one is cut off at the limit below);
//! 4. an ingest slot ([`ingest_slot`]): bodies in memory are bounded; 503 after
//!    [`SLOT_WAIT`];
//! 5. the whole body within the body timeout ([`body_in_time`]): 408 late, 413 past the
//!    limit, 400 when it ends early.
//!
//! Then the handler: the signature (403), a re-send under a stored id (answered from the
//! index, before decoding), the report itself within `report::decode`'s limits (400, 413 for
//! size, 422 implausible), and the database (503 when it fails, so the unit keeps the report
//! and retries). The answer is 201 (stored now) or 200 (already stored with the same bytes),
//! with `{"report_id": …, "sha256": …, "stored": "new"|"duplicate"}`, only after the commit;
//! 409 when the id is stored with other bytes (nothing is replaced, and the unit must not
//! take it for delivered). Every refusal, of a layer or a handler, is an [`ApiError`].
//!
//! TLS: [`serve`] speaks https itself with `--tls-cert`/`--tls-key` (`crate::tls`), else
//! plain HTTP, for a reverse proxy in front that terminates TLS (docs/collector.md). Every
//! connection's writes are bounded by [`WriteDeadline`].
//!
//! The fleet page (`--page-listen`) is a router of its own on its own listener: read-only
//! and token-free, since a browser kept open on the line cannot send a unit's bearer token
//! and must not hold one (a token is the right to store reports). `GET /fleet` (HTML that
//! reloads itself) and `GET /fleet.json`, with `?since=&board=`, computed from the database
//! and cached for [`PAGE_CACHE`], so many screens on the line cost one query.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tower::ServiceBuilder;

use crate::fleet::{self, FleetDbError, FleetQuery, Format};
use crate::ingest::{self, IngestError};
use crate::store::{Store, Stored};
use crate::tokens::Tokens;

/// The endpoint units POST to.
pub const REPORTS_PATH: &str = "/api/v1/reports";
/// The header the unit sends the report's id in (header names are matched case-blind).
pub use usbperf_report::seal::REPORT_ID_HEADER;

pub struct App {
    pub store: Arc<dyn Store>,
    /// What the fleet page reads (`--page-db`, a read replica of `store`), else `store`.
    pub page_store: Option<Arc<dyn Store>>,
    /// The accepted tokens: replaced whole when the token file is read again (SIGHUP).
    pub tokens: std::sync::RwLock<Tokens>,
    pub max_body_bytes: u64,
    pub page: Page,
    /// Bodies held in memory at once: an authenticated upload waits for a slot before its
    /// body is read, so memory is bounded by slots × `max_body_bytes`, not by the clients.
    pub ingest_slots: tokio::sync::Semaphore,
    /// How long a client may take to send its body.
    pub body_timeout: Duration,
    pub auth_failures: AuthFailures,
    /// The factory's list of unit keys (`--unit-keys`), replaced whole on SIGHUP; `None`: a
    /// unit's key is enrolled with its first signed report.
    pub unit_keys: std::sync::RwLock<Option<Arc<crate::unit_keys::UnitKeys>>>,
    /// The last readiness probe's answer and when it was taken: probes within
    /// [`READY_FRESH`] of it are answered from it, so probing faster (anyone may) does not
    /// make the database commit faster.
    pub ready: tokio::sync::Mutex<Option<(Instant, Result<(), String>)>>,
}

impl App {
    /// The store the fleet page reads.
    pub fn page_store(&self) -> &dyn Store {
        self.page_store.as_ref().unwrap_or(&self.store).as_ref()
    }
}

/// How long a readiness probe's answer is reused.
pub const READY_FRESH: Duration = Duration::from_secs(1);

/// How long an upload waits for an ingest slot before it is answered 503.
pub const SLOT_WAIT: Duration = Duration::from_secs(2);

/// Ingest slots by default: enough to keep the database busy, few enough that 8 MiB bodies
/// in all of them stay far from a small server's memory.
pub const INGEST_SLOTS: usize = 32;

/// At most this much of an unauthenticated request's body is read (and dropped), so a
/// client with a wrong token still reads its 401 instead of a broken pipe; a longer body is
/// not read at all, and the connection is closed.
pub const UNAUTHENTICATED_DRAIN: u64 = 64 << 10;

/// How long that drain waits for the small body: a stranger who declares a body and sends
/// none holds its connection this long, not until the body timeout of an authenticated
/// upload.
pub const UNAUTHENTICATED_DRAIN_WAIT: Duration = Duration::from_millis(500);

/// Failed authentications, counted per client address, said on standard error at most once
/// per [`AUTH_LOG_EVERY`] and answered 429 beyond [`AUTH_FAILURES_PER_MINUTE`] a minute.
#[derive(Default)]
pub struct AuthFailures {
    state: Mutex<AuthState>,
}

#[derive(Default)]
struct AuthState {
    window_start: Option<Instant>,
    per_peer: HashMap<std::net::IpAddr, u32>,
    /// The failures of addresses met after [`AUTH_PEERS`] others in the window, counted
    /// together: a flood of new addresses shares one limit instead of resetting everyone's.
    overflow: u32,
    since_log: u64,
    last_log: Option<Instant>,
}

pub const AUTH_FAILURES_PER_MINUTE: u32 = 30;
pub const AUTH_LOG_EVERY: Duration = Duration::from_secs(10);
/// Addresses counted on their own in a window; failures from more share one count.
const AUTH_PEERS: usize = 10_000;

impl AuthFailures {
    /// Counts one failure from `peer`; whether it is over the limit.
    pub fn failed(&self, peer: Option<std::net::IpAddr>) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if st
            .window_start
            .map_or(true, |t| now.duration_since(t) >= Duration::from_secs(60))
        {
            st.window_start = Some(now);
            st.per_peer.clear();
            st.overflow = 0;
        }
        let full = st.per_peer.len() >= AUTH_PEERS;
        let n = match peer {
            Some(ip) if !full || st.per_peer.contains_key(&ip) => {
                let n = st.per_peer.entry(ip).or_insert(0);
                *n += 1;
                *n
            }
            _ => {
                st.overflow += 1;
                st.overflow
            }
        };
        st.since_log += 1;
        if st
            .last_log
            .map_or(true, |t| now.duration_since(t) >= AUTH_LOG_EVERY)
        {
            eprintln!(
                "usbperf-collect: {} request(s) with a missing or wrong token since the last \
                 such line (the latest from {}); each was answered 401",
                st.since_log,
                peer.map_or("an unknown address".to_string(), |p| p.to_string())
            );
            st.since_log = 0;
            st.last_log = Some(now);
        }
        n > AUTH_FAILURES_PER_MINUTE
    }
}

/// How the connection loop guards the server (see [`serve`]).
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// Connections open at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Connections open at once from one address: past it a new one is closed at once, so
    /// one host cannot take every slot.
    pub max_per_address: usize,
    /// A request's headers must arrive within this, and an idle keep-alive connection is
    /// closed after it.
    pub header_timeout: Duration,
    /// A connection whose answer makes no progress for this long is closed
    /// ([`WriteDeadline`]): a reader that stops reading frees its slot.
    pub write_timeout: Duration,
    /// After SIGTERM, requests under way get this long (a connection still sending its
    /// headers is not one of them: hyper waits for those until the header timeout, and the
    /// process must be gone within 10 s).
    pub shutdown_grace: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            max_connections: 512,
            max_per_address: 64,
            header_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(8),
        }
    }
}

/// The listen backlog: a factory line's units booting at once queue here while every
/// connection slot is taken, instead of being reset.
pub const LISTEN_BACKLOG: u32 = 4096;

/// Binds `addr` with [`LISTEN_BACKLOG`].
pub async fn bind(addr: &str) -> std::io::Result<tokio::net::TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let socket = if a.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(a).and_then(|()| socket.listen(LISTEN_BACKLOG)) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the address resolves to nothing",
        )
    }))
}

/// The access log's layer: one line per request, with its peer's address (`ConnectInfo`):
/// address, method, path, status, body bytes declared, milliseconds, report id. Failed
/// authentications are left to their own rate-limited line, probes to none.
pub async fn access_log(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let peer = peer_of(&req);
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let id = header_str(req.headers(), REPORT_ID_HEADER)
        .map(|v| v.chars().take(128).collect::<String>());
    let sent = declared(req.headers()).unwrap_or(0);
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    if !matches!(status, 401 | 429) && path != "/healthz" && path != "/readyz" {
        eprintln!(
            "access: {} {method} {path} {status} {sent}B {}ms{}",
            peer.map_or_else(|| "?".to_string(), |p| p.to_string()),
            started.elapsed().as_millis(),
            id.map(|i| format!(" report={i}")).unwrap_or_default()
        );
    }
    resp
}

/// The client's address, which [`serve`] gives every request (`ConnectInfo`); `None` in
/// in-process tests.
fn peer_of(req: &Request) -> Option<std::net::IpAddr> {
    req.extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip())
}

/// The body's length as the headers declare it.
fn declared(h: &HeaderMap) -> Option<u64> {
    header_str(h, "content-length").and_then(|v| v.trim().parse::<u64>().ok())
}

/// Serves `router` on `listener` until `shutdown` completes: at most
/// `limits.max_connections` at once (a slot is taken before `accept`), hyper's header read
/// timeout on every connection (slow headers and idle keep-alive connections are closed), and
/// after `shutdown` the requests under way get `limits.shutdown_grace`, then the rest are
/// dropped. Each request carries its peer's address (`ConnectInfo`).
///
/// With `tls`, every connection is https: the handshake must end within the header timeout,
/// and a client that does not speak TLS (or does not trust the certificate) is closed
/// before any request is read.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ServeLimits,
    tls: Option<Arc<crate::tls::Tls>>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let per_address: Arc<Mutex<HashMap<std::net::IpAddr, usize>>> = Arc::default();
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors, most often: wait instead of spinning.
                    eprintln!("usbperf-collect: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let ip = peer.ip();
        {
            let mut open = per_address.lock().unwrap_or_else(|e| e.into_inner());
            let n = open.entry(ip).or_insert(0);
            if *n >= limits.max_per_address {
                drop(open);
                drop(stream);
                continue;
            }
            *n += 1;
        }
        let router = router.clone();
        let svc = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            let mut router = router.clone();
            async move { tower_service::Service::call(&mut router, req).await }
        });
        let per_address = per_address.clone();
        let (watcher, http, acceptor) = (
            graceful.watcher(),
            http.clone(),
            tls.as_ref().map(|t| t.acceptor()),
        );
        let handshake = limits.header_timeout;
        let stream = WriteDeadline::new(stream, limits.write_timeout);
        tokio::spawn(async move {
            match acceptor {
                None => {
                    let _ = watcher
                        .watch(http.serve_connection(TokioIo::new(stream), svc))
                        .await;
                }
                Some(acceptor) => {
                    // Plain http, an untrusted certificate on the client's side, or a
                    // stranger that never finishes: the connection is closed, nothing read.
                    if let Ok(Ok(tls)) =
                        tokio::time::timeout(handshake, acceptor.accept(stream)).await
                    {
                        let _ = watcher
                            .watch(http.serve_connection(TokioIo::new(tls), svc))
                            .await;
                    }
                }
            }
            let mut open = per_address.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = open.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    open.remove(&ip);
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(limits.shutdown_grace) => {
            eprintln!(
                "usbperf-collect: connections still open {} s after SIGTERM are closed",
                limits.shutdown_grace.as_secs()
            );
        }
    }
}

/// A connection's stream whose writes fail (`TimedOut`) once they have made no progress for
/// `limit`, so hyper closes the connection: a client that stops reading its answer (a page
/// of megabytes read a byte a second) holds a connection slot for `limit`, not for ever. The
/// kernel wakes a writer only when a good part of the send buffer is free, so a reader that
/// trickles stalls the writes as one that reads nothing does. Reads are left alone: the
/// header and body timeouts bound them.
pub struct WriteDeadline<T> {
    io: T,
    limit: Duration,
    /// Since when the pending write has waited.
    stalled: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteDeadline<T> {
    pub fn new(io: T, limit: Duration) -> Self {
        WriteDeadline {
            io,
            limit,
            stalled: None,
        }
    }

    /// A write that could not go on: wait, up to the limit since the stall began.
    fn stall<R>(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<R>> {
        use std::future::Future;
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            std::task::Poll::Ready(()) => std::task::Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing of its answer for {} s",
                    limit.as_secs_f64()
                ),
            ))),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }

    /// A write that went on (or failed): the stall, if any, is over.
    fn progressed<R>(
        &mut self,
        res: std::task::Poll<std::io::Result<R>>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<R>> {
        match res {
            std::task::Poll::Pending => self.stall(cx),
            done => {
                self.stalled = None;
                done
            }
        }
    }
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for WriteDeadline<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let res = std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
        self.progressed(res, cx)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let res = std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.progressed(res, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let res = std::pin::Pin::new(&mut self.io).poll_flush(cx);
        self.progressed(res, cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// How long a computed page is served before the database is asked again.
pub const PAGE_CACHE: Duration = Duration::from_secs(5);

/// Pages kept at once, and the bytes they may hold together: distinct filters (anyone on the
/// line may send them) churn the cache instead of growing it.
pub const PAGE_CACHE_ENTRIES: usize = 32;
pub const PAGE_CACHE_BYTES: usize = 64 << 20;

type PageKey = (FleetQuery, Format);

/// The fleet page's state: the reload interval and the pages computed lately, each one body
/// that every response shares (never a copy per reader).
pub struct Page {
    pub refresh_s: u32,
    cache: Mutex<HashMap<PageKey, (Instant, axum::body::Bytes)>>,
}

impl Page {
    pub fn new(refresh_s: u32) -> Page {
        Page {
            refresh_s,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The page for `key`, from the cache when fresh. The lock is held while computing: a
    /// dozen screens reloading at once make one query, not twelve.
    fn get(&self, store: &dyn Store, key: PageKey) -> Result<axum::body::Bytes, FleetDbError> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, body)) = cache.get(&key) {
            if at.elapsed() < PAGE_CACHE {
                return Ok(body.clone());
            }
        }
        let view = fleet::fleet(store, &key.0);
        let computed = view.map(|view| fleet::render(&view, key.1, "reports/"));
        // The binary's allocator is mimalloc (main.rs), which keeps a thread's freed memory
        // until that thread allocates again: a blocking thread idle after this page would
        // hold the query's whole working set. Given back now, the page port's memory stays
        // that of one query whatever the number of distinct ones.
        // SAFETY: mi_collect only frees what the allocator holds unused; it takes no
        // pointer and is safe to call from any thread at any time.
        unsafe { libmimalloc_sys::mi_collect(true) };
        let mut body = computed?;
        if key.1 == Format::Html {
            // The page is what a production engineer keeps open: it reloads itself.
            let meta = format!(
                "<meta http-equiv=\"refresh\" content=\"{}\">",
                self.refresh_s.max(1)
            );
            body = body.replacen("<head>", &format!("<head>{meta}"), 1);
        }
        let body = axum::body::Bytes::from(body);
        cache.retain(|_, (at, _)| at.elapsed() < PAGE_CACHE);
        // Room for this page: the oldest go first.
        while !cache.is_empty()
            && (cache.len() >= PAGE_CACHE_ENTRIES
                || cache.values().map(|(_, b)| b.len()).sum::<usize>() + body.len()
                    > PAGE_CACHE_BYTES)
        {
            let oldest = cache
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => cache.remove(&k),
                None => break,
            };
        }
        if body.len() <= PAGE_CACHE_BYTES {
            cache.insert(key, (Instant::now(), body.clone()));
        }
        Ok(body)
    }

    /// Pages held now.
    pub fn cached(&self) -> usize {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The read-only fleet page: `--page-listen`'s router.
pub fn page_router(app: Arc<App>) -> Router {
    Router::new()
        .route("/fleet", get(|s, q| fleet_page(s, q, Format::Html)))
        .route("/fleet.json", get(|s, q| fleet_page(s, q, Format::Json)))
        .route("/fleet.txt", get(|s, q| fleet_page(s, q, Format::Text)))
        .route("/reports/:file", get(report_file))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .layer(middleware::from_fn(access_log))
        .with_state(app)
}

/// Why a request is refused: every layer and handler answers with one of these, so each
/// status is decided in one place ([`ApiError::into_response`]). Upload refusals are JSON
/// (`{"error": …}`), the page's plain text.
#[derive(Debug)]
pub enum ApiError {
    /// A missing or wrong token: 401, or 429 when `over` the failed-auth limit.
    Unauthorized { over: bool },
    /// A body longer than the collector's limit: 413.
    TooLarge { limit: u64 },
    /// A report over one of the decoder's size limits: 413, with the limit.
    ReportTooLarge(String),
    /// Every ingest slot taken for [`SLOT_WAIT`]: 503, come back in a second.
    Busy,
    /// The body did not arrive within the body timeout: 408.
    BodyLate { secs: u64 },
    /// The body ended early or could not be read: 400.
    BodyBroken(String),
    /// The signature does not hold, or is not the unit's: 403 with `"refused": "signature"`.
    Signature(String),
    /// Not a report this collector reads: 400.
    Malformed(String),
    /// A report whose values cannot be true (a figure beyond the metric table's ceiling, a
    /// start in the future, a name too long to index): 422.
    Implausible(String),
    /// The id is stored with other bytes: 409, and the stored version is kept.
    Conflict {
        report_id: String,
        sha256: String,
        stored_sha256: String,
    },
    /// The database did not store the report: 503, so the unit keeps it and retries.
    Store(String),
    /// A page query's filter is not one: 400 (plain text).
    BadFilter(String),
    /// No such report or fleet: 404 (plain text).
    NotFound(String),
    /// The database did not answer a page or a probe: 503 (plain text).
    Unavailable(String),
    /// A task failed: 500.
    Internal(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let text = |status: StatusCode, msg: String| (status, format!("{msg}\n")).into_response();
        match self {
            ApiError::Unauthorized { over } => {
                let (status, msg) = if over {
                    (
                        StatusCode::TOO_MANY_REQUESTS,
                        format!(
                            "more than {AUTH_FAILURES_PER_MINUTE} requests with a missing or \
                             wrong token from this address in a minute: fix the token, then \
                             wait a minute"
                        ),
                    )
                } else {
                    (
                        StatusCode::UNAUTHORIZED,
                        "missing or wrong token: send `Authorization: Bearer TOKEN` with a \
                         token of the collector's token file"
                            .to_string(),
                    )
                };
                let mut resp = refuse(status, msg);
                let hs = resp.headers_mut();
                hs.insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer realm=\"usbperf-collect\""),
                );
                hs.insert(
                    header::CONNECTION,
                    header::HeaderValue::from_static("close"),
                );
                if over {
                    hs.insert(header::RETRY_AFTER, header::HeaderValue::from_static("60"));
                }
                resp
            }
            ApiError::TooLarge { limit } => refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("a report may have at most {limit} bytes (collect --max-body-bytes)"),
            ),
            ApiError::ReportTooLarge(why) => refuse(StatusCode::PAYLOAD_TOO_LARGE, why),
            ApiError::Busy => {
                let mut resp = refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the collector is storing as many reports as it may at once: send it \
                     again later",
                );
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
                resp
            }
            ApiError::BodyLate { secs } => refuse(
                StatusCode::REQUEST_TIMEOUT,
                format!("the body did not arrive within {secs} s; send it again"),
            ),
            ApiError::BodyBroken(e) => refuse(
                StatusCode::BAD_REQUEST,
                format!("the body ended early or could not be read: {e}"),
            ),
            ApiError::Signature(why) => answer(
                StatusCode::FORBIDDEN,
                serde_json::json!({ "error": why, "refused": "signature" }),
            ),
            ApiError::Malformed(why) => refuse(StatusCode::BAD_REQUEST, why),
            ApiError::Implausible(why) => refuse(StatusCode::UNPROCESSABLE_ENTITY, why),
            ApiError::Conflict {
                report_id,
                sha256,
                stored_sha256,
            } => answer(
                StatusCode::CONFLICT,
                serde_json::json!({
                    "error": format!(
                        "report {report_id} is already stored with other content: the stored \
                         version is kept, and this one is not; a unit must never reuse a \
                         report_id (look at both copies before deleting either)"
                    ),
                    "report_id": report_id,
                    "sha256": sha256,
                    "stored_sha256": stored_sha256,
                }),
            ),
            ApiError::Store(e) => refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the database did not take the report ({e}); send it again later"),
            ),
            ApiError::BadFilter(e) => text(StatusCode::BAD_REQUEST, e),
            ApiError::NotFound(e) => text(StatusCode::NOT_FOUND, e),
            ApiError::Unavailable(e) => text(StatusCode::SERVICE_UNAVAILABLE, e),
            ApiError::Internal(e) => refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal error: {e}"),
            ),
        }
    }
}

/// `GET /reports/<report_id>.<format>`: a stored report as sent, for the page's links.
async fn report_file(
    State(app): State<Arc<App>>,
    axum::extract::Path(file): axum::extract::Path<String>,
) -> Result<Response, ApiError> {
    let missing = || ApiError::NotFound("no such report".into());
    let (id, ext) = file.rsplit_once('.').ok_or_else(missing)?;
    let (id, ext) = (id.to_string(), ext.to_string());
    let found = tokio::task::spawn_blocking(move || app.page_store().raw(&id))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(|e| ApiError::Unavailable(format!("the database did not answer: {e}")))?;
    match found {
        Some((format, raw)) if format == ext => {
            let ctype = if format == "json" {
                "application/json"
            } else {
                "application/yaml"
            };
            Ok((StatusCode::OK, [(header::CONTENT_TYPE, ctype)], raw).into_response())
        }
        _ => Err(missing()),
    }
}

async fn fleet_page(
    State(app): State<Arc<App>>,
    Query(params): Query<HashMap<String, String>>,
    format: Format,
) -> Result<Response, ApiError> {
    let nonempty = |k: &str| params.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    // From the start of its minute: the cache's key, so a stranger's stream of distinct
    // seconds costs a page a minute of them, not one each.
    let since = nonempty("since")
        .map(usbperf_fleet::records::parse_since)
        .transpose()
        .map_err(|e| ApiError::BadFilter(e.replace("--since", "since=")))?
        .map(|t| {
            let s = t.timestamp();
            chrono::DateTime::from_timestamp(s - s.rem_euclid(60), 0).unwrap_or(t)
        });
    let q = FleetQuery {
        since,
        board: nonempty("board").map(str::to_string),
        ..FleetQuery::default()
    };
    let body = tokio::task::spawn_blocking(move || app.page.get(app.page_store(), (q, format)))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(|e| match e {
            FleetDbError::NothingMatched(_) | FleetDbError::Fleet(_) => {
                ApiError::NotFound(e.to_string())
            }
            e => {
                eprintln!("usbperf-collect: fleet page: {e}");
                ApiError::Unavailable(format!("the database did not answer: {e}"))
            }
        })?;
    let ctype = match format {
        Format::Html => "text/html; charset=utf-8",
        Format::Json => "application/json",
        Format::Text => "text/plain; charset=utf-8",
    };
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, ctype)], body).into_response())
}

/// The upload port's router: `POST /api/v1/reports` behind its layers, in the order the
/// module doc gives (outermost first: access log, token, declared length, ingest slot, body
/// in time), and the probes, behind the access log only.
pub fn router(app: Arc<App>) -> Router {
    let upload = ServiceBuilder::new()
        .layer(middleware::from_fn_with_state(app.clone(), authenticate))
        .layer(middleware::from_fn_with_state(app.clone(), declared_length))
        .layer(middleware::from_fn_with_state(app.clone(), ingest_slot))
        .layer(middleware::from_fn_with_state(app.clone(), body_in_time));
    Router::new()
        .route(REPORTS_PATH, post(ingest_report).route_layer(upload))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .layer(middleware::from_fn(access_log))
        .with_state(app)
}

/// Who holds the request's token (its name in the token file), set by [`authenticate`].
#[derive(Debug, Clone)]
struct Holder(String);

/// The request's whole body, read by [`body_in_time`] (taken out, never copied, by the
/// handler).
#[derive(Debug, Clone)]
struct ReportBody(Vec<u8>);

/// The token layer: the holder's name for the layers within, or 401 (429 past the limit)
/// decided from the headers alone. The body is not read, and `100 Continue` is never sent
/// (hyper sends it only when the body is read). A small body without `Expect` is read and
/// dropped, so a unit with a wrong token reads this answer rather than a broken pipe, and
/// says so instead of retrying forever.
async fn authenticate(State(app): State<Arc<App>>, mut req: Request, next: Next) -> Response {
    let holder = app
        .tokens
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .holder(header_str(req.headers(), "authorization"))
        .map(str::to_string);
    if let Some(holder) = holder {
        req.extensions_mut().insert(Holder(holder));
        return next.run(req).await;
    }
    let peer = peer_of(&req);
    let small = declared(req.headers()).is_some_and(|n| n <= UNAUTHENTICATED_DRAIN);
    if small && header_str(req.headers(), "expect").is_none() {
        let drain = axum::body::to_bytes(req.into_body(), UNAUTHENTICATED_DRAIN as usize);
        let _ = tokio::time::timeout(UNAUTHENTICATED_DRAIN_WAIT, drain).await;
    }
    ApiError::Unauthorized {
        over: app.auth_failures.failed(peer),
    }
    .into_response()
}

/// The length layer: a body declared longer than the limit is refused unread (413).
async fn declared_length(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    if declared(req.headers()).is_some_and(|len| len > app.max_body_bytes) {
        return ApiError::TooLarge {
            limit: app.max_body_bytes,
        }
        .into_response();
    }
    next.run(req).await
}

/// The concurrency layer: a slot before the body is read, held until the answer, so bodies
/// in memory are bounded (see `App::ingest_slots`). A short wait absorbs a burst; past it the
/// unit is told to come back (it backs off).
async fn ingest_slot(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    match tokio::time::timeout(SLOT_WAIT, app.ingest_slots.acquire()).await {
        Ok(Ok(_slot)) => next.run(req).await,
        _ => ApiError::Busy.into_response(),
    }
}

/// The body layer: the whole body within the body timeout and the limit, handed to the
/// handler as [`ReportBody`].
async fn body_in_time(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let read = tokio::time::timeout(
        app.body_timeout,
        read_body(body, app.max_body_bytes as usize, declared(&parts.headers)),
    )
    .await;
    let bytes = match read {
        Err(_) => {
            return ApiError::BodyLate {
                secs: app.body_timeout.as_secs(),
            }
            .into_response()
        }
        Ok(Err(e)) => {
            // The limit's own error type, wherever it sits in the source chain.
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&*e);
            let mut over = false;
            while let Some(c) = cause {
                over |= c.is::<http_body_util::LengthLimitError>();
                cause = c.source();
            }
            return if over {
                ApiError::TooLarge {
                    limit: app.max_body_bytes,
                }
            } else {
                ApiError::BodyBroken(e.to_string())
            }
            .into_response();
        }
        Ok(Ok(b)) => b,
    };
    parts.extensions.insert(ReportBody(bytes));
    next.run(Request::from_parts(parts, Body::empty())).await
}

/// `GET /readyz`: `ok` only while the database takes a write; 503 with the reason otherwise
/// (a read-only or full database, a lost PostgreSQL server), for a load balancer or a
/// watchdog. The write is made at most once per [`READY_FRESH`]: probes in between (one at a
/// time, the others waiting for its answer) are answered from the last one. `GET /healthz`
/// is liveness only: the process answers.
async fn readyz(State(app): State<Arc<App>>) -> Result<Response, ApiError> {
    let mut last = app.ready.lock().await;
    let answer = match &*last {
        Some((at, answer)) if at.elapsed() < READY_FRESH => answer.clone(),
        _ => {
            let store = app.store.clone();
            let answer = match tokio::task::spawn_blocking(move || store.health()).await {
                Ok(res) => res.map_err(|e| e.to_string()),
                Err(e) => Err(format!("internal error: {e}")),
            };
            *last = Some((Instant::now(), answer.clone()));
            answer
        }
    };
    drop(last);
    answer
        .map(|()| (StatusCode::OK, "ok\n").into_response())
        .map_err(|e| ApiError::Unavailable(format!("the database does not take writes: {e}")))
}

fn answer(status: StatusCode, v: serde_json::Value) -> Response {
    let mut body = v.to_string();
    body.push('\n');
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn refuse(status: StatusCode, msg: impl Into<String>) -> Response {
    answer(status, serde_json::json!({ "error": msg.into() }))
}

fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// A report's body in one buffer sized by its declared length: in memory once, never a list of
/// chunks and then their copy (`to_bytes`' way, twice the body at the peak: a 7 MB body grew
/// the collector by 23 MB). Past `limit` it fails with http_body_util's `LengthLimitError`.
async fn read_body(
    body: Body,
    limit: usize,
    declared: Option<u64>,
) -> Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>> {
    use http_body_util::BodyExt;
    let mut body = http_body_util::Limited::new(body, limit);
    let hint = declared.map_or(0, |d| usize::try_from(d).unwrap_or(usize::MAX));
    let mut buf = Vec::with_capacity(hint.min(limit));
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf)
}

/// `POST /api/v1/reports`, behind its layers: the token's holder and the whole body come from
/// them.
async fn ingest_report(
    State(app): State<Arc<App>>,
    mut req: Request,
) -> Result<Response, ApiError> {
    let peer = peer_of(&req).map_or_else(|| "?".to_string(), |p| p.to_string());
    let missing = |what: &str| ApiError::Internal(format!("the {what} layer did not run"));
    let holder = req
        .extensions_mut()
        .remove::<Holder>()
        .ok_or_else(|| missing("token"))?
        .0;
    let bytes = req
        .extensions_mut()
        .remove::<ReportBody>()
        .ok_or_else(|| missing("body"))?
        .0;
    let h = req.headers();
    let signer_key = verify_signature(h, &bytes).map_err(|why| {
        eprintln!("usbperf-collect: a report from {peer} (token {holder}) refused with 403: {why}");
        ApiError::Signature(why)
    })?;
    let token_name = holder.clone();
    let listed = app
        .unit_keys
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let json = ingest::is_json(header_str(h, "content-type"), &bytes);
    let header_id = header_str(h, REPORT_ID_HEADER).map(|s| s.trim().to_string());
    let store = app.store.clone();
    let limits = usbperf_report::decode::Limits {
        max_bytes: usize::try_from(app.max_body_bytes).unwrap_or(usize::MAX),
        ..usbperf_report::decode::LIMITS
    };
    // Decoding and the committing transaction block: off the async workers. A re-send under
    // a stored id is answered from the index before anything is decoded.
    let res = tokio::task::spawn_blocking(move || {
        let sha256 = crate::ingest::sha256_hex(&bytes);
        if let Some(id) = header_id.as_deref().filter(|h| !h.is_empty()) {
            if let Some(stored) = store.lookup(id, &sha256).map_err(Failure::Store)? {
                return Ok::<_, Failure>((id.to_string(), sha256, stored, String::new()));
            }
        }
        let mut rec = ingest::parse(
            &bytes,
            json,
            header_id.as_deref(),
            signer_key.as_deref(),
            &limits,
        )?;
        if let Some(list) = &listed {
            list.check(&rec.unit, signer_key.as_deref())
                .map_err(|why| Failure::Unlisted(rec.report_id.clone(), why))?;
            rec.key_listed = true;
        }
        rec.token = Some(holder);
        rec.signer_key = signer_key;
        let unit = rec.unit.clone();
        let stored = store.insert(&rec, &bytes).map_err(Failure::Store)?;
        Ok((rec.report_id, sha256, stored, unit))
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    let (id, sha256, stored, unit) = res.map_err(|f| match f {
        Failure::Ingest(IngestError::Limit(
            r @ usbperf_report::decode::Refusal::TooLarge { .. },
        )) => ApiError::ReportTooLarge(r.to_string()),
        Failure::Ingest(e @ IngestError::Implausible(_)) => ApiError::Implausible(e.to_string()),
        Failure::Ingest(e) => ApiError::Malformed(e.to_string()),
        Failure::Unlisted(id, why) => {
            eprintln!(
                "usbperf-collect: report {id} from {peer} (token {token_name}) refused with \
                 403: {why}"
            );
            ApiError::Signature(why)
        }
        Failure::Store(e) => {
            eprintln!("usbperf-collect: store: {e}");
            // The next readiness probe asks the database again instead of repeating an `ok`
            // from before this failure; a probe under way (the lock taken) asks it already,
            // and this answer does not wait for it.
            if let Ok(mut last) = app.ready.try_lock() {
                *last = None;
            }
            ApiError::Store(e.to_string())
        }
    })?;
    match stored {
        Stored::Forged { enrolled } => {
            eprintln!(
                "usbperf-collect: report {id} from {peer} (token {token_name}) claims unit \
                 {unit:?}, whose key is {enrolled}, and is not signed by it: refused with 403"
            );
            Err(ApiError::Signature(format!(
                "unit {unit:?} has another signing key enrolled: a report in its name must be \
                 signed with that key (if the unit's key was replaced, remove the old one from \
                 the collector's unit_keys table)"
            )))
        }
        Stored::New => Ok(answer(
            StatusCode::CREATED,
            serde_json::json!({ "report_id": id, "sha256": sha256, "stored": "new" }),
        )),
        Stored::Duplicate => Ok(answer(
            StatusCode::OK,
            serde_json::json!({ "report_id": id, "sha256": sha256, "stored": "duplicate" }),
        )),
        Stored::Conflict { stored_sha256 } => {
            eprintln!(
                "usbperf-collect: report {id} sent again with other content (sha256 {sha256}, \
                 stored {stored_sha256}): refused with 409"
            );
            Err(ApiError::Conflict {
                report_id: id,
                sha256,
                stored_sha256,
            })
        }
    }
}

/// The unit key (hex) whose signature of `body` the headers carry, verified; `None` when the
/// report is unsigned (whether an unsigned report may be stored is the store's to decide, by
/// the unit's enrolled key). A signature that does not hold, or half of the pair, is refused.
fn verify_signature(h: &header::HeaderMap, body: &[u8]) -> Result<Option<String>, String> {
    use usbperf_report::seal::{KEY_HEADER, SIGNATURE_HEADER};
    let (key, sig) = (header_str(h, KEY_HEADER), header_str(h, SIGNATURE_HEADER));
    let (key, sig) = match (key, sig) {
        (None, None) => return Ok(None),
        (Some(k), Some(s)) => (k.trim(), s.trim()),
        _ => {
            return Err(format!(
                "{KEY_HEADER} and {SIGNATURE_HEADER} come together: send both or neither"
            ))
        }
    };
    use usbperf_report::seal::SealError;
    usbperf_report::seal::verify(key, sig, body)
        .map(Some)
        .map_err(|e| match e {
            SealError::Key => format!("{KEY_HEADER} is not an Ed25519 public key (64 hex digits)"),
            SealError::Signature => {
                format!("{SIGNATURE_HEADER} is not a signature (128 hex digits)")
            }
            SealError::DoesNotHold => {
                "the signature does not hold for these bytes under the key sent".to_string()
            }
        })
}

enum Failure {
    Ingest(IngestError),
    Store(crate::store::StoreError),
    /// Refused by the factory's list of unit keys: the report's id and why.
    Unlisted(String, String),
}

impl From<IngestError> for Failure {
    fn from(e: IngestError) -> Self {
        Failure::Ingest(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    /// A body that never sends a byte: any layer that waited for it would hang the test.
    struct Silent;

    impl axum::body::HttpBody for Silent {
        type Data = axum::body::Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
            std::task::Poll::Pending
        }
    }

    const TOKEN: &str = "line3 s3cret-token-of-line-3";

    /// The upload port's app on a fresh SQLite database, with `slots` ingest slots.
    fn app(tag: &str, slots: usize) -> (Arc<App>, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("usbperf-router-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let db = format!("sqlite:{}", dir.join("r.db").display());
        let app = App {
            store: crate::store::open(&db, 1, None).unwrap().into(),
            page_store: None,
            tokens: std::sync::RwLock::new(
                Tokens::parse(TOKEN, std::path::Path::new("t")).unwrap(),
            ),
            max_body_bytes: 1 << 20,
            page: Page::new(30),
            ingest_slots: tokio::sync::Semaphore::new(slots),
            body_timeout: Duration::from_millis(300),
            auth_failures: AuthFailures::default(),
            unit_keys: std::sync::RwLock::new(None),
            ready: tokio::sync::Mutex::new(None),
        };
        (Arc::new(app), dir)
    }

    fn upload(token: Option<&str>, length: Option<u64>, body: Body) -> Request {
        let mut b = axum::http::Request::builder()
            .method("POST")
            .uri(REPORTS_PATH)
            .header("content-type", "application/yaml");
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        if let Some(n) = length {
            b = b.header("content-length", n);
        }
        b.body(body).unwrap()
    }

    /// The answer of the upload router to `req`, within 5 s (a layer that waited for a body
    /// that never comes fails the test instead of hanging it).
    async fn send(app: &Arc<App>, req: Request) -> (StatusCode, HeaderMap, String) {
        let resp = tokio::time::timeout(Duration::from_secs(5), router(app.clone()).oneshot(req))
            .await
            .expect("answered without waiting for the body")
            .unwrap();
        let (parts, body) = resp.into_parts();
        let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
        (
            parts.status,
            parts.headers,
            String::from_utf8_lossy(&body).into_owned(),
        )
    }

    /// Each layer answers for itself, in the module doc's order, before any layer within it
    /// or the handler runs: a stranger's 10 MB body and a declared 2 MB one are never read
    /// (the silent body would hold them forever), every slot taken is 503, a body that stops
    /// is 408; then the handler stores, answers a re-send, and refuses a forged pair.
    #[tokio::test]
    async fn each_layer_answers_for_itself_before_the_ones_within() {
        let (app, dir) = app("layers", 4);
        let silent = || Body::new(Silent);

        let (status, headers, body) = send(&app, upload(None, Some(10 << 20), silent())).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert_eq!(headers[header::CONNECTION], "close");
        assert!(headers.contains_key(header::WWW_AUTHENTICATE));
        let (status, _, body) = send(&app, upload(Some("wrong"), Some(10), silent())).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "a small body is drained in bounded time: {body}"
        );

        let (status, _, body) = send(
            &app,
            upload(Some("s3cret-token-of-line-3"), Some(2 << 20), silent()),
        )
        .await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
        assert!(body.contains("at most 1048576 bytes"), "{body}");

        let (status, _, body) = send(
            &app,
            upload(Some("s3cret-token-of-line-3"), Some(100), silent()),
        )
        .await;
        assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{body}");

        // A chunked body (no declared length) is cut off at the limit.
        let big = Body::from(vec![b'#'; (1 << 20) + 1]);
        let (status, _, body) = send(&app, upload(Some("s3cret-token-of-line-3"), None, big)).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");

        let v1 = crate::ingest::tests::V1;
        let report = || Body::from(v1);
        let (status, _, body) =
            send(&app, upload(Some("s3cret-token-of-line-3"), None, report())).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert!(body.contains(r#""stored":"new""#), "{body}");
        let (status, _, body) =
            send(&app, upload(Some("s3cret-token-of-line-3"), None, report())).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body.contains(r#""stored":"duplicate""#), "{body}");
        // The same id with other bytes: 409, the stored version kept.
        let other = v1.replace("mib_per_s: 14.5", "mib_per_s: 14.6");
        let (status, _, body) = send(
            &app,
            upload(Some("s3cret-token-of-line-3"), None, Body::from(other)),
        )
        .await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");

        // Half of a signature pair: 403, refused as a signature, nothing stored.
        let mut req = upload(Some("s3cret-token-of-line-3"), None, report());
        req.headers_mut().insert(
            usbperf_report::seal::KEY_HEADER,
            header::HeaderValue::from_static("00"),
        );
        let (status, _, body) = send(&app, req).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert!(body.contains(r#""refused":"signature""#), "{body}");
        assert_eq!(app.store.count().unwrap(), 1);

        let req = axum::http::Request::builder()
            .uri("/readyz")
            .body(Body::empty())
            .unwrap();
        assert_eq!(send(&app, req).await.0, StatusCode::OK);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A reader that stops reading fails the writes after the limit; one that reads keeps
    /// them going however long the answer takes.
    #[tokio::test]
    async fn a_write_that_makes_no_progress_fails_after_the_limit() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let big = vec![7u8; 1 << 20];
        let (server, _client) = tokio::io::duplex(4096);
        let mut w = WriteDeadline::new(server, Duration::from_millis(200));
        let started = Instant::now();
        let e = w.write_all(&big).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );

        let (server, mut client) = tokio::io::duplex(4096);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                // Slower than the limit in all, never stalled for as long as it.
                tokio::time::sleep(Duration::from_millis(1)).await;
                match client.read(&mut buf).await.unwrap() {
                    0 => break got.len(),
                    n => got.extend_from_slice(&buf[..n]),
                }
            }
        });
        let mut w = WriteDeadline::new(server, Duration::from_millis(200));
        let big = vec![7u8; 1 << 20];
        w.write_all(&big).await.unwrap();
        w.shutdown().await.unwrap();
        drop(w);
        assert_eq!(reader.await.unwrap(), 1 << 20);
    }

    /// With every ingest slot taken, an upload waits [`SLOT_WAIT`] and is told to come back,
    /// its body unread.
    #[tokio::test]
    async fn with_every_slot_taken_an_upload_is_told_to_come_back() {
        let (app, dir) = app("busy", 0);
        let (status, headers, body) = send(
            &app,
            upload(Some("s3cret-token-of-line-3"), Some(100), Body::new(Silent)),
        )
        .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(headers[header::RETRY_AFTER], "1");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Distinct filters, as anyone on the line may send them, churn the page cache instead of
    /// growing it: at most [`PAGE_CACHE_ENTRIES`] pages are held, each shared by its readers.
    #[test]
    fn the_page_cache_is_bounded_whatever_the_filters() {
        let dir = std::env::temp_dir().join(format!("usbperf-page-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = format!("sqlite:{}", dir.join("r.db").display());
        let store = crate::store::open(&db, 1, None).unwrap();
        let body = crate::ingest::tests::V1.as_bytes();
        let rec = crate::ingest::parse(body, false, None, None, &usbperf_report::decode::LIMITS);
        store.insert(&rec.unwrap(), body).unwrap();
        let page = Page::new(30);
        let t0 = chrono::DateTime::parse_from_rfc3339("2026-11-01T00:00:00Z").unwrap();
        let mut first = None;
        for i in 0..200 {
            let q = FleetQuery {
                since: Some(t0.with_timezone(&chrono::Utc) + chrono::Duration::seconds(i)),
                ..FleetQuery::default()
            };
            let b = page.get(store.as_ref(), (q, Format::Json)).unwrap();
            assert!(
                page.cached() <= PAGE_CACHE_ENTRIES,
                "{} pages",
                page.cached()
            );
            first.get_or_insert(b);
        }
        // The same filter again is the same body, not a copy.
        let q = FleetQuery {
            since: Some(t0.with_timezone(&chrono::Utc) + chrono::Duration::seconds(199)),
            ..FleetQuery::default()
        };
        let a = page.get(store.as_ref(), (q.clone(), Format::Json)).unwrap();
        let b = page.get(store.as_ref(), (q, Format::Json)).unwrap();
        assert_eq!(a.as_ptr(), b.as_ptr());
        assert!(first.is_some_and(|f| !f.is_empty()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An address past the limit stays limited however many other addresses fail after it:
    /// addresses beyond the ones counted on their own share one count instead of starting
    /// the window again for everyone.
    #[test]
    fn a_flood_of_addresses_does_not_reset_the_failed_auth_limit() {
        let f = AuthFailures::default();
        let limited: std::net::IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..AUTH_FAILURES_PER_MINUTE {
            assert!(!f.failed(Some(limited)));
        }
        assert!(f.failed(Some(limited)));
        let mut over = 0;
        for i in 0..(AUTH_PEERS as u32 + 100) {
            let ip = std::net::IpAddr::from(std::net::Ipv4Addr::from(0x0b00_0000 + i));
            over += usize::from(f.failed(Some(ip)));
        }
        assert!(f.failed(Some(limited)), "the flood reset the limit");
        // The limited address holds one of the counted places: the 101 addresses past them
        // share a count, of which 30 pass and 71 are limited.
        assert_eq!(over, 101 - AUTH_FAILURES_PER_MINUTE as usize);
    }
}
