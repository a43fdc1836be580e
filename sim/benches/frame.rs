//! One frame through the whole stack: a 1024x1024 render pass of a
//! procedural sphere of about 100 000 triangles, depth-tested, with a
//! Phong-like fragment shader (normalised interpolated normal, diffuse
//! and a specular power), submitted through SUBMIT and waited for.
//! Results are recorded in Documentation/performance.md.

#[path = "../tests/common/mod.rs"]
mod common;

use agx_hw::formats::{
    CfBinding, CfBindingHeader, Channels, CoefficientSource, Cull, FragmentControl, FragmentFace,
    FragmentShaderWord0, FragmentShaderWord1, FragmentShaderWord2, FragmentShaderWord3, IndexList,
    IndexListBlock, IndexListBufferLo, IndexListCount, IndexListInstances, IndexListStart,
    IndexSize, Layout, Pbe, PppRecords, PppRecordsFragmentShader, PppRecordsViewport, PppState,
    Primitive, ShadeModel, TextureDimension, TextureType, VdmBlock, VdmStateVertexOutputs,
    VdmStateVertexShaderWord1, VdmStateWords, VdmStreamTerminate, Viewport, ViewportControl,
    ZsFunc,
};
use agx_sim::SystemConfig;
use agx_uapi::asahi::{BgEot, BindFlags, CmdRender, CmdType, RenderFlags};
use common::machine::{machine_config, Machine, DATA_VA};
use common::{bind, gem_create, map_op};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use zerocopy::{FromZeros, IntoBytes};

const SIZE: u32 = 1024;
/// Where the frame's big buffers are mapped.
const MESH_VA: u64 = 0x4_0000_0000;
const MESH_BYTES: u64 = 16 << 20;
const IMAGE_VA: u64 = 0x5_0000_0000;
/// Rings and segments of the sphere: 2 x 224 x 224 = 100 352 triangles.
const SEGMENTS: u32 = 224;

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

/// Normalise the normal, diffuse = max(n.l, 0), specular = diffuse^16,
/// colour = albedo * diffuse + specular + ambient.
const FS: &str = "
    iter r2_r3_r4, cf0, center, 0, 0, 0, 0, 0
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
    fmul32 r8, r8, u7
    exp2 r8, r8
    fmadd32 r10, u3, r7, u6
    fmadd32 r11, u4, r7, u6
    fmadd32 r12, u5, r7, u6
    fadd32 r10, r10, r8
    fadd32 r11, r11, r8
    fadd32 r12, r12, r8
    mov r13, u8
    st_tile r10_r11_r12_r13, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

const CLEAR: &str = "
    mov r2, u0
    mov r3, u0
    mov r4, u0
    mov r5, u1
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

const STORE: &str = "
    image_write_block r2, r4, 0, None, ts0, tex_2d, rte, u8norm, 0, 9, 1
    stop";

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

fn pair(address: u64) -> [u32; 2] {
    [address as u32, (address >> 32) as u32]
}

/// Writes the sphere (positions in clip space and normals, 32 bytes per
/// vertex; u32 indices) into the mesh buffer; returns the index count.
fn sphere(m: &Machine, mesh: u32) -> u32 {
    let n = SEGMENTS as usize;
    let mut vertices = Vec::with_capacity((n + 1) * (n + 1) * 8);
    for ring in 0..=n {
        let theta = std::f32::consts::PI * ring as f32 / n as f32;
        for segment in 0..=n {
            let phi = 2.0 * std::f32::consts::PI * segment as f32 / n as f32;
            let normal = [
                theta.sin() * phi.cos(),
                theta.cos(),
                theta.sin() * phi.sin(),
            ];
            let position = [0.9 * normal[0], 0.9 * normal[1], 0.5 - 0.4 * normal[2], 1.0];
            vertices.extend(bits(&position));
            vertices.extend(bits(&normal));
            vertices.push(0);
        }
    }
    let mut indices = Vec::with_capacity(n * n * 6);
    for ring in 0..n as u32 {
        for segment in 0..n as u32 {
            let v = |r: u32, s: u32| r * (SEGMENTS + 1) + s;
            indices.extend([v(ring, segment), v(ring + 1, segment), v(ring, segment + 1)]);
            indices.extend([
                v(ring, segment + 1),
                v(ring + 1, segment),
                v(ring + 1, segment + 1),
            ]);
        }
    }
    m.poke(mesh, 0, vertices.as_bytes());
    m.poke(mesh, 8 << 20, indices.as_bytes());
    indices.len() as u32
}

