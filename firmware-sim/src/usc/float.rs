//! Floating-point behaviour of the shader core.
//!
//! fp32 arithmetic flushes denormals to zero on input and output (keeping
//! the sign), as the G13 ALUs do; fp16 keeps its denormals. A 16-bit
//! register read by a 32-bit float instruction is an fp16 value widened
//! exactly, and a 16-bit destination of a 32-bit instruction receives the
//! result rounded to fp16 (round to nearest even). Fused multiply-add
//! rounds once. A NaN result is the default NaN (0x7fc00000, 0x7e00),
//! whatever NaN went in, and an fp32 result whose exact value is below the
//! smallest normal flushes even when it would round up to it (applegpu's
//! hardware-tested model flushes before rounding).

use half::f16;

/// Flushes an fp32 denormal to a zero of the same sign.
pub(crate) fn ftz(value: f32) -> f32 {
    if value.is_subnormal() {
        f32::from_bits(value.to_bits() & 0x8000_0000)
    } else {
        value
    }
}

/// The default NaN the ALUs write for every NaN fp32 result.
pub(crate) const DEFAULT_NAN_F32: u32 = 0x7FC0_0000;
/// The default NaN for fp16 results.
pub(crate) const DEFAULT_NAN_F16: u16 = 0x7E00;

/// A NaN becomes the default NaN; other values are unchanged.
pub(crate) fn default_nan_f32(value: f32) -> f32 {
    if value.is_nan() {
        f32::from_bits(DEFAULT_NAN_F32)
    } else {
        value
    }
}

/// An fp16 NaN becomes the default NaN.
pub(crate) fn quiet_f16(bits: u16) -> u16 {
    if f16::from_bits(bits).is_nan() {
        DEFAULT_NAN_F16
    } else {
        bits
    }
}

/// An fp32 value as the ALU writes it: a denormal flushed to a zero of
/// its sign, a NaN the default NaN. Applied once, where a result is
/// written (`write_float`, the reductions).
#[inline(always)]
pub(crate) fn canonical_f32(value: f32) -> f32 {
    default_nan_f32(ftz(value))
}

/// The flush before rounding: `rounded` is a result rounded to fp32,
/// `exact` gives its unrounded value (or the f64 rounding of it). A result
/// whose exact magnitude is below the smallest normal becomes a zero of
/// its sign even if it rounded up to the smallest normal; only a result of
/// exactly that magnitude needs the exact value, so the common path
/// computes nothing more. (Results that round to denormals are flushed by
/// [`canonical_f32`].)
#[inline(always)]
pub(crate) fn flush_before_rounding(rounded: f32, exact: impl FnOnce() -> f64) -> f32 {
    if rounded.abs() == f32::MIN_POSITIVE && exact().abs() < f64::from(f32::MIN_POSITIVE) {
        if rounded.is_sign_negative() {
            -0.0
        } else {
            0.0
        }
    } else {
        rounded
    }
}

/// `x.floor()` without libm's `floorf` (a call on hosts without SSE4.1):
/// below 2^23 in magnitude through a truncating integer conversion, exact
/// (zeros keep their sign; NaN, infinities and larger values, all
/// integral or not finite, go to `floor`).
#[inline]
pub(crate) fn floor_f32(x: f32) -> f32 {
    const TWO_23: f32 = 8_388_608.0;
    if x.abs() < TWO_23 && x != 0.0 {
        let truncated = x as i32 as f32;
        if truncated > x {
            truncated - 1.0
        } else {
            truncated
        }
    } else {
        x.floor()
    }
}

/// `x + y` as the fp32 ALU computes it (rounded once, flushed before
/// rounding), before [`canonical_f32`].
#[inline(always)]
pub(crate) fn add_f32(x: f32, y: f32) -> f32 {
    flush_before_rounding(x + y, || f64::from(x) + f64::from(y))
}

/// `x * y` as the fp32 ALU computes it, before [`canonical_f32`]: rounded
/// once, flushed before rounding, and a zero product signed as IEEE signs
/// it (`-0 * 1 = -0`). applegpu's model adds +0 (`fma(x, y, 0)`, a zero
/// product +0), which its hardware tests do not reach (no zero operand);
/// Mesa's Vulkan driver advertises signed-zero preservation for fp32 and
/// lowers only `fmin`/`fmax` for it, as a conformant driver, so the
/// hardware keeps the sign (`Documentation/isa.md`).
#[inline(always)]
pub(crate) fn mul_f32(x: f32, y: f32) -> f32 {
    flush_before_rounding(x * y, || f64::from(x) * f64::from(y))
}

