//! The driver's errors: what went wrong and the limit that was broken.

use crate::kernel::Errno;

/// A driver operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An ioctl failed.
    #[error("{ioctl} failed: {errno}")]
    Kernel {
        /// Which ioctl.
        ioctl: &'static str,
        /// What the kernel said.
        errno: Errno,
    },
    /// The device node cannot be opened.
    #[error("cannot open {}: {errno}", path.display())]
    Open {
        /// The path given.
        path: std::path::PathBuf,
        /// Why.
        errno: Errno,
    },
    /// The file is not a DRM device node: it refused DRM's VERSION ioctl.
    #[error("{} is not a DRM device node (DRM_IOCTL_VERSION: {errno})", path.display())]
    NotDrmNode {
        /// The path given.
        path: std::path::PathBuf,
        /// What VERSION returned.
        errno: Errno,
    },
    /// The simulated device could not be created.
    #[error("the simulated device could not be created: {reason}")]
    SimulatedDevice {
        /// Why (the kmd's probe error).
        reason: String,
    },
    /// The file is not an asahi device.
    #[error("{node} is driven by {driver:?}, not asahi")]
    WrongDriver {
        /// The node's path, or "the DRM file" for a descriptor.
        node: String,
        /// The driver name VERSION reported.
        driver: String,
    },
    /// A GPU address range is full.
    #[error("no {requested_bytes} bytes of GPU address space left in the {region} region ({free_bytes} free)")]
    OutOfAddressSpace {
        /// Which region.
        region: &'static str,
        /// What was asked for.
        requested_bytes: u64,
        /// What is free (possibly fragmented).
        free_bytes: u64,
    },
    /// An access past the end of a buffer.
    #[error("{len_bytes} bytes at offset {offset_bytes} do not fit in {size_bytes} bytes")]
    OutOfBounds {
        /// Start of the access.
        offset_bytes: u64,
        /// Length of the access.
        len_bytes: u64,
        /// Size of the buffer.
        size_bytes: u64,
    },
    /// A shader did not assemble.
    #[error("shader assembly failed: {0}")]
    Assembly(String),
    /// Submitted work failed on the GPU: the fence signalled with an error
    /// (`EIO` a fault, `ETIMEDOUT` the watchdog, `ECANCELED`, `ENODEV`).
    #[error("GPU work failed: {errno}")]
    GpuFault {
        /// The fence's error.
        errno: Errno,
    },
    /// A wait did not finish in time.
    #[error("the wait timed out after {timeout_ms} ms")]
    WaitTimeout {
        /// The timeout.
        timeout_ms: u64,
    },
    /// A descriptor heap is full.
    #[error("the {heap} heap is full ({capacity} entries)")]
    HeapFull {
        /// Which heap.
        heap: &'static str,
        /// Its capacity.
        capacity: u64,
    },
    /// The request is outside what the driver supports.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl Error {
    /// The errno a failed ioctl gave, if that is what this is.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Kernel { errno, .. }
            | Error::GpuFault { errno }
            | Error::Open { errno, .. }
            | Error::NotDrmNode { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

/// Attaches the ioctl's name to a kernel error.
pub(crate) fn kernel(ioctl: &'static str) -> impl FnOnce(Errno) -> Error {
    move |errno| Error::Kernel { ioctl, errno }
}
