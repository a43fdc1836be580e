//! Block-compressed texture formats: the BC1-BC7 (S3TC, RGTC, BPTC), ETC2,
//! EAC and ASTC formats the texture unit decodes. An image of one of them
//! is an image of blocks, each a fixed footprint of texels (4x4; ASTC's
//! 4x4 to 12x12) in 8 or 16 bytes, laid out by [`crate::layout`] as any
//! image of that element size is. Which descriptor channels and type name
//! which format, and each format's footprint and block size, live here so
//! that the umd, the firmware-sim's texture unit and the tools agree; the
//! decoding itself is the firmware-sim's.

use crate::formats::{Channels, TextureType};

/// A block-compressed format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockFormat {
    /// BC1: RGB565 endpoints, 2-bit indices; a 1-bit alpha in its
    /// three-colour mode.
    Bc1,
    /// BC2: explicit 4-bit alpha, then a BC1 colour block.
    Bc2,
    /// BC3: an interpolated alpha block, then a BC1 colour block.
    Bc3,
    /// BC4: one interpolated channel, unsigned or signed.
    Bc4 {
        /// Signed normalised endpoints.
        signed: bool,
    },
    /// BC5: two interpolated channels.
    Bc5 {
        /// Signed normalised endpoints.
        signed: bool,
    },
    /// BC6H: 16-bit float RGB in fourteen modes (`bptc`).
    Bc6h {
        /// The signed variant (Mesa's BC6H; BC6H ufloat is unsigned).
        signed: bool,
    },
    /// BC7: 8-bit RGBA in eight modes (`bptc`).
    Bc7,
    /// ETC2 RGB8 (ETC1 blocks included; `etc`).
    Etc2Rgb8,
    /// ETC2 RGB8 with punch-through alpha.
    Etc2Rgb8A1,
    /// ETC2 RGBA8: an EAC alpha block, then an ETC2 colour block.
    Etc2Rgba8,
    /// EAC R11, unsigned or signed.
    EacR11 {
        /// Signed normalised.
        signed: bool,
    },
    /// EAC RG11: an R11 block per channel.
    EacRg11 {
        /// Signed normalised.
        signed: bool,
    },
    /// ASTC, LDR and HDR (`astc`), of a footprint of texels.
    Astc {
        /// Texels across a block.
        width: u32,
        /// Texels down a block.
        height: u32,
    },
}

/// How a custom border colour's channel is encoded for an image of a block
/// format (Mesa's `agx_pack_border`, which the texture unit reads back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BorderEncoding {
    /// An unsigned normalised integer of `bits` bits.
    Unorm {
        /// The integer's width.
        bits: u32,
    },
    /// A signed normalised integer of `bits` bits, in a 32-bit two's
    /// complement word.
    Snorm {
        /// The integer's width.
        bits: u32,
    },
    /// A 16-bit float.
    Half,
}

/// Texels per side of a block of every format but ASTC
/// ([`BlockFormat::block_px`]).
pub const BLOCK_PX: u32 = 4;

impl BlockFormat {
    /// The block format of a descriptor's channels and type (`None`: not
    /// one of BC1-BC7, or a type they do not have).
    pub fn of(channels: Channels, data_type: TextureType) -> Option<BlockFormat> {
        match (channels, data_type) {
            (Channels::Bc6h, TextureType::Float) => {
                return Some(BlockFormat::Bc6h { signed: true })
            }
            (Channels::Bc6hUfloat, TextureType::Float) => {
                return Some(BlockFormat::Bc6h { signed: false })
            }
            (Channels::Bc7, TextureType::Unorm) => return Some(BlockFormat::Bc7),
            (Channels::Etc2Rgb8, TextureType::Unorm) => return Some(BlockFormat::Etc2Rgb8),
            (Channels::Etc2Rgb8A1, TextureType::Unorm) => return Some(BlockFormat::Etc2Rgb8A1),
            (Channels::Etc2Rgba8, TextureType::Unorm) => return Some(BlockFormat::Etc2Rgba8),
            _ => {}
        }
        // ASTC decodes LDR and HDR blocks alike (Mesa names the format
        // float).
        if let Some((width, height)) = astc_footprint(channels) {
            return matches!(data_type, TextureType::Unorm | TextureType::Float)
                .then_some(BlockFormat::Astc { width, height });
        }
        let signed = match data_type {
            TextureType::Unorm => false,
            TextureType::Snorm => true,
            _ => return None,
        };
        Some(match channels {
            Channels::Bc1 if !signed => BlockFormat::Bc1,
            Channels::Bc2 if !signed => BlockFormat::Bc2,
            Channels::Bc3 if !signed => BlockFormat::Bc3,
            Channels::Bc4 => BlockFormat::Bc4 { signed },
            Channels::Bc5 => BlockFormat::Bc5 { signed },
            Channels::EacR11 => BlockFormat::EacR11 { signed },
            Channels::EacRg11 => BlockFormat::EacRg11 { signed },
            _ => return None,
        })
    }

