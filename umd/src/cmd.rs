//! Command buffers: render passes with their draws, and compute
//! dispatches, encoded as the control streams the GPU walks.
//!
//! A render pass becomes one `cmd_render`: a VDM control stream of state
//! updates (the vertex shader's USC words and output count), PPP state
//! pointers (viewport, culling, depth test, the fragment shader and its
//! coefficient bindings) and index lists, ending in a terminate block.
//! State is tracked with dirty bits, so a draw that changes nothing emits
//! only its index list. Compute dispatches become CDM launch blocks in one
//! stream per run of dispatches.

use std::sync::Arc;

use agx_hw::formats::{
    CdmBlock, CdmGlobalSize, CdmLaunch, CdmLaunchWord0, CdmLaunchWord1, CdmLocalSize, CdmMode,
    CdmStreamTerminate, CfBinding, CfBindingHeader, CoefficientSource, Cull, DepthBiasScissor,
    FragmentControl, FragmentFace, FragmentShaderWord0, FragmentShaderWord1, FragmentShaderWord2,
    FragmentShaderWord3, FragmentStencil, IndexList, IndexListBlock, IndexListBufferLo,
    IndexListBufferSize, IndexListCount, IndexListInstances, IndexListStart, IndexSize, PppRecords,
    PppRecordsFragmentShader, PppRecordsViewport, PppState, Primitive, RegionClip, Sampler,
    Scissor, ShadeModel, StencilOp, VdmBlock, VdmStateVertexOutputs, VdmStateVertexShaderWord1,
    VdmStateWords, VdmStreamLink, VdmStreamTerminate, Viewport, ViewportControl, ZlsControl,
    ZsFunc,
};
use agx_uapi::asahi::{BgEot, CmdCompute, CmdRender, HelperProgram, RenderFlags};
use zerocopy::FromZeros;

use crate::alloc::Arena;
use crate::device::{Buffer, BufferDesc, Device, MemoryType, Region};
use crate::error::Error;
use crate::image::{pack_pbe, pack_texture, Image};
use crate::pass::{
    bg_source, eot_source, tile_layout, zls_controls, BgAction, LoadOp, RenderPassDesc, StoreOp,
};
use crate::program::{place_pipeline, Bindings, ProgramCache, Shader};

/// Kernel: `words` (u3) 32-bit words at u0_u1 get the value u2.
const FILL_KERNEL: &str = "
    get_sr r1, sr80
    if_icmp r0l, ult, r1, u3, 1
    jmp_exec_none done
    mov r2, u2
    device_store 0, i32, x, r2, u0_u1, r1, unsigned, 0
done:
    pop_exec r0l, 1
    stop";

fn pack_err(e: agx_hw::spec::PackError) -> Error {
    Error::Unsupported(format!("hardware word: {e}"))
}

fn seq_err(e: agx_hw::SeqError) -> Error {
    Error::Unsupported(format!("hardware record sequence: {e}"))
}

/// How a varying is interpolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interpolation {
    /// Linearly in screen space.
    Linear,
    /// Perspective-correct: the shader divides by W (`iterproj` with the
    /// W plane, which the pipeline binds to the coefficient register after
    /// the varyings' when any varying is perspective-correct).
    Perspective,
    /// The first vertex's value.
    Flat,
}

/// A varying: vertex output slots read by the fragment shader through
/// coefficient registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Varying {
    /// First vertex output slot (4 and up: slots 0-3 are the position).
    pub slot: u32,
    /// Components (1-4).
    pub components: u32,
    /// Interpolation.
    pub interpolation: Interpolation,
}

/// Which faces are culled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CullMode {
    /// None.
    None,
    /// Front faces.
    Front,
    /// Back faces.
    Back,
}

/// Primitive topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// Independent triangles.
    Triangles,
    /// A strip.
    TriangleStrip,
    /// A fan.
    TriangleFan,
}

/// Stencil test state (both faces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StencilState {
    /// Comparison of the reference against the stored value.
    pub compare: ZsFunc,
    /// The reference value.
    pub reference: u8,
    /// Bits compared.
    pub read_mask: u8,
    /// Bits written.
    pub write_mask: u8,
    /// Operation when the stencil test fails.
    pub fail: StencilOp,
    /// Operation when it passes and the depth test fails.
    pub depth_fail: StencilOp,
    /// Operation when both pass.
    pub pass: StencilOp,
}

/// Depth test state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DepthState {
    /// Comparison against the stored depth.
    pub function: ZsFunc,
    /// Whether passing fragments write depth.
    pub write: bool,
}

/// How blending combines a fragment's colour with the tilebuffer's. AGX
/// has no fixed-function blender: the driver appends the blend to the
/// fragment shader (load the tilebuffer, combine, store).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Blend {
    /// The fragment's colour replaces the pixel's.
    #[default]
    Replace,
    /// `src * src.a + dst * (1 - src.a)`, on every channel.
    Alpha,
    /// `src + dst`.
    Additive,
}

/// Who writes a fragment's colour to the tilebuffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ColourOutput {
    /// The shader stores it itself (`st_tile`) and ends with `stop`.
    #[default]
    ShaderStores,
    /// The shader leaves render target 0's RGBA in `r4`-`r7` (32-bit
    /// floats) and falls through at its end (no final `stop`); the driver
    /// appends the store, blended as `blend` says, for a target of
    /// `format`. `r8`-`r12` are the epilogue's scratch registers.
    Registers {
        /// The render target's format.
        format: crate::image::Format,
        /// Blending.
        blend: Blend,
    },
}

/// The code the driver appends to a fragment shader for `output`.
pub fn fragment_epilogue(output: ColourOutput) -> Result<String, Error> {
    let ColourOutput::Registers { format, blend } = output else {
        return Ok(String::new());
    };
    let tile = format
        .tile_format()
        .ok_or_else(|| Error::Unsupported(format!("rendering to {format:?}")))?;
    let mut s = String::from("; driver epilogue: render target 0 from r4-r7\n");
    if blend != Blend::Replace {
        s.push_str(&format!(
            "    ld_tile r8_r9_r10_r11, {tile}, 0, xyzw, 0, 255, r0, 0\n    wait 0\n"
        ));
        // Alpha: dst + a * (src - dst) per channel, alpha (r7) last since
        // the others read it: for alpha that is a * a + dst.a * (1 - a).
        for (src, dst) in [("r4", "r8"), ("r5", "r9"), ("r6", "r10"), ("r7", "r11")] {
            s.push_str(&match blend {
                Blend::Alpha => {
                    format!("    fadd32 r12, {src}, {dst}.neg\n    fmadd32 {src}, r12, r7, {dst}\n")
                }
                _ => format!("    fadd32 {src}, {src}, {dst}\n"),
            });
        }
    }
    s.push_str(&format!(
        "    st_tile r4_r5_r6_r7, {tile}, 0, xyzw, 0, 255, r0, 0\n    stop\n"
    ));
    Ok(s)
}

