//! Render passes end to end: SUBMIT of a cmd_render, the VDM walk, and
//! per tile the background program into the tilebuffer and the
//! end-of-tile program's block store through a PBE descriptor.

mod common;

use agx_hw::formats::{Channels, Layout, Pbe, TextureDimension, TextureType, VdmStreamTerminate};
use agx_kmd::Errno;
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
fn clear_pass(m: &Machine, colour: [f32; 4], width: u16, height: u16) -> CmdRender {
    let uniforms: Vec<u32> = colour.iter().map(|c| c.to_bits()).collect();
    let bg = m.program(CLEAR, 0x1000, 0x40, &uniforms, UNIFORMS, 0, None);
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

#[test_log::test]
fn draws_are_refused_until_vertex_shading_exists() {
    let m = Machine::new(5000);
    let render = clear_pass(&m, [1.0, 1.0, 1.0, 1.0], 32, 32);
    // An index-list block (block type 3) where the terminate was.
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
