#!/usr/bin/python3
"""A fake-capacity medium as one file on a FUSE mount, for the verify tests.

    fake_medium.py MOUNTPOINT --kind lost|wrap|mirror --announced BYTES --real BYTES

The mount holds one file, `medium`, that announces BYTES but keeps only --real bytes, the way
counterfeit USB sticks and SD cards do (f3's kinds):

  lost    writes past the real size vanish; reads there return zeros
  wrap    offsets past the real size land on the start again (offset modulo the real size)
  mirror  the upper half is the lower half again (--real is ignored: half the announced size)

Storage moves in 512-byte sectors, as on a real medium; the real size must be a whole number
of sectors. The mount uses FUSE's direct_io, so no page cache hides where a write went. Runs
in the foreground until unmounted (fusermount -u, or umount as root). Needs python3-fusepy
(Debian), which scripts/test installs.
"""

import argparse
import errno
import stat
import sys
import threading
import time

from fusepy import FUSE, FuseOSError, Operations

SECTOR = 512


class Medium(Operations):
    def __init__(self, kind, announced, real):
        self.kind = kind
        self.announced = announced
        self.real = announced // 2 if kind == "mirror" else real
        self.storage = bytearray(self.real)
        self.mutex = threading.Lock()
        self.now = time.time()

    def where(self, offset):
        """The storage offset of an announced offset, or None where writes are lost."""
        if self.kind == "lost":
            return offset if offset < self.real else None
        return offset % self.real

    def spans(self, offset, length):
        """Splits a request into (announced offset, storage offset or None, length) pieces
        that do not cross a sector or the real size."""
        end = min(offset + length, self.announced)
        while offset < end:
            n = min(end - offset, SECTOR - offset % SECTOR)
            at = self.where(offset)
            if at is not None:
                n = min(n, self.real - at)
            yield offset, at, n
            offset += n

    def getattr(self, path, fh=None):
        base = {"st_uid": 0, "st_gid": 0, "st_atime": self.now, "st_mtime": self.now,
                "st_ctime": self.now}
        if path == "/":
            return dict(base, st_mode=stat.S_IFDIR | 0o755, st_nlink=2)
        if path == "/medium":
            return dict(base, st_mode=stat.S_IFREG | 0o600, st_nlink=1,
                        st_size=self.announced)
        raise FuseOSError(errno.ENOENT)

    def readdir(self, path, fh):
        return [".", "..", "medium"]

    def open(self, path, flags):
        if path != "/medium":
            raise FuseOSError(errno.ENOENT)
        return 0

    def read(self, path, size, offset, fh):
        out = bytearray()
        with self.mutex:
            for _, at, n in self.spans(offset, size):
                out += bytes(n) if at is None else self.storage[at:at + n]
        return bytes(out)

    def write(self, path, data, offset, fh):
        if offset + len(data) > self.announced:
            raise FuseOSError(errno.ENOSPC)
        with self.mutex:
            done = 0
            for _, at, n in self.spans(offset, len(data)):
                if at is not None:
                    self.storage[at:at + n] = data[done:done + n]
                done += n
        return len(data)

    def truncate(self, path, length, fh=None):
        if length != self.announced:
            raise FuseOSError(errno.EPERM)

    def flush(self, path, fh):
        return 0

    def fsync(self, path, datasync, fh):
        return 0

    def release(self, path, fh):
        return 0


def size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1:].upper() in units:
        return int(text[:-1]) * units[text[-1:].upper()]
    return int(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mountpoint")
    ap.add_argument("--kind", choices=["lost", "wrap", "mirror"], required=True)
    ap.add_argument("--announced", type=size, required=True)
    ap.add_argument("--real", type=size, default=0)
    a = ap.parse_args()
    if a.kind != "mirror" and not 0 < a.real < a.announced:
        sys.exit("--real must be above 0 and below --announced")
    if a.real % SECTOR or a.announced % SECTOR:
        sys.exit(f"sizes must be whole {SECTOR}-byte sectors")
    FUSE(Medium(a.kind, a.announced, a.real), a.mountpoint, foreground=True, nothreads=True,
         direct_io=True)


if __name__ == "__main__":
    main()
