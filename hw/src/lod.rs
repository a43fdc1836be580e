//! Levels of detail as the sampler hardware stores them.
//!
//! The sampler's minimum and maximum LOD are unsigned 4.6 fixed point: ten
//! bits, of which the low six are the fraction, so 1.0 is 64 and the largest
//! LOD the hardware is given is 14.0 (a 16384-pixel image has 15 levels).

use std::fmt;

/// An unsigned 4.6 fixed-point level of detail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lod(u16);

impl Lod {
    /// Number of fraction bits.
    pub const FRACTION_BITS: u32 = 6;
    /// The largest LOD drivers program (14.0).
    pub const MAX: Lod = Lod(14 << Self::FRACTION_BITS);
    /// The largest raw value the 10-bit field can hold.
    pub const RAW_MAX: u16 = (1 << 10) - 1;

    /// The LOD with raw fixed-point value `raw` (in 1/64ths), if it fits in
    /// ten bits.
    pub const fn from_raw(raw: u16) -> Option<Lod> {
        if raw <= Self::RAW_MAX {
            Some(Lod(raw))
        } else {
            None
        }
    }

    /// Converts a float LOD, clamping to `0.0..=14.0` and rounding down to
    /// the nearest 1/64 as the hardware conversion does. NaN becomes 0.
    pub fn from_f32(lod: f32) -> Lod {
        let scaled = (lod * 64.0).clamp(0.0, f32::from(Self::MAX.0));
        // CAST: clamped to 0..=896 above (NaN saturates to 0).
        Lod(scaled as u16)
    }

    /// The raw fixed-point value, in 1/64ths.
    pub const fn raw(self) -> u16 {
        self.0
    }

    /// The LOD as a float.
    pub fn to_f32(self) -> f32 {
        f32::from(self.0) / 64.0
    }
}

impl fmt::Display for Lod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_f32())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        assert_eq!(Lod::from_f32(1.0).raw(), 64);
        assert_eq!(Lod::from_f32(2.5).raw(), 160);
        assert_eq!(Lod::from_f32(-3.0).raw(), 0);
        assert_eq!(Lod::from_f32(1000.0), Lod::MAX);
        assert_eq!(Lod::from_f32(f32::NAN).raw(), 0);
        assert_eq!(Lod::from_raw(0x3ff).map(Lod::to_f32), Some(1023.0 / 64.0));
        assert_eq!(Lod::from_raw(0x400), None);
    }
}
