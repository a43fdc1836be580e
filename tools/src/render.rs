//! The renderer behind `agx-render`: a mesh, Phong-shaded and textured,
//! depth-tested, drawn through the whole stack (umd, UAPI, kmd, firmware
//! and GPU simulator, or a real asahi node) and read back as RGBA8.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agx_hw::formats::{Filter, Sampler, Wrap, ZsFunc};
use agx_umd::{
    Buffer, ColourAttachment, ColourOutput, CommandBuffer, CullMode, DepthAttachment, DepthImage,
    DepthState, Device, Error, Format, GraphicsPipeline, GraphicsPipelineDesc, Image,
    Interpolation, LoadOp, ProgramCache, Queue, RenderPassDesc, StoreOp, Topology, Varying,
};

use crate::mesh::Mesh;

/// Vertex shader: object-space position and u (r8-r11), normal and v
/// (r12-r15) from the 32-byte vertex at u0_u1 + 32 * id; clip position =
/// M (rows in u4-u19) * p; normal = N (rows in u20-u28) * n.
pub const VERTEX_SHADER: &str = "
    device_load 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r5, unsigned, lsl 3
    device_load 0, i32, xyzw, r12_r13_r14_r15, u2_u3, r5, unsigned, lsl 3
    wait 0
    fmadd32 r16, u4, r8, u7
    fmadd32 r16, u5, r9, r16
    fmadd32 r16, u6, r10, r16
    fmadd32 r17, u8, r8, u11
    fmadd32 r17, u9, r9, r17
    fmadd32 r17, u10, r10, r17
    fmadd32 r18, u12, r8, u15
    fmadd32 r18, u13, r9, r18
    fmadd32 r18, u14, r10, r18
    fmadd32 r19, u16, r8, u19
    fmadd32 r19, u17, r9, r19
    fmadd32 r19, u18, r10, r19
    fmul32 r20, u20, r12
    fmadd32 r20, u21, r13, r20
    fmadd32 r20, u22, r14, r20
    fmul32 r21, u23, r12
    fmadd32 r21, u24, r13, r21
    fmadd32 r21, u25, r14, r21
    fmul32 r22, u26, r12
    fmadd32 r22, u27, r13, r22
    fmadd32 r22, u28, r14, r22
    st_var 1, r16, 0
    st_var 1, r17, 1
    st_var 1, r18, 2
    st_var 1, r19, 3
    st_var 1, r20, 4
    st_var 1, r21, 5
    st_var 1, r22, 6
    st_var 1, r11, 7
    st_var 1, r15, 8
    stop";

/// Fragment shader: albedo from the texture (ts0, ss0) at the
/// interpolated uv (cf3-cf4); normalised interpolated normal (cf0-cf2);
/// colour = albedo * (ambient u3 + max(n.l, 0)) + specular u5 *
/// max(n.l, 0)^u4, with l in u0-u2 and alpha u6.
pub const FRAGMENT_SHADER: &str = "
    iterproj r2_r3_r4, cf0, cf5, center, 0, 0, 0, 0, 0
    iterproj r10_r11, cf3, cf5, center, 0, 0, 0, 0, 0
    texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r12_r13_r14_r15, None, ts0, ss0, tex_2d, r10_r11, auto_lod, 0, 0, r0
    fmul32 r5, r2, r2
    fmadd32 r5, r3, r3, r5
    fmadd32 r5, r4, r4, r5
    rsqrt r6, r5
    fmul32 r2, r2, r6
    fmul32 r3, r3, r6
    fmul32 r4, r4, r6
    fmul32 r7, r2, u0
    fmadd32 r7, r3, u1, r7
    fmadd32 r7, r4, u2, r7
    fcmpsel gtn, r7, r7, 0.0, r7, 0
    log2 r8, r7
    fmul32 r8, r8, u4
    exp2 r8, r8
    fmul32 r8, r8, u5
    fadd32 r9, r7, u3
    wait 0
    fmadd32 r16, r12, r9, r8
    fmadd32 r17, r13, r9, r8
    fmadd32 r18, r14, r9, r8
    mov r19, u6
    st_tile r16_r17_r18_r19, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

/// Texture size of the built-in albedo.
pub const TEXTURE_PX: u32 = 256;

/// A 4x4 matrix, rows.
pub type Mat4 = [[f32; 4]; 4];

fn mul(a: &Mat4, b: &Mat4) -> Mat4 {
    std::array::from_fn(|i| std::array::from_fn(|j| (0..4).map(|k| a[i][k] * b[k][j]).sum()))
}

/// Perspective projection (right-handed, looking down -z) to clip space
/// with depth in [0, 1].
fn perspective(fov_y: f32, aspect: f32, near: f32, far: f32) -> Mat4 {
    let f = 1.0 / (fov_y / 2.0).tan();
    [
        [f / aspect, 0.0, 0.0, 0.0],
        [0.0, f, 0.0, 0.0],
        [0.0, 0.0, far / (near - far), near * far / (near - far)],
        [0.0, 0.0, -1.0, 0.0],
    ]
}

