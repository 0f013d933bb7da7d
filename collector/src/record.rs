//! Owns the stored encoding of a fleet record (`fleet_records.record`): a compact binary
//! form of [`UnitRecord`], written once at ingest and decoded by every fleet query.
//!
//! Why not JSON, as version 1 stored it: decoding 100,000 JSON records (4 KB each, mostly
//! numbers printed to 17 digits) took two CPU-seconds, most of the fleet's time, against the
//! target of 2 s for the whole query. Here a figure is its 8 bytes (exact, no float
//! parsing), a string its length and bytes, and the metric names, which repeat on every
//! device of a report, are written once per record: a record is a third of its JSON and
//! decodes many times faster.
//!
//! Layout, little-endian, lengths and counts as LEB128: the format byte [`FORMAT`]; the
//! metric-name table; the unit, board, station, build, phase, tool version; started_at as
//! seconds and nanoseconds; pass; the devices (label, class, port, model, pass, retests,
//! marginal, reasons, values as name index, figure and ok, the write curve, the flash part's
//! wear sample); the thresholds; the identity; the rejected figures; the signer's key. The fields
//! are taken apart by exhaustive patterns, so a field added to the record type does not
//! compile here until it is stored (and `FLEET_RECORD_VERSION` bumped).

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use usbperf_fleet::bytes::{BytesError, Reader, Writer};
use usbperf_fleet::extract::{DeviceRecord, FleetReason, PartSample, RejectedFigure, UnitRecord};
use usbperf_fleet::stored::{read_threshold, write_threshold};
use usbperf_report::wire::{Curve, Knee, Sample};

/// The first byte of every encoded record: a different layout gets a different byte.
pub const FORMAT: u8 = 5;

/// Why stored bytes are no record (a damaged row, or one from another layout).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("format byte {0}, this collector reads {FORMAT}")]
    Format(u8),
    #[error(transparent)]
    Bytes(#[from] BytesError),
}

/// The record as stored. `file` is not stored: it is the record's place in a query's order.
pub fn encode(r: &UnitRecord) -> Vec<u8> {
    let UnitRecord {
        file: _,
        unit,
        board,
        station,
        build,
        phase,
        tool_version,
        started_at,
        pass,
        devices,
        thresholds,
        identity,
        rejected,
        signer,
    } = r;
    let mut names: Vec<&str> = Vec::new();
    for d in devices {
        for (m, _, _) in &d.values {
            if !names.contains(&m.as_str()) {
                names.push(m);
            }
        }
    }
    let mut w = Writer::with_capacity(2048);
    w.byte(FORMAT);
    w.len(names.len());
    for n in &names {
        w.str(n);
    }
    w.str(unit);
    w.str(board);
    w.str(station);
    w.str(build);
    w.str(phase);
    w.str(tool_version);
    w.0.extend_from_slice(&started_at.timestamp().to_le_bytes());
    w.0.extend_from_slice(&started_at.timestamp_subsec_nanos().to_le_bytes());
    w.bool(*pass);
    w.len(devices.len());
    for d in devices {
        let DeviceRecord {
            label,
            class,
            port,
            model,
            pass,
            retests,
            marginal,
            reasons,
            values,
            curve,
            part,
        } = d;
        w.str(label);
        w.str(class);
        w.str(port);
        w.str(model);
        w.bool(*pass);
        w.len(*retests as usize);
        w.bool(*marginal);
        w.len(reasons.len());
        for FleetReason {
            key,
            text,
            link,
            capacity,
        } in reasons
        {
            w.str(key);
            w.str(text);
            w.bool(*link);
            w.bool(*capacity);
        }
        w.len(values.len());
        for (m, v, ok) in values {
            let i = names
                .iter()
                .position(|n| n == m)
                .expect("the table holds every metric name of the record");
            w.len(i);
            w.f64(*v);
            w.bool(*ok);
        }
        match curve {
            None => w.bool(false),
            Some(Curve { samples, knee }) => {
                w.bool(true);
                w.len(samples.len());
                for Sample { t_s, mib_per_s } in samples {
                    w.f64(*t_s);
                    w.f64(*mib_per_s);
                }
                match knee {
                    None => w.bool(false),
                    Some(Knee {
                        t_s,
                        before_mib_per_s,
                        after_mib_per_s,
                    }) => {
                        w.bool(true);
                        w.f64(*t_s);
                        w.f64(*before_mib_per_s);
                        w.f64(*after_mib_per_s);
                    }
                }
            }
        }
        match part {
            None => w.bool(false),
            Some(PartSample {
                id,
                life_a,
                life_b,
                percent_used,
                pre_eol,
                data_written_bytes,
                limit,
            }) => {
                w.bool(true);
                w.str(id);
                for f in [life_a, life_b, percent_used, data_written_bytes, limit] {
                    w.opt_f64(*f);
                }
                w.opt_str(pre_eol);
            }
        }
    }
    w.len(thresholds.len());
    for t in thresholds {
        write_threshold(&mut w, t);
    }
    w.str(identity);
    w.len(rejected.len());
    for RejectedFigure {
        file,
        unit,
        device,
        field,
        value,
        why,
    } in rejected
    {
        w.str(&file.to_string_lossy());
        w.str(unit);
        w.str(device);
        w.str(field);
        w.str(value);
        w.str(why);
    }
    w.opt_str(signer);
    w.0
}

