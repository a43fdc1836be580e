//! Image blocks: the shader core's on-chip pixel memory.
//!
//! A render pass's tile and a kernel's threadgroup memory in a tile
//! layout (the USC Shared word's 32x32, 32x16 or 16x16 layouts; Mesa's
//! blits and copies use 32x32) are both an image block: per pixel, one
//! record per sample, which `ld_tile`/`st_tile` read and write in the
//! tilebuffer element formats, and which the pixel back end stores to an
//! image through a PBE descriptor (`image_write_block`), converting each
//! element to the image's format and layout.
//!
//! Records are laid out pixel by pixel, row by row, samples of a pixel
//! together. How the hardware lays a kernel's image block out in
//! threadgroup memory is not known (no public source reads one with
//! `threadgroup_load`), so kernels with an image block have no other
//! threadgroup memory here.
//!
//! A store to a compressed image writes its pixels uncompressed and marks
//! each compression tile it writes as uncompressed in the metadata (a
//! lossless encoding any reader decodes; which encodings the hardware's
//! PBE chooses is not publicly known). A solid tile the store covers only
//! in part is first expanded into the body, so the pixels the store does
//! not write keep their colour.

use agx_hw::formats::{
    Channel, ImageMode, Layout, Pbe, SampleCount, SharedLayout, TextureDimension,
};
use agx_hw::layout::{
    laid_out_levels, sample_space_pixel, sample_space_stretch, tile_word,
    uncompressed_subtile_mode, CompressionLayout, ImageLayout, TileMode, COMPRESSION_TILE_PX,
};

use crate::bind::Binding;
use crate::memory::GpuVm;
use crate::probe::{PixelEvent, ShaderProbe};
use crate::texture::channel_format;
use crate::usc::formats::{self, ElementFormat};
use crate::usc::io::{BlockStore, ImageWrite, IoError, TextureHandle, TileAccess};
use crate::usc::{AccessKind, GpuMemory};

/// The shape of an image block: pixels, samples per pixel and bytes per
/// sample record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageblockShape {
    /// Pixels per row.
    pub width_px: u32,
    /// Rows.
    pub height_px: u32,
    /// Samples per pixel (1, 2, 4 or 8; block stores take 1, 2 or 4).
    pub samples: u32,
    /// Bytes of one sample's record.
    pub sample_bytes: u32,
}

impl ImageblockShape {
    /// The image block a USC Shared word's tile layout describes, or
    /// `None` for the vertex/compute layout (plain threadgroup memory)
    /// and for layouts nobody has seen (binding refuses those).
    pub fn of_shared(layout: SharedLayout, samples: u32, sample_bytes: u32) -> Option<Self> {
        let (width_px, height_px) = match layout {
            SharedLayout::VertexCompute | SharedLayout::Unknown(_) => return None,
            SharedLayout::Tile32x32 => (32, 32),
            SharedLayout::Tile32x16 => (32, 16),
            SharedLayout::Tile16x16 => (16, 16),
        };
        Some(ImageblockShape {
            width_px,
            height_px,
            samples,
            sample_bytes,
        })
    }

    /// Bytes of the whole block.
    pub fn bytes(&self) -> u64 {
        u64::from(self.width_px)
            * u64::from(self.height_px)
            * u64::from(self.samples)
            * u64::from(self.sample_bytes)
    }
}

/// One image block's bytes.
pub struct Imageblock {
    /// The records, pixel by pixel.
    pub bytes: Vec<u8>,
    /// Pixels per row.
    pub width_px: u32,
    /// Rows.
    pub height_px: u32,
    /// Samples per pixel.
    pub samples: u32,
    /// Bytes of one sample's record.
    pub sample_bytes: u32,
    /// The last store's conversion, for the next store of the same
    /// values (a clear stores one colour to every pixel).
    last_conversion: Option<Conversion>,
}

/// Register values converted to an element's bytes: component `c` (of
/// those `mask` names) at `c << format.shift()` of `bytes`.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Conversion {
    format: ElementFormat,
    mask: u8,
    half: bool,
    values: [u32; 4],
    bytes: [u8; 16],
}

impl Conversion {
    /// `values` (by component) converted to `format`, the components
    /// `mask` names; `format` is not a packed one.
    fn new(format: ElementFormat, mask: u8, half: bool, values: [u32; 4]) -> Conversion {
        let mut bytes = [0u8; 16];
        formats::store_element(format, &mut bytes, mask, values, half);
        Conversion {
            format,
            mask,
            half,
            values,
            bytes,
        }
    }
}

/// A refusal by the image block or the pixel back end.
fn invalid(what: String) -> IoError {
    IoError::Invalid(what)
}

/// Where channel `component` of an element starts in a record.
pub fn channel_offset(format: ElementFormat, offset: usize, component: usize) -> usize {
    if format.packed() {
        offset
    } else {
        offset + (component << format.shift())
    }
}

/// The PBE's swizzle applied to the values a store writes: stored
/// channel c (in the format's storage order) gets source component
/// `swizzle_c` (Mesa sets `swizzle_r` to the RGBA component its format
/// stores in channel 0, and so on: a B8G8R8A8 image stores B first).
fn swizzled(pbe: &Pbe, values: [u32; 4]) -> [u32; 4] {
    std::array::from_fn(|channel| values[swizzle_source(pbe, channel)])
}

