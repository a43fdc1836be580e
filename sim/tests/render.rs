//! Render passes end to end: SUBMIT of a cmd_render, the VDM walk, and
//! per tile the background program into the tilebuffer and the
//! end-of-tile program's block store through a PBE descriptor.

mod common;

use agx_hw::formats::{
    Channels, Cull, FragmentControl, FragmentFace, FragmentShaderWord0, FragmentShaderWord1,
    FragmentShaderWord2, FragmentShaderWord3, IndexList, IndexListBlock, IndexListBufferLo,
    IndexListCount, IndexListInstances, IndexListStart, Layout, Pbe, PppHeader, PppRecords,
    PppRecordsFragmentShader, PppRecordsViewport, PppState, Primitive, TextureDimension,
    TextureType, VdmBlock, VdmBlockType, VdmStateVertexOutputs, VdmStateVertexShaderWord1,
    VdmStateWords, VdmStreamTerminate, Viewport, ViewportControl, ZlsControl, ZsFunc,
};
use agx_hw::Format;
use agx_kmd::Errno;
use agx_sim::{ShaderEngine, SystemConfig};
use agx_uapi::asahi::{BgEot, CmdRender, CmdType, RenderFlags};
use common::machine::*;
use zerocopy::{FromZeros, IntoBytes};

const STREAM: u64 = 0x9_0000;
const UNIFORMS: u64 = 0x8_0000;
const PBE: u64 = 0x8_1000;
const IMAGE: u64 = 0x1_0000;
const STRIDE: u32 = 512;

/// Background program: every pixel's RGBA8 target (bytes 0..4 of its
/// record) gets the clear colour in u0..u3.
const CLEAR: &str = "
    mov r2, u0
    mov r3, u1
    mov r4, u2
    mov r5, u3
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

/// End-of-tile program: store render target 0 (tilebuffer offset in r2,
/// 0) through the PBE descriptor in texture state 0.
const STORE: &str = "
    image_write_block r2, r4, 0, None, ts0, tex_2d, rte, u8norm, 0, 9, 1
    stop";

fn pbe(width: u32, height: u32) -> Pbe {
    Pbe {
        dimension: TextureDimension::D2,
        layout: Layout::Linear,
        channels: Channels::R8G8B8A8,
        data_type: TextureType::Unorm,
        width,
        height,
        buffer: DATA_VA + IMAGE,
        stride: STRIDE,
        ..Pbe::default()
    }
}

/// Sets up the clear and store programs and a terminate-only VDM stream;
/// returns the render command for a `width` x `height` pass.
/// A 64x64 4x multisampled linear target at `MSAA_IMAGE` (a pixel's
/// samples side by side, rows `stride` bytes apart).
fn msaa_pbe(stride: u32) -> Pbe {
    Pbe {
        dimension: TextureDimension::D2Multisampled,
        samples: agx_hw::formats::SampleCount::Four,
        buffer: DATA_VA + MSAA_IMAGE,
        stride,
        ..pbe(64, 64)
    }
}

fn clear_pass(m: &Machine, colour: [f32; 4], width: u16, height: u16) -> CmdRender {
    let uniforms: Vec<u32> = colour.iter().map(|c| c.to_bits()).collect();
    background_pass(m, CLEAR, &uniforms, width, height)
}

/// A pass of `width` x `height` with `background` (its uniforms
/// `uniforms`) as its background program and [`STORE`] as its end of tile.
fn background_pass(
    m: &Machine,
    background: &str,
    uniforms: &[u32],
    width: u16,
    height: u16,
) -> CmdRender {
    let bg = m.program(background, 0x1000, 0x40, uniforms, UNIFORMS, 0, None);
    m.poke(
        m.data,
        PBE,
        &pbe(u32::from(width), u32::from(height)).pack().unwrap(),
    );
    let eot = m.program(
        STORE,
        0x2000,
        0x80,
        &[0],
        UNIFORMS + 0x100,
        0,
        Some((1, DATA_VA + PBE)),
    );
    m.poke(
        m.data,
        STREAM,
        &VdmStreamTerminate::default().pack().unwrap(),
    );
    CmdRender {
        flags: RenderFlags::PROCESS_EMPTY_TILES.bits(),
        vdm_ctrl_stream_base: DATA_VA + STREAM,
        width_px: width,
        height_px: height,
        layers: 1,
        samples: 1,
        utile_width_px: 32,
        utile_height_px: 32,
        sample_size_B: 4,
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

fn image(m: &Machine, rows: usize) -> Vec<u8> {
    m.peek(m.data, IMAGE, rows * STRIDE as usize)
}

/// Checks that every pixel of the `width` x `height` RGBA8 image holds
/// `rgba`.
fn assert_filled(m: &Machine, width: usize, height: usize, rgba: [u8; 4]) {
    let pixels = image(m, height);
    for y in 0..height {
        for x in 0..width {
            let at = y * STRIDE as usize + 4 * x;
            assert_eq!(pixels[at..at + 4], rgba, "pixel ({x}, {y})");
        }
    }
}

/// Background program: its lane's place in the SIMD-group (`sr52`) / 255
/// as red, and its quad's count of active lanes (`sr57`) / 255 as green
/// (u0: 1/255).
const LANE_BG: &str = "
    get_sr r6, sr52
    convert u32_to_f, r2, r6, rte
    fmul32 r2, r2, u0
    get_sr r6, sr57
    convert u32_to_f, r3, r6, rte
    fmul32 r3, r3, u0
    mov r4, u1
    mov r5, u1
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

#[test_log::test]
fn the_background_program_runs_each_tile_in_2x2_quads_eight_to_a_simd_group() {
    // A 48x40 pass: the first 32x32 tile is inside the render area, the
    // others are cut by its edges (a 16-pixel column, an 8-pixel row).
    let m = Machine::new(5000);
    let render = background_pass(&m, LANE_BG, &[(1.0f32 / 255.0).to_bits(), 0], 48, 40);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let pixels = image(&m, 40);
    for y in 0..40usize {
        for x in 0..48usize {
            // Quads in rows of the tile's width in pixels (32, or the
            // render area's part of it), eight quads to a SIMD-group,
            // lane bit 0 the quad's x and bit 1 its y; every lane active.
            let (tx, ty) = (x % 32, y % 32);
            let row_quads = (48 - (x - tx)).min(32) / 2;
            let quad = (ty / 2) * row_quads + tx / 2;
            let lane = (quad % 8) * 4 + (ty % 2) * 2 + tx % 2;
            let at = y * STRIDE as usize + 4 * x;
            assert_eq!(pixels[at..at + 2], [lane as u8, 4], "pixel ({x}, {y})");
        }
    }
}

/// A tile store of a run of 16-bit registers stores each lane's halves in
/// the run's order (r2l, r2h, r3l, r3h), each converted from fp16: the
/// whole SIMD-group's values are read register by register.
#[test_log::test]
fn a_tile_store_of_16_bit_registers_takes_each_half_in_order() {
    let m = Machine::new(5000);
    let source = "
        mov_imm r2l, 15360
        mov_imm r2h, 14336
        mov_imm r3l, 13312
        mov_imm r3h, 0
        st_tile r2l_r2h_r3l_r3h, u8norm, 0, xyzw, 0, 255, r0, 0
        stop";
    let render = background_pass(&m, source, &[0], 40, 36);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    // fp16 1.0, 0.5, 0.25 and 0 as unorm8: 255, 127.5 rounded to even,
    // 63.75 rounded, 0.
    assert_filled(&m, 40, 36, [255, 128, 64, 0]);
}

#[test_log::test]
fn a_clear_fills_the_render_area_and_nothing_else() {
    let m = Machine::new(5000);
    // 100 x 70: the right and bottom tiles are partial.
    let render = clear_pass(&m, [1.0, 0.5, 0.25, 0.0], 100, 70);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let pixels = image(&m, 72);
    let expected = [255u8, 128, 64, 0];
    for y in 0..72 {
        for x in 0..128 {
            let at = y * STRIDE as usize + 4 * x;
            let got = &pixels[at..at + 4];
            if x < 100 && y < 70 {
                assert_eq!(got, expected, "pixel ({x}, {y})");
            } else {
                assert_eq!(got, [0; 4], "pixel ({x}, {y}) is outside the area");
            }
        }
    }
    // A second clear overwrites the first.
    let render = clear_pass(&m, [0.0, 0.0, 1.0, 1.0], 100, 70);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(&image(&m, 1)[..4], [0, 0, 255, 255]);
    // The program pointer's low bits are flags: Mesa tags a background
    // program 8 instead of 4 with four or more colour buffers, and its
    // words still start at the 64-byte-aligned address.
    let mut render = clear_pass(&m, [0.0, 1.0, 0.0, 1.0], 100, 70);
    render.bg.usc = (render.bg.usc & !0x3F) | 8;
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(&image(&m, 1)[..4], [0, 255, 0, 255]);
}

/// 16x16 tiles are legal (the kmd accepts them): an empty pass clears,
/// and drawn triangles cover exactly the pixels they cover with 32x32
/// tiles. (An empty pass with 16-pixel tiles once indexed the scene's
/// 32-pixel tile lists out of bounds and crashed the firmware for every
/// client.)
#[test_log::test]
fn sixteen_pixel_tiles_clear_and_draw_as_thirty_two_pixel_tiles_do() {
    let m = Machine::new(5000);
    // A large empty pass: its 16-pixel tile numbers run past the scene's
    // list heads (2,048 scene tiles, one page of heads).
    let mut render = clear_pass(&m, [1.0; 4], 2048, 1024);
    render.utile_width_px = 16;
    render.utile_height_px = 16;
    render.flags = 0;
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(
        m.file.device().firmware().status().map(|s| s.crashed),
        Some(0)
    );
    let mut render = clear_pass(&m, [1.0, 0.5, 0.25, 0.0], 100, 70);
    render.utile_width_px = 16;
    render.utile_height_px = 16;
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_filled(&m, 100, 70, [255, 128, 64, 0]);
    let window = [[10.25f32, 5.5], [50.75, 20.0], [20.0, 60.125]];
    let render = triangles_pass(&m, &window);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let with_32 = counts(&m);
    let m = Machine::new(5000);
    let mut render = triangles_pass(&m, &window);
    render.utile_width_px = 16;
    render.utile_height_px = 16;
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(counts(&m), with_32);
    assert!(with_32.iter().filter(|&&c| c == 1).count() > 500);
}

#[test_log::test]
fn empty_tiles_are_skipped_unless_the_pass_asks_for_them() {
    let m = Machine::new(5000);
    let mut render = clear_pass(&m, [1.0, 1.0, 1.0, 1.0], 64, 64);
    render.flags = 0;
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert!(image(&m, 64).iter().all(|&b| b == 0), "no tile was touched");
}

#[test_log::test]
fn a_missing_end_of_tile_program_faults_at_the_null_address() {
    let m = Machine::new(5000);
    let mut render = clear_pass(&m, [1.0, 1.0, 1.0, 1.0], 32, 32);
    render.eot = BgEot::default();
    assert_eq!(
        m.submit(CmdType::Render, render.as_bytes()),
        Some(Errno::EIO)
    );
    let (address, unit, _) = m.system.device().scheduler().stats().last_fault.unwrap();
    assert_eq!(
        (address, unit),
        (0, agx_fwif::messages::FaultUnit::Usc as u32)
    );
}

#[test_log::test]
fn a_render_target_that_is_not_mapped_faults_in_the_pixel_back_end() {
    let m = Machine::new(5000);
    let render = clear_pass(&m, [1.0, 1.0, 1.0, 1.0], 32, 32);
    let bad = Pbe {
        buffer: 0x7_0000_0000,
        ..pbe(32, 32)
    };
    m.poke(m.data, PBE, &bad.pack().unwrap());
    assert_eq!(
        m.submit(CmdType::Render, render.as_bytes()),
        Some(Errno::EIO)
    );
    let (address, unit, _) = m.system.device().scheduler().stats().last_fault.unwrap();
    assert_eq!(address, 0x7_0000_0000);
    assert_eq!(unit, agx_fwif::messages::FaultUnit::Pbe as u32);
}

/// A depth plane nothing maps: the tile's load (a pass that loads depth
/// and stores none) or its store faults in the ZLS at the first element
/// it reaches, pixel (0, 0)'s at the plane's base.
#[test_log::test]
fn a_depth_plane_that_is_not_mapped_faults_in_the_zls_at_its_first_element() {
    for load in [false, true] {
        let m = Machine::new(5000);
        coloured(
            &m,
            &[(
                [[0.0f32, 0.0], [64.0, 0.0], [0.0, 64.0]],
                0.5,
                [1.0, 0.0, 0.0],
            )],
        );
        let mut render = depth_pass(&m, 1, load);
        render.zls_ctrl = zls_word(ZlsControl {
            z_load_enable: load,
            z_store_enable: !load,
            ..ZlsControl::default()
        });
        render.depth.base = 0x7_0000_0000;
        assert_eq!(
            m.submit(CmdType::Render, render.as_bytes()),
            Some(Errno::EIO),
            "load {load}"
        );
        let (address, unit, _) = m.system.device().scheduler().stats().last_fault.unwrap();
        assert_eq!(address, 0x7_0000_0000, "load {load}");
        assert_eq!(
            unit,
            agx_fwif::messages::FaultUnit::Zls as u32,
            "load {load}"
        );
    }
}

#[test_log::test]
fn a_draw_without_vertex_shader_state_faults_at_the_draw() {
    let m = Machine::new(5000);
    let render = clear_pass(&m, [1.0, 1.0, 1.0, 1.0], 32, 32);
    // An index-list block (block type 3) where the terminate was, with no
    // vertex shader set up before it.
    m.poke(m.data, STREAM, &(3u32 << 29).to_le_bytes());
    assert_eq!(
        m.submit(CmdType::Render, render.as_bytes()),
        Some(Errno::EIO)
    );
    let (address, unit, reason) = m.system.device().scheduler().stats().last_fault.unwrap();
    assert_eq!(address, DATA_VA + STREAM);
    assert_eq!(unit, agx_fwif::messages::FaultUnit::Vdm as u32);
    assert_eq!(reason, agx_fwif::messages::FAULT_UNSUPPORTED_WORK);
}

/// Vertex shader: position (four floats) from the vertex buffer at u0_u1,
/// indexed by the vertex id in r5, to output slots 0-3.
const POSITION_VS: &str = "
    device_load 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r5, unsigned, lsl 2
    wait 0
    st_var 1, r8, 0
    st_var 1, r9, 1
    st_var 1, r10, 2
    st_var 1, r11, 3
    stop";

/// [`POSITION_VS`] placed with its code at 0x3000 and its uniforms
/// pointing at the vertices at [`VERTICES`].
fn position_vs(m: &Machine) -> u64 {
    m.program(
        POSITION_VS,
        0x3000,
        0xC0,
        &pair(DATA_VA + VERTICES),
        UNIFORMS + 0x200,
        0,
        None,
    )
}

/// Fragment shader: adds 1/255 to the red channel of the pixel (so a
/// pixel's red value counts the triangles that covered it).
const COUNT_FS: &str = "
    ld_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    wait 0
    fadd32 r2, r2, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

/// [`COUNT_FS`] placed with its code at 0x4000.
fn count_fs(m: &Machine) -> u64 {
    m.program(
        COUNT_FS,
        0x4000,
        0x100,
        &[(1.0f32 / 255.0).to_bits()],
        UNIFORMS + 0x300,
        0,
        None,
    )
}

const VERTICES: u64 = 0x6_0000;
const PPP: u64 = 0x7_0000;
const SIZE: u16 = 64;

/// Window-space vertices to clip space (w = 1) for a SIZE x SIZE viewport
/// whose y axis points down the image.
fn clip(window: &[[f32; 2]]) -> Vec<u32> {
    let half = f32::from(SIZE) / 2.0;
    window
        .iter()
        .flat_map(|[x, y]| [(x - half) / half, (half - y) / half, 0.5, 1.0])
        .map(f32::to_bits)
        .collect()
}

/// A pass drawing `window` (triangles, three vertices each) with COUNT_FS
/// over a cleared (zero) target.
fn triangles_pass(m: &Machine, window: &[[f32; 2]]) -> CmdRender {
    m.poke_u32s(VERTICES, &clip(window));
    count_pass(
        m,
        POSITION_VS,
        &pair(DATA_VA + VERTICES),
        window.len() as u32,
    )
}

/// A pass drawing `vertex_count` vertices as triangles with the vertex
/// shader `vs` (uniforms `vs_uniforms`, four outputs) and COUNT_FS.
fn count_pass(m: &Machine, vs: &str, vs_uniforms: &[u32], vertex_count: u32) -> CmdRender {
    let vs = m.program(vs, 0x3000, 0xC0, vs_uniforms, UNIFORMS + 0x200, 0, None);
    let fs = count_fs(m);
    draw_pass(m, vertex_count, vs, 4, fs, None)
}

/// The colour vertex shader at 0x3000, reading positions and colours
/// from the vertex buffer at `vertices` (a data-buffer offset); its
/// pipeline address.
fn colour_vs(m: &Machine, vertices: u64) -> u64 {
    let mut uniforms = pair(DATA_VA + vertices);
    uniforms.extend(pair(DATA_VA + vertices + 16));
    m.program(
        COLOUR_VS,
        0x3000,
        0xC0,
        &uniforms,
        UNIFORMS + 0x200,
        0,
        None,
    )
}

fn pair(address: u64) -> Vec<u32> {
    vec![address as u32, (address >> 32) as u32]
}

/// A pass over a cleared (zero) target drawing `vertex_count` vertices as
/// triangles with the vertex shader pipeline `vs` (writing `outputs`
/// slots) and the fragment shader pipeline `fs`, with the coefficient
/// binding table at `cf` (USC offset, binding count).
fn draw_pass(
    m: &Machine,
    vertex_count: u32,
    vs: u64,
    outputs: u32,
    fs: u64,
    cf: Option<(u64, u32)>,
) -> CmdRender {
    draw_pass_with_depth(m, vertex_count, vs, outputs, fs, cf, None)
}

/// [`draw_pass`] with a depth test (`depth_function`, depth writes on).
fn draw_pass_with_depth(
    m: &Machine,
    vertex_count: u32,
    vs: u64,
    outputs: u32,
    fs: u64,
    cf: Option<(u64, u32)>,
    depth_function: Option<ZsFunc>,
) -> CmdRender {
    draw_pass_with_depth_stencil(m, vertex_count, vs, outputs, fs, cf, depth_function, None)
}

/// [`draw_pass_with_depth`] with a stencil test (state, reference).
#[allow(clippy::too_many_arguments)]
fn draw_pass_with_depth_stencil(
    m: &Machine,
    vertex_count: u32,
    vs: u64,
    outputs: u32,
    fs: u64,
    cf: Option<(u64, u32)>,
    depth_function: Option<ZsFunc>,
    stencil: Option<(agx_hw::formats::FragmentStencil, u8)>,
) -> CmdRender {
    let draw = Shapes::new(Primitive::Triangles, vertex_count);
    draw_shapes(
        m,
        draw,
        vs,
        outputs,
        fs,
        cf,
        depth_function,
        stencil,
        &|_| {},
    )
}

/// A draw's topology and vertex count; or the IndexList block to draw
/// with, and the restart index and vertex flags (the provoking vertex) of
/// the VDM state.
#[derive(Clone)]
struct Shapes {
    primitive: Primitive,
    vertex_count: u32,
    block: Option<VdmBlock>,
    restart_index: Option<u32>,
    vertex_flags: Option<agx_hw::formats::VdmStateVertexUnknown>,
}

impl Shapes {
    fn new(primitive: Primitive, vertex_count: u32) -> Shapes {
        Shapes {
            primitive,
            vertex_count,
            block: None,
            restart_index: None,
            vertex_flags: None,
        }
    }
}

/// [`draw_pass_with_depth_stencil`] of any topology, with `patch`
/// applied to the PPP records before they are written.
#[allow(clippy::too_many_arguments)]
fn draw_shapes(
    m: &Machine,
    draw: Shapes,
    vs: u64,
    outputs: u32,
    fs: u64,
    cf: Option<(u64, u32)>,
    depth_function: Option<ZsFunc>,
    stencil: Option<(agx_hw::formats::FragmentStencil, u8)>,
    patch: &dyn Fn(&mut PppRecords),
) -> CmdRender {
    let mut render = clear_pass(m, [0.0, 0.0, 0.0, 0.0], SIZE, SIZE);
    // PPP state: depth state, viewport, cull (nothing culled), fragment
    // shader.
    let half = f32::from(SIZE) / 2.0;
    let records = PppRecords {
        fragment_control: Some(FragmentControl {
            stencil_test_enable: stencil.is_some(),
            pass_type: m.pass_type(fs),
            ..FragmentControl::default()
        }),
        fragment_front_face: depth_function.map(|depth_function| FragmentFace {
            depth_function,
            disable_depth_write: false,
            stencil_reference: u32::from(stencil.map_or(0, |(_, r)| r)),
            ..FragmentFace::default()
        }),
        fragment_front_stencil: stencil.map(|(state, _)| state),
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
                cf_binding_count: cf.map_or(0, |(_, n)| n),
                ..FragmentShaderWord0::default()
            },
            word1: FragmentShaderWord1 {
                pipeline: fs,
                ..FragmentShaderWord1::default()
            },
            word2: FragmentShaderWord2 {
                cf_bindings: cf.map_or(0, |(at, _)| at),
            },
            word3: FragmentShaderWord3::default(),
        }),
        ..PppRecords::default()
    };
    let mut records = records;
    patch(&mut records);
    let mut ppp = Vec::new();
    records.build(&mut ppp).unwrap();
    m.poke(m.data, PPP, &ppp);
    // VDM: vertex shader state, PPP state, one draw, terminate.
    let mut vdm = Vec::new();
    for block in [
        VdmBlock::VdmStateUpdate(VdmStateWords {
            vertex_shader_word_1: Some(VdmStateVertexShaderWord1 {
                pipeline: vs,
                ..VdmStateVertexShaderWord1::default()
            }),
            vertex_outputs: Some(VdmStateVertexOutputs {
                output_count_1: outputs,
                output_count_2: 0,
            }),
            restart_index: draw
                .restart_index
                .map(|value| agx_hw::formats::VdmStateRestartIndex { value }),
            vertex_unknown: draw.vertex_flags,
            ..VdmStateWords::default()
        }),
        VdmBlock::PppStateUpdate(PppState {
            pointer: DATA_VA + PPP,
            size_words: (ppp.len() / 4) as u32,
        }),
        draw.block
            .clone()
            .unwrap_or_else(|| draw_block_of(draw.primitive, draw.vertex_count)),
        VdmBlock::StreamTerminate(VdmStreamTerminate::default()),
    ] {
        block.build(&mut vdm).unwrap();
    }
    m.poke(m.data, STREAM, &vdm);
    render.flags = RenderFlags::PROCESS_EMPTY_TILES.bits();
    render
}

/// The offset of the first block of type `wanted` in a VDM stream, walked
/// block by block.
fn block_at(stream: &[u8], wanted: VdmBlockType) -> usize {
    let mut at = 0;
    loop {
        let first = &stream[at..at + VdmBlock::PEEK_BYTES];
        if VdmBlock::peek_tag(first).unwrap() == wanted {
            return at;
        }
        at += VdmBlock::len_bytes(first).unwrap();
    }
}

/// A non-indexed draw of `vertex_count` vertices (one instance) as a VDM
/// block.
fn draw_block(vertex_count: u32) -> VdmBlock {
    draw_block_of(Primitive::Triangles, vertex_count)
}

/// [`draw_block`] of `primitive`.
fn draw_block_of(primitive: Primitive, vertex_count: u32) -> VdmBlock {
    VdmBlock::IndexList(IndexListBlock {
        header: IndexList {
            primitive,
            ..IndexList::default()
        },
        count: Some(IndexListCount {
            count: vertex_count,
        }),
        instances: Some(IndexListInstances { count: 1 }),
        start: Some(IndexListStart { start: 0 }),
        ..IndexListBlock::default()
    })
}

/// An independent rasteriser: pixel centres strictly inside, or on a top
/// or left edge (D3D's rule), of a triangle in window space (y down).
fn covers(t: [[f64; 2]; 3], x: f64, y: f64) -> bool {
    let area =
        (t[1][0] - t[0][0]) * (t[2][1] - t[0][1]) - (t[2][0] - t[0][0]) * (t[1][1] - t[0][1]);
    if area == 0.0 {
        return false;
    }
    // Order the vertices so that the area is positive.
    let t = if area > 0.0 { t } else { [t[0], t[2], t[1]] };
    (0..3).all(|i| {
        let (a, b) = (t[i], t[(i + 1) % 3]);
        let e = (b[0] - a[0]) * (y - a[1]) - (b[1] - a[1]) * (x - a[0]);
        let top = a[1] == b[1] && b[0] > a[0];
        let left = b[1] < a[1];
        e > 0.0 || (e == 0.0 && (top || left))
    })
}

fn counts(m: &Machine) -> Vec<u8> {
    let pixels = image(m, SIZE as usize);
    (0..SIZE as usize * SIZE as usize)
        .map(|i| {
            let (x, y) = (i % SIZE as usize, i / SIZE as usize);
            pixels[y * STRIDE as usize + 4 * x]
        })
        .collect()
}

#[test_log::test]
fn one_triangle_covers_exactly_the_pixels_an_independent_rasteriser_finds() {
    let m = Machine::new(5000);
    let window = [[10.25f32, 5.5], [50.75, 20.0], [20.0, 60.125]];
    let render = triangles_pass(&m, &window);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let got = counts(&m);
    let t = window.map(|[x, y]| [f64::from(x), f64::from(y)]);
    let mut covered = 0;
    for y in 0..SIZE as usize {
        for x in 0..SIZE as usize {
            let want = u8::from(covers(t, x as f64 + 0.5, y as f64 + 0.5));
            covered += usize::from(want);
            assert_eq!(got[y * SIZE as usize + x], want, "pixel ({x}, {y})");
        }
    }
    assert!(covered > 500, "a real triangle: {covered} pixels");
    // The firmware reports the pages each scene used; the kmd's growth
    // policy reads the report before the next render.
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let queue = m.file.queue(m.queue).unwrap();
    let peak = queue.tvb_stats().peak_pages;
    assert!(
        (3..=8).contains(&peak),
        "header, list heads and data pages: {peak}"
    );
}

/// COUNT_FS after an `image_write` of (x / 64, y / 64, 0.5) at the
/// pixel's position (sr80, sr81) through the PBE at ts0.
const IMAGE_WRITE_FS: &str = "
    get_sr r6, sr80
    get_sr r7, sr81
    convert u32_to_f, r2, r6, rte
    fmul32 r2, r2, u1
    convert u32_to_f, r3, r7, rte
    fmul32 r3, r3, u1
    mov r4, u2
    mov r5, u2
    image_write r2_r3_r4_r5, r6_r7, 0, None, ts0, tex_2d, rte, 9, 1
    ld_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    wait 0
    fadd32 r2, r2, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

const STORAGE_PBE: u64 = 0x8_2000;
const STORAGE_IMAGE: u64 = 0xC_0000;

#[test_log::test]
fn a_fragment_shader_writes_an_rg11b10f_image_at_exactly_its_covered_pixels() {
    image_write_pass(IMAGE_WRITE_FS, |_, _| true);
}

