//! Decoded-program cache.
//!
//! A shader runs for thousands of SIMD-groups and every group executes the
//! same bytes, so each instruction is fetched through the MMU and decoded
//! once, the first time any group reaches its address, and kept here with
//! the index of the instruction that follows it. Execution then walks
//! indices rather than addresses. The cache belongs to whoever owns the
//! code memory's lifetime (the firmware clears it when a new submission
//! may have replaced shader memory).
//!
//! With the compiled engine ([`ShaderEngine::Compiled`]) the cache also
//! keeps, per instruction, the compiled block that starts there (a run
//! of ALU instructions `agx_jit` translated to host code), so that the
//! SIMD-group calls it instead of interpreting the run.

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

/// Which engine runs a cache's programs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ShaderEngine {
    /// Every instruction interpreted (the reference).
    Interpreter,
    /// Runs of ALU instructions compiled to host code (`agx_jit`), the
    /// rest interpreted; the two agree bit for bit.
    #[default]
    Compiled,
}

impl std::str::FromStr for ShaderEngine {
    type Err = ();

    fn from_str(name: &str) -> Result<ShaderEngine, ()> {
        match name {
            "interpreter" => Ok(ShaderEngine::Interpreter),
            "compiled" => Ok(ShaderEngine::Compiled),
            _ => Err(()),
        }
    }
}

/// Fewest instructions a compiled block holds: a single instruction runs
/// as fast interpreted.
const MIN_BLOCK_INSTRUCTIONS: usize = 2;

/// Host code one GPU's compiled blocks may take together; past it, runs
/// not compiled yet are interpreted.
pub const CODE_CACHE_LIMIT_BYTES: usize = 64 << 20;

/// `block_at` for an instruction no block was looked for at yet.
const UNTRIED: u32 = u32::MAX;
/// `block_at` for an instruction no block starts at.
const NO_BLOCK: u32 = u32::MAX - 1;

/// A compiled block as a cache sees it: how many instructions it runs and
/// where the program goes on after it (`index`: its place in the cache).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CompiledBlock {
    pub(crate) index: u32,
    pub(crate) instructions: u32,
    pub(crate) next_index: u32,
    pub(crate) next_pc: u64,
    /// The block holds an exec-mask instruction: the mask it returns is
    /// the group's new one.
    pub(crate) updates_exec: bool,
    /// The 32-bit register cells from r0 up to this one (exclusive) hold
    /// every register the block's instructions name, so every one it can
    /// write (compiled code writes only the registers it names).
    pub(crate) register_cells_end: usize,
    /// The block holds a memory instruction (it reaches memory through
    /// the page cache).
    pub(crate) memory: bool,
    /// The block holds a stack access (it needs the group's stack).
    pub(crate) stack: bool,
}

/// The 32-bit register cells from r0 up to the returned one (exclusive)
/// hold every register `instr` names, as a source or a destination.
fn register_cells_end(instr: &Instr) -> usize {
    use agx_hw::isa::{Operand, Reg, Value};
    let end = |reg: Reg, regs: u16| usize::from((reg.half + regs * reg.size.halves()).div_ceil(2));
    let value_end = |value: &Value| match value {
        Value::Reg(reg, _) => end(*reg, 1),
        Value::Pair(reg, _) => end(*reg, 2),
        _ => 0,
    };
    instr
        .operands
        .iter()
        .map(|operand| match operand {
            Operand::Dst(dst) => end(dst.reg, 1),
            Operand::Src(src) => value_end(&src.value),
            Operand::Regs(run) => end(run.first, u16::from(run.count)),
            Operand::Value(value) => value_end(value),
            Operand::Int(_) | Operand::Uniforms(_) => 0,
        })
        .max()
        .unwrap_or(0)
}

