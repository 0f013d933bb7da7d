#!/bin/bash
# mkinitrd.sh - the QEMU guests' initramfs (the only builder: tools/mkinitrd.sh calls this one):
# busybox, systemd-udevd with its rules, the storage modules in dependency order, and either
#   the vm-e2e guest: usbperf-matrix with its libraries, its default config, the scenarios'
#     configs, the guest's description (guests.py init-env) and init.sh, plus the ext4/vfat/
#     virtio modules and sysdump.sh (for --record);  or
#   --record: the sysfs recording guest of tools/ (tools/init.sh and sysdump.sh, the storage
#     modules only: the recordings in tests/fixtures/qemu show exactly those).
#   usage: mkinitrd.sh amd64|arm64|armhf BINARY GUEST_ENV OUT.cpio.gz
#          mkinitrd.sh --record amd64|arm64 OUT.cpio.gz
#   env:   W   cache dir holding $W/k/<arch> (kernel) and $W/k/<arch>-root (userland), made by
#              scripts/vm/tools/prepare.sh
#          EXTRA_MODS  more modules for the guest's extra hardware (NVMe, UFS, the eMMC host)
#          EXTRA_BINS  more programs of the userland ($W/k/<arch>-root paths, e.g. /sbin/dmsetup),
#                      copied to /bin with their libraries (scripts/ci/vm-power-cut.sh's device-mapper)
#          EXTRA_TREE  a directory copied over the root last: a guest's own /init, scripts and
#                      settings (scripts/ci/vm-power-cut.sh's boot service and /etc/default/usbperf)
#          SHARED_TOOLS  where init.sh (--record) and sysdump.sh are (default: tools/ beside this)
# Needs on the host: kmod (depmod, modprobe), binutils (readelf), cpio, gzip, xz-utils.
set -euo pipefail
RECORD=; [ "${1:-}" = --record ] && { RECORD=1; shift; }
if [ -n "$RECORD" ]; then A=$1; BIN=; GUEST_ENV=; OUTF=$2
else A=$1; BIN=$2; GUEST_ENV=$3; OUTF=$4; fi
W=${W:?W must name the cache dir}
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED_TOOLS=${SHARED_TOOLS:-$HERE/tools}
K=$W/k/$A; SYSROOT=$W/k/$A-root; V=$(ls "$K/lib/modules")
R=$(mktemp -d "${TMPDIR:-/tmp}/usbperf-vm-root.XXXXXX")
trap 'rm -rf "$R"' EXIT
case $A in
  amd64) MT=x86_64-linux-gnu;  LDSO=/lib64/ld-linux-x86-64.so.2; HCD="ehci-pci ohci-pci uhci-hcd xhci-pci" ;;
  arm64) MT=aarch64-linux-gnu; LDSO=/lib/ld-linux-aarch64.so.1;  HCD="ehci-pci ohci-pci xhci-pci" ;;
  armhf) MT=arm-linux-gnueabihf; LDSO=/lib/ld-linux-armhf.so.3;  HCD="ehci-pci ohci-pci xhci-pci" ;;
  *) echo "arch must be amd64, arm64 or armhf" >&2; exit 2 ;;
esac
mkdir -p "$R"/{bin,sbin,proc,sys,dev,run,tmp,etc/udev,lib/udev,lib/systemd,lib/modules/$V}
[ -n "$RECORD" ] || mkdir -p "$R"/{media,etc/usbperf,var/lib/usbperf/reports}

cp "$SYSROOT/bin/busybox" "$R/bin/busybox"; ln -s busybox "$R/bin/sh"

[ -e "$K/lib/modules/$V/modules.dep.bin" ] || depmod -b "$K" "$V"
MODS="sd_mod crc64_rocksoft_generic usb-storage uas $HCD ahci mmc_block sdhci-pci"
[ -n "$RECORD" ] || MODS="pci-host-generic $MODS virtio_pci virtio_blk
      crc32c_generic ext4 vfat nls_cp437 nls_ascii nls_iso8859-1 nls_utf8 ${EXTRA_MODS:-}"
for m in $MODS; do modprobe -d "$K" -S "$V" --show-depends "$m" 2>/dev/null || true; done \
  | awk '$1=="insmod"{print $2}' | awk '!s[$0]++' > "$R/modlist.host"
