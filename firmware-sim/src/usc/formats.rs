//! Element formats of memory loads and stores.
//!
//! `device_load`/`device_store` and the threadgroup-memory instructions
//! convert between memory elements and registers: integers are
//! zero-extended, normalised formats become floats (fp16 in 16-bit
//! registers, fp32 in 32-bit ones), and the bit-packed formats (rgb10a2,
//! rg11b10f, rgb9e5) hold all components in one 32-bit word. Images
//! add the 16-bit packed unorm formats (r5g6b5, rgba4, rgb5a1, a1rgb5),
//! which no memory instruction names: the texture unit and the pixel back
//! end read and write them.

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
    /// 5-6-5 unsigned normalised in 16 bits, the first channel in the low
    /// bits (an image format: no memory instruction names it).
    R5g6b5,
    /// 4-4-4-4 unsigned normalised in 16 bits, the first channel lowest.
    Rgba4,
    /// 5-5-5-1 unsigned normalised in 16 bits, the first channel lowest.
    Rgb5a1,
    /// 1-5-5-5 unsigned normalised in 16 bits: the 1-bit channel is the
    /// first, in bit 0.
    A1rgb5,
    /// 10-10-10-2 integers in one word, read raw (zero-extended; the
    /// texture unit sign-extends a signed image's).
    Rgb10a2Int,
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

    /// The components an element has in memory (packed formats: rgb10a2
    /// four, rg11b10f and rgb9e5 three; others as many as asked for).
    pub fn component_mask(self) -> u8 {
        match self {
            ElementFormat::Rg11b10f | ElementFormat::Rgb9e5 => 0x7,
            _ => 0xF,
        }
    }

    /// Whether all components share one word (32 bits, or 16 for the
    /// 16-bit packed image formats).
    pub fn packed(self) -> bool {
        matches!(
            self,
            ElementFormat::Rgb10a2
                | ElementFormat::Rgb10a2Int
                | ElementFormat::Rg11b10f
                | ElementFormat::Rgb9e5
                | ElementFormat::R5g6b5
                | ElementFormat::Rgba4
                | ElementFormat::Rgb5a1
                | ElementFormat::A1rgb5
        )
    }

    /// Bytes of a packed format's word (4, or 2 for the 16-bit formats).
    pub fn packed_bytes(self) -> usize {
        match self {
            ElementFormat::R5g6b5
            | ElementFormat::Rgba4
            | ElementFormat::Rgb5a1
            | ElementFormat::A1rgb5 => 2,
            _ => 4,
        }
    }

    /// The bytes of an element with `channels` channels.
    pub fn element_bytes(self, channels: usize) -> u32 {
        if self.packed() {
            self.packed_bytes() as u32
        } else {
            (channels as u32) << self.shift()
        }
    }

    /// The bits of channel `component` of an integer format (what a
    /// signed image's values are sign-extended from).
    pub fn channel_bits(self, component: usize) -> u32 {
        match self {
            ElementFormat::I8 => 8,
            ElementFormat::I16 => 16,
            ElementFormat::Rgb10a2Int if component == 3 => 2,
            ElementFormat::Rgb10a2Int => 10,
            _ => 32,
        }
    }

    /// The (shift, width) of each channel of a packed format with one
    /// field per channel, channel 0 first (`None` for other formats).
    fn fields(self) -> Option<&'static [(u32, u32)]> {
        Some(match self {
            ElementFormat::Rgb10a2 | ElementFormat::Rgb10a2Int => {
                &[(0, 10), (10, 10), (20, 10), (30, 2)]
            }
            ElementFormat::R5g6b5 => &[(0, 5), (5, 6), (11, 5)],
            ElementFormat::Rgba4 => &[(0, 4), (4, 4), (8, 4), (12, 4)],
            ElementFormat::Rgb5a1 => &[(0, 5), (5, 5), (10, 5), (15, 1)],
            ElementFormat::A1rgb5 => &[(0, 1), (1, 5), (6, 5), (11, 5)],
            _ => return None,
        })
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

