//! The per-tile pass: every tile of every layer of a render pass, on as
//! many host threads as the simulator has workers. One tile: depth and
//! stencil in, the background program, each binned primitive rasterised,
//! depth-tested and shaded (an opaque one only where it is still visible
//! when the hidden-surface removal resolves the tile's tags), depth and
//! stencil out, the end-of-tile program.

use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use agx_fwif::messages::{FaultUnit, RenderPass, TvbInfo};
use agx_hw::formats::{
    FragmentFace, FragmentStencil, PassType, VisibilityMode, ZlsControl, ZlsFormat,
};

use super::depth::{depth_test, stencil_test_early, DepthAdjust, Watch};
use super::io::Piece;
use super::program::{
    fragment_pipeline, fragment_setup, program, run_tile_program, FragmentSetup, TileState,
};
use super::scene::{read_scene, tile_primitives, Scene};
use super::tilebuffer::Tilebuffer;
use super::zls::ZlsPlanes;
use crate::bind::Binding;
use crate::command::{RunContext, Watchdog};
use crate::fault::unsupported;
use crate::fault::EngineResult;
use crate::helper::{HelperProgram, StageHelper};
use crate::imageblock::ImageWriteTarget;
use crate::memory::GpuVm;
use crate::probe::{PixelEvent, Stage};
use crate::raster::{rasterize_into, sample_positions, setup_coefficients, Coefficient, Extras};
use crate::texture::DecodedImages;
use crate::tiler;
use crate::usc::{ProgramCache, SimdGroup, LANES};
use crate::workers::run_items_then;

/// The ZLS control a segment runs with. The kmd gives the firmware the
/// pass's word for the reload after a partial render too (the asahi
/// driver's `reload_zlsctrl`), and Mesa's GL driver stores depth it
/// writes but loads it only when the pass does not clear it; it renders
/// correctly on the hardware when the parameter buffer overflows, so a
/// resumed segment must load what the partial render stored. This model
/// loads depth (stencil) in a resumed segment whenever it is stored;
/// which unit does this (firmware or ZLS) is not public.
fn segment_zls(pass: ZlsControl, resumed: bool) -> ZlsControl {
    if !resumed {
        return pass;
    }
    ZlsControl {
        z_load_enable: pass.z_load_enable || pass.z_store_enable,
        s_load_enable: pass.s_load_enable || pass.s_store_enable,
        ..pass
    }
}

