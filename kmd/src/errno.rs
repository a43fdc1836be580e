//! The one place operation errors become error numbers.
//!
//! Every ioctl handler returns its own error enum, which says what limit
//! was broken; this module maps each to the errno Linux returns for it, so
//! the mapping can be read (and checked against the kernel) in one place.
//! [`Errno`] itself is the UAPI's (`agx_uapi::Errno`), shared with
//! userspace. Only the ioctl dispatch (`file`) uses these conversions.

use crate::auth::AuthError;
use crate::dma_buf::DmaBufError;
use crate::export::PrimeError;
use crate::gem::{BindObjectError, GemError, MmapError};
use crate::params::ParamsError;
use crate::queue::QueueError;
use crate::sched::SchedError;
use crate::submit::{SubmitArgError, SubmitError};
use crate::sync::SyncobjError;
use crate::uaccess::Fault;
use crate::vm::{BindError, VmError};

pub use agx_uapi::Errno;

/// Why an ioctl was refused: the typed error of the operation, which says
/// what was wrong and with which value. `File::ioctl` logs it and returns
/// its errno ([`IoctlError::errno`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IoctlError {
    /// The request is not an ioctl of this device.
    #[error("request {request:#x} is not a DRM ioctl")]
    NotDrm {
        /// The request.
        request: u64,
    },
    /// The DRM ioctl number is not implemented.
    #[error("no ioctl {nr:#x}")]
    UnknownIoctl {
        /// The ioctl number.
        nr: u32,
    },
    /// Permission, master and authentication checks, and the core
    /// ioctls a driver without mode setting refuses.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// The firmware crashed: the GPU is gone.
    #[error("the GPU firmware has crashed")]
    DeviceGone,
    /// GET_CAP of a capability a render-only device does not have.
    #[error("capability {capability:#x} is not supported")]
    UnsupportedCap {
        /// The capability.
        capability: u64,
    },
    /// Every id of a kind is in use.
    #[error("every {kind} id is in use")]
    IdsExhausted {
        /// The kind of id.
        kind: &'static str,
    },
    /// A user array larger than the kernel allocates at once.
    #[error("an array of {count} x {element_bytes} bytes is over the {max_bytes}-byte limit")]
    ArrayTooLarge {
        /// Elements.
        count: u64,
        /// Bytes per element.
        element_bytes: u64,
        /// The limit.
        max_bytes: u64,
    },
    /// A user pointer could not be read or written.
    #[error(transparent)]
    Fault(#[from] Fault),
    /// A descriptor could not be given to the caller.
    #[error(transparent)]
    Install(#[from] crate::uaccess::InstallError),
    /// GET_PARAMS, GET_TIME.
    #[error(transparent)]
    Params(#[from] ParamsError),
    /// GEM_CREATE, GEM_CLOSE, GEM_MMAP_OFFSET.
    #[error(transparent)]
    Gem(#[from] GemError),
    /// GEM_BIND_OBJECT.
    #[error(transparent)]
    BindObject(#[from] BindObjectError),
    /// VM_CREATE, VM_DESTROY.
    #[error(transparent)]
    Vm(#[from] VmError),
    /// VM_BIND.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// QUEUE_CREATE, QUEUE_DESTROY.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// SUBMIT's command buffer.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// SUBMIT's arguments.
    #[error(transparent)]
    SubmitArg(#[from] SubmitArgError),
    /// SUBMIT's hand-off to the scheduler.
    #[error(transparent)]
    Sched(#[from] SchedError),
    /// The syncobj ioctls.
    #[error(transparent)]
    Syncobj(#[from] SyncobjError),
    /// PRIME import and export.
    #[error(transparent)]
    Prime(#[from] PrimeError),
    /// An error already reduced to its errno by a lower layer (fd
    /// bookkeeping in `export`).
    #[error("{0}")]
    Errno(#[from] Errno),
}

impl IoctlError {
    /// The errno Linux returns for it.
    pub fn errno(&self) -> Errno {
        match self {
            IoctlError::NotDrm { .. } => Errno::ENOTTY,
            IoctlError::UnknownIoctl { .. } => Errno::EINVAL,
            IoctlError::Auth(e) => e.clone().into(),
            IoctlError::DeviceGone => Errno::ENODEV,
            IoctlError::UnsupportedCap { .. } => Errno::EOPNOTSUPP,
            IoctlError::IdsExhausted { .. } => Errno::ENOSPC,
            IoctlError::ArrayTooLarge { .. } => Errno::ENOMEM,
            IoctlError::Fault(e) => (*e).into(),
            IoctlError::Install(crate::uaccess::InstallError::NoDescriptor) => Errno::EMFILE,
            IoctlError::Params(e) => e.clone().into(),
            IoctlError::Gem(e) => e.clone().into(),
            IoctlError::BindObject(e) => e.clone().into(),
            IoctlError::Vm(e) => e.clone().into(),
            IoctlError::Bind(e) => e.clone().into(),
            IoctlError::Queue(e) => e.clone().into(),
            IoctlError::Submit(e) => e.clone().into(),
            IoctlError::SubmitArg(e) => e.clone().into(),
            IoctlError::Sched(e) => e.clone().into(),
            IoctlError::Syncobj(e) => e.clone().into(),
            IoctlError::Prime(e) => e.clone().into(),
            IoctlError::Errno(e) => *e,
        }
    }
}

impl From<IoctlError> for Errno {
    fn from(e: IoctlError) -> Errno {
        e.errno()
    }
}

impl From<SyncobjError> for Errno {
    fn from(e: SyncobjError) -> Errno {
        match e {
            SyncobjError::MustBeZero { .. }
            | SyncobjError::UnknownFlags { .. }
            | SyncobjError::NoHandles
            | SyncobjError::DestroyUnknownHandle { .. }
            | SyncobjError::NoFence { .. }
            | SyncobjError::BadFd { .. } => Errno::EINVAL,
            SyncobjError::NoSuchSyncobj { .. } => Errno::ENOENT,
            SyncobjError::NotOpen { .. } => Errno::EBADF,
            SyncobjError::TimedOut => Errno::ETIME,
            SyncobjError::Interrupted => Errno::EINTR,
        }
    }
}

impl From<PrimeError> for Errno {
    fn from(e: PrimeError) -> Errno {
        match e {
            PrimeError::UnknownFlags { .. }
            | PrimeError::PrivateObject { .. }
            | PrimeError::NotABuffer { .. } => Errno::EINVAL,
            PrimeError::NoSuchHandle { .. } => Errno::ENOENT,
            PrimeError::BadFd { .. } => Errno::EBADF,
            PrimeError::OutOfMemory { .. } => Errno::ENOMEM,
        }
    }
}

impl From<DmaBufError> for Errno {
    fn from(e: DmaBufError) -> Errno {
        match e {
            DmaBufError::NotOurs { .. } => Errno::ENOTTY,
            DmaBufError::Fault { .. } => Errno::EFAULT,
            DmaBufError::UnknownFlags { .. }
            | DmaBufError::NoAccess { .. }
            | DmaBufError::NotASyncFile { .. } => Errno::EINVAL,
            DmaBufError::NoDescriptor => Errno::EMFILE,
            DmaBufError::Interrupted => Errno::EINTR,
            DmaBufError::Errno(errno) => errno,
        }
    }
}

impl From<MmapError> for Errno {
    fn from(e: MmapError) -> Errno {
        match e {
            MmapError::NoObject { .. } | MmapError::OutsideObject { .. } => Errno::EINVAL,
            MmapError::NoHandle { .. } => Errno::EACCES,
        }
    }
}

impl From<BindObjectError> for Errno {
    fn from(e: BindObjectError) -> Errno {
        match e {
            BindObjectError::MustBeZero { .. }
            | BindObjectError::UnknownOp { .. }
            | BindObjectError::UnknownFlags { .. }
            | BindObjectError::Unaligned { .. }
            | BindObjectError::OutsideObject { .. } => Errno::EINVAL,
            BindObjectError::NoSuchHandle { .. } | BindObjectError::NoSuchBinding { .. } => {
                Errno::ENOENT
            }
            BindObjectError::OutOfMemory(_) => Errno::ENOMEM,
        }
    }
}

impl From<Fault> for Errno {
    fn from(_: Fault) -> Errno {
        Errno::EFAULT
    }
}

impl From<ParamsError> for Errno {
    fn from(e: ParamsError) -> Errno {
        match e {
            ParamsError::MustBeZero { .. } | ParamsError::UnknownGroup { .. } => Errno::EINVAL,
            ParamsError::Fault(_) => Errno::EFAULT,
        }
    }
}

impl From<GemError> for Errno {
    fn from(e: GemError) -> Errno {
        match e {
            GemError::MustBeZero { .. }
            | GemError::UnknownFlags { .. }
            | GemError::ZeroSize
            | GemError::VmWithoutPrivate { .. }
            | GemError::CloseUnknownHandle { .. } => Errno::EINVAL,
            GemError::NoSuchHandle { .. }
            | GemError::NoSuchVm { .. }
            | GemError::NoSuchName { .. } => Errno::ENOENT,
            GemError::OutOfMemory(_)
            | GemError::OverClientLimit { .. }
            | GemError::OverClientDescriptors { .. }
            | GemError::OverDeviceDescriptors { .. } => Errno::ENOMEM,
        }
    }
}

impl From<VmError> for Errno {
    fn from(e: VmError) -> Errno {
        match e {
            VmError::MustBeZero { .. } | VmError::BadKernelRange { .. } => Errno::EINVAL,
            VmError::NoSuchVm { .. } => Errno::ENOENT,
            VmError::OutOfMemory(_) => Errno::ENOMEM,
        }
    }
}

impl From<BindError> for Errno {
    fn from(e: BindError) -> Errno {
        match e {
            BindError::NoSuchVm { .. } | BindError::NoSuchHandle { .. } => Errno::ENOENT,
            BindError::Fault(_) => Errno::EFAULT,
            BindError::OutOfMemory(_) => Errno::ENOMEM,
            _ => Errno::EINVAL,
        }
    }
}

impl From<QueueError> for Errno {
    fn from(e: QueueError) -> Errno {
        match e {
            QueueError::MustBeZero { .. } | QueueError::BadPriority { .. } => Errno::EINVAL,
            QueueError::NoSuchVm { .. } | QueueError::NoSuchQueue { .. } => Errno::ENOENT,
        }
    }
}

impl From<SubmitError> for Errno {
    fn from(e: SubmitError) -> Errno {
        match e {
            SubmitError::UnknownFields { .. } => Errno::E2BIG,
            SubmitError::Truncated { .. }
            | SubmitError::UnknownType { .. }
            | SubmitError::CommandCount { .. }
            | SubmitError::BadBarrier { .. }
            | SubmitError::AttachmentBarrier { .. }
            | SubmitError::BadAttachments { .. }
            | SubmitError::BadRender { .. }
            | SubmitError::BadCompute { .. }
            | SubmitError::BadSync { .. } => Errno::EINVAL,
        }
    }
}

impl From<SubmitArgError> for Errno {
    fn from(e: SubmitArgError) -> Errno {
        match e {
            SubmitArgError::MustBeZero { .. }
            | SubmitArgError::TooLarge { .. }
            | SubmitArgError::NoFence { .. }
            | SubmitArgError::BadTimestamp { .. } => Errno::EINVAL,
            SubmitArgError::NoSuchQueue { .. }
            | SubmitArgError::NoSuchSyncobj { .. }
            | SubmitArgError::NoSuchTimestampBuffer { .. } => Errno::ENOENT,
            SubmitArgError::Fault(_) => Errno::EFAULT,
        }
    }
}

impl From<SchedError> for Errno {
    fn from(e: SchedError) -> Errno {
        match e {
            SchedError::OutOfMemory(_) => Errno::ENOMEM,
            SchedError::Crashed => Errno::ENODEV,
        }
    }
}

impl From<AuthError> for Errno {
    fn from(error: AuthError) -> Errno {
        match error {
            AuthError::NotRoot
            | AuthError::NotAuthenticated
            | AuthError::NotMaster
            | AuthError::NotMasterProcess { .. }
            | AuthError::NotOnRenderNode => Errno::EACCES,
            AuthError::MasterBusy => Errno::EBUSY,
            AuthError::MagicsExhausted => Errno::ENOSPC,
            AuthError::NoMasterObject
            | AuthError::NotCurrentMaster
            | AuthError::UnknownMagic { .. }
            | AuthError::BadVersion { .. }
            | AuthError::NoSuchClient { .. }
            | AuthError::Removed
            | AuthError::NoModesettingGetfb2 => Errno::EINVAL,
            AuthError::NoModesetting => Errno::EOPNOTSUPP,
            AuthError::NoDumbBuffers => Errno::ENOSYS,
        }
    }
}
