//! Memory access: device loads and stores through the MMU, uniform
//! stores, and threadgroup (shared) memory loads and stores.

use agx_hw::isa::{Op, Operand, Size, Value};

use super::{lanes, sign_extend, unsupported, Env, ExecError, Flow, Operands, SimdGroup, UNIFORMS};
use crate::usc::formats::{self, ElementFormat};
use crate::usc::memory::AccessKind;

impl SimdGroup {
    /// Executes a device, uniform or threadgroup memory instruction.
    #[inline(always)]
    pub(super) fn load_store(
        &mut self,
        o: &Operands<'_>,
        env: &mut Env<'_>,
    ) -> Result<Flow, ExecError> {
        match o.ins.op {
            Op::DeviceLoad | Op::DeviceStore => self.device_memory(o, env)?,
            Op::UniformStore => self.uniform_store(o, env)?,
            Op::ThreadgroupLoad | Op::ThreadgroupStore => self.threadgroup_memory(o, env)?,
            _ => return Err(o.misrouted()),
        }
        Ok(Flow::Next)
    }

    pub(super) fn device_memory(
        &mut self,
        o: &Operands<'_>,
        env: &mut Env<'_>,
    ) -> Result<(), ExecError> {
        let (ins, exec, pc) = (o.ins, o.exec, o.pc);
        let ops = &ins.operands;
        let (
            Some(format),
            Some(mask),
            Some(Operand::Regs(data)),
            Some(Operand::Value(base)),
            Some(Operand::Value(offset)),
            Some(signedness),
            Some(shift),
        ) = (
            ins.int(1),
            ins.int(2),
            ops.get(3),
            ops.get(4),
            ops.get(5),
            ins.int(6),
            ins.int(7),
        )
        else {
            return Err(unsupported(pc, "malformed memory instruction"));
        };
        let format = ElementFormat::from_code(format)
            .ok_or_else(|| unsupported(pc, format!("memory format {format}")))?;
        let half = data.first.size == Size::S16;
        if half && format == ElementFormat::I32 {
            return Err(unsupported(pc, "i32 elements in 16-bit registers"));
        }
        let store = ins.op == Op::DeviceStore;
        for lane in lanes(exec) {
            let base_address = self.lane_value(base, lane, env.uniforms);
            let index = match offset {
                Value::Imm(imm) => *imm,
                Value::Reg(reg, _) if signedness == 0 => sign_extend(self.read(*reg, lane), 32),
                other => self.lane_value(other, lane, env.uniforms) as i64,
            };
            let address =
                base_address.wrapping_add((index << (format.shift() + shift as u32)) as u64);
            let mut packed = [0u8; 4];
            if format.packed() {
                env.memory
                    .read(address & !3, &mut packed, AccessKind::Read)
                    .map_err(|fault| ExecError::Memory { pc, fault })?;
            }
            for (register, component) in (0..4).filter(|c| mask & (1 << c) != 0).enumerate() {
                let reg = data.reg(register as u16);
                let size = 1usize << format.shift();
                let element = if format.packed() {
                    address & !3
                } else {
                    // Unaligned addresses round down to the element size.
                    (address & !(size as u64 - 1)).wrapping_add((component * size) as u64)
                };
                if store {
                    let value = self.read(reg, lane) as u32;
                    let mut bytes = if format.packed() { packed } else { [0u8; 4] };
                    if !formats::store(format, &mut bytes, component, value, half) {
                        return Err(unsupported(pc, format!("stores of {format:?}")));
                    }
                    if format.packed() {
                        packed = bytes;
                    } else {
                        env.memory
                            .write(element, &bytes[..size])
                            .map_err(|fault| ExecError::Memory { pc, fault })?;
                    }
                } else {
                    let mut bytes = packed;
                    if !format.packed() {
                        env.memory
                            .read(element, &mut bytes[..size], AccessKind::Read)
                            .map_err(|fault| ExecError::Memory { pc, fault })?;
                    }
                    self.write(
                        reg,
                        lane,
                        u64::from(formats::load(format, &bytes, component, half)),
                    );
                }
            }
            if store && format.packed() {
                env.memory
                    .write(address & !3, &packed)
                    .map_err(|fault| ExecError::Memory { pc, fault })?;
            }
        }
        Ok(())
    }