/// Renders the scene binned so far: every tile, through the programs of
/// the segment: `bg` for the first segment of the pass and `partial_bg`
/// for one resumed after a partial render, `eot` for the last segment and
/// `partial_eot` for one ended by a partial render. Tiles are independent
/// and run on `workers` host threads; when several fail, the
/// lowest-numbered tile's failure is reported, whatever the thread count.
///
/// A segment that is both resumed and ended by a partial render skips the
/// tiles it binned nothing into, even when the pass processes empty tiles:
/// for such a tile the segment would only load what the previous segment
/// stored (`partial_bg`) and store it again (`partial_eot`). The first
/// segment (which may clear) and the last (whose `eot` may differ from the
/// partial store) still visit every tile the pass asks for, so a frame's
/// partial renders cost what their geometry covers rather than a pass over
/// every tile each (`Documentation/parameter-buffer.md`). Returns the
/// number of tiles visited.
#[allow(clippy::too_many_arguments)]
pub(crate) fn render_scene(
    ctx: &RunContext<'_>,
    vm: GpuVm<'_>,
    usc_exec_base: u64,
    render: &RenderPass,
    info: &TvbInfo,
    last: bool,
    workers: usize,
    helper: Option<HelperProgram>,
) -> Result<u64, EngineResult> {
    let area = (render.width_px, render.height_px);
    // A helper keeps per-core state in memory: no more threads than
    // cores.
    let workers = if helper.is_some() {
        workers.min(crate::helper::CORES)
    } else {
        workers
    };
    let next_core = AtomicU32::new(0);
    let vm_slot = ctx.vm_slot;
    let (Ok(samples), Ok(sample_bytes)) = (
        u8::try_from(render.samples),
        u8::try_from(render.sample_size_bytes),
    ) else {
        return Err(unsupported(
            ctx.command,
            FaultUnit::Firmware,
            format_args!(
                "a render pass of {} samples of {} bytes",
                render.samples, render.sample_size_bytes
            ),
        ));
    };
    // Tile sizes and sample counts the hardware has; anything else is a
    // pass the kmd should not have built.
    let tile_ok = |px: u32| px == 16 || px == 32;
    if !tile_ok(render.utile_width_px)
        || !tile_ok(render.utile_height_px)
        || !matches!(samples, 1 | 2 | 4)
    {
        return Err(unsupported(
            ctx.command,
            FaultUnit::Firmware,
            format_args!(
                "a render pass of {}x{}-pixel tiles and {samples} samples (16 or 32 pixels, 1, 2 or 4 samples are modelled)",
                render.utile_width_px, render.utile_height_px
            ),
        ));
    }
    let Some(scene) = read_scene(&vm, info, area)? else {
        tracing::debug!("no scene: the vertex half did not finish");
        return Ok(0);
    };
    let resumed = scene.header.segment > 0;
    let zls = segment_zls(
        ZlsControl::unpack(&render.zls.ctrl.to_le_bytes()).value,
        resumed,
    );
    let zls_planes = ZlsPlanes::new(render, &zls)?;
    let watchdog = ctx.watchdog();
    let heap = (!render.sampler_heap.is_null())
        .then_some((render.sampler_heap.get(), render.sampler_count));
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
            &watchdog,
            heap,
        )?,
        eot: program(
            &vm,
            usc_exec_base,
            if last { render.eot } else { render.partial_eot },
            &watchdog,
            heap,
        )?,
        tile: (render.utile_width_px, render.utile_height_px),
        area,
        zls,
        zls_planes,
        heap,
        // A partial render of a resumed segment skips empty tiles (above).
        process_empty: render.process_empty_tiles() && (!resumed || last),
        last,
        watchdog,
        sample_positions: sample_positions(samples, render.ppp_multisamplectl),
        tiles_visited: AtomicU64::new(0),
        visibility: std::sync::Mutex::new(std::collections::BTreeMap::new()),
    };
    // A pass that samples what its own tiles store reads what another
    // tile stored or not depending on the order tiles run in: such a pass
    // runs its tiles in order, so that its result does not depend on the
    // host's thread count.
    let workers = match pass.feedback(&vm) {
        Some(feedback) => {
            // Many such passes read only their own tiles' pixels (a
            // texture barrier between draws), which no order changes: the
            // first is a warning, the rest go to the debug log.
            static WARNED: std::sync::atomic::AtomicBool =
                std::sync::atomic::AtomicBool::new(false);
            let message = format!(
                "a render pass samples an image its own tiles store: a tile that reads texels \
                 another tile stores reads them stored or not depending on the order tiles run \
                 (a feedback loop); its tiles run in order (texture at {:#x}, state {}, {} \
                 image at {:#x})",
                feedback.texture, feedback.state, feedback.target, feedback.target_base
            );
            if WARNED.swap(true, Ordering::Relaxed) {
                tracing::debug!("{message}");
            } else {
                tracing::warn!("{message}; further passes like it are logged at debug level");
            }
            1
        }
        None => workers,
    };
    // Tiles are numbered row by row, layer by layer; none is listed up
    // front (a pass may have 2^31 of them).
    let tiles_x = u64::from(area.0.div_ceil(pass.tile.0));
    let tiles_y = u64::from(area.1.div_ceil(pass.tile.1));
    let tiles = tiles_x * tiles_y * u64::from(render.layers);
    let shader_code = ctx.shader_code.clone();
    let scratch = || Worker {
        vm: None,
        cache: ProgramCache::with_code(shader_code.clone()),
        shaders: std::collections::HashMap::new(),
        tile: Tilebuffer::new(pass.tile, samples, sample_bytes),
        killed: Vec::new(),
        pending: Vec::new(),
        pending_stencil: Vec::new(),
        coverage: Vec::new(),
        tags: Vec::new(),
        helper: StageHelper::new(helper, next_core.fetch_add(1, Ordering::Relaxed), vm_slot),
        group: SimdGroup::new(0, 0),
        decoded: DecodedImages::default(),
        image_writes: ImageWriteTarget::default(),
        whole_tile: Vec::new(),
        spare_coefficients: Vec::new(),
    };
    run_items_then(
        tiles,
        workers,
        ctx.preemption,
        scratch,
        |worker, index| {
            let layer = (index / (tiles_x * tiles_y)) as u32;
            let ty = (index / tiles_x % tiles_y) as u32;
            let tx = (index % tiles_x) as u32;
            // The worker's copy, lent to the tile (which borrows the
            // worker too) and taken back; made by its first tile.
            let tile_vm = worker.vm.take().unwrap_or_else(|| vm.clone());
            let result = pass.render_tile(&tile_vm, worker, (layer, tx, ty));
            worker.vm = Some(tile_vm);
            result
        },
        |worker| worker.helper.end(&mut vm.clone(), &pass.watchdog),
    )?;
    pass.write_visibility(&vm)?;
    Ok(pass.tiles_visited.load(Ordering::Relaxed))
}

/// What every tile of a segment shares.
pub(super) struct Pass<'a> {
    pub(super) usc_exec_base: u64,
    pub(super) render: &'a RenderPass,
    pub(super) scene: Scene,
    pub(super) bg: Binding,
    pub(super) eot: Binding,
    pub(super) tile: (u32, u32),
    pub(super) area: (u32, u32),
    pub(super) zls: ZlsControl,
    /// The depth and stencil planes `zls` loads and stores.
    pub(super) zls_planes: ZlsPlanes,
    pub(super) heap: Option<(u64, u32)>,
    /// Whether tiles with no primitives in this segment are rendered.
    pub(super) process_empty: bool,
    /// Whether the segment ends the pass (not a partial render).
    pub(super) last: bool,
    pub(super) watchdog: Watchdog<'a>,
    /// Sample positions in 1/256 pixel from the pixel's corner.
    pub(super) sample_positions: Vec<(i64, i64)>,
    /// Tiles not skipped as empty (visited).
    pub(super) tiles_visited: AtomicU64,
    /// Occlusion queries: per visibility-result entry, the samples that
    /// passed and whether the entry counts them (else it is boolean).
    pub(super) visibility: std::sync::Mutex<std::collections::BTreeMap<u32, (u64, bool)>>,
}

