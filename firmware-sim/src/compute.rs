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
//! Threadgroups run one after another on this thread, so results never
//! depend on scheduling. Every memory access goes through the GPU MMU; a
//! fault, an instruction the simulator does not model, or a kernel that
//! runs past the watchdog ends the command with the event the hardware
//! would raise.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use agx_fwif::messages::{FaultUnit, FAULT_UNSUPPORTED_WORK};
use agx_hw::formats::{
    CdmGlobalSize, CdmIndirect, CdmLaunchWord0, CdmLaunchWord1, CdmLocalSize, CdmMode,
    UatFaultReason, UscControl, UscFragmentProperties, UscRegisters, UscSampler, UscShader,
    UscShared, UscTexture, UscUniform, UscUniformHigh,
};
use agx_hw::isa::table::sr;
use agx_hw::uat::{self, Access, PAGE_BYTES};

use crate::engine::{EngineResult, GpuVm, RunContext};
use crate::texture::TextureUnit;
use crate::usc::io::{IoError, TextureRequest};
use crate::usc::ShaderIo;
use crate::usc::{
    AccessKind, Env, ExecError, Exit, FaultReason, GpuMemory, MemoryFault, ProgramCache, SimdGroup,
    LANES, UNIFORMS,
};

/// Bytes of a Launch block in Direct mode: two words, global and local
/// size.
const DIRECT_LAUNCH_BYTES: u64 = 8 + 12 + 12;
/// Bytes of a Launch block in an indirect mode: two words, the indirect
/// buffer address, local size.
const INDIRECT_LAUNCH_BYTES: u64 = 8 + 8 + 12;
/// The most control words a pipeline may have before its preshader word.
const MAX_CONTROL_WORDS: usize = 64;
/// Instructions a SIMD-group runs between watchdog checks.
const BUDGET_SLICE: u64 = 1 << 20;

/// A parsed Launch block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// Address of the pipeline's USC control words.
    pub pipeline: u64,
    /// Threads in the grid, per dimension.
    pub grid: [u32; 3],
    /// Threads per threadgroup, per dimension.
    pub local: [u32; 3],
    /// Bytes of the block (where the next one starts).
    pub length_bytes: u64,
}

/// Descriptors a Texture or Sampler word binds to state registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateBinding {
    /// The first state register.
    pub start: u32,
    /// How many.
    pub count: u32,
    /// GPU address of the descriptor array.
    pub buffer: u64,
    /// Where the control word is (for faults).
    pub word_address: u64,
}

/// What a pipeline's control words set up.
#[derive(Debug, Clone)]
pub struct Binding {
    /// Address of the program's first instruction.
    pub code: u64,
    /// Uniform registers.
    pub uniforms: Box<[u32; UNIFORMS]>,
    /// Threadgroup memory per threadgroup.
    pub shared_bytes: usize,
    /// Texture (or PBE) descriptors bound to texture state registers.
    pub textures: Vec<StateBinding>,
    /// Sampler descriptors bound to sampler state registers.
    pub samplers: Vec<StateBinding>,
}

impl Binding {
    /// The address of the descriptor bound to texture state register
    /// `index` (24 bytes each).
    pub fn texture_descriptor(&self, index: u32) -> Option<u64> {
        self.textures
            .iter()
            .rev()
            .find(|b| (b.start..b.start + b.count).contains(&index))
            .map(|b| b.buffer + 24 * u64::from(index - b.start))
    }
}

fn fault(address: u64, unit: FaultUnit, access: u32, reason: u32) -> EngineResult {
    EngineResult::Fault {
        address,
        unit: unit as u32,
        access,
        reason,
    }
}

pub(crate) fn unsupported(address: u64, unit: FaultUnit) -> EngineResult {
    fault(address, unit, 0, FAULT_UNSUPPORTED_WORK)
}

