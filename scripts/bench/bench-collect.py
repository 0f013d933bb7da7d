#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Ingest latency of usbperf-collect: 1,000 distinct reports from 50 concurrent uploaders.

usage: scripts/bench/bench-collect.py [--reports N] [--uploaders K] [--db sqlite|postgres|both]
                                      [--baseline-rev REV] [--runs R]

A benchmark, not a test: it prints, per database, the stored count, the wall time, the
throughput and the p50/p99/max latency of one POST (request sent to acknowledgement read,
so the database commit is inside it), and the time until the fleet's summaries hold every
report (the fold queue empty; "-" for a collector without summaries). Each run is on a
fresh database. With --baseline-rev, the collector of that git revision (built in a
worktree) runs too, alternating with this one (baseline first), R runs each (3 by
default), and the ratio of the median throughputs is printed: this machine is noisy, so
the two are compared side by side in the same minutes. Builds the release collector; reports come from
the fleet-gen example (`cargo run --example fleet-gen`); PostgreSQL is a private server from the Debian packages in a temporary
directory (run as the postgres user when started as root), like the tests'.

       scripts/bench/bench-collect.py --attack [--db sqlite|postgres|both]

--attack plays, on each database, what a hostile or broken factory network sends, against a
fresh release collector for each attack, and prints one line per figure: the value measured,
its bound, and "ok" or "MISSED". It exits 1 when a bound is missed, 2 when an attack could not
be run (said on its line as NOT RUN, never as a pass), 0 otherwise. Run it as root (tmpfs
mounts, 1,100 sockets). The client sockets bind to addresses of 127.0.0.0/8 (loopback takes
any of them as a source), so the per-address limits (64 connections, 30 failed tokens a
minute) count them as separate units; attack 3 is the one host that tries to take every slot.
  1. 64 connections without a token, each declaring and sending an 8 MiB body: every one is
     answered 401, and the collector's memory grows by at most 50 MB (VmHWM after the attack
     over VmRSS before); the body bytes the client got into the socket before the answer are
     printed (the kernel's socket buffers take some of them; the collector reads none);
  2. 200 connections sending their request head one byte a second: all closed by the
     collector within 15 s (--header-timeout is 10 s by default);
  3. one host, 127.0.0.2, keeping 1,100 slow connections open (re-opening each second those
     the collector closed) while the collector runs under a 1,024-descriptor limit: a real
     `usbperf-matrix upload` of one report from 127.0.0.1 exits 0 within 2 s and the report is
     stored;
  4. 1,000 concurrent uploads: 1,000 threads posting one report each, at once, from 1,000
     source addresses (1,000 units); a 503 is sent again after its Retry-After, and the 503s
     are counted: 1,000 stored, none lost, none stored twice, no connection reset or close
     without an answer, the collector's peak memory (VmHWM) at most 300 MB;
  5. SIGTERM with 20 slow connections open: the process exits within 10 s;
  6. GET /readyz is 200, then 503 while the database's filesystem is full, then 200 again
     once there is room, from the same process: SQLite's file on a 4 MiB tmpfs, PostgreSQL's
     database in a tablespace on a 16 MiB tmpfs, filled with a file until ENOSPC, then the
     file deleted;
  7. the page port (--page-listen) of a database of 10,000 reports (collector/examples/
     fleet-db-fill), at once: 10,000 page queries with distinct `since=` values, all before
     the fleet's first report (8 clients); 64 slow readers of the HTML page (8 addresses, each
     socket's receive buffer 4 KiB, asking 16 pages at once and reading nothing for 6 s); and
     a unit uploading 20 reports on the upload port. Bounds: the collector's memory grows by
     at most 200 MB (VmHWM over VmRSS before), every upload is stored, and the collector ends
     every slow reader's connection within 26 s of its request (its writes cut after
     --write-timeout, 5 s here);
  8. 576 strangers' connections, 64 from each of 9 addresses, each declaring a 65,536-byte
     body with no token and sending none: a real `usbperf-matrix upload` from a 10th address
     exits 0 within 2 s, and every stalled connection is answered and closed within 15 s.
