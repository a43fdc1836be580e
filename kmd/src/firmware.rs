//! The kmd's side of the firmware: its address space and boot.
//!
//! The firmware reaches kernel structures through the GPU MMU, in the
//! upper half of the address space (`ttb1`), in the range
//! [`FW_VA_START`]..[`FW_VA_END`]. [`KernelVm`] owns those page tables and
//! hands out firmware-visible allocations; [`FirmwareView`] is memory as
//! the firmware sees it (every access translated through those tables),
//! which is what the simulated firmware is given. At boot the kmd lays out
//! the [`InitData`] block, the rings, the stamps and the status block
//! there, and starts the firmware on it.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use agx_fwif::coprocessor::{BootParams, Coprocessor, Interrupt, RunningFirmware};
use agx_fwif::messages::{
    FirmwareStatus, InitData, EVENT_SLOTS, INIT_MAGIC, INTERFACE_VERSION, VM_SLOTS,
};
use agx_fwif::ring::{RingDesc, RingState, SharedMemory};
pub use agx_fwif::view::FirmwareView;
use agx_hw::addr::{FwVa, PhysAddr};
use agx_hw::formats::{UatMemAttr, UatTtb};
use agx_hw::uat::{self, Permissions, PAGE_BYTES};
use zerocopy::{FromBytes, IntoBytes};

use crate::mem::{AllocError, PagePool, PageTables, PhysRange, Ram, VaAllocator};
use crate::sync::SyncEvents;

/// Start of the firmware's range.
pub const FW_VA_START: u64 = 0xFFFF_FFA0_0000_0000;
/// End of the firmware's range.
pub const FW_VA_END: u64 = 0xFFFF_FFB0_0000_0000;

/// Entries of the device-control ring.
const CONTROL_ENTRIES: u32 = 64;
/// Entries of the event ring.
const EVENT_ENTRIES: u32 = 256;
/// Entries of the log ring.
const LOG_ENTRIES: u32 = 64;
/// Entries of the statistics ring.
const STATS_ENTRIES: u32 = 256;
/// Entries of each submission ring.
const PIPE_ENTRIES: u32 = 256;
/// The firmware watchdog's last resort by default: host time a command
/// may run, whatever its work (ten minutes: the work budget stops a
/// submission long before, even on a slow or loaded host).
pub const COMMAND_TIMEOUT_MS: u32 = 600_000;
/// The work a submission may do by default, in work units (one per
/// SIMD-group instruction, per tile sample set up and written back, per
/// triangle assembled, per control-stream block): 2^32, about 24 times
/// what a frame of a million triangles needs and three times the largest
/// submission of piglit's `gs-max-output` under Mesa's geometry-shader
/// lowering (work the GPU does in well under a second, which a hang check
/// must not refuse). `Documentation/gpu.md` gives the figures.
pub const WORK_BUDGET_UNITS: u64 = 1 << 32;

/// The firmware's address space (context 0's upper half).
#[derive(Debug)]
pub struct KernelVm {
    ram: Ram,
    inner: Mutex<KernelVmInner>,
}

#[derive(Debug)]
struct KernelVmInner {
    tables: PageTables,
    va: VaAllocator,
    /// What is mapped where: start -> (memory, mapped bytes).
    objects: BTreeMap<u64, (Arc<PhysRange>, u64)>,
}

