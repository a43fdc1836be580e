//! Translating a block of ALU, conversion, exec-mask and memory
//! instructions to Cranelift IR.
//!
//! The function runs each run of ALU instructions once per quad (four
//! neighbouring lanes, on host vectors: see `quad`) with a lane in the
//! execution mask: each register the run reads is loaded once, kept in
//! an SSA value while it computes, and each register it writes is stored
//! once at the end, its lanes outside the mask kept. (A run with nothing
//! to compute as vectors runs lane by lane.) An exec-mask instruction is
//! a pass over the present lanes' quads that updates their nesting counts
//! and gives the next mask; a load or store is a pass that finds every
//! lane's elements through the page cache (a load's values read into a
//! stack buffer, a store's bytes and host addresses gathered; the block
//! stops, with nothing written, at the first element the cache cannot
//! reach; a load whose address is the same for every lane reads once)
//! and a pass that writes them; a block ending with a jump back to its
//! start loops. Every operation reproduces the interpreter's
//! arithmetic exactly: the integer ALU in 64-bit wrapping arithmetic (the
//! interpreter's 128-bit results are truncated to at most 64 bits when
//! written, so only saturation needs the exact value, and a saturating
//! operation is translated only where its operands are at most 32 bits
//! wide); the fp32 ALU with its input flush, the flush before rounding,
//! `.sat` and the canonical result (denormals flushed, the default NaN).

use agx_hw::isa::{Op, Operand, Reg, Size, Src, Value};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, AbiParam, InstBuilder, MemFlagsData, Signature, StackSlotData, StackSlotKind, Type,
    Value as IrValue,
};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::JITModule;
use cranelift_module::Module;

use crate::{CompileError, Helpers, GPRS, LANES, UNIFORMS};

mod quad;

/// The smallest normal fp32 value's bits.
const MIN_NORMAL_F32: f32 = f32::MIN_POSITIVE;
/// The default NaN the fp32 ALU writes.
const DEFAULT_NAN_F32: i64 = 0x7FC0_0000;

/// Whether the compiled engine translates `instr` (with `.sat` as
/// `saturate`): the integer ALU (moves, adds, multiply-adds, bitwise and
/// bitfield operations, funnel shifts, bit counts), compare-and-select,
/// the fp32 and fp16 add, multiply and fused multiply-add, the
/// single-source fp32 functions ([`UNARY_FLOAT_OPS`]), integer/float
/// conversions, `wait` and `memory_barrier`, device and stack loads and
/// stores of whole elements (`i8`, `i16`, `i32`, `f16`), and the exec-mask
/// instructions (`if`/`else`/`while`, `pop_exec`), with operands of the
/// kinds it reads. A jump on the mask back to a block's start ends the
/// block as a loop (the program cache decides; the translation takes it
/// last).
/// Anything else (other jumps, atomics and other memory, other lanes,
/// other units, and the forms below) the interpreter runs.
pub fn supports(instr: &agx_hw::isa::Instr, saturate: bool) -> bool {
    shape(instr, saturate).is_some()
}

/// What a supported instruction does, with its operands.
enum Shape<'i> {
    /// `mov_imm`: the immediate, truncated to the destination.
    MovImm { dst: Reg, imm: i64 },
    /// `iadd`/`isub`/`imadd`/`imsub`.
    IntAdd {
        dst: Reg,
        a: Src,
        b: Src,
        c: Option<Src>,
        shift: u32,
        subtract: bool,
        /// Saturate to the destination's range (signed or not).
        saturate: Option<bool>,
    },
    /// The bitwise operations by truth table (bit 3: A and B, bit 2: not A
    /// and B, bit 1: A and not B, bit 0: neither).
    Bitwise {
        dst: Reg,
        a: &'i Value,
        b: Option<&'i Value>,
        table: u32,
    },
    /// `icmpsel`/`fcmpsel`: `x` where `a cc b` holds, else `y`.
    CompareSelect {
        float: bool,
        cc: u32,
        dst: Reg,
        a: Src,
        b: Src,
        x: &'i Value,
        y: &'i Value,
    },
    /// The bitfield operations and funnel shifts, in 128-bit arithmetic
    /// as the interpreter computes them.
    Bitfield {
        op: Op,
        dst: Reg,
        a: &'i Value,
        b: &'i Value,
        shift: Option<&'i Value>,
        mask: u128,
    },
    /// `bitrev`, `popcount`, `ffs`, `intl` on the low 32 bits.
    Bits {
        op: Op,
        dst: Reg,
        a: &'i Value,
        b: Option<&'i Value>,
    },
    /// `if`/`else`/`while` (`_icmp` and `_fcmp`): each present lane's
    /// `r0l` nesting count updated from the condition, the execution mask
    /// set from the counts.
    ExecUpdate {
        op: Op,
        float: bool,
        /// The condition (the low three bits of the code).
        cc: u32,
        /// The code's bit 3: the condition inverted.
        invert: bool,
        a: Src,
        b: Src,
        n: u64,
    },
    /// `pop_exec`: each present lane's `r0l` lowered by `n` (not below 0),
    /// the execution mask set from the counts.
    PopExec { n: u64 },
    /// `wait` and `memory_barrier`: nothing a lane's registers see.
    Nop,
    /// `convert`: integer to float or float to integer, in the mode's
    /// widths, rounding to zero or to nearest even.
    Convert {
        mode: u32,
        dst: Reg,
        src: &'i Value,
        to_zero: bool,
    },
    /// `device_load`/`device_store` and `stack_load`/`stack_store` of
    /// whole elements (`i8`, `i16`, `i32`, `f16`): each named component
    /// of each lane reached through the page cache, then written (to the
    /// registers or to memory).
    Memory {
        place: Place<'i>,
        store: bool,
        /// log2 of the element's bytes.
        size_log2: u32,
        /// fp16 elements widened to fp32 (a load into 32-bit registers).
        widen: bool,
        /// The components named, in order.
        components: Vec<u32>,
        /// The registers read or written for them, in the same order.
        data: Vec<Reg>,
    },
    /// `fadd16`/`fmul16`/`fmadd16` (16-bit sources and destination):
    /// each lane through the reference's own function, which rounds the
    /// exact result once.
    Half {
        /// 0 add, 1 multiply, 2 fused multiply-add.
        op: u32,
        dst: Reg,
        a: Src,
        b: Src,
        c: Option<Src>,
        saturate: bool,
    },
    /// `fadd32`/`fmul32`/`fmadd32`.
    Float {
        op: Op,
        dst: Reg,
        a: Src,
        b: Src,
        c: Option<Src>,
        saturate: bool,
    },
    /// The unary fp32 operations ([`UNARY_FLOAT_OPS`], `op` its index):
    /// each lane through the reference's own function, then written as
    /// the ALU writes.
    Unary {
        op: u32,
        dst: Reg,
        a: Src,
        saturate: bool,
    },
}

/// The unary fp32 operations the compiled engine runs through the
/// reference's function ([`Helpers::unary_f32`](crate::Helpers), which
/// takes the operation's index here).
pub const UNARY_FLOAT_OPS: [Op; 11] = [
    Op::Floor,
    Op::Ceil,
    Op::Trunc,
    Op::Rint,
    Op::Rcp,
    Op::Rsqrt,
    Op::Log2,
    Op::Exp2,
    Op::RsqrtSpecial,
    Op::SinPt1,
    Op::SinPt2,
];

/// Where a memory instruction's elements are.
enum Place<'i> {
    /// Device memory: `base + (index << shift)`, the index
    /// sign-extended from 32 bits where `signed_index`.
    Device {
        base: &'i Value,
        offset: &'i Value,
        signed_index: bool,
        shift: u32,
    },
    /// The SIMD-group's stack: each lane's bytes at the stack pointer plus
    /// the offset (an immediate, or a register sign-extended from 32
    /// bits).
    Stack { offset: &'i Value },
}

/// The element formats compiled memory instructions take (codes of the
/// ISA table: 0 `i8`, 1 `i16`, 2 `i32`, 3 `f16`), into or from
/// registers of 16 bits (`half`) or 32: log2 of the element's bytes, and
/// whether it widens from fp16 to fp32. `i32` into 16-bit registers is
/// refused by the interpreter; an fp32 register stored as `f16` is
/// rounded by the interpreter (not compiled).
fn element_format(format: i64, half: bool, store: bool) -> Option<(u32, bool)> {
    match (format, half) {
        (0, _) => Some((0, false)),
        (1, _) => Some((1, false)),
        (2, false) => Some((2, false)),
        (3, true) => Some((1, false)),
        (3, false) if !store => Some((1, true)),
        _ => None,
    }
}

/// A memory instruction's shape from its parts.
fn memory_shape<'i>(
    place: Place<'i>,
    store: bool,
    format: i64,
    mask: i64,
    run: &agx_hw::isa::RegRun,
) -> Option<Shape<'i>> {
    let half = run.first.size == Size::S16;
    if run.first.size == Size::S64 || !run.is_valid() {
        return None;
    }
    let (size_log2, widen) = element_format(format, half, store)?;
    let components: Vec<u32> = (0..4).filter(|c| mask & (1 << c) != 0).collect();
    let data: Vec<Reg> = (0..components.len() as u16).map(|i| run.reg(i)).collect();
    if components.is_empty() || !data.iter().all(|&r| reg_ok(r)) {
        return None;
    }
    if let Place::Device { shift, .. } = place {
        if shift >= 64 {
            return None;
        }
    }
    Some(Shape::Memory {
        place,
        store,
        size_log2,
        widen,
        components,
        data,
    })
}

fn dst(instr: &agx_hw::isa::Instr, i: usize) -> Option<Reg> {
    match instr.operands.get(i) {
        Some(Operand::Dst(d)) => Some(d.reg),
        _ => None,
    }
}

fn src(instr: &agx_hw::isa::Instr, i: usize) -> Option<Src> {
    match instr.operands.get(i) {
        Some(Operand::Src(s)) => Some(*s),
        _ => None,
    }
}

/// Whether a register lies inside the file (a pair's second register
/// too).
fn reg_ok(reg: Reg) -> bool {
    let cell = usize::from(reg.half / 2);
    match reg.size {
        Size::S64 => cell + 1 < GPRS,
        _ => cell < GPRS,
    }
}

/// Whether a value is one the translation reads: a register or uniform
/// inside its file, or an immediate.
fn value_ok(value: &Value) -> bool {
    match value {
        Value::Reg(reg, _) => reg_ok(*reg),
        Value::Uniform(u) => usize::from(u.half / 2) < UNIFORMS,
        Value::Imm(_) | Value::Float(_) => true,
        Value::Pair(..) | Value::Undefined { .. } => false,
    }
}

/// The width in bits of a value as the interpreter reads it.
fn width_of(value: &Value) -> u32 {
    let size_bits = |size: Size| match size {
        Size::S16 => 16,
        Size::S32 => 32,
        Size::S64 => 64,
    };
    match value {
        Value::Reg(reg, _) => size_bits(reg.size),
        Value::Uniform(u) => size_bits(u.size),
        Value::Imm(_) => 64,
        _ => 32,
    }
}

