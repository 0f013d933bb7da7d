#!/usr/bin/env python3
"""Reads and replays a dm-log-writes log (stdlib only): the power-cut states of scripts/ci/vm-power-cut.sh.

The kernel's dm-log-writes target (drivers/md/dm-log-writes.c, documented in
Documentation/admin-guide/device-mapper/log-writes.rst) copies every write to its data device
onto a log device, in the order the writes reached the medium rather than its cache: a plain
write is logged only at the next FLUSH (after the writes that completed before that flush was
sent, then the flush itself), a FUA write as soon as it completes. Replaying the log onto a copy
of the data device as it was when the target was made, up to a FLUSH entry, gives exactly what
a medium that honours flushes holds after a power cut right there: the crash states xfstests'
replay-log (generic/482) checks a filesystem in. This is that replay, written from the format:

  log sector 0:  super  {le64 magic 0x6a736677736872, le64 version 1, le64 nr_entries, le32 sectorsize}
  then nr_entries times, from byte `sectorsize` on:
                 one sectorsize block: entry {le64 sector, le64 nr_sectors, le64 flags, le64 data_len}
                   (a MARK's name follows the entry inside that block, data_len bytes)
                 then nr_sectors * sectorsize bytes of the data written (none for a DISCARD)
  sector and nr_sectors count sectorsize units (the data device's logical block size).
  flags: FLUSH 1, FUA 2, DISCARD 4, MARK 8, METADATA 16.

  log_writes.py list LOG [--json]              the entries (index, flags, sector, size, mark)
  log_writes.py points LOG --from MARK --to MARK --at 25,50,75 [--json]
      the FLUSH entries at those percentages of the FLUSH entries between the two marks, and the
      log's last entry ("end"): the replay points scripts/ci/vm-power-cut.sh takes
  log_writes.py replay LOG --base IMAGE --out IMAGE --upto N
      a copy of IMAGE with entries 0..N (inclusive) applied
"""
import argparse, json, shutil, struct, sys

MAGIC = 0x6A736677736872
FLUSH, FUA, DISCARD, MARK, METADATA = 1, 2, 4, 8, 16
FLAG_NAMES = [(FLUSH, "FLUSH"), (FUA, "FUA"), (DISCARD, "DISCARD"), (MARK, "MARK"), (METADATA, "METADATA")]
SUPER = struct.Struct("<QQQI")
ENTRY = struct.Struct("<QQQQ")


class LogError(Exception):
    pass


def read_super(f):
    f.seek(0)
    raw = f.read(SUPER.size)
    if len(raw) < SUPER.size:
        raise LogError("the log is shorter than its super block")
    magic, version, nr, ss = SUPER.unpack(raw)
    if magic != MAGIC:
        raise LogError(f"no dm-log-writes super block (magic {magic:#x}, expected {MAGIC:#x})")
    if version != 1:
        raise LogError(f"log version {version}: only version 1 is known")
    if ss < 512 or ss & (ss - 1):
        raise LogError(f"sector size {ss} is not a power of two of at least 512")
    return nr, ss


def entries(path):
    """Yields (index, flags, sector, nr_sectors, mark, data_offset) for each logged entry.
    sector and nr_sectors are in sectorsize units; data_offset is the entry's data in the log."""
    with open(path, "rb") as f:
        nr, ss = read_super(f)
        size = f.seek(0, 2)
        pos = ss  # the first entry: one logical block after the super
        for i in range(nr):
            f.seek(pos)
            blk = f.read(ss)
            if len(blk) < ss:
                raise LogError(f"entry {i} at byte {pos}: past the end of the log ({size} bytes)")
            sector, nsec, flags, dlen = ENTRY.unpack_from(blk)
            mark = None
            if flags & MARK:
                if dlen > ss - ENTRY.size:
                    raise LogError(f"entry {i}: a mark of {dlen} bytes does not fit its block")
                mark = blk[ENTRY.size:ENTRY.size + dlen].decode("utf-8", "replace")
            elif dlen:
                # inline data of another kind: the kernel writes none but marks (6.1 to 6.12)
                raise LogError(f"entry {i}: {dlen} bytes of inline data that is not a mark")
            data = pos + ss
            pos = data if flags & DISCARD else data + nsec * ss
            if pos > size:
                raise LogError(f"entry {i}: its data runs past the end of the log")
            yield i, flags, sector, nsec, mark, data