    pub(super) fn uniform_store(
        &mut self,
        o: &Operands<'_>,
        env: &mut Env<'_>,
    ) -> Result<(), ExecError> {
        let (ins, exec, pc) = (o.ins, o.exec, o.pc);
        let (Some(mask), Some(Operand::Regs(data)), Some(Operand::Value(offset)), Some(shift)) = (
            ins.int(2),
            ins.operands.get(4),
            ins.operands.get(5),
            ins.int(6),
        ) else {
            return Err(unsupported(pc, "malformed uniform_store"));
        };
        if shift != 0 || data.first.size != Size::S16 {
            return Err(unsupported(pc, "uniform_store other than the 16-bit form"));
        }
        let Some(lane) = lanes(exec).next() else {
            return Ok(());
        };
        let first_half = self.lane_value(offset, lane, env.uniforms) as i64;
        for (i, component) in (0..4).filter(|c| mask & (1 << c) != 0).enumerate() {
            let half = first_half.saturating_add(component);
            if !(0..(UNIFORMS as i64 * 2)).contains(&half) {
                return Err(ExecError::UniformBounds { pc, half });
            }
            let value = self.read(data.reg(i as u16), lane) as u32;
            let slot = &mut env.uniforms[(half / 2) as usize];
            let shift = 16 * (half % 2) as u32;
            *slot = (*slot & !(0xFFFF << shift)) | ((value & 0xFFFF) << shift);
        }
        Ok(())
    }

    pub(super) fn threadgroup_memory(
        &mut self,
        o: &Operands<'_>,
        env: &mut Env<'_>,
    ) -> Result<(), ExecError> {
        let (ins, exec, pc) = (o.ins, o.exec, o.pc);
        let ops = &ins.operands;
        let (
            Some(format),
            Some(mask),
            Some(Operand::Regs(data)),
            Some(Operand::Value(base)),
            Some(Operand::Value(index)),
        ) = (ins.int(0), ins.int(1), ops.get(2), ops.get(3), ops.get(4))
        else {
            return Err(unsupported(pc, "malformed threadgroup access"));
        };
        let format = ElementFormat::from_code(format)
            .ok_or_else(|| unsupported(pc, format!("memory format {format}")))?;
        if format.packed() {
            return Err(unsupported(pc, "packed formats in threadgroup memory"));
        }
        let half = data.first.size == Size::S16;
        if half && format == ElementFormat::I32 {
            return Err(unsupported(pc, "i32 elements in 16-bit registers"));
        }
        let size = 1usize << format.shift();
        let store = ins.op == Op::ThreadgroupStore;
        for lane in lanes(exec) {
            let base_bytes = match base {
                Value::Imm(_) => 0,
                other => self.lane_value(other, lane, env.uniforms) as i64,
            };
            let index = match index {
                Value::Imm(imm) => *imm,
                other => self.lane_value(other, lane, env.uniforms) as i64,
            };
            for (register, component) in (0..4i64).filter(|c| mask & (1 << c) != 0).enumerate() {
                // Checked: the decoder gives at most 32-bit operands, but
                // register values are client data and must not reach an
                // overflow.
                let start = index
                    .checked_add(component)
                    .and_then(|i| i.checked_mul(size as i64))
                    .and_then(|i| i.checked_add(base_bytes));
                let range = start.and_then(|start| {
                    let start = usize::try_from(start).ok()?;
                    let end = start.checked_add(size)?;
                    (end <= env.threadgroup.len()).then_some(start..end)
                });
                let Some(range) = range else {
                    return Err(ExecError::ThreadgroupBounds {
                        pc,
                        offset_bytes: start.unwrap_or(i64::MAX),
                        size_bytes: env.threadgroup.len(),
                    });
                };
                let bytes = &mut env.threadgroup[range];
                let reg = data.reg(register as u16);
                if store {
                    let mut buf = [0u8; 4];
                    formats::store(
                        format,
                        &mut buf,
                        component as usize,
                        self.read(reg, lane) as u32,
                        half,
                    );
                    bytes.copy_from_slice(&buf[..size]);
                } else {
                    let mut buf = [0u8; 4];
                    buf[..size].copy_from_slice(bytes);
                    self.write(
                        reg,
                        lane,
                        u64::from(formats::load(format, &buf, component as usize, half)),
                    );
                }
            }
        }
        Ok(())
    }
}
