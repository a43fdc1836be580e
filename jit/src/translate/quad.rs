//! Four lanes at once: the ALU and exec-mask instructions on the host's
//! 128-bit vectors.
//!
//! The USC computes an instruction for its lanes side by side; the
//! register file keeps a register's 32 lanes next to each other, so four
//! neighbouring lanes of a register are one host vector (`i32x4`). A quad
//! is lanes `4g..4g + 4`: its code reads each register's four lanes once,
//! computes every instruction on all four (lanes outside the mask too:
//! the ALU has no side effects, and what it computes for them is never
//! stored), and stores each register it wrote with the lanes outside the
//! mask kept. An instruction with no vector form here (64-bit operands,
//! saturating integer adds, shifts by a register, bit counts, helper
//! conversions, fp16 results) runs as four scalar lanes, each lane's
//! registers taken out of the vectors and its results put back. The fp32
//! rare path (a result of the smallest normal's magnitude) is taken, for
//! the whole quad, only where some lane needs it.

use cranelift_codegen::ir::{ConstantData, Endianness};

use super::*;

/// A register's four lanes in a quad's code: the value now, whether the
/// code wrote it, and the value loaded from the register file (if it
/// was).
#[derive(Clone, Copy)]
pub(super) struct QuadCell {
    value: IrValue,
    written: bool,
    loaded: Option<IrValue>,
}

/// The vector state of a [`Lane`] building a quad's code.
pub(super) struct Quad {
    cells: [Option<QuadCell>; GPRS],
    /// While one instruction runs lane by lane: the lane (0-3) whose
    /// scalar code is being built.
    lane: Option<u8>,
    /// The quad's lanes in the loop's mask, as `i32x4` all-ones lanes.
    mask: IrValue,
}

/// Whether a value reads the same as four 32-bit lanes: any register or
/// uniform of at most 32 bits, or an immediate (every result a quad
/// computes is at most 32 bits wide, and the low 32 bits of a sum,
/// difference, product or bitwise result depend only on the low 32 bits
/// of its operands).
fn narrow(value: &Value) -> bool {
    match value {
        Value::Reg(reg, _) => reg.size != Size::S64,
        Value::Uniform(u) => u.size != Size::S64,
        Value::Imm(_) | Value::Float(_) => true,
        Value::Pair(..) | Value::Undefined { .. } => false,
    }
}

/// Whether an integer comparison's operand compares the same in 32 bits
/// (the interpreter compares in 64): an immediate must be a 32-bit value
/// of the comparison's signedness.
fn compares_narrow(cc: u32, value: &Value) -> bool {
    match value {
        Value::Imm(imm) if cc >= 4 => i32::try_from(*imm).is_ok(),
        Value::Imm(imm) => u32::try_from(*imm).is_ok(),
        other => narrow(other),
    }
}

/// Whether a quad computes `shape` as vectors (with `fma` when the host
/// has a vector fused multiply-add); otherwise it runs lane by lane.
pub(super) fn vectorizable(shape: &Shape<'_>, fma: bool) -> bool {
    let narrow_dst = |reg: &Reg| reg.size != Size::S64;
    match shape {
        Shape::MovImm { dst, .. } => narrow_dst(dst),
        Shape::IntAdd {
            dst,
            a,
            b,
            c,
            saturate,
            ..
        } => {
            saturate.is_none()
                && narrow_dst(dst)
                && narrow(&a.value)
                && narrow(&b.value)
                && c.as_ref().is_none_or(|c| narrow(&c.value))
        }
        Shape::Bitwise { dst, a, b, .. } => narrow_dst(dst) && narrow(a) && b.is_none_or(narrow),
        Shape::CompareSelect {
            float,
            cc,
            dst,
            a,
            b,
            x,
            y,
        } => {
            let compared = if *float {
                narrow(&a.value) && narrow(&b.value)
            } else {
                compares_narrow(*cc, &a.value) && compares_narrow(*cc, &b.value)
            };
            compared && narrow_dst(dst) && narrow(x) && narrow(y)
        }
        Shape::Bitfield {
            op,
            dst,
            a,
            b,
            shift,
            ..
        } => {
            let constant_shift = match op {
                Op::Bfi | Op::Bfeil | Op::Extr => matches!(shift, None | Some(Value::Imm(_))),
                // The amount is `b`: one for every lane.
                Op::Asr => matches!(b, Value::Imm(_) | Value::Uniform(_)),
                _ => false,
            };
            constant_shift && narrow_dst(dst) && narrow(a) && narrow(b)
        }
        Shape::Convert {
            mode,
            dst,
            src,
            to_zero,
        } => {
            matches!(mode, 0 | 1 | 6 | 7 | 10 | 11)
                && !to_zero
                && dst.size == Size::S32
                && narrow(src)
        }
        Shape::Float {
            op, dst, a, b, c, ..
        } => {
            dst.size == Size::S32
                && narrow(&a.value)
                && narrow(&b.value)
                && c.as_ref().is_none_or(|c| narrow(&c.value))
                && (*op != Op::Fmadd32 || fma)
        }
        Shape::Nop => true,
        Shape::ExecUpdate {
            float, cc, a, b, n, ..
        } => {
            let compared = if *float {
                narrow(&a.value) && narrow(&b.value)
            } else {
                compares_narrow(*cc, &a.value) && compares_narrow(*cc, &b.value)
            };
            compared && *n < 1 << 16
        }
        Shape::PopExec { n } => *n < 1 << 16,
        Shape::Bits { .. } | Shape::Half { .. } | Shape::Memory { .. } | Shape::Unary { .. } => {
            false
        }
    }
}

