//! ZLS, the depth/stencil load and store unit: at the start of a tile it
//! loads depth and stencil from their buffers (or takes the pass's clear
//! values), at the end it stores them back, as the pass's ZLS control
//! word says.

use agx_fwif::messages::{FaultUnit, RenderPass, ZlsSurface};
use agx_hw::formats::ZlsControl;

use super::tilebuffer::{depth_tile_bytes, Tilebuffer};
use crate::fault::EngineResult;
use crate::memory::GpuVm;
use crate::usc::{GpuMemory, MemoryFault};

/// Where tile (tx, ty) of `layer` starts in the depth buffer. The
/// depth/stencil buffer layout is this model's (the hardware's twiddled
/// and compressed layouts are not modelled): whole tiles of 32-bit depth
/// (or 8-bit stencil), tiles in row-major order, pixels row-major within
/// a tile, samples interleaved; layers `stride` bytes apart.
pub(super) fn zls_tile(
    surface: &ZlsSurface,
    render: &RenderPass,
    tile: (u32, u32),
    layer: u32,
    bytes: u64,
) -> u64 {
    let tiles_x = u64::from(render.width_px.div_ceil(render.utile_width_px.max(1)));
    surface
        .base
        .get()
        .wrapping_add(u64::from(layer).wrapping_mul(u64::from(surface.stride_bytes)))
        .wrapping_add((u64::from(tile.1) * tiles_x + u64::from(tile.0)).wrapping_mul(bytes))
}

/// Starts a tile's depth and stencil: loaded from the buffers when the
/// ZLS control says so, else the pass's clear values.
pub(super) fn load_depth_stencil(
    vm: &GpuVm<'_>,
    render: &RenderPass,
    zls: &ZlsControl,
    tile: &mut Tilebuffer,
    at: (u32, u32),
    layer: u32,
) -> Result<(), EngineResult> {
    if zls.z_load_enable {
        let bytes = depth_tile_bytes(tile);
        let mut raw = vec![0u8; bytes as usize];
        vm.read(
            zls_tile(&render.zls.z_load, render, at, layer, bytes),
            &mut raw,
        )
        .map_err(|f| EngineResult::from_uat(&f, FaultUnit::Zls))?;
        for (d, b) in tile.depth.iter_mut().zip(raw.chunks_exact(4)) {
            *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
    } else {
        tile.depth.fill(f32::from_bits(render.zls.clear_depth));
    }
    if zls.s_load_enable {
        let bytes = depth_tile_bytes(tile) / 4;
        let mut raw = vec![0u8; bytes as usize];
        vm.read(
            zls_tile(&render.zls.s_load, render, at, layer, bytes),
            &mut raw,
        )
        .map_err(|f| EngineResult::from_uat(&f, FaultUnit::Zls))?;
        tile.stencil.copy_from_slice(&raw);
    } else {
        tile.stencil.fill(render.zls.clear_stencil as u8);
    }
    Ok(())
}

/// Ends a tile's depth and stencil: stored when the ZLS control says so.
pub(super) fn store_depth_stencil(
    vm: &GpuVm<'_>,
    render: &RenderPass,
    zls: &ZlsControl,
    tile: &Tilebuffer,
    at: (u32, u32),
    layer: u32,
    _area: (u32, u32),
) -> Result<(), EngineResult> {
    let mut writer = vm.clone();
    let fault = |f: MemoryFault| EngineResult::Fault {
        address: f.address,
        unit: FaultUnit::Zls as u32,
        access: 1,
        reason: agx_hw::formats::UatFaultReason::Unmapped.to_raw(),
    };
    if zls.z_store_enable {
        let bytes: Vec<u8> = tile.depth.iter().flat_map(|d| d.to_le_bytes()).collect();
        let address = zls_tile(&render.zls.z_store, render, at, layer, bytes.len() as u64);
        writer.write(address, &bytes).map_err(fault)?;
    }
    if zls.s_store_enable {
        let address = zls_tile(
            &render.zls.s_store,
            render,
            at,
            layer,
            tile.stencil.len() as u64,
        );
        writer.write(address, &tile.stencil).map_err(fault)?;
    }
    Ok(())
}
