//! Running per-tile programs: the background, fragment and end-of-tile
//! programs, each bound through its USC control words and run on 32-lane
//! SIMD-groups of 2x2 pixel quads (helpers fill uncovered quad members so
//! derivatives work). Also how a primitive's state names its fragment
//! shader, and whether that shader writes depth.

use agx_fwif::messages::{FaultUnit, RenderPass, TileProgram};
use agx_hw::formats::{DepthBias, FragmentFace, FragmentStencil, Scissor};
use zerocopy::FromBytes;

use super::io::{Piece, TileIo};
use super::scene::Scene;
use super::tilebuffer::Tilebuffer;
use crate::bind::{self, Binding};
use crate::command::Watchdog;
use crate::fault::EngineResult;
use crate::fault::{exec_fault, unsupported};
use crate::helper::StageHelper;
use crate::imageblock::ImageWriteTarget;
use crate::memory::read_words;
use crate::memory::GpuVm;
use crate::probe::Stage;
use crate::shader::{packs_primitives, present_lanes, walk};
use crate::texture::{DecodedImages, TextureUnit};
use crate::tiler;
use crate::usc::io::IoError;
use crate::usc::{ExecError, ProgramCache, ShaderEngine, SimdGroup, LANES};

/// The USC control words of a bg/eot program, or a fault at the null
/// address for a missing one.
pub(super) fn program(
    vm: &GpuVm<'_>,
    usc_exec_base: u64,
    program: TileProgram,
    watchdog: &Watchdog<'_>,
    sampler_heap: Option<(u64, u32)>,
) -> Result<Binding, EngineResult> {
    // The low six bits are flags (Mesa sets 4, or 8 with four or more
    // colour buffers; their meaning is not public): USC words are 64-byte
    // aligned, as every pipeline address the hardware takes is.
    let offset = u64::from(program.usc & !0x3F);
    if offset == 0 {
        return Err(EngineResult::Fault {
            address: 0,
            unit: FaultUnit::Usc as u32,
            access: 2,
            reason: agx_hw::formats::UatFaultReason::Unmapped.to_raw(),
        });
    }
    bind::bind(
        vm,
        usc_exec_base.wrapping_add(offset),
        usc_exec_base,
        watchdog,
        bind::StageSamplers {
            heap: sampler_heap,
            states: agx_hw::formats::SamplerStates::None,
        },
        None,
    )
}

/// The tile state a per-tile program works on.
pub(super) struct TileState<'a> {
    pub(super) tile: &'a mut Tilebuffer,
    pub(super) killed: &'a mut [u32],
    /// The pass's sample positions (1/256 pixel from the corner).
    pub(super) sample_positions: &'a [(i64, i64)],
    pub(super) pending_depth: &'a mut [Option<f32>],
    pub(super) pending_stencil: &'a mut [Option<u8>],
    pub(super) coverage: &'a [u32],
    pub(super) face: Option<FragmentFace>,
    /// The stencil state whose depth operations wait for the shader's
    /// depth (a shader that writes depth or the stencil reference).
    pub(super) stencil: Option<FragmentStencil>,
    /// The shader writes the stencil reference: the stencil test itself
    /// (and, without shader depth, the depth test) waits for `zs_emit`.
    pub(super) stencil_test_at_emit: bool,
    /// The core's helper program.
    pub(super) helper: &'a mut StageHelper,
    /// The core's register file: the program's SIMD-groups run one after
    /// another in it (a fresh 16 KiB file per program and tile was a
    /// zeroed allocation each time).
    pub(super) group: &'a mut SimdGroup,
    /// The texture descriptors the core's programs decoded (kept across
    /// tiles: a tile's primitives are often a SIMD-group or less each).
    pub(super) decoded: &'a DecodedImages,
    /// The descriptor the core's image writes last went through.
    pub(super) image_writes: &'a mut ImageWriteTarget,
}

