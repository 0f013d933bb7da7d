//! Owns which devices of a unit could be tested at the same time: the part of each
//! disk's path that limits its throughput, its *lane*. Disks in one lane share a bus (a USB
//! root hub and every hub below it, an MMC host, an ATA port and any port multiplier on it,
//! an NVMe subsystem, a SCSI host adapter such as a UFS host) and run one after another;
//! different lanes share nothing that limits throughput. With `schedule: auto` the lanes run
//! at the same time, each one device after another, and a cell whose figure the CPU rather
//! than the device could limit runs within a CPU budget or alone ([`admission`],
//! [`cpu_limited`]). Pure: sysfs
//! device paths, classes and measured CPU in, decisions out; `matrix::run` does the running.

pub use crate::config::{LaneKey, ScheduleMode};
use crate::discover::{DeviceClass, Disk};
pub use crate::report::schedule::{AloneCell, AloneRule, Lane};
use crate::workload::WorkloadParams;

/// The machine's CPU time so far, from the first line of `/proc/stat`, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTicks {
    /// user, nice, system, irq, softirq, steal: time the CPUs could not give an I/O thread.
    pub busy: u64,
    /// busy plus idle and iowait (waiting for I/O is idle CPU).
    pub total: u64,
}

impl CpuTicks {
    /// Parses `/proc/stat`'s `cpu` line (`cpu  user nice system idle iowait irq softirq steal
    /// guest guest_nice`; guest time is already in user). `None` when it is not there.
    pub fn parse(stat: &str) -> Option<CpuTicks> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        if v.len() < 4 {
            return None;
        }
        let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
        Some(CpuTicks {
            busy,
            total: busy + at(3) + at(4),
        })
    }
}

/// How busy the machine's CPUs were between two samples, in % of all of them.
pub fn busy_percent(before: CpuTicks, after: CpuTicks) -> Option<f64> {
    let total = after.total.checked_sub(before.total)?;
    let busy = after.busy.checked_sub(before.busy)?;
    (total > 0).then(|| 100.0 * busy as f64 / total as f64)
}

/// The machine's busy time per I/O of a cell that ran alone, in ns: `busy_percent` of all
/// `cpus` over `wall_seconds`, over its `ios`. Everything the machine did meanwhile counts
/// (an upper bound of the cell's own cost, which is what a prediction wants). `None` without
/// I/Os or time.
pub fn machine_ns_per_io(
    busy_percent: f64,
    wall_seconds: f64,
    cpus: usize,
    ios: u64,
) -> Option<f64> {
    (ios > 0 && wall_seconds > 0.0 && busy_percent >= 0.0)
        .then(|| busy_percent / 100.0 * cpus.max(1) as f64 * wall_seconds * 1e9 / ios as f64)
}

/// Above this, the machine's CPUs were the limit of whatever ran at the time.
pub const SATURATED_PERCENT: f64 = 90.0;

/// The machine rule, measured after a cell ran beside others: the CPUs were busy at least
/// [`SATURATED_PERCENT`] of its wall time (interrupts, softirqs and other processes count:
/// on a small SoC the USB and SD interrupt load of several buses at once can saturate the
/// CPUs without any test thread using much CPU itself).
pub fn machine_saturated(busy_percent: f64, together: usize) -> bool {
    together > 1 && busy_percent >= SATURATED_PERCENT
}

/// Blocks this large cost so little CPU per byte that any device class is the limit.
pub const SMALL_BLOCK: u64 = 64 << 10;

/// Classes whose random I/O a core sustains many times over: a USB stick, an SD card or an
/// eMMC does a few thousand 4 KiB IOPS at most, a spinning SATA or SCSI disk a few hundred,
/// while a Cortex-A55 core issues tens of thousands. Only a real disk's `rotational` counts:
/// the kernel sets it on loop devices over any file.
fn device_bound_class(disk: &Disk) -> bool {
    match disk.class {
        DeviceClass::Usb | DeviceClass::Sd | DeviceClass::Emmc => true,
        DeviceClass::Sata | DeviceClass::Scsi => disk.rotational == Some(true),
        _ => false,
    }
}

