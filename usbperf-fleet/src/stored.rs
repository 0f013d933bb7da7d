//! Owns the stored form of a day's summaries ([`BoardDay`]) and of a unit's latest run
//! ([`UnitState`]): what a collector keeps per (day, board) and per unit, in the compact
//! binary form of [`super::bytes`]. The strings of a summary (units, devices and files of
//! its extremes, groups, reasons) repeat across its figures, so each is written once in a
//! table at the start and named by its index after it.
//!
//! The fields are taken apart by exhaustive patterns, so a field added to a summary's type
//! does not compile here until it is stored (and [`FORMAT`] changed).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use chrono::{DateTime, Utc};

use super::builds::BuildSketches;
use super::bytes::{BytesError, Reader, Writer};
use super::distinct::Distinct;
use super::extract::RejectedFigure;
use super::partial::{BoardDay, Extreme, Extremes, MetricDay, SlotDay, Trend, UnitState};
use super::sketch::Sketch;
use super::summary::CurveTrace;
use usbperf_report::wire::{Select, Threshold};

/// The first byte of a stored summary: another layout gets another byte.
pub const FORMAT: u8 = 2;
/// The most bytes a stored summary may have (a day of one board: a few MB).
pub const MAX_BYTES: usize = 64 << 20;

/// Why stored bytes are no summary.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoredError {
    #[error("format byte {0}, this build reads {FORMAT}")]
    Format(u8),
    #[error("{0} bytes, more than a stored summary may have ({MAX_BYTES})")]
    TooLarge(usize),
    #[error(transparent)]
    Bytes(#[from] BytesError),
    #[error("a sketch in it: {0}")]
    Sketch(String),
    #[error("a unit count in it: {0}")]
    Distinct(String),
}

/// Strings written once, named by index.
#[derive(Default)]
struct Strings<'a> {
    list: Vec<&'a str>,
    index: HashMap<&'a str, usize>,
}

impl<'a> Strings<'a> {
    fn put(&mut self, w: &mut Writer, s: &'a str) {
        let n = self.list.len();
        let i = *self.index.entry(s).or_insert(n);
        if i == n {
            self.list.push(s);
        }
        w.len(i);
    }
}

fn get(table: &[String], r: &mut Reader, what: &'static str) -> Result<String, BytesError> {
    table
        .get(r.len(what)?)
        .cloned()
        .ok_or(BytesError::Range(what))
}

/// A threshold of a report's config, as records and summaries store it.
pub fn write_threshold(w: &mut Writer, t: &Threshold) {
    let Threshold {
        select: Select {
            all_non_system,
            class,
            port,
        },
        workload,
        min_mib_per_s,
        min_iops,
        max_p99_latency_ms,
        min_link_mbps,
        max_life_used_percent,
    } = t;
    w.bool(*all_non_system);
    w.opt_str(class);
    w.opt_str(port);
    w.opt_str(workload);
    for f in [
        min_mib_per_s,
        min_iops,
        max_p99_latency_ms,
        min_link_mbps,
        max_life_used_percent,
    ] {
        w.opt_f64(*f);
    }
}

pub fn read_threshold(r: &mut Reader) -> Result<Threshold, BytesError> {
    Ok(Threshold {
        select: Select {
            all_non_system: r.bool("a threshold")?,
            class: r.opt_string("a threshold")?,
            port: r.opt_string("a threshold")?,
        },
        workload: r.opt_string("a threshold")?,
        min_mib_per_s: r.opt_f64("a threshold")?,
        min_iops: r.opt_f64("a threshold")?,
        max_p99_latency_ms: r.opt_f64("a threshold")?,
        min_link_mbps: r.opt_f64("a threshold")?,
        max_life_used_percent: r.opt_f64("a threshold")?,
    })
}

