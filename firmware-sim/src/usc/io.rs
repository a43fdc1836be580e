//! The fixed-function units a shader talks to.
//!
//! Some instructions leave the shader core: texture sampling goes to the
//! texture unit, `ld_tile`/`st_tile` to the tilebuffer that holds the tile
//! being rendered, `iter` to the varying interpolator that holds the
//! triangle's plane equations, `st_var` to the vertex output buffer, and
//! `sample_mask`/`zs_emit` to the fragment back end. The render pipeline
//! implements [`ShaderIo`] for each stage; a stage that has no such unit
//! (a compute kernel has no tilebuffer) keeps the default method, which
//! reports the instruction as invalid for the stage.

use std::fmt;

use super::LANES;

/// A failure reported by a fixed-function unit (a texture index past the
/// heap, a tilebuffer offset past the pixel's record, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IoError {
    /// The stage has no such unit.
    #[error("{0} is not available in this stage")]
    Unavailable(&'static str),
    /// The unit rejected the request.
    #[error("{0}")]
    Invalid(String),
    /// The unit's memory access faulted.
    #[error(transparent)]
    Memory(#[from] super::MemoryFault),
}

/// Which texture a texture instruction names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextureHandle {
    /// An index into the bound texture state.
    Index(u32),
    /// A bindless descriptor at `base + offset` (bytes).
    Bindless {
        /// The heap base (a uniform pair).
        base: u64,
        /// The byte offset (a register).
        offset: u32,
    },
}

/// Which sampler a texture instruction names.
pub type SamplerIndex = u32;

/// How a texture instruction chooses its level of detail.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LodArgument {
    /// From the quad's coordinate derivatives (`ddx`, `ddy` per axis).
    Auto {
        /// d(coords)/dx.
        ddx: [f32; 3],
        /// d(coords)/dy.
        ddy: [f32; 3],
        /// A bias added to the computed LOD.
        bias: f32,
    },
    /// An explicit LOD (`lod_min`), which for `texture_load` is an
    /// integer mip level.
    Explicit(f32),
    /// Explicit gradients.
    Gradient {
        /// d(coords)/dx.
        ddx: [f32; 3],
        /// d(coords)/dy.
        ddy: [f32; 3],
    },
}

/// A texture sample or load for one lane.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TextureRequest {
    /// `texture_load` (integer texel coordinates, no filtering) rather
    /// than `texture_sample`.
    pub load: bool,
    /// The texture.
    pub texture: TextureHandle,
    /// The sampler (ignored by loads).
    pub sampler: SamplerIndex,
    /// Dimension code (0 `tex_1d` .. 8 `tex_2d_ms_array`).
    pub dim: u32,
    /// Coordinate register contents: f32 bits for samples, integers for
    /// loads; array layer / sample index in the last used register.
    pub coords: [u32; 4],
    /// Level of detail.
    pub lod: LodArgument,
    /// Depth-compare reference, when the instruction compares.
    pub compare: Option<f32>,
    /// Which components are wanted.
    pub mask: u8,
    /// The destination registers are 16-bit: return fp16 bits for float
    /// formats.
    pub half: bool,
    /// Offsets added to the integer texel coordinates (x, y, z), each in
    /// -8..=7 (Mesa packs them as 4-bit fields). z moves a 3D image's
    /// slice; layers are not offset.
    pub offset_texels: [i32; 3],
    /// `Some(c)`: a gather of component `c` (after the swizzle) of the
    /// 2x2 texels bilinear filtering would read, in the order
    /// (x0, y1), (x1, y1), (x1, y0), (x0, y0).
    pub gather: Option<u8>,
    /// A lower bound on the level of detail (the LOD modes with a
    /// minimum).
    pub min_lod: Option<f32>,
    /// A LOD query (`texture_sample.query_lod`): the result is the level
    /// a sample would read and the level of detail, not texels.
    pub query_lod: bool,
}

