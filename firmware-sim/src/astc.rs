//! ASTC: the adaptive scalable texture compression formats, 128-bit
//! blocks of 4x4 to 12x12 texels, LDR and HDR, that the texture unit
//! decodes (Mesa's `ail` maps every 2D footprint to the hardware's own
//! format). A block names a weight grid, up to four partitions each with
//! a colour endpoint mode and its two endpoints, and one or two planes of
//! weights, all integer-sequence encoded; or it is a void-extent block of
//! one colour. The definitions are the Khronos Data Format
//! Specification's (ASTC section), followed bit for bit: every step is
//! integer arithmetic up to the final conversion of the 16-bit
//! interpolated value (unorm, sRGB's top byte, or HDR's logarithmic value
//! to fp16). An invalid block decodes to the error colour, magenta.

/// The error colour: the specification's magenta (its HDR profile may
/// return NaNs instead; which the hardware returns is not public).
const ERROR: [f32; 4] = [1.0, 0.0, 1.0, 1.0];

/// The quantisation levels of an integer sequence, from fewest to most.
const LEVELS: [u32; 21] = [
    2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256,
];

/// `count` bits of `word` from bit `low` (0 past bit 127).
fn bits(word: u128, low: u32, count: u32) -> u32 {
    if low >= 128 || count == 0 {
        return 0;
    }
    ((word >> low) & ((1u128 << count) - 1)) as u32
}

/// How a level's values are stored: (trits, quints, low bits).
fn encoding(levels: u32) -> (bool, bool, u32) {
    let trits = levels.is_multiple_of(3);
    let quints = levels.is_multiple_of(5);
    let base = levels
        / if trits {
            3
        } else if quints {
            5
        } else {
            1
        };
    (trits, quints, base.trailing_zeros())
}

/// Bits of `count` values at `levels`.
fn sequence_bits(levels: u32, count: u32) -> u32 {
    let (trits, quints, n) = encoding(levels);
    n * count
        + if trits {
            (8 * count).div_ceil(5)
        } else if quints {
            (7 * count).div_ceil(3)
        } else {
            0
        }
}

/// The five trits packed in `t`.
fn trits(t: u32) -> [u32; 5] {
    let bit = |i: u32| (t >> i) & 1;
    let (c, t4, t3);
    if (t >> 2) & 7 == 7 {
        c = ((t >> 5) & 7) << 2 | (t & 3);
        t4 = 2;
        t3 = 2;
    } else {
        c = t & 0x1F;
        if (t >> 5) & 3 == 3 {
            t4 = 2;
            t3 = bit(7);
        } else {
            t4 = bit(7);
            t3 = (t >> 5) & 3;
        }
    }
    let cb = |i: u32| (c >> i) & 1;
    let (t2, t1, t0);
    if c & 3 == 3 {
        t2 = 2;
        t1 = cb(4);
        t0 = cb(3) << 1 | (cb(2) & !cb(3) & 1);
    } else if (c >> 2) & 3 == 3 {
        t2 = 2;
        t1 = 2;
        t0 = c & 3;
    } else {
        t2 = cb(4);
        t1 = (c >> 2) & 3;
        t0 = cb(1) << 1 | (cb(0) & !cb(1) & 1);
    }
    [t0, t1, t2, t3, t4]
}

/// The three quints packed in `q`.
fn quints(q: u32) -> [u32; 3] {
    let bit = |i: u32| (q >> i) & 1;
    if (q >> 1) & 3 == 3 && (q >> 5) & 3 == 0 {
        let q2 = bit(0) << 2 | (bit(4) & !bit(0) & 1) << 1 | (bit(3) & !bit(0) & 1);
        return [4, 4, q2];
    }
    let (q2, c) = if (q >> 1) & 3 == 3 {
        (4, ((q >> 3) & 3) << 3 | ((!(q >> 5)) & 3) << 1 | bit(0))
    } else {
        ((q >> 5) & 3, q & 0x1F)
    };
    if c & 7 == 5 {
        [(c >> 3) & 3, 4, q2]
    } else {
        [c & 7, (c >> 3) & 3, q2]
    }
}

