//! GPU virtual address spaces (VMs) and VM_BIND.
//!
//! A VM is one UAT context: a 39-bit address space of 16 KiB pages whose
//! page tables live in RAM. Userspace owns `[vm_start, vm_end)` except the
//! kernel range it reserved at VM_CREATE (where the kernel places
//! firmware-visible per-VM objects such as the parameter buffer). Every
//! VM also maps a zeroed dummy page of its own at
//! [`uat::DUMMY_PAGE_VA`], as the kernel driver does: the GPU may write
//! it, so sharing one between VMs would pass data between clients. Mappings are kept as extents that hold a reference
//! to their GEM object, so an object stays alive while mapped; binding
//! over an existing mapping replaces the overlapped part, and unbinding
//! splits extents as needed.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use agx_hw::addr::PhysAddr;
use agx_hw::formats::UatMemAttr;
use agx_hw::uat::{self, Permissions, PAGE_BYTES};
use agx_uapi::asahi::{BindFlags, GemBindOp};

use crate::gem::GemObject;
use crate::mem::{AllocError, PagePool, PageTables, PhysRange, PoolPage, VaAllocator};
use crate::stats::Counters;
use crate::uaccess::Fault;

/// The first user address (GET_PARAMS `vm_start`).
pub const VM_START: u64 = uat::USER_VA_START;
/// The end of the user range (GET_PARAMS `vm_end`): the dummy page.
pub const VM_END: u64 = uat::DUMMY_PAGE_VA;
/// The smallest kernel range a VM may reserve (GET_PARAMS
/// `vm_kernel_min_size`).
pub const VM_KERNEL_MIN_SIZE: u64 = 512 << 20;

/// Why VM_CREATE or VM_DESTROY failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VmError {
    /// A pad field is not zero.
    #[error("{field} must be zero")]
    MustBeZero {
        /// The field.
        field: &'static str,
    },
    /// The kernel range is unaligned, empty, outside the VM or too small.
    #[error("kernel range {start:#x}..{end:#x}: {reason}")]
    BadKernelRange {
        /// Start.
        start: u64,
        /// End.
        end: u64,
        /// Which rule it breaks.
        reason: &'static str,
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
}

