//! Bodies built to cost a parser far more than their size, shared by tests/report_path.rs and
//! the benchmark tests/bench_hostile.rs: a small YAML document whose one anchored device is
//! repeated 10,000 times by aliases, and a document nested 100,000 levels deep under a key
//! the collector ignores. Everything else in them is a report the collector would store.
#![allow(dead_code)]

/// A schema-1 report as the unit writes it, up to (not including) its `devices:`.
pub fn head(report_id: &str) -> String {
    format!(
        "schema_version: 1\nreport_id: {report_id}\n\
         tool: {{name: usbperf-matrix, version: 0.1.0, features: []}}\n\
         started_at: 2026-11-30T10:23:45.912Z\nfinished_at: 2026-11-30T10:23:47.801Z\n\
         status: complete\nexit_code: 0\n\
         unit: {{hostname: vm, machine_id: 3d1219c7, model: Toradex Apalis, cpu_count: 2, \
         memory_bytes: 1}}\n\
         config: {{sources: ['builtin:quick']}}\ninventory_backend: sysfs\n"
    )
}

/// One device with `cells` cells, as a block mapping indented by two spaces (the lines
/// after a `key:` line).
pub fn device_body(cells: usize) -> String {
    let mut s = String::from(
        "  name: sda\n  disk: {name: sda, class: usb, vendor: Kingston, model: DataTraveler, \
         serial: ABC, usb: {port_path: 1-2}}\n  cells:\n",
    );
    for _ in 0..cells {
        s.push_str(
            "  - {workload: seq-write, status: passed, result: {mib_per_s: 14.5, iops: 3, all: {ios: 3, latency: {p99_ns: 647167}}}}\n",
        );
    }
    s.push_str("  verdict: {pass: true}\n");
    s
}

/// The alias body (~160 KB): `spare: &d` holds a device of 1,000 cells and
/// `devices: [*d, *d, …]` names it 10,000 times: ten million cells once expanded.
pub fn alias_bomb(report_id: &str) -> String {
    let mut s = head(report_id);
    s.push_str("spare: &d\n");
    s.push_str(&device_body(1000));
    s.push_str("devices: [");
    for i in 0..10_000 {
        s.push_str(if i == 0 { "*d" } else { ", *d" });
    }
    s.push_str("]\nverdict: {pass: true}\n");
    s
}

/// The same report without anchor or alias: the device written out once. The collector
/// stores it (one device, 1,000 metrics): only the aliases make [`alias_bomb`] hostile.
pub fn alias_free(report_id: &str) -> String {
    let mut s = head(report_id);
    s.push_str("devices:\n-\n");
    s.push_str(&device_body(1000));
    s.push_str("verdict: {pass: true}\n");
    s
}

/// A valid report (one device) with `ignored:` holding a flow sequence `depth` levels deep.
pub fn deep_yaml(report_id: &str, depth: usize) -> String {
    let mut s = head(report_id);
    s.push_str("devices:\n-\n");
    s.push_str(&device_body(2));
    s.push_str("verdict: {pass: true}\nignored: ");
    s.push_str(&broken("[", depth));
    s.push_str(&broken("]", depth));
    s.push('\n');
    s
}

/// `depth` copies of `bracket`, a line break and a space after every 10,000 (lines stay
/// under the decoder's line limit, so the nesting is what is refused).
fn broken(bracket: &str, depth: usize) -> String {
    let mut s = String::with_capacity(depth + depth / 5_000);
    for i in 0..depth {
        if i > 0 && i % 10_000 == 0 {
            s.push_str("\n ");
        }
        s.push_str(bracket);
    }
    s
}

/// `json` (a JSON report) with `"ignored"` holding an array `depth` levels deep, first.
pub fn deep_json(json: &str, depth: usize) -> String {
    let open = json.find('{').expect("a JSON object");
    format!(
        "{{\"ignored\": {}{},{}",
        broken("[", depth),
        broken("]", depth),
        &json[open + 1..]
    )
}

/// `yaml` with every LF replaced by `brk`: libyaml breaks lines at CR, NEL (U+0085), LS
/// (U+2028) and PS (U+2029) as well, so a reader that splits lines at LF alone sees one line.
pub fn with_breaks(yaml: &str, brk: &str) -> String {
    yaml.replace('\n', brk)
}

/// A one-device report whose verdict holds `n` reasons of one character (2 bytes each, a
/// line break after every 10,000).
pub fn many_reasons(report_id: &str, n: usize) -> String {
    let mut s = head(report_id);
    s.push_str("devices:\n-\n");
    s.push_str(&device_body(2));
    s.reserve(2 * n + 64);
    s.push_str("verdict: {pass: true, reasons: [");
    for i in 0..n {
        s.push_str(match i {
            0 => "r",
            i if i % 10_000 == 0 => ",\n r",
            _ => ",r",
        });
    }
    s.push_str("]}\n");
    s
}

/// A one-device report with `n` keys the collector does not know at its top.
pub fn unknown_keys(report_id: &str, n: usize) -> String {
    let mut s = head(report_id);
    s.push_str("devices:\n-\n");
    s.push_str(&device_body(2));
    s.push_str("verdict: {pass: true}\n");
    for i in 0..n {
        s.push_str(&format!("k{i:x}: 1\n"));
    }
    s
}

/// A report of `devices` devices of `cells` cells each, every cell as short as YAML allows.
pub fn wide(report_id: &str, devices: usize, cells: usize) -> String {
    let mut s = head(report_id);
    s.push_str("devices:\n");
    for _ in 0..devices {
        s.push_str("- name: sda\n  cells:\n");
        for _ in 0..cells {
            s.push_str("  - {workload: r}\n");
        }
    }
    s.push_str("verdict: {pass: true}\n");
    s
}

/// A report whose model is a name of `bytes` bytes on one line.
pub fn long_name(report_id: &str, bytes: usize) -> String {
    head(report_id).replace(
        "model: Toradex Apalis",
        &format!("model: {}", "x".repeat(bytes)),
    ) + "devices: []\nverdict: {pass: true}\n"
}

/// Every body built to cost a reader more than its bytes: (name, body, what the refusal
/// must say). Each is refused by a limit of the decoder's walk, before a value is built.
pub fn cases() -> Vec<(&'static str, String, &'static str)> {
    let bomb = alias_bomb("a11a5a11a5a11a50");
    vec![
        ("aliases, CR line breaks", with_breaks(&bomb, "\r"), "CR"),
        (
            "aliases, NEL line breaks",
            with_breaks(&bomb, "\u{85}"),
            "NEL",
        ),
        (
            "aliases, LS line breaks",
            with_breaks(&bomb, "\u{2028}"),
            "LS",
        ),
        ("aliases, LF line breaks", bomb, "anchor"),
        (
            "1,000,000 deep after a CR",
            format!("a: 1\r{}", deep_yaml("dee9dee9dee9dee9", 1_000_000)),
            "CR",
        ),
        (
            "1,000,000 deep",
            deep_yaml("dee9dee9dee9dee9", 1_000_000),
            "nests at most",
        ),
        (
            "2,000,000 reasons",
            many_reasons("4ea5044ea5044ea5", 2_000_000),
            "items in one list",
        ),
        (
            "700,000 unknown keys",
            unknown_keys("0e4e40e4e40e4e40", 700_000),
            "keys in one map",
        ),
        (
            "256 devices x 1,024 cells",
            wide("256d256d256d256d", 256, 1024),
            "values",
        ),
    ]
}
