//! Running a SIMD-group on the shader core for a stage, under the
//! command's watchdog.
//!
//! Every stage (compute threadgroups, vertex shading, the per-tile
//! programs) hands its SIMD-groups to the USC the same way: the group runs
//! a slice of instructions at a time, and between slices the firmware's
//! watchdog may stop the command. What differs is what a
//! `threadgroup_barrier` means (only compute has threadgroups) and which
//! unit a fault is reported for; both are arguments.

use agx_fwif::messages::FaultUnit;

use crate::command::Watchdog;
use crate::fault::{unsupported, EngineResult};
use crate::memory::GpuVm;
use crate::probe::{GroupStart, Stage, TracedLane};
use crate::usc::trace::LaneTrace;
use crate::usc::{
    Env, ExecError, Exit, GpuMemory, ProgramCache, ShaderIo, SimdGroup, LANES, UNIFORMS,
};

/// Instructions a SIMD-group runs between watchdog checks. The checks are
/// also where the firmware suspends a command ([`crate::preempt`]): 4096
/// instructions of 32 lanes take well under a millisecond of host time.
pub const BUDGET_SLICE: u64 = 1 << 12;

/// What a `threadgroup_barrier` means to the stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Barriers {
    /// Compute: the group waits for its threadgroup ([`Exit::Barrier`]
    /// goes back to the caller, which runs the other groups).
    Yield,
    /// Vertex and per-tile programs have no threadgroup: a barrier is
    /// work the model does not do, refused at the group's pc.
    Refuse,
}

/// Runs `group` until it stops (or, with [`Barriers::Yield`], reaches a
/// barrier), [`BUDGET_SLICE`] instructions at a time, charging each
/// instruction to the watchdog's account and giving up with
/// [`EngineResult::Timeout`] once `watchdog` expires. Any other execution
/// error becomes the fault `fault` makes of it.
pub fn run_simd_group(
    group: &mut SimdGroup,
    cache: &mut ProgramCache,
    env: &mut Env<'_>,
    watchdog: &Watchdog<'_>,
    barriers: Barriers,
    fault: fn(&ExecError) -> EngineResult,
    stage: Stage,
) -> Result<Exit, EngineResult> {
    // The debugger's probe, if the machine has one, chooses a lane of a
    // group that has not run yet (a compute group resumed after a
    // barrier keeps the trace it started with).
    if let Some(probe) = watchdog.probe {
        if group.executed_instructions == 0 && group.trace.is_none() {
            let start = GroupStart {
                command: watchdog.command,
                stage,
                group,
            };
            let lane = probe.lane_to_trace(&start).filter(|&lane| lane < LANES);
            let count = probe.count_lanes(&start);
            if let Some(lane) = lane {
                group.trace = Some(Box::new(LaneTrace::new(lane)));
            }
            if count {
                group.counts = Some(Box::default());
            }
        }
    }
    let ran = run_slices(group, cache, env, watchdog, barriers, fault);
    if !matches!(ran, Ok(Exit::Barrier)) {
        if let (Some(probe), Some(trace)) = (watchdog.probe, group.trace.take()) {
            probe.traced(TracedLane {
                command: watchdog.command,
                stage,
                program: trace.steps.first().map_or(group.pc, |step| step.pc),
                present: group.present,
                coverage: group
                    .special
                    .lane(agx_hw::isa::table::sr::COVERAGE_MASK, trace.lane),
                trace: *trace,
            });
        }
        if let (Some(probe), Some(counts)) = (watchdog.probe, group.counts.take()) {
            probe.counted(watchdog.command, stage, group, &counts);
        }
    }
    ran
}

/// [`run_simd_group`]'s loop of slices.
fn run_slices(
    group: &mut SimdGroup,
    cache: &mut ProgramCache,
    env: &mut Env<'_>,
    watchdog: &Watchdog<'_>,
    barriers: Barriers,
    fault: fn(&ExecError) -> EngineResult,
) -> Result<Exit, EngineResult> {
    loop {
        let mut budget = BUDGET_SLICE;
        let ran = group.run(cache, env, &mut budget);
        // One work unit per SIMD-group instruction.
        watchdog.charge(BUDGET_SLICE - budget);
        match ran {
            Ok(Exit::Barrier) if barriers == Barriers::Refuse => {
                return Err(unsupported(
                    group.pc,
                    FaultUnit::Usc,
                    "a threadgroup barrier in a stage without threadgroups",
                ));
            }
            // Only a helper program talks to the firmware, and the
            // firmware's helper runner runs those itself.
            Ok(Exit::Doorbell(value)) => {
                return Err(unsupported(
                    group.pc,
                    FaultUnit::Usc,
                    format_args!("a doorbell (value {value}) rung outside a helper program"),
                ));
            }
            Ok(exit) => return Ok(exit),
            Err(ExecError::Timeout { .. }) if watchdog.expired() => {
                return Err(EngineResult::Timeout);
            }
            Err(ExecError::Timeout { .. }) => {}
            Err(error) => return Err(fault(&error)),
        }
    }
}

