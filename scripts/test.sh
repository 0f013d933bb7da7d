#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this). Installs what it needs on a fresh
# Debian 12 / Ubuntu machine (run as root: the live tests make loop devices).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's header says how long the suite has run, so a slow step shows in CI's log.
SUITE_START=$SECONDS
step() { printf '\n==> [%dm%02ds] %s\n' $(((SECONDS - SUITE_START) / 60)) $(((SECONDS - SUITE_START) % 60)) "$*"; }

# Debian packages: libudev for the udev crate, umockdev to replay recorded device trees,
# util-linux for losetup, e2fsprogs/xfsprogs for the filesystems the run tests use, python3
# for the fixtures' converter and the report validator, chromium for the fleet page test,
# python3-fusepy and fuse3 for the fake-capacity media of the verify tests.
APT_PACKAGES=(libudev-dev pkg-config umockdev util-linux mount e2fsprogs xfsprogs python3 python3-pip gcc chromium python3-fusepy fuse3)
missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    step "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The report validator (scripts/ci/validate-report.py) needs pyyaml and jsonschema.
python3 -c 'import yaml, jsonschema' 2>/dev/null ||
    python3 -m pip install -q --disable-pip-version-check pyyaml 'jsonschema>=4.0' ||
    python3 -m pip install -q --disable-pip-version-check --break-system-packages pyyaml 'jsonschema>=4.0'
command -v cargo >/dev/null || { echo "cargo is missing: install Rust (rustup) first" >&2; exit 1; }
for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
done


step "cargo fmt --check"
cargo fmt --check

step "scripts/ci/check-imports.py (imports run down the layer order of src/lib.rs; no circle)"
scripts/ci/check-imports.py --self-test
scripts/ci/check-imports.py
scripts/ci/check-imports.py collector/src
scripts/ci/check-imports.py usbperf-report/src
scripts/ci/check-imports.py usbperf-fleet/src

# Real BitBake (2.8 + oe-core scarthgap, 2.18 + oe-core wrynose) from ../shared/yocto, offline:
# the layer parses, the checkout recipe fetches, unpacks and configures; first a planted
# ${BPN} in usbperf.inc must make it fail. A lone clone has no ../shared/yocto: both say
# SKIPPED and the closing line says the layer was not parsed by BitBake.
step "scripts/ci/check-bitbake.sh --self-test (real BitBake must refuse a planted \${BPN} in usbperf.inc)"
BITBAKE_LOG=$(mktemp)
scripts/ci/check-bitbake.sh --self-test 2>&1 | tee "$BITBAKE_LOG"
step "scripts/ci/check-bitbake.sh (real BitBake 2.8/scarthgap and 2.18/wrynose: parse, fetch, unpack, configure)"
scripts/ci/check-bitbake.sh 2>&1 | tee -a "$BITBAKE_LOG"
bitbake_note="real BitBake scarthgap + wrynose"
grep -q SKIPPED "$BITBAKE_LOG" && bitbake_note="real BitBake SKIPPED: no ../shared/yocto beside the checkout"
rm -f "$BITBAKE_LOG"

# The VM harness's checks (scripts/vm/check.py) over recorded guest outputs: a passing run
# passes, planted faults fail; seconds, no root or QEMU.
step "scripts/vm/test_check.py (the vm-e2e checks on tests/fixtures/vm/)"
python3 scripts/vm/test_check.py
# scripts/ci/vm-power-cut.sh's host tools: the dm-log-writes replay on a log built from the kernel's
# format, its checker on a passing run's outputs and on planted faults; seconds, no root or QEMU.
step "scripts/vm/test_power_cut.py (the vm-power-cut replay and checks)"
python3 scripts/vm/test_power_cut.py

step "cargo clippy (default features: udev, uring, https uploads; and the schema generator)"
cargo clippy --locked --all-targets --features schema -- -D warnings

step "cargo clippy (no default features: the udev-less, io_uring-less build)"
cargo clippy --locked --all-targets --no-default-features -- -D warnings

# cargo's test summaries are kept to add them up for the closing line.
TEST_LOG=$(mktemp)
trap 'rm -f "$TEST_LOG"' EXIT

step "unit tests without default features"
cargo test --locked --no-default-features --lib 2>&1 | tee -a "$TEST_LOG"

# The schema feature adds the report's JSON Schema from its types, and the test that docs/
# holds exactly that (tests/report_schema.rs); it changes nothing else.
step "all tests (default features, and the schema)"
cargo test --locked --features schema 2>&1 | tee -a "$TEST_LOG"
# A test that needs root says SKIPPED when the run is not root; this run must run them all.
if grep -qE 'SKIPPED [^ ]+: needs root' "$TEST_LOG"; then
    echo "scripts/test.sh: tests were skipped (run scripts/test.sh as root, as CI does):" >&2
    grep -oE 'SKIPPED [^ ]+: needs root \([^)]*\)' "$TEST_LOG" >&2
    exit 1
fi

# Bounded fuzzing: mutated configs through the parser and resolver, mutated real
# reports through the fleet reader and its renderers; 0 panics allowed. 60 s each by default.
step "fuzz: config parser/resolver and fleet reader, ${USBPERF_FUZZ_SECS:-60} s each"
USBPERF_FUZZ_SECS=${USBPERF_FUZZ_SECS:-60} cargo test --locked --features schema --test fuzz_config --test fleet \
    -- --ignored --nocapture fuzz_ 2>&1 | tee -a "$TEST_LOG" | grep -E '^fuzz |test result'