/// The format of a vertex attribute: 32-bit components.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VertexFormat {
    /// One 32-bit word.
    X32,
    /// Two.
    Xy32,
    /// Three.
    Xyz32,
    /// Four.
    Xyzw32,
}

impl VertexFormat {
    fn components(self) -> u32 {
        match self {
            VertexFormat::X32 => 1,
            VertexFormat::Xy32 => 2,
            VertexFormat::Xyz32 => 3,
            VertexFormat::Xyzw32 => 4,
        }
    }
}

/// One attribute of a vertex layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VertexAttribute {
    /// Byte offset in the vertex (a multiple of 4).
    pub offset_bytes: u32,
    /// Its format.
    pub format: VertexFormat,
    /// The first general register the vertex shader finds it in (r3 and
    /// up: the prologue uses r1 and r2, r5 and r6 hold the ids).
    pub register: u32,
}

/// How vertices lie in the vertex buffer. AGX has no fixed-function
/// vertex fetch: the driver prepends the loads to the vertex shader, which
/// then finds each attribute in its registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VertexLayout {
    /// Bytes from one vertex to the next (a multiple of 4).
    pub stride_bytes: u32,
    /// The attributes (at most [`MAX_VERTEX_ATTRIBUTES`]).
    pub attributes: Vec<VertexAttribute>,
}

/// Attributes a layout may have.
pub const MAX_VERTEX_ATTRIBUTES: usize = 8;
/// The 32-bit uniform where the driver puts attribute 0's address (a
/// pair; attribute `a` at `u(40 + 2a)`): vertex shaders with a layout keep
/// their own uniforms below it.
pub const VERTEX_ATTRIBUTE_UNIFORM: u32 = 40;

/// The loads the driver prepends for `layout`: the vertex index times the
/// stride in words into `r1` (`r2` scratch), then each attribute from its
/// address pair.
pub fn vertex_prologue(layout: &VertexLayout) -> Result<String, Error> {
    if !layout.stride_bytes.is_multiple_of(4) || layout.attributes.len() > MAX_VERTEX_ATTRIBUTES {
        return Err(Error::Unsupported(format!(
            "a vertex layout of stride {} with {} attributes",
            layout.stride_bytes,
            layout.attributes.len()
        )));
    }
    let mut s = format!(
        "; driver prologue: vertex fetch\n    mov_imm r2, {}\n    imadd r1, r5, r2, 0\n",
        layout.stride_bytes / 4
    );
    let masks = ["x", "xy", "xyz", "xyzw"];
    for (a, attribute) in layout.attributes.iter().enumerate() {
        let n = attribute.format.components();
        let overlaps_ids =
            (attribute.register..attribute.register.saturating_add(n)).any(|r| r == 5 || r == 6);
        if !attribute.offset_bytes.is_multiple_of(4) || attribute.register < 3 || overlaps_ids {
            return Err(Error::Unsupported(format!(
                "attribute {a} at offset {} into r{}",
                attribute.offset_bytes, attribute.register
            )));
        }
        let registers: Vec<String> = (0..n)
            .map(|i| format!("r{}", attribute.register + i))
            .collect();
        let u = VERTEX_ATTRIBUTE_UNIFORM + 2 * a as u32;
        s.push_str(&format!(
            "    device_load 0, i32, {}, {}, u{u}_u{}, r1, unsigned\n",
            masks[n as usize - 1],
            registers.join("_"),
            u + 1
        ));
    }
    s.push_str("    wait 0\n");
    Ok(s)
}

/// A graphics pipeline's description: shaders in AGX assembly and the
/// fixed-function state.
#[derive(Debug, Clone)]
pub struct GraphicsPipelineDesc<'a> {
    /// Vertex shader: vertex id in r5, instance id in r6; writes
    /// `vertex_outputs` slots with `st_var` (0-3: clip-space position).
    pub vertex: &'a str,
    /// Fragment shader: reads varyings from coefficient registers (cf0
    /// and up, in `varyings` order), writes the tilebuffer with `st_tile`.
    pub fragment: &'a str,
    /// How the driver fetches vertices for the vertex shader, if it
    /// does (else the shader loads them itself).
    pub vertex_layout: Option<VertexLayout>,
    /// Vertex output slots, position included.
    pub vertex_outputs: u32,
    /// Varyings, bound to consecutive coefficient registers from cf0.
    pub varyings: Vec<Varying>,
    /// Depth test, if any.
    pub depth: Option<DepthState>,
    /// Stencil test, if any (needs a depth test: `Always` if only the
    /// stencil matters).
    pub stencil: Option<StencilState>,
    /// Culling.
    pub cull: CullMode,
    /// Whether counter-clockwise triangles (as seen in the image) face
    /// front.
    pub front_ccw: bool,
    /// Topology of draws.
    pub topology: Topology,
    /// Who writes the colour, and the blending.
    pub colour_output: ColourOutput,
    /// Per-thread stack the vertex shader uses (`stack_*` instructions);
    /// 0 for none. A pass whose pipelines need one names the helper
    /// program that hands stacks out.
    pub vertex_stack_bytes: u32,
    /// The same for the fragment shader.
    pub fragment_stack_bytes: u32,
}

/// A compiled graphics pipeline.
#[derive(Debug)]
pub struct GraphicsPipeline {
    vertex: Shader,
    /// With a vertex layout: each attribute's byte offset.
    attribute_offsets: Option<Vec<u32>>,
    fragment: Shader,
    outputs: u32,
    cf_table: Buffer,
    cf_bindings: u32,
    depth: Option<DepthState>,
    stencil: Option<StencilState>,
    cull: CullMode,
    front_ccw: bool,
    topology: Topology,
    vertex_stack_bytes: u32,
    fragment_stack_bytes: u32,
}

