#!/usr/bin/env bash
# Raw flash (MTD and UBI) proven on real kernels: Debian's stock kernel in a QEMU (TCG) guest
# whose flash is the kernel's own simulators, loaded by the guest's /init
# (scripts/vm/mtd-init.sh) with planted faults through their module parameters:
#   nandsim  128 MiB SLC NAND (id 20 a1 00 15: 2 KiB pages, 64 B OOB, 128 KiB erase blocks;
#            software Hamming ECC, 1 bit per 256 bytes), partitions of 16, 256, 64 and 16
#            blocks and the rest:
#              mtd0  JFFS2, mounted by MTD name;
#              mtd1  the read scan's target: bad blocks 100 and 120 of the chip (84 and 104
#                    of the partition), grave pages 1157 and 1792 (block 2 page 5, block 12
#                    page 0 of the partition; they read back garbled, beyond the ECC, once
#                    written), and `bitflips=1` (a random single bit in one read of 1,024
#                    of a written page, anywhere on the chip): the guest writes the whole
#                    partition first with mtd-utils' nandwrite (which skips bad blocks), so
#                    the scan's 16,000 page reads see about 16 bitflips;
#              mtd2  a test area for the speed test;
#              mtd3  a test area with a weak block (341 of the chip, 5 of the partition:
#                    its first erase fails);
#              mtd4  UBI attached, a 32 MiB volume mounted as UBIFS;
#   mtdram   (x86_64 only: Debian's armmp kernel has no mtdram) an 8 MiB RAM "NOR", split by
#            mtd-utils' `mtdpart` into `u-boot` (1 MiB, a protected name) and `nor-test`.
# The guest runs `usbperf-matrix list`, `flash scan mtd1` (the kernel's corrected and failed
# counters read around it), `flash health` and `flash speed` on every partition, whether a
# test area of the profile or not, and records the MTD/UBI sysfs tree. On the host,
# scripts/vm/check_mtd.py asserts:
#   - the inventory: each device's type, size, erase block, page and OOB size, ECC, its
#     users (JFFS2 mount, UBI, the UBIFS mount of the UBI volume, the mtdblocks), the UBI
#     device and volume with their counters;
#   - the scan: the planted bad blocks found (and no more than the kernel counts), the
#     uncorrectable pages exactly the grave pages, the corrected bits exactly the kernel's
#     counter's increase over the scan and more than none;
#   - the speed test: it runs on mtd2 (and nor-test) with rates, 0 mismatched pages, the area
#     left erased; it fails on mtd3 naming the weak block's erase; it is refused (exit 2,
#     the reason named) on the mounted JFFS2, the attached UBI, `u-boot` and the
#     partitioned mtdram chip even though the profile names them all.
# The recorded sysfs trees are tests/fixtures/mtd/<kernel>-<arch> (--record-fixtures DIR
# copies them there). About 2 minutes per guest on 2 cores (the build aside).
#
#   usage: scripts/ci/vm-mtd.sh [--kernel 5.10|6.1|6.12] [--arch x86_64|armv7] [--work DIR]
#                               [--timeout SECONDS] [--record-fixtures DIR]
#   env:   USBPERF_VM_CACHE, CARGO_TARGET_DIR, SHARED_TOOLS  as for scripts/vm-e2e.sh
#          USBPERF_VM_BIN  a usbperf-matrix of the guest's architecture to use instead of
#                          building one
# On failure the guest's console log is printed. Exit 0 only when every assertion held.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck disable=SC2034 # ROOT and QEMU_VER are lib.sh's inputs
ROOT=$PWD; PROG=scripts/ci/vm-mtd.sh
# shellcheck source=vm/lib.sh
. scripts/vm/lib.sh

ARCH=x86_64; KERNEL=6.1; WORK=; TIMEOUT=600; RECORD=
# shellcheck disable=SC2034
QEMU_VER=7.2
while [ $# -gt 0 ]; do
    case $1 in
        --kernel) KERNEL=$2; shift 2 ;;
        --arch) ARCH=$2; shift 2 ;;
        --work) WORK=$(realpath -m "$2"); shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        --record-fixtures) RECORD=$(realpath -m "$2"); shift 2 ;;
        -h|--help) sed -n '2,/^# On failure/p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
vm_init
BASE=${WORK:-$CACHE/run-$ARCH-$KERNEL-mtd}
vm_prepare
if [ -n "${USBPERF_VM_BIN:-}" ]; then BIN=$USBPERF_VM_BIN; ls -l "$BIN"; else vm_build; fi
MODS="nandsim ubi ubifs jffs2 mtdblock"
# UBIFS refuses to load without every compressor it was built with.
COMPRESSORS="lzo deflate zstd"
for m in $MODS; do
    find "$KCACHE/k/$DA/lib/modules/$KV" -name "$m.ko*" | grep -q . \
        || { echo "$PROG: kernel $KV has no $m module" >&2; exit 1; }
done
HAS_MTDRAM=; find "$KCACHE/k/$DA/lib/modules/$KV" -name 'mtdram.ko*' | grep -q . && HAS_MTDRAM=1

# mtd-utils of the guest's architecture (Debian 12): ubimkvol for the UBI volume, mtdpart for
# the named partitions of mtdram, nandwrite to fill the scan target, nanddump the peer of the
# scan. Its programs link only libc.
MU=$CACHE/mtd-utils/$DA
if [ ! -x "$MU/root/usr/sbin/ubimkvol" ]; then
    step "mtd-utils ($DA)"
    mkdir -p "$MU"
    if [ "$DA" = amd64 ]; then
        (cd "$MU" && apt-get download mtd-utils:amd64)
    else
        private_apt "$CACHE/apt-bookworm-$DA" bookworm "$DA"
        apt-get "${APT[@]}" update -qq
        (cd "$MU" && apt-get "${APT[@]}" download "mtd-utils:$DA")
    fi
    rm -rf "$MU/root"; dpkg-deb -x "$(ls "$MU"/mtd-utils_*_"$DA".deb | head -1)" "$MU/root"
