//! Owns the unit's signing key: an Ed25519 key created on first use in a root-only file (or
//! provisioned there by the factory), with which `upload` signs the exact bytes it sends. The
//! collector enrolls a unit's key with its first signed report and refuses a report that
//! claims a known unit under another key, or under none: a token holder on the line can no
//! longer store reports in another unit's name.
//!
//! The file holds the 32-byte secret seed as 64 hex digits and a newline, mode 0600, written
//! whole before it has its name (`UnitKey::create`). It is refused when group or others may
//! read or write it, another user owns it, or it is not a regular file; the reports then go
//! unsigned (the callers say why).

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ed25519_dalek::{Signer, SigningKey};

/// Where the key is kept when the config names no file (the config's rule).
pub use crate::config::upload::{default_key_path as default_path, KEY_FILE};
use usbperf_fleet::load::MAX_REPORT_BYTES;
use usbperf_report::seal::hex;
pub use usbperf_report::seal::{parse_hex, KEY_HEADER, SIGNATURE_HEADER};

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(
        "{}: the unit's signing key cannot be read: {why} (it is created on first use; \
         remove a damaged one to make a new key, and the collector then refuses this unit \
         until its old key is removed there)",
        path.display()
    )]
    Read { path: PathBuf, why: String },
    #[error(
        "{}: other users may read or change the unit's signing key (mode {mode:04o}): `chmod \
         0600 {}`",
        path.display(),
        path.display()
    )]
    Readable { path: PathBuf, mode: u32 },
    #[error(
        "{}: cannot create the unit's signing key: {why} (give a writable `upload: {{key_file: \
         PATH}}`)",
        path.display()
    )]
    Create { path: PathBuf, why: String },
    #[error(
        "{}: cannot sign the report: {why} (the report stands; it is unsigned)",
        path.display()
    )]
    Seal { path: PathBuf, why: String },
}

/// The unit's signing key.
pub struct UnitKey {
    key: SigningKey,
}

impl std::fmt::Debug for UnitKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        write!(f, "UnitKey({})", self.public_hex())
    }
}

