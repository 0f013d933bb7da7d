//! A synthetic fleet of usbperf reports with known distributions and planted problems, written
//! through the report's own types and judged by the product's own verdict: what the fleet's
//! and the collector's tests read is what a unit writes, and a change to the report's types
//! breaks this generator where it is compiled, not the tests' data at run time.
//!
//! Each unit has two devices: the on-module eMMC (mmcblk0, tested through files in
//! /var/lib/usbperf/scratch) and a USB stick on port usb:1-2 (two stick models, about 55/45,
//! tested raw). Every figure is its (board, device model, workload) centre times
//! (1 + 0.08 g), g a normal deviate clipped to +-2, so that no unplanted value is a robust
//! outlier (modified z-score > 3.5). Planted problems:
//! - `--outliers K` units (default 5) whose USB seq-write is 20 % of the centre (the cell
//!   fails its 5 MiB/s minimum);
//! - `--slow-port-percent P` (default 3) of units whose stick on usb:1-2 linked at 12M (full
//!   speed) instead of 480M: every figure of that device is a full-speed one, and the device
//!   fails its link check, its seq-write and its rand-read minimum;
//! - `--field-months M` follows every unit's eMMC into the field: its factory report carries
//!   the part's CID (manfid 0x000015 and a serial) and its wear (the kernel's life time bands,
//!   PRE_EOL normal), and M field reports follow, one a month (`phase: field`), the part
//!   wearing at its own rate (a normal deviate around 0.8 %/month, clipped to 0.5-1.1);
//!   `--fast-wear K` (default 1) of them, on the larger board, wear at 4 %/month. The factory
//!   config then carries
//!   `max_life_used_percent: 70` for the eMMC.
//!
//! `--truth FILE` writes the planted (unit, device, problem) list as JSON. Deterministic for a
//! given seed. `--schema 2` (the default of the product) writes what this build writes; `--schema 1`
//! writes what builds before schema 2 wrote: reasons as sentences, no report id unless
//! `--report-ids` (16 hex digits, as those builds wrote them), no `schedule` in the config.
//!
//! Used by the integration tests (`#[path]`), the collector's tests and, as
//! `cargo run --release --example fleet-gen -- --units N --out DIR`, by the benchmarks.

#![allow(dead_code)]

use std::path::PathBuf;

use chrono::{DateTime, Duration, NaiveDate, Utc};
use serde_norway::Value as YamlValue;
use usbperf::config::{self, Config, Phase, ReportFormat};
use usbperf::device::DeviceClass;
use usbperf::discover::{Disk, MmcInfo, Mount, Partition, UsbHop, UsbLink};
use usbperf::engine::{mix64, EngineKind, EngineRequest, StopReason};
use usbperf::health::emmc::EmmcHealth;
use usbperf::health::{Health, LifeTime, PreEol};
use usbperf::matrix::run::report_file_name;
use usbperf::matrix::verdict::{applicable, judge_device, judge_unit, result_reasons, ReasonKind};
use usbperf::report::schema::{
    uuid_v4, Cell, CellStatus, DeviceReport, Placement, Report, RunStatus, Tool, Verdict,
};
use usbperf::report::unit::{ImageIdentity, UnitIdentity};
use usbperf::safety::{FileTarget, SystemFacts};
use usbperf::stats::{CpuFigures, LatencySummary, OpFigures, Stalls};
use usbperf::workload::curve::{CurveReport, CurveSample, Knee};
use usbperf::workload::target::{QueueInfo, TargetKind};
use usbperf::workload::verify::{VerifyMode, VerifyPhase, VerifyReport};
use usbperf::workload::{BenchResult, TargetReport, WorkloadKind};

/// fleet-gen's options, as its command line and the tests spell them.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "fleet-gen",
    about = "Write a synthetic fleet of usbperf reports"
)]
pub struct Options {
    #[arg(long)]
    pub units: usize,
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value_t = 6)]
    pub seed: u64,
    /// yaml or json.
    #[arg(long, default_value = "yaml", value_parser = ["yaml", "json"])]
    pub format: String,
    /// The first unit's day (YYYY-MM-DD).
    #[arg(long, default_value = "2026-09-01")]
    pub start: String,
    /// The days the factory reports spread over.
    #[arg(long, default_value_t = 56.0)]
    pub days: f64,
    #[arg(long, default_value_t = 5)]
    pub outliers: usize,
    #[arg(long, default_value_t = 3.0)]
    pub slow_port_percent: f64,
    /// Where the planted (unit, device, problem) list goes, as JSON.
    #[arg(long)]
    pub truth: Option<PathBuf>,
    /// 1 or 2.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=2))]
    pub schema: u32,
    /// A report id in every schema 1 report too.
    #[arg(long)]
    pub report_ids: bool,
    #[arg(long, default_value_t = 0)]
    pub field_months: u32,
    #[arg(long, default_value_t = 1)]
    pub fast_wear: usize,
    /// Comma-separated image builds (os-release VERSION_ID of ID acme), in production order:
    /// the units are split among them in time order.
    #[arg(long, default_value = "")]
    pub builds: String,
    /// CLASS:WORKLOAD:PERCENT: the last build's CLASS devices measure WORKLOAD's MiB/s and
    /// IOPS PERCENT % off (e.g. emmc:seq-write:-18).
    #[arg(long)]
    pub regress: Vec<String>,
}

