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
    MipFilter, Sampler, Texture, TextureDimension, TextureType, Wrap,
};
use agx_hw::layout::{laid_out_levels, CompressionLayout, ImageLayout, TileMode};

use crate::bind::StateBinding;
use crate::memory::GpuVm;
use crate::usc::formats::{self, ElementFormat};
use crate::usc::io::{IoError, LodArgument, TextureHandle, TextureRequest};

/// How a descriptor's channels and type map onto an element format and a
/// channel count (`None`: a format this model does not read or write).
pub fn channel_format(
    channels: Channels,
    data_type: TextureType,
    srgb: bool,
) -> Option<(ElementFormat, usize)> {
    use ElementFormat as E;
    let count = match channels {
        Channels::R8 | Channels::R16 | Channels::R32 => 1,
        Channels::R8G8 | Channels::R16G16 | Channels::R32G32 => 2,
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
    /// Layers (1 unless an array).
    layers: u32,
    /// For a compressed image: its metadata layout, and the address of
    /// the first layer's metadata.
    compression: Option<(CompressionLayout, u64)>,
    /// The metadata word last read (its address) and its mode.
    last_tile: std::cell::Cell<Option<(u64, TileMode)>>,
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

    fn image(&self, handle: TextureHandle) -> Result<Image, IoError> {
        let address = match handle {
            TextureHandle::Index(i) => bound(self.textures, i, 24)
                .ok_or_else(|| invalid(format!("no texture bound at ts{i}")))?,
            TextureHandle::Bindless { base, offset } => base.wrapping_add(u64::from(offset)),
        };
        let texture = Texture::decode_fields(&self.read::<24>(address)?);
        // A 1D texture is a row: a 2D image of height 1 (Mesa's null
        // descriptor leaves the dimension field 0, 1D).
        if !matches!(
            texture.dimension,
            TextureDimension::D1 | TextureDimension::D2 | TextureDimension::D2Array
        ) {
            return Err(invalid(format!("{:?} textures", texture.dimension)));
        }
        let (element, channels) = channel_format(texture.channels, texture.data_type, texture.srgb)
            .ok_or_else(|| {
                invalid(format!(
                    "texture format {:?} {:?}",
                    texture.channels, texture.data_type
                ))
            })?;
        let element_bytes = if element.packed() {
            4
        } else {
            (channels as u32) << element.shift()
        };
        let layers = if texture.dimension == TextureDimension::D2Array {
            if texture.layout == Layout::Linear {
                texture.depth_linear
            } else {
                texture.depth
            }
        } else {
            1
        };
        if texture.mode != ImageMode::Normal {
            return Err(invalid(format!("{:?} images (sparse)", texture.mode)));
        }
        // A mipmapped image is laid out for its full chain, whatever
        // levels the view uses.
        let levels = laid_out_levels(
            texture.width,
            texture.height,
            texture.unk_mipmapped,
            texture.last_level + 1,
        );
        let layout = match texture.layout {
            Layout::Linear => ImageLayout::Linear {
                stride_bytes: u64::from(texture.stride),
                element_bytes,
                layer_stride_bytes: texture.layer_stride_linear,
            },
            Layout::Gpu => ImageLayout::gpu_tiled(
                texture.width,
                texture.height,
                levels,
                element_bytes,
                texture.page_aligned_layers,
            )
            .ok_or_else(|| invalid(format!("{element_bytes}-byte tiled texels")))?,
            Layout::Twiddled => {
                ImageLayout::twiddled(texture.width, texture.height, levels, element_bytes)
            }
            other => return Err(invalid(format!("{other:?} texture layout"))),
        };
        let compression = if texture.compressed_1 {
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
            let meta =
                CompressionLayout::new(texture.width, texture.height, levels).ok_or_else(|| {
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
            last_tile: std::cell::Cell::new(None),
        })
    }

    /// Where texel (x, y) of `level` and `layer` is stored, relative to
    /// the image's address: for a solid compression tile, the tile's
    /// first element.
    fn stored_texel(
        &self,
        image: &Image,
        level: u32,
        x: u32,
        y: u32,
        layer: u32,
    ) -> Result<(u32, u32), IoError> {
        let Some((meta, base)) = &image.compression else {
            return Ok((x, y));
        };
        let Some(at) = meta.tile_word_offset(level, x, y, layer) else {
            return Ok((x, y));
        };
        let address = base.wrapping_add(at);
        // A filtered sample reads up to eight texels, mostly of one tile.
        let mode = match image.last_tile.get() {
            Some((cached, mode)) if cached == address => mode,
            _ => {
                let word = u64::from_le_bytes(self.read::<8>(address)?);
                let mode = TileMode::decode(word, image.element_bytes);
                image.last_tile.set(Some((address, mode)));
                mode
            }
        };
        mode.stored_pixel(x, y).ok_or_else(|| {
            invalid(format!(
                "compression mode {mode:?} of the tile of texel ({x}, {y}) of level {level} (not modelled)"
            ))
        })
    }

    /// Sampler `index`, and its border colour: a fixed one, or for a
    /// `Custom` border in the sampler heap the 16-byte `CustomBorder` that
    /// follows it (read as four 32-bit floats). `None` for a custom border
    /// of a bound sampler (not modelled).
    fn sampler(&self, index: u32) -> Result<(Sampler, Option<[f32; 4]>), IoError> {
        let bound_here = bound(self.samplers, index, 8).is_some();
        let (sampler, address) = self.sampler_at(index)?;
        let colour = match border(sampler.border_colour) {
            Some(fixed) => Some(fixed),
            None if !bound_here => {
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
                let b = CustomBorder::decode_fields(&self.read::<16>(address + 8)?);
                Some([b.channel_0, b.channel_1, b.channel_2, b.channel_3].map(f32::from_bits))
            }
            None => None,
        };
        Ok((sampler, colour))
    }

    fn sampler_at(&self, index: u32) -> Result<(Sampler, u64), IoError> {
        let address = match bound(self.samplers, index, 8) {
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
    /// swizzle.
    fn texel(
        &self,
        image: &Image,
        level: u32,
        x: u32,
        y: u32,
        layer: u32,
    ) -> Result<[u32; 4], IoError> {
        let (x, y) = self.stored_texel(image, level, x, y, layer)?;
        let offset = image
            .layout
            .offset(level, x, y, layer)
            .ok_or_else(|| invalid(format!("texel ({x}, {y}) of level {level}")))?;
        // At most four 32-bit channels.
        let mut element = [0u8; 16];
        let bytes = element
            .get_mut(..image.element_bytes as usize)
            .ok_or_else(|| invalid(format!("{}-byte texels", image.element_bytes)))?;
        crate::usc::GpuMemory::read(
            &self.vm,
            image.texture.address.wrapping_add(offset),
            bytes,
            crate::usc::AccessKind::Read,
        )?;
        let one = if image.integer { 1 } else { 1.0f32.to_bits() };
        let mut out = [0, 0, 0, one];
        for (c, value) in out.iter_mut().enumerate().take(image.channels) {
            let at = if image.element.packed() {
                0
            } else {
                c << image.element.shift()
            };
            *value = formats::load(image.element, &bytes[at..], c, false);
        }
        Ok(out)
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
        let mut image: Option<(TextureHandle, Image)> = None;
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
            // one is read), nor does a sample of an integer texture (refused
            // before the sampler, as a lone request was).
            let sampled = !request.load && (request.gather.is_some() || !image.integer);
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
            *out = self.request(image, sampler, request)?;
        }
        Ok(())
    }

    /// Serves one lane's request with its decoded image and sampler.
    fn request(
        &self,
        image: &Image,
        sampler: Option<&SamplerState>,
        request: &TextureRequest,
    ) -> Result<[u32; 4], IoError> {
        let t = &image.texture;
        let mut request = *request;
        if t.dimension == TextureDimension::D1 {
            // Only x is a coordinate: read the row's centre.
            request.coords[1] = if request.load { 0 } else { 0.5f32.to_bits() };
        }
        let request = &request;
        let layer = if t.dimension == TextureDimension::D2Array {
            request.coords[2]
        } else {
            0
        };
        let swizzle = |raw: [u32; 4]| {
            [t.swizzle_r, t.swizzle_g, t.swizzle_b, t.swizzle_a].map(|s| {
                let one = if image.integer { 1 } else { 1.0f32.to_bits() };
                match s {
                    Channel::R => raw[0],
                    Channel::G => raw[1],
                    Channel::B => raw[2],
                    Channel::A => raw[3],
                    Channel::One => one,
                    _ => 0,
                }
            })
        };
        let swizzled = if let Some(component) = request.gather {
            if request.load {
                return Err(invalid("a gather by texture_load".into()));
            }
            let Some(&(sampler, border)) = sampler else {
                return Err(invalid("a gather without a sampler".into()));
            };
            let layer = layer.min(image.layers.saturating_sub(1));
            let texels = self.gather(image, &sampler, border, request, layer)?;
            texels.map(|texel| swizzle(texel)[component & 3])
        } else {
            swizzle(self.unswizzled(image, sampler, request, layer)?)
        };
        Ok(if request.half && !image.integer {
            swizzled.map(|bits| u32::from(crate::usc::float::f32_to_half(f32::from_bits(bits))))
        } else {
            swizzled
        })
    }

    /// A load's texel or a sample's filtered value, before the swizzle.
    fn unswizzled(
        &self,
        image: &Image,
        sampler: Option<&SamplerState>,
        request: &TextureRequest,
        layer: u32,
    ) -> Result<[u32; 4], IoError> {
        let t = &image.texture;
        Ok(if request.load {
            let level = match request.lod {
                LodArgument::Explicit(l) => l as u32,
                _ => 0,
            }
            .saturating_add(t.first_level);
            // Out-of-bounds loads return zero (robust access).
            let [dx, dy, _] = request.offset_texels;
            let x = i64::from(request.coords[0]) + i64::from(dx);
            let y = i64::from(request.coords[1]) + i64::from(dy);
            let inside = level < 32
                && (0..i64::from((t.width >> level).max(1))).contains(&x)
                && (0..i64::from((t.height >> level).max(1))).contains(&y)
                && layer < image.layers;
            let (x, y) = (x as u32, y as u32);
            if inside && image.layout.offset(level, x, y, layer).is_some() {
                self.texel(image, level, x, y, layer)?
            } else {
                [0; 4]
            }
        } else {
            if image.integer {
                return Err(invalid("sampling an integer texture".into()));
            }
            let Some(&(sampler, border)) = sampler else {
                return Err(invalid("a sample without a sampler".into()));
            };
            // Sampling clamps the layer (as Vulkan and GL specify).
            let layer = layer.min(image.layers.saturating_sub(1));
            self.sample(image, &sampler, border, request, layer)?
        })
    }

    /// The four texels of a gather: the 2x2 footprint of bilinear
    /// filtering at the base level, whatever the sampler's filters and the
    /// LOD, each compared with the reference when the sampler compares.
    fn gather(
        &self,
        image: &Image,
        sampler: &Sampler,
        border: Option<[f32; 4]>,
        request: &TextureRequest,
        layer: u32,
    ) -> Result<Quad, IoError> {
        let t = &image.texture;
        let (s, u) = self.normalised(image, sampler, request);
        let reference = sampler
            .compare_enable
            .then(|| request.compare.unwrap_or(0.0));
        let at = Footprint {
            level: t.first_level,
            s,
            t: u,
            layer,
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
        border: Option<[f32; 4]>,
        request: &TextureRequest,
        layer: u32,
    ) -> Result<[u32; 4], IoError> {
        let t = &image.texture;
        let (w, h) = (t.width as f32, t.height as f32);
        let (s, u) = self.normalised(image, sampler, request);
        let lod = match request.lod {
            LodArgument::Explicit(l) => l,
            LodArgument::Auto { ddx, ddy, bias } => rho_lod(ddx, ddy, w, h) + bias,
            LodArgument::Gradient { ddx, ddy } => rho_lod(ddx, ddy, w, h),
        };
        // The sampler's range, its minimum raised by the instruction's;
        // max-then-min, so a descriptor whose minimum exceeds its maximum
        // gives the maximum (as Vulkan's clamp does) rather than a panic.
        let min_lod = match request.min_lod {
            Some(min) => sampler.min_lod.to_f32().max(min),
            None => sampler.min_lod.to_f32(),
        };
        let lod = lod.max(min_lod).min(sampler.max_lod.to_f32());
        let max_level = t.last_level.saturating_sub(t.first_level) as f32;
        let filter = if lod <= 0.0 {
            sampler.magnify
        } else {
            sampler.minify
        };
        let reference = if sampler.compare_enable {
            Some(request.compare.unwrap_or(0.0))
        } else {
            None
        };
        let at_level = |level: f32| -> Result<[f32; 4], IoError> {
            let level = level.clamp(0.0, max_level) as u32 + t.first_level;
            let at = Footprint {
                level,
                s,
                t: u,
                layer,
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
        border: Option<[f32; 4]>,
        at: &Footprint,
        (x, y): (i64, i64),
        reference: Option<f32>,
    ) -> Result<[u32; 4], IoError> {
        let width = (image.texture.width >> at.level).max(1) as i64;
        let height = (image.texture.height >> at.level).max(1) as i64;
        let (Some(x), Some(y)) = (
            wrap(sampler.wrap_s, x, width),
            wrap(sampler.wrap_t, y, height),
        ) else {
            let colour =
                border.ok_or_else(|| invalid("custom border colours of bound samplers".into()))?;
            return Ok(colour.map(f32::to_bits));
        };
        let raw = self.texel(image, at.level, x as u32, y as u32, at.layer)?;
        Ok(match reference {
            Some(r) => {
                let pass = compare(sampler.compare_func, r, f32::from_bits(raw[0]));
                let v = if pass { 1.0f32 } else { 0.0 };
                [v, v, v, 1.0].map(f32::to_bits)
            }
            None => raw,
        })
    }

    /// The 2x2 texels bilinear filtering reads at `at`, [t00, t10, t01,
    /// t11] (x then y), and the weights of x1 and y1.
    fn footprint(
        &self,
        image: &Image,
        sampler: &Sampler,
        border: Option<[f32; 4]>,
        at: &Footprint,
        reference: Option<f32>,
    ) -> Result<(Quad, (f32, f32)), IoError> {
        let (u, v) = at.texel_space(image);
        let (u, v) = (u - 0.5, v - 0.5);
        // Coordinates from registers may be huge or infinite: the casts
        // saturate, and so must the neighbours.
        let (x0, y0) = (u.floor() as i64, v.floor() as i64);
        let (x1, y1) = (x0.saturating_add(1), y0.saturating_add(1));
        let mut texels = [[0u32; 4]; 4];
        for (texel, xy) in texels
            .iter_mut()
            .zip([(x0, y0), (x1, y0), (x0, y1), (x1, y1)])
        {
            *texel = self.wrapped_texel(image, sampler, border, at, xy, reference)?;
        }
        Ok((texels, (u - u.floor(), v - v.floor())))
    }

    fn filter_level(
        &self,
        image: &Image,
        sampler: &Sampler,
        border: Option<[f32; 4]>,
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
                let (u, v) = at.texel_space(image);
                let xy = (u.floor() as i64, v.floor() as i64);
                let texel = self.wrapped_texel(image, sampler, border, at, xy, reference)?;
                Ok(texel.map(f32::from_bits))
            }
            other => Err(invalid(format!("{other:?} filtering"))),
        }
    }
}

/// A decoded sampler and its border colour (`None`: a custom border of a
/// bound sampler, not modelled).
type SamplerState = (Sampler, Option<[f32; 4]>);

/// The four texels of a 2x2 footprint, raw.
type Quad = [[u32; 4]; 4];

/// Where a sample reads: a level and layer, normalised coordinates, and
/// the instruction's texel offsets.
struct Footprint {
    level: u32,
    s: f32,
    t: f32,
    layer: u32,
    offset: [i32; 3],
}

impl Footprint {
    /// The coordinates in texels of the level, offsets added (an offset
    /// moves every texel the filter reads by whole texels).
    fn texel_space(&self, image: &Image) -> (f32, f32) {
        let width = (image.texture.width >> self.level).max(1) as f32;
        let height = (image.texture.height >> self.level).max(1) as f32;
        (
            self.s * width + self.offset[0] as f32,
            self.t * height + self.offset[1] as f32,
        )
    }
}

/// The level of detail from coordinate derivatives (normalised units).
fn rho_lod(ddx: [f32; 3], ddy: [f32; 3], w: f32, h: f32) -> f32 {
    let x = ((ddx[0] * w).powi(2) + (ddx[1] * h).powi(2)).sqrt();
    let y = ((ddy[0] * w).powi(2) + (ddy[1] * h).powi(2)).sqrt();
    x.max(y).max(f32::MIN_POSITIVE).log2()
}

/// A texel coordinate through a wrap mode; `None` for the border.
pub fn wrap(mode: Wrap, i: i64, size: i64) -> Option<i64> {
    Some(match mode {
        Wrap::Repeat => i.rem_euclid(size),
        Wrap::MirroredRepeat => {
            let period = i.rem_euclid(2 * size);
            if period < size {
                period
            } else {
                2 * size - 1 - period
            }
        }
        Wrap::ClampToBorder => {
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

/// A fixed border colour (`None`: custom).
fn border(colour: BorderColour) -> Option<[f32; 4]> {
    match colour {
        BorderColour::TransparentBlack => Some([0.0; 4]),
        BorderColour::OpaqueBlack => Some([0.0, 0.0, 0.0, 1.0]),
        BorderColour::OpaqueWhite => Some([1.0; 4]),
        _ => None,
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
