//! UAPI commands become firmware commands: the one place the kmd
//! translates what userspace submitted into what the firmware runs.
//!
//! drm/asahi does the same: the UAPI's `drm_asahi_cmd_render` and
//! `drm_asahi_cmd_compute` are userspace's vocabulary, and the firmware
//! has its own (`fw::vertex`, `fw::fragment`, `fw::compute`), with the
//! render pass split into a vertex half and a per-tile half, depth and
//! stencil given separate load and store surfaces, and attachment sizes
//! counted in cache lines. Nothing past this module sees a UAPI struct,
//! so a UAPI change stops here.

use agx_fwif::messages::{
    Attachments, FwAttachment, Helper, RenderPass, RunComputeBody, RunFragmentBody, RunVertexBody,
    TileProgram, Zls, ZlsSurface, MAX_ATTACHMENTS, PASS_DBIAS_IS_INT, PASS_PROCESS_EMPTY_TILES,
    VERTEX_NO_CLUSTERING, VERTEX_USES_SCRATCH,
};
use agx_hw::addr::{FwVa, GpuVa};
use agx_uapi::asahi::{
    Attachment, BgEot, CmdCompute, CmdRender, HelperProgram, RenderFlags, ZlsBuffer,
};

const _: () = assert!(MAX_ATTACHMENTS == crate::params::MAX_ATTACHMENTS as usize);

/// Bytes of the cache line attachments are counted in.
const CACHE_LINE_BYTES: u64 = 128;

/// Where a queue's commands point: its USC region and its parameter
/// buffer's control block.
#[derive(Debug, Clone, Copy)]
pub struct QueueAddrs {
    /// Base of the queue's 4 GiB USC region.
    pub usc_exec_base: GpuVa,
    /// The queue's `TvbInfo`.
    pub tvb_info: FwVa,
}

/// The two halves of a render pass, as the firmware runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderCommands {
    /// Vertex shading and tiling.
    pub vertex: RunVertexBody,
    /// The per-tile work.
    pub fragment: RunFragmentBody,
}

/// A render pass and the attachments of its two halves.
pub fn render(
    cmd: &CmdRender,
    vertex_attachments: &[Attachment],
    fragment_attachments: &[Attachment],
    queue: QueueAddrs,
) -> RenderCommands {
    let flags = RenderFlags::from_bits_truncate(cmd.flags);
    let pass = render_pass(cmd, flags);
    let mut vertex_flags = 0;
    if flags.contains(RenderFlags::VERTEX_SCRATCH) {
        vertex_flags |= VERTEX_USES_SCRATCH;
    }
    if flags.contains(RenderFlags::NO_VERTEX_CLUSTERING) {
        vertex_flags |= VERTEX_NO_CLUSTERING;
    }
    RenderCommands {
        vertex: RunVertexBody {
            usc_exec_base: queue.usc_exec_base,
            buffer: queue.tvb_info,
            vdm_ctrl_stream_base: GpuVa(cmd.vdm_ctrl_stream_base),
            ppp_ctrl: cmd.ppp_ctrl,
            flags: vertex_flags,
            helper: helper(&cmd.vertex_helper),
            fragment_helper: helper(&cmd.fragment_helper),
            pass,
            attachments: attachments(vertex_attachments),
        },
        fragment: RunFragmentBody {
            usc_exec_base: queue.usc_exec_base,
            buffer: queue.tvb_info,
            helper: helper(&cmd.fragment_helper),
            pass,
            attachments: attachments(fragment_attachments),
        },
    }
}

/// A compute command and its attachments.
pub fn compute(cmd: &CmdCompute, list: &[Attachment], queue: QueueAddrs) -> RunComputeBody {
    RunComputeBody {
        usc_exec_base: queue.usc_exec_base,
        cdm_ctrl_stream_base: GpuVa(cmd.cdm_ctrl_stream_base),
        cdm_ctrl_stream_end: GpuVa(cmd.cdm_ctrl_stream_end),
        sampler_heap: GpuVa(cmd.sampler_heap),
        sampler_count: cmd.sampler_count,
        flags: 0,
        helper: helper(&cmd.helper),
        attachments: attachments(list),
    }
}

