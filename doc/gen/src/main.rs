//! Writes the man pages (`doc/man/`) and shell completions (`completions/`) of usbperf-matrix
//! from its clap definitions, or with `--check` compares them with the checked-in files and
//! fails on any difference (scripts/ci/check-yocto-layer.sh runs that: a flag changed without
//! regenerating is caught before an image ships a stale page).
//!
//!   cargo run --locked --manifest-path doc/gen/Cargo.toml            (rewrite)
//!   cargo run --locked --manifest-path doc/gen/Cargo.toml -- --check

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

const BIN: &str = "usbperf-matrix";

/// The top page's sections that clap has no field for: what the exit codes mean, the files
/// the tool reads and writes, where the full documentation is.
const EXTRA: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
everything ran and every verdict passed
.TP
\fB1\fR
everything ran and at least one verdict failed (e.g. a USB link below its expected speed)
.TP
\fB2\fR
usage or configuration error (bad flag, malformed \-\-expect, not a sysfs tree, a malformed config): nothing was tested
.TP
\fB3\fR
interrupted (SIGINT/SIGTERM) or the run could not finish: results are incomplete
.TP
\fB4\fR
the tool could not do its job (unreadable sysfs, an I/O or environment error outside a test, an internal error; run: the report reached no file)
.SH FILES
.TP
\fI/etc/usbperf/usbperf.yaml\fR
the configuration \fBrun\fR and \fBupload\fR read when no \-\-config is given
.TP
\fI/etc/usbperf/profiles/\fR, \fI/usr/share/usbperf/profiles/\fR
board profiles, found by name (\-\-profile, profile:)
.TP
\fI/var/lib/usbperf/reports/\fR
the reports of \fBrun\fR
.TP
\fI/var/lib/usbperf/scratch/\fR
test files on the filesystem of the disk that holds /
.SH "SEE ALSO"
The configuration reference, the operator's guide and the report format:
https://github.com/usbperf/meta-usbperf/tree/main/docs
"#;

/// One page, as clap_mangen's `Man::render` writes it, but with the SUBCOMMANDS section only
/// when there are subcommands and the EXTRA section only when there is after-help text
/// (clap_mangen writes each heading either way), and `tail` (roff) before VERSION. Returns the page's file name (`usbperf-matrix-list.1`) and its bytes.
fn page(cmd: clap::Command, tail: &str) -> std::io::Result<(String, Vec<u8>)> {
    let extra = cmd.get_after_help().is_some() || cmd.get_after_long_help().is_some();
    let subcommands = cmd.get_subcommands().any(|s| !s.is_hide_set());
    let man = clap_mangen::Man::new(cmd);
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    if subcommands {
        man.render_subcommands_section(&mut out)?;
    }
    if extra {
        man.render_extra_section(&mut out)?;
    }
    out.write_all(tail.as_bytes())?;
    man.render_version_section(&mut out)?;
    Ok((man.get_filename(), out))
}

/// A page for every visible subcommand, at any depth, as clap_mangen's `generate_to` walks
/// them (a built command names them `usbperf-matrix-list`, their synopsis `usbperf-matrix
/// list`).
fn subcommand_pages(
    cmd: &clap::Command,
    files: &mut BTreeMap<PathBuf, Vec<u8>>,
) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        subcommand_pages(sub, files)?;
        let (name, bytes) = page(sub.clone(), "")?;
        files.insert(Path::new("doc/man").join(name), bytes);
    }
    Ok(())
}

fn generated() -> std::io::Result<BTreeMap<PathBuf, Vec<u8>>> {
    let mut files = BTreeMap::new();
    let cmd = usbperf::cli::Cli::command();
    let mut built = cmd.clone().disable_help_subcommand(true);
    built.build();
    subcommand_pages(&built, &mut files)?;
    // The top page with the sections clap knows nothing of.
    let (name, bytes) = page(built, EXTRA)?;
    files.insert(Path::new("doc/man").join(name), bytes);

    for (shell, name) in [
        (Shell::Bash, format!("{BIN}.bash")),
        (Shell::Zsh, format!("_{BIN}")),
        (Shell::Fish, format!("{BIN}.fish")),
    ] {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut cmd.clone(), BIN, &mut buf);
        files.insert(Path::new("completions").join(name), buf);
    }
    Ok(files)
}

fn existing(root: &Path, dir: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
        .map(|rd| {
            rd.flatten()
                .map(|e| Path::new(dir).join(e.file_name()))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn main() -> ExitCode {
    let check = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--check") => true,
        Some(_) => {
            eprintln!("usage: usbperf-doc-gen [--check]");
            return ExitCode::from(2);
        }
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let files = match generated() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("usbperf-doc-gen: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut stale = Vec::new();
    for (rel, bytes) in &files {
        let path = root.join(rel);
        if std::fs::read(&path).ok().as_deref() == Some(&bytes[..]) {
            continue;
        }
        if check {
            stale.push(format!(
                "{} differs from what the clap definitions give",
                rel.display()
            ));
        } else if let Err(e) = std::fs::create_dir_all(path.parent().unwrap())
            .and_then(|()| std::fs::write(&path, bytes))
        {
            eprintln!("usbperf-doc-gen: {}: {e}", path.display());
            return ExitCode::FAILURE;
        } else {
            println!("wrote {}", rel.display());
        }
    }
    // A page of a subcommand that no longer exists must go too.
    for rel in existing(&root, "doc/man")
        .into_iter()
        .chain(existing(&root, "completions"))
    {
        if files.contains_key(&rel) {
            continue;
        }
        if check {
            stale.push(format!("{} is not generated any more", rel.display()));
        } else if let Err(e) = std::fs::remove_file(root.join(&rel)) {
            eprintln!("usbperf-doc-gen: {}: {e}", rel.display());
            return ExitCode::FAILURE;
        } else {
            println!("removed {}", rel.display());
        }
    }
    if !stale.is_empty() {
        for s in &stale {
            eprintln!("usbperf-doc-gen: {s}");
        }
        eprintln!(
            "usbperf-doc-gen: run `cargo run --locked --manifest-path doc/gen/Cargo.toml` and commit the result"
        );
        return ExitCode::FAILURE;
    }
    println!(
        "usbperf-doc-gen: {} file(s) {}",
        files.len(),
        if check { "up to date" } else { "in place" }
    );
    ExitCode::SUCCESS
}
