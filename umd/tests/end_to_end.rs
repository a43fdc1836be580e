//! The userspace driver end to end on the simulated device: passes,
//! draws, textures, compute and semaphores, with images checked against
//! references computed here.

use std::sync::Arc;
use std::time::Duration;

use agx_umd::*;

const WAIT: Duration = Duration::from_secs(60);

fn device() -> Device {
    Device::open_simulated(agx_sim::SystemConfig {
        ram_bytes: 1 << 30,
        ..agx_sim::SystemConfig::default()
    })
    .unwrap()
}

/// A simulated device with a queue and a program cache: what every test
/// here starts from.
fn gpu() -> (Device, Queue, Arc<ProgramCache>) {
    let device = device();
    let queue = Queue::new(&device).unwrap();
    let programs = Arc::new(ProgramCache::new(&device));
    (device, queue, programs)
}

fn run(device: &Device, queue: &Queue, cb: CommandBuffer) -> Result<(), Error> {
    let _ = device;
    let mut cb = cb;
    cb.finish()?;
    queue.submit(vec![cb], &[], &[])?.wait(WAIT)
}

#[test_log::test]
fn a_cleared_pass_stores_the_clear_colour_everywhere() {
    let (device, queue, programs) = gpu();
    let image = Image::new(&device, 70, 40, Format::Rgba8Unorm).unwrap();
    let mut cb = CommandBuffer::new(&device, &programs);
    let pass = cb
        .begin_render_pass(&RenderPassDesc {
            colour: vec![ColourAttachment {
                image: &image,
                load: LoadOp::Clear([1.0, 0.5, 0.0, 1.0]),
                store: StoreOp::Store,
            }],
            depth: None,
        })
        .unwrap();
    pass.end().unwrap();
    run(&device, &queue, cb).unwrap();
    let pixels = image.read_pixels().unwrap();
    assert_eq!(pixels.len(), 70 * 40 * 4);
    assert!(pixels.chunks_exact(4).all(|p| p == [255, 128, 0, 255]));
}

/// Vertex shader: vertices of 8 words (clip-space position, three
/// attribute words, one pad) from the buffer at u0_u1; outputs the
/// position and the attributes (slots 4-6).
const VS: &str = "
    device_load 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r5, unsigned, lsl 3
    device_load 0, i32, xyz, r12_r13_r14, u2_u3, r5, unsigned, lsl 3
    wait 0
    st_var 1, r8, 0
    st_var 1, r9, 1
    st_var 1, r10, 2
    st_var 1, r11, 3
    st_var 1, r12, 4
    st_var 1, r13, 5
    st_var 1, r14, 6
    stop";

/// Fragment shader: the colour in u0..u3.
const FLAT_FS: &str = "
    mov r4, u0
    mov r5, u1
    mov r6, u2
    mov r7, u3
    st_tile r4_r5_r6_r7, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

/// Fragment shader: the interpolated attributes (cf0-cf2) as colour.
const VARYING_FS: &str = "
    iter r4_r5_r6, cf0, center, 0, 0, 0, 0, 0
    mov_imm r7, 0x3f800000
    st_tile r4_r5_r6_r7, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

/// Fragment shader: samples ts0 with ss0 at the interpolated (cf0, cf1).
const TEXTURED_FS: &str = "
    iter r2_r3, cf0, center, 0, 0, 0, 0, 0
    texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r4_r5_r6_r7, None, ts0, ss0, tex_2d, r2_r3, auto_lod, 0, 0, r0
    wait 0
    st_tile r4_r5_r6_r7, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

fn pipeline(device: &Device, fs: &str, depth: Option<DepthState>) -> Arc<GraphicsPipeline> {
    staged_pipeline(device, VS, fs, depth, [0, 0])
}

/// [`pipeline`] with the vertex shader `vs` and per-thread stacks of
/// `stack_bytes` (vertex, fragment).
fn staged_pipeline(
    device: &Device,
    vs: &str,
    fs: &str,
    depth: Option<DepthState>,
    stack_bytes: [u32; 2],
) -> Arc<GraphicsPipeline> {
    Arc::new(
        GraphicsPipeline::new(
            device,
            &GraphicsPipelineDesc {
                vertex_stack_bytes: stack_bytes[0],
                fragment_stack_bytes: stack_bytes[1],
                vertex: vs,
                fragment: fs,
                vertex_layout: None,
                stencil: None,
                vertex_outputs: 7,
                varyings: vec![Varying {
                    slot: 4,
                    components: 3,
                    interpolation: Interpolation::Linear,
                }],
                depth,
                cull: CullMode::None,
                front_ccw: false,
                topology: Topology::Triangles,
                colour_output: ColourOutput::ShaderStores,
            },
        )
        .unwrap(),
    )
}

/// Vertex data for window-space corners on a `w` x `h` target at depth
/// `z`, with attributes.
fn vertices(w: u32, h: u32, corners: &[[f32; 2]], z: f32, attrs: &[[f32; 3]]) -> Vec<u8> {
    let (hw, hh) = (w as f32 / 2.0, h as f32 / 2.0);
    let mut out = Vec::new();
    for (i, [x, y]) in corners.iter().enumerate() {
        let a = attrs[i % attrs.len()];
        for v in [(x - hw) / hw, (hh - y) / hh, z, 1.0, a[0], a[1], a[2], 0.0] {
            out.extend(v.to_le_bytes());
        }
    }
    out
}

/// A read-only buffer holding `words`, little-endian.
fn upload_words(device: &Device, words: impl IntoIterator<Item = u32>) -> Buffer {
    let bytes: Vec<u8> = words.into_iter().flat_map(u32::to_le_bytes).collect();
    device.upload(&bytes, false).unwrap()
}

/// A writable buffer of `count` zero words.
fn zeroed_words(device: &Device, count: u32) -> Buffer {
    device.upload(&vec![0u8; 4 * count as usize], true).unwrap()
}

/// The first `count` little-endian words of `buffer`.
fn read_words(buffer: &Buffer, count: usize) -> Vec<u32> {
    buffer
        .read_all()
        .unwrap()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .take(count)
        .collect()
}

fn pair(va: u64) -> [u32; 2] {
    [va as u32, (va >> 32) as u32]
}

fn vs_uniforms(buffer: &Buffer) -> Vec<u32> {
    let mut u = pair(buffer.va()).to_vec();
    u.extend(pair(buffer.va() + 16));
    u
}

/// An independent rasteriser: whether pixel centre (x, y) is inside the
/// triangle by the top-left rule (y down).
fn covers(t: [[f64; 2]; 3], x: f64, y: f64) -> bool {
    let area =
        (t[1][0] - t[0][0]) * (t[2][1] - t[0][1]) - (t[2][0] - t[0][0]) * (t[1][1] - t[0][1]);
    if area == 0.0 {
        return false;
    }
    let t = if area > 0.0 { t } else { [t[0], t[2], t[1]] };
    (0..3).all(|i| {
        let (a, b) = (t[i], t[(i + 1) % 3]);
        let e = (b[0] - a[0]) * (y - a[1]) - (b[1] - a[1]) * (x - a[0]);
        let top = a[1] == b[1] && b[0] > a[0];
        let left = b[1] < a[1];
        e > 0.0 || (e == 0.0 && (top || left))
    })
}

/// A pass over `image` and `depth`, clearing both and storing both.
fn colour_depth_pass<'a>(
    image: &'a Image,
    depth: &'a DepthImage,
    clear: [f32; 4],
    clear_depth: f32,
) -> RenderPassDesc<'a> {
    RenderPassDesc {
        colour: vec![ColourAttachment {
            image,
            load: LoadOp::Clear(clear),
            store: StoreOp::Store,
        }],
        depth: Some(DepthAttachment {
            image: depth,
            load: LoadOp::Clear(clear_depth),
            store: StoreOp::Store,
            stencil: None,
        }),
    }
}

/// The varyings-as-colour pipeline with a less-than depth test that
/// writes depth.
fn depth_tested(device: &Device) -> Arc<GraphicsPipeline> {
    pipeline(
        device,
        VARYING_FS,
        Some(DepthState {
            function: agx_hw::formats::ZsFunc::Less,
            write: true,
        }),
    )
}

fn colour_pass<'a>(image: &'a Image, clear: [f32; 4]) -> RenderPassDesc<'a> {
    RenderPassDesc {
        colour: vec![ColourAttachment {
            image,
            load: LoadOp::Clear(clear),
            store: StoreOp::Store,
        }],
        depth: None,
    }
}

#[test_log::test]
fn a_triangle_covers_exactly_what_an_independent_rasteriser_finds() {
    let (device, queue, programs) = gpu();
    let (w, h) = (96, 64);
    let image = Image::new(&device, w, h, Format::Rgba8Unorm).unwrap();
    let corners = [[3.5f32, 2.25], [90.0, 20.5], [30.25, 61.0]];
    let vb = device
        .upload(&vertices(w, h, &corners, 0.5, &[[0.0; 3]]), false)
        .unwrap();
    let pipe = pipeline(&device, FLAT_FS, None);
    let mut cb = CommandBuffer::new(&device, &programs);
    let mut pass = cb
        .begin_render_pass(&colour_pass(&image, [0.0; 4]))
        .unwrap();
    pass.set_pipeline(&pipe);
    pass.set_vertex_uniforms(&vs_uniforms(&vb));
    pass.set_fragment_uniforms(&[1.0f32.to_bits(), 0, 0, 1.0f32.to_bits()]);
    pass.draw(3, 1, 0).unwrap();
    pass.end().unwrap();
    run(&device, &queue, cb).unwrap();
    let pixels = image.read_pixels().unwrap();
    let t = corners.map(|[x, y]| [f64::from(x), f64::from(y)]);
    let mut inside = 0;
    for y in 0..h {
        for x in 0..w {
            let expected = covers(t, f64::from(x) + 0.5, f64::from(y) + 0.5);
            let at = 4 * (y * w + x) as usize;
            let want: [u8; 4] = if expected { [255, 0, 0, 255] } else { [0; 4] };
            assert_eq!(pixels[at..at + 4], want, "pixel ({x}, {y})");
            inside += usize::from(expected);
        }
    }
    assert!(inside > 1000, "{inside} pixels covered");
}

