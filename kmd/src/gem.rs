//! GEM buffer objects.
//!
//! A GEM object is a range of RAM a client allocated: it is mapped into
//! GPU VMs, mapped by the CPU through the DRM file (at a fake mmap
//! offset), and exported to other files and processes as a PRIME fd. It
//! lives while anything refers to it (a handle in any file, a VM mapping,
//! an export, in-flight work); its pages are freed exactly once, when the
//! last reference goes.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use agx_uapi::asahi::GemFlags;

use crate::mem::{AllocError, PhysRange};
use crate::stats::Counters;

/// Mmap offsets are `id << MMAP_OFFSET_SHIFT`, so every object (up to
/// 1 TiB) has its own window in the DRM file.
pub const MMAP_OFFSET_SHIFT: u32 = 40;

/// Identifies the VM a `VM_PRIVATE` object belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VmKey {
    /// The file that created the VM.
    pub file_id: u64,
    /// The VM's id in that file.
    pub vm_id: u32,
}

/// The GEM memory and the device descriptors one client process's
/// objects hold, against its limits (a memory cgroup's job on Linux, and
/// the device process's own descriptor limit): one client cannot take all
/// of RAM, or every descriptor of the device, from the others. Every DRM
/// file a process opens charges the same account (the process that
/// opened a file, also when a child it forked uses it); kernel memory a
/// file causes (page tables, parameter buffers) is not charged. A charge
/// goes when its object does, whoever holds the object last.
#[derive(Debug)]
pub struct ClientAccount {
    used_bytes: std::sync::atomic::AtomicU64,
    limit_bytes: u64,
    /// Host descriptors the device keeps for the client's objects (each
    /// exportable or imported object's memfd), against their limit.
    descriptors: std::sync::atomic::AtomicU64,
    descriptor_limit: u64,
    /// The device's count of such descriptors over every client.
    device: Arc<DeviceDescriptors>,
}

/// The host descriptors the device keeps for all clients' objects,
/// against the device-wide limit
/// (`DeviceConfig::device_descriptor_limit`): whatever the clients hold
/// together, the device keeps descriptors for its files, call channels
/// and slabs.
#[derive(Debug)]
pub struct DeviceDescriptors {
    used: std::sync::atomic::AtomicU64,
    limit: u64,
}

impl DeviceDescriptors {
    /// None held, at most `limit`.
    pub fn new(limit: u64) -> DeviceDescriptors {
        DeviceDescriptors {
            used: std::sync::atomic::AtomicU64::new(0),
            limit,
        }
    }

    /// Held now, over every client.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }
}

impl ClientAccount {
    /// An account with nothing charged, holding at most `limit_bytes` of
    /// objects and `descriptor_limit` objects with a device descriptor,
    /// which also count against `device`'s.
    pub fn new(
        limit_bytes: u64,
        descriptor_limit: u64,
        device: Arc<DeviceDescriptors>,
    ) -> ClientAccount {
        ClientAccount {
            used_bytes: std::sync::atomic::AtomicU64::new(0),
            limit_bytes,
            descriptors: std::sync::atomic::AtomicU64::new(0),
            descriptor_limit,
            device,
        }
    }

    /// Objects with a device descriptor the client holds now.
    pub fn descriptors(&self) -> u64 {
        self.descriptors.load(Ordering::Relaxed)
    }

    /// Charges one device descriptor (an object whose memfd the device
    /// keeps), or refuses past the client's limit or the device's.
    pub(crate) fn charge_descriptor(self: &Arc<Self>) -> Result<DescriptorCharge, GemError> {
        self.descriptors
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                (used < self.descriptor_limit).then_some(used + 1)
            })
            .map_err(|used| GemError::OverClientDescriptors {
                used,
                limit: self.descriptor_limit,
            })?;
        let device = &self.device;
        if let Err(used) = device
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                (used < device.limit).then_some(used + 1)
            })
        {
            self.descriptors.fetch_sub(1, Ordering::Relaxed);
            return Err(GemError::OverDeviceDescriptors {
                used,
                limit: device.limit,
            });
        }
        Ok(DescriptorCharge {
            account: Arc::clone(self),
        })
    }

    /// Bytes charged now.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Ordering::Relaxed)
    }

    /// The limit.
    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// Charges `bytes`, or refuses if that would pass the limit.
    pub(crate) fn charge(self: &Arc<Self>, bytes: u64) -> Result<Charge, GemError> {
        self.used_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&n| n <= self.limit_bytes)
            })
            .map_err(|used_bytes| GemError::OverClientLimit {
                requested_bytes: bytes,
                used_bytes,
                limit_bytes: self.limit_bytes,
            })?;
        Ok(Charge {
            account: Arc::clone(self),
            bytes,
        })
    }
}

