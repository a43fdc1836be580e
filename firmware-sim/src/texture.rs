//! The texture unit: `texture_load` and `texture_sample`.
//!
//! A texture instruction names a texture descriptor (24 bytes: format,
//! size, mip levels, layout, address; bound to a texture state register
//! by a USC Texture word, or *bindless*: a heap base in a uniform pair
//! plus a byte offset in a register) and a sampler (8 bytes: filters,
//! wrap modes, LOD clamps, depth comparison; bound by a USC Sampler word
//! or taken from the pass's global sampler heap). Loads read one texel at
//! integer coordinates of an explicit level; samples map normalised (or
//! pixel) coordinates through the wrap modes, pick a level from the
//! coordinate derivatives or an explicit LOD, filter (nearest or
//! bilinear, and between levels), compare for shadow samplers, and
//! swizzle. Texels are read through the MMU from linear, GPU-tiled or
//! twiddled images (`agx_hw::layout`). A compressed image's texels go
//! through its metadata first: a solid tile reads the colour at the
//! tile's start, an uncompressed one reads its body.

use agx_hw::formats::{
    BorderColour, Channel, Channels, CompareFunc, CustomBorder, Filter, ImageMode, Layout,
    MipFilter, SampleCount, Sampler, Texture, TextureDimension, TextureType, Wrap,
};
use agx_hw::layout::{
    laid_out_levels, CompressionLayout, ImageLayout, TileMode, COMPRESSION_TILE_PX,
};

use crate::bc::BlockFormat;
use crate::memory::GpuVm;
use crate::usc::float::{floor_f32, half_to_f32};
use crate::usc::formats::{self, ElementFormat};
use crate::usc::io::{
    IoError, LodArgument, TexelLoads, TextureHandle, TextureRequest, TextureSamples,
};
use agx_hw::block::BorderEncoding;

/// How a descriptor's channels and type map onto an element format and a
/// channel count (`None`: a format this model does not read or write).
pub fn channel_format(
    channels: Channels,
    data_type: TextureType,
    srgb: bool,
) -> Option<(ElementFormat, usize)> {
    use ElementFormat as E;
    let count = match channels {
        // The 16-bit packed formats are unorm only (Mesa's ail table).
        Channels::R5G6B5 | Channels::R4G4B4A4 | Channels::R5G5B5A1 | Channels::A1R5G5B5
            if data_type == TextureType::Unorm =>
        {
            return Some(match channels {
                Channels::R5G6B5 => (E::R5g6b5, 3),
                Channels::R4G4B4A4 => (E::Rgba4, 4),
                Channels::R5G5B5A1 => (E::Rgb5a1, 4),
                _ => (E::A1rgb5, 4),
            });
        }
        Channels::R10G10B10A2 if matches!(data_type, TextureType::Uint | TextureType::Sint) => {
            return Some((E::Rgb10a2Int, 4));
        }
        Channels::R8 | Channels::R16 | Channels::R32 => 1,
        Channels::R8G8 | Channels::R16G16 | Channels::R32G32 => 2,
        // Mesa's RGB32 buffer textures (its "emulated" format): Mesa reads
        // them with global loads and reaches the texture unit only out of
        // bounds, for the zero texel. What the hardware does in bounds is
        // not public; here a texel is three 32-bit channels.
        Channels::R32G32B32Emulated => 3,
        Channels::R8G8B8A8
        | Channels::R16G16B16A16
        | Channels::R32G32B32A32
        | Channels::R10G10B10A2 => 4,
        Channels::R11G11B10 | Channels::R9G9B9E5 if data_type == TextureType::Float => {
            let element = if channels == Channels::R11G11B10 {
                E::Rg11b10f
            } else {
                E::Rgb9e5
            };
            return Some((element, 3));
        }
        _ => return None,
    };
    let eight = matches!(channels, Channels::R8 | Channels::R8G8 | Channels::R8G8B8A8);
    let sixteen = matches!(
        channels,
        Channels::R16 | Channels::R16G16 | Channels::R16G16B16A16
    );
    let element = match data_type {
        TextureType::Unorm if channels == Channels::R10G10B10A2 => E::Rgb10a2,
        TextureType::Unorm if eight && srgb => E::Srgba8,
        TextureType::Unorm if eight => E::Unorm8,
        TextureType::Snorm if eight => E::Snorm8,
        TextureType::Uint | TextureType::Sint if eight => E::I8,
        TextureType::Float if sixteen => E::F16,
        TextureType::Unorm if sixteen => E::Unorm16,
        TextureType::Snorm if sixteen => E::Snorm16,
        TextureType::Uint | TextureType::Sint if sixteen => E::I16,
        _ if !eight && !sixteen && channels != Channels::R10G10B10A2 => E::I32,
        _ => return None,
    };
    Some((element, count))
}

fn invalid(what: String) -> IoError {
    IoError::Invalid(what)
}

/// A decoded texture.
struct Image {
    texture: Texture,
    layout: ImageLayout,
    element: ElementFormat,
    channels: usize,
    element_bytes: u32,
    /// Integer texels (no conversion to float).
    integer: bool,
    /// Layers of the layout: an array's layers, a 3D image's slices, a
    /// cube's faces (1 for a 2D image).
    layers: u32,
    /// Samples per pixel.
    samples: u32,
    /// A block-compressed image's format: its elements are blocks.
    block: Option<BlockFormat>,
    /// For a compressed image: its metadata layout, and the address of
    /// the first layer's metadata.
    compression: Option<(CompressionLayout, u64)>,
    /// The compression tile last looked up (level, layer and tile
    /// column and row in sample space), and its metadata word's address
    /// and mode (`None`: the tile has no metadata word).
    last_tile: std::cell::Cell<Option<(TileKey, Option<TileWord>)>>,
    /// A metadata word in no known mode was met (and logged).
    stale_logged: std::cell::Cell<bool>,
    /// The aligned lines of memory last read for texels: an image is
    /// decoded for one instruction, whose lanes' footprints mostly share
    /// lines (a quad's two rows are two lines of a linear image).
    lines: std::cell::RefCell<TexelLines>,
    /// Texels a sample read in this instruction, by level, layer and
    /// position: a SIMD-group's bilinear footprints overlap (a quad's
    /// four lanes, neighbouring quads), so most of an instruction's texel
    /// reads find one read before. Emptied with the lines.
    texels: std::cell::RefCell<SampledTexels>,
    /// For an image of one byte per channel converted to float (unorm8,
    /// snorm8, sRGB8): per channel, the register bits each byte loads
    /// as, made by `formats::load` the first time a texel is read.
    byte_channels: std::cell::OnceCell<Option<Box<ByteChannels>>>,
}

/// Per channel, the register bits of each of the 256 byte values.
type ByteChannels = [[u32; 256]; 4];

impl Image {
    /// The conversion table of an image whose channels are a byte each
    /// and load as floats, each value by `formats::load` (which reads
    /// only the channel's own byte for these formats).
    fn byte_channels(&self) -> Option<&ByteChannels> {
        self.byte_channels
            .get_or_init(|| {
                let byte_format = matches!(
                    self.element,
                    ElementFormat::Unorm8 | ElementFormat::Snorm8 | ElementFormat::Srgba8
                );
                (byte_format && !self.integer && self.block.is_none()).then(|| {
                    let mut table = Box::new([[0u32; 256]; 4]);
                    for (c, channel) in table.iter_mut().enumerate().take(self.channels) {
                        for (byte, bits) in channel.iter_mut().enumerate() {
                            *bits = formats::load(self.element, &[byte as u8], c, false);
                        }
                    }
                    table
                })
            })
            .as_deref()
    }
}

/// A compression tile: level, layer, column and row (in sample space).
type TileKey = (u32, u32, u32, u32);

/// A compression tile's metadata word: its address and its mode.
type TileWord = (u64, TileMode);

/// Bytes of the aligned lines texels are read through (inside one page,
/// so a line faults exactly where the texels in it would).
const TEXEL_LINE_BYTES: usize = 128;

/// Lines an image keeps for an instruction.
const TEXEL_LINES: usize = 4;

/// The aligned lines of memory an instruction read texels from, each
/// with its address (`u64::MAX`, no line's, for none), replaced in turn.
struct TexelLines {
    addresses: [u64; TEXEL_LINES],
    bytes: [[u8; TEXEL_LINE_BYTES]; TEXEL_LINES],
    /// The slot the next line read goes to.
    next: usize,
    /// The slot a word was last found in.
    last: usize,
}

impl TexelLines {
    fn new() -> TexelLines {
        TexelLines {
            addresses: [u64::MAX; TEXEL_LINES],
            bytes: [[0; TEXEL_LINE_BYTES]; TEXEL_LINES],
            next: 0,
            last: 0,
        }
    }

    fn empty(&mut self) {
        self.addresses = [u64::MAX; TEXEL_LINES];
    }
}

/// Texels an image keeps for an instruction.
const SAMPLED_TEXELS: usize = 64;

/// Texels read for one instruction: slot `i` holds one whose key
/// ([`SampledTexels::key`]) hashes to `i`.
struct SampledTexels {
    /// Each slot's key, `u64::MAX` for none (no key has every bit set).
    keys: [u64; SAMPLED_TEXELS],
    texels: [[u32; 4]; SAMPLED_TEXELS],
}

impl SampledTexels {
    fn new() -> SampledTexels {
        SampledTexels {
            keys: [u64::MAX; SAMPLED_TEXELS],
            texels: [[0; 4]; SAMPLED_TEXELS],
        }
    }

    fn empty(&mut self) {
        self.keys = [u64::MAX; SAMPLED_TEXELS];
    }

    /// Texel (x, y) of `level` and `layer` as a key and its slot; `None`
    /// for coordinates past 16 bits (or a level past 8), which are not
    /// kept.
    fn key(level: u32, x: u32, y: u32, layer: u32) -> Option<(u64, usize)> {
        if level > 0xFF || (x | y | layer) > 0xFFFF {
            return None;
        }
        let key =
            u64::from(x) | u64::from(y) << 16 | u64::from(layer) << 32 | u64::from(level) << 48;
        Some((key, SampledTexels::slot(x, y)))
    }

    /// The slot of texel (x, y): the low three bits of each, so that an
    /// 8x8 neighbourhood (a SIMD-group's footprints) never collides.
    #[inline(always)]
    fn slot(x: u32, y: u32) -> usize {
        ((x & 7) | (y & 7) << 3) as usize
    }
}

