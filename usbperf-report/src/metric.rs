//! Owns the figures a report carries, once: each metric's name as the report, the fleet and a
//! verdict reason spell it, its unit, which direction is better, the workloads that produce
//! it, the ceiling beyond which no device measures it (a config's limit beyond it is refused
//! at its line, the fleet refuses such a figure as a broken measurement), and the threshold
//! key that limits it with what that key takes in words. The config's limits, the verdicts,
//! the repeatability study, the fleet's extraction and learned thresholds, the error words
//! and the table renderers all read this table; none spells a metric or its limit on its own.
//!
//! A leaf: it knows no other module, so every layer may read it.

/// Which way a figure is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
}

/// One figure of a report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metric {
    /// The name in reasons (`metric:`) and in the fleet (`seq-write.mib_per_s`).
    pub id: &'static str,
    /// The unit of the figure and of its limits, as reasons write it.
    pub unit: &'static str,
    /// The column heading of the run's table.
    pub label: &'static str,
    pub better: Better,
    /// The workloads whose cells it is the main figure of (as the report names them): the
    /// run's table shows it for them, the fleet learns limits for it there. Empty for a
    /// device-level figure or one any cell may carry.
    pub workloads: &'static [&'static str],
    /// No device measures more: a figure beyond it is a broken measurement, a limit beyond
    /// it a typo.
    pub max: f64,
    /// The threshold key that limits it (a minimum when higher is better, else a maximum).
    pub limit: Option<Limit>,
    /// Decimals a reason prints the figure with.
    pub decimals: usize,
    /// The figure's name before its value in a reason (`p99 latency `), empty where the unit
    /// says what it is.
    pub said_as: &'static str,
}

/// A threshold key and what it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The key as a config's `thresholds:` entry spells it.
    pub key: &'static str,
    /// What the key takes, in words, for an error that found something else.
    pub hint: &'static str,
}

/// Sequential throughput: what dd and hdparm print (MiB/s, binary megabytes).
pub const MIB_PER_S: Metric = Metric {
    id: "mib_per_s",
    unit: "MiB/s",
    label: "MiB/s",
    better: Better::Higher,
    workloads: &["read-buffered", "seq-write", "seq-read", "write-curve"],
    // 10 TB/s: no storage device of this decade.
    max: 1e6,
    limit: Some(Limit {
        key: "min_mib_per_s",
        hint: "a number of MiB/s, such as 25",
    }),
    decimals: 1,
    said_as: "",
};

/// Random I/O rate: what fio's random jobs print.
pub const IOPS: Metric = Metric {
    id: "iops",
    unit: "IOPS",
    label: "IOPS",
    better: Better::Higher,
    workloads: &["rand-read", "rand-write", "mixed"],
    max: 1e8,
    limit: Some(Limit {
        key: "min_iops",
        hint: "a number of I/Os per second, such as 1000",
    }),
    decimals: 0,
    said_as: "",
};

/// The 99th percentile completion latency of the random jobs.
pub const P99_LATENCY_MS: Metric = Metric {
    id: "p99_latency_ms",
    unit: "ms",
    label: "p99 ms",
    better: Better::Lower,
    workloads: &["rand-read", "rand-write", "mixed"],
    // An hour.
    max: 3.6e6,
    limit: Some(Limit {
        key: "max_p99_latency_ms",
        hint: "a number of milliseconds, such as 50",
    }),
    decimals: 1,
    said_as: "p99 latency ",
};

/// Blocks read back wrong by `verify`.
pub const MISMATCHED_BLOCKS: Metric = Metric {
    id: "mismatched_blocks",
    unit: "blocks",
    label: "bad blocks",
    better: Better::Lower,
    workloads: &["verify"],
    max: 1e15,
    limit: None,
    decimals: 0,
    said_as: "",
};

/// Acknowledged blocks a power cut did not keep: lost, torn, misplaced or unreadable after
/// the cut (`power-cut verify`).
pub const CUT_LOST_BLOCKS: Metric = Metric {
    id: "lost_blocks",
    unit: "blocks",
    label: "lost",
    better: Better::Lower,
    workloads: &["power-cut"],
    max: 1e15,
    limit: None,
    decimals: 0,
    said_as: "",
};

