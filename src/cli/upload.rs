//! Owns `usbperf-matrix upload` (queue report files, then drain the spool to the collector)
//! and the hand-off at the end of `run` (queue the finished report, one bounded attempt).
//! The rules — what is an acknowledgement, when to retry — are in `crate::upload`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use super::UsageError;
use crate::config;
use crate::exit::Exit;
use crate::report::{decode, wire};
use crate::upload::{self, Client, DrainOptions, Spool, UploadConfig};

const AFTER_HELP: &str = "\
Examples:
  # drain the spool to the config's collector
  usbperf-matrix upload
  # queue a report file, then drain
  usbperf-matrix upload report.yaml
  usbperf-matrix upload --url https://collector:8443/api/v1/reports --token-file /etc/usbperf/token
  # the boot service: quiet without a collector
  usbperf-matrix upload --if-configured

Exit codes: 0 the spool is empty; 2 usage error: nothing is queued when the URL, the token
(missing, or readable by others) or the build (https:// without TLS) cannot deliver, and a
file given that is not a report is named and never queued while the others are queued and
sent; 4 reports still queued (they are retried by the next upload), or the spool could not
take them (a full or read-only disk: nothing of theirs is queued).";

#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct UploadArgs {
    /// The collector's endpoint (e.g. http://collector:8080/api/v1/reports); default: the
    /// `upload:` section of the config.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// File holding the token (the first line that is not blank or a # comment).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// The outbox to drain (default: the config's `upload.spool`, else /var/lib/usbperf/outbox).
    #[arg(long, value_name = "DIR")]
    pub spool: Option<PathBuf>,
    /// Read the `upload:` section from this config (default /etc/usbperf/usbperf.yaml when
    /// it exists); flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Bound on each request (connect, send, answer).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_dur)]
    pub timeout: Duration,
    /// Attempts per report while the collector cannot be reached, with backoff in between.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = |s: &str| super::whole_in::<u32>(s, 1, 100))]
    pub attempts: u32,
    /// The factory CA's certificate (PEM) the https:// collector's certificate must chain to
    /// (default: the config's `upload.ca_file`, else the public roots of a build with
    /// `upload-tls`).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Use a token file that other users may read (refused by default).
    #[arg(long)]
    pub allow_readable_token: bool,
    /// Print this unit's line for the collector's list of unit keys (`KEY UNIT`: the public
    /// half of the key its reports are signed with, made on first use, and the unit's name)
    /// and exit; nothing is sent.
    #[arg(long, conflicts_with_all = ["reports", "if_configured"])]
    pub print_key: bool,
    /// Exit 0 quietly when no collector is configured (the boot service's drain, on images
    /// that do not upload).
    #[arg(long)]
    pub if_configured: bool,
    /// Report files to queue and send; without any, only the spool is drained.
    #[arg(value_name = "REPORT")]
    pub reports: Vec<PathBuf>,
}

fn parse_dur(s: &str) -> Result<Duration, String> {
    match crate::units::parse_duration(s).map_err(|e| e.to_string())? {
        d if d.is_zero() => Err(format!(
            "{s:?}: every request would time out at once; give a time such as 10s"
        )),
        d => Ok(d),
    }
}

/// The `upload:` section of the config the flags name, or of the installed one.
fn config_section(args: &UploadArgs) -> anyhow::Result<Option<UploadConfig>> {
    let Some(path) = config::locate(args.config.as_deref()) else {
        return Ok(None);
    };
    // The profile the config extends is looked up where `run` looks for it.
    let search = config::profile_search(Some(&path));
    let layers = config::load_file(&path, None, &search).map_err(|e| UsageError(e.to_string()))?;
    Ok(config::resolve(layers).upload)
}

