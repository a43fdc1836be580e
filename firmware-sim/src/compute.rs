//! Compute launches: what the CDM does with a Launch block.
//!
//! A launch names a *pipeline*: a list of USC control words (at
//! `usc_exec_base` + the launch's offset) that set up the shader core
//! before the kernel runs: Uniform words copy memory into uniform
//! registers, Texture/Sampler words bind descriptor arrays, a Shared word
//! sizes threadgroup memory, a Shader word says where the code is, a
//! Registers word how many registers a thread needs, and the list ends
//! with a Preshader or No-preshader word. The launch then runs the kernel
//! over its grid: threadgroups of `local` threads, each split into
//! SIMD-groups of 32 lanes that share the threadgroup's memory and meet at
//! threadgroup barriers. Special registers give each lane its position.
//!
//! When the Shared word gives threadgroup memory a tile layout, it is an
//! image block (see [`crate::imageblock`]): each thread writes its pixel
//! with `st_tile` at explicit coordinates (its position in the
//! threadgroup), and one thread stores the whole block to an image with
//! `image_write_block` at explicit image coordinates. Mesa's blits and
//! image copies work this way.
//!
//! Threadgroups run on the GPU's worker threads; each starts from the
//! pipeline's uniforms and zeroed threadgroup memory, so the results of a
//! race-free kernel never depend on scheduling. Every memory access goes
//! through the GPU MMU; a fault, an instruction the simulator does not
//! model, or a kernel that runs past the watchdog ends the command with
//! the event the hardware would raise.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use agx_fwif::messages::FaultUnit;
use agx_hw::formats::{CdmGlobalSize, CdmLaunch, CdmMode};
use agx_hw::isa::table::sr;

use crate::bind::Binding;
use crate::command::{RunContext, Watchdog};
use crate::fault::{exec_fault, unsupported, EngineResult};
use crate::helper::{HelperProgram, StageHelper, CORES};
use crate::imageblock::{
    store_block, store_texel, BlockPlacement, ImageWriteTarget, Imageblock, ImageblockShape,
};
use crate::memory::{read_words, GpuVm};
use crate::probe::Stage;
use crate::shader::{run_simd_group, Barriers};
use crate::texture::{DecodedImages, TextureUnit};
use crate::usc::io::{BlockStore, ImageWrite, IoError, TextureRequest, TileAccess};
use crate::usc::ShaderIo;
use crate::usc::{Env, Exit, ProgramCache, SimdGroup, LANES, UNIFORMS};
use crate::workers::run_items_then;

/// What a compute command gives every launch in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ComputeCommand {
    /// The sampler heap (address, count), if any.
    pub sampler_heap: Option<(u64, u32)>,
    /// The helper program, if any.
    pub helper: Option<HelperProgram>,
}

/// A parsed Launch block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// Address of the pipeline's USC control words.
    pub pipeline: u64,
    /// Threads in the grid, per dimension.
    pub grid: [u32; 3],
    /// Threads per threadgroup, per dimension.
    pub local: [u32; 3],
}

