//! Helper programs: the per-core program the firmware runs beside a
//! stage to hand out stack memory.
//!
//! A command may name a helper program (`drm_asahi_helper_program`): USC
//! code and a 64-bit argument (Mesa: the address of its scratch
//! description). On each core that runs the stage, the firmware starts the
//! helper on one lane and talks to it through a doorbell: the helper rings
//! `DOORBELL_NEXT` to wait for an operation, reads it from special
//! registers (`sr144` the operation, `sr146`/`sr147` its argument, which
//! hold the command's argument when the helper starts), does it, and
//! rings `DOORBELL_ACK` or `DOORBELL_NACK`. The operations and doorbell
//! values are those of Mesa's helper (`libagx/helper.cl`): before a
//! SIMD-group whose pipeline has a spill size starts, the core asks for a
//! stack (`OP_STACK_ALLOC`, the spill-size bucket as argument) and the
//! helper fills the stack block registers with `stack_map`; they become
//! the group's stack. When the group ends, the core puts the group's block
//! registers back and asks the helper to take them (`OP_STACK_FREE`; the
//! helper reads them with `stack_unmap`). When the core has no more work,
//! it sends `OP_END` and the helper stops.
//!
//! The helper is an ordinary program to the interpreter: its loads and
//! stores go through the command's MMU and its instructions count against
//! the watchdog. A helper that rings an unexpected value, refuses a stack
//! or stops early ends the command with a fault at its code.

use agx_fwif::messages::{FaultUnit, Helper};
use agx_hw::isa::table::sr;

use crate::command::Watchdog;
use crate::fault::{exec_fault, unlogged, unsupported, EngineResult};
use crate::memory::GpuVm;
use crate::probe::Stage;
use crate::shader::{run_stage_group, BUDGET_SLICE};
use crate::usc::{Env, ExecError, Exit, NoIo, ProgramCache, ShaderIo, SimdGroup, Stack, UNIFORMS};

/// Cores the GPU has (G13G: 8, as the kmd reports): each host thread
/// running a stage is one, with its own helper program, so a stage with
/// a helper runs on at most this many threads.
pub const CORES: usize = 8;

/// Allocate a stack for the SIMD-group about to start.
const OP_STACK_ALLOC: u32 = 0;
/// Take back the stack of a SIMD-group that ended.
const OP_STACK_FREE: u32 = 1;
/// No more work on this core: exit.
const OP_END: u32 = 15;
/// The helper waits for the next operation.
const DOORBELL_NEXT: u8 = 32;
/// The operation succeeded.
const DOORBELL_ACK: u8 = 48;
/// The operation was refused.
const DOORBELL_NACK: u8 = 49;

/// Where a command's helper program is and what it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelperProgram {
    /// The code's address.
    pub code: u64,
    /// The argument (`sr146`/`sr147` when it starts).
    pub arg: u64,
    /// The stage's preshaders run on a stack too (bit 16 of the
    /// configuration word, which Mesa sets when a preshader needs
    /// scratch: `vs_preamble_scratch` and its kin).
    pub preshader_stack: bool,
}

impl HelperProgram {
    /// The helper a command names, if any (its code is an offset from
    /// `usc_exec_base`, the low two bits a tag).
    pub fn of(helper: &Helper, usc_exec_base: u64) -> Option<HelperProgram> {
        (helper.program != 0).then(|| HelperProgram {
            code: usc_exec_base.wrapping_add(u64::from(helper.program & !3)),
            arg: helper.arg,
            preshader_stack: (helper.cfg >> 16) & 1 != 0,
        })
    }
}

/// A helper program running on one core.
pub struct HelperCore {
    program: HelperProgram,
    core: u32,
    group: SimdGroup,
    cache: ProgramCache,
    uniforms: Box<[u32; UNIFORMS]>,
    /// Set once the helper has stopped.
    ended: bool,
    /// Set when the helper failed a request: the command has failed, and
    /// the helper is no longer asked for anything.
    broken: bool,
    /// The helper waits for an operation (its last doorbell was 32).
    waiting: bool,
}