pub fn run(args: &UploadArgs) -> anyhow::Result<Exit> {
    let section = config_section(args)?;
    if args.print_key {
        return print_key(args, section.as_ref());
    }
    let url = args
        .url
        .clone()
        .or_else(|| section.as_ref().map(|s| s.url.clone()));
    let token_file = args
        .token_file
        .clone()
        .or_else(|| section.as_ref().map(|s| s.token_file.clone()));
    let (url, token_file) = match (url, token_file) {
        (Some(u), Some(t)) => (u, t),
        _ if args.if_configured => return Ok(Exit::Pass),
        (Some(_), None) => {
            return Err(UsageError(
                "no token for the collector: give --token-file FILE (the line of the \
                 collector's token file for this unit), or `upload: {token_file: FILE}` in the \
                 config"
                    .into(),
            )
            .into())
        }
        _ => {
            return Err(UsageError(
                "no collector to upload to: give --url and --token-file, or an `upload: {url: \
                 ..., token_file: ...}` section in the config (--config FILE)"
                    .into(),
            )
            .into())
        }
    };
    crate::config::upload::check_url(&url).map_err(|e| UsageError(format!("--url {e}")))?;
    let spool_dir = args
        .spool
        .clone()
        .or_else(|| section.as_ref().and_then(|s| s.spool.clone()))
        .unwrap_or_else(|| PathBuf::from(upload::DEFAULT_SPOOL_DIR));
    let spool = Spool::at(&spool_dir);
    // The token before anything is queued: a token that cannot be read (missing, readable
    // by others) is the user's to fix, with nothing queued (exit 2).
    let allow_readable =
        args.allow_readable_token || section.as_ref().is_some_and(|s| s.allow_readable_token);
    let token = upload::client::read_token(&token_file, allow_readable)
        .map_err(|e| UsageError(format!("{e}; nothing was queued")))?;
    // The CA too: a CA file that cannot be trusted is the user's to fix, nothing queued.
    let ca = args
        .ca_file
        .clone()
        .or_else(|| section.as_ref().and_then(|s| s.ca_file.clone()))
        .map(|p| upload::client::CaRoots::read(&p))
        .transpose()
        .map_err(|e| UsageError(format!("{e}; nothing was queued")))?
        .map(std::sync::Arc::new);
    // Queue first: a report given here is on disk in the spool before the network is tried,
    // so nothing depends on this process surviving the attempt. A file that is not a report
    // is named and never queued; it does not hold back the reports given beside it.
    let mut refused = Vec::new();
    for p in &args.reports {
        match read_report(p) {
            Ok(json) => {
                spool.enqueue(true, &json)?;
            }
            Err(e) if e.is::<UsageError>() => {
                crate::errln!("usbperf-matrix upload: {e}");
                refused.push(p.display().to_string());
            }
            Err(e) => return Err(e),
        }
    }
    // The unit's key signs this unit's reports. It is the one `run` signs with: the
    // section's (beside the section's spool, whatever --spool says), else beside --spool; made
    // on first use (nothing queued: nothing to sign). A key that cannot be used holds nothing
    // back: the reports go unsigned, and the collector judges them.
    let key = if spool_dir.is_dir() {
        let path = section
            .as_ref()
            .map_or_else(|| upload::key::default_path(&spool_dir), |s| s.key_file());
        match upload::UnitKey::load_or_create(&path) {
            Ok(k) => Some(std::sync::Arc::new(k)),
            Err(e) => {
                crate::errln!("usbperf-matrix upload: {e}; the reports are sent unsigned");
                None
            }
        }
    } else {
        None
    };
    let client = Client {
        url,
        token,
        timeout: args.timeout,
        key,
        unit: upload::this_unit(),
        ca,
    };
    let opts = DrainOptions {
        attempts: args.attempts,
        ..DrainOptions::default()
    };
    let out = upload::drain(&spool, &client, &opts, &mut std::thread::sleep, &mut |m| {
        crate::errln!("usbperf-matrix upload: {m}")
    })?;
    let (new, dup, rejected, queued) = out.counts();
    // A fixed form scripts read (docs/collector.md): data, one line whatever its length.
    crate::out::data(&format!(
        "upload: {new} delivered, {dup} duplicate, {rejected} rejected, {queued} still queued \
         in {}\n",
        spool_dir.display()
    ));
    if rejected > 0 {
        crate::errln!(
            "usbperf-matrix upload: {rejected} report(s) the collector will never store are in \
             {}: each has a .reason file beside it",
            spool_dir.join(upload::spool::REJECTED_DIR).display()
        );
    }
    if !refused.is_empty() {
        crate::errln!(
            "usbperf-matrix upload: not queued, not reports: {} (the other files were queued)",
            refused.join(", ")
        );
        return Ok(Exit::Usage);
    }
    Ok(if out.complete() {
        Exit::Pass
    } else {
        Exit::Error
    })
}

/// `--print-key`: the unit's line of the collector's `--unit-keys` list, with the key `run`
/// and `upload` sign with (the section's `key_file`, else `unit.key` beside the spool).
fn print_key(args: &UploadArgs, section: Option<&UploadConfig>) -> anyhow::Result<Exit> {
    let spool_dir = args
        .spool
        .clone()
        .or_else(|| section.and_then(|s| s.spool.clone()))
        .unwrap_or_else(|| PathBuf::from(upload::DEFAULT_SPOOL_DIR));
    let path = section.map_or_else(|| upload::key::default_path(&spool_dir), |s| s.key_file());
    let key = upload::UnitKey::load_or_create(&path)?;
    let unit = upload::this_unit().context(
        "this unit has no name to list its key under (no serial number, machine id or \
         hostname): give it a hostname or /etc/machine-id",
    )?;
    crate::out::data(&format!("{} {unit}\n", key.public_hex()));
    Ok(Exit::Pass)
}

/// A report file as it is queued (its wire form, JSON), or why it is not one.
fn read_report(path: &Path) -> anyhow::Result<Vec<u8>> {
    let limit = decode::LIMITS.max_bytes as u64;
    let md = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if !md.is_file() {
        return Err(UsageError(format!(
            "{}: not a file: give the YAML or JSON report file run wrote",
            path.display()
        ))
        .into());
    }
    if md.len() > limit {
        return Err(UsageError(format!(
            "{}: {} bytes: a report may have at most {limit} bytes; give the YAML or JSON \
             report file run wrote",
            path.display(),
            md.len()
        ))
        .into());
    }
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    // Checked here, with the decoder the collector uses: a file that is not a report is
    // said now, and never sits in the spool. What is queued is the report's wire form, JSON.
    let (_, json) = wire::to_store_as_json(path, &bytes).map_err(|e| {
        UsageError(format!(
            "{e}; it was not queued (give the YAML or JSON file `usbperf-matrix run` wrote)"
        ))
    })?;
    Ok(json)
}
