//! What a per-tile program sees of the fixed-function units: the
//! tilebuffer (`ld_tile`, `st_tile`), coverage and sample masks, depth
//! emitted by the shader (`zs_emit`), varyings interpolated from the
//! primitive's coefficient registers, texturing, and the pixel back
//! end's block stores (`image_write_block`) to the render targets.

use agx_hw::formats::{FragmentFace, FragmentStencil};

use super::depth::{depth_passes, stencil_op};
use super::tilebuffer::Tilebuffer;
use crate::bind::Binding;
use crate::imageblock::{
    store_block_watched, store_texel, unorm8_element_once, BlockPlacement, ImageWriteTarget,
};
use crate::memory::GpuVm;
use crate::probe::ShaderProbe;
use crate::raster::{iterate, Coefficient, IterPoint, TilePlane};
use crate::texture::TextureUnit;
use crate::usc::io::{BlockStore, ImageWrite, IoError, TextureRequest, TileAccess};
use crate::usc::{ShaderIo, LANES};

/// The pixels one primitive's fragment program runs on, and the
/// primitive's coefficient registers.
#[derive(Clone, Copy)]
pub(super) struct Piece<'a> {
    /// Tile-local pixel coordinates.
    pub(super) pixels: &'a [(u32, u32)],
    pub(super) coefficients: &'a [Coefficient],
    /// The primitive faces away (its lanes' `backfacing` special
    /// register).
    pub(super) back_facing: bool,
}

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
    /// The debugger's probe, if the machine has one, and the command, for
    /// what the block stores write at its watched pixel.
    pub(super) probe: Option<(&'a dyn ShaderProbe, u64)>,
    /// The render area.
    pub(super) area: (u32, u32),
    pub(super) layer: u32,
    /// The primitives whose pixels the SIMD-group runs (the coefficient
    /// registers of each).
    pub(super) pieces: &'a [Piece<'a>],
    /// The piece each lane's pixel belongs to.
    pub(super) lane_pieces: [u16; LANES],
    /// Helper lanes: they run for derivatives, their outputs are dropped.
    pub(super) helpers: u32,
    /// The texture unit.
    pub(super) unit: &'a TextureUnit<'b>,
    /// Per pixel of the tile: the samples the shader killed (sample_mask
    /// clearing their coverage, or a failed zs_emit depth test).
    pub(super) killed: &'a mut [u32],
    /// The pass's sample positions (1/256 pixel from the pixel's corner).
    pub(super) sample_positions: &'a [(i64, i64)],
    /// Per sample of the tile: the depth to write once the shader is done.
    pub(super) pending_depth: &'a mut [Option<f32>],
    /// Per pixel of the tile: the samples this program covers.
    pub(super) coverage: &'a [u32],
    /// The primitive's depth state (for zs_emit).
    pub(super) face: Option<FragmentFace>,
    /// Per sample of the tile: the stencil to write once the shader is
    /// done.
    pub(super) pending_stencil: &'a mut [Option<u8>],
    /// The stencil state whose depth-pass and depth-fail operations
    /// zs_emit applies.
    pub(super) stencil: Option<FragmentStencil>,
    /// zs_emit also runs the stencil test (the shader writes the stencil
    /// reference); otherwise it ran before the shader.
    pub(super) stencil_test_at_emit: bool,
    /// The descriptor the core's image writes last went through.
    pub(super) image_writes: &'a mut ImageWriteTarget,
    /// Where the group's `st_tile`s are noted (each access with the values
    /// of its first lane), for a program whose lanes all store the same
    /// values (`run_tile_program` repeats them for the other groups).
    pub(super) stores: Option<&'a mut Vec<(TileAccess, [u32; 4])>>,
}

impl TileIo<'_, '_> {
    /// `st_tile` by the lanes of `lanes` (no explicit pixel) of the same
    /// `values` in every lane: as [`ShaderIo::tile_store_lanes`]. With
    /// `unorm8` (the byte offset and the bytes of the values, for a whole
    /// unorm8 element of a single-sampled block:
    /// [`Imageblock::unorm8_store`](crate::imageblock::Imageblock::unorm8_store)),
    /// the bytes are written without converting again.
    pub(super) fn tile_store_same(
        &mut self,
        lanes: u32,
        access: &TileAccess,
        values: &[[u32; 4]; LANES],
        unorm8: Option<(usize, [u8; 4])>,
    ) -> Result<(), IoError> {
        match unorm8 {
            Some((offset, bytes)) if self.store_unorm8_lanes(lanes, access, offset, |_| bytes) => {
                Ok(())
            }
            _ => self.tile_store_lanes(lanes, access, values),
        }
    }

