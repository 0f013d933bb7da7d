//! Owns `calibrate`: whether `schedule: auto` keeps a board's figures, found on a golden unit
//! instead of assumed. The profile runs serial and auto in alternation (ABBA: the order swaps
//! every round), a figure that moves beyond ±[`TOLERANCE_PERCENT`] beside other lanes joins
//! those lanes (`shared_lanes:`) once its rounds' own spread tells the move from noise (more
//! rounds until it does, up to [`MAX_ROUNDS`]; still undecided, it is joined to be safe),
//! and the joined schedule is measured again the same way,
//! until every figure that ran beside another holds or every lane is one (then: stay serial).
//! The speed-up printed is always the last phase's measured wall times, never an estimate.
//! The comparison is pure (reports in, decisions out); the runs come from a closure, so a
//! test drives it with a fake engine and `cli` with the live machine.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::schedule::{LaneKey, ScheduleMode};
use crate::fleet::stats;
use crate::report::schema::{CellStatus, Report};
use crate::workload::WorkloadKind;

/// How far a figure may move beside others before its lanes are joined: the schedule's
/// promise.
pub const TOLERANCE_PERCENT: f64 = 5.0;

/// A calibration gives up joining lanes after this many phases and says to stay serial.
pub const MAX_PHASES: usize = 4;

/// A phase runs more rounds, one at a time, while a figure is not yet told from noise, up
/// to this many (a config asking for more rounds runs them all).
pub const MAX_ROUNDS: usize = 6;

/// One (device, test) figure of the runs compared: medians over the rounds, and the round's
/// own auto / serial ratios, from which its run-to-run spread is known.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub device: String,
    /// Its index in the device's cells (a matrix may list a workload twice).
    pub cell: usize,
    pub workload: WorkloadKind,
    /// Median MiB/s of the serial runs and of the auto runs (`None`: no run measured it).
    pub serial: Option<f64>,
    pub auto: Option<f64>,
    /// auto / serial of each round that measured it in both modes. A round's two runs are
    /// next to each other in time (ABBA), so a drift of the machine cancels in the ratio.
    pub pairs: Vec<f64>,
    /// The devices it ran beside in any auto run (none: it ran alone every time).
    pub beside: BTreeSet<String>,
    /// The median of the intervals its runs stated (half the 95 % CI, in %), for the
    /// record. The decision does not rest on it: measured, the windows' interval of a figure
    /// is several times wider than its run-to-run spread, and on the wide side it let a
    /// figure that moved 9.5 % in every round pass as noise.
    pub ci95_percent: Option<f64>,
}

/// What the rounds say of a figure that ran beside another lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// Its rounds' 95 % interval lies within the tolerance (or it ran alone): the schedule's
    /// promise is shown to hold, not merely its mean.
    Held,
    /// Beyond the tolerance, and its rounds' interval keeps clear of serial: it moved.
    Moved,
    /// Neither yet (its interval reaches beyond the tolerance and also back to serial, or
    /// too few rounds to know): more rounds decide, and a figure still undecided when they
    /// run out is decided by its mean over all of them ([`Comparison::by_mean`]).
    Undecided,
}

impl Figure {
    /// auto / serial: the mean of the rounds' ratios, or the ratio of the medians when no
    /// round measured it in both modes.
    pub fn ratio(&self) -> Option<f64> {
        if !self.pairs.is_empty() {
            return Some(self.pairs.iter().sum::<f64>() / self.pairs.len() as f64);
        }
        match (self.serial, self.auto) {
            (Some(s), Some(a)) if s > 0.0 => Some(a / s),
            _ => None,
        }
    }

    /// |auto / serial - 1| in %.
    pub fn deviation_percent(&self) -> Option<f64> {
        self.ratio().map(|r| (r - 1.0).abs() * 100.0)
    }

    /// Half the 95 % interval of the ratio from the rounds' spread (Student's t), in
    /// percentage points; `None` with fewer than two rounds.
    pub fn spread_percent(&self) -> Option<f64> {
        crate::stats::mean_ci95(&self.pairs).map(|(_, half)| half * 100.0)
    }

    pub fn movement(&self) -> Move {
        let Some(d) = self.deviation_percent() else {
            return Move::Held;
        };
        if self.beside.is_empty() {
            return Move::Held;
        }
        // A mean within the tolerance is not enough: one odd round can pull a real move's
        // mean inside it, so the whole interval must be.
        match self.spread_percent() {
            Some(h) if d + h <= TOLERANCE_PERCENT => Move::Held,
            Some(h) if d > TOLERANCE_PERCENT && d > h => Move::Moved,
            _ => Move::Undecided,
        }
    }

    /// It ran beside another lane and moved beyond the tolerance, told from its noise.
    pub fn moved(&self) -> bool {
        self.movement() == Move::Moved
    }

    /// It ran beside another lane, and its rounds show neither that it held within the
    /// tolerance nor that it moved beyond it.
    pub fn undecided(&self) -> bool {
        self.movement() == Move::Undecided
    }

    /// "sda seq-read -9.5 % +-1.2 % (3 rounds)": how far auto was from serial, with what it
    /// rests on.
    fn words(&self) -> String {
        let off = self
            .ratio()
            .map_or("?".to_string(), |r| format!("{:+.1} %", (r - 1.0) * 100.0));
        let spread = match (self.spread_percent(), self.pairs.len()) {
            (Some(h), n) => format!("+-{h:.1} % ({n} rounds)"),
            (None, 1) => "(1 round, spread not known yet)".to_string(),
            (None, _) => "(no round measured it in both modes)".to_string(),
        };
        format!("{} {} {off} {spread}", self.device, self.workload.as_str())
    }
}