/// The compiled engine's state for one cache.
#[derive(Debug)]
struct Compiled {
    /// Where blocks are compiled: the GPU's, shared by its caches, or
    /// this cache's own.
    code: std::sync::Arc<agx_jit::CodeCache>,
    /// Per cached instruction: the block starting there (an index into
    /// `blocks`), [`NO_BLOCK`] or [`UNTRIED`].
    block_at: Vec<u32>,
    blocks: Vec<(agx_jit::Block, CompiledBlock)>,
    /// Per block: the cached instructions it runs, in order (where a
    /// block that stops goes on).
    members: Vec<Vec<u32>>,
    /// Pages the compiled loads and stores translated (one cache per host
    /// thread, as a TLB).
    pages: agx_jit::PageCache,
    /// Blocks that did not compile (left to the interpreter).
    failures: u64,
}

/// The fp32 fused multiply-add as the reference computes it, for the
/// compiled code's rare path.
extern "C" fn fma_for_compiled_code(x: f32, y: f32, z: f32) -> f32 {
    super::float::fma_f32(x, y, z)
}

/// fp16 widened as the interpreter widens it, for the compiled code.
extern "C" fn half_to_f32_for_compiled_code(bits: u32) -> f32 {
    super::float::half_to_f32(u64::from(bits))
}

/// An fp32 result written to a 16-bit destination, as the interpreter
/// writes it, for the compiled code.
extern "C" fn f32_to_half_for_compiled_code(value: f32) -> u32 {
    u32::from(super::float::quiet_f16(super::float::f32_to_half(value)))
}

/// One lane of `convert` as the interpreter computes it, for the
/// compiled code: `flags` bit 0 a 16-bit destination, bit 1 rounding to
/// zero. (The translation admits only modes the interpreter defines.)
extern "C" fn convert_for_compiled_code(mode: u32, bits: u64, width: u32, flags: u32) -> u64 {
    super::exec::convert_bits(i64::from(mode), bits, width, flags & 1 != 0, flags & 2 != 0)
        .unwrap_or(0)
}

/// A GPU memory as the compiled engine's page cache asks it for pages.
struct PagesOf<'m>(&'m dyn GpuMemory);

impl agx_jit::PageSource for PagesOf<'_> {
    fn readable_page(&self, va: u64) -> Option<u64> {
        self.0.readable_page(va)
    }

    fn writable_page(&self, va: u64) -> Option<u64> {
        self.0.writable_page(va)
    }

    fn context(&self) -> u64 {
        self.0.translation_context()
    }
}

/// A new code cache for the compiled engine (`None`, logged, where this
/// host has no code generator: the interpreter runs everything).
pub fn new_code_cache() -> Option<std::sync::Arc<agx_jit::CodeCache>> {
    let helpers = agx_jit::Helpers {
        fma_f32: fma_for_compiled_code,
        half_to_f32: half_to_f32_for_compiled_code,
        f32_to_half: f32_to_half_for_compiled_code,
        convert: convert_for_compiled_code,
        half_arithmetic: super::float::half_arithmetic_for_compiled_code,
        unary_f32: super::exec::unary_f32_for_compiled_code,
    };
    match agx_jit::CodeCache::new(helpers, CODE_CACHE_LIMIT_BYTES) {
        Ok(code) => Some(code),
        Err(error) => {
            tracing::warn!(%error, "no compiled engine: interpreting");
            None
        }
    }
}

impl Compiled {
    fn new(code: std::sync::Arc<agx_jit::CodeCache>) -> Compiled {
        Compiled {
            code,
            block_at: Vec::new(),
            blocks: Vec::new(),
            members: Vec::new(),
            pages: agx_jit::PageCache::new(),
            failures: 0,
        }
    }
}

/// Decoded instructions by address.
#[derive(Debug)]
pub struct ProgramCache {
    by_address: HashMap<u64, u32>,
    instrs: Vec<CachedInstr>,
    decodes: u64,
    engine: ShaderEngine,
    compiled: Option<Box<Compiled>>,
}

impl Default for ProgramCache {
    /// An empty cache whose programs the interpreter runs (a cache runs
    /// compiled code only when given an engine or a code cache).
    fn default() -> ProgramCache {
        ProgramCache {
            by_address: HashMap::new(),
            instrs: Vec::new(),
            decodes: 0,
            engine: ShaderEngine::Interpreter,
            compiled: None,
        }
    }
}

