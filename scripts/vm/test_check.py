#!/usr/bin/env python3
"""Tests of check.py and guests.py over recorded guest outputs (tests/fixtures/vm/<config>/: the
reports and e2e/ files a vm-e2e guest left on its output disk, the host's QMP events, the
fleet's aggregate, and run.json naming the guest, arch and scenarios of that run). A recorded
passing run passes every check; planted faults fail the checks they should. No root, no QEMU:
    python3 scripts/vm/test_check.py [-v]"""
import glob, json, os, re, shutil, subprocess, sys, tempfile, unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "vm")
sys.path.insert(0, HERE)
import check  # noqa: E402
import guests  # noqa: E402

import yaml  # noqa: E402  (check.py's own dependency)


def fixture(name):
    with open(os.path.join(FIXTURES, name, "run.json")) as f:
        return json.load(f)


def checker(name, out=None, **kw):
    """A Checker over the recorded run `name` (or a modified copy of its output in `out`)."""
    run = fixture(name)
    d = os.path.join(FIXTURES, name)
    fleet = os.path.join(d, "fleet.json")
    kw.setdefault("fleet", fleet if os.path.exists(fleet) else None)
    kw.setdefault("host_events", os.path.join(d, "host-events.txt"))
    kw.setdefault("validator", None)
    g = guests.resolve(run["guest"], run["arch"])
    return check.Checker(g, out or os.path.join(d, "out"), log=lambda _: None, **kw), run["scenarios"]


class Recorded:
    """A modifiable copy of a recorded run's output directory."""

    def __init__(self, name):
        self.name = name
        self.tmp = tempfile.mkdtemp(prefix="usbperf-test-check-")
        self.out = os.path.join(self.tmp, "out")
        shutil.copytree(os.path.join(FIXTURES, name, "out"), self.out)

    def report(self, scen):
        d = self.out if scen in ("baseline", "emmc") else os.path.join(self.out, scen)
        (p,) = glob.glob(os.path.join(d, "usbperf-*.yaml"))
        return p

    def edit_report(self, scen, fn):
        p = self.report(scen)
        with open(p) as f:
            rep = yaml.load(f, Loader=check.Loader)
        fn(rep)
        with open(p, "w") as f:
            yaml.safe_dump(rep, f, sort_keys=False)

    def write_e2e(self, name, text):
        with open(os.path.join(self.out, "e2e", name), "w") as f:
            f.write(text)

    def run(self, scenarios=None, **kw):
        c, scen = checker(self.name, self.out, **kw)
        c.run(scenarios or scen)
        return c

    def cleanup(self):
        shutil.rmtree(self.tmp)


def device(rep, serial=None, cls=None):
    d = check.find(rep, serial=serial, cls=cls)
    assert d is not None, (serial, cls)
    return d


class RecordedRunsPass(unittest.TestCase):
    def test_x86_64_usb_board_passes_every_check(self):
        # with the report validator, as vm-e2e runs it
        c, scen = checker("x86_64-6.1", validator=os.path.join(ROOT, "scripts", "ci", "validate-report.py"))
        self.assertEqual(c.run(scen), [])
        self.assertGreater(c.passed, 140)

    def test_x86_64_q10_nvme_ufs_passes_every_check(self):
        c, scen = checker("x86_64-6.12-q10")
        self.assertEqual(c.run(scen), [])
        self.assertGreater(c.passed, 160)

    def test_emmc_board_passes_every_check(self):
        c, scen = checker("armv7-6.1-emmc-q10")
        self.assertEqual(c.run(scen), [])
        self.assertGreater(c.passed, 15)

    def test_checkers_share_no_state(self):
        bad, scen = checker("x86_64-6.1")
        bad.run(["no-such-scenario"])
        good, scen = checker("x86_64-6.1")
        self.assertEqual(good.run(scen), [])
        self.assertEqual(len(bad.failures), 1)


