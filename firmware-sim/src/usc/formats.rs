//! Element formats of memory loads and stores.
//!
//! `device_load`/`device_store` and the threadgroup-memory instructions
//! convert between memory elements and registers: integers are
//! zero-extended, normalised formats become floats (fp16 in 16-bit
//! registers, fp32 in 32-bit ones), and the bit-packed formats (rgb10a2,
//! rg11b10f, rgb9e5) hold all components in one 32-bit word.

use super::float::{f32_to_half, half_to_f32};

/// A memory element format (`agx_hw::isa::table::FORMATS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElementFormat {
    /// 8-bit integer.
    I8,
    /// 16-bit integer.
    I16,
    /// 32-bit integer (or raw f32 bits).
    I32,
    /// Half float.
    F16,
    /// 8-bit unsigned normalised.
    Unorm8,
    /// 8-bit signed normalised.
    Snorm8,
    /// 16-bit unsigned normalised.
    Unorm16,
    /// 16-bit signed normalised.
    Snorm16,
    /// 10-10-10-2 unsigned normalised, packed in one word.
    Rgb10a2,
    /// 8-bit sRGB-encoded (alpha linear).
    Srgba8,
    /// 11-11-10 small floats, packed in one word.
    Rg11b10f,
    /// Shared-exponent 9-9-9-5, packed in one word.
    Rgb9e5,
}

impl ElementFormat {
    /// The format for a format code of `device_load`, `st_tile`...
    pub fn from_code(code: i64) -> Option<ElementFormat> {
        Some(match code {
            0 => ElementFormat::I8,
            1 => ElementFormat::I16,
            2 => ElementFormat::I32,
            3 => ElementFormat::F16,
            4 => ElementFormat::Unorm8,
            5 => ElementFormat::Snorm8,
            6 => ElementFormat::Unorm16,
            7 => ElementFormat::Snorm16,
            8 => ElementFormat::Rgb10a2,
            10 => ElementFormat::Srgba8,
            12 => ElementFormat::Rg11b10f,
            13 => ElementFormat::Rgb9e5,
            _ => return None,
        })
    }

    /// log2 of the element size: the scale applied to offsets.
    pub fn shift(self) -> u32 {
        match self {
            ElementFormat::I8
            | ElementFormat::Unorm8
            | ElementFormat::Snorm8
            | ElementFormat::Srgba8 => 0,
            ElementFormat::I16
            | ElementFormat::F16
            | ElementFormat::Unorm16
            | ElementFormat::Snorm16 => 1,
            _ => 2,
        }
    }

    /// Whether all components share one 32-bit word.
    pub fn packed(self) -> bool {
        matches!(
            self,
            ElementFormat::Rgb10a2 | ElementFormat::Rg11b10f | ElementFormat::Rgb9e5
        )
    }
}

fn float_register(value: f32, half: bool) -> u32 {
    if half {
        u32::from(f32_to_half(value))
    } else {
        value.to_bits()
    }
}

fn register_float(value: u32, half: bool) -> f32 {
    if half {
        half_to_f32(u64::from(value))
    } else {
        f32::from_bits(value)
    }
}

fn srgb_to_linear(c: f32) -> f32 {
    if c <= 0.04045 {
        c / 12.92
    } else {
        ((c + 0.055) / 1.055).powf(2.4)
    }
}

fn linear_to_srgb(c: f32) -> f32 {
    if c <= 0.003_130_8 {
        c * 12.92
    } else {
        1.055 * c.powf(1.0 / 2.4) - 0.055
    }
}

fn unorm(value: f32, max: f32) -> u32 {
    let v = if value.is_nan() {
        0.0
    } else {
        value.clamp(0.0, 1.0)
    };
    (v * max).round_ties_even() as u32
}

fn snorm(value: f32, max: f32) -> u32 {
    let v = if value.is_nan() {
        0.0
    } else {
        value.clamp(-1.0, 1.0)
    };
    (v * max).round_ties_even() as i32 as u32
}

/// An unsigned float with a 5-bit exponent and `mantissa_bits` (11- and
/// 10-bit floats of rg11b10f).
fn small_float_to_f32(bits: u32, mantissa_bits: u32) -> f32 {
    let exponent = bits >> mantissa_bits;
    let mantissa = bits & ((1 << mantissa_bits) - 1);
    let scale = (1u32 << mantissa_bits) as f32;
    match exponent {
        0 => mantissa as f32 / scale * 2f32.powi(-14),
        31 if mantissa == 0 => f32::INFINITY,
        31 => f32::NAN,
        e => (1.0 + mantissa as f32 / scale) * 2f32.powi(e as i32 - 15),
    }
}

