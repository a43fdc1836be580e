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
//! depth and stencil tests, ZLS loads and stores, texturing, `bg`/`eot`
//! programs run per tile through their USC control words, and block
//! stores to linear and twiddled images. Every memory access goes through
//! the VM's page tables.

use std::sync::atomic::{AtomicUsize, Ordering};

use agx_fwif::messages::{
    FaultUnit, RenderPass, RunFragmentBody, TileProgram, TvbInfo, ZlsSurface, TVB_PAGE_BYTES,
};
use agx_hw::formats::{FragmentFace, FragmentStencil, Layout, Pbe, StencilOp, ZlsControl, ZsFunc};
use zerocopy::FromBytes;

use crate::bind::{self, Binding};
use crate::command::{command_body, refuse_helper, RunContext, Watchdog};
use crate::fault::EngineResult;
use crate::fault::{exec_fault, unsupported};
use crate::memory::read_words;
use crate::memory::GpuVm;
use crate::raster::{plane, rasterize, sample_positions, setup_coefficients};
use crate::shader::{present_lanes, run_stage_group};
use crate::texture::{channel_format, TextureUnit};
use crate::tiler;
use crate::tiler::tvb_info;
use crate::usc::formats::{self, ElementFormat};
use crate::usc::io::{BlockStore, IoError, TextureHandle, TextureRequest, TileAccess};
use crate::usc::{ExecError, GpuMemory, MemoryFault, ProgramCache, ShaderIo, SimdGroup, LANES};
use agx_hw::layout::ImageLayout;

/// The USC control words of a bg/eot program, or a fault at the null
/// address for a missing one.
fn program(
    vm: &GpuVm<'_>,
    usc_exec_base: u64,
    program: TileProgram,
) -> Result<Binding, EngineResult> {
    let offset = u64::from(program.usc & !7);
    if offset == 0 {
        return Err(EngineResult::Fault {
            address: 0,
            unit: FaultUnit::Usc as u32,
            access: 2,
            reason: agx_hw::formats::UatFaultReason::Unmapped.to_raw(),
        });
    }
    bind::bind(vm, usc_exec_base + offset, usc_exec_base)
}

/// One tile's on-chip memory: the colour records, and depth and stencil
/// per sample.
struct Tilebuffer {
    bytes: Vec<u8>,
    depth: Vec<f32>,
    stencil: Vec<u8>,
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
    /// The primitive's coefficient registers: planes (A, B, C) with
    /// value = A x + B y + C at window position (x, y).
    coefficients: &'a [[f32; 3]],
    /// Helper lanes: they run for derivatives, their outputs are dropped.
    helpers: u32,
    /// The texture unit.
    unit: TextureUnit<'b>,
    /// Per pixel of the tile: discarded by the shader (sample_mask with
    /// no coverage, or a failed zs_emit depth test).
    discarded: &'a mut [bool],
    /// Per sample of the tile: the depth to write once the shader is done.
    pending_depth: &'a mut [Option<f32>],
    /// Per pixel of the tile: the samples this program covers.
    coverage: &'a [u32],
    /// The primitive's depth state (for zs_emit).
    face: Option<FragmentFace>,
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

impl TileIo<'_, '_> {
    fn plane(&self, cf: u32) -> Result<[f32; 3], IoError> {
        self.coefficients
            .get(cf as usize)
            .copied()
            .ok_or_else(|| invalid(format!("coefficient register cf{cf} is not bound")))
    }

    /// The lane's pixel centre in window coordinates.
    fn centre(&self, lane: usize) -> (f32, f32) {
        let (x, y) = self.lanes[lane];
        (
            (self.origin.0 + x) as f32 + 0.5,
            (self.origin.1 + y) as f32 + 0.5,
        )
    }
}

impl TileIo<'_, '_> {
    /// The samples lane `lane`'s pixel covers (all for explicit
    /// coordinates).
    fn lane_coverage(&self, lane: usize, access: &TileAccess) -> u32 {
        match (access.explicit, self.pixel_index(lane)) {
            (None, Some(pixel)) => self.coverage.get(pixel).copied().unwrap_or(u32::MAX),
            _ => u32::MAX,
        }
    }

    fn pixel_index(&self, lane: usize) -> Option<usize> {
        let (x, y) = self.lanes[lane];
        (self.helpers & (1 << lane) == 0 && x < self.tile.width_px && y < self.tile.height_px)
            .then(|| (y * self.tile.width_px + x) as usize)
    }
}

impl ShaderIo for TileIo<'_, '_> {
    fn sample_mask(&mut self, lane: usize, which: u32, coverage: u32) -> Result<(), IoError> {
        if self.tile.samples != 1 {
            return Err(invalid("sample masks with multisampling".into()));
        }
        if let Some(pixel) = self.pixel_index(lane) {
            if which & 1 != 0 && coverage & 1 == 0 {
                self.discarded[pixel] = true;
            }
        }
        Ok(())
    }