/// `count` values at `levels` from bit `start` of `word`, each as (its
/// trit or quint, its low bits): the trit or quint is 0 for a level of
/// bits only. Bits past `end` read as 0.
fn sequence(word: u128, start: u32, end: u32, levels: u32, count: u32) -> Vec<(u32, u32)> {
    let (has_trits, has_quints, n) = encoding(levels);
    let read = |at: &mut u32, count: u32| -> u32 {
        let value = (0..count)
            .map(|i| {
                if *at + i < end {
                    bits(word, *at + i, 1) << i
                } else {
                    0
                }
            })
            .sum();
        *at += count;
        value
    };
    let mut at = start;
    let mut out = Vec::with_capacity(count as usize);
    while (out.len() as u32) < count {
        if has_trits {
            let mut m = [0; 5];
            let mut t = 0;
            for (i, shift, width) in [(0, 0, 2), (1, 2, 2), (2, 4, 1), (3, 5, 2), (4, 7, 1)] {
                m[i] = read(&mut at, n);
                t |= read(&mut at, width) << shift;
            }
            out.extend(trits(t).into_iter().zip(m));
        } else if has_quints {
            let mut m = [0; 3];
            let mut q = 0;
            for (i, shift, width) in [(0, 0, 3), (1, 3, 2), (2, 5, 2)] {
                m[i] = read(&mut at, n);
                q |= read(&mut at, width) << shift;
            }
            out.extend(quints(q).into_iter().zip(m));
        } else {
            let m = read(&mut at, n);
            out.push((0, m));
        }
    }
    out.truncate(count as usize);
    out
}

/// A colour endpoint value at `levels` unquantised to 0-255.
fn colour_value(levels: u32, (digit, m): (u32, u32)) -> i32 {
    let (has_trits, has_quints, n) = encoding(levels);
    if !has_trits && !has_quints {
        return replicate(m, n, 8) as i32;
    }
    let bit = |i: u32| (m >> i) & 1;
    let a = if bit(0) == 1 { 0x1FF } else { 0 };
    let (b, c) = match (has_trits, n) {
        (true, 1) => (0, 204),
        (false, 1) => (0, 113),
        (true, 2) => (pattern(m, "b000b0bb0"), 93),
        (false, 2) => (pattern(m, "b0000bb00"), 54),
        (true, 3) => (pattern(m, "cb000cbcb"), 44),
        (false, 3) => (pattern(m, "cb0000cbc"), 26),
        (true, 4) => (pattern(m, "dcb000dcb"), 22),
        (false, 4) => (pattern(m, "dcb0000dc"), 13),
        (true, 5) => (pattern(m, "edcb000ed"), 11),
        (false, 5) => (pattern(m, "edcb0000e"), 6),
        _ => (pattern(m, "fedcb000f"), 5),
    };
    let t = (digit * c + b) ^ a;
    ((a & 0x80) | (t >> 2)) as i32
}

/// A weight at `levels` unquantised to 0-64.
fn weight_value(levels: u32, (digit, m): (u32, u32)) -> u32 {
    let (has_trits, has_quints, n) = encoding(levels);
    let value = if !has_trits && !has_quints {
        replicate(m, n, 6)
    } else if n == 0 {
        return digit * if has_trits { 32 } else { 16 };
    } else {
        let a = if m & 1 == 1 { 0x7F } else { 0 };
        let (b, c) = match (has_trits, n) {
            (true, 1) => (0, 50),
            (false, 1) => (0, 28),
            (true, 2) => (pattern(m, "b000b0b"), 23),
            (false, 2) => (pattern(m, "b0000b0"), 13),
            _ => (pattern(m, "cb000cb"), 11),
        };
        let t = (digit * c + b) ^ a;
        (a & 0x20) | (t >> 2)
    };
    if value > 32 {
        value + 1
    } else {
        value
    }
}

