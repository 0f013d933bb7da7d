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
    s.push_str(&"[".repeat(depth));
    s.push_str(&"]".repeat(depth));
    s.push('\n');
    s
}

/// `json` (a JSON report) with `"ignored"` holding an array `depth` levels deep, first.
pub fn deep_json(json: &str, depth: usize) -> String {
    let open = json.find('{').expect("a JSON object");
    format!(
        "{{\"ignored\": {}{},{}",
        "[".repeat(depth),
        "]".repeat(depth),
        &json[open + 1..]
    )
}