/// A day's summaries of one board as bytes. Equal summaries give equal bytes.
pub fn encode(d: &BoardDay) -> Vec<u8> {
    let BoardDay {
        reports,
        signed,
        latest,
        latest_in_board,
        yields,
        ports,
        configs,
        curves,
        rejected,
        rejected_kept,
        slots,
        builds,
    } = d;
    let mut s = Strings::default();
    let mut w = Writer::with_capacity(4096);
    w.u64(*reports);
    w.u64(*signed);
    w.i64(latest.0);
    w.i64(latest.1);
    w.i64(latest_in_board.0);
    w.i64(latest_in_board.1);
    w.len(yields.len());
    for ((dim, value), counts) in yields {
        s.put(&mut w, dim);
        s.put(&mut w, value);
        for c in counts {
            w.u64(*c);
        }
    }
    w.len(ports.len());
    for (port, (n, fail)) in ports {
        s.put(&mut w, port);
        w.u64(*n);
        w.u64(*fail);
    }
    w.len(configs.len());
    for (ts, units) in configs {
        w.len(ts.len());
        for t in ts {
            write_threshold(&mut w, t);
        }
        w.blob(&units.encode());
    }
    w.len(curves.len());
    for (model, list) in curves {
        s.put(&mut w, model);
        w.len(list.len());
        for CurveTrace {
            unit,
            device,
            file,
            samples,
            knee,
        } in list
        {
            s.put(&mut w, unit);
            s.put(&mut w, device);
            w.str(&file.to_string_lossy());
            w.len(samples.len());
            for (t, v) in samples {
                w.f64(*t);
                w.f64(*v);
            }
            match knee {
                None => w.bool(false),
                Some((t, before, after)) => {
                    w.bool(true);
                    w.f64(*t);
                    w.f64(*before);
                    w.f64(*after);
                }
            }
        }
    }
    w.u64(*rejected);
    w.len(rejected_kept.len());
    for RejectedFigure {
        file,
        unit,
        device,
        field,
        value,
        why,
    } in rejected_kept
    {
        w.str(&file.to_string_lossy());
        s.put(&mut w, unit);
        s.put(&mut w, device);
        w.str(field);
        w.str(value);
        w.str(why);
    }
    w.len(slots.len());
    for (slot, sd) in slots {
        for part in slot {
            s.put(&mut w, part);
        }
        let SlotDay {
            devices,
            passed,
            units,
            reasons,
            metrics,
        } = sd;
        w.u64(*devices);
        w.u64(*passed);
        w.blob(&units.encode());
        w.len(reasons.len());
        for (key, (n, example)) in reasons {
            s.put(&mut w, key);
            w.u64(*n);
            s.put(&mut w, example);
        }
        w.len(metrics.len());
        for (metric, m) in metrics {
            s.put(&mut w, metric);
            let MetricDay {
                values,
                trend,
                ok,
                norm,
                passing,
                passing_tests,
                extremes: Extremes { low, high },
            } = m;
            w.blob(&values.encode());
            w.blob(&trend.encode());
            w.u64(*ok);
            w.blob(&norm.encode());
            w.blob(&passing.encode());
            w.u64(*passing_tests);
            for list in [low, high] {
                w.len(list.len());
                for Extreme {
                    value,
                    unit,
                    device,
                    file,
                } in list
                {
                    w.f64(*value);
                    s.put(&mut w, unit);
                    s.put(&mut w, device);
                    s.put(&mut w, file.to_str().unwrap_or_default());
                }
            }
        }
    }
    let BuildSketches { values, first } = builds;
    w.len(first.len());
    for ((board, build), (at, n)) in first {
        s.put(&mut w, board);
        s.put(&mut w, build);
        w.i64(at.timestamp());
        w.u64(u64::from(at.timestamp_subsec_nanos()));
        w.len(*n);
    }
    w.len(values.len());
    for ((board, build, class, metric), sketch) in values {
        for x in [board, build, class, metric] {
            s.put(&mut w, x);
        }
        w.blob(&sketch.encode());
    }
    let mut out = Writer::with_capacity(w.0.len() + 64 * s.list.len());
    out.byte(FORMAT);
    out.len(s.list.len());
    for x in &s.list {
        out.str(x);
    }
    out.0.extend_from_slice(&w.0);
    out.0
}

fn sketch(r: &mut Reader, what: &'static str) -> Result<Sketch, StoredError> {
    Sketch::decode(r.blob(what)?).map_err(|e| StoredError::Sketch(e.to_string()))
}

fn distinct(r: &mut Reader, what: &'static str) -> Result<Distinct, StoredError> {
    Distinct::decode(r.blob(what)?).map_err(|e| StoredError::Distinct(e.to_string()))
}

/// A reader past the format byte of stored bytes of at most [`MAX_BYTES`].
fn reader(bytes: &[u8]) -> Result<Reader<'_>, StoredError> {
    if bytes.len() > MAX_BYTES {
        return Err(StoredError::TooLarge(bytes.len()));
    }
    let mut r = Reader::new(bytes);
    let format = r.byte("the format byte")?;
    if format != FORMAT {
        return Err(StoredError::Format(format));
    }
    Ok(r)
}

