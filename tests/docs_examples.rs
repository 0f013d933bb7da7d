//! The documentation as the code reads it: every configuration example on the front page and
//! in `docs/*.md` (a fenced block whose info string is `yaml usbperf-config`, the convention
//! `docs/config.md` states at its top) parses with the crate's own parser and loads the way
//! `run` loads a file; every relative link of those pages points at a file (and a heading)
//! that exists; the front page links every page of `docs/` and keeps what Yocto's layer check
//! (`test_readme` of oe-core's checklayer) looks for.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use usbperf::config;
use usbperf::engine::EngineRequest;
use usbperf::workload::check_params;

/// The info string that marks a block as a usbperf configuration.
const CONFIG_INFO: &str = "yaml usbperf-config";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The front page and every Markdown page of `docs/`, as (path relative to the root, text).
fn pages() -> Vec<(String, String)> {
    let mut v = vec![("README.md".to_string(), read(&root().join("README.md")))];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    for p in docs {
        let rel = p.strip_prefix(root()).unwrap().display().to_string();
        v.push((rel, read(&p)));
    }
    v
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A fenced code block: its info string, the line its text starts on (1-based), its text.
struct Block {
    info: String,
    line: usize,
    text: String,
}

/// The fenced blocks of a Markdown text (backtick or tilde fences, indented or not), and the
/// lines outside them with their numbers.
fn split(text: &str) -> (Vec<Block>, Vec<(usize, String)>) {
    let mut blocks = Vec::new();
    let mut prose = Vec::new();
    // (fence character, fence length, block being filled)
    let mut open: Option<(char, usize, Block)> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let fence = |c: char| t.chars().take_while(|&x| x == c).count();
        match &mut open {
            None => {
                let (c, n) = if fence('`') >= 3 {
                    ('`', fence('`'))
                } else if fence('~') >= 3 {
                    ('~', fence('~'))
                } else {
                    prose.push((i + 1, line.to_string()));
                    continue;
                };
                let info = t[n..].trim().to_string();
                open = Some((
                    c,
                    n,
                    Block {
                        info,
                        line: i + 2,
                        text: String::new(),
                    },
                ));
            }
            Some((c, n, b)) => {
                let closing = fence(*c);
                if closing >= *n && t[closing..].trim().is_empty() {
                    blocks.push(std::mem::replace(
                        b,
                        Block {
                            info: String::new(),
                            line: 0,
                            text: String::new(),
                        },
                    ));
                    open = None;
                } else {
                    b.text.push_str(line);
                    b.text.push('\n');
                }
            }
        }
    }
    if let Some((_, _, b)) = open {
        panic!(
            "a fenced block opened at line {} is never closed",
            b.line - 1
        );
    }
    (blocks, prose)
}

/// Every configuration example, as (where, text).
fn config_examples() -> Vec<(String, String)> {
    let mut v = Vec::new();
    for (page, text) in pages() {
        for b in split(&text).0 {
            if b.info == CONFIG_INFO {
                v.push((format!("{page}, the example at line {}", b.line), b.text));
            } else if b.info.contains("usbperf-config") {
                panic!(
                    "{page}:{}: info string {:?}: write exactly {CONFIG_INFO:?}",
                    b.line - 1,
                    b.info
                );
            }
        }
    }
    v
}

