# shellcheck shell=bash
# The QEMU guests' shared steps, sourced by scripts/vm-e2e.sh and scripts/bench/vm-bench-schedule.sh (from the
# repository's root): the host packages, QEMU 10, the Debian kernel and guest userland, the
# product binary, one guest of scripts/vm/guests.json (its images, initramfs and QEMU
# arguments), the boot and the output disk read back. The callers set ARCH, KERNEL, QEMU_VER,
# WORK (may be empty), PROG (their name, for messages) and ROOT before vm_init.

step() { printf '\n==> %s\n' "$*"; }

# ARCH, KERNEL and QEMU_VER checked; sets DA, QPKG, QBIN, SUITE, CACHE, KCACHE, Q10.
vm_init() {
    case $ARCH in
        x86_64|amd64) ARCH=x86_64; DA=amd64; QPKG=qemu-system-x86 ;;
        aarch64|arm64) ARCH=aarch64; DA=arm64; QPKG=qemu-system-arm ;;
        # Zynq-7000 class: a Cortex-A15 on QEMU's virt board (Debian has no Cortex-A9 board
        # model with PCI; the ISA, armv7-a hard float, is the same), Debian's armmp kernel.
        armv7|armhf|arm) ARCH=armv7; DA=armhf; QPKG=qemu-system-arm ;;
        *) echo "--arch must be x86_64, aarch64 or armv7" >&2; exit 2 ;;
    esac
    case $QEMU_VER in 7.2|10) ;; *) echo "--qemu must be 7.2 (the system's) or 10 (bookworm-backports)" >&2; exit 2 ;; esac
    case $KERNEL in
        5.10) SUITE=bullseye ;;
        6.1) SUITE=bookworm ;;
        6.12) SUITE=bookworm-backports ;;
        *) echo "--kernel must be 5.10, 6.1 or 6.12" >&2; exit 2 ;;
    esac
    if [ "$DA" = armhf ] && [ "$KERNEL" != 6.1 ]; then
        echo "--arch armv7 runs Debian 12's armmp kernel (6.1) only" >&2; exit 2
    fi
    SHARED_TOOLS=${SHARED_TOOLS:-$ROOT/scripts/vm/tools}
    [ -x "$SHARED_TOOLS/prepare.sh" ] || { echo "missing $SHARED_TOOLS (the QEMU recording tools)" >&2; exit 1; }
    export SHARED_TOOLS
    CACHE=${USBPERF_VM_CACHE:-${XDG_CACHE_HOME:-/var/cache}/usbperf-vm}
    # Each kernel has its own unpacked tree (k/<arch>) beside the default one's.
    if [ "$KERNEL" = 6.1 ]; then KCACHE=$CACHE; else KCACHE=$CACHE/kernel-$KERNEL; fi
    Q10=; if [ "$QEMU_VER" = 10 ]; then Q10=-q10; fi
    QBIN=qemu-system-${ARCH/armv7/arm}
}

vm_install_packages() {
    # libudev-dev and pkg-config: the x86_64 binary is built here (the udev crate links libudev)
    local APT_PACKAGES=("$QPKG" kmod cpio binutils e2fsprogs dosfstools python3 python3-yaml python3-jsonschema gzip xz-utils libudev-dev pkg-config)
    local missing=() p
    for p in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ "$DA" = arm64 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
        dpkg --add-architecture arm64; missing+=(qemu-system-arm)
    fi
    # armhf needs no foreign architecture on this machine: its kernel and userland come through
    # the private apt state below, and the binary from scripts/ci/cross-build.sh --arch armv7.
    if [ "${#missing[@]}" -gt 0 ]; then
        step "installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}"
    fi
}

# A private apt state in $1 for Debian suite $2 (main) and architecture $3: its own sources
# list, lists and cache; nothing of the system's apt configuration changes. Sets APT, the
# options that make apt-get and apt-cache use it.
private_apt() {
    local S=$1
    mkdir -p "$S/lists/partial" "$S/cache/archives/partial"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $2 main" \
        > "$S/sources.list"
    APT=(-o Dir::State::Lists="$S/lists" -o Dir::Cache="$S/cache"
         -o Dir::Etc::SourceList="$S/sources.list" -o Dir::Etc::SourceParts=/nonexistent
         -o APT::Architecture="$3" -o APT::Architectures::="$3" -o Debug::NoLocking=1)
}