/// [`POSITION_VS`] that also writes its vertex id, as a float, to texel
/// (id, 0) of the R32 image whose PBE is at ts0 (Mesa's vertex, geometry
/// and tessellation shaders store to images).
const IMAGE_WRITE_VS: &str = "
    device_load 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r5, unsigned, lsl 2
    wait 0
    convert u32_to_f, r2, r5, rte
    mov r3, r2
    mov r4, r2
    mov r6, r5
    mov_imm r7, 0
    image_write r2_r3_r4_r5, r6_r7, 0, None, ts0, tex_2d, rte, 9, 1
    st_var 1, r8, 0
    st_var 1, r9, 1
    st_var 1, r10, 2
    st_var 1, r11, 3
    stop";

#[test_log::test]
fn vertex_shaders_write_images() {
    let m = Machine::new(5000);
    let window = [[10.25f32, 5.5], [50.75, 20.0], [20.0, 60.125]];
    m.poke_u32s(VERTICES, &clip(&window));
    let storage = Pbe {
        channels: Channels::R32,
        data_type: TextureType::Float,
        buffer: DATA_VA + STORAGE_IMAGE,
        stride: 4 * u32::from(SIZE),
        ..pbe(u32::from(SIZE), u32::from(SIZE))
    };
    m.poke(m.data, STORAGE_PBE, &storage.pack().unwrap());
    let untouched = 0xDEAD_BEEFu32;
    m.poke_u32s(STORAGE_IMAGE, &[untouched; 8]);
    let vs = m.program(
        IMAGE_WRITE_VS,
        0x3000,
        0xC0,
        &pair(DATA_VA + VERTICES),
        UNIFORMS + 0x200,
        0,
        Some((1, DATA_VA + STORAGE_PBE)),
    );
    let fs = count_fs(&m);
    let render = draw_pass(&m, 3, vs, 4, fs, None);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let words = m.peek_u32s(STORAGE_IMAGE, 4);
    assert_eq!(
        words,
        [
            0.0f32.to_bits(),
            1.0f32.to_bits(),
            2.0f32.to_bits(),
            untouched
        ],
        "one texel per vertex (it was refused: image stores not available in the vertex stage)"
    );
}

/// An `image_write` instruction reads its PBE descriptor for its first
/// lane and its later lanes write through what it read; the next
/// instruction reads it again, even when its first lane is a helper that
/// writes nothing. One pixel, (1, 0), is covered, so lane 0 of its quad,
/// (0, 0), is a helper: the shader writes 1.0 through the descriptor,
/// stores over it so that it names a second image, and writes 2.0.
#[test_log::test]
fn an_image_write_after_its_descriptor_changed_reads_it_again_behind_a_helper_lane() {
    let m = Machine::new(5000);
    let window = [[1.0f32, 0.0], [2.0, 0.0], [1.5, 1.0]];
    m.poke_u32s(VERTICES, &clip(&window));
    let images = [STORAGE_IMAGE, STORAGE_IMAGE + 0x1_0000];
    let descriptor = |image: u64| {
        Pbe {
            channels: Channels::R32,
            data_type: TextureType::Float,
            buffer: DATA_VA + image,
            stride: 4 * u32::from(SIZE),
            ..pbe(u32::from(SIZE), u32::from(SIZE))
        }
        .pack()
        .unwrap()
    };
    let (first, second) = (descriptor(images[0]), descriptor(images[1]));
    m.poke(m.data, STORAGE_PBE, &first);
    let untouched = 0xDEAD_BEEFu32;
    for image in images {
        m.poke_u32s(image, &[untouched; 4]);
    }
    // The words in which the second descriptor differs from the first:
    // the shader stores them over it.
    let word =
        |bytes: &[u8], i: usize| u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap());
    let changed: Vec<(u32, u32)> = (0..first.len() / 4)
        .filter(|&i| word(&first, i) != word(&second, i))
        .map(|i| (i as u32, word(&second, i)))
        .collect();
    assert!((1..=2).contains(&changed.len()), "{changed:?}");
    let mut uniforms = pair(DATA_VA + STORAGE_PBE);
    uniforms.extend([1.0f32.to_bits(), 2.0f32.to_bits()]);
    let mut stores = String::new();
    for (n, (index, value)) in changed.iter().enumerate() {
        uniforms.extend([*index, *value]);
        let (u_index, u_value) = (4 + 2 * n, 5 + 2 * n);
        stores += &format!(
            "    mov r8, u{u_index}\n    mov r9, u{u_value}\n    device_store 0, i32, x, r9, u0_u1, r8, unsigned, 0\n"
        );
    }
    let source = format!(
        "
    get_sr r6, sr80
    get_sr r7, sr81
    mov r2, u2
    mov r3, u2
    mov r4, u2
    mov r5, u2
    image_write r2_r3_r4_r5, r6_r7, 0, None, ts0, tex_2d, rte, 9, 1
{stores}    mov r2, u3
    image_write r2_r3_r4_r5, r6_r7, 0, None, ts0, tex_2d, rte, 9, 1
    stop"
    );
    let vs = position_vs(&m);
    let fs = m.program(
        &source,
        0x4000,
        0x100,
        &uniforms,
        UNIFORMS + 0x300,
        0,
        Some((1, DATA_VA + STORAGE_PBE)),
    );
    let render = draw_pass(&m, 3, vs, 4, fs, None);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let row = |image: u64| m.peek_u32s(image, 4);
    assert_eq!(
        row(images[0]),
        [untouched, 1.0f32.to_bits(), untouched, untouched],
        "the first write, through the first descriptor"
    );
    assert_eq!(
        row(images[1]),
        [untouched, 2.0f32.to_bits(), untouched, untouched],
        "the second write, through the descriptor as the store left it"
    );
}

#[test_log::test]
fn image_writes_after_a_discard_have_no_effect() {
    // Mesa lowers GLSL's discard to a sample_mask killing every sample and
    // leaves the image writes after it unguarded (piglit's
    // arb_shader_image_load_store dead-fragments): the hardware drops them.
    // Every odd column discards.
    let source = IMAGE_WRITE_FS.replace(
        "    image_write",
        "    and r8, r6, 1\n    mov_imm r9, 255\n    mov_imm r10, 0\n    icmpsel ueq, r8, r8, 0, r10, r9\n    sample_mask r8l, 0\n    image_write",
    );
    image_write_pass(&source, |x, _| x % 2 == 0);
}

/// Draws WINDOW's triangle with fragment shader `source` (an
/// IMAGE_WRITE_FS variant) and checks the storage image: written at the
/// covered pixels `writes` keeps, untouched elsewhere.
fn image_write_pass(source: &str, writes: impl Fn(usize, usize) -> bool) {
    let m = Machine::new(5000);
    let window = [[10.25f32, 5.5], [50.75, 20.0], [20.0, 60.125]];
    m.poke_u32s(VERTICES, &clip(&window));
    // A SIZE x SIZE R11G11B10 float image, each word 0xDEADBEEF first.
    let storage = Pbe {
        channels: Channels::R11G11B10,
        data_type: TextureType::Float,
        buffer: DATA_VA + STORAGE_IMAGE,
        stride: 4 * u32::from(SIZE),
        ..pbe(u32::from(SIZE), u32::from(SIZE))
    };
    m.poke(m.data, STORAGE_PBE, &storage.pack().unwrap());
    let untouched = 0xDEAD_BEEFu32;
    m.poke_u32s(
        STORAGE_IMAGE,
        &vec![untouched; usize::from(SIZE) * usize::from(SIZE)],
    );
    let vs = position_vs(&m);
    let fs = m.program(
        source,
        0x4000,
        0x100,
        &[
            (1.0f32 / 255.0).to_bits(),
            (1.0f32 / 64.0).to_bits(),
            0.5f32.to_bits(),
        ],
        UNIFORMS + 0x300,
        0,
        Some((1, DATA_VA + STORAGE_PBE)),
    );
    let render = draw_pass(&m, 3, vs, 4, fs, None);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let words = m.peek_u32s(STORAGE_IMAGE, usize::from(SIZE) * usize::from(SIZE));
    let got = counts(&m);
    let t = window.map(|[x, y]| [f64::from(x), f64::from(y)]);
    let mut written = 0;
    for y in 0..SIZE as usize {
        for x in 0..SIZE as usize {
            let covered = covers(t, x as f64 + 0.5, y as f64 + 0.5);
            // Helper lanes (uncovered members of a covered quad) run the
            // shader but write nothing.
            let want = if covered && writes(x, y) {
                common::small_float_bits(x as f64 / 64.0, 6)
                    | common::small_float_bits(y as f64 / 64.0, 6) << 11
                    | common::small_float_bits(0.5, 5) << 22
            } else {
                untouched
            };
            assert_eq!(
                words[y * SIZE as usize + x],
                want,
                "pixel ({x}, {y}): {:#x}",
                words[y * SIZE as usize + x]
            );
            assert_eq!(
                got[y * SIZE as usize + x],
                u8::from(covered && writes(x, y))
            );
            written += usize::from(covered && writes(x, y));
        }
    }
    assert!(written > 250, "{written}");
}

#[test_log::test]
fn shared_edges_are_hit_exactly_once() {
    let m = Machine::new(5000);
    // A fan of triangles around a centre on pixel corners and centres,
    // with edges through pixel centres and tile boundaries, closing the
    // full circle: every pixel of the covered area is hit once.
    let c = [32.0f32, 32.5];
    let ring = [
        [4.5f32, 4.0],
        [32.0, 2.5],
        [60.5, 4.0],
        [61.0, 32.5],
        [60.5, 61.0],
        [32.0, 62.5],
        [3.5, 60.0],
        [2.0, 32.5],
    ];
    let mut window = Vec::new();
    for i in 0..ring.len() {
        window.extend([c, ring[i], ring[(i + 1) % ring.len()]]);
    }
    let render = triangles_pass(&m, &window);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let got = counts(&m);
    assert!(got.iter().all(|&n| n <= 1), "no pixel is hit twice");
    let polygon: Vec<[f64; 2]> = ring
        .iter()
        .map(|[x, y]| [f64::from(*x), f64::from(*y)])
        .collect();
    let mut inside_total = 0;
    for y in 0..SIZE as usize {
        for x in 0..SIZE as usize {
            let (px, py) = (x as f64 + 0.5, y as f64 + 0.5);
            let hit = (0..polygon.len()).any(|i| {
                covers(
                    [[32.0, 32.5], polygon[i], polygon[(i + 1) % polygon.len()]],
                    px,
                    py,
                )
            });
            inside_total += usize::from(hit);
            assert_eq!(
                got[y * SIZE as usize + x],
                u8::from(hit),
                "pixel ({x}, {y})"
            );
        }
    }
    assert!(inside_total > 2500, "{inside_total}");
}

/// Vertex shader: position and an RGB colour per vertex, 32 bytes apart
/// (u0_u1: positions, u2_u3: colours), to slots 0-3 and 4-6.
const COLOUR_VS: &str = "
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

/// Places the fragment program `source` at USC offset 0x4000 with its
/// pipeline at 0x100, u0 = 1.0 (the alpha of the programs here).
fn fs_program(m: &Machine, source: &str) -> u64 {
    m.program(
        source,
        0x4000,
        0x100,
        &[1.0f32.to_bits()],
        UNIFORMS + 0x300,
        0,
        None,
    )
}

/// Fragment shader: the interpolated colour (cf0-cf2), alpha 1 (u0).
const COLOUR_FS: &str = "
    iter r2_r3_r4, cf0, center, 0, 0, 0, 0, 0
    mov r5, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

/// A vertex shader with as many outputs as Mesa gives one (24 vec4s,
/// then the point size, layer and clip distances: past 100 slots): its
/// colour at slots 101-103 reaches the fragment shader.
#[test_log::test]
fn varyings_past_the_hundredth_output_slot_reach_the_fragment_shader() {
    use agx_hw::formats::{CfBinding, CfBindingHeader, CoefficientSource, ShadeModel};
    let m = Machine::new(5000);
    let positions = clip(&[[4.0f32, 6.0], [60.0, 12.0], [24.0, 58.0]]);
    let mut vertices = Vec::new();
    for v in 0..3 {
        vertices.extend_from_slice(&positions[4 * v..4 * v + 4]);
        vertices.extend([0.25f32, 0.5, 1.0].map(f32::to_bits));
        vertices.push(0);
    }
    m.poke_u32s(VERTICES, &vertices);
    let vs = COLOUR_VS
        .replace("r12, 4", "r12, 101")
        .replace("r13, 5", "r13, 102")
        .replace("r14, 6", "r14, 103");
    let mut uniforms = pair(DATA_VA + VERTICES);
    uniforms.extend(pair(DATA_VA + VERTICES + 16));
    let vs = m.program(&vs, 0x3000, 0xC0, &uniforms, UNIFORMS + 0x200, 0, None);
    let fs = fs_program(&m, COLOUR_FS);
    let mut table = CfBindingHeader {
        slot_count: 1 + 100,
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
            // Slot 1 is output 4.
            base_slot: 1 + 101 - 4,
            base_coefficient_register: 0,
        }
        .pack()
        .unwrap(),
    );
    m.poke(m.usc, 0x5000, &table);
    let render = draw_pass(&m, 3, vs, 104, fs, Some((0x5000, 1)));
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let pixels = image(&m, SIZE as usize);
    let at = 20 * STRIDE as usize + 4 * 24;
    assert_eq!(pixels[at..at + 4], [64, 128, 255, 255]);
}

#[test_log::test]
fn varyings_are_interpolated_across_the_triangle() {
    let m = Machine::new(5000);
    let window = [[4.0f32, 6.0], [60.0, 12.0], [24.0, 58.0]];
    let colours = [[1.0f32, 0.0, 0.25], [0.0, 1.0, 0.5], [0.0, 0.0, 1.0]];
    let positions = clip(&window);
    let mut vertices = Vec::new();
    for v in 0..3 {
        vertices.extend_from_slice(&positions[4 * v..4 * v + 4]);
        vertices.extend(colours[v].map(f32::to_bits));
        vertices.push(0);
    }
    m.poke_u32s(VERTICES, &vertices);
    let vs = colour_vs(&m, VERTICES);
    let fs = fs_program(&m, COLOUR_FS);
    // The coefficient binding table: slots 4-6, linear, to cf0-cf2.
    cf_table(&m, 3, agx_hw::formats::ShadeModel::Linear);
    let render = draw_pass(&m, 3, vs, 7, fs, Some((0x5000, 1)));
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let pixels = image(&m, SIZE as usize);
    let t = window.map(|[x, y]| [f64::from(x), f64::from(y)]);
    let area =
        (t[1][0] - t[0][0]) * (t[2][1] - t[0][1]) - (t[2][0] - t[0][0]) * (t[1][1] - t[0][1]);
    let mut checked = 0;
    for y in 0..SIZE as usize {
        for x in 0..SIZE as usize {
            let (px, py) = (x as f64 + 0.5, y as f64 + 0.5);
            let at = y * STRIDE as usize + 4 * x;
            if !covers(t, px, py) {
                assert_eq!(&pixels[at..at + 4], [0; 4], "pixel ({x}, {y})");
                continue;
            }
            // Barycentric weights of the pixel centre.
            let w1 = ((px - t[0][0]) * (t[2][1] - t[0][1]) - (t[2][0] - t[0][0]) * (py - t[0][1]))
                / area;
            let w2 = ((t[1][0] - t[0][0]) * (py - t[0][1]) - (px - t[0][0]) * (t[1][1] - t[0][1]))
                / area;
            let w0 = 1.0 - w1 - w2;
            for c in 0..3 {
                let v = w0 * f64::from(colours[0][c])
                    + w1 * f64::from(colours[1][c])
                    + w2 * f64::from(colours[2][c]);
                let want = (v.clamp(0.0, 1.0) * 255.0).round() as i32;
                let got = i32::from(pixels[at + c]);
                assert!(
                    (got - want).abs() <= 1,
                    "pixel ({x}, {y}) channel {c}: {got} vs {want}"
                );
            }
            assert_eq!(pixels[at + 3], 255);
            checked += 1;
        }
    }
    assert!(checked > 1000, "{checked}");
}

const DEPTH: u64 = 0xA_0000;

/// A triangle: window-space corners, depth, colour.
type Coloured = ([[f32; 2]; 3], f32, [f32; 3]);

/// Triangles for COLOUR_VS.
fn coloured(m: &Machine, triangles: &[Coloured]) {
    let mut vertices = Vec::new();
    for (corners, z, colour) in triangles {
        let positions = clip(corners);
        for v in 0..3 {
            vertices.extend_from_slice(&positions[4 * v..4 * v + 2]);
            vertices.extend([z.to_bits(), 1.0f32.to_bits()]);
            vertices.extend(colour.map(f32::to_bits));
            vertices.push(0);
        }
    }
    m.poke_u32s(VERTICES, &vertices);
}

/// A depth-tested pass of coloured triangles over the whole target,
/// storing depth (and loading it if `load`).
fn depth_pass(m: &Machine, triangles: u32, load: bool) -> CmdRender {
    depth_pass_with_fs(m, triangles, load, COLOUR_FS, &[1.0f32.to_bits()])
}

/// [`depth_pass`] with another fragment shader (cf0-cf2: the colour).
fn depth_pass_with_fs(
    m: &Machine,
    triangles: u32,
    load: bool,
    fs: &str,
    fs_uniforms: &[u32],
) -> CmdRender {
    let vs = colour_vs(m, VERTICES);
    let fs = m.program(fs, 0x4000, 0x100, fs_uniforms, UNIFORMS + 0x300, 0, None);
    cf_table(m, 3, agx_hw::formats::ShadeModel::FlatVertex0);
    let mut render = draw_pass_with_depth(
        m,
        3 * triangles,
        vs,
        7,
        fs,
        Some((0x5000, 1)),
        Some(ZsFunc::Less),
    );
    render.zls_ctrl = zls_word(ZlsControl {
        z_load_enable: load,
        z_store_enable: true,
        ..ZlsControl::default()
    });
    render.depth.base = DATA_VA + DEPTH;
    render.depth.stride = zls_stride_word();
    render.isp_zls_pixels = zls_pixels_word(64, 64);
    render.isp_bgobjdepth = 1.0f32.to_bits();
    render
}

/// A depth/stencil `stride` word: one layer, a page apart (as Mesa
/// encodes it).
/// A ZLS control as the command's `zls_ctrl` word.
fn zls_word(control: ZlsControl) -> u64 {
    u64::from_le_bytes(control.pack().unwrap())
}

fn zls_stride_word() -> u32 {
    u32::from_le_bytes(
        agx_hw::formats::ZlsLayerStride {
            unk_0: true,
            pages: 1,
        }
        .pack()
        .unwrap(),
    )
}

fn zls_pixels_word(width: u32, height: u32) -> u32 {
    u32::from_le_bytes(agx_hw::formats::ZlsPixels { width, height }.pack().unwrap())
}

/// The stored depth of pixel (x, y): a 64x64 32-bit plane is one
/// GPU-tiled page tile, pixels in Z order.
fn stored_depth(m: &Machine, x: usize, y: usize) -> f32 {
    let at = 4 * agx_hw::layout::morton(x as u32, y as u32);
    let bytes = m.peek(m.data, DEPTH + at, 4);
    f32::from_le_bytes(bytes.try_into().unwrap())
}

fn rgb(m: &Machine, x: usize, y: usize) -> [u8; 3] {
    let at = y * STRIDE as usize + 4 * x;
    let p = image(m, SIZE as usize);
    [p[at], p[at + 1], p[at + 2]]
}

#[test_log::test]
fn the_nearer_triangle_wins_in_either_draw_order_and_depth_is_stored() {
    let m = Machine::new(5000);
    let near = (
        [[4.0f32, 4.0], [44.0, 8.0], [12.0, 44.0]],
        0.25,
        [1.0, 0.0, 0.0],
    );
    let far = (
        [[20.0f32, 20.0], [60.0, 24.0], [28.0, 60.0]],
        0.75,
        [0.0, 1.0, 0.0],
    );
    // (both) at (26, 26); near only at (8, 8); far only at (40, 40);
    // neither at (60, 4).
    for order in [[near, far], [far, near]] {
        coloured(&m, &order);
        let render = depth_pass(&m, 2, false);
        assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
        assert_eq!(rgb(&m, 26, 26), [255, 0, 0], "the nearer triangle wins");
        assert_eq!(rgb(&m, 8, 8), [255, 0, 0]);
        assert_eq!(rgb(&m, 40, 40), [0, 255, 0]);
        assert_eq!(rgb(&m, 60, 4), [0, 0, 0]);
        assert_eq!(stored_depth(&m, 26, 26), 0.25);
        assert_eq!(stored_depth(&m, 40, 40), 0.75);
        assert_eq!(stored_depth(&m, 60, 4), 1.0, "the clear value");
    }
    // A later pass loads that depth: a triangle at 0.5 over everything
    // shows only where the stored depth is farther.
    let cover = (
        [[-64.0f32, -64.0], [192.0, 0.0], [0.0, 192.0]],
        0.5,
        [0.0, 0.0, 1.0],
    );
    coloured(&m, &[cover]);
    let render = depth_pass(&m, 1, true);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(rgb(&m, 26, 26), [0, 0, 0], "hidden behind the stored 0.25");
    assert_eq!(rgb(&m, 40, 40), [0, 0, 255], "in front of the stored 0.75");
    assert_eq!(rgb(&m, 60, 4), [0, 0, 255], "in front of the clear value");
    assert_eq!(stored_depth(&m, 26, 26), 0.25);
    assert_eq!(stored_depth(&m, 40, 40), 0.5);
}

/// Depth planes as Mesa's control words describe them: 16-bit unorm,
/// twiddled, compressed. The stored depth is 0.25 on the left half and
/// 1.0 on the right; a triangle at 0.5 over everything shows on the right
/// only. Compressed: tile (0, 0) is solid with 1.0 at its first element
/// (the rest of its body zero), so it shows there too, and the store
/// leaves every tile uncompressed with its body written out.
#[test_log::test]
fn depth_planes_load_and_store_in_the_format_tiling_and_compression_the_control_names() {
    use agx_hw::formats::{ZlsFormat, ZlsMetaStride, ZlsTiling};
    use agx_hw::layout::morton;
    const META: u64 = 0x5_0000;
    for (format, tiling, compressed) in [
        (ZlsFormat::Unorm16, ZlsTiling::Gpu, false),
        (ZlsFormat::F32, ZlsTiling::Twiddled, false),
        (ZlsFormat::F32, ZlsTiling::Gpu, true),
    ] {
        let m = Machine::new(5000);
        let bytes: u64 = if format == ZlsFormat::Unorm16 { 2 } else { 4 };
        let encode = |d: f32| {
            if bytes == 2 {
                ((d * 65535.0).round() as u16).to_le_bytes().to_vec()
            } else {
                d.to_le_bytes().to_vec()
            }
        };
        // A 64x64 plane of either element size is one Z-order tile.
        let at = |x: u32, y: u32| DEPTH + bytes * morton(x, y);
        let solid_tile = |x: u32, y: u32| compressed && x < 16 && y < 16;
        for y in 0..64 {
            for x in 0..64 {
                let depth = match (x, y) {
                    (0, 0) if compressed => 1.0,
                    _ if solid_tile(x, y) => 0.0,
                    _ if x < 32 => 0.25,
                    _ => 1.0,
                };
                m.poke(m.data, at(x, y), &encode(depth));
            }
        }
        if compressed {
            m.poke(m.data, META, &0x0303_0303_0303_0303u64.to_le_bytes());
        }
        let cover = (
            [[-64.0f32, -64.0], [192.0, 0.0], [0.0, 192.0]],
            0.5,
            [0.0, 0.0, 1.0],
        );
        coloured(&m, &[cover]);
        let mut render = depth_pass(&m, 1, true);
        render.zls_ctrl = zls_word(ZlsControl {
            z_load_enable: true,
            z_store_enable: true,
            z_format: format,
            z_load_tiling: tiling,
            z_store_tiling: tiling,
            z_load_compress: compressed,
            z_store_compress: compressed,
            ..ZlsControl::default()
        });
        if compressed {
            render.depth.comp_base = DATA_VA + META;
            render.depth.comp_stride =
                u32::from_le_bytes(ZlsMetaStride { cachelines: 1 }.pack().unwrap());
        }
        assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
        let case = format!("{format:?} {tiling:?} compressed {compressed}");
        for (x, y) in [(0, 0), (8, 8), (20, 40), (40, 8), (63, 63)] {
            let shows = x >= 32 || solid_tile(x, y);
            let (colour, depth) = if shows {
                ([0, 0, 255], 0.5)
            } else {
                ([0, 0, 0], 0.25)
            };
            assert_eq!(
                rgb(&m, x as usize, y as usize),
                colour,
                "{case}: ({x}, {y})"
            );
            assert_eq!(
                m.peek(m.data, at(x, y), bytes as usize),
                encode(depth),
                "{case}: depth at ({x}, {y})"
            );
        }
        if compressed {
            // 4 x 4 tiles, one word each.
            let words = m.peek(m.data, META, 16 * 8);
            assert!(
                words.chunks(8).all(|w| w == [0x7f; 8]),
                "every tile stored uncompressed: {words:x?}"
            );
        }
    }
    // A metadata word in no known mode (stale memory: Mesa does not
    // initialise a fresh compressed resource's metadata, then loads it
    // before drawing over it) is read as uncompressed, as an all-zero
    // word is: the body's depths are loaded, 1.0 but 0.0 at (0, 0), so
    // the triangle at 0.5 shows everywhere else (a solid tile would have
    // given the whole tile 0.0).
    let m = Machine::new(5000);
    m.poke(m.data, META, &0x8080_8080_8080_8080u64.to_le_bytes());
    for y in 0..64 {
        for x in 0..64 {
            let depth = if (x, y) == (0, 0) { 0.0f32 } else { 1.0 };
            m.poke(m.data, DEPTH + 4 * morton(x, y), &depth.to_le_bytes());
        }
    }
    coloured(
        &m,
        &[(
            [[-64.0f32, -64.0], [192.0, 0.0], [0.0, 192.0]],
            0.5,
            [0.0, 0.0, 1.0],
        )],
    );
    let mut render = depth_pass(&m, 1, true);
    render.zls_ctrl = zls_word(ZlsControl {
        z_load_enable: true,
        z_load_compress: true,
        ..ZlsControl::default()
    });
    render.depth.comp_base = DATA_VA + META;
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(rgb(&m, 0, 0), [0, 0, 0], "behind the loaded 0.0");
    assert_eq!(rgb(&m, 8, 8), [0, 0, 255], "in front of the loaded 1.0");
}

/// Reloads the render target into the tilebuffer after a partial render:
/// pixel (x, y) from the linear RGBA8 image at u0_u1 (u2: pixels per
/// row).
const RELOAD: &str = "
    get_sr r10, sr80
    get_sr r11, sr81
    imadd r12, r11, u2, r10
    device_load 0, u8norm, xyzw, r2_r3_r4_r5, u0_u1, r12, unsigned, lsl 2
    wait 0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

const BIG_VERTICES: u64 = 0x20_0000;
const BIG_INDICES: u64 = 0x30_0000;

