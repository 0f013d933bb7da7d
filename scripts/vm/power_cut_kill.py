#!/usr/bin/env python3
"""The power cut of scripts/ci/vm-power-cut.sh: watches a guest's console and kills its QEMU with
SIGKILL (no flush, no clean exit: what the guest's disks hold is what the host already had)
once the console shows, after the ARM line, a progress line of `usbperf-matrix power-cut
write` with at least --min-acked but not all blocks acknowledged (the first line comes with
the first group: a later one cuts deeper into the write). Writes "N M" (acknowledged of
blocks, as the line said) to --out, then kills, and exits 0; exits 1 when QEMU ended first or
--timeout passed.
Usage: power_cut_kill.py --console FILE --pidfile FILE --out FILE [--arm TEXT] [--min-acked N]
                         [--timeout S]"""
import argparse, os, re, signal, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--console", required=True)
ap.add_argument("--pidfile", required=True, help="QEMU's -pidfile")
ap.add_argument("--out", required=True)
ap.add_argument("--arm", default="E2E-POWER-CUT-ARMED")
ap.add_argument("--min-acked", type=int, default=1)
ap.add_argument("--timeout", type=float, default=900)
a = ap.parse_args()

PROGRESS = re.compile(rb"power-cut: acknowledged (\d+) of (\d+) blocks")
t0 = time.time()


def qemu_pid():
    """QEMU's pid once it wrote its pidfile and still runs, else None."""
    try:
        pid = int(open(a.pidfile).read().strip())
        cmd = open(f"/proc/{pid}/cmdline", "rb").read()
    except (OSError, ValueError):
        return None
    # the pid must still be the QEMU of this boot, not a reused number
    return pid if b"qemu" in cmd and a.pidfile.encode() in cmd else None


seen_pid = False
while time.time() - t0 < a.timeout:
    pid = qemu_pid()
    seen_pid = seen_pid or pid is not None
    if seen_pid and pid is None:
        print("power_cut_kill.py: QEMU ended before the power cut", file=sys.stderr)
        sys.exit(1)
    try:
        text = open(a.console, "rb").read()
    except OSError:
        text = b""
    at = text.find(a.arm.encode())
    if pid is not None and at >= 0:
        for m in PROGRESS.finditer(text, at):
            n, total = int(m.group(1)), int(m.group(2))
            if max(1, a.min_acked) <= n < total:
                # written first: once QEMU is gone, the caller finds what was cut after
                with open(a.out, "w") as f:
                    f.write(f"{n} {total}\n")
                os.kill(pid, signal.SIGKILL)
                print(f"host T+{time.time() - t0:.1f}s power cut: SIGKILL to QEMU {pid} after "
                      f"'acknowledged {n} of {total} blocks'", flush=True)
                sys.exit(0)
    time.sleep(0.05)
print("power_cut_kill.py: timeout", file=sys.stderr)
sys.exit(1)
