#!/usr/bin/env python3
"""The vm-e2e guests of scripts/vm/guests.json, rendered for whoever needs them (stdlib only).

  guests.py resolve GUEST --arch ARCH [--kmod-dir DIR] [--out FILE]
      the guest with its base merged, its machine filled in and the disks whose driver the
      kernel lacks (requires_module, looked for under DIR) left out: JSON, the input of the
      other commands and of check.py / guest.py (--guest FILE)
  guests.py images --guest FILE --dir DIR        the disk images (mkfs, blkdebug rules, eMMC layout)
  guests.py qemu-args --guest FILE --dir DIR [--var NAME=VALUE ...] [--dtb-dir DIR]
      the machine, drive and device arguments, one a line (the common ones, -kernel, -append,
      are the caller's)
  guests.py init-env --guest FILE                the guest's /etc/usbperf/e2e/guest.sh (init.sh sources it)
  guests.py shell --guest FILE                   shell assignments for the host scripts
"""
import argparse, copy, glob, hashlib, json, os, shlex, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "guests.json")


def load(path=DEFAULT):
    with open(path) as f:
        return json.load(f)


def merged(name, data):
    """The guest's own fields over its base's; its entries inserted into the base's list."""
    g = copy.deepcopy(data["guests"][name])
    if "base" not in g:
        return g
    base = merged(g.pop("base"), data)
    entries = base["entries"]
    at = next((i for i, e in enumerate(entries) if e.get("id") == g.get("insert_before")), len(entries))
    entries[at:at] = g.pop("entries")
    base.update({k: v for k, v in g.items() if k != "insert_before"})
    return base


def resolve(name, arch, kmod_dir=None, data=None):
    """The guest `name` on `arch` as one self-contained dict (see the module's doc)."""
    data = data or load()
    g = merged(name, data)
    if arch not in g.get("arches", [arch]):
        raise SystemExit(f"guest {name} runs on {', '.join(g['arches'])}, not {arch}")
    g["name"], g["arch"] = name, arch
    g["machine"] = copy.deepcopy(data["machines"][g.get("machine") or arch])
    dropped = []
    if kmod_dir:
        def has(mod):
            pats = {mod, mod.replace("-", "_")}
            return any(glob.glob(os.path.join(kmod_dir, "**", p + ".ko*"), recursive=True) for p in pats)
        for e in g["entries"]:
            if e.get("requires_module") and not has(e["requires_module"]):
                dropped.append(e["id"])
    g["entries"] = [e for e in g["entries"] if e.get("id") not in dropped]
    g["dropped"] = dropped
    return g


def disks(g):
    return [e for e in g["entries"] if "id" in e]


def device(g, id_):
    return next((d for d in disks(g) if d["id"] == id_), None)


def modules(g):
    """The guest kernel's modules beyond the initramfs's default set."""
    mods = list(g["machine"].get("modules", [])) + list(g.get("modules", []))
    mods += [d["requires_module"] for d in disks(g) if d.get("requires_module")]
    return mods


def expect_disks(g):
    """Block devices the guest's init waits for before udev."""
    return sum(d.get("disks", 1) for d in disks(g))


def sub(s, vars_):
    for k, v in vars_.items():
        s = s.replace("{" + k + "}", v)
    return s


def qemu_args(g, img, vars_=None, dtb_dir=None):
    vars_ = dict(g["machine"].get("vars", {}), **(vars_ or {}))
    m = g["machine"]
    args = list(m["qemu"])
    if m.get("dtb"):
        args += ["-dtb", os.path.join(dtb_dir or ".", m["dtb"])]
    devs = []
    for d in disks(g):
        extra = sub(d.get("drive", ""), vars_)
        if d["model"] == "sd-slot":
            args += ["-drive", f"if=sd,index={d['index']},file={img}/{d['id']}.img,format=raw"]
        elif d["image"].get("blkdebug"):
            args += ["-drive", f"if=none,id={d['id']},format=raw,file=blkdebug:{img}/{d['id']}-blkdebug.conf:{img}/{d['id']}.img"]
        else:
            args += ["-drive", f"if=none,id={d['id']},file={img}/{d['id']}.img,format=raw" + (f",{extra}" if extra else "")]

    def dev(spec):
        devs.extend(["-device", spec])

    for e in g["entries"]:
        if "controller" in e:
            dev(sub(e["controller"], vars_))
            continue
        for b in e.get("before", []):
            b = sub(b, vars_)
            if b:
                dev(b)
        opts = f",{e['opts']}" if e.get("opts") else ""
        model, bus = e["model"], sub(e.get("bus", ""), vars_)
        port = f",port={e['port']}" if e.get("port") else ""
        scsi = lambda b, lun: (f"scsi-hd,bus={b},scsi-id=0,lun={lun},drive={e['id']},vendor=QEMU,"
                               f"product={e['product']},serial={e['serial']}{opts}")
        if model in ("usb-bot", "usb-uas"):
            dev(f"{model},id={e['qdev']},bus={bus}{port},serial={e['serial']}")
            dev(scsi(f"{e['qdev']}.0", 0))
        elif model == "scsi-hd":
            dev(scsi(bus, e["lun"]))
        elif model == "ide-hd":
            dev(f"ide-hd,bus={bus},drive={e['id']},model={e['product']},serial={e['serial']}{opts}")
        elif model == "nvme":
            dev(f"nvme,serial={e['serial']},drive={e['id']}")
        elif model == "ufs-lu":
            dev(f"ufs-lu,bus={bus},drive={e['id']},lun=0")
        elif model == "sd-card":
            dev(f"sd-card,drive={e['id']}")
        elif model == "virtio-blk-pci":
            dev(f"virtio-blk-pci,drive={e['id']},serial={e['serial']}")
        elif model != "sd-slot":
            raise SystemExit(f"{e['id']}: unknown model {model}")
    return args + devs


