//! Writing a VM's UAT page tables.
//!
//! Each VM owns a root table and the level-1 and leaf tables created on
//! demand as ranges are mapped; all of them are 16 KiB pages of simulated
//! RAM taken from a [`PagePool`] (kernel memory, carved from large
//! allocations so that thousands of tables do not each need a host file).
//! Mapping writes leaf entries a whole table at a time. Tables stay once
//! created, as in the kernel driver, and go back to the pool with the VM.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agx_hw::addr::PhysAddr;
use agx_hw::uat::{self, PhysicalMemory as _, ENTRIES_PER_TABLE, LEVELS, PAGE_BYTES};

use super::phys::{AllocError, PhysRange, Ram};

/// Pages per slab the pool takes from RAM at a time.
const SLAB_PAGES: u64 = 64;

/// 16 KiB pages of kernel memory for page tables and firmware objects.
#[derive(Debug)]
pub struct PagePool {
    ram: Ram,
    inner: Mutex<PoolInner>,
}

#[derive(Debug, Default)]
struct PoolInner {
    slabs: Vec<Arc<PhysRange>>,
    free: Vec<u64>,
    in_use: u64,
}

impl PagePool {
    /// A pool drawing from `ram`.
    pub fn new(ram: Ram) -> PagePool {
        PagePool {
            ram,
            inner: Mutex::new(PoolInner::default()),
        }
    }

    /// The RAM the pool draws from.
    pub fn ram(&self) -> &Ram {
        &self.ram
    }

    /// Pages handed out and not yet returned.
    pub fn pages_in_use(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).in_use
    }

    /// A zeroed page; its physical address.
    pub fn alloc(&self) -> Result<u64, AllocError> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.free.is_empty() {
            let slab = self.ram.allocate(SLAB_PAGES * PAGE_BYTES)?;
            inner.free.extend(
                (0..SLAB_PAGES)
                    .rev()
                    .map(|i| slab.pa().get() + i * PAGE_BYTES),
            );
            inner.slabs.push(slab);
        }
        let pa = inner.free.pop().ok_or(AllocError::OutOfMemory {
            requested_bytes: PAGE_BYTES,
            free_bytes: 0,
        })?;
        inner.in_use += 1;
        drop(inner);
        self.ram
            .write(PhysAddr(pa), &[0u8; PAGE_BYTES as usize])
            .map_err(|e| AllocError::Host(e.to_string()))?;
        Ok(pa)
    }

    /// Returns a page. When no page is in use the slabs go back to RAM.
    pub fn free(&self, pa: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.free.push(pa);
        inner.in_use -= 1;
        if inner.in_use == 0 {
            inner.free.clear();
            inner.slabs.clear();
        }
    }
}

/// A zeroed page of the pool, returned to it when dropped (a VM's dummy
/// page).
#[derive(Debug)]
pub struct PoolPage {
    pool: Arc<PagePool>,
    pa: u64,
}

impl PoolPage {
    /// Takes a zeroed page from `pool`.
    pub fn new(pool: Arc<PagePool>) -> Result<PoolPage, AllocError> {
        let pa = pool.alloc()?;
        Ok(PoolPage { pool, pa })
    }

    /// Its physical address.
    pub fn pa(&self) -> PhysAddr {
        PhysAddr(self.pa)
    }
}

impl Drop for PoolPage {
    fn drop(&mut self) {
        self.pool.free(self.pa);
    }
}

/// The tables of one address space.
#[derive(Debug)]
pub struct PageTables {
    pool: Arc<PagePool>,
    root: u64,
    /// Tables below the root, by (level, VA of the first byte they map).
    tables: HashMap<(u32, u64), u64>,
}

impl PageTables {
    /// An empty address space (a zeroed root).
    pub fn new(pool: Arc<PagePool>) -> Result<PageTables, AllocError> {
        let root = pool.alloc()?;
        Ok(PageTables {
            pool,
            root,
            tables: HashMap::new(),
        })
    }

    /// The root table's physical address (the TTB).
    pub fn root_pa(&self) -> PhysAddr {
        PhysAddr(self.root)
    }

    /// Pages of tables, root included.
    pub fn table_pages(&self) -> usize {
        1 + self.tables.len()
    }

    /// The table at `level` covering `va`, created (and linked from its
    /// parent) if `create`.
    fn table(&mut self, level: u32, va: u64, create: bool) -> Result<Option<u64>, AllocError> {
        if level == LEVELS - 1 {
            return Ok(Some(self.root));
        }
        let span = uat::level_span_bytes(level + 1);
        let key = (level, va / span * span);
        if let Some(&pa) = self.tables.get(&key) {
            return Ok(Some(pa));
        }
        if !create {
            return Ok(None);
        }
        let Some(parent) = self.table(level + 1, va, true)? else {
            return Ok(None);
        };
        let pa = self.pool.alloc()?;
        let entry = uat::table_pte(PhysAddr(pa))
            .ok_or_else(|| AllocError::Host("table address out of range".into()))?;
        let ram = self.pool.ram();
        ram.write_u64(
            PhysAddr(parent + 8 * uat::table_index(va, level + 1)),
            entry,
        )
        .map_err(|e| AllocError::Host(e.to_string()))?;
        self.tables.insert(key, pa);
        Ok(Some(pa))
    }