/// An sRGB-encoded value in 0..1 as linear.
pub fn srgb_to_linear(c: f32) -> f32 {
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

/// `x` rounded to the nearest integer, ties to even, for |x| <= 2^23
/// (every normalised format's scale): adding 2^23 leaves no fraction
/// bits, so the addition rounds as IEEE's default mode does. Exact, and
/// inline where `round_ties_even` is a libm call on x86-64 without
/// SSE4.1 (a per-pixel cost in tile stores).
fn round_ties_even_small(x: f32) -> f32 {
    const TWO_23: f32 = 8_388_608.0;
    debug_assert!(x.abs() <= TWO_23);
    // The sign goes back on for results of zero (-0.5 rounds to -0).
    let rounded = if x >= 0.0 {
        (x + TWO_23) - TWO_23
    } else {
        (x - TWO_23) + TWO_23
    };
    rounded.copysign(x)
}

fn unorm(value: f32, max: f32) -> u32 {
    let v = if value.is_nan() {
        0.0
    } else {
        value.clamp(0.0, 1.0)
    };
    round_ties_even_small(v * max) as u32
}

/// [`unorm`] to 8 bits of an fp16 register value (its low 16 bits),
/// from a table of all 65,536 worked out once: a tile reload stores
/// every pixel's fp16 colour to a unorm8 tilebuffer.
fn unorm8_of_half(value: u32) -> u8 {
    static TABLE: std::sync::LazyLock<Box<[u8]>> = std::sync::LazyLock::new(|| {
        (0..=u16::MAX)
            .map(|h| unorm(half_to_f32(u64::from(h)), 255.0) as u8)
            .collect()
    });
    TABLE[usize::from(value as u16)]
}

fn snorm(value: f32, max: f32) -> u32 {
    let v = if value.is_nan() {
        0.0
    } else {
        value.clamp(-1.0, 1.0)
    };
    round_ties_even_small(v * max) as i32 as u32
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
    if let Some(fields) = format.fields() {
        let word = if format.packed_bytes() == 2 {
            u16_at(0)
        } else {
            word()
        };
        if format == ElementFormat::Rgb10a2Int {
            let (shift, width) = fields[component & 3];
            return (word >> shift) & ((1 << width) - 1);
        }
        // A channel the format lacks reads 1 (r5g6b5's fourth).
        let value = fields.get(component).map_or(1.0, |&(shift, width)| {
            let max = (1u32 << width) - 1;
            ((word >> shift) & max) as f32 / max as f32
        });
        return float_register(value, half);
    }
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
        // Read through their fields above.
        ElementFormat::Rgb10a2
        | ElementFormat::Rgb10a2Int
        | ElementFormat::R5g6b5
        | ElementFormat::Rgba4
        | ElementFormat::Rgb5a1
        | ElementFormat::A1rgb5 => 0,
    }
}

/// The packed word at the start of `bytes` (2 or 4 bytes).
fn read_word(format: ElementFormat, bytes: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    let n = format.packed_bytes();
    word[..n].copy_from_slice(&bytes[..n]);
    u32::from_le_bytes(word)
}

fn write_word(format: ElementFormat, bytes: &mut [u8], word: u32) {
    let n = format.packed_bytes();
    bytes[..n].copy_from_slice(&word.to_le_bytes()[..n]);
}

/// Stores a register value as component `component` into `bytes` (the
/// component's element, or the packed word, which the caller read first).
/// Several components of one packed word go through [`store_element`] or
/// [`store_packed`], once: rgb9e5's shared exponent depends on all three.
pub fn store(format: ElementFormat, bytes: &mut [u8], component: usize, value: u32, half: bool) {
    if format.packed() {
        let mut values = [0; 4];
        values[component & 3] = value;
        let word = read_word(format, bytes);
        let word = store_packed(format, word, 1 << (component & 3), values, half);
        write_word(format, bytes, word);
        return;
    }
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
        ElementFormat::Unorm8 if half => put8(bytes, u32::from(unorm8_of_half(value))),
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
        ElementFormat::Rgb10a2
        | ElementFormat::Rgb10a2Int
        | ElementFormat::Rg11b10f
        | ElementFormat::Rgb9e5
        | ElementFormat::R5g6b5
        | ElementFormat::Rgba4
        | ElementFormat::Rgb5a1
        | ElementFormat::A1rgb5 => {}
    }
}

/// Stores the components `mask` names (`values` indexed by component)
/// into one element at the start of `bytes`: each component at its place,
/// or a packed format's word packed once.
pub fn store_element(
    format: ElementFormat,
    bytes: &mut [u8],
    mask: u8,
    values: [u32; 4],
    half: bool,
) {
    if format.packed() {
        let word = read_word(format, bytes);
        let word = store_packed(format, word, mask, values, half);
        write_word(format, bytes, word);
    } else if let (ElementFormat::Unorm8, 0xF, false, Some(element)) =
        (format, mask & 0xF, half, bytes.get_mut(..4))
    {
        element.copy_from_slice(&unorm8_element(values));
    } else {
        for component in (0..4).filter(|c| mask & (1 << c) != 0) {
            let at = component << format.shift();
            store(format, &mut bytes[at..], component, values[component], half);
        }
    }
}

