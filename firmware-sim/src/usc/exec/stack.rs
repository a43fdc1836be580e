//! The per-thread stack: scratch memory each thread of a SIMD-group
//! reaches by offsets from the group's stack pointer, and the helper
//! program's instructions that hand stack memory to SIMD-groups.
//!
//! A SIMD-group's stack is up to four blocks of device memory, described
//! by four *stack block registers* (`stack_map N` writes register N,
//! `stack_unmap N` reads it back). The firmware's helper program fills
//! them when a SIMD-group that needs a stack starts, and takes them back
//! when it ends (the firmware's helper runner). The register words follow Mesa's
//! scratch set-up (`agx_scratch.c`): bits 8 and up of a block's address
//! from bit `k` on, where block 0's low `k` bits are ones (and bit `k`
//! zero: Mesa aligns blocks to their size) and give the block size, 32
//! threads x (8 << 2(k-1)) 32-bit words, and blocks 1-3 have bit 0 set
//! when present. Within a block, word `w` of thread `t` is
//! at byte `(32 w + t) x 4` (the words of a SIMD-group interleaved; the
//! hardware's order within a block is not public, and no program can tell
//! it from another as long as only the stack instructions reach it).
//!
//! The stack pointer is one per SIMD-group (applegpu: "each SIMD-group has
//! a stack pointer"), in bytes of each thread's stack. It starts at the
//! top of the mapped stack; `stack_adjust N` moves it down by N words
//! (and up for negative N), and `stack_load`/`stack_store` address each
//! thread's bytes at the pointer plus a byte offset. Mesa's compiler
//! reserves its frame with `stack_adjust` at the start and addresses it at
//! offsets from 0, which this model serves; which way the hardware's
//! pointer runs is not public. Every access and adjustment outside the
//! mapped stack is refused ([`ExecError::StackBounds`]), never wrapped.

use agx_hw::isa::{Op, Operand, Size, Value};

use super::{lanes, sign_extend, unsupported, Env, ExecError, Flow, Operands, SimdGroup};
use crate::usc::formats::{self, ElementFormat};

/// Lanes that share a stack block's interleaving.
const BLOCK_LANES: u64 = 32;

/// A SIMD-group's stack: its four block registers and its pointer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stack {
    /// The stack block registers, as `stack_map` writes them.
    pub blocks: [u32; 4],
    /// The stack pointer, in bytes of each thread's stack.
    pub sp_bytes: u32,
}

impl Stack {
    /// A stack with `blocks` mapped and the pointer at its top.
    pub fn mapped(blocks: [u32; 4]) -> Stack {
        let mut stack = Stack {
            blocks,
            sp_bytes: 0,
        };
        stack.sp_bytes = stack.size_bytes();
        stack
    }

    /// How many low bits of block 0's word give the block size (0: no
    /// stack).
    fn size_bits(&self) -> u32 {
        self.blocks[0].trailing_ones().min(8)
    }

    /// 32-bit words per thread in each block.
    fn block_words(&self) -> u32 {
        match self.size_bits() {
            0 => 0,
            k => 8 << (2 * (k - 1)),
        }
    }

    /// Blocks mapped: block 0 if it has a size, then each of 1-3 whose
    /// present bit is set, up to the first that is not.
    fn block_count(&self) -> usize {
        if self.size_bits() == 0 {
            return 0;
        }
        1 + self.blocks[1..]
            .iter()
            .take_while(|word| *word & 1 != 0)
            .count()
    }

    /// Bytes of each thread's stack.
    pub fn size_bytes(&self) -> u32 {
        self.block_words() * 4 * self.block_count() as u32
    }

    /// Where the stack's bytes are, worked out once for an instruction's
    /// elements.
    fn layout(&self) -> StackLayout {
        let k = self.size_bits();
        let count = self.block_count();
        let mut bases = [0u64; 4];
        for (base, word) in bases.iter_mut().zip(&self.blocks).take(count) {
            *base = u64::from(word >> k << k) << 8;
        }
        StackLayout {
            size_bytes: self.size_bytes(),
            // 8 << 2(k - 1) words.
            block_words_log2: 2 * k + 1,
            bases,
        }
    }
}

impl Stack {
    /// The stack as the compiled engine addresses it (the same layout).
    pub(crate) fn frame(&self) -> agx_jit::StackFrame {
        let layout = self.layout();
        agx_jit::StackFrame {
            sp_bytes: self.sp_bytes,
            size_bytes: layout.size_bytes,
            block_words_log2: layout.block_words_log2,
            reserved: 0,
            bases: layout.bases,
        }
    }
}

