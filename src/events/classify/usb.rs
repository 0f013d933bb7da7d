//! USB core lines (drivers/usb/core): resets, disconnects, new devices, enumeration errors
//! of a device and of its hub's ports.

use super::{
    after, child_port, is_digits, split_name, EventKey, EventKind::*, KernelEvent, Severity::*,
};

/// The port and the speed a `hub_port_init` line says a device (re)enumerated at, in Mbit/s:
/// `usb 1-1: reset full-speed USB device number 3 using ehci-pci` is ("1-1", 12). The speed
/// words are `usb_speed_string`'s, and "SuperSpeed[ Plus[ Gen XxY]]" (drivers/usb/core/hub.c).
pub fn enumerated_speed(line: &str) -> Option<(String, f64)> {
    let rest = line.strip_prefix("usb ")?;
    let (port, body) = rest.split_once(": ")?;
    let body = body
        .strip_prefix("reset ")
        .or_else(|| body.strip_prefix("new "))?;
    let (speed, _) = body.split_once(" USB device number ")?;
    let mbps = match speed {
        "low-speed" => 1.5,
        "full-speed" => 12.0,
        "high-speed" => 480.0,
        "SuperSpeed" => 5000.0,
        "SuperSpeed Plus Gen 2x2" => 20000.0,
        s if s.starts_with("SuperSpeed Plus") => 10000.0,
        _ => return None,
    };
    Some((port.to_string(), mbps))
}

/// A line of USB device `keys[0]` (driver `usb`), after its prefix.
pub(super) fn device_line(m: &str, body: &str, keys: &[EventKey]) -> Option<KernelEvent> {
    let ev = |kind, sev| Some(KernelEvent::new(kind, sev, m, keys.to_vec()));
    // drivers/usb/core/hub.c `hub_port_init`: "%s %s USB device number %d using %s" with
    // "reset"/"new" and the speed ("high-speed", "SuperSpeed", "SuperSpeed Plus Gen 2x1").
    if body.contains(" USB device number ") {
        if body.starts_with("reset ") {
            return ev(UsbReset, Fatal);
        }
        if body.starts_with("new ") {
            return ev(UsbNewDevice, Info);
        }
    }
    // drivers/usb/core/hub.c `usb_disconnect`: "USB disconnect, device number %d".
    if body.starts_with("USB disconnect, device number") {
        return ev(UsbDisconnect, Fatal);
    }
    // drivers/usb/core/hub.c: "device descriptor read/%s, error %d", "device not accepting
    // address %d, error %d", "unable to enumerate USB device", "Cannot enable. Maybe the
    // USB cable is bad?", "attempt power cycle", "disabled by hub (EMI?),
    // re-enabling...", "over-current condition"; drivers/usb/core/config.c
    // "can't read configurations, error %d", "unable to read config index %d descriptor/%s";
    // drivers/usb/core/generic.c "can't set config #%d, error %d"; hub.c
    // `usb_reset_and_verify_device` "device firmware changed".
    const ENUM: [&str; 11] = [
        "device descriptor read/",
        "device not accepting address",
        "unable to enumerate USB device",
        "Cannot enable",
        "attempt power cycle",
        "disabled by hub (EMI?)",
        "over-current condition",
        "can't read configurations",
        "unable to read config index",
        "can't set config",
        "device firmware changed",
    ];
    if ENUM.iter().any(|p| body.contains(p)) {
        return ev(UsbEnumerationError, Fatal);
    }
    None
}

