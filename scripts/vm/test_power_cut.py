#!/usr/bin/env python3
"""Self-test of scripts/ci/vm-power-cut.sh's host tools, in seconds, without root or QEMU:
log_writes.py on a log built here byte by byte from the kernel's format (the replay points and
what a replay leaves), and check_power_cut.py on outputs shaped like a passing run's, which
must pass, and with planted faults, each of which must fail.
usage: python3 scripts/vm/test_power_cut.py"""
import copy, json, os, struct, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import log_writes as lw  # noqa: E402

FAILED = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILED.append(what)


def build_log(path, ss, items):
    """items: (flags, sector, data bytes or a sector count for a discard, mark or None)."""
    with open(path, "wb") as f:
        f.write(struct.pack("<QQQI", lw.MAGIC, 1, len(items), ss).ljust(ss, b"\0"))
        for flags, sector, data, mark in items:
            if flags & lw.DISCARD:
                n, body = data, b""
            else:
                n, body = len(data) // ss, data
            m = mark.encode() if mark else b""
            f.write((struct.pack("<QQQQ", sector, n, flags, len(m)) + m).ljust(ss, b"\0"))
            f.write(body)


def test_log(tmp):
    for ss in (512, 4096):
        log = os.path.join(tmp, f"log{ss}")
        a, b = b"A" * 2 * ss, b"B" * ss
        build_log(log, ss, [
            (0, 1, a, None),                                         # before the write phase
            (lw.MARK, 0, b"", "write-start"),
            (0, 4, b, None),
            (lw.FLUSH, 0, b"", None),                                # 3: flush 1 of 3
            (lw.DISCARD, 1, 1, None),
            (lw.FLUSH | lw.FUA | lw.METADATA, 6, b, None),           # 5: flush 2 of 3
            (lw.FLUSH, 0, b"", None),                                # 6: flush 3 of 3
            (lw.MARK, 0, b"", "write-end"),
            (0, 7, b, None),
            (lw.MARK, 0, b"", "dm-log-writes-end"),
        ])
        rows = list(lw.entries(log))
        expect(len(rows) == 10 and rows[1][4] == "write-start" and rows[9][4] == "dm-log-writes-end",
               f"log_writes.py reads every entry and mark (sector size {ss})")
        pts = lw.points(log, "write-start", "write-end", [34, 67, 100])
        expect([(p["name"], p["upto"]) for p in pts] == [("at34", 3), ("at67", 5), ("at100", 6), ("end", 9)],
               f"the replay points are the FLUSH entries between the marks, and the end ({pts})")
        base = os.path.join(tmp, "base")
        with open(base, "wb") as f:
            f.write(b"." * 10 * ss)
        out = os.path.join(tmp, "out")
        lw.replay(log, base, out, 3)
        img = open(out, "rb").read()
        expect(img == b"." * ss + a + b"." * ss + b + b"." * 5 * ss, "a replay to a flush holds the writes before it, no later one")
        lw.replay(log, base, out, 9)
        img = open(out, "rb").read()
        want = b"." * ss + b"\0" * ss + b"A" * ss + b"." * ss + b + b"." * ss + b + b + b"." * 2 * ss
        expect(img == want, "the whole log: discards read back as zeros, every write in place")
    bad = os.path.join(tmp, "bad")
    with open(bad, "wb") as f:
        f.write(b"\0" * 4096)
    try:
        list(lw.entries(bad))
        expect(False, "a log without the magic is refused")
    except lw.LogError:
        expect(True, "a log without the magic is refused")


def verdict(blocks, acked, intact, lost=0, first_lost=None, wu=0):
    never = blocks - acked - wu
    return {"format": "usbperf-power-cut", "version": 1, "verdict": "fail" if lost else ("pass" if acked else "untested"),
            "target": "/x", "block_bytes": 4096, "blocks": blocks, "acknowledged": acked,
            "write_complete": acked == blocks, "started": "2026-01-01T00:00:00Z", "intact": intact,
            "lost": lost, "torn": 0, "misplaced": 0, "written_unacknowledged": wu, "never_written": never,
            "lost_ranges": [[first_lost, first_lost + lost - 1]] if lost else [], "torn_ranges": [], "reason": ""}


# The report the boot service's verify writes beside its verdict.
REPORT = "bs/usbperf-power-cut-U1-20260101T000000Z-0a1b2c3d.json"


