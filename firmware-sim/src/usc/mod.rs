//! The shader core (USC): an interpreter for AGX machine code.
//!
//! The USC runs every programmable stage: vertex and fragment shaders,
//! compute kernels, and the tile load/store programs the driver generates
//! for each render pass. This module executes the real G13 encodings
//! (decoded by `agx_hw::isa`) one SIMD-group of 32 lanes at a time, with
//! the hardware's register model ([`exec`]), fp32 flush-to-zero and fp16
//! behaviour (see `float.rs`), memory through an MMU interface ([`memory`]),
//! and the fixed-function units behind interfaces the render pipeline
//! implements ([`io`]). Nothing a program does can panic the simulator:
//! bad programs end in an [`ExecError`] that names the instruction and,
//! for memory faults, the address.

pub mod exec;
pub(crate) mod float;
pub mod formats;
pub mod io;
pub mod memory;
pub mod program;
#[cfg(test)]
pub(crate) mod test_rng;
pub mod trace;

pub use exec::{Env, ExecError, Exit, SimdGroup, SpecialRegs, Stack, GPRS, LANES, UNIFORMS};
pub use io::{IoError, NoIo, ShaderIo};
pub use memory::{AccessKind, FaultReason, GpuMemory, MemoryFault};
pub use program::{
    new_code_cache, FetchError, ProgramCache, ShaderEngine, CODE_CACHE_LIMIT_BYTES,
    MAX_CACHED_INSTRUCTIONS,
};
pub use trace::{LaneAccess, LaneCounts, LaneTrace, NamedValue, TraceStep};