/// Three layers of 8192 one-pixel triangles over the 64x64 target, at
/// depths 0.5 (red), 0.25 (green) and 0.75 (blue), as one indexed draw:
/// more than the queue's initial parameter buffer holds.
fn layered_scene(m: &Machine) -> u32 {
    let mut vertices = Vec::new();
    let mut indices: Vec<u16> = Vec::new();
    let layers = [
        (0.5f32, [1.0f32, 0.0, 0.0]),
        (0.25, [0.0, 1.0, 0.0]),
        (0.75, [0.0, 0.0, 1.0]),
    ];
    for (layer, (z, colour)) in layers.iter().enumerate() {
        let base = (layer * 65 * 65) as u16;
        for y in 0..65 {
            for x in 0..65 {
                let p = clip(&[[x as f32, y as f32]]);
                vertices.extend([p[0], p[1], z.to_bits(), 1.0f32.to_bits()]);
                vertices.extend(colour.map(f32::to_bits));
                vertices.push(0);
            }
        }
        for y in 0..64u16 {
            for x in 0..64u16 {
                let v = |dx: u16, dy: u16| base + (y + dy) * 65 + x + dx;
                indices.extend([v(0, 0), v(1, 0), v(0, 1), v(1, 0), v(1, 1), v(0, 1)]);
            }
        }
    }
    m.poke_u32s(BIG_VERTICES, &vertices);
    m.poke(m.data, BIG_INDICES, indices.as_bytes());
    indices.len() as u32
}

/// The layered scene as a depth-tested pass with partial-render programs;
/// `zls` loads and stores depth when set.
fn layered_pass(m: &Machine, zls: bool, partial_bg: bool) -> CmdRender {
    let count = layered_scene(m);
    let mut render = depth_pass(m, 0, zls);
    // Depth starts from the buffer (1.0 everywhere) when it is loaded.
    m.poke(m.data, DEPTH, &1.0f32.to_le_bytes().repeat(4 * 32 * 32));
    if !zls {
        render.zls_ctrl = 0;
    }
    // Vertex shader uniforms: the big vertex buffer.
    colour_vs(m, BIG_VERTICES);
    // The draw: indexed, 16-bit indices.
    let stream = m.peek(m.data, STREAM, 64);
    let draw_at = block_at(&stream, VdmBlockType::IndexList);
    let mut vdm = stream[..draw_at].to_vec();
    for block in [
        VdmBlock::IndexList(IndexListBlock {
            header: IndexList {
                primitive: Primitive::Triangles,
                index_size: agx_hw::formats::IndexSize::U16,
                index_buffer_hi: ((DATA_VA + BIG_INDICES) >> 32) as u32,
                ..IndexList::default()
            },
            buffer_lo: Some(IndexListBufferLo {
                buffer_lo: (DATA_VA + BIG_INDICES) as u32,
            }),
            count: Some(IndexListCount { count }),
            instances: Some(IndexListInstances { count: 1 }),
            start: Some(IndexListStart { start: 0 }),
            ..IndexListBlock::default()
        }),
        VdmBlock::StreamTerminate(VdmStreamTerminate::default()),
    ] {
        block.build(&mut vdm).unwrap();
    }
    m.poke(m.data, STREAM, &vdm);
    let mut reload = pair(DATA_VA + IMAGE);
    reload.push(STRIDE / 4);
    let reload = m.program(RELOAD, 0x6000, 0x140, &reload, UNIFORMS + 0x400, 0, None);
    render.partial_bg = BgEot {
        usc: if partial_bg { reload as u32 | 4 } else { 0 },
        rsrc_spec: 0,
    };
    render.partial_eot = render.eot;
    render
}

fn depth_buffer(m: &Machine) -> Vec<u8> {
    m.peek(m.data, DEPTH, 4 * 64 * 64)
}

#[test_log::test]
fn a_tiny_and_a_grown_parameter_buffer_render_the_same_image_and_depth() {
    let m = Machine::with_config(SystemConfig {
        tvb_policy: agx_kmd::tvb::GrowthPolicy::Demand,
        ..machine_config(5000)
    });
    let queue = m.file.queue(m.queue).unwrap();
    assert_eq!(queue.tvb_stats().blocks, 8);
    let render = layered_pass(&m, true, true);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let (tiny_image, tiny_depth) = (image(&m, SIZE as usize), depth_buffer(&m));
    // The same pass again: the kmd grew the buffer to what the first one
    // wanted, so it renders in one segment.
    let render = layered_pass(&m, true, true);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let (grown_image, grown_depth) = (image(&m, SIZE as usize), depth_buffer(&m));
    let stats = queue.tvb_stats();
    assert!(
        stats.partial_renders > 0,
        "the tiny buffer overflowed: {stats:?}"
    );
    assert!(stats.blocks > 8, "and grew: {stats:?}");
    let partials_after_first = stats.partial_renders;
    // Another pass at the grown size: no new partial render.
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(queue.tvb_stats().partial_renders, partials_after_first);
    assert!(grown_image == tiny_image, "bit-identical colour");
    let green = (0..SIZE as usize * SIZE as usize)
        .filter(|i| {
            let at = (i / SIZE as usize) * STRIDE as usize + 4 * (i % SIZE as usize);
            tiny_image[at..at + 3] == [0, 255, 0]
        })
        .count();
    assert_eq!(green, 4096, "the nearest layer everywhere");
    assert!(grown_depth == tiny_depth, "bit-identical depth");
    m.poke(m.data, IMAGE, &grown_image);
    // And it is the right picture: the nearest layer (green) everywhere.
    for (x, y) in [(0, 0), (31, 31), (32, 5), (63, 63)] {
        assert_eq!(rgb(&m, x, y), [0, 255, 0], "pixel ({x}, {y})");
    }
    assert_eq!(stored_depth(&m, 10, 50), 0.25);
}

#[test_log::test]
fn a_resumed_segment_reloads_the_depth_its_partial_render_stored() {
    // Mesa's GL driver clears depth and stores it, with no load: after a
    // partial render the next segment must start from what was stored,
    // not from the clear value.
    let m = Machine::with_config(machine_config(5000));
    let mut render = layered_pass(&m, true, true);
    render.zls_ctrl = zls_word(ZlsControl {
        z_store_enable: true,
        ..ZlsControl::default()
    });
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert!(m.file.queue(m.queue).unwrap().tvb_stats().partial_renders > 0);
    for (x, y) in [(0, 0), (31, 31), (32, 5), (63, 63)] {
        assert_eq!(rgb(&m, x, y), [0, 255, 0], "pixel ({x}, {y})");
    }
    assert_eq!(stored_depth(&m, 10, 50), 0.25);
}

#[test_log::test]
fn partial_renders_without_depth_store_and_reload_lose_depth() {
    let m = Machine::with_config(machine_config(5000));
    let render = layered_pass(&m, false, true);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let queue = m.file.queue(m.queue).unwrap();
    let pixels = image(&m, SIZE as usize);
    let blue = (0..SIZE as usize * SIZE as usize)
        .filter(|i| {
            let at = (i / SIZE as usize) * STRIDE as usize + 4 * (i % SIZE as usize);
            pixels[at..at + 3] == [0, 0, 255]
        })
        .count();
    // The far layer shows wherever it was binned after a partial render
    // reset depth to the clear value.
    assert!(blue > 0, "artefacts: {blue} far pixels in front");
    assert!(m.submit(CmdType::Render, render.as_bytes()).is_none());
    assert!(queue.tvb_stats().partial_renders > 0);
}

#[test_log::test]
fn a_partial_render_without_partial_bg_faults_at_the_null_address() {
    let m = Machine::with_config(machine_config(5000));
    let render = layered_pass(&m, true, false);
    assert_eq!(
        m.submit(CmdType::Render, render.as_bytes()),
        Some(Errno::EIO)
    );
    let (address, unit, _) = m.system.device().scheduler().stats().last_fault.unwrap();
    assert_eq!(
        (address, unit),
        (0, agx_fwif::messages::FaultUnit::Usc as u32)
    );
}

/// Fragment shader: sample the texture in ts0 with ss0 at the
/// interpolated coordinates cf0-cf1.
const TEXTURED_FS: &str = "
    iter r2_r3, cf0, center, 0, 0, 0, 0, 0
    texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r4_r5_r6_r7, None, ts0, ss0, tex_2d, r2_r3, auto_lod, 0, 0, r0
    wait 0
    st_tile r4_r5_r6_r7, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

/// The texel of the quad tests' texture at (x, y).
fn quad_texel(x: u32, y: u32) -> [u8; 4] {
    [(x * 4) as u8, (y * 4) as u8, ((x + y) * 2) as u8, 255]
}

/// Pokes the quad texture (`quad_texel`), `size` pixels square and
/// GPU-tiled, at data offset 0x10_0000.
fn poke_tiled_quad(m: &Machine, size: u32) {
    let layout = agx_hw::layout::ImageLayout::gpu_tiled(size, size, 1, 4, false).unwrap();
    let mut texels = vec![0u8; layout.layer_bytes() as usize];
    for y in 0..size {
        for x in 0..size {
            let at = layout.offset(0, x, y, 0).unwrap() as usize;
            texels[at..at + 4].copy_from_slice(&quad_texel(x, y));
        }
    }
    m.poke(m.data, 0x10_0000, &texels);
}

/// Draws a quad over the whole 64x64 target textured with a `size` x
/// `size` GPU-tiled texture (texels `quad_texel`) through `filter`, with
/// texture coordinates from (0, 0) to (1, 1); returns the image.
fn textured_quad(size: u32, filter: agx_hw::formats::Filter) -> Vec<u8> {
    use agx_hw::formats::{MipFilter, Sampler, Texture, Wrap};
    let m = Machine::new(5000);
    poke_tiled_quad(&m, size);
    let descriptor = Texture {
        layout: Layout::Gpu,
        channels: Channels::R8G8B8A8,
        data_type: TextureType::Unorm,
        width: size,
        height: size,
        address: DATA_VA + 0x10_0000,
        ..Texture::default()
    };
    let sampler = Sampler {
        magnify: filter,
        minify: filter,
        mip_filter: MipFilter::None,
        wrap_s: Wrap::ClampToEdge,
        wrap_t: Wrap::ClampToEdge,
        ..Sampler::default()
    };
    textured_quad_with(&m, &descriptor, &sampler).unwrap()
}

/// Draws a quad over the whole 64x64 target sampling `descriptor` through
/// `sampler`, texture coordinates (0, 0) to (1, 1); returns the image, or
/// the errno the submission failed with.
fn textured_quad_with(
    m: &Machine,
    descriptor: &agx_hw::formats::Texture,
    sampler: &agx_hw::formats::Sampler,
) -> Result<Vec<u8>, Errno> {
    let uv = [[0.0f32, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]];
    let (vs, fs) = textured_quad_programs(m, (descriptor, sampler), uv, TEXTURED_FS);
    let render = draw_pass(m, 6, vs, 7, fs, Some((0x5000, 1)));
    match m.submit(CmdType::Render, render.as_bytes()) {
        None => Ok(image(m, SIZE as usize)),
        Some(errno) => Err(errno),
    }
}

/// Sets up a quad over the whole 64x64 target with texture coordinates
/// `uv` at its corners (top left, top right, bottom left, bottom right),
/// `descriptor` and `sampler` in ts0 and ss0, and fragment shader `fs`
/// reading the coordinates from cf0-cf1: the vertex and fragment
/// programs.
fn textured_quad_programs(
    m: &Machine,
    (descriptor, sampler): (&agx_hw::formats::Texture, &agx_hw::formats::Sampler),
    uv: [[f32; 2]; 4],
    fs: &str,
) -> (u64, u64) {
    m.poke(m.data, 0x8_2000, &descriptor.pack().unwrap());
    m.poke(m.data, 0x8_2100, &sampler.pack().unwrap());
    let corners = [[0.0f32, 0.0], [64.0, 0.0], [0.0, 64.0], [64.0, 64.0]];
    let mut vertices = Vec::new();
    for v in [0, 1, 2, 1, 3, 2] {
        vertices.extend_from_slice(&clip(&[corners[v]]));
        vertices.extend([uv[v][0].to_bits(), uv[v][1].to_bits(), 0, 0]);
    }
    m.poke_u32s(VERTICES, &vertices);
    let vs = colour_vs(m, VERTICES);
    let fs = m.program_with_samplers(
        fs,
        0x4000,
        0x100,
        &[0],
        UNIFORMS + 0x300,
        0,
        Some((1, DATA_VA + 0x8_2000)),
        Some((1, DATA_VA + 0x8_2100)),
    );
    cf_table(m, 2, agx_hw::formats::ShadeModel::Linear);
    (vs, fs)
}

/// TEXTURED_FS, slow in the first row of tiles: there each pixel first
/// runs a long chain of multiplies, so that, run side by side, the second
/// row's tiles have stored before the first row's sample (with tiles in
/// order the first row samples first).
fn feedback_fs() -> String {
    let mut source = String::from(
        "
    get_sr r10, sr81
    mov_imm r12, 0x3f800000
    if_icmp r0l, ult, r10, 32, 1",
    );
    for _ in 0..600 {
        source.push_str("\n    fmul32 r12, r12, r12");
    }
    source.push_str(
        "
    pop_exec r0l, 1
    iter r2_r3, cf0, center, 0, 0, 0, 0, 0
    texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r4_r5_r6_r7, None, ts0, ss0, tex_2d, r2_r3, auto_lod, 0, 0, r0
    wait 0
    st_tile r4_r5_r6_r7, u8norm, 0, xyzw, 0, 255, r0, 0
    stop",
    );
    source
}

/// What [`feedback_pass`] samples: the render target itself (RGBA8
/// texels `quad_texel`), or the depth plane the pass stores (32-bit float
/// depths `(x + 64 y) / 4096`).
#[derive(Clone, Copy, PartialEq)]
enum Fed {
    Colour,
    Depth,
}

/// A quad over the whole 64x64 target whose fragment shader samples an
/// image the pass itself stores, mirrored (pixel (x, y) reads texel
/// (63 - x, 63 - y)) and writes what it read as its colour: a feedback
/// loop, in which what a tile reads depends on whether the mirrored tile
/// has stored yet. Returns the colour image and the depth plane.
fn feedback_pass(gpu_threads: usize, fed: Fed) -> (Vec<u8>, Vec<u8>) {
    use agx_hw::formats::{MipFilter, Sampler, Texture, Wrap};
    let m = Machine::with_threads(5000, gpu_threads);
    let mut colour = vec![0u8; 64 * STRIDE as usize];
    let mut depth = vec![0u8; 4 * 64 * 64];
    for y in 0..64u32 {
        for x in 0..64u32 {
            let at = (y * STRIDE + 4 * x) as usize;
            colour[at..at + 4].copy_from_slice(&quad_texel(x, y));
            let at = 4 * agx_hw::layout::morton(x, y) as usize;
            let value = (x + 64 * y) as f32 / 4096.0;
            depth[at..at + 4].copy_from_slice(&value.to_le_bytes());
        }
    }
    m.poke(m.data, IMAGE, &colour);
    m.poke(m.data, DEPTH, &depth);
    let descriptor = match fed {
        Fed::Colour => Texture {
            layout: Layout::Linear,
            channels: Channels::R8G8B8A8,
            data_type: TextureType::Unorm,
            stride: STRIDE,
            address: DATA_VA + IMAGE,
            ..Texture::default()
        },
        Fed::Depth => Texture {
            layout: Layout::Gpu,
            channels: Channels::R32,
            data_type: TextureType::Float,
            address: DATA_VA + DEPTH,
            ..Texture::default()
        },
    };
    let descriptor = Texture {
        width: 64,
        height: 64,
        ..descriptor
    };
    let sampler = Sampler {
        magnify: agx_hw::formats::Filter::Nearest,
        minify: agx_hw::formats::Filter::Nearest,
        mip_filter: MipFilter::None,
        wrap_s: Wrap::ClampToEdge,
        wrap_t: Wrap::ClampToEdge,
        ..Sampler::default()
    };
    let mirrored = [[1.0f32, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]];
    let (vs, fs) = textured_quad_programs(&m, (&descriptor, &sampler), mirrored, &feedback_fs());
    let mut render =
        draw_pass_with_depth(&m, 6, vs, 7, fs, Some((0x5000, 1)), Some(ZsFunc::Always));
    render.zls_ctrl = zls_word(ZlsControl {
        z_store_enable: true,
        ..ZlsControl::default()
    });
    render.depth.base = DATA_VA + DEPTH;
    render.depth.stride = zls_stride_word();
    render.isp_zls_pixels = zls_pixels_word(64, 64);
    render.isp_bgobjdepth = 1.0f32.to_bits();
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    (image(&m, 64), depth_buffer(&m))
}

/// A pass that samples an image it stores (its render target, or its
/// depth plane) runs its tiles in order whatever the thread count (Mesa's
/// GL driver makes such a pass when a blit within a framebuffer joins the
/// pass that goes on drawing into it): the first row of tiles reads the
/// image as it was, the second what the first row stored. Without the
/// ordering the first row, slowed down, reads what the second stored.
#[test_log::test]
fn a_pass_that_samples_what_it_stores_runs_its_tiles_in_order() {
    for fed in [Fed::Colour, Fed::Depth] {
        let (first, depth) = feedback_pass(1, fed);
        let stored = |x: u32, y: u32| {
            let at = 4 * agx_hw::layout::morton(x, y) as usize;
            f32::from_le_bytes(depth[at..at + 4].try_into().unwrap())
        };
        let unorm = |value: f32| (value * 255.0).round_ties_even() as u8;
        for y in 0..64u32 {
            for x in 0..64u32 {
                let (mx, my) = (63 - x, 63 - y);
                let want = match (fed, y < 32) {
                    (Fed::Colour, true) => quad_texel(mx, my),
                    (Fed::Colour, false) => quad_texel(x, y),
                    (Fed::Depth, true) => [unorm((mx + 64 * my) as f32 / 4096.0), 0, 0, 255],
                    (Fed::Depth, false) => [unorm(stored(mx, my)), 0, 0, 255],
                };
                let at = (y * STRIDE + 4 * x) as usize;
                assert_eq!(first[at..at + 4], want, "pixel ({x}, {y}), one thread");
            }
        }
        for gpu_threads in [4, 2, 3, 4] {
            let (image, _) = feedback_pass(gpu_threads, fed);
            assert!(image == first, "{gpu_threads} GPU threads differ from one");
        }
    }
}

#[test_log::test]
fn a_textured_quad_shows_every_texel_once() {
    let pixels = textured_quad(64, agx_hw::formats::Filter::Nearest);
    for y in 0..64u32 {
        for x in 0..64u32 {
            let at = y as usize * STRIDE as usize + 4 * x as usize;
            assert_eq!(pixels[at..at + 4], quad_texel(x, y), "pixel ({x}, {y})");
        }
    }
}

#[test_log::test]
fn a_magnified_quad_blends_neighbouring_texels_bilinearly() {
    // A 32 x 32 texture over 64 x 64 pixels: pixel centres fall a quarter
    // and three quarters between texel centres.
    let pixels = textured_quad(32, agx_hw::formats::Filter::Linear);
    let texel = |x: i64, y: i64| quad_texel(x.clamp(0, 31) as u32, y.clamp(0, 31) as u32);
    for y in 0..64 {
        for x in 0..64 {
            let (u, v) = ((x as f64 + 0.5) / 2.0 - 0.5, (y as f64 + 0.5) / 2.0 - 0.5);
            let (x0, y0) = (u.floor() as i64, v.floor() as i64);
            let (fx, fy) = (u - u.floor(), v - v.floor());
            let at = y * STRIDE as usize + 4 * x;
            for c in 0..4 {
                let t = |dx, dy| f64::from(texel(x0 + dx, y0 + dy)[c]);
                let top = t(0, 0) + (t(1, 0) - t(0, 0)) * fx;
                let bottom = t(0, 1) + (t(1, 1) - t(0, 1)) * fx;
                let want = (top + (bottom - top) * fy).round() as i32;
                let got = i32::from(pixels[at + c]);
                assert!(
                    (got - want).abs() <= 1,
                    "pixel ({x}, {y}) channel {c}: {got} vs {want}"
                );
            }
        }
    }
}

#[test_log::test]
fn a_clear_into_a_tiled_target_lands_where_the_layout_says() {
    use agx_hw::layout::ImageLayout;
    for (kind, layout) in [
        (
            Layout::Gpu,
            ImageLayout::gpu_tiled(100, 70, 1, 4, false).unwrap(),
        ),
        (Layout::Twiddled, ImageLayout::twiddled(100, 70, 1, 4)),
    ] {
        let m = Machine::new(5000);
        let render = clear_pass(&m, [0.25, 0.5, 0.75, 1.0], 100, 70);
        let tiled = Pbe {
            dimension: TextureDimension::D2,
            layout: kind,
            channels: Channels::R8G8B8A8,
            data_type: TextureType::Unorm,
            width: 100,
            height: 70,
            buffer: DATA_VA + IMAGE,
            ..Pbe::default()
        };
        m.poke(m.data, PBE, &tiled.pack().unwrap());
        assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
        let bytes = m.peek(m.data, IMAGE, layout.layer_bytes() as usize);
        for y in 0..70 {
            for x in 0..100 {
                let at = layout.offset(0, x, y, 0).unwrap() as usize;
                assert_eq!(
                    bytes[at..at + 4],
                    [64, 128, 191, 255],
                    "{kind:?}: pixel ({x}, {y})"
                );
            }
        }
    }
}

/// A 64x64 compressed RGBA8 target, fast-cleared (every compression tile
/// solid, its colour at the tile's start, as Mesa's clear kernel leaves
/// it), then rendered over in a 40x40 area: the tiles the render covers
/// become uncompressed with the new colour; those of column and row 2,
/// covered only in part, keep the old colour in the pixels outside the
/// render area; the untouched tiles stay solid.
#[test_log::test]
fn a_render_into_a_compressed_target_marks_the_tiles_it_writes_uncompressed() {
    use agx_hw::layout::{morton, ImageLayout};
    const META: u64 = 0x5_0000;
    let m = Machine::new(5000);
    let layout = ImageLayout::gpu_tiled(64, 64, 1, 4, false).unwrap();
    let old = [10u8, 20, 30, 40];
    // One 64x64 page tile holds the image: a 16x16 tile starts at the
    // Z-order index of its corner.
    let tile_start = |tx: u32, ty: u32| morton(tx * 16, ty * 16) * 4;
    for ty in 0..4 {
        for tx in 0..4 {
            m.poke(m.data, IMAGE + tile_start(tx, ty), &old.repeat(8));
        }
    }
    // 4x4 tiles: the word of (tx, ty) is its Z-order index.
    let solid = 0x0303_0303_0303_0303u64;
    let word_at = |tx: u32, ty: u32| META + 8 * morton(tx, ty);
    for ty in 0..4 {
        for tx in 0..4 {
            m.poke(m.data, word_at(tx, ty), &solid.to_le_bytes());
        }
    }
    let render = clear_pass(&m, [0.25, 0.5, 0.75, 1.0], 40, 40);
    let compressed = Pbe {
        dimension: TextureDimension::D2,
        layout: Layout::Gpu,
        channels: Channels::R8G8B8A8,
        data_type: TextureType::Unorm,
        width: 64,
        height: 64,
        buffer: DATA_VA + IMAGE,
        compressed_1: true,
        extended: true,
        acceleration_buffer: DATA_VA + META,
        ..Pbe::default()
    };
    m.poke(m.data, PBE, &compressed.pack().unwrap());
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let body = m.peek(m.data, IMAGE, layout.layer_bytes() as usize);
    let pixel = |x: u32, y: u32| {
        let at = layout.offset(0, x, y, 0).unwrap() as usize;
        [body[at], body[at + 1], body[at + 2], body[at + 3]]
    };
    let word = |tx, ty| u64::from_le_bytes(m.peek(m.data, word_at(tx, ty), 8).try_into().unwrap());
    for ty in 0..4u32 {
        for tx in 0..4u32 {
            // Tiles 0-2 meet the 40x40 area; the last row and column do
            // not, and stay solid with only their first pixels written.
            let touched = tx < 3 && ty < 3;
            let want = if touched {
                0x7f7f_7f7f_7f7f_7f7f
            } else {
                solid
            };
            assert_eq!(word(tx, ty), want, "tile ({tx}, {ty})");
            if !touched {
                assert_eq!(pixel(tx * 16, ty * 16), old, "tile ({tx}, {ty})'s colour");
                assert_eq!(
                    pixel(tx * 16 + 15, ty * 16 + 15),
                    [0; 4],
                    "tile ({tx}, {ty})"
                );
            }
        }
    }
    for y in 0..48 {
        for x in 0..48 {
            let want = if x < 40 && y < 40 {
                [64, 128, 191, 255]
            } else {
                old
            };
            assert_eq!(pixel(x, y), want, "pixel ({x}, {y})");
        }
    }
}

/// A compressed texture's texels go through the metadata: a solid tile
/// reads the colour at its start, an uncompressed tile its body, and a
/// tile whose word is zero or in no known mode (memory nobody
/// initialised: Mesa never does) its body too, logged.
#[test_log::test]
fn a_compressed_texture_reads_solid_tiles_from_their_first_texel() {
    use agx_hw::formats::{MipFilter, Sampler, Texture, Wrap};
    use agx_hw::layout::morton;
    const META: u64 = 0x20_0000;
    let size = 32;
    for unknown_mode in [false, true] {
        let m = Machine::new(5000);
        poke_tiled_quad(&m, size);
        // Tiles (0, 0) and (1, 1) solid, (1, 0) uncompressed, (0, 1)
        // never written (zero: read as uncompressed) or in an unknown
        // mode.
        let words = [
            (0u32, 0u32, 0x0303_0303_0303_0303u64),
            (1, 0, 0x7f7f_7f7f_7f7f_7f7f),
            (1, 1, 0x0303_0303_0303_0303),
            (0, 1, if unknown_mode { 0x4242 } else { 0 }),
        ];
        for (tx, ty, word) in words {
            m.poke(m.data, META + 8 * morton(tx, ty), &word.to_le_bytes());
        }
        let descriptor = Texture {
            layout: Layout::Gpu,
            channels: Channels::R8G8B8A8,
            data_type: TextureType::Unorm,
            width: size,
            height: size,
            address: DATA_VA + 0x10_0000,
            compressed_1: true,
            extended: true,
            acceleration_buffer: DATA_VA + META,
            ..Texture::default()
        };
        let sampler = Sampler {
            magnify: agx_hw::formats::Filter::Nearest,
            minify: agx_hw::formats::Filter::Nearest,
            mip_filter: MipFilter::None,
            wrap_s: Wrap::ClampToEdge,
            wrap_t: Wrap::ClampToEdge,
            ..Sampler::default()
        };
        let image = textured_quad_with(&m, &descriptor, &sampler).unwrap();
        // The 64x64 target samples the 32x32 texture at 2x: target pixel
        // (x, y) shows texel (x / 2, y / 2).
        for y in 0..64u32 {
            for x in 0..64u32 {
                let (u, v) = (x / 2, y / 2);
                let want = match (u / 16, v / 16) {
                    (0, 0) => quad_texel(0, 0),
                    (1, 1) => quad_texel(16, 16),
                    _ => quad_texel(u, v),
                };
                let at = (y * STRIDE + 4 * x) as usize;
                assert_eq!(image[at..at + 4], want, "pixel ({x}, {y})");
            }
        }
    }
}

/// Vertex shader: POSITION_VS with each instance moved right by u4 (clip
/// units) per instance index (r6).
const INSTANCED_VS: &str = "
    device_load 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r5, unsigned, lsl 2
    wait 0
    convert u32_to_f, r15, r6, rte
    fmadd32 r8, r15, u4, r8
    st_var 1, r8, 0
    st_var 1, r9, 1
    st_var 1, r10, 2
    st_var 1, r11, 3
    stop";

