//! The vertex half of a render pass: RunVertex walks the VDM control
//! stream.
//!
//! The stream's blocks (read through the MMU and parsed by the generated
//! `VdmBlock` list) carry state (the vertex shader's pipeline and output
//! count, PPP state updates, accumulated) and draws; each draw is shaded and
//! binned into the parameter buffer ([`crate::tiler`]). When the buffer
//! runs dry the firmware asks the kmd for more, and if it will not, the
//! pass does a partial render: the per-tile half ([`crate::fragment`]) runs
//! over what is binned so far, and binning starts again.

use agx_fwif::messages::{FaultUnit, RunVertexBody, TvbInfo};
use agx_hw::formats::{PppRecords, VdmBlock};

use crate::command::{command_body, RunContext, WATCHDOG_STRIDE};
use crate::fault::EngineResult;
use crate::fragment::render_scene;
use crate::helper::{HelperProgram, StageHelper};
use crate::memory::{read_item, read_sequence, GpuVm};
use crate::tiler::{self, overflow, tvb_info};

/// The parameter buffer ran dry mid-pass: ask the kmd for more (it grows
/// only under its `sync` policy; more pages do not help a full state
/// table), and if it will not, render what is
/// binned so far (a partial render: the segment ends with `partial_eot`,
/// the next starts with `partial_bg`, depth and stencil go through the
/// ZLS control) and start binning again from an empty buffer. Returns the
/// tiles the partial render visited (none when the buffer grew).
fn overflowed(
    ctx: &RunContext<'_>,
    vm: GpuVm<'_>,
    body: &RunVertexBody,
    binner: &mut tiler::Binner<'_>,
    workers: usize,
) -> Result<u64, EngineResult> {
    let wanted = u64::from(binner.blocks()).max(1);
    let grown = if binner.state_table_full() {
        None
    } else {
        ctx.grow_tvb(binner.buffer_id(), wanted)
    };
    if let Some(blocks) = grown {
        let info = tvb_info(ctx, body.buffer)?;
        if u64::from(info.block_count) >= blocks && info.block_count > binner.blocks() {
            binner.grown(&info);
            return Ok(0);
        }
    }
    tracing::debug!(
        blocks = binner.blocks(),
        "partial render: the parameter buffer is full and was not grown"
    );
    binner.publish()?;
    let info = tvb_info(ctx, body.buffer)?;
    let tiles = render_scene(
        ctx,
        vm,
        body.usc_exec_base.get(),
        &body.pass,
        &info,
        false,
        workers,
        // A partial render's fragment programs get their stacks from
        // the fragment stage's helper, as the pass's own do.
        HelperProgram::of(&body.fragment_helper, body.usc_exec_base.get()),
    )?;
    binner.next_segment()?.map_err(|_| overflow(body.buffer))?;
    Ok(tiles)
}

/// RunVertex: walks the VDM control stream, shading and binning draws.
pub fn run_vertex(ctx: &RunContext<'_>, workers: usize) -> EngineResult {
    match vertex(ctx, workers) {
        Ok(()) => EngineResult::Done,
        Err(result) => result,
    }
}

