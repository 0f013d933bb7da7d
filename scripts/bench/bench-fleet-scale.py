#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""The fleet at a product line's scale: each of the fleet's queries over N stored reports, for
growing N, in SQLite and in PostgreSQL, with its time and the peak memory of the process that
answered it, so the growth is visible.

usage: scripts/bench/bench-fleet-scale.py [--scales 100000,1000000] [--db sqlite,postgres]
                                          [--distinct K] [--runs R] [--exact-up-to N]
                                          [--spread-days D]
(COLLECTOR_TARGET_DIR, if set, is the collector's cargo target directory)

A benchmark, not a test (the targets: every query <= 2 s with <= 256 MB at 10,000,000
reports in PostgreSQL and 1,000,000 in SQLite). The
reports: the fleet-gen example writes K distinct schema 2 reports over two image builds
(default 1,000), the collector's own ingest extracts each once, and
collector/examples/fleet-db-fill.rs stores N copies, each with its own report_id and unit
serial, each round of K copies moved later in time so that the N reports span D days (3,650
by default: a product line's ten years, so every scale has the days of a whole life and the
larger ones the denser days). Then `usbperf-collect fleet-rebuild` folds them into the summaries (its time and
rate are printed: the cost a store pays once, and per report as they arrive), and each
query runs R times (best time; the largest peak RSS, from wait4):
- `fleet --format json`, from the summaries;
- `fleet --suggest-thresholds --board B`, the learned limits of the larger board;
- `fleet --compare-builds --format json`, each build against the one before it;
- `fleet --exact --format json`, the records path, up to --exact-up-to reports (1,000,000);
- the page: GET /fleet.json from a collector serving --page-listen, its peak RSS (VmHWM)
  after the query (a fresh collector per run, so the page cache does not answer).
PostgreSQL is a private server of the Debian packages in a temporary directory, as the tests
and scripts/bench/bench-collect.py start it.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)


