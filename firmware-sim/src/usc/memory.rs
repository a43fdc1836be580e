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
}
