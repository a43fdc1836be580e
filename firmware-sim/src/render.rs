//! Render passes: the vertex data master and the per-tile fragment work.
//!
//! A render pass is two commands. RunVertex walks the VDM control stream
//! (state updates, draws, links, barriers, terminate) and bins what it
//! draws into the parameter buffer. RunFragment then renders the frame
//! one tile at a time in on-chip memory, the *tilebuffer*: each tile
//! starts with the background program (`bg`: clear, or load what the
//! render target held), gets its primitives shaded, and ends with the
//! end-of-tile program (`eot`), whose `image_write_block` instructions
//! store the tilebuffer to the render targets through their PBE
//! descriptors. A tile no primitive touches is skipped entirely unless
//! the pass asks for `PROCESS_EMPTY_TILES` (a clear needs it).
//!
//! Modelled so far: the VDM walk (draws are refused as unsupported work
//! until vertex shading and tiling land), the tilebuffer with every
//! element format `st_tile`/`ld_tile` use, `bg`/`eot` programs run per
//! tile through their USC control words, and block stores to linear
//! images. Every memory access goes through the VM's page tables.

use std::sync::atomic::Ordering;
use std::time::Instant;

use agx_fwif::messages::{FaultUnit, RunRenderBody};
use agx_hw::formats::{Channels, Layout, Pbe, TextureType, VdmBlockType, VdmState, VdmStreamLink};
use agx_uapi::asahi::{BgEot, RenderFlags};
use zerocopy::FromBytes;

use crate::compute::{self, exec_fault, read_words, unsupported, Binding};
use crate::engine::{EngineResult, GpuVm, RunContext};
use crate::usc::formats::{self, ElementFormat};
use crate::usc::io::{BlockStore, IoError, TextureHandle, TileAccess};
use crate::usc::{
    Env, ExecError, Exit, GpuMemory, MemoryFault, ProgramCache, ShaderIo, SimdGroup, LANES,
};

/// Instructions a SIMD-group runs between watchdog checks.
const BUDGET_SLICE: u64 = 1 << 20;
/// VDM blocks walked between watchdog checks.
const WATCHDOG_STRIDE: u64 = 4096;

fn render_body(ctx: &RunContext<'_>) -> Result<RunRenderBody, EngineResult> {
    RunRenderBody::read_from_prefix(ctx.body)
        .map(|(b, _)| b)
        .map_err(|_| unsupported(ctx.command, FaultUnit::Firmware))
}

/// RunVertex: walks the VDM control stream.
pub fn run_vertex(ctx: &RunContext<'_>) -> EngineResult {
    let body = match render_body(ctx) {
        Ok(body) => body,
        Err(result) => return result,
    };
    let Some(root) = ctx.ttb0 else {
        return unsupported(body.render.vdm_ctrl_stream_base, FaultUnit::Vdm);
    };
    let vm = GpuVm::new(ctx.memory, root);
    let mut pc = body.render.vdm_ctrl_stream_base;
    let mut walked = 0u64;
    loop {
        walked += 1;
        if walked.is_multiple_of(WATCHDOG_STRIDE)
            && (Instant::now() >= ctx.deadline || ctx.stop.load(Ordering::Relaxed))
        {
            return EngineResult::Timeout;
        }
        let word = match vm.read_u32(pc) {
            Ok(word) => word,
            Err(fault) => return EngineResult::from_uat(&fault, FaultUnit::Vdm),
        };
        match VdmBlockType::from_raw(word >> 29) {
            VdmBlockType::StreamTerminate => return EngineResult::Done,
            VdmBlockType::Barrier => pc = pc.wrapping_add(4),
            // The PPP state is read when a draw needs it.
            VdmBlockType::PppStateUpdate => pc = pc.wrapping_add(8),
            VdmBlockType::VdmStateUpdate => {
                let header = VdmState::unpack(&word.to_le_bytes()).value;
                let words = [
                    header.restart_index_present,
                    header.vertex_shader_word_0_present,
                    header.vertex_shader_word_1_present,
                    header.vertex_outputs_present,
                    header.tessellation_present,
                    header.vertex_unknown_present,
                    header.tessellation_scale_present,
                ]
                .into_iter()
                .filter(|&present| present)
                .count() as u64;
                pc = pc.wrapping_add(4 + 4 * words);
            }
            VdmBlockType::StreamLink => {
                let block: [u8; 8] = match read_words(&vm, pc) {
                    Ok(block) => block,
                    Err(result) => return result,
                };
                pc = VdmStreamLink::unpack(&block).value.target;
            }
            // Draws need vertex shading and tiling: the rest of the GPU
            // execution work.
            VdmBlockType::IndexList | VdmBlockType::Tessellate | VdmBlockType::Unknown(_) => {
                return unsupported(pc, FaultUnit::Vdm)
            }
        }
    }
}

