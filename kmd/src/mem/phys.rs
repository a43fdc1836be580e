//! Simulated physical memory: the SoC's unified RAM.
//!
//! On Apple silicon the CPU and the GPU share one RAM; the GPU reaches it
//! through its MMU (the UAT) and the page tables the kernel writes. Here
//! RAM is a physical address space backed by one host [`Window`]: physical
//! address `RAM_BASE + n` is byte `n` of the window. Every allocation is a
//! contiguous range of it; kernel memory lives in the window's pool, an
//! exportable GEM object has a memfd of its own mapped at its place, and
//! small private objects share the memfd of a slab that belongs to one
//! DRM file (`Documentation/memory-model.md`). The kmd allocates GEM
//! objects, page tables and firmware structures from it; the simulated GPU
//! reads and writes it by physical address after walking the page tables.
//! An access to a page no allocation holds faults, as a bus error would.
//! The total size is fixed when the system is built, so running out of RAM
//! is an ordinary `ENOMEM`.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agx_hw::addr::PhysAddr;
use agx_hw::uat::{PhysFault, PhysicalMemory as PhysicalAccess, PAGE_BYTES};

use super::backing::{self, DeviceFd, Inode, Placement, Window};

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
    /// A GPU virtual address range is full (the memory itself may be
    /// plentiful).
    #[error("out of GPU address space in the {region}: {requested_bytes} bytes requested, {free_bytes} free (possibly fragmented)")]
    OutOfAddressSpace {
        /// Which range.
        region: &'static str,
        /// What was asked for.
        requested_bytes: u64,
        /// What was left.
        free_bytes: u64,
    },
    /// The host refused the memfd or mapping.
    #[error("host memory: {0}")]
    Host(String),
}

impl From<std::io::Error> for AllocError {
    fn from(error: std::io::Error) -> AllocError {
        AllocError::Host(error.to_string())
    }
}

/// What backs a range.
#[derive(Debug)]
enum Placed {
    /// The window's pool (kernel memory, never mapped for a client).
    Pool,
    /// A memfd of its own mapped over the range (a GEM object), with the
    /// device's descriptor of it if the object can be exported.
    Covered(Option<DeviceFd>),
    /// Part of a slab's memfd (a small private GEM object). `mapped` is
    /// set once a CPU mapping of it was made or handed out: its pages then
    /// stay in the memfd, for that mapping, until the slab goes.
    InSlab {
        slab: Arc<Slab>,
        offset_bytes: u64,
        mapped: AtomicBool,
    },
}

/// Private objects up to this size go in slabs; larger ones get a memfd
/// of their own. With it, objects with a memfd of their own number at
/// most RAM / 1 MiB, slabs RAM / [`SLAB_BYTES`].
pub const SLAB_OBJECT_MAX_BYTES: u64 = 1 << 20;

/// A slab's size (less in a RAM too small for 64 of them).
pub const SLAB_BYTES: u64 = 8 << 20;

/// One memfd over a contiguous range of RAM, from which one DRM file's
/// small private objects are cut in order. A range is never handed out
/// twice: a client's mapping of the slab's memfd (which can reach the
/// whole slab) sees only this file's objects, and an object's old
/// mapping never sees the pages of a newer one. A never-mapped object's
/// pages are released when it is freed; the slab's range goes back to
/// RAM, zeroed, with its last object.
#[derive(Debug)]
pub struct Slab {
    pa: u64,
    len_bytes: u64,
    /// The device's descriptor of the memfd, when mappings are handed out
    /// as descriptors.
    fd: Option<DeviceFd>,
    /// Bytes cut so far.
    used_bytes: Mutex<u64>,
    ram: Arc<RamInner>,
}

impl Drop for Slab {
    fn drop(&mut self) {
        self.ram.return_range(self.pa, self.len_bytes, true);
    }
}

/// The slab one DRM file cuts its small private objects from.
#[derive(Debug, Default)]
pub struct Slabs {
    current: Mutex<Option<Arc<Slab>>>,
}

/// A contiguous range of physical memory, freed when the last reference
/// goes.
#[derive(Debug)]
pub struct PhysRange {
    pa: u64,
    len_bytes: u64,
    placed: Placed,
    ram: Arc<RamInner>,
}

impl PhysRange {
    /// The physical address of the first byte.
    pub fn pa(&self) -> PhysAddr {
        PhysAddr(self.pa)
    }

