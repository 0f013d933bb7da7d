//! Owns the life of a flash part across reports: every reading of one part (an eMMC or SD
//! card by its CID manufacturer and serial, an NVMe or SATA disk by its model and serial),
//! from its factory run to its later boots in the field, as a day-0 baseline, a wear rate per
//! month, the date it is projected to reach its limit, and the parts wearing faster than
//! their board's others (robust outliers). Pure: records in, a summary out.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use super::extract::{PartSample, UnitRecord, FACTORY};
use super::stats;

/// An average month, in days: rates are per month as a factory plans in them.
pub const DAYS_PER_MONTH: f64 = 30.436875;
/// A part's rate needs readings this far apart (one day: the same day's reboots say nothing).
pub const MIN_SPAN_DAYS: f64 = 1.0;
/// A board needs this many parts with a rate before any is called fast.
pub const MIN_PARTS: usize = 5;
/// A part's rate must be an outlier among its board's (`stats::OUTLIER_Z`), and it must wear
/// at least this many times its board's median, to be worth a name ...
pub const MIN_FACTOR: f64 = 1.5;
/// ... and at least this much faster, in % per month: NVMe counts life in whole percent and an
/// eMMC in 10 % bands, so on a board whose parts barely move one step is no outlier (half a
/// percent a month is 30 % of a rated life over five years).
pub const MIN_EXCESS_PERCENT_PER_MONTH: f64 = 0.5;
/// A part's series on its chart is at most this many readings (the latest).
pub const MAX_SERIES: usize = 240;

/// One reading of a part, as kept until the summary.
#[derive(Debug, Clone)]
struct Reading {
    at: DateTime<Utc>,
    board: String,
    unit: String,
    phase: String,
    sample: PartSample,
}

/// Every reading of every part, by its identity (a part moved to another unit or board is
/// still itself).
#[derive(Debug, Default)]
pub struct WearValues {
    parts: BTreeMap<String, Vec<Reading>>,
}

impl WearValues {
    pub fn add(&mut self, r: &UnitRecord) {
        for d in &r.devices {
            let Some(p) = &d.part else { continue };
            self.parts.entry(p.id.clone()).or_default().push(Reading {
                at: r.started_at,
                board: r.board.clone(),
                unit: r.unit.clone(),
                phase: r.phase.clone(),
                sample: p.clone(),
            });
        }
    }

    pub fn summarize(self) -> WearSummary {
        let mut parts: Vec<PartWear> = self
            .parts
            .into_iter()
            .map(|(id, readings)| part_wear(id, readings))
            .collect();
        let mut boards = Vec::new();
        let mut by_board: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, p) in parts.iter().enumerate() {
            by_board.entry(p.board.clone()).or_default().push(i);
        }
        for (board, idx) in by_board {
            // (part, rate) of the parts with a rate, and their modified z-scores.
            let rated: Vec<(usize, f64)> = idx
                .iter()
                .filter_map(|&i| Some((i, parts[i].rate_percent_per_month?)))
                .collect();
            let rates: Vec<f64> = rated.iter().map(|r| r.1).collect();
            let mut sorted = rates.clone();
            stats::sort_f64(&mut sorted);
            let median = stats::percentile(&sorted, 50.0);
            let judged = rated.len() >= MIN_PARTS;
            // None: every part wears alike, so none stands out.
            if let (true, Some(m), Some(z)) = (judged, median, stats::modified_z(&rates, &sorted)) {
                for (&(i, rate), z) in rated.iter().zip(z) {
                    if z > stats::OUTLIER_Z
                        && rate > 0.0
                        && (m <= 0.0 || rate >= MIN_FACTOR * m)
                        && rate - m >= MIN_EXCESS_PERCENT_PER_MONTH
                    {
                        parts[i].fast = true;
                        parts[i].robust_z = Some(z);
                    }
                }
            }
            for &i in &idx {
                let p = &mut parts[i];
                p.words = words(p, median);
                if !p.fast {
                    p.series.clear();
                }
            }
            boards.push(BoardWear {
                parts: idx.len(),
                with_rate: rated.len(),
                median_rate_percent_per_month: median,
                note: (!judged).then(|| {
                    format!(
                        "{} part(s) with a wear rate: too few to name a fast one (at least \
                         {MIN_PARTS})",
                        rated.len()
                    )
                }),
                board,
            });
        }
        let fast = parts.iter().filter(|p| p.fast).count();
        WearSummary {
            parts: parts.len(),
            fast,
            boards,
            followed: parts,
        }
    }
}

