//! BPTC block compression: BC7 (8-bit RGBA, unorm or sRGB) and BC6H
//! (16-bit float RGB, signed or unsigned), as `ARB_texture_compression_bptc`
//! defines them bit for bit: a 16-byte block per 4x4 texels, a mode that
//! says how the block splits into subsets (by a partition table), how many
//! bits each endpoint and index has, and how endpoints are interpolated
//! with 6-bit weights. The tables below are the specification's, packed:
//! a partition row holds each texel's subset in two bits, texel 0 lowest.

use std::sync::OnceLock;

/// Table.P2: the subset of each texel in the 64 two-subset partitions.
const PARTITIONS_2: [u32; 64] = [
    0x50505050, 0x40404040, 0x54545454, 0x54505040, 0x50404000, 0x55545450, 0x55545040, 0x54504000,
    0x50400000, 0x55555450, 0x55544000, 0x54400000, 0x55555440, 0x55550000, 0x55555500, 0x55000000,
    0x55150100, 0x00004054, 0x15010000, 0x00405054, 0x00004050, 0x15050100, 0x05010000, 0x40505054,
    0x00404050, 0x05010100, 0x14141414, 0x05141450, 0x01155440, 0x00555500, 0x15014054, 0x05414150,
    0x44444444, 0x55005500, 0x11441144, 0x05055050, 0x05500550, 0x11114444, 0x41144114, 0x44111144,
    0x15055054, 0x01055040, 0x05041050, 0x05455150, 0x14414114, 0x50050550, 0x41411414, 0x00141400,
    0x00041504, 0x00105410, 0x10541000, 0x04150400, 0x50410514, 0x41051450, 0x05415014, 0x14054150,
    0x41050514, 0x41505014, 0x40011554, 0x54150140, 0x50505500, 0x00555050, 0x15151010, 0x54540404,
];

/// Table.P3: the subset of each texel in the 64 three-subset partitions.
const PARTITIONS_3: [u32; 64] = [
    0xaa685050, 0x6a5a5040, 0x5a5a4200, 0x5450a0a8, 0xa5a50000, 0xa0a05050, 0x5555a0a0, 0x5a5a5050,
    0xaa550000, 0xaa555500, 0xaaaa5500, 0x90909090, 0x94949494, 0xa4a4a4a4, 0xa9a59450, 0x2a0a4250,
    0xa5945040, 0x0a425054, 0xa5a5a500, 0x55a0a0a0, 0xa8a85454, 0x6a6a4040, 0xa4a45000, 0x1a1a0500,
    0x0050a4a4, 0xaaa59090, 0x14696914, 0x69691400, 0xa08585a0, 0xaa821414, 0x50a4a450, 0x6a5a0200,
    0xa9a58000, 0x5090a0a8, 0xa8a09050, 0x24242424, 0x00aa5500, 0x24924924, 0x24499224, 0x50a50a50,
    0x500aa550, 0xaaaa4444, 0x66660000, 0xa5a0a5a0, 0x50a050a0, 0x69286928, 0x44aaaa44, 0x66666600,
    0xaa444444, 0x54a854a8, 0x95809580, 0x96969600, 0xa85454a8, 0x80959580, 0xaa141414, 0x96960000,
    0xaaaa1414, 0xa05050a0, 0xa0a5a5a0, 0x96000000, 0x40804080, 0xa9a8a9a8, 0xaaaaaa44, 0x2a4a5254,
];

/// Table.A2: the anchor texel of the second subset of a two-subset
/// partition.
const ANCHOR_2: [u8; 64] = [
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 2, 8, 2, 2, 8, 8, 15, 2, 8,
    2, 2, 8, 8, 2, 2, 15, 15, 6, 8, 2, 8, 15, 15, 2, 8, 2, 2, 2, 15, 15, 6, 6, 2, 6, 8, 15, 15, 2,
    2, 15, 15, 15, 15, 15, 2, 2, 15,
];

/// Table.A3a: the anchor texel of the second subset of a three-subset
/// partition.
const ANCHOR_3_SECOND: [u8; 64] = [
    3, 3, 15, 15, 8, 3, 15, 15, 8, 8, 6, 6, 6, 5, 3, 3, 3, 3, 8, 15, 3, 3, 6, 10, 5, 8, 8, 6, 8, 5,
    15, 15, 8, 15, 3, 5, 6, 10, 8, 15, 15, 3, 15, 5, 15, 15, 15, 15, 3, 15, 5, 5, 5, 8, 5, 10, 5,
    10, 8, 13, 15, 12, 3, 3,
];