/// Builds the frame: programs, PPP state, VDM stream, render command.
fn frame(m: &Machine) -> CmdRender {
    let mesh = gem_create(&m.file, MESH_BYTES, 0, 0).unwrap();
    let image = gem_create(&m.file, u64::from(SIZE * SIZE * 4), 0, 0).unwrap();
    let rw = (BindFlags::READ | BindFlags::WRITE).bits();
    bind(
        &m.file,
        m.vm,
        &[
            map_op(mesh, MESH_VA, MESH_BYTES, 0, rw),
            map_op(image, IMAGE_VA, u64::from(SIZE * SIZE * 4), 0, rw),
        ],
    )
    .unwrap();
    let index_count = sphere(m, mesh);
    let mut vs_uniforms = pair(MESH_VA).to_vec();
    vs_uniforms.extend(pair(MESH_VA + 16));
    let vs = m.program(VS, 0x3000, 0xC0, &vs_uniforms, 0x8_0200, 0, None);
    let light = [0.4f32, 0.6, 0.69];
    let mut fs_uniforms = bits(&light);
    fs_uniforms.extend(bits(&[0.8, 0.5, 0.3, 0.05, 16.0, 1.0]));
    let fs = m.program(FS, 0x4000, 0x100, &fs_uniforms, 0x8_0300, 0, None);
    let bg = m.program(CLEAR, 0x1000, 0x40, &bits(&[0.1, 1.0]), 0x8_0000, 0, None);
    let pbe = Pbe {
        dimension: TextureDimension::D2,
        layout: Layout::Linear,
        channels: Channels::R8G8B8A8,
        data_type: TextureType::Unorm,
        width: SIZE,
        height: SIZE,
        buffer: IMAGE_VA,
        stride: SIZE * 4,
        ..Pbe::default()
    };
    m.poke(m.data, 0x8_1000, &pbe.pack().unwrap());
    let eot = m.program(
        STORE,
        0x2000,
        0x80,
        &[0],
        0x8_0100,
        0,
        Some((1, DATA_VA + 0x8_1000)),
    );
    // Coefficient bindings: the normal (vertex outputs 4-6: hardware slots
    // 1-3, after W), linear, to cf0-cf2.
    let mut table = CfBindingHeader {
        slot_count: 4,
        coefficient_register_count: 3,
    }
    .pack()
    .unwrap()
    .to_vec();
    table.extend(
        CfBinding {
            components: 3,
            shade_model: ShadeModel::Linear,
            source: CoefficientSource::Varying,
            base_slot: 1,
            base_coefficient_register: 0,
        }
        .pack()
        .unwrap(),
    );
    m.poke(m.usc, 0x5000, &table);
    let half = SIZE as f32 / 2.0;
    let records = PppRecords {
        fragment_control: Some(FragmentControl::default()),
        fragment_front_face: Some(FragmentFace {
            depth_function: ZsFunc::Less,
            ..FragmentFace::default()
        }),
        viewport: Some(PppRecordsViewport {
            control: ViewportControl::default(),
            viewports: vec![Viewport {
                translate_x: half,
                scale_x: half,
                translate_y: half,
                scale_y: -half,
                translate_z: 0.0,
                scale_z: 1.0,
            }],
        }),
        cull: Some(Cull::default()),
        fragment_shader: Some(PppRecordsFragmentShader {
            word0: FragmentShaderWord0 {
                cf_binding_count: 1,
                ..FragmentShaderWord0::default()
            },
            word1: FragmentShaderWord1 {
                pipeline: fs,
                ..FragmentShaderWord1::default()
            },
            word2: FragmentShaderWord2 {
                cf_bindings: 0x5000,
            },
            word3: FragmentShaderWord3::default(),
        }),
        ..PppRecords::default()
    };
    let mut ppp = Vec::new();
    records.build(&mut ppp).unwrap();
    m.poke(m.data, 0x7_0000, &ppp);
    let indices = MESH_VA + (8 << 20);
    let mut vdm = Vec::new();
    for block in [
        VdmBlock::VdmStateUpdate(VdmStateWords {
            vertex_shader_word_1: Some(VdmStateVertexShaderWord1 {
                pipeline: vs,
                ..VdmStateVertexShaderWord1::default()
            }),
            vertex_outputs: Some(VdmStateVertexOutputs {
                output_count_1: 7,
                output_count_2: 0,
            }),
            ..VdmStateWords::default()
        }),
        VdmBlock::PppStateUpdate(PppState {
            pointer: DATA_VA + 0x7_0000,
            size_words: (ppp.len() / 4) as u32,
        }),
        VdmBlock::IndexList(IndexListBlock {
            header: IndexList {
                primitive: Primitive::Triangles,
                index_size: IndexSize::U32,
                index_buffer_hi: (indices >> 32) as u32,
                ..IndexList::default()
            },
            buffer_lo: Some(IndexListBufferLo {
                buffer_lo: indices as u32,
            }),
            count: Some(IndexListCount { count: index_count }),
            instances: Some(IndexListInstances { count: 1 }),
            start: Some(IndexListStart { start: 0 }),
            ..IndexListBlock::default()
        }),
        VdmBlock::StreamTerminate(VdmStreamTerminate::default()),
    ] {
        block.build(&mut vdm).unwrap();
    }
    m.poke(m.data, 0x9_0000, &vdm);
    CmdRender {
        flags: RenderFlags::PROCESS_EMPTY_TILES.bits(),
        vdm_ctrl_stream_base: DATA_VA + 0x9_0000,
        width_px: SIZE as u16,
        height_px: SIZE as u16,
        layers: 1,
        samples: 1,
        utile_width_px: 32,
        utile_height_px: 32,
        sample_size_B: 4,
        isp_bgobjdepth: 1.0f32.to_bits(),
        bg: BgEot {
            usc: bg as u32 | 4,
            rsrc_spec: 0,
        },
        eot: BgEot {
            usc: eot as u32 | 4,
            rsrc_spec: 0,
        },
        ..CmdRender::new_zeroed()
    }
}

