# usbperf built from this very checkout: the layer and the cargo package share
# the repository root, two levels up, so nothing of the project is downloaded
# (only its crates). The default recipe; usbperf_git.bb takes the upstream
# repository at a fixed SRCREV instead (docs/yocto.md, "Which recipe").
# FILESEXTRAPATHS is therefore needed in this .bb (oelint expects it in
# bbappends only).
# nooelint: oelint.vars.fileextrapaths,oelint.vars.outofcontext
FILESEXTRAPATHS:prepend := "${THISDIR}/../..:"

# subdir=${BP} puts everything into the default S of both releases (the
# ${BP} directory of the unpack area), so S is not set here. The recorded
# trees are those of USBPERF_PTEST_TREES (usbperf.inc).
SRC_URI = "file://Cargo.toml;subdir=${BP} \
           file://Cargo.lock;subdir=${BP} \
           file://src;subdir=${BP} \
           file://usbperf-report;subdir=${BP} \
           file://usbperf-fleet;subdir=${BP} \
           file://profiles;subdir=${BP} \
           file://LICENSE-APACHE;subdir=${BP} \
           file://LICENSE-MIT;subdir=${BP} \
           file://doc/man;subdir=${BP} \
           file://completions;subdir=${BP} \
           file://tests/fixtures/qemu/arm64-mixed.umockdev;subdir=${BP} \
           file://tests/fixtures/qemu/armv7-emmc-board.umockdev;subdir=${BP} \
"

require usbperf.inc

# Every crate of Cargo.lock; regenerate with scripts/maint/update-crates-inc.py
# (same output as "bitbake -c update_crates usbperf"). One list for both
# recipes: usbperf_git.bb's SRCREV has this checkout's Cargo.lock
# (scripts/ci/check-yocto-layer.sh git-recipe). Required here, in the .bb, where ${BPN}
# is this recipe's name (in usbperf.inc it would not be).
require ${BPN}-crates.inc