def good_run():
    """A run shaped as a passing one: {relative path: content}."""
    pts = [{"name": "at25", "upto": 185, "flush": 24, "flushes": 98}, {"name": "at50", "upto": 379, "flush": 49, "flushes": 98},
           {"name": "at75", "upto": 572, "flush": 74, "flushes": 98}, {"name": "end", "upto": 783, "flush": 98, "flushes": 98}]
    files = {"points.json": pts, "cut.txt": "512 12288",
             "b1/lw-write.rc": "0", "b1/lw-status.txt": "0 65536 log-writes 783 22303",
             "b1/fl-acked-before-switch.txt": "128", "b1/fl-acked-at-suspend.txt": "256", "b1/fl-write.rc": "0",
             "b1/fl-verify.rc": "1", "b1/fl-verify.json": verdict(2048, 2048, 256, 1792, 256),
             "b2/boot-service.rc": "0",
             "b2/boot-service.log": "usbperf-boot: power-cut: verifying /mnt/pc/power-cut.state\n"
                                    "usbperf-boot: power-cut verify: pass (/x.json)\n"
                                    "usbperf-boot: power-cut: write phase (--target /mnt/pc/t.bin)\n"
                                    "usbperf-boot: power-cut: write phase ended (exit 0)\n",
             "bs/power-cut-20260101T000000Z-1.json": verdict(12288, 576, 576, wu=64),
             REPORT: {"devices": [{"name": "vdc", "disk": {"name": "vdc"}, "cells": [],
                                   "power_cut": verdict(12288, 576, 576, wu=64), "verdict": {"pass": True}}],
                      "verdict": {"pass": True}}}
    for name, acked in (("at25", 448), ("at50", 960), ("at75", 1472), ("end", 2048)):
        files[f"b2/lw-{name}.rc"] = "0"
        files[f"b2/lw-{name}.json"] = verdict(2048, acked, acked)
    return files


def check(tmp, files):
    d = tempfile.mkdtemp(dir=tmp)
    for rel, v in files.items():
        p = os.path.join(d, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(v if isinstance(v, str) else json.dumps(v))
    for sub in ("b1", "b2", "bs"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    r = subprocess.run([sys.executable, os.path.join(HERE, "check_power_cut.py"), "--boot1", f"{d}/b1", "--boot2", f"{d}/b2",
                        "--boot-service", f"{d}/bs", "--points", f"{d}/points.json", "--cut", f"{d}/cut.txt",
                        "--schema", os.path.join(HERE, "..", "..", "docs", "power-cut.schema.json")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def test_check(tmp):
    rc, out = check(tmp, good_run())
    expect(rc == 0, "check_power_cut.py passes a passing run" + ("" if rc == 0 else ":\n" + out))

    def planted(what, change):
        files = copy.deepcopy(good_run())
        change(files)
        rc, _out = check(tmp, files)
        expect(rc == 1, f"check_power_cut.py fails {what}")

    planted("a replay point with a lost block", lambda f: f.update({"b2/lw-at50.json": verdict(2048, 960, 959, 1, 10)}))
    planted("no replay point mid-write", lambda f: [f.update({f"b2/lw-{n}.json": verdict(2048, 2048, 2048)}) for n in ("at25", "at50", "at75")])
    planted("a replay point that verify could not judge", lambda f: f.update({"b2/lw-at25.json": verdict(2048, 0, 0), "b2/lw-at25.rc": "4"}))
    planted("a log shorter than the target logged", lambda f: f.update({"b1/lw-status.txt": "0 65536 log-writes 790 22303"}))
    planted("a flakey medium that lost nothing", lambda f: f.update({"b1/fl-verify.json": verdict(2048, 2048, 2048), "b1/fl-verify.rc": "0"}))
    planted("a block lost before the switch", lambda f: f.update({"b1/fl-verify.json": verdict(2048, 2048, 10, 2038, 10)}))
    planted("a flakey switch that never came", lambda f: f.pop("b1/fl-acked-before-switch.txt"))
    planted("fewer blocks acknowledged after the cut than before it",
            lambda f: f.update({"bs/power-cut-20260101T000000Z-1.json": verdict(12288, 448, 448)}))
    planted("a cut after the whole region was acknowledged",
            lambda f: f.update({"bs/power-cut-20260101T000000Z-1.json": verdict(12288, 12288, 12288)}))
    planted("a boot service that left no verdict", lambda f: f.pop("bs/power-cut-20260101T000000Z-1.json"))
    planted("a boot service that left no report of its verdict", lambda f: f.pop(REPORT))
    planted("a report whose power cut is not the verdict beside it",
            lambda f: f[REPORT]["devices"][0].update({"power_cut": verdict(12288, 448, 448)}))
    planted("a report naming no disk", lambda f: f[REPORT]["devices"][0].update({"disk": {"name": "t.bin"}}))
    planted("a verdict outside its schema",
            lambda f: f["b2/lw-at25.json"].update({"surprise": 1}))
    planted("a boot service that wrote before it verified",
            lambda f: f.update({"b2/boot-service.log": "usbperf-boot: power-cut: write phase (x)\nusbperf-boot: power-cut verify: pass\n"
                                                       "usbperf-boot: power-cut: write phase ended (exit 0)\n"}))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_log(tmp)
        test_check(tmp)
    if FAILED:
        print(f"test_power_cut.py: {len(FAILED)} failed")
        sys.exit(1)
    print("test_power_cut.py: all passed")


if __name__ == "__main__":
    main()
