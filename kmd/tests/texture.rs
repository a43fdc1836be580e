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
        _ => ImageLayout::twiddled(TEX_W, TEX_H, 1, 1, 4).unwrap(),
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
    use agx_hw::formats::{
        CdmGlobalSize, CdmLaunchWord0, CdmLaunchWord1, CdmLocalSize, CdmMode, CdmStreamTerminate,
    };
    let mut stream = CdmLaunchWord0 {
        mode: CdmMode::Direct,
        ..CdmLaunchWord0::default()
    }
    .pack()
    .unwrap()
    .to_vec();
    stream.extend(CdmLaunchWord1 { pipeline }.pack().unwrap());
    stream.extend(
        CdmGlobalSize {
            x: TEX_W,
            y: TEX_H,
            z: 1,
        }
        .pack()
        .unwrap(),
    );
    stream.extend(CdmLocalSize { x: 8, y: 8, z: 1 }.pack().unwrap());
    stream.extend(CdmStreamTerminate::default().pack().unwrap());
    m.poke(m.data, STREAM, &stream);
    m.run(STREAM)
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
fn loads_read_every_texel_of_linear_and_twiddled_textures() {
    for layout in [Layout::Linear, Layout::Twiddled] {
        let m = Machine::new(5000);
        texture(&m, layout);
        let mut uniforms = pair(DATA_VA + OUT);
        uniforms.push(TEX_W);
        let pipeline = m.program(
            LOAD,
            0x1000,
            0x40,
            &uniforms,
            UNIFORMS,
            0,
            Some((1, DATA_VA + DESCRIPTOR)),
        );
        assert_eq!(run_grid(&m, pipeline), None, "{layout:?}");
        let got = out_floats(&m);
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
fn reference_texel(wrap: Wrap, x: i64, y: i64) -> [f64; 4] {
    let w = agx_firmware_sim::texture::wrap;
    match (w(wrap, x, i64::from(TEX_W)), w(wrap, y, i64::from(TEX_H))) {
        (Some(x), Some(y)) => texel(x as u32, y as u32).map(|c| f64::from(c) / 255.0),
        _ => [0.0; 4],
    }
}

fn reference(filter: Filter, wrap: Wrap, s: f64, t: f64) -> [f64; 4] {
    let (u, v) = (s * f64::from(TEX_W), t * f64::from(TEX_H));
    match filter {
        Filter::Nearest => reference_texel(wrap, u.floor() as i64, v.floor() as i64),
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
    ];
    for layout in [Layout::Twiddled, Layout::Linear] {
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
            let pipeline = m.program_with_samplers(
                SAMPLE,
                0x1000,
                0x40,
                &uniforms,
                UNIFORMS,
                0,
                Some((1, DATA_VA + DESCRIPTOR)),
                Some((1, DATA_VA + SAMPLERS)),
            );
            assert_eq!(
                run_grid(&m, pipeline),
                None,
                "{layout:?} {filter:?} {wrap:?}"
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
                            "{layout:?} {filter:?} {wrap:?} thread ({x}, {y}) channel {c}: {} vs {}",
                            have[c],
                            want[c]
                        );
                    }
                }
            }
        }
    }
}
