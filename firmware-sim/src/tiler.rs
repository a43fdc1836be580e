//! Vertex shading and tiling: what RunVertex does with a draw.
//!
//! The VDM carries state (the vertex shader's pipeline and output count,
//! and PPP state updates: viewport, culling, fragment shader and
//! depth/stencil state, each update replacing the records it names) and
//! draws. For a draw, the vertex shader runs once
//! per vertex, 32 vertices per SIMD-group, with the vertex index in `r5`
//! and the instance index in `r6`; its `st_var` outputs are the vertex's
//! 32-bit output slots, the first four being the clip-space position
//! (x, y, z, w). Vertices are assembled into triangles (lists, strips,
//! fans), clipped against the near plane (z >= 0, w > 0), projected,
//! mapped through the viewport, culled by facing, and *binned*: each
//! primitive's screen-space vertices go into the parameter buffer and its
//! index into the list of every 32x32-pixel tile its bounding box touches.
//! The fragment stage reads those lists back tile by tile.
//!
//! The parameter buffer layout is this model's own (real hardware's is
//! undocumented); it lives entirely in the TVB pages the kmd provides,
//! written and read through the MMU:
//!
//! - page 0 of the page list holds the scene header ([`SceneHeader`]),
//!   then the addresses of the pages holding the per-tile list heads;
//! - a list head is the address of the tile's first chunk (0: empty);
//! - a chunk ([`CHUNK_BYTES`]) holds the next chunk's address, a count and
//!   up to [`CHUNK_PRIMITIVES`] primitive addresses;
//! - a primitive record holds the primitive's state index and flags (bit
//!   0: back-facing, bits 8 and up: the varyings per vertex), then per
//!   vertex x, y (pixels), z, 1/w and the varying slots;
//! - the fragment-state table in page 0 and the copies of the accumulated
//!   PPP state it points to, one per state a segment's triangles use.
//!
//! Pages are taken in page-list order; running out is an overflow: the
//! firmware asks the kmd to grow the buffer (GrowTVB) or, if it will not,
//! does a partial render and starts again from an empty buffer.

use agx_fwif::messages::{FaultUnit, TvbInfo, TVB_PAGE_BYTES};
use agx_hw::addr::FwVa;
use agx_hw::formats::{
    CfBinding, CfBindingHeader, CoefficientSource, Cull, DepthBiasScissor, FragmentControl,
    FragmentFace, FragmentStencil, IndexListBlock, IndexSize, ObjectType, PolygonMode, PppRecords,
    Primitive, ShadeModel, VdmStateWords, Viewport,
};
use agx_hw::isa::Reg;
use zerocopy::{FromBytes, IntoBytes};

use crate::bind::{self, Binding};
use crate::command::{RunContext, Watchdog};
use crate::fault::EngineResult;
use crate::fault::{exec_fault, unsupported};
use crate::helper::StageHelper;
use crate::memory::GpuVm;
use crate::memory::{read_sequence, read_words};
use crate::shader::present_lanes;
use crate::texture::{DecodedImages, TextureUnit};
use crate::usc::io::{ImageWrite, IoError, TextureRequest};
use crate::usc::{GpuMemory, ProgramCache, ShaderIo, SimdGroup, LANES};

/// Pixels per tile side.
pub const TILE_PX: u32 = 32;
/// Bytes of a list chunk.
pub const CHUNK_BYTES: u64 = 64;
/// Primitive addresses per chunk.
pub const CHUNK_PRIMITIVES: usize = 6;
/// List heads per head page.
pub const TVB_HEADS_PER_PAGE: u64 = TVB_PAGE_BYTES / 8;
const HEADS_PER_PAGE: u64 = TVB_HEADS_PER_PAGE;
/// The most vertex output slots: 256, as many as a `st_vary` slot index
/// names, one more than the VDM's 8-bit output count can hold. Mesa's
/// asahi driver gives an API vertex shader 24 vec4 outputs, the position
/// among them, and adds the point size, the layer-and-viewport word and
/// 8 clip distances (106 at most); the rasterisation shaders it builds
/// for geometry shaders write more (slot 128 and up). The hardware's own
/// limit is not public.
pub const MAX_OUTPUTS: usize = 256;
/// The most varyings a vertex carries (the outputs after the position).
pub const MAX_VARYINGS: usize = MAX_OUTPUTS - 4;
/// Where a primitive record's flags word holds the count of 32-bit
/// values per vertex after its position: its varyings, then the extras
/// the flags below name.
pub const RECORD_VARYINGS_SHIFT: u32 = 8;
/// Record flag: the primitive faces away from the viewer.
pub const RECORD_BACK_FACING: u32 = 1;
/// The mask of a record's varying count (above `RECORD_VARYINGS_SHIFT`).
pub const RECORD_VARYINGS_MASK: u32 = 0xFF;
/// Where a primitive record's flags word holds the layer the primitive
/// is drawn to (12 bits, `RECORD_LAYER_MASK`: the vertex shader's layer
/// output, 0 without; Mesa's asahi driver allows 2048 layers).
pub const RECORD_LAYER_SHIFT: u32 = 16;
/// The mask of a record's layer (above `RECORD_LAYER_SHIFT`).
pub const RECORD_LAYER_MASK: u32 = 0xFFF;
/// Where a primitive record's flags word holds the viewport (and
/// scissor) the primitive is drawn through (4 bits: 16 viewports).
pub const RECORD_VIEWPORT_SHIFT: u32 = 28;
/// Record flag: a point sprite; two extras, the point coordinate (s, t)
/// at each vertex.
pub const RECORD_POINT_SPRITE: u32 = 1 << 1;
/// Record flag: one extra, the primitive's id (u32 bits), after the
/// point coordinate if there is one.
pub const RECORD_PRIMITIVE_ID: u32 = 1 << 2;
/// The most values a record's vertex carries after its position: every
/// varying and every extra.
pub const MAX_RECORD_VALUES: usize = MAX_VARYINGS + 3;

/// The scene header at the start of the parameter buffer's first page.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, zerocopy::Immutable)]
#[repr(C)]
pub struct SceneHeader {
    /// Tiles across.
    pub tiles_x: u32,
    /// Tiles down.
    pub tiles_y: u32,
    /// Primitives binned.
    pub primitives: u32,
    /// MBZ (each primitive record carries its own varying count).
    pub reserved: u32,
    /// Pages used.
    pub pages_used: u32,
    /// Number of fragment states in `states`.
    pub state_count: u32,
    /// Address of the fragment states: [`FragmentState`] records.
    pub states: u64,
    /// Segments of this pass rendered before this one (partial renders).
    pub segment: u32,
    /// MBZ.
    pub pad: u32,
}

/// The fragment-side state a primitive was drawn with (from the PPP
/// state at the time of its draw).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, zerocopy::Immutable)]
#[repr(C)]
pub struct FragmentState {
    /// Address of the PPP state record.
    pub ppp: u64,
    /// Its size in bytes.
    pub ppp_bytes: u32,
    /// MBZ.
    pub pad: u32,
}

/// Allocates parameter-buffer space, page by page.
pub struct PageAllocator<'a> {
    vm: GpuVm<'a>,
    page_list: u64,
    page_count: u64,
    next_page: u64,
    /// The current page and the bytes used in it.
    current: Option<(u64, u64)>,
}

/// The parameter buffer ran out of pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow;

impl<'a> PageAllocator<'a> {
    /// The allocator over the pages of `info`.
    pub fn new(vm: GpuVm<'a>, info: &TvbInfo) -> PageAllocator<'a> {
        PageAllocator {
            vm,
            page_list: info.page_list.get(),
            page_count: u64::from(info.block_count) * agx_fwif::messages::TVB_BLOCK_PAGES,
            next_page: 0,
            current: None,
        }
    }

    /// Pages in the buffer.
    pub fn page_count(&self) -> u64 {
        self.page_count
    }

    /// The address of page `index` of the page list.
    pub fn page(&self, index: u64) -> Result<u64, EngineResult> {
        if index >= self.page_count {
            return Err(unsupported(
                self.page_list,
                FaultUnit::Tiler,
                format_args!(
                    "page {index} of a parameter buffer of {} pages",
                    self.page_count
                ),
            ));
        }
        let entry: [u8; 4] = read_words(&self.vm, self.page_list + 4 * index).map_err(|_| {
            unsupported(
                self.page_list + 4 * index,
                FaultUnit::Tiler,
                format_args!("an unreadable page-list entry for parameter-buffer page {index}"),
            )
        })?;
        Ok(u64::from(u32::from_le_bytes(entry)) * TVB_PAGE_BYTES)
    }

    /// A whole fresh page.
    pub fn take_page(&mut self) -> Result<Result<u64, Overflow>, EngineResult> {
        if self.next_page >= self.page_count {
            return Ok(Err(Overflow));
        }
        let page = self.page(self.next_page)?;
        self.next_page += 1;
        Ok(Ok(page))
    }

    /// `bytes` (at most a page), 8-byte aligned, within one page.
    pub fn alloc(&mut self, bytes: u64) -> Result<Result<u64, Overflow>, EngineResult> {
        let bytes = bytes.next_multiple_of(8);
        if let Some((page, used)) = self.current {
            if used + bytes <= TVB_PAGE_BYTES {
                self.current = Some((page, used + bytes));
                return Ok(Ok(page + used));
            }
        }
        match self.take_page()? {
            Ok(page) => {
                self.current = Some((page, bytes));
                Ok(Ok(page))
            }
            Err(overflow) => Ok(Err(overflow)),
        }
    }

    /// Pages handed out.
    pub fn pages_used(&self) -> u64 {
        self.next_page
    }
}

/// The vertex shader's outputs, per lane, its texture unit, and its
/// binding (for image writes: Mesa's vertex, geometry and tessellation
/// shaders store to images).
struct VertexIo<'a> {
    /// The outputs of the SIMD-group's vertices, lane by lane, `stride`
    /// words each.
    outputs: &'a mut [u32],
    /// The words kept of each vertex's outputs: those the PPP reads (the
    /// VDM state's output count). A store to a slot past them, but below
    /// [`MAX_OUTPUTS`], is dropped: nothing reads it.
    stride: usize,
    unit: TextureUnit<'a>,
    binding: &'a Binding,
    /// The descriptor image writes last went through.
    image_writes: crate::imageblock::ImageWriteTarget,
}

impl ShaderIo for VertexIo<'_> {
    fn texture(
        &mut self,
        requests: &[Option<TextureRequest>; LANES],
        texels: &mut [[u32; 4]; LANES],
    ) -> Result<(), IoError> {
        self.unit.serve(requests, texels)
    }

    fn texel_loads(
        &mut self,
        loads: &crate::usc::io::TexelLoads<'_>,
        texels: &mut [[u32; 4]; LANES],
    ) -> Result<(), IoError> {
        self.unit.serve_loads(loads, texels)
    }

    fn texture_samples(
        &mut self,
        samples: &crate::usc::io::TextureSamples<'_>,
        texels: &mut [[u32; 4]; LANES],
    ) -> Result<(), IoError> {
        self.unit.serve_samples(samples, texels)
    }

    fn store_varying(&mut self, lane: usize, slot: u32, value: u32) -> Result<(), IoError> {
        let slot = slot as usize;
        if slot >= MAX_OUTPUTS {
            return Err(IoError::Invalid(format!("output slot {slot}")));
        }
        if slot < self.stride {
            if let Some(out) = self.outputs.get_mut(lane * self.stride + slot) {
                *out = value;
            }
        }
        Ok(())
    }

    fn image_write(&mut self, _lane: usize, request: &ImageWrite) -> Result<(), IoError> {
        crate::imageblock::store_texel(
            &mut self.unit.vm,
            self.binding,
            request,
            &mut self.image_writes,
        )
    }
}

/// What the VDM state says about the vertex stage.
#[derive(Debug, Clone, Default)]
pub struct VertexState {
    /// The vertex shader's pipeline.
    pub pipeline: Option<u64>,
    /// 32-bit outputs per vertex.
    pub outputs: u32,
    /// The PPP state: every record the PPP updates so far set (each
    /// update replaces the records its header names and leaves the rest),
    /// `None` before the first update.
    pub ppp: Option<PppRecords>,
    /// The render's sampler heap (address, samplers), which vertex
    /// shaders index as fragment shaders do.
    pub sampler_heap: Option<(u64, u32)>,
    /// The primitive restart index of draws with restart enabled.
    pub restart_index: u32,
    /// The vertex shader's declared sampler states (word 0), once set.
    pub sampler_states: Option<agx_hw::formats::SamplerStates>,
    /// The VDM's provoking vertex is the first (`flat_shading_control`
    /// 0): every other strip triangle then keeps its first corner first
    /// and swaps the other two, so that a flat value read from vertex 0
    /// is the strip's vertex i, as Vulkan's and GL's first-vertex
    /// conventions want. Otherwise (and before any word sets it; what
    /// the hardware resets to is not public) it swaps its first two, so
    /// that vertex 2 is vertex i + 2, as the last-vertex conventions want.
    pub provoking_first: bool,
}

/// The records of a PPP state this model uses.
#[derive(Debug, Clone)]
pub struct PppState {
    /// Fragment pipeline control.
    pub fragment_control: Option<FragmentControl>,
    /// The visibility-result entry the state's samples count into
    /// (`FragmentOcclusionQuery`).
    pub occlusion_query: Option<u32>,
    /// Front-face depth/stencil state.
    pub front_face: Option<FragmentFace>,
    /// Back-face depth/stencil state.
    pub back_face: Option<FragmentFace>,
    /// Front-face stencil state.
    pub front_stencil: Option<FragmentStencil>,
    /// Back-face stencil state.
    pub back_stencil: Option<FragmentStencil>,
    /// The viewports (at least one): a primitive is drawn through the one
    /// its first vertex's viewport index names (`viewport_of`).
    pub viewports: Vec<Viewport>,
    /// Culling and rasteriser state.
    pub cull: Cull,
    /// Indices into the render's scissor and depth-bias arrays.
    pub depth_bias_scissor: DepthBiasScissor,
    /// Whether the fragment z is a coefficient slot (slot 1, after W).
    pub frag_coord_z: bool,
    /// The fragment shader's pipeline (offset from `usc_exec_base`).
    pub fragment_pipeline: Option<u64>,
    /// The fragment shader's coefficient bindings (offset from
    /// `usc_exec_base`).
    pub cf_bindings: Option<u64>,
    /// The fragment shader's declared sampler states (word 0).
    pub fragment_sampler_states: agx_hw::formats::SamplerStates,
    /// How many coefficient bindings there are.
    pub cf_binding_count: u32,
    /// What the rasteriser draws points as (a sprite's coordinate
    /// origin), or that primitives are triangles or lines.
    pub object_type: ObjectType,
    /// The width of lines, in pixels.
    pub line_width_px: f32,
    /// Where the point size is among a vertex's values after its
    /// position, when the vertex shader writes one.
    pub point_size: Option<usize>,
    /// Where the layer-and-viewport word (layer in its low 16 bits, as
    /// Mesa packs it) is among a vertex's values after its position, when
    /// the vertex shader writes one.
    pub layer_viewport: Option<usize>,
    /// Where each enabled clip distance is among a vertex's values after
    /// its position.
    pub clip_distances: Vec<usize>,
    /// The fragment shader reads the primitive id.
    pub primitive_id: bool,
    /// Primitives are discarded after vertex shading.
    pub rasterizer_discard: bool,
}

