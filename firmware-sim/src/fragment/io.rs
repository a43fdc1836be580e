//! What a per-tile program sees of the fixed-function units: the
//! tilebuffer (`ld_tile`, `st_tile`), coverage and sample masks, depth
//! emitted by the shader (`zs_emit`), varyings interpolated from the
//! primitive's coefficient registers, texturing, and the pixel back
//! end's block stores (`image_write_block`) to the render targets.

use agx_hw::formats::{FragmentFace, Layout, Pbe};

use super::depth::depth_passes;
use super::tilebuffer::Tilebuffer;
use crate::bind::Binding;
use crate::memory::GpuVm;
use crate::texture::{channel_format, TextureUnit};
use crate::usc::formats::{self, ElementFormat};
use crate::usc::io::{BlockStore, IoError, TextureHandle, TextureRequest, TileAccess};
use crate::usc::{GpuMemory, ShaderIo, LANES};
use agx_hw::layout::ImageLayout;

/// The fixed-function units of per-tile programs: the tilebuffer and the
/// pixel back end's block stores.
pub(super) struct TileIo<'a, 'b> {
    pub(super) tile: &'a mut Tilebuffer,
    /// The tile's first pixel in the render target.
    pub(super) origin: (u32, u32),
    /// The pixel (within the tile) each lane stands for.
    pub(super) lanes: [(u32, u32); LANES],
    pub(super) vm: GpuVm<'b>,
    pub(super) binding: &'a Binding,
    /// The render area.
    pub(super) area: (u32, u32),
    pub(super) layer: u32,
    /// The primitive's coefficient registers: planes (A, B, C) with
    /// value = A x + B y + C at window position (x, y).
    pub(super) coefficients: &'a [[f32; 3]],
    /// Helper lanes: they run for derivatives, their outputs are dropped.
    pub(super) helpers: u32,
    /// The texture unit.
    pub(super) unit: TextureUnit<'b>,
    /// Per pixel of the tile: discarded by the shader (sample_mask with
    /// no coverage, or a failed zs_emit depth test).
    pub(super) discarded: &'a mut [bool],
    /// Per sample of the tile: the depth to write once the shader is done.
    pub(super) pending_depth: &'a mut [Option<f32>],
    /// Per pixel of the tile: the samples this program covers.
    pub(super) coverage: &'a [u32],
    /// The primitive's depth state (for zs_emit).
    pub(super) face: Option<FragmentFace>,
}

pub(super) fn invalid(what: String) -> IoError {
    IoError::Invalid(what)
}

impl TileIo<'_, '_> {
    fn pixel(&self, lane: usize, access: &TileAccess) -> Result<(u32, u32), IoError> {
        let (x, y) = match access.explicit {
            Some((x, y)) => (u32::from(x), u32::from(y)),
            None => self.lanes[lane],
        };
        if x >= self.tile.width_px || y >= self.tile.height_px {
            return Err(invalid(format!("pixel ({x}, {y}) outside the tile")));
        }
        Ok((x, y))
    }

    fn element(&self, access: &TileAccess) -> Result<(ElementFormat, usize), IoError> {
        let format = ElementFormat::from_code(i64::from(access.format))
            .ok_or_else(|| invalid(format!("tilebuffer format {}", access.format)))?;
        let span = if format.packed() {
            4
        } else {
            4usize << format.shift()
        };
        let end = access.offset_bytes as usize + span;
        if end > self.tile.sample_bytes as usize {
            return Err(invalid(format!(
                "bytes {}..{end} past the {}-byte sample record",
                access.offset_bytes, self.tile.sample_bytes
            )));
        }
        Ok((format, access.offset_bytes as usize))
    }

    fn samples(&self, mask: u32) -> impl Iterator<Item = u32> + '_ {
        (0..self.tile.samples).filter(move |s| mask & (1 << s) != 0)
    }
}

