//! Every subcommand's console text fits a board's 80-column serial console in the C locale:
//! no line longer than 80 characters and no character outside ASCII, on standard output and
//! standard error alike, for the common outcomes and the common mistakes. Data formats (JSON,
//! YAML, CSV) and the station's one-line result are left out: programs read them.

mod common;

use std::path::Path;
use std::process::Command;

use common::{bin, fixtures, require_tool, Loop, RunDir};

/// One invocation's console text (standard output, then standard error) and exit code, run
/// as on a serial console: 80 columns, the C locale.
fn console(umockdev: Option<&Path>, args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = match umockdev {
        Some(f) => {
            let mut c = Command::new("umockdev-run");
            c.arg("--device").arg(f).arg("--").arg(bin());
            c
        }
        None => Command::new(bin()),
    };
    let o = cmd
        .args(args)
        .env("COLUMNS", "80")
        .env("LANG", "C")
        .env("LC_ALL", "C")
        .env_remove("LC_CTYPE")
        .output()
        .unwrap();
    let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
    // umockdev-run's own warnings about device links it cannot make are not the tool's.
    for l in String::from_utf8_lossy(&o.stderr).lines() {
        if !l.contains("umockdev") {
            text.push_str(l);
            text.push('\n');
        }
    }
    (o.status.code(), text)
}

/// The lines of `text` an 80-column C-locale console cannot show as they are.
fn misfits(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with("USBPERF-RESULT "))
        .filter(|l| l.chars().count() > 80 || !l.is_ascii())
        .map(|l| format!("[{} columns] {l}", l.chars().count()))
        .collect()
}

/// A directory under /var/tmp (a real filesystem, unlike a tmpfs /tmp), removed on drop.
struct ShortDir(std::path::PathBuf);

