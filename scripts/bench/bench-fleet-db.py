#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""The fleet from the database: `usbperf-collect fleet` over 100,000 reports in SQLite and in
PostgreSQL, beside `usbperf-matrix fleet` over a directory of the same reports.

usage: scripts/bench/bench-fleet-db.py [--reports N] [--distinct K] [--dir-reports M] [--runs R]
(COLLECTOR_TARGET_DIR, if set, is the collector's cargo target directory)

A benchmark, not a test (the fleet over 100,000 reports from either database in
<= 2 s on this machine). How the 100,000 are made: the fleet-gen example (through the report's types) writes K distinct
schema 2 reports (default 1,000; 100,000 would be 4 GB of YAML), the collector's own ingest
extracts each once, and collector/examples/fleet-db-fill.rs stores N copies, each with its own
report_id and unit serial, by SQL in one transaction (raw documents left empty: no fleet
query reads them). The directory figure is `usbperf-matrix fleet --format json` over the
first M copies written as files (default 10,000), scaled to N (its time grows linearly
with the files it parses), and said so. Each figure is the best of R runs of the release
binaries (wall time of the whole command: open, query, decode, aggregate, render JSON).
PostgreSQL is a private server of the Debian packages in a temporary directory, as the
tests and scripts/bench/bench-collect.py start it.
"""
import argparse
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_bench_collect():
    path = os.path.join(ROOT, "scripts", "bench", "bench-collect.py")
    loader = importlib.machinery.SourceFileLoader("bench_collect", path)
    spec = importlib.util.spec_from_loader("bench_collect", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def collector_env():
    # COLLECTOR_TARGET_DIR: the collector's own target directory when CARGO_TARGET_DIR is
    # the root's (two workspaces, two locks).
    env = dict(os.environ)
    if "COLLECTOR_TARGET_DIR" in env:
        env["CARGO_TARGET_DIR"] = env["COLLECTOR_TARGET_DIR"]
    return env


def cargo_target(manifest, env=None):
    import json
    out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps",
                          "--manifest-path", manifest],
                         check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    return json.loads(out)["target_directory"]


def best(cmd, runs, cwd=None):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=cwd, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reports", type=int, default=100_000)
    ap.add_argument("--distinct", type=int, default=1_000)
    ap.add_argument("--dir-reports", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    bc = load_bench_collect()
    collector = os.path.join(ROOT, "collector", "Cargo.toml")
    print("bench-fleet-db: building the release binaries", file=sys.stderr)
    subprocess.run(["cargo", "build", "--release", "--locked", "--bin", "usbperf-matrix"],
                   check=True, cwd=ROOT)
    subprocess.run(["cargo", "build", "--release", "--locked", "--manifest-path", collector,
                    "--bin", "usbperf-collect", "--example", "fleet-db-fill"], check=True,
                   env=collector_env())
    matrix = os.path.join(cargo_target(os.path.join(ROOT, "Cargo.toml")), "release", "usbperf-matrix")
    ctarget = os.path.join(cargo_target(collector, collector_env()), "release")
    collect = os.path.join(ctarget, "usbperf-collect")
    fill = os.path.join(ctarget, "examples", "fleet-db-fill")
    work = tempfile.mkdtemp(prefix="bench-fleet-db-")
    os.chmod(work, 0o755)  # the postgres user must reach its data directory below
    pg = None
    try:
        src = os.path.join(work, "src")
        subprocess.run(["cargo", "run", "--release", "--locked", "-q", "--example", "fleet-gen", "--", "--units",
                        str(a.distinct), "--schema", "2", "--format", "yaml", "--out", src],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        sqlite = "sqlite:" + os.path.join(work, "reports.db")
        files = os.path.join(work, "files")
        t0 = time.perf_counter()
        subprocess.run([fill, "--db", sqlite, "--from", src, "--count", str(a.reports),
                        "--dir-out", files, "--dir-count", str(a.dir_reports)], check=True)
        print("bench-fleet-db: sqlite filled in %.1f s" % (time.perf_counter() - t0), file=sys.stderr)
        pg = bc.Postgres(work)
        t0 = time.perf_counter()
        subprocess.run([fill, "--db", pg.url, "--from", src, "--count", str(a.reports)], check=True)
        print("bench-fleet-db: postgres filled in %.1f s" % (time.perf_counter() - t0), file=sys.stderr)
        # The summaries are built once, as reports arriving one by one would have built them;
        # the query's time is then the query's.
        for db in (sqlite, pg.url):
            subprocess.run([collect, "fleet-rebuild", "--db", db], check=True,
                           stderr=subprocess.DEVNULL)
        t_sqlite = best([collect, "fleet", "--db", sqlite, "--format", "json"], a.runs)
        t_pg = best([collect, "fleet", "--db", pg.url, "--format", "json"], a.runs)
        t_dir = best([matrix, "fleet", files, "--format", "json"], a.runs)
        scale = a.reports / a.dir_reports
        print("bench-fleet-db: %d reports (%d distinct from fleet-gen --schema 2, ids varied), "
              "release build, best of %d, %d cores" % (a.reports, a.distinct, a.runs, os.cpu_count()))
        print("fleet from sqlite: %.2f s, from postgres: %.2f s, from a directory: %.1f s "
              "(%d files in %.2f s, scaled x%g)"
              % (t_sqlite, t_pg, t_dir * scale, a.dir_reports, t_dir, scale))
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
