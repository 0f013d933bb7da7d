#!/usr/bin/python3
"""A fake medium as one file on a FUSE mount, for the verify and write-cache tests.

    fake_medium.py MOUNTPOINT --kind lost|wrap|mirror --announced BYTES --real BYTES
    fake_medium.py MOUNTPOINT --kind cache --announced BYTES --cache BYTES --slow BYTES_PER_S

The mount holds one file, `medium`, that announces BYTES but keeps only --real bytes, the way
counterfeit USB sticks and SD cards do (f3's kinds):

  lost    writes past the real size vanish; reads there return zeros
  wrap    offsets past the real size land on the start again (offset modulo the real size)
  mirror  the upper half is the lower half again (--real is ignored: half the announced size)
  cache   keeps everything, behind a write cache like a USB stick's SLC cache: writes go at
          full speed while the cache holds them, and the cache empties to the flash at --slow
          bytes per second; once --cache bytes wait in it, a write waits until its bytes fit
          (a token bucket), so a long write settles at --slow

Storage moves in 512-byte sectors, as on a real medium; the real size must be a whole number
of sectors. The mount uses FUSE's direct_io, so no page cache hides where a write went. Runs
in the foreground until unmounted (fusermount -u, or umount as root). Needs python3-fusepy
(Debian), which scripts/test.sh installs.
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
        self.cache = 0
        self.slow = 0
        # Bytes waiting in the write cache, as of `self.drained`.
        self.waiting = 0.0
        self.drained = time.monotonic()

    def wait_for_cache(self, n):
        """Sleeps until n more bytes fit into the write cache (kind cache)."""
        if not self.slow:
            return
        now = time.monotonic()
        self.waiting = max(0.0, self.waiting - (now - self.drained) * self.slow)
        self.drained = now
        self.waiting += n
        if self.waiting > self.cache:
            time.sleep((self.waiting - self.cache) / self.slow)

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
            self.wait_for_cache(len(data))
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
    ap.add_argument("--kind", choices=["lost", "wrap", "mirror", "cache"], required=True)
    ap.add_argument("--announced", type=size, required=True)
    ap.add_argument("--real", type=size, default=0)
    ap.add_argument("--cache", type=size, default=0)
    ap.add_argument("--slow", type=size, default=0)
    a = ap.parse_args()
    if a.kind == "cache":
        if not (a.cache > 0 and a.slow > 0):
            sys.exit("--kind cache needs --cache and --slow above 0")
        a.real = a.announced
    elif a.kind != "mirror" and not 0 < a.real < a.announced:
        sys.exit("--real must be above 0 and below --announced")
    if a.real % SECTOR or a.announced % SECTOR:
        sys.exit(f"sizes must be whole {SECTOR}-byte sectors")
    medium = Medium("lost" if a.kind == "cache" else a.kind, a.announced, a.real)
    medium.cache, medium.slow = a.cache, a.slow
    FUSE(medium, a.mountpoint, foreground=True, nothreads=True, direct_io=True)


if __name__ == "__main__":
    main()