    fn depth_stencil(
        &mut self,
        lane: usize,
        which: u32,
        depth: Option<f32>,
        stencil: Option<u16>,
    ) -> Result<(), IoError> {
        if stencil.is_some() {
            return Err(invalid("stencil output".into()));
        }
        if self.tile.samples != 1 {
            return Err(invalid("shader depth output with multisampling".into()));
        }
        let Some(pixel) = self.pixel_index(lane) else {
            return Ok(());
        };
        let (Some(depth), true) = (depth, which & 1 != 0) else {
            return Ok(());
        };
        // The depth test happens here, with the shader's depth.
        let depth = depth.clamp(0.0, 1.0);
        let stored = self.tile.depth[pixel * self.tile.samples as usize];
        match self.face {
            Some(face) if !depth_passes(face.depth_function, depth, stored) => {
                self.discarded[pixel] = true;
            }
            Some(face) if !face.disable_depth_write => {
                self.pending_depth[pixel * self.tile.samples as usize] = Some(depth);
            }
            _ => {}
        }
        Ok(())
    }

    fn texture(&mut self, _lane: usize, request: &TextureRequest) -> Result<[u32; 4], IoError> {
        self.unit.request(request)
    }

    fn interpolate(
        &mut self,
        lane: usize,
        cf: u32,
        count: usize,
        interpolation: crate::usc::io::Interpolation,
        perspective_w: Option<u32>,
    ) -> Result<[f32; 4], IoError> {
        if interpolation != crate::usc::io::Interpolation::Center {
            return Err(invalid("sample and centroid interpolation".into()));
        }
        let (x, y) = self.centre(lane);
        let eval = |p: [f32; 3]| p[0].mul_add(x, p[1].mul_add(y, p[2]));
        let w = match perspective_w {
            Some(w_cf) => eval(self.plane(w_cf)?),
            None => 1.0,
        };
        let mut out = [0f32; 4];
        for (i, value) in out.iter_mut().enumerate().take(count.min(4)) {
            *value = eval(self.plane(cf + i as u32)?) / w;
        }
        Ok(out)
    }

    fn coefficients(
        &mut self,
        _lane: usize,
        cf: u32,
        count: usize,
    ) -> Result<[[f32; 3]; 4], IoError> {
        let mut out = [[0f32; 3]; 4];
        for (i, plane) in out.iter_mut().enumerate().take(count.min(4)) {
            *plane = self.plane(cf + i as u32)?;
        }
        Ok(out)
    }

