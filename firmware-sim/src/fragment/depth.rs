//! The depth and stencil tests run before the fragment shader (early
//! tests): per covered sample, the interpolated depth against the
//! tilebuffer's, and the stencil compare and operations per pixel.

use agx_hw::formats::{FragmentFace, FragmentStencil, StencilOp, ZsFunc};

use super::tilebuffer::Tilebuffer;
use crate::raster::plane;

/// A stencil operation on `value`, writing only the bits of `write_mask`.
pub(super) fn stencil_op(op: StencilOp, value: u8, reference: u8, write_mask: u8) -> u8 {
    let new = match op {
        StencilOp::Zero => 0,
        StencilOp::Replace => reference,
        StencilOp::IncrSat => value.saturating_add(1),
        StencilOp::DecrSat => value.saturating_sub(1),
        StencilOp::Invert => !value,
        StencilOp::IncrWrap => value.wrapping_add(1),
        StencilOp::DecrWrap => value.wrapping_sub(1),
        StencilOp::Keep | StencilOp::Unknown(_) => value,
    };
    (value & !write_mask) | (new & write_mask)
}

/// Whether `depth` passes `function` against the stored depth.
pub(super) fn depth_passes(function: ZsFunc, depth: f32, stored: f32) -> bool {
    match function {
        ZsFunc::Never => false,
        ZsFunc::Less => depth < stored,
        ZsFunc::Equal => depth == stored,
        ZsFunc::Lequal => depth <= stored,
        ZsFunc::Greater => depth > stored,
        ZsFunc::NotEqual => depth != stored,
        ZsFunc::Gequal => depth >= stored,
        ZsFunc::Always | ZsFunc::Unknown(_) => true,
    }
}

/// The early depth test: keeps the covered pixels whose interpolated
/// depth passes the face's depth function against the tile's depth, and
/// notes the depth each will write (unless the face disables depth
/// writes) once the shader has run and not discarded it. Without depth
/// state every pixel passes and nothing is written.
#[allow(clippy::too_many_arguments)]
pub(super) fn depth_test(
    tile: &mut Tilebuffer,
    covered: &mut Vec<(u32, u32)>,
    coverage: &mut [u32],
    pending: &mut [Option<f32>],
    pending_stencil: &mut [Option<u8>],
    origin: (u32, u32),
    sample_positions: &[(i64, i64)],
    vertices: &[Vec<f32>; 3],
    face: Option<FragmentFace>,
    stencil: Option<FragmentStencil>,
) {
    let Some(face) = face else {
        return;
    };
    let z = plane(std::array::from_fn(|v| {
        (
            f64::from(vertices[v][0]),
            f64::from(vertices[v][1]),
            f64::from(vertices[v][2]),
        )
    }));
    let reference = face.stencil_reference as u8;
    let samples = tile.samples as usize;
    covered.retain(|&(x, y)| {
        let pixel = (y * tile.width_px + x) as usize;
        let first = pixel * samples;
        if let Some(s) = stencil {
            // Stencil is per pixel (single-sampled passes only).
            let stored = tile.stencil[first];
            let mask = s.read_mask as u8;
            if !depth_passes(
                s.compare,
                f32::from(reference & mask),
                f32::from(stored & mask),
            ) {
                // Rejected: the stencil-fail operation applies now.
                let value = stencil_op(s.stencil_fail, stored, reference, s.write_mask as u8);
                tile.stencil[first..first + samples].fill(value);
                return false;
            }
        }
        // Depth per covered sample, at the sample's position.
        let mut passed = 0u32;
        for (s, &(sx, sy)) in sample_positions.iter().enumerate().take(samples) {
            if coverage[pixel] & (1 << s) == 0 {
                continue;
            }
            let cx = (origin.0 + x) as f32 + sx as f32 / 256.0;
            let cy = (origin.1 + y) as f32 + sy as f32 / 256.0;
            let depth = z[0].mul_add(cx, z[1].mul_add(cy, z[2])).clamp(0.0, 1.0);
            if depth_passes(face.depth_function, depth, tile.depth[first + s]) {
                passed |= 1 << s;
                if !face.disable_depth_write {
                    pending[first + s] = Some(depth);
                }
            }
        }
        if let Some(s) = stencil {
            let stored = tile.stencil[first];
            let pass = passed != 0;
            let op = if pass { s.depth_pass } else { s.depth_fail };
            let value = stencil_op(op, stored, reference, s.write_mask as u8);
            if pass {
                pending_stencil[pixel] = Some(value);
            } else {
                tile.stencil[first..first + samples].fill(value);
            }
        }
        coverage[pixel] = passed;
        passed != 0
    });
}
