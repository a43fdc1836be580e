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
    /// The command ran more distinct instructions than the simulator keeps
    /// decoded for one command (the bound on the host memory its programs
    /// can take).
    #[error(
        "instruction at {address:#x}: the command already ran {MAX_CACHED_INSTRUCTIONS} distinct instructions"
    )]
    TooManyInstructions {
        /// The instruction's address.
        address: u64,
    },
}

/// Distinct instructions one cache (one command, on one host thread) may
/// hold: each costs the simulator about 100 bytes of host memory once
/// decoded, so this bounds a cache to about 100 MiB (a fragment pass has
/// one per shading thread). (The hardware has no such limit;
/// real programs are far below it: Mesa's largest shaders have some tens
/// of thousands of instructions.)
pub const MAX_CACHED_INSTRUCTIONS: usize = 1 << 20;

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
    /// An operand the hardware's behaviour is undefined for (a register
    /// past r127, a source type with no meaning): refused like unknown
    /// bits.
    pub undefined_operand: bool,
    /// The `.sat` modifier, looked up once at decode rather than by name
    /// at every execution.
    pub saturate: bool,
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
        if self.instrs.len() >= MAX_CACHED_INSTRUCTIONS {
            return Err(FetchError::TooManyInstructions { address });
        }
        let (decoded, _) = fetch(address, memory)?;
        self.decodes += 1;
        let index = self.instrs.len() as u32;
        let undefined_operand = decoded.instr.undefined_operand().is_some();
        let saturate = decoded.instr.has_modifier("sat");
        self.instrs.push(CachedInstr {
            address,
            length_bytes: decoded.length_bytes as u8,
            instr: decoded.instr,
            unknown_bits: decoded.unknown_bits,
            undefined_operand,
            saturate,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usc::memory::{AccessKind, MemoryFault};

    /// Memory holding `stop` (0x88 0x00) at every even address.
    struct Stops;

    impl GpuMemory for Stops {
        fn read(&self, address: u64, buf: &mut [u8], _: AccessKind) -> Result<(), MemoryFault> {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = if (address + i as u64).is_multiple_of(2) {
                    0x88
                } else {
                    0
                };
            }
            Ok(())
        }

        fn write(&mut self, _: u64, _: &[u8]) -> Result<(), MemoryFault> {
            Ok(())
        }
    }

    #[test]
    fn a_command_keeps_at_most_its_bound_of_decoded_instructions() {
        let mut cache = ProgramCache::new();
        for i in 0..MAX_CACHED_INSTRUCTIONS as u64 {
            cache.lookup(2 * i, &Stops).unwrap();
        }
        // Instructions already decoded are still found...
        assert_eq!(cache.lookup(0, &Stops).unwrap(), 0);
        // ...but one more is refused, with its address.
        let next = 2 * MAX_CACHED_INSTRUCTIONS as u64;
        assert!(matches!(
            cache.lookup(next, &Stops),
            Err(FetchError::TooManyInstructions { address }) if address == next
        ));
        assert_eq!(cache.decode_count(), MAX_CACHED_INSTRUCTIONS as u64);
        // The documented bound (about 100 bytes an instruction, with the
        // address map's entry) stays true.
        assert!(size_of::<CachedInstr>() <= 80);
    }
}