fn shape(instr: &agx_hw::isa::Instr, saturate: bool) -> Option<Shape<'_>> {
    let shape = match instr.op {
        Op::MovImm16 | Op::MovImm32 => {
            if instr.op == Op::MovImm32 && instr.int(2)? != 0 {
                return None;
            }
            Shape::MovImm {
                dst: dst(instr, 0)?,
                imm: instr.int(1)?,
            }
        }
        Op::Iadd | Op::Isub | Op::Imadd | Op::Imsub => {
            let d = dst(instr, 0)?;
            let multiply = matches!(instr.op, Op::Imadd | Op::Imsub);
            let (mut a, mut b) = (src(instr, 1)?, src(instr, 2)?);
            let c = if multiply { Some(src(instr, 3)?) } else { None };
            let shift = u32::try_from(instr.int(if multiply { 4 } else { 3 })?).ok()?;
            if multiply {
                (a, b) = (a.as_multiplicand(), b.as_multiplicand());
            }
            let wide = |s: &Src| matches!(s.value, Value::Reg(r, _) if r.size == Size::S64);
            let narrow = !wide(&a) && !wide(&b) && !c.as_ref().is_some_and(wide);
            let width = width_of(&Value::Reg(d, Default::default()));
            let saturates = saturate && shift == 0 && width <= 32 && narrow;
            let signed = a.sx || b.sx || c.is_some_and(|c| c.sx);
            if saturates {
                // Exact in 64 bits only for sums of operands of at most
                // 32 bits (the interpreter computes in 128).
                let small = |s: &Src| match s.value {
                    Value::Imm(imm) => (0..=i64::from(u32::MAX)).contains(&imm),
                    ref v => width_of(v) <= 32,
                };
                if multiply || !small(&a) || !small(&b) {
                    return None;
                }
            }
            Shape::IntAdd {
                dst: d,
                a,
                b,
                c,
                shift,
                subtract: matches!(instr.op, Op::Isub | Op::Imsub),
                saturate: saturates.then_some(signed),
            }
        }
        Op::Mov
        | Op::Not
        | Op::And
        | Op::Or
        | Op::Xor
        | Op::Nand
        | Op::Nor
        | Op::Xnor
        | Op::Bitop => {
            let (table, first) = instr.bitwise_table()?;
            let value = |i: usize| match instr.operands.get(i) {
                Some(Operand::Src(s)) => Some(&s.value),
                _ => None,
            };
            let a = value(first + 1)?;
            let b = if matches!(instr.op, Op::Mov | Op::Not) {
                None
            } else {
                Some(value(first + 2)?)
            };
            Shape::Bitwise {
                dst: dst(instr, first)?,
                a,
                b,
                table,
            }
        }
        Op::Icmpsel | Op::Fcmpsel => {
            let float = instr.op == Op::Fcmpsel;
            let cc = u32::try_from(instr.int(0)?).ok()?;
            let known = if float {
                matches!(cc, 0 | 1 | 2 | 3 | 5 | 6 | 7)
            } else {
                matches!(cc, 0 | 1 | 2 | 4 | 5 | 6)
            };
            let (a, b) = (src(instr, 2)?, src(instr, 3)?);
            if !known {
                return None;
            }
            let value = |i: usize| match instr.operands.get(i) {
                Some(Operand::Src(s)) => Some(&s.value),
                _ => None,
            };
            Shape::CompareSelect {
                float,
                cc,
                dst: dst(instr, 1)?,
                a,
                b,
                x: value(4)?,
                y: value(5)?,
            }
        }
        Op::Bfi | Op::Bfeil | Op::Extr | Op::Shlhi | Op::Shrhi | Op::Asr | Op::Asrh => {
            let value = |i: usize| match instr.operands.get(i) {
                Some(Operand::Src(s)) => Some(&s.value),
                _ => None,
            };
            let shifts = !matches!(instr.op, Op::Asr | Op::Asrh);
            let (shift, m) = if shifts {
                (Some(value(3)?), u32::try_from(instr.int(4)?).ok()?)
            } else {
                (None, 0)
            };
            if m >= 128 {
                return None;
            }
            Shape::Bitfield {
                op: instr.op,
                dst: dst(instr, 0)?,
                a: value(1)?,
                b: value(2)?,
                shift,
                mask: if m == 0 {
                    0xFFFF_FFFF
                } else {
                    (1u128 << m) - 1
                },
            }
        }
        Op::Bitrev | Op::Popcount | Op::Ffs | Op::Intl => {
            let value = |i: usize| match instr.operands.get(i) {
                Some(Operand::Src(s)) => Some(&s.value),
                _ => None,
            };
            Shape::Bits {
                op: instr.op,
                dst: dst(instr, 0)?,
                a: value(1)?,
                b: if instr.op == Op::Intl {
                    Some(value(2)?)
                } else {
                    None
                },
            }
        }
        Op::IfIcmp | Op::ElseIcmp | Op::WhileIcmp | Op::IfFcmp | Op::ElseFcmp | Op::WhileFcmp => {
            let float = matches!(instr.op, Op::IfFcmp | Op::ElseFcmp | Op::WhileFcmp);
            let code = u32::try_from(instr.int(1)?).ok()?;
            let cc = code & 7;
            // The conditions the interpreter defines (others stop the
            // program there, which the interpreter reports).
            let known = if float {
                matches!(cc, 0 | 1 | 2 | 3 | 5 | 6 | 7)
            } else {
                matches!(cc, 0 | 1 | 2 | 4 | 5 | 6)
            };
            if !known {
                return None;
            }
            Shape::ExecUpdate {
                op: instr.op,
                float,
                cc,
                invert: code & 8 != 0,
                a: src(instr, 2)?,
                b: src(instr, 3)?,
                n: u64::try_from(instr.int(4)?).ok()?,
            }
        }
        Op::PopExec => Shape::PopExec {
            n: u64::try_from(instr.int(1)?).ok()?,
        },
        Op::Wait | Op::MemoryBarrier => Shape::Nop,
        Op::DeviceLoad | Op::DeviceStore => {
            let ops = &instr.operands;
            let (
                Some(format),
                Some(mask),
                Some(Operand::Regs(run)),
                Some(Operand::Value(base)),
                Some(Operand::Value(offset)),
                Some(signedness),
                Some(shift),
            ) = (
                instr.int(1),
                instr.int(2),
                ops.get(3),
                ops.get(4),
                ops.get(5),
                instr.int(6),
                instr.int(7),
            )
            else {
                return None;
            };
            let shift = u32::try_from(shift).ok()?;
            let (size_log2, _) = element_format(format, run.first.size == Size::S16, false)?;
            memory_shape(
                Place::Device {
                    base,
                    offset,
                    signed_index: signedness == 0 && matches!(offset, Value::Reg(..)),
                    shift: size_log2 + shift,
                },
                instr.op == Op::DeviceStore,
                format,
                mask,
                run,
            )?
        }
        Op::StackLoad | Op::StackStore => {
            let store = instr.op == Op::StackStore;
            // A load prints its registers first, a store after the
            // fields; the offset is operand 6 for both.
            let (regs_at, fields_at) = if store { (5, 0) } else { (0, 1) };
            let (Some(Operand::Regs(run)), Some(format), Some(1), Some(0), Some(mask), Some(4)) = (
                instr.operands.get(regs_at),
                instr.int(fields_at),
                instr.int(fields_at + 1),
                instr.int(fields_at + 2),
                instr.int(fields_at + 3),
                instr.int(fields_at + 4),
            ) else {
                return None;
            };
            let offset = match instr.operands.get(6) {
                Some(Operand::Value(v @ (Value::Imm(_) | Value::Reg(..)))) => v,
                _ => return None,
            };
            memory_shape(Place::Stack { offset }, store, format, mask, run)?
        }
        Op::Convert => {
            let mode = u32::try_from(instr.int(0)?).ok()?;
            // The modes and rounding the interpreter defines (others stop
            // the program there, which the interpreter reports).
            if !agx_hw::isa::table::CONVERT_MODES
                .iter()
                .any(|&(known, _)| known == mode)
            {
                return None;
            }
            let to_zero = match instr.int(3)? {
                0 => true,
                1 => false,
                _ => return None,
            };
            let src = match instr.operands.get(2) {
                Some(Operand::Src(s)) => &s.value,
                _ => return None,
            };
            Shape::Convert {
                mode,
                dst: dst(instr, 1)?,
                src,
                to_zero,
            }
        }
        Op::Fadd16 | Op::Fmul16 | Op::Fmadd16 => {
            let c = if instr.op == Op::Fmadd16 {
                Some(src(instr, 3)?)
            } else {
                None
            };
            Shape::Half {
                op: match instr.op {
                    Op::Fadd16 => 0,
                    Op::Fmul16 => 1,
                    _ => 2,
                },
                dst: dst(instr, 0)?,
                a: src(instr, 1)?,
                b: src(instr, 2)?,
                c,
                saturate,
            }
        }
        op if UNARY_FLOAT_OPS.contains(&op) => {
            let d = dst(instr, 0)?;
            if d.size == Size::S64 {
                return None;
            }
            Shape::Unary {
                op: UNARY_FLOAT_OPS.iter().position(|&o| o == op)? as u32,
                dst: d,
                a: src(instr, 1)?,
                saturate,
            }
        }
        Op::Fadd32 | Op::Fmul32 | Op::Fmadd32 => {
            let d = dst(instr, 0)?;
            let (a, b) = (src(instr, 1)?, src(instr, 2)?);
            let c = if instr.op == Op::Fmadd32 {
                Some(src(instr, 3)?)
            } else {
                None
            };
            if d.size == Size::S64 {
                return None;
            }
            Shape::Float {
                op: instr.op,
                dst: d,
                a,
                b,
                c,
                saturate,
            }
        }
        _ => return None,
    };
    let reads_ok = instr.operands.iter().all(|operand| match operand {
        Operand::Src(s) => value_ok(&s.value),
        Operand::Value(v) => value_ok(v),
        Operand::Dst(d) => reg_ok(d.reg),
        _ => true,
    });
    reads_ok.then_some(shape)
}