/// Near green (depth 0.25; depth writes as `near_writes` says), then
/// far red (0.75, writing), both tested with less-than over a blue clear
/// at depth 1: the colour at (5, 5) and at (60, 60) (outside both), and
/// the depth stored there.
fn near_then_far(near_writes: bool) -> ([[u8; 3]; 2], [f32; 2]) {
    let (device, queue, programs) = gpu();
    let (w, h) = (64, 64);
    let image = Image::new(&device, w, h, Format::Rgba8Unorm).unwrap();
    let depth = DepthImage::new(&device, w, h).unwrap();
    let tri = [[0.0f32, 0.0], [64.0, 0.0], [0.0, 64.0]];
    let near = device
        .upload(&vertices(w, h, &tri, 0.25, &[[0.0, 1.0, 0.0]]), false)
        .unwrap();
    let far = device
        .upload(&vertices(w, h, &tri, 0.75, &[[1.0, 0.0, 0.0]]), false)
        .unwrap();
    let near_pipeline = pipeline(
        &device,
        VARYING_FS,
        Some(DepthState {
            function: agx_hw::formats::ZsFunc::Less,
            write: near_writes,
        }),
    );
    let mut cb = CommandBuffer::new(&device, &programs);
    let mut pass = cb
        .begin_render_pass(&colour_depth_pass(
            &image,
            &depth,
            [0.0, 0.0, 1.0, 1.0],
            1.0,
        ))
        .unwrap();
    pass.set_pipeline(&near_pipeline);
    pass.set_vertex_uniforms(&vs_uniforms(&near));
    pass.draw(3, 1, 0).unwrap();
    pass.set_pipeline(&depth_tested(&device));
    pass.set_vertex_uniforms(&vs_uniforms(&far));
    pass.draw(3, 1, 0).unwrap();
    pass.end().unwrap();
    run(&device, &queue, cb).unwrap();
    let pixels = image.read_pixels().unwrap();
    let at = |(x, y): (u32, u32)| {
        let i = 4 * (y * w + x) as usize;
        [pixels[i], pixels[i + 1], pixels[i + 2]]
    };
    let points = [(5, 5), (60, 60)];
    (
        points.map(at),
        points.map(|(x, y)| depth.depth_at(x, y).unwrap()),
    )
}

#[test_log::test]
fn the_nearer_triangle_wins_and_depth_is_stored() {
    let ([inside, outside], depths) = near_then_far(true);
    assert_eq!(inside, [0, 255, 0], "near green in front of far red");
    assert_eq!(outside, [0, 0, 255], "the clear outside");
    assert_eq!(depths, [0.25, 1.0]);
}

#[test_log::test]
fn a_depth_test_without_depth_writes_leaves_depth_as_it_was() {
    // Red passes where green did not write its depth.
    let ([inside, outside], depths) = near_then_far(false);
    assert_eq!(inside, [255, 0, 0], "far red over untracked green");
    assert_eq!(outside, [0, 0, 255], "the clear outside");
    assert_eq!(depths, [0.75, 1.0]);
}

/// The texel of the test texture at (x, y).
fn texel(x: u32, y: u32) -> [u8; 4] {
    [(x * 16) as u8, (y * 16) as u8, ((x + y) * 8) as u8, 255]
}

/// The test texture (16x16 [`texel`]s) drawn with `sampler` onto a
/// `size`-pixel image by a quad whose texture coordinates run from 0 to
/// 1: the image's pixels.
fn textured_quad(size: u32, sampler: agx_hw::formats::Sampler) -> Vec<u8> {
    let (device, queue, programs) = gpu();
    let texture = Image::new(&device, 16, 16, Format::Rgba8Unorm).unwrap();
    let texels: Vec<u8> = (0..16)
        .flat_map(|y| (0..16).flat_map(move |x| texel(x, y)))
        .collect();
    texture.write_pixels(&texels).unwrap();
    let image = Image::new(&device, size, size, Format::Rgba8Unorm).unwrap();
    let side = size as f32;
    let mut data = Vec::new();
    for [x, y] in [
        [0.0f32, 0.0],
        [1.0, 0.0],
        [0.0, 1.0],
        [1.0, 0.0],
        [1.0, 1.0],
        [0.0, 1.0],
    ] {
        data.extend(vertices(
            size,
            size,
            &[[x * side, y * side]],
            0.5,
            &[[x, y, 0.0]],
        ));
    }
    let vb = device.upload(&data, false).unwrap();
    let pipe = pipeline(&device, TEXTURED_FS, None);
    let mut cb = CommandBuffer::new(&device, &programs);
    let mut pass = cb
        .begin_render_pass(&colour_pass(&image, [0.0; 4]))
        .unwrap();
    pass.set_pipeline(&pipe);
    pass.set_vertex_uniforms(&vs_uniforms(&vb));
    pass.set_fragment_textures(&[&texture], &[sampler]).unwrap();
    pass.draw(6, 1, 0).unwrap();
    pass.end().unwrap();
    run(&device, &queue, cb).unwrap();
    image.read_pixels().unwrap()
}

#[test_log::test]
fn a_textured_quad_shows_every_texel_once() {
    let sampler = agx_hw::formats::Sampler {
        max_lod: agx_hw::Lod::from_f32(0.0),
        ..agx_hw::formats::Sampler::default()
    };
    let texels: Vec<u8> = (0..16)
        .flat_map(|y| (0..16).flat_map(move |x| texel(x, y)))
        .collect();
    assert_eq!(textured_quad(16, sampler), texels);
}

#[test_log::test]
fn a_sampler_whose_greatest_lod_is_0_magnifies_a_minified_quad() {
    // 16x16 texels onto 8x8 pixels: λ is 1, which a greatest LOD of 0
    // clamps to 0, so the magnification filter (nearest) reads texel
    // (2i + 1, 2j + 1) at pixel (i, j); the minification filter (linear)
    // would average two texels each way.
    let sampler = agx_hw::formats::Sampler {
        max_lod: agx_hw::Lod::from_f32(0.0),
        magnify: agx_hw::formats::Filter::Nearest,
        minify: agx_hw::formats::Filter::Linear,
        ..agx_hw::formats::Sampler::default()
    };
    let expected: Vec<u8> = (0..8)
        .flat_map(|j| (0..8).flat_map(move |i| texel(2 * i + 1, 2 * j + 1)))
        .collect();
    assert_eq!(textured_quad(8, sampler), expected);
}

#[test_log::test]
fn loading_keeps_what_an_earlier_pass_stored_and_unchanged_state_is_not_re_emitted() {
    let (device, queue, programs) = gpu();
    let (w, h) = (64, 64);
    let image = Image::new(&device, w, h, Format::Rgba8Unorm).unwrap();
    let mut cb = CommandBuffer::new(&device, &programs);
    cb.begin_render_pass(&colour_pass(&image, [0.0, 0.0, 1.0, 1.0]))
        .unwrap()
        .end()
        .unwrap();
    // 64 little squares (two triangles each), one draw per square; the
    // first 32 in one colour (no state change between them), the rest
    // each in its own colour.
    let mut data = Vec::new();
    for i in 0..64u32 {
        let (x, y) = ((i % 8 * 8) as f32, (i / 8 * 8) as f32);
        let c = [
            [x, y],
            [x + 4.0, y],
            [x, y + 4.0],
            [x + 4.0, y],
            [x + 4.0, y + 4.0],
            [x, y + 4.0],
        ];
        data.extend(vertices(w, h, &c, 0.5, &[[0.0; 3]]));
    }
    let vb = device.upload(&data, false).unwrap();
    let pipe = pipeline(&device, FLAT_FS, None);
    let mut pass = cb
        .begin_render_pass(&RenderPassDesc {
            colour: vec![ColourAttachment {
                image: &image,
                load: LoadOp::Load,
                store: StoreOp::Store,
            }],
            depth: None,
        })
        .unwrap();
    pass.set_pipeline(&pipe);
    pass.set_vertex_uniforms(&vs_uniforms(&vb));
    let colour = |i: u32| -> [u32; 4] {
        if i < 32 {
            [1.0f32, 1.0, 0.0, 1.0].map(f32::to_bits)
        } else {
            [(i as f32) / 64.0, 0.0, 0.0, 1.0].map(f32::to_bits)
        }
    };
    for i in 0..64 {
        pass.set_fragment_uniforms(&colour(i));
        pass.draw(6, 1, 6 * i).unwrap();
    }
    pass.end().unwrap();
    let stats = cb.stats();
    assert_eq!(stats.draws, 64);
    assert_eq!(stats.vertex_states, 1, "one vertex state for every draw");
    assert_eq!(
        stats.ppp_states, 34,
        "viewport and scissor once; fragment state once for the first 32, once per later colour"
    );
    run(&device, &queue, cb).unwrap();
    let pixels = image.read_pixels().unwrap();
    for i in 0..64u32 {
        let (x, y) = (i % 8 * 8, i / 8 * 8);
        let inside = 4 * ((y + 1) * w + x + 1) as usize;
        let expected: Vec<u8> = colour(i)
            .iter()
            .map(|b| (f32::from_bits(*b) * 255.0).round() as u8)
            .collect();
        assert_eq!(pixels[inside..inside + 4], expected[..], "square {i}");
        let outside = 4 * ((y + 6) * w + x + 6) as usize;
        assert_eq!(
            pixels[outside..outside + 4],
            [0, 0, 255, 255],
            "loaded clear"
        );
    }
}

#[test_log::test]
fn the_scissor_and_the_viewport_rectangle_bound_what_is_drawn() {
    // A square over the whole target, drawn three times in one pass: with
    // a scissor, then with a smaller viewport (which maps the square onto
    // it and draws nothing outside it), then with both, in a new colour
    // each time (state that reaches the GPU as separate PPP updates).
    let (device, queue, programs) = gpu();
    let (w, h) = (64, 64);
    let image = Image::new(&device, w, h, Format::Rgba8Unorm).unwrap();
    let (fw, fh) = (w as f32, h as f32);
    let square = [
        [0.0, 0.0],
        [fw, 0.0],
        [0.0, fh],
        [fw, 0.0],
        [fw, fh],
        [0.0, fh],
    ];
    let vb = device
        .upload(&vertices(w, h, &square, 0.5, &[[0.0; 3]]), false)
        .unwrap();
    let pipe = pipeline(&device, FLAT_FS, None);
    let mut cb = CommandBuffer::new(&device, &programs);
    let mut pass = cb
        .begin_render_pass(&colour_pass(&image, [0.0, 0.0, 0.0, 1.0]))
        .unwrap();
    pass.set_pipeline(&pipe);
    pass.set_vertex_uniforms(&vs_uniforms(&vb));
    let colour = |r: f32, g: f32, b: f32| [r, g, b, 1.0].map(f32::to_bits);
    pass.set_scissor(Some([4, 8, 10, 6]));
    pass.set_fragment_uniforms(&colour(1.0, 0.0, 0.0));
    pass.draw(6, 1, 0).unwrap();
    pass.set_scissor(None);
    pass.set_viewport(32.0, 32.0, 16.0, 8.0, 0.0, 1.0);
    pass.set_fragment_uniforms(&colour(0.0, 1.0, 0.0));
    pass.draw(6, 1, 0).unwrap();
    pass.set_scissor(Some([40, 0, 64, 64]));
    pass.set_fragment_uniforms(&colour(0.0, 0.0, 1.0));
    pass.draw(6, 1, 0).unwrap();
    pass.end().unwrap();
    run(&device, &queue, cb).unwrap();
    let pixels = image.read_pixels().unwrap();
    let at = |x: u32, y: u32| {
        let i = 4 * (y * w + x) as usize;
        [pixels[i], pixels[i + 1], pixels[i + 2]]
    };
    for y in 0..h {
        for x in 0..w {
            let expected = if (40..48).contains(&x) && (32..40).contains(&y) {
                [0, 0, 255]
            } else if (32..48).contains(&x) && (32..40).contains(&y) {
                [0, 255, 0]
            } else if (4..14).contains(&x) && (8..14).contains(&y) {
                [255, 0, 0]
            } else {
                [0, 0, 0]
            };
            assert_eq!(at(x, y), expected, "pixel ({x}, {y})");
        }
    }
}