/// What the run measured before a cell, for [`admission`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// The device's fastest figure so far in this run, in bytes/s: no device does small
    /// random blocks faster than it streams, so over the block it bounds the cell's I/O rate.
    pub max_bytes_per_s: f64,
    /// CPU per I/O measured in this run: per cell the larger of its job threads' usr + sys
    /// over its I/Os and, for a cell that ran alone, the machine's busy time over them
    /// ([`machine_ns_per_io`]); the largest of the cells with blocks no larger than this
    /// one's, else of this device's cells (larger blocks cost more per I/O: an upper bound).
    pub cpu_ns_per_io: f64,
}

impl Measured {
    /// The most CPU the cell can take, in % of one CPU: its highest possible I/O rate times
    /// the CPU each I/O costs.
    pub fn predicted_cpu_percent(&self, block_bytes: u64) -> f64 {
        let ios_per_s = self.max_bytes_per_s / block_bytes.max(1) as f64;
        ios_per_s * self.cpu_ns_per_io / 1e9 * 100.0
    }
}

/// The CPU the cells the CPU could limit may take together, in % of all CPUs: below the 90 %
/// at which [`machine_saturated`] calls the machine the limit, with room for the interrupts
/// and kernel threads of the device-bound cells beside them.
pub const BUDGET_PERCENT: f64 = 75.0;

/// [`BUDGET_PERCENT`] of `cpus`, in % of one CPU.
pub fn budget(cpus: usize) -> f64 {
    BUDGET_PERCENT * cpus.max(1) as f64
}

/// How a cell may run beside others in an `auto` run, decided before it runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admission {
    /// Beside anything: large blocks, or a device class a core keeps up with many times over.
    Free,
    /// Small blocks on a fast device the run has measured: beside others while the predicted
    /// CPU of such cells together ([`Measured::predicted_cpu_percent`], % of one CPU) stays
    /// within the [`budget`].
    Budget(f64),
    /// Alone: nothing measured yet to predict it from, or predicted over the whole budget.
    Alone(AloneRule, Option<f64>),
}

/// The rule decided before a cell runs. Small blocks on a fast device (NVMe, UFS, a SATA or
/// SCSI SSD, virtio, loop, zram), whatever the queue depth, run alone unless the run already
/// measured the device and the CPU: then they run within the [`budget`] of `cpus`, alone
/// when their prediction alone is over it (the rule [`cpu_limited`] applies after the fact).
pub fn admission(
    params: &WorkloadParams,
    disk: &Disk,
    measured: Option<Measured>,
    cpus: usize,
) -> Admission {
    if params.block_bytes >= SMALL_BLOCK || device_bound_class(disk) {
        return Admission::Free;
    }
    match measured {
        None => Admission::Alone(AloneRule::SmallBlocksFastDevice, None),
        Some(m) => {
            let cpu = m.predicted_cpu_percent(params.block_bytes);
            if cpu > budget(cpus) {
                Admission::Alone(AloneRule::PredictedCpu, Some(cpu))
            } else {
                Admission::Budget(cpu)
            }
        }
    }
}

/// The rule measured after a cell ran beside others: its own CPU (usr + sys of its job
/// threads over its wall time, in % of one CPU) above half its fair share of the machine's
/// `cpus` among the `together` cells that overlapped it (itself included). Then the CPU may
/// have been the limit and the cell is measured again alone.
pub fn cpu_limited(cpu_percent: f64, cpus: usize, together: usize) -> bool {
    let share = 100.0 * cpus.max(1) as f64 / together.max(1) as f64;
    together > 1 && cpu_percent > share / 2.0
}

