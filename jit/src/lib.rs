//! The shader core's compiled engine: AGX machine code translated to host
//! code with Cranelift.
//!
//! The USC runs one instruction stream for the 32 lanes of a SIMD-group.
//! The interpreter (`agx_firmware_sim::usc`) is the reference: it decodes
//! each instruction once and then executes it for every lane, each time.
//! This crate translates a *block* (a straight run of instructions that
//! touch nothing but the lane's own registers, the dispatch's uniforms,
//! device memory and the group's stack: the integer and floating-point
//! ALU, conversions, the exec-mask instructions `if`/`else`/`while`/
//! `pop_exec`, and device and stack loads and stores of whole elements)
//! into one host function. A run of
//! ALU instructions is one loop over the quads (four neighbouring lanes)
//! of the execution mask, each register's four lanes a host vector kept
//! in host registers between instructions: lanes are independent there
//! (no instruction of the run reads another lane or changes the mask),
//! so running it four lanes at a time gives exactly what the interpreter
//! gives running it instruction by instruction for all 32; an
//! instruction with no vector form runs lane by lane inside the quad. An
//! exec-mask instruction is a loop over the present lanes' quads,
//! updating each lane's `r0l` nesting count; the mask after it is the
//! lanes whose count is 0, and the next run uses it. A load or store is two loops: every lane's
//! elements found (through the [`PageCache`], a load's read by host
//! loads), then the registers or the memory written; an element the cache
//! cannot reach (or a stack offset outside the stack) stops the block
//! before the instruction, untouched, and the interpreter runs it (and
//! reports its fault).
//! The function returns the final mask.
//!
//! Which instructions a block may hold is [`supports`]; the interpreter
//! runs everything else, and the two must agree bit for bit (the
//! differential tests in `agx-firmware-sim` check it). The rare paths of
//! the fp32 arithmetic (a result of the smallest normal's magnitude, where
//! the hardware flushes what was below it before rounding), the
//! conversions, the fp16 arithmetic and the single-source fp32 functions
//! call back into the interpreter's own functions ([`Helpers`]).
//!
//! Unsafe code lives in this module (calling the generated functions and
//! freeing their memory) and in `memory` (the page-cache functions the
//! generated code calls, which reach the call's context through the
//! pointer it was given).
#![allow(unsafe_code)]

mod memory;
mod translate;

use agx_hw::isa::Instr;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module};

pub use memory::{PageCache, PageSource, StackFrame, PAGE_CACHE_ENTRIES};
pub use translate::{
    accesses_memory, accesses_stack, supports, updates_exec_mask, UNARY_FLOAT_OPS,
};

/// Lanes in a SIMD-group.
pub const LANES: usize = 32;
/// General-purpose registers per lane.
pub const GPRS: usize = 128;
/// Uniform registers per dispatch.
pub const UNIFORMS: usize = 256;

/// The register file as the interpreter keeps it: register-major, a
/// register's 32 lanes side by side.
pub type RegisterFile = [[u32; LANES]; GPRS];

/// Functions of the reference the compiled code calls on rare paths.
#[derive(Debug, Clone, Copy)]
pub struct Helpers {
    /// `x * y + z` as the fp32 ALU computes it, before the result is
    /// written (rounded once, flushed before rounding).
    pub fma_f32: extern "C" fn(f32, f32, f32) -> f32,
    /// An fp16 value (the low 16 bits) widened to fp32, exactly, a NaN's
    /// payload as the interpreter keeps it (for an `f16` element loaded
    /// into a 32-bit register; fp16 operands widen in the compiled code).
    pub half_to_f32: extern "C" fn(u32) -> f32,
    /// An fp32 result as a 16-bit destination receives it: rounded to
    /// fp16 (nearest even), a NaN the default NaN; in the low 16 bits.
    pub f32_to_half: extern "C" fn(f32) -> u32,
    /// One lane of `convert`: (mode, the source's bits, its width in
    /// bits, flags: bit 0 a 16-bit destination, bit 1 rounding to zero)
    /// to the bits the destination receives.
    pub convert: extern "C" fn(u32, u64, u32, u32) -> u64,
    /// One lane of `fadd16`/`fmul16`/`fmadd16`: (the operation, 0 add, 1
    /// multiply, 2 fused multiply-add; the operands' exact values; `.sat`
    /// as 0 or 1) to the bits the 16-bit destination receives (rounded
    /// once to fp16, a NaN the default NaN).
    pub half_arithmetic: extern "C" fn(u32, f64, f64, f64, u32) -> u32,
    /// One lane of a unary fp32 operation: (its index in
    /// [`UNARY_FLOAT_OPS`], the operand as read) to the result before
    /// `.sat` and the write (which flush and make a NaN the default NaN).
    pub unary_f32: extern "C" fn(u32, f32) -> f32,
}