def flag_text(flags):
    return "|".join(n for bit, n in FLAG_NAMES if flags & bit) or "WRITE"


def points(path, start, end, percents):
    """The replay points: the FLUSH entries at `percents` of those between marks `start` and
    `end`, and the last entry of the log; each {name, upto, flush, flushes}."""
    flushes, i_start, i_end, last = [], None, None, -1
    for i, flags, _s, _n, mark, _d in entries(path):
        last = i
        if mark == start and i_start is None:
            i_start = i
        elif mark == end and i_start is not None and i_end is None:
            i_end = i
        elif flags & FLUSH and i_start is not None and i_end is None:
            flushes.append(i)
    if i_start is None or i_end is None:
        raise LogError(f"the log lacks the marks {start!r} and {end!r} in that order")
    if len(flushes) < len(percents):
        raise LogError(f"only {len(flushes)} FLUSH entries between the marks")
    out = []
    for p in percents:
        k = max(0, min(len(flushes) - 1, round(len(flushes) * p / 100) - 1))
        out.append({"name": f"at{p}", "upto": flushes[k], "flush": k + 1, "flushes": len(flushes)})
    out.append({"name": "end", "upto": last, "flush": len(flushes), "flushes": len(flushes)})
    return out


def replay(path, base, out, upto):
    shutil.copyfile(base, out)
    n = 0
    with open(path, "rb") as log, open(out, "r+b") as img:
        _nr, ss = read_super(log)
        for i, flags, sector, nsec, _mark, data in entries(path):
            if i > upto:
                break
            n = i + 1
            if flags & MARK or not nsec:
                continue
            img.seek(sector * ss)
            if flags & DISCARD:
                # what a device that reads discarded blocks as zeros holds: write the zeros
                left = nsec * ss
                while left:
                    k = min(left, 1 << 20)
                    img.write(b"\0" * k)
                    left -= k
                continue
            log.seek(data)
            left = nsec * ss
            while left:
                chunk = log.read(min(left, 1 << 20))
                if not chunk:
                    raise LogError(f"entry {i}: the log ends inside its data")
                img.write(chunk)
                left -= len(chunk)
    if n <= upto:
        raise LogError(f"the log has {n} entries, not {upto + 1}")
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["list", "points", "replay"])
    ap.add_argument("log")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--from", dest="start", default="write-start")
    ap.add_argument("--to", dest="end", default="write-end")
    ap.add_argument("--at", default="25,50,75", help="percentages of the FLUSH entries between the marks")
    ap.add_argument("--base")
    ap.add_argument("--out")
    ap.add_argument("--upto", type=int)
    a = ap.parse_args()
    try:
        if a.command == "list":
            rows = [{"index": i, "flags": flag_text(fl), "sector": s, "sectors": n, "mark": m}
                    for i, fl, s, n, m, _d in entries(a.log)]
            if a.json:
                json.dump(rows, sys.stdout, indent=1)
                print()
            else:
                for r in rows:
                    print(f"{r['index']:6} {r['flags']:<20} {r['sector']:>10} +{r['sectors']}"
                          + (f"  mark {r['mark']}" if r["mark"] is not None else ""))
        elif a.command == "points":
            pts = points(a.log, a.start, a.end, [int(x) for x in a.at.split(",")])
            if a.json:
                json.dump(pts, sys.stdout)
                print()
            else:
                for p in pts:
                    print(f"{p['name']} {p['upto']} (flush {p['flush']} of {p['flushes']})")
        else:
            if a.base is None or a.out is None or a.upto is None:
                ap.error("replay needs --base, --out and --upto")
            n = replay(a.log, a.base, a.out, a.upto)
            print(f"{a.out}: {n} entries of {a.log} replayed onto {a.base}")
    except (LogError, OSError) as e:
        print(f"log_writes.py: {a.log}: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
