//! A DRM file: one open of a DRM node (the render node or the card
//! node), and its ioctls.
//!
//! A file owns handles to GEM objects, VMs, syncobjs, bound objects and
//! queues; closing it (dropping the [`File`]) releases all of them. The
//! [`File::ioctl`] entry point follows the DRM core's contract exactly: the
//! request number selects the handler, the size encoded in it bounds the
//! copy in and out (shorter structs from older userspace are zero-extended,
//! longer ones truncated), the copy directions are those both the caller's
//! and the kernel's definitions allow, and the argument is copied back even
//! when the handler fails.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use agx_hw::addr::PhysAddr;
use agx_uapi::asahi::{
    self, BindObjectFlags, BindObjectOp, GemBindObject, GemBindOp, GemCreate, GemFlags,
    GemMmapOffset, GetParams, GetTime, ParamsGlobal, QueueCreate, QueueDestroy, Submit, Sync,
    SyncType, Timestamp, VmBind, VmCreate, VmDestroy,
};
use agx_uapi::drm::{
    self, GemClose, GetCap, PrimeFlags, PrimeHandle, SyncobjArray, SyncobjCreate,
    SyncobjCreateFlags, SyncobjDestroy, SyncobjEventfd, SyncobjFdToHandleFlags, SyncobjHandle,
    SyncobjHandleToFdFlags, SyncobjQueryFlags, SyncobjTimelineArray, SyncobjTimelineWait,
    SyncobjTransfer, SyncobjWait, SyncobjWaitFlags, Version,
};
use agx_uapi::ioctl::{ioc_dir, ioc_size_bytes, DRM_COMMAND_BASE, IOC_READ, IOC_WRITE};
use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::auth::{AuthError, Caller, FileAuth, IoctlFlags, LazyCaller};
use crate::device::Device;
use crate::device::GEM_MEMFD_NAME;
use crate::errno::{Errno, IoctlError};
use crate::export::PrimeError;
use crate::gem::{BindObjectError, GemError, GemObject, MmapError, VmKey};
use crate::mem::backing::DeviceFd;
use crate::params::{self, ParamsError};
use crate::queue::{self, Queue, QueueError};
use crate::submit::{Command, SubmitArgError};
use crate::sync::{self, Fence, Syncobj, SyncobjError, WaitError, WaitSpec};
use crate::uaccess::{copy_from_user, copy_to_user, dup_user_fd, install_user_fd};
use crate::vm::{lock_vm, BindError, BindOp, Vm, VmError};

/// Driver name VERSION reports (clients check it).
pub const DRIVER_NAME: &str = "asahi";
/// The uid GET_CLIENT reports (Linux's `overflowuid`: the real one is not
/// disclosed).
const OVERFLOW_UID: u64 = 65534;

/// Driver version VERSION reports (major, minor, patch level).
pub const DRIVER_VERSION: (i32, i32, i32) = (1, 0, 0);
/// Driver date VERSION reports.
pub const DRIVER_DATE: &str = "20250101";
/// Driver description VERSION reports.
pub const DRIVER_DESC: &str = "Apple AGX GPU (simulated by agx-stack)";

#[derive(Debug, Default)]
struct FileState {
    handles: BTreeMap<u32, Arc<GemObject>>,
    next_handle: u32,
    vms: BTreeMap<u32, Arc<Mutex<Vm>>>,
    next_vm: u32,
    syncobjs: BTreeMap<u32, Arc<Syncobj>>,
    next_syncobj: u32,
    bound: BTreeMap<u32, BoundObject>,
    next_bound: u32,
    queues: BTreeMap<u32, Arc<Queue>>,
    next_queue: u32,
}

pub use crate::auth::NodeKind;

/// A size as the DRM core's fdinfo prints it: divided by 1024 while it is
/// a non-zero multiple of it, at most twice (bytes, KiB or MiB).
fn fdinfo_size(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes}")
    }
}

/// An open DRM file.
#[derive(Debug)]
pub struct File {
    device: Arc<Device>,
    id: u64,
    node: NodeKind,
    /// Master and authentication state.
    auth: Arc<Mutex<FileAuth>>,
    /// The GPU time its queues' work took.
    usage: Arc<crate::stats::EngineUsage>,
    state: Mutex<FileState>,
    /// The GEM memory the file created, against its limit.
    memory: Arc<crate::gem::FileMemory>,
}

type Handler = fn(&File, &mut [u8], &LazyCaller) -> Result<i32, IoctlError>;

/// One ioctl: its name, the kernel's request (direction and size), its
/// permission flags and the handler.
struct IoctlDef {
    name: &'static str,
    request: u32,
    flags: IoctlFlags,
    handler: Handler,
}

fn with<T: FromBytes + IntoBytes + Immutable>(
    data: &mut [u8],
    f: impl FnOnce(&mut T) -> Result<i32, IoctlError>,
) -> Result<i32, IoctlError> {
    // `data` is at least the kernel's size of the struct.
    let mut value = T::read_from_prefix(data)
        .map(|(v, _)| v)
        .map_err(|_| Errno::EINVAL)?;
    let result = f(&mut value);
    data[..size_of::<T>()].copy_from_slice(value.as_bytes());
    result
}

/// A render-allowed ioctl that needs authentication on the card node.
const fn def_auth(name: &'static str, request: u32, handler: Handler) -> Option<IoctlDef> {
    def_flags(
        name,
        request,
        IoctlFlags::AUTH.union(IoctlFlags::RENDER_ALLOW),
        handler,
    )
}

/// A render-allowed ioctl (GET_PARAMS, and the core ones a render client
/// uses).
const fn def(name: &'static str, request: u32, handler: Handler) -> Option<IoctlDef> {
    def_flags(name, request, IoctlFlags::RENDER_ALLOW, handler)
}

const fn def_flags(
    name: &'static str,
    request: u32,
    flags: IoctlFlags,
    handler: Handler,
) -> Option<IoctlDef> {
    Some(IoctlDef {
        name,
        request,
        flags,
        handler,
    })
}

/// The DRM core ioctls this device implements, by number.
fn core_ioctl(nr: u32) -> Option<IoctlDef> {
    match nr {
        drm::nr::VERSION => def("VERSION", drm::DRM_IOCTL_VERSION, |f, d, _| {
            with(d, |v| f.version(v))
        }),
        drm::nr::GEM_CLOSE => def("GEM_CLOSE", drm::DRM_IOCTL_GEM_CLOSE, |f, d, _| {
            with(d, |v| f.gem_close(v))
        }),
        drm::nr::GET_CAP => def("GET_CAP", drm::DRM_IOCTL_GET_CAP, |f, d, _| {
            with(d, |v| f.get_cap(v))
        }),
        drm::nr::PRIME_HANDLE_TO_FD => def(
            "PRIME_HANDLE_TO_FD",
            drm::DRM_IOCTL_PRIME_HANDLE_TO_FD,
            |f, d, _| with(d, |v| f.prime_handle_to_fd(v)),
        ),
        drm::nr::PRIME_FD_TO_HANDLE => def(
            "PRIME_FD_TO_HANDLE",
            drm::DRM_IOCTL_PRIME_FD_TO_HANDLE,
            |f, d, _| with(d, |v| f.prime_fd_to_handle(v)),
        ),
        drm::nr::SYNCOBJ_HANDLE_TO_FD => def(
            "SYNCOBJ_HANDLE_TO_FD",
            drm::DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD,
            |f, d, _| with(d, |v| f.syncobj_handle_to_fd(v)),
        ),
        drm::nr::SYNCOBJ_FD_TO_HANDLE => def(
            "SYNCOBJ_FD_TO_HANDLE",
            drm::DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE,
            |f, d, _| with(d, |v| f.syncobj_fd_to_handle(v)),
        ),
        drm::nr::SYNCOBJ_CREATE => def(
            "SYNCOBJ_CREATE",
            drm::DRM_IOCTL_SYNCOBJ_CREATE,
            |f, d, _| with(d, |v| f.syncobj_create(v)),
        ),
        drm::nr::SYNCOBJ_DESTROY => def(
            "SYNCOBJ_DESTROY",
            drm::DRM_IOCTL_SYNCOBJ_DESTROY,
            |f, d, _| with(d, |v| f.syncobj_destroy(v)),
        ),
        drm::nr::SYNCOBJ_WAIT => def("SYNCOBJ_WAIT", drm::DRM_IOCTL_SYNCOBJ_WAIT, |f, d, _| {
            with(d, |v| f.syncobj_wait(v))
        }),
        drm::nr::SYNCOBJ_TIMELINE_WAIT => def(
            "SYNCOBJ_TIMELINE_WAIT",
            drm::DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT,
            |f, d, _| with(d, |v| f.syncobj_timeline_wait(v)),
        ),
        drm::nr::SYNCOBJ_RESET => def("SYNCOBJ_RESET", drm::DRM_IOCTL_SYNCOBJ_RESET, |f, d, _| {
            with(d, |v| f.syncobj_reset(v, false))
        }),
        drm::nr::SYNCOBJ_SIGNAL => def(
            "SYNCOBJ_SIGNAL",
            drm::DRM_IOCTL_SYNCOBJ_SIGNAL,
            |f, d, _| with(d, |v| f.syncobj_reset(v, true)),
        ),
        drm::nr::SYNCOBJ_QUERY => def("SYNCOBJ_QUERY", drm::DRM_IOCTL_SYNCOBJ_QUERY, |f, d, _| {
            with(d, |v| f.syncobj_query(v))
        }),
        drm::nr::SYNCOBJ_TIMELINE_SIGNAL => def(
            "SYNCOBJ_TIMELINE_SIGNAL",
            drm::DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL,
            |f, d, _| with(d, |v| f.syncobj_timeline_signal(v)),
        ),
        drm::nr::SYNCOBJ_TRANSFER => def(
            "SYNCOBJ_TRANSFER",
            drm::DRM_IOCTL_SYNCOBJ_TRANSFER,
            |f, d, _| with(d, |v| f.syncobj_transfer(v)),
        ),
        drm::nr::SYNCOBJ_EVENTFD => def(
            "SYNCOBJ_EVENTFD",
            drm::DRM_IOCTL_SYNCOBJ_EVENTFD,
            |f, d, _| with(d, |v| f.syncobj_eventfd(v)),
        ),
        nr => primary_ioctl(nr),
    }
}

