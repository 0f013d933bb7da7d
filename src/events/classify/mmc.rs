//! MMC/SD host and card lines: timeouts, CRC errors, cards removed during a transfer.

use super::*;

/// MMC/SD lines, printed with `pr_*("%s: ...", mmc_hostname(host))` or the disk name.
pub(super) fn classify(m: &str) -> Option<KernelEvent> {
    use EventKind::*;
    use Severity::*;
    let (name, body) = m.split_once(": ")?;
    if is_mmc_host(name) {
        let keys = vec![EventKey::MmcHost(name.to_string())];
        // drivers/mmc/core/bus.c `mmc_remove_card`: "%s: card %04x removed".
        // drivers/mmc/host/sdhci.c `sdhci_card_event`: "%s: Card removed during transfer!".
        if (body.starts_with("card ") && body.ends_with(" removed"))
            || body.starts_with("Card removed during transfer")
        {
            return Some(KernelEvent::new(MmcRemoved, Fatal, m, keys));
        }
        // drivers/mmc/core/bus.c `mmc_add_card`: "%s: new %s%s%s%s%s card at address %04x"
        // ("mmc0: new high speed SD card at address 4567" in the QEMU fixtures).
        if body.starts_with("new ") && body.contains(" card") && body.contains("at address") {
            return Some(KernelEvent::new(MmcNewCard, Info, m, keys));
        }
        // Host drivers and core: sdhci.c "Timeout waiting for hardware interrupt.",
        // "Reset 0x%x never completed.", core "error %d whilst initialising SD card",
        // "tried to HW reset card, got error %d", "cache flush error %d", "Card stuck ...".
        let lower = body.to_ascii_lowercase();
        if ["timeout", "error", "failed", "never completed", "stuck"]
            .iter()
            .any(|p| lower.contains(p))
        {
            return Some(KernelEvent::new(MmcError, Fatal, m, keys));
        }
        return None;
    }
    if name.starts_with("mmcblk") && is_block_name(name) {
        // drivers/mmc/core/block.c: "%s: error %d transferring data, sector %u, nr %u, cmd
        // response %#x, card status %#x", "%s: %s sending %s command, card status %#x",
        // "%s: recovery failed!", "%s: error %d requesting status".
        let lower = body.to_ascii_lowercase();
        if ["error", "failed", "timed out", "timeout"]
            .iter()
            .any(|p| lower.contains(p))
        {
            return Some(KernelEvent::new(MmcError, Fatal, m, disk_keys(name)));
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
    fn mmc_lines() {
        check(&[
            // drivers/mmc/core/bus.c, block.c; drivers/mmc/host/sdhci.c.
            (
                "mmc0: card 0001 removed",
                Some((MmcRemoved, Fatal, &["mmc_host:mmc0"])),
            ),
            (
                "mmcblk0: error -110 transferring data, sector 2048, nr 8, cmd response 0x900, card status 0xb00",
                Some((MmcError, Fatal, &["disk:mmcblk0"])),
            ),
            (
                "mmcblk1: recovery failed!",
                Some((MmcError, Fatal, &["disk:mmcblk1"])),
            ),
            (
                "mmc1: Timeout waiting for hardware interrupt.",
                Some((MmcError, Fatal, &["mmc_host:mmc1"])),
            ),
            ("mmcblk0: p1 p2", None),
            (
                "mmc1: Card removed during transfer!",
                Some((MmcRemoved, Fatal, &["mmc_host:mmc1"])),
            ),
        ]);
    }
}
