//! libata lines: link resets, failed commands, frozen ports, speed limits (drivers/ata).

use super::*;

/// libata lines: `ata_port_printk` "ata%u: ", `ata_dev_printk` "ata%u.%02u: "
/// (drivers/ata/libata-core.c), texts from drivers/ata/libata-eh.c.
pub(super) fn classify(m: &str) -> Option<KernelEvent> {
    let (name, body) = m.split_once(": ")?;
    let port = name.split('.').next()?;
    let digits = port.strip_prefix("ata")?;
    if !is_digits(digits) {
        return None;
    }
    const BAD: [&str; 10] = [
        "exception Emask",
        "failed command",
        "hard resetting link",
        "SError:",
        "COMRESET failed",
        "link is slow to respond",
        "SATA link down",
        "limiting SATA link speed",
        "status: {",
        "error: {",
    ];
    BAD.iter().any(|p| body.contains(p)).then(|| {
        KernelEvent::new(
            EventKind::AtaError,
            Severity::Fatal,
            m,
            vec![EventKey::AtaPort(port.to_string())],
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::check;
    use super::super::{EventKind::*, Severity::*};

    /// Real kernel lines (each rule's format string is cited at the rule) and lines that
    /// must not count.
    #[test]
    fn ata_lines() {
        check(&[
            // libata (drivers/ata/libata-eh.c).
            (
                "ata1.00: exception Emask 0x0 SAct 0x0 SErr 0x0 action 0x6 frozen",
                Some((AtaError, Fatal, &["ata:ata1"])),
            ),
            (
                "ata1.00: failed command: READ DMA EXT",
                Some((AtaError, Fatal, &["ata:ata1"])),
            ),
            (
                "ata1: hard resetting link",
                Some((AtaError, Fatal, &["ata:ata1"])),
            ),
        ]);
    }
}
