//! Sharing objects through file descriptors: PRIME buffers, syncobj fds
//! and sync files.
//!
//! A PRIME fd is the object's own memfd (duplicated), so any process can
//! `mmap` it at offset 0 and see exactly the object's pages; importing it
//! in this device finds the object by the memfd's inode, and importing a
//! buffer exported by another simulated device adopts its pages. A syncobj
//! fd is a small memfd carrying a magic word and a token the device maps
//! back to the syncobj (weakly). A sync file is described in
//! [`crate::sync_file`]; the device finds its own by the file's inode.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::gem::GemObject;
use crate::sync::{Fence, SyncEvents, Syncobj};
use agx_uapi::Errno;

const SYNCOBJ_MAGIC: [u8; 8] = *b"AGXSOBJ\0";
/// Layout of a syncobj fd's memfd: magic, token.
const RECORD_BYTES: usize = 8 + 16;

use crate::mem::backing::Inode;
use crate::sync_file::{self, Exported, FenceStatus};

pub use crate::sync_file::inode_of;

/// The device's registry of exported things.
#[derive(Debug)]
pub struct Exports {
    device_token: u64,
    next_token: AtomicU64,
    objects: Mutex<HashMap<Inode, Weak<GemObject>>>,
    /// Exported syncobjs by token, with the identity of the memfd the
    /// token was written into (a token copied into another file is not
    /// the syncobj's: tokens can be read, and guessed).
    syncobjs: Mutex<HashMap<u128, (Weak<Syncobj>, Inode)>>,
    /// Exported sync files by the identity of the file (the sync thread
    /// holds them until every copy is closed).
    sync_files: Mutex<HashMap<Inode, Weak<Exported>>>,
}

impl Default for Exports {
    fn default() -> Exports {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(std::process::id().into());
        Exports {
            device_token: hasher.finish(),
            next_token: AtomicU64::new(1),
            objects: Mutex::default(),
            syncobjs: Mutex::default(),
            sync_files: Mutex::default(),
        }
    }
}

fn io_errno(error: std::io::Error) -> Errno {
    Errno(error.raw_os_error().unwrap_or(libc::EIO))
}

fn token_memfd(name: &str, magic: [u8; 8], token: u128) -> Result<OwnedFd, Errno> {
    let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| Errno(e.raw_os_error()))?;
    let mut record = [0u8; RECORD_BYTES];
    record[..8].copy_from_slice(&magic);
    record[8..24].copy_from_slice(&token.to_le_bytes());
    rustix::io::pwrite(&fd, &record, 0).map_err(|e| Errno(e.raw_os_error()))?;
    Ok(fd)
}

fn read_record(fd: BorrowedFd<'_>) -> Option<([u8; 8], u128)> {
    let mut record = [0u8; RECORD_BYTES];
    let n = rustix::io::pread(fd, &mut record, 0).ok()?;
    if n != RECORD_BYTES {
        return None;
    }
    let magic = record[..8].try_into().ok()?;
    let token = u128::from_le_bytes(record[8..24].try_into().ok()?);
    Some((magic, token))
}

impl Exports {
    fn token(&self) -> u128 {
        u128::from(self.device_token) << 64
            | u128::from(self.next_token.fetch_add(1, Ordering::Relaxed))
    }

    /// Registers a GEM object so its PRIME fds can be imported back.
    pub(crate) fn register_object(&self, object: &Arc<GemObject>) -> Result<(), Errno> {
        let inode = object.memory().memfd_identity().ok_or(Errno::EINVAL)?;
        let mut objects = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        objects.retain(|_, weak| weak.strong_count() > 0);
        objects.insert(inode, Arc::downgrade(object));
        Ok(())
    }

    /// A PRIME fd for `object`.
    pub(crate) fn export_object(
        &self,
        object: &Arc<GemObject>,
        cloexec: bool,
    ) -> Result<OwnedFd, Errno> {
        self.register_object(object)?;
        object.memory().export_fd(cloexec).map_err(|error| {
            tracing::error!(
                object = object.id(),
                %error,
                "cannot export: the device's descriptor of the object is gone"
            );
            io_errno(error)
        })
    }