#[test_log::test]
fn instances_links_culling_and_near_clipping() {
    use agx_hw::formats::VdmStreamLink;
    let m = Machine::new(5000);
    // Two triangles: A counter-clockwise on screen (front), B clockwise
    // (back), both 8 px wide; drawn as 3 instances 16 px apart.
    let a = [[2.0f32, 2.0], [2.0, 12.0], [10.0, 2.0]];
    let b = [[2.0f32, 20.0], [10.0, 20.0], [2.0, 30.0]];
    let mut window = a.to_vec();
    window.extend_from_slice(&b);
    m.poke_u32s(VERTICES, &clip(&window));
    let mut vs_uniforms = pair(DATA_VA + VERTICES);
    vs_uniforms.extend([0, 0, (16.0f32 / 32.0).to_bits()]);
    let render = count_pass(&m, INSTANCED_VS, &vs_uniforms, 6);
    // Counter-clockwise (as seen in the image) is front; cull back faces.
    // (Where the Cull record is comes from the PPP header.)
    let cull = agx_hw::formats::Cull {
        cull_back: true,
        front_face_ccw: true,
        ..agx_hw::formats::Cull::default()
    };
    let header = PppHeader::decode_from(&m.peek(m.data, PPP, 4)).unwrap();
    let cull_at = PppRecords::layout(&header)
        .unwrap()
        .into_iter()
        .find(|slot| slot.member == "cull")
        .unwrap()
        .offset_bytes;
    m.poke(m.data, PPP + cull_at as u64, &cull.pack().unwrap());
    // Rewrite the VDM stream: the state, then a link to a second segment
    // holding an instanced draw and the terminate.
    let stream = m.peek(m.data, STREAM, 64);
    let second = STREAM + 0x800;
    let mut vdm = stream[..block_at(&stream, VdmBlockType::IndexList)].to_vec();
    VdmBlock::StreamLink(VdmStreamLink {
        target: DATA_VA + second,
        with_return: false,
    })
    .build(&mut vdm)
    .unwrap();
    m.poke(m.data, STREAM, &vdm);
    let mut draw = Vec::new();
    for block in [
        VdmBlock::IndexList(IndexListBlock {
            header: IndexList {
                primitive: Primitive::Triangles,
                ..IndexList::default()
            },
            count: Some(IndexListCount { count: 6 }),
            instances: Some(IndexListInstances { count: 3 }),
            start: Some(IndexListStart { start: 0 }),
            ..IndexListBlock::default()
        }),
        VdmBlock::StreamTerminate(VdmStreamTerminate::default()),
    ] {
        block.build(&mut draw).unwrap();
    }
    m.poke(m.data, second, &draw);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let got = counts(&m);
    let t = |tri: [[f32; 2]; 3], dx: f32| tri.map(|[x, y]| [f64::from(x + dx), f64::from(y)]);
    for y in 0..SIZE as usize {
        for x in 0..SIZE as usize {
            let (px, py) = (x as f64 + 0.5, y as f64 + 0.5);
            let front = (0..3).any(|i| covers(t(a, 16.0 * i as f32), px, py));
            assert_eq!(
                got[y * SIZE as usize + x],
                u8::from(front),
                "pixel ({x}, {y})"
            );
        }
    }
    // Near clipping: a triangle whose bottom vertex is behind the near
    // plane (z < 0) shows only its part with z >= 0.
    let m = Machine::new(5000);
    let corners = [[8.0f32, 4.0], [56.0, 4.0], [32.0, 60.0]];
    let z = [0.75f32, 0.75, -0.75];
    let mut vertices = clip(&corners);
    for v in 0..3 {
        vertices[4 * v + 2] = z[v].to_bits();
    }
    m.poke_u32s(VERTICES, &vertices);
    let render = count_pass(&m, POSITION_VS, &pair(DATA_VA + VERTICES), 3);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let got = counts(&m);
    let tri = corners.map(|[x, y]| [f64::from(x), f64::from(y)]);
    let mut shown = 0;
    for y in 0..SIZE as usize {
        for x in 0..SIZE as usize {
            let (px, py) = (x as f64 + 0.5, y as f64 + 0.5);
            // z falls linearly from 0.75 at y = 4 to -0.75 at y = 60: the
            // near plane crosses at y = 32 (between pixel centres).
            let want = covers(tri, px, py) && py < 32.0;
            shown += usize::from(want);
            assert_eq!(
                got[y * SIZE as usize + x],
                u8::from(want),
                "pixel ({x}, {y})"
            );
        }
    }
    assert!(shown > 500, "{shown}");
}

#[test_log::test]
fn results_do_not_depend_on_how_many_host_threads_render_tiles() {
    let mut outputs = Vec::new();
    for gpu_threads in [1, 2, 3] {
        let m = Machine::with_config(SystemConfig {
            gpu_threads,
            ..machine_config(5000)
        });
        // With partial renders (the initial buffer) and without ZLS, so
        // that the result depends on the order of everything.
        let render = layered_pass(&m, false, true);
        assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
        outputs.push((image(&m, SIZE as usize), depth_buffer(&m)));
    }
    assert!(outputs[0] == outputs[1], "1 and 2 threads");
    assert!(outputs[0] == outputs[2], "1 and 3 threads");
}

/// COLOUR_VS whose vertices u4 and u5 (ids) also read an unmapped
/// address (u6_u7 plus 32 bytes an id) after their loads.
fn faulting_vs() -> String {
    let read_if = |id: &str| {
        format!(
            "    if_icmp r0l, ueq, r5, {id}, 1
    device_load 0, i32, x, r20, u6_u7, r5, unsigned, lsl 3
    wait 0
    pop_exec r0l, 1
"
        )
    };
    let checks = format!("    wait 0\n{}{}", read_if("u4"), read_if("u5"));
    COLOUR_VS.replacen("    wait 0\n", &checks, 1)
}

/// A draw's SIMD-groups of vertices shared out among threads fault as
/// they do on one: the layered scene's first batch of vertices (over a
/// thousand, enough for three threads) with two vertices that fault, one
/// in the first thread's run of groups and one in the last's; the fault
/// is the first's, whatever the threads.
#[test_log::test]
fn vertex_groups_shared_among_threads_fault_at_the_first_faulting_vertex() {
    for gpu_threads in [1, 2, 3] {
        faulting_layered_draw(gpu_threads, false, [100, 2000]);
    }
}

/// The layered scene's pass (with partial-render programs when
/// `partial_bg`) on `gpu_threads` threads, its vertex shader faulting at
/// vertices `faulting` (FAULTING_VS_UNMAPPED + 32 bytes an id): the draw
/// fails with the first one's fault. The machine, for what else it did.
fn faulting_layered_draw(gpu_threads: usize, partial_bg: bool, faulting: [u32; 2]) -> Machine {
    let m = Machine::with_config(SystemConfig {
        gpu_threads,
        ..machine_config(5000)
    });
    let render = layered_pass(&m, false, partial_bg);
    let mut uniforms = pair(DATA_VA + BIG_VERTICES);
    uniforms.extend(pair(DATA_VA + BIG_VERTICES + 16));
    uniforms.extend(faulting);
    uniforms.extend(pair(FAULTING_VS_UNMAPPED));
    m.program(
        &faulting_vs(),
        0x3000,
        0xC0,
        &uniforms,
        UNIFORMS + 0x200,
        0,
        None,
    );
    assert_eq!(
        m.submit(CmdType::Render, render.as_bytes()),
        Some(Errno::EIO),
        "{gpu_threads} threads"
    );
    let (address, unit, _) = m.system.device().scheduler().stats().last_fault.unwrap();
    assert_eq!(
        (address, unit),
        (
            FAULTING_VS_UNMAPPED + 32 * u64::from(faulting[0]),
            agx_fwif::messages::FaultUnit::Usc as u32
        ),
        "{gpu_threads} threads"
    );
    m
}

/// Where [`faulting_vs`]'s faulting loads read (nothing is mapped there).
const FAULTING_VS_UNMAPPED: u64 = 0x7_0000_0000;

/// A draw shaded a batch ahead of its binning (two threads or more)
/// does what one thread shading and binning each batch in turn does: in
/// the layered scene, whose first partial render comes while its third
/// batch of 4096 triangles is binned, the fourth batch has vertices that
/// fault. Whatever the threads, the partial render runs (its tiles are
/// stored) before the draw ends with the vertices' fault, though the
/// fourth batch was shaded meanwhile. (With those vertices in the third
/// batch instead, nothing is stored: that partial render is the first.)
#[test_log::test]
fn a_draw_shaded_ahead_faults_after_binning_what_came_before() {
    // Vertices 6500 and 6600: in the fourth batch (the third's reach
    // vertex 65 * 65 + 33 * 65 = 6370).
    let stored: Vec<Vec<u8>> = [1, 2, 3]
        .into_iter()
        .map(|gpu_threads| {
            image(
                &faulting_layered_draw(gpu_threads, true, [6500, 6600]),
                SIZE as usize,
            )
        })
        .collect();
    assert!(
        stored[0].iter().any(|&byte| byte != 0),
        "the partial render stored its tiles"
    );
    assert!(stored[0] == stored[1], "1 and 2 threads");
    assert!(stored[0] == stored[2], "1 and 3 threads");
}

/// Programs whose lanes all store the same values (the clear, a constant
/// colour) run one SIMD-group per run on the compiled engine, the others
/// getting its stores: the image is the interpreter's, bit for bit (each
/// lane's coverage, helpers and depth test applied).
#[test_log::test]
fn programs_storing_the_same_in_every_lane_draw_what_the_interpreter_draws() {
    let triangles: [Coloured; 3] = [
        ([[3.0, 5.0], [60.0, 9.0], [20.0, 58.0]], 0.5, [0.0; 3]),
        ([[40.0, 2.0], [63.5, 40.0], [10.0, 30.0]], 0.25, [0.0; 3]),
        ([[33.0, 33.0], [34.5, 33.0], [33.0, 34.5]], 0.75, [0.0; 3]),
    ];
    let colour = [0.25f32, 0.5, 0.75, 1.0];
    let run = |shader_engine: ShaderEngine| {
        let m = Machine::with_config(SystemConfig {
            shader_engine,
            ..machine_config(5000)
        });
        coloured(&m, &triangles);
        // (The clear's program as the fragment shader: a constant colour
        // from its uniforms.)
        let render = depth_pass_with_fs(&m, 3, false, CLEAR, &colour.map(f32::to_bits));
        let errno = m.submit(CmdType::Render, render.as_bytes());
        (errno, image(&m, SIZE as usize))
    };
    let (errno, interpreted) = run(ShaderEngine::Interpreter);
    assert_eq!(errno, None);
    let (errno, compiled) = run(ShaderEngine::Compiled);
    assert_eq!(errno, None);
    let drawn = interpreted
        .chunks_exact(4)
        .filter(|p| *p == [64, 128, 191, 255])
        .count();
    assert!(drawn > 1000, "{drawn} pixels drawn");
    assert!(
        interpreted.chunks_exact(4).any(|p| p == [0, 0, 0, 0]),
        "and cleared ones"
    );
    let differing = interpreted
        .chunks_exact(4)
        .zip(compiled.chunks_exact(4))
        .filter(|(a, b)| a != b)
        .count();
    assert_eq!(differing, 0, "pixels that differ");
}

/// COLOUR_FS that discards pixels left of x = u1.
const DISCARD_FS: &str = "
    get_sr r10, sr80
    if_icmp r0l, ult, r10, u1, 1
    sample_mask 255, 0
    pop_exec r0l, 1
    iter r2_r3_r4, cf0, center, 0, 0, 0, 0, 0
    mov r5, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

/// COLOUR_FS that outputs depth u1 instead of the interpolated one.
const DEPTH_OUT_FS: &str = "
    mov r12, u1
    zs_emit 255, z, r12l_r12h, 0
    iter r2_r3_r4, cf0, center, 0, 0, 0, 0, 0
    mov r5, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

/// A triangle covering the whole 64x64 target at depth `z`.
fn covering(z: f32, colour: [f32; 3]) -> Coloured {
    ([[-64.0, -64.0], [192.0, 0.0], [0.0, 192.0]], z, colour)
}

#[test_log::test]
fn discarded_pixels_write_neither_colour_nor_depth() {
    let m = Machine::new(5000);
    coloured(&m, &[covering(0.5, [1.0, 0.0, 0.0])]);
    let render = depth_pass_with_fs(&m, 1, false, DISCARD_FS, &[1.0f32.to_bits(), 32]);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    for (x, kept) in [(0, false), (31, false), (32, true), (63, true)] {
        let want = if kept { [255, 0, 0] } else { [0, 0, 0] };
        assert_eq!(rgb(&m, x, 10), want, "pixel ({x}, 10)");
        assert_eq!(stored_depth(&m, x, 10), if kept { 0.5 } else { 1.0 });
    }
}

/// COLOUR_FS with the lane's place in its SIMD-group (`sr52`) / 255 as
/// red (u1: 1/255).
const LANE_FS: &str = "
    iter r2_r3_r4, cf0, center, 0, 0, 0, 0, 0
    get_sr r6, sr52
    convert u32_to_f, r2, r6, rte
    fmul32 r2, r2, u1
    mov r5, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

/// 256 small triangles of one draw, on a grid 4 pixels apart (each
/// covering three pixels), triangle i flat-coloured (i % 16, i / 16, 1)
/// x `step` / 255 (odd ones wound the other way, facing away, with
/// `flip_odd`) and drawn once at each of `depths` in a row, through
/// `fs` in a depth-tested pass of type `pass_type` (an opaque one's
/// shading waits for the hidden-surface removal, a translucent one's runs
/// in drawing order). The image, and the triangles' corners.
fn grid_of_small_triangles(
    fs: &str,
    pass_type: agx_hw::formats::PassType,
    depths: &[f32],
    step: f32,
    flip_odd: bool,
) -> (Vec<u8>, Vec<[[f64; 2]; 3]>) {
    let m = Machine::new(5000);
    let mut triangles = Vec::new();
    let mut corners = Vec::new();
    for i in 0..256u32 {
        let (x, y) = ((i % 16 * 4) as f32, (i / 16 * 4) as f32);
        let colour = [(i % 16) as f32, (i / 16) as f32, 1.0].map(|c| c * step / 255.0);
        let t = if flip_odd && i % 2 == 1 {
            [[x, y], [x, y + 3.0], [x + 3.0, y]]
        } else {
            [[x, y], [x + 3.0, y], [x, y + 3.0]]
        };
        for &z in depths {
            triangles.push((t, z, colour));
        }
        corners.push(t.map(|[x, y]| [f64::from(x), f64::from(y)]));
    }
    coloured(&m, &triangles);
    let uniforms = [1.0f32.to_bits(), (1.0f32 / 255.0).to_bits()];
    let render = depth_pass_with_fs(&m, triangles.len() as u32, false, fs, &uniforms);
    set_pass_type(&m, pass_type);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    (image(&m, SIZE as usize), corners)
}

/// Checks that each pixel of the grid's image a triangle covers (by the
/// independent rasteriser) holds (i % 16, i / 16) x 16, `blue(i)` and
/// alpha 255 for its triangle i, and that the others hold 0.
fn assert_grid_colours(
    pixels: &[u8],
    corners: &[[[f64; 2]; 3]],
    blue: impl Fn(usize) -> u8,
    what: &str,
) {
    let mut covered = 0;
    for y in 0..SIZE as usize {
        for x in 0..SIZE as usize {
            let at = y * STRIDE as usize + 4 * x;
            let (px, py) = (x as f64 + 0.5, y as f64 + 0.5);
            let owner = corners.iter().position(|&t| covers(t, px, py));
            let want = owner.map_or([0; 4], |i| {
                [(i % 16 * 16) as u8, (i / 16 * 16) as u8, blue(i), 255]
            });
            assert_eq!(pixels[at..at + 4], want, "{what}: pixel ({x}, {y})");
            covered += usize::from(owner.is_some());
        }
    }
    assert_eq!(covered, 3 * 256, "{what}");
}

/// Sets the pass type of the PPP state at PPP (its first fragment-control
/// word).
fn set_pass_type(m: &Machine, pass_type: agx_hw::formats::PassType) {
    let ppp = PppRecords::walk(&m.peek(m.data, PPP, 0x100)).unwrap().value;
    let records = PppRecords {
        fragment_control: Some(FragmentControl {
            pass_type,
            ..ppp.fragment_control.unwrap_or_default()
        }),
        ..ppp
    };
    let mut bytes = Vec::new();
    records.build(&mut bytes).unwrap();
    m.poke(m.data, PPP, &bytes);
}

/// COLOUR_FS added to what the tilebuffer holds (a translucent shader).
const ADDING_FS: &str = "
    iter r2_r3_r4, cf0, center, 0, 0, 0, 0, 0
    ld_tile r6_r7_r8_r9, u8norm, 0, xyzw, 0, 255, r0, 0
    wait 0
    fadd32 r2, r2, r6
    fadd32 r3, r3, r7
    fadd32 r4, r4, r8
    mov r5, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

#[test_log::test]
fn in_order_primitives_over_one_another_are_shaded_one_after_the_other() {
    // Each small triangle of the grid is drawn twice in a row, nearer the
    // second time; the translucent shader adds its colour to the
    // tilebuffer's. Waiting in-order primitives share SIMD-groups only
    // while their pixels are apart, so the second copy reads what the
    // first stored: every covered pixel holds twice its colour.
    let (pixels, corners) = grid_of_small_triangles(
        ADDING_FS,
        agx_hw::formats::PassType::Translucent,
        &[0.5, 0.25],
        8.0,
        false,
    );
    assert_grid_colours(&pixels, &corners, |_| 16, "drawn twice");
}

/// COLOUR_FS with blue 1 in a primitive facing away (`sr62`), else 0.
const FACING_COLOUR_FS: &str = "
    iter r2_r3_r4, cf0, center, 0, 0, 0, 0, 0
    get_sr r6, sr62
    convert u32_to_f, r4, r6, rte
    mov r5, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

#[test_log::test]
fn primitives_facing_either_way_share_simd_groups_each_with_its_own_facing() {
    // Every other triangle of the grid faces away; the opaque pass's
    // depth state is the same both ways, so they share SIMD-groups, and
    // each lane's `backfacing` is its own primitive's.
    let (pixels, corners) = grid_of_small_triangles(
        FACING_COLOUR_FS,
        agx_hw::formats::PassType::Opaque,
        &[0.5],
        16.0,
        true,
    );
    let away = |i: usize| if i % 2 == 1 { 255 } else { 0 };
    assert_grid_colours(&pixels, &corners, away, "facing either way");
}

#[test_log::test]
fn small_triangles_sharing_simd_groups_each_keep_their_own_varyings() {
    // The quads of several primitives fill one SIMD-group when the
    // shader cannot tell (no SIMD-wide operations, no lane indices, no
    // memory writes); each lane still reads its own primitive's
    // coefficient registers. Opaque primitives share them when their
    // tags are resolved, translucent ones while they wait in drawing
    // order.
    use agx_hw::formats::PassType;
    for pass_type in [PassType::Opaque, PassType::Translucent] {
        let (pixels, triangles) =
            grid_of_small_triangles(COLOUR_FS, pass_type, &[0.5], 16.0, false);
        assert_grid_colours(&pixels, &triangles, |_| 16, &format!("{pass_type:?}"));
        // A shader that reads its lane's place in the SIMD-group runs
        // with its own primitive's quad alone: every covered pixel is in
        // lanes 0-3.
        let (pixels, triangles) = grid_of_small_triangles(LANE_FS, pass_type, &[0.5], 16.0, false);
        let mut lanes = Vec::new();
        for y in 0..SIZE as usize {
            for x in 0..SIZE as usize {
                let (px, py) = (x as f64 + 0.5, y as f64 + 0.5);
                if triangles.iter().any(|&t| covers(t, px, py)) {
                    lanes.push(pixels[y * STRIDE as usize + 4 * x]);
                }
            }
        }
        assert!(
            lanes.iter().all(|&lane| lane < 4),
            "{pass_type:?}: lanes {lanes:?}"
        );
    }
}

/// COLOUR_FS that also counts its invocations: a device atomic add of 1
/// to the word at u2_u3.
const COUNTING_COLOUR_FS: &str = "
    mov_imm r1, 1
    atomic add, 0, 0, u2_u3, 0, signed, r1, 1, 1, 1, 1
    iter r2_r3_r4, cf0, center, 0, 0, 0, 0, 0
    mov r5, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

/// Draws a far red triangle, then a near green one, both covering the
/// whole target, with COUNTING_COLOUR_FS in pass type `pass_type` (in
/// the second fragment-control word, as Mesa gives the shader's, if
/// `second_word`); returns how many times the shader ran and pixel
/// (20, 20).
fn hidden_pass(pass_type: agx_hw::formats::PassType, second_word: bool) -> (u32, [u8; 3]) {
    const COUNTER: u64 = 0xB_0000;
    let m = Machine::new(5000);
    m.poke_u32s(COUNTER, &[0]);
    coloured(
        &m,
        &[
            covering(0.75, [1.0, 0.0, 0.0]),
            covering(0.25, [0.0, 1.0, 0.0]),
        ],
    );
    let mut uniforms = vec![1.0f32.to_bits(), 0];
    uniforms.extend(pair(DATA_VA + COUNTER));
    let render = depth_pass_with_fs(&m, 2, false, COUNTING_COLOUR_FS, &uniforms);
    let ppp = PppRecords::walk(&m.peek(m.data, PPP, 0x100)).unwrap().value;
    let control = ppp.fragment_control.unwrap_or_default();
    let records = if second_word {
        PppRecords {
            fragment_control: Some(FragmentControl {
                pass_type: agx_hw::formats::PassType::Opaque,
                ..control
            }),
            fragment_control_2: Some(FragmentControl {
                pass_type,
                ..FragmentControl::default()
            }),
            ..ppp
        }
    } else {
        PppRecords {
            fragment_control: Some(FragmentControl {
                pass_type,
                ..control
            }),
            ..ppp
        }
    };
    let mut bytes = Vec::new();
    records.build(&mut bytes).unwrap();
    m.poke(m.data, PPP, &bytes);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    (m.peek_u32s(COUNTER, 1)[0], rgb(&m, 20, 20))
}

#[test_log::test]
fn an_opaque_primitive_hidden_by_a_later_one_is_never_shaded() {
    // The hidden-surface removal shades each sample once, with the
    // primitive visible there when the tile is done; the far triangle's
    // shader never runs, so its side effects never happen (Mesa forces a
    // late depth test on shaders with side effects for this reason).
    use agx_hw::formats::PassType;
    let pixels = u32::from(SIZE) * u32::from(SIZE);
    assert_eq!(hidden_pass(PassType::Opaque, false), (pixels, [0, 255, 0]));
    // A translucent primitive is shaded in drawing order: both run.
    assert_eq!(
        hidden_pass(PassType::Translucent, false),
        (2 * pixels, [0, 255, 0])
    );
    // Mesa's layout: the rasteriser's word says opaque, the shader's
    // second word the pass type; the two words act as one.
    assert_eq!(
        hidden_pass(PassType::Translucent, true),
        (2 * pixels, [0, 255, 0])
    );
    assert_eq!(hidden_pass(PassType::Opaque, true), (pixels, [0, 255, 0]));
}

#[test_log::test]
fn shader_depth_output_is_what_the_depth_test_uses() {
    let m = Machine::new(5000);
    // Depth 0.5 everywhere first.
    coloured(&m, &[covering(0.5, [1.0, 0.0, 0.0])]);
    let render = depth_pass(&m, 1, false);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    // A farther triangle (0.9) whose shader outputs 0.25: it passes.
    coloured(&m, &[covering(0.9, [0.0, 1.0, 0.0])]);
    let render = depth_pass_with_fs(
        &m,
        1,
        true,
        DEPTH_OUT_FS,
        &[1.0f32.to_bits(), 0.25f32.to_bits()],
    );
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(rgb(&m, 20, 20), [0, 255, 0]);
    assert_eq!(stored_depth(&m, 20, 20), 0.25);
    // And one whose shader outputs 0.75 against the stored 0.25 fails.
    coloured(&m, &[covering(0.1, [0.0, 0.0, 1.0])]);
    let render = depth_pass_with_fs(
        &m,
        1,
        true,
        DEPTH_OUT_FS,
        &[1.0f32.to_bits(), 0.75f32.to_bits()],
    );
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(rgb(&m, 20, 20), [0, 0, 0], "hidden (bg cleared the colour)");
    assert_eq!(stored_depth(&m, 20, 20), 0.25);
}

const SCISSORS: u64 = PPP + 0x1000;
const DEPTH_BIASES: u64 = PPP + 0x1100;

/// Builds a PPP state update at `PPP + offset` and returns its VDM block.
fn ppp_update(m: &Machine, offset: u64, records: &PppRecords) -> VdmBlock {
    let mut ppp = Vec::new();
    records.build(&mut ppp).unwrap();
    m.poke(m.data, PPP + offset, &ppp);
    VdmBlock::PppStateUpdate(PppState {
        pointer: DATA_VA + PPP + offset,
        size_words: (ppp.len() / 4) as u32,
    })
}

/// Two coplanar full-target triangles at depth 0.5, red then green, depth
/// test Less, the PPP state given as Mesa gives it: one update with the
/// viewport and the scissor and depth-bias indices, one with the fragment
/// state, then before the green triangle an update with only a fragment
/// control (scissor on, depth bias `green_bias`). The scissor is
/// (8, 8)-(56, 40).
fn coplanar_pass(m: &Machine, green_bias: bool) -> CmdRender {
    let cover = [[-64.0f32, -64.0], [192.0, 0.0], [0.0, 192.0]];
    coloured(
        m,
        &[(cover, 0.5, [1.0, 0.0, 0.0]), (cover, 0.5, [0.0, 1.0, 0.0])],
    );
    let mut render = depth_pass(m, 2, false);
    let scissor = agx_hw::formats::Scissor {
        min_x: 8,
        min_y: 8,
        max_x: 56,
        max_y: 40,
        min_z: 0.0,
        max_z: 1.0,
    };
    m.poke(m.data, SCISSORS, &scissor.pack().unwrap());
    let bias = agx_hw::formats::DepthBias {
        depth_bias: -8.0,
        slope_scale: 0.0,
        clamp: 0.0,
    };
    m.poke(m.data, DEPTH_BIASES, &bias.pack().unwrap());
    render.isp_scissor_base = DATA_VA + SCISSORS;
    render.isp_dbias_base = DATA_VA + DEPTH_BIASES;
    // Take the single update depth_pass wrote apart.
    let stream = m.peek(m.data, STREAM, 0x200);
    let at = block_at(&stream, VdmBlockType::PppStateUpdate);
    let ppp = PppRecords::walk(&m.peek(m.data, PPP, 0x100)).unwrap().value;
    let control = FragmentControl {
        scissor_enable: true,
        ..ppp.fragment_control.unwrap_or_default()
    };
    let viewport = PppRecords {
        depth_bias_scissor: Some(agx_hw::formats::DepthBiasScissor {
            scissor: 0,
            depth_bias: 0,
        }),
        viewport: ppp.viewport.clone(),
        ..PppRecords::default()
    };
    let fragment = PppRecords {
        fragment_control: Some(control),
        viewport: None,
        ..ppp
    };
    let biased = PppRecords {
        fragment_control: Some(FragmentControl {
            depth_bias_enable: green_bias,
            ..control
        }),
        ..PppRecords::default()
    };
    let mut vdm = stream[..at].to_vec();
    for block in [
        ppp_update(m, 0x200, &viewport),
        ppp_update(m, 0x400, &fragment),
        draw_block(3),
        ppp_update(m, 0x600, &biased),
        VdmBlock::IndexList(IndexListBlock {
            start: Some(IndexListStart { start: 3 }),
            ..match draw_block(3) {
                VdmBlock::IndexList(list) => list,
                _ => unreachable!(),
            }
        }),
        VdmBlock::StreamTerminate(VdmStreamTerminate::default()),
    ] {
        block.build(&mut vdm).unwrap();
    }
    m.poke(m.data, STREAM, &vdm);
    render
}

