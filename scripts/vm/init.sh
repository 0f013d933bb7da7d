#!/bin/sh
# vm-e2e guest /init (busybox ash): bring the "unit" up like its boot would (modules, udevd,
# mounts), run usbperf-matrix as the boot service does, then the fault scenarios, and leave
# every report, exit code and log on the output disk (id out: virtio or an SD slot, ext4, mounted
# at the report directory). The host reads that disk back after power-off.
# The guest's disks come from /etc/usbperf/e2e/guest.sh (scripts/vm/guests.py init-env, from
# scripts/vm/guests.json): EXPECT disks to wait for, DISKS (ids) and for each id FIND_<id>
# (serial S, label L or mmc TYPE) and MOUNT_<id> (fstype options; mounted at /media/<id>); the
# kernel name of each lands in the variable of its upper-cased id (SATA, UAS, ...). PROFILE: a
# board profile of its own; PROFILE_RULES: device rules appended to the default one;
# HALT=reboot where the machine cannot power off (the ast2600 resets, and -no-reboot turns that
# into QEMU's exit).
# Kernel command line (environment): SCENARIOS="baseline ...", RECORD=1 to also dump sysfs
# (scripts/vm/tools/sysdump.sh) for --record, ROUNDS=N, CALIBRATE_ROUNDS=N, BENCH_MODES and
# SD_IOMAX for the schedule benchmark (SCENARIOS=bench-schedule: scripts/bench/vm-bench-schedule.sh).
export PATH=/bin:/sbin
. /etc/usbperf/e2e/guest.sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t tmpfs run /run; mount -t tmpfs tmp /tmp
ts() { echo "E2E T+$(cut -d' ' -f1 /proc/uptime)s $*"; }
ts "init start, kernel $(uname -r) $(uname -m)"
hostname vm-e2e-unit
while read -r m; do
  # null_blk (the schedule benchmark's control) makes its disks itself, through configfs
  case $m in *usb-storage.ko) insmod "$m" delay_use=0 ;; *null_blk.ko) insmod "$m" nr_devices=0 ;;
             *) insmod "$m" ;; esac 2>/dev/null || echo "insmod FAILED $m"
done < /modlist
ndisks() { ls /sys/block | grep -cvE '^(loop|ram|zram)'; }
N=${EXPECT:-1}; i=0
while [ "$(ndisks)" -lt "$N" ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done
sleep 2
ts "modules loaded, $(ndisks) disks present (expected $N): $(ls /sys/block | tr '\n' ' ')"
/lib/systemd/systemd-udevd --daemon 2>&1 | tail -3
udevadm trigger --type=devices --action=add
udevadm settle --timeout=60; ts "udev settled rc=$?"

halt() { if [ "${HALT:-poweroff}" = reboot ]; then reboot -f; else poweroff -f; fi; }
# kernel name of the disk whose USB/ATA/virtio/NVMe serial is $1
disk_by_serial() {
  for b in /sys/block/*; do
    n=${b##*/}
    case $n in loop*|ram*|zram*) continue ;; esac
    s=$(udevadm info -q property -n /dev/$n 2>/dev/null | sed -n 's/^ID_SERIAL_SHORT=//p')
    [ -z "$s" ] && [ -e $b/serial ] && s=$(cat $b/serial)
    [ "$s" = "$1" ] && { echo $n; return 0; }
  done
  return 1; }
# kernel name of the disk whose filesystem label (udev's blkid) is $1: the SD-slot output disk
# and the UFS LU have no serial of their own
disk_by_label() {
  for b in /sys/block/*; do
    n=${b##*/}
    udevadm info -q property -n /dev/$n 2>/dev/null | grep -qx "ID_FS_LABEL=$1" && { echo $n; return 0; }
  done
  return 1; }
# kernel name of the card whose MMC type is $1 (SD or MMC): its user area, never boot/rpmb,
# never the output disk (on the eMMC board it sits in an SD slot)
mmc_of_type() {
  for b in /sys/block/mmcblk*; do
    n=${b##*/}
    case $n in *boot*|*rpmb*|*gp*) continue ;; esac
    [ "$n" = "${OUT:-}" ] && continue
    [ "$(cat $b/device/type 2>/dev/null)" = "$1" ] && { echo $n; return 0; }
  done
  return 1; }
