//! Owns one delivery: POST a report's bytes to the collector with the unit's token and decide
//! from the answer whether the collector has it. Only a 2xx whose JSON body names the same
//! `report_id` and the SHA-256 of the bytes sent is an acknowledgement. Redirects are not
//! followed: a client that follows one re-sends as a GET without the body, and whatever
//! answers there could "acknowledge" a report it never received. A 5xx, a 429, a timeout or
//! a refused connection is worth retrying; a 400/409/413/415/422 is about this report
//! (the same bytes would be refused again: the drain sets it aside); a 401/403 or a redirect
//! is about this unit's settings (the report stays queued).
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

/// The lowercase hex SHA-256 of bytes: the spool's entry names, and what the collector's
/// acknowledgement must name.
pub use usbperf_report::seal::sha256_hex;

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Worth retrying later: no connection, a timeout, a 5xx or 429.
    #[error("the collector at {url} did not take the report: {why} (it stays queued)")]
    Retry { url: String, why: String },
    /// The collector cannot store this report, ever (malformed, over a limit, or its id
    /// already stored with other content): it is set aside in the spool's `rejected/`.
    #[error("the collector at {url} rejected the report: HTTP {status}: {body}")]
    Rejected {
        url: String,
        status: u16,
        body: String,
    },
    /// The entry is larger than a report may be: never read whole, never sent, set aside.
    #[error(
        "it holds more than the {limit} bytes a report may have, so it is not sent (a report \
         usbperf writes is far smaller: the entry is damaged or not a report)"
    )]
    TooLarge { limit: u64 },
    /// The unit's settings are wrong (the token, the URL): the report stays queued.
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

    /// About this report alone: it will never be stored, and must not hold up the others.
    pub fn rejects_report(&self) -> bool {
        matches!(
            self,
            SendError::Rejected { .. } | SendError::TooLarge { .. }
        )
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot read the token file {path}: {why} (one token on a line; see docs/collector.md)")]
pub struct TokenError {
    pub path: PathBuf,
    pub why: String,
}

/// The first line of the token file that is neither blank nor a `#` comment, trimmed. A file
/// other users may read or write is refused unless `allow_readable` (anyone who reads the
/// token may store reports in this unit's name).
pub fn read_token(path: &Path, allow_readable: bool) -> Result<String, TokenError> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |why: String| TokenError {
        path: path.to_path_buf(),
        why,
    };
    let mode = std::fs::metadata(path)
        .map_err(|e| fail(e.to_string()))?
        .permissions()
        .mode();
    if mode & 0o007 != 0 && !allow_readable {
        return Err(fail(format!(
            "other users may read it (mode {:04o}): `chmod 0600 {}`, or 0640 with the group \
             that runs the upload (--allow-readable-token, `upload: {{allow_readable_token: \
             true}}`, to use it anyway)",
            mode & 0o7777,
            path.display()
        )));
    }
    // A token is one line; a FIFO or a huge file is refused, never waited on.
    let text = crate::untrusted::read_text(path, 64 << 10).map_err(|e| fail(e.to_string()))?;
    parse_token(&text).ok_or_else(|| TokenError {
        path: path.to_path_buf(),
        why: "it holds no token".into(),
    })
}

/// The largest CA file read: a factory CA and its intermediates are a few kilobytes.
pub const MAX_CA_FILE_BYTES: u64 = 256 << 10;

/// The most certificates a CA file may hold.
pub const MAX_CA_CERTS: usize = 64;

/// A CA file that cannot be trusted as given: the upload is refused before a report is sent
/// (the reports stay queued).
#[derive(Debug, thiserror::Error)]
#[error("the CA file {path} cannot be used: {why}")]
pub struct CaError {
    pub path: PathBuf,
    pub why: String,
}

/// The roots an https:// upload trusts when the config names a CA file (`upload: {ca_file:
/// …}`, `--ca-file`): the factory's own CA, and no other. Without one, the public roots the
/// build carries.
#[derive(Debug, Clone)]
pub struct CaRoots {
    pub path: PathBuf,
    /// The TLS client configuration that trusts these roots only: built once, when the file
    /// is read, and shared by every send.
    #[cfg(feature = "upload-tls")]
    config: std::sync::Arc<rustls::ClientConfig>,
}

