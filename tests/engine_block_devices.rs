//! Integration tests on block devices: a loop device (O_DIRECT alignment is enforced by the
//! block layer, write protection of devices) and a zram device (verify on a RAM disk). Each
//! test checks its precondition and prints exactly why it did not run.

mod common;

use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use common::{is_root, params, run, Scratch};
use usbperf::engine::{self, Access, EngineError, EngineRequest, JobPlan, Progress, RunSpec};
use usbperf::workload::verify::{MismatchKind, VerifyPhase};
use usbperf::workload::{WorkloadError, WorkloadKind};

/// A loop device over a scratch file, with O_DIRECT passed through and 4 KiB sectors.
struct Loop {
    dev: PathBuf,
    _scratch: Scratch,
}

impl Loop {
    fn new(name: &str, size_bytes: u64) -> Result<Self, String> {
        if !is_root() {
            return Err("not root: loop devices need CAP_SYS_ADMIN".into());
        }
        if !Path::new("/dev/loop-control").exists() {
            return Err("/dev/loop-control is missing: the kernel has no loop driver".into());
        }
        let scratch = Scratch::new(name);
        let backing = scratch.path("backing.img");
        std::fs::File::create(&backing)
            .and_then(|f| f.set_len(size_bytes))
            .map_err(|e| format!("cannot create the backing file: {e}"))?;
        let out = Command::new("losetup")
            .args([
                "--direct-io=on",
                "--sector-size",
                "4096",
                "--find",
                "--show",
            ])
            .arg(&backing)
            .output()
            .map_err(|e| format!("cannot run losetup (util-linux): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        Ok(Loop {
            dev,
            _scratch: scratch,
        })
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

/// A zram device from /sys/class/zram-control, reset and removed on drop.
struct Zram {
    id: String,
    dev: PathBuf,
}

impl Zram {
    fn new(size_bytes: u64) -> Result<Self, String> {
        if !is_root() {
            return Err("not root: zram devices need CAP_SYS_ADMIN".into());
        }
        let id = std::fs::read_to_string("/sys/class/zram-control/hot_add")
            .map_err(|e| format!("cannot add a zram device (is the zram module loaded?): {e}"))?
            .trim()
            .to_string();
        let zram = Zram {
            dev: PathBuf::from(format!("/dev/zram{id}")),
            id,
        };
        std::fs::write(
            format!("/sys/block/zram{}/disksize", zram.id),
            size_bytes.to_string(),
        )
        .map_err(|e| format!("cannot size zram{}: {e}", zram.id))?;
        for _ in 0..50 {
            if zram.dev.exists() {
                return Ok(zram);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Err(format!("{} did not appear", zram.dev.display()))
    }
}

impl Drop for Zram {
    fn drop(&mut self) {
        // udev may still hold the device for a moment after our last close: retry.
        for _ in 0..50 {
            let reset = std::fs::write(format!("/sys/block/zram{}/reset", self.id), "1");
            let removed = std::fs::write("/sys/class/zram-control/hot_remove", &self.id);
            if reset.is_ok() && removed.is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        eprintln!("could not remove zram{}: remove it by hand", self.id);
    }
}

macro_rules! require {
    ($setup:expr, $test:literal) => {
        match $setup {
            Ok(device) => device,
            // A test that cannot run fails: a skip must never count as a pass.
            Err(why) => panic!(
                "{}: precondition not met: {why} (run as root on a kernel with loop and zram, as \
                 scripts/test.sh and CI do)",
                $test
            ),
        }
    };
}

#[test]
fn unaligned_offset_on_a_block_device_is_a_clear_error_not_a_crash() {
    needs_root!("loop devices");
    let lo = require!(Loop::new("lo-align", 16 << 20), "unaligned_offset");
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&lo.dev)
        .unwrap();
    for request in common::engines() {
        let selected = engine::select(request).unwrap();
        let spec = RunSpec {
            fd: std::os::fd::AsRawFd::as_raw_fd(&dev),
            direct: true,
            jobs: vec![JobPlan {
                access: Access::Sequential,
                read_percent: 100,
                block_bytes: 4096,
                // Not a multiple of the 4096-byte sector: the block layer answers EINVAL.
                region_offset_bytes: 100,
                region_bytes: 64 << 10,
                queue_depth: 4,
                io_limit: Some(16),
                seed: 1,
            }],
            runtime: None,
            data: None,
            progress: Arc::new(Progress::new(1)),
            stop: Arc::new(AtomicBool::new(false)),
            known: Arc::default(),
        };
        let err = match engine::run(selected.engine.as_ref(), &spec) {
            Ok(out) => panic!(
                "{request:?}: unaligned I/O succeeded ({} bytes)",
                out.read.bytes
            ),
            Err(e) => e,
        };
        match &err {
            EngineError::Io { offset, source, .. } => {
                // Whichever in-flight I/O failed first: all of them are 100 bytes off.
                assert_eq!(*offset % 4096, 100, "{err}");
                assert_eq!(source.raw_os_error(), Some(libc::EINVAL), "{err}");
            }
            other => panic!("{request:?}: expected an I/O error, got {other}"),
        }
        let text = err.to_string();
        assert!(
            text.contains("O_DIRECT") && text.contains("aligned"),
            "{text}"
        );
    }
}

#[test]
fn block_devices_are_read_freely_but_written_only_with_permission() {
    needs_root!("loop devices");
    let lo = require!(Loop::new("lo-guard", 16 << 20), "device_write_guard");
    let mut p = params(WorkloadKind::SeqWrite, &lo.dev);
    p.runtime_ms = None;
    let err = run(&p, EngineRequest::Auto).unwrap_err();
    assert!(matches!(err, WorkloadError::DeviceWriteRefused(_)), "{err}");
    assert!(err.to_string().contains("--allow-write-device"), "{err}");

    let mut read = params(WorkloadKind::RandRead, &lo.dev);
    read.runtime_ms = None;
    let r = run(&read, EngineRequest::Auto).unwrap();
    assert_eq!(
        r.bytes,
        16 << 20,
        "a size-bound read covers the whole device once"
    );

    p.allow_write_device = true;
    let w = run(&p, EngineRequest::Auto).unwrap();
    assert_eq!(w.bytes, 16 << 20);
    assert!(!w.target.created);
}

#[cfg(feature = "uring")]
#[test]
fn engines_agree_on_a_loop_device() {
    needs_root!("loop devices");
    let lo = require!(Loop::new("lo-agree", 32 << 20), "engines_agree_on_loop");
    for kind in [
        WorkloadKind::RandWrite,
        WorkloadKind::Mixed,
        WorkloadKind::SeqRead,
    ] {
        let mut p = params(kind, &lo.dev);
        p.runtime_ms = None;
        p.allow_write_device = true;
        let uring = run(&p, EngineRequest::Uring).unwrap();
        let sync = run(&p, EngineRequest::Sync).unwrap();
        assert_eq!(uring.bytes, 32 << 20, "{kind:?}");
        assert_eq!(sync.bytes, uring.bytes, "{kind:?}");
        assert_eq!(sync.ios, uring.ios, "{kind:?}");
    }
}

#[test]
fn verify_on_zram_names_a_corrupted_block() {
    needs_root!("zram devices");
    let zram = require!(Zram::new(32 << 20), "verify_on_zram");
    let mut p = params(WorkloadKind::Verify, &zram.dev);
    p.allow_write_device = true;
    p.block_bytes = 128 << 10;
    p.queue_depth = 8;
    let clean = run(&p, EngineRequest::Auto).unwrap();
    let v = clean.verify.unwrap();
    assert_eq!((v.blocks_written, v.mismatched_blocks), (256, 0));

    // Overwrite the start of a block in the middle (its header) with zeros.
    let middle = 16u64 << 20;
    let dev = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&zram.dev)
        .unwrap();
    let zeros = usbperf::engine::AlignedBuffer::new(4096, 1).unwrap();
    dev.write_all_at(zeros.slot(0, 4096), middle).unwrap();
    drop(dev);

    p.verify_phase = VerifyPhase::Read;
    let bad = run(&p, EngineRequest::Auto).unwrap();
    let v = bad.verify.unwrap();
    assert_eq!(v.blocks_checked, 256);
    assert_eq!(v.mismatched_blocks, 1);
    assert_eq!(v.mismatches[0].offset, middle);
    assert_eq!(v.mismatches[0].kind, MismatchKind::NoPattern);
}

#[test]
fn quick_verify_on_zram_spreads_probes_over_the_device() {
    needs_root!("zram devices");
    let zram = require!(Zram::new(64 << 20), "quick_verify_on_zram");
    let mut p = params(WorkloadKind::Verify, &zram.dev);
    p.allow_write_device = true;
    p.block_bytes = 4096;
    p.verify_mode = usbperf::workload::verify::VerifyMode::Quick;
    p.verify_points = 64;
    let r = run(&p, EngineRequest::Auto).unwrap();
    let v = r.verify.unwrap();
    assert_eq!(
        (v.blocks_written, v.blocks_checked, v.mismatched_blocks),
        (64, 64, 0)
    );
}

/// `auto` asks each target whether it takes non-blocking I/O. zram refuses it (its driver has
/// no nowait support on this kernel, 6.x, where the block device open sets FMODE_NOWAIT only
/// for capable queues), so io_uring would punt every I/O to io-wq and the thread pool runs
/// instead; a loop device and a file on ext4 take it and keep io_uring. A named engine is
/// always used as asked, and both engines do exactly the same I/O.
#[cfg(feature = "uring")]
#[test]
fn auto_picks_the_engine_per_target_by_nonblocking_support() {
    needs_root!("loop devices");
    use usbperf::engine::nowait::{self, Nowait};
    use usbperf::engine::EngineKind;

    let zram = require!(Zram::new(32 << 20), "auto_engine_per_target");
    let lo = require!(Loop::new("lo-auto", 32 << 20), "auto_engine_per_target");
    let scratch = Scratch::new("auto-engine");
    let file = scratch.path("target.dat");

    let probe = |path: &Path| {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .unwrap();
        nowait::probe(std::os::fd::AsRawFd::as_raw_fd(&f), 4096, 0)
    };
    assert_eq!(probe(&zram.dev), Nowait::Unsupported);
    assert_eq!(probe(&lo.dev), Nowait::Supported);

    let mut expected_ios = None;
    for (target, auto_engine) in [
        (&zram.dev, EngineKind::Sync),
        (&lo.dev, EngineKind::Uring),
        (&file, EngineKind::Uring),
    ] {
        let mut p = params(WorkloadKind::RandWrite, target);
        p.runtime_ms = None;
        p.size_bytes = Some(16 << 20);
        p.allow_write_device = true;
        let auto = run(&p, EngineRequest::Auto).unwrap();
        assert_eq!(
            auto.engine,
            auto_engine,
            "{}: {}",
            target.display(),
            auto.engine_reason
        );
        if auto_engine == EngineKind::Sync {
            assert!(
                auto.engine_reason.contains("RWF_NOWAIT"),
                "the report says why: {}",
                auto.engine_reason
            );
        }
        let named = run(&p, EngineRequest::Uring).unwrap();
        assert_eq!(named.engine, EngineKind::Uring, "{}", target.display());
        assert_eq!(auto.bytes, 16 << 20, "{}", target.display());
        assert_eq!((named.bytes, named.ios), (auto.bytes, auto.ios));
        assert_eq!(*expected_ios.get_or_insert(auto.ios), auto.ios);
    }
    assert!(!file.exists(), "the test file is removed after the run");
}

/// The health ioctls on a device that does not speak them (a loop device answers
/// MMC_IOC_CMD, NVME_IOCTL_ADMIN_CMD and SG_IO with an error) give an error naming the ioctl
/// and the node, never a panic; the device's bytes are unchanged; a node that is not the
/// device sysfs names is never queried.
#[test]
fn health_ioctls_on_a_device_without_them_fail_with_a_reason() {
    needs_root!("loop devices");
    use usbperf::health::{emmc, nvme, sata, HealthError};
    let lo = require!(Loop::new("lo-health", 4 << 20), "health_ioctls");
    let node = lo.dev.to_string_lossy().into_owned();
    let name = lo.dev.file_name().unwrap().to_string_lossy().into_owned();
    let devnum = std::fs::read_to_string(format!("/sys/block/{name}/dev"))
        .unwrap()
        .trim()
        .to_string();
    let pattern: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&lo.dev)
        .unwrap()
        .write_all_at(&pattern, 0)
        .unwrap();
    let errs = [
        emmc::read_ext_csd_ioctl(&node, Some(&devnum)).unwrap_err(),
        nvme::read_smart_log_ioctl(&node, Some(&devnum)).unwrap_err(),
        sata::read_smart_data_ioctl(&node, Some(&devnum)).unwrap_err(),
    ];
    for (e, want) in errs
        .iter()
        .zip(["MMC_IOC_CMD", "NVME_IOCTL_ADMIN_CMD", "SG_IO"])
    {
        match e {
            HealthError::Ioctl { ioctl, node: n, .. } => {
                assert!(ioctl.starts_with(want), "{e}");
                assert_eq!(n, &node);
            }
            HealthError::DeviceStatus { ioctl, .. } => assert!(ioctl.starts_with(want), "{e}"),
            other => panic!("{want}: unexpected error {other}"),
        }
    }
    let mut back = vec![0u8; pattern.len()];
    std::fs::File::open(&lo.dev)
        .unwrap()
        .read_exact_at(&mut back, 0)
        .unwrap();
    assert!(
        back == pattern,
        "the health ioctls changed the device's bytes"
    );
    assert!(matches!(
        emmc::read_ext_csd_ioctl(&node, Some("1:1")),
        Err(HealthError::NodeMismatch { .. })
    ));
    assert!(matches!(
        nvme::read_smart_log_ioctl("/dev/null", Some("1:3")),
        Err(HealthError::NodeMismatch { .. })
    ));
    assert!(matches!(
        sata::read_smart_data_ioctl("/nonexistent/sdz", None),
        Err(HealthError::Open { .. })
    ));
}