/// The bits of `m` laid out as the specification's pattern (most
/// significant first; a letter is a bit of `m`, `a` bit 0).
fn pattern(m: u32, layout: &str) -> u32 {
    layout.bytes().fold(0, |acc, ch| {
        acc << 1
            | match ch {
                b'0' => 0,
                letter => (m >> (letter - b'a')) & 1,
            }
    })
}

/// An `n`-bit value widened to `width` bits by repeating it.
fn replicate(value: u32, n: u32, width: u32) -> u32 {
    if n == 0 {
        return 0;
    }
    let mut out = 0;
    let mut have = 0;
    while have < width {
        out = out << n | value;
        have += n;
    }
    out >> (have - width)
}

/// The weight grid a block mode names: (width, height, dual plane,
/// weight levels), or `None` for a reserved mode.
fn block_mode(mode: u32) -> Option<(u32, u32, bool, u32)> {
    let a = (mode >> 5) & 3;
    let (mut dual, mut high) = ((mode >> 10) & 1 == 1, (mode >> 9) & 1 == 1);
    let (range, width, height);
    if mode & 3 != 0 {
        range = (mode >> 4) & 1 | (mode & 3) << 1;
        let b = (mode >> 7) & 3;
        (width, height) = match (mode >> 2) & 3 {
            0 => (b + 4, a + 2),
            1 => (b + 8, a + 2),
            2 => (a + 2, b + 8),
            _ if mode & 0x100 != 0 => ((b & 1) + 2, a + 2),
            _ => (a + 2, (b & 1) + 6),
        };
    } else {
        range = (mode >> 4) & 1 | ((mode >> 2) & 3) << 1;
        if (mode >> 2) & 3 == 0 {
            return None;
        }
        let b = (mode >> 9) & 3;
        (width, height) = match (mode >> 7) & 3 {
            0 => (12, a + 2),
            1 => (a + 2, 12),
            2 => {
                dual = false;
                high = false;
                (a + 6, b + 6)
            }
            _ => match a {
                0 => (6, 10),
                1 => (10, 6),
                _ => return None,
            },
        };
    }
    if range < 2 {
        return None;
    }
    let levels = if high {
        [10, 12, 16, 20, 24, 32]
    } else {
        [2, 3, 4, 5, 6, 8]
    }[range as usize - 2];
    Some((width, height, dual, levels))
}

/// The specification's hash of a partition seed.
fn hash52(mut p: u32) -> u32 {
    p ^= p >> 15;
    p = p.wrapping_sub(p << 17);
    p = p.wrapping_add(p << 7);
    p = p.wrapping_add(p << 4);
    p ^= p >> 5;
    p = p.wrapping_add(p << 16);
    p ^= p >> 7;
    p ^= p >> 3;
    p ^= p << 6;
    p ^= p >> 17;
    p
}

/// The partition of texel (x, y) in a block of `partitions` partitions
/// with pattern `seed`; `small` for blocks of fewer than 31 texels.
fn partition(seed: u32, (x, y): (u32, u32), partitions: u32, small: bool) -> usize {
    let (x, y) = if small { (x << 1, y << 1) } else { (x, y) };
    let seed = seed + (partitions - 1) * 1024;
    let rnum = hash52(seed);
    let mut s = [
        rnum & 0xF,
        (rnum >> 4) & 0xF,
        (rnum >> 8) & 0xF,
        (rnum >> 12) & 0xF,
        (rnum >> 16) & 0xF,
        (rnum >> 20) & 0xF,
        (rnum >> 24) & 0xF,
        (rnum >> 28) & 0xF,
    ];
    for v in &mut s {
        *v *= *v;
    }
    let (sh1, sh2) = if seed & 1 != 0 {
        (
            if seed & 2 != 0 { 4 } else { 5 },
            if partitions == 3 { 6 } else { 5 },
        )
    } else {
        (
            if partitions == 3 { 6 } else { 5 },
            if seed & 2 != 0 { 4 } else { 5 },
        )
    };
    for (i, v) in s.iter_mut().enumerate() {
        *v >>= if i % 2 == 0 { sh1 } else { sh2 };
    }
    // z is 0 in 2D: seeds 9-12 drop out.
    let a = (s[0] * x + s[1] * y + (rnum >> 14)) & 0x3F;
    let b = (s[2] * x + s[3] * y + (rnum >> 10)) & 0x3F;
    let c = if partitions < 3 {
        0
    } else {
        (s[4] * x + s[5] * y + (rnum >> 6)) & 0x3F
    };
    let d = if partitions < 4 {
        0
    } else {
        (s[6] * x + s[7] * y + (rnum >> 2)) & 0x3F
    };
    if a >= b && a >= c && a >= d {
        0
    } else if b >= c && b >= d {
        1
    } else if c >= d {
        2
    } else {
        3
    }
}

