//! Decoded-program cache.
//!
//! A shader runs for thousands of SIMD-groups and every group executes the
//! same bytes, so each instruction is fetched through the MMU and decoded
//! once, the first time any group reaches its address, and kept here with
//! the index of the instruction that follows it. Execution then walks
//! indices rather than addresses. The cache belongs to whoever owns the
//! code memory's lifetime (the firmware clears it when a new submission
//! may have replaced shader memory).

use std::collections::HashMap;

use agx_hw::isa::{self, DecodeError, Instr, MAX_LENGTH_BYTES};

use super::memory::{AccessKind, GpuMemory, MemoryFault};

/// Why an instruction could not be fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The instruction's bytes are not mapped.
    #[error(transparent)]
    Memory(#[from] MemoryFault),
    /// The bytes are not an instruction.
    #[error("undecodable instruction at {address:#x}: {error}")]
    Decode {
        /// The instruction's address.
        address: u64,
        /// Why it did not decode.
        error: DecodeError,
    },
}

/// One cached instruction.
#[derive(Debug, Clone)]
pub struct CachedInstr {
    /// Its address.
    pub address: u64,
    /// Its length.
    pub length_bytes: u8,
    /// The decoded instruction.
    pub instr: Instr,
    /// Set bits no field of the form explains: the simulator refuses to
    /// run such an instruction rather than guess what the bits do.
    pub unknown_bits: u128,
    /// Index of the instruction at `address + length_bytes`, once known.
    pub(crate) next: Option<u32>,
    /// Index of the branch target, once known.
    pub(crate) target: Option<u32>,
}

/// Decoded instructions by address.
#[derive(Debug, Default)]
pub struct ProgramCache {
    by_address: HashMap<u64, u32>,
    instrs: Vec<CachedInstr>,
    decodes: u64,
}

impl ProgramCache {
    /// An empty cache.
    pub fn new() -> ProgramCache {
        ProgramCache::default()
    }

    /// Forgets everything (code memory may have changed).
    pub fn clear(&mut self) {
        self.by_address.clear();
        self.instrs.clear();
    }

    /// How many instructions have been fetched and decoded so far.
    pub fn decode_count(&self) -> u64 {
        self.decodes
    }

    /// The cached instruction at `index`.
    pub fn get(&self, index: u32) -> &CachedInstr {
        &self.instrs[index as usize]
    }

    pub(crate) fn get_mut(&mut self, index: u32) -> &mut CachedInstr {
        &mut self.instrs[index as usize]
    }

    /// The index of the instruction at `address`, fetching and decoding it
    /// if this is the first visit.
    pub fn lookup(&mut self, address: u64, memory: &dyn GpuMemory) -> Result<u32, FetchError> {
        if let Some(&index) = self.by_address.get(&address) {
            return Ok(index);
        }
        let (decoded, _) = fetch(address, memory)?;
        self.decodes += 1;
        let index = self.instrs.len() as u32;
        self.instrs.push(CachedInstr {
            address,
            length_bytes: decoded.length_bytes as u8,
            instr: decoded.instr,
            unknown_bits: decoded.unknown_bits,
            next: None,
            target: None,
        });
        self.by_address.insert(address, index);
        Ok(index)
    }
}

/// Reads and decodes one instruction. Reads as many bytes as are mapped
/// (up to the longest instruction), so a short instruction at the end of a
/// mapping does not fault on the bytes after it.
fn fetch(address: u64, memory: &dyn GpuMemory) -> Result<(isa::Decoded, usize), FetchError> {
    let mut buf = [0u8; MAX_LENGTH_BYTES];
    memory.read(address, &mut buf[..2], AccessKind::Fetch)?;
    let mut available = 2;
    for len in (4..=MAX_LENGTH_BYTES).rev().step_by(2) {
        if memory
            .read(address, &mut buf[..len], AccessKind::Fetch)
            .is_ok()
        {
            available = len;
            break;
        }
    }
    match isa::decode(&buf[..available]) {
        Ok(decoded) => Ok((decoded, available)),
        Err(DecodeError::Truncated { needed_bytes, .. }) => {
            // The instruction runs into unmapped memory: report the first
            // byte that could not be read.
            let mut probe = [0u8; MAX_LENGTH_BYTES];
            match memory.read(address, &mut probe[..needed_bytes], AccessKind::Fetch) {
                Err(fault) => Err(FetchError::Memory(fault)),
                Ok(()) => Err(FetchError::Decode {
                    address,
                    error: DecodeError::Truncated {
                        needed_bytes,
                        available_bytes: available,
                    },
                }),
            }
        }
        Err(error) => Err(FetchError::Decode { address, error }),
    }
}
