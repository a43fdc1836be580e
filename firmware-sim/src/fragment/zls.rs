//! ZLS, the depth/stencil load and store unit: at the start of a tile it
//! loads depth and stencil from their planes (or takes the pass's clear
//! values), at the end it stores them back, as the pass's ZLS control
//! word says.
//!
//! A plane is an image of `isp_zls_pixels` pixels in the layout the
//! control word names (GPU-tiled or twiddled, `agx_hw::layout`; one
//! element per pixel holding its samples side by side), 32-bit float or
//! 16-bit unorm depth or 8-bit stencil, layers whole pages apart
//! (`ZlsLayerStride`). A compressed plane has compression metadata as a
//! compressed colour image does (over 16x16 *samples* when multisampled):
//! loads read solid tiles from their first sample, stores write pixels
//! uncompressed and mark their tiles so.

use agx_fwif::messages::{FaultUnit, RenderPass, ZlsSurface};
use agx_hw::formats::{ZlsControl, ZlsFormat, ZlsLayerStride, ZlsMetaStride, ZlsPixels, ZlsTiling};
use agx_hw::layout::{
    morton, sample_space_pixel, sample_space_position, sample_space_stretch, tile_word,
    uncompressed_subtile_mode, CompressionLayout, ImageLayout, TileMode, COMPRESSION_TILE_PX,
    PAGE_BYTES,
};

use super::tilebuffer::Tilebuffer;
use crate::fault::{memory_fault, unsupported, EngineResult};
use crate::memory::GpuVm;
use crate::usc::formats::{self, ElementFormat};
use crate::usc::{AccessKind, GpuMemory, MemoryFault};

/// One plane (depth or stencil) as a load or a store sees it.
struct Plane {
    base: u64,
    /// Width and height in pixels (the layout's).
    size_px: (u32, u32),
    layout: ImageLayout,
    layer_stride_bytes: u64,
    /// Bytes of one sample's value.
    sample_bytes: usize,
    samples: usize,
    /// Metadata: its layout (one layer), base, layer stride, and the
    /// word that marks a tile uncompressed.
    meta: Option<(CompressionLayout, u64, u64, u64)>,
    /// A metadata word in no known mode was met (and logged) in this pass.
    stale_logged: std::sync::atomic::AtomicBool,
    /// The Z-order offsets (in elements, from its corner) of the pixels
    /// of an aligned tile inside one of the layout's squares, row by
    /// row, for the tile size they were made for, with the lowest and
    /// highest of them.
    tile_steps: std::sync::OnceLock<TileSteps>,
}

impl Plane {
    fn new(
        surface: &ZlsSurface,
        render: &RenderPass,
        tiling: ZlsTiling,
        compressed: bool,
        sample_bytes: usize,
    ) -> Result<Plane, EngineResult> {
        let pixels = ZlsPixels::unpack(&render.isp_zls_pixels.to_le_bytes()).value;
        let samples = render.samples.max(1) as usize;
        let element_bytes = (sample_bytes * samples) as u32;
        let refuse = |what: String| unsupported(surface.base.get(), FaultUnit::Zls, what);
        let layout = match tiling {
            ZlsTiling::Gpu => {
                ImageLayout::gpu_tiled(pixels.width, pixels.height, 1, element_bytes, false)
                    .ok_or_else(|| refuse(format!("{element_bytes}-byte depth/stencil elements")))?
            }
            ZlsTiling::Twiddled => {
                ImageLayout::twiddled(pixels.width, pixels.height, 1, element_bytes)
            }
            ZlsTiling::Unknown(v) => return Err(refuse(format!("ZLS tiling {v}"))),
        };
        let pages = ZlsLayerStride::unpack(&surface.stride.to_le_bytes())
            .value
            .pages;
        // A plane with a side under one compression tile is stored
        // uncompressed although its image is compressed (as a small mip
        // level of a compressed image is). A multisampled plane's
        // metadata covers tiles of 16x16 samples, as a colour image's.
        let (fx, fy) = sample_space_stretch(samples as u32);
        let meta_layout = CompressionLayout::new(pixels.width * fx, pixels.height * fy, 1)
            .filter(|meta| compressed && meta.level_compressed(0));
        let meta = if let Some(meta) = meta_layout {
            if tiling != ZlsTiling::Gpu {
                return Err(refuse(format!(
                    "a compressed {tiling:?} depth/stencil plane"
                )));
            }
            let lines = ZlsMetaStride::unpack(&surface.comp_stride.to_le_bytes())
                .value
                .cachelines;
            let word = uncompressed_subtile_mode(sample_bytes as u32)
                .map(tile_word)
                .ok_or_else(|| {
                    refuse(format!(
                        "compressed {sample_bytes}-byte depth/stencil samples"
                    ))
                })?;
            Some((meta, surface.comp_base.get(), u64::from(lines) * 128, word))
        } else {
            None
        };
        Ok(Plane {
            base: surface.base.get(),
            size_px: (pixels.width, pixels.height),
            layout,
            layer_stride_bytes: u64::from(pages) * PAGE_BYTES,
            sample_bytes,
            samples,
            meta,
            stale_logged: std::sync::atomic::AtomicBool::new(false),
            tile_steps: std::sync::OnceLock::new(),
        })
    }