/// Reads a PPP state: a header whose present bits say which records
/// follow (`PppRecords`, generated from the spec). The records this model
/// does not use are read and ignored.
pub fn parse_ppp(vm: &GpuVm<'_>, address: u64) -> Result<PppState, EngineResult> {
    let (records, _) = read_sequence::<PppRecords>(vm, address, FaultUnit::Vdm)?;
    Ok(PppState::of(&records))
}

/// A state's two fragment-control words as one, their bits ORed. Mesa
/// writes the rasteriser's state (scissor, stencil, depth bias, occlusion
/// query) in the first and the linked fragment shader's (pass type, tag
/// writes, triangle merging) in the second, noting that rasteriser discard
/// takes effect reliably only there (`agx_state.c`). How the hardware
/// combines them is not public; an OR is what the pass type's encoding
/// suggests (translucent bit 0 and punch through bit 1: translucent punch
/// through is both).
fn merged_fragment_control(records: &PppRecords) -> Option<FragmentControl> {
    match (records.fragment_control, records.fragment_control_2) {
        (Some(first), Some(second)) => {
            let (Ok(a), Ok(b)) = (first.pack(), second.pack()) else {
                return Some(first);
            };
            let word = u32::from_le_bytes(a) | u32::from_le_bytes(b);
            Some(FragmentControl::unpack(&word.to_le_bytes()).value)
        }
        (first, second) => first.or(second),
    }
}

impl PppState {
    /// The viewport index vertex `v` names: the high 16 bits of its
    /// layer-and-viewport output (0 without one).
    fn viewport_index(&self, varyings: &[f32]) -> usize {
        self.layer_viewport
            .and_then(|at| varyings.get(at))
            .map_or(0, |word| (word.to_bits() >> 16) as usize)
    }

    /// The viewport a primitive whose first vertex is `v` is drawn
    /// through: the one its viewport index names (Mesa's vertex and
    /// geometry stages write the same index at every vertex of a
    /// primitive; which vertex the hardware reads is not public), viewport
    /// 0 for an index past the state's viewports (GL leaves that
    /// undefined; what the hardware does is not public).
    fn viewport_of(&self, v: &ClipVertex) -> &Viewport {
        self.viewport_for(&v.varyings)
    }

    /// [`PppState::viewport_of`] a first vertex with these values.
    fn viewport_for(&self, varyings: &[f32]) -> &Viewport {
        let index = self.viewport_index(varyings);
        self.viewports.get(index).unwrap_or(&self.viewports[0])
    }

    /// What this model uses of a PPP state's records.
    pub fn of(records: &PppRecords) -> PppState {
        let fragment_shader = records.fragment_shader.as_ref();
        PppState {
            fragment_control: merged_fragment_control(records),
            occlusion_query: records.occlusion_query.map(|q| q.index),
            front_face: records.fragment_front_face,
            back_face: records.fragment_back_face,
            front_stencil: records.fragment_front_stencil,
            back_stencil: records.fragment_back_stencil,
            viewports: records
                .viewport
                .as_ref()
                .map(|v| v.viewports.clone())
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| vec![Viewport::default()]),
            cull: records.cull.unwrap_or_default(),
            depth_bias_scissor: records.depth_bias_scissor.unwrap_or_default(),
            frag_coord_z: records.output_select.is_some_and(|o| o.frag_coord_z),
            fragment_pipeline: fragment_shader.map(|f| f.word1.pipeline),
            cf_bindings: fragment_shader.map(|f| f.word2.cf_bindings),
            fragment_sampler_states: fragment_shader
                .map_or(agx_hw::formats::SamplerStates::None, |f| {
                    f.word0.sampler_state_register_count
                }),
            cf_binding_count: fragment_shader.map_or(0, |f| f.word0.cf_binding_count),
            object_type: records
                .fragment_front_face_2
                .map_or(ObjectType::Triangle, |f| f.object_type),
            // 4.4 fixed point, minus one (Mesa's agx_pack_line_width).
            line_width_px: records
                .fragment_front_face
                .map_or(1.0, |f| (f.line_width + 1) as f32 / 16.0),
            point_size: None,
            layer_viewport: None,
            clip_distances: Vec::new(),
            primitive_id: records.cull_2.is_some_and(|c| c.needs_primitive_id),
            rasterizer_discard: records.cull.is_some_and(|c| c.rasterizer_discard)
                || records.cull_2.is_some_and(|c| c.rasterizer_discard),
        }
        .with_output_layout(records)
    }

    /// Where the point size and the clip distances are among a vertex's
    /// outputs. The vertex output buffer holds, in the hardware's order
    /// (Mesa's `agx_uvs.h`), the position (four words), the varyings
    /// (as many as the varying-count records sum), the point size, the
    /// layer and viewport (one word), then one word per clip distance.
    /// How 16-bit varyings count in that buffer is not public (Mesa
    /// writes none): each is taken as a word.
    fn with_output_layout(mut self, records: &PppRecords) -> PppState {
        let Some(select) = records.output_select else {
            return self;
        };
        let count = |c: Option<agx_hw::formats::VaryingCounts>| {
            c.map_or(0, |c| (c.smooth + c.flat + c.linear) as usize)
        };
        let mut at = count(records.varying_counts_32) + count(records.varying_counts_16);
        if select.point_size {
            self.point_size = Some(at);
            at += 1;
        }
        if select.viewport_target || select.render_target {
            self.layer_viewport = Some(at);
            at += 1;
        }
        self.clip_distances = (0..16)
            .filter(|plane| select.clip_distance_planes & (1 << plane) != 0)
            .enumerate()
            .map(|(i, _)| at + i)
            .collect();
        self
    }
}

/// A draw's parameters.
#[derive(Debug, Clone, Copy)]
pub struct Draw {
    /// Topology.
    pub primitive: Primitive,
    /// Index buffer and index size, for indexed draws.
    pub indices: Option<(u64, IndexSize)>,
    /// Indices (or vertices).
    pub count: u32,
    /// Instances.
    pub instances: u32,
    /// First vertex (base vertex for indexed draws).
    pub start: u32,
    /// Primitive restart: an index equal to the VDM state's restart
    /// index ends the strip, fan, loop or list it is in.
    pub restart: bool,
}

impl Draw {
    /// The draw an IndexList block at `pc` describes, its arguments read
    /// from memory for an indirect draw. The words of unknown meaning are
    /// refused.
    pub fn of(list: &IndexListBlock, pc: u64, vm: &GpuVm<'_>) -> Result<Draw, EngineResult> {
        if list.unk_1.is_some() {
            return Err(unsupported(
                pc,
                FaultUnit::Vdm,
                "an IndexList block with the unknown words unk_1",
            ));
        }
        let h = &list.header;
        let mut draw = Draw {
            primitive: h.primitive,
            indices: list.buffer_lo.map(|lo| {
                (
                    (u64::from(h.index_buffer_hi) << 32) | u64::from(lo.buffer_lo),
                    h.index_size,
                )
            }),
            count: list.count.map_or(0, |c| c.count),
            instances: list.instances.map_or(1, |i| i.count),
            start: list.start.map_or(0, |s| s.start),
            restart: h.restart_enable,
        };
        if let Some(indirect) = list.indirect {
            // The arguments are GL's and Vulkan's indirect draw structs,
            // which Mesa passes through from the application: count,
            // instances, first vertex, base instance; or for an indexed
            // draw count, instances, first index, base vertex, base
            // instance. The first index moves the index buffer (Mesa's
            // geometry-shader path relies on the hardware doing so). The
            // base instance is the shader's to read (Mesa lowers it): the
            // instance index in r6 counts from 0.
            let mut words = [0u8; 20];
            let len = if draw.indices.is_some() { 20 } else { 16 };
            vm.read(indirect.address, &mut words[..len])
                .map_err(|f| EngineResult::from_uat(&f, FaultUnit::Vdm))?;
            let word = |i: usize| {
                u32::from_le_bytes([
                    words[4 * i],
                    words[4 * i + 1],
                    words[4 * i + 2],
                    words[4 * i + 3],
                ])
            };
            draw.count = word(0);
            draw.instances = word(1);
            match &mut draw.indices {
                Some((buffer, size)) => {
                    let index_bytes = index_bytes(*size);
                    *buffer = buffer.wrapping_add(u64::from(word(2)) * index_bytes);
                    draw.start = word(3);
                }
                None => draw.start = word(2),
            }
        }
        Ok(draw)
    }
}

/// Bytes of an index.
fn index_bytes(size: IndexSize) -> u64 {
    match size {
        IndexSize::U8 => 1,
        IndexSize::U16 => 2,
        _ => 4,
    }
}

/// Applies a VDM state update (vertex shader, outputs, restart index) to
/// `state`.
pub fn apply_vdm_state(words: &VdmStateWords, state: &mut VertexState) {
    if let Some(restart) = words.restart_index {
        state.restart_index = restart.value;
    }
    if let Some(word0) = words.vertex_shader_word_0 {
        state.sampler_states = Some(word0.sampler_state_register_count);
    }
    if let Some(word1) = words.vertex_shader_word_1 {
        state.pipeline = Some(word1.pipeline);
    }
    if let Some(outputs) = words.vertex_outputs {
        state.outputs = outputs.output_count_1.min(MAX_OUTPUTS as u32);
    }
    if let Some(flags) = words.vertex_unknown {
        state.provoking_first = flags.flat_shading_control == agx_hw::formats::VdmVertex::V0;
    }
}

/// The program caches the vertex stage shades with: its own, and one for
/// each other thread a draw's SIMD-groups may be shared out to.
pub struct VertexCores {
    /// The stage's own.
    pub cache: ProgramCache,
    /// The other threads', made when a batch first needs them.
    others: Vec<ProgramCache>,
    /// How many threads the stage may use (at least one).
    threads: usize,
    code: Option<std::sync::Arc<agx_jit::CodeCache>>,
}

impl VertexCores {
    /// Caches for up to `threads` threads, sharing `code`.
    pub fn new(code: Option<std::sync::Arc<agx_jit::CodeCache>>, threads: usize) -> VertexCores {
        VertexCores {
            cache: ProgramCache::with_code(code.clone()),
            others: Vec::new(),
            threads: threads.max(1),
            code,
        }
    }
}

/// SIMD-groups of vertices a thread is given at least when a batch's are
/// shared out (a thread costs tens of microseconds to start).
const GROUPS_PER_THREAD_MIN: usize = 16;

/// Runs the vertex shader for `vertex_ids` (one instance) into `out`,
/// `stride` words a vertex (not all 256 slots a shader may name: zeroing
/// those was a tenth of the serial vertex work); every output a shader
/// does not store is 0. With `threads` above 1 (only for a program whose
/// SIMD-groups cannot reach each other or memory,
/// [`crate::shader::packs_primitives`], and needs no stacks) a batch of
/// enough groups is shared out, in contiguous runs, among up to that
/// many threads; the first failing group's result, in group order, is
/// the batch's.
fn shade_vertices(
    shading: &Shading<'_, '_>,
    (cores, threads): (&mut VertexCores, usize),
    helper: &mut StageHelper,
    vertex_ids: &[u32],
    out: &mut Vec<u32>,
) -> Result<(), EngineResult> {
    let stride = shading.stride;
    out.clear();
    out.resize(vertex_ids.len() * stride, 0);
    let groups = vertex_ids.len().div_ceil(LANES);
    let threads = threads.min(groups / GROUPS_PER_THREAD_MIN);
    while cores.others.len() + 1 < threads {
        cores
            .others
            .push(ProgramCache::with_code(cores.code.clone()));
    }
    let shade =
        |ids: &[u32], out: &mut [u32], cache: &mut ProgramCache, helper: &mut StageHelper| {
            shade_groups(shading, cache, helper, ids, out)
        };
    if threads <= 1 {
        return shade(vertex_ids, out, &mut cores.cache, helper);
    }
    let per_thread = groups.div_ceil(threads) * LANES;
    let mut parts = vertex_ids
        .chunks(per_thread)
        .zip(out.chunks_mut(per_thread * stride));
    let Some((first_ids, first_out)) = parts.next() else {
        return Ok(());
    };
    let (cache, others) = (&mut cores.cache, &mut cores.others);
    let preemption = shading.watchdog.preemption;
    std::thread::scope(|scope| {
        let shade = &shade;
        let handles: Vec<_> = parts
            .zip(others.iter_mut())
            .map(|((ids, out), cache)| {
                // Counted in as the command's threads, so that a
                // suspension waits for them to park too.
                preemption.fork_beside(1);
                scope.spawn(move || {
                    let _counted_out = crate::preempt::ForkedThread(preemption);
                    // (No stacks: the program has no spill bucket.)
                    shade(ids, out, cache, &mut StageHelper::new(None, 0, 0))
                })
            })
            .collect();
        let mut result = shade(first_ids, first_out, cache, helper);
        for handle in handles {
            let joined = preemption
                .waiting(|| handle.join())
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            if result.is_ok() {
                result = joined;
            }
        }
        result
    })
}

/// What shading a batch's vertices needs besides the vertices: the VM,
/// the watchdog, the program and its sampler heap, the instance, the
/// draw's address (for the debugger) and the words kept a vertex.
struct Shading<'s, 'a> {
    vm: &'s GpuVm<'a>,
    watchdog: &'s Watchdog<'a>,
    binding: &'s Binding,
    sampler_heap: Option<(u64, u32)>,
    instance: u32,
    draw: u64,
    stride: usize,
}

