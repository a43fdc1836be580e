//! The one place operation errors become error numbers.
//!
//! Every ioctl handler returns its own error enum, which says what limit
//! was broken; this module maps each to the errno Linux returns for it, so
//! the mapping can be read (and checked against the kernel) in one place.
//! [`Errno`] itself is the UAPI's (`agx_uapi::Errno`), shared with
//! userspace. Only the ioctl dispatch (`file`) uses these conversions.

use crate::gem::GemError;
use crate::params::ParamsError;
use crate::queue::QueueError;
use crate::submit::{SubmitArgError, SubmitError};
use crate::uaccess::Fault;
use crate::vm::{BindError, VmError};

pub use agx_uapi::Errno;

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
            GemError::NoSuchHandle { .. } | GemError::NoSuchVm { .. } => Errno::ENOENT,
            GemError::OutOfMemory(_) => Errno::ENOMEM,
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

impl From<crate::sched::SchedError> for Errno {
    fn from(e: crate::sched::SchedError) -> Errno {
        match e {
            crate::sched::SchedError::OutOfMemory(_) => Errno::ENOMEM,
            crate::sched::SchedError::Crashed => Errno::ENODEV,
        }
    }
}