/// The flags of a bitcast between vector types (lane order spelled out,
/// as Cranelift asks of vector bitcasts).
fn lanes_flags() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

/// The flags of a quad's loads and stores: the register file and the
/// load buffer are 4-byte aligned, not necessarily 16.
fn quad_memory() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

impl Quad {
    /// A quad's state with nothing read yet, its lanes in the mask those
    /// of `bits` (bit k for lane k of the quad).
    pub(super) fn new(b: &mut FunctionBuilder<'_>, bits: IrValue) -> Box<Quad> {
        let lane_bits = b.func.dfg.constants.insert(ConstantData::from(
            [1u32, 2, 4, 8]
                .iter()
                .flat_map(|bit| bit.to_le_bytes())
                .collect::<Vec<u8>>(),
        ));
        let lane_bits = b.ins().vconst(types::I32X4, lane_bits);
        let spread = b.ins().splat(types::I32X4, bits);
        let mine = b.ins().band(spread, lane_bits);
        let none = Width::Quad.constant(b, 0);
        let mask = b.ins().icmp(IntCC::NotEqual, mine, none);
        Box::new(Quad {
            cells: [None; GPRS],
            lane: None,
            mask,
        })
    }
}

/// A loop over the quads of `mask` with at least one lane in it, running
/// `body` for each (the quad's number in `quad`, its four bits of the
/// mask the second argument); each register the body wrote is stored at
/// the end, its lanes outside the mask kept. The builder comes back
/// after the loop.
pub(super) fn quad_loop<'f>(
    b: FunctionBuilder<'f>,
    quad: cranelift_frontend::Variable,
    mask: IrValue,
    parts: &LaneParts,
    body: impl FnOnce(&mut Lane<'f>, IrValue),
) -> FunctionBuilder<'f> {
    mask_loop(b, quad, mask, 4, LANES / 4, parts, body)
}

