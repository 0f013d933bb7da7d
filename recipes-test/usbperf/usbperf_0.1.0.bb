SUMMARY = "Storage inventory, USB link check and I/O test matrix for embedded Linux boards"
DESCRIPTION = "usbperf-matrix runs the factory storage test matrix of a board \
               profile at boot (systemd unit or SysV init script) and leaves \
               its YAML report in /var/lib/usbperf/reports."
HOMEPAGE = "https://github.com/usbperf/meta-usbperf"
CVE_PRODUCT = "usbperf"
BUGTRACKER = "https://github.com/usbperf/meta-usbperf/issues"
SECTION = "console/utils"
LICENSE = "MIT | Apache-2.0"
LIC_FILES_CHKSUM = "file://LICENSE-APACHE;md5=3b83ef96387f14655fc854ddc3c6bd57 \
                    file://LICENSE-MIT;md5=91a148f8d1e75551785f49213cbaf2c2"

# The layer and the cargo package share the repository root, two levels up:
# the recipe builds this very checkout, no download of the project itself.
# FILESEXTRAPATHS is therefore needed in this .bb (oelint expects it in
# bbappends only).
# nooelint: oelint.vars.fileextrapaths,oelint.vars.outofcontext
FILESEXTRAPATHS:prepend := "${THISDIR}/../..:"

# subdir=${BP} puts everything into the default S of both releases (the
# ${BP} directory of the unpack area), so S is not set here.
SRC_URI = "file://Cargo.toml;subdir=${BP} \
           file://Cargo.lock;subdir=${BP} \
           file://src;subdir=${BP} \
           file://profiles;subdir=${BP} \
           file://LICENSE-APACHE;subdir=${BP} \
           file://LICENSE-MIT;subdir=${BP} \
           file://usbperf-boot;subdir=${BP} \
           file://usbperf-matrix.service;subdir=${BP} \
           file://usbperf-upload.service;subdir=${BP} \
           file://usbperf-matrix.init;subdir=${BP} \
           file://usbperf.default;subdir=${BP} \
           file://usbperf.yaml;subdir=${BP} \
"

inherit cargo cargo-update-recipe-crates pkgconfig systemd update-rc.d ptest-cargo

# Every crate of Cargo.lock; regenerate with scripts/update-crates-inc
# (same output as "bitbake -c update_crates usbperf").
require ${BPN}-crates.inc

# Cargo features. udev: libudev enumeration (provided by systemd or eudev);
# uring: io_uring engine; upload: `usbperf-matrix upload` and the config's
# upload: section (plain http://); upload-tls: https:// too (rustls with ring,
# built by the cross gcc; not default: most lines terminate TLS at a proxy).
# Both on every architecture: io_uring's ring entries have the same layout on
# 32-bit ARM (proven on an armv7 guest by scripts/vm-e2e --arch armv7).
PACKAGECONFIG ??= "udev uring upload"
PACKAGECONFIG[udev] = ",,udev"
PACKAGECONFIG[uring] = ""
PACKAGECONFIG[upload] = ""
PACKAGECONFIG[upload-tls] = ""

# scarthgap's cargo class does not pass PACKAGECONFIG_CONFARGS to cargo
# (wrynose's does), so the features are given in CARGO_BUILD_FLAGS, which
# both releases use for do_compile and for the ptest build.
CARGO_FEATURES = "${@bb.utils.filter('PACKAGECONFIG', 'udev uring upload upload-tls', d)}"
CARGO_BUILD_FLAGS += "--no-default-features --features '${CARGO_FEATURES}'"

# Cargo.toml's release profile strips the binary; here oe-core strips it and
# keeps the debug info in ${PN}-dbg ("already-stripped" is a QA error).
export CARGO_PROFILE_RELEASE_STRIP = "false"