/// The source component stored channel `channel` (0-3) gets.
fn swizzle_source(pbe: &Pbe, channel: usize) -> usize {
    let swizzle = [pbe.swizzle_r, pbe.swizzle_g, pbe.swizzle_b, pbe.swizzle_a];
    match swizzle[channel & 3] {
        Channel::G => 1,
        Channel::B => 2,
        Channel::A => 3,
        _ => 0,
    }
}

/// Copies a whole four-component element of `component_bytes` each from
/// `from` to the start of `to`, in one copy of a known size.
fn copy_element(to: &mut [u8], from: &[u8; 16], component_bytes: usize) {
    match component_bytes {
        1 => to[..4].copy_from_slice(&from[..4]),
        2 => to[..8].copy_from_slice(&from[..8]),
        _ => to[..16].copy_from_slice(&from[..16]),
    }
}

/// The component mask of an image with `channels` channels.
fn channel_mask(channels: usize) -> u8 {
    (1u8 << channels.min(4)) - 1
}

impl Imageblock {
    /// A zeroed image block of `shape`.
    pub fn new(shape: ImageblockShape) -> Imageblock {
        Imageblock {
            bytes: vec![0; shape.bytes() as usize],
            width_px: shape.width_px,
            height_px: shape.height_px,
            samples: shape.samples,
            sample_bytes: shape.sample_bytes,
            last_conversion: None,
        }
    }

    /// The byte offset of pixel (x, y)'s record for `sample`.
    pub fn record(&self, x: u32, y: u32, sample: u32) -> usize {
        (((y * self.width_px + x) * self.samples + sample) * self.sample_bytes) as usize
    }

    /// Pixel (x, y), if it is inside the block.
    pub fn pixel(&self, x: u32, y: u32) -> Result<(u32, u32), IoError> {
        if x >= self.width_px || y >= self.height_px {
            return Err(invalid(format!("pixel ({x}, {y}) outside the tile")));
        }
        Ok((x, y))
    }

    /// The element format of an access, its byte offset in the record,
    /// and the components of the access that fit in the record. Mesa's
    /// blits of 8-byte formats store four 32-bit components into 8-byte
    /// records and pass on the hardware, so the components past the record
    /// cannot land in a neighbour's: here they are dropped by stores and
    /// read as 0 by loads (what the hardware does with them is not
    /// public). An access whose first byte is past the record is refused.
    pub fn element(&self, access: &TileAccess) -> Result<(ElementFormat, usize, u8), IoError> {
        let format = ElementFormat::from_code(i64::from(access.format))
            .ok_or_else(|| invalid(format!("tilebuffer format {}", access.format)))?;
        let offset = access.offset_bytes as usize;
        let record = self.sample_bytes as usize;
        let fits = if format.packed() {
            if offset + format.packed_bytes() <= record {
                0xF
            } else {
                0
            }
        } else {
            let size = 1usize << format.shift();
            (0..4)
                .filter(|c| offset + (c + 1) * size <= record)
                .fold(0u8, |m, c| m | 1 << c)
        };
        if fits & access.mask & 0xF == 0 && access.mask & 0xF != 0 {
            return Err(invalid(format!(
                "bytes from {offset} past the {record}-byte sample record"
            )));
        }
        Ok((format, offset, fits))
    }

    /// The byte offset in the record of a whole unorm8 element that
    /// `access` stores from 32-bit registers into this single-sampled
    /// block (the common `st_tile` of a colour); `None` for any other
    /// access or block.
    pub fn whole_unorm8_offset(&self, access: &TileAccess) -> Option<usize> {
        if self.samples != 1 || access.half || access.mask & 0xF != 0xF {
            return None;
        }
        match self.element(access) {
            Ok((ElementFormat::Unorm8, offset, fits)) if fits & 0xF == 0xF => Some(offset),
            _ => None,
        }
    }

    /// Where `access` stores a whole unorm8 element of 32-bit registers
    /// into this single-sampled block ([`Imageblock::whole_unorm8_offset`]):
    /// the element's byte offset in a pixel's record and the bytes of
    /// `values`.
    pub fn unorm8_store(&self, access: &TileAccess, values: [u32; 4]) -> Option<(usize, [u8; 4])> {
        let offset = self.whole_unorm8_offset(access)?;
        Some((offset, formats::unorm8_element(values)))
    }

    /// The first sample of `mask` (sample 0 if none): the one a load
    /// reads.
    pub fn first_sample(&self, mask: u32) -> u32 {
        self.samples_of(mask).next().unwrap_or(0)
    }