#[test_log::test]
fn ppp_updates_accumulate_and_the_scissor_and_depth_bias_apply() {
    let m = Machine::new(5000);
    // Without bias the coplanar green triangle fails Less: red, depth 0.5,
    // inside the scissor only. The viewport came in the first update and
    // still applies after the later ones.
    let render = coplanar_pass(&m, false);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(rgb(&m, 8, 8), [255, 0, 0]);
    assert_eq!(rgb(&m, 55, 39), [255, 0, 0]);
    for (x, y) in [(7, 8), (8, 7), (56, 20), (20, 40), (0, 63)] {
        assert_eq!(
            rgb(&m, x, y),
            [0, 0, 0],
            "({x}, {y}) is outside the scissor"
        );
        assert_eq!(stored_depth(&m, x, y), 1.0);
    }
    assert_eq!(stored_depth(&m, 20, 20), 0.5);
    // With the bias (-8 units of 2^-24 at depth 0.5) green wins and its
    // biased depth is stored; the update that enabled it changed nothing
    // else.
    let render = coplanar_pass(&m, true);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(rgb(&m, 20, 20), [0, 255, 0]);
    assert_eq!(stored_depth(&m, 20, 20), 0.5 - 2f32.powi(-21));
    assert_eq!(rgb(&m, 60, 60), [0, 0, 0]);
}

/// Writes a coefficient binding table at USC offset 0x5000: `components`
/// slots of the vertex outputs from output 4 (hardware slot 1, after W)
/// to cf0.., with `shade_model`.
fn cf_table(m: &Machine, components: u32, shade_model: agx_hw::formats::ShadeModel) {
    use agx_hw::formats::{CfBinding, CfBindingHeader, CoefficientSource};
    let mut table = CfBindingHeader {
        slot_count: 1 + components,
        coefficient_register_count: components,
    }
    .pack()
    .unwrap()
    .to_vec();
    table.extend(
        CfBinding {
            components,
            shade_model,
            source: CoefficientSource::Varying,
            base_slot: 1,
            base_coefficient_register: 0,
        }
        .pack()
        .unwrap(),
    );
    m.poke(m.usc, 0x5000, &table);
}

/// COLOUR_VS + COLOUR_FS over `triangles`, depth test Always, with a
/// stencil test; ZLS loads stencil if `load` and stores it.
fn stencil_pass(
    m: &Machine,
    triangles: u32,
    stencil: agx_hw::formats::FragmentStencil,
    reference: u8,
    load: bool,
) -> CmdRender {
    stencil_pass_with_fs(
        m,
        triangles,
        stencil,
        reference,
        load,
        COLOUR_FS,
        &[1.0f32.to_bits()],
    )
}

/// [`stencil_pass`] with another fragment shader.
fn stencil_pass_with_fs(
    m: &Machine,
    triangles: u32,
    stencil: agx_hw::formats::FragmentStencil,
    reference: u8,
    load: bool,
    fs: &str,
    fs_uniforms: &[u32],
) -> CmdRender {
    let vs = colour_vs(m, VERTICES);
    let fs = m.program(fs, 0x4000, 0x100, fs_uniforms, UNIFORMS + 0x300, 0, None);
    cf_table(m, 3, agx_hw::formats::ShadeModel::FlatVertex0);
    let mut render = draw_pass_with_depth_stencil(
        m,
        3 * triangles,
        vs,
        7,
        fs,
        Some((0x5000, 1)),
        Some(ZsFunc::Always),
        Some((stencil, reference)),
    );
    render.zls_ctrl = zls_word(ZlsControl {
        s_load_enable: load,
        s_store_enable: true,
        ..ZlsControl::default()
    });
    render.stencil.base = DATA_VA + DEPTH;
    render.stencil.stride = zls_stride_word();
    render.isp_zls_pixels = zls_pixels_word(64, 64);
    render
}

/// A stencil state that always passes, writes every bit and applies
/// `depth_pass` where the depth test passes (keeping the value
/// otherwise).
fn always_stencil(depth_pass: agx_hw::formats::StencilOp) -> agx_hw::formats::FragmentStencil {
    use agx_hw::formats::{FragmentStencil, StencilOp};
    FragmentStencil {
        write_mask: 0xFF,
        read_mask: 0xFF,
        depth_pass,
        depth_fail: StencilOp::Keep,
        stencil_fail: StencilOp::Keep,
        compare: ZsFunc::Always,
    }
}

/// The stored stencil of pixel (x, y): a 64x64 8-bit plane is smaller
/// than a 128x128 page tile, so it is one 64x64 Z-order tile.
fn stored_stencil(m: &Machine, x: usize, y: usize) -> u8 {
    m.peek(
        m.data,
        DEPTH + agx_hw::layout::morton(x as u32, y as u32),
        1,
    )[0]
}

#[test_log::test]
fn stencil_operations_count_overlaps_and_the_stencil_test_masks() {
    use agx_hw::formats::{FragmentStencil, StencilOp};
    let m = Machine::new(5000);
    let count = always_stencil(StencilOp::IncrSat);
    let first = (
        [[4.0f32, 4.0], [44.0, 8.0], [12.0, 44.0]],
        0.5,
        [1.0, 0.0, 0.0],
    );
    let second = (
        [[20.0f32, 20.0], [60.0, 24.0], [28.0, 60.0]],
        0.5,
        [0.0, 1.0, 0.0],
    );
    coloured(&m, &[first, second]);
    let render = stencil_pass(&m, 2, count, 0, false);
    assert_eq!(
        m.submit(CmdType::Render, render.as_bytes()),
        None,
        "{:?}",
        m.system.device().scheduler().stats().last_fault
    );
    assert_eq!(stored_stencil(&m, 26, 26), 2, "both");
    assert_eq!(stored_stencil(&m, 8, 8), 1, "the first");
    assert_eq!(stored_stencil(&m, 40, 40), 1, "the second");
    assert_eq!(stored_stencil(&m, 60, 4), 0, "neither (the clear value)");
    // Now draw over everything where the stencil equals 1: the overlap
    // (2) and the untouched corner (0) keep the clear colour.
    let equal_one = FragmentStencil {
        depth_pass: StencilOp::Keep,
        compare: ZsFunc::Equal,
        ..count
    };
    coloured(&m, &[covering(0.5, [0.0, 0.0, 1.0])]);
    let render = stencil_pass(&m, 1, equal_one, 1, true);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(rgb(&m, 8, 8), [0, 0, 255]);
    assert_eq!(rgb(&m, 40, 40), [0, 0, 255]);
    assert_eq!(rgb(&m, 26, 26), [0, 0, 0]);
    assert_eq!(rgb(&m, 60, 4), [0, 0, 0]);
    assert_eq!(stored_stencil(&m, 26, 26), 2, "kept");
    // Again with a 32-bit depth plane loaded beside the stencil (the ZLS
    // loads both for each tile): the loaded stencil still masks.
    const DEPTH_BESIDE: u64 = DEPTH + 0x4000;
    m.poke(m.data, DEPTH_BESIDE, &[0u8; 64 * 64 * 4]);
    coloured(&m, &[covering(0.5, [0.0, 1.0, 0.0])]);
    let mut render = stencil_pass(&m, 1, equal_one, 1, true);
    render.zls_ctrl = zls_word(ZlsControl {
        s_load_enable: true,
        s_store_enable: true,
        z_load_enable: true,
        z_format: agx_hw::formats::ZlsFormat::F32,
        ..ZlsControl::default()
    });
    render.depth.base = DATA_VA + DEPTH_BESIDE;
    render.depth.stride = zls_stride_word();
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(rgb(&m, 8, 8), [0, 255, 0], "depth loaded too");
    assert_eq!(rgb(&m, 40, 40), [0, 255, 0], "depth loaded too");
    assert_eq!(rgb(&m, 26, 26), [0, 0, 0], "depth loaded too");
}

/// Pages the parameter buffer needed for `triangles` copies of one small
/// triangle whose vertices carry `outputs` 32-bit slots (position
/// included), measured on a fresh queue.
fn pages_for(triangles: u32, outputs: u32) -> u64 {
    let m = Machine::new(5000);
    let window: Vec<[f32; 2]> = (0..triangles)
        .flat_map(|_| [[2.0, 2.0], [9.0, 2.0], [2.0, 9.0]])
        .collect();
    m.poke_u32s(BIG_VERTICES, &clip(&window));
    let vs = m.program(
        POSITION_VS,
        0x3000,
        0xC0,
        &pair(DATA_VA + BIG_VERTICES),
        UNIFORMS + 0x200,
        0,
        None,
    );
    let fs = m.program(COUNT_FS, 0x4000, 0x100, &[0], UNIFORMS + 0x300, 0, None);
    let render = draw_pass(&m, window.len() as u32, vs, outputs, fs, None);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let stats = m.file.queue(m.queue).unwrap().tvb_stats();
    assert_eq!(stats.partial_renders, 0, "{stats:?}");
    stats.peak_pages
}

/// The "bunny bug": what the tiler stores is per-vertex data, so the
/// parameter buffer a scene needs grows with its vertex count times its
/// varyings, not with its pixel coverage. All of these triangles fall in
/// one tile, covering the same 28 pixels.
#[test_log::test]
fn parameter_buffer_demand_grows_with_vertices_times_varyings() {
    let page = agx_fwif::messages::TVB_PAGE_BYTES as f64;
    // A primitive costs its record (state and flags, 8 bytes, and three
    // vertices of `outputs` words) and a sixth of a 64-byte list chunk.
    let per_triangle = |outputs: u32| 8.0 + 12.0 * f64::from(outputs) + 64.0 / 6.0;
    let (narrow, wide, wide_twice) = (pages_for(1200, 4), pages_for(1200, 32), pages_for(2400, 32));
    tracing::info!(narrow, wide, wide_twice, "parameter buffer pages");
    let more_varyings = (wide - narrow) as f64;
    let expected = 1200.0 * (per_triangle(32) - per_triangle(4)) / page;
    assert!(
        (more_varyings - expected).abs() <= 1.5,
        "28 more slots per vertex: {more_varyings} pages, expected {expected:.1}"
    );
    let more_vertices = (wide_twice - wide) as f64;
    let expected = 1200.0 * per_triangle(32) / page;
    assert!(
        (more_vertices - expected).abs() <= 1.5,
        "twice the vertices: {more_vertices} more pages, expected {expected:.1}"
    );
}

/// Where the multisampled test image lives: 64 x 64 pixels of four
/// RGBA8 samples.
const MSAA_IMAGE: u64 = 0x30_0000;

#[test_log::test]
fn four_samples_are_covered_at_the_standard_positions_and_stored_side_by_side() {
    let m = Machine::new(5000);
    let window = [[10.25f32, 5.5], [50.75, 20.0], [20.0, 60.125]];
    let mut render = triangles_pass(&m, &window);
    render.samples = 4;
    // The standard 4x pattern, spelt out (0 would select it too).
    render.ppp_multisamplectl = 0xeaa2_6e26;
    let stride = 64 * 4 * 4;
    m.poke(m.data, MSAA_IMAGE, &vec![0xEE; 64 * stride as usize]);
    let msaa = msaa_pbe(stride);
    m.poke(m.data, PBE, &msaa.pack().unwrap());
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let image = m.peek(m.data, MSAA_IMAGE, 64 * stride as usize);
    let t = window.map(|[x, y]| [f64::from(x), f64::from(y)]);
    let positions = [
        (0.375, 0.125),
        (0.875, 0.375),
        (0.125, 0.625),
        (0.625, 0.875),
    ];
    let mut partial = 0;
    for y in 0..64usize {
        for x in 0..64usize {
            let mut covered = 0;
            for (s, (sx, sy)) in positions.iter().enumerate() {
                let want = u8::from(covers(t, x as f64 + sx, y as f64 + sy));
                covered += want;
                let at = y * stride as usize + (x * 4 + s) * 4;
                assert_eq!(
                    image[at..at + 4],
                    [want, 0, 0, 0],
                    "pixel ({x}, {y}) sample {s}"
                );
            }
            partial += usize::from(covered > 0 && covered < 4);
        }
    }
    assert!(partial > 50, "edge pixels are partly covered: {partial}");
    // A single-sampled image cannot take a multisampled tile: the store
    // is refused (resolving is the end-of-tile shader's job).
    m.poke(m.data, PBE, &pbe(64, 64).pack().unwrap());
    assert_eq!(
        m.submit(CmdType::Render, render.as_bytes()),
        Some(Errno::EIO)
    );
}

#[test_log::test]
fn depth_is_tested_and_stored_per_sample() {
    // Also where the two tilings differ within a 64x64 plane: four
    // samples make 16-byte elements, so GPU tiles are 32x32 while the
    // twiddled plane is one 64x64 Z-order tile.
    for tiling in [
        agx_hw::formats::ZlsTiling::Gpu,
        agx_hw::formats::ZlsTiling::Twiddled,
    ] {
        let m = Machine::new(5000);
        let near = [[8.25f32, 3.5], [57.5, 30.75], [12.0, 58.25]];
        coloured(
            &m,
            &[
                (
                    [[0.0, 0.0], [64.0, 0.0], [0.0, 64.0]],
                    0.75,
                    [0.0, 0.0, 1.0],
                ),
                (
                    [[64.0, 0.0], [64.0, 64.0], [0.0, 64.0]],
                    0.75,
                    [0.0, 0.0, 1.0],
                ),
                (near, 0.25, [1.0, 0.0, 0.0]),
            ],
        );
        let mut render = depth_pass(&m, 3, false);
        render.samples = 4;
        render.zls_ctrl = zls_word(ZlsControl {
            z_store_enable: true,
            z_store_tiling: tiling,
            ..ZlsControl::default()
        });
        let stride = 64 * 4 * 4;
        let msaa = msaa_pbe(stride);
        m.poke(m.data, PBE, &msaa.pack().unwrap());
        assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
        let depth = m.peek(m.data, DEPTH, 4 * 64 * 64 * 4);
        let image = m.peek(m.data, MSAA_IMAGE, 64 * stride as usize);
        let t = near.map(|[x, y]| [f64::from(x), f64::from(y)]);
        let positions = [
            (0.375, 0.125),
            (0.875, 0.375),
            (0.125, 0.625),
            (0.625, 0.875),
        ];
        for y in 0..64usize {
            for x in 0..64usize {
                let element = if tiling == agx_hw::formats::ZlsTiling::Gpu {
                    // 32x32 page tiles, 2 x 2 of them.
                    let tile = (y / 32) * 2 + x / 32;
                    tile * 1024 + agx_hw::layout::morton((x % 32) as u32, (y % 32) as u32) as usize
                } else {
                    agx_hw::layout::morton(x as u32, y as u32) as usize
                };
                for (s, (sx, sy)) in positions.iter().enumerate() {
                    let in_near = covers(t, x as f64 + sx, y as f64 + sy);
                    let at = 16 * element + 4 * s;
                    let stored = f32::from_le_bytes(depth[at..at + 4].try_into().unwrap());
                    assert_eq!(
                        stored,
                        if in_near { 0.25 } else { 0.75 },
                        "{tiling:?}: depth of pixel ({x}, {y}) sample {s}"
                    );
                    let colour = &image[y * stride as usize + (x * 4 + s) * 4..][..3];
                    let want: [u8; 3] = if in_near { [255, 0, 0] } else { [0, 0, 255] };
                    assert_eq!(colour, want, "colour of pixel ({x}, {y}) sample {s}");
                }
            }
        }
    }
}

/// A compressed four-sample depth plane: its metadata covers tiles of
/// 16x16 samples (8x8 pixels), as a colour image's does. The first tile
/// is solid at 0.0 (its first sample's value; the rest of its body is
/// stale), the others uncompressed at 1.0. A triangle at 0.5 with the
/// test Less shows everywhere but those 8x8 pixels, and the store writes
/// every sample uncompressed (the solid tile expanded) and marks every
/// tile so.
#[test_log::test]
fn compressed_multisampled_depth_planes_load_and_store_their_sample_tiles() {
    use agx_hw::formats::{ZlsMetaStride, ZlsTiling};
    use agx_hw::layout::morton;
    const META: u64 = 0x5_0000;
    let m = Machine::new(5000);
    // 16-byte elements (four f32 samples): 32x32 GPU tiles, 2 x 2 of them.
    let element = |x: u32, y: u32| {
        let tile = u64::from((y / 32) * 2 + x / 32);
        DEPTH + 16 * (tile * 1024 + morton(x % 32, y % 32))
    };
    for y in 0..64 {
        for x in 0..64 {
            for s in 0..4u64 {
                let depth = if (x, y, s) == (0, 0, 0) { 0.0f32 } else { 1.0 };
                m.poke(m.data, element(x, y) + 4 * s, &depth.to_le_bytes());
            }
        }
    }
    // 128x128 samples: 8 x 8 tiles; tile (0, 0) solid, the rest zero
    // (never written: uncompressed).
    m.poke(m.data, META, &[0u8; 64 * 8]);
    m.poke(m.data, META, &0x0303_0303_0303_0303u64.to_le_bytes());
    coloured(
        &m,
        &[(
            [[-64.0f32, -64.0], [192.0, 0.0], [0.0, 192.0]],
            0.5,
            [0.0, 0.0, 1.0],
        )],
    );
    let mut render = depth_pass(&m, 1, true);
    render.samples = 4;
    render.zls_ctrl = zls_word(ZlsControl {
        z_load_enable: true,
        z_store_enable: true,
        z_load_tiling: ZlsTiling::Gpu,
        z_store_tiling: ZlsTiling::Gpu,
        z_load_compress: true,
        z_store_compress: true,
        ..ZlsControl::default()
    });
    render.depth.comp_base = DATA_VA + META;
    render.depth.comp_stride = u32::from_le_bytes(ZlsMetaStride { cachelines: 4 }.pack().unwrap());
    let stride = 64 * 4 * 4;
    m.poke(m.data, PBE, &msaa_pbe(stride).pack().unwrap());
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let image = m.peek(m.data, MSAA_IMAGE, 64 * stride as usize);
    for (x, y) in [(0, 0), (7, 7), (3, 5), (8, 0), (12, 4), (0, 8), (40, 50)] {
        let solid = x < 8 && y < 8;
        for s in 0..4u64 {
            let at = element(x, y) + 4 * s;
            let depth = f32::from_le_bytes(m.peek(m.data, at, 4).try_into().unwrap());
            assert_eq!(
                depth,
                if solid { 0.0 } else { 0.5 },
                "depth of pixel ({x}, {y}) sample {s}"
            );
            let colour =
                &image[y as usize * stride as usize + (x as usize * 4 + s as usize) * 4..][..3];
            let want: [u8; 3] = if solid { [0, 0, 0] } else { [0, 0, 255] };
            assert_eq!(colour, want, "colour of pixel ({x}, {y}) sample {s}");
        }
    }
    let words = m.peek(m.data, META, 64 * 8);
    assert!(
        words.chunks(8).all(|w| w == [0x7f; 8]),
        "every sample tile stored uncompressed: {words:x?}"
    );
}

/// Rewrites the pass's draw (set up by [`draw_pass`]) to `count` vertices
/// and `instances` instances.
fn set_draw(m: &Machine, count: u32, instances: u32) {
    let stream = m.peek(m.data, STREAM, 0x100);
    let at = block_at(&stream, VdmBlockType::IndexList);
    let VdmBlock::IndexList(mut list) = draw_block(count) else {
        unreachable!()
    };
    list.instances = Some(IndexListInstances { count: instances });
    let mut block = Vec::new();
    VdmBlock::IndexList(list).build(&mut block).unwrap();
    m.poke(m.data, STREAM + at as u64, &block);
}

/// A draw's host memory does not grow with its vertex count, and every
/// instance is work the watchdog counts. A draw of 2^32 - 1 vertices whose
/// vertex shader reads past its buffer faults there, soon (it once
/// listed all its ids first: 16 GiB of host memory, an abort); 2^32 - 1
/// instances, empty or not, meet the work budget long before the host-time
/// limit.
#[test_log::test]
fn huge_draws_stream_through_bounded_memory_and_meet_the_work_budget() {
    let window = [[10.25f32, 5.5], [50.75, 20.0], [20.0, 60.125]];
    let m = Machine::with_config(machine_config(600_000));
    let render = triangles_pass(&m, &window);
    set_draw(&m, u32::MAX, 1);
    let started = std::time::Instant::now();
    assert_eq!(
        m.submit(CmdType::Render, render.as_bytes()),
        Some(Errno::EIO)
    );
    let (address, unit, _) = m.system.device().scheduler().stats().last_fault.unwrap();
    assert_eq!(unit, agx_fwif::messages::FaultUnit::Usc as u32);
    assert_eq!(
        address,
        DATA_VA + DATA_BYTES,
        "the first vertex past the buffer"
    );
    let m = Machine::with_config(SystemConfig {
        work_budget_units: 1 << 20,
        ..machine_config(600_000)
    });
    // (Off-screen triangles: nothing is binned, so the parameter buffer
    // never fills.)
    let off_screen = [[-50.0f32, -50.0], [-40.0, -50.0], [-50.0, -40.0]];
    for (count, instances) in [(0, u32::MAX), (3, u32::MAX)] {
        let render = triangles_pass(&m, &off_screen);
        set_draw(&m, count, instances);
        assert_eq!(
            m.submit(CmdType::Render, render.as_bytes()),
            Some(Errno::ETIMEDOUT),
            "{count} vertices, {instances} instances"
        );
    }
    assert_eq!(m.system.device().scheduler().stats().timed_out, 2);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "stopped by their work, long before the host-time limit"
    );
    // The device still draws.
    let render = triangles_pass(&m, &window);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert!(counts(&m).iter().filter(|&&c| c == 1).count() > 500);
}

/// Fragment shader: red = the `backfacing` special register (1.0 when the
/// triangle faces away), green 1.
const FACING_FS: &str = "
    get_sr r10, sr62
    convert u32_to_f, r2, r10, rte
    mov r3, u0
    mov_imm r4, 0
    mov r5, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

#[test_log::test]
fn fragment_shaders_read_whether_their_triangle_faces_away() {
    // Mesa's gl_FrontFacing is the inverse of sr62. With the default
    // cull state, a triangle wound clockwise on the y-down screen faces
    // the viewer.
    let m = Machine::new(5000);
    let front = [[0.0, 0.0], [32.0, 0.0], [0.0, 32.0]];
    let back = [[63.0, 63.0], [63.0, 32.0], [32.0, 63.0]];
    m.poke_u32s(VERTICES, &clip(&[front, back].concat()));
    let vs = position_vs(&m);
    let fs = fs_program(&m, FACING_FS);
    let render = draw_pass(&m, 6, vs, 4, fs, None);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(rgb(&m, 4, 4), [0, 255, 0], "front-facing");
    assert_eq!(rgb(&m, 60, 60), [255, 255, 0], "back-facing");
    assert_eq!(rgb(&m, 40, 10), [0, 0, 0], "neither");
}

/// A vertex shader that reads its clip-space position from a texture:
/// texel (vertex id, 0) of the R32G32B32A32 float image at ts0.
const TEXTURE_VS: &str = "
    texture_load 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts0, ss0, tex_2d, r5_r6, lod_min, r20l, 0, r0
    wait 0
    st_var 1, r8, 0
    st_var 1, r9, 1
    st_var 1, r10, 2
    st_var 1, r11, 3
    stop";

#[test_log::test]
fn vertex_shaders_read_textures() {
    use agx_hw::formats::Texture;
    const TEXELS: u64 = 0x8_4000;
    const DESCRIPTOR: u64 = 0x8_3000;
    let m = Machine::new(5000);
    let window = [[10.25f32, 5.5], [50.75, 20.0], [20.0, 60.125]];
    m.poke_u32s(TEXELS, &clip(&window));
    let descriptor = Texture {
        dimension: TextureDimension::D2,
        layout: Layout::Linear,
        channels: Channels::R32G32B32A32,
        data_type: TextureType::Float,
        width: 3,
        height: 1,
        stride: 48,
        address: DATA_VA + TEXELS,
        ..Texture::default()
    };
    m.poke(m.data, DESCRIPTOR, &descriptor.pack().unwrap());
    let vs = m.program(
        TEXTURE_VS,
        0x3000,
        0xC0,
        &[0],
        UNIFORMS + 0x200,
        0,
        Some((1, DATA_VA + DESCRIPTOR)),
    );
    let fs = count_fs(&m);
    let render = draw_pass(&m, 3, vs, 4, fs, None);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let got = counts(&m);
    let t = window.map(|[x, y]| [f64::from(x), f64::from(y)]);
    for y in 0..SIZE as usize {
        for x in 0..SIZE as usize {
            let want = u8::from(covers(t, x as f64 + 0.5, y as f64 + 0.5));
            assert_eq!(got[y * SIZE as usize + x], want, "pixel ({x}, {y})");
        }
    }
}

/// Per vertex at VERTICES, eight words: window position (x, y), depth
/// z in clip space, w = 1, then three values (COLOUR_VS's outputs 4-6).
fn shape_vertices(m: &Machine, vertices: &[([f32; 2], f32, [f32; 3])]) {
    m.poke_u32s(VERTICES, &shape_words(vertices, false));
}

/// The words [`shape_vertices`] stores; `behind_eye` negates every
/// position component (the same point of the projective plane, w < 0).
fn shape_words(vertices: &[([f32; 2], f32, [f32; 3])], behind_eye: bool) -> Vec<u32> {
    let mut words = Vec::new();
    for (window, z, values) in vertices {
        let position = clip(&[*window]);
        let position = [position[0], position[1], z.to_bits(), 1.0f32.to_bits()];
        words.extend(position.map(|bits| {
            if behind_eye {
                (-f32::from_bits(bits)).to_bits()
            } else {
                bits
            }
        }));
        words.extend(values.map(f32::to_bits));
        words.push(0);
    }
    words
}

/// COLOUR_VS drawing `vertices` as `primitive` with COUNT_FS (each
/// covered pixel's red counts the primitives covering it), the PPP
/// records edited by `patch`; returns the counts.
fn count_shapes(
    m: &Machine,
    primitive: Primitive,
    vertices: &[([f32; 2], f32, [f32; 3])],
    patch: &dyn Fn(&mut PppRecords),
) -> Vec<u8> {
    shape_vertices(m, vertices);
    count_stored_shapes(m, primitive, vertices.len() as u32, patch)
}