    fn tile_load(&mut self, lane: usize, access: &TileAccess) -> Result<[u32; 4], IoError> {
        if self.helpers & (1 << lane) != 0 && access.explicit.is_none() {
            // A helper outside the tile reads nothing useful.
            if self.pixel(lane, access).is_err() {
                return Ok([0; 4]);
            }
        }
        let (x, y) = self.pixel(lane, access)?;
        let (format, offset) = self.element(access)?;
        // The first sample of the mask (a load reads one sample), among
        // the covered ones if there are any.
        let covered = access.sample_mask & self.lane_coverage(lane, access);
        let mask = if covered != 0 {
            covered
        } else {
            access.sample_mask
        };
        let sample = self.samples(mask).next().unwrap_or(0);
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
        if self.helpers & (1 << lane) != 0 {
            return Ok(());
        }
        if access.explicit.is_none() && self.pixel_index(lane).is_some_and(|p| self.discarded[p]) {
            return Ok(());
        }
        let (x, y) = self.pixel(lane, access)?;
        let (format, offset) = self.element(access)?;
        let samples: Vec<u32> = self
            .samples(access.sample_mask & self.lane_coverage(lane, access))
            .collect();
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
        let pbe = Pbe::decode_fields(&bytes);
        // Block stores write the tilebuffer's encoding: the sRGB bit is
        // for image_write only.
        let (element, channels) = channel_format(pbe.channels, pbe.data_type, false)
            .ok_or_else(|| invalid(format!("PBE format {:?} {:?}", pbe.channels, pbe.data_type)))?;
        if !matches!(pbe.layout, Layout::Linear | Layout::Twiddled) {
            return Err(invalid(format!("{:?} image layout", pbe.layout)));
        }
        // A multisampled tile stores to a multisampled image of the same
        // count, every sample (linear: a pixel's samples side by side).
        // Resolving to a single-sampled image is the shader's job.
        let image_samples = match (pbe.dimension, pbe.samples) {
            (
                agx_hw::formats::TextureDimension::D2Multisampled,
                agx_hw::formats::SampleCount::Two,
            ) => 2,
            (agx_hw::formats::TextureDimension::D2Multisampled, _) => 4,
            _ => 1,
        };
        if image_samples != self.tile.samples {
            return Err(invalid(format!(
                "a {}-sample tile stored to a {image_samples}-sample image",
                self.tile.samples
            )));
        }
        if image_samples > 1 && pbe.layout != Layout::Linear {
            return Err(invalid("twiddled multisampled images".into()));
        }
        let source = ElementFormat::from_code(i64::from(request.format))
            .ok_or_else(|| invalid(format!("tilebuffer format {}", request.format)))?;
        let texel_bytes = if element.packed() {
            4
        } else {
            channels << element.shift()
        };
        // Layered passes store layer n of the tile to layer n of the
        // image.
        let layers = if pbe.layout == Layout::Linear {
            pbe.depth_linear
        } else {
            pbe.layers
        };
        if self.layer >= layers {
            return Err(invalid(format!(
                "layer {} past the image's {layers}",
                self.layer
            )));
        }
        let layout = if pbe.layout == Layout::Linear {
            ImageLayout::Linear {
                stride_bytes: u64::from(pbe.stride),
                element_bytes: texel_bytes as u32 * image_samples,
                layer_stride_bytes: pbe.layer_stride_linear,
            }
        } else {
            ImageLayout::twiddled(
                pbe.width,
                pbe.height,
                pbe.levels,
                layers,
                texel_bytes as u32,
            )
            .ok_or_else(|| invalid(format!("{texel_bytes}-byte twiddled texels")))?
        };
        let level = if pbe.layout == Layout::Linear {
            0
        } else {
            pbe.level
        };
        let offset = request.tilebuffer_offset_bytes as usize;
        let (width, height) = (
            self.area.0.min((pbe.width >> level).max(1)),
            self.area.1.min((pbe.height >> level).max(1)),
        );
        for ty in 0..self.tile.height_px {
            let y = self.origin.1 + ty;
            if y >= height {
                break;
            }
            let mut row = Vec::with_capacity(
                self.tile.width_px as usize * texel_bytes * image_samples as usize,
            );
            let mut count = 0u64;
            for tx in 0..self.tile.width_px {
                let x = self.origin.0 + tx;
                if x >= width {
                    break;
                }
                let mut texel = vec![0u8; texel_bytes * image_samples as usize];
                for sample in 0..image_samples {
                    let record = self.tile.record(tx, ty, sample);
                    let base = sample as usize * texel_bytes;
                    for component in 0..channels {
                        let from = record + channel_offset(source, offset, component);
                        let value =
                            formats::load(source, &self.tile.bytes[from..], component, false);
                        let to = base + channel_offset(element, 0, component);
                        if !formats::store(element, &mut texel[to..], component, value, false) {
                            return Err(invalid(format!("cannot store {element:?}")));
                        }
                    }
                }
                if pbe.layout == Layout::Linear {
                    row.extend_from_slice(&texel);
                    count += 1;
                } else {
                    let at = layout
                        .offset(level, x, y, self.layer)
                        .ok_or_else(|| invalid(format!("pixel ({x}, {y}) past the image")))?;
                    self.vm
                        .write(pbe.buffer + at, &texel)
                        .map_err(IoError::Memory)?;
                }
            }
            if count == 0 {
                continue;
            }
            let address = pbe.buffer
                + layout
                    .offset(0, self.origin.0, y, self.layer)
                    .ok_or_else(|| invalid(format!("row {y} past the image")))?;
            self.vm.write(address, &row).map_err(IoError::Memory)?;
        }
        Ok(())
    }
}

/// Runs a per-tile program with one lane per entry of `pixels`
/// (tile-local coordinates), 32 lanes per SIMD-group.
#[allow(clippy::too_many_arguments)]
fn run_tile_program(
    watchdog: &Watchdog<'_>,
    vm: &GpuVm<'_>,
    cache: &mut ProgramCache,
    binding: &Binding,
    state: TileState<'_>,
    origin: (u32, u32),
    area: (u32, u32),
    layer: u32,
    pixels: &[(u32, u32)],
    coefficients: &[[f32; 3]],
    quads: bool,
    sampler_heap: Option<(u64, u32)>,
) -> Result<(), EngineResult> {
    let TileState {
        tile,
        discarded,
        pending_depth,
        coverage,
        face,
    } = state;
    let mut uniforms = binding.uniforms.clone();
    let mut memory = vm.clone();
    // Lanes come in 2x2 quads (lane bit 0: x, bit 1: y), as the hardware
    // runs fragments, so that texture instructions can take derivatives;
    // quad members that are not covered run as helpers whose outputs are
    // dropped. The end-of-tile program runs once, on `pixels` as given.
    let (order, helpers): (Vec<(u32, u32)>, Vec<bool>) = if quads {
        // Tiles are at most 32 pixels wide: one bit per pixel of a row,
        // and one per quad of a quad row.
        let mut covered = [0u64; 64];
        for &(x, y) in pixels {
            if let Some(row) = covered.get_mut(y as usize) {
                *row |= 1 << (x & 63);
            }
        }
        let mut seen = [0u64; 32];
        let mut order = Vec::with_capacity(pixels.len() + 8);
        let mut helpers = Vec::with_capacity(pixels.len() + 8);
        for &(x, y) in pixels {
            let (qx, qy) = (x / 2, y / 2);
            let Some(quads_row) = seen.get_mut(qy as usize) else {
                continue;
            };
            if *quads_row & (1 << (qx & 63)) != 0 {
                continue;
            }
            *quads_row |= 1 << (qx & 63);
            for (dx, dy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                let (px, py) = (qx * 2 + dx, qy * 2 + dy);
                order.push((px, py));
                let hit = covered
                    .get(py as usize)
                    .is_some_and(|row| px < 64 && row & (1 << px) != 0);
                helpers.push(!hit);
            }
        }
        (order, helpers)
    } else {
        (pixels.to_vec(), vec![false; pixels.len()])
    };
    let unit = TextureUnit {
        vm: vm.clone(),
        textures: &binding.textures,
        samplers: &binding.samplers,
        sampler_heap,
    };
    for (chunk, helper) in order.chunks(LANES).zip(helpers.chunks(LANES)) {
        let mut lanes = [(0u32, 0u32); LANES];
        lanes[..chunk.len()].copy_from_slice(chunk);
        let present = present_lanes(chunk.len());
        let helper_lanes = helper
            .iter()
            .enumerate()
            .fold(0u32, |m, (lane, &h)| if h { m | 1 << lane } else { m });
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
            vm: vm.clone(),
            binding,
            area,
            layer,
            coefficients,
            helpers: helper_lanes,
            unit: unit.clone(),
            discarded: &mut *discarded,
            pending_depth: &mut *pending_depth,
            coverage,
            face,
        };
        run_stage_group(
            &mut group,
            cache,
            &mut memory,
            &mut io,
            &mut uniforms,
            watchdog,
            block_store_fault,
        )?;
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

/// The scene the vertex stage binned: its header and list-head pages.
struct Scene {
    header: tiler::SceneHeader,
    head_pages: Vec<u64>,
}

/// The scene of this pass, or `None` if its vertex half did not finish
/// one (it faulted or timed out: the submission has failed already, and
/// the fragment half renders nothing).
fn read_scene(
    vm: &GpuVm<'_>,
    info: &TvbInfo,
    area: (u32, u32),
) -> Result<Option<Scene>, EngineResult> {
    let alloc = tiler::PageAllocator::new(vm.clone(), info);
    let page = alloc.page(0)?;
    let bytes: [u8; size_of::<tiler::SceneHeader>()] = read_words(vm, page)?;
    let header = tiler::SceneHeader::read_from_bytes(&bytes)
        .map_err(|_| unsupported(page, FaultUnit::Tiler))?;
    if (header.tiles_x, header.tiles_y)
        != (
            area.0.div_ceil(tiler::TILE_PX),
            area.1.div_ceil(tiler::TILE_PX),
        )
    {
        return Ok(None);
    }
    // The scene lives in GPU-writable memory: a shader can corrupt it, so
    // nothing read from it is trusted.
    if header.varyings as usize > tiler::MAX_OUTPUTS
        || header.state_count as usize > tiler::MAX_STATES
    {
        return Err(unsupported(page, FaultUnit::Tiler));
    }
    let tiles = u64::from(header.tiles_x) * u64::from(header.tiles_y);
    let pages = tiles.div_ceil(tiler::TVB_HEADS_PER_PAGE);
    let mut head_pages = Vec::new();
    for i in 0..pages {
        let at = page + size_of::<tiler::SceneHeader>() as u64 + 8 * i;
        head_pages.push(u64::from_le_bytes(read_words(vm, at)?));
    }
    Ok(Some(Scene { header, head_pages }))
}

/// The primitives binned to a tile, in draw order.
fn tile_primitives(vm: &GpuVm<'_>, scene: &Scene, tile: u64) -> Result<Vec<u64>, EngineResult> {
    let page = scene.head_pages[(tile / tiler::TVB_HEADS_PER_PAGE) as usize];
    let mut chunk = u64::from_le_bytes(read_words(
        vm,
        page + 8 * (tile % tiler::TVB_HEADS_PER_PAGE),
    )?);
    let mut out = Vec::new();
    let mut guard = 0u64;
    while chunk != 0 {
        let bytes: [u8; tiler::CHUNK_BYTES as usize] = read_words(vm, chunk)?;
        let next = u64::from_le_bytes(bytes[0..8].try_into().unwrap_or_default());
        let count = u32::from_le_bytes(bytes[8..12].try_into().unwrap_or_default()) as usize;
        for i in 0..count.min(tiler::CHUNK_PRIMITIVES) {
            let at = 16 + 8 * i;
            out.push(u64::from_le_bytes(
                bytes[at..at + 8].try_into().unwrap_or_default(),
            ));
        }
        chunk = next;
        guard += 1;
        // More chunks than the scene's pages hold is a corrupt (cyclic)
        // list: the GPU's own data was overwritten.
        if guard > u64::from(scene.header.pages_used) * (TVB_PAGE_BYTES / tiler::CHUNK_BYTES) {
            return Err(unsupported(chunk, FaultUnit::Tiler));
        }
    }
    Ok(out)
}

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
    refuse_helper(&body.helper, body.usc_exec_base.get())?;
    let Some(root) = ctx.ttb0 else {
        return Err(unsupported(ctx.command, FaultUnit::Firmware));
    };
    let vm = ctx.vm(root);
    let info = tvb_info(ctx, body.buffer)?;
    render_scene(
        ctx,
        vm,
        body.usc_exec_base.get(),
        &body.pass,
        &info,
        true,
        workers,
    )
}

/// Renders the scene binned so far: every tile, through the programs of
/// the segment: `bg` for the first segment of the pass and `partial_bg`
/// for one resumed after a partial render, `eot` for the last segment and
/// `partial_eot` for one ended by a partial render. Tiles are independent
/// and run on `workers` host threads; when several fail, the
/// lowest-numbered tile's failure is reported, whatever the thread count.
pub(crate) fn render_scene(
    ctx: &RunContext<'_>,
    vm: GpuVm<'_>,
    usc_exec_base: u64,
    render: &RenderPass,
    info: &TvbInfo,
    last: bool,
    workers: usize,
) -> Result<(), EngineResult> {
    let area = (render.width_px, render.height_px);
    let (Ok(samples), Ok(sample_bytes)) = (
        u8::try_from(render.samples),
        u8::try_from(render.sample_size_bytes),
    ) else {
        return Err(unsupported(ctx.command, FaultUnit::Firmware));
    };
    // Tile sizes and sample counts the hardware has; anything else is a
    // pass the kmd should not have built.
    let tile_ok = |px: u32| px == 16 || px == 32;
    if !tile_ok(render.utile_width_px)
        || !tile_ok(render.utile_height_px)
        || !matches!(samples, 1 | 2 | 4)
    {
        return Err(unsupported(ctx.command, FaultUnit::Firmware));
    }
    let Some(scene) = read_scene(&vm, info, area)? else {
        tracing::debug!("no scene: the vertex half did not finish");
        return Ok(());
    };
    let resumed = scene.header.segment > 0;
    let pass = Pass {
        usc_exec_base,
        render,
        scene,
        bg: program(
            &vm,
            usc_exec_base,
            if resumed {
                render.partial_bg
            } else {
                render.bg
            },
        )?,
        eot: program(
            &vm,
            usc_exec_base,
            if last { render.eot } else { render.partial_eot },
        )?,
        tile: (render.utile_width_px, render.utile_height_px),
        area,
        zls: ZlsControl::unpack(&render.zls.ctrl.to_le_bytes()).value,
        heap: (!render.sampler_heap.is_null())
            .then_some((render.sampler_heap.get(), render.sampler_count)),
        process_empty: render.process_empty_tiles(),
        watchdog: ctx.watchdog(),
        sample_positions: sample_positions(samples, render.ppp_multisamplectl),
    };
    if pass.tile != (tiler::TILE_PX, tiler::TILE_PX) && pass.scene.header.primitives > 0 {
        return Err(unsupported(ctx.command, FaultUnit::Firmware));
    }
    let tiles: Vec<(u32, u32, u32)> = (0..render.layers)
        .flat_map(|layer| {
            (0..area.1.div_ceil(pass.tile.1)).flat_map(move |ty| {
                (0..area.0.div_ceil(pass.tile.0)).map(move |tx| (layer, tx, ty))
            })
        })
        .collect();
    let next = AtomicUsize::new(0);
    let first_failure = AtomicUsize::new(usize::MAX);
    let failures = std::sync::Mutex::new(Vec::<(usize, EngineResult)>::new());
    let work = || {
        let mut worker = Worker {
            cache: ProgramCache::new(),
            shaders: std::collections::HashMap::new(),
            tile: Tilebuffer::new(pass.tile, samples, sample_bytes),
            discarded: Vec::new(),
            pending: Vec::new(),
            pending_stencil: Vec::new(),
            coverage: Vec::new(),
        };
        loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            if index >= tiles.len() || index > first_failure.load(Ordering::Relaxed) {
                break;
            }
            if let Err(failure) = pass.render_tile(vm.clone(), &mut worker, tiles[index]) {
                first_failure.fetch_min(index, Ordering::Relaxed);
                failures
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((index, failure));
            }
        }
    };
    if workers <= 1 || tiles.len() <= 1 {
        work();
    } else {
        std::thread::scope(|scope| {
            for _ in 0..workers.min(tiles.len()) {
                scope.spawn(work);
            }
        });
    }
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    match failures.into_iter().min_by_key(|(index, _)| *index) {
        Some((_, failure)) => Err(failure),
        None => Ok(()),
    }
}