/// Descriptors a Texture or Sampler word (or a preshader's state store)
/// binds to state registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateBinding {
    /// The first state register.
    pub start: u32,
    /// How many.
    pub count: u32,
    /// GPU address of the descriptor array.
    pub buffer: u64,
    /// Where the control word is (for faults).
    pub word_address: u64,
}

/// The texture unit of one stage: where its descriptors come from.
#[derive(Clone)]
pub struct TextureUnit<'a> {
    /// Memory, through the MMU.
    pub vm: GpuVm<'a>,
    /// Texture state registers.
    pub textures: &'a [StateBinding],
    /// Sampler state registers.
    pub samplers: &'a [StateBinding],
    /// The pass's sampler heap (address, samplers).
    pub sampler_heap: Option<(u64, u32)>,
    /// Bytes between bound samplers: 8, or 24 with extended sampler
    /// states (a custom border after each).
    pub sampler_stride_bytes: u64,
    /// Descriptors decoded by earlier instructions on the same worker,
    /// if the stage keeps them (fragment tiles, compute threadgroups and
    /// a draw's vertex shading do).
    pub decoded: Option<&'a DecodedImages>,
}

/// Texture descriptors one worker (one host thread) decoded, each kept
/// with its 24 bytes. A texture instruction still reads its descriptor from memory
/// every time; only when the bytes are those of a kept one is the decoding
/// (the format, the layout's levels, the compression metadata's layout)
/// not done again. The few most recent are kept.
#[derive(Default)]
pub struct DecodedImages {
    kept: std::cell::RefCell<Vec<([u8; 24], std::rc::Rc<Image>)>>,
}

/// Descriptors a [`DecodedImages`] keeps.
const KEPT_IMAGES: usize = 8;

impl DecodedImages {
    /// The image the descriptor `bytes` describes: a kept one (its
    /// per-instruction caches of memory emptied, as a fresh decoding's
    /// are) or a new decoding, then kept.
    fn image(&self, bytes: &[u8; 24]) -> Result<std::rc::Rc<Image>, IoError> {
        let mut kept = self.kept.borrow_mut();
        if let Some((_, image)) = kept.iter().find(|(key, _)| key == bytes) {
            image.last_tile.set(None);
            image.texels.borrow_mut().empty();
            image.lines.borrow_mut().empty();
            return Ok(image.clone());
        }
        let image = std::rc::Rc::new(decode_image(bytes)?);
        if kept.len() == KEPT_IMAGES {
            kept.remove(0);
        }
        kept.push((*bytes, image.clone()));
        Ok(image)
    }
}

fn bound(states: &[StateBinding], index: u32, size: u64) -> Option<u64> {
    states
        .iter()
        .rev()
        .find(|b| (b.start..b.start + b.count).contains(&index))
        .map(|b| b.buffer + size * u64::from(index - b.start))
}

impl TextureUnit<'_> {
    fn read<const N: usize>(&self, address: u64) -> Result<[u8; N], IoError> {
        let mut bytes = [0u8; N];
        crate::usc::GpuMemory::read(&self.vm, address, &mut bytes, crate::usc::AccessKind::Read)?;
        Ok(bytes)
    }

    fn image(&self, handle: TextureHandle) -> Result<std::rc::Rc<Image>, IoError> {
        let address = match handle {
            TextureHandle::Index(i) => bound(self.textures, i, 24)
                .ok_or_else(|| invalid(format!("no texture bound at ts{i}")))?,
            TextureHandle::Bindless { base, offset } => base.wrapping_add(u64::from(offset)),
        };
        let bytes = self.read::<24>(address)?;
        match self.decoded {
            Some(decoded) => decoded.image(&bytes),
            None => decode_image(&bytes).map(std::rc::Rc::new),
        }
    }
}

/// The bytes a sample of the texture whose descriptor is at `address` may
/// read: per layer, the span of the levels its view names (first to last
/// level; every layer's span once there are more than
/// [`MAX_LISTED_LAYERS`]). `None` for a descriptor that cannot be read or
/// is refused.
pub(crate) fn sampled_spans(vm: &GpuVm<'_>, address: u64) -> Option<Vec<(u64, u64)>> {
    let image = open_image(vm, address).ok()?;
    let t = &image.texture;
    let levels = t.first_level..=t.last_level.max(t.first_level);
    image_spans(t.address, &image.layout, levels, image.layers, t.height)
}

/// More layers than this are taken as one span, from the first layer's
/// start to the last one's end.
pub(crate) const MAX_LISTED_LAYERS: u32 = 64;

/// The spans (first byte, byte past the last) levels `levels` of each of
/// `layers` layers of an image at `base` laid out as `layout` occupy (a
/// linear image's one level: `rows` rows). `None` past its levels.
pub(crate) fn image_spans(
    base: u64,
    layout: &ImageLayout,
    levels: std::ops::RangeInclusive<u32>,
    layers: u32,
    rows: u32,
) -> Option<Vec<(u64, u64)>> {
    let span = |layer| {
        layout
            .level_span(levels.clone(), layer, rows)
            .map(|(start, end)| (base.wrapping_add(start), base.wrapping_add(end)))
    };
    let layers = layers.max(1);
    if layers > MAX_LISTED_LAYERS {
        let (first, _) = span(0)?;
        let (_, last) = span(layers - 1)?;
        return Some(vec![(first, last)]);
    }
    (0..layers).map(span).collect()
}

/// Reads and checks the texture descriptor at `address`: the image it
/// describes.
fn open_image(vm: &GpuVm<'_>, address: u64) -> Result<Image, IoError> {
    let mut bytes = [0u8; 24];
    crate::usc::GpuMemory::read(vm, address, &mut bytes, crate::usc::AccessKind::Read)?;
    decode_image(&bytes)
}

/// The image texture descriptor `bytes` describes, checked.
fn decode_image(bytes: &[u8; 24]) -> Result<Image, IoError> {
    let texture = Texture::decode_fields(bytes);
    // A 1D texture is a row: a 2D image of height 1 (Mesa's null
    // descriptor leaves the dimension field 0, 1D). Mesa lowers 1D
    // arrays to 2D arrays, so no descriptor of its has D1Array.
    use TextureDimension as D;
    if matches!(texture.dimension, D::D1Array | D::Unknown(_)) {
        return Err(invalid(format!("{:?} textures", texture.dimension)));
    }
    let samples = match (texture.dimension, texture.samples) {
        (D::D2Multisampled | D::D2ArrayMultisampled, SampleCount::Two) => 2,
        (D::D2Multisampled | D::D2ArrayMultisampled, _) => 4,
        _ => 1,
    };
    let block = BlockFormat::of(texture.channels, texture.data_type);
    let (element, channels) = match block {
        // Block texels are decoded to floats, not through an element
        // format (the element stands in).
        Some(_) => (ElementFormat::Unorm8, 4),
        None => {
            channel_format(texture.channels, texture.data_type, texture.srgb).ok_or_else(|| {
                invalid(format!(
                    "texture format {:?} {:?}",
                    texture.channels, texture.data_type
                ))
            })?
        }
    };
    let element_bytes = block.map_or(element.element_bytes(channels), |b| b.block_bytes());
    let block_px = block.map_or((1, 1), BlockFormat::block_px);
    // Array layers, a 3D image's slices and a cube's faces are all
    // layers of the layout (Mesa's ail): a cube's descriptor counts
    // cubes, six faces each, in the order +X, -X, +Y, -Y, +Z, -Z.
    let depth = if texture.layout == Layout::Linear {
        // A linear 2D array's layer count is in the extended words.
        if texture.extended {
            texture.depth_linear
        } else {
            1
        }
    } else {
        texture.depth
    };
    let layers = match texture.dimension {
        D::D2Array | D::D2ArrayMultisampled | D::D3 => depth,
        D::Cube => 6,
        D::CubeArray => depth.saturating_mul(6),
        _ => 1,
    };
    if texture.mode != ImageMode::Normal {
        return Err(invalid(format!("{:?} images (sparse)", texture.mode)));
    }
    // A mipmapped image is laid out for its full chain, whatever
    // levels the view uses; a 3D image's chain also halves its depth
    // (ail's mipmapped_z).
    let chain_height = if texture.dimension == D::D3 {
        texture.height.max(depth)
    } else {
        texture.height
    };
    let levels = laid_out_levels(
        texture.width,
        chain_height,
        texture.unk_mipmapped,
        texture.last_level + 1,
    );
    // A pixel's samples are side by side in one element, sample 0
    // first (Mesa's ail and libagx).
    let pixel_bytes = element_bytes * samples;
    let layout = match texture.layout {
        Layout::Linear => ImageLayout::Linear {
            stride_bytes: u64::from(texture.stride),
            element_bytes: pixel_bytes,
            layer_stride_bytes: texture.layer_stride_linear,
        },
        Layout::Gpu => ImageLayout::gpu_tiled_blocks(
            (texture.width, texture.height),
            block_px,
            levels,
            pixel_bytes,
            texture.page_aligned_layers,
        )
        .ok_or_else(|| invalid(format!("{pixel_bytes}-byte tiled elements")))?,
        Layout::Twiddled => ImageLayout::twiddled_blocks(
            (texture.width, texture.height),
            block_px,
            levels,
            pixel_bytes,
        ),
        other => return Err(invalid(format!("{other:?} texture layout"))),
    };
    let compression = if texture.compressed_1 {
        if block.is_some() {
            return Err(invalid(
                "a losslessly compressed block-compressed texture".into(),
            ));
        }
        if texture.layout != Layout::Gpu || !texture.extended {
            return Err(invalid(format!(
                "a compressed {:?} texture{}",
                texture.layout,
                if texture.extended {
                    ""
                } else {
                    " without the extended words"
                }
            )));
        }
        // A multisampled image's grid covers its samples (Mesa's
        // ail_effective_width_sa / height_sa).
        let (fx, fy) = agx_hw::layout::sample_space_stretch(samples);
        let (grid_w, grid_h) = (texture.width * fx, texture.height * fy);
        let meta = CompressionLayout::new(grid_w, grid_h, levels).ok_or_else(|| {
            invalid(format!(
                "a compressed {}x{} texture (a side under one compression tile)",
                texture.width, texture.height
            ))
        })?;
        Some((meta, texture.acceleration_buffer))
    } else {
        None
    };
    Ok(Image {
        integer: matches!(texture.data_type, TextureType::Uint | TextureType::Sint),
        texture,
        layout,
        element,
        channels,
        element_bytes,
        compression,
        layers,
        samples,
        block,
        last_tile: std::cell::Cell::new(None),
        stale_logged: std::cell::Cell::new(false),
        lines: std::cell::RefCell::new(TexelLines::new()),
        texels: std::cell::RefCell::new(SampledTexels::new()),
        byte_channels: std::cell::OnceCell::new(),
    })
}

