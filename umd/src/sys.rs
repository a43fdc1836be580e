//! The real-hardware side of the kernel boundary: a DRM render node opened,
//! driven with ioctls and mapped through rustix, built on libc (its
//! `use-libc` backend) so that an `LD_PRELOAD` shim sees every call, as it
//! sees libdrm's.
//!
//! Every ioctl, DRM core and asahi alike, is issued from the same UAPI
//! bytes the simulated device gets. The drm crate's typed calls are not
//! used: they re-encode the arguments (the bytes would differ from the
//! simulated path) and some unwrap kernel-returned handles (a zero handle
//! would panic the driver).
//!
//! This is the driver's only unsafe module: the simulated device is
//! reached through safe calls.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::ptr::NonNull;

use agx_uapi::drm::{self, SyncFileInfo, SyncobjHandle, SyncobjHandleToFdFlags};
use rustix::fs::{Mode, OFlags};
use rustix::ioctl::{Ioctl, IoctlOutput, Opcode};
use rustix::mm::{MapFlags, ProtFlags};
use zerocopy::IntoBytes;

use crate::kernel::{fence_status_of, CpuMapping, Errno, FenceStatus, Kernel};

fn errno(e: rustix::io::Errno) -> Errno {
    Errno(e.raw_os_error())
}

/// One ioctl whose argument is a UAPI struct as bytes, the request
/// number (with its size) decided at run time.
struct ByteIoctl<'a> {
    request: u32,
    arg: &'a mut [u8],
}

// SAFETY: the opcode encodes exactly `arg.len()` bytes (checked by
// `raw_ioctl` before any call), so the kernel reads and writes only the
// exclusively borrowed buffer; the call may write it (IS_MUTATING).
unsafe impl Ioctl for ByteIoctl<'_> {
    type Output = ();
    const IS_MUTATING: bool = true;

    fn opcode(&self) -> Opcode {
        self.request as Opcode
    }

    fn as_ptr(&mut self) -> *mut core::ffi::c_void {
        self.arg.as_mut_ptr().cast()
    }

    unsafe fn output_from_ptr(
        _out: IoctlOutput,
        _arg: *mut core::ffi::c_void,
    ) -> rustix::io::Result<()> {
        Ok(())
    }
}

/// Issues `request` on `fd`, restarting after signals as libdrm's
/// `drmIoctl` does.
fn raw_ioctl(fd: BorrowedFd<'_>, request: u32, arg: &mut [u8]) -> Result<(), Errno> {
    if agx_uapi::ioctl::ioc_size_bytes(request) != arg.len() {
        return Err(Errno::EINVAL);
    }
    loop {
        let call = ByteIoctl {
            request,
            arg: &mut *arg,
        };
        // SAFETY: `call` describes its buffer truthfully (see the Ioctl
        // impl): the request's size is the buffer's length.
        match unsafe { rustix::ioctl::ioctl(fd, call) } {
            Ok(()) => return Ok(()),
            Err(e) if e == rustix::io::Errno::INTR || e == rustix::io::Errno::AGAIN => {}
            Err(e) => return Err(errno(e)),
        }
    }
}

/// An open DRM node.
#[derive(Debug)]
pub(crate) struct DrmNode {
    fd: OwnedFd,
}

impl DrmNode {
    /// Opens `path` read-write, close-on-exec.
    pub(crate) fn open(path: &Path) -> Result<DrmNode, Errno> {
        let fd =
            rustix::fs::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()).map_err(errno)?;
        Ok(DrmNode { fd })
    }

    /// A DRM file the caller already has open (given by a loader, or
    /// inherited).
    pub(crate) fn from_fd(fd: std::os::fd::OwnedFd) -> DrmNode {
        DrmNode { fd }
    }
}

impl Kernel for DrmNode {
    fn ioctl(&self, request: u32, arg: &mut [u8]) -> Result<(), Errno> {
        raw_ioctl(self.fd.as_fd(), request, arg)
    }

    fn map(&self, mmap_offset: u64, len_bytes: u64) -> Result<Box<dyn CpuMapping>, Errno> {
        let len = usize::try_from(len_bytes).map_err(|_| Errno::EINVAL)?;
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: a fresh shared mapping at an address the kernel chooses;
        // nothing in this process aliases it yet.
        let base = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                &self.fd,
                mmap_offset,
            )
        }
        .map_err(errno)?;
        let base = NonNull::new(base.cast::<u8>()).ok_or(Errno::ENOMEM)?;
        Ok(Box::new(Mmap { base, len }))
    }

    fn fence_status(&self, handle: u32) -> Result<FenceStatus, Errno> {
        let mut export = SyncobjHandle {
            handle,
            flags: SyncobjHandleToFdFlags::EXPORT_SYNC_FILE.bits(),
            ..SyncobjHandle::default()
        };
        raw_ioctl(
            self.fd.as_fd(),
            drm::DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD,
            export.as_mut_bytes(),
        )?;
        let sync_file = returned_fd(export.fd)?;
        let mut info = SyncFileInfo::default();
        raw_ioctl(
            sync_file.as_fd(),
            drm::SYNC_IOC_FILE_INFO,
            info.as_mut_bytes(),
        )?;
        Ok(fence_status_of(info.status))
    }
}

/// A shared mapping of a GEM object.
#[derive(Debug)]
struct Mmap {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; all access goes through
// `read`/`write`, which copy bytes (the GPU and other threads may write the
// same bytes concurrently, as with any shared GPU buffer; no Rust
// references into it are handed out).
unsafe impl Send for Mmap {}
// SAFETY: as for Send.
unsafe impl Sync for Mmap {}

impl Mmap {
    fn check(&self, offset_bytes: u64, len: usize) -> Result<usize, Errno> {
        let offset = usize::try_from(offset_bytes).map_err(|_| Errno::EFAULT)?;
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(offset),
            _ => Err(Errno::EFAULT),
        }
    }
}

impl CpuMapping for Mmap {
    fn len_bytes(&self) -> u64 {
        self.len as u64
    }

    fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<(), Errno> {
        let offset = self.check(offset_bytes, data.len())?;
        // SAFETY: [offset, offset + len) lies inside the mapping (checked)
        // and `data` is a distinct Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.as_ptr().add(offset), data.len())
        };
        Ok(())
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), Errno> {
        let offset = self.check(offset_bytes, buf.len())?;
        // SAFETY: as in `write`, reading.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.as_ptr().add(offset),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        Ok(())
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` describe the mapping made in `map`, which
        // nothing else unmaps.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Takes ownership of a descriptor the kernel (real or simulated) just
/// returned in an ioctl's output, so that dropping it closes it.
pub fn returned_fd(fd: i32) -> Result<OwnedFd, Errno> {
    if fd < 0 {
        return Err(Errno::EINVAL);
    }
    // SAFETY: the ioctl that produced `fd` installed a new descriptor for
    // this caller, which owns it and uses the number nowhere else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads CLOCK_MONOTONIC, the clock syncobj deadlines are absolute in,
/// in nanoseconds.
pub(crate) fn clock_monotonic_ns() -> i64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec)
}