/// Serial against auto over the runs of one phase.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub figures: Vec<Figure>,
    /// Median wall time of a run (report `finished_at - started_at`), in s.
    pub serial_seconds: Option<f64>,
    pub auto_seconds: Option<f64>,
    /// The lanes of the auto runs (`schedule.lanes`): disk name to the lane keys it is in.
    pub lane_of: BTreeMap<String, Vec<String>>,
    /// Every lane key of the runs, in the order the runs met them.
    pub lane_keys: Vec<String>,
    /// The rounds the phase ran (more than asked when a figure was not told from noise).
    pub rounds: usize,
    /// No more rounds run for this phase: a figure still undecided counts as moved.
    pub out_of_rounds: bool,
}

impl Comparison {
    /// serial / auto wall time: measured.
    pub fn speed_up(&self) -> Option<f64> {
        match (self.serial_seconds, self.auto_seconds) {
            (Some(s), Some(a)) if a > 0.0 => Some(s / a),
            _ => None,
        }
    }

    /// The largest deviation of a figure that ran beside another lane, in %.
    pub fn worst_beside(&self) -> Option<f64> {
        self.figures
            .iter()
            .filter(|f| !f.beside.is_empty())
            .filter_map(Figure::deviation_percent)
            .reduce(f64::max)
    }

    pub fn moved(&self) -> Vec<&Figure> {
        self.figures.iter().filter(|f| f.moved()).collect()
    }

    pub fn undecided(&self) -> Vec<&Figure> {
        self.figures.iter().filter(|f| f.undecided()).collect()
    }

    /// The figures whose lanes the next phase joins: those that moved, and once the rounds
    /// have run out, those still undecided whose mean is beyond the tolerance.
    pub fn to_join(&self) -> Vec<&Figure> {
        self.figures
            .iter()
            .filter(|f| f.moved() || self.by_mean(f) == Some(true))
            .collect()
    }

    /// Once the rounds have run out, an undecided figure is decided by its mean over all of
    /// them: `Some(true)` beyond the tolerance (counted as moved), `Some(false)` within it.
    /// `None` for any other figure, or while rounds remain.
    pub fn by_mean(&self, f: &Figure) -> Option<bool> {
        (self.out_of_rounds && f.undecided())
            .then(|| f.deviation_percent().is_some_and(|d| d > TOLERANCE_PERCENT))
    }
}

fn wall_seconds(r: &Report) -> Option<f64> {
    let end: DateTime<Utc> = r.finished_at?;
    let s = (end - r.started_at).num_milliseconds() as f64 / 1000.0;
    (s >= 0.0).then_some(s)
}

/// Compares the figures of the `serial` and `auto` reports of one phase, the n-th of each
/// from the same round. A cell the auto report's `schedule.alone` lists ran alone, whatever
/// its `concurrent_with` says of an earlier attempt beside others.
pub fn compare(serial: &[Report], auto: &[Report]) -> Comparison {
    debug_assert_eq!(
        serial.len(),
        auto.len(),
        "a serial and an auto run per round"
    );
    let mut figures: Vec<Figure> = Vec::new();
    // Per figure, per mode: the value of each round (`None`: that round did not measure it).
    type Rounds = (Vec<Option<f64>>, Vec<Option<f64>>);
    let mut values: BTreeMap<(String, usize), Rounds> = BTreeMap::new();
    let mut cis: BTreeMap<(String, usize), Vec<f64>> = BTreeMap::new();
    for (is_auto, reports) in [(false, serial), (true, auto)] {
        for (round, rep) in reports.iter().enumerate() {
            let alone: BTreeSet<(&str, usize)> = rep
                .schedule
                .iter()
                .flat_map(|s| s.alone.iter())
                .map(|a| (a.device.as_str(), a.cell))
                .collect();
            for d in &rep.devices {
                for (ci, c) in d.cells.iter().enumerate() {
                    let key = (d.name.clone(), ci);
                    let at = match figures
                        .iter()
                        .position(|f| f.device == d.name && f.cell == ci)
                    {
                        Some(i) => i,
                        None => {
                            figures.push(Figure {
                                device: d.name.clone(),
                                cell: ci,
                                workload: c.workload,
                                serial: None,
                                auto: None,
                                pairs: Vec::new(),
                                beside: BTreeSet::new(),
                                ci95_percent: None,
                            });
                            figures.len() - 1
                        }
                    };
                    let measured = matches!(c.status, CellStatus::Passed | CellStatus::Failed);
                    if let (true, Some(res)) = (measured, c.result.as_ref()) {
                        if let Some(ci) = res.precision.as_ref().and_then(|p| p.ci95_percent) {
                            cis.entry(key.clone()).or_default().push(ci);
                        }
                        let v = values.entry(key).or_default();
                        let side = if is_auto { &mut v.1 } else { &mut v.0 };
                        if side.len() <= round {
                            side.resize(round + 1, None);
                        }
                        side[round] = Some(res.judged().mib_per_s);
                    }
                    if is_auto && !alone.contains(&(d.name.as_str(), ci)) {
                        figures[at].beside.extend(c.concurrent_with.iter().cloned());
                    }
                }
            }
        }
    }
    for f in &mut figures {
        if let Some((s, a)) = values.remove(&(f.device.clone(), f.cell)) {
            f.pairs = s
                .iter()
                .zip(&a)
                .filter_map(|p| match p {
                    (Some(s), Some(a)) if *s > 0.0 => Some(a / s),
                    _ => None,
                })
                .collect();
            f.serial = stats::median(s.into_iter().flatten().collect());
            f.auto = stats::median(a.into_iter().flatten().collect());
        }
        f.ci95_percent = cis
            .remove(&(f.device.clone(), f.cell))
            .and_then(stats::median);
    }
    let mut lane_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut lane_keys: Vec<String> = Vec::new();
    for rep in serial.iter().chain(auto) {
        for lane in rep.schedule.iter().flat_map(|s| s.lanes.iter()) {
            let keys: Vec<String> = lane.key.split('+').map(str::to_string).collect();
            for k in &keys {
                if !lane_keys.contains(k) {
                    lane_keys.push(k.clone());
                }
            }
            for disk in &lane.disks {
                lane_of.entry(disk.clone()).or_insert_with(|| keys.clone());
            }
        }
    }
    Comparison {
        figures,
        serial_seconds: stats::median(serial.iter().filter_map(wall_seconds).collect()),
        auto_seconds: stats::median(auto.iter().filter_map(wall_seconds).collect()),
        lane_of,
        lane_keys,
        rounds: serial.len().max(auto.len()),
        out_of_rounds: false,
    }
}

