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
        // (With no lane to run, an unknown mode stops nothing.)
        if exec != 0 && !convert_mode_known(mode) {
            return Err(unsupported(pc, format!("convert mode {mode}")));
        }
        let to_16_bits = d.size == Size::S16;
        for lane in lanes(exec) {
            let (bits, width) = self.raw_src(&s, lane, env.uniforms);
            let result = convert_bits(mode, bits, width, to_16_bits, to_zero).unwrap_or(0);
            self.write(d, lane, result);
        }
        Ok(())
    }
}

/// Whether `convert` defines `mode` (the ISA table's modes): from 8-,
/// 16- or 32-bit integers (0/1, 6/7, 10/11: unsigned/signed) to float,
/// or from float to 16- or 32-bit integers (4/5, 8/9: unsigned/signed).
fn convert_mode_known(mode: i64) -> bool {
    agx_hw::isa::table::CONVERT_MODES
        .iter()
        .any(|&(known, _)| i64::from(known) == mode)
}

/// One lane of `convert mode`: the source's raw `bits` (of `width` bits)
/// converted, rounding to zero or to nearest even, to a float of 16 or
/// 32 bits or to an integer (saturated; NaN gives 0). `None` for a mode
/// [`convert_mode_known`] refuses.
pub(crate) fn convert_bits(
    mode: i64,
    bits: u64,
    width: u32,
    to_16_bits: bool,
    to_zero: bool,
) -> Option<u64> {
    let int_value = match mode {
        0 => Some(i64::from(bits as u8)),
        1 => Some(i64::from(bits as u8 as i8)),
        6 => Some(i64::from(bits as u16)),
        7 => Some(i64::from(bits as u16 as i16)),
        10 => Some(i64::from(bits as u32)),
        11 => Some(i64::from(bits as u32 as i32)),
        _ => None,
    };
    if let Some(v) = int_value {
        return Some(if to_16_bits {
            u64::from(int_to_half(v, to_zero))
        } else {
            u64::from(int_to_f32(v, to_zero).to_bits())
        });
    }
    let (min, max) = match mode {
        4 => (0, i64::from(u16::MAX)),
        5 => (i64::from(i16::MIN), i64::from(i16::MAX)),
        8 => (0, i64::from(u32::MAX)),
        9 => (i64::from(i32::MIN), i64::from(i32::MAX)),
        _ => return None,
    };
    let f = if width == 16 {
        f64::from(half_to_f32(bits))
    } else {
        f64::from(ftz(f32::from_bits(bits as u32)))
    };
    Some(float_to_int(f, to_zero, min, max) as u64)
}
