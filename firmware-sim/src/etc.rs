//! ETC2 and EAC: the block-compressed formats of OpenGL ES 3.0 (and GL 4.3)
//! the texture unit decodes. A block is 4x4 texels in 64 bits read
//! big-endian: ETC2's colour block (ETC1's individual and differential
//! modes, and the T, H and planar modes its differential mode's overflows
//! select), optionally with punch-through alpha; EAC's one-channel block
//! (8-bit alpha, or 11-bit R and RG, unsigned or signed). A texel's
//! index bits are found column by column (texel (x, y) is index 4x + y).
//! The definitions are the Khronos Data Format Specification's (ETC2 and
//! EAC sections), bit for bit: the decoders are integer arithmetic, so
//! nothing is left to rounding.

/// ETC1's intensity modifiers per table: the small and the large step
/// (index bits 00 and 01 add them, 10 and 11 subtract them).
const INTENSITY: [[i32; 2]; 8] = [
    [2, 8],
    [5, 17],
    [9, 29],
    [13, 42],
    [18, 60],
    [24, 80],
    [33, 106],
    [47, 183],
];

/// The T and H modes' distances.
const DISTANCE: [i32; 8] = [3, 6, 11, 16, 23, 32, 41, 64];

/// EAC's modifiers per table, by 3-bit index.
const EAC_MODIFIERS: [[i32; 8]; 16] = [
    [-3, -6, -9, -15, 2, 5, 8, 14],
    [-3, -7, -10, -13, 2, 6, 9, 12],
    [-2, -5, -8, -13, 1, 4, 7, 12],
    [-2, -4, -6, -13, 1, 3, 5, 12],
    [-3, -6, -8, -12, 2, 5, 7, 11],
    [-3, -7, -9, -11, 2, 6, 8, 10],
    [-4, -7, -8, -11, 3, 6, 7, 10],
    [-3, -5, -8, -11, 2, 4, 7, 10],
    [-2, -6, -8, -10, 1, 5, 7, 9],
    [-2, -5, -8, -10, 1, 4, 7, 9],
    [-2, -4, -8, -10, 1, 3, 7, 9],
    [-2, -5, -7, -10, 1, 4, 6, 9],
    [-3, -4, -7, -10, 2, 3, 6, 9],
    [-1, -2, -3, -10, 0, 1, 2, 9],
    [-4, -6, -8, -9, 3, 5, 7, 8],
    [-3, -5, -7, -9, 2, 4, 6, 8],
];

/// The 64-bit block at the start of `bytes`, big-endian.
fn word(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .take(8)
        .fold(0, |word, &byte| (word << 8) | u64::from(byte))
}

/// `count` bits of `word` from bit `low` up.
fn bits(word: u64, low: u32, count: u32) -> i32 {
    ((word >> low) & ((1 << count) - 1)) as i32
}

/// A `count`-bit value widened to 8 bits by repeating its high bits.
fn widen(value: i32, count: u32) -> i32 {
    (value << (8 - count)) | (value >> (2 * count - 8))
}

