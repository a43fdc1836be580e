//! The texture unit through SUBMIT: kernels load and sample textures
//! (linear and twiddled, through texture and sampler state) and write
//! what they got; a reference written in the test says what they should
//! have got.

mod common;

use agx_hw::formats::{
    Channels, Filter, Layout, MipFilter, Sampler, Texture, TextureDimension, TextureType, Wrap,
};
use agx_hw::layout::ImageLayout;
use common::machine::*;

const TEX_W: u32 = 64;
const TEX_H: u32 = 32;
const TEXELS: u64 = 0x10_0000;
const DESCRIPTOR: u64 = 0x8_1000;
const SAMPLERS: u64 = 0x8_2000;
const OUT: u64 = 0x4_0000;
const UNIFORMS: u64 = 0x8_0000;
const STREAM: u64 = 0x9_0000;

fn texel(x: u32, y: u32) -> [u8; 4] {
    [
        (x * 4) as u8,
        (y * 8) as u8,
        ((x ^ y) * 3) as u8,
        255 - x as u8,
    ]
}

/// Writes the test texture in `layout` and its descriptor; returns the
/// descriptor.
fn texture(m: &Machine, layout: Layout) -> Texture {
    let image = match layout {
        Layout::Linear => ImageLayout::Linear {
            stride_bytes: u64::from(TEX_W * 4),
            element_bytes: 4,
            layer_stride_bytes: u64::from(TEX_W * TEX_H * 4),
        },
        Layout::Twiddled => ImageLayout::twiddled(TEX_W, TEX_H, 1, 4),
        _ => ImageLayout::gpu_tiled(TEX_W, TEX_H, 1, 4, false).unwrap(),
    };
    let mut bytes = vec![0u8; image.layer_bytes() as usize];
    for y in 0..TEX_H {
        for x in 0..TEX_W {
            let at = image.offset(0, x, y, 0).unwrap() as usize;
            bytes[at..at + 4].copy_from_slice(&texel(x, y));
        }
    }
    m.poke(m.data, TEXELS, &bytes);
    let descriptor = Texture {
        dimension: TextureDimension::D2,
        layout,
        channels: Channels::R8G8B8A8,
        data_type: TextureType::Unorm,
        width: TEX_W,
        height: TEX_H,
        address: DATA_VA + TEXELS,
        ..Texture::default()
    };
    let descriptor = if layout == Layout::Linear {
        Texture {
            stride: TEX_W * 4,
            ..descriptor
        }
    } else {
        descriptor
    };
    m.poke(m.data, DESCRIPTOR, &descriptor.pack().unwrap());
    descriptor
}

/// A launch of `pipeline` over (TEX_W, TEX_H) threads, then terminate.
fn run_grid(m: &Machine, pipeline: u64) -> Option<agx_kmd::Errno> {
    m.run_launch(STREAM, pipeline, [TEX_W, TEX_H, 1], [8, 8, 1])
}

fn out_floats(m: &Machine) -> Vec<[f32; 4]> {
    m.peek_u32s(OUT, (4 * TEX_W * TEX_H) as usize)
        .chunks_exact(4)
        .map(|c| [0, 1, 2, 3].map(|i| f32::from_bits(c[i])))
        .collect()
}

fn pair(address: u64) -> Vec<u32> {
    vec![address as u32, (address >> 32) as u32]
}

/// A kernel of `source` with `uniforms`, the texture descriptor at
/// texture state 0 and the sampler at sampler state 0.
fn sampling_pipeline(m: &Machine, source: &str, uniforms: &[u32]) -> u64 {
    m.program_with_samplers(
        source,
        0x1000,
        0x40,
        uniforms,
        UNIFORMS,
        0,
        Some((1, DATA_VA + DESCRIPTOR)),
        Some((1, DATA_VA + SAMPLERS)),
    )
}

/// Each thread (x, y) loads texel (x, y) and stores it at out[y * 64 + x].
const LOAD: &str = "
    get_sr r4, sr80
    get_sr r5, sr81
    texture_load 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts0, ss0, tex_2d, r4_r5, lod_min, r20l, 0, r0
    wait 0
    imadd r12, r5, u2, r4
    device_store 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r12, unsigned, lsl 2, 0
    stop";

#[test_log::test]
fn loads_read_every_texel_of_linear_gpu_tiled_and_twiddled_textures() {
    for layout in [Layout::Linear, Layout::Gpu, Layout::Twiddled] {
        let m = Machine::new(5000);
        texture(&m, layout);
        let got = load_every_texel(&m);
        for y in 0..TEX_H {
            for x in 0..TEX_W {
                let want = texel(x, y).map(|c| f32::from(c) / 255.0);
                assert_eq!(
                    got[(y * TEX_W + x) as usize],
                    want,
                    "{layout:?} texel ({x}, {y})"
                );
            }
        }
    }
}

/// A load's texel offsets add to its coordinates modulo 2^32: thread
/// (x, y) loads (x - 7, y + 8) offset by (7, -8), which is texel (x, y),
/// the first column from a negative coordinate (GL's `texelFetchOffset`
/// with a coordinate the offset brings into the image).
#[test_log::test]
fn load_offsets_bring_negative_coordinates_into_the_image() {
    let m = Machine::new(5000);
    texture(&m, Layout::Gpu);
    let mut uniforms = pair(DATA_VA + OUT);
    uniforms.extend([TEX_W, (-7i32) as u32, 8, packed_offsets(7, -8)]);
    let pipeline = m.program(
        "
    get_sr r4, sr80
    get_sr r5, sr81
    iadd r6, r4, u3
    iadd r7, r5, u4
    mov r0, u5
    texture_load 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts0, ss0, tex_2d, r6_r7, lod_min, r20l, 1, r0
    wait 0
    imadd r12, r5, u2, r4
    device_store 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r12, unsigned, lsl 2, 0
    stop",
        0x1000,
        0x40,
        &uniforms,
        UNIFORMS,
        0,
        Some((1, DATA_VA + DESCRIPTOR)),
    );
    assert_eq!(run_grid(&m, pipeline), None);
    let got = out_floats(&m);
    for y in 0..TEX_H {
        for x in 0..TEX_W {
            let want = texel(x, y).map(|c| f32::from(c) / 255.0);
            assert_eq!(got[(y * TEX_W + x) as usize], want, "texel ({x}, {y})");
        }
    }
}

/// Two ways a load reads zero: Mesa's null descriptor (a 1x1 R8 twiddled
/// texture with every channel swizzled to 0 and its dimension left 1D; it
/// reads a byte that is not zero here), and texels past a linear image's
/// width (its rows are wider than it: the neighbouring bytes are texels
/// of the wider picture).
#[test_log::test]
fn mesa_null_descriptors_and_loads_past_a_linear_image_read_zero() {
    use agx_hw::formats::Channel;
    for null in [true, false] {
        let m = Machine::new(5000);
        let full = texture(&m, Layout::Linear);
        let descriptor = if null {
            Texture {
                dimension: TextureDimension::D1,
                layout: Layout::Twiddled,
                channels: Channels::R8,
                data_type: TextureType::Unorm,
                swizzle_r: Channel::Zero,
                swizzle_g: Channel::Zero,
                swizzle_b: Channel::Zero,
                swizzle_a: Channel::Zero,
                address: DATA_VA + TEXELS,
                ..Texture::default()
            }
        } else {
            Texture {
                width: TEX_W / 2,
                ..full
            }
        };
        m.poke(m.data, DESCRIPTOR, &descriptor.pack().unwrap());
        let got = load_every_texel(&m);
        for y in 0..TEX_H {
            for x in 0..TEX_W {
                let want = if null || x >= TEX_W / 2 {
                    [0.0; 4]
                } else {
                    texel(x, y).map(|c| f32::from(c) / 255.0)
                };
                assert_eq!(
                    got[(y * TEX_W + x) as usize],
                    want,
                    "null {null}: ({x}, {y})"
                );
            }
        }
    }
}

/// A load or a sample takes the descriptor's swizzle, constants
/// included, and a 16-bit destination gets each component rounded to
/// fp16 (to nearest even): thread (x, y) loads texel (x, y) of the test
/// texture, swizzled (B, 1, 0, R), into 32-bit and into 16-bit registers,
/// and samples it at its centre into 16-bit registers.
#[test_log::test]
fn loads_and_samples_swizzle_with_constants_and_round_to_16_bit_registers() {
    use agx_hw::formats::Channel;
    let m = Machine::new(5000);
    let descriptor = Texture {
        swizzle_r: Channel::B,
        swizzle_g: Channel::One,
        swizzle_b: Channel::Zero,
        swizzle_a: Channel::R,
        ..texture(&m, Layout::Linear)
    };
    m.poke(m.data, DESCRIPTOR, &descriptor.pack().unwrap());
    let unorm = |c: u8| f32::from(c) / 255.0;
    let got = load_every_texel(&m);
    for y in 0..TEX_H {
        for x in 0..TEX_W {
            let [r, _, b, _] = texel(x, y);
            assert_eq!(
                got[(y * TEX_W + x) as usize],
                [unorm(b), 1.0, 0.0, unorm(r)],
                "32-bit ({x}, {y})"
            );
        }
    }
    // The same into r8l..r9h, stored as two words a thread; and the
    // texture unswizzled into them. Loaded, then sampled at the texel's
    // centre (where a bilinear filter reads the texel alone) at the LOD
    // the derivatives give.
    let load = "
        get_sr r4, sr80
        get_sr r5, sr81
        texture_load 0, 0b1100, 0, none, xyzw, 0b00, r8l_r8h_r9l_r9h, None, ts0, ss0, tex_2d, r4_r5, lod_min, r20l, 0, r0
        wait 0
        imadd r12, r5, u2, r4
        device_store 0, i32, xy, r8_r9, u0_u1, r12, unsigned, lsl 1, 0
        stop";
    let sample = "
        get_sr r4, sr80
        get_sr r5, sr81
        convert u32_to_f, r6, r4, rte
        convert u32_to_f, r7, r5, rte
        fadd32 r6, r6, u3
        fadd32 r7, r7, u3
        fmul32 r6, r6, u4
        fmul32 r7, r7, u5
        texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r8l_r8h_r9l_r9h, None, ts0, ss0, tex_2d, r6_r7, auto_lod, 0, 0, r0
        wait 0
        imadd r12, r5, u2, r4
        device_store 0, i32, xy, r8_r9, u0_u1, r12, unsigned, lsl 1, 0
        stop";
    let sampler = Sampler {
        magnify: Filter::Linear,
        minify: Filter::Linear,
        mip_filter: MipFilter::None,
        wrap_s: Wrap::Repeat,
        wrap_t: Wrap::Repeat,
        ..Sampler::default()
    };
    m.poke(m.data, SAMPLERS, &sampler.pack().unwrap());
    let mut uniforms = pair(DATA_VA + OUT);
    uniforms.extend([TEX_W, 0.5f32.to_bits()]);
    uniforms.extend([TEX_W, TEX_H].map(|size| (1.0 / size as f32).to_bits()));
    for (source, swizzled) in [(load, true), (load, false), (sample, false), (sample, true)] {
        let descriptor = texture(&m, Layout::Linear);
        if swizzled {
            let descriptor = Texture {
                swizzle_r: Channel::B,
                swizzle_g: Channel::One,
                swizzle_b: Channel::Zero,
                swizzle_a: Channel::R,
                ..descriptor
            };
            m.poke(m.data, DESCRIPTOR, &descriptor.pack().unwrap());
        }
        let pipeline = sampling_pipeline(&m, source, &uniforms);
        assert_eq!(run_grid(&m, pipeline), None);
        let words = m.peek_u32s(OUT, (2 * TEX_W * TEX_H) as usize);
        for y in 0..TEX_H {
            for x in 0..TEX_W {
                let [r, g, b, a] = texel(x, y);
                let want = if swizzled {
                    [unorm(b), 1.0, 0.0, unorm(r)]
                } else {
                    [r, g, b, a].map(unorm)
                };
                let want = want.map(|v| half::f16::from_f32(v).to_bits());
                let at = 2 * (y * TEX_W + x) as usize;
                let halves = [
                    words[at] as u16,
                    (words[at] >> 16) as u16,
                    words[at + 1] as u16,
                    (words[at + 1] >> 16) as u16,
                ];
                assert_eq!(
                    halves, want,
                    "16-bit, swizzled {swizzled}: ({x}, {y}) of {source}"
                );
            }
        }
    }
}

/// Each thread (x, y) samples at coordinates computed from its position:
/// s = (x + u3) * u4, t = (y + u3) * u5 (u3 an offset, u4/u5 scales).
const SAMPLE: &str = "
    get_sr r4, sr80
    get_sr r5, sr81
    convert u32_to_f, r6, r4, rte
    convert u32_to_f, r7, r5, rte
    fadd32 r6, r6, u3
    fadd32 r7, r7, u3
    fmul32 r6, r6, u4
    fmul32 r7, r7, u5
    texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts0, ss0, tex_2d, r6_r7, lod_min, r20l, 0, r0
    wait 0
    imadd r12, r5, u2, r4
    device_store 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r12, unsigned, lsl 2, 0
    stop";

/// The reference: the texel at integer (x, y) through a wrap mode, as
/// floats (None: the border).
/// The wrap modes as the graphics APIs define them.
fn wrapped(mode: Wrap, i: i64, n: i64) -> Option<i64> {
    match mode {
        Wrap::Repeat => Some(((i % n) + n) % n),
        Wrap::MirroredRepeat => {
            let m = ((i % (2 * n)) + 2 * n) % (2 * n);
            Some(if m < n { m } else { 2 * n - 1 - m })
        }
        // GL's clamp: the coordinate is clamped to [0, 1] first (in
        // `reference`), so only a linear filter's footprint reaches past
        // the edge, onto the border.
        Wrap::ClampToBorder | Wrap::ClampGl => (0 <= i && i < n).then_some(i),
        Wrap::MirroredClampToEdge => Some(if i < 0 { -i - 1 } else { i }.min(n - 1)),
        _ => Some(i.max(0).min(n - 1)),
    }
}

fn reference_texel(wrap: Wrap, x: i64, y: i64) -> [f64; 4] {
    let w = wrapped;
    match (w(wrap, x, i64::from(TEX_W)), w(wrap, y, i64::from(TEX_H))) {
        (Some(x), Some(y)) => texel(x as u32, y as u32).map(|c| f64::from(c) / 255.0),
        _ => [0.0; 4],
    }
}

fn reference(filter: Filter, wrap: Wrap, s: f64, t: f64) -> [f64; 4] {
    let (s, t) = if wrap == Wrap::ClampGl {
        (s.clamp(0.0, 1.0), t.clamp(0.0, 1.0))
    } else {
        (s, t)
    };
    reference_at(filter, wrap, s * f64::from(TEX_W), t * f64::from(TEX_H))
}

/// [`reference`] at texel-space (u, v), GL's clamp already applied.
fn reference_at(filter: Filter, wrap: Wrap, u: f64, v: f64) -> [f64; 4] {
    match filter {
        Filter::Nearest => {
            let (mut x, mut y) = (u.floor() as i64, v.floor() as i64);
            if wrap == Wrap::ClampGl {
                (x, y) = (x.min(i64::from(TEX_W) - 1), y.min(i64::from(TEX_H) - 1));
            }
            reference_texel(wrap, x, y)
        }
        _ => {
            let (u, v) = (u - 0.5, v - 0.5);
            let (x, y) = (u.floor() as i64, v.floor() as i64);
            let (fx, fy) = (u - u.floor(), v - v.floor());
            let c = |dx, dy| reference_texel(wrap, x + dx, y + dy);
            let (a, b, c2, d) = (c(0, 0), c(1, 0), c(0, 1), c(1, 1));
            std::array::from_fn(|i| {
                let top = a[i] + (b[i] - a[i]) * fx;
                let bottom = c2[i] + (d[i] - c2[i]) * fx;
                top + (bottom - top) * fy
            })
        }
    }
}

