//! SCSI midlayer and sd lines (drivers/scsi): offlined devices, failed commands and their
//! results, timeouts, aborts, resets and sense data.

use super::{EventKey, EventKind::*, KernelEvent, Severity::*};

/// A line of a SCSI device or host, after its prefixes.
pub(super) fn classify(m: &str, body: &str, keys: &[EventKey]) -> Option<KernelEvent> {
    let ev = |kind, sev| Some(KernelEvent::new(kind, sev, m, keys.to_vec()));
    // drivers/scsi/scsi_error.c `scsi_eh_offline_sdevs`: "Device offlined - not ready after
    // error recovery"; scsi_lib.c `scsi_device_state_check`: "rejecting I/O to offline
    // device" (older "rejecting I/O to dead device"); sd.c `sd_eh_action`: "Medium access
    // timeout failure. Offlining disk!".
    if body.contains("Device offlined")
        || body.starts_with("rejecting I/O to ")
        || body.contains("Offlining disk")
    {
        return ev(DeviceOffline, Fatal);
    }
    // drivers/scsi/scsi_logging.c `scsi_print_result`: "%s Result: hostbyte=%s driverbyte=%s"
    // with the disposition ("FAILED", ...); sd.c `sd_print_result`: "%s: Result: ..." after
    // "Synchronize Cache(10) failed", "Read Capacity(10) failed", "Start/Stop Unit failed".
    // scsi_lib.c `scsi_cmd_runtime_exceeced`: "timing out command, waited %lus".
    // scsi_error.c's abort path, in its own words only (a vendor or model string such as
    // "Abort Co" in the probe line must not fail a device): `scsi_abort_command` "abort
    // scheduled", `scmd_eh_abort_handler` "aborting command" and "cmd abort failed|timed out",
    // `scsi_eh_abort_cmds` "aborting cmd".
    if body.contains("FAILED Result: ")
        || body.contains("failed: Result: ")
        || body.starts_with("timing out command")
        || scsi_abort(body)
    {
        return ev(ScsiError, Fatal);
    }
    // drivers/scsi/scsi_error.c `scsi_report_sense`: unit attention ASC 0x29, "Power-on or
    // device reset occurred". Normal while sd probes a new device (the fixtures show it);
    // during a test it means the device reset itself (a brown-out, or a reset the host did).
    if body.starts_with("Power-on or device reset occurred") {
        return ev(ScsiError, Fatal);
    }
    // drivers/scsi/scsi_logging.c `scsi_print_sense_hdr`: "Sense Key : %s [%s]%s" then
    // "Add. Sense: %s"; `scsi_print_command`: "CDB: %s". sd completes RECOVERED ERROR as
    // success but still prints it (scsi_lib.c `scsi_io_completion_nz_result`): not fatal.
    if let Some(rest) = body.strip_prefix("Sense Key : ") {
        let benign = rest.starts_with("Recovered Error") || rest.starts_with("No Sense");
        return ev(ScsiError, if benign { Info } else { Fatal });
    }
    if body.starts_with("Add. Sense: ") || body.starts_with("CDB: ") {
        return ev(ScsiError, Info);
    }
    None
}

/// The SCSI error handler's abort lines (after the `tag#N` prefix when there is one).
fn scsi_abort(body: &str) -> bool {
    let b = match body.strip_prefix("tag#") {
        Some(rest) => rest.split_once(' ').map_or("", |(_, r)| r),
        None => body,
    };
    b.starts_with("abort scheduled")
        || b.starts_with("aborting command")
        || b.starts_with("cmd abort ")
        || b.contains("aborting cmd")
}

#[cfg(test)]
mod tests {
    use super::super::tests::check;
    use super::super::{EventKind::*, Severity::*};

