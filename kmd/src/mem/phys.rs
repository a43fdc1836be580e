//! Simulated physical memory: the SoC's unified RAM.
//!
//! On Apple silicon the CPU and the GPU share one RAM; the GPU reaches it
//! through its MMU (the UAT) and the page tables the kernel writes. Here
//! RAM is a physical address space in which every allocation is a
//! contiguous range backed by its own memfd ([`Backing`]). The kmd
//! allocates GEM objects, page tables and firmware structures from it; the
//! simulated GPU reads and writes it by physical address after walking the
//! page tables. The total size is fixed when the system is built, so
//! running out of RAM is an ordinary `ENOMEM`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use agx_hw::addr::PhysAddr;
use agx_hw::uat::{PhysFault, PhysicalMemory as PhysicalAccess, PAGE_BYTES};

use super::backing::Backing;

/// Where simulated RAM starts in the physical address space (as on M1,
/// DRAM is above the first 64 GiB of MMIO space).
pub const RAM_BASE: u64 = 0x10_0000_0000;

/// An allocation could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// Not enough free RAM (or a zero-sized request).
    #[error("out of simulated RAM: {requested_bytes} bytes requested, {free_bytes} free")]
    OutOfMemory {
        /// What was asked for (rounded to pages).
        requested_bytes: u64,
        /// What was left.
        free_bytes: u64,
    },
    /// The host refused the memfd or mapping.
    #[error("host memory: {0}")]
    Host(String),
}

/// A contiguous range of physical memory, freed when the last reference
/// goes.
#[derive(Debug)]
pub struct PhysRange {
    pa: u64,
    backing: Backing,
    ram: Arc<RamInner>,
}

impl PhysRange {
    /// The physical address of the first byte.
    pub fn pa(&self) -> PhysAddr {
        PhysAddr(self.pa)
    }

    /// The size in bytes (whole pages).
    pub fn len_bytes(&self) -> u64 {
        self.backing.len_bytes() as u64
    }

    /// The memfd backing the range (mmap offset 0 is the first byte).
    pub fn backing(&self) -> &Backing {
        &self.backing
    }
}

impl Drop for PhysRange {
    fn drop(&mut self) {
        self.ram.release(self.pa, self.len_bytes());
    }
}

#[derive(Debug)]
struct RamInner {
    size_bytes: u64,
    /// Free ranges: start -> length.
    free: Mutex<BTreeMap<u64, u64>>,
    /// Live ranges by start address (weakly: the range owns itself).
    live: RwLock<BTreeMap<u64, std::sync::Weak<PhysRange>>>,
    allocated_pages: AtomicU64,
    /// Advanced whenever page tables in this RAM change: GPU TLBs are
    /// invalidated by it.
    translation_generation: AtomicU64,
}

impl RamInner {
    fn release(&self, pa: u64, len: u64) {
        self.live
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&pa);
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let (mut start, mut length) = (pa, len);
        // Merge with the neighbours.
        if let Some((&prev, &prev_len)) = free.range(..start).next_back() {
            if prev + prev_len == start {
                free.remove(&prev);
                start = prev;
                length += prev_len;
            }
        }
        if let Some(&next_len) = free.get(&(start + length)) {
            free.remove(&(start + length));
            length += next_len;
        }
        free.insert(start, length);
        self.allocated_pages
            .fetch_sub(len / PAGE_BYTES, Ordering::Relaxed);
    }
}

/// The simulated RAM.
#[derive(Debug, Clone)]
pub struct Ram {
    inner: Arc<RamInner>,
}

impl Ram {
    /// RAM of `size_bytes` (rounded down to pages) at [`RAM_BASE`].
    pub fn new(size_bytes: u64) -> Ram {
        let size_bytes = size_bytes / PAGE_BYTES * PAGE_BYTES;
        let mut free = BTreeMap::new();
        if size_bytes > 0 {
            free.insert(RAM_BASE, size_bytes);
        }
        Ram {
            inner: Arc::new(RamInner {
                size_bytes,
                free: Mutex::new(free),
                live: RwLock::new(BTreeMap::new()),
                allocated_pages: AtomicU64::new(0),
                translation_generation: AtomicU64::new(0),
            }),
        }
    }

    /// Total RAM.
    pub fn size_bytes(&self) -> u64 {
        self.inner.size_bytes
    }

    /// Pages currently allocated.
    pub fn allocated_pages(&self) -> u64 {
        self.inner.allocated_pages.load(Ordering::Relaxed)
    }

    /// Allocates `size_bytes` (rounded up to whole pages), zero-filled.
    pub fn allocate(&self, size_bytes: u64, name: &str) -> Result<Arc<PhysRange>, AllocError> {
        let len = size_bytes
            .checked_next_multiple_of(PAGE_BYTES)
            .unwrap_or(u64::MAX);
        let pa = self.reserve(len)?;
        let backing = usize::try_from(len)
            .map_err(|e| e.to_string())
            .and_then(|l| Backing::new(name, l).map_err(|e| e.to_string()));
        self.place(pa, len, backing)
    }