/// What every tile of a segment shares.
struct Pass<'a> {
    usc_exec_base: u64,
    render: &'a RenderPass,
    scene: Scene,
    bg: Binding,
    eot: Binding,
    tile: (u32, u32),
    area: (u32, u32),
    zls: ZlsControl,
    heap: Option<(u64, u32)>,
    process_empty: bool,
    watchdog: Watchdog<'a>,
    /// Sample positions in 1/256 pixel from the pixel's corner.
    sample_positions: Vec<(i64, i64)>,
}

/// One worker's tile memory and caches.
struct Worker {
    cache: ProgramCache,
    /// Fragment shaders by state: binding, PPP state, writes depth.
    shaders: std::collections::HashMap<u32, std::sync::Arc<(Binding, tiler::PppState, bool)>>,
    tile: Tilebuffer,
    /// Per pixel of the tile, for the primitive being shaded.
    discarded: Vec<bool>,
    /// Per sample of the tile: the depth to write once the shader is done.
    pending: Vec<Option<f32>>,
    pending_stencil: Vec<Option<u8>>,
    /// Per pixel of the tile: the samples the program being run covers.
    coverage: Vec<u32>,
}

/// The tile state a per-tile program works on.
struct TileState<'a> {
    tile: &'a mut Tilebuffer,
    discarded: &'a mut [bool],
    pending_depth: &'a mut [Option<f32>],
    coverage: &'a [u32],
    face: Option<FragmentFace>,
}