`usbperf-matrix` is $USBPERF_MATRIX_BIN (scripts/ci/test-collect.sh sets it), else the debug build
of the repository root, built here.
"""
import argparse
import errno
import glob
import http.client
import json
import os
import pwd
import resource
import select
import selectors
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fleet_gen(args):
    """A synthetic fleet through the report's own types: the unit crate's fleet-gen example."""
    # The dev profile: the tests have built it, and 1,000 reports take seconds.
    subprocess.run(["cargo", "run", "--locked", "-q", "--example", "fleet-gen", "--"] + args,
                   cwd=ROOT, check=True, stderr=subprocess.DEVNULL)


TOKEN = "bench-0123456789abcdef0123456789"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def target_dir():
    out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps",
                          "--manifest-path", os.path.join(ROOT, "collector", "Cargo.toml")],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)["target_directory"]


class Postgres:
    def __init__(self, work):
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda p: int(p.split("/")[4]))
        if not bins:
            sys.exit("bench-collect: PostgreSQL is not installed (apt-get install postgresql)")
        bindir = os.path.dirname(bins[-1])
        self.dir = os.path.join(work, "pg")
        os.makedirs(self.dir)
        kw = {}
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            kw = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        data = os.path.join(self.dir, "data")
        subprocess.run([os.path.join(bindir, "initdb"), "-D", data, "-A", "trust", "-U", "usbperf",
                        "-E", "UTF8", "--locale=C"], check=True, cwd=self.dir,
                       stdout=subprocess.DEVNULL, **kw)
        self.port = free_port()
        self.proc = subprocess.Popen([os.path.join(bindir, "postgres"), "-D", data, "-p", str(self.port),
                                      "-k", self.dir, "-c", "listen_addresses=127.0.0.1",
                                      "-c", "fsync=on", "-c", "synchronous_commit=on",
                                      "-c", "max_connections=200"],
                                     cwd=self.dir, stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(work, "pg.log"), "w"), **kw)
        for _ in range(300):
            if subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(self.port)]).returncode == 0:
                break
            time.sleep(0.1)
        else:
            sys.exit("bench-collect: PostgreSQL did not start (see %s/pg.log)" % work)
        self.url = "postgres://usbperf@127.0.0.1:%d/postgres" % self.port

    def count(self):
        out = subprocess.run(["psql", self.url, "-At", "-c", "SELECT count(*) FROM reports"],
                             check=True, stdout=subprocess.PIPE, text=True).stdout
        return int(out.strip())

    def stop(self):
        self.proc.send_signal(2)
        self.proc.wait()


def percentile(sorted_v, p):
    return sorted_v[min(len(sorted_v) - 1, int(round(p / 100.0 * (len(sorted_v) - 1))))]


def bench(binary, db_url, query, reports, uploaders, work):
    tokens = os.path.join(work, "tokens")
    with open(tokens, "w") as f:
        f.write(TOKEN + "\n")
    # Both sides refuse a token file other users may read.
    os.chmod(tokens, 0o600)
    # Its access log (a line a request) goes to a file, not over the figures.
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--db", db_url, "--token-file", tokens],
                            stdout=subprocess.PIPE, stderr=open(os.path.join(work, "collector.log"), "w"),
                            text=True)
    line = proc.stdout.readline()
    if "listening on" not in line:
        sys.exit("bench-collect: the collector did not start")
    hostport = line.split("http://")[1].split("/")[0]
    host, port = hostport.split(":")
    bodies = [open(p, "rb").read() for p in reports]
    shares = [bodies[i::uploaders] for i in range(uploaders)]
    lat = []
    errors = []
    lock = threading.Lock()

    def worker(share):
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        mine = []
        for body in share:
            t0 = time.perf_counter()
            conn.request("POST", "/api/v1/reports", body=body,
                         headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/yaml"})
            r = conn.getresponse()
            r.read()
            mine.append(time.perf_counter() - t0)
            if r.status not in (200, 201):
                errors.append(r.status)
        conn.close()
        with lock:
            lat.extend(mine)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(s,)) for s in shares]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    stored = query("SELECT count(*) FROM reports")
    # Until the summaries hold every report: a generation of them answers and its queue is
    # empty (the collector's own folder, after the uploads). A collector without summaries
    # has no fleet_generations table.
    folded = None
    if query("SELECT count(*) FROM fleet_generations") is not None:
        while (query("SELECT count(*) FROM fleet_generations WHERE ready") or 0) == 0 \
                or query("SELECT count(*) FROM fleet_gen_queue") != 0:
            if time.perf_counter() - t0 > wall + 300:
                sys.exit("bench-collect: the summaries were not built 300 s after the load")
            time.sleep(0.05)
        folded = time.perf_counter() - t0
    proc.terminate()
    proc.wait()
    lat.sort()
    return {"stored": stored, "wall": wall, "errors": errors, "p50": percentile(lat, 50),
            "p99": percentile(lat, 99), "max": lat[-1], "n": len(lat), "folded": folded}


# --- --attack -------------------------------------------------------------------------------

PATH = "/api/v1/reports"
MB = 1e6


class Figures:
    """The printed figures of --attack and what they add up to."""

    def __init__(self):
        self.missed = []
        self.not_run = []

    def bound(self, db, n, what, value, ok, bound):
        print("  %-8s %d %s: %s (bound %s) %s" % (db, n, what, value, bound, "ok" if ok else "MISSED"),
              flush=True)
        if not ok:
            self.missed.append("%s %d %s" % (db, n, what))

    def info(self, db, n, what, value):
        print("  %-8s %d %s: %s" % (db, n, what, value), flush=True)

    def skipped(self, db, n, what, why):
        print("  %-8s %d %s: NOT RUN: %s" % (db, n, what, why), flush=True)
        self.not_run.append("%s %d %s" % (db, n, what))


class Collector:
    """A fresh release collector for one attack; its standard error (the access log) in a file."""

    def __init__(self, binary, db_url, work, tag, extra=(), nofile=None, page=False):
        self.log = os.path.join(work, "collector-%s.log" % tag)
        pre = None
        if nofile:
            def pre():
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        self.proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--db", db_url,
                                      "--token-file", os.path.join(work, "tokens")] + list(extra),
                                     stdout=subprocess.PIPE, stderr=open(self.log, "w"), text=True,
                                     preexec_fn=pre)
        # The pipe stays open: a later line on a closed pipe would fail the collector.
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            sys.exit("bench-collect: the collector did not start: %s" % self.stderr())
        self.host, port = line.split("http://")[1].split("/")[0].rsplit(":", 1)
        self.port = int(port)
        self.url = "http://%s:%d%s" % (self.host, self.port, PATH)
        if page:
            line = self.proc.stdout.readline()
            if "fleet page on" not in line:
                sys.exit("bench-collect: the collector did not serve its page: %s" % self.stderr())
            self.page_port = int(line.split("http://")[1].split("/")[0].rsplit(":", 1)[1])

    def stderr(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def mem(self, key):
        """VmRSS or VmHWM of the collector, bytes."""
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        raise KeyError(key)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def connect(c, source, timeout=10):
    return socket.create_connection((c.host, c.port), timeout=timeout, source_address=(source, 0))


def request(c, method, path, body=None, headers=None, source="127.0.0.1", timeout=10):
    """One request on its own connection: (status, headers, body)."""
    conn = http.client.HTTPConnection(c.host, c.port, timeout=timeout, source_address=(source, 0))
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def report_id(path):
    with open(path) as f:
        for line in f:
            if line.startswith("report_id:"):
                return line.split(":", 1)[1].strip().strip("'\"")
    sys.exit("bench-collect: %s has no report_id (fleet-gen --report-ids)" % path)


class Db:
    """One database per attack: a SQLite file, or a database of the private PostgreSQL server."""

    def __init__(self, kind, work, pg, name):
        self.kind = kind
        if kind == "sqlite":
            self.path = os.path.join(work, name + ".db")
            self.url = "sqlite:" + self.path
        else:
            psql(pg.url, "CREATE DATABASE %s" % name)
            self.url = pg.url.rsplit("/", 1)[0] + "/" + name

    def query(self, q):
        if self.kind == "sqlite":
            with sqlite3.connect(self.path) as c:
                return [r[0] for r in c.execute(q).fetchall()]
        out = subprocess.run(["psql", self.url, "-At", "-c", q], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        return [line for line in out.splitlines() if line]

    def ids(self):
        return self.query("SELECT report_id FROM reports")

    def devices(self):
        return int(self.query("SELECT count(*) FROM devices")[0])


def psql(url, q):
    r = subprocess.run(["psql", url, "-At", "-v", "ON_ERROR_STOP=1", "-c", q],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("bench-collect: psql %r: %s" % (q, r.stderr.strip()))
    return r.stdout


def attack_unauthenticated_bodies(binary, db, work, fig):
    """1: 64 connections without a token, each declaring and sending 8 MiB."""
    what = "64 unauthenticated 8 MiB bodies"
    c = Collector(binary, db.url, work, "a1")
    try:
        request(c, "GET", "/healthz")
        before = c.mem("VmRSS")
        n, size = 64, 8 << 20
        head = ("POST %s HTTP/1.1\r\nHost: collector\r\nContent-Type: application/yaml\r\n"
                "Content-Length: %d\r\n\r\n" % (PATH, size)).encode()
        block = b"x" * (64 << 10)
        results = [None] * n
        barrier = threading.Barrier(n)

        def one(i):
            # One source address each: the 30-a-minute limit on failed tokens (429) is per
            # address, and this is 64 units with a wrong token, not one.
            s = connect(c, "127.0.1.%d" % (i + 1))
            barrier.wait()
            s.sendall(head)
            s.setblocking(False)
            p = select.poll()
            p.register(s, select.POLLIN | select.POLLOUT)
            sent, got, at_answer, writing = 0, b"", None, True
            closed = False
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                evs = p.poll(1000)
                ev = evs[0][1] if evs else 0
                if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    try:
                        d = s.recv(65536)
                    except BlockingIOError:
                        d = None
                    except OSError:
                        d = b""  # reset after the answer: read before it
                    if d == b"":
                        closed = True
                        break
                    if d:
                        if at_answer is None:
                            at_answer = sent
                            writing = False  # the answer is there: stop, as a client does
                            p.modify(s, select.POLLIN)
                        got += d
                elif ev & select.POLLOUT and writing:
                    try:
                        sent += s.send(block[:min(len(block), size - sent)])
                    except BlockingIOError:
                        pass
                    except OSError:
                        writing = False
                        p.modify(s, select.POLLIN)
                    if sent >= size and writing:
                        writing = False
                        p.modify(s, select.POLLIN)
            s.close()
            line = got.split(b"\r\n", 1)[0].decode(errors="replace")
            status = int(line.split()[1]) if line.startswith("HTTP/") and len(line.split()) > 1 else None
            results[i] = (status, at_answer if at_answer is not None else sent, sent, closed)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        peak = c.mem("VmHWM")
    finally:
        c.stop()
    answered = sum(1 for r in results if r and r[0] == 401)
    others = sorted(set(r[0] for r in results if r and r[0] != 401), key=str)
    fig.bound(db.kind, 1, what, "%d of %d answered 401%s" % (
        answered, n, (", others: %s" % others) if others else ""), answered == n, "all %d" % n)
    fig.bound(db.kind, 1, what, "collector memory +%.1f MB (VmRSS %.1f MB before, VmHWM %.1f MB after)"
              % ((peak - before) / MB, before / MB, peak / MB), peak - before <= 50 * MB, "50 MB")
    taken = sorted(r[1] for r in results if r)
    closed = sum(1 for r in results if r and r[3])
    fig.info(db.kind, 1, what, "body bytes the client got into the socket before the answer: median "
             "%.2f MiB, max %.2f MiB of 8 MiB; %d of %d connections closed by the collector"
             % (taken[len(taken) // 2] / 1048576.0, taken[-1] / 1048576.0, closed, n))


def attack_slow_headers(binary, db, work, fig):
    """2: 200 connections sending their request head one byte a second."""
    what = "200 slow-header connections"
    n, bound_s = 200, 15.0
    c = Collector(binary, db.url, work, "a2")
    head = ("POST %s HTTP/1.1\r\nHost: collector\r\nX-Slow: " % PATH).encode() + b"a" * 1000
    poller = select.poll()
    conns = {}  # fd: [socket, opened at, bytes sent, closed at]
    try:
        for i in range(n):
            # 20 from each of 10 addresses: under the 64-per-address limit, so the header
            # timeout is what closes them.
            s = connect(c, "127.0.2.%d" % (1 + i % 10))
            s.setblocking(False)
            conns[s.fileno()] = [s, time.monotonic(), 0, None]
            poller.register(s, select.POLLIN)
        t_end = time.monotonic() + bound_s + 5
        tick = time.monotonic()
        while time.monotonic() < t_end and any(st[3] is None for st in conns.values()):
            if time.monotonic() >= tick:
                for fd, st in conns.items():
                    if st[3] is None:
                        try:
                            st[2] += st[0].send(head[st[2]:st[2] + 1])
                        except BlockingIOError:
                            pass
                        except OSError:
                            st[3] = time.monotonic()
                            poller.unregister(fd)
                tick += 1.0
            for fd, _ev in poller.poll(max(0, int((tick - time.monotonic()) * 1000))):
                st = conns[fd]
                if st[3] is not None:
                    continue
                try:
                    d = st[0].recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    d = b""
                if not d:
                    st[3] = time.monotonic()
                    poller.unregister(fd)
    finally:
        for st in conns.values():
            st[0].close()
        c.stop()
    times = sorted(st[3] - st[1] for st in conns.values() if st[3] is not None)
    within = sum(1 for t in times if t <= bound_s)
    fig.bound(db.kind, 2, what, "%d of %d closed by the collector within %.0f s (first after %.1f s, "
              "last after %.1f s, %d header bytes sent on the longest)"
              % (within, n, bound_s, times[0] if times else float("nan"),
                 times[-1] if times else float("nan"), max(st[2] for st in conns.values())),
              within == n, "all %d within %.0f s" % (n, bound_s))


def attack_one_host(binary, db, matrix, report, work, fig):
    """3: 127.0.0.2 holding 1,100 slow connections, the collector under `ulimit -n 1024`."""
    what = "127.0.0.2 holding 1,100 slow connections, collector at 1,024 files"
    n, bound_s = 1100, 2.0
    c = Collector(binary, db.url, work, "a3", nofile=1024)
    stop = threading.Event()
    ready = threading.Event()
    st = {"opened": 0, "closed": 0, "open": 0, "failed": 0}

    def attacker():
        sel = selectors.DefaultSelector()
        open_ = set()
        last_byte = 0.0
        while not stop.is_set():
            # Re-open, once a second, what the collector closed: hold 1,100 at all times.
            while len(open_) < n and not stop.is_set():
                s = socket.socket()
                try:
                    s.bind(("127.0.0.2", 0))
                    s.settimeout(5)
                    s.connect((c.host, c.port))
                    s.setblocking(False)
                    s.send(b"P")
                except OSError:
                    s.close()
                    st["failed"] += 1
                    break
                st["opened"] += 1
                open_.add(s)
                sel.register(s, selectors.EVENT_READ)
            st["open"] = len(open_)
            ready.set()
            t_round = time.monotonic() + 1.0
            while time.monotonic() < t_round and not stop.is_set():
                for key, _ in sel.select(0.05):
                    s = key.fileobj
                    try:
                        d = s.recv(4096)
                    except BlockingIOError:
                        continue
                    except OSError:
                        d = b""
                    if not d:
                        sel.unregister(s)
                        s.close()
                        open_.discard(s)
                        st["closed"] += 1
                if time.monotonic() - last_byte >= 1.0:
                    last_byte = time.monotonic()
                    for s in list(open_):
                        try:
                            s.send(b"O")
                        except OSError:
                            pass
            st["open"] = len(open_)
        for s in open_:
            s.close()

    try:
        # The collector sees 127.0.0.2 as the peer (a 404 has its access-log line).
        request(c, "GET", "/nowhere", source="127.0.0.2")
        seen = "access: 127.0.0.2 GET /nowhere 404" in c.stderr()
        t = threading.Thread(target=attacker)
        t.start()
        ready.wait(60)
        time.sleep(1.0)  # one round of re-opening
        held_before = st["open"]
        spool = os.path.join(work, "a3-spool")
        t0 = time.perf_counter()
        up = subprocess.run([matrix, "upload", "--url", c.url, "--token-file", os.path.join(work, "tokens"),
                             "--spool", spool, "--timeout", "5s", report],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        wall = time.perf_counter() - t0
        stop.set()
        t.join()
        accept_errors = c.stderr().count("usbperf-collect: accept:")
    finally:
        stop.set()
        c.stop()
    rid = report_id(report)
    stored = rid in db.ids()
    fig.info(db.kind, 3, what, "the collector sees the peer as 127.0.0.2: %s; the attacker held %d "
             "open at the upload, opened %d, %d closed by the collector, %d connects failed; %d accept "
             "errors logged" % ("yes" if seen else "NO", held_before, st["opened"], st["closed"],
                                st["failed"], accept_errors))
    fig.bound(db.kind, 3, what, "upload from 127.0.0.1 exited %d in %.2f s, report %s %s"
              % (up.returncode, wall, rid, "stored" if stored else "NOT stored"),
              up.returncode == 0 and wall <= bound_s and stored and seen,
              "exit 0 within %.0f s, stored" % bound_s)
    if up.returncode != 0:
        print(up.stderr.strip()[-2000:], file=sys.stderr)


def attack_concurrent_uploads(binary, db, reports, work, fig):
    """4: 1,000 threads, one report each, all at once."""
    what = "1,000 concurrent uploads"
    bodies = [(report_id(p), open(p, "rb").read()) for p in reports]
    n = len(bodies)
    c = Collector(binary, db.url, work, "a4")
    res = [None] * n
    old_stack = threading.stack_size(512 << 10)
    barrier = threading.Barrier(n + 1)

    def one(i):
        rid, body = bodies[i]
        # 1,000 units, one address each (127.0.10.1 ...).
        src = "127.0.%d.%d" % (10 + i // 250, 1 + i % 250)
        out = {"status": None, "stored": None, "503": 0, "resets": 0, "errors": []}
        barrier.wait()
        for _ in range(60):
            conn = http.client.HTTPConnection(c.host, c.port, timeout=60, source_address=(src, 0))
            try:
                conn.request("POST", PATH, body=body, headers={
                    "Authorization": "Bearer " + TOKEN, "Content-Type": "application/yaml",
                    "X-Usbperf-Report-Id": rid})
                r = conn.getresponse()
                data = r.read()
                if r.status == 503:
                    out["503"] += 1
                    time.sleep(float(r.getheader("Retry-After") or 1))
                    continue
                out["status"] = r.status
                try:
                    out["stored"] = json.loads(data).get("stored")
                except ValueError:
                    pass
                break
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected) as e:
                out["resets"] += 1
                out["errors"].append(repr(e))
                time.sleep(1)
            except OSError as e:
                out["errors"].append(repr(e))
                time.sleep(1)
            finally:
                conn.close()
        res[i] = out

    try:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        threading.stack_size(old_stack)
        barrier.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        peak = c.mem("VmHWM")
    finally:
        c.stop()
    ids = db.ids()
    ours = set(r for r, _ in bodies)
    acked = set(bodies[i][0] for i, r in enumerate(res) if r and r["status"] in (200, 201))
    lost = len((ours - set(ids)) | (ours - acked))
    twice = len(ids) - len(set(ids))
    devices = db.devices()
    resets = sum(r["resets"] for r in res if r)
    n503 = sum(r["503"] for r in res if r)
    dup_answers = sum(1 for r in res if r and r["stored"] == "duplicate")
    others = sorted(set(r["status"] for r in res if r and r["status"] not in (200, 201)), key=str)
    errors = [e for r in res if r for e in r["errors"]]
    fig.info(db.kind, 4, what, "1,000 threads, one report each, from 1,000 source addresses, in %.1f s; "
             "%d answers 503 (sent again after Retry-After), %d answered \"duplicate\" after a retry%s"
             % (wall, n503, dup_answers, (", other answers %s" % others) if others else ""))
    fig.bound(db.kind, 4, what, "%d of %d stored" % (len(set(ids) & ours), n), set(ids) >= ours, "%d" % n)
    fig.bound(db.kind, 4, what, "%d lost (not stored or never acknowledged)" % lost, lost == 0, "0")
    fig.bound(db.kind, 4, what, "%d stored twice (%d rows, %d distinct ids, %d device rows, 2 a report)"
              % (twice + max(0, devices - 2 * len(set(ids))), len(ids), len(set(ids)), devices),
              twice == 0 and devices == 2 * len(set(ids)), "0")
    fig.bound(db.kind, 4, what, "%d connection resets or closes without an answer seen by clients%s"
              % (resets, (" (%s)" % errors[0]) if errors else ""), resets == 0, "0")
    fig.bound(db.kind, 4, what, "collector peak memory (VmHWM) %.1f MB" % (peak / MB), peak <= 300 * MB,
              "300 MB")


def attack_sigterm(binary, db, work, fig):
    """5: SIGTERM while 20 connections send their head one byte a second."""
    what = "SIGTERM with 20 slow connections open"
    c = Collector(binary, db.url, work, "a5")
    socks = []
    stop = threading.Event()

    def trickle():
        while not stop.is_set():
            for s in list(socks):
                try:
                    s.send(b"P")
                except OSError:
                    pass
            stop.wait(1.0)

    t = threading.Thread(target=trickle)
    exited = []
    # A blocking wait, in its own thread: the exit is seen when it happens (Popen.wait with a
    # timeout polls, up to 50 ms late).
    waiter = threading.Thread(target=lambda: (c.proc.wait(), exited.append(time.monotonic())))
    try:
        for _ in range(19):
            socks.append(connect(c, "127.0.7.1"))
        t.start()
        time.sleep(1.0)
        # The worst moment, as when a host keeps opening slow connections: the last one
        # arrives just before SIGTERM, its header timeout has all of its 10 s to run.
        last = connect(c, "127.0.7.1")
        last.send(b"P")
        socks.append(last)
        time.sleep(0.02)  # accepted
        waiter.start()
        t0 = time.monotonic()
        c.proc.send_signal(signal.SIGTERM)
        waiter.join(60)
        took = (exited[0] if exited else time.monotonic()) - t0
    finally:
        stop.set()
        if t.is_alive():
            t.join()
        for s in socks:
            s.close()
        c.stop()
        if waiter.is_alive():
            waiter.join()
    fig.bound(db.kind, 5, what, "exited %s %.3f s after SIGTERM (the last connection opened 0.02 s "
              "before it)" % (c.proc.returncode, took), took <= 10.0, "10 s")


def fill(mnt):
    """Writes mnt/fill until ENOSPC; its size."""
    path = os.path.join(mnt, "fill")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    n = 0
    try:
        for chunk in (1 << 20, 4096):
            buf = b"\0" * chunk
            while True:
                try:
                    n += os.write(fd, buf)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return path, n


def readyz_phases(binary, db_url, kind, mnt, report, work, fig):
    what = "/readyz and a full filesystem"
    c = Collector(binary, db_url, work, "a6")
    try:
        def ready():
            s, _, b = request(c, "GET", "/readyz")
            return s, b.decode(errors="replace").strip()

        def until(want, within=3.0):
            t_end = time.monotonic() + within
            while True:
                s, b = ready()
                if s == want or time.monotonic() >= t_end:
                    return s, b
                time.sleep(0.1)

        s0, _ = until(200)
        path, filled = fill(mnt)
        s1, b1 = until(503)
        up, _, ub = request(c, "POST", PATH, body=open(report, "rb").read(), headers={
            "Authorization": "Bearer " + TOKEN, "Content-Type": "application/yaml"})
        os.unlink(path)
        s2, _ = until(200)
        same = c.proc.poll() is None
        pid = c.proc.pid
    finally:
        c.stop()
    fig.bound(kind, 6, what, "before: %d" % s0, s0 == 200, "200")
    fig.bound(kind, 6, what, "filesystem full (%.1f MiB written until ENOSPC): %d %s"
              % (filled / 1048576.0, s1, b1[:160]), s1 == 503, "503")
    fig.info(kind, 6, what, "an upload while full was answered %d %s"
             % (up, ub.decode(errors="replace").strip()[:160]))
    fig.bound(kind, 6, what, "room again: %d, the same process (pid %d) %s" % (s2, pid,
              "still running" if same else "EXITED"), s2 == 200 and same, "200, no restart")


def mount_tmpfs(mnt, size, fig, kind):
    os.makedirs(mnt)
    if os.geteuid() != 0:
        fig.skipped(kind, 6, "/readyz and a full filesystem", "mounting a tmpfs needs root")
        return False
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0700" % size, "tmpfs", mnt],
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fig.skipped(kind, 6, "/readyz and a full filesystem", "mount -t tmpfs: " + r.stderr.strip())
        return False
    return True


def umount(mnt):
    if subprocess.run(["umount", mnt], stderr=subprocess.DEVNULL).returncode != 0:
        subprocess.run(["umount", "-l", mnt])


def attack_full_sqlite(binary, report, work, fig):
    """6, SQLite: the database file on a 4 MiB tmpfs."""
    mnt = os.path.join(work, "sqlite-full")
    if not mount_tmpfs(mnt, "4m", fig, "sqlite"):
        return
    try:
        readyz_phases(binary, "sqlite:" + os.path.join(mnt, "r.db"), "sqlite", mnt, report, work, fig)
    finally:
        umount(mnt)


def attack_full_postgres(binary, pg, report, work, fig):
    """6, PostgreSQL: a database whose tablespace is a 16 MiB tmpfs (the WAL stays on the data
    directory's filesystem, as on a server with pg_wal on its own disk)."""
    mnt = os.path.join(work, "pg-full")
    if not mount_tmpfs(mnt, "16m", fig, "postgres"):
        return
    try:
        pw = pwd.getpwnam("postgres")
        os.chown(mnt, pw.pw_uid, pw.pw_gid)
        psql(pg.url, "CREATE TABLESPACE full_ts LOCATION '%s'" % mnt)
        psql(pg.url, "CREATE DATABASE full_db TABLESPACE full_ts")
        try:
            readyz_phases(binary, pg.url.rsplit("/", 1)[0] + "/full_db", "postgres", mnt, report, work, fig)
        finally:
            psql(pg.url, "DROP DATABASE full_db")
            psql(pg.url, "DROP TABLESPACE full_ts")
    finally:
        umount(mnt)


def matrix_bin():
    p = os.environ.get("USBPERF_MATRIX_BIN")
    if p:
        if not os.path.isfile(p):
            sys.exit("bench-collect: USBPERF_MATRIX_BIN=%s is not a file" % p)
        return p
    subprocess.run(["cargo", "build", "--locked", "-q", "--bin", "usbperf-matrix",
                    "--manifest-path", os.path.join(ROOT, "Cargo.toml")], check=True)
    out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps",
                          "--manifest-path", os.path.join(ROOT, "Cargo.toml")],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    return os.path.join(json.loads(out)["target_directory"], "debug", "usbperf-matrix")


