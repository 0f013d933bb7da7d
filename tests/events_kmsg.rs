//! The kernel-event watcher on this machine's real `/dev/kmsg`: a line written into the log,
//! and a real block-layer I/O error from a loop device whose backing memfd refuses writes.
//! Needs root; a missing precondition fails the test (it never passes silently).

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use common::{require_root, SealedLoop};
use usbperf::discover::{discover, Backend, SysfsRoot};
use usbperf::events::{attribute, DeviceKeys, EventKind, KernelEvent, KmsgWatcher};

const KMSG: &str = "/dev/kmsg";

fn watcher() -> KmsgWatcher {
    require_root("reading and writing /dev/kmsg needs root or CAP_SYSLOG");
    KmsgWatcher::open(Path::new(KMSG))
        .unwrap_or_else(|e| panic!("precondition: cannot watch {KMSG}: {e}"))
}

/// A marker no other process (other tests share the kernel log) writes.
fn nonce() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}-{t}", std::process::id())
}

fn with_line<'a>(events: &'a [KernelEvent], needle: &str) -> Vec<&'a KernelEvent> {
    events.iter().filter(|e| e.line.contains(needle)).collect()
}

#[test]
fn a_line_written_into_kmsg_is_read_and_attributed_by_whole_disk_name() {
    needs_root!("writes to /dev/kmsg");
    let tag = nonce();
    let mut kmsg = OpenOptions::new()
        .write(true)
        .open(KMSG)
        .unwrap_or_else(|e| panic!("precondition: cannot open {KMSG} for writing: {e}"));
    // Written before the watcher opens: it must never be read (seek to the end).
    let before = format!("usbperf-test[{tag}]: before open, I/O error, dev sdzz, sector 1");
    kmsg.write_all(format!("<3>{before}\n").as_bytes())
        .expect("write to /dev/kmsg");
    let mut w = watcher();
    // kernel/printk/printk.c `devkmsg_write`: "<3>" is the level; without a facility the
    // record gets LOG_USER. The text is block/blk-mq.c `blk_print_req_error`'s format.
    let msg = format!(
        "usbperf-test[{tag}]: I/O error, dev sdzz, sector 2048 op 0x1:(WRITE) flags 0x0 \
         phys_seg 1 prio class 0"
    );
    // One write is one record, stored before write(2) returns: no waiting needed.
    kmsg.write_all(format!("<3>{msg}\n").as_bytes())
        .expect("write to /dev/kmsg");

    let records = w.drain().expect("drain");
    let ours: Vec<_> = records
        .iter()
        .filter(|r| r.message.contains(&tag))
        .collect();
    assert_eq!(
        ours.len(),
        1,
        "only the line written after open must come back, once; got {:?}",
        ours.iter().map(|r| &r.message).collect::<Vec<_>>()
    );
    let rec = ours[0];
    assert_eq!(rec.message, msg);
    assert_eq!((rec.level, rec.facility), (3, 1), "level 3, LOG_USER");
    assert!(!rec.is_kernel());
    assert!(rec.seq > 0 && rec.ts_usec > 0);

    let hit = attribute(&records, &DeviceKeys::new("sdzz"));
    let hit = with_line(&hit, &tag);
    assert_eq!(hit.len(), 1, "{hit:?}");
    assert_eq!(hit[0].kind, EventKind::IoError);
    assert!(hit[0].is_fatal());
    assert_eq!(hit[0].keys_matched, ["disk:sdzz"]);
    assert_eq!(hit[0].line, msg);
    assert_eq!(hit[0].seq, Some(rec.seq));

    for other in ["sdz", "sdzzz", "sda"] {
        let miss = attribute(&records, &DeviceKeys::new(other));
        assert!(
            with_line(&miss, &tag).is_empty(),
            "attributed to {other}: {miss:?}"
        );
    }
    // Records were read once: the next drain does not return them again.
    let again = w.drain().expect("second drain");
    assert!(again.iter().all(|r| !r.message.contains(&tag)));
}

#[test]
fn a_real_io_error_on_a_loop_device_is_attributed_to_it() {
    needs_root!("loop devices");
    let mut w = watcher();
    let lo = SealedLoop::new();
    let name = lo.name().to_string();

    // Keys as the factory run builds them: from discovery's view of the disk.
    let inv = discover(&SysfsRoot::live(), Backend::Sysfs).expect("discover /sys");
    let disk = inv
        .disks
        .iter()
        .find(|d| d.name == name)
        .unwrap_or_else(|| panic!("discovery does not list {name}"));
    let keys = DeviceKeys::from_disk(disk);
    assert_eq!(keys.disk, name);
    assert!(!keys.devnums.is_empty(), "{keys:?}");

    // O_DIRECT needs an aligned buffer: carve one out of a larger allocation.
    let mut raw = vec![0u8; 8192];
    let off = raw.as_ptr().align_offset(4096);
    let buf = &mut raw[off..off + 4096];
    let mut f = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&lo.dev)
        .expect("open loop device");
    let err = f
        .write(buf)
        .expect_err("the sealed backing file must refuse the write");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    drop(f);

    let records = w.drain().expect("drain");
    let events = attribute(&records, &keys);
    let needle = format!("I/O error, dev {name}, sector 0 op 0x1:(WRITE)");
    let ours = with_line(&events, &needle);
    assert!(
        !ours.is_empty(),
        "no {needle:?} attributed to {name} (printk ratelimited by a flood elsewhere?); \
         records read: {:#?}",
        records.iter().map(|r| &r.message).collect::<Vec<_>>()
    );
    for e in &ours {
        assert_eq!(e.kind, EventKind::IoError);
        assert!(e.is_fatal());
        assert!(e.keys_matched.contains(&format!("disk:{name}")), "{e:?}");
        assert!(e.seq.is_some());
    }
    // A look-alike name (loop1 vs loop10) gets none of them.
    let other = DeviceKeys::new(format!("{name}0"));
    assert!(with_line(&attribute(&records, &other), &needle).is_empty());
}