impl GraphicsPipeline {
    /// Assembles the shaders and writes the coefficient binding table.
    pub fn new(
        device: &Device,
        desc: &GraphicsPipelineDesc<'_>,
    ) -> Result<GraphicsPipeline, Error> {
        // The VDM's output count and the binding table's slot count are
        // 8-bit fields.
        if desc.vertex_outputs < 4 || desc.vertex_outputs > 255 {
            return Err(Error::Unsupported(format!(
                "{} vertex outputs (4..=255)",
                desc.vertex_outputs
            )));
        }
        for (stage, stack_bytes) in [
            ("vertex", desc.vertex_stack_bytes),
            ("fragment", desc.fragment_stack_bytes),
        ] {
            if crate::scratch::ScratchLayout::for_stack(stack_bytes).is_none() {
                return Err(Error::Unsupported(format!(
                    "a {stage} shader stack of {stack_bytes} bytes per thread (at most {} bytes)",
                    crate::scratch::MAX_STACK_BYTES
                )));
            }
        }
        // The hardware's slots: W in slot 0, then the vertex outputs after
        // the position (output 4 is slot 1).
        let perspective = desc
            .varyings
            .iter()
            .any(|v| v.interpolation == Interpolation::Perspective);
        let mut table = CfBindingHeader {
            slot_count: desc.vertex_outputs - 3,
            coefficient_register_count: desc
                .varyings
                .iter()
                .map(|v| v.components.min(4))
                .sum::<u32>()
                + u32::from(perspective),
        }
        .pack()
        .map_err(pack_err)?
        .to_vec();
        let mut register = 0;
        for varying in &desc.varyings {
            let end = varying.slot.checked_add(varying.components);
            if !(1..=4).contains(&varying.components)
                || varying.slot < 4
                || end.is_none_or(|end| end > desc.vertex_outputs)
            {
                return Err(Error::Unsupported(format!(
                    "varying at slots {}..{} of {} outputs",
                    varying.slot,
                    u64::from(varying.slot) + u64::from(varying.components),
                    desc.vertex_outputs
                )));
            }
            table.extend(
                CfBinding {
                    components: varying.components,
                    shade_model: match varying.interpolation {
                        Interpolation::Linear => ShadeModel::Linear,
                        Interpolation::Perspective => ShadeModel::Perspective,
                        Interpolation::Flat => ShadeModel::FlatVertex0,
                    },
                    source: CoefficientSource::Varying,
                    base_slot: varying.slot - 3,
                    base_coefficient_register: register,
                }
                .pack()
                .map_err(pack_err)?,
            );
            register += varying.components;
        }
        if perspective {
            // W (slot 0), interpolated linearly: its plane is 1/w.
            table.extend(
                CfBinding {
                    components: 1,
                    shade_model: ShadeModel::Linear,
                    source: CoefficientSource::Varying,
                    base_slot: 0,
                    base_coefficient_register: register,
                }
                .pack()
                .map_err(pack_err)?,
            );
        }
        let cf_bindings = desc.varyings.len() as u32 + u32::from(perspective);
        let cf_table = device.create_buffer(&BufferDesc {
            size_bytes: table.len() as u64,
            memory: MemoryType::HostVisible,
            region: Region::Usc,
            gpu_write: false,
        })?;
        cf_table.write(0, &table)?;
        Ok(GraphicsPipeline {
            vertex: match &desc.vertex_layout {
                Some(layout) => Shader::new(
                    device,
                    &format!("{}{}", vertex_prologue(layout)?, desc.vertex),
                )?,
                None => Shader::new(device, desc.vertex)?,
            },
            attribute_offsets: desc
                .vertex_layout
                .as_ref()
                .map(|l| l.attributes.iter().map(|a| a.offset_bytes).collect()),
            fragment: Shader::new(device, &fragment_source(desc)?)?,
            outputs: desc.vertex_outputs,
            cf_table,
            cf_bindings,
            depth: desc.depth,
            stencil: desc.stencil,
            cull: desc.cull,
            front_ccw: desc.front_ccw,
            topology: desc.topology,
            vertex_stack_bytes: desc.vertex_stack_bytes,
            fragment_stack_bytes: desc.fragment_stack_bytes,
        })
    }
}

/// The fragment shader with the driver's epilogue.
fn fragment_source(desc: &GraphicsPipelineDesc<'_>) -> Result<String, Error> {
    if desc.colour_output == ColourOutput::ShaderStores {
        return Ok(desc.fragment.to_owned());
    }
    let last = desc
        .fragment
        .lines()
        .map(|l| l.split(';').next().unwrap_or("").trim())
        .rfind(|l| !l.is_empty());
    if last == Some("stop") {
        return Err(Error::Unsupported(
            "a fragment shader whose colour the driver stores must fall through to the \
             epilogue, not stop"
                .into(),
        ));
    }
    Ok(format!(
        "{}\n{}",
        desc.fragment,
        fragment_epilogue(desc.colour_output)?
    ))
}

/// One command of a command buffer.
#[derive(Debug, Clone)]
pub enum Command {
    /// A render pass.
    Render(Box<CmdRender>),
    /// A run of compute dispatches.
    Compute(Box<CmdCompute>),
}

/// Counters of what recording emitted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordStats {
    /// Draws recorded.
    pub draws: u64,
    /// Vertex-shader state updates emitted.
    pub vertex_states: u64,
    /// PPP state updates emitted (fragment state, viewport and scissor).
    pub ppp_states: u64,
    /// Compute dispatches recorded.
    pub dispatches: u64,
    /// VDM stream chunks written (linked to each other).
    pub vdm_chunks: u64,
}

/// Largest chunk of a VDM control stream (the next chunk is linked).
pub const VDM_CHUNK_BYTES: usize = 16 * 1024;

/// Recorded work and the memory it uses.
#[derive(Debug)]
pub struct CommandBuffer {
    device: Device,
    programs: Arc<ProgramCache>,
    data: Arena,
    usc: Arena,
    commands: Vec<Command>,
    /// The open CDM stream of consecutive dispatches.
    cdm: Vec<u8>,
    /// The largest stack (bytes per thread) a dispatch in the open CDM
    /// stream needs.
    cdm_stack_bytes: u32,
    /// A dispatch in the open CDM stream has a preshader that needs a
    /// stack (the helper's configuration says so, as Mesa's
    /// `cs_preamble_scratch`).
    cdm_preshader_stack: bool,
    stats: RecordStats,
    /// Pipelines and images the recorded work refers to.
    keep: Vec<Arc<GraphicsPipeline>>,
    /// Bound heaps: the image heap's base (where the uniform word loads it
    /// from) and the sampler heap (address, count).
    heaps: Option<BoundHeaps>,
    debug: crate::pass::PassDebug,
    /// The helper program commands name when they need stacks.
    helper_source: Arc<str>,
}

/// Heaps bound to a command buffer.
#[derive(Debug, Clone, Copy)]
struct BoundHeaps {
    image_base_at: u64,
    samplers: (u64, u16),
}

/// An arena chunk: 256 KiB.
const ARENA_CHUNK_BYTES: u64 = 256 << 10;

impl CommandBuffer {
    /// An empty command buffer using `programs` for generated programs.
    pub fn new(device: &Device, programs: &Arc<ProgramCache>) -> CommandBuffer {
        CommandBuffer {
            device: device.clone(),
            programs: Arc::clone(programs),
            data: Arena::new(device, Region::General, ARENA_CHUNK_BYTES),
            usc: Arena::new(device, Region::Usc, ARENA_CHUNK_BYTES),
            commands: Vec::new(),
            cdm: Vec::new(),
            cdm_stack_bytes: 0,
            cdm_preshader_stack: false,
            stats: RecordStats::default(),
            keep: Vec::new(),
            heaps: None,
            debug: crate::pass::PassDebug::from_env(),
            helper_source: Arc::from(crate::scratch::HELPER_SOURCE),
        }
    }