/// The model transform at `angle`: a tilt, then a turn about y.
fn model(angle: f32) -> Mat4 {
    let (s, c) = angle.sin_cos();
    let (ts, tc) = 0.5f32.sin_cos();
    let turn = [
        [c, 0.0, s, 0.0],
        [0.0, 1.0, 0.0, 0.0],
        [-s, 0.0, c, 0.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    let tilt = [
        [1.0, 0.0, 0.0, 0.0],
        [0.0, tc, -ts, 0.0],
        [0.0, ts, tc, 0.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    mul(&tilt, &turn)
}

/// The albedo texture: a checkerboard of two warm tones with a thin grid.
pub fn albedo_texels() -> Vec<u8> {
    let mut texels = Vec::with_capacity((TEXTURE_PX * TEXTURE_PX * 4) as usize);
    for y in 0..TEXTURE_PX {
        for x in 0..TEXTURE_PX {
            let check = ((x / 32) + (y / 32)) % 2 == 0;
            let line = x % 32 < 2 || y % 32 < 2;
            let rgb = match (line, check) {
                (true, _) => [40, 30, 25],
                (false, true) => [230, 160, 70],
                (false, false) => [200, 80, 60],
            };
            texels.extend([rgb[0], rgb[1], rgb[2], 255]);
        }
    }
    texels
}

/// The colour the target is cleared to.
pub const CLEAR_COLOUR: [f32; 4] = [0.06, 0.07, 0.1, 1.0];

/// What a frame's shaders read: transforms, light and material. The
/// stack and the llvmpipe reference draw from the same numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FrameSetup {
    /// Object to clip space (depth in [0, w]), rows.
    pub mvp: Mat4,
    /// Object to eye space for normals (the model's rotation), rows.
    pub normal_matrix: [[f32; 3]; 3],
    /// Unit vector towards the light.
    pub light: [f32; 3],
    /// Ambient term added to the diffuse factor.
    pub ambient: f32,
    /// Specular exponent.
    pub shininess: f32,
    /// Specular intensity.
    pub specular: f32,
    /// Output alpha.
    pub alpha: f32,
}

impl FrameSetup {
    /// Frame `frame` (the mesh turned by 0.1 rad per frame) of a
    /// `width` x `height` target.
    pub fn new(frame: u32, width: u32, height: u32) -> FrameSetup {
        let view = [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, -2.6],
            [0.0, 0.0, 0.0, 1.0],
        ];
        let m = model(0.6 + 0.1 * frame as f32);
        let mvp = mul(
            &perspective(0.8, width as f32 / height as f32, 0.5, 10.0),
            &mul(&view, &m),
        );
        let light = {
            let l = [0.5f32, 0.7, 0.6];
            let n = (l[0] * l[0] + l[1] * l[1] + l[2] * l[2]).sqrt();
            l.map(|c| c / n)
        };
        FrameSetup {
            mvp,
            // The normal matrix of a rotation is the rotation.
            normal_matrix: std::array::from_fn(|i| std::array::from_fn(|j| m[i][j])),
            light,
            ambient: 0.15,
            shininess: 24.0,
            specular: 0.35,
            alpha: 1.0,
        }
    }
}

/// The mesh's vertices in the renderer's 32-byte layout: position x, y,
/// z, texture u, normal x, y, z, texture v.
pub fn interleaved_vertices(mesh: &Mesh) -> Vec<[f32; 8]> {
    mesh.vertices
        .iter()
        .map(|v| {
            [
                v.position[0],
                v.position[1],
                v.position[2],
                v.uv[0],
                v.normal[0],
                v.normal[1],
                v.normal[2],
                v.uv[1],
            ]
        })
        .collect()
}

/// What one frame did.
#[derive(Debug, Clone, Copy, Default)]
pub struct FrameReport {
    /// Wall time from submission to completion.
    pub gpu_time: Duration,
    /// Parameter-buffer statistics after the frame (simulated device).
    pub tvb: Option<agx_kmd::tvb::TvbStats>,
    /// Submissions that failed on the GPU so far (simulated device).
    pub faults: u64,
}

/// A scene ready to draw frames.
pub struct Renderer {
    device: Device,
    queue: Queue,
    programs: Arc<ProgramCache>,
    pipeline: Arc<GraphicsPipeline>,
    vertices: Buffer,
    indices: Buffer,
    index_count: u32,
    texture: Image,
    /// The colour target.
    pub image: Image,
    depth: DepthImage,
}

impl std::fmt::Debug for Renderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renderer")
            .field("index_count", &self.index_count)
            .finish_non_exhaustive()
    }
}

