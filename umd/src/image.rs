//! Images: render targets, textures and depth buffers, and the 24-byte
//! texture and PBE descriptors that describe them to the texture unit and
//! the pixel back end.

use agx_hw::block::{BlockFormat, BorderEncoding};
use agx_hw::formats::{
    Channels, CustomBorder, Layout, Pbe, Texture, TextureDimension, TextureType,
};
use agx_hw::layout::{
    solid_subtile_mode, tile_word, uncompressed_subtile_mode, CompressionLayout, ImageLayout,
    TileMode, COMPRESSION_TILE_PX,
};

use crate::device::{Buffer, BufferDesc, Device, MemoryType, Region};
use crate::error::Error;

/// A colour format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// 8-bit RGBA, unsigned normalised.
    Rgba8Unorm,
    /// 8-bit RGBA, sRGB-encoded (sampling decodes; not renderable here).
    Rgba8Srgb,
    /// 16-bit float RGBA.
    Rgba16Float,
    /// 32-bit float R.
    R32Float,
    /// A block-compressed format: BC1-BC7, ETC2, EAC or ASTC
    /// (`agx_hw::block`), for sampling. Its images hold blocks, not
    /// pixels: [`Image::write_level`] takes a level's blocks row by row.
    Block {
        /// The format.
        format: BlockFormat,
        /// The colour channels are sRGB-encoded (sampling decodes them):
        /// BC1-BC3, BC7, ETC2 and ASTC have sRGB variants.
        srgb: bool,
    },
}

impl Format {
    /// Bytes of an element: a pixel, or a block of a block-compressed
    /// format.
    pub fn element_bytes(self) -> u32 {
        match self {
            Format::Rgba8Unorm | Format::Rgba8Srgb | Format::R32Float => 4,
            Format::Rgba16Float => 8,
            Format::Block { format, .. } => format.block_bytes(),
        }
    }

    /// Pixels across and down an element ((1, 1) but for block-compressed
    /// formats).
    pub fn block_px(self) -> (u32, u32) {
        match self {
            Format::Block { format, .. } => format.block_px(),
            _ => (1, 1),
        }
    }

    /// Elements across and down an image (or level) of `width` x `height`
    /// pixels: partial blocks count whole.
    pub fn elements(self, width: u32, height: u32) -> (u32, u32) {
        match self {
            Format::Block { format, .. } => format.blocks(width, height),
            _ => (width, height),
        }
    }

    /// Whether colour channels are sRGB-encoded.
    pub fn srgb(self) -> bool {
        match self {
            Format::Rgba8Srgb => true,
            Format::Block { srgb, .. } => srgb,
            _ => false,
        }
    }

    /// Channels and type in descriptors (`None`: an ASTC footprint the
    /// hardware has no format for, or an sRGB variant of a block format
    /// that has none).
    pub fn channels(self) -> Option<(Channels, TextureType)> {
        Some(match self {
            Format::Rgba8Unorm | Format::Rgba8Srgb => (Channels::R8G8B8A8, TextureType::Unorm),
            Format::Rgba16Float => (Channels::R16G16B16A16, TextureType::Float),
            Format::R32Float => (Channels::R32, TextureType::Float),
            Format::Block { format, srgb } => {
                let srgb_variant = matches!(
                    format,
                    BlockFormat::Bc1
                        | BlockFormat::Bc2
                        | BlockFormat::Bc3
                        | BlockFormat::Bc7
                        | BlockFormat::Etc2Rgb8
                        | BlockFormat::Etc2Rgb8A1
                        | BlockFormat::Etc2Rgba8
                        | BlockFormat::Astc { .. }
                );
                if srgb && !srgb_variant {
                    return None;
                }
                format.descriptor()?
            }
        })
    }