/// A stack's blocks as addresses: the stack's size, each block's words
/// per thread (a power of two) and each mapped block's base.
#[derive(Debug, Clone, Copy)]
struct StackLayout {
    size_bytes: u32,
    block_words_log2: u32,
    bases: [u64; 4],
}

impl StackLayout {
    /// The GPU address of byte `offset` of `lane`'s stack (which must be
    /// below the stack's size).
    fn address(&self, lane: usize, offset: u32) -> u64 {
        let word = offset / 4;
        let block = (word >> self.block_words_log2) as usize;
        let in_block = u64::from(word & ((1 << self.block_words_log2) - 1));
        self.bases[block & 3] + (in_block * BLOCK_LANES + lane as u64) * 4 + u64::from(offset % 4)
    }
}

impl SimdGroup {
    /// Executes a stack instruction.
    #[inline(always)]
    pub(super) fn stack_op(
        &mut self,
        o: &Operands<'_>,
        env: &mut Env<'_>,
    ) -> Result<Flow, ExecError> {
        match o.ins.op {
            Op::StackAdjust => self.stack_adjust(o)?,
            Op::StackLoad | Op::StackStore => self.stack_memory(o, env)?,
            Op::StackMap | Op::StackUnmap => self.stack_map(o)?,
            _ => return Err(o.misrouted()),
        }
        Ok(Flow::Next)
    }

    /// `stack_adjust N`: the pointer moves down by N 32-bit words (up for
    /// a negative N), staying within the stack.
    fn stack_adjust(&mut self, o: &Operands<'_>) -> Result<(), ExecError> {
        let pc = o.pc;
        let fields = (0..5).map(|i| o.ins.int(i)).collect::<Option<Vec<i64>>>();
        if fields.as_deref() != Some(&[0, 1, 2, 0, 0]) {
            return Err(unsupported(
                pc,
                "a stack_adjust whose fields are not Mesa's 0, 1, 2, 0, 0 (not modelled)",
            ));
        }
        let words = match o.value(5)? {
            Value::Imm(n) => n,
            Value::Reg(reg, _) => {
                // The group's pointer is one value: the first active
                // lane's register gives it.
                let lane = lanes(o.exec).next().unwrap_or(0);
                sign_extend(self.read(reg, lane), 32)
            }
            _ => return Err(unsupported(pc, "a stack_adjust by a non-register")),
        };
        let size = i64::from(self.stack.size_bytes());
        let sp = i64::from(self.stack.sp_bytes) - 4 * words;
        if !(0..=size).contains(&sp) {
            return Err(ExecError::StackBounds {
                pc,
                offset_bytes: sp,
                size_bytes: self.stack.size_bytes(),
            });
        }
        self.stack.sp_bytes = sp as u32;
        Ok(())
    }

