#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Run the layer's run-ptest as an image runs it, and check its ptest lines.

The package is staged the way the recipe and oe-core install it: run-ptest with its @...@
paths replaced (do_install_ptest), the recorded device trees made by umockdev2sysfs
with their .expect files, the configuration and the board profiles (do_install), the test
binaries next to run-ptest under their cargo names, and then the runner ptest-cargo.bbclass
appends to an existing run-ptest, in the scarthgap and the wrynose form. run-ptest runs in
busybox sh with only busybox's applets on PATH (a minimal image), from its own directory as
ptest-runner starts it. Checked on its standard output:

  - every line is `PASS: NAME`, `FAIL: NAME` or `SKIP: NAME (REASON)`, each NAME once;
  - every test binary has a line, and the exit status is 1 exactly when a line says FAIL;
  - nothing of the runner ptest-cargo appends ran.

Modes:
  --logic --matrix HOST-BINARY
      fake libtest binaries with known output (ok, FAILED, ignored with and without a
      reason, should_panic, a crash, an empty binary, integration binaries) and the host's
      usbperf-matrix, with a broken board profile and a wrong .expect planted: the exact
      lines are checked, the planted faults must FAIL and the rest must pass.
  --qemu aarch64 --binaries LIST --matrix TARGET-BINARY
      the cross-built test binaries (LIST: their paths, as ptest-cargo's do_compile_ptest_cargo
      finds them) and usbperf-matrix run under qemu-user; each binary's tests as `--list`
      names them must have exactly one line each, ignored ones SKIP, and everything must pass
      (the loop device matrix included: run as root).