/// One planted problem, as `--truth` lists it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Planted {
    pub unit: String,
    pub device: String,
    pub problem: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub part: Option<String>,
}

/// What a call wrote: the report files (sorted) and the planted problems.
#[derive(Debug, Clone)]
pub struct Fleet {
    pub files: Vec<PathBuf>,
    pub truth: Vec<Planted>,
    pub slow_ports: usize,
    pub outliers: usize,
}

/// A product line's 10,000 reports with `--units 2500`, for the tests that hold the fleet
/// from summaries against the exact one: each unit's factory report and three monthly field
/// reports (about five months: a weekly trend), two boards, three image builds with an 18 %
/// regression of the eMMC's seq-write planted in the last, 30 planted outliers.
pub const TEN_THOUSAND: [&str; 10] = [
    "--schema",
    "2",
    "--field-months",
    "3",
    "--outliers",
    "30",
    "--builds",
    "7.1,7.2,7.3",
    "--regress",
    "emmc:seq-write:-18",
];

/// Parses fleet-gen's arguments (without the program name) and writes the fleet.
pub fn generate_args<S: AsRef<str>>(args: &[S]) -> Fleet {
    use clap::Parser;
    let argv = std::iter::once("fleet-gen").chain(args.iter().map(|s| s.as_ref()));
    let o = Options::try_parse_from(argv).unwrap_or_else(|e| panic!("fleet-gen: {e}"));
    generate(&o).unwrap_or_else(|e| panic!("fleet-gen: {e}"))
}

struct Board {
    model: &'static str,
    share: f64,
    emmc_model: &'static str,
    /// Centres in MiB/s: read-buffered, seq-write, seq-read.
    centres: (f64, f64, f64),
}

const BOARDS: [Board; 2] = [
    Board {
        model: "Toradex Apalis iMX8QM V1.1 on Apalis Evaluation Board",
        share: 0.7,
        emmc_model: "DG4016",
        centres: (160.0, 42.0, 200.0),
    },
    Board {
        model: "Renesas SMARC EVK based on r9a07g043u11",
        share: 0.3,
        emmc_model: "S0J56X",
        centres: (88.0, 24.0, 92.0),
    },
];

struct Stick {
    vendor: &'static str,
    model: &'static str,
    size_bytes: u64,
    share: f64,
    /// Centres in MiB/s: read-buffered, seq-write, seq-read.
    centres: (f64, f64, f64),
    /// rand-read and rand-write IOPS.
    iops: (f64, f64),
    /// The write curve's knee: seconds, and the share of the rate after it.
    knee: Option<(f64, f64)>,
}

const STICKS: [Stick; 2] = [
    Stick {
        vendor: "Kingston",
        model: "DataTraveler 3.0",
        size_bytes: 31_024_349_184,
        share: 0.55,
        centres: (36.0, 14.0, 38.0),
        iops: (1900.0, 310.0),
        knee: Some((8.0, 0.35)),
    },
    Stick {
        vendor: "SanDisk",
        model: "Ultra Fit",
        size_bytes: 30_752_000_000,
        share: 0.45,
        centres: (40.0, 17.0, 41.0),
        iops: (2300.0, 420.0),
        knee: None,
    },
];

const SPREAD: f64 = 0.08;
const MANFID: &str = "0x000015";
const LIFE_LIMIT: u32 = 70;
const FAST_RATE: f64 = 4.0;
const CURVE_SECONDS: usize = 20;

/// The factory's config file, over the built-in quick profile: every test for 1.5 s (the
/// write curve for its 20 s), the eMMC through files, the stick raw.
fn factory_config(format: &str, wear_limit: bool) -> String {
    let mut y = format!(
        "description: factory matrix\n\
         report_format: {format}\n\
         wait_devices: 20s\n\
         devices:\n\
         \x20 - {{select: {{class: emmc}}, target: {{dir: /var/lib/usbperf/scratch}}, required: true, label: on-module eMMC}}\n\
         \x20 - {{select: {{class: usb}}, target: raw, label: USB host port}}\n\
         tests:\n"
    );
    for &w in workloads() {
        let runtime = if w == WorkloadKind::WriteCurve {
            "20s"
        } else {
            "1500ms"
        };
        y.push_str(&format!(
            "  - {{workload: {}, runtime: {runtime}}}\n",
            w.as_str()
        ));
    }
    y.push_str(
        "thresholds:\n\
         \x20 - {select: {class: emmc}, workload: seq-write, min_mib_per_s: 10}\n\
         \x20 - {select: {class: usb}, workload: seq-write, min_mib_per_s: 5}\n\
         \x20 - {select: {class: usb}, workload: rand-read, min_iops: 500}\n\
         \x20 - {select: {class: usb}, min_link_mbps: 480}\n",
    );
    if wear_limit {
        y.push_str(&format!(
            "  - {{select: {{class: emmc}}, max_life_used_percent: {LIFE_LIMIT}}}\n"
        ));
    }
    y
}

