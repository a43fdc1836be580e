//! Subgroup operations: lanes of a SIMD-group reading each other's values.
//!
//! A SIMD-group is 32 lanes in eight quads of four (a quad is a 2x2 pixel
//! block in fragment work). The shuffles read a value from another lane of
//! the quad or of the SIMD-group; the reductions combine the values of the
//! active lanes of a quad or of the SIMD-group and give every active lane
//! the result; the prefix operations give each active lane the
//! combination of the active lanes below it (exclusive); the compare
//! ballots give every active lane the mask of active lanes where a compare
//! holds.
//!
//! The shuffles are modelled as applegpu's hardware-tested model has them:
//! the hardware reads the low two bits of the index operand of all four
//! lanes of a quad, active or not, and ORs them into one selector for the
//! quad, so lanes of one quad cannot pick different lanes of a quad (Mesa
//! works around this, `agx_lower_divergent_shuffle.c`). The quad forms
//! follow the same rule within the quad.

use agx_hw::isa::{Op, Size};

use super::{
    lanes, sign_extend, truncate, unsupported, Env, ExecError, Flow, Operands, SimdGroup, LANES,
};
use crate::usc::float::{
    add_f32, canonical_f32, f32_to_half, f64_to_half, ftz, half_to_f32, mul_f16_exact, mul_f32,
    quiet_f16,
};

/// How a shuffle finds the lane it reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ShuffleKind {
    /// The lane the index names.
    Index,
    /// This lane's index xor the operand.
    Xor,
    /// The lane that many below; none below keeps its own value.
    Up,
    /// The lane that many above; none above keeps its own value.
    Down,
    /// The lane that many below, wrapping around the window.
    RotateUp,
}

impl SimdGroup {
    /// Executes a shuffle, reduction, prefix operation or ballot.
    #[inline(always)]
    pub(super) fn subgroup(
        &mut self,
        o: &Operands<'_>,
        env: &mut Env<'_>,
    ) -> Result<Flow, ExecError> {
        use ShuffleKind::*;
        let shuffle = |window: usize, kind: ShuffleKind| Some((window, kind));
        let which = match o.ins.op {
            Op::QuadShuffle => shuffle(4, Index),
            Op::QuadShuffleXor => shuffle(4, Xor),
            Op::QuadShuffleUp => shuffle(4, Up),
            Op::QuadShuffleDown => shuffle(4, Down),
            Op::QuadShuffleRotateUp => shuffle(4, RotateUp),
            Op::SimdShuffle => shuffle(LANES, Index),
            Op::SimdShuffleXor => shuffle(LANES, Xor),
            Op::SimdShuffleUp => shuffle(LANES, Up),
            Op::SimdShuffleDown => shuffle(LANES, Down),
            Op::SimdShuffleRotateUp => shuffle(LANES, RotateUp),
            _ => None,
        };
        if let Some((window, kind)) = which {
            self.shuffle(o, env, window, kind)?;
            return Ok(Flow::Next);
        }
        match o.ins.op {
            Op::QuadReduce => self.reduce(o, env, 4, false)?,
            Op::SimdReduce => self.reduce(o, env, LANES, false)?,
            Op::QuadPrefix => self.reduce(o, env, 4, true)?,
            Op::SimdPrefix => self.reduce(o, env, LANES, true)?,
            Op::IcmpBallot | Op::FcmpBallot => self.ballot(o, env, LANES)?,
            Op::IcmpQuadBallot | Op::FcmpQuadBallot => self.ballot(o, env, 4)?,
            Op::SimdOp | Op::SimdShufOp => {
                return Err(unsupported(
                    o.pc,
                    "a subgroup operation whose operation bits have no known meaning",
                ))
            }
            _ => return Err(o.misrouted()),
        }
        Ok(Flow::Next)
    }

