//! The real-hardware side of the kernel boundary: a DRM render node opened
//! with `open(2)`, ioctls through `ioctl(2)` (libc's, so an `LD_PRELOAD`
//! shim sees them), CPU mappings with `mmap(2)`.
//!
//! This is the driver's only unsafe module: the simulated device is
//! reached through safe calls.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::ptr::NonNull;

use agx_uapi::drm::{self, SyncFileInfo, SyncobjHandle, SyncobjHandleToFdFlags};
use zerocopy::IntoBytes;

use crate::kernel::{fence_status_of, CpuMapping, Errno, FenceStatus, Kernel};

/// Issues `request` on `fd`, restarting after signals as libdrm's
/// `drmIoctl` does.
fn raw_ioctl(fd: RawFd, request: u32, arg: &mut [u8]) -> Result<(), Errno> {
    if agx_uapi::ioctl::ioc_size_bytes(request) != arg.len() {
        return Err(Errno::EINVAL);
    }
    loop {
        // SAFETY: `arg` is a live, exclusively borrowed buffer of exactly
        // the size the request encodes, which is all the kernel touches.
        let ret = unsafe { libc::ioctl(fd, libc::c_ulong::from(request), arg.as_mut_ptr()) };
        if ret != -1 {
            return Ok(());
        }
        let errno = Errno::last();
        if errno.0 != libc::EINTR && errno.0 != libc::EAGAIN {
            return Err(errno);
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
        let c_path =
            CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| Errno::EINVAL)?;
        // SAFETY: `c_path` is a NUL-terminated string that outlives the
        // call.
        let fd = unsafe { libc::open(c_path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(Errno::last());
        }
        // SAFETY: `open` returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(DrmNode { fd })
    }
}

impl Kernel for DrmNode {
    fn ioctl(&self, request: u32, arg: &mut [u8]) -> Result<(), Errno> {
        raw_ioctl(self.fd.as_raw_fd(), request, arg)
    }

    fn map(&self, mmap_offset: u64, len_bytes: u64) -> Result<Box<dyn CpuMapping>, Errno> {
        let len = usize::try_from(len_bytes).map_err(|_| Errno::EINVAL)?;
        let offset = libc::off_t::try_from(mmap_offset).map_err(|_| Errno::EINVAL)?;
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: a fresh shared mapping chosen by the kernel; nothing in
        // this process aliases it yet.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.fd.as_raw_fd(),
                offset,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Errno::last());
        }
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
            self.fd.as_raw_fd(),
            drm::DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD,
            export.as_mut_bytes(),
        )?;
        let sync_file = returned_fd(export.fd)?;
        let mut info = SyncFileInfo::default();
        raw_ioctl(
            sync_file.as_raw_fd(),
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
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

/// Takes ownership of a descriptor the kernel (real or simulated) just
/// returned in an ioctl's output, so that dropping it closes it.
pub(crate) fn returned_fd(fd: i32) -> Result<OwnedFd, Errno> {
    if fd < 0 {
        return Err(Errno::EINVAL);
    }
    // SAFETY: the ioctl that produced `fd` installed a new descriptor for
    // this caller, which owns it and uses the number nowhere else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads CLOCK_MONOTONIC, the clock syncobj deadlines are absolute in.
pub(crate) fn clock_monotonic(t: &mut libc::timespec) -> bool {
    // SAFETY: `t` is a valid, exclusively borrowed timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, t) == 0 }
}
