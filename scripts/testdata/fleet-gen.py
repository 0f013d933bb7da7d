#!/usr/bin/env python3
"""Write a synthetic fleet of usbperf reports with known distributions and planted problems.

usage: scripts/testdata/fleet-gen.py --units N --out DIR [--seed S] [--format yaml|json] [--start YYYY-MM-DD]
                         [--days D] [--outliers K] [--slow-port-percent P] [--truth FILE]
                         [--schema 1|2]
                         [--report-ids]

Deterministic for a given seed. Each unit has two devices: the on-module eMMC (mmcblk0) and a
USB stick on port usb:1-2 (two stick models, ~55/45). Every figure is its (board, device
model, workload) centre times (1 + spread * g), g a normal deviate clipped to +-2 so that no
unplanted value is a robust outlier (modified z-score > 3.5). Planted problems:
  * --outliers K units (default 5) whose USB seq-write is 20 % of the centre (the cell fails);
  * --slow-port-percent P (default 3) of units whose stick on usb:1-2 linked at 12M (full
    speed) instead of 480M: every figure of that device is a full-speed one and the device
    fails its link check, as the factory run reports it.
--truth FILE writes the planted (unit, device, problem) list as JSON for tests.
--schema 2 writes report schema 2 (every reason a record, a UUID report_id; the same figures
as schema 1 for the same seed), 1 (the default) the reports of builds before it. The reports
follow docs/report.schema.json or docs/report.v1.schema.json (check a few with
scripts/ci/validate-report.py), and a schema 2 report decodes into the report's own types and
encodes back to the same document (tests/report_types.rs): a change to the types that this
generator does not follow fails that test.
--field-months M follows every unit's eMMC into the field: its factory report carries the part's
CID (manfid 0x000015 and a serial) and its wear (eMMC life time A/B bands, PRE_EOL normal), and M
field reports follow, one a month (config phase: field), the part wearing at its own rate (a
normal deviate around 0.8 %/month, clipped to 0.5-1.1); --fast-wear K (default 1) of them wear at
4 %/month. The bands are the kernel's: a 10 % step each, the figure kept its top. The factory
config then carries max_life_used_percent: 70 for the eMMC. --truth lists the fast parts
(problem fast-wear, with the part's id).
--report-ids gives every schema 1 report a report_id (16 hex digits of sha256(seed, index): the
same for the same seed, without touching the random stream), as builds before schema 2 wrote
them, for the collector; schema 2 reports always carry their UUID report_id.
"""
import argparse
import datetime as dt
import hashlib
import json
import math
import os
import random
import re
import sys

BOARDS = [
    # (device-tree model, share, eMMC model, eMMC centres MiB/s: read-buffered, seq-write, seq-read)
    ("Toradex Apalis iMX8QM V1.1 on Apalis Evaluation Board", 0.7, "DG4016", (160.0, 42.0, 200.0)),
    ("Renesas SMARC EVK based on r9a07g043u11", 0.3, "S0J56X", (88.0, 24.0, 92.0)),
]
# USB stick models: (vendor, model, size, share, centres MiB/s: rb, sw, sr; rand-read/rand-write
# IOPS; knee (t_s, after share) of the write curve or None)
STICKS = [
    ("Kingston", "DataTraveler 3.0", 31024349184, 0.55, (36.0, 14.0, 38.0), (1900.0, 310.0), (8.0, 0.35)),
    ("SanDisk", "Ultra Fit", 30752000000, 0.45, (40.0, 17.0, 41.0), (2300.0, 420.0), None),
]
WORKLOADS = ["read-buffered", "seq-write", "seq-read", "rand-read", "rand-write", "mixed", "verify", "write-curve"]
SPREAD = 0.08
REASON_LINK = ("link: port 1-2 linked at 12M (full speed) but must give at least 480M (high "
               "speed): the high-speed handshake (chirp) failed, which on a USB 2.0 port almost "
               "always means a bad cable or connector, a damaged stick, or a USB 1.1 device: "
               "re-seat or replace the cable and stick; dmesg says 'new full-speed USB device' "
               "[thresholds[3] (class usb)]")
THRESHOLDS = [
    {"select": {"class": "emmc"}, "workload": "seq-write", "min_mib_per_s": 10.0},
    {"select": {"class": "usb"}, "workload": "seq-write", "min_mib_per_s": 5.0},
    {"select": {"class": "usb"}, "workload": "rand-read", "min_iops": 500.0},
    {"select": {"class": "usb"}, "min_link_mbps": 480.0},
]