# kernel name of the disk described by a FIND_<id> value ($1: serial S, label L or mmc TYPE)
find_disk() {
  set -- $1
  case $1 in serial) disk_by_serial "$2" ;; label) disk_by_label "$2" ;; mmc) mmc_of_type "$2" ;; *) return 1 ;; esac; }
upper() { echo "$1" | tr '[:lower:]' '[:upper:]'; }
R=/var/lib/usbperf/reports
OUT=$(find_disk "$FIND_out")
if [ -z "$OUT" ] || ! mount -t ext4 /dev/$OUT $R; then
  ts "E2E-FATAL: output disk ($FIND_out) not found or not mountable"; halt
fi
E=$R/e2e; mkdir -p $E
names="OUT=$OUT"
for id in $DISKS; do
  [ "$id" = out ] && continue
  eval "f=\$FIND_$id"
  n=$(find_disk "$f")
  eval "$(upper $id)=$n"; names="$names $(upper $id)=$n"
done
echo "$names" | tee $E/names.txt
mountfs() { # disk dir fstype opts
  [ -n "$1" ] || return 0; mkdir -p $2
  mount -t $3 -o $4 /dev/$1 $2 || ts "E2E-WARN: mount $1 on $2 failed"; }
for id in $DISKS; do
  eval "m=\$MOUNT_$id; n=\$$(upper $id)"
  # shellcheck disable=SC2086 # $m is the fstype and the options
  [ -n "$m" ] && mountfs "$n" /media/$id $m
done
grep /media /proc/mounts
# The board profile names every device this guest has: QEMU 10's extra disks are required too
# (the list is the profile's last key, so their rules are appended to it).
[ -n "$PROFILE_RULES" ] && echo "$PROFILE_RULES" >> /etc/usbperf/usbperf.yaml
[ -n "$PROFILE" ] && cp /etc/usbperf/e2e/$PROFILE /etc/usbperf/usbperf.yaml

if [ "${RECORD:-0}" = 1 ]; then
  ts "recording sysfs"
  sysdump /run/sysdump.txt && gzip -9 -c /run/sysdump.txt > $E/sysdump.gz
  ts "sysdump done: $(wc -l < /run/sysdump.txt) lines"
fi
usbperf-matrix --version > $E/version.txt 2>&1
# Health: debugfs gives the MMC bus timing and the kernel's copy of EXT_CSD; the
# list run saves the raw answers of its read-only health ioctls (USBPERF_HEALTH_RECORD) and the
# kernel's health attributes are copied beside them: the fixtures of tests/fixtures/health/.
H=$E/health; mkdir -p $H
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
for f in /sys/kernel/debug/mmc*/mmc*:*/ext_csd; do
  [ -e "$f" ] && cat "$f" > "$H/$(basename "$(dirname "$f")").debugfs-ext_csd.txt"
done
for f in /sys/bus/mmc/devices/*/life_time /sys/bus/mmc/devices/*/pre_eol_info /sys/bus/mmc/devices/*/fwrev \
         /sys/bus/mmc/devices/*/ssr /sys/kernel/debug/mmc*/ios; do
  [ -e "$f" ] && echo "$f=$(cat "$f" | tr '\n' ' ')"