    /// Sets the deliberate mistakes render passes recorded after this
    /// make (see [`crate::pass::PassDebug`]).
    pub fn set_debug(&mut self, debug: crate::pass::PassDebug) {
        self.debug = debug;
    }

    /// Binds descriptor heaps for the work recorded after this: fragment
    /// shaders and kernels find the image heap's base in
    /// [`crate::heap::HEAP_BASE_UNIFORM`] (`u60_u61`), and render and
    /// compute commands carry the sampler heap.
    pub fn bind_heaps(
        &mut self,
        images: &crate::heap::ImageHeap,
        samplers: &crate::heap::SamplerHeap,
    ) -> Result<(), Error> {
        let slice = self.data.upload(&images.base().to_le_bytes(), 16)?;
        self.heaps = Some(BoundHeaps {
            image_base_at: slice.va,
            samplers: (samplers.va(), samplers.count()),
        });
        Ok(())
    }

    /// `bindings` with the image heap's base loaded, if heaps are bound.
    fn with_heap(&self, mut bindings: Bindings) -> Bindings {
        if let Some(heaps) = self.heaps {
            bindings
                .uniforms
                .push((2 * crate::heap::HEAP_BASE_UNIFORM, heaps.image_base_at, 4));
        }
        bindings
    }

    /// The recorded commands (after [`CommandBuffer::finish`]).
    pub fn commands(&self) -> &[Command] {
        &self.commands
    }

    /// What recording emitted.
    pub fn stats(&self) -> RecordStats {
        self.stats
    }

    /// Memory for uniforms and other per-command-buffer data.
    pub fn arena(&mut self) -> &mut Arena {
        &mut self.data
    }

    /// Closes the open compute stream, if any.
    fn close_compute(&mut self) -> Result<(), Error> {
        if self.cdm.is_empty() {
            return Ok(());
        }
        let mut stream = self.cdm.clone();
        stream.extend(CdmStreamTerminate::default().pack().map_err(pack_err)?);
        // On failure the open stream stays, with the dispatches in it.
        let slice = self.data.upload(&stream, 64)?;
        let mut helper = self.stack_helper(self.cdm_stack_bytes)?;
        if self.cdm_preshader_stack {
            helper.cfg |= 1 << 16;
        }
        self.cdm.clear();
        self.cdm_stack_bytes = 0;
        self.cdm_preshader_stack = false;
        let (sampler_heap, sampler_count) = self.heaps.map_or((0, 0), |h| h.samplers);
        self.commands.push(Command::Compute(Box::new(CmdCompute {
            cdm_ctrl_stream_base: slice.va,
            cdm_ctrl_stream_end: slice.va + slice.len_bytes,
            sampler_heap,
            sampler_count: u32::from(sampler_count),
            helper,
            ..CmdCompute::new_zeroed()
        })));
        Ok(())
    }

    /// Names `source` as the helper program of the commands recorded from
    /// now on that need stacks, in place of the driver's
    /// ([`crate::scratch::HELPER_SOURCE`]): for developing a helper
    /// against the firmware's doorbell protocol. It is given the same
    /// scratch description. The open compute command, if any, is closed
    /// first, so that its dispatches keep the helper they were recorded
    /// with.
    pub fn set_helper_source(&mut self, source: &str) -> Result<(), Error> {
        self.close_compute()?;
        self.helper_source = Arc::from(source);
        Ok(())
    }

    /// The helper program and a fresh scratch area for stacks of
    /// `stack_bytes` per thread (none for 0).
    fn stack_helper(&mut self, stack_bytes: u32) -> Result<HelperProgram, Error> {
        if stack_bytes == 0 {
            return Ok(HelperProgram::default());
        }
        let layout = crate::scratch::ScratchLayout::for_stack(stack_bytes).ok_or_else(|| {
            Error::Unsupported(format!(
                "a stack of {stack_bytes} bytes per thread (at most {} bytes)",
                crate::scratch::MAX_STACK_BYTES
            ))
        })?;
        let area = self
            .data
            .alloc(layout.total_bytes(), layout.block_align_bytes())?;
        self.data.write(&area, 0, &layout.header(area.va))?;
        let helper = self.programs.get(&self.helper_source)?;
        Ok(HelperProgram {
            // The low bit tags the code, as Mesa sets it.
            binary: helper.code_offset() | 1,
            cfg: 0,
            data: area.va,
        })
    }

    /// Ends recording.
    pub fn finish(&mut self) -> Result<(), Error> {
        self.close_compute()
    }

    /// Records a compute dispatch of `shader` with `bindings` over `grid`
    /// threads in threadgroups of `local`.
    pub fn dispatch(
        &mut self,
        shader: &Shader,
        bindings: &Bindings,
        grid: [u32; 3],
        local: [u32; 3],
    ) -> Result<(), Error> {
        if local.contains(&0) || local.iter().map(|&n| u64::from(n)).product::<u64>() > 1024 {
            return Err(Error::Unsupported(format!("threadgroup size {local:?}")));
        }
        let bindings = self.with_heap(bindings.clone());
        // The helper's stacks serve the kernel and its preshader alike.
        let preshader_stack_bytes = bindings.preshader.map_or(0, |(_, bytes)| bytes);
        let stack_bytes = bindings.stack_bytes.max(preshader_stack_bytes);
        if crate::scratch::ScratchLayout::for_stack(stack_bytes).is_none() {
            return Err(Error::Unsupported(format!(
                "a stack of {} bytes per thread (at most {} bytes)",
                stack_bytes,
                crate::scratch::MAX_STACK_BYTES
            )));
        }
        let pipeline = place_pipeline(&self.device, &mut self.usc, shader, &bindings)?;
        self.cdm_stack_bytes = self.cdm_stack_bytes.max(stack_bytes);
        self.cdm_preshader_stack |= preshader_stack_bytes > 0;
        CdmBlock::Launch(CdmLaunch {
            header: CdmLaunchWord0 {
                mode: CdmMode::Direct,
                ..CdmLaunchWord0::default()
            },
            word1: CdmLaunchWord1 {
                pipeline: u64::from(pipeline),
            },
            global: Some(CdmGlobalSize {
                x: grid[0],
                y: grid[1],
                z: grid[2],
            }),
            indirect: None,
            local: Some(CdmLocalSize {
                x: local[0],
                y: local[1],
                z: local[2],
            }),
        })
        .build(&mut self.cdm)
        .map_err(seq_err)?;
        self.stats.dispatches += 1;
        Ok(())
    }

    /// Records a GPU fill of `words` 32-bit words at `va` with `value`
    /// (a compute dispatch, ordered before what is recorded after it).
    pub fn fill(&mut self, va: u64, words: u32, value: u32) -> Result<(), Error> {
        let grid = words
            .checked_next_multiple_of(64)
            .ok_or_else(|| Error::Unsupported(format!("a fill of {words} words")))?;
        let shader = self.programs.get(FILL_KERNEL)?;
        let uniforms = [va as u32, (va >> 32) as u32, value, words];
        let bindings = Bindings::default().with_uniform_words(&mut self.data, &uniforms)?;
        self.dispatch(&shader, &bindings, [grid, 1, 1], [64, 1, 1])
    }