/// y[i] = a * x[i] + b for i < n (x at u0_u1, y at u2_u3, a, b, n in
/// u4..u6).
const AXPB: &str = "
    get_sr r1, sr80
    if_icmp r0l, ult, r1, u6, 1
    jmp_exec_none done
    device_load 0, i32, x, r2, u0_u1, r1, unsigned
    wait 0
    fmadd32 r3, u4, r2, u5
    device_store 0, i32, x, r3, u2_u3, r1, unsigned, 0
done:
    pop_exec r0l, 1
    stop";

fn axpb(device: &Device, cb: &mut CommandBuffer, x: &Buffer, y_va: u64, n: u32) -> Shader {
    let shader = Shader::new(device, AXPB).unwrap();
    let mut words = pair(x.va()).to_vec();
    words.extend(pair(y_va));
    words.extend([3.0f32.to_bits(), 0.5f32.to_bits(), n]);
    let bindings = Bindings::default()
        .with_uniform_words(cb.arena(), &words)
        .unwrap();
    cb.dispatch(
        &shader,
        &bindings,
        [n.next_multiple_of(64), 1, 1],
        [64, 1, 1],
    )
    .unwrap();
    shader
}

#[test_log::test]
fn a_compute_dispatch_matches_rust() {
    let (device, queue, programs) = gpu();
    let n = 1000u32;
    let input: Vec<f32> = (0..n).map(|i| i as f32 * 0.75 - 100.0).collect();
    let x = upload_words(&device, input.iter().map(|v| v.to_bits()));
    let y = zeroed_words(&device, n);
    let mut cb = CommandBuffer::new(&device, &programs);
    let _shader = axpb(&device, &mut cb, &x, y.va(), n);
    run(&device, &queue, cb).unwrap();
    let out = y.read_all().unwrap();
    for (i, v) in input.iter().enumerate() {
        let got = f32::from_le_bytes(out[4 * i..4 * i + 4].try_into().unwrap());
        assert_eq!(
            got.to_bits(),
            3.0f32.mul_add(*v, 0.5).to_bits(),
            "element {i}"
        );
    }
}

/// A recursive routine on the per-thread stack: each thread computes
/// f(n) = 3 f(n - 1) + n, f(0) = 1, for n = its position mod 32, by
/// calling itself; each level keeps its return address and n in a
/// two-word stack frame. Lanes of a SIMD-group recurse to different
/// depths (the exec mask drops those that reached 0).
const RECURSIVE: &str = "
    get_sr r5, sr80
    and r2, r5, 31
    call recurse
    device_store 0, i32, x, r3, u0_u1, r5, unsigned, 0
    stop
recurse:
    stack_adjust 0, 1, 2, 0, 0, 2
    stack_store i32, 1, 0, xy, 4, r1_r2, 0, 0
    mov_imm r3, 1
    if_icmp r0l, ugt, r2, 0, 1
    jmp_exec_none base
    isub r2, r2, 1
    call recurse
    stack_load r4, i32, 1, 0, x, 4, 4, 0
    wait 0
    imadd r3, r3, 3, r4
base:
    pop_exec r0l, 1
    stack_load r1, i32, 1, 0, x, 4, 0, 0
    wait 0
    stack_adjust 0, 1, 2, 0, 0, -2
    ret r1";

fn recursive_reference(n: u32) -> u32 {
    if n == 0 {
        1
    } else {
        recursive_reference(n - 1).wrapping_mul(3).wrapping_add(n)
    }
}

/// Each of `threads` words of `out` is RECURSIVE's answer for its thread.
fn assert_recursive_results(out: &Buffer, threads: u32) {
    let words = read_words(out, threads as usize);
    for (i, got) in words.iter().enumerate() {
        assert_eq!(*got, recursive_reference(i as u32 % 32), "thread {i}");
    }
}

/// Records RECURSIVE over `threads` threads (groups of 64) writing to
/// `out`, on stacks of `stack_bytes` per thread.
fn record_recursive(
    cb: &mut CommandBuffer,
    shader: &Shader,
    out: &Buffer,
    threads: u32,
    stack_bytes: u32,
) {
    let mut bindings = Bindings::default()
        .with_uniform_words(cb.arena(), &pair(out.va()))
        .unwrap();
    bindings.stack_bytes = stack_bytes;
    cb.dispatch(shader, &bindings, [threads, 1, 1], [64, 1, 1])
        .unwrap();
}

#[test_log::test]
fn a_recursive_routine_runs_on_stacks_the_helper_program_hands_out() {
    let (device, queue, programs) = gpu();
    let threads = 256u32;
    let out = zeroed_words(&device, threads);
    let shader = Shader::new(&device, RECURSIVE).unwrap();
    // 33 levels of two words.
    let mut cb = CommandBuffer::new(&device, &programs);
    record_recursive(&mut cb, &shader, &out, threads, 33 * 8);
    cb.finish().unwrap();
    let agx_umd::cmd::Command::Compute(command) = &cb.commands()[0] else {
        panic!("not a compute command");
    };
    assert_ne!(command.helper.binary, 0, "the command names the helper");
    queue
        .submit(vec![cb], &[], &[])
        .unwrap()
        .wait(WAIT)
        .unwrap();
    assert_recursive_results(&out, threads);
    // Too deep a recursion for the stack faults instead of running off
    // its end.
    let mut cb = CommandBuffer::new(&device, &programs);
    record_recursive(&mut cb, &shader, &out, threads, 16 * 8);
    let err = run(&device, &queue, cb).unwrap_err();
    assert!(
        matches!(err, Error::GpuFault { errno } if errno == Errno::EIO),
        "{err}"
    );
}

/// A preshader that spills: it keeps a value on its stack, reads it back
/// and stores it, plus one, to uniform u2, which every thread of the
/// kernel then writes out. The command's helper is configured to hand
/// preshaders stacks (bit 16, as Mesa's `cs_preamble_scratch`); the
/// kernel itself needs none.
const SPILLING_PRESHADER: &str = "
    stack_adjust 0, 1, 2, 0, 0, 2
    mov_imm r1, 1234
    stack_store i32, 1, 0, x, 4, r1, 0, 0
    mov_imm r1, 0
    stack_load r2, i32, 1, 0, x, 4, 0, 0
    wait 0
    iadd r2, r2, 1
    uniform_store 2, i16, xy, 0, r2l_r2h, 4
    stack_adjust 0, 1, 2, 0, 0, -2
    stop";

/// Writes u2 to word `thread` of the buffer at u0_u1.
const WRITE_U2: &str = "
    get_sr r5, sr80
    mov r3, u2
    device_store 0, i32, x, r3, u0_u1, r5, unsigned, 0
    stop";

#[test_log::test]
fn a_preshader_that_spills_runs_on_a_stack_from_the_helper() {
    let (device, queue, programs) = gpu();
    let threads = 128u32;
    let out = zeroed_words(&device, threads);
    let kernel = Shader::new(&device, WRITE_U2).unwrap();
    let preshader = Shader::new(&device, SPILLING_PRESHADER).unwrap();
    let mut cb = CommandBuffer::new(&device, &programs);
    let mut bindings = Bindings::default()
        .with_uniform_words(cb.arena(), &[out.va() as u32, (out.va() >> 32) as u32, 0])
        .unwrap();
    bindings.preshader = Some((preshader.code_offset(), 8));
    cb.dispatch(&kernel, &bindings, [threads, 1, 1], [64, 1, 1])
        .unwrap();
    cb.finish().unwrap();
    let agx_umd::cmd::Command::Compute(command) = &cb.commands()[0] else {
        panic!("not a compute command");
    };
    assert_ne!(command.helper.binary, 0, "the command names the helper");
    assert_eq!(command.helper.cfg, 1 << 16, "preshaders get stacks");
    run(&device, &queue, cb).unwrap();
    assert_eq!(
        read_words(&out, threads as usize),
        vec![1235; threads as usize]
    );
}

/// Helper programs that break the doorbell protocol: each fails its
/// command with `EIO` (logged with the helper's address), and the queue
/// then runs the next command with the driver's helper as if nothing had
/// happened.
#[test_log::test]
fn a_helper_that_breaks_the_protocol_fails_only_its_command() {
    let (device, queue, programs) = gpu();
    let threads = 64u32;
    let out = zeroed_words(&device, threads);
    let shader = Shader::new(&device, RECURSIVE).unwrap();
    let record = |helper: Option<&str>| {
        let mut cb = CommandBuffer::new(&device, &programs);
        if let Some(source) = helper {
            cb.set_helper_source(source).unwrap();
        }
        record_recursive(&mut cb, &shader, &out, threads, 33 * 8);
        cb
    };
    let broken = [
        // Refuses every stack (and stops when told to).
        "loop:
            doorbell 32
            get_sr r1, sr144
            if_icmp r0l, ueq, r1, 15, 1
            jmp_exec_any end
            pop_exec r0l, 1
            doorbell 49
            jmp_exec_any loop
        end:
            pop_exec r0l, 1
            stop",
        // Stops before asking for work.
        "stop",
        // Rings a value the protocol has no meaning for.
        "doorbell 7\nstop",
        // Waits at a threadgroup barrier, which a helper has no group for.
        "threadgroup_barrier\nstop",
        // Faults on an unmapped address.
        "mov_imm r2, 0\nmov_imm r3, 16\ndevice_load 0, i32, x, r4, r2_r3, 0, unsigned\nwait 0\ndoorbell 32\nstop",
    ];
    for source in broken {
        let err = run(&device, &queue, record(Some(source))).unwrap_err();
        assert!(
            matches!(err, Error::GpuFault { errno } if errno == Errno::EIO),
            "{source}: {err}"
        );
    }
    run(&device, &queue, record(None)).unwrap();
    assert_recursive_results(&out, threads);
}

/// A histogram of 16 bins: each threadgroup counts its values in
/// threadgroup memory with threadgroup atomics, then adds its counts to
/// the global histogram with device atomics.
const HISTOGRAM: &str = "
    get_sr r5, sr80
    get_sr r6, sr51
    if_icmp r0l, ult, r6, 16, 1
    mov_imm r7, 0
    threadgroup_store i32, x, r7, 0, r6l
    pop_exec r0l, 1
    threadgroup_barrier
    device_load 0, i32, x, r8, u0_u1, r5, unsigned
    wait 0
    and r9, r8, 15
    mov_imm r10, 1
    threadgroup_atomic add, 0, 0, r9l, r10, 0, 2, 128, 0
    threadgroup_barrier
    if_icmp r0l, ult, r6, 16, 1
    threadgroup_load i32, x, r11, 0, r6l
    wait 0
    atomic add, 0, 0, u2_u3, r6, signed, r11, 1, 1, 1, 1
    pop_exec r0l, 1
    stop";

