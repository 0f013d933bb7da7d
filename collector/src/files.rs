//! Owns how the collector reads a file it is given by path (the token file, the unit key list,
//! the certificate and key): a regular file, opened non-blocking so that a FIFO or device
//! does not hang the start; bounded before it is read, and refused with the limit it hit;
//! and, where it is a secret or a trust list, refused when its permission bits let others
//! read or change it.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {path}: {err}")]
    Read {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error(
        "{path} is not a regular file (a FIFO or device would never end): give the file itself"
    )]
    NotAFile { path: PathBuf },
    #[error("{path} holds {bytes} bytes, more than the {limit} such a file may hold")]
    TooLarge {
        path: PathBuf,
        bytes: u64,
        limit: u64,
    },
    #[error("{path} may be {what} by other users (mode {mode:04o}): {fix}")]
    Mode {
        path: PathBuf,
        mode: u32,
        what: &'static str,
        fix: &'static str,
    },
}

/// Permission bits a file must not have: `bits` (of `mode & 0o7777`), what they let others
/// do ("read", "changed") and the fix to say.
#[derive(Debug, Clone, Copy)]
pub struct Forbid {
    pub bits: u32,
    pub what: &'static str,
    pub fix: &'static str,
}

/// The bytes of `path`: a regular file of at most `limit` bytes (a file that grows while it
/// is read stops at the limit all the same), without any of `forbid`'s bits.
pub fn read(path: &Path, limit: u64, forbid: Option<Forbid>) -> Result<Vec<u8>, FileError> {
    use std::io::Read;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let read_err = |err| FileError::Read {
        path: path.to_path_buf(),
        err,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    if !meta.is_file() {
        return Err(FileError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if let Some(f) = forbid.filter(|f| mode & f.bits != 0) {
        return Err(FileError::Mode {
            path: path.to_path_buf(),
            mode,
            what: f.what,
            fix: f.fix,
        });
    }
    let too_large = |bytes| FileError::TooLarge {
        path: path.to_path_buf(),
        bytes,
        limit,
    };
    if meta.len() > limit {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_only_when_it_is_a_small_enough_regular_file_with_allowed_bits() {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("usbperf-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("f");
        std::fs::write(&f, b"0123456789").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(read(&f, 10, None).unwrap(), b"0123456789");
        let forbid = |bits| {
            Some(Forbid {
                bits,
                what: "read",
                fix: "chmod 600 it",
            })
        };
        assert!(read(&f, 10, forbid(0o007)).is_ok(), "others have no bits");
        let e = read(&f, 10, forbid(0o077)).unwrap_err().to_string();
        assert!(e.contains("(mode 0640): chmod 600 it"), "{e}");
        let e = read(&f, 9, None).unwrap_err().to_string();
        assert!(e.contains("holds 10 bytes, more than the 9"), "{e}");
        let e = read(&d, 10, None).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let fifo = d.join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let e = read(&fifo, 10, None).unwrap_err().to_string();
        assert!(
            e.contains("not a regular file"),
            "a FIFO is refused, not waited on: {e}"
        );
        let e = read(&d.join("missing"), 10, None).unwrap_err().to_string();
        assert!(e.starts_with("cannot read"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
