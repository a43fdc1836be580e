//! Shared test scaffolding: a page-granular GPU memory with permissions
//! (standing in for the MMU until the kmd's page tables exist) and a
//! helper that assembles a program, maps it and runs one SIMD-group.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;

use agx_firmware_sim::usc::{
    AccessKind, Env, ExecError, Exit, FaultReason, GpuMemory, MemoryFault, NoIo, ProgramCache,
    ShaderIo, SimdGroup, UNIFORMS,
};
use agx_hw::isa::text::assemble;

/// AGX GPU pages are 16 KiB.
pub const PAGE_BYTES: u64 = 16 * 1024;
/// Where test programs are placed.
pub const CODE_BASE: u64 = 0x1_0000_0000;
/// Instruction budget for test runs.
pub const BUDGET: u64 = 1_000_000;

#[derive(Default)]
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

/// A machine: memory with a program mapped read-only at `CODE_BASE`,
/// uniforms, threadgroup memory and a decode cache.
pub struct Machine {
    pub memory: PagedMemory,
    pub uniforms: Box<[u32; UNIFORMS]>,
    pub threadgroup: Vec<u8>,
    pub cache: ProgramCache,
    pub code_bytes: usize,
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
            code_bytes: code.len(),
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
        let mut budget = BUDGET;
        let mut env = Env {
            memory: &mut self.memory,
            io,
            uniforms: &mut self.uniforms,
            threadgroup: &mut self.threadgroup,
        };
        group.run(&mut self.cache, &mut env, &mut budget)
    }

    pub fn run(&mut self, group: &mut SimdGroup) -> Result<Exit, ExecError> {
        self.run_with(group, &mut NoIo)
    }
}