    /// Creates every table that entries for `pages` pages from `va` need,
    /// writing no leaf entry: after it, [`PageTables::set`] on the range
    /// allocates nothing, so a multi-step update can reserve first and
    /// then apply without failing half way. Tables made and left unused
    /// are empty.
    pub fn reserve(&mut self, va: u64, pages: u64) -> Result<(), AllocError> {
        let mut done = 0;
        while done < pages {
            let page_va = va + done * PAGE_BYTES;
            let first = uat::table_index(page_va, 0);
            self.table(0, page_va, true)?;
            done += (ENTRIES_PER_TABLE - first).min(pages - done);
        }
        Ok(())
    }

    /// Writes leaf entries for `pages` pages from `va`: entry `i` is
    /// `pte(i)` (0 clears it). Creates tables as needed when any entry is
    /// non-zero.
    pub fn set(&mut self, va: u64, pages: u64, pte: impl Fn(u64) -> u64) -> Result<(), AllocError> {
        let mut done = 0;
        while done < pages {
            let page_va = va + done * PAGE_BYTES;
            let first = uat::table_index(page_va, 0);
            let count = (ENTRIES_PER_TABLE - first).min(pages - done);
            let entries: Vec<u64> = (done..done + count).map(&pte).collect();
            let create = entries.iter().any(|&e| e != 0);
            if let Some(table) = self.table(0, page_va, create)? {
                let bytes: Vec<u8> = entries.iter().flat_map(|e| e.to_le_bytes()).collect();
                self.pool
                    .ram()
                    .write(PhysAddr(table + 8 * first), &bytes)
                    .map_err(|e| AllocError::Host(e.to_string()))?;
            }
            done += count;
        }
        // Entries changed: cached translations of them are stale.
        self.pool.ram().shoot_down_tlbs();
        Ok(())
    }
}

impl Drop for PageTables {
    fn drop(&mut self) {
        for (_, pa) in self.tables.drain() {
            self.pool.free(pa);
        }
        self.pool.free(self.root);
    }
}

#[cfg(test)]
mod tests {
    use agx_hw::formats::UatMemAttr;
    use agx_hw::uat::{translate, Access, Permissions};

    use super::*;

    #[test]
    fn mapped_ranges_translate_and_cleared_ones_fault() {
        let ram = Ram::new(64 << 20).unwrap();
        let pool = Arc::new(PagePool::new(ram.clone()));
        let mut tables = PageTables::new(Arc::clone(&pool)).unwrap();
        let object = ram.allocate(4 * PAGE_BYTES).unwrap();
        let rw = Permissions {
            gpu_read: true,
            gpu_write: true,
            ..Permissions::default()
        };
        // Straddle a leaf-table boundary (2048 pages = 32 MiB).
        let va = 0x4000_0000 - 2 * PAGE_BYTES;
        tables
            .set(va, 4, |i| {
                uat::page_pte(object.pa().offset(i * PAGE_BYTES), rw, UatMemAttr::Cached).unwrap()
            })
            .unwrap();
        assert_eq!(
            tables.table_pages(),
            1 + 1 + 2,
            "root, one level-1, two leaves"
        );
        for i in 0..4 {
            let t = translate(
                &ram,
                tables.root_pa(),
                va + i * PAGE_BYTES + 8,
                Access::GpuWrite,
            )
            .unwrap();
            assert_eq!(t.pa, object.pa().offset(i * PAGE_BYTES + 8));
        }
        tables.set(va + PAGE_BYTES, 2, |_| 0).unwrap();
        assert!(translate(&ram, tables.root_pa(), va + PAGE_BYTES, Access::GpuRead).is_err());
        assert!(translate(&ram, tables.root_pa(), va, Access::GpuRead).is_ok());
        assert!(translate(&ram, tables.root_pa(), va + 3 * PAGE_BYTES, Access::GpuRead).is_ok());
        assert_eq!(pool.pages_in_use(), 4);
        drop(tables);
        assert_eq!(pool.pages_in_use(), 0);
    }

    #[test]
    fn reserving_makes_every_table_a_later_set_needs() {
        let ram = Ram::new(64 << 20).unwrap();
        let pool = Arc::new(PagePool::new(ram.clone()));
        let mut tables = PageTables::new(Arc::clone(&pool)).unwrap();
        let object = ram.allocate(PAGE_BYTES).unwrap();
        let rw = Permissions {
            gpu_read: true,
            ..Permissions::default()
        };
        // 3000 pages from just below a leaf boundary: three leaves.
        let va = 0x4000_0000 - 2 * PAGE_BYTES;
        tables.reserve(va, 3000).unwrap();
        let reserved = pool.pages_in_use();
        assert_eq!(tables.table_pages(), 1 + 1 + 3);
        assert!(
            translate(&ram, tables.root_pa(), va, Access::GpuRead).is_err(),
            "no entry written"
        );
        tables
            .set(va, 3000, |_| {
                uat::page_pte(object.pa(), rw, UatMemAttr::Cached).unwrap()
            })
            .unwrap();
        assert_eq!(pool.pages_in_use(), reserved, "set allocated nothing");
        assert!(translate(
            &ram,
            tables.root_pa(),
            va + 2999 * PAGE_BYTES,
            Access::GpuRead
        )
        .is_ok());
    }
}