/// Builds the function for `block` in `context`.
pub(crate) fn block(
    module: &JITModule,
    context: &mut cranelift_codegen::Context,
    builder_context: &mut FunctionBuilderContext,
    helpers: &Helpers,
    block: &[(&agx_hw::isa::Instr, bool)],
) -> Result<(), CompileError> {
    // A block that ends with a jump on the execution mask back to its
    // start is a loop: the function runs it again while the jump is
    // taken, at most the number of times the caller's budget allows.
    let (block, loop_back) = match block.split_last() {
        Some(((last, _), body)) if matches!(last.op, Op::JmpExecAny | Op::JmpExecNone) => {
            (body, Some(last.op == Op::JmpExecAny))
        }
        _ => (block, None),
    };
    let shapes = block
        .iter()
        .map(|(instr, saturate)| {
            shape(instr, *saturate)
                .ok_or_else(|| CompileError::Unsupported(agx_hw::isa::text::print(instr, 0)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let pointer = module.target_config().pointer_type();
    if pointer != types::I64 {
        // (Addresses are computed in 64 bits and used as host pointers.)
        return Err(CompileError::Host(
            "a host whose pointers are not 64 bits".into(),
        ));
    }
    let call_conv = module.target_config().default_call_conv;
    let signature = &mut context.func.signature;
    signature.params.push(AbiParam::new(pointer));
    signature.params.push(AbiParam::new(pointer));
    signature.params.push(AbiParam::new(types::I32));
    signature.params.push(AbiParam::new(types::I32));
    signature.params.push(AbiParam::new(types::I64));
    signature.params.push(AbiParam::new(pointer));
    signature.returns.push(AbiParam::new(types::I64));

    let mut b = FunctionBuilder::new(&mut context.func, builder_context);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let params = b.block_params(entry).to_vec();
    let (regs, uniforms, exec_in, present, max_iterations, memory) = (
        params[0], params[1], params[2], params[3], params[4], params[5],
    );
    let signature_of = |params: &[Type], returns: &[Type]| {
        let mut signature = Signature::new(call_conv);
        signature
            .params
            .extend(params.iter().map(|&t| AbiParam::new(t)));
        signature
            .returns
            .extend(returns.iter().map(|&t| AbiParam::new(t)));
        signature
    };
    let parts = LaneParts {
        regs,
        uniforms,
        pointer,
        fma: (
            b.import_signature(signature_of(&[types::F32; 3], &[types::F32])),
            helpers.fma_f32 as usize as i64,
        ),
        widen: (
            b.import_signature(signature_of(&[types::I32], &[types::F32])),
            helpers.half_to_f32 as usize as i64,
        ),
        narrow: (
            b.import_signature(signature_of(&[types::F32], &[types::I32])),
            helpers.f32_to_half as usize as i64,
        ),
        convert: (
            b.import_signature(signature_of(
                &[types::I32, types::I64, types::I32, types::I32],
                &[types::I64],
            )),
            helpers.convert as usize as i64,
        ),
        half: (
            b.import_signature(signature_of(
                &[types::I32, types::F64, types::F64, types::F64, types::I32],
                &[types::I32],
            )),
            helpers.half_arithmetic as usize as i64,
        ),
        unary: (
            b.import_signature(signature_of(&[types::I32, types::F32], &[types::F32])),
            helpers.unary_f32 as usize as i64,
        ),
        vector_fma: {
            let flags = module.isa().isa_flags();
            let has = |name: &str| {
                flags
                    .iter()
                    .any(|flag| flag.name == name && flag.as_bool() == Some(true))
            };
            has("has_fma") && has("has_avx")
        },
    };
    let page_sync_signature = b.import_signature(signature_of(&[pointer], &[]));
    let page_miss_signature =
        b.import_signature(signature_of(&[pointer, types::I64, types::I32], &[pointer]));
    // The execution mask as the block goes, and the one an exec-mask
    // instruction is building.
    let exec = b.declare_var(types::I32);
    b.def_var(exec, exec_in);
    let new_exec = b.declare_var(types::I32);
    let lane = b.declare_var(types::I32);
    let iterations = b.declare_var(types::I64);
    let no_iterations = b.ins().iconst(types::I64, 0);
    b.def_var(iterations, no_iterations);
    // Where a load the compiled code cannot make stops the block: the
    // instruction's position as the parameter.
    let stop = b.create_block();
    b.append_block_param(stop, types::I32);
    // A load's values between its two passes (4 components x 32 lanes),
    // or a store's, with their host addresses, in order, and how many.
    let loaded = b.create_sized_stack_slot(StackSlotData::new(
        StackSlotKind::ExplicitSlot,
        (4 * LANES * 4) as u32,
        2,
    ));
    let targets = b.create_sized_stack_slot(StackSlotData::new(
        StackSlotKind::ExplicitSlot,
        (4 * LANES * 8) as u32,
        3,
    ));
    let elements = b.declare_var(types::I32);
    // The instructions the budget leaves after the whole runs: the last,
    // partial run stops before the first segment that would pass them.
    let tail = b.ins().load(
        types::I32,
        MemFlagsData::trusted(),
        memory,
        crate::memory::TAIL_OFFSET,
    );
    let tail = b.ins().uextend(types::I64, tail);
    // What the current run may take: everything, or the tail.
    let allowance = b.declare_var(types::I64);
    // top: one run of the block, if the budget allows another (or the
    // partial one it leaves).
    let top = b.create_block();
    let first = b.create_block();
    let partial = b.create_block();
    let out_of_budget = b.create_block();
    b.ins().jump(top, &[]);
    b.switch_to_block(top);
    let done = b.use_var(iterations);
    let spent = b
        .ins()
        .icmp(IntCC::UnsignedGreaterThanOrEqual, done, max_iterations);
    let whole = b.create_block();
    b.ins().brif(spent, partial, &[], whole, &[]);
    b.switch_to_block(whole);
    let everything = b.ins().iconst(types::I64, i64::MAX);
    b.def_var(allowance, everything);
    b.ins().jump(first, &[]);
    b.switch_to_block(partial);
    b.def_var(allowance, tail);
    b.ins().brif(tail, first, &[], out_of_budget, &[]);
    b.switch_to_block(first);

    // The block in segments: a run of ALU instructions, each lane of the
    // execution mask in turn; one exec-mask instruction, each present
    // lane in turn, after which the mask is the lanes whose count is 0;
    // or one load, in two passes over the mask (every element read, then
    // the registers written), so that a load left to the interpreter has
    // changed nothing.
    let mut position = 0;
    while position < shapes.len() {
        let rest = &shapes[position..];
        let kind = segment_kind(&rest[0]);
        let count = if kind == Segment::Alu {
            rest.iter()
                .take_while(|s| segment_kind(s) == Segment::Alu)
                .count()
        } else {
            1
        };
        let segment = &rest[..count];
        // A partial run stops before a segment that would pass its
        // allowance (the interpreter runs on to the budget's end).
        let may = b.use_var(allowance);
        let passes = b
            .ins()
            .icmp_imm_s(IntCC::SignedLessThan, may, (position + count) as i64);
        let within = b.create_block();
        let here = b.ins().iconst(types::I32, position as i64);
        b.ins().brif(passes, stop, &[here.into()], within, &[]);
        b.switch_to_block(within);
        match kind {
            // `wait`s and barriers alone: nothing for any lane to do.
            Segment::Alu if segment.iter().all(|shape| matches!(shape, Shape::Nop)) => {}
            Segment::Alu
                if segment.iter().any(|shape| {
                    !matches!(shape, Shape::Nop) && quad::vectorizable(shape, parts.vector_fma)
                }) =>
            {
                // Four lanes at a time, on host vectors.
                let mask = b.use_var(exec);
                b = quad::quad_loop(b, lane, mask, &parts, |code, _| {
                    for shape in segment {
                        code.quad_instruction(shape);
                    }
                });
            }
            Segment::Alu => {
                let mask = b.use_var(exec);
                b = lane_loop(b, lane, mask, &parts, |code| {
                    for shape in segment {
                        code.instruction(shape);
                    }
                });
            }
            Segment::ExecUpdate if quad::vectorizable(&segment[0], parts.vector_fma) => {
                let zero = b.ins().iconst(types::I32, 0);
                b.def_var(new_exec, zero);
                b = quad::quad_loop(b, lane, present, &parts, |code, bits| {
                    let is_zero = code.quad_exec_update(&segment[0]);
                    let zero_bits = code.b.ins().vhigh_bits(types::I32, is_zero);
                    let zero_bits = code.b.ins().band(zero_bits, bits);
                    let quad_now = code.b.use_var(lane);
                    let first_lane = code.b.ins().ishl_imm_u(quad_now, 2);
                    let zero_bits = code.b.ins().ishl(zero_bits, first_lane);
                    let so_far = code.b.use_var(new_exec);
                    let so_far = code.b.ins().bor(so_far, zero_bits);
                    code.b.def_var(new_exec, so_far);
                });
                let built = b.use_var(new_exec);
                b.def_var(exec, built);
            }
            Segment::ExecUpdate => {
                let zero = b.ins().iconst(types::I32, 0);
                b.def_var(new_exec, zero);
                b = lane_loop(b, lane, present, &parts, |code| {
                    code.instruction(&segment[0]);
                    if let Some(zero) = code.count_is_zero {
                        let bit = code.b.ins().uextend(types::I32, zero);
                        let lane_now = code.b.use_var(lane);
                        let bit = code.b.ins().ishl(bit, lane_now);
                        let so_far = code.b.use_var(new_exec);
                        let so_far = code.b.ins().bor(so_far, bit);
                        code.b.def_var(new_exec, so_far);
                    }
                });
                let built = b.use_var(new_exec);
                b.def_var(exec, built);
            }
            Segment::Memory => {
                let Shape::Memory {
                    place,
                    store,
                    size_log2,
                    widen,
                    components,
                    data,
                } = &segment[0]
                else {
                    unreachable!("a memory segment holds a memory instruction");
                };
                // Where the block stops if this instruction cannot be made.
                let at = b.ins().iconst(types::I32, position as i64);
                // The page cache is good for this generation only.
                let cache = b.ins().load(pointer, MemFlagsData::trusted(), memory, 0);
                let counter = b.ins().load(pointer, MemFlagsData::trusted(), memory, 8);
                let now = b
                    .ins()
                    .atomic_load(types::I64, MemFlagsData::trusted(), counter);
                let cached = b.ins().load(
                    types::I64,
                    MemFlagsData::trusted(),
                    cache,
                    crate::memory::GENERATION_OFFSET,
                );
                let moved = b.ins().icmp(IntCC::NotEqual, now, cached);
                let sync = b.create_block();
                let synced = b.create_block();
                b.ins().brif(moved, sync, &[], synced, &[]);
                b.switch_to_block(sync);
                let callee = b.ins().iconst(
                    pointer,
                    crate::memory::page_sync as *const () as usize as i64,
                );
                b.ins()
                    .call_indirect(page_sync_signature, callee, &[memory]);
                b.ins().jump(synced, &[]);
                b.switch_to_block(synced);
                // A stack access needs the group's stack: its pointer, size
                // and block size (words, log2), and where the bases are.
                let frame = if matches!(place, Place::Stack { .. }) {
                    let frame = b.ins().load(
                        pointer,
                        MemFlagsData::trusted(),
                        memory,
                        crate::memory::STACK_OFFSET,
                    );
                    let framed = b.create_block();
                    b.ins().brif(frame, framed, &[], stop, &[at.into()]);
                    b.switch_to_block(framed);
                    let [sp, size, words_log2] = [
                        crate::memory::FRAME_SP_OFFSET,
                        crate::memory::FRAME_SIZE_OFFSET,
                        crate::memory::FRAME_WORDS_LOG2_OFFSET,
                    ]
                    .map(|at| {
                        let word = b.ins().load(types::I32, MemFlagsData::trusted(), frame, at);
                        b.ins().uextend(types::I64, word)
                    });
                    Some((frame, sp, size, words_log2))
                } else {
                    None
                };
                // A stack access of words at an offset the same for every
                // lane: each component's word for all lanes is one row of
                // the stack. An immediate offset always is; a register's
                // is checked when the instruction runs (the generic passes
                // below take the rest).
                let mut after_generic = None;
                if let (Place::Stack { offset }, 2, Some(frame)) = (place, *size_log2, frame) {
                    let lookup = PageLookup {
                        cache,
                        memory,
                        miss: page_miss_signature,
                        stop,
                        at,
                    };
                    let words = data.iter().all(|reg| reg.size == Size::S32);
                    let mask = b.use_var(exec);
                    let shared = match offset {
                        Value::Imm(imm) if words => Some((b.ins().iconst(types::I64, *imm), None)),
                        Value::Reg(reg, _) if words && reg.size == Size::S32 => {
                            let (value, same) = lanes_agree(&mut b, regs, mask, *reg);
                            Some((value, Some(same)))
                        }
                        _ => None,
                    };
                    if let Some((offset, same)) = shared {
                        let access = StackRows {
                            offset,
                            components,
                            data,
                            store: *store,
                        };
                        match same {
                            None => {
                                b = stack_rows(b, &parts, lane, mask, lookup, frame, access);
                                position += count;
                                continue;
                            }
                            Some(same) => {
                                let rows = b.create_block();
                                let generic = b.create_block();
                                let join = b.create_block();
                                b.ins().brif(same, rows, &[], generic, &[]);
                                b.switch_to_block(rows);
                                b = stack_rows(b, &parts, lane, mask, lookup, frame, access);
                                b.ins().jump(join, &[]);
                                b.switch_to_block(generic);
                                after_generic = Some(join);
                            }
                        }
                    }
                }
                let zero = b.ins().iconst(types::I32, 0);
                b.def_var(elements, zero);
                let mask = b.use_var(exec);
                let size_bytes = 1i64 << size_log2;
                let page_bytes = agx_hw::uat::PAGE_BYTES as i64;
                // A load whose address is the same for every lane reads
                // its elements once, as lane 0's, for every lane in the
                // mask (if one is).
                let same_address = !*store
                    && matches!(place, Place::Device { base, offset, .. }
                        if per_group(base) && per_group(offset));
                let (mask, lanes) = if same_address {
                    let any = b.ins().icmp_imm_s(IntCC::NotEqual, mask, 0);
                    (b.ins().uextend(types::I32, any), 1)
                } else {
                    (mask, LANES)
                };
                // First pass: every element's host address (and a load's
                // value, a store's bytes), lane by lane; nothing written.
                b = mask_loop(b, lane, mask, 1, lanes, &parts, |code, _| {
                    let lane_now = code.b.use_var(lane);
                    let lane_wide = code.b.ins().uextend(types::I64, lane_now);
                    // Each component's element address.
                    let addresses: Vec<IrValue> = match place {
                        Place::Device {
                            base,
                            offset,
                            signed_index,
                            shift,
                        } => {
                            let (base_bits, _) = code.raw(base);
                            let (index, _) = code.raw(offset);
                            let index = if *signed_index {
                                code.sign_extend(index, 32)
                            } else {
                                index
                            };
                            let scaled = code.b.ins().ishl_imm_u(index, i64::from(*shift));
                            let address = code.b.ins().iadd(base_bits, scaled);
                            let aligned = code.b.ins().band_imm_u(address, !(size_bytes - 1));
                            components
                                .iter()
                                .map(|&c| {
                                    code.b.ins().iadd_imm_u(aligned, i64::from(c) * size_bytes)
                                })
                                .collect()
                        }
                        Place::Stack { offset } => {
                            let flags = MemFlagsData::trusted();
                            // (`frame` is always there for a stack access.)
                            let Some((frame, sp, size, words_log2)) = frame else {
                                return;
                            };
                            let offset = match offset {
                                Value::Imm(imm) => code.b.ins().iconst(types::I64, *imm),
                                other => {
                                    let (bits, _) = code.raw(other);
                                    code.sign_extend(bits, 32)
                                }
                            };
                            let first = code.b.ins().iadd(sp, offset);
                            let mut addresses = Vec::new();
                            for &c in components {
                                let byte_at =
                                    code.b.ins().iadd_imm_u(first, i64::from(c) * size_bytes);
                                // Inside the stack, or the interpreter
                                // reports it.
                                let end = code.b.ins().iadd_imm_u(byte_at, size_bytes);
                                let below =
                                    code.b.ins().icmp_imm_s(IntCC::SignedLessThan, byte_at, 0);
                                let past = code.b.ins().icmp(IntCC::SignedGreaterThan, end, size);
                                let outside = code.b.ins().bor(below, past);
                                let inside = code.b.create_block();
                                code.b.ins().brif(outside, stop, &[at.into()], inside, &[]);
                                code.b.switch_to_block(inside);
                                let aligned = code.b.ins().band_imm_u(byte_at, !(size_bytes - 1));
                                let word = code.b.ins().ushr_imm_u(aligned, 2);
                                let block = code.b.ins().ushr(word, words_log2);
                                let one = code.b.ins().iconst(types::I64, 1);
                                let words = code.b.ins().ishl(one, words_log2);
                                let word_mask = code.b.ins().iadd_imm_u(words, -1);
                                let in_block = code.b.ins().band(word, word_mask);
                                let block = code.b.ins().band_imm_u(block, 3);
                                let base_at = code.b.ins().imul_imm_u(block, 8);
                                let base_at = code.b.ins().iadd(frame, base_at);
                                let base = code.b.ins().load(
                                    types::I64,
                                    flags,
                                    base_at,
                                    crate::memory::FRAME_BASES_OFFSET,
                                );
                                let slot = code.b.ins().imul_imm_u(in_block, 32);
                                let slot = code.b.ins().iadd(slot, lane_wide);
                                let slot = code.b.ins().imul_imm_u(slot, 4);
                                let byte = code.b.ins().band_imm_u(aligned, 3);
                                let address = code.b.ins().iadd(base, slot);
                                addresses.push(code.b.ins().iadd(address, byte));
                            }
                            addresses
                        }
                    };
                    let lane_bytes = code.b.ins().imul_imm_u(lane_wide, 4);
                    let slot_base = code.b.ins().stack_addr(pointer, loaded, 0);
                    let lane_slot = code.b.ins().iadd(slot_base, lane_bytes);
                    for (k, &element) in addresses.iter().enumerate() {
                        let host_page = page_host(
                            &mut code.b,
                            PageLookup {
                                cache,
                                memory,
                                miss: page_miss_signature,
                                stop,
                                at,
                            },
                            element,
                            *store,
                        );
                        let within = code.b.ins().band_imm_u(element, page_bytes - 1);
                        let host = code.b.ins().iadd(host_page, within);
                        if *store {
                            // The element's bytes and where they go, in
                            // order: lane, then component.
                            let (bits, _) = code.raw(&Value::Reg(data[k], Default::default()));
                            let word = code.b.ins().ireduce(types::I32, bits);
                            let n = code.b.use_var(elements);
                            let n_wide = code.b.ins().uextend(pointer, n);
                            let value_at = code.b.ins().imul_imm_u(n_wide, 4);
                            let value_at = code.b.ins().iadd(slot_base, value_at);
                            code.b
                                .ins()
                                .store(MemFlagsData::trusted(), word, value_at, 0);
                            let host_at = code.b.ins().imul_imm_u(n_wide, 8);
                            let hosts_base = code.b.ins().stack_addr(pointer, targets, 0);
                            let host_at = code.b.ins().iadd(hosts_base, host_at);
                            code.b
                                .ins()
                                .store(MemFlagsData::trusted(), host, host_at, 0);
                            let n = code.b.ins().iadd_imm_u(n, 1);
                            code.b.def_var(elements, n);
                        } else {
                            // Memory other threads and processes may
                            // write: one host load, no assumption about
                            // its value.
                            let flags = MemFlagsData::new().with_notrap().with_aligned();
                            let word = match size_log2 {
                                0 => code.b.ins().uload8(types::I32, flags, host, 0),
                                1 => code.b.ins().uload16(types::I32, flags, host, 0),
                                _ => code.b.ins().load(types::I32, flags, host, 0),
                            };
                            let word = if *widen {
                                let wide = code.call(code.widen, word);
                                code.b.ins().bitcast(types::I32, MemFlagsData::new(), wide)
                            } else {
                                word
                            };
                            code.b.ins().store(
                                MemFlagsData::trusted(),
                                word,
                                lane_slot,
                                (k * LANES * 4) as i32,
                            );
                        }
                    }
                });
                if *store {
                    // Second pass: the elements stored in order.
                    let header = b.create_block();
                    let body = b.create_block();
                    let exit = b.create_block();
                    let zero = b.ins().iconst(types::I32, 0);
                    b.def_var(lane, zero);
                    b.ins().jump(header, &[]);
                    b.switch_to_block(header);
                    let i = b.use_var(lane);
                    let n = b.use_var(elements);
                    let more = b.ins().icmp(IntCC::UnsignedLessThan, i, n);
                    b.ins().brif(more, body, &[], exit, &[]);
                    b.switch_to_block(body);
                    let i_wide = b.ins().uextend(pointer, i);
                    let value_at = b.ins().imul_imm_u(i_wide, 4);
                    let values_base = b.ins().stack_addr(pointer, loaded, 0);
                    let value_at = b.ins().iadd(values_base, value_at);
                    let word = b
                        .ins()
                        .load(types::I32, MemFlagsData::trusted(), value_at, 0);
                    let host_at = b.ins().imul_imm_u(i_wide, 8);
                    let hosts_base = b.ins().stack_addr(pointer, targets, 0);
                    let host_at = b.ins().iadd(hosts_base, host_at);
                    let host = b.ins().load(pointer, MemFlagsData::trusted(), host_at, 0);
                    let flags = MemFlagsData::new().with_notrap().with_aligned();
                    match size_log2 {
                        0 => {
                            b.ins().istore8(flags, word, host, 0);
                        }
                        1 => {
                            b.ins().istore16(flags, word, host, 0);
                        }
                        _ => {
                            b.ins().store(flags, word, host, 0);
                        }
                    }
                    let next = b.ins().iadd_imm_u(i, 1);
                    b.def_var(lane, next);
                    b.ins().jump(header, &[]);
                    b.switch_to_block(exit);
                } else {
                    // Second pass: the registers written, four lanes at
                    // a time (the registers are 16 or 32 bits).
                    let mask = b.use_var(exec);
                    b = quad::quad_loop(b, lane, mask, &parts, |code, _| {
                        let quad_now = code.b.use_var(lane);
                        let quad_wide = code.b.ins().uextend(pointer, quad_now);
                        let quad_bytes = code.b.ins().imul_imm_u(quad_wide, 16);
                        let slot_base = code.b.ins().stack_addr(pointer, loaded, 0);
                        let quad_slot = code.b.ins().iadd(slot_base, quad_bytes);
                        for (k, &reg) in data.iter().enumerate() {
                            let offset = (k * LANES * 4) as i32;
                            let words = if same_address {
                                let word = code.b.ins().load(
                                    types::I32,
                                    MemFlagsData::trusted(),
                                    slot_base,
                                    offset,
                                );
                                code.b.ins().splat(types::I32X4, word)
                            } else {
                                code.quad_load(quad_slot, offset)
                            };
                            code.quad_write(reg, words);
                        }
                    });
                }
                if let Some(join) = after_generic {
                    b.ins().jump(join, &[]);
                    b.switch_to_block(join);
                }
            }
        }
        position += count;
    }
    if loop_back.is_some() {
        // The jump back is an instruction too.
        let may = b.use_var(allowance);
        let passes = b
            .ins()
            .icmp_imm_s(IntCC::SignedLessThan, may, (position + 1) as i64);
        let within = b.create_block();
        let here = b.ins().iconst(types::I32, position as i64);
        b.ins().brif(passes, stop, &[here.into()], within, &[]);
        b.switch_to_block(within);
    }
    let done = b.use_var(iterations);
    let done = b.ins().iadd_imm_u(done, 1);
    b.def_var(iterations, done);
    // The result: the mask in the low 32 bits, the runs in bits 32-61,
    // bit 62 when the block stopped before a load, bit 63 when the block
    // ends at its start (the loop's jump taken, the budget spent).
    let result = |b: &mut FunctionBuilder<'_>, flag: i64| {
        let exec = b.use_var(exec);
        let exec = b.ins().uextend(types::I64, exec);
        let runs = b.use_var(iterations);
        let runs = b.ins().ishl_imm_u(runs, 32);
        let packed = b.ins().bor(exec, runs);
        if flag != 0 {
            b.ins().bor_imm_u(packed, flag)
        } else {
            packed
        }
    };
    match loop_back {
        Some(any) => {
            let ends = b.create_block();
            let exec_now = b.use_var(exec);
            let code = if any { IntCC::NotEqual } else { IntCC::Equal };
            let taken = b.ins().icmp_imm_s(code, exec_now, 0);
            b.ins().brif(taken, top, &[], ends, &[]);
            b.switch_to_block(ends);
            let value = result(&mut b, 0);
            b.ins().return_(&[value]);
        }
        None => {
            let value = result(&mut b, 0);
            b.ins().return_(&[value]);
        }
    }
    // (A block that is not a loop has whole runs or a tail to run.)
    b.switch_to_block(out_of_budget);
    let value = result(&mut b, i64::MIN);
    b.ins().return_(&[value]);
    b.switch_to_block(stop);
    let at = b.block_params(stop)[0];
    b.ins().store(
        MemFlagsData::trusted(),
        at,
        memory,
        crate::memory::STOPPED_AT_OFFSET,
    );
    let value = result(&mut b, 1 << 62);
    b.ins().return_(&[value]);
    b.seal_all_blocks();
    b.finalize(module.target_config());
    Ok(())
}

/// What one formula's values are: one lane's (i64; truth values i8) or
/// a quad's four lanes (`i32x4`; truth values all-ones lanes). The
/// instructions' arithmetic is written once over it, for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Width {
    Lane,
    Quad,
}

impl Width {
    /// `value` in every lane (a quad's lanes take its low 32 bits).
    fn constant(self, b: &mut FunctionBuilder<'_>, value: i64) -> IrValue {
        match self {
            Width::Lane => b.ins().iconst(types::I64, value),
            Width::Quad => {
                let word = b.ins().iconst(types::I32, i64::from(value as u32));
                b.ins().splat(types::I32X4, word)
            }
        }
    }

    /// `x` where `holds`, else `y`, lane by lane.
    fn select(
        self,
        b: &mut FunctionBuilder<'_>,
        holds: IrValue,
        x: IrValue,
        y: IrValue,
    ) -> IrValue {
        match self {
            Width::Lane => b.ins().select(holds, x, y),
            Width::Quad => b.ins().bitselect(holds, x, y),
        }
    }
}

/// The bitwise operation of truth table `table` (bit 3: A and B, bit 2:
/// not A and B, bit 1: A and not B, bit 0: neither), `y` 0 when absent.
/// The tables of B alone give A (the interpreter's hardware-tested model).
fn truth_table(
    b: &mut FunctionBuilder<'_>,
    width: Width,
    table: u32,
    x: IrValue,
    y: Option<IrValue>,
) -> IrValue {
    if table == 0b1100 || table == 0b0011 {
        return x;
    }
    let y = match y {
        Some(y) => y,
        None => width.constant(b, 0),
    };
    let not_x = b.ins().bnot(x);
    let not_y = b.ins().bnot(y);
    let mut r = width.constant(b, 0);
    for (bit, (p, q)) in [
        (1, (not_x, not_y)),
        (2, (x, not_y)),
        (4, (not_x, y)),
        (8, (x, y)),
    ] {
        if table & bit != 0 {
            let term = b.ins().band(p, q);
            r = b.ins().bor(r, term);
        }
    }
    r
}

/// `x * y + (z << shift)` (or `- ...`), `x + (y << shift)` without `z`;
/// a shift of 5 or more drops the addend (the interpreter's rule).
fn int_add(
    b: &mut FunctionBuilder<'_>,
    width: Width,
    (x, y, z): (IrValue, IrValue, Option<IrValue>),
    shift: u32,
    subtract: bool,
) -> IrValue {
    let (product, addend) = match z {
        Some(z) => (b.ins().imul(x, y), z),
        None => (x, y),
    };
    let addend = match shift {
        0 => addend,
        1..=4 => b.ins().ishl_imm_u(addend, i64::from(shift)),
        _ => width.constant(b, 0),
    };
    if subtract {
        b.ins().isub(product, addend)
    } else {
        b.ins().iadd(product, addend)
    }
}

/// The integer comparison of condition code `cc` (its operands already
/// sign-extended for the signed codes).
fn int_cc(cc: u32) -> IntCC {
    match cc {
        0 | 4 => IntCC::Equal,
        1 => IntCC::UnsignedLessThan,
        2 => IntCC::UnsignedGreaterThan,
        5 => IntCC::SignedLessThan,
        _ => IntCC::SignedGreaterThan,
    }
}

/// Whether `x cc y` holds for floats (of one lane or four): codes 3 and
/// 7 hold where x is a number and y is not or x is below (above) it.
fn float_condition(b: &mut FunctionBuilder<'_>, cc: u32, x: IrValue, y: IrValue) -> IrValue {
    let plain = match cc {
        0 => Some(FloatCC::Equal),
        1 => Some(FloatCC::LessThan),
        2 => Some(FloatCC::GreaterThan),
        5 => Some(FloatCC::GreaterThanOrEqual),
        6 => Some(FloatCC::LessThanOrEqual),
        _ => None,
    };
    if let Some(code) = plain {
        return b.ins().fcmp(code, x, y);
    }
    let x_number = b.ins().fcmp(FloatCC::Ordered, x, x);
    let y_nan = b.ins().fcmp(FloatCC::Unordered, y, y);
    let order = if cc == 3 {
        FloatCC::LessThan
    } else {
        FloatCC::GreaterThan
    };
    let ordered = b.ins().fcmp(order, x, y);
    let either = b.ins().bor(y_nan, ordered);
    b.ins().band(x_number, either)
}

/// A nesting count `v` after an exec-mask instruction: `if` (a lane
/// nested in a branch not taken goes one level deeper, else it enters by
/// the condition), `else` (a lane in the branch leaves to level `n`, one
/// waiting at level 1 enters by the condition), `while` (a lane inside
/// stays by the condition, else leaves to `n`), where `taken` is the
/// condition, given with the instruction as `step`; `pop_exec` (no
/// `step`): lowered by `n`, not below 0.
fn nesting_count_after(
    b: &mut FunctionBuilder<'_>,
    width: Width,
    step: Option<(Op, IrValue)>,
    v: IrValue,
    n: u64,
) -> IrValue {
    let n = width.constant(b, n as i64);
    let zero = width.constant(b, 0);
    let one = width.constant(b, 1);
    match step {
        None => {
            let lowered = b.ins().isub(v, n);
            let under = b.ins().icmp(IntCC::UnsignedLessThan, v, n);
            width.select(b, under, zero, lowered)
        }
        Some((Op::IfIcmp | Op::IfFcmp, taken)) => {
            let deeper = b.ins().iadd(v, n);
            let entered = width.select(b, taken, zero, one);
            let nested = b.ins().icmp(IntCC::NotEqual, v, zero);
            width.select(b, nested, deeper, entered)
        }
        Some((Op::ElseIcmp | Op::ElseFcmp, taken)) => {
            let entered = width.select(b, taken, zero, one);
            let waiting = b.ins().icmp(IntCC::Equal, v, one);
            let kept = width.select(b, waiting, entered, v);
            let was_in = b.ins().icmp(IntCC::Equal, v, zero);
            width.select(b, was_in, n, kept)
        }
        Some((_, taken)) => {
            let again = width.select(b, taken, zero, n);
            let inside = b.ins().icmp(IntCC::UnsignedLessThan, v, n);
            width.select(b, inside, again, v)
        }
    }
}

/// What a shape is compiled as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Segment {
    /// Part of a run of ALU instructions, lane by lane.
    Alu,
    /// An exec-mask instruction: a pass over the present lanes.
    ExecUpdate,
    /// A load or store: a pass that reads (or gathers), then a pass that
    /// writes.
    Memory,
}

fn segment_kind(shape: &Shape<'_>) -> Segment {
    match shape {
        Shape::ExecUpdate { .. } | Shape::PopExec { .. } => Segment::ExecUpdate,
        Shape::Memory { .. } => Segment::Memory,
        _ => Segment::Alu,
    }
}

/// Whether a shape updates the nesting counts and the execution mask.
fn is_exec_update(shape: &Shape<'_>) -> bool {
    segment_kind(shape) == Segment::ExecUpdate
}

/// What every lane's code needs: the register file, the uniforms, and
/// the helpers' signatures and addresses.
#[derive(Clone, Copy)]
struct LaneParts {
    regs: IrValue,
    uniforms: IrValue,
    pointer: Type,
    fma: (cranelift_codegen::ir::SigRef, i64),
    widen: (cranelift_codegen::ir::SigRef, i64),
    narrow: (cranelift_codegen::ir::SigRef, i64),
    convert: (cranelift_codegen::ir::SigRef, i64),
    half: (cranelift_codegen::ir::SigRef, i64),
    unary: (cranelift_codegen::ir::SigRef, i64),
    /// Whether the host has a vector fused multiply-add.
    vector_fma: bool,
}

/// A loop over the lanes of `mask` running `body` for each (the lane in
/// `lane`), its registers loaded when first read and the ones it wrote
/// stored at the end; the builder comes back after the loop.
fn lane_loop<'f>(
    b: FunctionBuilder<'f>,
    lane: cranelift_frontend::Variable,
    mask: IrValue,
    parts: &LaneParts,
    body: impl FnOnce(&mut Lane<'f>),
) -> FunctionBuilder<'f> {
    mask_loop(b, lane, mask, 1, LANES, parts, |code, _| body(code))
}

