//! Operand access: reading sources in every lane (registers, uniforms,
//! immediates, with the float source modifiers) and writing results and
//! register runs.

use agx_hw::isa::{Reg, RegRun, Size, Src, Value};

use super::{bits_of, sign_extend, truncate, SimdGroup, LANES, UNIFORMS};
use crate::usc::float::{canonical_f32, f32_to_half, ftz, half_to_f32, quiet_f16};

impl SimdGroup {
    pub(super) fn value_bits(
        &self,
        value: &Value,
        lane: usize,
        uniforms: &[u32; UNIFORMS],
    ) -> (u64, u32) {
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
            // Never executed: `run` refuses instructions with undefined
            // operands, and the matrix forms (the only ones with register
            // pairs), before they get here.
            Value::Undefined { .. } | Value::Pair(..) => (0, 32),
        }
    }

    /// A value in every lane (raw bits, zero-extended) and its width.
    /// Reading all lanes at once costs less than a lookup per lane.
    pub(super) fn gather_raw(
        &self,
        value: &Value,
        uniforms: &[u32; UNIFORMS],
    ) -> ([u64; LANES], u32) {
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
    pub(super) fn gather_f32(&self, src: &Src, uniforms: &[u32; UNIFORMS]) -> [f32; LANES] {
        let mut out = match &src.value {
            Value::Float(f) => [f.to_f32(); LANES],
            // The common case, straight from the register file.
            Value::Reg(reg, _) if reg.size == Size::S32 => {
                let lanes = &self.regs[usize::from(reg.half / 2)];
                std::array::from_fn(|lane| ftz(f32::from_bits(lanes[lane])))
            }
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
    pub(super) fn gather_int(&self, src: &Src, uniforms: &[u32; UNIFORMS]) -> [i128; LANES] {
        let (raw, width) = self.gather_raw(&src.value, uniforms);
        if src.sx && width < 64 {
            raw.map(|bits| i128::from(sign_extend(bits, width)))
        } else {
            raw.map(|bits| i128::from(truncate(bits, width)))
        }
    }

    /// A float source of a 16-bit operation: fp16 keeps its denormals, an
    /// fp32 source (a 32-bit register or uniform) flushes them, as every
    /// fp32 read does.
    pub(super) fn half_src(&self, src: &Src, lane: usize, uniforms: &[u32; UNIFORMS]) -> f64 {
        let value = match &src.value {
            Value::Float(f) => f64::from(f.to_f32()),
            value => {
                let (bits, width) = self.value_bits(value, lane, uniforms);
                if width == 16 {
                    f64::from(half_to_f32(bits))
                } else {
                    f64::from(ftz(f32::from_bits(bits as u32)))
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
    pub(super) fn raw_src(&self, src: &Src, lane: usize, uniforms: &[u32; UNIFORMS]) -> (u64, u32) {
        self.value_bits(&src.value, lane, uniforms)
    }

    /// Writes fp32 results to `dst` in the lanes of `exec`, each as
    /// [`SimdGroup::write_float`] writes one.
    pub(super) fn write_floats(&mut self, dst: Reg, exec: u32, values: &[f32; LANES]) {
        if dst.size != Size::S32 {
            for lane in super::lanes(exec) {
                self.write_float(dst, lane, values[lane]);
            }
            return;
        }
        let r = usize::from(dst.half / 2);
        self.written_cells = self.written_cells.max(r + 1);
        let cells = &mut self.regs[r];
        for (lane, (cell, value)) in cells.iter_mut().zip(values).enumerate() {
            let bits = canonical_f32(*value).to_bits();
            if exec & (1 << lane) != 0 {
                *cell = bits;
            }
        }
    }

    pub(super) fn write_float(&mut self, dst: Reg, lane: usize, value: f32) {
        match dst.size {
            Size::S16 => self.write(dst, lane, u64::from(quiet_f16(f32_to_half(value)))),
            _ => self.write(dst, lane, u64::from(canonical_f32(value).to_bits())),
        }
    }

    pub(super) fn write_run(&mut self, run: &RegRun, lane: usize, values: &[u32]) {
        for (i, value) in values.iter().enumerate().take(usize::from(run.count)) {
            self.write(run.reg(i as u16), lane, u64::from(*value));
        }
    }

    /// [`SimdGroup::read_run`] for each lane of `exec` (the others'
    /// values are zero), register by register. Not inlined: inlined into
    /// `execute`, piglit's texelFetch sweep ran 15% slower (the frame
    /// stayed the same size; what in the generated code cost it was not
    /// found).
    #[inline(never)]
    pub(super) fn read_run_lanes(&self, run: &RegRun, exec: u32) -> [[u32; 4]; LANES] {
        let mut values = [[0u32; 4]; LANES];
        for (i, reg) in (0..u16::from(run.count.min(4))).map(|i| (usize::from(i), run.reg(i))) {
            let cells = &self.regs[usize::from(reg.half / 2)];
            match reg.size {
                Size::S16 => {
                    let shift = 16 * u32::from(reg.half % 2);
                    for lane in super::lanes(exec) {
                        values[lane][i] = (cells[lane] >> shift) & 0xFFFF;
                    }
                }
                // A 64-bit register's value as 32 bits is its low half.
                Size::S32 | Size::S64 => {
                    for lane in super::lanes(exec) {
                        values[lane][i] = cells[lane];
                    }
                }
            }
        }
        values
    }

    pub(super) fn read_run(&self, run: &RegRun, lane: usize) -> [u32; 4] {
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

    pub(super) fn lane_value(&self, value: &Value, lane: usize, uniforms: &[u32; UNIFORMS]) -> u64 {
        self.value_bits(value, lane, uniforms).0
    }
}
