//! Per-thread stacks: the scratch memory a kernel's `stack_load` and
//! `stack_store` reach, and the helper program that hands it out.
//!
//! The GPU gives a SIMD-group a stack only through a helper program the
//! command names: the firmware runs it on each core and asks it for a
//! stack before a SIMD-group whose pipeline has a spill size starts, and
//! gives the stack back when the group ends (the doorbell protocol of
//! Mesa's `libagx/helper.cl`: ring 32 to wait for an operation, read it
//! from `sr144` and its argument from `sr146`, answer 48 or 49). This
//! driver's helper is [`HELPER_SOURCE`]. It keeps, per core, a last-in
//! first-out list of free stacks in a scratch area laid out as
//! [`ScratchLayout`] says: a header with the slots per core, a record per
//! core (stacks in use, allocations, refusals), each slot's four stack
//! block words, then the blocks. A stack block word is the block's
//! address shifted right by 8 with its size (block 0) or presence
//! (blocks 1-3) in the low bits, as Mesa's `agx_scratch.c` writes them.

use agx_hw::formats::UscRegisters;

/// Cores the helper keeps records for (G13G has 8; the simulated GPU
/// runs a launch on at most that many).
pub const CORES: u32 = 8;

/// Stacks each core can hand out at once: one per SIMD-group of the
/// largest threadgroup (1024 threads). On hardware a core may run more
/// groups than that; a refused allocation makes the launch wait.
pub const SLOTS_PER_CORE: u32 = 32;

/// Threads whose words a stack block interleaves.
const BLOCK_THREADS: u64 = 32;

/// The largest block-size code this driver uses (blocks of 32 threads x
/// 8 << 8 words, 256 KiB, which its arenas can align; Mesa's largest is
/// two steps more).
const MAX_SIZE_BITS: u32 = 5;

/// The largest stack a thread can have: four blocks of the largest size
/// (32 KiB).
pub const MAX_STACK_BYTES: u32 = 4 * (8 << (2 * (MAX_SIZE_BITS - 1))) * 4;

/// The helper program: `sr146`/`sr147` give the scratch header, `sr20`
/// the core. Operation 0 maps the core's next free slot (`stack_map`)
/// and counts it; 1 takes back the stack in the block registers
/// (`stack_unmap`) into the slot freed last; 15 ends; anything else, and
/// an allocation with no slot, a release with none in use, or either on
/// a core past [`CORES`], is refused.
pub const HELPER_SOURCE: &str = "
    get_sr r10, sr146
    get_sr r11, sr147
    get_sr r12, sr20
    iadd r13, 4, r12, lsl 2
    device_load 0, i32, x, r14, r10_r11, 0, unsigned
    wait 0
next:
    jmp_if_skipping_doorbell after_wait
    doorbell 32
after_wait:
    get_sr r1, sr144
    if_icmp r0l, ueq, r1, 15, 1
    jmp_exec_any end
    pop_exec r0l, 1
    if_icmp r0l, ult, r12, 8, 1
    jmp_exec_none no_record
    pop_exec r0l, 1
    if_icmp r0l, ueq, r1, 0, 1
    jmp_exec_any alloc
    pop_exec r0l, 1
    if_icmp r0l, ueq, r1, 1, 1
    jmp_exec_any free
    pop_exec r0l, 1
    jmp_exec_any refuse_now
alloc:
    device_load 0, i32, xy, r2_r3, r10_r11, r13, unsigned
    wait 0
    if_icmp r0l, ult, r2, r14, 1
    jmp_exec_none refuse
    imadd r6, r12, r14, r2
    iadd r7, 36, r6, lsl 2
    device_load 0, i32, xyzw, r20_r21_r22_r23, r10_r11, r7, unsigned
    wait 0
    stack_map target0, r20, 0, 0b00, 0b0, 0b000, 0b10000, 0b00010000, 1
    stack_map target0, r21, 1, 0b00, 0b0, 0b000, 0b10000, 0b00010000, 1
    stack_map target0, r22, 2, 0b00, 0b0, 0b000, 0b10000, 0b00010000, 1
    stack_map target0, r23, 3, 0b00, 0b0, 0b000, 0b10000, 0b00010000, 1
    iadd r2, r2, 1
    iadd r3, r3, 1
    device_store 0, i32, xy, r2_r3, r10_r11, r13, unsigned, 0
    jmp_if_skipping_doorbell alloc_done
    doorbell 48
