#!/usr/bin/env python3
"""Boot one vm-e2e guest: run QEMU with the serial console captured to a file and a QMP socket;
watch the console for `E2E-UNPLUG <id>` (printed by the guest's init when a test it wants to
break has started) and answer with QMP `device_del` of that disk's device, and for
`E2E-REPLUG <id>`: the same image and serial plugged into the port its `replug` names (the
guest's description, guests.py resolve). Exits with QEMU's status (124 on timeout, 128 + N
when a signal N killed it).
Usage: guest.py --console FILE --qmp SOCK --guest FILE --img-dir DIR --timeout S -- QEMU ARGS..."""
import argparse, json, os, re, socket, subprocess, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--console", required=True)
ap.add_argument("--qmp", required=True)
ap.add_argument("--timeout", type=float, default=900)
ap.add_argument("--events", help="file to append host-side actions to")
ap.add_argument("--guest", help="the guest's description (guests.py resolve): the disks E2E-UNPLUG/REPLUG name")
ap.add_argument("--img-dir", help="the guest's disk images (the re-plugged disk's image)")
ap.add_argument("qemu", nargs=argparse.REMAINDER)
a = ap.parse_args()
cmd = a.qemu[1:] if a.qemu and a.qemu[0] == "--" else a.qemu
if os.path.exists(a.qmp):
    os.unlink(a.qmp)
cmd += ["-qmp", f"unix:{a.qmp},server=on,wait=off"]
disks = {}
if a.guest:
    with open(a.guest) as f:
        disks = {e["id"]: e for e in json.load(f)["entries"] if "id" in e}


def log(msg):
    line = f"host T+{time.time() - t0:.1f}s {msg}"
    print(line, flush=True)
    if a.events:
        with open(a.events, "a") as f:
            f.write(line + "\n")


class Qmp:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.f = self.s.makefile("rw")
        json.loads(self.f.readline())  # greeting
        self.cmd("qmp_capabilities")

    def cmd(self, name, **args):
        self.f.write(json.dumps({"execute": name, "arguments": args}) + "\n")
        self.f.flush()
        while True:
            m = json.loads(self.f.readline())
            if "return" in m or "error" in m:
                return m


t0 = time.time()
with open(a.console, "wb") as con:
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=con, stderr=subprocess.STDOUT)
qmp = None
pos = 0
buf = b""
done = set()
while p.poll() is None:
    if time.time() - t0 > a.timeout:
        log(f"timeout after {a.timeout:.0f}s: killing QEMU")
        p.kill()
        p.wait()
        sys.exit(124)
    with open(a.console, "rb") as f:
        f.seek(pos)
        chunk = f.read()
    pos += len(chunk)
    buf += chunk
    *lines, buf = buf.split(b"\n")
    for ln in lines:
        m = re.search(rb"^E2E-REPLUG (\S+)", ln.strip(b"\r"))
        d = disks.get(m.group(1).decode()) if m else None
        if d and d.get("replug") and b"replug" not in done:
            done.add(b"replug")
            rp = d["replug"]
            try:
                qmp = qmp or Qmp(a.qmp)
                steps = [
                    ("blockdev-add", dict(driver="raw", **{"node-name": "replug"},
                                          file=dict(driver="file", filename=os.path.join(a.img_dir, d["id"] + ".img")))),
                    ("device_add", dict(driver="usb-bot", id=rp["qdev"], bus=rp["bus"], port=rp["port"], serial=d["serial"])),
                    ("device_add", dict(driver="scsi-hd", bus=rp["qdev"] + ".0", **{"scsi-id": 0}, lun=0, drive="replug",
                                        vendor="QEMU", product=d["product"], serial=d["serial"],
                                        removable="removable=on" in d.get("opts", ""))),
                    # a hot-plugged usb-bot stays detached until told (QEMU commit b78ecd09)
                    ("qom-set", dict(path=rp["qdev"], property="attached", value=True)),
                ]
                for name, args in steps:
                    r = qmp.cmd(name, **args)
                    log(f"QMP {name} {args.get('id', args.get('node-name', args.get('path', '')))}: {json.dumps(r)}")
            except OSError as e:
                log(f"QMP re-plug failed: {e}")
        m = re.search(rb"^E2E-UNPLUG (\S+)", ln.strip(b"\r"))
        if m and m.group(1) not in done:
            done.add(m.group(1))
            id_ = m.group(1).decode()
            dev = disks[id_]["qdev"] if id_ in disks else id_
            try:
                qmp = qmp or Qmp(a.qmp)
                r = qmp.cmd("device_del", id=dev)
                log(f"QMP device_del {dev}: {json.dumps(r)}")
            except OSError as e:
                log(f"QMP device_del {dev} failed: {e}")
    time.sleep(0.1)
if p.returncode < 0:
    # a signal (QEMU 7.2 has been seen to die of SIGSEGV on a usb-bot device_del with writes
    # in flight): exit as a shell would, 128 + the signal, so the caller can tell it apart
    log(f"QEMU killed by signal {-p.returncode}")
    sys.exit(128 - p.returncode)
log(f"QEMU exited {p.returncode}")
sys.exit(p.returncode)