    /// `st_tile` of a whole unorm8 element at byte `offset` of a
    /// single-sampled block's records by the lanes of `lanes` (no
    /// explicit pixel), each storing lane's bytes `bytes_of(lane)`: helpers
    /// and lanes whose pixel is not covered (coverage, kills, the access's
    /// sample mask) store nothing. False, with nothing written, unless
    /// every storing lane's pixel is in the block (then nothing can fail).
    #[inline(always)]
    fn store_unorm8_lanes(
        &mut self,
        lanes: u32,
        access: &TileAccess,
        offset: usize,
        mut bytes_of: impl FnMut(usize) -> [u8; 4],
    ) -> bool {
        let storing = lanes & !self.helpers;
        let (width, height) = (self.tile.colour.width_px, self.tile.colour.height_px);
        // The storing lanes' pixels, by their bits.
        let pixels = |io: &Self| {
            let mut bits = storing;
            let lanes = io.lanes;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let lane = bits.trailing_zeros() as usize % LANES;
                    bits &= bits - 1;
                    (lane, lanes[lane])
                })
            })
        };
        if !pixels(self).fold(true, |inside, (_, (x, y))| {
            inside & (x < width) & (y < height)
        }) {
            return false;
        }
        let record_bytes = self.tile.colour.sample_bytes as usize;
        for (lane, (x, y)) in pixels(self) {
            let p = (y * width + x) as usize;
            let coverage = self.coverage.get(p).copied().unwrap_or(u32::MAX);
            if access.sample_mask & coverage & !self.killed[p] & 1 != 0 {
                let at = p * record_bytes + offset;
                self.tile.colour.bytes[at..at + 4].copy_from_slice(&bytes_of(lane));
            }
        }
        true
    }

    /// The pixel (within the tile) an access names: its explicit
    /// coordinates, or the lane's own pixel (the tilebuffer checks it is
    /// inside the tile).
    fn pixel(&self, lane: usize, access: &TileAccess) -> (u32, u32) {
        match access.explicit {
            Some((x, y)) => (u32::from(x), u32::from(y)),
            None => self.lanes[lane],
        }
    }
}

impl TileIo<'_, '_> {
    /// Coefficient register `cf` of lane `lane`'s primitive. A register past the ones the binding
    /// table declares reads as the plane 0 (Documentation/gpu.md,
    /// "coefficient registers"): Mesa indexes varying arrays without a
    /// bound check and discards what an out-of-range index read, and what
    /// the hardware returns there is not public.
    fn coefficient(&self, lane: usize, cf: u32) -> Coefficient {
        let coefficients = self
            .lane_pieces
            .get(lane)
            .and_then(|&piece| self.pieces.get(usize::from(piece)))
            .map_or(&[][..], |piece| piece.coefficients);
        match coefficients.get(cf as usize) {
            Some(&coefficient) => coefficient,
            None => {
                tracing::debug!(
                    cf,
                    declared = coefficients.len(),
                    "a read of a coefficient register the binding table does not declare, as 0"
                );
                Coefficient::ZERO
            }
        }
    }

    /// Where the coefficient planes' x and y start: the corner of the
    /// 32x32 tile holding the pass tile.
    fn coefficient_origin(&self) -> (f64, f64) {
        (
            f64::from(self.origin.0 & !31),
            f64::from(self.origin.1 & !31),
        )
    }

    /// The lane's pixel centre in window coordinates.
    fn centre(&self, lane: usize) -> (f32, f32) {
        let (x, y) = self.lanes[lane];
        (
            (self.origin.0 + x) as f32 + 0.5,
            (self.origin.1 + y) as f32 + 0.5,
        )
    }

    /// Where `iter` evaluates a varying for the lane, in window
    /// coordinates: the pixel centre; sample `s`'s position (the pixel
    /// centre for a sample past the pass's count); or for centroid
    /// interpolation the centre when every sample is covered and the first
    /// covered sample otherwise (GL allows any point of the pixel inside
    /// the primitive; which one the hardware takes is not public).
    fn interpolation_point(
        &self,
        lane: usize,
        interpolation: crate::usc::io::Interpolation,
    ) -> (f32, f32) {
        use crate::usc::io::Interpolation;
        let (x, y) = self.lanes[lane];
        let corner = ((self.origin.0 + x) as f32, (self.origin.1 + y) as f32);
        let at_sample = |s: usize| {
            self.sample_positions
                .get(s)
                .map(|&(sx, sy)| (corner.0 + sx as f32 / 256.0, corner.1 + sy as f32 / 256.0))
        };
        let sample = match interpolation {
            Interpolation::Center => None,
            Interpolation::Sample(s) => Some(s as usize),
            Interpolation::Centroid => {
                let samples = self.sample_positions.len().min(32);
                let all = if samples >= 32 {
                    u32::MAX
                } else {
                    (1u32 << samples) - 1
                };
                let covered = self
                    .pixel_index(lane)
                    .and_then(|p| self.coverage.get(p))
                    .map_or(all, |c| c & all);
                (covered != all && covered != 0).then(|| covered.trailing_zeros() as usize)
            }
        };
        sample
            .and_then(at_sample)
            .unwrap_or_else(|| self.centre(lane))
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
        (self.helpers & (1 << lane) == 0
            && x < self.tile.colour.width_px
            && y < self.tile.colour.height_px)
            .then(|| (y * self.tile.colour.width_px + x) as usize)
    }
}