impl TextureUnit<'_> {
    /// Where sample `sample` of texel (x, y) of `level` and `layer` is
    /// stored: the texel and sample to read, for a solid compression tile
    /// the tile's first (sample 0 of its first pixel). A multisampled
    /// image's metadata covers tiles of 16x16 *samples*: its pixels
    /// stretched by their samples, 2x2 for four samples (sample s at
    /// (2x + s % 2, 2y + s / 2)) and 1x2 for two (at (x, 2y + s)), as
    /// Mesa's `ail` sizes the grid and `libagx` addresses it.
    fn stored_texel(
        &self,
        image: &Image,
        level: u32,
        (x, y, sample): (u32, u32, u32),
        layer: u32,
    ) -> Result<(u32, u32, u32), IoError> {
        let Some((meta, base)) = &image.compression else {
            return Ok((x, y, sample));
        };
        let (sx, sy) = agx_hw::layout::sample_space_position(x, y, sample, image.samples);
        // A filtered sample reads up to eight texels, a load's lanes
        // neighbouring texels: mostly of one tile, whose word is looked
        // up and read once.
        let key = (
            level,
            layer,
            sx / COMPRESSION_TILE_PX,
            sy / COMPRESSION_TILE_PX,
        );
        let found = match image.last_tile.get() {
            Some((cached, found)) if cached == key => found,
            _ => {
                let found = match meta.tile_word_offset(level, sx, sy, layer) {
                    Some(at) => {
                        let address = base.wrapping_add(at);
                        let word = u64::from_le_bytes(self.read::<8>(address)?);
                        Some((address, TileMode::decode(word, image.element_bytes)))
                    }
                    None => None,
                };
                image.last_tile.set(Some((key, found)));
                found
            }
        };
        let Some((address, mode)) = found else {
            return Ok((x, y, sample));
        };
        // A word in no known mode is read as uncompressed, as an all-zero
        // one is (stale memory: Mesa does not initialise metadata; what
        // the hardware decodes from it is not public), logged once.
        let (tx, ty) = mode.stored_pixel(sx, sy).unwrap_or_else(|| {
            // Once per image decode, and not again for the image whose
            // metadata was last logged (a texture read again and again
            // would flood the log: 100,000 lines a test were seen).
            static LAST_LOGGED_BASE: std::sync::atomic::AtomicU64 =
                std::sync::atomic::AtomicU64::new(0);
            let repeated = LAST_LOGGED_BASE.swap(*base, std::sync::atomic::Ordering::Relaxed)
                == *base;
            if !image.stale_logged.replace(true) && !repeated {
                tracing::warn!(
                    unit = "Usc",
                    address = format_args!("{address:#x}"),
                    image = format_args!(
                        "{}x{}, {} layers, {} samples, metadata at {base:#x}",
                        image.texture.width, image.texture.height, image.layers, image.samples
                    ),
                    "compression metadata of texel ({x}, {y}) of level {level} layer {layer} in no known mode ({mode:?}): read as uncompressed"
                );
            }
            (sx, sy)
        });
        Ok(match image.samples {
            2 | 4 => agx_hw::layout::sample_space_pixel(tx, ty, image.samples),
            _ => (tx, ty, sample),
        })
    }

    /// Sampler `index`, and its border colour: a fixed one, or for a
    /// `Custom` border in the sampler heap the 16-byte `CustomBorder` that
    /// follows it (four words, each a channel in the sampled format's
    /// encoding, as Mesa's `agx_pack_border` writes them). `None` for a
    /// custom border of a bound sampler (not modelled).
    fn sampler(&self, index: u32) -> Result<(Sampler, Option<Border>), IoError> {
        let bound_here = bound(self.samplers, index, self.sampler_stride_bytes).is_some();
        let (sampler, address) = self.sampler_at(index)?;
        let custom = |address: u64| -> Result<Border, IoError> {
            let b = CustomBorder::decode_fields(&self.read::<16>(address)?);
            Ok(Border::Custom([
                b.channel_0,
                b.channel_1,
                b.channel_2,
                b.channel_3,
            ]))
        };
        let colour = match sampler.border_colour {
            // A bound sampler's border follows it when the stage declares
            // extended sampler states; with compact ones there is none.
            BorderColour::Custom if bound_here && self.sampler_stride_bytes == 24 => {
                Some(custom(address + 8)?)
            }
            BorderColour::Custom if bound_here => None,
            BorderColour::Custom => {
                // The colour takes the two slots after the sampler, which
                // must be inside the heap the command declared.
                let in_heap = self
                    .sampler_heap
                    .is_some_and(|(_, count)| u64::from(index) + 2 < u64::from(count));
                if !in_heap {
                    return Err(invalid(format!(
                        "custom border of sampler {index} runs past the sampler heap"
                    )));
                }
                Some(custom(address + 8)?)
            }
            fixed => Some(Border::Fixed(fixed)),
        };
        Ok((sampler, colour))
    }

    fn sampler_at(&self, index: u32) -> Result<(Sampler, u64), IoError> {
        let address = match bound(self.samplers, index, self.sampler_stride_bytes) {
            Some(address) => address,
            None => match self.sampler_heap {
                Some((heap, count)) if index < count => heap + 8 * u64::from(index),
                _ => return Err(invalid(format!("no sampler {index}"))),
            },
        };
        Ok((Sampler::decode_fields(&self.read::<8>(address)?), address))
    }

    /// The four components of texel (x, y) of `level` and `layer`, as
    /// register bits (f32, or integers for integer formats), before the
    /// swizzle, into `out` (in place, as [`TextureUnit::element_texel`]).
    fn texel(
        &self,
        image: &Image,
        level: u32,
        (x, y, layer): (u32, u32, u32),
        out: &mut [u32; 4],
    ) -> Result<(), IoError> {
        let Some((key, slot)) = SampledTexels::key(level, x, y, layer) else {
            return self.sample_texel(image, level, (x, y, layer), 0, out);
        };
        {
            let kept = image.texels.borrow();
            if kept.keys[slot] == key {
                *out = kept.texels[slot];
                return Ok(());
            }
        }
        // Kept only once read: a texel that faults is read (and faults)
        // again.
        self.sample_texel(image, level, (x, y, layer), 0, out)?;
        let mut texels = image.texels.borrow_mut();
        texels.keys[slot] = key;
        texels.texels[slot] = *out;
        Ok(())
    }

    /// [`TextureUnit::texel`] of each of `xy` (inside the level) in turn,
    /// for an image of pixels (not block compressed, not compressed): the
    /// image's kept texels and lines borrowed once for the four, a
    /// four-byte texel of byte channels read as one word.
    fn pixel_texels(
        &self,
        image: &Image,
        level: u32,
        layer: u32,
        xy: [(i64, i64); 4],
        out: &mut [[u32; 4]; 4],
    ) -> Result<(), IoError> {
        let mut kept = image.texels.borrow_mut();
        let mut lines = image.lines.borrow_mut();
        let word_table = image.byte_channels().filter(|_| image.element_bytes == 4);
        for (texel, (x, y)) in out.iter_mut().zip(xy) {
            let (x, y) = (x as u32, y as u32);
            let key = SampledTexels::key(level, x, y, layer);
            if let Some((key, slot)) = key {
                if kept.keys[slot] == key {
                    *texel = kept.texels[slot];
                    continue;
                }
            }
            // As `sample_texel` and `element_texel` read sample 0.
            let offset = image
                .layout
                .offset(level, x, y, layer)
                .ok_or_else(|| invalid(format!("texel ({x}, {y}) of level {level}")))?;
            let address = image.texture.address.wrapping_add(offset);
            self.pixel_element(image, &mut lines, word_table, address, texel)?;
            // Kept only once read: a texel that faults is read (and
            // faults) again.
            if let Some((key, slot)) = key {
                kept.keys[slot] = key;
                kept.texels[slot] = *texel;
            }
        }
        Ok(())
    }

    /// Sample `sample` of texel (x, y) of `level` and `layer`, into
    /// `out`.
    fn sample_texel(
        &self,
        image: &Image,
        level: u32,
        (x, y, layer): (u32, u32, u32),
        sample: u32,
        out: &mut [u32; 4],
    ) -> Result<(), IoError> {
        if let Some(format) = image.block {
            *out = self.block_texel(image, format, level, (x, y, layer))?;
            return Ok(());
        }
        let (x, y, sample) = if image.compression.is_none() {
            (x, y, sample)
        } else {
            self.stored_texel(image, level, (x, y, sample), layer)?
        };
        let offset = image.layout.offset(level, x, y, layer);
        self.element_texel(image, offset, (x, y, level), sample, out)
    }

    /// Sample `sample` of the texel at `offset` (of texel (x, y) of
    /// `level`, `None` past the image) of an image that is not block
    /// compressed, into `out` (written in place: a texel returned inside
    /// a `Result` went through memory in pieces the caller read back
    /// whole, a stall per texel).
    fn element_texel(
        &self,
        image: &Image,
        offset: Option<u64>,
        (x, y, level): (u32, u32, u32),
        sample: u32,
        out: &mut [u32; 4],
    ) -> Result<(), IoError> {
        let offset = offset.ok_or_else(|| invalid(format!("texel ({x}, {y}) of level {level}")))?
            + u64::from(sample) * u64::from(image.element_bytes);
        // At most four 32-bit channels.
        let mut element = [0u8; 16];
        let bytes = element
            .get_mut(..image.element_bytes as usize)
            .ok_or_else(|| invalid(format!("{}-byte texels", image.element_bytes)))?;
        self.read_texel_bytes(image, image.texture.address.wrapping_add(offset), bytes)?;
        element_values(image, bytes, out);
        Ok(())
    }

    /// Reads the bytes of `image` at `address` through the image's lines
    /// (the aligned [`TEXEL_LINE_BYTES`] holding them, read once for the
    /// texels after). Bytes crossing a line, or in a line that faults,
    /// are read on their own, so that a fault names their address.
    fn read_texel_bytes(&self, image: &Image, address: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.read_line_bytes(&mut image.lines.borrow_mut(), address, buf)
    }

    /// The little-endian word at `address` (4-byte aligned), as
    /// [`TextureUnit::read_line_bytes`] of its four bytes.
    #[inline(always)]
    fn read_line_word(&self, lines: &mut TexelLines, address: u64) -> Result<u32, IoError> {
        let line = address & !(TEXEL_LINE_BYTES as u64 - 1);
        let at = (address - line) as usize;
        let mut word = [0; 4];
        match (at + 4 <= TEXEL_LINE_BYTES)
            .then(|| self.line_slot(lines, line))
            .flatten()
        {
            Some(slot) => word.copy_from_slice(&lines.bytes[slot][at..at + 4]),
            // Across lines, or in one that faults: as `read_line_bytes`.
            None => self.read_line_bytes(lines, address, &mut word)?,
        }
        Ok(u32::from_le_bytes(word))
    }

    /// [`TextureUnit::read_texel_bytes`] through `lines` (an image's,
    /// borrowed by the caller).
    fn read_line_bytes(
        &self,
        lines: &mut TexelLines,
        address: u64,
        buf: &mut [u8],
    ) -> Result<(), IoError> {
        let line = address & !(TEXEL_LINE_BYTES as u64 - 1);
        let at = (address - line) as usize;
        if at + buf.len() <= TEXEL_LINE_BYTES {
            if let Some(slot) = self.line_slot(lines, line) {
                buf.copy_from_slice(&lines.bytes[slot][at..at + buf.len()]);
                return Ok(());
            }
        }
        crate::usc::GpuMemory::read(&self.vm, address, buf, crate::usc::AccessKind::Read)?;
        Ok(())
    }

    /// The slot of `lines` holding the aligned line at `line`: the one a
    /// read last found, another, or the next one, read now; `None` where
    /// the line cannot be read.
    #[inline(always)]
    fn line_slot(&self, lines: &mut TexelLines, line: u64) -> Option<usize> {
        if lines.addresses[lines.last] == line {
            return Some(lines.last);
        }
        let slot = match lines.addresses.iter().position(|&l| l == line) {
            Some(slot) => slot,
            None => {
                let slot = lines.next;
                lines.addresses[slot] = u64::MAX;
                crate::usc::GpuMemory::read(
                    &self.vm,
                    line,
                    &mut lines.bytes[slot],
                    crate::usc::AccessKind::Read,
                )
                .ok()?;
                lines.addresses[slot] = line;
                lines.next = (slot + 1) % TEXEL_LINES;
                slot
            }
        };
        lines.last = slot;
        Some(slot)
    }

    /// The four components of the element at `address` of an image of
    /// pixels (not block compressed), as [`element_values`] of its bytes
    /// read through `lines`; `word_table` is the image's byte table when
    /// its elements are four bytes (one word read).
    #[inline(always)]
    fn pixel_element(
        &self,
        image: &Image,
        lines: &mut TexelLines,
        word_table: Option<&ByteChannels>,
        address: u64,
        out: &mut [u32; 4],
    ) -> Result<(), IoError> {
        if let Some(table) = word_table {
            let word = self.read_line_word(lines, address)?;
            for ((value, channel), byte) in out.iter_mut().zip(table).zip(word.to_le_bytes()) {
                *value = channel[usize::from(byte)];
            }
            return Ok(());
        }
        // At most four 32-bit channels.
        let mut element = [0u8; 16];
        let bytes = element
            .get_mut(..image.element_bytes as usize)
            .ok_or_else(|| invalid(format!("{}-byte texels", image.element_bytes)))?;
        self.read_line_bytes(lines, address, bytes)?;
        element_values(image, bytes, out);
        Ok(())
    }

    /// Texel (x, y) of a block-compressed image: its block read and
    /// decoded, sRGB colour channels decoded when the descriptor says.
    fn block_texel(
        &self,
        image: &Image,
        format: BlockFormat,
        level: u32,
        (x, y, layer): (u32, u32, u32),
    ) -> Result<[u32; 4], IoError> {
        let (bw, bh) = format.block_px();
        let offset = image
            .layout
            .offset(level, x / bw, y / bh, layer)
            .ok_or_else(|| invalid(format!("texel ({x}, {y}) of level {level}")))?;
        let mut block = [0u8; 16];
        let bytes = &mut block[..format.block_bytes() as usize];
        self.read_texel_bytes(image, image.texture.address.wrapping_add(offset), bytes)?;
        let mut rgba = crate::bc::decode(format, bytes, x % bw, y % bh, image.texture.srgb);
        if image.texture.srgb {
            for c in &mut rgba[..3] {
                *c = formats::srgb_to_linear(*c);
            }
        }
        Ok(rgba.map(f32::to_bits))
    }

    /// Serves a texture instruction for every lane with a request, in
    /// lane order, so the first failing lane's error is the instruction's.
    /// A descriptor (texture or sampler) is read and decoded again only
    /// when a lane names another than the lane before it: once per
    /// instruction when all name the same, as they do but for bindless
    /// handles that differ per lane.
    pub fn serve(
        &self,
        requests: &[Option<TextureRequest>; crate::usc::LANES],
        texels: &mut [[u32; 4]; crate::usc::LANES],
    ) -> Result<(), IoError> {
        let mut image: Option<(TextureHandle, std::rc::Rc<Image>)> = None;
        let mut sampler: Option<(u32, SamplerState)> = None;
        for (request, out) in requests.iter().zip(texels.iter_mut()) {
            let Some(request) = request else { continue };
            let image = match &image {
                Some((handle, decoded)) if *handle == request.texture => decoded,
                _ => {
                    &image
                        .insert((request.texture, self.image(request.texture)?))
                        .1
                }
            };
            // Loads have no sampler (a gather by a load is refused before
            // one is read).
            let sampled = !request.load;
            let sampler = if !sampled {
                None
            } else {
                match &sampler {
                    Some((index, state)) if *index == request.sampler => Some(state),
                    _ => Some(
                        &sampler
                            .insert((request.sampler, self.sampler(request.sampler)?))
                            .1,
                    ),
                }
            };
            if request.load && !request.query_lod && request.gather.is_none() {
                self.load(image, request, out)?;
            } else {
                *out = self.request(image, sampler, request)?;
            }
        }
        Ok(())
    }

    /// Serves the texel loads of one instruction ([`TexelLoads`]): each
    /// lane's as `load` of its request, in lane order, the
    /// descriptor read once; for an image of pixels (not block
    /// compressed, not compressed) with the swizzle worked out once and
    /// the image's lines borrowed once.
    pub fn serve_loads(
        &self,
        loads: &TexelLoads<'_>,
        texels: &mut [[u32; 4]; crate::usc::LANES],
    ) -> Result<(), IoError> {
        if loads.lanes == 0 {
            return Ok(());
        }
        let image = self.image(loads.texture)?;
        let image = &*image;
        let lanes = (0..crate::usc::LANES).filter(|lane| loads.lanes & (1 << lane) != 0);
        if image.block.is_some() || image.compression.is_some() {
            for lane in lanes {
                self.load(image, &loads.request(lane), &mut texels[lane])?;
            }
            return Ok(());
        }
        let swizzle = swizzle_table(image);
        let to_half = loads.half && !image.integer;
        // The identity swizzle into 32-bit registers: a texel as it is.
        let as_stored = !to_half && swizzle == [(0, 0), (1, 0), (2, 0), (3, 0)];
        let element_bytes = u64::from(image.element_bytes);
        let word_table = image.byte_channels().filter(|_| element_bytes == 4);
        let mut lines = image.lines.borrow_mut();
        for lane in lanes {
            let mut raw = [0; 5];
            match load_target(
                image,
                loads.coords[lane],
                loads.levels[lane],
                loads.offsets[lane],
            ) {
                LoadTarget::PastSamples => {
                    texels[lane] = [0; 4];
                    continue;
                }
                LoadTarget::Outside => {}
                LoadTarget::Texel {
                    level,
                    x,
                    y,
                    layer,
                    sample,
                } => {
                    if let Some(offset) = image.layout.offset(level, x, y, layer) {
                        let address = image
                            .texture
                            .address
                            .wrapping_add(offset + u64::from(sample) * element_bytes);
                        let mut values = [0; 4];
                        self.pixel_element(image, &mut lines, word_table, address, &mut values)?;
                        if as_stored {
                            texels[lane] = values;
                            continue;
                        }
                        raw[..4].copy_from_slice(&values);
                    }
                }
            }
            texels[lane] = swizzled_registers(&swizzle, &raw, to_half);
        }
        Ok(())
    }

    /// Serves the samples of one instruction ([`TextureSamples`]): each
    /// lane's as `request` of its request, in lane order, the descriptor
    /// and the sampler read once. Where every lane reads one level through
    /// the bilinear filter (`bilinear_level`), a lane whose 2x2 footprint
    /// lies inside the image after the wrap modes is filtered here, with
    /// the swizzle worked out once, the texels read kept in a table of the
    /// instruction's own and the image's lines borrowed once.
    pub fn serve_samples(
        &self,
        samples: &TextureSamples<'_>,
        texels: &mut [[u32; 4]; crate::usc::LANES],
    ) -> Result<(), IoError> {
        if samples.lanes == 0 {
            return Ok(());
        }
        let image = self.image(samples.texture)?;
        let image = &*image;
        let state = self.sampler(samples.sampler)?;
        let sampler = &state.0;
        let lanes = (0..crate::usc::LANES).filter(|lane| samples.lanes & (1 << lane) != 0);
        let Some(level) = bilinear_level(image, sampler) else {
            for lane in lanes {
                texels[lane] = self.request(image, Some(&state), &samples.request(lane))?;
            }
            return Ok(());
        };
        let t = &image.texture;
        let width = i64::from((t.width >> level).max(1));
        let height = i64::from((t.height >> level).max(1));
        let swizzle = swizzle_table(image);
        let word_table = image.byte_channels().filter(|_| image.element_bytes == 4);
        // The texels this instruction read, of the one level and layer,
        // each in the slot of its position's low three bits with its key
        // `x | y << 16` (no key of a position inside the level has the
        // top bit set, which marks an empty slot).
        let mut keys = [u32::MAX; SAMPLED_TEXELS];
        let mut kept = [[0u32; 4]; SAMPLED_TEXELS];
        let keyed = width <= 1 << 15 && height <= 1 << 15;
        // The image's lines, borrowed until a lane on the border samples
        // as any sample does (which borrows them itself).
        let mut borrowed = None;
        for lane in lanes {
            let coords = samples.coords[lane];
            let (mut s, mut u) = (f32::from_bits(coords[0]), f32::from_bits(coords[1]));
            if sampler.pixel_coordinates {
                s /= t.width as f32;
                u /= t.height as f32;
            }
            let at = Footprint {
                level,
                s,
                t: u,
                layer: 0,
                r: None,
                offset: samples.offsets[lane],
            };
            // As `footprint` and `filter_slice` have it.
            let (u, v) = at.texel_space(image, sampler);
            let (u, v) = (u - 0.5, v - 0.5);
            let (floor_u, floor_v) = (floor_f32(u), floor_f32(v));
            let (x0, y0) = (floor_u as i64, floor_v as i64);
            let (x1, y1) = (x0.saturating_add(1), y0.saturating_add(1));
            let (true, Some(x0), Some(x1), Some(y0), Some(y1)) = (
                keyed,
                wrap(sampler.wrap_s, x0, width),
                wrap(sampler.wrap_s, x1, width),
                wrap(sampler.wrap_t, y0, height),
                wrap(sampler.wrap_t, y1, height),
            ) else {
                borrowed = None;
                texels[lane] = self.request(image, Some(&state), &samples.request(lane))?;
                continue;
            };
            let lines = borrowed.get_or_insert_with(|| image.lines.borrow_mut());
            let mut quad = [[0u32; 4]; 4];
            for (texel, (x, y)) in quad
                .iter_mut()
                .zip([(x0, y0), (x1, y0), (x0, y1), (x1, y1)])
            {
                let (x, y) = (x as u32, y as u32);
                let (key, slot) = (x | y << 16, SampledTexels::slot(x, y));
                if keys[slot] == key {
                    *texel = kept[slot];
                    continue;
                }
                // As `pixel_texels` reads it.
                let offset = image
                    .layout
                    .offset(level, x, y, 0)
                    .ok_or_else(|| invalid(format!("texel ({x}, {y}) of level {level}")))?;
                let address = t.address.wrapping_add(offset);
                self.pixel_element(image, lines, word_table, address, texel)?;
                keys[slot] = key;
                kept[slot] = *texel;
            }
            let (fx, fy) = (u - floor_u, v - floor_v);
            let [t00, t10, t01, t11] = &quad;
            let mut raw = [0; 5];
            for c in 0..4 {
                let channel = |texel: &[u32; 4]| f32::from_bits(texel[c]);
                let top = channel(t00) + (channel(t10) - channel(t00)) * fx;
                let bottom = channel(t01) + (channel(t11) - channel(t01)) * fx;
                raw[c] = (top + (bottom - top) * fy).to_bits();
            }
            texels[lane] = swizzled_registers(&swizzle, &raw, samples.half);
        }
        Ok(())
    }

    /// Serves one lane's request with its decoded image and sampler (a
    /// plain load is [`TextureUnit::load`]).
    fn request(
        &self,
        image: &Image,
        sampler: Option<&SamplerState>,
        request: &TextureRequest,
    ) -> Result<[u32; 4], IoError> {
        use TextureDimension as D;
        let t = &image.texture;
        let mut request = *request;
        // The registers after x and y (Mesa's agx_nir_lower_texture): an
        // array's layer as an integer; a multisampled image's sample
        // index, below the layer's 16 bits for an array; a 3D image's z;
        // a cube's direction and a cube array's cube index.
        let mut sample = 0;
        let layer = match t.dimension {
            D::D1 => {
                // Only x is a coordinate: read the row's centre.
                request.coords[1] = 0.5f32.to_bits();
                0
            }
            D::D2Array => request.coords[2],
            D::D2Multisampled => {
                sample = request.coords[2];
                0
            }
            D::D2ArrayMultisampled => {
                sample = request.coords[2] & 0xFFFF;
                request.coords[2] >> 16
            }
            D::Cube | D::CubeArray => {
                let cube = if t.dimension == D::CubeArray {
                    request.coords[3]
                } else {
                    0
                };
                let face = cube_face(&mut request);
                cube.saturating_mul(6).saturating_add(face)
            }
            _ => 0,
        };
        if sample >= image.samples {
            // Robust: a sample past the image's count reads zero, as a
            // texel past its edge does.
            return Ok([0; 4]);
        }
        let request = &request;
        let swizzle = |raw: [u32; 4]| swizzled(image, raw);
        if request.query_lod {
            let Some(&(sampler, _)) = sampler else {
                return Err(invalid("a LOD query without a sampler".into()));
            };
            let values = query_lod(t, &sampler, request).map(f32::to_bits);
            return Ok(if request.half {
                values.map(|bits| u32::from(crate::usc::float::f32_to_half(f32::from_bits(bits))))
            } else {
                values
            });
        }
        let swizzled = if let Some(component) = request.gather {
            if request.load {
                return Err(invalid("a gather by texture_load".into()));
            }
            let Some(&(sampler, border)) = sampler else {
                return Err(invalid("a gather without a sampler".into()));
            };
            let layer = layer.min(image.layers.saturating_sub(1));
            let texels = self.gather(image, &sampler, border, request, layer)?;
            texels.map(|texel| swizzle(texel)[usize::from(component & 3)])
        } else {
            swizzle(self.filtered(image, sampler, request, layer)?)
        };
        Ok(register_bits(image, swizzled, request.half))
    }

    /// A texel load (`texture_load`): the texel at the request's integer
    /// coordinates of its level, swizzled; zero (then swizzled) past the
    /// image's sides, levels or layers (robust access), and zero for a
    /// sample past the image's count. The texel's offset is worked out
    /// once, for the bounds and the read.
    fn load(
        &self,
        image: &Image,
        request: &TextureRequest,
        out: &mut [u32; 4],
    ) -> Result<(), IoError> {
        let level = match request.lod {
            LodArgument::Explicit(l) => l as u32,
            _ => 0,
        };
        let mut raw = [0; 4];
        match load_target(image, request.coords, level, request.offset_texels) {
            LoadTarget::PastSamples => {
                *out = [0; 4];
                return Ok(());
            }
            LoadTarget::Outside => {}
            LoadTarget::Texel {
                level,
                x,
                y,
                layer,
                sample,
            } => {
                if let Some(format) = image.block {
                    let (bw, bh) = format.block_px();
                    if image.layout.offset(level, x / bw, y / bh, layer).is_some() {
                        raw = self.block_texel(image, format, level, (x, y, layer))?;
                    }
                } else if let Some(offset) = image.layout.offset(level, x, y, layer) {
                    // (An uncompressed image's texel is where it is: not
                    // asked, since the tuple's round trip through memory
                    // stalls a load.)
                    let (sx, sy, sample) = if image.compression.is_none() {
                        (x, y, sample)
                    } else {
                        self.stored_texel(image, level, (x, y, sample), layer)?
                    };
                    // A solid compression tile's texels are its first's.
                    let offset = if (sx, sy) == (x, y) {
                        Some(offset)
                    } else {
                        image.layout.offset(level, sx, sy, layer)
                    };
                    self.element_texel(image, offset, (sx, sy, level), sample, &mut raw)?;
                }
            }
        }
        swizzle_into(image, &raw, request.half, out);
        Ok(())
    }

    /// A sample's filtered value, before the swizzle.
    fn filtered(
        &self,
        image: &Image,
        sampler: Option<&SamplerState>,
        request: &TextureRequest,
        layer: u32,
    ) -> Result<[u32; 4], IoError> {
        let Some(&(mut sampler, border)) = sampler else {
            return Err(invalid("a sample without a sampler".into()));
        };
        if image.integer {
            // Integer texels are not filtered: the nearest texel of
            // the nearest level, returned as the integers it holds
            // (GL and Vulkan make a linear filter of an integer image
            // incomplete or invalid, so no API reaches the hardware
            // with one; what it would do is not public).
            sampler.magnify = Filter::Nearest;
            sampler.minify = Filter::Nearest;
            if sampler.mip_filter == MipFilter::Linear {
                sampler.mip_filter = MipFilter::Nearest;
            }
            sampler.compare_enable = false;
        }
        // Sampling clamps the layer (as Vulkan and GL specify).
        let layer = layer.min(image.layers.saturating_sub(1));
        self.sample(image, &sampler, border, request, layer)
    }

    /// The four texels of a gather: the 2x2 footprint of bilinear
    /// filtering at the base level, whatever the sampler's filters and the
    /// LOD, each compared with the reference when the sampler compares.
    fn gather(
        &self,
        image: &Image,
        sampler: &Sampler,
        border: Option<Border>,
        request: &TextureRequest,
        layer: u32,
    ) -> Result<Quad, IoError> {
        let t = &image.texture;
        let (s, u) = self.normalised(image, sampler, request);
        let reference = sampler
            .compare_enable
            .then(|| shadow_reference(image, request));
        let at = Footprint {
            level: t.first_level,
            s,
            t: u,
            layer,
            r: None,
            offset: request.offset_texels,
        };
        let ([t00, t10, t01, t11], _) = self.footprint(image, sampler, border, &at, reference)?;
        Ok([t01, t11, t10, t00])
    }

    /// A sample's coordinates, normalised.
    fn normalised(&self, image: &Image, sampler: &Sampler, request: &TextureRequest) -> (f32, f32) {
        let t = &image.texture;
        let mut s = f32::from_bits(request.coords[0]);
        let mut u = f32::from_bits(request.coords[1]);
        if sampler.pixel_coordinates {
            s /= t.width as f32;
            u /= t.height as f32;
        }
        (s, u)
    }

    fn sample(
        &self,
        image: &Image,
        sampler: &Sampler,
        border: Option<Border>,
        request: &TextureRequest,
        layer: u32,
    ) -> Result<[u32; 4], IoError> {
        let t = &image.texture;
        let three_d = t.dimension == TextureDimension::D3;
        let (s, u) = self.normalised(image, sampler, request);
        // A sampler whose greatest LOD is at most 0 clamps every λ to at
        // most 0, which magnifies from the first level whatever its
        // value: λ (two logarithms a lane) is not worked out.
        let max_lod = sampler.max_lod.to_f32();
        let lod = if max_lod <= 0.0 {
            max_lod
        } else {
            level_of_detail(t, sampler, request).1
        };
        let r = three_d.then(|| {
            let r = f32::from_bits(request.coords[2]);
            if sampler.pixel_coordinates {
                r / t.depth as f32
            } else {
                r
            }
        });
        let max_level = t.last_level.saturating_sub(t.first_level) as f32;
        let filter = if lod <= 0.0 {
            sampler.magnify
        } else {
            sampler.minify
        };
        let reference = sampler
            .compare_enable
            .then(|| shadow_reference(image, request));
        let at_level = |level: f32| -> Result<[f32; 4], IoError> {
            let level = level.clamp(0.0, max_level) as u32 + t.first_level;
            let at = Footprint {
                level,
                s,
                t: u,
                layer,
                r,
                offset: request.offset_texels,
            };
            self.filter_level(image, sampler, border, filter, &at, reference)
        };
        let texel = match sampler.mip_filter {
            MipFilter::Linear if lod > 0.0 && max_level > 0.0 => {
                let lod = lod.min(max_level);
                let (lo, frac) = (lod.floor(), lod - lod.floor());
                let a = at_level(lo)?;
                if frac == 0.0 {
                    a
                } else {
                    let b = at_level(lo + 1.0)?;
                    std::array::from_fn(|c| a[c] + (b[c] - a[c]) * frac)
                }
            }
            MipFilter::Nearest if lod > 0.0 => at_level((lod + 0.5).floor())?,
            _ => at_level(0.0)?,
        };
        Ok(texel.map(f32::to_bits))
    }

    /// Reads texel (x, y) of a level through the sampler's wrap modes
    /// (the border colour outside a border-clamped image), compared with
    /// `reference` when there is one: [v, v, v, 1] with v 1 or 0.
    fn wrapped_texel(
        &self,
        image: &Image,
        sampler: &Sampler,
        border: Option<Border>,
        at: &Footprint,
        (x, y): (i64, i64),
        reference: Option<f32>,
    ) -> Result<[u32; 4], IoError> {
        let width = (image.texture.width >> at.level).max(1) as i64;
        let height = (image.texture.height >> at.level).max(1) as i64;
        // Seamless cube filtering: a texel past a face's edge is the
        // neighbouring face's texel there.
        let cube = matches!(
            image.texture.dimension,
            TextureDimension::Cube | TextureDimension::CubeArray
        );
        let outside = !(0..width).contains(&x) || !(0..height).contains(&y);
        let (x, y, layer) = if cube && outside && !sampler.seamful_cube_maps && width == height {
            let (face, x, y) = across_cube_edge(at.layer % 6, (x, y), width);
            (x, y, at.layer - at.layer % 6 + face)
        } else {
            (x, y, at.layer)
        };
        let (Some(x), Some(y)) = (
            wrap(sampler.wrap_s, x, width),
            wrap(sampler.wrap_t, y, height),
        ) else {
            let colour = border.ok_or_else(|| {
                invalid(
                    "custom border colours of samplers bound with compact sampler states".into(),
                )
            })?;
            return Ok(colour.texel(image));
        };
        let mut raw = [0; 4];
        self.texel(image, at.level, (x as u32, y as u32, layer), &mut raw)?;
        Ok(match reference {
            Some(r) => compared(sampler, r, raw),
            None => raw,
        })
    }

    /// The 2x2 texels bilinear filtering reads at `at`, [t00, t10, t01,
    /// t11] (x then y), and the weights of x1 and y1.
    fn footprint(
        &self,
        image: &Image,
        sampler: &Sampler,
        border: Option<Border>,
        at: &Footprint,
        reference: Option<f32>,
    ) -> Result<(Quad, (f32, f32)), IoError> {
        let (u, v) = at.texel_space(image, sampler);
        let (u, v) = (u - 0.5, v - 0.5);
        // Coordinates from registers may be huge or infinite: the casts
        // saturate, and so must the neighbours.
        let (floor_u, floor_v) = (floor_f32(u), floor_f32(v));
        let (x0, y0) = (floor_u as i64, floor_v as i64);
        let (x1, y1) = (x0.saturating_add(1), y0.saturating_add(1));
        let mut texels = [[0u32; 4]; 4];
        let cube = matches!(
            image.texture.dimension,
            TextureDimension::Cube | TextureDimension::CubeArray
        );
        if !cube {
            // `wrapped_texel` for each texel, each column and row wrapped
            // once: where all four are inside the image, no border.
            let width = (image.texture.width >> at.level).max(1) as i64;
            let height = (image.texture.height >> at.level).max(1) as i64;
            if let ([Some(x0), Some(x1)], [Some(y0), Some(y1)]) = (
                [x0, x1].map(|x| wrap(sampler.wrap_s, x, width)),
                [y0, y1].map(|y| wrap(sampler.wrap_t, y, height)),
            ) {
                let xy = [(x0, y0), (x1, y0), (x0, y1), (x1, y1)];
                if reference.is_none() && image.block.is_none() && image.compression.is_none() {
                    self.pixel_texels(image, at.level, at.layer, xy, &mut texels)?;
                    return Ok((texels, (u - floor_u, v - floor_v)));
                }
                for (texel, (x, y)) in texels.iter_mut().zip(xy) {
                    self.texel(image, at.level, (x as u32, y as u32, at.layer), texel)?;
                    if let Some(r) = reference {
                        *texel = compared(sampler, r, *texel);
                    }
                }
                return Ok((texels, (u - floor_u, v - floor_v)));
            }
        }
        for (texel, xy) in texels
            .iter_mut()
            .zip([(x0, y0), (x1, y0), (x0, y1), (x1, y1)])
        {
            *texel = self.wrapped_texel(image, sampler, border, at, xy, reference)?;
        }
        Ok((texels, (u - floor_u, v - floor_v)))
    }

    fn filter_level(
        &self,
        image: &Image,
        sampler: &Sampler,
        border: Option<Border>,
        filter: Filter,
        at: &Footprint,
        reference: Option<f32>,
    ) -> Result<[f32; 4], IoError> {
        let Some(r) = at.r else {
            return self.filter_slice(image, sampler, border, filter, at, reference);
        };
        // A 3D image: the slices of the level (each a layer) around z,
        // through the r wrap mode, filtered as 2D and then between them.
        let depth = i64::from((image.texture.depth >> at.level).max(1));
        let z = gl_clamp(
            sampler.wrap_r,
            r * depth as f32 + at.offset[2] as f32,
            depth as f32,
        );
        let slice = |z: i64| -> Result<[f32; 4], IoError> {
            match wrap(sampler.wrap_r, z, depth) {
                Some(z) => {
                    let at = Footprint {
                        layer: z as u32,
                        r: None,
                        offset: at.offset,
                        ..*at
                    };
                    self.filter_slice(image, sampler, border, filter, &at, reference)
                }
                None => {
                    let colour = border.ok_or_else(|| {
                        invalid(
                            "custom border colours of samplers bound with compact sampler states"
                                .into(),
                        )
                    })?;
                    Ok(colour.texel(image).map(f32::from_bits))
                }
            }
        };
        match filter {
            Filter::Linear => {
                let z = z - 0.5;
                let z0 = z.floor() as i64;
                let fz = z - z.floor();
                let (a, b) = (slice(z0)?, slice(z0.saturating_add(1))?);
                Ok(std::array::from_fn(|c| a[c] + (b[c] - a[c]) * fz))
            }
            _ => slice(nearest_index(sampler.wrap_r, z.floor() as i64, depth)),
        }
    }

    /// Filters one layer (or one slice of a 3D image) of a level.
    fn filter_slice(
        &self,
        image: &Image,
        sampler: &Sampler,
        border: Option<Border>,
        filter: Filter,
        at: &Footprint,
        reference: Option<f32>,
    ) -> Result<[f32; 4], IoError> {
        match filter {
            Filter::Linear => {
                let (texels, (fx, fy)) = self.footprint(image, sampler, border, at, reference)?;
                let [t00, t10, t01, t11] = texels.map(|texel| texel.map(f32::from_bits));
                Ok(std::array::from_fn(|c| {
                    let top = t00[c] + (t10[c] - t00[c]) * fx;
                    let bottom = t01[c] + (t11[c] - t01[c]) * fx;
                    top + (bottom - top) * fy
                }))
            }
            Filter::Nearest => {
                let (u, v) = at.texel_space(image, sampler);
                let (width, height) = (
                    i64::from((image.texture.width >> at.level).max(1)),
                    i64::from((image.texture.height >> at.level).max(1)),
                );
                // A cube face's coordinates lie in [0, 1]: one of exactly
                // 1 stays on the face's last texel (only a linear
                // footprint reaches across to the next face).
                let cube = matches!(
                    image.texture.dimension,
                    TextureDimension::Cube | TextureDimension::CubeArray
                );
                let index = |mode: Wrap, i: i64, size: i64| {
                    if cube {
                        i.clamp(0, size - 1)
                    } else {
                        nearest_index(mode, i, size)
                    }
                };
                let xy = (
                    index(sampler.wrap_s, u.floor() as i64, width),
                    index(sampler.wrap_t, v.floor() as i64, height),
                );
                let texel = self.wrapped_texel(image, sampler, border, at, xy, reference)?;
                Ok(texel.map(f32::from_bits))
            }
            other => Err(invalid(format!("{other:?} filtering"))),
        }
    }
}

