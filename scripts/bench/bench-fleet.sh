#!/usr/bin/env bash
# Benchmark of `usbperf-matrix fleet`: aggregation time and peak memory for 10,000 synthetic
# reports (the fleet-gen example, two devices per unit, ~1,550-line YAML / ~1,900-line JSON each),
# in JSON and in YAML, and peak memory at 1,000 reports to show it stays flat.
# Prints the numbers; docs/benchmarks-fleet.md records them. Not a test: timings depend on
# the machine and its load (printed with the results).
#
# usage: scripts/bench/bench-fleet.sh [WORKDIR]   (default /tmp/usbperf-fleet-bench; fleets are kept
#        there and reused: generating 10,000 reports takes a minute or two per format)
set -euo pipefail
cd "$(dirname "$0")/../.."
work=${1:-/tmp/usbperf-fleet-bench}
runs=${RUNS:-3}
target=${CARGO_TARGET_DIR:-target}
command -v /usr/bin/time >/dev/null || { echo "needs GNU time: apt-get install -y time" >&2; exit 1; }

cargo build --release --quiet
bin=$target/release/usbperf-matrix

gen() { # units format dir
    [ -f "$3/.complete" ] && return
    rm -rf "$3"
    echo "generating $1 $2 reports in $3 ..." >&2
    cargo run --release --locked --quiet --example fleet-gen -- --units "$1" --format "$2" --out "$3"
    touch "$3/.complete"
}
gen 10000 json "$work/10k-json"
gen 10000 yaml "$work/10k-yaml"
gen 1000 json "$work/1k-json"

measure() { # label dir
    local dir=$2 best=""
    # Warm the page cache: the factory's fleet is read from disk once, the benchmark measures
    # parsing and aggregation.
    cat "$dir"/*.* >/dev/null
    for i in $(seq "$runs"); do
        /usr/bin/time -f "%e %U %S %M" -o "$work/time.txt" \
            "$bin" fleet "$dir" --format json --out "$work/summary.json"
        read -r wall user sys rss_kb <"$work/time.txt"
        printf '  %-10s run %d: %5.2f s wall, %5.2f s user, %4.2f s sys, peak RSS %5.1f MiB\n' \
            "$1" "$i" "$wall" "$user" "$sys" "$(echo "$rss_kb / 1024" | bc -l)"
    done
    python3 - "$work/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
flag = sum(len(m["outliers"]) for g in s["groups"] for m in g["metrics"])
print("             %d reports, %d units, %d groups, %d outlier values, %d unreadable"
      % (s["reports"], s["units"], len(s["groups"]), flag, len(s["errors"])))
PY
}

echo "usbperf-matrix fleet benchmark: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "reports: $(du -sh "$work/10k-json" | cut -f1) JSON, $(du -sh "$work/10k-yaml" | cut -f1) YAML for 10,000 units"
measure "10k JSON" "$work/10k-json"
measure "10k YAML" "$work/10k-yaml"
measure "1k JSON" "$work/1k-json"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