/// Table.A3b: the anchor texel of the third subset of a three-subset
/// partition.
const ANCHOR_3_THIRD: [u8; 64] = [
    15, 8, 8, 3, 15, 15, 3, 8, 15, 15, 15, 15, 15, 15, 15, 8, 15, 8, 15, 3, 15, 8, 15, 8, 3, 15, 6,
    10, 15, 15, 10, 8, 15, 3, 15, 10, 10, 8, 9, 10, 6, 15, 8, 15, 3, 6, 6, 8, 15, 3, 15, 15, 15,
    15, 15, 15, 15, 15, 15, 15, 3, 15, 15, 8,
];

/// The interpolation weights (of 64) of 2-, 3- and 4-bit indices.
fn weight(bits: u32, index: u32) -> i32 {
    const W2: [i32; 4] = [0, 21, 43, 64];
    const W3: [i32; 8] = [0, 9, 18, 27, 37, 46, 55, 64];
    const W4: [i32; 16] = [0, 4, 9, 13, 17, 21, 26, 30, 34, 38, 43, 47, 51, 55, 60, 64];
    match bits {
        2 => W2[index as usize & 3],
        3 => W3[index as usize & 7],
        _ => W4[index as usize & 15],
    }
}

/// `e0` and `e1` mixed by a weight of 64.
fn interpolate(e0: i32, e1: i32, weight: i32) -> i32 {
    ((64 - weight) * e0 + weight * e1 + 32) >> 6
}

/// The subset texel `texel` is in, for a block of `subsets` subsets and
/// partition `partition`.
fn subset_of(subsets: u32, partition: u32, texel: usize) -> usize {
    let row = match subsets {
        2 => PARTITIONS_2[partition as usize & 63],
        3 => PARTITIONS_3[partition as usize & 63],
        _ => return 0,
    };
    ((row >> (2 * texel)) & 3) as usize
}

/// Whether `texel` is an anchor (its index has one bit fewer): texel 0,
/// and the tables' texel for each further subset.
fn is_anchor(subsets: u32, partition: u32, texel: usize) -> bool {
    let p = partition as usize & 63;
    texel == 0
        || match subsets {
            2 => texel == usize::from(ANCHOR_2[p]),
            3 => {
                texel == usize::from(ANCHOR_3_SECOND[p]) || texel == usize::from(ANCHOR_3_THIRD[p])
            }
            _ => false,
        }
}

/// A block's bits, read from the lowest up.
struct Bits {
    block: u128,
    at: u32,
}

impl Bits {
    fn new(block: &[u8]) -> Bits {
        let mut bytes = [0u8; 16];
        let n = block.len().min(16);
        bytes[..n].copy_from_slice(&block[..n]);
        Bits {
            block: u128::from_le_bytes(bytes),
            at: 0,
        }
    }

    fn read(&mut self, count: u32) -> u32 {
        if count == 0 || self.at >= 128 {
            self.at += count;
            return 0;
        }
        let value = (self.block >> self.at) as u32 & ((1u64 << count) - 1) as u32;
        self.at += count;
        value
    }

    /// The index of `texel` among 16 indices of `bits` bits starting at
    /// bit `start`, anchors having one bit fewer.
    fn index(&self, start: u32, bits: u32, texel: usize, anchor: impl Fn(usize) -> bool) -> u32 {
        let at = start + (0..texel).map(|t| bits - u32::from(anchor(t))).sum::<u32>();
        let width = bits - u32::from(anchor(texel));
        ((self.block >> at) as u32) & ((1u32 << width) - 1)
    }
}

/// One BC7 mode: subsets, partition bits, rotation bits, index-selection
/// bits, colour bits, alpha bits, per-endpoint P-bits, shared P-bits,
/// index bits and secondary index bits (Table.M).
struct Bc7Mode {
    subsets: u32,
    partition_bits: u32,
    rotation_bits: u32,
    selection_bits: u32,
    colour_bits: u32,
    alpha_bits: u32,
    endpoint_p_bits: u32,
    shared_p_bits: u32,
    index_bits: u32,
    index_bits_2: u32,
}