/// The USC control words of a bg/eot program, or a fault at the null
/// address for a missing one.
fn program(vm: &GpuVm<'_>, usc_exec_base: u64, program: BgEot) -> Result<Binding, EngineResult> {
    let offset = u64::from(program.usc & !7);
    if offset == 0 {
        return Err(EngineResult::Fault {
            address: 0,
            unit: FaultUnit::Usc as u32,
            access: 2,
            reason: agx_hw::formats::UatFaultReason::Unmapped.to_raw(),
        });
    }
    compute::bind(vm, usc_exec_base + offset, usc_exec_base)
}

/// One tile's on-chip memory.
struct Tilebuffer {
    bytes: Vec<u8>,
    width_px: u32,
    height_px: u32,
    samples: u32,
    sample_bytes: u32,
}

impl Tilebuffer {
    fn record(&self, x: u32, y: u32, sample: u32) -> usize {
        (((y * self.width_px + x) * self.samples + sample) * self.sample_bytes) as usize
    }
}

/// The fixed-function units of per-tile programs: the tilebuffer and the
/// pixel back end's block stores.
struct TileIo<'a, 'b> {
    tile: &'a mut Tilebuffer,
    /// The tile's first pixel in the render target.
    origin: (u32, u32),
    /// The pixel (within the tile) each lane stands for.
    lanes: [(u32, u32); LANES],
    vm: GpuVm<'b>,
    binding: &'a Binding,
    /// The render area.
    area: (u32, u32),
    layer: u32,
}

fn invalid(what: String) -> IoError {
    IoError::Invalid(what)
}

impl TileIo<'_, '_> {
    fn pixel(&self, lane: usize, access: &TileAccess) -> Result<(u32, u32), IoError> {
        let (x, y) = match access.explicit {
            Some((x, y)) => (u32::from(x), u32::from(y)),
            None => self.lanes[lane],
        };
        if x >= self.tile.width_px || y >= self.tile.height_px {
            return Err(invalid(format!("pixel ({x}, {y}) outside the tile")));
        }
        Ok((x, y))
    }

    fn element(&self, access: &TileAccess) -> Result<(ElementFormat, usize), IoError> {
        let format = ElementFormat::from_code(i64::from(access.format))
            .ok_or_else(|| invalid(format!("tilebuffer format {}", access.format)))?;
        let span = if format.packed() {
            4
        } else {
            4usize << format.shift()
        };
        let end = access.offset_bytes as usize + span;
        if end > self.tile.sample_bytes as usize {
            return Err(invalid(format!(
                "bytes {}..{end} past the {}-byte sample record",
                access.offset_bytes, self.tile.sample_bytes
            )));
        }
        Ok((format, access.offset_bytes as usize))
    }

    fn samples(&self, mask: u32) -> impl Iterator<Item = u32> + '_ {
        (0..self.tile.samples).filter(move |s| mask & (1 << s) != 0)
    }
}

/// Where channel `component` of an element starts in a record.
fn channel_offset(format: ElementFormat, offset: usize, component: usize) -> usize {
    if format.packed() {
        offset
    } else {
        offset + (component << format.shift())
    }
}

