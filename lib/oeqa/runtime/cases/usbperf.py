#
# SPDX-License-Identifier: MIT OR Apache-2.0
#
# testimage runtime case for usbperf: enable it with TEST_SUITES += "usbperf" on an image that
# installs the usbperf package (docs/yocto.md, "Runtime test: testimage"). It runs the
# installed usbperf-matrix on the target: the inventory as JSON, the USB tree, and a factory
# run of two short tests on a loop device, whose report is copied back and checked against the
# layer's report schema, with the result line the test station reads and no test file left.
# scripts/ci/test-oeqa-case.py runs this file against a local target (a fake oeqa package).

import json
import os
import re
import shlex
import tempfile

from oeqa.core.decorator.depends import OETestDepends
from oeqa.runtime.case import OERuntimeTestCase
from oeqa.runtime.decorator.package import OEHasPackage

# docs/report.schema.json of this layer: lib/oeqa/runtime/cases/ is four levels below its root.
SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..",
                      "docs", "report.schema.json")
RESULT = re.compile(r"^USBPERF-RESULT v2 (.*)$", re.M)
# Two short tests: a run of a few seconds that still writes and reads back the device.
PROFILE = """profile: quick
report_format: json
devices:
  - {select: {name: %s}, target: %s}
tests:
  - {workload: seq-write, bs: 1M, size: 8M, runtime: 1s, cache: direct}
  - {workload: seq-read, bs: 1M, size: 8M, runtime: 1s, cache: direct}
"""


class SchemaError(Exception):
    pass


def validate(doc, schema):
    """The report against the schema: jsonschema when the build host has it, else the
    keywords docs/report.schema.json uses, checked here (testimage runs in bitbake's python,
    which need not have jsonschema)."""
    try:
        import jsonschema
    except ImportError:
        _check(doc, schema, schema, "$")
        return
    try:
        jsonschema.validators.validator_for(schema)(schema).validate(doc)
    except jsonschema.ValidationError as e:
        raise SchemaError("%s: %s" % ("/".join(str(p) for p in e.absolute_path) or "$", e.message))


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value, t):
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[t])


def _check(v, s, root, at):
    if s is True or s == {}:
        return
    if s is False:
        raise SchemaError("%s: not allowed" % at)
    if "$ref" in s:
        node = root
        for part in s["$ref"].lstrip("#/").split("/"):
            node = node[part]
        _check(v, node, root, at)
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(_is(v, t) for t in types):
            raise SchemaError("%s: %r is not of type %s" % (at, v, s["type"]))
    if "const" in s and v != s["const"]:
        raise SchemaError("%s: %r is not %r" % (at, v, s["const"]))
    if "enum" in s and v not in s["enum"]:
        raise SchemaError("%s: %r is not one of %s" % (at, v, s["enum"]))
    if _is(v, "number"):
        if "minimum" in s and v < s["minimum"]:
            raise SchemaError("%s: %r < %r" % (at, v, s["minimum"]))
        if "maximum" in s and v > s["maximum"]:
            raise SchemaError("%s: %r > %r" % (at, v, s["maximum"]))
        if "exclusiveMinimum" in s and v <= s["exclusiveMinimum"]:
            raise SchemaError("%s: %r <= %r" % (at, v, s["exclusiveMinimum"]))
    if isinstance(v, str):
        if len(v) < s.get("minLength", 0):
            raise SchemaError("%s: %r is too short" % (at, v))
        if "pattern" in s and not re.search(s["pattern"], v):
            raise SchemaError("%s: %r does not match %s" % (at, v, s["pattern"]))
    if isinstance(v, list):
        if len(v) < s.get("minItems", 0):
            raise SchemaError("%s: fewer than %d items" % (at, s["minItems"]))
        if "maxItems" in s and len(v) > s["maxItems"]:
            raise SchemaError("%s: more than %d items" % (at, s["maxItems"]))
        if "items" in s:
            for i, item in enumerate(v):
                _check(item, s["items"], root, "%s[%d]" % (at, i))
    if isinstance(v, dict):
        for key in s.get("required", []):
            if key not in v:
                raise SchemaError("%s: %r is missing" % (at, key))
        props = s.get("properties", {})
        for key, item in v.items():
            if key in props:
                _check(item, props[key], root, "%s.%s" % (at, key))
            elif "additionalProperties" in s:
                _check(item, s["additionalProperties"], root, "%s.%s" % (at, key))
    for sub in s.get("allOf", []):
        _check(v, sub, root, at)
    for key, want in (("oneOf", lambda n: n == 1), ("anyOf", lambda n: n >= 1)):
        if key in s:
            matched = 0
            for sub in s[key]:
                try:
                    _check(v, sub, root, at)
                    matched += 1
                except SchemaError:
                    pass
            if not want(matched):
                raise SchemaError("%s: %d of the %s alternatives match" % (at, matched, key))
    if "not" in s:
        try:
            _check(v, s["not"], root, at)
        except SchemaError:
            pass
        else:
            raise SchemaError("%s: matches a schema it must not" % at)
    if "if" in s:
        try:
            _check(v, s["if"], root, at)
            matched = True
        except SchemaError:
            matched = False
        branch = s.get("then") if matched else s.get("else")
        if branch is not None:
            _check(v, branch, root, at)
    for key in set(s) - _KNOWN:
        raise SchemaError("schema keyword %r at %s is not checked here: install jsonschema" % (key, at))