def reason(text, kind, **fields):
    """A verdict reason as the schema writes it: a sentence (1) or a record (2)."""
    if SCHEMA == 1:
        return text
    return {"kind": kind, **fields, "text": text}


def text_of(r):
    return r if isinstance(r, str) else r["text"]


def uuid_of(hex32):
    """A version 4 UUID made of 32 hex digits already drawn (the machine id), so schema 2
    draws nothing more from the generator than schema 1."""
    h = list(hex32)
    h[12] = "4"
    h[16] = "89ab"[int(h[16], 16) & 3]
    h = "".join(h)
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


def g(rng):
    return max(-2.0, min(2.0, rng.gauss(0.0, 1.0)))


def vary(rng, centre):
    return centre * (1.0 + SPREAD * g(rng))


def figures(ios, nbytes, seconds, p50_ns, p99_ns):
    return {
        "ios": ios, "bytes": nbytes, "mib_per_s": nbytes / 1048576.0 / seconds,
        "iops": ios / seconds,
        "latency": {"min_ns": p50_ns // 3, "mean_ns": (p50_ns + p99_ns) // 3, "p50_ns": p50_ns,
                    "p90_ns": (p50_ns + p99_ns) // 2, "p99_ns": p99_ns, "p99_9_ns": p99_ns * 11 // 10,
                    "max_ns": p99_ns * 12 // 10},
        "stalls": {"over_1s": 0, "over_5s": 0, "longest_ns": p99_ns * 12 // 10},
    }


def cell(rng, when, dev, workload, mib_s, iops, knee=None):
    bs = 4096 if workload in ("rand-read", "rand-write", "mixed") else (2 << 20 if workload == "read-buffered" else 1 << 20)
    reads = workload in ("read-buffered", "seq-read", "rand-read", "mixed", "verify")
    writes = workload in ("seq-write", "rand-write", "mixed", "verify", "write-curve")
    if bs == 4096:
        mib_s = iops * bs / 1048576.0
    else:
        iops = mib_s * 1048576.0 / bs
    seconds = 1.5
    nbytes = int(mib_s * 1048576.0 * seconds) // bs * bs or bs
    ios = nbytes // bs
    seconds = nbytes / 1048576.0 / mib_s
    qd = 64 if bs == 4096 else 1
    p50 = int(qd * 1e9 / max(iops, 1.0))
    # A fixed tail ratio: a second random factor would widen the tails past the clip.
    p99 = p50 * 3
    fig = figures(ios, nbytes, seconds, p50, p99)
    target = "/var/lib/usbperf/scratch/.usbperf-testfile-%d.tmp" % WORKLOADS.index(workload)
    result = {
        "workload": workload, "engine": "uring",
        "engine_reason": "uring engine (auto): io_uring with SINGLE_ISSUER|DEFER_TASKRUN|COOP_TASKRUN, one ring per job, registered buffers and files",
        "params": {"workload": workload, "target": target, "engine": "auto", "block_bytes": bs,
                   "queue_depth": 16 if bs == 4096 else 1, "jobs": 4 if bs == 4096 else 1,
                   "runtime_ms": 1500, "size_bytes": 16777216, "cache": "direct",
                   "read_percent": 70 if workload == "mixed" else (100 if reads and not writes else 0),
                   "time_based": False, "seed": 1592594187, "sample_interval_ms": 1000,
                   "verify_mode": "quick", "verify_phase": "both", "verify_points": 1024,
                   "keep": False, "allow_write_device": False},
        "target": {"path": target, "kind": "file", "created": True, "region_bytes": 16777216,
                   "queue": {"device": dev, "read_ahead_kb": 128, "scheduler": "mq-deadline"}},
        "stopped_by": "size", "bytes": nbytes, "ios": ios, "seconds": seconds,
        "mib_per_s": mib_s, "iops": iops, "all": fig,
    }
    if reads:
        result["read"] = fig
    if writes:
        result["write"] = fig
    result["cpu"] = {"usr_s": 0.01, "sys_s": 0.02, "usr_percent": 1.0, "sys_percent": 2.0,
                     "cpu_ns_per_io": 30000.0}
    if workload == "write-curve":
        samples, cum = [], 0.0
        for t in range(1, 21):
            rate = mib_s * (knee[1] if knee and t > knee[0] else 1.0) * (1 + 0.03 * g(rng))
            cum += rate
            samples.append({"t_s": float(t), "cumulative_mib": cum, "mib_per_s": rate})
        k = None
        if knee:
            before = mib_s
            after = mib_s * knee[1]
            k = {"t_s": knee[0], "cumulative_mib": before * knee[0], "before_mib_per_s": before,
                 "after_mib_per_s": after, "drop_percent": 100.0 * (1 - knee[1])}
        result["curve"] = {"interval_ms": 1000, "samples": samples, "knee": k}
        result["mib_per_s"] = cum / 20.0
    if workload == "verify":
        result["verify"] = {"mode": "quick", "phase": "both", "seed": 1592594187,
                            "blocks_written": 16, "blocks_checked": 16, "mismatched_blocks": 0,
                            "mismatches": []}
    return {"workload": workload, "status": "passed", "started_at": when,
            "wall_seconds": seconds + 0.01, "result": result}


def iso(t):
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def unit_report(rng, i, start, days, planted_outlier, slow_port, tool_version):
    r = rng.random()
    board = BOARDS[0] if r < BOARDS[0][1] else BOARDS[1]
    stick = STICKS[0] if rng.random() < STICKS[0][3] else STICKS[1]
    t0 = start + dt.timedelta(seconds=(i + rng.random()) * days * 86400.0 / UNITS)
    serial = "%08d" % (15000000 + i)
    mid = "%032x" % rng.getrandbits(128)
    when = iso(t0)
    devices = []
    unit_reasons = []
    truth = []
    # eMMC
    rb, sw, sr = board[3]
    cells = []
    for w in WORKLOADS:
        if w == "write-curve":
            continue
        mib = {"read-buffered": rb, "seq-write": sw, "seq-read": sr, "verify": sr * 0.4}.get(w, 0.0)
        iops = {"rand-read": 3100.0, "rand-write": 1200.0, "mixed": 2000.0}.get(w, 0.0)
        if board is BOARDS[1]:
            iops *= 0.6
        cells.append(cell(rng, when, "mmcblk0", w, vary(rng, mib), vary(rng, iops)))
    devices.append({
        "name": "mmcblk0", "label": "on-module eMMC", "rule": 0,
        "disk": {"name": "mmcblk0", "devnum": "179:0", "dev_node": "/dev/mmcblk0",
                 "devpath": "/devices/platform/soc/5b010000.mmc/mmc_host/mmc0/mmc0:0001/block/mmcblk0",
                 "class": "emmc", "model": board[2], "serial": "0x%08x" % rng.getrandbits(32),
                 "size_bytes": 15758000128, "logical_block_size_bytes": 512,
                 "physical_block_size_bytes": 512, "rotational": False, "removable": False,
                 "read_only": False,
                 "partitions": [{"name": "mmcblk0p1", "number": 1, "size_bytes": 15700000000,
                                               "start_sector": 2048,
                                               "mounts": [{"mountpoint": "/", "fstype": "ext4", "read_only": False}]}]},
        "placement": {"mode": "file", "dir": "/var/lib/usbperf/scratch", "disk": "mmcblk0",
                      "mountpoint": "/", "fstype": "ext4", "free_bytes": 9000000000,
                      "headroom_bytes": 1575800012, "max_file_bytes": 7424199988},
        "cells": cells, "verdict": {"pass": True},
    })
    # USB stick
    speed = 12.0 if slow_port else 480.0
    rbu, swu, sru = stick[4]
    rr, rw = stick[5]
    cells, dev_reasons = [], []
    for w in WORKLOADS:
        # A stick without a knee sustains about what the other averages over its curve, so
        # the class stays one population for write-curve too.
        wc = swu if stick[6] else swu * 0.6
        mib = {"read-buffered": rbu, "seq-write": swu, "seq-read": sru, "verify": sru * 0.4,
               "write-curve": wc}.get(w, 0.0)
        iops = {"rand-read": rr, "rand-write": rw, "mixed": (rr * 0.7 + rw * 0.3)}.get(w, 0.0)
        if slow_port:
            # Full speed moves about 1 MiB/s whatever the stick could do.
            mib, iops = min(mib, 1.05), min(iops, 240.0)
        c = cell(rng, when, "sda", w, vary(rng, mib), vary(rng, iops), stick[6])
        if w == "seq-write" and planted_outlier:
            r = c["result"]
            r["mib_per_s"] = swu * 0.2
            r["iops"] = r["mib_per_s"]
            for k in ("all", "write"):
                r[k]["mib_per_s"], r[k]["iops"] = r["mib_per_s"], r["mib_per_s"]
            c["status"] = "failed"
            c["reasons"] = [reason("seq-write: %.1f MiB/s < minimum 5.0 MiB/s [thresholds[1] (class usb)]" % r["mib_per_s"],
                                   "threshold", rule="thresholds[1]", workload="seq-write", metric="mib_per_s",
                                   measured=r["mib_per_s"], limit=5.0, unit="MiB/s", device="sda")]
            dev_reasons += c["reasons"]
            truth.append({"unit": serial, "device": "sda", "problem": "seq-write-outlier"})
        if slow_port and w == "seq-write":
            c["status"] = "failed"
            c["reasons"] = [reason("seq-write: %.1f MiB/s < minimum 5.0 MiB/s [thresholds[1] (class usb)]" % c["result"]["mib_per_s"],
                                   "threshold", rule="thresholds[1]", workload="seq-write", metric="mib_per_s",
                                   measured=c["result"]["mib_per_s"], limit=5.0, unit="MiB/s", device="sda")]
            dev_reasons += c["reasons"]
        if slow_port and w == "rand-read":
            c["status"] = "failed"
            c["reasons"] = [reason("rand-read: %.0f IOPS < minimum 500.0 IOPS [thresholds[2] (class usb)]" % c["result"]["iops"],
                                   "threshold", rule="thresholds[2]", workload="rand-read", metric="iops",
                                   measured=c["result"]["iops"], limit=500.0, unit="IOPS", device="sda")]
            dev_reasons += c["reasons"]
        cells.append(c)
    if slow_port:
        dev_reasons.insert(0, reason(REASON_LINK, "link", rule="thresholds[3]", metric="link_mbps",
                                     measured=12.0, limit=480.0, unit="Mbit/s", device="sda",
                                     port="usb:1-2"))
        truth.append({"unit": serial, "device": "sda", "problem": "slow-port"})
    hub = {"port_path": "usb1", "speed_mbps": 480.0, "version": "2.00", "vendor_id": "1d6b",
           "product_id": "0002", "product": "EHCI Host Controller", "ports": 2}
    devices.append({
        "name": "sda", "label": "USB host port", "rule": 2,
        "disk": {"name": "sda", "devnum": "8:0", "dev_node": "/dev/sda",
                 "devpath": "/devices/platform/soc/5b0d0000.usb/ci_hdrc.0/usb1/1-2/1-2:1.0/host0/target0:0:0/0:0:0:0/block/sda",
                 "class": "usb", "vendor": stick[0], "model": stick[1],
                 "serial": "%016X" % rng.getrandbits(64),
                 "id_path": "platform-ci_hdrc.0-usb-0:2:1.0-scsi-0:0:0:0",
                 "size_bytes": stick[2], "logical_block_size_bytes": 512,
                 "physical_block_size_bytes": 512, "rotational": False, "removable": True,
                 "read_only": False,
                 "usb": {"bus": 1, "port_path": "1-2", "devnum": 3, "speed_mbps": speed,
                         "version": "3.20", "vendor_id": "0951", "product_id": "1666",
                         "manufacturer": stick[0], "product": stick[1],
                         "interface": "1-2:1.0", "driver": "usb-storage", "root_hub": hub,
                         "min_chain_speed_mbps": speed, "host_controller_driver": "ci_hdrc"}},
        "placement": {"mode": "raw-write"},
        "cells": cells,
        "verdict": {"pass": not dev_reasons, "reasons": dev_reasons},
    })
    for d in devices:
        if not d["verdict"]["pass"]:
            unit_reasons.append(reason(d["name"] + ": " + "; ".join(map(text_of, d["verdict"]["reasons"])),
                                       "device_failed", device=d["name"]))
        elif "reasons" in d["verdict"]:
            del d["verdict"]["reasons"]
    rep = {
        "schema_version": SCHEMA,
        **({"report_id": uuid_of(mid)} if SCHEMA == 2 else {}),
        "tool": {"name": "usbperf-matrix", "version": tool_version, "features": ["udev", "uring"]},
        "started_at": when, "finished_at": iso(t0 + dt.timedelta(seconds=31)),
        "status": "complete", "exit_code": 0 if not unit_reasons else 1,
        "unit": {"hostname": "apalis-" + serial, "machine_id": mid, "model": board[0],
                 "serial": serial, "identity_source": "device-tree",
                 "kernel_release": "6.6.23-7.0.0", "architecture": "aarch64",
                 "cpu_model": "Cortex-A53", "cpu_count": 4, "memory_bytes": 4123456789},
        "config": {"sources": ["builtin:quick", "/etc/usbperf/usbperf.yaml"],
                   "description": "factory matrix", "report_dir": "/var/lib/usbperf/reports",
                   "report_format": FORMAT, "engine": "auto", "wait_devices": "20s",
                   **({"schedule": "serial"} if SCHEMA == 2 else {}),
                   "headroom_percent": 10,
                   "devices": [{"select": {"class": "emmc"}, "target": {"dir": "/var/lib/usbperf/scratch"}, "required": True, "label": "on-module eMMC"},
                               {"select": {"class": "usb"}, "target": "raw", "label": "USB host port"}],
                   "tests": [{"workload": w, "runtime": "1500ms"} for w in WORKLOADS],
                   "thresholds": THRESHOLDS},
        "inventory_backend": "udev", "devices": devices,
        "verdict": {"pass": not unit_reasons, **({"reasons": unit_reasons} if unit_reasons else {})},
    }
    return serial, rep, truth


PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./ -]*$")
RESERVED = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"}


def scalar(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, (int, float)):
        return repr(float(v)) if isinstance(v, float) else str(v)
    s = str(v)
    if re.match(r"^\d{4}-\d\d-\d\dT[\d:.]+Z$", s):
        return s
    if PLAIN.match(s) and s.lower() not in RESERVED and not s.endswith(" ") and ": " not in s and " #" not in s:
        return s
    return "'" + s.replace("'", "''") + "'"


def emit(v, indent, out):
    pad = "  " * indent
    if isinstance(v, dict):
        if not v:
            out.append(pad + "{}")
        for k, x in v.items():
            if isinstance(x, (dict, list)) and x:
                out.append("%s%s:" % (pad, k))
                emit(x, indent + (1 if isinstance(x, dict) else 0), out)
            else:
                out.append("%s%s: %s" % (pad, k, "[]" if x == [] else "{}" if x == {} else scalar(x)))
    else:
        for x in v:
            if isinstance(x, dict) and x:
                sub = []
                emit(x, indent + 1, sub)
                sub[0] = pad + "- " + sub[0][len(pad) + 2:]
                out.extend(sub)
            else:
                out.append(pad + "- " + scalar(x))


def to_yaml(rep):
    out = []
    emit(rep, 0, out)
    return "\n".join(out) + "\n"


def regress(rep, spec):
    """Scales one workload's figures on one class's devices by (1 + PERCENT / 100)."""
    cls, workload, pct = spec.split(":")
    f = 1.0 + float(pct) / 100.0
    for d in rep["devices"]:
        if d["disk"]["class"] != cls:
            continue
        for c in d["cells"]:
            if c["workload"] != workload or "result" not in c:
                continue
            r = c["result"]
            for part in [r] + [r[k] for k in ("all", "read", "write") if k in r]:
                for key in ("mib_per_s", "iops"):
                    if key in part:
                        part[key] = part[key] * f


MANFID = "0x000015"
LIFE_LIMIT = 70
FAST_RATE = 4.0


def band(wear):
    """The kernel's life time estimate of a wear in %: a 10 % band (raw 1 = 0-10 %)."""
    raw = min(11, max(1, int(math.ceil(wear / 10.0))))
    top = 101 if raw == 11 else raw * 10
    return {"raw": raw, "used_percent_min": (raw - 1) * 10, "used_percent_max": top}


def wear_at(rep, part_serial, wear):
    """Gives the report's eMMC its CID and a wear of `wear` % (type B at half of it)."""
    for d in rep["devices"]:
        if d["disk"]["class"] != "emmc":
            continue
        d["disk"]["mmc"] = {"card": "mmc0:0001", "card_type": "MMC", "manfid": MANFID,
                            "serial": part_serial, "host": "mmc0"}
        a, b = band(wear), band(wear / 2.0)
        d["disk"]["health"] = {"life_time_used_percent_max": max(a["used_percent_max"], b["used_percent_max"]),
                               "pre_eol": "normal",
                               "emmc": {"life_time_a": a, "life_time_b": b, "pre_eol": "normal",
                                        "life_source": "sysfs"}}


def write(a, rep):
    name = "usbperf-%s-%s.%s" % (rep["unit"]["machine_id"][:12],
                                  rep["started_at"][:19].replace("-", "").replace(":", "") + "Z",
                                  a.format)
    with open(os.path.join(a.out, name), "w") as f:
        if a.format == "json":
            f.write(json.dumps(rep, indent=2) + "\n")
        else:
            f.write(to_yaml(rep))


def main():
    global UNITS, FORMAT, SCHEMA
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--units", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=6)
    ap.add_argument("--format", choices=["yaml", "json"], default="yaml")
    ap.add_argument("--start", default="2026-09-01")
    ap.add_argument("--days", type=float, default=56)
    ap.add_argument("--outliers", type=int, default=5)
    ap.add_argument("--slow-port-percent", type=float, default=3.0)
    ap.add_argument("--truth")
    ap.add_argument("--schema", type=int, choices=[1, 2], default=1)
    ap.add_argument("--report-ids", action="store_true")
    ap.add_argument("--field-months", type=int, default=0)
    ap.add_argument("--fast-wear", type=int, default=1)
    ap.add_argument("--builds", default="",
                    help="comma-separated image builds (os-release VERSION_ID of ID acme), in "
                         "production order: the units are split among them in time order")
    ap.add_argument("--regress", action="append", default=[],
                    help="CLASS:WORKLOAD:PERCENT: the last build's CLASS devices measure "
                         "WORKLOAD's MiB/s and IOPS PERCENT %% off (e.g. emmc:seq-write:-18)")
    a = ap.parse_args()
    UNITS, FORMAT, SCHEMA = a.units, a.format, a.schema
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    start = dt.datetime.strptime(a.start, "%Y-%m-%d")
    order = list(range(a.units))
    rng.shuffle(order)
    n_slow = int(round(a.units * a.slow_port_percent / 100.0))
    slow = set(order[:n_slow])
    outl = set(order[n_slow:n_slow + a.outliers])
    # Its own random stream: the figures of every report stay those of the same seed without it.
    wrng = random.Random(a.seed * 7919 + 1)
    fast = set(wrng.sample(range(a.units), min(a.fast_wear, a.units))) if a.field_months else set()
    truth = []
    for i in range(a.units):
        version = "0.1.0" if i < a.units * 0.8 else "0.1.1"
        serial, rep, t = unit_report(rng, i, start, a.days, i in outl, i in slow, version)
        truth += t
        builds = [b for b in a.builds.split(",") if b]
        if builds:
            k = min(i * len(builds) // a.units, len(builds) - 1)
            rep["unit"]["image"] = {"id": "acme", "version_id": builds[k],
                                    "pretty_name": "Acme Linux " + builds[k]}
            if k == len(builds) - 1:
                for spec in a.regress:
                    regress(rep, spec)
        if a.report_ids and "report_id" not in rep:
            rid = hashlib.sha256(("%d-%d" % (a.seed, i)).encode()).hexdigest()[:16]
            rep = {"schema_version": rep["schema_version"], "report_id": rid,
                   **{k: v for k, v in rep.items() if k != "schema_version"}}
        if a.field_months:
            part = "0x%08x" % wrng.getrandbits(32)
            rate = FAST_RATE if i in fast else min(1.1, max(0.5, 0.8 + 0.15 * wrng.gauss(0, 1)))
            base = 1.0 + 3.0 * wrng.random()
            rep["config"]["thresholds"] = rep["config"]["thresholds"] + [
                {"select": {"class": "emmc"}, "max_life_used_percent": LIFE_LIMIT}]
            wear_at(rep, part, base)
            if i in fast:
                truth.append({"unit": rep["unit"]["serial"], "device": "mmcblk0",
                              "problem": "fast-wear", "part": "emmc %s %s" % (MANFID, part)})
        write(a, rep)
        t0 = dt.datetime.strptime(rep["started_at"][:19], "%Y-%m-%dT%H:%M:%S")
        for m in range(1, a.field_months + 1):
            f = json.loads(json.dumps(rep))
            t = t0 + dt.timedelta(days=30.436875 * m, hours=wrng.random() * 20)
            f["started_at"] = iso(t)
            f["finished_at"] = iso(t + dt.timedelta(seconds=31))
            f["config"]["phase"] = "field"
            if "report_id" in f:
                h = hashlib.sha256(("%d-%d-field-%d" % (a.seed, i, m)).encode()).hexdigest()
                f["report_id"] = uuid_of(h[:32]) if SCHEMA == 2 else h[:16]
            wear_at(f, part, base + rate * m)
            write(a, f)
    if a.truth:
        with open(a.truth, "w") as f:
            json.dump(truth, f, indent=1)
    print("fleet-gen: %d reports in %s (%d slow-port units, %d seq-write outliers)"
          % (a.units, a.out, len(slow), len(outl)), file=sys.stderr)


UNITS = 1
FORMAT = "yaml"
SCHEMA = 1
if __name__ == "__main__":
    main()
