#!/bin/sh
# SPDX-License-Identifier: MIT OR Apache-2.0
#
# EXAMPLE: a Toradex Easy Installer wrapup_script for an image with usbperf. Tezi runs the
# wrapup_script after a successful installation, in its own environment (a RAM root
# filesystem), with the installation media mounted; this script lies in the image directory
# on that media, next to image.json ("wrapup_script": "wrapup.sh"). It does not rely on
# Tezi's arguments: it finds the installed rootfs by its partition label and the media by
# its own path.
#
#   USBPERF_TEZI_MODE=run      (default) run the factory matrix now, from the installed
#                              rootfs (chroot), and copy the report and the result line to
#                              the media: usbperf/<serial-or-unit>/ next to this script
#   USBPERF_TEZI_MODE=trigger  only make sure the first boot runs it (no run-once stamp),
#                              the report then stays on the unit (/var/lib/usbperf/reports)
#   USBPERF_TEZI_ROOTFS_LABEL  the rootfs partition's label (default RFS, as Toradex's
#                              image.json names it)
#
# The run tests the unit's storage as the boot service would (/etc/usbperf/usbperf.yaml of
# the installed image); the eMMC holds the mounted rootfs, so it is tested through scratch
# files, never raw. The installation media is not mounted inside the chroot: usbperf sees it
# as a disk without a mounted filesystem and gives it read-only tests only. A failed verdict
# does not fail the installation (Tezi would show an error for the image): the result line
# and the report on the media say PASS or FAIL for the station.
set -u

MODE=${USBPERF_TEZI_MODE:-run}
LABEL=${USBPERF_TEZI_ROOTFS_LABEL:-RFS}
MEDIA=$(cd "$(dirname "$0")" && pwd)
ROOT=/tmp/usbperf-rootfs

log() { echo "usbperf wrapup: $*"; }

dev=$(blkid -L "$LABEL" 2>/dev/null || findfs "LABEL=$LABEL" 2>/dev/null)
if [ -z "$dev" ]; then
	log "no partition labelled $LABEL: set USBPERF_TEZI_ROOTFS_LABEL"
	exit 1
fi
mkdir -p "$ROOT"
mount "$dev" "$ROOT" || { log "cannot mount $dev"; exit 1; }
cleanup() {
	for m in run/udev dev sys proc; do
		umount "$ROOT/$m" 2>/dev/null
	done
	umount "$ROOT"
}
trap cleanup EXIT

if [ ! -x "$ROOT/usr/bin/usbperf-matrix" ]; then
	log "the installed image has no usbperf-matrix"
	exit 1
fi

if [ "$MODE" = trigger ]; then
	rm -f "$ROOT/var/lib/usbperf/done"
	log "the first boot of $dev runs the factory matrix"
	exit 0
fi

# The installed userland's view of this machine: its devices, sysfs, kernel log and, when
# Tezi runs udevd, the udev database (else usbperf's libudev build falls back to sysfs).
for m in proc sys dev; do
	mount --bind "/$m" "$ROOT/$m"
done
if [ -d /run/udev ]; then
	mkdir -p "$ROOT/run/udev"
	mount --bind /run/udev "$ROOT/run/udev"
fi

out=$ROOT/tmp/usbperf-wrapup.log
chroot "$ROOT" /usr/bin/usbperf-matrix run --config /etc/usbperf/usbperf.yaml >"$out" 2>&1
rc=$?
result=$(grep '^USBPERF-RESULT ' "$out" | tail -n 1)
log "exit $rc: ${result:-no result line}"

# The report named by the result line, copied next to this script on the media.
report=$(echo "$result" | sed -n 's/.* report=\([^ ]*\).*/\1/p')
unit=$(echo "$result" | sed -n 's/.* unit=\([^ ]*\).*/\1/p')
dest=$MEDIA/usbperf/${unit:-unknown}
mkdir -p "$dest"
cp "$out" "$dest/run.log"
if [ -n "$report" ] && [ -f "$ROOT$report" ]; then
	cp "$ROOT$report" "$dest/"
	log "report copied to $dest/$(basename "$report")"
else
	log "no report to copy (see $dest/run.log)"
fi
rm -f "$out"
# A run that reached a verdict is the factory run: with RUN_ONCE=1 (the image's
# /etc/default/usbperf) the first boot does not repeat it, as usbperf-boot's stamp says.
if [ "$rc" -le 1 ] && grep -q '^RUN_ONCE=1' "$ROOT/etc/default/usbperf" 2>/dev/null; then
	mkdir -p "$ROOT/var/lib/usbperf"
	: >"$ROOT/var/lib/usbperf/done"
fi
sync
exit 0