    /// The size in bytes (whole pages).
    pub fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    fn window_offset(&self, offset: u64, len: usize) -> Option<usize> {
        let end = offset.checked_add(len as u64)?;
        (end <= self.len_bytes).then(|| (self.pa - RAM_BASE + offset) as usize)
    }

    /// Copies bytes out from `offset` within the range; `None` if the
    /// bytes are not all inside it.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Option<()> {
        let at = self.window_offset(offset, buf.len())?;
        self.ram.window.read(at, buf)
    }

    /// Copies bytes in at `offset` within the range; `None` if the bytes
    /// are not all inside it.
    pub fn write(&self, offset: u64, data: &[u8]) -> Option<()> {
        let at = self.window_offset(offset, data.len())?;
        self.ram.window.write(at, data)
    }

    fn own(&self) -> Option<&DeviceFd> {
        match &self.placed {
            Placed::Covered(own) => own.as_ref(),
            Placed::Pool | Placed::InSlab { .. } => None,
        }
    }

    /// A descriptor through which a CPU mapping reaches the range, and
    /// the range's offset in it: its own memfd, or its slab's (which
    /// holds only objects of the same file). `EINVAL` for a pool range;
    /// `EBADF` if the process closed the device's own descriptor or the
    /// device keeps none.
    pub fn mapping_fd(&self, cloexec: bool) -> std::io::Result<(OwnedFd, u64)> {
        match &self.placed {
            Placed::InSlab {
                slab,
                offset_bytes,
                mapped,
            } => {
                let fd = slab
                    .fd
                    .as_ref()
                    .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EBADF))?
                    .duplicate(cloexec)?;
                mapped.store(true, Ordering::Relaxed);
                Ok((fd, *offset_bytes))
            }
            _ => Ok((self.export_fd(cloexec)?, 0)),
        }
    }

    /// Whether the range is part of a slab.
    pub fn is_in_slab(&self) -> bool {
        matches!(self.placed, Placed::InSlab { .. })
    }

    /// Whether the device keeps a descriptor of the range's memfd (it
    /// can be exported).
    pub fn is_exportable(&self) -> bool {
        self.own().is_some()
    }

    /// The identity of an exportable range's memfd.
    pub fn memfd_identity(&self) -> Option<Inode> {
        self.own().map(DeviceFd::identity)
    }

    /// A new descriptor of an exportable range's memfd, which maps
    /// exactly the range (a PRIME fd). `EINVAL` for a pool range; `EBADF`
    /// if the process closed the device's own descriptor.
    pub fn export_fd(&self, cloexec: bool) -> std::io::Result<OwnedFd> {
        self.own()
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))?
            .duplicate(cloexec)
    }

    /// Maps `len` bytes from `offset` within the range into this process
    /// for the CPU, sharing the pages (a client's `mmap` of the object).
    /// The bytes must lie inside the range; `offset` must be whole pages.
    /// Only a range with a memfd of its own can be mapped (`EINVAL` for
    /// kernel memory in the pool), so the mapping holds that memfd and
    /// never reaches the range's next owner.
    pub fn map_for_cpu(
        &self,
        offset: u64,
        len: usize,
        prot: i32,
        placement: Placement,
    ) -> std::io::Result<NonNull<u8>> {
        if matches!(self.placed, Placed::Pool) {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        let at = self
            .window_offset(offset, len)
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        if let Placed::InSlab { mapped, .. } = &self.placed {
            mapped.store(true, Ordering::Relaxed);
        }
        self.ram.window.map_again(at, len, prot, placement)
    }
}

impl Drop for PhysRange {
    fn drop(&mut self) {
        match &self.placed {
            Placed::InSlab { mapped, .. } => {
                // Faults first; the range itself stays the slab's.
                self.ram.mark(self.pa, self.len_bytes, false);
                self.ram
                    .allocated_pages
                    .fetch_sub(self.len_bytes / PAGE_BYTES, Ordering::Relaxed);
                if !mapped.load(Ordering::Relaxed) {
                    // Nothing outside can reach the pages: their host
                    // memory goes now (they read zero, were they reached).
                    let offset = (self.pa - RAM_BASE) as usize;
                    if let Err(error) = self
                        .ram
                        .window
                        .release_covered(offset, self.len_bytes as usize)
                    {
                        tracing::warn!(
                            pa = format_args!("{:#x}", self.pa),
                            %error,
                            "cannot release a freed slab object's pages; they go with the slab"
                        );
                    }
                }
            }
            Placed::Covered(_) => self.ram.release(self.pa, self.len_bytes, true),
            Placed::Pool => self.ram.release(self.pa, self.len_bytes, false),
        }
    }
}

