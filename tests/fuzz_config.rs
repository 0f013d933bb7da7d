//! A bounded fuzz of the configuration path: mutated configs, seeded from the shipped profiles
//! and the config reference's examples, through the parser and the resolver. No input may panic, and
//! every config that is accepted must resolve into tests the engine accepts too (a config
//! mistake is a config error, never a failed device). The quick variant runs in every
//! `cargo test`; `fuzz_config_long` (ignored) runs for `USBPERF_FUZZ_SECS` (default 60) and
//! prints `fuzz config: N inputs, 0 panics`.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use usbperf::config::{self, BUILTIN_PROFILES};
use usbperf::engine::EngineRequest;
use usbperf::workload::check_params;

use common::Rng;

/// The seeds: every shipped profile and every configuration example of docs/config.md.
fn seeds() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v: Vec<String> = BUILTIN_PROFILES
        .iter()
        .map(|(_, t)| t.to_string())
        .collect();
    for e in std::fs::read_dir(root.join("profiles/boards")).unwrap() {
        v.push(std::fs::read_to_string(e.unwrap().path()).unwrap());
    }
    // Every configuration example of the config reference.
    let page = std::fs::read_to_string(root.join("docs/config.md")).unwrap();
    let mut rest = page.as_str();
    let open = "```yaml usbperf-config\n";
    let before = v.len();
    while let Some(i) = rest.find(open) {
        let body = &rest[i + open.len()..];
        let end = body.find("```").expect("a closed block");
        v.push(body[..end].to_string());
        rest = &body[end..];
    }
    assert!(
        v.len() > before,
        "docs/config.md has configuration examples"
    );
    assert!(v.len() >= 5, "seeds: {}", v.len());
    v
}

const VALUES: &[&str] = &[
    "0",
    "-1",
    "3",
    "1",
    "4096",
    "4097",
    "2000",
    "1e308",
    ".nan",
    "-.inf",
    "999P",
    "16E",
    "17E",
    "0s",
    "0ms",
    "1G",
    "64M",
    "''",
    "[]",
    "{}",
    "~",
    "true",
    "usb:garbage",
    "usb:1-1",
    "\"a\\u0000b\"",
    "18446744073709551616",
    "4k",
    "512",
    "511",
];

const KEYS: &[&str] = &[
    "bs",
    "qd",
    "jobs",
    "size",
    "runtime",
    "read_percent",
    "sample_interval",
    "headroom_percent",
    "wait_devices",
    "tests",
    "devices",
    "select",
    "target",
    "profile",
    "port",
    "cache",
];

/// One mutation of `text`.
fn mutate(rng: &mut Rng, text: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.is_empty() {
        lines.push(String::new());
    }
    let rounds = 1 + rng.below(3);
    for _ in 0..rounds {
        let i = rng.below(lines.len());
        match rng.below(9) {
            // A value replaced by an edge value.
            0 | 1 => {
                if let Some(colon) = lines[i].rfind(": ") {
                    let v = VALUES[rng.below(VALUES.len())];
                    let end = lines[i][colon..].find([',', '}']).map(|e| colon + e);
                    let tail = end.map(|e| lines[i][e..].to_string()).unwrap_or_default();
                    lines[i] = format!("{}: {v}{tail}", &lines[i][..colon]);
                }
            }
            // A key inserted into a flow mapping or as its own line.
            2 => {
                let k = KEYS[rng.below(KEYS.len())];
                let v = VALUES[rng.below(VALUES.len())];
                if let Some(p) = lines[i].find('{') {
                    lines[i].insert_str(p + 1, &format!("{k}: {v}, "));
                } else {
                    lines.insert(i, format!("{k}: {v}"));
                }
            }
            3 => {
                lines.remove(i);
            }
            4 => {
                let l = lines[i].clone();
                lines.insert(i, l);
            }
            // Indentation broken.
            5 => lines[i] = format!("{}{}", " ".repeat(rng.below(5)), lines[i].trim_start()),
            // A byte flipped.
            6 => {
                let mut b = lines[i].clone().into_bytes();
                if !b.is_empty() {
                    let j = rng.below(b.len());
                    b[j] = b" :{}[],-#'\"\tax09"[rng.below(16)];
                }
                lines[i] = String::from_utf8_lossy(&b).into_owned();
            }
            // Cut short.
            7 => {
                let cut = rng.below(lines[i].len() + 1);
                let mut s = lines[i].clone();
                while !s.is_char_boundary(cut.min(s.len())) {
                    s.pop();
                }
                s.truncate(cut.min(s.len()));
                lines[i] = s;
                lines.truncate(i + 1);
            }
            // Lines of two seeds spliced.
            _ => {
                let j = rng.below(lines.len());
                lines.swap(i, j);
            }
        }
        if lines.is_empty() {
            lines.push(String::new());
        }
    }
    lines.join("\n") + "\n"
}

