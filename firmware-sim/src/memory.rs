//! The GPU MMU as the units see it: a VM context's user half (`ttb0`)
//! behind a small TLB, and the kernel half (`ttb1`) every context shares.
//!
//! Every GPU unit (data masters, the shader core, the texture unit, the
//! pixel back end, the tiler) reaches memory through [`GpuVm`]: user
//! addresses are walked through the context's page tables with the UAT's
//! permission rules, so an unmapped or read-only page faults at the exact
//! address the hardware would report. Shaders and fixed-function units
//! never reach the kernel half: an address there is a permission fault.

use std::sync::atomic::Ordering;

use agx_fwif::messages::FaultUnit;
use agx_fwif::ring::SharedMemory;
use agx_hw::addr::{FwVa, PhysAddr};
use agx_hw::formats::UatFaultReason;
use agx_hw::uat::{self, Access, PhysicalMemory, UatFault, PAGE_BYTES};
use agx_hw::{Format, List, SeqError, Sequence};

use crate::fault::{unsupported, EngineResult};
use crate::usc::{AccessKind, FaultReason, GpuMemory, MemoryFault};

/// Entries of a [`GpuVm`]'s translation cache.
const TLB_ENTRIES: usize = 16;

/// Bits of a TLB entry: bit 0 readable, bit 1 writable, bits 2-29 the
/// physical page, bits 30-63 the virtual page + 1 (0: empty). One word,
/// so entries update atomically and a `GpuVm` can be shared by threads.
const TLB_PA_PAGE_BITS: u32 = 28;

/// The user half of a VM context, as the GPU reads it.
///
/// It carries a small translation cache (a TLB) of the pages it walked,
/// direct-mapped by page number; clones start with the original's
/// entries. Any change to the page tables (the kmd advances the memory's
/// translation generation, as a kernel shoots down TLBs when it unmaps)
/// empties it before the next translation, so an unmapped page is never
/// reached through a stale entry, even mid-command.
pub struct GpuVm<'a> {
    memory: &'a (dyn PhysicalMemory + Sync),
    root: PhysAddr,
    /// The kernel's half (ttb1), shared by every context: the firmware's
    /// view of it.
    kernel: Option<&'a (dyn SharedMemory + Sync)>,
    tlb: [std::sync::atomic::AtomicU64; TLB_ENTRIES],
    /// The memory's translation generation the entries belong to.
    tlb_generation: std::sync::atomic::AtomicU64,
}

impl Clone for GpuVm<'_> {
    /// A copy with a copy of the translation cache (its entries are valid
    /// for the command the original serves).
    fn clone(&self) -> Self {
        GpuVm {
            memory: self.memory,
            root: self.root,
            kernel: self.kernel,
            tlb: std::array::from_fn(|i| {
                std::sync::atomic::AtomicU64::new(self.tlb[i].load(Ordering::Relaxed))
            }),
            tlb_generation: std::sync::atomic::AtomicU64::new(
                self.tlb_generation.load(Ordering::Relaxed),
            ),
        }
    }
}

/// The host's cache line (x86-64's, most hosts'): what one prefetch
/// brings in.
const HOST_LINE_BYTES: u64 = 64;

impl<'a> GpuVm<'a> {
    /// The context rooted at `root`.
    pub fn new(memory: &'a (dyn PhysicalMemory + Sync), root: PhysAddr) -> GpuVm<'a> {
        GpuVm {
            memory,
            root,
            kernel: None,
            tlb: Default::default(),
            tlb_generation: std::sync::atomic::AtomicU64::new(memory.translation_generation()),
        }
    }

    /// A command's context: its user half rooted at `root`, and the
    /// kernel half every context shares (`kernel`, the firmware's view).
    pub fn with_kernel(
        memory: &'a (dyn PhysicalMemory + Sync),
        root: PhysAddr,
        kernel: &'a (dyn SharedMemory + Sync),
    ) -> GpuVm<'a> {
        GpuVm {
            kernel: Some(kernel),
            ..GpuVm::new(memory, root)
        }
    }