impl HelperCore {
    /// Starts `program` on core `core` and runs it to its first doorbell,
    /// which must ask for an operation.
    pub fn start(
        program: HelperProgram,
        core: u32,
        vm_slot: u32,
        vm: &mut GpuVm<'_>,
        watchdog: &Watchdog<'_>,
    ) -> Result<HelperCore, EngineResult> {
        let mut group = SimdGroup::new(program.code, 1);
        group.special.set_all(sr::CORE_INDEX, core);
        group.special.set_all(sr::VM_SLOT, vm_slot);
        group.special.set_all(sr::HELPER_ARG_LO, program.arg as u32);
        group
            .special
            .set_all(sr::HELPER_ARG_HI, (program.arg >> 32) as u32);
        group.special.set_all(sr::IS_ACTIVE_THREAD, 1);
        let mut core = HelperCore {
            program,
            core,
            group,
            cache: ProgramCache::new(),
            uniforms: Box::new([0; UNIFORMS]),
            ended: false,
            broken: false,
            waiting: false,
        };
        core.expect(vm, watchdog, DOORBELL_NEXT, "start")?;
        Ok(core)
    }

    /// Asks the helper for a stack for a group of the spill-size bucket
    /// `bucket`; returns it with the pointer at its top.
    pub fn alloc_stack(
        &mut self,
        bucket: u32,
        vm: &mut GpuVm<'_>,
        watchdog: &Watchdog<'_>,
    ) -> Result<Stack, EngineResult> {
        self.group.stack = Stack::default();
        self.request(OP_STACK_ALLOC, bucket, vm, watchdog)?;
        Ok(Stack::mapped(self.group.stack.blocks))
    }

    /// Gives the helper back the stack of a group that ended.
    pub fn free_stack(
        &mut self,
        stack: &Stack,
        vm: &mut GpuVm<'_>,
        watchdog: &Watchdog<'_>,
    ) -> Result<(), EngineResult> {
        self.group.stack = *stack;
        self.request(OP_STACK_FREE, 0, vm, watchdog)
    }

    /// Tells the helper there is no more work and runs it until it stops.
    pub fn end(&mut self, vm: &mut GpuVm<'_>, watchdog: &Watchdog<'_>) -> Result<(), EngineResult> {
        if self.ended || self.broken {
            return Ok(());
        }
        self.set_operation(OP_END, 0);
        match self.run(vm, watchdog)? {
            None => Ok(()),
            Some(value) => Err(self.protocol_error("end", value)),
        }
    }

    /// Sends an operation and expects it acknowledged, then the next
    /// wait. A refusal leaves the helper waiting again (it can still be
    /// asked to take stacks back); any other failure marks it broken.
    fn request(
        &mut self,
        op: u32,
        arg: u32,
        vm: &mut GpuVm<'_>,
        watchdog: &Watchdog<'_>,
    ) -> Result<(), EngineResult> {
        if self.broken {
            // The failure that broke it was the command's, and was
            // reported (and a refusal logged) then.
            return Err(unlogged(|| {
                unsupported(
                    self.program.code,
                    FaultUnit::Usc,
                    "a request to a helper program that has failed",
                )
            }));
        }
        let result = self.exchange(op, arg, vm, watchdog);
        if result.is_err() && !self.waiting {
            self.broken = true;
        }
        result
    }

    fn exchange(
        &mut self,
        op: u32,
        arg: u32,
        vm: &mut GpuVm<'_>,
        watchdog: &Watchdog<'_>,
    ) -> Result<(), EngineResult> {
        self.waiting = false;
        self.set_operation(op, arg);
        let what = if op == OP_STACK_ALLOC {
            "stack allocation"
        } else {
            "stack release"
        };
        match self.run(vm, watchdog)? {
            Some(DOORBELL_ACK) => {}
            Some(DOORBELL_NACK) => {
                let pc = self.group.pc;
                // Refused only once it waits again: otherwise the
                // protocol error is the fault, and the one logged.
                self.expect(vm, watchdog, DOORBELL_NEXT, what)?;
                return Err(unsupported(
                    self.program.code,
                    FaultUnit::Usc,
                    format_args!(
                        "a {what} the helper program on core {} refused (doorbell {DOORBELL_NACK} at pc {pc:#x})",
                        self.core
                    ),
                ));
            }
            Some(value) => return Err(self.protocol_error(what, value)),
            None => return Err(self.protocol_error(what, 0)),
        }
        self.expect(vm, watchdog, DOORBELL_NEXT, what)
    }