/// [`count_shapes`] of the `count` vertices already stored at VERTICES.
fn count_stored_shapes(
    m: &Machine,
    primitive: Primitive,
    count: u32,
    patch: &dyn Fn(&mut PppRecords),
) -> Vec<u8> {
    let vs = colour_vs(m, VERTICES);
    let fs = count_fs(m);
    let render = draw_shapes(
        m,
        Shapes::new(primitive, count),
        vs,
        7,
        fs,
        None,
        None,
        None,
        patch,
    );
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    counts(m)
}

/// The cull record with depth clipping and depth clamp as given.
fn depth_cull(depth_clip: bool, depth_clamp: bool) -> impl Fn(&mut PppRecords) {
    move |records: &mut PppRecords| {
        records.cull = Some(Cull {
            depth_clip,
            depth_clamp,
            ..Cull::default()
        });
    }
}

/// The output layout of COLOUR_VS's three values: `point_size` makes the
/// first of them the point size, `clip_planes` of them (after it) clip
/// distances, no varyings.
fn output_layout(point_size: bool, clip_planes: u32) -> impl Fn(&mut PppRecords) {
    use agx_hw::formats::{OutputSelect, VaryingCounts};
    move |records: &mut PppRecords| {
        records.output_select = Some(OutputSelect {
            point_size,
            clip_distance_planes: (1 << clip_planes) - 1,
            ..OutputSelect::default()
        });
        records.varying_counts_32 = Some(VaryingCounts::default());
    }
}

/// The pixels whose centres a half-open rectangle [x0, x1) x [y0, y1)
/// holds.
fn rectangle(x0: f64, x1: f64, y0: f64, y1: f64) -> impl Fn(usize, usize) -> bool {
    move |x, y| {
        let (cx, cy) = (x as f64 + 0.5, y as f64 + 0.5);
        (x0..x1).contains(&cx) && (y0..y1).contains(&cy)
    }
}

fn assert_counts(got: &[u8], want: impl Fn(usize, usize) -> u8, what: &str) {
    for y in 0..SIZE as usize {
        for x in 0..SIZE as usize {
            assert_eq!(
                got[y * SIZE as usize + x],
                want(x, y),
                "{what}: pixel ({x}, {y})"
            );
        }
    }
}

#[test_log::test]
fn points_cover_the_square_of_their_size_centred_on_them() {
    let m = Machine::new(5000);
    // (centre, size): the square [x - s/2, x + s/2) x [y - s/2, y + s/2)
    // holds the pixel centres drawn. The last point is behind the near
    // plane: clipped.
    let points = [
        ([10.5f32, 10.5f32], 1.0f32, 0.5f32),
        ([20.0, 20.0], 4.0, 0.5),
        ([40.25, 30.75], 3.0, 0.5),
        ([50.0, 52.0], 5.5, 0.5),
        ([5.0, 50.0], 6.0, -0.5),
    ];
    let vertices: Vec<_> = points
        .iter()
        .map(|&(at, size, z)| (at, z, [size, 0.0, 0.0]))
        .collect();
    let got = count_shapes(&m, Primitive::Points, &vertices, &output_layout(true, 0));
    let squares: Vec<_> = points[..4]
        .iter()
        .map(|&([x, y], s, _)| {
            let (x, y, h) = (f64::from(x), f64::from(y), f64::from(s) / 2.0);
            rectangle(x - h, x + h, y - h, y + h)
        })
        .collect();
    assert_counts(
        &got,
        |x, y| squares.iter().filter(|inside| inside(x, y)).count() as u8,
        "points",
    );
    // Without a point size output, points are one pixel.
    let got = count_shapes(&m, Primitive::Points, &vertices[..1], &|_| {});
    assert_counts(&got, |x, y| u8::from((x, y) == (10, 10)), "a 1-pixel point");
}

#[test_log::test]
fn lines_cover_the_pixels_an_aliased_line_covers() {
    let m = Machine::new(5000);
    let v = |x: f32, y: f32| ([x, y], 0.5f32, [0.0f32; 3]);
    // A horizontal, a vertical and a diagonal (x-major) line one pixel
    // wide: the pixels from the first endpoint up to, not including, the
    // last; the diagonal one per column.
    let lines = [
        v(5.5, 10.5),
        v(30.5, 10.5),
        v(40.5, 5.5),
        v(40.5, 20.5),
        v(2.25, 40.1),
        v(22.25, 60.1),
    ];
    let want = |x: usize, y: usize| {
        let horizontal = y == 10 && (5..30).contains(&x);
        let vertical = x == 40 && (5..20).contains(&y);
        let diagonal = (2..22).contains(&x) && y == x + 38;
        u8::from(horizontal) + u8::from(vertical) + u8::from(diagonal)
    };
    let got = count_shapes(&m, Primitive::Lines, &lines, &|_| {});
    assert_counts(&got, want, "lines");
    // Three pixels wide (the width is 4.4 fixed point minus one): three
    // rows.
    let wide = |records: &mut PppRecords| {
        records.fragment_front_face = Some(FragmentFace {
            line_width: 3 * 16 - 1,
            depth_function: ZsFunc::Always,
            ..FragmentFace::default()
        });
    };
    let got = count_shapes(&m, Primitive::Lines, &lines[..2], &wide);
    assert_counts(
        &got,
        |x, y| u8::from((9..12).contains(&y) && (5..30).contains(&x)),
        "a wide line",
    );
    // A strip joins consecutive vertices; a loop closes back to the
    // first. Around a square: the loop's fourth side is the strip's gap.
    let square = [v(10.5, 10.5), v(30.5, 10.5), v(30.5, 30.5), v(10.5, 30.5)];
    let side = |x: usize, y: usize, closing: bool| {
        let top = y == 10 && (10..30).contains(&x);
        let right = x == 30 && (10..30).contains(&y);
        // Right to left and bottom to top: the first endpoint is on the
        // right (or bottom) and the last excluded, so the pixel ranges
        // are (10, 30] there.
        let bottom = y == 30 && (11..=30).contains(&x);
        let left = x == 10 && (11..=30).contains(&y);
        u8::from(top) + u8::from(right) + u8::from(bottom) + u8::from(closing && left)
    };
    let got = count_shapes(&m, Primitive::LineStrip, &square, &|_| {});
    assert_counts(&got, |x, y| side(x, y, false), "a line strip");
    let got = count_shapes(&m, Primitive::LineLoop, &square, &|_| {});
    assert_counts(&got, |x, y| side(x, y, true), "a line loop");
}

#[test_log::test]
fn clip_distances_cut_triangles_lines_and_points() {
    let m = Machine::new(5000);
    // The first value is the clip distance: x - 32 in pixels, so the
    // left half of the target is clipped away.
    let v = |x: f32, y: f32| ([x, y], 0.5f32, [(x - 32.0) / 32.0, 0.0, 0.0]);
    let triangle = [v(0.0, 0.0), v(64.0, 0.0), v(0.0, 64.0)];
    let got = count_shapes(
        &m,
        Primitive::Triangles,
        &triangle,
        &output_layout(false, 1),
    );
    let t = triangle.map(|(at, _, _)| [f64::from(at[0]), f64::from(at[1])]);
    assert_counts(
        &got,
        |x, y| u8::from(x >= 32 && covers(t, x as f64 + 0.5, y as f64 + 0.5)),
        "a clipped triangle",
    );
    // Without the output select naming it, the same value is a varying.
    let got = count_shapes(
        &m,
        Primitive::Triangles,
        &triangle,
        &output_layout(false, 0),
    );
    assert_counts(
        &got,
        |x, y| u8::from(covers(t, x as f64 + 0.5, y as f64 + 0.5)),
        "unclipped",
    );
    // A line across the plane keeps its right part; a point left of it is
    // dropped, one right of it drawn.
    let got = count_shapes(
        &m,
        Primitive::Lines,
        &[v(4.5, 20.5), v(60.5, 20.5)],
        &output_layout(false, 1),
    );
    assert_counts(
        &got,
        |x, y| u8::from(y == 20 && (32..60).contains(&x)),
        "a clipped line",
    );
    let got = count_shapes(
        &m,
        Primitive::Points,
        &[v(20.5, 5.5), v(40.5, 5.5)],
        &output_layout(false, 1),
    );
    assert_counts(&got, |x, y| u8::from((x, y) == (40, 5)), "clipped points");
}

#[test_log::test]
fn polygon_modes_draw_edges_or_corners_and_discard_draws_nothing() {
    use agx_hw::formats::PolygonMode;
    let m = Machine::new(5000);
    let v = |x: f32, y: f32| ([x, y], 0.5f32, [0.0f32; 3]);
    let triangle = [v(8.5, 8.5), v(40.5, 8.5), v(8.5, 40.5)];
    let mode = |polygon_mode| {
        move |records: &mut PppRecords| {
            records.fragment_front_face = Some(FragmentFace {
                polygon_mode,
                depth_function: ZsFunc::Always,
                ..FragmentFace::default()
            });
        }
    };
    let got = count_shapes(
        &m,
        Primitive::Triangles,
        &triangle,
        &mode(PolygonMode::Line),
    );
    // The top edge from its first corner, the left edge from the third
    // corner back up to (not including) the first, and nothing inside.
    for x in 8..40 {
        assert!(got[8 * SIZE as usize + x] >= 1, "top edge pixel ({x}, 8)");
    }
    for y in 9..41 {
        assert!(got[y * SIZE as usize + 8] >= 1, "left edge pixel (8, {y})");
    }
    assert_eq!(got[20 * SIZE as usize + 15], 0, "inside");
    assert!(
        got.iter().filter(|&&c| c > 0).count() < 120,
        "only the edges"
    );
    let got = count_shapes(
        &m,
        Primitive::Triangles,
        &triangle,
        &mode(PolygonMode::Point),
    );
    assert_counts(
        &got,
        |x, y| u8::from([(8, 8), (40, 8), (8, 40)].contains(&(x, y))),
        "corners",
    );
    // Each face has its own mode (GL's glPolygonMode(GL_FRONT/GL_BACK)):
    // filled front faces, back faces as corners. The triangle both
    // ways round: culling back faces says which is which.
    let reversed = [triangle[0], triangle[2], triangle[1]];
    for triangle in [triangle, reversed] {
        let is_back = count_shapes(&m, Primitive::Triangles, &triangle, &|records| {
            records.cull = Some(Cull {
                cull_back: true,
                ..Cull::default()
            });
        })
        .iter()
        .all(|&c| c == 0);
        let per_face = |records: &mut PppRecords| {
            let face = |polygon_mode| FragmentFace {
                polygon_mode,
                depth_function: ZsFunc::Always,
                ..FragmentFace::default()
            };
            records.fragment_front_face = Some(face(PolygonMode::Fill));
            records.fragment_back_face = Some(face(PolygonMode::Point));
        };
        let got = count_shapes(&m, Primitive::Triangles, &triangle, &per_face);
        if is_back {
            assert_counts(
                &got,
                |x, y| u8::from([(8, 8), (40, 8), (8, 40)].contains(&(x, y))),
                "back face as corners",
            );
        } else {
            assert_eq!(got[20 * SIZE as usize + 15], 1, "front face filled");
        }
    }
    // Rasteriser discard: the vertices are shaded, nothing is drawn.
    let discard = |records: &mut PppRecords| {
        records.cull = Some(Cull {
            rasterizer_discard: true,
            ..Cull::default()
        });
    };
    let got = count_shapes(&m, Primitive::Triangles, &triangle, &discard);
    assert!(got.iter().all(|&c| c == 0));
}

/// A coefficient binding table at USC offset 0x5000 of one binding:
/// `components` registers from cf0, of `source`, `shade_model`.
fn source_table(
    m: &Machine,
    components: u32,
    source: agx_hw::formats::CoefficientSource,
    shade_model: agx_hw::formats::ShadeModel,
) {
    use agx_hw::formats::{CfBinding, CfBindingHeader};
    let mut table = CfBindingHeader {
        slot_count: 1 + components,
        coefficient_register_count: components,
    }
    .pack()
    .unwrap()
    .to_vec();
    table.extend(
        CfBinding {
            components,
            shade_model,
            source,
            base_slot: 1,
            base_coefficient_register: 0,
        }
        .pack()
        .unwrap(),
    );
    m.poke(m.usc, 0x5000, &table);
}

/// Fragment shader: (cf0, cf1, 0, 1) as the colour.
const TWO_FS: &str = "
    iter r2_r3, cf0, center, 0, 0, 0, 0, 0
    mov r4, u1
    mov r5, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

/// Fragment shader: the integer in cf0 (its constant coefficient, as
/// Mesa loads flat varyings), as red in 1/255 steps.
const ID_FS: &str = "
    ldcf r6_r7_r8, cf0, 0
    convert u32_to_f, r3, r8, rte
    fmul32 r2, r3, u2
    mov r3, u1
    mov r4, u1
    mov r5, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

/// COLOUR_VS drawing `vertices` as `primitive` with the fragment shader
/// `fs` and the binding table at 0x5000; returns the image.
fn draw_with_table(
    m: &Machine,
    primitive: Primitive,
    vertices: &[([f32; 2], f32, [f32; 3])],
    fs: &str,
    patch: &dyn Fn(&mut PppRecords),
) -> Vec<u8> {
    let render = table_pass(m, primitive, vertices, fs, patch);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    image(m, SIZE as usize)
}

/// [`draw_with_table`]'s render command, not yet submitted.
fn table_pass(
    m: &Machine,
    primitive: Primitive,
    vertices: &[([f32; 2], f32, [f32; 3])],
    fs: &str,
    patch: &dyn Fn(&mut PppRecords),
) -> CmdRender {
    shape_vertices(m, vertices);
    let vs = colour_vs(m, VERTICES);
    let uniforms = [1.0f32.to_bits(), 0, (1.0f32 / 255.0).to_bits()];
    let fs = m.program(fs, 0x4000, 0x100, &uniforms, UNIFORMS + 0x300, 0, None);
    let draw = Shapes::new(primitive, vertices.len() as u32);
    draw_shapes(m, draw, vs, 7, fs, Some((0x5000, 1)), None, None, patch)
}

#[test_log::test]
fn occlusion_queries_count_the_samples_that_pass_into_the_visibility_buffer() {
    use agx_hw::formats::{CoefficientSource, FragmentOcclusionQuery, ShadeModel, VisibilityMode};
    const RESULTS: u64 = 0xB_0000;
    let m = Machine::new(5000);
    source_table(
        &m,
        1,
        CoefficientSource::PrimitiveId,
        ShadeModel::FlatVertex0,
    );
    let v = |x: f32, y: f32| ([x, y], 0.5f32, [0.0f32; 3]);
    let triangle = [v(4.0, 4.0), v(44.0, 8.0), v(12.0, 50.0)];
    let covered = (0..64usize * 64)
        .filter(|i| {
            let (x, y) = ((i % 64) as f64 + 0.5, (i / 64) as f64 + 0.5);
            covers([[4.0, 4.0], [44.0, 8.0], [12.0, 50.0]], x, y)
        })
        .count() as u64;
    assert!(covered > 500);
    // Entry 3 counts (and holds 5 already: counts add); entry 1 is
    // boolean; entry 2 belongs to no draw.
    for (index, mode, before, want) in [
        (3u32, VisibilityMode::Counting, 5u64, 5 + covered),
        (1, VisibilityMode::Boolean, 0, 1),
    ] {
        m.poke(m.data, RESULTS, &[0u8; 32]);
        m.poke(
            m.data,
            RESULTS + 8 * u64::from(index),
            &before.to_le_bytes(),
        );
        m.poke(m.data, RESULTS + 16, &7u64.to_le_bytes());
        let query = move |records: &mut PppRecords| {
            records.fragment_control = Some(FragmentControl {
                visibility_mode: mode,
                ..FragmentControl::default()
            });
            records.occlusion_query = Some(FragmentOcclusionQuery { index });
        };
        let mut render = table_pass(&m, Primitive::Triangles, &triangle, ID_FS, &query);
        render.isp_oclqry_base = DATA_VA + RESULTS;
        assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
        let got = m.peek(m.data, RESULTS + 8 * u64::from(index), 8);
        assert_eq!(
            u64::from_le_bytes(got.try_into().unwrap()),
            want,
            "{mode:?}"
        );
        let untouched = m.peek(m.data, RESULTS + 16, 8);
        assert_eq!(u64::from_le_bytes(untouched.try_into().unwrap()), 7);
    }
}

/// [`COLOUR_VS`] that also writes the layer-and-viewport word: each
/// vertex's eighth word, at output 7.
const LAYER_VS: &str = "
    device_load 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r5, unsigned, lsl 3
    device_load 0, i32, xyzw, r12_r13_r14_r15, u2_u3, r5, unsigned, lsl 3
    wait 0
    st_var 1, r8, 0
    st_var 1, r9, 1
    st_var 1, r10, 2
    st_var 1, r11, 3
    st_var 1, r12, 4
    st_var 1, r13, 5
    st_var 1, r14, 6
    st_var 1, r15, 7
    stop";

/// The viewport index (the high 16 bits of the layer-and-viewport word)
/// picks the primitive's viewport and, with the scissor on, the scissor
/// after the state's first: a full-screen quad through viewport 1 (clip
/// space onto the top-left 32x32 pixels) covers those pixels, and with
/// scissors 2 and 3 (the state names 2) only scissor 3's rectangle.
#[test_log::test]
fn the_viewport_index_picks_the_viewport_and_its_scissor() {
    use agx_hw::formats::{DepthBiasScissor, OutputSelect, Scissor, ShadeModel, VaryingCounts};
    let m = Machine::new(5000);
    let corners = [
        [0.0f32, 0.0],
        [64.0, 0.0],
        [0.0, 64.0],
        [64.0, 0.0],
        [64.0, 64.0],
        [0.0, 64.0],
    ];
    let mut words = Vec::new();
    for corner in corners {
        let position = clip(&[corner]);
        words.extend([position[0], position[1], 0.5f32.to_bits(), 1.0f32.to_bits()]);
        words.extend([0.0f32, 1.0, 0.0].map(f32::to_bits));
        words.push(1 << 16);
    }
    m.poke_u32s(VERTICES, &words);
    let mut uniforms = pair(DATA_VA + VERTICES);
    uniforms.extend(pair(DATA_VA + VERTICES + 16));
    let vs = m.program(LAYER_VS, 0x3000, 0xC0, &uniforms, UNIFORMS + 0x200, 0, None);
    cf_table(&m, 3, ShadeModel::Linear);
    let fs = fs_program(&m, COLOUR_FS);
    let rectangle = |x0: u32, y0: u32, x1: u32, y1: u32| Scissor {
        min_x: x0,
        min_y: y0,
        max_x: x1,
        max_y: y1,
        min_z: 0.0,
        max_z: 1.0,
    };
    let scissors = [
        rectangle(0, 0, 1, 1),
        rectangle(0, 0, 1, 1),
        rectangle(0, 0, 64, 64),
        rectangle(8, 8, 24, 24),
    ];
    let bytes: Vec<u8> = scissors.iter().flat_map(|s| s.pack().unwrap()).collect();
    m.poke(m.data, SCISSORS, &bytes);
    for scissor_enable in [false, true] {
        let two_viewports = |records: &mut PppRecords| {
            records.output_select = Some(OutputSelect {
                varyings: true,
                viewport_target: true,
                ..OutputSelect::default()
            });
            records.varying_counts_32 = Some(VaryingCounts {
                smooth: 3,
                ..VaryingCounts::default()
            });
            let viewports = &mut records.viewport.as_mut().unwrap().viewports;
            let first = viewports[0];
            viewports.push(Viewport {
                translate_x: 16.0,
                scale_x: 16.0,
                translate_y: 16.0,
                scale_y: -16.0,
                ..first
            });
            records.fragment_control = Some(FragmentControl {
                scissor_enable,
                ..FragmentControl::default()
            });
            records.depth_bias_scissor = Some(DepthBiasScissor {
                scissor: 2,
                depth_bias: 0,
            });
        };
        let draw = Shapes::new(Primitive::Triangles, 6);
        let mut render = draw_shapes(
            &m,
            draw,
            vs,
            8,
            fs,
            Some((0x5000, 1)),
            None,
            None,
            &two_viewports,
        );
        render.isp_scissor_base = DATA_VA + SCISSORS;
        assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
        let inside = |x: u32, y: u32| {
            if scissor_enable {
                (8..24).contains(&x) && (8..24).contains(&y)
            } else {
                x < 32 && y < 32
            }
        };
        for y in 0..64 {
            for x in 0..64 {
                let want = if inside(x, y) { [0, 255, 0] } else { [0, 0, 0] };
                assert_eq!(
                    rgb(&m, x as usize, y as usize),
                    want,
                    "scissor {scissor_enable}: pixel ({x}, {y})"
                );
            }
        }
    }
}

#[test_log::test]
fn a_layered_pass_draws_each_primitive_to_the_layer_its_vertices_name() {
    use agx_hw::formats::{OutputSelect, ShadeModel, VaryingCounts};
    let m = Machine::new(5000);
    // Two triangles: red on the left to layer 0, green on the right to
    // layer 1 (the low 16 bits of the layer-and-viewport word; Mesa puts
    // the viewport in the high ones).
    let triangles = [
        (
            [[4.0f32, 4.0], [28.0, 4.0], [4.0, 60.0]],
            [1.0f32, 0.0, 0.0],
            0u32,
        ),
        (
            [[36.0f32, 4.0], [60.0, 4.0], [36.0, 60.0]],
            [0.0, 1.0, 0.0],
            0x0005_0001,
        ),
    ];
    let mut words = Vec::new();
    for (corners, colour, layer) in triangles {
        for corner in corners {
            let position = clip(&[corner]);
            words.extend([position[0], position[1], 0.5f32.to_bits(), 1.0f32.to_bits()]);
            words.extend(colour.map(f32::to_bits));
            words.push(layer);
        }
    }
    m.poke_u32s(VERTICES, &words);
    let mut uniforms = pair(DATA_VA + VERTICES);
    uniforms.extend(pair(DATA_VA + VERTICES + 16));
    let vs = m.program(LAYER_VS, 0x3000, 0xC0, &uniforms, UNIFORMS + 0x200, 0, None);
    cf_table(&m, 3, ShadeModel::Linear);
    let fs = fs_program(&m, COLOUR_FS);
    let layered_output = |records: &mut PppRecords| {
        records.output_select = Some(OutputSelect {
            varyings: true,
            render_target: true,
            ..OutputSelect::default()
        });
        records.varying_counts_32 = Some(VaryingCounts {
            smooth: 3,
            ..VaryingCounts::default()
        });
    };
    let draw = Shapes::new(Primitive::Triangles, 6);
    let mut render = draw_shapes(
        &m,
        draw,
        vs,
        8,
        fs,
        Some((0x5000, 1)),
        None,
        None,
        &layered_output,
    );
    render.layers = 2;
    let layer_bytes = STRIDE * u32::from(SIZE);
    let pbe = Pbe {
        extended: true,
        depth_linear: 2,
        layer_stride_linear: u64::from(layer_bytes),
        ..pbe(u32::from(SIZE), u32::from(SIZE))
    };
    m.poke(m.data, PBE, &pbe.pack().unwrap());
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let both = m.peek(m.data, IMAGE, 2 * layer_bytes as usize);
    for (layer, colour, covered) in [
        (0usize, [255u8, 0, 0], (10usize, 10usize)),
        (1, [0, 255, 0], (42, 10)),
    ] {
        let at = |x: usize, y: usize| layer * layer_bytes as usize + y * STRIDE as usize + 4 * x;
        let (x, y) = covered;
        assert_eq!(
            both[at(x, y)..at(x, y) + 3],
            colour,
            "layer {layer}: its triangle"
        );
        let (ox, oy) = if layer == 0 { (42, 10) } else { (10, 10) };
        assert_eq!(
            both[at(ox, oy)..at(ox, oy) + 3],
            [0, 0, 0],
            "layer {layer}: the other's"
        );
    }
}

/// Fragment shader: red, green and blue = the threadgroup position's
/// x, y and z + 7 (the tile and the layer), as integers / 255.
const TILE_POSITION_FS: &str = "
    get_sr r6, sr0
    get_sr r7, sr1
    get_sr r8, sr2
    iadd r8, r8, 7
    convert u32_to_f, r2, r6, rte
    fmul32 r2, r2, u2
    convert u32_to_f, r3, r7, rte
    fmul32 r3, r3, u2
    convert u32_to_f, r4, r8, rte
    fmul32 r4, r4, u2
    mov r5, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

#[test_log::test]
fn fragment_programs_read_their_tile_and_layer_as_the_threadgroup_position() {
    use agx_hw::formats::{CoefficientSource, ShadeModel};
    // Mesa reads gl_Layer (and a layered background program's layer) as
    // the threadgroup position's z; a per-tile program's threadgroup is
    // its tile, 32x32 pixels here.
    let m = Machine::new(5000);
    source_table(
        &m,
        1,
        CoefficientSource::PrimitiveId,
        ShadeModel::FlatVertex0,
    );
    let v = |x: f32, y: f32| ([x, y], 0.5f32, [0.0f32; 3]);
    let covering = [v(-64.0, -64.0), v(192.0, 0.0), v(0.0, 192.0)];
    let pixels = draw_with_table(
        &m,
        Primitive::Triangles,
        &covering,
        TILE_POSITION_FS,
        &|_| {},
    );
    for (x, y, tile) in [
        (8usize, 8usize, [0u8, 0]),
        (40, 8, [1, 0]),
        (8, 40, [0, 1]),
        (63, 63, [1, 1]),
    ] {
        let at = y * STRIDE as usize + 4 * x;
        assert_eq!(
            pixels[at..at + 3],
            [tile[0], tile[1], 7],
            "pixel ({x}, {y})"
        );
    }
}

#[test_log::test]
fn point_sprites_interpolate_their_coordinate_from_the_origin_the_object_type_names() {
    use agx_hw::formats::{CoefficientSource, FragmentFace2, ObjectType, ShadeModel};
    let m = Machine::new(5000);
    source_table(&m, 2, CoefficientSource::PointCoord, ShadeModel::Linear);
    // An 8-pixel point at (20, 20): the square [16, 24)^2.
    let point = [([20.0f32, 20.0f32], 0.5f32, [8.0f32, 0.0, 0.0])];
    for (object_type, flipped) in [
        (ObjectType::PointSpriteUv01, false),
        (ObjectType::PointSpriteUv10, true),
    ] {
        let layout = output_layout(true, 0);
        let patch = |records: &mut PppRecords| {
            layout(records);
            records.fragment_front_face_2 = Some(FragmentFace2 {
                object_type,
                ..FragmentFace2::default()
            });
        };
        let pixels = draw_with_table(&m, Primitive::Points, &point, TWO_FS, &patch);
        let unorm = |v: f64| (v * 255.0).round() as u8;
        for y in 0..SIZE as usize {
            for x in 0..SIZE as usize {
                let at = y * STRIDE as usize + 4 * x;
                let inside = (16..24).contains(&x) && (16..24).contains(&y);
                let want = if inside {
                    // (0, 0) at the top-left corner (y down), t from the
                    // bottom when flipped.
                    let s = (x as f64 + 0.5 - 16.0) / 8.0;
                    let t = (y as f64 + 0.5 - 16.0) / 8.0;
                    [unorm(s), unorm(if flipped { 1.0 - t } else { t }), 0, 255]
                } else {
                    [0; 4]
                };
                assert_eq!(pixels[at..at + 4], want, "{object_type:?} pixel ({x}, {y})");
            }
        }
    }
}

