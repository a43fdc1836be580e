//! Conversions between integers and floats (`convert`), with the
//! hardware's rounding and saturating behaviour.

use agx_hw::isa::{Op, Size};

use super::{lanes, unsupported, Env, ExecError, Flow, Operands, SimdGroup};
use crate::usc::float::{float_to_int, ftz, half_to_f32, int_to_f32, int_to_half};

impl SimdGroup {
    /// Executes `convert`.
    #[inline(always)]
    pub(super) fn convert_op(
        &mut self,
        o: &Operands<'_>,
        env: &mut Env<'_>,
    ) -> Result<Flow, ExecError> {
        match o.ins.op {
            Op::Convert => self.convert(o, env)?,
            _ => return Err(o.misrouted()),
        }
        Ok(Flow::Next)
    }

    /// `convert mode, d, s, round`: integer <-> float.
    pub(super) fn convert(&mut self, o: &Operands<'_>, env: &mut Env<'_>) -> Result<(), ExecError> {
        let (mode, d, s, round) = (o.int(0)?, o.dst(1)?.reg, o.src(2)?, o.int(3)?);
        let (exec, pc) = (o.exec, o.pc);
        let to_zero = match round {
            0 => true,
            1 => false,
            r => return Err(unsupported(pc, format!("convert rounding mode {r}"))),
        };
        for lane in lanes(exec) {
            let (bits, width) = self.raw_src(&s, lane, env.uniforms);
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
}
