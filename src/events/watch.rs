//! Owns the live side: reading new `/dev/kmsg` records between test steps (no thread, no
//! blocking), noticing lost records, checking that the disk is still in sysfs, and turning
//! records into the events that concern one device.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::attrib::{attribute_event, DeviceKeys};
use super::classify::{classify_record, EventKey, EventKind, KernelEvent, Severity};
use super::kmsg::{parse_record, KmsgRecord};

/// Why the kernel log cannot be watched. Each message says how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    #[error(
        "cannot open {path}: permission denied. Reading the kernel log needs root or \
         CAP_SYSLOG (kernel.dmesg_restrict=1 hides /dev/kmsg from other users): run \
         usbperf-matrix as root"
    )]
    PermissionDenied { path: PathBuf },
    #[error(
        "{path} does not exist: /dev is not devtmpfs or the kernel lacks CONFIG_PRINTK; mount \
         devtmpfs on /dev (or create the node: mknod /dev/kmsg c 1 11)"
    )]
    NotFound { path: PathBuf },
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot seek {path} to its end ({source}): the watcher must skip old records, so the \
         path must be /dev/kmsg (kernel 3.5 or later)"
    )]
    Seek {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("reading {path} failed: {source}; kernel events of this test step are unknown")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// One `read(2)` returns exactly one record and fails with EINVAL if the buffer is smaller
/// than it; records are at most CONSOLE_EXT_LOG_MAX (8 KiB, kernel/printk/printk.c).
const RECORD_BUF: usize = 16 * 1024;

/// Reads the kernel log records written since `open`.
#[derive(Debug)]
pub struct KmsgWatcher {
    path: PathBuf,
    file: File,
    seq: SeqTracker,
    buf: Vec<u8>,
}

impl KmsgWatcher {
    /// Opens `path` (normally `/dev/kmsg`) non-blocking and skips every record already in
    /// the log (`lseek(fd, 0, SEEK_END)`, kernel/printk/printk.c `devkmsg_llseek`).
    pub fn open(path: &Path) -> Result<KmsgWatcher, EventsError> {
        let path_buf = path.to_path_buf();
        let mut file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::PermissionDenied => EventsError::PermissionDenied {
                    path: path_buf.clone(),
                },
                io::ErrorKind::NotFound => EventsError::NotFound {
                    path: path_buf.clone(),
                },
                _ => EventsError::Open {
                    path: path_buf.clone(),
                    source: e,
                },
            })?;
        file.seek(SeekFrom::End(0))
            .map_err(|source| EventsError::Seek {
                path: path_buf.clone(),
                source,
            })?;
        Ok(KmsgWatcher {
            path: path_buf,
            file,
            seq: SeqTracker::default(),
            buf: vec![0; RECORD_BUF],
        })
    }

    /// Every record written since the last call (or since `open`), oldest first. Returns
    /// at once when none is left (EAGAIN). Records the kernel overwrote before they were
    /// read (EPIPE) are counted in `lost_before` of the next record. A record that does not
    /// parse is kept with its raw text as the message, so no error line can hide behind a
    /// format change.
    pub fn drain(&mut self) -> Result<Vec<KmsgRecord>, EventsError> {
        let mut out = Vec::new();
        loop {
            match self.file.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => {
                    let text = String::from_utf8_lossy(&self.buf[..n]);
                    match parse_record(&text) {
                        Ok(mut rec) => {
                            self.seq.track(&mut rec);
                            out.push(rec);
                        }
                        Err(_) => out.push(unparsed_record(&text)),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // kernel/printk/printk.c `devkmsg_read`: our next record was overwritten;
                // the kernel moved us to the oldest one it still has.
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => self.seq.epipe(),
                Err(source) => {
                    return Err(EventsError::Read {
                        path: self.path.clone(),
                        source,
                    })
                }
            }
        }
        Ok(out)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn unparsed_record(text: &str) -> KmsgRecord {
    KmsgRecord {
        seq: 0,
        ts_usec: 0,
        level: 0,
        facility: 0,
        message: text.trim_end().to_string(),
        subsystem: None,
        device: None,
        lost_before: 0,
    }
}

/// Finds lost records from EPIPE and from gaps in the sequence numbers.
#[derive(Debug, Default, Clone)]
pub struct SeqTracker {
    last: Option<u64>,
    epipe: bool,
}

impl SeqTracker {
    /// `read` failed with EPIPE: at least one record is gone.
    pub fn epipe(&mut self) {
        self.epipe = true;
    }

    /// Sets `rec.lost_before` to the records missing between the previous record and it.
    pub fn track(&mut self, rec: &mut KmsgRecord) {
        let gap = match self.last {
            Some(last) if rec.seq > last => rec.seq - last - 1,
            _ => 0,
        };
        rec.lost_before = if self.epipe { gap.max(1) } else { gap };
        self.epipe = false;
        self.last = Some(rec.seq);
    }
}

/// Classifies every record (whatever device it concerns); lost-record markers included.
pub fn classify_records(records: &[KmsgRecord]) -> Vec<KernelEvent> {
    let mut out = Vec::new();
    for rec in records {
        if rec.lost_before > 0 {
            out.push(lost_event(rec));
        }
        out.extend(classify_record(rec));
    }
    out
}

/// The events among `records` that concern the device `keys` describes, oldest first.
/// Lost records concern every device: what was lost may have been its error, and a false
/// pass ships a bad unit, so they are fatal (the caller may re-run the step instead).
/// Lines written into /dev/kmsg by programs count like kernel lines.
pub fn attribute(records: &[KmsgRecord], keys: &DeviceKeys) -> Vec<KernelEvent> {
    classify_records(records)
        .into_iter()
        .filter_map(|ev| {
            if ev.kind == EventKind::RecordsLost {
                Some(ev)
            } else {
                attribute_event(&ev, keys)
            }
        })
        .collect()
}

fn lost_event(rec: &KmsgRecord) -> KernelEvent {
    KernelEvent {
        kind: EventKind::RecordsLost,
        severity: Severity::Fatal,
        keys: Vec::new(),
        keys_matched: Vec::new(),
        line: format!(
            "usbperf: {} kernel log record(s) before seq {} were overwritten before they were \
             read; errors of this device may be among them",
            rec.lost_before, rec.seq
        ),
        seq: Some(rec.seq),
        ts_usec: Some(rec.ts_usec),
    }
}

/// The disk's sysfs directory (`/sys/class/block/sda`) is gone: the kernel removed the disk
/// (udev would report `remove` for it). Errors other than "not found" do not count: sysfs
/// entries are world-readable, so they say nothing about the device.
pub fn disk_vanished(sysfs_block_dir: &Path) -> bool {
    matches!(
        std::fs::symlink_metadata(sysfs_block_dir),
        Err(e) if e.kind() == io::ErrorKind::NotFound
    )
}

/// A fatal `device_removed` event when `keys.disk` is no longer in `sys_class_block`
/// (normally `/sys/class/block`).
pub fn removal_event(sys_class_block: &Path, keys: &DeviceKeys) -> Option<KernelEvent> {
    let dir = sys_class_block.join(&keys.disk);
    if !disk_vanished(&dir) {
        return None;
    }
    let key = EventKey::Disk(keys.disk.clone());
    Some(KernelEvent {
        kind: EventKind::DeviceRemoved,
        severity: Severity::Fatal,
        keys_matched: vec![key.to_string()],
        keys: vec![key],
        line: format!(
            "usbperf: {} no longer exists: the kernel removed the disk",
            dir.display()
        ),
        seq: None,
        ts_usec: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, message: &str) -> KmsgRecord {
        KmsgRecord {
            seq,
            ts_usec: seq * 10,
            level: 3,
            facility: 0,
            message: message.to_string(),
            subsystem: None,
            device: None,
            lost_before: 0,
        }
    }

    #[test]
    fn seq_tracker_counts_lost_records() {
        // (EPIPE before this record?, seq, expected lost_before)
        let steps = [
            (false, 100, 0), // first record after open: nothing to compare with
            (false, 101, 0),
            (false, 105, 3), // 102..104 gone without EPIPE (kernel dropped them)
            (true, 106, 1),  // EPIPE but no visible gap: at least one
            (true, 120, 13),
            (false, 121, 0),
            (false, 50, 0), // never negative
        ];
        let mut t = SeqTracker::default();
        for (epipe, seq, want) in steps {
            if epipe {
                t.epipe();
            }
            let mut r = rec(seq, "x");
            t.track(&mut r);
            assert_eq!(r.lost_before, want, "seq {seq}");
        }
    }

    #[test]
    fn attribute_keeps_lost_markers_and_own_events_only() {
        let keys = DeviceKeys::new("sdzz");
        let mut lost = rec(7, "sd 0:0:0:0: [sdz] Attached SCSI disk");
        lost.lost_before = 4;
        let records = [
            rec(
                5,
                "I/O error, dev sdz, sector 8 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0",
            ),
            rec(
                6,
                "I/O error, dev sdzz, sector 8 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0",
            ),
            lost,
            rec(8, "random line"),
        ];
        let evs = attribute(&records, &keys);
        let got: Vec<(EventKind, Option<u64>, Vec<String>)> = evs
            .iter()
            .map(|e| (e.kind, e.seq, e.keys_matched.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (EventKind::IoError, Some(6), vec!["disk:sdzz".to_string()]),
                (EventKind::RecordsLost, Some(7), vec![]),
            ]
        );
        assert!(evs.iter().all(KernelEvent::is_fatal));
        assert!(evs[1].line.contains("4 kernel log record(s) before seq 7"));
        assert_eq!(classify_records(&records).len(), 3);
    }

    #[test]
    fn removal_is_seen_in_sysfs() {
        let dir = std::env::temp_dir().join(format!("usbperf-events-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sda")).unwrap();
        let present = DeviceKeys::new("sda");
        let gone = DeviceKeys::new("sdb");
        assert!(!disk_vanished(&dir.join("sda")));
        assert!(disk_vanished(&dir.join("sdb")));
        assert_eq!(removal_event(&dir, &present), None);
        let ev = removal_event(&dir, &gone).expect("sdb is gone");
        assert_eq!(ev.kind, EventKind::DeviceRemoved);
        assert!(ev.is_fatal());
        assert_eq!(ev.keys_matched, ["disk:sdb"]);
        assert!(ev.line.contains("sdb no longer exists"), "{}", ev.line);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn open_errors_say_how_to_fix() {
        let missing = Path::new("/nonexistent/usbperf/kmsg");
        let e = KmsgWatcher::open(missing).unwrap_err();
        assert!(matches!(e, EventsError::NotFound { .. }), "{e:?}");
        assert!(e.to_string().contains("mknod /dev/kmsg c 1 11"), "{e}");
        let denied = EventsError::PermissionDenied {
            path: "/dev/kmsg".into(),
        };
        assert!(denied.to_string().contains("CAP_SYSLOG"));
        assert!(denied.to_string().contains("dmesg_restrict"));
    }

    #[test]
    fn regular_file_yields_only_records_appended_after_open() {
        let path = std::env::temp_dir().join(format!("usbperf-events-kmsg-{}", std::process::id()));
        std::fs::write(&path, "6,1,2,-;old line\n").unwrap();
        let mut w = KmsgWatcher::open(&path).unwrap();
        assert_eq!(w.drain().unwrap(), vec![]);
        assert_eq!(w.path(), path.as_path());
        std::fs::remove_file(&path).unwrap();
    }
}
