//! Bit fields of an instruction word.
//!
//! AGX instructions are 2 to 12 bytes long and are read little-endian, so an
//! instruction is one integer of up to 96 bits (held here in a `u128`) and a
//! field is a list of bit ranges within it. Many operand fields are split:
//! the low bits sit in the first bytes, which every length of an instruction
//! has, and two "extension" bits sit in the tail that only the long form
//! carries (a short form reads them as zero, which is why short forms reach
//! only r0-r31).

/// One contiguous bit range: `width` bits starting at bit `lo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The lowest bit of the range, counted over the whole instruction.
    pub lo: u8,
    /// The number of bits.
    pub width: u8,
}

/// A field: bit ranges, least significant first, concatenated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bits(pub &'static [Range]);

/// A field made of one range.
pub const fn bits(lo: u8, width: u8) -> Range {
    Range { lo, width }
}

impl Bits {
    /// The total width of the field in bits.
    pub const fn width(&self) -> u32 {
        let mut total = 0;
        let mut i = 0;
        while i < self.0.len() {
            total += self.0[i].width as u32;
            i += 1;
        }
        total
    }

    /// The largest value the field holds.
    pub const fn max(&self) -> u64 {
        let width = self.width();
        if width >= 64 {
            u64::MAX
        } else {
            (1u64 << width) - 1
        }
    }

    /// Reads the field from an instruction word.
    pub fn get(&self, word: u128) -> u64 {
        let mut value = 0u64;
        let mut shift = 0;
        for range in self.0 {
            let piece = (word >> range.lo) & ((1u128 << range.width) - 1);
            value |= (piece as u64) << shift;
            shift += u32::from(range.width);
        }
        value
    }

    /// Writes the field into an instruction word; `value` must fit (the
    /// caller checks, bits beyond the width are dropped).
    pub fn set(&self, word: &mut u128, value: u64) {
        let mut rest = value;
        for range in self.0 {
            let mask = (1u128 << range.width) - 1;
            *word &= !(mask << range.lo);
            *word |= (u128::from(rest) & mask) << range.lo;
            rest >>= range.width;
        }
    }

    /// The bits this field covers, as a mask over the instruction word.
    pub fn mask(&self) -> u128 {
        self.0.iter().fold(0, |acc, range| {
            acc | (((1u128 << range.width) - 1) << range.lo)
        })
    }

    /// The highest bit the field touches, plus one.
    pub fn end(&self) -> u32 {
        self.0
            .iter()
            .map(|range| u32::from(range.lo) + u32::from(range.width))
            .max()
            .unwrap_or(0)
    }
}

/// Reads up to 16 bytes as a little-endian word.
pub fn load_word(bytes: &[u8]) -> u128 {
    let mut buf = [0u8; 16];
    let len = bytes.len().min(16);
    buf[..len].copy_from_slice(&bytes[..len]);
    u128::from_le_bytes(buf)
}

/// The mask of the low `len_bytes` bytes of a word.
pub fn length_mask(len_bytes: usize) -> u128 {
    if len_bytes >= 16 {
        u128::MAX
    } else {
        (1u128 << (len_bytes * 8)) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_fields_concatenate_low_range_first() {
        const SPLIT: Bits = Bits(&[bits(4, 4), bits(40, 2)]);
        let mut word = 0u128;
        SPLIT.set(&mut word, 0b10_1011);
        assert_eq!(word, (0b1011 << 4) | (0b10 << 40));
        assert_eq!(SPLIT.get(word), 0b10_1011);
        assert_eq!(SPLIT.width(), 6);
        assert_eq!(SPLIT.max(), 63);
        assert_eq!(SPLIT.end(), 42);
        assert_eq!(SPLIT.mask(), (0xF << 4) | (0x3 << 40));
    }

    #[test]
    fn set_replaces_previous_contents() {
        const F: Bits = Bits(&[bits(0, 8)]);
        let mut word = 0xFFFFu128;
        F.set(&mut word, 0x12);
        assert_eq!(word, 0xFF12);
    }
}