/// Runs the vertex shader for `vertex_ids` on one thread, into `out`
/// (`stride` words a vertex, zero).
fn shade_groups(
    shading: &Shading<'_, '_>,
    cache: &mut ProgramCache,
    helper: &mut StageHelper,
    vertex_ids: &[u32],
    out: &mut [u32],
) -> Result<(), EngineResult> {
    let Shading {
        vm,
        watchdog,
        binding,
        sampler_heap,
        instance,
        draw,
        stride,
    } = *shading;
    // The SIMD-groups store into their vertices' outputs in place, and
    // reuse one register file.
    let mut uniforms = binding.uniforms.clone();
    let decoded = DecodedImages::default();
    let unit = TextureUnit {
        vm: vm.clone(),
        textures: &binding.textures,
        samplers: &binding.samplers,
        sampler_heap,
        sampler_stride_bytes: binding.sampler_stride_bytes,
        decoded: Some(&decoded),
    };
    let mut memory = vm.clone();
    let mut kept: Option<SimdGroup> = None;
    for (chunk, outputs) in vertex_ids.chunks(LANES).zip(out.chunks_mut(LANES * stride)) {
        let present = present_lanes(chunk.len());
        let group = match &mut kept {
            Some(group) => {
                group.reset(binding.code, present);
                group
            }
            None => kept.insert(SimdGroup::new(binding.code, present)),
        };
        for (lane, &id) in chunk.iter().enumerate() {
            group.write(Reg::r(5), lane, u64::from(id));
            group.write(Reg::r(6), lane, u64::from(instance));
        }
        let mut io = VertexIo {
            outputs,
            stride,
            unit: unit.clone(),
            binding,
            image_writes: crate::imageblock::ImageWriteTarget::default(),
        };
        helper.run_stage_group(
            group,
            binding.spill_bucket,
            cache,
            &mut memory,
            &mut io,
            &mut uniforms,
            watchdog,
            exec_fault,
            crate::probe::Stage::Vertex { draw },
        )?;
    }
    Ok(())
}

/// A vertex in clip space with its varyings.
#[derive(Debug, Clone)]
struct ClipVertex {
    position: [f32; 4],
    varyings: Vec<f32>,
    /// Which vertex of the primitive it is, for one clipping kept (`None`:
    /// clipping made it).
    corner: Option<u8>,
}

/// A vertex in window space, as binned.
#[derive(Debug, Clone)]
pub struct ScreenVertex {
    /// x, y in pixels; z; 1/w.
    pub position: [f32; 4],
    /// Varying slots (raw f32 bits reinterpreted).
    pub varyings: Vec<f32>,
}

fn lerp(a: &ClipVertex, b: &ClipVertex, t: f32) -> ClipVertex {
    ClipVertex {
        position: std::array::from_fn(|i| a.position[i] + (b.position[i] - a.position[i]) * t),
        varyings: a
            .varyings
            .iter()
            .zip(&b.varyings)
            .map(|(x, y)| x + (y - x) * t)
            .collect(),
        corner: None,
    }
}

/// Clips with the noperspective outputs (`linear`, output indices)
/// interpolated along the cut edges in window space, as GL asks: a value
/// at a point of clip-space barycentrics λ is Σ λᵢ wᵢ aᵢ / w, so `clip`
/// interpolates each such value times its vertex's w, and the vertices it
/// makes divide by theirs. The vertices it keeps keep their own values.
fn clip_noperspective<const N: usize>(
    primitive: [ClipVertex; N],
    linear: &[usize],
    clip: impl FnOnce([ClipVertex; N]) -> Vec<ClipVertex>,
) -> Vec<ClipVertex> {
    if linear.is_empty() {
        return clip(primitive);
    }
    let kept: [Vec<f32>; N] = std::array::from_fn(|i| primitive[i].varyings.clone());
    let scaled = primitive.map(|mut v| {
        for &output in linear {
            if let Some(value) = v.varyings.get_mut(output) {
                *value *= v.position[3];
            }
        }
        v
    });
    let mut out = clip(scaled);
    for v in &mut out {
        match v.corner.and_then(|i| kept.get(usize::from(i))) {
            Some(varyings) => v.varyings.clone_from(varyings),
            None => {
                for &output in linear {
                    if let Some(value) = v.varyings.get_mut(output) {
                        *value /= v.position[3];
                    }
                }
            }
        }
    }
    out
}

/// Clips a triangle against the near plane z >= 0 (and w > 0); returns a
/// convex polygon (possibly empty).
fn clip_near(triangle: [ClipVertex; 3]) -> Vec<ClipVertex> {
    let distance = |v: &ClipVertex| v.position[2].min(v.position[3]);
    if triangle
        .iter()
        .all(|v| distance(v) >= 0.0 && v.position[3] > 0.0)
    {
        return Vec::from(triangle);
    }
    let mut out = Vec::new();
    for i in 0..3 {
        let (a, b) = (&triangle[i], &triangle[(i + 1) % 3]);
        let (da, db) = (a.position[2], b.position[2]);
        if da >= 0.0 && a.position[3] > 0.0 {
            out.push(a.clone());
        }
        if (da >= 0.0) != (db >= 0.0) {
            out.push(lerp(a, b, da / (da - db)));
        }
    }
    out.retain(|v| v.position[3] > 0.0);
    out
}

/// Clips a convex polygon against the far plane (z <= w), interpolating
/// every value along the cut edges: the depth-clip half that
/// [`clip_near`] does not do.
fn clip_far(polygon: Vec<ClipVertex>) -> Vec<ClipVertex> {
    let distance = |v: &ClipVertex| v.position[3] - v.position[2];
    if polygon.len() < 3 || polygon.iter().all(|v| distance(v) >= 0.0) {
        return polygon;
    }
    let mut out = Vec::with_capacity(polygon.len() + 1);
    for i in 0..polygon.len() {
        let (a, b) = (&polygon[i], &polygon[(i + 1) % polygon.len()]);
        let (da, db) = (distance(a), distance(b));
        if da >= 0.0 {
            out.push(a.clone());
        }
        if (da >= 0.0) != (db >= 0.0) && !da.is_nan() && !db.is_nan() {
            out.push(lerp(a, b, da / (da - db)));
        }
    }
    out
}

/// Clips a triangle without depth clipping (`Cull::depth_clip` clear, GL's
/// depth clamp): only what is behind the eye (w <= 0) goes; depth is
/// clamped per fragment instead.
fn clip_behind(triangle: [ClipVertex; 3]) -> Vec<ClipVertex> {
    let distance = |v: &ClipVertex| v.position[3];
    if triangle.iter().all(|v| distance(v) > 0.0) {
        return Vec::from(triangle);
    }
    let mut out = Vec::new();
    for i in 0..3 {
        let (a, b) = (&triangle[i], &triangle[(i + 1) % 3]);
        let (da, db) = (distance(a), distance(b));
        if da > 0.0 {
            out.push(a.clone());
        }
        if (da > 0.0) != (db > 0.0) && !da.is_nan() && !db.is_nan() {
            // Stop just in front of the eye, not on it (w = 0 has no
            // window position).
            let t = (da - W_MIN) / (da - db);
            out.push(lerp(a, b, t.clamp(0.0, 1.0)));
        }
    }
    out.retain(|v| v.position[3] > 0.0);
    out
}

/// The smallest w kept when clipping only behind the eye.
const W_MIN: f32 = 1.0e-6;

/// A vertex's clip distance at `index` among its values after the
/// position (0 if it has none there).
fn clip_distance(v: &ClipVertex, index: usize) -> f32 {
    v.varyings.get(index).copied().unwrap_or(0.0)
}

/// Clips a convex polygon against each clip distance (keeping where the
/// distance is at least 0, as GL and Vulkan define them), interpolating
/// every value along the cut edges. A NaN distance is outside.
fn clip_polygon(mut polygon: Vec<ClipVertex>, planes: &[usize]) -> Vec<ClipVertex> {
    for &plane in planes {
        if polygon.len() < 3 {
            break;
        }
        let inside = |v: &ClipVertex| clip_distance(v, plane) >= 0.0;
        if polygon.iter().all(inside) {
            continue;
        }
        let mut out = Vec::with_capacity(polygon.len() + 1);
        for i in 0..polygon.len() {
            let (a, b) = (&polygon[i], &polygon[(i + 1) % polygon.len()]);
            let (da, db) = (clip_distance(a, plane), clip_distance(b, plane));
            if da >= 0.0 {
                out.push(a.clone());
            }
            if (da >= 0.0) != (db >= 0.0) && !da.is_nan() && !db.is_nan() {
                out.push(lerp(a, b, da / (da - db)));
            }
        }
        polygon = out;
    }
    polygon
}

/// Clips a line segment against what is behind the eye, the near (z >= 0)
/// and far (z <= w) planes as `(near, far)` say, and each clip distance;
/// `None` when nothing is left.
fn clip_segment(
    a: ClipVertex,
    b: ClipVertex,
    planes: &[usize],
    (near, far): (bool, bool),
) -> Option<(ClipVertex, ClipVertex)> {
    let (mut t0, mut t1) = (0f32, 1f32);
    // The near and far planes as depth clipping asks; what is behind the
    // eye always goes.
    let mut depth = vec![(a.position[3] - W_MIN, b.position[3] - W_MIN)];
    if near {
        depth.push((a.position[2], b.position[2]));
    }
    if far {
        depth.push((a.position[3] - a.position[2], b.position[3] - b.position[2]));
    }
    let distances = depth.into_iter().chain(
        planes
            .iter()
            .map(|&p| (clip_distance(&a, p), clip_distance(&b, p))),
    );
    for (da, db) in distances {
        if da.is_nan() || db.is_nan() || (da < 0.0 && db < 0.0) {
            return None;
        }
        if da < 0.0 {
            t0 = t0.max(da / (da - db));
        } else if db < 0.0 {
            t1 = t1.min(da / (da - db));
        }
    }
    if t0 > t1 {
        return None;
    }
    // An end no plane cut is the vertex itself, not a copy interpolated
    // onto it.
    let a2 = if t0 == 0.0 {
        a.clone()
    } else {
        lerp(&a, &b, t0)
    };
    let b2 = if t1 == 1.0 { b } else { lerp(&a, &b, t1) };
    (a2.position[3] > 0.0 && b2.position[3] > 0.0).then_some((a2, b2))
}

/// Projects and maps a clip-space vertex to window space.
fn to_screen(v: &ClipVertex, viewport: &Viewport) -> ScreenVertex {
    ScreenVertex {
        position: screen_position(v, viewport),
        varyings: v.varyings.clone(),
    }
}

/// [`to_screen`] taking the vertex's values with it.
fn into_screen(v: ClipVertex, viewport: &Viewport) -> ScreenVertex {
    ScreenVertex {
        position: screen_position(&v, viewport),
        varyings: v.varyings,
    }
}

/// A clip-space vertex's window position: x, y in pixels, z, 1/w.
fn screen_position(v: &ClipVertex, viewport: &Viewport) -> [f32; 4] {
    window_position(&v.position, viewport)
}

/// [`screen_position`] of a clip-space position.
fn window_position(position: &[f32; 4], viewport: &Viewport) -> [f32; 4] {
    let inv_w = 1.0 / position[3];
    let ndc = [
        position[0] * inv_w,
        position[1] * inv_w,
        position[2] * inv_w,
    ];
    [
        ndc[0] * viewport.scale_x + viewport.translate_x,
        ndc[1] * viewport.scale_y + viewport.translate_y,
        ndc[2] * viewport.scale_z + viewport.translate_z,
        inv_w,
    ]
}

/// Twice the signed area (positive: counter-clockwise in a y-down window).
pub fn signed_area(v: &[ScreenVertex; 3]) -> f32 {
    let [a, b, c] = v;
    area_of(&a.position, &b.position, &c.position)
}

/// [`signed_area`] of three window positions.
fn area_of(a: &[f32; 4], b: &[f32; 4], c: &[f32; 4]) -> f32 {
    (b[0] - a[0]) * (c[1] - a[1]) - (c[0] - a[0]) * (b[1] - a[1])
}

/// Where the fragment-state table starts in the header page.
const STATES_OFFSET: u64 = 1024;
/// The most fragment-state copies one segment may hold (a state is
/// copied again whenever the PPP state changed since the last triangle).
pub const MAX_STATES: usize = ((TVB_PAGE_BYTES - STATES_OFFSET) / 16) as usize;

/// What a pass did with the parameter buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BinningStats {
    /// The most pages one segment used.
    pub peak_pages: u64,
    /// Pages the pass would have used in one segment: every segment's
    /// pages, the header and list-head pages counted once.
    pub wanted_pages: u64,
    /// Times the buffer ran dry.
    pub overflows: u32,
    /// Partial renders done.
    pub partial_renders: u32,
}

/// The scene being binned.
pub struct Binner<'a> {
    alloc: PageAllocator<'a>,
    vm: GpuVm<'a>,
    info: TvbInfo,
    header_page: u64,
    header: SceneHeader,
    /// Head-page addresses.
    head_pages: Vec<u64>,
    /// Per tile: (first chunk, last chunk, entries in the last chunk).
    lists: Vec<Option<(u64, u64, u32)>>,
    /// Per tile with a list: its last chunk's bytes, written to the
    /// buffer whole when the chunk fills (with its link to the next) or
    /// the segment is published, not entry by entry.
    open_chunks: Vec<[u8; CHUNK_BYTES as usize]>,
    /// The segment's fragment states: the PPP states its triangles were
    /// drawn with, each copied into the buffer (as the PPP writes its
    /// state there) when a triangle first uses it.
    states: Vec<FragmentState>,
    /// The PPP state the next triangles are drawn with, as a whole
    /// `PppRecords` (every record set so far).
    state_bytes: Vec<u8>,
    /// Its index in `states`, once copied in this segment.
    current_state: Option<u32>,
    /// The last overflow was the state table's, not the pages'.
    state_table_full: bool,
    area: (u32, u32),
    /// The list chunks a record reserves: a buffer every record reuses.
    chunks: Vec<u64>,
    /// What the pass did so far.
    pub stats: BinningStats,
}

