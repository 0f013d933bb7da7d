#!/usr/bin/env bash
# The schedule benchmark in a QEMU (TCG) guest: a boot dedicated to it (x86_64, QEMU 7.2), not
# a test. Guest "bench" of scripts/vm/guests.json: four devices on independent buses (SD card on
# sdhci-pci, SATA disk on AHCI, a usb-bot stick on EHCI, one on xHCI), each ext4 and throttled
# to board-like rates, and the output disk. The guest runs scripts/vm/scenarios/bench-schedule.yaml
# with `--schedule serial` and `--schedule auto` alternately, --rounds N rounds (default 3), then
# the null_blk control. Before each, `usbperf-matrix calibrate` (--calibrate-rounds N rounds of
# each mode per phase, default 2; 0: none) finds the lanes whose figures move beside others, and
# the rounds run the config extended by its snippet: `run --schedule auto` as calibrated; the host prints per-mode wall times, per-figure medians and ratios
# (scripts/vm/bench-schedule.py), ending with the line
# `schedule: serial S s, auto A s, speed-up ..., worst ... deviation D %`.
# Fails only when a run left no report. --bench-hub (guest "bench-hub") adds two sticks behind
# one hub on a second xHCI, sharing one throttle (the hub's bandwidth): the "same lane, in
# sequence" case. The kernel, the initramfs, the boot and the output disk are scripts/vm-e2e.sh's
# (scripts/vm/lib.sh).
#
#   usage: scripts/bench/vm-bench-schedule.sh [--rounds N] [--calibrate-rounds N] [--bench-hub]
#                                    [--kernel 5.10|6.1|6.12] [--work DIR] [--timeout SECONDS]
#   env:   BENCH_READ_BPS BENCH_WRITE_BPS BENCH_READ_IOPS BENCH_WRITE_IOPS  the throttle of the
#          devices (default 10000000 5000000 100 50: 10 MB/s read, 5 MB/s write, 100 and 50
#          IOPS); the SD card's in the guest kernel (cgroup io.max, see below)
#          BENCH_MODES  the modes of each round (default "serial auto"; "parallel" runs one
#                       usbperf-matrix process per lane at once, a reference for auto)
#          USBPERF_VM_CACHE, CARGO_TARGET_DIR, SHARED_TOOLS  as for scripts/vm-e2e.sh
# The rates are low enough that the throttle, not TCG, is the limit (measured unthrottled:
# EHCI's emulation gives about 17 MiB/s sequential and 150-370 random reads/s, xHCI's 125-280;
# both vary run to run). The IOPS limits sit above what the sequential tests need (BOT at high
# speed splits them into 120 KiB requests: about 80 reads/s at 10 MB/s) and below what QEMU
# gives at random. The hub's two sticks share one throttle group, as they share the hub's
# bandwidth. The SD card is throttled by the guest kernel instead (blk-throttle, cgroup io.max
# on the benchmark's processes, same rates): QEMU's sd-card does a synchronous 512-byte read or
# write per block in the vCPU thread holding the big lock, so a QEMU throttle stalls the whole
# guest while it waits (an A/A run gave SD figures 0.3-2.8x apart), and unthrottled it is
# CPU-bound (about 19 MiB/s), taking the CPU the other devices' emulation needs.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD; PROG=scripts/bench/vm-bench-schedule.sh
# shellcheck source=vm/lib.sh
. scripts/vm/lib.sh

ARCH=x86_64; KERNEL=6.1; QEMU_VER=7.2; WORK=; TIMEOUT=; ROUNDS=3; BENCH_HUB=; CALIB=2
while [ $# -gt 0 ]; do
    case $1 in
        --kernel) KERNEL=$2; shift 2 ;;
        --work) WORK=$(realpath -m "$2"); shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --calibrate-rounds) CALIB=$2; shift 2 ;;
        --bench-hub) BENCH_HUB=1; shift ;;
        --arch|--qemu|--record|--scenarios)
            echo "the schedule benchmark runs its own x86_64 guest on QEMU 7.2 (no --arch, --qemu, --record, --scenarios)" >&2; exit 2 ;;
        -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "--rounds must be a positive number" >&2; exit 2; }