    /// The kernel half, for addresses in it.
    pub fn kernel(&self, va: u64) -> Option<&'a (dyn SharedMemory + Sync)> {
        self.kernel.filter(|_| va >= uat::UPPER_HALF_START)
    }

    /// Reads `buf.len()` bytes at GPU address `va`.
    pub fn read(&self, va: u64, buf: &mut [u8]) -> Result<(), UatFault> {
        if let Some(kernel) = self.kernel(va) {
            return kernel.read(FwVa(va), buf).map_err(|e| UatFault {
                va: e.address.get(),
                reason: UatFaultReason::Unmapped,
                level: 0,
                read: true,
            });
        }
        let mut done = 0;
        while done < buf.len() {
            let at = va.wrapping_add(done as u64);
            let pa = self.translate(at, Access::GpuRead)?;
            let chunk = ((PAGE_BYTES - at % PAGE_BYTES) as usize).min(buf.len() - done);
            self.memory
                .read(pa, &mut buf[done..done + chunk])
                .map_err(|_| UatFault {
                    va: at,
                    reason: UatFaultReason::Unmapped,
                    level: 0,
                    read: true,
                })?;
            done += chunk;
        }
        Ok(())
    }

    /// Tells the host that the `len_bytes` at user-half address `va` are
    /// about to be read: a prefetch of each of their cache lines on
    /// `va`'s page ([`agx_hw::host::HostWindow::prefetch`]). A hint,
    /// which does nothing for an address that does not translate.
    pub fn prefetch(&self, va: u64, len_bytes: u64) {
        let (Ok(pa), Some(window)) = (
            self.translate(va, Access::GpuRead),
            self.memory.host_window(),
        ) else {
            return;
        };
        let on_page = len_bytes.min(PAGE_BYTES - va % PAGE_BYTES);
        let first_line = pa.get() & !(HOST_LINE_BYTES - 1);
        let mut line = first_line;
        while line < pa.get() + on_page {
            window.prefetch(line);
            line += HOST_LINE_BYTES;
        }
    }

    /// Translates user-half address `va` for `access` (a GPU read or
    /// write), through the translation cache.
    pub fn translate(&self, va: u64, access: Access) -> Result<PhysAddr, UatFault> {
        // A page-table change since the entries were filled (an unmap:
        // the kernel's TLB shootdown) empties the cache.
        let generation = self.memory.translation_generation();
        if self.tlb_generation.load(Ordering::Relaxed) != generation {
            for entry in &self.tlb {
                entry.store(0, Ordering::Relaxed);
            }
            self.tlb_generation.store(generation, Ordering::Relaxed);
        }
        let page = va / PAGE_BYTES;
        let slot = &self.tlb[(page % TLB_ENTRIES as u64) as usize];
        let entry = slot.load(Ordering::Relaxed);
        let allowed = if access.is_write() { 2 } else { 1 };
        if entry >> (2 + TLB_PA_PAGE_BITS) == page + 1 && entry & allowed != 0 {
            let pa_page = (entry >> 2) & ((1 << TLB_PA_PAGE_BITS) - 1);
            return Ok(PhysAddr(pa_page * PAGE_BYTES + va % PAGE_BYTES));
        }
        let t = uat::translate(self.memory, self.root, va, access)?;
        let pa_page = t.pa.get() / PAGE_BYTES;
        if pa_page < 1 << TLB_PA_PAGE_BITS && page + 1 < 1 << (62 - TLB_PA_PAGE_BITS) {
            slot.store(
                (page + 1) << (2 + TLB_PA_PAGE_BITS)
                    | pa_page << 2
                    | u64::from(t.permissions.gpu_write) << 1
                    | u64::from(t.permissions.gpu_read),
                Ordering::Relaxed,
            );
        }
        Ok(t.pa)
    }

    /// Takes the translations `other`, a clone of this context, cached
    /// since it was made (for the same page tables: none after a change
    /// to them), so that clones made from this one next start with them: a
    /// unit's clone walks the pages of what it reads (a texture's), which
    /// the units cloned after it would walk again.
    pub fn keep_translations(&self, other: &GpuVm<'_>) {
        let generation = self.tlb_generation.load(Ordering::Relaxed);
        let same_context = std::ptr::addr_eq(self.memory, other.memory) && self.root == other.root;
        if !same_context || other.tlb_generation.load(Ordering::Relaxed) != generation {
            return;
        }
        for (mine, theirs) in self.tlb.iter().zip(&other.tlb) {
            let entry = theirs.load(Ordering::Relaxed);
            if entry != 0 {
                mine.store(entry, Ordering::Relaxed);
            }
        }
    }

    /// Physical memory.
    pub fn memory(&self) -> &'a (dyn PhysicalMemory + Sync) {
        self.memory
    }

    /// The root of the context's user page tables.
    pub fn root(&self) -> PhysAddr {
        self.root
    }

    /// Reads a little-endian u32.
    pub fn read_u32(&self, va: u64) -> Result<u32, UatFault> {
        let mut word = [0u8; 4];
        self.read(va, &mut word)?;
        Ok(u32::from_le_bytes(word))
    }
}