    /// Texels across and down a block.
    pub fn block_px(self) -> (u32, u32) {
        match self {
            BlockFormat::Astc { width, height } => (width, height),
            _ => (BLOCK_PX, BLOCK_PX),
        }
    }

    /// Bytes of a block.
    pub fn block_bytes(self) -> u32 {
        match self {
            BlockFormat::Bc1
            | BlockFormat::Bc4 { .. }
            | BlockFormat::Etc2Rgb8
            | BlockFormat::Etc2Rgb8A1
            | BlockFormat::EacR11 { .. } => 8,
            _ => 16,
        }
    }

    /// The descriptor channels and type that name this format (the
    /// inverse of [`BlockFormat::of`]; ASTC as unorm, the LDR profile's
    /// type, which decodes HDR blocks too). `None`: an ASTC footprint the
    /// hardware has no format for.
    pub fn descriptor(self) -> Option<(Channels, TextureType)> {
        let signedness = |signed: bool| {
            if signed {
                TextureType::Snorm
            } else {
                TextureType::Unorm
            }
        };
        Some(match self {
            BlockFormat::Bc1 => (Channels::Bc1, TextureType::Unorm),
            BlockFormat::Bc2 => (Channels::Bc2, TextureType::Unorm),
            BlockFormat::Bc3 => (Channels::Bc3, TextureType::Unorm),
            BlockFormat::Bc4 { signed } => (Channels::Bc4, signedness(signed)),
            BlockFormat::Bc5 { signed } => (Channels::Bc5, signedness(signed)),
            BlockFormat::Bc6h { signed: true } => (Channels::Bc6h, TextureType::Float),
            BlockFormat::Bc6h { signed: false } => (Channels::Bc6hUfloat, TextureType::Float),
            BlockFormat::Bc7 => (Channels::Bc7, TextureType::Unorm),
            BlockFormat::Etc2Rgb8 => (Channels::Etc2Rgb8, TextureType::Unorm),
            BlockFormat::Etc2Rgb8A1 => (Channels::Etc2Rgb8A1, TextureType::Unorm),
            BlockFormat::Etc2Rgba8 => (Channels::Etc2Rgba8, TextureType::Unorm),
            BlockFormat::EacR11 { signed } => (Channels::EacR11, signedness(signed)),
            BlockFormat::EacRg11 { signed } => (Channels::EacRg11, signedness(signed)),
            BlockFormat::Astc { width, height } => (
                ASTC_FOOTPRINTS
                    .iter()
                    .find(|&&(_, footprint)| footprint == (width, height))
                    .map(|&(channels, _)| channels)?,
                TextureType::Unorm,
            ),
        })
    }

    /// How channel `channel` (0-3) of a custom border colour is encoded
    /// for an image of this format (`srgb`: an sRGB view). Mesa's
    /// `agx_pack_border`: RGTC (BC4, BC5) channels are 14-bit, EAC ones
    /// 11-bit, BC6H ones halves, the rest 8-bit with 12-bit sRGB colour
    /// channels. Mesa packs no ASTC border (it asserts); ASTC takes the
    /// 8-bit encoding here, a choice, not a public fact.
    pub fn border_encoding(self, channel: usize, srgb: bool) -> BorderEncoding {
        match self {
            BlockFormat::Bc4 { signed: true } | BlockFormat::Bc5 { signed: true } => {
                BorderEncoding::Snorm { bits: 14 }
            }
            BlockFormat::Bc4 { .. } | BlockFormat::Bc5 { .. } => BorderEncoding::Unorm { bits: 14 },
            BlockFormat::EacR11 { signed: true } | BlockFormat::EacRg11 { signed: true } => {
                BorderEncoding::Snorm { bits: 11 }
            }
            BlockFormat::EacR11 { .. } | BlockFormat::EacRg11 { .. } => {
                BorderEncoding::Unorm { bits: 11 }
            }
            BlockFormat::Bc6h { .. } => BorderEncoding::Half,
            _ if srgb && channel < 3 => BorderEncoding::Unorm { bits: 12 },
            _ => BorderEncoding::Unorm { bits: 8 },
        }
    }

