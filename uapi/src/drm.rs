//! The DRM core ioctls the stack uses (`include/uapi/drm/drm.h`).
//!
//! Every DRM device answers these, whatever its driver: `VERSION` (which
//! driver is this?), `GET_CAP`, `GEM_CLOSE`, PRIME export/import of buffer
//! objects as dma-buf file descriptors, and the syncobj family (binary and
//! timeline synchronisation objects that GPU submissions wait on and
//! signal). Layouts and numbers are Linux's; a test compiles a C program
//! against the system `drm.h` and compares.
//!
//! Two structs grew over time: Linux 6.5 appended `deadline_nsec` to
//! `drm_syncobj_wait` and `drm_syncobj_timeline_wait`. These definitions
//! carry the current layout; DRM core accepts the shorter old one too (it
//! copies `min(user size, kernel size)` bytes and zero-fills the rest), and
//! so does our kmd.

use bitflags::bitflags;
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use crate::assert_layout;
use crate::ioctl::{drm_io, drm_ior, drm_iow, drm_iowr};

/// `DRM_CAP_DUMB_BUFFER`.
pub const DRM_CAP_DUMB_BUFFER: u64 = 0x1;
/// `DRM_CAP_VBLANK_HIGH_CRTC`.
pub const DRM_CAP_VBLANK_HIGH_CRTC: u64 = 0x2;
/// `DRM_CAP_DUMB_PREFERRED_DEPTH`.
pub const DRM_CAP_DUMB_PREFERRED_DEPTH: u64 = 0x3;
/// `DRM_CAP_DUMB_PREFER_SHADOW`.
pub const DRM_CAP_DUMB_PREFER_SHADOW: u64 = 0x4;
/// `DRM_CAP_PRIME`: a bitmask of [`DRM_PRIME_CAP_IMPORT`] and
/// [`DRM_PRIME_CAP_EXPORT`].
pub const DRM_CAP_PRIME: u64 = 0x5;
/// `DRM_CAP_TIMESTAMP_MONOTONIC`.
pub const DRM_CAP_TIMESTAMP_MONOTONIC: u64 = 0x6;
/// `DRM_CAP_ASYNC_PAGE_FLIP`.
pub const DRM_CAP_ASYNC_PAGE_FLIP: u64 = 0x7;
/// `DRM_CAP_CURSOR_WIDTH`.
pub const DRM_CAP_CURSOR_WIDTH: u64 = 0x8;
/// `DRM_CAP_CURSOR_HEIGHT`.
pub const DRM_CAP_CURSOR_HEIGHT: u64 = 0x9;
/// `DRM_CAP_ADDFB2_MODIFIERS`.
pub const DRM_CAP_ADDFB2_MODIFIERS: u64 = 0x10;
/// `DRM_CAP_PAGE_FLIP_TARGET`.
pub const DRM_CAP_PAGE_FLIP_TARGET: u64 = 0x11;
/// `DRM_CAP_CRTC_IN_VBLANK_EVENT`.
pub const DRM_CAP_CRTC_IN_VBLANK_EVENT: u64 = 0x12;
/// `DRM_CAP_SYNCOBJ`: binary syncobjs are supported.
pub const DRM_CAP_SYNCOBJ: u64 = 0x13;
/// `DRM_CAP_SYNCOBJ_TIMELINE`: timeline syncobjs are supported.
pub const DRM_CAP_SYNCOBJ_TIMELINE: u64 = 0x14;

/// `DRM_PRIME_CAP_IMPORT`: `PRIME_FD_TO_HANDLE` works.
pub const DRM_PRIME_CAP_IMPORT: u64 = 0x1;
/// `DRM_PRIME_CAP_EXPORT`: `PRIME_HANDLE_TO_FD` works.
pub const DRM_PRIME_CAP_EXPORT: u64 = 0x2;

/// `DRM_RDWR` (`O_RDWR`): flag of [`PrimeHandle::flags`].
pub const DRM_RDWR: u32 = 0o2;
/// `DRM_CLOEXEC` (`O_CLOEXEC`): flag of [`PrimeHandle::flags`].
pub const DRM_CLOEXEC: u32 = 0o2_000_000;

bitflags! {
    /// Flags of [`PrimeHandle::flags`] for `PRIME_HANDLE_TO_FD`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct PrimeFlags: u32 {
        /// The dma-buf may be mapped writable.
        const RDWR = DRM_RDWR;
        /// The new file descriptor is close-on-exec.
        const CLOEXEC = DRM_CLOEXEC;
    }
}

bitflags! {
    /// Flags of [`SyncobjCreate::flags`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SyncobjCreateFlags: u32 {
        /// `DRM_SYNCOBJ_CREATE_SIGNALED`: create with a signalled fence.
        const SIGNALED = 1 << 0;
    }
}