impl ShaderIo for TileIo<'_, '_> {
    fn tile_load(&mut self, lane: usize, access: &TileAccess) -> Result<[u32; 4], IoError> {
        let (x, y) = self.pixel(lane, access)?;
        let (format, offset) = self.element(access)?;
        // The first sample of the mask (a load reads one sample).
        let sample = self.samples(access.sample_mask).next().unwrap_or(0);
        let record = self.tile.record(x, y, sample);
        let mut out = [0u32; 4];
        for (register, component) in (0..4).filter(|c| access.mask & (1 << c) != 0).enumerate() {
            let at = record + channel_offset(format, offset, component);
            out[register] = formats::load(format, &self.tile.bytes[at..], component, access.half);
        }
        Ok(out)
    }

    fn tile_store(
        &mut self,
        lane: usize,
        access: &TileAccess,
        values: [u32; 4],
    ) -> Result<(), IoError> {
        let (x, y) = self.pixel(lane, access)?;
        let (format, offset) = self.element(access)?;
        let samples: Vec<u32> = self.samples(access.sample_mask).collect();
        for sample in samples {
            let record = self.tile.record(x, y, sample);
            for (register, component) in (0..4).filter(|c| access.mask & (1 << c) != 0).enumerate()
            {
                let at = record + channel_offset(format, offset, component);
                if !formats::store(
                    format,
                    &mut self.tile.bytes[at..],
                    component,
                    values[register],
                    access.half,
                ) {
                    return Err(invalid(format!("st_tile cannot write {format:?}")));
                }
            }
        }
        Ok(())
    }

    fn block_store(&mut self, request: &BlockStore) -> Result<(), IoError> {
        let TextureHandle::Index(index) = request.texture else {
            return Err(invalid("bindless block stores".into()));
        };
        let address = self
            .binding
            .texture_descriptor(index)
            .ok_or_else(|| invalid(format!("no PBE descriptor bound at ts{index}")))?;
        let mut bytes = [0u8; 24];
        GpuMemory::read(&self.vm, address, &mut bytes, crate::usc::AccessKind::Read)?;
        let pbe = Pbe::unpack(&bytes).value;
        let (element, channels) = pbe_element(&pbe)
            .ok_or_else(|| invalid(format!("PBE format {:?} {:?}", pbe.channels, pbe.data_type)))?;
        if pbe.layout != Layout::Linear {
            return Err(invalid(format!("{:?} image layout", pbe.layout)));
        }
        if self.tile.samples != 1 {
            return Err(invalid("multisampled block stores".into()));
        }
        let source = ElementFormat::from_code(i64::from(request.format))
            .ok_or_else(|| invalid(format!("tilebuffer format {}", request.format)))?;
        let texel_bytes = if element.packed() {
            4
        } else {
            channels << element.shift()
        };
        // Layered passes store layer n of the tile to layer n of a linear
        // 2D array.
        let layer_offset = if self.layer == 0 {
            0
        } else if self.layer < pbe.depth_linear {
            u64::from(self.layer) * pbe.layer_stride_linear
        } else {
            return Err(invalid(format!(
                "layer {} past the image's {}",
                self.layer, pbe.depth_linear
            )));
        };
        let offset = request.tilebuffer_offset_bytes as usize;
        let (width, height) = (self.area.0.min(pbe.width), self.area.1.min(pbe.height));
        for ty in 0..self.tile.height_px {
            let y = self.origin.1 + ty;
            if y >= height {
                break;
            }
            let mut row = Vec::with_capacity(self.tile.width_px as usize * texel_bytes);
            let mut count = 0u64;
            for tx in 0..self.tile.width_px {
                let x = self.origin.0 + tx;
                if x >= width {
                    break;
                }
                let record = self.tile.record(tx, ty, 0);
                let mut texel = vec![0u8; texel_bytes];
                for component in 0..channels {
                    let from = record + channel_offset(source, offset, component);
                    let value = formats::load(source, &self.tile.bytes[from..], component, false);
                    let to = channel_offset(element, 0, component);
                    if !formats::store(element, &mut texel[to..], component, value, false) {
                        return Err(invalid(format!("cannot store {element:?}")));
                    }
                }
                row.extend_from_slice(&texel);
                count += 1;
            }
            if count == 0 {
                continue;
            }
            let address = pbe.buffer
                + layer_offset
                + u64::from(y) * u64::from(pbe.stride)
                + u64::from(self.origin.0) * texel_bytes as u64;
            let mut vm = self.vm;
            vm.write(address, &row).map_err(IoError::Memory)?;
        }
        Ok(())
    }
}

