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
//! compressed colour image does: loads read solid tiles from their first
//! element, stores write pixels uncompressed and mark their tiles so.

use agx_fwif::messages::{FaultUnit, RenderPass, ZlsSurface};
use agx_hw::formats::{ZlsControl, ZlsFormat, ZlsLayerStride, ZlsMetaStride, ZlsPixels, ZlsTiling};
use agx_hw::layout::{
    tile_word, uncompressed_subtile_mode, CompressionLayout, ImageLayout, TileMode,
    COMPRESSION_TILE_PX, PAGE_BYTES,
};

use super::tilebuffer::Tilebuffer;
use crate::fault::{memory_fault, unsupported, EngineResult};
use crate::memory::GpuVm;
use crate::usc::{GpuMemory, MemoryFault};

/// One plane (depth or stencil) as a load or a store sees it.
struct Plane {
    base: u64,
    layout: ImageLayout,
    layer_stride_bytes: u64,
    /// Bytes of one sample's value.
    sample_bytes: usize,
    samples: usize,
    /// Metadata: its layout (one layer), base, layer stride, and the
    /// word that marks a tile uncompressed.
    meta: Option<(CompressionLayout, u64, u64, u64)>,
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
        let refuse = |what: String| {
            tracing::warn!(
                unit = "ZLS",
                address = format_args!("{:#x}", surface.base.get()),
                "refused: {what}"
            );
            unsupported(surface.base.get(), FaultUnit::Zls)
        };
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
        // level of a compressed image is).
        let meta_layout = CompressionLayout::new(pixels.width, pixels.height, 1)
            .filter(|meta| compressed && meta.level_compressed(0));
        let meta = if let Some(meta) = meta_layout {
            if samples > 1 {
                return Err(refuse("compressed multisampled depth/stencil".into()));
            }
            if tiling != ZlsTiling::Gpu {
                return Err(refuse(format!(
                    "a compressed {tiling:?} depth/stencil plane"
                )));
            }
            let lines = ZlsMetaStride::unpack(&surface.comp_stride.to_le_bytes())
                .value
                .cachelines;
            let word = uncompressed_subtile_mode(element_bytes)
                .map(tile_word)
                .ok_or_else(|| refuse(format!("compressed {element_bytes}-byte elements")))?;
            Some((meta, surface.comp_base.get(), u64::from(lines) * 128, word))
        } else {
            None
        };
        Ok(Plane {
            base: surface.base.get(),
            layout,
            layer_stride_bytes: u64::from(pages) * PAGE_BYTES,
            sample_bytes,
            samples,
            meta,
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
    /// (x, y).
    fn tile_word(&self, x: u32, y: u32, layer: u32) -> Option<u64> {
        let (meta, base, stride, _) = self.meta.as_ref()?;
        let at = meta.tile_word_offset(0, x, y, 0)?;
        Some(
            base.wrapping_add(u64::from(layer).wrapping_mul(*stride))
                .wrapping_add(at),
        )
    }

    /// Reads the elements of the tile at `origin` (`size` pixels) into
    /// `out` (pixel-major, samples together), leaving pixels past the
    /// plane as they are.
    fn load(
        &self,
        vm: &GpuVm<'_>,
        origin: (u32, u32),
        size: (u32, u32),
        layer: u32,
        mut put: impl FnMut(usize, &[u8]),
    ) -> Result<(), MemoryFault> {
        let element_bytes = self.sample_bytes * self.samples;
        let mut element = vec![0u8; element_bytes];
        // The mode of the compression tile last looked up: (its address,
        // whether it is solid).
        let mut mode: Option<(u64, bool)> = None;
        for y in 0..size.1 {
            for x in 0..size.0 {
                let (mut px, mut py) = (origin.0 + x, origin.1 + y);
                if let Some(word_at) = self.tile_word(px, py, layer) {
                    let solid = match mode {
                        Some((at, solid)) if at == word_at => solid,
                        _ => {
                            let mut word = [0u8; 8];
                            GpuMemory::read(vm, word_at, &mut word, crate::usc::AccessKind::Read)?;
                            let solid = match TileMode::decode(
                                u64::from_le_bytes(word),
                                element_bytes as u32,
                            ) {
                                TileMode::Solid => true,
                                TileMode::Uncompressed => false,
                                TileMode::Unknown(word) => {
                                    tracing::warn!(
                                        unit = "ZLS",
                                        address = format_args!("{word_at:#x}"),
                                        "compression mode {word:#018x} not modelled; loading the body"
                                    );
                                    false
                                }
                            };
                            mode = Some((word_at, solid));
                            solid
                        }
                    };
                    if solid {
                        px &= !(COMPRESSION_TILE_PX - 1);
                        py &= !(COMPRESSION_TILE_PX - 1);
                    }
                }
                let Some(at) = self.element(px, py, layer) else {
                    continue;
                };
                GpuMemory::read(vm, at, &mut element, crate::usc::AccessKind::Read)?;
                put((y * size.0 + x) as usize, &element);
            }
        }
        Ok(())
    }

    /// Writes the tile at `origin` from `get` (pixel index -> element
    /// bytes), clipped to the plane, and marks its compression tiles
    /// uncompressed.
    fn store(
        &self,
        writer: &mut GpuVm<'_>,
        origin: (u32, u32),
        size: (u32, u32),
        layer: u32,
        get: impl Fn(usize) -> Vec<u8>,
    ) -> Result<(), MemoryFault> {
        for y in 0..size.1 {
            for x in 0..size.0 {
                let Some(at) = self.element(origin.0 + x, origin.1 + y, layer) else {
                    continue;
                };
                writer.write(at, &get((y * size.0 + x) as usize))?;
            }
        }
        if let Some((_, _, _, word)) = &self.meta {
            let t = COMPRESSION_TILE_PX;
            for y in (0..size.1).step_by(t as usize) {
                for x in (0..size.0).step_by(t as usize) {
                    if let Some(at) = self.tile_word(origin.0 + x, origin.1 + y, layer) {
                        writer.write(at, &word.to_le_bytes())?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn depth_bytes(format: ZlsFormat) -> usize {
    if format == ZlsFormat::Unorm16 {
        2
    } else {
        4
    }
}

fn decode_depth(format: ZlsFormat, bytes: &[u8]) -> f32 {
    match format {
        ZlsFormat::Unorm16 => f32::from(u16::from_le_bytes([bytes[0], bytes[1]])) / 65535.0,
        _ => f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
    }
}

fn encode_depth(format: ZlsFormat, depth: f32) -> Vec<u8> {
    match format {
        ZlsFormat::Unorm16 => ((depth.clamp(0.0, 1.0) * 65535.0).round() as u16)
            .to_le_bytes()
            .to_vec(),
        _ => depth.to_le_bytes().to_vec(),
    }
}

/// The depth a tile starts with when it does not load: `isp_bgobjdepth`
/// in the depth format.
pub(super) fn clear_depth(format: ZlsFormat, bits: u32) -> f32 {
    match format {
        ZlsFormat::Unorm16 => f32::from(bits as u16) / 65535.0,
        _ => f32::from_bits(bits),
    }
}

/// Starts a tile's depth and stencil: loaded from the planes when the
/// ZLS control says so, else the pass's clear values.
pub(super) fn load_depth_stencil(
    vm: &GpuVm<'_>,
    render: &RenderPass,
    zls: &ZlsControl,
    tile: &mut Tilebuffer,
    at: (u32, u32),
    layer: u32,
) -> Result<(), EngineResult> {
    let size = (render.utile_width_px, render.utile_height_px);
    let origin = (at.0 * size.0, at.1 * size.1);
    tile.depth
        .fill(clear_depth(zls.z_format, render.zls.clear_depth));
    tile.stencil.fill(render.zls.clear_stencil as u8);
    if zls.z_load_enable {
        let bytes = depth_bytes(zls.z_format);
        let plane = Plane::new(
            &render.zls.z_load,
            render,
            zls.z_load_tiling,
            zls.z_load_compress,
            bytes,
        )?;
        let depth = &mut tile.depth;
        let samples = plane.samples;
        plane
            .load(vm, origin, size, layer, |pixel, element| {
                for (s, value) in element.chunks_exact(bytes).enumerate() {
                    depth[pixel * samples + s] = decode_depth(zls.z_format, value);
                }
            })
            .map_err(|f| memory_fault(&f, FaultUnit::Zls))?;
    }
    if zls.s_load_enable {
        let plane = Plane::new(
            &render.zls.s_load,
            render,
            zls.s_load_tiling,
            zls.s_load_compress,
            1,
        )?;
        let stencil = &mut tile.stencil;
        let samples = plane.samples;
        plane
            .load(vm, origin, size, layer, |pixel, element| {
                stencil[pixel * samples..pixel * samples + element.len()].copy_from_slice(element);
            })
            .map_err(|f| memory_fault(&f, FaultUnit::Zls))?;
    }
    Ok(())
}

/// Ends a tile's depth and stencil: stored when the ZLS control says so
/// (whole tiles, clipped to the planes: the ZLS does not know the render
/// area).
pub(super) fn store_depth_stencil(
    vm: &GpuVm<'_>,
    render: &RenderPass,
    zls: &ZlsControl,
    tile: &Tilebuffer,
    at: (u32, u32),
    layer: u32,
) -> Result<(), EngineResult> {
    let mut writer = vm.clone();
    let size = (render.utile_width_px, render.utile_height_px);
    let origin = (at.0 * size.0, at.1 * size.1);
    if zls.z_store_enable {
        let plane = Plane::new(
            &render.zls.z_store,
            render,
            zls.z_store_tiling,
            zls.z_store_compress,
            depth_bytes(zls.z_format),
        )?;
        let samples = plane.samples;
        plane
            .store(&mut writer, origin, size, layer, |pixel| {
                tile.depth[pixel * samples..(pixel + 1) * samples]
                    .iter()
                    .flat_map(|&d| encode_depth(zls.z_format, d))
                    .collect()
            })
            .map_err(|f| memory_fault(&f, FaultUnit::Zls))?;
    }
    if zls.s_store_enable {
        let plane = Plane::new(
            &render.zls.s_store,
            render,
            zls.s_store_tiling,
            zls.s_store_compress,
            1,
        )?;
        let samples = plane.samples;
        plane
            .store(&mut writer, origin, size, layer, |pixel| {
                tile.stencil[pixel * samples..(pixel + 1) * samples].to_vec()
            })
            .map_err(|f| memory_fault(&f, FaultUnit::Zls))?;
    }
    Ok(())
}
