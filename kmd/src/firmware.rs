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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use agx_firmware_sim::firmware::{Firmware, Interrupt, NoEngine};
use agx_fwif::messages::{FirmwareStatus, InitData, EVENT_SLOTS, INIT_MAGIC, INTERFACE_VERSION};
use agx_fwif::ring::{MemoryError, RingDesc, RingState, SharedMemory};
use agx_hw::formats::UatMemAttr;
use agx_hw::uat::{self, Access, Permissions, PhysicalMemory, PAGE_BYTES};
use zerocopy::{FromBytes, IntoBytes};

use crate::mem::{AllocError, PagePool, PageTables, PhysRange, Ram};

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
/// Entries of each submission ring.
const PIPE_ENTRIES: u32 = 256;
/// The firmware's per-command watchdog.
pub const COMMAND_TIMEOUT_MS: u32 = 5000;

/// The firmware's address space (context 0's upper half).
#[derive(Debug)]
pub struct KernelVm {
    ram: Ram,
    tables: Mutex<PageTables>,
    next_va: AtomicU64,
    objects: Mutex<Vec<Arc<PhysRange>>>,
}

impl KernelVm {
    /// An empty firmware address space.
    pub fn new(pool: Arc<PagePool>) -> Result<KernelVm, AllocError> {
        let ram = pool.ram().clone();
        Ok(KernelVm {
            ram,
            tables: Mutex::new(PageTables::new(pool)?),
            next_va: AtomicU64::new(FW_VA_START),
            objects: Mutex::new(Vec::new()),
        })
    }

    /// The root table (ttb1).
    pub fn root_pa(&self) -> u64 {
        self.tables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .root_pa()
    }

    /// Allocates zeroed memory mapped for the firmware and the GPU
    /// (read-write, uncached: shared with the CPU); returns its address.
    pub fn alloc(&self, size_bytes: u64, name: &str) -> Result<u64, AllocError> {
        let memory = self.ram.allocate(size_bytes, name)?;
        let pages = memory.len_bytes() / PAGE_BYTES;
        // One unmapped guard page after every allocation.
        let va = self
            .next_va
            .fetch_add((pages + 1) * PAGE_BYTES, Ordering::Relaxed);
        if va + pages * PAGE_BYTES > FW_VA_END {
            return Err(AllocError::OutOfMemory {
                requested_bytes: size_bytes,
                free_bytes: 0,
            });
        }
        let rw = Permissions {
            gpu_read: true,
            gpu_write: true,
            fw_read: true,
            fw_write: true,
        };
        let base = memory.pa();
        self.tables.lock().unwrap_or_else(|e| e.into_inner()).set(
            va & (uat::USER_VA_END - 1),
            pages,
            |i| uat::page_pte(base + i * PAGE_BYTES, rw, UatMemAttr::Uncached).unwrap_or(0),
        )?;
        self.objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(memory);
        Ok(va)
    }
}

/// Memory as the firmware sees it: every access translated through the
/// firmware's page tables.
#[derive(Debug, Clone)]
pub struct FirmwareView {
    ram: Ram,
    root: u64,
}

impl FirmwareView {
    /// The view of `vm`.
    pub fn new(vm: &KernelVm) -> FirmwareView {
        FirmwareView {
            ram: vm.ram.clone(),
            root: vm.root_pa(),
        }
    }

    fn access(
        &self,
        address: u64,
        len: usize,
        write: bool,
        mut f: impl FnMut(u64, usize, usize) -> bool,
    ) -> Result<(), MemoryError> {
        let mut done = 0;
        while done < len {
            let va = address
                .checked_add(done as u64)
                .ok_or(MemoryError { address })?;
            let in_page = (PAGE_BYTES - va % PAGE_BYTES) as usize;
            let chunk = in_page.min(len - done);
            let kind = if write {
                Access::FirmwareWrite
            } else {
                Access::FirmwareRead
            };
            let t = uat::translate_upper(&self.ram, self.root, va, kind)
                .map_err(|_| MemoryError { address: va })?;
            if !f(t.pa, done, chunk) {
                return Err(MemoryError { address: va });
            }
            done += chunk;
        }
        Ok(())
    }
}

impl SharedMemory for FirmwareView {
    fn read(&self, address: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let len = buf.len();
        self.access(address, len, false, |pa, at, n| {
            self.ram.read(pa, &mut buf[at..at + n]).is_ok()
        })
    }