fn render_pass(cmd: &CmdRender, flags: RenderFlags) -> RenderPass {
    let mut pass_flags = 0;
    if flags.contains(RenderFlags::PROCESS_EMPTY_TILES) {
        pass_flags |= PASS_PROCESS_EMPTY_TILES;
    }
    if flags.contains(RenderFlags::DBIAS_IS_INT) {
        pass_flags |= PASS_DBIAS_IS_INT;
    }
    RenderPass {
        width_px: u32::from(cmd.width_px),
        height_px: u32::from(cmd.height_px),
        layers: u32::from(cmd.layers),
        samples: u32::from(cmd.samples),
        sample_size_bytes: u32::from(cmd.sample_size_B),
        utile_width_px: u32::from(cmd.utile_width_px),
        utile_height_px: u32::from(cmd.utile_height_px),
        flags: pass_flags,
        isp_zls_pixels: cmd.isp_zls_pixels,
        sampler_count: u32::from(cmd.sampler_count),
        ppp_multisamplectl: cmd.ppp_multisamplectl,
        sampler_heap: GpuVa(cmd.sampler_heap),
        isp_merge_upper_x: cmd.isp_merge_upper_x,
        isp_merge_upper_y: cmd.isp_merge_upper_y,
        isp_scissor_base: GpuVa(cmd.isp_scissor_base),
        isp_dbias_base: GpuVa(cmd.isp_dbias_base),
        isp_oclqry_base: GpuVa(cmd.isp_oclqry_base),
        bg: tile_program(cmd.bg),
        eot: tile_program(cmd.eot),
        partial_bg: tile_program(cmd.partial_bg),
        partial_eot: tile_program(cmd.partial_eot),
        // One UAPI buffer per plane is both what a tile loads and where
        // it stores.
        zls: Zls {
            ctrl: cmd.zls_ctrl,
            z_load: zls_surface(&cmd.depth),
            z_store: zls_surface(&cmd.depth),
            s_load: zls_surface(&cmd.stencil),
            s_store: zls_surface(&cmd.stencil),
            clear_depth: cmd.isp_bgobjdepth,
            clear_stencil: cmd.isp_bgobjvals,
        },
    }
}

fn tile_program(program: BgEot) -> TileProgram {
    TileProgram {
        usc: program.usc,
        rsrc_spec: program.rsrc_spec,
    }
}

fn zls_surface(buffer: &ZlsBuffer) -> ZlsSurface {
    ZlsSurface {
        base: GpuVa(buffer.base),
        comp_base: GpuVa(buffer.comp_base),
        stride: buffer.stride,
        comp_stride: buffer.comp_stride,
    }
}

fn helper(program: &HelperProgram) -> Helper {
    Helper {
        program: program.binary,
        cfg: program.cfg,
        arg: program.data,
    }
}

/// At most [`MAX_ATTACHMENTS`] (SUBMIT refuses more), each counted in
/// cache lines (SUBMIT refuses a count past 32 bits).
fn attachments(list: &[Attachment]) -> Attachments {
    let mut out = Attachments::default();
    for (slot, attachment) in out.list.iter_mut().zip(list) {
        *slot = FwAttachment {
            address: GpuVa(attachment.pointer),
            size_lines: u32::try_from(attachment.size.div_ceil(CACHE_LINE_BYTES))
                .unwrap_or(u32::MAX),
            flags: 0,
        };
    }
    out.count = list.len().min(MAX_ATTACHMENTS) as u32;
    out
}

#[cfg(test)]
mod tests {
    use agx_hw::formats::{Counts, SamplerStates, ZlsControl, ZlsFormat};
    use zerocopy::FromZeros;

