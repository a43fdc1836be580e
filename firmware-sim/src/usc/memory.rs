//! How the shader core reaches memory.
//!
//! Every load, store and instruction fetch the USC makes goes through the
//! GPU's MMU: a virtual address is translated through the page tables of
//! the context's VM, and an address with no mapping, or a mapping without
//! the needed permission, raises a fault instead of touching memory. The
//! interpreter only sees [`GpuMemory`]; the real implementation walks the
//! page tables the kmd writes, and tests may use any implementation that
//! honours the same contract.

use std::fmt;

/// What an access was trying to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessKind {
    /// A data load (device_load, texture fetch...).
    Read,
    /// A data store (device_store, image_write...).
    Write,
    /// An instruction fetch.
    Fetch,
}

impl fmt::Display for AccessKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AccessKind::Read => "read",
            AccessKind::Write => "write",
            AccessKind::Fetch => "fetch",
        })
    }
}

/// Why a translation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultReason {
    /// No page is mapped at the address.
    Unmapped,
    /// The page is mapped but does not allow the access (a write to a
    /// read-only page, for instance).
    Permission,
}

/// A failed memory access: the first faulting byte's address and the kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("GPU {access} fault at {address:#x} ({reason:?})")]
pub struct MemoryFault {
    /// The faulting GPU virtual address.
    pub address: u64,
    /// What the access was.
    pub access: AccessKind,
    /// Why it failed.
    pub reason: FaultReason,
}

/// The GPU's view of memory: GPU virtual addresses, translated and checked.
pub trait GpuMemory {
    /// Reads `buf.len()` bytes at `address`. On a fault nothing useful is
    /// in `buf` and the fault names the first byte that could not be read.
    fn read(&self, address: u64, buf: &mut [u8], access: AccessKind) -> Result<(), MemoryFault>;

    /// Writes `data` at `address`. A faulting write may have written the
    /// bytes before the faulting page, as the hardware would.
    fn write(&mut self, address: u64, data: &[u8]) -> Result<(), MemoryFault>;

    /// Reads `size_bytes` (at most 4) at each of `addresses` in turn, into
    /// the same entry of `out` (little-endian, zero-extended), stopping at
    /// the first element that faults: exactly [`GpuMemory::read`] of each
    /// element in order. A SIMD-group's load reads its lanes' elements
    /// through this, so that an implementation can translate each page
    /// once rather than once per element.
    fn read_elements(
        &self,
        addresses: &[u64],
        size_bytes: usize,
        out: &mut [u32],
    ) -> Result<(), MemoryFault> {
        for (&address, word) in addresses.iter().zip(out.iter_mut()) {
            let mut bytes = [0u8; 4];
            self.read(address, &mut bytes[..size_bytes], AccessKind::Read)?;
            *word = u32::from_le_bytes(bytes);
        }
        Ok(())
    }

    /// Writes the low `size_bytes` (at most 4) of each of `words` at the
    /// matching entry of `addresses`, in turn, stopping at the first
    /// element that faults: exactly [`GpuMemory::write`] of each element
    /// in order.
    fn write_elements(
        &mut self,
        addresses: &[u64],
        size_bytes: usize,
        words: &[u32],
    ) -> Result<(), MemoryFault> {
        for (&address, word) in addresses.iter().zip(words) {
            self.write(address, &word.to_le_bytes()[..size_bytes])?;
        }
        Ok(())
    }

    /// The host memory behind this memory's physical pages, which the
    /// compiled engine's loads may read directly once
    /// [`GpuMemory::readable_page`] has translated an address into it;
    /// `None` (the default) where every access goes through the methods
    /// above.
    fn host_window(&self) -> Option<agx_hw::host::HostWindow<'_>> {
        None
    }

    /// The physical address of the page holding `address`, where a data
    /// read of it succeeds; `None` where it would fault (the caller then
    /// reads through [`GpuMemory::read_elements`], which reports the
    /// fault) or the implementation has no host window.
    fn readable_page(&self, _address: u64) -> Option<u64> {
        None
    }

    /// The same for a data write.
    fn writable_page(&self, _address: u64) -> Option<u64> {
        None
    }

    /// What names this memory's translations (a VM context's page-table
    /// root): pages translated for another are not reused.
    fn translation_context(&self) -> u64 {
        0
    }

    /// Replaces the 32-bit word at `address` (4-byte aligned) with
    /// `update(old)` and returns the old word, atomically with respect to
    /// every other atomic the simulator runs (on any host thread) as long
    /// as implementors keep this method. A write fault leaves the word as
    /// it was. Not atomic with respect to
    /// plain stores or to the CPU, which the hardware does not promise
    /// either.
    fn atomic_u32(
        &mut self,
        address: u64,
        update: &mut dyn FnMut(u32) -> u32,
    ) -> Result<u32, MemoryFault> {
        let _serialised = DEVICE_ATOMICS.lock().unwrap_or_else(|e| e.into_inner());
        let mut old = [0u8; 4];
        self.read(address, &mut old, AccessKind::Read)?;
        let old = u32::from_le_bytes(old);
        self.write(address, &update(old).to_le_bytes())?;
        Ok(old)
    }
}

/// Serialises the read-modify-writes of device atomics: the GPU's memory
/// system performs each one indivisibly, while the simulator's threads
/// (one per core it models) reach memory through plain reads and writes.
static DEVICE_ATOMICS: std::sync::Mutex<()> = std::sync::Mutex::new(());
