#!/usr/bin/env python3
"""The schedule benchmark's summary (issue 17): serial against auto from the reports of
alternate runs of one config (scripts/vm-e2e --bench-schedule, scripts/bench-schedule-host).

usage: bench-schedule.py --out DIR [--rounds N] [--read-bps B --write-bps B --read-iops N --write-iops N
                          [--no-iops-limit NAME]]
DIR holds bench/r<N>-<mode>/usbperf-*.json (one report per run, mode serial or auto) and
e2e/bench-r<N>-<mode>.rc (the run's exit code). Prints, per mode, each run's wall time
(report finished_at - started_at) and their median; per device and workload the median MiB/s
and IOPS of each mode and the ratio auto/serial, which devices each cell ran beside in the auto
runs, and (given the throttle) each serial figure as a fraction of it. Ends with exactly one line

    schedule: serial S s, auto A s, speed-up S/A, worst device-bound figure deviation D %

where D = max |auto/serial - 1| x 100 over the cells that ran concurrently with another
device's cell in an auto run (their time intervals overlap: the cells' started_at and
wall_seconds say so whatever the report's schedule section holds). When no cell ran
concurrently (a binary without --schedule: an A/A run; or every pair fell back), D is taken
over every cell and a note says so: it is then the noise floor of the ±5 % question.
A benchmark, not a test: exits 1 only when a run left no readable report."""
import argparse, glob, json, os, statistics, sys
from datetime import datetime, timedelta

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--rounds", type=int, help="rounds expected (default: as many as found)")
ap.add_argument("--read-bps", type=float)
ap.add_argument("--write-bps", type=float)
ap.add_argument("--read-iops", type=float)
ap.add_argument("--write-iops", type=float)
ap.add_argument("--no-iops-limit", action="append", default=[],
                help="devices whose name starts so have the byte rates only (QEMU's sd-card)")
a = ap.parse_args()
MODES = ("serial", "auto")
# Intervals of two cells overlapping by less than this are one after the other (clock rounding).
OVERLAP_S = 0.05