impl Launch {
    /// The launch a Launch block at `pc` describes; an indirect grid (and
    /// for indirect-local launches the threadgroup size) is read through
    /// the MMU.
    pub fn of(
        vm: &GpuVm<'_>,
        words: &CdmLaunch,
        pc: u64,
        usc_exec_base: u64,
    ) -> Result<Launch, EngineResult> {
        let pipeline = usc_exec_base.wrapping_add(words.word1.pipeline);
        // Indirect local: six words, the grid in threads then the
        // threadgroup size (Mesa's geometry and tessellation set-up
        // kernels write them so, `poly_geometry_params.grid`).
        if let (CdmMode::IndirectLocal, Some(indirect)) = (words.header.mode, words.indirect) {
            let sizes: [u8; 24] = read_words(vm, indirect.address)?;
            let word = |i: usize| {
                u32::from_le_bytes([
                    sizes[4 * i],
                    sizes[4 * i + 1],
                    sizes[4 * i + 2],
                    sizes[4 * i + 3],
                ])
            };
            return Ok(Launch {
                pipeline,
                grid: [word(0), word(1), word(2)],
                local: [word(3), word(4), word(5)],
            });
        }
        let Some(local) = words.local else {
            return Err(unsupported(
                pc,
                FaultUnit::Cdm,
                format_args!(
                    "a compute launch in mode {:?} with no local size",
                    words.header.mode
                ),
            ));
        };
        let global = match (words.global, words.indirect) {
            (Some(global), _) => global,
            // Indirect global: threadgroup counts (Mesa hands the buffer
            // of glDispatchComputeIndirect and vkCmdDispatchIndirect to
            // it as it is), times the block's threadgroup size.
            (None, Some(indirect)) if words.header.mode == CdmMode::IndirectGlobal => {
                let sizes: [u8; 12] = read_words(vm, indirect.address)?;
                let groups = CdmGlobalSize::decode_fields(&sizes);
                let threads = |count: u32, size: u32| {
                    count.checked_mul(size).ok_or_else(|| {
                        unsupported(
                            pc,
                            FaultUnit::Cdm,
                            format_args!(
                                "an indirect grid of {count} threadgroups of {size} threads, past 2^32 threads"
                            ),
                        )
                    })
                };
                CdmGlobalSize {
                    x: threads(groups.x, local.x)?,
                    y: threads(groups.y, local.y)?,
                    z: threads(groups.z, local.z)?,
                }
            }
            _ => {
                return Err(unsupported(
                    pc,
                    FaultUnit::Cdm,
                    format_args!(
                        "a compute launch in mode {:?} without the sizes it needs",
                        words.header.mode
                    ),
                ))
            }
        };
        Ok(Launch {
            pipeline,
            grid: [global.x, global.y, global.z],
            local: [local.x, local.y, local.z],
        })
    }
}

/// SIMD-groups kept from one launch to the next: a launch's workers take
/// their register files from here and give them back, so that a stream of
/// small launches (Mesa's blits and copies, a threadgroup or two each)
/// does not allocate and zero a 16 KiB register file per SIMD-group per
/// launch (which, freed and trimmed, came back as page faults: most of
/// them in piglit's `tex3d-npot`). At most [`SpareGroups::KEPT`] sets, of
/// at most 32 SIMD-groups each (a threadgroup of 1,024 threads): 4 MiB of
/// register files at most, held as long as the GPU.
#[derive(Debug, Default)]
pub struct SpareGroups(Mutex<Vec<Vec<SimdGroup>>>);

impl SpareGroups {
    /// Sets of SIMD-groups kept (one per worker of a launch, typically).
    pub const KEPT: usize = 8;

    fn take(&self) -> Vec<SimdGroup> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default()
    }

    fn give(&self, groups: Vec<SimdGroup>) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() < Self::KEPT && !groups.is_empty() {
            kept.push(groups);
        }
    }
}