/// Every workload, in the order the product declares them.
fn workloads() -> &'static [WorkloadKind] {
    <WorkloadKind as clap::ValueEnum>::value_variants()
}

/// The config a unit of this fleet resolves: the product's own parser and layering.
fn resolved_config(format: &str, wear_limit: bool) -> Result<Config, String> {
    let mut layers =
        config::load_profile("quick", &[], &mut Vec::new()).map_err(|e| e.to_string())?;
    let file = "/etc/usbperf/usbperf.yaml";
    let text = factory_config(format, wear_limit);
    layers.push((
        file.to_string(),
        config::parse(&text, file).map_err(|e| e.to_string())?,
    ));
    Ok(config::resolve(layers))
}

/// A seeded stream of splitmix64 numbers: the product's own mixer over a counter.
struct Rng {
    seed: u64,
    n: u64,
}

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng {
            seed: mix64(seed),
            n: 0,
        }
    }

    fn next_u64(&mut self) -> u64 {
        self.n += 1;
        mix64(
            self.seed
                .wrapping_add(self.n.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        )
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal deviate (Box-Muller).
    fn gauss(&mut self) -> f64 {
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// A normal deviate clipped to +-2.
    fn g(&mut self) -> f64 {
        self.gauss().clamp(-2.0, 2.0)
    }

    fn vary(&mut self, centre: f64) -> f64 {
        centre * (1.0 + SPREAD * self.g())
    }

    fn hex(&mut self, digits: usize) -> String {
        let mut s = String::new();
        while s.len() < digits {
            s.push_str(&format!("{:016x}", self.next_u64()));
        }
        s.truncate(digits);
        s
    }

    /// A uniformly shuffled 0..n (Fisher-Yates).
    fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
        v
    }
}

/// A version 4 UUID from two numbers already drawn.
fn uuid_of(a: u64, b: u64) -> String {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a.to_be_bytes());
    bytes[8..].copy_from_slice(&b.to_be_bytes());
    uuid_v4(bytes)
}

fn op_figures(ios: u64, bytes: u64, seconds: f64, p50: u64, p99: u64) -> OpFigures {
    OpFigures {
        ios,
        bytes,
        mib_per_s: bytes as f64 / 1048576.0 / seconds,
        iops: ios as f64 / seconds,
        latency: LatencySummary {
            min_ns: p50 / 3,
            mean_ns: (p50 + p99) / 3,
            p50_ns: p50,
            p90_ns: (p50 + p99) / 2,
            p99_ns: p99,
            p99_9_ns: p99 * 11 / 10,
            max_ns: p99 * 12 / 10,
        },
        stalls: Stalls {
            over_1s: 0,
            over_5s: 0,
            longest_ns: p99 * 12 / 10,
        },
    }
}

/// What a cell measures: `mib_s` for large blocks, `iops` for 4 KiB ones.
struct Figure {
    workload: WorkloadKind,
    mib_s: f64,
    iops: f64,
    /// The write curve's knee: seconds, and the share of the rate after it.
    knee: Option<(f64, f64)>,
}

