//! Executing one SIMD-group.
//!
//! A SIMD-group is 32 lanes running one instruction stream. Each lane has
//! its own 128 32-bit registers; the 256 uniforms are shared by the whole
//! dispatch. Which lanes run is the group's execution mask, hidden state
//! that every instruction obeys. Divergence is handled without a hardware
//! stack: the `if`/`else`/`while`/`pop_exec` instructions keep, in the low
//! half of r0 (`r0l`) of each lane, how many nesting levels the lane is
//! disabled for, and set the mask to the lanes whose count is then zero.
//! Nothing else reads `r0l` as a mask: a program without control flow uses
//! r0 as an ordinary register (Mesa's compiler reserves it only in shaders
//! with control flow), and writing `r0l` changes the mask only at the next
//! exec-mask instruction (applegpu's model of the hardware). Branches
//! (`jmp_exec_any`/`jmp_exec_none`) are taken by the whole group.
//!
//! This file holds the group's state and its fetch-execute loop; each
//! class of instruction executes in its own file (`control`, `special`,
//! `alu_float`, `alu_integer`, `compare`, `convert`, `load_store`,
//! `texture`, `stage_io`, `subgroup`), and `execute` names the class of every opcode
//! in one exhaustive match, so a new opcode cannot go unassigned.
//! `operands` reads and writes registers, uniforms and immediates.

mod alu_float;
mod alu_integer;
mod compare;
mod control;
mod convert;
mod load_store;
mod operands;
mod special;
mod stack;
mod stage_io;
mod subgroup;
mod texture;

use agx_hw::isa::{Dst, Op, Operand, Reg, RegRun, Size, Src, Value};

pub(crate) use alu_float::unary_f32_for_compiled_code;
pub(crate) use convert::convert_bits;
pub use stack::Stack;

use super::io::{IoError, ShaderIo};
use super::memory::{GpuMemory, MemoryFault};
use super::program::{FetchError, ProgramCache};
use super::trace::{LaneCounts, LaneTrace};

/// Lanes in a SIMD-group.
pub const LANES: usize = 32;
/// General-purpose registers per lane.
pub const GPRS: usize = 128;
/// Uniform registers per dispatch.
pub const UNIFORMS: usize = 256;

/// Why a SIMD-group stopped abnormally. Every variant names the
/// instruction's address (`pc`) so the fault can be reported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// The instruction could not be fetched or decoded.
    #[error("at {pc:#x}: {source}")]
    Fetch {
        /// Address of the instruction.
        pc: u64,
        /// What went wrong.
        source: FetchError,
    },
    /// A load or store faulted.
    #[error("at {pc:#x}: {fault}")]
    Memory {
        /// Address of the instruction.
        pc: u64,
        /// The fault.
        fault: MemoryFault,
    },
    /// A fixed-function unit refused the request.
    #[error("at {pc:#x}: {error}")]
    Io {
        /// Address of the instruction.
        pc: u64,
        /// What the unit reported.
        error: IoError,
    },
    /// Threadgroup memory accessed out of bounds.
    #[error(
        "at {pc:#x}: threadgroup memory access at byte {offset_bytes} past {size_bytes} bytes"
    )]
    ThreadgroupBounds {
        /// Address of the instruction.
        pc: u64,
        /// The faulting byte offset.
        offset_bytes: i64,
        /// The threadgroup allocation.
        size_bytes: usize,
    },
    /// A stack access, or a stack pointer adjustment, outside the
    /// SIMD-group's stack (or a stack access by a group without one).
    #[error("at {pc:#x}: stack access at byte {offset_bytes} outside the {size_bytes}-byte stack")]
    StackBounds {
        /// Address of the instruction.
        pc: u64,
        /// The offending byte offset (or new stack pointer).
        offset_bytes: i64,
        /// Bytes of each thread's stack.
        size_bytes: u32,
    },
    /// A uniform store past u255.
    #[error("at {pc:#x}: uniform store to half {half} past u255")]
    UniformBounds {
        /// Address of the instruction.
        pc: u64,
        /// The first half index out of range.
        half: i64,
    },
    /// A special register the dispatch did not provide.
    #[error("at {pc:#x}: special register sr{sr} is not available in this dispatch")]
    SpecialRegister {
        /// Address of the instruction.
        pc: u64,
        /// The register number.
        sr: u32,
    },
    /// An encoding the simulator does not model (an undefined condition
    /// code, a conversion mode with no known meaning...).
    #[error("at {pc:#x}: unsupported: {what}")]
    Unsupported {
        /// Address of the instruction.
        pc: u64,
        /// What is not modelled.
        what: String,
    },
    /// The program executed `trap`.
    #[error("at {pc:#x}: trap")]
    Trap {
        /// Address of the instruction.
        pc: u64,
    },
    /// The program did not stop within its instruction budget.
    #[error("no stop within {executed_instructions} instructions (last pc {pc:#x})")]
    Timeout {
        /// The instruction being executed when the budget ran out.
        pc: u64,
        /// Instructions executed.
        executed_instructions: u64,
    },
}