    /// The object of this device a PRIME fd refers to, if any.
    pub(crate) fn find_object(&self, fd: BorrowedFd<'_>) -> Result<Option<Arc<GemObject>>, Errno> {
        let inode = inode_of(fd)?;
        Ok(self
            .objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&inode)
            .and_then(Weak::upgrade))
    }

    /// A syncobj fd.
    pub(crate) fn export_syncobj(&self, syncobj: &Arc<Syncobj>) -> Result<OwnedFd, Errno> {
        let token = self.token();
        let fd = token_memfd("agx-syncobj", SYNCOBJ_MAGIC, token)?;
        let inode = inode_of(std::os::fd::AsFd::as_fd(&fd))?;
        let mut syncobjs = self.syncobjs.lock().unwrap_or_else(|e| e.into_inner());
        syncobjs.retain(|_, (weak, _)| weak.strong_count() > 0);
        syncobjs.insert(token, (Arc::downgrade(syncobj), inode));
        Ok(fd)
    }

    /// The syncobj a syncobj fd refers to.
    pub(crate) fn import_syncobj(&self, fd: BorrowedFd<'_>) -> Result<Arc<Syncobj>, Errno> {
        let (magic, token) = read_record(fd).ok_or(Errno::EINVAL)?;
        if magic != SYNCOBJ_MAGIC {
            return Err(Errno::EINVAL);
        }
        let inode = inode_of(fd)?;
        let syncobjs = self.syncobjs.lock().unwrap_or_else(|e| e.into_inner());
        syncobjs
            .get(&token)
            .filter(|(_, exported)| *exported == inode)
            .and_then(|(weak, _)| weak.upgrade())
            .ok_or(Errno::EINVAL)
    }

    /// This device's sync file `fd` is, if it is one.
    fn own_sync_file(&self, fd: BorrowedFd<'_>) -> Option<Arc<Exported>> {
        let inode = inode_of(fd).ok()?;
        self.sync_files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&inode)
            .and_then(Weak::upgrade)
    }

    /// A sync file for `fence`, looked after by the sync thread of
    /// `events` (this device's).
    pub(crate) fn export_sync_file(
        &self,
        fence: Arc<Fence>,
        events: &SyncEvents,
    ) -> Result<OwnedFd, Errno> {
        let (sync_file, exported) = Exported::create(fence)?;
        sync_file::look_after_exported(events, &exported)?;
        let mut files = self.sync_files.lock().unwrap_or_else(|e| e.into_inner());
        files.retain(|_, weak| weak.strong_count() > 0);
        files.insert(exported.identity(), Arc::downgrade(&exported));
        Ok(sync_file)
    }

    /// Whether `fd` is a sync file (this device's, another simulated
    /// device's or the kernel's).
    pub(crate) fn is_sync_file(&self, fd: BorrowedFd<'_>) -> bool {
        self.own_sync_file(fd).is_some() || sync_file::Kind::of(fd).is_some()
    }

    /// The fence a sync file carries, for importing it into a syncobj:
    /// this device's own fence for its own sync files; for another
    /// device's (another simulated device's, or the kernel's), a fence
    /// that signals with its status, which the sync thread waits for.
    /// `None` if `fd` is not a sync file.
    pub(crate) fn import_sync_file(
        &self,
        fd: OwnedFd,
        events: &Arc<SyncEvents>,
    ) -> Result<Option<Arc<Fence>>, Errno> {
        if let Some(ours) = self.own_sync_file(fd.as_fd()) {
            return Ok(Some(Arc::clone(ours.fence())));
        }
        let Some(kind) = sync_file::Kind::of(fd.as_fd()) else {
            return Ok(None);
        };
        let fence = Fence::pending(Arc::clone(events));
        match kind.status(fd.as_fd()) {
            Some(status) => fence.signal(status),
            None => {
                tracing::debug!(?kind, "waiting for another device's sync file");
                sync_file::wait_for_foreign(events, fd, kind, &fence)?;
            }
        }
        Ok(Some(fence))
    }

    /// The status of a simulated sync file (this device's or another
    /// simulated device's): `None` while pending, else the fence's error
    /// if it had one. `ENOTTY` for any other file.
    pub fn sync_file_status(&self, fd: BorrowedFd<'_>) -> Result<FenceStatus, Errno> {
        if let Some(ours) = self.own_sync_file(fd) {
            return Ok(ours.fence().status());
        }
        if sync_file::is_simulated(fd) {
            return Ok(sync_file::simulated_status(fd));
        }
        Err(Errno::ENOTTY)
    }

    /// `SYNC_IOC_FILE_INFO` on a simulated sync file: its status, and its
    /// one fence's record if the caller asked for records. `flags` or
    /// `pad` set: `EINVAL`; an fd that is not a simulated sync file:
    /// `ENOTTY` (as Linux for a file without the ioctl); an unwritable
    /// record array: `EFAULT`.
    pub fn sync_file_info(
        &self,
        fd: BorrowedFd<'_>,
        info: &mut agx_uapi::drm::SyncFileInfo,
    ) -> Result<(), Errno> {
        let status = self.sync_file_status(fd)?;
        fill_sync_file_info(status, info)
    }

    /// The `SYNC_IOC_FILE_INFO` ioctl on `fd` with its argument at user
    /// address `arg`: [`Exports::sync_file_info`] between the copies in
    /// and out (`EFAULT` for an unreadable or unwritable argument). A file
    /// that is not a simulated sync file is `ENOTTY` before the argument
    /// is touched, as Linux answers for a file without the ioctl.
    pub fn sync_file_ioctl(&self, fd: BorrowedFd<'_>, arg: u64) -> Result<i32, Errno> {
        use zerocopy::{FromZeros, IntoBytes};
        let status = self.sync_file_status(fd)?;
        let mut info = agx_uapi::drm::SyncFileInfo::new_zeroed();
        crate::uaccess::copy_from_user(info.as_mut_bytes(), arg).map_err(|_| Errno::EFAULT)?;
        fill_sync_file_info(status, &mut info)?;
        crate::uaccess::copy_to_user(arg, info.as_bytes()).map_err(|_| Errno::EFAULT)?;
        Ok(0)
    }

    /// The sync files this device exported that are still open somewhere
    /// (for leak checks: the device forgets a sync file once every copy
    /// of it is closed).
    pub fn live_sync_files(&self) -> usize {
        let mut files = self.sync_files.lock().unwrap_or_else(|e| e.into_inner());
        files.retain(|_, weak| weak.strong_count() > 0);
        files
            .values()
            .filter_map(Weak::upgrade)
            .filter(|file| !file.closed())
            .count()
    }
}