bitflags! {
    /// Flags of [`SyncobjHandle::flags`] for `SYNCOBJ_HANDLE_TO_FD`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SyncobjHandleToFdFlags: u32 {
        /// `DRM_SYNCOBJ_HANDLE_TO_FD_FLAGS_EXPORT_SYNC_FILE`: export the
        /// current fence as a sync file instead of the syncobj itself.
        const EXPORT_SYNC_FILE = 1 << 0;
    }
}

bitflags! {
    /// Flags of [`SyncobjHandle::flags`] for `SYNCOBJ_FD_TO_HANDLE`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SyncobjFdToHandleFlags: u32 {
        /// `DRM_SYNCOBJ_FD_TO_HANDLE_FLAGS_IMPORT_SYNC_FILE`: import a sync
        /// file's fence into the existing syncobj `handle`.
        const IMPORT_SYNC_FILE = 1 << 0;
    }
}

bitflags! {
    /// Flags of `SYNCOBJ_WAIT` and `SYNCOBJ_TIMELINE_WAIT`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SyncobjWaitFlags: u32 {
        /// `DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL`: wait for all, not any.
        const WAIT_ALL = 1 << 0;
        /// `DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT`: wait for a fence to be
        /// attached instead of failing with `EINVAL` when there is none.
        const WAIT_FOR_SUBMIT = 1 << 1;
        /// `DRM_SYNCOBJ_WAIT_FLAGS_WAIT_AVAILABLE`: wait only until the
        /// point has a fence, not until it signals.
        const WAIT_AVAILABLE = 1 << 2;
        /// `DRM_SYNCOBJ_WAIT_FLAGS_WAIT_DEADLINE` (Linux 6.5): the
        /// `deadline_nsec` field is valid.
        const WAIT_DEADLINE = 1 << 3;
    }
}

bitflags! {
    /// Flags of [`SyncobjTimelineArray::flags`] for `SYNCOBJ_QUERY`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SyncobjQueryFlags: u32 {
        /// `DRM_SYNCOBJ_QUERY_FLAGS_LAST_SUBMITTED`: return the last
        /// submitted point rather than the last signalled one.
        const LAST_SUBMITTED = 1 << 0;
    }
}

/// `drm_version`: argument of `VERSION`.
///
/// Userspace passes buffers and their lengths; the kernel writes as much of
/// each string as fits and returns the full lengths.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Version {
    /// Returned: driver major version.
    pub version_major: i32,
    /// Returned: driver minor version.
    pub version_minor: i32,
    /// Returned: driver patch level.
    pub version_patchlevel: i32,
    /// Padding the C compiler inserts before `name_len` (not a C field).
    pub pad0: u32,
    /// In: size of the `name` buffer; out: length of the driver name.
    pub name_len: u64,
    /// User pointer to the driver name buffer.
    pub name: u64,
    /// In: size of the `date` buffer; out: length of the date string.
    pub date_len: u64,
    /// User pointer to the date buffer.
    pub date: u64,
    /// In: size of the `desc` buffer; out: length of the description.
    pub desc_len: u64,
    /// User pointer to the description buffer.
    pub desc: u64,
}

/// `drm_get_cap`: argument of `GET_CAP`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct GetCap {
    /// One of the `DRM_CAP_*` constants.
    pub capability: u64,
    /// Returned: the capability's value.
    pub value: u64,
}

/// `drm_unique`: argument of `GET_UNIQUE` (and the removed `SET_UNIQUE`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Unique {
    /// In: size of the `unique` buffer; out: length of the bus id.
    pub unique_len: u64,
    /// User pointer to the bus id buffer.
    pub unique: u64,
}

/// `drm_auth`: argument of `GET_MAGIC` and `AUTH_MAGIC`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Auth {
    /// The authentication token.
    pub magic: u32,
}

/// `drm_client`: argument of `GET_CLIENT`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Client {
    /// Which client (only 0, the caller, since Linux 4.x).
    pub idx: i32,
    /// Returned: whether the file is authenticated.
    pub auth: i32,
    /// Returned: the calling thread's id.
    pub pid: u64,
    /// Returned: the overflow uid (65534).
    pub uid: u64,
    /// Returned: 0.
    pub magic: u64,
    /// Returned: 0.
    pub iocs: u64,
}

/// `drm_stats`: argument of `GET_STATS` (Linux returns it zeroed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct Stats {
    /// Returned: how many counters follow (0).
    pub count: u64,
    /// The counters: (value, type, padding) triples.
    pub data: [u64; 30],
}