    fn shuffle(
        &mut self,
        o: &Operands<'_>,
        env: &mut Env<'_>,
        window: usize,
        kind: ShuffleKind,
    ) -> Result<(), ExecError> {
        let (d, a, b) = (o.dst(0)?.reg, o.src(1)?, o.src(2)?);
        let (values, _) = self.gather_raw(&a.value, env.uniforms);
        let (indices, index_bits) = self.gather_raw(&b.value, env.uniforms);
        // One selector per quad: the low two index bits of its four lanes,
        // ORed, whether or not the lanes are active.
        let mut selector = [0usize; LANES / 4];
        for (quad, s) in selector.iter_mut().enumerate() {
            *s = (0..4).fold(0, |acc, i| acc | (indices[4 * quad + i] & 3) as usize);
        }
        let pick = |quad: usize, position: usize| -> u64 {
            let s = selector[quad];
            let from = match kind {
                ShuffleKind::Index => s,
                ShuffleKind::Xor => position ^ s,
                ShuffleKind::Up | ShuffleKind::RotateUp => position.wrapping_sub(s) & 3,
                ShuffleKind::Down => (position + s) & 3,
            };
            values[4 * quad + from]
        };
        for lane in lanes(o.exec) {
            let start = lane & !(window - 1);
            let relative = (lane - start) as u64;
            // The index is a 16-bit source (applegpu): a 32-bit register
            // gives its low half.
            let index = truncate(indices[lane], index_bits.min(16));
            let w = window as u64;
            let target = match kind {
                ShuffleKind::Index => (index < w).then_some(index),
                ShuffleKind::Xor => Some(relative ^ index).filter(|t| *t < w),
                ShuffleKind::Up => relative.checked_sub(index),
                ShuffleKind::Down => relative.checked_add(index).filter(|t| *t < w),
                ShuffleKind::RotateUp => Some(relative.wrapping_sub(index) & (w - 1)),
            };
            let value = match target {
                Some(t) => pick((start + t as usize) >> 2, lane & 3),
                None => values[lane],
            };
            self.write(d, lane, value);
        }
        Ok(())
    }

    fn reduce(
        &mut self,
        o: &Operands<'_>,
        env: &mut Env<'_>,
        window: usize,
        prefix: bool,
    ) -> Result<(), ExecError> {
        let (code, d, a) = (o.int(0)? as u32, o.dst(1)?.reg, o.src(2)?);
        if matches!(a.value, agx_hw::isa::Value::Reg(r, _) if r.size == Size::S64) {
            return Err(unsupported(o.pc, "a subgroup operation on a 64-bit source"));
        }
        let op = SubgroupOp::from_code(code)
            .ok_or_else(|| unsupported(o.pc, format!("subgroup operation {code:#b}")))?;
        let width = if d.size == Size::S16 { 16 } else { 32 };
        let (mut values, source_bits) = self.gather_raw(&a.value, env.uniforms);
        if op.is_float() {
            // Float values convert to the destination's format first: fp16
            // widens exactly, fp32 narrows to the nearest fp16; each is
            // then a value as the ALU reads it (flushed, default NaN).
            for v in values.iter_mut() {
                *v = match (source_bits, width) {
                    (16, 32) => u64::from(half_to_f32(*v).to_bits()),
                    (32, 16) => u64::from(f32_to_half(ftz(f32::from_bits(*v as u32)))),
                    _ => *v,
                };
                *v = op.canonical(truncate(*v, width), width);
            }
        }
        let exec = o.exec;
        let mut out = [0u64; LANES];
        for start in (0..LANES).step_by(window) {
            let mut acc: Option<u64> = None;
            for lane in start..start + window {
                if exec & (1 << lane) == 0 {
                    continue;
                }
                let value = truncate(values[lane], width);
                if prefix {
                    out[lane] = acc.unwrap_or_else(|| op.identity(width));
                }
                acc = Some(match acc {
                    None if !prefix => value,
                    None => op.combine(op.identity(width), value, width),
                    Some(acc) => op.combine(acc, value, width),
                });
            }
            if !prefix {
                out[start..start + window].fill(acc.unwrap_or(0));
            }
        }
        for lane in lanes(exec) {
            self.write(d, lane, out[lane]);
        }
        Ok(())
    }

    fn ballot(
        &mut self,
        o: &Operands<'_>,
        env: &mut Env<'_>,
        window: usize,
    ) -> Result<(), ExecError> {
        let float = matches!(o.ins.op, Op::FcmpBallot | Op::FcmpQuadBallot);
        let (d, code, a, b) = (o.dst(0)?.reg, o.int(1)? as u32, o.src(2)?, o.src(3)?);
        let exec = o.exec;
        let holds = self.exec_condition_mask(float, code, &a, &b, exec, env.uniforms, o.pc)?;
        for lane in lanes(exec) {
            let mask = if window == LANES {
                holds
            } else {
                // The quad's lanes in bits 0-3 (applegpu: a quad ballot is
                // used as `& 15`; what the hardware puts above is not
                // known, this model puts zeros).
                holds >> (lane & !3) & 0xF
            };
            self.write(d, lane, u64::from(mask));
        }
        Ok(())
    }
}