/// Where a texel load (`texture_load`) reads: the texel at the request's
/// integer coordinates of its level; robust access past the image.
enum LoadTarget {
    /// A sample past the image's count: zero (not swizzled).
    PastSamples,
    /// Past the image's sides, levels or layers: zero, then swizzled.
    Outside,
    /// Sample `sample` of texel (x, y) of `level` and `layer`.
    Texel {
        level: u32,
        x: u32,
        y: u32,
        layer: u32,
        sample: u32,
    },
}

/// What a texel load of `image` reads: the texel at `coords` (the
/// coordinate registers) moved by `offset_texels`, of level `level` (from
/// the view's first).
fn load_target(
    image: &Image,
    [cx, cy, cz, _]: [u32; 4],
    level: u32,
    [dx, dy, dz]: [i32; 3],
) -> LoadTarget {
    use TextureDimension as D;
    let t = &image.texture;
    // The registers after x and y (Mesa's agx_nir_lower_texture): an
    // array's layer; a multisampled image's sample index, below the
    // layer's 16 bits for an array; a 3D image's integer slice; a cube's
    // face (a load reads a face as a layer). A 1D image's row is row 0.
    let (cy, layer, sample) = match t.dimension {
        D::D1 => (0, 0, 0),
        D::D2Array | D::D3 | D::Cube | D::CubeArray => (cy, cz, 0),
        D::D2Multisampled => (cy, 0, cz),
        D::D2ArrayMultisampled => (cy, cz >> 16, cz & 0xFFFF),
        _ => (cy, 0, 0),
    };
    if sample >= image.samples {
        // Robust: a sample past the image's count reads zero, as a texel
        // past its edge does.
        return LoadTarget::PastSamples;
    }
    let level = level.saturating_add(t.first_level);
    // Out-of-bounds loads return zero (robust access). The offset adds to
    // the 32-bit coordinates modulo 2^32, so a negative coordinate the
    // offset brings into the image reads it (GL's
    // `texelFetchOffset(t, ivec2(-7, 0), 0, ivec2(7, 0))` is texel 0).
    let x = cx.wrapping_add_signed(dx);
    let y = cy.wrapping_add_signed(dy);
    // z offsets move a 3D image's slice (layers are not offset); a 3D
    // image's slices of a level are as many as its depth there (each a
    // layer of the layout).
    let (layer, layers) = if t.dimension == D::D3 {
        (
            layer.wrapping_add_signed(dz),
            (t.depth >> level.min(31)).max(1),
        )
    } else {
        (layer, image.layers)
    };
    let inside = level < 32
        && x < (t.width >> level).max(1)
        && y < (t.height >> level).max(1)
        && layer < layers;
    if inside {
        LoadTarget::Texel {
            level,
            x,
            y,
            layer,
            sample,
        }
    } else {
        LoadTarget::Outside
    }
}