pub(crate) fn read_words<const N: usize>(
    vm: &GpuVm<'_>,
    address: u64,
) -> Result<[u8; N], EngineResult> {
    let mut bytes = [0u8; N];
    vm.read(address, &mut bytes)
        .map_err(|f| EngineResult::from_uat(&f, FaultUnit::Cdm))?;
    Ok(bytes)
}

/// Parses the Launch block at `pc` (its first word already read).
pub fn parse_launch(vm: &GpuVm<'_>, pc: u64, usc_exec_base: u64) -> Result<Launch, EngineResult> {
    let words: [u8; 8] = read_words(vm, pc)?;
    let word0 = CdmLaunchWord0::unpack(&[words[0], words[1], words[2], words[3]]).value;
    let word1 = CdmLaunchWord1::unpack(&[words[4], words[5], words[6], words[7]]).value;
    let pipeline = usc_exec_base.wrapping_add(word1.pipeline);
    let (grid, length_bytes) = match word0.mode {
        CdmMode::Direct => {
            let bytes: [u8; 12] = read_words(vm, pc + 8)?;
            let global = CdmGlobalSize::unpack(&bytes).value;
            ([global.x, global.y, global.z], DIRECT_LAUNCH_BYTES)
        }
        CdmMode::IndirectGlobal => {
            let bytes: [u8; 8] = read_words(vm, pc + 8)?;
            let indirect = CdmIndirect::unpack(&bytes).value;
            let sizes: [u8; 12] = read_words(vm, indirect.address)?;
            let global = CdmGlobalSize::unpack(&sizes).value;
            ([global.x, global.y, global.z], INDIRECT_LAUNCH_BYTES)
        }
        CdmMode::IndirectLocal | CdmMode::Unknown(_) => {
            return Err(unsupported(pc, FaultUnit::Cdm))
        }
    };
    let local_at = pc + length_bytes - 12;
    let bytes: [u8; 12] = read_words(vm, local_at)?;
    let local = CdmLocalSize::unpack(&bytes).value;
    Ok(Launch {
        pipeline,
        grid,
        local: [local.x, local.y, local.z],
        length_bytes,
    })
}

