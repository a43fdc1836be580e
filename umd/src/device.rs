//! The device: an open asahi DRM file, its parameters, one GPU VM and the
//! layout of that VM's address space, and buffer objects in it.
//!
//! The address space follows Mesa's asahi driver: a 4 GiB region whose
//! base is the queue's `usc_exec_base` (shader code and USC control words
//! are 32-bit offsets into it), a general heap above it for everything
//! else, and the kernel's range (where the kmd maps the parameter buffer)
//! at the top of the user range.

use std::sync::{Arc, Mutex, MutexGuard};

use agx_uapi::asahi::{
    self, BindFlags, GemBindOp, GemCreate, GemFlags, GemMmapOffset, GetParams, ParamsGlobal,
    VmBind, VmCreate, DRM_ASAHI_PARAM_GROUP_GLOBAL,
};
use agx_uapi::drm::{self, GemClose, Version};
use zerocopy::IntoBytes;

use crate::alloc::VaRange;
use crate::error::{kernel, Error};
use crate::kernel::{call, CpuMapping, Errno, Kernel};

/// GPU page size.
pub const PAGE_BYTES: u64 = 16 * 1024;
/// Size of the USC region.
pub const USC_REGION_BYTES: u64 = 4 << 30;

/// The kernel range the VM gives the kmd (for the parameter buffer): 32
/// GiB, or the kernel's `vm_kernel_min_size` if larger, as Mesa sizes it.
/// The kmd maps parameter buffers into half of it, so the upstream
/// maximum of 6579 blocks (822 MiB) per queue fits many times over; the
/// 512 MiB minimum alone held 2047 blocks in all.
pub const KERNEL_RANGE_BYTES: u64 = 32 << 30;

/// Where a buffer lives in the address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Region {
    /// The general heap.
    General,
    /// The 4 GiB USC region (shader code, USC control words, coefficient
    /// binding tables).
    Usc,
}

/// How the CPU sees a buffer's memory, in the manner of a graphics HAL's
/// memory types, mapped onto the GEM flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryType {
    /// GPU memory the CPU rarely touches; private to this device's VM
    /// (`VM_PRIVATE`, never exported).
    DeviceLocal,
    /// CPU-visible, write-combined: for uploads the CPU writes once.
    HostVisible,
    /// CPU-visible, write-back cached (`WRITEBACK`): for read-back.
    HostCached,
}

/// What to create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferDesc {
    /// Size in bytes (rounded up to whole pages).
    pub size_bytes: u64,
    /// Memory type.
    pub memory: MemoryType,
    /// Address-space region.
    pub region: Region,
    /// Whether the GPU may write it (it may always read).
    pub gpu_write: bool,
}

#[cfg(feature = "sim")]
type SimHandle = Option<Arc<crate::sim::SimKernel>>;
#[cfg(not(feature = "sim"))]
type SimHandle = ();

pub(crate) struct DeviceInner {
    kernel: Arc<dyn Kernel>,
    #[cfg(feature = "sim")]
    sim: Option<Arc<crate::sim::SimKernel>>,
    params: ParamsGlobal,
    vm_id: u32,
    usc_base: u64,
    general: Mutex<VaRange>,
    usc: Mutex<VaRange>,
    /// Everything mapped in the VM with a CPU view of it: va -> (length,
    /// GPU-writable, the mapping). For captures.
    live: Mutex<std::collections::BTreeMap<u64, LiveMapping>>,
    /// The capture being written, if any.
    capture: Mutex<Option<agx_capture::CaptureWriter<std::io::BufWriter<std::fs::File>>>>,
}

/// A mapped range the capture can read.
struct LiveMapping {
    len_bytes: u64,
    gpu_write: bool,
    map: std::sync::Weak<dyn CpuMapping>,
}

impl std::fmt::Debug for DeviceInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("vm_id", &self.vm_id)
            .field("usc_base", &format_args!("{:#x}", self.usc_base))
            .finish_non_exhaustive()
    }
}

