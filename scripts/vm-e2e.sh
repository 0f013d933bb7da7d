#!/usr/bin/env bash
# End-to-end factory run on a real kernel: boots a QEMU (TCG) guest with Debian 12's stock
# kernel and a busybox + udev initramfs holding usbperf-matrix and its default config, with
#   USB 2.0 stick on EHCI (vfat), USB stick on OHCI (12M: the link fault), UAS disk (ext4) and
#   BOT stick (ext4) on xHCI, a 2-LUN stick behind QEMU's (full-speed) hub on xHCI, a stick on QEMU's blkdebug driver (reads
#   of sector 4096 fail), a SATA disk (ext4) on AHCI, an SD card (ext4), and an output disk (virtio).
# The guest runs `usbperf-matrix run` as the boot service would (config
# /etc/usbperf/usbperf.yaml, which expects 480 on every USB port), then the fault scenarios
# (blkdebug I/O errors, SIGTERM, ENOSPC, EROFS, hot-unplug by QMP device_del from here, then
# the same stick plugged back into another port with QMP blockdev-add/device_add),
# writes every report and exit code to the output disk and powers off. This script reads the
# disk back and asserts on the reports (scripts/vm/check.py). One boot.
#
#   usage: scripts/vm-e2e.sh [--arch x86_64|aarch64|armv7] [--kernel 5.10|6.1|6.12] [--qemu 7.2|10]
#                         [--record DIR] [--scenarios "baseline ..."] [--work DIR] [--timeout SECONDS]
#          scripts/vm-e2e.sh --bench-schedule ...: runs scripts/bench/vm-bench-schedule.sh (the schedule benchmark)
# --kernel: Debian's stock kernel of bullseye (5.10), bookworm (6.1, the default) or
#   bookworm-backports (6.12). Only the kernel package comes from that suite, fetched through a
#   private apt state under the cache (the system's sources are never touched); the guest
#   userland is Debian 12's either way.
# --qemu 10: QEMU 10.0 from bookworm-backports instead of the system's 7.2, unpacked into the
#   cache (the system's QEMU stays installed and untouched) and run in a private mount namespace
#   where its own module directory replaces 7.2's (QEMU loads modules from its build-time path
#   and refuses other builds' modules). It brings device models 7.2 lacks:
#     x86_64: the same guest plus an NVMe disk and a UFS host (ufs + ufs-lu; the 6.12 kernel's
#             ufshcd-pci drives it, Debian's 6.1 has no UFS driver), both ext4, required.
#     armv7:  the eMMC board: ast2600-evb (Cortex-A7) with boot-emmc=on, whose eMMC controller
#             carries QEMU's eMMC model (boot0/boot1 of 1 MiB before the user area), the output
#             disk on its SD slot; scenario "emmc" (the boot-service run on that board). QEMU
#             10.0's eMMC can only be instantiated by a board (not by -device: user creation
#             came later), and 10.0 models no RPMB.
#   The host compares the eMMC image's boot partitions before and after the boot.
#   env:   USBPERF_VM_CACHE   downloaded .debs and unpacked kernels (default
#                             ${XDG_CACHE_HOME:-/var/cache}/usbperf-vm)
#          CARGO_TARGET_DIR   as for cargo (the aarch64 binary comes from scripts/ci/cross-build.sh)
#          SHARED_TOOLS       the QEMU recording tools (default scripts/vm/tools: prepare.sh,
#                             sysdump.sh, dump2umockdev.py)
# --record DIR: the guest also dumps its sysfs (scripts/vm/tools/sysdump.sh) and DIR gets
#   <name>.umockdev, <name>.console.txt, <name>.qemu-cmdline.txt, <name>.dump.gz, like
#   tests/fixtures/qemu (name x86-e2e or arm64-e2e; the output disk is left out). The
#   recording is taken after the mounts, before the first run.
# The guests (their devices, how the guest finds them, what the checks expect of them) are
#   described once, in scripts/vm/guests.json: usb-board (QEMU 7.2), usb-board-q10 (x86_64 on
#   QEMU 10), emmc-board (armv7 on QEMU 10). The shared steps are scripts/vm/lib.sh's.
# On failure the guest's console log is printed. Exit 0 only when every assertion held.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD; PROG=scripts/vm-e2e.sh
# the schedule benchmark is a script of its own; the old spelling still reaches it
for x in "$@"; do
    if [ "$x" = --bench-schedule ]; then
        args=(); for y in "$@"; do [ "$y" = --bench-schedule ] || args+=("$y"); done
        exec scripts/bench/vm-bench-schedule.sh "${args[@]}"
    fi
