//! Where each texel of an image lives in memory.
//!
//! AGX images are *linear* (rows `stride` bytes apart; one level) or tiled,
//! in one of two layouts (the descriptor's `layout`):
//! - *GPU-tiled* (Mesa's `AIL_TILING_GPU`, the optimal layout): each mip
//!   level is cut into tiles of one 16 KiB page (64x64 for 4-byte
//!   elements), stored row-major; levels too small for a whole tile use
//!   one power-of-two tile the size of the level (the "small" miptree).
//! - *Twiddled* (`AIL_TILING_TWIDDLED`): each level is padded to powers of
//!   two and cut into square tiles as large as its shorter side.
//!
//! Within a tile, elements follow a Z-order curve: x's bits in the even
//! bit positions of the index, y's in the odd ones. Level offsets are
//! aligned to 128 bytes; layers are `layer_stride` apart (page-aligned
//! when the descriptor says so).
//!
//! A GPU-tiled image may also be *losslessly compressed*: a metadata
//! buffer after the body holds one 8-byte word per 16x16-pixel
//! compression tile, one byte per 8x4 subtile, saying how the tile is
//! stored ([`CompressionLayout`]).
//!
//! The texture unit, the pixel back end, the depth/stencil unit and the
//! userspace driver all use this one description.

/// Bytes of a memory page (a GPU tile).
pub const PAGE_BYTES: u64 = 16384;
/// Level offsets are aligned to this.
pub const CACHELINE_BYTES: u64 = 128;

/// Tile size in elements of the large miptree for an element size.
pub fn max_tile(element_bytes: u32) -> Option<(u32, u32)> {
    Some(match element_bytes {
        1 => (128, 128),
        2 => (128, 64),
        4 => (64, 64),
        8 => (64, 32),
        16 => (32, 32),
        32 => (32, 16),
        64 => (16, 16),
        _ => return None,
    })
}

/// Interleaves the bits of `v` with zeros (bit i -> bit 2i): each step
/// moves the upper half of every group of bits up by the group's width.
fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// [`spread`] of each byte value, worked out at compile time.
static SPREAD_BYTE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut value = 0usize;
    while value < 256 {
        let mut bit = 0;
        while bit < 8 {
            table[value] |= (((value >> bit) & 1) as u16) << (2 * bit);
            bit += 1;
        }
        value += 1;
    }
    table
};

/// The Z-order index of (x, y) within a tile: by table for coordinates
/// below 256 (every tile's), else by spreading each coordinate's bits.
#[inline]
pub fn morton(x: u32, y: u32) -> u64 {
    if (x | y) < 256 {
        return u64::from(SPREAD_BYTE[x as usize]) | u64::from(SPREAD_BYTE[y as usize]) << 1;
    }
    spread(x) | (spread(y) << 1)
}

/// The even bits of `v` gathered into the low half ([`spread`]'s
/// inverse).
fn gather(v: u64) -> u32 {
    let mut x = v & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    ((x | (x >> 16)) & 0xFFFF_FFFF) as u32
}

/// Z-order positions of the indices of a 32x32 square (an image block's,
/// which block stores walk texel by texel), each (x, y) packed as
/// `x | y << 8`, worked out at compile time.
static Z_ORDER_32: [u16; 1024] = {
    let mut table = [0u16; 1024];
    let mut index = 0usize;
    while index < 1024 {
        let (mut x, mut y, mut bit) = (0u16, 0u16, 0);
        while bit < 5 {
            x |= (((index >> (2 * bit)) & 1) as u16) << bit;
            y |= (((index >> (2 * bit + 1)) & 1) as u16) << bit;
            bit += 1;
        }
        table[index] = x | y << 8;
        index += 1;
    }
    table
};

/// The (x, y) whose Z-order index is `index` ([`morton`]'s inverse): from
/// a table below 1,024, the bits gathered above.
pub fn morton_position(index: u64) -> (u32, u32) {
    match Z_ORDER_32.get(index as usize) {
        Some(&packed) => (u32::from(packed & 0xFF), u32::from(packed >> 8)),
        None => (gather(index), gather(index >> 1)),
    }
}

/// One mip level of a tiled image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    /// Byte offset from the start of the layer.
    pub offset_bytes: u64,
    /// Tile size in elements.
    pub tile: (u32, u32),
    /// Width in elements.
    pub width_el: u32,
    /// Height in elements.
    pub height_el: u32,
    /// The row length in elements the tile grid covers (the width, or its
    /// power-of-two padding in the twiddled layout).
    pub stride_el: u32,
}

/// How an image is laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageLayout {
    /// Rows `stride_bytes` apart, one level.
    Linear {
        /// Row pitch.
        stride_bytes: u64,
        /// Bytes per element.
        element_bytes: u32,
        /// Distance between layers.
        layer_stride_bytes: u64,
    },
    /// Levels of Z-order tiles (the GPU-tiled and twiddled layouts).
    Tiled {
        /// Bytes per element.
        element_bytes: u32,
        /// The levels.
        levels: Vec<Level>,
        /// Distance between layers.
        layer_stride_bytes: u64,
    },
}

fn minify(v: u32, level: u32) -> u32 {
    (v >> level).max(1)
}