/// The four components of an element of a pixel image (not block
/// compressed) whose bytes are `bytes`, as register bits (f32, or
/// integers for integer formats), before the swizzle, into `out`.
fn element_values(image: &Image, bytes: &[u8], out: &mut [u32; 4]) {
    let one = if image.integer { 1 } else { 1.0f32.to_bits() };
    *out = [0, 0, 0, one];
    if let Some(table) = image.byte_channels() {
        for ((value, channel), byte) in out.iter_mut().zip(table).zip(bytes) {
            *value = channel[usize::from(*byte)];
        }
        return;
    }
    let signed = image.texture.data_type == TextureType::Sint;
    for (c, value) in out.iter_mut().enumerate().take(image.channels) {
        let at = if image.element.packed() {
            0
        } else {
            c << image.element.shift()
        };
        *value = formats::load(image.element, &bytes[at..], c, false);
        if signed {
            // Signed integers fill the register, sign-extended.
            let unused = 32 - image.element.channel_bits(c);
            *value = ((*value << unused) as i32 >> unused) as u32;
        }
    }
}

/// `register_bits(swizzled(raw))` into `out`, component by component
/// (the arrays' whole-array copies read back words just written one by
/// one, a stall per texel).
fn swizzle_into(image: &Image, raw: &[u32; 4], half: bool, out: &mut [u32; 4]) {
    for (value, channel) in out.iter_mut().zip(swizzle(image)) {
        *value = register_word(image, swizzled_channel(image, raw, channel), half);
    }
}