impl Tilebuffer {
    fn new(tile: (u32, u32), samples: u8, sample_bytes: u8) -> Tilebuffer {
        let pixels = tile.0 * tile.1 * u32::from(samples);
        Tilebuffer {
            bytes: vec![0; (pixels * u32::from(sample_bytes)) as usize],
            depth: vec![0.0; pixels as usize],
            stencil: vec![0; pixels as usize],
            width_px: tile.0,
            height_px: tile.1,
            samples: u32::from(samples),
            sample_bytes: u32::from(sample_bytes),
        }
    }
}

impl Pass<'_> {
    /// One tile: depth/stencil in, bg, the tile's primitives, depth/stencil
    /// out, eot.
    fn render_tile(
        &self,
        vm: GpuVm<'_>,
        w: &mut Worker,
        (layer, tx, ty): (u32, u32, u32),
    ) -> Result<(), EngineResult> {
        if self.watchdog.expired() {
            return Err(EngineResult::Timeout);
        }
        let render = self.render;
        let scene = &self.scene;
        let (tile_w, tile_h) = self.tile;
        let area = self.area;
        let primitives = if layer == 0 {
            let index = u64::from(ty) * u64::from(scene.header.tiles_x) + u64::from(tx);
            tile_primitives(&vm, scene, index)?
        } else {
            Vec::new()
        };
        if primitives.is_empty() && !self.process_empty {
            return Ok(());
        }
        let origin = (tx * tile_w, ty * tile_h);
        let tile = &mut w.tile;
        tile.bytes.fill(0);
        load_depth_stencil(&vm, render, &self.zls, tile, (tx, ty), layer)?;
        let all: Vec<(u32, u32)> = (0..tile_h)
            .flat_map(|y| (0..tile_w).map(move |x| (x, y)))
            .filter(|&(x, y)| origin.0 + x < area.0 && origin.1 + y < area.1)
            .collect();
        let run = |w: &mut Worker,
                   binding: &Binding,
                   pixels: &[(u32, u32)],
                   coefficients: &[[f32; 3]],
                   quads: bool,
                   face: Option<FragmentFace>| {
            run_tile_program(
                &self.watchdog,
                &vm,
                &mut w.cache,
                binding,
                TileState {
                    tile: &mut w.tile,
                    discarded: &mut w.discarded,
                    pending_depth: &mut w.pending,
                    coverage: &w.coverage,
                    face,
                },
                origin,
                area,
                layer,
                pixels,
                coefficients,
                quads,
                self.heap,
            )
        };
        let pixel_count = (tile_w * tile_h) as usize;
        let samples = w.tile.samples as usize;
        let full = (1u32 << samples) - 1;
        w.discarded.clear();
        w.discarded.resize(pixel_count, false);
        w.pending.clear();
        w.pending.resize(pixel_count * samples, None);
        w.pending_stencil.clear();
        w.pending_stencil.resize(pixel_count, None);
        w.coverage.clear();
        w.coverage.resize(pixel_count, full);
        run(w, &self.bg, &all, &[], true, None)?;
        // The background program does not discard.
        w.discarded.fill(false);
        let record_floats = 4 + scene.header.varyings as usize;
        for primitive in primitives {
            let mut bytes = vec![0u8; 8 + 12 * record_floats];
            vm.read(primitive, &mut bytes)
                .map_err(|f| EngineResult::from_uat(&f, FaultUnit::Tiler))?;
            let state = u32::from_le_bytes(bytes[0..4].try_into().unwrap_or_default());
            let back_facing = bytes[4] & 1 != 0;
            let float = |i: usize| {
                let at = 8 + 4 * i;
                f32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default())
            };
            let positions: [[f32; 2]; 3] =
                std::array::from_fn(|v| [float(v * record_floats), float(v * record_floats + 1)]);
            let rasterized = rasterize(
                positions,
                origin,
                (tile_w, tile_h),
                area,
                &self.sample_positions,
            );
            if rasterized.is_empty() {
                continue;
            }
            for &((x, y), mask) in &rasterized {
                w.coverage[(y * tile_w + x) as usize] = mask;
            }
            let mut covered: Vec<(u32, u32)> = rasterized.iter().map(|&(p, _)| p).collect();
            if let std::collections::hash_map::Entry::Vacant(e) = w.shaders.entry(state) {
                let (binding, ppp) = fragment_shader(&vm, self.usc_exec_base, scene, state)?;
                let depth = writes_depth(&vm, binding.code);
                e.insert(std::sync::Arc::new((binding, ppp, depth)));
            }
            let Some(entry) = w.shaders.get(&state).cloned() else {
                continue;
            };
            let (shader, ppp, shader_writes_depth) = &*entry;
            let vertices: [Vec<f32>; 3] = std::array::from_fn(|v| {
                (0..record_floats)
                    .map(|i| float(v * record_floats + i))
                    .collect()
            });
            let face = if back_facing {
                ppp.back_face.or(ppp.front_face)
            } else {
                ppp.front_face
            };
            let stencil = ppp
                .fragment_control
                .is_some_and(|c| c.stencil_test_enable)
                .then(|| {
                    if back_facing && ppp.fragment_control.is_some_and(|c| c.two_sided_stencil) {
                        ppp.back_stencil.or(ppp.front_stencil)
                    } else {
                        ppp.front_stencil
                    }
                })
                .flatten();
            // Not modelled: stencil with a shader depth output, and
            // shader depth output or stencil with multisampling.
            if (*shader_writes_depth && stencil.is_some())
                || (samples > 1 && (*shader_writes_depth || stencil.is_some()))
            {
                return Err(unsupported(scene.header.states, FaultUnit::Usc));
            }
            if !shader_writes_depth {
                let mut pending = std::mem::take(&mut w.pending);
                let mut pending_stencil = std::mem::take(&mut w.pending_stencil);
                depth_test(
                    &mut w.tile,
                    &mut covered,
                    &mut w.coverage,
                    &mut pending,
                    &mut pending_stencil,
                    origin,
                    &self.sample_positions,
                    &vertices,
                    face,
                    stencil,
                );
                w.pending = pending;
                w.pending_stencil = pending_stencil;
                if covered.is_empty() {
                    continue;
                }
            }
            let coefficients = setup_coefficients(&vm, self.usc_exec_base, ppp, &vertices)?;
            run(w, shader, &covered, &coefficients, true, face)?;
            // Depth of the pixels the shader kept; then the per-pixel
            // state is clean again for the next primitive.
            for &(x, y) in &covered {
                let pixel = (y * tile_w + x) as usize;
                let at = pixel * samples;
                let mask = w.coverage[pixel];
                for s in (0..samples).filter(|s| mask & (1 << s) != 0) {
                    if let (Some(depth), false) = (w.pending[at + s], w.discarded[pixel]) {
                        w.tile.depth[at + s] = depth;
                    }
                }
                if let (Some(value), false) = (w.pending_stencil[pixel], w.discarded[pixel]) {
                    w.tile.stencil[at..at + samples].fill(value);
                }
                w.pending[at..at + samples].fill(None);
                w.pending_stencil[pixel] = None;
                w.discarded[pixel] = false;
            }
        }
        store_depth_stencil(&vm, render, &self.zls, &w.tile, (tx, ty), layer, area)?;
        w.coverage.fill(full);
        run(w, &self.eot, &[(0, 0); LANES], &[], false, None)
    }
}

