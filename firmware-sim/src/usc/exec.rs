//! Executing one SIMD-group.
//!
//! A SIMD-group is 32 lanes running one instruction stream. Each lane has
//! its own 128 32-bit registers; the 256 uniforms are shared by the whole
//! dispatch. Divergence is handled without a hardware stack: the low half
//! of r0 (`r0l`) of each lane counts how many exec-mask levels the lane is
//! disabled for, a lane runs only while its `r0l` is zero, and the
//! `if`/`else`/`while`/`pop_exec` instructions update every lane's count.
//! Branches (`jmp_exec_any`/`jmp_exec_none`) are taken by the whole group.

use agx_hw::isa::{Dst, Op, Operand, Reg, RegRun, Size, Src, Value};

use super::float::{
    f32_to_half, f64_to_half, float_to_int, ftz, half_to_f32, int_to_f32, int_to_half, saturate,
};
use super::formats::{self, ElementFormat};
use super::io::{
    BlockStore, ImageWrite, Interpolation, IoError, LodArgument, ShaderIo, TextureHandle,
    TextureRequest, TileAccess,
};
use super::memory::{AccessKind, GpuMemory, MemoryFault};
use super::program::{FetchError, ProgramCache};

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
            None => self.slots.push((sr, values)),
        }
    }

    /// Sets special register `sr` to `value` in every lane.
    pub fn set_all(&mut self, sr: u32, value: u32) {
        self.set_lanes(sr, [value; LANES]);
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
    /// Address of the next instruction.
    pub pc: u64,
    /// Special-register values.
    pub special: SpecialRegs,
    /// Instructions executed so far.
    pub executed_instructions: u64,
}