/// Runs a SIMD-group of a stage without threadgroups (vertex shading,
/// per-tile programs) to completion: [`run_simd_group`] with no
/// threadgroup memory and barriers refused.
#[allow(clippy::too_many_arguments)]
pub fn run_stage_group(
    group: &mut SimdGroup,
    cache: &mut ProgramCache,
    memory: &mut dyn GpuMemory,
    io: &mut dyn ShaderIo,
    uniforms: &mut [u32; UNIFORMS],
    watchdog: &Watchdog<'_>,
    fault: fn(&ExecError) -> EngineResult,
    stage: Stage,
) -> Result<(), EngineResult> {
    let mut env = Env {
        memory,
        io,
        uniforms,
        threadgroup: &mut [],
    };
    run_simd_group(
        group,
        cache,
        &mut env,
        watchdog,
        Barriers::Refuse,
        fault,
        stage,
    )
    .map(|_| ())
}

/// The present-lanes mask of a group of `lanes` threads (at most
/// [`LANES`]).
pub fn present_lanes(lanes: usize) -> u32 {
    if lanes >= LANES {
        u32::MAX
    } else {
        (1u32 << lanes) - 1
    }
}

/// Visits the instructions of the program at `code` in address order
/// (each with its address) until `visit` gives an answer; `None` when an
/// instruction cannot be read or decoded, or after 4,096 of them.
pub(crate) fn walk<T>(
    vm: &GpuVm<'_>,
    code: u64,
    mut visit: impl FnMut(u64, &agx_hw::isa::Instr) -> Option<T>,
) -> Option<T> {
    let mut pc = code;
    for _ in 0..4096 {
        let mut bytes = [0u8; 16];
        vm.read(pc, &mut bytes).ok()?;
        let decoded = agx_hw::isa::decode(&bytes).ok()?;
        if let Some(answer) = visit(pc, &decoded.instr) {
            return Some(answer);
        }
        pc += decoded.length_bytes as u64;
    }
    None
}

/// Whether the fragment program at `code` may run with other primitives'
/// quads in its SIMD-group: nothing it does can tell them from its own
/// primitive's, so a SIMD-group of several primitives' quads gives each
/// lane what a SIMD-group of its primitive's quads alone gives it. It may
/// not write memory (device stores, atomics, image writes: their order
/// between primitives would change), read its lane's place in the
/// SIMD-group or the group's other quads (SIMD-wide reductions, prefixes,
/// shuffles and ballots, and the lane and active-thread indices; quad
/// operations stay within the quad, which is the primitive's), access the
/// tilebuffer at explicit coordinates (another primitive's pixel), call,
/// or stop inside a branch (a `stop` ends the whole SIMD-group). The scan
/// follows the code to its first `stop` outside every `if` and needs every
/// jump to land before it; anything it cannot read or does not know keeps
/// the program to a SIMD-group per primitive. The same property lets the
/// vertex stage run a draw's SIMD-groups on several threads at once
/// (`tiler`): nothing one group does reaches another or memory.
pub(crate) fn packs_primitives(vm: &GpuVm<'_>, code: u64) -> bool {
    use agx_hw::isa::table::sr;
    use agx_hw::isa::Op;
    walk_to_stop(vm, code, |ins| match ins.op {
        Op::LdTile | Op::StTile => ins.int(7) == Some(0),
        Op::GetSr => {
            let register = ins.int(1).unwrap_or(-1);
            let lane_place = [
                sr::THREAD_POSITION_IN_THREADGROUP,
                sr::THREAD_POSITION_IN_THREADGROUP + 1,
                sr::THREAD_POSITION_IN_THREADGROUP + 2,
                sr::THREAD_INDEX_IN_THREADGROUP,
                sr::THREAD_INDEX_IN_SIMDGROUP,
                sr::SIMDGROUP_INDEX_IN_THREADGROUP,
                58,
                59,
            ];
            !lane_place.iter().any(|&r| i64::from(r) == register)
        }
        Op::Call
        | Op::CallReg
        | Op::Ret
        | Op::DeviceStore
        | Op::DeviceStoreTodo
        | Op::AsyncStore
        | Op::UniformStore
        | Op::Atomic
        | Op::ThreadgroupStore
        | Op::ThreadgroupAtomic
        | Op::TexStateStore
        | Op::SamplerStateStore
        | Op::ImageWrite
        | Op::ImageWriteBlock
        | Op::SimdReduce
        | Op::SimdPrefix
        | Op::SimdOp
        | Op::SimdShufOp
        | Op::SimdShuffle
        | Op::SimdShuffleXor
        | Op::SimdShuffleUp
        | Op::SimdShuffleDown
        | Op::SimdShuffleRotateUp
        | Op::SimdMatrixFmadd16
        | Op::SimdMatrixFmadd32
        | Op::IcmpBallot
        | Op::FcmpBallot
        | Op::UnkSr
        | Op::StackMap
        | Op::StackUnmap
        | Op::StackMapOp
        | Op::Doorbell => false,
        _ => true,
    })
}