def attack_page(binary, fill, matrix, kind, pg, reports_dir, single, work, fig):
    """7: the page port: distinct queries and slow readers, a unit uploading beside them."""
    what = "page port"
    db = Db(kind, work, pg, "a7")
    subprocess.run([fill, "--db", db.url, "--from", reports_dir, "--count", "10000"], check=True,
                   stdout=subprocess.DEVNULL)
    c = Collector(binary, db.url, work, "a7", extra=["--page-listen", "127.0.0.1:0",
                                                     "--write-timeout", "5"], page=True)
    try:
        def get(path, src):
            conn = http.client.HTTPConnection(c.host, c.page_port, timeout=120,
                                              source_address=(src, 0))
            try:
                conn.request("GET", path)
                r = conn.getresponse()
                return r.status, len(r.read())
            finally:
                conn.close()

        status, size = get("/fleet", "127.0.0.1")
        if status != 200:
            fig.skipped(kind, 7, what, "GET /fleet answered %d" % status)
            return
        get("/fleet.json", "127.0.0.1")
        before = c.mem("VmRSS")
        # The peak from here on.
        with open("/proc/%d/clear_refs" % c.proc.pid, "w") as f:
            f.write("5")
        answers = {}
        lock = threading.Lock()
        # Before every report of the fleet: each query aggregates all 10,000.
        base = 1577836800  # 2020-01-01

        def queries(k):
            src = "127.0.50.%d" % (k + 1)
            for i in range(k, 10000, 8):
                stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(base + i))
                st, _ = get("/fleet.json?since=" + stamp, src)
                with lock:
                    answers[st] = answers.get(st, 0) + 1

        closed = []

        def slow_reader(n):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.bind(("127.0.60.%d" % (1 + n % 8), 0))
            s.settimeout(120)
            s.connect((c.host, c.page_port))
            # 16 pages asked at once (pipelined): more than the socket buffers hold, so the
            # collector's writes stall on this reader.
            s.sendall(b"GET /fleet HTTP/1.1\r\nHost: x\r\n\r\n" * 16)
            t0 = time.monotonic()
            # Read nothing for longer than the write timeout, then whatever the kernel holds,
            # until the collector ends the connection: cut while writing (a page larger than
            # the socket buffers), or idle after its answer (the header timeout).
            time.sleep(6)
            got = 0
            try:
                while True:
                    b = s.recv(1 << 16)
                    if not b:
                        break
                    got += len(b)
            except OSError:
                pass
            with lock:
                closed.append((time.monotonic() - t0, got))
            s.close()

        uploads = []

        def unit():
            for i in range(20):
                st = subprocess.run([matrix, "upload", "--url", c.url, "--token-file",
                                     os.path.join(work, "tokens"), "--spool",
                                     os.path.join(work, "a7-spool-%d" % i), single],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                uploads.append(st.returncode)
                time.sleep(0.5)

        threads = ([threading.Thread(target=queries, args=(k,)) for k in range(8)]
                   + [threading.Thread(target=slow_reader, args=(n,)) for n in range(64)]
                   + [threading.Thread(target=unit)])
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        peak = c.mem("VmHWM")
    finally:
        c.stop()
    fig.info(kind, 7, what, "10,000 distinct since= queries (%s) in %.1f s; the page of 10,000 reports "
             "is %.1f MB" % (", ".join("%d x %d" % (n, st) for st, n in sorted(answers.items())), wall,
                             size / MB))
    fig.bound(kind, 7, what, "collector memory growth (VmHWM over VmRSS before) %.1f MB"
              % ((peak - before) / MB), peak - before <= 200 * MB, "200 MB")
    fig.bound(kind, 7, what, "%d of 20 uploads beside it exited 0" % uploads.count(0),
              uploads.count(0) == 20, "20")
    slowest = max(t for t, _ in closed) if closed else float("inf")
    fig.bound(kind, 7, what, "%d of 64 slow readers closed, the last after %.1f s (read at most %.1f MB "
              "of the 16 pages asked, %.1f MB)"
              % (len(closed), slowest, max((g for _, g in closed), default=0) / MB, 16 * size / MB),
              len(closed) == 64 and slowest <= 5 + 15 + 6, "64, within 26 s of the request")


def attack_stalled_bodies(binary, db, matrix, report, work, fig):
    """8: 576 stalled bodies without a token from 9 addresses, a unit uploading beside them."""
    what = "576 stalled bodies"
    c = Collector(binary, db.url, work, "a8")
    socks = []
    try:
        t0 = time.monotonic()
        for a in range(9):
            for _ in range(64):
                s = connect(c, "127.0.70.%d" % (a + 1))
                s.sendall(b"POST /api/v1/reports HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Type: application/yaml\r\nContent-Length: 65536\r\n\r\n")
                socks.append(s)
        t1 = time.monotonic()
        up = subprocess.run([matrix, "upload", "--url", c.url, "--token-file",
                             os.path.join(work, "tokens"), "--spool", os.path.join(work, "a8-spool"),
                             report], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        upload_s = time.monotonic() - t1
        closed = 0
        for s in socks:
            s.settimeout(max(0.1, 15 - (time.monotonic() - t0)))
            try:
                while s.recv(65536):
                    pass
                closed += 1
            except socket.timeout:
                pass
            except OSError:
                # A reset is a close too.
                closed += 1
        all_s = time.monotonic() - t0
    finally:
        for s in socks:
            s.close()
        c.stop()
    fig.bound(db.kind, 8, what, "an upload from a 10th address exited %d in %.2f s"
              % (up.returncode, upload_s), up.returncode == 0 and upload_s <= 2.0, "0, within 2 s")
    fig.bound(db.kind, 8, what, "%d of 576 closed by the collector, all within %.1f s" % (closed, all_s),
              closed == 576 and all_s <= 15.0, "576 within 15 s")


def attack(binary, dbs):
    # 1,100 sockets of attack 3 and 1,000 of attack 4, and their files, in this process.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 8192
    if hard != resource.RLIM_INFINITY and hard < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
        except (ValueError, OSError):
            sys.exit("bench-collect: --attack needs %d open files; the hard limit is %d (run as root)"
                     % (want, hard))
    else:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    matrix = matrix_bin()
    fig = Figures()
    work = tempfile.mkdtemp(prefix="bench-collect-attack-")
    os.chmod(work, 0o755)
    try:
        tokens = os.path.join(work, "tokens")
        with open(tokens, "w") as f:
            f.write(TOKEN + "\n")
        os.chmod(tokens, 0o600)
        fleet = os.path.join(work, "fleet")
        fleet_gen(["--units", "1000", "--out", fleet, "--report-ids", "--seed", "23"])
        reports = sorted(glob.glob(os.path.join(fleet, "*")))
        one = os.path.join(work, "one")
        fleet_gen(["--units", "1", "--out", one, "--report-ids", "--seed", "24"])
        single = glob.glob(os.path.join(one, "*"))[0]
        subprocess.run(["cargo", "build", "--release", "--locked", "-q", "--manifest-path",
                        os.path.join(ROOT, "collector", "Cargo.toml"), "--example", "fleet-db-fill"],
                       check=True)
        fill = os.path.join(target_dir(), "release", "examples", "fleet-db-fill")
        distinct = os.path.join(work, "distinct")
        fleet_gen(["--units", "100", "--schema", "2", "--out", distinct, "--seed", "25"])
        print("bench-collect --attack: release build, a fresh collector and database per attack, "
              "client sockets from 127.0.0.0/8 source addresses", flush=True)
        for kind in dbs:
            pg = Postgres(work) if kind == "postgres" else None
            t0 = time.monotonic()
            try:
                attack_unauthenticated_bodies(binary, Db(kind, work, pg, "a1"), work, fig)
                attack_slow_headers(binary, Db(kind, work, pg, "a2"), work, fig)
                attack_one_host(binary, Db(kind, work, pg, "a3"), matrix, single, work, fig)
                attack_concurrent_uploads(binary, Db(kind, work, pg, "a4"), reports, work, fig)
                attack_sigterm(binary, Db(kind, work, pg, "a5"), work, fig)
                attack_page(binary, fill, matrix, kind, pg, distinct, single, work, fig)
                attack_stalled_bodies(binary, Db(kind, work, pg, "a8"), matrix, single, work, fig)
                if pg:
                    attack_full_postgres(binary, pg, single, work, fig)
                else:
                    attack_full_sqlite(binary, single, work, fig)
            finally:
                if pg:
                    pg.stop()
            print("  %-8s attacks took %.0f s" % (kind, time.monotonic() - t0), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if fig.missed:
        print("bench-collect --attack: %d bound(s) MISSED: %s" % (len(fig.missed), "; ".join(fig.missed)))
        return 1
    if fig.not_run:
        print("bench-collect --attack: NOT RUN: %s" % "; ".join(fig.not_run))
        return 2
    print("bench-collect --attack: every bound held")
    return 0



def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=1000)
    ap.add_argument("--uploaders", type=int, default=50)
    ap.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    ap.add_argument("--baseline-rev", help="also run the collector of this git revision")
    ap.add_argument("--runs", type=int, default=0)
    ap.add_argument("--attack", action="store_true",
                    help="play the attacks of the description and check their bounds")
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "--locked", "-q", "--manifest-path",
                    os.path.join(ROOT, "collector", "Cargo.toml")], check=True)
    binary = os.path.join(target_dir(), "release", "usbperf-collect")
    if a.attack:
        sys.exit(attack(binary, ["sqlite", "postgres"] if a.db == "both" else [a.db]))
    work = tempfile.mkdtemp(prefix="bench-collect-")
    os.chmod(work, 0o755)
    pg = None
    try:
        binaries = [("this", binary)]
        if a.baseline_rev:
            binaries.insert(0, ("baseline", build_rev(a.baseline_rev, work)))
        runs = a.runs or (3 if a.baseline_rev else 1)
        fleet = os.path.join(work, "fleet")
        fleet_gen(["--units", str(a.reports), "--out", fleet, "--report-ids", "--seed", "21"])
        reports = sorted(glob.glob(os.path.join(fleet, "*")))
        size = sum(os.path.getsize(p) for p in reports) / len(reports)
        print("bench-collect: %d reports (%.0f KiB each), %d concurrent uploaders, release build"
              % (len(reports), size / 1024, a.uploaders))
        dbs = ["sqlite", "postgres"] if a.db == "both" else [a.db]
        if "postgres" in dbs:
            pg = Postgres(work)
        n = 0
        for db in dbs:
            through = {label: [] for label, _ in binaries}
            for run in range(runs):
                for label, exe in binaries:
                    n += 1
                    if db == "sqlite":
                        path = os.path.join(work, "r%d.db" % n)
                        url = "sqlite:" + path

                        def query(sql, path=path):
                            try:
                                return sqlite3.connect(path).execute(sql).fetchone()[0]
                            except sqlite3.OperationalError:
                                return None
                    else:
                        name = "ingest%d" % n
                        subprocess.run(["psql", pg.url, "-q", "-c", "CREATE DATABASE " + name],
                                       check=True)
                        url = pg.url.rsplit("/", 1)[0] + "/" + name

                        def query(sql, url=url):
                            r = subprocess.run(["psql", url, "-At", "-c", sql],
                                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                               text=True)
                            return int(r.stdout.strip()) if r.returncode == 0 else None
                    r = bench(exe, url, query, reports, a.uploaders, work)
                    through[label].append(r["n"] / r["wall"])
                    print("  %-8s %-8s run %d: stored %d of %d, %d errors, %.2f s, %.0f reports/s, "
                          "latency p50 %.1f ms, p99 %.1f ms, max %.1f ms, summarised after %s"
                          % (db, label, run + 1, r["stored"], len(reports), len(r["errors"]),
                             r["wall"], r["n"] / r["wall"], r["p50"] * 1e3, r["p99"] * 1e3,
                             r["max"] * 1e3,
                             "-" if r["folded"] is None else "%.2f s" % r["folded"]),
                          flush=True)
            if a.baseline_rev:
                med = {k: sorted(v)[len(v) // 2] for k, v in through.items()}
                print("  %-8s median reports/s: baseline (%s) %.0f, this %.0f: ratio %.2f"
                      % (db, a.baseline_rev, med["baseline"], med["this"],
                         med["this"] / med["baseline"]))
    finally:
        if pg:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)


def build_rev(rev, work):
    """The release collector of git revision `rev`, built in a worktree under `work`."""
    tree = os.path.join(work, "baseline")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", tree, rev], check=True)
    try:
        subprocess.run(["cargo", "build", "--release", "--locked", "-q", "--manifest-path",
                        os.path.join(tree, "collector", "Cargo.toml")], check=True,
                       env=dict(os.environ, CARGO_TARGET_DIR=os.path.join(work, "baseline-target")))
        exe = os.path.join(work, "usbperf-collect-" + rev)
        shutil.copy(os.path.join(work, "baseline-target", "release", "usbperf-collect"), exe)
        return exe
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], check=True)


if __name__ == "__main__":
    main()