/// drivers/usb/core/hub.c, hub interface ("hub 1-1:1.0: ..."): `hub_ext_port_status`
/// "%s failed (err = %d)", `hub_port_reset` "cannot reset port %d (err = %d)",
/// `hub_port_disable` "cannot disable port %d (err = %d)". A port number names the device
/// on that port; otherwise the hub itself fails, and everything below it.
pub(super) fn hub_line(m: &str, body: &str, keys: &[EventKey]) -> Option<KernelEvent> {
    let ev = |kind, sev| Some(KernelEvent::new(kind, sev, m, keys.to_vec()));
    let failing = [
        "port_status failed",
        "cannot reset port",
        "cannot disable port",
    ];
    if failing.iter().any(|p| body.contains(p)) {
        if let Some(port) = after(body, "port ").map(|r| split_name(r, ' ').0) {
            if let (true, Some(EventKey::UsbPort(hub))) = (is_digits(port), keys.first()) {
                let child = EventKey::UsbPort(child_port(hub, port));
                return Some(KernelEvent::new(UsbEnumerationError, Fatal, m, vec![child]));
            }
        }
        return ev(UsbEnumerationError, Fatal);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::tests::check;
    use super::super::{EventKind::*, Severity::*};

    #[test]
    fn the_speed_a_device_enumerated_at() {
        use super::enumerated_speed;
        let table: &[(&str, Option<(&str, f64)>)] = &[
            (
                "usb 1-1: reset full-speed USB device number 3 using ehci-pci",
                Some(("1-1", 12.0)),
            ),
            (
                "usb 1-1.2: new high-speed USB device number 5 using xhci_hcd",
                Some(("1-1.2", 480.0)),
            ),
            (
                "usb 2-1: reset SuperSpeed USB device number 2 using xhci_hcd",
                Some(("2-1", 5000.0)),
            ),
            (
                "usb 2-1: new SuperSpeed Plus Gen 2x1 USB device number 2 using xhci_hcd",
                Some(("2-1", 10000.0)),
            ),
            (
                "usb 2-1: new SuperSpeed Plus Gen 2x2 USB device number 2 using xhci_hcd",
                Some(("2-1", 20000.0)),
            ),
            (
                "usb 1-1.4: new low-speed USB device number 7 using dwc2",
                Some(("1-1.4", 1.5)),
            ),
            ("usb 1-1: USB disconnect, device number 5", None),
            ("usb 1-1: new wireless USB device number 2 using hwa", None),
        ];
        for (line, want) in table {
            let got = enumerated_speed(line);
            assert_eq!(got.as_ref().map(|(p, s)| (p.as_str(), *s)), *want, "{line}");
        }
    }

    /// Real kernel lines (each rule's format string is cited at the rule) and lines that
    /// must not count.
    #[test]
    fn usb_core_lines() {
        check(&[
            // drivers/usb/core/hub.c `hub_port_init`: "%s %s USB device number %d using %s".
            (
                "usb 1-1.2: reset high-speed USB device number 5 using xhci_hcd",
                Some((UsbReset, Fatal, &["usb:1-1.2"])),
            ),
            (
                "usb 2-1: reset SuperSpeed USB device number 2 using xhci_hcd",
                Some((UsbReset, Fatal, &["usb:2-1"])),
            ),
            (
                "usb 2-1: reset SuperSpeed Plus Gen 2x1 USB device number 2 using xhci_hcd",
                Some((UsbReset, Fatal, &["usb:2-1"])),
            ),
            (
                "usb 1-1.4: new low-speed USB device number 7 using dwc2",
                Some((UsbNewDevice, Info, &["usb:1-1.4"])),
            ),
            // drivers/usb/core/hub.c `usb_disconnect`.
            (
                "usb 1-1.2: USB disconnect, device number 5",
                Some((UsbDisconnect, Fatal, &["usb:1-1.2"])),
            ),
            // drivers/usb/core/hub.c enumeration failures; port devices are "usb1-port2"
            // (root hub) and "1-1-port3" (hub 1-1), drivers/usb/core/port.c.
            (
                "usb 1-1: device descriptor read/64, error -71",
                Some((UsbEnumerationError, Fatal, &["usb:1-1"])),
            ),
            (
                "usb 1-1.2: device not accepting address 6, error -71",
                Some((UsbEnumerationError, Fatal, &["usb:1-1.2"])),
            ),
            (
                "usb usb1-port2: unable to enumerate USB device",
                Some((UsbEnumerationError, Fatal, &["usb:1-2"])),
            ),
            (
                "usb 1-1-port3: Cannot enable. Maybe the USB cable is bad?",
                Some((UsbEnumerationError, Fatal, &["usb:1-1.3"])),
            ),
            (
                "usb usb1-port1: disabled by hub (EMI?), re-enabling...",
                Some((UsbEnumerationError, Fatal, &["usb:1-1"])),
            ),
            (
                "usb usb2-port1: over-current condition",
                Some((UsbEnumerationError, Fatal, &["usb:2-1"])),
            ),
            (
                "usb 1-1: can't set config #1, error -71",
                Some((UsbEnumerationError, Fatal, &["usb:1-1"])),
            ),
            (
                "usb 1-1: device firmware changed",
                Some((UsbEnumerationError, Fatal, &["usb:1-1"])),
            ),
            (
                "usb usb1-port1: attempt power cycle",
                Some((UsbEnumerationError, Fatal, &["usb:1-1"])),
            ),
            // Hub interface lines: the port number names the device on it.
            (
                "hub 1-1:1.0: hub_ext_port_status failed (err = -71)",
                Some((UsbEnumerationError, Fatal, &["usb:1-1"])),
            ),
            (
                "hub 1-1:1.0: cannot reset port 2 (err = -71)",
                Some((UsbEnumerationError, Fatal, &["usb:1-1.2"])),
            ),
            (
                "hub 1-0:1.0: cannot disable port 1 (err = -32)",
                Some((UsbEnumerationError, Fatal, &["usb:1-1"])),
            ),
        ]);
    }
}
