//! The tilebuffer: a tile's on-chip memory. Each pixel holds one record
//! per sample (the colour elements the pass's programs read and write
//! with `ld_tile`/`st_tile`, laid out as the pass's sample size says: an
//! image block), plus 32-bit depth and 8-bit stencil per sample. It lives
//! only while its tile renders: the background program fills it, the
//! end-of-tile program stores it out.

use crate::imageblock::{Imageblock, ImageblockShape};

/// One tile's on-chip memory: the colour records, and depth and stencil
/// per sample.
pub(super) struct Tilebuffer {
    pub(super) colour: Imageblock,
    pub(super) depth: Vec<f32>,
    pub(super) stencil: Vec<u8>,
}

impl Tilebuffer {
    pub(super) fn new(tile: (u32, u32), samples: u8, sample_bytes: u8) -> Tilebuffer {
        let pixels = tile.0 * tile.1 * u32::from(samples);
        Tilebuffer {
            colour: Imageblock::new(ImageblockShape {
                width_px: tile.0,
                height_px: tile.1,
                samples: u32::from(samples),
                sample_bytes: u32::from(sample_bytes),
            }),
            depth: vec![0.0; pixels as usize],
            stencil: vec![0; pixels as usize],
        }
    }
}
