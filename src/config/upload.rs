//! Owns the `upload:` section of the configuration: where `run` sends its report after
//! writing it locally (the sending is `crate::upload`'s). Strict like the rest of the config (unknown keys are errors with the
//! file's line and column); recorded in the report without the token itself.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::Dur;

/// The spool when neither `--spool` nor `upload: {spool: …}` names one.
pub const DEFAULT_SPOOL_DIR: &str = "/var/lib/usbperf/outbox";

/// How long `run` waits for the collector when the section sets no `timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// `upload: {url: …, token_file: …, spool: …, timeout: …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct UploadConfig {
    /// The collector's endpoint, e.g. `http://collector.line3:8080/api/v1/reports`.
    #[serde(deserialize_with = "endpoint")]
    pub url: String,
    /// The file holding this unit's (or line's) token; a file, so the token never appears in
    /// the config, the report or `ps`.
    pub token_file: PathBuf,
    /// The outbox (default /var/lib/usbperf/outbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spool: Option<PathBuf>,
    /// The longest `run` waits for the collector (default 10s); a report not acknowledged by
    /// then stays in the spool for the next boot's drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Dur>,
    /// Use a token file that other users may read (refused by default: anyone who reads the
    /// token may store reports as this unit).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_readable_token: bool,
    /// The unit's signing key (default: `unit.key` beside the spool, in its parent
    /// directory), created on first use, mode 0600; a factory may provision it there instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// The factory CA's certificate (PEM) that an https:// collector's certificate must chain
    /// to; with it, the public web roots are not trusted. Needs a build with `upload-tls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

/// Why `url` is not a collector's endpoint, if it is not: the scheme and a host are needed
/// (`127.0.0.1:8080` alone would be retried as a network error forever).
/// The host must be a name or an address and the port, if any, a number: what the HTTP
/// client would otherwise refuse later in its own terms (`InvalidPort`).
pub fn check_url(url: &str) -> Result<(), String> {
    let refused = || {
        format!(
            "{url:?} is not a collector's URL: give it with its scheme and host, such as \
             http://collector:8080/api/v1/reports"
        )
    };
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(refused)?;
    // Refused when the config or the command line is read, before a report is queued that
    // this build could never deliver.
    if url.starts_with("https://") && !cfg!(feature = "upload-tls") {
        return Err(format!(
            "{url:?}: https:// needs a build with the `upload-tls` feature: rebuild with \
             --features upload-tls, or give the collector's http:// address (behind a TLS \
             proxy on an untrusted network)"
        ));
    }
    if rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(refused());
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit('@').next().unwrap_or("");
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        let (addr, after) = v6.split_once(']').ok_or_else(refused)?;
        if addr.is_empty()
            || !addr
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        {
            return Err(refused());
        }
        match after {
            "" => (addr, None),
            p => (addr, Some(p.strip_prefix(':').ok_or_else(refused)?)),
        }
    } else {
        match host_port.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        }
    };
    let host_ok = !host.is_empty()
        && (host_port.starts_with('[')
            || host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')));
    let port_ok = port.map_or(true, |p| p.parse::<u16>().is_ok_and(|n| n > 0));
    if host_ok && port_ok {
        Ok(())
    } else {
        Err(refused())
    }
}

fn endpoint<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let url = String::deserialize(d)?;
    check_url(&url).map_err(|e| serde::de::Error::custom(format!("url: {e}")))?;
    Ok(url)
}

/// The unit's signing key's file name beside the spool directory (in its parent: the spool
/// holds only its entries), unless `key_file` names one.
pub const KEY_FILE: &str = "unit.key";

/// Where the unit's signing key is kept for a spool in `spool_dir`, when no file is named.
pub fn default_key_path(spool_dir: &Path) -> PathBuf {
    spool_dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(spool_dir)
        .join(KEY_FILE)
}

impl UploadConfig {
    pub fn spool_dir(&self) -> PathBuf {
        self.spool
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SPOOL_DIR))
    }

    /// Where the unit's signing key is kept.
    pub fn key_file(&self) -> PathBuf {
        self.key_file
            .clone()
            .unwrap_or_else(|| default_key_path(&self.spool_dir()))
    }

    pub fn timeout(&self) -> Duration {
        self.timeout.map(|d| d.0).unwrap_or(DEFAULT_TIMEOUT)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{parse, resolve};
    use std::time::Duration;

    #[test]
    fn the_section_parses_strictly_and_layers() {
        let text = "upload:\n  url: http://c:8080/api/v1/reports\n  token_file: /etc/usbperf/token\n  timeout: 5s\n";
        let f = parse(text, "u.yaml").unwrap();
        let c = resolve(vec![("u.yaml".into(), f)]);
        let up = c.upload.expect("section kept");
        assert_eq!(up.url, "http://c:8080/api/v1/reports");
        assert_eq!(up.timeout(), Duration::from_secs(5));
        assert_eq!(
            up.spool_dir(),
            std::path::PathBuf::from(super::DEFAULT_SPOOL_DIR)
        );

        // (text, what the error must say)
        let table = [
            (
                "upload:\n  url: http://c/\n  token_file: /t\n  tokn: x\n",
                "u.yaml:4:3: upload: unknown field `tokn`",
            ),
            ("upload:\n  url: http://c/\n", "missing field `token_file`"),
            (
                "upload:\n  url: 127.0.0.1:8080\n  token_file: /t\n",
                "u.yaml:2:3: upload: url: \"127.0.0.1:8080\" is not a collector's URL",
            ),
            (
                "upload:\n  url: http://c/\n  token_file: /t\n  timeout: soon\n",
                "u.yaml:4:12",
            ),
        ];
        for (text, want) in table {
            let e = parse(text, "u.yaml").unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_url_is_refused_where_the_http_client_would_refuse_it() {
        // https:// only where the build speaks TLS, refused at once elsewhere.
        let https = super::check_url("https://c.line3.example/api");
        if cfg!(feature = "upload-tls") {
            assert!(https.is_ok(), "{https:?}");
        } else {
            assert!(https.unwrap_err().contains("upload-tls"));
        }
        for good in [
            "http://collector:8080/api/v1/reports",
            "http://10.0.0.5/r?x=1",
            "http://[fe80::1]:8080/r",
            "http://user@c/",
        ] {
            assert!(super::check_url(good).is_ok(), "{good}");
        }
        for bad in [
            "127.0.0.1:8080",
            "http://",
            "http:///api",
            "http://c:port/x",
            "http://c:0/",
            "http://c:99999/",
            "http://[::1/x",
            "http://a b/",
            "http://a%zz/",
            "ftp://c/",
        ] {
            let e = super::check_url(bad).unwrap_err();
            assert!(e.contains("is not a collector's URL"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_collector_pages_example_parses() {
        let page =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/collector.md"))
                .unwrap();
        let open = "## On the unit\n";
        let start = page
            .find(open)
            .expect("docs/collector.md has the upload: example");
        let body = &page[start..];
        let body = &body[body.find("```yaml").expect("a yaml block")..];
        let body = &body[body.find('\n').unwrap() + 1..];
        let example = &body[..body.find("```").unwrap()];
        let c = resolve(vec![(
            "docs/collector.md".into(),
            parse(example, "docs/collector.md").unwrap(),
        )]);
        assert_eq!(c.upload.unwrap().timeout(), Duration::from_secs(10));
    }
}