pub(crate) fn read_words<const N: usize>(
    vm: &GpuVm<'_>,
    address: u64,
) -> Result<[u8; N], EngineResult> {
    let mut bytes = [0u8; N];
    vm.read(address, &mut bytes)
        .map_err(|f| EngineResult::from_uat(&f, FaultUnit::Cdm))?;
    Ok(bytes)
}

/// What shaders and fixed-function units reach: the user half only. The
/// kernel half (ttb1) holds the firmware's rings and command structures; a
/// user context that names an address there gets a permission fault, as the
/// hardware's per-context TTB split gives.
fn refuse_kernel_half(address: u64, len: usize, access: AccessKind) -> Result<(), MemoryFault> {
    let end = address.checked_add(len as u64);
    let first_refused = if address >= uat::UPPER_HALF_START {
        address
    } else if end.is_none_or(|end| end > uat::UPPER_HALF_START) {
        uat::UPPER_HALF_START
    } else {
        return Ok(());
    };
    Err(MemoryFault {
        address: first_refused,
        access,
        reason: FaultReason::Permission,
    })
}

/// A failed user-half translation as the shader core reports it.
fn translation_fault(fault: &UatFault, access: AccessKind) -> MemoryFault {
    MemoryFault {
        address: fault.va,
        access,
        reason: match fault.reason {
            UatFaultReason::Unmapped => FaultReason::Unmapped,
            _ => FaultReason::Permission,
        },
    }
}

impl GpuVm<'_> {
    /// The physical address of the element of `size_bytes` at user
    /// address `address`, through `last` (the page translated last for
    /// this access and its physical base) when it is on that page; `None`
    /// when the element crosses a page, which the caller reads as bytes.
    fn element_pa(
        &self,
        address: u64,
        size_bytes: usize,
        access: Access,
        kind: AccessKind,
        last: &mut Option<(u64, u64)>,
    ) -> Result<Option<PhysAddr>, MemoryFault> {
        refuse_kernel_half(address, size_bytes, kind)?;
        let (page, offset) = (address / PAGE_BYTES, address % PAGE_BYTES);
        if offset + size_bytes as u64 > PAGE_BYTES {
            return Ok(None);
        }
        let base = match *last {
            Some((last_page, base)) if last_page == page => base,
            _ => {
                let pa = self
                    .translate(address, access)
                    .map_err(|f| translation_fault(&f, kind))?;
                let base = pa.get() - offset;
                *last = Some((page, base));
                base
            }
        };
        Ok(Some(PhysAddr(base + offset)))
    }
}