#[test_log::test]
fn samples_filter_and_wrap_as_the_sampler_says() {
    let cases = [
        (Filter::Nearest, Wrap::Repeat, 0.5f32, 1.0f32),
        (Filter::Nearest, Wrap::ClampToEdge, 0.25, 1.5),
        (Filter::Nearest, Wrap::MirroredRepeat, 0.5, 2.0),
        (Filter::Linear, Wrap::Repeat, 0.3, 1.0),
        (Filter::Linear, Wrap::ClampToEdge, 0.5, 1.25),
        (Filter::Linear, Wrap::ClampToBorder, 0.5, 1.5),
        (Filter::Nearest, Wrap::MirroredClampToEdge, -32.0, 1.5),
        (Filter::Linear, Wrap::ClampGl, 0.5, 1.25),
        (Filter::Linear, Wrap::ClampGl, -4.0, 1.25),
        (Filter::Nearest, Wrap::ClampGl, -4.0, 1.25),
    ];
    for layout in [Layout::Gpu, Layout::Twiddled, Layout::Linear] {
        for (filter, wrap, offset, scale) in cases {
            let m = Machine::new(5000);
            texture(&m, layout);
            let sampler = Sampler {
                magnify: filter,
                minify: filter,
                mip_filter: MipFilter::None,
                wrap_s: wrap,
                wrap_t: wrap,
                wrap_r: wrap,
                ..Sampler::default()
            };
            m.poke(m.data, SAMPLERS, &sampler.pack().unwrap());
            // s covers [-0.x, scale] of the texture across the grid.
            let (scale_s, scale_t) = (scale / TEX_W as f32, scale / TEX_H as f32);
            let mut uniforms = pair(DATA_VA + OUT);
            uniforms.extend([
                TEX_W,
                offset.to_bits(),
                scale_s.to_bits(),
                scale_t.to_bits(),
            ]);
            // At LOD 0, and at the LOD the derivatives give (the
            // sampler has one level: the same texels).
            for lod in ["lod_min, r20l", "auto_lod, 0"] {
                let source = SAMPLE.replace("lod_min, r20l", lod);
                let pipeline = sampling_pipeline(&m, &source, &uniforms);
                assert_eq!(
                    run_grid(&m, pipeline),
                    None,
                    "{layout:?} {filter:?} {wrap:?} {lod}"
                );
                let got = out_floats(&m);
                for y in 0..TEX_H {
                    for x in 0..TEX_W {
                        let s = (x as f32 + offset) * scale_s;
                        let t = (y as f32 + offset) * scale_t;
                        let want = reference(filter, wrap, f64::from(s), f64::from(t));
                        let have = got[(y * TEX_W + x) as usize];
                        for c in 0..4 {
                            assert!(
                                (f64::from(have[c]) - want[c]).abs() < 1e-5,
                                "{layout:?} {filter:?} {wrap:?} {lod} thread ({x}, {y}) channel {c}: {} vs {}",
                                have[c],
                                want[c]
                            );
                        }
                    }
                }
            }
        }
    }
}

/// A small linear texture of `channels`/`data_type` whose element at
/// (x, y) is `bytes(x, y)`; returns nothing (descriptor at DESCRIPTOR).
fn small_texture(
    m: &Machine,
    channels: Channels,
    data_type: TextureType,
    srgb: bool,
    element_bytes: u32,
    bytes: impl Fn(u32, u32) -> Vec<u8>,
) {
    let stride = (4 * element_bytes).next_multiple_of(16);
    let mut data = vec![0u8; (stride * 4) as usize];
    for y in 0..4 {
        for x in 0..4 {
            let at = (y * stride + x * element_bytes) as usize;
            data[at..at + element_bytes as usize].copy_from_slice(&bytes(x, y));
        }
    }
    m.poke(m.data, TEXELS, &data);
    let descriptor = Texture {
        dimension: TextureDimension::D2,
        layout: Layout::Linear,
        channels,
        data_type,
        width: 4,
        height: 4,
        address: DATA_VA + TEXELS,
        srgb,
        stride,
        ..Texture::default()
    };
    m.poke(m.data, DESCRIPTOR, &descriptor.pack().unwrap());
}

/// The LOAD kernel with texture state 0 bound to the descriptor at GPU
/// address `descriptor`.
fn load_pipeline(m: &Machine, descriptor: u64) -> u64 {
    let mut uniforms = pair(DATA_VA + OUT);
    uniforms.push(TEX_W);
    m.program(
        LOAD,
        0x1000,
        0x40,
        &uniforms,
        UNIFORMS,
        0,
        Some((1, descriptor)),
    )
}

/// Runs LOAD over the grid through the descriptor at DESCRIPTOR: one
/// texel per thread, in the order of the grid.
fn load_every_texel(m: &Machine) -> Vec<[f32; 4]> {
    let pipeline = load_pipeline(m, DATA_VA + DESCRIPTOR);
    assert_eq!(run_grid(m, pipeline), None);
    out_floats(m)
}

fn load_4x4(m: &Machine) -> Vec<[f32; 4]> {
    let all = load_every_texel(m);
    (0..16)
        .map(|i| all[((i / 4) * TEX_W + i % 4) as usize])
        .collect()
}

fn srgb_to_linear(c: f64) -> f64 {
    if c <= 0.04045 {
        c / 12.92
    } else {
        ((c + 0.055) / 1.055).powf(2.4)
    }
}

#[test_log::test]
fn every_listed_format_decodes_to_the_right_values() {
    let v = |x: u32, y: u32| (x + 4 * y) as f32; // 0..15
    type Case = (
        Channels,
        TextureType,
        bool,
        u32,
        fn(f32) -> Vec<u8>,
        fn(f32) -> [f64; 4],
    );
    let cases: Vec<Case> = vec![
        (
            Channels::R8,
            TextureType::Unorm,
            false,
            1,
            |v| vec![(v * 16.0) as u8],
            |v| [f64::from(v * 16.0) / 255.0, 0.0, 0.0, 1.0],
        ),
        (
            Channels::R8G8,
            TextureType::Unorm,
            false,
            2,
            |v| vec![(v * 16.0) as u8, 255 - v as u8],
            |v| {
                [
                    f64::from(v * 16.0) / 255.0,
                    f64::from(255.0 - v) / 255.0,
                    0.0,
                    1.0,
                ]
            },
        ),
        (
            Channels::R8G8B8A8,
            TextureType::Unorm,
            true,
            4,
            |v| vec![(v * 16.0) as u8, 128, 0, 77],
            |v| {
                [
                    srgb_to_linear(f64::from(v * 16.0) / 255.0),
                    srgb_to_linear(128.0 / 255.0),
                    0.0,
                    77.0 / 255.0,
                ]
            },
        ),
        (
            Channels::R16,
            TextureType::Float,
            false,
            2,
            |v| half::f16::from_f32(v * 0.5 - 2.0).to_le_bytes().to_vec(),
            |v| [f64::from(v * 0.5 - 2.0), 0.0, 0.0, 1.0],
        ),
        (
            Channels::R16G16B16A16,
            TextureType::Float,
            false,
            8,
            |v| {
                [v, -v, v * 0.25, 1.5]
                    .iter()
                    .flat_map(|c| half::f16::from_f32(*c).to_le_bytes())
                    .collect()
            },
            |v| [f64::from(v), f64::from(-v), f64::from(v * 0.25), 1.5],
        ),
        (
            Channels::R32,
            TextureType::Float,
            false,
            4,
            |v| (v * 1.1).to_le_bytes().to_vec(),
            |v| [f64::from(v * 1.1), 0.0, 0.0, 1.0],
        ),
        (
            Channels::R32G32B32A32,
            TextureType::Float,
            false,
            16,
            |v| {
                [v, v + 0.5, -v, 1e6]
                    .iter()
                    .flat_map(|c| c.to_le_bytes())
                    .collect()
            },
            |v| [f64::from(v), f64::from(v + 0.5), f64::from(-v), 1e6],
        ),
        // Packed floats, values the formats hold exactly, packed from
        // their bit layouts: r 0-10, g 11-21, b 22-31 (6- and 5-bit
        // mantissas, bias 15), and rgb9e5's three 9-bit mantissas with a
        // shared exponent in bits 27-31.
        (
            Channels::R11G11B10,
            TextureType::Float,
            false,
            4,
            |v| {
                let word = common::small_float_bits(f64::from(v), 6)
                    | common::small_float_bits(f64::from(v) * 0.5, 6) << 11
                    | common::small_float_bits(f64::from(v) * 64.0, 5) << 22;
                word.to_le_bytes().to_vec()
            },
            |v| [f64::from(v), f64::from(v) * 0.5, f64::from(v) * 64.0, 1.0],
        ),
        (
            Channels::R9G9B9E5,
            TextureType::Float,
            false,
            4,
            // Each component is its mantissa times 2^(e - 24); e = 18
            // scales by 1/64.
            |v| {
                let (r, g, b) = (v as u32 * 32, 128u32, 3u32);
                let word = r | g << 9 | b << 18 | 18 << 27;
                word.to_le_bytes().to_vec()
            },
            |v| [f64::from(v) * 0.5, 2.0, 3.0 / 64.0, 1.0],
        ),
    ];
    for (channels, data_type, srgb, bytes, encode, expect) in cases {
        let m = Machine::new(5000);
        small_texture(&m, channels, data_type, srgb, bytes, |x, y| encode(v(x, y)));
        let got = load_4x4(&m);
        for y in 0..4 {
            for x in 0..4 {
                let want = expect(v(x, y));
                let have = got[(y * 4 + x) as usize];
                for c in 0..4 {
                    let tolerance = 1e-6 * want[c].abs().max(1.0);
                    assert!(
                        (f64::from(have[c]) - want[c]).abs() <= tolerance,
                        "{channels:?} {data_type:?} srgb={srgb} ({x}, {y}) channel {c}: {} vs {}",
                        have[c],
                        want[c]
                    );
                }
            }
        }
    }
}

/// SAMPLE with an explicit LOD (fp16 in the low half of u6) and, when
/// `shadow`, a depth-compare reference in u7.
fn explicit_lod_kernel(shadow: bool) -> String {
    SAMPLE
        .replace(
            "    get_sr r4, sr80",
            "    mov r20, u6\n    mov r13, u7\n    get_sr r4, sr80",
        )
        .replace(
            "texture_sample 0, 0b1100",
            if shadow {
                "texture_sample 1, 0b1100"
            } else {
                "texture_sample 0, 0b1100"
            },
        )
        .replace("lod_min, r20l, 0, r0", "lod_min, r20l, 0, r13")
}

fn sample_grid(
    m: &Machine,
    sampler: &Sampler,
    lod: f32,
    reference: f32,
    shadow: bool,
    scale: f32,
) -> Vec<[f32; 4]> {
    m.poke(m.data, SAMPLERS, &sampler.pack().unwrap());
    let mut uniforms = pair(DATA_VA + OUT);
    uniforms.extend([
        TEX_W,
        0.5f32.to_bits(),
        (scale / TEX_W as f32).to_bits(),
        (scale / TEX_H as f32).to_bits(),
        u32::from(half::f16::from_f32(lod).to_bits()),
        reference.to_bits(),
    ]);
    let pipeline = sampling_pipeline(m, &explicit_lod_kernel(shadow), &uniforms);
    assert_eq!(run_grid(m, pipeline), None);
    out_floats(m)
}

/// The flat colour of level `level` of [`mip_texture`].
fn mip_colour(level: u32) -> [u8; 4] {
    [(level * 60) as u8, 255 - (level * 50) as u8, 100, 255]
}

/// A 16 x 16 GPU-tiled texture of five levels, each a flat colour.
fn mip_texture(m: &Machine) {
    let layout = ImageLayout::gpu_tiled(16, 16, 5, 4, false).unwrap();
    let colour = mip_colour;
    let mut bytes = vec![0u8; layout.layer_bytes() as usize];
    for level in 0..5 {
        let size = 16 >> level;
        for y in 0..size {
            for x in 0..size {
                let at = layout.offset(level, x, y, 0).unwrap() as usize;
                bytes[at..at + 4].copy_from_slice(&colour(level));
            }
        }
    }
    m.poke(m.data, TEXELS, &bytes);
    let descriptor = Texture {
        dimension: TextureDimension::D2,
        layout: Layout::Gpu,
        channels: Channels::R8G8B8A8,
        data_type: TextureType::Unorm,
        width: 16,
        height: 16,
        first_level: 0,
        last_level: 4,
        address: DATA_VA + TEXELS,
        ..Texture::default()
    };
    m.poke(m.data, DESCRIPTOR, &descriptor.pack().unwrap());
}

#[test_log::test]
fn mip_levels_are_chosen_and_blended_by_lod() {
    use agx_hw::Lod;
    let m = Machine::new(5000);
    mip_texture(&m);
    let colour = mip_colour;
    let sampler = |mip_filter| Sampler {
        magnify: Filter::Linear,
        minify: Filter::Linear,
        mip_filter,
        min_lod: Lod::from_f32(0.0),
        max_lod: Lod::from_f32(15.0),
        ..Sampler::default()
    };
    let unorm = |level: u32| colour(level).map(|c| f32::from(c) / 255.0);
    for (mip, lod, want) in [
        (MipFilter::Nearest, 0.6, unorm(1)),
        (MipFilter::Nearest, 3.2, unorm(3)),
        (MipFilter::Nearest, 9.0, unorm(4)),
        (MipFilter::None, 3.0, unorm(0)),
    ] {
        let got = sample_grid(&m, &sampler(mip), lod, 0.0, false, 1.0);
        assert_eq!(got[5], want, "{mip:?} at LOD {lod}");
    }
    // Trilinear: halfway between levels 1 and 2.
    let got = sample_grid(&m, &sampler(MipFilter::Linear), 1.5, 0.0, false, 1.0);
    let (a, b) = (unorm(1), unorm(2));
    for c in 0..4 {
        assert!(
            (got[7][c] - (a[c] + b[c]) / 2.0).abs() < 1e-6,
            "channel {c}"
        );
    }
}

#[test_log::test]
fn depth_compare_and_border_colours() {
    let m = Machine::new(5000);
    // A depth texture: texel (x, y) holds x / 64.
    small_texture(&m, Channels::R32, TextureType::Float, false, 4, |x, _| {
        (x as f32 / 64.0).to_le_bytes().to_vec()
    });
    let shadow = Sampler {
        magnify: Filter::Nearest,
        minify: Filter::Nearest,
        compare_enable: true,
        compare_func: agx_hw::formats::CompareFunc::Less,
        ..Sampler::default()
    };
    // Thread x samples texel floor((x + 0.5) / 16) of the 4-wide texture;
    // the reference 1/64 is less than texels 2 and 3 (2/64, 3/64).
    let got = sample_grid(&m, &shadow, 0.0, 1.0 / 64.0, true, 1.0);
    let mut passes = 0;
    for x in 0..TEX_W {
        let texel_x = (2 * x + 1) / 32;
        let want = if texel_x >= 2 { 1.0 } else { 0.0 };
        assert_eq!(got[x as usize][0], want, "thread {x}");
        passes += u32::from(want == 1.0);
    }
    assert_eq!(passes, 32);
    // Clamp to an opaque-white border: coordinates past 1 see (1, 1, 1, 1).
    small_texture(
        &m,
        Channels::R8G8B8A8,
        TextureType::Unorm,
        false,
        4,
        |_, _| vec![0, 0, 0, 0],
    );
    let border = Sampler {
        magnify: Filter::Nearest,
        minify: Filter::Nearest,
        wrap_s: Wrap::ClampToBorder,
        wrap_t: Wrap::ClampToBorder,
        border_colour: agx_hw::formats::BorderColour::OpaqueWhite,
        ..Sampler::default()
    };
    let got = sample_grid(&m, &border, 0.0, 0.0, false, 2.0);
    // s = (x + 0.5) * 2 / 64: inside for x < 32, past the edge after.
    assert_eq!(got[0], [0.0; 4]);
    assert_eq!(got[40], [1.0; 4]);
}

/// A shadow reference outside [0, 1] is clamped for a unorm (D16) image,
/// as Vulkan requires and Mesa leaves to the hardware, and compared as it
/// is for a float (D32F) one.
#[test_log::test]
fn shadow_references_are_clamped_for_unorm_images_only() {
    let m = Machine::new(5000);
    let shadow = |func| Sampler {
        magnify: Filter::Nearest,
        minify: Filter::Nearest,
        compare_enable: true,
        compare_func: func,
        ..Sampler::default()
    };
    use agx_hw::formats::CompareFunc::{Gequal, Lequal};
    // Texels 0.0 (x < 2) and 1.0 (x >= 2); thread x samples texel x / 16.
    let cases = [
        // (unorm image, function, reference, want where x < 2, want where x >= 2)
        (true, Lequal, 1.5, 0.0, 1.0),
        (true, Gequal, -0.5, 1.0, 0.0),
        (false, Lequal, 1.5, 0.0, 0.0),
        (false, Gequal, -0.5, 0.0, 0.0),
    ];
    for (unorm, func, reference, low, high) in cases {
        if unorm {
            small_texture(&m, Channels::R16, TextureType::Unorm, false, 2, |x, _| {
                (if x >= 2 { u16::MAX } else { 0 }).to_le_bytes().to_vec()
            });
        } else {
            small_texture(&m, Channels::R32, TextureType::Float, false, 4, |x, _| {
                (if x >= 2 { 1.0f32 } else { 0.0 }).to_le_bytes().to_vec()
            });
        }
        let got = sample_grid(&m, &shadow(func), 0.0, reference, true, 1.0);
        for x in 0..TEX_W {
            let want = if x / 16 >= 2 { high } else { low };
            assert_eq!(
                got[x as usize][0], want,
                "unorm {unorm}, {func:?} {reference}, thread {x}"
            );
        }
    }
}

