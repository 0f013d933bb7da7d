#!/usr/bin/env python3
"""The schedule benchmark's summary: serial against auto from the reports of
alternate runs of one config (scripts/vm-e2e.sh --bench-schedule, scripts/bench/bench-schedule-host.py).

usage: bench-schedule.py --out DIR [--prefix NAME] [--rounds N] [--read-bps B --write-bps B --read-iops N --write-iops N
                          [--unthrottled NAME]]
DIR holds bench/r<N>-<mode>/usbperf-*.json (one report per run, mode serial or auto; for mode
parallel, one per lane process in bench/r<N>-parallel/lane<I>/, taken together as one run from
the first start to the last finish) and e2e/bench-r<N>-<mode>.rc (the run's exit code). Prints, per mode, each run's wall time
(report finished_at - started_at) and their median; per device and workload the median MiB/s
and IOPS of each mode and the ratio auto/serial, which devices each cell ran beside in the auto
runs, and (given the throttle) each serial figure as a fraction of it. Ends with exactly one line

    schedule: serial S s, auto A s, speed-up S/A, worst device-bound figure deviation D %

where D = max |auto/serial - 1| x 100 over the cells that ran concurrently with another
device's cell in an auto run: the cell's `concurrent_with` says so, minus the cells the
report's `schedule.alone` lists (run, or measured again, alone: by the CPU rule); for a report
without them (mode parallel, an older binary) the cells' time intervals overlap (started_at,
wall_seconds). Cells that ran alone are shown with their rule. When no cell ran
concurrently (a binary without --schedule: an A/A run; or every pair fell back), D is taken
over every cell and a note says so: it is then the noise floor of the ±5 % question.
A benchmark, not a test: exits 1 only when a run left no readable report."""
import argparse, glob, json, os, statistics, sys
from datetime import datetime, timedelta

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--prefix", default="bench",
                help="the runs' name: reports in DIR/PREFIX/r<N>-<mode>/, exit codes in "
                     "DIR/e2e/PREFIX-r<N>-<mode>.rc (vm-e2e's null_blk control: nullb)")
ap.add_argument("--rounds", type=int, help="rounds expected (default: as many as found)")
ap.add_argument("--read-bps", type=float)
ap.add_argument("--write-bps", type=float)
ap.add_argument("--read-iops", type=float)
ap.add_argument("--write-iops", type=float)
ap.add_argument("--unthrottled", action="append", default=[],
                help="devices whose name starts so have no throttle (QEMU's sd-card)")
a = ap.parse_args()
MODES = ("serial", "auto", "parallel")
# Intervals of two cells overlapping by less than this are one after the other (clock rounding).
OVERLAP_S = 0.05