impl TileIo<'_, '_> {
    fn plane(&self, cf: u32) -> Result<[f32; 3], IoError> {
        self.coefficients
            .get(cf as usize)
            .copied()
            .ok_or_else(|| invalid(format!("coefficient register cf{cf} is not bound")))
    }

    /// The lane's pixel centre in window coordinates.
    fn centre(&self, lane: usize) -> (f32, f32) {
        let (x, y) = self.lanes[lane];
        (
            (self.origin.0 + x) as f32 + 0.5,
            (self.origin.1 + y) as f32 + 0.5,
        )
    }
}

impl TileIo<'_, '_> {
    /// The samples lane `lane`'s pixel covers (all for explicit
    /// coordinates).
    fn lane_coverage(&self, lane: usize, access: &TileAccess) -> u32 {
        match (access.explicit, self.pixel_index(lane)) {
            (None, Some(pixel)) => self.coverage.get(pixel).copied().unwrap_or(u32::MAX),
            _ => u32::MAX,
        }
    }

    fn pixel_index(&self, lane: usize) -> Option<usize> {
        let (x, y) = self.lanes[lane];
        (self.helpers & (1 << lane) == 0 && x < self.tile.width_px && y < self.tile.height_px)
            .then(|| (y * self.tile.width_px + x) as usize)
    }
}

/// Where channel `component` of an element starts in a record.
pub(super) fn channel_offset(format: ElementFormat, offset: usize, component: usize) -> usize {
    if format.packed() {
        offset
    } else {
        offset + (component << format.shift())
    }
}

impl ShaderIo for TileIo<'_, '_> {
    fn sample_mask(&mut self, lane: usize, which: u32, coverage: u32) -> Result<(), IoError> {
        if self.tile.samples != 1 {
            return Err(invalid("sample masks with multisampling".into()));
        }
        if let Some(pixel) = self.pixel_index(lane) {
            if which & 1 != 0 && coverage & 1 == 0 {
                self.discarded[pixel] = true;
            }
        }
        Ok(())
    }

    fn depth_stencil(
        &mut self,
        lane: usize,
        which: u32,
        depth: Option<f32>,
        stencil: Option<u16>,
    ) -> Result<(), IoError> {
        if stencil.is_some() {
            return Err(invalid("stencil output".into()));
        }
        if self.tile.samples != 1 {
            return Err(invalid("shader depth output with multisampling".into()));
        }
        let Some(pixel) = self.pixel_index(lane) else {
            return Ok(());
        };
        let (Some(depth), true) = (depth, which & 1 != 0) else {
            return Ok(());
        };
        // The depth test happens here, with the shader's depth.
        let depth = depth.clamp(0.0, 1.0);
        let stored = self.tile.depth[pixel * self.tile.samples as usize];
        match self.face {
            Some(face) if !depth_passes(face.depth_function, depth, stored) => {
                self.discarded[pixel] = true;
            }
            Some(face) if !face.disable_depth_write => {
                self.pending_depth[pixel * self.tile.samples as usize] = Some(depth);
            }
            _ => {}
        }
        Ok(())
    }

    fn texture(&mut self, _lane: usize, request: &TextureRequest) -> Result<[u32; 4], IoError> {
        self.unit.request(request)
    }

    fn interpolate(
        &mut self,
        lane: usize,
        cf: u32,
        count: usize,
        interpolation: crate::usc::io::Interpolation,
        perspective_w: Option<u32>,
    ) -> Result<[f32; 4], IoError> {
        if interpolation != crate::usc::io::Interpolation::Center {
            return Err(invalid("sample and centroid interpolation".into()));
        }
        let (x, y) = self.centre(lane);
        let eval = |p: [f32; 3]| p[0].mul_add(x, p[1].mul_add(y, p[2]));
        let w = match perspective_w {
            Some(w_cf) => eval(self.plane(w_cf)?),
            None => 1.0,
        };
        let mut out = [0f32; 4];
        for (i, value) in out.iter_mut().enumerate().take(count.min(4)) {
            *value = eval(self.plane(cf + i as u32)?) / w;
        }
        Ok(out)
    }

