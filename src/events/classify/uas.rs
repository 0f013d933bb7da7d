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