    fn set_operation(&mut self, op: u32, arg: u32) {
        self.group.special.set_all(sr::HELPER_OP, op);
        self.group.special.set_all(sr::HELPER_ARG_LO, arg);
        self.group.special.set_all(sr::HELPER_ARG_HI, 0);
    }

    /// Runs the helper to a doorbell that must be `value`.
    fn expect(
        &mut self,
        vm: &mut GpuVm<'_>,
        watchdog: &Watchdog<'_>,
        value: u8,
        what: &str,
    ) -> Result<(), EngineResult> {
        match self.run(vm, watchdog)? {
            Some(rung) if rung == value => {
                self.waiting = value == DOORBELL_NEXT;
                Ok(())
            }
            rung => Err(self.protocol_error(what, rung.unwrap_or(0))),
        }
    }

    /// Runs the helper until it rings the doorbell (`Some(value)`) or
    /// stops (`None`), in watchdog slices.
    fn run(
        &mut self,
        vm: &mut GpuVm<'_>,
        watchdog: &Watchdog<'_>,
    ) -> Result<Option<u8>, EngineResult> {
        if self.ended {
            return Err(self.protocol_error("a request after it ended", 0));
        }
        let mut env = Env {
            memory: vm,
            io: &mut NoIo,
            uniforms: &mut self.uniforms,
            threadgroup: &mut [],
        };
        loop {
            let mut budget = BUDGET_SLICE;
            let ran = self.group.run(&mut self.cache, &mut env, &mut budget);
            watchdog.charge(BUDGET_SLICE - budget);
            match ran {
                Ok(Exit::Doorbell(value)) => {
                    tracing::debug!(
                        core = self.core,
                        pc = format_args!("{:#x}", self.group.pc),
                        value,
                        "helper doorbell"
                    );
                    return Ok(Some(value));
                }
                Ok(Exit::Stopped) => {
                    self.ended = true;
                    return Ok(None);
                }
                Ok(Exit::Barrier) => {
                    return Err(unsupported(
                        self.group.pc,
                        FaultUnit::Usc,
                        "a threadgroup barrier in a helper program",
                    ));
                }
                Err(ExecError::Timeout { .. }) if watchdog.expired() => {
                    return Err(EngineResult::Timeout)
                }
                Err(ExecError::Timeout { .. }) => {}
                Err(error) => return Err(exec_fault(&error)),
            }
        }
    }

    /// A helper that did not answer as the protocol says.
    fn protocol_error(&self, what: &str, rung: u8) -> EngineResult {
        let answer = if self.ended {
            "stopped".to_string()
        } else {
            format!("rang doorbell {rung}")
        };
        unsupported(
            self.program.code,
            FaultUnit::Usc,
            format_args!(
                "a helper program on core {} that {answer} at pc {:#x} in {what}, against the doorbell protocol",
                self.core, self.group.pc
            ),
        )
    }
}

/// A stage's helper on one core: started when the first SIMD-group that
/// needs a stack comes, told to end when the core has no more work.
pub struct StageHelper {
    program: Option<HelperProgram>,
    core: u32,
    vm_slot: u32,
    running: Option<HelperCore>,
}

impl StageHelper {
    /// The helper `program` (if the command names one) for core `core`.
    pub fn new(program: Option<HelperProgram>, core: u32, vm_slot: u32) -> StageHelper {
        StageHelper {
            program,
            core,
            vm_slot,
            running: None,
        }
    }

    /// Whether the stage's preshaders run on a stack from the helper.
    pub fn preshader_stack(&self) -> bool {
        self.program.is_some_and(|p| p.preshader_stack)
    }