fn vertex(ctx: &RunContext<'_>, workers: usize) -> Result<(), EngineResult> {
    let body: RunVertexBody = command_body(ctx)?;
    let vm = ctx.user_vm("vertex", FaultUnit::Vdm, body.vdm_ctrl_stream_base.get())?;
    // The helper serves the programs that spill, which are shaded on one
    // core (the firmware's thread).
    let mut helper = StageHelper::new(
        HelperProgram::of(&body.helper, body.usc_exec_base.get()),
        0,
        ctx.vm_slot,
    );
    let info = tvb_info(ctx, body.buffer)?;
    let area = (body.pass.width_px, body.pass.height_px);
    let mut binner = tiler::Binner::new(vm.clone(), &info, area.0, area.1)?
        .map_err(|_| overflow(body.buffer))?;
    let mut state = tiler::VertexState {
        sampler_heap: (!body.pass.sampler_heap.is_null())
            .then_some((body.pass.sampler_heap.get(), body.pass.sampler_count)),
        ..tiler::VertexState::default()
    };
    // Vertices are shaded on the firmware's thread and, for draws that
    // allow it, on as many as the fragment pass uses.
    let mut cores = tiler::VertexCores::new(ctx.shader_code.clone(), workers);
    let watchdog = ctx.watchdog();
    let mut item = Vec::new();
    let mut pc = body.vdm_ctrl_stream_base.get();
    let mut walked = 0u64;
    let mut partial_render_tiles = 0u64;
    loop {
        walked += 1;
        if walked.is_multiple_of(WATCHDOG_STRIDE) {
            // One work unit per control-stream block.
            watchdog.charge(WATCHDOG_STRIDE);
            if watchdog.expired() {
                return Err(EngineResult::Timeout);
            }
        }
        let block: VdmBlock = read_item(&vm, pc, FaultUnit::Vdm, &mut item)?;
        let next = pc.wrapping_add(item.len() as u64);
        match block {
            VdmBlock::StreamTerminate(_) => break,
            VdmBlock::Barrier(_) => pc = next,
            VdmBlock::PppStateUpdate(update) => {
                // An update changes the records its header names; the
                // rest stay as earlier updates set them.
                let (records, _) =
                    read_sequence::<PppRecords>(&vm, update.pointer, FaultUnit::Vdm)?;
                state
                    .ppp
                    .get_or_insert_with(PppRecords::default)
                    .update(&records);
                pc = next;
            }
            VdmBlock::VdmStateUpdate(words) => {
                tiler::apply_vdm_state(&words, &mut state);
                pc = next;
            }
            VdmBlock::StreamLink(link) => pc = link.target,
            VdmBlock::IndexList(list) => {
                let draw = tiler::Draw::of(&list, pc, &vm)?;
                let mut on_overflow = |binner: &mut tiler::Binner<'_>| {
                    partial_render_tiles += overflowed(ctx, vm.clone(), &body, binner, workers)?;
                    Ok(())
                };
                tiler::draw(
                    vm.clone(),
                    &mut cores,
                    &watchdog,
                    &mut helper,
                    body.usc_exec_base.get(),
                    &state,
                    &draw,
                    &mut binner,
                    pc,
                    &mut on_overflow,
                )?;
                pc = next;
            }
        }
    }
    helper.end(&mut vm.clone(), &watchdog)?;
    let stats = binner.finish()?;
    // The statistics the kmd's growth policy reads (the counters are
    // running totals; the kmd keeps their last values).
    let info = tvb_info(ctx, body.buffer)?;
    // The sizes go first and the render count last: a kmd that sees the
    // new count reads this render's sizes. (Only the last render's report
    // is kept; the kmd sizes from whichever it reads.)
    let report = [
        (
            std::mem::offset_of!(TvbInfo, last_peak_pages),
            stats.peak_pages as u32,
        ),
        (
            std::mem::offset_of!(TvbInfo, last_wanted_pages),
            stats.wanted_pages as u32,
        ),
        (
            std::mem::offset_of!(TvbInfo, overflows),
            info.overflows.wrapping_add(stats.overflows),
        ),
        (
            std::mem::offset_of!(TvbInfo, partial_renders),
            info.partial_renders.wrapping_add(stats.partial_renders),
        ),
        (
            std::mem::offset_of!(TvbInfo, renders),
            info.renders.wrapping_add(1),
        ),
    ];
    let _ = ctx.firmware.write(
        body.buffer
            .offset(std::mem::offset_of!(TvbInfo, partial_render_tiles) as u64),
        &info
            .partial_render_tiles
            .wrapping_add(partial_render_tiles)
            .to_le_bytes(),
    );
    for (offset, value) in report {
        let _ = ctx
            .firmware
            .write(body.buffer.offset(offset as u64), &value.to_le_bytes());
    }
    Ok(())
}
