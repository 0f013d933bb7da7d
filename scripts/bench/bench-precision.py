#!/usr/bin/env python3
"""How repeatable the factory run's figures are, against fio on the same device in the same
minutes (a benchmark: run by hand, not in CI).

The device: a loop device over a file in RAM (/dev/shm), held by the kernel's blkio throttle
(cgroup v1) to a USB 2.0 stick's rates: 30 MiB/s read, 15 MiB/s write, 2,500 read and 400
write IOPS. Its true rates are known, so every figure can be compared with them.

For --rounds rounds, alternating: the built-in `quick` profile on the device (`usbperf-matrix
run`, in the throttled cgroup), then fio on each of the profile's tests (same block size, queue
depth, jobs and region, time_based, --fio-runtime seconds) with the engine that is fastest on
this device for that test (psync threads, libaio or io_uring, chosen by a first pass of each).
Prints per test: usbperf's median, its spread over the rounds ((max - min) / median), the
median of the confidence interval each run stated, how the runs stopped, the median wall
time of the cell and the whole test's figure (fio's kind, the warm-up included); fio's median and spread; the ratio of medians; and the error against the
throttle's rate. Then one run on the device unthrottled, with each figure's stated interval.

    sudo scripts/bench/bench-precision.py [--rounds 8] [--binary target/release/usbperf-matrix]
        [--engine sync] [--fio-runtime 2] [--keep DIR]

--engine is the run's engine (`auto`, `uring`, `sync`). Under the blkio throttle of cgroup v1,
io_uring's reads and writes on this kernel reach half the throttle's rate (fio's io_uring
engine alike: 15 of 30 MiB/s), psync and libaio the full rate: the benchmark's default is
`sync`, the engine fio is fastest with here.

Needs root, fio (installed with apt-get when missing) and the blkio controller of cgroup v1
mounted at /sys/fs/cgroup/blkio. Removes its loop device, file and cgroup, also on Ctrl-C.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
CGROUP = "/sys/fs/cgroup/blkio/usbperf-bench-precision"
# The throttle: the rates of a USB 2.0 stick.
READ_BPS, WRITE_BPS, READ_IOPS, WRITE_IOPS = 30 * MIB, 15 * MIB, 2500, 400
# The quick profile's rate tests as fio jobs: (workload, figure, fio rw, bs, iodepth, numjobs,
# the throttle's rate for the figure).
TESTS = [
    ("read-buffered", "mib_per_s", "read", "2M", 1, 1, READ_BPS / MIB),
    ("seq-write", "mib_per_s", "write", "1M", 1, 1, WRITE_BPS / MIB),
    ("seq-read", "mib_per_s", "read", "1M", 1, 1, READ_BPS / MIB),
    ("rand-read", "iops", "randread", "4k", 16, 4, READ_IOPS),
    ("rand-write", "iops", "randwrite", "4k", 16, 4, WRITE_IOPS),
    # 70/30 is write-bound here: 400 write IOPS carry 400 / 0.3 I/Os in all (reads need 933 of
    # their 2,500).
    ("mixed", "iops", "randrw", "4k", 16, 4, WRITE_IOPS / 0.3),
]
FIO_ENGINES = ["psync", "libaio", "io_uring"]


def sh(*args, **kw):
    return subprocess.run(args, check=True, text=True, capture_output=True, **kw).stdout


def in_cgroup():
    """A preexec_fn: the child joins the throttled cgroup before it execs."""
    with open(os.path.join(CGROUP, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))


def throttle(dev, on):
    majmin = sh("lsblk", "-dno", "MAJ:MIN", dev).strip()
    limits = {
        "blkio.throttle.read_bps_device": READ_BPS,
        "blkio.throttle.write_bps_device": WRITE_BPS,
        "blkio.throttle.read_iops_device": READ_IOPS,
        "blkio.throttle.write_iops_device": WRITE_IOPS,
    }
    for name, value in limits.items():
        with open(os.path.join(CGROUP, name), "w") as f:
            f.write(f"{majmin} {value if on else 0}\n")


def quick_run(binary, dev, engine, workdir, cgroup):
    cfg = os.path.join(workdir, "cfg.yaml")
    reports = os.path.join(workdir, "reports")
    os.makedirs(reports, exist_ok=True)
    with open(cfg, "w") as f:
        f.write(
            "profile: quick\n"
            f"report_dir: {reports}\n"
            "devices:\n"
            f"  - {{select: {{name: {os.path.basename(dev)}}}, required: true, target: raw}}\n"
        )
    before = set(os.listdir(reports))
    t0 = time.monotonic()
    p = subprocess.run(
        [binary, "run", "--config", cfg, "--format", "json", "--engine", engine,
         "--lock-file", os.path.join(workdir, "lock")],
        capture_output=True, text=True, preexec_fn=in_cgroup if cgroup else None)
    wall = time.monotonic() - t0
    new = sorted(set(os.listdir(reports)) - before)
    if p.returncode not in (0, 1) or not new:
        sys.exit(f"usbperf run failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    with open(os.path.join(reports, new[-1])) as f:
        report = json.load(f)
    cells = {c["workload"]: c for c in report["devices"][0]["cells"]}
    return cells, wall


def fio(dev, test, engine, runtime):
    _, figure, rw, bs, qd, jobs, _ = test
    args = ["fio", "--name=bench", f"--filename={dev}", "--direct=1", f"--rw={rw}", f"--bs={bs}",
            "--size=16M", "--time_based", f"--runtime={runtime}", "--group_reporting",
            "--output-format=json", f"--ioengine={engine}"]
    if rw == "randrw":
        args.append("--rwmixread=70")
    if engine == "psync":
        # One thread per in-flight I/O, as usbperf's sync engine does.
        args += [f"--numjobs={qd * jobs}", "--iodepth=1"]
    else:
        args += [f"--numjobs={jobs}", f"--iodepth={qd}"]
    if rw in ("read", "write") and engine == "psync" and qd * jobs > 1:
        args.append("--offset_increment=16M")
    p = subprocess.run(args, capture_output=True, text=True, preexec_fn=in_cgroup)
    if p.returncode != 0:
        return None
    job = json.loads(p.stdout)["jobs"][0]
    read, write = job["read"], job["write"]
    if figure == "iops":
        return read["iops"] + write["iops"]
    return (read["bw_bytes"] + write["bw_bytes"]) / MIB


def judged(res, figure):
    """The figure a limit judges and the tables show: after a drop its sustained level, else
    the steady rate after the warm-up, else the whole test's (IOPS follow the rate)."""
    whole = res.get(figure, float("nan"))
    p = res.get("precision") or {}
    rate = (p.get("drop") or {}).get("sustained_mib_per_s", p.get("steady_mib_per_s"))
    if rate is None or not res.get("mib_per_s"):
        return whole
    return rate if figure == "mib_per_s" else whole * rate / res["mib_per_s"]


