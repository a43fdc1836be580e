//! Shared test scaffolding: a page-granular GPU memory with permissions
//! (standing in for the MMU until the kmd's page tables exist), the same
//! pages in the kmd's simulated RAM (for the compiled engine, whose loads
//! read through host addresses), and a helper that assembles a program,
//! maps it and runs one SIMD-group on both engines.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;

use agx_firmware_sim::usc::{
    AccessKind, Env, ExecError, Exit, FaultReason, GpuMemory, MemoryFault, NoIo, ProgramCache,
    ShaderEngine, ShaderIo, SimdGroup, GPRS, LANES, UNIFORMS,
};
use std::sync::Arc;

use agx_hw::addr::PhysAddr;
use agx_hw::host::HostWindow;
use agx_hw::isa::text::assemble;
use agx_hw::isa::Reg;
use agx_hw::uat::PhysicalMemory;
use agx_kmd::mem::{PhysRange, Ram};

/// AGX GPU pages are 16 KiB.
pub const PAGE_BYTES: u64 = 16 * 1024;
/// Where test programs are placed.
pub const CODE_BASE: u64 = 0x1_0000_0000;
/// Instruction budget for test runs.
pub const BUDGET: u64 = 1_000_000;

#[derive(Default, Clone, PartialEq, Eq, Debug)]
pub struct PagedMemory {
    pages: BTreeMap<u64, (Vec<u8>, bool)>,
}

impl PagedMemory {
    pub fn map(&mut self, address: u64, size_bytes: u64, writable: bool) {
        let first = address / PAGE_BYTES;
        let last = (address + size_bytes.max(1) - 1) / PAGE_BYTES;
        for page in first..=last {
            self.pages
                .entry(page)
                .or_insert_with(|| (vec![0; PAGE_BYTES as usize], writable))
                .1 = writable;
        }
    }

    /// Writes without permission checks (the CPU side filling buffers).
    pub fn poke(&mut self, address: u64, data: &[u8]) {
        for (i, byte) in data.iter().enumerate() {
            let a = address + i as u64;
            let page = self
                .pages
                .get_mut(&(a / PAGE_BYTES))
                .expect("poke into unmapped memory");
            page.0[(a % PAGE_BYTES) as usize] = *byte;
        }
    }

    pub fn peek(&self, address: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        self.read(address, &mut buf, AccessKind::Read)
            .expect("peek at unmapped memory");
        buf
    }

    pub fn poke_u32s(&mut self, address: u64, values: &[u32]) {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.poke(address, &bytes);
    }

    pub fn peek_u32s(&self, address: u64, count: usize) -> Vec<u32> {
        self.peek(address, count * 4)
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    pub fn peek_f32s(&self, address: u64, count: usize) -> Vec<f32> {
        self.peek_u32s(address, count)
            .into_iter()
            .map(f32::from_bits)
            .collect()
    }
}

impl GpuMemory for PagedMemory {
    fn read(&self, address: u64, buf: &mut [u8], access: AccessKind) -> Result<(), MemoryFault> {
        for (i, byte) in buf.iter_mut().enumerate() {
            let a = address.wrapping_add(i as u64);
            match self.pages.get(&(a / PAGE_BYTES)) {
                Some((page, _)) => *byte = page[(a % PAGE_BYTES) as usize],
                None => {
                    return Err(MemoryFault {
                        address: a,
                        access,
                        reason: FaultReason::Unmapped,
                    })
                }
            }
        }
        Ok(())
    }

