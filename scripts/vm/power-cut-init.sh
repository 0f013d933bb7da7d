#!/bin/sh
# vm-power-cut guest /init (busybox ash): the guest side of scripts/ci/vm-power-cut.sh, whose comment
# block says what is proven. Two boots share this initramfs; PHASE on the kernel command line
# says which one this is. Every verdict, exit code and log lands on the output disk (virtio,
# serial OUT00001, ext4, mounted at the report directory), which the host reads back.
#   PHASE=1  lw: dm-log-writes over an ext4 disk, `power-cut write` on it (the host replays the
#              log afterwards); fl: dm-flakey over a raw disk, switched to drop_writes in the
#              middle of a `power-cut write`, then verified; pc: the boot service's write
#              phase on an ext4 disk, during which the host kills QEMU (the guest never gets
#              past it).
#   PHASE=2  the replayed lw images verified one after the other, then the boot service
#              (usbperf-boot, POWER_CUT_STATE set) on the pc disk the power was cut under:
#              its verify, then its next write phase.
# The disks are found by their virtio serial; the sizes come from /etc/usbperf/e2e/guest.sh
# (written by scripts/ci/vm-power-cut.sh): LW_SIZE, FL_SIZE, BS, FLUSH_EVERY; the pc write's are in
# the boot service's /etc/default/usbperf.
export PATH=/bin:/sbin
# shellcheck disable=SC1091 # written by scripts/ci/vm-power-cut.sh
. /etc/usbperf/e2e/guest.sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t tmpfs run /run; mount -t tmpfs tmp /tmp
ts() { echo "E2E T+$(cut -d' ' -f1 /proc/uptime)s $*"; }
ts "init start (power-cut phase ${PHASE:-?}), kernel $(uname -r) $(uname -m)"
while read -r m; do insmod "$m" 2>/dev/null || echo "insmod FAILED $m"; done < /modlist
vdisks() { n=0; for b in /sys/block/vd*; do [ -e "$b" ] && n=$((n+1)); done; echo $n; }
i=0
while [ "$(vdisks)" -lt "${EXPECT:-1}" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
ts "modules loaded, disks: $(echo /sys/block/* | sed 's#/sys/block/##g')"
# udev as on the unit (the product asks it about disks); device-mapper makes its own nodes
# (DM_DISABLE_UDEV): the initramfs has no udev rules that would answer dmsetup's cookies.
/lib/systemd/systemd-udevd --daemon 2>&1 | tail -3
udevadm trigger --type=devices --action=add
udevadm settle --timeout=60
export DM_DISABLE_UDEV=1
mkdir -p /dev/mapper

# kernel name of the virtio disk whose serial is $1
by_serial() {
  for b in /sys/block/vd*; do
    [ "$(cat "$b/serial" 2>/dev/null)" = "$1" ] && { echo "${b##*/}"; return 0; }
  done
  return 1; }
R=/var/lib/usbperf/reports
OUT=$(by_serial OUT00001)
if [ -z "$OUT" ] || ! mount -t ext4 "/dev/$OUT" $R; then
  ts "E2E-FATAL: output disk not found or not mountable"; poweroff -f
fi
E=$R/e2e/phase${PHASE:-0}; mkdir -p "$E"
usbperf-matrix --version > "$E/version.txt" 2>&1
dmsetup version > "$E/dmsetup-version.txt" 2>&1
# the acknowledged count of a power-cut state file (JSON), or nothing
acked() { sed -n 's/.*"acknowledged"[^0-9]*\([0-9][0-9]*\).*/\1/p' "$1" 2>/dev/null | head -n 1; }
# rc FILE CMD...: runs CMD, its exit status into FILE (set -e is not in force here)
rc() { f=$1; shift; "$@"; echo $? > "$f"; }

phase1() {
  # lw: every write to the ext4 disk is also logged, in the order it reached the medium. The
  # marks bracket the write phase: the host takes its replay points between them.
  LWD=$(by_serial LWDATA01); LWL=$(by_serial LWLOG001)
  ts "E2E-SCENARIO lw start (data $LWD, log $LWL)"
  S=$(cat "/sys/block/$LWD/size")
  dmsetup create lw --table "0 $S log-writes /dev/$LWD /dev/$LWL" > "$E/lw-dmsetup.txt" 2>&1
  echo $? > "$E/lw-dmsetup.rc"
  mkdir -p /mnt/lw
  if mount -t ext4 /dev/mapper/lw /mnt/lw; then
    dmsetup message lw 0 mark write-start
    rc "$E/lw-write.rc" usbperf-matrix power-cut write --target /mnt/lw/t.bin --size "$LW_SIZE" \
      --bs "$BS" --flush-every "$FLUSH_EVERY" --state /mnt/lw/power-cut.state > "$E/lw-write.log" 2>&1
    dmsetup message lw 0 mark write-end
    cp /mnt/lw/power-cut.state "$E/lw-state.json" 2>/dev/null
    ls -la /mnt/lw > "$E/lw-after-write.ls"
    umount /mnt/lw
  else
    ts "E2E-WARN: /dev/mapper/lw not mountable"
  fi
  dmsetup status lw > "$E/lw-status.txt" 2>&1   # <logged entries> <highest log sector>
  dmsetup remove lw; echo $? > "$E/lw-remove.rc"
  sed 's/^/[lw-write] /' "$E/lw-write.log"
  ts "E2E-SCENARIO lw done rc=$(cat "$E/lw-write.rc" 2>/dev/null) $(cat "$E/lw-status.txt")"
  sync

  # fl: an always-up flakey target, switched to drop_writes (writes complete, nothing is
  # stored) once the state file says the medium acknowledged some blocks. The raw disk is
  # throttled by QEMU so the switch lands mid-write.
  FLD=$(by_serial FLAKEY01)
  ts "E2E-SCENARIO fl start (disk $FLD)"
  S=$(cat "/sys/block/$FLD/size")
  dmsetup create fl --table "0 $S flakey /dev/$FLD 0 600 0" > "$E/fl-dmsetup.txt" 2>&1
  echo $? > "$E/fl-dmsetup.rc"
  usbperf-matrix power-cut write --target /dev/mapper/fl --size "$FL_SIZE" --bs "$BS" \
    --flush-every "$FLUSH_EVERY" --state /run/fl.state --allow-write-device > "$E/fl-write.log" 2>&1 &
  pid=$!
  a=
  while kill -0 $pid 2>/dev/null; do
    a=$(acked /run/fl.state); [ "${a:-0}" -gt 0 ] && break
    sleep 0.05
  done
  if [ "${a:-0}" -gt 0 ]; then
    # the count seen before the switch: every block below it must survive
    echo "$a" > "$E/fl-acked-before-switch.txt"
    dmsetup suspend fl
    acked /run/fl.state > "$E/fl-acked-at-suspend.txt"
    dmsetup load fl --table "0 $S flakey /dev/$FLD 0 0 600 1 drop_writes"
    dmsetup resume fl
    ts "E2E-TRIGGER fl: drop_writes after $a acknowledged blocks: $(dmsetup table fl)"
  else
    ts "E2E-WARN: fl: the write ended before any block was acknowledged"
  fi
  wait $pid; echo $? > "$E/fl-write.rc"
  cp /run/fl.state "$E/fl-state.json" 2>/dev/null
  sed 's/^/[fl-write] /' "$E/fl-write.log"
  # The target again, always up, as a new device: no page cache of the dropped writes survives
  # the removal, and the state names /dev/mapper/fl.
  dmsetup remove fl
  dmsetup create fl --table "0 $S flakey /dev/$FLD 0 600 0"
  rc "$E/fl-verify.rc" usbperf-matrix power-cut verify --state /run/fl.state --format json \
    > "$E/fl-verify.json" 2> "$E/fl-verify.err"
  cat "$E/fl-verify.err"; cat "$E/fl-verify.json"; echo
  dmsetup remove fl
  ts "E2E-SCENARIO fl done write rc=$(cat "$E/fl-write.rc") verify rc=$(cat "$E/fl-verify.rc")"

  # pc: the output disk is closed first (the host kills QEMU during this write: nothing of
  # this boot may be left to write after it), then the boot service, which finds no state
  # and starts the write phase whose progress lines the host watches on the console.
  PCD=$(by_serial PCDISK01)
  mkdir -p /mnt/pc
  mount -t ext4 "/dev/$PCD" /mnt/pc || ts "E2E-WARN: pc disk $PCD not mountable"
  dmesg > "$E/dmesg.txt"
  echo saved > "$E/saved"
  sync; umount $R; sync
  ts "E2E-SCENARIO pc start (disk $PCD): the host cuts the power"
  echo "E2E-POWER-CUT-ARMED"
  /bin/usbperf-boot 2>&1
  # reached only when the host did not kill QEMU in time
  echo "E2E-POWER-CUT-MISSED rc=$?"
}

phase2() {
  # the replayed lw images: each at the path the state names (/mnt/lw), one after the other
  mkdir -p /mnt/lw /mnt/pc
  for b in /sys/block/vd*; do
    s=$(cat "$b/serial" 2>/dev/null); d=${b##*/}
    case $s in LW*) ;; *) continue ;; esac
    n=${s#LW}
    ts "E2E-SCENARIO lw-$n start (replayed image on $d)"
    if mount -t ext4 "/dev/$d" /mnt/lw; then
      ls -la /mnt/lw > "$E/lw-$n.ls"
      cp /mnt/lw/power-cut.state "$E/lw-$n-state.json" 2>/dev/null
      rc "$E/lw-$n.rc" usbperf-matrix power-cut verify --state /mnt/lw/power-cut.state --format json \
        > "$E/lw-$n.json" 2> "$E/lw-$n.err"
      umount /mnt/lw
    else
      echo "not mountable" > "$E/lw-$n.err"
    fi
    cat "$E/lw-$n.err"
    ts "E2E-SCENARIO lw-$n done rc=$(cat "$E/lw-$n.rc" 2>/dev/null)"
  done
  # pc: the disk the power was cut under, mounted as the unit's fstab would (the journal is
  # replayed), then the boot service as the unit runs it at boot: the verify of the state
  # boot 1 left, then the next write phase (run to its end: no cut this time)
  PCD=$(by_serial PCDISK01)
  ts "E2E-SCENARIO boot-service start (pc disk $PCD)"
  if mount -t ext4 "/dev/$PCD" /mnt/pc; then
    ls -la /mnt/pc > "$E/pc.ls"
    cp /mnt/pc/power-cut.state "$E/pc-state.json" 2>/dev/null
    rc "$E/boot-service.rc" /bin/usbperf-boot > "$E/boot-service.log" 2>&1
    ls -la /mnt/pc > "$E/pc-after.ls"
    umount /mnt/pc
  else
    echo "pc disk not mountable" > "$E/boot-service.log"
  fi
  sed 's/^/[usbperf-boot] /' "$E/boot-service.log"
  ts "E2E-SCENARIO boot-service done rc=$(cat "$E/boot-service.rc" 2>/dev/null)"
  dmesg > "$E/dmesg.txt"
}

case ${PHASE:-} in
  1) phase1 ;;
  2) phase2 ;;
  *) ts "E2E-FATAL: PHASE must be 1 or 2" ;;
esac
sync; umount $R 2>/dev/null; sync
ts "E2E-DONE"
poweroff -f