: > "$R/modlist"
# Debian's 6.12 ships modules xz-compressed; busybox insmod loads plain .ko files only, so
# compressed ones are unpacked on the way in.
while read -r p; do
  rel=${p#*/lib/modules/$V/}; mkdir -p "$R/lib/modules/$V/$(dirname "$rel")"
  case $rel in
    *.ko.xz) rel=${rel%.xz}; xz -dc "$p" > "$R/lib/modules/$V/$rel" ;;
    *.ko.zst) rel=${rel%.zst}; zstd -qdc "$p" > "$R/lib/modules/$V/$rel" ;;
    *.ko.gz) rel=${rel%.gz}; gzip -dc "$p" > "$R/lib/modules/$V/$rel" ;;
    *) cp "$p" "$R/lib/modules/$V/$rel" ;;
  esac
  echo "/lib/modules/$V/$rel" >> "$R/modlist"
done < "$R/modlist.host"
rm "$R/modlist.host"

sysroot_file() { local f=$1 t n=0
  while [ -L "$SYSROOT$f" ] && [ $n -lt 20 ]; do
    t=$(readlink "$SYSROOT$f"); case $t in /*) f=$t ;; *) f=$(dirname "$f")/$t ;; esac; n=$((n+1))
  done
  echo "$SYSROOT$f"; }
declare -A SEEN
addlib() { local n=$1 d
  [ -n "${SEEN[$n]:-}" ] && return 0; SEEN[$n]=1
  for d in /lib/$MT /usr/lib/$MT; do
    if [ -e "$SYSROOT$d/$n" ]; then mkdir -p "$R$d"; cp "$(sysroot_file "$d/$n")" "$R$d/$n"; closure "$R$d/$n"; return 0; fi
  done
  case $n in ld-linux*) return 0 ;; esac   # the loader is copied below
  echo "missing lib $n" >&2; return 1; }
closure() { local n; for n in $(readelf -d "$1" 2>/dev/null | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p'); do addlib "$n"; done; }

cp "$(sysroot_file /bin/udevadm)" "$R/bin/udevadm"; closure "$R/bin/udevadm"
ln -s /bin/udevadm "$R/lib/systemd/systemd-udevd"
mkdir -p "$R$(dirname $LDSO)"; cp "$(sysroot_file $LDSO)" "$R$LDSO"
cp -r "$SYSROOT/lib/udev/rules.d" "$R/lib/udev/"; cp "$SYSROOT"/lib/udev/{ata_id,scsi_id} "$R/lib/udev/"
closure "$R/lib/udev/ata_id"; closure "$R/lib/udev/scsi_id"
echo 'root:x:0:0:root:/:/bin/sh' > "$R/etc/passwd"; printf 'root:x:0:\ndisk:x:6:\n' > "$R/etc/group"

if [ -n "$RECORD" ]; then
  cp "$SHARED_TOOLS/init.sh" "$R/init"; chmod +x "$R/init"
else
  # The product, linked against the guest architecture's Debian 12 libraries (libudev1, libc6).
  cp "$BIN" "$R/bin/usbperf-matrix"; closure "$R/bin/usbperf-matrix"
  # Its default config, where the boot service finds it, the fault scenarios' configs and the
  # guest's description (which disks it has, how to find and mount them).
  cp "$HERE/usbperf.yaml" "$R/etc/usbperf/usbperf.yaml"
  mkdir -p "$R/etc/usbperf/e2e"; cp "$HERE"/scenarios/*.yaml "$R/etc/usbperf/e2e/"
  cp "$GUEST_ENV" "$R/etc/usbperf/e2e/guest.sh"
  cp "$HERE/init.sh" "$R/init"; chmod +x "$R/init"
fi
cp "$SHARED_TOOLS/sysdump.sh" "$R/bin/sysdump"; chmod +x "$R/bin/sysdump"
for b in ${EXTRA_BINS:-}; do
  cp "$(sysroot_file "$b")" "$R/bin/${b##*/}"; closure "$R/bin/${b##*/}"
done
[ -z "${EXTRA_TREE:-}" ] || cp -a "$EXTRA_TREE/." "$R/"
(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) > "$OUTF"
ls -l "$OUTF"