def ts(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00")) if s else None


def rc_of(r, m):
    p = os.path.join(a.out, "e2e", f"{a.prefix}-r{r}-{m}.rc")
    try:
        return int(open(p).read().strip())
    except (OSError, ValueError):
        return None


def load_one(path):
    try:
        rep = json.load(open(path))
    except (OSError, ValueError) as e:
        return None, f"unreadable report {path}: {e}"
    if not (rep.get("started_at") and rep.get("finished_at")):
        return None, f"report {path} has no finished_at (status {rep.get('status')})"
    return rep, None


def load(r, m):
    d = os.path.join(a.out, a.prefix, f"r{r}-{m}")
    if m != "parallel":
        files = sorted(glob.glob(os.path.join(d, "usbperf-*.json")))
        return load_one(files[-1]) if files else (None, "no report")
    # one report per lane process: one run from the first start to the last finish
    lanes = sorted(glob.glob(os.path.join(d, "lane*")))
    reps = []
    for ld in lanes:
        files = sorted(glob.glob(os.path.join(ld, "usbperf-*.json")))
        if not files:
            return None, f"no report in {ld}"
        rep, err = load_one(files[-1])
        if rep is None:
            return None, err
        reps.append(rep)
    if not reps:
        return None, "no report"
    merged = dict(reps[0])
    merged["started_at"] = min((x["started_at"] for x in reps), key=ts)
    merged["finished_at"] = max((x["finished_at"] for x in reps), key=ts)
    merged["devices"] = [d for x in reps for d in x["devices"]]
    merged["schedule"] = {"mode": f"parallel ({len(reps)} processes)",
                          "lanes": [l for x in reps for l in (x.get("schedule") or {}).get("lanes", [])]}
    return merged, None


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


def alone_of(rep):
    """(device, workload) -> the rule that ran it alone (`schedule.alone`)."""
    keys = {d["name"]: device_key(d) for d in rep["devices"]}
    res = {}
    for x in (rep.get("schedule") or {}).get("alone", []):
        rule = x.get("rule", "?")
        if x.get("cpu_percent") is not None:
            rule += f" {x['cpu_percent']:.0f}% CPU"
        res[(keys.get(x["device"], x["device"]), x["workload"])] = rule
    return res


def beside(rep):
    """For each (device, workload): the other devices whose cells ran while it did, by the
    report's `concurrent_with` when it is an auto report, else by overlapping time intervals;
    none for the cells `schedule.alone` lists."""
    alone = alone_of(rep)
    res = {}
    if (rep.get("schedule") or {}).get("mode") == "auto":
        for d in rep["devices"]:
            for c in d["cells"]:
                res[(device_key(d), c["workload"])] = set(c.get("concurrent_with", []))
    else:
        iv = intervals(rep)
        for dev, wl, s, e in iv:
            res[(dev, wl)] = {
                d2.split(" ")[0] for d2, _, s2, e2 in iv
                if d2 != dev and (min(e, e2) - max(s, s2)).total_seconds() > OVERLAP_S
            }
    for k in alone:
        res[k] = set()
    return res


rounds = a.rounds
if rounds is None:
    rounds = len(glob.glob(os.path.join(a.out, a.prefix, "r*-serial")))
flag = None
fp = os.path.join(a.out, "e2e", "bench-schedule-flag.txt")
if os.path.exists(fp):
    flag = open(fp).read().strip()

# the modes that were run: those with a report directory or an exit code
ran = [m for m in MODES if glob.glob(os.path.join(a.out, a.prefix, f"r*-{m}"))
       or glob.glob(os.path.join(a.out, "e2e", f"{a.prefix}-r*-{m}.rc"))]
runs = {m: [] for m in MODES}  # mode -> [(round, report, wall seconds)]
problems = []
print(f"{'run':<10} {'exit':>4} {'wall s':>7}  schedule")
for r in range(1, rounds + 1):
    for m in ran:
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

modes = [m for m in MODES if runs[m]]
if not runs["serial"] or len(modes) < 2:
    for p in problems:
        print(f"bench-schedule: {p}", file=sys.stderr)
    print("bench-schedule: no serial report, or no report of another mode: nothing to compare", file=sys.stderr)
    sys.exit(1)

# figures[mode][(device, workload)] = [(mib_per_s, iops), ...]
figures = {m: {} for m in MODES}
order = []
for m in modes:
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
together = {m: {} for m in modes}  # mode -> (device, workload) -> devices it ran beside
runs_concurrent = {m: {} for m in modes}  # mode -> (device, workload) -> runs it had company in
alone_rules = {m: {} for m in modes}  # mode -> (device, workload) -> rules it ran alone by
for m in modes:
    for _, rep, _ in runs[m]:
        for k, rule in alone_of(rep).items():
            alone_rules[m].setdefault(k, set()).add(rule)
        for k, others in beside(rep).items():
            together[m].setdefault(k, set()).update(others)
            runs_concurrent[m][k] = runs_concurrent[m].get(k, 0) + (1 if others else 0)


def med(vals, i):
    xs = [v[i] for v in vals if v[i] is not None]
    return statistics.median(xs) if xs else None


def limit_of(device, workload):
    """The throttle's figure for a device's workload: (value, unit) or None. Random 4k tests
    are held by the IOPS limit or, without one, by the byte rate."""
    if any(device.startswith(p) for p in a.unthrottled):
        return None
    bps = a.read_bps if "read" in workload else a.write_bps
    iops = a.read_iops if "read" in workload else a.write_iops
    if workload.startswith("seq-") and bps:
        return bps / 1048576, "MiB/s"
    if workload.startswith("rand-"):
        lims = [x for x in (iops, bps / 4096 if bps else None) if x]
        return (min(lims), "IOPS") if lims else None
    return None


def fmt(x, p=1):
    return "-" if x is None else f"{x:.{p}f}"


others = [m for m in modes if m != "serial"]
print()
hdr = f"{'device':<40} {'workload':<11} {'serial MiB/s':>12} {'IOPS':>6} {'ser/thr':>7}"
for m in others:
    hdr += f" | {m + ' MiB/s':>14} {'IOPS':>6} {'ratio':>6}  ran beside"
print(hdr)
worst = {m: None for m in others}
worst_all = {m: None for m in others}
for k in order:
    s_ = figures["serial"].get(k, [])
    sm, si = med(s_, 0), med(s_, 1)
    lim = limit_of(k[0], k[1])
    thr = None
    if lim:
        thr = sm if lim[1] == "MiB/s" else si
        thr = thr / lim[0] if thr is not None else None
    line = f"{k[0]:<40} {k[1]:<11} {fmt(sm, 2):>12} {fmt(si, 0):>6} {fmt(thr, 2):>7}"
    for m in others:
        v = figures[m].get(k, [])
        mm, mi = med(v, 0), med(v, 1)
        ratio = mm / sm if sm and mm is not None else None
        comp = sorted(together[m].get(k, set()))
        n = runs_concurrent[m].get(k, 0)
        comp_s = f"{','.join(comp)} ({n}/{len(runs[m])})" if comp else "alone"
        if k in alone_rules[m]:
            comp_s += f" ({'; '.join(sorted(alone_rules[m][k]))})"
        line += f" | {fmt(mm, 2):>14} {fmt(mi, 0):>6} {fmt(ratio, 3):>6}  {comp_s}"
        if ratio is not None:
            dev = abs(ratio - 1) * 100
            worst_all[m] = dev if worst_all[m] is None else max(worst_all[m], dev)
            if comp:
                worst[m] = dev if worst[m] is None else max(worst[m], dev)
    print(line)

S = statistics.median(w for _, _, w in runs["serial"])
print()
for m in modes:
    walls = [w for _, _, w in runs[m]]
    print(f"wall time per run, {m}: {', '.join(f'{w:.1f}' for w in walls)} s (median {statistics.median(walls):.1f} s)")
for p in problems:
    print(f"note: {p}")
if flag == "absent" and runs["auto"]:
    print("note: the binary has no --schedule flag: the 'auto' runs ran serial too (an A/A run); "
          "the deviation is the noise floor of the ±5 % question, over every cell")
for m in others:
    if not any(together[m].values()):
        print(f"note: no cell of the {m} runs overlapped another device's: its deviation is over every cell")
        worst[m] = worst_all[m]
for m in others:
    M = statistics.median(w for _, _, w in runs[m])
    if m != "auto":
        # a reference, not the schedule under test: the one `schedule:` line stays auto's
        print(f"reference: serial {S:.1f} s, {m} {M:.1f} s, speed-up {S / M:.2f}x, "
              f"worst figure deviation beside others {fmt(worst[m], 1)} %")
if runs["auto"]:
    M = statistics.median(w for _, _, w in runs["auto"])
    print(f"schedule: serial {S:.1f} s, auto {M:.1f} s, speed-up {S / M:.2f}x, "
          f"worst device-bound figure deviation {fmt(worst['auto'], 1)} %")
missing = any(len(runs[m]) < rounds for m in ran)
sys.exit(1 if missing else 0)