/// A texel compared with a depth reference by the sampler's function:
/// [v, v, v, 1] with v 1 where it passes, else 0.
fn compared(sampler: &Sampler, reference: f32, raw: [u32; 4]) -> [u32; 4] {
    let pass = compare(sampler.compare_func, reference, f32::from_bits(raw[0]));
    let v = if pass { 1.0f32 } else { 0.0 };
    [v, v, v, 1.0].map(f32::to_bits)
}

/// A decoded sampler and its border colour (`None`: a custom border of a
/// bound sampler, not modelled).
type SamplerState = (Sampler, Option<Border>);

/// The four texels of a 2x2 footprint, raw.
type Quad = [[u32; 4]; 4];

/// Where a sample reads: a level and layer, normalised coordinates, and
/// the instruction's texel offsets.
struct Footprint {
    level: u32,
    s: f32,
    t: f32,
    layer: u32,
    /// A 3D image's normalised z (its slices are layers).
    r: Option<f32>,
    offset: [i32; 3],
}

impl Footprint {
    /// The coordinates in texels of the level, offsets added (an offset
    /// moves every texel the filter reads by whole texels).
    fn texel_space(&self, image: &Image, sampler: &Sampler) -> (f32, f32) {
        let width = (image.texture.width >> self.level).max(1) as f32;
        let height = (image.texture.height >> self.level).max(1) as f32;
        (
            gl_clamp(
                sampler.wrap_s,
                self.s * width + self.offset[0] as f32,
                width,
            ),
            gl_clamp(
                sampler.wrap_t,
                self.t * height + self.offset[1] as f32,
                height,
            ),
        )
    }
}