    /// The samples of `mask` this block has.
    pub fn samples_of(&self, mask: u32) -> impl Iterator<Item = u32> + '_ {
        (0..self.samples).filter(move |s| mask & (1 << s) != 0)
    }

    /// Reads the components `access.mask` names of one sample of pixel
    /// (x, y), packed into consecutive registers.
    pub fn load(
        &self,
        (x, y): (u32, u32),
        sample: u32,
        access: &TileAccess,
    ) -> Result<[u32; 4], IoError> {
        let (x, y) = self.pixel(x, y)?;
        let (format, offset, fits) = self.element(access)?;
        let record = self.record(x, y, sample.min(self.samples - 1));
        let mut out = [0u32; 4];
        for (register, component) in (0..4).filter(|c| access.mask & (1 << c) != 0).enumerate() {
            if fits & (1 << component) == 0 {
                continue;
            }
            let at = record + channel_offset(format, offset, component);
            out[register] = formats::load(format, &self.bytes[at..], component, access.half);
        }
        Ok(out)
    }

    /// Writes the components `access.mask` names to the samples of pixel
    /// (x, y) in `samples`.
    pub fn store(
        &mut self,
        (x, y): (u32, u32),
        samples: u32,
        access: &TileAccess,
        values: [u32; 4],
    ) -> Result<(), IoError> {
        let (x, y) = self.pixel(x, y)?;
        let element = self.element(access)?;
        self.store_element_at((x, y), samples, access, element, values);
        Ok(())
    }

    /// [`Imageblock::store_element_at`] of several pixels inside the block
    /// (each with its samples and registers) for one access, in order:
    /// for the whole element of a single-sampled block (the common
    /// `st_tile`), what the access implies is worked out once and each
    /// distinct value converted once.
    pub fn store_elements_at(
        &mut self,
        stores: &[((u32, u32), u32, [u32; 4])],
        access: &TileAccess,
        element: (ElementFormat, usize, u8),
    ) {
        let (format, offset, fits) = element;
        if access.mask & 0xF != 0xF || fits & 0xF != 0xF || format.packed() || self.samples != 1 {
            for &(pixel, samples, values) in stores {
                self.store_element_at(pixel, samples, access, element, values);
            }
            return;
        }
        if format == ElementFormat::Unorm8 && !access.half {
            let mut last = None;
            for &((x, y), samples, values) in stores {
                if samples & 1 == 0 {
                    continue;
                }
                let at = self.record(x, y, 0) + offset;
                self.bytes[at..at + 4].copy_from_slice(&unorm8_element_once(values, &mut last));
            }
            return;
        }
        let size = 1usize << format.shift();
        let mut conversion = self
            .last_conversion
            .filter(|c| (c.format, c.mask, c.half) == (format, 0xF, access.half));
        for &((x, y), samples, values) in stores {
            if samples & 1 == 0 {
                continue;
            }
            let bytes = match &conversion {
                Some(c) if c.values == values => &c.bytes,
                _ => {
                    &conversion
                        .insert(Conversion::new(format, 0xF, access.half, values))
                        .bytes
                }
            };
            let at = self.record(x, y, 0) + offset;
            copy_element(&mut self.bytes[at..], bytes, size);
        }
        if conversion.is_some() {
            self.last_conversion = conversion;
        }
    }

    /// [`Imageblock::store`] of pixel (x, y) inside the block, with the
    /// access's element already looked up ([`Imageblock::element`]).
    pub fn store_element_at(
        &mut self,
        (x, y): (u32, u32),
        samples: u32,
        access: &TileAccess,
        (format, offset, fits): (ElementFormat, usize, u8),
        values: [u32; 4],
    ) {
        // Registers hold the named components in order.
        let by_component = if access.mask & 0xF == 0xF {
            values
        } else {
            let mut by_component = [0u32; 4];
            for (register, component) in (0..4).filter(|c| access.mask & (1 << c) != 0).enumerate()
            {
                by_component[component] = values[register];
            }
            by_component
        };
        let mask = access.mask & fits & 0xF;
        if format.packed() {
            // The components not named keep their bits in the word.
            for sample in (0..self.samples).filter(|s| samples & (1 << s) != 0) {
                let at = self.record(x, y, sample) + offset;
                formats::store_element(
                    format,
                    &mut self.bytes[at..],
                    mask,
                    by_component,
                    access.half,
                );
            }
            return;
        }
        let conversion = match self.last_conversion {
            Some(c)
                if (c.format, c.mask, c.half, c.values)
                    == (format, mask, access.half, by_component) =>
            {
                c
            }
            _ => {
                let c = Conversion::new(format, mask, access.half, by_component);
                self.last_conversion = Some(c);
                c
            }
        };
        let size = 1usize << format.shift();
        if mask == 0xF && self.samples == 1 && samples & 1 != 0 {
            // One sample, the whole element: one copy of a known size.
            let at = self.record(x, y, 0) + offset;
            copy_element(&mut self.bytes[at..], &conversion.bytes, size);
            return;
        }
        for sample in (0..self.samples).filter(|s| samples & (1 << s) != 0) {
            let at = self.record(x, y, sample) + offset;
            if mask == 0xF {
                copy_element(&mut self.bytes[at..], &conversion.bytes, size);
                continue;
            }
            for component in (0..4).filter(|c| mask & (1 << c) != 0) {
                let from = component * size;
                self.bytes[at + from..at + from + size]
                    .copy_from_slice(&conversion.bytes[from..from + size]);
            }
        }
    }
}

/// Where a block store puts the block: the image pixel its first pixel
/// lands on, the layer, and how much of the image may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockPlacement {
    /// The image pixel of the block's pixel (0, 0).
    pub origin_px: (u32, u32),
    /// The image layer.
    pub layer: u32,
    /// Pixels at or past this (x, y) are not written (the render area;
    /// the image's own size always bounds the store too).
    pub limit_px: (u32, u32),
}

/// An image as a PBE descriptor describes it, ready to be written.
#[derive(Debug)]
struct PbeTarget {
    pbe: Pbe,
    /// The image's element format and channel count.
    element: ElementFormat,
    channels: usize,
    /// Bytes of one sample of a texel.
    texel_bytes: usize,
    /// Samples per pixel.
    samples: u32,
    layout: ImageLayout,
    /// Levels the image is laid out for.
    levels: u32,
    /// The level written.
    level: u32,
    /// The level's size in pixels.
    size_px: (u32, u32),
    layers: u32,
}