/// A loop over `steps` groups of `group_lanes` lanes (1, or 4: a quad on
/// host vectors), running `body` for each group with a lane in `mask`
/// (the group's number in `group`, its bits of the mask the second
/// argument): the registers it reads are loaded when first read, the
/// ones it writes stored at the end (a quad's lanes outside the mask
/// kept). The builder comes back after the loop.
fn mask_loop<'f>(
    mut b: FunctionBuilder<'f>,
    group: cranelift_frontend::Variable,
    mask: IrValue,
    group_lanes: u32,
    steps: usize,
    parts: &LaneParts,
    body: impl FnOnce(&mut Lane<'f>, IrValue),
) -> FunctionBuilder<'f> {
    let header = b.create_block();
    let body_block = b.create_block();
    let latch = b.create_block();
    let exit = b.create_block();
    let zero = b.ins().iconst(types::I32, 0);
    b.def_var(group, zero);
    b.ins().jump(header, &[]);

    // header: has the group a lane in the mask?
    b.switch_to_block(header);
    let group_now = b.use_var(group);
    let first_lane = b.ins().imul_imm_u(group_now, i64::from(group_lanes));
    let shifted = b.ins().ushr(mask, first_lane);
    let bits = b.ins().band_imm_u(shifted, (1 << group_lanes) - 1);
    b.append_block_param(body_block, types::I32);
    b.ins().brif(bits, body_block, &[bits.into()], latch, &[]);

    // body: the segment for the group's lanes.
    b.switch_to_block(body_block);
    let bits = b.block_params(body_block)[0];
    let group_wide = b.ins().uextend(parts.pointer, group_now);
    let group_bytes = b.ins().imul_imm_u(group_wide, i64::from(4 * group_lanes));
    let base = b.ins().iadd(parts.regs, group_bytes);
    let quad = (group_lanes == 4).then(|| quad::Quad::new(&mut b, bits));
    let mut code = Lane {
        b,
        lane_base: base,
        uniforms: parts.uniforms,
        cells: [None; GPRS],
        pointer: parts.pointer,
        fma: parts.fma,
        widen: parts.widen,
        narrow: parts.narrow,
        convert: parts.convert,
        half: parts.half,
        unary: parts.unary,
        count_is_zero: None,
        quad,
        vector_fma: parts.vector_fma,
    };
    body(&mut code, bits);
    b = code.finish();
    b.ins().jump(latch, &[]);

    // latch: the next group.
    b.switch_to_block(latch);
    let group_now = b.use_var(group);
    let next = b.ins().iadd_imm_u(group_now, 1);
    b.def_var(group, next);
    let more = b
        .ins()
        .icmp_imm_s(IntCC::UnsignedLessThan, next, steps as i64);
    b.ins().brif(more, header, &[], exit, &[]);

    b.switch_to_block(exit);
    b
}

