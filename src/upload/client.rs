//! Owns one delivery: POST a report's bytes to the collector with the unit's token and decide
//! from the answer whether the collector has it. Only a 2xx whose JSON body names the same
//! `report_id` is an acknowledgement; a 5xx, a 429, a timeout or a refused connection is
//! worth retrying, a 400/401/403/413 is not (the same bytes would be refused again), and both
//! leave the report queued.
//!
//! HTTP is `ureq` 2 (blocking, no async runtime, small; builds for armv7 and aarch64). With
//! the `upload-tls` feature it speaks https:// through rustls and ring; without it only
//! http:// (a TLS-terminating proxy beside the collector, or a trusted factory network).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The collector's acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub report_id: String,
    /// False when the collector already had it (a re-send: nothing new stored).
    pub new: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Worth retrying later: no connection, a timeout, a 5xx or 429.
    #[error("the collector at {url} did not take the report: {why} (it stays queued)")]
    Retry { url: String, why: String },
    /// The collector refused these bytes for good; they stay queued for a person to look at.
    #[error("the collector at {url} refused the report: HTTP {status}: {body} ({hint})")]
    Refused {
        url: String,
        status: u16,
        body: String,
        hint: &'static str,
    },
    #[error(
        "this usbperf-matrix was built without the `upload` feature: rebuild with \
         --features upload (the Yocto recipe: PACKAGECONFIG `upload`)"
    )]
    NotBuilt,
    #[error(
        "{url}: https:// needs the `upload-tls` feature: rebuild with --features upload-tls, \
         or point --url at an http:// address (a TLS proxy beside the collector)"
    )]
    NoTls { url: String },
}

impl SendError {
    pub fn retryable(&self) -> bool {
        matches!(self, SendError::Retry { .. })
    }
}

#[derive(Debug, thiserror::Error)]
#[error(
    "cannot read the token file {path}: {why} (one token on a line; see README, \"Collector\")"
)]
pub struct TokenError {
    pub path: PathBuf,
    pub why: String,
}