/// The wear of the fleet's parts.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WearSummary {
    /// Parts followed (a part seen in any report).
    pub parts: usize,
    /// Parts wearing faster than their board's others.
    pub fast: usize,
    pub boards: Vec<BoardWear>,
    /// Every part, fast ones with their series.
    pub followed: Vec<PartWear>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BoardWear {
    pub board: String,
    pub parts: usize,
    /// Parts whose readings span at least a day: the ones with a rate.
    pub with_rate: usize,
    pub median_rate_percent_per_month: Option<f64>,
    /// Why no part of this board is judged, when none is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One reading as the summary shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WearPoint {
    pub at: DateTime<Utc>,
    pub unit: String,
    /// `factory` or `field`.
    pub phase: String,
    /// The most life used the part reported (eMMC life time A/B band tops, NVMe percent
    /// used), in %.
    pub life_used_percent: Option<f64>,
    pub life_time_a_percent: Option<f64>,
    pub life_time_b_percent: Option<f64>,
    pub percent_used: Option<f64>,
    pub pre_eol: Option<String>,
    pub data_written_bytes: Option<f64>,
}

/// One part's life.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartWear {
    pub board: String,
    /// `emmc 0x15 0x1a2b3c4d`, `nvme <model> <serial>`.
    pub part: String,
    pub class: String,
    /// The units it was read in (a part moved to another unit is still itself).
    pub units: Vec<String>,
    pub readings: usize,
    /// Day 0: its first factory reading, else its first reading.
    pub baseline: WearPoint,
    pub latest: WearPoint,
    /// Least-squares slope of the life used over time, in % per month (readings over at least
    /// a day).
    pub rate_percent_per_month: Option<f64>,
    /// NVMe data written per month, bytes.
    pub data_written_bytes_per_month: Option<f64>,
    /// The unit's `max_life_used_percent` for its class, else 100.
    pub limit_percent: f64,
    /// When the part reaches its limit at its rate, from its latest reading (a day, UTC);
    /// `reached` when it has.
    pub projected_limit_date: Option<String>,
    /// Wears faster than its board's other parts.
    pub fast: bool,
    /// Its modified z-score among its board's rates, when it is fast.
    pub robust_z: Option<f64>,
    /// What a person reads.
    pub words: String,
    /// (time, life used %) of a fast part, for its chart; empty for the others.
    pub series: Vec<(DateTime<Utc>, f64)>,
}

fn point(r: &Reading) -> WearPoint {
    WearPoint {
        at: r.at,
        unit: r.unit.clone(),
        phase: r.phase.clone(),
        life_used_percent: r.sample.life_used(),
        life_time_a_percent: r.sample.life_a,
        life_time_b_percent: r.sample.life_b,
        percent_used: r.sample.percent_used,
        pre_eol: r.sample.pre_eol.clone(),
        data_written_bytes: r.sample.data_written_bytes,
    }
}

fn months(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (b - a).num_seconds() as f64 / 86_400.0 / DAYS_PER_MONTH
}