    /// Places memory that already exists (a memfd another process or
    /// system exported) in the physical address space.
    pub fn adopt(&self, fd: std::os::fd::OwnedFd) -> Result<Arc<PhysRange>, AllocError> {
        let backing = Backing::from_fd(fd).map_err(|e| AllocError::Host(e.to_string()))?;
        let len = backing.len_bytes() as u64;
        if !len.is_multiple_of(PAGE_BYTES) {
            return Err(AllocError::Host(
                "imported memory is not whole pages".into(),
            ));
        }
        let pa = self.reserve(len)?;
        self.place(pa, len, Ok(backing))
    }

    fn reserve(&self, len: u64) -> Result<u64, AllocError> {
        let mut free = self.inner.free.lock().unwrap_or_else(|e| e.into_inner());
        let total_free: u64 = free.values().sum();
        let found = (len != 0)
            .then(|| free.iter().find(|(_, &l)| l >= len).map(|(&s, &l)| (s, l)))
            .flatten();
        let Some((start, available)) = found else {
            return Err(AllocError::OutOfMemory {
                requested_bytes: len,
                free_bytes: total_free,
            });
        };
        free.remove(&start);
        if available > len {
            free.insert(start + len, available - len);
        }
        Ok(start)
    }

    fn place(
        &self,
        pa: u64,
        len: u64,
        backing: Result<Backing, String>,
    ) -> Result<Arc<PhysRange>, AllocError> {
        // Count the pages first so that releasing on failure balances.
        self.inner
            .allocated_pages
            .fetch_add(len / PAGE_BYTES, Ordering::Relaxed);
        let backing = match backing {
            Ok(backing) => backing,
            Err(e) => {
                self.inner.release(pa, len);
                return Err(AllocError::Host(e));
            }
        };
        let range = Arc::new(PhysRange {
            pa,
            backing,
            ram: Arc::clone(&self.inner),
        });
        self.inner
            .live
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pa, Arc::downgrade(&range));
        Ok(range)
    }

    /// The live range containing `pa`, and the offset of `pa` in it.
    fn locate(&self, pa: u64, len: usize) -> Result<(Arc<PhysRange>, usize), PhysFault> {
        let live = self.inner.live.read().unwrap_or_else(|e| e.into_inner());
        let fault = PhysFault { pa: PhysAddr(pa) };
        let (_, weak) = live.range(..=pa).next_back().ok_or(fault)?;
        let range = weak.upgrade().ok_or(fault)?;
        let offset = pa - range.pa;
        let end = offset.checked_add(len as u64).ok_or(fault)?;
        if end > range.len_bytes() {
            return Err(PhysFault {
                pa: PhysAddr(range.pa + range.len_bytes().max(offset)),
            });
        }
        Ok((range, offset as usize))
    }
}

impl Ram {
    /// Invalidates every GPU translation cached so far (the page tables
    /// changed).
    pub fn shoot_down_tlbs(&self) {
        self.inner
            .translation_generation
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }
}

impl PhysicalAccess for Ram {
    fn translation_generation(&self) -> u64 {
        self.inner
            .translation_generation
            .load(std::sync::atomic::Ordering::Acquire)
    }

    fn read(&self, pa: PhysAddr, buf: &mut [u8]) -> Result<(), PhysFault> {
        let (range, offset) = self.locate(pa.get(), buf.len())?;
        range.backing.read(offset, buf).ok_or(PhysFault { pa })
    }

    fn write(&self, pa: PhysAddr, data: &[u8]) -> Result<(), PhysFault> {
        let (range, offset) = self.locate(pa.get(), data.len())?;
        range.backing.write(offset, data).ok_or(PhysFault { pa })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_disjoint_zeroed_and_reused_after_free() {
        let ram = Ram::new(4 * PAGE_BYTES);
        let a = ram.allocate(1, "a").unwrap();
        let b = ram.allocate(2 * PAGE_BYTES, "b").unwrap();
        assert_eq!(a.len_bytes(), PAGE_BYTES);
        assert_eq!(b.pa(), a.pa().offset(PAGE_BYTES));
        assert_eq!(ram.allocated_pages(), 3);
        ram.write(b.pa().offset(10), &[7, 8]).unwrap();
        let mut buf = [0u8; 3];
        ram.read(b.pa().offset(9), &mut buf).unwrap();
        assert_eq!(buf, [0, 7, 8]);
        // A read running off the end of a range faults at its end.
        let mut big = [0u8; 8];
        assert_eq!(
            ram.read(a.pa().offset(PAGE_BYTES - 4), &mut big),
            Err(PhysFault {
                pa: a.pa().offset(PAGE_BYTES)
            })
        );
        assert!(
            matches!(ram.allocate(2 * PAGE_BYTES, "c"), Err(AllocError::OutOfMemory { free_bytes, .. }) if free_bytes == PAGE_BYTES)
        );
        let a_pa = a.pa();
        drop(a);
        assert_eq!(ram.allocated_pages(), 2);
        assert!(
            ram.read(a_pa, &mut buf).is_err(),
            "freed memory is not readable"
        );
        drop(b);
        // Freed neighbours merge: the whole RAM is one range again.
        let all = ram.allocate(4 * PAGE_BYTES, "all").unwrap();
        assert_eq!(all.pa(), PhysAddr(RAM_BASE));
        assert!(matches!(
            ram.allocate(0, "zero"),
            Err(AllocError::OutOfMemory { .. })
        ));
    }
}