    fn write(&mut self, address: u64, data: &[u8]) -> Result<(), MemoryFault> {
        for (i, byte) in data.iter().enumerate() {
            let a = address.wrapping_add(i as u64);
            match self.pages.get_mut(&(a / PAGE_BYTES)) {
                Some((page, true)) => page[(a % PAGE_BYTES) as usize] = *byte,
                Some((_, false)) => {
                    return Err(MemoryFault {
                        address: a,
                        access: AccessKind::Write,
                        reason: FaultReason::Permission,
                    })
                }
                None => {
                    return Err(MemoryFault {
                        address: a,
                        access: AccessKind::Write,
                        reason: FaultReason::Unmapped,
                    })
                }
            }
        }
        Ok(())
    }
}

/// [`PagedMemory`]'s pages copied into simulated RAM (the kmd's, with
/// its host window), so that the compiled engine's loads read them
/// through host addresses as they do on the device.
pub struct HostMemory {
    ram: Ram,
    /// GPU page number to its RAM and whether it is writable.
    pages: BTreeMap<u64, (Arc<PhysRange>, bool)>,
}

impl HostMemory {
    /// A copy of `paged`.
    pub fn from_paged(paged: &PagedMemory) -> HostMemory {
        let ram = Ram::new((paged.pages.len() as u64 + 1) * PAGE_BYTES).expect("RAM for the test");
        let mut pages = BTreeMap::new();
        for (&page, (bytes, writable)) in &paged.pages {
            let range = ram.allocate(PAGE_BYTES).expect("a page");
            ram.write(range.pa(), bytes).expect("fill the page");
            pages.insert(page, (range, *writable));
        }
        HostMemory { ram, pages }
    }

    /// The pages as [`PagedMemory`] holds them.
    pub fn to_paged(&self) -> PagedMemory {
        let mut paged = PagedMemory::default();
        for (&page, (range, writable)) in &self.pages {
            let mut bytes = vec![0; PAGE_BYTES as usize];
            self.ram
                .read(range.pa(), &mut bytes)
                .expect("read the page");
            paged.pages.insert(page, (bytes, *writable));
        }
        paged
    }

    /// Unmaps the page holding `address`, as the kmd does: the page
    /// tables change, so cached translations are shot down.
    pub fn unmap(&mut self, address: u64) {
        self.pages.remove(&(address / PAGE_BYTES));
        self.ram.shoot_down_tlbs();
    }

    fn pa(&self, address: u64, write: bool) -> Result<PhysAddr, MemoryFault> {
        let access = if write {
            AccessKind::Write
        } else {
            AccessKind::Read
        };
        match self.pages.get(&(address / PAGE_BYTES)) {
            Some((_, false)) if write => Err(MemoryFault {
                address,
                access,
                reason: FaultReason::Permission,
            }),
            Some((range, _)) => Ok(range.pa().offset(address % PAGE_BYTES)),
            None => Err(MemoryFault {
                address,
                access,
                reason: FaultReason::Unmapped,
            }),
        }
    }
}

impl GpuMemory for HostMemory {
    fn read(&self, address: u64, buf: &mut [u8], access: AccessKind) -> Result<(), MemoryFault> {
        for (i, byte) in buf.iter_mut().enumerate() {
            let a = address.wrapping_add(i as u64);
            let pa = self.pa(a, false).map_err(|f| MemoryFault { access, ..f })?;
            let mut one = [0u8];
            self.ram.read(pa, &mut one).expect("a mapped page");
            *byte = one[0];
        }
        Ok(())
    }

    fn write(&mut self, address: u64, data: &[u8]) -> Result<(), MemoryFault> {
        for (i, byte) in data.iter().enumerate() {
            let a = address.wrapping_add(i as u64);
            let pa = self.pa(a, true)?;
            self.ram.write(pa, &[*byte]).expect("a mapped page");
        }
        Ok(())
    }

    fn host_window(&self) -> Option<HostWindow<'_>> {
        self.ram.host_window()
    }

    fn readable_page(&self, address: u64) -> Option<u64> {
        let pa = self.pa(address, false).ok()?.get();
        Some(pa - pa % PAGE_BYTES)
    }

    fn writable_page(&self, address: u64) -> Option<u64> {
        let pa = self.pa(address, true).ok()?.get();
        Some(pa - pa % PAGE_BYTES)
    }
}