#[test_log::test]
fn fragment_shaders_read_the_primitive_id_and_lines_take_flat_values_from_the_provoking_vertex() {
    use agx_hw::formats::{CoefficientSource, Cull2, ShadeModel};
    let m = Machine::new(5000);
    // Three triangles side by side; each pixel's red is its triangle's
    // index in the draw.
    source_table(
        &m,
        1,
        CoefficientSource::PrimitiveId,
        ShadeModel::FlatVertex0,
    );
    let v = |x: f32, y: f32| ([x, y], 0.5f32, [0.0f32; 3]);
    let mut triangles = Vec::new();
    for i in 0..3 {
        let x = 4.0 + 20.0 * i as f32;
        triangles.extend([v(x, 4.0), v(x + 16.0, 4.0), v(x, 60.0)]);
    }
    let needs_id = |records: &mut PppRecords| {
        records.cull_2 = Some(Cull2 {
            needs_primitive_id: true,
            ..Cull2::default()
        });
    };
    let pixels = draw_with_table(&m, Primitive::Triangles, &triangles, ID_FS, &needs_id);
    for i in 0..3usize {
        let t = [0, 1, 2].map(|k| {
            let (at, _, _) = triangles[3 * i + k];
            [f64::from(at[0]), f64::from(at[1])]
        });
        let mut seen = 0;
        for y in 0..SIZE as usize {
            for x in 0..SIZE as usize {
                if covers(t, x as f64 + 0.5, y as f64 + 0.5) {
                    let at = y * STRIDE as usize + 4 * x;
                    assert_eq!(pixels[at], i as u8, "triangle {i} pixel ({x}, {y})");
                    seen += 1;
                }
            }
        }
        assert!(seen > 100, "triangle {i}: {seen} pixels");
    }
    // A line from a red vertex to a blue one, flat: the first vertex's
    // colour with FlatVertex0, the last's with FlatVertex2.
    let line = [
        ([4.5f32, 30.5f32], 0.5f32, [1.0f32, 0.0, 0.0]),
        ([60.5, 30.5], 0.5, [0.0, 0.0, 1.0]),
    ];
    for (shade_model, want) in [
        (ShadeModel::FlatVertex0, [255, 0, 0, 255]),
        (ShadeModel::FlatVertex2, [0, 0, 255, 255]),
    ] {
        cf_table(&m, 3, shade_model);
        shape_vertices(&m, &line);
        let vs = colour_vs(&m, VERTICES);
        let fs = fs_program(&m, COLOUR_FS);
        let draw = Shapes::new(Primitive::Lines, 2);
        let render = draw_shapes(&m, draw, vs, 7, fs, Some((0x5000, 1)), None, None, &|_| {});
        assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
        let pixels = image(&m, SIZE as usize);
        for x in 4..60 {
            let at = 30 * STRIDE as usize + 4 * x;
            assert_eq!(pixels[at..at + 4], want, "{shade_model:?} pixel ({x}, 30)");
        }
    }
}

/// Draws `vertices` as triangles, their three values a linear varying at
/// cf0-cf2, with the fragment program `fs_source`.
fn draw_linear_varyings(m: &Machine, vertices: &[([f32; 2], f32, [f32; 3])], fs_source: &str) {
    shape_vertices(m, vertices);
    let vs = colour_vs(m, VERTICES);
    cf_table(m, 3, agx_hw::formats::ShadeModel::Linear);
    let fs = fs_program(m, fs_source);
    let draw = Shapes::new(Primitive::Triangles, vertices.len() as u32);
    let render = draw_shapes(m, draw, vs, 7, fs, Some((0x5000, 1)), None, None, &|_| {});
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
}

/// Coefficients are relative to the 32x32 tile holding the pixel: `ldcf`
/// of a varying that runs from 0 at x = 0 to 1 at x = 64 gives C = 0 (its
/// value at the corner) in the tiles at x 0-31 and C = 0.5 in those at x
/// 32-63 (Mesa's `interpolateAtOffset` takes pixel coordinates modulo 32).
#[test_log::test]
fn coefficients_are_relative_to_the_32x32_tile() {
    let m = Machine::new(5000);
    let v = |x: f32, y: f32| ([x, y], 0.5f32, [x / 64.0, 0.0, 0.0]);
    let quad = [
        v(0.0, 0.0),
        v(64.0, 0.0),
        v(0.0, 64.0),
        v(64.0, 0.0),
        v(64.0, 64.0),
        v(0.0, 64.0),
    ];
    draw_linear_varyings(
        &m,
        &quad,
        "
    ldcf r2_r3_r4, cf0, 0
    mov r8, r4
    mov_imm r9, 0
    mov_imm r10, 0
    mov r11, u0
    st_tile r8_r9_r10_r11, u8norm, 0, xyzw, 0, 255, r0, 0
    stop",
    );
    for (x, y, red) in [(5, 5, 0), (31, 40, 0), (32, 5, 128), (60, 60, 128)] {
        assert_eq!(rgb(&m, x, y), [red, 0, 0], "pixel ({x}, {y})");
    }
}

/// Where a varying changes along one axis only (piglit's
/// `fs-interpolateAtOffset-*` interpolate a screen-aligned rectangle's
/// positions), `iter` agrees bit for bit with Mesa's lowering of
/// `interpolateAtOffset` at offset 0 (`agx_nir_lower_interpolation.c`:
/// `fma(x, A, fma(y, B, C))` of the coefficient registers at the pixel's
/// centre relative to its 32x32 tile): one of the products is 0, and both
/// round once. The shader writes red where either component differs.
#[test_log::test]
fn iter_agrees_with_mesas_interpolate_at_offset_where_a_varying_is_axis_aligned() {
    let m = Machine::new(5000);
    let v = |x: f32, y: f32| ([x, y], 0.5f32, [3.3 + x * 0.1237, 0.7 - y * 0.0457, 0.0]);
    let quad = [
        v(0.0, 0.0),
        v(64.0, 0.0),
        v(0.0, 64.0),
        v(64.0, 0.0),
        v(64.0, 64.0),
        v(0.0, 64.0),
    ];
    draw_linear_varyings(
        &m,
        &quad,
        "
    get_sr r10, sr80
    get_sr r11, sr81
    and r10, r10, 31
    and r11, r11, 31
    convert u32_to_f, r5, r10, rte
    convert u32_to_f, r6, r11, rte
    fadd32 r5, r5, 0.5
    fadd32 r6, r6, 0.5
    mov_imm r9, 0x3f800000
    mov_imm r20, 0
    iter r12_r13, cf0, center, 0, 0, 0, 0, 0
    ldcf r2_r3_r4, cf0, 0
    fmadd32 r7, r6, r3, r4
    fmadd32 r7, r5, r2, r7
    icmpsel ueq, r20, r7, r12, r20, r9
    ldcf r2_r3_r4, cf1, 0
    fmadd32 r7, r6, r3, r4
    fmadd32 r7, r5, r2, r7
    icmpsel ueq, r20, r7, r13, r20, r9
    mov_imm r21, 0
    mov_imm r22, 0
    mov r23, r9
    st_tile r20_r21_r22_r23, u8norm, 0, xyzw, 0, 255, r0, 0
    stop",
    );
    let pixels = image(&m, SIZE as usize);
    for y in 0..64 {
        for x in 0..64 {
            let at = y * STRIDE as usize + 4 * x;
            assert_eq!(
                pixels[at..at + 4],
                [0, 0, 0, 255],
                "pixel ({x}, {y}): iter and the fmas differ"
            );
        }
    }
}

/// `iter` computes A x + B y + C from the coefficient registers `ldcf`
/// reads, (x, y) the pixel's centre relative to its 32x32 tile, exactly
/// and rounded once to f32. The shader stores each pixel's `iter` and
/// `ldcf` words; the reference is their f64 sum (exact products, one f64
/// rounding) where that is not within a few f64 ulps of an f32 rounding
/// tie. Mesa's two fused multiply-adds differ at some of these pixels.
#[test_log::test]
fn iter_is_the_coefficients_dot_product_rounded_once() {
    const OUT: u64 = 0x10_0000;
    let m = Machine::new(5000);
    let value = |x: f32, y: f32| 3.3 + 0.1237 * x - 0.0457 * y;
    let v = |x: f32, y: f32| ([x, y], 0.5f32, [value(x, y), 0.0, 0.0]);
    shape_vertices(&m, &[v(1.3, 2.7), v(63.1, 9.9), v(11.7, 62.4)]);
    m.poke_u32s(OUT, &vec![u32::MAX; 4 * 64 * 64]);
    let vs = colour_vs(&m, VERTICES);
    cf_table(&m, 3, agx_hw::formats::ShadeModel::Linear);
    let mut uniforms = vec![1.0f32.to_bits(), 0];
    uniforms.extend(pair(DATA_VA + OUT));
    let fs = m.program(
        "
    iter r12, cf0, center, 0, 0, 0, 0, 0
    ldcf r13_r14_r15, cf0, 0
    get_sr r10, sr80
    get_sr r11, sr81
    imadd r16, r11, 64, r10
    device_store 0, i32, xyzw, r12_r13_r14_r15, u2_u3, r16, unsigned, lsl 2, 0
    st_tile r12_r13_r14_r15, u8norm, 0, xyzw, 0, 255, r0, 0
    stop",
        0x4000,
        0x100,
        &uniforms,
        UNIFORMS + 0x300,
        0,
        None,
    );
    let draw = Shapes::new(Primitive::Triangles, 3);
    let render = draw_shapes(&m, draw, vs, 7, fs, Some((0x5000, 1)), None, None, &|_| {});
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let out = m.peek_u32s(OUT, 4 * 64 * 64);
    let (mut drawn, mut near_ties, mut fmas_differ) = (0, 0, 0);
    for (pixel, words) in out.chunks_exact(4).enumerate() {
        if words == [u32::MAX; 4] {
            continue;
        }
        drawn += 1;
        let [iter, a, b, c] = [words[0], words[1], words[2], words[3]].map(f32::from_bits);
        let x = (pixel % 64 % 32) as f32 + 0.5;
        let y = (pixel / 64 % 32) as f32 + 0.5;
        let sum = f64::from(a) * f64::from(x) + f64::from(b) * f64::from(y) + f64::from(c);
        // The f32s either side of the sum and the tie between them.
        let nearest = sum as f32;
        let other = if f64::from(nearest) <= sum {
            nearest.next_up()
        } else {
            nearest.next_down()
        };
        let tie = (f64::from(nearest) + f64::from(other)) / 2.0;
        if (sum - tie).abs() <= 4.0 * f64::EPSILON * sum.abs() {
            near_ties += 1;
            continue;
        }
        assert_eq!(
            iter.to_bits(),
            (sum as f32).to_bits(),
            "pixel {pixel}: {iter} vs {sum}"
        );
        if x.mul_add(a, y.mul_add(b, c)) != iter {
            fmas_differ += 1;
        }
    }
    assert!(drawn > 1000, "{drawn} pixels drawn");
    assert!(near_ties < 10, "{near_ties} pixels near a tie");
    assert!(
        fmas_differ > 10,
        "{fmas_differ} pixels where the fmas differ"
    );
}

/// `iter` with bit 23 takes its coefficient register from a 16-bit
/// register (Mesa's dynamically indexed varying arrays): with r10l = 3
/// it reads cf3-cf5, here the colour bound flat from vertex 0, where the
/// field (20) would name a register no binding fills.
#[test_log::test]
fn iter_reads_the_coefficient_register_a_register_names() {
    use agx_hw::formats::{CfBinding, CfBindingHeader, CoefficientSource, ShadeModel};
    let m = Machine::new(5000);
    let v = |x: f32, y: f32, colour: [f32; 3]| ([x, y], 0.5f32, colour);
    let triangle = [
        v(8.5, 8.5, [1.0, 0.0, 0.0]),
        v(56.5, 8.5, [0.0, 1.0, 0.0]),
        v(8.5, 56.5, [0.0, 0.0, 1.0]),
    ];
    shape_vertices(&m, &triangle);
    let vs = colour_vs(&m, VERTICES);
    let mut table = CfBindingHeader {
        slot_count: 4,
        coefficient_register_count: 6,
    }
    .pack()
    .unwrap()
    .to_vec();
    for (shade_model, base_coefficient_register) in
        [(ShadeModel::Linear, 0), (ShadeModel::FlatVertex0, 3)]
    {
        table.extend(
            CfBinding {
                components: 3,
                shade_model,
                source: CoefficientSource::Varying,
                base_slot: 1,
                base_coefficient_register,
            }
            .pack()
            .unwrap(),
        );
    }
    m.poke(m.usc, 0x5000, &table);
    let fs = fs_program(
        &m,
        "
    mov_imm r10, 3
    iter r2_r3_r4, cf20, center, 0, 0, 0, 0, 1
    mov r5, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop",
    );
    let draw = Shapes::new(Primitive::Triangles, 3);
    let render = draw_shapes(&m, draw, vs, 7, fs, Some((0x5000, 2)), None, None, &|_| {});
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    for (x, y) in [(10, 10), (40, 12), (12, 40), (25, 25)] {
        assert_eq!(rgb(&m, x, y), [255, 0, 0], "pixel ({x}, {y})");
    }
}

/// COLOUR_VS and COLOUR_FS drawing `vertices` as `primitive`, the
/// colour read flat with `shade_model`, the VDM's provoking vertex the
/// first or not and the PPP records edited by `patch`; returns the
/// target's pixels.
fn draw_flat(
    m: &Machine,
    primitive: Primitive,
    vertices: &[([f32; 2], f32, [f32; 3])],
    shade_model: agx_hw::formats::ShadeModel,
    provoking_first: bool,
    patch: &dyn Fn(&mut PppRecords),
) -> Vec<u8> {
    use agx_hw::formats::{VdmStateVertexUnknown, VdmVertex};
    cf_table(m, 3, shade_model);
    shape_vertices(m, vertices);
    let vs = colour_vs(m, VERTICES);
    let fs = fs_program(m, COLOUR_FS);
    let mut draw = Shapes::new(primitive, vertices.len() as u32);
    draw.vertex_flags = Some(VdmStateVertexUnknown {
        flat_shading_control: if provoking_first {
            VdmVertex::V0
        } else {
            VdmVertex::V2
        },
        ..VdmStateVertexUnknown::default()
    });
    let render = draw_shapes(m, draw, vs, 7, fs, Some((0x5000, 1)), None, None, patch);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    image(m, SIZE as usize)
}

#[test_log::test]
fn flat_values_come_from_the_primitives_provoking_vertex_in_every_piece_of_it() {
    use agx_hw::formats::{PolygonMode, ShadeModel};
    let m = Machine::new(5000);
    const RED: [u8; 4] = [255, 0, 0, 255];
    const GREEN: [u8; 4] = [0, 255, 0, 255];
    const BLUE: [u8; 4] = [0, 0, 255, 255];
    const WHITE: [u8; 4] = [255, 255, 255, 255];
    let pixel = |pixels: &[u8], x: usize, y: usize| {
        let at = y * STRIDE as usize + 4 * x;
        [pixels[at], pixels[at + 1], pixels[at + 2], pixels[at + 3]]
    };
    let drawn = |pixels: &[u8]| {
        (0..SIZE as usize)
            .flat_map(|y| (0..SIZE as usize).map(move |x| (x, y)))
            .map(|(x, y)| pixel(pixels, x, y))
            .filter(|p| p[3] != 0)
            .collect::<Vec<_>>()
    };
    let v = |x: f32, y: f32, z: f32, colour: [f32; 3]| ([x, y], z, colour);
    let (r, g, b) = ([1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]);
    let triangle = [
        v(8.5, 8.5, 0.5, r),
        v(40.5, 8.5, 0.5, g),
        v(8.5, 40.5, 0.5, b),
    ];
    let mode = |polygon_mode| {
        move |records: &mut PppRecords| {
            records.fragment_front_face = Some(FragmentFace {
                polygon_mode,
                depth_function: ZsFunc::Always,
                ..FragmentFace::default()
            });
        }
    };
    // A polygon mode draws the triangle's edges or corners each in the
    // triangle's provoking colour (GL's rule; each edge's own first or
    // last vertex would give three colours).
    for polygon_mode in [PolygonMode::Line, PolygonMode::Point] {
        for (shade_model, want) in [
            (ShadeModel::FlatVertex0, RED),
            (ShadeModel::FlatVertex2, BLUE),
        ] {
            let pixels = draw_flat(
                &m,
                Primitive::Triangles,
                &triangle,
                shade_model,
                false,
                &mode(polygon_mode),
            );
            let got = drawn(&pixels);
            assert!(got.len() >= 3, "{polygon_mode:?}: {} pixels", got.len());
            assert!(
                got.iter().all(|p| *p == want),
                "{polygon_mode:?} {shade_model:?}: {:?}",
                got.iter().find(|p| **p != want)
            );
        }
    }
    // A triangle the near plane cuts (its third vertex behind it) is a
    // quadrilateral, drawn as two triangles, two of whose corners clipping
    // made: every pixel still takes the third vertex's colour.
    let cut = [
        v(8.5, 8.5, 0.5, r),
        v(56.5, 8.5, 0.5, g),
        v(8.5, 56.5, -0.5, b),
    ];
    let pixels = draw_flat(
        &m,
        Primitive::Triangles,
        &cut,
        ShadeModel::FlatVertex2,
        false,
        &|_| {},
    );
    let got = drawn(&pixels);
    assert!(got.len() > 200, "{} pixels", got.len());
    assert!(
        got.iter().all(|p| *p == BLUE),
        "{:?}",
        got.iter().find(|p| **p != BLUE)
    );
    // A strip of two triangles (v0 v1 v2, then v1 v3 v2 from v1 v2 v3):
    // with the first vertex provoking, vertex 0 of the second is v1; with
    // the last provoking, its vertex 2 is v3.
    let strip = [
        v(8.5, 8.5, 0.5, r),
        v(8.5, 56.5, 0.5, g),
        v(56.5, 8.5, 0.5, b),
        v(56.5, 56.5, 0.5, [1.0, 1.0, 1.0]),
    ];
    for (shade_model, first, want) in [
        (ShadeModel::FlatVertex0, true, [RED, GREEN]),
        (ShadeModel::FlatVertex2, false, [BLUE, WHITE]),
    ] {
        let pixels = draw_flat(
            &m,
            Primitive::TriangleStrip,
            &strip,
            shade_model,
            first,
            &|_| {},
        );
        assert_eq!(
            pixel(&pixels, 12, 12),
            want[0],
            "{shade_model:?}: first triangle"
        );
        assert_eq!(
            pixel(&pixels, 52, 52),
            want[1],
            "{shade_model:?}: second triangle"
        );
    }
}

/// An indexed draw of `primitive` from the u16 index buffer at
/// `indices` (a data-buffer offset), restart enabled or not; indirect
/// when `indirect` names the arguments (a data-buffer offset).
fn indexed_block(
    primitive: Primitive,
    indices: u64,
    count: u32,
    restart: bool,
    indirect: Option<u64>,
) -> VdmBlock {
    use agx_hw::formats::{IndexListBufferLo, IndexListIndirectBuffer, IndexSize};
    let address = DATA_VA + indices;
    VdmBlock::IndexList(IndexListBlock {
        header: IndexList {
            primitive,
            restart_enable: restart,
            index_size: IndexSize::U16,
            index_buffer_hi: (address >> 32) as u32,
            ..IndexList::default()
        },
        buffer_lo: Some(IndexListBufferLo {
            buffer_lo: address as u32,
        }),
        count: indirect.is_none().then_some(IndexListCount { count }),
        instances: indirect
            .is_none()
            .then_some(IndexListInstances { count: 1 }),
        start: indirect.is_none().then_some(IndexListStart { start: 0 }),
        indirect: indirect.map(|at| IndexListIndirectBuffer {
            address: DATA_VA + at,
        }),
        ..IndexListBlock::default()
    })
}

/// COLOUR_VS + COUNT_FS over `vertices` drawn by `draw`; the counts.
fn count_draw(m: &Machine, vertices: &[([f32; 2], f32, [f32; 3])], draw: Shapes) -> Vec<u8> {
    shape_vertices(m, vertices);
    let vs = colour_vs(m, VERTICES);
    let fs = count_fs(m);
    let render = draw_shapes(m, draw, vs, 7, fs, None, None, None, &|_| {});
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    counts(m)
}

#[test_log::test]
fn primitive_restart_starts_a_new_strip_and_indirect_draws_read_their_arguments() {
    const INDICES: u64 = 0xD_0000;
    const ARGUMENTS: u64 = 0xD_1000;
    let m = Machine::new(5000);
    let v = |x: f32, y: f32| ([x, y], 0.5f32, [0.0f32; 3]);
    // Two quads, each a four-vertex strip: [4, 28) x [4, 28) and
    // [36, 60) x [36, 60).
    let vertices = [
        v(4.0, 4.0),
        v(28.0, 4.0),
        v(4.0, 28.0),
        v(28.0, 28.0),
        v(36.0, 36.0),
        v(60.0, 36.0),
        v(36.0, 60.0),
        v(60.0, 60.0),
    ];
    let quads = |x: usize, y: usize| {
        u8::from((4..28).contains(&x) && (4..28).contains(&y))
            + u8::from((36..60).contains(&x) && (36..60).contains(&y))
    };
    let put_indices = |indices: &[u16]| {
        let bytes: Vec<u8> = indices.iter().flat_map(|i| i.to_le_bytes()).collect();
        m.poke(m.data, INDICES, &bytes);
    };
    put_indices(&[0, 1, 2, 3, 0xFFFF, 4, 5, 6, 7]);
    let strip = Shapes {
        block: Some(indexed_block(
            Primitive::TriangleStrip,
            INDICES,
            9,
            true,
            None,
        )),
        restart_index: Some(0xFFFF),
        ..Shapes::new(Primitive::TriangleStrip, 9)
    };
    assert_counts(&count_draw(&m, &vertices, strip), quads, "restarted strip");
    // A fan restarts around a new centre (without the restart, (0, 4, 5)
    // would join the quads).
    put_indices(&[0, 1, 3, 2, 0xFFFF, 4, 5, 7, 6]);
    let fan = Shapes {
        block: Some(indexed_block(
            Primitive::TriangleFan,
            INDICES,
            9,
            true,
            None,
        )),
        restart_index: Some(0xFFFF),
        ..Shapes::new(Primitive::TriangleFan, 9)
    };
    assert_counts(&count_draw(&m, &vertices, fan), quads, "restarted fan");
    // Restart with a loop: each run closes on its own first vertex.
    put_indices(&[0, 1, 3, 2, 0xFFFF, 4, 5, 7, 6]);
    let loops = Shapes {
        block: Some(indexed_block(Primitive::LineLoop, INDICES, 9, true, None)),
        restart_index: Some(0xFFFF),
        ..Shapes::new(Primitive::LineLoop, 9)
    };
    let got = count_draw(&m, &vertices, loops);
    // A one-pixel line along y = 4 covers the centres in [3.5, 4.5): row
    // 3 (the parallelogram's top edge is a top edge).
    assert_eq!(got[3 * SIZE as usize + 10], 1, "the first loop's top side");
    assert_eq!(
        got[16 * SIZE as usize + 3],
        1,
        "the first loop's closing side"
    );
    assert_eq!(
        got[48 * SIZE as usize + 35],
        1,
        "the second loop's closing side"
    );
    assert_eq!(got[32 * SIZE as usize + 32], 0, "nothing joins the loops");
    // An indexed indirect draw: six indices from the fourth (the first
    // three are not drawn) as two triangles of the second quad.
    put_indices(&[0, 1, 2, 4, 5, 6, 5, 7, 6]);
    m.poke_u32s(ARGUMENTS, &[6, 1, 3, 0, 0]);
    let indirect = Shapes {
        block: Some(indexed_block(
            Primitive::Triangles,
            INDICES,
            0,
            false,
            Some(ARGUMENTS),
        )),
        ..Shapes::new(Primitive::Triangles, 0)
    };
    assert_counts(
        &count_draw(&m, &vertices, indirect),
        |x, y| u8::from((36..60).contains(&x) && (36..60).contains(&y)),
        "indexed indirect",
    );
    // A non-indexed indirect draw: four vertices from the fifth, a strip.
    m.poke_u32s(ARGUMENTS, &[4, 1, 4, 0]);
    let block = VdmBlock::IndexList(IndexListBlock {
        header: IndexList {
            primitive: Primitive::TriangleStrip,
            ..IndexList::default()
        },
        indirect: Some(agx_hw::formats::IndexListIndirectBuffer {
            address: DATA_VA + ARGUMENTS,
        }),
        ..IndexListBlock::default()
    });
    let direct = Shapes {
        block: Some(block),
        ..Shapes::new(Primitive::TriangleStrip, 0)
    };
    assert_counts(
        &count_draw(&m, &vertices, direct),
        |x, y| u8::from((36..60).contains(&x) && (36..60).contains(&y)),
        "non-indexed indirect",
    );
}

#[test_log::test]
fn a_pass_with_more_fragment_states_than_a_segment_holds_renders_partially() {
    use agx_hw::formats::DepthBiasScissor;
    let m = Machine::new(30000);
    // 2,100 draws, each with a PPP state of its own (its depth-bias and
    // scissor indices, unused, differ) and a triangle over one pixel:
    // more states than a segment's table holds (1,984), so the pass
    // renders what it binned and goes on.
    const DRAWS: u32 = 2100;
    let mut vertices = Vec::new();
    for i in 0..DRAWS {
        let (x, y) = ((i % 64) as f32, (i / 64) as f32);
        vertices.extend([
            [x + 0.25, y + 0.25],
            [x + 0.9, y + 0.25],
            [x + 0.25, y + 0.9],
        ]);
    }
    const MANY_VERTICES: u64 = 0x30_0000;
    m.poke_u32s(MANY_VERTICES, &clip(&vertices));
    let mut render = count_pass(&m, POSITION_VS, &pair(DATA_VA + MANY_VERTICES), 3);
    // The stream count_pass wrote: the vertex state, the PPP state, one
    // draw. Rebuild it with a state and a draw per triangle.
    let stream = m.peek(m.data, STREAM, 0x400);
    let ppp_at = block_at(&stream, VdmBlockType::PppStateUpdate);
    let mut vdm = stream[..ppp_at].to_vec();
    let base = m.peek(m.data, PPP, 0x100);
    let records = <PppRecords as agx_hw::seq::Sequence>::walk(&base)
        .unwrap()
        .value;
    const STATES: u64 = 0x20_0000;
    for i in 0..DRAWS {
        let state = PppRecords {
            depth_bias_scissor: Some(DepthBiasScissor {
                scissor: i,
                depth_bias: i,
            }),
            ..records.clone()
        };
        let mut bytes = Vec::new();
        state.build(&mut bytes).unwrap();
        let at = STATES + u64::from(i) * 0x100;
        m.poke(m.data, at, &bytes);
        VdmBlock::PppStateUpdate(PppState {
            pointer: DATA_VA + at,
            size_words: (bytes.len() / 4) as u32,
        })
        .build(&mut vdm)
        .unwrap();
        VdmBlock::IndexList(IndexListBlock {
            header: IndexList {
                primitive: Primitive::Triangles,
                ..IndexList::default()
            },
            count: Some(IndexListCount { count: 3 }),
            instances: Some(IndexListInstances { count: 1 }),
            start: Some(IndexListStart { start: 3 * i }),
            ..IndexListBlock::default()
        })
        .build(&mut vdm)
        .unwrap();
    }
    VdmBlock::StreamTerminate(VdmStreamTerminate::default())
        .build(&mut vdm)
        .unwrap();
    const BIG_STREAM: u64 = 0x38_0000;
    m.poke(m.data, BIG_STREAM, &vdm);
    render.vdm_ctrl_stream_base = DATA_VA + BIG_STREAM;
    // A partial render stores the tile and the next segment reloads it.
    let mut reload = pair(DATA_VA + IMAGE);
    reload.push(STRIDE / 4);
    let reload = m.program(RELOAD, 0x6000, 0x140, &reload, UNIFORMS + 0x400, 0, None);
    render.partial_bg = BgEot {
        usc: reload as u32 | 4,
        rsrc_spec: 0,
    };
    render.partial_eot = render.eot;
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_counts(
        &counts(&m),
        |x, y| u8::from(((y * 64 + x) as u32) < DRAWS),
        "one pixel per draw",
    );
    let queue = m.file.queue(m.queue).unwrap();
    assert!(queue.tvb_stats().partial_renders >= 1);
}