/// The texel loads of one `texture_load` instruction whose lanes all load
/// from one texture at an explicit level, without a gather or a LOD
/// query (what tile reload programs and `texelFetch` are): served for the
/// whole SIMD-group at once, each lane's exactly as its
/// [`TexelLoads::request`] would be.
#[derive(Debug, Clone, Copy)]
pub struct TexelLoads<'a> {
    /// The texture.
    pub texture: TextureHandle,
    /// Dimension code (0 `tex_1d` .. 8 `tex_2d_ms_array`).
    pub dim: u32,
    /// The loading lanes, a bit each.
    pub lanes: u32,
    /// Each lane's coordinate registers.
    pub coords: &'a [[u32; 4]; LANES],
    /// Each lane's level (from the view's first).
    pub levels: &'a [u32; LANES],
    /// Each lane's texel offsets (x, y, z).
    pub offsets: &'a [[i32; 3]; LANES],
    /// Which components are wanted.
    pub mask: u8,
    /// The destination registers are 16-bit.
    pub half: bool,
}

impl TexelLoads<'_> {
    /// Lane `lane`'s load as a request.
    pub fn request(&self, lane: usize) -> TextureRequest {
        TextureRequest {
            load: true,
            texture: self.texture,
            sampler: 0,
            dim: self.dim,
            coords: self.coords[lane],
            lod: LodArgument::Explicit(self.levels[lane] as f32),
            compare: None,
            mask: self.mask,
            half: self.half,
            offset_texels: self.offsets[lane],
            gather: None,
            min_lod: None,
            query_lod: false,
        }
    }
}

/// The samples of one `texture_sample` instruction whose lanes all sample
/// one texture through one sampler at the level of detail their quads'
/// derivatives give, without a bias, minimum, comparison, gather or LOD
/// query (what a fragment shader's plain `texture()` is): served for the
/// whole SIMD-group at once, each lane's exactly as its
/// [`TextureSamples::request`] would be.
#[derive(Debug, Clone, Copy)]
pub struct TextureSamples<'a> {
    /// The texture.
    pub texture: TextureHandle,
    /// The sampler.
    pub sampler: SamplerIndex,
    /// Dimension code (0 `tex_1d` .. 8 `tex_2d_ms_array`).
    pub dim: u32,
    /// The sampling lanes, a bit each.
    pub lanes: u32,
    /// The coordinate registers of every lane present (the derivatives
    /// of a quad take its lanes that do not sample too).
    pub coords: &'a [[u32; 4]; LANES],
    /// Each lane's texel offsets (x, y, z).
    pub offsets: &'a [[i32; 3]; LANES],
    /// Which components are wanted.
    pub mask: u8,
    /// The destination registers are 16-bit.
    pub half: bool,
}

impl TextureSamples<'_> {
    /// The difference of each coordinate between lane `lane`'s quad
    /// neighbours across `axis` (1: x, the lane's row; 2: y, its column):
    /// the second of the pair minus the first.
    fn derivative(&self, lane: usize, axis: usize) -> [f32; 3] {
        let (hi, lo) = (self.coords[lane | axis], self.coords[lane & !axis]);
        [0, 1, 2].map(|k| f32::from_bits(hi[k]) - f32::from_bits(lo[k]))
    }

    /// Lane `lane`'s sample as a request.
    pub fn request(&self, lane: usize) -> TextureRequest {
        TextureRequest {
            load: false,
            texture: self.texture,
            sampler: self.sampler,
            dim: self.dim,
            coords: self.coords[lane],
            lod: LodArgument::Auto {
                ddx: self.derivative(lane, 1),
                ddy: self.derivative(lane, 2),
                bias: 0.0,
            },
            compare: None,
            mask: self.mask,
            half: self.half,
            offset_texels: self.offsets[lane],
            gather: None,
            min_lod: None,
            query_lod: false,
        }
    }
}

/// A store of one lane's texel to an image.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImageWrite {
    /// The image (through its PBE descriptor).
    pub texture: TextureHandle,
    /// Dimension code.
    pub dim: u32,
    /// Integer coordinates (layer last).
    pub coords: [u32; 4],
    /// Mip level.
    pub lod: u32,
    /// The four values, as register contents.
    pub values: [u32; 4],
    /// The values are 16-bit registers.
    pub half: bool,
    /// The instruction's first executing lane: the PBE descriptor is read
    /// (again), whether or not this lane's write is dropped. The later lanes of the instruction that name the same
    /// descriptor address write through what it read, as the texture
    /// unit reads a descriptor once for the lanes of an instruction.
    pub first_of_instruction: bool,
}