impl GpuMemory for GpuVm<'_> {
    /// As reading each element alone, with each page translated once
    /// for the run of elements on it (a page-table change between two
    /// elements of one instruction is seen from the next instruction on,
    /// as an unmap racing an access in flight).
    fn read_elements(
        &self,
        addresses: &[u64],
        size_bytes: usize,
        out: &mut [u32],
    ) -> Result<(), MemoryFault> {
        let mut last = None;
        for (&address, word) in addresses.iter().zip(out.iter_mut()) {
            let mut bytes = [0u8; 4];
            let buf = &mut bytes[..size_bytes];
            match self.element_pa(
                address,
                size_bytes,
                Access::GpuRead,
                AccessKind::Read,
                &mut last,
            )? {
                Some(pa) => self.memory.read(pa, buf).map_err(|_| MemoryFault {
                    address,
                    access: AccessKind::Read,
                    reason: FaultReason::Unmapped,
                })?,
                None => GpuMemory::read(self, address, buf, AccessKind::Read)?,
            }
            *word = u32::from_le_bytes(bytes);
        }
        Ok(())
    }

    /// As writing each element alone, each page translated once, as
    /// [`GpuMemory::read_elements`] here.
    fn write_elements(
        &mut self,
        addresses: &[u64],
        size_bytes: usize,
        words: &[u32],
    ) -> Result<(), MemoryFault> {
        let mut last = None;
        for (&address, word) in addresses.iter().zip(words) {
            let bytes = word.to_le_bytes();
            let data = &bytes[..size_bytes];
            match self.element_pa(
                address,
                size_bytes,
                Access::GpuWrite,
                AccessKind::Write,
                &mut last,
            )? {
                Some(pa) => self.memory.write(pa, data).map_err(|_| MemoryFault {
                    address,
                    access: AccessKind::Write,
                    reason: FaultReason::Unmapped,
                })?,
                None => GpuMemory::write(self, address, data)?,
            }
        }
        Ok(())
    }

    fn host_window(&self) -> Option<agx_hw::host::HostWindow<'_>> {
        self.memory.host_window()
    }

    /// Through the translation cache, as [`GpuMemory::read`] of one byte
    /// of the page would translate it; the page must also be held (a
    /// one-byte read of it succeeds).
    fn readable_page(&self, address: u64) -> Option<u64> {
        refuse_kernel_half(address, 1, AccessKind::Read).ok()?;
        let pa = self.translate(address, Access::GpuRead).ok()?;
        self.memory.read(pa, &mut [0u8; 1]).ok()?;
        Some(pa.get() - pa.get() % PAGE_BYTES)
    }

    /// As [`GpuMemory::readable_page`] here, for a write.
    fn writable_page(&self, address: u64) -> Option<u64> {
        refuse_kernel_half(address, 1, AccessKind::Write).ok()?;
        let pa = self.translate(address, Access::GpuWrite).ok()?;
        self.memory.read(pa, &mut [0u8; 1]).ok()?;
        Some(pa.get() - pa.get() % PAGE_BYTES)
    }

    fn translation_context(&self) -> u64 {
        self.root.get()
    }

    fn read(&self, address: u64, buf: &mut [u8], access: AccessKind) -> Result<(), MemoryFault> {
        refuse_kernel_half(address, buf.len(), access)?;
        GpuVm::read(self, address, buf).map_err(|f| translation_fault(&f, access))
    }

    fn write(&mut self, address: u64, data: &[u8]) -> Result<(), MemoryFault> {
        refuse_kernel_half(address, data.len(), AccessKind::Write)?;
        let mut done = 0;
        while done < data.len() {
            let at = address.wrapping_add(done as u64);
            let fail = |reason| MemoryFault {
                address: at,
                access: AccessKind::Write,
                reason,
            };
            let pa = self.translate(at, Access::GpuWrite).map_err(|f| {
                fail(if f.reason == UatFaultReason::Unmapped {
                    FaultReason::Unmapped
                } else {
                    FaultReason::Permission
                })
            })?;
            let chunk = ((PAGE_BYTES - at % PAGE_BYTES) as usize).min(data.len() - done);
            self.memory()
                .write(pa, &data[done..done + chunk])
                .map_err(|_| fail(FaultReason::Unmapped))?;
            done += chunk;
        }
        Ok(())
    }
}