    /// Blocks across and down an image (or level) of `width_px` x
    /// `height_px` texels: partial blocks count whole.
    pub fn blocks(self, width_px: u32, height_px: u32) -> (u32, u32) {
        let (bw, bh) = self.block_px();
        (width_px.max(1).div_ceil(bw), height_px.max(1).div_ceil(bh))
    }
}

/// The ASTC formats' footprints (texels across, down).
const ASTC_FOOTPRINTS: [(Channels, (u32, u32)); 14] = [
    (Channels::Astc4x4, (4, 4)),
    (Channels::Astc5x4, (5, 4)),
    (Channels::Astc5x5, (5, 5)),
    (Channels::Astc6x5, (6, 5)),
    (Channels::Astc6x6, (6, 6)),
    (Channels::Astc8x5, (8, 5)),
    (Channels::Astc8x6, (8, 6)),
    (Channels::Astc8x8, (8, 8)),
    (Channels::Astc10x5, (10, 5)),
    (Channels::Astc10x6, (10, 6)),
    (Channels::Astc10x8, (10, 8)),
    (Channels::Astc10x10, (10, 10)),
    (Channels::Astc12x10, (12, 10)),
    (Channels::Astc12x12, (12, 12)),
];

/// An ASTC format's footprint (texels across, down).
fn astc_footprint(channels: Channels) -> Option<(u32, u32)> {
    ASTC_FOOTPRINTS
        .iter()
        .find(|&&(c, _)| c == channels)
        .map(|&(_, footprint)| footprint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_block_format_names_its_own_descriptor() {
        let mut formats = vec![
            BlockFormat::Bc1,
            BlockFormat::Bc2,
            BlockFormat::Bc3,
            BlockFormat::Bc7,
            BlockFormat::Etc2Rgb8,
            BlockFormat::Etc2Rgb8A1,
            BlockFormat::Etc2Rgba8,
        ];
        for signed in [false, true] {
            formats.extend([
                BlockFormat::Bc4 { signed },
                BlockFormat::Bc5 { signed },
                BlockFormat::Bc6h { signed },
                BlockFormat::EacR11 { signed },
                BlockFormat::EacRg11 { signed },
            ]);
        }
        formats.extend(
            ASTC_FOOTPRINTS
                .iter()
                .map(|&(_, (width, height))| BlockFormat::Astc { width, height }),
        );
        for format in formats {
            let (channels, data_type) = format.descriptor().unwrap();
            assert_eq!(
                BlockFormat::of(channels, data_type),
                Some(format),
                "{format:?}"
            );
        }
        // Uncompressed channels and types a block format lacks are none.
        assert_eq!(
            BlockFormat::of(Channels::R8G8B8A8, TextureType::Unorm),
            None
        );
        assert_eq!(BlockFormat::of(Channels::Bc1, TextureType::Snorm), None);
        assert_eq!(BlockFormat::of(Channels::Bc7, TextureType::Uint), None);
    }

    #[test]
    fn partial_blocks_count_whole() {
        assert_eq!(BlockFormat::Bc1.blocks(10, 6), (3, 2));
        assert_eq!(BlockFormat::Bc1.block_bytes(), 8);
        let astc = BlockFormat::Astc {
            width: 12,
            height: 10,
        };
        assert_eq!(astc.blocks(25, 10), (3, 1));
        assert_eq!(astc.block_bytes(), 16);
        assert_eq!(astc.blocks(0, 0), (1, 1));
        assert_eq!(
            BlockFormat::Astc {
                width: 7,
                height: 7
            }
            .descriptor(),
            None
        );
    }
}