/// Runs a per-tile program with one lane per pixel of `pieces`
/// (tile-local coordinates), 32 lanes per SIMD-group. With `quads`, each
/// piece's pixels are run in 2x2 quads and the quads of consecutive
/// pieces fill a SIMD-group together (the caller gives several pieces
/// only when their pixels are disjoint and the program cannot tell its
/// SIMD-group's other quads apart from its own primitive's:
/// [`packs_primitives`]); each lane reads its own piece's coefficient
/// registers.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_tile_program(
    watchdog: &Watchdog<'_>,
    vm: &GpuVm<'_>,
    cache: &mut ProgramCache,
    binding: &Binding,
    state: TileState<'_>,
    origin: (u32, u32),
    area: (u32, u32),
    layer: u32,
    pieces: &[Piece<'_>],
    quads: bool,
    sampler_heap: Option<(u64, u32)>,
    stage: Stage,
) -> Result<(), EngineResult> {
    let TileState {
        tile,
        killed,
        sample_positions,
        pending_depth,
        pending_stencil,
        coverage,
        face,
        stencil,
        stencil_test_at_emit,
        helper: stage_helper,
        group,
        decoded,
        image_writes,
    } = state;
    let mut uniforms = binding.uniforms.clone();
    let mut memory = vm.clone();
    // Lanes come in 2x2 quads (lane bit 0: x, bit 1: y), as the hardware
    // runs fragments, so that texture instructions can take derivatives;
    // quad members that are not covered run as helpers whose outputs are
    // dropped. The end-of-tile program runs once, on its pixels as given.
    // The piece each lane's pixel belongs to, alongside.
    let mut order = Vec::new();
    let mut helpers = Vec::new();
    let mut owners: Vec<u16> = Vec::new();
    for (index, piece) in pieces.iter().enumerate() {
        let owner = index as u16;
        let pixels = piece.pixels;
        if !quads {
            order.extend_from_slice(pixels);
            helpers.resize(order.len(), false);
            owners.resize(order.len(), owner);
            continue;
        }
        // Tiles are at most 32 pixels wide: one bit per pixel of a row,
        // and one per quad of a quad row.
        let mut covered = [0u64; 64];
        for &(x, y) in pixels {
            if let Some(row) = covered.get_mut(y as usize) {
                *row |= 1 << (x & 63);
            }
        }
        let mut seen = [0u64; 32];
        order.reserve(pixels.len() + 8);
        helpers.reserve(pixels.len() + 8);
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
                owners.push(owner);
            }
        }
    }
    // Only the special registers the program reads are set up for each
    // SIMD-group (all of them when the scan cannot tell, or for the
    // debugger, which reads a traced lane's coverage): a dozen registers
    // of 32 lanes each were a few percent of a tile-bound pass.
    let reads = *binding
        .special_reads
        .get_or_init(|| crate::shader::special_registers_read(vm, binding.code));
    let reads = reads.filter(|_| watchdog.probe.is_none());
    let wants =
        |sr: u32| reads.is_none_or(|read| read[(sr / 64) as usize % 4] & (1 << (sr % 64)) != 0);
    let unit = TextureUnit {
        vm: vm.clone(),
        textures: &binding.textures,
        samplers: &binding.samplers,
        sampler_heap,
        sampler_stride_bytes: binding.sampler_stride_bytes,
        decoded: Some(decoded),
    };
    // A program whose lanes all store the same values and do nothing
    // else (a clear's background program, a constant colour) gives each
    // SIMD-group the same stores: with the compiled engine, and no
    // debugger following it, only the first group runs, noting its
    // stores and the instructions it took; each later one is charged as
    // many and its lanes get the same stores (coverage, helpers and
    // kills applied per lane as `st_tile` does). A store that fails there
    // is the instruction's: that group runs instead, and reports it (the
    // stores before it, made again, store the same).
    let same_in_every_lane = cache.engine() == ShaderEngine::Compiled
        && watchdog.probe.is_none()
        && *binding
            .same_in_every_lane
            .get_or_init(|| crate::shader::stores_the_same_in_every_lane(vm, binding.code));
    let mut stores = Vec::new();
    // Each store's values for every lane, and where it is a whole unorm8
    // element its offset and bytes.
    let mut every_lane: Vec<([[u32; 4]; LANES], Option<Unorm8Store>)> = Vec::new();
    let mut repeat: Option<u64> = None;
    let (tile_width, tile_height, samples) = (
        tile.colour.width_px,
        tile.colour.height_px,
        tile.colour.samples,
    );
    for ((chunk, helper), owner) in order
        .chunks(LANES)
        .zip(helpers.chunks(LANES))
        .zip(owners.chunks(LANES))
    {
        let mut lanes = [(0u32, 0u32); LANES];
        lanes[..chunk.len()].copy_from_slice(chunk);
        let mut lane_pieces = [0u16; LANES];
        lane_pieces[..owner.len()].copy_from_slice(owner);
        let present = present_lanes(chunk.len());
        let helper_lanes = helper
            .iter()
            .enumerate()
            .fold(0u32, |m, (lane, &h)| if h { m | 1 << lane } else { m });
        let mut io = TileIo {
            tile: &mut *tile,
            origin,
            lanes,
            vm: vm.clone(),
            binding,
            probe: watchdog.probe.map(|probe| (probe, watchdog.command)),
            area,
            layer,
            pieces,
            lane_pieces,
            helpers: helper_lanes,
            unit: &unit,
            killed: &mut *killed,
            sample_positions,
            pending_depth: &mut *pending_depth,
            pending_stencil: &mut *pending_stencil,
            coverage,
            face,
            stencil,
            stencil_test_at_emit,
            image_writes: &mut *image_writes,
            stores: None,
        };
        if let Some(instructions) = repeat {
            let repeated =
                stores
                    .iter()
                    .zip(&every_lane)
                    .try_for_each(|((access, _), (values, unorm8))| {
                        io.tile_store_same(present, access, values, *unorm8)
                    });
            if repeated.is_ok() {
                // One work unit per SIMD-group instruction, as if it ran.
                watchdog.charge(instructions);
                continue;
            }
        }
        let first = same_in_every_lane && repeat.is_none();
        if first {
            io.stores = Some(&mut stores);
        }
        group.reset(binding.code, present);
        use agx_hw::isa::table::sr;
        let special = &mut group.special;
        // Sets a register the program reads to `value(lane)` per lane.
        fn set(
            special: &mut crate::usc::exec::SpecialRegs,
            wants: &impl Fn(u32) -> bool,
            register: u32,
            value: impl Fn(usize) -> u32,
        ) {
            if wants(register) {
                special.set_lanes(register, std::array::from_fn(value));
            }
        }
        let position = sr::THREAD_POSITION_IN_GRID;
        set(special, &wants, position, |lane| origin.0 + lanes[lane].0);
        set(special, &wants, position + 1, |lane| {
            origin.1 + lanes[lane].1
        });
        set(special, &wants, position + 2, |_| layer);
        // The threadgroup of a per-tile program is its tile, in the
        // pass's layer: Mesa reads gl_Layer, and a layered background or
        // end-of-tile program's layer, as its z.
        let tile_position = sr::THREADGROUP_POSITION_IN_GRID;
        set(special, &wants, tile_position, |_| {
            origin.0 / tile_width.max(1)
        });
        set(special, &wants, tile_position + 1, |_| {
            origin.1 / tile_height.max(1)
        });
        set(special, &wants, tile_position + 2, |_| layer);
        // Helper lanes (the uncovered members of a covered pixel's quad,
        // there for derivatives) are not active threads: Mesa reads
        // gl_HelperInvocation as is_active_thread == 0 and wraps a
        // fragment shader's memory writes and atomics in its negation
        // (nir_lower_helper_writes), so the hardware does not mask them.
        set(special, &wants, sr::IS_ACTIVE_THREAD, |lane| {
            u32::from(helper_lanes & (1 << lane) == 0)
        });
        set(special, &wants, sr::BACKFACING, |lane| {
            let piece = pieces.get(usize::from(lane_pieces[lane]));
            u32::from(piece.is_some_and(|piece| piece.back_facing))
        });
        // The samples each lane's pixel covers (every sample for the
        // background and end-of-tile programs; none for helpers, which
        // cover nothing: Mesa's per-sample shading tells helpers by an
        // empty coverage of the sample being shaded).
        set(special, &wants, sr::SAMPLES_LOG2, |_| {
            samples.trailing_zeros()
        });
        let all_samples = (1u32 << samples.min(31)) - 1;
        let covered = |lane: usize| {
            let (x, y) = lanes[lane];
            let pixel = (y * tile_width + x) as usize;
            if helper_lanes & (1 << lane) != 0 {
                return 0;
            }
            coverage.get(pixel).map_or(all_samples, |c| c & all_samples)
        };
        set(special, &wants, sr::COVERAGE_MASK, covered);
        set(special, &wants, sr::INPUT_SAMPLE_MASK, covered);
        set(special, &wants, sr::THREAD_INDEX_IN_SIMDGROUP, |lane| {
            lane as u32
        });
        stage_helper.run_stage_group(
            group,
            binding.spill_bucket,
            cache,
            &mut memory,
            &mut io,
            &mut uniforms,
            watchdog,
            block_store_fault,
            stage,
        )?;
        // (Within one slice: a group of the program never meets a
        // watchdog check inside it.)
        if first && group.executed_instructions < crate::shader::BUDGET_SLICE {
            repeat = Some(group.executed_instructions);
            every_lane = stores
                .iter()
                .map(|&(access, values)| {
                    ([values; LANES], tile.colour.unorm8_store(&access, values))
                })
                .collect();
        }
    }
    // What the texture unit and the shader's memory accesses walked, for
    // the programs after this one.
    vm.keep_translations(&unit.vm);
    vm.keep_translations(&memory);
    Ok(())
}