    /// A custom border colour (linear RGBA) for sampling images of this
    /// format: each channel in the format's own encoding, as the texture
    /// unit reads it (Mesa's `agx_pack_border`): unorm channels as n-bit
    /// integers (sRGB colour channels as 12-bit, linear), 16-bit floats
    /// as fp16 bits, 32-bit floats as their bits; block formats as
    /// `agx_hw::block` says.
    pub fn border(self, rgba: [f32; 4]) -> CustomBorder {
        let unorm = |c: f32, bits: u32| {
            let max = ((1u32 << bits) - 1) as f32;
            (c.clamp(0.0, 1.0) * max).round_ties_even() as u32
        };
        let snorm = |c: f32, bits: u32| {
            let max = ((1u32 << (bits - 1)) - 1) as f32;
            (c.clamp(-1.0, 1.0) * max).round_ties_even() as i32 as u32
        };
        let half = |c: f32| u32::from(half::f16::from_f32(c).to_bits());
        let channels: [u32; 4] = match self {
            Format::Rgba8Unorm => rgba.map(|c| unorm(c, 8)),
            Format::Rgba8Srgb => {
                std::array::from_fn(|i| unorm(rgba[i], if i == 3 { 8 } else { 12 }))
            }
            Format::Rgba16Float => rgba.map(half),
            Format::R32Float => [rgba[0].to_bits(), 0, 0, 0],
            Format::Block { format, srgb } => {
                std::array::from_fn(|i| match format.border_encoding(i, srgb) {
                    BorderEncoding::Unorm { bits } => unorm(rgba[i], bits),
                    BorderEncoding::Snorm { bits } => snorm(rgba[i], bits),
                    BorderEncoding::Half => half(rgba[i]),
                })
            }
        };
        CustomBorder {
            channel_0: channels[0],
            channel_1: channels[1],
            channel_2: channels[2],
            channel_3: channels[3],
        }
    }

    /// The tilebuffer element format `st_tile`/`ld_tile`/block stores use
    /// for a render target of this format (assembler notation), if it can
    /// be rendered to.
    pub fn tile_format(self) -> Option<&'static str> {
        match self {
            Format::Rgba8Unorm => Some("u8norm"),
            Format::Rgba16Float => Some("f16"),
            Format::R32Float | Format::Rgba8Srgb | Format::Block { .. } => None,
        }
    }
}

/// A 2D image: linear, or GPU-tiled and possibly compressed.
#[derive(Debug)]
pub struct Image {
    buffer: Buffer,
    width: u32,
    height: u32,
    format: Format,
    stride_bytes: u32,
    /// For GPU-tiled images: the layout (levels in Z-order page tiles).
    tiled: Option<Tiled>,
}

/// The layout of a GPU-tiled image.
#[derive(Debug)]
struct Tiled {
    layout: ImageLayout,
    levels: u32,
    /// For a compressed image: the metadata layout and its offset in the
    /// buffer (after the body).
    compression: Option<(CompressionLayout, u64)>,
}

impl Image {
    /// A `width` x `height` GPU-tiled image of `format` with `levels` mip
    /// levels (the layout of `agx_hw::layout`: page-sized Z-order tiles,
    /// what the texture unit reads fastest).
    pub fn new_tiled(
        device: &Device,
        width: u32,
        height: u32,
        format: Format,
        levels: u32,
    ) -> Result<Image, Error> {
        Image::tiled(device, width, height, format, levels, false)
    }

    /// A GPU-tiled image with lossless compression (what Mesa makes of
    /// render targets and textures by default): a metadata word per 16x16
    /// tile after the body says how the tile is stored. Both sides must
    /// be at least 16 pixels. Rendering to it, [`Image::clear`] and
    /// [`Image::write_level`] keep the metadata right.
    pub fn new_compressed(
        device: &Device,
        width: u32,
        height: u32,
        format: Format,
        levels: u32,
    ) -> Result<Image, Error> {
        Image::tiled(device, width, height, format, levels, true)
    }