/// Why a block could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The host is not one Cranelift generates code for.
    #[error("no code generator for this host: {0}")]
    Host(String),
    /// An instruction the compiled engine does not translate (the caller
    /// should have asked [`supports`]).
    #[error("{0} is not translated")]
    Unsupported(String),
    /// The block is empty.
    #[error("an empty block")]
    Empty,
    /// Cranelift refused the function.
    #[error("code generation failed: {0}")]
    Codegen(String),
}

/// A compiled block, by its index in its [`Compiler`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockId(u32);

type BlockFn = unsafe extern "C" fn(
    *mut u32,
    *const u32,
    u32,
    u32,
    u64,
    *mut memory::MemoryContext<'_>,
) -> u64;

/// Compiles blocks and keeps their code, which lives as long as the
/// compiler does.
pub struct Compiler {
    /// `None` only while being dropped.
    module: Option<JITModule>,
    context: cranelift_codegen::Context,
    builder_context: cranelift_frontend::FunctionBuilderContext,
    helpers: Helpers,
    blocks: Vec<BlockFn>,
    /// Bytes of host code generated so far.
    code_bytes: usize,
}

impl std::fmt::Debug for Compiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiler")
            .field("blocks", &self.blocks.len())
            .field("code_bytes", &self.code_bytes)
            .finish()
    }
}

impl Compiler {
    /// A compiler for this host, whose blocks call `helpers`.
    pub fn new(helpers: Helpers) -> Result<Compiler, CompileError> {
        let mut flags = settings::builder();
        let set = |flags: &mut settings::Builder, name, value| {
            flags
                .set(name, value)
                .map_err(|e| CompileError::Host(e.to_string()))
        };
        set(&mut flags, "opt_level", "speed")?;
        // The IR is checked in development builds (where the tests run).
        set(
            &mut flags,
            "enable_verifier",
            if cfg!(debug_assertions) {
                "true"
            } else {
                "false"
            },
        )?;
        let isa = cranelift_native::builder()
            .map_err(|e| CompileError::Host(e.to_string()))?
            .finish(settings::Flags::new(flags))
            .map_err(|e| CompileError::Host(e.to_string()))?;
        let module = JITModule::new(JITBuilder::with_isa(isa, default_libcall_names()));
        let context = module.make_context();
        Ok(Compiler {
            module: Some(module),
            context,
            builder_context: cranelift_frontend::FunctionBuilderContext::new(),
            helpers,
            blocks: Vec::new(),
            code_bytes: 0,
        })
    }

    /// Blocks compiled so far.
    pub fn block_count(&self) -> usize {
        self.blocks.len()
    }

    /// Bytes of host code generated so far.
    pub fn code_bytes(&self) -> usize {
        self.code_bytes
    }

    /// Compiles `block`: each instruction with its `.sat` flag, in program
    /// order. Every instruction must be one [`supports`] accepts.
    pub fn compile(&mut self, block: &[(&Instr, bool)]) -> Result<BlockId, CompileError> {
        if block.is_empty() {
            return Err(CompileError::Empty);
        }
        let module = self
            .module
            .as_mut()
            .ok_or_else(|| CompileError::Codegen("the compiler is gone".into()))?;
        module.clear_context(&mut self.context);
        translate::block(
            module,
            &mut self.context,
            &mut self.builder_context,
            &self.helpers,
            block,
        )?;
        // Named for profilers: under `perf record` (which sets
        // `PERF_BUILDID_DIR`) Cranelift lists each function, by this name,
        // in `/tmp/perf-<pid>.map`, where `perf report` finds it.
        let name = block_name(self.blocks.len(), block);
        let id = module
            .declare_function(&name, Linkage::Local, &self.context.func.signature)
            .map_err(|e| CompileError::Codegen(e.to_string()))?;
        module
            .define_function(id, &mut self.context)
            .map_err(|e| CompileError::Codegen(format!("{e:?}")))?;
        self.code_bytes += self
            .context
            .compiled_code()
            .map_or(0, |code| code.code_buffer().len());
        module.clear_context(&mut self.context);
        module
            .finalize_definitions()
            .map_err(|e| CompileError::Codegen(e.to_string()))?;
        let code = module.get_finalized_function(id);
        // SAFETY: `code` is the entry of the function just defined with
        // the signature `translate::block` gave it: (register file
        // pointer, uniforms pointer, execution mask, present lanes, most
        // runs, memory context) to the packed result, the platform's C
        // calling convention.
        let entry = unsafe { std::mem::transmute::<*const u8, BlockFn>(code) };
        self.blocks.push(entry);
        Ok(BlockId(self.blocks.len() as u32 - 1))
    }
}