/// One worker's tile memory and caches.
pub(super) struct Worker<'v> {
    /// The command's memory as this worker's tiles read it: one copy for
    /// all of them, so that its translation cache keeps the pages every
    /// tile reads (the scene's lists, the targets, the textures).
    pub(super) vm: Option<GpuVm<'v>>,
    pub(super) cache: ProgramCache,
    /// Fragment setups by state. Counted without atomics: a worker and
    /// its setups stay on its thread, and every binned primitive takes a
    /// reference (an atomic count was 1-2% of a point-heavy pass).
    pub(super) shaders: std::collections::HashMap<u32, std::rc::Rc<FragmentSetup>>,
    pub(super) tile: Tilebuffer,
    /// Per pixel of the tile, for the primitive being shaded: the samples
    /// the shader killed (discard, sample masks, a failed shader depth
    /// test).
    pub(super) killed: Vec<u32>,
    /// Per sample of the tile: the depth to write once the shader is done.
    pub(super) pending: Vec<Option<f32>>,
    pub(super) pending_stencil: Vec<Option<u8>>,
    /// Per pixel of the tile: the samples the program being run covers.
    pub(super) coverage: Vec<u32>,
    /// Per sample of the tile: the deferred opaque primitive visible there
    /// (an index into the tile's deferred list), or [`NO_TAG`].
    pub(super) tags: Vec<u32>,
    /// The core's helper program (stacks for programs with a spill size).
    pub(super) helper: StageHelper,
    /// The register file the tile's programs run in.
    pub(super) group: SimdGroup,
    /// The texture descriptors its programs decoded.
    pub(super) decoded: DecodedImages,
    /// The descriptor its programs' image writes last went through.
    pub(super) image_writes: ImageWriteTarget,
    /// Every pixel of a tile in 2x2 quads (quads in rows, each quad's
    /// pixels in lane order), for the background program of a tile inside
    /// the render area: the order the quads of its row-major pixels take.
    pub(super) whole_tile: Vec<(u32, u32)>,
    /// Coefficient registers of primitives shaded and finished, for the
    /// next ones to fill (a tile shades thousands of primitives): at most
    /// as many as a tile held waiting at once, kept until the pass ends.
    pub(super) spare_coefficients: Vec<Vec<Coefficient>>,
}

/// A sample no deferred primitive is visible at.
const NO_TAG: u32 = u32::MAX;

/// How many primitive records ahead of the one it reads a tile's pass
/// has the host prefetch.
const RECORDS_PREFETCHED_AHEAD: usize = 4;

/// The bytes of a record prefetched: the head and a triangle of
/// position and 1/w and four varyings a vertex.
const RECORD_BYTES_PREFETCHED: u64 = 8 + 3 * 4 * 8;

/// An opaque primitive whose shading waits for the hidden-surface
/// removal: its shader runs, once, at the samples it is still visible at
/// when the tile's tags are resolved.
struct Deferred {
    setup: std::rc::Rc<FragmentSetup>,
    coefficients: Vec<Coefficient>,
    face: Option<FragmentFace>,
    back_facing: bool,
}

/// Primitives shaded in drawing order, waiting to share SIMD-groups: of
/// one state and facing, their pixels apart.
#[derive(Default)]
struct InOrderBatch {
    /// Their state (`None`: no primitive waits).
    setup: Option<std::rc::Rc<FragmentSetup>>,
    back_facing: bool,
    face: Option<FragmentFace>,
    /// The stencil state whose operations wait for the shader's `zs_emit`.
    stencil: Option<FragmentStencil>,
    pieces: Vec<InOrderPiece>,
    /// The pixels they cover.
    taken: PixelSet,
}

/// One waiting in-order primitive: the pixels it is shaded at, its
/// coefficient registers, and the occlusion query its samples count for.
struct InOrderPiece {
    covered: Vec<(u32, u32)>,
    coefficients: Vec<Coefficient>,
    query: Option<(u32, bool)>,
}

/// A set of a tile's pixels (by index), a bit each: the pixels a batch of
/// primitives waiting to share SIMD-groups covers.
#[derive(Default)]
struct PixelSet {
    words: Vec<u64>,
}

impl PixelSet {
    fn new(pixels: usize) -> PixelSet {
        PixelSet {
            words: vec![0; pixels.div_ceil(64)],
        }
    }

    fn holds(&self, pixel: usize) -> bool {
        self.words
            .get(pixel / 64)
            .is_some_and(|word| word & (1 << (pixel % 64)) != 0)
    }

    fn take(&mut self, pixel: usize) {
        if let Some(word) = self.words.get_mut(pixel / 64) {
            *word |= 1 << (pixel % 64);
        }
    }

    fn clear(&mut self) {
        self.words.fill(0);
    }
}

/// The occlusion query a state's samples count for, and whether it counts
/// them (or only says whether any passed).
fn occlusion_query(ppp: &tiler::PppState) -> Option<(u32, bool)> {
    ppp.occlusion_query.and_then(
        |index| match ppp.fragment_control.map(|c| c.visibility_mode) {
            Some(VisibilityMode::Counting) => Some((index, true)),
            Some(VisibilityMode::Boolean) => Some((index, false)),
            _ => None,
        },
    )
}

/// Whether a primitive's shading may wait for the hidden-surface removal:
/// its pass type is opaque (the driver promises the shader neither reads
/// the tilebuffer nor writes a sample mask) and the shader does not write
/// depth or stencil, so the depth and stencil tests finish before it runs
/// and a later primitive passing them at a sample replaces it there.
fn deferrable(setup: &FragmentSetup) -> bool {
    setup.binding.is_some()
        && !setup.writes_depth
        && !setup.writes_stencil
        && setup.ppp.fragment_control.unwrap_or_default().pass_type == PassType::Opaque
}

/// A texture a fragment program of a pass samples that overlaps an image
/// the pass's own tiles store.
struct Feedback {
    /// Where the overlapping part of the texture (a layer's levels)
    /// starts.
    texture: u64,
    /// The binned state whose program binds it.
    state: u32,
    /// What the pass stores there: "depth", "stencil" or "colour".
    target: &'static str,
    /// Where that stored image starts.
    target_base: u64,
}