#[test_log::test]
fn an_unmapped_texture_descriptor_faults_at_its_address_on_first_use() {
    let m = Machine::new(5000);
    let missing = 0x6_0000_0000u64;
    let pipeline = load_pipeline(&m, missing);
    assert_eq!(run_grid(&m, pipeline), Some(agx_kmd::Errno::EIO));
    let (address, unit, _) = m.system.device().scheduler().stats().last_fault.unwrap();
    assert_eq!(address, missing);
    assert_eq!(unit, agx_fwif::messages::FaultUnit::Usc as u32);
}

/// Texels are read through 128-byte lines, but a texel on an unmapped
/// page faults at its own address, not at its line's.
#[test_log::test]
fn an_unmapped_texel_faults_at_its_own_address() {
    let m = Machine::new(5000);
    let mut descriptor = texture(&m, Layout::Linear);
    let missing = 0x6_0000_0050u64;
    descriptor.address = missing;
    m.poke(m.data, DESCRIPTOR, &descriptor.pack().unwrap());
    let pipeline = load_pipeline(&m, DATA_VA + DESCRIPTOR);
    assert_eq!(run_grid(&m, pipeline), Some(agx_kmd::Errno::EIO));
    let (address, unit, _) = m.system.device().scheduler().stats().last_fault.unwrap();
    assert_eq!(address, missing, "texel (0, 0), the first lane's");
    assert_eq!(unit, agx_fwif::messages::FaultUnit::Usc as u32);
}

/// Mesa's preambles bind descriptors from a heap to state registers
/// (`tex_state_store`): the kernel then loads through ts0 although no
/// Texture word binds it, and without the preshader the same kernel
/// faults.
#[test_log::test]
fn a_preshader_binds_a_heap_descriptor_to_a_texture_state_register() {
    for with_preshader in [true, false] {
        let m = Machine::new(5000);
        texture(&m, Layout::Gpu);
        let mut uniforms = pair(DATA_VA + OUT);
        uniforms.extend([TEX_W, 0]);
        // The heap base in u4_u5; the descriptor 48 bytes into it.
        uniforms.extend(pair(DATA_VA + DESCRIPTOR - 48));
        let pipeline = m.program(LOAD, 0x1000, 0x40, &uniforms, UNIFORMS, 0, None);
        if with_preshader {
            m.set_preshader(pipeline, 0x2000, "tex_state_store 0, u4_u5, 48, 0\nstop");
        }
        let result = run_grid(&m, pipeline);
        if !with_preshader {
            assert_eq!(result, Some(agx_kmd::Errno::EIO), "nothing bound at ts0");
            continue;
        }
        assert_eq!(result, None);
        let got = out_floats(&m);
        for (x, y) in [(0u32, 0u32), (5, 3), (63, 31)] {
            let want = texel(x, y).map(|c| f32::from(c) / 255.0);
            assert_eq!(got[(y * TEX_W + x) as usize], want, "texel ({x}, {y})");
        }
    }
}

#[test_log::test]
fn bindless_descriptors_come_from_a_heap_base_and_a_byte_offset() {
    let m = Machine::new(5000);
    texture(&m, Layout::Gpu);
    // The descriptor sits 48 bytes into a "heap" (two descriptors before
    // it); the kernel names it by heap base (u4_u5) + offset (u6).
    let source = LOAD
        .replace(
            "    get_sr r4, sr80",
            "    mov r13, u6\n    get_sr r4, sr80",
        )
        .replace("r8_r9_r10_r11, None, ts0,", "r8_r9_r10_r11, u4_u5, r13,");
    let mut uniforms = pair(DATA_VA + OUT);
    uniforms.extend([TEX_W, 0]);
    uniforms.extend(pair(DATA_VA + DESCRIPTOR - 48));
    uniforms.push(48);
    let pipeline = m.program(&source, 0x1000, 0x40, &uniforms, UNIFORMS, 0, None);
    assert_eq!(run_grid(&m, pipeline), None);
    let got = out_floats(&m);
    for (x, y) in [(0u32, 0u32), (5, 3), (63, 31)] {
        let want = texel(x, y).map(|c| f32::from(c) / 255.0);
        assert_eq!(got[(y * TEX_W + x) as usize], want, "texel ({x}, {y})");
    }
}

/// `SAMPLE` with its texture instruction replaced by `instruction`, r13
/// and r14-r18 loaded from u6-u11 first, and the residency register r12
/// preset to 7 and stored (one word per thread) after the texels.
fn kernel_with(instruction: &str) -> String {
    SAMPLE
        .replace(
            "    get_sr r4, sr80",
            "    mov r13, u6\n    mov r14, u7\n    mov r15, u8\n    mov r16, u9\n    mov r17, u10\n    mov r18, u11\n    mov r12, 7\n    get_sr r4, sr80",
        )
        .replace(
            "texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts0, ss0, tex_2d, r6_r7, lod_min, r20l, 0, r0",
            instruction,
        )
        .replace(
            "    imadd r12, r5, u2, r4\n    device_store 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r12, unsigned, lsl 2, 0",
            "    imadd r19, r5, u2, r4\n    device_store 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r19, unsigned, lsl 2, 0\n    iadd r19, r19, 128, lsl 4\n    device_store 0, i32, x, r12, u0_u1, r19, unsigned, lsl 2, 0",
        )
}

/// Runs `kernel_with(instruction)` over the 64 x 32 grid with thread (x,
/// y) at s = (x + offset) / 64, t = (y + offset) / 32 and u6-u11 =
/// `extra`; returns each thread's four values and its residency word.
fn run_texture_kernel(
    m: &Machine,
    instruction: &str,
    offset: f32,
    extra: [u32; 6],
) -> (Vec<[f32; 4]>, Vec<u32>) {
    let mut uniforms = pair(DATA_VA + OUT);
    uniforms.extend([
        TEX_W,
        offset.to_bits(),
        (1.0 / TEX_W as f32).to_bits(),
        (1.0 / TEX_H as f32).to_bits(),
    ]);
    uniforms.extend(extra);
    let pipeline = sampling_pipeline(m, &kernel_with(instruction), &uniforms);
    assert_eq!(run_grid(m, pipeline), None, "{instruction}");
    let residency = m
        .peek_u32s(OUT + 16 * 2048, 4 * 2048)
        .chunks_exact(4)
        .map(|c| c[0])
        .collect();
    (out_floats(m), residency)
}

/// Four signed 4-bit texel offsets, as Mesa packs them.
fn packed_offsets(dx: i32, dy: i32) -> u32 {
    (dx as u32 & 0xF) | (dy as u32 & 0xF) << 4
}

/// Bilinear, one level, clamped to the edge on every axis.
fn linear_clamped() -> Sampler {
    Sampler {
        magnify: Filter::Linear,
        minify: Filter::Linear,
        mip_filter: MipFilter::None,
        wrap_s: Wrap::ClampToEdge,
        wrap_t: Wrap::ClampToEdge,
        wrap_r: Wrap::ClampToEdge,
        ..Sampler::default()
    }
}

/// GL's clamp applies to the texel-space coordinate after the texel
/// offsets (GL adds them before the wrap mode): s = (x - 7.5) / 64 with
/// an offset of +3 texels is u = x - 4.5, clamped to [0, 64]; clamping s
/// first would read texel 3 for every x up to 7.
#[test_log::test]
fn gl_clamp_applies_after_texel_offsets() {
    let m = Machine::new(5000);
    texture(&m, Layout::Gpu);
    let instruction = "texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts0, ss0, tex_2d, r6_r7, auto_lod, 0, 1, r13";
    for filter in [Filter::Nearest, Filter::Linear] {
        put_sampler(&m, filter, Wrap::ClampGl);
        let (got, _) =
            run_texture_kernel(&m, instruction, -7.5, [packed_offsets(3, 0), 0, 0, 0, 0, 0]);
        for y in 0..TEX_H as i64 {
            for x in 0..TEX_W as i64 {
                let u = (x as f64 - 4.5).clamp(0.0, f64::from(TEX_W));
                let v = (y as f64 - 7.5).clamp(0.0, f64::from(TEX_H));
                let want = reference_at(filter, Wrap::ClampGl, u, v);
                let have = got[(y * TEX_W as i64 + x) as usize];
                for k in 0..4 {
                    assert!(
                        (f64::from(have[k]) - want[k]).abs() < 1e-5,
                        "{filter:?} thread ({x}, {y}) channel {k}: {} vs {}",
                        have[k],
                        want[k]
                    );
                }
            }
        }
    }
}

#[test_log::test]
fn gathers_and_texel_offsets_read_the_bilinear_footprint() {
    let m = Machine::new(5000);
    texture(&m, Layout::Gpu);
    let sampler = linear_clamped();
    m.poke(m.data, SAMPLERS, &sampler.pack().unwrap());
    // s = (x + 1) / 64: the footprint is texels x and x + 1 (and y, y + 1)
    // before offsets.
    for (gather, component, (dx, dy)) in [
        ("gather_g", 1, (0, 0)),
        ("gather_a", 3, (-1, 2)),
        ("gather_r", 0, (7, -8)),
    ] {
        let has_offset = u32::from((dx, dy) != (0, 0));
        let instruction = format!(
            "texture_sample 0, 0b1100, 0, {gather}, xyzw, 0b00, r8_r9_r10_r11, None, ts0, ss0, tex_2d, r6_r7, auto_lod, 0, {has_offset}, r13"
        );
        let (got, _) = run_texture_kernel(
            &m,
            &instruction,
            1.0,
            [packed_offsets(dx, dy), 0, 0, 0, 0, 0],
        );
        for y in 0..TEX_H as i64 {
            for x in 0..TEX_W as i64 {
                let (x0, y0) = (x + i64::from(dx), y + i64::from(dy));
                // Vulkan's order: (x0, y1), (x1, y1), (x1, y0), (x0, y0).
                let want = [(x0, y0 + 1), (x0 + 1, y0 + 1), (x0 + 1, y0), (x0, y0)]
                    .map(|(i, j)| reference_texel(Wrap::ClampToEdge, i, j)[component] as f32);
                let have = got[(y * TEX_W as i64 + x) as usize];
                assert_eq!(have, want, "{gather} offset ({dx}, {dy}) thread ({x}, {y})");
            }
        }
    }
    // A filtered sample with offsets is the sample of the moved
    // coordinates (the offsets are whole texels of the level).
    let instruction = "texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts0, ss0, tex_2d, r6_r7, auto_lod, 0, 1, r13";
    let (got, _) = run_texture_kernel(
        &m,
        instruction,
        0.25,
        [packed_offsets(3, -5), 0, 0, 0, 0, 0],
    );
    for y in 0..TEX_H {
        for x in 0..TEX_W {
            let s = f64::from(x as f32 + 0.25) / 64.0 + 3.0 / 64.0;
            let t = f64::from(y as f32 + 0.25) / 32.0 - 5.0 / 32.0;
            let want = reference(Filter::Linear, Wrap::ClampToEdge, s, t);
            let have = got[(y * TEX_W + x) as usize];
            for c in 0..4 {
                assert!(
                    (f64::from(have[c]) - want[c]).abs() < 1e-5,
                    "thread ({x}, {y}) channel {c}: {} vs {}",
                    have[c],
                    want[c]
                );
            }
        }
    }
}

#[test_log::test]
fn shadow_gathers_compare_each_texel_of_the_footprint() {
    let m = Machine::new(5000);
    // A 4 x 4 depth texture: texel (x, y) holds (x + 4y) / 16.
    let depth = |x: i64, y: i64| (x.clamp(0, 3) + 4 * y.clamp(0, 3)) as f32 / 16.0;
    small_texture(&m, Channels::R32, TextureType::Float, false, 4, |x, y| {
        depth(i64::from(x), i64::from(y)).to_le_bytes().to_vec()
    });
    let reference = 0.4f32;
    for (compare_func, passes) in [
        (
            agx_hw::formats::CompareFunc::Less,
            (|r, d| r < d) as fn(f32, f32) -> bool,
        ),
        (agx_hw::formats::CompareFunc::Gequal, |r, d| r >= d),
    ] {
        let sampler = Sampler {
            compare_enable: true,
            compare_func,
            ..linear_clamped()
        };
        m.poke(m.data, SAMPLERS, &sampler.pack().unwrap());
        // The reference in r13; the gather reads component 0 of each
        // texel's comparison.
        let instruction = "texture_sample 1, 0b1100, 0, gather_r, xyzw, 0b00, r8_r9_r10_r11, None, ts0, ss0, tex_2d, r6_r7, auto_lod, 0, 0, r13";
        let (got, _) =
            run_texture_kernel(&m, instruction, 0.5, [reference.to_bits(), 0, 0, 0, 0, 0]);
        for y in 0..TEX_H as i64 {
            for x in 0..TEX_W as i64 {
                // s = (x + 0.5) / 64 on a 4-wide texture: the footprint's
                // left column is floor(4s - 0.5), never a tie.
                let u = (x as f64 + 0.5) / 16.0 - 0.5;
                let v = (y as f64 + 0.5) / 8.0 - 0.5;
                let (x0, y0) = (u.floor() as i64, v.floor() as i64);
                let want = [(x0, y0 + 1), (x0 + 1, y0 + 1), (x0 + 1, y0), (x0, y0)]
                    .map(|(i, j)| f32::from(u8::from(passes(reference, depth(i, j)))));
                let have = got[(y * TEX_W as i64 + x) as usize];
                assert_eq!(have, want, "{compare_func:?} thread ({x}, {y})");
            }
        }
    }
}

/// `texture_sample.query_lod` (GL's `textureQueryLod`) returns the level
/// a sample would read and λ: over a 64-wide grid of the 16-wide
/// five-level texture λ is -2 plus the bias; the level is λ clamped to
/// the sampler's range and the levels, then rounded half down with
/// nearest mipmapping, as it is with linear, 0 without.
#[test_log::test]
fn lod_queries_return_the_level_a_sample_reads_and_the_lod() {
    use agx_hw::Lod;
    let m = Machine::new(5000);
    mip_texture(&m);
    let half = |v: f32| u32::from(half::f16::from_f32(v).to_bits());
    let query = "texture_sample.query_lod 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts0, ss0, tex_2d, r6_r7, auto_lod_bias_min, r13, 0, r0";
    for (bias, max_lod, mip_filter, level, lod) in [
        (3.25, 15.0, MipFilter::Nearest, 2.0, 2.25),
        (3.25, 15.0, MipFilter::Linear, 2.25, 2.25),
        (3.25, 15.0, MipFilter::None, 0.0, 2.25),
        (0.0, 15.0, MipFilter::Nearest, 0.0, -1.0),
        (9.0, 15.0, MipFilter::Linear, 4.0, 8.0),
        (9.0, 2.5, MipFilter::Linear, 2.5, 8.0),
        (9.0, 2.5, MipFilter::Nearest, 2.0, 8.0),
    ] {
        let sampler = Sampler {
            magnify: Filter::Nearest,
            minify: Filter::Nearest,
            mip_filter,
            min_lod: Lod::from_f32(0.0),
            max_lod: Lod::from_f32(max_lod),
            ..Sampler::default()
        };
        m.poke(m.data, SAMPLERS, &sampler.pack().unwrap());
        let (got, _) = run_texture_kernel(&m, query, 0.5, [half(bias), 0, 0, 0, 0, 0]);
        for i in [0, 5, 1000] {
            assert_eq!(
                got[i],
                [level, lod, 0.0, 0.0],
                "bias {bias}, max {max_lod}, {mip_filter:?}: thread {i}"
            );
        }
    }
}