/// One not yet judged cell of device `dev` (tested raw, or through a file).
fn cell(
    rng: &mut Rng,
    cfg: &Config,
    when: DateTime<Utc>,
    (dev, raw): (&str, bool),
    f: Figure,
) -> Cell {
    let Figure {
        workload,
        mut mib_s,
        mut iops,
        knee,
    } = f;
    let index = workloads().iter().position(|w| *w == workload).unwrap_or(0);
    let target = if raw {
        PathBuf::from(format!("/dev/{dev}"))
    } else {
        PathBuf::from(format!(
            "/var/lib/usbperf/scratch/.usbperf-testfile-{index}.tmp"
        ))
    };
    let spec = cfg
        .tests
        .iter()
        .find(|t| t.workload == workload)
        .expect("the factory config tests every workload");
    let params = spec.params(target.clone(), EngineRequest::Auto);
    let bs = params.block_bytes;
    if bs == 4096 {
        mib_s = iops * bs as f64 / 1048576.0;
    } else {
        iops = mib_s * 1048576.0 / bs as f64;
    }
    let seconds = 1.5;
    let bytes = ((mib_s * 1048576.0 * seconds) as u64 / bs * bs).max(bs);
    let ios = bytes / bs;
    let seconds = bytes as f64 / 1048576.0 / mib_s;
    let qd = if bs == 4096 { 64.0 } else { 1.0 };
    let p50 = (qd * 1e9 / iops.max(1.0)) as u64;
    // A fixed tail ratio: a second random factor would widen the tails past the clip.
    let fig = op_figures(ios, bytes, seconds, p50, p50 * 3);
    let reads = matches!(
        workload,
        WorkloadKind::ReadBuffered
            | WorkloadKind::SeqRead
            | WorkloadKind::RandRead
            | WorkloadKind::Mixed
            | WorkloadKind::Verify
    );
    let writes = matches!(
        workload,
        WorkloadKind::SeqWrite
            | WorkloadKind::RandWrite
            | WorkloadKind::Mixed
            | WorkloadKind::Verify
            | WorkloadKind::WriteCurve
    );
    let mut result = BenchResult {
        workload,
        engine: EngineKind::Uring,
        engine_reason: "uring engine (auto): io_uring with SINGLE_ISSUER|DEFER_TASKRUN|\
                        COOP_TASKRUN, one ring per job, registered buffers and files"
            .into(),
        stopped_by: if params.time_based {
            StopReason::Time
        } else {
            StopReason::Size
        },
        target: TargetReport {
            path: target,
            kind: if raw {
                TargetKind::BlockDevice
            } else {
                TargetKind::File
            },
            created: !raw,
            region_bytes: params.size_bytes.unwrap_or(16 << 20),
            queue: Some(QueueInfo {
                device: dev.into(),
                read_ahead_kb: Some(128),
                scheduler: Some("mq-deadline".into()),
            }),
        },
        params,
        bytes,
        ios,
        seconds,
        mib_per_s: mib_s,
        iops,
        all: fig.clone(),
        read: reads.then(|| fig.clone()),
        write: writes.then(|| fig.clone()),
        cpu: CpuFigures {
            usr_s: 0.01,
            sys_s: 0.02,
            usr_percent: 1.0,
            sys_percent: 2.0,
            cpu_ns_per_io: 30000.0,
        },
        flush_ns: None,
        cache_drop: None,
        curve: None,
        verify: None,
        precision: None,
    };
    if workload == WorkloadKind::WriteCurve {
        let mut samples = Vec::new();
        let mut cum = 0.0;
        for t in 1..=CURVE_SECONDS {
            let after = knee.filter(|k| t as f64 > k.0).map_or(1.0, |k| k.1);
            let rate = mib_s * after * (1.0 + 0.03 * rng.g());
            cum += rate;
            samples.push(CurveSample {
                t_s: t as f64,
                cumulative_mib: cum,
                mib_per_s: rate,
            });
        }
        result.curve = Some(CurveReport {
            interval_ms: 1000,
            samples,
            knee: knee.map(|(t, after)| Knee {
                t_s: t,
                cumulative_mib: mib_s * t,
                before_mib_per_s: mib_s,
                after_mib_per_s: mib_s * after,
                drop_percent: 100.0 * (1.0 - after),
            }),
        });
        result.mib_per_s = cum / CURVE_SECONDS as f64;
    }
    if workload == WorkloadKind::Verify {
        result.verify = Some(VerifyReport {
            mode: VerifyMode::Quick,
            phase: VerifyPhase::Both,
            seed: result.params.seed,
            blocks_written: 16,
            blocks_checked: 16,
            mismatched_blocks: 0,
            mismatches: Vec::new(),
            capacity: None,
        });
    }
    Cell {
        workload,
        status: CellStatus::Pending,
        reasons: Vec::new(),
        started_at: Some(when),
        wall_seconds: Some(seconds + 0.01),
        params: None,
        result: Some(result),
        kernel_events: Vec::new(),
        concurrent_with: Vec::new(),
        machine_busy_percent: None,
        attempts: Vec::new(),
    }
}

/// Scales a result's throughput figures by `f`.
fn scale(r: &mut BenchResult, f: f64) {
    r.mib_per_s *= f;
    r.iops *= f;
    for part in std::iter::once(&mut r.all)
        .chain(r.read.as_mut())
        .chain(r.write.as_mut())
    {
        part.mib_per_s *= f;
        part.iops *= f;
    }
}

/// A unit as built once: its identity, time and devices before any verdict.
struct Unit {
    when: DateTime<Utc>,
    identity: UnitIdentity,
    devices: Vec<DeviceReport>,
    version: &'static str,
}