    fn coefficients(
        &mut self,
        _lane: usize,
        cf: u32,
        count: usize,
    ) -> Result<[[f32; 3]; 4], IoError> {
        let mut out = [[0f32; 3]; 4];
        for (i, plane) in out.iter_mut().enumerate().take(count.min(4)) {
            *plane = self.plane(cf + i as u32)?;
        }
        Ok(out)
    }

    fn tile_load(&mut self, lane: usize, access: &TileAccess) -> Result<[u32; 4], IoError> {
        if self.helpers & (1 << lane) != 0 && access.explicit.is_none() {
            // A helper outside the tile reads nothing useful.
            if self.pixel(lane, access).is_err() {
                return Ok([0; 4]);
            }
        }
        let (x, y) = self.pixel(lane, access)?;
        let (format, offset) = self.element(access)?;
        // The first sample of the mask (a load reads one sample), among
        // the covered ones if there are any.
        let covered = access.sample_mask & self.lane_coverage(lane, access);
        let mask = if covered != 0 {
            covered
        } else {
            access.sample_mask
        };
        let sample = self.samples(mask).next().unwrap_or(0);
        let record = self.tile.record(x, y, sample);
        let mut out = [0u32; 4];
        for (register, component) in (0..4).filter(|c| access.mask & (1 << c) != 0).enumerate() {
            let at = record + channel_offset(format, offset, component);
            out[register] = formats::load(format, &self.tile.bytes[at..], component, access.half);
        }
        Ok(out)
    }

    fn tile_store(
        &mut self,
        lane: usize,
        access: &TileAccess,
        values: [u32; 4],
    ) -> Result<(), IoError> {
        if self.helpers & (1 << lane) != 0 {
            return Ok(());
        }
        if access.explicit.is_none() && self.pixel_index(lane).is_some_and(|p| self.discarded[p]) {
            return Ok(());
        }
        let (x, y) = self.pixel(lane, access)?;
        let (format, offset) = self.element(access)?;
        let samples: Vec<u32> = self
            .samples(access.sample_mask & self.lane_coverage(lane, access))
            .collect();
        for sample in samples {
            let record = self.tile.record(x, y, sample);
            for (register, component) in (0..4).filter(|c| access.mask & (1 << c) != 0).enumerate()
            {
                let at = record + channel_offset(format, offset, component);
                if !formats::store(
                    format,
                    &mut self.tile.bytes[at..],
                    component,
                    values[register],
                    access.half,
                ) {
                    return Err(invalid(format!("st_tile cannot write {format:?}")));
                }
            }
        }
        Ok(())
    }