/// The large tiles level `level` of a large-tiled image takes, when level 0
/// is `(stx, sty)` large tiles, and whether it carries a padding column:
/// each level quarters the area, plus a column and a row of padding where
/// the level-0 tile count is not a multiple of `2^level`.
fn large_level_tiles((stx, sty): (u32, u32), level: u32) -> (u64, bool) {
    let mut tiles = (u64::from(stx) * u64::from(sty)) >> (2 * level);
    let mask = (1u32 << level) - 1;
    let pad_left = stx & mask != 0;
    let pad_bottom = sty & mask != 0;
    if pad_left {
        tiles += u64::from(sty >> level);
    }
    if pad_bottom {
        tiles += u64::from(stx >> level);
    }
    if pad_left && pad_bottom {
        tiles += 1;
    }
    (tiles, pad_left)
}

/// The levels a tiled image is laid out for: its full chain when it is
/// mipmapped (the texture descriptor's `unk_mipmapped`, or a PBE naming
/// more than one level), else the levels its descriptor names.
pub fn laid_out_levels(width: u32, height: u32, mipmapped: bool, named_levels: u32) -> u32 {
    if mipmapped {
        full_chain_levels(width, height).max(named_levels)
    } else {
        named_levels.max(1)
    }
}

/// The number of levels of a full mip chain of a `width` x `height`
/// image. Mipmapped tiled images are laid out for the full chain whatever
/// their descriptor's level count (the hardware's layer stride counts
/// every level).
pub fn full_chain_levels(width: u32, height: u32) -> u32 {
    32 - width.max(height).max(1).leading_zeros()
}

impl ImageLayout {
    /// A GPU-tiled image of `width` x `height` elements and `levels` mip
    /// levels, or `None` for an element size the hardware does not tile.
    /// `page_aligned_layers` is the descriptor's bit of that name.
    pub fn gpu_tiled(
        width: u32,
        height: u32,
        levels: u32,
        element_bytes: u32,
        page_aligned_layers: bool,
    ) -> Option<ImageLayout> {
        ImageLayout::gpu_tiled_blocks(
            (width, height),
            (1, 1),
            levels,
            element_bytes,
            page_aligned_layers,
        )
    }

    /// [`ImageLayout::gpu_tiled`] of an image of `block`-pixel blocks (4x4
    /// for the BC formats; 1x1 for the uncompressed ones), `size_px`
    /// pixels: the elements are its blocks, and the compressed formats
    /// follow the exceptions of Mesa's `ail`: a large level whose tile grid
    /// was padded on the left has one more block in its stride, and the
    /// small (power-of-two) levels round up to a power of two before they
    /// minify, their tiles the size of the rounded level's shorter side.
    pub fn gpu_tiled_blocks(
        (width_px, height_px): (u32, u32),
        (bw, bh): (u32, u32),
        levels: u32,
        element_bytes: u32,
        page_aligned_layers: bool,
    ) -> Option<ImageLayout> {
        if bw > 1 || bh > 1 {
            return ImageLayout::gpu_tiled_compressed(
                (width_px, height_px),
                (bw, bh),
                levels,
                element_bytes,
                page_aligned_layers,
            );
        }
        let (width, height) = (width_px, height_px);
        let (tw, th) = max_tile(element_bytes)?;
        let (width, height) = (width.max(1), height.max(1));
        let (stx, sty) = (width.div_ceil(tw), height.div_ceil(th));
        // The first level too small for a whole large tile.
        let mut pot_level = 0;
        while pot_level < 32 && minify(width, pot_level) >= tw && minify(height, pot_level) >= th {
            if width >> pot_level == 0 || height >> pot_level == 0 {
                break;
            }
            pot_level += 1;
        }
        let mut offset = 0u64;
        let mut out = Vec::new();
        for l in 0..levels.min(pot_level) {
            let (tiles, _) = large_level_tiles((stx, sty), l);
            out.push(Level {
                offset_bytes: offset,
                tile: (tw, th),
                width_el: minify(width, l),
                height_el: minify(height, l),
                stride_el: minify(width, l),
            });
            let size = tiles * u64::from(tw * th) * u64::from(element_bytes);
            offset = (offset + size).next_multiple_of(CACHELINE_BYTES);
        }
        let mut potw = minify(width, pot_level).next_power_of_two();
        let mut poth = minify(height, pot_level).next_power_of_two();
        for l in pot_level..levels {
            let tile = minify(width.min(height), l).next_power_of_two();
            out.push(Level {
                offset_bytes: offset,
                tile: (tile, tile),
                width_el: minify(width, l),
                height_el: minify(height, l),
                stride_el: minify(width, l),
            });
            let size = u64::from(potw) * u64::from(poth) * u64::from(element_bytes);
            offset = (offset + size).next_multiple_of(CACHELINE_BYTES);
            potw = (potw / 2).max(1);
            poth = (poth / 2).max(1);
        }
        Some(ImageLayout::Tiled {
            element_bytes,
            levels: out,
            layer_stride_bytes: if page_aligned_layers {
                offset.next_multiple_of(PAGE_BYTES)
            } else {
                offset
            },
        })
    }

