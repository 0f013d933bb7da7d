//! Owns the HTTP side: `POST /api/v1/reports` and `GET /healthz` on axum (hyper, tokio).
//! The order of checks is the point: the token before any of the body is used (401; a body
//! within the limit is read and dropped first, so the client sees the answer), the declared
//! length before the body is read (413, so a 100 MB body is refused without being
//! buffered; a chunked one is cut off at the limit), then the whole body (400 when it ends
//! early), the report itself (400), and the database (503 when it fails, so the unit keeps
//! the report and retries). The answer is 201 (stored now) or 200 (already stored), with
//! `{"report_id": …, "stored": "new"|"duplicate"}`, only after the commit.
//!
//! Plain HTTP: TLS is terminated by a reverse proxy in front (README, "Collector").

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

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
    let header_id = header_str(h, REPORT_ID_HEADER).map(str::to_string);
    let store = app.store.clone();
    // Decoding and the committing transaction block: off the async workers.
    let res = tokio::task::spawn_blocking(move || {
        let rec = ingest::parse(&bytes, json, header_id.as_deref())?;
        let stored = store.insert(&rec, &bytes).map_err(Failure::Store)?;
        Ok::<_, Failure>((rec.report_id, stored))
    })
    .await;
    match res {
        Ok(Ok((id, stored))) => {
            let (status, word) = match stored {
                Stored::New => (StatusCode::CREATED, "new"),
                Stored::Duplicate => (StatusCode::OK, "duplicate"),
            };
            answer(
                status,
                serde_json::json!({ "report_id": id, "stored": word }),
            )
        }
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
