#!/usr/bin/env python3
"""The schedule benchmark's CPU-bound control, on this machine (root; not run in CI).

Two zram disks (/sys/class/zram-control/hot_add) are on no shared bus, so by topology they
could run together, but random 4k reads at QD16 x 4 jobs on RAM are limited by the CPU, not
the device: run at once they would share the cores and both figures would drop. The scheduler
must see that and run them one after the other (CPU-bound phases must stay honest).
This runs `usbperf-matrix run` on both, raw, with `--schedule serial` and `--schedule auto`
alternately (the order swaps every round), and prints the same summary as
scripts/vm-e2e.sh --bench-schedule (scripts/vm/bench-schedule.py): wall times, per-figure ratios
and the line `schedule: serial S s, auto A s, speed-up ..., worst device-bound figure deviation D %`.
Expected: auto runs them alone, so no speed-up and figures unchanged.

    sudo scripts/bench/bench-schedule-host.py [--rounds 3] [--runtime 5s] [--size 2G] [--work DIR]

A config's random tests end after one pass over their region (the config has no fio-style
time_based), so the region, the whole zram disk filled with random data first, sets their
length: 2 GiB per disk (4 GiB of RAM in all) is under a second of reading on two cores, so
the test is listed --repeat times (5: a few seconds per disk, 5 figures per run).

A binary without --schedule runs both modes serial (an A/A run: the noise floor). The zram
disks are removed on exit, Ctrl-C and SIGTERM included. Exits 1 only when a run left no report.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--runtime", default="5s", help="time bound of each rand-read cell")
ap.add_argument("--size", default="2G", help="zram disksize, and the test region")
ap.add_argument("--repeat", type=int, default=5, help="rand-read cells per disk")
ap.add_argument("--work", default="/tmp/bench-schedule-host", help="reports and logs (replaced)")
a = ap.parse_args()

cleanups = []


def on_signal(signum, _frame):
    raise SystemExit(f"interrupted by signal {signum}")


def cleanup():
    while cleanups:
        what, fn = cleanups.pop()
        try:
            fn()
        except Exception as e:  # keep cleaning the rest
            print(f"cleanup of {what} failed: {e}", file=sys.stderr)


def make_zram(size):
    n = open("/sys/class/zram-control/hot_add").read().strip()

    def remove():
        # udev may hold the device for a moment after the last close: retry.
        for _ in range(50):
            try:
                with open(f"/sys/block/zram{n}/reset", "w") as f:
                    f.write("1")
                with open("/sys/class/zram-control/hot_remove", "w") as f:
                    f.write(n)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"zram{n} could not be removed")

    cleanups.append((f"zram{n}", remove))
    with open(f"/sys/block/zram{n}/disksize", "w") as f:
        f.write(size)
    return f"zram{n}"


def main():
    if os.geteuid() != 0:
        sys.exit("scripts/bench/bench-schedule-host.py: needs root (zram devices, raw writes)")
    if not os.path.exists("/sys/class/zram-control/hot_add"):
        subprocess.run(["modprobe", "zram", "num_devices=0"], check=False)
    if not os.path.exists("/sys/class/zram-control/hot_add"):
        sys.exit("scripts/bench/bench-schedule-host.py: no zram (/sys/class/zram-control/hot_add)")
    print("==> building usbperf-matrix (release)", flush=True)
    subprocess.run(["cargo", "build", "--release", "--locked", "--quiet"], cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    binary = os.path.join(target, "release", "usbperf-matrix")
    helptext = subprocess.run([binary, "run", "--help"], capture_output=True, text=True).stdout
    has_flag = "--schedule" in helptext

    subprocess.run(["rm", "-rf", a.work], check=True)
    os.makedirs(os.path.join(a.work, "e2e"))
    with open(os.path.join(a.work, "e2e", "bench-schedule-flag.txt"), "w") as f:
        f.write("--schedule auto\n" if has_flag else "absent\n")
    disks = [make_zram(a.size), make_zram(a.size)]
    for d in disks:
        # random data, as the product writes: zram reads unwritten pages as zeros, for nothing
        subprocess.run(["dd", "if=/dev/urandom", f"of=/dev/{d}", "bs=1M", "oflag=direct", "status=none"],
                       check=False)
    if shutil.which("udevadm"):
        subprocess.run(["udevadm", "settle", "--timeout=10"], check=False)
    cfg = os.path.join(a.work, "bench-schedule-host.yaml")
    with open(cfg, "w") as f:
        f.write(
            "# written by scripts/bench/bench-schedule-host.py: the schedule's CPU-bound control\n"
            "description: schedule benchmark, CPU-bound control (two zram disks)\n"
            "report_format: json\n"
            "devices:\n"
            + "".join(f"  - {{select: {{name: {d}}}, target: raw, required: true, label: zram in RAM (CPU-bound)}}\n"
                      for d in disks)
            + "tests:\n"
            + f"  - {{workload: rand-read, bs: 4k, qd: 16, jobs: 4, size: {a.size}, runtime: {a.runtime}}}\n" * a.repeat
        )
    print(f"==> {', '.join(disks)} ({a.size} each); config {cfg}"
          + ("" if has_flag else "; this binary has no --schedule: both modes run serial (A/A)"), flush=True)
    for r in range(1, a.rounds + 1):
        for m in (("serial", "auto") if r % 2 else ("auto", "serial")):
            name = f"r{r}-{m}"
            cmd = [binary, "run", "--config", cfg, "--report-dir", os.path.join(a.work, "bench", name),
                   "--lock-file", os.path.join(a.work, "usbperf.lock")]
            if has_flag:
                cmd += ["--schedule", m]
            print(f"==> {name}: {' '.join(cmd)}", flush=True)
            with open(os.path.join(a.work, "e2e", f"bench-{name}.log"), "w") as log:
                rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
            with open(os.path.join(a.work, "e2e", f"bench-{name}.rc"), "w") as f:
                f.write(f"{rc}\n")
            if rc != 0:
                print(f"    exit {rc}; last lines of its log:", flush=True)
                subprocess.run(["tail", "-5", log.name])
    print(flush=True)
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "vm", "bench-schedule.py"),
                           "--out", a.work, "--rounds", str(a.rounds)]).returncode


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        rc = main()
    finally:
        cleanup()
    sys.exit(rc)
