//! Writes a synthetic fleet of usbperf reports through the report's own types, judged by the
//! product's verdict (tests/common/fleet_gen.rs says what it plants). For the benchmarks:
//! `cargo run --release --example fleet-gen -- --units 1000 --out DIR [--schema 2] ...`.

use clap::Parser;

#[path = "../tests/common/fleet_gen.rs"]
mod fleet_gen;

fn main() -> std::process::ExitCode {
    let o = fleet_gen::Options::parse();
    match fleet_gen::generate(&o) {
        Ok(f) => {
            eprintln!(
                "fleet-gen: {} reports in {} ({} slow-port units, {} seq-write outliers)",
                f.files.len(),
                o.out.display(),
                f.slow_ports,
                f.outliers
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("fleet-gen: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
