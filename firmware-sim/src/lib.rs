//! The simulated GPU firmware and GPU.
//!
//! `agx-firmware-sim` consumes the firmware interface the kmd writes
//! (`agx-fwif`) and really executes the work it finds, in the real AGX
//! formats (`agx-hw`): vertex shading, tiling into the parameter buffer,
//! overflow and partial renders, fragment shading, texturing and compute.
//! It never depends on the kmd: like real firmware, it only sees memory.
//!
//! The crate is layered as the hardware is, each module depending only
//! on those listed before it:
//!
//! - [`usc`]: the shader core, an interpreter of AGX machine code;
//! - [`bc`]: decoding the block-compressed texture formats;
//! - [`fault`]: the fault event a failed command raises;
//! - [`memory`]: the GPU MMU as the units see it ([`memory::GpuVm`]);
//! - [`preempt`]: suspending a running command and resuming it (the
//!   firmware's context switch), at the watchdog's checks;
//! - [`probe`]: the debugger's hook choosing SIMD-group lanes to trace;
//! - [`command`]: a Run command's context and the firmware's watchdog;
//! - [`workers`]: independent work items (threadgroups, tiles) spread
//!   over host threads, with a failure reported as in-order execution
//!   would;
//! - [`shader`]: running a SIMD-group for a stage under the watchdog;
//! - [`texture`]: the texture unit;
//! - [`bind`]: USC control words, a pipeline's set-up of the shader core
//!   (running its preshader, which reaches the texture unit);
//! - [`tiler`]: the parameter buffer, written by binning (its vertex
//!   shaders reach the texture unit), read per tile;
//! - [`raster`]: coverage at the sample positions, and plane equations;
//! - [`imageblock`]: on-chip pixel memory (a tile, or a kernel's
//!   threadgroup memory in a tile layout) and the pixel back end's block
//!   stores to images;
//! - [`compute`], [`fragment`]: the compute data master, and the
//!   per-tile (fragment) half of a render pass: tilebuffer, depth and
//!   stencil tests, ZLS, the per-tile programs and pass;
//! - [`vertex`]: the vertex half (the VDM walk, partial renders);
//! - [`engine`]: which data master runs a Run command ([`engine::Gpu`]);
//! - [`firmware`]: the firmware thread serving the kmd's rings, and
//!   [`firmware::SimulatedCoprocessor`], the coprocessor the kmd boots.
#![forbid(unsafe_code)]

pub mod astc;
pub mod bc;
pub mod bind;
pub mod bptc;
pub mod command;
pub mod compute;
pub mod engine;
pub mod etc;
pub mod fault;
pub mod firmware;
pub mod fragment;
pub mod helper;
pub mod imageblock;
pub mod memory;
pub mod preempt;
pub mod probe;
pub mod raster;
pub mod shader;
pub mod texture;
pub mod tiler;
pub mod usc;
pub mod vertex;
pub mod workers;