/// Least-squares slope of `(x, y)`, `None` for fewer than two distinct x.
fn slope(xy: &[(f64, f64)]) -> Option<f64> {
    let n = xy.len() as f64;
    if xy.len() < 2 {
        return None;
    }
    let mx = xy.iter().map(|p| p.0).sum::<f64>() / n;
    let my = xy.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = xy.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

fn part_wear(part: String, mut readings: Vec<Reading>) -> PartWear {
    readings.sort_by(|a, b| a.at.cmp(&b.at).then_with(|| a.unit.cmp(&b.unit)));
    let first = &readings[0];
    let last = readings.last().expect("a part has a reading");
    // Judged among the parts of the board it is on now.
    let board = last.board.clone();
    let baseline = readings
        .iter()
        .find(|r| r.phase == FACTORY)
        .unwrap_or(first);
    let t0 = baseline.at.min(first.at);
    let life: Vec<(f64, f64)> = readings
        .iter()
        .filter_map(|r| Some((months(t0, r.at), r.sample.life_used()?)))
        .collect();
    let written: Vec<(f64, f64)> = readings
        .iter()
        .filter_map(|r| Some((months(t0, r.at), r.sample.data_written_bytes?)))
        .collect();
    // Over the readings that carry the figure: a reading without it says nothing of the span.
    let spans = |xy: &[(f64, f64)]| {
        let (lo, hi) = xy.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
            (lo.min(p.0), hi.max(p.0))
        });
        xy.len() >= 2 && (hi - lo) * DAYS_PER_MONTH >= MIN_SPAN_DAYS
    };
    let rate = spans(&life).then(|| slope(&life)).flatten();
    let limit = last.sample.limit.unwrap_or(100.0);
    let latest_life = last.sample.life_used();
    let projected = match (latest_life, rate) {
        (Some(l), _) if l >= limit => Some("reached".to_string()),
        (Some(l), Some(r)) if r > 0.0 => {
            let days = (limit - l) / r * DAYS_PER_MONTH;
            // Beyond a century is no plan: said as none.
            (days < 36_500.0).then(|| {
                (last.at + Duration::seconds((days * 86_400.0) as i64))
                    .format("%Y-%m-%d")
                    .to_string()
            })
        }
        _ => None,
    };
    let mut units: Vec<String> = Vec::new();
    for r in &readings {
        if !units.contains(&r.unit) {
            units.push(r.unit.clone());
        }
    }
    let class = part.split(' ').next().unwrap_or_default().to_string();
    let series: Vec<(DateTime<Utc>, f64)> = readings
        .iter()
        .filter_map(|r| Some((r.at, r.sample.life_used()?)))
        .collect();
    let keep = series.len().saturating_sub(MAX_SERIES);
    PartWear {
        board,
        class,
        units,
        readings: readings.len(),
        baseline: point(baseline),
        latest: point(last),
        rate_percent_per_month: rate,
        data_written_bytes_per_month: spans(&written).then(|| slope(&written)).flatten(),
        limit_percent: limit,
        projected_limit_date: projected,
        fast: false,
        robust_z: None,
        words: String::new(),
        series: series[keep..].to_vec(),
        part,
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or("?".into(), |v| format!("{v:.0} %"))
}