impl<'a> Binner<'a> {
    /// Starts a scene for a `width` x `height` pass.
    pub fn new(
        vm: GpuVm<'a>,
        info: &TvbInfo,
        width: u32,
        height: u32,
    ) -> Result<Result<Binner<'a>, Overflow>, EngineResult> {
        let (tiles_x, tiles_y) = (width.div_ceil(TILE_PX), height.div_ceil(TILE_PX));
        let mut binner = Binner {
            alloc: PageAllocator::new(vm.clone(), info),
            vm,
            info: *info,
            header_page: 0,
            header: SceneHeader {
                tiles_x,
                tiles_y,
                ..SceneHeader::default()
            },
            head_pages: Vec::new(),
            lists: vec![None; (u64::from(tiles_x) * u64::from(tiles_y)) as usize],
            open_chunks: vec![
                [0; CHUNK_BYTES as usize];
                (u64::from(tiles_x) * u64::from(tiles_y)) as usize
            ],
            states: Vec::new(),
            state_bytes: Vec::new(),
            current_state: None,
            state_table_full: false,
            area: (width, height),
            chunks: Vec::new(),
            stats: BinningStats::default(),
        };
        Ok(binner.start_segment()?.map(|()| binner))
    }

    /// Takes the header and list-head pages of a new segment, from the
    /// start of the buffer.
    fn start_segment(&mut self) -> Result<Result<(), Overflow>, EngineResult> {
        self.alloc = PageAllocator::new(self.vm.clone(), &self.info);
        self.header_page = match self.alloc.take_page()? {
            Ok(page) => page,
            Err(overflow) => return Ok(Err(overflow)),
        };
        // Until the scene is finished, the header names no tiles.
        let mut writer = self.vm.clone();
        writer
            .write(self.header_page, SceneHeader::default().as_bytes())
            .map_err(|f| {
                unsupported(
                    f.address,
                    FaultUnit::Tiler,
                    format_args!("a scene header write to the parameter buffer that faulted: {f}"),
                )
            })?;
        let tiles = self.lists.len() as u64;
        self.head_pages.clear();
        for _ in 0..tiles.div_ceil(HEADS_PER_PAGE) {
            match self.alloc.take_page()? {
                Ok(page) => self.head_pages.push(page),
                Err(overflow) => return Ok(Err(overflow)),
            }
        }
        self.lists.iter_mut().for_each(|l| *l = None);
        self.header.primitives = 0;
        self.states.clear();
        self.current_state = None;
        self.state_table_full = false;
        Ok(Ok(()))
    }

    /// Whether the segment ran out of fragment-state slots (more than
    /// [`MAX_STATES`] PPP states in one segment, a limit of this model's
    /// scene layout, not of the hardware): only a partial render makes
    /// room.
    pub fn state_table_full(&self) -> bool {
        self.state_table_full
    }

    /// The buffer grew (a GrowTVB request was granted): more pages to
    /// allocate from.
    pub fn grown(&mut self, info: &TvbInfo) {
        self.info = *info;
        self.alloc.page_count = u64::from(info.block_count) * agx_fwif::messages::TVB_BLOCK_PAGES;
    }

    /// The buffer's id, for GrowTVB.
    pub fn buffer_id(&self) -> u32 {
        self.info.buffer_id
    }

    /// Blocks in the buffer.
    pub fn blocks(&self) -> u32 {
        self.info.block_count
    }

    fn write(&mut self, address: u64, bytes: &[u8]) -> Result<(), EngineResult> {
        tiler_write(&mut self.vm, address, bytes)
    }

    /// Notes the PPP state the triangles that follow are drawn with (the
    /// draw at `pc`'s).
    pub fn set_state(&mut self, records: &PppRecords, pc: u64) -> Result<(), EngineResult> {
        let mut bytes = Vec::with_capacity(self.state_bytes.len());
        // Records that cannot be one state (a region clip and viewports of
        // different counts) are refused.
        records.build(&mut bytes).map_err(|error| {
            unsupported(
                pc,
                FaultUnit::Vdm,
                format_args!("PPP records that do not form one state: {error}"),
            )
        })?;
        if bytes != self.state_bytes {
            self.state_bytes = bytes;
            self.current_state = None;
        }
        Ok(())
    }

    /// The pass's size, in pixels and in tiles, that records are
    /// prepared against.
    fn scene_area(&self) -> SceneArea {
        SceneArea {
            width_px: self.area.0,
            height_px: self.area.1,
            tiles_x: self.header.tiles_x,
            tiles_y: self.header.tiles_y,
        }
    }

    /// Bins a prepared triangle record covering `tiles`, drawn with the
    /// state of the last [`Binner::set_state`]: writes that state's index
    /// into the record's first word, then reserves and writes it.
    fn record(
        &mut self,
        record: &mut [u8],
        tiles: TileRect,
    ) -> Result<Result<(), Overflow>, EngineResult> {
        let state = match self.current_state {
            Some(index) => index,
            // The segment's state table is full: the segment must be
            // rendered (a partial render) before another state fits;
            // growing the buffer would not help.
            None if self.states.len() >= MAX_STATES => {
                self.state_table_full = true;
                return Ok(Err(Overflow));
            }
            None => self.states.len() as u32,
        };
        record[..4].copy_from_slice(&state.to_le_bytes());
        let tiles_x = self.header.tiles_x;
        self.reserve_and_write(record, || tiles.indices(tiles_x))
    }

    /// The rest of [`Binner::record`]: reserves the record, the state
    /// copy and the list chunks, then writes them and appends the record
    /// to each of `tiles`' lists.
    fn reserve_and_write<T: Iterator<Item = usize>>(
        &mut self,
        record: &[u8],
        tiles: impl Fn() -> T,
    ) -> Result<Result<(), Overflow>, EngineResult> {
        let state = self.current_state.unwrap_or(self.states.len() as u32);
        // Reserve everything first, so that an overflow leaves the scene
        // as it was: the record, and a chunk for each list that needs one.
        let new_chunks = tiles()
            .filter(|&t| !matches!(self.lists[t], Some((_, _, used)) if (used as usize) < CHUNK_PRIMITIVES))
            .count();
        let mut chunks = std::mem::take(&mut self.chunks);
        chunks.clear();
        let saved = (self.alloc.next_page, self.alloc.current);
        let state_copy = match self.current_state {
            Some(_) => None,
            None => match self.alloc.alloc(self.state_bytes.len() as u64)? {
                Ok(address) => Some(address),
                Err(overflow) => return Ok(Err(overflow)),
            },
        };
        let address = match self.alloc.alloc(record.len() as u64)? {
            Ok(address) => address,
            Err(overflow) => {
                (self.alloc.next_page, self.alloc.current) = saved;
                return Ok(Err(overflow));
            }
        };
        for _ in 0..new_chunks {
            match self.alloc.alloc(CHUNK_BYTES)? {
                Ok(chunk) => chunks.push(chunk),
                Err(overflow) => {
                    (self.alloc.next_page, self.alloc.current) = saved;
                    return Ok(Err(overflow));
                }
            }
        }
        if let Some(copy) = state_copy {
            tiler_write(&mut self.vm, copy, &self.state_bytes)?;
            self.states.push(FragmentState {
                ppp: copy,
                ppp_bytes: self.state_bytes.len() as u32,
                pad: 0,
            });
            self.current_state = Some(state);
        }
        self.write(address, record)?;
        let mut reserved = chunks.iter().copied();
        for tile in tiles() {
            self.append(tile, address, &mut reserved)?;
        }
        self.chunks = chunks;
        self.header.primitives += 1;
        Ok(Ok(()))
    }

    /// Appends `primitive` to `tile`'s list, in its open chunk (a new
    /// one from `chunks` when there is none or it is full: the full one
    /// gets its link and is written).
    fn append(
        &mut self,
        tile: usize,
        primitive: u64,
        chunks: &mut impl Iterator<Item = u64>,
    ) -> Result<(), EngineResult> {
        let (first, chunk, used) = match self.lists[tile] {
            Some((first, last, used)) if (used as usize) < CHUNK_PRIMITIVES => (first, last, used),
            previous => {
                let Some(chunk) = chunks.next() else {
                    return Err(unsupported(
                        primitive,
                        FaultUnit::Tiler,
                        format_args!("a new list chunk for tile {tile} that was not reserved"),
                    ));
                };
                let first = match previous {
                    Some((first, last, _)) => {
                        let mut full = self.open_chunks[tile];
                        full[..8].copy_from_slice(&chunk.to_le_bytes());
                        self.write(last, &full)?;
                        first
                    }
                    None => chunk,
                };
                self.open_chunks[tile] = [0; CHUNK_BYTES as usize];
                (first, chunk, 0)
            }
        };
        let open = &mut self.open_chunks[tile];
        let entry = 16 + 8 * used as usize;
        open[entry..entry + 8].copy_from_slice(&primitive.to_le_bytes());
        open[8..12].copy_from_slice(&(used + 1).to_le_bytes());
        self.lists[tile] = Some((first, chunk, used + 1));
        Ok(())
    }

    /// Pages used so far by this segment.
    pub fn pages_used(&self) -> u64 {
        self.alloc.pages_used()
    }

    /// Writes the scene header (states, list heads): the segment binned
    /// so far is ready for the fragment stage.
    pub fn publish(&mut self) -> Result<(), EngineResult> {
        let pages = self.alloc.pages_used();
        self.stats.peak_pages = self.stats.peak_pages.max(pages);
        let states = self.states.as_bytes().to_vec();
        let states_at = self.header_page + STATES_OFFSET;
        self.write(states_at, &states)?;
        self.header.states = states_at;
        self.header.state_count = self.states.len() as u32;
        self.header.pages_used = pages as u32;
        self.header.segment = self.stats.partial_renders;
        let mut bytes = self.header.as_bytes().to_vec();
        for page in &self.head_pages {
            bytes.extend(page.to_le_bytes());
        }
        let header_page = self.header_page;
        self.write(header_page, &bytes)?;
        // Each list's open chunk, then every tile's head (0 for a tile
        // no primitive touched), a head page's at once.
        for tile in 0..self.lists.len() {
            if let Some((_, last, _)) = self.lists[tile] {
                let open = self.open_chunks[tile];
                self.write(last, &open)?;
            }
        }
        let mut heads = Vec::with_capacity(TVB_PAGE_BYTES as usize);
        for (tiles, &page) in self
            .lists
            .chunks(HEADS_PER_PAGE as usize)
            .zip(&self.head_pages)
        {
            heads.clear();
            for list in tiles {
                heads.extend(list.map_or(0, |(first, _, _)| first).to_le_bytes());
            }
            tiler_write(&mut self.vm, page, &heads)?;
        }
        Ok(())
    }

    /// After a partial render of the published segment: counts it, frees
    /// its pages and starts the next segment.
    pub fn next_segment(&mut self) -> Result<Result<(), Overflow>, EngineResult> {
        // What a single segment would have needed: every segment's
        // geometry, but the header and list-head pages once.
        let fixed = if self.stats.partial_renders == 0 {
            0
        } else {
            1 + self.head_pages.len() as u64
        };
        self.stats.wanted_pages += self.alloc.pages_used().saturating_sub(fixed);
        self.stats.partial_renders += 1;
        self.start_segment()
    }

    /// Publishes the last segment; returns the pass's statistics.
    pub fn finish(mut self) -> Result<BinningStats, EngineResult> {
        self.publish()?;
        let fixed = if self.stats.partial_renders == 0 {
            0
        } else {
            1 + self.head_pages.len() as u64
        };
        self.stats.wanted_pages += self.alloc.pages_used().saturating_sub(fixed);
        Ok(self.stats)
    }
}

/// A write of the tiler's into the parameter buffer; a fault is the
/// tiler's.
fn tiler_write(vm: &mut GpuVm<'_>, address: u64, bytes: &[u8]) -> Result<(), EngineResult> {
    vm.write(address, bytes)
        .map_err(|f| crate::fault::memory_fault(&f, FaultUnit::Tiler))
}

/// A pass's size in pixels and in tiles: what a triangle's record and
/// the tiles it covers are prepared against.
#[derive(Debug, Clone, Copy)]
struct SceneArea {
    width_px: u32,
    height_px: u32,
    tiles_x: u32,
    tiles_y: u32,
}

/// The tiles a triangle's bounding box touches (first and last, inclusive,
/// across and down).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TileRect {
    columns: (u32, u32),
    rows: (u32, u32),
}

impl TileRect {
    /// The tiles' indices, row by row, in a scene `tiles_x` tiles across.
    fn indices(self, tiles_x: u32) -> impl Iterator<Item = usize> {
        let columns = self.columns.0..=self.columns.1;
        (self.rows.0..=self.rows.1)
            .flat_map(move |ty| columns.clone().map(move |tx| (ty * tiles_x + tx) as usize))
    }
}

/// A batch's triangles as the tiler records them, prepared apart from the
/// parameter buffer: each record's bytes (its state word left for the
/// binner) and the tiles it covers. Preparing (clipping, the viewport
/// transform, culling, the record's words) reads only the shaded
/// vertices, the PPP state and the pass's size, so it may run on another
/// thread, ahead of the binner, which then only allocates, writes and
/// links the records, in order ([`commit_batch`]).
struct PreparedTriangles {
    area: SceneArea,
    /// Every record, one after another.
    bytes: Vec<u8>,
    /// Each record's end in `bytes`, and its tiles.
    records: Vec<(usize, TileRect)>,
    /// A point's four corners as it is prepared: a buffer every point
    /// reuses.
    point_corners: Vec<ScreenVertex>,
}

impl PreparedTriangles {
    fn new(area: SceneArea) -> PreparedTriangles {
        PreparedTriangles {
            area,
            bytes: Vec::new(),
            records: Vec::new(),
            point_corners: Vec::new(),
        }
    }

    /// Empties it (its buffers kept).
    fn clear(&mut self) {
        self.bytes.clear();
        self.records.clear();
    }