    /// Begins a render pass.
    pub fn begin_render_pass(
        &mut self,
        desc: &RenderPassDesc<'_>,
    ) -> Result<RenderPass<'_>, Error> {
        let (width, height) = match (desc.colour.first(), &desc.depth) {
            (Some(c), _) => (c.image.width(), c.image.height()),
            (None, Some(d)) => (d.image.width(), d.image.height()),
            (None, None) => return Err(Error::Unsupported("a pass without attachments".into())),
        };
        if desc
            .colour
            .iter()
            .any(|c| (c.image.width(), c.image.height()) != (width, height))
            || desc
                .depth
                .is_some_and(|d| (d.image.width(), d.image.height()) != (width, height))
            || desc
                .depth
                .as_ref()
                .and_then(|d| d.stencil.as_ref())
                .is_some_and(|s| (s.image.width(), s.image.height()) != (width, height))
        {
            // The ZLS hardware stores whole tiles of the pass into the
            // planes: a plane of another size would be overrun.
            return Err(Error::Unsupported("attachments of different sizes".into()));
        }
        if desc.colour.len() > 8 {
            return Err(Error::Unsupported(format!(
                "{} colour attachments",
                desc.colour.len()
            )));
        }
        let formats: Vec<_> = desc.colour.iter().map(|c| c.image.format()).collect();
        let (slots, sample_bytes) = tile_layout(&formats)?;
        // Descriptors: texture descriptors for loads, PBE descriptors for
        // stores, one per render target.
        let mut textures = Vec::new();
        let mut pbes = Vec::new();
        for c in &desc.colour {
            textures.extend(pack_texture(&c.image.texture_descriptor())?);
            pbes.extend(pack_pbe(&c.image.pbe_descriptor())?);
        }
        let count = desc.colour.len() as u32;
        let textures = (count > 0)
            .then(|| self.data.upload(&textures, 64))
            .transpose()?;
        let pbes = (count > 0)
            .then(|| self.data.upload(&pbes, 64))
            .transpose()?;
        let mut clear_words = Vec::new();
        let actions: Vec<BgAction> = desc
            .colour
            .iter()
            .map(|c| {
                let value = match c.load {
                    LoadOp::Clear(v) => Some(v),
                    LoadOp::DontCare => Some([0.0; 4]),
                    LoadOp::Load => None,
                };
                clear_words.extend(value.unwrap_or([0.0; 4]).map(f32::to_bits));
                if value.is_some() {
                    BgAction::Clear
                } else {
                    BgAction::Load
                }
            })
            .collect();
        let loads = vec![BgAction::Load; slots.len()];
        let stores: Vec<bool> = desc
            .colour
            .iter()
            .map(|c| c.store == StoreOp::Store)
            .collect();
        let store_all = vec![true; slots.len()];
        let bg = self.programs.get(&bg_source(&slots, &actions))?;
        let partial_actions = if self.debug.clearing_partial_bg {
            &actions
        } else {
            &loads
        };
        let partial_bg = self.programs.get(&bg_source(&slots, partial_actions))?;
        let eot = self.programs.get(&eot_source(&slots, &stores))?;
        let partial_eot = self.programs.get(&eot_source(&slots, &store_all))?;
        let tile_bindings = |textures: Option<u64>| Bindings {
            textures: textures.map(|va| (count, va)),
            tilebuffer_sample_bytes: Some(sample_bytes),
            ..Bindings::default()
        };
        let bg_bindings = tile_bindings(textures.map(|s| s.va))
            .with_uniform_words(&mut self.data, &clear_words)?;
        let partial_bg_bindings = if self.debug.clearing_partial_bg {
            bg_bindings.clone()
        } else {
            tile_bindings(textures.map(|s| s.va))
        };
        let eot_bindings = tile_bindings(pbes.map(|s| s.va));
        let usc = |pipeline: u32| BgEot {
            usc: pipeline | 4,
            rsrc_spec: 0,
        };
        let mut render = CmdRender {
            flags: RenderFlags::PROCESS_EMPTY_TILES.bits(),
            width_px: width as u16,
            height_px: height as u16,
            layers: 1,
            samples: 1,
            utile_width_px: 32,
            utile_height_px: 32,
            sample_size_B: sample_bytes as u8,
            isp_bgobjdepth: 1.0f32.to_bits(),
            bg: usc(place_pipeline(
                &self.device,
                &mut self.usc,
                &bg,
                &bg_bindings,
            )?),
            partial_bg: usc(place_pipeline(
                &self.device,
                &mut self.usc,
                &partial_bg,
                &partial_bg_bindings,
            )?),
            eot: usc(place_pipeline(
                &self.device,
                &mut self.usc,
                &eot,
                &eot_bindings,
            )?),
            partial_eot: usc(place_pipeline(
                &self.device,
                &mut self.usc,
                &partial_eot,
                &eot_bindings,
            )?),
            ..CmdRender::new_zeroed()
        };
        // One sample at the pixel centre, said explicitly (0 is not a
        // pattern the hardware documents).
        render.ppp_multisamplectl = u64::from_le_bytes(
            agx_hw::formats::SampleLocations {
                sample_0_x: 8,
                sample_0_y: 8,
                ..agx_hw::formats::SampleLocations::default()
            }
            .pack()
            .map_err(pack_err)?,
        );
        if self.debug.no_partial_bg {
            render.partial_bg = BgEot::default();
        }
        if let Some(heaps) = self.heaps {
            render.sampler_heap = heaps.samplers.0;
            render.sampler_count = heaps.samplers.1;
        }
        if let Some(depth) = &desc.depth {
            let (normal, submitted) = zls_controls(Some(depth));
            let submitted = if self.debug.no_partial_zls {
                ZlsControl {
                    z_load_enable: false,
                    z_store_enable: false,
                    s_load_enable: false,
                    s_store_enable: false,
                    ..normal
                }
            } else {
                submitted
            };
            // One zls_ctrl serves the first pass over a tile and the
            // reload after a partial render: it loads only for a `Load`
            // and always stores, and the GPU reloads what it stores
            // after a partial render (`pass::zls_controls`).
            render.zls_ctrl = u64::from_le_bytes(submitted.pack().map_err(pack_err)?);
            render.isp_zls_pixels = u32::from_le_bytes(
                agx_hw::formats::ZlsPixels {
                    width: depth.image.width(),
                    height: depth.image.height(),
                }
                .pack()
                .map_err(pack_err)?,
            );
            render.depth.base = depth.image.buffer().va();
            render.depth.stride = depth.image.layer_stride_word()?;
            if let LoadOp::Clear(value) = depth.load {
                render.isp_bgobjdepth = value.to_bits();
            }
            if let Some(stencil) = &depth.stencil {
                render.stencil.base = stencil.image.buffer().va();
                render.stencil.stride = stencil.image.layer_stride_word()?;
                if let LoadOp::Clear(value) = stencil.load {
                    render.isp_bgobjvals = u32::from(value);
                }
            }
        }
        self.close_compute()?;
        Ok(RenderPass {
            cb: self,
            render,
            vdm: Vec::new(),
            blocks: Vec::new(),
            sample_bytes,
            pipeline: None,
            vs_uniforms: Vec::new(),
            fs_uniforms: Vec::new(),
            fs_textures: Vec::new(),
            fs_samplers: Vec::new(),
            dirty_vertex: true,
            dirty_fragment: true,
            dirty_viewport: true,
            viewport: [0.0, 0.0, width as f32, height as f32, 0.0, 1.0],
            scissor: None,
            scissors: Vec::new(),
            vertex_buffer: None,
            vertex_stack_bytes: 0,
            fragment_stack_bytes: 0,
        })
    }
}