fn unit(
    rng: &mut Rng,
    cfg: &Config,
    o: &Options,
    start: DateTime<Utc>,
    i: usize,
    planted_outlier: bool,
    slow_port: bool,
) -> Unit {
    let board = if rng.unit() < BOARDS[0].share {
        &BOARDS[0]
    } else {
        &BOARDS[1]
    };
    let stick = if rng.unit() < STICKS[0].share {
        &STICKS[0]
    } else {
        &STICKS[1]
    };
    let offset_s = (i as f64 + rng.unit()) * o.days * 86400.0 / o.units as f64;
    let when = start + Duration::microseconds((offset_s * 1e6) as i64);
    let serial = format!("{:08}", 15_000_000 + i);
    let machine_id = rng.hex(32);

    // The on-module eMMC, through test files on its root filesystem.
    let (rb, sw, sr) = board.centres;
    let slow_board = !std::ptr::eq(board, &BOARDS[0]);
    let mut cells = Vec::new();
    for &w in workloads() {
        let mib = match w {
            WorkloadKind::ReadBuffered => rb,
            WorkloadKind::SeqWrite => sw,
            WorkloadKind::SeqRead => sr,
            WorkloadKind::Verify => sr * 0.4,
            WorkloadKind::WriteCurve => continue,
            _ => 0.0,
        };
        let mut iops = match w {
            WorkloadKind::RandRead => 3100.0,
            WorkloadKind::RandWrite => 1200.0,
            WorkloadKind::Mixed => 2000.0,
            _ => 0.0,
        };
        if slow_board {
            iops *= 0.6;
        }
        let f = Figure {
            workload: w,
            mib_s: rng.vary(mib),
            iops: rng.vary(iops),
            knee: None,
        };
        cells.push(cell(rng, cfg, when, ("mmcblk0", false), f));
    }
    let root = Mount {
        mountpoint: "/".into(),
        fstype: "ext4".into(),
        read_only: false,
    };
    let emmc = DeviceReport {
        name: "mmcblk0".into(),
        label: Some("on-module eMMC".into()),
        rule: 0,
        disk: Disk {
            name: "mmcblk0".into(),
            devnum: Some("179:0".into()),
            dev_node: "/dev/mmcblk0".into(),
            devpath: "/devices/platform/soc/5b010000.mmc/mmc_host/mmc0/mmc0:0001/block/mmcblk0"
                .into(),
            class: DeviceClass::Emmc,
            model: Some(board.emmc_model.into()),
            serial: Some(format!("0x{:08x}", rng.next_u64() as u32)),
            size_bytes: Some(15_758_000_128),
            logical_block_size_bytes: Some(512),
            physical_block_size_bytes: Some(512),
            rotational: Some(false),
            removable: Some(false),
            read_only: Some(false),
            partitions: vec![Partition {
                name: "mmcblk0p1".into(),
                number: Some(1),
                size_bytes: Some(15_700_000_000),
                start_sector: Some(2048),
                mounts: vec![root],
                ..Partition::default()
            }],
            ..Disk::default()
        },
        placement: Placement::File(FileTarget {
            dir: "/var/lib/usbperf/scratch".into(),
            disk: Some("mmcblk0".into()),
            mountpoint: "/".into(),
            fstype: "ext4".into(),
            free_bytes: 9_000_000_000,
            headroom_bytes: 1_575_800_012,
            max_file_bytes: 7_424_199_988,
        }),
        link_checks: Vec::new(),
        cells,
        power_cut: None,
        verdict: Verdict::default(),
    };

    // The USB stick, raw.
    let speed = if slow_port { 12.0 } else { 480.0 };
    let (rbu, swu, sru) = stick.centres;
    let (rr, rw) = stick.iops;
    let mut cells = Vec::new();
    for &w in workloads() {
        // A stick without a knee sustains about what the other averages over its curve, so
        // the class stays one population for write-curve too.
        let mut mib = match w {
            WorkloadKind::ReadBuffered => rbu,
            WorkloadKind::SeqWrite => swu,
            WorkloadKind::SeqRead => sru,
            WorkloadKind::Verify => sru * 0.4,
            WorkloadKind::WriteCurve if stick.knee.is_some() => swu,
            WorkloadKind::WriteCurve => swu * 0.6,
            _ => 0.0,
        };
        let mut iops = match w {
            WorkloadKind::RandRead => rr,
            WorkloadKind::RandWrite => rw,
            WorkloadKind::Mixed => rr * 0.7 + rw * 0.3,
            _ => 0.0,
        };
        if slow_port {
            // Full speed moves about 1 MiB/s whatever the stick could do.
            mib = mib.min(1.05);
            iops = iops.min(240.0);
        }
        let f = Figure {
            workload: w,
            mib_s: rng.vary(mib),
            iops: rng.vary(iops),
            knee: stick.knee,
        };
        let mut c = cell(rng, cfg, when, ("sda", true), f);
        if w == WorkloadKind::SeqWrite && planted_outlier {
            if let Some(r) = c.result.as_mut() {
                let f = swu * 0.2 / r.mib_per_s;
                scale(r, f);
            }
        }
        cells.push(c);
    }
    let hub = UsbHop {
        port_path: "usb1".into(),
        speed_mbps: Some(480.0),
        version: Some("2.00".into()),
        vendor_id: Some("1d6b".into()),
        product_id: Some("0002".into()),
        product: Some("EHCI Host Controller".into()),
        ports: Some(2),
    };
    let usb = DeviceReport {
        name: "sda".into(),
        label: Some("USB host port".into()),
        rule: 1,
        disk: Disk {
            name: "sda".into(),
            devnum: Some("8:0".into()),
            dev_node: "/dev/sda".into(),
            devpath: "/devices/platform/soc/5b0d0000.usb/ci_hdrc.0/usb1/1-2/1-2:1.0/host0/\
                      target0:0:0/0:0:0:0/block/sda"
                .into(),
            class: DeviceClass::Usb,
            vendor: Some(stick.vendor.into()),
            model: Some(stick.model.into()),
            serial: Some(format!("{:016X}", rng.next_u64())),
            id_path: Some("platform-ci_hdrc.0-usb-0:2:1.0-scsi-0:0:0:0".into()),
            size_bytes: Some(stick.size_bytes),
            logical_block_size_bytes: Some(512),
            physical_block_size_bytes: Some(512),
            rotational: Some(false),
            removable: Some(true),
            read_only: Some(false),
            usb: Some(UsbLink {
                bus: Some(1),
                port_path: "1-2".into(),
                devnum: Some(3),
                speed_mbps: Some(speed),
                version: Some("3.20".into()),
                vendor_id: Some("0951".into()),
                product_id: Some("1666".into()),
                manufacturer: Some(stick.vendor.into()),
                product: Some(stick.model.into()),
                interface: Some("1-2:1.0".into()),
                driver: Some("usb-storage".into()),
                root_hub: Some(hub),
                min_chain_speed_mbps: Some(speed),
                host_controller_driver: Some("ci_hdrc".into()),
                ..UsbLink::default()
            }),
            ..Disk::default()
        },
        placement: Placement::RawWrite,
        link_checks: Vec::new(),
        cells,
        power_cut: None,
        verdict: Verdict::default(),
    };
    Unit {
        when,
        identity: UnitIdentity {
            hostname: Some(format!("apalis-{serial}")),
            machine_id: Some(machine_id),
            model: Some(board.model.into()),
            serial: Some(serial),
            identity_source: Some("device-tree".into()),
            kernel_release: Some("6.6.23-7.0.0".into()),
            architecture: Some("aarch64".into()),
            cpu_model: Some("Cortex-A53".into()),
            cpu_count: 4,
            memory_bytes: 4_123_456_789,
            image: None,
        },
        devices: vec![emmc, usb],
        version: if (i as f64) < o.units as f64 * 0.8 {
            "0.1.0"
        } else {
            "0.1.1"
        },
    }
}

