#!/usr/bin/env bash
# Cross-build usbperf-matrix with Debian 12's own Rust toolchain, then run the result under
# qemu-user: `--version` and `list`. Builds twice: default features (udev, io_uring, https upload) as the
# recipe does (release, LTO; prints the stripped size), and --no-default-features (a udev-less
# image) as a dev build, which proves that it compiles and runs on the target.
#   aarch64 (default): rustc-web/cargo-web + libstd-rust-web-dev:arm64 + gcc-aarch64-linux-gnu +
#     libudev-dev:arm64, installed with apt (arm64 multiarch).
#   armv7 (Zynq-7000, Cortex-A9, hard float): the std must match the host rustc exactly, and
#     bookworm-security's armhf index does not download here, so the 1.85 set of bookworm main
#     (rustc-web, cargo-web, libstd-rust-web-dev for amd64 and armhf, libllvm19) and
#     libudev-dev:armhf are fetched through a private apt state and unpacked into a private
#     toolchain root; the system's apt sources, architectures and installed Rust are untouched.
#     gcc-arm-linux-gnueabihf links; qemu-arm-static runs the result.
#
#   --ptest DIR: instead, only the test binaries the way oe-core's ptest-cargo builds them
#     (`cargo build --tests --message-format json`, the executables of its messages for this
#     package), listed in DIR/test-binaries, and the usbperf-matrix built with them, named in
#     DIR/usbperf-matrix (scripts/ci/check-ptest.py runs them under qemu-user).
#
#   --no-unit-tests: skip the library unit tests under qemu-user (scripts/test.sh passes it for
#     aarch64, whose every test binary check-yocto-layer's ptest-aarch64 has already run under qemu).
#
#   usage: scripts/ci/cross-build.sh [--arch aarch64|armv7] [--ptest DIR] [--no-unit-tests]
#          (as root on Debian 12 amd64)
#   env:   CARGO_TARGET_DIR   (default: target/cross), the outputs go under it
#          CROSS_BUILD_DEFAULT_ONLY=1  only the default-feature build (scripts/vm-e2e.sh --arch ...)
#          USBPERF_CROSS_CACHE  the armv7 private toolchain (default /var/cache/usbperf-cross)
#   out:   $CARGO_TARGET_DIR/<target>/release/usbperf-matrix (default features)
#          $CARGO_TARGET_DIR/test/<target>/debug/usbperf-matrix (no default features)
set -euo pipefail
cd "$(dirname "$0")/../.."
step() { printf '\n==> %s\n' "$*"; }

ARCH=aarch64
PTEST_OUT=
UNIT_TESTS=1
while [ $# -gt 0 ]; do
    case $1 in
        --arch) ARCH=$2; shift 2 ;;
        --ptest) PTEST_OUT=$2; shift 2 ;;
        --no-unit-tests) UNIT_TESTS=0; shift ;;
        -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
case $ARCH in
    aarch64|arm64)
        ARCH=aarch64; TARGET=aarch64-unknown-linux-gnu; DA=arm64; GNU=aarch64-linux-gnu
        QEMU_USER=qemu-aarch64-static; ELF_MACHINE=AArch64
        APT_PACKAGES=(rustc-web cargo-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu
                      libc6-dev-arm64-cross libudev-dev:arm64 pkg-config qemu-user-static binutils-aarch64-linux-gnu) ;;
    armv7|armhf|arm)
        ARCH=armv7; TARGET=armv7-unknown-linux-gnueabihf; DA=armhf; GNU=arm-linux-gnueabihf
        QEMU_USER=qemu-arm-static; ELF_MACHINE=ARM
        APT_PACKAGES=(gcc-arm-linux-gnueabihf libc6-dev-armhf-cross binutils-arm-linux-gnueabihf
                      pkg-config qemu-user-static dpkg-dev) ;;
    *) echo "--arch must be aarch64 or armv7" >&2; exit 2 ;;
esac
missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    step "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if [ "$DA" = arm64 ]; then
        dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

UPPER=$(echo "$TARGET" | tr 'a-z-' 'A-Z_')
export "CARGO_TARGET_${UPPER}_LINKER=$GNU-gcc"
export "CC_${TARGET//-/_}=$GNU-gcc"
export PKG_CONFIG_ALLOW_CROSS=1
QEMU_LIBS=/usr/lib/$GNU:/lib/$GNU
if [ "$ARCH" = aarch64 ]; then
    # Debian's cargo/rustc, never rustup's (which comes first on PATH and has no arm64 std here).
    CARGO=/usr/bin/cargo
    export RUSTC=/usr/bin/rustc
    export PKG_CONFIG_LIBDIR=/usr/lib/$GNU/pkgconfig:/usr/share/pkgconfig
    export PKG_CONFIG_SYSROOT_DIR=/
    QEMU_ARGS=()