/// Reads what [`encode`] wrote, and nothing else: at most [`MAX_BYTES`], every count checked
/// against the bytes left before anything is allocated for it.
pub fn decode(bytes: &[u8]) -> Result<BoardDay, StoredError> {
    let mut r = reader(bytes)?;
    let n = r.count(1, "the strings")?;
    let mut table = Vec::with_capacity(n);
    for _ in 0..n {
        table.push(r.string("a string")?);
    }
    let t = &table;
    let mut d = BoardDay {
        reports: r.u64("the reports")?,
        signed: r.u64("the signed reports")?,
        latest: (r.i64("the latest runs")?, r.i64("the latest runs")?),
        latest_in_board: (r.i64("the latest runs")?, r.i64("the latest runs")?),
        ..BoardDay::default()
    };
    for _ in 0..r.count(7, "the yields")? {
        let key = (get(t, &mut r, "a yield")?, get(t, &mut r, "a yield")?);
        let mut c = [0u64; 5];
        for x in &mut c {
            *x = r.u64("a yield")?;
        }
        d.yields.insert(key, c);
    }
    for _ in 0..r.count(3, "the ports")? {
        let port = get(t, &mut r, "a port")?;
        d.ports.insert(port, (r.u64("a port")?, r.u64("a port")?));
    }
    for _ in 0..r.count(2, "the configs")? {
        let mut ts = Vec::new();
        for _ in 0..r.count(9, "a config")? {
            ts.push(read_threshold(&mut r)?);
        }
        d.configs.push((ts, distinct(&mut r, "a config's units")?));
    }
    for _ in 0..r.count(2, "the curves")? {
        let model = get(t, &mut r, "a curve's model")?;
        let mut list = Vec::new();
        for _ in 0..r.count(5, "a model's curves")? {
            let unit = get(t, &mut r, "a curve")?;
            let device = get(t, &mut r, "a curve")?;
            let file = PathBuf::from(r.string("a curve")?);
            let mut samples = Vec::new();
            for _ in 0..r.count(16, "a curve's samples")? {
                samples.push((r.f64("a curve sample")?, r.f64("a curve sample")?));
            }
            let knee = if r.bool("a knee")? {
                Some((r.f64("a knee")?, r.f64("a knee")?, r.f64("a knee")?))
            } else {
                None
            };
            list.push(CurveTrace {
                unit,
                device,
                file,
                samples,
                knee,
            });
        }
        d.curves.insert(model, list);
    }
    d.rejected = r.u64("the refused figures")?;
    for _ in 0..r.count(6, "the refused figures")? {
        d.rejected_kept.push(RejectedFigure {
            file: PathBuf::from(r.string("a refused figure")?),
            unit: get(t, &mut r, "a refused figure")?,
            device: get(t, &mut r, "a refused figure")?,
            field: r.string("a refused figure")?,
            value: r.string("a refused figure")?,
            why: r.string("a refused figure")?,
        });
    }
    for _ in 0..r.count(8, "the groups")? {
        let slot = [
            get(t, &mut r, "a group")?,
            get(t, &mut r, "a group")?,
            get(t, &mut r, "a group")?,
            get(t, &mut r, "a group")?,
        ];
        let mut sd = SlotDay {
            devices: r.u64("a group's devices")?,
            passed: r.u64("a group's devices")?,
            units: distinct(&mut r, "a group's units")?,
            ..SlotDay::default()
        };
        for _ in 0..r.count(3, "a group's reasons")? {
            let key = get(t, &mut r, "a reason")?;
            let n = r.u64("a reason")?;
            sd.reasons.insert(key, (n, get(t, &mut r, "a reason")?));
        }
        for _ in 0..r.count(8, "a group's figures")? {
            let metric = get(t, &mut r, "a figure")?;
            let values = sketch(&mut r, "a figure's values")?;
            let trend = sketch(&mut r, "a figure's trend")?;
            let ok = r.u64("a figure")?;
            let norm = sketch(&mut r, "a figure's norm")?;
            let passing = sketch(&mut r, "a figure's passing values")?;
            let passing_tests = r.u64("a figure")?;
            let mut ends = [Vec::new(), Vec::new()];
            for list in &mut ends {
                for _ in 0..r.count(11, "a figure's extremes")? {
                    list.push(Extreme {
                        value: r.f64("an extreme")?,
                        unit: get(t, &mut r, "an extreme")?,
                        device: get(t, &mut r, "an extreme")?,
                        file: PathBuf::from(get(t, &mut r, "an extreme")?),
                    });
                }
            }
            let [low, high] = ends;
            sd.metrics.insert(
                metric,
                MetricDay {
                    values,
                    trend,
                    ok,
                    norm,
                    passing,
                    passing_tests,
                    extremes: Extremes { low, high },
                },
            );
        }
        d.slots.insert(slot, sd);
    }
    for _ in 0..r.count(5, "the builds")? {
        let key = (get(t, &mut r, "a build")?, get(t, &mut r, "a build")?);
        let secs = r.i64("a build")?;
        let nanos = u32::try_from(r.u64("a build")?).map_err(|_| BytesError::Range("a build"))?;
        let at: DateTime<Utc> =
            DateTime::from_timestamp(secs, nanos).ok_or(BytesError::Range("a build"))?;
        d.builds.first.insert(key, (at, r.len("a build")?));
    }
    for _ in 0..r.count(5, "the builds' figures")? {
        let key = (
            get(t, &mut r, "a build's figure")?,
            get(t, &mut r, "a build's figure")?,
            get(t, &mut r, "a build's figure")?,
            get(t, &mut r, "a build's figure")?,
        );
        d.builds
            .values
            .insert(key, sketch(&mut r, "a build's figure")?);
    }
    r.finish()?;
    Ok(d)
}

