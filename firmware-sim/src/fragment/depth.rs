//! The depth and stencil tests run before the fragment shader (early
//! tests): per covered sample, the interpolated depth (with the
//! primitive's depth bias, clamped to the scissor's depth range) against
//! the tilebuffer's, and the stencil compare and operations per pixel.

use agx_hw::formats::{DepthBias, FragmentFace, FragmentStencil, StencilOp, ZsFunc};

use super::tilebuffer::Tilebuffer;
use crate::probe::{PixelEvent, ShaderProbe, StencilTest};
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

/// A comparison's name, as the debugger prints it.
pub(super) fn function_name(function: ZsFunc) -> &'static str {
    match function {
        ZsFunc::Never => "never",
        ZsFunc::Less => "less",
        ZsFunc::Equal => "equal",
        ZsFunc::Lequal => "lequal",
        ZsFunc::Greater => "greater",
        ZsFunc::NotEqual => "notequal",
        ZsFunc::Gequal => "gequal",
        ZsFunc::Always => "always",
        ZsFunc::Unknown(_) => "unknown (always)",
    }
}

/// The debugger's watched pixel, when it lies in the tile being shaded:
/// its tests are reported to the probe.
#[derive(Clone, Copy)]
pub(super) struct Watch<'a> {
    pub(super) probe: &'a dyn ShaderProbe,
    pub(super) command: u64,
    /// Tile-local.
    pub(super) pixel: (u32, u32),
}

/// How a primitive's interpolated depth is adjusted before the test.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct DepthAdjust {
    /// The depth-bias entry, when the state enables depth bias.
    pub(super) bias: Option<DepthBias>,
    /// Whether the depth buffer is floating point (32F) rather than
    /// 16-bit unorm: the constant bias is then in units of the depth's
    /// resolution at the primitive's largest depth.
    pub(super) float_depth: bool,
    /// The depth range of the scissor, when the state enables the
    /// scissor: depth is clamped to it.
    pub(super) range: Option<(f32, f32)>,
}

impl DepthAdjust {
    /// The offset the bias adds to every depth of a primitive whose depth
    /// plane is `z` (dz/dx, dz/dy, c) and whose largest depth magnitude
    /// is `max_depth`: `depth_bias` x r + `slope_scale` x max(|dz/dx|,
    /// |dz/dy|), limited by `clamp` (towards zero: a positive clamp is a
    /// maximum, a negative one a minimum, zero none), as OpenGL and
    /// Vulkan define polygon offset. r is 2^(e - 23) for a 32F depth
    /// buffer, e the exponent of `max_depth`, and 1 for a 16-bit one
    /// (Mesa's Vulkan driver divides the constant by 2^16 for D16 and
    /// passes it unscaled for D32F; the hardware's rule is not public).
    fn offset(&self, z: &[f32; 3], max_depth: f32) -> f32 {
        let Some(bias) = self.bias else {
            return 0.0;
        };
        let resolution = if self.float_depth {
            let exponent = if max_depth > 0.0 && max_depth.is_finite() {
                ((max_depth.to_bits() >> 23) & 0xff) as i32 - 127
            } else {
                -126
            };
            2f32.powi(exponent - 23)
        } else {
            1.0
        };
        let slope = z[0].abs().max(z[1].abs());
        let offset = bias.depth_bias * resolution + bias.slope_scale * slope;
        if bias.clamp > 0.0 {
            offset.min(bias.clamp)
        } else if bias.clamp < 0.0 {
            offset.max(bias.clamp)
        } else {
            offset
        }
    }
}