#[derive(Debug)]
struct RamInner {
    window: Window,
    size_bytes: u64,
    /// Free ranges: start -> length.
    free: Mutex<BTreeMap<u64, u64>>,
    /// One bit per page: set while an allocation holds the page.
    live_pages: Vec<AtomicU64>,
    allocated_pages: AtomicU64,
    /// Advanced whenever page tables in this RAM change: GPU TLBs are
    /// invalidated by it.
    translation_generation: AtomicU64,
}

impl RamInner {
    fn page_index(&self, pa: u64) -> usize {
        ((pa - RAM_BASE) / PAGE_BYTES) as usize
    }

    fn mark(&self, pa: u64, len: u64, live: bool) {
        let first = self.page_index(pa);
        for page in first..first + (len / PAGE_BYTES) as usize {
            let bit = 1u64 << (page % 64);
            let word = &self.live_pages[page / 64];
            if live {
                word.fetch_or(bit, Ordering::Release);
            } else {
                word.fetch_and(!bit, Ordering::Release);
            }
        }
    }

    /// The window offset of `[pa, pa + len)` if every page of it is held
    /// by an allocation; otherwise the first address that is not.
    fn locate(&self, pa: u64, len: usize) -> Result<usize, PhysFault> {
        let end = pa.checked_add(len as u64);
        if pa < RAM_BASE || end.is_none_or(|end| end > RAM_BASE + self.size_bytes) {
            return Err(PhysFault { pa: PhysAddr(pa) });
        }
        if len == 0 {
            return Ok((pa - RAM_BASE) as usize);
        }
        let last = self.page_index(pa + len as u64 - 1);
        for page in self.page_index(pa)..=last {
            let held = self.live_pages[page / 64].load(Ordering::Acquire) & (1 << (page % 64));
            if held == 0 {
                let page_pa = RAM_BASE + page as u64 * PAGE_BYTES;
                return Err(PhysFault {
                    pa: PhysAddr(page_pa.max(pa)),
                });
            }
        }
        Ok((pa - RAM_BASE) as usize)
    }

    fn release(&self, pa: u64, len: u64, covered: bool) {
        // Fault accesses first, then hand the pages back zeroed.
        self.mark(pa, len, false);
        if self.return_range(pa, len, covered) {
            self.allocated_pages
                .fetch_sub(len / PAGE_BYTES, Ordering::Relaxed);
        }
    }

    /// Hands `[pa, pa + len)` back to the free ranges, zeroed (with the
    /// pool's pages mapped back first if it was `covered`). False if it
    /// could not be zeroed, and is retired instead.
    fn return_range(&self, pa: u64, len: u64, covered: bool) -> bool {
        let offset = (pa - RAM_BASE) as usize;
        // Uncovering brings the pool's pages back; they were released
        // when last freed, but release them again so that nothing written
        // through any path survives.
        let restored = if covered {
            self.window.uncover(offset, len as usize)
        } else {
            Ok(())
        }
        .and_then(|()| self.window.release(offset, len as usize));
        if let Err(error) = restored {
            // The pages may still hold data: never hand them out again.
            tracing::error!(
                pa = format_args!("{pa:#x}"),
                len_bytes = len,
                %error,
                "cannot return freed RAM to the pool; the range is retired"
            );
            return false;
        }
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
        true
    }
}

/// The simulated RAM.
#[derive(Debug, Clone)]
pub struct Ram {
    inner: Arc<RamInner>,
}

impl Ram {
    /// RAM of `size_bytes` (rounded down to pages) at [`RAM_BASE`]. Host
    /// memory is used only for pages that are written.
    pub fn new(size_bytes: u64) -> Result<Ram, AllocError> {
        let size_bytes = size_bytes / PAGE_BYTES * PAGE_BYTES;
        let len = usize::try_from(size_bytes)
            .map_err(|_| AllocError::Host("RAM larger than the host address space".into()))?;
        let window = Window::new(len)?;
        let mut free = BTreeMap::new();
        free.insert(RAM_BASE, size_bytes);
        let pages = (size_bytes / PAGE_BYTES) as usize;
        Ok(Ram {
            inner: Arc::new(RamInner {
                window,
                size_bytes,
                free: Mutex::new(free),
                live_pages: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
                allocated_pages: AtomicU64::new(0),
                translation_generation: AtomicU64::new(0),
            }),
        })
    }

