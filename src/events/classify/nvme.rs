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

#[cfg(test)]
mod tests {
    use super::super::tests::check;
    use super::super::{EventKind::*, Severity::*};

    /// Real kernel lines (each rule's format string is cited at the rule) and lines that
    /// must not count.
    #[test]
    fn nvme_lines() {
        check(&[
            // drivers/nvme/host/pci.c.
            (
                "nvme nvme0: I/O tag 12 (100c) opcode 0x1 (I/O Cmd) QID 3 timeout, aborting req_op:WRITE(1) size:4096",
                Some((NvmeError, Fatal, &["nvme:nvme0"])),
            ),
            (
                "nvme nvme0: I/O 12 QID 3 timeout, reset controller",
                Some((NvmeError, Fatal, &["nvme:nvme0"])),
            ),
            (
                "nvme nvme1: controller is down; will reset: CSTS=0xffffffff, PCI_STATUS=0xffff",
                Some((NvmeError, Fatal, &["nvme:nvme1"])),
            ),
            ("nvme nvme0: Shutdown timeout set to 8 seconds", None),
            ("nvme nvme0: 4/0/0 default/read/poll queues", None),
        ]);
    }
}