/// What a page-cache lookup needs: the cache, the call's memory context,
/// the miss function's signature, and where the block stops (the
/// instruction's position) when a page cannot be reached.
#[derive(Clone, Copy)]
struct PageLookup {
    cache: IrValue,
    memory: IrValue,
    miss: cranelift_codegen::ir::SigRef,
    stop: cranelift_codegen::ir::Block,
    at: IrValue,
}

/// The host address of the page holding `element` (a GPU address),
/// readable (or, for a store, writable): the page cache's entry where
/// its tag matches, else what `page_miss` finds; the block stops where
/// neither reaches it.
fn page_host(
    b: &mut FunctionBuilder<'_>,
    lookup: PageLookup,
    element: IrValue,
    store: bool,
) -> IrValue {
    let pointer = types::I64;
    let page = b
        .ins()
        .ushr_imm_u(element, i64::from(agx_hw::uat::PAGE_SHIFT));
    let entry = b
        .ins()
        .band_imm_u(page, crate::PAGE_CACHE_ENTRIES as i64 - 1);
    let entry_bytes = b.ins().imul_imm_u(entry, 8);
    let tag_at = b.ins().iadd(lookup.cache, entry_bytes);
    let tag = b.ins().load(types::I64, MemFlagsData::trusted(), tag_at, 0);
    // The tag with the other permission's bit cleared against the page
    // with this one's set.
    let (ignored, wanted_bit) = if store { (1, 2) } else { (2, 1) };
    let tag = b.ins().band_imm_u(tag, !ignored);
    let wanted = b.ins().iadd_imm_u(page, 1);
    let wanted = b.ins().ishl_imm_u(wanted, 2);
    let wanted = b.ins().bor_imm_u(wanted, wanted_bit);
    let hit = b.ins().icmp(IntCC::Equal, tag, wanted);
    let hit_block = b.create_block();
    let miss_block = b.create_block();
    let have_page = b.create_block();
    b.append_block_param(have_page, pointer);
    b.ins().brif(hit, hit_block, &[], miss_block, &[]);
    b.switch_to_block(hit_block);
    let host = b.ins().load(
        pointer,
        MemFlagsData::trusted(),
        tag_at,
        crate::memory::HOSTS_OFFSET,
    );
    b.ins().jump(have_page, &[host.into()]);
    b.switch_to_block(miss_block);
    let callee = b.ins().iconst(
        pointer,
        crate::memory::page_miss as *const () as usize as i64,
    );
    let write = b.ins().iconst(types::I32, i64::from(store));
    let call = b
        .ins()
        .call_indirect(lookup.miss, callee, &[lookup.memory, element, write]);
    let host = b.inst_results(call)[0];
    let found = b.create_block();
    b.ins()
        .brif(host, found, &[], lookup.stop, &[lookup.at.into()]);
    b.switch_to_block(found);
    b.ins().jump(have_page, &[host.into()]);
    b.switch_to_block(have_page);
    b.block_params(have_page)[0]
}

/// A stack access [`stack_rows`] makes: its offset, the
/// components named, their 32-bit registers, and whether it stores.
struct StackRows<'s> {
    /// The offset in bytes (i64).
    offset: IrValue,
    components: &'s [u32],
    data: &'s [Reg],
    store: bool,
}

