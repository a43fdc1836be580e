//! The rasteriser: which pixels and samples a triangle covers, at the
//! pass's sample positions, and the plane equations (coefficients) the
//! fragment shader interpolates its varyings from.
//!
//! Coverage follows the top-left rule at each sample's position (in
//! 1/256 pixel), with vertices far outside the screen moved onto a guard
//! band first so that the edge functions cannot overflow.

use agx_fwif::messages::FaultUnit;
use agx_hw::formats::{CoefficientSource, ShadeModel};

use crate::fault::{unsupported, EngineResult};
use crate::tiler;
use crate::usc::float;

/// Pixels of a tile a triangle covers: pixel centres inside its edges,
/// with the top-left rule for centres exactly on an edge. Positions are
/// snapped to 1/256 pixel, as the rasteriser's fixed-point grid.
pub fn rasterize(
    vertices: [[f32; 2]; 3],
    origin: (u32, u32),
    tile: (u32, u32),
    area: (u32, u32),
    samples: &[(i64, i64)],
) -> Vec<((u32, u32), u32)> {
    let mut out = Vec::new();
    rasterize_into(vertices, origin, tile, area, samples, &mut out);
    out
}

/// [`rasterize`] into `out` (emptied first), whose allocation a tile's
/// primitives reuse.
pub(crate) fn rasterize_into(
    vertices: [[f32; 2]; 3],
    origin: (u32, u32),
    tile: (u32, u32),
    area: (u32, u32),
    samples: &[(i64, i64)],
    out: &mut Vec<((u32, u32), u32)>,
) {
    out.clear();
    // Positions are clamped to a guard band of 2^24 pixels (a vertex
    // beyond it, from a w near zero, moves onto its edge) and edges are
    // evaluated in 128 bits, so no input overflows.
    let fixed = |v: f32| (f64::from(v).clamp(-GUARD_BAND_PX, GUARD_BAND_PX) * 256.0).round() as i64;
    let mut p: [(i64, i64); 3] =
        std::array::from_fn(|i| (fixed(vertices[i][0]), fixed(vertices[i][1])));
    let edge = |a: (i64, i64), b: (i64, i64), x: i64, y: i64| {
        i128::from(b.0 - a.0) * i128::from(y - a.1) - i128::from(b.1 - a.1) * i128::from(x - a.0)
    };
    let area2 = edge(p[0], p[1], p[2].0, p[2].1);
    if area2 == 0 {
        return;
    }
    if area2 < 0 {
        p.swap(1, 2);
    }
    let top_left = |a: (i64, i64), b: (i64, i64)| (a.1 == b.1 && b.0 > a.0) || b.1 < a.1;
    let edges = [(p[0], p[1]), (p[1], p[2]), (p[2], p[0])];
    // Only the pixels of the tile the triangle's bounding box touches.
    let lo = |axis: fn(&(i64, i64)) -> i64| lo_of(&p, axis);
    let hi = |axis: fn(&(i64, i64)) -> i64| hi_of(&p, axis);
    let span = |lo: i64, hi: i64, origin: u32, size: u32, limit: u32| {
        let first = (lo.div_euclid(256) - i64::from(origin)).max(0);
        let last = (hi.div_euclid(256) - i64::from(origin))
            .min(i64::from(size) - 1)
            .min(i64::from(limit) - 1 - i64::from(origin));
        (first, last)
    };
    let (x0, x1) = span(lo(|q| q.0), hi(|q| q.0), origin.0, tile.0, area.0);
    let (y0, y1) = span(lo(|q| q.1), hi(|q| q.1), origin.1, tile.1, area.1);
    if x0 > x1 || y0 > y1 {
        return;
    }
    // An edge is linear, so over the rectangle holding every sample of
    // the span it is least and greatest at corners: strictly inside all
    // three edges at the four corners, the triangle covers every sample
    // of the span; strictly outside one, none.
    let (sx_lo, sx_hi) = (lo_of(samples, |s| s.0), hi_of(samples, |s| s.0));
    let (sy_lo, sy_hi) = (lo_of(samples, |s| s.1), hi_of(samples, |s| s.1));
    let (left, right) = (
        (i64::from(origin.0) + x0) * 256 + sx_lo,
        (i64::from(origin.0) + x1) * 256 + sx_hi,
    );
    let (top, bottom) = (
        (i64::from(origin.1) + y0) * 256 + sy_lo,
        (i64::from(origin.1) + y1) * 256 + sy_hi,
    );
    let corners = [(left, top), (right, top), (left, bottom), (right, bottom)];
    // Where every position involved lies within 2^28 (1/256 pixels,
    // 2^20 pixels) of the origin, as any triangle but one clamped to the
    // guard band does, every edge value fits in 64 bits.
    let near = |v: i64| v.unsigned_abs() < NEAR_FIXED;
    if samples.len() <= MAX_STEPPED_SAMPLES
        && p.iter().chain(&corners).all(|&(x, y)| near(x) && near(y))
    {
        stepped_coverage(&edges, corners, ((x0, x1), (y0, y1)), origin, samples, out);
        return;
    }
    match corners_against_edges(&edges, &corners, edge) {
        Some(false) => return,
        Some(true) if !samples.is_empty() => {
            push_covering(out, ((x0, x1), (y0, y1)), samples.len());
            return;
        }
        _ => {}
    }
    for ty in y0..=y1 {
        let py = (i64::from(origin.1) + ty) * 256;
        for tx in x0..=x1 {
            let px = (i64::from(origin.0) + tx) * 256;
            let mut mask = 0u32;
            for (s, &(sx, sy)) in samples.iter().enumerate() {
                let inside = edges.iter().all(|&(a, b)| {
                    let e = edge(a, b, px + sx, py + sy);
                    e > 0 || (e == 0 && top_left(a, b))
                });
                if inside {
                    mask |= 1 << s;
                }
            }
            if mask != 0 {
                out.push(((tx as u32, ty as u32), mask));
            }
        }
    }
}

