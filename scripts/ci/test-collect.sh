#!/usr/bin/env bash
# The collector's checks and its tests with real parts: fmt, clippy and the
# locked-MSRV check of collector/ (its own workspace and Cargo.lock), then its unit tests,
# tests/real.rs and tests/report_path.rs: real HTTP on 127.0.0.1, SQLite files, a real
# PostgreSQL server from the Debian packages (started by the tests in a temporary directory
# as the `postgres` user), `usbperf-matrix upload` and `run` (on a loop device: needs root) as
# units run them; then the hostile-body benchmark (tests/bench_hostile.rs), which prints
# its figures; last, the attacks of scripts/bench/bench-collect.py --attack with their bounds.
# Called by scripts/test.sh; installs its own Debian packages when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."

step() { printf '\n==> %s\n' "$*"; }

APT_PACKAGES=(postgresql python3 util-linux gcc time openssl)
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

step "collector: cargo fmt --check, clippy -D warnings, Cargo.lock builds with Rust 1.75"
cargo fmt --manifest-path collector/Cargo.toml --check
cargo clippy --locked --manifest-path collector/Cargo.toml --all-targets -- -D warnings
scripts/ci/check-msrv-lock.py --manifest-path collector/Cargo.toml

step "collector: unit tests and tests with real parts (PostgreSQL, HTTP, kill -9, 1,000-report load)"
# The tests drive the unit's own binary, its default build (https:// included:
# collector/tests/tls.rs uploads to the collector's own TLS with a factory CA); build it first,
# in the same target directory.
cargo build --locked --bin usbperf-matrix
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
export USBPERF_MATRIX_BIN="$target_dir/debug/usbperf-matrix"
# One test at a time: each load test runs 50 uploader processes against one collector.
cargo test --locked --manifest-path collector/Cargo.toml -- --test-threads=1

step "collector: hostile bodies (alias bombs behind CR/NEL/LS, 1,000,000 deep, 2,000,000 reasons, 700,000 keys, 256 x 1,024 cells): answer time, memory, rows; show and fleet on them"
# A benchmark, ignored by the run above, on the release collector (the figures a line meets;
# its build is the one scripts/bench/bench-collect.py below uses): prints its figures, fails over 50 ms,
# 20 MB (100 MB for four at once, 50 MB for show and fleet, here the debug unit binary built
# above: its memory is the release build's, only slower) or a row.
cargo test --locked --release --manifest-path collector/Cargo.toml --test bench_hostile -- --ignored --nocapture

step "collector: attacks on SQLite and PostgreSQL (no token and 8 MiB bodies, slow heads, one host's 1,100 connections, 1,000 uploads at once, SIGTERM, a full disk, the page port, 576 stalled bodies)"
# A benchmark with bounds (scripts/bench/bench-collect.py --attack): the release collector, a line per
# figure with its bound; fails when one is missed or an attack cannot be run. Needs root.
scripts/bench/bench-collect.py --attack --db both