/// The kernel's life time estimate of a wear in % (a 10 % band: raw 1 = 0-10 %).
fn band(wear: f64) -> LifeTime {
    let raw = (wear / 10.0).ceil().clamp(1.0, 11.0) as u8;
    LifeTime::from_raw("life_time", raw)
        .ok()
        .flatten()
        .expect("1..=11 is a band")
}

/// Gives the eMMC its CID and a wear of `wear` % (type B at half of it).
fn wear_at(devices: &mut [DeviceReport], part_serial: &str, wear: f64) {
    for d in devices
        .iter_mut()
        .filter(|d| d.disk.class == DeviceClass::Emmc)
    {
        d.disk.mmc = Some(MmcInfo {
            card: "mmc0:0001".into(),
            card_type: Some("MMC".into()),
            manfid: Some(MANFID.into()),
            serial: Some(part_serial.into()),
            host: Some("mmc0".into()),
            ..MmcInfo::default()
        });
        let mut health = Health {
            emmc: Some(EmmcHealth {
                life_time_a: Some(band(wear)),
                life_time_b: Some(band(wear / 2.0)),
                pre_eol: Some(PreEol::Normal),
                life_source: Some("sysfs".into()),
                ..EmmcHealth::default()
            }),
            ..Health::default()
        };
        // The flat summary a threshold reads, as discovery derives it.
        health.summarize();
        d.disk.health = Some(health);
    }
}

/// Judges every cell and device with the product's verdict, as the factory run does.
fn judge(cfg: &Config, devices: &mut [DeviceReport]) -> Verdict {
    let facts = SystemFacts::default();
    for d in devices.iter_mut() {
        let rules = applicable(&cfg.thresholds, &d.disk, &facts);
        for c in &mut d.cells {
            let Some(r) = &c.result else { continue };
            let reasons = result_reasons(r, &rules);
            let failed = reasons.iter().any(|r| r.kind != ReasonKind::Note);
            c.status = if failed {
                CellStatus::Failed
            } else {
                CellStatus::Passed
            };
            c.reasons = reasons;
        }
        let required = cfg.devices.get(d.rule).is_some_and(|r| r.required);
        judge_device(d, &rules, None, required);
    }
    judge_unit(devices, None, &[], None)
}

fn report(
    cfg: &Config,
    u: &Unit,
    devices: Vec<DeviceReport>,
    when: DateTime<Utc>,
    id: (u64, u64),
) -> Report {
    let mut devices = devices;
    let verdict = judge(cfg, &mut devices);
    Report {
        schema_version: 2,
        report_id: Some(uuid_of(id.0, id.1)),
        tool: Tool {
            name: "usbperf-matrix".into(),
            version: u.version.into(),
            features: vec!["udev".into(), "uring".into()],
        },
        started_at: when,
        finished_at: Some(when + Duration::seconds(31)),
        status: RunStatus::Complete,
        interrupted_by: None,
        exit_code: Some(if verdict.pass { 0 } else { 1 }),
        unit: u.identity.clone(),
        config: cfg.clone(),
        inventory_backend: "udev".into(),
        devices,
        missing_devices: Vec::new(),
        verdict,
        warnings: Vec::new(),
        schedule: None,
        flash: None,
    }
}