impl UnitKey {
    /// The key in `path`, created there first when there is none.
    pub fn load_or_create(path: &Path) -> Result<UnitKey, KeyError> {
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match Self::create(path) {
                // Created by another upload at the same moment: read that one.
                Err(KeyError::Create { .. }) if std::fs::symlink_metadata(path).is_ok() => {
                    Self::load(path)
                }
                other => other,
            },
            _ => Self::load(path),
        }
    }

    fn load(path: &Path) -> Result<UnitKey, KeyError> {
        let fail = |why: String| KeyError::Read {
            path: path.to_path_buf(),
            why,
        };
        let meta = std::fs::symlink_metadata(path).map_err(|e| fail(e.to_string()))?;
        if !meta.file_type().is_file() {
            return Err(fail("not a regular file".into()));
        }
        // Only a key of this user's: one another user planted (in a shared directory) would
        // sign with a secret they know.
        use std::os::unix::fs::MetadataExt;
        if meta.uid() != nix::unistd::geteuid().as_raw() {
            return Err(fail(format!(
                "it belongs to user {}, not to the user uploading",
                meta.uid()
            )));
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(KeyError::Readable {
                path: path.to_path_buf(),
                mode,
            });
        }
        let text = crate::untrusted::read_text(path, 4096).map_err(|e| fail(e.to_string()))?;
        let seed = parse_hex::<32>(text.trim())
            .ok_or_else(|| fail("it does not hold 64 hex digits".into()))?;
        Ok(UnitKey {
            key: SigningKey::from_bytes(&seed),
        })
    }

    /// Writes a new key whole before it has its name: a temporary file, fsynced, then
    /// linked to `path` (atomic, and refused when `path` exists: another upload made it at
    /// the same moment), then the directory fsynced. A power cut leaves no key or the whole
    /// key, never an empty file every later upload would refuse.
    fn create(path: &Path) -> Result<UnitKey, KeyError> {
        let fail = |why: String| KeyError::Create {
            path: path.to_path_buf(),
            why,
        };
        let mut seed = [0u8; 32];
        // SAFETY: the buffer is valid for its length; flags 0 blocks only until the pool is
        // initialised once at boot. A key is never made from anything but the kernel's pool.
        let n = unsafe { libc::getrandom(seed.as_mut_ptr().cast(), seed.len(), 0) };
        if n != seed.len() as isize {
            return Err(fail(format!(
                "the kernel's random pool cannot be read: {}",
                std::io::Error::last_os_error()
            )));
        }
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        // A leftover of this pid's earlier attempt (a power cut): never a key.
        let _ = std::fs::remove_file(&tmp);
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| {
                f.write_all(format!("{}\n", hex(&seed)).as_bytes())?;
                f.sync_all()
            })
            .and_then(|_| std::fs::hard_link(&tmp, path));
        let _ = std::fs::remove_file(&tmp);
        written.map_err(|e| fail(e.to_string()))?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| fail(format!("the directory cannot be synced: {e}")))?;
        Ok(UnitKey {
            key: SigningKey::from_bytes(&seed),
        })
    }

    /// The public key, 64 hex digits.
    pub fn public_hex(&self) -> String {
        hex(self.key.verifying_key().as_bytes())
    }

    /// The signature of `bytes`, 128 hex digits.
    pub fn sign_hex(&self, bytes: &[u8]) -> String {
        hex(&self.key.sign(bytes).to_bytes())
    }

    /// Signs the report file at `report` as it is on disk and writes the signature file
    /// beside it (`usbperf_report::seal::seal_path`), created whole under its name and never
    /// replacing one: `show` and `fleet` then tell a report changed after the run from the
    /// one the unit wrote. The signature file's path.
    pub fn seal_file(&self, report: &Path) -> Result<PathBuf, KeyError> {
        let fail = |why: String| KeyError::Seal {
            path: report.to_path_buf(),
            why,
        };
        // A file larger than any report is not signed: the fleet would not read it either.
        let bytes = usbperf_report::untrusted::read_file(report, MAX_REPORT_BYTES)
            .map_err(|e| fail(e.to_string()))?;
        let path = usbperf_report::seal::seal_path(report);
        let text = usbperf_report::seal::seal_text(&self.public_hex(), &self.sign_hex(&bytes));
        crate::report::write::atomic_create(&path, text.as_bytes()).map_err(|e| fail(e.cause()))?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "usbperf-key-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_key_is_created_root_only_once_and_signs_verifiably() {
        let d = dir();
        let path = d.join(KEY_FILE);
        let a = UnitKey::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // The same key on the next use.
        let b = UnitKey::load_or_create(&path).unwrap();
        assert_eq!(a.public_hex(), b.public_hex());
        let sig = parse_hex::<64>(&a.sign_hex(b"report")).unwrap();
        let public = parse_hex::<32>(&a.public_hex()).unwrap();
        let vk = ed25519_dalek::VerifyingKey::from_bytes(&public).unwrap();
        let sig = ed25519_dalek::Signature::from_bytes(&sig);
        assert!(vk.verify_strict(b"report", &sig).is_ok());
        assert!(vk.verify_strict(b"reporT", &sig).is_err());
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_key_others_may_read_a_link_or_a_damaged_file_is_refused() {
        let d = dir();
        let path = d.join(KEY_FILE);
        UnitKey::load_or_create(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(matches!(
            UnitKey::load_or_create(&path),
            Err(KeyError::Readable { mode: 0o640, .. })
        ));
        let link = d.join("link.key");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(matches!(
            UnitKey::load_or_create(&link),
            Err(KeyError::Read { .. })
        ));
        let bad = d.join("bad.key");
        std::fs::write(&bad, "not hex\n").unwrap();
        std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = UnitKey::load_or_create(&bad).unwrap_err().to_string();
        assert!(e.contains("64 hex digits"), "{e}");
        std::fs::remove_dir_all(&d).ok();
    }

    /// A key another user owns (planted in a shared directory, its secret known to them) is
    /// never used, whatever its mode.
    #[test]
    fn a_key_another_user_owns_is_refused() {
        if !nix::unistd::geteuid().is_root() {
            let line = "SKIPPED upload::key::tests::a_key_another_user_owns_is_refused: needs \
                        root (chown); run it as root, as scripts/test.sh does\n";
            // SAFETY: write(2) of a live buffer of that length to standard error, which the
            // harness does not capture.
            unsafe { libc::write(libc::STDERR_FILENO, line.as_ptr().cast(), line.len()) };
            return;
        }
        let d = dir();
        let path = d.join(KEY_FILE);
        UnitKey::load_or_create(&path).unwrap();
        nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let e = UnitKey::load_or_create(&path).unwrap_err().to_string();
        assert!(e.contains("belongs to user 65534"), "{e}");
        std::fs::remove_dir_all(&d).ok();
    }
}