/// A reduction operation (Mesa's `simd_op` values).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SubgroupOp {
    And,
    Or,
    Xor,
    Iadd,
    Fadd,
    Fmul,
    Fmin,
    Fmax,
    Smin,
    Smax,
    Umin,
    Umax,
}

impl SubgroupOp {
    fn is_float(self) -> bool {
        matches!(
            self,
            SubgroupOp::Fadd | SubgroupOp::Fmul | SubgroupOp::Fmin | SubgroupOp::Fmax
        )
    }

    /// A float value as the ALU reads and writes it: an fp32 denormal
    /// flushed, a NaN the default NaN. Integers are unchanged.
    fn canonical(self, value: u64, width: u32) -> u64 {
        match (self.is_float(), width) {
            (false, _) => value,
            (true, 16) => u64::from(quiet_f16(value as u16)),
            (true, _) => u64::from(canonical_f32(f32::from_bits(value as u32)).to_bits()),
        }
    }

    fn from_code(code: u32) -> Option<SubgroupOp> {
        Some(match code {
            0b00000 => SubgroupOp::And,
            0b00001 => SubgroupOp::Fadd,
            0b00010 => SubgroupOp::Or,
            0b00011 => SubgroupOp::Fmul,
            0b00100 => SubgroupOp::Xor,
            0b00101 => SubgroupOp::Fmin,
            0b00111 => SubgroupOp::Fmax,
            0b10000 => SubgroupOp::Iadd,
            0b10100 => SubgroupOp::Smin,
            0b10110 => SubgroupOp::Smax,
            0b11100 => SubgroupOp::Umin,
            0b11110 => SubgroupOp::Umax,
            _ => return None,
        })
    }

    /// The value the first lane of a prefix operation receives (NIR's
    /// identities, which Mesa's scans are lowered against).
    fn identity(self, width: u32) -> u64 {
        let ones = truncate(u64::MAX, width);
        let float = |v: f32| {
            if width == 16 {
                u64::from(f32_to_half(v))
            } else {
                u64::from(v.to_bits())
            }
        };
        match self {
            SubgroupOp::And | SubgroupOp::Umin => ones,
            SubgroupOp::Or | SubgroupOp::Xor | SubgroupOp::Iadd | SubgroupOp::Umax => 0,
            SubgroupOp::Smin => ones >> 1,
            SubgroupOp::Smax => 1 << (width - 1),
            SubgroupOp::Fadd => float(0.0),
            SubgroupOp::Fmul => float(1.0),
            SubgroupOp::Fmin => float(f32::INFINITY),
            SubgroupOp::Fmax => float(f32::NEG_INFINITY),
        }
    }

    /// `x op y` on `width`-bit values. Float operations follow the ALU's
    /// rules: fp32 flushes denormals, a NaN result is the default NaN;
    /// min and max return the non-NaN operand.
    fn combine(self, x: u64, y: u64, width: u32) -> u64 {
        let (sx, sy) = (sign_extend(x, width), sign_extend(y, width));
        let int = |v: u64| truncate(v, width);
        match self {
            SubgroupOp::And => x & y,
            SubgroupOp::Or => x | y,
            SubgroupOp::Xor => x ^ y,
            SubgroupOp::Iadd => int(x.wrapping_add(y)),
            SubgroupOp::Smin => int(sx.min(sy) as u64),
            SubgroupOp::Smax => int(sx.max(sy) as u64),
            SubgroupOp::Umin => x.min(y),
            SubgroupOp::Umax => x.max(y),
            SubgroupOp::Fadd | SubgroupOp::Fmul | SubgroupOp::Fmin | SubgroupOp::Fmax => {
                if width == 16 {
                    let (a, b) = (f64::from(half_to_f32(x)), f64::from(half_to_f32(y)));
                    let r = match self {
                        SubgroupOp::Fadd => a + b,
                        SubgroupOp::Fmul => mul_f16_exact(a, b),
                        SubgroupOp::Fmin => a.min(b),
                        _ => a.max(b),
                    };
                    u64::from(quiet_f16(f64_to_half(r)))
                } else {
                    let (a, b) = (f32::from_bits(x as u32), f32::from_bits(y as u32));
                    let r = match self {
                        SubgroupOp::Fadd => add_f32(a, b),
                        SubgroupOp::Fmul => mul_f32(a, b),
                        SubgroupOp::Fmin => a.min(b),
                        _ => a.max(b),
                    };
                    u64::from(canonical_f32(r).to_bits())
                }
            }
        }
    }
}