/// The bytes block stores through the PBE descriptor at `address` may
/// write: per layer, the span of the level it names. `None` for a
/// descriptor that cannot be read or is refused.
pub(crate) fn pbe_written_spans(vm: &GpuVm<'_>, address: u64) -> Option<Vec<(u64, u64)>> {
    let target = PbeTarget::open(vm, address, false).ok()?;
    crate::texture::image_spans(
        target.pbe.buffer,
        &target.layout,
        target.level..=target.level,
        target.layers,
        target.pbe.height,
    )
}

/// Bytes of a PBE descriptor.
const PBE_BYTES: usize = 24;

/// The PBE descriptor image writes last went through, decoded, with its
/// image laid out (one per worker of a fragment pass or a launch, and per
/// draw's vertex shading): a SIMD-group's `image_write` is a write per
/// lane, through one descriptor, and decoding it and laying the image out
/// for each was a tenth of piglit's `shader-mem-barrier`. An instruction's
/// first lane reads the descriptor's bytes again (memory may have
/// changed, and a descriptor that cannot be read faults there), and its
/// later lanes that name the same address write through what it read, as
/// the texture unit reads a descriptor once for an instruction's lanes;
/// the decoded target is kept while the bytes read are the same
/// (wherever they lie: the same bytes describe the same image).
#[derive(Debug, Default)]
pub struct ImageWriteTarget {
    last: Option<([u8; PBE_BYTES], PbeTarget)>,
    /// Where the bytes of `last` were read, for the current instruction.
    read_at: Option<u64>,
}

impl ImageWriteTarget {
    /// A new `image_write` instruction: its first write reads the
    /// descriptor again. A stage that drops some lanes' writes calls it
    /// for the instruction's first lane whether or not that lane writes.
    pub fn new_instruction(&mut self) {
        self.read_at = None;
    }

    /// The target of the descriptor at `address`, as [`PbeTarget::open`]
    /// for an image write opens it: read again unless this instruction
    /// has read it already.
    fn open(&mut self, vm: &GpuVm<'_>, address: u64) -> Result<&PbeTarget, IoError> {
        if self.read_at != Some(address) || self.last.is_none() {
            self.read_at = None;
            let mut bytes = [0u8; PBE_BYTES];
            GpuMemory::read(vm, address, &mut bytes, AccessKind::Read)?;
            // Compared in place: a target is a few hundred bytes, and
            // moving it out and back for every lane's write was a copy
            // each.
            if !matches!(&self.last, Some((kept, _)) if *kept == bytes) {
                // Nothing kept if the new bytes do not decode.
                self.last = None;
                self.last = Some((bytes, PbeTarget::of_bytes(&bytes, true)?));
            }
            self.read_at = Some(address);
        }
        match &self.last {
            Some((_, target)) => Ok(target),
            None => Err(invalid("no image write target".into())),
        }
    }
}

impl PbeTarget {
    /// Reads and checks the PBE descriptor at `address`. `image_write`:
    /// the descriptor's sRGB bit applies (block stores write the
    /// tilebuffer's encoding, which is already sRGB when it should be).
    fn open(vm: &GpuVm<'_>, address: u64, image_write: bool) -> Result<PbeTarget, IoError> {
        let mut bytes = [0u8; PBE_BYTES];
        GpuMemory::read(vm, address, &mut bytes, AccessKind::Read)?;
        PbeTarget::of_bytes(&bytes, image_write)
    }

    /// The target the descriptor `bytes` describe (see [`PbeTarget::open`]).
    fn of_bytes(bytes: &[u8; PBE_BYTES], image_write: bool) -> Result<PbeTarget, IoError> {
        let pbe = Pbe::decode_fields(bytes);
        let srgb = image_write && pbe.srgb;
        let (element, channels) = channel_format(pbe.channels, pbe.data_type, srgb)
            .ok_or_else(|| invalid(format!("PBE format {:?} {:?}", pbe.channels, pbe.data_type)))?;
        if !matches!(pbe.layout, Layout::Linear | Layout::Gpu | Layout::Twiddled) {
            return Err(invalid(format!("{:?} image layout", pbe.layout)));
        }
        if pbe.mode != ImageMode::Normal {
            return Err(invalid(format!("{:?} images (sparse)", pbe.mode)));
        }
        // A multisampled image keeps a pixel's samples side by side, sample
        // 0 first: one element of the sample size times the count, tiled as
        // any element of that size is (Mesa's ail and libagx).
        let samples = match (pbe.dimension, pbe.samples) {
            (
                TextureDimension::D2Multisampled | TextureDimension::D2ArrayMultisampled,
                SampleCount::Two,
            ) => 2,
            (TextureDimension::D2Multisampled | TextureDimension::D2ArrayMultisampled, _) => 4,
            _ => 1,
        };
        let texel_bytes = element.element_bytes(channels) as usize;
        let element_bytes = texel_bytes as u32 * samples;
        let layers = if pbe.layout == Layout::Linear {
            // A linear 2D array's layer count is in the extended words.
            if pbe.extended {
                pbe.depth_linear
            } else {
                1
            }
        } else {
            pbe.layers
        };
        // A mipmapped image is laid out for its full chain.
        let levels = laid_out_levels(pbe.width, pbe.height, pbe.levels > 1, pbe.levels);
        let layout = match pbe.layout {
            Layout::Linear => ImageLayout::Linear {
                stride_bytes: u64::from(pbe.stride),
                element_bytes,
                layer_stride_bytes: pbe.layer_stride_linear,
            },
            Layout::Twiddled => ImageLayout::twiddled(pbe.width, pbe.height, levels, element_bytes),
            _ => ImageLayout::gpu_tiled(
                pbe.width,
                pbe.height,
                levels,
                element_bytes,
                pbe.page_aligned_layers,
            )
            .ok_or_else(|| invalid(format!("{element_bytes}-byte tiled elements")))?,
        };
        let level = if pbe.layout == Layout::Linear {
            0
        } else {
            pbe.level
        };
        let size_px = ((pbe.width >> level).max(1), (pbe.height >> level).max(1));
        Ok(PbeTarget {
            pbe,
            element,
            channels,
            texel_bytes,
            samples,
            layout,
            levels,
            level,
            size_px,
            layers,
        })
    }