    /// The block-compressed case of [`ImageLayout::gpu_tiled_blocks`].
    fn gpu_tiled_compressed(
        (width_px, height_px): (u32, u32),
        (bw, bh): (u32, u32),
        levels: u32,
        element_bytes: u32,
        page_aligned_layers: bool,
    ) -> Option<ImageLayout> {
        let (tw, th) = max_tile(element_bytes)?;
        let blocks_x = |px: u32| px.max(1).div_ceil(bw);
        let blocks_y = |px: u32| px.max(1).div_ceil(bh);
        let (w_el, h_el) = (blocks_x(width_px), blocks_y(height_px));
        let (stx, sty) = (w_el.div_ceil(tw), h_el.div_ceil(th));
        // The first level whose blocks do not fill a whole large tile.
        let (mut pot_w_px, mut pot_h_px) = (bw * w_el, bh * h_el);
        let mut pot_level = 0;
        while pot_level < 32 && blocks_x(pot_w_px) >= tw && blocks_y(pot_h_px) >= th {
            pot_w_px = (pot_w_px >> 1).max(1);
            pot_h_px = (pot_h_px >> 1).max(1);
            pot_level += 1;
        }
        let mut offset = 0u64;
        let mut out = Vec::new();
        for l in 0..levels.min(pot_level) {
            let (tiles, pad_left) = large_level_tiles((stx, sty), l);
            out.push(Level {
                offset_bytes: offset,
                tile: (tw, th),
                width_el: blocks_x(minify(width_px, l)),
                height_el: blocks_y(minify(height_px, l)),
                stride_el: blocks_x(minify(width_px, l)) + u32::from(pad_left),
            });
            let size = tiles * u64::from(tw * th) * u64::from(element_bytes);
            offset = (offset + size).next_multiple_of(CACHELINE_BYTES);
        }
        let mut potw = minify(w_el.next_power_of_two(), pot_level);
        let mut poth = minify(h_el.next_power_of_two(), pot_level);
        for l in pot_level..levels {
            let tile = potw.min(poth).next_power_of_two();
            out.push(Level {
                offset_bytes: offset,
                tile: (tile, tile),
                width_el: blocks_x(minify(width_px, l)),
                height_el: blocks_y(minify(height_px, l)),
                stride_el: blocks_x(minify(width_px, l)),
            });
            let size = u64::from(potw) * u64::from(poth) * u64::from(element_bytes);
            offset = (offset + size).next_multiple_of(CACHELINE_BYTES);
            potw = (potw / 2).max(1);
            poth = (poth / 2).max(1);
        }
        Some(ImageLayout::Tiled {
            element_bytes,
            levels: out,
            layer_stride_bytes: if page_aligned_layers {
                offset.next_multiple_of(PAGE_BYTES)
            } else {
                offset
            },
        })
    }

    /// [`ImageLayout::twiddled`] of an image of `block`-pixel blocks: the
    /// elements are its blocks, and a compressed format's levels take
    /// their allocated (power-of-two, then minified) size as their logical
    /// one (Mesa's `ail`).
    pub fn twiddled_blocks(
        (width_px, height_px): (u32, u32),
        (bw, bh): (u32, u32),
        levels: u32,
        element_bytes: u32,
    ) -> ImageLayout {
        if bw == 1 && bh == 1 {
            return ImageLayout::twiddled(width_px, height_px, levels, element_bytes);
        }
        let blocks_x = |px: u32| px.max(1).div_ceil(bw);
        let blocks_y = |px: u32| px.max(1).div_ceil(bh);
        let (w_el, h_el) = (blocks_x(width_px), blocks_y(height_px));
        let mut offset = 0u64;
        let mut out = Vec::new();
        for l in 0..levels {
            let alloc_w = minify(w_el.next_power_of_two(), l);
            let alloc_h = minify(h_el.next_power_of_two(), l);
            let tile = alloc_w.min(alloc_h);
            out.push(Level {
                offset_bytes: offset,
                tile: (tile, tile),
                width_el: blocks_x(minify(width_px, l)),
                height_el: blocks_y(minify(height_px, l)),
                stride_el: alloc_w,
            });
            let size = u64::from(alloc_w) * u64::from(alloc_h) * u64::from(element_bytes);
            offset = (offset + size).next_multiple_of(CACHELINE_BYTES);
        }
        ImageLayout::Tiled {
            element_bytes,
            levels: out,
            layer_stride_bytes: offset.next_multiple_of(PAGE_BYTES),
        }
    }

    /// A twiddled image: each level padded to powers of two in both
    /// dimensions and cut into square tiles the size of its shorter side.
    /// Layers are always page-aligned in this layout.
    pub fn twiddled(width: u32, height: u32, levels: u32, element_bytes: u32) -> ImageLayout {
        let (width, height) = (width.max(1), height.max(1));
        let mut offset = 0u64;
        let mut out = Vec::new();
        for l in 0..levels {
            let alloc_w = minify(width.next_power_of_two(), l);
            let alloc_h = minify(height.next_power_of_two(), l);
            let logical_w = minify(width, l).next_power_of_two();
            let logical_h = minify(height, l).next_power_of_two();
            let tile = logical_w.min(logical_h);
            out.push(Level {
                offset_bytes: offset,
                tile: (tile, tile),
                width_el: minify(width, l),
                height_el: minify(height, l),
                stride_el: logical_w,
            });
            let size = u64::from(alloc_w) * u64::from(alloc_h) * u64::from(element_bytes);
            offset = (offset + size).next_multiple_of(CACHELINE_BYTES);
        }
        ImageLayout::Tiled {
            element_bytes,
            levels: out,
            layer_stride_bytes: offset.next_multiple_of(PAGE_BYTES),
        }
    }

