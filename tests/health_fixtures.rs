//! The health parsers against the real answers recorded in QEMU 10's guests
//! (`tests/fixtures/health/`, README there): table-driven, then every truncation and a
//! bounded set of corruptions of the same bytes, which must give a reason, never a panic.

use std::path::PathBuf;

use usbperf::health::{emmc, nvme, sata, Gaps, HealthError, LifeTime, PreEol};

fn fixture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/health")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn text(name: &str) -> String {
    String::from_utf8(fixture(name)).unwrap()
}

/// `path=value` lines of a `sysfs.txt` recording, by path suffix.
fn sysfs_value(txt: &str, suffix: &str) -> Option<String> {
    txt.lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.ends_with(suffix))
        .map(|(_, v)| v.trim().to_string())
}

#[test]
fn qemu_nvme_smart_log() {
    let b = fixture("qemu10-x86-nvme-smart-log.bin");
    let mut g = Gaps::default();
    let s = nvme::decode_smart_log(&b, &mut g).unwrap();
    // QEMU 10.0 hw/nvme/ctrl.c nvme_smart_info: 323 K, no spare accounting, counters of the
    // guest kernel's own reads at probe time.
    assert_eq!(s.temperature_celsius, Some(49.85));
    assert_eq!(
        (
            s.critical_warning,
            s.available_spare_percent,
            s.percent_used
        ),
        (0, 0, 0)
    );
    assert_eq!((s.data_units_read, s.data_units_written), (3, 1));
    assert_eq!(s.data_read_bytes, 3 * 512_000);
    assert_eq!(
        (s.media_errors, s.unsafe_shutdowns, s.power_cycles),
        (0, 0, 0)
    );
    assert!(g.0.is_empty(), "{:?}", g.0);
}

#[test]
fn qemu_ahci_smart_data() {
    let b = fixture("qemu10-x86-ahci-smart-data.bin");
    let mut g = Gaps::default();
    let s = sata::decode_smart_data(&b, &mut g).unwrap();
    let rows: Vec<(u8, u8, u8, u64)> = s
        .attributes
        .iter()
        .map(|a| (a.id, a.value, a.worst, a.raw))
        .collect();
    // hw/ide/core.c smart_attributes: 5 (0 reallocated), 9 (power-on hours), 190 (airflow
    // temperature 0x1f = 31 °C raw; QEMU has no 194, 197, 198, 199).
    assert_eq!(
        rows,
        vec![
            (5, 100, 100, 0),
            (9, 100, 100, 1),
            (190, 69, 69, 0x1f1f_001f)
        ]
    );
    assert_eq!(s.temperature_celsius, Some(31));
    assert_eq!(s.power_on_hours, Some(1));
    let fields: Vec<&str> = g.0.iter().map(|m| m.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "sata.current_pending_sector",
            "sata.offline_uncorrectable",
            "sata.udma_crc_error_count"
        ]
    );
}

#[test]
fn qemu_ufs_and_sd_sysfs() {
    let t = text("qemu10-x86-sysfs.txt");
    for name in [
        "life_time_estimation_a",
        "life_time_estimation_b",
        "eol_info",
    ] {
        let v = sysfs_value(&t, &format!("health_descriptor/{name}")).unwrap();
        // QEMU's UFS model leaves the health descriptor's estimates at 0: not defined.
        assert_eq!(v, "0x00", "{name}");
        assert_eq!(LifeTime::from_raw("t", 0).unwrap(), None);
        assert_eq!(PreEol::from_raw("t", 0).unwrap(), None);
    }
    let ssr = sysfs_value(&t, "/ssr").unwrap();
    let mut g = Gaps::default();
    let sd = emmc::parse_ssr(&ssr, &mut g).unwrap();
    assert_eq!(sd.speed_class, None);
    assert_eq!(g.0[0].field, "sd.speed_class");
}