/// How a PBE's channels and type map onto an element format and a
/// channel count (the formats block stores write).
fn pbe_element(pbe: &Pbe) -> Option<(ElementFormat, usize)> {
    use ElementFormat as E;
    let count = match pbe.channels {
        Channels::R8 | Channels::R16 | Channels::R32 => 1,
        Channels::R8G8 | Channels::R16G16 | Channels::R32G32 => 2,
        Channels::R8G8B8A8
        | Channels::R16G16B16A16
        | Channels::R32G32B32A32
        | Channels::R10G10B10A2 => 4,
        _ => return None,
    };
    let element = match (pbe.channels, pbe.data_type) {
        (Channels::R10G10B10A2, TextureType::Unorm) => E::Rgb10a2,
        (Channels::R8 | Channels::R8G8 | Channels::R8G8B8A8, TextureType::Unorm) => E::Unorm8,
        (Channels::R8 | Channels::R8G8 | Channels::R8G8B8A8, TextureType::Snorm) => E::Snorm8,
        (
            Channels::R8 | Channels::R8G8 | Channels::R8G8B8A8,
            TextureType::Uint | TextureType::Sint,
        ) => E::I8,
        (Channels::R16 | Channels::R16G16 | Channels::R16G16B16A16, TextureType::Float) => E::F16,
        (Channels::R16 | Channels::R16G16 | Channels::R16G16B16A16, TextureType::Unorm) => {
            E::Unorm16
        }
        (Channels::R16 | Channels::R16G16 | Channels::R16G16B16A16, TextureType::Snorm) => {
            E::Snorm16
        }
        (
            Channels::R16 | Channels::R16G16 | Channels::R16G16B16A16,
            TextureType::Uint | TextureType::Sint,
        ) => E::I16,
        (Channels::R32 | Channels::R32G32 | Channels::R32G32B32A32, _) => E::I32,
        _ => return None,
    };
    Some((element, count))
}

/// Runs a per-tile program: `pixels` lanes, one per pixel of the tile
/// (or one SIMD-group for the end-of-tile program).
#[allow(clippy::too_many_arguments)]
fn run_tile_program(
    ctx: &RunContext<'_>,
    vm: GpuVm<'_>,
    cache: &mut ProgramCache,
    binding: &Binding,
    tile: &mut Tilebuffer,
    origin: (u32, u32),
    area: (u32, u32),
    layer: u32,
    per_pixel: bool,
) -> Result<(), EngineResult> {
    let pixels: Vec<(u32, u32)> = if per_pixel {
        (0..tile.height_px)
            .flat_map(|y| (0..tile.width_px).map(move |x| (x, y)))
            .filter(|&(x, y)| origin.0 + x < area.0 && origin.1 + y < area.1)
            .collect()
    } else {
        vec![(0, 0); LANES]
    };
    let mut uniforms = binding.uniforms.clone();
    let mut memory = vm;
    for chunk in pixels.chunks(LANES) {
        let mut lanes = [(0u32, 0u32); LANES];
        lanes[..chunk.len()].copy_from_slice(chunk);
        let present = if chunk.len() == LANES {
            u32::MAX
        } else {
            (1u32 << chunk.len()) - 1
        };
        let mut group = SimdGroup::new(binding.code, present);
        let sr = agx_hw::isa::table::sr::THREAD_POSITION_IN_GRID;
        group
            .special
            .set_lanes(sr, std::array::from_fn(|lane| origin.0 + lanes[lane].0));
        group
            .special
            .set_lanes(sr + 1, std::array::from_fn(|lane| origin.1 + lanes[lane].1));
        group.special.set_all(sr + 2, layer);
        group
            .special
            .set_all(agx_hw::isa::table::sr::IS_ACTIVE_THREAD, 1);
        group.special.set_lanes(
            agx_hw::isa::table::sr::THREAD_INDEX_IN_SIMDGROUP,
            std::array::from_fn(|lane| lane as u32),
        );
        let mut io = TileIo {
            tile,
            origin,
            lanes,
            vm,
            binding,
            area,
            layer,
        };
        loop {
            let mut budget = BUDGET_SLICE;
            let mut env = Env {
                memory: &mut memory,
                io: &mut io,
                uniforms: &mut uniforms,
                threadgroup: &mut [],
            };
            match group.run(cache, &mut env, &mut budget) {
                Ok(Exit::Stopped) => break,
                Ok(Exit::Barrier) => {
                    return Err(unsupported(group.pc, FaultUnit::Usc));
                }
                Err(ExecError::Timeout { .. }) => {
                    if Instant::now() >= ctx.deadline || ctx.stop.load(Ordering::Relaxed) {
                        return Err(EngineResult::Timeout);
                    }
                }
                Err(error) => return Err(block_store_fault(&error)),
            }
        }
    }
    Ok(())
}

