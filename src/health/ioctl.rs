//! Owns the three read-only ioctls of the health readers: their kernel structures (with
//! layout tests for 32-bit ARM), the `O_RDONLY` open of a disk's node, and nothing else.
//!
//! Each command only moves data from the device to the host:
//! - `MMC_IOC_CMD` (`_IOWR(179, 0, struct mmc_ioc_cmd)`, include/uapi/linux/mmc/ioctl.h) with
//!   CMD8 SEND_EXT_CSD, `write_flag = 0`: the card sends its 512-byte EXT_CSD register; no
//!   SWITCH (CMD6), no write.
//! - `NVME_IOCTL_ADMIN_CMD` (`_IOWR('N', 0x41, struct nvme_admin_cmd)`,
//!   include/uapi/linux/nvme_ioctl.h) with Get Log Page (opcode 0x02), log 0x02 and RAE set,
//!   so even the pending asynchronous event stays as it was.
//! - `SG_IO` (0x2285, include/scsi/sg.h) with ATA PASS-THROUGH(16), SMART READ DATA
//!   (command 0xB0, feature 0xD0), PIO data-in, 512 bytes.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};

use super::HealthError;

/// `struct mmc_ioc_cmd`: every field fixed-width; `data_ptr` is a `__u64` (not a pointer),
/// so the layout is the same on armv7 and aarch64: 72 bytes, `data_ptr` at 64.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct MmcIocCmd {
    pub write_flag: i32,
    pub is_acmd: i32,
    pub opcode: u32,
    pub arg: u32,
    pub response: [u32; 4],
    pub flags: u32,
    pub blksz: u32,
    pub blocks: u32,
    pub postsleep_min_us: u32,
    pub postsleep_max_us: u32,
    pub data_timeout_ns: u32,
    pub cmd_timeout_ms: u32,
    pub pad: u32,
    pub data_ptr: u64,
}

/// `struct nvme_passthru_cmd` (= `nvme_admin_cmd`): fixed-width, `addr` a `__u64`: 72 bytes.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct NvmeAdminCmd {
    pub opcode: u8,
    pub flags: u8,
    pub rsvd1: u16,
    pub nsid: u32,
    pub cdw2: u32,
    pub cdw3: u32,
    pub metadata: u64,
    pub addr: u64,
    pub metadata_len: u32,
    pub data_len: u32,
    pub cdw10: u32,
    pub cdw11: u32,
    pub cdw12: u32,
    pub cdw13: u32,
    pub cdw14: u32,
    pub cdw15: u32,
    pub timeout_ms: u32,
    pub result: u32,
}

/// `struct sg_io_hdr` (include/scsi/sg.h). Unlike the two above it holds real pointers, so
/// it is 88 bytes on 64-bit targets and 64 on 32-bit ones: declared with C types so that
/// `repr(C)` gives the kernel's layout on each.
#[repr(C)]
#[derive(Debug)]
pub struct SgIoHdr {
    pub interface_id: libc::c_int,
    pub dxfer_direction: libc::c_int,
    pub cmd_len: libc::c_uchar,
    pub mx_sb_len: libc::c_uchar,
    pub iovec_count: libc::c_ushort,
    pub dxfer_len: libc::c_uint,
    pub dxferp: *mut libc::c_void,
    pub cmdp: *mut libc::c_uchar,
    pub sbp: *mut libc::c_uchar,
    pub timeout: libc::c_uint,
    pub flags: libc::c_uint,
    pub pack_id: libc::c_int,
    pub usr_ptr: *mut libc::c_void,
    pub status: libc::c_uchar,
    pub masked_status: libc::c_uchar,
    pub msg_status: libc::c_uchar,
    pub sb_len_wr: libc::c_uchar,
    pub host_status: libc::c_ushort,
    pub driver_status: libc::c_ushort,
    pub resid: libc::c_int,
    pub duration: libc::c_uint,
    pub info: libc::c_uint,
}

/// MMC_BLOCK_MAJOR (include/linux/major.h).
const MMC_BLOCK_MAJOR: u8 = 179;
nix::ioctl_readwrite!(mmc_ioc_cmd, MMC_BLOCK_MAJOR, 0, MmcIocCmd);
nix::ioctl_readwrite!(nvme_admin_cmd, b'N', 0x41, NvmeAdminCmd);
// SG_IO is a bare number, not an _IOWR encoding.
nix::ioctl_readwrite_bad!(sg_io, 0x2285, SgIoHdr);

