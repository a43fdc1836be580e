//! The GPU MMU (UAT): page-table geometry, permissions and the walker.
//!
//! Every GPU access (shader loads and stores, texture fetches, control
//! streams, firmware accesses) goes through the UAT. A context's
//! translation tables are three levels of 16 KiB tables of 2048 64-bit
//! entries: the root (level 2) is indexed by VA bits 36-38, level 1 by bits
//! 25-35 and the leaf level (0) by bits 14-24, so a user address space is
//! 39 bits (512 GiB) of 16 KiB pages. Entries are [`UatPte`]s; there are no
//! huge pages. The kernel writes the tables into RAM; the walker here is
//! what the simulated GPU uses to translate, and what tests use to check
//! the tables.

use crate::addr::PhysAddr;
use crate::formats::{UatAp, UatFaultReason, UatMemAttr, UatPte};

/// Page size: 16 KiB.
pub const PAGE_BYTES: u64 = 1 << PAGE_SHIFT;
/// log2 of the page size.
pub const PAGE_SHIFT: u32 = 14;
/// Entries per table.
pub const ENTRIES_PER_TABLE: u64 = 2048;
/// Bits of VA per level.
pub const LEVEL_BITS: u32 = 11;
/// Levels of tables (2 = root .. 0 = leaf).
pub const LEVELS: u32 = 3;
/// Input address size of a context's user half (ttb0).
pub const USER_VA_BITS: u32 = 39;
/// Output (physical) address size on M1 (T8103).
pub const PA_BITS: u32 = 40;
/// Contexts (address spaces) the firmware knows; context 0 is the
/// kernel's.
pub const CONTEXTS: u32 = 64;

/// The first GPU address userspace may use (page 0 stays unmapped).
pub const USER_VA_START: u64 = PAGE_BYTES;
/// The end of the user half of an address space.
pub const USER_VA_END: u64 = 1 << USER_VA_BITS;
/// Every user VM maps a zeroed page here (the top of the user range minus
/// two pages; the page after it stays unmapped as a guard). It is also
/// where the usable user range ends.
pub const DUMMY_PAGE_VA: u64 = USER_VA_END - 2 * PAGE_BYTES;

/// The index into the level-`level` table for `va`.
pub const fn table_index(va: u64, level: u32) -> u64 {
    (va >> (PAGE_SHIFT + LEVEL_BITS * level)) & (ENTRIES_PER_TABLE - 1)
}

/// The bytes of VA one entry of a level-`level` table covers.
pub const fn level_span_bytes(level: u32) -> u64 {
    PAGE_BYTES << (LEVEL_BITS * level)
}

/// What an agent may do with a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Permissions {
    /// The GPU may read.
    pub gpu_read: bool,
    /// The GPU may write.
    pub gpu_write: bool,
    /// The firmware may read.
    pub fw_read: bool,
    /// The firmware may write.
    pub fw_write: bool,
}

impl Permissions {
    /// The (ap, uxn, pxn) encoding of these permissions, if the UAT has
    /// one. Combinations: firmware+GPU with the same rights; firmware RO,
    /// RW or RW with GPU RO; GPU RO, WO or RW; nothing.
    pub fn encode(self) -> Option<(UatAp, bool, bool)> {
        let Permissions {
            gpu_read: gr,
            gpu_write: gw,
            fw_read: fr,
            fw_write: fw,
        } = self;
        Some(match (gr, gw, fr, fw) {
            (false, false, false, false) => (UatAp::Gpu, true, true),
            (true, false, true, false) => (UatAp::FirmwareGpu, false, true),
            (false, true, false, true) => (UatAp::FirmwareGpu, true, false),
            (true, true, true, true) => (UatAp::FirmwareGpu, true, true),
            (false, false, true, false) => (UatAp::Firmware, false, false),
            (false, false, true, true) => (UatAp::Firmware, true, false),
            (true, false, true, true) => (UatAp::Firmware, true, true),
            (true, false, false, false) => (UatAp::Gpu, false, false),
            (false, true, false, false) => (UatAp::Gpu, false, true),
            (true, true, false, false) => (UatAp::Gpu, true, false),
            _ => return None,
        })
    }

