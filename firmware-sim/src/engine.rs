//! The GPU's data masters: what runs a RunVertex, RunFragment or
//! RunCompute command once the firmware has dequeued it.
//!
//! On AGX the firmware does not execute work itself: it programs the
//! command's registers and kicks a *data master*, the front end that walks
//! a control stream in GPU memory. The compute data master (CDM) reads a
//! stream of blocks, each tagged in bits 29..31 of its first word: a
//! launch (a kernel dispatch), a barrier, a link to another stream
//! segment, or a terminate. Every read goes through the GPU MMU with the
//! command's VM context, so an unmapped stream faults at the exact address
//! the hardware would report.
//!
//! [`Gpu`] walks CDM streams: barriers and links are followed, a launch
//! binds its pipeline and runs the kernel over its grid on the shader
//! core ([`crate::compute`]), a terminate completes the command, and a
//! stream that never terminates (a link loop) runs into the firmware's
//! watchdog as it would on hardware. RunVertex and RunFragment go to the
//! render pipeline ([`crate::fragment`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use agx_fwif::messages::{CommandTag, FaultUnit, RunComputeBody};
use agx_hw::formats::CdmBlock;

use crate::command::{command_body, RunContext, WATCHDOG_STRIDE};
use crate::compute;
use crate::fault::{unsupported, EngineResult};
use crate::helper::{HelperProgram, StageHelper};
use crate::memory::read_item;
use crate::probe::ShaderProbe;
use crate::usc::ShaderEngine;

/// Runs RunVertex/RunFragment/RunCompute commands. The firmware may have
/// several commands in flight at once (one running, others suspended).
pub trait Engine: Send + Sync {
    /// Runs one command.
    fn run(&self, tag: CommandTag, ctx: &RunContext<'_>) -> EngineResult;

    /// Where the shader core's compiled blocks live (`None`: the
    /// programs are interpreted).
    fn shader_code(&self) -> Option<Arc<agx_jit::CodeCache>> {
        None
    }

    /// The debugger's probe (`None`: nothing is traced).
    fn probe(&self) -> Option<Arc<dyn ShaderProbe>> {
        None
    }
}

/// An engine that runs nothing: every command is unsupported work.
#[derive(Debug, Default)]
pub struct NoEngine;

impl Engine for NoEngine {
    fn run(&self, tag: CommandTag, ctx: &RunContext<'_>) -> EngineResult {
        unsupported(
            ctx.command,
            FaultUnit::Firmware,
            format_args!("a {tag:?} command, on firmware with no GPU to run it"),
        )
    }
}

/// The GPU's data masters.
#[derive(Debug)]
pub struct Gpu {
    /// Host threads that run threadgroups (at least 1).
    pub workers: usize,
    /// CDM blocks walked, over all commands.
    pub cdm_blocks: AtomicU64,
    /// Kernels launched.
    pub launches: AtomicU64,
    /// SIMD-group instructions executed by kernels.
    pub usc_instructions: AtomicU64,
    /// The compiled blocks of every command's programs, with the
    /// compiled engine (`None`: the interpreter runs them).
    pub shader_code: Option<Arc<agx_jit::CodeCache>>,
    /// The debugger's probe: SIMD-groups it picks a lane of run in the
    /// interpreter, traced.
    pub probe: Option<Arc<dyn ShaderProbe>>,
    /// Register files kept between kernel launches.
    spare_groups: compute::SpareGroups,
}

impl Gpu {
    /// A GPU running threadgroups on `workers` host threads, its programs
    /// interpreted.
    pub fn new(workers: usize) -> Gpu {
        Gpu {
            workers: workers.max(1),
            cdm_blocks: AtomicU64::new(0),
            launches: AtomicU64::new(0),
            usc_instructions: AtomicU64::new(0),
            shader_code: None,
            probe: None,
            spare_groups: compute::SpareGroups::default(),
        }
    }