const BC7_MODES: [Bc7Mode; 8] = [
    Bc7Mode {
        subsets: 3,
        partition_bits: 4,
        rotation_bits: 0,
        selection_bits: 0,
        colour_bits: 4,
        alpha_bits: 0,
        endpoint_p_bits: 1,
        shared_p_bits: 0,
        index_bits: 3,
        index_bits_2: 0,
    },
    Bc7Mode {
        subsets: 2,
        partition_bits: 6,
        rotation_bits: 0,
        selection_bits: 0,
        colour_bits: 6,
        alpha_bits: 0,
        endpoint_p_bits: 0,
        shared_p_bits: 1,
        index_bits: 3,
        index_bits_2: 0,
    },
    Bc7Mode {
        subsets: 3,
        partition_bits: 6,
        rotation_bits: 0,
        selection_bits: 0,
        colour_bits: 5,
        alpha_bits: 0,
        endpoint_p_bits: 0,
        shared_p_bits: 0,
        index_bits: 2,
        index_bits_2: 0,
    },
    Bc7Mode {
        subsets: 2,
        partition_bits: 6,
        rotation_bits: 0,
        selection_bits: 0,
        colour_bits: 7,
        alpha_bits: 0,
        endpoint_p_bits: 1,
        shared_p_bits: 0,
        index_bits: 2,
        index_bits_2: 0,
    },
    Bc7Mode {
        subsets: 1,
        partition_bits: 0,
        rotation_bits: 2,
        selection_bits: 1,
        colour_bits: 5,
        alpha_bits: 6,
        endpoint_p_bits: 0,
        shared_p_bits: 0,
        index_bits: 2,
        index_bits_2: 3,
    },
    Bc7Mode {
        subsets: 1,
        partition_bits: 0,
        rotation_bits: 2,
        selection_bits: 0,
        colour_bits: 7,
        alpha_bits: 8,
        endpoint_p_bits: 0,
        shared_p_bits: 0,
        index_bits: 2,
        index_bits_2: 2,
    },
    Bc7Mode {
        subsets: 1,
        partition_bits: 0,
        rotation_bits: 0,
        selection_bits: 0,
        colour_bits: 7,
        alpha_bits: 7,
        endpoint_p_bits: 1,
        shared_p_bits: 0,
        index_bits: 4,
        index_bits_2: 0,
    },
    Bc7Mode {
        subsets: 2,
        partition_bits: 6,
        rotation_bits: 0,
        selection_bits: 0,
        colour_bits: 5,
        alpha_bits: 5,
        endpoint_p_bits: 1,
        shared_p_bits: 0,
        index_bits: 2,
        index_bits_2: 0,
    },
];

/// `value` of `bits` bits widened to 8 by replicating its top bits.
fn widen(value: u32, bits: u32) -> i32 {
    if bits >= 8 {
        return value as i32;
    }
    let v = value << (8 - bits);
    (v | (v >> bits)) as i32
}

