//! Memory access: device loads, stores and atomics through the MMU,
//! uniform stores, the state stores that bind descriptors from a heap,
//! and threadgroup (shared) memory loads, stores and atomics.

use agx_hw::isa::{Op, Operand, RegRun, Size, Value};

use super::{
    lanes, sign_extend, unsupported, Env, ExecError, Flow, Operands, SimdGroup, LANES, UNIFORMS,
};
use crate::usc::formats::{self, ElementFormat};
use crate::usc::io::StateKind;
use crate::usc::memory::AccessKind;
use crate::usc::trace::LaneAccess;

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
            Op::Atomic => self.atomic(o, env)?,
            Op::ThreadgroupAtomic => self.threadgroup_atomic(o, env)?,
            Op::TexStateStore | Op::SamplerStateStore => self.state_store(o, env)?,
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
        let address_of = |group: &SimdGroup, lane: usize, env: &Env<'_>| {
            let base_address = group.lane_value(base, lane, env.uniforms);
            let index = group.memory_index(offset, signedness, lane, env);
            base_address.wrapping_add((index << (format.shift() + shift as u32)) as u64)
        };
        if !format.packed() {
            // Neither the base nor the index in a register: every lane
            // reaches the same address.
            let lane_invariant =
                !matches!(base, Value::Reg(..)) && !matches!(offset, Value::Reg(..));
            let mut lane_addresses = [0u64; LANES];
            if lane_invariant {
                lane_addresses = [address_of(self, 0, env); LANES];
            } else {
                for lane in lanes(exec) {
                    lane_addresses[lane] = address_of(self, lane, env);
                }
            }
            return self.device_elements(
                ElementAccess {
                    format,
                    mask: mask as u8,
                    data,
                    half,
                    store,
                    lane_invariant,
                },
                exec,
                pc,
                &lane_addresses,
                env,
            );
        }
        let traced = self.traced_in(exec);
        for lane in lanes(exec) {
            // One word holds every component.
            let word_address = address_of(self, lane, env) & !3;
            if traced == Some(lane) {
                self.trace_access(LaneAccess {
                    kind: if store { "store" } else { "load" },
                    address: Some(word_address),
                    size_bytes: 4,
                    detail: String::new(),
                });
            }
            let mut word = [0u8; 4];
            let every = format.component_mask();
            if !store || mask as u8 & every != every {
                env.memory
                    .read(word_address, &mut word, AccessKind::Read)
                    .map_err(|fault| ExecError::Memory { pc, fault })?;
            }
            self.packed_word(format, &mut word, mask as u8, data, lane, store, half);
            if store {
                env.memory
                    .write(word_address, &word)
                    .map_err(|fault| ExecError::Memory { pc, fault })?;
            }
        }
        Ok(())
    }

    /// A device load or store of whole elements, one per component the
    /// mask names (an unaligned address rounds down to the element size):
    /// every active lane's elements in lane order, then component order,
    /// through the memory's element accessors, so that the first fault is
    /// the one lane-by-lane accesses would meet. A load whose address is
    /// the same in every lane reads its elements once for the group.
    fn device_elements(
        &mut self,
        access: ElementAccess<'_>,
        exec: u32,
        pc: u64,
        lane_addresses: &[u64; LANES],
        env: &mut Env<'_>,
    ) -> Result<(), ExecError> {
        let ElementAccess {
            format,
            mask,
            data,
            half,
            store,
            lane_invariant,
        } = access;
        if exec == 0 {
            return Ok(());
        }
        let size = 1usize << format.shift();
        // (register of the run, component) for each named component.
        let mut named = [(0u16, 0usize); 4];
        let mut count = 0;
        for component in (0..4).filter(|c| mask & (1 << c) != 0) {
            named[count] = (count as u16, component);
            count += 1;
        }
        let named = &named[..count];
        let element = |address: u64, component: usize| {
            (address & !(size as u64 - 1)).wrapping_add((component * size) as u64)
        };
        let fault = |fault| ExecError::Memory { pc, fault };
        if let Some(lane) = self.traced_in(exec) {
            for &(_, component) in named {
                self.trace_access(LaneAccess {
                    kind: if store { "store" } else { "load" },
                    address: Some(element(lane_addresses[lane], component)),
                    size_bytes: size as u32,
                    detail: String::new(),
                });
            }
        }
        if lane_invariant && !store {
            let address = lane_addresses[exec.trailing_zeros() as usize];
            let mut addresses = [0u64; 4];
            for (slot, &(_, component)) in addresses.iter_mut().zip(named) {
                *slot = element(address, component);
            }
            let mut words = [0u32; 4];
            env.memory
                .read_elements(&addresses[..count], size, &mut words[..count])
                .map_err(fault)?;
            for (&(register, component), word) in named.iter().zip(words) {
                let value = formats::load(format, &word.to_le_bytes(), component, half);
                self.write_lanes(data.reg(register), exec, &[u64::from(value); LANES]);
            }
            return Ok(());
        }
        let mut addresses = [0u64; 4 * LANES];
        let mut words = [0u32; 4 * LANES];
        let mut elements = 0;
        for lane in lanes(exec) {
            let address = lane_addresses[lane];
            for &(register, component) in named {
                addresses[elements] = element(address, component);
                if store {
                    let mut bytes = [0u8; 4];
                    let value = self.read(data.reg(register), lane) as u32;
                    formats::store(format, &mut bytes, component, value, half);
                    words[elements] = u32::from_le_bytes(bytes);
                }
                elements += 1;
            }
        }
        if store {
            return env
                .memory
                .write_elements(&addresses[..elements], size, &words[..elements])
                .map_err(fault);
        }
        env.memory
            .read_elements(&addresses[..elements], size, &mut words[..elements])
            .map_err(fault)?;
        for (k, &(register, component)) in named.iter().enumerate() {
            let mut values = [0u64; LANES];
            for (lane, word) in lanes(exec).zip(words[k..elements].iter().step_by(count)) {
                values[lane] =
                    u64::from(formats::load(format, &word.to_le_bytes(), component, half));
            }
            self.write_lanes(data.reg(register), exec, &values);
        }
        Ok(())
    }

    /// `atomic`: for each active lane in turn, a read-modify-write of the
    /// 32-bit word at base + index x 4 (the index extended as the
    /// signedness operand says), the old value to the destination.
    fn atomic(&mut self, o: &Operands<'_>, env: &mut Env<'_>) -> Result<(), ExecError> {
        let (ins, exec, pc) = (o.ins, o.exec, o.pc);
        let ops = &ins.operands;
        let (
            Some(op),
            Some(Operand::Value(dest)),
            Some(Operand::Value(base)),
            Some(Operand::Value(offset)),
            Some(signedness),
            Some(Operand::Regs(data)),
        ) = (
            ins.int(0),
            ops.get(2),
            ops.get(3),
            ops.get(4),
            ins.int(5),
            ops.get(6),
        )
        else {
            return Err(unsupported(pc, "malformed atomic"));
        };
        let dest = atomic_destination(dest, pc)?;
        let op = AtomicOp::from_code(op)
            .ok_or_else(|| unsupported(pc, format!("atomic operation {op}")))?;
        // Bits 26, 31, 44 and 46 are set in every atomic Mesa emits (bit 45
        // follows the GPU); applegpu reads bits 45-46 of a compare-exchange
        // as 64-bit min/max. Anything else is not modelled.
        let mesa_bits = (ins.int(7), ins.int(8), ins.int(9), ins.int(10));
        if !matches!(mesa_bits, (Some(1 | 3), Some(1), Some(1), Some(1))) {
            return Err(unsupported(
                pc,
                "an atomic whose bits 26, 31, 44 and 46 are not all set (not modelled)",
            ));
        }
        let traced = self.traced_in(exec);
        for lane in lanes(exec) {
            let base_address = self.lane_value(base, lane, env.uniforms);
            let index = self.memory_index(offset, signedness, lane, env);
            // Unaligned addresses round down to the word, as loads do.
            let address = base_address.wrapping_add((index << 2) as u64) & !3;
            let value = self.read(data.reg(0), lane) as u32;
            // Only compare-exchange has a second data register.
            let compare = if op == AtomicOp::CompareExchange {
                self.read(data.reg(1), lane) as u32
            } else {
                0
            };
            let old = env
                .memory
                .atomic_u32(address, &mut |old| op.apply(old, value, compare))
                .map_err(|fault| ExecError::Memory { pc, fault })?;
            if traced == Some(lane) {
                self.trace_access(LaneAccess {
                    kind: "atomic",
                    address: Some(address),
                    size_bytes: 4,
                    detail: format!("{op:?} {value:#x}: found {old:#x}"),
                });
            }
            if let Some(dest) = dest {
                self.write(dest, lane, u64::from(old));
            }
        }
        Ok(())
    }

    /// `threadgroup_atomic`: for each active lane in turn, a
    /// read-modify-write of the 32-bit word of threadgroup memory at the
    /// base plus 4 x the index (bytes), the old value to the destination. The lanes of a
    /// threadgroup run on one host thread, one after another, so each
    /// operation is indivisible.
    fn threadgroup_atomic(&mut self, o: &Operands<'_>, env: &mut Env<'_>) -> Result<(), ExecError> {
        let (ins, exec, pc) = (o.ins, o.exec, o.pc);
        let (
            Some(op),
            Some(Operand::Value(dest)),
            Some(Operand::Value(base)),
            Some(Operand::Value(index)),
            Some(Operand::Regs(data)),
        ) = (
            ins.int(0),
            ins.operands.get(1),
            ins.operands.get(2),
            ins.operands.get(3),
            ins.operands.get(4),
        )
        else {
            return Err(unsupported(pc, "malformed threadgroup atomic"));
        };
        let op = AtomicOp::from_code(op)
            .ok_or_else(|| unsupported(pc, format!("atomic operation {op}")))?;
        // Mesa emits 0, 2, 0x80, 0 in the fields nobody has decoded;
        // applegpu saw 0x81 in the third for compare-exchange.
        let fields = (ins.int(5), ins.int(6), ins.int(7), ins.int(8));
        let third_ok = |v: i64| v == 0x80 || (v == 0x81 && op == AtomicOp::CompareExchange);
        if !matches!(fields, (Some(0), Some(2), Some(v), Some(0)) if third_ok(v)) {
            return Err(unsupported(
                pc,
                "a threadgroup atomic whose fields are not Mesa's 0, 2, 0x80, 0 (not modelled)",
            ));
        }
        let dest = atomic_destination(dest, pc)?;
        for lane in lanes(exec) {
            let (base_bytes, index) = self.threadgroup_base_index(base, index, lane, env);
            // Unaligned addresses round down to the word, as device
            // atomics do.
            let start = index
                .checked_mul(4)
                .and_then(|i| i.checked_add(base_bytes))
                .map(|start| start & !3);
            let range = threadgroup_range(start, 4, env.threadgroup.len(), pc)?;
            let value = self.read(data.reg(0), lane) as u32;
            let compare = if op == AtomicOp::CompareExchange {
                self.read(data.reg(1), lane) as u32
            } else {
                0
            };
            let word = &mut env.threadgroup[range];
            let old = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
            word.copy_from_slice(&op.apply(old, value, compare).to_le_bytes());
            if let Some(dest) = dest {
                self.write(dest, lane, u64::from(old));
            }
        }
        Ok(())
    }

    /// `tex_state_store` / `sampler_state_store`: binds the descriptor at
    /// heap + offset (bytes) to a state register, once per instruction
    /// (a preshader runs on one lane).
    fn state_store(&mut self, o: &Operands<'_>, env: &mut Env<'_>) -> Result<(), ExecError> {
        let (ins, exec, pc) = (o.ins, o.exec, o.pc);
        let (Some(index), Some(Operand::Value(heap)), Some(Operand::Value(offset))) =
            (ins.int(0), ins.operands.get(1), ins.operands.get(2))
        else {
            return Err(unsupported(pc, "malformed state store"));
        };
        let Some(lane) = lanes(exec).next() else {
            return Ok(());
        };
        let state = if ins.op == Op::TexStateStore {
            StateKind::Texture
        } else {
            StateKind::Sampler
        };
        let descriptor = self
            .lane_value(heap, lane, env.uniforms)
            .wrapping_add(self.lane_value(offset, lane, env.uniforms) & 0xFFFF_FFFF);
        env.io
            .state_store(state, index as u32, descriptor)
            .map_err(|error| ExecError::Io { pc, error })
    }

    /// A threadgroup access's base (bytes; none is 0) and index (an
    /// immediate, or a 16-bit register or uniform) in `lane`.
    fn threadgroup_base_index(
        &self,
        base: &Value,
        index: &Value,
        lane: usize,
        env: &Env<'_>,
    ) -> (i64, i64) {
        let base_bytes = match base {
            Value::Imm(_) => 0,
            other => self.lane_value(other, lane, env.uniforms) as i64,
        };
        let index = match index {
            Value::Imm(imm) => *imm,
            other => self.lane_value(other, lane, env.uniforms) as i64,
        };
        (base_bytes, index)
    }

    /// A device access's index: an immediate, or a 32-bit register
    /// sign-extended (`signed`) or zero-extended.
    fn memory_index(&self, offset: &Value, signedness: i64, lane: usize, env: &Env<'_>) -> i64 {
        match offset {
            Value::Imm(imm) => *imm,
            Value::Reg(reg, _) if signedness == 0 => sign_extend(self.read(*reg, lane), 32),
            other => self.lane_value(other, lane, env.uniforms) as i64,
        }
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
        let half = data.first.size == Size::S16;
        if half && format == ElementFormat::I32 {
            return Err(unsupported(pc, "i32 elements in 16-bit registers"));
        }
        let size = 1usize << format.shift();
        let store = ins.op == Op::ThreadgroupStore;
        for lane in lanes(exec) {
            let (base_bytes, index) = self.threadgroup_base_index(base, index, lane, env);
            if format.packed() {
                // One word holds every component.
                let start = index.checked_mul(4).and_then(|i| i.checked_add(base_bytes));
                let range = threadgroup_range(start, 4, env.threadgroup.len(), pc)?;
                let word = &mut env.threadgroup[range];
                self.packed_word(format, word, mask as u8, data, lane, store, half);
                continue;
            }
            for (register, component) in (0..4i64).filter(|c| mask & (1 << c) != 0).enumerate() {
                // Checked: the decoder gives at most 32-bit operands, but
                // register values are client data and must not reach an
                // overflow.
                let start = index
                    .checked_add(component)
                    .and_then(|i| i.checked_mul(size as i64))
                    .and_then(|i| i.checked_add(base_bytes));
                let range = threadgroup_range(start, size, env.threadgroup.len(), pc)?;
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

impl SimdGroup {
    /// One lane's access to a packed format's word (device or threadgroup
    /// memory): a store packs the components `mask` names from
    /// consecutive registers into it, once; a load unpacks them into
    /// consecutive registers.
    #[allow(clippy::too_many_arguments)]
    fn packed_word(
        &mut self,
        format: ElementFormat,
        word: &mut [u8],
        mask: u8,
        data: &RegRun,
        lane: usize,
        store: bool,
        half: bool,
    ) {
        let named = (0..4).filter(|c| mask & (1 << c) != 0).enumerate();
        if store {
            let mut values = [0u32; 4];
            for (register, component) in named {
                values[component] = self.read(data.reg(register as u16), lane) as u32;
            }
            formats::store_element(format, word, mask & 0xF, values, half);
        } else {
            for (register, component) in named {
                let value = formats::load(format, word, component, half);
                self.write(data.reg(register as u16), lane, u64::from(value));
            }
        }
    }
}

/// What a device access of whole elements does (see
/// [`SimdGroup::device_elements`]).
struct ElementAccess<'a> {
    format: ElementFormat,
    mask: u8,
    data: &'a RegRun,
    /// The data registers are 16-bit.
    half: bool,
    store: bool,
    /// Every lane's address is the same.
    lane_invariant: bool,
}

/// Bytes `start..start + size` of a threadgroup allocation of `len`
/// bytes, or the bounds fault (`start` is `None` when computing it
/// overflowed: register values are client data).
fn threadgroup_range(
    start: Option<i64>,
    size: usize,
    len: usize,
    pc: u64,
) -> Result<std::ops::Range<usize>, ExecError> {
    start
        .and_then(|start| {
            let start = usize::try_from(start).ok()?;
            let end = start.checked_add(size)?;
            (end <= len).then_some(start..end)
        })
        .ok_or(ExecError::ThreadgroupBounds {
            pc,
            offset_bytes: start.unwrap_or(i64::MAX),
            size_bytes: len,
        })
}

/// An atomic's destination: a register, or none (the field with its flag
/// clear decodes as the immediate 0).
fn atomic_destination(dest: &Value, pc: u64) -> Result<Option<agx_hw::isa::Reg>, ExecError> {
    match dest {
        Value::Reg(reg, _) => Ok(Some(*reg)),
        Value::Imm(0) => Ok(None),
        _ => Err(unsupported(
            pc,
            "an atomic destination field without a register",
        )),
    }
}

/// The operations of `atomic` (applegpu's and Mesa's numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AtomicOp {
    Add,
    Sub,
    Exchange,
    CompareExchange,
    UnsignedMin,
    SignedMin,
    UnsignedMax,
    SignedMax,
    And,
    Or,
    Xor,
}

impl AtomicOp {
    fn from_code(code: i64) -> Option<AtomicOp> {
        use AtomicOp::*;
        Some(match code {
            0 => Add,
            1 => Sub,
            2 => Exchange,
            3 => CompareExchange,
            4 => UnsignedMin,
            5 => SignedMin,
            6 => UnsignedMax,
            7 => SignedMax,
            8 => And,
            9 => Or,
            10 => Xor,
            _ => return None,
        })
    }

    /// The new memory word from the old one, the data register and (for
    /// compare-exchange, whose data is the new value then the value
    /// compared, as Mesa packs it) the second data register.
    fn apply(self, old: u32, value: u32, compare: u32) -> u32 {
        use AtomicOp::*;
        match self {
            Add => old.wrapping_add(value),
            Sub => old.wrapping_sub(value),
            Exchange => value,
            CompareExchange => {
                if old == compare {
                    value
                } else {
                    old
                }
            }
            UnsignedMin => old.min(value),
            SignedMin => (old as i32).min(value as i32) as u32,
            UnsignedMax => old.max(value),
            SignedMax => (old as i32).max(value as i32) as u32,
            And => old & value,
            Or => old | value,
            Xor => old ^ value,
        }
    }
}