alloc_done:
    jmp_exec_any next
free:
    device_load 0, i32, x, r2, r10_r11, r13, unsigned
    wait 0
    if_icmp r0l, ugt, r2, 0, 1
    jmp_exec_none refuse
    isub r2, r2, 1
    device_store 0, i32, x, r2, r10_r11, r13, unsigned, 0
    imadd r6, r12, r14, r2
    iadd r7, 36, r6, lsl 2
    stack_unmap target0, r20, 0, 0b00, 0b0, 0b000, 0b10000, 0b00010000, 1
    stack_unmap target0, r21, 1, 0b00, 0b0, 0b000, 0b10000, 0b00010000, 1
    stack_unmap target0, r22, 2, 0b00, 0b0, 0b000, 0b10000, 0b00010000, 1
    stack_unmap target0, r23, 3, 0b00, 0b0, 0b000, 0b10000, 0b00010000, 1
    device_store 0, i32, xyzw, r20_r21_r22_r23, r10_r11, r7, unsigned, 0
    jmp_if_skipping_doorbell free_done
    doorbell 48
free_done:
    jmp_exec_any next
refuse:
    pop_exec r0l, 1
refuse_now:
    iadd r8, r13, 2
    device_load 0, i32, x, r4, r10_r11, r8, unsigned
    wait 0
    iadd r4, r4, 1
    device_store 0, i32, x, r4, r10_r11, r8, unsigned, 0
    jmp_if_skipping_doorbell refuse_done
    doorbell 49
refuse_done:
    jmp_exec_any next
no_record:
    pop_exec r0l, 1
    jmp_if_skipping_doorbell no_record_done
    doorbell 49
no_record_done:
    jmp_exec_any next
end:
    stop";

/// Where things are in a scratch area for stacks of one size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScratchLayout {
    /// The block-size code: blocks of 32 threads x (8 << 2(k-1)) words.
    pub size_bits: u32,
    /// Blocks per stack (1-4).
    pub blocks: u32,
}

/// Byte offset of the core records (after the 16-byte header).
pub const CORE_RECORDS_AT: u64 = 16;
/// Bytes of a core record: stacks in use, allocations, refusals, pad.
pub const CORE_RECORD_BYTES: u64 = 16;
/// Byte offset of the slots' block words (4 words a slot).
pub const BLOCK_WORDS_AT: u64 = CORE_RECORDS_AT + CORE_RECORD_BYTES * CORES as u64;

impl ScratchLayout {
    /// The smallest layout holding `stack_bytes` per thread, or `None`
    /// past the largest stack this driver makes (4 blocks of the largest
    /// size).
    pub fn for_stack(stack_bytes: u32) -> Option<ScratchLayout> {
        let words = u64::from(stack_bytes.div_ceil(4)).max(1);
        (1..=MAX_SIZE_BITS).find_map(|size_bits| {
            let block_words = 8u64 << (2 * (size_bits - 1));
            let blocks = words.div_ceil(block_words);
            (blocks <= 4).then_some(ScratchLayout {
                size_bits,
                blocks: blocks as u32,
            })
        })
    }

    /// Bytes of one block (32 threads' words).
    pub fn block_bytes(&self) -> u64 {
        BLOCK_THREADS * 4 * (8u64 << (2 * (self.size_bits - 1)))
    }

    /// The alignment a block needs for its word to hold its address and
    /// size: the size code is the run of ones at the bottom of block 0's
    /// word, so the address bit above it must be clear. (Mesa aligns
    /// blocks to their size, which is at least this.)
    pub fn block_align_bytes(&self) -> u64 {
        256u64 << (self.size_bits + 1)
    }

    /// Byte offset of the first block.
    pub fn blocks_at(&self) -> u64 {
        let words_end = BLOCK_WORDS_AT + 16 * u64::from(CORES * SLOTS_PER_CORE);
        words_end.next_multiple_of(self.block_align_bytes())
    }

