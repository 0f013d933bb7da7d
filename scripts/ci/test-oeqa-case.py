#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Run the layer's testimage case (lib/oeqa/runtime/cases/usbperf.py) here, against this
machine, through a minimal fake of the oeqa package.

The fake has what the case imports (OERuntimeTestCase, OEHasPackage, OETestDepends) and a
target whose run() executes the command locally with sh, stderr mixed into the output and
PATH reset as oe-core's SSH target does, and whose copyFrom() copies a file; usbperf-matrix is
the binary given with --matrix. Checked:
  - every test of the case passes against the real binary (the run on a loop device needs
    root, losetup and mkfs.ext4: run as root);
  - with usbperf not in the image's packages each test is skipped, not passed;
  - the case fails where it must: a binary whose run fails its verdict, a report that breaks
    the schema (with jsonschema and with the case's own fallback checks), a test file left on
    the device's filesystem.

Usage: scripts/ci/test-oeqa-case.py --matrix PATH-TO-usbperf-matrix
"""

import argparse
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASE = os.path.join(ROOT, "lib", "oeqa", "runtime", "cases", "usbperf.py")


def fake_oeqa():
    """Modules oeqa.runtime.case, oeqa.runtime.decorator.package, oeqa.core.decorator.depends."""
    class OERuntimeTestCase(unittest.TestCase):
        target = None
        tc = None
        td = {}

    def OEHasPackage(need):
        # oe-core's decorator: skip unless one of the packages is in the image.
        need = {need} if isinstance(need, str) else set(need)

        def wrap(fn):
            def test(self):
                if self.tc.image_packages.isdisjoint(need):
                    self.skipTest("Test requires %s to be installed" % ", or ".join(sorted(need)))
                return fn(self)
            test.__name__ = fn.__name__
            return test
        return wrap

    def OETestDepends(deps):
        return lambda fn: fn

    mods = {}
    for name in ("oeqa", "oeqa.core", "oeqa.core.decorator", "oeqa.core.decorator.depends", "oeqa.runtime",
                 "oeqa.runtime.case", "oeqa.runtime.decorator", "oeqa.runtime.decorator.package"):
        mods[name] = types.ModuleType(name)
    mods["oeqa.runtime.case"].OERuntimeTestCase = OERuntimeTestCase
    mods["oeqa.runtime.decorator.package"].OEHasPackage = OEHasPackage
    mods["oeqa.core.decorator.depends"].OETestDepends = OETestDepends
    sys.modules.update(mods)


class LocalTarget:
    """oe-core's OESSHTarget, run here: (status, output) with stderr in the output."""

    def __init__(self, bindir, fault=None):
        self.path = bindir + ":/usr/sbin:/sbin:/usr/bin:/bin"
        self.fault = fault
        self.commands = []

    def run(self, command, timeout=None, ignore_status=True, raw=False):
        self.commands.append(command)
        p = subprocess.run(["sh", "-c", "export PATH=%s; %s" % (self.path, command)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout or 300)
        if self.fault == "leave-file" and command.startswith("usbperf-matrix run"):
            # A test file the run "forgot" on the device's filesystem.
            subprocess.run(["sh", "-c", "for d in /tmp/usbperf-oeqa.*/mnt; do touch $d/.usbperf-test-0; done"])
        out = p.stdout if raw else p.stdout.decode("utf-8", errors="ignore")
        return p.returncode, out

    def copyFrom(self, remote, local, warn_on_failure=False):
        shutil.copy(remote, local)
        if self.fault == "bad-report":
            with open(local) as f:
                doc = json.load(f)
            doc["status"] = "finished-ish"  # not in the schema's enum
            with open(local, "w") as f:
                json.dump(doc, f)


def load_case():
    spec = importlib.util.spec_from_file_location("usbperf_case", CASE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(mod, bindir, packages, fault=None, names=None):
    cls = mod.UsbperfTest
    cls.target = LocalTarget(bindir, fault)
    cls.tc = types.SimpleNamespace(image_packages=set(packages))
    suite = unittest.TestSuite()
    for name in names or sorted(n for n in dir(cls) if n.startswith("test_")):
        suite.addTest(cls(name))
    buf = io.StringIO()
    result = unittest.TextTestRunner(stream=buf, verbosity=2).run(suite)
    return result, buf.getvalue()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix", required=True)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("test-oeqa-case: run as root (the case attaches a loop device and mounts it)")
    fake_oeqa()
    mod = load_case()
    failures = []

    with tempfile.TemporaryDirectory() as tmp:
        good = os.path.join(tmp, "good")
        os.makedirs(good)
        os.symlink(os.path.abspath(args.matrix), os.path.join(good, "usbperf-matrix"))
        # A usbperf-matrix whose run judges every device failed (a threshold nothing meets).
        failing = os.path.join(tmp, "failing")
        os.makedirs(failing)
        with open(os.path.join(failing, "usbperf-matrix"), "w") as f:
            f.write('#!/bin/sh\nif [ "$1" = run ]; then\n  cfg=$3\n'
                    '  printf "thresholds:\\n  - {select: {class: loop}, workload: seq-write, min_mib_per_s: 1000000}\\n" >> "$cfg"\n'
                    'fi\nexec %s "$@"\n' % os.path.abspath(args.matrix))
        os.chmod(os.path.join(failing, "usbperf-matrix"), 0o755)

        result, log = run(mod, good, {"usbperf"})
        print(log)
        if not result.wasSuccessful() or result.skipped or result.testsRun != 3:
            failures.append("the case does not pass against %s: %d run, %d failures, %d errors, %d skipped"
                            % (args.matrix, result.testsRun, len(result.failures), len(result.errors),
                               len(result.skipped)))
        loops = [c for c in mod.UsbperfTest.target.commands if c.startswith("losetup /dev/")]
        if not loops:
            failures.append("the run test attached no loop device")

        result, log = run(mod, good, {"busybox"})
        if len(result.skipped) != 3 or result.failures or result.errors:
            failures.append("without the usbperf package the tests are not all skipped:\n" + log)

        for fault, bindir, want in (("failed verdict", failing, "verdict"),
                                    ("bad-report", good, "status"),
                                    ("leave-file", good, "test files left behind")):
            result, log = run(mod, bindir, {"usbperf"}, None if fault == "failed verdict" else fault,
                              ["test_usbperf_run_loop"])
            if not result.failures or want not in log:
                failures.append("%s: the run test did not fail as it must (want %r):\n%s" % (fault, want, log))
            else:
                print("test-oeqa-case: %s: the run test fails, as it must" % fault)

    # The fallback schema checks agree with jsonschema on a real report and a broken one.
    schema = json.load(open(mod.SCHEMA))
    reports = []
    for dp, _, fns in os.walk(os.path.join(ROOT, "tests", "fixtures", "vm")):
        reports += [os.path.join(dp, f) for f in fns if f.startswith("usbperf-") and f.endswith(".yaml")]
    try:
        import jsonschema  # noqa: F401
        import yaml
    except ImportError:
        failures.append("python3 has no jsonschema or yaml (scripts/test.sh installs them)")
    else:
        # Timestamps stay strings, as in the JSON report the case reads (scripts/ci/validate-report.py).
        class Loader(yaml.SafeLoader):
            pass
        Loader.yaml_implicit_resolvers = {
            k: [(tag, rx) for tag, rx in v if tag not in ("tag:yaml.org,2002:timestamp",
                                                           "tag:yaml.org,2002:int",
                                                           "tag:yaml.org,2002:float")]
            for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
        # Numbers as YAML 1.2 and the writer read them (scripts/ci/validate-report.py): YAML 1.1's
        # base-60 integers would read a device number `8:0` as 480.
        Loader.add_implicit_resolver(
            "tag:yaml.org,2002:int", re.compile(r"^[-+]?(0|[1-9][0-9]*)$"), list("-+0123456789"))
        Loader.add_implicit_resolver(
            "tag:yaml.org,2002:float",
            re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                       r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
            list("-+0123456789."))
        checked = 0
        for p in sorted(reports):
            doc = yaml.load(open(p), Loader=Loader)
            if doc.get("schema_version") != schema["properties"]["schema_version"].get("const"):
                continue
            broken = [("verdict.pass a string", dict(doc, verdict={"pass": "yes"})),
                      ("unit missing", {k: v for k, v in doc.items() if k != "unit"}),
                      ]
            text = json.dumps(doc)
            if '"status": "passed"' in text:
                broken.append(("a cell status not in the enum",
                               json.loads(text.replace('"status": "passed"', '"status": "fine"', 1))))
            for label, d in [("as recorded", doc)] + broken:
                verdicts = []
                for use_jsonschema in (True, False):
                    saved = sys.modules.get("jsonschema")
                    if not use_jsonschema:
                        sys.modules["jsonschema"] = None  # import fails: the case's own checks run
                    try:
                        mod.validate(d, schema)
                        verdicts.append("valid")
                    except mod.SchemaError:
                        verdicts.append("invalid")
                    finally:
                        sys.modules["jsonschema"] = saved
                want = "valid" if label == "as recorded" else "invalid"
                if verdicts != [want, want]:
                    failures.append("%s %s: jsonschema says %s, the fallback %s (want %s)"
                                    % (os.path.relpath(p, ROOT), label, verdicts[0], verdicts[1], want))
            checked += 1
        if checked == 0:
            failures.append("no recorded JSON report of the current schema under tests/fixtures/vm")
        print("test-oeqa-case: fallback schema checks agree with jsonschema on %d recorded report(s)" % checked)

    if failures:
        for f in failures:
            print("test-oeqa-case: FAILED: " + f, file=sys.stderr)
        return 1
    print("test-oeqa-case: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