fn render_frame(c: &mut Criterion) {
    for gpu_threads in [1, 2] {
        frame_on(c, gpu_threads);
    }
}

fn frame_on(c: &mut Criterion, gpu_threads: usize) {
    let m = Machine::with_config(SystemConfig {
        tvb_policy: agx_kmd::tvb::GrowthPolicy::Sync,
        gpu_threads,
        ..machine_config(600_000)
    });
    let render = frame(&m);
    // The first frame outgrows the initial parameter buffer: under the
    // sync policy the kmd grows it mid-render (GrowTVB), so every frame
    // renders in one segment.
    let first = m.submit(CmdType::Render, render.as_bytes());
    assert_eq!(
        first,
        None,
        "{:?}",
        m.system.device().scheduler().stats().last_fault
    );
    // The sphere covers the middle of the frame; the corners are clear.
    let image = m.file.object(4).map(|o| o.memory().clone());
    if let Some(memory) = image {
        use agx_hw::uat::PhysicalMemory;
        let pixel = |x: u64, y: u64| {
            let mut p = [0u8; 4];
            let _ = m
                .system
                .device()
                .ram()
                .read(memory.pa().offset(4 * (y * u64::from(SIZE) + x)), &mut p);
            p
        };
        eprintln!("centre {:?}, corner {:?}", pixel(512, 512), pixel(2, 2));
        assert_ne!(pixel(512, 512), pixel(2, 2), "the sphere was drawn");
    }
    let mut group = c.benchmark_group("frame");
    group.sample_size(10);
    group.throughput(Throughput::Elements(u64::from(2 * SEGMENTS * SEGMENTS)));
    let name =
        format!("1024x1024, 100k-triangle sphere, Phong-like shading, {gpu_threads} GPU threads");
    group.bench_function(name, |b| {
        b.iter(|| assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None))
    });
    group.finish();
    let queue = m.file.queue(m.queue).unwrap();
    eprintln!("parameter buffer after the frames: {:?}", queue.tvb_stats());
}

criterion_group!(benches, render_frame);
criterion_main!(benches);