impl ExecError {
    /// The GPU virtual address of a memory fault, if this is one.
    pub fn fault_address(&self) -> Option<u64> {
        match self {
            ExecError::Memory { fault, .. }
            | ExecError::Fetch {
                source: FetchError::Memory(fault),
                ..
            }
            | ExecError::Io {
                error: IoError::Memory(fault),
                ..
            } => Some(fault.address),
            _ => None,
        }
    }

    /// The address of the instruction that failed.
    pub fn pc(&self) -> u64 {
        match self {
            ExecError::Fetch { pc, .. }
            | ExecError::Memory { pc, .. }
            | ExecError::Io { pc, .. }
            | ExecError::ThreadgroupBounds { pc, .. }
            | ExecError::StackBounds { pc, .. }
            | ExecError::UniformBounds { pc, .. }
            | ExecError::SpecialRegister { pc, .. }
            | ExecError::Unsupported { pc, .. }
            | ExecError::Trap { pc }
            | ExecError::Timeout { pc, .. } => *pc,
        }
    }
}

/// How a run ended (without error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The group executed `stop`.
    Stopped,
    /// The group reached `threadgroup_barrier`; run it again after the
    /// other groups of its threadgroup reach theirs.
    Barrier,
    /// The group rang the firmware's doorbell with this value (helper
    /// programs); run it again to go on.
    Doorbell(u8),
}

/// What the shader core is connected to for a run.
pub struct Env<'a> {
    /// Device memory, through the MMU.
    pub memory: &'a mut dyn GpuMemory,
    /// The stage's fixed-function units.
    pub io: &'a mut dyn ShaderIo,
    /// The dispatch's uniform registers.
    pub uniforms: &'a mut [u32; UNIFORMS],
    /// The threadgroup's shared memory (empty if none).
    pub threadgroup: &'a mut [u8],
}

/// Special registers a dispatch sets, room for which is made at once.
const SPECIAL_SLOTS: usize = 16;

/// Special-register values a dispatch provides, per lane.
#[derive(Debug, Clone, Default)]
pub struct SpecialRegs {
    slots: Vec<(u32, [u32; LANES])>,
}

impl SpecialRegs {
    /// Sets special register `sr` to `values[lane]` for each lane.
    pub fn set_lanes(&mut self, sr: u32, values: [u32; LANES]) {
        match self.slots.iter_mut().find(|(n, _)| *n == sr) {
            Some(slot) => slot.1 = values,
            None => {
                // A fragment program's dispatch sets about a dozen: room
                // for them at once, not grown one reallocation at a time.
                self.slots.reserve(SPECIAL_SLOTS);
                self.slots.push((sr, values));
            }
        }
    }

    /// Sets special register `sr` to `value` in every lane.
    pub fn set_all(&mut self, sr: u32, value: u32) {
        self.set_lanes(sr, [value; LANES]);
    }

    /// Special register `sr` of `lane`, if it is set.
    pub fn lane(&self, sr: u32, lane: usize) -> Option<u32> {
        self.get(sr).map(|values| values[lane])
    }

    /// Clears `bits` of special register `sr` in `lane`, if it is set.
    pub fn clear_bits(&mut self, sr: u32, lane: usize, bits: u32) {
        if let Some((_, values)) = self.slots.iter_mut().find(|(n, _)| *n == sr) {
            values[lane] &= !bits;
        }
    }