# QEMU 10.0 of bookworm-backports, through a private apt state like the kernels below: its
# debs unpacked under $CACHE/qemu-10/root, the libraries it links installed from the system's
# own suite (it is built for bookworm), and a wrapper that runs it in a private mount namespace
# with its module directory bound over the system QEMU's (QEMU loads modules from its
# build-time path and refuses other builds' modules).
prepare_qemu10() {
    local S=$CACHE/apt-bookworm-backports D=$CACHE/qemu-10/debs Q=$CACHE/qemu-10 p deps
    local PKGS="$QPKG qemu-system-common qemu-system-data"
    mkdir -p "$D" "$Q/bin"
    private_apt "$S" bookworm-backports amd64
    if ! ls "$D/${QPKG}_"*.deb >/dev/null 2>&1 || [ ! -x "$Q/root/usr/bin/$QBIN" ]; then
        apt-get "${APT[@]}" update -qq
        for p in $PKGS; do
            ls "$D/${p}_"*.deb >/dev/null 2>&1 || (cd "$D" && apt-get "${APT[@]}" download "$p/bookworm-backports")
        done
        rm -rf "$Q/root"; mkdir -p "$Q/root"
        for p in $PKGS; do dpkg-deb -x "$(ls "$D/${p}_"*.deb | head -1)" "$Q/root"; done
    fi
    # Its run-time libraries (libslirp0, liburing2, libfdt1, ...): bookworm packages, by name.
    deps=$(for p in $PKGS; do dpkg-deb -f "$(ls "$D/${p}_"*.deb | head -1)" Depends; done | tr ',' '\n' \
        | sed 's/|.*//; s/(.*)//; s/:any//; s/ //g' | grep -v '^qemu-\|^$' | sort -u)
    local need=()
    for p in $deps; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p"); done
    if [ "${#need[@]}" -gt 0 ]; then
        step "installing QEMU 10's libraries: ${need[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
    fi
    cat > "$Q/bin/$QBIN" <<EOW
#!/bin/sh
# QEMU 10.0 (bookworm-backports) unpacked in $Q/root; written by scripts/vm/lib.sh.
exec unshare -m -- sh -c 'M=/usr/lib/x86_64-linux-gnu/qemu
if [ -d "\$M" ]; then mount --bind "\$0\$M" "\$M" || exit 1; fi
exec "\$0/usr/bin/$QBIN" -L "\$0/usr/share/qemu" "\$@"' "$Q/root" "\$@"
EOW
    chmod +x "$Q/bin/$QBIN"
    QBIN=$Q/bin/$QBIN
}

# The kernel package of another suite, through a private apt state under $CACHE/apt-$SUITE.
fetch_kernel_deb() {
    local A=$DA S=$CACHE/apt-$SUITE dest=$KCACHE/debs/$DA abi
    ls "$dest"/linux-image-*-"$A"_*.deb >/dev/null 2>&1 && return 0
    mkdir -p "$dest"
    private_apt "$S" "$SUITE" "$A"
    apt-get "${APT[@]}" update -qq
    # linux-image-<arch> of the suite depends on exactly one ABI package: that is its kernel.
    abi=$(apt-cache "${APT[@]}" depends "linux-image-$A" | sed -n "s/.*Depends: \(linux-image-[0-9][^ ]*-$A\)\$/\1/p" | head -1)
    [ -n "$abi" ] || { echo "no kernel package found in $SUITE for $A" >&2; return 1; }
    (cd "$dest" && apt-get "${APT[@]}" download "$abi:$A")
}

# armhf: the kernel (armmp flavour) and the guest userland all come through the private apt
# state (the system has no armhf architecture), unpacked as prepare.sh unpacks the others.
prepare_armhf() {
    local A=armhf S=$CACHE/apt-$SUITE-armhf D=$KCACHE/debs/armhf abi p
    local USERLAND="busybox-static udev libudev1 libc6 libacl1 libblkid1 libcap2 libgcc-s1 libkmod2
                    liblzma5 libpcre2-8-0 libselinux1 libssl3 libzstd1"
    mkdir -p "$D"
    private_apt "$S" "$SUITE" "$A"
    apt-get "${APT[@]}" update -qq
    abi=$(apt-cache "${APT[@]}" depends linux-image-armmp | sed -n 's/.*Depends: \(linux-image-[0-9][^ ]*-armmp\)$/\1/p' | head -1)
    [ -n "$abi" ] || { echo "no armmp kernel in $SUITE" >&2; return 1; }
    for p in "$abi" $USERLAND; do
        ls "$D/${p}_"*_$A.deb >/dev/null 2>&1 || (cd "$D" && apt-get "${APT[@]}" download "$p:$A")
    done
    rm -rf "$KCACHE/k/$A" "$KCACHE/k/$A-root"; mkdir -p "$KCACHE/k/$A" "$KCACHE/k/$A-root"
    dpkg-deb -x "$(ls "$D/${abi}_"*_$A.deb | head -1)" "$KCACHE/k/$A"
    for p in $USERLAND; do dpkg-deb -x "$(ls "$D/${p}_"*_$A.deb | head -1)" "$KCACHE/k/$A-root"; done
}