/// A summary's trend as bytes: its groups, each with its figures' sketches.
pub fn encode_trend(t: &Trend) -> Vec<u8> {
    let Trend { slots } = t;
    let mut w = Writer::with_capacity(1024);
    w.byte(FORMAT);
    w.len(slots.len());
    for (slot, figures) in slots {
        for part in slot {
            w.str(part);
        }
        w.len(figures.len());
        for (metric, values) in figures {
            w.str(metric);
            w.blob(&values.encode());
        }
    }
    w.0
}

/// Reads what [`encode_trend`] wrote, and nothing else: at most [`MAX_BYTES`], every count
/// checked against the bytes left.
pub fn decode_trend(bytes: &[u8]) -> Result<Trend, StoredError> {
    let mut r = reader(bytes)?;
    let mut t = Trend::default();
    for _ in 0..r.count(5, "the trend's groups")? {
        let slot = [
            r.string("a group")?,
            r.string("a group")?,
            r.string("a group")?,
            r.string("a group")?,
        ];
        let mut figures = BTreeMap::new();
        for _ in 0..r.count(2, "a group's trend")? {
            let metric = r.string("a figure")?;
            figures.insert(metric, sketch(&mut r, "a figure's trend")?);
        }
        t.slots.insert(slot, figures);
    }
    r.finish()?;
    Ok(t)
}

/// A unit's latest run and keys as bytes.
pub fn encode_unit(u: &UnitState) -> Vec<u8> {
    let UnitState {
        latest,
        by_board,
        keys,
    } = u;
    let mut w = Writer::with_capacity(64);
    w.byte(FORMAT);
    let run = |w: &mut Writer, (at, day, board, pass): &(DateTime<Utc>, i32, String, bool)| {
        w.i64(at.timestamp());
        w.u64(u64::from(at.timestamp_subsec_nanos()));
        w.i64(i64::from(*day));
        w.str(board);
        w.bool(*pass);
    };
    match latest {
        None => w.bool(false),
        Some(l) => {
            w.bool(true);
            run(&mut w, l);
        }
    }
    w.len(by_board.len());
    for b in by_board {
        run(&mut w, b);
    }
    w.len(keys.len());
    for k in keys {
        w.0.extend_from_slice(&k.to_le_bytes());
    }
    w.0
}

pub fn decode_unit(bytes: &[u8]) -> Result<UnitState, StoredError> {
    let mut r = reader(bytes)?;
    let run = |r: &mut Reader| -> Result<(DateTime<Utc>, i32, String, bool), BytesError> {
        let secs = r.i64("a run")?;
        let nanos = u32::try_from(r.u64("a run")?).map_err(|_| BytesError::Range("a run"))?;
        let at: DateTime<Utc> =
            DateTime::from_timestamp(secs, nanos).ok_or(BytesError::Range("a run"))?;
        let day = i32::try_from(r.i64("a run")?).map_err(|_| BytesError::Range("a run"))?;
        Ok((at, day, r.string("a run")?, r.bool("a run")?))
    };
    let latest = if r.bool("the latest run")? {
        Some(run(&mut r)?)
    } else {
        None
    };
    let mut by_board = Vec::new();
    for _ in 0..r.count(12, "the runs by board")? {
        by_board.push(run(&mut r)?);
    }
    let mut keys = Vec::new();
    for _ in 0..r.count(8, "the keys")? {
        keys.push(u64::from_le_bytes(r.array("a key")?));
    }
    r.finish()?;
    Ok(UnitState {
        latest,
        by_board,
        keys,
    })
}

/// Summaries by (day, board), as [`super::partial::Partial::days`] holds them.
pub type Days = BTreeMap<(i32, String), BoardDay>;
