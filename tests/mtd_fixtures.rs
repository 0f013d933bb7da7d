//! The raw flash reader against the MTD/UBI sysfs trees recorded in the vm-mtd guests
//! (`tests/fixtures/mtd/<kernel>-<arch>/`, made by `scripts/ci/vm-mtd.sh --record-fixtures`):
//! nandsim's five partitions (JFFS2 mounted on the first, UBI with a mounted UBIFS volume on
//! the last), mtdram split into `u-boot` and `nor-test` where the kernel has mtdram. The same
//! table holds on every kernel; then the test-area rules on what was read.

use std::path::{Path, PathBuf};

use usbperf::discover::mtd::{self, FlashType, FlashUser, RawFlash};
use usbperf::safety::mtd::{check_flash_write, FlashRefusal};
use usbperf::sysfs::{parse, SysfsRoot};

fn trees() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mtd");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    v
}

fn read(tree: &Path) -> RawFlash {
    let sys = SysfsRoot::at(tree);
    let mounts = parse::mountinfo(&std::fs::read_to_string(tree.join("mountinfo")).unwrap());
    mtd::read(&sys, &mounts)
}

const KIB: u64 = 1024;

#[test]
fn every_recorded_kernel_reads_the_same_flash() {
    let trees = trees();
    let names: Vec<String> = trees
        .iter()
        .map(|t| t.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    // 5.10, 6.1 and 6.12 on x86_64, 6.1 armmp on armv7.
    assert!(trees.len() >= 4, "recorded trees: {names:?}");
    for tree in &trees {
        let name = tree.file_name().unwrap().to_string_lossy().into_owned();
        let f = read(tree);
        // (label, kernel name, erase blocks, users' kinds)
        let table: [(&str, &str, u64, &[&str]); 5] = [
            (
                "NAND simulator partition 0",
                "mtd0",
                16,
                &["mount", "mtdblock"],
            ),
            ("NAND simulator partition 1", "mtd1", 256, &["mtdblock"]),
            ("NAND simulator partition 2", "mtd2", 64, &["mtdblock"]),
            ("NAND simulator partition 3", "mtd3", 16, &["mtdblock"]),
            (
                "NAND simulator partition 4",
                "mtd4",
                672,
                &["ubi", "mtdblock"],
            ),
        ];
        for (label, kname, blocks, users) in table {
            let m = f
                .mtd
                .iter()
                .find(|m| m.label == label)
                .unwrap_or_else(|| panic!("{name}: no {label}"));
            assert_eq!(m.name, kname, "{name}");
            assert_eq!(m.kind, FlashType::Nand, "{name} {kname}");
            assert_eq!(m.size_bytes, Some(blocks * 128 * KIB), "{name} {kname}");
            assert_eq!(m.erase_block_bytes, Some(128 * KIB), "{name} {kname}");
            assert_eq!(
                (m.page_bytes, m.oob_bytes),
                (Some(2048), Some(64)),
                "{name}"
            );
            assert_eq!(
                (m.ecc_strength_bits, m.ecc_step_bytes),
                (Some(1), Some(256)),
                "{name} {kname}: software Hamming"
            );
            assert_eq!(m.writable, Some(true), "{name} {kname}");
            assert!(m.offset_bytes.is_some(), "{name} {kname}: a partition");
            assert!(m.health.bad_blocks.is_some(), "{name} {kname}");
            let kinds: Vec<&str> = m
                .users
                .iter()
                .map(|u| match u {
                    FlashUser::Ubi { .. } => "ubi",
                    FlashUser::Mount { .. } => "mount",
                    FlashUser::Mtdblock { .. } => "mtdblock",
                })
                .collect();
            assert_eq!(kinds, users, "{name} {kname}");
            assert!(m.missing.is_empty(), "{name} {kname}: {:?}", m.missing);
        }
        assert!(
            f.mtd[1].health.bad_blocks >= Some(2),
            "{name}: planted bad blocks"
        );
        assert_eq!(f.ubi.len(), 1, "{name}");
        let u = &f.ubi[0];
        assert_eq!(u.mtd.as_deref(), Some("mtd4"), "{name}");
        assert!(u.health.max_erase_count.is_some() && u.health.reserved_for_bad.is_some());
        assert_eq!(u.health.mean_erase_count, None, "{name}: not in sysfs");
        assert_eq!(u.volumes.len(), 1, "{name}");
        let v = &u.volumes[0];
        assert_eq!((v.name.as_str(), v.label.as_str()), ("ubi0_0", "data"));
        assert_eq!(v.kind.as_deref(), Some("dynamic"));
        assert!(
            matches!(&v.mounts[..], [FlashUser::Mount { mountpoint, fstype, .. }]
                if mountpoint == "/mnt/ubi" && fstype == "ubifs"),
            "{name}: {:?}",
            v.mounts
        );
        let ram = f.mtd.iter().find(|m| m.label == "mtdram test device");
        if name.ends_with("x86_64") {
            let ram = ram.unwrap_or_else(|| panic!("{name}: no mtdram"));
            assert_eq!(ram.kind, FlashType::Ram);
            assert_eq!(ram.offset_bytes, None, "{name}: the chip itself");
            for p in ["u-boot", "nor-test"] {
                let part = f.mtd.iter().find(|m| m.label == p).unwrap();
                assert!(ram.partitions.contains(&part.name), "{name}: {p}");
            }
        } else {
            assert!(ram.is_none(), "{name}: armmp has no mtdram");
        }
    }
}

#[test]
fn test_area_rules_on_the_recorded_flash() {
    let every: Vec<String> = [
        "NAND simulator partition 0",
        "NAND simulator partition 2",
        "NAND simulator partition 4",
        "u-boot",
        "nor-test",
        "mtdram test device",
    ]
    .map(String::from)
    .to_vec();
    for tree in trees() {
        let name = tree.file_name().unwrap().to_string_lossy().into_owned();
        let f = read(&tree);
        let verdict = |label: &str| {
            let m = f.mtd.iter().find(|m| m.label == label)?;
            Some(check_flash_write(m, &f, &every))
        };
        assert_eq!(
            verdict("NAND simulator partition 2"),
            Some(Ok(())),
            "{name}"
        );
        assert!(
            matches!(verdict("NAND simulator partition 0"), Some(Err(r)) if matches!(r[..], [FlashRefusal::InUse(..)])),
            "{name}: JFFS2 mounted"
        );
        assert!(
            matches!(verdict("NAND simulator partition 4"), Some(Err(r)) if matches!(r[..], [FlashRefusal::InUse(..)])),
            "{name}: UBI attached"
        );
        assert!(
            matches!(verdict("NAND simulator partition 1"), Some(Err(r)) if matches!(r[..], [FlashRefusal::NotTestArea(..)])),
            "{name}: not named"
        );
        if name.ends_with("x86_64") {
            assert_eq!(verdict("nor-test"), Some(Ok(())), "{name}");
            assert!(
                matches!(verdict("u-boot"), Some(Err(r)) if matches!(r[..], [FlashRefusal::Protected(..)])),
                "{name}"
            );
            assert!(
                matches!(verdict("mtdram test device"), Some(Err(r)) if matches!(r[..], [FlashRefusal::HasPartitions(..)])),
                "{name}"
            );
        }
    }
}