/// A block store of a whole image block: the tile (end-of-tile program),
/// or a kernel's image block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockStore {
    /// The image (through its PBE descriptor).
    pub texture: TextureHandle,
    /// Dimension code.
    pub dim: u32,
    /// Tilebuffer format code of the render target.
    pub format: u32,
    /// Byte offset of the render target in each pixel's tilebuffer record.
    pub tilebuffer_offset_bytes: u32,
    /// The coordinate registers: the layer, or with `explicit_coords`
    /// the image pixel of the block's first pixel (x, y, then the layer
    /// for array dimensions).
    pub coords: [u32; 3],
    /// Whether `coords` holds explicit coordinates.
    pub explicit_coords: bool,
}

/// A tilebuffer access for one lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileAccess {
    /// Tilebuffer format code.
    pub format: u32,
    /// Byte offset of the render target in the pixel's record.
    pub offset_bytes: u32,
    /// Which components.
    pub mask: u8,
    /// Which samples (bit n = sample n).
    pub sample_mask: u32,
    /// Explicit pixel coordinates within the tile, if given.
    pub explicit: Option<(u16, u16)>,
    /// The registers are 16-bit.
    pub half: bool,
}

/// How a varying is interpolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interpolation {
    /// At the pixel centre.
    Center,
    /// At a given sample.
    Sample(u32),
    /// At the centroid of the covered samples.
    Centroid,
}

impl fmt::Display for TextureHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TextureHandle::Index(i) => write!(f, "ts{i}"),
            TextureHandle::Bindless { base, offset } => write!(f, "{base:#x}+{offset:#x}"),
        }
    }
}

/// The fixed-function units around the shader core, per lane.
///
/// `lane` is the lane (0-31) of the SIMD-group being run; the implementer
/// knows which pixel, vertex or thread each lane stands for.
pub trait ShaderIo {
    /// Serves one texture instruction (a sample or a load) for every lane
    /// with a request: up to four register values per lane into
    /// `texels[lane]`. One call per instruction, as the hardware's texture
    /// unit takes a whole SIMD-group's request, so that descriptors are
    /// read and decoded once rather than per lane.
    fn texture(
        &mut self,
        requests: &[Option<TextureRequest>; LANES],
        texels: &mut [[u32; 4]; LANES],
    ) -> Result<(), IoError> {
        let _ = (requests, texels);
        Err(IoError::Unavailable("the texture unit"))
    }

    /// Serves the texel loads of one instruction: as
    /// [`ShaderIo::texture`] of each lane's request, which the default
    /// does.
    fn texel_loads(
        &mut self,
        loads: &TexelLoads<'_>,
        texels: &mut [[u32; 4]; LANES],
    ) -> Result<(), IoError> {
        let requests = std::array::from_fn(|lane| {
            (loads.lanes & (1 << lane) != 0).then(|| loads.request(lane))
        });
        self.texture(&requests, texels)
    }

    /// Serves the samples of one instruction: as [`ShaderIo::texture`]
    /// of each lane's request, which the default does.
    fn texture_samples(
        &mut self,
        samples: &TextureSamples<'_>,
        texels: &mut [[u32; 4]; LANES],
    ) -> Result<(), IoError> {
        let requests = std::array::from_fn(|lane| {
            (samples.lanes & (1 << lane) != 0).then(|| samples.request(lane))
        });
        self.texture(&requests, texels)
    }

    /// Writes a texel to an image.
    fn image_write(&mut self, lane: usize, request: &ImageWrite) -> Result<(), IoError> {
        let _ = (lane, request);
        Err(IoError::Unavailable("image stores"))
    }

    /// Stores the tile to an image (once per instruction, not per lane).
    fn block_store(&mut self, request: &BlockStore) -> Result<(), IoError> {
        let _ = request;
        Err(IoError::Unavailable("block image stores"))
    }

    /// Reads the lane's pixel from the tilebuffer.
    fn tile_load(&mut self, lane: usize, access: &TileAccess) -> Result<[u32; 4], IoError> {
        let _ = (lane, access);
        Err(IoError::Unavailable("the tilebuffer"))
    }

    /// Writes the lane's pixel to the tilebuffer.
    fn tile_store(
        &mut self,
        lane: usize,
        access: &TileAccess,
        values: [u32; 4],
    ) -> Result<(), IoError> {
        let _ = (lane, access, values);
        Err(IoError::Unavailable("the tilebuffer"))
    }