    /// Real kernel lines (each rule's format string is cited at the rule) and lines that
    /// must not count.
    #[test]
    fn scsi_lines() {
        check(&[
            // A vendor string with "Abort" in the probe line is no abort (it failed good
            // devices once); the error handler's own abort lines are.
            (
                "scsi 0:0:0:0: Direct-Access     Abort Co USB Flash Disk  1.00 PQ: 0 ANSI: 4",
                None,
            ),
            (
                "sd 0:0:0:0: [sda] Attached SCSI removable disk (Abort-Safe series)",
                None,
            ),
            (
                "sd 0:0:0:0: [sda] tag#3 abort scheduled",
                Some((ScsiError, Fatal, &["scsi:0:0:0:0", "disk:sda"])),
            ),
            (
                "sd 0:0:0:0: [sda] tag#3 aborting command",
                Some((ScsiError, Fatal, &["scsi:0:0:0:0", "disk:sda"])),
            ),
            (
                "sd 0:0:0:0: [sda] tag#3 cmd abort failed",
                Some((ScsiError, Fatal, &["scsi:0:0:0:0", "disk:sda"])),
            ),
            // drivers/scsi/scsi_logging.c `scsi_print_result`, `scsi_print_sense_hdr`,
            // `scsi_print_command`.
            (
                "sd 0:0:0:0: [sda] tag#0 FAILED Result: hostbyte=DID_TIME_OUT driverbyte=DRIVER_OK cmd_age=30s",
                Some((ScsiError, Fatal, &["scsi:0:0:0:0", "disk:sda"])),
            ),
            (
                "sd 1:0:0:0: [sdb] tag#0 FAILED Result: hostbyte=DID_OK driverbyte=DRIVER_SENSE",
                Some((ScsiError, Fatal, &["scsi:1:0:0:0", "disk:sdb"])),
            ),
            (
                "sd 0:0:0:0: [sda] tag#0 Sense Key : Medium Error [current] ",
                Some((ScsiError, Fatal, &["scsi:0:0:0:0", "disk:sda"])),
            ),
            (
                "sd 0:0:0:0: [sda] tag#0 Sense Key : Recovered Error [current] ",
                Some((ScsiError, Info, &["scsi:0:0:0:0", "disk:sda"])),
            ),
            (
                "sd 0:0:0:0: [sda] tag#0 Add. Sense: Unrecovered read error",
                Some((ScsiError, Info, &["scsi:0:0:0:0", "disk:sda"])),
            ),
            (
                "sd 0:0:0:0: [sda] tag#0 CDB: Read(10) 28 00 00 00 08 00 00 00 08 00",
                Some((ScsiError, Info, &["scsi:0:0:0:0", "disk:sda"])),
            ),
            // drivers/scsi/sd.c `sd_print_result` after a failed SYNCHRONIZE CACHE.
            (
                "sd 0:0:0:0: [sda] Synchronize Cache(10) failed: Result: hostbyte=DID_NO_CONNECT driverbyte=DRIVER_OK",
                Some((ScsiError, Fatal, &["scsi:0:0:0:0", "disk:sda"])),
            ),
            // drivers/scsi/scsi_lib.c `scsi_cmd_runtime_exceeced`.
            (
                "sd 0:0:0:0: [sda] tag#3 timing out command, waited 180s",
                Some((ScsiError, Fatal, &["scsi:0:0:0:0", "disk:sda"])),
            ),
            // drivers/scsi/scsi_lib.c, scsi_error.c, sd.c: the device goes offline.
            (
                "sd 0:0:0:0: rejecting I/O to offline device",
                Some((DeviceOffline, Fatal, &["scsi:0:0:0:0"])),
            ),
            (
                "sd 0:0:0:0: Device offlined - not ready after error recovery",
                Some((DeviceOffline, Fatal, &["scsi:0:0:0:0"])),
            ),
            (
                "sd 0:0:0:0: [sda] Medium access timeout failure. Offlining disk!",
                Some((DeviceOffline, Fatal, &["scsi:0:0:0:0", "disk:sda"])),
            ),
        ]);
    }
}