/// The report as builds before schema 2 wrote it: reasons as sentences, the id of 16 hex
/// digits or none, no schedule in the config. The types' own encoding, in their order (a YAML
/// mapping keeps it), with those three changed.
fn as_schema_1(r: &Report, id: Option<String>) -> YamlValue {
    fn sentences(v: &mut YamlValue) {
        match v {
            YamlValue::Mapping(m) => {
                for (k, x) in m.iter_mut() {
                    if k.as_str() == Some("reasons") {
                        if let YamlValue::Sequence(a) = x {
                            for r in a.iter_mut() {
                                if let Some(t) = r.get("text").cloned() {
                                    *r = t;
                                }
                            }
                        }
                    } else {
                        sentences(x);
                    }
                }
            }
            YamlValue::Sequence(a) => a.iter_mut().for_each(sentences),
            _ => {}
        }
    }
    let mut v = serde_norway::to_value(r).expect("a report serialises");
    sentences(&mut v);
    let YamlValue::Mapping(m) = v else {
        unreachable!("a report is a mapping")
    };
    let mut out = serde_norway::Mapping::new();
    out.insert("schema_version".into(), 1.into());
    if let Some(id) = id {
        out.insert("report_id".into(), id.into());
    }
    for (k, mut x) in m {
        match k.as_str() {
            Some("schema_version" | "report_id") => continue,
            Some("config") => {
                if let YamlValue::Mapping(c) = &mut x {
                    c.shift_remove("schedule");
                }
            }
            _ => {}
        }
        out.insert(k, x);
    }
    YamlValue::Mapping(out)
}