Needs busybox (apt), python3, umockdev-run for the comparison of the fixture trees.
"""

import argparse
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILES = os.path.join(ROOT, "recipes-test", "usbperf", "files")
# tests/fixtures/qemu/NAME.umockdev, the trees the recipe installs
with open(os.path.join(ROOT, "recipes-test", "usbperf", "usbperf.inc")) as _f:
    FIXTURES = re.search(r'^USBPERF_PTEST_TREES = "([^"]*)"', _f.read(), re.M).group(1).split()
QEMU = {"aarch64": [shutil.which("qemu-aarch64-static") or "qemu-aarch64-static", "-E", "LD_LIBRARY_PATH=/usr/lib/aarch64-linux-gnu:/lib/aarch64-linux-gnu"]}
HASHED = re.compile(r"-[0-9a-f]{16}$")  # cargo's name of a test binary: NAME-HASH
LINE = re.compile(r"^(?:(PASS|FAIL): (\S+)|(SKIP): (\S+) \((.+)\))$")
PTEST_PATH = "usr/lib/usbperf/ptest"

# ptest-cargo.bbclass's do_install_ptest_cargo, appending to a run-ptest the recipe ships.
def cargo_tail(release, paths):
    if release == "scarthgap":
        return '\necho ""\necho "## starting to run rust tests ##"\n' + "".join("%s \n" % p for p in paths)
    out = '\necho ""\necho "## starting to run rust tests ##"\nif [ -z "$rc" ]; then rc=0; fi\n'
    for p in paths:
        out += 'if ! %s \nthen\n    rc=1\n    echo "FAIL: %s"\nelse\n    echo "PASS: %s"\nfi\n' % (p, p, p)
    return out + "exit $rc\n"


def write_exec(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


def stage(dest, matrix_cmd, binaries, release, extra_profiles=(), extra_trees=()):
    """The installed package under DEST; returns the ptest directory. binaries: (cargo name,
    executable file or None, wrapper text or None)."""
    bindir = os.path.join(dest, "usr/bin")
    sysconfdir = os.path.join(dest, "etc")
    datadir = os.path.join(dest, "usr/share")
    ptest = os.path.join(dest, PTEST_PATH)
    for d in (bindir, os.path.join(sysconfdir, "usbperf"), os.path.join(datadir, "usbperf/profiles"), ptest):
        os.makedirs(d, exist_ok=True)
    write_exec(os.path.join(bindir, "usbperf-matrix"), "#!/bin/sh\nexec %s \"$@\"\n" % matrix_cmd)
    shutil.copy(os.path.join(FILES, "usbperf.yaml"), os.path.join(sysconfdir, "usbperf/usbperf.yaml"))
    for p in sorted(os.listdir(os.path.join(ROOT, "profiles/boards"))):
        shutil.copy(os.path.join(ROOT, "profiles/boards", p), os.path.join(datadir, "usbperf/profiles"))
    for name, text in extra_profiles:
        with open(os.path.join(datadir, "usbperf/profiles", name), "w") as f:
            f.write(text)
    # do_install_ptest: run-ptest's paths, the trees and their expectations
    with open(os.path.join(FILES, "run-ptest")) as f:
        script = f.read()
    for k, v in (("@BINDIR@", bindir), ("@SYSCONFDIR@", sysconfdir), ("@DATADIR@", datadir)):
        script = script.replace(k, v)
    left = re.findall(r"@[A-Z]+@", script)
    assert not left, "run-ptest has paths the staging does not replace: %s" % left
    fixtures = os.path.join(ptest, "fixtures")
    os.makedirs(fixtures)
    for name in FIXTURES:
        subprocess.run([os.path.join(FILES, "umockdev2sysfs"),
                        os.path.join(ROOT, "tests/fixtures/qemu", name + ".umockdev"),
                        os.path.join(fixtures, name)], check=True, stdout=subprocess.DEVNULL)
        shutil.copy(os.path.join(FILES, "ptest-fixtures", name + ".expect"), fixtures)
    for name, source, expect in extra_trees:
        shutil.copytree(os.path.join(fixtures, source), os.path.join(fixtures, name), symlinks=True)
        with open(os.path.join(fixtures, name + ".expect"), "w") as f:
            f.write(expect)
    # do_install_ptest_cargo: the binaries under their own names, its runner appended
    paths = []
    for name, exe, wrapper in binaries:
        target = os.path.join(ptest, name)
        if wrapper is not None:
            write_exec(target, wrapper)
        else:
            shutil.copy2(exe, target)
        paths.append(os.path.join("/", PTEST_PATH, name))  # the path on the target, as the class writes it
    write_exec(os.path.join(ptest, "run-ptest"), script + cargo_tail(release, paths))
    return ptest


def busybox_path(dest):
    """A PATH of busybox applets only, as on a minimal image (plus qemu-user for the wrappers)."""
    bb = shutil.which("busybox")
    if not bb:
        sys.exit("check-ptest: busybox is missing (apt-get install busybox)")
    d = os.path.join(dest, "busybox-bin")
    os.makedirs(d)
    subprocess.run([bb, "--install", "-s", d], check=True)
    return bb, d


def run_ptest(ptest, bb, bbpath):
    # run-ptest names usbperf-matrix by its installed path; PATH is busybox's alone.
    env = {"PATH": bbpath, "TMPDIR": tempfile.gettempdir(), "LC_ALL": "C"}
    p = subprocess.run([bb, "sh", "./run-ptest"], cwd=ptest, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=3600)
    return p.returncode, p.stdout, p.stderr


def check_format(rc, out, binaries, errors):
    """The checks of every mode; returns {name: (status, reason)}."""
    results = {}
    for n, line in enumerate(out.splitlines(), 1):
        m = LINE.match(line)
        if not m:
            errors.append("stdout line %d is not a ptest result line: %r" % (n, line))
            continue
        status, name, reason = (m.group(1), m.group(2), None) if m.group(1) else (m.group(3), m.group(4), m.group(5))
        if name in results:
            errors.append("%s appears twice" % name)
        results[name] = (status, reason)
    if "## starting to run rust tests ##" in out or any(n.startswith("/") for n in results):
        errors.append("the runner ptest-cargo appends ran")
    for name in binaries:
        prefix = name.rsplit("-", 1)[0]
        if not any(r == prefix or r.startswith(prefix + "::") for r in results):
            errors.append("no line for the test binary %s" % name)
    has_fail = any(s == "FAIL" for s, _ in results.values())
    if rc != (1 if has_fail else 0):
        errors.append("exit status %d, but %s FAIL line" % (rc, "a" if has_fail else "no"))
    return results


FAKE_UNIT = """#!/bin/sh
[ "$1" = --list ] && { echo "run-ptest listed a unit test binary" >&2; exit 3; }
cat <<'EOF'

running 5 tests
test a::ok_one ... ok
test a::panics - should panic ... ok
test a::broken ... FAILED
test a::slow ... ignored
test a::long ... ignored, long: run it with --ignored (hours)

failures:

---- a::broken stdout ----
thread 'a::broken' panicked at src/a.rs:1:1:
assertion failed

failures:
    a::broken

test result: FAILED. 2 passed; 1 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.01s