/// The DRM core ioctls that are not render-allowed: the primary node's
/// (master, authentication, flink names, the legacy queries) and the ones
/// a driver without mode setting refuses, with their permission flags as
/// in Linux's `drm_ioctls[]`.
fn primary_ioctl(nr: u32) -> Option<IoctlDef> {
    use agx_uapi::ioctl::ioc;
    const RW: u32 = IOC_READ | IOC_WRITE;
    const NONE: IoctlFlags = IoctlFlags::empty();
    const ROOT_MASTER: IoctlFlags = IoctlFlags::AUTH
        .union(IoctlFlags::MASTER)
        .union(IoctlFlags::ROOT_ONLY);
    match nr {
        drm::nr::GET_UNIQUE => {
            def_flags("GET_UNIQUE", drm::DRM_IOCTL_GET_UNIQUE, NONE, |f, d, _| {
                with(d, |v| f.get_unique(v))
            })
        }
        drm::nr::GET_MAGIC => def_flags("GET_MAGIC", drm::DRM_IOCTL_GET_MAGIC, NONE, |f, d, _| {
            with(d, |v| f.get_magic(v))
        }),
        drm::nr::GET_CLIENT => {
            def_flags("GET_CLIENT", drm::DRM_IOCTL_GET_CLIENT, NONE, |f, d, c| {
                with(d, |v| f.get_client(v, c.get()))
            })
        }
        drm::nr::GET_STATS => def_flags("GET_STATS", drm::DRM_IOCTL_GET_STATS, NONE, |_, d, _| {
            // Linux keeps no legacy statistics: all zero.
            d.fill(0);
            Ok(0)
        }),
        drm::nr::SET_VERSION => def_flags(
            "SET_VERSION",
            drm::DRM_IOCTL_SET_VERSION,
            IoctlFlags::MASTER,
            |f, d, _| with(d, |v| f.set_version(v)),
        ),
        drm::nr::GEM_FLINK => def_flags(
            "GEM_FLINK",
            drm::DRM_IOCTL_GEM_FLINK,
            IoctlFlags::AUTH,
            |f, d, _| with(d, |v| f.gem_flink(v)),
        ),
        drm::nr::GEM_OPEN => def_flags(
            "GEM_OPEN",
            drm::DRM_IOCTL_GEM_OPEN,
            IoctlFlags::AUTH,
            |f, d, _| with(d, |v| f.gem_open(v)),
        ),
        drm::nr::SET_CLIENT_CAP => def_flags(
            "SET_CLIENT_CAP",
            drm::DRM_IOCTL_SET_CLIENT_CAP,
            NONE,
            // Every client capability is a mode-setting one.
            |_, _, _| Err(AuthError::NoModesetting.into()),
        ),
        drm::nr::SET_UNIQUE => def_flags(
            "SET_UNIQUE",
            drm::DRM_IOCTL_SET_UNIQUE,
            ROOT_MASTER,
            |_, _, _| Err(AuthError::Removed.into()),
        ),
        drm::nr::AUTH_MAGIC => def_flags(
            "AUTH_MAGIC",
            drm::DRM_IOCTL_AUTH_MAGIC,
            IoctlFlags::MASTER,
            |f, d, _| {
                with(d, |v: &mut drm::Auth| {
                    f.device.masters.auth_magic(&f.auth, v.magic)?;
                    Ok(0)
                })
            },
        ),
        drm::nr::SET_MASTER => {
            def_flags("SET_MASTER", drm::DRM_IOCTL_SET_MASTER, NONE, |f, _, c| {
                f.device.masters.set_master(&f.auth, c.get())?;
                Ok(0)
            })
        }
        drm::nr::DROP_MASTER => def_flags(
            "DROP_MASTER",
            drm::DRM_IOCTL_DROP_MASTER,
            NONE,
            |f, _, c| {
                f.device.masters.drop_master(&f.auth, c.get())?;
                Ok(0)
            },
        ),
        // The legacy lock and drawable ioctls: no-ops for a root master.
        0x12 => def_flags("BLOCK", ioc(RW, b'd', 0x12, 4), ROOT_MASTER, |_, _, _| {
            Ok(0)
        }),
        0x13 => def_flags("UNBLOCK", ioc(RW, b'd', 0x13, 4), ROOT_MASTER, |_, _, _| {
            Ok(0)
        }),
        0x27 => def_flags(
            "ADD_DRAW",
            ioc(RW, b'd', 0x27, 4),
            ROOT_MASTER,
            |_, _, _| Ok(0),
        ),
        0x28 => def_flags("RM_DRAW", ioc(RW, b'd', 0x28, 4), ROOT_MASTER, |_, _, _| {
            Ok(0)
        }),
        0x3f => def_flags(
            "UPDATE_DRAW",
            ioc(IOC_WRITE, b'd', 0x3f, 24),
            ROOT_MASTER,
            |_, _, _| Ok(0),
        ),
        0x2c => def_flags(
            "FINISH",
            ioc(IOC_WRITE, b'd', 0x2c, 8),
            IoctlFlags::AUTH,
            |_, _, _| Ok(0),
        ),
        0x3a => def_flags("WAIT_VBLANK", ioc(RW, b'd', 0x3a, 24), NONE, |_, _, _| {
            Err(AuthError::NoModesetting.into())
        }),
        0x3b => def_flags(
            "CRTC_GET_SEQUENCE",
            ioc(RW, b'd', 0x3b, 24),
            NONE,
            |_, _, _| Err(AuthError::NoModesetting.into()),
        ),
        0x3c => def_flags(
            "CRTC_QUEUE_SEQUENCE",
            ioc(RW, b'd', 0x3c, 24),
            NONE,
            |_, _, _| Err(AuthError::NoModesetting.into()),
        ),
        _ => None,
    }
}

/// A mode-setting ioctl (`0xA0..=0xD0` but for the syncobj ones): its
/// name, flags and what a driver without `DRIVER_MODESET` (nor dumb
/// buffers) answers, as the handlers in Linux 6.12 do. Their structs are
/// not modelled: the argument moves as the caller's request says.
fn mode_ioctl(nr: u32, request: u32) -> Option<IoctlDef> {
    let no_modesetting: Handler = |_, _, _| Err(AuthError::NoModesetting.into());
    let (name, flags, handler): (&'static str, IoctlFlags, Handler) = match nr {
        0xA0 => ("MODE_GETRESOURCES", IoctlFlags::empty(), no_modesetting),
        0xA1 => ("MODE_GETCRTC", IoctlFlags::empty(), no_modesetting),
        0xA2 => ("MODE_SETCRTC", IoctlFlags::MASTER, no_modesetting),
        0xA3 => ("MODE_CURSOR", IoctlFlags::MASTER, no_modesetting),
        0xA4 => ("MODE_GETGAMMA", IoctlFlags::empty(), no_modesetting),
        0xA5 => ("MODE_SETGAMMA", IoctlFlags::MASTER, no_modesetting),
        0xA6 => ("MODE_GETENCODER", IoctlFlags::empty(), no_modesetting),
        0xA7 => ("MODE_GETCONNECTOR", IoctlFlags::empty(), no_modesetting),
        // drm_noop for the master.
        0xA8 => ("MODE_ATTACHMODE", IoctlFlags::MASTER, |_, _, _| Ok(0)),
        0xA9 => ("MODE_DETACHMODE", IoctlFlags::MASTER, |_, _, _| Ok(0)),
        0xAA => ("MODE_GETPROPERTY", IoctlFlags::empty(), no_modesetting),
        0xAB => ("MODE_SETPROPERTY", IoctlFlags::MASTER, no_modesetting),
        0xAC => ("MODE_GETPROPBLOB", IoctlFlags::empty(), no_modesetting),
        0xAD => ("MODE_GETFB", IoctlFlags::empty(), no_modesetting),
        0xAE => ("MODE_ADDFB", IoctlFlags::empty(), no_modesetting),
        0xAF => ("MODE_RMFB", IoctlFlags::empty(), no_modesetting),
        0xB0 => ("MODE_PAGE_FLIP", IoctlFlags::MASTER, no_modesetting),
        0xB1 => ("MODE_DIRTYFB", IoctlFlags::MASTER, no_modesetting),
        0xB2 => ("MODE_CREATE_DUMB", IoctlFlags::empty(), |_, _, _| {
            Err(AuthError::NoDumbBuffers.into())
        }),
        0xB3 => ("MODE_MAP_DUMB", IoctlFlags::empty(), |_, _, _| {
            Err(AuthError::NoDumbBuffers.into())
        }),
        0xB4 => ("MODE_DESTROY_DUMB", IoctlFlags::empty(), |_, _, _| {
            Err(AuthError::NoDumbBuffers.into())
        }),
        0xB5 => (
            "MODE_GETPLANERESOURCES",
            IoctlFlags::empty(),
            no_modesetting,
        ),
        0xB6 => ("MODE_GETPLANE", IoctlFlags::empty(), no_modesetting),
        0xB7 => ("MODE_SETPLANE", IoctlFlags::MASTER, no_modesetting),
        0xB8 => ("MODE_ADDFB2", IoctlFlags::empty(), no_modesetting),
        0xB9 => (
            "MODE_OBJ_GETPROPERTIES",
            IoctlFlags::empty(),
            no_modesetting,
        ),
        0xBA => ("MODE_OBJ_SETPROPERTY", IoctlFlags::MASTER, no_modesetting),
        0xBB => ("MODE_CURSOR2", IoctlFlags::MASTER, no_modesetting),
        0xBC => ("MODE_ATOMIC", IoctlFlags::MASTER, no_modesetting),
        0xBD => ("MODE_CREATEPROPBLOB", IoctlFlags::empty(), no_modesetting),
        0xBE => ("MODE_DESTROYPROPBLOB", IoctlFlags::empty(), no_modesetting),
        0xC6 => ("MODE_CREATE_LEASE", IoctlFlags::MASTER, no_modesetting),
        0xC7 => ("MODE_LIST_LESSEES", IoctlFlags::MASTER, no_modesetting),
        0xC8 => ("MODE_GET_LEASE", IoctlFlags::MASTER, no_modesetting),
        0xC9 => ("MODE_REVOKE_LEASE", IoctlFlags::MASTER, no_modesetting),
        // drm_mode_getfb2_ioctl answers EINVAL without mode setting.
        0xCE => ("MODE_GETFB2", IoctlFlags::empty(), |_, _, _| {
            Err(AuthError::NoModesettingGetfb2.into())
        }),
        0xD0 => ("MODE_CLOSEFB", IoctlFlags::empty(), no_modesetting),
        _ => return None,
    };
    Some(IoctlDef {
        name,
        request,
        flags,
        handler,
    })
}

