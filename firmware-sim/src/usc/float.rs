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

/// `x + y` as the fp32 ALU computes it (rounded once, flushed before
/// rounding), before [`canonical_f32`].
#[inline(always)]
pub(crate) fn add_f32(x: f32, y: f32) -> f32 {
    flush_before_rounding(x + y, || f64::from(x) + f64::from(y))
}

/// `x * y` as the fp32 ALU computes it: `fma(x, y, +0)`, so a zero
/// product is +0 whatever the signs (applegpu); before [`canonical_f32`].
#[inline(always)]
pub(crate) fn mul_f32(x: f32, y: f32) -> f32 {
    let product = x * y;
    // Exactly zero only with a zero operand (inf * 0 is NaN).
    if product == 0.0 && (x == 0.0 || y == 0.0) {
        0.0
    } else {
        flush_before_rounding(product, || f64::from(x) * f64::from(y))
    }
}

/// `x * y + z` rounded once (the flush test uses the f64 rounding of the
/// exact value); before [`canonical_f32`].
#[inline(always)]
pub(crate) fn fma_f32(x: f32, y: f32, z: f32) -> f32 {
    let exact = || f64::from(x).mul_add(f64::from(y), f64::from(z));
    flush_before_rounding(x.mul_add(y, z), exact)
}

/// The exact product of two fp16 values (in f64) as the fp16 ALU forms
/// it: `fma(x, y, +0)`, a zero product +0.
pub(crate) fn mul_f16_exact(x: f64, y: f64) -> f64 {
    let product = x * y;
    if product == 0.0 {
        0.0
    } else {
        product
    }
}

/// The fp16 value in the low 16 bits, widened.
pub(crate) fn half_to_f32(bits: u64) -> f32 {
    f16::from_bits(bits as u16).to_f32()
}

/// Rounds to fp16 (nearest even) and returns the bits.
pub(crate) fn f32_to_half(value: f32) -> u16 {
    f16::from_f32(value).to_bits()
}

/// Rounds an exact (f64) result to fp16 (nearest even).
pub(crate) fn f64_to_half(value: f64) -> u16 {
    f16::from_f64(value).to_bits()
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
    let nearest = f16::from_f64(value as f64);
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
}
