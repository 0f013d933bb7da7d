#!/usr/bin/env bash
# The power-cut test (`usbperf-matrix power-cut write`, then `verify` on the next boot) proven
# on a real kernel: Debian's stock kernel in a QEMU (TCG) x86_64 guest, device-mapper targets
# of that kernel for the faults, two boots on the same disk images (scripts/vm/power-cut-init.sh
# is the guest's /init, PHASE=1 then PHASE=2 on its command line). Three scenarios:
#   lw  dm-log-writes (boot 1): `power-cut write` of LW_SIZE into a file on an ext4 disk behind
#       a log-writes target, the state file on the same filesystem. The log holds every write in
#       the order it reached the medium (a plain write only at the next flush). On the host,
#       scripts/vm/log_writes.py replays the log onto copies of the pristine image up to the
#       FLUSH entries at 25, 50 and 75 % of those of the write phase and to its end: each a
#       state a power cut there leaves (xfstests' generic/482 method). Boot 2 mounts each
#       (journal recovery) and verifies it: pass, nothing lost, torn or misplaced, something
#       acknowledged, and at least one point cut the write mid-way.
#   fl  dm-flakey (boot 1): `power-cut write` to an always-up flakey device over a raw disk
#       (throttled by QEMU so the write lasts a few seconds); once the state file counts
#       acknowledged blocks the table is switched to drop_writes (writes complete, nothing is
#       stored: a medium that lies about its flushes), the write runs to its end, and verify
#       (on the device made again, always up) must fail: lost > 0, the first lost block not
#       below the count acknowledged before the switch (less one flush group), and the judged
#       blocks add up to the acknowledged ones.
#   pc  a real power cut, through the boot service (recipes-test/usbperf/files/usbperf-boot,
#       installed as the recipe installs it, its /etc/default/usbperf with POWER_CUT_STATE and
#       POWER_CUT_WRITE_ARGS on an ext4 disk, RUN_ONCE=1 and its stamp present: no factory
#       run): in boot 1 it finds no state and starts the write phase of PC_SIZE (the disk
#       throttled by QEMU), and the host kills QEMU with SIGKILL (scripts/vm/power_cut_kill.py)
#       as soon as the console shows a progress line with some but not all blocks
#       acknowledged. What QEMU had written is in the host's page cache, so the kill loses only
#       what the guest had not flushed: a power cut. Boot 2 mounts that disk (journal
#       recovery) and runs the service again: its verify, first, must pass with 0 <
#       acknowledged < blocks and no fewer acknowledged than the console showed before the cut
#       (the state file is durable when that line is printed), its verdict JSON on the output
#       disk; then its next write phase runs to its end.
# The host reads each boot's output disk back and scripts/vm/check_power_cut.py asserts the
# verdicts and counts, each verdict valid against docs/power-cut.schema.json. The kernel,
# userland (busybox, udev, dmsetup), initramfs and boot are scripts/vm-e2e.sh's
# (scripts/vm/lib.sh, scripts/vm/mkinitrd.sh); the disks are virtio ones of
# this script's own, found by serial. About 1.5-2.5 minutes on 2 cores (the build aside).
#
#   usage: scripts/ci/vm-power-cut.sh [--kernel 5.10|6.1|6.12] [--work DIR] [--timeout SECONDS]
#   env:   USBPERF_VM_CACHE, CARGO_TARGET_DIR, SHARED_TOOLS  as for scripts/vm-e2e.sh
#          USBPERF_VM_BIN  a usbperf-matrix (x86_64) to use instead of building one
# On failure the guest's console log is printed. Exit 0 only when every assertion held.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck disable=SC2034 # ROOT and QEMU_VER are lib.sh's inputs
ROOT=$PWD; PROG=scripts/ci/vm-power-cut.sh
# shellcheck source=vm/lib.sh
. scripts/vm/lib.sh

ARCH=x86_64; KERNEL=6.1; WORK=; TIMEOUT=420
# shellcheck disable=SC2034
QEMU_VER=7.2
while [ $# -gt 0 ]; do
    case $1 in
        --kernel) KERNEL=$2; shift 2 ;;
        --work) WORK=$(realpath -m "$2"); shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        --arch|--qemu) echo "the power-cut guests are x86_64 on QEMU 7.2 (no --arch, --qemu)" >&2; exit 2 ;;
        -h|--help) sed -n '2,/^# On failure/p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
vm_init
BASE=${WORK:-$CACHE/run-$ARCH-$KERNEL-power-cut}
# The regions: 4 KiB blocks, an fdatasync and a state rewrite every 64 of them. LW_SIZE sets
# the log's size (every write is logged once more); at their disks' throttles the fl write
# must outlast the table switch and the pc write the progress line the cut waits for.
BS=4k FLUSH_EVERY=64 LW_SIZE=8M FL_SIZE=8M PC_SIZE=48M
FL_BPS=2000000 PC_BPS=4000000   # QEMU's write throttles of the fl and pc disks (bytes/s)
# The power is cut at the first progress line with at least this many blocks acknowledged:
# the second line or so (the first comes with the first group), 3 s before the write's end.
CUT_AFTER=256

