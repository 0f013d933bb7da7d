//! Writes the JSON Schemas of what this build writes, derived from its types, into a
//! directory (scripts/gen-schema gives it docs/): `cargo run --features schema --example
//! gen-schema -- DIR`.

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("docs"));
    for (name, text) in usbperf::report::json_schema::files() {
        let path = dir.join(name);
        std::fs::write(&path, text)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