def size_bytes(s):
    return int(s[:-1]) << {"K": 10, "M": 20, "G": 30}[s[-1]] if s[-1] in "KMG" else int(s)


def mkfs(path, im, size):
    with open(path, "wb") as f:
        f.truncate(size)
    fs = im.get("fs")
    if fs == "vfat":
        subprocess.run(["mkfs.fat", "-n", im["label"], path], check=True, stdout=subprocess.DEVNULL)
    elif fs == "ext4":
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", *im.get("mkfs", []), "-L", im["label"], path], check=True)


def images(g, img):
    os.makedirs(img, exist_ok=True)
    for d in disks(g):
        im, p = d["image"], os.path.join(img, d["id"] + ".img")
        size = size_bytes(im["size"])
        if im.get("layout") == "emmc":
            # QEMU's eMMC model lays the image out as boot0, boot1 (set by the board code),
            # then the user area; the boot areas hold a pattern whose checksum the host
            # compares after the boot (check.py).
            boot = im["boot_kib"] << 10
            user = p + ".user"
            mkfs(user, im, size - 2 * boot)
            with open(p, "wb") as f:
                for area in (b"usbperf-e2e boot0 ", b"usbperf-e2e boot1 "):
                    f.write((area * (boot // len(area) + 1))[:boot])
                with open(user, "rb") as u:
                    while chunk := u.read(1 << 20):
                        f.write(chunk)
                f.truncate(size)
            os.unlink(user)
            with open(p, "rb") as f:
                digest = hashlib.sha256(f.read(2 * boot)).hexdigest()
            with open(os.path.join(img, f"{d['id']}-boot.sha256"), "w") as f:
                f.write(digest + "\n")
            continue
        mkfs(p, im, size)
        if im.get("blkdebug"):
            with open(os.path.join(img, f"{d['id']}-blkdebug.conf"), "w") as f:
                f.write("[inject-error]\n" + "".join(f'{k} = "{v}"\n' for k, v in im["blkdebug"].items()))


def init_env(g):
    """A shell fragment for the guest's busybox init: how to find each disk, where to mount it."""
    q = shlex.quote
    ids = [d["id"] for d in disks(g) if d.get("find")]
    out = [f"# guest {g['name']} ({g['arch']}): written by scripts/vm/guests.py from guests.json",
           f"EXPECT={expect_disks(g)}", f"HALT={g['machine'].get('halt', 'poweroff')}",
           f"PROFILE={q(g.get('profile', ''))}", f"DISKS={q(' '.join(ids))}"]
    for d in disks(g):
        if not d.get("find"):
            continue
        how = d["find"]
        if how == "serial":
            how = f"serial {d['serial']}"
        out.append(f"FIND_{d['id']}={q(how)}; MOUNT_{d['id']}={q(d.get('mount', ''))}")
    rules = [d["profile_rule"] for d in disks(g) if d.get("profile_rule")]
    out.append(f"PROFILE_RULES={q(chr(10).join('  - ' + r for r in rules))}")
    hub = [d["serial"] for d in disks(g) if (d.get("expect") or {}).get("hub_cause")]
    out.append(f"HUB_STICK_SERIAL={q(hub[0] if hub else '')}")
    return "\n".join(out) + "\n"


def shell(g):
    q = shlex.quote
    classes = sorted({(d.get("expect") or {}).get("class") for d in disks(g)} - {None})
    replug = [d for d in disks(g) if d.get("replug")]
    vals = {
        "GUEST": g["name"], "CONSOLE": g["machine"]["console"], "HALT": g["machine"].get("halt", "poweroff"),
        "EXPECT": str(expect_disks(g)), "GUEST_MODULES": " ".join(modules(g)),
        "GUEST_SCENARIOS": " ".join(g.get("scenarios", [])), "GUEST_CLASSES": " ".join(classes),
        "GUEST_DROPPED": " ".join(g["dropped"]), "UNIT_SERIAL": g["machine"].get("unit_serial", ""),
        "REPLUG_IMAGE": f"{replug[0]['id']}.img" if replug else "",
    }
    return "".join(f"{k}={q(v)}\n" for k, v in vals.items())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["resolve", "images", "qemu-args", "init-env", "shell"])
    ap.add_argument("name", nargs="?", help="the guest (resolve)")
    ap.add_argument("--arch", default="x86_64")
    ap.add_argument("--kmod-dir")
    ap.add_argument("--guest", help="a resolved guest (the output of resolve)")
    ap.add_argument("--dir", help="the disk images' directory")
    ap.add_argument("--dtb-dir")
    ap.add_argument("--var", action="append", default=[], help="NAME=VALUE for {NAME} in guests.json")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.command == "resolve":
        text = json.dumps(resolve(a.name, a.arch, a.kmod_dir), indent=1) + "\n"
    else:
        with open(a.guest) as f:
            g = json.load(f)
        if a.command == "images":
            images(g, a.dir)
            return
        if a.command == "qemu-args":
            text = "".join(x + "\n" for x in qemu_args(g, a.dir, dict(v.split("=", 1) for v in a.var), a.dtb_dir))
        elif a.command == "init-env":
            text = init_env(g)
        else:
            text = shell(g)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
