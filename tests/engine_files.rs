//! Integration tests on real files: engine agreement, O_DIRECT alignment errors, the time
//! bound, verify naming a planted corrupt block, file creation and clean-up.

mod common;

use std::os::unix::fs::FileExt;

use common::{params, run, Scratch};
use usbperf::engine::{EngineRequest, StopReason};
use usbperf::workload::verify::{MismatchKind, VerifyPhase};
use usbperf::workload::{CacheMode, WorkloadError, WorkloadKind};

#[cfg(feature = "uring")]
#[test]
fn sync_fallback_moves_the_same_bytes_as_uring() {
    let scratch = Scratch::new("agree");
    for kind in [
        WorkloadKind::SeqWrite,
        WorkloadKind::RandRead,
        WorkloadKind::Mixed,
    ] {
        let path = scratch.path(&format!("{kind:?}.dat"));
        let mut p = params(kind, &path);
        p.size_bytes = Some(8 << 20);
        p.runtime_ms = None;
        if kind != WorkloadKind::SeqWrite {
            p.block_bytes = 16 << 10;
            p.queue_depth = 4;
            p.jobs = 2;
        }
        let uring = run(&p, EngineRequest::Uring).unwrap();
        let sync = run(&p, EngineRequest::Sync).unwrap();
        assert_eq!(uring.engine, usbperf::engine::EngineKind::Uring);
        assert_eq!(sync.engine, usbperf::engine::EngineKind::Sync);
        assert_eq!(uring.stopped_by, StopReason::Size);
        assert_eq!(sync.stopped_by, StopReason::Size);
        // The size bound is the total over all jobs: exactly one pass over the region.
        assert_eq!(uring.bytes, 8 << 20, "{kind:?}");
        assert_eq!(sync.bytes, uring.bytes, "{kind:?}");
        // The plan is deterministic, so even the read/write split of `mixed` agrees.
        assert_eq!(
            sync.read.as_ref().map(|r| r.bytes),
            uring.read.as_ref().map(|r| r.bytes),
            "{kind:?}"
        );
        assert_eq!(
            sync.write.as_ref().map(|r| r.bytes),
            uring.write.as_ref().map(|r| r.bytes),
            "{kind:?}"
        );
        // The created file is gone afterwards (no --keep).
        assert!(!path.exists(), "{kind:?}");
    }
}

#[test]
fn unaligned_block_size_under_o_direct_is_a_clear_error() {
    let scratch = Scratch::new("align-bs");
    let path = scratch.path("t.dat");
    let mut p = params(WorkloadKind::RandRead, &path);
    p.size_bytes = Some(1 << 20);
    p.block_bytes = 1000;
    let err = run(&p, EngineRequest::Auto).unwrap_err();
    assert!(matches!(err, WorkloadError::Alignment(1000)), "{err}");
    assert!(err.to_string().contains("multiple of 512"), "{err}");
    assert!(!path.exists(), "nothing is created for a rejected command");
}

#[test]
fn a_test_stops_at_its_time_bound() {
    let scratch = Scratch::new("time");
    let path = scratch.path("t.dat");
    let mut p = params(WorkloadKind::SeqWrite, &path);
    // 4 KiB O_DSYNC writes over 1 GiB: far more than fits in the time bound on any disk.
    p.size_bytes = Some(1 << 30);
    p.block_bytes = 4096;
    p.cache = CacheMode::Dsync;
    p.runtime_ms = Some(300);
    for engine in common::engines() {
        let r = run(&p, engine).unwrap();
        assert_eq!(r.stopped_by, StopReason::Time, "{engine:?}");
        assert!(r.bytes > 0 && r.bytes < 1 << 30, "{engine:?}: {}", r.bytes);
    }
}

#[test]
fn fdatasync_mode_times_the_final_flush() {
    let scratch = Scratch::new("fdatasync");
    let path = scratch.path("t.dat");
    let mut p = params(WorkloadKind::SeqWrite, &path);
    p.size_bytes = Some(8 << 20);
    p.cache = CacheMode::Fdatasync;
    let r = run(&p, EngineRequest::Auto).unwrap();
    let flush_ns = r.flush_ns.expect("fdatasync mode reports its flush");
    assert!(r.seconds * 1e9 >= flush_ns as f64);
    assert_eq!(r.bytes, 8 << 20);
}