/// A whole unorm8 element's byte offset in a pixel's record and its
/// bytes ([`crate::imageblock::Imageblock::unorm8_store`]).
type Unorm8Store = (usize, [u8; 4]);

/// A block store that faulted writing the image is a PBE fault; other
/// errors are the shader core's.
pub(super) fn block_store_fault(error: &ExecError) -> EngineResult {
    match error {
        ExecError::Io {
            error: IoError::Memory(fault),
            ..
        } => crate::fault::memory_fault(fault, FaultUnit::Pbe),
        other => exec_fault(other),
    }
}

/// What the fragment stage needs of one primitive state: its shader, the
/// PPP state, and the scissor and depth bias it enables.
pub(super) struct FragmentSetup {
    /// The fragment shader (`None` when none runs: a state with tag
    /// writes disabled).
    pub(super) binding: Option<Binding>,
    /// The PPP state (every record set when the primitive was drawn).
    pub(super) ppp: tiler::PppState,
    /// Whether the shader writes depth (`zs_emit`).
    pub(super) writes_depth: bool,
    /// Whether the shader writes the stencil reference (`zs_emit`).
    pub(super) writes_stencil: bool,
    /// The scissor rectangles (`FragmentControl::scissor_enable`), one
    /// per viewport: the `DepthBiasScissor` record's entry and the ones
    /// after it (Mesa's `agx_upload_viewport_scissor`); empty without.
    pub(super) scissors: Vec<Scissor>,
    /// The depth bias (`FragmentControl::depth_bias_enable`).
    pub(super) depth_bias: Option<DepthBias>,
    /// The shader may share a SIMD-group with other primitives' quads
    /// ([`packs_primitives`]).
    pub(super) packs_primitives: bool,
    /// Its coefficient binding table, read when the first primitive's
    /// coefficients are set up (not before: a pass whose primitives all
    /// fail their tests never reads it) and kept for the pass's other
    /// primitives of the state; a read that faults is not kept, so each
    /// later primitive faults the same.
    pub(super) cf_bindings: std::cell::OnceCell<Option<tiler::CfBindings>>,
}