/// `x * y + z` rounded once; before [`canonical_f32`]. The flush test
/// sees the exact value's side of the smallest normal: the product is
/// exact in f64 (24 x 24 bits) and the sum is rounded to odd, where the
/// f64 sum could round an exact value just below the smallest normal up
/// to it.
#[inline(always)]
pub(crate) fn fma_f32(x: f32, y: f32, z: f32) -> f32 {
    flush_before_rounding(x.mul_add(y, z), || fma_exact(x, y, z))
}

/// [`fma_f32`]'s exact value rounded to odd, out of line: only a result
/// of the smallest normal's magnitude needs it.
#[cold]
#[inline(never)]
fn fma_exact(x: f32, y: f32, z: f32) -> f64 {
    sum_to_odd(f64::from(x) * f64::from(y), f64::from(z))
}

/// The exact product of two fp16 values (in f64) as the fp16 ALU forms
/// it, a zero product signed as IEEE signs it (as [`mul_f32`]).
pub(crate) fn mul_f16_exact(x: f64, y: f64) -> f64 {
    x * y
}

/// The fp16 value in the low 16 bits, widened.
pub(crate) fn half_to_f32(bits: u64) -> f32 {
    f16::from_bits(bits as u16).to_f32()
}

/// An fp16 ALU operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HalfOp {
    /// `fadd16`.
    Add,
    /// `fmul16`.
    Mul,
    /// `fmadd16`.
    Fma,
}

impl HalfOp {
    /// The operation by its number in [`half_arithmetic_for_compiled_code`]'s
    /// calls (0 add, 1 multiply, 2 fused multiply-add).
    pub(crate) fn from_code(code: u32) -> HalfOp {
        match code {
            0 => HalfOp::Add,
            1 => HalfOp::Mul,
            _ => HalfOp::Fma,
        }
    }
}

/// One lane of the fp16 ALU: `x + y`, `x * y` or `x * y + z` (each
/// operand's exact value, widened from fp16 or fp32) rounded once to
/// fp16 (the product is exact in f64, the sums go through
/// [`sum_to_half`]), then `.sat`, a NaN the default NaN: the bits the
/// 16-bit destination receives.
pub(crate) fn half_arithmetic(op: HalfOp, x: f64, y: f64, z: f64, sat: bool) -> u16 {
    let bits = match op {
        HalfOp::Add => sum_to_half(x, y),
        HalfOp::Mul => f64_to_half(mul_f16_exact(x, y)),
        HalfOp::Fma => sum_to_half(x * y, z),
    };
    let bits = if sat {
        f64_to_half(saturate_f64(f64::from(half_to_f32(u64::from(bits)))))
    } else {
        bits
    };
    quiet_f16(bits)
}

/// [`half_arithmetic`] for the compiled code: the operation by its
/// number (0 add, 1 multiply, 2 fused multiply-add), `.sat` as 0 or 1,
/// the bits in the low 16 bits of the result.
pub(crate) extern "C" fn half_arithmetic_for_compiled_code(
    op: u32,
    x: f64,
    y: f64,
    z: f64,
    sat: u32,
) -> u32 {
    u32::from(half_arithmetic(HalfOp::from_code(op), x, y, z, sat != 0))
}

/// Rounds to fp16 (nearest even) and returns the bits; a NaN gives a
/// quiet NaN of its sign. The rounding is done on the bits (the same
/// single rounding [`f64_to_half`] does on the exact value, which the
/// tests check).
pub(crate) fn f32_to_half(value: f32) -> u16 {
    let bits = value.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let magnitude = bits & 0x7FFF_FFFF;
    // Rounds `m` to nearest even after dropping its low `shift` bits.
    let round = |m: u32, shift: u32| -> u32 {
        let kept = m >> shift;
        let dropped = m & ((1 << shift) - 1);
        let half = 1 << (shift - 1);
        kept + u32::from(dropped > half || (dropped == half && kept & 1 == 1))
    };
    if magnitude > 0x7F80_0000 {
        sign | 0x7E00
    } else if magnitude >= 0x477F_F000 {
        // 65520 (65504 plus half its last place) and up: infinity.
        sign | 0x7C00
    } else if magnitude >= 0x3880_0000 {
        // 2^-14 and up, normal: the exponent rebiased (127 to 15) and
        // 13 bits rounded off (a carry moves into the exponent, as it
        // should).
        sign | round(magnitude - (112 << 23), 13) as u16
    } else if magnitude >= 0x3300_0000 {
        // 2^-25 up to the smallest normal: multiples of 2^-24 (a result
        // of 2^-14 is the smallest normal's bits).
        let exponent = magnitude >> 23;
        let significand = (magnitude & 0x7F_FFFF) | 0x80_0000;
        sign | round(significand, 126 - exponent) as u16
    } else {
        // Below 2^-25 (half of the smallest denormal): zero.
        sign
    }
}