    fn tiled(
        device: &Device,
        width: u32,
        height: u32,
        format: Format,
        levels: u32,
        compressed: bool,
    ) -> Result<Image, Error> {
        if !(1..=16384).contains(&width)
            || !(1..=16384).contains(&height)
            || !(1..=agx_hw::layout::full_chain_levels(width, height)).contains(&levels)
        {
            return Err(Error::Unsupported(format!(
                "a {width}x{height} image of {levels} levels"
            )));
        }
        format
            .channels()
            .ok_or_else(|| Error::Unsupported(format!("{format:?}")))?;
        // The hardware lays a mipmapped image out for its full chain.
        let laid_out_levels = agx_hw::layout::laid_out_levels(width, height, levels > 1, levels);
        let layout = ImageLayout::gpu_tiled_blocks(
            (width, height),
            format.block_px(),
            laid_out_levels,
            format.element_bytes(),
            false,
        )
        .ok_or_else(|| Error::Unsupported(format!("tiled {format:?}")))?;
        let body_bytes = layout.layer_bytes();
        // Lossless compression is of pixels (Mesa's ail compresses no
        // block-compressed format).
        if compressed && matches!(format, Format::Block { .. }) {
            return Err(Error::Unsupported(format!("a compressed {format:?} image")));
        }
        let compression = if compressed {
            let meta = CompressionLayout::new(width, height, laid_out_levels).ok_or_else(|| {
                Error::Unsupported(format!("a compressed {width}x{height} image"))
            })?;
            Some((meta, body_bytes))
        } else {
            None
        };
        let meta_bytes = compression
            .as_ref()
            .map_or(0, |(meta, _)| meta.layer_stride_bytes);
        let buffer = device.create_buffer(&BufferDesc {
            size_bytes: (body_bytes + meta_bytes).max(1),
            memory: MemoryType::HostCached,
            region: Region::General,
            gpu_write: true,
        })?;
        Ok(Image {
            buffer,
            width,
            height,
            format,
            stride_bytes: 0,
            tiled: Some(Tiled {
                layout,
                levels,
                compression,
            }),
        })
    }

    /// Mip levels.
    pub fn levels(&self) -> u32 {
        self.tiled.as_ref().map_or(1, |t| t.levels)
    }

    /// Whether the image is compressed.
    pub fn compressed(&self) -> bool {
        self.tiled.as_ref().is_some_and(|t| t.compression.is_some())
    }

    /// Writes tightly packed rows of level `level` (tiled images): rows
    /// of pixels, or for a block-compressed format rows of blocks (the
    /// level's [`Format::elements`]). The level's compression tiles
    /// become uncompressed.
    pub fn write_level(&self, level: u32, pixels: &[u8]) -> Result<(), Error> {
        let Some(tiled) = &self.tiled else {
            return if level == 0 {
                self.write_pixels(pixels)
            } else {
                Err(Error::Unsupported("levels of a linear image".into()))
            };
        };
        if level >= tiled.levels {
            return Err(Error::Unsupported(format!(
                "level {level} of an image of {} levels",
                tiled.levels
            )));
        }
        let bpp = self.format.element_bytes() as usize;
        let (w, h) = self
            .format
            .elements((self.width >> level).max(1), (self.height >> level).max(1));
        // The whole level: its compression tiles become uncompressed.
        if pixels.len() != (w * h) as usize * bpp {
            return Err(Error::Unsupported(format!(
                "{} bytes for level {level} ({w}x{h} elements of {bpp} bytes)",
                pixels.len()
            )));
        }
        for (i, texel) in pixels.chunks_exact(bpp).enumerate() {
            let (x, y) = (i as u32 % w, i as u32 / w);
            let at = tiled
                .layout
                .offset(level, x, y, 0)
                .ok_or_else(|| Error::Unsupported(format!("level {level} of the image")))?;
            self.buffer.write(at, texel)?;
        }
        let mode = uncompressed_subtile_mode(self.format.element_bytes());
        self.set_tile_modes(level, mode.map(tile_word))
    }

    /// Sets every metadata word of `level` of a compressed image to
    /// `word`.
    fn set_tile_modes(&self, level: u32, word: Option<u64>) -> Result<(), Error> {
        let Some(Tiled {
            compression: Some((meta, meta_offset)),
            ..
        }) = &self.tiled
        else {
            return Ok(());
        };
        let word =
            word.ok_or_else(|| Error::Unsupported(format!("compressed {:?}", self.format)))?;
        let (w, h) = ((self.width >> level).max(1), (self.height >> level).max(1));
        for ty in 0..h.div_ceil(COMPRESSION_TILE_PX) {
            for tx in 0..w.div_ceil(COMPRESSION_TILE_PX) {
                let (x, y) = (tx * COMPRESSION_TILE_PX, ty * COMPRESSION_TILE_PX);
                if let Some(at) = meta.tile_word_offset(level, x, y, 0) {
                    self.buffer.write(meta_offset + at, &word.to_le_bytes())?;
                }
            }
        }
        Ok(())
    }