/// Lane groups as a union of keys.
struct Groups {
    keys: Vec<String>,
    group: Vec<usize>,
}

impl Groups {
    fn new(keys: &[String], shared: &[Vec<LaneKey>]) -> Groups {
        let mut keys = keys.to_vec();
        for k in shared.iter().flatten() {
            if !keys.contains(&k.0) {
                keys.push(k.0.clone());
            }
        }
        let mut g = Groups {
            group: (0..keys.len()).collect(),
            keys,
        };
        for set in shared {
            let names: Vec<&str> = set.iter().map(|k| k.0.as_str()).collect();
            g.join(&names);
        }
        g
    }

    fn index(&self, key: &str) -> Option<usize> {
        self.keys.iter().position(|k| k == key)
    }

    /// Puts every key of `names` (known ones) into one group; true when that changed a group.
    fn join(&mut self, names: &[&str]) -> bool {
        let idx: Vec<usize> = names.iter().filter_map(|n| self.index(n)).collect();
        let Some(&first) = idx.first() else {
            return false;
        };
        let target = self.group[first];
        let mut changed = false;
        for i in idx {
            let from = self.group[i];
            if from != target {
                changed = true;
                for g in &mut self.group {
                    if *g == from {
                        *g = target;
                    }
                }
            }
        }
        changed
    }

    /// Groups of two or more keys, each in key order, in the order of their first key.
    fn shared(&self) -> Vec<Vec<LaneKey>> {
        let mut out: Vec<(usize, Vec<LaneKey>)> = Vec::new();
        for (i, k) in self.keys.iter().enumerate() {
            let g = self.group[i];
            match out.iter_mut().find(|(og, _)| *og == g) {
                Some((_, v)) => v.push(LaneKey(k.clone())),
                None => out.push((g, vec![LaneKey(k.clone())])),
            }
        }
        out.into_iter()
            .map(|(_, v)| v)
            .filter(|v| v.len() > 1)
            .collect()
    }
}

/// The lanes to join after a phase whose figures moved (or stayed undecided when its rounds
/// ran out: [`Comparison::to_join`]), over the groups `shared` already joined: the lanes of
/// the devices whose figures moved (they are the ones that slowed each
/// other, or one another's neighbours did), those that moved beyond twice the tolerance first
/// when there are any (a figure that moved a little may only have been the victim of their
/// load: the next phase measures it beside them apart); when that joins nothing new (one
/// device moved, or those already are one lane), each moved device's lane with the lanes of
/// the other moved devices it ran beside, else with every lane it ran beside. `None`: nothing
/// moved.
pub fn join_moved(cmp: &Comparison, shared: &[Vec<LaneKey>]) -> Option<Vec<Vec<LaneKey>>> {
    let all = cmp.to_join();
    if all.is_empty() {
        return None;
    }
    // The figures shown to move lead; one counted as moved only by its mean joins when none
    // was shown, so that a noisy figure's mean never decides over a real move.
    let shown: Vec<&Figure> = all.iter().copied().filter(|f| f.moved()).collect();
    let moved = if shown.is_empty() { all } else { shown };
    let strong: Vec<&Figure> = moved
        .iter()
        .copied()
        .filter(|f| f.deviation_percent().unwrap_or(0.0) > 2.0 * TOLERANCE_PERCENT)
        .collect();
    let moved = if strong.is_empty() { moved } else { strong };
    let mut groups = Groups::new(&cmp.lane_keys, shared);
    let lanes = |disk: &str| cmp.lane_of.get(disk).cloned().unwrap_or_default();
    let of_moved: Vec<String> = moved.iter().flat_map(|f| lanes(&f.device)).collect();
    let names: Vec<&str> = of_moved.iter().map(String::as_str).collect();
    if !groups.join(&names) {
        // Beside the lanes of other devices that moved too, first; beside everything it ran
        // with only when none of them did.
        let all_moved: Vec<&str> = cmp.to_join().iter().map(|f| f.device.as_str()).collect();
        let mut changed = false;
        for f in &moved {
            let mut with = lanes(&f.device);
            for other in f.beside.iter().filter(|o| all_moved.contains(&o.as_str())) {
                with.extend(lanes(other));
            }
            let names: Vec<&str> = with.iter().map(String::as_str).collect();
            changed |= groups.join(&names);
        }
        if !changed {
            for f in &moved {
                let mut with = lanes(&f.device);
                for other in &f.beside {
                    with.extend(lanes(other));
                }
                let names: Vec<&str> = with.iter().map(String::as_str).collect();
                groups.join(&names);
            }
        }
    }
    Some(groups.shared())
}

