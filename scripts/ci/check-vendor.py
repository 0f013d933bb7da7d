#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Prove that the recipe's crate list is complete, without bitbake.

Emulates what oe-core does for recipes/usbperf (bitbake's crate fetcher and
cargo_common.bbclass) and builds the result offline:

 1. `cargo fetch --locked` downloads every crate of Cargo.lock (the network
    step bitbake's do_fetch does from the crate:// entries);
 2. every crate:// entry of usbperf-crates.inc must have a downloaded .crate
    whose sha256 equals its SRC_URI[NAME-VERSION.sha256sum];
 3. each .crate is unpacked into cargo_home/bitbake/NAME-VERSION with a
    .cargo-checksum.json {"files": {}, "package": SHA256}, as bitbake's
    crate fetcher does in do_unpack;
 4. the recipe's own file:// sources (its SRC_URI's file:// entries: Cargo.toml, Cargo.lock, src, usbperf-report, ...) are copied
    into S, and cargo_home/config.toml replaces crates-io with that
    directory, as cargo_common_do_configure writes it;
 5. `cargo build --frozen --offline` must succeed there: a crate missing from
    the .inc, or a source file the recipe does not ship, fails the build.

Builds into its own target directory (default: target/check-vendor, or
$CHECK_VENDOR_TARGET_DIR). Needs cargo, libudev-dev and pkg-config.
"""

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INC = os.path.join(ROOT, "recipes-test", "usbperf", "usbperf-crates.inc")
RECIPE = os.path.join(ROOT, "recipes-test", "usbperf", "usbperf_0.1.0.bb")


def project_files():
    """What the recipe's SRC_URI takes from the repository root (its file:// entries), so a
    source the build needs and the recipe lacks fails here as it would in bitbake."""
    with open(RECIPE) as f:
        return re.findall(r"file://([^;\s\\]+);subdir=\$\{BP\}", f.read())


def fail(msg):
    print("check-vendor: FAILED: " + msg, file=sys.stderr)
    sys.exit(1)


def run(cmd, **kw):
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, **kw)


def parse_inc(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    crates = re.findall(r"^\s+crate://crates\.io/([^/\s]+)/([^\s\\]+)\s*\\$", text, re.M)
    sums = dict(re.findall(r'^SRC_URI\[([^\]]+)\.sha256sum\]\s*=\s*"([0-9a-f]{64})"$', text, re.M))
    if not crates:
        fail("%s lists no crate:// entry" % path)
    return crates, sums


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main():
    target_dir = os.environ.get("CHECK_VENDOR_TARGET_DIR", os.path.join(ROOT, "target", "check-vendor"))
    work = os.path.join(target_dir, "work")  # fixed path: cargo can reuse its build cache
    cargo_home = os.path.join(work, "cargo_home")
    vendor = os.path.join(cargo_home, "bitbake")  # CARGO_VENDORING_DIRECTORY
    src_dir = os.path.join(work, "usbperf")  # ${S}

    crates, sums = parse_inc(INC)
    print("check-vendor: %d crates in %s" % (len(crates), os.path.relpath(INC, ROOT)))

    # 1. download (uses the caller's CARGO_HOME as the download cache)
    if run(["cargo", "fetch", "--locked", "--manifest-path", os.path.join(ROOT, "Cargo.toml")]).returncode:
        fail("cargo fetch --locked failed")
    user_cargo_home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
    caches = glob.glob(os.path.join(user_cargo_home, "registry", "cache", "*"))

    # 2. checksums of the .inc against the downloaded files
    errors = []
    files = {}
    for name, version in crates:
        key = "%s-%s" % (name, version)
        found = [p for p in (os.path.join(c, key + ".crate") for c in caches) if os.path.exists(p)]
        if not found:
            errors.append("%s: no downloaded %s.crate (not in Cargo.lock?)" % (key, key))
            continue
        actual = sha256(found[0])
        if key not in sums:
            errors.append("%s: no SRC_URI[%s.sha256sum] in the .inc" % (key, key))
        elif sums[key] != actual:
            errors.append("%s: .inc sha256 %s, downloaded crate has %s" % (key, sums[key], actual))
        files[key] = (found[0], actual)
    extra = set(sums) - {"%s-%s" % c for c in crates}
    for key in sorted(extra):
        errors.append("%s: checksum without a crate:// entry" % key)
    if errors:
        fail("usbperf-crates.inc does not match the crates:\n  " + "\n  ".join(errors))
    print("check-vendor: all %d sha256sums match the downloaded crates" % len(files))

    # 3. unpack like bitbake's crate fetcher
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(vendor)
    for key, (path, digest) in sorted(files.items()):
        if subprocess.run(["tar", "-xz", "--no-same-owner", "-f", path, "-C", vendor]).returncode:
            fail("cannot unpack " + path)
        if not os.path.isdir(os.path.join(vendor, key)):
            fail("%s did not unpack to %s/" % (path, key))
        with open(os.path.join(vendor, key, ".cargo-checksum.json"), "w") as f:
            json.dump({"files": {}, "package": digest}, f)

    # 4. S with the recipe's file:// sources, and cargo_home/config.toml
    os.makedirs(src_dir)
    for entry in project_files():
        p = os.path.join(ROOT, entry)
        os.makedirs(os.path.dirname(os.path.join(src_dir, entry)), exist_ok=True)
        if os.path.isdir(p):
            shutil.copytree(p, os.path.join(src_dir, entry))
        else:
            shutil.copy2(p, os.path.join(src_dir, entry))
    with open(os.path.join(cargo_home, "config.toml"), "w") as f:
        f.write('[source.bitbake]\ndirectory = "%s"\n\n'
                '[source.crates-io]\nreplace-with = "bitbake"\nlocal-registry = "/nonexistent"\n' % vendor)

    # 5. offline build against the vendored crates only
    env = dict(os.environ, CARGO_HOME=cargo_home)
    env.pop("CARGO_TARGET_DIR", None)
    cmd = ["cargo", "build", "--frozen", "--offline",
           "--manifest-path", os.path.join(src_dir, "Cargo.toml"),
           "--target-dir", os.path.join(target_dir, "target")]
    if run(cmd, cwd=work, env=env).returncode:
        fail("offline build against the vendored crates failed")
    print("check-vendor: OK: %d crates verified, vendored and built offline" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
