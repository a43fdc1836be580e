//! The per-tile (fragment) half of a render pass.
//!
//! A render pass is two commands. RunVertex (the `vertex` module) walks the
//! VDM control stream and bins what it draws into the parameter buffer.
//! RunFragment then renders the frame one tile at a time in on-chip
//! memory, the *tilebuffer*: each tile starts with the background program
//! (`bg`: clear, or load what the render target held), gets its
//! primitives shaded, and ends with the end-of-tile program (`eot`), whose
//! `image_write_block` instructions store the tilebuffer to the render
//! targets through their PBE descriptors. A tile no primitive touches is
//! skipped entirely unless the pass asks for `PROCESS_EMPTY_TILES` (a
//! clear needs it). A partial render runs the same per-tile work from the
//! vertex half, with the partial programs.
//!
//! Modelled: the tilebuffer with every element format `st_tile`/`ld_tile`
//! use, rasterisation with multisampling at the pass's sample positions,
//! depth and stencil tests, hidden-surface removal of opaque primitives, ZLS loads and stores, texturing, `bg`/`eot`
//! programs run per tile through their USC control words, and block
//! stores to linear and twiddled images. Every memory access goes through
//! the VM's page tables.
//!
//! The parts, each using only those listed before it: `tilebuffer` (the
//! tile's on-chip memory); `depth` (early depth and stencil tests), `zls`
//! (depth/stencil loads and stores) and `scene` (reading the binned
//! scene); `io` (what a per-tile program sees of the fixed-function
//! units); `program` (running the per-tile programs); `pass` (every tile
//! of a pass, on the worker threads).

mod depth;
mod io;
mod pass;
mod program;
mod scene;
mod tilebuffer;
mod zls;

use agx_fwif::messages::{FaultUnit, RunFragmentBody};

pub(crate) use self::pass::render_scene;
use crate::command::{command_body, RunContext};
use crate::fault::EngineResult;
use crate::helper::HelperProgram;
use crate::tiler::tvb_info;

/// RunFragment: every tile of every layer: bg, the tile's primitives
/// through the fragment shader, eot.
pub fn run_fragment(ctx: &RunContext<'_>, workers: usize) -> EngineResult {
    match fragment(ctx, workers) {
        Ok(()) => EngineResult::Done,
        Err(result) => result,
    }
}

fn fragment(ctx: &RunContext<'_>, workers: usize) -> Result<(), EngineResult> {
    let body: RunFragmentBody = command_body(ctx)?;
    let vm = ctx.user_vm("fragment", FaultUnit::Firmware, ctx.command)?;
    let info = tvb_info(ctx, body.buffer)?;
    render_scene(
        ctx,
        vm,
        body.usc_exec_base.get(),
        &body.pass,
        &info,
        true,
        workers,
        HelperProgram::of(&body.helper, body.usc_exec_base.get()),
    )
    .map(|_tiles| ())
}
