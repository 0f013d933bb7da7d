#!/bin/sh
# SPDX-License-Identifier: MIT OR Apache-2.0
#
# seed-dl-dir DL_DIR: put every crate of usbperf-crates.inc into a bitbake
# DL_DIR under the name bitbake's crate fetcher uses (NAME-VERSION.crate),
# taking them from cargo's download cache (filled by `cargo fetch --locked`).
# With it, `bitbake usbperf -c fetch` / `-c unpack` work with
# BB_NO_NETWORK = "1" (bitbake verifies each file's sha256 on first use).
set -eu
[ $# -eq 1 ] || { echo "usage: $0 DL_DIR" >&2; exit 2; }
dl=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
inc="$root/recipes-test/usbperf/usbperf-crates.inc"
cache="${CARGO_HOME:-$HOME/.cargo}/registry/cache"

cargo fetch --locked --manifest-path "$root/Cargo.toml"
mkdir -p "$dl"
n=0
for c in $(sed -n 's|^ *crate://crates.io/\([^/]*\)/\([^ ]*\) .*|\1-\2|p' "$inc"); do
	src=$(ls "$cache"/*/"$c.crate" 2>/dev/null | head -n 1)
	[ -n "$src" ] || { echo "seed-dl-dir: $c.crate not in $cache" >&2; exit 1; }
	cp "$src" "$dl/$c.crate"
	n=$((n + 1))
done
echo "seed-dl-dir: $n crates copied to $dl"