    /// The byte offset of pixel (x, y) of the level written, in `layer`
    /// (a linear image has one level, its level 0).
    fn texel_offset(&self, x: u32, y: u32, layer: u32) -> Result<u64, IoError> {
        self.layout
            .offset(self.level, x, y, layer)
            .ok_or_else(|| match self.pbe.layout {
                Layout::Linear => invalid(format!("row {y} past the image")),
                _ => invalid(format!("pixel ({x}, {y}) past the image")),
            })
    }

    /// Writes `texel` (every sample of a pixel) at each pixel of
    /// `written` (each row from `row_at(y)`), after expanding the solid
    /// compression tiles the store covers only in part, and marks the
    /// tiles written uncompressed.
    fn write(
        &self,
        vm: &mut GpuVm<'_>,
        layer: u32,
        written: (std::ops::Range<u32>, std::ops::Range<u32>),
        mut texel_of: impl FnMut(u32, u32, &mut [u8]) -> Result<(), IoError>,
    ) -> Result<(), IoError> {
        // A layer past the image's is out of bounds, and the PBE writes
        // nothing there, as it writes no pixel past the image's sides:
        // Mesa relies on it (it moves the last coordinate of an
        // out-of-bounds image store to 0xFFF0 for "hardware-level"
        // robustness, `agx_nir_lower_texture.c`; its layered clears
        // store every layer of the framebuffer to each attachment).
        if layer >= self.layers {
            tracing::debug!(
                layer,
                layers = self.layers,
                address = self.pbe.buffer,
                "a store past the image's layers writes nothing"
            );
            return Ok(());
        }
        let marked_tiles = if self.pbe.compressed_1 {
            let compressed = Compressed::new(
                &self.pbe,
                self.levels,
                self.texel_bytes as u32,
                self.samples,
            )?;
            compressed.prepare(
                vm,
                &self.pbe,
                &self.layout,
                self.level,
                layer,
                &written,
                self.size_px,
            )?
        } else {
            None
        };
        let texel_run_bytes = self.texel_bytes * self.samples as usize;
        if self.pbe.layout == Layout::Linear {
            // One row's texels, each filled in place (from zeros, as a
            // format's bits no channel names are written).
            let mut row = vec![0u8; written.0.len() * texel_run_bytes];
            for y in written.1.clone() {
                row.fill(0);
                for (x, texel) in written.0.clone().zip(row.chunks_exact_mut(texel_run_bytes)) {
                    texel_of(x, y, texel)?;
                }
                if row.is_empty() {
                    continue;
                }
                let at = self.texel_offset(written.0.start, y, layer)?;
                vm.write(self.pbe.buffer.wrapping_add(at), &row)
                    .map_err(IoError::Memory)?;
            }
        } else {
            // Z-order tiles: the written rectangle's pixels in Z-order
            // from its corner, so that texels adjacent in memory go out as
            // one write. Within a square of a layout's tile aligned to its
            // side, that is the layout's order: the square's texels follow
            // one another, and only its first offset is computed.
            // Elsewhere runs are shorter, and still only adjacent texels
            // share a write.
            let (width, height) = (written.0.len() as u32, written.1.len() as u32);
            let side = width.max(height).next_power_of_two();
            // A smaller aligned square is one too: the largest the
            // corner is aligned to.
            let square = self.layout.aligned_square(self.level).map_or(1, |q| {
                let aligned = |v: u32| if v == 0 { q } else { 1 << v.trailing_zeros() };
                let q = q
                    .min(aligned(written.0.start))
                    .min(aligned(written.1.start));
                u64::from(q) * u64::from(q)
            });
            // Every written texel lands in the run (in Z-order), filled
            // in place: the buffer is as long as the rectangle's texels.
            let mut run = vec![0u8; written.0.len() * written.1.len() * texel_run_bytes];
            let mut run_len = 0;
            let mut run_at = None;
            let mut last: Option<(u64, u64)> = None;
            // `square` is a power of two: the index's low bits say where
            // in its square it is.
            let square_mask = square - 1;
            for index in 0..u64::from(side) * u64::from(side) {
                let (dx, dy) = agx_hw::layout::morton_position(index);
                if dx >= width || dy >= height {
                    continue;
                }
                let (x, y) = (written.0.start + dx, written.1.start + dy);
                let at = match last {
                    Some((last_index, last_at))
                        if index & square_mask != 0 && last_index + 1 == index =>
                    {
                        // The layout's elements are a pixel's samples.
                        let at = last_at + texel_run_bytes as u64;
                        debug_assert_eq!(Some(at), self.layout.offset(self.level, x, y, layer));
                        at
                    }
                    _ => self.texel_offset(x, y, layer)?,
                };
                last = Some((index, at));
                if run_at.map(|start: u64| start + run_len as u64) != Some(at) {
                    if let Some(start) = run_at {
                        vm.write(self.pbe.buffer.wrapping_add(start), &run[..run_len])
                            .map_err(IoError::Memory)?;
                    }
                    run_len = 0;
                    run_at = Some(at);
                }
                texel_of(x, y, &mut run[run_len..run_len + texel_run_bytes])?;
                run_len += texel_run_bytes;
            }
            if let Some(start) = run_at {
                vm.write(self.pbe.buffer.wrapping_add(start), &run[..run_len])
                    .map_err(IoError::Memory)?;
            }
        }
        if let Some((words, word)) = marked_tiles {
            for address in words {
                vm.write(address, &word.to_le_bytes())
                    .map_err(IoError::Memory)?;
            }
        }
        Ok(())
    }
}