/// The asahi ioctls, by number relative to `DRM_COMMAND_BASE`: all
/// render-allowed, and all but GET_PARAMS `DRM_AUTH` (as the asahi driver
/// declares them), so an unauthenticated card-node file gets `EACCES`.
fn driver_ioctl(nr: u32) -> Option<IoctlDef> {
    match nr {
        asahi::nr::GET_PARAMS => def(
            "ASAHI_GET_PARAMS",
            asahi::DRM_IOCTL_ASAHI_GET_PARAMS,
            |f, d, _| with(d, |v| f.get_params(v)),
        ),
        asahi::nr::GET_TIME => def_auth(
            "ASAHI_GET_TIME",
            asahi::DRM_IOCTL_ASAHI_GET_TIME,
            |f, d, _| with(d, |v| f.get_time(v)),
        ),
        asahi::nr::VM_CREATE => def_auth(
            "ASAHI_VM_CREATE",
            asahi::DRM_IOCTL_ASAHI_VM_CREATE,
            |f, d, _| with(d, |v| f.vm_create(v)),
        ),
        asahi::nr::VM_DESTROY => def_auth(
            "ASAHI_VM_DESTROY",
            asahi::DRM_IOCTL_ASAHI_VM_DESTROY,
            |f, d, _| with(d, |v| f.vm_destroy(v)),
        ),
        asahi::nr::VM_BIND => def_auth(
            "ASAHI_VM_BIND",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            |f, d, _| with(d, |v| f.vm_bind(v)),
        ),
        asahi::nr::GEM_CREATE => def_auth(
            "ASAHI_GEM_CREATE",
            asahi::DRM_IOCTL_ASAHI_GEM_CREATE,
            |f, d, _| with(d, |v| f.gem_create(v)),
        ),
        asahi::nr::QUEUE_CREATE => def_auth(
            "ASAHI_QUEUE_CREATE",
            asahi::DRM_IOCTL_ASAHI_QUEUE_CREATE,
            |f, d, _| with(d, |v| f.queue_create(v)),
        ),
        asahi::nr::QUEUE_DESTROY => def_auth(
            "ASAHI_QUEUE_DESTROY",
            asahi::DRM_IOCTL_ASAHI_QUEUE_DESTROY,
            |f, d, _| with(d, |v| f.queue_destroy(v)),
        ),
        asahi::nr::GEM_BIND_OBJECT => def_auth(
            "ASAHI_GEM_BIND_OBJECT",
            asahi::DRM_IOCTL_ASAHI_GEM_BIND_OBJECT,
            |f, d, _| with(d, |v| f.gem_bind_object(v)),
        ),
        asahi::nr::GEM_MMAP_OFFSET => def_auth(
            "ASAHI_GEM_MMAP_OFFSET",
            asahi::DRM_IOCTL_ASAHI_GEM_MMAP_OFFSET,
            |f, d, _| with(d, |v| f.gem_mmap_offset(v)),
        ),
        asahi::nr::SUBMIT => def_auth("ASAHI_SUBMIT", asahi::DRM_IOCTL_ASAHI_SUBMIT, |f, d, _| {
            with(d, |v| f.submit(v))
        }),
        _ => None,
    }
}

impl File {
    /// Opens a DRM file on `device` (an open of its render node).
    pub fn open(device: &Arc<Device>) -> File {
        File::open_node(device, NodeKind::Render)
    }

    /// Opens a DRM file on `device` through its `node`, for this process.
    pub fn open_node(device: &Arc<Device>, node: NodeKind) -> File {
        File::open_node_as(device, node, Caller::current())
    }

    /// Opens a DRM file on `device` through its `node`, for `caller`.
    pub fn open_node_as(device: &Arc<Device>, node: NodeKind, caller: Caller) -> File {
        File::new(Arc::clone(device), node, caller)
    }