# QEMU (10 when asked), the kernel and the guest userland; sets KV, the kernel's release.
vm_prepare() {
    vm_install_packages
    if [ "$QEMU_VER" = 10 ]; then prepare_qemu10; fi
    step "$($QBIN --version | head -1)"
    step "kernel $KERNEL (Debian $SUITE) and guest userland (Debian 12 $DA packages, cached in $KCACHE)"
    mkdir -p "$KCACHE"
    if [ "$DA" = armhf ]; then
        # Its own tree beside the other architectures' (the default kernel of each is in $CACHE).
        [ -d "$KCACHE/k/$DA/lib/modules" ] && [ -x "$KCACHE/k/$DA-root/bin/busybox" ] || prepare_armhf
    fi
    if [ ! -d "$KCACHE/k/$DA/lib/modules" ] || [ ! -x "$KCACHE/k/$DA-root/bin/busybox" ]; then
        local PREP_KVER=
        if [ "$KERNEL" != 6.1 ]; then
            fetch_kernel_deb
            PREP_KVER=$(ls "$KCACHE/debs/$DA"/linux-image-*-"$DA"_*.deb | head -1 | sed "s#.*/linux-image-\(.*\)-$DA\_.*#\1#")
        fi
        W=$KCACHE KVER=${PREP_KVER:-${KVER:-6.1.0-57}} "$SHARED_TOOLS/prepare.sh" "$DA"
    fi
    KV=$(ls "$KCACHE/k/$DA/lib/modules"); echo "kernel $KV"
}

# usbperf-matrix for the guest's architecture; sets BIN.
vm_build() {
    local T
    step "usbperf-matrix for $ARCH"
    if [ "$ARCH" = x86_64 ]; then
        command -v cargo >/dev/null || { echo "cargo is missing: install Rust (rustup) first" >&2; exit 1; }
        cargo build --release --locked --quiet
        BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/usbperf-matrix
    elif [ "$ARCH" = aarch64 ]; then
        T=${CARGO_TARGET_DIR:-$ROOT/target/cross}
        BIN=$T/aarch64-unknown-linux-gnu/release/usbperf-matrix
        CARGO_TARGET_DIR=$T CROSS_BUILD_DEFAULT_ONLY=1 scripts/ci/cross-build.sh   # no-op when up to date
    else
        T=${CARGO_TARGET_DIR:-$ROOT/target/cross}
        BIN=$T/armv7-unknown-linux-gnueabihf/release/usbperf-matrix
        CARGO_TARGET_DIR=$T CROSS_BUILD_DEFAULT_ONLY=1 scripts/ci/cross-build.sh --arch armv7
    fi
    ls -l "$BIN"
}

# vm_guest NAME [--var NAME=VALUE ...]: guest NAME of scripts/vm/guests.json, resolved for this
# kernel into $WORK/guest.json (the description check.py and guest.py read), its disk images in
# $I, its initramfs $WORK/initrd.cpio.gz and its QEMU arguments in GUEST_ARGS; the guest's
# values (guests.py shell: CONSOLE, EXPECT, GUEST_SCENARIOS, GUEST_CLASSES, ...) set here.
vm_guest() {
    local name=$1; shift
    local G=scripts/vm/guests.py
    rm -rf "$WORK"; mkdir -p "$WORK/img"
    I=$WORK/img
    python3 $G resolve "$name" --arch "$ARCH" --kmod-dir "$KCACHE/k/$DA/lib/modules/$KV" --out "$WORK/guest.json"
    eval "$(python3 $G shell --guest "$WORK/guest.json")"
    [ -z "$GUEST_DROPPED" ] || echo "left out (no driver in kernel $KV): $GUEST_DROPPED"
    python3 $G init-env --guest "$WORK/guest.json" --out "$WORK/guest.sh"
    step "initramfs"
    W=$KCACHE EXTRA_MODS=$GUEST_MODULES scripts/vm/mkinitrd.sh "$DA" "$BIN" "$WORK/guest.sh" "$WORK/initrd.cpio.gz"
    step "disk images in $I (guest $name)"
    python3 $G images --guest "$WORK/guest.json" --dir "$I"
    mapfile -t GUEST_ARGS < <(python3 $G qemu-args --guest "$WORK/guest.json" --dir "$I" \
        --dtb-dir "$KCACHE/k/$DA/usr/lib/linux-image-$KV" "$@")
    [ "${#GUEST_ARGS[@]}" -gt 0 ] || { echo "no QEMU arguments for guest $name" >&2; exit 1; }
}

