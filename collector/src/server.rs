//! Owns the HTTP side: `POST /api/v1/reports` and `GET /healthz` on axum (hyper, tokio).
//! The order of checks is the point: the token before any of the body is used (401; a body
//! within the limit is read and dropped first, so the client sees the answer), the declared
//! length before the body is read (413, so a 100 MB body is refused without being
//! buffered; a chunked one is cut off at the limit), then the whole body (400 when it ends
//! early), a re-send under a stored id (answered from the index, before decoding), the
//! report itself within `report::decode`'s limits (400, 413 for size), and the database
//! (503 when it fails, so the unit keeps the report and retries). The answer is 201 (stored
//! now) or 200 (already stored with the same bytes), with `{"report_id": …, "sha256": …,
//! "stored": "new"|"duplicate"}`, only after the commit; 409 when the id is stored with other
//! bytes (nothing is replaced, and the unit must not take it for delivered).
//!
//! Plain HTTP: TLS is terminated by a reverse proxy in front (README, "Collector").
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
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::fleet::{self, FleetDbError, FleetQuery, Format};
use crate::ingest::{self, IngestError};
use crate::store::{Store, Stored};
use crate::tokens::Tokens;

/// The endpoint units POST to.
pub const REPORTS_PATH: &str = "/api/v1/reports";
/// The header the unit sends the report's id in (`usbperf::upload::REPORT_ID_HEADER`).
pub const REPORT_ID_HEADER: &str = "x-usbperf-report-id";

pub struct App {
    pub store: Arc<dyn Store>,
    pub tokens: Tokens,
    pub max_body_bytes: u64,
    pub page: Page,
}

/// How long a computed page is served before the database is asked again.
pub const PAGE_CACHE: Duration = Duration::from_secs(5);

type PageKey = (FleetQuery, Format);

/// The fleet page's state: the reload interval and the pages computed lately.
pub struct Page {
    pub refresh_s: u32,
    cache: Mutex<HashMap<PageKey, (Instant, Arc<String>)>>,
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
    fn get(&self, store: &dyn Store, key: PageKey) -> Result<Arc<String>, FleetDbError> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, body)) = cache.get(&key) {
            if at.elapsed() < PAGE_CACHE {
                return Ok(body.clone());
            }
        }
        let view = fleet::fleet(store, &key.0)?;
        let mut body = fleet::render(&view, key.1, "reports/");
        if key.1 == Format::Html {
            // The page is what a production engineer keeps open: it reloads itself.
            let meta = format!(
                "<meta http-equiv=\"refresh\" content=\"{}\">",
                self.refresh_s.max(1)
            );
            body = body.replacen("<head>", &format!("<head>{meta}"), 1);
        }
        let body = Arc::new(body);
        cache.retain(|_, (at, _)| at.elapsed() < PAGE_CACHE);
        cache.insert(key, (Instant::now(), body.clone()));
        Ok(body)
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
        .with_state(app)
}

/// `GET /reports/<report_id>.<format>`: a stored report as sent, for the page's links.
async fn report_file(
    State(app): State<Arc<App>>,
    axum::extract::Path(file): axum::extract::Path<String>,
) -> Response {
    let Some((id, ext)) = file.rsplit_once('.') else {
        return (StatusCode::NOT_FOUND, "no such report\n").into_response();
    };
    let id = id.to_string();
    let ext = ext.to_string();
    let res = tokio::task::spawn_blocking(move || app.store.raw(&id)).await;
    match res {
        Ok(Ok(Some((format, raw)))) if format == ext => {
            let ctype = if format == "json" {
                "application/json"
            } else {
                "application/yaml"
            };
            (StatusCode::OK, [(header::CONTENT_TYPE, ctype)], raw).into_response()
        }
        Ok(Ok(_)) => (StatusCode::NOT_FOUND, "no such report\n").into_response(),
        Ok(Err(e)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the database did not answer: {e}\n"),
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: {e}\n"),
        )
            .into_response(),
    }
}

async fn fleet_page(
    State(app): State<Arc<App>>,
    Query(params): Query<HashMap<String, String>>,
    format: Format,
) -> Response {
    let nonempty = |k: &str| params.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let since = match nonempty("since").map(usbperf::fleet::records::parse_since) {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("{}\n", e.replace("--since", "since=")),
            )
                .into_response()
        }
    };
    let q = FleetQuery {
        since,
        board: nonempty("board").map(str::to_string),
        ..FleetQuery::default()
    };
    let res =
        tokio::task::spawn_blocking(move || app.page.get(app.store.as_ref(), (q, format))).await;
    let ctype = match format {
        Format::Html => "text/html; charset=utf-8",
        Format::Json => "application/json",
        Format::Text => "text/plain; charset=utf-8",
    };
    match res {
        Ok(Ok(body)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, ctype)],
            body.to_string(),
        )
            .into_response(),
        Ok(Err(e @ (FleetDbError::NothingMatched(_) | FleetDbError::Fleet(_)))) => {
            (StatusCode::NOT_FOUND, format!("{e}\n")).into_response()
        }
        Ok(Err(e)) => {
            eprintln!("usbperf-collect: fleet page: {e}");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the database did not answer: {e}\n"),
            )
                .into_response()
        }
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: {e}\n"),
        )
            .into_response(),
    }
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route(REPORTS_PATH, post(ingest_report))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(app)
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

