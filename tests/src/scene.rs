//! Scenes that stress the parameter buffer.
//!
//! What the tiler stores per primitive is its vertices' outputs, so the
//! buffer a frame needs grows with triangle count times varyings, not with
//! pixels: a dense mesh with many varyings overflows a buffer sized for its
//! screen area (the "impossible bug"). A [`LayeredScene`] is two full-screen
//! sheets of `grid x grid` quads each: a near green one drawn first and a
//! far red one drawn after it, depth-tested, each vertex carrying
//! `varyings` 32-bit outputs besides its position. The right picture is
//! green everywhere with depth 0.25; a partial render that loses colour
//! shows the clear colour, one that loses depth lets red through.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agx_hw::formats::ZsFunc;
use agx_kmd::tvb::{GrowthPolicy, TvbStats};
use agx_sim::SystemConfig;
use agx_umd::{
    Buffer, ColourAttachment, ColourOutput, CommandBuffer, CullMode, DepthAttachment, DepthImage,
    DepthState, Device, Error, Format, GraphicsPipeline, GraphicsPipelineDesc, Image,
    Interpolation, LoadOp, PassDebug, ProgramCache, Queue, RenderPassDesc, StoreOp, Topology,
    Varying,
};

/// The clear colour (RGBA8): none of the geometry's.
pub const CLEAR_RGBA: [u8; 4] = [0, 0, 255, 255];
/// The near sheet's colour.
pub const NEAR_RGBA: [u8; 4] = [0, 255, 0, 255];
/// The far sheet's colour.
pub const FAR_RGBA: [u8; 4] = [255, 0, 0, 255];

/// A device for the scenes: 2 GiB of RAM, `policy`, a parameter buffer
/// starting at `initial_blocks`.
pub fn device(policy: GrowthPolicy, initial_blocks: u64) -> Device {
    Device::open_simulated(SystemConfig {
        ram_bytes: 2 << 30,
        tvb_policy: policy,
        tvb_initial_blocks: initial_blocks,
        ..SystemConfig::default()
    })
    .expect("simulated device")
}

/// The vertex shader for `varyings` extra outputs: position (slots 0-3)
/// and colour (4-6) from 8-word vertices at u0_u1, the colour repeated to
/// fill the remaining slots.
fn vertex_shader(varyings: u32) -> String {
    let mut s = String::from(
        "    device_load 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r5, unsigned, lsl 3\n\
         device_load 0, i32, xyz, r12_r13_r14, u2_u3, r5, unsigned, lsl 3\n\
         wait 0\n",
    );
    for slot in 0..4 {
        s.push_str(&format!("    st_var 1, r{}, {slot}\n", 8 + slot));
    }
    for v in 0..varyings {
        s.push_str(&format!("    st_var 1, r{}, {}\n", 12 + v % 3, 4 + v));
    }
    s.push_str("    stop\n");
    s
}

/// Fragment shader: the flat colour (cf0-cf2), alpha 1, left for the
/// driver's epilogue.
const FRAGMENT_SHADER: &str = "
    iter r4_r5_r6, cf0, center, 0, 0, 0, 0, 0
    mov_imm r7, 0x3f800000";

/// Two full-screen sheets of dense geometry (see the module).
pub struct LayeredScene {
    device: Device,
    programs: Arc<ProgramCache>,
    pipeline: Arc<GraphicsPipeline>,
    vertices: Buffer,
    indices: Buffer,
    index_count: u32,
    /// Frame size in pixels.
    pub size: (u32, u32),
}

impl std::fmt::Debug for LayeredScene {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LayeredScene")
            .field("triangles", &self.triangles())
            .finish_non_exhaustive()
    }
}

/// What a frame produced.
#[derive(Debug, Clone)]
pub struct Frame {
    /// RGBA8 rows.
    pub colour: Vec<u8>,
    /// Depth per pixel, row-major.
    pub depth: Vec<f32>,
    /// The queue's parameter-buffer statistics after the frame.
    pub tvb: TvbStats,
    /// Wall time from submission to completion.
    pub time: Duration,
}

impl Frame {
    /// Pixels of colour `rgba`.
    pub fn count(&self, rgba: [u8; 4]) -> usize {
        self.colour.chunks_exact(4).filter(|p| *p == rgba).count()
    }
}