step "scripts/ci/test-collect.sh (the collector: real PostgreSQL, HTTP, uploads, kill -9, load)"
scripts/ci/test-collect.sh 2>&1 | tee -a "$TEST_LOG"

step "scripts/ci/check-yocto-layer.sh (Yocto layer: oelint, crate list, MSRV lock, vendored build, units)"
scripts/ci/check-yocto-layer.sh
# Proof on a real kernel: the aarch64 cross-build, run under qemu-aarch64-static, and
# the end-to-end factory run with faults in one x86_64 QEMU guest (prints the guest's console
# on failure). Both install their own Debian packages. USBPERF_SKIP_VM=1 skips them for a quick
# local run; CI never sets it, and the run then says that the proof on a real kernel was left out.
if [ "${USBPERF_SKIP_VM:-0}" != 1 ]; then
    # check-yocto-layer's ptest-aarch64 ran every aarch64 test binary under qemu-user just before:
    # the library's unit tests are not run a second time here.
    step "scripts/ci/cross-build.sh --no-unit-tests (aarch64, Debian rustc-web)"
    scripts/ci/cross-build.sh --no-unit-tests
    step "scripts/ci/cross-build.sh --arch armv7 (Zynq-7000; Debian's 1.85 set in a private toolchain)"
    scripts/ci/cross-build.sh --arch armv7
    step "scripts/vm-e2e.sh (x86_64 QEMU guest, Debian 12's 6.1: factory run + faults)"
    scripts/vm-e2e.sh --kernel 6.1
    # The power-cut test on the same kernel: a dm-log-writes log replayed to its flushes, a
    # dm-flakey medium that drops acknowledged writes, and QEMU killed mid-write, then verified
    # by the boot service on the next boot.
    step "scripts/ci/vm-power-cut.sh (x86_64 QEMU guest, Debian 12's 6.1: dm-log-writes, dm-flakey, SIGKILL of QEMU)"
    scripts/ci/vm-power-cut.sh --kernel 6.1
    # Debian 11's 5.10 (the Renesas RZ/G CIP kernel generation): its split O_DIRECT reads
    # complete -EAGAIN under io_uring, which once failed every healthy stick.
    step "scripts/vm-e2e.sh --kernel 5.10 (x86_64 QEMU guest, Debian 11's kernel)"
    scripts/vm-e2e.sh --kernel 5.10
    step "scripts/vm-e2e.sh --arch armv7 (Cortex-A15 guest, Debian 12's armmp 6.1 kernel)"
    scripts/vm-e2e.sh --arch armv7
    # QEMU 10 (bookworm-backports, unpacked privately): the eMMC board, whose boot partitions
    # must come out unchanged, and NVMe + UFS on 6.12.
    step "scripts/vm-e2e.sh --arch armv7 --qemu 10 (eMMC board: ast2600-evb, boot partitions checked)"
    scripts/vm-e2e.sh --arch armv7 --qemu 10
    step "scripts/vm-e2e.sh --kernel 6.12 --qemu 10 (x86_64 guest + NVMe + UFS, Debian's 6.12)"
    scripts/vm-e2e.sh --kernel 6.12 --qemu 10
    # Raw flash on the kernel's nandsim (and mtdram where the kernel has it) with planted bad
    # blocks, grave pages, bitflips and a weak block; UBI, UBIFS and JFFS2 on it.
    for k in 6.1 5.10 6.12; do
        step "scripts/ci/vm-mtd.sh --kernel $k (x86_64: nandsim, mtdram, UBI, UBIFS, JFFS2)"
        scripts/ci/vm-mtd.sh --kernel "$k"
    done
    step "scripts/ci/vm-mtd.sh --arch armv7 (armmp 6.1: nandsim, UBI, UBIFS, JFFS2)"
    scripts/ci/vm-mtd.sh --arch armv7
else
    echo "scripts/test.sh: USBPERF_SKIP_VM=1: cross-build, vm-e2e, vm-power-cut and vm-mtd NOT run (not a full run)" >&2
fi
passed=$(grep -Eo 'test result: ok\. [0-9]+ passed' "$TEST_LOG" | awk '{s += $4} END {print s + 0}')
echo
if [ "${USBPERF_SKIP_VM:-0}" != 1 ]; then
    echo "scripts/test.sh: every step passed (fmt, layers, vm checks, clippy x2, cargo tests, fuzz, collector, check-yocto-layer, cross-build, vm-e2e x86_64 6.1 and 5.10, vm-power-cut x86_64 6.1, armv7 6.1, QEMU 10 eMMC board and x86_64 6.12 NVMe/UFS, vm-mtd x86_64 6.1, 5.10, 6.12 and armv7)"
else
    echo "scripts/test.sh: every step run passed (cross-build, vm-e2e and vm-power-cut skipped: USBPERF_SKIP_VM=1)"
fi
echo "scripts/test.sh: $bitbake_note"
echo "scripts/test.sh: $passed passed, 0 failed"
echo "scripts/test.sh: $(((SECONDS - SUITE_START) / 60)) min $(((SECONDS - SUITE_START) % 60)) s in all"
