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
