//! Owns the verdict as the report records it: pass or fail with its reasons, each reason a
//! record (what kind of failure, the rule, the metric, the figure measured and the limit with
//! its unit, the device and port) with the sentence for people beside it, so nothing
//! downstream parses English. Schema 1's reasons (sentences) read back as `unclassified`.
//! How a verdict is reached is `matrix::verdict`'s.

use serde::{Deserialize, Serialize};

use crate::metric::Metric;
use crate::workload::WorkloadKind;
/// What kind of failure (or note) a reason is: the key a program groups reasons by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReasonKind {
    /// A measured figure beyond a threshold (`metric`, `measured`, `limit`, `unit`).
    Threshold,
    /// A USB link below `min_link_mbps`, or that cannot be verified.
    Link,
    /// A SATA link below `min_sata_gbps`, or of unknown speed.
    SataLink,
    /// A part that is not on the board's approved list (`parts:`), or whose identity is
    /// unknown where a list is set.
    Part,
    /// A health figure beyond its limit (flash life, pre-EOL, media or CRC errors, PCIe link,
    /// USB over-current), or unknown where a limit is set.
    Health,
    /// Blocks read back wrong (`verify`): fake capacity or failing flash.
    Verify,
    /// Writes the medium acknowledged before a power cut and did not keep (`power-cut`).
    PowerCut,
    /// The test could not run to its end: an I/O error, ENOSPC, EROFS, a refused open.
    IoError,
    /// A fatal kernel line attributed to the device (`event`: its kind).
    KernelEvent,
    /// The kernel log could not be read around the test.
    KernelLog,
    /// The disk vanished during a test, or a test did not run because it had.
    Vanished,
    /// A `required: true` device rule matched no disk.
    MissingDevice,
    /// Tests did not run to their end because of a signal.
    Interrupted,
    /// Nothing was tested (no device, or every test of a device skipped).
    NoTest,
    /// The configuration gives nothing to test (an empty matrix).
    Config,
    /// A write test on a device whose writes were asked for and refused by a safety rule.
    Refused,
    /// A write test not applicable: the device has no writable target.
    NotApplicable,
    /// A test file could not be removed and may still be on the medium.
    TestFileLeft,
    /// How a test was placed (size reduced, measured on a file): not a failure.
    Note,
    /// The unit's reason for one failed device (its own reasons are on the device).
    DeviceFailed,
    /// A schema 1 reason read back: a sentence with no record.
    Unclassified,
}

impl ReasonKind {
    /// The name the report spells it with.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonKind::Threshold => "threshold",
            ReasonKind::Link => "link",
            ReasonKind::SataLink => "sata_link",
            ReasonKind::Part => "part",
            ReasonKind::Health => "health",
            ReasonKind::Verify => "verify",
            ReasonKind::PowerCut => "power_cut",
            ReasonKind::IoError => "io_error",
            ReasonKind::KernelEvent => "kernel_event",
            ReasonKind::KernelLog => "kernel_log",
            ReasonKind::Vanished => "vanished",
            ReasonKind::MissingDevice => "missing_device",
            ReasonKind::Interrupted => "interrupted",
            ReasonKind::NoTest => "no_test",
            ReasonKind::Config => "config",
            ReasonKind::Refused => "refused",
            ReasonKind::NotApplicable => "not_applicable",
            ReasonKind::TestFileLeft => "test_file_left",
            ReasonKind::Note => "note",
            ReasonKind::DeviceFailed => "device_failed",
            ReasonKind::Unclassified => "unclassified",
        }
    }
}

/// One reason of a verdict or a cell, as data with its sentence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(from = "ReasonRepr")]
pub struct Reason {
    pub kind: ReasonKind,
    /// The rule that produced it: `thresholds[1]`, `devices[0]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The test it concerns (`seq-write`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// `mib_per_s`, `iops`, `p99_latency_ms`, `stalls_over_1s`, `mismatched_blocks`,
    /// `link_mbps`, `sata_gbps`, `capacity_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<f64>,
    /// The unit of `measured` and `limit`: `MiB/s`, `IOPS`, `ms`, `count`, `blocks`,
    /// `Mbit/s`, `Gbit/s`, `bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// The kernel name of the disk it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The port it concerns: `usb:1-1`, `ata1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    /// A kernel event's kind (`io_error`, `usb_disconnect`), for `kernel_event`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Which end of a slow link is at fault, for `link`: `superspeed-lanes`, `device-limit`,
    /// `slow-hub`, `port-limit`, `high-speed-handshake`, `gen1-link`, `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// The figure is within its threshold's `marginal_percent` of the limit: a `threshold`
    /// that missed by less, or a `note` on one that passed by less.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub marginal: bool,
    /// For people; programs read the fields above.
    pub text: String,
}

/// A reason as stored: a record (schema 2), or a sentence (schema 1).
#[derive(Deserialize)]
#[serde(untagged)]
enum ReasonRepr {
    Text(String),
    Record(Box<ReasonRecord>),
}