#[test_log::test]
fn a_minimum_lod_raises_the_level_and_gradients_pair_per_axis() {
    use agx_hw::Lod;
    let m = Machine::new(5000);
    mip_texture(&m);
    let sampler = Sampler {
        magnify: Filter::Nearest,
        minify: Filter::Nearest,
        mip_filter: MipFilter::Nearest,
        min_lod: Lod::from_f32(0.0),
        max_lod: Lod::from_f32(15.0),
        ..Sampler::default()
    };
    m.poke(m.data, SAMPLERS, &sampler.pack().unwrap());
    let unorm = |level: u32| mip_colour(level).map(|c| f32::from(c) / 255.0);
    let half = |v: f32| u32::from(half::f16::from_f32(v).to_bits());
    // Auto LOD over a 64-wide grid of a 16-wide texture is below 0: level
    // 0, unless the minimum (the high half of r13; the bias is the low
    // half) says more. Nearest mip selection rounds: 2.2 is level 2, and
    // 9 is clamped to the last level.
    let bias_min = "texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts0, ss0, tex_2d, r6_r7, auto_lod_bias_min, r13, 0, r0";
    for (min, level) in [(0.0, 0), (2.2, 2), (9.0, 4)] {
        let (got, _) = run_texture_kernel(
            &m,
            bias_min,
            0.5,
            [half(0.0) | half(min) << 16, 0, 0, 0, 0, 0],
        );
        assert_eq!(got[5], unorm(level), "minimum {min}");
        assert_eq!(got[1000], unorm(level), "minimum {min}");
    }
    // Gradients come per axis, d/dx then d/dy: (ddx.s, ddy.s, ddx.t,
    // ddy.t). ddx = (2.5, 2.5) texels and ddy = 0 is a footprint of 3.54
    // texels: LOD 1.82, level 2. (Read as ddx = (2.5, 0), ddy = (2.5, 0)
    // it would be 2.5 texels, level 1.) The minimum, after them in the
    // low half of r18, raises it to 3. Bit 70 asks for the residency
    // code, 0 (resident), in the register after the texel.
    let grad_min = "texture_sample 0, 0b1100, 0, none, xyzw, 0b10, r8_r9_r10_r11, None, ts0, ss0, tex_2d, r6_r7, lod_grad_min, r14_r15_r16_r17_r18, 0, r0";
    let step = (2.5f32 / 16.0).to_bits();
    for (min, level) in [(0.0, 2), (3.0, 3)] {
        let (got, residency) =
            run_texture_kernel(&m, grad_min, 0.5, [0, step, 0, step, 0, half(min)]);
        assert_eq!(got[5], unorm(level), "minimum {min}");
        assert_eq!(residency[5], 0);
        assert_eq!(residency[2047], 0);
    }
    // A view from level 1 (an 8-texel base): the LOD is relative to its
    // base, so a footprint of one base texel is LOD 0, level 1; with the
    // image's 16-texel level 0 it would have been LOD 1, level 2. A
    // footprint of four base texels is LOD 2, level 3.
    let bytes: [u8; 24] = m.peek(m.data, DESCRIPTOR, 24).try_into().unwrap();
    let mut descriptor = Texture::decode_fields(&bytes);
    descriptor.first_level = 1;
    m.poke(m.data, DESCRIPTOR, &descriptor.pack().unwrap());
    for (texels, level) in [(1.0f32, 1), (4.0, 3)] {
        let step = (texels / 8.0).to_bits();
        let (got, _) = run_texture_kernel(&m, grad_min, 0.5, [step, 0, 0, step, 0, 0]);
        assert_eq!(got[5], unorm(level), "{texels} texels of the base level");
    }
}

/// Per-thread requests: thread i (of the 64 x 32 grid, row by row) loads
/// four coordinate words from `IN + 16 i`, runs `instruction` (which reads
/// them from r16-r19 and writes r8-r11) and stores the four result words
/// at `OUT + 16 i`.
const IN: u64 = 0x5_0000;

fn request_kernel(instruction: &str) -> String {
    format!(
        "
    get_sr r4, sr80
    get_sr r5, sr81
    imadd r12, r5, u2, r4
    device_load 0, i32, xyzw, r16_r17_r18_r19, u4_u5, r12, unsigned, lsl 2
    wait 0
    {instruction}
    wait 0
    device_store 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r12, unsigned, lsl 2, 0
    stop"
    )
}

/// Runs `instruction` once per entry of `coords` (texture state 0 at
/// DESCRIPTOR, sampler state 0 at SAMPLERS); returns each result's four
/// words.
fn run_requests(m: &Machine, instruction: &str, coords: &[[u32; 4]]) -> Vec<[u32; 4]> {
    let words: Vec<u32> = coords.iter().flatten().copied().collect();
    m.poke_u32s(IN, &words);
    let mut uniforms = pair(DATA_VA + OUT);
    uniforms.extend([TEX_W, 0]);
    uniforms.extend(pair(DATA_VA + IN));
    let pipeline = sampling_pipeline(m, &request_kernel(instruction), &uniforms);
    assert_eq!(run_grid(m, pipeline), None, "{instruction}");
    m.peek_u32s(OUT, 4 * coords.len())
        .chunks_exact(4)
        .map(|c| [c[0], c[1], c[2], c[3]])
        .collect()
}

/// A load (`texture_load`) of dimension `dim` with `count` coordinate
/// registers, at LOD 0.
fn load_instruction(dim: &str, count: usize) -> String {
    let coords = ["r16", "r17", "r18", "r19"][..count].join("_");
    format!(
        "texture_load 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts0, ss0, {dim}, {coords}, lod_min, r20l, 0, r0"
    )
}

/// A sample (`texture_sample`) of dimension `dim` with `count` coordinate
/// registers, at LOD 0.
fn sample_instruction(dim: &str, count: usize) -> String {
    load_instruction(dim, count).replace("texture_load", "texture_sample")
}

/// Puts `bytes` at TEXELS and `descriptor` (its address TEXELS) at
/// DESCRIPTOR.
fn put_texture(m: &Machine, descriptor: Texture, bytes: &[u8]) {
    m.poke(m.data, TEXELS, bytes);
    let descriptor = Texture {
        address: DATA_VA + TEXELS,
        ..descriptor
    };
    m.poke(m.data, DESCRIPTOR, &descriptor.pack().unwrap());
}

fn put_sampler(m: &Machine, filter: Filter, wrap: Wrap) {
    let sampler = Sampler {
        magnify: filter,
        minify: filter,
        mip_filter: MipFilter::None,
        wrap_s: wrap,
        wrap_t: wrap,
        wrap_r: wrap,
        ..Sampler::default()
    };
    m.poke(m.data, SAMPLERS, &sampler.pack().unwrap());
}

fn float_coords(c: [f32; 4]) -> [u32; 4] {
    c.map(f32::to_bits)
}

/// Each thread of one SIMD-group samples texel x % 8 of row 0 (one
/// 128-byte line), overwrites it with a store, and samples it again: the
/// texture unit keeps the lines and texels it read for one instruction's
/// lanes only, so the second sample reads what the store wrote. (The
/// hardware's texture cache is not coherent with stores without a
/// barrier; this model reads memory as it is when each instruction runs,
/// Documentation/gpu.md.)
#[test_log::test]
fn a_sample_reads_texels_as_memory_holds_them_when_it_runs() {
    let m = Machine::new(5000);
    texture(&m, Layout::Linear);
    put_sampler(&m, Filter::Nearest, Wrap::ClampToEdge);
    let coords: Vec<u32> = (0..32)
        .flat_map(|x| {
            let texel = x % 8;
            [
                ((texel as f32 + 0.5) / TEX_W as f32).to_bits(),
                (0.5 / TEX_H as f32).to_bits(),
                0,
                texel,
            ]
        })
        .collect();
    m.poke_u32s(IN, &coords);
    let sample = sample_instruction("tex_2d", 2);
    let kernel = format!(
        "
    get_sr r12, sr80
    device_load 0, i32, xyzw, r16_r17_r18_r19, u4_u5, r12, unsigned, lsl 2
    wait 0
    {sample}
    wait 0
    device_store 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r12, unsigned, lsl 2, 0
    mov_imm r20, 0x80402010
    device_store 0, i32, x, r20, u6_u7, r19, unsigned, 0
    wait 0
    {sample}
    wait 0
    iadd r12, r12, 32
    device_store 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r12, unsigned, lsl 2, 0
    stop"
    );
    let mut uniforms = pair(DATA_VA + OUT);
    uniforms.extend([TEX_W, 0]);
    uniforms.extend(pair(DATA_VA + IN));
    uniforms.extend(pair(DATA_VA + TEXELS));
    let pipeline = sampling_pipeline(&m, &kernel, &uniforms);
    assert_eq!(m.run_launch(STREAM, pipeline, [32, 1, 1], [32, 1, 1]), None);
    let results = m.peek_u32s(OUT, 2 * 4 * 32);
    let unorm = |bytes: [u8; 4]| bytes.map(|b| (f32::from(b) / 255.0).to_bits());
    for x in 0..32 {
        let at = 4 * x as usize;
        assert_eq!(
            results[at..at + 4],
            unorm(texel(x % 8, 0)),
            "lane {x} before"
        );
        assert_eq!(
            results[128 + at..128 + at + 4],
            unorm([0x10, 0x20, 0x40, 0x80]),
            "lane {x} after the store"
        );
    }
}

#[test_log::test]
fn packed_16_bit_formats_decode_from_their_bit_layouts() {
    // Each format's channels from the lowest bits up (Mesa's ail table
    // and its canonical copy formats: channel 0 in the low bits).
    type Case = (Channels, [u32; 4], [u32; 4]);
    let cases: [Case; 4] = [
        // r5g6b5: 5, 6, 5 bits; alpha reads 1.
        (Channels::R5G6B5, [0, 5, 11, 16], [5, 6, 5, 0]),
        (Channels::R4G4B4A4, [0, 4, 8, 12], [4, 4, 4, 4]),
        (Channels::R5G5B5A1, [0, 5, 10, 15], [5, 5, 5, 1]),
        (Channels::A1R5G5B5, [0, 1, 6, 11], [1, 5, 5, 5]),
    ];
    for (channels, shifts, widths) in cases {
        let m = Machine::new(5000);
        // Texel (x, y) holds field values from x and y, each within its
        // width.
        let field = |x: u32, y: u32, c: usize| (x * 7 + y * 3 + c as u32 * 5) % (1 << widths[c]);
        small_texture(&m, channels, TextureType::Unorm, false, 2, |x, y| {
            let word = (0..4)
                .filter(|&c| widths[c] > 0)
                .fold(0u32, |w, c| w | field(x, y, c) << shifts[c]);
            (word as u16).to_le_bytes().to_vec()
        });
        let got = load_4x4(&m);
        for y in 0..4 {
            for x in 0..4 {
                let want: [f32; 4] = std::array::from_fn(|c| {
                    if widths[c] == 0 {
                        1.0
                    } else {
                        field(x, y, c) as f32 / ((1u32 << widths[c]) - 1) as f32
                    }
                });
                assert_eq!(got[(y * 4 + x) as usize], want, "{channels:?} ({x}, {y})");
            }
        }
    }
}

#[test_log::test]
fn rgb32_buffer_textures_read_zero_out_of_bounds_and_three_channels_within() {
    // Mesa's buffer texture of an RGB32 format (agx_nir_lower_texture):
    // in-bounds texels come from global loads; an out-of-bounds index
    // takes the texture unit's path for its zero texel, with the
    // "R32G32B32 (emulated)" channels in a linear 1024-wide descriptor.
    for data_type in [TextureType::Float, TextureType::Uint] {
        let m = Machine::new(5000);
        let texels: Vec<u8> = (0..12u32)
            .flat_map(|i| (0x4000_0000 + i).to_le_bytes())
            .collect();
        put_texture(
            &m,
            Texture {
                dimension: TextureDimension::D2,
                layout: Layout::Linear,
                channels: Channels::R32G32B32Emulated,
                data_type,
                width: 1024,
                height: 1,
                stride: 1024 * 12,
                ..Texture::default()
            },
            &texels,
        );
        let got = run_requests(
            &m,
            &load_instruction("tex_2d", 2),
            &[
                [0, 0, 0, 0],
                [3, 0, 0, 0],
                [u32::MAX, 0, 0, 0],
                [0, 1, 0, 0],
            ],
        );
        let one = if data_type == TextureType::Float {
            1.0f32.to_bits()
        } else {
            1
        };
        assert_eq!(got[0], [0x4000_0000, 0x4000_0001, 0x4000_0002, one]);
        assert_eq!(got[1], [0x4000_0009, 0x4000_000a, 0x4000_000b, one]);
        assert_eq!(got[2], [0; 4], "index -1: Mesa's out-of-bounds load");
        assert_eq!(got[3], [0; 4], "row 1 of a one-row image");
    }
}

#[test_log::test]
fn linear_2d_arrays_read_their_layers_through_the_extended_words() {
    // Mesa's agx_pack_texture for a linear 2D array (a blit's source):
    // the row pitch in the stride field, the layer count and stride in
    // the extended words, and the extended bit, which is also the top
    // bit of Mesa's 18-bit stride field, set.
    let m = Machine::new(5000);
    let (w, h, layers, stride) = (16u32, 4u32, 3u32, 128u32);
    let layer_stride = stride * h * 2;
    let value = |x: u32, y: u32, z: u32| [x as u8, y as u8, z as u8, 0x5a];
    let mut bytes = vec![0u8; (layer_stride * layers) as usize];
    for z in 0..layers {
        for y in 0..h {
            for x in 0..w {
                let at = (z * layer_stride + y * stride + x * 4) as usize;
                bytes[at..at + 4].copy_from_slice(&value(x, y, z));
            }
        }
    }
    let descriptor = Texture {
        dimension: TextureDimension::D2Array,
        layout: Layout::Linear,
        channels: Channels::R8G8B8A8,
        data_type: TextureType::Uint,
        width: w,
        height: h,
        stride,
        extended: true,
        depth_linear: layers,
        layer_stride_linear: u64::from(layer_stride),
        ..Texture::default()
    };
    let packed = descriptor.pack().unwrap();
    assert_eq!(packed[15] & 0x80, 0x80, "the extended bit");
    put_texture(&m, descriptor, &bytes);
    let coords: Vec<[u32; 4]> = (0..layers)
        .flat_map(|z| (0..h).flat_map(move |y| (0..w).map(move |x| [x, y, z, 0])))
        .collect();
    let got = run_requests(&m, &load_instruction("tex_2d_array", 3), &coords);
    for (c, got) in coords.iter().zip(got) {
        assert_eq!(got, value(c[0], c[1], c[2]).map(u32::from), "{c:?}");
    }
}

#[test_log::test]
fn integer_textures_load_and_sample_their_integers_sign_extended() {
    let m = Machine::new(5000);
    // Sampled with a linear filter at off-centre coordinates: integers
    // are not filtered, the nearest texel's come back raw.
    put_sampler(&m, Filter::Linear, Wrap::ClampToEdge);
    let centre = |x: u32, y: u32, dx: f32| {
        float_coords([
            (x as f32 + 0.5 + dx) / 4.0,
            (y as f32 + 0.5) / 4.0,
            0.0,
            0.0,
        ])
    };
    type Case = (
        Channels,
        TextureType,
        u32,
        fn(u32, u32) -> Vec<u8>,
        fn(u32, u32) -> [i64; 4],
    );
    let cases: [Case; 5] = [
        (
            Channels::R8G8B8A8,
            TextureType::Sint,
            4,
            |x, y| vec![x as u8, (-(y as i8)) as u8, 100, 0x80],
            |x, y| [i64::from(x), -i64::from(y), 100, -128],
        ),
        (
            Channels::R8G8B8A8,
            TextureType::Uint,
            4,
            |x, y| vec![x as u8, (-(y as i8)) as u8, 100, 0x80],
            |x, y| [i64::from(x), i64::from((256 - y) % 256), 100, 128],
        ),
        // A missing alpha is the integer 1.
        (
            Channels::R16,
            TextureType::Uint,
            2,
            |x, y| (65535 - (x + 4 * y) as u16).to_le_bytes().to_vec(),
            |x, y| [i64::from(65535 - (x + 4 * y)), 0, 0, 1],
        ),
        (
            Channels::R16G16,
            TextureType::Sint,
            4,
            |x, y| {
                [-(x as i16) - 1, 300 * y as i16]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect()
            },
            |x, y| [-i64::from(x) - 1, 300 * i64::from(y), 0, 1],
        ),
        // 10-10-10-2: r 0-9, g 10-19, b 20-29, a 30-31.
        (
            Channels::R10G10B10A2,
            TextureType::Sint,
            4,
            |x, y| {
                (1023u32 | (x * 100) << 10 | 512 << 20 | y << 30)
                    .to_le_bytes()
                    .to_vec()
            },
            |x, y| [-1, i64::from(x * 100), -512, [0, 1, -2, -1][y as usize]],
        ),
    ];
    for (channels, data_type, bytes, encode, expect) in cases {
        small_texture(&m, channels, data_type, false, bytes, encode);
        let coords: Vec<[u32; 4]> = (0..16).map(|i| [i % 4, i / 4, 0, 0]).collect();
        let loaded = run_requests(&m, &load_instruction("tex_2d", 2), &coords);
        let coords: Vec<[u32; 4]> = (0..32)
            .map(|i| centre(i % 4, (i / 4) % 4, if i < 16 { 0.3 } else { -0.45 }))
            .collect();
        let sampled = run_requests(&m, &sample_instruction("tex_2d", 2), &coords);
        for i in 0..16u32 {
            let (x, y) = (i % 4, i / 4);
            let want = expect(x, y).map(|v| v as u32);
            assert_eq!(
                loaded[i as usize], want,
                "{channels:?} {data_type:?} load ({x}, {y})"
            );
            assert_eq!(
                sampled[i as usize], want,
                "{channels:?} {data_type:?} sample ({x}, {y})"
            );
            assert_eq!(
                sampled[i as usize + 16],
                want,
                "{channels:?} {data_type:?} sample ({x}, {y})"
            );
        }
    }
}