/// A compiled block's name (unique in its compiler): its number, its
/// first instruction and its length.
fn block_name(id: usize, block: &[(&Instr, bool)]) -> String {
    let first = block
        .first()
        .map(|(instr, _)| agx_hw::isa::text::print(instr, 0))
        .unwrap_or_default();
    format!("agx-block {id}: {first} ({} instructions)", block.len())
}

/// A compiled block shared through a [`CodeCache`]: its entry, and the
/// cache whose code it is (kept alive while the block is).
#[derive(Clone)]
pub struct Block {
    entry: BlockFn,
    _code: std::sync::Arc<CodeCache>,
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block").finish_non_exhaustive()
    }
}

/// What one call of a [`Block`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRun {
    /// The execution mask after it.
    pub exec: u32,
    /// How many times the block ran whole (1 unless it is a loop or it
    /// stopped).
    pub runs: u32,
    /// A loop whose budget ran out: the program goes on at the block's
    /// start (its last jump was taken), not after it.
    pub at_start: bool,
    /// A block that stopped before its instruction at this position (a
    /// memory instruction compiled code could not make: the interpreter
    /// runs it and goes on), after `runs` whole runs and the instructions
    /// before it.
    pub stopped_at: Option<u32>,
}

/// The most runs of a loop one call makes.
pub const MAX_RUNS: u32 = (1 << 30) - 1;

/// The memory a block's loads and stores reach: the host window behind
/// physical memory, and the MMU model that translates GPU addresses into
/// it.
pub type DeviceMemory<'a> = (agx_hw::host::HostWindow<'a>, &'a dyn PageSource);

/// What a block's memory instructions reach: device memory (without it,
/// the block stops before the first), the page cache they translate
/// through, and the SIMD-group's stack (without it, the block stops
/// before its first stack access).
pub struct BlockMemory<'a> {
    /// Device memory.
    pub device: Option<DeviceMemory<'a>>,
    /// The worker's page cache.
    pub pages: &'a mut PageCache,
    /// The group's stack.
    pub stack: Option<&'a StackFrame>,
}

impl std::fmt::Debug for BlockMemory<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockMemory")
            .field("device", &self.device.map(|(window, _)| window))
            .field("pages", &self.pages.len())
            .field("stack", &self.stack)
            .finish()
    }
}

impl Block {
    /// Runs the block on the lanes of `exec` (exec-mask instructions on
    /// every lane of `present`), with `regs` and `uniforms`; a block that
    /// ends with a jump on the mask back to its start runs again while
    /// the jump is taken, at most `max_runs` whole times in all (at most
    /// [`MAX_RUNS`]), and then, with `tail_instructions` left, the
    /// segments of one more run that fit in them (it stops before the
    /// first that does not). Its memory instructions reach `memory`.
    pub fn run(
        &self,
        regs: &mut RegisterFile,
        uniforms: &[u32; UNIFORMS],
        (exec, present): (u32, u32),
        (max_runs, tail_instructions): (u32, u32),
        memory: BlockMemory<'_>,
    ) -> BlockRun {
        let max_runs = u64::from(max_runs.min(MAX_RUNS));
        let mut context = memory::MemoryContext::new(memory.pages, memory.device, memory.stack);
        context.tail = tail_instructions;
        // SAFETY: the function reads and writes only the 128 x 32 words
        // of `regs` (every register index was checked to be below 128 at
        // translation) and reads the 256 words of `uniforms` (indices
        // checked below 256), both borrowed for the call, the stack frame
        // (borrowed) and the context, which it passes to the page-cache
        // functions of `memory` and reads only at its `repr(C)` offsets;
        // its loads and stores reach host pages the cache holds, each put
        // there by `page_miss` from the borrowed window (a whole page
        // inside it, element accesses never crossing a page) since the
        // last change of translation generation, which the code checks
        // before each memory instruction; it calls only `Helpers`' functions and
        // those of `memory`, which are safe Rust that does not unwind.
        // Its code lives while `_code` (the cache that owns the module)
        // does, which this block keeps alive.
        let packed = unsafe {
            (self.entry)(
                regs.as_mut_ptr().cast(),
                uniforms.as_ptr(),
                exec,
                present,
                max_runs,
                &mut context,
            )
        };
        BlockRun {
            exec: packed as u32,
            runs: ((packed >> 32) & u64::from(MAX_RUNS)) as u32,
            at_start: packed >> 63 != 0,
            stopped_at: (packed >> 62 & 1 != 0).then_some(context.stopped_at),
        }
    }
}