    /// Bytes of one layer (all levels).
    pub fn layer_bytes(&self) -> u64 {
        match self {
            ImageLayout::Linear {
                layer_stride_bytes, ..
            }
            | ImageLayout::Tiled {
                layer_stride_bytes, ..
            } => *layer_stride_bytes,
        }
    }

    /// The bytes levels `levels` of `layer` occupy, as offsets from the
    /// image's start: (first byte, byte past the last). The last level of
    /// the chain ends where the layer does. A linear image has one level,
    /// of `rows` rows. `None` for levels past the image's.
    pub fn level_span(
        &self,
        levels: std::ops::RangeInclusive<u32>,
        layer: u32,
        rows: u32,
    ) -> Option<(u64, u64)> {
        match self {
            ImageLayout::Linear {
                stride_bytes,
                layer_stride_bytes,
                ..
            } => {
                if *levels.end() != 0 {
                    return None;
                }
                let start = u64::from(layer) * layer_stride_bytes;
                Some((start, start + stride_bytes * u64::from(rows)))
            }
            ImageLayout::Tiled {
                levels: laid_out,
                layer_stride_bytes,
                ..
            } => {
                let layer_start = u64::from(layer) * layer_stride_bytes;
                let first = laid_out.get(*levels.start() as usize)?;
                laid_out.get(*levels.end() as usize)?;
                let end = laid_out
                    .get(*levels.end() as usize + 1)
                    .map_or(*layer_stride_bytes, |next| next.offset_bytes);
                Some((layer_start + first.offset_bytes, layer_start + end))
            }
        }
    }

    /// The side of the squares of `level` whose elements lie one after
    /// another in memory, in Z-order, when the square is aligned to its
    /// side: the smaller side of a tile of power-of-two sides. `None` for
    /// a linear image or a level without one.
    pub fn aligned_square(&self, level: u32) -> Option<u32> {
        match self {
            ImageLayout::Linear { .. } => None,
            ImageLayout::Tiled { levels, .. } => {
                let (tw, th) = levels.get(level as usize)?.tile;
                (tw.is_power_of_two() && th.is_power_of_two()).then(|| tw.min(th))
            }
        }
    }

    /// The byte offset of element (x, y) of `level` in `layer`, or `None`
    /// past the image.
    pub fn offset(&self, level: u32, x: u32, y: u32, layer: u32) -> Option<u64> {
        match self {
            ImageLayout::Linear {
                stride_bytes,
                element_bytes,
                layer_stride_bytes,
            } => (level == 0).then(|| {
                u64::from(layer) * layer_stride_bytes
                    + u64::from(y) * stride_bytes
                    + u64::from(x) * u64::from(*element_bytes)
            }),
            ImageLayout::Tiled {
                element_bytes,
                levels,
                layer_stride_bytes,
            } => {
                let l = levels.get(level as usize)?;
                if x >= l.width_el || y >= l.height_el {
                    return None;
                }
                let (tw, th) = l.tile;
                // Tiles are powers of two (`max_tile` and its halvings):
                // shifts and masks rather than five divisions.
                let (tile, within) = if tw.is_power_of_two() && th.is_power_of_two() {
                    let (sx, sy) = (tw.trailing_zeros(), th.trailing_zeros());
                    let tiles_per_row = (u64::from(l.stride_el) + u64::from(tw - 1)) >> sx;
                    (
                        u64::from(y >> sy) * tiles_per_row + u64::from(x >> sx),
                        morton(x & (tw - 1), y & (th - 1)),
                    )
                } else {
                    let tiles_per_row = u64::from(l.stride_el.div_ceil(tw));
                    (
                        u64::from(y / th) * tiles_per_row + u64::from(x / tw),
                        morton(x % tw, y % th),
                    )
                };
                let index = tile * u64::from(tw * th) + within;
                Some(
                    u64::from(layer) * layer_stride_bytes
                        + l.offset_bytes
                        + index * u64::from(*element_bytes),
                )
            }
        }
    }
}

/// Pixels per side of a compression tile.
pub const COMPRESSION_TILE_PX: u32 = 16;
/// Bytes of metadata per compression tile (one per 8x4 subtile).
pub const COMPRESSION_TILE_META_BYTES: u64 = 8;

/// How a compression tile is stored, from its metadata word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileMode {
    /// Every pixel has the colour stored at the start of the tile's body
    /// (where the pixel at its top-left corner would be).
    Solid,
    /// The body holds the pixels as the uncompressed layout does.
    Uncompressed,
    /// A mode this model does not decode (the hardware's other
    /// compressed encodings are not publicly understood).
    Unknown(u64),
}

/// The subtile mode byte meaning "uncompressed" for an element size (it
/// depends on the format's block size; Mesa's `ail_subtile_uncompressed_mode`).
pub fn uncompressed_subtile_mode(element_bytes: u32) -> Option<u8> {
    Some(match element_bytes {
        1 => 0x1f,
        2 => 0x3f,
        4 => 0x7f,
        8 | 16 => 0xff,
        _ => return None,
    })
}

/// The subtile mode byte meaning "solid colour" for an element size
/// (Mesa's `ail_subtile_solid_mode`).
pub fn solid_subtile_mode(element_bytes: u32) -> Option<u8> {
    Some(match element_bytes {
        1 => 0x60,
        2 => 0x01,
        4 => 0x03,
        8 | 16 => 0x07,
        _ => return None,
    })
}

/// A tile's metadata word with every subtile in mode `subtile`.
pub fn tile_word(subtile: u8) -> u64 {
    u64::from(subtile) * 0x0101_0101_0101_0101
}

