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