/// `drm_set_version`: argument of `SET_VERSION`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SetVersion {
    /// In: the interface major version wanted (-1: none); out: 1.
    pub drm_di_major: i32,
    /// In: the interface minor version wanted; out: 4.
    pub drm_di_minor: i32,
    /// In: the driver major version wanted (-1: none); out: the driver's.
    pub drm_dd_major: i32,
    /// In: the driver minor version wanted; out: the driver's.
    pub drm_dd_minor: i32,
}

/// `drm_gem_flink`: argument of `GEM_FLINK`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct GemFlink {
    /// The handle to name.
    pub handle: u32,
    /// Returned: the object's device-global name.
    pub name: u32,
}

/// `drm_gem_open`: argument of `GEM_OPEN`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct GemOpen {
    /// The name to open.
    pub name: u32,
    /// Returned: a new handle to the object.
    pub handle: u32,
    /// Returned: the object's size.
    pub size: u64,
}

/// `drm_set_client_cap`: argument of `SET_CLIENT_CAP`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SetClientCap {
    /// One of the `DRM_CLIENT_CAP_*` constants.
    pub capability: u64,
    /// The value to set.
    pub value: u64,
}

/// `drm_gem_close`: argument of `GEM_CLOSE`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct GemClose {
    /// The GEM handle to close.
    pub handle: u32,
    /// MBZ.
    pub pad: u32,
}

/// `drm_prime_handle`: argument of `PRIME_HANDLE_TO_FD` and
/// `PRIME_FD_TO_HANDLE`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct PrimeHandle {
    /// GEM handle (in for export, out for import).
    pub handle: u32,
    /// [`PrimeFlags`] for export; MBZ for import.
    pub flags: u32,
    /// dma-buf file descriptor (out for export, in for import).
    pub fd: i32,
}

/// `drm_syncobj_create`: argument of `SYNCOBJ_CREATE`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SyncobjCreate {
    /// Returned: the syncobj handle.
    pub handle: u32,
    /// [`SyncobjCreateFlags`].
    pub flags: u32,
}

/// `drm_syncobj_destroy`: argument of `SYNCOBJ_DESTROY`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SyncobjDestroy {
    /// The syncobj handle.
    pub handle: u32,
    /// MBZ.
    pub pad: u32,
}

/// `drm_syncobj_handle`: argument of `SYNCOBJ_HANDLE_TO_FD` and
/// `SYNCOBJ_FD_TO_HANDLE`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SyncobjHandle {
    /// Syncobj handle.
    pub handle: u32,
    /// [`SyncobjHandleToFdFlags`] or [`SyncobjFdToHandleFlags`].
    pub flags: u32,
    /// File descriptor.
    pub fd: i32,
    /// MBZ.
    pub pad: u32,
}

/// `drm_syncobj_wait`: argument of `SYNCOBJ_WAIT`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SyncobjWait {
    /// User pointer to `count_handles` u32 handles.
    pub handles: u64,
    /// Absolute `CLOCK_MONOTONIC` timeout in nanoseconds.
    pub timeout_nsec: i64,
    /// Number of handles.
    pub count_handles: u32,
    /// [`SyncobjWaitFlags`].
    pub flags: u32,
    /// Returned: index of the first signalled handle.
    pub first_signaled: u32,
    /// MBZ.
    pub pad: u32,
    /// Absolute `CLOCK_MONOTONIC` deadline hint in nanoseconds, valid with
    /// `WAIT_DEADLINE` (Linux 6.5; absent from older headers).
    pub deadline_nsec: u64,
}

/// `drm_syncobj_timeline_wait`: argument of `SYNCOBJ_TIMELINE_WAIT`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SyncobjTimelineWait {
    /// User pointer to `count_handles` u32 handles.
    pub handles: u64,
    /// User pointer to `count_handles` u64 timeline points.
    pub points: u64,
    /// Absolute `CLOCK_MONOTONIC` timeout in nanoseconds.
    pub timeout_nsec: i64,
    /// Number of handles.
    pub count_handles: u32,
    /// [`SyncobjWaitFlags`].
    pub flags: u32,
    /// Returned: index of the first signalled handle.
    pub first_signaled: u32,
    /// MBZ.
    pub pad: u32,
    /// Absolute `CLOCK_MONOTONIC` deadline hint in nanoseconds, valid with
    /// `WAIT_DEADLINE` (Linux 6.5; absent from older headers).
    pub deadline_nsec: u64,
}

/// `drm_syncobj_array`: argument of `SYNCOBJ_RESET` and `SYNCOBJ_SIGNAL`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SyncobjArray {
    /// User pointer to `count_handles` u32 handles.
    pub handles: u64,
    /// Number of handles.
    pub count_handles: u32,
    /// MBZ.
    pub pad: u32,
}