/// Why a VM_BIND failed. Operations are all checked before any is
/// applied, so a refused VM_BIND changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// A pad field is not zero.
    #[error("{field} must be zero")]
    MustBeZero {
        /// The field.
        field: &'static str,
    },
    /// `stride` is zero.
    #[error("stride is zero")]
    ZeroStride,
    /// Flags outside the defined set, or UNBIND mixed with others.
    #[error("bind op {index}: bad flags {flags:#x}")]
    BadFlags {
        /// Which operation.
        index: usize,
        /// The flags.
        flags: u32,
    },
    /// Neither READ nor WRITE.
    #[error("bind op {index}: neither READ nor WRITE")]
    NoAccess {
        /// Which operation.
        index: usize,
    },
    /// An address, size or offset not 16 KiB aligned (or zero size).
    #[error("bind op {index}: {field} {value:#x} is not a non-zero multiple of 16 KiB")]
    Misaligned {
        /// Which operation.
        index: usize,
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// The mapping would read past the object.
    #[error("bind op {index}: offset {offset:#x} + {len:#x} bytes past the object's {size:#x}")]
    OutsideObject {
        /// Which operation.
        index: usize,
        /// Offset in the object.
        offset: u64,
        /// Bytes of the object used.
        len: u64,
        /// The object's size.
        size: u64,
    },
    /// The range is outside the user part of the VM or overlaps the
    /// kernel range.
    #[error("bind op {index}: {addr:#x}+{range:#x} is not user address space")]
    NotUserRange {
        /// Which operation.
        index: usize,
        /// Start.
        addr: u64,
        /// Length.
        range: u64,
    },
    /// An unbind with a handle or offset.
    #[error("bind op {index}: unbind needs handle 0 and offset 0")]
    UnbindFields {
        /// Which operation.
        index: usize,
    },
    /// A VM_PRIVATE object of another VM.
    #[error("bind op {index}: object {handle} is private to another VM")]
    PrivateToOtherVm {
        /// Which operation.
        index: usize,
        /// The handle.
        handle: u32,
    },
    /// No VM with this id.
    #[error("no VM {vm_id}")]
    NoSuchVm {
        /// The id.
        vm_id: u32,
    },
    /// No object with this handle.
    #[error("bind op {index}: no object with handle {handle}")]
    NoSuchHandle {
        /// Which operation.
        index: usize,
        /// The handle.
        handle: u32,
    },
    /// The operations array is unreadable.
    #[error(transparent)]
    Fault(#[from] Fault),
    /// RAM for page tables is exhausted.
    #[error(transparent)]
    OutOfMemory(#[from] AllocError),
}

/// One mapped extent.
#[derive(Debug, Clone)]
struct Extent {
    len: u64,
    object: Arc<GemObject>,
    /// Offset into the object of the extent's first byte.
    offset: u64,
    permissions: Permissions,
    /// Every page of the extent maps the object page at `offset`.
    single_page: bool,
}

impl Extent {
    /// The extent's part starting `skip` bytes in, `len` long.
    fn slice(&self, skip: u64, len: u64) -> Extent {
        Extent {
            len,
            offset: if self.single_page {
                self.offset
            } else {
                self.offset + skip
            },
            ..self.clone()
        }
    }
}

/// One user mapping, as [`Vm::mappings`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// First GPU address.
    pub va: u64,
    /// Length in bytes.
    pub len_bytes: u64,
    /// The object's device-wide id.
    pub object_id: u64,
    /// Offset into the object of the first byte.
    pub offset: u64,
    /// GPU permissions.
    pub permissions: Permissions,
    /// Every page maps the same object page.
    pub single_page: bool,
}

/// A validated bind operation, ready to apply.
#[derive(Debug)]
pub(crate) enum BindOp {
    /// Map `object` at `addr`.
    Map {
        addr: u64,
        range: u64,
        offset: u64,
        object: Arc<GemObject>,
        permissions: Permissions,
        single_page: bool,
    },
    /// Unmap `[addr, addr + range)`.
    Unmap { addr: u64, range: u64 },
}

/// A GPU address space.
#[derive(Debug)]
pub struct Vm {
    id: u32,
    kernel_range: Range<u64>,
    tables: PageTables,
    extents: BTreeMap<u64, Extent>,
    /// The lower half of the kernel range: GPU-shared kernel objects.
    kernel_va: VaAllocator,
    /// Kernel mappings: start -> (memory, bytes).
    kernel_objects: BTreeMap<u64, (Arc<PhysRange>, u64)>,
    /// Mapped GPU read-write at [`uat::DUMMY_PAGE_VA`].
    _dummy: PoolPage,
    counters: Arc<Counters>,
}

fn aligned(value: u64) -> bool {
    value.is_multiple_of(PAGE_BYTES)
}

impl Vm {
    /// Checks VM_CREATE's kernel range.
    pub(crate) fn check_kernel_range(start: u64, end: u64) -> Result<(), VmError> {
        let bad = |reason| Err(VmError::BadKernelRange { start, end, reason });
        if !aligned(start) || !aligned(end) {
            return bad("not 16 KiB aligned");
        }
        if start >= end {
            return bad("empty");
        }
        if start < VM_START || end > VM_END {
            return bad("outside [vm_start, vm_end)");
        }
        if end - start < VM_KERNEL_MIN_SIZE {
            return bad("smaller than vm_kernel_min_size");
        }
        Ok(())
    }

    pub(crate) fn new(
        id: u32,
        kernel_range: Range<u64>,
        pool: Arc<PagePool>,
        counters: Arc<Counters>,
    ) -> Result<Vm, VmError> {
        let dummy = PoolPage::new(Arc::clone(&pool))?;
        let mut tables = PageTables::new(pool)?;
        let rw = Permissions {
            gpu_read: true,
            gpu_write: true,
            ..Permissions::default()
        };
        let pte = uat::page_pte(dummy.pa(), rw, UatMemAttr::Cached).unwrap_or(0);
        tables.set(uat::DUMMY_PAGE_VA, 1, |_| pte)?;
        counters.vms.fetch_add(1, Ordering::Relaxed);
        let shared_end = kernel_range.start + (kernel_range.end - kernel_range.start) / 2;
        Ok(Vm {
            id,
            kernel_va: VaAllocator::new(kernel_range.start..shared_end, PAGE_BYTES),
            kernel_objects: BTreeMap::new(),
            kernel_range,
            tables,
            extents: BTreeMap::new(),
            _dummy: dummy,
            counters,
        })
    }

    /// The VM's id in its file.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The kernel's reserved range.
    pub fn kernel_range(&self) -> Range<u64> {
        self.kernel_range.clone()
    }

    /// The root page table's physical address.
    pub fn root_pa(&self) -> PhysAddr {
        self.tables.root_pa()
    }

    /// Mapped bytes (user mappings).
    pub fn mapped_bytes(&self) -> u64 {
        self.extents.values().map(|e| e.len).sum()
    }

    /// The user mappings in address order.
    pub fn mappings(&self) -> Vec<Mapping> {
        self.extents
            .iter()
            .map(|(&va, e)| Mapping {
                va,
                len_bytes: e.len,
                object_id: e.object.id(),
                offset: e.offset,
                permissions: e.permissions,
                single_page: e.single_page,
            })
            .collect()
    }

    /// Every object the user mappings hold (each once): what in-flight
    /// work must keep alive.
    pub fn objects(&self) -> Vec<Arc<GemObject>> {
        let mut seen = std::collections::BTreeSet::new();
        self.extents
            .values()
            .filter(|e| seen.insert(e.object.id()))
            .map(|e| Arc::clone(&e.object))
            .collect()
    }

    /// Maps `memory` into the shared half of the kernel range, GPU
    /// read-write, at an address aligned to `align_bytes`; returns it.
    pub fn map_kernel(
        &mut self,
        memory: Arc<PhysRange>,
        align_bytes: u64,
    ) -> Result<u64, AllocError> {
        let len = memory.len_bytes();
        let va = self
            .kernel_va
            .alloc(len, align_bytes)
            .ok_or(AllocError::OutOfAddressSpace {
                region: "VM's kernel range",
                requested_bytes: len,
                free_bytes: self.kernel_va.free_bytes(),
            })?;
        let rw = Permissions {
            gpu_read: true,
            gpu_write: true,
            ..Permissions::default()
        };
        let base = memory.pa();
        let mapped = self.tables.set(va, len / PAGE_BYTES, |i| {
            uat::page_pte(base.offset(i * PAGE_BYTES), rw, UatMemAttr::Cached).unwrap_or(0)
        });
        if let Err(e) = mapped {
            // Entries written before the failure must not outlive the
            // memory they point at.
            let _ = self.tables.set(va, len / PAGE_BYTES, |_| 0);
            if !self.kernel_va.free(va, len) {
                tracing::error!(va, "kernel VA range freed twice");
            }
            return Err(e);
        }
        self.kernel_objects.insert(va, (memory, len));
        Ok(va)
    }

    /// Unmaps what [`Vm::map_kernel`] put at `va`.
    pub fn unmap_kernel(&mut self, va: u64) {
        if let Some((_, len)) = self.kernel_objects.remove(&va) {
            let _ = self.tables.set(va, len / PAGE_BYTES, |_| 0);
            if !self.kernel_va.free(va, len) {
                tracing::error!(va, "kernel VA range freed twice");
            }
        }
    }

    /// Bytes mapped in the kernel range.
    pub fn kernel_mapped_bytes(&self) -> u64 {
        self.kernel_objects.values().map(|(_, len)| len).sum()
    }

    /// Checks one bind op's arguments (not the handle) and returns the
    /// permissions for a map.
    pub(crate) fn check_op(
        &self,
        index: usize,
        op: &GemBindOp,
    ) -> Result<Option<(Permissions, bool)>, BindError> {
        let flags = BindFlags::from_bits(op.flags).ok_or(BindError::BadFlags {
            index,
            flags: op.flags,
        })?;
        for (field, value) in [
            ("addr", op.addr),
            ("range", op.range),
            ("offset", op.offset),
        ] {
            if !aligned(value) || (field == "range" && value == 0) {
                return Err(BindError::Misaligned {
                    index,
                    field,
                    value,
                });
            }
        }
        let end = op.addr.checked_add(op.range);
        let in_user = end.is_some_and(|end| op.addr >= VM_START && end <= VM_END);
        let overlaps_kernel =
            end.is_some_and(|end| op.addr < self.kernel_range.end && end > self.kernel_range.start);
        if !in_user || overlaps_kernel {
            return Err(BindError::NotUserRange {
                index,
                addr: op.addr,
                range: op.range,
            });
        }
        if flags.contains(BindFlags::UNBIND) {
            if flags != BindFlags::UNBIND {
                return Err(BindError::BadFlags {
                    index,
                    flags: op.flags,
                });
            }
            if op.handle != 0 || op.offset != 0 {
                return Err(BindError::UnbindFields { index });
            }
            return Ok(None);
        }
        let read = flags.contains(BindFlags::READ);
        let write = flags.contains(BindFlags::WRITE);
        if !read && !write {
            return Err(BindError::NoAccess { index });
        }
        let permissions = Permissions {
            gpu_read: read,
            gpu_write: write,
            ..Permissions::default()
        };
        Ok(Some((permissions, flags.contains(BindFlags::SINGLE_PAGE))))
    }

    /// Removes `[addr, addr + range)` from the extent map, splitting
    /// extents that straddle its ends.
    fn cut(&mut self, addr: u64, range: u64) {
        let end = addr + range;
        let overlapping: Vec<u64> = self
            .extents
            .range(..end)
            .filter(|(start, e)| **start + e.len > addr)
            .map(|(start, _)| *start)
            .collect();
        for start in overlapping {
            let Some(extent) = self.extents.remove(&start) else {
                continue;
            };
            let extent_end = start + extent.len;
            if start < addr {
                self.extents.insert(start, extent.slice(0, addr - start));
            }
            if extent_end > end {
                self.extents
                    .insert(end, extent.slice(end - start, extent_end - end));
            }
        }
    }

    /// Applies validated operations in order.
    pub(crate) fn apply(&mut self, ops: Vec<BindOp>) -> Result<(), BindError> {
        // Every table the maps need first: out of memory here leaves the
        // VM as it was (no entry written, no op applied).
        for op in &ops {
            if let BindOp::Map { addr, range, .. } = op {
                self.tables.reserve(*addr, range / PAGE_BYTES)?;
            }
        }
        for op in ops {
            match op {
                BindOp::Unmap { addr, range } => {
                    self.cut(addr, range);
                    self.tables.set(addr, range / PAGE_BYTES, |_| 0)?;
                }
                BindOp::Map {
                    addr,
                    range,
                    offset,
                    object,
                    permissions,
                    single_page,
                } => {
                    let base = object.memory().pa().offset(offset);
                    let pte = |i: u64| {
                        let pa = if single_page {
                            base
                        } else {
                            base.offset(i * PAGE_BYTES)
                        };
                        uat::page_pte(pa, permissions, UatMemAttr::Cached).unwrap_or(0)
                    };
                    self.tables.set(addr, range / PAGE_BYTES, pte)?;
                    self.cut(addr, range);
                    self.extents.insert(
                        addr,
                        Extent {
                            len: range,
                            object,
                            offset,
                            permissions,
                            single_page,
                        },
                    );
                }
            }
        }
        Ok(())
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.counters.vms.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Locks a VM, tolerating a poisoned lock (a panic elsewhere must not
/// wedge the device).
pub(crate) fn lock_vm(vm: &std::sync::Mutex<Vm>) -> std::sync::MutexGuard<'_, Vm> {
    vm.lock().unwrap_or_else(|e| e.into_inner())
}