/// A whole unorm8 element (the commonest render target) from four fp32
/// register values: each component as [`store`] converts it, without
/// the dispatch per component.
#[inline]
pub fn unorm8_element(values: [u32; 4]) -> [u8; 4] {
    // (A loop: `map` is not inlined here.)
    let mut bytes = [0; 4];
    for (byte, value) in bytes.iter_mut().zip(values) {
        *byte = unorm(f32::from_bits(value), 255.0) as u8;
    }
    bytes
}

/// Whether [`store`] of what [`load`] reads (both with `half`) gives back
/// the bytes read, for every element and component: the integer formats,
/// f16 moved as 16-bit values, unorm8 and srgba8 (whose conversions round
/// to nearest), and unorm16 through fp32 registers. Snorm formats do not
/// (-128 reads as -1.0, stored as -127), nor do f16 widened to fp32 (a
/// NaN comes back as the default NaN) and unorm16 through fp16 registers.
pub fn round_trips(format: ElementFormat, half: bool) -> bool {
    match format {
        ElementFormat::I8
        | ElementFormat::I16
        | ElementFormat::I32
        | ElementFormat::Unorm8
        | ElementFormat::Srgba8 => true,
        ElementFormat::F16 => half,
        ElementFormat::Unorm16 => !half,
        _ => false,
    }
}

/// Packs the components `mask` names (`values` indexed by component) into
/// a packed format's `word`; the other components keep their value.
///
/// rg11b10f follows the GL/Vulkan rules for unsigned small floats:
/// rounded to nearest even, negative values and -inf to 0, finite values
/// past the largest (65024 in the 11-bit fields, 64512 in the 10-bit one)
/// to it, +inf to inf, NaN to a NaN. rgb9e5 uses the shared-exponent rule of the Vulkan specification
/// (`EXT_texture_shared_exponent`): the exponent of the largest component,
/// each mantissa rounded half up; a component left out keeps its decoded
/// value and takes part in choosing the exponent. What the hardware does
/// for a NaN in either is not public: a NaN is 0 in rgb9e5 (as the rule
/// clamps it) and 0x7e0/0x3f0 (a quiet NaN) in rg11b10f.
pub fn store_packed(
    format: ElementFormat,
    word: u32,
    mask: u8,
    values: [u32; 4],
    half: bool,
) -> u32 {
    let given = |component: usize| {
        (mask & (1 << component) != 0).then(|| register_float(values[component], half))
    };
    if let Some(fields) = format.fields() {
        return fields
            .iter()
            .enumerate()
            .filter(|(component, _)| mask & (1 << component) != 0)
            .fold(word, |w, (component, &(shift, width))| {
                let max = (1u32 << width) - 1;
                // Integers keep their low bits, as the 8- and 16-bit
                // integer formats do.
                let field = if format == ElementFormat::Rgb10a2Int {
                    values[component] & max
                } else {
                    unorm(register_float(values[component], half), max as f32)
                };
                (w & !(max << shift)) | (field << shift)
            });
    }
    match format {
        ElementFormat::Rg11b10f => {
            let places = [(0, 6), (11, 6), (22, 5)];
            places
                .iter()
                .enumerate()
                .fold(word, |w, (component, &(shift, mantissa_bits))| {
                    let Some(c) = given(component) else {
                        return w;
                    };
                    let field = (1u32 << (mantissa_bits + 5)) - 1;
                    (w & !(field << shift)) | (f32_to_small_float(c, mantissa_bits) << shift)
                })
        }
        ElementFormat::Rgb9e5 => {
            let bytes = word.to_le_bytes();
            let rgb: [f32; 3] = std::array::from_fn(|component| {
                given(component)
                    .unwrap_or_else(|| f32::from_bits(load(format, &bytes, component, false)))
            });
            shared_exponent_word(rgb)
        }
        _ => word,
    }
}

