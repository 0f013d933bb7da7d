//! Owns the collector's own https://: the certificate chain and key it serves, read from PEM
//! files (bounded, the key readable by its owner only), and the acceptor the listener hands
//! each connection to. The files are read again on SIGHUP (a renewed certificate is served
//! from the next connection on); a pair that cannot be used keeps the one in force.
//!
//! rustls with ring: no OpenSSL, no cmake; TLS 1.2 and 1.3 with rustls's default suites.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The largest PEM file read: a chain of a few certificates is a few kilobytes.
pub const MAX_PEM_BYTES: u64 = 256 << 10;

/// The most certificates one chain file may hold.
pub const MAX_CHAIN_CERTS: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(transparent)]
    File(#[from] crate::files::FileError),
    #[error("{path}: {what}")]
    Pem { path: PathBuf, what: String },
    #[error(
        "{cert} and {key} do not make a server certificate: {err} (is the key the \
         certificate's own?)"
    )]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        err: rustls::Error,
    },
}

/// The certificate and key files, and the configuration built from them.
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    config: RwLock<Arc<rustls::ServerConfig>>,
}

impl Tls {
    /// Reads and checks the pair; nothing is served until it is usable.
    pub fn load(cert: &Path, key: &Path) -> Result<Tls, TlsError> {
        let config = server_config(cert, key)?;
        Ok(Tls {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            config: RwLock::new(Arc::new(config)),
        })
    }

    /// Reads the pair again; on an error the pair in force stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = server_config(&self.cert, &self.key)?;
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
        Ok(())
    }

    /// The acceptor for the next connection (the configuration in force now).
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let config = self
            .config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        tokio_rustls::TlsAcceptor::from(config)
    }

    /// The certificate file's path, for messages.
    pub fn cert_path(&self) -> &Path {
        &self.cert
    }
}

fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, TlsError> {
    let cert_pem = read_pem(cert, false)?;
    let key_pem = read_pem(key, true)?;
    let pem_err = |path: &Path, what: String| TlsError::Pem {
        path: path.to_path_buf(),
        what,
    };
    let mut chain = Vec::new();
    for c in CertificateDer::pem_slice_iter(&cert_pem) {
        let c = c.map_err(|e| pem_err(cert, format!("not a PEM certificate chain ({e})")))?;
        if chain.len() == MAX_CHAIN_CERTS {
            return Err(pem_err(
                cert,
                format!("more than {MAX_CHAIN_CERTS} certificates in one chain"),
            ));
        }
        chain.push(c);
    }
    if chain.is_empty() {
        return Err(pem_err(
            cert,
            "no CERTIFICATE block: give the server's certificate (then its CA chain) in PEM".into(),
        ));
    }
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        pem_err(
            key,
            format!(
                "no usable PRIVATE KEY block ({e}): give the key in PEM (PKCS#8, PKCS#1 or SEC1)"
            ),
        )
    })?;
    // ring, deprecated since rustls 0.23.48 for lacking post-quantum key exchange: the
    // provider that has it (aws-lc-rs) needs cmake and a C toolchain per target, and the
    // units' own client (ureq's rustls) speaks ring, so ring is what both ends share.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(chain, private))
        .map_err(|err| TlsError::Pair {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            err,
        })
}

/// Reads a PEM file whole, within [`MAX_PEM_BYTES`]; a key only its owner may read.
fn read_pem(path: &Path, key: bool) -> Result<Vec<u8>, TlsError> {
    let forbid = key.then_some(crate::files::Forbid {
        bits: 0o077,
        what: "read or changed",
        fix: "anyone on this server could impersonate the collector; chmod 600 it",
    });
    Ok(crate::files::read(path, MAX_PEM_BYTES, forbid)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &[u8], mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("usbperf-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn what_cannot_be_served_is_refused_with_what_to_do() {
        let d = tmp("refused");
        let junk = write(&d, "junk.pem", b"hello\n", 0o600);
        let big = write(
            &d,
            "big.pem",
            &vec![b'a'; MAX_PEM_BYTES as usize + 1],
            0o600,
        );
        let open_key = write(&d, "key.pem", b"-----BEGIN PRIVATE KEY-----\n", 0o644);
        let cases: [(&Path, &Path, &str); 4] = [
            (&junk, &junk, "no CERTIFICATE block"),
            (&big, &junk, "more than the 262144"),
            (&junk, &open_key, "chmod 600"),
            (&d, &junk, "not a regular file"),
        ];
        for (cert, key, want) in cases {
            let err = Tls::load(cert, key).err().expect("refused").to_string();
            assert!(err.contains(want), "{cert:?} {key:?}: {err}");
        }
        let fifo = d.join("fifo");
        nix_mkfifo(&fifo);
        let err = Tls::load(&fifo, &junk).err().expect("refused").to_string();
        assert!(err.contains("not a regular file"), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn nix_mkfifo(p: &Path) {
        let st = std::process::Command::new("mkfifo")
            .arg(p)
            .status()
            .unwrap();
        assert!(st.success());
    }
}