# vm_boot TIMEOUT APPEND...: boots the guest (scripts/vm/guest.py: console, QMP, unplug and
# re-plug), sets QRC, T0 and T1; $WORK/console.txt is the console without escape sequences.
vm_boot() {
    local timeout=$1; shift
    ARGS=("$QBIN" -accel tcg,thread=multi -smp 2 -m 1024 -nographic -no-reboot
          -kernel "$KCACHE/k/$DA/boot/vmlinuz-$KV" -initrd "$WORK/initrd.cpio.gz" -append "$*"
          "${GUEST_ARGS[@]}")
    printf '%q ' "${ARGS[@]}" | sed "s#$I/##g; s#$KCACHE/k/$DA/boot/##; s#$KCACHE/k/$DA/usr/lib/linux-image-$KV/##; s#$CACHE/qemu-10/bin/##; s#$WORK/##" > "$WORK/qemu-cmdline.txt"; echo >> "$WORK/qemu-cmdline.txt"
    T0=$(date +%s)
    set +e
    python3 scripts/vm/guest.py --console "$WORK/console.raw" --qmp "$WORK/qmp.sock" \
        --events "$WORK/host-events.txt" --guest "$WORK/guest.json" --img-dir "$I" --timeout "$timeout" -- "${ARGS[@]}"
    QRC=$?
    set -e
    T1=$(date +%s)
    sed -e 's/\x1b\[[0-9;?]*[A-Za-z]//g; s/\x1bc//g; s/\r//g' "$WORK/console.raw" > "$WORK/console.txt"
    echo "BOOT WALL TIME $ARCH kernel $KV: $((T1 - T0)) s (QEMU exit $QRC)"
}

# vm_boot_once_more_if_qemu_crashed TIMEOUT APPEND...: after vm_boot, when QEMU itself died of a
# signal after the host hot-unplugged a disk over QMP (QEMU 7.2 has died of SIGSEGV in a usb-bot
# device_del with writes in flight, and QEMU 10 too; the guest cannot cause that), boots again
# on fresh disk images, up to three times. The last crashed boot's console and host events are
# kept beside the new ones, and each crash is printed; a fourth crash, or any other failure, is
# left for vm_read_out to fail on.
vm_boot_once_more_if_qemu_crashed() {
    # QEMU 10 under TCG died so in 3 of 4 boots of one day, and the 4th passed.
    local boot
    for boot in 2 3 4; do
        [ "$QRC" -gt 128 ] && [ "$QRC" -lt 160 ] || return 0
        grep -q 'QMP device_del' "$WORK/host-events.txt" 2>/dev/null || return 0
        echo "QEMU crashed (signal $((QRC - 128))) after the host's QMP device_del: a QEMU fault, not" \
             "the guest's; its console is kept in $WORK/crashed-console.txt. Booting again on fresh" \
             "images (boot $boot of at most 4)."
        mv "$WORK/console.txt" "$WORK/crashed-console.txt"
        mv "$WORK/host-events.txt" "$WORK/crashed-host-events.txt"
        rm -f "$WORK/console.raw"
        python3 scripts/vm/guests.py images --guest "$WORK/guest.json" --dir "$I"
        vm_boot "$@"
    done
}

fail() {
    echo
    echo "==================== guest console ($WORK/console.txt) ===================="
    cat "$WORK/console.txt"
    echo "==================== end of guest console ===================="
    echo "$PROG: FAILED: $*" >&2
    exit 1
}

# The boot's outcome and the output disk read back into $WORK/out.
vm_read_out() {
    [ "$QRC" = 0 ] || fail "QEMU exited $QRC"
    grep -q 'E2E-DONE' "$WORK/console.txt" || fail "the guest did not reach E2E-DONE"
    step "reading the output disk back"
    mkdir -p "$WORK/out"
    debugfs -R "rdump / $WORK/out" "$I/out.img" 2>/dev/null || true
    [ -d "$WORK/out/e2e" ] || fail "nothing readable on the output disk"
    ls -R "$WORK/out" | head -40
}