#[test]
fn verify_names_a_corrupt_block_planted_in_the_middle() {
    let scratch = Scratch::new("verify");
    let path = scratch.path("t.dat");
    let mut p = params(WorkloadKind::Verify, &path);
    p.size_bytes = Some(16 << 20);
    p.block_bytes = 64 << 10;
    p.queue_depth = 4;
    p.keep = true;
    let clean = run(&p, EngineRequest::Auto).unwrap();
    let v = clean.verify.unwrap();
    assert_eq!(v.blocks_written, 256);
    assert_eq!(v.blocks_checked, 256);
    assert_eq!(v.mismatched_blocks, 0);

    // Flip one byte in the middle of the file, behind the engine's back.
    let middle = 8u64 << 20;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, middle + 777).unwrap();
    byte[0] ^= 0x10;
    file.write_all_at(&byte, middle + 777).unwrap();
    file.sync_all().unwrap();
    drop(file);

    p.verify_phase = VerifyPhase::Read;
    p.keep = false;
    let bad = run(&p, EngineRequest::Auto).unwrap();
    let v = bad.verify.unwrap();
    assert_eq!(v.blocks_checked, 256);
    assert_eq!(v.mismatched_blocks, 1);
    assert_eq!(v.mismatches[0].offset, middle);
    assert_eq!(
        v.mismatches[0].kind,
        MismatchKind::Corrupt {
            bytes_differing: 1,
            first_at_byte: 777
        }
    );
}

#[test]
fn quick_verify_probes_the_whole_region() {
    let scratch = Scratch::new("quick");
    let path = scratch.path("t.dat");
    let mut p = params(WorkloadKind::Verify, &path);
    p.size_bytes = Some(64 << 20);
    p.block_bytes = 4096;
    p.verify_mode = usbperf::workload::verify::VerifyMode::Quick;
    p.verify_points = 100;
    let r = run(&p, EngineRequest::Sync).unwrap();
    let v = r.verify.unwrap();
    assert_eq!(
        (v.blocks_written, v.blocks_checked, v.mismatched_blocks),
        (100, 100, 0)
    );
    assert_eq!(r.bytes, 2 * 100 * 4096);
}

#[test]
fn read_of_a_new_file_reads_real_data_and_reports_the_queue() {
    let scratch = Scratch::new("readbuf");
    let path = scratch.path("t.dat");
    let mut p = params(WorkloadKind::ReadBuffered, &path);
    p.size_bytes = Some(16 << 20);
    p.keep = true;
    let r = run(&p, EngineRequest::Auto).unwrap();
    assert!(r.target.created);
    assert_eq!(r.bytes, 16 << 20);
    // The file was filled with data before reading: no holes, no unwritten extents.
    let mut head = vec![0u8; 4096];
    std::fs::File::open(&path)
        .unwrap()
        .read_exact_at(&mut head, 0)
        .unwrap();
    assert!(head.iter().any(|&b| b != 0));
    // A second run on the existing file does not create or delete it.
    p.keep = false;
    let again = run(&p, EngineRequest::Auto).unwrap();
    assert!(!again.target.created);
    assert!(path.exists());
}

#[test]
fn missing_file_without_size_says_to_give_one() {
    let scratch = Scratch::new("nosize");
    let p = params(WorkloadKind::RandRead, &scratch.path("absent.dat"));
    let err = run(&p, EngineRequest::Auto).unwrap_err();
    assert!(err.to_string().contains("--size"), "{err}");
}

#[test]
fn write_curve_samples_until_its_time_bound() {
    let scratch = Scratch::new("curve");
    let path = scratch.path("t.dat");
    let mut p = params(WorkloadKind::WriteCurve, &path);
    p.size_bytes = Some(1 << 30);
    p.block_bytes = 64 << 10;
    p.runtime_ms = Some(600);
    p.sample_interval_ms = 100;
    let r = run(&p, EngineRequest::Auto).unwrap();
    assert_eq!(r.stopped_by, StopReason::Time);
    assert!(r.bytes < 1 << 30);
    let curve = r.curve.unwrap();
    assert!(curve.samples.len() >= 4, "{:?}", curve.samples);
    let last = curve.samples.last().unwrap();
    assert!((last.cumulative_mib * 1048576.0 - r.bytes as f64).abs() < 1.0);
}

/// The `sync` engine's I/O runs on its pool's threads, one per queue slot: their CPU is the
/// test's. Buffered 4 KiB reads of a cached file keep every slot busy on the CPU, so the
/// figure is most of a CPU on a quiet machine; counting only the job's own thread (which
/// waits) gave ~0 %. The bound is 10 %: on a machine busy with other builds the pool got
/// 38.9 % of a CPU, and the test is about which threads count, not how fast they are.
#[test]
fn the_sync_pools_threads_count_in_the_cpu_figure() {
    let scratch = Scratch::new("sync-cpu");
    let path = scratch.path("t.dat");
    let mut p = params(WorkloadKind::RandRead, &path);
    p.size_bytes = Some(8 << 20);
    p.block_bytes = 4096;
    p.queue_depth = 4;
    p.jobs = 1;
    p.cache = CacheMode::Buffered;
    p.time_based = true;
    p.runtime_ms = Some(300);
    let r = run(&p, EngineRequest::Sync).unwrap();
    let cpu = r.cpu.usr_percent + r.cpu.sys_percent;
    assert!(cpu > 10.0, "CPU {cpu:.1} % of one CPU over {} I/Os", r.ios);
    assert!(r.cpu.cpu_ns_per_io > 0.0);
}