/// Rounds an exact (f64) result to fp16 (nearest even), once: the value
/// is scaled so that fp16's last place is 1, rounded to an integer and
/// scaled back, exactly. (`half`'s own f64 conversion drops the low 32
/// bits before rounding, which turns some values just past a tie into
/// the tie.) A NaN gives a quiet NaN of its sign.
pub(crate) fn f64_to_half(value: f64) -> u16 {
    let sign = ((value.to_bits() >> 48) & 0x8000) as u16;
    let magnitude = value.abs();
    if magnitude.is_nan() {
        return sign | 0x7E00;
    }
    // 65504 plus half its last place (16) ties to even: infinity.
    if magnitude >= 65520.0 {
        return sign | 0x7C00;
    }
    // The exponent of fp16's last place: 2^-24 for denormals and the
    // smallest binade, 2^(e - 10) above.
    let smallest_normal = 2f64.powi(-14);
    let exponent = if magnitude < smallest_normal {
        -14
    } else {
        ((magnitude.to_bits() >> 52) as i32) - 1023
    };
    let quantum = 2f64.powi(exponent - 10);
    let rounded = (magnitude / quantum).round_ties_even() * quantum;
    // `rounded` is exactly an fp16 value, which `half` converts exactly.
    sign | f16::from_f64(rounded).to_bits()
}

/// `p + z` rounded once to fp16 (nearest even). `p` and `z` are exact in
/// f64 (fp16 or fp32 values, or the exact product of two). Their f64 sum
/// is first rounded to odd, which keeps enough of the exact value that
/// the second rounding, to fp16's 11 bits, is the single rounding
/// (round-to-odd at 53 bits is safe for any target of 51 bits or fewer).
pub(crate) fn sum_to_half(p: f64, z: f64) -> u16 {
    f64_to_half(sum_to_odd(p, z))
}

/// `p + z` (each exact in f64) rounded to odd: the f64 sum, or when it is
/// inexact and even, its odd neighbour on the side of the exact value. It
/// keeps which side of every value of fewer bits the exact sum is on.
fn sum_to_odd(p: f64, z: f64) -> f64 {
    let (sum, error) = two_sum(p, z);
    if !sum.is_finite() {
        return sum;
    }
    odd_toward(sum, error)
}

/// `p + q + z` (each exact in f64) rounded to odd, as [`sum_to_odd`].
pub(crate) fn sum3_to_odd(p: f64, q: f64, z: f64) -> f64 {
    let (s, e1) = two_sum(p, q);
    let (h, e2) = two_sum(s, z);
    if !h.is_finite() {
        return h;
    }
    // The exact sum is h + e2 + e1; gathered, h2 + e4 + e3, where e3 is
    // below half an ulp of e2 + e1 and e4 of h2. When e4 is not zero it
    // is a multiple of the smaller of h's and t's quanta, larger than
    // |e3| (which is non-zero only outside Sterbenz's cancellation,
    // where t is far below h): the exact sum's side of h2 is e4's sign.
    let (t, e3) = two_sum(e2, e1);
    let (h2, e4) = two_sum(h, t);
    if h2 == 0.0 {
        // h + t cancelled exactly: what is left is e3, an f64.
        return if e3 == 0.0 { p + q + z } else { e3 };
    }
    odd_toward(h2, if e4 != 0.0 { e4 } else { e3 })
}

/// Knuth's two-sum: `a + b` rounded, and its exact rounding error.
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let sum = a + b;
    let b_part = sum - a;
    (sum, (a - (sum - b_part)) + (b - b_part))
}

/// `sum` rounded to odd toward an exact value `sum + below`, where
/// `below` is smaller than half of `sum`'s ulp: `sum` itself if it is
/// exact or odd, else its odd neighbour on `below`'s side.
fn odd_toward(sum: f64, below: f64) -> f64 {
    let bits = sum.to_bits();
    if below == 0.0 || bits & 1 == 1 {
        sum
    } else if (below > 0.0) == (sum > 0.0) {
        // The odd neighbour away from zero.
        f64::from_bits(bits + 1)
    } else {
        f64::from_bits(bits - 1)
    }
}

/// `sin_pt_1`: the first step of Mesa's sine, which maps an angle in
/// quadrants, `q` in [0, 4), to `y` in [-1, 1] with
/// `sin(q * tau / 4) = sin(y * tau / 4)`: `q` below 1, `2 - q` below 3,
/// `q - 4` above (each exact in fp32). Mesa's lowering comment is the
/// source; the hardware's answer outside [0, 4) is not known and this
/// continues the outer pieces.
pub(crate) fn sin_pt_1(q: f32) -> f32 {
    if q < 1.0 {
        q
    } else if q < 3.0 {
        2.0 - q
    } else {
        q - 4.0
    }
}