    /// Bytes of the whole area.
    pub fn total_bytes(&self) -> u64 {
        self.blocks_at()
            + self.block_bytes() * u64::from(self.blocks) * u64::from(CORES * SLOTS_PER_CORE)
    }

    /// The area's initial contents up to the blocks (the blocks need
    /// none), for an area at `va` (aligned to
    /// [`ScratchLayout::block_align_bytes`]).
    pub fn header(&self, va: u64) -> Vec<u8> {
        let mut out = vec![0u8; self.blocks_at() as usize];
        out[..4].copy_from_slice(&SLOTS_PER_CORE.to_le_bytes());
        let size_mask = (1u32 << self.size_bits) - 1;
        let stack_bytes = self.block_bytes() * u64::from(self.blocks);
        for slot in 0..u64::from(CORES * SLOTS_PER_CORE) {
            let first = va + self.blocks_at() + slot * stack_bytes;
            let at = (BLOCK_WORDS_AT + 16 * slot) as usize;
            for block in 0..4u64 {
                let word = if block < u64::from(self.blocks) {
                    let address = ((first + block * self.block_bytes()) >> 8) as u32;
                    address | if block == 0 { size_mask } else { 1 }
                } else {
                    0
                };
                let w = at + 4 * block as usize;
                out[w..w + 4].copy_from_slice(&word.to_le_bytes());
            }
        }
        out
    }
}

/// The Registers word's spill size for a stack of `stack_bytes` per
/// thread: 0 for none, else Mesa's bucket (1 + log2 of the size in
/// 8-word units, at most 15). The simulated firmware asks the helper for
/// a stack when it is not 0.
pub fn spill_bucket(stack_bytes: u32) -> u32 {
    if stack_bytes == 0 {
        return 0;
    }
    let units = stack_bytes.div_ceil(4).div_ceil(8);
    (1 + units.next_power_of_two().trailing_zeros()).min(15)
}

/// A Registers word with room for `registers` and a stack of
/// `stack_bytes` per thread.
pub fn registers_word(registers: u32, stack_bytes: u32) -> UscRegisters {
    UscRegisters {
        register_count: registers,
        spill_size: spill_bucket(stack_bytes),
        ..UscRegisters::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_helper_assembles() {
        let code = agx_hw::isa::text::assemble(HELPER_SOURCE, 0).unwrap();
        assert!(code.len() > 100);
    }

    #[test]
    fn layouts_hold_the_stack_in_at_most_four_blocks() {
        assert_eq!(
            ScratchLayout::for_stack(16),
            Some(ScratchLayout {
                size_bits: 1,
                blocks: 1
            })
        );
        // 40 words: 2 blocks of 32.
        assert_eq!(
            ScratchLayout::for_stack(160),
            Some(ScratchLayout {
                size_bits: 2,
                blocks: 2
            })
        );
        let largest = ScratchLayout::for_stack(4 * 4 * (8 << 8)).unwrap();
        assert_eq!((largest.size_bits, largest.blocks), (5, 4));
        assert_eq!(ScratchLayout::for_stack(4 * 4 * (8 << 8) + 4), None);
        assert_eq!(spill_bucket(0), 0);
        assert_eq!(spill_bucket(32), 1);
        assert_eq!(spill_bucket(33), 2);
    }

    #[test]
    fn block_words_carry_the_address_and_size() {
        let layout = ScratchLayout::for_stack(160).unwrap();
        let va = 0x20_0000;
        let header = layout.header(va);
        let word = |slot: usize, block: usize| {
            let at = BLOCK_WORDS_AT as usize + 16 * slot + 4 * block;
            u32::from_le_bytes(header[at..at + 4].try_into().unwrap())
        };
        let first = va + layout.blocks_at();
        assert_eq!(word(0, 0), (first >> 8) as u32 | 0b11);
        assert_eq!(word(0, 1), ((first + layout.block_bytes()) >> 8) as u32 | 1);
        assert_eq!(word(0, 2), 0);
        assert_eq!(
            word(1, 0),
            ((first + 2 * layout.block_bytes()) >> 8) as u32 | 0b11
        );
    }
}