#[derive(Deserialize)]
struct ReasonRecord {
    kind: ReasonKind,
    #[serde(default)]
    rule: Option<String>,
    #[serde(default)]
    workload: Option<String>,
    #[serde(default)]
    metric: Option<String>,
    #[serde(default)]
    measured: Option<f64>,
    #[serde(default)]
    limit: Option<f64>,
    #[serde(default)]
    unit: Option<String>,
    #[serde(default)]
    device: Option<String>,
    #[serde(default)]
    port: Option<String>,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    cause: Option<String>,
    #[serde(default)]
    marginal: bool,
    text: String,
}

impl From<ReasonRepr> for Reason {
    fn from(r: ReasonRepr) -> Reason {
        match r {
            ReasonRepr::Text(text) => Reason::new(ReasonKind::Unclassified, text),
            ReasonRepr::Record(r) => Reason {
                kind: r.kind,
                rule: r.rule,
                workload: r.workload,
                metric: r.metric,
                measured: r.measured,
                limit: r.limit,
                unit: r.unit,
                device: r.device,
                port: r.port,
                event: r.event,
                cause: r.cause,
                marginal: r.marginal,
                text: r.text,
            },
        }
    }
}

impl Reason {
    pub fn new(kind: ReasonKind, text: impl Into<String>) -> Reason {
        Reason {
            kind,
            rule: None,
            workload: None,
            metric: None,
            measured: None,
            limit: None,
            unit: None,
            device: None,
            port: None,
            event: None,
            cause: None,
            marginal: false,
            text: text.into(),
        }
    }
    pub fn rule(mut self, rule: impl Into<String>) -> Reason {
        self.rule = Some(rule.into());
        self
    }
    pub fn workload(mut self, w: WorkloadKind) -> Reason {
        self.workload = Some(w.as_str().to_string());
        self
    }
    /// The figure measured (if known) against its limit, in the metric's unit.
    pub fn figure(mut self, metric: &Metric, measured: Option<f64>, limit: f64) -> Reason {
        self.metric = Some(metric.id.to_string());
        self.measured = measured;
        self.limit = Some(limit);
        self.unit = Some(metric.unit.to_string());
        self
    }
    pub fn device(mut self, name: &str) -> Reason {
        self.device = Some(name.to_string());
        self
    }
    pub fn port(mut self, port: impl Into<String>) -> Reason {
        self.port = Some(port.into());
        self
    }
    pub fn marginal(mut self) -> Reason {
        self.marginal = true;
        self
    }

    pub fn cause(mut self, cause: impl Into<String>) -> Reason {
        self.cause = Some(cause.into());
        self
    }

    pub fn event(mut self, kind: impl Into<String>) -> Reason {
        self.event = Some(kind.into());
        self
    }
}

/// The sentences of reasons, for people.
pub fn texts(reasons: &[Reason]) -> Vec<String> {
    reasons.iter().map(|r| r.text.clone()).collect()
}

/// Pass or fail, with every reason for a failure.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Verdict {
    pub pass: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<Reason>,
    /// How many times cells were measured again because their only failures were marginal.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retests: u32,
    /// A figure the verdict rests on is within its threshold's marginal band.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub marginal: bool,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl Verdict {
    pub fn from_reasons(reasons: Vec<Reason>) -> Verdict {
        Verdict {
            pass: reasons.is_empty(),
            reasons,
            retests: 0,
            marginal: false,
        }
    }

    /// The verdict in words: `pass`, `pass (marginal)`, `pass after 1 retest`, `fail after 2
    /// retests`, `fail`.
    pub fn words(&self) -> String {
        let word = if self.pass { "pass" } else { "fail" };
        match self.retests {
            0 if self.pass && self.marginal => "pass (marginal)".into(),
            0 => word.into(),
            1 => format!("{word} after 1 retest"),
            n => format!("{word} after {n} retests"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::schema::{CellStatus, RunStatus};

    /// `as_str` must spell every variant as serde writes it: the report, the fleet and the
    /// station read the same names.
    fn same_name<T: Serialize + Copy>(all: &[T], name: impl Fn(T) -> &'static str) {
        for v in all {
            assert_eq!(serde_json::to_value(v).unwrap(), name(*v));
        }
    }

    #[test]
    fn as_str_is_the_serde_name() {
        use ReasonKind::*;
        same_name(
            &[
                Threshold,
                Link,
                SataLink,
                Part,
                Health,
                Verify,
                IoError,
                KernelEvent,
                KernelLog,
                Vanished,
                MissingDevice,
                Interrupted,
                NoTest,
                Config,
                Refused,
                NotApplicable,
                TestFileLeft,
                Note,
                DeviceFailed,
                Unclassified,
            ],
            ReasonKind::as_str,
        );
        use CellStatus as C;
        same_name(
            &[
                C::Pending,
                C::Passed,
                C::Failed,
                C::Error,
                C::Skipped,
                C::Interrupted,
            ],
            CellStatus::as_str,
        );
        use RunStatus as R;
        same_name(
            &[R::Running, R::Complete, R::Interrupted],
            RunStatus::as_str,
        );
        use WorkloadKind as W;
        same_name(
            &[
                W::ReadBuffered,
                W::SeqWrite,
                W::SeqRead,
                W::RandRead,
                W::RandWrite,
                W::Mixed,
                W::WriteCurve,
                W::Verify,
            ],
            WorkloadKind::as_str,
        );
        use crate::discover::EmmcArea as A;
        same_name(&[A::User, A::Boot0, A::Boot1, A::Rpmb], A::as_str);
    }
}