/// Reads the control-stream item at `address` whole (its tag and header
/// say how long it is: `agx_hw`'s generated lists) and decodes it. A read
/// fault is `unit`'s; an item the model cannot size or parse (an unknown
/// tag, an unsupported block) is unsupported work at `address`. `buf` is
/// scratch space, reused across items.
pub(crate) fn read_item<L: List>(
    vm: &GpuVm<'_>,
    address: u64,
    unit: FaultUnit,
    buf: &mut Vec<u8>,
) -> Result<L, EngineResult> {
    buf.clear();
    buf.resize(L::PEEK_BYTES, 0);
    read_into(vm, address, unit, buf)?;
    let refuse = |buf: &[u8], error: SeqError| {
        let word = first_word(buf);
        let what = match error {
            SeqError::UnknownTag { list, raw } => {
                format!("{list} word {word:#010x} of unknown type {raw}")
            }
            SeqError::Unsupported { list, variant } => {
                format!("a {variant} {list} (word {word:#010x}), whose layout is not modelled")
            }
            error => format!("{} word {word:#010x}: {error}", L::INFO.name),
        };
        unsupported(address, unit, what)
    };
    let len = L::len_bytes(buf).map_err(|e| refuse(buf, e))?;
    extend_to(vm, address, unit, buf, len)?;
    L::decode(buf)
        .map(|walked| walked.value)
        .map_err(|e| refuse(buf, e))
}

/// Reads the record sequence at `address` (a header and the records its
/// bits select: `agx_hw`'s generated sequences) and decodes it, as
/// [`read_item`] does for a list item; returns it and its length.
pub(crate) fn read_sequence<S: Sequence>(
    vm: &GpuVm<'_>,
    address: u64,
    unit: FaultUnit,
) -> Result<(S, usize), EngineResult> {
    let mut buf = vec![0u8; S::Header::SIZE_BYTES];
    read_into(vm, address, unit, &mut buf)?;
    let refuse = |buf: &[u8], error: &dyn std::fmt::Display| {
        unsupported(
            address,
            unit,
            format_args!(
                "{} with header word {:#010x}: {error}",
                S::INFO.name,
                first_word(buf)
            ),
        )
    };
    let header = S::Header::decode_from(&buf).map_err(|e| refuse(&buf, &e))?;
    let len = S::len_bytes(&header).map_err(|e| refuse(&buf, &e))?;
    extend_to(vm, address, unit, &mut buf, len)?;
    S::decode(&buf)
        .map(|walked| (walked.value, walked.len_bytes))
        .map_err(|e| refuse(&buf, &e))
}

/// The first 32-bit word of `bytes` (zero-extended if shorter): the one
/// holding a list item's tag or a sequence header's first bits.
fn first_word(bytes: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    let n = bytes.len().min(4);
    word[..n].copy_from_slice(&bytes[..n]);
    u32::from_le_bytes(word)
}

fn read_into(
    vm: &GpuVm<'_>,
    address: u64,
    unit: FaultUnit,
    buf: &mut [u8],
) -> Result<(), EngineResult> {
    vm.read(address, buf)
        .map_err(|f| EngineResult::from_uat(&f, unit))
}

/// Makes `buf` (the first bytes at `address`) `len` bytes long, reading
/// only the bytes it does not hold yet.
fn extend_to(
    vm: &GpuVm<'_>,
    address: u64,
    unit: FaultUnit,
    buf: &mut Vec<u8>,
    len: usize,
) -> Result<(), EngineResult> {
    let have = buf.len().min(len);
    buf.resize(len, 0);
    read_into(
        vm,
        address.wrapping_add(have as u64),
        unit,
        &mut buf[have..],
    )
}