# An older cache has no dmsetup in its userland: unpack it again (the .debs stay cached).
[ -x "$KCACHE/k/$DA-root/sbin/dmsetup" ] || rm -rf "$KCACHE/k/$DA-root"
vm_prepare
if [ -n "${USBPERF_VM_BIN:-}" ]; then BIN=$USBPERF_VM_BIN; ls -l "$BIN"; else vm_build; fi
"$BIN" power-cut --help >/dev/null 2>&1 || { echo "$PROG: $BIN has no power-cut subcommand" >&2; exit 1; }
for m in dm-mod dm-log-writes dm-flakey; do
    find "$KCACHE/k/$DA/lib/modules/$KV" -name "$m.ko*" | grep -q . \
        || { echo "$PROG: kernel $KV has no $m module" >&2; exit 1; }
done

rm -rf "$BASE"; mkdir -p "$BASE"
# One initramfs for both boots: the product, dmsetup, the guest's /init, and the boot service
# installed as the recipe installs it (its @DIR@ placeholders filled in), with the stamp of an
# earlier factory run: it does the power-cut cycle and no factory run.
T=$BASE/tree
mkdir -p "$T/bin" "$T/etc/default" "$T/var/lib/usbperf"
cp scripts/vm/power-cut-init.sh "$T/init"; chmod +x "$T/init"
sed -e 's#@BINDIR@#/bin#g; s#@SYSCONFDIR@#/etc#g; s#@LOCALSTATEDIR@#/var#g' \
    recipes-test/usbperf/files/usbperf-boot > "$T/bin/usbperf-boot"
chmod +x "$T/bin/usbperf-boot"
# The rig's cycle: each boot verifies the state the last one left, then starts the next write
# phase (boot 1 finds no state and only writes; the power is cut during that write).
cat > "$T/etc/default/usbperf" <<EOF
# scripts/ci/vm-power-cut.sh: the unit already had its factory run (the stamp exists); every boot
# is a power-cut cycle on the pc disk (mounted at /mnt/pc by the guest's init).
RUN_ONCE=1
CONFIG=/etc/usbperf/usbperf.yaml
POWER_CUT_STATE=/mnt/pc/power-cut.state
POWER_CUT_VERDICT_DIR=/var/lib/usbperf/reports/boot-service
POWER_CUT_WRITE_ARGS="--target /mnt/pc/t.bin --size $PC_SIZE --bs $BS --flush-every $FLUSH_EVERY"
EOF
echo "exit=0 2026-01-01T00:00:00Z" > "$T/var/lib/usbperf/done"
cat > "$BASE/guest.sh" <<EOF
# scripts/ci/vm-power-cut.sh: the regions of the guest's power-cut tests
BS=$BS FLUSH_EVERY=$FLUSH_EVERY LW_SIZE=$LW_SIZE FL_SIZE=$FL_SIZE
EOF
step "initramfs"
W=$KCACHE EXTRA_MODS="dm-mod dm-log-writes dm-flakey" EXTRA_BINS=/sbin/dmsetup EXTRA_TREE=$T \
    scripts/vm/mkinitrd.sh "$DA" "$BIN" "$BASE/guest.sh" "$BASE/initrd.cpio.gz"

# mkimg NAME SIZE [ext4]: a disk image in $I, ext4 with 4 KiB blocks and every table written
# now (no lazy init writing behind the test's back), or zeros
mkimg() {
    truncate -s "$2" "$I/$1.img"
    if [ "${3:-}" = ext4 ]; then
        mkfs.ext4 -q -F -m 0 -b 4096 -E lazy_itable_init=0,lazy_journal_init=0 -L "$1" "$I/$1.img"
    fi
}
# disk NAME SERIAL [DRIVE OPTIONS]: the image as a virtio disk of that serial
disk() {
    GUEST_ARGS+=(-drive "if=none,id=$1,file=$I/$1.img,format=raw${3:+,$3}" -device "virtio-blk-pci,drive=$1,serial=$2")
}
# boot_setup N: WORK for boot N (lib.sh's boot reads WORK, I, GUEST_ARGS and the initramfs)
boot_setup() {
    WORK=$BASE/boot$1; I=$WORK/img
    mkdir -p "$I"; cp "$BASE/initrd.cpio.gz" "$WORK/initrd.cpio.gz"
    echo '{"entries": []}' > "$WORK/guest.json"   # guest.py: no disk to unplug
    GUEST_ARGS=(-M q35 -cpu max -pidfile "$WORK/qemu.pid")
}
read_out() {
    step "reading the output disk of boot $1 back"
    mkdir -p "$WORK/out"
    debugfs -R "rdump / $WORK/out" "$I/out.img" 2>/dev/null || true
    [ -d "$WORK/out/e2e/phase$1" ] || fail "nothing readable on the output disk of boot $1"
    ls "$WORK/out/e2e/phase$1"
}

