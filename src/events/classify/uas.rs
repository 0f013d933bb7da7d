//! UAS lines (drivers/usb/storage/uas.c, uas-detect.h): the driver falling back to
//! usb-storage, and its error handler.

use super::EventKind::{self, *};

/// What a UAS line reports, from its body (after the device and SCSI prefixes).
pub(super) fn classify(body: &str) -> Option<EventKind> {
    // drivers/usb/storage/uas-detect.h `uas_use_uas_driver`:
    //   "UAS is ignored for this device, using usb-storage instead" (older: "blacklisted"),
    //   "The driver for the USB controller %s does not support scatter-gather which is" /
    //   "required by the UAS driver. Please try an other USB controller if you wish to use UAS.",
    //   "USB controller %s does not support streams, which are required by the UAS driver."
    if body.contains("for this device, using usb-storage instead")
        || body.contains("does not support scatter-gather")
        || body.contains("required by the UAS driver")
    {
        return Some(UasFallback);
    }
    // drivers/usb/storage/uas.c `uas_log_cmd_state`:
    //   "%s %d uas-tag %d inflight:%s%s..." (prefix "uas_eh_abort_handler", "data cmplt err",
    //   "cmd cmplt err", ...); `uas_eh_device_reset_handler`: "%s start" / "%s FAILED to
    //   get lock err %d" / "%s FAILED err %d" / "%s success"; `uas_stat_cmplt`:
    //   "stat urb: no pending cmd for uas-tag %d".
    // `uas_post_reset`: "%s: alloc streams error %d after reset".
    if body.contains("uas-tag") || body.starts_with("uas_") {
        return Some(UasError);
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
    fn uas_lines() {
        check(&[
            // drivers/usb/storage/uas-detect.h `uas_use_uas_driver`.
            (
                "usb 2-1: UAS is ignored for this device, using usb-storage instead",
                Some((UasFallback, Fatal, &["usb:2-1"])),
            ),
            (
                "usb 2-1: UAS is blacklisted for this device, using usb-storage instead",
                Some((UasFallback, Fatal, &["usb:2-1"])),
            ),
            (
                "usb 4-1: USB controller 0000:00:04.0 does not support streams, which are required by the UAS driver.",
                Some((UasFallback, Fatal, &["usb:4-1"])),
            ),
            // drivers/usb/storage/uas.c `uas_log_cmd_state` through scmd_printk
            // (drivers/scsi/scsi_logging.c: "[%s] " and "tag#%d " prefixes).
            (
                "sd 0:0:0:0: [sda] tag#12 uas_eh_abort_handler 0 uas-tag 3 inflight: CMD OUT ",
                Some((UasError, Fatal, &["scsi:0:0:0:0", "disk:sda"])),
            ),
            (
                "sd 0:0:0:0: [sda] tag#0 data cmplt err -71 uas-tag 1 inflight: CMD IN ",
                Some((UasError, Fatal, &["scsi:0:0:0:0", "disk:sda"])),
            ),
            (
                "scsi host0: uas_eh_device_reset_handler start",
                Some((UasError, Fatal, &["scsi_host:host0"])),
            ),
            (
                "scsi host0: uas_eh_device_reset_handler success",
                Some((UasError, Fatal, &["scsi_host:host0"])),
            ),
            (
                "scsi host3: uas_post_reset: alloc streams error -19 after reset",
                Some((UasError, Fatal, &["scsi_host:host3"])),
            ),
        ]);
    }
}
