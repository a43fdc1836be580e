//! Linux error numbers, as the kernel returns them to userspace.
//!
//! One type for both sides of the UAPI: the kmd model returns these from
//! its ioctls and the userspace driver receives them, from the model or
//! from a real node, so the two cannot disagree about a value.

use std::fmt;

/// A Linux error number.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

macro_rules! errnos {
    ($( $(#[$doc:meta])* $name:ident, )*) => {
        impl Errno {
            $( $(#[$doc])* pub const $name: Errno = Errno(libc::$name); )*

            /// The symbolic name (`E?` for a value not listed here).
            pub fn name(self) -> &'static str {
                match self.0 {
                    $( libc::$name => stringify!($name), )*
                    _ => "E?",
                }
            }
        }
    };
}

errnos! {
    /// Operation not permitted.
    EPERM,
    /// No such entry.
    ENOENT,
    /// Bad file descriptor.
    EBADF,
    /// Out of memory.
    ENOMEM,
    /// Argument too big (an extensible struct with unknown non-zero
    /// fields).
    E2BIG,
    /// Permission denied.
    EACCES,
    /// Bad address (an unreadable or unwritable user pointer).
    EFAULT,
    /// Busy.
    EBUSY,
    /// Invalid argument.
    EINVAL,
    /// No space left (every id of a kind is taken).
    ENOSPC,
    /// Inappropriate ioctl for the device.
    ENOTTY,
    /// Timer expired (syncobj waits).
    ETIME,
    /// No such device (the firmware crashed; the GPU is gone).
    ENODEV,
    /// I/O error: a GPU fault.
    EIO,
    /// Timed out: a GPU job exceeded its time budget.
    ETIMEDOUT,
    /// Cancelled: the work was dropped before it ran.
    ECANCELED,
    /// Operation not supported (GET_CAP of a KMS-only capability).
    EOPNOTSUPP,
    /// Interrupted by a signal whose handler does not restart system
    /// calls (a blocking syncobj wait).
    EINTR,
    /// Function not implemented (a dumb-buffer ioctl on a driver without
    /// dumb buffers).
    ENOSYS,
    /// Too many open files (no descriptor free for an exported fd).
    EMFILE,
    /// Is a directory (opening a directory as a device node).
    EISDIR,
    /// Not a directory (a path through a file).
    ENOTDIR,
    /// No such device or address (a device node with no driver behind it).
    ENXIO,
    /// Read-only file system.
    EROFS,
}

impl Errno {
    /// The calling thread's last OS error (`EIO` if there is none).
    pub fn last() -> Errno {
        Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({})",
            self.name(),
            std::io::Error::from_raw_os_error(self.0)
        )
    }
}

impl std::error::Error for Errno {}

impl From<Errno> for std::io::Error {
    fn from(errno: Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(errno.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_are_linuxs() {
        assert_eq!(Errno::EINVAL.0, 22);
        assert_eq!(Errno::ENOENT.0, 2);
        assert_eq!(Errno::ETIME.0, 62);
        assert_eq!(Errno::ETIMEDOUT.0, 110);
        assert_eq!(format!("{:?}", Errno::EFAULT), "EFAULT(14)");
        assert_eq!(Errno(4095).name(), "E?");
        assert!(Errno::ENODEV.to_string().starts_with("ENODEV ("));
    }
}