def ts(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00")) if s else None


def rc_of(r, m):
    p = os.path.join(a.out, "e2e", f"bench-r{r}-{m}.rc")
    try:
        return int(open(p).read().strip())
    except (OSError, ValueError):
        return None


def load(r, m):
    files = sorted(glob.glob(os.path.join(a.out, "bench", f"r{r}-{m}", "usbperf-*.json")))
    if not files:
        return None, "no report"
    try:
        rep = json.load(open(files[-1]))
    except (OSError, ValueError) as e:
        return None, f"unreadable report {files[-1]}: {e}"
    if not (rep.get("started_at") and rep.get("finished_at")):
        return None, f"report {files[-1]} has no finished_at (status {rep.get('status')})"
    return rep, None


def device_key(d):
    return d["name"] + (f" ({d['label']})" if d.get("label") else "")


def intervals(rep):
    """(device, workload, start, end) of every cell that ran."""
    out = []
    for d in rep["devices"]:
        for c in d["cells"]:
            s, w = ts(c.get("started_at")), c.get("wall_seconds")
            if s is not None and w is not None:
                out.append((device_key(d), c["workload"], s, s + timedelta(seconds=w)))
    return out


def beside(rep):
    """For each (device, workload): the other devices whose cells overlapped it in time."""
    iv = intervals(rep)
    res = {}
    for dev, wl, s, e in iv:
        res[(dev, wl)] = {
            d2 for d2, _, s2, e2 in iv
            if d2 != dev and (min(e, e2) - max(s, s2)).total_seconds() > OVERLAP_S
        }
    return res


rounds = a.rounds
if rounds is None:
    rounds = len(glob.glob(os.path.join(a.out, "bench", "r*-serial")))
flag = None
fp = os.path.join(a.out, "e2e", "bench-schedule-flag.txt")
if os.path.exists(fp):
    flag = open(fp).read().strip()

runs = {m: [] for m in MODES}  # mode -> [(round, report)]
problems = []
print(f"{'run':<10} {'exit':>4} {'wall s':>7}  schedule")
for r in range(1, rounds + 1):
    for m in MODES:
        rep, err = load(r, m)
        rc = rc_of(r, m)
        if rep is None:
            problems.append(f"r{r}-{m}: {err} (exit code {rc})")
            print(f"r{r}-{m:<7} {str(rc):>4} {'-':>7}  {err}")
            continue
        wall = (ts(rep["finished_at"]) - ts(rep["started_at"])).total_seconds()
        sch = rep.get("schedule") or {}
        lanes = "; ".join(f"{l['key']}: {' '.join(l['disks'])}" for l in sch.get("lanes", []))
        extra = {k: v for k, v in sch.items() if k not in ("mode", "lanes")}
        print(f"r{r}-{m:<7} {str(rc):>4} {wall:7.1f}  mode {sch.get('mode', '?')}; lanes {lanes}"
              + (f"; {json.dumps(extra)}" if extra else ""))
        runs[m].append((r, rep, wall))

if not runs["serial"] or not runs["auto"]:
    for p in problems:
        print(f"bench-schedule: {p}", file=sys.stderr)
    print("bench-schedule: no report of one of the modes: nothing to compare", file=sys.stderr)
    sys.exit(1)

# figures[mode][(device, workload)] = [(mib_per_s, iops), ...]
figures = {m: {} for m in MODES}
order = []
for m in MODES:
    for _, rep, _ in runs[m]:
        for d in rep["devices"]:
            for c in d["cells"]:
                k = (device_key(d), c["workload"])
                if k not in order:
                    order.append(k)
                res = c.get("result") or {}
                if c.get("status") == "passed" and res.get("mib_per_s") is not None:
                    figures[m].setdefault(k, []).append((res["mib_per_s"], res.get("iops")))
                elif c.get("status") != "passed":
                    problems.append(f"{m} {k[0]} {k[1]}: cell {c.get('status')}")
together = {}  # (device, workload) -> devices it ran beside in any auto run
runs_concurrent = {}  # (device, workload) -> in how many auto runs it had company
for _, rep, _ in runs["auto"]:
    for k, others in beside(rep).items():
        together.setdefault(k, set()).update(others)
        runs_concurrent[k] = runs_concurrent.get(k, 0) + (1 if others else 0)
any_concurrent = any(together.values())


def med(vals, i):
    xs = [v[i] for v in vals if v[i] is not None]
    return statistics.median(xs) if xs else None


def limit_of(device, workload):
    """The throttle's figure for a device's workload: (value, unit) or None. Random 4k tests
    are held by the IOPS limit or, without one, by the byte rate."""
    exempt = any(device.startswith(p) for p in a.no_iops_limit)
    bps = a.read_bps if "read" in workload else a.write_bps
    iops = None if exempt else (a.read_iops if "read" in workload else a.write_iops)
    if workload.startswith("seq-") and bps:
        return bps / 1048576, "MiB/s"
    if workload.startswith("rand-"):
        lims = [x for x in (iops, bps / 4096 if bps else None) if x]
        return (min(lims), "IOPS") if lims else None
    return None


def fmt(x, p=1):
    return "-" if x is None else f"{x:.{p}f}"


print()
print(f"{'device':<40} {'workload':<11} {'serial MiB/s':>12} {'auto MiB/s':>10} {'ratio':>6} "
      f"{'serial IOPS':>11} {'auto IOPS':>9} {'ratio':>6} {'ser/throttle':>12}  ran beside (auto)")
worst, worst_all = None, None
for k in order:
    s, au = figures["serial"].get(k, []), figures["auto"].get(k, [])
    sm, am, si, ai = med(s, 0), med(au, 0), med(s, 1), med(au, 1)
    ratio = am / sm if sm and am is not None else None
    iratio = ai / si if si and ai is not None else None
    lim = limit_of(k[0], k[1])
    thr = None
    if lim:
        thr = (sm if lim[1] == "MiB/s" else si)
        thr = thr / lim[0] if thr is not None else None
    comp = sorted(together.get(k, set()))
    n_conc = runs_concurrent.get(k, 0)
    comp_s = f"{', '.join(comp)} ({n_conc}/{len(runs['auto'])} runs)" if comp else "alone"
    print(f"{k[0]:<40} {k[1]:<11} {fmt(sm, 2):>12} {fmt(am, 2):>10} {fmt(ratio, 3):>6} "
          f"{fmt(si, 0):>11} {fmt(ai, 0):>9} {fmt(iratio, 3):>6} {fmt(thr, 2):>12}  {comp_s}")
    if ratio is not None:
        dev = abs(ratio - 1) * 100
        worst_all = dev if worst_all is None else max(worst_all, dev)
        if comp:
            worst = dev if worst is None else max(worst, dev)

S = statistics.median(w for _, _, w in runs["serial"])
A = statistics.median(w for _, _, w in runs["auto"])
print()
print(f"wall time per run: serial {', '.join(f'{w:.1f}' for _, _, w in runs['serial'])} s; "
      f"auto {', '.join(f'{w:.1f}' for _, _, w in runs['auto'])} s (medians {S:.1f} / {A:.1f} s)")
for p in problems:
    print(f"note: {p}")
if flag == "absent":
    print("note: the binary has no --schedule flag: the 'auto' runs ran serial too (an A/A run); "
          "the deviation is the noise floor of the ±5 % question, over every cell")
if not any_concurrent:
    print("note: no cell of an auto run overlapped another device's: the deviation is over every cell")
    worst = worst_all
missing = len(runs["serial"]) < rounds or len(runs["auto"]) < rounds
print(f"schedule: serial {S:.1f} s, auto {A:.1f} s, speed-up {S / A:.2f}x, "
      f"worst device-bound figure deviation {fmt(worst, 1)} %")
sys.exit(1 if missing else 0)
