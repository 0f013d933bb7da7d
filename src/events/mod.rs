//! Owns kernel events attributed to the device under test: `/dev/kmsg` records parsed
//! (`kmsg`), recognised (`classify`), tied to one device (`attrib`) and read live between
//! test steps (`watch`). An attributed fatal event fails the device, quoting the kernel line.

pub mod attrib;
pub mod classify;
pub mod kmsg;
pub mod watch;

pub use attrib::{attribute_event, partition_parent, usb_ancestors, DeviceKeys};
pub use classify::{classify, classify_record, EventKey, EventKind, KernelEvent, Severity};
pub use kmsg::{parse_record, KmsgParseError, KmsgRecord};
pub use watch::{
    attribute, classify_records, disk_vanished, removal_event, EventsError, KmsgWatcher, SeqTracker,
};
