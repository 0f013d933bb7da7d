#!/usr/bin/env python3
"""vm-e2e assertions on what the guest left on its output disk (read back by scripts/vm-e2e.sh).

usage: check.py --guest GUEST.json --out DIR --scenarios "baseline blkdebug ..." [--img DIR]
                [--validator PATH] [--host-events FILE] [--fleet FLEET.json] [--kernel RELEASE]
GUEST.json is the guest's description (scripts/vm/guests.py resolve, from guests.json): which
devices it has and what each must be and do. DIR holds the guest's report directory: the
boot-service run's report at the top, one subdirectory per fault scenario, and e2e/ (exit
codes, logs, leftover test files, list.json). Prints what each report said; exits 1 if any
assertion failed. scripts/vm/test_check.py runs these checks over recorded guest outputs."""
import argparse, glob, hashlib, json, os, re, subprocess, sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))


def texts(reasons):
    """The sentences of reasons: schema 1 stores sentences, schema 2 records with `text`."""
    return [r["text"] if isinstance(r, dict) else r for r in reasons]


# libyaml's parser where the host has it (the reports are large: the tests read many)
class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    pass


Loader.yaml_implicit_resolvers = {
    k: [(t, r) for t, r in v if t != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def serials(d):
    disk = d.get("disk", d)
    s = {disk.get("serial")}
    if disk.get("usb"):
        s.add(disk["usb"].get("serial"))
    return {x for x in s if x}


def find(rep, serial=None, cls=None):
    for d in rep["devices"]:
        if (serial and serial in serials(d)) or (cls and d["disk"].get("class") == cls):
            return d
    return None


def cell_text(c):
    return " ".join(texts(c.get("reasons", []))) + " " + " ".join(e["line"] for e in c.get("kernel_events", []))


def missing_of(h, field):
    return [m["reason"] for m in (h or {}).get("missing", []) if m["field"] == field]


# The test file init.sh leaves on this disk before the baseline run, as a power cut would.
STALE_FILE = ("sata", ".usbperf-testfile-4242-0.tmp")
# Test files that cannot be removed: on the filesystem the kernel turned read-only (erofs) and
# on the unplugged stick's dead mount. They never reach the media (the journal was aborted /
# the device is gone): the host-side check of the images after power-off proves it.
UNREMOVABLE = {"erofs": "uas", "unplug": "xbot"}


class Checker:
    """The checks of one guest's output. Results are the object's: failures (the messages of
    the assertions that failed) and passed (how many held)."""

    def __init__(self, guest, out, img=None, validator=os.path.join(HERE, "..", "ci", "validate-report.py"),
                 host_events=None, fleet=None, kernel="", log=print):
        self.guest, self.out, self.img, self.validator = guest, out, img, validator
        self.host_events, self.fleet_file, self.kernel, self.log = host_events, fleet, kernel, log
        self.E = os.path.join(out, "e2e")
        self.devices = {e["id"]: e for e in guest["entries"] if "id" in e}
        self.classes = {(d.get("expect") or {}).get("class") for d in self.devices.values()} - {None}
        self.failures, self.passed, self.report_file = [], 0, {}

    def check(self, cond, msg):
        self.log(("  ok   " if cond else "  FAIL ") + msg)
        if cond:
            self.passed += 1
        else:
            self.failures.append(msg)
        return cond

    def read(self, name):
        p = os.path.join(self.E, name)
        if not os.path.exists(p):
            return None
        with open(p) as f:
            return f.read()

    def expect(self, id_):
        return self.devices[id_].get("expect") or {}

    def with_expect(self, key):
        """The ids of the devices whose expectations have `key`, in the guest's order."""
        return [i for i, d in self.devices.items() if (d.get("expect") or {}).get(key) not in (None, False)]

    def label(self, id_):
        """How a device is found in a report: USB disks by their serial, the others by class."""
        d = self.devices[id_]
        return d["serial"] if self.expect(id_).get("class") == "usb" else self.expect(id_).get("class")

    def dev(self, rep, id_):
        """The report's entry of guest device id_."""
        d = self.devices[id_]
        if self.expect(id_).get("class") == "usb":
            return find(rep, serial=d["serial"])
        return find(rep, cls=self.expect(id_).get("class"))

    def run(self, scenarios):
        ver = self.read("version.txt")
        self.log(f"guest: {(ver or '?').strip()}; {(self.read('names.txt') or '').strip()}")
        for s in scenarios:
            self.log(f"\n--- {s}")
            fn = getattr(self, "scenario_" + s.replace("-", "_"), None)
            if self.check(fn is not None, f"{s}: a scenario check.py knows"):
                fn()
        if self.fleet_file:
            self.log("\n--- the guest's reports through usbperf-matrix fleet")
            self.fleet()
        if self.img:
            self.log("\n--- host-side leftover check on the ext4 images")
            self.images_clean()
        return self.failures

    def load_report(self, scen):
        # the boot-service runs (baseline, the eMMC board's emmc) write to the top report directory
        d = self.out if scen in ("baseline", "emmc") else os.path.join(self.out, scen)
        files = sorted(glob.glob(os.path.join(d, "usbperf-*.yaml")) + glob.glob(os.path.join(d, "usbperf-*.json")))
        self.check(len(files) == 1, f"{scen}: exactly one report in the report directory ({len(files)}: {files})")
        if not files:
            return None
        if self.validator:
            v = subprocess.run([sys.executable, self.validator, files[-1]], capture_output=True, text=True)
            self.check(v.returncode == 0, f"{scen}: report valid against docs/report.schema.json {v.stdout.strip()} {v.stderr.strip()}")
        self.report_file[scen] = os.path.basename(files[-1])
        with open(files[-1]) as f:
            return yaml.load(f, Loader=Loader) if files[-1].endswith(".yaml") else json.load(f)

    def rc_of(self, scen):
        r = self.read(f"{scen}.rc")
        return int(r) if r and r.strip().isdigit() else None

    def summary(self, scen, rep, rc):
        self.log(f"  report: status={rep['status']} exit_code={rep.get('exit_code')} "
              f"interrupted_by={rep.get('interrupted_by')} process exit={rc} unit pass={rep['verdict']['pass']}")
        for d in rep["devices"]:
            cells = ", ".join(f"{c['workload']}={c['status']}" for c in d["cells"])
            self.log(f"    {d['name']} ({'/'.join(sorted(serials(d)))}, {d['disk'].get('class')}): pass={d['verdict']['pass']} [{cells}]")
            for r in texts(d["verdict"].get("reasons", [])):
                self.log(f"      reason: {r}")
            for lc in d.get("link_checks", []):
                self.log(f"      link: {lc['port']} expected {lc['expected_mbps']} measured {lc.get('measured_mbps')} pass={lc['pass']}")
            for c in d["cells"]:
                for ev in c.get("kernel_events", []):
                    self.log(f"      kernel ({c['workload']}): {ev['line']}")

    def no_leftover(self, scen):
        lo = self.read(f"{scen}.leftover")
        files = (lo or "").split()
        allowed = [f for f in files if scen in UNREMOVABLE and f.startswith(f"/media/{UNREMOVABLE[scen]}/")]
        if allowed:
            self.log(f"  note {scen}: test files still visible on dead/read-only mounts (the kernel kept them from being removed; see the remount and image checks): {allowed}")
        rest = [f for f in files if f not in allowed]
        self.check(lo is not None and not rest, f"{scen}: no .usbperf-testfile-* left on the writable mounted filesystems ({rest if lo is not None else 'missing'})")

    def others_complete(self, scen, rep, id_="sd"):
        d = self.dev(rep, id_)
        if self.check(d is not None, f"{scen}: the healthy device ({self.label(id_)}) is in the report"):
            st = [c["status"] for c in d["cells"]]
            self.check(all(s in ("passed", "skipped") for s in st) and d["verdict"]["pass"],
                  f"{scen}: the healthy device {d['name']} still completed and passed: {st}")

    def scenario_baseline(self):
        rc = self.rc_of("baseline")
        rep = self.load_report("baseline")
        if rep is None:
            return
        self.summary("baseline", rep, rc)
        self.check(rc == 1, f"baseline: exit code 1 (got {rc})")
        unit = rep.get("unit", {})
        self.log(f"  unit: {unit}")
        us = self.guest["machine"].get("unit_serial")
        if us:
            # QEMU -smbios type=1,serial=...: the report carries the unit and is named after it
            f = self.report_file["baseline"]
            self.check(unit.get("serial") == us and f.startswith(f"usbperf-{us}-"),
                  f"baseline: report names the unit (serial {unit.get('serial')}, file {f})")
        else:
            self.check(unit.get("hostname") == "vm-e2e-unit", f"baseline: report names the unit (hostname {unit.get('hostname')})")
        self.check(rep["status"] == "complete" and rep.get("exit_code") == 1, "baseline: report complete, exit_code 1")
        self.check(rep["config"]["sources"][-1] == "/etc/usbperf/usbperf.yaml" or "/etc/usbperf/usbperf.yaml" in rep["config"]["sources"],
              f"baseline: ran with the default config /etc/usbperf/usbperf.yaml ({rep['config']['sources']})")
        # the USB disks by serial: class, link speed and driver as the guest's description says
        for i in self.with_expect("speed_mbps"):
            x, s = self.expect(i), self.devices[i]["serial"]
            d = find(rep, serial=s)
            if not self.check(d is not None, f"baseline: {s} found"):
                continue
            u = d["disk"].get("usb") or {}
            self.check(d["disk"]["class"] == x["class"] and u.get("speed_mbps") == x["speed_mbps"] and u.get("driver") == x["driver"],
                  f"baseline: {s} classified {d['disk']['class']} speed {u.get('speed_mbps')} driver {u.get('driver')}")
        profile = self.with_expect("profile")
        every = self.with_expect("every_cell_passes")
        for i in profile:
            cls = self.expect(i)["class"]
            if cls != "usb" and i not in every:
                self.check(find(rep, cls=cls) is not None, f"baseline: a {cls} device found and classified")
        self.check(len(rep["devices"]) == len(profile), f"baseline: {len(profile)} devices tested ({len(rep['devices'])})")
        for i in every:
            # QEMU 10's NVMe and UFS disks: classified, tested through test files on their ext4,
            # every cell passed.
            cls = self.expect(i)["class"]
            d = find(rep, cls=cls)
            if self.check(d is not None, f"baseline: the {cls} disk found, class {cls}"):
                self.check(d["verdict"]["pass"] and all(c["status"] == "passed" for c in d["cells"]),
                      f"baseline: {d['name']} ({cls}) passes every cell: {[(c['workload'], c['status']) for c in d['cells']]}")
                self.check(all(((c.get("result") or {}).get("target") or {}).get("kind") == "file" for c in d["cells"] if c["workload"] != "read-buffered"),
                      f"baseline: {d['name']} ({cls}) written through test files only: {[((c.get('result') or {}).get('target') or {}).get('path') for c in d['cells']]}")
        for i in self.with_expect("link_fault"):
            lf, g = self.expect(i)["link_fault"], self.devices[i]
            o = find(rep, serial=g["serial"])
            if not o:
                continue
            lcs = o.get("link_checks", [])
            want, got = lf["expected_mbps"], lf["measured_mbps"]
            self.check(len(lcs) == 1 and not lcs[0]["pass"] and lcs[0]["expected_mbps"] == want and lcs[0]["measured_mbps"] == got
                  and re.fullmatch(rf"usb:\d+-{g.get('port', '1')}", lcs[0]["port"] or ""),
                  f"baseline: {g['serial']} fails the link check, expected {want} measured {got} on its port: {lcs}")
            port = lcs[0]["port"][4:] if lcs else "?"
            self.check(not o["verdict"]["pass"] and any(port in r and str(got) in r for r in texts(o["verdict"]["reasons"])),
                  f"baseline: {g['serial']} verdict fails naming port {port} and {got}M")
        failing = {self.devices[i]["serial"] for i in profile if self.expect(i).get("pass") is False}
        for d in rep["devices"]:
            if failing & serials(d):
                continue
            for lc in d.get("link_checks", []):
                self.check(lc["pass"], f"baseline: {d['name']} passes the link check {lc['port']} ({lc.get('measured_mbps')}M)")
            self.check(d["verdict"]["pass"], f"baseline: {d['name']} ({'/'.join(serials(d))}) passes: {d['verdict'].get('reasons')}")
        self.check(len(rep["verdict"].get("reasons", [])) == len(failing),
                   f"baseline: the unit fails for exactly {len(failing)} reason(s) (the link of {sorted(failing)})")
        stale = [w for w in rep.get("warnings", []) if "stale test file" in w]
        planted = f"/media/{STALE_FILE[0]}/{STALE_FILE[1]}"
        self.check(any(planted in w for w in stale),
              f"baseline: the test file a power cut left on the {STALE_FILE[0]} disk is removed and reported: {stale}")
        self.no_leftover("baseline")
        # Engine choice per target on a real kernel: vfat refuses non-blocking I/O, so the test
        # files on the vfat stick run on the thread pool; its raw device and the ext4 test files
        # of the UAS disk keep io_uring.
        for i in self.with_expect("engine_on_files"):
            s, fs_engine = self.devices[i]["serial"], self.expect(i)["engine_on_files"]
            d = find(rep, serial=s)
            if not d:
                continue
            engines = {c["workload"]: (c.get("result") or {}).get("engine") for c in d["cells"]}
            reasons = " ".join((c.get("result") or {}).get("engine_reason", "") for c in d["cells"])
            self.check(engines.get("read-buffered") == "uring"
                  and engines.get("seq-write") == fs_engine and engines.get("seq-read") == fs_engine
                  and (fs_engine == "uring" or "RWF_NOWAIT" in reasons),
                  f"baseline: {s} engines per test {engines} (test files: {fs_engine}, raw device: uring)")
        # Inventory: every device of the guest, classified.
        lj = self.read("list.json")
        if self.check(lj is not None, "inventory (usbperf-matrix list --format json) present"):
            inv = json.loads(lj)
            disks = inv.get("inventory", inv)["disks"]
            byser = {}
            for d in disks:
                for s in serials(d):
                    byser.setdefault(s, []).append(d)
            inventory = self.with_expect("inventory")
            for i in inventory:
                x = self.expect(i)
                if x["class"] != "usb":
                    self.check(any(d["class"] == x["class"] for d in disks), f"inventory: {i} disk, class {x['class']}")
                    continue
                s = self.devices[i]["serial"]
                self.check(s in byser and byser[s][0]["class"] == "usb", f"inventory: {s} found, class usb")
                if x.get("luns", 1) > 1:
                    self.check(len(byser.get(s, [])) == x["luns"], f"inventory: the {x['luns']}-LUN stick gives {x['luns']} usb disks")
            # A stick behind QEMU's usb-hub (full speed) checked against 480M: the cause is the
            # hub, named as such, with the port's exit code 1.
            for i in self.with_expect("hub_cause"):
                want = self.expect(i)["hub_cause"]
                hj = self.read("list-hub.json")
                if not self.check(hj is not None, f"link cause: {i} stick checked behind its hub (list-hub.json)"):
                    continue
                lcs = json.loads(hj).get("link_check", [])
                lc = lcs[0] if len(lcs) == 1 else {}
                self.check((self.read("list-hub.rc") or "").strip() == "1", "link cause: list --expect exits 1 on the slow link")
                self.check(lc.get("pass") is False and lc.get("measured_mbps") == 12.0 and lc.get("cause_kind") == want
                           and re.search(r"behind hub \S+ which itself runs at 12M", lc.get("cause", "")),
                           f"link cause: the stick behind the full-speed hub fails as {want}, naming the hub: {lcs}")
            nv = [d for d in disks if d["class"] == "nvme"]
            if "nvme" in self.classes and nv:
                want = next(self.devices[i]["serial"] for i in inventory if self.expect(i)["class"] == "nvme")
                self.check(nv[0].get("serial") == want and "pci" in (nv[0].get("id_path") or ""),
                      f"inventory: the NVMe disk's serial and PCI path ({nv[0].get('serial')}, {nv[0].get('id_path')})")
            self.health_x86(disks)

    def health_x86(self, disks):
        """The read-only health readers on QEMU's devices (real answers: the NVMe SMART log,
        AHCI's SMART READ DATA, the UFS health descriptor), and USB disks never asked for SMART."""
        nv = [d for d in disks if d["class"] == "nvme"]
        if "nvme" in self.classes and self.check(len(nv) == 1, "health: one NVMe disk"):
            h = nv[0].get("health") or {}
            s = h.get("nvme")
            if self.check(s is not None, f"health: NVMe SMART log read through the admin ioctl ({missing_of(h, 'nvme.smart')})"):
                t = s.get("temperature_celsius")
                self.check(t is not None and 0 < t < 100 and h.get("temperature_celsius") == t,
                      f"health: NVMe composite temperature {t} °C (QEMU: 323 K)")
                self.check(s["percent_used"] <= 100 and h.get("life_time_used_percent_max") == s["percent_used"],
                      f"health: NVMe percent used {s['percent_used']} % is the summary's life used")
                self.check(s["media_errors"] == 0 and h.get("media_errors") == 0, f"health: NVMe media errors {s['media_errors']}")
                self.check(s["data_units_read"] > 0, f"health: NVMe data units read {s['data_units_read']} (the kernel's own reads)")
            self.check("pcie" in h or missing_of(h, "pcie"), f"health: NVMe PCIe link read or its absence explained ({h.get('pcie')}, {missing_of(h, 'pcie.current_gts')})")
        sata = [d for d in disks if d["class"] == "sata"]
        if self.check(len(sata) == 1, "health: one SATA disk"):
            h = sata[0].get("health") or {}
            s = h.get("sata")
            if self.check(s is not None, f"health: SATA SMART READ DATA through SG_IO ({missing_of(h, 'sata.smart')})"):
                ids = sorted(x["id"] for x in s["attributes"])
                self.check(5 in ids and 9 in ids, f"health: SATA attributes {ids} (QEMU's AHCI: 5, 9, 190)")
                self.check(h.get("udma_crc_errors") is not None or missing_of(h, "sata.udma_crc_error_count"),
                      f"health: SATA CRC count {h.get('udma_crc_errors')} or its absence explained "
                      f"({missing_of(h, 'sata.udma_crc_error_count')})")
        usb = [d for d in disks if d["class"] == "usb"]
        self.check(usb and all(any("off for USB" in r for r in missing_of(d.get("health"), "sata.smart")) for d in usb),
              "health: no USB disk asked for SMART, each says why")
        self.check(usb and all((d.get("health") or {}).get("over_current_count") == 0 for d in usb),
              f"health: every USB port's over-current count read, 0 ({[(d['name'], (d.get('health') or {}).get('over_current_count')) for d in usb]})")
        ufs = [d for d in disks if d["class"] == "ufs"]
        if "ufs" in self.classes and self.check(len(ufs) == 1, "health: one UFS disk"):
            h = ufs[0].get("health") or {}
            self.check(h.get("ufs") is not None and missing_of(h, "ufs.life_time_a"),
                  f"health: UFS health descriptor read (QEMU: life time not defined: {missing_of(h, 'ufs.life_time_a')})")

    def scenario_emmc(self):
        """The eMMC board (ast2600-evb): the boot-service run tests the user area through test files
        on its ext4 and never writes the boot partitions (the host compares their bytes)."""
        rc = self.rc_of("emmc")
        rep = self.load_report("emmc")
        if rep is None:
            return
        self.summary("emmc", rep, rc)
        self.check(rep["status"] == "complete" and rc == 0 and rep.get("exit_code") == 0,
              f"emmc: report complete, the unit passes (exit {rc})")
        areas = {}
        for d in rep["devices"]:
            areas[(d["disk"].get("mmc") or {}).get("area")] = d
        user = areas.get("user")
        if self.check(user is not None and user["disk"]["class"] == "emmc", f"emmc: the user area tested, class emmc ({sorted(map(str, areas))})"):
            cells = {c["workload"]: c for c in user["cells"]}
            self.check(user["verdict"]["pass"] and all(c["status"] == "passed" for c in user["cells"]),
                  f"emmc: every cell of the user area passed: {[(w, c['status']) for w, c in cells.items()]}")
            for w in ("seq-write", "seq-read"):
                t = ((cells.get(w) or {}).get("result") or {}).get("target") or {}
                self.check(t.get("kind") == "file" and str(t.get("path", "")).startswith("/media/emmc/"),
                      f"emmc: {w} ran on a test file on the user area's ext4 ({t})")
        for b in ("boot0", "boot1"):
            d = areas.get(b)
            if d is None:
                self.log(f"  note emmc: {b} not tested by the run")
                continue
            bad = [c["workload"] for c in d["cells"] if c["status"] != "skipped" and "write" in c["workload"]]
            self.check(not bad, f"emmc: no write test ran on the {b} area ({bad})")
        lj = self.read("list.json")
        if self.check(lj is not None, "emmc: inventory present"):
            disks = json.loads(lj).get("inventory", {}).get("disks") or json.loads(lj).get("disks", [])
            got = sorted(((d.get("mmc") or {}).get("area") or "-") for d in disks if d["class"] == "emmc")
            self.check(got == ["boot0", "boot1", "user"], f"emmc: inventory has the user area and both boot partitions ({got})")
            self.check(all("rpmb" not in d["name"] for d in disks), "emmc: no RPMB area (QEMU 10.0's eMMC models none)")
            # EXT_CSD through MMC_IOC_CMD (SEND_EXT_CSD) on the user area only.
            byarea = {(d.get("mmc") or {}).get("area"): d for d in disks if d["class"] == "emmc"}
            h = (byarea.get("user") or {}).get("health") or {}
            e = (h.get("emmc") or {}).get("ext_csd")
            if self.check(e is not None and e.get("source") == "ioctl",
                     f"health: eMMC EXT_CSD read through MMC_IOC_CMD ({missing_of(h, 'emmc.ext_csd')})"):
                kib = self.devices["emmc"]["image"]["boot_kib"]
                self.check(e["boot_size_kib"] == kib, f"health: EXT_CSD BOOT_SIZE_MULT gives {kib} KiB boot areas ({e['boot_size_kib']})")
                self.check(e["ext_csd_rev"] <= 8, f"health: EXT_CSD_REV {e['ext_csd_rev']} ({e.get('emmc_version')})")
            self.check(h.get("life_time_used_percent_max") is not None or missing_of(h, "emmc.life_time_a"),
                  f"health: eMMC life time {h.get('life_time_used_percent_max')} or its absence explained ({missing_of(h, 'emmc.life_time_a')})")
            for b in ("boot0", "boot1"):
                hb = (byarea.get(b) or {}).get("health") or {}
                self.check(any("boot/RPMB" in r for r in missing_of(hb, "emmc.ext_csd")),
                      f"health: no ioctl on {b} (the kernel would switch partitions), said so")
        boot = 2 * (self.devices["emmc"]["image"]["boot_kib"] << 10)
        if self.img and os.path.exists(os.path.join(self.img, "emmc-boot.sha256")):
            with open(os.path.join(self.img, "emmc.img"), "rb") as f:
                now = hashlib.sha256(f.read(boot)).hexdigest()
            with open(os.path.join(self.img, "emmc-boot.sha256")) as f:
                before = f.read().strip()
            self.check(now == before, f"emmc: boot0 and boot1 unchanged on the image (sha256 {now[:16]}, before {before[:16]})")

    def scenario_blkdebug(self):
        rc = self.rc_of("blkdebug"); rep = self.load_report("blkdebug")
        if rep is None:
            return
        self.summary("blkdebug", rep, rc)
        self.check(rc == 1 and rep["status"] == "complete", f"blkdebug: complete, exit 1 (got {rc})")
        d = self.dev(rep, "err")
        if self.check(d is not None, "blkdebug: the blkdebug stick is in the report"):
            self.check(not d["verdict"]["pass"], "blkdebug: the blkdebug stick fails")
            bad = [c for c in d["cells"] if c["status"] in ("failed", "error")]
            self.check(bool(bad) and any(re.search(r"I/O error|critical medium error|Medium Error|Buffer I/O", cell_text(c)) for c in bad),
                  "blkdebug: a cell of the stick failed with the kernel's words (I/O error ...)")
            self.check(any(c.get("kernel_events") for c in bad), "blkdebug: kernel events attributed to the stick's cell")
            self.check(all(d["name"] in " ".join(texts(rep["verdict"]["reasons"])) for _ in [0]) and len(rep["verdict"]["reasons"]) == 1,
                  "blkdebug: the unit's only failure is the blkdebug stick")
        self.others_complete("blkdebug", rep)
        self.no_leftover("blkdebug")

    def scenario_sigterm(self):
        rc = self.rc_of("sigterm"); rep = self.load_report("sigterm")
        if rep is None:
            return
        self.summary("sigterm", rep, rc)
        self.check(rc == 3, f"sigterm: exit code 3 (got {rc})")
        self.check(rep["status"] == "interrupted" and rep.get("interrupted_by") == "SIGTERM" and rep.get("exit_code") == 3,
              "sigterm: report marked interrupted by SIGTERM, exit_code 3")
        d = find(rep, cls="sata")
        if d:
            self.check(d["cells"][0]["status"] == "interrupted", f"sigterm: the SATA seq-write cell is interrupted ({d['cells'][0]['status']})")
        self.no_leftover("sigterm")

    def scenario_enospc(self):
        rc = self.rc_of("enospc"); rep = self.load_report("enospc")
        if rep is None:
            return
        self.summary("enospc", rep, rc)
        self.check(rep["status"] == "complete" and rc == 1, f"enospc: complete, exit 1 (got {rc})")
        d = find(rep, cls="sd")
        if d:
            bad = [c for c in d["cells"] if c["status"] in ("error", "failed")]
            self.check(any(re.search(r"No space left|ENOSPC", cell_text(c)) for c in bad),
                  "enospc: an SD cell is error/failed naming ENOSPC (No space left on device)")
            self.check(not d["verdict"]["pass"], "enospc: the SD card fails")
        self.others_complete("enospc", rep, "ehci")
        self.no_leftover("enospc")

    def scenario_erofs(self):
        rc = self.rc_of("erofs"); rep = self.load_report("erofs")
        if rep is None:
            return
        self.summary("erofs", rep, rc)
        self.check(rep["status"] == "complete" and rc == 1, f"erofs: complete, exit 1 (got {rc})")
        d = self.dev(rep, "uas")
        if d:
            bad = [c for c in d["cells"] if c["status"] in ("error", "failed")]
            # Before 6.6 an ext4 error on an errors=remount-ro mount sets the superblock read-only
            # and writes fail with EROFS. From 6.6 the abort shuts the filesystem down instead
            # (SB_RDONLY is no longer set from the error path): every operation fails with EIO,
            # and only the kernel's own lines say why. Either is the fault named.
            self.check(any(re.search(r"Read-only file system|EROFS|read-only", cell_text(c))
                      or (re.search(r"Input/output error|EIO", cell_text(c))
                          and any(re.search(r"EXT4-fs error|Aborting journal|Remounting filesystem read-only", e["line"])
                                  for x in d["cells"] for e in x.get("kernel_events", [])))
                      for c in bad),
                  "erofs: a UAS cell is error/failed naming EROFS / read-only, or (kernel 6.6+, ext4 shut down) EIO beside the kernel's ext4 abort")
            self.check(any(re.search(r"EXT4-fs", " ".join(e["line"] for e in c.get("kernel_events", []))) for c in d["cells"]),
                  "erofs: the kernel's EXT4-fs lines are attributed to the UAS disk")
            self.check(not d["verdict"]["pass"], "erofs: the UAS disk fails")
        self.others_complete("erofs", rep)
        self.no_leftover("erofs")
        self.log("\n--- erofs, then remounted read-write: the next run")
        rc = self.rc_of("erofs-rerun"); rep = self.load_report("erofs-rerun")
        if rep is None:
            return
        self.summary("erofs-rerun", rep, rc)
        on_medium = [l for l in (self.read("erofs-remounted.ls") or "").split() if l.startswith(".usbperf-testfile-")]
        stale = [w for w in rep.get("warnings", []) if "stale test file" in w]
        self.log(f"  test files found on the remounted filesystem: {on_medium}; report warnings: {stale}")
        self.check(rc == 0 and rep["status"] == "complete", f"erofs-rerun: the next run passes (exit {rc})")
        self.check(len(stale) == len(on_medium), "erofs-rerun: every test file the read-only filesystem kept is removed and reported as stale")
        self.no_leftover("erofs-rerun")

    def scenario_unplug(self):
        rc = self.rc_of("unplug"); rep = self.load_report("unplug")
        if rep is None:
            return
        self.summary("unplug", rep, rc)
        ev = ""
        if self.host_events and os.path.exists(self.host_events):
            with open(self.host_events) as f:
                ev = f.read()
        x = self.devices["xbot"]
        self.check(f"device_del {x['qdev']}" in ev and '"return"' in ev, f"unplug: host removed the stick over QMP ({ev.strip()})")
        self.check(rep["status"] == "complete" and rc == 1, f"unplug: complete, exit 1 (got {rc})")
        d = self.dev(rep, "xbot")
        if d:
            c = d["cells"][0]
            self.check(c["status"] == "error", f"unplug: the stick's seq-write (the cell it was unplugged in) is error ({c['status']})")
            self.check(re.search(r"USB disconnect", cell_text(c)) is not None, "unplug: that cell quotes the kernel's 'USB disconnect'")
            # The kernel removes the disk asynchronously after the disconnect: the product's
            # vanish check right after the cell may still see /sys/class/block/sdX, and then says
            # 'vanished' on the next cell (seen under TCG). Either cell is accepted.
            self.check(any("vanished" in cell_text(x) and x["status"] == "error" for x in d["cells"]),
                  "unplug: the report says the stick vanished")
            self.check(all(x["status"] == "error" for x in d["cells"]), "unplug: no cell of the vanished stick passed")
        self.others_complete("unplug", rep)
        self.no_leftover("unplug")
        rp = x["replug"]
        self.log(f"\n--- unplug, then the same stick plugged into another port ({rp['bus']} port {rp['port']}): the next run")
        self.check(f"device_add {rp['qdev']}" in ev and ev.count('"return"') >= 5, "unplug-replug: host plugged the stick back over QMP")
        rc = self.rc_of("unplug-replug"); rep = self.load_report("unplug-replug")
        if rep is None:
            return
        self.summary("unplug-replug", rep, rc)
        on_medium = [l for l in (self.read("unplug-replugged.ls") or "").split() if l.startswith(".usbperf-testfile-")]
        stale = [w for w in rep.get("warnings", []) if "stale test file" in w]
        self.log(f"  test files found on the re-plugged stick: {on_medium}; report warnings: {stale}")
        self.check(rc == 0 and rep["status"] == "complete", f"unplug-replug: the next run passes (exit {rc})")
        d = self.dev(rep, "xbot")
        if self.check(d is not None, "unplug-replug: the stick is found again by its serial"):
            lcs = d.get("link_checks", [])
            self.check(len(lcs) == 1 and lcs[0]["pass"] and lcs[0]["measured_mbps"] == rp["speed_mbps"]
                  and lcs[0]["port"].endswith(f"-{rp['port']}")
                  and (d["disk"].get("usb") or {}).get("host_controller_driver") == rp["hcd"],
                  f"unplug-replug: found on its new port, {rp['hcd']} port {rp['port']} at {rp['speed_mbps']}M: "
                  f"{[(l['port'], l['measured_mbps']) for l in lcs]}")
        self.check(len(stale) == len(on_medium), "unplug-replug: every test file the unplug left on the stick is removed and reported as stale")
        self.no_leftover("unplug-replug")

    def scenario_health(self):
        """Health limits judged on the real answers of QEMU's NVMe and AHCI disk."""
        rc = self.rc_of("health")
        rep = self.load_report("health")
        if rep is None:
            return
        self.summary("health", rep, rc)
        self.check(rc == 1 and rep["status"] == "complete", f"health: the run completes and fails (exit {rc})")
        nv, sa = find(rep, cls="nvme"), find(rep, cls="sata")
        if not (self.check(nv is not None, "health: the NVMe disk tested") and self.check(sa is not None, "health: the SATA disk tested")):
            return
        hr = lambda d: [r for r in d["verdict"].get("reasons", []) if isinstance(r, dict) and r.get("kind") == "health"]
        got = sorted(r.get("metric") for r in hr(nv))
        self.check(got == ["pcie_width"], f"health: the NVMe fails on its unverifiable PCIe link only, its 0 % used and 0 media errors pass ({got})")
        for r in hr(nv):
            self.check(r.get("measured") is None and r.get("limit") == 1 and r.get("rule") == "thresholds[0]" and "unknown" in r["text"],
                  f"health: the NVMe reason carries rule, metric and limit: {r}")
        got = [(r.get("metric"), r.get("measured")) for r in hr(sa)]
        self.check(got == [("udma_crc_errors", None)], f"health: the SATA disk fails on its missing CRC count (attribute 199) ({got})")
        cells_ok = all(c["status"] == "passed" for d in (nv, sa) for c in d["cells"])
        self.check(cells_ok, "health: the tests themselves passed: only the health limits failed")

    def same_lane_apart(self, scen, rep):
        """No cell ran beside a disk of its own lane; cells of different lanes did run together."""
        lanes = rep["schedule"]["lanes"]
        lane_of = {d: l["key"] for l in lanes for d in l["disks"]}
        bad, together = [], 0
        for d in rep["devices"]:
            for c in d["cells"]:
                w = c.get("concurrent_with", [])
                together += bool(w)
                bad += [(d["name"], c["workload"], o) for o in w if lane_of.get(o) == lane_of.get(d["name"])]
        self.check(rep["schedule"]["mode"] == "auto", f"{scen}: the report says schedule auto ({rep['schedule']['mode']})")
        self.check(not bad, f"{scen}: no cell ran beside a disk of its own lane ({bad})")
        # A cell measured again alone by the machine or CPU rule ran beside other lanes first
        # (that is how the rule saw the CPUs busy): on a slow emulated guest the rule may fire on
        # the first cells and the rest of the run falls back to one at a time.
        beside = [a for a in rep["schedule"].get("alone", []) if a.get("rule") in ("machine_cpu", "measured_cpu")]
        self.check(together > 0 or bool(beside),
              f"{scen}: cells of different lanes ran at the same time ({together} cells, {len(beside)} measured again alone after running beside others)")
        self.log(f"  lanes: {[(l['key'], l['disks']) for l in lanes]}; ran alone: "
              f"{[(x['device'], x['workload'], x['rule']) for x in rep['schedule'].get('alone', [])]}")

    def scenario_autoboot(self):
        """The boot service's run with --schedule auto. What must hold whatever the
        speed: the run completes, no cell ran beside a disk of its own lane, the OHCI stick's
        12M link still fails it, no healthy device got a kernel event or an error, nothing is left
        behind. The figures are compared with the serial baseline and printed, not asserted:
        QEMU emulates every USB controller, the AHCI and the SD host in its one main-loop thread,
        so unthrottled, its buses are not independent (scripts/vm-e2e.sh --bench-schedule measures
        them at board-like rates)."""
        rc = self.rc_of("autoboot"); rep = self.load_report("autoboot")
        if rep is None:
            return
        self.summary("autoboot", rep, rc)
        self.check(rc in (0, 1) and rep["status"] == "complete", f"autoboot: complete (exit {rc})")
        self.same_lane_apart("autoboot", rep)
        for i in self.with_expect("link_fault"):
            got = self.expect(i)["link_fault"]["measured_mbps"]
            o = self.dev(rep, i)
            if self.check(o is not None, f"autoboot: the {i} stick (its link fault) is in the report"):
                lcs = o.get("link_checks", [])
                self.check(len(lcs) == 1 and not lcs[0]["pass"] and lcs[0]["measured_mbps"] == got,
                      f"autoboot: the {i} stick fails its link check at {got}M: {lcs}")
        for d in rep["devices"]:
            ev = [(c["workload"], e["line"]) for c in d["cells"] for e in c.get("kernel_events", [])]
            st = [c["status"] for c in d["cells"]]
            self.check(not ev and all(s in ("passed", "failed", "skipped") for s in st),
                  f"autoboot: {d['name']} ran every test without an error or a kernel event: {st} {ev}")
        self.no_leftover("autoboot")
        files = sorted(glob.glob(os.path.join(self.out, "usbperf-*.yaml")))
        if files:
            with open(files[-1]) as f:
                base = yaml.load(f, Loader=Loader)
            fig = lambda r: {(d["name"], c["workload"]): (c.get("result") or {}).get("mib_per_s")
                             for d in r["devices"] for c in d["cells"]}
            fa, fb = fig(rep), fig(base)
            ratios = [f"{k[0]} {k[1]} {fa[k] / fb[k]:.2f}" for k in sorted(fa) if fa.get(k) and fb.get(k)]
            self.log(f"  note autoboot: MiB/s auto/serial: {', '.join(ratios)}")
            diff = [(d["name"], d["verdict"]["pass"]) for d in rep["devices"]
                    if any(b["name"] == d["name"] and b["verdict"]["pass"] != d["verdict"]["pass"] for b in base["devices"])]
            self.log(f"  note autoboot: device verdicts that differ from serial: {diff or 'none'}")

    def scenario_auto(self):
        """The blkdebug stick and the SD card at the same time on a real kernel: the
        kernel's I/O errors go to the stick's cells only, the SD card passes without one."""
        rc = self.rc_of("auto"); rep = self.load_report("auto")
        if rep is None:
            return
        self.summary("auto", rep, rc)
        self.check(rc == 1 and rep["status"] == "complete", f"auto: complete, exit 1 (got {rc})")
        d, sd = self.dev(rep, "err"), self.dev(rep, "sd")
        if self.check(d is not None and sd is not None, "auto: the blkdebug stick and the SD card are in the report"):
            bad = [c for c in d["cells"] if c["status"] in ("failed", "error")]
            self.check(any(c.get("kernel_events") for c in bad), "auto: kernel events attributed to the stick's failed cell")
            self.check(not any(c.get("kernel_events") for c in sd["cells"]),
                  f"auto: none of the stick's kernel lines landed on the SD card beside it")
            ran_with = [o for c in d["cells"] for o in c.get("concurrent_with", [])]
            self.check(sd["name"] in ran_with, f"auto: the stick's cells ran beside the SD card ({ran_with})")
        self.others_complete("auto", rep)
        self.same_lane_apart("auto", rep)
        self.no_leftover("auto")

    def images_clean(self):
        # every ext4 test medium; the eMMC's user area lies past its boot partitions
        for id_, d in self.devices.items():
            im = d.get("image") or {}
            if id_ == "out" or im.get("fs") != "ext4":
                continue
            p = os.path.join(self.img, f"{id_}.img")
            if not os.path.exists(p):
                continue
            if im.get("layout") == "emmc":
                p += f"?offset={2 * (im['boot_kib'] << 10)}"
            r = subprocess.run(["debugfs", "-R", "ls -l /", p], capture_output=True, text=True)
            left = re.findall(r"\.usbperf-testfile-\S+", r.stdout)
            self.check(not left, f"{os.path.basename(p)}: no test file left on the medium {left}")

    def fleet(self):
        """The guest's reports aggregated by usbperf-matrix fleet on the host: every report
        counted, and the one bad link is what the fleet reports."""
        with open(self.fleet_file) as f:
            d = json.load(f)
        ports = {p["port"]: p for p in d["link_failures_by_port"]}
        # Every report the guest wrote is aggregated (fewer for a subset of the scenarios).
        written = [f for _, _, files in os.walk(self.out) for f in files
                   if f.startswith("usbperf-") and f.endswith((".yaml", ".json"))]
        # The interrupted run of the sigterm scenario is listed as skipped (its figures are partial).
        skipped = d.get("skipped", [])
        self.check(all("interrupted" in s["issue"] for s in skipped), f"fleet: skipped only interrupted runs: {skipped}")
        self.check(written and d["reports"] + len(skipped) == len(written),
                   f"fleet: reports aggregated: {d['reports']} + {len(skipped)} skipped of {len(written)} written")
        bad_ports = [self.expect(i)["fleet_port"] for i in self.with_expect("fleet_port")]
        for port in bad_ports:
            self.check(ports.get(port, {}).get("link_failures", 0) >= 1, f"fleet: link failures on {port}: {ports}")
        bad = [k for k, p in ports.items() if k not in bad_ports and p["link_failures"]]
        self.check(not bad, f"fleet: {d['reports']} guest reports, {d['devices']} device tests, "
                            f"no link failures on other ports than {bad_ports}: {bad}")
        # With QEMU 10's NVMe, its wear is a fleet figure (0 % used on every report).
        if "nvme" in self.classes:
            wear = [m for g in d["groups"] for m in g["metrics"] if m["metric"] == "health.life_used_percent"]
            self.check(wear and all(m["max"] == 0 for m in wear),
                       f"fleet: NVMe wear distribution over {sum(m['count'] for m in wear)} device tests, max 0 % ({wear})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--guest", required=True, help="the guest's description (scripts/vm/guests.py resolve)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--scenarios", default="baseline")
    ap.add_argument("--img", help="dir of the guest's disk images (host-side leftover check)")
    ap.add_argument("--validator", default="scripts/ci/validate-report.py")
    ap.add_argument("--host-events")
    ap.add_argument("--fleet", help="usbperf-matrix fleet --format json over DIR")
    ap.add_argument("--kernel", default="", help="the guest kernel's release (uname -r), for messages")
    a = ap.parse_args()
    with open(a.guest) as f:
        guest = json.load(f)
    c = Checker(guest, a.out, img=a.img, validator=a.validator, host_events=a.host_events,
                fleet=a.fleet, kernel=a.kernel)
    failures = c.run(a.scenarios.split())
    print()
    print(f"check.py: {len(failures)} failure(s)" if failures else f"check.py: all {c.passed} assertions held")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