/// A stack access of 32-bit words at an offset the same for every lane
/// of `mask`, for those lanes. The stack interleaves its threads word by word: word `w`
/// of block `b` of lane `l` is at `bases[b] + (w * 32 + l) * 4`, so a
/// component's word for every lane is one row of 128 bytes, found once
/// (inside the stack, within one page, through the page cache; else the
/// block stops before the instruction and the interpreter makes it).
/// Then each quad's four words are one host load or, where all four
/// lanes are in the mask, one store (else a store per lane in it).
fn stack_rows<'f>(
    mut b: FunctionBuilder<'f>,
    parts: &LaneParts,
    quad: cranelift_frontend::Variable,
    mask: IrValue,
    lookup: PageLookup,
    (frame, sp, size, words_log2): (IrValue, IrValue, IrValue, IrValue),
    access: StackRows<'_>,
) -> FunctionBuilder<'f> {
    // No lane, no access (the interpreter makes none either).
    let work = b.create_block();
    let after = b.create_block();
    b.ins().brif(mask, work, &[], after, &[]);
    b.switch_to_block(work);
    let page_bytes = agx_hw::uat::PAGE_BYTES as i64;
    let row_bytes = (LANES * 4) as i64;
    let first = b.ins().iadd(sp, access.offset);
    let mut rows = Vec::new();
    for &c in access.components {
        let byte_at = b.ins().iadd_imm_u(first, i64::from(c) * 4);
        let end = b.ins().iadd_imm_u(byte_at, 4);
        let below = b.ins().icmp_imm_s(IntCC::SignedLessThan, byte_at, 0);
        let past = b.ins().icmp(IntCC::SignedGreaterThan, end, size);
        let outside = b.ins().bor(below, past);
        let inside = b.create_block();
        b.ins()
            .brif(outside, lookup.stop, &[lookup.at.into()], inside, &[]);
        b.switch_to_block(inside);
        let word = b.ins().ushr_imm_u(byte_at, 2);
        let block = b.ins().ushr(word, words_log2);
        let block = b.ins().band_imm_u(block, 3);
        let one = b.ins().iconst(types::I64, 1);
        let words = b.ins().ishl(one, words_log2);
        let word_mask = b.ins().iadd_imm_u(words, -1);
        let in_block = b.ins().band(word, word_mask);
        let base_at = b.ins().imul_imm_u(block, 8);
        let base_at = b.ins().iadd(frame, base_at);
        let base = b.ins().load(
            types::I64,
            MemFlagsData::trusted(),
            base_at,
            crate::memory::FRAME_BASES_OFFSET,
        );
        let row_at = b.ins().imul_imm_u(in_block, row_bytes);
        let row = b.ins().iadd(base, row_at);
        // The row within one page.
        let within = b.ins().band_imm_u(row, page_bytes - 1);
        let crosses =
            b.ins()
                .icmp_imm_s(IntCC::UnsignedGreaterThan, within, page_bytes - row_bytes);
        let one_page = b.create_block();
        b.ins()
            .brif(crosses, lookup.stop, &[lookup.at.into()], one_page, &[]);
        b.switch_to_block(one_page);
        let host_page = page_host(&mut b, lookup, row, access.store);
        rows.push(b.ins().iadd(host_page, within));
    }
    let pointer = parts.pointer;
    b = quad::quad_loop(b, quad, mask, parts, |code, bits| {
        let quad_now = code.b.use_var(quad);
        let quad_wide = code.b.ins().uextend(pointer, quad_now);
        let quad_bytes = code.b.ins().imul_imm_u(quad_wide, 16);
        for (&row, &reg) in rows.iter().zip(access.data) {
            let at = code.b.ins().iadd(row, quad_bytes);
            if !access.store {
                let words = code.quad_load(at, 0);
                code.quad_write(reg, words);
                continue;
            }
            let words = code.quad_raw(&Value::Reg(reg, Default::default()));
            let whole = code.b.create_block();
            let some = code.b.create_block();
            let done = code.b.create_block();
            let all = code.b.ins().icmp_imm_s(IntCC::Equal, bits, 0xF);
            code.b.ins().brif(all, whole, &[], some, &[]);
            code.b.switch_to_block(whole);
            code.b
                .ins()
                .store(MemFlagsData::new().with_notrap(), words, at, 0);
            code.b.ins().jump(done, &[]);
            code.b.switch_to_block(some);
            for lane in 0..4u8 {
                let this = code.b.create_block();
                let next = code.b.create_block();
                let bit = code.b.ins().band_imm_u(bits, 1 << lane);
                code.b.ins().brif(bit, this, &[], next, &[]);
                code.b.switch_to_block(this);
                let word = code.b.ins().extractlane(words, lane);
                code.b.ins().store(
                    MemFlagsData::new().with_notrap().with_aligned(),
                    word,
                    at,
                    i32::from(lane) * 4,
                );
                code.b.ins().jump(next, &[]);
                code.b.switch_to_block(next);
            }
            code.b.ins().jump(done, &[]);
            code.b.switch_to_block(done);
        }
    });
    b.ins().jump(after, &[]);
    b.switch_to_block(after);
    b
}

/// The 32-bit register `reg`'s value in the first lane of `mask` (not
/// empty), sign-extended to 64 bits as a stack offset is, and whether
/// every lane of `mask` holds the same (an i8 truth value): eight
/// vector compares of the register file's row.
fn lanes_agree(
    b: &mut FunctionBuilder<'_>,
    regs: IrValue,
    mask: IrValue,
    reg: Reg,
) -> (IrValue, IrValue) {
    let row = (usize::from(reg.half / 2) * LANES * 4) as i32;
    // (An empty mask makes no access: lane 32's "first" is never used.)
    let first = b.ins().ctz(mask);
    let first = b.ins().band_imm_u(first, (LANES - 1) as i64);
    let first_wide = b.ins().uextend(types::I64, first);
    let first_at = b.ins().imul_imm_u(first_wide, 4);
    let first_at = b.ins().iadd(regs, first_at);
    let value = b
        .ins()
        .load(types::I32, MemFlagsData::trusted(), first_at, row);
    let all = b.ins().splat(types::I32X4, value);
    let mut differ = b.ins().iconst(types::I32, 0);
    for quad in 0..LANES / 4 {
        let lanes = b.ins().load(
            types::I32X4,
            MemFlagsData::new().with_notrap(),
            regs,
            row + (quad * 16) as i32,
        );
        let equal = b.ins().icmp(IntCC::Equal, lanes, all);
        let equal = b.ins().vhigh_bits(types::I32, equal);
        let bits = b.ins().ushr_imm_u(mask, (quad * 4) as i64);
        let bits = b.ins().band_imm_u(bits, 0xF);
        let unequal = b.ins().band_not(bits, equal);
        differ = b.ins().bor(differ, unequal);
    }
    let same = b.ins().icmp_imm_s(IntCC::Equal, differ, 0);
    (b.ins().sextend(types::I64, value), same)
}

/// Whether a value is the same for every lane (a uniform or an
/// immediate).
fn per_group(value: &Value) -> bool {
    matches!(value, Value::Uniform(_) | Value::Imm(_) | Value::Float(_))
}

/// Whether `instr` is a load or store the translator takes (a block
/// holding one needs device memory, [`crate::BlockMemory`]).
pub fn accesses_memory(instr: &agx_hw::isa::Instr) -> bool {
    matches!(shape(instr, false), Some(Shape::Memory { .. }))
}

/// Whether `instr` is a stack load or store the translator takes (a
/// block holding one needs the group's stack frame).
pub fn accesses_stack(instr: &agx_hw::isa::Instr) -> bool {
    matches!(
        shape(instr, false),
        Some(Shape::Memory {
            place: Place::Stack { .. },
            ..
        })
    )
}

/// Whether `instr` changes the execution mask (a block holding one
/// returns the new mask).
pub fn updates_exec_mask(instr: &agx_hw::isa::Instr) -> bool {
    shape(instr, false).is_some_and(|shape| is_exec_update(&shape))
}

/// One lane's code being built: the registers read and written so far.
struct Lane<'f> {
    b: FunctionBuilder<'f>,
    /// This lane's word of `r0` (a register's lanes are 128 bytes apart).
    lane_base: IrValue,
    uniforms: IrValue,
    /// Each 32-bit register's current value, and whether it was written.
    cells: [Option<(IrValue, bool)>; GPRS],
    pointer: Type,
    /// The helpers' signatures and addresses: the fma, fp16 to fp32 and
    /// fp32 to fp16.
    fma: (cranelift_codegen::ir::SigRef, i64),
    widen: (cranelift_codegen::ir::SigRef, i64),
    narrow: (cranelift_codegen::ir::SigRef, i64),
    /// And `convert`'s, the fp16 ALU's and the unary fp32 operations'.
    convert: (cranelift_codegen::ir::SigRef, i64),
    half: (cranelift_codegen::ir::SigRef, i64),
    unary: (cranelift_codegen::ir::SigRef, i64),
    /// After an exec-mask instruction: whether the lane's new count is 0
    /// (the lane is in the new mask).
    count_is_zero: Option<IrValue>,
    /// In a quad's code: the four lanes' registers as vectors (and
    /// `lane_base` is the quad's word of `r0`).
    quad: Option<Box<quad::Quad>>,
    /// Whether the host has a vector fused multiply-add.
    vector_fma: bool,
}

impl<'f> Lane<'f> {
    /// The end of a lane's or a quad's code: each register it wrote
    /// stored (a quad's merged with the lanes outside the mask); the
    /// builder comes back.
    fn finish(mut self) -> FunctionBuilder<'f> {
        if self.quad.is_some() {
            self.store_quad_cells();
        }
        for (cell, state) in self.cells.iter().enumerate() {
            if let Some((value, true)) = state {
                self.b.ins().store(
                    MemFlagsData::trusted(),
                    *value,
                    self.lane_base,
                    (cell * LANES * 4) as i32,
                );
            }
        }
        self.b
    }
}