/// Loads one example as `run --config FILE` would: the file, the profile it extends (`quick`
/// when it names none), the board profiles of the repository; then the checks the run's
/// tests get from the engine.
fn load_as_run(text: &str, dir: &Path) -> Result<config::Config, String> {
    // Errors read `example:LINE:COLUMN: ...`, the line counted within the block.
    config::parse(text, "example").map_err(|e| e.to_string())?;
    let file = dir.join("usbperf.yaml");
    std::fs::write(&file, text).unwrap();
    let mut search = config::profile_search(Some(&file));
    search.push(root().join("profiles/boards"));
    let layers = config::load_file(&file, None, &search).map_err(|e| e.to_string())?;
    let c = config::resolve(layers);
    if c.tests.is_empty() {
        return Err("resolves to a matrix with no test".into());
    }
    if c.devices.is_empty() {
        return Err("resolves to no device rule".into());
    }
    for t in &c.tests {
        let p = t.params(PathBuf::from("/dev/null"), EngineRequest::Auto);
        check_params(&p).map_err(|e| format!("{:?}: refused by the engine: {e}", t.workload))?;
    }
    // What the report records must read back.
    let y = serde_norway::to_string(&c).map_err(|e| e.to_string())?;
    let back: config::Config = serde_norway::from_str(&y)
        .map_err(|e| format!("resolved config does not read back: {e}"))?;
    if back.tests != c.tests || back.thresholds != c.thresholds {
        return Err("resolved config reads back different".into());
    }
    Ok(c)
}

struct TempDir(PathBuf);

impl TempDir {
    /// A directory of its own per test: the tests run in parallel threads of one process.
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "usbperf-docs-examples-{}-{tag}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn every_config_example_parses_and_loads_as_run_loads_it() {
    let examples = config_examples();
    assert!(
        !examples.is_empty(),
        "no block marked ```{CONFIG_INFO} in README.md or docs/*.md: the convention broke"
    );
    let on_config_page = examples
        .iter()
        .filter(|(w, _)| w.starts_with("docs/config.md,"))
        .count();
    assert!(
        on_config_page >= 5,
        "docs/config.md has {on_config_page} marked examples: the reference lost its examples"
    );
    let dir = TempDir::new("examples");
    let mut failures = Vec::new();
    for (where_, text) in &examples {
        if let Err(e) = load_as_run(text, &dir.0) {
            failures.push(format!("{where_}: {e}\n{text}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} configuration examples fail:\n\n{}",
        failures.len(),
        examples.len(),
        failures.join("\n")
    );
}

#[test]
fn a_broken_example_is_caught() {
    // The checker itself: a typo in a key and a value no engine runs must both fail.
    let dir = TempDir::new("broken");
    for bad in [
        "tests:\n  - {workload: seq-write, sizee: 1G}\n",
        "tests:\n  - {workload: rand-read, qd: 0}\n",
        "devices: []\n",
    ] {
        assert!(load_as_run(bad, &dir.0).is_err(), "accepted: {bad}");
    }
    let (blocks, _) = split("a\n```yaml usbperf-config\nprofile: quick\n```\nb\n");
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].info, CONFIG_INFO);
    assert_eq!(blocks[0].line, 3);
}

/// GitHub's anchor of a heading: lower case, letters, digits, `-` and `_` kept, spaces to
/// `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (a repeated heading gets `-1`, `-2`, as on GitHub).
fn anchors(text: &str) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut v = Vec::new();
    for (_, line) in split(text).1 {
        let t = line.trim_start();
        let hashes = t.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !t[hashes..].starts_with(' ') {
            continue;
        }
        let s = slug(t[hashes..].trim());
        let n = seen.entry(s.clone()).or_insert(0);
        v.push(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    v
}

/// The link targets of a line outside code: `[text](target)` and `![alt](target)`, inline code
/// left out.
fn link_targets(line: &str) -> Vec<String> {
    let mut plain = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            plain.push(c);
        }
    }
    let mut v = Vec::new();
    let mut rest = plain.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split_whitespace().next().unwrap_or("");
        v.push(target.to_string());
        rest = &after[end..];
    }
    v
}

#[test]
fn every_relative_link_points_at_a_file_and_heading_that_exist() {
    let mut bad = Vec::new();
    let mut checked = 0;
    for (page, text) in pages() {
        let dir = root().join(&page).parent().unwrap().to_path_buf();
        for (n, line) in split(&text).1 {
            for target in link_targets(&line) {
                if target.is_empty()
                    || target.starts_with("http://")
                    || target.starts_with("https://")
                    || target.starts_with("mailto:")
                {
                    continue;
                }
                checked += 1;
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let file = if path.is_empty() {
                    root().join(&page)
                } else {
                    dir.join(path)
                };
                if !file.exists() {
                    bad.push(format!("{page}:{n}: {target}: no such file"));
                    continue;
                }
                if let Some(a) = anchor {
                    if file.extension().is_some_and(|e| e == "md")
                        && !anchors(&read(&file)).iter().any(|x| x == a)
                    {
                        bad.push(format!("{page}:{n}: {target}: no heading with anchor #{a}"));
                    }
                }
            }
        }
    }
    assert!(checked > 0, "no relative link found at all");
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}