    /// The permissions an (ap, uxn, pxn) triple grants (with the GPU
    /// permission scheme on; without it the GPU has no access).
    pub fn decode(ap: UatAp, uxn: bool, pxn: bool, gpu_access: bool) -> Permissions {
        let p = |gpu_read, gpu_write, fw_read, fw_write| Permissions {
            gpu_read,
            gpu_write,
            fw_read,
            fw_write,
        };
        let perms = match (ap, uxn, pxn) {
            (UatAp::FirmwareGpu, false, false) => p(false, false, false, false),
            (UatAp::FirmwareGpu, false, true) => p(true, false, true, false),
            (UatAp::FirmwareGpu, true, false) => p(false, true, false, true),
            (UatAp::FirmwareGpu, true, true) => p(true, true, true, true),
            (UatAp::Firmware, false, false) => p(false, false, true, false),
            (UatAp::Firmware, false, true) => p(false, false, false, false),
            (UatAp::Firmware, true, false) => p(false, false, true, true),
            (UatAp::Firmware, true, true) => p(true, false, true, true),
            (UatAp::Gpu, false, false) => p(true, false, false, false),
            (UatAp::Gpu, false, true) => p(false, true, false, false),
            (UatAp::Gpu, true, false) => p(true, true, false, false),
            _ => p(false, false, false, false),
        };
        if gpu_access {
            perms
        } else {
            Permissions {
                gpu_read: false,
                gpu_write: false,
                ..perms
            }
        }
    }
}

/// A physical address that is not RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no RAM at physical address {pa:#x}")]
pub struct PhysFault {
    /// The first byte that could not be accessed.
    pub pa: PhysAddr,
}

/// Physical memory, as the GPU's memory fabric sees it.
pub trait PhysicalMemory {
    /// Reads `buf.len()` bytes at `pa`.
    fn read(&self, pa: PhysAddr, buf: &mut [u8]) -> Result<(), PhysFault>;
    /// Writes `data` at `pa`.
    fn write(&self, pa: PhysAddr, data: &[u8]) -> Result<(), PhysFault>;

    /// Reads a little-endian u64.
    fn read_u64(&self, pa: PhysAddr) -> Result<u64, PhysFault> {
        let mut buf = [0u8; 8];
        self.read(pa, &mut buf)?;
        Ok(u64::from_le_bytes(buf))
    }

    /// Writes a little-endian u64.
    fn write_u64(&self, pa: PhysAddr, value: u64) -> Result<(), PhysFault> {
        self.write(pa, &value.to_le_bytes())
    }

    /// A counter the owner of the page tables advances whenever it
    /// changes them (a TLB shootdown): translations cached before the
    /// change must not be used after it. Memory without such an owner
    /// never changes it.
    fn translation_generation(&self) -> u64 {
        0
    }

    /// The host memory behind these physical addresses, where compiled
    /// code may read it directly; `None` (the default) where every access
    /// must go through [`PhysicalMemory::read`].
    fn host_window(&self) -> Option<crate::host::HostWindow<'_>> {
        None
    }
}

/// Who is accessing, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// A GPU read (shader load, texture fetch, control stream, fetch).
    GpuRead,
    /// A GPU write.
    GpuWrite,
    /// A firmware read.
    FirmwareRead,
    /// A firmware write.
    FirmwareWrite,
}

impl Access {
    /// Whether this is a write.
    pub fn is_write(self) -> bool {
        matches!(self, Access::GpuWrite | Access::FirmwareWrite)
    }
}

/// A successful translation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Translation {
    /// The physical address of the byte.
    pub pa: PhysAddr,
    /// The page's permissions.
    pub permissions: Permissions,
    /// The page's memory type.
    pub mem_attr: UatMemAttr,
}

/// A failed translation, as the fault register would report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("GPU MMU fault at {va:#x}: {reason} (level {level})")]
pub struct UatFault {
    /// The faulting virtual address.
    pub va: u64,
    /// Why.
    pub reason: UatFaultReason,
    /// The level of the table holding the entry that failed (2 root, 0
    /// leaf).
    pub level: u32,
    /// Whether the access was a read.
    pub read: bool,
}