impl Lane<'_> {
    /// Stores each register the quad's code wrote, its lanes outside the
    /// mask kept.
    pub(super) fn store_quad_cells(&mut self) {
        let Some(state) = self.quad.as_deref() else {
            return;
        };
        let mask = state.mask;
        let written: Vec<(usize, QuadCell)> = state
            .cells
            .iter()
            .enumerate()
            .filter_map(|(cell, entry)| entry.filter(|entry| entry.written).map(|e| (cell, e)))
            .collect();
        for (cell, entry) in written {
            let offset = (cell * LANES * 4) as i32;
            let old = match entry.loaded {
                Some(old) => old,
                None => self.quad_load(self.lane_base, offset),
            };
            let merged = self.b.ins().bitselect(mask, entry.value, old);
            self.b
                .ins()
                .store(quad_memory(), merged, self.lane_base, offset);
        }
    }

    fn quad_state(&mut self) -> &mut Quad {
        self.quad
            .as_deref_mut()
            .expect("vector code is built in a quad's loop")
    }

    /// The lane of the quad whose scalar code is being built, if one is.
    pub(super) fn quad_lane(&self) -> Option<u8> {
        self.quad.as_ref().and_then(|quad| quad.lane)
    }

    /// Four lanes' words at `offset` from `base` (`i32x4`).
    pub(super) fn quad_load(&mut self, base: IrValue, offset: i32) -> IrValue {
        self.b.ins().load(types::I32X4, quad_memory(), base, offset)
    }

    /// A register's four lanes (`i32x4`).
    pub(super) fn quad_cell(&mut self, cell: usize) -> IrValue {
        if let Some(entry) = self.quad_state().cells[cell] {
            return entry.value;
        }
        let value = self.b.ins().load(
            types::I32X4,
            quad_memory(),
            self.lane_base,
            (cell * LANES * 4) as i32,
        );
        self.quad_state().cells[cell] = Some(QuadCell {
            value,
            written: false,
            loaded: Some(value),
        });
        value
    }

    fn set_quad_cell(&mut self, cell: usize, value: IrValue) {
        let loaded = self.quad_state().cells[cell].and_then(|entry| entry.loaded);
        self.quad_state().cells[cell] = Some(QuadCell {
            value,
            written: true,
            loaded,
        });
    }

    fn splat_i32(&mut self, value: i64) -> IrValue {
        Width::Quad.constant(&mut self.b, value)
    }

    fn splat_f32(&mut self, value: f32) -> IrValue {
        let word = self.b.ins().f32const(value);
        self.b.ins().splat(types::F32X4, word)
    }

    fn as_floats(&mut self, words: IrValue) -> IrValue {
        self.b.ins().bitcast(types::F32X4, lanes_flags(), words)
    }

    fn as_words(&mut self, floats: IrValue) -> IrValue {
        self.b.ins().bitcast(types::I32X4, lanes_flags(), floats)
    }

    /// Runs `shape` for the quad: as vectors where it can, else lane by
    /// lane.
    pub(super) fn quad_instruction(&mut self, shape: &Shape<'_>) {
        if vectorizable(shape, self.vector_fma) {
            self.vector_instruction(shape);
        } else {
            self.lane_by_lane(shape);
        }
    }

    /// `shape` as scalar code for each of the quad's four lanes: each
    /// lane's registers taken out of the vectors as it reads them, the
    /// registers it wrote put back.
    fn lane_by_lane(&mut self, shape: &Shape<'_>) {
        let mut written: Vec<(usize, u8, IrValue)> = Vec::new();
        for lane in 0..4u8 {
            self.cells = [None; GPRS];
            self.quad_state().lane = Some(lane);
            self.instruction(shape);
            for (cell, state) in self.cells.iter().enumerate() {
                if let Some((value, true)) = state {
                    written.push((cell, lane, *value));
                }
            }
        }
        self.quad_state().lane = None;
        self.cells = [None; GPRS];
        let mut cells: Vec<usize> = written.iter().map(|&(cell, _, _)| cell).collect();
        cells.sort_unstable();
        cells.dedup();
        for cell in cells {
            let mut vector = self.quad_cell(cell);
            for &(_, lane, value) in written.iter().filter(|&&(c, _, _)| c == cell) {
                vector = self.b.ins().insertlane(vector, value, lane);
            }
            self.set_quad_cell(cell, vector);
        }
    }

    /// A value's bits as four 32-bit lanes: a 16-bit value
    /// zero-extended, an immediate's low 32 bits.
    pub(super) fn quad_raw(&mut self, value: &Value) -> IrValue {
        match value {
            Value::Reg(reg, _) => {
                let word = self.quad_cell(usize::from(reg.half / 2));
                match reg.size {
                    Size::S16 if reg.half % 2 == 1 => self.b.ins().ushr_imm_u(word, 16),
                    Size::S16 => {
                        let low = self.splat_i32(0xFFFF);
                        self.b.ins().band(word, low)
                    }
                    _ => word,
                }
            }
            Value::Uniform(u) => {
                let word = self.uniform(usize::from(u.half / 2));
                let word = match u.size {
                    Size::S16 if u.half % 2 == 1 => self.b.ins().ushr_imm_u(word, 16),
                    Size::S16 => self.b.ins().band_imm_u(word, 0xFFFF),
                    _ => word,
                };
                self.b.ins().splat(types::I32X4, word)
            }
            Value::Imm(imm) => self.splat_i32(*imm),
            Value::Float(f) => self.splat_i32(i64::from(f.to_f32().to_bits())),
            Value::Pair(..) | Value::Undefined { .. } => self.splat_i32(0),
        }
    }

    /// An integer source: a 16-bit one sign-extended with `.sx` (at 32
    /// bits and more, the low 32 bits are the same either way).
    fn quad_int(&mut self, src: &Src) -> IrValue {
        let bits = self.quad_raw(&src.value);
        if src.sx && width_of(&src.value) == 16 {
            self.sign_extend_lanes(bits, 16)
        } else {
            bits
        }
    }

    /// The low `width` bits of each lane, sign-extended.
    fn sign_extend_lanes(&mut self, bits: IrValue, width: u32) -> IrValue {
        let up = self.b.ins().ishl_imm_u(bits, i64::from(32 - width));
        self.b.ins().sshr_imm_u(up, i64::from(32 - width))
    }

    /// Writes the low bits of each lane to `reg` (16 or 32 bits).
    pub(super) fn quad_write(&mut self, reg: Reg, value: IrValue) {
        let cell = usize::from(reg.half / 2);
        match reg.size {
            Size::S16 => {
                let old = self.quad_cell(cell);
                let low_mask = self.splat_i32(0xFFFF);
                let low = self.b.ins().band(value, low_mask);
                let new = if reg.half % 2 == 1 {
                    let kept = self.b.ins().band(old, low_mask);
                    let moved = self.b.ins().ishl_imm_u(low, 16);
                    self.b.ins().bor(kept, moved)
                } else {
                    let high_mask = self.splat_i32(0xFFFF_0000);
                    let kept = self.b.ins().band(old, high_mask);
                    self.b.ins().bor(kept, low)
                };
                self.set_quad_cell(cell, new);
            }
            _ => self.set_quad_cell(cell, value),
        }
    }

    /// fp32 lanes with denormals made zeros of their sign.
    fn flush_denormal_lanes(&mut self, words: IrValue) -> IrValue {
        let exponent_mask = self.splat_i32(0x7F80_0000);
        let exponent = self.b.ins().band(words, exponent_mask);
        let zero = self.splat_i32(0);
        let tiny = self.b.ins().icmp(IntCC::Equal, exponent, zero);
        let sign_mask = self.splat_i32(0x8000_0000);
        let sign = self.b.ins().band(words, sign_mask);
        self.b.ins().bitselect(tiny, sign, words)
    }

    /// An fp32 source as four lanes (`f32x4`), as [`Lane::float`] reads
    /// one.
    fn quad_float(&mut self, src: &Src) -> IrValue {
        let words = self.quad_raw(&src.value);
        let mut value = if width_of(&src.value) == 16 {
            self.widen_half_lanes(words)
        } else {
            let words = self.flush_denormal_lanes(words);
            self.as_floats(words)
        };
        if src.abs {
            value = self.b.ins().fabs(value);
        }
        if src.neg {
            value = self.b.ins().fneg(value);
        }
        value
    }

    /// The fp16 values in the low 16 bits of each lane as fp32, exactly
    /// ([`Lane::widen_half`] for four lanes).
    fn widen_half_lanes(&mut self, words: IrValue) -> IrValue {
        let k = |this: &mut Self, v: i64| this.splat_i32(v);
        let mask = k(self, 0xFFFF);
        let half = self.b.ins().band(words, mask);
        let sign_bit = k(self, 0x8000);
        let sign = self.b.ins().band(half, sign_bit);
        let sign = self.b.ins().ishl_imm_u(sign, 16);
        let exponent = self.b.ins().ushr_imm_u(half, 10);
        let exponent_mask = k(self, 0x1F);
        let exponent = self.b.ins().band(exponent, exponent_mask);
        let mantissa_mask = k(self, 0x3FF);
        let mantissa = self.b.ins().band(half, mantissa_mask);
        let fraction = self.b.ins().ishl_imm_u(mantissa, 13);
        let bias = k(self, 112);
        let rebiased = self.b.ins().iadd(exponent, bias);
        let rebiased = self.b.ins().ishl_imm_u(rebiased, 23);
        let normal = self.b.ins().bor(rebiased, fraction);
        let normal = self.b.ins().bor(normal, sign);
        let infinity = k(self, 0x7F80_0000);
        let special = self.b.ins().bor(fraction, infinity);
        let zero = k(self, 0);
        let is_nan = self.b.ins().icmp(IntCC::NotEqual, mantissa, zero);
        let quiet_bit = k(self, 0x0040_0000);
        let quiet = self.b.ins().bor(special, quiet_bit);
        let special = self.b.ins().bitselect(is_nan, quiet, special);
        let special = self.b.ins().bor(special, sign);
        let small = self.b.ins().fcvt_from_sint(types::F32X4, mantissa);
        let scale = self.splat_f32(1.0 / 16_777_216.0);
        let small = self.b.ins().fmul(small, scale);
        let small = self.as_words(small);
        let small = self.b.ins().bor(small, sign);
        let top = k(self, 0x1F);
        let is_special = self.b.ins().icmp(IntCC::Equal, exponent, top);
        let is_small = self.b.ins().icmp(IntCC::Equal, exponent, zero);
        let bits = self.b.ins().bitselect(is_special, special, normal);
        let bits = self.b.ins().bitselect(is_small, small, bits);
        self.as_floats(bits)
    }

    /// Whether `a cc b` holds in each lane (all-ones lanes where it does).
    fn quad_condition(&mut self, float: bool, cc: u32, a: &Src, b: &Src) -> IrValue {
        if float {
            let x = self.quad_float(a);
            let y = self.quad_float(b);
            return float_condition(&mut self.b, cc, x, y);
        }
        let mut x = self.quad_raw(&a.value);
        let mut y = self.quad_raw(&b.value);
        if cc >= 4 {
            if width_of(&a.value) == 16 {
                x = self.sign_extend_lanes(x, 16);
            }
            if width_of(&b.value) == 16 {
                y = self.sign_extend_lanes(y, 16);
            }
        }
        self.b.ins().icmp(int_cc(cc), x, y)
    }

    /// An fp32 add, multiply or fused multiply-add of four lanes; where a
    /// lane's result has the smallest normal's magnitude, every lane is
    /// computed again as [`Lane::instruction`] computes one.
    fn quad_arithmetic(&mut self, op: Op, x: IrValue, y: IrValue, z: Option<IrValue>) -> IrValue {
        let rounded = match (op, z) {
            (Op::Fmadd32, Some(z)) => self.b.ins().fma(x, y, z),
            (Op::Fadd32, _) => self.b.ins().fadd(x, y),
            _ => self.b.ins().fmul(x, y),
        };
        let magnitude = self.b.ins().fabs(rounded);
        let smallest = self.splat_f32(MIN_NORMAL_F32);
        let at_smallest = self.b.ins().fcmp(FloatCC::Equal, magnitude, smallest);
        let any = self.b.ins().vany_true(at_smallest);
        let rare = self.b.create_block();
        let join = self.b.create_block();
        self.b.append_block_param(join, types::F32X4);
        self.b.ins().brif(any, rare, &[], join, &[rounded.into()]);
        self.b.switch_to_block(rare);
        let mut result = rounded;
        for lane in 0..4u8 {
            let xk = self.b.ins().extractlane(x, lane);
            let yk = self.b.ins().extractlane(y, lane);
            let value = match (op, z) {
                (Op::Fmadd32, Some(z)) => {
                    let zk = self.b.ins().extractlane(z, lane);
                    self.fma(xk, yk, zk)
                }
                _ => {
                    let (rounded, exact) = if op == Op::Fadd32 {
                        let rounded = self.b.ins().fadd(xk, yk);
                        let wide_x = self.b.ins().fpromote(types::F64, xk);
                        let wide_y = self.b.ins().fpromote(types::F64, yk);
                        (rounded, self.b.ins().fadd(wide_x, wide_y))
                    } else {
                        let rounded = self.b.ins().fmul(xk, yk);
                        let wide_x = self.b.ins().fpromote(types::F64, xk);
                        let wide_y = self.b.ins().fpromote(types::F64, yk);
                        (rounded, self.b.ins().fmul(wide_x, wide_y))
                    };
                    self.flush_before_rounding(rounded, exact)
                }
            };
            result = self.b.ins().insertlane(result, value, lane);
        }
        self.b.ins().jump(join, &[result.into()]);
        self.b.switch_to_block(join);
        self.b.block_params(join)[0]
    }

    /// A bitfield operation with a constant shift (or `asr` by an amount
    /// the same for every lane), on 32-bit lanes: the low 32 bits of what
    /// [`Lane::bitfield`] computes in 128.
    fn quad_bitfield(
        &mut self,
        op: Op,
        a: &Value,
        b: &Value,
        shift: Option<&Value>,
        mask: u128,
    ) -> IrValue {
        let x = self.quad_raw(a);
        let y = self.quad_raw(b);
        let sh = match shift {
            Some(Value::Imm(imm)) => (*imm as u64 & 0x7F) as u32,
            _ => 0,
        };
        let low_mask = mask as u32;
        let zero = self.splat_i32(0);
        if op == Op::Asr {
            // The value sign-extended from its width (at most 32), shifted
            // right arithmetically by the amount's low 7 bits, at most 63:
            // past 31, every bit of the low 32 is the sign.
            let width = width_of(a).min(32);
            let value = if width < 32 {
                self.sign_extend_lanes(x, width)
            } else {
                x
            };
            return match b {
                Value::Imm(imm) => {
                    let amount = (*imm as u64 as u32 & 0x7F).min(31);
                    self.b.ins().sshr_imm_u(value, i64::from(amount))
                }
                _ => {
                    // A uniform: the same amount for every lane.
                    let amount = self.b.ins().extractlane(y, 0);
                    let amount = self.b.ins().band_imm_u(amount, 0x7F);
                    let most = self.b.ins().iconst(types::I32, 31);
                    let amount = self.b.ins().umin(amount, most);
                    self.b.ins().sshr(value, amount)
                }
            };
        }
        match op {
            Op::Bfi => {
                let placed = (mask << sh) as u32;
                let keep = self.splat_i32(i64::from(!placed));
                let kept = self.b.ins().band(x, keep);
                if sh >= 32 {
                    return kept;
                }
                let field_mask = self.splat_i32(i64::from(low_mask));
                let field = self.b.ins().band(y, field_mask);
                let field = self.b.ins().ishl_imm_u(field, i64::from(sh));
                self.b.ins().bor(kept, field)
            }
            Op::Bfeil => {
                let keep = self.splat_i32(i64::from(!low_mask));
                let kept = self.b.ins().band(x, keep);
                let moved = if sh >= 32 {
                    zero
                } else {
                    self.b.ins().ushr_imm_u(y, i64::from(sh))
                };
                let field_mask = self.splat_i32(i64::from(low_mask));
                let field = self.b.ins().band(moved, field_mask);
                self.b.ins().bor(kept, field)
            }
            _ => {
                // Extr: the low 32 bits of ((y << 32) | x) >> sh.
                let moved = match sh {
                    0 => x,
                    1..=31 => {
                        let low = self.b.ins().ushr_imm_u(x, i64::from(sh));
                        let high = self.b.ins().ishl_imm_u(y, i64::from(32 - sh));
                        self.b.ins().bor(low, high)
                    }
                    32 => y,
                    33..=63 => self.b.ins().ushr_imm_u(y, i64::from(sh - 32)),
                    _ => zero,
                };
                let field_mask = self.splat_i32(i64::from(low_mask));
                self.b.ins().band(moved, field_mask)
            }
        }
    }

    /// `.sat` for four lanes: NaN and negative values (-0 too) to +0,
    /// else at most 1.
    fn saturate_lanes(&mut self, r: IrValue) -> IrValue {
        let is_nan = self.b.ins().fcmp(FloatCC::Unordered, r, r);
        let words = self.as_words(r);
        let zero = self.splat_i32(0);
        let negative = self.b.ins().icmp(IntCC::SignedLessThan, words, zero);
        let to_zero = self.b.ins().bor(is_nan, negative);
        let one = self.splat_f32(1.0);
        let capped = self.b.ins().fmin(r, one);
        let capped = self.as_words(capped);
        self.b.ins().bitselect(to_zero, zero, capped)
    }

    /// Computes a vectorizable `shape` for the quad's four lanes.
    fn vector_instruction(&mut self, shape: &Shape<'_>) {
        match shape {
            Shape::MovImm { dst, imm } => {
                let value = self.splat_i32(*imm);
                self.quad_write(*dst, value);
            }
            Shape::IntAdd {
                dst,
                a,
                b,
                c,
                shift,
                subtract,
                ..
            } => {
                let x = self.quad_int(a);
                let y = self.quad_int(b);
                let z = c.as_ref().map(|c| self.quad_int(c));
                let r = int_add(&mut self.b, Width::Quad, (x, y, z), *shift, *subtract);
                self.quad_write(*dst, r);
            }
            Shape::Bitwise { dst, a, b, table } => {
                let x = self.quad_raw(a);
                let y = b.map(|b| self.quad_raw(b));
                let r = truth_table(&mut self.b, Width::Quad, *table, x, y);
                self.quad_write(*dst, r);
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
                let taken = self.quad_condition(*float, *cc, a, b);
                let x = self.quad_raw(x);
                let y = self.quad_raw(y);
                let r = self.b.ins().bitselect(taken, x, y);
                self.quad_write(*dst, r);
            }
            Shape::Bitfield {
                op,
                dst,
                a,
                b,
                shift,
                mask,
            } => {
                let r = self.quad_bitfield(*op, a, b, *shift, *mask);
                self.quad_write(*dst, r);
            }
            Shape::Convert { mode, dst, src, .. } => {
                let bits = self.quad_raw(src);
                let from_bits = match mode {
                    0 | 1 => 8,
                    6 | 7 => 16,
                    _ => 32,
                };
                let value = if mode % 2 == 1 {
                    if from_bits < 32 {
                        self.sign_extend_lanes(bits, from_bits)
                    } else {
                        bits
                    }
                } else if from_bits < 32 {
                    let mask = self.splat_i32((1 << from_bits) - 1);
                    self.b.ins().band(bits, mask)
                } else {
                    bits
                };
                let f = if mode % 2 == 0 && from_bits == 32 {
                    self.b.ins().fcvt_from_uint(types::F32X4, value)
                } else {
                    self.b.ins().fcvt_from_sint(types::F32X4, value)
                };
                let words = self.as_words(f);
                self.quad_write(*dst, words);
            }
            Shape::Float {
                op,
                dst,
                a,
                b,
                c,
                saturate,
            } => {
                let x = self.quad_float(a);
                let y = self.quad_float(b);
                let z = match c {
                    Some(c) if *op == Op::Fmadd32 => Some(self.quad_float(c)),
                    _ => None,
                };
                let r = self.quad_arithmetic(*op, x, y, z);
                let words = if *saturate {
                    self.saturate_lanes(r)
                } else {
                    self.as_words(r)
                };
                // Written as the ALU writes: denormals flushed, a NaN the
                // default NaN.
                let words = self.flush_denormal_lanes(words);
                let r = self.as_floats(words);
                let is_nan = self.b.ins().fcmp(FloatCC::Unordered, r, r);
                let default_nan = self.splat_i32(DEFAULT_NAN_F32);
                let words = self.b.ins().bitselect(is_nan, default_nan, words);
                self.quad_write(*dst, words);
            }
            Shape::Nop => {}
            Shape::ExecUpdate { .. } | Shape::PopExec { .. } => {
                self.quad_exec_update(shape);
            }
            Shape::Bits { .. }
            | Shape::Half { .. }
            | Shape::Memory { .. }
            | Shape::Unary { .. } => {
                unreachable!("not vectorizable: run lane by lane")
            }
        }
    }

    /// An exec-mask instruction for the quad's lanes: each lane's `r0l`
    /// nesting count updated; the lanes whose new count is 0 (all-ones
    /// lanes) come back.
    pub(super) fn quad_exec_update(&mut self, shape: &Shape<'_>) -> IrValue {
        let word = self.quad_cell(0);
        let low_mask = self.splat_i32(0xFFFF);
        let v = self.b.ins().band(word, low_mask);
        let count = match shape {
            Shape::ExecUpdate {
                op,
                float,
                cc,
                invert,
                a,
                b,
                n,
            } => {
                let holds = self.quad_condition(*float, *cc, a, b);
                let taken = if *invert {
                    self.b.ins().bnot(holds)
                } else {
                    holds
                };
                nesting_count_after(&mut self.b, Width::Quad, Some((*op, taken)), v, *n)
            }
            Shape::PopExec { n } => nesting_count_after(&mut self.b, Width::Quad, None, v, *n),
            _ => unreachable!("an exec-mask instruction"),
        };
        let low = self.b.ins().band(count, low_mask);
        let high_mask = self.splat_i32(0xFFFF_0000);
        let high = self.b.ins().band(word, high_mask);
        let word = self.b.ins().bor(high, low);
        self.set_quad_cell(0, word);
        let zero = self.splat_i32(0);
        self.b.ins().icmp(IntCC::Equal, low, zero)
    }
}