/// `drm_syncobj_timeline_array`: argument of `SYNCOBJ_QUERY` and
/// `SYNCOBJ_TIMELINE_SIGNAL`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SyncobjTimelineArray {
    /// User pointer to `count_handles` u32 handles.
    pub handles: u64,
    /// User pointer to `count_handles` u64 points (written by `QUERY`).
    pub points: u64,
    /// Number of handles.
    pub count_handles: u32,
    /// [`SyncobjQueryFlags`] for `QUERY`; MBZ for `TIMELINE_SIGNAL`.
    pub flags: u32,
}

/// `drm_syncobj_transfer`: argument of `SYNCOBJ_TRANSFER`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SyncobjTransfer {
    /// Source syncobj.
    pub src_handle: u32,
    /// Destination syncobj.
    pub dst_handle: u32,
    /// Source timeline point (0 for a binary source).
    pub src_point: u64,
    /// Destination timeline point (0 for a binary destination).
    pub dst_point: u64,
    /// [`SyncobjWaitFlags`] (`WAIT_FOR_SUBMIT` is the one that applies).
    pub flags: u32,
    /// MBZ.
    pub pad: u32,
}

/// `drm_syncobj_eventfd` (Linux 6.6): argument of `SYNCOBJ_EVENTFD`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SyncobjEventfd {
    /// The syncobj.
    pub handle: u32,
    /// `DRM_SYNCOBJ_WAIT_FLAGS_WAIT_AVAILABLE` or 0.
    pub flags: u32,
    /// The timeline point (0: the syncobj's fence).
    pub point: u64,
    /// The eventfd to add 1 to.
    pub fd: i32,
    /// MBZ.
    pub pad: u32,
}

/// `sync_file_info` (`linux/sync_file.h`): argument of
/// [`SYNC_IOC_FILE_INFO`], an ioctl on a sync file (as exported by
/// `SYNCOBJ_HANDLE_TO_FD` with `EXPORT_SYNC_FILE`), not on the DRM file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct SyncFileInfo {
    /// Returned: the sync file's name.
    pub name: [u8; 32],
    /// Returned: 1 signalled, 0 active, a negative errno if a fence
    /// signalled with an error.
    pub status: i32,
    /// MBZ.
    pub flags: u32,
    /// In: capacity of the array at `sync_fence_info` (0: only count);
    /// returned: the number of fences.
    pub num_fences: u32,
    /// MBZ.
    pub pad: u32,
    /// User pointer to `num_fences` `sync_fence_info` records, or 0.
    pub sync_fence_info: u64,
}

impl Default for SyncFileInfo {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

/// `SYNC_IOC_FILE_INFO`: `_IOWR('>', 4, struct sync_file_info)`.
pub const SYNC_IOC_FILE_INFO: u32 = crate::ioctl::iowr::<SyncFileInfo>(b'>', 4);

/// `dma_buf_sync` (`linux/dma-buf.h`): argument of [`DMA_BUF_IOCTL_SYNC`],
/// an ioctl on a dma-buf (a PRIME fd) bracketing CPU access.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct DmaBufSync {
    /// [`DMA_BUF_SYNC_READ`] and/or [`DMA_BUF_SYNC_WRITE`], with
    /// [`DMA_BUF_SYNC_END`] at the end of the access.
    pub flags: u64,
}

/// `dma_buf_export_sync_file` and `dma_buf_import_sync_file`
/// (`linux/dma-buf.h`, the same two fields): arguments of
/// [`DMA_BUF_IOCTL_EXPORT_SYNC_FILE`] and [`DMA_BUF_IOCTL_IMPORT_SYNC_FILE`].
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct DmaBufSyncFile {
    /// [`DMA_BUF_SYNC_READ`] and/or [`DMA_BUF_SYNC_WRITE`]: the access
    /// the caller is about to make (export) or the one the fence ends
    /// (import).
    pub flags: u32,
    /// Export: returned, the sync file; import: the sync file.
    pub fd: i32,
}