# Board profile written into /etc/usbperf/usbperf.yaml.
USBPERF_PROFILE ?= "quick"
# 1: run the matrix once per unit (stamp /var/lib/usbperf/done); 0: every boot.
USBPERF_RUN_ONCE ?= "1"
# How long usbperf-matrix waits for the devices the configuration marks
# required (wait_devices: in /etc/usbperf/usbperf.yaml).
USBPERF_WAIT_DEVICES ?= "120s"
# serial: one device after another; auto: devices on independent buses at
# the same time (schedule: in /etc/usbperf/usbperf.yaml; docs/guide.md, "Schedule").
USBPERF_SCHEDULE ?= "serial"

SYSTEMD_SERVICE:${PN} = "usbperf-matrix.service usbperf-upload.service"
INITSCRIPT_NAME = "usbperf-matrix"
INITSCRIPT_PARAMS = "start 99 2 3 4 5 ."

do_install:append() {
    sed_paths="-e s,@BINDIR@,${bindir},g \
               -e s,@LIBEXECDIR@,${libexecdir},g \
               -e s,@SYSCONFDIR@,${sysconfdir},g \
               -e s,@LOCALSTATEDIR@,${localstatedir},g"

    install -d ${D}${libexecdir}/usbperf
    sed ${sed_paths} ${S}/usbperf-boot > ${D}${libexecdir}/usbperf/usbperf-boot
    chmod 0755 ${D}${libexecdir}/usbperf/usbperf-boot

    install -d ${D}${systemd_system_unitdir}
    sed ${sed_paths} ${S}/usbperf-matrix.service > ${D}${systemd_system_unitdir}/usbperf-matrix.service
    chmod 0644 ${D}${systemd_system_unitdir}/usbperf-matrix.service
    # Drains the upload spool at each boot (issue 15).
    sed ${sed_paths} ${S}/usbperf-upload.service > ${D}${systemd_system_unitdir}/usbperf-upload.service
    chmod 0644 ${D}${systemd_system_unitdir}/usbperf-upload.service

    install -d ${D}${sysconfdir}/init.d
    sed ${sed_paths} ${S}/usbperf-matrix.init > ${D}${sysconfdir}/init.d/usbperf-matrix
    chmod 0755 ${D}${sysconfdir}/init.d/usbperf-matrix

    install -d ${D}${sysconfdir}/default
    sed -e 's,^RUN_ONCE=.*,RUN_ONCE=${USBPERF_RUN_ONCE},' \
        ${S}/usbperf.default > ${D}${sysconfdir}/default/usbperf
    chmod 0644 ${D}${sysconfdir}/default/usbperf

    install -d ${D}${sysconfdir}/usbperf
    sed -e 's,^profile:.*,profile: ${USBPERF_PROFILE},' \
        -e 's,^wait_devices:.*,wait_devices: ${USBPERF_WAIT_DEVICES},' \
        -e 's,^schedule:.*,schedule: ${USBPERF_SCHEDULE},' \
        ${S}/usbperf.yaml > ${D}${sysconfdir}/usbperf/usbperf.yaml
    chmod 0644 ${D}${sysconfdir}/usbperf/usbperf.yaml

    # Example board profiles, found by name (--profile, profile:) in
    # /usr/share/usbperf/profiles; quick and full are built into the binary.
    install -d ${D}${datadir}/usbperf/profiles
    install -m 0644 ${S}/profiles/boards/*.yaml ${D}${datadir}/usbperf/profiles/

    install -d ${D}${localstatedir}/lib/usbperf/reports
    # Test files for devices that hold the rootfs (the on-module eMMC in the
    # example board profiles: `target: {dir: /var/lib/usbperf/scratch}`).
    install -d ${D}${localstatedir}/lib/usbperf/scratch
    # Reports not yet acknowledged by the collector (upload: in usbperf.yaml).
    install -d ${D}${localstatedir}/lib/usbperf/outbox
}

CONFFILES:${PN} = "${sysconfdir}/usbperf/usbperf.yaml ${sysconfdir}/default/usbperf"