    /// Writes each lane of `lanes` its pixel of the tilebuffer, lane
    /// `l` `values[l]`, all with `access` (an `st_tile` whose sample mask
    /// is the same in every lane); the first lane's error is the
    /// instruction's. By default [`ShaderIo::tile_store`] lane by lane.
    fn tile_store_lanes(
        &mut self,
        lanes: u32,
        access: &TileAccess,
        values: &[[u32; 4]; super::LANES],
    ) -> Result<(), IoError> {
        for lane in (0..super::LANES).filter(|l| lanes & (1 << l) != 0) {
            self.tile_store(lane, access, values[lane])?;
        }
        Ok(())
    }

    /// Interpolates `count` channels of the varying whose coefficients
    /// start at `cf`; `perspective_w` names the coefficient holding 1/W for
    /// `iterproj`. Returns f32 values.
    fn interpolate(
        &mut self,
        lane: usize,
        cf: u32,
        count: usize,
        interpolation: Interpolation,
        perspective_w: Option<u32>,
    ) -> Result<[f32; 4], IoError> {
        let _ = (lane, cf, count, interpolation, perspective_w);
        Err(IoError::Unavailable("the varying interpolator"))
    }

    /// [`ShaderIo::interpolate`] for each lane of `lanes`, component `c`
    /// of lane `l` into `values[c][l]` (a register's lanes together),
    /// with the same `cf` and interpolation in every lane; the first
    /// lane's error is the instruction's. By default lane by lane.
    fn interpolate_lanes(
        &mut self,
        lanes: u32,
        cf: u32,
        count: usize,
        interpolation: Interpolation,
        perspective_w: Option<u32>,
        values: &mut [[f32; super::LANES]; 4],
    ) -> Result<(), IoError> {
        for lane in (0..super::LANES).filter(|l| lanes & (1 << l) != 0) {
            let lane_values = self.interpolate(lane, cf, count, interpolation, perspective_w)?;
            for (component, value) in values.iter_mut().zip(lane_values) {
                component[lane] = value;
            }
        }
        Ok(())
    }

    /// Reads the plane coefficients (A, B, C per channel) of a varying
    /// into the first `count` entries of `out` (written in place: returned
    /// inside a `Result`, the planes went through memory in pieces read
    /// back whole, a stall per lane).
    fn coefficients(
        &mut self,
        lane: usize,
        cf: u32,
        count: usize,
        out: &mut [[f32; 3]; 4],
    ) -> Result<(), IoError> {
        let _ = (lane, cf, count, out);
        Err(IoError::Unavailable("the varying interpolator"))
    }

    /// Stores one 32-bit vertex output word at `slot`.
    fn store_varying(&mut self, lane: usize, slot: u32, value: u32) -> Result<(), IoError> {
        let _ = (lane, slot, value);
        Err(IoError::Unavailable("vertex outputs"))
    }

    /// Sets the coverage of the samples in `which` to `coverage`.
    fn sample_mask(&mut self, lane: usize, which: u32, coverage: u32) -> Result<(), IoError> {
        let _ = (lane, which, coverage);
        Err(IoError::Unavailable("the fragment back end"))
    }

    /// Outputs depth and/or stencil for the samples in `which`.
    fn depth_stencil(
        &mut self,
        lane: usize,
        which: u32,
        depth: Option<f32>,
        stencil: Option<u16>,
    ) -> Result<(), IoError> {
        let _ = (lane, which, depth, stencil);
        Err(IoError::Unavailable("the fragment back end"))
    }

    /// Binds the descriptor at GPU address `descriptor` to state register
    /// `index` (`tex_state_store` / `sampler_state_store`).
    fn state_store(
        &mut self,
        state: StateKind,
        index: u32,
        descriptor: u64,
    ) -> Result<(), IoError> {
        let _ = (state, index, descriptor);
        Err(IoError::Unavailable("state stores outside a preshader"))
    }
}

/// The two kinds of state register a preshader can bind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateKind {
    /// A texture (or PBE) descriptor, 24 bytes.
    Texture,
    /// A sampler descriptor, 8 bytes.
    Sampler,
}

/// A stage with no fixed-function units (plain compute).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoIo;

impl ShaderIo for NoIo {}