fi

rm -rf "$BASE"; mkdir -p "$BASE"
T=$BASE/tree
mkdir -p "$T/bin" "$T/etc/usbperf"
cp scripts/vm/mtd-init.sh "$T/init"; chmod +x "$T/init"
for b in ubimkvol mtdpart nandwrite nanddump; do cp "$MU/root/usr/sbin/$b" "$T/bin/"; done
# The board profile: every partition named a test area, so that only the rules, never the
# profile, keep the protected and busy ones from being erased.
cat > "$T/etc/usbperf/usbperf.yaml" <<'EOF'
# scripts/ci/vm-mtd.sh: the flash of the simulated board
flash:
  test_areas: ["NAND simulator partition 0", "NAND simulator partition 2",
               "NAND simulator partition 3", "NAND simulator partition 4",
               "nor-test", "u-boot", "mtd5"]
  max_bad_blocks: 40
  max_erase_count: 1000
  min_write_mib_per_s: 0.01
EOF
# The factory run's profile: no block device (the only disk is the output disk), the scan of
# the planted partition and the speed test of mtd2, with limits the planted faults miss.
cat > "$T/etc/usbperf/run.yaml" <<'EOF'
# scripts/ci/vm-mtd.sh: the factory run of the simulated board's flash
report_dir: /var/lib/usbperf/reports/run
devices:
  - select: {name: no-such-disk}
flash:
  scan: ["NAND simulator partition 1"]
  test_areas: ["NAND simulator partition 2"]
  max_bad_blocks: 40
  max_ecc_failures: 0
  min_reserved_for_bad: 1
  min_write_mib_per_s: 0.01
EOF
# Partition sizes in erase blocks; the last partition (UBI) takes the rest.
NANDSIM_PARAMS="id_bytes=0x20,0xa1,0x00,0x15 parts=16,256,64,16 badblocks=100,120"
NANDSIM_PARAMS="$NANDSIM_PARAMS gravepages=1157:0,1792:0 weakblocks=341:0 bitflips=1"
SPEED_AREAS="NAND_simulator_partition_0 NAND_simulator_partition_2 NAND_simulator_partition_3 NAND_simulator_partition_4"
[ -z "$HAS_MTDRAM" ] || SPEED_AREAS="$SPEED_AREAS u-boot nor-test mtd5"
cat > "$BASE/guest.sh" <<EOF
# scripts/ci/vm-mtd.sh: the flash the guest's /init loads
NANDSIM_PARAMS="$NANDSIM_PARAMS"
SCAN_MTD=mtd1
UBI_MTD=4
JFFS2_MTD=mtd0
SPEED_AREAS="$SPEED_AREAS"
EOF
step "initramfs"
EXTRA="$MODS $COMPRESSORS"; [ -z "$HAS_MTDRAM" ] || EXTRA="$EXTRA mtdram"
W=$KCACHE EXTRA_MODS="$EXTRA" EXTRA_TREE=$T \
    scripts/vm/mkinitrd.sh "$DA" "$BIN" "$BASE/guest.sh" "$BASE/initrd.cpio.gz"

WORK=$BASE/boot; I=$WORK/img
mkdir -p "$I"; cp "$BASE/initrd.cpio.gz" "$WORK/initrd.cpio.gz"
echo '{"entries": []}' > "$WORK/guest.json"   # guest.py: no disk to unplug
truncate -s 64M "$I/out.img"
mkfs.ext4 -q -F -m 0 -L out "$I/out.img"
if [ "$ARCH" = x86_64 ]; then
    GUEST_ARGS=(-M q35 -cpu max); CONSOLE=ttyS0
else
    GUEST_ARGS=(-M virt,highmem=off -cpu cortex-a15); CONSOLE=ttyAMA0
fi
GUEST_ARGS+=(-drive "if=none,id=out,file=$I/out.img,format=raw" -device "virtio-blk-pci,drive=out,serial=OUT00001")

step "boot: nandsim${HAS_MTDRAM:+, mtdram}, UBI, UBIFS, JFFS2; list, scan, health, speed"
vm_boot "$TIMEOUT" "console=$CONSOLE panic=-1 loglevel=4"
vm_read_out
cp "$WORK/console.txt" "$WORK/out/e2e/console.txt"
step "checking (scripts/vm/check_mtd.py)"
python3 scripts/vm/check_mtd.py --out "$WORK/out/e2e" ${HAS_MTDRAM:+--mtdram} \
    || fail "raw flash assertions failed (see above)"
# The factory run's report, flash section and all, against the report's JSON Schema.
python3 scripts/ci/validate-report.py "$WORK"/out/run/*.yaml || fail "the factory run's report is not valid"
if [ -n "$RECORD" ]; then
    D=$RECORD/$(cat "$WORK/out/e2e/kernel.txt")-$ARCH
    rm -rf "$D"; mkdir -p "$D"
    tar -xf "$WORK/out/e2e/sysfs.tar" -C "$D" --strip-components=1
    echo "recorded the flash's sysfs in $D"
fi
echo
echo "$PROG: $ARCH kernel $KV ok, boot wall time $((T1 - T0)) s, $SECONDS s in all"