/// `sin_pt_2`: the quadrant sinc, `sin(y * tau / 4) / y` (tau / 4 at 0),
/// so that `sin_pt_2(y) * y` is the sine. The hardware's polynomial is not
/// known: this is the f64 value rounded once to fp32.
pub(crate) fn sin_pt_2(y: f32) -> f32 {
    let quarter_turn = std::f64::consts::FRAC_PI_2;
    if y == 0.0 {
        return quarter_turn as f32;
    }
    let y = f64::from(y);
    ((y * quarter_turn).sin() / y) as f32
}

/// `1 / sqrt(x)` rounded once to fp32 (the IEEE answer; the hardware's
/// approximation is not known). The f64 estimate is within a few f64
/// ulps; the one fp32 neighbour it could have picked wrongly is settled
/// exactly, in integers: `1/sqrt(x) > m` exactly when `m * m * x < 1`.
pub(crate) fn rsqrt_f32(x: f32) -> f32 {
    if x.is_nan() || x < 0.0 {
        return f32::NAN;
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            f32::NEG_INFINITY
        } else {
            f32::INFINITY
        };
    }
    if x.is_infinite() {
        return 0.0;
    }
    let estimate = 1.0 / f64::from(x).sqrt();
    // Two correctly rounded f64 operations leave the estimate within two
    // f64 places of 1/sqrt(x) (a normal fp32 for every x). The 29 bits
    // an fp32 drops say how far it is from a midpoint between fp32
    // values: farther than that error, rounding it once is the answer.
    // (A search of every positive finite fp32, outside the tree, found
    // 128 estimates one or two places from a midpoint, 0x013A18E3 and
    // its powers of four among them, and rounding each once right: the
    // exact settling below is a safety net that costs only there.)
    let dropped = estimate.to_bits() & ((1 << 29) - 1);
    if dropped.abs_diff(1 << 28) > RSQRT_MIDPOINT_MARGIN {
        return estimate as f32;
    }
    nearest_rsqrt(estimate as f32, x)
}

/// How near (in f64 places) to a midpoint between fp32 values the f64
/// estimate of `1/sqrt(x)` must be for [`rsqrt_f32`] to settle the
/// rounding exactly: well over the estimate's error of two places.
const RSQRT_MIDPOINT_MARGIN: u64 = 64;

/// Of `estimate` and its two fp32 neighbours, the one nearest to
/// `1/sqrt(x)` (positive normal `x`; `estimate` finite, positive, within
/// one place of the answer).
fn nearest_rsqrt(estimate: f32, x: f32) -> f32 {
    // The midpoints between the estimate and its neighbours, as exact
    // f64 values (25 significant bits).
    let below = f32::from_bits(estimate.to_bits() - 1);
    let above = f32::from_bits(estimate.to_bits() + 1);
    let mid_below = (f64::from(below) + f64::from(estimate)) / 2.0;
    let mid_above = (f64::from(estimate) + f64::from(above)) / 2.0;
    if square_times_below_one(mid_above, x) {
        above
    } else if !square_times_below_one(mid_below, x) {
        below
    } else {
        estimate
    }
}

/// Whether `m * m * x < 1` exactly, for positive finite `m` (at most 26
/// significant bits) and positive normal fp32 `x`.
fn square_times_below_one(m: f64, x: f32) -> bool {
    let (m_int, m_exp) = integer_and_exponent(m);
    let (x_int, x_exp) = integer_and_exponent(f64::from(x));
    // m * m * x = product * 2^exp; compare with 1 = 2^0.
    let product = u128::from(m_int) * u128::from(m_int) * u128::from(x_int);
    let exp = 2 * m_exp + x_exp;
    let bits = 128 - i64::from(product.leading_zeros());
    // product * 2^exp lies in [2^(bits - 1 + exp), 2^(bits + exp)).
    bits + exp <= 0
}

/// A positive finite f64 as `integer * 2^exponent` with an odd integer.
fn integer_and_exponent(value: f64) -> (u64, i64) {
    let bits = value.to_bits();
    let biased = ((bits >> 52) & 0x7FF) as i64;
    let mut mantissa = bits & ((1 << 52) - 1);
    let mut exponent = biased - 1075;
    if biased != 0 {
        mantissa |= 1 << 52;
    } else {
        exponent += 1;
    }
    let shift = mantissa.trailing_zeros();
    (mantissa >> shift, exponent + i64::from(shift))
}

/// Clamps to [0, 1]; NaN and every negative value, -0 included, become
/// +0 (applegpu's `saturate64` tests the sign bit).
pub(crate) fn saturate(value: f32) -> f32 {
    saturate_f64(f64::from(value)) as f32
}

/// [`saturate`] of an exact (f64) result.
pub(crate) fn saturate_f64(value: f64) -> f64 {
    if value.is_nan() || value.is_sign_negative() {
        0.0
    } else {
        value.min(1.0)
    }
}

