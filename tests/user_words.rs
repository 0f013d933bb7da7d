//! What an operator reads when something is wrong: bad configs, bad reports, bad URLs and bad
//! flags fed to every subcommand of the built binary, and what it prints must be in the
//! user's terms: no Rust type names (`expected f64`, `struct ConfigFile`, `Some(`), no Rust
//! range syntax (`1..=4096`), no location said twice (`:4:3:` and `line 4 column 3`). Then the
//! wording of run's summary, fleet's counts, list's backend and the help pages.

mod common;

use std::path::Path;
use std::process::Output;

use common::*;

/// Rust's words that must never reach the user.
const RUST_WORDS: &[&str] = &[
    "expected f64",
    "expected f32",
    "expected u8",
    "expected u16",
    "expected u32",
    "expected u64",
    "expected usize",
    "expected i64",
    "struct ",
    "Some(",
    "None)",
    "Err(",
    "Ok(",
    "Os {",
    "..=",
    "RelativeUrlWithoutBase",
    " u64",
    "u128",
    "expected ident",
    "os error",
    "did not contain valid UTF-8",
];

/// A parser's `column N`: the tool says `file:line:column:` or `line L, character C`.
fn parser_column(text: &str) -> Option<String> {
    text.match_indices("column ").find_map(|(i, _)| {
        let after = &text[i + 7..];
        after
            .starts_with(|c: char| c.is_ascii_digit())
            .then(|| text[i..].chars().take(12).collect())
    })
}

/// A clause said twice in one message (`... (os error 1); check ...: Operation not permitted
/// (os error 1)`): the same run of at least 24 characters between `: ` or `; ` twice.
fn repeated_clause(text: &str) -> Option<String> {
    // A wrapped line's continuations (indented four) join it again.
    let joined = text.replace("\n    ", " ");
    for line in joined.lines() {
        let clauses: Vec<&str> = line
            .split([':', ';'])
            .map(str::trim)
            .filter(|c| c.len() >= 24)
            .collect();
        for (i, c) in clauses.iter().enumerate() {
            if clauses[i + 1..].contains(c) {
                return Some(c.to_string());
            }
        }
    }
    None
}