/// Why a [`CodeCache`] gave no block.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The block did not compile.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// The cache holds as much code as it may.
    #[error("the code cache is full ({limit_bytes} bytes of code)")]
    Full {
        /// The cache's limit.
        limit_bytes: usize,
    },
}

/// Compiled blocks shared by every program cache of one GPU, across
/// commands and threads: a block is compiled once per distinct run of
/// instruction bytes, whoever runs it. The code lives as long as the
/// cache and every block taken from it; past `limit_bytes` of code no
/// more is compiled (those runs are interpreted).
pub struct CodeCache {
    inner: std::sync::Mutex<CacheInner>,
    limit_bytes: usize,
}

struct CacheInner {
    compiler: Compiler,
    by_bytes: std::collections::HashMap<Vec<u8>, BlockFn>,
    /// Compilations, and lookups that found a block compiled before.
    compiles: u64,
    hits: u64,
}

// SAFETY: `CacheInner` is only reached through the mutex, one thread at a
// time. Its `JITModule` holds raw pointers to the code memory it owns,
// which nothing else frees or writes; the finished functions
// (`BlockFn`s) are immutable code any thread may call.
unsafe impl Send for CacheInner {}

impl std::fmt::Debug for CodeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeCache")
            .field("limit_bytes", &self.limit_bytes)
            .finish_non_exhaustive()
    }
}

/// What a [`CodeCache`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// Blocks compiled.
    pub blocks: usize,
    /// Host code they took.
    pub code_bytes: usize,
    /// Lookups that compiled a block.
    pub compiles: u64,
    /// Lookups that found one compiled before.
    pub hits: u64,
}

impl CodeCache {
    /// An empty cache that compiles up to `limit_bytes` of host code.
    pub fn new(
        helpers: Helpers,
        limit_bytes: usize,
    ) -> Result<std::sync::Arc<CodeCache>, CompileError> {
        Ok(std::sync::Arc::new(CodeCache {
            inner: std::sync::Mutex::new(CacheInner {
                compiler: Compiler::new(helpers)?,
                by_bytes: std::collections::HashMap::new(),
                compiles: 0,
                hits: 0,
            }),
            limit_bytes,
        }))
    }

    /// The block for the run of instructions whose bytes are `key` (and
    /// which decode to `block`, each with its `.sat` flag), compiled now
    /// if no program cache compiled it before.
    pub fn block(
        self: &std::sync::Arc<Self>,
        key: &[u8],
        block: &[(&Instr, bool)],
    ) -> Result<Block, CacheError> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&entry) = inner.by_bytes.get(key) {
            inner.hits += 1;
            return Ok(Block {
                entry,
                _code: std::sync::Arc::clone(self),
            });
        }
        if inner.compiler.code_bytes() >= self.limit_bytes {
            return Err(CacheError::Full {
                limit_bytes: self.limit_bytes,
            });
        }
        let id = inner.compiler.compile(block)?;
        let entry = inner.compiler.blocks[id.0 as usize];
        inner.by_bytes.insert(key.to_vec(), entry);
        inner.compiles += 1;
        Ok(Block {
            entry,
            _code: std::sync::Arc::clone(self),
        })
    }

    /// What the cache holds.
    pub fn stats(&self) -> CacheStats {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        CacheStats {
            blocks: inner.compiler.block_count(),
            code_bytes: inner.compiler.code_bytes(),
            compiles: inner.compiles,
            hits: inner.hits,
        }
    }
}

impl Drop for Compiler {
    fn drop(&mut self) {
        self.blocks.clear();
        if let Some(module) = self.module.take() {
            // SAFETY: the only pointers into the module's code are the
            // block entries, cleared above, and those a `CodeCache` handed
            // out in `Block`s, each of which keeps the cache (the owner of
            // this compiler) alive, so none is left when this runs.
            unsafe { module.free_memory() };
        }
    }
}