async fn ingest_report(State(app): State<Arc<App>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let h = &parts.headers;
    if !app.tokens.allows(header_str(h, "authorization")) {
        // Read (and drop) a body within the limit first: a client that is still sending
        // when the connection closes sees a broken pipe instead of this answer, and would
        // retry a wrong token forever instead of saying so.
        let declared = header_str(h, "content-length").and_then(|v| v.trim().parse::<u64>().ok());
        if declared.map_or(true, |n| n <= app.max_body_bytes) {
            let _ = axum::body::to_bytes(body, app.max_body_bytes as usize).await;
        }
        return refuse(
            StatusCode::UNAUTHORIZED,
            "missing or wrong token: send `Authorization: Bearer TOKEN` with a token of the \
             collector's token file",
        );
    }
    let too_large = || {
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "a report may have at most {} bytes (collect --max-body-bytes)",
                app.max_body_bytes
            ),
        )
    };
    if let Some(len) = header_str(h, "content-length").and_then(|v| v.trim().parse::<u64>().ok()) {
        if len > app.max_body_bytes {
            return too_large();
        }
    }
    let bytes = match axum::body::to_bytes(Body::new(body), app.max_body_bytes as usize).await {
        Ok(b) => b,
        Err(e) => {
            // to_bytes says "length limit exceeded" through its source chain.
            let over = std::error::Error::source(&e)
                .map(|s| s.to_string().contains("length limit"))
                .unwrap_or(false)
                || e.to_string().contains("length limit");
            if over {
                return too_large();
            }
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("the body ended early or could not be read: {e}"),
            );
        }
    };
    let json = ingest::is_json(header_str(h, "content-type"), &bytes);
    let header_id = header_str(h, REPORT_ID_HEADER).map(|s| s.trim().to_string());
    let store = app.store.clone();
    let limits = usbperf::report::decode::Limits {
        max_bytes: usize::try_from(app.max_body_bytes).unwrap_or(usize::MAX),
        ..usbperf::report::decode::LIMITS
    };
    // Decoding and the committing transaction block: off the async workers. A re-send under
    // a stored id is answered from the index before anything is decoded.
    let res = tokio::task::spawn_blocking(move || {
        let sha256 = crate::store::sha256_hex(&bytes);
        if let Some(id) = header_id.as_deref().filter(|h| !h.is_empty()) {
            if let Some(stored) = store.lookup(id, &sha256).map_err(Failure::Store)? {
                return Ok::<_, Failure>((id.to_string(), sha256, stored));
            }
        }
        let rec = ingest::parse(&bytes, json, header_id.as_deref(), &limits)?;
        let stored = store.insert(&rec, &bytes).map_err(Failure::Store)?;
        Ok((rec.report_id, sha256, stored))
    })
    .await;
    match res {
        Ok(Ok((id, sha256, stored))) => match stored {
            Stored::New => answer(
                StatusCode::CREATED,
                serde_json::json!({ "report_id": id, "sha256": sha256, "stored": "new" }),
            ),
            Stored::Duplicate => answer(
                StatusCode::OK,
                serde_json::json!({ "report_id": id, "sha256": sha256, "stored": "duplicate" }),
            ),
            Stored::Conflict { stored_sha256 } => {
                eprintln!(
                    "usbperf-collect: report {id} sent again with other content (sha256 \
                     {sha256}, stored {stored_sha256}): refused with 409"
                );
                answer(
                    StatusCode::CONFLICT,
                    serde_json::json!({
                        "error": format!(
                            "report {id} is already stored with other content: the stored \
                             version is kept, and this one is not; a unit must never reuse a \
                             report_id (look at both copies before deleting either)"
                        ),
                        "report_id": id,
                        "sha256": sha256,
                        "stored_sha256": stored_sha256,
                    }),
                )
            }
        },
        Ok(Err(Failure::Ingest(IngestError::Limit(
            r @ usbperf::report::decode::Refusal::TooLarge { .. },
        )))) => refuse(StatusCode::PAYLOAD_TOO_LARGE, r.to_string()),
        Ok(Err(Failure::Ingest(e))) => refuse(StatusCode::BAD_REQUEST, e.to_string()),
        Ok(Err(Failure::Store(e))) => {
            eprintln!("usbperf-collect: store: {e}");
            refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the database did not take the report ({e}); send it again later"),
            )
        }
        Err(e) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: {e}"),
        ),
    }
}

enum Failure {
    Ingest(IngestError),
    Store(crate::store::StoreError),
}

impl From<IngestError> for Failure {
    fn from(e: IngestError) -> Self {
        Failure::Ingest(e)
    }
}