/// Runs a bound kernel over a launch's grid on `workers` host threads;
/// returns the SIMD-group instructions executed. Threadgroups are
/// independent, so which thread runs which does not change the results
/// of a race-free kernel; when several fault, the lowest-numbered
/// threadgroup's fault is reported, whatever the thread count.
///
/// When the pipeline has a spill size and the command a helper program,
/// each thread is a core running its own helper: every SIMD-group gets a
/// stack from it before the threadgroup starts and gives it back when the
/// threadgroup ends, and the helper is told to end when the thread has no
/// more threadgroups. A pipeline with a spill size and no helper runs
/// without a stack (its stack accesses fault).
#[allow(clippy::too_many_arguments)]
pub fn run(
    ctx: &RunContext<'_>,
    vm: GpuVm<'_>,
    workers: usize,
    launch: &Launch,
    binding: &Binding,
    launch_pc: u64,
    command: &ComputeCommand,
    spare_groups: &SpareGroups,
) -> Result<u64, EngineResult> {
    let sampler_heap = command.sampler_heap;
    let helper = command.helper;
    // A helper keeps per-core state in memory: no more threads than
    // cores.
    let workers = if helper.is_some() && binding.spill_bucket != 0 {
        workers.min(CORES)
    } else {
        workers
    };
    let next_core = AtomicU32::new(0);
    let local = launch.local;
    let threads_per_group = local.iter().map(|&n| u64::from(n)).product::<u64>();
    if local.contains(&0) || threads_per_group > 1024 {
        return Err(unsupported(
            launch_pc,
            FaultUnit::Cdm,
            format_args!(
                "a threadgroup of {}x{}x{} threads (1 to 1024 are modelled)",
                local[0], local[1], local[2]
            ),
        ));
    }
    if launch.grid.contains(&0) {
        return Ok(0);
    }
    // Threadgroup memory in a tile layout is an image block, which must
    // fit in the memory the Shared word sizes.
    let imageblock = binding
        .shared
        .and_then(|w| ImageblockShape::of_shared(w.layout, w.sample_count, w.sample_stride_bytes));
    if let Some(shape) = imageblock {
        let block_bytes = shape.bytes();
        if block_bytes > binding.shared_bytes as u64 {
            return Err(unsupported(
                launch.pipeline,
                FaultUnit::Usc,
                format_args!(
                    "an image block of {block_bytes} bytes, larger than the pipeline's {} bytes of threadgroup memory",
                    binding.shared_bytes
                ),
            ));
        }
    }
    let groups: [u32; 3] = std::array::from_fn(|d| launch.grid[d].div_ceil(local[d]));
    let total = groups.iter().map(|&n| u64::from(n)).product::<u64>();
    let instructions = AtomicU64::new(0);
    let watchdog = ctx.watchdog();
    let vm_slot = ctx.vm_slot;
    // Per worker: its MMU view, program cache, uniforms and threadgroup
    // memory (or image block), its core number, its helper (started
    // when its first threadgroup needs a stack), its SIMD-groups, the
    // texture descriptors its threadgroups decoded and the descriptor
    // their image writes last went through.
    let shader_code = ctx.shader_code.clone();
    let scratch = || {
        (
            vm.clone(),
            ProgramCache::with_code(shader_code.clone()),
            binding.uniforms.clone(),
            vec![
                0u8;
                if imageblock.is_some() {
                    0
                } else {
                    binding.shared_bytes
                }
            ],
            imageblock.map(Imageblock::new),
            StageHelper::new(helper, next_core.fetch_add(1, Ordering::Relaxed), vm_slot),
            spare_groups.take(),
            DecodedImages::default(),
            ImageWriteTarget::default(),
        )
    };
    run_items_then(
        total,
        workers,
        ctx.preemption,
        scratch,
        |(vm, cache, uniforms, threadgroup, block, helper, simd, decoded, image_writes), index| {
            // A grid of many short threadgroups meets the watchdog too:
            // one work unit per threadgroup launched, besides its
            // instructions.
            if index.is_multiple_of(64) {
                watchdog.charge(64);
                if watchdog.expired() {
                    return Err(EngineResult::Timeout);
                }
            } else {
                // Every threadgroup is a preemption point: a kernel of
                // short, texture-heavy threadgroups (under one
                // SIMD-group slice each) took 30 ms to park every 64.
                ctx.preemption.check_point();
            }
            let g = [
                (index % u64::from(groups[0])) as u32,
                (index / u64::from(groups[0]) % u64::from(groups[1])) as u32,
                (index / (u64::from(groups[0]) * u64::from(groups[1]))) as u32,
            ];
            // Every threadgroup starts from the pipeline's uniforms and
            // zeroed threadgroup memory, whichever worker runs it.
            threadgroup.fill(0);
            if let Some(block) = block.as_mut() {
                block.bytes.fill(0);
            }
            uniforms.copy_from_slice(&binding.uniforms[..]);
            simd_groups(simd, vm_slot, launch, binding, g, threads_per_group);
            let mut io = KernelIo {
                unit: TextureUnit {
                    vm: vm.clone(),
                    textures: &binding.textures,
                    samplers: &binding.samplers,
                    sampler_heap,
                    sampler_stride_bytes: binding.sampler_stride_bytes,
                    decoded: Some(decoded),
                },
                binding,
                block: block.as_mut(),
                image_writes,
            };
            helper.run_with_stacks(simd, binding.spill_bucket, vm, &watchdog, |simd, vm| {
                let result = run_threadgroup(
                    &watchdog,
                    &mut io,
                    vm,
                    cache,
                    simd,
                    (uniforms, threadgroup),
                    launch_pc,
                );
                let executed: u64 = simd.iter().map(|s| s.executed_instructions).sum();
                instructions.fetch_add(executed, Ordering::Relaxed);
                result
            })
        },
        |(vm, _, _, _, _, helper, groups, _, _)| {
            spare_groups.give(std::mem::take(groups));
            helper.end(vm, &watchdog)
        },
    )?;
    Ok(instructions.into_inner())
}