    /// Adds one triangle's record (`flags`: the record's,
    /// `RECORD_BACK_FACING` and the extras its vertices' values end
    /// with), of three window positions and their values (as floats, or
    /// as the words the vertex shader stored); nothing for one wholly
    /// outside the pass (or with a position that is not finite).
    fn triangle_of<W: RecordWord>(&mut self, flags: u32, vertices: [(&[f32; 4], &[W]); 3]) {
        let area = self.area;
        let xs = vertices.iter().map(|v| v.0[0]);
        let ys = vertices.iter().map(|v| v.0[1]);
        let (min_x, max_x) = xs.fold((f32::MAX, f32::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
        let (min_y, max_y) = ys.fold((f32::MAX, f32::MIN), |(lo, hi), y| (lo.min(y), hi.max(y)));
        if !(min_x.is_finite() && max_x.is_finite() && min_y.is_finite() && max_y.is_finite())
            || max_x < 0.0
            || max_y < 0.0
            || min_x >= area.width_px as f32
            || min_y >= area.height_px as f32
        {
            return;
        }
        // Draws in one pass may have different output counts: each
        // record says how many varyings its vertices carry.
        let varyings = vertices[0].1.len().min(MAX_RECORD_VALUES) as u32;
        // The state index and flags words, then each vertex's position
        // and varyings, 4 bytes each.
        let vertex_bytes = 4 * (4 + varyings as usize);
        let start = self.bytes.len();
        self.bytes.resize(start + 8 + 3 * vertex_bytes, 0);
        let (head, body) = self.bytes[start..].split_at_mut(8);
        head[4..].copy_from_slice(&(flags | varyings << RECORD_VARYINGS_SHIFT).to_le_bytes());
        // (A vertex with fewer values than the first's, which no draw
        // makes, would leave zeros.)
        for ((position, values), out) in vertices.iter().zip(body.chunks_exact_mut(vertex_bytes)) {
            let words = position
                .iter()
                .map(|p| p.to_bits())
                .chain(values.iter().map(|v| v.bits()));
            for (word, bytes) in words.zip(out.chunks_exact_mut(4)) {
                bytes.copy_from_slice(&word.to_le_bytes());
            }
        }
        let tile_range = |lo: f32, hi: f32, tiles: u32| {
            let first = (lo.max(0.0) as u32) / TILE_PX;
            let last = ((hi.max(0.0) as u32) / TILE_PX).min(tiles - 1);
            (first, last)
        };
        let tiles = TileRect {
            columns: tile_range(min_x, max_x, area.tiles_x),
            rows: tile_range(min_y, max_y, area.tiles_y),
        };
        self.records.push((self.bytes.len(), tiles));
    }

    /// [`PreparedTriangles::triangle_of`] of three vertices.
    fn triangle(&mut self, flags: u32, triangle: [&ScreenVertex; 3]) {
        self.triangle_of(flags, triangle.map(|v| (&v.position, &v.varyings[..])));
    }
}

/// Triangles assembled between watchdog checks.
const TRIANGLE_STRIDE: usize = 4096;

/// Shades, assembles, clips, culls and bins one draw.
#[allow(clippy::too_many_arguments)]
pub fn draw<'a>(
    vm: GpuVm<'_>,
    cores: &mut VertexCores,
    watchdog: &Watchdog<'_>,
    helper: &mut StageHelper,
    usc_exec_base: u64,
    state: &VertexState,
    draw: &Draw,
    binner: &mut Binner<'a>,
    pc: u64,
    on_overflow: &mut dyn FnMut(&mut Binner<'a>) -> Result<(), EngineResult>,
) -> Result<(), EngineResult> {
    let Some(pipeline) = state.pipeline else {
        return Err(unsupported(
            pc,
            FaultUnit::Vdm,
            "a draw before any VDM state update named a vertex shader",
        ));
    };
    let Some(records) = &state.ppp else {
        return Err(unsupported(
            pc,
            FaultUnit::Vdm,
            "a draw before any PPP state update",
        ));
    };
    let binding = bind::bind(
        &vm,
        usc_exec_base.wrapping_add(pipeline),
        usc_exec_base,
        watchdog,
        bind::StageSamplers {
            heap: state.sampler_heap,
            states: state
                .sampler_states
                .unwrap_or(agx_hw::formats::SamplerStates::None),
        },
        Some(&mut *helper),
    )?;
    let ppp = PppState::of(records);
    // The draw's SIMD-groups may be shared out among threads when its
    // program is confined to them and needs no stacks, and no debugger
    // follows it (whose events come in order).
    let parallel = cores.threads > 1
        && binding.spill_bucket == 0
        && watchdog.probe.is_none()
        && crate::shader::packs_primitives(&vm, binding.code);
    let BoundOutputs {
        mut flat,
        noperspective: linear,
    } = bound_outputs(&vm, usc_exec_base, &ppp)?;
    // Every piece of a primitive also keeps its first vertex's layer and
    // viewport word: the viewport transform and the record's layer and
    // scissor all read that vertex's.
    if let Some(at) = ppp.layer_viewport {
        flat.push((at, 0));
    }
    binner.set_state(records, pc)?;
    let topology = Topology::of(draw.primitive, pc)?;
    // Restart applies to indexed draws (a non-indexed draw's sequence
    // has no index to compare).
    let restart = (draw.restart && draw.indices.is_some()).then_some(state.restart_index);
    let outputs = state.outputs.max(4) as usize;
    let assembly = Assembly {
        vm: &vm,
        watchdog,
        draw,
        topology,
        restart,
        provoking_first: state.provoking_first,
    };
    let shading = |instance| Shading {
        vm: &vm,
        watchdog,
        binding: &binding,
        sampler_heap: state.sampler_heap,
        instance,
        draw: pc,
        stride: outputs,
    };
    let outputs_of = BinOutputs {
        ppp: &ppp,
        flat: &flat,
        linear: &linear,
        stride: outputs,
    };
    // A draw of more indices than a batch has primitives (likely more
    // than one batch) whose SIMD-groups may be shared out is shaded a
    // batch ahead on another thread while this one bins.
    let indices = u64::from(draw.count).saturating_mul(u64::from(draw.instances));
    if parallel && indices > BATCH_PRIMITIVES as u64 {
        return shade_ahead(
            &assembly,
            &shading,
            cores,
            &outputs_of,
            binner,
            pc,
            on_overflow,
        );
    }
    let threads = if parallel { cores.threads } else { 1 };
    let mut prepared = PreparedTriangles::new(binner.scene_area());
    assembly.batches(&mut |batch, first_id, instance| {
        let shaded = shade_batch(
            &shading(instance),
            (&mut *cores, threads),
            helper,
            batch,
            first_id,
        )?;
        prepare_batch(&shaded, &outputs_of, 0..shaded.batch.len(), &mut prepared);
        charge_primitives(watchdog, shaded.batch.len())?;
        commit_records(&mut prepared, binner, pc, on_overflow)
    })
}

/// Shades and bins a draw's batches on two threads, as the hardware's
/// vertex shading runs ahead of its tiler: while this thread bins a
/// batch, another shades the next one (with the stage's other threads,
/// if it has more than two), and when it has shaded that and has no
/// batch to shade, helps prepare the records of the batch being binned
/// ([`SharedBatch`]). What is binned, and the first failure reported,
/// are as one thread shading and binning each batch in turn would have
/// them: results are taken in batch order, records committed in order,
/// and a batch's binning failure is reported before the next batch's
/// shading failure. Only for a program whose SIMD-groups may be shared
/// out ([`crate::shader::packs_primitives`]): its shading stores nothing
/// in memory, so running it early changes nothing a partial render, or
/// a later batch, sees.
fn shade_ahead<'a, 's, 'v: 's>(
    assembly: &Assembly<'_, '_>,
    shading: &(impl Fn(u32) -> Shading<'s, 'v> + Sync),
    cores: &mut VertexCores,
    outputs: &BinOutputs<'_>,
    binner: &mut Binner<'a>,
    pc: u64,
    on_overflow: &mut dyn FnMut(&mut Binner<'a>) -> Result<(), EngineResult>,
) -> Result<(), EngineResult> {
    use std::sync::mpsc::TryRecvError;
    let watchdog = assembly.watchdog;
    let preemption = watchdog.preemption;
    let shading_threads = cores.threads.saturating_sub(1).max(1);
    let area = binner.scene_area();
    // Records the shading thread prepared and this one has binned, for
    // it to prepare into again.
    let spare = std::sync::Mutex::new(Vec::<PreparedTriangles>::new());
    std::thread::scope(|scope| {
        let (jobs, job_queue) = std::sync::mpsc::channel::<(Vec<AssembledPrimitive>, u32, u32)>();
        let (shaded_tx, shaded) = std::sync::mpsc::channel();
        let shaded = std::cell::RefCell::new(crate::workers::Receiving::new(shaded));
        preemption.fork_beside(1);
        let spare = &spare;
        let shader = scope.spawn(move || {
            let mut job_queue = crate::workers::Receiving::new(job_queue);
            let _counted_out = crate::preempt::ForkedThread(preemption);
            // (No stacks: the program has no spill bucket.)
            let mut helper = StageHelper::new(None, 0, 0);
            let mut next_job = None;
            loop {
                // (Counted out while it waits for a job: this thread may
                // be parked meanwhile.)
                let job = match next_job.take() {
                    Some(job) => job,
                    None => match preemption.waiting(|| job_queue.recv()) {
                        Ok(job) => job,
                        Err(_) => break,
                    },
                };
                let (batch, first_id, instance) = job;
                let result = shade_batch(
                    &shading(instance),
                    (&mut *cores, shading_threads),
                    &mut helper,
                    batch,
                    first_id,
                )
                .map(|shaded| std::sync::Arc::new(SharedBatch::new(shaded, area)));
                let helping = result.as_ref().ok().map(std::sync::Arc::clone);
                if shaded_tx.send(result).is_err() {
                    break;
                }
                // Until the next batch comes, help prepare this one's
                // records.
                if let Some(shared) = helping {
                    shared.prepare_from_back(outputs, spare, || match job_queue.try_recv() {
                        Ok(job) => {
                            next_job = Some(job);
                            false
                        }
                        Err(TryRecvError::Disconnected) => false,
                        Err(TryRecvError::Empty) => true,
                    });
                }
            }
        });
        // The shading thread's result for the batch it was given last.
        // (If it has ended it panicked: the join below resumes that
        // panic, so the stand-in error is never reported.)
        let take = || {
            preemption
                .waiting(|| shaded.borrow_mut().recv())
                .unwrap_or(Err(EngineResult::Cancelled))
        };
        // The records of the chunks this thread prepares itself.
        let mut own = PreparedTriangles::new(area);
        // (If the shading thread ended with a chunk it claimed left
        // unprepared, it panicked: the join below resumes the panic.)
        let mut bin = |shared: &SharedBatch| -> Result<(), EngineResult> {
            charge_primitives(watchdog, shared.shaded.batch.len())?;
            shared.commit_in_order(
                outputs,
                (&mut own, spare),
                || shader.is_finished(),
                |records| commit_records(records, binner, pc, on_overflow),
            )
        };
        let mut in_flight = false;
        let mut binned = assembly.batches(&mut |batch, first_id, instance| {
            let previous = in_flight.then(take);
            // The shading thread runs while it has a job: it is given the
            // next before this one bins.
            let _ = jobs.send((batch, first_id, instance));
            in_flight = true;
            match previous {
                Some(shared) => bin(&*shared?),
                None => Ok(()),
            }
        });
        if binned.is_ok() && in_flight {
            binned = take().and_then(|shared| bin(&shared));
        }
        drop(jobs);
        preemption
            .waiting(|| shader.join())
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        binned
    })
}

/// Primitives prepared at a time when two threads share a batch's
/// preparing ([`SharedBatch`]).
const PREPARE_CHUNK_PRIMITIVES: usize = 256;

/// A shaded batch whose records the binning thread and the shading
/// thread prepare together, a chunk of primitives at a time: the binning
/// thread from the first chunk on, committing each as it goes; the
/// shading thread from the last chunk back, while it has no batch to
/// shade. Each chunk is prepared once, by the thread that claims it
/// first, so the preparing is shared as the threads' loads allow: on two
/// CPUs, where shading takes about as long as binning, the shading
/// thread has little time over; with more, shading is shared out and it
/// prepares much of the batch.
struct SharedBatch {
    shaded: ShadedBatch,
    /// The pass's size, for the records.
    area: SceneArea,
    chunks: Vec<PreparedChunk>,
}

/// One chunk of a [`SharedBatch`].
#[derive(Default)]
struct PreparedChunk {
    claimed: std::sync::atomic::AtomicBool,
    /// Its records, once the shading thread has prepared them.
    prepared: std::sync::Mutex<Option<PreparedTriangles>>,
}

impl SharedBatch {
    fn new(shaded: ShadedBatch, area: SceneArea) -> SharedBatch {
        let chunks = shaded.batch.len().div_ceil(PREPARE_CHUNK_PRIMITIVES);
        SharedBatch {
            shaded,
            area,
            chunks: (0..chunks).map(|_| PreparedChunk::default()).collect(),
        }
    }

    /// The primitives of chunk `index`.
    fn range(&self, index: usize) -> std::ops::Range<usize> {
        let start = index * PREPARE_CHUNK_PRIMITIVES;
        start..(start + PREPARE_CHUNK_PRIMITIVES).min(self.shaded.batch.len())
    }

    /// The shading thread's part: prepares chunks from the last back,
    /// into records from `spare` (or new ones), while `go_on()` and until
    /// it reaches one the binning thread has claimed.
    fn prepare_from_back(
        &self,
        outputs: &BinOutputs<'_>,
        spare: &std::sync::Mutex<Vec<PreparedTriangles>>,
        mut go_on: impl FnMut() -> bool,
    ) {
        for chunk in (0..self.chunks.len()).rev() {
            if !go_on() || !self.claim(chunk) {
                return;
            }
            let mut records = lock(spare)
                .pop()
                .unwrap_or_else(|| PreparedTriangles::new(self.area));
            prepare_batch(&self.shaded, outputs, self.range(chunk), &mut records);
            *lock(&self.chunks[chunk].prepared) = Some(records);
        }
    }

    /// The binning thread's part: gives `commit` each chunk's records in
    /// order, preparing those the shading thread has not claimed into
    /// `own` and waiting for those it has (the records then go to
    /// `spare`); `Cancelled` if that thread ended (`ended`) leaving one it
    /// claimed unprepared.
    fn commit_in_order(
        &self,
        outputs: &BinOutputs<'_>,
        (own, spare): (
            &mut PreparedTriangles,
            &std::sync::Mutex<Vec<PreparedTriangles>>,
        ),
        ended: impl Fn() -> bool,
        mut commit: impl FnMut(&mut PreparedTriangles) -> Result<(), EngineResult>,
    ) -> Result<(), EngineResult> {
        for chunk in 0..self.chunks.len() {
            if self.claim(chunk) {
                prepare_batch(&self.shaded, outputs, self.range(chunk), own);
                commit(own)?;
                continue;
            }
            let Some(mut records) = self.wait_for(chunk, &ended) else {
                return Err(EngineResult::Cancelled);
            };
            let committed = commit(&mut records);
            lock(spare).push(records);
            committed?;
        }
        Ok(())
    }

    /// Claims chunk `index` for the calling thread to prepare: false if
    /// the other thread has.
    fn claim(&self, index: usize) -> bool {
        !self.chunks[index]
            .claimed
            .swap(true, std::sync::atomic::Ordering::AcqRel)
    }

    /// The records of chunk `index`, which the shading thread claimed,
    /// once it has prepared them (it does nothing else first: a chunk's
    /// preparing is short and has no check point to park at); `None` if
    /// that thread ended (`ended`) without.
    fn wait_for(&self, index: usize, ended: impl Fn() -> bool) -> Option<PreparedTriangles> {
        let slot = &self.chunks[index].prepared;
        let mut spins = 0u8;
        loop {
            if let Some(records) = lock(slot).take() {
                return Some(records);
            }
            if ended() {
                return lock(slot).take();
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// A lock on a mutex no holder panics with (its value is whole either
/// way).
fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A primitive as assembled: its vertex ids and how many of them it has
/// (1 to 3).
type AssembledPrimitive = ([u32; 3], usize);

/// What assembling a draw's primitives reads.
struct Assembly<'s, 'a> {
    vm: &'s GpuVm<'a>,
    watchdog: &'s Watchdog<'a>,
    draw: &'s Draw,
    topology: Topology,
    restart: Option<u32>,
    provoking_first: bool,
}

impl Assembly<'_, '_> {
    /// Streams each instance's primitives, in order, to `each` in batches
    /// of up to [`BATCH_PRIMITIVES`], with the first one's id (counting
    /// the instance's primitives) and the instance.
    fn batches(
        &self,
        each: &mut dyn FnMut(Vec<AssembledPrimitive>, u32, u32) -> Result<(), EngineResult>,
    ) -> Result<(), EngineResult> {
        let draw = self.draw;
        for instance in 0..draw.instances {
            // An instance costs a unit even when it has no primitives, so
            // a draw of 2^32 empty instances meets the watchdog too.
            if instance.is_multiple_of(TRIANGLE_STRIDE as u32) {
                self.watchdog.charge(TRIANGLE_STRIDE as u64);
                if self.watchdog.expired() {
                    return Err(EngineResult::Timeout);
                }
            }
            let mut assembler = Assembler::new(self.topology, self.provoking_first);
            let mut next_index = 0u64;
            let mut next_id = 0u32;
            // (A batch holds at most a primitive an index: a small draw's
            // is small.)
            let capacity = BATCH_PRIMITIVES.min(draw.count as usize);
            let mut batch: Vec<AssembledPrimitive> = Vec::with_capacity(capacity);
            loop {
                // Stream the draw's indices (or vertex numbers) into
                // primitives, a batch at a time.
                let done = next_index >= u64::from(draw.count);
                if !done {
                    let chunk = (u64::from(draw.count) - next_index).min(INDEX_CHUNK);
                    for raw in read_indices(self.vm, draw, next_index, chunk)? {
                        if self.restart == Some(raw) {
                            assembler.end_run(&mut |p| batch.push(p));
                        } else {
                            assembler.push(raw.wrapping_add(draw.start), &mut |p| batch.push(p));
                        }
                    }
                    next_index += chunk;
                } else {
                    assembler.end_run(&mut |p| batch.push(p));
                }
                if batch.len() >= BATCH_PRIMITIVES || (done && !batch.is_empty()) {
                    let first_id = next_id;
                    next_id = next_id.wrapping_add(batch.len() as u32);
                    // The batch goes (to another thread, perhaps); the
                    // next one, if any, gets its own.
                    let next = if done {
                        Vec::new()
                    } else {
                        Vec::with_capacity(capacity)
                    };
                    each(std::mem::replace(&mut batch, next), first_id, instance)?;
                }
                if done {
                    break;
                }
            }
        }
        Ok(())
    }
}

/// A batch's distinct vertex ids in the order they first appear, and each
/// primitive's vertices as indices into them. Ids that lie close together
/// (a batch's span of ids at most [`DENSE_SPAN_PER_ID`] times its count,
/// as a mesh's indices do) are looked up in a table indexed by id;
/// others through SipHash with a random key: the ids come from the
/// client's index buffer, and a hasher whose collisions can be chosen
/// would let a draw spend time the watchdog does not charge. (The hashing
/// was a third of the serial vertex work of the bunny.)
fn distinct_vertices(batch: &[([u32; 3], usize)]) -> (Vec<u32>, Vec<[usize; 3]>) {
    let mut unique = Vec::with_capacity(3 * batch.len());
    let ids = || {
        batch
            .iter()
            .flat_map(|(ids, n)| ids.iter().take(*n).copied())
    };
    let (count, lo, hi) = ids().fold((0u64, u32::MAX, 0), |(count, lo, hi), id| {
        (count + 1, lo.min(id), hi.max(id))
    });
    let span = u64::from(hi.saturating_sub(lo)) + 1;
    let mut slots_of = |slot_of: &mut dyn FnMut(u32, &mut Vec<u32>) -> usize| -> Vec<[usize; 3]> {
        batch
            .iter()
            .map(|(ids, n)| {
                let mut slots = [0; 3];
                for (slot, &id) in slots.iter_mut().zip(ids).take(*n) {
                    *slot = slot_of(id, &mut unique);
                }
                slots
            })
            .collect()
    };
    let slots = if span <= (DENSE_SPAN_PER_ID * count).max(64) {
        let mut table = vec![u32::MAX; span as usize];
        slots_of(&mut |id, unique| {
            let entry = &mut table[(id - lo) as usize];
            if *entry == u32::MAX {
                *entry = unique.len() as u32;
                unique.push(id);
            }
            *entry as usize
        })
    } else {
        let mut slot_of_id = std::collections::HashMap::with_capacity(count as usize);
        slots_of(&mut |id, unique| {
            *slot_of_id.entry(id).or_insert_with(|| {
                unique.push(id);
                unique.len() - 1
            })
        })
    };
    (unique, slots)
}

/// How far apart, per id, a batch's vertex ids may lie for
/// [`distinct_vertices`] to look them up by table (its 4-byte entries
/// then cost at most 32 bytes an id).
const DENSE_SPAN_PER_ID: u64 = 8;

/// Indices read from the index buffer at a time.
const INDEX_CHUNK: u64 = 4096;

/// A batch of primitives with their vertices shaded.
struct ShadedBatch {
    /// The primitives.
    batch: Vec<AssembledPrimitive>,
    /// The first one's id.
    first_id: u32,
    /// Each primitive's vertices as slots of `shaded`.
    slots: Vec<[usize; 3]>,
    /// The distinct vertices' outputs, the shading's `stride` words a
    /// vertex.
    shaded: Vec<u32>,
}

/// Shades the distinct vertices of a batch of primitives once (like the
/// hardware's post-transform cache: a vertex shader is a function of its
/// ids), on up to `threads` threads when the program's SIMD-groups may
/// be shared out.
fn shade_batch(
    shading: &Shading<'_, '_>,
    (cores, threads): (&mut VertexCores, usize),
    helper: &mut StageHelper,
    batch: Vec<AssembledPrimitive>,
    first_id: u32,
) -> Result<ShadedBatch, EngineResult> {
    let (unique, slots) = distinct_vertices(&batch);
    let mut shaded = Vec::new();
    shade_vertices(shading, (cores, threads), helper, &unique, &mut shaded)?;
    Ok(ShadedBatch {
        batch,
        first_id,
        slots,
        shaded,
    })
}

/// What binning a shaded batch needs besides it: the PPP state, the
/// outputs the fragment shader reads flat and without perspective
/// ([`BoundOutputs`]), and the words kept a vertex.
struct BinOutputs<'s> {
    ppp: &'s PppState,
    flat: &'s [(usize, usize)],
    linear: &'s [usize],
    stride: usize,
}

/// Clips, culls and prepares the `primitives` of a shaded batch as
/// records (into `prepared`, emptied first): the part of binning that
/// reads only the batch and the state.
fn prepare_batch(
    shaded: &ShadedBatch,
    outputs: &BinOutputs<'_>,
    primitives: std::ops::Range<usize>,
    prepared: &mut PreparedTriangles,
) {
    let BinOutputs {
        ppp,
        flat,
        linear,
        stride,
    } = *outputs;
    let ShadedBatch {
        batch,
        first_id,
        slots,
        shaded,
    } = shaded;
    let vertex = |slot: usize| &shaded[slot * stride..(slot + 1) * stride];
    // Triangles with nothing to carry over (flat values, the primitive
    // id) or clip against but the depth range may be binned straight from
    // the shaded words ([`bin_unclipped_triangle`]).
    let plain = flat.is_empty() && !ppp.primitive_id && ppp.clip_distances.is_empty();
    prepared.clear();
    // Rasteriser discard: the vertex shader ran (its stores, transform
    // feedback's, happened); nothing is drawn.
    if ppp.rasterizer_discard {
        return;
    }
    let clip = |slot: usize, corner: u8| ClipVertex {
        position: std::array::from_fn(|c| f32::from_bits(vertex(slot)[c])),
        varyings: vertex(slot)[4..]
            .iter()
            .map(|v| f32::from_bits(*v))
            .collect(),
        corner: Some(corner),
    };
    let first = primitives.start;
    for (k, ((_, n), at)) in batch[primitives.clone()]
        .iter()
        .zip(&slots[primitives])
        .enumerate()
    {
        let id = first_id.wrapping_add((first + k) as u32);
        match n {
            1 => bin_point(prepared, ppp, clip(at[0], 0), id),
            2 => {
                let line = [clip(at[0], 0), clip(at[1], 1)];
                let provoking = flat_values(flat, &line);
                let viewport = *ppp.viewport_of(&line[0]);
                let mut clipped = clip_noperspective(line, linear, |[a, b]| {
                    clip_segment(
                        a,
                        b,
                        &ppp.clip_distances,
                        (!ppp.cull.depth_clamp, ppp.cull.depth_clip),
                    )
                    .map_or_else(Vec::new, |(a, b)| vec![a, b])
                });
                if let [a, b] = &mut clipped[..] {
                    set_flat_values(&provoking, [&mut *a, &mut *b]);
                    let (a, b) = (to_screen(a, &viewport), to_screen(b, &viewport));
                    bin_line(prepared, ppp, &a, &b, id);
                }
            }
            _ => {
                let words = [vertex(at[0]), vertex(at[1]), vertex(at[2])];
                if plain && bin_unclipped_triangle(prepared, ppp, words) {
                    continue;
                }
                let triangle = [clip(at[0], 0), clip(at[1], 1), clip(at[2], 2)];
                let provoking = flat_values(flat, &triangle);
                let viewport = *ppp.viewport_of(&triangle[0]);
                let mut polygon = clip_noperspective(triangle, linear, |triangle| {
                    let polygon = match (ppp.cull.depth_clamp, ppp.cull.depth_clip) {
                        (true, _) => clip_behind(triangle),
                        (false, true) => clip_far(clip_near(triangle)),
                        (false, false) => clip_near(triangle),
                    };
                    clip_polygon(polygon, &ppp.clip_distances)
                });
                set_flat_values(&provoking, polygon.iter_mut());
                bin_polygon(prepared, (ppp, &viewport), polygon, id);
            }
        }
    }
}

/// Charges the watchdog a unit for each of a batch's `primitives`
/// assembled (their shading was charged per instruction), before they
/// are binned.
fn charge_primitives(watchdog: &Watchdog<'_>, primitives: usize) -> Result<(), EngineResult> {
    watchdog.charge(primitives as u64);
    if watchdog.expired() {
        return Err(EngineResult::Timeout);
    }
    Ok(())
}

/// Bins prepared records in order (the binning's part that writes the
/// parameter buffer), growing the buffer or rendering what is binned
/// when it runs dry.
fn commit_records<'a>(
    prepared: &mut PreparedTriangles,
    binner: &mut Binner<'a>,
    pc: u64,
    on_overflow: &mut dyn FnMut(&mut Binner<'a>) -> Result<(), EngineResult>,
) -> Result<(), EngineResult> {
    let mut start = 0;
    for &(end, tiles) in &prepared.records {
        let record = &mut prepared.bytes[start..end];
        start = end;
        if binner.record(record, tiles)?.is_err() {
            // The buffer ran dry: grow it or render what is binned (a
            // partial render), then bin the record again.
            binner.stats.overflows += 1;
            on_overflow(binner)?;
            if binner.record(record, tiles)?.is_err() {
                return Err(unsupported(
                    pc,
                    FaultUnit::Tiler,
                    "a primitive that does not fit in the parameter buffer even after it was grown or partially rendered",
                ));
            }
        }
    }
    Ok(())
}

/// The fragment shader's coefficient binding table (its header, and each
/// binding with its address); `None` for a shader with no bindings.
#[allow(clippy::type_complexity)]
pub(crate) fn read_bindings(
    vm: &GpuVm<'_>,
    usc_exec_base: u64,
    ppp: &PppState,
) -> Result<Option<CfBindings>, EngineResult> {
    let Some(table) = ppp.cf_bindings.filter(|_| ppp.cf_binding_count > 0) else {
        return Ok(None);
    };
    let table = usc_exec_base.wrapping_add(table);
    let header = CfBindingHeader::decode_fields(&read_words::<4>(vm, table)?);
    let bindings = (0..u64::from(ppp.cf_binding_count))
        .map(|i| {
            let at = table + 4 + 4 * i;
            Ok((at, CfBinding::decode_fields(&read_words::<4>(vm, at)?)))
        })
        .collect::<Result<_, EngineResult>>()?;
    Ok(Some((header, bindings)))
}

/// A coefficient binding table: its header, and each binding with its
/// address (for the faults that name it).
pub(crate) type CfBindings = (CfBindingHeader, Vec<(u64, CfBinding)>);

/// What the fragment shader's bindings ask of the clipper, from one read
/// of its coefficient binding table. `flat`: the vertex outputs (indices
/// from the vertex shader's slot 4) it reads flat, each with the vertex
/// of its primitive whose value it takes (0-2, from the binding's shade
/// model); the PPP sets a primitive's coefficients up once, so every
/// fragment of it gets that vertex's value: the pieces clipping cuts it
/// into, and the edges or corners a polygon mode draws, included (GL's
/// provoking vertex of the polygon). `noperspective`: the outputs it
/// interpolates without perspective (`ShadeModel::Linear`, GL's
/// `noperspective`), each once (two bindings may read the same slots:
/// Mesa's two-sided colours bind a back colour the vertex shader does not
/// write over the front one's); clipping interpolates them in window
/// space.
pub(crate) struct BoundOutputs {
    pub(crate) flat: Vec<(usize, usize)>,
    pub(crate) noperspective: Vec<usize>,
}

/// [`BoundOutputs`] of the pipeline `ppp` names.
pub(crate) fn bound_outputs(
    vm: &GpuVm<'_>,
    usc_exec_base: u64,
    ppp: &PppState,
) -> Result<BoundOutputs, EngineResult> {
    let mut out = BoundOutputs {
        flat: Vec::new(),
        noperspective: Vec::new(),
    };
    let Some((_, bindings)) = read_bindings(vm, usc_exec_base, ppp)? else {
        return Ok(out);
    };
    let first_output_slot = 1 + u32::from(ppp.frag_coord_z);
    for (_, b) in bindings {
        if b.source != CoefficientSource::Varying {
            continue;
        }
        let flat_vertex = match b.shade_model {
            ShadeModel::FlatVertex0 => Some(0),
            ShadeModel::FlatVertex1 => Some(1),
            ShadeModel::FlatVertex2 => Some(2),
            ShadeModel::Linear => None,
            _ => continue,
        };
        for c in 0..b.components {
            let Some(output) = (b.base_slot + c).checked_sub(first_output_slot) else {
                continue;
            };
            match flat_vertex {
                Some(vertex) => out.flat.push((output as usize, vertex)),
                None => out.noperspective.push(output as usize),
            }
        }
    }
    out.noperspective.sort_unstable();
    out.noperspective.dedup();
    Ok(out)
}

/// The values of a primitive's flat outputs ([`BoundOutputs`]):
/// each output's value at the vertex its binding names (a line's last
/// for the third).
fn flat_values(flat: &[(usize, usize)], primitive: &[ClipVertex]) -> Vec<(usize, f32)> {
    flat.iter()
        .filter_map(|&(output, vertex)| {
            let v = primitive.get(vertex.min(primitive.len().saturating_sub(1)))?;
            Some((output, *v.varyings.get(output)?))
        })
        .collect()
}

/// Gives every vertex of what is left of a primitive after clipping (the
/// vertices clipping made included) the primitive's flat values: the
/// PPP sets a primitive's coefficients up once, so each piece, edge and
/// corner of it draws the provoking vertex's value.
fn set_flat_values<'v>(
    values: &[(usize, f32)],
    vertices: impl IntoIterator<Item = &'v mut ClipVertex>,
) {
    if values.is_empty() {
        return;
    }
    for v in vertices {
        for &(output, value) in values {
            if let Some(slot) = v.varyings.get_mut(output) {
                *slot = value;
            }
        }
    }
}

/// A value of a vertex as a record holds it: a float's bits, or a word
/// the vertex shader stored.
trait RecordWord: Copy {
    fn bits(self) -> u32;
}

impl RecordWord for f32 {
    fn bits(self) -> u32 {
        self.to_bits()
    }
}

impl RecordWord for u32 {
    fn bits(self) -> u32 {
        self
    }
}

/// `v` with the primitive id appended to its values when the fragment
/// shader reads it (and the flag saying so).
fn with_primitive_id(
    ppp: &PppState,
    mut v: ScreenVertex,
    id: u32,
    flags: &mut u32,
) -> ScreenVertex {
    if ppp.primitive_id {
        push_primitive_id(&mut v.varyings, id);
        *flags |= RECORD_PRIMITIVE_ID;
    }
    v
}

/// Appends the primitive id to a vertex's values, as the last the record
/// holds.
fn push_primitive_id(varyings: &mut Vec<f32>, id: u32) {
    varyings.truncate(MAX_RECORD_VALUES - 1);
    varyings.push(f32::from_bits(id));
}

/// The record flags naming the layer and the viewport vertex `v` sends
/// its primitive to (the provoking vertex's, for the primitives Mesa
/// draws layered: every vertex of them carries the same).
fn layer_flags(ppp: &PppState, v: &ScreenVertex) -> u32 {
    layer_flags_for(ppp, &v.varyings)
}

/// [`layer_flags`] of a vertex with these values.
fn layer_flags_for(ppp: &PppState, varyings: &[f32]) -> u32 {
    let layer = ppp
        .layer_viewport
        .and_then(|at| varyings.get(at))
        .map_or(0, |word| word.to_bits() & RECORD_LAYER_MASK);
    // The viewport the transform took (0 for an index past them).
    let index = ppp.viewport_index(varyings);
    let viewport = if index < ppp.viewports.len() {
        index.min(0xF) as u32
    } else {
        0
    };
    layer << RECORD_LAYER_SHIFT | viewport << RECORD_VIEWPORT_SHIFT
}

/// Clips, culls and bins what is left of one triangle after clipping:
/// filled, or (polygon mode) its edges as lines or its corners as
/// points.
fn bin_polygon(
    prepared: &mut PreparedTriangles,
    (ppp, viewport): (&PppState, &Viewport),
    polygon: Vec<ClipVertex>,
    id: u32,
) {
    if polygon.len() < 3 {
        return;
    }
    let mut screen: Vec<ScreenVertex> = polygon
        .into_iter()
        .map(|v| into_screen(v, viewport))
        .collect();
    // The facing of the whole polygon (its first triangle with area).
    let area = (1..screen.len() - 1)
        .map(|k| {
            area_of(
                &screen[0].position,
                &screen[k].position,
                &screen[k + 1].position,
            )
        })
        .find(|a| *a != 0.0 && a.is_finite());
    let Some((front, mode)) = area.and_then(|area| facing(ppp, area)) else {
        return;
    };
    match mode {
        // The polygon's edges, edges made by clipping included (what the
        // hardware does with those, `draw_clipped_edges`, is not
        // modelled), and its corners.
        PolygonMode::Line => {
            for i in 0..screen.len() {
                let (a, b) = (&screen[i], &screen[(i + 1) % screen.len()]);
                bin_line(prepared, ppp, a, b, id);
            }
            return;
        }
        PolygonMode::Point => {
            for v in &screen {
                bin_screen_point(prepared, ppp, v, id);
            }
            return;
        }
        _ => {}
    }
    let whole_triangle = screen.len() == 3;
    for k in 1..screen.len() - 1 {
        let mut flags = layer_flags(ppp, &screen[0]) | if front { 0 } else { RECORD_BACK_FACING };
        // A triangle's one triangle takes its vertices; a fan's copies.
        let corner = |screen: &mut Vec<ScreenVertex>, i: usize| {
            if whole_triangle {
                std::mem::replace(
                    &mut screen[i],
                    ScreenVertex {
                        position: [0.0; 4],
                        varyings: Vec::new(),
                    },
                )
            } else {
                screen[i].clone()
            }
        };
        let tri = [
            corner(&mut screen, 0),
            corner(&mut screen, k),
            corner(&mut screen, k + 1),
        ]
        .map(|v| with_primitive_id(ppp, v, id, &mut flags));
        let area = signed_area(&tri);
        if area == 0.0 || !area.is_finite() {
            continue;
        }
        prepared.triangle(flags, tri.each_ref());
    }
}

/// Whether a polygon of signed area `area` (window space, nonzero) faces
/// front, and the polygon mode of its facing; `None` when that facing is
/// culled.
fn facing(ppp: &PppState, area: f32) -> Option<(bool, PolygonMode)> {
    // Counter-clockwise on screen (y down) is clockwise in the usual
    // y-up sense.
    let front = (area < 0.0) == ppp.cull.front_face_ccw;
    if (front && ppp.cull.cull_front) || (!front && ppp.cull.cull_back) {
        return None;
    }
    // Each face has its own polygon mode (the back face's record, when
    // the state has one).
    let face = if front {
        ppp.front_face
    } else {
        ppp.back_face.or(ppp.front_face)
    };
    Some((front, face.map_or(PolygonMode::Fill, |f| f.polygon_mode)))
}

/// Bins a triangle that clipping would keep whole, straight from the
/// words its vertices' shader stored (position, then values), as
/// `clip_*`, [`bin_polygon`] and [`bin_triangle`] bin it: no vertex is
/// built, and one culled allocates nothing. The caller has checked that
/// the state has no flat values, primitive ids or clip distances. False
/// (nothing done) for a triangle clipping would cut, or one whose facing
/// draws lines or points: those take the general path.
fn bin_unclipped_triangle(
    prepared: &mut PreparedTriangles,
    ppp: &PppState,
    words: [&[u32]; 3],
) -> bool {
    let clip: [[f32; 4]; 3] = words.map(|w| std::array::from_fn(|c| f32::from_bits(w[c])));
    // What `clip_behind`, or `clip_near` (and `clip_far` with depth
    // clipping), keep without cutting.
    let whole = clip
        .iter()
        .all(|p| match (ppp.cull.depth_clamp, ppp.cull.depth_clip) {
            (true, _) => p[3] > 0.0,
            (false, depth_clip) => {
                p[2].min(p[3]) >= 0.0 && p[3] > 0.0 && (!depth_clip || p[3] - p[2] >= 0.0)
            }
        });
    if !whole {
        return false;
    }
    // No layer or viewport output (the caller's check: no flat values):
    // viewport 0, layer 0.
    let viewport = ppp.viewport_for(&[]);
    let screen = clip.map(|p| window_position(&p, viewport));
    let area = area_of(&screen[0], &screen[1], &screen[2]);
    if area == 0.0 || !area.is_finite() {
        return true;
    }
    let Some((front, mode)) = facing(ppp, area) else {
        return true;
    };
    if matches!(mode, PolygonMode::Line | PolygonMode::Point) {
        return false;
    }
    let flags = layer_flags_for(ppp, &[]) | if front { 0 } else { RECORD_BACK_FACING };
    let parts = [0, 1, 2].map(|v| (&screen[v], &words[v][4..]));
    prepared.triangle_of(flags, parts);
    true
}

/// Bins a line from `a` to `b` (window space) as the parallelogram an
/// aliased wide line covers: the segment moved by half the width either
/// way along the minor axis (y for a line more horizontal than
/// vertical), so that it covers the pixel centres within half the width
/// of the line along that axis, between its endpoints along the major
/// one. The whole parallelogram is moved back towards the first endpoint
/// by one step of the rasteriser's 1/256-pixel grid, so that an endpoint
/// on a pixel centre draws that pixel at the start of the line and not at
/// its end, whichever way the line runs: GL's diamond-exit rule at
/// pixel-centred endpoints, which GL conformance tests draw. What the
/// hardware does beyond that is not public (Mesa's Vulkan driver
/// advertises Bresenham lines only). Two triangles, each with its first
/// corner from `a` and its last from `b`, so a flat varying comes from
/// the line's provoking vertex (first or last), and every value
/// interpolates along the line and not across it.
fn bin_line(
    prepared: &mut PreparedTriangles,
    ppp: &PppState,
    a: &ScreenVertex,
    b: &ScreenVertex,
    id: u32,
) {
    let (dx, dy) = (b.position[0] - a.position[0], b.position[1] - a.position[1]);
    if !(dx.is_finite() && dy.is_finite()) || (dx == 0.0 && dy == 0.0) {
        return;
    }
    let half = ppp.line_width_px / 2.0;
    const STEP_PX: f32 = 1.0 / 256.0;
    let ((ox, oy), back) = if dx.abs() >= dy.abs() {
        ((0.0, half), (-STEP_PX.copysign(dx), 0.0))
    } else {
        ((half, 0.0), (0.0, -STEP_PX.copysign(dy)))
    };
    let moved = |v: &ScreenVertex, sign: f32| {
        let mut v = v.clone();
        v.position[0] += sign * ox + back.0;
        v.position[1] += sign * oy + back.1;
        v
    };
    let (a0, a1, b0, b1) = (moved(a, -1.0), moved(a, 1.0), moved(b, -1.0), moved(b, 1.0));
    for triangle in [[a0.clone(), a1, b1.clone()], [a0, b0, b1]] {
        let mut flags = layer_flags(ppp, a);
        let triangle = triangle.map(|v| with_primitive_id(ppp, v, id, &mut flags));
        prepared.triangle(flags, triangle.each_ref());
    }
}

/// Bins a point: dropped when clipping would remove its centre (the
/// near plane, or a clip distance below 0).
fn bin_point(prepared: &mut PreparedTriangles, ppp: &PppState, v: ClipVertex, id: u32) {
    let in_depth = ppp.cull.depth_clamp
        || (v.position[2] >= 0.0 && (!ppp.cull.depth_clip || v.position[2] <= v.position[3]));
    let visible = in_depth
        && v.position[3] > 0.0
        && ppp
            .clip_distances
            .iter()
            .all(|&p| clip_distance(&v, p) >= 0.0);
    if !visible {
        return;
    }
    let viewport = ppp.viewport_of(&v);
    let screen = into_screen(v, viewport);
    bin_screen_point(prepared, ppp, &screen, id);
}

/// Bins a point in window space as the square of its size centred on it
/// (the vertex's point size output, or 1 pixel without one), two
/// triangles carrying the point coordinate when the object type is a
/// point sprite: (0, 0) at the top-left corner for `PointSpriteUv01`,
/// which Mesa chooses for GL's upper-left origin, (0, 1) there for
/// `PointSpriteUv10`. What the hardware does with sizes under one pixel
/// or past its 511.95 limit is not public: the size is used as given (Mesa
/// clamps it to at least 1 in the vertex shader).
fn bin_screen_point(prepared: &mut PreparedTriangles, ppp: &PppState, v: &ScreenVertex, id: u32) {
    let size = ppp
        .point_size
        .map_or(1.0, |at| v.varyings.get(at).copied().unwrap_or(1.0));
    if !(size > 0.0 && size.is_finite()) {
        return;
    }
    let half = size / 2.0;
    let sprite = match ppp.object_type {
        ObjectType::PointSpriteUv01 => Some(false),
        ObjectType::PointSpriteUv10 => Some(true),
        _ => None,
    };
    // Corners top-left, top-right, bottom-right, bottom-left (y down),
    // written into the preparation's buffers (a point's values copied
    // four times, without allocating).
    let mut flags = layer_flags(ppp, v);
    if sprite.is_some() {
        flags |= RECORD_POINT_SPRITE;
    }
    if ppp.primitive_id {
        flags |= RECORD_PRIMITIVE_ID;
    }
    let mut corners = std::mem::take(&mut prepared.point_corners);
    corners.resize_with(4, || ScreenVertex {
        position: [0.0; 4],
        varyings: Vec::new(),
    });
    let offsets = [(-1.0f32, -1.0f32), (1.0, -1.0), (1.0, 1.0), (-1.0, 1.0)];
    for (corner, (sx, sy)) in corners.iter_mut().zip(offsets) {
        corner.position = v.position;
        corner.position[0] += sx * half;
        corner.position[1] += sy * half;
        corner.varyings.clear();
        corner.varyings.extend_from_slice(&v.varyings);
        if let Some(flip) = sprite {
            corner.varyings.truncate(MAX_RECORD_VALUES - 3);
            let s = (sx + 1.0) / 2.0;
            let t = (sy + 1.0) / 2.0;
            corner.varyings.push(s);
            corner.varyings.push(if flip { 1.0 - t } else { t });
        }
        if ppp.primitive_id {
            push_primitive_id(&mut corner.varyings, id);
        }
    }
    // Top-left, top-right, bottom-right; then top-left, bottom-left,
    // bottom-right.
    let [tl, tr, br, bl] = [&corners[0], &corners[1], &corners[2], &corners[3]];
    prepared.triangle(flags, [tl, tr, br]);
    prepared.triangle(flags, [tl, bl, br]);
    prepared.point_corners = corners;
}

/// Primitives assembled, shaded and binned together. A draw is streamed
/// a batch at a time, so the host memory it needs is bounded by the
/// batch, not by its (client-chosen, up to 2^32) vertex count; the
/// hardware's index fetch streams too, and its post-transform cache is
/// small.
const BATCH_PRIMITIVES: usize = 4096;

/// The topologies the VDM assembles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Topology {
    Points,
    Lines,
    LineStrip,
    LineLoop,
    Triangles,
    TriangleStrip,
    TriangleFan,
}

impl Topology {
    fn of(primitive: Primitive, pc: u64) -> Result<Topology, EngineResult> {
        Ok(match primitive {
            Primitive::Points => Topology::Points,
            Primitive::Lines => Topology::Lines,
            Primitive::LineStrip => Topology::LineStrip,
            Primitive::LineLoop => Topology::LineLoop,
            Primitive::Triangles => Topology::Triangles,
            Primitive::TriangleStrip => Topology::TriangleStrip,
            Primitive::TriangleFan => Topology::TriangleFan,
            primitive => {
                return Err(unsupported(
                    pc,
                    FaultUnit::Vdm,
                    format_args!(
                        "a draw of {primitive:?} (points, lines, line strips and loops, triangle lists, strips and fans are modelled; Mesa lowers quads)"
                    ),
                ))
            }
        })
    }
}

/// Assembles a draw's vertices into primitives one vertex at a time, as
/// the API orders them: every other strip triangle swaps two of its
/// corners (which two, `VertexState::provoking_first` says), a fan's triangles share its first vertex, a loop's last line
/// goes back to its first vertex. A run ends at a restart index (and at
/// the end of the draw), and the next vertex starts a new strip, fan,
/// loop or list.
struct Assembler {
    topology: Topology,
    /// `VertexState::provoking_first`.
    provoking_first: bool,
    /// The run's first vertex, the one before the last, and the last.
    first: u32,
    before: u32,
    last: u32,
    /// Vertices in the run so far.
    count: u64,
}

impl Assembler {
    fn new(topology: Topology, provoking_first: bool) -> Assembler {
        Assembler {
            topology,
            provoking_first,
            first: 0,
            before: 0,
            last: 0,
            count: 0,
        }
    }

    /// Adds vertex `v`; `emit` gets each primitive it completes (its
    /// vertices and how many there are).
    fn push(&mut self, v: u32, emit: &mut dyn FnMut(([u32; 3], usize))) {
        let k = self.count;
        match self.topology {
            Topology::Points => emit(([v, 0, 0], 1)),
            Topology::Lines if k % 2 == 1 => emit(([self.last, v, 0], 2)),
            Topology::LineStrip | Topology::LineLoop if k >= 1 => emit(([self.last, v, 0], 2)),
            Topology::Triangles if k % 3 == 2 => emit(([self.before, self.last, v], 3)),
            Topology::TriangleStrip if k >= 2 && k % 2 == 1 && self.provoking_first => {
                emit(([self.before, v, self.last], 3))
            }
            Topology::TriangleStrip if k >= 2 && k % 2 == 1 => {
                emit(([self.last, self.before, v], 3))
            }
            Topology::TriangleStrip if k >= 2 => emit(([self.before, self.last, v], 3)),
            Topology::TriangleFan if k >= 2 => emit(([self.first, self.last, v], 3)),
            _ => {}
        }
        if k == 0 {
            self.first = v;
        }
        self.before = self.last;
        self.last = v;
        self.count += 1;
    }

    /// Ends the run: a loop closes; the next vertex starts afresh.
    fn end_run(&mut self, emit: &mut dyn FnMut(([u32; 3], usize))) {
        if self.topology == Topology::LineLoop && self.count >= 2 {
            emit(([self.last, self.first, 0], 2));
        }
        self.count = 0;
    }
}

/// `count` entries of a draw's vertex sequence from position `first`:
/// the index buffer's values for an indexed draw, raw (the restart index
/// is compared with them before the base vertex is added), or the
/// positions themselves.
fn read_indices(
    vm: &GpuVm<'_>,
    draw: &Draw,
    first: u64,
    count: u64,
) -> Result<Vec<u32>, EngineResult> {
    let Some((buffer, size)) = draw.indices else {
        return Ok((first..first + count).map(|p| p as u32).collect());
    };
    let index_bytes = index_bytes(size) as usize;
    let mut raw = vec![0u8; count as usize * index_bytes];
    vm.read(buffer.wrapping_add(first * index_bytes as u64), &mut raw)
        .map_err(|f| EngineResult::from_uat(&f, FaultUnit::Vdm))?;
    Ok(raw
        .chunks_exact(index_bytes)
        .map(|index| {
            let mut word = [0u8; 4];
            word[..index_bytes].copy_from_slice(index);
            u32::from_le_bytes(word)
        })
        .collect())
}

/// The queue's parameter-buffer control block.
pub(crate) fn tvb_info(ctx: &RunContext<'_>, buffer: FwVa) -> Result<TvbInfo, EngineResult> {
    let mut bytes = [0u8; size_of::<TvbInfo>()];
    ctx.firmware.read(buffer, &mut bytes).map_err(|_| {
        unsupported(
            buffer.get(),
            FaultUnit::Firmware,
            "a parameter-buffer control block the firmware cannot read",
        )
    })?;
    TvbInfo::read_from_bytes(&bytes).map_err(|_| {
        unsupported(
            buffer.get(),
            FaultUnit::Firmware,
            "a parameter-buffer control block that does not parse",
        )
    })
}

/// An overflow of the parameter buffer: the buffer cannot even hold a
/// segment's header and list heads.
pub(crate) fn overflow(buffer: FwVa) -> EngineResult {
    unsupported(
        buffer.get(),
        FaultUnit::Tiler,
        "a parameter buffer too small for a scene's header and list-head pages",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The distinct ids of `batch` in first-appearance order and each
    /// primitive's indices into them, worked out by a linear search.
    fn distinct_by_search(batch: &[([u32; 3], usize)]) -> (Vec<u32>, Vec<[usize; 3]>) {
        let mut unique: Vec<u32> = Vec::new();
        let slots = batch
            .iter()
            .map(|(ids, n)| {
                let mut slots = [0; 3];
                for (slot, &id) in slots.iter_mut().zip(ids).take(*n) {
                    *slot = match unique.iter().position(|&u| u == id) {
                        Some(at) => at,
                        None => {
                            unique.push(id);
                            unique.len() - 1
                        }
                    };
                }
                slots
            })
            .collect();
        (unique, slots)
    }

    #[test]
    fn distinct_vertices_by_table_or_hash_agree_with_a_search() {
        let mut next = crate::usc::test_rng::xorshift(0x9E37_79B9_7F4A_7C15u64);
        // Ids packed close (the table), spread over the whole range (the
        // hash), at both ends of it, and points and lines among
        // triangles.
        for (spread, base) in [
            (50u64, 0u32),
            (300, 1000),
            (1 << 32, 0),
            (40, u32::MAX - 39),
        ] {
            for _ in 0..20 {
                let batch: Vec<([u32; 3], usize)> = (0..1 + next() % 200)
                    .map(|_| {
                        let id = |r: u64| base.wrapping_add((r % spread) as u32);
                        (
                            [id(next()), id(next()), id(next())],
                            1 + (next() % 3) as usize,
                        )
                    })
                    .collect();
                assert_eq!(distinct_vertices(&batch), distinct_by_search(&batch));
            }
        }
        assert_eq!(distinct_vertices(&[]), (Vec::new(), Vec::new()));
    }

    /// The pass the preparing tests draw to: 200 x 120 pixels, the last
    /// tile column and row partly outside.
    const TEST_AREA: SceneArea = SceneArea {
        width_px: 200,
        height_px: 120,
        tiles_x: 7,
        tiles_y: 4,
    };

    /// A shaded batch of `count` primitives, ids from 1000: triangles,
    /// every seventh a point and every eleventh a line, at random clip
    /// positions (some off the pass, some behind the eye, so clipped),
    /// each vertex with three values after its position.
    fn random_batch(count: usize, seed: u64) -> ShadedBatch {
        let mut next = crate::usc::test_rng::xorshift(seed);
        let mut between = |lo: f32, hi: f32| lo + (hi - lo) * (next() % 10_000) as f32 / 10_000.0;
        let mut shaded = Vec::new();
        for _ in 0..3 * count {
            let w = between(-0.2, 2.0);
            let position = [
                between(-1.5, 1.5) * w,
                between(-1.5, 1.5) * w,
                between(0.0, 1.0) * w,
                w,
            ];
            shaded.extend(position.map(f32::to_bits));
            shaded.extend(
                [between(0.0, 1.0), between(0.0, 1.0), between(0.0, 1.0)].map(f32::to_bits),
            );
        }
        assert_eq!(shaded.len(), 3 * count * TEST_STRIDE);
        let vertices = |k: usize| [3 * k, 3 * k + 1, 3 * k + 2];
        ShadedBatch {
            batch: (0..count)
                .map(|k| {
                    let n = if k % 7 == 0 {
                        1
                    } else if k % 11 == 0 {
                        2
                    } else {
                        3
                    };
                    (vertices(k).map(|v| v as u32), n)
                })
                .collect(),
            first_id: 1000,
            slots: (0..count).map(vertices).collect(),
            shaded,
        }
    }

    /// The state the preparing tests draw with: the whole pass as the
    /// viewport, and the primitive id passed on or not.
    fn test_state(primitive_id: bool) -> PppState {
        let mut ppp = PppState::of(&PppRecords::default());
        ppp.viewports = vec![Viewport {
            translate_x: 100.0,
            scale_x: 100.0,
            translate_y: 60.0,
            scale_y: -60.0,
            translate_z: 0.5,
            scale_z: 0.5,
        }];
        ppp.primitive_id = primitive_id;
        ppp
    }

    /// The words [`random_batch`] keeps a vertex: its position and three
    /// values.
    const TEST_STRIDE: usize = 7;

    /// What binning `ppp`'s primitives of [`random_batch`] reads besides
    /// them: nothing flat or linear.
    fn test_outputs(ppp: &PppState) -> BinOutputs<'_> {
        BinOutputs {
            ppp,
            flat: &[],
            linear: &[],
            stride: TEST_STRIDE,
        }
    }

    /// Records' bytes and tiles, in order.
    type Committed = (Vec<u8>, Vec<TileRect>);

    /// Commits a shared batch's records in order as the binning thread
    /// does, collecting them.
    fn commit_all(
        shared: &SharedBatch,
        outputs: &BinOutputs<'_>,
        spare: &std::sync::Mutex<Vec<PreparedTriangles>>,
        ended: impl Fn() -> bool,
    ) -> (Result<(), EngineResult>, Committed) {
        let mut committed: Committed = (Vec::new(), Vec::new());
        let mut own = PreparedTriangles::new(TEST_AREA);
        let result = shared.commit_in_order(outputs, (&mut own, spare), ended, |records| {
            committed.0.extend_from_slice(&records.bytes);
            committed
                .1
                .extend(records.records.iter().map(|&(_, tiles)| tiles));
            Ok(())
        });
        (result, committed)
    }

    /// However the shading thread and the binning thread share a batch's
    /// preparing (none, some or all of its chunks prepared by the shading
    /// thread first, or both threads at once), the binning thread commits
    /// the records one thread preparing the whole batch makes, in its
    /// order: with and without primitive ids (which each chunk must count
    /// from the batch's first), through the plain, clipped, point and line
    /// paths.
    #[test]
    fn records_prepared_by_two_threads_are_the_records_of_one() {
        // Four chunks, the last short.
        let count = 3 * PREPARE_CHUNK_PRIMITIVES + 100;
        for primitive_id in [false, true] {
            let ppp = test_state(primitive_id);
            let outputs = test_outputs(&ppp);
            let mut whole = PreparedTriangles::new(TEST_AREA);
            prepare_batch(&random_batch(count, 7), &outputs, 0..count, &mut whole);
            let expected: Committed = (
                whole.bytes.clone(),
                whole.records.iter().map(|&(_, tiles)| tiles).collect(),
            );
            // Some culled or off the pass, most kept.
            let kept = expected.1.len();
            assert!(kept > count / 2 && kept < 2 * count, "{kept} records");
            let spare = std::sync::Mutex::new(Vec::new());
            for ahead in 0..=4u32 {
                let shared = SharedBatch::new(random_batch(count, 7), TEST_AREA);
                let mut left = ahead;
                shared.prepare_from_back(&outputs, &spare, || {
                    let go_on = left > 0;
                    left = left.saturating_sub(1);
                    go_on
                });
                let (result, committed) = commit_all(&shared, &outputs, &spare, || false);
                assert_eq!(result, Ok(()));
                assert!(committed == expected, "{ahead} chunks prepared ahead");
            }
            for _ in 0..20 {
                let shared = SharedBatch::new(random_batch(count, 7), TEST_AREA);
                let (result, committed) = std::thread::scope(|scope| {
                    scope.spawn(|| shared.prepare_from_back(&outputs, &spare, || true));
                    commit_all(&shared, &outputs, &spare, || false)
                });
                assert_eq!(result, Ok(()));
                assert!(committed == expected, "both threads at once");
            }
        }
    }

    /// A chunk the shading thread claimed and left unprepared when it
    /// ended (it panicked) cancels the batch after the chunks before it
    /// are committed, rather than leaving the binning thread waiting.
    #[test]
    fn a_chunk_left_unprepared_by_an_ended_thread_cancels_the_batch() {
        let ppp = test_state(false);
        let outputs = test_outputs(&ppp);
        let count = 2 * PREPARE_CHUNK_PRIMITIVES;
        let shared = SharedBatch::new(random_batch(count, 9), TEST_AREA);
        assert!(shared.claim(1));
        let spare = std::sync::Mutex::new(Vec::new());
        let (result, committed) = commit_all(&shared, &outputs, &spare, || true);
        assert_eq!(result, Err(EngineResult::Cancelled));
        let mut first = PreparedTriangles::new(TEST_AREA);
        prepare_batch(&shared.shaded, &outputs, shared.range(0), &mut first);
        assert!(!first.bytes.is_empty());
        assert!(
            committed.0 == first.bytes,
            "the first chunk's records, committed"
        );
    }
}