/// Pixels per side of the tiles a region clip counts in.
const REGION_CLIP_TILE_PX: u32 = 32;

/// A render pass being recorded.
#[derive(Debug)]
pub struct RenderPass<'a> {
    cb: &'a mut CommandBuffer,
    render: CmdRender,
    vdm: Vec<u8>,
    /// Where each block of `vdm` starts (streams are cut only there).
    blocks: Vec<usize>,
    sample_bytes: u32,
    pipeline: Option<Arc<GraphicsPipeline>>,
    vs_uniforms: Vec<u32>,
    fs_uniforms: Vec<u32>,
    fs_textures: Vec<[u8; 24]>,
    fs_samplers: Vec<[u8; 8]>,
    dirty_vertex: bool,
    dirty_fragment: bool,
    dirty_viewport: bool,
    /// x, y, width, height (pixels), min and max depth.
    viewport: [f32; 6],
    /// The application's scissor: x, y, width, height (pixels).
    scissor: Option<[u32; 4]>,
    /// The pass's scissor array (`isp_scissor_base`), packed `Scissor`
    /// entries, one per viewport/scissor update.
    scissors: Vec<u8>,
    /// The vertex buffer for pipelines with a vertex layout.
    vertex_buffer: Option<u64>,
    /// The largest per-thread stack of the vertex shaders placed so far.
    vertex_stack_bytes: u32,
    /// The same for the fragment shaders.
    fragment_stack_bytes: u32,
}

