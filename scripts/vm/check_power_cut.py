#!/usr/bin/env python3
"""The assertions of scripts/ci/vm-power-cut.sh over what its two boots left on their output disks
(stdlib only). Each scenario's verdict JSON is `usbperf-matrix power-cut verify --format json`:
{verdict, blocks, acknowledged, intact, lost, torn, misplaced, written_unacknowledged,
never_written, lost_ranges, torn_ranges, ...}.

  check_power_cut.py --boot1 DIR --boot2 DIR --boot-service DIR --points FILE --cut FILE
                     [--flush-every N] [--schema FILE]
    --boot1         boot 1's e2e/phase1 (lw-write.*, fl-*)
    --boot2         boot 2's e2e/phase2 (lw-<point>.json/.rc, boot-service.log/.rc)
    --boot-service  the boot service's report directory (its power-cut-<stamp>.json)
    --points        the replay points (scripts/vm/log_writes.py points --json)
    --cut           "N M": the progress line after which the host killed QEMU
    --schema        the verdict's JSON schema (docs/power-cut.schema.json): each verdict is
                    validated against it (needs python3-jsonschema)
Exits 1 when an assertion failed (each is printed), 0 when all held.
"""
import argparse, glob, json, os, sys

FAILS = []
HELD = [0]
SCHEMA = [None]


def ok(cond, what):
    if cond:
        HELD[0] += 1
    else:
        FAILS.append(what)
        print(f"  FAIL: {what}")
    return cond


def text(path, default=None):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def code(path):
    t = text(path)
    try:
        return int(t)
    except (TypeError, ValueError):
        return None


def verdict(path):
    """The verdict object of a JSON file, or None (said as a failure)."""
    t = text(path)
    if not t:
        ok(False, f"{path}: no verdict JSON")
        return None
    try:
        v = json.loads(t)
    except ValueError as e:
        ok(False, f"{path}: not JSON ({e}): {t[:200]!r}")
        return None
    ok(v.get("format") == "usbperf-power-cut" and v.get("version") == 1,
       f"{path}: format {v.get('format')!r} version {v.get('version')!r}")
    if SCHEMA[0] is not None:
        errors = [e.message for e in SCHEMA[0].iter_errors(v)]
        ok(not errors, f"{path}: not valid against the verdict's schema: {'; '.join(errors[:3])}")
    keys = ["verdict", "blocks", "acknowledged", "intact", "lost", "torn", "misplaced",
            "written_unacknowledged", "never_written", "lost_ranges", "torn_ranges"]
    missing = [k for k in keys if k not in v]
    if not ok(not missing, f"{path}: lacks {', '.join(missing)}"):
        return None
    return v


def counts(v):
    return (f"{v['verdict']}: acknowledged {v['acknowledged']} of {v['blocks']} blocks, intact {v['intact']}, "
            f"lost {v['lost']}, torn {v['torn']}, misplaced {v['misplaced']}, "
            f"written unacknowledged {v['written_unacknowledged']}, never written {v['never_written']}"
            + (f", lost ranges {v['lost_ranges']}" if v["lost_ranges"] else ""))


def whole(v, where):
    """Every block of the region is counted once."""
    judged = v["intact"] + v["lost"] + v["torn"] + v["misplaced"]
    ok(judged == v["acknowledged"], f"{where}: intact + lost + torn + misplaced = {judged}, acknowledged {v['acknowledged']}")
    ok(judged + v["written_unacknowledged"] + v["never_written"] == v["blocks"],
       f"{where}: the counts do not add up to the region's {v['blocks']} blocks")


def survived(v, where):
    """A pass: every acknowledged block intact, some acknowledged."""
    ok(v["verdict"] == "pass", f"{where}: verdict {v['verdict']}, expected pass ({v.get('reason', '')})")
    ok(v["lost"] == v["torn"] == v["misplaced"] == 0, f"{where}: acknowledged blocks did not survive")
    ok(v["acknowledged"] > 0, f"{where}: nothing acknowledged (untested)")
    whole(v, where)