done > $H/sysfs.txt 2>&1
for f in $(find /sys/devices -path '*health_descriptor/*' 2>/dev/null); do echo "$f=$(cat "$f")"; done >> $H/sysfs.txt 2>&1
for f in $(find /sys/devices -name current_link_speed 2>/dev/null); do
  d=${f%/*}; echo "$d: $(cat $d/current_link_speed) x$(cat $d/current_link_width) max $(cat $d/max_link_speed) x$(cat $d/max_link_width)"
done >> $H/sysfs.txt 2>&1
for f in $(find /sys/devices -name over_current_count -o -name rx_lanes 2>/dev/null); do echo "$f=$(cat "$f")"; done >> $H/sysfs.txt 2>&1
USBPERF_HEALTH_RECORD=$H usbperf-matrix list --format json > $E/list.json 2> $E/list.err; echo $? > $E/list.rc
usbperf-matrix list
# A stick behind a full-speed hub (the guest's `hub_cause` entry) links at 12M: its link check
# against 480M must name the hub as the cause. Its port is found by its serial.
hs=
[ -n "$HUB_STICK_SERIAL" ] && hs=$(grep -lx "$HUB_STICK_SERIAL" /sys/bus/usb/devices/*/serial 2>/dev/null | head -n 1)
if [ -n "$hs" ]; then
  hp=${hs%/serial}; hp=${hp##*/}
  usbperf-matrix list --expect "usb:$hp=480" --format json > $E/list-hub.json 2> $E/list-hub.err
  echo $? > $E/list-hub.rc
  usbperf-matrix list --expect "usb:$hp=480" | grep '^link '
fi
dmesg > $E/dmesg-boot.txt

# run_scen NAME PATTERN ACTION [usbperf args...]: runs usbperf-matrix in the background; when
# its log shows PATTERN (a start line), ACTION (a shell function) runs once, with $pid set.
run_scen() {
  name=$1; pat=$2; act=$3; shift 3
  log=$E/$name.log; : > $log
  ts "E2E-SCENARIO $name start: usbperf-matrix run $*"
  usbperf-matrix run "$@" > $log 2>&1 &
  pid=$!; fired=0
  while kill -0 $pid 2>/dev/null; do
    if [ $fired = 0 ] && [ -n "$pat" ] && grep -q "$pat" $log; then
      fired=1; ts "E2E-TRIGGER $name ($act)"; $act
    fi
    sleep 0.2
  done
  wait $pid; rc=$?
  echo $rc > $E/$name.rc
  sed "s/^/[$name] /" $log
  find /media -name '.usbperf-testfile-*' > $E/$name.leftover 2>/dev/null
  ts "E2E-SCENARIO $name done rc=$rc fired=$fired leftover=$(wc -l < $E/$name.leftover)"
  sync
}
act_none() { :; }
act_term() { sleep 2; kill -TERM $pid; }
act_fill() { # fill the SD card's ext4 (fallocate: metadata only, instant), then the last blocks
  avail=$(df -k /media/sd | awk 'NR==2{print $4}')
  fallocate -l $((avail * 1024)) /media/sd/filler 2>/dev/null ||
    fallocate -l $(((avail - 256) * 1024)) /media/sd/filler
  dd if=/dev/zero of=/media/sd/filler2 bs=4k 2>/dev/null; sync; df -k /media/sd | tail -1; }
act_erofs() { echo 1 > /sys/fs/ext4/$UAS/trigger_fs_error; }
act_unplug() { echo "E2E-UNPLUG xbot"; }   # the host (guest.py) unplugs the disk of that id

# calibrate_for NAME CONFIG: `usbperf-matrix calibrate` of CONFIG, CALIBRATE_ROUNDS rounds of
# each mode per phase (default 2; 0: no calibration), its reports under $R/NAME-calibrate/, its
# output, snippet and exit code in $E/NAME-calibrate.{log,yaml,rc}. Prints the config the
# benchmark's rounds then run: CONFIG extended by the snippet, whose auto runs take no
# --schedule flag (the snippet's schedule: auto with the shared lanes it found, or serial when
# it found nothing to run together), else CONFIG itself.
calibrate_for() {
  name=$1; cfg=$2; n=${CALIBRATE_ROUNDS:-2}
  if [ "$n" = 0 ] || ! usbperf-matrix calibrate --help >/dev/null 2>&1; then echo "$cfg"; return; fi
  ts "E2E-SCENARIO $name-calibrate start: usbperf-matrix calibrate --config $cfg --rounds $n" >&2
  usbperf-matrix calibrate --config "$cfg" --rounds "$n" --report-dir "$R/$name-calibrate" \
    --out "$E/$name-calibrate.yaml" > "$E/$name-calibrate.log" 2>&1
  rc=$?; echo $rc > "$E/$name-calibrate.rc"
  sed "s/^/[$name-calibrate] /" "$E/$name-calibrate.log" >&2
  ts "E2E-SCENARIO $name-calibrate done rc=$rc" >&2
  sync
  if [ $rc = 0 ] && [ -s "$E/$name-calibrate.yaml" ]; then
    { echo "profile: $cfg"; cat "$E/$name-calibrate.yaml"; } > "/tmp/$name-calibrated.yaml"
    echo "/tmp/$name-calibrated.yaml"
  else
    echo "$cfg"
  fi
}

# The schedule benchmark: ROUNDS rounds of its quick matrix, `--schedule serial` and
# `--schedule auto` alternately (the order swaps every round, so neither mode always runs
# first), each report under $R/bench/r<N>-<mode>/ and its exit code in $E/bench-r<N>-<mode>.rc.
# A binary without --schedule runs both modes serial: an A/A run, the noise floor.
bench_schedule() {
  # SD_IOMAX: the SD card's throttle, by the guest kernel's blk-throttle (QEMU's would stall the
  # guest: scripts/bench/vm-bench-schedule.sh says why) on every process of the benchmark.
  SD=${BSD:-}
  if [ -n "${SD_IOMAX:-}" ] && [ -n "$SD" ]; then
    CG=/sys/fs/cgroup; mkdir -p $CG
    { mount -t cgroup2 cgroup2 $CG && echo +io > $CG/cgroup.subtree_control && mkdir -p $CG/bench &&
      echo "$(cat "/sys/block/$SD/dev") $SD_IOMAX" > $CG/bench/io.max && echo $$ > $CG/bench/cgroup.procs &&
      ts "SD card $SD throttled in the guest: $(cat $CG/bench/io.max)"; } || ts "E2E-WARN: no io.max throttle on $SD"
  fi
  if usbperf-matrix run --help 2>&1 | grep -q -- '--schedule'; then SER="--schedule serial"; AUTO="--schedule auto"
  else SER=; AUTO=; ts "E2E-WARN: usbperf-matrix has no --schedule: both modes run serial (an A/A run)"; fi
  echo "${AUTO:-absent}" > $E/bench-schedule-flag.txt
  CFG=/etc/usbperf/e2e/bench-schedule.yaml
  if [ -n "$AUTO" ]; then
    CFG=$(calibrate_for bench $CFG)
    case $CFG in /tmp/*) AUTO= ;; esac   # run as calibrated: the snippet's own schedule
  fi
  r=1
  while [ $r -le "${ROUNDS:-3}" ]; do
    order=${BENCH_MODES:-serial auto}
    [ $((r % 2)) = 1 ] || order=$(for m in $order; do echo "$m"; done | sed -n '1!G;h;$p')
    for m in $order; do
      case $m in
        parallel) bench_parallel $r; continue ;;
        auto) f=$AUTO ;;
        *) f=$SER ;;
      esac
      # shellcheck disable=SC2086 # $f is the flag and its value, or nothing
      run_scen bench-r$r-$m "" act_none --config $CFG --report-dir $R/bench/r$r-$m $f
    done
    r=$((r + 1))
  done
}
# The control without QEMU's device models: four null_blk disks made in the guest
# kernel (configfs: 64 MiB, memory backed, 10 MiB/s each), the same rounds of
# bench-nullb.yaml, reports under $R/nullb/r<N>-<mode>/, exit codes in
# $E/nullb-r<N>-<mode>.rc.
bench_nullb() {
  [ -d /sys/module/null_blk ] || { ts "E2E-WARN: no null_blk module: no null_blk control"; return; }
  [ -d /sys/kernel/config/nullb ] || mount -t configfs none /sys/kernel/config
  for i in 0 1 2 3; do
    d=/sys/kernel/config/nullb/nullb$i   # 6.1 names the disk after its directory
    mkdir "$d" && echo 64 > "$d/size" && echo 1 > "$d/memory_backed" && echo 10 > "$d/mbps" &&
      echo 1 > "$d/power" || ts "E2E-WARN: null_blk device $i not made"
  done
  udevadm settle --timeout=30
  ls /sys/block | tr '\n' ' '; echo
  CFG=$(calibrate_for nullb /etc/usbperf/e2e/bench-nullb.yaml)
  AUTOF="--schedule auto"; case $CFG in /tmp/*) AUTOF= ;; esac   # as calibrated
  r=1
  while [ $r -le "${ROUNDS:-3}" ]; do
    order="serial auto"; [ $((r % 2)) = 1 ] || order="auto serial"
    for m in $order; do
      f="--schedule serial"; [ $m = serial ] || f=$AUTOF
      # shellcheck disable=SC2086 # $f is the flag and its value
      run_scen nullb-r$r-$m "" act_none --config $CFG --report-dir $R/nullb/r$r-$m $f
    done
    r=$((r + 1))
  done
}
# Mode "parallel" (BENCH_MODES): one usbperf-matrix process per lane at once, each on a copy of
# the config with only its lane's device rules: the schedule the topology allows, without the
# product's scheduler (a reference for auto, and a concurrent run before --schedule exists).
bench_parallel() {
  dir=$R/bench/r$1-parallel; i=0; pids=
  ts "E2E-SCENARIO bench-r$1-parallel start"
  for g in "class: sd}" "class: sata}" BENCHEHCI1 BENCHXHCI1 "BENCHHUB0[12]"; do
    case $g in BENCHHUB*) [ -n "${BHUB1:-}" ] || continue ;; esac
    i=$((i + 1)); c=/tmp/bench-lane$i.yaml
    awk -v pat="$g" '!/^  - [{]select:/ || $0 ~ pat' /etc/usbperf/e2e/bench-schedule.yaml > $c
    usbperf-matrix run --config "$c" --report-dir "$dir/lane$i" --lock-file "/run/bench-lane$i.lock" \
      > "$E/bench-r$1-parallel-lane$i.log" 2>&1 &
    pids="$pids $!"
  done
  rc=0
  for p in $pids; do wait "$p" || rc=$?; done
  echo $rc > "$E/bench-r$1-parallel.rc"
  cat "$E/bench-r$1-parallel-lane"*.log | grep -v ': running '
  ts "E2E-SCENARIO bench-r$1-parallel done rc=$rc"
  sync
}

for s in ${SCENARIOS:-baseline}; do
  case $s in
    emmc)     run_scen emmc "" act_none ;;       # the eMMC board's boot-service run
    bench-schedule) bench_schedule; bench_nullb ;;
    health)   run_scen health "" act_none --config /etc/usbperf/e2e/health.yaml --report-dir $R/health ;;
    baseline) # a test file left by a run the power was cut under (an earlier boot)
              [ -n "$SATA" ] && head -c 65536 /dev/zero > /media/sata/.usbperf-testfile-4242-0.tmp
              run_scen baseline "" act_none ;;   # the boot service's exact command
    blkdebug) run_scen blkdebug "" act_none --config /etc/usbperf/e2e/blkdebug.yaml --report-dir $R/blkdebug ;;
    auto)     run_scen auto "" act_none --config /etc/usbperf/e2e/blkdebug.yaml --report-dir $R/auto --schedule auto ;;
    autoboot) run_scen autoboot "" act_none --report-dir $R/autoboot --schedule auto ;;
    sigterm)  run_scen sigterm "usbperf-matrix: $SATA seq-write: start" act_term \
                --config /etc/usbperf/e2e/sigterm.yaml --report-dir $R/sigterm ;;
    enospc)   run_scen enospc "usbperf-matrix: $EHCI read-buffered: start" act_fill \
                --config /etc/usbperf/e2e/enospc.yaml --report-dir $R/enospc
              rm -f /media/sd/filler /media/sd/filler2 ;;
    erofs)    run_scen erofs "usbperf-matrix: $UAS read-buffered: start" act_erofs \
                --config /etc/usbperf/e2e/erofs.yaml --report-dir $R/erofs
              # what survived on the medium is removed by the next run, once writable again
              umount /media/uas; mount -t ext4 -o rw,errors=remount-ro /dev/$UAS /media/uas
              ls -a /media/uas > $E/erofs-remounted.ls
              run_scen erofs-rerun "" act_none --config /etc/usbperf/e2e/erofs-rerun.yaml --report-dir $R/erofs-rerun ;;
    unplug)   run_scen unplug "usbperf-matrix: $XBOT seq-write: start" act_unplug \
                --config /etc/usbperf/e2e/unplug.yaml --report-dir $R/unplug
              # the host plugs the same stick into EHCI port 2; the next run must clean up
              umount -l /media/xbot 2>/dev/null
              echo "E2E-REPLUG xbot"
              i=0; NEW=
              while [ -z "$NEW" ] && [ $i -lt 60 ]; do sleep 0.5; i=$((i+1)); NEW=$(find_disk "$FIND_xbot"); done
              udevadm settle --timeout=30
              ts "re-plugged stick: ${NEW:-not found}"
              if [ -n "$NEW" ]; then
                mountfs "$NEW" /media/xbot ext4 rw; ls -a /media/xbot > $E/unplug-replugged.ls
                run_scen unplug-replug "" act_none --config /etc/usbperf/e2e/unplug-replug.yaml --report-dir $R/unplug-replug
              fi ;;
    *) ts "E2E-WARN unknown scenario $s" ;;
  esac
done
dmesg > $E/dmesg.txt
sync; umount $R; sync
ts "E2E-DONE"
halt