    use super::*;

    const QUEUE: QueueAddrs = QueueAddrs {
        usc_exec_base: GpuVa(0x2_0000_0000),
        tvb_info: FwVa(0xFFFF_FFA0_0001_0000),
    };

    #[test]
    fn every_field_reaches_its_firmware_field() {
        let zls = ZlsControl {
            z_load_enable: true,
            s_store_enable: true,
            z_format: ZlsFormat::Unorm16,
            ..ZlsControl::default()
        };
        let counts = Counts {
            uniform_register_count: 128,
            sampler_state_register_count: SamplerStates::Compact8,
            ..Counts::default()
        };
        let mut cmd = CmdRender::new_zeroed();
        cmd.flags = (RenderFlags::PROCESS_EMPTY_TILES | RenderFlags::VERTEX_SCRATCH).bits();
        cmd.isp_zls_pixels = 0x11;
        cmd.vdm_ctrl_stream_base = 0x1_0000_4000;
        cmd.vertex_helper = HelperProgram {
            binary: 0x101,
            cfg: 2,
            data: 3,
        };
        cmd.fragment_helper = HelperProgram {
            binary: 0x201,
            cfg: 4,
            data: 5,
        };
        cmd.isp_scissor_base = 0x10;
        cmd.isp_dbias_base = 0x20;
        cmd.isp_oclqry_base = 0x30;
        cmd.depth = ZlsBuffer {
            base: 0x40_0000,
            comp_base: 0x50_0000,
            stride: 0x1000,
            comp_stride: 0x100,
        };
        cmd.stencil = ZlsBuffer {
            base: 0x60_0000,
            comp_base: 0,
            stride: 0x2000,
            comp_stride: 0,
        };
        cmd.zls_ctrl = u64::from_le_bytes(zls.pack().unwrap());
        cmd.ppp_multisamplectl = 0x44cc;
        cmd.sampler_heap = 0x70_0000;
        cmd.ppp_ctrl = 0x99;
        cmd.width_px = 800;
        cmd.height_px = 600;
        cmd.layers = 2;
        cmd.sampler_count = 7;
        cmd.utile_width_px = 32;
        cmd.utile_height_px = 16;
        cmd.samples = 2;
        cmd.sample_size_B = 8;
        cmd.isp_merge_upper_x = 1.5f32.to_bits();
        cmd.isp_merge_upper_y = 2.5f32.to_bits();
        let rsrc = u32::from_le_bytes(counts.pack().unwrap());
        cmd.bg = BgEot {
            usc: 0x1004,
            rsrc_spec: rsrc,
        };
        cmd.eot = BgEot {
            usc: 0x2004,
            rsrc_spec: 1,
        };
        cmd.partial_bg = BgEot {
            usc: 0x3004,
            rsrc_spec: 2,
        };
        cmd.partial_eot = BgEot {
            usc: 0x4004,
            rsrc_spec: 3,
        };
        cmd.isp_bgobjdepth = 0.5f32.to_bits();
        cmd.isp_bgobjvals = 0x7f;
        let vertex_attachments = [Attachment {
            pointer: 0x40_0000,
            size: 129,
            pad: 0,
            flags: 0,
        }];
        let out = render(&cmd, &vertex_attachments, &[], QUEUE);

        let v = &out.vertex;
        assert_eq!(v.usc_exec_base, QUEUE.usc_exec_base);
        assert_eq!(v.buffer, QUEUE.tvb_info);
        assert_eq!(v.vdm_ctrl_stream_base, GpuVa(0x1_0000_4000));
        assert_eq!(v.ppp_ctrl, 0x99);
        assert_eq!(v.flags, VERTEX_USES_SCRATCH);
        assert_eq!(
            (v.helper.program, v.helper.cfg, v.helper.arg),
            (0x101, 2, 3)
        );
        assert_eq!(v.attachments.count, 1);
        assert_eq!(v.attachments.list[0].size_lines, 2);
        let f = &out.fragment;
        assert_eq!(
            (f.helper.program, f.helper.cfg, f.helper.arg),
            (0x201, 4, 5)
        );
        assert_eq!(f.attachments.count, 0);
        assert_eq!(v.fragment_helper, f.helper, "for partial renders");
        assert_eq!(v.pass, f.pass, "both halves describe the same pass");

        let p = &f.pass;
        assert_eq!((p.width_px, p.height_px, p.layers), (800, 600, 2));
        assert_eq!((p.samples, p.sample_size_bytes), (2, 8));
        assert_eq!((p.utile_width_px, p.utile_height_px), (32, 16));
        assert!(p.process_empty_tiles());
        assert_eq!(p.flags & PASS_DBIAS_IS_INT, 0);
        assert_eq!(p.isp_zls_pixels, 0x11);
        assert_eq!(p.ppp_multisamplectl, 0x44cc);
        assert_eq!((p.sampler_heap, p.sampler_count), (GpuVa(0x70_0000), 7));
        assert_eq!(f32::from_bits(p.isp_merge_upper_x), 1.5);
        assert_eq!(f32::from_bits(p.isp_merge_upper_y), 2.5);
        assert_eq!(
            (p.isp_scissor_base, p.isp_dbias_base, p.isp_oclqry_base),
            (GpuVa(0x10), GpuVa(0x20), GpuVa(0x30))
        );
        assert_eq!(
            [p.bg.usc, p.eot.usc, p.partial_bg.usc, p.partial_eot.usc],
            [0x1004, 0x2004, 0x3004, 0x4004]
        );
        assert_eq!(
            [
                p.eot.rsrc_spec,
                p.partial_bg.rsrc_spec,
                p.partial_eot.rsrc_spec
            ],
            [1, 2, 3]
        );
        // The raw hardware words arrive bit for bit.
        assert_eq!(ZlsControl::unpack(&p.zls.ctrl.to_le_bytes()).value, zls);
        assert_eq!(Counts::unpack(&p.bg.rsrc_spec.to_le_bytes()).value, counts);
        let depth = ZlsSurface {
            base: GpuVa(0x40_0000),
            comp_base: GpuVa(0x50_0000),
            stride: 0x1000,
            comp_stride: 0x100,
        };
        assert_eq!((p.zls.z_load, p.zls.z_store), (depth, depth));
        assert_eq!(p.zls.s_load.base, GpuVa(0x60_0000));
        assert_eq!(p.zls.s_store.stride, 0x2000);
        assert_eq!(f32::from_bits(p.zls.clear_depth), 0.5);
        assert_eq!(p.zls.clear_stencil, 0x7f);
    }

    #[test]
    fn compute_and_attachment_sizes() {
        let mut cmd = CmdCompute::new_zeroed();
        cmd.cdm_ctrl_stream_base = 0x1000;
        cmd.cdm_ctrl_stream_end = 0x1040;
        cmd.sampler_heap = 0x2000;
        cmd.sampler_count = 3;
        let list: Vec<Attachment> = [0, 1, 128, 129, (u64::from(u32::MAX)) * 128]
            .iter()
            .map(|&size| Attachment {
                pointer: 0x8000,
                size,
                pad: 0,
                flags: 0,
            })
            .collect();
        let body = compute(&cmd, &list, QUEUE);
        assert_eq!(body.cdm_ctrl_stream_base, GpuVa(0x1000));
        assert_eq!(body.cdm_ctrl_stream_end, GpuVa(0x1040));
        assert_eq!((body.sampler_heap, body.sampler_count), (GpuVa(0x2000), 3));
        assert_eq!(body.attachments.count, 5);
        let lines: Vec<u32> = body.attachments.list[..5]
            .iter()
            .map(|a| a.size_lines)
            .collect();
        assert_eq!(lines, [0, 1, 1, 2, u32::MAX]);
    }
}