/// Whether the groups leave nothing to run at the same time among the lanes the runs had (a
/// profile may name lanes of another variant of the board).
pub fn all_one_lane(cmp: &Comparison, shared: &[Vec<LaneKey>]) -> bool {
    let g = Groups::new(&cmp.lane_keys, shared);
    let ids: Vec<usize> = cmp
        .lane_keys
        .iter()
        .filter_map(|k| g.index(k).map(|i| g.group[i]))
        .collect();
    ids.windows(2).all(|w| w[0] == w[1])
}

/// The groups as [`join_moved`] writes them, for comparing with a config's own order.
fn normalized(cmp: &Comparison, shared: &[Vec<LaneKey>]) -> Vec<Vec<LaneKey>> {
    Groups::new(&cmp.lane_keys, shared).shared()
}

/// One phase: the shared lanes it ran with, and how its figures compared.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    pub shared_lanes: Vec<Vec<LaneKey>>,
    pub comparison: Comparison,
}

/// What the calibration found.
#[derive(Debug, Clone, PartialEq)]
pub enum Finding {
    /// `schedule: auto` with these shared lanes kept every figure within the tolerance in
    /// the last phase.
    Auto(Vec<Vec<LaneKey>>),
    /// Every lane had to be joined, the phases ran out, or the unit has one lane: auto gives
    /// nothing here; the words say which.
    Serial(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    pub rounds: usize,
    pub phases: Vec<Phase>,
    pub finding: Finding,
}

#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error("the {mode} run of phase {phase}, round {round}, failed: {why}")]
    Run {
        mode: &'static str,
        phase: usize,
        round: usize,
        why: String,
    },
    #[error("interrupted after {0} phase(s): no finding")]
    Interrupted(usize),
    #[error(
        "the runs measured no figure to compare: check that the profile selects devices and \
         that its tests run on them (see the reports)"
    )]
    NothingMeasured,
}

/// Which run of a round comes first: serial in odd rounds, auto in even ones (ABBA), so a
/// drift of the machine over the calibration falls on both modes alike.
pub fn round_order(round: usize) -> [ScheduleMode; 2] {
    if round % 2 == 1 {
        [ScheduleMode::Serial, ScheduleMode::Auto]
    } else {
        [ScheduleMode::Auto, ScheduleMode::Serial]
    }
}