/// Loads component `component` of an element into a register value.
/// `bytes` starts at the component's element (or at the packed word).
pub fn load(format: ElementFormat, bytes: &[u8], component: usize, half: bool) -> u32 {
    let u8_at = |i: usize| u32::from(bytes[i]);
    let u16_at = |i: usize| u32::from(u16::from_le_bytes([bytes[i], bytes[i + 1]]));
    let word = || u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    match format {
        ElementFormat::I8 => u8_at(0),
        ElementFormat::I16 => u16_at(0),
        ElementFormat::I32 => word(),
        ElementFormat::F16 => {
            if half {
                u16_at(0)
            } else {
                half_to_f32(u64::from(u16_at(0))).to_bits()
            }
        }
        ElementFormat::Unorm8 => float_register(u8_at(0) as f32 / 255.0, half),
        ElementFormat::Snorm8 => float_register((bytes[0] as i8 as f32 / 127.0).max(-1.0), half),
        ElementFormat::Unorm16 => float_register(u16_at(0) as f32 / 65535.0, half),
        ElementFormat::Snorm16 => {
            float_register((u16_at(0) as u16 as i16 as f32 / 32767.0).max(-1.0), half)
        }
        ElementFormat::Srgba8 => {
            let c = u8_at(0) as f32 / 255.0;
            float_register(if component == 3 { c } else { srgb_to_linear(c) }, half)
        }
        ElementFormat::Rgb10a2 => {
            let w = word();
            let value = if component == 3 {
                (w >> 30) as f32 / 3.0
            } else {
                ((w >> (10 * component)) & 0x3FF) as f32 / 1023.0
            };
            float_register(value, half)
        }
        ElementFormat::Rg11b10f => {
            let w = word();
            let value = match component {
                0 => small_float_to_f32(w & 0x7FF, 6),
                1 => small_float_to_f32((w >> 11) & 0x7FF, 6),
                2 => small_float_to_f32(w >> 22, 5),
                _ => 1.0,
            };
            float_register(value, half)
        }
        ElementFormat::Rgb9e5 => {
            let w = word();
            let exponent = (w >> 27) as i32;
            let value = if component < 3 {
                ((w >> (9 * component)) & 0x1FF) as f32 * 2f32.powi(exponent - 15 - 9)
            } else {
                1.0
            };
            float_register(value, half)
        }
    }
}

/// Stores a register value as component `component` into `bytes` (the
/// component's element, or the packed word, which the caller read first).
/// Returns `false` for formats stores cannot write.
pub fn store(
    format: ElementFormat,
    bytes: &mut [u8],
    component: usize,
    value: u32,
    half: bool,
) -> bool {
    let put8 = |bytes: &mut [u8], v: u32| bytes[0] = v as u8;
    let put16 = |bytes: &mut [u8], v: u32| bytes[..2].copy_from_slice(&(v as u16).to_le_bytes());
    match format {
        ElementFormat::I8 => put8(bytes, value),
        ElementFormat::I16 => put16(bytes, value),
        ElementFormat::I32 => bytes[..4].copy_from_slice(&value.to_le_bytes()),
        ElementFormat::F16 => {
            let bits = if half {
                value
            } else {
                u32::from(f32_to_half(f32::from_bits(value)))
            };
            put16(bytes, bits);
        }
        ElementFormat::Unorm8 => put8(bytes, unorm(register_float(value, half), 255.0)),
        ElementFormat::Snorm8 => put8(bytes, snorm(register_float(value, half), 127.0)),
        ElementFormat::Unorm16 => put16(bytes, unorm(register_float(value, half), 65535.0)),
        ElementFormat::Snorm16 => put16(bytes, snorm(register_float(value, half), 32767.0)),
        ElementFormat::Srgba8 => {
            let c = register_float(value, half);
            put8(
                bytes,
                unorm(if component == 3 { c } else { linear_to_srgb(c) }, 255.0),
            );
        }
        ElementFormat::Rgb10a2 => {
            let mut w = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            let c = register_float(value, half);
            let (shift, bits, max) = if component == 3 {
                (30, 0x3, 3.0)
            } else {
                (10 * component as u32, 0x3FF, 1023.0)
            };
            w = (w & !(bits << shift)) | (unorm(c, max) << shift);
            bytes[..4].copy_from_slice(&w.to_le_bytes());
        }
        ElementFormat::Rg11b10f | ElementFormat::Rgb9e5 => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalised_formats_round_trip_through_registers() {
        let mut bytes = [0u8; 4];
        assert!(store(
            ElementFormat::Unorm8,
            &mut bytes,
            0,
            0.5f32.to_bits(),
            false
        ));
        assert_eq!(bytes[0], 128);
        assert_eq!(
            f32::from_bits(load(ElementFormat::Unorm8, &bytes, 0, false)),
            128.0 / 255.0
        );
        assert!(store(
            ElementFormat::Snorm8,
            &mut bytes,
            0,
            (-2.0f32).to_bits(),
            false
        ));
        assert_eq!(bytes[0] as i8, -127);
        let half_one = u32::from(f32_to_half(1.0));
        assert!(store(ElementFormat::Unorm16, &mut bytes, 0, half_one, true));
        assert_eq!(u16::from_le_bytes([bytes[0], bytes[1]]), 65535);
    }

    #[test]
    fn rgb10a2_packs_each_component_in_place() {
        let mut word = [0u8; 4];
        for (component, value) in [1.0f32, 0.0, 1.0, 1.0].into_iter().enumerate() {
            assert!(store(
                ElementFormat::Rgb10a2,
                &mut word,
                component,
                value.to_bits(),
                false
            ));
        }
        assert_eq!(u32::from_le_bytes(word), 0x3FF | 0x3FF << 20 | 3 << 30);
        assert_eq!(
            f32::from_bits(load(ElementFormat::Rgb10a2, &word, 2, false)),
            1.0
        );
    }

    #[test]
    fn packed_floats_decode() {
        // rg11b10f: r = 1.0 (exponent 15, mantissa 0) = 15 << 6.
        let word = (15u32 << 6).to_le_bytes();
        assert_eq!(
            f32::from_bits(load(ElementFormat::Rg11b10f, &word, 0, false)),
            1.0
        );
        // rgb9e5: r mantissa 256, exponent 16 -> 256 * 2^(16-24) = 1.0.
        let word = (256u32 | 16 << 27).to_le_bytes();
        assert_eq!(
            f32::from_bits(load(ElementFormat::Rgb9e5, &word, 0, false)),
            1.0
        );
    }
}