    pub(crate) fn new(device: Arc<Device>, node: NodeKind, caller: Caller) -> File {
        let auth = device.masters.open(node, caller);
        device.counters.files.fetch_add(1, Ordering::Relaxed);
        let id = device.next_file_id();
        let memory = Arc::new(crate::gem::FileMemory::new(
            device.client_account(caller.tgid),
        ));
        File {
            memory,
            device,
            id,
            node,
            auth,
            usage: Arc::default(),
            state: Mutex::new(FileState {
                next_handle: 1,
                next_vm: 1,
                next_syncobj: 1,
                next_bound: 1,
                next_queue: 1,
                ..FileState::default()
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, FileState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The node the file was opened through.
    pub fn node(&self) -> NodeKind {
        self.node
    }

    /// The file's client id (`drm-client-id` in its fdinfo): unique among
    /// the device's files for the device's lifetime.
    pub fn client_id(&self) -> u64 {
        self.id
    }

    /// What the file's `/proc/<pid>/fdinfo/<fd>` shows below the generic
    /// lines, in the DRM core's format (`drm-usage-stats`): the driver
    /// and client id `drm_show_fdinfo` prints, the GPU time of the file's
    /// work per engine, and the memory its handles name as
    /// `drm_print_memory_stats` counts it (an object with handles in more
    /// than one file is shared; no object is reported active, as objects
    /// carry no fences here).
    pub fn fdinfo(&self) -> String {
        let mut text = format!("drm-driver:\t{DRIVER_NAME}\ndrm-client-id:\t{}\n", self.id);
        for (engine, ns) in crate::stats::EngineUsage::ENGINES
            .iter()
            .zip(self.usage.busy_ns())
        {
            text.push_str(&format!("drm-engine-{engine}:\t{ns} ns\n"));
        }
        let (mut private_bytes, mut shared_bytes) = (0, 0);
        for object in self.state().handles.values() {
            if object.handle_count() > 1 {
                shared_bytes += object.size_bytes();
            } else {
                private_bytes += object.size_bytes();
            }
        }
        for (key, bytes) in [
            ("total", private_bytes + shared_bytes),
            ("shared", shared_bytes),
            ("active", 0),
        ] {
            text.push_str(&format!("drm-{key}-memory:\t{}\n", fdinfo_size(bytes)));
        }
        text
    }

    /// The device this file is open on.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// What this file's objects draw on: its process's account (the GEM
    /// memory and device descriptors the process's objects hold, and
    /// their limits) and the file's slabs.
    pub fn memory(&self) -> &crate::gem::FileMemory {
        &self.memory
    }

    /// The object with `handle`, if this file has one.
    pub fn object(&self, handle: u32) -> Option<Arc<GemObject>> {
        self.state().handles.get(&handle).cloned()
    }

    /// The root page table of VM `vm_id`, for walking it in tests and
    /// tools.
    pub fn vm_root_pa(&self, vm_id: u32) -> Option<PhysAddr> {
        self.state().vms.get(&vm_id).map(|vm| lock_vm(vm).root_pa())
    }

    /// The object a CPU mapping of the DRM file at `offset` (as returned by
    /// GEM_MMAP_OFFSET) of `len_bytes` bytes refers to, checked as Linux's
    /// `drm_gem_mmap` does: no object there or a range past its end is
    /// `EINVAL`, an object this file has no handle to is `EACCES`. The
    /// caller maps the object with `object.memory().map_for_cpu` at the
    /// returned offset within it.
    pub fn mmap_object(&self, offset: u64, len_bytes: u64) -> Result<(Arc<GemObject>, u64), Errno> {
        self.find_mapping(offset, len_bytes).map_err(|error| {
            let errno = Errno::from(error.clone());
            tracing::debug!(
                offset = format_args!("{offset:#x}"),
                len_bytes,
                file = self.id,
                errno = errno.name(),
                %error,
                "mmap refused"
            );
            errno
        })
    }

    /// A CPU mapping of the DRM file at `offset` of `len_bytes` bytes,
    /// checked as [`File::mmap_object`] does, as a descriptor for a
    /// process other than the device's: the object's own memfd (which
    /// maps exactly its pages), or for a small private object the memfd
    /// of its file's slab (which holds only that file's objects), and the
    /// offset within it to map. Needs a
    /// device that keeps every object's descriptor
    /// (`DeviceConfig::keep_object_descriptors`); `ENODEV` otherwise.
    pub fn mmap_descriptor(&self, offset: u64, len_bytes: u64) -> Result<(OwnedFd, u64), Errno> {
        let (object, within) = self.mmap_object(offset, len_bytes)?;
        let (fd, at) = object.memory().mapping_fd(true).map_err(|error| {
            tracing::warn!(
                offset = format_args!("{offset:#x}"),
                file = self.id,
                %error,
                "mmap: the object's memfd is not kept"
            );
            Errno::ENODEV
        })?;
        Ok((fd, at + within))
    }

    fn find_mapping(
        &self,
        offset: u64,
        len_bytes: u64,
    ) -> Result<(Arc<GemObject>, u64), MmapError> {
        let object = self
            .device
            .object_at_mmap_offset(offset)
            .ok_or(MmapError::NoObject { offset })?;
        let within = offset - object.mmap_offset();
        if within
            .checked_add(len_bytes)
            .is_none_or(|end| end > object.size_bytes())
            || len_bytes == 0
        {
            return Err(MmapError::OutsideObject {
                within_bytes: within,
                len_bytes,
                size_bytes: object.size_bytes(),
            });
        }
        if !self
            .state()
            .handles
            .values()
            .any(|o| Arc::ptr_eq(o, &object))
        {
            return Err(MmapError::NoHandle { offset });
        }
        Ok((object, within))
    }

    /// The user mappings of VM `vm_id`, in address order.
    pub fn vm_mappings(&self, vm_id: u32) -> Option<Vec<crate::vm::Mapping>> {
        self.state()
            .vms
            .get(&vm_id)
            .map(|vm| lock_vm(vm).mappings())
    }

    /// The ioctl entry point: `request` as passed to `ioctl(2)`, `arg` the
    /// user pointer to the argument struct. Returns the ioctl's
    /// non-negative result or the errno.
    pub fn ioctl(&self, request: u64, arg: u64) -> Result<i32, Errno> {
        self.ioctl_as(None, request, arg)
    }

    /// [`File::ioctl`] on behalf of `caller` (`None`: this process's
    /// current thread), whose identity the primary node's permission
    /// checks use.
    pub fn ioctl_as(&self, caller: Option<Caller>, request: u64, arg: u64) -> Result<i32, Errno> {
        let mut name = "?";
        self.dispatch(caller, request, arg, &mut name)
            .inspect(|result| {
                // drm.debug's per-ioctl line: which ioctl from which file.
                tracing::trace!(ioctl = name, file = self.id, result, "ioctl");
            })
            .map_err(|error| {
                // What drm/asahi and the DRM core print with drm_dbg: which
                // ioctl, from which file, and why.
                let errno = error.errno();
                tracing::debug!(
                    ioctl = name,
                    request = format_args!("{request:#x}"),
                    file = self.id,
                    errno = errno.name(),
                    %error,
                    "ioctl refused"
                );
                errno
            })
    }

    /// `drm_ioctl_permit`: whether the ioctl's flags let the caller through
    /// on this file.
    fn permit(&self, flags: IoctlFlags, caller: &LazyCaller) -> Result<(), IoctlError> {
        if self.node == NodeKind::Render {
            // A render file has no master: only the flag matters (every
            // other check a non-render-allowed ioctl fails also gives
            // EACCES), and neither the caller nor the device's master
            // lock is needed.
            if !flags.contains(IoctlFlags::RENDER_ALLOW) {
                return Err(AuthError::NotOnRenderNode.into());
            }
            return Ok(());
        }
        self.device
            .masters
            .permit(&self.auth, flags, caller.get())?;
        Ok(())
    }

    fn lock_auth(&self) -> MutexGuard<'_, FileAuth> {
        self.auth.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn dispatch(
        &self,
        caller: Option<Caller>,
        request: u64,
        arg: u64,
        name: &mut &'static str,
    ) -> Result<i32, IoctlError> {
        // ioctl(2) takes the request as an unsigned int: the upper bits
        // of a 64-bit value never reach the driver.
        let request = request as u32;
        if (request >> 8) & 0xFF != u32::from(agx_uapi::ioctl::DRM_IOCTL_BASE) {
            return Err(IoctlError::NotDrm {
                request: u64::from(request),
            });
        }
        let nr = request & 0xFF;
        let def = if (DRM_COMMAND_BASE..0xA0).contains(&nr) {
            // After a firmware crash the GPU is gone: every driver ioctl
            // fails (the core ones still work, so clients can see fences).
            if self.device.scheduler.crashed() {
                return Err(IoctlError::DeviceGone);
            }
            driver_ioctl(nr - DRM_COMMAND_BASE)
        } else {
            core_ioctl(nr).or_else(|| mode_ioctl(nr, request))
        }
        .ok_or(IoctlError::UnknownIoctl { nr })?;
        *name = def.name;
        let user_size = ioc_size_bytes(request);
        let both = ioc_dir(request) & ioc_dir(def.request);
        let in_size = if both & IOC_WRITE != 0 { user_size } else { 0 };
        let out_size = if both & IOC_READ != 0 { user_size } else { 0 };
        let kernel_size = ioc_size_bytes(def.request);
        let mut data = vec![0u8; kernel_size.max(in_size).max(out_size)];
        copy_from_user(&mut data[..in_size], arg)?;
        let caller = LazyCaller::new(caller);
        let result = self
            .permit(def.flags, &caller)
            .and_then(|()| (def.handler)(self, &mut data, &caller));
        copy_to_user(arg, &data[..out_size])?;
        result
    }

    // ---- DRM core ------------------------------------------------------

    fn version(&self, v: &mut Version) -> Result<i32, IoctlError> {
        (v.version_major, v.version_minor, v.version_patchlevel) = DRIVER_VERSION;
        for (len, ptr, text) in [
            (&mut v.name_len, v.name, DRIVER_NAME),
            (&mut v.date_len, v.date, DRIVER_DATE),
            (&mut v.desc_len, v.desc, DRIVER_DESC),
        ] {
            let copy = (*len as usize).min(text.len());
            *len = text.len() as u64;
            if copy > 0 && ptr != 0 {
                copy_to_user(ptr, &text.as_bytes()[..copy])?;
            }
        }
        Ok(0)
    }

    fn get_unique(&self, u: &mut drm::Unique) -> Result<i32, IoctlError> {
        let unique = self.lock_auth().unique();
        if u.unique_len >= unique.len() as u64 && !unique.is_empty() {
            copy_to_user(u.unique, unique.as_bytes())?;
        }
        u.unique_len = unique.len() as u64;
        Ok(0)
    }

    fn get_magic(&self, a: &mut drm::Auth) -> Result<i32, IoctlError> {
        a.magic = FileAuth::get_magic(&self.auth)?;
        Ok(0)
    }

    fn get_client(&self, c: &mut drm::Client, caller: Caller) -> Result<i32, IoctlError> {
        // Since Linux 4.x only the caller itself can be asked about.
        if c.idx != 0 {
            return Err(AuthError::NoSuchClient { idx: c.idx }.into());
        }
        c.auth = i32::from(self.lock_auth().authenticated());
        c.pid = u64::from(caller.tid);
        c.uid = OVERFLOW_UID;
        c.magic = 0;
        c.iocs = 0;
        Ok(0)
    }

    fn set_version(&self, v: &mut drm::SetVersion) -> Result<i32, IoctlError> {
        let result = self.lock_auth().set_version(
            (v.drm_di_major, v.drm_di_minor),
            (v.drm_dd_major, v.drm_dd_minor),
            (DRIVER_VERSION.0, DRIVER_VERSION.1),
            crate::device::PLATFORM_DEVICE_NAME,
        );
        // The versions in effect are written back whatever the outcome.
        (v.drm_di_major, v.drm_di_minor) = crate::auth::interface_version();
        (v.drm_dd_major, v.drm_dd_minor) = (DRIVER_VERSION.0, DRIVER_VERSION.1);
        result?;
        Ok(0)
    }

    fn gem_flink(&self, g: &mut drm::GemFlink) -> Result<i32, IoctlError> {
        let object = self
            .object(g.handle)
            .ok_or(GemError::NoSuchHandle { handle: g.handle })?;
        let mut names = self
            .device
            .flink_names
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(name) = object.flink_name() {
            g.name = name;
            return Ok(0);
        }
        // Its last handle closed meanwhile (by another thread): Linux
        // refuses a name then.
        if object.handle_count() == 0 {
            return Err(GemError::NoSuchHandle { handle: g.handle }.into());
        }
        // Names whose objects lost their last handle are free again.
        names.retain(|&name, entry| {
            entry
                .upgrade()
                .is_some_and(|o| o.flink_name() == Some(name))
        });
        let name = crate::auth::lowest_free_id(&names)
            .ok_or(IoctlError::IdsExhausted { kind: "flink name" })?;
        names.insert(name, Arc::downgrade(&object));
        object.set_flink_name(name);
        g.name = name;
        Ok(0)
    }

    fn gem_open(&self, o: &mut drm::GemOpen) -> Result<i32, IoctlError> {
        // Under the names lock until the new handle counts, so that a
        // concurrent last close cannot free the name in between.
        let names = self
            .device
            .flink_names
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let object = names
            .get(&o.name)
            .and_then(Weak::upgrade)
            .filter(|object| object.flink_name() == Some(o.name))
            .ok_or(GemError::NoSuchName { name: o.name })?;
        let mut state = self.state();
        let state = &mut *state;
        // A new handle every time, even to an object the file has one to.
        let handle = take_id(&state.handles, &mut state.next_handle, "GEM handle")?;
        object.handle_opened();
        drop(names);
        o.size = object.size_bytes();
        state.handles.insert(handle, object);
        o.handle = handle;
        Ok(0)
    }

    fn get_cap(&self, cap: &mut GetCap) -> Result<i32, IoctlError> {
        // Linux zeroes the value first; it is copied back on error too.
        cap.value = 0;
        cap.value = match cap.capability {
            drm::DRM_CAP_TIMESTAMP_MONOTONIC
            | drm::DRM_CAP_SYNCOBJ
            | drm::DRM_CAP_SYNCOBJ_TIMELINE => 1,
            drm::DRM_CAP_PRIME => drm::DRM_PRIME_CAP_IMPORT | drm::DRM_PRIME_CAP_EXPORT,
            // A render-only device: the KMS capabilities do not apply.
            capability => return Err(IoctlError::UnsupportedCap { capability }),
        };
        Ok(0)
    }

    fn gem_close(&self, close: &mut GemClose) -> Result<i32, IoctlError> {
        if close.pad != 0 {
            return Err(GemError::MustBeZero { field: "pad" }.into());
        }
        let removed = self.state().handles.remove(&close.handle);
        removed
            .map(|object| {
                object.handle_closed();
                0
            })
            .ok_or_else(|| {
                GemError::CloseUnknownHandle {
                    handle: close.handle,
                }
                .into()
            })
    }

    // ---- asahi ---------------------------------------------------------

    fn get_params(&self, p: &mut GetParams) -> Result<i32, IoctlError> {
        params::check_get_params(p.param_group, p.pad)?;
        let params = params::params_global();
        let len = (p.size as usize).min(size_of::<ParamsGlobal>());
        copy_to_user(p.pointer, &params.as_bytes()[..len]).map_err(ParamsError::from)?;
        Ok(0)
    }

    fn get_time(&self, t: &mut GetTime) -> Result<i32, IoctlError> {
        if t.flags != 0 {
            return Err(ParamsError::MustBeZero { field: "flags" }.into());
        }
        t.gpu_timestamp = params::gpu_timestamp();
        Ok(0)
    }

    fn vm_create(&self, c: &mut VmCreate) -> Result<i32, IoctlError> {
        if c.pad != 0 {
            return Err(VmError::MustBeZero { field: "pad" }.into());
        }
        Vm::check_kernel_range(c.kernel_start, c.kernel_end)?;
        let mut state = self.state();
        let id = {
            let state = &mut *state;
            take_id(&state.vms, &mut state.next_vm, "VM")?
        };
        let vm = Vm::new(
            id,
            c.kernel_start..c.kernel_end,
            Arc::clone(&self.device.pool),
            Arc::clone(&self.device.counters),
        )?;
        state.vms.insert(id, Arc::new(Mutex::new(vm)));
        c.vm_id = id;
        Ok(0)
    }

    fn vm_destroy(&self, d: &mut VmDestroy) -> Result<i32, IoctlError> {
        if d.pad != 0 {
            return Err(VmError::MustBeZero { field: "pad" }.into());
        }
        let removed = self.state().vms.remove(&d.vm_id);
        removed
            .map(|_| 0)
            .ok_or_else(|| VmError::NoSuchVm { vm_id: d.vm_id }.into())
    }

    fn vm_bind(&self, b: &mut VmBind) -> Result<i32, IoctlError> {
        if b.pad != 0 {
            return Err(BindError::MustBeZero { field: "pad" }.into());
        }
        if b.stride == 0 {
            return Err(BindError::ZeroStride.into());
        }
        // Read every operation first (copy_from_user), then validate them
        // all, then apply: a refused VM_BIND changes nothing.
        // The whole array in one copy, as Linux does: a size past
        // kmalloc's limit is ENOMEM, any unreadable byte EFAULT. Records
        // shorter than the struct are zero-extended; longer ones' tails
        // are read and ignored.
        let stride = b.stride as usize;
        let mut all = user_array(u64::from(b.num_binds), u64::from(b.stride))?;
        copy_from_user(&mut all, b.userptr).map_err(BindError::from)?;
        let mut raw_ops = Vec::with_capacity(b.num_binds as usize);
        for record in all.chunks_exact(stride) {
            let mut buf = [0u8; size_of::<GemBindOp>()];
            let read = stride.min(buf.len());
            buf[..read].copy_from_slice(&record[..read]);
            let op = GemBindOp::read_from_bytes(&buf).map_err(|_| Errno::EINVAL)?;
            raw_ops.push(op);
        }
        let mut state = self.state();
        let state = &mut *state;
        let vm = state
            .vms
            .get(&b.vm_id)
            .cloned()
            .ok_or(BindError::NoSuchVm { vm_id: b.vm_id })?;
        let mut vm = lock_vm(&vm);
        let mut ops = Vec::with_capacity(raw_ops.len());
        for (index, op) in raw_ops.iter().enumerate() {
            match vm.check_op(index, op)? {
                None => ops.push(BindOp::Unmap {
                    addr: op.addr,
                    range: op.range,
                }),
                Some((permissions, single_page)) => {
                    let object =
                        state
                            .handles
                            .get(&op.handle)
                            .cloned()
                            .ok_or(BindError::NoSuchHandle {
                                index,
                                handle: op.handle,
                            })?;
                    if object.private_vm().is_some_and(|key| {
                        key != VmKey {
                            file_id: self.id,
                            vm_id: b.vm_id,
                        }
                    }) {
                        return Err(BindError::PrivateToOtherVm {
                            index,
                            handle: op.handle,
                        }
                        .into());
                    }
                    let len = if single_page {
                        agx_hw::uat::PAGE_BYTES
                    } else {
                        op.range
                    };
                    if op
                        .offset
                        .checked_add(len)
                        .is_none_or(|end| end > object.size_bytes())
                    {
                        return Err(BindError::OutsideObject {
                            index,
                            offset: op.offset,
                            len,
                            size: object.size_bytes(),
                        }
                        .into());
                    }
                    ops.push(BindOp::Map {
                        addr: op.addr,
                        range: op.range,
                        offset: op.offset,
                        object,
                        permissions,
                        single_page,
                    });
                }
            }
        }
        vm.apply(ops)?;
        Ok(0)
    }

    fn gem_create(&self, c: &mut GemCreate) -> Result<i32, IoctlError> {
        if c.pad != 0 {
            return Err(GemError::MustBeZero { field: "pad" }.into());
        }
        let flags =
            GemFlags::from_bits(c.flags).ok_or(GemError::UnknownFlags { flags: c.flags })?;
        if c.size == 0 {
            return Err(GemError::ZeroSize.into());
        }
        let private_vm = if flags.contains(GemFlags::VM_PRIVATE) {
            if !self.state().vms.contains_key(&c.vm_id) {
                return Err(GemError::NoSuchVm { vm_id: c.vm_id }.into());
            }
            Some(VmKey {
                file_id: self.id,
                vm_id: c.vm_id,
            })
        } else {
            if c.vm_id != 0 {
                return Err(GemError::VmWithoutPrivate { vm_id: c.vm_id }.into());
            }
            None
        };
        let object = self
            .device
            .create_object(c.size, flags, private_vm, &self.memory)
            .inspect_err(|error| {
                if let GemError::OverClientLimit { .. } = error {
                    tracing::warn!(file = self.id, %error, "GEM_CREATE refused");
                }
            })?;
        let mut state = self.state();
        let state = &mut *state;
        let handle = take_id(&state.handles, &mut state.next_handle, "GEM handle")?;
        object.handle_opened();
        state.handles.insert(handle, object);
        c.handle = handle;
        Ok(0)
    }

    fn gem_mmap_offset(&self, m: &mut GemMmapOffset) -> Result<i32, IoctlError> {
        if m.flags != 0 {
            return Err(GemError::MustBeZero { field: "flags" }.into());
        }
        let object = self
            .object(m.handle)
            .ok_or(GemError::NoSuchHandle { handle: m.handle })?;
        m.offset = object.mmap_offset();
        Ok(0)
    }
}

/// The next free id of `map` from `next` on (ids are never 0: clients
/// such as the drm crate treat 0 as no handle). Ids count up and, after
/// 2^32 - 1 of them, wrap to reuse freed ones, as `idr_alloc_cyclic`;
/// ENOSPC when every id is taken.
fn take_id<V>(
    map: &BTreeMap<u32, V>,
    next: &mut u32,
    kind: &'static str,
) -> Result<u32, IoctlError> {
    for _ in 0..=map.len().saturating_add(1) {
        let id = *next;
        *next = next.checked_add(1).unwrap_or(1);
        if id != 0 && !map.contains_key(&id) {
            return Ok(id);
        }
    }
    Err(IoctlError::IdsExhausted { kind })
}

/// How long TRANSFER with WAIT_FOR_SUBMIT waits for a fence to appear
/// (Linux waits a bounded time too).
const TRANSFER_SUBMIT_WAIT_NS: i64 = 5_000_000_000;

/// The largest array an ioctl copies in at once: kmalloc's limit, past
/// which Linux's `kmalloc_array` fails with ENOMEM.
const MAX_USER_ARRAY_BYTES: u64 = 4 << 20;

/// A zeroed buffer for `count` elements of `size` bytes, or ENOMEM past
/// [`MAX_USER_ARRAY_BYTES`] (no allocation is made from an unchecked
/// user count).
fn user_array(count: u64, size: u64) -> Result<Vec<u8>, IoctlError> {
    let bytes = count
        .checked_mul(size)
        .filter(|&b| b <= MAX_USER_ARRAY_BYTES)
        .ok_or(IoctlError::ArrayTooLarge {
            count,
            element_bytes: size,
            max_bytes: MAX_USER_ARRAY_BYTES,
        })?;
    Ok(vec![0u8; bytes as usize])
}

fn read_u32s(address: u64, count: u32) -> Result<Vec<u32>, IoctlError> {
    let mut bytes = user_array(u64::from(count), 4)?;
    copy_from_user(&mut bytes, address)?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn read_u64s(address: u64, count: u32) -> Result<Vec<u64>, IoctlError> {
    let mut bytes = user_array(u64::from(count), 8)?;
    copy_from_user(&mut bytes, address)?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect())
}

impl File {
    // ---- syncobjs --------------------------------------------------------

    /// The syncobj with `handle`.
    pub fn syncobj(&self, handle: u32) -> Option<Arc<Syncobj>> {
        self.state().syncobjs.get(&handle).cloned()
    }

    fn syncobjs(&self, handles: &[u32]) -> Result<Vec<Arc<Syncobj>>, SyncobjError> {
        let state = self.state();
        handles
            .iter()
            .map(|&handle| {
                state
                    .syncobjs
                    .get(&handle)
                    .cloned()
                    .ok_or(SyncobjError::NoSuchSyncobj { handle })
            })
            .collect()
    }

    fn syncobj_or(&self, handle: u32) -> Result<Arc<Syncobj>, SyncobjError> {
        self.syncobj(handle)
            .ok_or(SyncobjError::NoSuchSyncobj { handle })
    }

    fn syncobj_create(&self, c: &mut SyncobjCreate) -> Result<i32, IoctlError> {
        let flags = SyncobjCreateFlags::from_bits(c.flags)
            .ok_or(SyncobjError::UnknownFlags { flags: c.flags })?;
        let syncobj = Syncobj::new(
            flags.contains(SyncobjCreateFlags::SIGNALED),
            Arc::clone(&self.device.events),
            Arc::clone(&self.device.counters),
        );
        let mut state = self.state();
        let state = &mut *state;
        let handle = take_id(&state.syncobjs, &mut state.next_syncobj, "syncobj")?;
        state.syncobjs.insert(handle, syncobj);
        c.handle = handle;
        Ok(0)
    }

    fn syncobj_destroy(&self, d: &mut SyncobjDestroy) -> Result<i32, IoctlError> {
        if d.pad != 0 {
            return Err(SyncobjError::MustBeZero { field: "pad" }.into());
        }
        self.state()
            .syncobjs
            .remove(&d.handle)
            .map(|_| 0)
            .ok_or_else(|| SyncobjError::DestroyUnknownHandle { handle: d.handle }.into())
    }

    fn wait_common(
        &self,
        handles: u64,
        points: Option<u64>,
        count: u32,
        flags: SyncobjWaitFlags,
        timeout_ns: i64,
    ) -> Result<u32, IoctlError> {
        let handles = read_u32s(handles, count)?;
        let points = match points {
            Some(address) => read_u64s(address, count)?,
            None => vec![0; count as usize],
        };
        let syncobjs = self.syncobjs(&handles)?;
        let entries: Vec<(Arc<Syncobj>, WaitSpec)> = syncobjs
            .into_iter()
            .zip(points.iter().copied())
            .map(|(s, point)| (s, WaitSpec { point }))
            .collect();
        match sync::wait(
            &self.device.events,
            &entries,
            flags.contains(SyncobjWaitFlags::WAIT_ALL),
            flags.contains(SyncobjWaitFlags::WAIT_FOR_SUBMIT),
            flags.contains(SyncobjWaitFlags::WAIT_AVAILABLE),
            timeout_ns,
        ) {
            Ok(first) => Ok(first as u32),
            Err(WaitError::NoFence { index }) => Err(SyncobjError::NoFence {
                handle: handles[index],
                point: points[index],
            }
            .into()),
            Err(WaitError::TimedOut) => Err(SyncobjError::TimedOut.into()),
            Err(WaitError::Interrupted) => Err(SyncobjError::Interrupted.into()),
        }
    }

    fn syncobj_wait(&self, w: &mut SyncobjWait) -> Result<i32, IoctlError> {
        let allowed = SyncobjWaitFlags::WAIT_ALL
            | SyncobjWaitFlags::WAIT_FOR_SUBMIT
            | SyncobjWaitFlags::WAIT_DEADLINE;
        let flags = SyncobjWaitFlags::from_bits(w.flags)
            .filter(|f| allowed.contains(*f))
            .ok_or(SyncobjError::UnknownFlags { flags: w.flags })?;
        if w.count_handles == 0 {
            return Ok(0);
        }
        w.first_signaled =
            self.wait_common(w.handles, None, w.count_handles, flags, w.timeout_nsec)?;
        Ok(0)
    }

    fn syncobj_timeline_wait(&self, w: &mut SyncobjTimelineWait) -> Result<i32, IoctlError> {
        let flags = SyncobjWaitFlags::from_bits(w.flags)
            .ok_or(SyncobjError::UnknownFlags { flags: w.flags })?;
        if w.count_handles == 0 {
            return Ok(0);
        }
        // A null points array means point 0 for every handle (Linux).
        w.first_signaled = self.wait_common(
            w.handles,
            (w.points != 0).then_some(w.points),
            w.count_handles,
            flags,
            w.timeout_nsec,
        )?;
        Ok(0)
    }

    fn syncobj_reset(&self, a: &mut SyncobjArray, signal: bool) -> Result<i32, IoctlError> {
        if a.pad != 0 {
            return Err(SyncobjError::MustBeZero { field: "pad" }.into());
        }
        if a.count_handles == 0 {
            return Err(SyncobjError::NoHandles.into());
        }
        let syncobjs = self.syncobjs(&read_u32s(a.handles, a.count_handles)?)?;
        for syncobj in syncobjs {
            let fence = signal.then(|| Fence::signalled(Arc::clone(&self.device.events)));
            syncobj.replace(fence);
        }
        Ok(0)
    }

    fn syncobj_query(&self, q: &mut SyncobjTimelineArray) -> Result<i32, IoctlError> {
        let flags = SyncobjQueryFlags::from_bits(q.flags)
            .ok_or(SyncobjError::UnknownFlags { flags: q.flags })?;
        if q.count_handles == 0 {
            return Err(SyncobjError::NoHandles.into());
        }
        let syncobjs = self.syncobjs(&read_u32s(q.handles, q.count_handles)?)?;
        let points: Vec<u8> = syncobjs
            .iter()
            .map(|s| {
                if flags.contains(SyncobjQueryFlags::LAST_SUBMITTED) {
                    s.last_submitted_point()
                } else {
                    s.last_signalled_point()
                }
            })
            .flat_map(u64::to_le_bytes)
            .collect();
        copy_to_user(q.points, &points)?;
        Ok(0)
    }

    fn syncobj_timeline_signal(&self, a: &mut SyncobjTimelineArray) -> Result<i32, IoctlError> {
        if a.flags != 0 {
            return Err(SyncobjError::UnknownFlags { flags: a.flags }.into());
        }
        if a.count_handles == 0 {
            return Err(SyncobjError::NoHandles.into());
        }
        let syncobjs = self.syncobjs(&read_u32s(a.handles, a.count_handles)?)?;
        // A null points array means point 0 for every handle (Linux).
        let points = if a.points == 0 {
            vec![0; syncobjs.len()]
        } else {
            read_u64s(a.points, a.count_handles)?
        };
        for (syncobj, point) in syncobjs.iter().zip(points) {
            syncobj.add_point(point, Fence::signalled(Arc::clone(&self.device.events)));
        }
        Ok(0)
    }

    /// `SYNCOBJ_EVENTFD`, in drm_syncobj_eventfd_ioctl's order of checks:
    /// flags and pad (EINVAL), the handle (ENOENT), the descriptor (EBADF),
    /// its kind (EINVAL unless an eventfd).
    fn syncobj_eventfd(&self, e: &mut SyncobjEventfd) -> Result<i32, IoctlError> {
        if e.flags & !SyncobjWaitFlags::WAIT_AVAILABLE.bits() != 0 {
            return Err(SyncobjError::UnknownFlags { flags: e.flags }.into());
        }
        if e.pad != 0 {
            return Err(SyncobjError::MustBeZero { field: "pad" }.into());
        }
        let syncobj = self.syncobj_or(e.handle)?;
        let file = dup_user_fd(e.fd).ok_or(SyncobjError::NotOpen { fd: e.fd })?;
        if !is_eventfd(&file) {
            return Err(SyncobjError::BadFd { fd: e.fd }.into());
        }
        let eventfd = DeviceFd::keep(file).map_err(|_| SyncobjError::NotOpen { fd: e.fd })?;
        syncobj.add_eventfd(sync::EventfdWatch {
            point: e.point,
            when_available: e.flags != 0,
            eventfd,
        });
        Ok(0)
    }

    fn syncobj_transfer(&self, t: &mut SyncobjTransfer) -> Result<i32, IoctlError> {
        if t.pad != 0 {
            return Err(SyncobjError::MustBeZero { field: "pad" }.into());
        }
        let flags = SyncobjWaitFlags::from_bits(t.flags)
            .ok_or(SyncobjError::UnknownFlags { flags: t.flags })?;
        let src = self.syncobj_or(t.src_handle)?;
        let dst = self.syncobj_or(t.dst_handle)?;
        if src.fence_for(t.src_point).is_none() && flags.contains(SyncobjWaitFlags::WAIT_FOR_SUBMIT)
        {
            let entry = [(Arc::clone(&src), WaitSpec { point: t.src_point })];
            let deadline = sync::monotonic_now_ns().saturating_add(TRANSFER_SUBMIT_WAIT_NS);
            sync::wait(&self.device.events, &entry, true, true, true, deadline)
                .map_err(|_| SyncobjError::TimedOut)?;
        }
        let point = src.fence_for(t.src_point).ok_or(SyncobjError::NoFence {
            handle: t.src_handle,
            point: t.src_point,
        })?;
        let fence = Fence::all_of(&point, Arc::clone(&self.device.events));
        dst.add_point(t.dst_point, fence);
        Ok(0)
    }
}

/// What the process's descriptor table says `fd` is (`/proc/self/fd`'s
/// link: a path, `anon_inode:[eventfd]`, `/memfd:NAME (deleted)`).
fn file_kind(fd: &OwnedFd) -> String {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map(|path| path.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Whether a descriptor is an eventfd.
fn is_eventfd(fd: &OwnedFd) -> bool {
    file_kind(fd) == "anon_inode:[eventfd]"
}

/// Whether a descriptor is a memfd backing a GEM object of some simulated
/// device (the only kind of dma-buf this simulation has).
fn is_gem_memfd(fd: &OwnedFd) -> bool {
    file_kind(fd).starts_with(&format!("/memfd:{GEM_MEMFD_NAME} "))
}

impl File {
    // ---- PRIME and syncobj fds -----------------------------------------

    fn handle_for(&self, object: Arc<GemObject>) -> Result<u32, IoctlError> {
        let mut state = self.state();
        if let Some((&handle, _)) = state.handles.iter().find(|(_, o)| Arc::ptr_eq(o, &object)) {
            return Ok(handle);
        }
        let state = &mut *state;
        let handle = take_id(&state.handles, &mut state.next_handle, "GEM handle")?;
        object.handle_opened();
        state.handles.insert(handle, object);
        Ok(handle)
    }

    fn prime_handle_to_fd(&self, p: &mut PrimeHandle) -> Result<i32, IoctlError> {
        let flags =
            PrimeFlags::from_bits(p.flags).ok_or(PrimeError::UnknownFlags { flags: p.flags })?;
        let object = self
            .object(p.handle)
            .ok_or(PrimeError::NoSuchHandle { handle: p.handle })?;
        if object.private_vm().is_some() {
            return Err(PrimeError::PrivateObject { handle: p.handle }.into());
        }
        let fd = self
            .device
            .exports
            .export_object(&object, flags.contains(PrimeFlags::CLOEXEC))?;
        p.fd = install_user_fd(fd)?;
        Ok(0)
    }

    fn prime_fd_to_handle(&self, p: &mut PrimeHandle) -> Result<i32, IoctlError> {
        let fd = dup_user_fd(p.fd).ok_or(PrimeError::BadFd { fd: p.fd })?;
        let object = match self.device.exports.find_object(fd.as_fd())? {
            Some(object) => object,
            // One of this device's objects that was never exported (its
            // memfd reached the caller as a CPU mapping): not a buffer to
            // import, or a private object could be aliased and exported.
            None if is_gem_memfd(&fd)
                && self.device.owns_memfd(crate::export::inode_of(fd.as_fd())?) =>
            {
                return Err(PrimeError::NotABuffer { fd: p.fd }.into())
            }
            None if is_gem_memfd(&fd) => self
                .device
                .adopt_object(fd, &self.memory)
                .map_err(|_| PrimeError::OutOfMemory { fd: p.fd })?,
            None => return Err(PrimeError::NotABuffer { fd: p.fd }.into()),
        };
        p.handle = self.handle_for(object)?;
        Ok(0)
    }

    fn syncobj_handle_to_fd(&self, h: &mut SyncobjHandle) -> Result<i32, IoctlError> {
        if h.pad != 0 {
            return Err(SyncobjError::MustBeZero { field: "pad" }.into());
        }
        let flags = SyncobjHandleToFdFlags::from_bits(h.flags)
            .ok_or(SyncobjError::UnknownFlags { flags: h.flags })?;
        let fd = if flags.contains(SyncobjHandleToFdFlags::EXPORT_SYNC_FILE) {
            let syncobj = self.syncobj_or(h.handle)?;
            let point = syncobj.fence_for(0).ok_or(SyncobjError::NoFence {
                handle: h.handle,
                point: 0,
            })?;
            let fence = Fence::all_of(&point, Arc::clone(&self.device.events));
            self.device
                .exports
                .export_sync_file(fence, &self.device.events)?
        } else {
            // Linux: an unknown handle is EINVAL on this path.
            let syncobj = self
                .syncobj(h.handle)
                .ok_or(SyncobjError::DestroyUnknownHandle { handle: h.handle })?;
            self.device.exports.export_syncobj(&syncobj)?
        };
        h.fd = install_user_fd(fd)?;
        Ok(0)
    }

    fn syncobj_fd_to_handle(&self, h: &mut SyncobjHandle) -> Result<i32, IoctlError> {
        if h.pad != 0 {
            return Err(SyncobjError::MustBeZero { field: "pad" }.into());
        }
        let flags = SyncobjFdToHandleFlags::from_bits(h.flags)
            .ok_or(SyncobjError::UnknownFlags { flags: h.flags })?;
        let fd = dup_user_fd(h.fd).ok_or(SyncobjError::BadFd { fd: h.fd })?;
        if flags.contains(SyncobjFdToHandleFlags::IMPORT_SYNC_FILE) {
            // As Linux: the file (EINVAL), then the handle (ENOENT); a
            // wait for another device's file starts only after both.
            if !self.device.exports.is_sync_file(fd.as_fd()) {
                return Err(SyncobjError::BadFd { fd: h.fd }.into());
            }
            let syncobj = self.syncobj_or(h.handle)?;
            let fence = self
                .device
                .exports
                .import_sync_file(fd, &self.device.events)?
                .ok_or(SyncobjError::BadFd { fd: h.fd })?;
            syncobj.replace(Some(fence));
            return Ok(0);
        }
        let syncobj = self.device.exports.import_syncobj(fd.as_fd())?;
        let mut state = self.state();
        let state = &mut *state;
        let handle = take_id(&state.syncobjs, &mut state.next_syncobj, "syncobj")?;
        state.syncobjs.insert(handle, syncobj);
        h.handle = handle;
        Ok(0)
    }
}

/// An object range bound for the firmware's use (GEM_BIND_OBJECT).
#[derive(Debug, Clone)]
pub struct BoundObject {
    /// The object.
    pub object: Arc<GemObject>,
    /// Offset of the range in the object.
    pub offset: u64,
    /// Length of the range.
    pub range: u64,
    /// The range mapped for the firmware (which writes the timestamps).
    pub firmware: Arc<FirmwareMapping>,
}

/// A range mapped into the firmware's address space; unmapped when the
/// last holder (the binding, or in-flight work using it) lets go.
#[derive(Debug)]
pub struct FirmwareMapping {
    link: Arc<crate::firmware::FirmwareLink>,
    /// Its firmware address.
    pub va: u64,
    _object: Arc<GemObject>,
}

impl Drop for FirmwareMapping {
    fn drop(&mut self) {
        self.link.vm.free(self.va);
    }
}

impl File {
    /// The object range bound as `object_handle`, for the firmware.
    pub fn bound_object(&self, object_handle: u32) -> Option<BoundObject> {
        self.state().bound.get(&object_handle).cloned()
    }

    fn gem_bind_object(&self, b: &mut GemBindObject) -> Result<i32, IoctlError> {
        if b.vm_id != 0 || b.pad != 0 {
            return Err(BindObjectError::MustBeZero {
                field: if b.pad != 0 { "pad" } else { "vm_id" },
            }
            .into());
        }
        let op =
            BindObjectOp::try_from(b.op).map_err(|_| BindObjectError::UnknownOp { op: b.op })?;
        match op {
            BindObjectOp::Bind => {
                if b.flags != BindObjectFlags::USAGE_TIMESTAMPS.bits() {
                    return Err(BindObjectError::UnknownFlags { flags: b.flags }.into());
                }
                let page = agx_hw::uat::PAGE_BYTES;
                if !b.offset.is_multiple_of(page) || !b.range.is_multiple_of(page) || b.range == 0 {
                    return Err(BindObjectError::Unaligned {
                        offset: b.offset,
                        range: b.range,
                    }
                    .into());
                }
                let object = self
                    .object(b.handle)
                    .ok_or(BindObjectError::NoSuchHandle { handle: b.handle })?;
                if b.offset
                    .checked_add(b.range)
                    .is_none_or(|end| end > object.size_bytes())
                {
                    return Err(BindObjectError::OutsideObject {
                        offset: b.offset,
                        range: b.range,
                        size_bytes: object.size_bytes(),
                    }
                    .into());
                }
                let link = Arc::clone(self.device.firmware());
                let va = link
                    .vm
                    .map(Arc::clone(object.memory()), b.offset, b.range)
                    .map_err(BindObjectError::from)?;
                let firmware = Arc::new(FirmwareMapping {
                    link,
                    va,
                    _object: Arc::clone(&object),
                });
                let mut state = self.state();
                let state = &mut *state;
                let handle = take_id(&state.bound, &mut state.next_bound, "bound object")?;
                state.bound.insert(
                    handle,
                    BoundObject {
                        object,
                        offset: b.offset,
                        range: b.range,
                        firmware,
                    },
                );
                b.object_handle = handle;
                Ok(0)
            }
            BindObjectOp::Unbind => {
                let nonzero = [
                    ("flags", b.flags != 0),
                    ("handle", b.handle != 0),
                    ("offset", b.offset != 0),
                    ("range", b.range != 0),
                ];
                if let Some((field, _)) = nonzero.into_iter().find(|(_, set)| *set) {
                    return Err(BindObjectError::MustBeZero { field }.into());
                }
                self.state()
                    .bound
                    .remove(&b.object_handle)
                    .map(|_| 0)
                    .ok_or_else(|| {
                        BindObjectError::NoSuchBinding {
                            object_handle: b.object_handle,
                        }
                        .into()
                    })
            }
        }
    }
}

impl File {
    // ---- queues ----------------------------------------------------------

    /// The queue with `queue_id`.
    pub fn queue(&self, queue_id: u32) -> Option<Arc<Queue>> {
        self.state().queues.get(&queue_id).cloned()
    }

    fn queue_create(&self, c: &mut QueueCreate) -> Result<i32, IoctlError> {
        if c.flags != 0 {
            return Err(QueueError::MustBeZero { field: "flags" }.into());
        }
        let priority = queue::check_priority(c.priority)?;
        let mut state = self.state();
        let vm = state
            .vms
            .get(&c.vm_id)
            .cloned()
            .ok_or(QueueError::NoSuchVm { vm_id: c.vm_id })?;
        let id = {
            let state = &mut *state;
            take_id(&state.queues, &mut state.next_queue, "queue")?
        };
        let queue = Queue::new(
            id,
            vm,
            priority,
            c.usc_exec_base,
            Arc::clone(&self.device.scheduler),
            Arc::clone(&self.usage),
        )?;
        state.queues.insert(id, Arc::new(queue));
        c.queue_id = id;
        Ok(0)
    }

    fn queue_destroy(&self, d: &mut QueueDestroy) -> Result<i32, IoctlError> {
        if d.pad != 0 {
            return Err(QueueError::MustBeZero { field: "pad" }.into());
        }
        let removed = self.state().queues.remove(&d.queue_id);
        removed.map(|_| 0).ok_or_else(|| {
            QueueError::NoSuchQueue {
                queue_id: d.queue_id,
            }
            .into()
        })
    }
}

/// The most syncs one SUBMIT takes.
pub const MAX_SUBMIT_SYNCS: u64 = 1024;
/// The largest SUBMIT command buffer: 64 of the largest commands with a
/// full attachment list before each of them, with room to spare.
pub const MAX_CMDBUF_BYTES: u64 = 64 * 1024;

impl File {
    // ---- submission -------------------------------------------------------

    /// Records a submission in the device's capture, if one is running:
    /// the argument, syncs and command buffer, and every mapped range of
    /// the queue's VM with its bytes now.
    fn capture(&self, queue: &Queue, s: &Submit, syncs: &[Sync], cmdbuf: &[u8]) {
        let mut capture = self
            .device
            .capture
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let Some(writer) = capture.as_mut() else {
            return;
        };
        // Repeated single pages (sparse scratch) are recorded up to this
        // size only.
        const SINGLE_PAGE_LIMIT: u64 = 1 << 20;
        let memory = {
            let vm = lock_vm(queue.vm());
            let objects: std::collections::HashMap<u64, Arc<GemObject>> =
                vm.objects().into_iter().map(|o| (o.id(), o)).collect();
            vm.mappings()
                .iter()
                .filter_map(|m| {
                    let object = objects.get(&m.object_id)?;
                    let len = if m.single_page {
                        m.len_bytes.min(SINGLE_PAGE_LIMIT)
                    } else {
                        m.len_bytes
                    };
                    let mut bytes = vec![0u8; len as usize];
                    let memory = object.memory();
                    if m.single_page {
                        let mut page = vec![0u8; agx_hw::uat::PAGE_BYTES as usize];
                        memory.read(m.offset, &mut page)?;
                        for chunk in bytes.chunks_mut(page.len()) {
                            chunk.copy_from_slice(&page[..chunk.len()]);
                        }
                    } else {
                        memory.read(m.offset, &mut bytes)?;
                    }
                    Some(agx_capture::MemoryRange {
                        va: m.va,
                        read: m.permissions.gpu_read,
                        write: m.permissions.gpu_write,
                        bytes,
                    })
                })
                .collect()
        };
        let record = agx_capture::Submission {
            usc_exec_base: queue.usc_exec_base(),
            vm_id: self
                .state()
                .vms
                .iter()
                .find(|(_, vm)| Arc::ptr_eq(vm, queue.vm()))
                .map_or(0, |(&id, _)| id),
            queue_id: s.queue_id,
            submit: *s,
            syncs: syncs.to_vec(),
            cmdbuf: cmdbuf.to_vec(),
            memory,
        };
        if let Err(e) = writer.submission(&record) {
            tracing::error!(%e, "capture write failed; capture stopped");
            *capture = None;
        }
    }

    fn submit(&self, s: &mut Submit) -> Result<i32, IoctlError> {
        if s.flags != 0 || s.pad != 0 {
            let field = if s.flags != 0 { "flags" } else { "pad" };
            return Err(SubmitArgError::MustBeZero { field }.into());
        }
        let queue = self.queue(s.queue_id).ok_or(SubmitArgError::NoSuchQueue {
            queue_id: s.queue_id,
        })?;
        let sync_count = u64::from(s.in_sync_count) + u64::from(s.out_sync_count);
        if sync_count > MAX_SUBMIT_SYNCS {
            return Err(SubmitArgError::TooLarge {
                what: "syncs",
                value: sync_count,
                limit: MAX_SUBMIT_SYNCS,
            }
            .into());
        }
        if u64::from(s.cmdbuf_size) > MAX_CMDBUF_BYTES {
            return Err(SubmitArgError::TooLarge {
                what: "cmdbuf_size",
                value: u64::from(s.cmdbuf_size),
                limit: MAX_CMDBUF_BYTES,
            }
            .into());
        }
        let mut sync_bytes = vec![0u8; sync_count as usize * size_of::<Sync>()];
        if !sync_bytes.is_empty() {
            copy_from_user(&mut sync_bytes, s.syncs).map_err(SubmitArgError::from)?;
        }
        let syncs: Vec<Sync> = sync_bytes
            .chunks_exact(size_of::<Sync>())
            .filter_map(|c| Sync::read_from_bytes(c).ok())
            .collect();
        let mut waits = Vec::new();
        let mut signals = Vec::new();
        for (index, sync) in syncs.iter().enumerate() {
            let ty = crate::submit::check_sync(sync, index)?;
            let syncobj = self
                .syncobj(sync.handle)
                .ok_or(SubmitArgError::NoSuchSyncobj {
                    index,
                    handle: sync.handle,
                })?;
            if index < s.in_sync_count as usize {
                let fence = syncobj
                    .fence_for(sync.timeline_value)
                    .ok_or(SubmitArgError::NoFence { index })?;
                waits.push(fence);
            } else {
                signals.push((syncobj, ty, sync.timeline_value));
            }
        }
        let mut cmdbuf = vec![0u8; s.cmdbuf_size as usize];
        copy_from_user(&mut cmdbuf, s.cmdbuf).map_err(SubmitArgError::from)?;
        let commands = crate::submit::parse_commands(&cmdbuf)?;
        self.capture(&queue, s, &syncs, &cmdbuf);
        let mut keep_alive: Vec<crate::sched::KeepAlive> = Vec::new();
        let mut timestamps = Vec::with_capacity(commands.len());
        for (index, command) in commands.iter().enumerate() {
            let stamps: [Timestamp; 4] = match command {
                Command::Render { cmd, .. } => [
                    cmd.ts_vtx.start,
                    cmd.ts_vtx.end,
                    cmd.ts_frag.start,
                    cmd.ts_frag.end,
                ],
                Command::Compute { cmd, .. } => [
                    cmd.ts.start,
                    cmd.ts.end,
                    Timestamp::default(),
                    Timestamp::default(),
                ],
            };
            let mut resolved = [0u64; 4];
            for (out, ts) in resolved.iter_mut().zip(stamps) {
                if ts.handle == 0 {
                    continue;
                }
                let bound =
                    self.bound_object(ts.handle)
                        .ok_or(SubmitArgError::NoSuchTimestampBuffer {
                            index,
                            handle: ts.handle,
                        })?;
                if u64::from(ts.offset) + 8 > bound.range || !ts.offset.is_multiple_of(8) {
                    return Err(SubmitArgError::BadTimestamp {
                        index,
                        offset: ts.offset,
                    }
                    .into());
                }
                *out = bound.firmware.va + u64::from(ts.offset);
                keep_alive.push(bound.firmware.clone());
            }
            timestamps.push(resolved);
        }
        for object in lock_vm(queue.vm()).objects() {
            keep_alive.push(object);
        }
        keep_alive.push(Arc::clone(queue.vm()) as crate::sched::KeepAlive);
        let fence = Fence::pending(Arc::clone(&self.device.events));
        let job = crate::sched::Job {
            waits,
            commands,
            timestamps,
            fence: Arc::clone(&fence),
            keep_alive,
        };
        self.device.scheduler.submit(queue.sched_id(), job)?;
        for (syncobj, ty, point) in signals {
            match ty {
                SyncType::TimelineSyncobj => syncobj.add_point(point, Arc::clone(&fence)),
                _ => syncobj.replace(Some(Arc::clone(&fence))),
            }
        }
        Ok(0)
    }
}

impl Drop for File {
    fn drop(&mut self) {
        self.device.masters.release(&self.auth);
        for object in self.state().handles.values() {
            object.handle_closed();
        }
        self.device.counters.files.fetch_sub(1, Ordering::Relaxed);
    }
}