/// Fills `info` (`SYNC_IOC_FILE_INFO`'s argument) for a sync file whose
/// fence has `status`: `flags` or `pad` set: `EINVAL`; its one fence's
/// record if the caller asked for records, copied to the pointer given,
/// null or not (`EFAULT`), as Linux does.
fn fill_sync_file_info(
    status: FenceStatus,
    info: &mut agx_uapi::drm::SyncFileInfo,
) -> Result<(), Errno> {
    if info.flags != 0 || info.pad != 0 {
        return Err(Errno::EINVAL);
    }
    let status = match status {
        None => 0,
        Some(None) => 1,
        Some(Some(errno)) => -errno.0,
    };
    info.name = [0; 32];
    info.name[..9].copy_from_slice(b"agx-fence");
    info.status = status;
    if info.num_fences > 0 {
        // struct sync_fence_info: obj_name[32], driver_name[32],
        // status, flags, timestamp_ns.
        let mut record = [0u8; 80];
        record[..9].copy_from_slice(b"agx-queue");
        record[32..37].copy_from_slice(b"asahi");
        record[64..68].copy_from_slice(&status.to_le_bytes());
        crate::uaccess::copy_to_user(info.sync_fence_info, &record).map_err(|_| Errno::EFAULT)?;
    }
    info.num_fences = 1;
    Ok(())
}

/// Why a PRIME ioctl failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrimeError {
    /// Flags outside `DRM_CLOEXEC | DRM_RDWR`.
    #[error("unknown flags {flags:#x}")]
    UnknownFlags {
        /// The flags given.
        flags: u32,
    },
    /// No object has this handle in the file.
    #[error("no object with handle {handle}")]
    NoSuchHandle {
        /// The handle.
        handle: u32,
    },
    /// VM-private objects are never exported.
    #[error("object {handle} is private to a VM and cannot be exported")]
    PrivateObject {
        /// The handle.
        handle: u32,
    },
    /// The descriptor is not open.
    #[error("fd {fd} is not an open descriptor")]
    BadFd {
        /// The descriptor.
        fd: i32,
    },
    /// The descriptor is open but not a buffer this device can import.
    #[error("fd {fd} is not a dma-buf of a simulated AGX device")]
    NotABuffer {
        /// The descriptor.
        fd: i32,
    },
    /// Importing needed memory there was none of.
    #[error("out of memory importing fd {fd}")]
    OutOfMemory {
        /// The descriptor.
        fd: i32,
    },
}