impl FragmentSetup {
    /// The state's coefficient binding table ([`tiler::read_bindings`]),
    /// read once.
    pub(super) fn cf_bindings(
        &self,
        vm: &GpuVm<'_>,
        usc_exec_base: u64,
    ) -> Result<Option<&tiler::CfBindings>, EngineResult> {
        if let Some(kept) = self.cf_bindings.get() {
            return Ok(kept.as_ref());
        }
        let read = tiler::read_bindings(vm, usc_exec_base, &self.ppp)?;
        Ok(self.cf_bindings.get_or_init(|| read).as_ref())
    }
}

/// The fragment setup of a primitive's state: its shader, and the entries
/// of the render's scissor and depth-bias arrays its `DepthBiasScissor`
/// record names when its fragment control enables them.
pub(super) fn fragment_setup(
    vm: &GpuVm<'_>,
    usc_exec_base: u64,
    render: &RenderPass,
    scene: &Scene,
    state: u32,
    (watchdog, helper): (&Watchdog<'_>, &mut StageHelper),
) -> Result<FragmentSetup, EngineResult> {
    let heap = (!render.sampler_heap.is_null())
        .then_some((render.sampler_heap.get(), render.sampler_count));
    let (binding, ppp) =
        fragment_shader(vm, usc_exec_base, (scene, state), watchdog, (heap, helper))?;
    let control = ppp.fragment_control.unwrap_or_default();
    let indices = ppp.depth_bias_scissor;
    // Entry `index` of an array of N-byte records at `base`.
    fn entry<const N: usize>(
        vm: &GpuVm<'_>,
        base: u64,
        index: u32,
    ) -> Result<[u8; N], EngineResult> {
        read_words::<N>(vm, base.wrapping_add(N as u64 * u64::from(index)))
    }
    let scissors = if control.scissor_enable {
        (0..ppp.viewports.len() as u32)
            .map(|v| {
                let index = indices.scissor.wrapping_add(v);
                entry::<16>(vm, render.isp_scissor_base.get(), index)
                    .map(|bytes| Scissor::unpack(&bytes).value)
            })
            .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    let depth_bias = control
        .depth_bias_enable
        .then(|| entry::<12>(vm, render.isp_dbias_base.get(), indices.depth_bias))
        .transpose()?
        .map(|bytes| DepthBias::unpack(&bytes).value);
    let (writes_depth, writes_stencil) = binding
        .as_ref()
        .map_or((false, false), |binding| zs_outputs(vm, binding.code));
    let packs_primitives = binding
        .as_ref()
        .is_some_and(|binding| packs_primitives(vm, binding.code));
    Ok(FragmentSetup {
        cf_bindings: std::cell::OnceCell::new(),
        packs_primitives,
        writes_depth,
        writes_stencil,
        binding,
        ppp,
        scissors,
        depth_bias,
    })
}

/// The address of the fragment pipeline binned state `state` names (an
/// offset from `usc_exec_base`), and the state. `None` when the state's
/// tag writes are disabled: no fragment shader runs, whatever record an
/// earlier update left (Mesa leaves the record out for shaders that write
/// nothing).
pub(super) fn fragment_pipeline(
    vm: &GpuVm<'_>,
    scene: &Scene,
    state: u32,
) -> Result<(Option<u64>, tiler::PppState), EngineResult> {
    if state >= scene.header.state_count {
        return Err(unsupported(
            scene.header.states,
            FaultUnit::Tiler,
            format_args!(
                "a binned primitive of state {state}, past the scene's {} states",
                scene.header.state_count
            ),
        ));
    }
    let at = scene.header.states + u64::from(state) * size_of::<tiler::FragmentState>() as u64;
    let bytes: [u8; size_of::<tiler::FragmentState>()] = read_words(vm, at)?;
    let fragment_state = tiler::FragmentState::read_from_bytes(&bytes).map_err(|_| {
        unsupported(
            at,
            FaultUnit::Tiler,
            "a binned fragment state that does not parse",
        )
    })?;
    let ppp = tiler::parse_ppp(vm, fragment_state.ppp)?;
    if ppp.fragment_control.is_some_and(|c| c.tag_write_disable) {
        return Ok((None, ppp));
    }
    let Some(pipeline) = ppp.fragment_pipeline else {
        return Err(unsupported(
            fragment_state.ppp,
            FaultUnit::Vdm,
            "a draw whose PPP state has no fragment shader record (and tag writes enabled)",
        ));
    };
    Ok((Some(pipeline), ppp))
}

/// The fragment shader a primitive's state names, and that state.
fn fragment_shader(
    vm: &GpuVm<'_>,
    usc_exec_base: u64,
    (scene, state): (&Scene, u32),
    watchdog: &Watchdog<'_>,
    (sampler_heap, helper): (Option<(u64, u32)>, &mut StageHelper),
) -> Result<(Option<Binding>, tiler::PppState), EngineResult> {
    let (pipeline, ppp) = fragment_pipeline(vm, scene, state)?;
    let Some(pipeline) = pipeline else {
        return Ok((None, ppp));
    };
    let binding = bind::bind(
        vm,
        usc_exec_base.wrapping_add(pipeline),
        usc_exec_base,
        watchdog,
        bind::StageSamplers {
            heap: sampler_heap,
            states: ppp.fragment_sampler_states,
        },
        Some(helper),
    )?;
    Ok((Some(binding), ppp))
}

/// Whether a program writes depth and whether it writes the stencil
/// reference (its first `zs_emit`'s z and s bits; Mesa emits one): the
/// tests then run when the shader emits them, not before the shader.
fn zs_outputs(vm: &GpuVm<'_>, code: u64) -> (bool, bool) {
    walk(vm, code, |_, ins| match ins.op {
        agx_hw::isa::Op::ZsEmit => {
            let zs = ins.operands.get(1).and_then(|o| o.int()).unwrap_or(1);
            Some((zs & 1 != 0, zs & 2 != 0))
        }
        agx_hw::isa::Op::Stop => Some((false, false)),
        _ => None,
    })
    .unwrap_or((false, false))
}