/// Converts an integer to fp32 rounding toward zero or to nearest even.
pub(crate) fn int_to_f32(value: i64, round_to_zero: bool) -> f32 {
    let nearest = value as f32;
    if round_to_zero && (nearest as f64).abs() > (value as f64).abs() {
        f32::from_bits(nearest.to_bits() - 1)
    } else {
        nearest
    }
}

/// Converts an integer to fp16 bits rounding toward zero or to nearest even.
pub(crate) fn int_to_half(value: i64, round_to_zero: bool) -> u16 {
    let nearest = f16::from_bits(f64_to_half(value as f64));
    if round_to_zero && !nearest.is_infinite() && (nearest.to_f64()).abs() > (value as f64).abs()
        || round_to_zero && nearest.is_infinite()
    {
        nearest.to_bits() - 1
    } else {
        nearest.to_bits()
    }
}

/// Converts a float to an integer in `[min, max]`: rounded toward zero or
/// to nearest even, saturating, NaN to zero.
pub(crate) fn float_to_int(value: f64, round_to_zero: bool, min: i64, max: i64) -> i64 {
    if value.is_nan() {
        return 0;
    }
    let rounded = if round_to_zero {
        value.trunc()
    } else {
        value.round_ties_even()
    };
    if rounded <= min as f64 {
        min
    } else if rounded >= max as f64 {
        max
    } else {
        rounded as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_without_libm_is_floor_to_the_bit() {
        // Every 997th bit pattern (both signs, every exponent, NaNs and
        // infinities) and the edges: zeros, halves, the last fractions
        // below 2^23.
        let edges = [
            0.0f32,
            -0.0,
            0.5,
            -0.5,
            1.0,
            -1.0,
            -1.5,
            8_388_607.5,
            -8_388_607.5,
        ];
        let patterns = (0..=u32::MAX).step_by(997).map(f32::from_bits);
        for x in patterns.chain(edges) {
            let (got, want) = (floor_f32(x), x.floor());
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "floor({x:e}): {got:e}, expected {want:e}"
            );
        }
    }

    #[test]
    fn ftz_keeps_the_sign_and_normal_values() {
        assert_eq!(ftz(f32::from_bits(1)).to_bits(), 0);
        assert_eq!(ftz(-f32::from_bits(1)).to_bits(), 0x8000_0000);
        assert_eq!(ftz(f32::MIN_POSITIVE), f32::MIN_POSITIVE);
    }

    #[test]
    fn conversions_round_as_asked() {
        // 2^24 + 1 is not representable: nearest-even gives 2^24, and so
        // does truncation; 2^24 + 3 rounds up to 2^24 + 4 at nearest.
        assert_eq!(int_to_f32(16_777_219, false), 16_777_220.0);
        assert_eq!(int_to_f32(16_777_219, true), 16_777_218.0);
        assert_eq!(int_to_f32(-16_777_219, true), -16_777_218.0);
        assert_eq!(f16::from_bits(int_to_half(2049, false)).to_f32(), 2048.0);
        assert_eq!(f16::from_bits(int_to_half(2051, true)).to_f32(), 2050.0);
        assert_eq!(f16::from_bits(int_to_half(70_000, true)).to_f32(), 65504.0);
        assert_eq!(float_to_int(2.5, false, 0, 255), 2);
        assert_eq!(float_to_int(3.5, false, 0, 255), 4);
        assert_eq!(float_to_int(-1.7, true, -128, 127), -1);
        assert_eq!(float_to_int(1e10, true, 0, 65535), 65535);
        assert_eq!(float_to_int(f64::NAN, true, 0, 65535), 0);
    }

    #[test]
    fn fma_flushes_an_exact_value_just_below_the_smallest_normal() {
        // A tiny negative product (about -2.9e-68) plus the smallest
        // normal: the exact sum is just below it, so it flushes to +0,
        // though fp32 (and f64) round it up to the smallest normal
        // (applegpu's model of the hardware gives 0).
        let (x, y) = (f32::from_bits(0x01ed_1c37), f32::from_bits(0x8cd8_1616));
        assert_eq!(x.mul_add(y, f32::MIN_POSITIVE), f32::MIN_POSITIVE);
        assert_eq!(fma_f32(x, y, f32::MIN_POSITIVE).to_bits(), 0);
        // The same magnitude above it stays; so does the exact value.
        assert_eq!(fma_f32(x, -y, f32::MIN_POSITIVE), f32::MIN_POSITIVE);
        assert_eq!(fma_f32(1.0, f32::MIN_POSITIVE, 0.0), f32::MIN_POSITIVE);
        // Negative: the sign of zero follows the result's.
        assert_eq!(fma_f32(-x, y, -f32::MIN_POSITIVE).to_bits(), 0x8000_0000);
    }

    #[test]
    fn fp16_sums_round_once_where_f64_would_round_twice() {
        // 1 + 2^-11 is the fp16 midpoint between 1 and 1 + 2^-10. Just
        // above it, f64 rounds down onto the midpoint and the tie then
        // goes to even (1.0); the single rounding goes up.
        let p = 2f64.powi(-11) + 2f64.powi(-63);
        assert_eq!(f64_to_half(1.0 + p), 0x3C00);
        assert_eq!(sum_to_half(1.0, p), 0x3C01);
        // Just below the midpoint between 1 + 2^-10 and 1 + 2^-9, the f64
        // sum rounds up onto it and the tie goes to even, 0x3C02.
        let q = 2f64.powi(-11) - 2f64.powi(-63);
        assert_eq!(f64_to_half(1.0 + 2f64.powi(-10) + q), 0x3C02);
        assert_eq!(sum_to_half(1.0 + 2f64.powi(-10), q), 0x3C01);
        // Negative sums, exact sums, zeros and infinities.
        assert_eq!(sum_to_half(-1.0, -p), 0xBC01);
        assert_eq!(sum_to_half(0.5, 0.25), 0x3A00);
        assert_eq!(sum_to_half(-0.0, -0.0), 0x8000);
        assert_eq!(sum_to_half(65504.0, 65504.0), 0x7C00);
    }

    #[test]
    fn fp16_rounding_agrees_with_half_on_fp32_values() {
        // `half`'s fp32 conversion works on the bits (round, sticky); ours
        // scales and rounds in f64. Every 4099th fp32 pattern, NaNs aside.
        for bits in (0..=u32::MAX).step_by(4099) {
            let value = f32::from_bits(bits);
            if !value.is_nan() {
                assert_eq!(
                    f32_to_half(value),
                    f16::from_f32(value).to_bits(),
                    "{bits:#x}"
                );
            }
        }
    }

    #[test]
    fn rsqrt_is_correctly_rounded() {
        // (x, 1/sqrt(x) rounded once), worked out in 80-digit decimal
        // arithmetic; the first six are inputs where 1/sqrtf(x), rounded
        // twice, is one ulp off.
        let known: [(u32, u32); 12] = [
            (0x4629_4DA5, 0x3C1D_65B5),
            (0x75BD_ADFA, 0x2452_4C3A),
            (0x4E04_491E, 0x3832_1020),
            (0x6BB2_2FD4, 0x2958_F946),
            (0x21B2_8322, 0x4E58_C6A0),
            (0x6EB5_F8F0, 0x27D6_B47B),
            (0x4080_0000, 0x3F00_0000),
            (0x4000_0000, 0x3F35_04F3),
            (0x3E80_0000, 0x4000_0000),
            (0x7F7F_FFFF, 0x1F80_0000),
            (0x0080_0000, 0x5F00_0000),
            (0x3F80_0001, 0x3F7F_FFFF),
        ];
        for (x, expected) in known {
            assert_eq!(rsqrt_f32(f32::from_bits(x)).to_bits(), expected, "{x:#x}");
        }
        assert_eq!(rsqrt_f32(0.0), f32::INFINITY);
        assert_eq!(rsqrt_f32(-0.0), f32::NEG_INFINITY);
        assert_eq!(rsqrt_f32(f32::INFINITY).to_bits(), 0);
        assert!(rsqrt_f32(-1.0).is_nan());
    }

    #[test]
    fn rsqrt_rounds_the_estimate_only_where_the_exact_test_agrees() {
        // Random x across the whole range, and the inputs whose estimate
        // lies nearest a midpoint, get what the exact settling of the
        // estimate's neighbours gives.
        for x in [0x013A_18E3u32, 0x3A3A_18E3, 0x7E3A_18E3] {
            let x = f32::from_bits(x);
            let exact = nearest_rsqrt((1.0 / f64::from(x).sqrt()) as f32, x);
            assert_eq!(rsqrt_f32(x).to_bits(), exact.to_bits(), "{x:e}");
        }
        let mut next = crate::usc::test_rng::xorshift(0x9E37_79B9_7F4A_7C15);
        for _ in 0..1_000_000 {
            let x = f32::from_bits(next() as u32 & 0x7FFF_FFFF);
            if !x.is_finite() || x == 0.0 {
                continue;
            }
            let exact = nearest_rsqrt((1.0 / f64::from(x).sqrt()) as f32, x);
            assert_eq!(rsqrt_f32(x).to_bits(), exact.to_bits(), "{x:e}");
        }
    }

    #[test]
    fn rsqrt_settles_a_wrong_neighbour_exactly() {
        // 1/sqrt(4) = 0.5: from either neighbour, the exact check walks
        // to it; and m * m * x < 1 exactly when m < 1/sqrt(x).
        let half = 0.5f32;
        let above = f32::from_bits(half.to_bits() + 1);
        let below = f32::from_bits(half.to_bits() - 1);
        assert_eq!(nearest_rsqrt(above, 4.0), half);
        assert_eq!(nearest_rsqrt(below, 4.0), half);
        assert!(!square_times_below_one(0.5, 4.0));
        assert!(square_times_below_one(f64::from(below), 4.0));
        assert!(!square_times_below_one(f64::from(above), 4.0));
        // A hard case from the table: one off either way is corrected.
        let x = f32::from_bits(0x4629_4DA5);
        assert_eq!(
            nearest_rsqrt(f32::from_bits(0x3C1D_65B4), x).to_bits(),
            0x3C1D_65B5
        );
        assert_eq!(
            nearest_rsqrt(f32::from_bits(0x3C1D_65B6), x).to_bits(),
            0x3C1D_65B5
        );
    }

    #[test]
    fn sin_pt_pair_gives_the_sine_of_quadrants() {
        // The fixup folds each quadrant onto [-1, 1] exactly.
        assert_eq!(sin_pt_1(0.25), 0.25);
        assert_eq!(sin_pt_1(1.5), 0.5);
        assert_eq!(sin_pt_1(2.75), -0.75);
        assert_eq!(sin_pt_1(3.5), -0.5);
        assert_eq!(sin_pt_2(0.0), std::f32::consts::FRAC_PI_2);
        assert_eq!(sin_pt_2(1.0), 1.0);
        assert_eq!(sin_pt_2(-1.0), 1.0);
        // Mesa's sequence, fixup * sinc(fixup), against the sine of the
        // angle, within two fp32 ulps, over the whole circle.
        for step in 0..4096 {
            let q = step as f32 / 1024.0;
            let fixup = sin_pt_1(q);
            let sine = sin_pt_2(fixup) * fixup;
            let reference = (f64::from(q) * std::f64::consts::FRAC_PI_2).sin() as f32;
            // (At q = 2 the exact sine is 0 and f64's is 1.2e-16.)
            let ulp = f32::EPSILON * reference.abs().max(f32::EPSILON);
            assert!(
                (sine - reference).abs() <= 2.0 * ulp,
                "q = {q}: {sine} vs {reference}"
            );
        }
    }

    /// `value` as m x 2^e with m an integer (sign included).
    fn integer_times_power(value: f32) -> (i128, i32) {
        let bits = value.to_bits();
        let exponent = ((bits >> 23) & 0xFF) as i32;
        let fraction = i128::from(bits & 0x7F_FFFF);
        let (m, e) = if exponent == 0 {
            (fraction, -149)
        } else {
            (fraction | 1 << 23, exponent - 150)
        };
        (if bits >> 31 == 1 { -m } else { m }, e)
    }

    /// a x + b y + c rounded once to f32 by integer arithmetic: each
    /// term an integer at a common power of two, summed exactly, the
    /// sum's top 24 bits rounded to nearest even by its remainder.
    fn dot_by_integers(a: f32, x: f32, b: f32, y: f32, c: f32) -> f32 {
        let terms = [
            integer_times_power(a),
            integer_times_power(x),
            integer_times_power(b),
            integer_times_power(y),
        ];
        let products = [
            (terms[0].0 * terms[1].0, terms[0].1 + terms[1].1),
            (terms[2].0 * terms[3].0, terms[2].1 + terms[3].1),
            integer_times_power(c),
        ];
        let products = products.iter().filter(|p| p.0 != 0);
        let Some(lowest) = products.clone().map(|p| p.1).min() else {
            return 0.0;
        };
        let sum: i128 = products
            .map(|&(m, e)| {
                assert!(e - lowest < 75, "outside what i128 holds");
                m << (e - lowest)
            })
            .sum();
        if sum == 0 {
            return 0.0;
        }
        let magnitude = sum.unsigned_abs();
        let extra = (128 - magnitude.leading_zeros() as i32 - 24).max(0);
        let mut kept = magnitude >> extra;
        if extra > 0 {
            let rest = magnitude & ((1u128 << extra) - 1);
            let half = 1u128 << (extra - 1);
            if rest > half || (rest == half && kept & 1 == 1) {
                kept += 1;
            }
        }
        let value = kept as f64 * 2f64.powi(lowest + extra);
        (if sum < 0 { -value } else { value }) as f32
    }

    fn rounded_once(a: f32, x: f32, b: f32, y: f32, c: f32) -> f32 {
        let p = f64::from(a) * f64::from(x);
        let q = f64::from(b) * f64::from(y);
        sum3_to_odd(p, q, f64::from(c)) as f32
    }

    #[test]
    fn three_terms_rounded_to_odd_then_to_f32_are_rounded_once() {
        // 1 + 2^-24 + 2^-60: just above the halfway point between 1 and
        // the next f32, so it rounds up; the f64 sum loses 2^-60 and
        // its rounding to f32 then ties to even, down to 1.
        let (tiny, half_ulp) = (2f32.powi(-60), 2f32.powi(-24));
        assert_eq!(((1.0 + f64::from(half_ulp)) + f64::from(tiny)) as f32, 1.0);
        let above = rounded_once(1.0, 1.0, half_ulp, 1.0, tiny);
        assert_eq!(above, 1.0 + 2.0 * half_ulp);
        assert_eq!(rounded_once(1.0, 1.0, half_ulp, 1.0, -tiny), 1.0);
        assert_eq!(rounded_once(-1.0, 1.0, -half_ulp, 1.0, -tiny), -above);
        // Exact cancellation leaves the smallest term whole.
        assert_eq!(rounded_once(3.0, 0.5, -1.5, 1.0, tiny), tiny);
        // Both error terms of the exact sum non-zero and of opposite
        // signs: the larger, the second two-sum's, decides the side.
        let [a, x, b, y, c] = [
            0xC088_5A75u32,
            0xBFC0_0000,
            0xAA00_0001,
            0x3280_0001,
            0x2380_0001,
        ]
        .map(f32::from_bits);
        assert_eq!(rounded_once(a, x, b, y, c).to_bits(), 0x40CC_87B0);
        assert_eq!(dot_by_integers(a, x, b, y, c).to_bits(), 0x40CC_87B0);
        // A sum of zeros is signed as IEEE signs it.
        assert_eq!(
            rounded_once(-0.0, 1.0, -0.0, 1.0, -0.0).to_bits(),
            0x8000_0000
        );
        assert_eq!(rounded_once(-0.0, 1.0, 0.0, 1.0, -0.0).to_bits(), 0);
        let mut next = crate::usc::test_rng::xorshift(0x9E37_79B9_7F4A_7C15u64);
        let value = |next: &mut dyn FnMut() -> u64, exponents: u32| {
            let r = next();
            let exponent = 127 - exponents as u64 / 2 + (r >> 32) % u64::from(exponents);
            f32::from_bits(((r & 1) << 31 | exponent << 23 | (r >> 8) & 0x7F_FFFF) as u32)
        };
        for case in 0..300_000 {
            let (a, b) = (value(&mut next, 24), value(&mut next, 24));
            // Points as the iterator's (a pixel or sample in the tile), or
            // any value.
            let point = |next: &mut dyn FnMut() -> u64| (next() % 512) as f32 / 16.0;
            let (x, y) = if case % 2 == 0 {
                (point(&mut next), point(&mut next))
            } else {
                (value(&mut next, 12), value(&mut next, 12))
            };
            // C: any value, or one cancelling the products to a few bits.
            let mut c = match case % 3 {
                0 => value(&mut next, 24),
                1 => -((f64::from(a) * f64::from(x) + f64::from(b) * f64::from(y)) as f32),
                _ => -((f64::from(a) * f64::from(x)) as f32),
            };
            let (mut b, mut y) = (b, y);
            if case % 5 == 4 {
                // Near a tie: a x + c + b within an f32 rounding of the
                // halfway point above an f32 `low`, b its remainder.
                let low = value(&mut next, 24).abs();
                let tie = f64::from(low) + f64::from(low.next_up() - low) / 2.0;
                c = (tie - f64::from(a) * f64::from(x)) as f32;
                (b, y) = (
                    ((tie - f64::from(a) * f64::from(x)) - f64::from(c)) as f32,
                    1.0,
                );
            }
            assert_eq!(
                rounded_once(a, x, b, y, c).to_bits(),
                dot_by_integers(a, x, b, y, c).to_bits(),
                "{a:e} * {x:e} + {b:e} * {y:e} + {c:e}"
            );
        }
    }

    #[test]
    fn fp32_to_fp16_on_the_bits_rounds_as_the_exact_value_does() {
        // Every fp16 value, and the fp32 values at, just below and just
        // above each midpoint between neighbours (the ties and their
        // neighbours decide the rounding), both signs; then a spread of
        // fp32 bit patterns (every 4,099th, which reaches every
        // exponent and many significand bits).
        let check = |x: f32| {
            assert_eq!(
                f32_to_half(x),
                f64_to_half(f64::from(x)),
                "{x:e} ({:#010x})",
                x.to_bits()
            );
        };
        for h in 0u16..0x7C00 {
            let low = f16::from_bits(h).to_f32();
            let high = f16::from_bits(h + 1).to_f32();
            let middle = ((f64::from(low) + f64::from(high)) / 2.0) as f32;
            for x in [
                low,
                middle,
                f32::from_bits(middle.to_bits() - 1),
                f32::from_bits(middle.to_bits() + 1),
            ] {
                check(x);
                check(-x);
            }
        }
        for bits in (0..=u32::MAX).step_by(4099) {
            check(f32::from_bits(bits));
        }
        for x in [
            f32::INFINITY,
            f32::NAN,
            f32::from_bits(0x7F80_0001),
            65520.0,
        ] {
            check(x);
            check(-x);
        }
    }
}