    /// The address of pixel (x, y)'s element in `layer`, or `None` past
    /// the plane.
    fn element(&self, x: u32, y: u32, layer: u32) -> Option<u64> {
        let offset = self.layout.offset(0, x, y, 0)?;
        Some(
            self.base
                .wrapping_add(u64::from(layer).wrapping_mul(self.layer_stride_bytes))
                .wrapping_add(offset),
        )
    }

    /// The address of the metadata word of the compression tile holding
    /// sample-space position (x, y).
    fn tile_word(&self, x: u32, y: u32, layer: u32) -> Option<u64> {
        let (meta, base, stride, _) = self.meta.as_ref()?;
        let at = meta.tile_word_offset(0, x, y, 0)?;
        Some(
            base.wrapping_add(u64::from(layer).wrapping_mul(*stride))
                .wrapping_add(at),
        )
    }

    /// The elements of the tile at `origin` (`size` pixels) in row-major
    /// order, as (pixel index, address), pixels past the plane left out;
    /// and, when they fill one span of memory exactly and inside one page
    /// (a tile of a twiddled or GPU-tiled plane aligned to the layout's
    /// squares), that span's address and length, which one access then
    /// reads or writes: it faults, if at all, as a whole at the page,
    /// and the elements are then accessed one by one, so a fault names
    /// the first element's address as before.
    fn tile_elements(
        &self,
        origin: (u32, u32),
        size: (u32, u32),
        layer: u32,
    ) -> (TileElements<'_>, Option<Span>) {
        let element_bytes = (self.sample_bytes * self.samples) as u64;
        // In a square of the layout aligned to its side, elements follow
        // one another in Z order: one offset per square (for the first of
        // its pixels inside the plane: its corner), then Z-order steps.
        let square = self.layout.aligned_square(0).unwrap_or(1);
        // A tile inside the plane and inside one such square, aligned to
        // its own sides (powers of two): the Z order of the square from
        // the tile's corner is the tile's own (the corner's bits and the
        // pixel's within the tile do not overlap), the same offsets for
        // every such tile, kept with the plane.
        let inside = origin
            .0
            .checked_add(size.0)
            .is_some_and(|x| x <= self.size_px.0)
            && origin
                .1
                .checked_add(size.1)
                .is_some_and(|y| y <= self.size_px.1);
        let aligned = size.0.is_power_of_two()
            && size.1.is_power_of_two()
            && origin.0.is_multiple_of(size.0)
            && origin.1.is_multiple_of(size.1)
            && square >= size.0.max(size.1);
        if inside && aligned {
            if let Some(corner) = self.element(origin.0, origin.1, layer) {
                let steps = self.tile_steps.get_or_init(|| {
                    let steps: Vec<u64> = (0..size.1)
                        .flat_map(|y| (0..size.0).map(move |x| morton(x, y)))
                        .collect();
                    let lowest = steps.iter().copied().min().unwrap_or(0);
                    let highest = steps.iter().copied().max().unwrap_or(0);
                    (size, steps, (lowest, highest))
                });
                if steps.0 == size {
                    let (lowest, highest) = steps.2;
                    let span = Self::one_span(
                        corner.wrapping_add(lowest * element_bytes),
                        corner.wrapping_add(highest * element_bytes),
                        element_bytes,
                        steps.1.len(),
                    );
                    let elements = TileElements::Steps {
                        corner,
                        steps: &steps.1,
                        element_bytes,
                    };
                    return (elements, span);
                }
            }
        }
        let mut elements = Vec::with_capacity((size.0 * size.1) as usize);
        let (mut lowest, mut highest) = (u64::MAX, 0);
        let mut corner: Option<((u32, u32), Option<u64>)> = None;
        for y in 0..size.1 {
            for x in 0..size.0 {
                let (px, py) = (origin.0 + x, origin.1 + y);
                let at = if square > 1 {
                    let c = (px & !(square - 1), py & !(square - 1));
                    let corner_at = match corner {
                        Some((kept, at)) if kept == c => at,
                        _ => corner.insert((c, self.element(c.0, c.1, layer))).1,
                    };
                    corner_at.and_then(|at| {
                        let (width, height) = self.size_px;
                        (px < width && py < height)
                            .then(|| at.wrapping_add(morton(px - c.0, py - c.1) * element_bytes))
                    })
                } else {
                    self.element(px, py, layer)
                };
                if let Some(at) = at {
                    elements.push(((y * size.0 + x) as usize, at));
                    lowest = lowest.min(at);
                    highest = highest.max(at);
                }
            }
        }
        let span = Self::one_span(lowest, highest, element_bytes, elements.len());
        (TileElements::Listed(elements), span)
    }