impl CaRoots {
    /// Reads the PEM certificates of `path` (bounded; a FIFO is refused) and checks each is a
    /// usable trust anchor. A build without `upload-tls` refuses any CA file: it cannot
    /// speak https://.
    pub fn read(path: &Path) -> Result<CaRoots, CaError> {
        let fail = |why: String| CaError {
            path: path.to_path_buf(),
            why,
        };
        #[cfg(not(feature = "upload-tls"))]
        return Err(fail(
            "this build has no https:// (rebuild with --features upload-tls, or leave \
             ca_file out and give an http:// URL)"
                .into(),
        ));
        #[cfg(feature = "upload-tls")]
        {
            use rustls_pki_types::pem::PemObject;
            let pem = crate::untrusted::read_file(path, MAX_CA_FILE_BYTES)
                .map_err(|e| fail(e.to_string()))?;
            let mut certs = Vec::new();
            for c in rustls_pki_types::CertificateDer::pem_slice_iter(&pem) {
                let c = c.map_err(|e| fail(format!("not a PEM certificate file ({e})")))?;
                if certs.len() == MAX_CA_CERTS {
                    return Err(fail(format!("more than {MAX_CA_CERTS} certificates")));
                }
                certs.push(c);
            }
            if certs.is_empty() {
                return Err(fail(
                    "it holds no CERTIFICATE block: give the factory CA's certificate in PEM"
                        .into(),
                ));
            }
            Ok(CaRoots {
                path: path.to_path_buf(),
                config: Self::client_config(certs).map_err(fail)?,
            })
        }
    }

    /// The TLS client configuration that trusts `certs` only.
    #[cfg(feature = "upload-tls")]
    fn client_config(
        certs: Vec<rustls_pki_types::CertificateDer<'static>>,
    ) -> Result<std::sync::Arc<rustls::ClientConfig>, String> {
        let mut store = rustls::RootCertStore::empty();
        for c in certs {
            store
                .add(c)
                .map_err(|e| format!("a certificate in it is not a CA's ({e})"))?;
        }
        // ring: the provider ureq's own rustls uses (aws-lc-rs would need cmake per target);
        // deprecated since rustls 0.23.48 for lacking post-quantum key exchange.
        #[allow(deprecated)]
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(store)
            .with_no_client_auth();
        Ok(std::sync::Arc::new(config))
    }
}

fn parse_token(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
}

/// An HTTP answer: status, body, and the `Location` of a redirect.
type Answer = (u16, String, Option<String>);

/// Where and how to deliver.
#[derive(Debug, Clone)]
pub struct Client {
    pub url: String,
    pub token: String,
    /// The whole request (connect, send, answer) is bounded by this.
    pub timeout: Duration,
    /// The unit's key, which signs the reports of this unit (`None`: every report is sent
    /// unsigned, which a collector refuses for a unit whose key it knows).
    pub key: Option<std::sync::Arc<super::UnitKey>>,
    /// This unit's name (`report::unit::unit_name`): only a report in its name is signed. A
    /// report of another unit (a station forwarding it) goes unsigned: no unit vouches for
    /// another's figures.
    pub unit: Option<String>,
    /// The only roots an https:// upload trusts (`None`: the public roots of the build).
    pub ca: Option<std::sync::Arc<CaRoots>>,
}

/// Whether a 403's body says the report's signature is refused (`"refused": "signature"`),
/// not the token.
fn refused_signature(body: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(body)
        .is_ok_and(|v| v.get("refused").and_then(|r| r.as_str()) == Some("signature"))
}

/// The unit name a report claims, when it decodes.
#[cfg(feature = "upload")]
fn unit_of(json: bool, bytes: &[u8]) -> Option<String> {
    let r: crate::report::wire::Report = crate::report::decode::parse(json, bytes).ok()?;
    crate::report::unit::unit_name(
        r.unit.serial.as_deref(),
        r.unit.machine_id.as_deref(),
        r.unit.hostname.as_deref(),
    )
}

#[derive(Deserialize)]
struct AckBody {
    report_id: String,
    #[serde(default)]
    sha256: Option<String>,
    #[serde(default)]
    stored: Option<String>,
}

