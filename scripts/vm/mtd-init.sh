#!/bin/sh
# vm-mtd guest /init (busybox ash): the guest side of scripts/ci/vm-mtd.sh, whose comment block
# says what is proven. The raw flash is the kernel's own simulators, loaded here with their
# module parameters from /etc/usbperf/e2e/guest.sh (written by scripts/ci/vm-mtd.sh):
#   nandsim  a 128 MiB SLC NAND (2 KiB pages, 64 B OOB, 128 KiB blocks, software Hamming ECC)
#            in five partitions: 0 JFFS2 mounted, 1 the scan target (planted bad blocks,
#            grave pages that read back uncorrectable once written, random single bitflips
#            in written pages),
#            2 the speed test's area, 3 a test area with a weak block (its erase fails),
#            4 UBI with a UBIFS volume mounted;
#   mtdram   (x86_64 kernels only: armmp has no mtdram) an 8 MiB RAM "NOR" split with mtdpart
#            into `u-boot` (a protected name) and `nor-test` (a test area).
# Every command's output and exit status lands on the output disk (virtio, serial OUT00001,
# ext4), which the host reads back; the MTD/UBI sysfs attributes are recorded there too
# (the fixtures of tests/fixtures/mtd).
export PATH=/bin:/sbin
# shellcheck disable=SC1091 # written by scripts/ci/vm-mtd.sh
. /etc/usbperf/e2e/guest.sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t tmpfs run /run; mount -t tmpfs tmp /tmp
ts() { echo "E2E T+$(cut -d' ' -f1 /proc/uptime)s $*"; }
ts "init start (vm-mtd), kernel $(uname -r) $(uname -m)"
# The flash modules are loaded below with their parameters; the rest (and their
# dependencies: mtd, nand, the ECC engines) in dependency order now.
while read -r m; do
  case ${m##*/} in nandsim.ko|mtdram.ko|ubi.ko|ubifs.ko|jffs2.ko|mtdblock.ko) continue ;; esac
  insmod "$m" 2>/dev/null || echo "insmod FAILED $m"
done < /modlist
mod() { p=$(grep "/$1.ko\$" /modlist | head -n 1); shift; insmod "$p" "$@"; }
vdisks() { n=0; for b in /sys/block/vd*; do [ -e "$b" ] && n=$((n+1)); done; echo $n; }
i=0
while [ "$(vdisks)" -lt 1 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
/lib/systemd/systemd-udevd --daemon 2>&1 | tail -3
udevadm trigger --type=devices --action=add
udevadm settle --timeout=60
R=/var/lib/usbperf/reports
OUT=
for b in /sys/block/vd*; do [ "$(cat "$b/serial" 2>/dev/null)" = OUT00001 ] && OUT=${b##*/}; done
if [ -z "$OUT" ] || ! mount -t ext4 "/dev/$OUT" $R; then
  ts "E2E-FATAL: output disk not found or not mountable"; poweroff -f
fi
E=$R/e2e; mkdir -p "$E"
uname -r > "$E/kernel.txt"; uname -m > "$E/machine.txt"
# rc NAME CMD...: CMD's stdout into NAME.out, stderr into NAME.err, exit status into NAME.rc
rc() { n=$1; shift; "$@" > "$E/$n.out" 2> "$E/$n.err"; echo $? > "$E/$n.rc"; ts "$n: exit $(cat "$E/$n.rc")"; }

ts "nandsim $NANDSIM_PARAMS"
# shellcheck disable=SC2086 # the parameters are words
mod nandsim $NANDSIM_PARAMS || ts "E2E-WARN: nandsim did not load"
if grep -q '/mtdram.ko$' /modlist; then
  mod mtdram total_size=8192 erase_size=128 || ts "E2E-WARN: mtdram did not load"
  RAM=$(grep -l '^mtdram test device$' /sys/class/mtd/mtd*/name | head -n 1 | cut -d/ -f5)
  mtdpart add "/dev/$RAM" u-boot 0 1048576 > "$E/mtdpart.log" 2>&1
  mtdpart add "/dev/$RAM" nor-test 1048576 4194304 >> "$E/mtdpart.log" 2>&1
fi
mod mtdblock
# The UBI partition: attached, a volume made and mounted as UBIFS (which formats it).
mod ubi "mtd=$UBI_MTD" || ts "E2E-WARN: ubi did not attach"
mod ubifs
udevadm settle --timeout=30
ubimkvol /dev/ubi0 -N data -s 32MiB > "$E/ubimkvol.log" 2>&1
mkdir -p /mnt/ubi /mnt/jffs2
mount -t ubifs ubi0:data /mnt/ubi && echo hello > /mnt/ubi/file && sync
# JFFS2 on the first NAND partition, mounted by MTD name.
mod jffs2
mount -t jffs2 "$JFFS2_MTD" /mnt/jffs2 || ts "E2E-WARN: jffs2 did not mount"
cat /proc/mtd > "$E/proc-mtd.txt"
cat /proc/self/mountinfo > "$E/mountinfo.txt"
ts "flash ready: $(tr '\n' ' ' < /proc/mtd)"

# The sysfs of the flash, as a tree the project's tests read with SysfsRoot::at: the class
# links as relative links, each device's attributes as files.
S=/tmp/sysrec
record_dir() {   # record_dir DEVICE_DIR (resolved, under /sys/devices)
  d=$1; t=$S${d#/sys}
  mkdir -p "$t"
  for f in "$d"/*; do
    [ -f "$f" ] && [ -r "$f" ] && cat "$f" > "$t/${f##*/}" 2>/dev/null
  done; }
for cls in mtd ubi block; do
  mkdir -p "$S/class/$cls"
  for e in /sys/class/$cls/*; do
    n=${e##*/}
    case $cls in block) case $n in mtdblock*) ;; *) continue ;; esac ;; esac
    [ -L "$e" ] || continue
    ln -s "$(readlink "$e")" "$S/class/$cls/$n"
    real=$(cd -P "$e" && pwd)
    record_dir "$real"
    for v in "$real"/"$n"_*; do [ -d "$v" ] && record_dir "$v"; done
  done