class PlantedFaults(unittest.TestCase):
    """Each fault planted in a copy of the recorded x86_64 run fails the check named."""

    def setUp(self):
        self.r = Recorded("x86_64-6.1")
        self.addCleanup(self.r.cleanup)

    def assertFails(self, pattern, c):
        self.assertTrue(any(re.search(pattern, f) for f in c.failures),
                        f"no failure matching {pattern!r} in {c.failures}")

    def test_leftover_test_file(self):
        self.r.write_e2e("blkdebug.leftover", "/media/sd/.usbperf-testfile-99-0.tmp\n")
        c = self.r.run()
        self.assertFails(r"^blkdebug: no \.usbperf-testfile-\* left", c)
        self.assertEqual(len(c.failures), 1, c.failures)

    def test_leftover_on_a_read_only_mount_is_allowed_only_there(self):
        self.r.write_e2e("erofs.leftover", "/media/uas/.usbperf-testfile-7-0.tmp\n")
        self.assertEqual(self.r.run(["erofs"]).failures, [])
        self.r.write_e2e("unplug.leftover", "/media/uas/.usbperf-testfile-7-0.tmp\n")
        self.assertFails(r"^unplug: no \.usbperf-testfile-\* left", self.r.run(["unplug"]))

    def test_missing_leftover_list(self):
        os.unlink(os.path.join(self.r.out, "e2e", "sigterm.leftover"))
        self.assertFails(r"^sigterm: no \.usbperf-testfile-\* left.*missing", self.r.run(["sigterm"]))

    def test_healthy_device_failed(self):
        def fail_sd(rep):
            sd = device(rep, cls="sd")
            sd["verdict"]["pass"] = False
            sd["cells"][0]["status"] = "failed"
        self.r.edit_report("blkdebug", fail_sd)
        self.assertFails(r"^blkdebug: the healthy device .* still completed and passed", self.r.run(["blkdebug"]))

    def test_missing_report(self):
        os.unlink(self.r.report("sigterm"))
        c = self.r.run(["sigterm"])
        self.assertFails(r"^sigterm: exactly one report in the report directory \(0", c)

    def test_uas_cell_without_the_read_only_reason(self):
        def no_reason(rep):
            for cell in device(rep, serial="UAS00001")["cells"]:
                cell["reasons"] = ["some other error"]
                for e in cell.get("kernel_events", []):
                    e["line"] = "usb 3-1: something"
        self.r.edit_report("erofs", no_reason)
        c = self.r.run(["erofs"])
        self.assertFails(r"^erofs: a UAS cell is error/failed naming EROFS", c)
        self.assertFails(r"^erofs: the kernel's EXT4-fs lines are attributed", c)

    def test_link_fault_not_reported(self):
        def good_link(rep):
            for lc in device(rep, serial="OHCI0001").get("link_checks", []):
                lc["pass"], lc["measured_mbps"] = True, 480
        self.r.edit_report("baseline", good_link)
        self.assertFails(r"^baseline: OHCI0001 fails the link check, expected 480 measured 12", self.r.run(["baseline"]))

    def test_wrong_usb_speed(self):
        self.r.edit_report("baseline", lambda rep: device(rep, serial="UAS00001")["disk"]["usb"].update(speed_mbps=480))
        self.assertFails(r"^baseline: UAS00001 classified usb speed 480", self.r.run(["baseline"]))

    def test_stale_file_not_reported(self):
        self.r.edit_report("baseline", lambda rep: rep.update(warnings=[]))
        self.assertFails(r"^baseline: the test file a power cut left on the sata disk", self.r.run(["baseline"]))

    def test_wrong_exit_code(self):
        self.r.write_e2e("sigterm.rc", "0\n")
        self.assertFails(r"^sigterm: exit code 3 \(got 0\)", self.r.run(["sigterm"]))

    def test_unplug_without_qmp(self):
        ev = os.path.join(self.r.tmp, "host-events.txt")
        with open(ev, "w") as f:
            f.write("host T+85.2s QEMU exited 0\n")
        c = self.r.run(["unplug"], host_events=ev)
        self.assertFails(r"^unplug: host removed the stick over QMP", c)
        self.assertFails(r"^unplug-replug: host plugged the stick back over QMP", c)

    def test_same_lane_together(self):
        def same_lane(rep):
            lanes = rep["schedule"]["lanes"]
            lane = next(l for l in lanes if len(l["disks"]) > 1) if any(len(l["disks"]) > 1 for l in lanes) else lanes[0]
            d = next(x for x in rep["devices"] if x["name"] == lane["disks"][0])
            d["cells"][0]["concurrent_with"] = [lane["disks"][-1] if len(lane["disks"]) > 1 else d["name"]]
        self.r.edit_report("autoboot", same_lane)
        self.assertFails(r"^autoboot: no cell ran beside a disk of its own lane", self.r.run(["autoboot"]))

    def test_unknown_scenario(self):
        c = self.r.run(scenarios=["baseline", "bogus"])
        self.assertEqual(c.failures, ["bogus: a scenario check.py knows"])

    def test_fleet_link_failure_elsewhere(self):
        with open(os.path.join(FIXTURES, "x86_64-6.1", "fleet.json")) as f:
            d = json.load(f)
        d["link_failures_by_port"].append({"port": "usb:3-2", "link_failures": 1})
        p = os.path.join(self.r.tmp, "fleet.json")
        with open(p, "w") as f:
            json.dump(d, f)
        self.assertFails(r"^fleet: .*no link failures on other ports", self.r.run(["sigterm"], fleet=p))