    fn get(&self, sr: u32) -> Option<&[u32; LANES]> {
        self.slots.iter().find(|(n, _)| *n == sr).map(|(_, v)| v)
    }
}

/// One SIMD-group's architectural state.
#[derive(Debug, Clone)]
pub struct SimdGroup {
    regs: Box<[[u32; LANES]; GPRS]>,
    /// Lanes that exist (a partial group at the edge of a grid has fewer).
    pub present: u32,
    /// The execution mask: the lanes that run the next instruction (a
    /// subset of `present`), set by the exec-mask instructions.
    exec: u32,
    /// Address of the next instruction.
    pub pc: u64,
    /// Special-register values.
    pub special: SpecialRegs,
    /// Instructions executed so far.
    pub executed_instructions: u64,
    /// The group's stack (none until the firmware maps one).
    pub stack: Stack,
    /// Registers from r0 up to this one (exclusive) may have been written
    /// since the group was made or reset; the rest are still zero.
    written_cells: usize,
    /// The lane the debugger records, instruction by instruction (see
    /// [`crate::usc::trace`]); a group with one runs in the interpreter
    /// only. [`SimdGroup::reset`] drops it.
    pub trace: Option<Box<LaneTrace>>,
    /// Instructions counted per lane for the debugger's maps (see
    /// [`crate::usc::trace::LaneCounts`]); a group counting them runs in
    /// the interpreter only. [`SimdGroup::reset`] drops it.
    pub counts: Option<Box<LaneCounts>>,
}

/// The instruction being executed, where it is, and the lanes it runs
/// on, with typed access to its decoded operands.
pub(super) struct Operands<'i> {
    pub(super) ins: &'i agx_hw::isa::Instr,
    /// The instruction's `.sat` modifier (from the program cache).
    pub(super) saturate: bool,
    pub(super) pc: u64,
    /// The lanes that run it.
    pub(super) exec: u32,
}

impl Operands<'_> {
    pub(super) fn dst(&self, i: usize) -> Result<Dst, ExecError> {
        match self.ins.operands.get(i) {
            Some(Operand::Dst(d)) => Ok(*d),
            _ => Err(unsupported(self.pc, "malformed destination operand")),
        }
    }

    pub(super) fn src(&self, i: usize) -> Result<Src, ExecError> {
        match self.ins.operands.get(i) {
            Some(Operand::Src(s)) => Ok(*s),
            _ => Err(unsupported(self.pc, "malformed source operand")),
        }
    }

    pub(super) fn int(&self, i: usize) -> Result<i64, ExecError> {
        self.ins
            .int(i)
            .ok_or_else(|| unsupported(self.pc, "malformed numeric operand"))
    }

    pub(super) fn run(&self, i: usize) -> Result<RegRun, ExecError> {
        match self.ins.operands.get(i) {
            Some(Operand::Regs(r)) => Ok(*r),
            _ => Err(unsupported(self.pc, "malformed register operand")),
        }
    }

    pub(super) fn value(&self, i: usize) -> Result<Value, ExecError> {
        match self.ins.operands.get(i) {
            Some(Operand::Value(v)) => Ok(*v),
            _ => Err(unsupported(self.pc, "malformed operand")),
        }
    }

    /// Whether the result saturates to [0, 1] (`.sat`).
    pub(super) fn sat(&self) -> bool {
        self.saturate
    }

    /// An instruction handed to a class that does not execute it: the
    /// dispatch in `execute` makes this impossible, and it is an error,
    /// not a panic, if it ever happens.
    pub(super) fn misrouted(&self) -> ExecError {
        unsupported(
            self.pc,
            format!(
                "{} reached the wrong instruction class",
                agx_hw::isa::text::mnemonic(self.ins)
            ),
        )
    }
}

/// Control flow after an instruction.
enum Flow {
    Next,
    Jump(u64),
    Stop,
    Barrier,
    Doorbell(u8),
}

/// Writes the low 16 bits of `value` into the half of 32-bit `cell` that
/// 16-bit register half `half` names (odd halves are the high bits).
fn set_half(cell: &mut u32, half: u16, value: u64) {
    let shift = 16 * u32::from(half % 2);
    *cell = (*cell & !(0xFFFF << shift)) | ((value as u32 & 0xFFFF) << shift);
}