/// Texel `texel` (y * 4 + x) of a BC7 block as RGBA8. A block whose
/// first byte is 0 (no mode; reserved) decodes to 0 in every channel.
pub fn bc7(block: &[u8], texel: usize) -> [u8; 4] {
    let mut bits = Bits::new(block);
    let first = bits.block as u8;
    if first == 0 {
        return [0; 4];
    }
    let mode_number = first.trailing_zeros();
    let mode = &BC7_MODES[mode_number as usize];
    bits.read(mode_number + 1);
    let partition = bits.read(mode.partition_bits);
    let rotation = bits.read(mode.rotation_bits);
    let selection = bits.read(mode.selection_bits);
    let subsets = mode.subsets as usize;
    // [subset][endpoint][channel], colour first by channel, then subset,
    // then endpoint.
    let mut endpoints = [[[0u32; 4]; 2]; 3];
    for channel in 0..3 {
        for subset in endpoints.iter_mut().take(subsets) {
            for endpoint in subset.iter_mut() {
                endpoint[channel] = bits.read(mode.colour_bits);
            }
        }
    }
    if mode.alpha_bits > 0 {
        for subset in endpoints.iter_mut().take(subsets) {
            for endpoint in subset.iter_mut() {
                endpoint[3] = bits.read(mode.alpha_bits);
            }
        }
    }
    let mut p_bits = [[0u32; 2]; 3];
    if mode.endpoint_p_bits > 0 {
        for subset in p_bits.iter_mut().take(subsets) {
            for p in subset.iter_mut() {
                *p = bits.read(1);
            }
        }
    }
    if mode.shared_p_bits > 0 {
        for subset in p_bits.iter_mut().take(subsets) {
            let p = bits.read(1);
            *subset = [p, p];
        }
    }
    let has_p = mode.endpoint_p_bits + mode.shared_p_bits > 0;
    let unquantized = |subset: usize, endpoint: usize, channel: usize| -> i32 {
        let value = endpoints[subset][endpoint][channel];
        let width = if channel == 3 {
            mode.alpha_bits
        } else {
            mode.colour_bits
        };
        if channel == 3 && mode.alpha_bits == 0 {
            return 255;
        }
        if has_p {
            widen(value << 1 | p_bits[subset][endpoint], width + 1)
        } else {
            widen(value, width)
        }
    };
    let subset = subset_of(mode.subsets, partition, texel);
    let index_start = bits.at;
    let anchor = |t: usize| is_anchor(mode.subsets, partition, t);
    let primary = bits.index(index_start, mode.index_bits, texel, anchor);
    let (colour_index, colour_bits, alpha_index, alpha_bits) = if mode.index_bits_2 > 0 {
        let start_2 = index_start + 16 * mode.index_bits - 1;
        let secondary = bits.index(start_2, mode.index_bits_2, texel, |t| t == 0);
        if selection == 1 {
            (secondary, mode.index_bits_2, primary, mode.index_bits)
        } else {
            (primary, mode.index_bits, secondary, mode.index_bits_2)
        }
    } else {
        (primary, mode.index_bits, primary, mode.index_bits)
    };
    let mut rgba = [0u8; 4];
    for (channel, out) in rgba.iter_mut().enumerate() {
        let (index, index_bits) = if channel == 3 {
            (alpha_index, alpha_bits)
        } else {
            (colour_index, colour_bits)
        };
        let e0 = unquantized(subset, 0, channel);
        let e1 = unquantized(subset, 1, channel);
        *out = interpolate(e0, e1, weight(index_bits, index)) as u8;
    }
    match rotation {
        1 => rgba.swap(3, 0),
        2 => rgba.swap(3, 1),
        3 => rgba.swap(3, 2),
        _ => {}
    }
    rgba
}

/// One BC6H mode (Table.MF): transformed endpoints, partition bits,
/// endpoint bits, the delta bits of each channel, and its field layout
/// (Table.F).
struct Bc6Mode {
    transformed: bool,
    partition_bits: u32,
    endpoint_bits: u32,
    delta_bits: [u32; 3],
    layout: &'static str,
}