/// A 4 x 4 x 4 GPU-tiled R8 unorm 3D image whose texel (x, y, z) holds
/// 4 (16 z + 4 y + x).
fn volume(m: &Machine) {
    let layout = ImageLayout::gpu_tiled(4, 4, 1, 1, true).unwrap();
    let mut bytes = vec![0u8; 4 * layout.layer_bytes() as usize];
    for z in 0..4 {
        for y in 0..4 {
            for x in 0..4 {
                let at = layout.offset(0, x, y, z).unwrap() as usize;
                bytes[at] = (4 * (16 * z + 4 * y + x)) as u8;
            }
        }
    }
    let descriptor = Texture {
        dimension: TextureDimension::D3,
        layout: Layout::Gpu,
        channels: Channels::R8,
        data_type: TextureType::Unorm,
        width: 4,
        height: 4,
        depth: 4,
        page_aligned_layers: true,
        ..Texture::default()
    };
    put_texture(m, descriptor, &bytes);
}

#[test_log::test]
fn three_d_images_load_their_slices_and_filter_between_them() {
    let m = Machine::new(5000);
    volume(&m);
    let value = |x: u32, y: u32, z: u32| (4 * (16 * z + 4 * y + x)) as f32 / 255.0;
    // Loads: every texel, and z past the depth reads zero.
    let coords: Vec<[u32; 4]> = (0..65).map(|i| [i % 4, (i / 4) % 4, i / 16, 0]).collect();
    let got = run_requests(&m, &load_instruction("tex_3d", 3), &coords);
    for (i, texel) in got.iter().enumerate().take(64) {
        let (x, y, z) = (i as u32 % 4, (i as u32 / 4) % 4, i as u32 / 16);
        assert_eq!(f32::from_bits(texel[0]), value(x, y, z), "({x}, {y}, {z})");
    }
    assert_eq!(got[64], [0; 4], "z past the depth");
    // Nearest: the slice r falls in. Linear: at a slice boundary, half of
    // each; past the last slice, clamped to it.
    let centre = |x: u32| (x as f32 + 0.5) / 4.0;
    let samples = [
        (
            Filter::Nearest,
            [centre(1), centre(2), centre(3)],
            value(1, 2, 3),
        ),
        (
            Filter::Nearest,
            [centre(3), centre(0), 0.26],
            value(3, 0, 1),
        ),
        (
            Filter::Linear,
            [centre(1), centre(2), 0.5],
            (value(1, 2, 1) + value(1, 2, 2)) / 2.0,
        ),
        (
            Filter::Linear,
            [centre(0), centre(3), 0.375],
            value(0, 3, 1),
        ),
        (Filter::Linear, [centre(2), centre(2), 1.5], value(2, 2, 3)),
    ];
    for (filter, [s, t, r], want) in samples {
        put_sampler(&m, filter, Wrap::ClampToEdge);
        let got = run_requests(
            &m,
            &sample_instruction("tex_3d", 3),
            &[float_coords([s, t, r, 0.0])],
        );
        let have = f32::from_bits(got[0][0]);
        assert!(
            (have - want).abs() < 1e-6,
            "{filter:?} ({s}, {t}, {r}): {have} vs {want}"
        );
    }
}

#[test_log::test]
fn a_deep_mipmapped_3d_image_lays_out_the_chain_its_depth_needs() {
    // ail's mipmapped_z: a 4x4x16 image's chain has log2(16) + 1 = 5
    // levels, not the 3 its width and height alone would give, and each
    // slice's stride covers all 5.
    let m = Machine::new(5000);
    let (chain, short) = (
        ImageLayout::gpu_tiled(4, 4, 5, 1, false).unwrap(),
        ImageLayout::gpu_tiled(4, 4, 3, 1, false).unwrap(),
    );
    assert_ne!(chain.layer_bytes(), short.layer_bytes());
    let mut bytes = vec![0u8; 16 * chain.layer_bytes() as usize];
    for z in 0..16 {
        for y in 0..4 {
            for x in 0..4 {
                let at = chain.offset(0, x, y, z).unwrap() as usize;
                bytes[at] = (16 * z + 4 * y + x) as u8;
            }
        }
    }
    let descriptor = Texture {
        dimension: TextureDimension::D3,
        layout: Layout::Gpu,
        channels: Channels::R8,
        data_type: TextureType::Uint,
        width: 4,
        height: 4,
        depth: 16,
        unk_mipmapped: true,
        ..Texture::default()
    };
    put_texture(&m, descriptor, &bytes);
    let coords: Vec<[u32; 4]> = (0..16).map(|z| [1, 2, z, 0]).collect();
    let got = run_requests(&m, &load_instruction("tex_3d", 3), &coords);
    for (z, texel) in got.iter().enumerate() {
        assert_eq!(texel[0], 16 * z as u32 + 9, "slice {z}");
    }
}

/// The face, s and t of a cube direction by the specification's table,
/// written as (axis, sign) -> face and the axes s and t follow.
fn reference_cube(d: [f32; 3]) -> (u32, f32, f32) {
    let major = (0..3)
        .max_by(|&a, &b| d[a].abs().partial_cmp(&d[b].abs()).unwrap().then(b.cmp(&a)))
        .unwrap();
    let negative = d[major] < 0.0;
    let face = 2 * major as u32 + u32::from(negative);
    // (s axis, s sign, t axis, t sign) per face, from the table.
    let (sa, ss, ta, ts) = [
        (2, -1.0, 1, -1.0),
        (2, 1.0, 1, -1.0),
        (0, 1.0, 2, 1.0),
        (0, 1.0, 2, -1.0),
        (0, 1.0, 1, -1.0),
        (0, -1.0, 1, -1.0),
    ][face as usize];
    let m = d[major].abs();
    (
        face,
        (ss * d[sa] / m + 1.0) / 2.0,
        (ts * d[ta] / m + 1.0) / 2.0,
    )
}

/// Two cubes of 4 x 4 faces, R8G8B8A8, as `dimension` (a cube, or a
/// cube array of two): texel (x, y) of layer l is (10 l, 40 x, 40 y,
/// 255).
fn cube_texture(m: &Machine, dimension: TextureDimension) {
    let layout = ImageLayout::gpu_tiled(4, 4, 1, 4, true).unwrap();
    let layer_bytes = layout.layer_bytes() as usize;
    let mut bytes = vec![0u8; 12 * layer_bytes];
    for layer in 0..12u32 {
        for y in 0..4 {
            for x in 0..4 {
                let at = layer as usize * layer_bytes + layout.offset(0, x, y, 0).unwrap() as usize;
                bytes[at..at + 4].copy_from_slice(&[
                    (10 * layer) as u8,
                    (40 * x) as u8,
                    (40 * y) as u8,
                    255,
                ]);
            }
        }
    }
    let descriptor = Texture {
        dimension,
        layout: Layout::Gpu,
        channels: Channels::R8G8B8A8,
        data_type: TextureType::Unorm,
        width: 4,
        height: 4,
        // A cube array's descriptor counts cubes.
        depth: if dimension == TextureDimension::CubeArray {
            2
        } else {
            1
        },
        page_aligned_layers: true,
        ..Texture::default()
    };
    put_texture(m, descriptor, &bytes);
}

#[test_log::test]
fn cube_maps_select_a_face_by_the_major_axis() {
    let m = Machine::new(5000);
    put_sampler(&m, Filter::Nearest, Wrap::ClampToEdge);
    let directions: [[f32; 3]; 10] = [
        [1.0, 0.5, -0.5],
        [-1.0, 0.2, 0.9],
        [0.3, 1.0, -0.7],
        [0.3, -2.0, 0.7],
        [-0.6, 0.1, 1.0],
        [0.6, -0.1, -3.0],
        [0.9, -0.95, 0.2],
        [-0.05, 0.05, 0.5],
        [1.0, 1.0, 0.0],
        [0.0, -1.0, -1.0],
    ];
    for (dimension, dim, registers, cube) in [
        (TextureDimension::Cube, "tex_cube", 3, 0u32),
        (TextureDimension::CubeArray, "tex_cube_array", 4, 1),
    ] {
        cube_texture(&m, dimension);
        let coords: Vec<[u32; 4]> = directions
            .iter()
            .map(|d| [d[0].to_bits(), d[1].to_bits(), d[2].to_bits(), cube])
            .collect();
        let got = run_requests(&m, &sample_instruction(dim, registers), &coords);
        for (d, have) in directions.iter().zip(got) {
            let (face, s, t) = reference_cube(*d);
            let (x, y) = (
                ((s * 4.0).floor() as u32).min(3),
                ((t * 4.0).floor() as u32).min(3),
            );
            let layer = 6 * cube + face;
            let want = [10 * layer, 40 * x, 40 * y, 255].map(|c| (c as f32 / 255.0).to_bits());
            assert_eq!(have, want, "{dim} {d:?}: face {face}, texel ({x}, {y})");
        }
    }
}

/// Linear filtering at the +X face's edge towards +Z (direction (1, 0,
/// 0.95): s = 0.025, t = 0.5, footprint columns -1 and 0 weighted 0.4
/// and 0.6, rows 1 and 2 by half): seamless, column -1 is +Z's column 3
/// (rows 1 and 2: the texels its centres' directions select), giving
/// (0.4 * 40, 0.4 * 120, 60); seamful (`seamful_cube_maps`), the face's
/// edge column clamps, giving (0, 0, 60).
#[test_log::test]
fn cube_filtering_crosses_to_the_next_face_unless_the_sampler_is_seamful() {
    let m = Machine::new(5000);
    cube_texture(&m, TextureDimension::Cube);
    let d = [1.0f32, 0.0, 0.95];
    for (seamful_cube_maps, want) in [(false, [16.0, 48.0, 60.0]), (true, [0.0, 0.0, 60.0])] {
        let sampler = Sampler {
            magnify: Filter::Linear,
            minify: Filter::Linear,
            mip_filter: MipFilter::None,
            wrap_s: Wrap::ClampToEdge,
            wrap_t: Wrap::ClampToEdge,
            wrap_r: Wrap::ClampToEdge,
            seamful_cube_maps,
            ..Sampler::default()
        };
        m.poke(m.data, SAMPLERS, &sampler.pack().unwrap());
        let coords = [[d[0].to_bits(), d[1].to_bits(), d[2].to_bits(), 0]];
        let got =
            run_requests(&m, &sample_instruction("tex_cube", 3), &coords)[0].map(f32::from_bits);
        for c in 0..3 {
            assert!(
                (got[c] - want[c] / 255.0).abs() < 1e-5,
                "seamful {seamful_cube_maps}: {got:?} against {want:?} / 255"
            );
        }
    }
}

#[test_log::test]
fn multisampled_images_load_each_sample() {
    let m = Machine::new(5000);
    // 4 x 4 pixels of four 32-bit samples, GPU-tiled as 16-byte elements
    // (a pixel's samples side by side), two layers for the array case.
    let layout = ImageLayout::gpu_tiled(4, 4, 1, 16, true).unwrap();
    let layer_bytes = layout.layer_bytes() as usize;
    let value =
        |x: u32, y: u32, sample: u32, layer: u32| 10_000 * layer + 1000 * sample + 10 * y + x;
    let mut bytes = vec![0u8; 2 * layer_bytes];
    for layer in 0..2 {
        for y in 0..4 {
            for x in 0..4 {
                for sample in 0..4 {
                    let at = layer as usize * layer_bytes
                        + layout.offset(0, x, y, 0).unwrap() as usize
                        + 4 * sample as usize;
                    bytes[at..at + 4].copy_from_slice(&value(x, y, sample, layer).to_le_bytes());
                }
            }
        }
    }
    for (dimension, dim) in [
        (TextureDimension::D2Multisampled, "tex_2d_ms"),
        (TextureDimension::D2ArrayMultisampled, "tex_2d_ms_array"),
    ] {
        let array = dimension == TextureDimension::D2ArrayMultisampled;
        let descriptor = Texture {
            dimension,
            layout: Layout::Gpu,
            channels: Channels::R32,
            data_type: TextureType::Uint,
            width: 4,
            height: 4,
            depth: if array { 2 } else { 1 },
            samples: agx_hw::formats::SampleCount::Four,
            page_aligned_layers: true,
            ..Texture::default()
        };
        put_texture(&m, descriptor, &bytes);
        // The sample index follows x and y; an array's layer is in the
        // same register's high half.
        let mut coords = Vec::new();
        let mut want = Vec::new();
        for layer in 0..if array { 2 } else { 1 } {
            for i in 0..16 {
                let (x, y, sample) = (i % 4, (i / 4) % 4, (i % 4) ^ ((i / 4) % 4));
                coords.push([x, y, sample | layer << 16, 0]);
                want.push([value(x, y, sample, layer), 0, 0, 1]);
            }
        }
        // A sample past the count reads zero.
        coords.push([1, 1, 4, 0]);
        want.push([0; 4]);
        let got = run_requests(&m, &load_instruction(dim, 3), &coords);
        assert_eq!(got, want, "{dim}");
    }
}

#[test_log::test]
fn custom_border_colours_are_read_in_the_images_encoding() {
    use agx_hw::formats::{BorderColour, CustomBorder};
    use agx_uapi::asahi::{CmdCompute, CmdType};
    use zerocopy::{FromZeros, IntoBytes};
    let m = Machine::new(5000);
    // The sampler heap: sampler 0 clamps to a custom border, whose four
    // words follow it (slots 1 and 2).
    let sampler = Sampler {
        magnify: Filter::Nearest,
        minify: Filter::Nearest,
        mip_filter: MipFilter::None,
        wrap_s: Wrap::ClampToBorder,
        wrap_t: Wrap::ClampToBorder,
        border_colour: BorderColour::Custom,
        ..Sampler::default()
    };
    let half = |v: f32| u32::from(half::f16::from_f32(v).to_bits());
    type Case = (Channels, TextureType, u32, [u32; 4], [u32; 4]);
    let cases: [Case; 4] = [
        // unorm8 channels hold 8-bit integers: 255 is 1.0, 51 is 0.2.
        (
            Channels::R8G8B8A8,
            TextureType::Unorm,
            4,
            [255, 0, 51, 255],
            [1.0f32, 0.0, 0.2, 1.0].map(f32::to_bits),
        ),
        // fp16 channels hold fp16 bits.
        (
            Channels::R16G16B16A16,
            TextureType::Float,
            8,
            [half(0.5), half(-2.0), half(0.0), half(1.0)],
            [0.5f32, -2.0, 0.0, 1.0].map(f32::to_bits),
        ),
        // snorm16: -32767 is -1.0.
        (
            Channels::R16,
            TextureType::Snorm,
            2,
            [(-32767i32) as u32, 0, 0, 0],
            [-1.0f32, 0.0, 0.0, 0.0].map(f32::to_bits),
        ),
        // 32-bit integers are the words themselves.
        (
            Channels::R32,
            TextureType::Uint,
            4,
            [0xDEAD_BEEF, 7, 8, 9],
            [0xDEAD_BEEF, 7, 8, 9],
        ),
    ];
    for (channels, data_type, bytes, border, want) in cases {
        small_texture(&m, channels, data_type, false, bytes, |_, _| {
            vec![0; bytes as usize]
        });
        let mut heap = sampler.pack().unwrap().to_vec();
        heap.extend(
            CustomBorder {
                channel_0: border[0],
                channel_1: border[1],
                channel_2: border[2],
                channel_3: border[3],
            }
            .pack()
            .unwrap(),
        );
        m.poke(m.data, SAMPLERS, &heap);
        // Inside, then past the right edge.
        let coords = [[0.1f32, 0.1, 0.0, 0.0], [1.5, 0.5, 0.0, 0.0]].map(float_coords);
        let words: Vec<u32> = coords.iter().flatten().copied().collect();
        m.poke_u32s(IN, &words);
        let mut uniforms = pair(DATA_VA + OUT);
        uniforms.extend([TEX_W, 0]);
        uniforms.extend(pair(DATA_VA + IN));
        // No sampler state is bound: ss0 is the heap's sampler 0.
        let pipeline = m.program(
            &request_kernel(&sample_instruction("tex_2d", 2)),
            0x1000,
            0x40,
            &uniforms,
            UNIFORMS,
            0,
            Some((1, DATA_VA + DESCRIPTOR)),
        );
        use agx_hw::formats::CdmStreamTerminate;
        let mut stream = launch(pipeline, [TEX_W, TEX_H, 1], [8, 8, 1]);
        stream.extend(CdmStreamTerminate::default().pack().unwrap());
        m.poke(m.data, STREAM, &stream);
        let cmd = CmdCompute {
            cdm_ctrl_stream_base: DATA_VA + STREAM,
            cdm_ctrl_stream_end: DATA_VA + STREAM + 0x1000,
            sampler_heap: DATA_VA + SAMPLERS,
            sampler_count: 3,
            ..CmdCompute::new_zeroed()
        };
        assert_eq!(m.submit(CmdType::Compute, cmd.as_bytes()), None);
        let got = m.peek_u32s(OUT, 8);
        let inside = if data_type == TextureType::Uint {
            [0, 0, 0, 1]
        } else {
            let one = 1.0f32.to_bits();
            match channels {
                Channels::R16 => [0, 0, 0, one],
                _ => [0; 4],
            }
        };
        assert_eq!(got[..4], inside, "{channels:?} inside");
        assert_eq!(got[4..], want, "{channels:?} border");
    }
}

