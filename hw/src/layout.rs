//! Where each texel of an image lives in memory.
//!
//! AGX images are *linear* (rows `stride` bytes apart; one level) or
//! *twiddled*: each mip level is cut into tiles of one 16 KiB page (the
//! tile's width and height in elements depend on the element size, 64x64
//! for 4-byte elements), tiles are stored row-major, and within a tile the
//! elements follow a Z-order curve: x's bits in the even bit positions of
//! the index, y's in the odd ones. Levels too small for a whole tile use
//! one power-of-two tile the size of the level (the "small" miptree).
//! Level offsets are aligned to 128 bytes; layers are `layer_stride`
//! apart (page-aligned when the levels together exceed a page).
//! The texture unit, the pixel back end and the userspace driver all use
//! this one description.

/// Bytes of a memory page (a twiddled tile).
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

/// Interleaves the bits of `v` with zeros (bit i -> bit 2i).
fn spread(v: u32) -> u64 {
    let mut out = 0u64;
    for bit in 0..32 {
        out |= u64::from((v >> bit) & 1) << (2 * bit);
    }
    out
}

/// The Z-order index of (x, y) within a tile.
pub fn morton(x: u32, y: u32) -> u64 {
    spread(x) | (spread(y) << 1)
}

/// One mip level of a twiddled image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    /// Byte offset from the start of the layer.
    pub offset_bytes: u64,
    /// Tile size in elements.
    pub tile: (u32, u32),
    /// Width in elements (the row length the tile grid covers).
    pub width_el: u32,
    /// Height in elements.
    pub height_el: u32,
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
    /// Page-sized Z-order tiles.
    Twiddled {
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

impl ImageLayout {
    /// A twiddled image of `width` x `height` elements and `levels` mip
    /// levels (`layers` layers), or `None` for an element size the
    /// hardware does not tile.
    pub fn twiddled(
        width: u32,
        height: u32,
        levels: u32,
        layers: u32,
        element_bytes: u32,
    ) -> Option<ImageLayout> {
        let (tw, th) = max_tile(element_bytes)?;
        let (stx, sty) = (width.div_ceil(tw), height.div_ceil(th));
        let area = u64::from(stx) * u64::from(sty);
        // The first level too small for a whole large tile.
        let mut pot_level = 0;
        while minify(width, pot_level) >= tw && minify(height, pot_level) >= th && pot_level < 32 {
            if width >> pot_level == 0 || height >> pot_level == 0 {
                break;
            }
            pot_level += 1;
        }
        let mut offset = 0u64;
        let mut out = Vec::new();
        for l in 0..levels.min(pot_level) {
            let mut tiles = area >> (2 * l);
            let mask = (1u32 << l) - 1;
            let pad_left = stx & mask != 0;
            let pad_bottom = sty & mask != 0;
            if pad_left {
                tiles += u64::from(sty >> l);
            }
            if pad_bottom {
                tiles += u64::from(stx >> l);
            }
            if pad_left && pad_bottom {
                tiles += 1;
            }
            out.push(Level {
                offset_bytes: offset,
                tile: (tw, th),
                width_el: minify(width, l),
                height_el: minify(height, l),
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
            });
            let size = u64::from(potw) * u64::from(poth) * u64::from(element_bytes);
            offset = (offset + size).next_multiple_of(CACHELINE_BYTES);
            potw = (potw / 2).max(1);
            poth = (poth / 2).max(1);
        }
        let layer_stride_bytes = if levels > 1 && offset > PAGE_BYTES && layers > 1 {
            offset.next_multiple_of(PAGE_BYTES)
        } else {
            offset
        };
        Some(ImageLayout::Twiddled {
            element_bytes,
            levels: out,
            layer_stride_bytes,
        })
    }

    /// Bytes of one layer (all levels).
    pub fn layer_bytes(&self) -> u64 {
        match self {
            ImageLayout::Linear {
                layer_stride_bytes, ..
            }
            | ImageLayout::Twiddled {
                layer_stride_bytes, ..
            } => *layer_stride_bytes,
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
            ImageLayout::Twiddled {
                element_bytes,
                levels,
                layer_stride_bytes,
            } => {
                let l = levels.get(level as usize)?;
                if x >= l.width_el || y >= l.height_el {
                    return None;
                }
                let (tw, th) = l.tile;
                let tiles_per_row = u64::from(l.width_el.div_ceil(tw));
                let tile = u64::from(y / th) * tiles_per_row + u64::from(x / tw);
                let index = tile * u64::from(tw * th) + morton(x % tw, y % th);
                Some(
                    u64::from(layer) * layer_stride_bytes
                        + l.offset_bytes
                        + index * u64::from(*element_bytes),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn z_order_puts_x_in_the_even_bits() {
        assert_eq!(morton(1, 0), 1);
        assert_eq!(morton(0, 1), 2);
        assert_eq!(morton(3, 3), 15);
        assert_eq!(morton(4, 0), 16);
        assert_eq!(morton(127, 0), 0b01_0101_0101_0101);
    }

    #[test]
    fn a_twiddled_image_uses_page_tiles_then_a_power_of_two_tail() {
        // 256 x 100 RGBA8: 64x64 tiles, 4 x 2 of them at level 0.
        let layout = ImageLayout::twiddled(256, 100, 9, 1, 4).unwrap();
        let ImageLayout::Twiddled { levels, .. } = &layout else {
            panic!("twiddled")
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
}