/// `DMA_BUF_SYNC_READ`.
pub const DMA_BUF_SYNC_READ: u64 = 1;
/// `DMA_BUF_SYNC_WRITE`.
pub const DMA_BUF_SYNC_WRITE: u64 = 2;
/// `DMA_BUF_SYNC_RW`.
pub const DMA_BUF_SYNC_RW: u64 = DMA_BUF_SYNC_READ | DMA_BUF_SYNC_WRITE;
/// `DMA_BUF_SYNC_END` (0, `DMA_BUF_SYNC_START`, begins an access).
pub const DMA_BUF_SYNC_END: u64 = 1 << 2;
/// `DMA_BUF_IOCTL_SYNC`: `_IOW('b', 0, struct dma_buf_sync)`.
pub const DMA_BUF_IOCTL_SYNC: u32 = crate::ioctl::iow::<DmaBufSync>(b'b', 0);
/// `DMA_BUF_IOCTL_EXPORT_SYNC_FILE`: `_IOWR('b', 2, struct
/// dma_buf_export_sync_file)`.
pub const DMA_BUF_IOCTL_EXPORT_SYNC_FILE: u32 = crate::ioctl::iowr::<DmaBufSyncFile>(b'b', 2);
/// `DMA_BUF_IOCTL_IMPORT_SYNC_FILE`: `_IOW('b', 3, struct
/// dma_buf_import_sync_file)`.
pub const DMA_BUF_IOCTL_IMPORT_SYNC_FILE: u32 = crate::ioctl::iow::<DmaBufSyncFile>(b'b', 3);

/// DRM core ioctl numbers (the `nr` field of the request).
pub mod nr {
    /// `DRM_IOCTL_VERSION`.
    pub const VERSION: u32 = 0x00;
    /// `DRM_IOCTL_GET_UNIQUE`.
    pub const GET_UNIQUE: u32 = 0x01;
    /// `DRM_IOCTL_GET_MAGIC`.
    pub const GET_MAGIC: u32 = 0x02;
    /// `DRM_IOCTL_GET_CLIENT`.
    pub const GET_CLIENT: u32 = 0x05;
    /// `DRM_IOCTL_GET_STATS`.
    pub const GET_STATS: u32 = 0x06;
    /// `DRM_IOCTL_SET_VERSION`.
    pub const SET_VERSION: u32 = 0x07;
    /// `DRM_IOCTL_GEM_CLOSE`.
    pub const GEM_CLOSE: u32 = 0x09;
    /// `DRM_IOCTL_GEM_FLINK`.
    pub const GEM_FLINK: u32 = 0x0a;
    /// `DRM_IOCTL_GEM_OPEN`.
    pub const GEM_OPEN: u32 = 0x0b;
    /// `DRM_IOCTL_SET_CLIENT_CAP`.
    pub const SET_CLIENT_CAP: u32 = 0x0d;
    /// `DRM_IOCTL_SET_UNIQUE` (removed: always refused).
    pub const SET_UNIQUE: u32 = 0x10;
    /// `DRM_IOCTL_AUTH_MAGIC`.
    pub const AUTH_MAGIC: u32 = 0x11;
    /// `DRM_IOCTL_SET_MASTER`.
    pub const SET_MASTER: u32 = 0x1e;
    /// `DRM_IOCTL_DROP_MASTER`.
    pub const DROP_MASTER: u32 = 0x1f;
    /// `DRM_IOCTL_GET_CAP`.
    pub const GET_CAP: u32 = 0x0c;
    /// `DRM_IOCTL_PRIME_HANDLE_TO_FD`.
    pub const PRIME_HANDLE_TO_FD: u32 = 0x2d;
    /// `DRM_IOCTL_PRIME_FD_TO_HANDLE`.
    pub const PRIME_FD_TO_HANDLE: u32 = 0x2e;
    /// `DRM_IOCTL_SYNCOBJ_CREATE`.
    pub const SYNCOBJ_CREATE: u32 = 0xbf;
    /// `DRM_IOCTL_SYNCOBJ_DESTROY`.
    pub const SYNCOBJ_DESTROY: u32 = 0xc0;
    /// `DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD`.
    pub const SYNCOBJ_HANDLE_TO_FD: u32 = 0xc1;
    /// `DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE`.
    pub const SYNCOBJ_FD_TO_HANDLE: u32 = 0xc2;
    /// `DRM_IOCTL_SYNCOBJ_WAIT`.
    pub const SYNCOBJ_WAIT: u32 = 0xc3;
    /// `DRM_IOCTL_SYNCOBJ_RESET`.
    pub const SYNCOBJ_RESET: u32 = 0xc4;
    /// `DRM_IOCTL_SYNCOBJ_SIGNAL`.
    pub const SYNCOBJ_SIGNAL: u32 = 0xc5;
    /// `DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT`.
    pub const SYNCOBJ_TIMELINE_WAIT: u32 = 0xca;
    /// `DRM_IOCTL_SYNCOBJ_QUERY`.
    pub const SYNCOBJ_QUERY: u32 = 0xcb;
    /// `DRM_IOCTL_SYNCOBJ_TRANSFER`.
    pub const SYNCOBJ_TRANSFER: u32 = 0xcc;
    /// `DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL`.
    pub const SYNCOBJ_TIMELINE_SIGNAL: u32 = 0xcd;
    /// `DRM_IOCTL_SYNCOBJ_EVENTFD` (Linux 6.6).
    pub const SYNCOBJ_EVENTFD: u32 = 0xcf;
}