/// I/Os that took longer than a second (any workload's cells count them).
pub const STALLS_OVER_1S: Metric = Metric {
    id: "stalls_over_1s",
    unit: "count",
    label: "stalls",
    better: Better::Lower,
    workloads: &[],
    max: 1e9,
    limit: Some(Limit {
        key: "max_stalls",
        hint: "a number of I/Os, such as 0",
    }),
    decimals: 0,
    said_as: "",
};

/// The negotiated USB link.
pub const LINK_MBPS: Metric = Metric {
    id: "link_mbps",
    unit: "Mbit/s",
    label: "link",
    better: Better::Higher,
    workloads: &[],
    // USB4 v2 is 8e4.
    max: 1e5,
    limit: Some(Limit {
        key: "min_link_mbps",
        hint: "a link speed in Mbit/s, such as 480",
    }),
    decimals: 0,
    said_as: "",
};

/// The negotiated SATA link.
pub const SATA_GBPS: Metric = Metric {
    id: "sata_gbps",
    unit: "Gbit/s",
    label: "SATA",
    better: Better::Higher,
    workloads: &[],
    max: 100.0,
    limit: Some(Limit {
        key: "min_sata_gbps",
        hint: "a link speed in Gbit/s, such as 6",
    }),
    decimals: 1,
    said_as: "",
};

/// The capacity the device reports.
pub const CAPACITY_BYTES: Metric = Metric {
    id: "capacity_bytes",
    unit: "bytes",
    label: "size",
    better: Better::Higher,
    workloads: &[],
    // 1 EiB.
    max: (1u64 << 60) as f64,
    limit: Some(Limit {
        key: "min_capacity",
        hint: "a size, such as 32G",
    }),
    decimals: 0,
    said_as: "",
};

/// Flash wear in % of the rated life (NVMe counts up to 255).
pub const LIFE_USED_PERCENT: Metric = Metric {
    id: "life_used_percent",
    unit: "%",
    label: "life used",
    better: Better::Lower,
    workloads: &[],
    max: 255.0,
    limit: Some(Limit {
        key: "max_life_used_percent",
        hint: "a percentage, such as 90",
    }),
    decimals: 0,
    said_as: "",
};

/// Media errors a device counted.
pub const MEDIA_ERRORS: Metric = Metric {
    id: "media_errors",
    unit: "errors",
    label: "media errors",
    better: Better::Lower,
    workloads: &[],
    max: 1e12,
    limit: Some(Limit {
        key: "max_media_errors",
        hint: "a number of errors, such as 0",
    }),
    decimals: 0,
    said_as: "",
};

/// SATA interface CRC errors.
pub const UDMA_CRC_ERRORS: Metric = Metric {
    id: "udma_crc_errors",
    unit: "errors",
    label: "CRC errors",
    better: Better::Lower,
    workloads: &[],
    max: 1e12,
    limit: Some(Limit {
        key: "max_crc_errors",
        hint: "a number of errors, such as 0",
    }),
    decimals: 0,
    said_as: "",
};

/// The eMMC's pre-EOL state (`PRE_EOL_INFO`: 1 normal, 2 warning, 3 urgent).
pub const PRE_EOL: Metric = Metric {
    id: "pre_eol",
    unit: "level",
    label: "pre-EOL",
    better: Better::Lower,
    workloads: &[],
    max: 255.0,
    limit: Some(Limit {
        key: "max_pre_eol",
        hint: "normal, warning or urgent",
    }),
    decimals: 0,
    said_as: "",
};

/// The speed a PCIe link trained at.
pub const PCIE_GTS: Metric = Metric {
    id: "pcie_gts",
    unit: "GT/s",
    label: "PCIe GT/s",
    better: Better::Higher,
    workloads: &[],
    max: 128.0,
    limit: Some(Limit {
        key: "min_pcie_gts",
        hint: "a PCIe speed in GT/s per lane, such as 8",
    }),
    decimals: 1,
    said_as: "",
};