/// A partition's two endpoints: per channel, the 16-bit value before
/// interpolation, and whether the channel is HDR (its value logarithmic).
struct Endpoints {
    low: [u32; 4],
    high: [u32; 4],
    hdr: [bool; 4],
}

/// LDR endpoints (8-bit channels) widened to 16 bits: sRGB fills the
/// low byte with 0x80, linear repeats the byte.
fn ldr(low: [i32; 4], high: [i32; 4], srgb: bool) -> Endpoints {
    let widen = |v: i32| {
        let v = v.clamp(0, 255) as u32;
        if srgb {
            v << 8 | 0x80
        } else {
            v << 8 | v
        }
    };
    Endpoints {
        low: low.map(widen),
        high: high.map(widen),
        hdr: [false; 4],
    }
}

/// The specification's transfer of a value's top bit to its base,
/// returning (offset, base): the offset becomes a signed 6-bit value.
fn bit_transfer_signed(offset: i32, base: i32) -> (i32, i32) {
    let base = (base >> 1) | (offset & 0x80);
    let offset = (offset >> 1) & 0x3F;
    let offset = if offset & 0x20 != 0 {
        offset - 0x40
    } else {
        offset
    };
    (offset, base)
}

/// Blue contraction: red and green move halfway to blue.
fn blue_contract(c: [i32; 4]) -> [i32; 4] {
    [(c[0] + c[2]) >> 1, (c[1] + c[2]) >> 1, c[2], c[3]]
}

/// HDR RGB with a base and a scale (mode 7), as 12-bit values.
fn hdr_rgb_scale(v: &[i32]) -> ([i32; 3], [i32; 3]) {
    let modeval = ((v[0] & 0xC0) >> 6) | ((v[1] & 0x80) >> 5) | ((v[2] & 0x80) >> 4);
    let (major, mode) = if modeval & 0xC != 0xC {
        (modeval >> 2, modeval & 3)
    } else if modeval != 0xF {
        (modeval & 3, 4)
    } else {
        (0, 5)
    };
    let (mut red, mut green, mut blue, mut scale) =
        (v[0] & 0x3F, v[1] & 0x1F, v[2] & 0x1F, v[3] & 0x1F);
    let x = [
        (v[1] >> 6) & 1,
        (v[1] >> 5) & 1,
        (v[2] >> 6) & 1,
        (v[2] >> 5) & 1,
        (v[3] >> 7) & 1,
        (v[3] >> 6) & 1,
        (v[3] >> 5) & 1,
    ];
    let ohm = 1 << mode;
    let when = |mask: i32, value: i32| if ohm & mask != 0 { value } else { 0 };
    green |= when(0x30, x[0] << 6) | when(0x3A, x[1] << 5);
    blue |= when(0x30, x[2] << 6) | when(0x3A, x[3] << 5);
    scale |= when(0x3D, x[6] << 5) | when(0x2D, x[5] << 6) | when(0x04, x[4] << 7);
    red |= when(0x3B, x[4] << 6) | when(0x04, x[3] << 6);
    red |= when(0x10, x[5] << 7) | when(0x0F, x[2] << 7);
    red |= when(0x05, x[1] << 8) | when(0x0A, x[0] << 8);
    red |= when(0x05, x[0] << 9) | when(0x02, x[6] << 9);
    red |= when(0x01, x[3] << 10) | when(0x02, x[5] << 10);
    let shift = [1, 1, 2, 3, 4, 5][mode as usize];
    red <<= shift;
    green <<= shift;
    blue <<= shift;
    scale <<= shift;
    if mode != 5 {
        green = red - green;
        blue = red - blue;
    }
    let mut high = [red, green, blue];
    let mut low = [red - scale, green - scale, blue - scale];
    for c in [&mut high, &mut low] {
        match major {
            1 => c.swap(0, 1),
            2 => c.swap(0, 2),
            _ => {}
        }
        *c = c.map(|v| v.clamp(0, 0xFFF));
    }
    (low, high)
}