done
# shellcheck source=vm/lib.sh
. scripts/vm/lib.sh

ARCH=x86_64; KERNEL=6.1; RECORD=; WORK=; TIMEOUT=900; QEMU_VER=7.2; SCENARIOS=
while [ $# -gt 0 ]; do
    case $1 in
        --arch) ARCH=$2; shift 2 ;;
        --kernel) KERNEL=$2; shift 2 ;;
        --qemu) QEMU_VER=$2; shift 2 ;;
        --record) RECORD=$(realpath -m "$2"); shift 2 ;;
        --scenarios) SCENARIOS=$2; shift 2 ;;
        --work) WORK=$(realpath -m "$2"); shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        -h|--help) sed -n '2,45p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
vm_init
GUEST=usb-board; BOARD=
if [ "$QEMU_VER" = 10 ]; then
    case $ARCH in
        x86_64) GUEST=usb-board-q10 ;;
        armv7) GUEST=emmc-board; BOARD=emmc ;;
        *) echo "--qemu 10 has guests for x86_64 (NVMe, UFS) and armv7 (the eMMC board)" >&2; exit 2 ;;
    esac
fi
WORK=${WORK:-$CACHE/run-$ARCH-$KERNEL${BOARD:+-$BOARD}$Q10}

vm_prepare
vm_build
vm_guest "$GUEST"
SCENARIOS=${SCENARIOS:-$GUEST_SCENARIOS}
APPEND="console=$CONSOLE panic=-1 loglevel=4 SCENARIOS=\"$SCENARIOS\" RECORD=${RECORD:+1}"
vm_boot "$TIMEOUT" "$APPEND"
vm_boot_once_more_if_qemu_crashed "$TIMEOUT" "$APPEND"
vm_read_out
if [ -n "$RECORD" ]; then
    step "recording into $RECORD"
    mkdir -p "$RECORD"
    NAME=${ARCH/x86_64/x86}-e2e; NAME=${NAME/aarch64/arm64}
    [ "$QEMU_VER" = 10 ] && NAME=${ARCH/x86_64/x86}-q10-$KERNEL
    [ "$BOARD" = emmc ] && NAME=armv7-emmc-board
    gzip -dc "$WORK/out/e2e/sysdump.gz" > "$WORK/sysdump.txt"
    python3 "$SHARED_TOOLS/dump2umockdev.py" "$WORK/sysdump.txt" -o "$WORK/$NAME.all.umockdev"
    # the output disk is the harness's, not the unit's
    python3 scripts/vm/drop-outdisk.py "$WORK/$NAME.all.umockdev" "$RECORD/$NAME.umockdev"
    cp "$WORK/console.txt" "$RECORD/$NAME.console.txt"
    cp "$WORK/qemu-cmdline.txt" "$RECORD/$NAME.qemu-cmdline.txt"
    gzip -9 -c "$WORK/sysdump.txt" > "$RECORD/$NAME.dump.gz"
    ls -l "$RECORD"
fi

FLEET=
if [ "$ARCH" = x86_64 ]; then
    # The guest's reports are real factory input for the fleet: aggregate them on the host
    # (check.py then checks that the one bad link is what the fleet reports).
    step "the guest's reports through usbperf-matrix fleet (on the host)"
    "$BIN" fleet "$WORK/out" --format json --out "$WORK/fleet.json" 2>"$WORK/fleet.err" \
        || { cat "$WORK/fleet.err" >&2; fail "usbperf-matrix fleet failed on the guest's reports"; }
    FLEET=$WORK/fleet.json
fi
step "checking the reports"
python3 scripts/vm/check.py --guest "$WORK/guest.json" --out "$WORK/out" --scenarios "$SCENARIOS" --kernel "$KV" \
    --host-events "$WORK/host-events.txt" --img "$I" --validator scripts/ci/validate-report.py ${FLEET:+--fleet "$FLEET"} \
    || fail "report assertions failed (see above)"
echo
echo "scripts/vm-e2e.sh: $ARCH kernel $KV ok (guest $GUEST), boot wall time $((T1 - T0)) s"