impl ShaderIo for TileIo<'_, '_> {
    /// `sample_mask`: the samples in `which` take their bit of
    /// `coverage`; one cleared is killed (no colour, depth or stencil
    /// written for it). A discard clears them all; Mesa's per-sample
    /// shading loops over the samples with a mask per iteration.
    fn sample_mask(&mut self, lane: usize, which: u32, coverage: u32) -> Result<(), IoError> {
        if let Some(pixel) = self.pixel_index(lane) {
            let samples = (1u32 << self.tile.colour.samples.min(31)) - 1;
            self.killed[pixel] |= which & !coverage & samples;
        }
        Ok(())
    }

    /// `zs_emit`: the shader's depth and stencil reference for the
    /// samples in `which`. The stencil reference replaces the state's for
    /// the stencil test and its operations (Metal's stencil output, GL's
    /// `gl_FragStencilRefARB`); a shader writing it has its stencil test
    /// here, and, when it writes no depth, its depth test too, with the
    /// primitive's depth noted for it before the shader ran.
    fn depth_stencil(
        &mut self,
        lane: usize,
        which: u32,
        depth: Option<f32>,
        stencil: Option<u16>,
    ) -> Result<(), IoError> {
        let Some(pixel) = self.pixel_index(lane) else {
            return Ok(());
        };
        let Some(face) = self.face else {
            return Ok(());
        };
        if depth.is_none() && stencil.is_none() {
            return Ok(());
        }
        let reference = stencil.map_or(face.stencil_reference as u8, |s| s as u8);
        let samples = self.tile.colour.samples as usize;
        let live =
            self.coverage.get(pixel).copied().unwrap_or(u32::MAX) & !self.killed[pixel] & which;
        for s in (0..samples).filter(|s| live & (1 << s) != 0) {
            let at = pixel * samples + s;
            if let (Some(st), true) = (self.stencil, self.stencil_test_at_emit) {
                let stored = self.tile.stencil[at];
                let mask = st.read_mask as u8;
                if !depth_passes(
                    st.compare,
                    f32::from(reference & mask),
                    f32::from(stored & mask),
                ) {
                    self.tile.stencil[at] =
                        stencil_op(st.stencil_fail, stored, reference, st.write_mask as u8);
                    self.killed[pixel] |= 1 << s;
                    self.pending_depth[at] = None;
                    continue;
                }
            }
            // The shader's depth (the pixel's: every sample takes it), or
            // the primitive's, noted before the shader.
            let Some(depth) = depth.map(|d| d.clamp(0.0, 1.0)).or(self.pending_depth[at]) else {
                continue;
            };
            let pass = depth_passes(face.depth_function, depth, self.tile.depth[at]);
            self.pending_depth[at] = (pass && !face.disable_depth_write).then_some(depth);
            if !pass {
                self.killed[pixel] |= 1 << s;
            }
            if let Some(st) = self.stencil {
                let current = self.tile.stencil[at];
                let op = if pass { st.depth_pass } else { st.depth_fail };
                let value = stencil_op(op, current, reference, st.write_mask as u8);
                if pass {
                    self.pending_stencil[at] = Some(value);
                } else {
                    self.tile.stencil[at] = value;
                }
            }
        }
        Ok(())
    }

    fn texture(
        &mut self,
        requests: &[Option<TextureRequest>; LANES],
        texels: &mut [[u32; 4]; LANES],
    ) -> Result<(), IoError> {
        self.unit.serve(requests, texels)
    }

    fn texel_loads(
        &mut self,
        loads: &crate::usc::io::TexelLoads<'_>,
        texels: &mut [[u32; 4]; LANES],
    ) -> Result<(), IoError> {
        self.unit.serve_loads(loads, texels)
    }