def lw(a, points):
    print("lw: dm-log-writes, the log replayed to its flushes (boot 1 wrote, boot 2 verified)")
    ok(code(os.path.join(a.boot1, "lw-write.rc")) == 0,
       f"lw: power-cut write exited {text(os.path.join(a.boot1, 'lw-write.rc'))}: {text(os.path.join(a.boot1, 'lw-write.log'), '')[-400:]}")
    # the log as read here holds what the target counted (dmsetup status before its removal:
    # <logged entries> <highest sector>) and the mark its removal adds
    status = (text(os.path.join(a.boot1, "lw-status.txt"), "") or "").split()
    end = [p for p in points if p["name"] == "end"]
    if ok(len(status) >= 4 and status[3].isdigit() and end, f"lw: no log-writes status ({status})"):
        ok(end[0]["upto"] == int(status[3]),
           f"lw: the log read back has {end[0]['upto'] + 1} entries, the target logged {status[3]} and its end mark")
    seen = []
    for p in points:
        name = p["name"]
        where = f"lw {name} (log entry {p['upto']}, flush {p['flush']} of {p['flushes']})"
        v = verdict(os.path.join(a.boot2, f"lw-{name}.json"))
        rc = code(os.path.join(a.boot2, f"lw-{name}.rc"))
        if v is None:
            print(f"  {where}: exit {rc}: {text(os.path.join(a.boot2, f'lw-{name}.err'), '')[-400:]}")
            continue
        print(f"  {where}: exit {rc}, {counts(v)}")
        ok(rc == 0, f"{where}: verify exited {rc}, expected 0")
        survived(v, where)
        ok(v.get("write_complete") == (v["acknowledged"] == v["blocks"]),
           f"{where}: write_complete {v.get('write_complete')} with {v['acknowledged']} of {v['blocks']} acknowledged")
        seen.append((name, v))
    mid = [v for n, v in seen if n != "end"]
    ok(any(v["acknowledged"] < v["blocks"] for v in mid),
       "lw: no replay point cut the write mid-way (every mid-log point had it all acknowledged)")
    end = [v for n, v in seen if n == "end"]
    ok(bool(end) and end[0]["acknowledged"] == end[0]["blocks"], "lw: the whole log does not hold the whole region acknowledged")
    acks = [v["acknowledged"] for _n, v in seen]
    ok(acks == sorted(acks), f"lw: the acknowledged counts go backwards along the log: {acks}")


def fl(a):
    print("fl: dm-flakey drop_writes switched on mid-write (boot 1)")
    d = a.boot1
    before = code(os.path.join(d, "fl-acked-before-switch.txt"))
    at_suspend = code(os.path.join(d, "fl-acked-at-suspend.txt"))
    wrc = code(os.path.join(d, "fl-write.rc"))
    print(f"  acknowledged before the switch: {before} (at the suspend: {at_suspend}); power-cut write exited {wrc}")
    if not ok(before is not None and before > 0, "fl: the table was never switched (no acknowledged block seen in time)"):
        print("  " + text(os.path.join(d, "fl-write.log"), "")[-600:])
        return
    ok(wrc == 0, f"fl: power-cut write exited {wrc}, expected 0 (dropped writes still complete): "
                 f"{text(os.path.join(d, 'fl-write.log'), '')[-400:]}")
    v = verdict(os.path.join(d, "fl-verify.json"))
    rc = code(os.path.join(d, "fl-verify.rc"))
    if v is None:
        print(f"  verify exited {rc}: {text(os.path.join(d, 'fl-verify.err'), '')[-400:]}")
        return
    print(f"  verify: exit {rc}, {counts(v)}")
    ok(rc == 1, f"fl: verify exited {rc}, expected 1 (fail)")
    ok(v["verdict"] == "fail", f"fl: verdict {v['verdict']}, expected fail")
    ok(v["lost"] > 0, "fl: no acknowledged block was lost, though the medium dropped the writes")
    ok(v["acknowledged"] == v["blocks"] and v.get("write_complete") is True,
       f"fl: {v['acknowledged']} of {v['blocks']} acknowledged (write_complete {v.get('write_complete')}); the writer ran to its end")
    whole(v, "fl")
    if v["lost_ranges"]:
        first = v["lost_ranges"][0][0]
        ok(first >= before - a.flush_every,
           f"fl: block {first} lost, below the {before} acknowledged before the switch (less a flush group of {a.flush_every})")
        print(f"  first lost block {first}: {first - before:+d} from the count seen before the switch")
    else:
        ok(False, "fl: lost blocks but no lost_ranges")