class NvmeFaults(unittest.TestCase):
    def setUp(self):
        self.r = Recorded("x86_64-6.12-q10")
        self.addCleanup(self.r.cleanup)

    def test_nvme_wear_in_the_fleet(self):
        with open(os.path.join(FIXTURES, "x86_64-6.12-q10", "fleet.json")) as f:
            d = json.load(f)
        for g in d["groups"]:
            for m in g["metrics"]:
                if m["metric"] == "health.life_used_percent":
                    m["max"] = 3
        p = os.path.join(self.r.tmp, "fleet.json")
        with open(p, "w") as f:
            json.dump(d, f)
        c = self.r.run(["health"], fleet=p)
        self.assertTrue(any(f.startswith("fleet: NVMe wear distribution") for f in c.failures), c.failures)

    def test_nvme_cell_failed(self):
        self.r.edit_report("baseline", lambda rep: device(rep, cls="nvme")["cells"][-1].update(status="failed"))
        c = self.r.run(["baseline"], fleet=None)
        self.assertTrue(any(re.match(r"baseline: \S+ \(nvme\) passes every cell", f) for f in c.failures), c.failures)


class EmmcFaults(unittest.TestCase):
    def setUp(self):
        self.r = Recorded("armv7-6.1-emmc-q10")
        self.addCleanup(self.r.cleanup)

    def test_write_on_a_boot_partition(self):
        def boot_write(rep):
            boot = next(d for d in rep["devices"] if (d["disk"].get("mmc") or {}).get("area") == "boot0") \
                if any((d["disk"].get("mmc") or {}).get("area") == "boot0" for d in rep["devices"]) else None
            if boot is None:  # the run tested the user area only: add boot0 as it would appear
                user = rep["devices"][0]
                boot = json.loads(json.dumps(user))
                boot["disk"]["mmc"]["area"] = "boot0"
                rep["devices"].append(boot)
            boot["cells"][0].update(workload="seq-write", status="passed")
        self.r.edit_report("emmc", boot_write)
        self.assertTrue(any(f.startswith("emmc: no write test ran on the boot0 area") for f in self.r.run().failures))

    def test_boot_partitions_changed(self):
        img = os.path.join(self.r.tmp, "img")
        os.makedirs(img)
        with open(os.path.join(img, "emmc.img"), "wb") as f:
            f.write(b"\0" * (2 << 20))
        with open(os.path.join(img, "emmc-boot.sha256"), "w") as f:
            f.write("0" * 64 + "\n")
        c = self.r.run(img=img)
        self.assertTrue(any(f.startswith("emmc: boot0 and boot1 unchanged on the image") for f in c.failures), c.failures)