/// Opens a disk's node `O_RDONLY | O_NONBLOCK` (never for writing: every command above is
/// accepted on a read-only descriptor by a root caller), after checking it is the block
/// device sysfs names, so a stale or replaced /dev entry is never queried.
pub fn open_ro(node: &str, devnum: Option<&str>) -> Result<File, HealthError> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(node)
        .map_err(|e| HealthError::Open {
            node: node.to_string(),
            err: e.to_string(),
        })?;
    let md = f.metadata().map_err(|e| HealthError::Open {
        node: node.to_string(),
        err: e.to_string(),
    })?;
    let rdev = md.rdev();
    let got = format!("{}:{}", libc::major(rdev), libc::minor(rdev));
    match devnum {
        Some(want) if md.file_type().is_block_device() && want == got => Ok(f),
        _ => Err(HealthError::NodeMismatch {
            node: node.to_string(),
            devnum: devnum.unwrap_or("?").to_string(),
        }),
    }
}

pub fn errno_text(e: nix::errno::Errno) -> String {
    format!("{} ({})", e.desc(), e as i32)
}

#[cfg(test)]
mod abi {
    use super::*;
    use std::mem::size_of;

    /// `offset_of!` is Rust 1.77; the MSRV is 1.75, so offsets are measured on a value.
    macro_rules! offset_of {
        ($t:ty, $f:ident) => {{
            // SAFETY: all-zero is a valid value of these plain C structures (null pointers).
            let v: $t = unsafe { std::mem::zeroed() };
            (std::ptr::addr_of!(v.$f) as usize) - (std::ptr::addr_of!(v) as usize)
        }};
    }

    /// The kernel's sizes and offsets (include/uapi/linux/mmc/ioctl.h, nvme_ioctl.h,
    /// scsi/sg.h). Run on armv7 by scripts/ci/cross-build.sh --arch armv7.
    #[test]
    #[allow(clippy::unnecessary_cast)]
    fn structures_have_the_kernel_layout_on_this_target() {
        assert_eq!(size_of::<MmcIocCmd>(), 72);
        assert_eq!(offset_of!(MmcIocCmd, flags), 32);
        assert_eq!(offset_of!(MmcIocCmd, pad), 60);
        assert_eq!(offset_of!(MmcIocCmd, data_ptr), 64);
        assert_eq!(size_of::<NvmeAdminCmd>(), 72);
        assert_eq!(offset_of!(NvmeAdminCmd, addr), 24);
        assert_eq!(offset_of!(NvmeAdminCmd, data_len), 36);
        assert_eq!(offset_of!(NvmeAdminCmd, cdw10), 40);
        assert_eq!(offset_of!(NvmeAdminCmd, result), 68);
        if size_of::<usize>() == 8 {
            assert_eq!(size_of::<SgIoHdr>(), 88);
            assert_eq!(offset_of!(SgIoHdr, dxferp), 16);
            assert_eq!(offset_of!(SgIoHdr, timeout), 40);
            assert_eq!(offset_of!(SgIoHdr, status), 64);
            assert_eq!(offset_of!(SgIoHdr, info), 80);
        } else {
            assert_eq!(size_of::<SgIoHdr>(), 64);
            assert_eq!(offset_of!(SgIoHdr, dxferp), 16);
            assert_eq!(offset_of!(SgIoHdr, timeout), 28);
            assert_eq!(offset_of!(SgIoHdr, status), 44);
            assert_eq!(offset_of!(SgIoHdr, info), 60);
        }
        // The ioctl numbers the kernel expects (`ioctl_num_type` is u32 on armv7, hence the
        // cast that is a no-op here): _IOWR(179, 0, 72 bytes), _IOWR('N', 0x41, 72).
        assert_eq!(nix::request_code_readwrite!(179, 0, 72) as u64, 0xc048_b300);
        assert_eq!(
            nix::request_code_readwrite!(b'N', 0x41, 72) as u64,
            0xc048_4e41
        );
    }
}
