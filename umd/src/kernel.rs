//! The kernel boundary: every request the driver makes goes through
//! `Kernel::ioctl` as the bytes of the asahi UAPI struct, whether the
//! kernel is a real asahi DRM node or the simulated device.
//!
//! Besides ioctls a driver needs two things from the file: CPU mappings
//! of GEM objects (`mmap` at the offset `GEM_MMAP_OFFSET` returned) and the
//! status of a sync file (`SYNC_IOC_FILE_INFO`), which is how a fence's
//! error (`EIO` for a GPU fault) reaches userspace.

use std::fmt;

use zerocopy::{FromBytes, Immutable, IntoBytes};

pub use agx_uapi::Errno;

/// A CPU mapping of (part of) a GEM object.
pub trait CpuMapping: Send + Sync + fmt::Debug {
    /// Size of the mapping in bytes.
    fn len_bytes(&self) -> u64;
    /// Copies `data` in at `offset_bytes`; `EFAULT` outside the mapping.
    fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<(), Errno>;
    /// Copies out into `buf` from `offset_bytes`; `EFAULT` outside the
    /// mapping.
    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), Errno>;
}

/// The status of a fence, as `SYNC_IOC_FILE_INFO` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceStatus {
    /// Not signalled yet.
    Pending,
    /// Signalled without error.
    Signalled,
    /// Signalled with an error.
    Failed(Errno),
}

/// An open DRM file of the asahi driver.
///
/// Crate-private on purpose: an ioctl's argument bytes can hold pointers
/// the kernel writes through (VERSION's name buffer, GET_PARAMS' pointer,
/// SYNCOBJ_QUERY's points), so issuing arbitrary ones is not a safe
/// operation. The driver builds every argument itself.
pub(crate) trait Kernel: Send + Sync + fmt::Debug {
    /// Issues `request` with `arg` as its argument bytes (exactly the size
    /// the request encodes). The kernel copies in and out as the request's
    /// direction says.
    fn ioctl(&self, request: u32, arg: &mut [u8]) -> Result<(), Errno>;

    /// Maps `len_bytes` of the object at `mmap_offset` (from
    /// `GEM_MMAP_OFFSET`) for CPU access.
    fn map(&self, mmap_offset: u64, len_bytes: u64) -> Result<Box<dyn CpuMapping>, Errno>;

    /// Exports syncobj `handle`'s fence as a sync file and reads its
    /// status; the sync file is closed again.
    fn fence_status(&self, handle: u32) -> Result<FenceStatus, Errno>;
}

/// Issues a typed ioctl.
pub(crate) fn call<T: IntoBytes + FromBytes + Immutable>(
    kernel: &dyn Kernel,
    request: u32,
    arg: &mut T,
) -> Result<(), Errno> {
    let size = agx_uapi::ioctl::ioc_size_bytes(request);
    debug_assert_eq!(size, size_of::<T>(), "request {request:#x}");
    kernel.ioctl(request, arg.as_mut_bytes())
}

/// The status word of `SYNC_IOC_FILE_INFO` as a [`FenceStatus`].
pub fn fence_status_of(status: i32) -> FenceStatus {
    match status {
        0 => FenceStatus::Pending,
        s if s > 0 => FenceStatus::Signalled,
        s => FenceStatus::Failed(Errno(s.checked_neg().unwrap_or(libc::EIO))),
    }
}