/// An fp32 value as an unsigned float with a 5-bit exponent (bias 15) and
/// `mantissa_bits`, rounded to nearest even (see [`store_packed`]).
fn f32_to_small_float(value: f32, mantissa_bits: u32) -> u32 {
    let infinity = 31 << mantissa_bits;
    if value.is_nan() {
        return infinity | 1 << (mantissa_bits - 1);
    }
    if value.is_infinite() && value > 0.0 {
        return infinity;
    }
    if value <= 0.0 {
        return 0;
    }
    let value = f64::from(value);
    let largest = (2.0 - 2f64.powi(-(mantissa_bits as i32))) * 2f64.powi(15);
    let exponent_of = |v: f64| (((v.to_bits() >> 52) & 0x7FF) as i32 - 1023).max(-14);
    let quantum = 2f64.powi(exponent_of(value) - mantissa_bits as i32);
    let rounded = ((value / quantum).round_ties_even() * quantum).min(largest);
    if rounded < 2f64.powi(-14) {
        // A denormal: the mantissa counts 2^(-14 - mantissa_bits).
        return (rounded / 2f64.powi(-14 - mantissa_bits as i32)) as u32;
    }
    let exponent = exponent_of(rounded);
    let mantissa =
        (rounded / 2f64.powi(exponent - mantissa_bits as i32)) as u32 - (1 << mantissa_bits);
    ((exponent + 15) as u32) << mantissa_bits | mantissa
}

/// Three components as an rgb9e5 word (9-bit mantissas, a 5-bit exponent
/// with bias 15), by the Vulkan specification's shared-exponent rule.
fn shared_exponent_word(rgb: [f32; 3]) -> u32 {
    const MANTISSA_BITS: i32 = 9;
    const BIAS: i32 = 15;
    let largest = 511.0 / 512.0 * 2f64.powi(31 - BIAS);
    let clamped = rgb.map(|c| {
        if c.is_nan() {
            0.0
        } else {
            f64::from(c).clamp(0.0, largest)
        }
    });
    let max = clamped.iter().copied().fold(0.0, f64::max);
    // floor(log2(max)), exactly from the bits (max is an fp32 value).
    let floor_log2 = if max == 0.0 {
        -BIAS - 1
    } else {
        ((max.to_bits() >> 52) & 0x7FF) as i32 - 1023
    };
    let mut exponent = floor_log2.max(-BIAS - 1) + 1 + BIAS;
    let scale = |exponent: i32| 2f64.powi(exponent - BIAS - MANTISSA_BITS);
    if (max / scale(exponent) + 0.5).floor() >= 512.0 {
        exponent += 1;
    }
    let [r, g, b] = clamped.map(|c| (c / scale(exponent) + 0.5).floor() as u32);
    r | g << 9 | b << 18 | (exponent as u32) << 27
}

#[cfg(test)]
mod tests {
    #[test]
    fn small_rounding_matches_round_ties_even() {
        // Every quarter (ties included) over the normalised formats'
        // range, and every float bit pattern of magnitude up to 2^23 with
        // a stride that visits each exponent many times.
        let quarters = (-4 * 70_000..=4 * 70_000).map(|k| k as f32 / 4.0);
        let patterns = (0..=0x4B00_0000u32)
            .step_by(997)
            .flat_map(|b| [f32::from_bits(b), -f32::from_bits(b)]);
        for x in quarters.chain(patterns) {
            assert_eq!(
                round_ties_even_small(x).to_bits(),
                x.round_ties_even().to_bits(),
                "{x}"
            );
        }
    }

    use super::*;

    /// Whether storing what a load of `bytes` gives returns `bytes`, as
    /// every component.
    fn round_trip_holds(format: ElementFormat, bytes: &[u8], half: bool) -> bool {
        (0..4).all(|component| {
            let mut out = [0u8; 4];
            let value = load(format, bytes, component, half);
            store(format, &mut out, component, value, half);
            out[..bytes.len()] == *bytes
        })
    }