/// The level every lane of a sample of `image` through `sampler` reads
/// and the bilinear filter it reads that level through, whatever its
/// level of detail: the first level of a 2D image of pixels (not block
/// compressed, not compressed, not integer), sampled without a
/// comparison, magnified linearly and either never minified (a greatest
/// LOD of at most 0) or minified linearly from one level (no mipmapping,
/// or one level in the view). `None` for any other.
fn bilinear_level(image: &Image, sampler: &Sampler) -> Option<u32> {
    let t = &image.texture;
    let plain = t.dimension == TextureDimension::D2
        && !image.integer
        && image.block.is_none()
        && image.compression.is_none()
        && !sampler.compare_enable;
    let one_level = sampler.max_lod.to_f32() <= 0.0
        || (sampler.minify == Filter::Linear
            && (sampler.mip_filter == MipFilter::None || t.last_level <= t.first_level));
    (plain && sampler.magnify == Filter::Linear && one_level).then_some(t.first_level)
}

/// An image's swizzle, per component: the raw component it takes (4:
/// none), and the constant it is then (as `swizzled_channel` gives it).
fn swizzle_table(image: &Image) -> [(usize, u32); 4] {
    swizzle(image).map(|channel| match channel {
        Channel::R => (0, 0),
        Channel::G => (1, 0),
        Channel::B => (2, 0),
        Channel::A => (3, 0),
        constant => (4, swizzled_channel(image, &[0; 4], constant)),
    })
}

/// The register bits of a texel's components `raw` (the fifth unused)
/// through a [`swizzle_table`], as fp16 when `to_half` (as
/// [`register_bits`] of [`swizzled`] has them for a float image).
#[inline(always)]
fn swizzled_registers(swizzle: &[(usize, u32); 4], raw: &[u32; 5], to_half: bool) -> [u32; 4] {
    let mut out = [0; 4];
    for (value, &(from, constant)) in out.iter_mut().zip(swizzle) {
        let bits = if from < 4 { raw[from] } else { constant };
        *value = if to_half {
            u32::from(crate::usc::float::f32_to_half(f32::from_bits(bits)))
        } else {
            bits
        };
    }
    out
}

/// A texel's channels (as stored) in the order the descriptor's swizzle
/// names them, 0 and 1 where it names those.
fn swizzled(image: &Image, raw: [u32; 4]) -> [u32; 4] {
    swizzle(image).map(|channel| swizzled_channel(image, &raw, channel))
}

/// The image's swizzle, R G B A.
fn swizzle(image: &Image) -> [Channel; 4] {
    let t = &image.texture;
    [t.swizzle_r, t.swizzle_g, t.swizzle_b, t.swizzle_a]
}

/// The component of `raw` (or the constant) a swizzle channel names.
fn swizzled_channel(image: &Image, raw: &[u32; 4], channel: Channel) -> u32 {
    match channel {
        Channel::R => raw[0],
        Channel::G => raw[1],
        Channel::B => raw[2],
        Channel::A => raw[3],
        Channel::One if image.integer => 1,
        Channel::One => 1.0f32.to_bits(),
        _ => 0,
    }
}

/// The register bits of a result: fp32 values rounded to fp16 for a
/// 16-bit destination (integers are written as they are).
fn register_bits(image: &Image, values: [u32; 4], half: bool) -> [u32; 4] {
    values.map(|bits| register_word(image, bits, half))
}

/// [`register_bits`] of one component.
fn register_word(image: &Image, bits: u32, half: bool) -> u32 {
    if half && !image.integer {
        u32::from(crate::usc::float::f32_to_half(f32::from_bits(bits)))
    } else {
        bits
    }
}

/// The level of detail from coordinate derivatives (normalised units)
/// and the image's size (depth 0 unless 3D).
fn rho_lod(ddx: [f32; 3], ddy: [f32; 3], size: [f32; 3]) -> f32 {
    let length = |d: [f32; 3]| {
        ((d[0] * size[0]).powi(2) + (d[1] * size[1]).powi(2) + (d[2] * size[2]).powi(2)).sqrt()
    };
    length(ddx).max(length(ddy)).max(f32::MIN_POSITIVE).log2()
}

/// The cube face a direction selects by its major axis (0-5: +X, -X, +Y,
/// -Y, +Z, -Z); a tie between axes goes to x, then y (what the hardware
/// does with ties is not public).
fn major_face(d: [f32; 3]) -> u32 {
    let [ax, ay, az] = d.map(f32::abs);
    if ax >= ay && ax >= az {
        u32::from(d[0] < 0.0)
    } else if ay >= az {
        2 + u32::from(d[1] < 0.0)
    } else {
        4 + u32::from(d[2] < 0.0)
    }
}

/// A direction's normalised (s, t) on `face`, as the GL and Vulkan
/// specifications' table defines them.
fn face_coordinates(face: u32, [x, y, z]: [f32; 3]) -> (f32, f32) {
    let (sc, tc, ma) = match face {
        0 => (-z, -y, x),
        1 => (z, -y, x),
        2 => (x, z, y),
        3 => (x, -z, y),
        4 => (x, -y, z),
        _ => (-x, -y, z),
    };
    let ma = ma.abs();
    (0.5 * (sc / ma + 1.0), 0.5 * (tc / ma + 1.0))
}

/// Where texel (x, y), past an edge of `face` (of `size` texels a side),
/// is: the face its centre's direction selects and the texel there (the
/// table's inverse, then the projection). A texel past a corner lands on
/// one of the two faces that meet there (GL leaves the corner to the
/// implementation; the hardware's choice is not public).
fn across_cube_edge(face: u32, (x, y): (i64, i64), size: i64) -> (u32, i64, i64) {
    let n = size as f32;
    let sc = 2.0 * (x as f32 + 0.5) / n - 1.0;
    let tc = 2.0 * (y as f32 + 0.5) / n - 1.0;
    let direction = match face {
        0 => [1.0, -tc, -sc],
        1 => [-1.0, -tc, sc],
        2 => [sc, 1.0, tc],
        3 => [sc, -1.0, -tc],
        4 => [sc, -tc, 1.0],
        _ => [-sc, -tc, -1.0],
    };
    let to = major_face(direction);
    let (s, t) = face_coordinates(to, direction);
    let texel = |c: f32| ((c * n).floor() as i64).clamp(0, size - 1);
    (to, texel(s), texel(t))
}