fn words(p: &PartWear, board_median: Option<f64>) -> String {
    let mut s = format!(
        "{} on {} (unit {}): {} used at day 0 ({}), {} now ({})",
        p.part,
        p.board,
        p.units.join(", "),
        pct(p.baseline.life_used_percent),
        p.baseline.at.format("%Y-%m-%d"),
        pct(p.latest.life_used_percent),
        p.latest.at.format("%Y-%m-%d"),
    );
    match p.rate_percent_per_month {
        Some(r) => s.push_str(&format!(", {r:.2} %/month")),
        None => s.push_str(", no rate yet (readings less than a day apart)"),
    }
    if p.fast {
        match board_median {
            Some(m) if m > 0.0 => s.push_str(&format!(
                ", {:.1} times the board's median of {m:.2} %/month",
                p.rate_percent_per_month.unwrap_or(0.0) / m
            )),
            Some(m) => s.push_str(&format!(", while the board's median is {m:.2} %/month")),
            None => {}
        }
    }
    match p.projected_limit_date.as_deref() {
        Some("reached") => s.push_str(&format!("; has reached its {:.0} % limit", p.limit_percent)),
        Some(d) => s.push_str(&format!(
            "; reaches its {:.0} % limit about {d}",
            p.limit_percent
        )),
        None => {}
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::DeviceRecord;

    fn record(unit: &str, at: DateTime<Utc>, phase: &str, id: &str, life: f64) -> UnitRecord {
        UnitRecord {
            file: 0,
            unit: unit.into(),
            board: "B".into(),
            station: String::new(),
            build: String::new(),
            phase: phase.into(),
            tool_version: "0".into(),
            started_at: at,
            pass: true,
            devices: vec![DeviceRecord {
                label: String::new(),
                class: "emmc".into(),
                port: "mmcblk0".into(),
                model: "M".into(),
                pass: true,
                retests: 0,
                marginal: false,
                reasons: vec![],
                values: vec![],
                curve: None,
                part: Some(PartSample {
                    id: id.into(),
                    life_a: Some(life),
                    life_b: Some(life / 2.0),
                    percent_used: None,
                    pre_eol: Some("normal".into()),
                    data_written_bytes: None,
                    limit: Some(70.0),
                }),
            }],
            thresholds: vec![],
            identity: String::new(),
            rejected: vec![],
            signer: None,
        }
    }

    #[test]
    fn a_fast_part_is_named_with_its_rate_and_date_and_the_others_are_not() {
        let t0 = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 1, 1, 0, 0, 0).unwrap();
        let mut w = WearValues::default();
        for u in 0..8 {
            let fast = u == 3;
            for m in 0..7 {
                let at = t0 + Duration::days((m as f64 * DAYS_PER_MONTH) as i64);
                let life = if fast {
                    10.0 + 5.0 * m as f64
                } else {
                    10.0 + m as f64
                };
                let phase = if m == 0 { "factory" } else { "field" };
                w.add(&record(
                    &format!("U{u}"),
                    at,
                    phase,
                    &format!("emmc 0x15 0x{u:08x}"),
                    life,
                ));
            }
        }
        let s = w.summarize();
        assert_eq!((s.parts, s.fast), (8, 1));
        let p = s.followed.iter().find(|p| p.fast).unwrap();
        assert_eq!(p.part, "emmc 0x15 0x00000003");
        assert!(
            (p.rate_percent_per_month.unwrap() - 5.0).abs() < 0.05,
            "{p:?}"
        );
        assert_eq!(p.baseline.phase, "factory");
        assert_eq!(p.baseline.life_used_percent, Some(10.0));
        // 40 % now, 30 to go at 5 %/month: six months after the last reading (2026-07-01).
        let d = p.projected_limit_date.as_deref().unwrap();
        assert!(d.starts_with("2026-12") || d.starts_with("2027-01"), "{d}");
        assert!(
            p.words.contains("times the board's median of 1.00 %/month"),
            "{}",
            p.words
        );
        assert_eq!(p.series.len(), 7);
        let slow = s.followed.iter().find(|p| !p.fast).unwrap();
        assert!(slow.series.is_empty());
        assert_eq!(
            s.boards[0]
                .median_rate_percent_per_month
                .map(|m| (m * 100.0).round()),
            Some(100.0)
        );
    }

    #[test]
    fn one_step_on_a_board_whose_parts_barely_wear_is_no_outlier() {
        // NVMe-like: whole percents, nine parts still at 0 % after a year, one at 2 %.
        let t0 = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 1, 1, 0, 0, 0).unwrap();
        let mut w = WearValues::default();
        for u in 0..10 {
            for m in 0..13 {
                let at = t0 + Duration::days((m as f64 * DAYS_PER_MONTH) as i64);
                let life = if u == 0 && m >= 6 { 2.0 } else { 0.0 };
                w.add(&record(
                    &format!("U{u}"),
                    at,
                    "field",
                    &format!("p{u}"),
                    life,
                ));
            }
        }
        let s = w.summarize();
        assert_eq!(
            s.fast,
            0,
            "{:?}",
            s.followed
                .iter()
                .map(|p| p.rate_percent_per_month)
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn too_few_parts_or_too_short_a_span_judge_nothing() {
        let t0 = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 1, 1, 0, 0, 0).unwrap();
        let mut w = WearValues::default();
        for u in 0..3 {
            for m in 0..3 {
                let at = t0 + Duration::days(30 * m);
                w.add(&record(
                    &format!("U{u}"),
                    at,
                    "field",
                    &format!("p{u}"),
                    10.0 + (u * m) as f64 * 9.0,
                ));
            }
        }
        // The same day twice: no rate.
        w.add(&record("U9", t0, "factory", "p9", 10.0));
        w.add(&record("U9", t0 + Duration::hours(3), "field", "p9", 20.0));
        let s = w.summarize();
        assert_eq!(s.fast, 0);
        assert!(
            s.boards[0].note.as_deref().unwrap().contains("too few"),
            "{:?}",
            s.boards
        );
        let p9 = s.followed.iter().find(|p| p.part == "p9").unwrap();
        assert_eq!(p9.rate_percent_per_month, None);
        assert!(p9.words.contains("no rate yet"), "{}", p9.words);
    }
}