    /// Total RAM.
    pub fn size_bytes(&self) -> u64 {
        self.inner.size_bytes
    }

    /// Pages currently allocated.
    pub fn allocated_pages(&self) -> u64 {
        self.inner.allocated_pages.load(Ordering::Relaxed)
    }

    /// Allocates `size_bytes` (rounded up to whole pages) from the pool,
    /// zero-filled.
    pub fn allocate(&self, size_bytes: u64) -> Result<Arc<PhysRange>, AllocError> {
        let len = Self::pages_for(size_bytes);
        let pa = self.reserve(len)?;
        Ok(self.place(pa, len, Placed::Pool))
    }

    /// Allocates `size_bytes` (rounded up to whole pages), zero-filled,
    /// with a memfd of its own named `name`, for a GEM object: a CPU
    /// mapping of it holds that memfd, so once the object is freed such a
    /// mapping still reaches only the object's old pages, never what the
    /// range holds next. With `exportable`, the device keeps a descriptor
    /// of the memfd (a PRIME fd is a duplicate of it); without, the
    /// descriptor is closed at once and the mappings keep the file alive.
    pub fn allocate_object(
        &self,
        size_bytes: u64,
        name: &str,
        exportable: bool,
    ) -> Result<Arc<PhysRange>, AllocError> {
        let len = Self::pages_for(size_bytes);
        let pa = self.reserve(len)?;
        let memfd = backing::create_memfd(name, len);
        self.cover(pa, len, memfd, exportable)
    }

    /// Allocates `size_bytes` (rounded up to whole pages), zero-filled,
    /// for a private GEM object of the file whose slabs are `slabs`: cut
    /// from the file's current slab, or a new one (whose memfd is named
    /// `name`; the device keeps a descriptor of it with `keep`). An
    /// object too large for a slab, or one for which RAM has no new slab,
    /// gets a memfd of its own ([`Ram::allocate_object`]).
    pub fn allocate_in_slab(
        &self,
        slabs: &Slabs,
        size_bytes: u64,
        name: &str,
        keep: bool,
    ) -> Result<Arc<PhysRange>, AllocError> {
        let len = Self::pages_for(size_bytes);
        if len == 0 || len > SLAB_OBJECT_MAX_BYTES {
            return self.allocate_object(size_bytes, name, keep);
        }
        let mut current = slabs.current.lock().unwrap_or_else(|e| e.into_inner());
        for attempt in 0..2 {
            if let Some(slab) = current.as_ref() {
                let mut used = slab.used_bytes.lock().unwrap_or_else(|e| e.into_inner());
                if *used + len <= slab.len_bytes {
                    let offset_bytes = *used;
                    *used += len;
                    drop(used);
                    return Ok(self.place(
                        slab.pa + offset_bytes,
                        len,
                        Placed::InSlab {
                            slab: Arc::clone(slab),
                            offset_bytes,
                            mapped: AtomicBool::new(false),
                        },
                    ));
                }
            }
            if attempt == 0 {
                match self.new_slab(name, keep) {
                    Ok(slab) => *current = Some(slab),
                    Err(error) => {
                        tracing::debug!(%error, "no new slab: the object gets a memfd of its own");
                        break;
                    }
                }
            }
        }
        drop(current);
        self.allocate_object(size_bytes, name, keep)
    }

    fn new_slab(&self, name: &str, keep: bool) -> Result<Arc<Slab>, AllocError> {
        let len = SLAB_BYTES
            .min(self.inner.size_bytes / 64 / PAGE_BYTES * PAGE_BYTES)
            .max(SLAB_OBJECT_MAX_BYTES);
        let pa = self.reserve(len)?;
        let offset = (pa - RAM_BASE) as usize;
        let fd = backing::create_memfd(name, len).and_then(|fd| {
            self.inner.window.cover(offset, len as usize, fd.as_fd())?;
            keep.then(|| DeviceFd::keep(fd)).transpose()
        });
        match fd {
            Ok(fd) => Ok(Arc::new(Slab {
                pa,
                len_bytes: len,
                fd,
                used_bytes: Mutex::new(0),
                ram: Arc::clone(&self.inner),
            })),
            Err(error) => {
                self.inner.return_range(pa, len, true);
                Err(error.into())
            }
        }
    }