/// Follows the program at `code` to its first `stop` outside every `if`
/// (`if` nesting counted statically: `pop_exec n` closes n) and tells
/// whether it got there with every jump landing between `code` and that
/// `stop` and `visit`, given every instruction but the `if`s, `pop_exec`s,
/// jumps and `stop`s, accepting each (true). False for an instruction it
/// cannot read, a `stop` inside a branch, a jump backwards or past that
/// `stop`, one `visit` refuses, or a program longer than [`walk`] goes.
fn walk_to_stop(
    vm: &GpuVm<'_>,
    code: u64,
    mut visit: impl FnMut(&agx_hw::isa::Instr) -> bool,
) -> bool {
    use agx_hw::isa::Op;
    let mut depth: i64 = 0;
    let mut furthest_jump = code;
    walk(vm, code, |pc, ins| {
        match ins.op {
            Op::Stop if depth <= 0 => return Some(furthest_jump <= pc),
            Op::Stop => return Some(false),
            Op::IfIcmp | Op::IfFcmp => depth += 1,
            Op::PopExec => {
                let Some(levels) = ins.int(1) else {
                    return Some(false);
                };
                depth -= levels;
            }
            Op::JmpExecAny | Op::JmpExecNone | Op::JmpIfSkippingDoorbell => {
                let Some(offset) = ins.int(0) else {
                    return Some(false);
                };
                let target = pc.wrapping_add(offset as u64);
                if target < code {
                    return Some(false);
                }
                furthest_jump = furthest_jump.max(target);
            }
            _ if !visit(ins) => return Some(false),
            _ => {}
        }
        None
    })
    .unwrap_or(false)
}

/// Whether every lane of a SIMD-group running the program at `code`
/// stores the same values, and storing them at its own pixel is all it
/// does: straight-line code (no `if`, jump or call) to its first `stop`
/// of `wait`s, `st_tile`s at the lane's pixel, and ALU instructions the
/// compiled engine translates other than memory accesses and exec-mask
/// updates (pure functions of registers, uniforms and immediates; every
/// register starts at zero in every lane, and no special register or
/// other lane is read). A clear's background program is one. False for
/// an instruction the scan cannot read or a program longer than [`walk`]
/// goes.
pub(crate) fn stores_the_same_in_every_lane(vm: &GpuVm<'_>, code: u64) -> bool {
    use agx_hw::isa::Op;
    walk(vm, code, |_, ins| match ins.op {
        Op::Stop => Some(true),
        Op::Wait => None,
        Op::StTile if ins.int(7) == Some(0) => None,
        Op::GetSr
        | Op::IfIcmp
        | Op::IfFcmp
        | Op::PopExec
        | Op::JmpExecAny
        | Op::JmpExecNone
        | Op::JmpIfSkippingDoorbell => Some(false),
        _ if agx_jit::supports(ins, false)
            && !agx_jit::accesses_memory(ins)
            && !agx_jit::updates_exec_mask(ins) =>
        {
            None
        }
        _ => Some(false),
    })
    .unwrap_or(false)
}

/// The special registers a program reads (`get_sr`), one bit each (256),
/// following the code as [`packs_primitives`] does ([`walk_to_stop`]).
/// `None` when the scan cannot tell: an instruction it cannot read, a
/// call, a jump past the `stop`, a `stop` inside a branch, or a program
/// longer than it looks.
pub(crate) fn special_registers_read(vm: &GpuVm<'_>, code: u64) -> Option<[u64; 4]> {
    use agx_hw::isa::Op;
    let mut read = [0u64; 4];
    let followed = walk_to_stop(vm, code, |ins| match ins.op {
        Op::Call | Op::CallReg | Op::Ret => false,
        Op::GetSr => match ins.int(1).and_then(|sr| usize::try_from(sr).ok()) {
            Some(sr) if sr < 256 => {
                read[sr / 64] |= 1 << (sr % 64);
                true
            }
            _ => false,
        },
        _ => true,
    });
    followed.then_some(read)
}