/// The rectangle holding every sample of a span (its `corners`) against
/// the triangle's `edges`, each evaluated by `edge` (linear, so least and
/// greatest at corners): `Some(false)` when it is outside one edge at all
/// four corners (no sample covered), `Some(true)` when it is strictly
/// inside all three at all four (every sample covered), `None` otherwise.
fn corners_against_edges<T: PartialOrd + Default>(
    edges: &[Edge; 3],
    corners: &[(i64, i64); 4],
    edge: impl Fn((i64, i64), (i64, i64), i64, i64) -> T,
) -> Option<bool> {
    let zero = T::default();
    if edges
        .iter()
        .any(|&(a, b)| corners.iter().all(|&(x, y)| edge(a, b, x, y) < zero))
    {
        return Some(false);
    }
    edges
        .iter()
        .all(|&(a, b)| corners.iter().all(|&(x, y)| edge(a, b, x, y) > zero))
        .then_some(true)
}

/// Every pixel of the span, each with all of its `samples` covered.
fn push_covering(
    out: &mut Vec<((u32, u32), u32)>,
    ((x0, x1), (y0, y1)): ((i64, i64), (i64, i64)),
    samples: usize,
) {
    let full = if samples >= 32 {
        u32::MAX
    } else {
        (1u32 << samples) - 1
    };
    for ty in y0..=y1 {
        for tx in x0..=x1 {
            out.push(((tx as u32, ty as u32), full));
        }
    }
}

/// Positions (in 1/256 pixel) below this in magnitude keep every edge
/// value in 64 bits: a product of two differences is under 2^58, and a
/// step past the span's last pixel stays under 2^60.
const NEAR_FIXED: u64 = 1 << 28;

/// An edge from one vertex to the next (1/256 pixel).
type Edge = ((i64, i64), (i64, i64));

/// The most samples [`stepped_coverage`] takes (a pass has 1, 2 or 4).
const MAX_STEPPED_SAMPLES: usize = 4;