    /// The span from `lowest` to `highest` (element addresses) when
    /// `count` elements fill it exactly and it lies inside one page.
    fn one_span(lowest: u64, highest: u64, element_bytes: u64, count: usize) -> Option<Span> {
        highest
            .checked_sub(lowest)
            .and_then(|d| d.checked_add(element_bytes))
            .filter(|&span| {
                span == count as u64 * element_bytes
                    && lowest / PAGE_BYTES == (lowest + span - 1) / PAGE_BYTES
            })
            .map(|span| (lowest, span as usize))
    }

    /// Reads the elements of the tile at `origin` (`size` pixels) and
    /// hands each to `put` (pixel index, element bytes), skipping pixels
    /// past the plane. Through the metadata of a compressed plane, each
    /// sample is read where its compression tile stores it (a solid
    /// tile's value is sample 0 of its first pixel); a word in no known
    /// mode is read as uncompressed and logged.
    fn load(
        &self,
        vm: &GpuVm<'_>,
        origin: (u32, u32),
        size: (u32, u32),
        layer: u32,
        mut put: impl FnMut(usize, &[u8]),
    ) -> Result<(), EngineResult> {
        let fault = |f: MemoryFault| memory_fault(&f, FaultUnit::Zls);
        let element_bytes = self.sample_bytes * self.samples;
        let mut element = [0u8; MAX_ELEMENT_BYTES];
        let element = &mut element[..element_bytes];
        // The compression tile last looked up: its word's address and mode.
        let mut last: Option<(u64, TileMode)> = None;
        let samples = self.samples as u32;
        if self.meta.is_none() {
            let (elements, span) = self.tile_elements(origin, size, layer);
            if let Some((lowest, len)) = span {
                let mut bytes = vec![0u8; len];
                if GpuMemory::read(vm, lowest, &mut bytes, AccessKind::Read).is_ok() {
                    return elements.try_each(|pixel, at| {
                        let from = (at - lowest) as usize;
                        put(pixel, &bytes[from..from + element_bytes]);
                        Ok(())
                    });
                }
            }
            return elements.try_each(|pixel, at| {
                GpuMemory::read(vm, at, element, AccessKind::Read).map_err(fault)?;
                put(pixel, element);
                Ok(())
            });
        }
        for y in 0..size.1 {
            for x in 0..size.0 {
                let (px, py) = (origin.0 + x, origin.1 + y);
                if self.element(px, py, layer).is_none() {
                    continue;
                }
                for sample in 0..samples {
                    let (sx, sy) = sample_space_position(px, py, sample, samples);
                    let (mut qx, mut qy, mut qs) = (px, py, sample);
                    if let Some(word_at) = self.tile_word(sx, sy, layer) {
                        let mode = match last {
                            Some((at, mode)) if at == word_at => mode,
                            _ => {
                                let mut word = [0u8; 8];
                                GpuMemory::read(vm, word_at, &mut word, AccessKind::Read)
                                    .map_err(fault)?;
                                let mode = TileMode::decode(
                                    u64::from_le_bytes(word),
                                    self.sample_bytes as u32,
                                );
                                last = Some((word_at, mode));
                                mode
                            }
                        };
                        if let Some((tx, ty)) = mode.stored_pixel(sx, sy) {
                            (qx, qy, qs) = sample_space_pixel(tx, ty, samples);
                        } else {
                            self.log_stale(word_at, mode);
                        }
                    }
                    let bytes = self.sample_bytes;
                    let range = sample as usize * bytes..(sample as usize + 1) * bytes;
                    let Some(stored) = self.element(qx, qy, layer) else {
                        element[range].fill(0);
                        continue;
                    };
                    GpuMemory::read(
                        vm,
                        stored.wrapping_add(u64::from(qs) * bytes as u64),
                        &mut element[range],
                        AccessKind::Read,
                    )
                    .map_err(fault)?;
                }
                put((y * size.0 + x) as usize, element);
            }
        }
        Ok(())
    }

