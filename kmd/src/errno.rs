//! Error numbers, and the one place operation errors become them.
//!
//! Every ioctl handler returns its own error enum, which says what limit
//! was broken; this module maps each to the errno Linux returns for it, so
//! the mapping can be read (and checked against the kernel) in one place.

use std::fmt;

use crate::gem::GemError;
use crate::params::ParamsError;
use crate::queue::QueueError;
use crate::submit::{SubmitArgError, SubmitError};
use crate::uaccess::Fault;
use crate::vm::{BindError, VmError};

/// A Linux error number.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// Operation not permitted.
    pub const EPERM: Errno = Errno(libc::EPERM);
    /// No such entry.
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    /// Bad file descriptor.
    pub const EBADF: Errno = Errno(libc::EBADF);
    /// Out of memory.
    pub const ENOMEM: Errno = Errno(libc::ENOMEM);
    /// Argument too big (an extensible struct with unknown non-zero
    /// fields).
    pub const E2BIG: Errno = Errno(libc::E2BIG);
    /// Permission denied.
    pub const EACCES: Errno = Errno(libc::EACCES);
    /// Bad address (an unreadable or unwritable user pointer).
    pub const EFAULT: Errno = Errno(libc::EFAULT);
    /// Busy.
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    /// Invalid argument.
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    /// No space left (every id of a kind is taken).
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    /// Inappropriate ioctl for the device.
    pub const ENOTTY: Errno = Errno(libc::ENOTTY);
    /// Timer expired (syncobj waits).
    pub const ETIME: Errno = Errno(libc::ETIME);
    /// No such device (the firmware crashed).
    pub const ENODEV: Errno = Errno(libc::ENODEV);
    /// I/O error: a GPU fault.
    pub const EIO: Errno = Errno(libc::EIO);
    /// Timed out: a GPU job exceeded its time budget.
    pub const ETIMEDOUT: Errno = Errno(libc::ETIMEDOUT);
    /// Cancelled: the work was dropped before it ran.
    pub const ECANCELED: Errno = Errno(libc::ECANCELED);
    /// Operation not supported (GET_CAP of a KMS-only capability).
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);

    /// The symbolic name.
    pub fn name(self) -> &'static str {
        match self.0 {
            libc::EPERM => "EPERM",
            libc::ENOENT => "ENOENT",
            libc::EBADF => "EBADF",
            libc::ENOMEM => "ENOMEM",
            libc::EFAULT => "EFAULT",
            libc::EACCES => "EACCES",
            libc::E2BIG => "E2BIG",
            libc::EBUSY => "EBUSY",
            libc::ENOSPC => "ENOSPC",
            libc::EINVAL => "EINVAL",
            libc::ENOTTY => "ENOTTY",
            libc::ETIME => "ETIME",
            libc::ENODEV => "ENODEV",
            libc::EIO => "EIO",
            libc::ETIMEDOUT => "ETIMEDOUT",
            libc::ECANCELED => "ECANCELED",
            libc::EOPNOTSUPP => "EOPNOTSUPP",
            _ => "E?",
        }
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
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