/// Reads a pipeline's control words and sets up what they describe.
pub fn bind(vm: &GpuVm<'_>, pipeline: u64, usc_exec_base: u64) -> Result<Binding, EngineResult> {
    let mut binding = Binding {
        code: 0,
        uniforms: Box::new([0; UNIFORMS]),
        shared_bytes: 0,
        textures: Vec::new(),
        samplers: Vec::new(),
    };
    let mut have_code = false;
    let mut at = pipeline;
    for _ in 0..MAX_CONTROL_WORDS {
        let tag: [u8; 1] = read_words(vm, at)?;
        match UscControl::from_raw(u32::from(tag[0])) {
            UscControl::Uniform | UscControl::UniformHigh => {
                let bytes: [u8; 8] = read_words(vm, at)?;
                let (start_halfs, size_halfs, buffer) =
                    if UscControl::from_raw(u32::from(tag[0])) == UscControl::Uniform {
                        let w = UscUniform::unpack(&bytes).value;
                        (u64::from(w.start_halfs), u64::from(w.size_halfs), w.buffer)
                    } else {
                        let w = UscUniformHigh::unpack(&bytes).value;
                        (
                            256 + u64::from(w.start_halfs),
                            u64::from(w.size_halfs),
                            w.buffer,
                        )
                    };
                let mut data = vec![0u8; 2 * size_halfs as usize];
                vm.read(buffer, &mut data)
                    .map_err(|f| EngineResult::from_uat(&f, FaultUnit::Usc))?;
                for (i, half) in data.chunks_exact(2).enumerate() {
                    let index = start_halfs as usize + i;
                    let Some(word) = binding.uniforms.get_mut(index / 2) else {
                        return Err(unsupported(at, FaultUnit::Usc));
                    };
                    let value = u32::from(u16::from_le_bytes([half[0], half[1]]));
                    let shift = 16 * (index % 2);
                    *word = (*word & !(0xFFFF << shift)) | (value << shift);
                }
                at += 8;
            }
            UscControl::Shared => {
                let bytes: [u8; 4] = read_words(vm, at)?;
                let w = UscShared::unpack(&bytes).value;
                if w.uses_shared_memory {
                    binding.shared_bytes = w.bytes_per_threadgroup as usize;
                }
                at += 4;
            }
            UscControl::Shader => {
                let bytes: [u8; 6] = read_words(vm, at)?;
                let w = UscShader::unpack(&bytes).value;
                binding.code = usc_exec_base.wrapping_add(w.code);
                have_code = true;
                at += 6;
            }
            UscControl::Registers => {
                let bytes: [u8; 4] = read_words(vm, at)?;
                let _ = UscRegisters::unpack(&bytes).value;
                at += 4;
            }
            UscControl::Texture | UscControl::Sampler => {
                let bytes: [u8; 8] = read_words(vm, at)?;
                let state = if UscControl::from_raw(u32::from(tag[0])) == UscControl::Texture {
                    let w = UscTexture::unpack(&bytes).value;
                    (w.start, w.count, w.buffer, &mut binding.textures)
                } else {
                    let w = UscSampler::unpack(&bytes).value;
                    (w.start, w.count, w.buffer, &mut binding.samplers)
                };
                state.3.push(StateBinding {
                    start: state.0,
                    count: state.1,
                    buffer: state.2,
                    word_address: at,
                });
                at += 8;
            }
            UscControl::FragmentProperties => {
                let bytes: [u8; 4] = read_words(vm, at)?;
                let _ = UscFragmentProperties::unpack(&bytes).value;
                at += 4;
            }
            UscControl::NoPreshader => {
                return if have_code {
                    Ok(binding)
                } else {
                    Err(unsupported(at, FaultUnit::Usc))
                };
            }
            // A preshader runs once per launch before the kernel: not yet.
            UscControl::Preshader | UscControl::Unknown(_) => {
                return Err(unsupported(at, FaultUnit::Usc))
            }
        }
    }
    Err(unsupported(at, FaultUnit::Usc))
}

/// What shaders and fixed-function units reach: the user half only. The
/// kernel half (ttb1) holds the firmware's rings and command structures; a
/// user context that names an address there gets a permission fault, as the
/// hardware's per-context TTB split gives.
fn refuse_kernel_half(address: u64, len: usize, access: AccessKind) -> Result<(), MemoryFault> {
    let end = address.checked_add(len as u64);
    let first_refused = if address >= uat::UPPER_HALF_START {
        address
    } else if end.is_none_or(|end| end > uat::UPPER_HALF_START) {
        uat::UPPER_HALF_START
    } else {
        return Ok(());
    };
    Err(MemoryFault {
        address: first_refused,
        access,
        reason: FaultReason::Permission,
    })
}

impl GpuMemory for GpuVm<'_> {
    fn read(&self, address: u64, buf: &mut [u8], access: AccessKind) -> Result<(), MemoryFault> {
        refuse_kernel_half(address, buf.len(), access)?;
        GpuVm::read(self, address, buf).map_err(|f| MemoryFault {
            address: f.va,
            access,
            reason: match f.reason {
                UatFaultReason::Unmapped => FaultReason::Unmapped,
                _ => FaultReason::Permission,
            },
        })
    }

    fn write(&mut self, address: u64, data: &[u8]) -> Result<(), MemoryFault> {
        refuse_kernel_half(address, data.len(), AccessKind::Write)?;
        let mut done = 0;
        while done < data.len() {
            let at = address.wrapping_add(done as u64);
            let fail = |reason| MemoryFault {
                address: at,
                access: AccessKind::Write,
                reason,
            };
            let pa = self.translate(at, Access::GpuWrite).map_err(|f| {
                fail(if f.reason == UatFaultReason::Unmapped {
                    FaultReason::Unmapped
                } else {
                    FaultReason::Permission
                })
            })?;
            let chunk = ((PAGE_BYTES - at % PAGE_BYTES) as usize).min(data.len() - done);
            self.memory()
                .write(pa, &data[done..done + chunk])
                .map_err(|_| fail(FaultReason::Unmapped))?;
            done += chunk;
        }
        Ok(())
    }
}