/// The first address of the firmware's half of a context (ttb1): its
/// addresses have every bit above bit 38 set.
pub const UPPER_HALF_START: u64 = !(USER_VA_END - 1);

/// Translates an address of the upper (firmware) half through the tables
/// rooted at `ttb1_root`: the walk uses the low 39 bits, as for the user
/// half.
pub fn translate_upper(
    memory: &dyn PhysicalMemory,
    ttb1_root: PhysAddr,
    va: u64,
    access: Access,
) -> Result<Translation, UatFault> {
    if va < UPPER_HALF_START {
        return Err(UatFault {
            va,
            reason: UatFaultReason::Unmapped,
            level: LEVELS - 1,
            read: !access.is_write(),
        });
    }
    translate(memory, ttb1_root, va & (USER_VA_END - 1), access).map_err(|f| UatFault { va, ..f })
}

/// A leaf entry mapping the page at `pa` with `permissions`, or `None`
/// when the UAT cannot express them.
pub fn page_pte(pa: PhysAddr, permissions: Permissions, mem_attr: UatMemAttr) -> Option<u64> {
    let (ap, uxn, pxn) = permissions.encode()?;
    let pte = UatPte {
        valid: true,
        table_or_page: true,
        mem_attr,
        ap,
        access_flag: true,
        output_address: pa.get(),
        pxn,
        uxn,
        gpu_access: true,
        ..UatPte::default()
    };
    pte.pack().ok().map(u64::from_le_bytes)
}

/// A table entry pointing at the next-level table at `pa`.
pub fn table_pte(pa: PhysAddr) -> Option<u64> {
    let pte = UatPte {
        valid: true,
        table_or_page: true,
        output_address: pa.get(),
        ..UatPte::default()
    };
    pte.pack().ok().map(u64::from_le_bytes)
}

fn decode_pte(raw: u64) -> UatPte {
    UatPte::decode_fields(&raw.to_le_bytes())
}