#[test_log::test]
fn a_histogram_with_threadgroup_atomics_from_many_threadgroups_matches_rust() {
    let (device, queue, programs) = gpu();
    let n = 4096u32;
    // A deterministic, uneven spread of values.
    let values: Vec<u32> = (0..n).map(|i| (i * i + 7 * i) / 5 % 1009).collect();
    let input = upload_words(&device, values.iter().copied());
    let histogram = device.upload(&[0u8; 64], true).unwrap();
    let shader = Shader::new(&device, HISTOGRAM).unwrap();
    let mut cb = CommandBuffer::new(&device, &programs);
    let mut words = pair(input.va()).to_vec();
    words.extend(pair(histogram.va()));
    let mut bindings = Bindings::default()
        .with_uniform_words(cb.arena(), &words)
        .unwrap();
    bindings.shared_bytes = 64;
    cb.dispatch(&shader, &bindings, [n, 1, 1], [256, 1, 1])
        .unwrap();
    run(&device, &queue, cb).unwrap();
    let mut want = [0u32; 16];
    for v in &values {
        want[(v % 16) as usize] += 1;
    }
    let got = read_words(&histogram, 16);
    assert_eq!(got, want);
    assert!(want.iter().any(|&c| c != want[0]), "an uneven histogram");
}

/// Each thread writes one texel with `image_write` through a PBE
/// descriptor: 0x40000000 + 1000 y + x as the R channel's bits (normal
/// floats, stored unchanged by an R32Float image).
const IMAGE_WRITE: &str = "
    get_sr r4, sr80
    get_sr r5, sr81
    imadd r6, r5, u0, r4
    iadd r8, r6, u1
    mov_imm r9, 0
    mov_imm r10, 0
    mov_imm r11, 0
    image_write r8_r9_r10_r11, r4_r5, 0, None, ts0, tex_2d, rte, 9, 1
    stop";

#[test_log::test]
fn image_writes_from_a_kernel_reach_linear_and_tiled_images() {
    let (device, queue, programs) = gpu();
    let (w, h) = (40, 36);
    let shader = Shader::new(&device, IMAGE_WRITE).unwrap();
    let images = [
        Image::new(&device, w, h, Format::R32Float).unwrap(),
        Image::new_tiled(&device, w, h, Format::R32Float, 1).unwrap(),
        Image::new_compressed(&device, w, h, Format::R32Float, 1).unwrap(),
    ];
    for (n, image) in images.iter().enumerate() {
        image.clear(&[0, 0, 0, 0]).unwrap();
        let mut cb = CommandBuffer::new(&device, &programs);
        let pbe = image.pbe_descriptor().pack().unwrap();
        let descriptor = cb.arena().upload(&pbe, 64).unwrap();
        let mut bindings = Bindings::default()
            .with_uniform_words(cb.arena(), &[1000, 0x4000_0000])
            .unwrap();
        bindings.textures = Some((1, descriptor.va));
        // One threadgroup more than the image in each direction: the
        // writes past its edge are dropped.
        cb.dispatch(&shader, &bindings, [w + 8, h + 4, 1], [8, 4, 1])
            .unwrap();
        if image.compressed() {
            // Refused (Mesa never does it), as a fault, not a guess.
            let err = run(&device, &queue, cb).unwrap_err();
            assert!(
                matches!(err, Error::GpuFault { errno } if errno == Errno::EIO),
                "{err}"
            );
            continue;
        }
        run(&device, &queue, cb).unwrap();
        let pixels = image.read_pixels().unwrap();
        for y in 0..h {
            for x in 0..w {
                let at = 4 * (y * w + x) as usize;
                let got = u32::from_le_bytes(pixels[at..at + 4].try_into().unwrap());
                assert_eq!(got, 0x4000_0000 + 1000 * y + x, "image {n} ({x}, {y})");
            }
        }
    }
}

#[test_log::test]
fn a_gpu_fault_surfaces_as_eio_and_the_queue_keeps_working() {
    let (device, queue, programs) = gpu();
    let x = device.upload(&[0u8; 256], false).unwrap();
    let mut cb = CommandBuffer::new(&device, &programs);
    // y points at an address nothing is bound at.
    let _shader = axpb(&device, &mut cb, &x, 0x30_0000_0000, 64);
    let err = run(&device, &queue, cb).unwrap_err();
    assert!(
        matches!(err, Error::GpuFault { errno } if errno == Errno::EIO),
        "{err}"
    );
    let y = device.upload(&[0u8; 256], true).unwrap();
    let mut cb = CommandBuffer::new(&device, &programs);
    let _shader = axpb(&device, &mut cb, &x, y.va(), 64);
    run(&device, &queue, cb).unwrap();
    assert_eq!(&y.read_all().unwrap()[..4], &0.5f32.to_le_bytes());
}

#[test_log::test]
fn timeline_semaphores_order_work_across_two_queues() {
    let device = device();
    let producer = Queue::new(&device).unwrap();
    let consumer = Queue::new(&device).unwrap();
    let programs = Arc::new(ProgramCache::new(&device));
    let timeline = Semaphore::new(&device).unwrap();
    let n = 4096u32;
    let input: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let x = upload_words(&device, input.iter().map(|v| v.to_bits()));
    let y = zeroed_words(&device, n);
    let z = zeroed_words(&device, n);
    // Producer: y = 3x + 0.5, signals point 1. Consumer waits for 1:
    // z = 3y + 0.5, signals point 2.
    let mut first = CommandBuffer::new(&device, &programs);
    let _a = axpb(&device, &mut first, &x, y.va(), n);
    first.finish().unwrap();
    let mut second = CommandBuffer::new(&device, &programs);
    let _b = axpb(&device, &mut second, &y, z.va(), n);
    second.finish().unwrap();
    let mut a = producer
        .submit(vec![first], &[], &[(&timeline, 1)])
        .unwrap();
    let mut b = consumer
        .submit(vec![second], &[(&timeline, 1)], &[(&timeline, 2)])
        .unwrap();
    timeline.wait(2, WAIT).unwrap();
    assert!(timeline.value().unwrap() >= 2);
    a.wait(WAIT).unwrap();
    b.wait(WAIT).unwrap();
    let out = z.read_all().unwrap();
    for (i, v) in input.iter().enumerate() {
        let got = f32::from_le_bytes(out[4 * i..4 * i + 4].try_into().unwrap());
        let want = 3.0f32.mul_add(3.0f32.mul_add(*v, 0.5), 0.5);
        assert_eq!(got, want, "element {i}");
    }
    // A host signal moves the timeline too.
    timeline.signal(5).unwrap();
    assert_eq!(timeline.value().unwrap(), 5);
}

/// A `n` x `n` grid of quads over the whole target in three depth layers
/// (near green in the middle of the draw order).
fn layered_grid(w: u32, h: u32, n: u32) -> Vec<u8> {
    let mut data = Vec::new();
    for (z, colour) in [
        (0.5f32, [1.0f32, 0.0, 0.0]),
        (0.25, [0.0, 1.0, 0.0]),
        (0.75, [0.0, 0.0, 1.0]),
    ] {
        for j in 0..n {
            for i in 0..n {
                let (cw, ch) = (w as f32 / n as f32, h as f32 / n as f32);
                let (x, y) = (i as f32 * cw, j as f32 * ch);
                let c = [
                    [x, y],
                    [x + cw, y],
                    [x, y + ch],
                    [x + cw, y],
                    [x + cw, y + ch],
                    [x, y + ch],
                ];
                data.extend(vertices(w, h, &c, z, &[colour]));
            }
        }
    }
    data
}

/// `VS` through the stack: the position goes to the thread's stack and
/// comes back (the registers it came from cleared in between).
const STACK_VS: &str = "
    stack_adjust 0, 1, 2, 0, 0, 4
    device_load 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r5, unsigned, lsl 3
    device_load 0, i32, xyz, r12_r13_r14, u2_u3, r5, unsigned, lsl 3
    wait 0
    stack_store i32, 1, 0, xyzw, 4, r8_r9_r10_r11, 0, 0
    mov_imm r8, 0
    mov_imm r9, 0
    mov_imm r10, 0
    mov_imm r11, 0
    stack_load r8_r9_r10_r11, i32, 1, 0, xyzw, 4, 0, 0
    wait 0
    stack_adjust 0, 1, 2, 0, 0, -4
    st_var 1, r8, 0
    st_var 1, r9, 1
    st_var 1, r10, 2
    st_var 1, r11, 3
    st_var 1, r12, 4
    st_var 1, r13, 5
    st_var 1, r14, 6
    stop";

/// `VARYING_FS` through the stack, the same way.
const STACK_FS: &str = "
    stack_adjust 0, 1, 2, 0, 0, 3
    iter r4_r5_r6, cf0, center, 0, 0, 0, 0, 0
    stack_store i32, 1, 0, xyz, 4, r4_r5_r6, 0, 0
    mov_imm r4, 0
    mov_imm r5, 0
    mov_imm r6, 0
    stack_load r4_r5_r6, i32, 1, 0, xyz, 4, 0, 0
    wait 0
    stack_adjust 0, 1, 2, 0, 0, -3
    mov_imm r7, 0x3f800000
    st_tile r4_r5_r6_r7, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

/// Records a pass over `image` and `depth` (cleared to black and 1.0)
/// drawing the layered grid of `n` x `n` quads in `vb` with `pipe`.
fn record_layered_frame(
    cb: &mut CommandBuffer,
    image: &Image,
    depth: &DepthImage,
    pipe: &Arc<GraphicsPipeline>,
    vb: &Buffer,
    n: u32,
) {
    let mut pass = cb
        .begin_render_pass(&colour_depth_pass(image, depth, [0.0, 0.0, 0.0, 1.0], 1.0))
        .unwrap();
    pass.set_pipeline(pipe);
    pass.set_vertex_uniforms(&vs_uniforms(vb));
    pass.draw(3 * 6 * n * n, 1, 0).unwrap();
    pass.end().unwrap();
}

/// The parameter-buffer statistics of `queue` (the simulated kmd's).
fn tvb_stats(device: &Device, queue: &Queue) -> agx_sim::kmd::tvb::TvbStats {
    device
        .simulated()
        .unwrap()
        .file()
        .queue(queue.id())
        .unwrap()
        .tvb_stats()
}

/// The layered grid's frame: all green at depth 0.25.
fn assert_layered_frame(image: &Image, depth: &DepthImage) {
    let pixels = image.read_pixels().unwrap();
    assert!(pixels.chunks_exact(4).all(|p| p == [0, 255, 0, 255]));
    let (w, h) = (depth.width(), depth.height());
    assert!((0..h)
        .flat_map(|y| (0..w).map(move |x| (x, y)))
        .all(|(x, y)| depth.depth_at(x, y).unwrap() == 0.25));
}