/// The whole unorm8 element of `values` (32-bit registers), each
/// distinct value converted once: `last` keeps the last values converted
/// and their bytes (a reload stores a colour per pixel, a clear one
/// colour).
#[inline(always)]
pub fn unorm8_element_once(values: [u32; 4], last: &mut Option<([u32; 4], [u8; 4])>) -> [u8; 4] {
    match *last {
        Some((kept, bytes)) if kept == values => bytes,
        _ => last.insert((values, formats::unorm8_element(values))).1,
    }
}

/// The address of the PBE descriptor a handle names: a state register
/// the pipeline bound, or (bindless) heap base + offset.
fn pbe_address(binding: &Binding, handle: TextureHandle) -> Result<u64, IoError> {
    match handle {
        TextureHandle::Index(index) => binding
            .texture_descriptor(index)
            .ok_or_else(|| invalid(format!("no PBE descriptor bound at ts{index}"))),
        TextureHandle::Bindless { base, offset } => Ok(base.wrapping_add(u64::from(offset))),
    }
}

/// The pixel back end's block store: the elements at
/// `request.tilebuffer_offset_bytes` of every pixel of `block`, converted
/// from the tilebuffer format to the format of the image the PBE
/// descriptor bound at `request.texture` describes, written at
/// `placement`, clipped to the image (and to `placement.limit`); a block
/// placed on a layer past the image's writes nothing.
pub fn store_block(
    vm: &mut GpuVm<'_>,
    binding: &Binding,
    block: &Imageblock,
    request: &BlockStore,
    placement: BlockPlacement,
) -> Result<(), IoError> {
    store_block_watched(vm, binding, block, request, placement, None)
}

/// [`store_block`], reporting to the debugger's probe what it wrote at
/// `watch`'s pixel (render-target coordinates; `command` names the
/// command for the event).
pub fn store_block_watched(
    vm: &mut GpuVm<'_>,
    binding: &Binding,
    block: &Imageblock,
    request: &BlockStore,
    placement: BlockPlacement,
    watch: Option<(&dyn ShaderProbe, u64, (u32, u32))>,
) -> Result<(), IoError> {
    if matches!(request.texture, TextureHandle::Bindless { .. }) {
        return Err(invalid("bindless block stores".into()));
    }
    let descriptor = pbe_address(binding, request.texture)?;
    let target = PbeTarget::open(vm, descriptor, false)?;
    let watched = watch.and_then(|(probe, command, (x, y))| {
        let inside = (placement.origin_px.0..placement.origin_px.0 + block.width_px).contains(&x)
            && (placement.origin_px.1..placement.origin_px.1 + block.height_px).contains(&y)
            && x < placement.limit_px.0.min(target.size_px.0)
            && y < placement.limit_px.1.min(target.size_px.1)
            && placement.layer < target.layers;
        let offset = target
            .texel_offset(x, y, placement.layer)
            .ok()
            .filter(|_| inside)?;
        let address = target.pbe.buffer.wrapping_add(offset);
        let mut before = vec![0u8; target.texel_bytes * target.samples as usize];
        vm.read(address, &mut before).ok()?;
        Some((probe, command, address, before))
    });
    let stored = store_texels(vm, block, request, placement, &target);
    if let Some((probe, command, address, before)) = watched {
        let mut after = vec![0u8; before.len()];
        if vm.read(address, &mut after).is_ok() {
            probe.pixel_event(PixelEvent::Stored {
                command,
                descriptor,
                address,
                before,
                after,
                compressed: target.pbe.compressed_1,
            });
        }
    }
    stored
}