/// The modes by number; `None` for the reserved numbers.
fn bc6_mode(number: u32) -> Option<Bc6Mode> {
    let m = |transformed, partition_bits, endpoint_bits, delta_bits, layout| {
        Some(Bc6Mode {
            transformed,
            partition_bits,
            endpoint_bits,
            delta_bits,
            layout,
        })
    };
    match number {
        0 => m(true, 5, 10, [5, 5, 5], "g2[4],b2[4],b3[4],r0[9:0],g0[9:0],b0[9:0],r1[4:0],g3[4],g2[3:0],g1[4:0],b3[0],g3[3:0],b1[4:0],b3[1],b2[3:0],r2[4:0],b3[2],r3[4:0],b3[3]"),
        1 => m(true, 5, 7, [6, 6, 6], "g2[5],g3[4],g3[5],r0[6:0],b3[0],b3[1],b2[4],g0[6:0],b2[5],b3[2],g2[4],b0[6:0],b3[3],b3[5],b3[4],r1[5:0],g2[3:0],g1[5:0],g3[3:0],b1[5:0],b2[3:0],r2[5:0],r3[5:0]"),
        2 => m(true, 5, 11, [5, 4, 4], "r0[9:0],g0[9:0],b0[9:0],r1[4:0],r0[10],g2[3:0],g1[3:0],g0[10],b3[0],g3[3:0],b1[3:0],b0[10],b3[1],b2[3:0],r2[4:0],b3[2],r3[4:0],b3[3]"),
        6 => m(true, 5, 11, [4, 5, 4], "r0[9:0],g0[9:0],b0[9:0],r1[3:0],r0[10],g3[4],g2[3:0],g1[4:0],g0[10],g3[3:0],b1[3:0],b0[10],b3[1],b2[3:0],r2[3:0],b3[0],b3[2],r3[3:0],g2[4],b3[3]"),
        10 => m(true, 5, 11, [4, 4, 5], "r0[9:0],g0[9:0],b0[9:0],r1[3:0],r0[10],b2[4],g2[3:0],g1[3:0],g0[10],b3[0],g3[3:0],b1[4:0],b0[10],b2[3:0],r2[3:0],b3[1],b3[2],r3[3:0],b3[4],b3[3]"),
        14 => m(true, 5, 9, [5, 5, 5], "r0[8:0],b2[4],g0[8:0],g2[4],b0[8:0],b3[4],r1[4:0],g3[4],g2[3:0],g1[4:0],b3[0],g3[3:0],b1[4:0],b3[1],b2[3:0],r2[4:0],b3[2],r3[4:0],b3[3]"),
        18 => m(true, 5, 8, [6, 5, 5], "r0[7:0],g3[4],b2[4],g0[7:0],b3[2],g2[4],b0[7:0],b3[3],b3[4],r1[5:0],g2[3:0],g1[4:0],b3[0],g3[3:0],b1[4:0],b3[1],b2[3:0],r2[5:0],r3[5:0]"),
        22 => m(true, 5, 8, [5, 6, 5], "r0[7:0],b3[0],b2[4],g0[7:0],g2[5],g2[4],b0[7:0],g3[5],b3[4],r1[4:0],g3[4],g2[3:0],g1[5:0],g3[3:0],b1[4:0],b3[1],b2[3:0],r2[4:0],b3[2],r3[4:0],b3[3]"),
        26 => m(true, 5, 8, [5, 5, 6], "r0[7:0],b3[1],b2[4],g0[7:0],b2[5],g2[4],b0[7:0],b3[5],b3[4],r1[4:0],g3[4],g2[3:0],g1[4:0],b3[0],g3[3:0],b1[5:0],b2[3:0],r2[4:0],b3[2],r3[4:0],b3[3]"),
        30 => m(false, 5, 6, [6, 6, 6], "r0[5:0],g3[4],b3[0],b3[1],b2[4],g0[5:0],g2[5],b2[5],b3[2],g2[4],b0[5:0],g3[5],b3[3],b3[5],b3[4],r1[5:0],g2[3:0],g1[5:0],g3[3:0],b1[5:0],b2[3:0],r2[5:0],r3[5:0]"),
        3 => m(false, 0, 10, [10, 10, 10], "r0[9:0],g0[9:0],b0[9:0],r1[9:0],g1[9:0],b1[9:0]"),
        7 => m(true, 0, 11, [9, 9, 9], "r0[9:0],g0[9:0],b0[9:0],r1[8:0],r0[10],g1[8:0],g0[10],b1[8:0],b0[10]"),
        11 => m(true, 0, 12, [8, 8, 8], "r0[9:0],g0[9:0],b0[9:0],r1[7:0],r0[10:11],g1[7:0],g0[10:11],b1[7:0],b0[10:11]"),
        15 => m(true, 0, 16, [4, 4, 4], "r0[9:0],g0[9:0],b0[9:0],r1[3:0],r0[10:15],g1[3:0],g0[10:15],b1[3:0],b0[10:15]"),
        _ => None,
    }
}

/// A layout field: which endpoint value (`endpoint * 3 + channel`), and
/// the bit range `v[a:b]` it fills.
type Field = (usize, u32, u32);

/// A mode's layout parsed once.
fn bc6_fields(number: u32) -> &'static [Field] {
    static PARSED: OnceLock<Vec<(u32, Vec<Field>)>> = OnceLock::new();
    let parsed = PARSED.get_or_init(|| {
        [0u32, 1, 2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15]
            .into_iter()
            .filter_map(|n| bc6_mode(n).map(|m| (n, parse_layout(m.layout))))
            .collect()
    });
    parsed
        .iter()
        .find(|(n, _)| *n == number)
        .map_or(&[][..], |(_, fields)| fields.as_slice())
}