/// The early depth test: keeps the covered pixels whose interpolated
/// depth passes the face's depth function against the tile's depth, and
/// notes the depth each will write (unless the face disables depth
/// writes) once the shader has run and not discarded it. Without depth
/// state every pixel passes and nothing is written. With `defer` (a
/// shader that writes the stencil reference, whose tests run at its
/// `zs_emit`) nothing is tested: every covered sample's depth is noted
/// for that test.
#[allow(clippy::too_many_arguments)]
pub(super) fn depth_test(
    tile: &mut Tilebuffer,
    covered: &mut Vec<(u32, u32)>,
    coverage: &mut [u32],
    pending: &mut [Option<f32>],
    pending_stencil: &mut [Option<u8>],
    origin: (u32, u32),
    sample_positions: &[(i64, i64)],
    vertices: &[&[f32]; 3],
    adjust: DepthAdjust,
    face: Option<FragmentFace>,
    stencil: Option<FragmentStencil>,
    defer: bool,
    watch: Option<Watch<'_>>,
) {
    let Some(face) = face else {
        return;
    };
    // Nothing to test or write (Mesa's state with the depth test off):
    // every covered sample passes as it is.
    if face.depth_function == ZsFunc::Always
        && face.disable_depth_write
        && stencil.is_none()
        && !defer
    {
        return;
    }
    let z = plane(std::array::from_fn(|v| {
        (
            f64::from(vertices[v][0]),
            f64::from(vertices[v][1]),
            f64::from(vertices[v][2]),
        )
    }));
    let max_depth = vertices.iter().map(|v| v[2].abs()).fold(0.0, f32::max);
    let offset = adjust.offset(&z, max_depth);
    let (low, high) = adjust.range.unwrap_or((0.0, 1.0));
    let reference = face.stencil_reference as u8;
    let samples = tile.colour.samples as usize;
    // One sample a pixel, no stencil, nothing deferred or followed (most
    // draws): the same test without the per-sample bookkeeping.
    if let (1, None, false, None, Some(&(sx, sy))) = (
        samples,
        stencil,
        defer,
        watch.as_ref(),
        sample_positions.first(),
    ) {
        let (fx, fy) = (sx as f32 / 256.0, sy as f32 / 256.0);
        let width = tile.colour.width_px;
        let writes = !face.disable_depth_write;
        covered.retain(|&(x, y)| {
            let pixel = (y * width + x) as usize;
            let passed = coverage[pixel] & 1 != 0 && {
                let cx = (origin.0 + x) as f32 + fx;
                let cy = (origin.1 + y) as f32 + fy;
                let depth = (z[0].mul_add(cx, z[1].mul_add(cy, z[2])) + offset)
                    .max(low)
                    .min(high)
                    .clamp(0.0, 1.0);
                let passed = depth_passes(face.depth_function, depth, tile.depth[pixel]);
                if passed && writes {
                    pending[pixel] = Some(depth);
                }
                passed
            };
            coverage[pixel] = u32::from(passed);
            passed
        });
        return;
    }
    covered.retain(|&(x, y)| {
        let pixel = (y * tile.colour.width_px + x) as usize;
        let first = pixel * samples;
        // Stencil, then depth, per covered sample at the sample's
        // position. A sample failing the stencil test takes the
        // stencil-fail operation now; one failing the depth test the
        // depth-fail one; one passing both notes the depth-pass result,
        // written once the shader has run and kept the sample.
        let mut passed = 0u32;
        let watched = watch.filter(|w| w.pixel == (x, y));
        for (s, &(sx, sy)) in sample_positions.iter().enumerate().take(samples) {
            if coverage[pixel] & (1 << s) == 0 {
                continue;
            }
            let at = first + s;
            let mut stencil_test = None;
            if let Some(st) = stencil {
                let stored = tile.stencil[at];
                let mask = st.read_mask as u8;
                let stencil_passed = depth_passes(
                    st.compare,
                    f32::from(reference & mask),
                    f32::from(stored & mask),
                );
                stencil_test = Some(StencilTest {
                    reference: reference & mask,
                    stored: stored & mask,
                    function: function_name(st.compare),
                    passed: stencil_passed,
                });
                if !stencil_passed {
                    tile.stencil[at] =
                        stencil_op(st.stencil_fail, stored, reference, st.write_mask as u8);
                    if let Some(w) = watched {
                        w.probe.pixel_event(PixelEvent::DepthTest {
                            command: w.command,
                            sample: s as u32,
                            depth: f32::NAN,
                            stored: tile.depth[at],
                            function: function_name(face.depth_function),
                            passed: false,
                            writes: false,
                            stencil: stencil_test,
                        });
                    }
                    continue;
                }
            }
            let cx = (origin.0 + x) as f32 + sx as f32 / 256.0;
            let cy = (origin.1 + y) as f32 + sy as f32 / 256.0;
            let depth = (z[0].mul_add(cx, z[1].mul_add(cy, z[2])) + offset)
                .max(low)
                .min(high)
                .clamp(0.0, 1.0);
            if defer {
                passed |= 1 << s;
                pending[at] = Some(depth);
                continue;
            }
            let depth_pass = depth_passes(face.depth_function, depth, tile.depth[at]);
            if let Some(w) = watched {
                w.probe.pixel_event(PixelEvent::DepthTest {
                    command: w.command,
                    sample: s as u32,
                    depth,
                    stored: tile.depth[at],
                    function: function_name(face.depth_function),
                    passed: depth_pass,
                    writes: depth_pass && !face.disable_depth_write,
                    stencil: stencil_test,
                });
            }
            if depth_pass {
                passed |= 1 << s;
                if !face.disable_depth_write {
                    pending[at] = Some(depth);
                }
            }
            if let Some(st) = stencil {
                let stored = tile.stencil[at];
                let op = if depth_pass {
                    st.depth_pass
                } else {
                    st.depth_fail
                };
                let value = stencil_op(op, stored, reference, st.write_mask as u8);
                if depth_pass {
                    pending_stencil[at] = Some(value);
                } else {
                    tile.stencil[at] = value;
                }
            }
        }
        coverage[pixel] = passed;
        passed != 0
    });
}

/// The stencil test ahead of a shader that writes depth: each covered
/// sample failing it takes the stencil-fail operation and is dropped;
/// the depth test and the depth-pass and depth-fail operations wait for
/// the shader's depth (`zs_emit`).
pub(super) fn stencil_test_early(
    tile: &mut Tilebuffer,
    covered: &mut Vec<(u32, u32)>,
    coverage: &mut [u32],
    stencil: FragmentStencil,
    reference: u8,
) {
    let samples = tile.colour.samples as usize;
    covered.retain(|&(x, y)| {
        let pixel = (y * tile.colour.width_px + x) as usize;
        let covered_samples = coverage[pixel];
        for s in (0..samples).filter(|s| covered_samples & (1 << s) != 0) {
            let at = pixel * samples + s;
            let stored = tile.stencil[at];
            let mask = stencil.read_mask as u8;
            if !depth_passes(
                stencil.compare,
                f32::from(reference & mask),
                f32::from(stored & mask),
            ) {
                tile.stencil[at] = stencil_op(
                    stencil.stencil_fail,
                    stored,
                    reference,
                    stencil.write_mask as u8,
                );
                coverage[pixel] &= !(1 << s);
            }
        }
        coverage[pixel] != 0
    });
}