impl LayeredScene {
    /// Two sheets of `grid` x `grid` quads at `size`, each vertex with
    /// `varyings` outputs besides the position (at least 3: the colour).
    pub fn new(device: &Device, grid: u32, varyings: u32, size: (u32, u32)) -> Result<Self, Error> {
        let varyings = varyings.max(3);
        let n = grid as usize;
        let mut vertices = Vec::with_capacity(2 * (n + 1) * (n + 1) * 32);
        let mut indices: Vec<u32> = Vec::with_capacity(2 * n * n * 6);
        for (sheet, (z, colour)) in [(0.25f32, [0.0f32, 1.0, 0.0]), (0.75, [1.0, 0.0, 0.0])]
            .iter()
            .enumerate()
        {
            let base = (sheet * (n + 1) * (n + 1)) as u32;
            for j in 0..=n {
                for i in 0..=n {
                    let (x, y) = (
                        -1.0 + 2.0 * i as f32 / n as f32,
                        -1.0 + 2.0 * j as f32 / n as f32,
                    );
                    // A gentle wave in depth that never crosses the other
                    // sheet.
                    let z = z + 0.05 * (7.0 * x).sin() * (5.0 * y).cos();
                    for w in [x, y, z, 1.0, colour[0], colour[1], colour[2], 0.0] {
                        vertices.extend(w.to_le_bytes());
                    }
                }
            }
            let at = |i: usize, j: usize| base + (j * (n + 1) + i) as u32;
            for j in 0..n {
                for i in 0..n {
                    indices.extend([at(i, j), at(i + 1, j), at(i, j + 1)]);
                    indices.extend([at(i + 1, j), at(i + 1, j + 1), at(i, j + 1)]);
                }
            }
        }
        let vertex_source = vertex_shader(varyings);
        let pipeline = Arc::new(GraphicsPipeline::new(
            device,
            &GraphicsPipelineDesc {
                vertex_stack_bytes: 0,
                fragment_stack_bytes: 0,
                vertex: &vertex_source,
                fragment: FRAGMENT_SHADER,
                vertex_layout: None,
                stencil: None,
                vertex_outputs: 4 + varyings,
                varyings: vec![Varying {
                    slot: 4,
                    components: 3,
                    interpolation: Interpolation::Flat,
                }],
                depth: Some(DepthState {
                    function: ZsFunc::Less,
                    write: true,
                }),
                cull: CullMode::None,
                front_ccw: false,
                topology: Topology::Triangles,
                colour_output: ColourOutput::Registers {
                    format: Format::Rgba8Unorm,
                    blend: agx_umd::Blend::Replace,
                },
            },
        )?);
        let index_bytes: Vec<u8> = indices.iter().flat_map(|i| i.to_le_bytes()).collect();
        Ok(LayeredScene {
            device: device.clone(),
            programs: Arc::new(ProgramCache::new(device)),
            pipeline,
            vertices: device.upload(&vertices, false)?,
            indices: device.upload(&index_bytes, false)?,
            index_count: indices.len() as u32,
            size,
        })
    }

    /// Triangles per frame.
    pub fn triangles(&self) -> u32 {
        self.index_count / 3
    }

    /// Draws the first `triangles` triangles (all, if larger) into fresh
    /// targets on `queue` with `debug`'s mistakes, and waits.
    pub fn render_part(
        &self,
        queue: &Queue,
        debug: PassDebug,
        triangles: u32,
    ) -> Result<Frame, Error> {
        let (w, h) = self.size;
        let image = Image::new(&self.device, w, h, Format::Rgba8Unorm)?;
        let depth = DepthImage::new(&self.device, w, h)?;
        let mut cb = CommandBuffer::new(&self.device, &self.programs);
        cb.set_debug(debug);
        let mut pass = cb.begin_render_pass(&RenderPassDesc {
            colour: vec![ColourAttachment {
                image: &image,
                load: LoadOp::Clear([0.0, 0.0, 1.0, 1.0]),
                store: StoreOp::Store,
            }],
            depth: Some(DepthAttachment {
                image: &depth,
                load: LoadOp::Clear(1.0),
                store: StoreOp::Store,
                stencil: None,
            }),
        })?;
        pass.set_pipeline(&self.pipeline);
        let va = self.vertices.va();
        pass.set_vertex_uniforms(&[
            va as u32,
            (va >> 32) as u32,
            (va + 16) as u32,
            ((va + 16) >> 32) as u32,
        ]);
        pass.draw_indexed(&self.indices, 0, 3 * triangles.min(self.triangles()), 1, 0)?;
        pass.end()?;
        cb.finish()?;
        let started = Instant::now();
        queue
            .submit(vec![cb], &[], &[])?
            .wait(Duration::from_secs(300))?;
        let time = started.elapsed();
        let tvb = self
            .device
            .simulated()
            .and_then(|sim| sim.file().queue(queue.id()))
            .map(|q| q.tvb_stats())
            .unwrap_or_default();
        let depth = (0..h)
            .flat_map(|y| (0..w).map(move |x| (x, y)))
            .map(|(x, y)| depth.depth_at(x, y))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Frame {
            colour: image.read_pixels()?,
            depth,
            tvb,
            time,
        })
    }

    /// Draws the whole scene.
    pub fn render(&self, queue: &Queue, debug: PassDebug) -> Result<Frame, Error> {
        self.render_part(queue, debug, u32::MAX)
    }
}