impl Pass<'_> {
    /// The first texture, bound by a Texture word of a fragment program
    /// the scene's states name, whose sampled levels overlap a depth or
    /// stencil plane the pass stores or the level its end-of-tile
    /// program's PBE descriptors write (so rendering one mip level of an
    /// image from another is no feedback). Textures a program finds
    /// bindlessly are not looked at; a state or descriptor that cannot be
    /// read is skipped (the tile that draws with it reports it).
    fn feedback(&self, vm: &GpuVm<'_>) -> Option<Feedback> {
        let mut stored = self.zls_planes.stored_spans(self.render.layers);
        for binding in &self.eot.textures {
            for i in 0..u64::from(binding.count) {
                let descriptor = binding.buffer.wrapping_add(24 * i);
                for (start, end) in crate::imageblock::pbe_written_spans(vm, descriptor)
                    .into_iter()
                    .flatten()
                {
                    stored.push((start, end, "colour"));
                }
            }
        }
        if stored.is_empty() {
            return None;
        }
        for state in 0..self.scene.header.state_count {
            let Ok((Some(pipeline), _)) = fragment_pipeline(vm, &self.scene, state) else {
                continue;
            };
            let Ok(descriptors) = crate::bind::texture_descriptor_addresses(
                vm,
                self.usc_exec_base.wrapping_add(pipeline),
            ) else {
                continue;
            };
            for descriptor in descriptors {
                let Some(sampled) = crate::texture::sampled_spans(vm, descriptor) else {
                    continue;
                };
                for (start, end) in sampled {
                    if let Some(&(target_base, _, target)) =
                        stored.iter().find(|(s, e, _)| start < *e && *s < end)
                    {
                        return Some(Feedback {
                            texture: start,
                            state,
                            target,
                            target_base,
                        });
                    }
                }
            }
        }
        None
    }

    /// Adds the segment's occlusion-query results to the visibility-result
    /// buffer (`isp_oclqry_base`, 64-bit entries): a counting entry gains
    /// the samples that passed, a boolean one becomes 1 if any did (the
    /// value the hardware writes there is not public; Mesa reads it as
    /// nonzero or not). Mesa zeroes an entry when its query begins.
    fn write_visibility(&self, vm: &GpuVm<'_>) -> Result<(), EngineResult> {
        let base = self.render.isp_oclqry_base.get();
        let results = std::mem::take(
            &mut *self
                .visibility
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if base == 0 {
            return Ok(());
        }
        for (index, (samples, counting)) in results {
            let at = base.wrapping_add(8 * u64::from(index));
            let mut word = [0u8; 8];
            vm.read(at, &mut word)
                .map_err(|f| EngineResult::from_uat(&f, FaultUnit::Zls))?;
            let old = u64::from_le_bytes(word);
            let new = if counting {
                old.wrapping_add(samples)
            } else if samples > 0 {
                1
            } else {
                old
            };
            crate::usc::GpuMemory::write(&mut vm.clone(), at, &new.to_le_bytes())
                .map_err(|f| crate::fault::memory_fault(&f, FaultUnit::Zls))?;
        }
        Ok(())
    }

    /// One tile: depth/stencil in, bg, the tile's primitives, depth/stencil
    /// out, eot.
    fn render_tile(
        &self,
        vm: &GpuVm<'_>,
        w: &mut Worker,
        (layer, tx, ty): (u32, u32, u32),
    ) -> Result<(), EngineResult> {
        // One work unit per tile looked at, and per sample of a tile set
        // up and written back (below).
        self.watchdog.charge(1);
        if self.watchdog.expired() {
            return Err(EngineResult::Timeout);
        }
        let render = self.render;
        let scene = &self.scene;
        let (tile_w, tile_h) = self.tile;
        let area = self.area;
        // The scene is binned in tiler::TILE_PX tiles; a smaller pass
        // tile takes the primitives of the scene tile holding it, and
        // rasterisation keeps what falls inside. Each layer's tile draws
        // the primitives whose records name that layer.
        let primitives = {
            let (scene_x, scene_y) = (tx * tile_w / tiler::TILE_PX, ty * tile_h / tiler::TILE_PX);
            let index = u64::from(scene_y) * u64::from(scene.header.tiles_x) + u64::from(scene_x);
            let mut primitives = tile_primitives(vm, scene, index)?;
            if render.layers > 1 {
                let mut flags = [0u8; 4];
                let mut on_layer = Vec::with_capacity(primitives.len());
                for &primitive in &primitives {
                    vm.read(primitive.wrapping_add(4), &mut flags)
                        .map_err(|f| EngineResult::from_uat(&f, FaultUnit::Tiler))?;
                    if (u32::from_le_bytes(flags) >> tiler::RECORD_LAYER_SHIFT)
                        & tiler::RECORD_LAYER_MASK
                        == layer
                    {
                        on_layer.push(primitive);
                    }
                }
                primitives = on_layer;
            }
            primitives
        };
        if primitives.is_empty() && !self.process_empty {
            return Ok(());
        }
        self.tiles_visited.fetch_add(1, Ordering::Relaxed);
        self.watchdog
            .charge(u64::from(tile_w * tile_h) * u64::from(render.samples.max(1)));
        let origin = (tx * tile_w, ty * tile_h);
        let tile = &mut w.tile;
        tile.colour.bytes.fill(0);
        self.zls_planes.load(vm, tile, (tx, ty), layer)?;
        // The debugger's watched pixel, if it is in this tile.
        let watch = self.watchdog.probe.and_then(|probe| {
            let (px, py) = probe.watched_pixel()?;
            let inside = (origin.0..origin.0 + tile_w).contains(&px)
                && (origin.1..origin.1 + tile_h).contains(&py);
            inside.then_some(Watch {
                probe,
                command: self.watchdog.command,
                pixel: (px - origin.0, py - origin.1),
            })
        });
        if let Some(watch) = watch {
            let samples = tile.colour.samples as usize;
            let first = (watch.pixel.1 * tile_w + watch.pixel.0) as usize * samples;
            watch.probe.pixel_event(PixelEvent::TileStart {
                command: watch.command,
                tile: (tx, ty),
                layer,
                segment: self.scene.header.segment,
                last: self.last,
                depth: tile.depth[first..first + samples].to_vec(),
                stencil: tile.stencil[first..first + samples].to_vec(),
            });
        }
        // The background program runs on every pixel of the render area
        // in the tile, in quads. A tile inside the area, of even sides,
        // is all whole quads: their order is the same for every tile.
        let inside = origin.0 + tile_w <= area.0
            && origin.1 + tile_h <= area.1
            && tile_w % 2 == 0
            && tile_h % 2 == 0;
        let all: Vec<(u32, u32)> = if inside {
            if w.whole_tile.len() != (tile_w * tile_h) as usize {
                w.whole_tile = (0..tile_h / 2)
                    .flat_map(|qy| (0..tile_w / 2).map(move |qx| (qx * 2, qy * 2)))
                    .flat_map(|(x, y)| [(x, y), (x + 1, y), (x, y + 1), (x + 1, y + 1)])
                    .collect();
            }
            Vec::new()
        } else {
            (0..tile_h)
                .flat_map(|y| (0..tile_w).map(move |x| (x, y)))
                .filter(|&(x, y)| origin.0 + x < area.0 && origin.1 + y < area.1)
                .collect()
        };
        let run = |w: &mut Worker,
                   stage: Stage,
                   binding: &Binding,
                   pieces: &[Piece<'_>],
                   quads: bool,
                   (face, stencil, stencil_test_at_emit): (
            Option<FragmentFace>,
            Option<FragmentStencil>,
            bool,
        )| {
            run_tile_program(
                &self.watchdog,
                vm,
                &mut w.cache,
                binding,
                TileState {
                    tile: &mut w.tile,
                    killed: &mut w.killed,
                    sample_positions: &self.sample_positions,
                    pending_depth: &mut w.pending,
                    pending_stencil: &mut w.pending_stencil,
                    coverage: &w.coverage,
                    face,
                    stencil,
                    stencil_test_at_emit,
                    helper: &mut w.helper,
                    group: &mut w.group,
                    decoded: &w.decoded,
                    image_writes: &mut w.image_writes,
                },
                origin,
                area,
                layer,
                pieces,
                quads,
                self.heap,
                stage,
            )
        };
        let pixel_count = (tile_w * tile_h) as usize;
        let samples = w.tile.colour.samples as usize;
        let full = (1u32 << samples) - 1;
        w.killed.clear();
        w.killed.resize(pixel_count, 0);
        w.pending.clear();
        w.pending.resize(pixel_count * samples, None);
        w.pending_stencil.clear();
        w.pending_stencil.resize(pixel_count * samples, None);
        w.coverage.clear();
        w.coverage.resize(pixel_count, full);
        w.tags.clear();
        w.tags.resize(pixel_count * samples, NO_TAG);
        // Resolving the tags: each deferred primitive's shader runs once
        // over the pixels where it is still visible, with the samples it
        // is visible at as their coverage, in drawing order.
        let resolve = |w: &mut Worker, deferred: &mut Vec<Deferred>| -> Result<(), EngineResult> {
            if deferred.is_empty() {
                return Ok(());
            }
            // Each primitive's visible pixels, in pixel order, as a run
            // of one array: the runs counted, then filled.
            let each_visible = |w: &Worker, each: &mut dyn FnMut(usize, (u32, u32))| {
                for pixel in 0..pixel_count {
                    let tags = &w.tags[pixel * samples..(pixel + 1) * samples];
                    for (sample, &tag) in tags.iter().enumerate() {
                        // A primitive visible at several of the pixel's
                        // samples has the pixel once.
                        if tag != NO_TAG && !tags[..sample].contains(&tag) {
                            let xy = ((pixel as u32) % tile_w, (pixel as u32) / tile_w);
                            each(tag as usize, xy);
                        }
                    }
                }
            };
            let mut run_ends = vec![0usize; deferred.len()];
            each_visible(w, &mut |tag, _| run_ends[tag] += 1);
            let mut total = 0;
            for end in &mut run_ends {
                total += *end;
                *end = total;
            }
            let run_starts: Vec<usize> = std::iter::once(0)
                .chain(run_ends.iter().copied())
                .take(deferred.len())
                .collect();
            let mut pixels_of_runs = vec![(0u32, 0u32); total];
            let mut next = run_starts.clone();
            each_visible(w, &mut |tag, xy| {
                pixels_of_runs[next[tag]] = xy;
                next[tag] += 1;
            });
            let visible: Vec<&[(u32, u32)]> = run_starts
                .iter()
                .zip(&run_ends)
                .map(|(&start, &end)| &pixels_of_runs[start..end])
                .collect();
            // Consecutive primitives of one state and facing whose
            // visible pixels do not meet share SIMD-groups when the
            // shader allows it (`packs_primitives`).
            let mut batch: Vec<usize> = Vec::new();
            let mut taken = PixelSet::new(pixel_count);
            let flush = |w: &mut Worker,
                         batch: &mut Vec<usize>,
                         taken: &mut PixelSet|
             -> Result<(), EngineResult> {
                let Some(&first) = batch.first() else {
                    return Ok(());
                };
                for &index in batch.iter() {
                    for &(x, y) in visible[index] {
                        let pixel = (y * tile_w + x) as usize;
                        w.coverage[pixel] = w.tags[pixel * samples..(pixel + 1) * samples]
                            .iter()
                            .enumerate()
                            .filter(|&(_, &tag)| tag == index as u32)
                            .fold(0, |mask, (s, _)| mask | 1 << s);
                    }
                }
                let primitive = &deferred[first];
                if let Some(shader) = &primitive.setup.binding {
                    let pieces: Vec<Piece<'_>> = batch
                        .iter()
                        .map(|&index| Piece {
                            pixels: visible[index],
                            coefficients: &deferred[index].coefficients,
                            back_facing: deferred[index].back_facing,
                        })
                        .collect();
                    run(
                        w,
                        Stage::Fragment,
                        shader,
                        &pieces,
                        true,
                        (primitive.face, None, false),
                    )?;
                }
                // An opaque shader kills nothing (its depth is written
                // already); a sample mask it writes anyway drops colour.
                for &index in batch.iter() {
                    for &(x, y) in visible[index] {
                        w.killed[(y * tile_w + x) as usize] = 0;
                    }
                }
                batch.clear();
                taken.clear();
                Ok(())
            };
            for (index, (primitive, &pixels)) in deferred.iter().zip(&visible).enumerate() {
                if pixels.is_empty() {
                    continue;
                }
                let joins = batch.first().is_some_and(|&first| {
                    let head = &deferred[first];
                    // Facing changes only the `backfacing` register (set
                    // per lane) and the depth state (the same both ways,
                    // or unused: a deferred shader emits no depth).
                    std::rc::Rc::ptr_eq(&head.setup, &primitive.setup)
                        && (head.back_facing == primitive.back_facing
                            || head.face == primitive.face)
                        && primitive.setup.packs_primitives
                        && !pixels
                            .iter()
                            .any(|&(x, y)| taken.holds((y * tile_w + x) as usize))
                });
                if !joins {
                    flush(w, &mut batch, &mut taken)?;
                }
                for &(x, y) in pixels {
                    taken.take((y * tile_w + x) as usize);
                }
                batch.push(index);
            }
            flush(w, &mut batch, &mut taken)?;
            w.tags.fill(NO_TAG);
            w.spare_coefficients
                .extend(deferred.drain(..).map(|primitive| primitive.coefficients));
            Ok(())
        };
        let mut deferred: Vec<Deferred> = Vec::new();
        // Depth and stencil of the pixels a primitive's shader kept; then
        // the per-pixel state is clean again for the next primitive. The
        // samples kept count for the state's occlusion query.
        let finish = |w: &mut Worker, covered: &[(u32, u32)], query: Option<(u32, bool)>| {
            let mut passed = 0u64;
            for &(x, y) in covered {
                let pixel = (y * tile_w + x) as usize;
                let at = pixel * samples;
                let mask = w.coverage[pixel];
                let alive = mask & !w.killed[pixel];
                passed += u64::from((alive & ((1u32 << samples.min(31)) - 1)).count_ones());
                for s in (0..samples).filter(|s| alive & (1 << s) != 0) {
                    if let Some(depth) = w.pending[at + s] {
                        w.tile.depth[at + s] = depth;
                    }
                    if let Some(value) = w.pending_stencil[at + s] {
                        w.tile.stencil[at + s] = value;
                    }
                }
                w.pending[at..at + samples].fill(None);
                w.pending_stencil[at..at + samples].fill(None);
                w.killed[pixel] = 0;
            }
            if let Some((index, counting)) = query {
                let mut results = self
                    .visibility
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let entry = results.entry(index).or_insert((0, counting));
                entry.0 += passed;
            }
        };
        // Primitives shaded in drawing order wait in a batch while the
        // next ones are of the same state and facing and cover none of
        // their pixels, and share SIMD-groups when the shader allows it;
        // a primitive that meets their pixels, a resolution of the tags
        // and the end of the tile run them first (and finish them).
        let mut in_order = InOrderBatch {
            taken: PixelSet::new(pixel_count),
            ..InOrderBatch::default()
        };
        let flush_in_order =
            |w: &mut Worker, batch: &mut InOrderBatch| -> Result<(), EngineResult> {
                let Some(setup) = batch.setup.take() else {
                    return Ok(());
                };
                if let Some(shader) = &setup.binding {
                    let pieces: Vec<Piece<'_>> = batch
                        .pieces
                        .iter()
                        .map(|piece| Piece {
                            pixels: &piece.covered,
                            coefficients: &piece.coefficients,
                            back_facing: batch.back_facing,
                        })
                        .collect();
                    run(
                        w,
                        Stage::Fragment,
                        shader,
                        &pieces,
                        true,
                        (batch.face, batch.stencil, setup.writes_stencil),
                    )?;
                }
                for piece in batch.pieces.drain(..) {
                    finish(w, &piece.covered, piece.query);
                    w.spare_coefficients.push(piece.coefficients);
                }
                batch.taken.clear();
                Ok(())
            };
        fn whole_tile(pixels: &[(u32, u32)]) -> [Piece<'_>; 1] {
            [Piece {
                pixels,
                coefficients: &[],
                back_facing: false,
            }]
        }
        // A resumed segment's background program reloads what a partial
        // render stored.
        let background = Stage::Background {
            reload: self.scene.header.segment > 0,
        };
        if inside {
            let pixels = std::mem::take(&mut w.whole_tile);
            let ran = run(
                w,
                background,
                &self.bg,
                &whole_tile(&pixels),
                false,
                (None, None, false),
            );
            w.whole_tile = pixels;
            ran?;
        } else {
            run(
                w,
                background,
                &self.bg,
                &whole_tile(&all),
                true,
                (None, None, false),
            )?;
        }
        // The background program does not discard.
        w.killed.fill(0);
        // Buffers the tile's primitives reuse: a record's bytes and
        // floats, the pixels it covers and those of them its tests keep
        // (handed on with a primitive that waits to be shaded in order).
        let mut bytes = Vec::new();
        let mut record = Vec::new();
        let mut rasterized = Vec::new();
        let mut kept_pixels = Vec::new();
        let mut last_setup: Option<(u32, std::rc::Rc<FragmentSetup>)> = None;
        for (index, &primitive) in primitives.iter().enumerate() {
            // The records were written long before (the whole scene's
            // may not fit the host's caches): the host is told a few
            // records ahead which it will read (head and vertices, most
            // often within two cache lines).
            if let Some(&ahead) = primitives.get(index + RECORDS_PREFETCHED_AHEAD) {
                vm.prefetch(ahead, RECORD_BYTES_PREFETCHED);
            }
            // The record's head: state index and flags (back-facing, and
            // how many varyings each vertex carries).
            let mut head = [0u8; 8];
            vm.read(primitive, &mut head)
                .map_err(|f| EngineResult::from_uat(&f, FaultUnit::Tiler))?;
            let state = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            let flags = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            let back_facing = flags & tiler::RECORD_BACK_FACING != 0;
            // The scene is in GPU-writable memory: nothing in it is trusted.
            let varyings =
                ((flags >> tiler::RECORD_VARYINGS_SHIFT) & tiler::RECORD_VARYINGS_MASK) as usize;
            if varyings > tiler::MAX_RECORD_VALUES {
                return Err(unsupported(
                    primitive,
                    FaultUnit::Tiler,
                    format_args!(
                        "a binned primitive with {varyings} values per vertex, more than the {} any draw has",
                        tiler::MAX_RECORD_VALUES
                    ),
                ));
            }
            // The extras at the end of each vertex's values.
            let point_sprite = flags & tiler::RECORD_POINT_SPRITE != 0;
            let primitive_id = flags & tiler::RECORD_PRIMITIVE_ID != 0;
            let extras = 2 * usize::from(point_sprite) + usize::from(primitive_id);
            let extras_at = (4 + varyings).checked_sub(extras).filter(|at| *at >= 4);
            let extras = Extras {
                point_coord: extras_at.filter(|_| point_sprite),
                primitive_id: extras_at
                    .filter(|_| primitive_id)
                    .map(|at| at + 2 * usize::from(point_sprite)),
            };
            // Then the three vertices that follow it.
            let record_floats = 4 + varyings;
            bytes.clear();
            bytes.resize(12 * record_floats, 0);
            vm.read(primitive.wrapping_add(8), &mut bytes)
                .map_err(|f| EngineResult::from_uat(&f, FaultUnit::Tiler))?;
            let float = |i: usize| {
                let at = 4 * i;
                f32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default())
            };
            let positions: [[f32; 2]; 3] =
                std::array::from_fn(|v| [float(v * record_floats), float(v * record_floats + 1)]);
            rasterize_into(
                positions,
                origin,
                (tile_w, tile_h),
                area,
                &self.sample_positions,
                &mut rasterized,
            );
            if rasterized.is_empty() {
                continue;
            }
            // (Most of a tile's primitives have the state of the one
            // before.)
            let entry = match &last_setup {
                Some((last, setup)) if *last == state => std::rc::Rc::clone(setup),
                _ => {
                    let setup = match w.shaders.entry(state) {
                        Entry::Occupied(known) => std::rc::Rc::clone(known.get()),
                        Entry::Vacant(new) => {
                            let setup = fragment_setup(
                                vm,
                                self.usc_exec_base,
                                render,
                                scene,
                                state,
                                (&self.watchdog, &mut w.helper),
                            )?;
                            std::rc::Rc::clone(new.insert(std::rc::Rc::new(setup)))
                        }
                    };
                    last_setup = Some((state, std::rc::Rc::clone(&setup)));
                    setup
                }
            };
            // A primitive shaded in drawing order (translucent, punch
            // through, writing depth or stencil) first has the deferred
            // ones under it shaded.
            let defer = deferrable(&entry);
            if !defer && entry.binding.is_some() && !deferred.is_empty() {
                flush_in_order(w, &mut in_order)?;
                resolve(w, &mut deferred)?;
            }
            let FragmentSetup {
                binding: shader,
                ppp,
                writes_depth: shader_writes_depth,
                writes_stencil: shader_writes_stencil,
                scissors,
                depth_bias,
                packs_primitives: _,
                cf_bindings: _,
            } = &*entry;
            // The scissor of the primitive's viewport.
            let scissor = &scissors
                .get((flags >> tiler::RECORD_VIEWPORT_SHIFT) as usize)
                .or(scissors.first())
                .copied();
            // The scissor keeps the pixels inside its rectangle.
            let in_scissor = |x: u32, y: u32| {
                scissor.is_none_or(|s| {
                    let (px, py) = (origin.0 + x, origin.1 + y);
                    (s.min_x..s.max_x).contains(&px) && (s.min_y..s.max_y).contains(&py)
                })
            };
            if let Some(watch) = watch {
                if let Some(&(_, mask)) = rasterized.iter().find(|(xy, _)| *xy == watch.pixel) {
                    watch.probe.pixel_event(PixelEvent::Primitive {
                        command: watch.command,
                        record: primitive,
                        state,
                        coverage: mask,
                        in_scissor: in_scissor(watch.pixel.0, watch.pixel.1),
                        deferred: defer && shader.is_some(),
                        shader_writes_depth_or_stencil: *shader_writes_depth
                            || *shader_writes_stencil,
                    });
                }
            }
            let covered: &mut Vec<(u32, u32)> = &mut kept_pixels;
            covered.clear();
            for &((x, y), _) in &rasterized {
                if in_scissor(x, y) {
                    covered.push((x, y));
                }
            }
            if covered.is_empty() {
                continue;
            }
            // Pixels of the waiting in-order primitives are theirs until
            // they are shaded and finished.
            if in_order.setup.is_some()
                && covered
                    .iter()
                    .any(|&(x, y)| in_order.taken.holds((y * tile_w + x) as usize))
            {
                flush_in_order(w, &mut in_order)?;
            }
            for &((x, y), mask) in &rasterized {
                if in_scissor(x, y) {
                    w.coverage[(y * tile_w + x) as usize] = mask;
                }
            }
            record.clear();
            record.extend(
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
            let vertices: [&[f32]; 3] =
                std::array::from_fn(|v| &record[v * record_floats..(v + 1) * record_floats]);
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
            // A shader that writes depth: the stencil test now, the
            // depth test and its stencil operations at its zs_emit. One
            // that writes the stencil reference: both tests there.
            let late_stencil = stencil.filter(|_| *shader_writes_depth || *shader_writes_stencil);
            if let (Some(st), Some(face), false) = (late_stencil, face, *shader_writes_stencil) {
                stencil_test_early(
                    &mut w.tile,
                    covered,
                    &mut w.coverage,
                    st,
                    face.stencil_reference as u8,
                );
                if covered.is_empty() {
                    continue;
                }
            }
            if !shader_writes_depth {
                let mut pending = std::mem::take(&mut w.pending);
                let mut pending_stencil = std::mem::take(&mut w.pending_stencil);
                depth_test(
                    &mut w.tile,
                    covered,
                    &mut w.coverage,
                    &mut pending,
                    &mut pending_stencil,
                    origin,
                    &self.sample_positions,
                    &vertices,
                    DepthAdjust {
                        bias: *depth_bias,
                        float_depth: self.zls.z_format != ZlsFormat::Unorm16,
                        range: scissor.map(|s| (s.min_z, s.max_z)),
                    },
                    face,
                    stencil.filter(|_| !shader_writes_stencil),
                    *shader_writes_stencil,
                    watch,
                );
                w.pending = pending;
                w.pending_stencil = pending_stencil;
                if covered.is_empty() {
                    continue;
                }
            }
            // With tag writes disabled no shader runs: the depth and
            // stencil results of the tests above are written as they are.
            // An opaque primitive's shader waits: its samples that passed
            // are tagged with it, replacing the tags of what it hides.
            if shader.is_some() {
                let bindings = entry.cf_bindings(vm, self.usc_exec_base)?;
                let mut coefficients = w.spare_coefficients.pop().unwrap_or_default();
                setup_coefficients(bindings, ppp, &vertices, extras, &mut coefficients)?;
                if defer {
                    let tag = deferred.len() as u32;
                    for &(x, y) in covered.iter() {
                        let pixel = (y * tile_w + x) as usize;
                        let mask = w.coverage[pixel];
                        for s in (0..samples).filter(|s| mask & (1 << s) != 0) {
                            w.tags[pixel * samples + s] = tag;
                        }
                    }
                    deferred.push(Deferred {
                        setup: std::rc::Rc::clone(&entry),
                        coefficients,
                        face,
                        back_facing,
                    });
                } else {
                    let joins = in_order.setup.as_ref().is_some_and(|waiting| {
                        std::rc::Rc::ptr_eq(waiting, &entry)
                            && in_order.back_facing == back_facing
                            && entry.packs_primitives
                    });
                    if !joins {
                        flush_in_order(w, &mut in_order)?;
                        in_order.setup = Some(std::rc::Rc::clone(&entry));
                        in_order.back_facing = back_facing;
                        in_order.face = face;
                        in_order.stencil = late_stencil;
                    }
                    for &(x, y) in covered.iter() {
                        in_order.taken.take((y * tile_w + x) as usize);
                    }
                    in_order.pieces.push(InOrderPiece {
                        covered: std::mem::take(covered),
                        coefficients,
                        query: occlusion_query(ppp),
                    });
                    continue;
                }
            }
            let query = occlusion_query(ppp);
            // Nothing to count, write or clear: a deferred primitive with
            // depth writes, the stencil test and queries off.
            let pends = *shader_writes_depth
                || *shader_writes_stencil
                || stencil.is_some()
                || face.is_some_and(|f| !f.disable_depth_write);
            if query.is_none() && !pends && defer {
                continue;
            }
            finish(w, covered, query);
        }
        flush_in_order(w, &mut in_order)?;
        resolve(w, &mut deferred)?;
        self.zls_planes.store(vm, &w.tile, (tx, ty), layer)?;
        if let Some(watch) = watch {
            let samples = w.tile.colour.samples as usize;
            let first = (watch.pixel.1 * tile_w + watch.pixel.0) as usize * samples;
            let record_bytes = samples * w.tile.colour.sample_bytes as usize;
            let colour_at = first / samples * record_bytes;
            watch.probe.pixel_event(PixelEvent::TileEnd {
                command: watch.command,
                colour: w.tile.colour.bytes[colour_at..colour_at + record_bytes].to_vec(),
                depth: w.tile.depth[first..first + samples].to_vec(),
                stencil: w.tile.stencil[first..first + samples].to_vec(),
            });
        }
        w.coverage.fill(full);
        run(
            w,
            Stage::EndOfTile,
            &self.eot,
            &whole_tile(&[(0, 0); LANES]),
            false,
            (None, None, false),
        )
    }
}
