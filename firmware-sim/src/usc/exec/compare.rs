//! Compare-and-select (`icmpsel`, `fcmpsel`) and the condition masks the
//! structured control-flow instructions share.

use agx_hw::isa::{Op, Src};

use super::{
    lanes, sign_extend, truncate, unsupported, Env, ExecError, Flow, Operands, SimdGroup, UNIFORMS,
};

impl SimdGroup {
    /// Executes `icmpsel` or `fcmpsel`.
    #[inline(always)]
    pub(super) fn compare_select(
        &mut self,
        o: &Operands<'_>,
        env: &mut Env<'_>,
    ) -> Result<Flow, ExecError> {
        let op = o.ins.op;
        let pc = o.pc;
        let exec = o.exec;
        match op {
            Op::Icmpsel | Op::Fcmpsel => {
                let cc = o.int(0)? as u32;
                let d = o.dst(1)?.reg;
                let (a, b, x, y) = (o.src(2)?, o.src(3)?, o.src(4)?, o.src(5)?);
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
            _ => return Err(o.misrouted()),
        }
        Ok(Flow::Next)
    }

    /// The lanes of `lanes` where an exec-mask or ballot condition holds:
    /// `code` is the condition in bits 0-2 and, in bit 3, its inversion
    /// (which still covers only `lanes`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn exec_condition_mask(
        &self,
        float: bool,
        code: u32,
        a: &Src,
        b: &Src,
        lanes_mask: u32,
        uniforms: &[u32; UNIFORMS],
        pc: u64,
    ) -> Result<u32, ExecError> {
        let holds = self.condition_mask(float, code & 7, a, b, lanes_mask, uniforms, pc)?;
        Ok(if code & 8 != 0 {
            !holds & lanes_mask
        } else {
            holds
        })
    }

    /// The lanes of `lanes` where `a cc b` holds (integer or float
    /// compare-select conditions: 0 eq, 1 lt, 2 gt, ...).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn condition_mask(
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
}

/// Whether `x cc y` holds for a float condition code.
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