#[test]
fn the_front_page_links_every_docs_page() {
    let front = read(&root().join("README.md"));
    let links: Vec<String> = split(&front)
        .1
        .iter()
        .flat_map(|(_, l)| link_targets(l))
        .map(|t| t.split('#').next().unwrap().to_string())
        .collect();
    let missing: Vec<String> = pages()
        .into_iter()
        .skip(1)
        .map(|(p, _)| p)
        .filter(|p| !links.iter().any(|l| l == p))
        .collect();
    assert!(
        missing.is_empty(),
        "not linked from the front page: {missing:?}"
    );
}

#[test]
fn the_front_page_gives_the_layer_check_what_it_reads() {
    // oe-core's checklayer `test_readme` skips its remaining checks when the text says
    // "readme" anywhere; it wants a maintainer, how to send patches, an email address.
    let front = read(&root().join("README.md"));
    let lower = front.to_lowercase();
    assert!(
        !lower.contains("readme"),
        "the front page must never say r-e-a-d-m-e"
    );
    assert!(lower.contains("maintainer"));
    assert!(lower.contains("patch"));
    assert!(
        front.split_whitespace().any(|w| {
            let w = w.trim_matches(|c: char| !c.is_alphanumeric());
            w.split_once('@')
                .is_some_and(|(u, d)| !u.is_empty() && d.contains('.'))
        }),
        "no email address"
    );
    // The layer's dependencies and series, as conf/layer.conf declares them.
    let layer = read(&root().join("conf/layer.conf"));
    for key in ["LAYERDEPENDS_usbperf", "LAYERSERIES_COMPAT_usbperf"] {
        let line = layer
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("conf/layer.conf has no {key}"));
        let value = line.split('"').nth(1).unwrap();
        for word in value.split_whitespace() {
            assert!(
                front.contains(word),
                "the front page does not name {word} ({key} in conf/layer.conf)"
            );
        }
    }
}

#[test]
fn no_page_cites_an_issue_number() {
    // The pages name features, not the tracker's numbers (the word, then a number or #number).
    let mut bad = Vec::new();
    for (page, text) in pages() {
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            for (i, _) in lower.match_indices("issue") {
                let after = lower[i + "issue".len()..].trim_start_matches(['s', ' ', '#']);
                let digits = after.chars().take_while(char::is_ascii_digit).count();
                // The word, then a number, "#" and a number, or a number and "'s"; not a decimal figure
                // (a sentence where the word is a verb before a figure such as 70.0 %).
                let decimal = after[digits..].starts_with('.')
                    && after[digits + 1..].starts_with(|c: char| c.is_ascii_digit());
                if digits > 0 && !decimal {
                    bad.push(format!("{page}:{}: {line}", n + 1));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "issue numbers in the pages:\n{}",
        bad.join("\n")
    );
}

/// The front page's `list` example has the columns `list` prints: a newcomer compares the
/// two first.
#[test]
fn the_front_pages_list_example_has_the_columns_list_prints() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_usbperf-matrix"))
        .arg("list")
        .env("COLUMNS", "1000")
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&o.stdout);
    let header = |text: &str| -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.starts_with("NAME "))
            .unwrap_or_else(|| panic!("no header in {text}"));
        line.split_whitespace().map(str::to_string).collect()
    };
    let readme = read(&root().join("README.md"));
    let at = readme
        .find("# usbperf-matrix list\n")
        .expect("README shows `list`");
    assert_eq!(header(&readme[at..]), header(&printed));
}
