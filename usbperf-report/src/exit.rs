//! Owns the process exit codes: one enum, documented in README.md ("Exit codes") and each
//! subcommand's `--help`.

/// What an error means for the exit code, said by the error itself: each library error type
/// decides, variant by variant, whether the user fixes it by changing the command line or a
/// config file ([`Exit::Usage`]) or the tool could not do its job ([`Exit::Error`]). The
/// command line reads the first such error off an error's chain; a table test per type pins
/// each variant's code.
pub trait Classify {
    fn exit(&self) -> Exit;
}

/// What the process tells its caller (a factory script, systemd) through its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// Everything ran and every verdict passed.
    Pass = 0,
    /// Everything ran, and at least one verdict failed (e.g. a USB link below its expected speed).
    VerdictFailed = 1,
    /// The command line or a configuration file is wrong: nothing was tested.
    Usage = 2,
    /// The run was interrupted (SIGINT/SIGTERM) or could not finish: results are incomplete.
    Incomplete = 3,
    /// The tool could not do its job (unreadable sysfs, I/O error outside a test, internal bug).
    Error = 4,
}