impl TileMode {
    /// The pixel whose stored element holds (x, y)'s value in a tile of
    /// this mode: (x, y) itself, or for a solid tile its top-left pixel.
    /// `None` for a mode this model does not decode.
    pub fn stored_pixel(self, x: u32, y: u32) -> Option<(u32, u32)> {
        let corner = !(COMPRESSION_TILE_PX - 1);
        match self {
            TileMode::Uncompressed => Some((x, y)),
            TileMode::Solid => Some((x & corner, y & corner)),
            TileMode::Unknown(_) => None,
        }
    }

    /// Decodes a tile's metadata word for an image of `element_bytes`
    /// elements. Only whole-tile modes are decoded: which subtile each
    /// byte covers is not publicly known. A word of zeros (metadata never
    /// written, as in a fresh allocation) reads as uncompressed, so an
    /// image nobody wrote reads as its body does.
    pub fn decode(word: u64, element_bytes: u32) -> TileMode {
        let solid = solid_subtile_mode(element_bytes).map(tile_word);
        let plain = uncompressed_subtile_mode(element_bytes).map(tile_word);
        if Some(word) == solid {
            TileMode::Solid
        } else if word == 0 || Some(word) == plain {
            TileMode::Uncompressed
        } else {
            TileMode::Unknown(word)
        }
    }
}

/// The sample-space stretch of a multisampled image's pixel grid, (x, y)
/// factors: its compression metadata covers tiles of 16x16 *samples*,
/// each pixel stretched 2x2 by four samples and 1x2 by two (Mesa's
/// `ail_effective_width_sa`/`height_sa`).
pub fn sample_space_stretch(samples: u32) -> (u32, u32) {
    match samples {
        4 => (2, 2),
        2 => (1, 2),
        _ => (1, 1),
    }
}

/// Where sample `sample` of pixel (x, y) is in sample space: (2x + s % 2,
/// 2y + s / 2) for four samples, (x, 2y + s) for two (as `libagx`'s
/// decompress and fast-clear kernels address it).
pub fn sample_space_position(x: u32, y: u32, sample: u32, samples: u32) -> (u32, u32) {
    match samples {
        4 => (2 * x + (sample & 1), 2 * y + (sample >> 1 & 1)),
        2 => (x, 2 * y + (sample & 1)),
        _ => (x, y),
    }
}

/// The pixel and sample at sample-space position (sx, sy), the inverse
/// of [`sample_space_position`].
pub fn sample_space_pixel(sx: u32, sy: u32, samples: u32) -> (u32, u32, u32) {
    match samples {
        4 => (sx / 2, sy / 2, (sx & 1) | (sy & 1) << 1),
        2 => (sx, sy / 2, sy & 1),
        _ => (sx, sy, 0),
    }
}

/// One level's part of the compression metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetadataLevel {
    /// Byte offset from the start of the layer's metadata.
    pub offset_bytes: u64,
    /// Compression tiles across the level.
    pub width_tiles: u32,
    /// Compression tiles down the level.
    pub height_tiles: u32,
    /// Whether the level is compressed (both sides at least one tile);
    /// smaller levels are stored uncompressed though they have metadata
    /// space.
    pub compressed: bool,
}

/// The metadata buffer of a compressed single-sampled GPU-tiled image
/// (Mesa's `ail_initialize_compression`): per layer, per level while the
/// level's longer side is at least a tile, 8 bytes per 16x16 tile of the
/// level padded to powers of two, each level 128-byte aligned. Tiles are
/// indexed in Z order over the square part of the tile grid, the longer
/// axis's extra tiles linearly after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressionLayout {
    /// The levels with metadata.
    pub levels: Vec<MetadataLevel>,
    /// Distance between layers' metadata.
    pub layer_stride_bytes: u64,
}

impl CompressionLayout {
    /// The metadata layout of a `width` x `height` image with `levels`
    /// levels, or `None` if an image that size cannot be compressed (a
    /// side under one tile).
    pub fn new(width: u32, height: u32, levels: u32) -> Option<CompressionLayout> {
        let t = COMPRESSION_TILE_PX;
        if width < t || height < t {
            return None;
        }
        let (mut w, mut h) = (width.next_multiple_of(t), height.next_multiple_of(t));
        let longer = w.max(h);
        let mut offset = 0u64;
        let mut out = Vec::new();
        for l in 0..levels {
            if longer >> l < t {
                break;
            }
            let alloc = u64::from(w.next_power_of_two().div_ceil(t))
                * u64::from(h.next_power_of_two().div_ceil(t));
            out.push(MetadataLevel {
                offset_bytes: offset,
                width_tiles: minify(width, l).div_ceil(t),
                height_tiles: minify(height, l).div_ceil(t),
                compressed: width.min(height) >> l >= t,
            });
            offset += (alloc * COMPRESSION_TILE_META_BYTES).next_multiple_of(CACHELINE_BYTES);
            w = w.div_ceil(2);
            h = h.div_ceil(2);
        }
        Some(CompressionLayout {
            levels: out,
            layer_stride_bytes: offset,
        })
    }

    /// Whether `level` is stored compressed.
    pub fn level_compressed(&self, level: u32) -> bool {
        self.levels
            .get(level as usize)
            .is_some_and(|l| l.compressed)
    }