def spread(values):
    m = statistics.median(values)
    return (max(values) - min(values)) / m * 100 if m else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--binary", default="target/release/usbperf-matrix")
    ap.add_argument("--engine", default="sync", choices=["auto", "uring", "sync"])
    ap.add_argument("--fio-runtime", type=int, default=2)
    ap.add_argument("--keep", metavar="DIR",
                    help="copy every run's report into DIR (to study the windows offline)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench-precision needs root (loop device, cgroup)")
    if not os.path.isdir("/sys/fs/cgroup/blkio"):
        sys.exit("no blkio controller of cgroup v1 at /sys/fs/cgroup/blkio")
    if not shutil.which("fio"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "fio"], check=True)
    binary = os.path.abspath(a.binary)
    workdir = tempfile.mkdtemp(prefix="usbperf-bench-precision.")
    image = os.path.join("/dev/shm", os.path.basename(workdir) + ".img")
    dev = None
    try:
        with open(image, "wb") as f:
            f.truncate(256 * MIB)
        dev = sh("losetup", "-f", "--show", image).strip()
        os.makedirs(CGROUP, exist_ok=True)
        throttle(dev, True)
        # fio's fastest engine per test on this device.
        best = {}
        for t in TESTS:
            got = {e: fio(dev, t, e, a.fio_runtime) for e in FIO_ENGINES}
            best[t[0]] = max((v, e) for e, v in got.items() if v is not None)[1]
            print(f"fio engines on {t[0]}: " + ", ".join(
                f"{e} {v:.1f}" if v is not None else f"{e} failed" for e, v in got.items()))
        ours = {t[0]: [] for t in TESTS}
        stated = {t[0]: [] for t in TESTS}
        stops = {t[0]: [] for t in TESTS}
        secs = {t[0]: [] for t in TESTS}
        theirs = {t[0]: [] for t in TESTS}
        wholes = {t[0]: [] for t in TESTS}
        walls = []
        for r in range(a.rounds):
            cells, wall = quick_run(binary, dev, a.engine, workdir, True)
            walls.append(wall)
            for t in TESTS:
                res = cells[t[0]].get("result") or {}
                ours[t[0]].append(judged(res, t[1]))
                wholes[t[0]].append(res.get(t[1], float("nan")))
                stated[t[0]].append((res.get("precision") or {}).get("ci95_percent"))
                stops[t[0]].append(res.get("stopped_by", "-"))
                secs[t[0]].append(res.get("seconds", float("nan")))
            for t in TESTS:
                theirs[t[0]].append(fio(dev, t, best[t[0]], a.fio_runtime))
            print(f"round {r + 1}/{a.rounds}: quick run {wall:.1f} s", flush=True)
        print()
        print(f"## The quick profile on a throttled loop device ({a.rounds} rounds, engine "
              f"{a.engine}; fio {a.fio_runtime} s per test, its fastest engine)")
        print()
        print("| test | figure | usbperf median | spread | stated CI (median) | stopped by | "
              "cell s (median) | whole test | fio median | fio spread | usbperf / fio | "
              "vs throttle |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for t in TESTS:
            w, fig, rate = t[0], t[1], t[6]
            o, f = ours[w], [v for v in theirs[w] if v is not None]
            cis = [c for c in stated[w] if c is not None]
            ci = f"+-{statistics.median(cis):.1f} %" if cis else "not known"
            stop = ", ".join(f"{s} {stops[w].count(s)}" for s in sorted(set(stops[w])))
            err = f"{(statistics.median(o) / rate - 1) * 100:+.1f} %" if rate else "-"
            fm = statistics.median(f) if f else float("nan")
            print(f"| {w} | {fig} | {statistics.median(o):.2f} | {spread(o):.1f} % | {ci} | "
                  f"{stop} | {statistics.median(secs[w]):.2f} | "
                  f"{statistics.median(wholes[w]):.2f} | {fm:.2f} ({best[w]}) | "
                  f"{spread(f) if f else float('nan'):.1f} % | "
                  f"{statistics.median(o) / fm:.3f} | {err} |")
        print()
        print("Each round's figure, usbperf | fio:")
        for t in TESTS:
            print(f"- {t[0]}: " + " ".join(f"{v:.1f}" for v in ours[t[0]]) + " | "
                  + " ".join(f"{v:.1f}" if v is not None else "-" for v in theirs[t[0]]))
        print()
        print(f"quick run wall time per device: median {statistics.median(walls):.1f} s, "
              f"min {min(walls):.1f}, max {max(walls):.1f}")
        throttle(dev, False)
        cells, wall = quick_run(binary, dev, a.engine, workdir, False)
        print()
        print(f"## Unthrottled, one run ({wall:.1f} s)")
        print()
        print("| test | figure | value | stated CI | stopped by | cell s |")
        print("|---|---|---|---|---|---|")
        for t in TESTS:
            res = cells[t[0]].get("result") or {}
            ci = (res.get("precision") or {}).get("ci95_percent")
            print(f"| {t[0]} | {t[1]} | {judged(res, t[1]):.1f} | "
                  f"{'+-%.1f %%' % ci if ci is not None else 'not known'} | "
                  f"{res.get('stopped_by')} | {res.get('seconds', 0):.2f} |")
    finally:
        if dev:
            subprocess.run(["losetup", "-d", dev])
        if os.path.exists(image):
            os.unlink(image)
        if os.path.isdir(CGROUP):
            try:
                os.rmdir(CGROUP)
            except OSError:
                pass
        if a.keep:
            shutil.copytree(os.path.join(workdir, "reports"), a.keep, dirs_exist_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