fn lanes(mask: u32) -> impl Iterator<Item = usize> {
    (0..LANES).filter(move |lane| mask & (1 << lane) != 0)
}

fn unsupported(pc: u64, what: impl Into<String>) -> ExecError {
    ExecError::Unsupported {
        pc,
        what: what.into(),
    }
}

/// The bit width of a register size.
fn bits_of(size: Size) -> u32 {
    match size {
        Size::S16 => 16,
        Size::S32 => 32,
        Size::S64 => 64,
    }
}

fn truncate(value: u64, bits: u32) -> u64 {
    if bits >= 64 {
        value
    } else {
        value & ((1u64 << bits) - 1)
    }
}

fn sign_extend(value: u64, bits: u32) -> i64 {
    if bits >= 64 {
        value as i64
    } else {
        ((value << (64 - bits)) as i64) >> (64 - bits)
    }
}

impl SimdGroup {
    /// A group starting at `pc` with lanes `present`, all registers zero
    /// and every present lane active.
    pub fn new(pc: u64, present: u32) -> SimdGroup {
        SimdGroup {
            regs: Box::new([[0; LANES]; GPRS]),
            present,
            exec: present,
            pc,
            special: SpecialRegs::default(),
            executed_instructions: 0,
            stack: Stack::default(),
            written_cells: 0,
            trace: None,
            counts: None,
        }
    }

    /// The group as [`SimdGroup::new`] makes it, in this group's memory:
    /// registers zeroed, no special registers set, no stack (groups run
    /// one after another reuse one register file).
    pub fn reset(&mut self, pc: u64, present: u32) {
        // Only the registers written can be other than zero (a clear's
        // program writes 4 of the 128).
        let written = self.written_cells.min(self.regs.len());
        self.regs[..written].fill([0; LANES]);
        self.written_cells = 0;
        self.present = present;
        self.exec = present;
        self.pc = pc;
        self.special.slots.clear();
        self.executed_instructions = 0;
        self.stack = Stack::default();
        self.trace = None;
        self.counts = None;
    }

    /// Reads a register in a lane (16-bit halves in the low bits).
    pub fn read(&self, reg: Reg, lane: usize) -> u64 {
        let r = usize::from(reg.half / 2);
        match reg.size {
            Size::S16 => u64::from(self.regs[r][lane] >> (16 * (reg.half % 2))) & 0xFFFF,
            Size::S32 => u64::from(self.regs[r][lane]),
            Size::S64 => u64::from(self.regs[r][lane]) | u64::from(self.regs[r + 1][lane]) << 32,
        }
    }

    /// Writes a register in the lanes of `exec`, each its value
    /// (truncated to the register's size): [`SimdGroup::write`] per lane,
    /// with the register looked up once.
    pub(super) fn write_lanes(&mut self, reg: Reg, exec: u32, values: &[u64; LANES]) {
        let r = usize::from(reg.half / 2);
        match reg.size {
            Size::S32 => {
                self.written_cells = self.written_cells.max(r + 1);
                let cells = &mut self.regs[r];
                for lane in lanes(exec) {
                    cells[lane] = values[lane] as u32;
                }
            }
            Size::S16 => {
                self.written_cells = self.written_cells.max(r + 1);
                let cells = &mut self.regs[r];
                for lane in lanes(exec) {
                    set_half(&mut cells[lane], reg.half, values[lane]);
                }
            }
            Size::S64 => {
                for lane in lanes(exec) {
                    self.write(reg, lane, values[lane]);
                }
            }
        }
    }

    /// [`SimdGroup::write_lanes`] of each lane's `value(lane)`: a 32-bit
    /// register's lanes written straight, without the array of values.
    #[inline(always)]
    pub(super) fn write_lanes_of(&mut self, reg: Reg, exec: u32, value: impl Fn(usize) -> u32) {
        if reg.size != Size::S32 {
            let mut values = [0u64; LANES];
            for lane in lanes(exec) {
                values[lane] = u64::from(value(lane));
            }
            self.write_lanes(reg, exec, &values);
            return;
        }
        let r = usize::from(reg.half / 2);
        self.written_cells = self.written_cells.max(r + 1);
        let cells = &mut self.regs[r];
        for lane in lanes(exec) {
            cells[lane] = value(lane);
        }
    }

