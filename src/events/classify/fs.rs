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

#[cfg(test)]
mod tests {
    use super::super::tests::check;
    use super::super::{EventKind::*, Severity::*};

    /// Real kernel lines (each rule's format string is cited at the rule) and lines that
    /// must not count.
    #[test]
    fn filesystem_lines() {
        check(&[
            // fs/ext4/super.c `ext4_handle_error` via `ext4_msg`, `__ext4_error`,
            // `__ext4_warning` (fs/ext4/page-io.c `ext4_end_bio`).
            (
                "EXT4-fs (sda1): Remounting filesystem read-only",
                Some((FsReadOnly, Fatal, &["disk:sda1"])),
            ),
            (
                "EXT4-fs error (device sda1): ext4_find_entry:1455: inode #2: comm ls: reading directory lblock 0",
                Some((FsError, Fatal, &["disk:sda1"])),
            ),
            (
                "EXT4-fs warning (device sda1): ext4_end_bio:343: I/O error 10 writing to inode 12 starting block 3584)",
                Some((FsError, Fatal, &["disk:sda1"])),
            ),
            (
                "EXT4-fs warning (device sda1): ext4_dx_add_entry:2461: Directory (ino: 2) index full, reach max htree level :2",
                None,
            ),
            (
                "EXT4-fs (sda1): I/O error while writing superblock",
                Some((FsError, Fatal, &["disk:sda1"])),
            ),
            (
                "EXT4-fs (sda1): mounted filesystem 0e2e6f9b-2b1c-4d35-9b7d-1f1d1f0c2a11 r/w with ordered data mode. Quota mode: none.",
                None,
            ),
            // fs/fat/misc.c `__fat_fs_error`, fs/exfat/misc.c `__exfat_fs_error`.
            (
                "FAT-fs (sda1): Filesystem has been set read-only",
                Some((FsReadOnly, Fatal, &["disk:sda1"])),
            ),
            (
                "FAT-fs (sda1): error, fat_get_cluster: invalid cluster chain (i_pos 0)",
                Some((FsError, Fatal, &["disk:sda1"])),
            ),
            (
                "FAT-fs (sdb1): Volume was not properly unmounted. Some data may be corrupt. Please run fsck.",
                None,
            ),
            (
                "exFAT-fs (sdc1): error, invalid access to FAT (entry 0x00001234)",
                Some((FsError, Fatal, &["disk:sdc1"])),
            ),
            // fs/jbd2/journal.c: the journal name is "<bdev>-<inode>".
            (
                "Aborting journal on device sda1-8.",
                Some((FsError, Fatal, &["disk:sda1"])),
            ),
            (
                "JBD2: Error -5 detected when updating journal superblock for mmcblk0p2-8.",
                Some((FsError, Fatal, &["disk:mmcblk0p2"])),
            ),
            (
                "EXT4-fs (sda1): failed to convert unwritten extents to written extents -- potential data loss!  (inode 12, error -30)",
                Some((FsError, Fatal, &["disk:sda1"])),
            ),
            (
                "EXT4-fs (sda1): mounted filesystem with ordered data mode. Opts: errors=remount-ro. Quota mode: none.",
                None,
            ),
            (
                "XFS (sdb1): metadata I/O error in \"xfs_buf_ioend+0x1a0/0x4e0\" at daddr 0x2 len 1 error 5",
                Some((FsError, Fatal, &["disk:sdb1"])),
            ),
            (
                "XFS (sdb1): Filesystem has been shut down due to log error (0x2).",
                Some((FsError, Fatal, &["disk:sdb1"])),
            ),
            ("XFS (sdb1): Ending clean mount", None),
            (
                "BTRFS error (device sdc1): bdev /dev/sdc1 errs: wr 1, rd 0, flush 0, corrupt 0, gen 0",
                Some((FsError, Fatal, &["disk:sdc1"])),
            ),
            (
                "BTRFS error (device sdc1 state EA): Transaction aborted (error -5)",
                Some((FsError, Fatal, &["disk:sdc1"])),
            ),
            (
                "BTRFS info (device sdc1 state EA): forced readonly",
                Some((FsReadOnly, Fatal, &["disk:sdc1"])),
            ),
            ("BTRFS info (device sdc1): first mount of filesystem 5f1c", None),
        ]);
    }
}