/// A block store that faulted writing the image is a PBE fault; other
/// errors are the shader core's.
fn block_store_fault(error: &ExecError) -> EngineResult {
    match error {
        ExecError::Io {
            error: IoError::Memory(MemoryFault {
                address, access, ..
            }),
            ..
        } => EngineResult::Fault {
            address: *address,
            unit: FaultUnit::Pbe as u32,
            access: u32::from(*access == crate::usc::AccessKind::Write),
            reason: agx_hw::formats::UatFaultReason::Unmapped.to_raw(),
        },
        other => exec_fault(other),
    }
}

/// RunFragment: every tile of every layer, bg then eot.
pub fn run_fragment(ctx: &RunContext<'_>) -> EngineResult {
    let body = match render_body(ctx) {
        Ok(body) => body,
        Err(result) => return result,
    };
    let render = body.render;
    let Some(root) = ctx.ttb0 else {
        return unsupported(ctx.command, FaultUnit::Firmware);
    };
    let flags = RenderFlags::from_bits_truncate(render.flags);
    // No draws are binned yet (the vertex stage refuses them), so every
    // tile is empty: it is rendered only when the pass asks for empty
    // tiles.
    if !flags.contains(RenderFlags::PROCESS_EMPTY_TILES) {
        return EngineResult::Done;
    }
    let vm = GpuVm::new(ctx.memory, root);
    let bg = match program(&vm, body.usc_exec_base, render.bg) {
        Ok(binding) => binding,
        Err(result) => return result,
    };
    let eot = match program(&vm, body.usc_exec_base, render.eot) {
        Ok(binding) => binding,
        Err(result) => return result,
    };
    let (tile_w, tile_h) = (
        u32::from(render.utile_width_px),
        u32::from(render.utile_height_px),
    );
    let area = (u32::from(render.width_px), u32::from(render.height_px));
    let mut cache = ProgramCache::new();
    let mut tile = Tilebuffer {
        bytes: vec![
            0;
            (tile_w * tile_h * u32::from(render.samples) * u32::from(render.sample_size_B))
                as usize
        ],
        width_px: tile_w,
        height_px: tile_h,
        samples: u32::from(render.samples),
        sample_bytes: u32::from(render.sample_size_B),
    };
    for layer in 0..u32::from(render.layers) {
        for ty in 0..area.1.div_ceil(tile_h) {
            for tx in 0..area.0.div_ceil(tile_w) {
                if Instant::now() >= ctx.deadline || ctx.stop.load(Ordering::Relaxed) {
                    return EngineResult::Timeout;
                }
                let origin = (tx * tile_w, ty * tile_h);
                tile.bytes.fill(0);
                for (binding, per_pixel) in [(&bg, true), (&eot, false)] {
                    if let Err(result) = run_tile_program(
                        ctx, vm, &mut cache, binding, &mut tile, origin, area, layer, per_pixel,
                    ) {
                        return result;
                    }
                }
            }
        }
    }
    EngineResult::Done
}
