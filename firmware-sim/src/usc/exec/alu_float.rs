//! The floating-point ALU: fp32 add/multiply/fused multiply-add with
//! flush-to-zero, their fp16 forms, the single-source functions
//! (rounding, reciprocal, square root, log, exp) and the screen-space
//! derivatives taken across a 2x2 quad.

use agx_hw::isa::Op;

use super::{lanes, unreachable_flow, unsupported, Env, ExecError, Flow, Operands, SimdGroup};
use crate::usc::float::{
    add_f32, f64_to_half, fma_f32, mul_f16_exact, mul_f32, quiet_f16, saturate, saturate_f64,
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
        let pc = o.pc;
        let exec = o.exec;
        let sat = o.sat();
        match op {
            Op::SinPt1 | Op::SinPt2 => {
                return Err(unsupported(
                    pc,
                    format!("{} (its polynomial is not modelled)", op.mnemonic()),
                ))
            }
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
                let zs = c.map(|c| self.gather_f32(&c, env.uniforms));
                for lane in lanes(exec) {
                    let (x, y) = (xs[lane], ys[lane]);
                    let r = match (op, &zs) {
                        (Op::Fadd32, _) => add_f32(x, y),
                        (Op::Fmul32, _) => mul_f32(x, y),
                        (_, Some(z)) => fma_f32(x, y, z[lane]),
                        _ => unreachable_flow(),
                    };
                    self.write_float(d, lane, if sat { saturate(r) } else { r });
                }
            }
            Op::Fadd16 | Op::Fmul16 | Op::Fmadd16 => {
                let d = o.dst(0)?.reg;
                let (a, b) = (o.src(1)?, o.src(2)?);
                let c = if op == Op::Fmadd16 {
                    Some(o.src(3)?)
                } else {
                    None
                };
                for lane in lanes(exec) {
                    let x = self.half_src(&a, lane, env.uniforms);
                    let y = self.half_src(&b, lane, env.uniforms);
                    let r = match (op, &c) {
                        (Op::Fadd16, _) => x + y,
                        (Op::Fmul16, _) => mul_f16_exact(x, y),
                        (_, Some(c)) => x.mul_add(y, self.half_src(c, lane, env.uniforms)),
                        _ => unreachable_flow(),
                    };
                    let r = if sat { saturate_f64(r) } else { r };
                    self.write(d, lane, u64::from(quiet_f16(f64_to_half(r))));
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
                let d = o.dst(0)?.reg;
                let a = o.src(1)?;
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