impl KernelVm {
    /// An empty firmware address space.
    pub fn new(pool: Arc<PagePool>) -> Result<KernelVm, AllocError> {
        let ram = pool.ram().clone();
        Ok(KernelVm {
            ram,
            inner: Mutex::new(KernelVmInner {
                tables: PageTables::new(pool)?,
                va: VaAllocator::new(FW_VA_START..FW_VA_END, PAGE_BYTES),
                objects: BTreeMap::new(),
            }),
        })
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, KernelVmInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The root table (ttb1).
    pub fn root_pa(&self) -> PhysAddr {
        self.inner().tables.root_pa()
    }

    /// Allocates zeroed memory mapped for the firmware and the GPU
    /// (read-write, uncached: shared with the CPU); returns its address.
    pub fn alloc(&self, size_bytes: u64, name: &str) -> Result<u64, AllocError> {
        let memory = self.ram.allocate(size_bytes).inspect_err(|error| {
            tracing::warn!(name, size_bytes, %error, "firmware memory not allocated");
        })?;
        let len = memory.len_bytes();
        self.map(memory, 0, len)
    }

    /// Maps `len_bytes` of `memory` from `offset` (both page-aligned) for
    /// the firmware; returns the address of its first byte.
    pub fn map(
        &self,
        memory: Arc<PhysRange>,
        offset: u64,
        len_bytes: u64,
    ) -> Result<u64, AllocError> {
        let pages = len_bytes.div_ceil(PAGE_BYTES);
        let mut inner = self.inner();
        // One unmapped guard page after every allocation.
        let va = inner.va.alloc((pages + 1) * PAGE_BYTES, PAGE_BYTES).ok_or(
            AllocError::OutOfAddressSpace {
                region: "firmware's address range",
                requested_bytes: len_bytes,
                free_bytes: inner.va.free_bytes(),
            },
        )?;
        let rw = Permissions {
            gpu_read: true,
            gpu_write: true,
            fw_read: true,
            fw_write: true,
        };
        let base = memory.pa().offset(offset);
        let mapped = inner.tables.set(va & (uat::USER_VA_END - 1), pages, |i| {
            uat::page_pte(base.offset(i * PAGE_BYTES), rw, UatMemAttr::Uncached).unwrap_or(0)
        });
        if let Err(e) = mapped {
            // Entries written before the failure must not outlive the
            // memory they point at.
            let _ = inner.tables.set(va & (uat::USER_VA_END - 1), pages, |_| 0);
            if !inner.va.free(va, (pages + 1) * PAGE_BYTES) {
                tracing::error!(va, "firmware VA range freed twice");
            }
            return Err(e);
        }
        inner.objects.insert(va, (memory, pages * PAGE_BYTES));
        Ok(va)
    }

    /// Unmaps (and, if nothing else holds it, frees) what [`KernelVm::alloc`]
    /// or [`KernelVm::map`] put at `va`.
    pub fn free(&self, va: u64) {
        let mut inner = self.inner();
        let Some((_memory, len)) = inner.objects.remove(&va) else {
            return;
        };
        let _ = inner
            .tables
            .set(va & (uat::USER_VA_END - 1), len / PAGE_BYTES, |_| 0);
        if !inner.va.free(va, len + PAGE_BYTES) {
            tracing::error!(va, "firmware VA range freed twice");
        }
    }

    /// Bytes mapped for the firmware.
    pub fn mapped_bytes(&self) -> u64 {
        self.inner().objects.values().map(|(_, len)| len).sum()
    }
}

/// The kmd's view of the firmware's range: through the same tables.
fn view_of(vm: &KernelVm) -> FirmwareView {
    FirmwareView::new(Arc::new(vm.ram.clone()), vm.root_pa())
}

/// The firmware -> kmd interrupt: counts raises and wakes whoever waits
/// (the scheduler sleeps on the device's sync events, which it notifies).
#[derive(Debug, Default)]
pub struct Irq {
    count: Mutex<u64>,
    cond: Condvar,
    events: Option<Arc<SyncEvents>>,
}

impl Irq {
    /// Raises seen so far.
    pub fn count(&self) -> u64 {
        *self.count.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until more than `seen` raises happened, or `timeout`.
    pub fn wait_past(&self, seen: u64, timeout: Duration) -> u64 {
        let guard = self.count.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = self
            .cond
            .wait_timeout_while(guard, timeout, |count| *count <= seen)
            .unwrap_or_else(|e| e.into_inner());
        *guard
    }
}

impl Interrupt for Irq {
    fn raise(&self) {
        *self.count.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.cond.notify_all();
        if let Some(events) = &self.events {
            events.notify();
        }
    }
}

/// The booted firmware and the structures the kmd shares with it.
#[derive(Debug)]
pub struct FirmwareLink {
    /// The firmware's address space.
    pub vm: KernelVm,
    /// Memory as the firmware sees it.
    pub view: FirmwareView,
    /// The init block's address.
    pub init: FwVa,
    /// Its contents.
    pub init_data: InitData,
    /// The interrupt line.
    pub irq: Arc<Irq>,
    firmware: Box<dyn RunningFirmware>,
}

fn ring(vm: &KernelVm, entries: u32, entry_bytes: u32, name: &str) -> Result<RingDesc, AllocError> {
    let state = vm.alloc(size_of::<RingState>() as u64, name)?;
    let base = vm.alloc(u64::from(entries) * u64::from(entry_bytes), name)?;
    Ok(RingDesc {
        state: FwVa(state),
        entries: FwVa(base),
        entry_count: entries,
        entry_bytes,
    })
}

impl FirmwareLink {
    /// Lays out the shared structures and boots `coprocessor`'s firmware
    /// on them, with a watchdog that stops a submission after
    /// `work_budget_units` of GPU work (or a command after
    /// `command_timeout_ms` of host time); the interrupt also notifies
    /// `events`.
    pub fn boot(
        pool: Arc<PagePool>,
        coprocessor: &dyn Coprocessor,
        events: Option<Arc<SyncEvents>>,
        command_timeout_ms: u32,
        work_budget_units: u64,
    ) -> Result<FirmwareLink, AllocError> {
        let vm = KernelVm::new(pool)?;
        let init = vm.alloc(size_of::<InitData>() as u64, "agx-fw-init")?;
        let mut init_data = InitData {
            magic: INIT_MAGIC,
            version: INTERFACE_VERSION,
            command_timeout_ms,
            device_control: ring(&vm, CONTROL_ENTRIES, 64, "agx-fw-control")?,
            events: ring(&vm, EVENT_ENTRIES, 64, "agx-fw-events")?,
            log: ring(&vm, LOG_ENTRIES, 128, "agx-fw-log")?,
            stamps: FwVa(vm.alloc(EVENT_SLOTS as u64 * 4, "agx-fw-stamps")?),
            status: FwVa(vm.alloc(size_of::<FirmwareStatus>() as u64, "agx-fw-status")?),
            contexts: FwVa(vm.alloc(VM_SLOTS as u64 * 8, "agx-fw-contexts")?),
            stats: ring(&vm, STATS_ENTRIES, 32, "agx-fw-stats")?,
            work_budget_units,
            ..InitData::default()
        };
        for pipe in init_data.pipes.iter_mut() {
            *pipe = ring(&vm, PIPE_ENTRIES, 32, "agx-fw-pipe")?;
        }
        let view = view_of(&vm);
        let init = FwVa(init);
        view.write(init, init_data.as_bytes())
            .map_err(|e| AllocError::Host(e.to_string()))?;
        let irq = Arc::new(Irq {
            events,
            ..Irq::default()
        });
        let firmware = coprocessor.boot(BootParams {
            init,
            ttb1: vm.root_pa(),
            interrupt: irq.clone(),
        });
        Ok(FirmwareLink {
            vm,
            view,
            init,
            init_data,
            irq,
            firmware,
        })
    }