impl ProgramCache {
    /// An empty cache whose programs the interpreter runs.
    pub fn new() -> ProgramCache {
        ProgramCache::default()
    }

    /// An empty cache whose programs `engine` runs (the compiled engine
    /// with a code cache of its own).
    pub fn with_engine(engine: ShaderEngine) -> ProgramCache {
        ProgramCache {
            engine,
            ..ProgramCache::default()
        }
    }

    /// An empty cache whose programs the compiled engine runs, with the
    /// blocks of `code` (shared with other caches), or the interpreter
    /// without one.
    pub fn with_code(code: Option<std::sync::Arc<agx_jit::CodeCache>>) -> ProgramCache {
        match code {
            Some(code) => ProgramCache {
                engine: ShaderEngine::Compiled,
                compiled: Some(Box::new(Compiled::new(code))),
                ..ProgramCache::default()
            },
            None => ProgramCache::new(),
        }
    }

    /// The engine this cache's programs run on.
    pub fn engine(&self) -> ShaderEngine {
        self.engine
    }

    /// Forgets everything (code memory may have changed); a shared code
    /// cache keeps its blocks, which are found by their bytes.
    pub fn clear(&mut self) {
        self.by_address.clear();
        self.instrs.clear();
        if let Some(compiled) = &mut self.compiled {
            compiled.block_at.clear();
            compiled.blocks.clear();
            compiled.members.clear();
        }
    }

    /// Blocks the compiled engine failed to compile (each left to the
    /// interpreter; a translation bug, logged).
    pub fn compile_failures(&self) -> u64 {
        self.compiled.as_ref().map_or(0, |c| c.failures)
    }

    /// Blocks this cache runs compiled (each counted once).
    pub fn compiled_blocks(&self) -> usize {
        self.compiled.as_ref().map_or(0, |c| c.blocks.len())
    }

    /// The compiled block that starts at cached instruction `index`,
    /// compiling it on the first visit (with the compiled engine; `None`
    /// with the interpreter, or where no block of at least
    /// [`MIN_BLOCK_INSTRUCTIONS`] starts).
    pub(crate) fn block_at(&mut self, index: u32, memory: &dyn GpuMemory) -> Option<CompiledBlock> {
        if self.engine != ShaderEngine::Compiled {
            return None;
        }
        if self.compiled.is_none() {
            match new_code_cache() {
                Some(code) => self.compiled = Some(Box::new(Compiled::new(code))),
                None => {
                    self.engine = ShaderEngine::Interpreter;
                    return None;
                }
            }
        }
        let compiled = self.compiled.as_ref()?;
        match compiled
            .block_at
            .get(index as usize)
            .copied()
            .unwrap_or(UNTRIED)
        {
            NO_BLOCK => None,
            UNTRIED => self.form_block(index, memory),
            block => compiled.blocks.get(block as usize).map(|(_, info)| *info),
        }
    }