def pc(a):
    print("pc: SIGKILL of QEMU mid-write, the boot service's verify on the next boot")
    cut = text(a.cut, "")
    try:
        n_cut, m_cut = (int(x) for x in cut.split())
    except ValueError:
        ok(False, f"pc: no power cut recorded ({a.cut}: {cut!r})")
        return
    log = text(os.path.join(a.boot2, "boot-service.log"), "")
    src = code(os.path.join(a.boot2, "boot-service.rc"))
    print(f"  killed after 'acknowledged {n_cut} of {m_cut} blocks'; the boot service exited {src}")
    for line in log.splitlines():
        if line.startswith("usbperf-boot:"):
            print(f"    {line}")
    files = sorted(glob.glob(os.path.join(a.boot_service, "power-cut-*.json")))
    if not ok(len(files) == 1, f"pc: {len(files)} power-cut-*.json in {a.boot_service}, expected 1 (boot service log: {log[-600:]!r})"):
        return
    v = verdict(files[0])
    if v is None:
        return
    print(f"  {os.path.basename(files[0])}: {counts(v)}")
    survived(v, "pc")
    ok(v["blocks"] == m_cut, f"pc: the verdict's region is {v['blocks']} blocks, the write's {m_cut}")
    ok(v["acknowledged"] < v["blocks"] and v.get("write_complete") is False,
       "pc: the whole region was acknowledged (or the write said it ended): the cut came too late")
    ok(v["acknowledged"] >= n_cut,
       f"pc: {v['acknowledged']} acknowledged after the cut, fewer than the {n_cut} the console showed before it")
    # The verdict's report beside it: the same judgement on the disk holding the region,
    # a device with no cells that the unit's verdict follows.
    reports = sorted(glob.glob(os.path.join(a.boot_service, "usbperf-power-cut-*.json")))
    if ok(len(reports) == 1, f"pc: {len(reports)} usbperf-power-cut-*.json reports in {a.boot_service}, expected 1"):
        with open(reports[0]) as f:
            r = json.load(f)
        d = r["devices"][0] if r.get("devices") else {}
        ok(d.get("power_cut") == v, "pc: the report's power_cut is not the verdict written beside it")
        ok(d.get("cells") == [] and r["verdict"]["pass"] == (v["verdict"] == "pass"),
           f"pc: the report's device has cells or its verdict is not the power cut's: {r['verdict']}")
        ok(d.get("disk", {}).get("name") not in (None, "", "t.bin"),
           f"pc: the report names no disk for the region: {d.get('disk', {}).get('name')!r}")
        print(f"  {os.path.basename(reports[0])}: device {d.get('disk', {}).get('name')}, verdict pass={r['verdict']['pass']}")
    ok("usbperf-boot: power-cut verify: pass" in log, "pc: the boot service did not log 'usbperf-boot: power-cut verify: pass'")
    i_verify = log.find("usbperf-boot: power-cut verify:")
    i_write = log.find("usbperf-boot: power-cut: write phase (")
    ok(0 <= i_verify < i_write, "pc: the boot service did not verify first, then start the next write phase")
    ok("usbperf-boot: power-cut: write phase ended (exit 0)" in log, "pc: the next write phase did not end with exit 0")
    ok(src == 0, f"pc: the boot service exited {src}, expected 0 (verify passed, stamp present: no run)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--boot1", required=True)
    ap.add_argument("--boot2", required=True)
    ap.add_argument("--boot-service", required=True)
    ap.add_argument("--points", required=True)
    ap.add_argument("--cut", required=True)
    ap.add_argument("--flush-every", type=int, default=64)
    ap.add_argument("--schema")
    a = ap.parse_args()
    if a.schema:
        import jsonschema
        with open(a.schema) as f:
            schema = json.load(f)
        SCHEMA[0] = jsonschema.validators.validator_for(schema)(schema)
    with open(a.points) as f:
        points = json.load(f)
    lw(a, points)
    fl(a)
    pc(a)
    if FAILS:
        print(f"check_power_cut.py: {len(FAILS)} assertion(s) failed, {HELD[0]} held")
        sys.exit(1)
    print(f"check_power_cut.py: all {HELD[0]} assertions held")


if __name__ == "__main__":
    main()