    /// Places memory that already exists (a memfd another process or
    /// system exported) in the physical address space.
    pub fn adopt(&self, fd: OwnedFd) -> Result<Arc<PhysRange>, AllocError> {
        let len = backing::sealed_size_bytes(fd.as_fd())?;
        if len == 0 || !len.is_multiple_of(PAGE_BYTES) {
            return Err(AllocError::Host(
                "imported memory is not whole pages".into(),
            ));
        }
        let pa = self.reserve(len)?;
        self.cover(pa, len, Ok(fd), true)
    }

    /// `size_bytes` rounded up to whole pages (saturating), what an
    /// allocation of it takes.
    pub fn pages_for(size_bytes: u64) -> u64 {
        size_bytes
            .checked_next_multiple_of(PAGE_BYTES)
            .unwrap_or(u64::MAX)
    }

    fn cover(
        &self,
        pa: u64,
        len: u64,
        memfd: std::io::Result<OwnedFd>,
        keep: bool,
    ) -> Result<Arc<PhysRange>, AllocError> {
        let offset = (pa - RAM_BASE) as usize;
        let covered = memfd.and_then(|fd| {
            self.inner.window.cover(offset, len as usize, fd.as_fd())?;
            keep.then(|| DeviceFd::keep(fd)).transpose()
        });
        match covered {
            Ok(own) => Ok(self.place(pa, len, Placed::Covered(own))),
            Err(error) => {
                // Count the pages so that releasing balances.
                self.inner
                    .allocated_pages
                    .fetch_add(len / PAGE_BYTES, Ordering::Relaxed);
                // Hand the range back (uncovering it is harmless if the
                // cover never happened).
                self.inner.release(pa, len, true);
                Err(error.into())
            }
        }
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

    fn place(&self, pa: u64, len: u64, placed: Placed) -> Arc<PhysRange> {
        self.inner
            .allocated_pages
            .fetch_add(len / PAGE_BYTES, Ordering::Relaxed);
        self.inner.mark(pa, len, true);
        Arc::new(PhysRange {
            pa,
            len_bytes: len,
            placed,
            ram: Arc::clone(&self.inner),
        })
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
        let offset = self.inner.locate(pa.get(), buf.len())?;
        self.inner.window.read(offset, buf).ok_or(PhysFault { pa })
    }

    fn host_window(&self) -> Option<agx_hw::host::HostWindow<'_>> {
        Some(
            self.inner
                .window
                .host_window(RAM_BASE, &self.inner.translation_generation),
        )
    }