#[derive(Default)]
struct Count {
    inputs: u64,
    accepted: u64,
    panics: u64,
}

/// Feeds one input through parse and resolve; an accepted config's tests must all pass the
/// engine's rules. Returns whether it was accepted; panics propagate to the caller.
fn check_one(text: &str) -> bool {
    let Ok(cf) = config::parse(text, "fuzz.yaml") else {
        return false;
    };
    // The layering a file without `profile:` gets, without touching the file system.
    let mut layers = config::load_profile("quick", &[], &mut Vec::new()).unwrap();
    layers.push(("fuzz.yaml".into(), cf));
    let c = config::resolve(layers);
    for t in &c.tests {
        let p = t.params(PathBuf::from("/dev/null"), EngineRequest::Auto);
        if let Err(e) = check_params(&p) {
            panic!("accepted by the config, refused by the engine: {e}\n{text}");
        }
    }
    // What the report records must read back.
    let y = serde_norway::to_string(&c).unwrap();
    let back: config::Config = serde_norway::from_str(&y)
        .unwrap_or_else(|e| panic!("resolved config does not read back: {e}\n{y}"));
    assert_eq!(back.tests, c.tests);
    true
}

fn fuzz(seed: u64, max_inputs: u64, deadline: Option<Instant>) -> Count {
    let seeds = seeds();
    let mut rng = Rng(seed | 1);
    let mut c = Count::default();
    // Quiet the default hook: a caught panic is counted and its input printed once.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    while c.inputs < max_inputs && deadline.map_or(true, |d| Instant::now() < d) {
        let base = &seeds[rng.below(seeds.len())];
        let text = mutate(&mut rng, base);
        c.inputs += 1;
        match std::panic::catch_unwind(|| check_one(&text)) {
            Ok(true) => c.accepted += 1,
            Ok(false) => {}
            Err(p) => {
                c.panics += 1;
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                eprintln!("fuzz config: panic on input:\n{text}\n{msg}");
            }
        }
    }
    std::panic::set_hook(hook);
    c
}

#[test]
fn fuzz_config_parser_and_resolver_do_not_panic() {
    let c = fuzz(0x5EED, 3000, None);
    assert_eq!(c.panics, 0, "{} of {} inputs panicked", c.panics, c.inputs);
    // The mutations must exercise both sides: some inputs still parse, most do not.
    assert!(
        c.accepted > 50 && c.accepted < c.inputs,
        "accepted {} of {}",
        c.accepted,
        c.inputs
    );
}

/// Inputs a long fuzz once found: each must be read, refused or resolved without a panic.
#[test]
fn inputs_the_long_fuzz_found_do_not_panic() {
    for text in [
        // A bare number of seconds past the longest duration text accepts: it was read and
        // then written back as text that no longer read.
        "profile: quick\nwait_devices: 18446744073709\n",
        "profile: quick\nwait_devices: 1844674407\n",
    ] {
        let r = std::panic::catch_unwind(|| check_one(text));
        assert!(r.is_ok(), "panicked on:\n{text}");
    }
}

#[test]
#[ignore = "long fuzz: scripts/test.sh runs it with USBPERF_FUZZ_SECS"]
fn fuzz_config_long() {
    let secs = common::fuzz_secs();
    let seed = common::fuzz_seed();
    let start = Instant::now();
    let c = fuzz(seed, u64::MAX, Some(start + Duration::from_secs(secs)));
    println!(
        "fuzz config: {} inputs, {} panics ({:.0} s, seed {seed}; {} accepted)",
        c.inputs,
        c.panics,
        start.elapsed().as_secs_f64(),
        c.accepted
    );
    assert_eq!(c.panics, 0);
}