/// A machine: memory with a program mapped read-only at `CODE_BASE`,
/// uniforms, threadgroup memory and a decode cache. `run` runs each
/// program on both engines (the interpreter, whose state the machine
/// keeps, and the compiled engine, on a copy) and checks that they agree
/// on everything: the result, every register of every lane, the mask,
/// the instruction count, memory, uniforms and threadgroup memory.
pub struct Machine {
    pub memory: PagedMemory,
    pub uniforms: Box<[u32; UNIFORMS]>,
    pub threadgroup: Vec<u8>,
    pub cache: ProgramCache,
    pub compiled_cache: ProgramCache,
    pub code_bytes: usize,
    /// The instruction budget of each run ([`BUDGET`] unless a test
    /// sets another).
    pub budget_instructions: u64,
}

/// Asserts that two groups' architectural states are the same.
pub fn assert_same_group(interpreted: &SimdGroup, compiled: &SimdGroup) {
    for n in 0..GPRS as u16 {
        for lane in 0..LANES {
            assert_eq!(
                interpreted.read(Reg::r(n), lane),
                compiled.read(Reg::r(n), lane),
                "r{n} of lane {lane}: interpreter (left) and compiled engine (right) differ"
            );
        }
    }
    assert_eq!(
        interpreted.exec_mask(),
        compiled.exec_mask(),
        "execution mask"
    );
    assert_eq!(interpreted.pc, compiled.pc, "pc");
    assert_eq!(
        interpreted.executed_instructions, compiled.executed_instructions,
        "instructions executed"
    );
}

impl Machine {
    pub fn new(source: &str) -> Machine {
        let code = assemble(source, CODE_BASE).unwrap_or_else(|e| panic!("{e}"));
        let mut memory = PagedMemory::default();
        memory.map(CODE_BASE, code.len() as u64, true);
        memory.poke(CODE_BASE, &code);
        memory.map(CODE_BASE, code.len() as u64, false);
        Machine {
            memory,
            uniforms: Box::new([0; UNIFORMS]),
            threadgroup: Vec::new(),
            cache: ProgramCache::new(),
            compiled_cache: ProgramCache::with_engine(ShaderEngine::Compiled),
            code_bytes: code.len(),
            budget_instructions: BUDGET,
        }
    }

    pub fn group(&self) -> SimdGroup {
        SimdGroup::new(CODE_BASE, u32::MAX)
    }

    pub fn run_with(
        &mut self,
        group: &mut SimdGroup,
        io: &mut dyn ShaderIo,
    ) -> Result<Exit, ExecError> {
        let mut budget = self.budget_instructions;
        let mut env = Env {
            memory: &mut self.memory,
            io,
            uniforms: &mut self.uniforms,
            threadgroup: &mut self.threadgroup,
        };
        group.run(&mut self.cache, &mut env, &mut budget)
    }

    pub fn run(&mut self, group: &mut SimdGroup) -> Result<Exit, ExecError> {
        let mut twin = group.clone();
        let mut twin_memory = HostMemory::from_paged(&self.memory);
        let mut twin_uniforms = self.uniforms.clone();
        let mut twin_threadgroup = self.threadgroup.clone();
        let result = self.run_with(group, &mut NoIo);
        let mut budget = self.budget_instructions;
        let mut env = Env {
            memory: &mut twin_memory,
            io: &mut NoIo,
            uniforms: &mut twin_uniforms,
            threadgroup: &mut twin_threadgroup,
        };
        let twin_result = twin.run(&mut self.compiled_cache, &mut env, &mut budget);
        assert_eq!(
            result, twin_result,
            "interpreter (left) and compiled engine (right)"
        );
        assert_eq!(
            self.compiled_cache.compile_failures(),
            0,
            "blocks the compiled engine refused"
        );
        assert_same_group(group, &twin);
        assert!(
            self.memory == twin_memory.to_paged(),
            "memory differs between the engines"
        );
        assert_eq!(self.uniforms, twin_uniforms, "uniforms");
        assert_eq!(self.threadgroup, twin_threadgroup, "threadgroup memory");
        result
    }
}