else
    # The private toolchain: Debian 12's rustc-web 1.85 set, the same version for the host and
    # for armhf (a std of another version is refused by rustc: E0514).
    RUSTV=1.85.0+dfsg3-1~deb12u3
    PC=${USBPERF_CROSS_CACHE:-/var/cache/usbperf-cross}/$DA
    TC=$PC/toolchain; SYS=$PC/sysroot; S=$PC/apt; D=$PC/debs
    if [ ! -x "$TC/usr/bin/rustc" ] || [ ! -d "$TC/usr/lib/rustlib/$TARGET" ] || [ ! -e "$SYS/usr/lib/$GNU/pkgconfig/libudev.pc" ] \
        || ! ls "$TC"/lib/x86_64-linux-gnu/libpcre.so.3* >/dev/null 2>&1; then
        step "private toolchain: Debian 12 rustc-web $RUSTV for amd64 and $DA, libudev-dev:$DA (in $PC)"
        mkdir -p "$S/lists/partial" "$S/cache/archives/partial" "$D"
        echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main" > "$S/sources.list"
        APT=(-o Dir::State::Lists="$S/lists" -o Dir::Cache="$S/cache" -o Dir::Etc::SourceList="$S/sources.list"
             -o Dir::Etc::SourceParts=/nonexistent -o APT::Architecture=amd64
             -o APT::Architectures::=amd64 -o APT::Architectures::=$DA -o Debug::NoLocking=1)
        apt-get "${APT[@]}" update -qq
        (cd "$D" && apt-get "${APT[@]}" download \
            "rustc-web=$RUSTV" "cargo-web=$RUSTV" "libstd-rust-web-dev:amd64=$RUSTV" "libstd-rust-web-1.85:amd64=$RUSTV" \
            libllvm19:amd64 libpcre3:amd64 libhttp-parser2.9:amd64 \
            "libstd-rust-web-dev:$DA=$RUSTV" "libudev-dev:$DA" "libudev1:$DA")
        rm -rf "$TC" "$SYS"; mkdir -p "$TC" "$SYS"
        # cargo-web 1.85 links libpcre3 and libhttp-parser, which 1.96's does not.
        for f in "$D"/rustc-web_*.deb "$D"/cargo-web_*.deb "$D"/libstd-rust-web-*_amd64.deb "$D"/libllvm19_*.deb \
                 "$D"/libpcre3_*.deb "$D"/libhttp-parser2.9_*.deb "$D"/libstd-rust-web-dev_*_"$DA".deb; do
            dpkg-deb -x "$f" "$TC"
        done
        for f in "$D"/libudev-dev_*_"$DA".deb "$D"/libudev1_*_"$DA".deb; do dpkg-deb -x "$f" "$SYS"; done
        # libudev.so is a relative link into the same directory; the .pc names /usr/lib/$GNU,
        # which PKG_CONFIG_SYSROOT_DIR prefixes with the sysroot.
    fi
    export LD_LIBRARY_PATH=$TC/usr/lib/x86_64-linux-gnu:$TC/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export RUSTC=$TC/usr/bin/rustc
    CARGO=$TC/usr/bin/cargo
    export PKG_CONFIG_LIBDIR=$SYS/usr/lib/$GNU/pkgconfig:$SYS/usr/share/pkgconfig
    export PKG_CONFIG_SYSROOT_DIR=$SYS
    # The cross libc (libc6-armhf-cross) holds the loader and libc; libudev comes from the sysroot.
    QEMU_ARGS=(-L /usr/$GNU)
    QEMU_LIBS=$SYS/usr/lib/$GNU:/usr/$GNU/lib
fi
T=${CARGO_TARGET_DIR:-$PWD/target/cross}
step "$($CARGO --version), $($RUSTC --version)"

build() { # dir features...
    local dir=$1; shift
    step "cargo build --release --target $TARGET $*  (CARGO_TARGET_DIR=$dir)"
    CARGO_TARGET_DIR=$dir $CARGO build --release --locked --target "$TARGET" "$@"
}
check() { # binary label [nosize]
    local bin=$1 label=$2 size
    file "$bin" 2>/dev/null || true
    $GNU-readelf -h "$bin" | grep -q "Machine: *$ELF_MACHINE" || { echo "$bin is not an $ELF_MACHINE ELF" >&2; exit 1; }
    # the release profile strips already; strip again so the size printed is the stripped one
    $GNU-strip "$bin"
    step "$label: $QEMU_USER $bin --version"
    # aarch64: no -L, the binary finds ld-linux-aarch64 via the multiarch paths. armv7: -L the
    # cross libc; qemu-user tries the prefix first and falls back to the real path, so /sys
    # and /dev are still this machine's.
    $QEMU_USER "${QEMU_ARGS[@]}" -E LD_LIBRARY_PATH="$QEMU_LIBS" "$bin" --version
    step "$label: $QEMU_USER $bin list --all"
    $QEMU_USER "${QEMU_ARGS[@]}" -E LD_LIBRARY_PATH="$QEMU_LIBS" "$bin" list --all
    [ "${3:-}" = nosize ] && return 0
    size=$(stat -c %s "$bin")
    echo "SIZE $label $ARCH stripped: $size bytes ($((size / 1024)) KiB; segments are 64 KiB aligned, so compare text+data:)"
    $GNU-size "$bin"
}