def load(name, file):
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader(name, os.path.join(HERE, file))
    spec = importlib.util.spec_from_loader(name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def measured(cmd, env=None):
    """(seconds, peak RSS in MB) of one run of `cmd`, its output discarded."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit("bench-fleet-scale: %s failed: %s" % (" ".join(cmd), p.stderr.read().decode()))
    return dt, usage.ru_maxrss / 1024


def vm_hwm(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def page_query(collect, db, tokens, work, env):
    """(seconds of GET /fleet.json, the collector's peak RSS in MB after it)."""
    bc = load("bench_collect", "bench-collect.py")
    port, page = bc.free_port(), bc.free_port()
    p = subprocess.Popen([collect, "--db", db, "--token-file", tokens, "--listen",
                          "127.0.0.1:%d" % port, "--page-listen", "127.0.0.1:%d" % page],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=work)
    try:
        url = "http://127.0.0.1:%d/fleet.json" % page
        for _ in range(300):
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/readyz" % port, timeout=1)
                break
            except Exception:
                time.sleep(0.1)
        t0 = time.perf_counter()
        body = urllib.request.urlopen(url, timeout=600).read()
        dt = time.perf_counter() - t0
        json.loads(body)
        return dt, vm_hwm(p.pid)
    finally:
        p.terminate()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scales", default="100000,1000000")
    ap.add_argument("--db", default="sqlite,postgres")
    ap.add_argument("--distinct", type=int, default=1_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--exact-up-to", type=int, default=1_000_000)
    ap.add_argument("--spread-days", type=int, default=3650)
    a = ap.parse_args()
    fdb = load("bench_fleet_db", "bench-fleet-db.py")
    bc = load("bench_collect", "bench-collect.py")
    collector = os.path.join(ROOT, "collector", "Cargo.toml")
    env = fdb.collector_env()
    print("bench-fleet-scale: building the release binaries", file=sys.stderr)
    subprocess.run(["cargo", "build", "--release", "--locked", "--manifest-path", collector,
                    "--bin", "usbperf-collect", "--example", "fleet-db-fill"], check=True, env=env)
    ctarget = os.path.join(fdb.cargo_target(collector, env), "release")
    collect = os.path.join(ctarget, "usbperf-collect")
    fill = os.path.join(ctarget, "examples", "fleet-db-fill")
    work = tempfile.mkdtemp(prefix="bench-fleet-scale-")
    os.chmod(work, 0o755)  # the postgres user must reach its data directory below
    tokens = os.path.join(work, "tokens")
    with open(tokens, "w") as f:
        f.write("bench bench-token-0123456789abcdef\n")
    os.chmod(tokens, 0o600)
    pg = None
    rows = []
    try:
        src = os.path.join(work, "src")
        subprocess.run(["cargo", "run", "--release", "--locked", "-q", "--example", "fleet-gen", "--",
                        "--units", str(a.distinct), "--schema", "2", "--format", "yaml",
                        "--builds", "7.1,7.2", "--out", src],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        dbs = a.db.split(",")
        if "postgres" in dbs:
            pg = bc.Postgres(work)
        for n in [int(x) for x in a.scales.split(",")]:
            for kind in dbs:
                if kind == "sqlite":
                    path = os.path.join(work, "r-%d.db" % n)
                    db = "sqlite:" + path
                else:
                    name = "fleet%d" % n
                    subprocess.run(["psql", pg.url, "-q", "-c", "CREATE DATABASE %s" % name],
                                   check=True)
                    db = pg.url.rsplit("/", 1)[0] + "/" + name
                t0 = time.perf_counter()
                subprocess.run([fill, "--db", db, "--from", src, "--count", str(n),
                                "--spread-days", str(a.spread_days)], check=True,
                               stdout=subprocess.DEVNULL)
                t_fill = time.perf_counter() - t0
                t_fold, rss_fold = measured([collect, "fleet-rebuild", "--db", db], env)
                if kind == "sqlite":
                    size = os.path.getsize(path)
                else:
                    size = int(subprocess.run(
                        ["psql", db, "-tAq", "-c", "SELECT pg_database_size(current_database())"],
                        check=True, stdout=subprocess.PIPE, text=True).stdout.strip())
                print("bench-fleet-scale: %d reports in %s: filled in %.0f s, folded in %.1f s "
                      "(%.0f reports/s, peak %.0f MB), database %.1f GB"
                      % (n, kind, t_fill, t_fold, n / t_fold, rss_fold, size / 1e9),
                      file=sys.stderr, flush=True)
                rows.append((n, kind, "fold (fleet-rebuild)", t_fold, rss_fold))
                out = subprocess.run([collect, "fleet", "--db", db, "--format", "json"],
                                     check=True, stdout=subprocess.PIPE, env=env).stdout
                s = json.loads(out)
                assert s["reports"] == n, (s["reports"], n)
                by_board = {}
                for g in s["groups"]:
                    by_board[g["key"][0]] = by_board.get(g["key"][0], 0) + g["devices"]
                board = max(by_board, key=by_board.get)
                queries = [
                    ("fleet --format json", ["fleet", "--db", db, "--format", "json"]),
                    ("learned thresholds", ["fleet", "--db", db, "--board", board,
                                            "--suggest-thresholds"]),
                    ("--compare-builds", ["fleet", "--db", db, "--compare-builds",
                                                    "--format", "json"]),
                ]
                if n <= a.exact_up_to:
                    queries.append(("--exact (records)", ["fleet", "--db", db, "--exact",
                                                          "--format", "json"]))
                for label, args in queries:
                    runs = [measured([collect] + args, env) for _ in range(a.runs)]
                    rows.append((n, kind, label, min(r[0] for r in runs),
                                 max(r[1] for r in runs)))
                    print("bench-fleet-scale: %d %s %s: %.2f s, %.0f MB" % rows[-1],
                          file=sys.stderr, flush=True)
                runs = [page_query(collect, db, tokens, work, env) for _ in range(a.runs)]
                rows.append((n, kind, "page /fleet.json", min(r[0] for r in runs),
                             max(r[1] for r in runs)))
                # One scale's database at a time: ten million reports take tens of GB.
                if kind == "sqlite":
                    os.unlink(path)
                else:
                    subprocess.run(["psql", pg.url, "-q", "-c", "DROP DATABASE %s" % name],
                                   check=True)
        print("bench-fleet-scale: %d distinct reports from fleet-gen --schema 2 --builds 7.1,7.2, "
              "ids varied, spread over %d days; release build; best time and largest peak RSS "
              "of %d runs; %d cores"
              % (a.distinct, a.spread_days, a.runs, os.cpu_count()))
        print("%10s  %-8s  %-28s  %8s  %8s" % ("reports", "db", "query", "seconds", "peak MB"))
        for n, kind, label, t, m in rows:
            print("%10d  %-8s  %-28s  %8.2f  %8.0f" % (n, kind, label, t, m))
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
