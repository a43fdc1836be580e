//! Block compression: the BC1-BC7 formats (S3TC/DXT, RGTC and, in
//! `bptc`, BPTC) and, in `etc` and `astc`, ETC2, EAC and ASTC, that the
//! texture unit decodes. An image of them is an image of blocks (4x4
//! texels, ASTC's 4x4 to 12x12), 8 or 16 bytes each, laid out as any
//! image of that element size is. A BC1-BC5 block holds two endpoints and
//! a small index per texel into a palette interpolated between them; the
//! palettes follow the Khronos Data Format Specification's definitions of
//! the formats, computed in floating point (how the hardware rounds its
//! interpolation is not public). The other formats are integer
//! arithmetic, bit for bit.

pub use agx_hw::block::{BlockFormat, BLOCK_PX};

/// Texel (x, y) (within the block) of `block` (its
/// [`BlockFormat::block_bytes`] bytes) of `format` as RGBA; a channel the
/// format lacks reads 0, alpha 1. sRGB colour channels come encoded (the
/// caller decodes them); `srgb` matters to ASTC, whose sRGB decoding
/// differs before that.
pub fn decode(format: BlockFormat, block: &[u8], x: u32, y: u32, srgb: bool) -> [f32; 4] {
    let texel = (y * BLOCK_PX + x) as usize;
    match format {
        BlockFormat::Bc1 => colour(&block[..8], texel, true),
        BlockFormat::Bc2 => {
            let alpha = u64::from_le_bytes(block[..8].try_into().unwrap_or_default());
            let [r, g, b, _] = colour(&block[8..16], texel, false);
            [r, g, b, ((alpha >> (4 * texel)) & 0xF) as f32 / 15.0]
        }
        BlockFormat::Bc3 => {
            let [r, g, b, _] = colour(&block[8..16], texel, false);
            [r, g, b, channel(&block[..8], texel, false)]
        }
        BlockFormat::Bc4 { signed } => [channel(&block[..8], texel, signed), 0.0, 0.0, 1.0],
        BlockFormat::Bc5 { signed } => [
            channel(&block[..8], texel, signed),
            channel(&block[8..16], texel, signed),
            0.0,
            1.0,
        ],
        BlockFormat::Bc6h { signed } => {
            let [r, g, b] = crate::bptc::bc6h(block, texel, signed)
                .map(|h| crate::usc::float::half_to_f32(u64::from(h)));
            [r, g, b, 1.0]
        }
        BlockFormat::Bc7 => crate::bptc::bc7(block, texel).map(|c| f32::from(c) / 255.0),
        // ETC and EAC number texels down each column.
        BlockFormat::Etc2Rgb8 | BlockFormat::Etc2Rgb8A1 => {
            let punch_through = format == BlockFormat::Etc2Rgb8A1;
            crate::etc::etc2_colour(block, x * BLOCK_PX + y, punch_through)
                .map(|c| f32::from(c) / 255.0)
        }
        BlockFormat::Etc2Rgba8 => {
            let [r, g, b, _] = crate::etc::etc2_colour(&block[8..16], x * BLOCK_PX + y, false)
                .map(|c| f32::from(c) / 255.0);
            let a = crate::etc::eac_alpha(&block[..8], x * BLOCK_PX + y);
            [r, g, b, f32::from(a) / 255.0]
        }
        BlockFormat::EacR11 { signed } => [
            crate::etc::eac_r11(block, x * BLOCK_PX + y, signed),
            0.0,
            0.0,
            1.0,
        ],
        BlockFormat::EacRg11 { signed } => [
            crate::etc::eac_r11(&block[..8], x * BLOCK_PX + y, signed),
            crate::etc::eac_r11(&block[8..16], x * BLOCK_PX + y, signed),
            0.0,
            1.0,
        ],
        BlockFormat::Astc { width, height } => {
            crate::astc::decode(block, (width, height), (x, y), srgb)
        }
    }
}

/// An RGB565 endpoint as three floats.
fn rgb565(c: u16) -> [f32; 3] {
    [
        f32::from(c >> 11) / 31.0,
        f32::from((c >> 5) & 0x3F) / 63.0,
        f32::from(c & 0x1F) / 31.0,
    ]
}

/// Texel `texel` of a BC1 colour block. `three_colour`: BC1's own block,
/// whose endpoints in order c0 <= c1 select the three-colour palette with
/// transparent black; BC2 and BC3 always use four colours.
fn colour(block: &[u8], texel: usize, three_colour: bool) -> [f32; 4] {
    let c0 = u16::from_le_bytes([block[0], block[1]]);
    let c1 = u16::from_le_bytes([block[2], block[3]]);
    let indices = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
    let index = (indices >> (2 * texel)) & 3;
    let (a, b) = (rgb565(c0), rgb565(c1));
    let mix = |wa: f32, wb: f32, d: f32| -> [f32; 4] {
        [
            (wa * a[0] + wb * b[0]) / d,
            (wa * a[1] + wb * b[1]) / d,
            (wa * a[2] + wb * b[2]) / d,
            1.0,
        ]
    };
    if c0 > c1 || !three_colour {
        match index {
            0 => mix(1.0, 0.0, 1.0),
            1 => mix(0.0, 1.0, 1.0),
            2 => mix(2.0, 1.0, 3.0),
            _ => mix(1.0, 2.0, 3.0),
        }
    } else {
        match index {
            0 => mix(1.0, 0.0, 1.0),
            1 => mix(0.0, 1.0, 1.0),
            2 => mix(1.0, 1.0, 2.0),
            _ => [0.0; 4],
        }
    }
}

/// Texel `texel` of an interpolated single-channel block (BC3's alpha,
/// BC4, each half of BC5): two 8-bit endpoints and 3-bit indices. With
/// r0 > r1 six values lie between them; otherwise four, then the
/// minimum and maximum (0 and 1, or -1 and 1 signed).
fn channel(block: &[u8], texel: usize, signed: bool) -> f32 {
    let (r0, r1, min) = if signed {
        let v = |b: u8| (f32::from(b as i8) / 127.0).max(-1.0);
        (v(block[0]), v(block[1]), -1.0)
    } else {
        (
            f32::from(block[0]) / 255.0,
            f32::from(block[1]) / 255.0,
            0.0,
        )
    };
    let more = if signed {
        (block[0] as i8) > (block[1] as i8)
    } else {
        block[0] > block[1]
    };
    let mut bits = [0u8; 8];
    bits[..6].copy_from_slice(&block[2..8]);
    let index = ((u64::from_le_bytes(bits) >> (3 * texel)) & 7) as u32;
    match index {
        0 => r0,
        1 => r1,
        i if more => ((8 - i) as f32 * r0 + (i - 1) as f32 * r1) / 7.0,
        6 => min,
        7 => 1.0,
        i => ((6 - i) as f32 * r0 + (i - 1) as f32 * r1) / 5.0,
    }
}
