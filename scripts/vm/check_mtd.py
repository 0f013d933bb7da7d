#!/usr/bin/env python3
"""The host's checks of scripts/ci/vm-mtd.sh: what the guest's `usbperf-matrix list`,
`flash scan`, `flash health` and `flash speed` said about the kernel's simulated flash
(scripts/vm/mtd-init.sh loads it), against what was planted.

usage: check_mtd.py --out DIR [--mtdram]
  DIR  the guest's output directory (NAME.out / NAME.err / NAME.rc per command, the kernel's
       counters around the scan in scan-before.txt and scan-after.txt)
Exit 0 when every assertion held, 1 with one line per failed one.
"""
import argparse
import json
import os
import re
import sys

KIB = 1024
# The planted faults of scripts/ci/vm-mtd.sh, in the scan target's (mtd1's) own numbering:
# it starts at block 16 of the chip, 64 pages a block.
SCAN_FIRST_BLOCK = 16
PAGES_PER_BLOCK = 64
PLANTED_BAD = {100 - SCAN_FIRST_BLOCK, 120 - SCAN_FIRST_BLOCK}
GRAVE = {(p // PAGES_PER_BLOCK - SCAN_FIRST_BLOCK, p % PAGES_PER_BLOCK) for p in (1157, 1792)}
SCAN_BLOCKS = 256
WEAK_BLOCK_OF_MTD3 = 341 - (16 + SCAN_BLOCKS + 64)

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def read(out, name):
    with open(os.path.join(out, name), encoding="utf-8", errors="replace") as f:
        return f.read()


def rc(out, name):
    try:
        return int(read(out, name + ".rc").strip())
    except (OSError, ValueError):
        return None


def doc(out, name):
    try:
        return json.loads(read(out, name + ".out"))
    except (OSError, ValueError) as e:
        check(False, f"{name}: JSON output readable ({e})")
        return {}


def device(d, name):
    return next((x for x in d.get("devices", []) if x.get("name") == name), {})


def by_label(flash, label):
    return next((m for m in flash.get("mtd", []) if m.get("label") == label), None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--mtdram", action="store_true")
    a = ap.parse_args()
    out = a.out

    # The inventory.
    check(rc(out, "list-json") == 0, "list --format json exits 0")
    flash = doc(out, "list-json").get("flash", {})
    parts = [by_label(flash, f"NAND simulator partition {i}") for i in range(5)]
    check(all(parts), "list shows the five nandsim partitions by name")
    if all(parts):
        for i, (m, blocks) in enumerate(zip(parts, (16, SCAN_BLOCKS, 64, 16, 1024 - 16 - SCAN_BLOCKS - 64 - 16))):
            check(m["name"] == f"mtd{i}", f"partition {i} is mtd{i} ({m['name']})")
            check(m["type"] == "nand", f"mtd{i} type nand ({m['type']})")
            check(m.get("size_bytes") == blocks * 128 * KIB, f"mtd{i} size {blocks} blocks ({m.get('size_bytes')})")
            check(m.get("erase_block_bytes") == 128 * KIB, f"mtd{i} erase block 128 KiB")
            check(m.get("page_bytes") == 2048 and m.get("oob_bytes") == 64, f"mtd{i} page 2048 + 64 OOB")
            check(m.get("ecc_strength_bits") == 1 and m.get("ecc_step_bytes") == 256,
                  f"mtd{i} ECC 1 bit per 256 bytes ({m.get('ecc_strength_bits')}/{m.get('ecc_step_bytes')})")
            check(m.get("writable") is True, f"mtd{i} writable")
            check(any(u["kind"] == "mtdblock" for u in m.get("users", [])), f"mtd{i} has its mtdblock")
        users0 = parts[0].get("users", [])
        check(any(u["kind"] == "mount" and u["fstype"] == "jffs2" and u["mountpoint"] == "/mnt/jffs2"
                  for u in users0), f"mtd0's users name the JFFS2 mount ({users0})")
        users4 = parts[4].get("users", [])
        check(any(u["kind"] == "ubi" and u["ubi"] == "ubi0" for u in users4), f"mtd4's users name ubi0 ({users4})")
        check(parts[1]["health"].get("bad_blocks", 0) >= len(PLANTED_BAD),
              f"mtd1's kernel bad-block count covers the planted ones ({parts[1]['health']})")
    ubi = flash.get("ubi", [])
    check(len(ubi) == 1 and ubi[0].get("mtd") == "mtd4", f"one UBI device, on mtd4 ({[u.get('mtd') for u in ubi]})")
    if ubi:
        u = ubi[0]
        check(u.get("total_pebs", 0) > 600 and 0 < u.get("erase_block_bytes", 0) < 128 * KIB,
              f"ubi0: {u.get('total_pebs')} PEBs, LEB {u.get('erase_block_bytes')} bytes")
        h = u.get("health", {})
        check("max_erase_count" in h and "reserved_for_bad" in h and "bad_pebs" in h, f"ubi0 wear counters read ({h})")
        vols = u.get("volumes", [])
        check(len(vols) == 1 and vols[0].get("label") == "data" and vols[0].get("kind") == "dynamic",
              f"ubi0 has the volume `data` ({vols})")
        if vols:
            check(vols[0].get("size_bytes", 0) >= 32 * KIB * KIB, f"volume size >= 32 MiB ({vols[0].get('size_bytes')})")
            check(any(m.get("fstype") == "ubifs" and m.get("mountpoint") == "/mnt/ubi" for m in vols[0].get("mounts", [])),
                  f"the volume's UBIFS mount is found ({vols[0].get('mounts')})")
    text = read(out, "list-text.out")
    check("MTD" in text and "ubi0 on mtd4" in text, "list's table shows the flash and the UBI device")
    if a.mtdram:
        ram = by_label(flash, "mtdram test device")
        boot = by_label(flash, "u-boot")
        nor = by_label(flash, "nor-test")
        check(bool(ram and boot and nor), "mtdram and its partitions u-boot and nor-test are listed")
        if ram and boot and nor:
            check(ram["type"] == "ram" and ram.get("size_bytes") == 8 * KIB * KIB, f"mtdram: ram, 8 MiB ({ram['type']})")
            check({boot["name"], nor["name"]} <= set(ram.get("partitions", [])),
                  f"mtdram's partitions are u-boot and nor-test ({ram.get('partitions')})")
            check(boot.get("offset_bytes") == 0 and nor.get("offset_bytes") == 1024 * KIB,
                  f"partition offsets 0 and 1 MiB ({boot.get('offset_bytes')}, {nor.get('offset_bytes')})")

    # The read scan.
    s = device(doc(out, "scan-json"), "mtd1").get("scan", {})
    before = [int(x) for x in read(out, "scan-before.txt").split()]
    after = [int(x) for x in read(out, "scan-after.txt").split()]
    check(rc(out, "scan-json") in (0, 1), f"flash scan ran (exit {rc(out, 'scan-json')})")
    check(s.get("erase_blocks") == SCAN_BLOCKS and s.get("page_bytes") == 2048, f"scan: {SCAN_BLOCKS} blocks of 2 KiB pages ({s.get('erase_blocks')})")
    bad = set(s.get("bad_blocks", []))
    check(PLANTED_BAD <= bad, f"scan finds the planted bad blocks {sorted(PLANTED_BAD)} ({sorted(bad)})")
    if all(parts):
        check(len(bad) == s.get("bad_block_count") == parts[1]["health"].get("bad_blocks"),
              f"scan's bad blocks are the kernel's count ({len(bad)} vs {parts[1]['health'].get('bad_blocks')})")
    check(s.get("pages_read") == (SCAN_BLOCKS - len(bad)) * PAGES_PER_BLOCK, f"scan read every page of the good blocks ({s.get('pages_read')})")
    unc = {(b["block"], p) for b in s.get("blocks", []) for p in b.get("uncorrectable_pages", [])}
    check(unc == GRAVE, f"uncorrectable pages are exactly the grave pages {sorted(GRAVE)} ({sorted(unc)})")
    check(s.get("uncorrectable_pages") == len(GRAVE), f"uncorrectable page count {s.get('uncorrectable_pages')}")
    check(s.get("corrected_bits") == after[0] - before[0],
          f"corrected bits = the kernel counter's increase over the scan ({s.get('corrected_bits')} vs {after[0] - before[0]})")
    check(s.get("corrected_bits", 0) > 0, "the random bitflips were seen and corrected")
    check(after[1] - before[1] >= len(GRAVE), f"the kernel counted failed ECC steps ({after[1] - before[1]})")
    check(rc(out, "scan-text") in (0, 1) and "uncorrectable pages" in read(out, "scan-text.out"), "scan's text output")
    # The peer, nanddump, over the same partition: the grave pages fail its reads as they
    # failed the scan's (the random bitflips differ from read to read, so only the failures
    # are compared), and its read rate beside the scan's.
    try:
        peer = read(out, "nanddump.err")
        # nanddump prints the counters' change page by page: "ECC: N uncorrectable
        # bitflip(s) at offset 0x..." (mtd-utils nand-utils/nanddump.c).
        bad_pages = {}
        for m in re.finditer(r"ECC: (\d+) uncorrectable bitflip\(s\) at offset 0x([0-9a-fA-F]+)", peer):
            page = int(m.group(2), 16) // 2048
            bad_pages[(page // PAGES_PER_BLOCK, page % PAGES_PER_BLOCK)] = int(m.group(1))
        check(set(bad_pages) == GRAVE,
              f"nanddump finds the same uncorrectable pages ({sorted(bad_pages)}; its output: {peer.strip()[:300]!r})")
        check(sum(bad_pages.values()) == after[1] - before[1],
              f"and the same uncorrectable ECC steps ({sum(bad_pages.values())} vs the scan's {after[1] - before[1]})")
        u0, u1 = (float(x) for x in read(out, "nanddump-uptime.txt").split())
        if u1 > u0 and s.get("mib_per_s"):
            peer_rate = SCAN_BLOCKS * 128 / 1024 / (u1 - u0)
            print(f"info scan {s['mib_per_s']:.1f} MiB/s, nanddump {peer_rate:.1f} MiB/s "
                  f"(ratio {s['mib_per_s'] / peer_rate:.2f}; nanddump's time to 10 ms)")
    except (OSError, IndexError, ValueError) as e:
        check(False, f"nanddump's output readable ({e})")

    # The speed test.
    def speed(name):
        # stderr is fitted to the console's width: compared as one line
        return rc(out, f"speed-{name}"), " ".join(read(out, f"speed-{name}.err").split())
    code, _ = speed("NAND_simulator_partition_2")
    check(code == 0, f"speed on mtd2 (a test area) passes (exit {code})")
    if code == 0:
        sp = device(doc(out, "speed-NAND_simulator_partition_2"), "mtd2").get("speed", {})
        check(sp["blocks_tested"] + sp["bad_block_count"] == 64, f"mtd2: every good block tested ({sp['blocks_tested']})")
        check(sp["mismatched_pages"] == 0 and not sp.get("erase_failures"), "mtd2: verify clean")
        check(all(sp[k]["mib_per_s"] > 0 for k in ("erase", "write", "read")), "mtd2: erase, write, read rates")
        check(all(sp[k].get("ci95_percent") is not None for k in ("erase", "write", "read")), "mtd2: each rate with its CI")
        check(sp["left_erased"] is True, "mtd2 left erased")
    code, _ = speed("NAND_simulator_partition_3")
    check(code == 1, f"speed on mtd3 (weak block) fails (exit {code})")
    if code == 1:
        sp = device(doc(out, "speed-NAND_simulator_partition_3"), "mtd3").get("speed", {})
        check(any(e.startswith(f"block {WEAK_BLOCK_OF_MTD3}:") for e in sp.get("erase_failures", [])),
              f"mtd3: the weak block's erase failure is named ({sp.get('erase_failures')})")
    for name, why in [("NAND_simulator_partition_0", "jffs2"), ("NAND_simulator_partition_4", "UBI")]:
        code, err = speed(name)
        check(code == 2 and why in err and "refusing to erase" in err, f"speed on {name} refused naming {why} (exit {code}: {err.strip()[:160]})")
    if a.mtdram:
        code, err = speed("u-boot")
        check(code == 2 and "named like a partition the board boots from" in err, f"speed on u-boot refused by its name (exit {code}: {err.strip()[:160]})")
        code, err = speed("mtd5")
        check(code == 2 and "partitions registered on it" in err, f"speed on the partitioned mtdram chip refused (exit {code}: {err.strip()[:160]})")
        code, _ = speed("nor-test")
        check(code == 0, f"speed on nor-test passes (exit {code})")

    # The speed tests left every bad-block marker as it was, and marked none.
    after = {m["name"]: m.get("health", {}).get("bad_blocks") for m in doc(out, "list-after").get("flash", {}).get("mtd", [])}
    before = {m["name"]: m.get("health", {}).get("bad_blocks") for m in flash.get("mtd", [])}
    check(after == before, f"bad-block counts unchanged by the speed tests ({after} vs {before})")

    # Health.
    h = doc(out, "health")
    devs = {d["name"]: d for d in h.get("devices", [])}
    check(rc(out, "health") in (0, 1) and {"mtd0", "mtd1", "mtd4", "ubi0"} <= set(devs),
          f"flash health judged the NAND and UBI devices ({sorted(devs)})")
    figs = {f["name"] for f in devs.get("ubi0", {}).get("figures", [])}
    check({"ubi.erase_count", "ubi.bad_blocks", "ubi.reserved_for_bad"} <= figs, f"ubi0's figures ({sorted(figs)})")

    # The factory run: its report carries the flash, the unit fails on mtd1's ECC failures.
    check(rc(out, "run") == 1, f"run exits 1: mtd1's uncorrectable pages exceed max_ecc_failures 0 (exit {rc(out, 'run')})")
    run_dir = os.path.join(out, "..", "run")
    reports = [f for f in os.listdir(run_dir) if f.endswith(".yaml")] if os.path.isdir(run_dir) else []
    check(len(reports) == 1, f"run wrote one report ({reports})")
    if reports:
        import yaml
        with open(os.path.join(run_dir, reports[0]), encoding="utf-8") as f:
            rep = yaml.safe_load(f)
        fl = {d["name"]: d for d in (rep.get("flash") or {}).get("devices", [])}
        check({"mtd1", "mtd2", "ubi0"} <= set(fl), f"the report's flash devices ({sorted(fl)})")
        if {"mtd1", "mtd2"} <= set(fl):
            check(fl["mtd1"]["verdict"]["pass"] is False and fl["mtd1"].get("scan", {}).get("uncorrectable_pages") == len(GRAVE),
                  "the report: mtd1 scanned and failed")
            names = {f["name"] for f in fl["mtd2"].get("figures", [])}
            check({"flash-erase.mib_per_s", "flash-write.mib_per_s", "flash-read.mib_per_s"} <= names and fl["mtd2"]["verdict"]["pass"],
                  f"the report: mtd2's rates, passed ({sorted(names)})")
        check(rep["verdict"]["pass"] is False
              and any("mtd1" in (r.get("text", "") if isinstance(r, dict) else r) for r in rep["verdict"]["reasons"]),
              "the unit's verdict names mtd1")
    check(rc(out, "fleet") in (0, 1), f"fleet read the report (exit {rc(out, 'fleet')})")
    fleet_text = read(out, "fleet.out")
    for fig in ("flash-write.mib_per_s", "scan.uncorrectable_pages", "ubi.erase_count"):
        check(fig in fleet_text, f"fleet carries {fig}")

    print(f"{len(failures)} failed" if failures else "every raw flash assertion held")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
