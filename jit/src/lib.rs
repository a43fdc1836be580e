//! The shader core's compiled engine: AGX machine code translated to host
//! code with Cranelift.
//!
//! The USC runs one instruction stream for the 32 lanes of a SIMD-group.
//! The interpreter (`agx_firmware_sim::usc`) is the reference: it decodes
//! each instruction once and then executes it for every lane, each time.
//! This crate translates a *block* (a straight run of instructions that
//! touch nothing but the lane's own registers and the dispatch's uniforms:
//! the integer and floating-point ALU) into one host function that runs
//! the whole block for each lane of the execution mask in turn, keeping
//! the lane's registers in host registers between instructions. Lanes are
//! independent in such a block (no instruction of it reads another lane or
//! changes the mask), so running it lane by lane gives exactly what the
//! interpreter gives running it instruction by instruction.
//!
//! Which instructions a block may hold is [`supports`]; the interpreter
//! runs everything else, and the two must agree bit for bit (the
//! differential tests in `agx-firmware-sim` check it). The rare paths of
//! the fp32 arithmetic (a result of the smallest normal's magnitude, where
//! the hardware flushes what was below it before rounding) call back into
//! the interpreter's own functions ([`Helpers`]).
//!
//! This is the crate's one module of unsafe code: calling the generated
//! functions and freeing their memory.
#![allow(unsafe_code)]

mod translate;

use agx_hw::isa::Instr;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Module};

pub use translate::supports;

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

type BlockFn = unsafe extern "C" fn(*mut u32, *const u32, u32);

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
        set(&mut flags, "enable_verifier", "false")?;
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
        let id = module
            .declare_anonymous_function(&self.context.func.signature)
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
        // pointer, uniforms pointer, execution mask), no result, the
        // platform's C calling convention.
        let entry = unsafe { std::mem::transmute::<*const u8, BlockFn>(code) };
        self.blocks.push(entry);
        Ok(BlockId(self.blocks.len() as u32 - 1))
    }

    /// Runs block `id` on the lanes of `exec`, with `regs` and `uniforms`.
    /// An id of another compiler does nothing (or runs whatever block of
    /// this one has that index: ids are not shared between compilers).
    pub fn run(&self, id: BlockId, regs: &mut RegisterFile, uniforms: &[u32; UNIFORMS], exec: u32) {
        let Some(entry) = self.blocks.get(id.0 as usize) else {
            return;
        };
        // SAFETY: the function reads and writes only the 128 x 32 words
        // of `regs` (every register index was checked to be below 128 at
        // translation) and reads the 256 words of `uniforms` (indices
        // checked below 256), both borrowed for the call; it calls only
        // `Helpers`' functions, which are safe Rust. Its code lives as
        // long as `self.module`, which outlives the call.
        unsafe { entry(regs.as_mut_ptr().cast(), uniforms.as_ptr(), exec) }
    }
}

impl Drop for Compiler {
    fn drop(&mut self) {
        self.blocks.clear();
        if let Some(module) = self.module.take() {
            // SAFETY: the only pointers into the module's code were the
            // block entries, cleared above; `run` borrows `self`, so none
            // is running.
            unsafe { module.free_memory() };
        }
    }
}
