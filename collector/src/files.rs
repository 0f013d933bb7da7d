//! Owns how the collector reads a file it is given by path (the token file, the unit key list,
//! the certificate and key): through the unit's bounded reader (`usbperf_report::untrusted`: a
//! regular file, opened non-blocking so that a FIFO or device does not hang the start,
//! bounded before it is read and refused with the limit it hit), and, where it is a secret or
//! a trust list, refused when the permission bits of the file opened let others read or
//! change it.

use std::path::{Path, PathBuf};

/// A file that cannot be used, with why: the unit's bounded reader's words
/// (`usbperf_report::untrusted::read_file`), or the permission bits this file must not have.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {path}: {err}")]
pub struct FileError {
    pub path: PathBuf,
    #[source]
    pub err: std::io::Error,
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
    usbperf_report::untrusted::read_file_where(path, limit, |meta| refuse(meta, forbid)).map_err(
        |err| FileError {
            path: path.to_path_buf(),
            err,
        },
    )
}

/// [`read`] as UTF-8 text, with the permission bits (`mode & 0o7777`) of the file read, for a
/// caller that warns of bits it was told to accept.
pub fn read_text(
    path: &Path,
    limit: u64,
    forbid: Option<Forbid>,
) -> Result<(String, u32), FileError> {
    let mut mode = 0;
    usbperf_report::untrusted::read_text_where(path, limit, |meta| {
        use std::os::unix::fs::PermissionsExt;
        mode = meta.permissions().mode() & 0o7777;
        refuse(meta, forbid)
    })
    .map(|text| (text, mode))
    .map_err(|err| FileError {
        path: path.to_path_buf(),
        err,
    })
}

fn refuse(meta: &std::fs::Metadata, forbid: Option<Forbid>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o7777;
    match forbid.filter(|f| mode & f.bits != 0) {
        Some(f) => Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "it may be {} by other users (mode {mode:04o}): {}",
                f.what, f.fix
            ),
        )),
        None => Ok(()),
    }
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
        assert!(e.contains("10 bytes, more than the 9 bytes"), "{e}");
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
        // As text: the bits of the file read come back for a warning; bytes that are not
        // UTF-8 are refused with where they start.
        assert_eq!(
            read_text(&f, 10, forbid(0o007)).unwrap(),
            ("0123456789".to_string(), 0o640)
        );
        let e = read_text(&f, 10, forbid(0o070)).unwrap_err().to_string();
        assert!(e.contains("(mode 0640): chmod 600 it"), "{e}");
        std::fs::write(&f, b"tok\xffen").unwrap();
        let e = read_text(&f, 10, None).unwrap_err().to_string();
        assert!(e.contains("not UTF-8 text (byte 3 is not)"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