    /// The same GPU with its programs run by `engine` (the compiled
    /// engine with one code cache for all its commands).
    pub fn with_shader_engine(self, engine: ShaderEngine) -> Gpu {
        Gpu {
            shader_code: match engine {
                ShaderEngine::Interpreter => None,
                ShaderEngine::Compiled => crate::usc::new_code_cache(),
            },
            ..self
        }
    }
}

impl Gpu {
    /// The same GPU with `probe` choosing lanes to trace.
    pub fn with_probe(self, probe: Option<Arc<dyn ShaderProbe>>) -> Gpu {
        Gpu { probe, ..self }
    }
}

impl Default for Gpu {
    fn default() -> Gpu {
        Gpu::new(1)
    }
}

impl Gpu {
    fn run_compute(&self, ctx: &RunContext<'_>) -> EngineResult {
        let body: RunComputeBody = match command_body(ctx) {
            Ok(body) => body,
            Err(fault) => return fault,
        };
        let vm = match ctx.user_vm("compute", FaultUnit::Cdm, body.cdm_ctrl_stream_base.get()) {
            Ok(vm) => vm,
            Err(fault) => return fault,
        };
        let mut item = Vec::new();
        let mut pc = body.cdm_ctrl_stream_base.get();
        let mut walked = 0u64;
        loop {
            walked += 1;
            if walked.is_multiple_of(WATCHDOG_STRIDE) {
                // One work unit per control-stream block.
                let watchdog = ctx.watchdog();
                watchdog.charge(WATCHDOG_STRIDE);
                if watchdog.expired() {
                    return EngineResult::Timeout;
                }
            }
            let block: CdmBlock = match read_item(&vm, pc, FaultUnit::Cdm, &mut item) {
                Ok(block) => block,
                Err(result) => return result,
            };
            self.cdm_blocks.fetch_add(1, Ordering::Relaxed);
            let next = pc.wrapping_add(item.len() as u64);
            match block {
                CdmBlock::StreamTerminate(_) => return EngineResult::Done,
                CdmBlock::Barrier(_) => pc = next,
                CdmBlock::StreamLink(link) => pc = link.target,
                CdmBlock::Launch(words) => {
                    let launch =
                        match compute::Launch::of(&vm, &words, pc, body.usc_exec_base.get()) {
                            Ok(launch) => launch,
                            Err(result) => return result,
                        };
                    // A preshader's stack comes from core 0's helper, which
                    // ends before the dispatch's cores start theirs.
                    let helper = HelperProgram::of(&body.helper, body.usc_exec_base.get());
                    let mut preshader_helper = StageHelper::new(helper, 0, ctx.vm_slot);
                    let bound = crate::bind::bind(
                        &vm,
                        launch.pipeline,
                        body.usc_exec_base.get(),
                        &ctx.watchdog(),
                        crate::bind::StageSamplers {
                            heap: (!body.sampler_heap.is_null())
                                .then_some((body.sampler_heap.get(), body.sampler_count)),
                            states: words.header.sampler_state_register_count,
                        },
                        Some(&mut preshader_helper),
                    );
                    let ended = preshader_helper.end(&mut vm.clone(), &ctx.watchdog());
                    let binding = match bound.and_then(|binding| ended.map(|()| binding)) {
                        Ok(binding) => binding,
                        Err(result) => return result,
                    };
                    let command = compute::ComputeCommand {
                        sampler_heap: (!body.sampler_heap.is_null())
                            .then_some((body.sampler_heap.get(), body.sampler_count)),
                        helper: HelperProgram::of(&body.helper, body.usc_exec_base.get()),
                    };
                    match compute::run(
                        ctx,
                        vm.clone(),
                        self.workers,
                        &launch,
                        &binding,
                        pc,
                        &command,
                        &self.spare_groups,
                    ) {
                        Ok(instructions) => {
                            self.usc_instructions
                                .fetch_add(instructions, Ordering::Relaxed);
                        }
                        Err(result) => return result,
                    }
                    self.launches.fetch_add(1, Ordering::Relaxed);
                    pc = next;
                }
            }
        }
    }
}

impl Engine for Gpu {
    fn run(&self, tag: CommandTag, ctx: &RunContext<'_>) -> EngineResult {
        match tag {
            CommandTag::RunCompute => self.run_compute(ctx),
            CommandTag::RunVertex => crate::vertex::run_vertex(ctx, self.workers),
            CommandTag::RunFragment => crate::fragment::run_fragment(ctx, self.workers),
            _ => unsupported(
                ctx.command,
                FaultUnit::Firmware,
                format_args!("a {tag:?} command given to the data masters"),
            ),
        }
    }

    fn shader_code(&self) -> Option<Arc<agx_jit::CodeCache>> {
        self.shader_code.clone()
    }

    fn probe(&self) -> Option<Arc<dyn ShaderProbe>> {
        self.probe.clone()
    }
}