impl Lane<'_> {
    fn cell(&mut self, cell: usize) -> IrValue {
        if let Some((value, _)) = self.cells[cell] {
            return value;
        }
        let value = match self.quad_lane() {
            // One lane of a quad: its word of the register's vector.
            Some(lane) => {
                let lanes = self.quad_cell(cell);
                self.b.ins().extractlane(lanes, lane)
            }
            None => self.b.ins().load(
                types::I32,
                MemFlagsData::trusted(),
                self.lane_base,
                (cell * LANES * 4) as i32,
            ),
        };
        self.cells[cell] = Some((value, false));
        value
    }

    fn set_cell(&mut self, cell: usize, value: IrValue) {
        self.cells[cell] = Some((value, true));
    }

    fn uniform(&mut self, n: usize) -> IrValue {
        self.b.ins().load(
            types::I32,
            MemFlagsData::trusted().with_readonly(),
            self.uniforms,
            (n * 4) as i32,
        )
    }

    /// A 16-bit half of a 32-bit word, zero-extended to 64 bits.
    fn half_of(&mut self, word: IrValue, odd: bool) -> IrValue {
        let shifted = if odd {
            self.b.ins().ushr_imm_u(word, 16)
        } else {
            word
        };
        let half = self.b.ins().band_imm_u(shifted, 0xFFFF);
        self.b.ins().uextend(types::I64, half)
    }

    /// Two words as one 64-bit value.
    fn pair(&mut self, low: IrValue, high: IrValue) -> IrValue {
        let low = self.b.ins().uextend(types::I64, low);
        let high = self.b.ins().uextend(types::I64, high);
        let high = self.b.ins().ishl_imm_u(high, 32);
        self.b.ins().bor(low, high)
    }

    /// A value's raw bits, zero-extended to 64, and its width (the
    /// interpreter's `value_bits`).
    fn raw(&mut self, value: &Value) -> (IrValue, u32) {
        let width = width_of(value);
        let bits = match value {
            Value::Reg(reg, _) => {
                let cell = usize::from(reg.half / 2);
                match reg.size {
                    Size::S16 => {
                        let word = self.cell(cell);
                        self.half_of(word, reg.half % 2 == 1)
                    }
                    Size::S32 => {
                        let word = self.cell(cell);
                        self.b.ins().uextend(types::I64, word)
                    }
                    Size::S64 => {
                        let (low, high) = (self.cell(cell), self.cell(cell + 1));
                        self.pair(low, high)
                    }
                }
            }
            Value::Uniform(u) => {
                let n = usize::from(u.half / 2);
                match u.size {
                    Size::S16 => {
                        let word = self.uniform(n);
                        self.half_of(word, u.half % 2 == 1)
                    }
                    Size::S32 => {
                        let word = self.uniform(n);
                        self.b.ins().uextend(types::I64, word)
                    }
                    Size::S64 => {
                        let (low, high) = (self.uniform(n), self.uniform((n + 1) % UNIFORMS));
                        self.pair(low, high)
                    }
                }
            }
            Value::Imm(imm) => self.b.ins().iconst(types::I64, *imm),
            Value::Float(f) => self
                .b
                .ins()
                .iconst(types::I64, i64::from(f.to_f32().to_bits())),
            // `supports` admits neither.
            Value::Pair(..) | Value::Undefined { .. } => self.b.ins().iconst(types::I64, 0),
        };
        (bits, width)
    }

    /// An integer source extended to 64 bits: sign-extended from its
    /// width with `.sx`, else zero-extended (it already is).
    fn int(&mut self, src: &Src) -> IrValue {
        let (bits, width) = self.raw(&src.value);
        if src.sx && width < 64 {
            let up = self.b.ins().ishl_imm_u(bits, i64::from(64 - width));
            self.b.ins().sshr_imm_u(up, i64::from(64 - width))
        } else {
            bits
        }
    }

    /// Writes the low bits of `value` (i64) to `reg`.
    fn write(&mut self, reg: Reg, value: IrValue) {
        let cell = usize::from(reg.half / 2);
        match reg.size {
            Size::S16 => {
                let old = self.cell(cell);
                let low = self.b.ins().ireduce(types::I32, value);
                let low = self.b.ins().band_imm_u(low, 0xFFFF);
                let new = if reg.half % 2 == 1 {
                    let kept = self.b.ins().band_imm_u(old, 0xFFFF);
                    let moved = self.b.ins().ishl_imm_u(low, 16);
                    self.b.ins().bor(kept, moved)
                } else {
                    let kept = self.b.ins().band_imm_u(old, 0xFFFF_0000_u32 as i64);
                    self.b.ins().bor(kept, low)
                };
                self.set_cell(cell, new);
            }
            Size::S32 => {
                let word = self.b.ins().ireduce(types::I32, value);
                self.set_cell(cell, word);
            }
            Size::S64 => {
                let low = self.b.ins().ireduce(types::I32, value);
                let high = self.b.ins().ushr_imm_u(value, 32);
                let high = self.b.ins().ireduce(types::I32, high);
                self.set_cell(cell, low);
                self.set_cell(cell + 1, high);
            }
        }
    }

    /// An fp32 source: the low 32 bits as fp32, a denormal flushed to a
    /// zero of its sign, then `abs` and `neg`.
    fn float(&mut self, src: &Src) -> IrValue {
        let (bits, width) = self.raw(&src.value);
        let word = self.b.ins().ireduce(types::I32, bits);
        let mut value = if width == 16 {
            // fp16 widens exactly (its denormals are fp32 normals).
            self.widen_half(word)
        } else {
            let word = self.flush_denormal(word);
            self.b.ins().bitcast(types::F32, MemFlagsData::new(), word)
        };
        if src.abs {
            value = self.b.ins().fabs(value);
        }
        if src.neg {
            value = self.b.ins().fneg(value);
        }
        value
    }

    /// The fp16 value in the low 16 bits of `word` as fp32, exactly:
    /// normal values re-biased, denormals (exact multiples of 2^-24)
    /// converted as integers and scaled, infinities kept and NaNs made
    /// quiet with their payload. (The interpreter's `half_to_f32` gives
    /// the same; a NaN operand's payload never reaches a result, as every
    /// fp32 operation writes the default NaN.)
    fn widen_half(&mut self, word: IrValue) -> IrValue {
        let b = &mut self.b;
        let half = b.ins().band_imm_u(word, 0xFFFF);
        let sign = b.ins().band_imm_u(half, 0x8000);
        let sign = b.ins().ishl_imm_u(sign, 16);
        let exponent = b.ins().ushr_imm_u(half, 10);
        let exponent = b.ins().band_imm_u(exponent, 0x1F);
        let mantissa = b.ins().band_imm_u(half, 0x3FF);
        let fraction = b.ins().ishl_imm_u(mantissa, 13);
        // Normal: the exponent re-biased (127 - 15).
        let rebiased = b.ins().iadd_imm_u(exponent, 112);
        let rebiased = b.ins().ishl_imm_u(rebiased, 23);
        let normal = b.ins().bor(rebiased, fraction);
        let normal = b.ins().bor(normal, sign);
        // Infinity or NaN (made quiet).
        let special = b.ins().bor_imm_u(fraction, 0x7F80_0000);
        let is_nan = b.ins().icmp_imm_s(IntCC::NotEqual, mantissa, 0);
        let quiet = b.ins().bor_imm_u(special, 0x0040_0000);
        let special = b.ins().select(is_nan, quiet, special);
        let special = b.ins().bor(special, sign);
        // Zero or denormal: mantissa x 2^-24, exact.
        let small = b.ins().fcvt_from_uint(types::F32, mantissa);
        let scale = b.ins().f32const(1.0 / 16_777_216.0);
        let small = b.ins().fmul(small, scale);
        let small = b.ins().bitcast(types::I32, MemFlagsData::new(), small);
        let small = b.ins().bor(small, sign);
        let is_special = b.ins().icmp_imm_s(IntCC::Equal, exponent, 0x1F);
        let is_small = b.ins().icmp_imm_s(IntCC::Equal, exponent, 0);
        let bits = b.ins().select(is_special, special, normal);
        let bits = b.ins().select(is_small, small, bits);
        b.ins().bitcast(types::F32, MemFlagsData::new(), bits)
    }

    /// Calls a one-argument helper.
    fn call(
        &mut self,
        (signature, address): (cranelift_codegen::ir::SigRef, i64),
        argument: IrValue,
    ) -> IrValue {
        let callee = self.b.ins().iconst(self.pointer, address);
        let call = self.b.ins().call_indirect(signature, callee, &[argument]);
        self.b.inst_results(call)[0]
    }

    /// fp32 bits with a denormal made a zero of its sign.
    fn flush_denormal(&mut self, word: IrValue) -> IrValue {
        let exponent = self.b.ins().band_imm_u(word, 0x7F80_0000);
        let is_denormal_or_zero = self.b.ins().icmp_imm_s(IntCC::Equal, exponent, 0);
        let sign = self.b.ins().band_imm_u(word, 0x8000_0000_u32 as i64);
        self.b.ins().select(is_denormal_or_zero, sign, word)
    }

    /// `rounded`, or a zero of its sign where its magnitude is the
    /// smallest normal but the exact result (`exact`, f64) was below it.
    fn flush_before_rounding(&mut self, rounded: IrValue, exact: IrValue) -> IrValue {
        let magnitude = self.b.ins().fabs(rounded);
        let smallest = self.b.ins().f32const(MIN_NORMAL_F32);
        let at_smallest = self.b.ins().fcmp(FloatCC::Equal, magnitude, smallest);
        let exact_magnitude = self.b.ins().fabs(exact);
        let smallest_wide = self.b.ins().f64const(f64::from(MIN_NORMAL_F32));
        let below = self
            .b
            .ins()
            .fcmp(FloatCC::LessThan, exact_magnitude, smallest_wide);
        let flush = self.b.ins().band(at_smallest, below);
        let zero = self.b.ins().f32const(0.0);
        let signed_zero = self.b.ins().fcopysign(zero, rounded);
        self.b.ins().select(flush, signed_zero, rounded)
    }

    /// Writes `count` as the lane's `r0l` (16 bits; `r0h` kept) and notes
    /// whether it is 0.
    fn set_nesting_count(&mut self, count: IrValue) {
        let word = self.cell(0);
        let low = self.b.ins().ireduce(types::I32, count);
        let low = self.b.ins().band_imm_u(low, 0xFFFF);
        let high = self.b.ins().band_imm_u(word, 0xFFFF_0000_u32 as i64);
        let word = self.b.ins().bor(high, low);
        self.set_cell(0, word);
        self.count_is_zero = Some(self.b.ins().icmp_imm_s(IntCC::Equal, low, 0));
    }

    /// The lane's `r0l`, zero-extended to 64 bits.
    fn nesting_count(&mut self) -> IrValue {
        let word = self.cell(0);
        self.half_of(word, false)
    }

    fn instruction(&mut self, shape: &Shape<'_>) {
        match shape {
            Shape::ExecUpdate {
                op,
                float,
                cc,
                invert,
                a,
                b,
                n,
            } => {
                let holds = self.condition(*float, *cc, a, b);
                let taken = if *invert {
                    self.b.ins().bxor_imm_u(holds, 1)
                } else {
                    holds
                };
                let v = self.nesting_count();
                let count =
                    nesting_count_after(&mut self.b, Width::Lane, Some((*op, taken)), v, *n);
                self.set_nesting_count(count);
            }
            Shape::PopExec { n } => {
                let v = self.nesting_count();
                let count = nesting_count_after(&mut self.b, Width::Lane, None, v, *n);
                self.set_nesting_count(count);
            }
            Shape::MovImm { dst, imm } => {
                let value = self.b.ins().iconst(types::I64, *imm);
                self.write(*dst, value);
            }
            Shape::IntAdd {
                dst,
                a,
                b,
                c,
                shift,
                subtract,
                saturate,
            } => {
                let x = self.int(a);
                let y = self.int(b);
                let z = c.as_ref().map(|c| self.int(c));
                let mut r = int_add(&mut self.b, Width::Lane, (x, y, z), *shift, *subtract);
                if let Some(signed) = saturate {
                    let width = width_of(&Value::Reg(*dst, Default::default()));
                    let (low, high) = if *signed {
                        (-(1i64 << (width - 1)), (1i64 << (width - 1)) - 1)
                    } else {
                        (0, (1i64 << width) - 1)
                    };
                    let low = self.b.ins().iconst(types::I64, low);
                    let high = self.b.ins().iconst(types::I64, high);
                    r = self.b.ins().smax(r, low);
                    r = self.b.ins().smin(r, high);
                }
                self.write(*dst, r);
            }
            Shape::Bitwise { dst, a, b, table } => {
                let (x, _) = self.raw(a);
                let y = b.map(|b| self.raw(b).0);
                let r = truth_table(&mut self.b, Width::Lane, *table, x, y);
                self.write(*dst, r);
            }
            Shape::CompareSelect {
                float,
                cc,
                dst,
                a,
                b,
                x,
                y,
            } => {
                let taken = self.condition(*float, *cc, a, b);
                let (x, _) = self.raw(x);
                let (y, _) = self.raw(y);
                let r = self.b.ins().select(taken, x, y);
                self.write(*dst, r);
            }
            Shape::Bitfield {
                op,
                dst,
                a,
                b,
                shift,
                mask,
            } => {
                let r = self.bitfield(*op, a, b, *shift, *mask);
                let r = self.b.ins().ireduce(types::I64, r);
                self.write(*dst, r);
            }
            Shape::Bits { op, dst, a, b } => {
                let r = self.bits(*op, a, *b);
                self.write(*dst, r);
            }
            // (A load is its own segment: see `block`.)
            Shape::Nop | Shape::Memory { .. } => {}
            Shape::Convert {
                mode,
                dst,
                src,
                to_zero,
            } => {
                let (bits, width) = self.raw(src);
                let r = match mode {
                    // Integer to fp32, to nearest even: the host's
                    // conversion of the (exactly held) 64-bit value.
                    0 | 1 | 6 | 7 | 10 | 11 if !to_zero && dst.size != Size::S16 => {
                        let from_bits = if matches!(mode, 0 | 1) {
                            8
                        } else if matches!(mode, 6 | 7) {
                            16
                        } else {
                            32
                        };
                        let value = if mode % 2 == 1 {
                            self.sign_extend(bits, from_bits)
                        } else {
                            self.truncate(bits, from_bits)
                        };
                        let f = self.b.ins().fcvt_from_sint(types::F32, value);
                        let word = self.b.ins().bitcast(types::I32, MemFlagsData::new(), f);
                        self.b.ins().uextend(types::I64, word)
                    }
                    _ => {
                        let (signature, address) = self.convert;
                        let callee = self.b.ins().iconst(self.pointer, address);
                        let mode = self.b.ins().iconst(types::I32, i64::from(*mode));
                        let width = self.b.ins().iconst(types::I32, i64::from(width));
                        let flags = u32::from(dst.size == Size::S16) | u32::from(*to_zero) << 1;
                        let flags = self.b.ins().iconst(types::I32, i64::from(flags));
                        let call = self.b.ins().call_indirect(
                            signature,
                            callee,
                            &[mode, bits, width, flags],
                        );
                        self.b.inst_results(call)[0]
                    }
                };
                self.write(*dst, r);
            }
            Shape::Half {
                op,
                dst,
                a,
                b,
                c,
                saturate,
            } => {
                // The operands' exact values, as the reference reads them
                // (fp16 widened, fp32 flushed, then `.abs`, `.neg`).
                let wide = |this: &mut Self, src: &Src| {
                    let value = this.float(src);
                    this.b.ins().fpromote(types::F64, value)
                };
                let x = wide(self, a);
                let y = wide(self, b);
                let z = match c {
                    Some(c) => wide(self, c),
                    None => self.b.ins().f64const(0.0),
                };
                let (signature, address) = self.half;
                let callee = self.b.ins().iconst(self.pointer, address);
                let op = self.b.ins().iconst(types::I32, i64::from(*op));
                let sat = self.b.ins().iconst(types::I32, i64::from(*saturate));
                let call = self
                    .b
                    .ins()
                    .call_indirect(signature, callee, &[op, x, y, z, sat]);
                let bits = self.b.inst_results(call)[0];
                let bits = self.b.ins().uextend(types::I64, bits);
                self.write(*dst, bits);
            }
            Shape::Float {
                op,
                dst,
                a,
                b,
                c,
                saturate,
            } => {
                let x = self.float(a);
                let y = self.float(b);
                let mut r = match (op, c) {
                    (Op::Fmadd32, Some(c)) => {
                        let z = self.float(c);
                        self.fma(x, y, z)
                    }
                    (Op::Fadd32, _) => {
                        let rounded = self.b.ins().fadd(x, y);
                        let wide_x = self.b.ins().fpromote(types::F64, x);
                        let wide_y = self.b.ins().fpromote(types::F64, y);
                        let exact = self.b.ins().fadd(wide_x, wide_y);
                        self.flush_before_rounding(rounded, exact)
                    }
                    _ => {
                        let rounded = self.b.ins().fmul(x, y);
                        let wide_x = self.b.ins().fpromote(types::F64, x);
                        let wide_y = self.b.ins().fpromote(types::F64, y);
                        let exact = self.b.ins().fmul(wide_x, wide_y);
                        self.flush_before_rounding(rounded, exact)
                    }
                };
                if *saturate {
                    r = self.saturate(r);
                }
                self.write_float_result(*dst, r);
            }
            Shape::Unary {
                op,
                dst,
                a,
                saturate,
            } => {
                let x = self.float(a);
                let (signature, address) = self.unary;
                let callee = self.b.ins().iconst(self.pointer, address);
                let op = self.b.ins().iconst(types::I32, i64::from(*op));
                let call = self.b.ins().call_indirect(signature, callee, &[op, x]);
                let mut r = self.b.inst_results(call)[0];
                if *saturate {
                    r = self.saturate(r);
                }
                self.write_float_result(*dst, r);
            }
        }
    }

    /// An fp32 result written as the ALU writes it: to a 16-bit register
    /// rounded to fp16 (a NaN the default NaN), to a 32-bit one with a
    /// denormal flushed and a NaN the default NaN.
    fn write_float_result(&mut self, dst: Reg, r: IrValue) {
        if dst.size == Size::S16 {
            let half = self.call(self.narrow, r);
            let half = self.b.ins().uextend(types::I64, half);
            self.write(dst, half);
            return;
        }
        let word = self.b.ins().bitcast(types::I32, MemFlagsData::new(), r);
        let word = self.flush_denormal(word);
        let is_nan = self.b.ins().fcmp(FloatCC::Unordered, r, r);
        let default_nan = self.b.ins().iconst(types::I32, DEFAULT_NAN_F32);
        let word = self.b.ins().select(is_nan, default_nan, word);
        self.set_cell(usize::from(dst.half / 2), word);
    }

    /// Sign-extends the low `width` bits of an i64.
    fn sign_extend(&mut self, bits: IrValue, width: u32) -> IrValue {
        if width >= 64 {
            return bits;
        }
        let up = self.b.ins().ishl_imm_u(bits, i64::from(64 - width));
        self.b.ins().sshr_imm_u(up, i64::from(64 - width))
    }

    /// Zero-extends the low `width` bits of an i64.
    fn truncate(&mut self, bits: IrValue, width: u32) -> IrValue {
        if width >= 64 {
            return bits;
        }
        let mask = self
            .b
            .ins()
            .iconst(types::I64, ((1u64 << width) - 1) as i64);
        self.b.ins().band(bits, mask)
    }

    /// Whether `a cc b` holds (an i8 truth value).
    fn condition(&mut self, float: bool, cc: u32, a: &Src, b: &Src) -> IrValue {
        if float {
            let x = self.float(a);
            let y = self.float(b);
            return float_condition(&mut self.b, cc, x, y);
        }
        let (x, x_width) = self.raw(&a.value);
        let (y, y_width) = self.raw(&b.value);
        let (x, y) = if cc >= 4 {
            (self.sign_extend(x, x_width), self.sign_extend(y, y_width))
        } else {
            (x, y)
        };
        self.b.ins().icmp(int_cc(cc), x, y)
    }

    /// A 128-bit constant.
    fn const128(&mut self, value: u128) -> IrValue {
        let low = self.b.ins().iconst(types::I64, value as u64 as i64);
        let high = self.b.ins().iconst(types::I64, (value >> 64) as u64 as i64);
        self.b.ins().iconcat(low, high)
    }

    fn bitfield(
        &mut self,
        op: Op,
        a: &Value,
        b: &Value,
        shift: Option<&Value>,
        mask: u128,
    ) -> IrValue {
        let (xs, x_width) = self.raw(a);
        let (ys, _) = self.raw(b);
        let x_width = x_width.min(32);
        let x64 = self.truncate(xs, x_width);
        let y64 = self.truncate(ys, 32);
        let x = self.b.ins().uextend(types::I128, x64);
        let y = self.b.ins().uextend(types::I128, y64);
        // Shift amounts (at most 127) are worked out in 64 bits, then
        // widened for the 128-bit shift.
        let low7 = |this: &mut Self, v: IrValue| this.b.ins().band_imm_u(v, 0x7F);
        let wide = |this: &mut Self, v: IrValue| this.b.ins().uextend(types::I128, v);
        match op {
            Op::Asr | Op::Asrh => {
                let signed = self.sign_extend(x64, x_width);
                let wide_value = self.b.ins().sextend(types::I128, signed);
                let amount = low7(self, y64);
                let limit = self
                    .b
                    .ins()
                    .iconst(types::I64, if op == Op::Asr { 63 } else { 95 });
                let amount = self.b.ins().umin(amount, limit);
                let amount = self.b.ins().uextend(types::I128, amount);
                let value = if op == Op::Asr {
                    wide_value
                } else {
                    self.b.ins().ishl_imm_u(wide_value, 32)
                };
                self.b.ins().sshr(value, amount)
            }
            _ => {
                let shift_bits = match shift {
                    Some(value) => self.raw(value).0,
                    None => self.b.ins().iconst(types::I64, 0),
                };
                let sh64 = low7(self, shift_bits);
                let sh = wide(self, sh64);
                let mask_value = self.const128(mask);
                match op {
                    Op::Bfi => {
                        let placed = self.b.ins().ishl(mask_value, sh);
                        let kept_bits = self.b.ins().bnot(placed);
                        let kept = self.b.ins().band(x, kept_bits);
                        let field = self.b.ins().band(y, mask_value);
                        let field = self.b.ins().ishl(field, sh);
                        self.b.ins().bor(kept, field)
                    }
                    Op::Bfeil => {
                        let not_mask = self.b.ins().bnot(mask_value);
                        let kept = self.b.ins().band(x, not_mask);
                        let moved = self.b.ins().ushr(y, sh);
                        let field = self.b.ins().band(moved, mask_value);
                        self.b.ins().bor(kept, field)
                    }
                    Op::Extr => {
                        let high = self.b.ins().ishl_imm_u(y, 32);
                        let joined = self.b.ins().bor(high, x);
                        let moved = self.b.ins().ushr(joined, sh);
                        self.b.ins().band(moved, mask_value)
                    }
                    Op::Shlhi => {
                        // smask = mask << sh.saturating_sub(32)
                        let thirty_two = self.b.ins().iconst(types::I64, 32);
                        let capped = self.b.ins().umax(sh64, thirty_two);
                        let by = self.b.ins().isub(capped, thirty_two);
                        let by = wide(self, by);
                        let smask = self.b.ins().ishl(mask_value, by);
                        let moved = self.b.ins().ishl(y, sh);
                        let moved = self.b.ins().ushr_imm_u(moved, 32);
                        let field = self.b.ins().band(moved, smask);
                        let not_smask = self.b.ins().bnot(smask);
                        let kept = self.b.ins().band(x, not_smask);
                        self.b.ins().bor(field, kept)
                    }
                    _ => {
                        // Shrhi: smask = (mask << 32) >> min(sh, 32)
                        let thirty_two = self.b.ins().iconst(types::I64, 32);
                        let by = self.b.ins().umin(sh64, thirty_two);
                        let by = wide(self, by);
                        let high_mask = self.b.ins().ishl_imm_u(mask_value, 32);
                        let smask = self.b.ins().ushr(high_mask, by);
                        let high = self.b.ins().ishl_imm_u(y, 32);
                        let moved = self.b.ins().ushr(high, sh);
                        let field = self.b.ins().band(moved, smask);
                        let not_smask = self.b.ins().bnot(smask);
                        let kept = self.b.ins().band(x, not_smask);
                        self.b.ins().bor(field, kept)
                    }
                }
            }
        }
    }

    /// Spreads the low 16 bits of a 32-bit value to the even bits.
    fn spread(&mut self, v: IrValue) -> IrValue {
        let mut v = self.b.ins().band_imm_u(v, 0xFFFF);
        for (shift, mask) in [
            (8, 0x00FF_00FF_u32),
            (4, 0x0F0F_0F0F),
            (2, 0x3333_3333),
            (1, 0x5555_5555),
        ] {
            let moved = self.b.ins().ishl_imm_u(v, shift);
            let both = self.b.ins().bor(v, moved);
            v = self.b.ins().band_imm_u(both, i64::from(mask));
        }
        v
    }

    fn bits(&mut self, op: Op, a: &Value, b: Option<&Value>) -> IrValue {
        let (xs, _) = self.raw(a);
        let x = self.b.ins().ireduce(types::I32, xs);
        let r = match op {
            Op::Bitrev => self.b.ins().bitrev(x),
            Op::Popcount => self.b.ins().popcnt(x),
            Op::Ffs => {
                // The highest set bit's index; all ones for 0.
                let leading = self.b.ins().clz(x);
                let thirty_one = self.b.ins().iconst(types::I32, 31);
                let index = self.b.ins().isub(thirty_one, leading);
                let is_zero = self.b.ins().icmp_imm_s(IntCC::Equal, x, 0);
                let none = self.b.ins().iconst(types::I32, i64::from(u32::MAX));
                self.b.ins().select(is_zero, none, index)
            }
            _ => {
                let ys = match b {
                    Some(b) => self.raw(b).0,
                    None => self.b.ins().iconst(types::I64, 0),
                };
                let y = self.b.ins().ireduce(types::I32, ys);
                let even = self.spread(x);
                let odd = self.spread(y);
                let odd = self.b.ins().ishl_imm_u(odd, 1);
                self.b.ins().bor(even, odd)
            }
        };
        self.b.ins().uextend(types::I64, r)
    }

    /// `.sat`: NaN and negative values (-0 too) to +0, else at most 1.
    fn saturate(&mut self, r: IrValue) -> IrValue {
        let is_nan = self.b.ins().fcmp(FloatCC::Unordered, r, r);
        let word = self.b.ins().bitcast(types::I32, MemFlagsData::new(), r);
        let negative = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, word, 0);
        let to_zero = self.b.ins().bor(is_nan, negative);
        let one = self.b.ins().f32const(1.0);
        let capped = self.b.ins().fmin(r, one);
        let zero = self.b.ins().f32const(0.0);
        self.b.ins().select(to_zero, zero, capped)
    }

    /// `x * y + z` rounded once; a result of the smallest normal's
    /// magnitude is handed to the reference's function, which knows
    /// whether the exact value was below it.
    fn fma(&mut self, x: IrValue, y: IrValue, z: IrValue) -> IrValue {
        let rounded = self.b.ins().fma(x, y, z);
        let magnitude = self.b.ins().fabs(rounded);
        let smallest = self.b.ins().f32const(MIN_NORMAL_F32);
        let at_smallest = self.b.ins().fcmp(FloatCC::Equal, magnitude, smallest);
        let rare = self.b.create_block();
        let join = self.b.create_block();
        self.b.append_block_param(join, types::F32);
        self.b
            .ins()
            .brif(at_smallest, rare, &[], join, &[rounded.into()]);
        self.b.switch_to_block(rare);
        let (signature, address) = self.fma;
        let callee = self.b.ins().iconst(self.pointer, address);
        let call = self.b.ins().call_indirect(signature, callee, &[x, y, z]);
        let exact = self.b.inst_results(call)[0];
        self.b.ins().jump(join, &[exact.into()]);
        self.b.switch_to_block(join);
        self.b.block_params(join)[0]
    }
}