/// Translates `va` through the tables rooted at `root_pa`, checking
/// `access` against the page's permissions.
pub fn translate(
    memory: &dyn PhysicalMemory,
    root_pa: PhysAddr,
    va: u64,
    access: Access,
) -> Result<Translation, UatFault> {
    let read = !access.is_write();
    let fault = |reason, level| UatFault {
        va,
        reason,
        level,
        read,
    };
    if va >= USER_VA_END {
        return Err(fault(UatFaultReason::Unmapped, LEVELS - 1));
    }
    let mut table = root_pa;
    for level in (0..LEVELS).rev() {
        let entry_pa = table.offset(8 * table_index(va, level));
        let raw = memory
            .read_u64(entry_pa)
            .map_err(|_| fault(UatFaultReason::Unmapped, level))?;
        let pte = decode_pte(raw);
        if !pte.valid || !pte.table_or_page {
            return Err(fault(UatFaultReason::Unmapped, level));
        }
        if level > 0 {
            table = PhysAddr(pte.output_address);
            continue;
        }
        if !pte.access_flag {
            return Err(fault(UatFaultReason::AccessFlag, 0));
        }
        let permissions = Permissions::decode(pte.ap, pte.uxn, pte.pxn, pte.gpu_access);
        let (can_read, can_write) = match access {
            Access::GpuRead | Access::GpuWrite => (permissions.gpu_read, permissions.gpu_write),
            Access::FirmwareRead | Access::FirmwareWrite => {
                (permissions.fw_read, permissions.fw_write)
            }
        };
        let allowed = if access.is_write() {
            can_write
        } else {
            can_read
        };
        if !allowed {
            let reason = match (can_read, can_write) {
                (false, false) => UatFaultReason::NoAccess,
                (true, false) => UatFaultReason::ReadOnly,
                _ => UatFaultReason::WriteOnly,
            };
            return Err(fault(reason, 0));
        }
        return Ok(Translation {
            pa: PhysAddr(pte.output_address | (va & (PAGE_BYTES - 1))),
            permissions,
            mem_attr: pte.mem_attr,
        });
    }
    Err(fault(UatFaultReason::Unmapped, 0))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashMap;

    use super::*;

    /// Sparse RAM for walker tests.
    #[derive(Default)]
    struct Sparse(RefCell<HashMap<u64, u8>>);

    impl PhysicalMemory for Sparse {
        fn read(&self, pa: PhysAddr, buf: &mut [u8]) -> Result<(), PhysFault> {
            let map = self.0.borrow();
            for (i, b) in buf.iter_mut().enumerate() {
                *b = *map.get(&(pa.get() + i as u64)).unwrap_or(&0);
            }
            Ok(())
        }
        fn write(&self, pa: PhysAddr, data: &[u8]) -> Result<(), PhysFault> {
            let mut map = self.0.borrow_mut();
            for (i, b) in data.iter().enumerate() {
                map.insert(pa.get() + i as u64, *b);
            }
            Ok(())
        }
    }

    #[test]
    fn every_permission_combination_encodes_and_decodes_or_is_refused() {
        let mut encodable = 0;
        for bits in 0..16u8 {
            let p = Permissions {
                gpu_read: bits & 1 != 0,
                gpu_write: bits & 2 != 0,
                fw_read: bits & 4 != 0,
                fw_write: bits & 8 != 0,
            };
            if let Some((ap, uxn, pxn)) = p.encode() {
                assert_eq!(Permissions::decode(ap, uxn, pxn, true), p, "{p:?}");
                encodable += 1;
            }
        }
        assert_eq!(encodable, 10);
    }

    #[test]
    fn walk_finds_pages_and_reports_faults_by_level() {
        let mem = Sparse::default();
        let (root, l1, l0, page) = (
            PhysAddr(0x10_0000_0000),
            PhysAddr(0x10_0000_4000),
            PhysAddr(0x10_0000_8000),
            PhysAddr(0x10_0100_0000),
        );
        let va = 0x12_3456_C000u64;
        mem.write_u64(root.offset(8 * table_index(va, 2)), table_pte(l1).unwrap())
            .unwrap();
        mem.write_u64(l1.offset(8 * table_index(va, 1)), table_pte(l0).unwrap())
            .unwrap();
        let ro = Permissions {
            gpu_read: true,
            ..Permissions::default()
        };
        mem.write_u64(
            l0.offset(8 * table_index(va, 0)),
            page_pte(page, ro, UatMemAttr::Cached).unwrap(),
        )
        .unwrap();

        let t = translate(&mem, root, va + 0x123, Access::GpuRead).unwrap();
        assert_eq!(t.pa, page.offset(0x123));
        assert_eq!(t.permissions, ro);
        let write = translate(&mem, root, va, Access::GpuWrite).unwrap_err();
        assert_eq!(
            (write.reason, write.level, write.read),
            (UatFaultReason::ReadOnly, 0, false)
        );
        let fw = translate(&mem, root, va, Access::FirmwareRead).unwrap_err();
        assert_eq!(fw.reason, UatFaultReason::NoAccess);
        // Next page: the leaf table exists, the entry does not.
        let next = translate(&mem, root, va + PAGE_BYTES, Access::GpuRead).unwrap_err();
        assert_eq!((next.reason, next.level), (UatFaultReason::Unmapped, 0));
        // Another 32 MiB region: level 1 has no table.
        let far = translate(&mem, root, va + level_span_bytes(1), Access::GpuRead).unwrap_err();
        assert_eq!(far.level, 1);
        // Another 64 GiB region: the root has no entry.
        let farther = translate(&mem, root, va ^ (1 << 37), Access::GpuRead).unwrap_err();
        assert_eq!(farther.level, 2);
        assert_eq!(
            translate(&mem, root, USER_VA_END, Access::GpuRead)
                .unwrap_err()
                .reason,
            UatFaultReason::Unmapped
        );
    }

    #[test]
    fn geometry_matches_the_hardware() {
        assert_eq!(level_span_bytes(0), 16 * 1024);
        assert_eq!(level_span_bytes(1), 32 * 1024 * 1024);
        assert_eq!(level_span_bytes(2), 64 * 1024 * 1024 * 1024);
        assert_eq!(DUMMY_PAGE_VA, 0x7F_FFFF_8000);
        assert_eq!(table_index(0x7F_FFFF_8000, 2), 7);
    }
}