/// The block store's writes, to an opened target.
fn store_texels(
    vm: &mut GpuVm<'_>,
    block: &Imageblock,
    request: &BlockStore,
    placement: BlockPlacement,
    target: &PbeTarget,
) -> Result<(), IoError> {
    // A multisampled block stores to a multisampled image of the same
    // count, every sample. Resolving to a single-sampled image is the
    // shader's job.
    if target.samples != block.samples {
        return Err(invalid(format!(
            "a {}-sample tile stored to a {}-sample image",
            block.samples, target.samples
        )));
    }
    let (source, offset, fits) = block.element(&TileAccess {
        format: request.format,
        offset_bytes: request.tilebuffer_offset_bytes,
        mask: (1u8 << target.channels.min(4)) - 1,
        sample_mask: u32::MAX,
        explicit: None,
        half: false,
    })?;
    let (width, height) = (
        placement.limit_px.0.min(target.size_px.0),
        placement.limit_px.1.min(target.size_px.1),
    );
    let origin = placement.origin_px;
    let written = (
        origin.0..origin.0.saturating_add(block.width_px).min(width),
        origin.1..origin.1.saturating_add(block.height_px).min(height),
    );
    let (element, channels, texel_bytes) = (target.element, target.channels, target.texel_bytes);
    let pbe = &target.pbe;
    // A 16-bit tilebuffer format moves 16-bit values: Mesa stores an f16
    // render target's tiles with the i16 format (agx_compile.c), and the
    // hardware writes the f16 image correctly, so the bits pass through
    // unconverted.
    let half = matches!(source, ElementFormat::I16 | ElementFormat::F16);
    // An srgba8 tile already holds encoded bytes (the conversion happens
    // when the tilebuffer is written; cmdbuf.xml: block stores ignore the
    // PBE's sRGB bit), so they are stored as they are.
    let source = if source == ElementFormat::Srgba8 {
        ElementFormat::Unorm8
    } else {
        source
    };
    // Where the image's format is the tile's, its channels in the same
    // order, and converting an element to registers and back gives the
    // same bytes, a texel is the tile's bytes as they are.
    let stored = channels.min(4);
    let copies_bytes = source == element
        && formats::round_trips(source, half)
        && channels <= 4
        && texel_bytes == channels << source.shift()
        && (0..stored).all(|c| fits & (1 << c) != 0 && swizzle_source(pbe, c) == c);
    if copies_bytes && block.samples == 1 && texel_bytes == 4 {
        // One 32-bit texel a pixel (the commonest target): a copy of a
        // known size.
        return target.write(vm, placement.layer, written, |x, y, texel| {
            let from = block.record(x - origin.0, y - origin.1, 0) + offset;
            texel[..4].copy_from_slice(&block.bytes[from..from + 4]);
            Ok(())
        });
    }
    if copies_bytes {
        return target.write(vm, placement.layer, written, |x, y, texel| {
            let (bx, by) = (x - origin.0, y - origin.1);
            for sample in 0..block.samples as usize {
                let from = block.record(bx, by, sample as u32) + offset;
                texel[sample * texel_bytes..(sample + 1) * texel_bytes]
                    .copy_from_slice(&block.bytes[from..from + texel_bytes]);
            }
            Ok(())
        });
    }
    target.write(vm, placement.layer, written, |x, y, texel| {
        let (bx, by) = (x - origin.0, y - origin.1);
        for sample in 0..block.samples {
            let record = block.record(bx, by, sample);
            let values = std::array::from_fn(|component| {
                let from = record + channel_offset(source, offset, component);
                if component < channels && fits & (1 << component) != 0 {
                    formats::load(source, &block.bytes[from..], component, half)
                } else {
                    0
                }
            });
            let texel = &mut texel[sample as usize * texel_bytes..];
            let values = swizzled(pbe, values);
            formats::store_element(element, texel, channel_mask(channels), values, half);
        }
        Ok(())
    })
}

/// `image_write`: one texel, the register values converted to the format
/// of the image the PBE descriptor describes (sRGB encoded when its sRGB
/// bit is set), at the
/// request's coordinates of the descriptor's level. Coordinates past the
/// image (or its layers) write nothing: Mesa's robustness lowering moves
/// an out-of-bounds store's last coordinate to 0xFFF0 and relies on the
/// hardware dropping it (`agx_nir_lower_texture.c`). Multisampled and
/// compressed images are refused (which sample a write names is not
/// known; Mesa never writes compressed images with it).
pub fn store_texel(
    vm: &mut GpuVm<'_>,
    binding: &Binding,
    request: &ImageWrite,
    opened: &mut ImageWriteTarget,
) -> Result<(), IoError> {
    if request.first_of_instruction {
        opened.new_instruction();
    }
    let target = opened.open(vm, pbe_address(binding, request.texture)?)?;
    if target.samples > 1 {
        return Err(invalid("image writes to multisampled images".into()));
    }
    // The level comes from the descriptor; how the hardware combines it
    // with the instruction's LOD operand is not public.
    if request.lod != 0 {
        return Err(invalid(format!(
            "an image write at LOD {} (not modelled)",
            request.lod
        )));
    }
    // Mesa never writes a compressed image this way (it makes storage
    // images uncompressed, and decompresses before such use); what the
    // hardware does with one is not public, and a per-texel update of the
    // compression metadata would race between the cores.
    if target.pbe.compressed_1 {
        return Err(invalid("image writes to compressed images".into()));
    }
    let [x, y, ..] = request.coords;
    // The layer follows x for 1D arrays, x and y for 2D arrays and 3D.
    let layer = match request.dim {
        1 => request.coords[1],
        3 | 5 | 6 | 7 => request.coords[2],
        _ => 0,
    };
    let y = if matches!(request.dim, 0 | 1) { 0 } else { y };
    if x >= target.size_px.0 || y >= target.size_px.1 || layer >= target.layers {
        return Ok(());
    }
    // One texel of an uncompressed single-sampled image: converted in
    // place and written at its offset, as `PbeTarget::write` writes a
    // rectangle of one (without its buffers).
    let mut bytes = [0u8; 16];
    let texel = bytes
        .get_mut(..target.texel_bytes)
        .ok_or_else(|| invalid(format!("{}-byte texels", target.texel_bytes)))?;
    let values = swizzled(&target.pbe, request.values);
    formats::store_element(
        target.element,
        texel,
        channel_mask(target.channels),
        values,
        request.half,
    );
    let at = target.texel_offset(x, y, layer)?;
    vm.write(target.pbe.buffer.wrapping_add(at), texel)
        .map_err(IoError::Memory)
}

