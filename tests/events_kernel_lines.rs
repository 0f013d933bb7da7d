//! Kernel lines recorded from each kernel the boards run: Debian 11's 5.10, 12's
//! 6.1 and bookworm-backports' 6.12, one `scripts/vm-e2e.sh --kernel V` run each, all scenarios
//! (`tests/fixtures/kernels/`). The forms differ by version (`blk_update_request: I/O error`
//! on 5.10, `I/O error` since 5.15; `DRIVER_SENSE` only on 5.10; ext4's mount and error
//! lines), and every kernel must give the same verdicts: the same events recognised, on the
//! same devices, with the same severity.

use std::path::Path;

use usbperf::events::{classify, EventKey, EventKind, Severity};

const KERNELS: &[&str] = &["5.10", "6.1", "6.12"];

fn lines(kernel: &str) -> Vec<String> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kernels")
        .join(format!("x86_64-{kernel}.kmsg.txt"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let v: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(str::to_string)
        .collect();
    assert!(v.len() > 20, "{}: {} lines", p.display(), v.len());
    v
}

/// What the recording must show, on every kernel: (what, a line matching `pick` exists, and
/// it classifies as `kind` / `severity` with `key` among its keys).
struct Expect {
    what: &'static str,
    pick: fn(&str) -> bool,
    kind: EventKind,
    severity: Severity,
    key: EventKey,
}

fn expectations() -> Vec<Expect> {
    vec![
        Expect {
            what: "blkdebug's read error of sector 4096 on the error stick (sdh)",
            pick: |l| l.contains("I/O error, dev sdh, sector 4096 op 0x0:(READ)"),
            kind: EventKind::IoError,
            severity: Severity::Fatal,
            key: EventKey::Disk("sdh".into()),
        },
        Expect {
            what: "the SCSI sense of that error",
            pick: |l| l.contains("[sdh]") && l.contains("Sense Key : Aborted Command"),
            kind: EventKind::ScsiError,
            severity: Severity::Fatal,
            key: EventKey::Disk("sdh".into()),
        },
        Expect {
            what: "the failed command's result",
            pick: |l| l.contains("[sdh]") && l.contains("FAILED Result: hostbyte=DID_OK"),
            kind: EventKind::ScsiError,
            severity: Severity::Fatal,
            key: EventKey::Disk("sdh".into()),
        },
        Expect {
            what: "ext4's error on the UAS disk made to fail (erofs scenario)",
            pick: |l| l.starts_with("EXT4-fs error (device sdd): trigger_test_error"),
            kind: EventKind::FsError,
            severity: Severity::Fatal,
            key: EventKey::Disk("sdd".into()),
        },
        Expect {
            what: "the stick pulled out by QMP device_del (unplug scenario)",
            pick: |l| l.contains("USB disconnect, device number"),
            kind: EventKind::UsbDisconnect,
            severity: Severity::Fatal,
            key: EventKey::UsbPort("4-2".into()),
        },
    ]
}

#[test]
fn every_kernel_gives_the_same_verdicts_on_its_own_lines() {
    for k in KERNELS {
        let lines = lines(k);
        for e in expectations() {
            let picked: Vec<&String> = lines.iter().filter(|l| (e.pick)(l)).collect();
            assert!(!picked.is_empty(), "{k}: no line for {}", e.what);
            for l in picked {
                let ev =
                    classify(l).unwrap_or_else(|| panic!("{k}: {} not recognised: {l}", e.what));
                assert_eq!(ev.kind, e.kind, "{k}: {}: {l}", e.what);
                assert_eq!(ev.severity, e.severity, "{k}: {}: {l}", e.what);
                assert!(
                    ev.keys.contains(&e.key),
                    "{k}: {}: keys {:?}: {l}",
                    e.what,
                    ev.keys
                );
            }
        }
    }
}

#[test]
fn routine_lines_of_every_kernel_fail_nothing() {
    // Mounts, unmounts, recovery and new devices are what a healthy boot prints; their forms
    // changed most between 5.10 and 6.12 (UUIDs, "r/w", "Quota mode").
    for k in KERNELS {
        for l in lines(k) {
            let routine = l.contains("mounted filesystem")
                || l.contains("unmounting filesystem")
                || l.contains("recovery complete")
                || l.contains("new high-speed USB device")
                || l.contains("new full-speed USB device")
                || l.contains("new SuperSpeed USB device");
            if routine {
                if let Some(ev) = classify(&l) {
                    assert_ne!(
                        ev.severity,
                        Severity::Fatal,
                        "{k}: routine line is fatal: {l}"
                    );
                }
            }
        }
    }
}