/// The first line of the token file that is neither blank nor a `#` comment, trimmed.
pub fn read_token(path: &Path) -> Result<String, TokenError> {
    let text = std::fs::read_to_string(path).map_err(|e| TokenError {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    parse_token(&text).ok_or_else(|| TokenError {
        path: path.to_path_buf(),
        why: "it holds no token".into(),
    })
}

fn parse_token(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
}

/// Where and how to deliver.
#[derive(Debug, Clone)]
pub struct Client {
    pub url: String,
    pub token: String,
    /// The whole request (connect, send, answer) is bounded by this.
    pub timeout: Duration,
}

#[derive(Deserialize)]
struct AckBody {
    report_id: String,
    #[serde(default)]
    stored: Option<String>,
}

/// Decides what an HTTP answer means; pure, so its rules are a table test.
pub fn judge(
    url: &str,
    status: u16,
    body: &str,
    expected_id: Option<&str>,
) -> Result<Ack, SendError> {
    let short: String = body.trim().chars().take(300).collect();
    match status {
        200..=299 => {
            let ack: AckBody = serde_json::from_str(body).map_err(|e| SendError::Retry {
                url: url.into(),
                why: format!(
                    "HTTP {status} without the collector's acknowledgement ({e}); is --url the \
                     collector's /api/v1/reports endpoint?"
                ),
            })?;
            if expected_id.is_some_and(|id| id != ack.report_id) {
                return Err(SendError::Retry {
                    url: url.into(),
                    why: format!(
                        "HTTP {status} acknowledged report {:?}, not {:?}",
                        ack.report_id,
                        expected_id.unwrap_or_default()
                    ),
                });
            }
            Ok(Ack {
                new: ack.stored.as_deref() != Some("duplicate"),
                report_id: ack.report_id,
            })
        }
        401 | 403 => Err(SendError::Refused {
            url: url.into(),
            status,
            body: short,
            hint: "the token is wrong: put this line's token from the collector's token file \
                   into --token-file",
        }),
        400 | 413 | 415 | 422 => Err(SendError::Refused {
            url: url.into(),
            status,
            body: short,
            hint: "the collector cannot store this file; check it with scripts/validate-report",
        }),
        _ => Err(SendError::Retry {
            url: url.into(),
            why: format!("HTTP {status}: {short}"),
        }),
    }
}

impl Client {
    /// Sends one report. `expected_id` is the report's `report_id` when it has one (then the
    /// acknowledgement must name it, and it goes in the `X-Usbperf-Report-Id` header).
    pub fn send(
        &self,
        expected_id: Option<&str>,
        json: bool,
        bytes: &[u8],
    ) -> Result<Ack, SendError> {
        if self.url.starts_with("https://") && !cfg!(feature = "upload-tls") {
            return Err(SendError::NoTls {
                url: self.url.clone(),
            });
        }
        let (status, body) = self.post(expected_id, json, bytes)?;
        judge(&self.url, status, &body, expected_id)
    }

    #[cfg(feature = "upload")]
    fn post(&self, id: Option<&str>, json: bool, bytes: &[u8]) -> Result<(u16, String), SendError> {
        let agent = ureq::AgentBuilder::new().timeout(self.timeout).build();
        let mut req = agent
            .post(&self.url)
            .set("Authorization", &format!("Bearer {}", self.token))
            .set(
                "Content-Type",
                if json {
                    "application/json"
                } else {
                    "application/yaml"
                },
            );
        if let Some(id) = id {
            req = req.set(super::REPORT_ID_HEADER, id);
        }
        let resp = match req.send_bytes(bytes) {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(ureq::Error::Transport(t)) => {
                return Err(SendError::Retry {
                    url: self.url.clone(),
                    why: t.to_string(),
                })
            }
        };
        let status = resp.status();
        // An acknowledgement is a line of JSON; ureq caps the read at 10 MB.
        let body = resp.into_string().unwrap_or_default();
        Ok((status, body))
    }

    #[cfg(not(feature = "upload"))]
    fn post(&self, _: Option<&str>, _: bool, _: &[u8]) -> Result<(u16, String), SendError> {
        Err(SendError::NotBuilt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_judged_as_the_table_says() {
        const U: &str = "http://c/api/v1/reports";
        let ok = r#"{"report_id":"ab12","stored":"new"}"#;
        let dup = r#"{"report_id":"ab12","stored":"duplicate"}"#;
        // (status, body, expected id, Ok(new) or Err(retryable))
        type Row<'a> = (u16, &'a str, Option<&'a str>, Result<bool, bool>);
        let table: &[Row] = &[
            (201, ok, Some("ab12"), Ok(true)),
            (200, dup, Some("ab12"), Ok(false)),
            (200, ok, None, Ok(true)),
            (200, ok, Some("ffff"), Err(true)), // someone else's acknowledgement
            (200, "<html>proxy page</html>", Some("ab12"), Err(true)),
            (401, "wrong token", Some("ab12"), Err(false)),
            (400, "not a report", Some("ab12"), Err(false)),
            (413, "too large", Some("ab12"), Err(false)),
            (500, "db down", Some("ab12"), Err(true)),
            (503, "", Some("ab12"), Err(true)),
            (429, "", Some("ab12"), Err(true)),
        ];
        for (status, body, id, want) in table {
            let got = judge(U, *status, body, *id);
            match (want, got) {
                (Ok(new), Ok(ack)) => assert_eq!(ack.new, *new, "{status} {body}"),
                (Err(retry), Err(e)) => assert_eq!(e.retryable(), *retry, "{status} {body}: {e}"),
                (w, g) => panic!("{status} {body}: want {w:?}, got {g:?}"),
            }
        }
    }

    #[test]
    fn the_token_is_the_first_real_line() {
        let table = [
            ("tok\n", Some("tok")),
            ("# unit line 3\n\n  tok2  \nother\n", Some("tok2")),
            ("\n# only a comment\n", None),
        ];
        for (text, want) in table {
            assert_eq!(parse_token(text).as_deref(), want, "{text:?}");
        }
    }
}