/// Runs the calibration: `run(mode, shared_lanes, phase, round)` runs the profile once and
/// returns its report; `said` hears a line per run and per phase; `stopped` is asked between
/// runs. `rounds` of each mode per phase, from the config's `shared_lanes` on.
pub fn calibrate(
    rounds: usize,
    initial: Vec<Vec<LaneKey>>,
    mut run: impl FnMut(ScheduleMode, &[Vec<LaneKey>], usize, usize) -> Result<Report, String>,
    mut said: impl FnMut(&str),
    stopped: impl Fn() -> bool,
) -> Result<Calibration, CalibrateError> {
    let rounds = rounds.max(1);
    let mut shared = initial;
    let mut phases: Vec<Phase> = Vec::new();
    for phase in 1..=MAX_PHASES {
        let (mut serial, mut auto) = (Vec::new(), Vec::new());
        let cap = rounds.max(MAX_ROUNDS);
        let (mut round, mut target) = (0, rounds);
        let cmp = loop {
            round += 1;
            for mode in round_order(round) {
                if stopped() {
                    return Err(CalibrateError::Interrupted(phases.len()));
                }
                let rep = run(mode, &shared, phase, round).map_err(|why| CalibrateError::Run {
                    mode: mode.as_str(),
                    phase,
                    round,
                    why,
                })?;
                said(&format!(
                    "calibrate: phase {phase}, round {round}/{target}, {}: {} s",
                    mode.as_str(),
                    wall_seconds(&rep).map_or("?".into(), |s| format!("{s:.1}"))
                ));
                match mode {
                    ScheduleMode::Serial => serial.push(rep),
                    ScheduleMode::Auto => auto.push(rep),
                }
            }
            if round < target {
                continue;
            }
            let mut cmp = compare(&serial, &auto);
            let undecided = cmp.undecided();
            if undecided.is_empty() {
                break cmp;
            }
            if round >= cap {
                cmp.out_of_rounds = true;
                break cmp;
            }
            // A figure whose rounds show neither that it held nor that it moved: more rounds
            // narrow its interval, rather than letting it pass (the schedule's promise) or
            // joining lanes over noise (auto lost for nothing). Up to an even count, so each
            // mode runs first as often as the other (a drift of the machine cancels).
            target = (round + 2 - round % 2).min(cap);
            let names: Vec<String> = undecided.iter().map(|f| f.words()).collect();
            said(&format!(
                "calibrate: phase {phase}: not yet shown within +-{TOLERANCE_PERCENT} % of serial \
                 or beyond it: {}; measuring up to round {target} of at most {cap}",
                names.join(", ")
            ));
        };
        if cmp.figures.iter().all(|f| f.ratio().is_none()) {
            return Err(CalibrateError::NothingMeasured);
        }
        let next = join_moved(&cmp, &shared);
        // Each figure named with its ratio and its rounds' interval, so a reader tells a lane
        // that really moved from a figure that is only noisy.
        let moved: Vec<String> = cmp.moved().iter().map(|f| f.words()).collect();
        let by_mean = |beyond: bool| -> Vec<String> {
            cmp.undecided()
                .into_iter()
                .filter(|f| cmp.by_mean(f) == Some(beyond))
                .map(|f| f.words())
                .collect()
        };
        let (beyond, within) = (by_mean(true), by_mean(false));
        let mut words = if moved.is_empty() {
            format!("no figure beside another lane shown to move beyond +-{TOLERANCE_PERCENT} %")
        } else {
            format!("moved beside other lanes: {}", moved.join(", "))
        };
        if !beyond.is_empty() {
            words.push_str(&format!(
                "; beyond +-{TOLERANCE_PERCENT} % on their mean of {round} rounds, counted as \
                 moved: {}",
                beyond.join(", ")
            ));
        }
        if !within.is_empty() {
            words.push_str(&format!(
                "; within +-{TOLERANCE_PERCENT} % on their mean of {round} rounds, as close as \
                 the rounds tell: {}",
                within.join(", ")
            ));
        }
        said(&format!(
            "calibrate: phase {phase}: serial {} s, auto {} s; {words}",
            fmt_s(cmp.serial_seconds),
            fmt_s(cmp.auto_seconds),
        ));
        phases.push(Phase {
            shared_lanes: shared.clone(),
            comparison: cmp.clone(),
        });
        if all_one_lane(&cmp, &shared) {
            return Ok(Calibration {
                rounds,
                phases,
                finding: Finding::Serial(
                    "the devices tested are in one lane: nothing here can run at the same time"
                        .into(),
                ),
            });
        }
        match next {
            None => {
                return Ok(Calibration {
                    rounds,
                    phases,
                    finding: kept_every_figure(&cmp, shared),
                })
            }
            Some(joined) if all_one_lane(&cmp, &joined) => {
                return Ok(Calibration {
                    rounds,
                    phases,
                    finding: Finding::Serial(
                        "the lanes' figures moved beside each other (or could not be shown to \
                         hold) until every lane was joined: nothing here runs at the same time \
                         without changing a figure"
                            .into(),
                    ),
                })
            }
            Some(joined) if joined == normalized(&cmp, &shared) => {
                return Ok(Calibration {
                    rounds,
                    phases,
                    finding: Finding::Serial(
                        "figures moved (or could not be shown to hold) that joining lanes cannot \
                         separate (they moved within lanes already joined): stay serial until \
                         the lanes are understood"
                            .into(),
                    ),
                })
            }
            Some(joined) => shared = joined,
        }
    }
    Ok(Calibration {
        rounds,
        phases,
        finding: Finding::Serial(format!(
            "figures still moved after {MAX_PHASES} phases of joining lanes: stay serial"
        )),
    })
}

/// The finding when every figure kept beside the other lanes: auto, unless it saved no time
/// (a loaded machine can make auto slower than serial; recommending it then would cost time).
fn kept_every_figure(cmp: &Comparison, shared: Vec<Vec<LaneKey>>) -> Finding {
    match cmp.speed_up() {
        Some(x) if x <= 1.0 => Finding::Serial(format!(
            "auto was not faster than serial (serial {} s, auto {} s): stay serial",
            fmt_s(cmp.serial_seconds),
            fmt_s(cmp.auto_seconds)
        )),
        // Faster, or wall times not known (a scripted run): the figures decide.
        _ => Finding::Auto(shared),
    }
}

fn fmt_s(s: Option<f64>) -> String {
    s.map_or("?".into(), |s| format!("{s:.1}"))
}

