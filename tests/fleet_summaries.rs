//! The fleet from mergeable per-day summaries (`usbperf::fleet::partial`, what a collector
//! keeps for millions of reports) against the exact fleet of the same reports
//! (`usbperf-matrix fleet` on a directory): every table agrees within the summaries' stated
//! error, on a synthetic fleet of 10,000 reports (tests/common/fleet_gen.rs) with factory and
//! field reports over five months, planted outliers and slow ports.

mod common;
#[path = "common/fleet_gen.rs"]
mod fleet_gen;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::TempDir;
use usbperf::fleet::aggregate::{aggregate, Dimension, FleetOptions, FleetSummary, MetricSummary};
use usbperf::fleet::distinct::STANDARD_ERROR;
use usbperf::fleet::load::{self, LoadOptions, Outcome};
use usbperf::fleet::partial::{Partial, Selection, Trend, UnitBook, TREND_PPM};

/// The sketches' accuracy (0.1 %), and what a learned percentile may move by once the norm
/// decides which figures are far from the others.
const VALUE_ERROR: f64 = 0.001;
/// A trend point's median: within the trend's accuracy (1 %).
const TREND_ERROR: f64 = TREND_PPM as f64 / 1e6;
const PASSING_ERROR: f64 = 0.01;

fn generate(dir: &Path, units: u32, extra: &[&str]) {
    let mut args: Vec<String> = ["--units", &units.to_string(), "--format", "json", "--out"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(dir.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    fleet_gen::generate_args(&args);
}

/// Folds every report of `dir` into summaries, in name order, as a collector would as they
/// arrive.
fn summaries(dir: &Path) -> (Partial, usize) {
    let (p, n, _) = summaries_and_units(dir);
    (p, n)
}

fn summaries_and_units(dir: &Path) -> (Partial, usize, UnitBook) {
    let found = load::collect_paths(&[dir.to_path_buf()]).unwrap();
    let mut partial = Partial::new(FleetOptions::default().curves_per_model);
    let mut book = UnitBook::default();
    let paths = found.paths.clone();
    load::load(&paths, &LoadOptions::default(), |o| match o {
        Outcome::Record(r) => {
            let file = paths[r.file as usize].clone();
            partial.add(*r, file, &mut book);
        }
        other => panic!("every generated report reads: {other:?}"),
    });
    (partial, paths.len(), book)
}

fn exact(dir: &Path, opts: FleetOptions) -> FleetSummary {
    aggregate(&[dir.to_path_buf()], opts).unwrap().finish()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    a == b || (a - b).abs() <= rel * a.abs().max(b.abs())
}

fn assert_close(what: &str, exact: f64, got: f64, rel: f64) {
    assert!(
        close(exact, got, rel),
        "{what}: exact {exact}, from summaries {got} (more than {} % apart)",
        rel * 100.0
    );
}

fn reasons(v: &[usbperf::fleet::aggregate::ReasonCount]) -> BTreeMap<String, usize> {
    v.iter().map(|r| (r.reason.clone(), r.count)).collect()
}

fn compare_metric(g: &str, e: &MetricSummary, s: &MetricSummary) {
    let w = |f: &str| format!("{g} {} {f}", e.metric);
    assert_eq!(e.count, s.count, "{}", w("count"));
    assert_eq!(e.pass_rate, s.pass_rate, "{}", w("pass rate"));
    // The extremes are kept exactly; percentiles within the sketch's accuracy.
    assert_eq!((e.min, e.max), (s.min, s.max), "{}", w("min, max"));
    for (f, a, b) in [
        ("p5", e.p5, s.p5),
        ("median", e.median, s.median),
        ("p95", e.p95, s.p95),
    ] {
        assert_close(&w(f), a, b, VALUE_ERROR);
    }
    // Learned limits.
    let (ep, sp) = (&e.passing, &s.passing);
    assert_eq!(ep.count, sp.count, "{}", w("passing tests"));
    for (f, a, b) in [
        ("passing p1", ep.p1, sp.p1),
        ("passing p5", ep.p5, sp.p5),
        ("passing median", ep.median, sp.median),
        ("passing p95", ep.p95, sp.p95),
        ("passing p99", ep.p99, sp.p99),
    ] {
        assert_close(&w(f), a, b, PASSING_ERROR);
    }
    assert!(
        ep.reports.abs_diff(sp.reports) <= 1 + ep.reports / 100,
        "{}: {} against {}",
        w("passing reports"),
        ep.reports,
        sp.reports
    );
    // The trend: the same buckets, counts exact, medians within the trend's accuracy (1 %).
    assert_eq!(e.trend.len(), s.trend.len(), "{}", w("trend buckets"));
    for (a, b) in e.trend.iter().zip(&s.trend) {
        assert_eq!((&a.start, a.count), (&b.start, b.count), "{}", w("trend"));
        assert_close(
            &w(&format!("trend {}", a.start)),
            a.median,
            b.median,
            TREND_ERROR,
        );
    }
    // The histogram: the same range; a value can change bins only at a bin's edge, so the
    // counts up to each edge differ by the few values within a bucket of it.
    let h = (&e.histogram, &s.histogram);
    assert_eq!(
        (h.0.lo, h.0.hi),
        (h.1.lo, h.1.hi),
        "{}",
        w("histogram range")
    );
    let (mut up_e, mut up_s) = (0i64, 0i64);
    for (a, b) in h.0.counts.iter().zip(&h.1.counts) {
        up_e += i64::from(*a);
        up_s += i64::from(*b);
        assert!(
            (up_e - up_s).abs() as f64 <= 0.02 * e.count as f64 + 2.0,
            "{}: {:?} against {:?}",
            w("histogram"),
            h.0.counts,
            h.1.counts
        );
    }
    assert_eq!(up_e, up_s, "{}", w("histogram total"));
    // Outliers: as many flagged (a value whose z-score is within a few % of 3.5 may fall
    // either side, and the summaries count values by their bucket), and the clearly flagged
    // units listed by both.
    assert!(
        e.outliers_total.abs_diff(s.outliers_total) <= 2 + e.outliers_total / 20,
        "{}: {} against {}",
        w("outliers"),
        e.outliers_total,
        s.outliers_total
    );
    let clear = |v: &[usbperf::fleet::aggregate::Outlier]| -> BTreeSet<String> {
        v.iter()
            .take(40)
            .filter(|o| o.modified_z.abs() > 3.5 * 1.05)
            .map(|o| o.unit.clone())
            .collect()
    };
    let listed: BTreeSet<String> = s.outliers.iter().map(|o| o.unit.clone()).collect();
    let missing: Vec<_> = clear(&e.outliers).difference(&listed).cloned().collect();
    assert!(
        missing.is_empty(),
        "{}: not listed {missing:?}",
        w("outliers")
    );
}

fn compare(e: &FleetSummary, s: &FleetSummary) {
    assert_eq!(e.reports, s.reports, "reports");
    assert_eq!(e.units, s.units, "units");
    assert_eq!(e.unit_pass_rate, s.unit_pass_rate, "unit pass rate");
    assert_eq!(
        (e.devices, e.device_pass_rate),
        (s.devices, s.device_pass_rate),
        "device tests"
    );
    assert_eq!(
        (&e.first_day, &e.last_day, &e.trend_bucket),
        (&s.first_day, &s.last_day, &s.trend_bucket)
    );
    assert_eq!(reasons(&e.failure_reasons), reasons(&s.failure_reasons));
    let ports = |v: &FleetSummary| -> Vec<(String, usize, usize)> {
        v.link_failures_by_port
            .iter()
            .map(|p| (p.port.clone(), p.devices, p.link_failures))
            .collect()
    };
    assert_eq!(ports(e), ports(s), "link failures by port");
    let yields =
        |v: &FleetSummary| -> Vec<String> { v.yields.iter().map(|y| format!("{y:?}")).collect() };
    assert_eq!(yields(e), yields(s), "yields");
    assert_eq!(
        e.factory_thresholds.len(),
        s.factory_thresholds.len(),
        "factory lines"
    );
    for (a, b) in e.factory_thresholds.iter().zip(&s.factory_thresholds) {
        assert_eq!(
            (&a.class, &a.metric, &a.bound, a.value),
            (&b.class, &b.metric, &b.bound, b.value)
        );
        assert_close(
            "a line's units",
            a.units as f64,
            b.units as f64,
            3.0 * STANDARD_ERROR,
        );
    }
    assert_eq!(e.signatures.signed, s.signatures.signed);
    assert_eq!(e.signatures.unsigned, s.signatures.unsigned);
    let curves = |v: &FleetSummary| -> Vec<(String, Vec<PathBuf>)> {
        v.write_curves
            .iter()
            .map(|m| {
                (
                    m.model.clone(),
                    m.curves.iter().map(|c| c.file.clone()).collect(),
                )
            })
            .collect()
    };
    assert_eq!(curves(e), curves(s), "write curves");
    // Builds: the same pairs, figures compared and regressions named; each change within the
    // medians' accuracy.
    assert_eq!(e.builds.len(), s.builds.len(), "build pairs");
    for (a, b) in e.builds.iter().zip(&s.builds) {
        assert_eq!(
            (
                &a.board,
                &a.from,
                &a.to,
                a.reports_from,
                a.reports_to,
                a.compared
            ),
            (
                &b.board,
                &b.from,
                &b.to,
                b.reports_from,
                b.reports_to,
                b.compared
            )
        );
        let named = |c: &usbperf::fleet::builds::BuildComparison| -> Vec<(String, String)> {
            c.regressions
                .iter()
                .map(|r| (r.class.clone(), r.metric.clone()))
                .collect()
        };
        assert_eq!(named(a), named(b), "{} to {}: regressions", a.from, a.to);
        for (x, y) in a.regressions.iter().zip(&b.regressions) {
            assert!(
                (x.change_percent - y.change_percent).abs() < 0.3,
                "{x:?} {y:?}"
            );
            assert_eq!((x.n_from, x.n_to), (y.n_from, y.n_to));
        }
    }

    let keys =
        |v: &FleetSummary| -> Vec<Vec<String>> { v.groups.iter().map(|g| g.key.clone()).collect() };
    assert_eq!(keys(e), keys(s), "groups");
    for (a, b) in e.groups.iter().zip(&s.groups) {
        assert_close(
            &format!("{} units", a.name),
            a.units as f64,
            b.units as f64,
            3.0 * STANDARD_ERROR,
        );
        assert_eq!(
            (a.devices, a.device_pass_rate),
            (b.devices, b.device_pass_rate)
        );
        assert_eq!(a.classes, b.classes);
        assert_eq!(reasons(&a.failure_reasons), reasons(&b.failure_reasons));
        let names = |g: &usbperf::fleet::aggregate::GroupSummary| -> Vec<String> {
            g.metrics.iter().map(|m| m.metric.clone()).collect()
        };
        assert_eq!(names(a), names(b), "{} metrics", a.name);
        for (x, y) in a.metrics.iter().zip(&b.metrics) {
            compare_metric(&a.name, x, y);
            assert_eq!(x.limits.len(), y.limits.len(), "{} limits", a.name);
        }
    }
}

#[test]
fn the_fleet_from_summaries_agrees_with_the_exact_fleet_within_the_stated_error() {
    let d = TempDir::new("fleet-summaries");
    let dir = d.path().join("reports");
    // 2,500 units, each a factory report and three monthly field reports: 10,000 reports
    // over about five months (weekly trend), two boards, eMMC and USB sticks.
    generate(&dir, 2_500, &fleet_gen::TEN_THOUSAND);
    let (partial, files) = summaries(&dir);
    assert_eq!(files, 10_000);
    for group_by in [
        vec![Dimension::Board, Dimension::DeviceClass],
        vec![
            Dimension::DeviceClass,
            Dimension::Port,
            Dimension::DeviceModel,
        ],
    ] {
        let opts = FleetOptions {
            group_by: group_by.clone(),
            compare_builds: true,
            ..FleetOptions::default()
        };
        let e = exact(&dir, opts.clone());
        let s = partial.finish(&Selection::default(), &opts, files, Vec::new(), Vec::new());
        assert!(e.units > 2_000 && e.groups.len() >= 2, "{group_by:?}");
        assert!(
            e.builds.iter().any(|b| !b.regressions.is_empty()),
            "the planted regression is named: {:?}",
            e.builds
        );
        compare(&e, &s);
    }
    // One board, from a day on: the summaries of the selected days and board.
    let e_all = exact(&dir, FleetOptions::default());
    let board = e_all.groups[0].key[0].clone();
    let since = "2026-10-01";
    let opts = FleetOptions {
        load: LoadOptions {
            board: Some(board.clone()),
            since: Some(usbperf::fleet::records::parse_since(since).unwrap()),
            ..LoadOptions::default()
        },
        ..FleetOptions::default()
    };
    let e = exact(&dir, opts.clone());
    let sel = Selection {
        since_day: Some(usbperf::fleet::stats::epoch_day(
            usbperf::fleet::records::parse_since(since).unwrap(),
        )),
        board: Some(board),
    };
    let s = partial.finish(&sel, &opts, files, Vec::new(), Vec::new());
    assert!(e.reports > 1_000 && e.reports < 9_000, "{}", e.reports);
    compare(&e, &s);
}

#[test]
fn summaries_merged_in_any_order_are_the_summaries_of_the_whole() {
    let d = TempDir::new("fleet-summaries-merge");
    let dir = d.path().join("reports");
    generate(&dir, 300, &["--schema", "2", "--field-months", "1"]);
    let (whole, files) = summaries(&dir);
    // The same reports in three batches, each its own summaries (three collectors, or three
    // folds of a queue), merged forward and backward. The unit book is shared, as a store's
    // table of units is.
    let found = load::collect_paths(std::slice::from_ref(&dir)).unwrap();
    let mut parts: Vec<Partial> = (0..3).map(|_| Partial::new(12)).collect();
    let mut book = UnitBook::default();
    let paths = found.paths.clone();
    load::load(&paths, &LoadOptions::default(), |o| {
        if let Outcome::Record(r) = o {
            let i = r.file as usize;
            parts[i % 3].add(*r, paths[i].clone(), &mut book);
        }
    });
    let mut forward = Partial::new(12);
    for p in &parts {
        forward.merge(p);
    }
    let mut backward = Partial::new(12);
    for p in parts.iter().rev() {
        backward.merge(p);
    }
    assert_eq!(forward.days, backward.days);
    let opts = FleetOptions::default();
    let json = |p: &Partial| {
        serde_json::to_string(&p.finish(&Selection::default(), &opts, files, vec![], vec![]))
            .unwrap()
    };
    assert_eq!(json(&forward), json(&whole));
}

#[test]
fn a_stored_summary_reads_back_equal_and_a_damaged_one_is_refused() {
    use usbperf::fleet::stored;
    let d = TempDir::new("fleet-summaries-stored");
    let dir = d.path().join("reports");
    generate(
        &dir,
        120,
        &["--schema", "2", "--field-months", "1", "--outliers", "4"],
    );
    let (partial, _, book) = summaries_and_units(&dir);
    for (unit, state) in book.entries() {
        let bytes = stored::encode_unit(state);
        assert_eq!(&stored::decode_unit(&bytes).unwrap(), state, "{unit}");
        for cut in 0..bytes.len() {
            assert!(
                stored::decode_unit(&bytes[..cut]).is_err(),
                "{unit} cut at {cut}"
            );
        }
    }
    assert!(book.len() >= 120);
    let mut sizes = Vec::new();
    for bd in partial.days.values() {
        let bytes = stored::encode(bd);
        sizes.push(bytes.len());
        assert_eq!(&stored::decode(&bytes).unwrap(), bd);
        assert_eq!(stored::encode(&stored::decode(&bytes).unwrap()), bytes);
        // Cut anywhere, it is refused; a flipped bit never panics and, when it reads, reads
        // as a summary that encodes again.
        for cut in (0..bytes.len()).step_by(bytes.len() / 97 + 1) {
            assert!(stored::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let mut b = bytes.clone();
            let bit = (seed >> 17) as usize % (b.len() * 8);
            b[bit / 8] ^= 1 << (bit % 8);
            if let Ok(x) = stored::decode(&b) {
                let _ = stored::encode(&x);
            }
        }
        // Its trend row: the same figures' trend sketches, read back equal; cut, refused.
        let trend = Trend::of(bd);
        let t = stored::encode_trend(&trend);
        assert_eq!(stored::decode_trend(&t).unwrap(), trend);
        assert_eq!(
            trend.slots.values().map(|f| f.len()).sum::<usize>(),
            bd.slots.values().map(|s| s.metrics.len()).sum::<usize>()
        );
        for cut in 0..t.len() {
            assert!(
                stored::decode_trend(&t[..cut]).is_err(),
                "trend cut at {cut}"
            );
        }
        assert!(
            t.len() < bytes.len(),
            "a trend row is smaller than its summary"
        );
    }
    assert!(!sizes.is_empty());
    let mut other = stored::encode(partial.days.values().next().unwrap());
    other[0] = 9;
    assert_eq!(
        stored::decode(&other).unwrap_err(),
        stored::StoredError::Format(9)
    );
    eprintln!(
        "{} summaries of (day, board), {} to {} bytes",
        sizes.len(),
        sizes.iter().min().unwrap(),
        sizes.iter().max().unwrap()
    );
}
