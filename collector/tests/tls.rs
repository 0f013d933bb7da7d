//! The collector's own https:// (`--tls-cert`, `--tls-key`), with certificates a factory CA
//! made by `openssl` for this test: a client that trusts the factory CA stores a report; one
//! that trusts only the public roots, and one that speaks plain http to the https port, are
//! closed before any request is read and nothing is stored; a stranger that never starts the
//! handshake is closed at the header timeout. SIGHUP serves a renewed certificate from the
//! next connection on; a broken pair on SIGHUP keeps the one in force. A key others may read
//! is refused at the start. The unit's own `upload` (its default build, with `upload-tls`, as
//! scripts/ci/test-collect.sh builds it) delivers with `--ca-file`, keeps the report queued without
//! it, and queues nothing with a CA file that is not one.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

/// A CA (`name`) and a server certificate it signed for 127.0.0.1, in `dir`: (CA, chain,
/// key). The key is written 0600, as a factory installs it.
fn factory_pki(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let p = |f: &str| dir.join(format!("{name}-{f}"));
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl makes the test's certificates (apt-get install openssl)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    let (ca_key, ca, key, csr, cert, ext) = (
        p("ca.key"),
        p("ca.pem"),
        p("server.key"),
        p("server.csr"),
        p("server.pem"),
        p("ext.cnf"),
    );
    let curve = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let subj = format!("/CN={name} factory CA");
    let mut a = vec!["req", "-x509", "-days", "30", "-subj", &subj];
    a.extend(curve);
    let (ca_key_s, ca_s) = (s(&ca_key), s(&ca));
    a.extend(["-keyout", &ca_key_s, "-out", &ca_s]);
    openssl(&a);
    let (key_s, csr_s) = (s(&key), s(&csr));
    let mut a = vec!["req", "-subj", "/CN=collector"];
    a.extend(curve);
    a.extend(["-keyout", &key_s, "-out", &csr_s]);
    openssl(&a);
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         extendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let (cert_s, ext_s) = (s(&cert), s(&ext));
    openssl(&[
        "x509",
        "-req",
        "-days",
        "30",
        "-in",
        &csr_s,
        "-CA",
        &ca_s,
        "-CAkey",
        &ca_key_s,
        "-CAcreateserial",
        "-out",
        &cert_s,
        "-extfile",
        &ext_s,
    ]);
    set_mode(&key, 0o600);
    (ca, cert, key)
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A client agent whose only root is the CA in `ca` (None: the public web roots ureq ships).
fn agent(ca: Option<&Path>) -> ureq::Agent {
    let b = ureq::AgentBuilder::new().timeout(Duration::from_secs(10));
    let Some(ca) = ca else {
        return b.build();
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    b.tls_config(Arc::new(config)).build()
}

/// POSTs the report at `path` with the collector's token through `agent`: the status, or
/// the transport error's text.
fn post(agent: &ureq::Agent, url: &str, path: &Path) -> Result<u16, String> {
    let body = std::fs::read(path).unwrap();
    match agent
        .post(url)
        .set("Authorization", &format!("Bearer {TOKEN}"))
        .set("Content-Type", "application/json")
        .send_bytes(&body)
    {
        Ok(r) => Ok(r.status()),
        Err(ureq::Error::Status(code, _)) => Ok(code),
        Err(e) => Err(e.to_string()),
    }
}

/// The collector serving https with `cert` and `key`, and `extra` flags.
fn start_https(db: &str, cert: &Path, key: &Path, extra: &[&str]) -> Collector {
    let mut args = vec![
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    args.extend(extra);
    Collector::start_with(db, &args)
}

fn https_url(c: &Collector) -> String {
    c.url().replacen("http://", "https://", 1)
}

#[test]
fn https_stores_only_for_a_client_that_trusts_the_factory_ca() {
    let dir = TempDir::new("tls");
    let (ca, cert, key) = factory_pki(dir.path(), "line3");
    let reports = fleet(3, 11, "json", &dir.path().join("fleet"));
    let db = format!("sqlite:{}", dir.path().join("reports.db").display());
    let c = start_https(&db, &cert, &key, &["--header-timeout", "1"]);
    let url = https_url(&c);

    // A stranger that connects and never starts the handshake is closed at the header
    // timeout: it holds no slot for longer.
    let t = std::time::Instant::now();
    let mut idle = std::net::TcpStream::connect(("127.0.0.1", c.port)).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let n = std::io::Read::read(&mut idle, &mut [0u8; 64]).unwrap_or(0);
    assert_eq!(n, 0, "closed, nothing answered");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());

    assert_eq!(post(&agent(Some(&ca)), &url, &reports[0]), Ok(201));
    assert_eq!(stored_ids(&db).len(), 1);

    // The public roots do not know the factory CA: refused by the client, nothing sent.
    let e = post(&agent(None), &url, &reports[1]).expect_err("an untrusted certificate");
    assert!(
        e.to_lowercase().contains("certificate") || e.contains("UnknownIssuer"),
        "{e}"
    );
    // Plain http to the https port: the collector closes the connection unanswered.
    let e = post(&agent(None), &c.url(), &reports[2]).expect_err("plain http");
    assert!(!e.contains("201"), "{e}");
    assert_eq!(stored_ids(&db).len(), 1, "only the trusted client's report");

    // The collector is still serving after both.
    assert_eq!(post(&agent(Some(&ca)), &url, &reports[1]), Ok(201));
    assert_eq!(stored_ids(&db).len(), 2);
    assert!(c.stderr().is_empty(), "{}", c.stderr());
}

#[test]
fn sighup_serves_a_renewed_certificate_and_keeps_the_old_one_when_the_new_is_broken() {
    let dir = TempDir::new("tls-hup");
    let (ca1, cert, key) = factory_pki(dir.path(), "old");
    let (ca2, cert2, key2) = factory_pki(dir.path(), "new");
    let reports = fleet(3, 12, "json", &dir.path().join("fleet"));
    let db = format!("sqlite:{}", dir.path().join("reports.db").display());
    let c = start_https(&db, &cert, &key, &[]);
    let url = https_url(&c);
    assert_eq!(post(&agent(Some(&ca1)), &url, &reports[0]), Ok(201));
    let hup = |want: &str| {
        let seen = c.stderr().matches(want).count();
        Command::new("kill")
            .args(["-HUP", &c.pid().to_string()])
            .status()
            .unwrap();
        let end = std::time::Instant::now() + Duration::from_secs(20);
        while c.stderr().matches(want).count() == seen {
            assert!(
                std::time::Instant::now() < end,
                "no {want:?} after SIGHUP: {}",
                c.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    // A broken certificate file: the one in force is kept.
    std::fs::write(&cert, "not a certificate\n").unwrap();
    hup("the certificate in force is kept");
    assert!(
        c.stderr().contains("no CERTIFICATE block"),
        "{}",
        c.stderr()
    );
    assert_eq!(post(&agent(Some(&ca1)), &url, &reports[1]), Ok(201));

    // The renewed pair (from another CA, so the test can tell which one is served).
    std::fs::copy(&cert2, &cert).unwrap();
    std::fs::copy(&key2, &key).unwrap();
    hup("certificate read again");
    assert!(post(&agent(Some(&ca1)), &url, &reports[2]).is_err());
    assert_eq!(post(&agent(Some(&ca2)), &url, &reports[2]), Ok(201));
    assert_eq!(stored_ids(&db).len(), 3);
}

#[test]
fn a_key_others_may_read_is_refused_at_the_start() {
    let dir = TempDir::new("tls-key");
    let (_, cert, key) = factory_pki(dir.path(), "line3");
    set_mode(&key, 0o644);
    let tokens = dir.path().join("tokens");
    write_token_file(&tokens, &format!("{TOKEN}\n"));
    let out = Command::new(collect_bin())
        .args(["--listen", "127.0.0.1:0", "--db"])
        .arg(format!("sqlite:{}", dir.path().join("r.db").display()))
        .arg("--token-file")
        .arg(&tokens)
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("chmod 600"), "{err}");
    assert!(
        !dir.path().join("r.db").exists(),
        "refused before the database is opened"
    );
}

#[test]
fn the_units_upload_delivers_over_https_with_the_factory_ca() {
    let dir = TempDir::new("tls-upload");
    let (ca, cert, key) = factory_pki(dir.path(), "line3");
    let reports = fleet(1, 13, "json", &dir.path().join("fleet"));
    let db = format!("sqlite:{}", dir.path().join("reports.db").display());
    let c = start_https(&db, &cert, &key, &[]);
    let url = https_url(&c);
    let spool = dir.path().join("outbox");
    let run = |extra: &[&std::ffi::OsStr], with_report: bool| {
        let mut cmd = upload_cmd(&url, &c.tokens, &spool);
        cmd.args(["--attempts", "1"]).args(extra);
        if with_report {
            cmd.arg(&reports[0]);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            !err.contains("upload-tls"),
            "usbperf-matrix at {} has no https://: build it with its default features \
             (upload-tls is one; scripts/ci/test-collect.sh does): {err}",
            matrix_bin().display()
        );
        (out.status.code(), err)
    };
    let queued = || {
        std::fs::read_dir(&spool)
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.path().is_file())
                    .count()
            })
            .unwrap_or(0)
    };

    // A CA file that holds no certificate: refused before anything is queued (exit 2).
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "hello\n").unwrap();
    let (code, err) = run(&["--ca-file".as_ref(), junk.as_os_str()], true);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no CERTIFICATE block"), "{err}");
    assert_eq!(queued(), 0, "nothing queued");

    // The public roots only: the handshake fails, the report stays queued (exit 4).
    let (code, err) = run(&[], true);
    assert_eq!(code, Some(4), "{err}");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    assert_eq!(queued(), 1, "still queued");
    assert!(stored_ids(&db).is_empty());

    // The factory CA: the queued report is delivered and stored.
    let (code, err) = run(&["--ca-file".as_ref(), ca.as_os_str()], false);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(stored_ids(&db).len(), 1);
    assert_eq!(queued(), 0, "delivered, gone from the spool");
}