    fn write(&self, address: u64, data: &[u8]) -> Result<(), MemoryError> {
        self.access(address, data.len(), true, |pa, at, n| {
            self.ram.write(pa, &data[at..at + n]).is_ok()
        })
    }
}

/// The firmware -> kmd interrupt: counts raises and wakes whoever waits.
#[derive(Debug, Default)]
pub struct Irq {
    count: Mutex<u64>,
    cond: Condvar,
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
    pub init: u64,
    /// Its contents.
    pub init_data: InitData,
    /// The interrupt line.
    pub irq: Arc<Irq>,
    firmware: Mutex<Firmware>,
}

fn ring(vm: &KernelVm, entries: u32, entry_bytes: u32, name: &str) -> Result<RingDesc, AllocError> {
    let state = vm.alloc(size_of::<RingState>() as u64, name)?;
    let base = vm.alloc(u64::from(entries) * u64::from(entry_bytes), name)?;
    Ok(RingDesc {
        state,
        entries: base,
        entry_count: entries,
        entry_bytes,
    })
}

impl FirmwareLink {
    /// Lays out the shared structures and boots the firmware on them.
    pub fn boot(pool: Arc<PagePool>) -> Result<FirmwareLink, AllocError> {
        let vm = KernelVm::new(pool)?;
        let init = vm.alloc(size_of::<InitData>() as u64, "agx-fw-init")?;
        let mut init_data = InitData {
            magic: INIT_MAGIC,
            version: INTERFACE_VERSION,
            command_timeout_ms: COMMAND_TIMEOUT_MS,
            device_control: ring(&vm, CONTROL_ENTRIES, 64, "agx-fw-control")?,
            events: ring(&vm, EVENT_ENTRIES, 64, "agx-fw-events")?,
            log: ring(&vm, LOG_ENTRIES, 128, "agx-fw-log")?,
            stamps: vm.alloc(EVENT_SLOTS as u64 * 4, "agx-fw-stamps")?,
            status: vm.alloc(size_of::<FirmwareStatus>() as u64, "agx-fw-status")?,
            ..InitData::default()
        };
        for pipe in init_data.pipes.iter_mut() {
            *pipe = ring(&vm, PIPE_ENTRIES, 32, "agx-fw-pipe")?;
        }
        let view = FirmwareView::new(&vm);
        view.write(init, init_data.as_bytes())
            .map_err(|e| AllocError::Host(e.to_string()))?;
        let irq = Arc::new(Irq::default());
        let firmware = Firmware::boot(
            init,
            Arc::new(view.clone()),
            irq.clone(),
            Box::new(NoEngine),
        );
        Ok(FirmwareLink {
            vm,
            view,
            init,
            init_data,
            irq,
            firmware: Mutex::new(firmware),
        })
    }

    /// The firmware's status block.
    pub fn status(&self) -> Option<FirmwareStatus> {
        let mut buf = [0u8; size_of::<FirmwareStatus>()];
        self.view.read(self.init_data.status, &mut buf).ok()?;
        FirmwareStatus::read_from_bytes(&buf).ok()
    }

    /// Rings the doorbell.
    pub fn ring_doorbell(&self) {
        self.firmware
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .doorbell()
            .ring();
    }
}

impl Drop for FirmwareLink {
    fn drop(&mut self) {
        self.firmware
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .shutdown();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use agx_fwif::messages::LogMsg;

    use super::*;

    #[test]
    fn the_firmware_boots_through_its_page_tables() {
        let ram = Ram::new(256 << 20);
        let pool = Arc::new(PagePool::new(ram.clone()));
        let link = FirmwareLink::boot(Arc::clone(&pool)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while link.status().map(|s| s.booted) != Some(1) {
            assert!(Instant::now() < deadline, "firmware did not boot");
            link.irq
                .wait_past(link.irq.count(), Duration::from_millis(10));
        }
        let line = link.init_data.log.pop(&link.view).unwrap().unwrap();
        assert_eq!(
            LogMsg::read_from_bytes(&line).unwrap().text(),
            "firmware booted"
        );
        // Its structures are where InitData says, in its range, and the
        // page after each allocation is a guard.
        assert!(link.init >= FW_VA_START && link.init < FW_VA_END);
        let mut byte = [0u8; 1];
        assert!(link.view.read(link.init + PAGE_BYTES, &mut byte).is_err());
        // The firmware cannot see user memory: the user half is not in
        // its tables.
        assert!(link.view.read(0x4000, &mut byte).is_err());
        drop(link);
        assert_eq!(pool.pages_in_use(), 0, "tables go back to the pool");
    }
}