    /// A metadata word in no known mode is read as uncompressed, as an
    /// all-zero one is: Mesa does not initialise a compressed resource's
    /// metadata, so a fresh allocation holds whatever the memory held
    /// before, and a pass loading it (then drawing over it) runs on the
    /// hardware, which decodes that word somehow (how is not public).
    /// Logged once per plane and pass.
    fn log_stale(&self, word_at: u64, mode: TileMode) {
        if !self
            .stale_logged
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                unit = ?FaultUnit::Zls,
                address = format_args!("{word_at:#x}"),
                "compression metadata in no known mode ({mode:?}): read as uncompressed"
            );
        }
    }

    /// Writes the tile at `origin`, each element filled by `fill` (pixel
    /// index, element bytes), clipped to the plane, and marks its
    /// compression tiles uncompressed.
    fn store(
        &self,
        writer: &mut GpuVm<'_>,
        origin: (u32, u32),
        size: (u32, u32),
        layer: u32,
        fill: impl Fn(usize, &mut [u8]),
    ) -> Result<(), EngineResult> {
        let fault = |f: MemoryFault| memory_fault(&f, FaultUnit::Zls);
        let element_bytes = self.sample_bytes * self.samples;
        let (elements, span) = self.tile_elements(origin, size, layer);
        let mut written = false;
        if let Some((lowest, len)) = span {
            let mut bytes = vec![0u8; len];
            elements.try_each(|pixel, at| {
                let from = (at - lowest) as usize;
                fill(pixel, &mut bytes[from..from + element_bytes]);
                Ok::<(), EngineResult>(())
            })?;
            written = writer.write(lowest, &bytes).is_ok();
        }
        if !written {
            let mut element = [0u8; MAX_ELEMENT_BYTES];
            let element = &mut element[..element_bytes];
            elements.try_each(|pixel, at| {
                fill(pixel, element);
                writer.write(at, element).map_err(fault)
            })?;
        }
        if let Some((_, _, _, word)) = &self.meta {
            // Render tiles are whole compression tiles in sample space.
            let t = COMPRESSION_TILE_PX;
            let (fx, fy) = sample_space_stretch(self.samples as u32);
            for y in (0..size.1 * fy).step_by(t as usize) {
                for x in (0..size.0 * fx).step_by(t as usize) {
                    if let Some(at) = self.tile_word(origin.0 * fx + x, origin.1 * fy + y, layer) {
                        writer.write(at, &word.to_le_bytes()).map_err(fault)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A range of memory: its address and length in bytes.
type Span = (u64, usize);

/// The Z-order steps of an aligned tile's pixels, for the tile size they
/// were made for, and the lowest and highest step.
type TileSteps = ((u32, u32), Vec<u64>, (u64, u64));

/// The elements of a tile of a plane, each a pixel index (row-major in
/// the tile) and the element's address.
enum TileElements<'a> {
    /// Pixel `i`'s element at `corner + steps[i] * element_bytes`.
    Steps {
        corner: u64,
        steps: &'a [u64],
        element_bytes: u64,
    },
    /// Listed (pixels past the plane left out).
    Listed(Vec<(usize, u64)>),
}

impl TileElements<'_> {
    /// Calls `f` with each element in order, stopping at its first error.
    fn try_each<E>(&self, mut f: impl FnMut(usize, u64) -> Result<(), E>) -> Result<(), E> {
        match self {
            TileElements::Steps {
                corner,
                steps,
                element_bytes,
            } => {
                for (pixel, &step) in steps.iter().enumerate() {
                    f(pixel, corner.wrapping_add(step * element_bytes))?;
                }
            }
            TileElements::Listed(elements) => {
                for &(pixel, at) in elements {
                    f(pixel, at)?;
                }
            }
        }
        Ok(())
    }
}

/// Bytes of the largest element: four samples of 32-bit depth.
const MAX_ELEMENT_BYTES: usize = 16;

/// The element format of a depth plane (32-bit float depth is stored as
/// its bits).
fn depth_element(format: ZlsFormat) -> ElementFormat {
    if format == ZlsFormat::Unorm16 {
        ElementFormat::Unorm16
    } else {
        ElementFormat::I32
    }
}

fn depth_bytes(format: ZlsFormat) -> usize {
    if format == ZlsFormat::Unorm16 {
        2
    } else {
        4
    }
}

/// The depth and stencil planes a pass loads and stores, decoded once per
/// pass from its ZLS control word and surfaces.
pub(super) struct ZlsPlanes {
    depth: ElementFormat,
    depth_bytes: usize,
    /// The depth and stencil a tile starts with when not loaded.
    clear: (f32, u8),
    z_load: Option<Plane>,
    s_load: Option<Plane>,
    z_store: Option<Plane>,
    s_store: Option<Plane>,
    tile: (u32, u32),
}

impl ZlsPlanes {
    pub(super) fn new(render: &RenderPass, zls: &ZlsControl) -> Result<ZlsPlanes, EngineResult> {
        let depth = depth_element(zls.z_format);
        let depth_bytes = depth_bytes(zls.z_format);
        // `isp_bgobjdepth` is in the depth format.
        let clear_bits = render.zls.clear_depth.to_le_bytes();
        let clear_depth = f32::from_bits(formats::load(depth, &clear_bits, 0, false));
        let plane = |on: bool, surface, tiling, compressed, bytes| {
            on.then(|| Plane::new(surface, render, tiling, compressed, bytes))
                .transpose()
        };
        Ok(ZlsPlanes {
            depth,
            depth_bytes,
            clear: (clear_depth, render.zls.clear_stencil as u8),
            z_load: plane(
                zls.z_load_enable,
                &render.zls.z_load,
                zls.z_load_tiling,
                zls.z_load_compress,
                depth_bytes,
            )?,
            s_load: plane(
                zls.s_load_enable,
                &render.zls.s_load,
                zls.s_load_tiling,
                zls.s_load_compress,
                1,
            )?,
            z_store: plane(
                zls.z_store_enable,
                &render.zls.z_store,
                zls.z_store_tiling,
                zls.z_store_compress,
                depth_bytes,
            )?,
            s_store: plane(
                zls.s_store_enable,
                &render.zls.s_store,
                zls.s_store_tiling,
                zls.s_store_compress,
                1,
            )?,
            tile: (render.utile_width_px, render.utile_height_px),
        })
    }

    /// What the pass's depth and stencil stores may write: per stored
    /// plane and layer, the span of its bytes (first byte, byte past the
    /// last) and the plane's name.
    pub(super) fn stored_spans(&self, layers: u32) -> Vec<(u64, u64, &'static str)> {
        let mut spans = Vec::new();
        for (plane, what) in [(&self.z_store, "depth"), (&self.s_store, "stencil")] {
            let Some(plane) = plane else { continue };
            let Some((_, bytes)) = plane.layout.level_span(0..=0, 0, 0) else {
                continue;
            };
            for layer in 0..layers.clamp(1, crate::texture::MAX_LISTED_LAYERS) {
                let start = plane
                    .base
                    .wrapping_add(u64::from(layer).wrapping_mul(plane.layer_stride_bytes));
                spans.push((start, start.wrapping_add(bytes), what));
            }
            if layers > crate::texture::MAX_LISTED_LAYERS {
                // The rest of the layers, as one span.
                let start = plane.base;
                let end = start.wrapping_add(
                    u64::from(layers).wrapping_mul(plane.layer_stride_bytes.max(bytes)),
                );
                spans.push((start, end, what));
            }
        }
        spans
    }

    /// Starts a tile's depth and stencil: loaded from the planes when the
    /// ZLS control says so, else the pass's clear values.
    pub(super) fn load(
        &self,
        vm: &GpuVm<'_>,
        tile: &mut Tilebuffer,
        at: (u32, u32),
        layer: u32,
    ) -> Result<(), EngineResult> {
        let origin = (at.0 * self.tile.0, at.1 * self.tile.1);
        tile.depth.fill(self.clear.0);
        tile.stencil.fill(self.clear.1);
        if let Some(plane) = &self.z_load {
            let (depth, samples, bytes) = (&mut tile.depth, plane.samples, self.depth_bytes);
            // 32-bit float depth is its bits: copied as they are.
            let bits = self.depth == ElementFormat::I32;
            if bits && samples == 1 {
                // One 32-bit float a pixel: its bits as they are.
                plane.load(vm, origin, self.tile, layer, |pixel, element| {
                    if let (Some(value), Ok(word)) =
                        (depth.get_mut(pixel), <[u8; 4]>::try_from(element))
                    {
                        *value = f32::from_bits(u32::from_le_bytes(word));
                    }
                })?;
            } else {
                plane.load(vm, origin, self.tile, layer, |pixel, element| {
                    for (s, value) in element.chunks_exact(bytes).enumerate() {
                        depth[pixel * samples + s] = f32::from_bits(match value {
                            &[a, b, c, d] if bits => u32::from_le_bytes([a, b, c, d]),
                            _ => formats::load(self.depth, value, 0, false),
                        });
                    }
                })?;
            }
        }
        if let Some(plane) = &self.s_load {
            let (stencil, samples) = (&mut tile.stencil, plane.samples);
            plane.load(vm, origin, self.tile, layer, |pixel, element| {
                stencil[pixel * samples..pixel * samples + element.len()].copy_from_slice(element);
            })?;
        }
        Ok(())
    }

    /// Ends a tile's depth and stencil: stored when the ZLS control says
    /// so (whole tiles, clipped to the planes: the ZLS does not know the
    /// render area).
    pub(super) fn store(
        &self,
        vm: &GpuVm<'_>,
        tile: &Tilebuffer,
        at: (u32, u32),
        layer: u32,
    ) -> Result<(), EngineResult> {
        let mut writer = vm.clone();
        let origin = (at.0 * self.tile.0, at.1 * self.tile.1);
        if let Some(plane) = &self.z_store {
            let (samples, bytes) = (plane.samples, self.depth_bytes);
            let bits = self.depth == ElementFormat::I32;
            if bits && samples == 1 {
                // One 32-bit float a pixel: its bits as they are.
                plane.store(&mut writer, origin, self.tile, layer, |pixel, element| {
                    if let (Some(value), Some(out)) = (tile.depth.get(pixel), element.get_mut(..4))
                    {
                        out.copy_from_slice(&value.to_bits().to_le_bytes());
                    }
                })?;
            } else {
                plane.store(&mut writer, origin, self.tile, layer, |pixel, element| {
                    let depths = &tile.depth[pixel * samples..(pixel + 1) * samples];
                    for (value, out) in depths.iter().zip(element.chunks_exact_mut(bytes)) {
                        if bits {
                            out.copy_from_slice(&value.to_bits().to_le_bytes());
                        } else {
                            formats::store(self.depth, out, 0, value.to_bits(), false);
                        }
                    }
                })?;
            }
        }
        if let Some(plane) = &self.s_store {
            let samples = plane.samples;
            plane.store(&mut writer, origin, self.tile, layer, |pixel, element| {
                element.copy_from_slice(&tile.stencil[pixel * samples..(pixel + 1) * samples]);
            })?;
        }
        Ok(())
    }
}