fn write(o: &Options, r: &Report, v1_id: Option<Option<String>>) -> Result<PathBuf, String> {
    let format = if o.format == "json" {
        ReportFormat::Json
    } else {
        ReportFormat::Yaml
    };
    let id = match &v1_id {
        Some(Some(id)) => id.clone(),
        // No id: the machine id names the file, as it did.
        Some(None) => r.unit.machine_id.clone().unwrap_or_default(),
        None => r.report_id.clone().unwrap_or_default(),
    };
    let path = o
        .out
        .join(report_file_name(&r.unit, r.started_at, &id, format));
    let bytes = match v1_id {
        Some(id) => {
            let v = as_schema_1(r, id);
            if format == ReportFormat::Json {
                let mut b = serde_json::to_vec_pretty(&v).map_err(|e| e.to_string())?;
                b.push(b'\n');
                b
            } else {
                serde_norway::to_string(&v)
                    .map_err(|e| e.to_string())?
                    .into_bytes()
            }
        }
        None => r.encode(format == ReportFormat::Json)?,
    };
    // create_new: two reports of one name would be a generator fault, never a replaced file.
    use std::io::Write;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .and_then(|mut f| f.write_all(&bytes))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Writes the fleet `o` describes into `o.out`.
pub fn generate(o: &Options) -> Result<Fleet, String> {
    let start = NaiveDate::parse_from_str(&o.start, "%Y-%m-%d")
        .map_err(|e| format!("--start {}: {e} (write YYYY-MM-DD)", o.start))?
        .and_hms_opt(0, 0, 0)
        .expect("midnight exists")
        .and_utc();
    std::fs::create_dir_all(&o.out).map_err(|e| format!("{}: {e}", o.out.display()))?;
    let wear = o.field_months > 0;
    let cfg = resolved_config(&o.format, wear)?;
    let mut field_cfg = cfg.clone();
    field_cfg.phase = Phase::Field;
    let mut rng = Rng::new(o.seed);
    let order = rng.permutation(o.units);
    let n_slow = (o.units as f64 * o.slow_port_percent / 100.0).round() as usize;
    let n_slow = n_slow.min(o.units);
    let slow: Vec<usize> = order[..n_slow].to_vec();
    let outl: Vec<usize> = order[n_slow..(n_slow + o.outliers).min(o.units)].to_vec();
    // Its own stream: the figures of every report stay those of the same seed without it.
    let mut wrng = Rng::new(o.seed.wrapping_mul(7919).wrapping_add(1));
    // The fast-wearing parts are on the larger board, from a drawn unit on: the fleet names a
    // fast part only among enough parts of its board (fleet::wear::MIN_PARTS).
    let fast_from = (wrng.unit() * o.units as f64 / 2.0) as usize;
    let mut fast_left = if wear { o.fast_wear } else { 0 };
    let builds: Vec<&str> = o.builds.split(',').filter(|b| !b.is_empty()).collect();
    let mut truth = Vec::new();
    let mut files = Vec::new();
    for i in 0..o.units {
        let mut u = unit(
            &mut rng,
            &cfg,
            o,
            start,
            i,
            outl.contains(&i),
            slow.contains(&i),
        );
        let serial = u.identity.serial.clone().unwrap_or_default();
        if outl.contains(&i) {
            truth.push(Planted {
                unit: serial.clone(),
                device: "sda".into(),
                problem: "seq-write-outlier".into(),
                part: None,
            });
        }
        if slow.contains(&i) {
            truth.push(Planted {
                unit: serial.clone(),
                device: "sda".into(),
                problem: "slow-port".into(),
                part: None,
            });
        }
        if !builds.is_empty() {
            let k = (i * builds.len() / o.units).min(builds.len() - 1);
            u.identity.image = Some(ImageIdentity {
                id: Some("acme".into()),
                version_id: Some(builds[k].into()),
                pretty_name: Some(format!("Acme Linux {}", builds[k])),
                ..ImageIdentity::default()
            });
            if k == builds.len() - 1 {
                for spec in &o.regress {
                    regress(&mut u.devices, spec)?;
                }
            }
        }
        let ids = (rng.next_u64(), rng.next_u64());
        let v1_id =
            |n: u64| (o.schema == 1).then(|| o.report_ids.then(|| format!("{:016x}", mix64(n))));
        let mut part = None;
        if wear {
            let fast = fast_left > 0
                && i >= fast_from
                && u.identity.model.as_deref() == Some(BOARDS[0].model);
            fast_left -= usize::from(fast);
            let p = format!("0x{:08x}", wrng.next_u64() as u32);
            let rate = if fast {
                FAST_RATE
            } else {
                (0.8 + 0.15 * wrng.gauss()).clamp(0.5, 1.1)
            };
            let base = 1.0 + 3.0 * wrng.unit();
            wear_at(&mut u.devices, &p, base);
            if fast {
                truth.push(Planted {
                    unit: serial.clone(),
                    device: "mmcblk0".into(),
                    problem: "fast-wear".into(),
                    part: Some(format!("emmc {MANFID} {p}")),
                });
            }
            part = Some((p, base, rate));
        }
        let r = report(&cfg, &u, u.devices.clone(), u.when, ids);
        check_verdict(&r, slow.contains(&i) || outl.contains(&i))?;
        files.push(write(o, &r, v1_id(ids.0))?);
        if let Some((p, base, rate)) = part {
            for m in 1..=o.field_months {
                let hours = wrng.unit() * 20.0;
                let when = u.when
                    + Duration::seconds(
                        (30.436875 * 86400.0 * f64::from(m) + hours * 3600.0) as i64,
                    );
                let mut devices = u.devices.clone();
                wear_at(&mut devices, &p, base + rate * f64::from(m));
                let ids = (wrng.next_u64(), wrng.next_u64());
                let f = report(&field_cfg, &u, devices, when, ids);
                files.push(write(o, &f, v1_id(ids.0))?);
            }
        }
    }
    if let Some(t) = &o.truth {
        let text = serde_json::to_string_pretty(&truth).map_err(|e| e.to_string())?;
        std::fs::write(t, text).map_err(|e| format!("{}: {e}", t.display()))?;
    }
    files.sort();
    Ok(Fleet {
        files,
        truth,
        slow_ports: slow.len(),
        outliers: outl.len(),
    })
}

/// The product's verdict must be the planted one: an unplanted unit passes, a planted one
/// fails. A generator whose data the verdict judges otherwise would test nothing.
fn check_verdict(r: &Report, planted: bool) -> Result<(), String> {
    if r.verdict.pass == planted {
        let why: Vec<&str> = r.verdict.reasons.iter().map(|x| x.text.as_str()).collect();
        return Err(format!(
            "unit {}: the verdict is {} but the unit is {}planted: {}",
            r.unit.serial.as_deref().unwrap_or("?"),
            if r.verdict.pass { "pass" } else { "fail" },
            if planted { "" } else { "not " },
            why.join("; ")
        ));
    }
    Ok(())
}

/// `CLASS:WORKLOAD:PERCENT`: scales one workload's figures on one class's devices.
fn regress(devices: &mut [DeviceReport], spec: &str) -> Result<(), String> {
    let bad = || format!("--regress {spec}: write CLASS:WORKLOAD:PERCENT (emmc:seq-write:-18)");
    let mut it = spec.split(':');
    let (Some(class), Some(workload), Some(pct), None) =
        (it.next(), it.next(), it.next(), it.next())
    else {
        return Err(bad());
    };
    let pct: f64 = pct.parse().map_err(|_| bad())?;
    let f = 1.0 + pct / 100.0;
    for d in devices
        .iter_mut()
        .filter(|d| d.disk.class.as_str() == class)
    {
        for c in d
            .cells
            .iter_mut()
            .filter(|c| c.workload.as_str() == workload)
        {
            if let Some(r) = c.result.as_mut() {
                scale(r, f);
            }
        }
    }
    Ok(())
}