/// [`rasterize_into`]'s coverage for positions within [`NEAR_FIXED`]:
/// the same corner tests, then each edge stepped from pixel to pixel in
/// 64 bits (its value at a pixel is the last one's plus a constant, and
/// at a sample the pixel corner's plus the sample's constant offset, the
/// top-left rule's 1 folded in: a sample is inside an edge when `e > 0`,
/// or `e == 0` on a top or left edge, so when `e + 1 > 0` there), with
/// no branch per sample.
fn stepped_coverage(
    edges: &[Edge; 3],
    corners: [(i64, i64); 4],
    ((x0, x1), (y0, y1)): ((i64, i64), (i64, i64)),
    origin: (u32, u32),
    samples: &[(i64, i64)],
    out: &mut Vec<((u32, u32), u32)>,
) {
    let edge = |a: (i64, i64), b: (i64, i64), x: i64, y: i64| {
        (b.0 - a.0) * (y - a.1) - (b.1 - a.1) * (x - a.0)
    };
    match corners_against_edges(edges, &corners, edge) {
        Some(false) => return,
        Some(true) if !samples.is_empty() => {
            push_covering(out, ((x0, x1), (y0, y1)), samples.len());
            return;
        }
        _ => {}
    }
    let top_left = |a: (i64, i64), b: (i64, i64)| (a.1 == b.1 && b.0 > a.0) || b.1 < a.1;
    let (px0, py0) = (
        (i64::from(origin.0) + x0) * 256,
        (i64::from(origin.1) + y0) * 256,
    );
    let mut row = edges.map(|(a, b)| edge(a, b, px0, py0));
    let step_x = edges.map(|(a, b)| (b.1 - a.1) * 256);
    let step_y = edges.map(|(a, b)| (b.0 - a.0) * 256);
    let mut offsets = [[0i64; 3]; MAX_STEPPED_SAMPLES];
    for (offset, &(sx, sy)) in offsets.iter_mut().zip(samples) {
        *offset = std::array::from_fn(|k| {
            let (a, b) = edges[k];
            (b.0 - a.0) * sy - (b.1 - a.1) * sx + i64::from(top_left(a, b))
        });
    }
    let offsets = &offsets[..samples.len()];
    if let [offset] = offsets {
        // One sample a pixel: its offset folded into the row's values.
        let mut row: [i64; 3] = std::array::from_fn(|k| row[k] + offset[k]);
        for ty in y0..=y1 {
            let mut e = row;
            for tx in x0..=x1 {
                if (e[0] > 0) & (e[1] > 0) & (e[2] > 0) {
                    out.push(((tx as u32, ty as u32), 1));
                }
                for k in 0..3 {
                    e[k] -= step_x[k];
                }
            }
            for k in 0..3 {
                row[k] += step_y[k];
            }
        }
        return;
    }
    for ty in y0..=y1 {
        let mut e = row;
        for tx in x0..=x1 {
            let mut mask = 0u32;
            for (s, o) in offsets.iter().enumerate() {
                let inside = u32::from(e[0] + o[0] > 0)
                    & u32::from(e[1] + o[1] > 0)
                    & u32::from(e[2] + o[2] > 0);
                mask |= inside << s;
            }
            if mask != 0 {
                out.push(((tx as u32, ty as u32), mask));
            }
            for k in 0..3 {
                e[k] -= step_x[k];
            }
        }
        for k in 0..3 {
            row[k] += step_y[k];
        }
    }
}

/// The least and the greatest of `points`' coordinate `axis` (0 for
/// none).
fn lo_of(points: &[(i64, i64)], axis: fn(&(i64, i64)) -> i64) -> i64 {
    points.iter().map(axis).min().unwrap_or(0)
}

fn hi_of(points: &[(i64, i64)], axis: fn(&(i64, i64)) -> i64) -> i64 {
    points.iter().map(axis).max().unwrap_or(0)
}

/// The rasteriser's guard band, in pixels either side of the origin.
const GUARD_BAND_PX: f64 = (1 << 24) as f64;

/// The sample positions of a pass, in 1/256 pixel from a pixel's
/// top-left corner: from `ppp_multisamplectl`, or the standard pattern
/// when it is 0.
pub(crate) fn sample_positions(samples: u8, control: u64) -> Vec<(i64, i64)> {
    let control = if control == 0 {
        match samples {
            2 => 0x44cc,
            4 => 0xeaa2_6e26,
            _ => 0x88,
        }
    } else {
        control
    };
    let l = agx_hw::formats::SampleLocations::decode_fields(&control.to_le_bytes());
    let all = [
        (l.sample_0_x, l.sample_0_y),
        (l.sample_1_x, l.sample_1_y),
        (l.sample_2_x, l.sample_2_y),
        (l.sample_3_x, l.sample_3_y),
        (l.sample_4_x, l.sample_4_y),
        (l.sample_5_x, l.sample_5_y),
        (l.sample_6_x, l.sample_6_y),
        (l.sample_7_x, l.sample_7_y),
    ];
    all.iter()
        .take(usize::from(samples.max(1)))
        .map(|&(x, y)| (i64::from(x) * 16, i64::from(y) * 16))
        .collect()
}

/// The plane (A, B, C) through three (x, y, value) points, in f32.
pub(crate) fn plane(points: [(f64, f64, f64); 3]) -> [f32; 3] {
    plane_exact(points).map(|v| v as f32)
}

/// The plane (A, B, C) through three (x, y, value) points, unrounded.
fn plane_exact(points: [(f64, f64, f64); 3]) -> [f64; 3] {
    let [(x0, y0, v0), (x1, y1, v1), (x2, y2, v2)] = points;
    let det = (x1 - x0) * (y2 - y0) - (x2 - x0) * (y1 - y0);
    if det == 0.0 {
        return [0.0, 0.0, v0];
    }
    let a = ((v1 - v0) * (y2 - y0) - (v2 - v0) * (y1 - y0)) / det;
    let b = ((x1 - x0) * (v2 - v0) - (x2 - x0) * (v1 - v0)) / det;
    let c = v0 - a * x0 - b * y0;
    [a, b, c]
}