class GuestDescriptions(unittest.TestCase):
    """guests.json against what reads it: every guest renders, and the serials the scenario
    configs select exist in it."""

    def test_every_guest_renders(self):
        data = guests.load()
        for name, g in data["guests"].items():
            for arch in guests.merged(name, data).get("arches", ["x86_64"]):
                r = guests.resolve(name, arch, data=data)
                args = guests.qemu_args(r, "/img", {"throttle": "throttling.bps-read=1"}, "/dtb")
                self.assertIn("-M", args, name)
                env = guests.init_env(r)
                self.assertIn("FIND_out=", env, f"{name}: the guest's init needs its output disk")
                drives = [a for a in args if a.startswith("if=")]
                self.assertEqual(len(drives), len(guests.disks(r)), name)
                self.assertNotIn("{", " ".join(args), f"{name}: an unset variable")

    def test_scenario_configs_select_described_serials(self):
        described = {d.get("serial") for name in guests.load()["guests"]
                     for d in guests.disks(guests.resolve(name, "x86_64" if name != "emmc-board" else "armv7"))}
        for p in [os.path.join(HERE, "usbperf.yaml")] + glob.glob(os.path.join(HERE, "scenarios", "*.yaml")):
            with open(p) as f:
                text = f.read()
            for s in re.findall(r"serial: (\w+)", text):
                self.assertIn(s, described, f"{os.path.basename(p)} selects serial {s}, which no guest has")

    def test_a_driverless_disk_is_left_out(self):
        with tempfile.TemporaryDirectory() as kmods:
            os.makedirs(os.path.join(kmods, "kernel"))
            open(os.path.join(kmods, "kernel", "nvme.ko"), "w").close()
            g = guests.resolve("usb-board-q10", "x86_64", kmods)
        self.assertEqual(g["dropped"], ["ufs"])
        self.assertIsNone(guests.device(g, "ufs"))
        self.assertNotIn("ufs", guests.init_env(g).split("DISKS=")[1].split("\n")[0])

    def test_recorded_runs_match_their_guest(self):
        # the disks each recorded guest's init found are the ones its description lists
        for name in sorted(os.listdir(FIXTURES)):
            if not os.path.exists(os.path.join(FIXTURES, name, "run.json")):
                continue
            run = fixture(name)
            g = guests.resolve(run["guest"], run["arch"])
            with open(os.path.join(FIXTURES, name, "out", "e2e", "names.txt")) as f:
                found = {k for k, v in (x.split("=", 1) for x in f.read().split()) if v}
            want = {d["id"].upper() for d in guests.disks(g) if d.get("find")}
            self.assertTrue(found <= want | {"OUT"}, (name, found - want))

    def test_check_py_command_line(self):
        # the command line vm-e2e runs, over the recorded x86_64 run
        d = os.path.join(FIXTURES, "x86_64-6.1")
        with tempfile.TemporaryDirectory() as tmp:
            gj = os.path.join(tmp, "guest.json")
            subprocess.run([sys.executable, os.path.join(HERE, "guests.py"), "resolve", "usb-board",
                            "--arch", "x86_64", "--out", gj], check=True)
            r = subprocess.run([sys.executable, os.path.join(HERE, "check.py"), "--guest", gj, "--out",
                                os.path.join(d, "out"), "--scenarios", "baseline sigterm", "--validator", "",
                                "--host-events", os.path.join(d, "host-events.txt")],
                               capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr)
        self.assertIn("assertions held", r.stdout)


if __name__ == "__main__":
    unittest.main()