if [ -n "$PTEST_OUT" ]; then
    step "test binaries for $TARGET as ptest-cargo builds them (cargo build --tests)"
    mkdir -p "$PTEST_OUT"
    CARGO_TARGET_DIR=$PTEST_OUT/target $CARGO build --locked --tests --message-format json \
        --target "$TARGET" > "$PTEST_OUT/cargo.json"
    # do_compile_ptest_cargo's filter: the targets of this manifest and of the manifests
    # under its directory (the workspace's usbperf-report) that are tests or doctests and
    # have an executable (a bin target counts: ptest-cargo installs usbperf-matrix there too).
    python3 - "$PTEST_OUT" "$PWD/Cargo.toml" <<'PY'
import json, os, sys
out, manifest = sys.argv[1], os.path.normpath(sys.argv[2])
manifest_dir = os.path.dirname(manifest)
tests, matrix = [], None
for line in open(os.path.join(out, "cargo.json")):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact":
        continue
    current = os.path.normpath(m["manifest_path"])
    if os.path.commonpath([current, manifest]) not in (manifest_dir, current):
        continue
    t = m["target"]
    if (t["test"] or t["doctest"]) and m["executable"]:
        tests.append(m["executable"])
    if t["kind"] == ["bin"] and t["name"] == "usbperf-matrix" and not m["profile"]["test"]:
        matrix = m["executable"]
if not tests or not matrix:
    sys.exit("cross-build: no test binaries or no usbperf-matrix in cargo's messages")
open(os.path.join(out, "test-binaries"), "w").write("".join(p + "\n" for p in sorted(tests)))
open(os.path.join(out, "usbperf-matrix"), "w").write(matrix + "\n")
print("cross-build: %d test binaries (ptest-cargo's list), usbperf-matrix %s" % (len(tests), matrix))
PY
    exit 0
fi

# The library's unit tests on the target CPU, under qemu-user: the pure parsers, verdicts,
# report and config rules, and the io_uring entry layout (engine::uring::abi) on this ABI.
# qemu-user has no io_uring, so the engine itself is proven in the vm-e2e guests.
if [ "$UNIT_TESTS" = 1 ]; then
    step "unit tests for $TARGET under $QEMU_USER"
    CARGO_TARGET_DIR=$T/test $CARGO test --locked --lib --target "$TARGET" --no-run 2>&1 | tail -2
    # The unit's library and the report crate (the workspace's member): the newest of each, run
    # once (minutes under qemu), its tail shown and its status kept.
    for crate in usbperf usbperf_report; do
        testbin=$(ls -t "$T/test/$TARGET/debug/deps/$crate"-* | grep -v '\.d$' | head -1)
        log=$(mktemp)
        rc=0
        $QEMU_USER "${QEMU_ARGS[@]}" -E LD_LIBRARY_PATH="$QEMU_LIBS" "$testbin" -q >"$log" 2>&1 || rc=$?
        if [ "$rc" != 0 ]; then
            cat "$log"; rm -f "$log"
            echo "unit tests failed on $TARGET (exit $rc; run $testbin under $QEMU_USER)" >&2
            exit 1
        fi
        tail -3 "$log"; rm -f "$log"
    done
else
    step "unit tests for $TARGET: not run here (--no-unit-tests)"
fi

build "$T"
check "$T/$TARGET/release/usbperf-matrix" "default features (udev, uring, upload over https)"
if [ "${CROSS_BUILD_DEFAULT_ONLY:-0}" != 1 ]; then
    # The udev-less, io_uring-less build is proven to compile and run on the target, not
    # measured: a dev build beside the unit tests reuses their dependencies (about half a
    # minute) where a second LTO release build took 4-6 minutes per architecture.
    step "cargo build --target $TARGET --no-default-features  (dev profile, CARGO_TARGET_DIR=$T/test)"
    CARGO_TARGET_DIR=$T/test $CARGO build --locked --target "$TARGET" --no-default-features
    check "$T/test/$TARGET/debug/usbperf-matrix" "no default features (sysfs walker, thread-pool engine)" nosize
fi
echo
echo "scripts/ci/cross-build.sh: ok"
