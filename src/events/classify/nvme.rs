//! NVMe controller lines (drivers/nvme/host): timeouts, resets, a controller that is down.

use super::{EventKey, EventKind::*, KernelEvent, Severity::*};

/// A line of NVMe controller `dev` (`nvme0`): an event, or `None` for its probe lines.
pub(super) fn classify(m: &str, dev: &str, body: &str) -> Option<KernelEvent> {
    // drivers/nvme/host/pci.c `nvme_timeout`: "I/O tag %d (%04x) opcode %#x (%s) QID %d
    // timeout, aborting req_op:%s(%u) size:%u" (older "I/O %d QID %d timeout,
    // aborting"), "... timeout, reset controller", `nvme_should_reset`/`nvme_reset_work`:
    // "controller is down; will reset: CSTS=%#x, PCI_STATUS=%#x", "Removing after probe
    // failure status: %d", "Device not ready; aborting reset", `abort_endio` "Abort
    // status: 0x%x". Probe lines ("Shutdown timeout set to %u seconds") do not count.
    const BAD: [&str; 6] = [
        " timeout, ",
        "controller is down",
        "Removing after probe failure",
        "Device not ready",
        "Abort status",
        "reset controller",
    ];
    if BAD.iter().any(|p| body.contains(p)) {
        return Some(KernelEvent::new(
            NvmeError,
            Fatal,
            m,
            vec![EventKey::NvmeController(dev.to_string())],
        ));
    }
    None
}