    #[test]
    fn round_trips_names_the_formats_whose_elements_come_back_unchanged() {
        let formats = [
            (ElementFormat::I8, 1),
            (ElementFormat::Unorm8, 1),
            (ElementFormat::Snorm8, 1),
            (ElementFormat::Srgba8, 1),
            (ElementFormat::I16, 2),
            (ElementFormat::F16, 2),
            (ElementFormat::Unorm16, 2),
            (ElementFormat::Snorm16, 2),
        ];
        for (format, size) in formats {
            for half in [false, true] {
                let every = (0..1u32 << (8 * size))
                    .all(|v| round_trip_holds(format, &v.to_le_bytes()[..size], half));
                assert_eq!(round_trips(format, half), every, "{format:?}, half {half}");
            }
        }
        // 32-bit words: the bits pass through.
        for v in (0..=u32::MAX)
            .step_by(65_521)
            .chain([u32::MAX, 0x7FC0_0001])
        {
            assert!(round_trip_holds(
                ElementFormat::I32,
                &v.to_le_bytes(),
                false
            ));
        }
        assert!(round_trips(ElementFormat::I32, false));
        // Every 8-bit snorm byte but -128 comes back; f16 NaNs widened to
        // fp32 do not.
        assert!(!round_trip_holds(ElementFormat::Snorm8, &[0x80], false));
        assert!(!round_trip_holds(
            ElementFormat::F16,
            &0x7E01u16.to_le_bytes(),
            false
        ));
    }

    #[test]
    fn normalised_formats_round_trip_through_registers() {
        let mut bytes = [0u8; 4];
        store(
            ElementFormat::Unorm8,
            &mut bytes,
            0,
            0.5f32.to_bits(),
            false,
        );
        assert_eq!(bytes[0], 128);
        assert_eq!(
            f32::from_bits(load(ElementFormat::Unorm8, &bytes, 0, false)),
            128.0 / 255.0
        );
        store(
            ElementFormat::Snorm8,
            &mut bytes,
            0,
            (-2.0f32).to_bits(),
            false,
        );
        assert_eq!(bytes[0] as i8, -127);
        let half_one = u32::from(f32_to_half(1.0));
        store(ElementFormat::Unorm16, &mut bytes, 0, half_one, true);
        assert_eq!(u16::from_le_bytes([bytes[0], bytes[1]]), 65535);
    }

    #[test]
    fn rgb10a2_packs_each_component_in_place() {
        let mut word = [0u8; 4];
        for (component, value) in [1.0f32, 0.0, 1.0, 1.0].into_iter().enumerate() {
            store(
                ElementFormat::Rgb10a2,
                &mut word,
                component,
                value.to_bits(),
                false,
            );
        }
        assert_eq!(u32::from_le_bytes(word), 0x3FF | 0x3FF << 20 | 3 << 30);
        assert_eq!(
            f32::from_bits(load(ElementFormat::Rgb10a2, &word, 2, false)),
            1.0
        );
    }

    fn pack(format: ElementFormat, word: u32, mask: u8, rgb: [f32; 3]) -> u32 {
        let values = [rgb[0].to_bits(), rgb[1].to_bits(), rgb[2].to_bits(), 0];
        store_packed(format, word, mask, values, false)
    }

    #[test]
    fn rg11b10f_stores_round_to_nearest_even_and_clamp() {
        let word = |rgb| pack(ElementFormat::Rg11b10f, 0, 0x7, rgb);
        // 1.0 = exponent 15; 2.0 = 16; 0.5 = 14 (five mantissa bits in b).
        assert_eq!(word([1.0, 2.0, 0.5]), 15 << 6 | 16 << 17 | 14 << 27);
        // 1 + 2^-7 is a tie between mantissas 0 and 1: even, 0. 1 + 3 *
        // 2^-7 ties between 1 and 2: 2.
        assert_eq!(word([1.0 + 2f32.powi(-7), 0.0, 0.0]), 15 << 6);
        assert_eq!(word([1.0 + 3.0 * 2f32.powi(-7), 0.0, 0.0]), 15 << 6 | 2);
        // Negative values and -inf are 0, finite values past 65024 are
        // 65024 (exponent 30, mantissa all ones), +inf is inf, NaN a NaN.
        assert_eq!(word([-1.0, f32::NEG_INFINITY, -0.0]), 0);
        assert_eq!(word([1e6, 0.0, 1e6]), 0x7BF | 0x3DF << 22);
        assert_eq!(word([f32::INFINITY, f32::NAN, 0.0]), 0x7C0 | 0x7E0 << 11);
        // Denormals: 2^-20 is one unit of the 11-bit field and half a
        // unit of the 10-bit one (a tie, to even: 0).
        assert_eq!(word([2f32.powi(-20), 0.0, 2f32.powi(-20)]), 1);
        // A masked store keeps the other fields' bits.
        let kept = pack(ElementFormat::Rg11b10f, 0xFFFF_FFFF, 0x2, [0.0, 1.0, 0.0]);
        assert_eq!(kept, 0xFFC0_07FF | 15 << 17);
    }