#[test_log::test]
fn vertex_and_fragment_shaders_run_on_helper_stacks_through_partial_renders() {
    let (device, queue, programs) = gpu();
    let (w, h, n) = (96, 96, 48);
    let vb = device.upload(&layered_grid(w, h, n), false).unwrap();
    let depth_test = DepthState {
        function: agx_hw::formats::ZsFunc::Less,
        write: true,
    };
    let pipe = staged_pipeline(&device, STACK_VS, STACK_FS, Some(depth_test), [16, 12]);
    let image = Image::new(&device, w, h, Format::Rgba8Unorm).unwrap();
    let depth = DepthImage::new(&device, w, h).unwrap();
    let mut cb = CommandBuffer::new(&device, &programs);
    record_layered_frame(&mut cb, &image, &depth, &pipe, &vb, n);
    cb.finish().unwrap();
    // (The depth clear before it is a compute command.)
    let command = cb
        .commands()
        .iter()
        .find_map(|c| match c {
            agx_umd::cmd::Command::Render(render) => Some(render),
            _ => None,
        })
        .expect("a render command");
    assert_ne!(
        command.vertex_helper.binary, 0,
        "the pass names a vertex helper"
    );
    assert_ne!(command.fragment_helper.binary, 0, "and a fragment helper");
    assert_ne!(
        command.flags & agx_uapi::asahi::RenderFlags::VERTEX_SCRATCH.bits(),
        0,
        "the vertex stage uses scratch, as Mesa says it"
    );
    queue
        .submit(vec![cb], &[], &[])
        .unwrap()
        .wait(WAIT)
        .unwrap();
    let stats = tvb_stats(&device, &queue);
    // The fragment programs of the partial renders had stacks too.
    assert!(stats.partial_renders > 0, "{stats:?}");
    assert_layered_frame(&image, &depth);
}

#[test_log::test]
fn partial_renders_through_the_generated_programs_change_nothing() {
    let (device, queue, programs) = gpu();
    let (w, h, n) = (96, 96, 48);
    let vb = device.upload(&layered_grid(w, h, n), false).unwrap();
    let pipe = depth_tested(&device);
    let frame = || {
        let image = Image::new(&device, w, h, Format::Rgba8Unorm).unwrap();
        let depth = DepthImage::new(&device, w, h).unwrap();
        let mut cb = CommandBuffer::new(&device, &programs);
        record_layered_frame(&mut cb, &image, &depth, &pipe, &vb, n);
        run(&device, &queue, cb).unwrap();
        assert_layered_frame(&image, &depth);
        let depths: Vec<f32> = (0..h)
            .flat_map(|y| (0..w).map(move |x| (x, y)))
            .map(|(x, y)| depth.depth_at(x, y).unwrap())
            .collect();
        (image.read_pixels().unwrap(), depths)
    };
    let (first_image, first_depth) = frame();
    let after_first = tvb_stats(&device, &queue);
    assert!(
        after_first.partial_renders > 0,
        "the initial parameter buffer overflowed: {after_first:?}"
    );
    let (second_image, second_depth) = frame();
    let after_second = tvb_stats(&device, &queue);
    assert_eq!(
        after_second.partial_renders, after_first.partial_renders,
        "the grown buffer held the frame: {after_second:?}"
    );
    assert!(first_image == second_image, "bit-identical colour");
    assert!(first_depth == second_depth, "bit-identical depth");
}

#[test_log::test]
fn generated_tile_programs_disassemble_to_the_documented_listings() {
    use agx_umd::pass::{bg_source, eot_source, tile_layout, BgAction};
    let device = device();
    let programs = ProgramCache::new(&device);
    let (slots, bytes) = tile_layout(&[Format::Rgba8Unorm]).unwrap();
    assert_eq!(bytes, 4);
    let listing = |source: String| programs.get(&source).unwrap().disassemble().unwrap();
    let clear = listing(bg_source(&slots, &[BgAction::Clear]));
    let load = listing(bg_source(&slots, &[BgAction::Load]));
    let store = listing(eot_source(&slots, &[true]));
    // The listings Documentation/umd.md shows.
    assert_eq!(
        clear,
        "mov r4, u0\nmov r5, u1\nmov r6, u2\nmov r7, u3\n\
         st_tile r4_r5_r6_r7, u8norm, 0, xyzw, 0, 255, r0, 0\nstop\n"
    );
    assert_eq!(
        load,
        "get_sr r8, sr80 (thread_position_in_grid.x)\n\
         get_sr r9, sr81 (thread_position_in_grid.y)\n\
         mov_imm r10l, 0\n\
         texture_load 0, 0b1100, 0, none, xyzw, 0b00, r4_r5_r6_r7, None, ts0, ss0, tex_2d, r8_r9, lod_min, r10l, 0, r0\n\
         wait 0\n\
         st_tile r4_r5_r6_r7, u8norm, 0, xyzw, 0, 255, r0, 0\nstop\n"
    );
    assert_eq!(
        store,
        "mov_imm r4, 0\nmov_imm r2, 0\n\
         image_write_block r2, r4, 0, None, ts0, tex_2d, rte, u8norm, 0, 9, 1\nstop\n"
    );
    // Each configuration is assembled once.
    let _ = listing(bg_source(&slots, &[BgAction::Clear]));
    assert_eq!(programs.len(), 3);
}

#[test_log::test]
fn the_queue_timeline_gives_retire_points_for_heap_frees() {
    let (device, queue, programs) = gpu();
    let mut heap = ImageHeap::new(&device, 64).unwrap();
    let slot = heap.alloc().unwrap();
    assert_eq!(queue.submitted_point(), 0);
    let x = device.upload(&[0u8; 256], false).unwrap();
    let y = device.upload(&[0u8; 256], true).unwrap();
    let mut cb = CommandBuffer::new(&device, &programs);
    let _shader = axpb(&device, &mut cb, &x, y.va(), 64);
    cb.finish().unwrap();
    let mut submission = queue.submit(vec![cb], &[], &[]).unwrap();
    assert_eq!(queue.submitted_point(), 1);
    heap.free(slot, queue.retire_point()).unwrap();
    submission.wait(WAIT).unwrap();
    assert_eq!(queue.completed_point().unwrap(), 1);
    assert_eq!(
        heap.reclaim(queue.serial(), queue.completed_point().unwrap())
            .unwrap(),
        1
    );
    assert_eq!(
        heap.alloc().unwrap(),
        slot,
        "recycled once the GPU was done"
    );
}

#[test_log::test]
fn depth_clears_happen_in_submission_order_not_at_recording() {
    let (device, queue, programs) = gpu();
    let (w, h) = (64, 64);
    let depth = DepthImage::new(&device, w, h).unwrap();
    let tri = [[0.0f32, 0.0], [64.0, 0.0], [0.0, 64.0]];
    let vb = device
        .upload(&vertices(w, h, &tri, 0.5, &[[0.0, 1.0, 0.0]]), false)
        .unwrap();
    let pipe = depth_tested(&device);
    let record = |image: &Image, clear: f32| {
        let mut cb = CommandBuffer::new(&device, &programs);
        let mut pass = cb
            .begin_render_pass(&colour_depth_pass(
                image,
                &depth,
                [0.0, 0.0, 0.0, 1.0],
                clear,
            ))
            .unwrap();
        pass.set_pipeline(&pipe);
        pass.set_vertex_uniforms(&vs_uniforms(&vb));
        pass.draw(3, 1, 0).unwrap();
        pass.end().unwrap();
        cb.finish().unwrap();
        cb
    };
    // Both recorded before either runs: the first clears depth to 1.0 (the
    // triangle at 0.5 passes), the second to 0.25 (it fails).
    let (a, b) = (
        Image::new(&device, w, h, Format::Rgba8Unorm).unwrap(),
        Image::new(&device, w, h, Format::Rgba8Unorm).unwrap(),
    );
    let first = record(&a, 1.0);
    let second = record(&b, 0.25);
    queue
        .submit(vec![first], &[], &[])
        .unwrap()
        .wait(WAIT)
        .unwrap();
    let pa = a.read_pixels().unwrap();
    assert_eq!(pa[4 * (5 * 64 + 5)..4 * (5 * 64 + 5) + 4], [0, 255, 0, 255]);
    queue
        .submit(vec![second], &[], &[])
        .unwrap()
        .wait(WAIT)
        .unwrap();
    let pb = b.read_pixels().unwrap();
    assert_eq!(pb[4 * (5 * 64 + 5)..4 * (5 * 64 + 5) + 4], [0, 0, 0, 255]);
    assert_eq!(depth.depth_at(5, 5).unwrap(), 0.25);
}

#[test_log::test]
fn a_gpu_fill_writes_its_words_and_nothing_else() {
    let (device, queue, programs) = gpu();
    let buffer = device.upload(&[0xAAu8; 4096], true).unwrap();
    let mut cb = CommandBuffer::new(&device, &programs);
    // 999 words from byte 8: not a multiple of the kernel's 64 threads.
    cb.fill(buffer.va() + 8, 999, 0x1234_5678).unwrap();
    cb.finish().unwrap();
    queue
        .submit(vec![cb], &[], &[])
        .unwrap()
        .wait(WAIT)
        .unwrap();
    let bytes = buffer.read_all().unwrap();
    assert_eq!(bytes[..8], [0xAA; 8]);
    for (i, word) in bytes[8..8 + 4 * 999].chunks_exact(4).enumerate() {
        assert_eq!(word, 0x1234_5678u32.to_le_bytes(), "word {i}");
    }
    let after = &bytes[8 + 4 * 999..4096];
    assert!(after.iter().all(|&b| b == 0xAA), "{:x?}", &after[..16]);
}

/// A full-screen quad in NDC: two triangles of VS vertices, eight floats
/// each (the position, then a colour these tests do not use).
fn full_screen_quad() -> Vec<u8> {
    let mut data = Vec::new();
    for [x, y] in [
        [-1.0f32, 1.0],
        [1.0, 1.0],
        [-1.0, -1.0],
        [1.0, 1.0],
        [1.0, -1.0],
        [-1.0, -1.0],
    ] {
        for v in [x, y, 0.5, 1.0, 0.0, 0.0, 0.0, 0.0] {
            data.extend(v.to_le_bytes());
        }
    }
    data
}

/// A pipeline of VS and `fs`, which leaves render target 0's colour in
/// r4-r7 for the driver's epilogue, blended as `blend` into RGBA8.
fn epilogue_pipeline(device: &Device, fs: &str, blend: Blend) -> Result<GraphicsPipeline, Error> {
    GraphicsPipeline::new(
        device,
        &GraphicsPipelineDesc {
            vertex_stack_bytes: 0,
            fragment_stack_bytes: 0,
            vertex: VS,
            fragment: fs,
            vertex_layout: None,
            stencil: None,
            vertex_outputs: 7,
            varyings: Vec::new(),
            depth: None,
            cull: CullMode::None,
            front_ccw: false,
            topology: Topology::Triangles,
            colour_output: ColourOutput::Registers {
                format: Format::Rgba8Unorm,
                blend,
            },
        },
    )
}

/// [`epilogue_pipeline`] whose colour is the fragment uniforms u0-u3.
fn uniform_colour_pipeline(device: &Device, blend: Blend) -> Arc<GraphicsPipeline> {
    let fs = "
    mov r4, u0
    mov r5, u1
    mov r6, u2
    mov r7, u3";
    Arc::new(epilogue_pipeline(device, fs, blend).unwrap())
}