    /// Writes a register in a lane (truncating to its size).
    pub fn write(&mut self, reg: Reg, lane: usize, value: u64) {
        let r = usize::from(reg.half / 2);
        let cells = if reg.size == Size::S64 { 2 } else { 1 };
        self.written_cells = self.written_cells.max(r + cells);
        match reg.size {
            Size::S16 => set_half(&mut self.regs[r][lane], reg.half, value),
            Size::S32 => self.regs[r][lane] = value as u32,
            Size::S64 => {
                self.regs[r][lane] = value as u32;
                self.regs[r + 1][lane] = (value >> 32) as u32;
            }
        }
    }

    /// Writes the same register in every lane.
    pub fn write_all(&mut self, reg: Reg, values: [u64; LANES]) {
        for (lane, value) in values.into_iter().enumerate() {
            self.write(reg, lane, value);
        }
    }

    /// The lanes that run the next instruction (never a lane that is not
    /// present, whatever `present` was changed to).
    pub fn exec_mask(&self) -> u32 {
        self.exec & self.present
    }

    /// Sets the execution mask to the present lanes whose `r0l` is zero,
    /// as every exec-mask instruction does after updating the counts.
    fn exec_from_r0l(&mut self) {
        self.exec = lanes(self.present)
            .filter(|&lane| self.regs[0][lane] & 0xFFFF == 0)
            .fold(0, |m, l| m | 1 << l);
    }