    #[test]
    fn every_small_float_reencodes_to_itself() {
        // The load path (small_float_to_f32) decodes; the store encodes.
        for (mantissa_bits, shift) in [(6u32, 0u32), (5, 22)] {
            for bits in 0..(31u32 << mantissa_bits) {
                let value = small_float_to_f32(bits, mantissa_bits);
                let word = pack(ElementFormat::Rg11b10f, 0, 1 << (shift / 11), [value; 3]);
                assert_eq!((word >> shift) & ((1 << (mantissa_bits + 5)) - 1), bits);
            }
        }
    }

    #[test]
    fn rgb9e5_shares_the_largest_components_exponent() {
        let word = |rgb| pack(ElementFormat::Rgb9e5, 0, 0x7, rgb);
        // 1.0 sets the exponent to 16 (scale 2^-8): 256, 128, 64.
        assert_eq!(word([1.0, 0.5, 0.25]), 256 | 128 << 9 | 64 << 18 | 16 << 27);
        // 1.999 * 256 rounds to 512, which needs the next exponent.
        assert_eq!(word([1.999, 0.0, 0.0]), 256 | 17 << 27);
        // Negative and NaN components are 0; too large clamps to the
        // largest, 511 * 2^7.
        assert_eq!(word([-1.0, f32::NAN, 1e9]), 511 << 18 | 31 << 27);
        assert_eq!(word([0.0, 0.0, 0.0]), 0);
        // Storing g alone keeps r's value and re-chooses the exponent:
        // r = 1.0 with g = 4.0 is r = 64, g = 256 at exponent 18.
        let r_only = word([1.0, 0.0, 0.0]);
        let both = pack(ElementFormat::Rgb9e5, r_only, 0x2, [0.0, 4.0, 0.0]);
        assert_eq!(both, 64 | 256 << 9 | 18 << 27);
        // Every word with a normalised largest mantissa decodes and
        // re-encodes to itself.
        for exponent in 1..31u32 {
            for r in [256u32, 300, 511] {
                for g in [0u32, 1, 255, 511] {
                    let word = r | g << 9 | 7 << 18 | exponent << 27;
                    let bytes = word.to_le_bytes();
                    let rgb = [0, 1, 2]
                        .map(|c| f32::from_bits(load(ElementFormat::Rgb9e5, &bytes, c, false)));
                    assert_eq!(pack(ElementFormat::Rgb9e5, 0, 0x7, rgb), word, "{word:#x}");
                }
            }
        }
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

    #[test]
    fn a_whole_unorm8_element_stores_as_its_components_do() {
        // The whole-element path against `store` of each component, over
        // fp32 bit patterns every 4099th (negatives, NaNs, infinities,
        // values past 1 and ties among them), each in every component.
        let mut values = (0..=u32::MAX).step_by(4099).collect::<Vec<_>>();
        values.extend([
            0x3F00_0000,
            0x3B80_8081,
            0x3F80_0000,
            0x8000_0000,
            0x7FC0_0000,
        ]);
        for chunk in values.chunks(4).filter(|c| c.len() == 4) {
            for rotation in 0..4 {
                let mut by_component = [0u32; 4];
                for (c, value) in by_component.iter_mut().enumerate() {
                    *value = chunk[(c + rotation) % 4];
                }
                let mut whole = [0u8; 4];
                store_element(ElementFormat::Unorm8, &mut whole, 0xF, by_component, false);
                let mut each = [0u8; 4];
                for (c, value) in by_component.into_iter().enumerate() {
                    store(ElementFormat::Unorm8, &mut each[c..], c, value, false);
                }
                assert_eq!(whole, each, "{by_component:#x?}");
            }
        }
    }

    #[test]
    fn every_fp16_register_value_stores_to_unorm8_as_its_clamped_rounded_value() {
        // The value times 255, clamped to 0..255 and rounded to nearest
        // even, in f64 (exact: 11 significant bits times 8); NaN stores 0.
        // The upper half of the register is not read.
        for h in 0..=u16::MAX {
            let value = half::f16::from_bits(h).to_f64();
            let expected = if value.is_nan() {
                0
            } else {
                (value * 255.0).clamp(0.0, 255.0).round_ties_even() as u8
            };
            let mut byte = [0u8];
            store(
                ElementFormat::Unorm8,
                &mut byte,
                0,
                0xABCD_0000 | u32::from(h),
                true,
            );
            assert_eq!(byte[0], expected, "fp16 {h:#06x}");
        }
    }
}