/// The fragment shader a primitive's state names, and that state.
fn fragment_shader(
    vm: &GpuVm<'_>,
    usc_exec_base: u64,
    scene: &Scene,
    state: u32,
) -> Result<(Binding, tiler::PppState), EngineResult> {
    if state >= scene.header.state_count {
        return Err(unsupported(scene.header.states, FaultUnit::Tiler));
    }
    let at = scene.header.states + u64::from(state) * size_of::<tiler::FragmentState>() as u64;
    let bytes: [u8; size_of::<tiler::FragmentState>()] = read_words(vm, at)?;
    let fragment_state = tiler::FragmentState::read_from_bytes(&bytes)
        .map_err(|_| unsupported(at, FaultUnit::Tiler))?;
    let ppp = tiler::parse_ppp(vm, fragment_state.ppp)?;
    // State this model does not apply is refused, not ignored.
    if ppp
        .fragment_control
        .is_some_and(|c| c.scissor_enable || c.depth_bias_enable)
    {
        return Err(unsupported(fragment_state.ppp, FaultUnit::Vdm));
    }
    let Some(pipeline) = ppp.fragment_pipeline else {
        return Err(unsupported(fragment_state.ppp, FaultUnit::Vdm));
    };
    let binding = bind::bind(vm, usc_exec_base.wrapping_add(pipeline), usc_exec_base)?;
    Ok((binding, ppp))
}

