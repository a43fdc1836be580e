//! A shared buffer's implicit fences: Linux's `dma_resv`, reached through
//! the dma-buf ioctls on a PRIME fd.
//!
//! The asahi UAPI is explicit-sync only: SUBMIT names no buffers, so the
//! kernel never adds a job's fence to a buffer. A userspace driver that
//! shares a buffer with a window system or another driver (Mesa's
//! `agx_batch.c`) does the implicit sync itself, per shared buffer: before
//! a submission it asks the buffer for the fences its access must wait
//! for (`DMA_BUF_IOCTL_EXPORT_SYNC_FILE`, a sync file it imports into a
//! syncobj it waits on), and after it hands the buffer the submission's
//! fence (`DMA_BUF_IOCTL_IMPORT_SYNC_FILE`), as a write or a read. This
//! module keeps those fences per buffer, as the dma-buf's reservation
//! object does, and answers the three ioctls with Linux's checks
//! (`drivers/dma-buf/dma-buf.c`). A reader waits for the writes; a writer
//! waits for every access. Fences leave the reservation once signalled.
//!
//! The reservation belongs to this device's object: two simulated devices
//! that share a buffer (each process its own device, the shim's
//! in-process mode) each see the fences added through their own. The
//! shim's device process, one device for every client, has none of this.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use agx_uapi::drm::{
    DmaBufSync, DmaBufSyncFile, DMA_BUF_IOCTL_EXPORT_SYNC_FILE, DMA_BUF_IOCTL_IMPORT_SYNC_FILE,
    DMA_BUF_IOCTL_SYNC, DMA_BUF_SYNC_END, DMA_BUF_SYNC_RW, DMA_BUF_SYNC_WRITE,
};
use zerocopy::{FromZeros, IntoBytes};

use crate::device::Device;
use crate::sync::{Fence, Usage};
use crate::uaccess::{copy_from_user, copy_to_user, dup_user_fd, install_user_fd, InstallError};
use agx_uapi::Errno;

/// Why a dma-buf ioctl failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DmaBufError {
    /// The file is no buffer of this device (or the request is none of
    /// the dma-buf ioctls): the host kernel's answer stands.
    #[error("not a dma-buf ioctl of this device (request {request:#x})")]
    NotOurs {
        /// The request.
        request: u64,
    },
    /// The argument could not be read or written.
    #[error("the argument at {address:#x} cannot be copied")]
    Fault {
        /// Its user address.
        address: u64,
    },
    /// Flags outside those the ioctl knows.
    #[error("unknown flags {flags:#x} (known {known:#x})")]
    UnknownFlags {
        /// The flags given.
        flags: u64,
        /// The flags the ioctl knows.
        known: u64,
    },
    /// Neither read nor write access named.
    #[error("flags {flags:#x} name neither read nor write access")]
    NoAccess {
        /// The flags given.
        flags: u64,
    },
    /// The descriptor to import is no sync file.
    #[error("fd {fd} is not a sync file")]
    NotASyncFile {
        /// The descriptor.
        fd: i32,
    },
    /// The caller has no descriptor free for the sync file.
    #[error("no descriptor free for the sync file")]
    NoDescriptor,
    /// A signal interrupted the wait for the buffer's fences.
    #[error("interrupted by a signal")]
    Interrupted,
    /// Another layer's errno (making the sync file).
    #[error("{0}")]
    Errno(#[from] Errno),
}

/// Whether `request` is one of the dma-buf ioctls answered here.
pub fn is_dma_buf_ioctl(request: u64) -> bool {
    [
        DMA_BUF_IOCTL_SYNC,
        DMA_BUF_IOCTL_EXPORT_SYNC_FILE,
        DMA_BUF_IOCTL_IMPORT_SYNC_FILE,
    ]
    .contains(&(request as u32))
        && request >> 32 == 0
}

impl Device {
    /// An ioctl on a file this device handed out that is no DRM file: a
    /// sync file (`SYNC_IOC_FILE_INFO`) or a PRIME buffer (the dma-buf
    /// ioctls). `ENOTTY` for any other file or request, so that the host
    /// kernel's answer stands.
    pub fn exported_file_ioctl(
        &self,
        file: BorrowedFd<'_>,
        request: u64,
        arg: u64,
    ) -> Result<i32, Errno> {
        if request == u64::from(agx_uapi::drm::SYNC_IOC_FILE_INFO) {
            self.exports.sync_file_ioctl(file, arg)
        } else {
            self.dma_buf_ioctl(file, request, arg)
        }
    }

    /// A dma-buf ioctl (`request`, argument at user address `arg`) on
    /// `buffer`, a PRIME fd. `ENOTTY` if `buffer` is no object of this
    /// device or `request` none of the three (the host kernel's answer
    /// on a memfd stands then). Refusals are logged.
    pub fn dma_buf_ioctl(
        &self,
        buffer: BorrowedFd<'_>,
        request: u64,
        arg: u64,
    ) -> Result<i32, Errno> {
        self.dma_buf_ioctl_typed(buffer, request, arg)
            .map_err(|error| {
                if !matches!(error, DmaBufError::NotOurs { .. }) {
                    tracing::debug!(%error, request = format_args!("{request:#x}"), "dma-buf ioctl refused");
                }
                error.into()
            })
    }