/// The fault event an execution error raises.
pub(crate) fn exec_fault(error: &ExecError) -> EngineResult {
    let memory_fault = match error {
        ExecError::Memory { fault, .. } => Some(*fault),
        ExecError::Fetch {
            source: crate::usc::FetchError::Memory(fault),
            ..
        } => Some(*fault),
        ExecError::Io {
            error: crate::usc::IoError::Memory(fault),
            ..
        } => Some(*fault),
        _ => None,
    };
    match memory_fault {
        Some(f) => {
            let access = match f.access {
                AccessKind::Read => 0,
                AccessKind::Write => 1,
                AccessKind::Fetch => 2,
            };
            let reason = match (f.reason, f.access) {
                (FaultReason::Unmapped, _) => UatFaultReason::Unmapped,
                (FaultReason::Permission, AccessKind::Write) => UatFaultReason::ReadOnly,
                (FaultReason::Permission, _) => UatFaultReason::NoAccess,
            };
            fault(f.address, FaultUnit::Usc, access, reason.to_raw())
        }
        None => {
            tracing::warn!(%error, "kernel stopped");
            unsupported(error.pc(), FaultUnit::Usc)
        }
    }
}

/// Runs a bound kernel over a launch's grid on `workers` host threads;
/// returns the SIMD-group instructions executed. Threadgroups are
/// independent, so which thread runs which does not change the results
/// of a race-free kernel; when several fault, the lowest-numbered
/// threadgroup's fault is reported, whatever the thread count.
pub fn run(
    ctx: &RunContext<'_>,
    vm: GpuVm<'_>,
    workers: usize,
    launch: &Launch,
    binding: &Binding,
    launch_pc: u64,
    sampler_heap: Option<(u64, u32)>,
) -> Result<u64, EngineResult> {
    let local = launch.local;
    let threads_per_group = local.iter().map(|&n| u64::from(n)).product::<u64>();
    if local.contains(&0) || threads_per_group > 1024 {
        return Err(unsupported(launch_pc, FaultUnit::Cdm));
    }
    if launch.grid.contains(&0) {
        return Ok(0);
    }
    let groups: [u32; 3] = std::array::from_fn(|d| launch.grid[d].div_ceil(local[d]));
    let total = groups.iter().map(|&n| u64::from(n)).product::<u64>();
    let next = AtomicU64::new(0);
    let first_failure = AtomicU64::new(u64::MAX);
    let failures = Mutex::new(Vec::<(u64, EngineResult)>::new());
    let instructions = AtomicU64::new(0);
    let watch = Watch {
        deadline: ctx.deadline,
        stop: ctx.stop,
        vm_slot: ctx.vm_slot,
    };
    let work = || {
        let mut vm = vm.clone();
        let mut cache = ProgramCache::new();
        let mut uniforms = binding.uniforms.clone();
        let mut threadgroup = vec![0u8; binding.shared_bytes];
        loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            if index >= total || index > first_failure.load(Ordering::Relaxed) {
                break;
            }
            // A grid of many short threadgroups meets the watchdog too.
            if index.is_multiple_of(64)
                && (Instant::now() >= watch.deadline || watch.stop.load(Ordering::Relaxed))
            {
                first_failure.fetch_min(index, Ordering::Relaxed);
                failures
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((index, EngineResult::Timeout));
                break;
            }
            let g = [
                (index % u64::from(groups[0])) as u32,
                (index / u64::from(groups[0]) % u64::from(groups[1])) as u32,
                (index / (u64::from(groups[0]) * u64::from(groups[1]))) as u32,
            ];
            threadgroup.fill(0);
            let mut simd = simd_groups(&watch, launch, binding, g, threads_per_group);
            let mut io = KernelIo {
                unit: TextureUnit {
                    vm: vm.clone(),
                    textures: &binding.textures,
                    samplers: &binding.samplers,
                    sampler_heap,
                },
            };
            let result = run_threadgroup(
                &watch,
                &mut io,
                &mut vm,
                &mut cache,
                &mut simd,
                &mut uniforms,
                &mut threadgroup,
            );
            let executed: u64 = simd.iter().map(|s| s.executed_instructions).sum();
            instructions.fetch_add(executed, Ordering::Relaxed);
            if let Err(failure) = result {
                first_failure.fetch_min(index, Ordering::Relaxed);
                failures
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((index, failure));
            }
        }
    };
    if workers <= 1 || total == 1 {
        work();
    } else {
        std::thread::scope(|scope| {
            for _ in 0..workers.min(total as usize) {
                scope.spawn(work);
            }
        });
    }
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    match failures.into_iter().min_by_key(|(index, _)| *index) {
        Some((_, failure)) => Err(failure),
        None => Ok(instructions.into_inner()),
    }
}