/// Bytes of one tile's depth in a depth buffer (32-bit depth).
fn depth_tile_bytes(tile: &Tilebuffer) -> u64 {
    u64::from(tile.width_px * tile.height_px * tile.samples) * 4
}

/// Where tile (tx, ty) of `layer` starts in the depth buffer. The
/// depth/stencil buffer layout is this model's (the hardware's twiddled
/// and compressed layouts are not modelled): whole tiles of 32-bit depth
/// (or 8-bit stencil), tiles in row-major order, pixels row-major within
/// a tile, samples interleaved; layers `stride` bytes apart.
fn zls_tile(
    surface: &ZlsSurface,
    render: &RenderPass,
    tile: (u32, u32),
    layer: u32,
    bytes: u64,
) -> u64 {
    let tiles_x = u64::from(render.width_px.div_ceil(render.utile_width_px.max(1)));
    surface
        .base
        .get()
        .wrapping_add(u64::from(layer).wrapping_mul(u64::from(surface.stride_bytes)))
        .wrapping_add((u64::from(tile.1) * tiles_x + u64::from(tile.0)).wrapping_mul(bytes))
}

/// Starts a tile's depth and stencil: loaded from the buffers when the
/// ZLS control says so, else the pass's clear values.
fn load_depth_stencil(
    vm: &GpuVm<'_>,
    render: &RenderPass,
    zls: &ZlsControl,
    tile: &mut Tilebuffer,
    at: (u32, u32),
    layer: u32,
) -> Result<(), EngineResult> {
    if zls.z_load_enable {
        let bytes = depth_tile_bytes(tile);
        let mut raw = vec![0u8; bytes as usize];
        vm.read(
            zls_tile(&render.zls.z_load, render, at, layer, bytes),
            &mut raw,
        )
        .map_err(|f| EngineResult::from_uat(&f, FaultUnit::Zls))?;
        for (d, b) in tile.depth.iter_mut().zip(raw.chunks_exact(4)) {
            *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
    } else {
        tile.depth.fill(f32::from_bits(render.zls.clear_depth));
    }
    if zls.s_load_enable {
        let bytes = depth_tile_bytes(tile) / 4;
        let mut raw = vec![0u8; bytes as usize];
        vm.read(
            zls_tile(&render.zls.s_load, render, at, layer, bytes),
            &mut raw,
        )
        .map_err(|f| EngineResult::from_uat(&f, FaultUnit::Zls))?;
        tile.stencil.copy_from_slice(&raw);
    } else {
        tile.stencil.fill(render.zls.clear_stencil as u8);
    }
    Ok(())
}

/// Ends a tile's depth and stencil: stored when the ZLS control says so.
fn store_depth_stencil(
    vm: &GpuVm<'_>,
    render: &RenderPass,
    zls: &ZlsControl,
    tile: &Tilebuffer,
    at: (u32, u32),
    layer: u32,
    _area: (u32, u32),
) -> Result<(), EngineResult> {
    let mut writer = vm.clone();
    let fault = |f: MemoryFault| EngineResult::Fault {
        address: f.address,
        unit: FaultUnit::Zls as u32,
        access: 1,
        reason: agx_hw::formats::UatFaultReason::Unmapped.to_raw(),
    };
    if zls.z_store_enable {
        let bytes: Vec<u8> = tile.depth.iter().flat_map(|d| d.to_le_bytes()).collect();
        let address = zls_tile(&render.zls.z_store, render, at, layer, bytes.len() as u64);
        writer.write(address, &bytes).map_err(fault)?;
    }
    if zls.s_store_enable {
        let address = zls_tile(
            &render.zls.s_store,
            render,
            at,
            layer,
            tile.stencil.len() as u64,
        );
        writer.write(address, &tile.stencil).map_err(fault)?;
    }
    Ok(())
}

/// A stencil operation on `value`, writing only the bits of `write_mask`.
fn stencil_op(op: StencilOp, value: u8, reference: u8, write_mask: u8) -> u8 {
    let new = match op {
        StencilOp::Zero => 0,
        StencilOp::Replace => reference,
        StencilOp::IncrSat => value.saturating_add(1),
        StencilOp::DecrSat => value.saturating_sub(1),
        StencilOp::Invert => !value,
        StencilOp::IncrWrap => value.wrapping_add(1),
        StencilOp::DecrWrap => value.wrapping_sub(1),
        StencilOp::Keep | StencilOp::Unknown(_) => value,
    };
    (value & !write_mask) | (new & write_mask)
}

/// Whether `depth` passes `function` against the stored depth.
fn depth_passes(function: ZsFunc, depth: f32, stored: f32) -> bool {
    match function {
        ZsFunc::Never => false,
        ZsFunc::Less => depth < stored,
        ZsFunc::Equal => depth == stored,
        ZsFunc::Lequal => depth <= stored,
        ZsFunc::Greater => depth > stored,
        ZsFunc::NotEqual => depth != stored,
        ZsFunc::Gequal => depth >= stored,
        ZsFunc::Always | ZsFunc::Unknown(_) => true,
    }
}

/// The early depth test: keeps the covered pixels whose interpolated
/// depth passes the face's depth function against the tile's depth, and
/// notes the depth each will write (unless the face disables depth
/// writes) once the shader has run and not discarded it. Without depth
/// state every pixel passes and nothing is written.
#[allow(clippy::too_many_arguments)]
fn depth_test(
    tile: &mut Tilebuffer,
    covered: &mut Vec<(u32, u32)>,
    coverage: &mut [u32],
    pending: &mut [Option<f32>],
    pending_stencil: &mut [Option<u8>],
    origin: (u32, u32),
    sample_positions: &[(i64, i64)],
    vertices: &[Vec<f32>; 3],
    face: Option<FragmentFace>,
    stencil: Option<FragmentStencil>,
) {
    let Some(face) = face else {
        return;
    };
    let z = plane(std::array::from_fn(|v| {
        (
            f64::from(vertices[v][0]),
            f64::from(vertices[v][1]),
            f64::from(vertices[v][2]),
        )
    }));
    let reference = face.stencil_reference as u8;
    let samples = tile.samples as usize;
    covered.retain(|&(x, y)| {
        let pixel = (y * tile.width_px + x) as usize;
        let first = pixel * samples;
        if let Some(s) = stencil {
            // Stencil is per pixel (single-sampled passes only).
            let stored = tile.stencil[first];
            let mask = s.read_mask as u8;
            if !depth_passes(
                s.compare,
                f32::from(reference & mask),
                f32::from(stored & mask),
            ) {
                // Rejected: the stencil-fail operation applies now.
                let value = stencil_op(s.stencil_fail, stored, reference, s.write_mask as u8);
                tile.stencil[first..first + samples].fill(value);
                return false;
            }
        }
        // Depth per covered sample, at the sample's position.
        let mut passed = 0u32;
        for (s, &(sx, sy)) in sample_positions.iter().enumerate().take(samples) {
            if coverage[pixel] & (1 << s) == 0 {
                continue;
            }
            let cx = (origin.0 + x) as f32 + sx as f32 / 256.0;
            let cy = (origin.1 + y) as f32 + sy as f32 / 256.0;
            let depth = z[0].mul_add(cx, z[1].mul_add(cy, z[2])).clamp(0.0, 1.0);
            if depth_passes(face.depth_function, depth, tile.depth[first + s]) {
                passed |= 1 << s;
                if !face.disable_depth_write {
                    pending[first + s] = Some(depth);
                }
            }
        }
        if let Some(s) = stencil {
            let stored = tile.stencil[first];
            let pass = passed != 0;
            let op = if pass { s.depth_pass } else { s.depth_fail };
            let value = stencil_op(op, stored, reference, s.write_mask as u8);
            if pass {
                pending_stencil[pixel] = Some(value);
            } else {
                tile.stencil[first..first + samples].fill(value);
            }
        }
        coverage[pixel] = passed;
        passed != 0
    });
}

/// Whether a program writes depth (`zs_emit`): its depth test then runs
/// when the shader emits depth, not before the shader.
fn writes_depth(vm: &GpuVm<'_>, code: u64) -> bool {
    let mut pc = code;
    for _ in 0..4096 {
        let mut bytes = [0u8; 16];
        if vm.read(pc, &mut bytes).is_err() {
            return false;
        }
        let Ok(decoded) = agx_hw::isa::decode(&bytes) else {
            return false;
        };
        match decoded.instr.op {
            agx_hw::isa::Op::ZsEmit => return true,
            agx_hw::isa::Op::Stop => return false,
            _ => pc += decoded.length_bytes as u64,
        }
    }
    false
}