fn printed(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The `line L column C` in `text` whose `:L:C` is also there: the same place said twice.
fn doubled_location(text: &str) -> Option<String> {
    let mut rest = text;
    while let Some(i) = rest.find("line ") {
        rest = &rest[i + 5..];
        let line: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Some(after) = rest[line.len()..].strip_prefix(" column ") else {
            continue;
        };
        let column: String = after.chars().take_while(char::is_ascii_digit).collect();
        if !line.is_empty() && !column.is_empty() && text.contains(&format!(":{line}:{column}")) {
            return Some(format!(":{line}:{column} and line {line} column {column}"));
        }
    }
    None
}

/// A report file as `run` writes it (the repository's fixture) with `from` replaced by `to`
/// once.
fn report_with(dir: &Path, name: &str, from: &str, to: &str) {
    let fixture = fixtures().join("reports/v1-4124e44.yaml");
    let text = std::fs::read_to_string(fixture).unwrap();
    assert!(text.contains(from), "the fixture has {from:?}");
    std::fs::write(dir.join(name), text.replacen(from, to, 1)).unwrap();
}

#[test]
fn every_subcommand_says_what_is_wrong_in_the_users_words() {
    let tmp = TempDir::new("words");
    let d = tmp.path();
    let write = |name: &str, text: &str| std::fs::write(d.join(name), text).unwrap();

    write(
        "fast.yaml",
        "thresholds:\n  - select: {class: usb}\n    min_mib_per_s: fast\n",
    );
    write("list.yaml", "- tests\n- devices\n");
    write(
        "bs3.yaml",
        "report_dir: /tmp/r\ntests:\n  - workload: seq-read\n  - workload: seq-write\n    bs: 3\n",
    );
    write("qd.yaml", "tests:\n  - workload: seq-read\n    qd: 5000\n");
    write(
        "jobs.yaml",
        "tests:\n  - workload: seq-read\n    jobs: true\n",
    );
    write("head.yaml", "headroom_percent: 150\n");
    write(
        "gbit.yaml",
        "tests:\n  - workload: seq-read\n    size: 7Gb\n",
    );
    write("empty.yaml", "report_dir: /tmp/r\ntests: []\n");
    write(
        "soon.yaml",
        "tests:\n  - workload: seq-read\n    runtime: soon\n",
    );
    write("dir.yaml", "report_dir: [1, 2]\n");
    write("syntax.yaml", "headroom_percent: 10\nreport_dir: a: b\n");
    write("sched.yaml", "schedule: parallel\n");
    write(
        "url.yaml",
        "upload:\n  url: 127.0.0.1:8080\n  token_file: /etc/usbperf/token\n",
    );
    write(
        "huge.state",
        "{\"format\": \"usbperf-power-cut\", \"version\": 1, \"run_id\": 99999999999999999999999}",
    );
    write("yaml.state", "format: usbperf-power-cut\nversion: 1\n");
    std::fs::write(d.join("junk.yaml"), b"\x00\x01junk\xff").unwrap();
    write("token", "secret\n");
    // Only its owner may read a token: `upload` refuses one others may read before it looks
    // at the reports.
    std::fs::set_permissions(
        d.join("token"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    std::fs::create_dir(d.join("spool")).unwrap();
    std::fs::create_dir(d.join("fleet")).unwrap();
    let fleet = d.join("fleet");
    // One readable report beside the damaged ones, so that fleet renders its page.
    report_with(&fleet, "good.yaml", "schema_version", "schema_version");
    report_with(
        &fleet,
        "fast.yaml",
        "min_mib_per_s: 1000000.0",
        "min_mib_per_s: fast",
    );
    report_with(
        &fleet,
        "result.yaml",
        "mib_per_s: 1118.8819013160148",
        "mib_per_s: [1]",
    );
    report_with(
        d,
        "fast-result.yaml",
        "mib_per_s: 1118.8819013160148",
        "mib_per_s: fast",
    );
    write(
        "fast-result.json",
        &serde_json::to_string(&{
            let text = std::fs::read_to_string(d.join("fast-result.yaml")).unwrap();
            let v: serde_json::Value =
                serde_norway::from_str(&text.replacen("mib_per_s: fast", "mib_per_s: 1.5", 1))
                    .unwrap();
            let mut v = v;
            v["devices"][0]["cells"][0]["result"]["mib_per_s"] = "fast".into();
            v
        })
        .unwrap(),
    );
    write("list-report.yaml", "- a\n- b\n");
    let sys = d.join("sys");
    std::fs::create_dir(&sys).unwrap();

    let p = |name: &str| d.join(name).display().to_string();
    let token = p("token");
    let spool = p("spool");
    let fleet = fleet.display().to_string();
    let lock = p("lock");
    // (arguments, what the message must say: it proves the case was refused for its reason)
    let cases: Vec<(Vec<String>, &str)> = [
        // configs, read by run and upload
        (
            vec!["run", "--dry-run", "--config", &p("fast.yaml")],
            "min_mib_per_s: \"fast\" is not a number: give a number of MiB/s, such as 25",
        ),
        (
            vec!["upload", "--config", &p("fast.yaml")],
            "is not a number: give a number of MiB/s",
        ),
        (
            vec!["run", "--dry-run", "--config", &p("list.yaml")],
            "list.yaml:1:1: a list is not a config: give a mapping of keys",
        ),
        (
            vec!["run", "--dry-run", "--config", &p("bs3.yaml")],
            "bs 3: must be a multiple of 512",
        ),
        (
            vec!["run", "--dry-run", "--config", &p("qd.yaml")],
            "qd must be from 1 to 4096",
        ),
        (
            vec!["run", "--dry-run", "--config", &p("gbit.yaml")],
            "size \"7Gb\" reads as bits",
        ),
        (
            vec![
                "bench",
                "--target",
                &p("b.dat"),
                "--size",
                "99999999999999999999999",
            ],
            "is too large: the largest size is 16E",
        ),
        (
            vec!["power-cut", "verify", "--state", &p("huge.state")],
            "1e+23 is not a whole number",
        ),
        (
            vec!["power-cut", "verify", "--state", &p("yaml.state")],
            "line 1, character 2: not valid JSON",
        ),
        (vec!["show", &p("junk.yaml")], "a NUL byte at offset 0"),
        (
            vec!["list", "--expect", "usb:1-1=99999999999999999999"],
            "is not a speed in Mbit/s: give one from 1 to 100000",
        ),
        (
            vec!["run", "--dry-run", "--config", &p("jobs.yaml")],
            "tests[0].jobs: true is not a whole number from 1 to 1024",
        ),
        (
            vec!["run", "--dry-run", "--config", &p("head.yaml")],
            "must be from 0 to 99",
        ),
        (
            vec!["run", "--dry-run", "--config", &p("empty.yaml")],
            "empty.yaml:2:8: tests: the list is empty",
        ),
        (
            vec!["run", "--dry-run", "--config", &p("soon.yaml")],
            "duration \"soon\" is not understood",
        ),
        (
            vec!["run", "--dry-run", "--config", &p("dir.yaml")],
            "report_dir: a list is not a path: give a path such as",
        ),
        (
            vec!["run", "--dry-run", "--config", &p("syntax.yaml")],
            "syntax.yaml:2:",
        ),
        (
            vec!["run", "--dry-run", "--config", &p("sched.yaml")],
            "unknown variant `parallel`",
        ),
        (
            vec!["run", "--dry-run", "--config", &p("url.yaml")],
            "\"127.0.0.1:8080\" is not a collector's URL",
        ),
        (
            vec!["upload", "--config", &p("url.yaml")],
            "is not a collector's URL",
        ),
        // URLs
        (
            vec![
                "upload",
                "--url",
                "127.0.0.1:8080",
                "--token-file",
                &token,
                "--spool",
                &spool,
            ],
            "is not a collector's URL",
        ),
        (
            vec![
                "upload",
                "--url",
                "http://collector:port/x",
                "--token-file",
                &token,
                "--spool",
                &spool,
            ],
            "is not a collector's URL",
        ),
        (
            vec![
                "upload",
                "--url",
                "http:///api",
                "--token-file",
                &token,
                "--spool",
                &spool,
            ],
            "is not a collector's URL",
        ),
        // reports, read by show, fleet and upload
        (
            vec!["show", &p("fast-result.yaml")],
            "result.mib_per_s: \"fast\" is not a number: give a number of MiB/s, such as 25",
        ),
        (
            vec!["show", &p("fast-result.json")],
            "\"fast\" is not a number: give a number",
        ),
        (vec!["show", &p("list-report.yaml")], "not a usbperf report"),
        (vec!["show", &p("missing.yaml")], "missing.yaml"),
        (
            vec!["fleet", &fleet],
            "min_mib_per_s: \"fast\" is not a number: give a number of MiB/s",
        ),
        (
            vec!["fleet", "--format", "html", &fleet],
            "min_mib_per_s: &quot;fast&quot; is not a number",
        ),
        (vec!["fleet", "--format", "json", &fleet], "is not a number"),
        (
            vec![
                "upload",
                &p("list-report.yaml"),
                "--url",
                "http://127.0.0.1:9/r",
                "--token-file",
                &token,
                "--spool",
                &spool,
                "--attempts",
                "1",
            ],
            "list-report.yaml",
        ),
        // flags
        (
            vec![
                "upload",
                "--attempts",
                "0",
                "--url",
                "http://c/",
                "--token-file",
                &token,
            ],
            "give a whole number from 1 to 100",
        ),
        (
            vec![
                "upload",
                "--timeout",
                "0",
                "--url",
                "http://c/",
                "--token-file",
                &token,
            ],
            "time out at once",
        ),
        (
            vec![
                "bench",
                "--target",
                &p("t.bin"),
                "--size",
                "1M",
                "--workload",
                "seq-read",
                "--qd",
                "5000",
            ],
            "give a whole number from 1 to 4096",
        ),
        (
            vec![
                "bench",
                "--target",
                &p("t.bin"),
                "--size",
                "1M",
                "--workload",
                "seq-read",
                "--jobs",
                "0",
            ],
            "give a whole number from 1 to 1024",
        ),
        (
            vec![
                "bench",
                "--target",
                &p("t.bin"),
                "--size",
                "1M",
                "--workload",
                "mixed",
                "--read-percent",
                "101",
            ],
            "give a whole number from 0 to 100",
        ),
        (
            vec![
                "bench",
                "--target",
                &p("t.bin"),
                "--size",
                "1M",
                "--workload",
                "seq-read",
                "--runtime",
                "soon",
            ],
            "duration \"soon\" is not understood",
        ),
        (
            vec![
                "bench",
                "--target",
                &p("t.bin"),
                "--size",
                "1M",
                "--workload",
                "seq-read",
                "--bs",
                "3",
            ],
            "--bs 3: must be a multiple of 512",
        ),
        (
            vec![
                "bench",
                "--target",
                &p("t.bin"),
                "--size",
                "lots",
                "--workload",
                "seq-read",
            ],
            "size \"lots\" is not understood",
        ),
        (
            vec![
                "run",
                "--dry-run",
                "--headroom-percent",
                "100",
                "--lock-file",
                &lock,
            ],
            "give a whole number from 0 to 99",
        ),
        (
            vec![
                "run",
                "--dry-run",
                "--wait-devices",
                "soon",
                "--lock-file",
                &lock,
            ],
            "duration \"soon\" is not understood",
        ),
        (vec!["list", "--backend", "dbus"], "possible values"),
        (
            vec!["list", "--sysfs-root", &p("nowhere")],
            "does not look like a sysfs tree",
        ),
        (
            vec!["tree", "--sysfs-root", &p("nowhere")],
            "does not look like a sysfs tree",
        ),
        (
            vec![
                "list",
                "--sysfs-root",
                &sys.display().to_string(),
                "--backend",
                "udev",
            ],
            "--backend udev reads the live /sys only",
        ),
        (
            vec!["fleet", "--threads", "many", &fleet],
            "invalid value 'many'",
        ),
        (vec!["fleet", "--since", "last week", &fleet], "last week"),
    ]
    .into_iter()
    .map(|(a, want)| (a.into_iter().map(String::from).collect(), want))
    .collect();

    let mut bad = Vec::new();
    for (args, want) in &cases {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run_bin(None, &a);
        let text = printed(&out);
        let mut why = Vec::new();
        if !text.contains(want) {
            why.push(format!("does not say {want:?}"));
        }
        for w in RUST_WORDS {
            if text.contains(w) {
                why.push(format!("says Rust's {w:?}"));
            }
        }
        if let Some(twice) = doubled_location(&text) {
            why.push(format!("gives the location twice ({twice})"));
        }
        if let Some(c) = parser_column(&text) {
            why.push(format!("says the parser's {c:?}"));
        }
        // A data format (HTML, JSON) lists several files' reasons on a line: words only.
        let data = args.iter().any(|a| a == "--format");
        if let Some(c) = repeated_clause(&text).filter(|_| !data) {
            why.push(format!("says {c:?} twice"));
        }
        if !why.is_empty() {
            bad.push(format!("{}: {}\n{text}", a.join(" "), why.join("; ")));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n\n"));
}

#[test]
fn a_duration_hint_is_given_once() {
    let tmp = TempDir::new("words-dur");
    let cfg = tmp.path().join("c.yaml");
    std::fs::write(&cfg, "wait_devices: soon\n").unwrap();
    let out = run_bin(
        None,
        &["run", "--dry-run", "--config", cfg.to_str().unwrap()],
    );
    let text = printed(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert_eq!(text.matches("500ms").count(), 1, "{text}");
}

#[test]
fn fleet_counts_agree_with_their_nouns() {
    let tmp = TempDir::new("words-fleet");
    report_with(tmp.path(), "r.yaml", "schema_version", "schema_version");
    let out = run_bin(None, &["fleet", tmp.path().to_str().unwrap()]);
    let text = printed(&out);
    assert!(
        text.contains("fleet: 1 report, 1 unit (") && text.contains(", 1 device test ("),
        "{text}"
    );
    assert!(
        !text.contains("1 units") && !text.contains("1 reports"),
        "{text}"
    );
}

#[test]
fn a_recorded_tree_is_walked_without_claiming_a_flag() {
    let tmp = TempDir::new("words-sysfs");
    let sys = tmp.path().join("sys");
    std::fs::create_dir_all(sys.join("class/block")).unwrap();
    std::fs::create_dir_all(sys.join("devices")).unwrap();
    let out = run_bin(
        None,
        &["list", "--sysfs-root", tmp.path().to_str().unwrap()],
    );
    let text = printed(&out);
    assert!(text.contains("backend sysfs (--sysfs-root"), "{text}");
    assert!(!text.contains("requested with --backend"), "{text}");
}

#[test]
fn the_help_says_where_tests_write_and_what_each_value_means() {
    let run = printed(&run_bin(None, &["run", "--help"]));
    assert!(
        run.contains("/var/lib/usbperf/scratch"),
        "run --help names the scratch directory: {run}"
    );
    let bench = printed(&run_bin(None, &["bench", "--help"]));
    for want in [
        "How the result is printed",
        "Aligned columns for a console",
        "How much of the region `verify` checks",
        "Write and read back every block of the region",
        "How the I/O is issued",
        "A pread/pwrite thread pool",
        "No I/O at all",
    ] {
        assert!(bench.contains(want), "bench --help says {want:?}: {bench}");
    }
}

/// A required device that is missing is said once in run's summary, by its selector as the
/// config writes it; the engine chosen as usual is no warning.
#[test]
fn a_missing_device_is_said_once_and_the_engine_is_no_warning() {
    needs_root!("loop devices and mounts");
    require_root("run takes the run lock and reads /dev/kmsg like the factory run");
    let rd = RunDir::new();
    let cfg = rd.config(
        "devices:\n  - select: {serial: NOSUCHSERIAL}\n    required: true\n    label: front USB\n",
    );
    // A console wide enough that no line of the summary is wrapped.
    let out = common::cmd()
        .args(rd.args(Some(&cfg)))
        .env("COLUMNS", "250")
        .output()
        .unwrap();
    let text = printed(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let summary: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("usbperf-matrix: 0 device(s)"))
        .filter(|l| l.contains("NOSUCHSERIAL"))
        .collect();
    assert_eq!(summary.len(), 1, "once in the summary: {text}");
    assert!(
        summary[0].contains(
            "devices[0] \"front USB\": required, not found (no disk with serial NOSUCHSERIAL)"
        ),
        "{text}"
    );
    assert!(!text.contains("{\""), "no JSON: {text}");
    let (_, rep) = rd.report();
    let warnings = rep["warnings"].to_string();
    assert!(!warnings.contains("engine: "), "{warnings}");
}