    fn dma_buf_ioctl_typed(
        &self,
        buffer: BorrowedFd<'_>,
        request: u64,
        arg: u64,
    ) -> Result<i32, DmaBufError> {
        if !is_dma_buf_ioctl(request) {
            return Err(DmaBufError::NotOurs { request });
        }
        let object = self
            .exports
            .find_object(buffer)
            .ok()
            .flatten()
            .ok_or(DmaBufError::NotOurs { request })?;
        let reservation = object.reservation();
        let fault = |_| DmaBufError::Fault { address: arg };
        match request as u32 {
            DMA_BUF_IOCTL_SYNC => {
                let mut sync = DmaBufSync::new_zeroed();
                copy_from_user(sync.as_mut_bytes(), arg).map_err(fault)?;
                let known = DMA_BUF_SYNC_RW | DMA_BUF_SYNC_END;
                if sync.flags & !known != 0 {
                    return Err(DmaBufError::UnknownFlags {
                        flags: sync.flags,
                        known,
                    });
                }
                if sync.flags & DMA_BUF_SYNC_RW == 0 {
                    return Err(DmaBufError::NoAccess { flags: sync.flags });
                }
                if sync.flags & DMA_BUF_SYNC_END == 0 {
                    // The start of a CPU access waits for the GPU's
                    // (`dma_resv_wait_timeout`, interruptible, no timeout).
                    let fences = reservation.fences_for(sync.flags & DMA_BUF_SYNC_WRITE != 0);
                    self.wait_all(&fences)?;
                }
                Ok(0)
            }
            DMA_BUF_IOCTL_EXPORT_SYNC_FILE => {
                let mut file = sync_file_argument(arg)?;
                let flags = u64::from(file.flags);
                // Linux installs the descriptor only once the answer is
                // copied out: a caller that cannot take it gets none.
                copy_to_user(arg, file.as_bytes()).map_err(fault)?;
                let fences = reservation.fences_for(flags & DMA_BUF_SYNC_WRITE != 0);
                // No fence: the stub, signalled.
                let fence = match fences.as_slice() {
                    [] => Fence::signalled(Arc::clone(&self.events)),
                    [one] => Arc::clone(one),
                    _ => Fence::all_of_fences(fences, Arc::clone(&self.events)),
                };
                let sync_file = self.exports.export_sync_file(fence, &self.events)?;
                file.fd = install_user_fd(sync_file)
                    .map_err(|InstallError::NoDescriptor| DmaBufError::NoDescriptor)?;
                copy_to_user(arg, file.as_bytes()).map_err(fault)?;
                Ok(0)
            }
            DMA_BUF_IOCTL_IMPORT_SYNC_FILE => {
                let file = sync_file_argument(arg)?;
                let flags = u64::from(file.flags);
                let not_a_sync_file = DmaBufError::NotASyncFile { fd: file.fd };
                let sync_file = dup_user_fd(file.fd).ok_or(not_a_sync_file.clone())?;
                if !self.exports.is_sync_file(sync_file.as_fd()) {
                    return Err(not_a_sync_file);
                }
                let fence = self
                    .exports
                    .import_sync_file(sync_file, &self.events)?
                    .ok_or(not_a_sync_file)?;
                let usage = if flags & DMA_BUF_SYNC_WRITE != 0 {
                    Usage::Write
                } else {
                    Usage::Read
                };
                reservation.add(fence, usage);
                Ok(0)
            }
            _ => Err(DmaBufError::NotOurs { request }),
        }
    }

    /// Waits until every one of `fences` has signalled (a signal whose
    /// handler does not restart system calls interrupts it).
    fn wait_all(&self, fences: &[Arc<Fence>]) -> Result<(), DmaBufError> {
        loop {
            let since = self.events.current();
            if fences.iter().all(|fence| fence.status().is_some()) {
                return Ok(());
            }
            self.events
                .sleep(since, i64::MAX)
                .map_err(|_| DmaBufError::Interrupted)?;
        }
    }
}

/// The export or import argument at user address `arg`, its flags
/// checked.
fn sync_file_argument(arg: u64) -> Result<DmaBufSyncFile, DmaBufError> {
    let mut file = DmaBufSyncFile::new_zeroed();
    copy_from_user(file.as_mut_bytes(), arg).map_err(|_| DmaBufError::Fault { address: arg })?;
    check_access(u64::from(file.flags))?;
    Ok(file)
}

/// The export and import flags: read and/or write, nothing else
/// (`EINVAL` otherwise, as `dma_buf_export_sync_file` checks).
fn check_access(flags: u64) -> Result<(), DmaBufError> {
    if flags & !DMA_BUF_SYNC_RW != 0 {
        return Err(DmaBufError::UnknownFlags {
            flags,
            known: DMA_BUF_SYNC_RW,
        });
    }
    if flags & DMA_BUF_SYNC_RW == 0 {
        return Err(DmaBufError::NoAccess { flags });
    }
    Ok(())
}