/// An 8 x 4 linear texture of two blocks of `channels`/`data_type`
/// (`blocks`, one after the other), descriptor at DESCRIPTOR.
fn block_texture(
    m: &Machine,
    channels: Channels,
    data_type: TextureType,
    srgb: bool,
    blocks: &[u8],
) {
    let descriptor = Texture {
        dimension: TextureDimension::D2,
        layout: Layout::Linear,
        channels,
        data_type,
        width: 8,
        height: 4,
        srgb,
        stride: (blocks.len() as u32).next_multiple_of(16),
        ..Texture::default()
    };
    put_texture(m, descriptor, blocks);
}

/// A BC1 colour block: endpoints c0, c1 (RGB565) and texel i's index
/// i % 4.
fn colour_block(c0: u16, c1: u16) -> Vec<u8> {
    let mut block = c0.to_le_bytes().to_vec();
    block.extend(c1.to_le_bytes());
    block.extend(0xE4E4_E4E4u32.to_le_bytes());
    block
}

/// An interpolated channel block: endpoints r0, r1 and texel i's index
/// i % 8.
fn channel_block(r0: u8, r1: u8) -> Vec<u8> {
    let mut indices = 0u64;
    for texel in 0..16u64 {
        indices |= (texel % 8) << (3 * texel);
    }
    let mut block = vec![r0, r1];
    block.extend(&indices.to_le_bytes()[..6]);
    block
}

/// Worked from the Khronos Data Format Specification's definitions of
/// BC1-BC5: palettes of the endpoints and the values between them.
/// A 128-bit block written field by field from its lowest bit, as
/// `ARB_texture_compression_bptc` lays BPTC blocks out.
#[derive(Default)]
struct BlockBits {
    bits: u128,
    at: u32,
}

impl BlockBits {
    fn put(&mut self, value: u64, count: u32) -> &mut Self {
        self.bits |= u128::from(value & ((1u64 << count) - 1)) << self.at;
        self.at += count;
        self
    }

    /// Bits `high` down to `low` of `value`, the highest first (the
    /// specification's reversed fields, `v[10:15]`).
    fn put_reversed(&mut self, value: u64, low: u32, high: u32) -> &mut Self {
        for bit in (low..=high).rev() {
            self.put((value >> bit) & 1, 1);
        }
        self
    }

    fn bytes(&self) -> Vec<u8> {
        assert_eq!(self.at, 128, "a whole block");
        self.bits.to_le_bytes().to_vec()
    }
}

/// BPTC's 6-bit interpolation (the specification's weights).
fn bptc_mix(e0: i32, e1: i32, index_bits: u32, index: usize) -> i32 {
    let w = match index_bits {
        2 => [0, 21, 43, 64][index],
        3 => [0, 9, 18, 27, 37, 46, 55, 64][index],
        _ => [0, 4, 9, 13, 17, 21, 26, 30, 34, 38, 43, 47, 51, 55, 60, 64][index],
    };
    ((64 - w) * e0 + w * e1 + 32) >> 6
}

/// An f16 bit pattern's value (finite values only).
fn half_value(h: u16) -> f32 {
    let (sign, exponent, mantissa) = (h >> 15, i32::from((h >> 10) & 31), f32::from(h & 1023));
    let magnitude = if exponent == 0 {
        mantissa * 2f32.powi(-24)
    } else {
        (1.0 + mantissa / 1024.0) * 2f32.powi(exponent - 15)
    };
    if sign == 1 {
        -magnitude
    } else {
        magnitude
    }
}

/// A 64-bit ETC/EAC block built field by field: `fields` are (value,
/// lowest bit, bit count) of the big-endian word.
fn etc_block(fields: &[(u64, u32, u32)]) -> [u8; 8] {
    let word = fields.iter().fold(0u64, |word, &(value, low, count)| {
        assert!(value < 1 << count, "{value} in {count} bits");
        word | value << low
    });
    word.to_be_bytes()
}

/// The index fields of an ETC colour block giving texel (x, y) the
/// 2-bit index x: the high bit at 16 + 4x + y, the low at 4x + y.
fn etc_indices_by_column() -> Vec<(u64, u32, u32)> {
    (0..16u32)
        .flat_map(|p| {
            let index = u64::from(p / 4);
            [(index >> 1, 16 + p, 1), (index & 1, p, 1)]
        })
        .collect()
}

/// The index fields of an EAC block giving texel p (4x + y) the 3-bit
/// index p % 8.
fn eac_indices() -> Vec<(u64, u32, u32)> {
    (0..16u32)
        .map(|p| (u64::from(p % 8), 45 - 3 * p, 3))
        .collect()
}

/// Loads the 8x4 texels of two blocks side by side.
fn block_texels(
    m: &Machine,
    channels: Channels,
    data_type: TextureType,
    blocks: &[u8],
) -> Vec<[f32; 4]> {
    block_texture(m, channels, data_type, false, blocks);
    let coords: Vec<[u32; 4]> = (0..32).map(|i| [i % 8, i / 8, 0, 0]).collect();
    run_requests(m, &load_instruction("tex_2d", 2), &coords)
        .iter()
        .map(|t| t.map(f32::from_bits))
        .collect()
}

/// ETC2's five colour modes, punch-through alpha and EAC's alpha and
/// 11-bit blocks, each block built field by field and each expected
/// texel worked out by hand from the Khronos Data Format Specification.
#[test_log::test]
fn etc2_and_eac_blocks_decode_as_the_format_specification_defines() {
    let m = Machine::new(5000);
    let rgb8 = |c: [u8; 3]| [c[0], c[1], c[2], 255].map(|v| f32::from(v) / 255.0);
    let check = |got: &[[f32; 4]], want: &dyn Fn(usize, usize, usize) -> [f32; 4], what: &str| {
        for (i, texel) in got.iter().enumerate() {
            let (x, y) = (i % 8, i / 8);
            assert_eq!(*texel, want(x / 4, x % 4, y), "{what}: texel ({x}, {y})");
        }
    };
    let with_indices = |fields: &[(u64, u32, u32)], indices: &[(u64, u32, u32)]| {
        etc_block(&[fields, indices].concat())
    };
    // Individual mode (bit 33 clear), subblocks side by side (bit 32
    // clear): 4-bit colours 0xA5 0 and 0x3F8 with intensity tables 2
    // (9, 29) and 7 (47, 183).
    let individual = [
        (0xA, 60, 4),
        (0x3, 56, 4),
        (0x5, 52, 4),
        (0xF, 48, 4),
        (0x0, 44, 4),
        (0x8, 40, 4),
        (2, 37, 3),
        (7, 34, 3),
    ];
    // Differential mode, subblocks one over the other: 5-bit (20, 10,
    // 31) and deltas (+3, -4, 0), tables 1 (5, 17) and 4 (18, 60).
    let differential = [
        (20, 59, 5),
        (3, 56, 3),
        (10, 51, 5),
        (0b100, 48, 3),
        (31, 43, 5),
        (0, 40, 3),
        (1, 37, 3),
        (4, 34, 3),
        (1, 33, 1),
        (1, 32, 1),
    ];
    let columns = etc_indices_by_column();
    let blocks = [
        with_indices(&individual, &columns),
        with_indices(&differential, &columns),
    ]
    .concat();
    let got = block_texels(&m, Channels::Etc2Rgb8, TextureType::Unorm, &blocks);
    check(
        &got,
        &|block, x, y| {
            rgb8(match (block, x, y >= 2) {
                (0, 0, _) => [179, 94, 9],
                (0, 1, _) => [199, 114, 29],
                (0, 2, _) => [4, 208, 89],
                (0, 3, _) => [0, 72, 0],
                (1, 0, false) => [170, 87, 255],
                (1, 1, false) => [182, 99, 255],
                (1, 2, false) => [160, 77, 250],
                (1, 3, false) => [148, 65, 238],
                (1, 0, true) => [207, 67, 255],
                (1, 1, true) => [249, 109, 255],
                (1, 2, true) => [171, 31, 237],
                _ => [129, 0, 195],
            })
        },
        "individual and differential",
    );
    // T mode (red overflows: 29 + 3): colours 0x72C and 0x841, distance
    // 5 (32). H mode (green overflows: 31 + 1): colours 0x45A and 0x93E,
    // distance (1, 0, c1 >= c2: 0) = 4 (23).
    let t_mode = [
        (0b111, 61, 3),
        (0b01, 59, 2),
        (0b11, 56, 2),
        (0x2, 52, 4),
        (0xC, 48, 4),
        (0x8, 44, 4),
        (0x4, 40, 4),
        (0x1, 36, 4),
        (0b10, 34, 2),
        (1, 33, 1),
        (1, 32, 1),
    ];
    let h_mode = [
        (0x4, 59, 4),
        (0b010, 56, 3),
        (0b111, 53, 3),
        (1, 52, 1),
        (1, 51, 1),
        (0b010, 47, 3),
        (0x9, 43, 4),
        (0x3, 39, 4),
        (0xE, 35, 4),
        (1, 34, 1),
        (1, 33, 1),
        (0, 32, 1),
    ];
    let blocks = [
        with_indices(&t_mode, &columns),
        with_indices(&h_mode, &columns),
    ]
    .concat();
    let got = block_texels(&m, Channels::Etc2Rgb8, TextureType::Unorm, &blocks);
    let paints = [
        [[119, 34, 204], [168, 100, 49], [136, 68, 17], [104, 36, 0]],
        [
            [91, 108, 193],
            [45, 62, 147],
            [176, 74, 255],
            [130, 28, 215],
        ],
    ];
    check(&got, &|block, x, _| rgb8(paints[block][x]), "T and H modes");
    // Planar mode (blue overflows: 31 + 1): origin (32, 0, 26), horizontal
    // (63, 64, 0), vertical (0, 127, 63), widened to 8 bits.
    let planar = [
        (0b100000, 57, 6),
        (0b111, 45, 3),
        (0b11, 43, 2),
        (0b010, 39, 3),
        (0b11111, 34, 5),
        (1, 33, 1),
        (1, 32, 1),
        (0b1000000, 25, 7),
        (0b1111111, 6, 7),
        (0b111111, 0, 6),
    ];
    let blocks = [etc_block(&planar), etc_block(&planar)].concat();
    let got = block_texels(&m, Channels::Etc2Rgb8, TextureType::Unorm, &blocks);
    for (x, y, want) in [
        (0, 0, [130, 0, 105]),
        (3, 0, [224, 97, 26]),
        (0, 3, [33, 191, 218]),
        (3, 3, [126, 255, 139]),
    ] {
        assert_eq!(got[y * 8 + x], rgb8(want), "planar texel ({x}, {y})");
    }
    // Punch-through alpha: a differential block of (16, 16, 16), table 0
    // (2, 8), not opaque (bit 33 clear: no small step, index 10
    // transparent black), then the same block opaque.
    let grey = [(16, 59, 5), (16, 51, 5), (16, 43, 5)];
    let opaque = [&grey[..], &[(1, 33, 1)]].concat();
    let blocks = [
        with_indices(&grey, &columns),
        with_indices(&opaque, &columns),
    ]
    .concat();
    let got = block_texels(&m, Channels::Etc2Rgb8A1, TextureType::Unorm, &blocks);
    check(
        &got,
        &|block, x, _| match (block, x) {
            (0, 2) => [0.0; 4],
            (0, _) => rgb8([[132; 3], [140; 3], [0; 3], [124; 3]][x]),
            _ => rgb8([[134; 3], [140; 3], [130; 3], [124; 3]][x]),
        },
        "punch-through",
    );
    // RGBA8: EAC alpha (base 100, multiplier 3, table 13: -1 -2 -3 -10 0
    // 1 2 9; base 250, multiplier 1) before the individual block.
    let alpha = |base: u64, multiplier: u64| {
        etc_block(
            &[
                &[(base, 56, 8), (multiplier, 52, 4), (13, 48, 4)][..],
                &eac_indices(),
            ]
            .concat(),
        )
    };
    let colour = with_indices(&individual, &columns);
    let blocks = [alpha(100, 3), colour, alpha(250, 1), colour].concat();
    let got = block_texels(&m, Channels::Etc2Rgba8, TextureType::Unorm, &blocks);
    for (i, texel) in got.iter().enumerate() {
        let (x, y) = (i % 8, i / 8);
        let p = (x % 4) * 4 + y;
        let want = if x < 4 {
            [97, 94, 91, 70, 100, 103, 106, 127][p % 8]
        } else {
            [249, 248, 247, 240, 250, 251, 252, 255][p % 8]
        };
        assert_eq!(
            texel[3],
            f32::from(want as u8) / 255.0,
            "RGBA8 alpha ({x}, {y})"
        );
    }
    // R11: unsigned base 100, multiplier 3 (8 * base + 4 + 24 * modifier)
    // and 0 (the modifier itself); signed base -128 (as -127), multiplier
    // 3, and 16, multiplier 2 (8 * base + 8 * multiplier * modifier).
    let r11 = |base: u64, multiplier: u64| {
        etc_block(
            &[
                &[(base, 56, 8), (multiplier, 52, 4), (13, 48, 4)][..],
                &eac_indices(),
            ]
            .concat(),
        )
    };
    /// A type, two blocks, their texels' values by index and the scale.
    type R11Case = (TextureType, [[u8; 8]; 2], [[i32; 8]; 2], f32);
    let cases: [R11Case; 2] = [
        (
            TextureType::Unorm,
            [r11(100, 3), r11(100, 0)],
            [
                [780, 756, 732, 564, 804, 828, 852, 1020],
                [803, 802, 801, 794, 804, 805, 806, 813],
            ],
            2047.0,
        ),
        (
            TextureType::Snorm,
            [r11(0x80, 3), r11(16, 2)],
            [
                [-1023, -1023, -1023, -1023, -1016, -992, -968, -800],
                [112, 96, 80, -32, 128, 144, 160, 272],
            ],
            1023.0,
        ),
    ];
    for (data_type, blocks, values, scale) in &cases {
        let got = block_texels(&m, Channels::EacR11, *data_type, &blocks.concat());
        for (i, texel) in got.iter().enumerate() {
            let (x, y) = (i % 8, i / 8);
            let want = values[x / 4][((x % 4) * 4 + y) % 8] as f32 / scale;
            assert_eq!(
                *texel,
                [want, 0.0, 0.0, 1.0],
                "R11 {data_type:?} ({x}, {y})"
            );
        }
    }
    // RG11: the unsigned blocks as red and green.
    let rg = cases[0].1.concat();
    let got = block_texels(
        &m,
        Channels::EacRg11,
        TextureType::Unorm,
        &[rg.clone(), rg].concat(),
    );
    let unsigned = cases[0].2;
    for (i, texel) in got.iter().enumerate() {
        let (x, y) = (i % 8, i / 8);
        let p = (x % 4) * 4 + y;
        let want = |block: usize| unsigned[block][p % 8] as f32 / 2047.0;
        assert_eq!(*texel, [want(0), want(1), 0.0, 1.0], "RG11 ({x}, {y})");
    }
}

/// A 128-bit ASTC block built field by field: (value, lowest bit, bit
/// count); the weights' fields count from the block's top bit down (bit
/// k of a weight field at w is block bit 127 - w - k).
fn astc_block(fields: &[(u128, u32, u32)], weights: &[(u128, u32, u32)]) -> [u8; 16] {
    let mut word = 0u128;
    for &(value, low, count) in fields {
        assert!(value < 1 << count, "{value} in {count} bits");
        word |= value << low;
    }
    for &(value, low, count) in weights {
        for k in 0..count {
            word |= ((value >> k) & 1) << (127 - low - k);
        }
    }
    word.to_le_bytes()
}