/// Query the driver name, date and description.
pub const DRM_IOCTL_VERSION: u32 = drm_iowr::<Version>(nr::VERSION);
/// Read the bus id the master set (empty until `SET_VERSION` 1.1+).
pub const DRM_IOCTL_GET_UNIQUE: u32 = drm_iowr::<Unique>(nr::GET_UNIQUE);
/// Get (allocate once) the file's authentication token.
pub const DRM_IOCTL_GET_MAGIC: u32 = drm_ior::<Auth>(nr::GET_MAGIC);
/// Describe the calling client.
pub const DRM_IOCTL_GET_CLIENT: u32 = drm_iowr::<Client>(nr::GET_CLIENT);
/// Read the (empty) legacy statistics.
pub const DRM_IOCTL_GET_STATS: u32 = drm_ior::<Stats>(nr::GET_STATS);
/// Negotiate the interface version (and set the bus id).
pub const DRM_IOCTL_SET_VERSION: u32 = drm_iowr::<SetVersion>(nr::SET_VERSION);
/// Name a GEM object device-wide.
pub const DRM_IOCTL_GEM_FLINK: u32 = drm_iowr::<GemFlink>(nr::GEM_FLINK);
/// Open a GEM object by its name.
pub const DRM_IOCTL_GEM_OPEN: u32 = drm_iowr::<GemOpen>(nr::GEM_OPEN);
/// Set a client capability (mode setting only).
pub const DRM_IOCTL_SET_CLIENT_CAP: u32 = drm_iow::<SetClientCap>(nr::SET_CLIENT_CAP);
/// Set the bus id (removed; refused).
pub const DRM_IOCTL_SET_UNIQUE: u32 = drm_iow::<Unique>(nr::SET_UNIQUE);
/// Authenticate another file by its token (master only).
pub const DRM_IOCTL_AUTH_MAGIC: u32 = drm_iow::<Auth>(nr::AUTH_MAGIC);
/// Become DRM master.
pub const DRM_IOCTL_SET_MASTER: u32 = drm_io(nr::SET_MASTER);
/// Stop being DRM master.
pub const DRM_IOCTL_DROP_MASTER: u32 = drm_io(nr::DROP_MASTER);
/// Close a GEM handle.
pub const DRM_IOCTL_GEM_CLOSE: u32 = drm_iow::<GemClose>(nr::GEM_CLOSE);
/// Query a capability.
pub const DRM_IOCTL_GET_CAP: u32 = drm_iowr::<GetCap>(nr::GET_CAP);
/// Export a GEM object as a dma-buf file descriptor.
pub const DRM_IOCTL_PRIME_HANDLE_TO_FD: u32 = drm_iowr::<PrimeHandle>(nr::PRIME_HANDLE_TO_FD);
/// Import a dma-buf file descriptor as a GEM handle.
pub const DRM_IOCTL_PRIME_FD_TO_HANDLE: u32 = drm_iowr::<PrimeHandle>(nr::PRIME_FD_TO_HANDLE);
/// Create a syncobj.
pub const DRM_IOCTL_SYNCOBJ_CREATE: u32 = drm_iowr::<SyncobjCreate>(nr::SYNCOBJ_CREATE);
/// Destroy a syncobj.
pub const DRM_IOCTL_SYNCOBJ_DESTROY: u32 = drm_iowr::<SyncobjDestroy>(nr::SYNCOBJ_DESTROY);
/// Export a syncobj (or its fence as a sync file) as a file descriptor.
pub const DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD: u32 = drm_iowr::<SyncobjHandle>(nr::SYNCOBJ_HANDLE_TO_FD);
/// Import a syncobj (or a sync file's fence) from a file descriptor.
pub const DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE: u32 = drm_iowr::<SyncobjHandle>(nr::SYNCOBJ_FD_TO_HANDLE);
/// Wait for binary syncobjs.
pub const DRM_IOCTL_SYNCOBJ_WAIT: u32 = drm_iowr::<SyncobjWait>(nr::SYNCOBJ_WAIT);
/// Remove the fences of syncobjs.
pub const DRM_IOCTL_SYNCOBJ_RESET: u32 = drm_iowr::<SyncobjArray>(nr::SYNCOBJ_RESET);
/// Signal syncobjs from the CPU.
pub const DRM_IOCTL_SYNCOBJ_SIGNAL: u32 = drm_iowr::<SyncobjArray>(nr::SYNCOBJ_SIGNAL);
/// Wait for points on timeline syncobjs.
pub const DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT: u32 =
    drm_iowr::<SyncobjTimelineWait>(nr::SYNCOBJ_TIMELINE_WAIT);