    fn texture_samples(
        &mut self,
        samples: &crate::usc::io::TextureSamples<'_>,
        texels: &mut [[u32; 4]; LANES],
    ) -> Result<(), IoError> {
        self.unit.serve_samples(samples, texels)
    }

    fn interpolate(
        &mut self,
        lane: usize,
        cf: u32,
        count: usize,
        interpolation: crate::usc::io::Interpolation,
        perspective_w: Option<u32>,
    ) -> Result<[f32; 4], IoError> {
        // The iterator evaluates the coefficient registers `ldcf` reads at
        // the point relative to the 32x32 tile's corner, a dot product
        // rounded once (`raster::iterate`); a perspective value is then
        // divided by the W plane's, in f32.
        let (x, y) = self.interpolation_point(lane, interpolation);
        let origin = self.coefficient_origin();
        let (tx, ty) = (x - origin.0 as f32, y - origin.1 as f32);
        // A flat value keeps its bits (a -0 or an integer's too).
        let eval = |coefficient: Coefficient| match coefficient {
            Coefficient::Constant(bits) => f32::from_bits(bits),
            plane => iterate(plane.words_at(origin), tx, ty),
        };
        let w = perspective_w.map(|w_cf| eval(self.coefficient(lane, w_cf)));
        let mut out = [0f32; 4];
        for (i, value) in out.iter_mut().enumerate().take(count.min(4)) {
            let v = eval(self.coefficient(lane, cf + i as u32));
            *value = match w {
                Some(w) => v / w,
                None => v,
            };
        }
        Ok(out)
    }

    fn interpolate_lanes(
        &mut self,
        lanes: u32,
        cf: u32,
        count: usize,
        interpolation: crate::usc::io::Interpolation,
        perspective_w: Option<u32>,
        values: &mut [[f32; LANES]; 4],
    ) -> Result<(), IoError> {
        // As `interpolate` lane by lane, with each primitive's registers
        // made ready for the tile once for the lanes that follow it (a
        // SIMD-group's lanes are its primitives' quads in turn).
        let origin = self.coefficient_origin();
        let count = count.min(4);
        let mut kept_piece = None;
        let mut varying = [TilePlane::Flat(0); 4];
        let mut w = None;
        let mut remaining = lanes;
        while remaining != 0 {
            let lane = remaining.trailing_zeros() as usize;
            remaining &= remaining - 1;
            let piece = self.lane_pieces[lane];
            if kept_piece != Some(piece) {
                for (i, plane) in varying.iter_mut().enumerate().take(count) {
                    *plane = TilePlane::new(self.coefficient(lane, cf + i as u32), origin);
                }
                w = perspective_w.map(|w_cf| TilePlane::new(self.coefficient(lane, w_cf), origin));
                kept_piece = Some(piece);
            }
            let point = match interpolation {
                crate::usc::io::Interpolation::Center => {
                    let (x, y) = self.centre(lane);
                    IterPoint::centre(x - origin.0 as f32, y - origin.1 as f32)
                }
                other => {
                    let (x, y) = self.interpolation_point(lane, other);
                    IterPoint::new(x - origin.0 as f32, y - origin.1 as f32)
                }
            };
            match &w {
                Some(w) => {
                    let w = w.at(&point);
                    for (component, plane) in values.iter_mut().zip(&varying[..count]) {
                        component[lane] = plane.at(&point) / w;
                    }
                }
                None => {
                    for (component, plane) in values.iter_mut().zip(&varying[..count]) {
                        component[lane] = plane.at(&point);
                    }
                }
            }
        }
        Ok(())
    }

    fn coefficients(
        &mut self,
        lane: usize,
        cf: u32,
        count: usize,
        out: &mut [[f32; 3]; 4],
    ) -> Result<(), IoError> {
        let origin = self.coefficient_origin();
        for (i, words) in out.iter_mut().enumerate().take(count.min(4)) {
            *words = self.coefficient(lane, cf + i as u32).words_at(origin);
        }
        Ok(())
    }

    fn tile_load(&mut self, lane: usize, access: &TileAccess) -> Result<[u32; 4], IoError> {
        let pixel = self.pixel(lane, access);
        if self.helpers & (1 << lane) != 0 && access.explicit.is_none() {
            // A helper outside the tile reads nothing useful.
            if self.tile.colour.pixel(pixel.0, pixel.1).is_err() {
                return Ok([0; 4]);
            }
        }
        // The first sample of the mask (a load reads one sample), among
        // the covered ones if there are any.
        let covered = access.sample_mask & self.lane_coverage(lane, access);
        let mask = if covered != 0 {
            covered
        } else {
            access.sample_mask
        };
        let sample = self.tile.colour.first_sample(mask);
        self.tile.colour.load(pixel, sample, access)
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
        let killed = match (access.explicit, self.pixel_index(lane)) {
            (None, Some(p)) => self.killed[p],
            _ => 0,
        };
        let pixel = self.pixel(lane, access);
        let samples = access.sample_mask & self.lane_coverage(lane, access) & !killed;
        if samples == 0 {
            return Ok(());
        }
        self.tile.colour.store(pixel, samples, access, values)
    }