impl Calibration {
    /// The board-profile snippet: YAML a profile or config takes as it is, with the
    /// measurement it rests on in its comments.
    pub fn snippet(&self, unit: &str, at: DateTime<Utc>) -> String {
        let mut out = format!(
            "# usbperf-matrix calibrate on {unit}, {}: {} round(s) of serial and auto per \
             phase, alternating, more while a figure was not told from noise\n",
            at.format("%Y-%m-%d %H:%M UTC"),
            self.rounds
        );
        let last = self.phases.last();
        for (i, p) in self.phases.iter().enumerate() {
            let c = &p.comparison;
            out.push_str(&format!(
                "# phase {} ({} rounds): shared lanes {}: serial {} s, auto {} s, speed-up {}, {}\n",
                i + 1,
                c.rounds,
                lanes_words(&p.shared_lanes),
                fmt_s(c.serial_seconds),
                fmt_s(c.auto_seconds),
                c.speed_up().map_or("?".into(), |x| format!("{x:.2}x")),
                c.worst_beside()
                    .map_or("no figure ran beside another lane".into(), |x| format!(
                        "worst figure beside another lane {x:.1} %"
                    ))
            ));
        }
        match &self.finding {
            Finding::Auto(shared) => {
                if let Some(c) = last.map(|p| &p.comparison) {
                    out.push_str(&format!(
                        "# cycle time saved: {} s per run ({} measured)\n",
                        match (c.serial_seconds, c.auto_seconds) {
                            (Some(s), Some(a)) => format!("{:.1}", s - a),
                            _ => "?".into(),
                        },
                        c.speed_up().map_or("?".into(), |x| format!("{x:.2}x"))
                    ));
                }
                out.push_str("schedule: auto\n");
                if !shared.is_empty() {
                    out.push_str("shared_lanes:\n");
                    for g in shared {
                        let keys: Vec<String> = g.iter().map(|k| yaml_scalar(&k.0)).collect();
                        out.push_str(&format!("  - [{}]\n", keys.join(", ")));
                    }
                }
            }
            Finding::Serial(why) => {
                out.push_str(&format!("# {why}\nschedule: serial\n"));
            }
        }
        out
    }
}

fn lanes_words(shared: &[Vec<LaneKey>]) -> String {
    if shared.is_empty() {
        return "none".into();
    }
    let groups: Vec<String> = shared
        .iter()
        .map(|g| {
            let keys: Vec<&str> = g.iter().map(|k| k.0.as_str()).collect();
            format!("[{}]", keys.join(" "))
        })
        .collect();
    groups.join(" ")
}

