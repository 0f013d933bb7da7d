//! Block-layer lines: request errors (blk-mq, blk-core), buffer-cache I/O errors, the loop
//! driver's write errors, accesses past the end of a device and a capacity dropping to 0.

use super::{after, disk_keys, is_block_name, split_name, EventKind::*, KernelEvent, Severity::*};

/// A block-layer line about a disk, or `None`.
pub(super) fn classify(m: &str) -> Option<KernelEvent> {
    // block/blk-mq.c `blk_print_req_error` (5.16+):
    //   "%s error, dev %s, sector %llu op 0x%x:(%s) flags 0x%x phys_seg %u prio class %u"
    // block/blk-core.c before 5.16 prefixed "blk_update_request: " / "print_req_error: ";
    // before 5.0 only "%s: %s error, dev %s, sector %llu". The error name comes from
    // `blk_errors[]` ("I/O", "critical medium", "timeout", "recoverable transport", ...).
    if let Some(rest) = after(m, "error, dev ") {
        let (name, tail) = split_name(rest, ',');
        if tail.starts_with(", sector ") {
            return Some(KernelEvent::new(IoError, Fatal, m, disk_keys(name)));
        }
    }
    // fs/buffer.c `buffer_io_error`: "Buffer I/O error on dev %pg, logical block %llu%s" and
    // `mark_buffer_write_io_error`: "..., lost async page write" / "lost sync page write".
    if let Some(rest) = after(m, "Buffer I/O error on dev ") {
        let (name, _) = split_name(rest, ',');
        return Some(KernelEvent::new(IoError, Fatal, m, disk_keys(name)));
    }
    // drivers/block/loop.c `lo_write_bvec`: "loop%d: Write error at byte offset %llu, length %i."
    if let Some((name, body)) = m.split_once(": ") {
        if name.starts_with("loop") && is_block_name(name) && body.contains(" error at byte") {
            return Some(KernelEvent::new(IoError, Fatal, m, disk_keys(name)));
        }
        if is_block_name(name) {
            // block/blk-core.c `handle_bad_sector`: "%pg: attempt to access beyond end of
            // device" (a write past the end: the disk shrank under the test).
            if body.starts_with("attempt to access beyond end of device") {
                return Some(KernelEvent::new(IoError, Fatal, m, disk_keys(name)));
            }
            // block/genhd.c `set_capacity_and_notify`: "%s: detected capacity change from
            // %lld to %lld". To 0: sd revalidated a disk whose medium or bridge is gone.
            if body.starts_with("detected capacity change from ") && body.ends_with(" to 0") {
                return Some(KernelEvent::new(DeviceOffline, Fatal, m, disk_keys(name)));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::tests::check;
    use super::super::{EventKind::*, Severity::*};

    /// Real kernel lines (each rule's format string is cited at the rule) and lines that
    /// must not count.
    #[test]
    fn block_layer_lines() {
        check(&[
            // block/blk-mq.c `blk_print_req_error` (5.16+); recorded on this machine from a
            // loop device over a write-sealed memfd (tests/events_kmsg.rs does it again).
            (
                "I/O error, dev loop0, sector 0 op 0x1:(WRITE) flags 0x8800 phys_seg 1 prio class 2",
                Some((IoError, Fatal, &["disk:loop0"])),
            ),
            (
                "critical medium error, dev sdaa, sector 123 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0",
                Some((IoError, Fatal, &["disk:sdaa"])),
            ),
            (
                "timeout error, dev nvme0n1, sector 8 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0",
                Some((IoError, Fatal, &["disk:nvme0n1"])),
            ),
            // block/blk-core.c `print_req_error` 5.0-5.15, and 4.x `blk_update_request`.
            (
                "blk_update_request: I/O error, dev sda, sector 2048 op 0x0:(READ) flags 0x80700 phys_seg 1 prio class 0",
                Some((IoError, Fatal, &["disk:sda"])),
            ),
            (
                "blk_update_request: I/O error, dev sdb, sector 2048",
                Some((IoError, Fatal, &["disk:sdb"])),
            ),
            // `?` when the request has no disk: an error nobody can be blamed for.
            (
                "I/O error, dev ?, sector 0 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0",
                Some((IoError, Fatal, &[])),
            ),
            // A program writing into /dev/kmsg (tests/events_kmsg.rs): the text is what counts.
            (
                "usbperf-test: I/O error, dev sdzz, sector 2048 op 0x1:(WRITE) flags 0x0 phys_seg 1 prio class 0",
                Some((IoError, Fatal, &["disk:sdzz"])),
            ),
            // fs/buffer.c `buffer_io_error` / `mark_buffer_write_io_error`.
            (
                "Buffer I/O error on dev sda1, logical block 0, async page read",
                Some((IoError, Fatal, &["disk:sda1"])),
            ),
            (
                "Buffer I/O error on dev mmcblk0p2, logical block 1234, lost async page write",
                Some((IoError, Fatal, &["disk:mmcblk0p2"])),
            ),
            (
                "Buffer I/O error on dev dm-0, logical block 7, lost sync page write",
                Some((IoError, Fatal, &["disk:dm-0"])),
            ),
            // drivers/block/loop.c `lo_write_bvec`.
            (
                "loop0: Write error at byte offset 0, length 4096.",
                Some((IoError, Fatal, &["disk:loop0"])),
            ),
            ("loop0: detected capacity change from 0 to 2048", None),
            (
                "sdb: detected capacity change from 31116288 to 0",
                Some((DeviceOffline, Fatal, &["disk:sdb"])),
            ),
            (
                "sda: attempt to access beyond end of device\nsda: rw=1, sector=131072, nr_sectors = 8 limit=131064",
                Some((IoError, Fatal, &["disk:sda"])),
            ),
        ]);
    }
}