    fn write(&self, pa: PhysAddr, data: &[u8]) -> Result<(), PhysFault> {
        let offset = self.inner.locate(pa.get(), data.len())?;
        self.inner
            .window
            .write(offset, data)
            .ok_or(PhysFault { pa })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_disjoint_zeroed_and_reused_after_free() {
        let ram = Ram::new(4 * PAGE_BYTES).unwrap();
        let a = ram.allocate(1).unwrap();
        let b = ram.allocate(2 * PAGE_BYTES).unwrap();
        assert_eq!(a.len_bytes(), PAGE_BYTES);
        assert_eq!(b.pa(), a.pa().offset(PAGE_BYTES));
        assert_eq!(ram.allocated_pages(), 3);
        ram.write(b.pa().offset(10), &[7, 8]).unwrap();
        let mut buf = [0u8; 3];
        ram.read(b.pa().offset(9), &mut buf).unwrap();
        assert_eq!(buf, [0, 7, 8]);
        // A read running into a page no allocation holds faults there.
        let mut big = [0u8; 8];
        assert_eq!(
            ram.read(b.pa().offset(2 * PAGE_BYTES - 4), &mut big),
            Err(PhysFault {
                pa: b.pa().offset(2 * PAGE_BYTES)
            })
        );
        assert!(
            matches!(ram.allocate(2 * PAGE_BYTES), Err(AllocError::OutOfMemory { free_bytes, .. }) if free_bytes == PAGE_BYTES)
        );
        let a_pa = a.pa();
        drop(a);
        assert_eq!(ram.allocated_pages(), 2);
        assert!(
            ram.read(a_pa, &mut buf).is_err(),
            "freed memory is not readable"
        );
        drop(b);
        // Freed neighbours merge: the whole RAM is one range again, and
        // what the freed ranges held is gone.
        let all = ram.allocate(4 * PAGE_BYTES).unwrap();
        assert_eq!(all.pa(), PhysAddr(RAM_BASE));
        let mut back = [0xffu8; 3];
        all.read(PAGE_BYTES + 9, &mut back).unwrap();
        assert_eq!(back, [0; 3]);
        assert!(matches!(
            ram.allocate(0),
            Err(AllocError::OutOfMemory { .. })
        ));
    }

    #[test]
    fn small_private_objects_share_their_files_slab_and_never_reuse_a_range() {
        let ram = Ram::new(256 << 20).unwrap();
        let (mine, theirs) = (Slabs::default(), Slabs::default());
        let cut = |slabs: &Slabs| {
            ram.allocate_in_slab(slabs, PAGE_BYTES, "slab", true)
                .unwrap()
        };
        let (x, y, z) = (cut(&mine), cut(&mine), cut(&theirs));
        assert!(x.is_in_slab() && y.is_in_slab() && z.is_in_slab());
        assert_eq!(y.pa(), x.pa().offset(PAGE_BYTES), "cut in order");
        let inode = |range: &PhysRange| {
            let (fd, at) = range.mapping_fd(true).unwrap();
            (rustix::fs::fstat(&fd).unwrap().st_ino, at, fd)
        };
        let (x_inode, x_at, slab_fd) = inode(&x);
        let (y_inode, y_at, _) = inode(&y);
        assert_eq!((x_inode, x_at, y_at), (y_inode, 0, PAGE_BYTES));
        assert_ne!(inode(&z).0, x_inode, "another file's slab");
        assert!(
            x.export_fd(true).is_err(),
            "a slab object is no buffer to export"
        );
        // y was handed out as a mapping: its bytes outlive it, for that
        // mapping. A never-mapped object's go with it.
        y.write(5, b"kept").unwrap();
        let w = cut(&mine);
        w.write(5, b"gone").unwrap();
        let w_at = w.pa().get() - x.pa().get();
        drop((y, w));
        let mut bytes = [0u8; 4];
        rustix::io::pread(&slab_fd, &mut bytes, PAGE_BYTES + 5).unwrap();
        assert_eq!(&bytes, b"kept");
        rustix::io::pread(&slab_fd, &mut bytes, w_at + 5).unwrap();
        assert_eq!(bytes, [0; 4]);
        let v = cut(&mine);
        assert!(
            v.pa().get() > x.pa().get() + w_at,
            "a range is never cut twice"
        );
        // Objects too large for a slab have a memfd of their own.
        let large = ram
            .allocate_in_slab(&mine, SLAB_OBJECT_MAX_BYTES + 1, "slab", true)
            .unwrap();
        assert!(!large.is_in_slab() && large.is_exportable());
        drop((x, z, v, large, slab_fd));
        assert_eq!(ram.allocated_pages(), 0);
        drop((mine, theirs));
        // The slabs' ranges are RAM again, zeroed.
        let all = ram.allocate(256 << 20).unwrap();
        let mut back = [0xffu8; 4];
        all.read(PAGE_BYTES + 5, &mut back).unwrap();
        assert_eq!(back, [0; 4]);
    }

    #[test]
    fn an_exportable_range_has_its_own_memfd_and_leaves_nothing_behind() {
        let ram = Ram::new(4 * PAGE_BYTES).unwrap();
        let shared = ram.allocate_object(PAGE_BYTES, "test-gem", true).unwrap();
        assert!(shared.is_exportable());
        shared.write(3, b"secret").unwrap();
        let prime = shared.export_fd(true).unwrap();
        let mut through_fd = [0u8; 6];
        rustix::io::pread(&prime, &mut through_fd, 3).unwrap();
        assert_eq!(&through_fd, b"secret");
        assert_eq!(
            rustix::fs::fstat(&prime).unwrap().st_size as u64,
            PAGE_BYTES,
            "the PRIME fd maps exactly the range"
        );
        let pa = shared.pa();
        drop(shared);
        // The importer still holds the pages; the RAM range is zero.
        let next = ram.allocate(PAGE_BYTES).unwrap();
        assert_eq!(next.pa(), pa);
        let mut back = [0xffu8; 6];
        next.read(3, &mut back).unwrap();
        assert_eq!(back, [0; 6]);
        assert_eq!(
            ram.allocate(PAGE_BYTES)
                .unwrap()
                .export_fd(true)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EINVAL),
            "a pool range cannot be exported"
        );
        rustix::io::pread(&prime, &mut through_fd, 3).unwrap();
        assert_eq!(&through_fd, b"secret");
    }
}