/// The lanes a PCIe link trained with.
pub const PCIE_WIDTH: Metric = Metric {
    id: "pcie_width",
    unit: "lanes",
    label: "PCIe lanes",
    better: Better::Higher,
    workloads: &[],
    max: 64.0,
    limit: Some(Limit {
        key: "min_pcie_width",
        hint: "a number of PCIe lanes, such as 4",
    }),
    decimals: 0,
    said_as: "",
};

/// USB over-current events on the device's port.
pub const OVER_CURRENT_COUNT: Metric = Metric {
    id: "over_current_count",
    unit: "events",
    label: "over-current",
    better: Better::Lower,
    workloads: &[],
    max: 1e12,
    limit: Some(Limit {
        key: "max_over_current",
        hint: "a number of events, such as 0",
    }),
    decimals: 0,
    said_as: "",
};

/// A test's size, where placement reduced it (a note, not a judgement).
pub const SIZE_BYTES: Metric = Metric {
    id: "size_bytes",
    unit: "bytes",
    label: "test size",
    better: Better::Higher,
    workloads: &[],
    max: (1u64 << 60) as f64,
    limit: None,
    decimals: 0,
    said_as: "",
};

/// A test's block, where it was shrunk to fit its region (a note).
pub const BLOCK_BYTES: Metric = Metric {
    id: "block_bytes",
    unit: "bytes",
    label: "block",
    better: Better::Higher,
    workloads: &[],
    max: (1u64 << 40) as f64,
    limit: None,
    decimals: 0,
    said_as: "",
};

/// The CPU one test used, in % of one CPU (a note of the schedule).
pub const CPU_PERCENT: Metric = Metric {
    id: "cpu_percent",
    unit: "%",
    label: "CPU",
    better: Better::Lower,
    workloads: &[],
    max: 1e5,
    limit: None,
    decimals: 0,
    said_as: "",
};

/// How busy the machine's CPUs were, in % of all of them (a note of the schedule).
pub const CPU_BUSY_PERCENT: Metric = Metric {
    id: "cpu_busy_percent",
    unit: "%",
    label: "CPUs busy",
    better: Better::Lower,
    workloads: &[],
    max: 100.0,
    limit: None,
    decimals: 0,
    said_as: "",
};

/// Raw flash (MTD): erase blocks marked bad, factory-marked and grown (its limit is a
/// board profile's `flash:` key).
pub const FLASH_BAD_BLOCKS: Metric = Metric {
    id: "bad_blocks",
    unit: "blocks",
    label: "bad blocks",
    better: Better::Lower,
    workloads: &[],
    max: 1e9,
    limit: Some(Limit {
        key: "max_bad_blocks",
        hint: "a number of erase blocks, such as 20",
    }),
    decimals: 0,
    said_as: "",
};

/// Raw flash: ECC steps that could not be corrected (data lost), counted by the kernel since
/// boot or by a read scan.
pub const ECC_FAILURES: Metric = Metric {
    id: "ecc_failures",
    unit: "ECC failures",
    label: "ECC failures",
    better: Better::Lower,
    workloads: &[],
    max: 1e12,
    limit: Some(Limit {
        key: "max_ecc_failures",
        hint: "a number of uncorrectable ECC steps, such as 0",
    }),
    decimals: 0,
    said_as: "",
};

/// Raw flash: bits the ECC corrected.
pub const CORRECTED_BITS: Metric = Metric {
    id: "corrected_bits",
    unit: "bits",
    label: "corrected",
    better: Better::Lower,
    workloads: &[],
    max: 1e15,
    limit: Some(Limit {
        key: "max_corrected_bits",
        hint: "a number of corrected bits, such as 1000",
    }),
    decimals: 0,
    said_as: "corrected ",
};

/// Raw flash: pages a read scan found uncorrectable.
pub const UNCORRECTABLE_PAGES: Metric = Metric {
    id: "uncorrectable_pages",
    unit: "pages",
    label: "bad pages",
    better: Better::Lower,
    workloads: &[],
    max: 1e12,
    limit: None,
    decimals: 0,
    said_as: "uncorrectable ",
};