/// Control flow after an instruction.
enum Flow {
    Next,
    Jump(u64),
    Stop,
    Barrier,
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
    /// (so every present lane starts active).
    pub fn new(pc: u64, present: u32) -> SimdGroup {
        SimdGroup {
            regs: Box::new([[0; LANES]; GPRS]),
            present,
            pc,
            special: SpecialRegs::default(),
            executed_instructions: 0,
        }
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

    /// Writes a register in a lane (truncating to its size).
    pub fn write(&mut self, reg: Reg, lane: usize, value: u64) {
        let r = usize::from(reg.half / 2);
        match reg.size {
            Size::S16 => {
                let shift = 16 * u32::from(reg.half % 2);
                let cell = &mut self.regs[r][lane];
                *cell = (*cell & !(0xFFFF << shift)) | ((value as u32 & 0xFFFF) << shift);
            }
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

    /// The lanes that run the next instruction: present, with `r0l` zero.
    pub fn exec_mask(&self) -> u32 {
        lanes(self.present)
            .filter(|&lane| self.regs[0][lane] & 0xFFFF == 0)
            .fold(0, |m, l| m | 1 << l)
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
        loop {
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
            if cached.unknown_bits != 0 {
                return Err(unsupported(
                    pc,
                    format!(
                        "{} with bits {:#x} the simulator does not model",
                        cached.instr.op.mnemonic(),
                        cached.unknown_bits
                    ),
                ));
            }
            let flow = self.execute(&cached.instr, pc, env)?;
            let (next, next_slot_is_target) = match flow {
                Flow::Stop => return Ok(Exit::Stopped),
                Flow::Barrier => {
                    self.pc = pc.wrapping_add(len);
                    return Ok(Exit::Barrier);
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

    // ---- operand access -------------------------------------------------

    fn value_bits(&self, value: &Value, lane: usize, uniforms: &[u32; UNIFORMS]) -> (u64, u32) {
        match value {
            Value::Reg(reg, _) => (self.read(*reg, lane), bits_of(reg.size)),
            Value::Uniform(u) => {
                let n = usize::from(u.half / 2);
                let bits = match u.size {
                    Size::S16 => u64::from(uniforms[n] >> (16 * (u.half % 2))) & 0xFFFF,
                    Size::S32 => u64::from(uniforms[n]),
                    Size::S64 => {
                        u64::from(uniforms[n]) | u64::from(uniforms[(n + 1) % UNIFORMS]) << 32
                    }
                };
                (bits, bits_of(u.size))
            }
            Value::Imm(imm) => (*imm as u64, 64),
            Value::Float(f) => (u64::from(f.to_f32().to_bits()), 32),
        }
    }

    /// A value in every lane (raw bits, zero-extended) and its width.
    /// Reading all lanes at once costs less than a lookup per lane.
    fn gather_raw(&self, value: &Value, uniforms: &[u32; UNIFORMS]) -> ([u64; LANES], u32) {
        let mut out = [0u64; LANES];
        let width = match value {
            Value::Reg(reg, _) => {
                let r = usize::from(reg.half / 2);
                match reg.size {
                    Size::S16 => {
                        let shift = 16 * u32::from(reg.half % 2);
                        for (o, v) in out.iter_mut().zip(&self.regs[r]) {
                            *o = u64::from(v >> shift) & 0xFFFF;
                        }
                    }
                    Size::S32 => {
                        for (o, v) in out.iter_mut().zip(&self.regs[r]) {
                            *o = u64::from(*v);
                        }
                    }
                    Size::S64 => {
                        for ((o, lo), hi) in
                            out.iter_mut().zip(&self.regs[r]).zip(&self.regs[r + 1])
                        {
                            *o = u64::from(*lo) | u64::from(*hi) << 32;
                        }
                    }
                }
                bits_of(reg.size)
            }
            other => {
                let (bits, width) = self.value_bits(other, 0, uniforms);
                out = [bits; LANES];
                width
            }
        };
        (out, width)
    }

    /// A float source of a 32-bit operation in every lane: fp16 registers
    /// widen, fp32 denormals flush, then abs and neg apply.
    fn gather_f32(&self, src: &Src, uniforms: &[u32; UNIFORMS]) -> [f32; LANES] {
        let mut out = match &src.value {
            Value::Float(f) => [f.to_f32(); LANES],
            value => {
                let (raw, width) = self.gather_raw(value, uniforms);
                if width == 16 {
                    raw.map(half_to_f32)
                } else {
                    raw.map(|bits| ftz(f32::from_bits(bits as u32)))
                }
            }
        };
        if src.abs {
            out = out.map(f32::abs);
        }
        if src.neg {
            out = out.map(|v| -v);
        }
        out
    }

    /// An integer source in every lane, extended to 64 bits: sign-extended
    /// from its width with `.sx`, else zero-extended.
    fn gather_int(&self, src: &Src, uniforms: &[u32; UNIFORMS]) -> [i128; LANES] {
        let (raw, width) = self.gather_raw(&src.value, uniforms);
        if src.sx && width < 64 {
            raw.map(|bits| i128::from(sign_extend(bits, width)))
        } else {
            raw.map(|bits| i128::from(truncate(bits, width)))
        }
    }

    /// A float source of a 16-bit operation (no flushing).
    fn half_src(&self, src: &Src, lane: usize, uniforms: &[u32; UNIFORMS]) -> f64 {
        let value = match &src.value {
            Value::Float(f) => f64::from(f.to_f32()),
            value => {
                let (bits, width) = self.value_bits(value, lane, uniforms);
                if width == 16 {
                    f64::from(half_to_f32(bits))
                } else {
                    f64::from(f32::from_bits(bits as u32))
                }
            }
        };
        let value = if src.abs { value.abs() } else { value };
        if src.neg {
            -value
        } else {
            value
        }
    }

    /// Raw bits of a source (immediates zero-extended).
    fn raw_src(&self, src: &Src, lane: usize, uniforms: &[u32; UNIFORMS]) -> (u64, u32) {
        self.value_bits(&src.value, lane, uniforms)
    }

    fn write_float(&mut self, dst: Reg, lane: usize, value: f32) {
        match dst.size {
            Size::S16 => self.write(dst, lane, u64::from(f32_to_half(value))),
            _ => self.write(dst, lane, u64::from(ftz(value).to_bits())),
        }
    }

    fn write_run(&mut self, run: &RegRun, lane: usize, values: &[u32]) {
        for (i, value) in values.iter().enumerate().take(usize::from(run.count)) {
            self.write(run.reg(i as u16), lane, u64::from(*value));
        }
    }

    fn read_run(&self, run: &RegRun, lane: usize) -> [u32; 4] {
        let mut values = [0u32; 4];
        for (i, value) in values
            .iter_mut()
            .enumerate()
            .take(usize::from(run.count.min(4)))
        {
            *value = self.read(run.reg(i as u16), lane) as u32;
        }
        values
    }

    fn lane_value(&self, value: &Value, lane: usize, uniforms: &[u32; UNIFORMS]) -> u64 {
        self.value_bits(value, lane, uniforms).0
    }

    // ---- execution ------------------------------------------------------

    fn execute(
        &mut self,
        ins: &agx_hw::isa::Instr,
        pc: u64,
        env: &mut Env<'_>,
    ) -> Result<Flow, ExecError> {
        let ops = &ins.operands;
        let dst = |i: usize| -> Result<Dst, ExecError> {
            match ops.get(i) {
                Some(Operand::Dst(d)) => Ok(*d),
                _ => Err(unsupported(pc, "malformed destination operand")),
            }
        };
        let src = |i: usize| -> Result<Src, ExecError> {
            match ops.get(i) {
                Some(Operand::Src(s)) => Ok(*s),
                _ => Err(unsupported(pc, "malformed source operand")),
            }
        };
        let int = |i: usize| -> Result<i64, ExecError> {
            ins.int(i)
                .ok_or_else(|| unsupported(pc, "malformed numeric operand"))
        };
        let run = |i: usize| -> Result<RegRun, ExecError> {
            match ops.get(i) {
                Some(Operand::Regs(r)) => Ok(*r),
                _ => Err(unsupported(pc, "malformed register operand")),
            }
        };
        let value = |i: usize| -> Result<Value, ExecError> {
            match ops.get(i) {
                Some(Operand::Value(v)) => Ok(*v),
                _ => Err(unsupported(pc, "malformed operand")),
            }
        };
        let exec = self.exec_mask();
        let sat = ins.has_modifier("sat");
        let op = ins.op;
        match op {
            Op::Stop => return Ok(Flow::Stop),
            Op::SinPt1 | Op::SinPt2 => {
                return Err(unsupported(
                    pc,
                    format!("{} (its polynomial is not modelled)", op.mnemonic()),
                ))
            }
            Op::Trap => return Err(ExecError::Trap { pc }),
            Op::Wait | Op::MemoryBarrier | Op::WaitPix | Op::SignalPix | Op::NoVar => {}
            Op::ThreadgroupBarrier => return Ok(Flow::Barrier),
            Op::JmpExecAny => {
                if exec != 0 {
                    return Ok(Flow::Jump(pc.wrapping_add(int(0)? as u64)));
                }
            }
            Op::JmpExecNone => {
                if exec == 0 {
                    return Ok(Flow::Jump(pc.wrapping_add(int(0)? as u64)));
                }
            }
            Op::Call => {
                for lane in lanes(exec) {
                    self.write(Reg::r(1), lane, pc.wrapping_add(6) & 0xFFFF_FFFF);
                }
                return Ok(Flow::Jump(pc.wrapping_add(int(0)? as u64)));
            }
            Op::CallReg | Op::Ret => {
                let target_reg = run(0)?.first;
                // The whole group follows one address: the first active
                // lane's, or the first present lane's if none is active.
                let source_lane = lanes(if exec != 0 { exec } else { self.present })
                    .next()
                    .unwrap_or(0);
                let target = self.read(target_reg, source_lane);
                if op == Op::CallReg {
                    for lane in lanes(exec) {
                        self.write(Reg::r(1), lane, pc.wrapping_add(2) & 0xFFFF_FFFF);
                    }
                }
                return Ok(Flow::Jump((pc & !0xFFFF_FFFF) | target));
            }
            Op::GetSr => {
                let d = dst(0)?.reg;
                let sr = int(1)? as u32;
                for lane in lanes(exec) {
                    let v = self.special_register(sr, lane, exec, pc)?;
                    self.write(d, lane, u64::from(v));
                }
            }
            Op::MovImm16 | Op::MovImm32 => {
                let d = dst(0)?.reg;
                let imm = int(1)? as u64;
                for lane in lanes(exec) {
                    self.write(d, lane, imm);
                }
            }
            Op::Fadd32 | Op::Fmul32 | Op::Fmadd32 => {
                let d = dst(0)?.reg;
                let (a, b) = (src(1)?, src(2)?);
                let c = if op == Op::Fmadd32 {
                    Some(src(3)?)
                } else {
                    None
                };
                let xs = self.gather_f32(&a, env.uniforms);
                let ys = self.gather_f32(&b, env.uniforms);
                let zs = c.map(|c| self.gather_f32(&c, env.uniforms));
                for lane in lanes(exec) {
                    let (x, y) = (xs[lane], ys[lane]);
                    let r = match (op, &zs) {
                        (Op::Fadd32, _) => x + y,
                        (Op::Fmul32, _) => x * y,
                        (_, Some(z)) => x.mul_add(y, z[lane]),
                        _ => unreachable_flow(),
                    };
                    let r = ftz(r);
                    self.write_float(d, lane, if sat { saturate(r) } else { r });
                }
            }
            Op::Fadd16 | Op::Fmul16 | Op::Fmadd16 => {
                let d = dst(0)?.reg;
                let (a, b) = (src(1)?, src(2)?);
                let c = if op == Op::Fmadd16 {
                    Some(src(3)?)
                } else {
                    None
                };
                for lane in lanes(exec) {
                    let x = self.half_src(&a, lane, env.uniforms);
                    let y = self.half_src(&b, lane, env.uniforms);
                    let r = match (op, &c) {
                        (Op::Fadd16, _) => x + y,
                        (Op::Fmul16, _) => x * y,
                        (_, Some(c)) => x.mul_add(y, self.half_src(c, lane, env.uniforms)),
                        _ => unreachable_flow(),
                    };
                    let r = if !sat {
                        r
                    } else if r.is_nan() {
                        0.0
                    } else {
                        r.clamp(0.0, 1.0)
                    };
                    self.write(d, lane, u64::from(f64_to_half(r)));
                }
            }
            Op::Floor
            | Op::Ceil
            | Op::Trunc
            | Op::Rint
            | Op::Rcp
            | Op::Rsqrt
            | Op::Log2
            | Op::Exp2
            | Op::RsqrtSpecial => {
                let d = dst(0)?.reg;
                let a = src(1)?;
                let xs = self.gather_f32(&a, env.uniforms);
                for lane in lanes(exec) {
                    let x = xs[lane];
                    let r = match op {
                        Op::Floor => x.floor(),
                        Op::Ceil => x.ceil(),
                        Op::Trunc => x.trunc(),
                        Op::Rint => x.round_ties_even(),
                        Op::Rcp => 1.0 / x,
                        Op::Rsqrt => 1.0 / x.sqrt(),
                        Op::Log2 => x.log2(),
                        // Modelled so that Mesa's sqrt(x) = x * srsqrt(x)
                        // gives 0 at 0 rather than 0 * inf.
                        Op::RsqrtSpecial if x == 0.0 => 0.0,
                        Op::RsqrtSpecial => 1.0 / x.sqrt(),
                        _ => x.exp2(),
                    };
                    let r = ftz(r);
                    self.write_float(d, lane, if sat { saturate(r) } else { r });
                }
            }
            Op::Dfdx | Op::Dfdy => {
                let d = dst(0)?.reg;
                let a = src(1)?;
                let values = self.gather_f32(&a, env.uniforms);
                let neighbour = if op == Op::Dfdx { 1 } else { 2 };
                for lane in lanes(exec) {
                    let r = ftz(values[lane | neighbour] - values[lane & !neighbour]);
                    self.write_float(d, lane, if sat { saturate(r) } else { r });
                }
            }
            Op::Iadd | Op::Isub | Op::Imadd | Op::Imsub => {
                let d = dst(0)?;
                let width = bits_of(d.reg.size);
                let (a, b) = (src(1)?, src(2)?);
                let c = if matches!(op, Op::Imadd | Op::Imsub) {
                    Some(src(3)?)
                } else {
                    None
                };
                let shift = int(if c.is_some() { 4 } else { 3 })? as u32;
                let signed = a.sx || b.sx || c.is_some_and(|c| c.sx);
                // Saturation needs every operand at most 32 bits wide.
                let wide = |s: &Src| matches!(s.value, Value::Reg(r, _) if r.size == Size::S64);
                let narrow = !wide(&a) && !wide(&b) && !c.as_ref().is_some_and(wide);
                let xs = self.gather_int(&a, env.uniforms);
                let ys = self.gather_int(&b, env.uniforms);
                let zs = c.map(|c| self.gather_int(&c, env.uniforms));
                for lane in lanes(exec) {
                    let (x, y) = (xs[lane], ys[lane]);
                    let (product, addend) = match &zs {
                        Some(z) => (x.wrapping_mul(y), z[lane]),
                        None => (x, y),
                    };
                    let addend = if shift >= 5 { 0 } else { addend << shift };
                    let r = if matches!(op, Op::Isub | Op::Imsub) {
                        product.wrapping_sub(addend)
                    } else {
                        product.wrapping_add(addend)
                    };
                    let r = if sat && shift == 0 && width <= 32 && narrow {
                        if signed {
                            r.clamp(-(1i128 << (width - 1)), (1i128 << (width - 1)) - 1)
                        } else {
                            r.clamp(0, (1i128 << width) - 1)
                        }
                    } else {
                        r
                    };
                    self.write(d.reg, lane, r as u64);
                }
            }
            Op::Mov | Op::Not | Op::And | Op::Or | Op::Xor | Op::Nand | Op::Nor | Op::Bitop => {
                let (table, first) = match op {
                    Op::Mov => (0b1010, 0),
                    Op::Not => (0b0101, 0),
                    Op::And => (0b1000, 0),
                    Op::Or => (0b1110, 0),
                    Op::Xor => (0b0110, 0),
                    Op::Nand => (0b0111, 0),
                    Op::Nor => (0b0001, 0),
                    _ => (int(0)? as u32, 1),
                };
                let d = dst(first)?.reg;
                let a = src(first + 1)?;
                let b = if matches!(op, Op::Mov | Op::Not) {
                    None
                } else {
                    Some(src(first + 2)?)
                };
                let xs = self.gather_raw(&a.value, env.uniforms).0;
                let ys = b.map_or([0; LANES], |b| self.gather_raw(&b.value, env.uniforms).0);
                for lane in lanes(exec) {
                    let (x, y) = (xs[lane], ys[lane]);
                    let mut r = 0u64;
                    if table & 1 != 0 {
                        r |= !x & !y;
                    }
                    if table & 2 != 0 {
                        r |= x & !y;
                    }
                    if table & 4 != 0 {
                        r |= !x & y;
                    }
                    if table & 8 != 0 {
                        r |= x & y;
                    }
                    self.write(d, lane, r);
                }
            }
            Op::Bfi | Op::Bfeil | Op::Extr | Op::Shlhi | Op::Shrhi | Op::Asr | Op::Asrh => {
                let d = dst(0)?.reg;
                let (a, b) = (src(1)?, src(2)?);
                let (c, m) = if matches!(op, Op::Asr | Op::Asrh) {
                    (None, 0)
                } else {
                    (Some(src(3)?), int(4)? as u32)
                };
                let mask: u128 = if m == 0 { 0xFFFF_FFFF } else { (1 << m) - 1 };
                let (xs, x_width) = self.gather_raw(&a.value, env.uniforms);
                let ys = self.gather_raw(&b.value, env.uniforms).0;
                let shifts = c.map(|c| self.gather_raw(&c.value, env.uniforms).0);
                for lane in lanes(exec) {
                    let x = u128::from(truncate(xs[lane], x_width.min(32)));
                    let y = u128::from(truncate(ys[lane], 32));
                    let r: u128 = match (op, &c) {
                        (Op::Asr, _) => {
                            let sh = (y & 0x7F).min(63) as u32;
                            (i128::from(sign_extend(x as u64, x_width.min(32))) >> sh) as u128
                        }
                        (Op::Asrh, _) => {
                            let sh = (y & 0x7F).min(95) as u32;
                            ((i128::from(sign_extend(x as u64, x_width.min(32))) << 32) >> sh)
                                as u128
                        }
                        (_, Some(_)) => {
                            let sh = (shifts.map_or(0, |s| s[lane]) & 0x7F) as u32;
                            match op {
                                Op::Bfi => (x & !(mask << sh)) | ((y & mask) << sh),
                                Op::Bfeil => (x & !mask) | ((y >> sh) & mask),
                                Op::Extr => (((y << 32) | x) >> sh) & mask,
                                Op::Shlhi => {
                                    let smask = mask << sh.saturating_sub(32);
                                    (((y << sh) >> 32) & smask) | (x & !smask)
                                }
                                _ => {
                                    let smask = (mask << 32) >> sh.min(32);
                                    (((y << 32) >> sh) & smask) | (x & !smask)
                                }
                            }
                        }
                        _ => unreachable_flow(),
                    };
                    self.write(d, lane, r as u64);
                }
            }
            Op::Icmpsel | Op::Fcmpsel => {
                let cc = int(0)? as u32;
                let d = dst(1)?.reg;
                let (a, b, x, y) = (src(2)?, src(3)?, src(4)?, src(5)?);
                let taken =
                    self.condition_mask(op == Op::Fcmpsel, cc, &a, &b, exec, env.uniforms, pc)?;
                let xs = self.gather_raw(&x.value, env.uniforms).0;
                let ys = self.gather_raw(&y.value, env.uniforms).0;
                for lane in lanes(exec) {
                    let bits = if taken & (1 << lane) != 0 {
                        xs[lane]
                    } else {
                        ys[lane]
                    };
                    self.write(d, lane, bits);
                }
            }
            Op::Convert => self.convert(int(0)?, dst(1)?.reg, &src(2)?, int(3)?, exec, env, pc)?,
            Op::IfIcmp
            | Op::ElseIcmp
            | Op::WhileIcmp
            | Op::IfFcmp
            | Op::ElseFcmp
            | Op::WhileFcmp => {
                let code = int(1)? as u32;
                let (a, b) = (src(2)?, src(3)?);
                let n = int(4)? as u64;
                let float = matches!(op, Op::IfFcmp | Op::ElseFcmp | Op::WhileFcmp);
                let holds =
                    self.condition_mask(float, code & 7, &a, &b, self.present, env.uniforms, pc)?;
                let conditions = if code & 8 != 0 {
                    !holds & self.present
                } else {
                    holds
                };
                for lane in lanes(self.present) {
                    let v = self.read(Reg::l(0), lane);
                    let cond = conditions & (1 << lane) != 0;
                    let new = match op {
                        Op::IfIcmp | Op::IfFcmp => {
                            if v != 0 {
                                v + n
                            } else if cond {
                                0
                            } else {
                                1
                            }
                        }
                        Op::ElseIcmp | Op::ElseFcmp => match v {
                            0 => n,
                            1 => u64::from(!cond),
                            v => v,
                        },
                        _ => {
                            if v < n {
                                if cond {
                                    0
                                } else {
                                    n
                                }
                            } else {
                                v
                            }
                        }
                    };
                    self.write(Reg::l(0), lane, new);
                }
            }
            Op::PopExec => {
                let n = int(1)? as u64;
                for lane in lanes(self.present) {
                    let v = self.read(Reg::l(0), lane);
                    self.write(Reg::l(0), lane, v.saturating_sub(n));
                }
            }
            Op::DeviceLoad | Op::DeviceStore => self.device_memory(ins, exec, env, pc)?,
            Op::UniformStore => self.uniform_store(ins, exec, env, pc)?,
            Op::ThreadgroupLoad | Op::ThreadgroupStore => {
                self.threadgroup_memory(ins, exec, env, pc)?
            }
            Op::TextureSample | Op::TextureLoad => self.texture(ins, exec, env, pc)?,
            Op::ImageWrite => {
                let data = run(0)?;
                let coords = run(1)?;
                let lod = value(2)?;
                let base = value(3)?;
                let handle = value(4)?;
                let dim = int(5)? as u32;
                for lane in lanes(exec) {
                    let request = ImageWrite {
                        texture: self.texture_handle(&handle, &base, lane, env.uniforms),
                        dim,
                        coords: self.read_run(&coords, lane),
                        lod: self.lane_value(&lod, lane, env.uniforms) as u32,
                        values: self.read_run(&RegRun { count: 4, ..data }, lane),
                        half: data.first.size == Size::S16,
                    };
                    env.io
                        .image_write(lane, &request)
                        .map_err(|error| ExecError::Io { pc, error })?;
                }
            }
            Op::ImageWriteBlock => {
                if let Some(lane) = lanes(exec).next() {
                    let offset = run(0)?;
                    let coords = run(1)?;
                    let base = value(3)?;
                    let handle = value(4)?;
                    let request = BlockStore {
                        texture: self.texture_handle(&handle, &base, lane, env.uniforms),
                        dim: int(5)? as u32,
                        format: int(7)? as u32,
                        tilebuffer_offset_bytes: self.read(offset.first, lane) as u32,
                        coords: self.read(coords.first, lane) as u32,
                        explicit_coords: int(8)? != 0,
                    };
                    env.io
                        .block_store(&request)
                        .map_err(|error| ExecError::Io { pc, error })?;
                }
            }
            Op::LdTile | Op::StTile => {
                let data = run(0)?;
                let sample_mask = value(5)?;
                let coords = run(6)?;
                let explicit = int(7)? != 0;
                for lane in lanes(exec) {
                    let xy = self.read(coords.first, lane);
                    let access = TileAccess {
                        format: int(1)? as u32,
                        offset_bytes: int(4)? as u32,
                        mask: int(3)? as u8,
                        sample_mask: self.lane_value(&sample_mask, lane, env.uniforms) as u32,
                        explicit: explicit.then_some((xy as u16, (xy >> 16) as u16)),
                        half: data.first.size == Size::S16,
                    };
                    if op == Op::LdTile {
                        let values = env
                            .io
                            .tile_load(lane, &access)
                            .map_err(|error| ExecError::Io { pc, error })?;
                        self.write_run(&data, lane, &values);
                    } else {
                        let values = self.read_run(&data, lane);
                        env.io
                            .tile_store(lane, &access, values)
                            .map_err(|error| ExecError::Io { pc, error })?;
                    }
                }
            }
            Op::Iter | Op::Iterproj => {
                let data = run(0)?;
                let cf = int(1)? as u32;
                let (perspective, tail) = if op == Op::Iterproj {
                    (Some(int(2)? as u32), 3)
                } else {
                    (None, 2)
                };
                let mode = int(tail)?;
                let sample = int(tail + 1)?;
                for lane in lanes(exec) {
                    let interpolation = match mode {
                        0 => Interpolation::Center,
                        1 => Interpolation::Sample(sample as u32),
                        2 => Interpolation::Centroid,
                        _ => Interpolation::Sample(self.read(
                            Reg {
                                half: sample as u16,
                                size: Size::S16,
                            },
                            lane,
                        ) as u32),
                    };
                    let values = env
                        .io
                        .interpolate(
                            lane,
                            cf,
                            usize::from(data.count),
                            interpolation,
                            perspective,
                        )
                        .map_err(|error| ExecError::Io { pc, error })?;
                    for (i, v) in values.iter().enumerate().take(usize::from(data.count)) {
                        self.write_float(data.reg(i as u16), lane, *v);
                    }
                }
            }
            Op::Ldcf => {
                let data = run(0)?;
                let cf = int(1)? as u32;
                let channels = usize::from(data.count / 3);
                for lane in lanes(exec) {
                    let planes = env
                        .io
                        .coefficients(lane, cf, channels)
                        .map_err(|error| ExecError::Io { pc, error })?;
                    for (i, v) in planes
                        .iter()
                        .flatten()
                        .enumerate()
                        .take(usize::from(data.count))
                    {
                        self.write_float(data.reg(i as u16), lane, *v);
                    }
                }
            }
            Op::StVar | Op::StVarFinal => {
                let data = run(1)?;
                let slot = value(2)?;
                for lane in lanes(exec) {
                    let slot = self.lane_value(&slot, lane, env.uniforms) as u32;
                    let v = self.read(data.first, lane) as u32;
                    env.io
                        .store_varying(lane, slot, v)
                        .map_err(|error| ExecError::Io { pc, error })?;
                }
            }
            Op::SampleMask => {
                let (which, coverage) = (value(0)?, value(1)?);
                for lane in lanes(exec) {
                    let w = self.lane_value(&which, lane, env.uniforms) as u32;
                    let c = self.lane_value(&coverage, lane, env.uniforms) as u32;
                    env.io
                        .sample_mask(lane, w, c)
                        .map_err(|error| ExecError::Io { pc, error })?;
                }
            }
            Op::ZsEmit => {
                let which = value(0)?;
                let zs = int(1)?;
                let data = run(2)?;
                for lane in lanes(exec) {
                    let w = self.lane_value(&which, lane, env.uniforms) as u32;
                    let depth = (zs & 1 != 0).then(|| {
                        let lo = self.read(data.reg(0), lane);
                        let hi = self.read(data.reg(1), lane);
                        f32::from_bits((lo | hi << 16) as u32)
                    });
                    let stencil = (zs & 2 != 0)
                        .then(|| self.read(data.reg(if zs & 1 != 0 { 2 } else { 0 }), lane) as u16);
                    env.io
                        .depth_stencil(lane, w, depth, stencil)
                        .map_err(|error| ExecError::Io { pc, error })?;
                }
            }
        }
        Ok(Flow::Next)
    }

    fn special_register(&self, sr: u32, lane: usize, exec: u32, pc: u64) -> Result<u32, ExecError> {
        let below = (1u32 << lane) - 1;
        Ok(match sr {
            52 => lane as u32,
            56 => (exec & below & !((1 << (lane & !3)) - 1)).count_ones(),
            58 => (exec & below).count_ones(),
            63 => 1,
            _ => match self.special.get(sr) {
                Some(values) => values[lane],
                None => return Err(ExecError::SpecialRegister { pc, sr }),
            },
        })
    }

    /// The lanes of `lanes` where `a cc b` holds (integer or float
    /// compare-select conditions: 0 eq, 1 lt, 2 gt, ...).
    #[allow(clippy::too_many_arguments)]
    fn condition_mask(
        &self,
        float: bool,
        cc: u32,
        a: &Src,
        b: &Src,
        lanes_mask: u32,
        uniforms: &[u32; UNIFORMS],
        pc: u64,
    ) -> Result<u32, ExecError> {
        let mut holds = 0u32;
        if float {
            let xs = self.gather_f32(a, uniforms);
            let ys = self.gather_f32(b, uniforms);
            for lane in lanes(lanes_mask) {
                if float_compare(cc, xs[lane], ys[lane], pc)? {
                    holds |= 1 << lane;
                }
            }
            return Ok(holds);
        }
        let (xs, xw) = self.gather_raw(&a.value, uniforms);
        let (ys, yw) = self.gather_raw(&b.value, uniforms);
        for lane in lanes(lanes_mask) {
            let (xu, yu) = (truncate(xs[lane], xw), truncate(ys[lane], yw));
            let (xi, yi) = (sign_extend(xu, xw), sign_extend(yu, yw));
            let result = match cc {
                0 => xu == yu,
                1 => xu < yu,
                2 => xu > yu,
                4 => xi == yi,
                5 => xi < yi,
                6 => xi > yi,
                _ => return Err(unsupported(pc, format!("integer condition {cc}"))),
            };
            if result {
                holds |= 1 << lane;
            }
        }
        Ok(holds)
    }

    #[allow(clippy::too_many_arguments)]
    fn convert(
        &mut self,
        mode: i64,
        d: Reg,
        s: &Src,
        round: i64,
        exec: u32,
        env: &mut Env<'_>,
        pc: u64,
    ) -> Result<(), ExecError> {
        let to_zero = match round {
            0 => true,
            1 => false,
            r => return Err(unsupported(pc, format!("convert rounding mode {r}"))),
        };
        for lane in lanes(exec) {
            let (bits, width) = self.raw_src(s, lane, env.uniforms);
            let int_value = match mode {
                0 => Some(i64::from(bits as u8)),
                1 => Some(i64::from(bits as u8 as i8)),
                6 => Some(i64::from(bits as u16)),
                7 => Some(i64::from(bits as u16 as i16)),
                10 => Some(i64::from(bits as u32)),
                11 => Some(i64::from(bits as u32 as i32)),
                _ => None,
            };
            let result = if let Some(v) = int_value {
                if d.size == Size::S16 {
                    u64::from(int_to_half(v, to_zero))
                } else {
                    u64::from(int_to_f32(v, to_zero).to_bits())
                }
            } else {
                let (min, max) = match mode {
                    4 => (0, i64::from(u16::MAX)),
                    5 => (i64::from(i16::MIN), i64::from(i16::MAX)),
                    8 => (0, i64::from(u32::MAX)),
                    9 => (i64::from(i32::MIN), i64::from(i32::MAX)),
                    m => return Err(unsupported(pc, format!("convert mode {m}"))),
                };
                let f = if width == 16 {
                    f64::from(half_to_f32(bits))
                } else {
                    f64::from(ftz(f32::from_bits(bits as u32)))
                };
                float_to_int(f, to_zero, min, max) as u64
            };
            self.write(d, lane, result);
        }
        Ok(())
    }

    fn device_memory(
        &mut self,
        ins: &agx_hw::isa::Instr,
        exec: u32,
        env: &mut Env<'_>,
        pc: u64,
    ) -> Result<(), ExecError> {
        let ops = &ins.operands;
        let (
            Some(format),
            Some(mask),
            Some(Operand::Regs(data)),
            Some(Operand::Value(base)),
            Some(Operand::Value(offset)),
            Some(signedness),
            Some(shift),
        ) = (
            ins.int(1),
            ins.int(2),
            ops.get(3),
            ops.get(4),
            ops.get(5),
            ins.int(6),
            ins.int(7),
        )
        else {
            return Err(unsupported(pc, "malformed memory instruction"));
        };
        let format = ElementFormat::from_code(format)
            .ok_or_else(|| unsupported(pc, format!("memory format {format}")))?;
        let half = data.first.size == Size::S16;
        if half && format == ElementFormat::I32 {
            return Err(unsupported(pc, "i32 elements in 16-bit registers"));
        }
        let store = ins.op == Op::DeviceStore;
        for lane in lanes(exec) {
            let base_address = self.lane_value(base, lane, env.uniforms);
            let index = match offset {
                Value::Imm(imm) => *imm,
                Value::Reg(reg, _) if signedness == 0 => sign_extend(self.read(*reg, lane), 32),
                other => self.lane_value(other, lane, env.uniforms) as i64,
            };
            let address =
                base_address.wrapping_add((index << (format.shift() + shift as u32)) as u64);
            let mut packed = [0u8; 4];
            if format.packed() {
                env.memory
                    .read(address & !3, &mut packed, AccessKind::Read)
                    .map_err(|fault| ExecError::Memory { pc, fault })?;
            }
            for (register, component) in (0..4).filter(|c| mask & (1 << c) != 0).enumerate() {
                let reg = data.reg(register as u16);
                let size = 1usize << format.shift();
                let element = if format.packed() {
                    address & !3
                } else {
                    // Unaligned addresses round down to the element size.
                    (address & !(size as u64 - 1)).wrapping_add((component * size) as u64)
                };
                if store {
                    let value = self.read(reg, lane) as u32;
                    let mut bytes = if format.packed() { packed } else { [0u8; 4] };
                    if !formats::store(format, &mut bytes, component, value, half) {
                        return Err(unsupported(pc, format!("stores of {format:?}")));
                    }
                    if format.packed() {
                        packed = bytes;
                    } else {
                        env.memory
                            .write(element, &bytes[..size])
                            .map_err(|fault| ExecError::Memory { pc, fault })?;
                    }
                } else {
                    let mut bytes = packed;
                    if !format.packed() {
                        env.memory
                            .read(element, &mut bytes[..size], AccessKind::Read)
                            .map_err(|fault| ExecError::Memory { pc, fault })?;
                    }
                    self.write(
                        reg,
                        lane,
                        u64::from(formats::load(format, &bytes, component, half)),
                    );
                }
            }
            if store && format.packed() {
                env.memory
                    .write(address & !3, &packed)
                    .map_err(|fault| ExecError::Memory { pc, fault })?;
            }
        }
        Ok(())
    }

    fn uniform_store(
        &mut self,
        ins: &agx_hw::isa::Instr,
        exec: u32,
        env: &mut Env<'_>,
        pc: u64,
    ) -> Result<(), ExecError> {
        let (Some(mask), Some(Operand::Regs(data)), Some(Operand::Value(offset)), Some(shift)) = (
            ins.int(2),
            ins.operands.get(4),
            ins.operands.get(5),
            ins.int(6),
        ) else {
            return Err(unsupported(pc, "malformed uniform_store"));
        };
        if shift != 0 || data.first.size != Size::S16 {
            return Err(unsupported(pc, "uniform_store other than the 16-bit form"));
        }
        let Some(lane) = lanes(exec).next() else {
            return Ok(());
        };
        let first_half = self.lane_value(offset, lane, env.uniforms) as i64;
        for (i, component) in (0..4).filter(|c| mask & (1 << c) != 0).enumerate() {
            let half = first_half + component;
            if !(0..(UNIFORMS as i64 * 2)).contains(&half) {
                return Err(ExecError::UniformBounds { pc, half });
            }
            let value = self.read(data.reg(i as u16), lane) as u32;
            let slot = &mut env.uniforms[(half / 2) as usize];
            let shift = 16 * (half % 2) as u32;
            *slot = (*slot & !(0xFFFF << shift)) | ((value & 0xFFFF) << shift);
        }
        Ok(())
    }

    fn threadgroup_memory(
        &mut self,
        ins: &agx_hw::isa::Instr,
        exec: u32,
        env: &mut Env<'_>,
        pc: u64,
    ) -> Result<(), ExecError> {
        let ops = &ins.operands;
        let (
            Some(format),
            Some(mask),
            Some(Operand::Regs(data)),
            Some(Operand::Value(base)),
            Some(Operand::Value(index)),
        ) = (ins.int(0), ins.int(1), ops.get(2), ops.get(3), ops.get(4))
        else {
            return Err(unsupported(pc, "malformed threadgroup access"));
        };
        let format = ElementFormat::from_code(format)
            .ok_or_else(|| unsupported(pc, format!("memory format {format}")))?;
        if format.packed() {
            return Err(unsupported(pc, "packed formats in threadgroup memory"));
        }
        let half = data.first.size == Size::S16;
        if half && format == ElementFormat::I32 {
            return Err(unsupported(pc, "i32 elements in 16-bit registers"));
        }
        let size = 1usize << format.shift();
        let store = ins.op == Op::ThreadgroupStore;
        for lane in lanes(exec) {
            let base_bytes = match base {
                Value::Imm(_) => 0,
                other => self.lane_value(other, lane, env.uniforms) as i64,
            };
            let index = match index {
                Value::Imm(imm) => *imm,
                other => self.lane_value(other, lane, env.uniforms) as i64,
            };
            for (register, component) in (0..4i64).filter(|c| mask & (1 << c) != 0).enumerate() {
                let start = base_bytes + (index + component) * size as i64;
                let end = start + size as i64;
                if start < 0 || end > env.threadgroup.len() as i64 {
                    return Err(ExecError::ThreadgroupBounds {
                        pc,
                        offset_bytes: start,
                        size_bytes: env.threadgroup.len(),
                    });
                }
                let bytes = &mut env.threadgroup[start as usize..end as usize];
                let reg = data.reg(register as u16);
                if store {
                    let mut buf = [0u8; 4];
                    formats::store(
                        format,
                        &mut buf,
                        component as usize,
                        self.read(reg, lane) as u32,
                        half,
                    );
                    bytes.copy_from_slice(&buf[..size]);
                } else {
                    let mut buf = [0u8; 4];
                    buf[..size].copy_from_slice(bytes);
                    self.write(
                        reg,
                        lane,
                        u64::from(formats::load(format, &buf, component as usize, half)),
                    );
                }
            }
        }
        Ok(())
    }

    fn texture_handle(
        &self,
        handle: &Value,
        base: &Value,
        lane: usize,
        uniforms: &[u32; UNIFORMS],
    ) -> TextureHandle {
        match handle {
            Value::Imm(index) => TextureHandle::Index(*index as u32),
            Value::Reg(reg, _) if reg.size == Size::S32 => TextureHandle::Bindless {
                base: self.lane_value(base, lane, uniforms),
                offset: self.read(*reg, lane) as u32,
            },
            other => TextureHandle::Index(self.lane_value(other, lane, uniforms) as u32),
        }
    }

    fn texture(
        &mut self,
        ins: &agx_hw::isa::Instr,
        exec: u32,
        env: &mut Env<'_>,
        pc: u64,
    ) -> Result<(), ExecError> {
        let ops = &ins.operands;
        let int = |i: usize| ins.int(i).unwrap_or(0);
        let (
            Some(Operand::Regs(data)),
            Some(Operand::Value(base)),
            Some(Operand::Value(handle)),
            Some(Operand::Value(sampler)),
            Some(Operand::Regs(coords)),
            Some(lod_operand),
            Some(Operand::Regs(extra)),
        ) = (
            ops.get(6),
            ops.get(7),
            ops.get(8),
            ops.get(9),
            ops.get(11),
            ops.get(13),
            ops.get(15),
        )
        else {
            return Err(unsupported(pc, "malformed texture instruction"));
        };
        let shadow = int(0) != 0;
        if int(3) != 0 {
            return Err(unsupported(pc, "texture gathers"));
        }
        if int(14) != 0 {
            return Err(unsupported(pc, "texel offsets"));
        }
        if int(5) & 2 != 0 {
            return Err(unsupported(pc, "sparse texture residency"));
        }
        let mask = int(4) as u8;
        let dim = int(10) as u32;
        let lod_mode = int(12);
        let load = ins.op == Op::TextureLoad;
        // Coordinates of every present lane, for quad derivatives.
        let mut all_coords = [[0u32; 4]; LANES];
        for lane in lanes(self.present) {
            all_coords[lane] = self.read_run(coords, lane);
        }
        let derivative = |lane: usize, neighbour: usize| -> [f32; 3] {
            let (hi, lo) = (all_coords[lane | neighbour], all_coords[lane & !neighbour]);
            [0, 1, 2].map(|k| f32::from_bits(hi[k]) - f32::from_bits(lo[k]))
        };
        for lane in lanes(exec) {
            let scalar = |s: &SimdGroup| -> f32 {
                match lod_operand {
                    Operand::Value(v) => {
                        let bits = s.lane_value(v, lane, env.uniforms);
                        if load {
                            bits as u16 as f32
                        } else {
                            half_to_f32(bits)
                        }
                    }
                    _ => 0.0,
                }
            };
            let lod = match lod_mode {
                0 if load => LodArgument::Explicit(0.0),
                0 | 1 | 5 => LodArgument::Auto {
                    ddx: derivative(lane, 1),
                    ddy: derivative(lane, 2),
                    bias: if lod_mode == 0 { 0.0 } else { scalar(self) },
                },
                2 | 6 => LodArgument::Explicit(scalar(self)),
                4 | 12 => {
                    let Operand::Regs(grads) = lod_operand else {
                        return Err(unsupported(pc, "malformed gradients"));
                    };
                    let axes = usize::from(grads.count / 2);
                    let mut ddx = [0f32; 3];
                    let mut ddy = [0f32; 3];
                    for k in 0..axes.min(3) {
                        ddx[k] = f32::from_bits(self.read(grads.reg(k as u16), lane) as u32);
                        ddy[k] =
                            f32::from_bits(self.read(grads.reg((axes + k) as u16), lane) as u32);
                    }
                    LodArgument::Gradient { ddx, ddy }
                }
                m => return Err(unsupported(pc, format!("LOD mode {m}"))),
            };
            let request = TextureRequest {
                load,
                texture: self.texture_handle(handle, base, lane, env.uniforms),
                sampler: self.lane_value(sampler, lane, env.uniforms) as u32,
                dim,
                coords: all_coords[lane],
                lod,
                compare: shadow.then(|| f32::from_bits(self.read(extra.first, lane) as u32)),
                mask,
                half: data.first.size == Size::S16,
            };
            let texel = env
                .io
                .texture(lane, &request)
                .map_err(|error| ExecError::Io { pc, error })?;
            let values: Vec<u32> = (0..4)
                .filter(|c| mask & (1 << c) != 0)
                .map(|c| texel[c])
                .collect();
            self.write_run(data, lane, &values);
        }
        Ok(())
    }
}

fn float_compare(cc: u32, x: f32, y: f32, pc: u64) -> Result<bool, ExecError> {
    Ok(match cc {
        0 => x == y,
        1 => x < y,
        2 => x > y,
        3 => !x.is_nan() && (y.is_nan() || x < y),
        5 => x >= y,
        6 => x <= y,
        7 => !x.is_nan() && (y.is_nan() || x > y),
        _ => return Err(unsupported(pc, format!("float condition {cc}"))),
    })
}

/// Marks match arms the operand checks above make impossible; they fall
/// back to a harmless value rather than panicking.
fn unreachable_flow<T: Default>() -> T {
    T::default()
}