    /// Runs until `stop` or a threadgroup barrier. `budget_instructions`
    /// is decremented per instruction executed; reaching zero is a
    /// timeout.
    pub fn run(
        &mut self,
        cache: &mut ProgramCache,
        env: &mut Env<'_>,
        budget_instructions: &mut u64,
    ) -> Result<Exit, ExecError> {
        let mut index = cache
            .lookup(self.pc, &*env.memory)
            .map_err(|source| ExecError::Fetch {
                pc: self.pc,
                source,
            })?;
        // After a compiled block stopped before an instruction, the
        // interpreter runs that one before blocks are looked for again.
        let mut interpret_next = false;
        loop {
            // A traced or counting group runs in the interpreter, which
            // records it.
            let block = if interpret_next || self.trace.is_some() || self.counts.is_some() {
                interpret_next = false;
                None
            } else {
                cache.block_at(index, &*env.memory)
            };
            if let Some(block) = block {
                let instructions = u64::from(block.instructions);
                // A loop runs as often as the budget allows whole runs;
                // where the budget ends inside a run, the segments that
                // fit run compiled and the interpreter takes the rest to
                // the timeout, which so names the same instruction.
                if *budget_instructions > 0 {
                    let exec = self.exec_mask();
                    let whole = *budget_instructions / instructions;
                    let (max_runs, tail) = match u32::try_from(whole) {
                        Ok(runs) if runs <= agx_jit::MAX_RUNS => {
                            (runs, (*budget_instructions % instructions) as u32)
                        }
                        // (More runs than one call makes: no partial one.)
                        _ => (agx_jit::MAX_RUNS, 0),
                    };
                    // Compiled code writes the registers it names
                    // directly.
                    self.written_cells = self.written_cells.max(block.register_cells_end.min(GPRS));
                    let frame = if block.stack {
                        self.stack.frame()
                    } else {
                        agx_jit::StackFrame::default()
                    };
                    let run = cache.run_block(
                        &block,
                        &mut self.regs,
                        env.uniforms,
                        (&*env.memory, &frame),
                        (exec, self.present),
                        (max_runs, tail),
                    );
                    // (A block not run at all, which cannot happen, is
                    // left to the interpreter.)
                    if run.runs > 0 || run.stopped_at.is_some() {
                        let spent = instructions * u64::from(run.runs)
                            + u64::from(run.stopped_at.unwrap_or(0));
                        // (Never more than the budget; saturating so that
                        // a mistake could not wrap it into an endless one.)
                        *budget_instructions = budget_instructions.saturating_sub(spent);
                        self.executed_instructions += spent;
                        if block.updates_exec {
                            self.exec = run.exec;
                        }
                        if let Some(position) = run.stopped_at {
                            // A memory instruction the compiled code
                            // left: the interpreter runs it (and reports
                            // its fault).
                            if let Some((at, pc)) = cache.block_member(&block, position) {
                                index = at;
                                self.pc = pc;
                            }
                            interpret_next = true;
                        } else if !run.at_start {
                            index = block.next_index;
                            self.pc = block.next_pc;
                        }
                        continue;
                    }
                }
            }
            if *budget_instructions == 0 {
                return Err(ExecError::Timeout {
                    pc: self.pc,
                    executed_instructions: self.executed_instructions,
                });
            }
            *budget_instructions -= 1;
            self.executed_instructions += 1;
            let cached = cache.get(index);
            let (pc, len) = (cached.address, u64::from(cached.length_bytes));
            self.pc = pc;
            if cached.undefined_operand {
                if let Some((position, why)) = cached.instr.undefined_operand() {
                    return Err(unsupported(
                        pc,
                        format!(
                            "{}: operand {position}: {why}",
                            agx_hw::isa::text::mnemonic(&cached.instr)
                        ),
                    ));
                }
            }
            if cached.unknown_bits != 0 {
                return Err(unsupported(
                    pc,
                    format!(
                        "{} with bits {:#x} the simulator does not model",
                        agx_hw::isa::text::mnemonic(&cached.instr),
                        cached.unknown_bits
                    ),
                ));
            }
            if self.counts.is_some() {
                self.count_instruction(self.exec_mask());
            }
            let before = self.trace_before(&cached.instr, env.uniforms);
            let flow = self.execute(&cached.instr, cached.saturate, pc, env);
            if let Some(before) = before {
                let error = flow.as_ref().err().map(ToString::to_string);
                self.trace_after(before, &cached.instr, pc, env.uniforms, error);
            }
            let flow = flow?;
            let (next, next_slot_is_target) = match flow {
                Flow::Stop => return Ok(Exit::Stopped),
                Flow::Barrier => {
                    self.pc = pc.wrapping_add(len);
                    return Ok(Exit::Barrier);
                }
                Flow::Doorbell(value) => {
                    self.pc = pc.wrapping_add(len);
                    return Ok(Exit::Doorbell(value));
                }
                Flow::Next => (pc.wrapping_add(len), false),
                Flow::Jump(target) => (target, true),
            };
            let known = if next_slot_is_target {
                cache.get(index).target
            } else {
                cache.get(index).next
            };
            let next_index = match known {
                Some(i) if cache.get(i).address == next => i,
                _ => {
                    let i = cache
                        .lookup(next, &*env.memory)
                        .map_err(|source| ExecError::Fetch { pc: next, source })?;
                    let entry = cache.get_mut(index);
                    if next_slot_is_target {
                        entry.target = Some(i);
                    } else {
                        entry.next = Some(i);
                    }
                    i
                }
            };
            index = next_index;
            self.pc = next;
        }
    }