/// HDR RGB direct (mode 11, and the colour of modes 14 and 15), as
/// 12-bit values.
fn hdr_rgb(v: &[i32]) -> ([i32; 3], [i32; 3]) {
    let major = ((v[4] & 0x80) >> 7) | ((v[5] & 0x80) >> 6);
    if major == 3 {
        return (
            [v[0] << 4, v[2] << 4, (v[4] & 0x7F) << 5],
            [v[1] << 4, v[3] << 4, (v[5] & 0x7F) << 5],
        );
    }
    let mode = ((v[1] & 0x80) >> 7) | ((v[2] & 0x80) >> 6) | ((v[3] & 0x80) >> 5);
    let mut va = v[0] | ((v[1] & 0x40) << 2);
    let (mut vb0, mut vb1, mut vc) = (v[2] & 0x3F, v[3] & 0x3F, v[1] & 0x3F);
    let d_bits = [7, 6, 7, 6, 5, 6, 5, 6][mode as usize];
    let sign_extend = |value: i32| (value << (32 - d_bits)) >> (32 - d_bits);
    let (vd0, vd1) = (sign_extend(v[4] & 0x7F), sign_extend(v[5] & 0x7F));
    let x = [
        (v[2] >> 6) & 1,
        (v[3] >> 6) & 1,
        (v[4] >> 6) & 1,
        (v[5] >> 6) & 1,
        (v[4] >> 5) & 1,
        (v[5] >> 5) & 1,
    ];
    let ohm = 1 << mode;
    let when = |mask: i32, value: i32| if ohm & mask != 0 { value } else { 0 };
    va |= when(0xA4, x[0] << 9) | when(0x08, x[2] << 9) | when(0x50, x[4] << 9);
    va |= when(0x50, x[5] << 10) | when(0xA0, x[1] << 10) | when(0xC0, x[2] << 11);
    vc |= when(0x04, x[1] << 6) | when(0xE8, x[3] << 6) | when(0x20, x[2] << 7);
    vb0 |= when(0x5B, x[0] << 6) | when(0x12, x[2] << 7);
    vb1 |= when(0x5B, x[1] << 6) | when(0x12, x[3] << 7);
    let scale = 1 << ((mode >> 1) ^ 3);
    let [va, vb0, vb1, vc, vd0, vd1] = [va, vb0, vb1, vc, vd0, vd1].map(|v| v * scale);
    let mut high = [va, va - vb0, va - vb1];
    let mut low = [va - vc, va - vb0 - vc - vd0, va - vb1 - vc - vd1];
    for c in [&mut high, &mut low] {
        *c = c.map(|v| v.clamp(0, 0xFFF));
        match major {
            1 => c.swap(0, 1),
            2 => c.swap(0, 2),
            _ => {}
        }
    }
    (low, high)
}

/// HDR alpha (mode 15), as 12-bit values.
fn hdr_alpha(v6: i32, v7: i32) -> (i32, i32) {
    let mode = ((v6 >> 7) & 1) | ((v7 >> 6) & 2);
    let (mut v6, mut v7) = (v6 & 0x7F, v7 & 0x7F);
    if mode == 3 {
        return (v6 << 5, v7 << 5);
    }
    v6 |= (v7 << (mode + 1)) & 0x780;
    v7 &= 0x3F >> mode;
    v7 ^= 0x20 >> mode;
    v7 -= 0x20 >> mode;
    v6 <<= 4 - mode;
    v7 <<= 4 - mode;
    (v6, (v7 + v6).clamp(0, 0xFFF))
}