    fn tile_store_lanes(
        &mut self,
        lanes: u32,
        access: &TileAccess,
        values: &[[u32; 4]; LANES],
    ) -> Result<(), IoError> {
        if let Some(stores) = self.stores.as_deref_mut() {
            if lanes != 0 {
                stores.push((*access, values[lanes.trailing_zeros() as usize]));
            }
        }
        // Every storing lane's pixel inside a single-sampled block and a
        // whole unorm8 element (nothing that can fail): as below and
        // `store_elements_at`'s unorm8 branch, each lane's bytes written
        // as it comes, each distinct value converted once.
        if let Some(offset) = self.tile.colour.whole_unorm8_offset(access) {
            let mut last = None;
            let converted = |lane: usize| unorm8_element_once(values[lane], &mut last);
            if self.store_unorm8_lanes(lanes, access, offset, converted) {
                return Ok(());
            }
        }
        // As `tile_store` for each lane, the element looked up once (when
        // the first lane that stores reaches it, so errors come in the
        // same order): the lanes before a failing one store, then the
        // failure is the instruction's.
        let mut element = None;
        let mut stores = [((0, 0), 0, [0; 4]); LANES];
        let mut count = 0;
        let mut failure = None;
        for lane in (0..LANES).filter(|l| lanes & (1 << l) != 0) {
            if self.helpers & (1 << lane) != 0 {
                continue;
            }
            // `lane_coverage` and `killed` of the lane's pixel, looked up
            // once (the access names no explicit pixel).
            let (killed, coverage, inside) = match self.pixel_index(lane) {
                Some(p) => (
                    self.killed[p],
                    self.coverage.get(p).copied().unwrap_or(u32::MAX),
                    true,
                ),
                None => (0, u32::MAX, false),
            };
            let pixel = self.lanes[lane];
            let samples = access.sample_mask & coverage & !killed;
            if samples == 0 {
                continue;
            }
            // (A pixel with an index is inside the block.)
            let pixel = if inside {
                pixel
            } else {
                match self.tile.colour.pixel(pixel.0, pixel.1) {
                    Ok(pixel) => pixel,
                    Err(error) => {
                        failure = Some(error);
                        break;
                    }
                }
            };
            if element.is_none() {
                match self.tile.colour.element(access) {
                    Ok(found) => element = Some(found),
                    Err(error) => {
                        failure = Some(error);
                        break;
                    }
                }
            }
            stores[count] = (pixel, samples, values[lane]);
            count += 1;
        }
        if let Some(element) = element {
            self.tile
                .colour
                .store_elements_at(&stores[..count], access, element);
        }
        failure.map_or(Ok(()), Err)
    }

    fn image_write(&mut self, lane: usize, request: &ImageWrite) -> Result<(), IoError> {
        // The instruction's later lanes reuse the descriptor its first
        // write reads, whether or not this lane writes.
        if request.first_of_instruction {
            self.image_writes.new_instruction();
        }
        // Helper lanes (uncovered quad members) write nothing.
        if self.helpers & (1 << lane) != 0 {
            return Ok(());
        }
        // Nor does a lane whose every sample is killed: Mesa leaves the
        // image writes after a discard unguarded (only atomics test
        // is_active_thread), so the hardware drops them.
        if let Some(pixel) = self.pixel_index(lane) {
            let samples = (1u32 << self.tile.colour.samples.min(31)) - 1;
            let covered = self.coverage.get(pixel).copied().unwrap_or(samples) & samples;
            if covered & !self.killed[pixel] == 0 {
                return Ok(());
            }
        }
        store_texel(&mut self.vm, self.binding, request, self.image_writes)
    }

    fn block_store(&mut self, request: &BlockStore) -> Result<(), IoError> {
        // Layered passes store layer n of the tile to layer n of the
        // image.
        let watch = self.probe.and_then(|(probe, command)| {
            probe.watched_pixel().map(|pixel| (probe, command, pixel))
        });
        store_block_watched(
            &mut self.vm,
            self.binding,
            &self.tile.colour,
            request,
            BlockPlacement {
                origin_px: self.origin,
                layer: self.layer,
                limit_px: self.area,
            },
            watch,
        )
    }
}