    /// Sets every pixel of level 0 to `pixel` (the format's bytes). For a
    /// compressed image this is a fast clear, as Mesa's: each compression
    /// tile becomes solid, its colour written where the tile's first
    /// pixels are (eight copies: one per 8x4 subtile).
    pub fn clear(&self, pixel: &[u8]) -> Result<(), Error> {
        if let Format::Block { .. } = self.format {
            return Err(Error::Unsupported(format!("clearing {:?}", self.format)));
        }
        let bpp = self.format.element_bytes();
        if pixel.len() != bpp as usize {
            return Err(Error::Unsupported(format!(
                "a {}-byte clear colour for {:?}",
                pixel.len(),
                self.format
            )));
        }
        // A compressed image's level 0 is always compressed (both sides
        // are at least a tile).
        let Some(
            tiled @ Tiled {
                compression: Some(_),
                ..
            },
        ) = &self.tiled
        else {
            return self.write_pixels(&pixel.repeat((self.width * self.height) as usize));
        };
        let copies = pixel.repeat(8);
        for ty in 0..self.height.div_ceil(COMPRESSION_TILE_PX) {
            for tx in 0..self.width.div_ceil(COMPRESSION_TILE_PX) {
                let (x, y) = (tx * COMPRESSION_TILE_PX, ty * COMPRESSION_TILE_PX);
                let at = tiled
                    .layout
                    .offset(0, x, y, 0)
                    .ok_or_else(|| Error::Unsupported("a tile past the image".into()))?;
                self.buffer.write(at, &copies)?;
            }
        }
        self.set_tile_modes(0, solid_subtile_mode(bpp).map(tile_word))
    }
    /// A `width` x `height` linear image of `format`, rows (of pixels,
    /// or of blocks) 16-byte aligned.
    pub fn new(device: &Device, width: u32, height: u32, format: Format) -> Result<Image, Error> {
        if !(1..=16384).contains(&width) || !(1..=16384).contains(&height) {
            return Err(Error::Unsupported(format!("a {width}x{height} image")));
        }
        format
            .channels()
            .ok_or_else(|| Error::Unsupported(format!("{format:?}")))?;
        let (row_elements, rows) = format.elements(width, height);
        let stride_bytes = (row_elements * format.element_bytes()).next_multiple_of(16);
        let buffer = device.create_buffer(&BufferDesc {
            size_bytes: u64::from(stride_bytes) * u64::from(rows),
            memory: MemoryType::HostCached,
            region: Region::General,
            gpu_write: true,
        })?;
        Ok(Image {
            buffer,
            width,
            height,
            format,
            stride_bytes,
            tiled: None,
        })
    }

    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// Format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Bytes per row (of pixels, or of blocks).
    pub fn stride_bytes(&self) -> u32 {
        self.stride_bytes
    }