    /// Executes one instruction: each class of instruction has its own
    /// file, and this match names the class of every opcode. The class
    /// methods are `#[inline(always)]`: as calls they cost 12% of the
    /// `usc` benchmark's throughput; inlined, the split costs nothing.
    fn execute(
        &mut self,
        ins: &agx_hw::isa::Instr,
        saturate: bool,
        pc: u64,
        env: &mut Env<'_>,
    ) -> Result<Flow, ExecError> {
        let o = Operands {
            ins,
            saturate,
            pc,
            exec: self.exec_mask(),
        };
        match ins.op {
            Op::Stop
            | Op::Trap
            | Op::Wait
            | Op::MemoryBarrier
            | Op::WaitPix
            | Op::SignalPix
            | Op::NoVar
            | Op::ThreadgroupBarrier
            | Op::JmpExecAny
            | Op::JmpExecNone
            | Op::Doorbell
            | Op::JmpIfSkippingDoorbell
            | Op::Call
            | Op::CallReg
            | Op::Ret
            | Op::IfIcmp
            | Op::ElseIcmp
            | Op::WhileIcmp
            | Op::IfFcmp
            | Op::ElseFcmp
            | Op::WhileFcmp
            | Op::PopExec => self.control(&o, env),
            Op::GetSr => self.special(&o, env),
            Op::SinPt1
            | Op::SinPt2
            | Op::Fadd32
            | Op::Fmul32
            | Op::Fmadd32
            | Op::Fadd16
            | Op::Fmul16
            | Op::Fmadd16
            | Op::Floor
            | Op::Ceil
            | Op::Trunc
            | Op::Rint
            | Op::Rcp
            | Op::Rsqrt
            | Op::Log2
            | Op::Exp2
            | Op::RsqrtSpecial
            | Op::Dfdx
            | Op::Dfdy => self.float_alu(&o, env),
            Op::MovImm16
            | Op::MovImm32
            | Op::Iadd
            | Op::Isub
            | Op::Imadd
            | Op::Imsub
            | Op::Mov
            | Op::Not
            | Op::And
            | Op::Or
            | Op::Xor
            | Op::Nand
            | Op::Nor
            | Op::Xnor
            | Op::Bitop
            | Op::Bfi
            | Op::Bfeil
            | Op::Extr
            | Op::Shlhi
            | Op::Shrhi
            | Op::Asr
            | Op::Asrh
            | Op::Bitrev
            | Op::Popcount
            | Op::Ffs
            | Op::Intl => self.integer_alu(&o, env),
            Op::Icmpsel | Op::Fcmpsel => self.compare_select(&o, env),
            Op::QuadReduce
            | Op::SimdReduce
            | Op::QuadPrefix
            | Op::SimdPrefix
            | Op::SimdOp
            | Op::QuadShuffle
            | Op::QuadShuffleXor
            | Op::QuadShuffleUp
            | Op::QuadShuffleDown
            | Op::QuadShuffleRotateUp
            | Op::SimdShuffle
            | Op::SimdShuffleXor
            | Op::SimdShuffleUp
            | Op::SimdShuffleDown
            | Op::SimdShuffleRotateUp
            | Op::SimdShufOp
            | Op::IcmpBallot
            | Op::IcmpQuadBallot
            | Op::FcmpBallot
            | Op::FcmpQuadBallot => self.subgroup(&o, env),
            // Decoded for the listing; what they do is not known well
            // enough to model (the generic forms have operation bits
            // nobody has decoded; the others are applegpu's readings of
            // words no compiler output shows).
            Op::Funop
            | Op::Iunop
            | Op::JmpIncomplete
            | Op::StackMapOp
            | Op::SimdMatrixFmadd16
            | Op::SimdMatrixFmadd32
            | Op::DeviceLoadTodo
            | Op::DeviceStoreTodo
            | Op::AsyncLoad
            | Op::AsyncStore
            | Op::Unk101c
            | Op::Unk62cc
            | Op::UnkE800
            | Op::Unk0c00
            | Op::UnkC0000000
            | Op::Unk30c0
            | Op::Unk40c0
            | Op::UnkSr => Err(unsupported(
                pc,
                format!("{} is decoded but not modelled", ins.op.mnemonic()),
            )),
            Op::Convert => self.convert_op(&o, env),
            Op::DeviceLoad
            | Op::DeviceStore
            | Op::UniformStore
            | Op::ThreadgroupLoad
            | Op::ThreadgroupStore
            | Op::Atomic
            | Op::ThreadgroupAtomic
            | Op::TexStateStore
            | Op::SamplerStateStore => self.load_store(&o, env),
            Op::StackAdjust | Op::StackLoad | Op::StackStore | Op::StackMap | Op::StackUnmap => {
                self.stack_op(&o, env)
            }
            Op::TextureSample | Op::TextureLoad | Op::ImageWrite | Op::ImageWriteBlock => {
                self.texture_op(&o, env)
            }
            Op::LdTile
            | Op::StTile
            | Op::Iter
            | Op::Iterproj
            | Op::Ldcf
            | Op::StVar
            | Op::StVarFinal
            | Op::SampleMask
            | Op::ZsEmit => self.stage_io(&o, env),
        }
    }
}

/// Marks match arms the operand checks above make impossible; they fall
/// back to a harmless value rather than panicking.
fn unreachable_flow<T: Default>() -> T {
    T::default()
}