/// A kernel's fixed-function units: the texture unit.
struct KernelIo<'a> {
    unit: TextureUnit<'a>,
}

impl ShaderIo for KernelIo<'_> {
    fn texture(&mut self, _lane: usize, request: &TextureRequest) -> Result<[u32; 4], IoError> {
        self.unit.request(request)
    }
}

/// What a worker needs of the command: when to give up, and its VM slot.
struct Watch<'a> {
    deadline: Instant,
    stop: &'a std::sync::atomic::AtomicBool,
    vm_slot: u32,
}

/// The SIMD-groups of threadgroup `g`, with their special registers.
fn simd_groups(
    ctx: &Watch<'_>,
    launch: &Launch,
    binding: &Binding,
    g: [u32; 3],
    threads_per_group: u64,
) -> Vec<SimdGroup> {
    let local = launch.local;
    let origin = [g[0] * local[0], g[1] * local[1], g[2] * local[2]];
    let count = threads_per_group.div_ceil(LANES as u64) as usize;
    (0..count)
        .map(|s| {
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
            let mut group = SimdGroup::new(binding.code, present);
            let special = &mut group.special;
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
            special.set_all(sr::CORE_INDEX, 0);
            special.set_all(sr::VM_SLOT, ctx.vm_slot);
            special.set_all(sr::IS_ACTIVE_THREAD, 1);
            group
        })
        .filter(|g| g.present != 0)
        .collect()
}

/// Runs a threadgroup's SIMD-groups until all have stopped, releasing
/// them together at each threadgroup barrier.
fn run_threadgroup(
    ctx: &Watch<'_>,
    io: &mut KernelIo<'_>,
    vm: &mut GpuVm<'_>,
    cache: &mut ProgramCache,
    groups: &mut [SimdGroup],
    uniforms: &mut [u32; UNIFORMS],
    threadgroup: &mut [u8],
) -> Result<(), EngineResult> {
    let mut stopped = vec![false; groups.len()];
    while stopped.iter().any(|s| !s) {
        for (group, stopped) in groups.iter_mut().zip(stopped.iter_mut()) {
            if *stopped {
                continue;
            }
            loop {
                let mut budget = BUDGET_SLICE;
                let mut env = Env {
                    memory: vm,
                    io,
                    uniforms,
                    threadgroup,
                };
                match group.run(cache, &mut env, &mut budget) {
                    Ok(Exit::Stopped) => *stopped = true,
                    Ok(Exit::Barrier) => {}
                    Err(ExecError::Timeout { .. }) => {
                        if Instant::now() >= ctx.deadline || ctx.stop.load(Ordering::Relaxed) {
                            return Err(EngineResult::Timeout);
                        }
                        continue;
                    }
                    Err(error) => return Err(exec_fault(&error)),
                }
                break;
            }
        }
    }
    Ok(())
}
