#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Fail when Cargo.lock would not build with the oldest supported Rust.

Yocto scarthgap (5.0 LTS, Toradex BSP 7, Renesas RZ/G) ships Rust/cargo 1.75:
  - cargo 1.75 reads Cargo.lock up to version 3 (version 4 came with 1.78);
  - it refuses crates whose `rust-version` is newer than itself;
  - it cannot parse manifests with `edition = "2024"` (stable since 1.85).
With bitbake's vendoring every locked crate is unpacked into one directory
source and cargo loads all of their manifests, so every locked crate counts,
whatever target it is for.

The MSRV is the root package's `rust-version` (Cargo.toml); --msrv overrides.
Needs cargo (any version) and the crates, which `cargo metadata` downloads
unless --offline is given.
"""

import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_LOCK_VERSION = 3


def parse_version(text):
    parts = [int(p) for p in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def lock_version(lock_path):
    with open(lock_path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^version\s*=\s*(\d+)\s*$", line)
            if m:
                return int(m.group(1))
            if line.startswith("["):
                break
    return 1  # versions 1 and 2 have no top-level version key


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest-path", default=os.path.join(ROOT, "Cargo.toml"))
    ap.add_argument("--msrv", help="override the root package's rust-version")
    ap.add_argument("--offline", action="store_true", help="pass --offline to cargo metadata")
    args = ap.parse_args()

    failures = []
    lock_path = os.path.join(os.path.dirname(os.path.abspath(args.manifest_path)), "Cargo.lock")
    if not os.path.exists(lock_path):
        sys.exit("check-msrv-lock: %s is missing" % lock_path)
    lv = lock_version(lock_path)
    if lv > MAX_LOCK_VERSION:
        failures.append("Cargo.lock is version %d; cargo 1.75 (scarthgap) reads up to version %d "
                        "(regenerate it with cargo <= 1.77 or convert the `version = 4` header back)"
                        % (lv, MAX_LOCK_VERSION))

    cmd = ["cargo", "metadata", "--format-version", "1", "--locked", "--manifest-path", args.manifest_path]
    if args.offline:
        cmd.append("--offline")
    try:
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit("check-msrv-lock: `%s` failed: %s" % (" ".join(cmd), e))
    meta = json.loads(out)

    root_id = (meta.get("resolve") or {}).get("root")
    root = next((p for p in meta["packages"] if p["id"] == root_id), None)
    msrv_text = args.msrv or (root or {}).get("rust_version")
    if not msrv_text:
        sys.exit("check-msrv-lock: no --msrv given and the root package declares no rust-version")
    msrv = parse_version(msrv_text)

    checked = 0
    for pkg in sorted(meta["packages"], key=lambda p: (p["name"], p["version"])):
        checked += 1
        label = "%s %s" % (pkg["name"], pkg["version"])
        rv = pkg.get("rust_version")
        if rv and parse_version(rv) > msrv:
            failures.append("%s declares rust-version %s > %s" % (label, rv, msrv_text))
        edition = pkg.get("edition", "2015")
        if edition not in ("2015", "2018", "2021"):
            failures.append("%s uses edition %s (cargo %s cannot parse it)" % (label, edition, msrv_text))

    if failures:
        print("check-msrv-lock: FAILED for MSRV %s:" % msrv_text, file=sys.stderr)
        for f in failures:
            print("  " + f, file=sys.stderr)
        print("Pin the offending crates to older versions (cargo update -p NAME --precise VERSION) "
              "or with cargo >= 1.84 rely on .cargo/config.toml's incompatible-rust-versions = \"fallback\".",
              file=sys.stderr)
        return 1
    print("check-msrv-lock: OK: Cargo.lock v%d, %d packages build with Rust %s"
          % (lv, checked, msrv_text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