[[ $CALIB =~ ^[0-9]+$ ]] || { echo "--calibrate-rounds must be a number (0: no calibration)" >&2; exit 2; }
MODES=${BENCH_MODES:-serial auto}
# a serial run of the 4 devices is about 75 s, of 6 with the hub 110 s: room for slow TCG
nmodes=$(echo "$MODES" | wc -w)
per_round=$((nmodes * 120 + 120)); [ -z "$BENCH_HUB" ] || per_round=$((nmodes * 200 + 120))
# a calibration: up to 4 phases of CALIB rounds of a serial and an auto run, up to 6 rounds in
# a phase while a figure shows neither a hold nor a move, for each of the two
CROUNDS=$CALIB; [ "$CALIB" -eq 0 ] || [ "$CALIB" -ge 6 ] || CROUNDS=6
TIMEOUT=${TIMEOUT:-$((300 + ROUNDS * per_round + CROUNDS * 4 * 2 * 130))}
vm_init
WORK=${WORK:-$CACHE/run-$ARCH-$KERNEL-bench}

RBPS=${BENCH_READ_BPS:-10000000} WBPS=${BENCH_WRITE_BPS:-5000000}
RIOPS=${BENCH_READ_IOPS:-100} WIOPS=${BENCH_WRITE_IOPS:-50}
TR="throttling.bps-read=$RBPS,throttling.bps-write=$WBPS,throttling.iops-read=$RIOPS,throttling.iops-write=$WIOPS"

vm_prepare
vm_build
vm_guest "bench${BENCH_HUB:+-hub}" --var "throttle=$TR"
vm_boot "$TIMEOUT" "console=$CONSOLE panic=-1 loglevel=4 SCENARIOS=\"$GUEST_SCENARIOS\" RECORD=" \
    "ROUNDS=$ROUNDS CALIBRATE_ROUNDS=$CALIB BENCH_MODES=\"$MODES\" SD_IOMAX=\"rbps=$RBPS wbps=$WBPS riops=$RIOPS wiops=$WIOPS\""
vm_read_out

# calibrate NAME: what `usbperf-matrix calibrate` said and the snippet the rounds ran with.
calibrate_said() {
    local e=$WORK/out/e2e
    [ -e "$e/$1-calibrate.rc" ] || return 0
    step "calibrate ($1): exit $(cat "$e/$1-calibrate.rc")"
    # Its messages with their continuation lines (the guest's console wraps at 80 columns, a
    # long path on a line of its own): a message starts with `calibrate` or `usbperf-matrix`.
    awk '/^(calibrate|usbperf-matrix)/ { p = /^(calibrate|usbperf-matrix: calibrate)/ } p' \
        "$e/$1-calibrate.log" || true
    [ ! -s "$e/$1-calibrate.yaml" ] || { echo "the snippet the rounds ran with:"; sed 's/^/    /' "$e/$1-calibrate.yaml"; }
}
calibrate_said bench
# the summary's last line is the benchmark's line, so it is the last line printed
step "the schedule benchmark's reports ($ROUNDS rounds, boot wall time $((T1 - T0)) s)"
python3 scripts/vm/bench-schedule.py --out "$WORK/out" --rounds "$ROUNDS" \
    --read-bps "$RBPS" --write-bps "$WBPS" --read-iops "$RIOPS" --write-iops "$WIOPS" \
    || fail "the benchmark's runs left no reports (see above)"
# The null_blk control: the same summary over its reports (nullb/r<N>-<mode>/).
if [ -d "$WORK/out/nullb" ]; then
    calibrate_said nullb
    step "the null_blk control's reports (4 disks of the guest kernel, 10 MiB/s each)"
    python3 scripts/vm/bench-schedule.py --out "$WORK/out" --prefix nullb --rounds "$ROUNDS" \
        --read-bps 10485760 --write-bps 10485760 \
        || fail "the null_blk control's runs left no reports (see above)"
fi