impl RenderPass<'_> {
    /// Sets the viewport: normalised device coordinates map to the
    /// rectangle at (`x`, `y`) of `width` x `height` pixels (y down) and
    /// depth to `min_depth..max_depth`. The default is the whole render
    /// area and 0..1. Pixels outside the viewport's rectangle are not
    /// drawn (the scissor, always on, is the rectangle within the
    /// application's scissor).
    pub fn set_viewport(
        &mut self,
        x: f32,
        y: f32,
        width: f32,
        height: f32,
        min_depth: f32,
        max_depth: f32,
    ) {
        let viewport = [x, y, width, height, min_depth, max_depth];
        if viewport != self.viewport {
            self.viewport = viewport;
            self.dirty_viewport = true;
        }
    }

    /// Sets the scissor: only pixels in the rectangle at (`x`, `y`) of
    /// `width` x `height` pixels are drawn (`None`: the whole viewport).
    pub fn set_scissor(&mut self, scissor: Option<[u32; 4]>) {
        if scissor != self.scissor {
            self.scissor = scissor;
            self.dirty_viewport = true;
        }
    }

    /// Binds a pipeline (nothing is emitted if it is already bound).
    pub fn set_pipeline(&mut self, pipeline: &Arc<GraphicsPipeline>) {
        if self
            .pipeline
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(p, pipeline))
        {
            return;
        }
        self.pipeline = Some(Arc::clone(pipeline));
        self.cb.keep.push(Arc::clone(pipeline));
        self.dirty_vertex = true;
        self.dirty_fragment = true;
    }

    /// Sets the vertex buffer pipelines with a vertex layout fetch from
    /// (its GPU address).
    pub fn set_vertex_buffer(&mut self, va: u64) {
        if self.vertex_buffer != Some(va) {
            self.vertex_buffer = Some(va);
            self.dirty_vertex = true;
        }
    }

    /// Sets the vertex shader's uniforms (32-bit words from u0).
    pub fn set_vertex_uniforms(&mut self, words: &[u32]) {
        if self.vs_uniforms != words {
            self.vs_uniforms = words.to_vec();
            self.dirty_vertex = true;
        }
    }

    /// Sets the fragment shader's uniforms (32-bit words from u0).
    pub fn set_fragment_uniforms(&mut self, words: &[u32]) {
        if self.fs_uniforms != words {
            self.fs_uniforms = words.to_vec();
            self.dirty_fragment = true;
        }
    }

    /// Binds images to the fragment shader's texture state registers
    /// (ts0, ts1, ...) and samplers to its sampler state registers.
    pub fn set_fragment_textures(
        &mut self,
        images: &[&Image],
        samplers: &[Sampler],
    ) -> Result<(), Error> {
        let textures = images
            .iter()
            .map(|i| pack_texture(&i.texture_descriptor()))
            .collect::<Result<Vec<_>, _>>()?;
        let samplers = samplers
            .iter()
            .map(|s| s.pack().map_err(pack_err))
            .collect::<Result<Vec<_>, _>>()?;
        if textures != self.fs_textures || samplers != self.fs_samplers {
            self.fs_textures = textures;
            self.fs_samplers = samplers;
            self.dirty_fragment = true;
        }
        Ok(())
    }

    fn emit_state(&mut self) -> Result<(), Error> {
        let pipeline = self
            .pipeline
            .clone()
            .ok_or_else(|| Error::Unsupported("a draw without a pipeline".into()))?;
        let cb = &mut *self.cb;
        if self.dirty_vertex {
            let mut bindings = Bindings {
                stack_bytes: pipeline.vertex_stack_bytes,
                ..Bindings::default()
            }
            .with_uniform_words(&mut cb.data, &self.vs_uniforms)?;
            if let Some(offsets) = &pipeline.attribute_offsets {
                let base = self.vertex_buffer.ok_or_else(|| {
                    Error::Unsupported(
                        "a pipeline with a vertex layout and no vertex buffer".into(),
                    )
                })?;
                let words: Vec<u8> = offsets
                    .iter()
                    .flat_map(|&o| (base + u64::from(o)).to_le_bytes())
                    .collect();
                if !words.is_empty() {
                    let slice = cb.data.upload(&words, 16)?;
                    bindings.uniforms.push((
                        2 * VERTEX_ATTRIBUTE_UNIFORM,
                        slice.va,
                        (words.len() / 2) as u32,
                    ));
                }
            }
            let vs = place_pipeline(&cb.device, &mut cb.usc, &pipeline.vertex, &bindings)?;
            self.blocks.push(self.vdm.len());
            VdmBlock::VdmStateUpdate(VdmStateWords {
                vertex_shader_word_1: Some(VdmStateVertexShaderWord1 {
                    pipeline: u64::from(vs),
                    ..VdmStateVertexShaderWord1::default()
                }),
                vertex_outputs: Some(VdmStateVertexOutputs {
                    output_count_1: pipeline.outputs,
                    output_count_2: 0,
                }),
                ..VdmStateWords::default()
            })
            .build(&mut self.vdm)
            .map_err(seq_err)?;
            cb.stats.vertex_states += 1;
            self.vertex_stack_bytes = self.vertex_stack_bytes.max(pipeline.vertex_stack_bytes);
            self.dirty_vertex = false;
        }
        if self.dirty_fragment {
            let mut bindings = Bindings {
                tilebuffer_sample_bytes: Some(self.sample_bytes),
                loads_varyings: pipeline.cf_bindings > 0,
                stack_bytes: pipeline.fragment_stack_bytes,
                ..Bindings::default()
            }
            .with_uniform_words(&mut cb.data, &self.fs_uniforms)?;
            if !self.fs_textures.is_empty() {
                let bytes: Vec<u8> = self.fs_textures.concat();
                let slice = cb.data.upload(&bytes, 64)?;
                bindings.textures = Some((self.fs_textures.len() as u32, slice.va));
            }
            if !self.fs_samplers.is_empty() {
                let bytes: Vec<u8> = self.fs_samplers.concat();
                let slice = cb.data.upload(&bytes, 64)?;
                bindings.samplers = Some((self.fs_samplers.len() as u32, slice.va));
            }
            let bindings = cb.with_heap(bindings);
            let fs = place_pipeline(&cb.device, &mut cb.usc, &pipeline.fragment, &bindings)?;
            let stencil = pipeline.stencil;
            let face = FragmentFace {
                depth_function: pipeline.depth.map_or(ZsFunc::Always, |d| d.function),
                disable_depth_write: !pipeline.depth.is_some_and(|d| d.write),
                stencil_reference: u32::from(stencil.map_or(0, |s| s.reference)),
                ..FragmentFace::default()
            };
            let stencil_record = stencil.map(|s| FragmentStencil {
                write_mask: u32::from(s.write_mask),
                read_mask: u32::from(s.read_mask),
                depth_pass: s.pass,
                depth_fail: s.depth_fail,
                stencil_fail: s.fail,
                compare: s.compare,
            });
            // The same state for both faces. The scissor is always on (as
            // Mesa has it): without an application scissor it is the
            // viewport's rectangle.
            let records = PppRecords {
                fragment_control: Some(FragmentControl {
                    stencil_test_enable: stencil.is_some(),
                    scissor_enable: true,
                    pass_type: pipeline.fragment.pass_type(),
                    ..FragmentControl::default()
                }),
                fragment_front_face: Some(face),
                fragment_front_stencil: stencil_record,
                fragment_back_face: Some(face),
                fragment_back_stencil: stencil_record,
                cull: Some(Cull {
                    cull_front: pipeline.cull == CullMode::Front,
                    cull_back: pipeline.cull == CullMode::Back,
                    front_face_ccw: pipeline.front_ccw,
                    ..Cull::default()
                }),
                fragment_shader: Some(PppRecordsFragmentShader {
                    word0: FragmentShaderWord0 {
                        cf_binding_count: pipeline.cf_bindings,
                        ..FragmentShaderWord0::default()
                    },
                    word1: FragmentShaderWord1 {
                        pipeline: u64::from(fs),
                        ..FragmentShaderWord1::default()
                    },
                    // No varyings, no table (address 0), as Mesa has it.
                    word2: FragmentShaderWord2 {
                        cf_bindings: if pipeline.cf_bindings == 0 {
                            0
                        } else {
                            u64::from(pipeline.cf_table.usc_offset().unwrap_or(0))
                        },
                    },
                    word3: FragmentShaderWord3::default(),
                }),
                ..PppRecords::default()
            };
            self.push_ppp(&records)?;
            self.fragment_stack_bytes =
                self.fragment_stack_bytes.max(pipeline.fragment_stack_bytes);
            self.dirty_fragment = false;
        }
        if self.dirty_viewport {
            // Viewport and scissor in their own update, as Mesa emits
            // them: the PPP keeps the records of earlier updates.
            let [vx, vy, vw, vh, near, far] = self.viewport;
            let (width, height) = (
                u32::from(self.render.width_px),
                u32::from(self.render.height_px),
            );
            // The viewport's pixels (an odd size has a .5 centre and
            // half-size, so the sums are whole), within the render area
            // and the application's scissor.
            let edge = |centre: f32, half: f32, limit: u32| -> u32 {
                ((centre + half) as i64).clamp(0, i64::from(limit)) as u32
            };
            let (cx, cy) = (vx + vw / 2.0, vy + vh / 2.0);
            let (hx, hy) = ((vw / 2.0).abs(), (vh / 2.0).abs());
            let mut rect = [
                edge(cx, -hx, width),
                edge(cy, -hy, height),
                edge(cx, hx, width),
                edge(cy, hy, height),
            ];
            if let Some([x, y, w, h]) = self.scissor {
                rect[0] = rect[0].max(x);
                rect[1] = rect[1].max(y);
                rect[2] = rect[2].min(x.saturating_add(w));
                rect[3] = rect[3].min(y.saturating_add(h));
            }
            let index = (self.scissors.len() / 16) as u32;
            let scissor = Scissor {
                min_x: rect[0],
                min_y: rect[1],
                max_x: rect[2].max(rect[0]),
                max_y: rect[3].max(rect[1]),
                min_z: near.min(far),
                max_z: near.max(far),
            };
            self.scissors.extend(scissor.pack().map_err(pack_err)?);
            let tiles = |px: u32| px.div_ceil(REGION_CLIP_TILE_PX).max(1);
            let records = PppRecords {
                depth_bias_scissor: Some(DepthBiasScissor {
                    scissor: index,
                    depth_bias: 0,
                }),
                region_clip: Some(vec![RegionClip {
                    enable: true,
                    min_x: scissor.min_x / REGION_CLIP_TILE_PX,
                    min_y: scissor.min_y / REGION_CLIP_TILE_PX,
                    max_x: tiles(scissor.max_x),
                    max_y: tiles(scissor.max_y),
                }]),
                // NDC to window coordinates with y pointing down the image.
                viewport: Some(PppRecordsViewport {
                    control: ViewportControl::default(),
                    viewports: vec![Viewport {
                        translate_x: cx,
                        scale_x: vw / 2.0,
                        translate_y: cy,
                        scale_y: -vh / 2.0,
                        translate_z: near,
                        scale_z: far - near,
                    }],
                }),
                ..PppRecords::default()
            };
            self.push_ppp(&records)?;
            self.dirty_viewport = false;
        }
        Ok(())
    }

    /// Uploads a PPP state update and points the VDM stream at it.
    fn push_ppp(&mut self, records: &PppRecords) -> Result<(), Error> {
        let mut ppp = Vec::new();
        records.build(&mut ppp).map_err(seq_err)?;
        let slice = self.cb.data.upload(&ppp, 64)?;
        self.blocks.push(self.vdm.len());
        VdmBlock::PppStateUpdate(PppState {
            pointer: slice.va,
            size_words: (ppp.len() / 4) as u32,
        })
        .build(&mut self.vdm)
        .map_err(seq_err)?;
        self.cb.stats.ppp_states += 1;
        Ok(())
    }

    fn primitive(&self) -> Primitive {
        match self.pipeline.as_ref().map(|p| p.topology) {
            Some(Topology::TriangleStrip) => Primitive::TriangleStrip,
            Some(Topology::TriangleFan) => Primitive::TriangleFan,
            _ => Primitive::Triangles,
        }
    }

    /// Draws `vertex_count` vertices (ids from `first_vertex`) of
    /// `instance_count` instances.
    pub fn draw(
        &mut self,
        vertex_count: u32,
        instance_count: u32,
        first_vertex: u32,
    ) -> Result<(), Error> {
        if vertex_count == 0 || instance_count == 0 {
            // Nothing to draw (as Vulkan's draws of zero instances).
            return Ok(());
        }
        self.emit_state()?;
        self.blocks.push(self.vdm.len());
        VdmBlock::IndexList(IndexListBlock {
            header: IndexList {
                primitive: self.primitive(),
                ..IndexList::default()
            },
            count: Some(IndexListCount {
                count: vertex_count,
            }),
            instances: Some(IndexListInstances {
                count: instance_count,
            }),
            start: Some(IndexListStart {
                start: first_vertex,
            }),
            ..IndexListBlock::default()
        })
        .build(&mut self.vdm)
        .map_err(seq_err)?;
        self.cb.stats.draws += 1;
        Ok(())
    }

    /// Draws `index_count` 32-bit indices from `indices` at
    /// `offset_bytes`, `instance_count` instances, adding `base_vertex`.
    pub fn draw_indexed(
        &mut self,
        indices: &Buffer,
        offset_bytes: u64,
        index_count: u32,
        instance_count: u32,
        base_vertex: u32,
    ) -> Result<(), Error> {
        let len_bytes = 4 * u64::from(index_count);
        if offset_bytes
            .checked_add(len_bytes)
            .is_none_or(|end| end > indices.size_bytes())
        {
            return Err(Error::OutOfBounds {
                offset_bytes,
                len_bytes,
                size_bytes: indices.size_bytes(),
            });
        }
        if !offset_bytes.is_multiple_of(4) {
            return Err(Error::Unsupported(format!(
                "32-bit indices at byte offset {offset_bytes}"
            )));
        }
        if index_count == 0 || instance_count == 0 {
            return Ok(());
        }
        self.emit_state()?;
        let address = indices.va() + offset_bytes;
        self.blocks.push(self.vdm.len());
        // The index buffer's size from the first index, as Mesa gives it
        // (the word holds up to 16 GiB).
        let buffer_bytes = ((indices.size_bytes() - offset_bytes) / 4 * 4).min((1 << 34) - 4);
        VdmBlock::IndexList(IndexListBlock {
            header: IndexList {
                primitive: self.primitive(),
                index_size: IndexSize::U32,
                index_buffer_hi: (address >> 32) as u32,
                ..IndexList::default()
            },
            buffer_lo: Some(IndexListBufferLo {
                buffer_lo: address as u32,
            }),
            count: Some(IndexListCount { count: index_count }),
            instances: Some(IndexListInstances {
                count: instance_count,
            }),
            start: Some(IndexListStart { start: base_vertex }),
            buffer_size: Some(IndexListBufferSize {
                size_bytes: buffer_bytes,
            }),
            ..IndexListBlock::default()
        })
        .build(&mut self.vdm)
        .map_err(seq_err)?;
        self.cb.stats.draws += 1;
        Ok(())
    }

    /// The render command as it stands (for inspection).
    pub fn command(&self) -> &CmdRender {
        &self.render
    }

    /// Ends the pass: terminates the control stream and records the
    /// command. The stream is laid out in chunks of at most
    /// [`VDM_CHUNK_BYTES`], each ending in a link to the next, as the
    /// hardware walks them.
    pub fn end(mut self) -> Result<(), Error> {
        self.blocks.push(self.vdm.len());
        self.vdm
            .extend(VdmStreamTerminate::default().pack().map_err(pack_err)?);
        let link_bytes = 8;
        // Cut at block starts so that every chunk, with its link, fits.
        let mut cuts = vec![0usize];
        for (i, &start) in self.blocks.iter().enumerate() {
            let chunk_start = *cuts.last().unwrap_or(&0);
            let next_end = self.blocks.get(i + 1).copied().unwrap_or(self.vdm.len());
            if next_end - chunk_start + link_bytes > VDM_CHUNK_BYTES && start > chunk_start {
                cuts.push(start);
            }
        }
        cuts.push(self.vdm.len());
        let slices = cuts
            .windows(2)
            .map(|w| {
                let link = if w[1] == self.vdm.len() {
                    0
                } else {
                    link_bytes
                };
                self.cb.data.alloc((w[1] - w[0] + link) as u64, 64)
            })
            .collect::<Result<Vec<_>, _>>()?;
        for (i, w) in cuts.windows(2).enumerate() {
            let mut chunk = self.vdm[w[0]..w[1]].to_vec();
            if let Some(next) = slices.get(i + 1) {
                chunk.extend(
                    VdmStreamLink {
                        target: next.va,
                        with_return: false,
                    }
                    .pack()
                    .map_err(pack_err)?,
                );
            }
            self.cb.data.write(&slices[i], 0, &chunk)?;
        }
        self.cb.stats.vdm_chunks += slices.len() as u64;
        self.render.vdm_ctrl_stream_base = slices[0].va;
        if !self.scissors.is_empty() {
            self.render.isp_scissor_base = self.cb.data.upload(&self.scissors, 64)?.va;
        }
        // Stacks for the largest each stage's pipelines asked for (the
        // fragment helper also serves the fragment programs of partial
        // renders).
        self.render.vertex_helper = self.cb.stack_helper(self.vertex_stack_bytes)?;
        self.render.fragment_helper = self.cb.stack_helper(self.fragment_stack_bytes)?;
        if self.vertex_stack_bytes > 0 {
            // As Mesa says it: the vertex stage uses scratch.
            self.render.flags |= RenderFlags::VERTEX_SCRATCH.bits();
        }
        self.cb
            .commands
            .push(Command::Render(Box::new(self.render)));
        Ok(())
    }
}
