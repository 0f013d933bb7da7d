//! `usbperf-matrix`: parse flags, run the subcommand, map the outcome to a documented exit code.

use std::process::ExitCode;

fn main() -> ExitCode {
    let code = usbperf::cli::main();
    ExitCode::from(code as u8)
}