#[test_log::test]
fn driver_blending_and_the_viewport() {
    let (device, queue, programs) = gpu();
    let (w, h) = (64, 64);
    let vb = device.upload(&full_screen_quad(), false).unwrap();
    let colour = [1.0f32, 0.0, 0.0, 0.5].map(f32::to_bits);
    for (blend, expected) in [
        (Blend::Replace, [255u8, 0, 0, 128]),
        // 1 * 0.5 + 0 = 0.5; 0; 0 * 0.5 + 1 * 0.5; 0.5 * 0.5 + 1 * 0.5.
        (Blend::Alpha, [128, 0, 128, 191]),
        (Blend::Additive, [255, 0, 255, 255]),
    ] {
        let pipe = uniform_colour_pipeline(&device, blend);
        let image = Image::new(&device, w, h, Format::Rgba8Unorm).unwrap();
        let mut cb = CommandBuffer::new(&device, &programs);
        let mut pass = cb
            .begin_render_pass(&colour_pass(&image, [0.0, 0.0, 1.0, 1.0]))
            .unwrap();
        pass.set_pipeline(&pipe);
        pass.set_vertex_uniforms(&vs_uniforms(&vb));
        pass.set_fragment_uniforms(&colour);
        // Only the 32x32 square at (16, 8).
        pass.set_viewport(16.0, 8.0, 32.0, 32.0, 0.0, 1.0);
        pass.draw(6, 1, 0).unwrap();
        pass.end().unwrap();
        run(&device, &queue, cb).unwrap();
        let pixels = image.read_pixels().unwrap();
        let at = |x: u32, y: u32| &pixels[4 * (y * w + x) as usize..4 * (y * w + x) as usize + 4];
        assert_eq!(at(16, 8), expected, "{blend:?}: inside, top left");
        assert_eq!(at(47, 39), expected, "{blend:?}: inside, bottom right");
        for (x, y) in [(15, 8), (16, 7), (48, 39), (47, 40)] {
            assert_eq!(at(x, y), [0, 0, 255, 255], "{blend:?}: ({x}, {y}) outside");
        }
    }
    // A shader that stops before the epilogue is refused.
    let refused = epilogue_pipeline(&device, FLAT_FS, Blend::Alpha);
    assert!(matches!(refused, Err(Error::Unsupported(_))));
}

#[test_log::test]
fn blended_draws_over_one_another_each_count() {
    // A blending pipeline reads the tilebuffer: the umd makes it
    // translucent, so the hidden-surface removal shades every layer in
    // order (an opaque one would keep only the top layer's colour).
    let (device, queue, programs) = gpu();
    let (w, h) = (64, 64);
    let vb = device.upload(&full_screen_quad(), false).unwrap();
    let image = Image::new(&device, w, h, Format::Rgba8Unorm).unwrap();
    let mut cb = CommandBuffer::new(&device, &programs);
    let mut pass = cb
        .begin_render_pass(&colour_pass(&image, [0.0, 0.0, 1.0, 1.0]))
        .unwrap();
    pass.set_pipeline(&uniform_colour_pipeline(&device, Blend::Additive));
    pass.set_vertex_uniforms(&vs_uniforms(&vb));
    pass.set_fragment_uniforms(&[0.25f32, 0.0, 0.0, 0.25].map(f32::to_bits));
    pass.draw(6, 1, 0).unwrap();
    pass.draw(6, 1, 0).unwrap();
    pass.end().unwrap();
    run(&device, &queue, cb).unwrap();
    let pixels = image.read_pixels().unwrap();
    // Red: 0.25 stored as 64 / 255, plus 0.25 again: 127.75 -> 128.
    for (x, y) in [(0, 0), (31, 40), (63, 63)] {
        let at = 4 * (y * w + x) as usize;
        assert_eq!(pixels[at..at + 4], [128, 0, 255, 255], "({x}, {y})");
    }
}

#[test_log::test]
fn a_long_control_stream_is_chunked_and_linked() {
    let (device, queue, programs) = gpu();
    let (w, h) = (64, 64);
    let image = Image::new(&device, w, h, Format::Rgba8Unorm).unwrap();
    // 4096 one-pixel squares, one draw each: 64 KiB of index lists.
    let mut data = Vec::new();
    for i in 0..4096u32 {
        let (x, y) = ((i % 64) as f32, (i / 64) as f32);
        let c = [
            [x, y],
            [x + 1.0, y],
            [x, y + 1.0],
            [x + 1.0, y],
            [x + 1.0, y + 1.0],
            [x, y + 1.0],
        ];
        data.extend(vertices(w, h, &c, 0.5, &[[0.0; 3]]));
    }
    let vb = device.upload(&data, false).unwrap();
    let pipe = pipeline(&device, FLAT_FS, None);
    let mut cb = CommandBuffer::new(&device, &programs);
    let mut pass = cb
        .begin_render_pass(&colour_pass(&image, [0.0; 4]))
        .unwrap();
    pass.set_pipeline(&pipe);
    pass.set_vertex_uniforms(&vs_uniforms(&vb));
    pass.set_fragment_uniforms(&[0, 1.0f32.to_bits(), 0, 1.0f32.to_bits()]);
    for i in 0..4096 {
        pass.draw(6, 1, 6 * i).unwrap();
    }
    pass.end().unwrap();
    let stats = cb.stats();
    assert!(stats.vdm_chunks >= 4, "{stats:?}");
    run(&device, &queue, cb).unwrap();
    let pixels = image.read_pixels().unwrap();
    assert!(
        pixels.chunks_exact(4).all(|p| p == [0, 255, 0, 255]),
        "every square drawn, across the links"
    );
}

