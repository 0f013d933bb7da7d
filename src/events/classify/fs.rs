//! Filesystem lines: ext2/3/4, FAT, exFAT, XFS, Btrfs and jbd2 errors and read-only remounts.

use super::*;

/// Filesystem lines (fs/ext4/super.c, fs/fat/misc.c, fs/exfat/misc.c, fs/jbd2/journal.c).
pub(super) fn classify(m: &str) -> Option<KernelEvent> {
    use EventKind::*;
    use Severity::*;
    // fs/ext4/super.c `__ext4_error`: "EXT4-fs error (device %s): %s:%d: comm %s: %pV";
    // `__ext4_warning`: "EXT4-fs warning (device %s): %s:%d: %pV" (fs/ext4/page-io.c
    // `ext4_end_bio` warns "I/O error %d writing to inode %lu starting block %llu)").
    for pat in ["EXT4-fs ", "EXT3-fs ", "EXT2-fs "] {
        let Some(rest) = m.strip_prefix(pat) else {
            continue;
        };
        for (what, always) in [("error (device ", true), ("warning (device ", false)] {
            if let Some(r) = rest.strip_prefix(what) {
                let (dev, tail) = split_name(r, ')');
                if always || tail.contains("I/O error") {
                    return Some(KernelEvent::new(FsError, Fatal, m, disk_keys(dev)));
                }
                return None;
            }
        }
    }
    // ext4_msg: "EXT4-fs (%s): %pV" ("Remounting filesystem read-only", "I/O error while
    // writing superblock", "previous I/O error to superblock detected"); fat_msg:
    // "FAT-fs (%s): %pV" ("error, %pV", "Filesystem has been set read-only", "Directory
    // bread(block %llu) failed"); exfat_err: "exFAT-fs (%s): %pV" with the same texts.
    for pat in [
        "EXT4-fs (",
        "EXT3-fs (",
        "EXT2-fs (",
        "FAT-fs (",
        "exFAT-fs (",
        "XFS (",
    ] {
        let Some(rest) = m.strip_prefix(pat) else {
            continue;
        };
        let (dev, tail) = split_name(rest, ')');
        let body = tail.strip_prefix("): ").unwrap_or(tail);
        let keys = disk_keys(dev);
        if body.contains("read-only")
            && (body.contains("Remounting") || body.contains("has been set"))
        {
            return Some(KernelEvent::new(FsReadOnly, Fatal, m, keys));
        }
        // ext4 also: "failed to convert unwritten extents to written extents -- potential
        // data loss!", "Delayed block allocation failed for inode ...", "This should not
        // happen!! Data will be lost"; fs/xfs/xfs_fsops.c "metadata I/O error in ...",
        // "Filesystem has been shut down due to log error", "Shutting down filesystem".
        // Plain mentions of "error" are not enough: mount lines print "errors=remount-ro".
        let lower = body.to_ascii_lowercase();
        if body.starts_with("error")
            || body.contains("I/O error")
            || body.contains("bread(")
            || body.contains("unable to read")
            || lower.contains("data loss")
            || lower.contains("data will be lost")
            || lower.contains("allocation failed")
            || lower.contains("shut down")
            || lower.contains("shutting down")
        {
            return Some(KernelEvent::new(FsError, Fatal, m, keys));
        }
        return None;
    }
    // fs/btrfs/messages.c `_btrfs_printk`: "BTRFS %s (device %s%s): %pV" (level name, device,
    // optional " state XY"); `btrfs_handle_fs_error` forces read-only: "forced readonly".
    if let Some(rest) = m.strip_prefix("BTRFS ") {
        let (level, rest) = split_name(rest, ' ');
        if let Some(r) = rest.strip_prefix(" (device ") {
            let end = r.find([' ', ')']).unwrap_or(r.len());
            let keys = disk_keys(&r[..end]);
            if m.contains("forced readonly") {
                return Some(KernelEvent::new(FsReadOnly, Fatal, m, keys));
            }
            if level == "error" || level == "critical" {
                return Some(KernelEvent::new(FsError, Fatal, m, keys));
            }
        }
        return None;
    }
    // fs/jbd2/journal.c: "Aborting journal on device %s." and "JBD2: Error %d detected when
    // updating journal superblock for %s." (older "JBD2: I/O error ... for %s."); the name is
    // the block device plus "-<journal inode>" ("sda1-8").
    let journal_dev = after(m, "Aborting journal on device ").or_else(|| {
        m.starts_with("JBD2: ")
            .then(|| after(m, "journal superblock for "))
            .flatten()
    });
    if let Some(rest) = journal_dev {
        let name = rest.trim_end_matches('.');
        let dev = match name.rsplit_once('-') {
            Some((d, ino)) if is_digits(ino) && !d.is_empty() && !d.ends_with("dm") => d,
            _ => name,
        };
        return Some(KernelEvent::new(FsError, Fatal, m, disk_keys(dev)));
    }
    None
}