/// Texel `texel` (4x + y) of an ETC2 colour block as 8-bit RGBA. With
/// `punch_through` (the RGB8A1 format), bit 33 says whether the block is
/// opaque instead of choosing the individual mode; a non-opaque block's
/// texels with index 10 are transparent black, and its differential
/// mode's small steps are 0.
pub fn etc2_colour(block: &[u8], texel: u32, punch_through: bool) -> [u8; 4] {
    let w = word(block);
    // The texel's 2-bit index: its high bit in the upper half of the low
    // 32 bits, its low bit in the lower half.
    let texel = texel & 15;
    let index = (bits(w, 16 + texel, 1) << 1) | bits(w, texel, 1);
    let opaque = !punch_through || bits(w, 33, 1) == 1;
    let transparent = !opaque && index == 2;
    let clamp = |v: i32| v.clamp(0, 255);
    let rgb = |c: [i32; 3]| c.map(|v| clamp(v) as u8);
    let individual = !punch_through && bits(w, 33, 1) == 0;
    let colour = if individual {
        let (second, table) = subblock(w, texel);
        let base = if second {
            [bits(w, 56, 4), bits(w, 48, 4), bits(w, 40, 4)]
        } else {
            [bits(w, 60, 4), bits(w, 52, 4), bits(w, 44, 4)]
        }
        .map(|v| widen(v, 4));
        let step = step(table, index, true);
        rgb(base.map(|c| c + step))
    } else {
        let base = [bits(w, 59, 5), bits(w, 51, 5), bits(w, 43, 5)];
        let delta = [bits(w, 56, 3), bits(w, 48, 3), bits(w, 40, 3)].map(|d| (d << 29) >> 29);
        let second_base = [0, 1, 2].map(|c| base[c] + delta[c]);
        let overflows = |c: usize| !(0..32).contains(&second_base[c]);
        if overflows(0) {
            // T mode.
            let c1 = [
                (bits(w, 59, 2) << 2) | bits(w, 56, 2),
                bits(w, 52, 4),
                bits(w, 48, 4),
            ]
            .map(|v| widen(v, 4));
            let c2 = [bits(w, 44, 4), bits(w, 40, 4), bits(w, 36, 4)].map(|v| widen(v, 4));
            let d = DISTANCE[((bits(w, 34, 2) << 1) | bits(w, 32, 1)) as usize];
            match index {
                0 => rgb(c1),
                1 => rgb(c2.map(|c| c + d)),
                2 => rgb(c2),
                _ => rgb(c2.map(|c| c - d)),
            }
        } else if overflows(1) {
            // H mode.
            let c1_bits = [
                bits(w, 59, 4),
                (bits(w, 56, 3) << 1) | bits(w, 52, 1),
                (bits(w, 51, 1) << 3) | bits(w, 47, 3),
            ];
            let c2_bits = [bits(w, 43, 4), bits(w, 39, 4), bits(w, 35, 4)];
            let value = |c: [i32; 3]| (c[0] << 8) | (c[1] << 4) | c[2];
            let low = i32::from(value(c1_bits) >= value(c2_bits));
            let d = DISTANCE[((bits(w, 34, 1) << 2) | (bits(w, 32, 1) << 1) | low) as usize];
            let (c1, c2) = (c1_bits.map(|v| widen(v, 4)), c2_bits.map(|v| widen(v, 4)));
            match index {
                0 => rgb(c1.map(|c| c + d)),
                1 => rgb(c1.map(|c| c - d)),
                2 => rgb(c2.map(|c| c + d)),
                _ => rgb(c2.map(|c| c - d)),
            }
        } else if overflows(2) {
            // Planar mode: always opaque.
            let origin = [
                widen(bits(w, 57, 6), 6),
                widen((bits(w, 56, 1) << 6) | bits(w, 49, 6), 7),
                widen(
                    (bits(w, 48, 1) << 5) | (bits(w, 43, 2) << 3) | bits(w, 39, 3),
                    6,
                ),
            ];
            let horizontal = [
                widen((bits(w, 34, 5) << 1) | bits(w, 32, 1), 6),
                widen(bits(w, 25, 7), 7),
                widen(bits(w, 19, 6), 6),
            ];
            let vertical = [
                widen(bits(w, 13, 6), 6),
                widen(bits(w, 6, 7), 7),
                widen(bits(w, 0, 6), 6),
            ];
            let (x, y) = ((texel / 4) as i32, (texel % 4) as i32);
            let c = [0, 1, 2].map(|c| {
                (x * (horizontal[c] - origin[c])
                    + y * (vertical[c] - origin[c])
                    + 4 * origin[c]
                    + 2)
                    >> 2
            });
            let [r, g, b] = rgb(c);
            return [r, g, b, 255];
        } else {
            // Differential mode.
            let (second, table) = subblock(w, texel);
            let colour = if second { second_base } else { base }.map(|v| widen(v, 5));
            let step = step(table, index, opaque);
            rgb(colour.map(|c| c + step))
        }
    };
    if transparent {
        [0; 4]
    } else {
        let [r, g, b] = colour;
        [r, g, b, 255]
    }
}

/// Whether texel `texel` (4x + y) is in an ETC1-style block's second
/// subblock (the right half, or with the flip bit 32 the lower half),
/// and that subblock's intensity table.
fn subblock(w: u64, texel: u32) -> (bool, i32) {
    let (x, y) = (texel / 4, texel % 4);
    let second = if bits(w, 32, 1) == 1 { y >= 2 } else { x >= 2 };
    (
        second,
        if second {
            bits(w, 34, 3)
        } else {
            bits(w, 37, 3)
        },
    )
}

/// An intensity modifier: index 00 adds the table's small step, 01 its
/// large one, 10 and 11 subtract them; a non-opaque punch-through block
/// has no small step.
fn step(table: i32, index: i32, opaque: bool) -> i32 {
    let [small, large] = INTENSITY[table as usize];
    let small = if opaque { small } else { 0 };
    match index {
        0 => small,
        1 => large,
        2 => -small,
        _ => -large,
    }
}

/// Texel `texel` of an EAC block before scaling: its base codeword,
/// multiplier and modifier (base, multiplier, modifier).
fn eac_fields(block: &[u8], texel: u32) -> (i32, i32, i32) {
    let w = word(block);
    let table = bits(w, 48, 4) as usize;
    let index = bits(w, 45 - 3 * (texel & 15), 3) as usize;
    (bits(w, 56, 8), bits(w, 52, 4), EAC_MODIFIERS[table][index])
}

/// Texel `texel` of an EAC alpha block (ETC2 RGBA8's first half), 8-bit.
pub fn eac_alpha(block: &[u8], texel: u32) -> u8 {
    let (base, multiplier, modifier) = eac_fields(block, texel);
    (base + modifier * multiplier).clamp(0, 255) as u8
}

/// Texel `texel` of an EAC R11 block (each RG11 channel is one) as a
/// normalised value: unsigned 0-2047 over 2047, signed -1023-1023 over
/// 1023 (a base of -128 counts as -127). A multiplier of 0 scales the
/// modifier by 1 instead of 8.
pub fn eac_r11(block: &[u8], texel: u32, signed: bool) -> f32 {
    let (base, multiplier, modifier) = eac_fields(block, texel);
    let step = if multiplier == 0 {
        modifier
    } else {
        modifier * multiplier * 8
    };
    if signed {
        let base = i32::from(base as u8 as i8).max(-127);
        (base * 8 + step).clamp(-1023, 1023) as f32 / 1023.0
    } else {
        (base * 8 + 4 + step).clamp(0, 2047) as f32 / 2047.0
    }
}