    fn block_store(&mut self, request: &BlockStore) -> Result<(), IoError> {
        let TextureHandle::Index(index) = request.texture else {
            return Err(invalid("bindless block stores".into()));
        };
        let address = self
            .binding
            .texture_descriptor(index)
            .ok_or_else(|| invalid(format!("no PBE descriptor bound at ts{index}")))?;
        let mut bytes = [0u8; 24];
        GpuMemory::read(&self.vm, address, &mut bytes, crate::usc::AccessKind::Read)?;
        let pbe = Pbe::decode_fields(&bytes);
        // Block stores write the tilebuffer's encoding: the sRGB bit is
        // for image_write only.
        let (element, channels) = channel_format(pbe.channels, pbe.data_type, false)
            .ok_or_else(|| invalid(format!("PBE format {:?} {:?}", pbe.channels, pbe.data_type)))?;
        if !matches!(pbe.layout, Layout::Linear | Layout::Twiddled) {
            return Err(invalid(format!("{:?} image layout", pbe.layout)));
        }
        // A multisampled tile stores to a multisampled image of the same
        // count, every sample (linear: a pixel's samples side by side).
        // Resolving to a single-sampled image is the shader's job.
        let image_samples = match (pbe.dimension, pbe.samples) {
            (
                agx_hw::formats::TextureDimension::D2Multisampled,
                agx_hw::formats::SampleCount::Two,
            ) => 2,
            (agx_hw::formats::TextureDimension::D2Multisampled, _) => 4,
            _ => 1,
        };
        if image_samples != self.tile.samples {
            return Err(invalid(format!(
                "a {}-sample tile stored to a {image_samples}-sample image",
                self.tile.samples
            )));
        }
        if image_samples > 1 && pbe.layout != Layout::Linear {
            return Err(invalid("twiddled multisampled images".into()));
        }
        let source = ElementFormat::from_code(i64::from(request.format))
            .ok_or_else(|| invalid(format!("tilebuffer format {}", request.format)))?;
        let texel_bytes = if element.packed() {
            4
        } else {
            channels << element.shift()
        };
        // Layered passes store layer n of the tile to layer n of the
        // image.
        let layers = if pbe.layout == Layout::Linear {
            pbe.depth_linear
        } else {
            pbe.layers
        };
        if self.layer >= layers {
            return Err(invalid(format!(
                "layer {} past the image's {layers}",
                self.layer
            )));
        }
        let layout = if pbe.layout == Layout::Linear {
            ImageLayout::Linear {
                stride_bytes: u64::from(pbe.stride),
                element_bytes: texel_bytes as u32 * image_samples,
                layer_stride_bytes: pbe.layer_stride_linear,
            }
        } else {
            ImageLayout::twiddled(
                pbe.width,
                pbe.height,
                pbe.levels,
                layers,
                texel_bytes as u32,
            )
            .ok_or_else(|| invalid(format!("{texel_bytes}-byte twiddled texels")))?
        };
        let level = if pbe.layout == Layout::Linear {
            0
        } else {
            pbe.level
        };
        let offset = request.tilebuffer_offset_bytes as usize;
        let (width, height) = (
            self.area.0.min((pbe.width >> level).max(1)),
            self.area.1.min((pbe.height >> level).max(1)),
        );
        for ty in 0..self.tile.height_px {
            let y = self.origin.1 + ty;
            if y >= height {
                break;
            }
            let mut row = Vec::with_capacity(
                self.tile.width_px as usize * texel_bytes * image_samples as usize,
            );
            let mut count = 0u64;
            for tx in 0..self.tile.width_px {
                let x = self.origin.0 + tx;
                if x >= width {
                    break;
                }
                let mut texel = vec![0u8; texel_bytes * image_samples as usize];
                for sample in 0..image_samples {
                    let record = self.tile.record(tx, ty, sample);
                    let base = sample as usize * texel_bytes;
                    for component in 0..channels {
                        let from = record + channel_offset(source, offset, component);
                        let value =
                            formats::load(source, &self.tile.bytes[from..], component, false);
                        let to = base + channel_offset(element, 0, component);
                        if !formats::store(element, &mut texel[to..], component, value, false) {
                            return Err(invalid(format!("cannot store {element:?}")));
                        }
                    }
                }
                if pbe.layout == Layout::Linear {
                    row.extend_from_slice(&texel);
                    count += 1;
                } else {
                    let at = layout
                        .offset(level, x, y, self.layer)
                        .ok_or_else(|| invalid(format!("pixel ({x}, {y}) past the image")))?;
                    self.vm
                        .write(pbe.buffer + at, &texel)
                        .map_err(IoError::Memory)?;
                }
            }
            if count == 0 {
                continue;
            }
            let address = pbe.buffer
                + layout
                    .offset(0, self.origin.0, y, self.layer)
                    .ok_or_else(|| invalid(format!("row {y} past the image")))?;
            self.vm.write(address, &row).map_err(IoError::Memory)?;
        }
        Ok(())
    }
}