/// The lane of one disk, from its sysfs device path (`/devices/pci0000:00/.../block/sda`).
pub fn lane_key(name: &str, devpath: &str) -> String {
    let comps: Vec<&str> = devpath.split('/').filter(|c| !c.is_empty()).collect();
    let numbered = |c: &str, prefix: &str| {
        c.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    // USB first: a USB-SATA bridge or card reader is limited by its root hub, whatever is
    // behind it. The root hub (`usbN`) is the first USB component of the path.
    if let Some(c) = comps.iter().find(|c| numbered(c, "usb")) {
        return format!("usb:{c}");
    }
    // The MMC host (`mmc_host/mmcN`): the eMMC's user and boot areas share it, of course.
    if let Some(i) = comps.iter().position(|c| *c == "mmc_host") {
        if let Some(c) = comps.get(i + 1) {
            return format!("mmc:{c}");
        }
    }
    // libata's port (`ataN`): disks behind a port multiplier share it.
    if let Some(c) = comps.iter().find(|c| numbered(c, "ata")) {
        return format!("ata:{c}");
    }
    // An NVMe namespace hangs off its subsystem (`nvme-subsysN`), or off its controller.
    if let Some(c) = comps
        .iter()
        .find(|c| numbered(c, "nvme-subsys") || numbered(c, "nvme"))
    {
        return format!("nvme:{c}");
    }
    // Any other SCSI disk (UFS, a SAS/SCSI HBA, virtio-scsi): the adapter above `hostN`.
    if let Some(i) = comps.iter().position(|c| numbered(c, "host")) {
        if i > 0 {
            return format!("host:/{}", comps[..i].join("/"));
        }
    }
    // virtio-blk, loop, zram, dm: nothing shared with another disk's bus.
    format!("disk:{name}")
}

/// Joins the lanes a config says share a limit their paths do not show (`shared_lanes:`, from
/// a serial-versus-auto comparison on the board): each group becomes one lane, keyed by its
/// members joined with `+`, at the place of its first member.
pub fn join_shared(lanes: Vec<Lane>, shared: &[Vec<LaneKey>]) -> Vec<Lane> {
    let group_of = |key: &str| shared.iter().position(|g| g.iter().any(|k| k.0 == key));
    let mut out: Vec<(Option<usize>, Lane)> = Vec::new();
    for lane in lanes {
        let g = group_of(&lane.key);
        match out.iter_mut().find(|(og, _)| g.is_some() && *og == g) {
            Some((_, joined)) => {
                joined.key = format!("{}+{}", joined.key, lane.key);
                joined.disks.extend(lane.disks);
            }
            None => out.push((g, lane)),
        }
    }
    out.into_iter().map(|(_, l)| l).collect()
}

/// The lanes of `disks` (`(name, devpath)` in run order): a lane per key, in the order of
/// its first disk.
pub fn lanes<'a>(disks: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<Lane> {
    let mut out: Vec<Lane> = Vec::new();
    for (name, devpath) in disks {
        let key = lane_key(name, devpath);
        match out.iter_mut().find(|l| l.key == key) {
            Some(l) => l.disks.push(name.to_string()),
            None => out.push(Lane {
                key,
                disks: vec![name.to_string()],
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Device paths recorded from the QEMU guests (tests/fixtures/qemu/x86-q10-6.12.umockdev,
    /// armv7-emmc-board.umockdev) and from a board (tests/fixtures/umockdev).
    const X86: &[(&str, &str)] = &[
        ("mmcblk0", "/devices/pci0000:00/0000:00:08.0/mmc_host/mmc0/mmc0:7622/block/mmcblk0"),
        ("sda", "/devices/pci0000:00/0000:00:03.0/usb1/1-1/1-1:1.0/host0/target0:0:0/0:0:0:0/block/sda"),
        ("sdb", "/devices/pci0000:00/0000:00:04.0/usb2/2-1/2-1:1.0/host7/target7:0:0/7:0:0:0/block/sdb"),
        ("sdc", "/devices/pci0000:00/0000:00:1f.2/ata1/host1/target1:0:0/1:0:0:0/block/sdc"),
        ("sdd", "/devices/pci0000:00/0000:00:05.0/usb4/4-1/4-1:1.0/host8/target8:0:0/8:0:0:0/block/sdd"),
        ("sde", "/devices/pci0000:00/0000:00:05.0/usb4/4-2/4-2:1.0/host9/target9:0:0/9:0:0:0/block/sde"),
        ("sdf", "/devices/pci0000:00/0000:00:05.0/usb3/3-4/3-4.1/3-4.1:1.0/host10/target10:0:0/10:0:0:0/block/sdf"),
        ("sdg", "/devices/pci0000:00/0000:00:05.0/usb3/3-4/3-4.1/3-4.1:1.0/host10/target10:0:0/10:0:0:1/block/sdg"),
        ("sdi", "/devices/pci0000:00/0000:00:07.0/host12/target12:0:0/12:0:0:0/block/sdi"),
        ("nvme0n1", "/devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1"),
        ("vda", "/devices/pci0000:00/0000:00:02.0/virtio1/block/vda"),
    ];

    #[test]
    fn each_disk_lands_on_what_limits_it() {
        let want = [
            "mmc:mmc0",
            "usb:usb1",
            "usb:usb2",
            "ata:ata1",
            "usb:usb4",
            "usb:usb4",
            "usb:usb3",
            "usb:usb3",
            "host:/devices/pci0000:00/0000:00:07.0",
            "nvme:nvme-subsys0",
            "disk:vda",
        ];
        for ((name, path), want) in X86.iter().zip(want) {
            assert_eq!(lane_key(name, path), want, "{name}");
        }
    }

    #[test]
    fn two_sticks_behind_one_hub_share_a_lane_and_emmc_and_usb_do_not() {
        let l = lanes(X86.iter().copied());
        let of = |d: &str| {
            l.iter()
                .position(|l| l.disks.iter().any(|x| x == d))
                .unwrap()
        };
        // the 2-LUN stick behind QEMU's hub on xHCI port 4: sdf and sdg in sequence
        assert_eq!(of("sdf"), of("sdg"));
        // the UAS disk and the BOT stick on one SuperSpeed root hub
        assert_eq!(of("sdd"), of("sde"));
        // eMMC/SD host, EHCI, OHCI, AHCI, UFS and NVMe: all apart
        let apart = [
            "mmcblk0", "sda", "sdb", "sdc", "sdd", "sdf", "sdi", "nvme0n1", "vda",
        ];
        let mut seen: Vec<usize> = apart.iter().map(|d| of(d)).collect();
        seen.dedup();
        assert_eq!(seen.len(), apart.len(), "{l:?}");
        assert_eq!(l.len(), 9);
    }

    #[test]
    fn the_emmc_areas_share_their_host() {
        let board = [
            ("mmcblk0", "/devices/platform/ahb/ahb:apb/1e750000.sdc/1e750100.sdhci/mmc_host/mmc0/mmc0:0001/block/mmcblk0"),
            ("mmcblk0boot0", "/devices/platform/ahb/ahb:apb/1e750000.sdc/1e750100.sdhci/mmc_host/mmc0/mmc0:0001/block/mmcblk0/mmcblk0boot0"),
            ("mmcblk1", "/devices/platform/ahb/ahb:apb/1e740000.sdc/1e740100.sdhci/mmc_host/mmc1/mmc1:e1d3/block/mmcblk1"),
        ];
        let l = lanes(board);
        assert_eq!(
            l,
            vec![
                Lane {
                    key: "mmc:mmc0".into(),
                    disks: vec!["mmcblk0".into(), "mmcblk0boot0".into()]
                },
                Lane {
                    key: "mmc:mmc1".into(),
                    disks: vec!["mmcblk1".into()]
                },
            ]
        );
    }

    #[test]
    fn small_blocks_run_alone_only_where_the_device_can_outrun_a_core() {
        use crate::workload::WorkloadKind::{RandRead, SeqRead};
        let rows: &[(
            DeviceClass,
            Option<bool>,
            crate::workload::WorkloadKind,
            u64,
            bool,
        )] = &[
            (DeviceClass::Nvme, None, RandRead, 4096, true),
            (DeviceClass::Ufs, None, RandRead, 4096, true),
            (DeviceClass::Sata, Some(false), RandRead, 4096, true),
            (DeviceClass::Loop, None, RandRead, 16 << 10, true),
            (DeviceClass::Other, None, RandRead, 4096, true),
            (DeviceClass::Loop, Some(true), RandRead, 4096, true),
            (DeviceClass::Sata, Some(true), RandRead, 4096, false),
            (DeviceClass::Usb, None, RandRead, 4096, false),
            (DeviceClass::Sd, None, RandRead, 4096, false),
            (DeviceClass::Emmc, None, RandRead, 4096, false),
            (DeviceClass::Nvme, None, SeqRead, 1 << 20, false),
            (DeviceClass::Nvme, None, RandRead, SMALL_BLOCK, false),
        ];
        for &(class, rotational, w, bs, alone) in rows {
            let disk = Disk {
                class,
                rotational,
                ..Disk::default()
            };
            let mut p = WorkloadParams::defaults(w, "/dev/x".into());
            p.block_bytes = bs;
            assert_eq!(
                matches!(admission(&p, &disk, None, 2), Admission::Alone(..)),
                alone,
                "{class:?} rotational {rotational:?} {w:?} bs {bs}"
            );
        }
    }

    #[test]
    fn a_measured_small_block_cell_takes_its_predicted_cpu_from_the_budget() {
        let disk = Disk {
            class: DeviceClass::Nvme,
            ..Disk::default()
        };
        let mut p =
            WorkloadParams::defaults(crate::workload::WorkloadKind::RandRead, "/dev/x".into());
        p.block_bytes = 4096;
        let at = |mib: f64, ns: f64| Measured {
            max_bytes_per_s: mib * 1048576.0,
            cpu_ns_per_io: ns,
        };
        // 10 MiB/s over 4 KiB: 2,560 I/Os a second; at 200 us each, 51.2 % of a CPU.
        assert_eq!(
            admission(&p, &disk, Some(at(10.0, 200_000.0)), 2),
            Admission::Budget(51.2)
        );
        // 2 CPUs: a budget of 150 % of one; 6,000 MiB/s at 2 us is 307 %, alone.
        match admission(&p, &disk, Some(at(6000.0, 2_000.0)), 2) {
            Admission::Alone(AloneRule::PredictedCpu, Some(c)) => assert!((c - 307.2).abs() < 1e-9),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            admission(&p, &disk, Some(at(6000.0, 2_000.0)), 8),
            Admission::Budget(_)
        ));
        assert_eq!(budget(2), 150.0);
        assert_eq!(machine_ns_per_io(25.0, 2.0, 2, 1000), Some(1_000_000.0));
        assert_eq!(machine_ns_per_io(25.0, 2.0, 2, 0), None);
    }

    #[test]
    fn the_measured_rule_gives_each_cell_half_its_share_of_the_cpus() {
        // (cpu % of one CPU, cpus, cells together, measured again alone)
        let rows = [
            (150.0, 2, 2, true),
            (50.0, 2, 2, false),
            (50.1, 2, 4, true),
            (24.0, 2, 4, false),
            (400.0, 2, 1, false),
            (30.0, 1, 2, true),
            (20.0, 4, 4, false),
        ];
        for (cpu, cpus, together, want) in rows {
            assert_eq!(
                cpu_limited(cpu, cpus, together),
                want,
                "{cpu} % on {cpus} CPUs, {together} together"
            );
        }
    }

    #[test]
    fn proc_stat_gives_busy_and_total_ticks() {
        // /proc/stat of this machine's kernel (6.1), first lines
        let stat = "cpu  48215 312 20116 1204339 3355 0 1187 0 0 0\n\
                    cpu0 24059 151 10093 602158 1677 0 772 0 0 0\n";
        let t = CpuTicks::parse(stat).unwrap();
        assert_eq!(t.busy, 48215 + 312 + 20116 + 1187);
        assert_eq!(t.total, t.busy + 1204339 + 3355);
        assert_eq!(CpuTicks::parse("intr 1 2 3\n"), None);
        assert_eq!(CpuTicks::parse("cpu  1 x 3 4\n"), None);
        let a = CpuTicks {
            busy: 100,
            total: 1000,
        };
        let b = CpuTicks {
            busy: 190,
            total: 1100,
        };
        assert_eq!(busy_percent(a, b), Some(90.0));
        assert_eq!(busy_percent(b, a), None, "a counter that went back");
        assert_eq!(busy_percent(a, a), None);
        assert!(machine_saturated(90.0, 2));
        assert!(!machine_saturated(89.9, 2));
        assert!(
            !machine_saturated(100.0, 1),
            "a cell alone is what serial measures"
        );
    }

    #[test]
    fn shared_lanes_run_as_one_and_bad_keys_say_what_a_lane_is() {
        let l = lanes(X86.iter().copied());
        let shared: Vec<Vec<LaneKey>> =
            serde_norway::from_str("[[usb:usb1, 'usb:usb4'], [mmc:mmc0, disk:nope]]").unwrap();
        let j = join_shared(l.clone(), &shared);
        assert_eq!(j.len(), l.len() - 1);
        let ehci = j
            .iter()
            .find(|x| x.disks.contains(&"sda".to_string()))
            .unwrap();
        assert_eq!(ehci.key, "usb:usb1+usb:usb4");
        assert_eq!(ehci.disks, ["sda", "sdd", "sde"]);
        assert_eq!(
            j[0].key, "mmc:mmc0",
            "a group naming an absent lane changes nothing else"
        );
        let e = serde_norway::from_str::<Vec<LaneKey>>("[usb1]").unwrap_err();
        assert!(e.to_string().contains("usb:usb1, mmc:mmc0"), "{e}");
        assert!(serde_norway::from_str::<Vec<LaneKey>>("['usb:']").is_err());
    }

    #[test]
    fn a_measured_device_and_cpu_predict_whether_small_blocks_run_alone() {
        let disk = Disk {
            class: DeviceClass::Sata,
            rotational: Some(false),
            ..Disk::default()
        };
        let mut p =
            WorkloadParams::defaults(crate::workload::WorkloadKind::RandRead, "/dev/x".into());
        p.block_bytes = 4096;
        // (fastest figure MiB/s, CPU ns per I/O, cpus, runs alone); the budget is 75 % of the
        // CPUs: 150 % of one on 2, 75 % on 1
        let rows = [
            // a SATA SSD streaming 500 MiB/s: 128,000 IOPS of 4 KiB at 20 us = 256 % of a CPU
            (500.0, 20_000.0, 2, true),
            // a board's SATA link held to 10 MiB/s: 2,560 IOPS at 20 us = 5 %: beside others
            (10.0, 20_000.0, 2, false),
            (10.0, 20_000.0, 1, false),
            // 400 us per I/O (a driver completing in softirqs on a slow core): 102 %
            (10.0, 400_000.0, 1, true),
            (10.0, 400_000.0, 2, false),
        ];
        for (mib, ns, cpus, alone) in rows {
            let m = Measured {
                max_bytes_per_s: mib * 1048576.0,
                cpu_ns_per_io: ns,
            };
            let got = admission(&p, &disk, Some(m), cpus);
            let cpu = m.predicted_cpu_percent(4096);
            let want = if alone {
                Admission::Alone(AloneRule::PredictedCpu, Some(cpu))
            } else {
                Admission::Budget(cpu)
            };
            assert_eq!(got, want, "{mib} MiB/s {ns} ns {cpus} cpus");
        }
        let m = Measured {
            max_bytes_per_s: 10.0 * 1048576.0,
            cpu_ns_per_io: 20_000.0,
        };
        assert!((m.predicted_cpu_percent(4096) - 5.12).abs() < 1e-9);
    }
}