step "boot 1: dm-log-writes, dm-flakey, then the write the power is cut under"
boot_setup 1
mkimg out 64M ext4; mkimg lwdata 32M ext4; mkimg lwlog 64M; mkimg flakey 16M; mkimg pc 80M ext4
cp "$I/lwdata.img" "$BASE/lw-pristine.img"   # the data disk as the log-writes target found it
disk out OUT00001; disk lwdata LWDATA01; disk lwlog LWLOG001
disk flakey FLAKEY01 "throttling.bps-write=$FL_BPS"; disk pc PCDISK01 "throttling.bps-write=$PC_BPS"
EXPECT=5
python3 scripts/vm/power_cut_kill.py --console "$WORK/console.raw" --pidfile "$WORK/qemu.pid" \
    --out "$WORK/cut.txt" --min-acked "$CUT_AFTER" --timeout "$TIMEOUT" &
KILLER=$!
vm_boot "$TIMEOUT" "console=ttyS0 panic=-1 loglevel=4 PHASE=1 EXPECT=$EXPECT"
# QEMU is gone: the watcher has cut (and written cut.txt before it did) or never will
kill "$KILLER" 2>/dev/null || true; wait "$KILLER" 2>/dev/null || true
BOOT1=$((T1 - T0))
grep -q 'E2E-POWER-CUT-ARMED' "$WORK/console.txt" || fail "boot 1 did not reach the power-cut write (QEMU exit $QRC)"
if grep -q 'E2E-POWER-CUT-MISSED' "$WORK/console.txt" || [ ! -s "$WORK/cut.txt" ] || [ "$QRC" = 0 ]; then
    fail "no power cut: the write ended (or QEMU exited $QRC) before a progress line with $CUT_AFTER <= N < M"
fi
echo "power cut after $(cut -d' ' -f1 "$WORK/cut.txt") of $(cut -d' ' -f2 "$WORK/cut.txt") blocks acknowledged (QEMU exit $QRC)"
read_out 1
OUT1=$WORK/out/e2e/phase1
[ -e "$OUT1/saved" ] || fail "boot 1 did not close its output disk before the power cut"
LOG=$I/lwlog.img PC_IMG=$I/pc.img CUT=$WORK/cut.txt

step "replaying the dm-log-writes log (scripts/vm/log_writes.py)"
python3 scripts/vm/log_writes.py points "$LOG" --from write-start --to write-end --at 25,50,75 --json > "$BASE/points.json" \
    || fail "the dm-log-writes log has no replay points"
python3 scripts/vm/log_writes.py points "$LOG" --from write-start --to write-end --at 25,50,75
boot_setup 2
mkimg out 64M ext4
cp --sparse=always "$PC_IMG" "$I/pc.img"
disk out OUT00001; disk pc PCDISK01
EXPECT=2
while read -r name upto; do
    python3 scripts/vm/log_writes.py replay "$LOG" --base "$BASE/lw-pristine.img" --out "$I/lw-$name.img" --upto "$upto"
    disk "lw-$name" "LW$name"; EXPECT=$((EXPECT + 1))
done < <(python3 -c 'import json, sys; [print(p["name"], p["upto"]) for p in json.load(open(sys.argv[1]))]' "$BASE/points.json")

step "boot 2: the replayed images verified, the boot service on the disk the power was cut under"
vm_boot "$TIMEOUT" "console=ttyS0 panic=-1 loglevel=4 PHASE=2 EXPECT=$EXPECT"
[ "$QRC" = 0 ] || fail "QEMU exited $QRC"
grep -q 'E2E-DONE' "$WORK/console.txt" || fail "the guest did not reach E2E-DONE"
read_out 2
BOOT2=$((T1 - T0))

step "checking the verdicts (scripts/vm/check_power_cut.py)"
python3 scripts/vm/check_power_cut.py --boot1 "$OUT1" --boot2 "$WORK/out/e2e/phase2" \
    --boot-service "$WORK/out/boot-service" --points "$BASE/points.json" --cut "$CUT" \
    --flush-every "$FLUSH_EVERY" --schema docs/power-cut.schema.json || fail "power-cut assertions failed (see above)"
echo
echo "$PROG: x86_64 kernel $KV ok, boot wall times $BOOT1 s and $BOOT2 s, $SECONDS s in all"