impl ShortDir {
    fn new() -> ShortDir {
        ShortDir(nix::unistd::mkdtemp("/var/tmp/c80-XXXXXX").expect("mkdtemp in /var/tmp"))
    }
    fn path(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for ShortDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Seen {
    bad: Vec<String>,
    runs: usize,
}

impl Seen {
    fn check(&mut self, what: &str, (code, text): (Option<i32>, String), codes: &[i32]) {
        self.runs += 1;
        assert!(
            code.is_some_and(|c| codes.contains(&c)),
            "{what}: exit {code:?}, expected one of {codes:?}\n{text}"
        );
        assert!(!text.trim().is_empty(), "{what} printed nothing");
        for l in misfits(&text) {
            self.bad.push(format!("{what}: {l}"));
        }
    }
}

#[test]
fn every_subcommand_fits_80_columns_in_the_c_locale() {
    needs_root!("loop devices");
    require_tool("umockdev-run", "umockdev");
    let mut seen = Seen {
        bad: Vec::new(),
        runs: 0,
    };
    // Short paths on a real filesystem: a path is one word no console can break, and a
    // deep checkout's target directory would make a longer one than the console.
    let scratch = ShortDir::new();

    // Help, and the mistakes clap refuses.
    for sub in [
        "",
        "list",
        "tree",
        "run",
        "bench",
        "show",
        "fleet",
        "upload",
        "calibrate",
        "power-cut",
        "power-cut write",
        "power-cut verify",
    ] {
        let mut args: Vec<&str> = sub.split_whitespace().collect();
        args.push("--help");
        seen.check(&format!("{sub} --help"), console(None, &args), &[0]);
    }
    seen.check("no such subcommand", console(None, &["bogus"]), &[2]);
    seen.check(
        "bench --size 7Gb",
        console(
            None,
            &["bench", "--target", "/nonexistent/x", "--size", "7Gb"],
        ),
        &[2],
    );
    seen.check(
        "bench with a huge size",
        console(
            None,
            &[
                "bench",
                "--target",
                "/nonexistent/x",
                "--size",
                "99999999999999999999999",
            ],
        ),
        &[2],
    );

    // The inventory and the USB tree of every recorded machine and guest.
    for dir in ["umockdev", "qemu"] {
        for e in std::fs::read_dir(fixtures().join(dir)).unwrap() {
            let f = e.unwrap().path();
            if f.extension().and_then(|x| x.to_str()) != Some("umockdev") {
                continue;
            }
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            seen.check(
                &format!("list on {name}"),
                console(Some(&f), &["list"]),
                &[0],
            );
            seen.check(
                &format!("tree on {name}"),
                console(Some(&f), &["tree"]),
                &[0],
            );
        }
    }
    seen.check(
        "list with a failed link check",
        console(None, &["list", "--expect", "usb:9-9=480"]),
        &[1],
    );

    // show and fleet on a report whose label is outside ASCII and long.
    let reports = scratch.path("reports");
    std::fs::create_dir_all(&reports).unwrap();
    let report = std::fs::read_to_string(fixtures().join("reports/v1-4124e44.yaml")).unwrap();
    assert!(report.contains("fixture stick"));
    let report = report.replace(
        "fixture stick",
        "fixture stick \u{b5}SD card reader on the carrier board's lower USB port",
    );
    let file = reports.join("usbperf-c80.yaml");
    std::fs::write(&file, report).unwrap();
    let file = file.to_str().unwrap();
    seen.check("show", console(None, &["show", file]), &[0]);
    seen.check(
        "show, a missing file",
        console(None, &["show", "/nonexistent.yaml"]),
        &[4],
    );
    let junk = scratch.path("junk.yaml");
    std::fs::write(&junk, b"\x00\x01binary junk\xff").unwrap();
    seen.check(
        "show, binary junk",
        console(None, &["show", junk.to_str().unwrap()]),
        &[2],
    );
    seen.check(
        "fleet",
        console(None, &["fleet", reports.to_str().unwrap()]),
        &[0],
    );
    seen.check(
        "fleet, a missing directory",
        console(None, &["fleet", "/nonexistent"]),
        &[2, 4],
    );

    // bench and the power-cut test on a file.
    let target = scratch.path("bench.dat");
    let target = target.to_str().unwrap();
    seen.check(
        "bench",
        console(
            None,
            &[
                "bench",
                "--target",
                target,
                "--workload",
                "rand-read",
                "--size",
                "4M",
                "--runtime",
                "1s",
            ],
        ),
        &[0],
    );
    let pc = scratch.path("power-cut.dat");
    let state = scratch.path("power-cut.state");
    let (pc, state) = (pc.to_str().unwrap(), state.to_str().unwrap());
    seen.check(
        "power-cut write",
        console(
            None,
            &[
                "power-cut",
                "write",
                "--target",
                pc,
                "--state",
                state,
                "--size",
                "4M",
            ],
        ),
        &[0],
    );
    seen.check(
        "power-cut verify",
        console(None, &["power-cut", "verify", "--state", state]),
        &[0],
    );
    let bad_state = scratch.path("bad.state");
    std::fs::write(
        &bad_state,
        "{\"format\": \"usbperf-power-cut\", \"version\": 1, \"run_id\": 99999999999999999999999}",
    )
    .unwrap();
    seen.check(
        "power-cut verify, a bad state",
        console(
            None,
            &[
                "power-cut",
                "verify",
                "--state",
                bad_state.to_str().unwrap(),
            ],
        ),
        &[2],
    );

    // upload and run refusals.
    seen.check(
        "upload without its token file",
        console(
            None,
            &[
                "upload",
                "--url",
                "http://127.0.0.1:9/",
                "--token-file",
                "/nonexistent/token",
                "--spool",
                scratch.path("spool").to_str().unwrap(),
                file,
            ],
        ),
        &[2, 4],
    );
    seen.check(
        "run with a missing config",
        console(None, &["run", "--config", "/nonexistent/usbperf.yaml"]),
        &[2],
    );

    // A factory run on a loop device, with failed thresholds whose reasons are long.
    let lo = Loop::new(64 << 20);
    let rd = RunDir::new();
    let cfg = rd.config(&format!(
        "devices:\n  - {{select: {{name: {}}}, target: raw, label: \"carrier board \u{b5}SD \
         slot, lower USB port beside the Ethernet jack\"}}\n\
         tests:\n  - {{workload: seq-read, bs: 1M, size: 8M, runtime: 1s}}\n\
         thresholds:\n  - {{select: {{class: loop}}, workload: seq-read, \
         min_mib_per_s: 1000000}}\n",
        lo.name()
    ));
    let short = std::path::PathBuf::from(format!("/tmp/c80-{}", std::process::id()));
    let args = rd.args_in(&short, Some(&cfg));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    seen.check("run on a loop device", console(None, &args), &[1]);
    let _ = std::fs::remove_dir_all(&short);

    assert!(seen.runs > 40, "only {} invocations", seen.runs);
    assert!(
        seen.bad.is_empty(),
        "{} lines do not fit an 80-column C-locale console:\n{}",
        seen.bad.len(),
        seen.bad.join("\n")
    );
}