done
mkdir -p "$S/block"
cp /proc/self/mountinfo "$S/mountinfo"
(cd /tmp && tar -cf "$E/sysfs.tar" sysrec)

# The scan target: written whole, bad blocks skipped (nandsim garbles grave pages and flips
# bits only in written pages), then read whole; the kernel's counters before and after.
P1=/sys/class/mtd/$SCAN_MTD
GOOD=$(( $(cat "$P1/size") / $(cat "$P1/erasesize") - $(cat "$P1/bad_blocks") ))
dd if=/dev/urandom of=/tmp/fill bs=131072 count="$GOOD" 2> "$E/dd.log"
nandwrite -p -q "/dev/$SCAN_MTD" /tmp/fill > "$E/nandwrite.log" 2>&1
rm -f /tmp/fill
cat "$P1/corrected_bits" "$P1/ecc_failures" > "$E/scan-before.txt"
rc scan-json usbperf-matrix flash scan "$SCAN_MTD" --format json
cat "$P1/corrected_bits" "$P1/ecc_failures" > "$E/scan-after.txt"
rc scan-text usbperf-matrix flash scan "$SCAN_MTD"
# The peer: mtd-utils' nanddump reads the same partition and prints the kernel's ECC counters'
# change over its dump; its time from /proc/uptime (busybox's date has no nanoseconds).
u0=$(cut -d' ' -f1 /proc/uptime)
nanddump -f /dev/null "/dev/$SCAN_MTD" > "$E/nanddump.out" 2> "$E/nanddump.err"
u1=$(cut -d' ' -f1 /proc/uptime)
echo "$u0 $u1" > "$E/nanddump-uptime.txt"
rc list-json usbperf-matrix list --format json
rc list-text usbperf-matrix list
rc health usbperf-matrix flash health --format json
# The speed test on each area, named or not; only the free, unprotected ones run.
for a in $SPEED_AREAS; do
  n=$(echo "$a" | tr ' /' '__')
  rc "speed-$n" usbperf-matrix flash speed "$(echo "$a" | tr '_' ' ')" --format json
done
# The inventory again: the speed tests marked no block bad (the weak block's erase failed,
# and marking is left to whatever owns the area).
rc list-after usbperf-matrix list --format json
# The factory run with a profile that scans mtd1 and speed-tests mtd2 (no block device: the
# flash alone is tested), its report, and the fleet of that report.
rc run usbperf-matrix run --config /etc/usbperf/run.yaml
rc fleet usbperf-matrix fleet "$R/run" --format json
ts "E2E-DONE"
umount /mnt/ubi /mnt/jffs2 2>/dev/null
sync; umount $R; sync
poweroff -f
