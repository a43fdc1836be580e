//! The integer ALU: add/subtract and multiply-add with shift and
//! saturation, the bitwise operations (one truth table covers them all),
//! bitfield insert/extract and the funnel shifts, and immediate moves.

use agx_hw::isa::{Op, Size, Src, Value};

use super::{
    bits_of, lanes, sign_extend, truncate, unreachable_flow, unsupported, Env, ExecError, Flow,
    Operands, SimdGroup, LANES,
};

impl SimdGroup {
    /// Executes an integer ALU instruction.
    #[inline(always)]
    pub(super) fn integer_alu(
        &mut self,
        o: &Operands<'_>,
        env: &mut Env<'_>,
    ) -> Result<Flow, ExecError> {
        let op = o.ins.op;
        let exec = o.exec;
        let sat = o.sat();
        match op {
            Op::MovImm32 if o.int(2)? != 0 => {
                return Err(unsupported(
                    o.pc,
                    "mov_imm that kills helper lanes (helper lanes are not modelled)",
                ))
            }
            Op::MovImm16 | Op::MovImm32 => {
                let d = o.dst(0)?.reg;
                let imm = o.int(1)? as u64;
                self.write_lanes(d, exec, &[imm; LANES]);
            }
            Op::Iadd | Op::Isub | Op::Imadd | Op::Imsub => {
                let d = o.dst(0)?;
                let width = bits_of(d.reg.size);
                let (mut a, mut b) = (o.src(1)?, o.src(2)?);
                let c = if matches!(op, Op::Imadd | Op::Imsub) {
                    Some(o.src(3)?)
                } else {
                    None
                };
                let shift = o.int(if c.is_some() { 4 } else { 3 })? as u32;
                let signed = a.sx || b.sx || c.is_some_and(|c| c.sx);
                let wide = |s: &Src| matches!(s.value, Value::Reg(r, _) if r.size == Size::S64);
                if c.is_some() {
                    (a, b) = (a.as_multiplicand(), b.as_multiplicand());
                }
                // Saturation needs every operand at most 32 bits wide.
                let narrow = !wide(&a) && !wide(&b) && !c.as_ref().is_some_and(wide);
                let xs = self.gather_int(&a, env.uniforms);
                let ys = self.gather_int(&b, env.uniforms);
                let zs = c.map(|c| self.gather_int(&c, env.uniforms));
                let mut results = [0u64; LANES];
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
                    results[lane] = r as u64;
                }
                self.write_lanes(d.reg, exec, &results);
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
                let (table, first) = o
                    .ins
                    .bitwise_table()
                    .ok_or_else(|| unsupported(o.pc, "malformed numeric operand"))?;
                let d = o.dst(first)?.reg;
                let a = o.src(first + 1)?;
                let b = if matches!(op, Op::Mov | Op::Not) {
                    None
                } else {
                    Some(o.src(first + 2)?)
                };
                let xs = self.gather_raw(&a.value, env.uniforms).0;
                let ys = b.map_or([0; LANES], |b| self.gather_raw(&b.value, env.uniforms).0);
                // The two tables of B alone (0011 and 1100) give A on the
                // hardware (applegpu's hardware-tested model).
                if table == 0b1100 || table == 0b0011 {
                    self.write_lanes(d, exec, &xs);
                    return Ok(Flow::Next);
                }
                let mut results = [0u64; LANES];
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
                    results[lane] = r;
                }
                self.write_lanes(d, exec, &results);
            }
            Op::Bitrev | Op::Popcount | Op::Ffs | Op::Intl => {
                let d = o.dst(0)?.reg;
                let xs = self.gather_raw(&o.src(1)?.value, env.uniforms).0;
                let ys = if op == Op::Intl {
                    self.gather_raw(&o.src(2)?.value, env.uniforms).0
                } else {
                    [0; LANES]
                };
                for lane in lanes(exec) {
                    // 32-bit operations (applegpu's descriptions); a
                    // 16-bit destination keeps the low half.
                    let (x, y) = (xs[lane] as u32, ys[lane] as u32);
                    let r = match op {
                        Op::Bitrev => x.reverse_bits(),
                        Op::Popcount => x.count_ones(),
                        Op::Ffs => x.checked_ilog2().unwrap_or(u32::MAX),
                        _ => interleave_low_halves(x, y),
                    };
                    self.write(d, lane, u64::from(r));
                }
            }
            Op::Bfi | Op::Bfeil | Op::Extr | Op::Shlhi | Op::Shrhi | Op::Asr | Op::Asrh => {
                let d = o.dst(0)?.reg;
                let (a, b) = (o.src(1)?, o.src(2)?);
                let (c, m) = if matches!(op, Op::Asr | Op::Asrh) {
                    (None, 0)
                } else {
                    (Some(o.src(3)?), o.int(4)? as u32)
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
            _ => return Err(o.misrouted()),
        }
        Ok(Flow::Next)
    }
}

/// `intl`: bit i of `even` goes to bit 2i, bit i of `odd` to bit 2i+1,
/// for the low 16 bits of each (a Morton code).
fn interleave_low_halves(even: u32, odd: u32) -> u32 {
    agx_hw::layout::morton(even & 0xFFFF, odd & 0xFFFF) as u32
}