/// Query the signalled (or last submitted) point of timeline syncobjs.
pub const DRM_IOCTL_SYNCOBJ_QUERY: u32 = drm_iowr::<SyncobjTimelineArray>(nr::SYNCOBJ_QUERY);
/// Move a fence between syncobjs or timeline points.
pub const DRM_IOCTL_SYNCOBJ_TRANSFER: u32 = drm_iowr::<SyncobjTransfer>(nr::SYNCOBJ_TRANSFER);
/// Signal points on timeline syncobjs from the CPU.
pub const DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL: u32 =
    drm_iowr::<SyncobjTimelineArray>(nr::SYNCOBJ_TIMELINE_SIGNAL);
/// Have an eventfd signalled when a syncobj point is ready. (Not in
/// [`IOCTLS`]: the C headers the layout test compiles against may predate
/// it; its number is checked below.)
pub const DRM_IOCTL_SYNCOBJ_EVENTFD: u32 = drm_iowr::<SyncobjEventfd>(nr::SYNCOBJ_EVENTFD);

/// Every DRM core ioctl defined here: (C macro name, request number).
pub const IOCTLS: &[(&str, u32)] = &[
    ("DRM_IOCTL_VERSION", DRM_IOCTL_VERSION),
    ("DRM_IOCTL_GET_UNIQUE", DRM_IOCTL_GET_UNIQUE),
    ("DRM_IOCTL_GET_MAGIC", DRM_IOCTL_GET_MAGIC),
    ("DRM_IOCTL_GET_CLIENT", DRM_IOCTL_GET_CLIENT),
    ("DRM_IOCTL_GET_STATS", DRM_IOCTL_GET_STATS),
    ("DRM_IOCTL_SET_VERSION", DRM_IOCTL_SET_VERSION),
    ("DRM_IOCTL_GEM_CLOSE", DRM_IOCTL_GEM_CLOSE),
    ("DRM_IOCTL_GEM_FLINK", DRM_IOCTL_GEM_FLINK),
    ("DRM_IOCTL_GEM_OPEN", DRM_IOCTL_GEM_OPEN),
    ("DRM_IOCTL_GET_CAP", DRM_IOCTL_GET_CAP),
    ("DRM_IOCTL_SET_CLIENT_CAP", DRM_IOCTL_SET_CLIENT_CAP),
    ("DRM_IOCTL_SET_UNIQUE", DRM_IOCTL_SET_UNIQUE),
    ("DRM_IOCTL_AUTH_MAGIC", DRM_IOCTL_AUTH_MAGIC),
    ("DRM_IOCTL_SET_MASTER", DRM_IOCTL_SET_MASTER),
    ("DRM_IOCTL_DROP_MASTER", DRM_IOCTL_DROP_MASTER),
    ("DRM_IOCTL_PRIME_HANDLE_TO_FD", DRM_IOCTL_PRIME_HANDLE_TO_FD),
    ("DRM_IOCTL_PRIME_FD_TO_HANDLE", DRM_IOCTL_PRIME_FD_TO_HANDLE),
    ("DRM_IOCTL_SYNCOBJ_CREATE", DRM_IOCTL_SYNCOBJ_CREATE),
    ("DRM_IOCTL_SYNCOBJ_DESTROY", DRM_IOCTL_SYNCOBJ_DESTROY),
    (
        "DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD",
        DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD,
    ),
    (
        "DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE",
        DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE,
    ),
    ("DRM_IOCTL_SYNCOBJ_WAIT", DRM_IOCTL_SYNCOBJ_WAIT),
    ("DRM_IOCTL_SYNCOBJ_RESET", DRM_IOCTL_SYNCOBJ_RESET),
    ("DRM_IOCTL_SYNCOBJ_SIGNAL", DRM_IOCTL_SYNCOBJ_SIGNAL),
    (
        "DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT",
        DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT,
    ),
    ("DRM_IOCTL_SYNCOBJ_QUERY", DRM_IOCTL_SYNCOBJ_QUERY),
    ("DRM_IOCTL_SYNCOBJ_TRANSFER", DRM_IOCTL_SYNCOBJ_TRANSFER),
    (
        "DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL",
        DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL,
    ),
];