/// ASTC 4x4 blocks worked out by hand from the Khronos Data Format
/// Specification: void-extent blocks (unorm16, fp16), LDR luminance
/// endpoints with 2-bit weights (also as sRGB), HDR luminance, trit
/// weights, and a reserved block mode (the error colour).
#[test_log::test]
fn astc_blocks_decode_as_the_format_specification_defines() {
    let m = Machine::new(5000);
    // Grid 4x4 (mode bits 1:0 = 10, A = 2: the weight range 4, 2 bits),
    // one partition, then the endpoint mode and two 8-bit values.
    let two_bit_grid = |mode: u128, v0: u128, v1: u128| {
        let weights: Vec<(u128, u32, u32)> = (0..16).map(|i| ((i % 4) as u128, 2 * i, 2)).collect();
        astc_block(
            &[(0x42, 0, 11), (mode, 13, 4), (v0, 17, 8), (v1, 25, 8)],
            &weights,
        )
    };
    // Luminance direct (mode 0) from 0x20 to 0xE0; weight x (0, 21, 43,
    // 64 unquantised) at texel (x, y).
    let luminance = two_bit_grid(0, 0x20, 0xE0);
    // A void extent block (0x1FC, bits 10-11 set, every extent 0x1FFF) of
    // unorm16 RGBA.
    let void_extent = |hdr: u128, rgba: [u128; 4]| {
        let mut fields = vec![(0x1FC, 0, 9), (hdr, 9, 1), (3, 10, 2)];
        fields.extend([12, 25, 38, 51].map(|at| (0x1FFF, at, 13)));
        fields.extend(
            [64, 80, 96, 112]
                .into_iter()
                .zip(rgba)
                .map(|(at, c)| (c, at, 16)),
        );
        astc_block(&fields, &[])
    };
    let blocks = [luminance, void_extent(0, [0xFFFF, 0x8000, 0, 0x4000])].concat();
    block_texture(&m, Channels::Astc4x4, TextureType::Unorm, false, &blocks);
    let coords: Vec<[u32; 4]> = (0..32).map(|i| [i % 8, i / 8, 0, 0]).collect();
    let load = |m: &Machine| -> Vec<[f32; 4]> {
        run_requests(m, &load_instruction("tex_2d", 2), &coords)
            .iter()
            .map(|t| t.map(f32::from_bits))
            .collect()
    };
    // (0x2020 * (64 - w) + 0xE0E0 * w + 32) >> 6.
    let ramp = [8224.0, 24415.0, 41377.0, 57568.0].map(|c: f32| c / 65535.0);
    for (i, texel) in load(&m).iter().enumerate() {
        let (x, y) = (i % 8, i / 8);
        let want = if x < 4 {
            [ramp[x], ramp[x], ramp[x], 1.0]
        } else {
            [1.0, 32768.0 / 65535.0, 0.0, 16384.0 / 65535.0]
        };
        assert_eq!(*texel, want, "LDR texel ({x}, {y})");
    }
    // sRGB: endpoints widen with 0x80 in the low byte, and a texel is the
    // top byte: (0x2080 * (64 - w) + 0xE080 * w + 32) >> 14, decoded.
    block_texture(&m, Channels::Astc4x4, TextureType::Unorm, true, &blocks);
    let srgb = |byte: f64| srgb_to_linear(byte / 255.0) as f32;
    let srgb_ramp = [32.0, 95.0, 161.0, 224.0].map(srgb);
    for (i, texel) in load(&m).iter().enumerate() {
        let (x, y) = (i % 8, i / 8);
        let want = if x < 4 {
            [srgb_ramp[x], srgb_ramp[x], srgb_ramp[x], 1.0]
        } else {
            [1.0, srgb(128.0), 0.0, 64.0 / 255.0]
        };
        for c in 0..4 {
            assert!(
                (texel[c] - want[c]).abs() < 1e-6,
                "sRGB texel ({x}, {y}): {texel:?} against {want:?}"
            );
        }
    }
    // HDR luminance, large range (mode 2): 0x10 and 0x80 are the 12-bit
    // 0x100 and 0x800, interpolated as 0x1000 to 0x8000 (4096, 13504,
    // 23360, 32768) and turned from logarithmic values to fp16 (0x0800,
    // 0x1A20, 0x2D60, 0x4000); alpha 0x7800 is 1. Then an HDR void extent.
    let hdr = two_bit_grid(2, 0x10, 0x80);
    let blocks = [hdr, void_extent(1, [0x4000, 0x3C00, 0xC000, 0x3800])].concat();
    block_texture(&m, Channels::Astc4x4, TextureType::Float, false, &blocks);
    let hdr_ramp = [0.000_122_070_31, 0.002_990_722_7, 0.083_984_375, 2.0];
    for (i, texel) in load(&m).iter().enumerate() {
        let (x, y) = (i % 8, i / 8);
        let want = if x < 4 {
            [hdr_ramp[x], hdr_ramp[x], hdr_ramp[x], 1.0]
        } else {
            [2.0, 1.0, -2.0, 0.5]
        };
        assert_eq!(*texel, want, "HDR texel ({x}, {y})");
    }
    // Trit weights (mode 0x51: grid 4x4, range 3: 0, 32, 64) in 26 bits:
    // T = 0xFF gives trits 2 1 2 2 2, T = 0x1C gives 0 0 0 2 2, T = 0 all
    // 0, and the last weight's two T bits 10 give 2. Luminance 0 to 0xFF.
    // Beside it the all-zero block: mode 0 is reserved, the error colour.
    let trit_block = astc_block(
        &[(0x51, 0, 11), (0, 13, 4), (0, 17, 8), (0xFF, 25, 8)],
        &[(0xFF, 0, 8), (0x1C, 8, 8), (0, 16, 8), (0b10, 24, 2)],
    );
    let blocks = [trit_block, [0; 16]].concat();
    block_texture(&m, Channels::Astc4x4, TextureType::Unorm, false, &blocks);
    let trits = [2, 1, 2, 2, 2, 0, 0, 0, 2, 2, 0, 0, 0, 0, 0, 2];
    for (i, texel) in load(&m).iter().enumerate() {
        let (x, y) = (i % 8, i / 8);
        let want = if x < 4 {
            // (65535 * w + 32) >> 6 for w = 0, 32, 64.
            let v = [0.0, 32768.0, 65535.0][trits[y * 4 + x]] / 65535.0;
            [v, v, v, 1.0]
        } else {
            [1.0, 0.0, 1.0, 1.0]
        };
        assert_eq!(*texel, want, "trit-weight or reserved texel ({x}, {y})");
    }
    // The luminance block in a 12x12 footprint: the 4x4 grid is spread
    // over the block (Ds = Dt = 93). Texel (1, 1) is at grid (4/16,
    // 4/16): weights 9, 3, 3, 1 of 0, 21, 0, 21 give 5; texels (7, 0)
    // and (7, 3) are at (1 + 15/16, 0) and (1 + 15/16, 13/16): 42.
    block_texture(
        &m,
        Channels::Astc12x12,
        TextureType::Unorm,
        false,
        &luminance,
    );
    let got = load(&m);
    for (x, y, c) in [
        (0, 0, 8224.0),
        (1, 1, 12079.0),
        (7, 0, 40606.0),
        (7, 3, 40606.0),
    ] {
        let v = c / 65535.0;
        assert_eq!(got[y * 8 + x], [v, v, v, 1.0], "12x12 texel ({x}, {y})");
    }
}

#[test_log::test]
fn bptc_blocks_decode_as_the_format_specification_defines() {
    let m = Machine::new(5000);
    // BC7 mode 6: one subset, 7-bit RGBA endpoints with a P-bit each
    // (e0's 1, e1's 0), texel t's 4-bit index t (texel 0, the anchor,
    // has 3 bits).
    let mut mode6 = BlockBits::default();
    mode6.put(1 << 6, 7);
    let (e0, e1) = ([0x7Fu64, 0, 0x40, 0x7F], [0u64, 0x7F, 0x40, 0x7F]);
    for c in 0..4 {
        mode6.put(e0[c], 7).put(e1[c], 7);
    }
    mode6.put(1, 1).put(0, 1);
    mode6.put(0, 3);
    for t in 1..16 {
        mode6.put(t, 4);
    }
    let mode6_want = |t: usize| -> [f32; 4] {
        std::array::from_fn(|c| {
            let (a, b) = ((e0[c] << 1 | 1) as i32, (e1[c] << 1) as i32);
            bptc_mix(a, b, 4, t) as f32 / 255.0
        })
    };
    // BC7 mode 1: two subsets (partition 13: texels 0-7, then 8-15),
    // 6-bit RGB endpoints, a P-bit shared per subset (1, then 0), 3-bit
    // indices t % 4 (anchors: texels 0 and 15, with 2 bits).
    let mut mode1 = BlockBits::default();
    mode1.put(0b10, 2).put(13, 6);
    let ends: [[[u64; 3]; 2]; 2] = [[[63, 0, 0], [0, 0, 0]], [[0, 0, 63], [0, 63, 0]]];
    for c in 0..3 {
        for subset in ends {
            mode1.put(subset[0][c], 6).put(subset[1][c], 6);
        }
    }
    mode1.put(1, 1).put(0, 1);
    for t in 0..16u64 {
        mode1.put(t % 4, if t == 0 || t == 15 { 2 } else { 3 });
    }
    // 7 bits (6 and the P-bit) widened to 8 by repeating the top bit.
    let widen7 = |v: u64| ((v << 1) | (v >> 6)) as i32;
    let mode1_want = move |t: usize| -> [f32; 4] {
        let (subset, p) = if t < 8 { (0, 1) } else { (1, 0) };
        let c = |i: usize| {
            let e = |n: usize| widen7(ends[subset][n][i] << 1 | p);
            bptc_mix(e(0), e(1), 3, t % 4) as f32 / 255.0
        };
        [c(0), c(1), c(2), 1.0]
    };
    let blocks = [mode6.bytes(), mode1.bytes()].concat();
    block_texture(&m, Channels::Bc7, TextureType::Unorm, false, &blocks);
    let coords: Vec<[u32; 4]> = (0..32).map(|i| [i % 8, i / 8, 0, 0]).collect();
    let got = run_requests(&m, &load_instruction("tex_2d", 2), &coords);
    for (i, texel) in got.iter().enumerate() {
        let (x, y) = (i % 8, i / 8);
        let t = y * 4 + x % 4;
        let want = if x < 4 { mode6_want(t) } else { mode1_want(t) };
        assert_eq!(texel.map(f32::from_bits), want, "BC7 texel ({x}, {y})");
    }

    // BC6H ufloat mode 3: one subset, untransformed 10-bit endpoints,
    // 4-bit indices t. Unquantized: 0 stays 0, the maximum is 0xffff,
    // others (x << 15 + 0x4000) >> 9; the result is x * 31 / 64.
    let mut mode3 = BlockBits::default();
    mode3.put(3, 5);
    let (lo, hi) = ([0u64, 512, 100], [1023u64, 0, 100]);
    for v in lo.iter().chain(&hi) {
        mode3.put(*v, 10);
    }
    mode3.put(0, 3);
    for t in 1..16 {
        mode3.put(t, 4);
    }
    let unq = |x: i32| match x {
        0 => 0,
        1023 => 0xFFFF,
        x => ((x << 15) + 0x4000) >> 9,
    };
    let mode3_want = move |t: usize| -> [f32; 4] {
        let c = |i: usize| {
            let x = bptc_mix(unq(lo[i] as i32), unq(hi[i] as i32), 4, t);
            half_value(((x * 31) >> 6) as u16)
        };
        [c(0), c(1), c(2), 1.0]
    };
    // BC6H signed mode 15: 16-bit endpoint e0, its top six bits stored
    // reversed, and 4-bit signed deltas for e1 (7, -1, 0).
    let mut mode15 = BlockBits::default();
    mode15.put(15, 5);
    let base = [0x8C00u64, 0x0001, 0x0523];
    let delta = [7u64, 0xF, 0];
    for v in base {
        mode15.put(v & 0x3FF, 10);
    }
    for c in 0..3 {
        mode15.put(delta[c], 4).put_reversed(base[c], 10, 15);
    }
    mode15.put(0, 3);
    for t in 1..16 {
        mode15.put(t, 4);
    }
    let mode15_want = move |t: usize| -> [f32; 4] {
        let c = |i: usize| {
            let e0 = i32::from(base[i] as u16 as i16);
            let d = ((delta[i] as i32) << 28) >> 28;
            let e1 = i32::from((e0 + d) as u16 as i16);
            let x = bptc_mix(e0, e1, 4, t);
            let magnitude = ((x.abs() * 31) >> 5) as u16;
            half_value(if x < 0 { magnitude | 0x8000 } else { magnitude })
        };
        [c(0), c(1), c(2), 1.0]
    };
    block_texture(
        &m,
        Channels::Bc6hUfloat,
        TextureType::Float,
        false,
        &[mode3.bytes(), mode3.bytes()].concat(),
    );
    let got = run_requests(&m, &load_instruction("tex_2d", 2), &coords);
    for (i, texel) in got.iter().enumerate() {
        let t = (i / 8) * 4 + i % 4;
        assert_eq!(
            texel.map(f32::from_bits),
            mode3_want(t),
            "BC6H ufloat texel {i}"
        );
    }
    block_texture(
        &m,
        Channels::Bc6h,
        TextureType::Float,
        false,
        &[mode15.bytes(), mode15.bytes()].concat(),
    );
    let got = run_requests(&m, &load_instruction("tex_2d", 2), &coords);
    for (i, texel) in got.iter().enumerate() {
        let t = (i / 8) * 4 + i % 4;
        assert_eq!(texel.map(f32::from_bits), mode15_want(t), "BC6H texel {i}");
    }
}

#[test_log::test]
fn bc1_to_bc5_blocks_decode_as_the_format_specification_defines() {
    let m = Machine::new(5000);
    let red = [1.0f32, 0.0, 0.0];
    let blue = [0.0f32, 0.0, 1.0];
    let between = move |wa: f32, wb: f32| -> [f32; 3] {
        std::array::from_fn(|c| (wa * red[c] + wb * blue[c]) / (wa + wb))
    };
    let rgba = |c: [f32; 3], a: f32| [c[0], c[1], c[2], a];
    // Four colours (c0 > c1): red, blue, 2/3 red, 1/3 red.
    let four = [
        rgba(red, 1.0),
        rgba(blue, 1.0),
        rgba(between(2.0, 1.0), 1.0),
        rgba(between(1.0, 2.0), 1.0),
    ];
    // Three colours (c0 <= c1): blue, red, halfway, transparent black.
    let three = [
        rgba(blue, 1.0),
        rgba(red, 1.0),
        rgba(between(1.0, 1.0), 1.0),
        [0.0; 4],
    ];
    // Channel blocks: 8 values for r0 > r1, else 6 and the extremes.
    let eight = |r0: f32, r1: f32, i: usize| match i {
        0 => r0,
        1 => r1,
        i => ((8 - i) as f32 * r0 + (i - 1) as f32 * r1) / 7.0,
    };
    let six = |r0: f32, r1: f32, lo: f32, i: usize| match i {
        0 => r0,
        1 => r1,
        6 => lo,
        7 => 1.0,
        i => ((6 - i) as f32 * r0 + (i - 1) as f32 * r1) / 5.0,
    };
    let (red565, blue565) = (0xF800u16, 0x001Fu16);
    type Want = Box<dyn Fn(usize, usize) -> [f32; 4]>;
    let cases: Vec<(Channels, TextureType, Vec<u8>, Want)> = vec![
        (
            Channels::Bc1,
            TextureType::Unorm,
            [colour_block(red565, blue565), colour_block(blue565, red565)].concat(),
            Box::new(move |block, t| {
                if block == 0 {
                    four[t % 4]
                } else {
                    three[t % 4]
                }
            }),
        ),
        // BC2: 4-bit alpha t / 15; its colour block always has four
        // colours, whatever the endpoints' order.
        (
            Channels::Bc2,
            TextureType::Unorm,
            {
                let alpha: u64 = (0..16u64).map(|t| t << (4 * t)).sum();
                let mut block = alpha.to_le_bytes().to_vec();
                block.extend(colour_block(blue565, red565));
                [block.clone(), block].concat()
            },
            Box::new(move |_, t| {
                let c = [blue, red, between(1.0, 2.0), between(2.0, 1.0)][t % 4];
                rgba(c, t as f32 / 15.0)
            }),
        ),
        (
            Channels::Bc3,
            TextureType::Unorm,
            {
                let block = [channel_block(255, 0), colour_block(red565, blue565)].concat();
                let other = [channel_block(51, 204), colour_block(red565, blue565)].concat();
                [block, other].concat()
            },
            Box::new(move |block, t| {
                let alpha = if block == 0 {
                    eight(1.0, 0.0, t % 8)
                } else {
                    six(0.2, 0.8, 0.0, t % 8)
                };
                let c = four[t % 4];
                [c[0], c[1], c[2], alpha]
            }),
        ),
        (
            Channels::Bc4,
            TextureType::Unorm,
            [channel_block(10, 200), channel_block(200, 10)].concat(),
            Box::new(move |block, t| {
                let (a, b) = (10.0 / 255.0, 200.0 / 255.0);
                let r = if block == 0 {
                    six(a, b, 0.0, t % 8)
                } else {
                    eight(b, a, t % 8)
                };
                [r, 0.0, 0.0, 1.0]
            }),
        ),
        // Signed: 127 is 1.0, -127 (0x81) and -128 (0x80) are -1.0; the
        // order is signed (127 > -127: eight values).
        (
            Channels::Bc4,
            TextureType::Snorm,
            [channel_block(127, 0x81), channel_block(0x80, 64)].concat(),
            Box::new(move |block, t| {
                let r = if block == 0 {
                    eight(1.0, -1.0, t % 8)
                } else {
                    six(-1.0, 64.0 / 127.0, -1.0, t % 8)
                };
                [r, 0.0, 0.0, 1.0]
            }),
        ),
        (
            Channels::Bc5,
            TextureType::Unorm,
            {
                let block = [channel_block(255, 0), channel_block(0, 255)].concat();
                [block.clone(), block].concat()
            },
            Box::new(move |_, t| [eight(1.0, 0.0, t % 8), six(0.0, 1.0, 0.0, t % 8), 0.0, 1.0]),
        ),
    ];
    for (channels, data_type, blocks, want) in cases {
        block_texture(&m, channels, data_type, false, &blocks);
        let coords: Vec<[u32; 4]> = (0..32).map(|i| [i % 8, i / 8, 0, 0]).collect();
        let got = run_requests(&m, &load_instruction("tex_2d", 2), &coords);
        for (i, texel) in got.iter().enumerate() {
            let (x, y) = (i % 8, i / 8);
            let expected = want(x / 4, (y * 4) + x % 4);
            let have = texel.map(f32::from_bits);
            for c in 0..4 {
                assert!(
                    (have[c] - expected[c]).abs() < 1e-6,
                    "{channels:?} {data_type:?} texel ({x}, {y}) channel {c}: {} vs {}",
                    have[c],
                    expected[c]
                );
            }
        }
    }
    // sRGB: the colour channels are decoded after the palette, alpha not.
    block_texture(
        &m,
        Channels::Bc1,
        TextureType::Unorm,
        true,
        &[colour_block(red565, blue565), colour_block(red565, blue565)].concat(),
    );
    let got = run_requests(&m, &load_instruction("tex_2d", 2), &[[2, 0, 0, 0]]);
    let linear = |c: f32| {
        if c <= 0.04045 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    };
    let want = [linear(2.0 / 3.0), 0.0, linear(1.0 / 3.0), 1.0];
    let have = got[0].map(f32::from_bits);
    for c in 0..4 {
        assert!(
            (have[c] - want[c]).abs() < 1e-6,
            "sRGB channel {c}: {} vs {}",
            have[c],
            want[c]
        );
    }
}