/// Parses Table.F's notation: `r0[9:0]`, `g2[4]`, `r0[10:15]` (reversed).
fn parse_layout(layout: &str) -> Vec<Field> {
    layout
        .split(',')
        .filter_map(|item| {
            let (name, range) = item.trim().split_once('[')?;
            let mut chars = name.chars();
            let channel = match chars.next()? {
                'r' => 0,
                'g' => 1,
                _ => 2,
            };
            let endpoint: usize = chars.as_str().parse().ok()?;
            let range = range.trim_end_matches(']');
            let (a, b) = match range.split_once(':') {
                Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
                None => {
                    let a = range.parse().ok()?;
                    (a, a)
                }
            };
            Some((endpoint * 3 + channel, a, b))
        })
        .collect()
}

/// `value` of `bits` bits as a signed number.
fn sign_extend(value: i32, bits: u32) -> i32 {
    let shift = 32 - bits;
    (value << shift) >> shift
}

/// An endpoint component of `bits` bits widened to 16 (the
/// specification's unquantization).
fn unquantize(x: i32, bits: u32, signed: bool) -> i32 {
    if !signed {
        if bits >= 15 || x == 0 {
            x
        } else if x == (1 << bits) - 1 {
            0xFFFF
        } else {
            ((x << 15) + 0x4000) >> (bits - 1)
        }
    } else if bits >= 16 {
        x
    } else {
        let (negative, magnitude) = (x < 0, x.abs());
        let unq = if magnitude == 0 {
            0
        } else if magnitude >= (1 << (bits - 1)) - 1 {
            0x7FFF
        } else {
            ((magnitude << 15) + 0x4000) >> (bits - 1)
        };
        if negative {
            -unq
        } else {
            unq
        }
    }
}

/// Texel `texel` (y * 4 + x) of a BC6H block as three f16 values (bits).
/// A reserved mode decodes to 0 (alpha is always 1).
pub fn bc6h(block: &[u8], texel: usize, signed: bool) -> [u16; 3] {
    let mut bits = Bits::new(block);
    let low = bits.read(2);
    let number = if low < 2 {
        low
    } else {
        low | bits.read(3) << 2
    };
    let Some(mode) = bc6_mode(number) else {
        return [0; 3];
    };
    // Twelve values: endpoints 0-3, red, green, blue.
    let mut values = [0i32; 12];
    for &(value, a, b) in bc6_fields(number) {
        let count = a.abs_diff(b) + 1;
        let field = bits.read(count) as i32;
        if a >= b {
            values[value] |= field << b;
        } else {
            for i in 0..count {
                values[value] |= ((field >> i) & 1) << (b - i);
            }
        }
    }
    let partition = bits.read(mode.partition_bits);
    let endpoints = if mode.partition_bits > 0 { 4 } else { 2 };
    let epb = mode.endpoint_bits;
    for channel in 0..3 {
        if signed {
            values[channel] = sign_extend(values[channel], epb);
        }
        let base = values[channel];
        for e in 1..endpoints {
            let v = &mut values[e * 3 + channel];
            if mode.transformed {
                let delta = sign_extend(*v, mode.delta_bits[channel]);
                *v = (base + delta) & ((1 << epb) - 1);
                if signed {
                    *v = sign_extend(*v, epb);
                }
            } else if signed {
                *v = sign_extend(*v, epb);
            }
        }
    }
    let subsets = if mode.partition_bits > 0 { 2 } else { 1 };
    let subset = subset_of(subsets, partition, texel);
    let index_bits = if subsets == 2 { 3 } else { 4 };
    let index_start = 128 - (16 * index_bits - subsets);
    let index = bits.index(index_start, index_bits, texel, |t| {
        is_anchor(subsets, partition, t)
    });
    let w = weight(index_bits, index);
    std::array::from_fn(|channel| {
        let e0 = unquantize(values[subset * 6 + channel], epb, signed);
        let e1 = unquantize(values[subset * 6 + 3 + channel], epb, signed);
        let x = interpolate(e0, e1, w);
        if signed {
            let magnitude = ((x.abs() * 31) >> 5) as u16;
            if x < 0 {
                magnitude | 0x8000
            } else {
                magnitude
            }
        } else {
            ((x * 31) >> 6) as u16
        }
    })
}