    /// Points VM slot `slot` at the user page tables rooted at `root_pa`
    /// (`None`: clears it).
    pub fn set_context(&self, slot: u32, root_pa: Option<PhysAddr>) {
        let raw = root_pa.map_or(0, |root| {
            UatTtb {
                valid: true,
                root: root.get(),
                asid: slot,
            }
            .pack()
            .map_or(0, u64::from_le_bytes)
        });
        let _ = self.view.write(
            self.init_data.contexts.offset(8 * u64::from(slot)),
            &raw.to_le_bytes(),
        );
    }

    /// Every event slot's stamp.
    pub fn stamps(&self) -> [u32; EVENT_SLOTS] {
        let mut bytes = [0u8; EVENT_SLOTS * 4];
        let _ = self.view.read(self.init_data.stamps, &mut bytes);
        let mut out = [0u32; EVENT_SLOTS];
        for (value, chunk) in out.iter_mut().zip(bytes.chunks_exact(4)) {
            *value = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        }
        out
    }

    /// The firmware's status block.
    pub fn status(&self) -> Option<FirmwareStatus> {
        let mut buf = [0u8; size_of::<FirmwareStatus>()];
        self.view.read(self.init_data.status, &mut buf).ok()?;
        FirmwareStatus::read_from_bytes(&buf).ok()
    }

    /// Rings the doorbell.
    pub fn ring_doorbell(&self) {
        self.firmware.ring_doorbell();
    }
}

impl FirmwareLink {
    /// Stops the firmware thread (the device is going away); it touches no
    /// memory afterwards.
    pub fn stop(&self) {
        self.firmware.shutdown();
    }
}

impl Drop for FirmwareLink {
    fn drop(&mut self) {
        self.stop();
    }
}