/// What one DRM file's objects draw on: its process's account, and the
/// file's own slabs, from which its small private objects are cut (a CPU
/// mapping of one holds the slab's memfd, which no other file's objects
/// share).
#[derive(Debug)]
pub struct FileMemory {
    account: Arc<ClientAccount>,
    pub(crate) slabs: crate::mem::phys::Slabs,
}

impl FileMemory {
    /// The memory of a file that charges `account`.
    pub fn new(account: Arc<ClientAccount>) -> FileMemory {
        FileMemory {
            account,
            slabs: crate::mem::phys::Slabs::default(),
        }
    }

    /// The account of the process that opened the file.
    pub fn account(&self) -> &Arc<ClientAccount> {
        &self.account
    }
}

/// Bytes charged to a client's account, given back on drop.
#[derive(Debug)]
pub(crate) struct Charge {
    account: Arc<ClientAccount>,
    bytes: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.account
            .used_bytes
            .fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// A device descriptor charged to a client's account, given back on drop.
#[derive(Debug)]
pub(crate) struct DescriptorCharge {
    account: Arc<ClientAccount>,
}

impl Drop for DescriptorCharge {
    fn drop(&mut self) {
        self.account.descriptors.fetch_sub(1, Ordering::Relaxed);
        self.account.device.used.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A buffer object.
#[derive(Debug)]
pub struct GemObject {
    id: u64,
    size_bytes: u64,
    flags: GemFlags,
    private_vm: Option<VmKey>,
    memory: Arc<PhysRange>,
    counters: Arc<Counters>,
    /// Handles to it in all files: its flink name lives while there is
    /// one (`drm_gem_object.handle_count`).
    handle_count: std::sync::atomic::AtomicU32,
    /// Its device-wide GEM_FLINK name (0: none).
    flink_name: std::sync::atomic::AtomicU32,
    /// What the object costs the file that created (or imported) it.
    _charge: Charge,
    /// The device descriptor it costs that file, if it has one.
    _descriptor: Option<DescriptorCharge>,
    /// The fences of unfinished work on it that userspace declared
    /// through its dma-buf (the `dma_buf` module).
    reservation: crate::sync::Reservation,
}

impl GemObject {
    pub(crate) fn new(
        id: u64,
        flags: GemFlags,
        private_vm: Option<VmKey>,
        memory: Arc<PhysRange>,
        counters: Arc<Counters>,
        charge: Charge,
        descriptor: Option<DescriptorCharge>,
    ) -> GemObject {
        counters.gem_objects.fetch_add(1, Ordering::Relaxed);
        GemObject {
            id,
            size_bytes: memory.len_bytes(),
            flags,
            private_vm,
            memory,
            counters,
            handle_count: std::sync::atomic::AtomicU32::new(0),
            flink_name: std::sync::atomic::AtomicU32::new(0),
            _charge: charge,
            _descriptor: descriptor,
            reservation: crate::sync::Reservation::default(),
        }
    }

    /// Its reservation: the fences its dma-buf's users declared.
    pub fn reservation(&self) -> &crate::sync::Reservation {
        &self.reservation
    }

    /// A file made a handle to it.
    pub(crate) fn handle_opened(&self) {
        self.handle_count.fetch_add(1, Ordering::Relaxed);
    }

    /// A file closed a handle to it; with the last one its flink name
    /// goes (`drm_gem_object_handle_free`).
    pub(crate) fn handle_closed(&self) {
        if self.handle_count.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.flink_name.store(0, Ordering::Relaxed);
        }
    }

    /// Handles to it in all files.
    pub fn handle_count(&self) -> u32 {
        self.handle_count.load(Ordering::Relaxed)
    }

    /// Its flink name, if it has one.
    pub(crate) fn flink_name(&self) -> Option<u32> {
        match self.flink_name.load(Ordering::Relaxed) {
            0 => None,
            name => Some(name),
        }
    }

    pub(crate) fn set_flink_name(&self, name: u32) {
        self.flink_name.store(name, Ordering::Relaxed);
    }

    /// The device-wide id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The size in bytes (whole pages).
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// The creation flags.
    pub fn flags(&self) -> GemFlags {
        self.flags
    }

    /// The VM a `VM_PRIVATE` object is private to.
    pub fn private_vm(&self) -> Option<VmKey> {
        self.private_vm
    }

    /// The fake offset to mmap the object at through the DRM file.
    pub fn mmap_offset(&self) -> u64 {
        self.id << MMAP_OFFSET_SHIFT
    }

    /// The physical memory.
    pub fn memory(&self) -> &Arc<PhysRange> {
        &self.memory
    }
}

impl Drop for GemObject {
    fn drop(&mut self) {
        self.counters.gem_objects.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a CPU mapping of the DRM file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MmapError {
    /// No object's mmap window starts at this offset.
    #[error("no object at mmap offset {offset:#x}")]
    NoObject {
        /// The offset.
        offset: u64,
    },
    /// The mapping is empty or runs past the object's end.
    #[error("{len_bytes} bytes at {within_bytes:#x} do not fit the {size_bytes:#x}-byte object")]
    OutsideObject {
        /// Where in the object the mapping starts.
        within_bytes: u64,
        /// Its length.
        len_bytes: u64,
        /// The object's size.
        size_bytes: u64,
    },
    /// The object exists but this file has no handle to it.
    #[error("this file has no handle to the object at {offset:#x}")]
    NoHandle {
        /// The offset.
        offset: u64,
    },
}

/// Why GEM_BIND_OBJECT failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindObjectError {
    /// A pad or MBZ field is not zero.
    #[error("{field} must be zero")]
    MustBeZero {
        /// The field.
        field: &'static str,
    },
    /// `op` is neither BIND nor UNBIND.
    #[error("unknown op {op}")]
    UnknownOp {
        /// The op given.
        op: u32,
    },
    /// BIND without exactly `USAGE_TIMESTAMPS`.
    #[error("flags {flags:#x}: BIND takes USAGE_TIMESTAMPS only")]
    UnknownFlags {
        /// The flags given.
        flags: u32,
    },
    /// The range is empty or not page-aligned.
    #[error("range {offset:#x}+{range:#x} is empty or not 16 KiB-aligned")]
    Unaligned {
        /// Offset in the object.
        offset: u64,
        /// Length.
        range: u64,
    },
    /// The range does not lie in the object.
    #[error("range {offset:#x}+{range:#x} is outside the {size_bytes:#x}-byte object")]
    OutsideObject {
        /// Offset in the object.
        offset: u64,
        /// Length.
        range: u64,
        /// The object's size.
        size_bytes: u64,
    },
    /// No object has this handle in the file.
    #[error("no object with handle {handle}")]
    NoSuchHandle {
        /// The handle.
        handle: u32,
    },
    /// UNBIND of an object handle that is not bound.
    #[error("no bound object {object_handle}")]
    NoSuchBinding {
        /// The object handle.
        object_handle: u32,
    },
    /// The firmware's address space is full.
    #[error("the firmware range has no room: {0}")]
    OutOfMemory(#[from] AllocError),
}

/// Why a GEM ioctl failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GemError {
    /// A pad or MBZ field is not zero.
    #[error("{field} must be zero")]
    MustBeZero {
        /// The field.
        field: &'static str,
    },
    /// Flags outside the defined set.
    #[error("unknown flags {flags:#x}")]
    UnknownFlags {
        /// The flags given.
        flags: u32,
    },
    /// A zero-sized object.
    #[error("size is zero")]
    ZeroSize,
    /// `vm_id` given without `VM_PRIVATE`.
    #[error("vm_id {vm_id} without VM_PRIVATE")]
    VmWithoutPrivate {
        /// The vm_id given.
        vm_id: u32,
    },
    /// No object has this handle in the file.
    #[error("no object with handle {handle}")]
    NoSuchHandle {
        /// The handle.
        handle: u32,
    },
    /// GEM_OPEN of a name no live object has.
    #[error("no object named {name}")]
    NoSuchName {
        /// The name.
        name: u32,
    },
    /// GEM_CLOSE of a handle that does not exist (Linux: EINVAL).
    #[error("GEM_CLOSE of unknown handle {handle}")]
    CloseUnknownHandle {
        /// The handle.
        handle: u32,
    },
    /// No VM with this id.
    #[error("no VM {vm_id}")]
    NoSuchVm {
        /// The id.
        vm_id: u32,
    },
    /// RAM is exhausted.
    #[error(transparent)]
    OutOfMemory(#[from] AllocError),
    /// The file's GEM memory would pass its limit.
    #[error(
        "{requested_bytes} bytes more would pass the client's limit of {limit_bytes} \
         ({used_bytes} in use)"
    )]
    OverClientLimit {
        /// What was asked for (whole pages).
        requested_bytes: u64,
        /// What the client's objects hold now.
        used_bytes: u64,
        /// The limit.
        limit_bytes: u64,
    },
    /// The client's objects already cost the device as many host
    /// descriptors as one client may (`DeviceConfig::client_descriptor_limit`).
    #[error("the client's objects hold {used} device descriptors, its limit")]
    OverClientDescriptors {
        /// Held now.
        used: u64,
        /// The limit.
        limit: u64,
    },
    /// The object would need a device descriptor, and all clients'
    /// objects together hold as many as the device keeps for them
    /// (`DeviceConfig::device_descriptor_limit`).
    #[error("all clients' objects hold {used} device descriptors, the device's limit")]
    OverDeviceDescriptors {
        /// Held now, over every client.
        used: u64,
        /// The limit.
        limit: u64,
    },
}