    /// Gathers the run of instructions the compiled engine translates
    /// from `index` on, compiles it and records it.
    fn form_block(&mut self, index: u32, memory: &dyn GpuMemory) -> Option<CompiledBlock> {
        let mut run = Vec::new();
        let mut at = index;
        let mut next = None;
        let start = self.instrs[index as usize].address;
        loop {
            let entry = self.get(at);
            let clean = entry.unknown_bits == 0 && !entry.undefined_operand;
            // A jump on the execution mask back to the block's start ends
            // it as a loop (the compiled code runs it again while the jump
            // is taken).
            let loops_back = clean
                && !run.is_empty()
                && matches!(entry.instr.op, isa::Op::JmpExecAny | isa::Op::JmpExecNone)
                && entry
                    .instr
                    .int(0)
                    .is_some_and(|offset| entry.address.wrapping_add(offset as u64) == start);
            let translated = clean && agx_jit::supports(&entry.instr, entry.saturate);
            if !translated && !loops_back {
                break;
            }
            // The block ends where the program goes on: the instruction
            // after it must be known (one that cannot be fetched is
            // reached by the interpreter, which reports it).
            let following = entry.address.wrapping_add(u64::from(entry.length_bytes));
            let Ok(following_index) = self.lookup(following, memory) else {
                break;
            };
            self.get_mut(at).next = Some(following_index);
            run.push(at);
            next = Some((following_index, following));
            at = following_index;
            if loops_back {
                break;
            }
            if at == index {
                // A program that falls through into itself (it wraps
                // around the address space): never compiled.
                break;
            }
        }
        // The run's bytes name it in the shared code cache.
        let mut key = Vec::new();
        if next.is_some() && run.len() >= MIN_BLOCK_INSTRUCTIONS {
            for &i in &run {
                let entry = &self.instrs[i as usize];
                let start = key.len();
                key.resize(start + usize::from(entry.length_bytes), 0);
                if memory
                    .read(entry.address, &mut key[start..], AccessKind::Fetch)
                    .is_err()
                {
                    next = None;
                    break;
                }
            }
        }
        let compiled = self.compiled.as_mut()?;
        if compiled.block_at.len() < self.instrs.len() {
            compiled.block_at.resize(self.instrs.len(), UNTRIED);
        }
        let block = match next {
            Some((next_index, next_pc)) if run.len() >= MIN_BLOCK_INSTRUCTIONS => {
                let instrs: Vec<(&Instr, bool)> = run
                    .iter()
                    .map(|&i| {
                        let entry = &self.instrs[i as usize];
                        (&entry.instr, entry.saturate)
                    })
                    .collect();
                match compiled.code.block(&key, &instrs) {
                    Ok(block) => Some((
                        block,
                        CompiledBlock {
                            index: compiled.blocks.len() as u32,
                            instructions: run.len() as u32,
                            next_index,
                            next_pc,
                            updates_exec: instrs
                                .iter()
                                .any(|(instr, _)| agx_jit::updates_exec_mask(instr)),
                            register_cells_end: instrs
                                .iter()
                                .map(|(instr, _)| register_cells_end(instr))
                                .max()
                                .unwrap_or(0),
                            memory: instrs
                                .iter()
                                .any(|(instr, _)| agx_jit::accesses_memory(instr)),
                            stack: instrs
                                .iter()
                                .any(|(instr, _)| agx_jit::accesses_stack(instr)),
                        },
                    )),
                    Err(agx_jit::CacheError::Full { .. }) => None,
                    Err(error) => {
                        compiled.failures += 1;
                        tracing::warn!(%error, address = self.instrs[index as usize].address, "a block left to the interpreter");
                        None
                    }
                }
            }
            _ => None,
        };
        let info = block.as_ref().map(|(_, info)| *info);
        compiled.block_at[index as usize] = match block {
            Some(block) => {
                compiled.blocks.push(block);
                compiled.members.push(run);
                compiled.blocks.len() as u32 - 1
            }
            None => NO_BLOCK,
        };
        info
    }

    /// Runs compiled block `block` on `regs` with execution mask `exec`
    /// (the group's `present` lanes for its exec-mask instructions), a
    /// loop at most `budget.0` whole times and then the segments that fit
    /// in `budget.1` instructions, its loads and stores reaching `memory`
    /// and its stack accesses `stack`: what it did.
    pub(crate) fn run_block(
        &mut self,
        block: &CompiledBlock,
        regs: &mut agx_jit::RegisterFile,
        uniforms: &[u32; super::UNIFORMS],
        (memory, stack): (&dyn GpuMemory, &agx_jit::StackFrame),
        (exec, present): (u32, u32),
        budget: (u32, u32),
    ) -> agx_jit::BlockRun {
        let not_run = agx_jit::BlockRun {
            exec,
            runs: 0,
            at_start: true,
            stopped_at: None,
        };
        let Some(compiled) = self.compiled.as_mut() else {
            return not_run;
        };
        let Some((code, _)) = compiled.blocks.get(block.index as usize) else {
            return not_run;
        };
        let pages = PagesOf(memory);
        let device_memory = if block.memory {
            memory
                .host_window()
                .map(|window| (window, &pages as &dyn agx_jit::PageSource))
        } else {
            None
        };
        code.run(
            regs,
            uniforms,
            (exec, present),
            budget,
            agx_jit::BlockMemory {
                device: device_memory,
                pages: &mut compiled.pages,
                stack: block.stack.then_some(stack),
            },
        )
    }