/// A coefficient register as the setup unit fills it for a primitive.
///
/// A plane is kept unrounded per primitive; the registers of the tile
/// being shaded are its three f32 words with C at the corner of the
/// 32x32 tile, each rounded once, which `ldcf` reads and `iter`
/// evaluates (`fragment::io`). How many bits the hardware's setup keeps
/// is not public.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Coefficient {
    /// value = A x + B y + C at window position (x, y).
    Plane([f64; 3]),
    /// The same value over the whole primitive, as its bits (a flat
    /// varying, which may be an integer, or the primitive id).
    Constant(u32),
}

impl Coefficient {
    /// A register nothing wrote: the plane 0.
    pub(crate) const ZERO: Coefficient = Coefficient::Plane([0.0; 3]);

    /// The three words `ldcf` reads: A, B and C at window position
    /// `origin` (the shaded tile's corner).
    pub(crate) fn words_at(self, origin: (f64, f64)) -> [f32; 3] {
        match self {
            Coefficient::Plane([a, b, c]) => {
                [a as f32, b as f32, (a * origin.0 + b * origin.1 + c) as f32]
            }
            Coefficient::Constant(bits) => [0.0, 0.0, f32::from_bits(bits)],
        }
    }
}

/// The iterator's value of a plane from its three words (as `ldcf` reads
/// them) at `(x, y)` relative to the tile's corner: A x + B y + C
/// computed exactly and rounded once to f32 (nearest even), a dot product
/// as Mesa describes the iterator's. The hardware's rounding is not
/// public (`Documentation/gpu.md`); Mesa's lowering of
/// `interpolateAtOffset`, two fused multiply-adds of the same words, gives
/// the same bits wherever A x or B y is 0, and can differ by an ulp
/// elsewhere.
pub(crate) fn iterate([a, b, c]: [f32; 3], x: f32, y: f32) -> f32 {
    let ax = f64::from(a) * f64::from(x);
    let by = f64::from(b) * f64::from(y);
    // Both products are exact in f64 (24 x 24 bits); the sum rounded to
    // odd keeps the exact sum's side of every f32, so the conversion is
    // the single rounding.
    float::sum3_to_odd(ax, by, f64::from(c)) as f32
}

/// Where a finite f32's bits lie: it is a multiple of 2^`lsb` and its
/// magnitude is below 2^`top` (zero's span is empty: its `lsb` above and
/// its `top` below any product's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BitSpan {
    lsb: i32,
    top: i32,
}

impl BitSpan {
    const ZERO: BitSpan = BitSpan {
        lsb: 1 << 20,
        top: -(1 << 20),
    };

    /// The span of `value`, none for an infinity or a NaN.
    pub(crate) fn of(value: f32) -> Option<BitSpan> {
        let bits = value.to_bits();
        let biased_exponent = ((bits >> 23) & 0xFF) as i32;
        let fraction = bits & 0x7F_FFFF;
        match (biased_exponent, fraction) {
            (0xFF, _) => None,
            (0, 0) => Some(BitSpan::ZERO),
            _ => {
                let significand = if biased_exponent == 0 {
                    fraction
                } else {
                    fraction | 0x80_0000
                };
                // value = significand * 2^scale, significand < 2^24.
                let scale = biased_exponent.max(1) - 150;
                Some(BitSpan {
                    lsb: scale + significand.trailing_zeros() as i32,
                    top: scale + 24,
                })
            }
        }
    }
}

/// A point the iterator evaluates planes at (relative to the tile's
/// corner), and whether it lies on the sample grid near the tile.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IterPoint {
    x: f32,
    y: f32,
    /// Both coordinates are multiples of 2^[`GRID_LSB`] below
    /// 2^[`GRID_TOP`] in magnitude, as a pixel's centre and its samples'
    /// positions in and around the tile are.
    on_grid: bool,
}

/// The finest bit of a point on the sample grid (1/256 pixel).
const GRID_LSB: i32 = -8;
/// A point on the sample grid near the tile lies within 2^6 pixels of
/// its corner.
const GRID_TOP: i32 = 6;

impl IterPoint {
    /// A pixel's centre (x, y) from the coefficients' origin: a whole
    /// pixel coordinate plus a half, less the origin's, all exact in f32
    /// (they are far below 2^23), so a multiple of 1/2 and on the grid
    /// wherever it lies within the grid's reach; [`IterPoint::new`] without
    /// the test of the fraction.
    #[inline(always)]
    pub(crate) fn centre(x: f32, y: f32) -> IterPoint {
        const LIMIT: f32 = (1u32 << GRID_TOP) as f32;
        let point = IterPoint {
            x,
            y,
            on_grid: x.abs() < LIMIT && y.abs() < LIMIT,
        };
        debug_assert_eq!(point.on_grid, IterPoint::new(x, y).on_grid);
        point
    }