/// A lane key in a flow sequence: quoted when it holds anything YAML would read otherwise.
fn yaml_scalar(s: &str) -> String {
    let plain = s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.:/+".contains(&b))
        && !s.ends_with(':');
    if plain {
        s.to_string()
    } else {
        serde_json::to_string(s).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(device: &str, serial: f64, auto: f64, beside: &[&str]) -> Figure {
        Figure {
            device: device.into(),
            cell: 0,
            workload: WorkloadKind::SeqRead,
            serial: Some(serial),
            auto: Some(auto),
            beside: beside.iter().map(|s| s.to_string()).collect(),
            // Three rounds alike: a move that is told from noise.
            pairs: vec![auto / serial; 3],
            ci95_percent: None,
        }
    }

    /// A figure held when its rounds' whole interval lies within the tolerance, moved when
    /// it is beyond the tolerance and its interval keeps clear of serial, and is undecided
    /// otherwise (or with one round). The windows' stated interval plays no part (the miss
    /// it caused: stated +-11 %, moved 9.5 % in each of 3 rounds).
    #[test]
    fn a_figure_held_or_moved_only_as_far_as_its_rounds_show() {
        // (the rounds' auto / serial, the stated interval, movement)
        let cases: [(&[f64], Option<f64>, Move); 10] = [
            (&[0.90, 0.905, 0.91], Some(11.0), Move::Moved),
            (&[0.70, 0.70], None, Move::Moved),
            (&[1.12, 1.13, 1.11, 1.12], None, Move::Moved),
            (&[0.98, 0.985, 0.99], None, Move::Held),
            (&[1.0, 1.0], None, Move::Held),
            // One round: no spread known, whatever the windows stated.
            (&[0.80], Some(1.0), Move::Undecided),
            (&[1.0], None, Move::Undecided),
            // Mean -8.3 %, but round to round 0.80-1.05: the interval (+-31 %) reaches 1.
            (&[0.80, 0.90, 1.05], None, Move::Undecided),
            // One odd round pulls a real 9.5 % move's mean to -4.7 %: not a hold.
            (&[0.905, 0.905, 1.05], None, Move::Undecided),
            // Mean +2 % but +-6.6 %: it may be beyond the tolerance.
            (&[1.04, 1.03, 0.99], None, Move::Undecided),
        ];
        for (pairs, ci, want) in cases {
            let mut f = fig("sda", 100.0, 100.0, &["sdb"]);
            f.pairs = pairs.to_vec();
            f.ci95_percent = ci;
            assert_eq!(f.movement(), want, "{pairs:?} {ci:?}");
            assert_eq!(f.moved(), want == Move::Moved);
            assert_eq!(f.undecided(), want == Move::Undecided);
            // Alone, it held whatever it did.
            f.beside.clear();
            assert_eq!(f.movement(), Move::Held);
        }
        let mut f = fig("sda", 100.0, 90.0, &["sdb"]);
        f.pairs = vec![0.90, 0.905, 0.91];
        assert_eq!(f.words(), "sda seq-read -9.5 % +-1.2 % (3 rounds)");
        f.pairs = vec![0.9];
        assert_eq!(
            f.words(),
            "sda seq-read -10.0 % (1 round, spread not known yet)"
        );
        f.pairs.clear();
        assert_eq!(
            f.words(),
            "sda seq-read -10.0 % (no round measured it in both modes)"
        );
    }

    #[test]
    fn the_interval_of_a_mean_is_students() {
        assert_eq!(crate::stats::mean_ci95(&[1.0]), None);
        let (m, h) = crate::stats::mean_ci95(&[0.90, 0.905, 0.91]).unwrap();
        // sd 0.005, t(2) 4.303: 4.303 * 0.005 / sqrt(3)
        assert!(
            (m - 0.905).abs() < 1e-12 && (h - 0.012_422).abs() < 1e-6,
            "{m} {h}"
        );
        assert_eq!(crate::stats::mean_ci95(&[2.0, 2.0]), Some((2.0, 0.0)));
    }

    /// An undecided figure joins nothing while rounds remain; once they ran out its mean
    /// decides, and a figure shown to move leads over one counted only by its mean (the
    /// schedule benchmark's phase 1 on QEMU's devices: the EHCI stick's seq-read -7.0 %
    /// +-6.2 %, the SATA disk's rand-write +10.9 % +-22 %).
    #[test]
    fn an_undecided_figure_is_decided_by_its_mean_only_when_the_rounds_ran_out() {
        let with = |device: &str, pairs: &[f64], beside: &[&str]| {
            let mut f = fig(device, 10.0, 10.0, beside);
            f.pairs = pairs.to_vec();
            f
        };
        let noisy_beyond = with("mmcblk0", &[0.6, 1.0], &["sda"]);
        let noisy_within = with("sdb", &[0.9, 1.08], &["sda"]);
        let mut c = cmp(vec![noisy_beyond.clone(), noisy_within.clone()]);
        assert_eq!(c.undecided().len(), 2);
        assert_eq!(join_moved(&c, &[]), None, "rounds remain");
        c.out_of_rounds = true;
        assert_eq!(c.by_mean(&c.figures[0]), Some(true));
        assert_eq!(c.by_mean(&c.figures[1]), Some(false));
        assert_eq!(
            join_moved(&c, &[]),
            Some(keys(&[&["usb:usb1", "mmc:mmc0"]])),
            "only the one beyond on its mean"
        );

        let shown = with(
            "sda",
            &[0.93, 0.94, 0.92, 0.93, 0.94, 0.92],
            &["sdc", "mmcblk0"],
        );
        assert!(shown.moved(), "{shown:?}");
        let loud = with("sdc", &[1.4, 0.9, 1.0, 1.3, 0.95, 1.1], &["sda", "mmcblk0"]);
        let mut c = cmp(vec![shown, loud]);
        c.out_of_rounds = true;
        assert_eq!(c.by_mean(&c.figures[1]), Some(true), "{:?}", c.figures[1]);
        // Not the noisy +10.9 % on its own (the old strong-first rule's pick): the stick's
        // lane with the lane of the other figure counted as moved that it ran beside.
        assert_eq!(
            join_moved(&c, &[]),
            Some(keys(&[&["usb:usb1", "ata:ata1"]]))
        );
    }

    /// sda on usb:usb1, sdb on usb:usb3, sdc on ata:ata1, mmcblk0 on mmc:mmc0.
    fn cmp(figures: Vec<Figure>) -> Comparison {
        let lanes = [
            ("sda", "usb:usb1"),
            ("sdb", "usb:usb3"),
            ("sdc", "ata:ata1"),
            ("mmcblk0", "mmc:mmc0"),
        ];
        Comparison {
            figures,
            serial_seconds: Some(70.0),
            auto_seconds: Some(30.0),
            lane_of: lanes
                .iter()
                .map(|(d, k)| (d.to_string(), vec![k.to_string()]))
                .collect(),
            lane_keys: lanes.iter().map(|(_, k)| k.to_string()).collect(),
            rounds: 3,
            out_of_rounds: false,
        }
    }

    fn keys(groups: &[&[&str]]) -> Vec<Vec<LaneKey>> {
        groups
            .iter()
            .map(|g| g.iter().map(|k| LaneKey(k.to_string())).collect())
            .collect()
    }

    const ALL: [&str; 3] = ["sdb", "sdc", "mmcblk0"];

    #[test]
    fn lanes_are_joined_by_the_figures_that_moved() {
        type Groups = Vec<Vec<LaneKey>>;
        let rows: Vec<(&str, Vec<Figure>, Groups, Option<Groups>)> = vec![
            (
                "within +-5 %: nothing to join",
                vec![
                    fig("sda", 10.0, 9.6, &ALL),
                    fig("sdb", 10.0, 10.4, &["sda"]),
                ],
                vec![],
                None,
            ),
            (
                "a figure that ran alone moves freely",
                vec![fig("sda", 10.0, 5.0, &[])],
                vec![],
                None,
            ),
            (
                "the moved devices' lanes become one",
                vec![
                    fig("sda", 10.0, 7.4, &ALL),
                    fig("sdb", 10.0, 8.2, &["sda", "sdc", "mmcblk0"]),
                    fig("sdc", 10.0, 8.1, &["sda", "sdb", "mmcblk0"]),
                    fig("mmcblk0", 10.0, 9.7, &["sda", "sdb", "sdc"]),
                ],
                vec![],
                Some(keys(&[&["usb:usb1", "usb:usb3", "ata:ata1"]])),
            ),
            (
                "the strong movers first: the SD's 8 % waits for the next phase",
                vec![
                    fig("sda", 10.0, 6.0, &ALL),
                    fig("sdb", 10.0, 8.3, &["sda", "sdc", "mmcblk0"]),
                    fig("sdc", 10.0, 8.8, &["sda", "sdb", "mmcblk0"]),
                    fig("mmcblk0", 10.0, 9.2, &["sda", "sdb", "sdc"]),
                ],
                vec![],
                Some(keys(&[&["usb:usb1", "usb:usb3", "ata:ata1"]])),
            ),
            (
                "only weak movers: all of them",
                vec![
                    fig("sdb", 10.0, 9.3, &["sda", "sdc", "mmcblk0"]),
                    fig("mmcblk0", 10.0, 9.2, &["sda", "sdb", "sdc"]),
                ],
                vec![],
                Some(keys(&[&["usb:usb3", "mmc:mmc0"]])),
            ),
            (
                "a strong mover already joined: next, the weak mover it ran beside, not the rest",
                vec![
                    fig("sda", 10.0, 6.4, &["sdc", "mmcblk0"]),
                    fig("sdc", 10.0, 9.4, &["sda", "sdb", "mmcblk0"]),
                ],
                keys(&[&["usb:usb1", "usb:usb3"]]),
                Some(keys(&[&["usb:usb1", "usb:usb3", "ata:ata1"]])),
            ),
            (
                "one moved device: its lane and every lane it ran beside",
                vec![fig("sda", 10.0, 8.0, &["mmcblk0"])],
                vec![],
                Some(keys(&[&["usb:usb1", "mmc:mmc0"]])),
            ),
            (
                "moved inside a group already joined: joined with what it ran beside",
                vec![
                    fig("sda", 10.0, 8.0, &["mmcblk0"]),
                    fig("sdc", 10.0, 8.0, &["mmcblk0"]),
                ],
                keys(&[&["usb:usb1", "ata:ata1"]]),
                Some(keys(&[&["usb:usb1", "ata:ata1", "mmc:mmc0"]])),
            ),
        ];
        for (what, figures, shared, want) in rows {
            assert_eq!(join_moved(&cmp(figures), &shared), want, "{what}");
        }
        let c = cmp(vec![fig("sda", 10.0, 8.0, &ALL)]);
        let joined = join_moved(&c, &[]).unwrap();
        assert!(all_one_lane(&c, &joined), "{joined:?}");
    }

    #[test]
    fn medians_ratios_and_the_measured_speed_up() {
        assert_eq!(stats::median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(stats::median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(stats::median(vec![]), None);
        let c = cmp(vec![
            fig("sda", 10.0, 9.0, &["sdb"]),
            fig("sdb", 10.0, 5.0, &[]),
        ]);
        assert_eq!(c.worst_beside().map(|d| (d * 10.0).round()), Some(100.0));
        assert_eq!(c.speed_up().map(|s| (s * 100.0).round()), Some(233.0));
        assert_eq!(round_order(1), [ScheduleMode::Serial, ScheduleMode::Auto]);
        assert_eq!(round_order(2), [ScheduleMode::Auto, ScheduleMode::Serial]);
    }

    /// A loaded machine made auto slower: serial is recommended, the words say why, and no
    /// snippet prints a dash for a percentage or a negative saving.
    #[test]
    fn auto_that_saved_no_time_is_never_recommended() {
        let mut c = cmp(vec![fig("sda", 10.0, 10.0, &[])]);
        c.serial_seconds = Some(28.0);
        c.auto_seconds = Some(30.0);
        let f = kept_every_figure(&c, vec![]);
        assert_eq!(
            f,
            Finding::Serial(
                "auto was not faster than serial (serial 28.0 s, auto 30.0 s): stay serial".into()
            )
        );
        let at = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 12, 2, 9, 30, 0).unwrap();
        let s = Calibration {
            rounds: 2,
            phases: vec![Phase {
                shared_lanes: vec![],
                comparison: c.clone(),
            }],
            finding: f,
        }
        .snippet("unit-7", at);
        assert!(s.ends_with("schedule: serial\n"), "{s}");
        assert!(s.contains("no figure ran beside another lane"), "{s}");
        assert!(!s.contains("- %") && !s.contains("saved: -"), "{s}");
        c.auto_seconds = Some(20.0);
        assert_eq!(kept_every_figure(&c, vec![]), Finding::Auto(vec![]));
    }

    #[test]
    fn the_snippet_says_what_it_rests_on() {
        let at = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 12, 2, 9, 30, 0).unwrap();
        let serial = Calibration {
            rounds: 3,
            phases: vec![Phase {
                shared_lanes: vec![],
                comparison: cmp(vec![fig("sda", 10.0, 8.0, &ALL)]),
            }],
            finding: Finding::Serial("every lane joined".into()),
        };
        let s = serial.snippet("unit-7", at);
        assert!(
            s.starts_with("# usbperf-matrix calibrate on unit-7, 2026-12-02 09:30 UTC"),
            "{s}"
        );
        assert!(s.contains("# phase 1 (3 rounds): shared lanes none: serial 70.0 s, auto 30.0 s, speed-up 2.33x, worst figure beside another lane 20.0 %"), "{s}");
        assert!(
            s.ends_with("# every lane joined\nschedule: serial\n"),
            "{s}"
        );
        let auto = Calibration {
            finding: Finding::Auto(keys(&[&["usb:usb1", "host:/devices/x y"]])),
            ..serial
        };
        let s = auto.snippet("unit-7", at);
        assert!(
            s.contains("# cycle time saved: 40.0 s per run (2.33x measured)\n"),
            "{s}"
        );
        assert!(
            s.ends_with("schedule: auto\nshared_lanes:\n  - [usb:usb1, \"host:/devices/x y\"]\n"),
            "{s}"
        );
    }
}