/// Decides what an HTTP answer means; pure, so its rules are a table test. `sha256` is the
/// hash of the bytes sent; `location` the redirect's target, for a 3xx.
pub fn judge(
    url: &str,
    status: u16,
    body: &str,
    expected_id: Option<&str>,
    sha256: &str,
    location: Option<&str>,
) -> Result<Ack, SendError> {
    let short: String = body.trim().chars().take(300).collect();
    let not_ack = |why: String| SendError::Retry {
        url: url.into(),
        why: format!("HTTP {status} is not the collector's acknowledgement: {why}"),
    };
    match status {
        200..=299 => {
            let ack: AckBody = serde_json::from_str(body).map_err(|e| {
                not_ack(format!(
                    "{e}; is --url the collector's /api/v1/reports endpoint?"
                ))
            })?;
            if expected_id.is_some_and(|id| id != ack.report_id) {
                return Err(not_ack(format!(
                    "it names report {:?}, not {:?}",
                    ack.report_id,
                    expected_id.unwrap_or_default()
                )));
            }
            if ack.sha256.as_deref() != Some(sha256) {
                return Err(not_ack(format!(
                    "it names the content {:?}, not the bytes sent ({sha256}); an \
                     usbperf-collect older than this unit does not name it: upgrade it",
                    ack.sha256.unwrap_or_default()
                )));
            }
            Ok(Ack {
                new: ack.stored.as_deref() != Some("duplicate"),
                report_id: ack.report_id,
            })
        }
        300..=399 => Err(SendError::Refused {
            url: url.into(),
            status,
            body: format!("a redirect to {}", location.unwrap_or("(no Location)")),
            hint: "reports are never sent on through a redirect: give the collector's own \
                   /api/v1/reports URL with --url or upload.url",
        }),
        // The collector refuses this report's signature (not its unit's key, or none where
        // the unit has one): the report is set aside with the reason, the others still go.
        403 if refused_signature(body) => Err(SendError::Rejected {
            url: url.into(),
            status,
            body: short,
        }),
        401 | 403 => Err(SendError::Refused {
            url: url.into(),
            status,
            body: short,
            hint: "the token is wrong: put this line's token from the collector's token file \
                   into --token-file",
        }),
        400 | 409 | 413 | 415 | 422 => Err(SendError::Rejected {
            url: url.into(),
            status,
            body: short,
        }),
        404 | 405 => Err(SendError::Refused {
            url: url.into(),
            status,
            body: short,
            hint: "is --url the collector's /api/v1/reports endpoint?",
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
        let sha256 = sha256_hex(bytes);
        let (status, body, location) = self.post(expected_id, json, bytes)?;
        judge(
            &self.url,
            status,
            &body,
            expected_id,
            &sha256,
            location.as_deref(),
        )
    }

    #[cfg(feature = "upload")]
    fn post(&self, id: Option<&str>, json: bool, bytes: &[u8]) -> Result<Answer, SendError> {
        #[allow(unused_mut)]
        let mut agent = ureq::AgentBuilder::new().timeout(self.timeout).redirects(0);
        #[cfg(feature = "upload-tls")]
        if let Some(ca) = &self.ca {
            agent = agent.tls_config(ca.config.clone());
        }
        let agent = agent.build();
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
        if let (Some(key), Some(unit)) = (&self.key, &self.unit) {
            if unit_of(json, bytes).as_ref() == Some(unit) {
                req = req
                    .set(super::key::KEY_HEADER, &key.public_hex())
                    .set(super::key::SIGNATURE_HEADER, &key.sign_hex(bytes));
            }
        }
        let resp = match req.send_bytes(bytes) {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(ureq::Error::Transport(t)) => {
                // The URL parser's own words ("RelativeUrlWithoutBase") say nothing to the
                // operator; `check_url` refuses such URLs before, this is the backstop.
                let why = match t.kind() {
                    ureq::ErrorKind::InvalidUrl | ureq::ErrorKind::UnknownScheme => format!(
                        "{:?} is not a collector's URL: give it with its scheme and host, such \
                         as http://collector:8080/api/v1/reports",
                        self.url
                    ),
                    _ => t.to_string(),
                };
                return Err(SendError::Retry {
                    url: self.url.clone(),
                    why,
                });
            }
        };
        let status = resp.status();
        let location = resp.header("location").map(str::to_string);
        // An acknowledgement is a line of JSON; ureq caps the read at 10 MB. An answer that
        // does not arrive in time is a timeout, said as one (not "no acknowledgement").
        let body = resp.into_string().map_err(|e| SendError::Retry {
            url: self.url.clone(),
            why: format!(
                "HTTP {status}, but its body did not arrive within {} s ({e})",
                self.timeout.as_secs_f64()
            ),
        })?;
        Ok((status, body, location))
    }

    #[cfg(not(feature = "upload"))]
    fn post(&self, _: Option<&str>, _: bool, _: &[u8]) -> Result<Answer, SendError> {
        Err(SendError::NotBuilt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_judged_as_the_table_says() {
        const U: &str = "http://c/api/v1/reports";
        const H: &str = "5d41402abc4b2a76b9719d911017c592";
        let ok = format!(r#"{{"report_id":"ab12","sha256":"{H}","stored":"new"}}"#);
        let dup = format!(r#"{{"report_id":"ab12","sha256":"{H}","stored":"duplicate"}}"#);
        let no_hash = r#"{"report_id":"ab12","stored":"new"}"#.to_string();
        let other_hash = r#"{"report_id":"ab12","sha256":"00","stored":"new"}"#.to_string();
        #[derive(Debug)]
        enum Want {
            Ack(bool),
            Retry,
            Rejected,
            Refused,
        }
        use Want::*;
        let table: &[(u16, &str, Option<&str>, Want)] = &[
            (201, &ok, Some("ab12"), Ack(true)),
            (200, &dup, Some("ab12"), Ack(false)),
            (200, &ok, None, Ack(true)),
            (200, &ok, Some("ffff"), Retry), // someone else's acknowledgement
            (201, &no_hash, Some("ab12"), Retry), // names no content: not an acknowledgement
            (201, &other_hash, Some("ab12"), Retry), // other bytes
            (200, "<html>proxy page</html>", Some("ab12"), Retry),
            (302, "", Some("ab12"), Refused),
            (301, "", Some("ab12"), Refused),
            (401, "wrong token", Some("ab12"), Refused),
            (403, r#"{"error": "x"}"#, Some("ab12"), Refused),
            // a report whose signature is refused is set aside; the drain goes on
            (
                403,
                r#"{"error": "x", "refused": "signature"}"#,
                Some("ab12"),
                Rejected,
            ),
            (404, "", Some("ab12"), Refused),
            (400, "not a report", Some("ab12"), Rejected),
            (409, "other content", Some("ab12"), Rejected),
            (413, "too large", Some("ab12"), Rejected),
            (500, "db down", Some("ab12"), Retry),
            (503, "", Some("ab12"), Retry),
            (429, "", Some("ab12"), Retry),
        ];
        for (status, body, id, want) in table {
            let got = judge(U, *status, body, *id, H, Some("http://elsewhere/"));
            match (want, &got) {
                (Ack(new), Ok(ack)) => assert_eq!(ack.new, *new, "{status} {body}"),
                (Retry, Err(e)) if e.retryable() => {}
                (Rejected, Err(e)) if e.rejects_report() => {}
                (Refused, Err(SendError::Refused { .. })) => {}
                (w, g) => panic!("{status} {body}: want {w:?}, got {g:?}"),
            }
        }
    }

    #[test]
    fn a_token_file_others_may_read_is_refused_unless_allowed() {
        use std::os::unix::fs::PermissionsExt;
        let p = std::env::temp_dir().join(format!("usbperf-token-{}", std::process::id()));
        std::fs::write(&p, "0123456789abcdef\n").unwrap();
        for (mode, allow, ok) in [
            (0o600, false, true),
            (0o640, false, true),
            (0o644, false, false),
            (0o606, false, false),
            (0o644, true, true),
        ] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            let got = read_token(&p, allow);
            assert_eq!(got.is_ok(), ok, "{mode:o} {allow}: {got:?}");
            if let Err(e) = got {
                assert!(e.to_string().contains("chmod 0600"), "{e}");
            }
        }
        std::fs::remove_file(&p).unwrap();
    }

    /// A collector that sends its status line and then trickles (or withholds) the body past
    /// the timeout: the unit says it timed out, not "no acknowledgement".
    #[cfg(feature = "upload")]
    #[test]
    fn an_answer_whose_body_does_not_arrive_in_time_is_a_timeout() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/api/v1/reports", l.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n{\"report_id\"")
                .unwrap();
            std::thread::sleep(Duration::from_secs(3));
        });
        let c = Client {
            url,
            token: "t".into(),
            timeout: Duration::from_millis(800),
            key: None,
            unit: None,
            ca: None,
        };
        let e = c
            .send(Some("ab12"), false, b"schema_version: 2\n")
            .unwrap_err();
        assert!(e.retryable(), "{e}");
        assert!(e.to_string().contains("did not arrive within 0.8 s"), "{e}");
        server.join().unwrap();
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