    /// The memory.
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }

    /// Writes tightly packed rows of pixels (level 0), or of blocks for a
    /// block-compressed format.
    pub fn write_pixels(&self, pixels: &[u8]) -> Result<(), Error> {
        if self.tiled.is_some() {
            return self.write_level(0, pixels);
        }
        let (row_elements, rows) = self.format.elements(self.width, self.height);
        let row = (row_elements * self.format.element_bytes()) as usize;
        for (y, line) in pixels.chunks(row).take(rows as usize).enumerate() {
            self.buffer
                .write(u64::from(self.stride_bytes) * y as u64, line)?;
        }
        Ok(())
    }

    /// Reads the pixels (level 0) as tightly packed rows, decoding the
    /// compression tiles of a compressed image.
    pub fn read_pixels(&self) -> Result<Vec<u8>, Error> {
        if let Format::Block { .. } = self.format {
            return Err(Error::Unsupported(format!(
                "reading {:?} pixels",
                self.format
            )));
        }
        let row = (self.width * self.format.element_bytes()) as usize;
        let mut out = vec![0u8; row * self.height as usize];
        if let Some(tiled) = &self.tiled {
            // One read of the whole image, then the pixels from memory.
            let memory = self.buffer.read_all()?;
            let bpp = self.format.element_bytes();
            let bytes = |at: u64, len: usize| {
                usize::try_from(at)
                    .ok()
                    .and_then(|at| memory.get(at..at + len))
                    .ok_or_else(|| Error::Unsupported("a pixel past the image".into()))
            };
            for (i, texel) in out.chunks_exact_mut(bpp as usize).enumerate() {
                let (mut x, mut y) = (i as u32 % self.width, i as u32 / self.width);
                if let Some((meta, meta_offset)) = &tiled.compression {
                    if let Some(at) = meta.tile_word_offset(0, x, y, 0) {
                        let mut word = [0u8; 8];
                        word.copy_from_slice(bytes(meta_offset + at, 8)?);
                        let mode = TileMode::decode(u64::from_le_bytes(word), bpp);
                        (x, y) = mode.stored_pixel(x, y).ok_or_else(|| {
                            Error::Unsupported(format!(
                                "compression mode {mode:?} of the tile at ({x}, {y})"
                            ))
                        })?;
                    }
                }
                let at = tiled
                    .layout
                    .offset(0, x, y, 0)
                    .ok_or_else(|| Error::Unsupported("a pixel past the image".into()))?;
                texel.copy_from_slice(bytes(at, bpp as usize)?);
            }
            return Ok(out);
        }
        for (y, line) in out.chunks_mut(row).enumerate() {
            self.buffer
                .read(u64::from(self.stride_bytes) * y as u64, line)?;
        }
        Ok(out)
    }

    /// The descriptor channels and type of the image's format (checked
    /// when the image was made).
    fn descriptor_channels(&self) -> (Channels, TextureType) {
        self.format
            .channels()
            .unwrap_or((Channels::Unknown(0), TextureType::Unorm))
    }

    /// The texture descriptor for sampling or loading this image.
    pub fn texture_descriptor(&self) -> Texture {
        let (channels, data_type) = self.descriptor_channels();
        let base = Texture {
            dimension: TextureDimension::D2,
            channels,
            data_type,
            width: self.width,
            height: self.height,
            address: self.buffer.va(),
            srgb: self.format.srgb(),
            ..Texture::default()
        };
        match &self.tiled {
            Some(tiled) => Texture {
                layout: Layout::Gpu,
                last_level: tiled.levels - 1,
                unk_mipmapped: tiled.levels > 1,
                compressed_1: tiled.compression.is_some(),
                extended: tiled.compression.is_some(),
                acceleration_buffer: tiled
                    .compression
                    .as_ref()
                    .map_or(0, |(_, offset)| self.buffer.va() + offset),
                ..base
            },
            None => Texture {
                layout: Layout::Linear,
                stride: self.stride_bytes,
                ..base
            },
        }
    }

    /// The PBE descriptor for storing to this image.
    pub fn pbe_descriptor(&self) -> Pbe {
        let (channels, data_type) = self.descriptor_channels();
        let base = Pbe {
            dimension: TextureDimension::D2,
            channels,
            data_type,
            width: self.width,
            height: self.height,
            buffer: self.buffer.va(),
            ..Pbe::default()
        };
        match &self.tiled {
            Some(tiled) => Pbe {
                layout: Layout::Gpu,
                levels: tiled.levels,
                compressed_1: tiled.compression.is_some(),
                extended: tiled.compression.is_some(),
                acceleration_buffer: tiled
                    .compression
                    .as_ref()
                    .map_or(0, |(_, offset)| self.buffer.va() + offset),
                ..base
            },
            None => Pbe {
                layout: Layout::Linear,
                stride: self.stride_bytes,
                ..base
            },
        }
    }
}

/// A depth or stencil plane: GPU-tiled (`agx_hw::layout`), one element
/// per pixel, as the ZLS control's tiling bits say (this driver leaves
/// them 0, GPU-tiled) and as Mesa lays its depth buffers out.
#[derive(Debug)]
struct ZlsPlane {
    buffer: Buffer,
    width: u32,
    height: u32,
    layout: ImageLayout,
    element_bytes: u32,
}

impl ZlsPlane {
    fn new(
        device: &Device,
        width: u32,
        height: u32,
        element_bytes: u32,
    ) -> Result<ZlsPlane, Error> {
        if !(1..=16384).contains(&width) || !(1..=16384).contains(&height) {
            return Err(Error::Unsupported(format!(
                "a {width}x{height} depth/stencil buffer"
            )));
        }
        let layout = ImageLayout::gpu_tiled(width, height, 1, element_bytes, false)
            .ok_or_else(|| Error::Unsupported(format!("{element_bytes}-byte depth/stencil")))?;
        let buffer = device.create_buffer(&BufferDesc {
            size_bytes: layout.layer_bytes(),
            memory: MemoryType::DeviceLocal,
            region: Region::General,
            gpu_write: true,
        })?;
        Ok(ZlsPlane {
            buffer,
            width,
            height,
            layout,
            element_bytes,
        })
    }