    /// `stack_load`/`stack_store`: each active thread's components at the
    /// pointer plus the byte offset, one element after another.
    fn stack_memory(&mut self, o: &Operands<'_>, env: &mut Env<'_>) -> Result<(), ExecError> {
        let (ins, exec, pc) = (o.ins, o.exec, o.pc);
        let store = ins.op == Op::StackStore;
        // Operand positions: a load prints its registers first, a store
        // after the fields.
        let (regs_at, fields_at) = if store { (5, 0) } else { (0, 1) };
        let (Some(Operand::Regs(data)), Some(format), Some(i1), Some(i2), Some(mask), Some(i5)) = (
            ins.operands.get(regs_at),
            ins.int(fields_at),
            ins.int(fields_at + 1),
            ins.int(fields_at + 2),
            ins.int(fields_at + 3),
            ins.int(fields_at + 4),
        ) else {
            return Err(unsupported(pc, "malformed stack access"));
        };
        if (i1, i2, i5) != (1, 0, 4) {
            return Err(unsupported(
                pc,
                "a stack access whose fields are not Mesa's 1, 0, 4 (not modelled)",
            ));
        }
        let offset = o.value(6)?;
        let format = ElementFormat::from_code(format)
            .filter(|f| !f.packed())
            .ok_or_else(|| unsupported(pc, format!("stack format {format}")))?;
        let half = data.first.size == Size::S16;
        if half && format == ElementFormat::I32 {
            return Err(unsupported(pc, "i32 elements in 16-bit registers"));
        }
        let size = 1u32 << format.shift();
        let stack = self.stack.layout();
        // Every element in order (lane, then component): its address, or
        // the first that lies outside the stack, which ends the list
        // (the elements before it are still accessed, as one at a time
        // would).
        let mut addresses = [0u64; 4 * super::LANES];
        // (lane, register, component) of each element.
        let mut places = [(0u8, 0u8, 0u8); 4 * super::LANES];
        let mut count = 0;
        let mut out_of_bounds = None;
        'lanes: for lane in lanes(exec) {
            let offset = match offset {
                Value::Imm(imm) => imm,
                Value::Reg(reg, _) => sign_extend(self.read(reg, lane), 32),
                _ => return Err(unsupported(pc, "a stack offset other than a register")),
            };
            let first = i64::from(self.stack.sp_bytes) + offset;
            for (register, component) in (0..4i64).filter(|c| mask & (1 << c) != 0).enumerate() {
                let at = first + component * i64::from(size);
                let Some(at) = u32::try_from(at).ok().filter(|at| {
                    at.checked_add(size)
                        .is_some_and(|end| end <= stack.size_bytes)
                }) else {
                    out_of_bounds = Some(ExecError::StackBounds {
                        pc,
                        offset_bytes: at,
                        size_bytes: stack.size_bytes,
                    });
                    break 'lanes;
                };
                // An element never straddles a word: elements are at most
                // a word, and the offset rounds down to the element size.
                addresses[count] = stack.address(lane, at & !(size - 1));
                places[count] = (lane as u8, register as u8, component as u8);
                count += 1;
            }
        }
        let (addresses, places) = (&addresses[..count], &places[..count]);
        let mut words = [0u32; 4 * super::LANES];
        let words = &mut words[..count];
        // The elements reached before a fault (which names its element's
        // first byte: elements never straddle a page).
        let reached = |fault: &crate::usc::MemoryFault| {
            addresses
                .iter()
                .position(|&a| a == fault.address)
                .unwrap_or(0)
        };
        let result = if store {
            for (word, &(lane, register, component)) in words.iter_mut().zip(places) {
                let mut bytes = [0u8; 4];
                let value = self.read(data.reg(u16::from(register)), usize::from(lane));
                formats::store(format, &mut bytes, component.into(), value as u32, half);
                *word = u32::from_le_bytes(bytes);
            }
            env.memory
                .write_elements(addresses, size as usize, words)
                .map(|()| count)
        } else {
            let read = env.memory.read_elements(addresses, size as usize, words);
            let done = match &read {
                Ok(()) => count,
                Err(fault) => reached(fault),
            };
            for (word, &(lane, register, component)) in words.iter().zip(places).take(done) {
                let value = formats::load(format, &word.to_le_bytes(), component.into(), half);
                self.write(
                    data.reg(u16::from(register)),
                    usize::from(lane),
                    u64::from(value),
                );
            }
            read.map(|()| count)
        };
        result.map_err(|fault| ExecError::Memory { pc, fault })?;
        out_of_bounds.map_or(Ok(()), Err)
    }

    /// `stack_map N, R` writes stack block register N from R (the first
    /// active lane's); `stack_unmap N, R` reads it into R.
    fn stack_map(&mut self, o: &Operands<'_>) -> Result<(), ExecError> {
        let (ins, exec, pc) = (o.ins, o.exec, o.pc);
        let fields = [0usize, 3, 4, 5, 6, 7, 8]
            .map(|i| ins.int(i))
            .map(|v| v.unwrap_or(-1));
        if fields != [0, 0, 0, 0, 0b10000, 0b0001_0000, 1] {
            return Err(unsupported(
                pc,
                "a stack_map/unmap whose fields are not Mesa's (not modelled)",
            ));
        }
        let register = o.run(1)?.first;
        let block = o.int(2)?;
        let Some(slot) = usize::try_from(block).ok().filter(|b| *b < 4) else {
            return Err(unsupported(pc, format!("stack block register {block}")));
        };
        if ins.op == Op::StackMap {
            if let Some(lane) = lanes(exec).next() {
                self.stack.blocks[slot] = self.read(register, lane) as u32;
                self.stack.sp_bytes = self.stack.size_bytes();
            }
        } else {
            let word = u64::from(self.stack.blocks[slot]);
            for lane in lanes(exec) {
                self.write(register, lane, word);
            }
        }
        Ok(())
    }
}