/// An open device with its GPU VM. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Device {
    inner: Arc<DeviceInner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Device {
    /// Opens a real asahi DRM node (for example `/dev/dri/renderD128`).
    /// Errors name the path: [`Error::Open`] with the OS's reason,
    /// [`Error::NotDrmNode`] for a file that is not a DRM node (its
    /// VERSION ioctl fails with `ENOTTY` or `EINVAL`), and the driver
    /// name of a DRM node that is not asahi.
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Device, Error> {
        let path = path.as_ref();
        let node = crate::sys::DrmNode::open(path).map_err(|errno| Error::Open {
            path: path.to_owned(),
            errno,
        })?;
        Device::with_kernel(Arc::new(node), SimHandle::default()).map_err(|error| match error {
            Error::Kernel {
                ioctl: "VERSION",
                errno,
            } if errno == Errno::ENOTTY || errno == Errno::EINVAL => Error::NotDrmNode {
                path: path.to_owned(),
                errno,
            },
            Error::WrongDriver { driver, .. } => Error::WrongDriver {
                node: path.display().to_string(),
                driver,
            },
            error => error,
        })
    }

    /// Uses a DRM file the caller already has open (as Mesa's drivers take
    /// the descriptor their loader opened, or one inherited from a parent
    /// process): this device makes its own VM and objects in that file.
    pub fn from_fd(fd: std::os::fd::OwnedFd) -> Result<Device, Error> {
        Device::with_kernel(
            Arc::new(crate::sys::DrmNode::from_fd(fd)),
            SimHandle::default(),
        )
    }

    /// Boots a simulated device (kmd model, firmware and GPU simulator, in
    /// this process) and opens it; every request still goes through the
    /// ioctl bytes a real node gets.
    #[cfg(feature = "sim")]
    pub fn open_simulated(config: agx_sim::SystemConfig) -> Result<Device, Error> {
        let sim =
            Arc::new(
                crate::sim::SimKernel::boot(config).map_err(|e| Error::SimulatedDevice {
                    reason: e.to_string(),
                })?,
            );
        Device::with_kernel(sim.clone(), Some(sim))
    }

    /// Opens another file on an already booted simulated device (that of
    /// [`Device::simulated`]): another client of the same GPU, with its
    /// own VM, objects and queues, as a second process would be.
    #[cfg(feature = "sim")]
    pub fn open_simulated_on(system: &agx_sim::System) -> Result<Device, Error> {
        let sim = Arc::new(crate::sim::SimKernel::open_on(system));
        Device::with_kernel(sim.clone(), Some(sim))
    }

    fn with_kernel(kernel_file: Arc<dyn Kernel>, sim: SimHandle) -> Result<Device, Error> {
        #[cfg(not(feature = "sim"))]
        let () = sim;
        let k = &*kernel_file;
        // The driver name: asahi, or we are talking to the wrong device.
        let mut name = [0u8; 64];
        let mut version = Version {
            name_len: name.len() as u64,
            name: name.as_mut_ptr() as u64,
            ..Version::default()
        };
        call(k, drm::DRM_IOCTL_VERSION, &mut version).map_err(kernel("VERSION"))?;
        let driver_len = (version.name_len as usize).min(name.len());
        let driver = String::from_utf8_lossy(&name[..driver_len]).into_owned();
        if driver != "asahi" {
            return Err(Error::WrongDriver {
                node: "the DRM file".into(),
                driver,
            });
        }
        let mut params = ParamsGlobal::default();
        let mut get = GetParams {
            param_group: DRM_ASAHI_PARAM_GROUP_GLOBAL,
            pad: 0,
            pointer: params.as_mut_bytes().as_mut_ptr() as u64,
            size: size_of::<ParamsGlobal>() as u64,
        };
        call(k, asahi::DRM_IOCTL_ASAHI_GET_PARAMS, &mut get).map_err(kernel("GET_PARAMS"))?;
        // The layout: the USC region at the first 4 GiB boundary, the
        // kernel's range at the top, the general heap between.
        let layout_err = || {
            Error::Unsupported(format!(
                "a VM range of {:#x}..{:#x}",
                params.vm_start, params.vm_end
            ))
        };
        let usc_base = params
            .vm_start
            .checked_next_multiple_of(USC_REGION_BYTES)
            .ok_or_else(layout_err)?;
        let kernel_end = params.vm_end / PAGE_BYTES * PAGE_BYTES;
        let kernel_start = kernel_end
            .checked_sub(params.vm_kernel_min_size.max(KERNEL_RANGE_BYTES))
            .map(|s| s / PAGE_BYTES * PAGE_BYTES)
            .ok_or_else(|| {
                Error::Unsupported(format!(
                    "a kernel range of {:#x} bytes below {:#x}",
                    params.vm_kernel_min_size.max(KERNEL_RANGE_BYTES),
                    params.vm_end
                ))
            })?;
        let general_start = usc_base
            .checked_add(USC_REGION_BYTES)
            .ok_or_else(layout_err)?;
        if kernel_start <= general_start {
            return Err(Error::Unsupported(format!(
                "a VM range of {:#x}..{:#x} is too small",
                params.vm_start, params.vm_end
            )));
        }
        let mut create = VmCreate {
            kernel_start,
            kernel_end,
            ..VmCreate::default()
        };
        call(k, asahi::DRM_IOCTL_ASAHI_VM_CREATE, &mut create).map_err(kernel("VM_CREATE"))?;
        tracing::debug!(
            vm_id = create.vm_id,
            usc_base = format_args!("{usc_base:#x}"),
            kernel = format_args!("{kernel_start:#x}..{kernel_end:#x}"),
            "device opened"
        );
        Device {
            inner: Arc::new(DeviceInner {
                kernel: kernel_file,
                #[cfg(feature = "sim")]
                sim,
                params,
                vm_id: create.vm_id,
                usc_base,
                general: Mutex::new(VaRange::new(general_start..kernel_start, PAGE_BYTES)),
                usc: Mutex::new(VaRange::new(
                    usc_base + PAGE_BYTES..usc_base + USC_REGION_BYTES,
                    PAGE_BYTES,
                )),
                live: Mutex::new(std::collections::BTreeMap::new()),
                capture: Mutex::new(None),
            }),
        }
        .with_capture_from_env()
    }

    fn with_capture_from_env(self) -> Result<Device, Error> {
        if let Some(path) = std::env::var_os("AGX_UMD_CAPTURE") {
            self.capture_to(std::path::Path::new(&path))
                .map_err(|e| Error::Unsupported(format!("capture to {path:?}: {e}")))?;
        }
        Ok(self)
    }

    /// Records every submission from now on, with the device parameters
    /// and every range this device has mapped, into a capture file
    /// (`Documentation/capture-format.md`). Works on a real node as on the
    /// simulated device. `AGX_UMD_CAPTURE=FILE` starts one when the device
    /// is opened.
    pub fn capture_to(&self, path: &std::path::Path) -> std::io::Result<()> {
        let file = std::fs::File::create(path)?;
        let mut writer = agx_capture::CaptureWriter::new(std::io::BufWriter::new(file))?;
        writer.params(self.params())?;
        *lock(&self.inner.capture) = Some(writer);
        Ok(())
    }

    /// Stops capturing.
    pub fn stop_capture(&self) {
        *lock(&self.inner.capture) = None;
    }

    /// Notes a CPU-visible mapping of the VM (for captures).
    pub(crate) fn register_mapping(
        &self,
        va: u64,
        len_bytes: u64,
        gpu_write: bool,
        map: &std::sync::Arc<dyn CpuMapping>,
    ) {
        lock(&self.inner.live).insert(
            va,
            LiveMapping {
                len_bytes,
                gpu_write,
                map: std::sync::Arc::downgrade(map),
            },
        );
    }

    /// Forgets a mapping noted with [`Device::register_mapping`].
    pub(crate) fn unregister_mapping(&self, va: u64) {
        lock(&self.inner.live).remove(&va);
    }

    /// Records a submission in the capture, if one is running.
    pub(crate) fn capture_submission(
        &self,
        submission: impl FnOnce(Vec<agx_capture::MemoryRange>) -> agx_capture::Submission,
    ) {
        let mut capture = lock(&self.inner.capture);
        let Some(writer) = capture.as_mut() else {
            return;
        };
        let memory = lock(&self.inner.live)
            .iter()
            .filter_map(|(&va, m)| {
                let map = m.map.upgrade()?;
                let mut bytes = vec![0u8; m.len_bytes as usize];
                if let Err(errno) = map.read(0, &mut bytes) {
                    tracing::warn!(va = format_args!("{va:#x}"), %errno, "a mapping could not be read; the capture lacks it");
                    return None;
                }
                Some(agx_capture::MemoryRange {
                    va,
                    read: true,
                    write: m.gpu_write,
                    bytes,
                })
            })
            .collect();
        if let Err(e) = writer.submission(&submission(memory)) {
            tracing::error!(%e, "capture write failed; capture stopped");
            *capture = None;
        }
    }

    /// The kernel file.
    pub(crate) fn kernel(&self) -> &dyn Kernel {
        &*self.inner.kernel
    }

    /// The simulated system behind this device, if it is simulated.
    #[cfg(feature = "sim")]
    pub fn simulated(&self) -> Option<&crate::sim::SimKernel> {
        self.inner.sim.as_deref()
    }

    /// The device's parameters (GET_PARAMS).
    pub fn params(&self) -> &ParamsGlobal {
        &self.inner.params
    }

    /// The VM every buffer and queue of this device uses.
    pub fn vm_id(&self) -> u32 {
        self.inner.vm_id
    }

    /// The base of the USC region (queues' `usc_exec_base`).
    pub fn usc_base(&self) -> u64 {
        self.inner.usc_base
    }

    /// Reserves `len_bytes` of general address space without backing it
    /// (for heaps that bind pages as they grow).
    pub fn reserve_va(&self, len_bytes: u64, align_bytes: u64) -> Result<u64, Error> {
        let mut va = lock(&self.inner.general);
        va.alloc(len_bytes, align_bytes)
            .ok_or(Error::OutOfAddressSpace {
                region: "general",
                requested_bytes: len_bytes,
                free_bytes: va.free_bytes(),
            })
    }

    /// Returns a range [`Device::reserve_va`] gave. A range that is not
    /// reserved (already released, or never given) is refused, so the
    /// same addresses are never handed out twice.
    pub fn release_va(&self, va: u64, len_bytes: u64) -> Result<(), Error> {
        if lock(&self.inner.general).free(va, len_bytes) {
            Ok(())
        } else {
            Err(Error::Unsupported(format!(
                "releasing {len_bytes:#x} bytes at {va:#x}, which are not reserved"
            )))
        }
    }

    /// Binds `len_bytes` of `handle` from `offset_bytes` at `va` (or
    /// unbinds the range when `handle` is `None`).
    pub fn bind(
        &self,
        handle: Option<u32>,
        va: u64,
        len_bytes: u64,
        offset_bytes: u64,
        gpu_write: bool,
    ) -> Result<(), Error> {
        let op = match handle {
            Some(handle) => GemBindOp {
                flags: (if gpu_write {
                    BindFlags::READ | BindFlags::WRITE
                } else {
                    BindFlags::READ
                })
                .bits(),
                handle,
                offset: offset_bytes,
                range: len_bytes,
                addr: va,
            },
            None => GemBindOp {
                flags: BindFlags::UNBIND.bits(),
                range: len_bytes,
                addr: va,
                ..GemBindOp::default()
            },
        };
        let mut bind = VmBind {
            vm_id: self.inner.vm_id,
            num_binds: 1,
            stride: size_of::<GemBindOp>() as u32,
            pad: 0,
            userptr: &op as *const GemBindOp as u64,
        };
        call(self.kernel(), asahi::DRM_IOCTL_ASAHI_VM_BIND, &mut bind).map_err(kernel("VM_BIND"))
    }

    /// Creates a GEM object of `size_bytes` with `memory`'s flags; returns
    /// its handle and rounded size.
    pub fn create_object(&self, size_bytes: u64, memory: MemoryType) -> Result<(u32, u64), Error> {
        let size = size_bytes
            .max(1)
            .checked_next_multiple_of(PAGE_BYTES)
            .ok_or_else(|| Error::Unsupported(format!("an object of {size_bytes} bytes")))?;
        let (flags, vm_id) = match memory {
            MemoryType::DeviceLocal => (GemFlags::VM_PRIVATE, self.inner.vm_id),
            MemoryType::HostVisible => (GemFlags::empty(), 0),
            MemoryType::HostCached => (GemFlags::WRITEBACK, 0),
        };
        let mut create = GemCreate {
            size,
            flags: flags.bits(),
            vm_id,
            ..GemCreate::default()
        };
        call(
            self.kernel(),
            asahi::DRM_IOCTL_ASAHI_GEM_CREATE,
            &mut create,
        )
        .map_err(kernel("GEM_CREATE"))?;
        Ok((create.handle, size))
    }

    /// Closes a GEM handle.
    pub fn close_object(&self, handle: u32) {
        let mut close = GemClose { handle, pad: 0 };
        if let Err(e) = call(self.kernel(), drm::DRM_IOCTL_GEM_CLOSE, &mut close) {
            tracing::warn!(handle, %e, "GEM_CLOSE failed");
        }
    }

    /// Maps GEM object `handle` (`size_bytes`) for the CPU.
    pub fn map_object(&self, handle: u32, size_bytes: u64) -> Result<Box<dyn CpuMapping>, Error> {
        let mut offset = GemMmapOffset {
            handle,
            ..GemMmapOffset::default()
        };
        call(
            self.kernel(),
            asahi::DRM_IOCTL_ASAHI_GEM_MMAP_OFFSET,
            &mut offset,
        )
        .map_err(kernel("GEM_MMAP_OFFSET"))?;
        self.kernel()
            .map(offset.offset, size_bytes)
            .map_err(kernel("mmap"))
    }

    /// Creates a buffer: a GEM object, mapped for the CPU and bound in the
    /// device's VM.
    pub fn create_buffer(&self, desc: &BufferDesc) -> Result<Buffer, Error> {
        let (handle, size) = self.create_object(desc.size_bytes, desc.memory)?;
        let result = (|| {
            let map: Arc<dyn CpuMapping> = Arc::from(self.map_object(handle, size)?);
            let (range, name) = match desc.region {
                Region::General => (&self.inner.general, "general"),
                Region::Usc => (&self.inner.usc, "USC"),
            };
            let va = {
                let mut range = lock(range);
                range
                    .alloc(size, PAGE_BYTES)
                    .ok_or(Error::OutOfAddressSpace {
                        region: name,
                        requested_bytes: size,
                        free_bytes: range.free_bytes(),
                    })?
            };
            if let Err(e) = self.bind(Some(handle), va, size, 0, desc.gpu_write) {
                let _ = lock(range).free(va, size);
                return Err(e);
            }
            Ok((map, va))
        })();
        match result {
            Ok((map, va)) => Ok({
                self.register_mapping(va, size, desc.gpu_write, &map);
                Buffer {
                    device: self.clone(),
                    handle,
                    va,
                    size_bytes: size,
                    region: desc.region,
                    map,
                }
            }),
            Err(e) => {
                self.close_object(handle);
                Err(e)
            }
        }
    }

    /// Creates a CPU-visible buffer in the general heap holding `data`.
    pub fn upload(&self, data: &[u8], gpu_write: bool) -> Result<Buffer, Error> {
        let buffer = self.create_buffer(&BufferDesc {
            size_bytes: data.len() as u64,
            memory: MemoryType::HostVisible,
            region: Region::General,
            gpu_write,
        })?;
        buffer.write(0, data)?;
        Ok(buffer)
    }
}