/// The compression side of a PBE descriptor.
struct Compressed {
    meta: CompressionLayout,
    uncompressed_word: u64,
    /// Bytes of one sample's element (the metadata modes are per sample
    /// size).
    element_bytes: u32,
    /// Samples per pixel: a multisampled image's metadata covers tiles of
    /// 16x16 samples (its pixels stretched 2x2 for four samples, 1x2 for
    /// two; Mesa's `ail_effective_width_sa`/`height_sa` and libagx's
    /// sample addressing).
    samples: u32,
}

impl Compressed {
    fn new(
        pbe: &Pbe,
        levels: u32,
        element_bytes: u32,
        samples: u32,
    ) -> Result<Compressed, IoError> {
        if pbe.layout != Layout::Gpu || !pbe.extended {
            return Err(invalid(format!(
                "a compressed {:?} image{}",
                pbe.layout,
                if pbe.extended {
                    ""
                } else {
                    " without the extended words"
                }
            )));
        }
        let (fx, fy) = sample_space_stretch(samples);
        let meta =
            CompressionLayout::new(pbe.width * fx, pbe.height * fy, levels).ok_or_else(|| {
                invalid(format!(
                    "a compressed {}x{} image (a side under one compression tile)",
                    pbe.width, pbe.height
                ))
            })?;
        let mode = uncompressed_subtile_mode(element_bytes)
            .ok_or_else(|| invalid(format!("compressed {element_bytes}-byte texels")))?;
        Ok(Compressed {
            meta,
            uncompressed_word: tile_word(mode),
            element_bytes,
            samples,
        })
    }

    /// Before a store of the pixels `written` of `level` (`size` pixels):
    /// expands each solid tile the store covers only in part into the
    /// body. Returns the metadata words to mark uncompressed after the
    /// store, and the word (`None` if the level is not compressed).
    #[allow(clippy::too_many_arguments)]
    fn prepare(
        &self,
        vm: &mut GpuVm<'_>,
        pbe: &Pbe,
        layout: &ImageLayout,
        level: u32,
        layer: u32,
        written: &(std::ops::Range<u32>, std::ops::Range<u32>),
        size: (u32, u32),
    ) -> Result<Option<(Vec<u64>, u64)>, IoError> {
        if !self.meta.level_compressed(level) || written.0.is_empty() || written.1.is_empty() {
            return Ok(None);
        }
        let t = COMPRESSION_TILE_PX;
        // In sample space: tiles are 16x16 samples.
        let (fx, fy) = sample_space_stretch(self.samples);
        let written = &(
            written.0.start * fx..written.0.end * fx,
            written.1.start * fy..written.1.end * fy,
        );
        let size = (size.0 * fx, size.1 * fy);
        // A sample-space position as (pixel x, pixel y, sample).
        let pixel_of = |sx: u32, sy: u32| sample_space_pixel(sx, sy, self.samples);
        let mut words = Vec::new();
        for ty in written.1.start / t..written.1.end.div_ceil(t) {
            for tx in written.0.start / t..written.0.end.div_ceil(t) {
                let (x0, y0) = (tx * t, ty * t);
                let Some(at) = self.meta.tile_word_offset(level, x0, y0, layer) else {
                    continue;
                };
                let address = pbe.acceleration_buffer.wrapping_add(at);
                words.push(address);
                let tile = (x0..(x0 + t).min(size.0), y0..(y0 + t).min(size.1));
                let covered = written.0.start <= tile.0.start
                    && tile.0.end <= written.0.end
                    && written.1.start <= tile.1.start
                    && tile.1.end <= written.1.end;
                if covered {
                    continue;
                }
                let mut word = [0u8; 8];
                GpuMemory::read(vm, address, &mut word, AccessKind::Read)?;
                match TileMode::decode(u64::from_le_bytes(word), self.element_bytes) {
                    TileMode::Uncompressed => {}
                    TileMode::Solid => {
                        // The colour is at the tile's start: sample 0 of
                        // its first pixel.
                        let texel_at = |sx, sy| {
                            let (x, y, sample) = pixel_of(sx, sy);
                            layout
                                .offset(level, x, y, layer)
                                .map(|o| {
                                    pbe.buffer.wrapping_add(
                                        o + u64::from(sample) * u64::from(self.element_bytes),
                                    )
                                })
                                .ok_or_else(|| invalid(format!("pixel ({x}, {y}) past the image")))
                        };
                        let mut colour = vec![0u8; self.element_bytes as usize];
                        GpuMemory::read(vm, texel_at(x0, y0)?, &mut colour, AccessKind::Read)?;
                        for y in tile.1.clone() {
                            for x in tile.0.clone() {
                                vm.write(texel_at(x, y)?, &colour)
                                    .map_err(IoError::Memory)?;
                            }
                        }
                    }
                    TileMode::Unknown(word) => {
                        return Err(invalid(format!(
                        "a partial store to a tile in compression mode {word:#018x} (not modelled)"
                    )))
                    }
                }
            }
        }
        Ok(Some((words, self.uncompressed_word)))
    }
}