/// The face a cube sample's direction (x, y, z in the coordinate
/// registers) selects, by the major axis, and the face's normalised
/// (s, t), which replace x and y in `request`; derivatives of the
/// direction become derivatives of (s, t) on the same face. Filtering
/// crosses to the neighbouring faces unless `seamful_cube_maps` asks the
/// edge texels to clamp within the face (`across_cube_edge`).
fn cube_face(request: &mut TextureRequest) -> u32 {
    let d = [0, 1, 2].map(|i| f32::from_bits(request.coords[i]));
    let face = major_face(d);
    let project = |v: [f32; 3]| face_coordinates(face, v);
    let (s, t) = project(d);
    request.coords[0] = s.to_bits();
    request.coords[1] = t.to_bits();
    let on_face = |delta: [f32; 3]| -> [f32; 3] {
        let (s1, t1) = project([d[0] + delta[0], d[1] + delta[1], d[2] + delta[2]]);
        [s1 - s, t1 - t, 0.0]
    };
    match &mut request.lod {
        LodArgument::Auto { ddx, ddy, .. } | LodArgument::Gradient { ddx, ddy } => {
            *ddx = on_face(*ddx);
            *ddy = on_face(*ddy);
        }
        LodArgument::Explicit(_) => {}
    }
    face
}

/// GL's clamp (`Clamp (GL)`, Mesa's `PIPE_TEX_WRAP_CLAMP`): the texel
/// space coordinate, texel offsets added (GL applies them before the
/// wrap mode), is clamped to [0, size] before filtering; a linear
/// filter's footprint then reaches half a texel past the edge, onto the
/// border.
fn gl_clamp(mode: Wrap, coordinate: f32, size: f32) -> f32 {
    if mode == Wrap::ClampGl {
        coordinate.clamp(0.0, size)
    } else {
        coordinate
    }
}

/// The texel a nearest filter reads at index `i`: GL's clamp keeps it
/// on the image (a coordinate of exactly 1 lands one past the edge).
fn nearest_index(mode: Wrap, i: i64, size: i64) -> i64 {
    if mode == Wrap::ClampGl {
        i.clamp(0, size - 1)
    } else {
        i
    }
}

/// A texel coordinate through a wrap mode; `None` for the border.
#[inline(always)]
pub fn wrap(mode: Wrap, i: i64, size: i64) -> Option<i64> {
    Some(match mode {
        // Inside the image (most texels a footprint reads) without the
        // division.
        Wrap::Repeat if (0..size).contains(&i) => i,
        // A power of two's remainder without the division.
        Wrap::Repeat if size & (size - 1) == 0 => i & (size - 1),
        Wrap::Repeat => i.rem_euclid(size),
        Wrap::MirroredRepeat => {
            let period = i.rem_euclid(2 * size);
            if period < size {
                period
            } else {
                2 * size - 1 - period
            }
        }
        Wrap::ClampToBorder | Wrap::ClampGl => {
            if (0..size).contains(&i) {
                i
            } else {
                return None;
            }
        }
        Wrap::MirroredClampToEdge => {
            let m = if i < 0 { -1 - i } else { i };
            m.min(size - 1)
        }
        _ => i.clamp(0, size - 1),
    })
}

/// A sampler's border colour, as its descriptor gives it.
#[derive(Debug, Clone, Copy)]
enum Border {
    /// One of the fixed colours.
    Fixed(BorderColour),
    /// A custom colour's four channel words, in the image's encoding.
    Custom([u32; 4]),
}

impl Border {
    /// The border as texel register bits of `image`, before the swizzle.
    /// A fixed colour is 0 or 1 in each channel, as integers for an
    /// integer image and as floats otherwise (what the hardware returns
    /// for an integer image is not public; this is what Vulkan's integer
    /// borders are). A custom colour's channel holds its value as the
    /// image's channel does: an n-bit unorm or snorm integer (sRGB channels
    /// as 12-bit unorm, linear), fp16 bits for 16-bit floats, the bits for
    /// 32-bit floats and integers (Mesa's `agx_pack_border`).
    fn texel(self, image: &Image) -> [u32; 4] {
        let one = if image.integer { 1 } else { 1.0f32.to_bits() };
        match self {
            Border::Fixed(BorderColour::OpaqueBlack) => [0, 0, 0, one],
            Border::Fixed(BorderColour::OpaqueWhite) => [one; 4],
            Border::Fixed(_) => [0; 4],
            Border::Custom(words) => {
                let mut out = words;
                for (c, word) in out.iter_mut().enumerate() {
                    if let Some(value) = border_channel(image, c, *word) {
                        *word = value.to_bits();
                    }
                }
                out
            }
        }
    }
}

/// Channel `c` of a custom border as an f32, for images whose channels
/// are not integers or 32-bit floats (`None`: the word is the value).
fn border_channel(image: &Image, c: usize, word: u32) -> Option<f32> {
    use ElementFormat as E;
    if image.integer {
        return None;
    }
    let unorm = |bits: u32| Some((word & ((1 << bits) - 1)) as f32 / ((1u32 << bits) - 1) as f32);
    let snorm = |bits: u32| {
        let max = ((1u32 << (bits - 1)) - 1) as f32;
        Some((word as i32 as f32 / max).clamp(-1.0, 1.0))
    };
    let bits = |fields: [u32; 4]| fields[c & 3];
    if let Some(block) = image.block {
        return match block.border_encoding(c, image.texture.srgb) {
            BorderEncoding::Unorm { bits } => unorm(bits),
            BorderEncoding::Snorm { bits } => snorm(bits),
            BorderEncoding::Half => Some(half_to_f32(u64::from(word & 0xFFFF))),
        };
    }
    match image.element {
        E::I32 => None,
        E::F16 => Some(half_to_f32(u64::from(word & 0xFFFF))),
        E::Unorm8 => unorm(8),
        E::Snorm8 => snorm(8),
        E::Unorm16 => unorm(16),
        E::Snorm16 => snorm(16),
        E::Srgba8 if c == 3 => unorm(8),
        E::Srgba8 => unorm(12),
        E::Rgb10a2 => unorm(bits([10, 10, 10, 2])),
        E::R5g6b5 => unorm(bits([5, 6, 5, 1])),
        E::Rgba4 => unorm(4),
        E::Rgb5a1 => unorm(bits([5, 5, 5, 1])),
        E::A1rgb5 => unorm(bits([1, 5, 5, 5])),
        // Packed floats: fp16 encodings, as Mesa packs non-32-bit float
        // channels.
        E::Rg11b10f | E::Rgb9e5 => Some(half_to_f32(u64::from(word & 0xFFFF))),
        E::I8 | E::I16 | E::Rgb10a2Int => None,
    }
}

/// The level of detail a sample computes, (λ, clamped): λ from the
/// explicit LOD, or from the derivatives scaled by the view's first
/// level (relative to it, as GL and Vulkan define it: Mesa gives the
/// descriptor the image's full size and the view's first level) plus the
/// bias; clamped to the sampler's range, whose minimum the instruction's
/// raises (max-then-min, so a descriptor whose minimum exceeds its
/// maximum gives the maximum, as Vulkan's clamp does, rather than a
/// panic). A 3D image's depth scales its z derivatives; other images
/// have none.
fn level_of_detail(t: &Texture, sampler: &Sampler, request: &TextureRequest) -> (f32, f32) {
    let three_d = t.dimension == TextureDimension::D3;
    let base = |size: u32| (size >> t.first_level.min(31)).max(1) as f32;
    let size = [
        base(t.width),
        base(t.height),
        if three_d { base(t.depth) } else { 0.0 },
    ];
    let lod = match request.lod {
        LodArgument::Explicit(l) => l,
        LodArgument::Auto { ddx, ddy, bias } => rho_lod(ddx, ddy, size) + bias,
        LodArgument::Gradient { ddx, ddy } => rho_lod(ddx, ddy, size),
    };
    let min_lod = match request.min_lod {
        Some(min) => sampler.min_lod.to_f32().max(min),
        None => sampler.min_lod.to_f32(),
    };
    (lod, lod.max(min_lod).min(sampler.max_lod.to_f32()))
}

/// A LOD query's result (`texture_sample.query_lod`, GL's
/// `textureQueryLod`): the level a sample would read, then λ, as GLSL's
/// definition has them: λ clamped to the sampler's range and the view's
/// levels, then 0 without mipmapping, the nearest level (rounding half
/// down) with nearest mipmapping, the clamped λ with linear. Mesa lowers
/// nothing around the query, so the hardware returns what GL asks; how
/// it rounds is not public.
fn query_lod(t: &Texture, sampler: &Sampler, request: &TextureRequest) -> [f32; 4] {
    let (lod, clamped) = level_of_detail(t, sampler, request);
    let max_level = t.last_level.saturating_sub(t.first_level) as f32;
    let clamped = clamped.clamp(0.0, max_level);
    let accessed = match sampler.mip_filter {
        MipFilter::Nearest => (clamped + 0.5).ceil() - 1.0,
        MipFilter::Linear => clamped,
        _ => 0.0,
    };
    [accessed, lod, 0.0, 0.0]
}

/// The reference a shadow comparison of `image` uses: the request's,
/// clamped to [0, 1] for a unorm image (D16). Vulkan requires the clamp
/// for unorm depth formats and honeykrisp leaves it to the hardware (the
/// comparator goes to `texture_sample` as it is, `agx_compile.c`); a float
/// image's reference is compared as it is, as Vulkan says. Whether the
/// hardware clamps for float images too is not public.
fn shadow_reference(image: &Image, request: &TextureRequest) -> f32 {
    let reference = request.compare.unwrap_or(0.0);
    if image.texture.data_type == TextureType::Unorm {
        reference.clamp(0.0, 1.0)
    } else {
        reference
    }
}

/// A shadow comparison of the reference against a texel.
fn compare(func: CompareFunc, reference: f32, texel: f32) -> bool {
    match func {
        CompareFunc::Lequal => reference <= texel,
        CompareFunc::Gequal => reference >= texel,
        CompareFunc::Less => reference < texel,
        CompareFunc::Greater => reference > texel,
        CompareFunc::Equal => reference == texel,
        CompareFunc::NotEqual => reference != texel,
        CompareFunc::Always => true,
        _ => false,
    }
}