    /// Runs `groups` (with `run`) on stacks: each gets one before, when
    /// their pipeline has a spill size (`spill_bucket` not 0) and the
    /// stage a helper, and gives it back after, whether or not `run`
    /// failed. Without a helper they run without a stack (their stack
    /// accesses fault).
    pub fn run_with_stacks<'v>(
        &mut self,
        groups: &mut [SimdGroup],
        spill_bucket: u32,
        vm: &mut GpuVm<'v>,
        watchdog: &Watchdog<'_>,
        run: impl FnOnce(&mut [SimdGroup], &mut GpuVm<'v>) -> Result<(), EngineResult>,
    ) -> Result<(), EngineResult> {
        self.alloc(groups, spill_bucket, vm, watchdog)?;
        let ran = run(groups, vm);
        // After a failed run, what the frees say is not reported.
        let freed = if ran.is_err() {
            unlogged(|| self.free(groups, spill_bucket, vm, watchdog))
        } else {
            self.free(groups, spill_bucket, vm, watchdog)
        };
        ran.and(freed)
    }

    /// A SIMD-group of a stage without threadgroups (vertex shading, tile
    /// programs), run to completion as [`crate::shader::run_stage_group`]
    /// runs it, on a stack as [`StageHelper::run_with_stacks`] gives it.
    #[allow(clippy::too_many_arguments)]
    pub fn run_stage_group(
        &mut self,
        group: &mut SimdGroup,
        spill_bucket: u32,
        cache: &mut ProgramCache,
        vm: &mut GpuVm<'_>,
        io: &mut dyn ShaderIo,
        uniforms: &mut [u32; UNIFORMS],
        watchdog: &Watchdog<'_>,
        fault: fn(&ExecError) -> EngineResult,
        stage: Stage,
    ) -> Result<(), EngineResult> {
        self.run_with_stacks(
            std::slice::from_mut(group),
            spill_bucket,
            vm,
            watchdog,
            |groups, vm| {
                groups.iter_mut().try_for_each(|group| {
                    run_stage_group(group, cache, vm, io, uniforms, watchdog, fault, stage)
                })
            },
        )
    }

    /// Gives each of `groups` a stack, as [`StageHelper::run_with_stacks`]
    /// says.
    fn alloc(
        &mut self,
        groups: &mut [SimdGroup],
        spill_bucket: u32,
        vm: &mut GpuVm<'_>,
        watchdog: &Watchdog<'_>,
    ) -> Result<(), EngineResult> {
        let Some(program) = self.program.filter(|_| spill_bucket != 0) else {
            return Ok(());
        };
        let core = match &mut self.running {
            Some(core) => core,
            running => running.insert(HelperCore::start(
                program,
                self.core,
                self.vm_slot,
                vm,
                watchdog,
            )?),
        };
        for at in 0..groups.len() {
            match core.alloc_stack(spill_bucket, vm, watchdog) {
                Ok(stack) => groups[at].stack = stack,
                Err(error) => {
                    // The groups given a stack never run: their stacks go
                    // back (best effort: the command has failed anyway).
                    unlogged(|| {
                        for group in &groups[..at] {
                            let _ = core.free_stack(&group.stack, vm, watchdog);
                        }
                    });
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    /// Gives back the stacks of `groups` (which [`StageHelper::alloc`]
    /// gave stacks for `spill_bucket`), which have ended, failed or not.
    fn free(
        &mut self,
        groups: &[SimdGroup],
        spill_bucket: u32,
        vm: &mut GpuVm<'_>,
        watchdog: &Watchdog<'_>,
    ) -> Result<(), EngineResult> {
        let Some(core) = self.running.as_mut().filter(|_| spill_bucket != 0) else {
            return Ok(());
        };
        let mut result = Ok(());
        for group in groups {
            // Only the first failure is reported.
            let freed = if result.is_err() {
                unlogged(|| core.free_stack(&group.stack, vm, watchdog))
            } else {
                core.free_stack(&group.stack, vm, watchdog)
            };
            if let Err(error) = freed {
                result = result.and(Err(error));
            }
        }
        result
    }

    /// The core has no more work: the helper, if it started, ends.
    pub fn end(&mut self, vm: &mut GpuVm<'_>, watchdog: &Watchdog<'_>) -> Result<(), EngineResult> {
        match self.running.as_mut() {
            Some(core) => core.end(vm, watchdog),
            None => Ok(()),
        }
    }
}