/// A partition's endpoints from its colour endpoint mode and unquantised
/// values; `None` for an HDR mode in an sRGB image.
fn endpoints(mode: u32, v: &[i32], srgb: bool) -> Option<Endpoints> {
    let hdr_rgb_with = |(low, high): ([i32; 3], [i32; 3]), alpha: Option<(i32, i32)>| {
        let twelve = |c: [i32; 3], a: i32| [c[0], c[1], c[2], a].map(|v| (v as u32) << 4);
        match alpha {
            // 0x780 in 12 bits is 1.0 once converted.
            None => Endpoints {
                low: twelve(low, 0x780),
                high: twelve(high, 0x780),
                hdr: [true; 4],
            },
            Some((a0, a1)) => Endpoints {
                low: twelve(low, a0),
                high: twelve(high, a1),
                hdr: [true; 4],
            },
        }
    };
    if srgb && matches!(mode, 2 | 3 | 7 | 11 | 14 | 15) {
        return None;
    }
    Some(match mode {
        0 => ldr([v[0], v[0], v[0], 255], [v[1], v[1], v[1], 255], srgb),
        1 => {
            let l0 = (v[0] >> 2) | (v[1] & 0xC0);
            let l1 = (l0 + (v[1] & 0x3F)).min(255);
            ldr([l0, l0, l0, 255], [l1, l1, l1, 255], srgb)
        }
        2 | 3 => {
            let (y0, y1) = if mode == 2 {
                if v[1] >= v[0] {
                    (v[0] << 4, v[1] << 4)
                } else {
                    ((v[1] << 4) + 8, (v[0] << 4) - 8)
                }
            } else {
                let (y0, d) = if v[0] & 0x80 != 0 {
                    (
                        ((v[1] & 0xE0) << 4) | ((v[0] & 0x7F) << 2),
                        (v[1] & 0x1F) << 2,
                    )
                } else {
                    (
                        ((v[1] & 0xF0) << 4) | ((v[0] & 0x7F) << 1),
                        (v[1] & 0x0F) << 1,
                    )
                };
                (y0, (y0 + d).min(0xFFF))
            };
            hdr_rgb_with(([y0; 3], [y1; 3]), None)
        }
        4 => ldr([v[0], v[0], v[0], v[2]], [v[1], v[1], v[1], v[3]], srgb),
        5 => {
            let (d0, b0) = bit_transfer_signed(v[1], v[0]);
            let (d1, b1) = bit_transfer_signed(v[3], v[2]);
            ldr([b0, b0, b0, b1], [b0 + d0, b0 + d0, b0 + d0, b1 + d1], srgb)
        }
        6 => ldr(
            [
                (v[0] * v[3]) >> 8,
                (v[1] * v[3]) >> 8,
                (v[2] * v[3]) >> 8,
                255,
            ],
            [v[0], v[1], v[2], 255],
            srgb,
        ),
        7 => hdr_rgb_with(hdr_rgb_scale(v), None),
        8 | 12 => {
            let (a0, a1) = if mode == 12 { (v[6], v[7]) } else { (255, 255) };
            if v[1] + v[3] + v[5] >= v[0] + v[2] + v[4] {
                ldr([v[0], v[2], v[4], a0], [v[1], v[3], v[5], a1], srgb)
            } else {
                ldr(
                    blue_contract([v[1], v[3], v[5], a1]),
                    blue_contract([v[0], v[2], v[4], a0]),
                    srgb,
                )
            }
        }
        9 | 13 => {
            let (d0, b0) = bit_transfer_signed(v[1], v[0]);
            let (d1, b1) = bit_transfer_signed(v[3], v[2]);
            let (d2, b2) = bit_transfer_signed(v[5], v[4]);
            let (d3, b3) = if mode == 13 {
                bit_transfer_signed(v[7], v[6])
            } else {
                (0, 255)
            };
            let base = [b0, b1, b2, b3];
            let moved = [b0 + d0, b1 + d1, b2 + d2, b3 + d3];
            if d0 + d1 + d2 >= 0 {
                ldr(base, moved, srgb)
            } else {
                ldr(blue_contract(moved), blue_contract(base), srgb)
            }
        }
        10 => ldr(
            [
                (v[0] * v[3]) >> 8,
                (v[1] * v[3]) >> 8,
                (v[2] * v[3]) >> 8,
                v[4],
            ],
            [v[0], v[1], v[2], v[5]],
            srgb,
        ),
        11 => hdr_rgb_with(hdr_rgb(v), None),
        14 => {
            let mut e = hdr_rgb_with(hdr_rgb(v), None);
            let alpha = ldr([0, 0, 0, v[6]], [0, 0, 0, v[7]], false);
            e.low[3] = alpha.low[3];
            e.high[3] = alpha.high[3];
            e.hdr[3] = false;
            e
        }
        _ => hdr_rgb_with(hdr_rgb(v), Some(hdr_alpha(v[6], v[7]))),
    })
}