#[test_log::test]
fn a_vertex_layout_fetches_attributes_for_the_shader() {
    let (device, queue, programs) = gpu();
    let (w, h) = (64, 64);
    let corners = [[4.0f32, 6.0], [60.0, 12.0], [24.0, 58.0]];
    let colours = [[1.0f32, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    let mut vb_bytes = Vec::new();
    for (corner, colour) in corners.iter().zip(colours) {
        vb_bytes.extend(vertices(w, h, &[*corner], 0.5, &[colour]));
    }
    let vb = device.upload(&vb_bytes, false).unwrap();
    let render = |pipe: &Arc<GraphicsPipeline>, with_layout: bool| {
        let image = Image::new(&device, w, h, Format::Rgba8Unorm).unwrap();
        let mut cb = CommandBuffer::new(&device, &programs);
        let mut pass = cb
            .begin_render_pass(&colour_pass(&image, [0.0; 4]))
            .unwrap();
        pass.set_pipeline(pipe);
        if with_layout {
            pass.set_vertex_buffer(vb.va());
        } else {
            pass.set_vertex_uniforms(&vs_uniforms(&vb));
        }
        pass.draw(3, 1, 0).unwrap();
        pass.end().unwrap();
        run(&device, &queue, cb).unwrap();
        image.read_pixels().unwrap()
    };
    // The same picture as the shader that loads its own vertices.
    let reference = render(&pipeline(&device, VARYING_FS, None), false);
    let fetched = Arc::new(
        GraphicsPipeline::new(
            &device,
            &GraphicsPipelineDesc {
                vertex_stack_bytes: 0,
                fragment_stack_bytes: 0,
                vertex: "
    st_var 1, r8, 0
    st_var 1, r9, 1
    st_var 1, r10, 2
    st_var 1, r11, 3
    st_var 1, r12, 4
    st_var 1, r13, 5
    st_var 1, r14, 6
    stop",
                fragment: VARYING_FS,
                vertex_layout: Some(VertexLayout {
                    stride_bytes: 32,
                    attributes: vec![
                        VertexAttribute {
                            offset_bytes: 0,
                            format: VertexFormat::Xyzw32,
                            register: 8,
                        },
                        VertexAttribute {
                            offset_bytes: 16,
                            format: VertexFormat::Xyz32,
                            register: 12,
                        },
                    ],
                }),
                stencil: None,
                vertex_outputs: 7,
                varyings: vec![Varying {
                    slot: 4,
                    components: 3,
                    interpolation: Interpolation::Linear,
                }],
                depth: None,
                cull: CullMode::None,
                front_ccw: false,
                topology: Topology::Triangles,
                colour_output: ColourOutput::ShaderStores,
            },
        )
        .unwrap(),
    );
    let got = render(&fetched, true);
    assert!(
        got.chunks_exact(4).any(|p| p != [0, 0, 0, 0]),
        "something drawn"
    );
    assert_eq!(got, reference);
    // Attributes over the vertex ids are refused.
    let bad = VertexLayout {
        stride_bytes: 32,
        attributes: vec![VertexAttribute {
            offset_bytes: 0,
            format: VertexFormat::Xyzw32,
            register: 4,
        }],
    };
    assert!(agx_umd::cmd::vertex_prologue(&bad).is_err());
}

#[test_log::test]
fn a_pass_without_draws_stores_its_depth_and_stencil_clears() {
    // The clears are the ZLS's starting values (`isp_bgobjdepth`,
    // `isp_bgobjvals`), stored over the planes' earlier contents.
    let (device, queue, programs) = gpu();
    let (w, h) = (40, 36);
    let image = Image::new(&device, w, h, Format::Rgba8Unorm).unwrap();
    let depth = DepthImage::new(&device, w, h).unwrap();
    let stencil = StencilImage::new(&device, w, h).unwrap();
    let mut cb = CommandBuffer::new(&device, &programs);
    cb.begin_render_pass(&RenderPassDesc {
        colour: vec![ColourAttachment {
            image: &image,
            load: LoadOp::Clear([0.0; 4]),
            store: StoreOp::Store,
        }],
        depth: Some(DepthAttachment {
            image: &depth,
            load: LoadOp::Clear(0.375),
            store: StoreOp::Store,
            stencil: Some(StencilPlane {
                image: &stencil,
                load: LoadOp::Clear(0xA5),
                store: StoreOp::Store,
            }),
        }),
    })
    .unwrap()
    .end()
    .unwrap();
    run(&device, &queue, cb).unwrap();
    for (x, y) in [(0, 0), (39, 0), (0, 35), (39, 35), (33, 33)] {
        assert_eq!(depth.depth_at(x, y).unwrap(), 0.375, "depth at ({x}, {y})");
        assert_eq!(
            stencil.stencil_at(x, y).unwrap(),
            0xA5,
            "stencil at ({x}, {y})"
        );
    }
}

#[test_log::test]
fn stencil_counts_overlaps_and_then_masks_a_later_draw() {
    use agx_hw::formats::{StencilOp, ZsFunc};
    let (device, queue, programs) = gpu();
    let (w, h) = (64, 64);
    let image = Image::new(&device, w, h, Format::Rgba8Unorm).unwrap();
    let depth = DepthImage::new(&device, w, h).unwrap();
    let stencil = StencilImage::new(&device, w, h).unwrap();
    let a = [[2.0f32, 2.0], [60.0, 4.0], [8.0, 50.0]];
    let b = [[30.0f32, 10.0], [62.0, 60.0], [10.0, 62.0]];
    let full = [
        [0.0f32, 0.0],
        [64.0, 0.0],
        [0.0, 64.0],
        [64.0, 0.0],
        [64.0, 64.0],
        [0.0, 64.0],
    ];
    let mut data = vertices(w, h, &a, 0.5, &[[1.0, 0.0, 0.0]]);
    data.extend(vertices(w, h, &b, 0.5, &[[1.0, 0.0, 0.0]]));
    data.extend(vertices(w, h, &full, 0.5, &[[0.0, 1.0, 0.0]]));
    let vb = device.upload(&data, false).unwrap();
    let with_stencil = |stencil: StencilState| {
        Arc::new(
            GraphicsPipeline::new(
                &device,
                &GraphicsPipelineDesc {
                    vertex_stack_bytes: 0,
                    fragment_stack_bytes: 0,
                    vertex: VS,
                    fragment: VARYING_FS,
                    vertex_layout: None,
                    vertex_outputs: 7,
                    varyings: vec![Varying {
                        slot: 4,
                        components: 3,
                        interpolation: Interpolation::Linear,
                    }],
                    depth: Some(DepthState {
                        function: ZsFunc::Always,
                        write: false,
                    }),
                    stencil: Some(stencil),
                    cull: CullMode::None,
                    front_ccw: false,
                    topology: Topology::Triangles,
                    colour_output: ColourOutput::ShaderStores,
                },
            )
            .unwrap(),
        )
    };
    let count = with_stencil(StencilState {
        compare: ZsFunc::Always,
        reference: 0,
        read_mask: 0xff,
        write_mask: 0xff,
        fail: StencilOp::Keep,
        depth_fail: StencilOp::Keep,
        pass: StencilOp::IncrSat,
    });
    let where_both = with_stencil(StencilState {
        compare: ZsFunc::Equal,
        reference: 2,
        read_mask: 0xff,
        write_mask: 0,
        fail: StencilOp::Keep,
        depth_fail: StencilOp::Keep,
        pass: StencilOp::Keep,
    });
    let mut cb = CommandBuffer::new(&device, &programs);
    let mut pass = cb
        .begin_render_pass(&RenderPassDesc {
            colour: vec![ColourAttachment {
                image: &image,
                load: LoadOp::Clear([0.0, 0.0, 0.0, 1.0]),
                store: StoreOp::Store,
            }],
            depth: Some(DepthAttachment {
                image: &depth,
                load: LoadOp::Clear(1.0),
                store: StoreOp::DontCare,
                stencil: Some(StencilPlane {
                    image: &stencil,
                    load: LoadOp::Clear(0),
                    store: StoreOp::Store,
                }),
            }),
        })
        .unwrap();
    pass.set_vertex_uniforms(&vs_uniforms(&vb));
    pass.set_pipeline(&count);
    pass.draw(6, 1, 0).unwrap();
    pass.set_pipeline(&where_both);
    pass.draw(6, 1, 6).unwrap();
    pass.end().unwrap();
    run(&device, &queue, cb).unwrap();
    let pixels = image.read_pixels().unwrap();
    let (ta, tb) = (
        a.map(|[x, y]| [f64::from(x), f64::from(y)]),
        b.map(|[x, y]| [f64::from(x), f64::from(y)]),
    );
    let mut both = 0;
    for y in 0..h {
        for x in 0..w {
            let (cx, cy) = (f64::from(x) + 0.5, f64::from(y) + 0.5);
            let n = u8::from(covers(ta, cx, cy)) + u8::from(covers(tb, cx, cy));
            assert_eq!(
                stencil.stencil_at(x, y).unwrap(),
                n,
                "stencil at ({x}, {y})"
            );
            let at = 4 * (y * w + x) as usize;
            let want: [u8; 4] = match n {
                2 => [0, 255, 0, 255],
                1 => [255, 0, 0, 255],
                _ => [0, 0, 0, 255],
            };
            assert_eq!(pixels[at..at + 4], want, "colour at ({x}, {y})");
            both += usize::from(n == 2);
        }
    }
    assert!(both > 100, "{both} pixels in both");
}

#[test_log::test]
fn tiled_and_compressed_textures_and_targets_give_the_linear_picture() {
    let (device, queue, programs) = gpu();
    let texels: Vec<u8> = (0..16)
        .flat_map(|y| (0..16).flat_map(move |x| texel(x, y)))
        .collect();
    let (w, h) = (40u32, 36u32);
    let corners = [
        [0.0f32, 0.0],
        [40.0, 0.0],
        [0.0, 36.0],
        [40.0, 0.0],
        [40.0, 36.0],
        [0.0, 36.0],
    ];
    let mut data = Vec::new();
    for c in &corners {
        data.extend(vertices(
            w,
            h,
            &[*c],
            0.5,
            &[[c[0] / 40.0, c[1] / 36.0, 0.0]],
        ));
    }
    let vb = device.upload(&data, false).unwrap();
    let pipe = pipeline(&device, TEXTURED_FS, None);
    let sampler = agx_hw::formats::Sampler {
        max_lod: agx_hw::Lod::from_f32(0.0),
        ..agx_hw::formats::Sampler::default()
    };
    // A clear pass (unless the target was cleared by the CPU), then a
    // loading pass that draws: the load goes through the target's own
    // layout.
    let draw = |texture: &Image, target: &Image, clear_pass: bool| {
        let mut cb = CommandBuffer::new(&device, &programs);
        if clear_pass {
            cb.begin_render_pass(&colour_pass(target, [0.0, 0.0, 1.0, 1.0]))
                .unwrap()
                .end()
                .unwrap();
        }
        let mut pass = cb
            .begin_render_pass(&RenderPassDesc {
                colour: vec![ColourAttachment {
                    image: target,
                    load: LoadOp::Load,
                    store: StoreOp::Store,
                }],
                depth: None,
            })
            .unwrap();
        pass.set_pipeline(&pipe);
        pass.set_vertex_uniforms(&vs_uniforms(&vb));
        pass.set_fragment_textures(&[texture], &[sampler]).unwrap();
        pass.draw(3, 1, 0).unwrap();
        pass.end().unwrap();
        run(&device, &queue, cb).unwrap();
        target.read_pixels().unwrap()
    };
    let linear_texture = Image::new(&device, 16, 16, Format::Rgba8Unorm).unwrap();
    linear_texture.write_pixels(&texels).unwrap();
    let twiddled_texture = Image::new_tiled(&device, 16, 16, Format::Rgba8Unorm, 1).unwrap();
    twiddled_texture.write_pixels(&texels).unwrap();
    assert_eq!(twiddled_texture.read_pixels().unwrap(), texels);
    let reference = draw(
        &linear_texture,
        &Image::new(&device, w, h, Format::Rgba8Unorm).unwrap(),
        true,
    );
    let twiddled_target = Image::new_tiled(&device, w, h, Format::Rgba8Unorm, 1).unwrap();
    let got = draw(&twiddled_texture, &twiddled_target, true);
    assert!(
        got.chunks_exact(4).any(|p| p == [0, 0, 255, 255]),
        "the loaded clear"
    );
    assert!(
        got.chunks_exact(4).any(|p| p != [0, 0, 255, 255]),
        "the triangle"
    );
    assert_eq!(got, reference);

    // Compressed: the texture written by the CPU (its tiles marked
    // uncompressed), the target rendered (the PBE marks them).
    let compressed_texture = Image::new_compressed(&device, 16, 16, Format::Rgba8Unorm, 1).unwrap();
    compressed_texture.write_pixels(&texels).unwrap();
    assert_eq!(compressed_texture.read_pixels().unwrap(), texels);
    let compressed_target = Image::new_compressed(&device, w, h, Format::Rgba8Unorm, 1).unwrap();
    assert_eq!(
        draw(&compressed_texture, &compressed_target, true),
        reference
    );

    // Fast clears (every compression tile solid): the cleared texture
    // samples as one colour and the cleared target loads as the clear
    // pass would have left it.
    let red = [255u8, 0, 0, 255];
    let flat_reference = {
        let flat = Image::new(&device, 16, 16, Format::Rgba8Unorm).unwrap();
        flat.write_pixels(&red.repeat(256)).unwrap();
        draw(
            &flat,
            &Image::new(&device, w, h, Format::Rgba8Unorm).unwrap(),
            true,
        )
    };
    compressed_texture.clear(&red).unwrap();
    assert_eq!(compressed_texture.read_pixels().unwrap(), red.repeat(256));
    let target = Image::new_compressed(&device, w, h, Format::Rgba8Unorm, 1).unwrap();
    target.clear(&[0, 0, 255, 255]).unwrap();
    assert_eq!(draw(&compressed_texture, &target, false), flat_reference);
}

/// Vertex shader: the position alone (four outputs), from the vertices of
/// [`VS`].
const POSITION_ONLY_VS: &str = "
    device_load 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r5, unsigned, lsl 3
    wait 0
    st_var 1, r8, 0
    st_var 1, r9, 1
    st_var 1, r10, 2
    st_var 1, r11, 3
    stop";

#[test_log::test]
fn draws_with_different_output_counts_share_a_pass() {
    // Mesa switches pipelines within a pass all the time; each binned
    // primitive must keep its own vertex size in the parameter buffer.
    let (device, queue, programs) = gpu();
    let (w, h) = (64, 64);
    let image = Image::new(&device, w, h, Format::Rgba8Unorm).unwrap();
    let mut data = vertices(
        w,
        h,
        &[[0.0, 0.0], [30.0, 0.0], [0.0, 30.0]],
        0.5,
        &[[0.0; 3]],
    );
    data.extend(vertices(
        w,
        h,
        &[[63.0, 63.0], [34.0, 63.0], [63.0, 34.0]],
        0.5,
        &[[1.0, 0.0, 0.0]],
    ));
    let vb = device.upload(&data, false).unwrap();
    let flat = Arc::new(
        GraphicsPipeline::new(
            &device,
            &GraphicsPipelineDesc {
                vertex_stack_bytes: 0,
                fragment_stack_bytes: 0,
                vertex: POSITION_ONLY_VS,
                fragment: FLAT_FS,
                vertex_layout: None,
                stencil: None,
                vertex_outputs: 4,
                varyings: vec![],
                depth: None,
                cull: CullMode::None,
                front_ccw: false,
                topology: Topology::Triangles,
                colour_output: ColourOutput::ShaderStores,
            },
        )
        .unwrap(),
    );
    let interpolated = pipeline(&device, VARYING_FS, None);
    let mut cb = CommandBuffer::new(&device, &programs);
    let mut pass = cb
        .begin_render_pass(&colour_pass(&image, [0.0; 4]))
        .unwrap();
    pass.set_pipeline(&flat);
    pass.set_vertex_uniforms(&vs_uniforms(&vb));
    pass.set_fragment_uniforms(&[0, 1.0f32.to_bits(), 0, 1.0f32.to_bits()]);
    pass.draw(3, 1, 0).unwrap();
    pass.set_pipeline(&interpolated);
    pass.set_vertex_uniforms(&vs_uniforms(&vb));
    pass.draw(3, 1, 3).unwrap();
    pass.end().unwrap();
    run(&device, &queue, cb).unwrap();
    let pixels = image.read_pixels().unwrap();
    let at = |x: usize, y: usize| &pixels[4 * (y * w as usize + x)..][..4];
    assert_eq!(at(5, 5), [0, 255, 0, 255], "the four-output draw");
    assert_eq!(at(58, 58), [255, 0, 0, 255], "the seven-output draw");
    assert_eq!(at(32, 5), [0, 0, 0, 0], "neither");
}

/// A pipeline of vertex shader `vs` (writing `vertex_outputs` slots) and
/// fragment shader `fs`, its varyings bound as `varyings` say.
fn varying_pipeline(
    device: &Device,
    vs: &str,
    fs: &str,
    vertex_outputs: u32,
    varyings: Vec<Varying>,
) -> Arc<GraphicsPipeline> {
    Arc::new(
        GraphicsPipeline::new(
            device,
            &GraphicsPipelineDesc {
                vertex_stack_bytes: 0,
                fragment_stack_bytes: 0,
                vertex: vs,
                fragment: fs,
                vertex_layout: None,
                stencil: None,
                vertex_outputs,
                varyings,
                depth: None,
                cull: CullMode::None,
                front_ccw: false,
                topology: Topology::Triangles,
                colour_output: ColourOutput::ShaderStores,
            },
        )
        .unwrap(),
    )
}

/// Draws one triangle of `vb` with `pipe` into `image`, cleared to 0, and
/// returns its pixels.
fn draw_triangle(
    device: &Device,
    image: &Image,
    pipe: &Arc<GraphicsPipeline>,
    vb: &Buffer,
) -> Vec<u8> {
    let queue = Queue::new(device).unwrap();
    let programs = Arc::new(ProgramCache::new(device));
    let mut cb = CommandBuffer::new(device, &programs);
    let mut pass = cb.begin_render_pass(&colour_pass(image, [0.0; 4])).unwrap();
    pass.set_pipeline(pipe);
    pass.set_vertex_uniforms(&vs_uniforms(vb));
    pass.draw(3, 1, 0).unwrap();
    pass.end().unwrap();
    run(device, &queue, cb).unwrap();
    image.read_pixels().unwrap()
}

/// Draws `tri` (window coordinates) into a `size`-square image, cleared
/// to 0, with `attrs` as each vertex's attribute (which [`VS`]-like
/// shaders load), `vs` writing `vertex_outputs` slots and `fs` reading
/// `varying`; returns the pixels.
fn draw_varying_triangle(
    size: u32,
    tri: &[[f32; 2]],
    attrs: &[[f32; 3]],
    (vs, fs): (&str, &str),
    vertex_outputs: u32,
    varying: Varying,
) -> Vec<u8> {
    let device = device();
    let image = Image::new(&device, size, size, Format::Rgba8Unorm).unwrap();
    let vb = device
        .upload(&vertices(size, size, tri, 0.5, attrs), false)
        .unwrap();
    let pipe = varying_pipeline(&device, vs, fs, vertex_outputs, vec![varying]);
    draw_triangle(&device, &image, &pipe, &vb)
}

/// The upper-left half of a 32x32 image, where every vertex carried
/// (0, 1, 0.5), drawn with that colour and nothing else.
fn assert_constant_varying_drawn(pixels: &[u8]) {
    let at = |x: usize, y: usize| &pixels[4 * (y * 32 + x)..][..4];
    assert_eq!(at(4, 4), [0, 255, 128, 255]);
    assert_eq!(at(31, 31), [0; 4], "outside the triangle");
}

/// The triangle of the 32x32 varying tests.
const UPPER_LEFT_32: [[f32; 2]; 3] = [[0.0, 0.0], [32.0, 0.0], [0.0, 32.0]];

/// A vertex shader may write output slots past 128: Mesa's
/// rasterisation shaders for geometry shaders do (piglit's
/// `gs-output-array-vec4-index-wr`). Here the attributes go to slots
/// 200-202 of 203, and the fragment shader reads them there.
#[test_log::test]
fn varyings_in_output_slots_past_128_reach_the_fragment_shader() {
    const HIGH_VS: &str = "
    device_load 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r5, unsigned, lsl 3
    device_load 0, i32, xyz, r12_r13_r14, u2_u3, r5, unsigned, lsl 3
    wait 0
    st_var 1, r8, 0
    st_var 1, r9, 1
    st_var 1, r10, 2
    st_var 1, r11, 3
    st_var 1, r12, 200
    st_var 1, r13, 201
    st_var 1, r14, 202
    stop";
    let varying = Varying {
        slot: 200,
        components: 3,
        interpolation: Interpolation::Linear,
    };
    let pixels = draw_varying_triangle(
        32,
        &UPPER_LEFT_32,
        &[[0.0, 1.0, 0.5]],
        (HIGH_VS, VARYING_FS),
        203,
        varying,
    );
    assert_constant_varying_drawn(&pixels);
}

/// A dynamically indexed varying array reads its coefficient register
/// through a 16-bit register (`iter`'s bit 23). Mesa does not bound the
/// index: for an index past the array it reads a register the binding
/// table does not declare and discards the value (piglit's
/// `layout-location-block-with-aoa-member`, cf17 of 17). That read is not
/// refused; it reads as 0 (what the hardware returns is not public).
#[test_log::test]
fn an_indexed_varying_read_past_the_bound_registers_runs() {
    const INDEXED_FS: &str = "
    mov_imm r8l, 0
    mov_imm r9l, 40
    iter r4_r5_r6, cf16, center, 0, 0, 0, 0, 1
    iter r12, cf18, center, 0, 0, 0, 0, 1
    mov_imm r13, 0x3f800000
    fadd32 r7, r12, r13
    st_tile r4_r5_r6_r7, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";
    let varying = Varying {
        slot: 4,
        components: 3,
        interpolation: Interpolation::Linear,
    };
    let pixels = draw_varying_triangle(
        32,
        &UPPER_LEFT_32,
        &[[0.0, 1.0, 0.5]],
        (VS, INDEXED_FS),
        7,
        varying,
    );
    assert_constant_varying_drawn(&pixels);
}

/// Two varyings whose vertex values differ by a constant interpolate to
/// values that differ by that constant to within one ulp, what piglit's
/// `clip-distance-bulk-copy`, `-itemized-copy` and
/// `interface-vs-unnamed-to-fs-unnamed` need to compare
/// `gl_ClipDistance[i]` with `offset + i` to 1e-6: each plane's three
/// coefficient words are rounded once (C at the 32x32 tile's corner) and
/// the iterator rounds their dot product once. (Two fused multiply-adds,
/// as Mesa lowers `interpolateAtOffset`, came out up to two ulps apart.)
/// The fragment shader writes |b - (a + 7)| in units of 2^-18, a quarter
/// of the value range per ulp of [8, 16).
#[test_log::test]
fn varyings_a_constant_apart_interpolate_a_constant_apart() {
    const DIFFERENCE_FS: &str = "
    iter r4_r5, cf0, center, 0, 0, 0, 0, 0
    fadd32 r6, r4, 7.0
    fadd32 r7, r5, r6.neg
    mov_imm r8, 0x48800000
    fmul32 r4, r7.abs, r8
    mov_imm r7, 0x3f800000
    mov_imm r5, 0
    mov_imm r6, 0
    st_tile r4_r5_r6_r7, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";
    let varying = Varying {
        slot: 4,
        components: 2,
        interpolation: Interpolation::Linear,
    };
    let pixels = draw_varying_triangle(
        250,
        &[[0.0, 0.0], [250.0, 0.0], [250.0, 250.0]],
        &[[1.0, 8.0, 0.0], [2.0, 9.0, 0.0], [3.0, 10.0, 0.0]],
        (VS, DIFFERENCE_FS),
        7,
        varying,
    );
    let drawn: Vec<&[u8]> = pixels.chunks(4).filter(|p| p[3] == 255).collect();
    assert!(drawn.len() > 30_000, "{} pixels drawn", drawn.len());
    let worst = drawn.iter().map(|p| p[0]).max().unwrap();
    assert!(worst <= 64, "off by {} ulps", f64::from(worst) / 64.0);
}

/// Clipping keeps noperspective varyings linear in window space: a
/// triangle whose vertex B lies before the near plane (z < 0, w > 0) is
/// cut, and every pixel left shows the window-space barycentrics of the
/// whole projected triangle, worked out here in f64 (GL interpolates a
/// noperspective output at a clip point in window space; interpolating it
/// in clip space, as before, bent the colours near the cut by up to 40
/// levels, piglit's `interpolation-noperspective-other-*`; and twice over
/// for slots two bindings read, its `-gl_frontcolor-*`).
#[test_log::test]
fn clipping_keeps_noperspective_varyings_linear_on_the_screen() {
    let device = device();
    let (w, h) = (64u32, 64u32);
    let image = Image::new(&device, w, h, Format::Rgba8Unorm).unwrap();
    // Clip-space positions (w differs per vertex) and one colour each.
    let corners: [([f32; 4], [f32; 3]); 3] = [
        ([-0.9, -0.9, 0.5, 1.0], [1.0, 0.0, 0.0]),
        ([1.8, -1.8, -1.0, 2.0], [0.0, 1.0, 0.0]),
        ([0.0, 3.6, 2.0, 4.0], [0.0, 0.0, 1.0]),
    ];
    let mut data = Vec::new();
    for (p, a) in corners {
        for v in p.iter().chain(&a).chain(&[0.0]) {
            data.extend(v.to_le_bytes());
        }
    }
    let vb = device.upload(&data, false).unwrap();
    // The same slots bound twice (Mesa binds a missing back colour over
    // the front one's): still interpolated once.
    let varying = Varying {
        slot: 4,
        components: 3,
        interpolation: Interpolation::Linear,
    };
    let pipe = varying_pipeline(&device, VS, VARYING_FS, 7, vec![varying; 2]);
    let pixels = draw_triangle(&device, &image, &pipe, &vb);
    // Window positions (y down) of the projected vertices.
    let screen = corners.map(|(p, _)| {
        let (x, y) = (f64::from(p[0] / p[3]), f64::from(p[1] / p[3]));
        [
            (x + 1.0) * f64::from(w) / 2.0,
            (1.0 - y) * f64::from(h) / 2.0,
        ]
    });
    let area = |a: [f64; 2], b: [f64; 2], c: [f64; 2]| {
        (b[0] - a[0]) * (c[1] - a[1]) - (c[0] - a[0]) * (b[1] - a[1])
    };
    let total = area(screen[0], screen[1], screen[2]);
    let (mut drawn, mut worst) = (0, 0i32);
    for y in 0..h {
        for x in 0..w {
            let i = 4 * (y * w + x) as usize;
            if pixels[i + 3] == 0 {
                continue; // Not drawn: clipped away, or outside.
            }
            drawn += 1;
            let p = [f64::from(x) + 0.5, f64::from(y) + 0.5];
            let weights = [
                area(p, screen[1], screen[2]) / total,
                area(screen[0], p, screen[2]) / total,
                area(screen[0], screen[1], p) / total,
            ];
            for c in 0..3 {
                let want = (weights[c] * 255.0).round() as i32;
                worst = worst.max((i32::from(pixels[i + c]) - want).abs());
            }
        }
    }
    let inside = (0..h)
        .flat_map(|y| (0..w).map(move |x| (x, y)))
        .filter(|&(x, y)| {
            let p = [f64::from(x) + 0.5, f64::from(y) + 0.5];
            area(p, screen[1], screen[2]) / total >= 0.0
                && area(screen[0], p, screen[2]) / total >= 0.0
                && area(screen[0], screen[1], p) / total >= 0.0
        })
        .count();
    assert!(
        drawn > 300 && drawn + 100 < inside,
        "{drawn} of {inside}: the near plane cut it"
    );
    assert!(
        worst <= 1,
        "a colour {worst} levels off the window-space interpolation"
    );
}