    /// The cached instruction at `position` in compiled block `block`,
    /// and its address (where a block that stopped there goes on).
    pub(crate) fn block_member(&self, block: &CompiledBlock, position: u32) -> Option<(u32, u64)> {
        let compiled = self.compiled.as_ref()?;
        let index = *compiled
            .members
            .get(block.index as usize)?
            .get(position as usize)?;
        Some((index, self.instrs[index as usize].address))
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
    match decode_memoised(&buf[..available]) {
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

/// Instructions decoded, by their bytes, for every cache of the process
/// (decoding is a function of the bytes alone). A program cache lives for
/// one command on one host thread, and a stream of small commands (Mesa's
/// blits, a piglit test's thousands of uploads) runs the same tile
/// programs and kernels again and again: decoding each instruction anew,
/// with the re-encoding that finds its unknown bits, took 4% of such a
/// test's time.
static DECODED: std::sync::Mutex<Option<HashMap<(u128, u8), isa::Decoded>>> =
    std::sync::Mutex::new(None);

/// Instructions [`DECODED`] holds before it starts again (about 150 bytes
/// each: at most some 10 MiB of host memory).
const MAX_MEMOISED_INSTRUCTIONS: usize = 1 << 16;

/// [`isa::decode`], through [`DECODED`]: what does not decode is not kept.
fn decode_memoised(bytes: &[u8]) -> Result<isa::Decoded, DecodeError> {
    let mut word = [0u8; 16];
    word[..bytes.len()].copy_from_slice(bytes);
    let key = (u128::from_le_bytes(word), bytes.len() as u8);
    let lock = || DECODED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(decoded) = lock().as_ref().and_then(|memo| memo.get(&key)) {
        return Ok(decoded.clone());
    }
    let decoded = isa::decode(bytes)?;
    let mut memo = lock();
    let memo = memo.get_or_insert_with(HashMap::new);
    if memo.len() >= MAX_MEMOISED_INSTRUCTIONS {
        memo.clear();
    }
    memo.insert(key, decoded.clone());
    Ok(decoded)
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

    #[test]
    fn memoised_decoding_is_decoding_for_every_length() {
        // Pseudo-random words (xorshift), zero past a random byte, each
        // decoded at every length it could be fetched with, longest first,
        // twice (the second from the memo): an instruction running into
        // the zeros decodes from the longer fetch and is truncated in the
        // shorter, whose bytes are the same.
        let mut next = crate::usc::test_rng::xorshift(0x9E37_79B9_7F4A_7C15u64);
        let mut decoded_some = 0;
        for _ in 0..3000 {
            let cut_bytes = 2 + next() % 11;
            let word =
                (u128::from(next()) | u128::from(next()) << 64) & ((1 << (8 * cut_bytes)) - 1);
            let bytes = word.to_le_bytes();
            for len in (1..=MAX_LENGTH_BYTES / 2).rev().map(|halves| 2 * halves) {
                let expected = isa::decode(&bytes[..len]);
                decoded_some += usize::from(expected.is_ok());
                assert_eq!(decode_memoised(&bytes[..len]), expected, "{word:#x} {len}");
                assert_eq!(decode_memoised(&bytes[..len]), expected, "{word:#x} {len}");
            }
        }
        assert!(decoded_some > 1000, "{decoded_some}");
        // `stop` (2 bytes) then zeros, and `stop` alone.
        let padded = [0x88, 0, 0, 0];
        assert_eq!(decode_memoised(&padded), isa::decode(&padded));
        assert_eq!(decode_memoised(&padded[..2]), isa::decode(&padded[..2]));
    }
}