# "format" and "default" are annotations (jsonschema does not assert formats by default);
# "definitions" and "$defs" hold what "$ref" points to.
_KNOWN = {"$schema", "$id", "$defs", "definitions", "$ref", "title", "description", "default",
          "format", "type", "const", "enum", "minimum", "maximum", "exclusiveMinimum",
          "minLength", "pattern", "minItems", "maxItems", "items", "required", "properties",
          "additionalProperties", "allOf", "anyOf", "oneOf", "not", "if", "then", "else"}


class UsbperfTest(OERuntimeTestCase):

    def run_ok(self, cmd, timeout=None, codes=(0,)):
        status, output = self.target.run(cmd, timeout=timeout)
        self.assertIn(status, codes, msg="%s: exit %d\n%s" % (cmd, status, output))
        return output

    @OETestDepends(['ssh.SSHTest.test_ssh'])
    @OEHasPackage(['usbperf'])
    def test_usbperf_list(self):
        # stderr stays on the target: the target's run() mixes it into the output.
        out = self.run_ok("usbperf-matrix list --all --format json 2>/dev/null")
        inv = json.loads(out)
        self.assertIn(inv.get("backend"), ("udev", "sysfs"), msg=out)
        self.assertIsInstance(inv.get("disks"), list, msg=out)
        for disk in inv["disks"]:
            self.assertTrue(disk.get("name") and disk.get("class"), msg="a disk without name or class: %s" % disk)

    @OETestDepends(['ssh.SSHTest.test_ssh'])
    @OEHasPackage(['usbperf'])
    def test_usbperf_tree(self):
        out = self.run_ok("usbperf-matrix tree")
        self.assertTrue(out.strip(), msg="tree printed nothing")

    @OETestDepends(['ssh.SSHTest.test_ssh'])
    @OEHasPackage(['usbperf'])
    def test_usbperf_run_loop(self):
        status, work = self.target.run("mktemp -d /tmp/usbperf-oeqa.XXXXXX")
        self.assertEqual(status, 0, msg=work)
        work = work.strip()
        q = shlex.quote
        dev = None
        mounted = False
        try:
            status, out = self.target.run("modprobe loop 2>/dev/null; command -v losetup && "
                                          "{ [ -e /dev/loop-control ] || [ -e /dev/loop0 ]; }")
            if status != 0:
                self.skipTest("no loop device support on this image (losetup, CONFIG_BLK_DEV_LOOP)")
            self.run_ok("dd if=/dev/zero of=%s/disk.img bs=1048576 count=0 seek=64" % q(work))
            dev = self.run_ok("losetup -f").strip()
            self.run_ok("losetup %s %s/disk.img" % (q(dev), q(work)))
            # A filesystem when the image can make one: the tests then go through test files
            # on it, which must all be gone after the run; raw otherwise.
            status, _ = self.target.run("command -v mkfs.ext4")
            if status == 0:
                self.run_ok("mkfs.ext4 -q -F %s && mkdir %s/mnt && mount %s %s/mnt"
                            % (q(dev), q(work), q(dev), q(work)))
                mounted = True
                target = "auto"
            else:
                target = "raw"
            config = PROFILE % (os.path.basename(dev), target)
            self.run_ok("printf '%%s' %s > %s/usbperf.yaml" % (q(config), q(work)))
            out = self.run_ok("usbperf-matrix run --config %s/usbperf.yaml --report-dir %s/reports "
                              "--lock-file %s/lock" % (q(work), q(work), q(work)), timeout=600)

            results = RESULT.findall(out)
            self.assertEqual(len(results), 1, msg="not one result line:\n%s" % out)
            fields = dict(f.split("=", 1) for f in results[0].split())
            self.assertEqual((fields.get("verdict"), fields.get("exit"), fields.get("devices"), fields.get("failed"),
                              fields.get("marginal"), fields.get("retests")),
                             ("PASS", "0", "1", "-", "-", "-"), msg=results[0])
            report = fields.get("report", "")
            self.assertTrue(report.startswith(work + "/reports/"), msg=results[0])

            # Exactly the one report in its directory (no temporaries), and no test file on
            # the device's filesystem.
            listing = self.run_ok("ls -A %s/reports" % q(work)).split()
            self.assertEqual(listing, [os.path.basename(report)], msg="report directory: %s" % listing)
            if mounted:
                left = [f for f in self.run_ok("ls -A %s/mnt" % q(work)).split() if f != "lost+found"]
                self.assertEqual(left, [], msg="test files left behind: %s" % left)

            with tempfile.TemporaryDirectory() as local:
                copy = os.path.join(local, "report.json")
                self.target.copyFrom(report, copy)
                with open(copy) as f:
                    doc = json.load(f)
            with open(SCHEMA) as f:
                schema = json.load(f)
            try:
                validate(doc, schema)
            except SchemaError as e:
                self.fail("the report does not match docs/report.schema.json: %s" % e)
            self.assertEqual(doc["status"], "complete")
            self.assertEqual(doc["report_id"], fields.get("report_id"))
            self.assertTrue(doc["verdict"]["pass"], msg=doc["verdict"])
            devices = [d for d in doc["devices"] if d["name"] == os.path.basename(dev)]
            self.assertEqual(len(devices), 1, msg="the loop device is not in the report")
            cells = [(c["workload"], c["status"]) for c in devices[0]["cells"]]
            self.assertEqual(cells, [("seq-write", "passed"), ("seq-read", "passed")])
        finally:
            if mounted:
                self.target.run("umount %s/mnt" % q(work))
            if dev:
                self.target.run("losetup -d %s" % q(dev))
            self.target.run("rm -rf %s" % q(work))
