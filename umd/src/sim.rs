//! The simulated side of the kernel boundary: an in-process
//! [`agx_sim::System`] (kmd model, firmware and GPU simulator) and a file
//! opened on it. Ioctls pass the same bytes a real node gets, with user
//! pointers into this process; CPU mappings are the GEM objects' own
//! pages.

use std::os::fd::AsFd;
use std::sync::Arc;

use agx_sim::kmd::gem::GemObject;
use agx_sim::File;
use agx_sim::{System, SystemConfig};
use agx_uapi::drm::{self, SyncFileInfo, SyncobjHandle, SyncobjHandleToFdFlags};
use zerocopy::IntoBytes;

use crate::kernel::{fence_status_of, CpuMapping, Errno, FenceStatus, Kernel};

/// A file on a simulated device.
#[derive(Debug)]
pub struct SimKernel {
    // Drop order: the file before the system that owns the device.
    file: File,
    system: System,
}

impl SimKernel {
    /// Boots a simulated system with `config` and opens a file on it.
    pub fn boot(config: SystemConfig) -> Result<SimKernel, agx_sim::ProbeError> {
        let system = System::new(config)?;
        let file = system.open();
        Ok(SimKernel { file, system })
    }

    /// Opens another file on `system`'s device: another client of the
    /// same GPU.
    pub fn open_on(system: &System) -> SimKernel {
        SimKernel {
            file: system.open(),
            system: system.clone(),
        }
    }

    /// The simulated system (for statistics and debugging tools).
    pub fn system(&self) -> &System {
        &self.system
    }

    /// The kmd-side file (for statistics such as a queue's parameter
    /// buffer).
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl Kernel for SimKernel {
    fn ioctl(&self, request: u32, arg: &mut [u8]) -> Result<(), Errno> {
        if agx_uapi::ioctl::ioc_size_bytes(request) != arg.len() {
            return Err(Errno::EINVAL);
        }
        self.file
            .ioctl(u64::from(request), arg.as_mut_ptr() as u64)
            .map(|_| ())
    }

    fn map(&self, mmap_offset: u64, len_bytes: u64) -> Result<Box<dyn CpuMapping>, Errno> {
        let (object, within) = self.file.mmap_object(mmap_offset, len_bytes)?;
        Ok(Box::new(SimMapping {
            object,
            within_bytes: within,
            len_bytes,
        }))
    }

    fn fence_status(&self, handle: u32) -> Result<FenceStatus, Errno> {
        let mut export = SyncobjHandle {
            handle,
            flags: SyncobjHandleToFdFlags::EXPORT_SYNC_FILE.bits(),
            ..SyncobjHandle::default()
        };
        self.ioctl(drm::DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD, export.as_mut_bytes())?;
        let sync_file = crate::sys::returned_fd(export.fd)?;
        let mut info = SyncFileInfo::default();
        self.system
            .device()
            .exports()
            .sync_file_info(sync_file.as_fd(), &mut info)?;
        Ok(fence_status_of(info.status))
    }
}

/// A CPU view of a simulated GEM object: its backing pages.
#[derive(Debug)]
struct SimMapping {
    object: Arc<GemObject>,
    within_bytes: u64,
    len_bytes: u64,
}

impl SimMapping {
    fn at(&self, offset_bytes: u64, len: usize) -> Result<u64, Errno> {
        match offset_bytes.checked_add(len as u64) {
            Some(end) if end <= self.len_bytes => Ok(self.within_bytes + offset_bytes),
            _ => Err(Errno::EFAULT),
        }
    }
}

impl CpuMapping for SimMapping {
    fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<(), Errno> {
        let at = self.at(offset_bytes, data.len())?;
        self.object.memory().write(at, data).ok_or(Errno::EFAULT)
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), Errno> {
        let at = self.at(offset_bytes, buf.len())?;
        self.object.memory().read(at, buf).ok_or(Errno::EFAULT)
    }
}
