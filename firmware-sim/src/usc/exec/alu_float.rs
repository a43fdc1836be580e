//! The floating-point ALU: fp32 add/multiply/fused multiply-add with
//! flush-to-zero, their fp16 forms, the single-source functions
//! (rounding, reciprocal, square root, log, exp) and the screen-space
//! derivatives taken across a 2x2 quad.

use agx_hw::isa::Op;

use super::{lanes, Env, ExecError, Flow, Operands, SimdGroup, LANES};
use crate::usc::float::{
    add_f32, flush_before_rounding, fma_f32, half_arithmetic, mul_f32, rsqrt_f32, saturate,
    sin_pt_1, sin_pt_2, HalfOp,
};

impl SimdGroup {
    /// Executes a floating-point ALU instruction.
    #[inline(always)]
    pub(super) fn float_alu(
        &mut self,
        o: &Operands<'_>,
        env: &mut Env<'_>,
    ) -> Result<Flow, ExecError> {
        let op = o.ins.op;
        let exec = o.exec;
        let sat = o.sat();
        match op {
            Op::Fadd32 | Op::Fmul32 | Op::Fmadd32 => {
                let d = o.dst(0)?.reg;
                let (a, b) = (o.src(1)?, o.src(2)?);
                let c = if op == Op::Fmadd32 {
                    Some(o.src(3)?)
                } else {
                    None
                };
                let xs = self.gather_f32(&a, env.uniforms);
                let ys = self.gather_f32(&b, env.uniforms);
                // Every lane computed (the functions are pure), as plain
                // arrays the compiler can keep in vector registers; only
                // the executing lanes are written.
                let mut rs = [0f32; LANES];
                match c {
                    Some(c) => {
                        let zs = self.gather_f32(&c, env.uniforms);
                        for lane in 0..LANES {
                            rs[lane] = fma_f32(xs[lane], ys[lane], zs[lane]);
                        }
                    }
                    None if op == Op::Fadd32 => {
                        for lane in 0..LANES {
                            rs[lane] = add_f32(xs[lane], ys[lane]);
                        }
                    }
                    None => {
                        for lane in 0..LANES {
                            rs[lane] = mul_f32(xs[lane], ys[lane]);
                        }
                    }
                }
                if sat {
                    rs = rs.map(saturate);
                }
                self.write_floats(d, exec, &rs);
            }
            Op::Fadd16 | Op::Fmul16 | Op::Fmadd16 => {
                let d = o.dst(0)?.reg;
                let (a, b) = (o.src(1)?, o.src(2)?);
                let c = if op == Op::Fmadd16 {
                    Some(o.src(3)?)
                } else {
                    None
                };
                let half_op = match op {
                    Op::Fadd16 => HalfOp::Add,
                    Op::Fmul16 => HalfOp::Mul,
                    _ => HalfOp::Fma,
                };
                for lane in lanes(exec) {
                    let x = self.half_src(&a, lane, env.uniforms);
                    let y = self.half_src(&b, lane, env.uniforms);
                    let z = match &c {
                        Some(c) => self.half_src(c, lane, env.uniforms),
                        None => 0.0,
                    };
                    let bits = half_arithmetic(half_op, x, y, z, sat);
                    self.write(d, lane, u64::from(bits));
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
            | Op::RsqrtSpecial
            | Op::SinPt1
            | Op::SinPt2 => {
                let d = o.dst(0)?.reg;
                let a = o.src(1)?;
                let xs = self.gather_f32(&a, env.uniforms);
                for lane in lanes(exec) {
                    let r = unary_f32(op, xs[lane]);
                    // `write_float` flushes the result and makes a NaN
                    // the default NaN.
                    self.write_float(d, lane, if sat { saturate(r) } else { r });
                }
            }
            Op::Dfdx | Op::Dfdy => {
                let d = o.dst(0)?.reg;
                let a = o.src(1)?;
                let values = self.gather_f32(&a, env.uniforms);
                let neighbour = if op == Op::Dfdx { 1 } else { 2 };
                for lane in lanes(exec) {
                    let r = add_f32(values[lane | neighbour], -values[lane & !neighbour]);
                    self.write_float(d, lane, if sat { saturate(r) } else { r });
                }
            }
            _ => return Err(o.misrouted()),
        }
        Ok(Flow::Next)
    }
}

/// A single-source fp32 function of the ALU, before `.sat` and the
/// write: the roundings exactly, `rcp` and `exp2` flushing a result below
/// the smallest normal before rounding, the others the f64 function
/// rounded once to fp32 (the hardware's approximations are not known).
pub(crate) fn unary_f32(op: Op, x: f32) -> f32 {
    match op {
        Op::Floor => x.floor(),
        Op::Ceil => x.ceil(),
        Op::Trunc => x.trunc(),
        Op::Rint => x.round_ties_even(),
        Op::Rcp => flush_before_rounding(1.0 / x, || 1.0 / f64::from(x)),
        Op::Rsqrt => rsqrt_f32(x),
        Op::Log2 => f64::from(x).log2() as f32,
        // Modelled so that Mesa's sqrt(x) = x * srsqrt(x) gives 0 at 0
        // rather than 0 * inf.
        Op::RsqrtSpecial if x == 0.0 => 0.0,
        Op::RsqrtSpecial => rsqrt_f32(x),
        Op::SinPt1 => sin_pt_1(x),
        Op::SinPt2 => sin_pt_2(x),
        _ => {
            let exact = f64::from(x).exp2();
            flush_before_rounding(exact as f32, || exact)
        }
    }
}

/// [`unary_f32`] for the compiled code: the operation by its index in
/// `agx_jit::UNARY_FLOAT_OPS` (one the compiled code never passes gives
/// a NaN rather than a panic across the call).
pub(crate) extern "C" fn unary_f32_for_compiled_code(op: u32, x: f32) -> f32 {
    match agx_jit::UNARY_FLOAT_OPS.get(op as usize) {
        Some(&op) => unary_f32(op, x),
        None => f32::NAN,
    }
}