    #[inline(always)]
    pub(crate) fn new(x: f32, y: f32) -> IterPoint {
        // Scaling by a power of two is exact, and the scaled value (below
        // 2^14 in magnitude) converts to an integer exactly when it is
        // one; a NaN or an infinity is on no grid.
        const LIMIT: f32 = (1u32 << GRID_TOP) as f32;
        const SCALE: f32 = (1u32 << -GRID_LSB) as f32;
        let on = |v: f32| v.abs() < LIMIT && (v * SCALE) as i32 as f32 == v * SCALE;
        IterPoint {
            x,
            y,
            on_grid: on(x) && on(y),
        }
    }
}

/// A coefficient register as the iterator reads it in one tile: a
/// plane's three words at the tile's corner ([`Coefficient::words_at`])
/// with their spans, or a flat value's bits. Made once per primitive and
/// tile, evaluated at each lane's point.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TilePlane {
    Flat(u32),
    Plane {
        words: [f32; 3],
        spans: Option<[BitSpan; 3]>,
        /// f64 holds A x + B y + C exactly at every point on the sample
        /// grid ([`IterPoint`]): the spans' test passes with the grid's
        /// widest and finest coordinates.
        exact_on_grid: bool,
    },
}

impl TilePlane {
    pub(crate) fn new(coefficient: Coefficient, origin: (f64, f64)) -> TilePlane {
        match coefficient {
            Coefficient::Constant(bits) => TilePlane::Flat(bits),
            plane => TilePlane::of_words(plane.words_at(origin)),
        }
    }

    /// The plane of three words as `ldcf` reads them.
    pub(crate) fn of_words(words: [f32; 3]) -> TilePlane {
        let spans = match words.map(BitSpan::of) {
            [Some(a), Some(b), Some(c)] => Some([a, b, c]),
            _ => None,
        };
        // A zero coordinate's term only narrows the sum (its span is
        // empty), so the grid's widest and finest coordinates bound
        // every point's.
        let exact_on_grid = spans.is_some_and(|[a, b, c]| {
            let top = (a.top + GRID_TOP).max(b.top + GRID_TOP).max(c.top);
            let lsb = (a.lsb + GRID_LSB).min(b.lsb + GRID_LSB).min(c.lsb);
            top + 2 - lsb <= f64::MANTISSA_DIGITS as i32
        });
        TilePlane::Plane {
            words,
            spans,
            exact_on_grid,
        }
    }

    /// The value at `point`: a flat value's bits, or [`iterate`]'s
    /// result. Where f64 holds A x + B y + C exactly, its plain sum
    /// rounded to f32 is that single rounding: the products are exact
    /// (24 by 24 bits), and every partial sum is a multiple of the
    /// smallest term's 2^lsb below 2^(top + 2), so at most 53 bits when
    /// `top + 2 - lsb <= 53`. Elsewhere (and for infinities and NaNs)
    /// `iterate` rounds through sum-to-odd.
    #[inline(always)]
    pub(crate) fn at(&self, point: &IterPoint) -> f32 {
        match *self {
            TilePlane::Flat(bits) => f32::from_bits(bits),
            TilePlane::Plane {
                words,
                exact_on_grid: true,
                ..
            } if point.on_grid => plain_sum(words, point),
            TilePlane::Plane { .. } => self.off_grid(point),
        }
    }

    /// [`TilePlane::at`] of a plane off the grid (or not exact on it).
    #[inline(never)]
    fn off_grid(&self, point: &IterPoint) -> f32 {
        let TilePlane::Plane { words, .. } = *self else {
            return self.at(point);
        };
        self.exact_sum(point)
            .unwrap_or_else(|| iterate(words, point.x, point.y))
    }

    /// A plane's value at `point` where f64 holds it exactly, rounded.
    fn exact_sum(&self, point: &IterPoint) -> Option<f32> {
        let TilePlane::Plane {
            words,
            spans: Some([a, b, c]),
            ..
        } = *self
        else {
            return None;
        };
        let (x, y) = (BitSpan::of(point.x)?, BitSpan::of(point.y)?);
        let top = (a.top + x.top).max(b.top + y.top).max(c.top);
        let lsb = (a.lsb + x.lsb).min(b.lsb + y.lsb).min(c.lsb);
        (top + 2 - lsb <= f64::MANTISSA_DIGITS as i32).then(|| plain_sum(words, point))
    }
}

/// A x + B y + C in f64, rounded to f32: the same expression
/// `sum3_to_odd` returns for an exact sum, so a zero's sign is the same.
fn plain_sum(words: [f32; 3], point: &IterPoint) -> f32 {
    let [a, b, c] = words.map(f64::from);
    (a * f64::from(point.x) + b * f64::from(point.y) + c) as f32
}

/// Where the values a binned primitive carries beyond its vertices'
/// outputs are among each vertex's values (see `tiler::RECORD_*`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Extras {
    /// A point sprite's coordinate (s, then t).
    pub point_coord: Option<usize>,
    /// The primitive id (u32 bits).
    pub primitive_id: Option<usize>,
}