#[test_log::test]
fn extended_sampler_states_put_a_custom_border_after_each_bound_sampler() {
    use agx_hw::formats::{
        BorderColour, CdmBlock, CdmGlobalSize, CdmLaunch, CdmLaunchWord0, CdmLaunchWord1,
        CdmLocalSize, CdmMode, CdmStreamTerminate, CustomBorder, SamplerStates,
    };
    let m = Machine::new(5000);
    small_texture(
        &m,
        Channels::R8G8B8A8,
        TextureType::Unorm,
        false,
        4,
        |_, _| vec![0; 4],
    );
    // Two bound samplers, 24 bytes apart: sampler 1 clamps to its custom
    // border (unorm8 channels: 51 is 0.2), which follows it.
    let sampler = |border_colour| Sampler {
        magnify: Filter::Nearest,
        minify: Filter::Nearest,
        mip_filter: MipFilter::None,
        wrap_s: Wrap::ClampToBorder,
        wrap_t: Wrap::ClampToBorder,
        border_colour,
        ..Sampler::default()
    };
    let border = CustomBorder {
        channel_0: 51,
        channel_1: 0,
        channel_2: 255,
        channel_3: 255,
    };
    let mut bytes = sampler(BorderColour::OpaqueWhite).pack().unwrap().to_vec();
    bytes.extend([0; 16]);
    bytes.extend(sampler(BorderColour::Custom).pack().unwrap());
    bytes.extend(border.pack().unwrap());
    m.poke(m.data, SAMPLERS, &bytes);
    let coords = [[1.5f32, 0.5, 0.0, 0.0], [1.5, 0.5, 0.0, 0.0]].map(float_coords);
    m.poke_u32s(IN, &coords.iter().flatten().copied().collect::<Vec<_>>());
    let mut uniforms = pair(DATA_VA + OUT);
    uniforms.extend([TEX_W, 0]);
    uniforms.extend(pair(DATA_VA + IN));
    // Thread x samples through sampler x (its index in r4).
    let instruction = "texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts0, r4l, tex_2d, r16_r17, lod_min, r20l, 0, r0";
    let pipeline = m.program_with_samplers(
        &request_kernel(instruction),
        0x1000,
        0x40,
        &uniforms,
        UNIFORMS,
        0,
        Some((1, DATA_VA + DESCRIPTOR)),
        Some((2, DATA_VA + SAMPLERS)),
    );
    let mut stream = Vec::new();
    CdmBlock::Launch(CdmLaunch {
        header: CdmLaunchWord0 {
            mode: CdmMode::Direct,
            sampler_state_register_count: SamplerStates::Extended8,
            ..CdmLaunchWord0::default()
        },
        word1: CdmLaunchWord1 { pipeline },
        global: Some(CdmGlobalSize { x: 2, y: 1, z: 1 }),
        indirect: None,
        local: Some(CdmLocalSize { x: 2, y: 1, z: 1 }),
    })
    .build(&mut stream)
    .unwrap();
    stream.extend(CdmStreamTerminate::default().pack().unwrap());
    m.poke(m.data, STREAM, &stream);
    assert_eq!(m.run(STREAM), None);
    let got = m.peek_u32s(OUT, 8);
    assert_eq!(got[..4], [1.0f32.to_bits(); 4], "sampler 0: opaque white");
    assert_eq!(
        got[4..],
        [0.2f32, 0.0, 1.0, 1.0].map(f32::to_bits),
        "sampler 1: its custom border"
    );
}

/// Where the compressed multisampled texture's metadata is.
const META: u64 = 0x9_8000;

/// What sample `s` of pixel (x, y) of the compressed multisampled texture
/// holds.
fn ms_value(x: u32, y: u32, s: u32) -> u32 {
    1000 * s + 20 * y + x + 1
}

/// Puts a compressed, GPU-tiled 16 x 16 texture of four R32 uint samples
/// ([`ms_value`]) and its descriptor, with metadata at META: 32 x 32
/// samples, 2 x 2 metadata tiles of 16 x 16 samples (8 x 8 pixels each),
/// tile (tx, ty) holding `tile_word(tx, ty)`. Returns the metadata layout.
fn put_compressed_ms_texture(
    m: &Machine,
    tile_word: impl Fn(u32, u32) -> u64,
) -> agx_hw::layout::CompressionLayout {
    let layout = ImageLayout::gpu_tiled(16, 16, 1, 16, true).unwrap();
    let mut bytes = vec![0u8; layout.layer_bytes() as usize];
    for y in 0..16 {
        for x in 0..16 {
            for s in 0..4 {
                let at = layout.offset(0, x, y, 0).unwrap() as usize + 4 * s as usize;
                bytes[at..at + 4].copy_from_slice(&ms_value(x, y, s).to_le_bytes());
            }
        }
    }
    let meta = agx_hw::layout::CompressionLayout::new(32, 32, 1).unwrap();
    let mut words = vec![0u8; 64];
    for (tx, ty) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
        let at = meta.tile_word_offset(0, 16 * tx, 16 * ty, 0).unwrap() as usize;
        words[at..at + 8].copy_from_slice(&tile_word(tx, ty).to_le_bytes());
    }
    m.poke(m.data, META, &words);
    let descriptor = Texture {
        dimension: TextureDimension::D2Multisampled,
        layout: Layout::Gpu,
        channels: Channels::R32,
        data_type: TextureType::Uint,
        width: 16,
        height: 16,
        samples: agx_hw::formats::SampleCount::Four,
        page_aligned_layers: true,
        compressed_1: true,
        extended: true,
        acceleration_buffer: DATA_VA + META,
        ..Texture::default()
    };
    put_texture(m, descriptor, &bytes);
    meta
}

#[test_log::test]
fn compressed_multisampled_textures_read_their_metadata_in_sample_space() {
    use agx_hw::layout::{solid_subtile_mode, tile_word, uncompressed_subtile_mode};
    let m = Machine::new(5000);
    // Tiles (0, 0) and (0, 1) solid, (1, 0) uncompressed, (1, 1) stale
    // memory in no known mode (Mesa does not initialise metadata): read
    // as uncompressed, as a word never written (zero) is.
    let solid = tile_word(solid_subtile_mode(4).unwrap());
    let plain = tile_word(uncompressed_subtile_mode(4).unwrap());
    let stale = 0x8080_8080_8080_8080u64;
    put_compressed_ms_texture(&m, |tx, ty| match (tx, ty) {
        (0, _) => solid,
        (1, 0) => plain,
        _ => stale,
    });
    let mut coords = Vec::new();
    let mut want = Vec::new();
    for y in 0..16u32 {
        for x in (0..16u32).step_by(3) {
            for s in 0..4u32 {
                coords.push([x, y, s, 0]);
                // Sample-space position, then its tile.
                let (sx, sy) = (2 * x + (s & 1), 2 * y + (s >> 1));
                let v = match (sx / 16, sy / 16) {
                    // Solid: sample 0 of the tile's first pixel.
                    (0, ty) => ms_value(0, 8 * ty, 0),
                    _ => ms_value(x, y, s),
                };
                want.push([v, 0, 0, 1]);
            }
        }
    }
    let got = run_requests(&m, &load_instruction("tex_2d_ms", 3), &coords);
    assert_eq!(got, want);
}

#[test_log::test]
fn a_preshader_loads_a_texel_into_the_uniforms() {
    // Mesa's preambles fetch constants with texture_load (a fast clear's
    // colour): the preshader loads texel (5, 3) of the texture at ts0 and
    // stores it to u8-u11, which every thread then stores.
    let m = Machine::new(5000);
    texture(&m, Layout::Gpu);
    let mut uniforms = pair(DATA_VA + OUT);
    uniforms.extend([TEX_W, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let kernel = "
    get_sr r4, sr80
    get_sr r5, sr81
    imadd r12, r5, u2, r4
    mov r8, u8
    mov r9, u9
    mov r10, u10
    mov r11, u11
    device_store 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r12, unsigned, lsl 2, 0
    stop";
    let pipeline = m.program(
        kernel,
        0x1000,
        0x40,
        &uniforms,
        UNIFORMS,
        0,
        Some((1, DATA_VA + DESCRIPTOR)),
    );
    m.set_preshader(
        pipeline,
        0x2000,
        "mov_imm r0, 5
    mov_imm r1, 3
    texture_load 0, 0b1100, 0, none, xyzw, 0b00, r4_r5_r6_r7, None, ts0, ss0, tex_2d, r0_r1, lod_min, r20l, 0, r0
    wait 0
    uniform_store 2, i16, xyzw, 0, r4l_r4h_r5l_r5h, 16
    uniform_store 2, i16, xyzw, 0, r6l_r6h_r7l_r7h, 20
    stop",
    );
    assert_eq!(run_grid(&m, pipeline), None);
    let want = texel(5, 3).map(|c| f32::from(c) / 255.0);
    let got = out_floats(&m);
    assert_eq!(got[0], want);
    assert_eq!(got[(31 * TEX_W + 63) as usize], want);
}

/// A texture instruction reads its descriptor and texels as memory holds
/// them when it runs, though its threadgroup's earlier instructions
/// decoded the same descriptor: the kernel points texture state 0's
/// descriptor at the image one row down and loads, points it back and
/// loads, then overwrites its own texel and loads again. Each load sees
/// the change before it (a decoding kept by address, or a kept line of
/// texels, would not).
#[test_log::test]
fn texture_loads_follow_their_descriptor_and_texels_as_memory_holds_them() {
    let source = "
        get_sr r4, sr80
        get_sr r5, sr81
        imadd r12, r5, u2, r4
        device_load 0, i32, xyzw, r24_r25_r26_r27, u4_u5, 0, signed
        device_load 0, i32, xy, r28_r29, u4_u5, 4, signed
        wait 0
        device_store 0, i32, xyzw, r24_r25_r26_r27, u6_u7, 0, signed, 0
        device_store 0, i32, xy, r28_r29, u6_u7, 4, signed, 0
        texture_load 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts0, ss0, tex_2d, r4_r5, lod_min, r20l, 0, r0
        wait 0
        device_store 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r12, unsigned, lsl 2, 0
        device_load 0, i32, xyzw, r24_r25_r26_r27, u8_u9, 0, signed
        device_load 0, i32, xy, r28_r29, u8_u9, 4, signed
        wait 0
        device_store 0, i32, xyzw, r24_r25_r26_r27, u6_u7, 0, signed, 0
        device_store 0, i32, xy, r28_r29, u6_u7, 4, signed, 0
        texture_load 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts0, ss0, tex_2d, r4_r5, lod_min, r20l, 0, r0
        wait 0
        iadd r13, r12, u3
        device_store 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r13, unsigned, lsl 2, 0
        mov_imm r14, 0xFF00FF00
        device_store 0, i32, x, r14, u10_u11, r12, unsigned, 0
        texture_load 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts0, ss0, tex_2d, r4_r5, lod_min, r20l, 0, r0
        wait 0
        iadd r13, r13, u3
        device_store 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r13, unsigned, lsl 2, 0
        stop";
    let m = Machine::new(5000);
    let a = texture(&m, Layout::Linear);
    let row_down = Texture {
        address: a.address + u64::from(TEX_W * 4),
        ..a
    };
    let (row_down_at, a_at) = (DESCRIPTOR + 0x100, DESCRIPTOR + 0x200);
    m.poke(m.data, row_down_at, &row_down.pack().unwrap());
    m.poke(m.data, a_at, &a.pack().unwrap());
    let block = 256u32;
    let mut uniforms = pair(DATA_VA + OUT);
    uniforms.extend([TEX_W, block]);
    uniforms.extend(pair(DATA_VA + row_down_at));
    uniforms.extend(pair(DATA_VA + DESCRIPTOR));
    uniforms.extend(pair(DATA_VA + a_at));
    uniforms.extend(pair(DATA_VA + TEXELS));
    let pipeline = m.program(
        source,
        0x1000,
        0x40,
        &uniforms,
        UNIFORMS,
        0,
        Some((1, DATA_VA + DESCRIPTOR)),
    );
    // One SIMD-group: threads (0..8, 0), whose texels share one line.
    assert_eq!(m.run_launch(STREAM, pipeline, [8, 1, 1], [8, 1, 1]), None);
    let got = out_floats(&m);
    let unorm = |t: [u8; 4]| t.map(|c| f32::from(c) / 255.0);
    for y in 0..1 {
        for x in 0..8 {
            let at = (y * TEX_W + x) as usize;
            let b = block as usize;
            assert_eq!(got[at], unorm(texel(x, y + 1)), "({x}, {y}) one row down");
            assert_eq!(got[at + b], unorm(texel(x, y)), "({x}, {y}) back");
            assert_eq!(
                got[at + 2 * b],
                [0.0, 1.0, 0.0, 1.0],
                "({x}, {y}) rewritten"
            );
        }
    }
}

/// A compressed texture's metadata is read as memory holds it at each
/// texture instruction, though the worker keeps the decoded descriptor
/// and the image remembers the metadata word it read last: a load in a
/// solid tile reads the tile's first sample; the kernel then marks the
/// tile uncompressed, and a load of another pixel of it reads its own.
#[test_log::test]
fn a_kept_compressed_texture_reads_its_metadata_as_memory_holds_it() {
    use agx_hw::layout::{solid_subtile_mode, tile_word, uncompressed_subtile_mode};
    let m = Machine::new(5000);
    let solid = tile_word(solid_subtile_mode(4).unwrap());
    let plain = tile_word(uncompressed_subtile_mode(4).unwrap());
    let meta = put_compressed_ms_texture(&m, |_, _| solid);
    let first_tile = meta.tile_word_offset(0, 0, 0, 0).unwrap();
    let load = load_instruction("tex_2d_ms", 3);
    let source = format!(
        "
        mov_imm r16, 1
        mov_imm r17, 0
        mov_imm r18, 0
        {load}
        wait 0
        device_store 0, i32, x, r8, u0_u1, 0, signed, 0
        mov r24, u2
        mov r25, u3
        device_store 0, i32, xy, r24_r25, u4_u5, 0, signed, 0
        mov_imm r16, 2
        {load}
        wait 0
        device_store 0, i32, x, r8, u0_u1, 1, signed, 0
        stop"
    );
    let mut uniforms = pair(DATA_VA + OUT);
    uniforms.extend([plain as u32, (plain >> 32) as u32]);
    uniforms.extend(pair(DATA_VA + META + first_tile));
    let pipeline = sampling_pipeline(&m, &source, &uniforms);
    assert_eq!(m.run_launch(STREAM, pipeline, [1, 1, 1], [1, 1, 1]), None);
    assert_eq!(
        m.peek_u32s(OUT, 2),
        [ms_value(0, 0, 0), ms_value(2, 0, 0)],
        "the solid tile's first sample, then pixel (2, 0) once the tile is uncompressed"
    );
}
