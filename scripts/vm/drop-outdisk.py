#!/usr/bin/env python3
"""Remove the vm-e2e output disk (virtio, vd*) and the ancestors only it needs from a umockdev
recording: it is the harness's, not a device of the unit, and its major:minor (254:0) collides
with the root disk of virtio-based CI hosts, whose mount table umockdev does not redirect.
usage: drop-outdisk.py IN.umockdev OUT.umockdev"""
import re, sys

text = open(sys.argv[1]).read()
blocks = [b for b in text.split("\n\n") if b.strip()]
path = lambda b: re.match(r"P: (\S+)", b).group(1)
drop = {path(b) for b in blocks if re.search(r"/block/vd[a-z]+$", path(b))}
keep = [path(b) for b in blocks if path(b) not in drop]
# ancestors of a dropped disk that no kept device lies under
for d in list(drop):
    parts = d.split("/")
    for i in range(len(parts) - 1, 1, -1):
        anc = "/".join(parts[:i])
        if anc in keep and not any(k != anc and k.startswith(anc + "/") for k in keep if k not in drop):
            drop.add(anc)
out = [b for b in blocks if path(b) not in drop]
open(sys.argv[2], "w").write("\n\n".join(x.strip("\n") for x in out) + "\n\n")
print(f"dropped {sorted(drop)}", file=sys.stderr)