/// The coefficient registers of a primitive, from the fragment shader's
/// coefficient bindings: each binding turns `components` slots from
/// `base_slot` into planes at `base_coefficient_register`. The slots are
/// the hardware's: slot 0 is 1/w (the W the fragment shader divides by,
/// `gl_FragCoord.w`), slot 1 the window z when the PPP's output select
/// has `frag_coord_z`, and the vertex shader's outputs after its position
/// (its slots 4 on) follow. A `FragcoordZ` binding reads the window z
/// whatever its slot. Linear planes interpolate the value in window
/// space; perspective ones interpolate value/w (divided by the W plane
/// with `iterproj`); flat ones are the provoking vertex's value. A
/// shader with no bindings has no table (Mesa gives its address as 0),
/// and none is read.
///
/// `vertices` are the binned vertices: window x, y, z, 1/w, then the
/// vertex shader's outputs from its slot 4. The registers are written
/// into `planes` (whatever it held is dropped: a pass reuses them).
pub(crate) fn setup_coefficients(
    bindings: Option<&tiler::CfBindings>,
    ppp: &tiler::PppState,
    vertices: &[&[f32]; 3],
    extras: Extras,
    planes: &mut Vec<Coefficient>,
) -> Result<(), EngineResult> {
    planes.clear();
    let Some((header, bindings)) = bindings else {
        return Ok(());
    };
    let first_output_slot = 1 + u32::from(ppp.frag_coord_z);
    planes.resize(
        header.coefficient_register_count as usize,
        Coefficient::ZERO,
    );
    for &(at, b) in bindings {
        for c in 0..b.components {
            let register = (b.base_coefficient_register + c) as usize;
            let Some(out) = planes.get_mut(register) else {
                return Err(unsupported(
                    at,
                    FaultUnit::Usc,
                    format_args!(
                        "a coefficient binding to cf{register}, past the {} coefficient registers its table declares",
                        header.coefficient_register_count
                    ),
                ));
            };
            let slot = b.base_slot + c;
            if b.source == CoefficientSource::PrimitiveId {
                // An integer, the same at every vertex: its bits.
                let id = extras
                    .primitive_id
                    .and_then(|at| vertices[0].get(at))
                    .map_or(0, |v| v.to_bits());
                *out = Coefficient::Constant(id);
                continue;
            }
            let index = match b.source {
                CoefficientSource::FragcoordZ => Some(2),
                CoefficientSource::Varying if slot == 0 => Some(3),
                CoefficientSource::Varying if slot == 1 && ppp.frag_coord_z => Some(2),
                CoefficientSource::Varying => slot
                    .checked_sub(first_output_slot)
                    .map(|output| 4 + output as usize),
                // A point sprite's (s, t), interpolated across it; 0
                // for other primitives (GL leaves gl_PointCoord undefined
                // there).
                CoefficientSource::PointCoord => extras.point_coord.map(|at| at + (c as usize & 1)),
                // Barycentrics are not modelled: refused, not read as a
                // slot.
                source => {
                    return Err(unsupported(
                        at,
                        FaultUnit::Usc,
                        format_args!("a coefficient binding of source {source:?} (not modelled)"),
                    ))
                }
            };
            // A slot past the vertex's outputs reads 0.
            let value = |v: usize| -> f64 {
                f64::from(
                    index
                        .and_then(|i| vertices[v].get(i))
                        .copied()
                        .unwrap_or(0.0),
                )
            };
            let xy = |v: usize| (f64::from(vertices[v][0]), f64::from(vertices[v][1]));
            // A flat value keeps its bits (an integer varying's).
            let flat = |v: usize| -> Coefficient {
                Coefficient::Constant(
                    index
                        .and_then(|i| vertices[v].get(i))
                        .map_or(0, |value| value.to_bits()),
                )
            };
            *out = match b.shade_model {
                ShadeModel::FlatVertex0 => flat(0),
                ShadeModel::FlatVertex1 => flat(1),
                ShadeModel::FlatVertex2 => flat(2),
                ShadeModel::Perspective if b.source == CoefficientSource::Varying => {
                    Coefficient::Plane(plane_exact(std::array::from_fn(|v| {
                        let (x, y) = xy(v);
                        (x, y, value(v) * f64::from(vertices[v][3]))
                    })))
                }
                _ => Coefficient::Plane(plane_exact(std::array::from_fn(|v| {
                    let (x, y) = xy(v);
                    (x, y, value(v))
                }))),
            };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CENTRE: [(i64, i64); 1] = [(128, 128)];

    /// Which samples of pixel (x, y) of the tile at `origin` the
    /// triangle covers, by barycentric weights of the snapped vertices
    /// in f64 (exact at these magnitudes), a weight of 0 counting on
    /// top and left edges only.
    fn reference_mask(
        v: [[f32; 2]; 3],
        (x, y): (u32, u32),
        origin: (u32, u32),
        samples: &[(i64, i64)],
    ) -> u32 {
        let snap = |c: f32| (f64::from(c) * 256.0).round();
        let mut p: Vec<(f64, f64)> = v.iter().map(|q| (snap(q[0]), snap(q[1]))).collect();
        let cross = |a: (f64, f64), b: (f64, f64), c: (f64, f64)| {
            (b.0 - a.0) * (c.1 - a.1) - (b.1 - a.1) * (c.0 - a.0)
        };
        let area = cross(p[0], p[1], p[2]);
        if area == 0.0 {
            return 0;
        }
        if area < 0.0 {
            p.swap(1, 2);
        }
        let mut mask = 0;
        for (s, &(sx, sy)) in samples.iter().enumerate() {
            let q = (
                f64::from(origin.0 + x) * 256.0 + sx as f64,
                f64::from(origin.1 + y) * 256.0 + sy as f64,
            );
            let inside = (0..3).all(|i| {
                let (a, b) = (p[i], p[(i + 1) % 3]);
                let w = cross(a, b, q);
                let top_left = (a.1 == b.1 && b.0 > a.0) || b.1 < a.1;
                w > 0.0 || (w == 0.0 && top_left)
            });
            if inside {
                mask |= 1 << s;
            }
        }
        mask
    }

    proptest! {
        /// Every pixel of a tile gets the samples the reference finds,
        /// whether the triangle covers the tile whole or in part.
        #[test]
        fn coverage_matches_a_per_sample_reference(
            v in prop::array::uniform3(prop::array::uniform2(-64.0f32..192.0)),
            samples in prop::sample::select(vec![1u8, 2, 4]),
            tile in prop::sample::select(vec![16u32, 32]),
            (ox, oy) in (0u32..4, 0u32..4),
        ) {
            let v = v.map(|q| q.map(|c| (c * 4.0).round() / 4.0));
            let positions = sample_positions(samples, 0);
            let origin = (ox * tile, oy * tile);
            let area = (128, 128);
            let got: std::collections::HashMap<(u32, u32), u32> =
                rasterize(v, origin, (tile, tile), area, &positions).into_iter().collect();
            for y in 0..tile {
                for x in 0..tile {
                    let want = reference_mask(v, (x, y), origin, &positions);
                    prop_assert_eq!(got.get(&(x, y)).copied().unwrap_or(0), want, "pixel ({}, {})", x, y);
                }
            }
        }
    }

    #[test]
    fn planes_evaluated_in_f64_where_exact_agree_with_the_iterator() {
        let plane = |a: f32, b: f32, c: f32| TilePlane::of_words([a, b, c]);
        // 1 + 2^-24 + 2^-81 rounds up to the f32 after 1; a plain f64 sum
        // loses 2^-81 and then ties to even, down to 1: not exact in
        // f64, so the iterator's rounding decides.
        let wide = plane(2f32.powi(-25), 2f32.powi(-81), 1.0);
        let at = IterPoint::new(2.0, 1.0);
        assert_eq!(wide.exact_sum(&at), None);
        assert_eq!(wide.at(&at), 1.0 + 2f32.powi(-23));
        assert_eq!((2f64.powi(-24) + 2f64.powi(-81) + 1.0) as f32, 1.0);
        // At the bound: 3.5 + 2^-22 + 1.75 + 2^-51 needs 55 bits (the
        // terms' spans say so), and f64's rounding of it would tie
        // twice, down to 5.25.
        let edge = plane(2f32.powi(-50), 3.5, 3.5 + 2f32.powi(-22));
        let half = IterPoint::new(0.5, 0.5);
        assert_eq!(edge.exact_sum(&half), None);
        assert_eq!(edge.at(&half), 5.25 + 2f32.powi(-21));
        assert_eq!(
            (2f64.powi(-51) + 1.75 + (3.5 + 2f64.powi(-22))) as f32,
            5.25
        );
        // Narrow enough: the plain sum.
        let narrow = plane(0.25, -0.125, 3.0);
        assert_eq!(narrow.exact_sum(&IterPoint::new(4.5, 8.5)), Some(3.0625));
        // Exact in f64 at points near the corner but not at every point
        // of the grid: at (63.5, 1) the sum is 63.5 + half an f32 step +
        // 2^-48, which f64 rounds to the tie (and then to even, down);
        // the plane must not be summed plainly there.
        let far = plane(1.0 + 2f32.powi(-23), -95.0 * 2f32.powi(-24), 2f32.powi(-48));
        let wide_point = IterPoint::new(63.5, 1.0);
        assert_eq!(far.at(&wide_point), 63.5 + 2f32.powi(-18));
        assert_eq!(
            ((1.0 + 2f64.powi(-23)) * 63.5 - 95.0 * 2f64.powi(-24) + 2f64.powi(-48)) as f32,
            63.5
        );
        // Zeros keep IEEE's sign; a flat value keeps its bits.
        let zeros = plane(-0.0, -0.0, -0.0);
        assert_eq!(zeros.at(&IterPoint::new(0.5, 0.5)).to_bits(), 0x8000_0000);
        assert_eq!(TilePlane::Flat(0x7FC0_0001).at(&at).to_bits(), 0x7FC0_0001);

        // Random planes and points against `iterate`, with exponents
        // near each other (mostly exact) and far apart (mostly not), C
        // near cancelling A x + B y, zeros, infinities and NaNs.
        let mut next = crate::usc::test_rng::xorshift(0x2545_F491_4F6C_DD1Du64);
        let value = |spread: u64, next: &mut dyn FnMut() -> u64| {
            let r = next();
            match r % 64 {
                0 => 0.0,
                1 => f32::INFINITY,
                2 => f32::from_bits(0x7FC0_0000 | ((r >> 40) as u32 & 0x3F_FFFF)),
                3 => f32::from_bits((r >> 8) as u32 & 0x807F_FFFF), // a denormal
                _ => {
                    let exponent = 127 - spread / 2 + (r >> 32) % spread;
                    let bits = ((r >> 8) & 1) << 31 | exponent << 23 | (r >> 9) & 0x7F_FFFF;
                    f32::from_bits(bits as u32)
                }
            }
        };
        let (mut exact, mut rounded) = (0, 0);
        for i in 0..200_000u64 {
            let spread = [4, 20, 60, 250][(i % 4) as usize];
            let (a, b) = (value(spread, &mut next), value(spread, &mut next));
            let r = next();
            let (x, y) = (
                (r % 32) as f32 + [0.5, (r >> 8 & 255) as f32 / 256.0][(r >> 16 & 1) as usize],
                (r >> 20 & 31) as f32 + 0.5,
            );
            // A quarter of the points anywhere on the sample grid (within
            // 64 pixels of the corner, either side).
            let (x, y) = if r >> 50 & 3 == 0 {
                let grid = |bits: u64| (bits & 0x7FFF) as f32 / 256.0 - 64.0;
                (grid(r >> 3), grid(r >> 33))
            } else {
                (x, y)
            };
            let c = if r >> 30 & 3 == 0 {
                // Nearly cancelling: C is -(A x + B y) rounded, nudged.
                let sum = -(f64::from(a) * f64::from(x) + f64::from(b) * f64::from(y)) as f32;
                f32::from_bits(sum.to_bits().wrapping_add((r >> 40) as u32 % 3))
            } else {
                value(spread, &mut next)
            };
            let (p, point) = (plane(a, b, c), IterPoint::new(x, y));
            match p.exact_sum(&point) {
                Some(_) => exact += 1,
                None => rounded += 1,
            }
            // A NaN's payload is whichever operand's the host's
            // addition kept (the shader's registers take the default
            // NaN): that it is a NaN is what both must agree on.
            let (fast, reference) = (p.at(&point), iterate([a, b, c], x, y));
            assert!(
                fast.to_bits() == reference.to_bits() || fast.is_nan() && reference.is_nan(),
                "{a:e} {b:e} {c:e} at ({x}, {y}): {fast:e} against {reference:e}"
            );
        }
        assert!(
            exact > 50_000 && rounded > 50_000,
            "{exact} exact, {rounded} not"
        );
    }

    #[test]
    fn vertices_far_outside_the_guard_band_still_rasterise() {
        // A vertex at 1e30 (w near zero) is moved onto the guard band: the
        // triangle still covers the whole tile, and nothing overflows.
        for far in [1.0e30_f32, f32::MAX, f32::INFINITY] {
            let covered = rasterize(
                [[0.0, 0.0], [64.0, 0.0], [0.0, far]],
                (0, 0),
                (32, 32),
                (32, 32),
                &CENTRE,
            );
            assert_eq!(covered.len(), 32 * 32, "far = {far}");
        }
        // Huge triangles both ways round, and NaN, give no panic.
        let huge = rasterize(
            [[-1.0e38, -1.0e38], [1.0e38, -1.0e38], [0.0, 1.0e38]],
            (0, 0),
            (32, 32),
            (32, 32),
            &CENTRE,
        );
        assert_eq!(huge.len(), 32 * 32);
        let _ = rasterize(
            [[f32::NAN, 0.0], [64.0, 0.0], [0.0, 64.0]],
            (0, 0),
            (32, 32),
            (32, 32),
            &CENTRE,
        );
    }
}