/// The record stored as `bytes`, with `file` as its place in the query's order.
pub fn decode(file: u32, bytes: &[u8]) -> Result<UnitRecord, DecodeError> {
    let mut r = Reader::new(bytes);
    let format = r.byte("the format byte")?;
    if format != FORMAT {
        return Err(DecodeError::Format(format));
    }
    let n = r.len("the metric names")?;
    let mut names: Vec<&str> = Vec::with_capacity(n.min(256));
    for _ in 0..n {
        names.push(r.str("a metric name")?);
    }
    let unit = r.string("the unit")?;
    let board = r.string("the board")?;
    let station = r.string("the station")?;
    let build = r.string("the build")?;
    let phase = r.string("the phase")?;
    let tool_version = r.string("the tool version")?;
    let secs = i64::from_le_bytes(r.array("started_at")?);
    let nanos = u32::from_le_bytes(r.array("started_at")?);
    let started_at: DateTime<Utc> =
        DateTime::from_timestamp(secs, nanos).ok_or(BytesError::Range("started_at"))?;
    let pass = r.bool("pass")?;
    let n = r.len("the devices")?;
    let mut devices = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        let label = r.string("a device label")?;
        let class = r.string("a device class")?;
        let port = r.string("a device port")?;
        let model = r.string("a device model")?;
        let pass = r.bool("a device verdict")?;
        let retests = u32::try_from(r.len("a device's retests")?)
            .map_err(|_| BytesError::Range("a device's retests"))?;
        let marginal = r.bool("a device verdict")?;
        let k = r.len("the reasons")?;
        let mut reasons = Vec::with_capacity(k.min(64));
        for _ in 0..k {
            reasons.push(FleetReason {
                key: r.string("a reason key")?,
                text: r.string("a reason text")?,
                link: r.bool("a reason")?,
                capacity: r.bool("a reason")?,
            });
        }
        let k = r.len("the values")?;
        let mut values = Vec::with_capacity(k.min(256));
        for _ in 0..k {
            let name = names
                .get(r.len("a value")?)
                .ok_or(BytesError::Range("a metric name index"))?;
            values.push((name.to_string(), r.f64("a value")?, r.bool("a value")?));
        }
        let curve = if r.bool("the curve")? {
            let k = r.len("the curve")?;
            let mut samples = Vec::with_capacity(k.min(4096));
            for _ in 0..k {
                samples.push(Sample {
                    t_s: r.f64("a curve sample")?,
                    mib_per_s: r.f64("a curve sample")?,
                });
            }
            let knee = if r.bool("the knee")? {
                Some(Knee {
                    t_s: r.f64("the knee")?,
                    before_mib_per_s: r.f64("the knee")?,
                    after_mib_per_s: r.f64("the knee")?,
                })
            } else {
                None
            };
            Some(Curve { samples, knee })
        } else {
            None
        };
        let part = if r.bool("the part")? {
            let id = r.string("a part")?;
            let mut f = [None; 5];
            for x in &mut f {
                *x = r.opt_f64("a part")?;
            }
            let [life_a, life_b, percent_used, data_written_bytes, limit] = f;
            Some(PartSample {
                id,
                life_a,
                life_b,
                percent_used,
                pre_eol: r.opt_string("a part")?,
                data_written_bytes,
                limit,
            })
        } else {
            None
        };
        devices.push(DeviceRecord {
            label,
            class,
            port,
            model,
            pass,
            retests,
            marginal,
            reasons,
            values,
            curve,
            part,
        });
    }
    let n = r.len("the thresholds")?;
    let mut thresholds = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        thresholds.push(read_threshold(&mut r)?);
    }
    let identity = r.string("the identity")?;
    let n = r.len("the rejected figures")?;
    let mut rejected = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        rejected.push(RejectedFigure {
            file: PathBuf::from(r.string("a rejected figure")?),
            unit: r.string("a rejected figure")?,
            device: r.string("a rejected figure")?,
            field: r.string("a rejected figure")?,
            value: r.string("a rejected figure")?,
            why: r.string("a rejected figure")?,
        });
    }
    let signer = r.opt_string("the signer's key")?;
    r.finish()?;
    Ok(UnitRecord {
        file,
        unit,
        board,
        station,
        build,
        phase,
        tool_version,
        started_at,
        pass,
        devices,
        thresholds,
        identity,
        rejected,
        signer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record with every field filled (a curve with a knee, reasons, a threshold of each
    /// kind, a rejected figure), as ingest extracts it from a report.
    fn full() -> UnitRecord {
        let yaml = br#"schema_version: 2
report_id: 0b8f6d2e-1111-4222-8333-444455556666
tool: {name: usbperf-matrix, version: 0.1.0}
started_at: 2026-11-30T10:00:00.123456789Z
status: complete
unit: {serial: "U1 \u00e9", model: Board A, image: {id: acme, version_id: "7.2", image_version: 7.2.0-42}}
verdict: {pass: false, reasons: []}
config:
  thresholds:
  - {select: {class: usb}, workload: seq-write, min_mib_per_s: 5.0}
  - {select: {all_non_system: true}, workload: rand-read, min_iops: 500, max_p99_latency_ms: 20}
  - {select: {class: usb, port: 'usb:1-2'}, min_link_mbps: 480}
  - {select: {class: usb}, workload: mixed, min_iops: 100}
devices:
- name: sda
  disk: {class: usb, vendor: Kingston, model: DataTraveler, serial: ABC, size_bytes: 31024349184,
         usb: {port_path: 1-2, speed_mbps: 12}}
  cells:
  - workload: seq-write
    status: failed
    result: {mib_per_s: 3.1000000000000001, iops: 3.1, all: {ios: 10, latency: {p99_ns: 1234567}}}
  - workload: write-curve
    status: passed
    result:
      mib_per_s: 9.6
      iops: 15.6
      all: {ios: 0, latency: {p99_ns: 0}}
      curve:
        samples: [{t_s: 1.0, mib_per_s: 16.07}, {t_s: 2.0, mib_per_s: 5.3}]
        knee: {t_s: 1.0, before_mib_per_s: 16.07, after_mib_per_s: 5.3}
  verdict:
    pass: false
    reasons:
    - {kind: threshold, rule: 'thresholds[0]', workload: seq-write, metric: mib_per_s,
       measured: 3.1, limit: 5.0, unit: MiB/s, device: sda, text: too slow}
    - {kind: link, rule: 'thresholds[2]', metric: link_mbps, measured: 12, limit: 480,
       unit: Mbit/s, port: 'usb:1-2', text: slow link}
- name: mmcblk0
  disk: {class: emmc, model: M}
  cells:
  - workload: seq-read
    status: passed
    result: {mib_per_s: 1.0e300, iops: 0.0, all: {ios: 1, latency: {p99_ns: 5}}}
  verdict: {pass: true}
"#;
        match usbperf_fleet::records::extract_bytes(std::path::Path::new("r.yaml"), yaml) {
            Ok(usbperf_fleet::records::Extracted::Record(r)) => *r,
            other => panic!("a complete report is a record: {other:?}"),
        }
    }

    /// The stored form gives back the record exactly: its JSON (every field, figures to the
    /// bit) is the same before and after.
    #[test]
    fn a_record_survives_its_encoding() {
        let mut r = full();
        r.file = 7;
        r.signer = Some("ab".repeat(32));
        assert!(
            r.devices[0].curve.is_some() && !r.rejected.is_empty(),
            "{r:?}"
        );
        assert!(
            r.devices[0].reasons.len() == 2 && r.thresholds.len() == 4,
            "{r:?}"
        );
        let bytes = encode(&r);
        let back = decode(7, &bytes).unwrap();
        let json = |r: &UnitRecord| serde_json::to_string(r).unwrap();
        assert_eq!(json(&back), json(&r));
        // Not stored: the place in the query's order.
        assert_eq!(decode(3, &bytes).unwrap().file, 3);
        // A third of the JSON or less.
        assert!(bytes.len() * 2 < json(&r).len(), "{} bytes", bytes.len());
    }

    /// Damaged or foreign bytes are an error naming what is wrong, never a panic or a
    /// different record.
    #[test]
    fn damaged_bytes_are_refused() {
        let bytes = encode(&full());
        for cut in 0..bytes.len() {
            assert!(decode(0, &bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut other = bytes.clone();
        other[0] = 9;
        assert_eq!(decode(0, &other).unwrap_err(), DecodeError::Format(9));
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            decode(0, &longer).unwrap_err(),
            DecodeError::Bytes(BytesError::Trailing(1))
        );
        assert!(decode(0, b"{\"file\":0}").is_err());
    }
}