EOF
echo "a line a test wrote to stderr" >&2
exit 101
"""
FAKE_CRASH = """#!/bin/sh
printf '\\nrunning 2 tests\\ntest b::fine ... ok\\n'
kill -SEGV $$
"""
FAKE_EMPTY = """#!/bin/sh
printf '\\nrunning 0 tests\\n\\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\\n\\n'
"""
FAKE_INTEGRATION = """#!/bin/sh
if [ "$1" != --list ]; then touch "$(dirname "$0")/ran-an-integration-test"; exit 101; fi
printf 'reads_fixtures: test\\nruns_the_binary: test\\nbench_it: bench\\n\\n2 tests, 1 benchmark\\n'
"""
FAKE_INTEGRATION_EMPTY = """#!/bin/sh
printf '0 tests, 0 benchmarks\\n'
"""
INTEGRATION = "integration test: needs the source tree and host tools, run by cargo test on the build host"


def compare_trees():
    """umockdev2sysfs builds, byte for byte and link for link, the tree umockdev builds."""
    if not shutil.which("umockdev-run"):
        print("check-ptest: FAILED: umockdev-run is missing (apt-get install umockdev)", file=sys.stderr)
        return 1
    rc = 0
    with tempfile.TemporaryDirectory(prefix="check-ptest-trees-") as tmp:
        for name in FIXTURES:
            rec = os.path.join(ROOT, "tests/fixtures/qemu", name + ".umockdev")
            ours, theirs = os.path.join(tmp, "ours-" + name), os.path.join(tmp, "umockdev-" + name)
            subprocess.run([os.path.join(FILES, "umockdev2sysfs"), rec, ours], check=True, stdout=subprocess.DEVNULL)
            subprocess.run(["sh", os.path.join(ROOT, "scripts/vm/tools/materialize.sh"), rec, theirs], check=True,
                           stdout=subprocess.DEVNULL)
            d = subprocess.run(["diff", "-r", "--no-dereference", ours, theirs], stdout=subprocess.PIPE, text=True)
            n = sum(len(fs) + len(ds) for _, ds, fs in os.walk(os.path.join(ours, "sys")))
            if d.returncode != 0 or n < 100:
                print("check-ptest: FAILED: %s: umockdev2sysfs and umockdev differ:\n%s" % (name, d.stdout[:2000]),
                      file=sys.stderr)
                rc = 1
            else:
                print("check-ptest: %s: umockdev2sysfs gives umockdev's tree (%d entries)" % (name, n))
    return rc


def logic(args):
    binaries = [
        ("usbperf-0123456789abcdef", FAKE_UNIT),
        ("usbperf-fedcba9876543210", FAKE_CRASH),
        ("usbperf_matrix-00112233445566ff", FAKE_EMPTY),
        ("edges-aaaaaaaaaaaaaaaa", FAKE_INTEGRATION),
        ("empty_suite-bbbbbbbbbbbbbbbb", FAKE_INTEGRATION_EMPTY),
        # not a cargo test binary name (hash not hex): run-ptest must leave it alone
        ("notes-0123456789abcdeg", "#!/bin/sh\nexit 1\n"),
        # ptest-cargo copies the bin target here too (to cargo a bin is a test target)
        ("usbperf-matrix", "#!/bin/sh\ntouch \"$(dirname \"$0\")/ran-usbperf-matrix\"\nexit 2\n"),
    ]
    want = {
        "usbperf::a::ok_one": ("PASS", None),
        "usbperf::a::panics": ("PASS", None),
        "usbperf::a::broken": ("FAIL", None),
        "usbperf::a::slow": ("SKIP", "ignored"),
        "usbperf::a::long": ("SKIP", "long: run it with --ignored (hours)"),
        "usbperf::b::fine": ("PASS", None),
        "usbperf": ("FAIL", None),
        "usbperf_matrix": ("SKIP", "no tests in this binary"),
        "edges::reads_fixtures": ("SKIP", INTEGRATION),
        "edges::runs_the_binary": ("SKIP", INTEGRATION),
        "empty_suite": ("SKIP", "no tests in this binary"),
        "target::dry-run::default": ("PASS", None),
        "target::dry-run::quick": ("PASS", None),
        "target::dry-run::full": ("PASS", None),
        "target::dry-run::broken-board": ("FAIL", None),
        "target::list-sysfs-root::arm64-mixed": ("PASS", None),
        "target::list-sysfs-root::armv7-emmc-board": ("PASS", None),
        "target::list-sysfs-root::arm64-mismatch": ("FAIL", None),
        "target::loop-quick-matrix": ("PASS", None),
    }
    for p in sorted(os.listdir(os.path.join(ROOT, "profiles/boards"))):
        want["target::dry-run::" + p[:-len(".yaml")]] = ("PASS", None)
    rc_all = compare_trees()
    for release in ("scarthgap", "wrynose"):
        with tempfile.TemporaryDirectory(prefix="check-ptest-") as dest:
            ptest = stage(dest, os.path.abspath(args.matrix), [(n, None, w) for n, w in binaries], release,
                          extra_profiles=[("broken-board.yaml", "profile: quick\nsizee: 1\n")],
                          extra_trees=[("arm64-mismatch", "arm64-mixed", "sda usb\nsdz usb\n")])
            bb, bbpath = busybox_path(dest)
            rc, out, err = run_ptest(ptest, bb, bbpath)
            errors = []
            results = check_format(rc, out, [n for n, _ in binaries if HASHED.search(n)], errors)
            for name in sorted(set(want) | set(results)):
                if results.get(name) != want.get(name):
                    errors.append("%s: got %s, want %s" % (name, results.get(name), want.get(name)))
            if os.path.exists(os.path.join(ptest, "ran-an-integration-test")):
                errors.append("an integration test binary was run (not only listed)")
            if os.path.exists(os.path.join(ptest, "ran-usbperf-matrix")):
                errors.append("the usbperf-matrix copy ptest-cargo installs was run as a test")
            if "a line a test wrote to stderr" not in err or "assertion failed" not in err:
                errors.append("a failed binary's output is not on standard error")
            if "sdz/usb" not in err:
                errors.append("the wrong .expect line is not named on standard error")
            leftovers = [f for f in os.listdir(tempfile.gettempdir()) if f.startswith("usbperf-ptest.")]
            if leftovers:
                errors.append("run-ptest left its temporary directory: %s" % leftovers)
            rc_all |= report(release + " (fake binaries, host usbperf-matrix)", rc, out, err, errors)
    return rc_all


def qemu(args):
    with open(args.binaries) as f:
        installed = [l.strip() for l in f if l.strip()]
    exes = [e for e in installed if HASHED.search(os.path.basename(e))]
    if not exes:
        sys.exit("check-ptest: %s lists no test binary" % args.binaries)
    q = " ".join(QEMU[args.qemu])
    binaries = [(os.path.basename(e), None, "#!/bin/sh\nexec %s %s \"$@\"\n" % (q, e)) for e in installed]
    errors = []
    with tempfile.TemporaryDirectory(prefix="check-ptest-") as dest:
        ptest = stage(dest, "%s %s" % (q, os.path.abspath(args.matrix)), binaries, "wrynose")
        bb, bbpath = busybox_path(dest)
        rc, out, err = run_ptest(ptest, bb, bbpath)
        results = check_format(rc, out, [os.path.basename(e) for e in exes], errors)
        for exe in exes:
            prefix = os.path.basename(exe).rsplit("-", 1)[0]
            listed = subprocess.run(QEMU[args.qemu] + [exe, "--list"], stdout=subprocess.PIPE, text=True).stdout
            names = {prefix + "::" + l[:-len(": test")] for l in listed.splitlines() if l.endswith(": test")}
            ignored = subprocess.run(QEMU[args.qemu] + [exe, "--list", "--ignored"], stdout=subprocess.PIPE,
                                     text=True).stdout
            ignored = {prefix + "::" + l[:-len(": test")] for l in ignored.splitlines() if l.endswith(": test")}
            got = {r for r in results if r.startswith(prefix + "::")}
            if names != got:
                errors.append("%s: tests without a line: %s; lines without a test: %s"
                              % (prefix, sorted(names - got)[:5], sorted(got - names)[:5]))
            for t in ignored:
                if results.get(t, ("SKIP",))[0] != "SKIP":
                    errors.append("%s is ignored but says %s" % (t, results[t][0]))
            print("check-ptest: %s: %d tests listed, %d ignored" % (os.path.basename(exe), len(names), len(ignored)))
        for name, (status, reason) in sorted(results.items()):
            if status != "PASS" and not (status == "SKIP" and not name.startswith("target::")):
                errors.append("%s: %s%s" % (name, status, " (%s)" % reason if reason else ""))
        for want in ["target::dry-run::default", "target::dry-run::quick", "target::dry-run::full",
                     "target::loop-quick-matrix"] + ["target::list-sysfs-root::" + t for t in FIXTURES]:
            if want not in results:
                errors.append("no line for %s" % want)
    return report("%s under qemu-user (cross-built test binaries and usbperf-matrix)" % args.qemu, rc, out, err, errors)


def report(what, rc, out, err, errors):
    lines = out.splitlines()
    counts = {s: sum(1 for l in lines if l.startswith(s + ":")) for s in ("PASS", "FAIL", "SKIP")}
    print("check-ptest: %s: exit %d, %d lines: %d PASS, %d FAIL, %d SKIP"
          % (what, rc, len(lines), counts["PASS"], counts["FAIL"], counts["SKIP"]))
    if errors:
        sys.stdout.write("".join("  run-ptest stderr: %s\n" % l for l in err.splitlines()[-40:]))
        for e in errors:
            print("check-ptest: FAILED: %s: %s" % (what, e), file=sys.stderr)
        return 1
    print("check-ptest: OK: %s" % what)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--logic", action="store_true")
    mode.add_argument("--qemu", choices=sorted(QEMU))
    ap.add_argument("--matrix", required=True, help="the usbperf-matrix binary to install")
    ap.add_argument("--binaries", help="--qemu: file listing the test binaries")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("check-ptest: run as root (the quick matrix attaches a loop device)")
    if args.logic:
        return logic(args)
    if not args.binaries:
        ap.error("--qemu needs --binaries")
    return qemu(args)


if __name__ == "__main__":
    sys.exit(main())