#[test]
fn qemu_emmc_ext_csd() {
    let b = fixture("qemu10-armv7-emmc-ext-csd.bin");
    // The ioctl's answer is the register the kernel read itself (debugfs).
    let dbg = emmc::parse_ext_csd_hex(&text("qemu10-armv7-emmc-ext-csd.debugfs.txt")).unwrap();
    assert_eq!(dbg, b);
    let mut g = Gaps::default();
    let e = emmc::decode_ext_csd(&b, "ioctl", &mut g).unwrap();
    // QEMU 10.0's eMMC model (hw/sd/sd.c): EXT_CSD_REV 3 (eMMC 4.3), 1 MiB boot areas with
    // boot0 enabled for boot, 4-bit high-speed bus as the ast2600's driver set it.
    assert_eq!((e.ext_csd_rev, e.emmc_version.as_deref()), (3, Some("4.3")));
    assert_eq!((e.boot_size_kib, e.rpmb_size_kib), (1024, 0));
    assert_eq!(e.partition_config, 0x08);
    assert_eq!(e.boot_partition_enabled.as_deref(), Some("boot0"));
    assert_eq!(e.bus_width.as_deref(), Some("4"));
    assert_eq!(e.hs_timing.as_deref(), Some("hs"));
    // No health fields before EXT_CSD_REV 7: missing, with that reason.
    assert_eq!(
        (e.life_time_a, e.pre_eol, e.cache_size_kib),
        (None, None, None)
    );
    let reasons: Vec<String> = g.0.iter().map(|m| m.reason.clone()).collect();
    assert!(
        reasons.iter().any(|r| r.contains("< 7 (eMMC 5.0)")),
        "{reasons:?}"
    );

    // The same register patched to an eMMC 5.1 with a worn part: the JESD84-B51 decode.
    let mut p = b.clone();
    p[emmc::off::EXT_CSD_REV] = 8;
    p[emmc::off::PRE_EOL_INFO] = 0x02;
    p[emmc::off::DEVICE_LIFE_TIME_EST_TYP_A] = 0x0a;
    p[emmc::off::DEVICE_LIFE_TIME_EST_TYP_B] = 0x0b;
    p[emmc::off::CACHE_SIZE..emmc::off::CACHE_SIZE + 4].copy_from_slice(&512u32.to_le_bytes());
    p[emmc::off::FIRMWARE_VERSION] = 0x31;
    let e = emmc::decode_ext_csd(&p, "t", &mut Gaps::default()).unwrap();
    assert_eq!(e.pre_eol, Some(PreEol::Warning));
    assert_eq!(
        e.life_time_a
            .map(|l| (l.used_percent_min, l.used_percent_max)),
        Some((90, 100))
    );
    assert_eq!(e.life_time_b.map(|l| l.used_percent_max), Some(101));
    assert_eq!(e.cache_size_kib, Some(512));
    assert_eq!(e.firmware_version.as_deref(), Some("3100000000000000"));

    let t = text("qemu10-armv7-sysfs.txt");
    let lt = sysfs_value(&t, "mmc0:0001/life_time").unwrap();
    assert_eq!(emmc::parse_life_time(&lt).unwrap(), (None, None));
    let eol = sysfs_value(&t, "mmc0:0001/pre_eol_info").unwrap();
    assert_eq!(emmc::parse_pre_eol(&eol).unwrap(), None);
}

#[test]
fn every_truncation_and_corruption_gives_a_reason_not_a_panic() {
    let bufs: Vec<(&str, Vec<u8>)> = vec![
        ("nvme", fixture("qemu10-x86-nvme-smart-log.bin")),
        ("ata", fixture("qemu10-x86-ahci-smart-data.bin")),
        ("emmc", fixture("qemu10-armv7-emmc-ext-csd.bin")),
    ];
    let decode = |kind: &str, b: &[u8]| -> Result<(), HealthError> {
        let mut g = Gaps::default();
        match kind {
            "nvme" => nvme::decode_smart_log(b, &mut g).map(|_| ()),
            "ata" => sata::decode_smart_data(b, &mut g).map(|_| ()),
            _ => emmc::decode_ext_csd(b, "t", &mut g).map(|_| ()),
        }
    };
    for (kind, b) in &bufs {
        for len in 0..b.len() {
            assert!(
                matches!(decode(kind, &b[..len]), Err(HealthError::Short { .. })),
                "{kind}: {len} bytes"
            );
        }
        // A fixed-seed LCG: the same 2000 corruptions every run.
        let mut x: u32 = 0x1234_5678;
        for _ in 0..2000 {
            let mut m = b.clone();
            for _ in 0..4 {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let i = (x >> 8) as usize % m.len();
                m[i] = (x >> 24) as u8;
            }
            let _ = decode(kind, &m);
        }
    }
    // SMART data corrupted anywhere fails its checksum: refused whole.
    let mut ata = bufs[1].1.clone();
    ata[100] ^= 0x01;
    assert!(matches!(
        decode("ata", &ata),
        Err(HealthError::Garbage { .. })
    ));
}