/// A kernel's fixed-function units: the texture unit, and the image
/// block with its block stores when threadgroup memory is one.
struct KernelIo<'a> {
    unit: TextureUnit<'a>,
    binding: &'a Binding,
    block: Option<&'a mut Imageblock>,
    /// The descriptor the worker's image writes last went through.
    image_writes: &'a mut ImageWriteTarget,
}

impl KernelIo<'_> {
    /// The image block and the pixel an access names: kernels have no
    /// pixel of their own, so the coordinates are explicit.
    fn block_pixel(
        &mut self,
        access: &TileAccess,
    ) -> Result<(&mut Imageblock, (u32, u32)), IoError> {
        let block = self
            .block
            .as_deref_mut()
            .ok_or(IoError::Unavailable("the tilebuffer"))?;
        let (x, y) = access.explicit.ok_or_else(|| {
            IoError::Invalid("a kernel's tilebuffer access without explicit coordinates".into())
        })?;
        Ok((block, (u32::from(x), u32::from(y))))
    }
}

impl ShaderIo for KernelIo<'_> {
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

    fn tile_load(&mut self, _lane: usize, access: &TileAccess) -> Result<[u32; 4], IoError> {
        let (block, pixel) = self.block_pixel(access)?;
        // A load reads one sample: the first of the mask.
        let sample = block.first_sample(access.sample_mask);
        block.load(pixel, sample, access)
    }

    fn tile_store(
        &mut self,
        _lane: usize,
        access: &TileAccess,
        values: [u32; 4],
    ) -> Result<(), IoError> {
        let (block, pixel) = self.block_pixel(access)?;
        block.store(pixel, access.sample_mask, access, values)
    }

    fn image_write(&mut self, _lane: usize, request: &ImageWrite) -> Result<(), IoError> {
        store_texel(&mut self.unit.vm, self.binding, request, self.image_writes)
    }

    fn block_store(&mut self, request: &BlockStore) -> Result<(), IoError> {
        let block = self
            .block
            .as_deref()
            .ok_or(IoError::Unavailable("block image stores"))?;
        if !request.explicit_coords {
            return Err(IoError::Invalid(
                "a kernel's block store without explicit coordinates".into(),
            ));
        }
        // Block stores are 2D: the array dimensions (plain and
        // multisampled) take the layer after x and y.
        let layer = match request.dim {
            2 | 4 => 0,
            3 | 8 => request.coords[2],
            dim => {
                return Err(IoError::Invalid(format!(
                    "a block store to dimension {dim} (block stores are 2D)"
                )))
            }
        };
        store_block(
            &mut self.unit.vm,
            self.binding,
            block,
            request,
            BlockPlacement {
                origin_px: (request.coords[0], request.coords[1]),
                layer,
                limit_px: (u32::MAX, u32::MAX),
            },
        )
    }
}

