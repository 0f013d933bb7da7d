#!/usr/bin/env bash
# The main job on this machine: installs the build dependencies if missing, builds the
# release binary and runs it. With no arguments it runs the factory job, `usbperf-matrix run`:
# the quick matrix on every non-system storage device, safely (file tests on their mounted
# filesystems, read-only tests elsewhere), report in /var/lib/usbperf/reports. Any arguments
# are passed to usbperf-matrix instead (scripts/matrix.sh list, scripts/matrix.sh tree).
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
for p in libudev-dev pkg-config gcc; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
cargo build --release --locked --quiet
[ "$#" -gt 0 ] || set -- run
exec target/release/usbperf-matrix "$@"
