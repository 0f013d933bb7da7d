//! Owns kernel events attributed to the device under test: `/dev/kmsg` records parsed
//! (`kmsg`), recognised (`classify`), tied to one device (`attrib`) and read live between
//! test steps (`watch`). An attributed fatal event fails the device, quoting the kernel line.
//!
//! Use: open the watcher before the device's first test step, drain after every step (the
//! records of a step belong to the device tested in it), and check sysfs for the disk:
//!
//! ```no_run
//! use std::path::Path;
//! use usbperf::events::{attribute, removal_event, DeviceKeys, KmsgWatcher};
//! # fn step(disk: &usbperf::discover::Disk) -> Result<bool, usbperf::events::EventsError> {
//! let keys = DeviceKeys::from_disk(disk);
//! let mut kmsg = KmsgWatcher::open(Path::new("/dev/kmsg"))?;
//! // ... run one test step on the disk ...
//! let mut events = attribute(&kmsg.drain()?, &keys);
//! events.extend(removal_event(Path::new("/sys/class/block"), &keys));
//! let failed = events.iter().any(|e| e.is_fatal());
//! # Ok(failed) }
//! ```

pub mod attrib;
pub mod classify;
pub mod kmsg;
pub mod watch;

pub use attrib::{attribute_event, partition_parent, usb_ancestors, DeviceKeys};
pub use classify::{
    classify, classify_record, enumerated_speed, EventKey, EventKind, KernelEvent, Severity,
};
pub use kmsg::{parse_record, KmsgParseError, KmsgRecord};
pub use watch::{
    attribute, classify_records, disk_vanished, removal_event, EventsError, KmsgWatcher, SeqTracker,
};