impl Renderer {
    /// Uploads `mesh`, the texture and the pipeline for `width` x
    /// `height` frames.
    pub fn new(device: &Device, mesh: &Mesh, width: u32, height: u32) -> Result<Renderer, Error> {
        let data: Vec<u8> = interleaved_vertices(mesh)
            .iter()
            .flatten()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let vertices = device.upload(&data, false)?;
        let index_bytes: Vec<u8> = mesh.indices.iter().flat_map(|i| i.to_le_bytes()).collect();
        let indices = device.upload(&index_bytes, false)?;
        let texture = Image::new(device, TEXTURE_PX, TEXTURE_PX, Format::Rgba8Unorm)?;
        texture.write_pixels(&albedo_texels())?;
        let pipeline = Arc::new(GraphicsPipeline::new(
            device,
            &GraphicsPipelineDesc {
                vertex_stack_bytes: 0,
                fragment_stack_bytes: 0,
                vertex: VERTEX_SHADER,
                fragment: FRAGMENT_SHADER,
                vertex_layout: None,
                stencil: None,
                vertex_outputs: 9,
                varyings: vec![
                    Varying {
                        slot: 4,
                        components: 3,
                        interpolation: Interpolation::Perspective,
                    },
                    Varying {
                        slot: 7,
                        components: 2,
                        interpolation: Interpolation::Perspective,
                    },
                ],
                depth: Some(DepthState {
                    function: ZsFunc::Less,
                    write: true,
                }),
                cull: CullMode::None,
                front_ccw: true,
                topology: Topology::Triangles,
                colour_output: ColourOutput::ShaderStores,
            },
        )?);
        Ok(Renderer {
            queue: Queue::new(device)?,
            programs: Arc::new(ProgramCache::new(device)),
            pipeline,
            vertices,
            indices,
            index_count: mesh.indices.len() as u32,
            texture,
            image: Image::new(device, width, height, Format::Rgba8Unorm)?,
            depth: DepthImage::new(device, width, height)?,
            device: device.clone(),
        })
    }

    /// Draws frame `frame` (the mesh turned by 0.1 rad per frame) and
    /// waits for it.
    pub fn frame(&self, frame: u32) -> Result<FrameReport, Error> {
        let setup = FrameSetup::new(frame, self.image.width(), self.image.height());
        let pair = |va: u64| [va as u32, (va >> 32) as u32];
        let mut vs = pair(self.vertices.va()).to_vec();
        vs.extend(pair(self.vertices.va() + 16));
        vs.extend(setup.mvp.iter().flatten().map(|v| v.to_bits()));
        vs.extend(setup.normal_matrix.iter().flatten().map(|v| v.to_bits()));
        let mut fs: Vec<u32> = setup.light.iter().map(|c| c.to_bits()).collect();
        fs.extend([setup.ambient, setup.shininess, setup.specular, setup.alpha].map(f32::to_bits));
        let sampler = Sampler {
            magnify: Filter::Linear,
            minify: Filter::Linear,
            wrap_s: Wrap::Repeat,
            wrap_t: Wrap::Repeat,
            max_lod: agx_hw::Lod::from_f32(0.0),
            ..Sampler::default()
        };
        let mut cb = CommandBuffer::new(&self.device, &self.programs);
        let mut pass = cb.begin_render_pass(&RenderPassDesc {
            colour: vec![ColourAttachment {
                image: &self.image,
                load: LoadOp::Clear(CLEAR_COLOUR),
                store: StoreOp::Store,
            }],
            depth: Some(DepthAttachment {
                image: &self.depth,
                load: LoadOp::Clear(1.0),
                store: StoreOp::DontCare,
                stencil: None,
            }),
        })?;
        pass.set_pipeline(&self.pipeline);
        pass.set_vertex_uniforms(&vs);
        pass.set_fragment_uniforms(&fs);
        pass.set_fragment_textures(&[&self.texture], &[sampler])?;
        pass.draw_indexed(&self.indices, 0, self.index_count, 1, 0)?;
        pass.end()?;
        cb.finish()?;
        let started = Instant::now();
        let result = self
            .queue
            .submit(vec![cb], &[], &[])?
            .wait(Duration::from_secs(600));
        let gpu_time = started.elapsed();
        let (tvb, faults) = match self.device.simulated() {
            Some(sim) => (
                sim.file().queue(self.queue.id()).map(|q| q.tvb_stats()),
                sim.system().device().scheduler().stats().faulted,
            ),
            None => (None, 0),
        };
        result?;
        Ok(FrameReport {
            gpu_time,
            tvb,
            faults,
        })
    }

    /// The frame as tightly packed RGBA8 rows.
    pub fn pixels(&self) -> Result<Vec<u8>, Error> {
        self.image.read_pixels()
    }
}

/// Encodes RGBA8 rows as a PNG.
pub fn encode_png(width: u32, height: u32, rgba: &[u8]) -> Result<Vec<u8>, png::EncodingError> {
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, width, height);
        encoder.set_color(png::ColorType::Rgba);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header()?;
        writer.write_image_data(rgba)?;
    }
    Ok(out)
}