/// UBI: the highest erase counter of any block (wear).
pub const ERASE_COUNT: Metric = Metric {
    id: "erase_count",
    unit: "erase cycles",
    label: "max EC",
    better: Better::Lower,
    workloads: &[],
    max: 1e9,
    limit: Some(Limit {
        key: "max_erase_count",
        hint: "a number of erase cycles, such as 3000",
    }),
    decimals: 0,
    said_as: "",
};

/// UBI: erase blocks still reserved to replace bad ones.
pub const RESERVED_FOR_BAD: Metric = Metric {
    id: "reserved_for_bad",
    unit: "blocks reserved",
    label: "reserved",
    better: Better::Higher,
    workloads: &[],
    max: 1e9,
    limit: Some(Limit {
        key: "min_reserved_for_bad",
        hint: "a number of erase blocks, such as 10",
    }),
    decimals: 0,
    said_as: "",
};

/// Every metric, in the order the fleet lists a workload's figures.
pub const ALL: [&Metric; 26] = [
    &MIB_PER_S,
    &IOPS,
    &P99_LATENCY_MS,
    &MISMATCHED_BLOCKS,
    &CUT_LOST_BLOCKS,
    &STALLS_OVER_1S,
    &LINK_MBPS,
    &SATA_GBPS,
    &CAPACITY_BYTES,
    &LIFE_USED_PERCENT,
    &MEDIA_ERRORS,
    &UDMA_CRC_ERRORS,
    &PRE_EOL,
    &PCIE_GTS,
    &PCIE_WIDTH,
    &OVER_CURRENT_COUNT,
    &SIZE_BYTES,
    &BLOCK_BYTES,
    &CPU_PERCENT,
    &CPU_BUSY_PERCENT,
    &FLASH_BAD_BLOCKS,
    &ECC_FAILURES,
    &CORRECTED_BITS,
    &UNCORRECTABLE_PAGES,
    &ERASE_COUNT,
    &RESERVED_FOR_BAD,
];

/// The metric a name spells, if any.
pub fn by_id(id: &str) -> Option<&'static Metric> {
    ALL.iter().copied().find(|m| m.id == id)
}

/// The metric a threshold key limits, if any.
pub fn by_limit_key(key: &str) -> Option<&'static Metric> {
    ALL.iter()
        .copied()
        .find(|m| m.limit.is_some_and(|l| l.key == key))
}

impl Metric {
    /// Whether cells of `workload` are judged by it.
    pub fn of_workload(&self, workload: &str) -> bool {
        self.workloads.contains(&workload)
    }

    /// The threshold key that limits it (empty when none does).
    pub fn key(&self) -> &'static str {
        self.limit.map_or("", |l| l.key)
    }

    /// `minimum` or `maximum`: what its limit is.
    pub fn bound(&self) -> &'static str {
        match self.better {
            Better::Higher => "minimum",
            Better::Lower => "maximum",
        }
    }

    /// Whether `figure` misses `limit`.
    pub fn misses(&self, figure: f64, limit: f64) -> bool {
        match self.better {
            Better::Higher => figure < limit,
            Better::Lower => figure > limit,
        }
    }

    /// The figure as a reason writes it: `12.3 MiB/s`, `p99 latency 4.1 ms`.
    pub fn show(&self, figure: f64) -> String {
        format!("{}{figure:.*} {}", self.said_as, self.decimals, self.unit)
    }

    /// Whether it is a rate a test measures over time (it has a confidence interval, a
    /// steady level and may drop when a cache fills).
    pub fn is_rate(&self) -> bool {
        self.id == MIB_PER_S.id || self.id == IOPS.id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_limit_keys_are_unique() {
        for (i, a) in ALL.iter().enumerate() {
            assert_eq!(by_id(a.id), Some(*a));
            assert!(ALL[i + 1..].iter().all(|b| b.id != a.id), "{} twice", a.id);
            if let Some(l) = a.limit {
                assert_eq!(
                    by_limit_key(l.key),
                    Some(*a),
                    "{} limits two metrics",
                    l.key
                );
                let bound = if a.better == Better::Higher {
                    "min_"
                } else {
                    "max_"
                };
                assert!(l.key.starts_with(bound), "{} is not a {bound} key", l.key);
            }
        }
    }
}
