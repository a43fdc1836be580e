//! Memory as the firmware sees it: the kernel range of context 0's upper
//! half, every access translated through the `ttb1` page tables.
//!
//! The kmd reaches the structures it shares with the firmware through its
//! own mapping of them; the firmware reaches them through the GPU MMU.
//! Both sides of this model go through the same translation (with the
//! firmware's access permissions), so a structure the kmd forgot to map,
//! or mapped read-only, fails for both exactly where it would on hardware.

use std::sync::Arc;

use agx_hw::uat::{self, Access, PhysicalMemory, PAGE_BYTES};

use crate::ring::{MemoryError, SharedMemory};
use agx_hw::addr::{FwVa, PhysAddr};

/// Physical memory shared across threads.
pub type SharedPhysicalMemory = Arc<dyn PhysicalMemory + Send + Sync>;

/// The firmware's view of its address space.
#[derive(Clone)]
pub struct FirmwareView {
    memory: SharedPhysicalMemory,
    ttb1: PhysAddr,
}

impl std::fmt::Debug for FirmwareView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FirmwareView")
            .field("ttb1", &self.ttb1)
            .finish_non_exhaustive()
    }
}

impl FirmwareView {
    /// The view through the tables rooted at `ttb1` in `memory`.
    pub fn new(memory: SharedPhysicalMemory, ttb1: PhysAddr) -> FirmwareView {
        FirmwareView { memory, ttb1 }
    }

    /// The root of the tables.
    pub fn ttb1(&self) -> PhysAddr {
        self.ttb1
    }

    fn access(
        &self,
        address: FwVa,
        len: usize,
        write: bool,
        mut f: impl FnMut(PhysAddr, usize, usize) -> bool,
    ) -> Result<(), MemoryError> {
        let kind = if write {
            Access::FirmwareWrite
        } else {
            Access::FirmwareRead
        };
        let mut done = 0;
        while done < len {
            let va = address
                .checked_add(done as u64)
                .ok_or(MemoryError { address })?
                .get();
            let in_page = (PAGE_BYTES - va % PAGE_BYTES) as usize;
            let chunk = in_page.min(len - done);
            let t = uat::translate_upper(&*self.memory, self.ttb1, va, kind)
                .map_err(|_| MemoryError { address: FwVa(va) })?;
            if !f(t.pa, done, chunk) {
                return Err(MemoryError { address: FwVa(va) });
            }
            done += chunk;
        }
        Ok(())
    }
}

impl SharedMemory for FirmwareView {
    fn read(&self, address: FwVa, buf: &mut [u8]) -> Result<(), MemoryError> {
        let len = buf.len();
        self.access(address, len, false, |pa, at, n| {
            self.memory.read(pa, &mut buf[at..at + n]).is_ok()
        })
    }

    fn write(&self, address: FwVa, data: &[u8]) -> Result<(), MemoryError> {
        self.access(address, data.len(), true, |pa, at, n| {
            self.memory.write(pa, &data[at..at + n]).is_ok()
        })
    }
}