/// A 16-bit logarithmic HDR value as fp16 bits (infinities and NaNs clamp
/// to the largest finite value).
fn lns_to_half(c: u32) -> u16 {
    let (e, m) = (c >> 11, c & 0x7FF);
    let mt = if m < 512 {
        3 * m
    } else if m < 1536 {
        4 * m - 512
    } else {
        5 * m - 2048
    };
    let half = (e << 10) | (mt >> 3);
    half.min(0x7BFF) as u16
}

/// Texel (x, y) of an ASTC `block` of `footprint` (width, height) texels
/// as RGBA. With `srgb`, every channel is the top byte of the
/// interpolated value (the colour channels sRGB-encoded: the caller
/// decodes them), and HDR blocks are invalid.
pub fn decode(block: &[u8], footprint: (u32, u32), (x, y): (u32, u32), srgb: bool) -> [f32; 4] {
    let mut bytes = [0u8; 16];
    for (to, from) in bytes.iter_mut().zip(block) {
        *to = *from;
    }
    let word = u128::from_le_bytes(bytes);
    decode_word(word, footprint, (x, y), srgb).unwrap_or(ERROR)
}

fn decode_word(
    word: u128,
    (bw, bh): (u32, u32),
    (x, y): (u32, u32),
    srgb: bool,
) -> Option<[f32; 4]> {
    let unorm16 = |c: u32| {
        if srgb {
            (c >> 8) as f32 / 255.0
        } else {
            c as f32 / 65535.0
        }
    };
    // Void extent: one colour, 16-bit unorm or (bit 9) fp16.
    if bits(word, 0, 9) == 0x1FC {
        let hdr = bits(word, 9, 1) == 1;
        if bits(word, 10, 2) != 3 || (hdr && srgb) {
            return None;
        }
        let extent = [12, 25, 38, 51].map(|at| bits(word, at, 13));
        if extent != [0x1FFF; 4] && (extent[0] >= extent[1] || extent[2] >= extent[3]) {
            return None;
        }
        return Some([64, 80, 96, 112].map(|at| {
            let c = bits(word, at, 16);
            if hdr {
                crate::usc::float::half_to_f32(u64::from(c))
            } else {
                unorm16(c)
            }
        }));
    }
    let (gw, gh, dual, weight_levels) = block_mode(bits(word, 0, 11))?;
    let partitions = bits(word, 11, 2) + 1;
    let planes = if dual { 2 } else { 1 };
    let weight_count = gw * gh * planes;
    let weight_bits = sequence_bits(weight_levels, weight_count);
    if gw > bw
        || gh > bh
        || weight_count > 64
        || !(24..=96).contains(&weight_bits)
        || (dual && partitions == 4)
    {
        return None;
    }
    let mut below_weights = 128 - weight_bits;
    // The colour endpoint modes.
    let (modes, colour_start) = if partitions == 1 {
        (vec![bits(word, 13, 4)], 17)
    } else {
        let field = bits(word, 23, 6);
        if field & 3 == 0 {
            (vec![field >> 2; partitions as usize], 29)
        } else {
            // Each partition's class offset (1 bit) and mode within the
            // class (2 bits); the field's 4 bits past its selector are the
            // first of them, the rest just below the weights.
            let extra = 3 * partitions - 4;
            below_weights -= extra;
            let all = field | bits(word, below_weights, extra) << 6;
            let base = (all & 3) - 1;
            let modes = (0..partitions)
                .map(|p| {
                    let class = base + ((all >> (2 + p)) & 1);
                    let within = (all >> (2 + partitions + 2 * p)) & 3;
                    class << 2 | within
                })
                .collect();
            (modes, 29)
        }
    };
    let component_plane = if dual {
        below_weights -= 2;
        Some(bits(word, below_weights, 2) as usize)
    } else {
        None
    };
    // The colour endpoint values: the most levels that fit the bits left.
    let value_count: u32 = modes.iter().map(|m| 2 * (m / 4 + 1)).sum();
    if value_count > 18 || below_weights <= colour_start {
        return None;
    }
    let available = below_weights - colour_start;
    let colour_levels = *LEVELS
        .iter()
        .rev()
        .find(|&&levels| sequence_bits(levels, value_count) <= available)?;
    if colour_levels < 6 {
        return None;
    }
    // A last trit or quint group's missing bits read as 0, not as the
    // unused bits above the sequence.
    let colour_end = colour_start + sequence_bits(colour_levels, value_count);
    let values: Vec<i32> = sequence(word, colour_start, colour_end, colour_levels, value_count)
        .into_iter()
        .map(|v| colour_value(colour_levels, v))
        .collect();
    // This texel's partition and its endpoints.
    let small = bw * bh < 31;
    let p = if partitions > 1 {
        partition(bits(word, 13, 10), (x, y), partitions, small)
    } else {
        0
    };
    let first: u32 = modes[..p].iter().map(|m| 2 * (m / 4 + 1)).sum();
    let mode = modes[p];
    let e = endpoints(mode, &values[first as usize..], srgb)?;
    // The weights, read from the top of the block down, and the texel's
    // bilinear infill of the grid.
    let reversed = word.reverse_bits();
    let weights: Vec<u32> = sequence(reversed, 0, weight_bits, weight_levels, weight_count)
        .into_iter()
        .map(|w| weight_value(weight_levels, w))
        .collect();
    let ds = (1024 + bw / 2) / (bw - 1);
    let dt = (1024 + bh / 2) / (bh - 1);
    let gs = (ds * x * (gw - 1) + 32) >> 6;
    let gt = (dt * y * (gh - 1) + 32) >> 6;
    let (js, fs, jt, ft) = (gs >> 4, gs & 0xF, gt >> 4, gt & 0xF);
    let w11 = (fs * ft + 8) >> 4;
    let (w10, w01) = (ft - w11, fs - w11);
    // Never negative: (16 - fs)(16 - ft) / 16, rounded; added before it
    // is subtracted from so that no step goes below 0.
    let w00 = 16 + w11 - fs - ft;
    let grid = |gx: u32, gy: u32, plane: u32| -> u32 {
        if gx < gw && gy < gh {
            weights[((gy * gw + gx) * planes + plane) as usize]
        } else {
            0
        }
    };
    let infill = |plane: u32| {
        (grid(js, jt, plane) * w00
            + grid(js + 1, jt, plane) * w01
            + grid(js, jt + 1, plane) * w10
            + grid(js + 1, jt + 1, plane) * w11
            + 8)
            >> 4
    };
    let (w0, w1) = (infill(0), if dual { infill(1) } else { 0 });
    Some(std::array::from_fn(|c| {
        let w = if component_plane == Some(c) { w1 } else { w0 };
        let value = (e.low[c] * (64 - w) + e.high[c] * w + 32) >> 6;
        if e.hdr[c] {
            crate::usc::float::half_to_f32(u64::from(lns_to_half(value)))
        } else {
            unorm16(value)
        }
    }))
}