assert_layout!(Version, size = 64, align = 8, {
    version_major @ 0, 4;
    version_minor @ 4, 4;
    version_patchlevel @ 8, 4;
    name_len @ 16, 8;
    name @ 24, 8;
    date_len @ 32, 8;
    date @ 40, 8;
    desc_len @ 48, 8;
    desc @ 56, 8;
});
assert_layout!(GetCap, size = 16, align = 8, { capability @ 0, 8; value @ 8, 8; });
assert_layout!(SyncFileInfo, size = 56, align = 8, {
    name @ 0, 32; status @ 32, 4; flags @ 36, 4; num_fences @ 40, 4; pad @ 44, 4;
    sync_fence_info @ 48, 8;
});
assert_layout!(DmaBufSync, size = 8, align = 8, { flags @ 0, 8; });
assert_layout!(DmaBufSyncFile, size = 8, align = 4, { flags @ 0, 4; fd @ 4, 4; });
assert_layout!(GemClose, size = 8, align = 4, { handle @ 0, 4; pad @ 4, 4; });
assert_layout!(Unique, size = 16, align = 8, { unique_len @ 0, 8; unique @ 8, 8; });
assert_layout!(Auth, size = 4, align = 4, { magic @ 0, 4; });
assert_layout!(Client, size = 40, align = 8, {
    idx @ 0, 4; auth @ 4, 4; pid @ 8, 8; uid @ 16, 8; magic @ 24, 8; iocs @ 32, 8;
});
assert_layout!(Stats, size = 248, align = 8, { count @ 0, 8; data @ 8, 240; });
assert_layout!(SetVersion, size = 16, align = 4, {
    drm_di_major @ 0, 4; drm_di_minor @ 4, 4; drm_dd_major @ 8, 4; drm_dd_minor @ 12, 4;
});
assert_layout!(GemFlink, size = 8, align = 4, { handle @ 0, 4; name @ 4, 4; });
assert_layout!(GemOpen, size = 16, align = 8, { name @ 0, 4; handle @ 4, 4; size @ 8, 8; });
assert_layout!(SetClientCap, size = 16, align = 8, { capability @ 0, 8; value @ 8, 8; });
assert_layout!(PrimeHandle, size = 12, align = 4, { handle @ 0, 4; flags @ 4, 4; fd @ 8, 4; });
assert_layout!(SyncobjCreate, size = 8, align = 4, { handle @ 0, 4; flags @ 4, 4; });
assert_layout!(SyncobjDestroy, size = 8, align = 4, { handle @ 0, 4; pad @ 4, 4; });
assert_layout!(SyncobjHandle, size = 16, align = 4, {
    handle @ 0, 4;
    flags @ 4, 4;
    fd @ 8, 4;
    pad @ 12, 4;
});
assert_layout!(SyncobjWait, size = 40, align = 8, {
    handles @ 0, 8;
    timeout_nsec @ 8, 8;
    count_handles @ 16, 4;
    flags @ 20, 4;
    first_signaled @ 24, 4;
    pad @ 28, 4;
    deadline_nsec @ 32, 8;
});
assert_layout!(SyncobjTimelineWait, size = 48, align = 8, {
    handles @ 0, 8;
    points @ 8, 8;
    timeout_nsec @ 16, 8;
    count_handles @ 24, 4;
    flags @ 28, 4;
    first_signaled @ 32, 4;
    pad @ 36, 4;
    deadline_nsec @ 40, 8;
});
assert_layout!(SyncobjArray, size = 16, align = 8, {
    handles @ 0, 8;
    count_handles @ 8, 4;
    pad @ 12, 4;
});
assert_layout!(SyncobjTimelineArray, size = 24, align = 8, {
    handles @ 0, 8;
    points @ 8, 8;
    count_handles @ 16, 4;
    flags @ 20, 4;
});
assert_layout!(SyncobjEventfd, size = 24, align = 8, {
    handle @ 0, 4;
    flags @ 4, 4;
    point @ 8, 8;
    fd @ 16, 4;
    pad @ 20, 4;
});
assert_layout!(SyncobjTransfer, size = 32, align = 8, {
    src_handle @ 0, 4;
    dst_handle @ 4, 4;
    src_point @ 8, 8;
    dst_point @ 16, 8;
    flags @ 24, 4;
    pad @ 28, 4;
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_request_numbers() {
        // Values every DRM client has hard-coded at some point.
        assert_eq!(DRM_IOCTL_VERSION, 0xC040_6400);
        assert_eq!(DRM_IOCTL_GET_CAP, 0xC010_640C);
        assert_eq!(DRM_IOCTL_GEM_CLOSE, 0x4008_6409);
        assert_eq!(DRM_IOCTL_SYNCOBJ_CREATE, 0xC008_64BF);
        assert_eq!(DRM_IOCTL_PRIME_HANDLE_TO_FD, 0xC00C_642D);
        assert_eq!(DRM_IOCTL_SYNCOBJ_EVENTFD, 0xC018_64CF);
    }

    #[test]
    fn prime_flags_are_open_flags() {
        assert_eq!(DRM_CLOEXEC, 0x80000);
        assert_eq!(DRM_RDWR, 2);
    }
}