    /// The `depth.stride`/`stencil.stride` word: layers whole pages apart.
    fn layer_stride_word(&self) -> Result<u32, Error> {
        let pages = self
            .layout
            .layer_bytes()
            .div_ceil(agx_hw::layout::PAGE_BYTES) as u32;
        agx_hw::formats::ZlsLayerStride {
            unk_0: true,
            pages: pages.max(1),
        }
        .pack()
        .map(u32::from_le_bytes)
        .map_err(|e| Error::Unsupported(format!("ZLS stride: {e}")))
    }

    fn read(&self, x: u32, y: u32, out: &mut [u8]) -> Result<(), Error> {
        let at = self
            .layout
            .offset(0, x, y, 0)
            .filter(|_| x < self.width && y < self.height)
            .ok_or(Error::OutOfBounds {
                offset_bytes: u64::from(y) * u64::from(self.width) + u64::from(x),
                len_bytes: 1,
                size_bytes: u64::from(self.width) * u64::from(self.height),
            })?;
        self.buffer
            .read(at, &mut out[..self.element_bytes as usize])
    }
}

/// A 32-bit float depth buffer for the ZLS: GPU-tiled, as Mesa's.
#[derive(Debug)]
pub struct DepthImage {
    plane: ZlsPlane,
}

impl DepthImage {
    /// A depth buffer for a `width` x `height` render area.
    pub fn new(device: &Device, width: u32, height: u32) -> Result<DepthImage, Error> {
        Ok(DepthImage {
            plane: ZlsPlane::new(device, width, height, 4)?,
        })
    }

    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.plane.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.plane.height
    }

    /// The memory.
    pub fn buffer(&self) -> &Buffer {
        &self.plane.buffer
    }

    /// The render command's `depth.stride` word.
    pub fn layer_stride_word(&self) -> Result<u32, Error> {
        self.plane.layer_stride_word()
    }

    /// Sets every depth value (the CPU side of a clear).
    pub fn fill(&self, depth: f32) -> Result<(), Error> {
        let bytes = depth
            .to_le_bytes()
            .repeat(self.plane.buffer.size_bytes() as usize / 4);
        self.plane.buffer.write(0, &bytes)
    }

    /// The depth of pixel (x, y).
    pub fn depth_at(&self, x: u32, y: u32) -> Result<f32, Error> {
        let mut raw = [0u8; 4];
        self.plane.read(x, y, &mut raw)?;
        Ok(f32::from_le_bytes(raw))
    }
}

/// An 8-bit stencil buffer for the ZLS: GPU-tiled, as Mesa's.
#[derive(Debug)]
pub struct StencilImage {
    plane: ZlsPlane,
}

impl StencilImage {
    /// A stencil buffer for a `width` x `height` render area.
    pub fn new(device: &Device, width: u32, height: u32) -> Result<StencilImage, Error> {
        Ok(StencilImage {
            plane: ZlsPlane::new(device, width, height, 1)?,
        })
    }

    /// The memory.
    pub fn buffer(&self) -> &Buffer {
        &self.plane.buffer
    }

    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.plane.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.plane.height
    }

    /// The render command's `stencil.stride` word.
    pub fn layer_stride_word(&self) -> Result<u32, Error> {
        self.plane.layer_stride_word()
    }

    /// The stencil value of pixel (x, y).
    pub fn stencil_at(&self, x: u32, y: u32) -> Result<u8, Error> {
        let mut raw = [0u8; 1];
        self.plane.read(x, y, &mut raw)?;
        Ok(raw[0])
    }
}

/// Packs a descriptor.
pub(crate) fn pack_texture(t: &Texture) -> Result<[u8; 24], Error> {
    t.pack()
        .map_err(|e| Error::Unsupported(format!("texture descriptor: {e}")))
}

/// Packs a PBE descriptor.
pub(crate) fn pack_pbe(p: &Pbe) -> Result<[u8; 24], Error> {
    p.pack()
        .map_err(|e| Error::Unsupported(format!("PBE descriptor: {e}")))
}