/// Makes `groups` the SIMD-groups of threadgroup `g`, with their special
/// registers, reusing the register files of the groups already there
/// (a worker runs threadgroup after threadgroup: a fresh 16 KiB register
/// file for each SIMD-group of each was most of a submission-heavy test's
/// page faults).
fn simd_groups(
    groups: &mut Vec<SimdGroup>,
    vm_slot: u32,
    launch: &Launch,
    binding: &Binding,
    g: [u32; 3],
    threads_per_group: u64,
) {
    let local = launch.local;
    let origin = [g[0] * local[0], g[1] * local[1], g[2] * local[2]];
    let count = threads_per_group.div_ceil(LANES as u64) as usize;
    let mut used = 0;
    for s in 0..count {
        let mut present = 0u32;
        let mut pos = [[0u32; LANES]; 3];
        let mut in_group = [[0u32; LANES]; 3];
        let mut index = [0u32; LANES];
        for lane in 0..LANES {
            let i = (s * LANES + lane) as u64;
            if i >= threads_per_group {
                continue;
            }
            let t = [
                (i % u64::from(local[0])) as u32,
                (i / u64::from(local[0]) % u64::from(local[1])) as u32,
                (i / (u64::from(local[0]) * u64::from(local[1]))) as u32,
            ];
            let p = [origin[0] + t[0], origin[1] + t[1], origin[2] + t[2]];
            if (0..3).any(|d| p[d] >= launch.grid[d]) {
                continue;
            }
            present |= 1 << lane;
            index[lane] = i as u32;
            for d in 0..3 {
                pos[d][lane] = p[d];
                in_group[d][lane] = t[d];
            }
        }
        if present == 0 {
            continue;
        }
        if used == groups.len() {
            groups.push(SimdGroup::new(binding.code, present));
        } else {
            groups[used].reset(binding.code, present);
        }
        let special = &mut groups[used].special;
        used += 1;
        for d in 0..3u32 {
            let du = d as usize;
            special.set_all(sr::THREADGROUP_POSITION_IN_GRID + d, g[du]);
            special.set_all(sr::THREADS_PER_THREADGROUP + d, local[du]);
            special.set_all(sr::DISPATCH_THREADS_PER_THREADGROUP + d, local[du]);
            special.set_lanes(sr::THREAD_POSITION_IN_THREADGROUP + d, in_group[du]);
            special.set_lanes(sr::THREAD_POSITION_IN_GRID + d, pos[du]);
        }
        special.set_lanes(sr::THREAD_INDEX_IN_THREADGROUP, index);
        special.set_lanes(
            sr::THREAD_INDEX_IN_SIMDGROUP,
            std::array::from_fn(|lane| lane as u32),
        );
        special.set_all(sr::SIMDGROUP_INDEX_IN_THREADGROUP, s as u32);
        // Core 0 for every group, so that a kernel's results never
        // depend on which host thread ran it (the helper program
        // reads the core it serves).
        special.set_all(sr::CORE_INDEX, 0);
        special.set_all(sr::VM_SLOT, vm_slot);
        special.set_all(sr::IS_ACTIVE_THREAD, 1);
    }
    groups.truncate(used);
}

/// Runs the SIMD-groups of one threadgroup until all have stopped: each
/// runs until it stops or reaches a barrier, and those at a barrier go on
/// once every group has had its turn.
fn run_threadgroup(
    watchdog: &Watchdog<'_>,
    io: &mut KernelIo<'_>,
    vm: &mut GpuVm<'_>,
    cache: &mut ProgramCache,
    groups: &mut [SimdGroup],
    (uniforms, threadgroup): (&mut [u32; UNIFORMS], &mut [u8]),
    launch_pc: u64,
) -> Result<(), EngineResult> {
    let mut env = Env {
        memory: vm,
        io,
        uniforms,
        threadgroup,
    };
    let mut stopped = vec![false; groups.len()];
    while stopped.iter().any(|s| !s) {
        for (group, stopped) in groups.iter_mut().zip(stopped.iter_mut()) {
            if *stopped {
                continue;
            }
            let exit = run_simd_group(
                group,
                cache,
                &mut env,
                watchdog,
                Barriers::Yield,
                exec_fault,
                Stage::Compute { launch: launch_pc },
            )?;
            *stopped = exit == Exit::Stopped;
        }
    }
    Ok(())
}