    /// The byte offset, from the first layer's metadata, of the word of
    /// the compression tile holding pixel (x, y) of `level` in `layer`;
    /// `None` if the level is not compressed or the pixel is past it.
    pub fn tile_word_offset(&self, level: u32, x: u32, y: u32, layer: u32) -> Option<u64> {
        let l = self.levels.get(level as usize).filter(|l| l.compressed)?;
        let (tx, ty) = (x / COMPRESSION_TILE_PX, y / COMPRESSION_TILE_PX);
        if tx >= l.width_tiles || ty >= l.height_tiles {
            return None;
        }
        let minor = l.width_tiles.min(l.height_tiles);
        let bits = 32 - (minor - 1).leading_zeros();
        let mask = (1u32 << bits) - 1;
        let major = if l.width_tiles > l.height_tiles {
            tx
        } else {
            ty
        };
        let index = morton(tx & mask, ty & mask) + (u64::from(major & !mask) << bits);
        Some(
            u64::from(layer) * self.layer_stride_bytes
                + l.offset_bytes
                + index * COMPRESSION_TILE_META_BYTES,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_aligned_squares_elements_follow_one_another_in_z_order() {
        let layouts = [
            ImageLayout::gpu_tiled(100, 70, 3, 4, false).unwrap(),
            ImageLayout::gpu_tiled(300, 40, 2, 1, false).unwrap(),
            ImageLayout::gpu_tiled(64, 64, 1, 16, true).unwrap(),
            ImageLayout::twiddled(37, 90, 4, 8),
        ];
        for layout in &layouts {
            let ImageLayout::Tiled { levels, .. } = layout else {
                unreachable!()
            };
            for (level, l) in levels.iter().enumerate() {
                let level = level as u32;
                let q = layout.aligned_square(level).unwrap();
                assert_eq!(q, l.tile.0.min(l.tile.1));
                // Every aligned square wholly inside the level.
                for y0 in (0..l.height_el / q).map(|i| i * q) {
                    for x0 in (0..l.width_el / q).map(|i| i * q) {
                        let first = layout.offset(level, x0, y0, 1).unwrap();
                        for index in 0..u64::from(q * q) {
                            let (dx, dy) = morton_position(index);
                            let at = layout.offset(level, x0 + dx, y0 + dy, 1).unwrap();
                            let step = match layout {
                                ImageLayout::Tiled { element_bytes, .. } => {
                                    u64::from(*element_bytes)
                                }
                                _ => unreachable!(),
                            };
                            assert_eq!(
                                at,
                                first + index * step,
                                "level {level} ({x0}, {y0}) + {index}"
                            );
                        }
                    }
                }
            }
        }
        let linear = ImageLayout::Linear {
            stride_bytes: 64,
            element_bytes: 4,
            layer_stride_bytes: 4096,
        };
        assert_eq!(linear.aligned_square(0), None);
    }

    #[test]
    fn morton_position_inverts_morton() {
        // Every position of a 64x64 square: the table's 32x32 and the
        // gathered bits past it.
        for y in 0..64 {
            for x in 0..64 {
                assert_eq!(morton_position(morton(x, y)), (x, y));
            }
        }
        for y in (0..70_000u32).step_by(997).chain([0xFFFF_FFFF, 1 << 31]) {
            for x in (0..70_000u32).step_by(1_009).chain([0xFFFF_FFFF, 5]) {
                assert_eq!(morton_position(morton(x, y)), (x, y));
            }
        }
        // In order: each aligned 2x2 square, then the next.
        let firsts: Vec<_> = (0..8).map(morton_position).collect();
        assert_eq!(
            firsts,
            [
                (0, 0),
                (1, 0),
                (0, 1),
                (1, 1),
                (2, 0),
                (3, 0),
                (2, 1),
                (3, 1)
            ]
        );
    }

    #[test]
    fn a_level_span_runs_from_its_first_level_to_the_next_levels_start() {
        // 64 x 64 4-byte elements, three levels: level 0 is 16 KiB (one
        // 64 x 64 tile), level 1 4 KiB, level 2 1 KiB; layers a page
        // multiple apart.
        let layout = ImageLayout::gpu_tiled(64, 64, 3, 4, false).unwrap();
        let ImageLayout::Tiled {
            levels,
            layer_stride_bytes,
            ..
        } = &layout
        else {
            panic!("tiled");
        };
        let (one, two) = (levels[1].offset_bytes, levels[2].offset_bytes);
        assert_eq!((one, two), (16384, 20480));
        let stride = *layer_stride_bytes;
        assert_eq!(layout.level_span(0..=0, 0, 0), Some((0, one)));
        assert_eq!(layout.level_span(1..=1, 0, 0), Some((one, two)));
        assert_eq!(layout.level_span(1..=2, 0, 0), Some((one, stride)));
        assert_eq!(
            layout.level_span(0..=0, 2, 0),
            Some((2 * stride, 2 * stride + one))
        );
        assert_eq!(layout.level_span(2..=3, 0, 0), None);
        let linear = ImageLayout::Linear {
            stride_bytes: 512,
            element_bytes: 4,
            layer_stride_bytes: 65536,
        };
        assert_eq!(
            linear.level_span(0..=0, 1, 64),
            Some((65536, 65536 + 512 * 64))
        );
        assert_eq!(linear.level_span(0..=1, 0, 64), None);
    }

    #[test]
    fn block_compressed_levels_follow_ails_exceptions() {
        // 1000 x 600 pixels of 8-byte 4x4 blocks (BC1): 250 x 150 blocks,
        // 64 x 32-block tiles, a 4 x 5 tile grid. Levels 0 and 1 fill
        // whole tiles (level 1: 125 x 75 blocks, its grid padded at the
        // bottom: 5 + 2 tiles); level 2 (63 blocks wide) starts the
        // power-of-two levels, rounded up then minified: 256 x 256 blocks
        // at level 0, so 64 x 64 at level 2, in 64-block tiles.
        let layout = ImageLayout::gpu_tiled_blocks((1000, 600), (4, 4), 4, 8, false).unwrap();
        let ImageLayout::Tiled { levels, .. } = &layout else {
            panic!("tiled");
        };
        let tile_bytes = 64 * 32 * 8;
        assert_eq!(levels[0].offset_bytes, 0);
        assert_eq!((levels[0].width_el, levels[0].stride_el), (250, 250));
        assert_eq!(levels[1].offset_bytes, 20 * tile_bytes);
        assert_eq!((levels[1].width_el, levels[1].height_el), (125, 75));
        assert_eq!(levels[2].offset_bytes, 27 * tile_bytes);
        assert_eq!(levels[2].tile, (64, 64));
        assert_eq!(levels[2].width_el, 63);
        assert_eq!(levels[3].offset_bytes, 27 * tile_bytes + 64 * 64 * 8);
        assert_eq!(levels[3].tile, (32, 32));
        // A grid padded on the left (5 tiles across at level 1) adds a
        // block to the level's stride.
        let layout = ImageLayout::gpu_tiled_blocks((1160, 600), (4, 4), 2, 8, false).unwrap();
        let ImageLayout::Tiled { levels, .. } = &layout else {
            panic!("tiled");
        };
        assert_eq!(levels[1].stride_el, 145 + 1);
        // Uncompressed images are unchanged by the block form.
        assert_eq!(
            ImageLayout::gpu_tiled_blocks((100, 70), (1, 1), 5, 4, true),
            ImageLayout::gpu_tiled(100, 70, 5, 4, true)
        );
    }

    #[test]
    fn z_order_puts_x_in_the_even_bits() {
        assert_eq!(morton(1, 0), 1);
        assert_eq!(morton(0, 1), 2);
        assert_eq!(morton(3, 3), 15);
        assert_eq!(morton(4, 0), 16);
        assert_eq!(morton(127, 0), 0b01_0101_0101_0101);
    }

    #[test]
    fn morton_by_table_is_morton_by_spreading() {
        for y in 0..256u32 {
            for x in 0..256u32 {
                assert_eq!(morton(x, y), spread(x) | spread(y) << 1, "({x}, {y})");
            }
        }
        assert_eq!(morton(256, 0), 1 << 16);
        assert_eq!(morton(0, 256), 1 << 17);
    }

    #[test]
    fn spreading_moves_every_bit_i_to_bit_2i() {
        let by_bits = |v: u32| {
            (0..32).fold(0u64, |out, bit| {
                out | (u64::from((v >> bit) & 1) << (2 * bit))
            })
        };
        let mut v = 0x9E37_79B9u32;
        for _ in 0..1000 {
            assert_eq!(spread(v), by_bits(v), "{v:#x}");
            v = v.rotate_left(5) ^ v.wrapping_mul(0x2545_F491);
        }
        for v in [0, 1, u32::MAX, 1 << 31, 0xFFFF, 0xFFFF_0000] {
            assert_eq!(spread(v), by_bits(v), "{v:#x}");
        }
        assert_eq!(morton(u32::MAX, u32::MAX), u64::MAX);
    }

    #[test]
    fn a_gpu_tiled_image_uses_page_tiles_then_a_power_of_two_tail() {
        // 256 x 100 RGBA8: 64x64 tiles, 4 x 2 of them at level 0.
        let layout = ImageLayout::gpu_tiled(256, 100, 9, 4, false).unwrap();
        let ImageLayout::Tiled { levels, .. } = &layout else {
            panic!("tiled")
        };
        assert_eq!(levels[0].offset_bytes, 0);
        assert_eq!(levels[0].tile, (64, 64));
        // Level 0: 8 tiles of 16 KiB.
        assert_eq!(levels[1].offset_bytes, 8 * 16384);
        // Level 1 (128 x 50) is smaller than a tile in height: the POT
        // tail starts there, with 64x64 -> tile of min(128, 50) -> 64.
        assert_eq!(levels[1].tile, (64, 64));
        assert_eq!(layout.offset(0, 1, 0, 0), Some(4));
        assert_eq!(layout.offset(0, 0, 1, 0), Some(8));
        assert_eq!(layout.offset(0, 64, 0, 0), Some(16384), "the next tile");
        assert_eq!(
            layout.offset(0, 0, 64, 0),
            Some(4 * 16384),
            "the next tile row"
        );
        assert_eq!(layout.offset(0, 256, 0, 0), None);
        let linear = ImageLayout::Linear {
            stride_bytes: 1024,
            element_bytes: 4,
            layer_stride_bytes: 1024 * 100,
        };
        assert_eq!(linear.offset(0, 3, 2, 1), Some(102400 + 2048 + 12));
        assert_eq!(
            linear.offset(1, 0, 0, 0),
            None,
            "linear images have one level"
        );
    }

    #[test]
    fn a_twiddled_image_pads_each_level_to_powers_of_two_with_square_tiles() {
        // 100 x 10 RGBA8: level 0 is 128 x 16 padded, tiles of 16 x 16, a
        // row of 8 of them (the padding counts: 7 would cover 100).
        let layout = ImageLayout::twiddled(100, 10, 3, 4);
        let ImageLayout::Tiled {
            levels,
            layer_stride_bytes,
            ..
        } = &layout
        else {
            panic!("tiled")
        };
        assert_eq!(levels[0].tile, (16, 16));
        assert_eq!(levels[0].stride_el, 128);
        // Level 1 (50 x 5) is padded to 64 x 8; level 0 took 128*16*4.
        assert_eq!(levels[1].offset_bytes, 8192);
        assert_eq!(levels[1].tile, (8, 8));
        assert_eq!(levels[2].offset_bytes, 8192 + 64 * 8 * 4);
        assert_eq!(*layer_stride_bytes, PAGE_BYTES, "layers are page-aligned");
        assert_eq!(layout.offset(0, 1, 1, 0), Some(12));
        assert_eq!(layout.offset(0, 16, 0, 0), Some(16 * 16 * 4));
        assert_eq!(layout.offset(0, 99, 9, 0), Some((6 * 256 + 135) * 4));
        assert_eq!(layout.offset(0, 100, 0, 0), None);
        assert_eq!(layout.offset(0, 0, 0, 2), Some(2 * PAGE_BYTES));
    }

    #[test]
    fn page_aligned_layers_round_the_layer_stride_up_to_a_page() {
        let packed = ImageLayout::gpu_tiled(32, 32, 1, 4, false).unwrap();
        let aligned = ImageLayout::gpu_tiled(32, 32, 1, 4, true).unwrap();
        assert_eq!(packed.layer_bytes(), 32 * 32 * 4);
        assert_eq!(aligned.layer_bytes(), PAGE_BYTES);
        assert_eq!(aligned.offset(0, 0, 0, 1), Some(PAGE_BYTES));
        assert_eq!(full_chain_levels(256, 100), 9);
        assert_eq!(full_chain_levels(1, 1), 1);
    }

    #[test]
    fn compression_metadata_is_one_word_per_tile_in_z_order_then_linear() {
        // 80 x 48: 5 x 3 tiles, allocated as 8 x 4 (128 x 64 padded).
        let meta = CompressionLayout::new(80, 48, 7).unwrap();
        assert_eq!(meta.levels[0].width_tiles, 5);
        assert_eq!(meta.levels[0].height_tiles, 3);
        // 32 words = 256 bytes, already cacheline-aligned.
        assert_eq!(meta.levels[1].offset_bytes, 256);
        // Level 1 (40 x 24, aligned 40 x 24 -> 64 x 32 padded): 4 x 2
        // words = 64 bytes, padded to 128. Level 2 (20 x 12) is under a
        // tile on one side: allocated, not compressed.
        assert_eq!(meta.levels[2].offset_bytes, 256 + 128);
        assert!(meta.levels[1].compressed && !meta.levels[2].compressed);
        // Level 3 (10 x 6 from 80 x 48: the longer side 80 >> 3 = 10 <
        // 16) has none.
        assert_eq!(meta.levels.len(), 3);
        assert_eq!(meta.layer_stride_bytes, 256 + 128 + 128);
        // The shorter side has 3 tiles: two index bits of it interleave
        // with two of x; x's higher bits follow linearly.
        let word = |x: u32, y: u32| meta.tile_word_offset(0, x * 16, y * 16, 0).unwrap() / 8;
        assert_eq!(word(1, 0), 1);
        assert_eq!(word(0, 1), 2);
        assert_eq!(word(3, 2), 13);
        assert_eq!(word(4, 0), 16);
        assert_eq!(word(4, 2), 24);
        assert_eq!(meta.tile_word_offset(0, 80, 0, 0), None);
        assert_eq!(meta.tile_word_offset(2, 0, 0, 0), None);
        assert_eq!(
            meta.tile_word_offset(0, 17, 0, 1),
            Some(meta.layer_stride_bytes + 8)
        );
        // A tall image: y is the major axis.
        let tall = CompressionLayout::new(16, 64, 1).unwrap();
        let word = |y: u32| tall.tile_word_offset(0, 0, y * 16, 0).unwrap() / 8;
        assert_eq!((word(1), word(2), word(3)), (1, 2, 3));
        assert_eq!(CompressionLayout::new(15, 64, 1), None);
    }

    #[test]
    fn tile_modes_depend_on_the_element_size() {
        assert_eq!(TileMode::decode(0x0303_0303_0303_0303, 4), TileMode::Solid);
        assert_eq!(
            TileMode::decode(0x7f7f_7f7f_7f7f_7f7f, 4),
            TileMode::Uncompressed
        );
        assert_eq!(
            TileMode::decode(0x0707_0707_0707_0707, 4),
            TileMode::Unknown(0x0707_0707_0707_0707)
        );
        assert_eq!(TileMode::decode(tile_word(0x07), 8), TileMode::Solid);
        assert_eq!(
            TileMode::decode(tile_word(0xff), 16),
            TileMode::Uncompressed
        );
        assert_eq!(TileMode::decode(0, 1), TileMode::Uncompressed);
        let mixed = tile_word(0x03) ^ 0x7c;
        assert_eq!(TileMode::decode(mixed, 4), TileMode::Unknown(mixed));
    }
}