/// A buffer object: GEM memory bound at a GPU address and mapped for the
/// CPU. Unbound and closed on drop (the kernel keeps the pages alive for
/// work still using them).
#[derive(Debug)]
pub struct Buffer {
    device: Device,
    handle: u32,
    va: u64,
    size_bytes: u64,
    region: Region,
    map: Arc<dyn CpuMapping>,
}

impl Buffer {
    /// GPU virtual address.
    pub fn va(&self) -> u64 {
        self.va
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// GEM handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// For buffers in the USC region: the offset from `usc_exec_base`.
    pub fn usc_offset(&self) -> Option<u32> {
        (self.region == Region::Usc)
            .then(|| u32::try_from(self.va - self.device.usc_base()).ok())
            .flatten()
    }

    fn check(&self, offset_bytes: u64, len: usize) -> Result<(), Error> {
        match offset_bytes.checked_add(len as u64) {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(Error::OutOfBounds {
                offset_bytes,
                len_bytes: len as u64,
                size_bytes: self.size_bytes,
            }),
        }
    }

    /// Writes `data` at `offset_bytes`.
    pub fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<(), Error> {
        self.check(offset_bytes, data.len())?;
        self.map.write(offset_bytes, data).map_err(kernel("write"))
    }

    /// Reads `buf.len()` bytes at `offset_bytes`.
    pub fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.check(offset_bytes, buf.len())?;
        self.map.read(offset_bytes, buf).map_err(kernel("read"))
    }

    /// Reads the whole buffer.
    pub fn read_all(&self) -> Result<Vec<u8>, Error> {
        let mut out = vec![0u8; self.size_bytes as usize];
        self.read(0, &mut out)?;
        Ok(out)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.device.unregister_mapping(self.va);
        if let Err(e) = self.device.bind(None, self.va, self.size_bytes, 0, false) {
            // Still mapped: the addresses must not go to another buffer.
            tracing::warn!(va = format_args!("{:#x}", self.va), %e, "unbind failed; addresses leaked");
            self.device.close_object(self.handle);
            return;
        }
        let range = match self.region {
            Region::General => &self.device.inner.general,
            Region::Usc => &self.device.inner.usc,
        };
        if !lock(range).free(self.va, self.size_bytes) {
            tracing::error!(
                va = format_args!("{:#x}", self.va),
                "buffer addresses freed twice"
            );
        }
        self.device.close_object(self.handle);
    }
}