/// Per-sample shading as Mesa lowers it: a loop over the samples, each
/// interpolating at its own sample position and storing to its sample
/// alone; a sample mask kills sample 3. Red and green are x/64 and y/64
/// interpolated at the sample.
const PER_SAMPLE_FS: &str = "
    sample_mask 8, 0
    iter r2_r3, cf0, sample, 0, 0, 0, 0, 0
    mov r4, u1
    mov r5, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 1, r0, 0
    iter r2_r3, cf0, sample, 1, 0, 0, 0, 0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 2, r0, 0
    iter r2_r3, cf0, sample, 2, 0, 0, 0, 0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 4, r0, 0
    iter r2_r3, cf0, centroid, 0, 0, 0, 0, 0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 8, r0, 0
    stop";

#[test_log::test]
fn multisampled_shaders_interpolate_at_samples_and_kill_samples_by_mask() {
    let m = Machine::new(5000);
    // A triangle over most of the target, its values x/64 and y/64 (in
    // window pixels, linear).
    let corners = [[0.0f32, 0.0f32], [128.0, 0.0], [0.0, 128.0]];
    let vertices: Vec<_> = corners
        .iter()
        .map(|&[x, y]| ([x, y], 0.5f32, [x / 64.0, y / 64.0, 0.0]))
        .collect();
    shape_vertices(&m, &vertices);
    let vs = colour_vs(&m, VERTICES);
    let fs = m.program(
        PER_SAMPLE_FS,
        0x4000,
        0x100,
        &[1.0f32.to_bits(), 0],
        UNIFORMS + 0x300,
        0,
        None,
    );
    cf_table(&m, 2, agx_hw::formats::ShadeModel::Linear);
    let mut render = draw_pass(&m, 3, vs, 7, fs, Some((0x5000, 1)));
    render.samples = 4;
    let stride = 64 * 4 * 4;
    m.poke(m.data, MSAA_IMAGE, &vec![0xEE; 64 * stride as usize]);
    m.poke(m.data, PBE, &msaa_pbe(stride).pack().unwrap());
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let image = m.peek(m.data, MSAA_IMAGE, 64 * stride as usize);
    // The standard 4x positions.
    let positions = [
        (0.375, 0.125),
        (0.875, 0.375),
        (0.125, 0.625),
        (0.625, 0.875),
    ];
    let unorm = |v: f64| (v.clamp(0.0, 1.0) * 255.0).round() as u8;
    for y in 0..40usize {
        for x in 0..40usize {
            // Every sample of these pixels is covered (x + y < 128).
            for (s, (sx, sy)) in positions.iter().enumerate().take(3) {
                let at = y * stride as usize + (x * 4 + s) * 4;
                let want = [
                    unorm((x as f64 + sx) / 64.0),
                    unorm((y as f64 + sy) / 64.0),
                    0,
                    255,
                ];
                assert_eq!(image[at..at + 4], want, "pixel ({x}, {y}) sample {s}");
            }
            // Sample 3 is killed: the clear colour stays.
            let at = y * stride as usize + (x * 4 + 3) * 4;
            assert_eq!(image[at..at + 4], [0; 4], "pixel ({x}, {y}) sample 3");
        }
    }
    // Without the kill, sample 3 takes the centroid value: at a pixel
    // every sample covers, the centre.
    let fs = m.program(
        &PER_SAMPLE_FS.replace("    sample_mask 8, 0\n", ""),
        0x4000,
        0x100,
        &[1.0f32.to_bits(), 0],
        UNIFORMS + 0x300,
        0,
        None,
    );
    let mut render = draw_pass(&m, 3, vs, 7, fs, Some((0x5000, 1)));
    render.samples = 4;
    m.poke(m.data, PBE, &msaa_pbe(stride).pack().unwrap());
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let image = m.peek(m.data, MSAA_IMAGE, 64 * stride as usize);
    for (x, y) in [(0usize, 0usize), (10, 20), (39, 39)] {
        let at = y * stride as usize + (x * 4 + 3) * 4;
        let want = [
            unorm((x as f64 + 0.5) / 64.0),
            unorm((y as f64 + 0.5) / 64.0),
            0,
            255,
        ];
        assert_eq!(image[at..at + 4], want, "centroid of pixel ({x}, {y})");
    }
}

#[test_log::test]
fn stencil_is_tested_and_written_per_sample() {
    use agx_hw::formats::{FragmentStencil, StencilOp};
    let m = Machine::new(5000);
    let count = always_stencil(StencilOp::IncrSat);
    let first = [[4.0f32, 4.0], [44.0, 8.0], [12.0, 44.0]];
    let second = [[20.0f32, 20.0], [60.0, 24.0], [28.0, 60.0]];
    coloured(
        &m,
        &[
            (first, 0.5, [1.0, 0.0, 0.0]),
            (second, 0.5, [0.0, 1.0, 0.0]),
        ],
    );
    let stride = 64 * 4 * 4;
    let four_samples = |mut render: CmdRender| {
        render.samples = 4;
        render
    };
    let render = four_samples(stencil_pass(&m, 2, count, 0, false));
    m.poke(m.data, PBE, &msaa_pbe(stride).pack().unwrap());
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    // Then blue where a sample's stencil is 1: covered by exactly one of
    // the two triangles, at the sample's own position.
    let equal_one = FragmentStencil {
        depth_pass: StencilOp::Keep,
        compare: ZsFunc::Equal,
        ..count
    };
    coloured(&m, &[covering(0.5, [0.0, 0.0, 1.0])]);
    let render = four_samples(stencil_pass(&m, 1, equal_one, 1, true));
    m.poke(m.data, PBE, &msaa_pbe(stride).pack().unwrap());
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let image = m.peek(m.data, MSAA_IMAGE, 64 * stride as usize);
    let positions = [
        (0.375, 0.125),
        (0.875, 0.375),
        (0.125, 0.625),
        (0.625, 0.875),
    ];
    let (a, b) = (
        first.map(|[x, y]| [f64::from(x), f64::from(y)]),
        second.map(|[x, y]| [f64::from(x), f64::from(y)]),
    );
    let mut split = 0;
    for y in 0..64usize {
        for x in 0..64usize {
            let mut blue = 0;
            for (s, (sx, sy)) in positions.iter().enumerate() {
                let (px, py) = (x as f64 + sx, y as f64 + sy);
                let once = covers(a, px, py) != covers(b, px, py);
                let at = y * stride as usize + (x * 4 + s) * 4;
                let want: [u8; 3] = if once { [0, 0, 255] } else { [0, 0, 0] };
                assert_eq!(image[at..at + 3], want, "pixel ({x}, {y}) sample {s}");
                blue += usize::from(once);
            }
            split += usize::from(blue > 0 && blue < 4);
        }
    }
    assert!(split > 50, "pixels whose samples differ: {split}");
}

#[test_log::test]
fn a_shader_writing_depth_runs_the_stencil_test_before_it_and_the_depth_operations_after() {
    use agx_hw::formats::{FragmentStencil, StencilOp};
    let m = Machine::new(5000);
    let count = always_stencil(StencilOp::IncrSat);
    let first = (
        [[4.0f32, 4.0], [44.0, 8.0], [12.0, 44.0]],
        0.5,
        [1.0, 0.0, 0.0],
    );
    let second = (
        [[20.0f32, 20.0], [60.0, 24.0], [28.0, 60.0]],
        0.5,
        [0.0, 1.0, 0.0],
    );
    coloured(&m, &[first, second]);
    // The shader writes depth 0.25: the depth test (Always) passes at
    // its zs_emit, and the depth-pass operation counts.
    let uniforms = [1.0f32.to_bits(), 0.25f32.to_bits()];
    let render = stencil_pass_with_fs(&m, 2, count, 0, false, DEPTH_OUT_FS, &uniforms);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(stored_stencil(&m, 26, 26), 2, "both");
    assert_eq!(stored_stencil(&m, 8, 8), 1, "the first");
    assert_eq!(stored_stencil(&m, 60, 4), 0, "neither");
    // Equal to 1, else zero: the stencil-fail operation of the pixels
    // the test rejects before the shader runs, which draws nothing there.
    let equal_one = FragmentStencil {
        depth_pass: StencilOp::Keep,
        stencil_fail: StencilOp::Zero,
        compare: ZsFunc::Equal,
        ..count
    };
    coloured(&m, &[covering(0.5, [0.0, 0.0, 1.0])]);
    let render = stencil_pass_with_fs(&m, 1, equal_one, 1, true, DEPTH_OUT_FS, &uniforms);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(rgb(&m, 8, 8), [0, 0, 255]);
    assert_eq!(rgb(&m, 26, 26), [0, 0, 0]);
    assert_eq!(stored_stencil(&m, 26, 26), 0, "zeroed by the failed test");
    assert_eq!(stored_stencil(&m, 8, 8), 1, "kept");
}

/// Fragment shader: stencil reference u1 (zs_emit's s), colour cf0 with
/// alpha u0.
const STENCIL_OUT_FS: &str = "
    mov r12, u1
    zs_emit 255, s, r12l, 0
    iter r2_r3_r4, cf0, center, 0, 0, 0, 0, 0
    mov r5, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

#[test_log::test]
fn a_shader_writing_the_stencil_reference_replaces_the_states_in_the_test_and_its_operations() {
    use agx_hw::formats::{FragmentStencil, StencilOp};
    let m = Machine::new(5000);
    // Always pass and replace: the covered pixels take the shader's
    // reference 0x5A, not the state's 0.
    let replace = always_stencil(StencilOp::Replace);
    let first = (
        [[4.0f32, 4.0], [44.0, 8.0], [12.0, 44.0]],
        0.5,
        [1.0, 0.0, 0.0],
    );
    coloured(&m, &[first]);
    let uniforms = [1.0f32.to_bits(), 0x5A];
    let render = stencil_pass_with_fs(&m, 1, replace, 0, false, STENCIL_OUT_FS, &uniforms);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(stored_stencil(&m, 8, 8), 0x5A, "replaced by the shader's");
    assert_eq!(stored_stencil(&m, 60, 60), 0, "not covered");
    // Equal, with the state's reference 0 and the shader's 0x5A: the
    // pixels holding 0x5A pass and draw; the rest fail, and their
    // stencil-fail operation (replace) takes the shader's reference too.
    let equal = FragmentStencil {
        depth_pass: StencilOp::Keep,
        stencil_fail: StencilOp::Replace,
        compare: ZsFunc::Equal,
        ..replace
    };
    coloured(&m, &[covering(0.5, [0.0, 0.0, 1.0])]);
    let render = stencil_pass_with_fs(&m, 1, equal, 0, true, STENCIL_OUT_FS, &uniforms);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(
        rgb(&m, 8, 8),
        [0, 0, 255],
        "passes with the shader's reference"
    );
    assert_eq!(rgb(&m, 60, 60), [0, 0, 0], "fails");
    assert_eq!(stored_stencil(&m, 8, 8), 0x5A, "kept");
    assert_eq!(stored_stencil(&m, 60, 60), 0x5A, "replaced on failing");
}

/// Fragment shader: red = the covered-sample mask (gl_SampleMaskIn),
/// green = log2 of the pass's samples, both as integers / 255.
const SAMPLE_MASK_IN_FS: &str = "
    get_sr r6, sr124
    get_sr r7, sr14
    convert u32_to_f, r2, r6, rte
    fmul32 r2, r2, u1
    convert u32_to_f, r3, r7, rte
    fmul32 r3, r3, u1
    mov r4, u2
    mov r5, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

/// Draws WINDOW_TRIANGLE at 4x with fragment shader `source` (uniforms
/// 1.0, 1/255, 0) and returns the multisampled image, its row stride,
/// and each pixel's covered-sample mask from an independent coverage test
/// at the standard 4x positions.
fn sample_mask_pass(m: &Machine, source: &str) -> (Vec<u8>, usize, Vec<u8>) {
    let window = [[10.25f32, 5.5], [50.75, 20.0], [20.0, 60.125]];
    m.poke_u32s(VERTICES, &clip(&window));
    let vs = m.program(
        POSITION_VS,
        0x3000,
        0xC0,
        &pair(DATA_VA + VERTICES),
        UNIFORMS + 0x200,
        0,
        None,
    );
    let fs = m.program(
        source,
        0x4000,
        0x100,
        &[1.0f32.to_bits(), (1.0f32 / 255.0).to_bits(), 0],
        UNIFORMS + 0x300,
        0,
        None,
    );
    let mut render = draw_pass(m, 3, vs, 4, fs, None);
    render.samples = 4;
    let stride = 64 * 4 * 4;
    m.poke(m.data, PBE, &msaa_pbe(stride).pack().unwrap());
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let image = m.peek(m.data, MSAA_IMAGE, 64 * stride as usize);
    let t = window.map(|[x, y]| [f64::from(x), f64::from(y)]);
    let positions = [
        (0.375, 0.125),
        (0.875, 0.375),
        (0.125, 0.625),
        (0.625, 0.875),
    ];
    let masks = (0..64 * 64)
        .map(|i| {
            let (x, y) = ((i % 64) as f64, (i / 64) as f64);
            positions
                .iter()
                .enumerate()
                .filter(|(_, (sx, sy))| covers(t, x + sx, y + sy))
                .fold(0u8, |m, (s, _)| m | 1 << s)
        })
        .collect();
    (image, stride as usize, masks)
}

#[test_log::test]
fn fragment_shaders_read_their_covered_samples_and_the_sample_count() {
    let m = Machine::new(5000);
    let (image, stride, masks) = sample_mask_pass(&m, SAMPLE_MASK_IN_FS);
    let mut partial = 0;
    for y in 0..64usize {
        for x in 0..64usize {
            let mask = masks[y * 64 + x];
            partial += usize::from(mask != 0 && mask != 0xF);
            for s in 0..4 {
                let at = y * stride + (x * 4 + s) * 4;
                let want = if mask & (1 << s) != 0 {
                    [mask, 2]
                } else {
                    [0, 0]
                };
                assert_eq!(image[at..at + 2], want, "pixel ({x}, {y}) sample {s}");
            }
        }
    }
    assert!(partial > 50, "{partial}");
}

/// Fragment shader: kills samples 0 and 2 (`sample_mask`), then red = the
/// input sample mask, green = the coverage mask, as integers / 255.
const KILLED_COVERAGE_FS: &str = "
    sample_mask 5, 0
    get_sr r6, sr124
    get_sr r7, sr60
    convert u32_to_f, r2, r6, rte
    fmul32 r2, r2, u1
    convert u32_to_f, r3, r7, rte
    fmul32 r3, r3, u1
    mov r4, u2
    mov r5, u0
    st_tile r2_r3_r4_r5, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

#[test_log::test]
fn samples_killed_by_a_sample_mask_leave_the_coverage_mask() {
    // Mesa reads the coverage mask after alpha-to-coverage and
    // gl_SampleMask (get_sr_coverage) to mask its stores of spilled render
    // targets: a killed sample must read as uncovered, while the input
    // sample mask (gl_SampleMaskIn) keeps what the primitive covered.
    let m = Machine::new(5000);
    let (image, stride, masks) = sample_mask_pass(&m, KILLED_COVERAGE_FS);
    let mut seen = 0;
    for y in 0..64usize {
        for x in 0..64usize {
            let mask = masks[y * 64 + x];
            for s in 0..4 {
                let at = y * stride + (x * 4 + s) * 4;
                let want = if mask & (1 << s) & 0xA != 0 {
                    seen += 1;
                    [mask, mask & 0xA]
                } else {
                    [0, 0]
                };
                assert_eq!(image[at..at + 2], want, "pixel ({x}, {y}) sample {s}");
            }
        }
    }
    assert!(seen > 1000, "{seen}");
}

/// Fragment shader: adds its `is_active_thread` to the word at u0_u1, as
/// Mesa's fragment atomics are guarded by it (nir_lower_helper_writes),
/// then writes nothing else.
const ACTIVE_THREADS_FS: &str = "
    get_sr r1, sr63
    atomic add, 0, 0, u0_u1, 0, signed, r1, 1, 1, 1, 1
    wait 0
    stop";

#[test_log::test]
fn helper_lanes_are_not_active_threads_and_cover_no_sample() {
    // Fragments run in 2x2 quads; the uncovered members of a covered
    // pixel's quad run as helpers, and is_active_thread is 0 there (Mesa
    // reads gl_HelperInvocation as its negation and guards a fragment
    // shader's memory writes with it). The sum over every lane is the
    // number of covered pixels, by an independent coverage test.
    let m = Machine::new(5000);
    let window = [[10.25f32, 5.5], [50.75, 20.0], [20.0, 60.125]];
    m.poke_u32s(VERTICES, &clip(&window));
    let vs = m.program(
        POSITION_VS,
        0x3000,
        0xC0,
        &pair(DATA_VA + VERTICES),
        UNIFORMS + 0x200,
        0,
        None,
    );
    const COUNTER: u64 = STORAGE_IMAGE;
    m.poke_u32s(COUNTER, &[0]);
    let fs = m.program(
        ACTIVE_THREADS_FS,
        0x4000,
        0x100,
        &pair(DATA_VA + COUNTER),
        UNIFORMS + 0x300,
        0,
        None,
    );
    let render = draw_pass(&m, 3, vs, 4, fs, None);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let t = window.map(|[x, y]| [f64::from(x), f64::from(y)]);
    let covered = (0..64 * 64)
        .filter(|i| covers(t, f64::from(i % 64) + 0.5, f64::from(i / 64) + 0.5))
        .count();
    assert!(covered > 500, "{covered}");
    assert_eq!(m.peek_u32s(COUNTER, 1)[0] as usize, covered);

    // Helpers cover no sample either: the coverage mask (sr60), summed
    // over every lane of a square drawn as two triangles, counts each of
    // its pixels once (a helper on the diagonal read the other
    // triangle's coverage of its pixel; Mesa's per-sample shading tells
    // helpers by that mask).
    let square = [
        [8.0f32, 8.0],
        [40.0, 8.0],
        [8.0, 40.0],
        [40.0, 8.0],
        [40.0, 40.0],
        [8.0, 40.0],
    ];
    m.poke_u32s(VERTICES, &clip(&square));
    m.poke_u32s(COUNTER, &[0]);
    let fs = m.program(
        &ACTIVE_THREADS_FS.replace("sr63", "sr60"),
        0x4000,
        0x100,
        &pair(DATA_VA + COUNTER),
        UNIFORMS + 0x300,
        0,
        None,
    );
    let render = draw_pass(&m, 6, vs, 4, fs, None);
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    assert_eq!(m.peek_u32s(COUNTER, 1)[0], 32 * 32);
}

#[test_log::test]
fn depth_clipping_cuts_at_the_near_and_far_planes_and_depth_clamp_does_not() {
    let m = Machine::new(5000);
    // z (with w = 1) rises by 1 across 64 pixels: from 0.5 beyond the
    // far plane at x = 32, and from -0.5 in front of the near plane
    // until x = 32.
    let far = [
        ([0.0f32, 0.0f32], 0.5f32, [0.0f32; 3]),
        ([64.0, 0.0], 1.5, [0.0; 3]),
        ([0.0, 128.0], 0.5, [0.0; 3]),
    ];
    let near = far.map(|(at, z, v)| (at, z - 1.0, v));
    let triangle = |t: &[([f32; 2], f32, [f32; 3]); 3]| {
        t.map(|(at, _, _)| [f64::from(at[0]), f64::from(at[1])])
    };
    for (vertices, kept) in [(far, 0..32usize), (near, 32..64)] {
        let t = triangle(&vertices);
        let got = count_shapes(
            &m,
            Primitive::Triangles,
            &vertices,
            &depth_cull(true, false),
        );
        assert_counts(
            &got,
            |x, y| u8::from(kept.contains(&x) && covers(t, x as f64 + 0.5, y as f64 + 0.5)),
            "depth clip",
        );
        let got = count_shapes(
            &m,
            Primitive::Triangles,
            &vertices,
            &depth_cull(false, true),
        );
        assert_counts(
            &got,
            |x, y| u8::from(covers(t, x as f64 + 0.5, y as f64 + 0.5)),
            "depth clamp",
        );
    }
}

/// A triangle whose every vertex is behind the eye (w < 0) has the same
/// window positions as its mirror in front (x/w, y/w) but is not drawn,
/// with depth clipping or depth clamp (which keeps only what is in front
/// of the eye): nothing is left of it to bin whole.
#[test_log::test]
fn a_triangle_behind_the_eye_is_not_drawn_with_depth_clip_or_clamp() {
    let m = Machine::new(5000);
    let vertices = [
        ([4.0f32, 4.0f32], 0.5f32, [0.0f32; 3]),
        ([60.0, 4.0], 0.5, [0.0; 3]),
        ([4.0, 60.0], 0.5, [0.0; 3]),
    ];
    for (depth_clip, depth_clamp) in [(true, false), (false, true), (false, false)] {
        let patch = depth_cull(depth_clip, depth_clamp);
        // In front of the eye, the triangle is drawn.
        let got = count_shapes(&m, Primitive::Triangles, &vertices, &patch);
        assert!(
            got.iter().any(|&c| c != 0),
            "in front ({depth_clip}, {depth_clamp})"
        );
        // Every word of every position negated: the same point of the
        // projective plane, behind the eye.
        m.poke_u32s(VERTICES, &shape_words(&vertices, true));
        let got = count_stored_shapes(&m, Primitive::Triangles, 3, &patch);
        assert!(
            got.iter().all(|&c| c == 0),
            "behind the eye ({depth_clip}, {depth_clamp}): {} pixels drawn",
            got.iter().filter(|&&c| c != 0).count()
        );
    }
}

#[test_log::test]
fn a_render_into_a_compressed_multisampled_target_marks_its_sample_tiles_uncompressed() {
    use agx_hw::layout::{tile_word, uncompressed_subtile_mode, CompressionLayout, ImageLayout};
    const META: u64 = 0x3F_0000;
    let m = Machine::new(5000);
    let window = [[10.25f32, 5.5], [50.75, 20.0], [20.0, 60.125]];
    let mut render = triangles_pass(&m, &window);
    render.samples = 4;
    // A 64 x 64 4x target, GPU-tiled (16-byte elements) and compressed:
    // 128 x 128 samples, 8 x 8 metadata tiles, all solid black before.
    let layout = ImageLayout::gpu_tiled(64, 64, 1, 16, true).unwrap();
    m.poke(
        m.data,
        MSAA_IMAGE,
        &vec![0u8; layout.layer_bytes() as usize],
    );
    let meta = CompressionLayout::new(128, 128, 1).unwrap();
    let solid = tile_word(agx_hw::layout::solid_subtile_mode(4).unwrap());
    m.poke(m.data, META, &solid.to_le_bytes().repeat(64));
    let pbe = Pbe {
        dimension: TextureDimension::D2Multisampled,
        samples: agx_hw::formats::SampleCount::Four,
        layout: Layout::Gpu,
        channels: Channels::R8G8B8A8,
        data_type: TextureType::Unorm,
        width: 64,
        height: 64,
        buffer: DATA_VA + MSAA_IMAGE,
        page_aligned_layers: true,
        compressed_1: true,
        extended: true,
        acceleration_buffer: DATA_VA + META,
        ..Pbe::default()
    };
    m.poke(m.data, PBE, &pbe.pack().unwrap());
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    // Every sample tile the render stored is uncompressed now, and the
    // body holds the samples at their pixels' elements.
    let plain = tile_word(uncompressed_subtile_mode(4).unwrap());
    for ty in 0..8 {
        for tx in 0..8 {
            let at = meta.tile_word_offset(0, 16 * tx, 16 * ty, 0).unwrap();
            assert_eq!(
                m.peek_u32s(META + at, 2),
                [plain as u32, (plain >> 32) as u32],
                "tile ({tx}, {ty})"
            );
        }
    }
    let image = m.peek(m.data, MSAA_IMAGE, layout.layer_bytes() as usize);
    let t = window.map(|[x, y]| [f64::from(x), f64::from(y)]);
    let positions = [
        (0.375, 0.125),
        (0.875, 0.375),
        (0.125, 0.625),
        (0.625, 0.875),
    ];
    for y in 0..64u32 {
        for x in 0..64u32 {
            for (s, (sx, sy)) in positions.iter().enumerate() {
                let want = u8::from(covers(t, f64::from(x) + sx, f64::from(y) + sy));
                let at = layout.offset(0, x, y, 0).unwrap() as usize + 4 * s;
                assert_eq!(image[at], want, "pixel ({x}, {y}) sample {s}");
            }
        }
    }
}

#[test_log::test]
fn a_state_with_tag_writes_disabled_writes_depth_and_runs_no_shader() {
    // Mesa's depth-only draws: the fragment shader writes nothing, so the
    // PPP state has tag writes disabled and no fragment-shader record.
    let m = Machine::new(5000);
    let near = [[8.25f32, 3.5], [57.5, 30.75], [12.0, 58.25]];
    coloured(&m, &[(near, 0.25, [1.0, 0.0, 0.0])]);
    let vs = colour_vs(&m, VERTICES);
    let depth_only = |records: &mut PppRecords| {
        records.fragment_shader = None;
        records.fragment_control = Some(FragmentControl {
            tag_write_disable: true,
            ..FragmentControl::default()
        });
    };
    let mut render = draw_shapes(
        &m,
        Shapes::new(Primitive::Triangles, 3),
        vs,
        7,
        0,
        None,
        Some(ZsFunc::Less),
        None,
        &depth_only,
    );
    render.zls_ctrl = zls_word(ZlsControl {
        z_store_enable: true,
        ..ZlsControl::default()
    });
    render.depth.base = DATA_VA + DEPTH;
    render.depth.stride = zls_stride_word();
    render.isp_zls_pixels = zls_pixels_word(64, 64);
    render.isp_bgobjdepth = 1.0f32.to_bits();
    assert_eq!(m.submit(CmdType::Render, render.as_bytes()), None);
    let t = near.map(|[x, y]| [f64::from(x), f64::from(y)]);
    for y in 0..64 {
        for x in 0..64 {
            let inside = covers(t, x as f64 + 0.5, y as f64 + 0.5);
            let want = if inside { 0.25 } else { 1.0 };
            assert_eq!(stored_depth(&m, x, y), want, "depth of pixel ({x}, {y})");
            assert_eq!(rgb(&m, x, y), [0, 0, 0], "no colour at ({x}, {y})");
        }
    }
}
