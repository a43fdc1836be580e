//! The runtime half of the format description.
//!
//! `hw/spec/formats.spec` describes every hardware format once; the build
//! script turns it into typed structs whose `pack`, `unpack` and `Display`
//! call into this module. Everything about how a field's value becomes bits
//! (bit ranges, modifiers such as "stored minus one" or "stored shifted
//! right by four", range checks) lives here, in one place, and is described
//! for each field by a [`FieldInfo`] table entry.
//!
//! Encoding of a field, from the value a driver thinks in (the *logical*
//! value, e.g. a width in pixels) to the bits in memory (the *stored*
//! value): the logical value must lie in `[min, max]`; then each modifier is
//! applied in order; the result occupies the field's bit ranges, least
//! significant range first. Decoding applies the modifiers' inverses in
//! reverse order, so every stored bit pattern decodes to exactly one valid
//! logical value and `pack(unpack(bits)) == bits` over the covered bits.

use std::fmt;

/// How a stored value relates to the logical value (applied in order when
/// packing; undone in reverse order when unpacking).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Modifier {
    /// Stored = logical - n (e.g. sizes stored "minus one").
    Minus(u64),
    /// Stored = logical >> n; the low `n` bits of the logical value must be
    /// zero (alignment).
    Shr(u32),
    /// Stored = log2(logical); the logical value must be a power of two.
    Log2,
    /// Stored = logical / n, a count of `n`-sized groups; the logical value
    /// must be a non-zero multiple of `n`, and the all-groups value
    /// `n << width` is stored as 0. Only valid as the last modifier.
    Groups(u64),
}

/// The kind of value a field holds, for printing and documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// An unsigned number, printed in decimal.
    Uint,
    /// An unsigned number, printed in hexadecimal (masks, unknown fields).
    Hex,
    /// A GPU virtual address (or part of one), printed in hexadecimal.
    Address,
    /// A single bit.
    Bool,
    /// An IEEE-754 single-precision float.
    Float,
    /// A level of detail in unsigned 4.6 fixed point ([`crate::Lod`]).
    Lod,
    /// A value of the named enum.
    Enum(&'static str),
    /// A constant that identifies the format (a tag or block type); pack
    /// writes it and unpack reports a mismatch.
    Const {
        /// The constant's value.
        value: u64,
        /// How the value reads (an enum variant name, or the number).
        display: &'static str,
    },
}

/// A field that is only meaningful when another field has (or has not) a
/// particular value, e.g. a linear texture's stride, which shares its bits
/// with a twiddled texture's depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Condition {
    /// The discriminating field (an unconditional enum field).
    pub field: &'static str,
    /// `true`: active when equal; `false`: active when different.
    pub equal: bool,
    /// The enum variant compared against.
    pub variant: &'static str,
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = if self.equal { "==" } else { "!=" };
        write!(f, "{} {} {}", self.field, op, self.variant)
    }
}

/// Everything the generated code and the tools know about one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldInfo {
    /// Field name as in the generated struct.
    pub name: &'static str,
    /// Bit ranges `(lowest bit, width)`, least significant part first.
    pub parts: &'static [(u32, u32)],
    /// What the value is.
    pub kind: FieldKind,
    /// Modifiers from logical to stored value, in packing order.
    pub modifiers: &'static [Modifier],
    /// Smallest valid logical value.
    pub min: u64,
    /// Largest valid logical value.
    pub max: u64,
    /// When the field is meaningful; `None` for always.
    pub condition: Option<Condition>,
    /// The default value as written in the spec (empty for zero).
    pub default: &'static str,
    /// What the field means.
    pub doc: &'static str,
}

impl FieldInfo {
    /// Total stored width in bits.
    pub fn width_bits(&self) -> u32 {
        self.parts.iter().map(|&(_, w)| w).sum()
    }

    /// The bit ranges as text, e.g. `24..37` or `32..63 + 0..7`.
    pub fn bits_text(&self) -> String {
        let parts: Vec<String> = self
            .parts
            .iter()
            .map(|&(lo, w)| format!("{}..{}", lo, lo + w - 1))
            .collect();
        parts.join(" + ")
    }

    /// The modifiers as text, e.g. `minus(16) shr(4)`.
    pub fn modifiers_text(&self) -> String {
        let mods: Vec<String> = self
            .modifiers
            .iter()
            .map(|m| match m {
                Modifier::Minus(n) => format!("minus({n})"),
                Modifier::Shr(n) => format!("shr({n})"),
                Modifier::Log2 => "log2".to_owned(),
                Modifier::Groups(n) => format!("groups({n})"),
            })
            .collect();
        mods.join(" ")
    }
}

/// Static description of a whole format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FormatInfo {
    /// Rust type name.
    pub name: &'static str,
    /// Size in bytes.
    pub size_bytes: usize,
    /// Which group of formats it belongs to (for documentation).
    pub group: &'static str,
    /// What the format is.
    pub doc: &'static str,
    /// Its fields, constants included.
    pub fields: &'static [FieldInfo],
}

/// Static description of a generated enum.
#[derive(Debug, Clone, Copy)]
pub struct EnumInfo {
    /// Rust type name.
    pub name: &'static str,
    /// What the enum is.
    pub doc: &'static str,
    /// (variant, value, display name).
    pub variants: &'static [(&'static str, u32, &'static str)],
}

impl EnumInfo {
    /// The generated enum called `name`.
    pub fn by_name(name: &str) -> Option<&'static EnumInfo> {
        crate::ALL_ENUMS.iter().copied().find(|e| e.name == name)
    }

    /// The variant (its Rust name) whose value is `value`.
    pub fn variant_of(&self, value: u64) -> Option<&'static str> {
        self.variants
            .iter()
            .find(|v| u64::from(v.1) == value)
            .map(|v| v.0)
    }

    /// The value of the variant called `variant` (its Rust name).
    pub fn value_of(&self, variant: &str) -> Option<u32> {
        self.variants.iter().find(|v| v.0 == variant).map(|v| v.1)
    }
}

impl FormatInfo {
    /// The generated format called `name`.
    pub fn by_name(name: &str) -> Option<&'static FormatInfo> {
        crate::ALL_FORMATS.iter().copied().find(|f| f.name == name)
    }

    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&'static FieldInfo> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Whether `field`'s condition holds in `bytes` (always, for an
    /// unconditional field): the generated code's test, from the tables,
    /// for tools that handle formats by name.
    pub fn applies(&self, field: &FieldInfo, bytes: &[u8]) -> bool {
        let Some(condition) = field.condition else {
            return true;
        };
        let discriminant = self.field(condition.field);
        let variant = discriminant.and_then(|d| match d.kind {
            FieldKind::Enum(name) => EnumInfo::by_name(name)?.value_of(condition.variant),
            _ => None,
        });
        match (discriminant, variant) {
            (Some(d), Some(variant)) => (d.logical(bytes) == u64::from(variant)) == condition.equal,
            // The generator only emits conditions over enum fields of the
            // same format.
            _ => true,
        }
    }
}

/// A value that cannot be packed into a format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PackError {
    /// The value is outside the range the field can represent.
    #[error("{format}.{field}: {value:#x} is outside {min:#x}..={max:#x}")]
    OutOfRange {
        /// Format name.
        format: &'static str,
        /// Field name.
        field: &'static str,
        /// The rejected value.
        value: u64,
        /// Smallest representable value.
        min: u64,
        /// Largest representable value.
        max: u64,
    },
    /// The value is not a multiple of the field's granularity.
    #[error("{format}.{field}: {value:#x} is not a multiple of {multiple:#x}")]
    NotMultiple {
        /// Format name.
        format: &'static str,
        /// Field name.
        field: &'static str,
        /// The rejected value.
        value: u64,
        /// The required granularity.
        multiple: u64,
    },
    /// The value must be a power of two.
    #[error("{format}.{field}: {value:#x} is not a power of two")]
    NotPowerOfTwo {
        /// Format name.
        format: &'static str,
        /// Field name.
        field: &'static str,
        /// The rejected value.
        value: u64,
    },
    /// A field that is not meaningful in this configuration was set to
    /// something other than its default (its bits belong to another field).
    #[error("{format}.{field} must keep its default unless {condition}")]
    InactiveField {
        /// Format name.
        format: &'static str,
        /// Field name.
        field: &'static str,
        /// When the field would be meaningful.
        condition: Condition,
    },
    /// The output buffer is smaller than the format.
    #[error("{format} needs {size_bytes} bytes, the buffer has {len}")]
    BufferTooSmall {
        /// Format name.
        format: &'static str,
        /// Size of the format.
        size_bytes: usize,
        /// Size of the buffer.
        len: usize,
    },
}

/// Something `unpack` found that the format does not explain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnpackIssue {
    /// Set bits that no active field covers, in one 32-bit word.
    UnknownBits {
        /// Index of the 32-bit word.
        word: usize,
        /// The word's value.
        value: u32,
        /// The set bits no field covers.
        mask: u32,
    },
    /// A constant (tag, block type) did not have its expected value.
    ConstMismatch {
        /// The constant's field name.
        field: &'static str,
        /// Expected value.
        expected: u64,
        /// Value found.
        found: u64,
    },
}

/// The result of decoding a format: the value, plus everything the format
/// could not explain. Decoding never fails and never hides bits.
#[derive(Debug, Clone, PartialEq)]
pub struct Unpacked<T> {
    /// The decoded value.
    pub value: T,
    /// Unknown bits and constant mismatches.
    pub issues: Vec<UnpackIssue>,
}

impl<T> Unpacked<T> {
    /// Whether every set bit was explained and every constant matched.
    pub fn is_clean(&self) -> bool {
        self.issues.is_empty()
    }
}

/// The input is too short for the format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{format} needs {size_bytes} bytes, got {len}")]
pub struct ShortInput {
    /// Format name.
    pub format: &'static str,
    /// Size of the format.
    pub size_bytes: usize,
    /// Bytes available.
    pub len: usize,
}

/// What every generated format offers, for code that handles formats
/// generically (decoders, tests).
pub trait Format: Sized + Default + Clone + fmt::Debug + fmt::Display + PartialEq {
    /// Size in bytes.
    const SIZE_BYTES: usize;
    /// Static description.
    const INFO: &'static FormatInfo;

    /// Packs into the first [`Self::SIZE_BYTES`] bytes of `out` (the rest is
    /// left alone).
    ///
    /// # Errors
    /// [`PackError`] names the field and the broken limit.
    fn pack_into(&self, out: &mut [u8]) -> Result<(), PackError>;

    /// Decodes the first [`Self::SIZE_BYTES`] bytes of `bytes`.
    ///
    /// # Errors
    /// [`ShortInput`] if there are fewer bytes than the format has.
    fn unpack_from(bytes: &[u8]) -> Result<Unpacked<Self>, ShortInput>;

    /// Decodes the first [`Self::SIZE_BYTES`] bytes of `bytes` without
    /// looking for unknown bits or constant mismatches (the generated
    /// formats use their fast `decode_fields`): for hot paths over
    /// encodings the stack itself wrote.
    ///
    /// # Errors
    /// [`ShortInput`] if there are fewer bytes than the format has.
    fn decode_from(bytes: &[u8]) -> Result<Self, ShortInput> {
        Self::unpack_from(bytes).map(|u| u.value)
    }

    /// Packs into a new vector.
    ///
    /// # Errors
    /// [`PackError`] names the field and the broken limit.
    fn pack_to_vec(&self) -> Result<Vec<u8>, PackError> {
        let mut out = vec![0; Self::SIZE_BYTES];
        self.pack_into(&mut out)?;
        Ok(out)
    }

    /// Writes the fields, one per line, each prefixed by `indent` spaces.
    ///
    /// # Errors
    /// Only those of the formatter.
    fn write_fields(&self, f: &mut dyn fmt::Write, indent: usize) -> fmt::Result;
}

/// Reads `width` (1..=64) bits starting at bit `lo` (little-endian).
#[inline]
pub fn extract_bits(bytes: &[u8], lo: u32, width: u32) -> u64 {
    debug_assert!((1..=64).contains(&width));
    // Most fields fit in one 8-byte window of the format: one load.
    if let Some((start, shift)) = word_window(bytes.len(), lo, width) {
        if let Some(word) = bytes.get(start..start + 8) {
            let word = u64::from_le_bytes(word.try_into().unwrap_or_default());
            return (word >> shift) & low_bits(width);
        }
    }
    // CAST: a format is a few dozen bytes.
    if bytes.len() < 8 && lo + width <= 8 * bytes.len() as u32 {
        // A format shorter than 8 bytes (many control words): one
        // zero-padded word.
        let mut word = [0u8; 8];
        word[..bytes.len()].copy_from_slice(bytes);
        return (u64::from_le_bytes(word) >> lo) & low_bits(width);
    }
    extract_bits_slowly(bytes, lo, width)
}

/// The low `width` (1..=64) bits set.
#[inline]
fn low_bits(width: u32) -> u64 {
    u64::MAX >> (64 - width)
}

/// [`extract_bits`] for a field spanning 9 bytes.
#[cold]
#[inline(never)]
fn extract_bits_slowly(bytes: &[u8], lo: u32, width: u32) -> u64 {
    let (first, last) = byte_span(lo, width);
    // A field of at most 64 bits spans at most 9 bytes: gather them into a
    // u128 and shift once, instead of moving bit by bit.
    let mut window = 0u128;
    for (i, &b) in bytes[first..=last].iter().enumerate() {
        window |= u128::from(b) << (8 * i);
    }
    // CAST: the mask keeps at most 64 bits.
    ((window >> (lo % 8)) & field_mask(width)) as u64
}

/// Writes the low `width` (1..=64) bits of `value` starting at bit `lo`,
/// leaving other bits alone.
#[inline]
pub fn insert_bits(bytes: &mut [u8], lo: u32, width: u32, value: u64) {
    debug_assert!((1..=64).contains(&width));
    // Most fields fit in one 8-byte window of the format: one load and
    // one store (bytes outside the field are written back unchanged).
    if let Some((start, shift)) = word_window(bytes.len(), lo, width) {
        if let Some(span) = bytes.get_mut(start..start + 8) {
            let mask = low_bits(width) << shift;
            let mut word = u64::from_le_bytes((&*span).try_into().unwrap_or_default());
            word = (word & !mask) | ((value << shift) & mask);
            span.copy_from_slice(&word.to_le_bytes());
            return;
        }
    }
    insert_bits_slowly(bytes, lo, width, value);
}

/// [`insert_bits`] for a format shorter than 8 bytes or a field spanning
/// 9 bytes.
#[cold]
#[inline(never)]
fn insert_bits_slowly(bytes: &mut [u8], lo: u32, width: u32, value: u64) {
    let (first, last) = byte_span(lo, width);
    // CAST: a format is a few dozen bytes.
    if bytes.len() < 8 && lo + width <= 8 * bytes.len() as u32 {
        // A format shorter than 8 bytes (generated packing goes through
        // an 8-byte scratch instead): one zero-padded word.
        let mut padded = [0u8; 8];
        padded[..bytes.len()].copy_from_slice(bytes);
        let word = u64::from_le_bytes(padded);
        let mask = low_bits(width) << lo;
        let word = (word & !mask) | ((value << lo) & mask);
        let len = bytes.len();
        bytes.copy_from_slice(&word.to_le_bytes()[..len]);
        return;
    }
    let shift = lo % 8;
    let span = &mut bytes[first..=last];
    let mut window = 0u128;
    for (i, &b) in span.iter().enumerate() {
        window |= u128::from(b) << (8 * i);
    }
    window &= !(field_mask(width) << shift);
    window |= (u128::from(value) & field_mask(width)) << shift;
    for (i, b) in span.iter_mut().enumerate() {
        // CAST: keeps the byte at position i.
        *b = (window >> (8 * i)) as u8;
    }
}

/// The 8 bytes of a `len`-byte format that hold bits `lo..lo + width`,
/// as (first byte, the field's shift within them): the window starts at
/// the field's first byte, or 8 bytes before the end near the end. `None`
/// when the format is shorter than 8 bytes or the field straddles two
/// windows (it then spans 9 bytes).
#[inline]
fn word_window(len: usize, lo: u32, width: u32) -> Option<(usize, u32)> {
    let first = (lo / 8) as usize;
    let start = first.min(len.checked_sub(8)?);
    // CAST: start <= lo / 8.
    let shift = lo - 8 * start as u32;
    (shift + width <= 64).then_some((start, shift))
}

/// Indices of the first and last byte a bit range touches.
fn byte_span(lo: u32, width: u32) -> (usize, usize) {
    // CAST: bit indices are bounded by the format size (a few dozen bytes).
    ((lo / 8) as usize, ((lo + width - 1) / 8) as usize)
}

fn field_mask(width: u32) -> u128 {
    (1u128 << width) - 1
}

impl FieldInfo {
    /// The field's logical value in `bytes` (its stored bits decoded).
    pub fn logical(&self, bytes: &[u8]) -> u64 {
        decode(self, read_stored(bytes, self))
    }
}

/// Reads a field's stored value from its parts.
pub fn read_stored(bytes: &[u8], info: &FieldInfo) -> u64 {
    let mut value = 0u64;
    let mut shift = 0;
    for &(lo, width) in info.parts {
        value |= extract_bits(bytes, lo, width) << shift;
        shift += width;
    }
    value
}

/// Writes a field's stored value into its parts.
#[inline]
pub fn write_stored(bytes: &mut [u8], info: &FieldInfo, stored: u64) {
    let mut shift = 0;
    for &(lo, width) in info.parts {
        insert_bits(bytes, lo, width, stored >> shift);
        shift += width;
    }
}

/// Marks a field's bits as covered in `mask`.
pub fn mark_covered(mask: &mut [u8], info: &FieldInfo) {
    for &(lo, width) in info.parts {
        insert_bits(mask, lo, width, u64::MAX);
    }
}

/// Encodes a logical value into the stored value of a field.
///
/// # Errors
/// [`PackError::OutOfRange`], [`PackError::NotMultiple`] or
/// [`PackError::NotPowerOfTwo`] naming `format` and the field.
#[inline]
pub fn encode(format: &'static str, info: &FieldInfo, logical: u64) -> Result<u64, PackError> {
    if logical < info.min || logical > info.max {
        return Err(PackError::OutOfRange {
            format,
            field: info.name,
            value: logical,
            min: info.min,
            max: info.max,
        });
    }
    let width = info.width_bits();
    let mut value = logical;
    for modifier in info.modifiers {
        value = match *modifier {
            Modifier::Minus(n) => value - n,
            Modifier::Shr(n) => {
                let low = (1u64 << n) - 1;
                if value & low != 0 {
                    return Err(PackError::NotMultiple {
                        format,
                        field: info.name,
                        value: logical,
                        multiple: low + 1,
                    });
                }
                value >> n
            }
            Modifier::Log2 => {
                if !value.is_power_of_two() {
                    return Err(PackError::NotPowerOfTwo {
                        format,
                        field: info.name,
                        value,
                    });
                }
                u64::from(value.trailing_zeros())
            }
            Modifier::Groups(n) => {
                if !value.is_multiple_of(n) {
                    return Err(PackError::NotMultiple {
                        format,
                        field: info.name,
                        value: logical,
                        multiple: n,
                    });
                }
                let groups = value / n;
                if groups == 1u64 << width {
                    0
                } else {
                    groups
                }
            }
        };
    }
    debug_assert!(
        width == 64 || value < 1u64 << width,
        "min/max must bound the stored range"
    );
    Ok(value)
}

/// Decodes a stored value into the logical value of a field.
pub fn decode(info: &FieldInfo, stored: u64) -> u64 {
    let width = info.width_bits();
    let mut value = stored;
    for modifier in info.modifiers.iter().rev() {
        value = match *modifier {
            Modifier::Minus(n) => value + n,
            Modifier::Shr(n) => value << n,
            Modifier::Log2 => 1u64 << value,
            Modifier::Groups(n) => {
                if value == 0 {
                    n << width
                } else {
                    value * n
                }
            }
        };
    }
    value
}

/// Lists the set bits of `bytes` not covered by `covered`, per 32-bit word.
pub fn unknown_bits(bytes: &[u8], covered: &[u8], issues: &mut Vec<UnpackIssue>) {
    for (word, (chunk, mask)) in bytes.chunks(4).zip(covered.chunks(4)).enumerate() {
        let mut value = [0u8; 4];
        let mut known = [0u8; 4];
        value[..chunk.len()].copy_from_slice(chunk);
        known[..mask.len()].copy_from_slice(mask);
        let value = u32::from_le_bytes(value);
        let unknown = value & !u32::from_le_bytes(known);
        if unknown != 0 {
            issues.push(UnpackIssue::UnknownBits {
                word,
                value,
                mask: unknown,
            });
        }
    }
}

impl fmt::Display for UnpackIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            UnpackIssue::UnknownBits { word, value, mask } => {
                write!(f, "XXX: unknown bits in word {word}: got {value:#010x}, unknown mask {mask:#010x}")
            }
            UnpackIssue::ConstMismatch {
                field,
                expected,
                found,
            } => {
                write!(f, "XXX: {field} is {found:#x}, expected {expected:#x}")
            }
        }
    }
}

impl<T: Format> fmt::Display for Unpacked<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.value)?;
        for issue in &self.issues {
            writeln!(f, "  {issue}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn field(
        parts: &'static [(u32, u32)],
        modifiers: &'static [Modifier],
        min: u64,
        max: u64,
    ) -> FieldInfo {
        FieldInfo {
            name: "f",
            parts,
            kind: FieldKind::Uint,
            modifiers,
            min,
            max,
            condition: None,
            default: "",
            doc: "",
        }
    }

    #[test]
    fn bits_cross_byte_boundaries() {
        let mut bytes = [0u8; 16];
        insert_bits(&mut bytes, 66, 36, 0x9_8765_4321);
        assert_eq!(extract_bits(&bytes, 66, 36), 0x9_8765_4321);
        assert_eq!(bytes[8], 0x21 << 2);
        insert_bits(&mut bytes, 0, 64, u64::MAX);
        assert_eq!(extract_bits(&bytes, 0, 64), u64::MAX);
        assert_eq!(extract_bits(&bytes, 66, 36), 0x9_8765_4321);
    }

    fn reference_extract(bytes: &[u8], lo: u32, width: u32) -> u64 {
        (0..width).fold(0, |acc, i| {
            let bit = lo + i;
            let set = bytes[(bit / 8) as usize] >> (bit % 8) & 1;
            acc | u64::from(set) << i
        })
    }

    proptest::proptest! {
        #[test]
        fn bit_access_matches_a_bit_by_bit_reference(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..=24),
            lo_seed in proptest::prelude::any::<u32>(),
            width_seed in proptest::prelude::any::<u32>(),
            value in proptest::prelude::any::<u64>(),
        ) {
            // Formats shorter than 8 bytes, and fields anywhere in a longer
            // one up to its last bit (near the end too).
            let bits = 8 * bytes.len() as u32;
            let width = 1 + width_seed % bits.min(64);
            let lo = lo_seed % (bits - width + 1);
            proptest::prop_assert_eq!(extract_bits(&bytes, lo, width), reference_extract(&bytes, lo, width));
            let mut written = bytes.clone();
            insert_bits(&mut written, lo, width, value);
            let mask = if width == 64 { u64::MAX } else { (1 << width) - 1 };
            proptest::prop_assert_eq!(reference_extract(&written, lo, width), value & mask);
            // Bits outside the range are untouched.
            for bit in (0..bits).filter(|b| *b < lo || *b >= lo + width) {
                proptest::prop_assert_eq!(
                    reference_extract(&written, bit, 1),
                    reference_extract(&bytes, bit, 1)
                );
            }
        }
    }

    #[test]
    fn split_fields_are_least_significant_part_first() {
        // A 40-bit address with its low 32 bits in word 1, high 8 in word 0.
        static F: FieldInfo = field(&[(32, 32), (0, 8)], &[], 0, (1 << 40) - 1);
        let mut bytes = [0u8; 8];
        write_stored(&mut bytes, &F, 0xAB_1234_5678);
        assert_eq!(bytes, [0xAB, 0, 0, 0, 0x78, 0x56, 0x34, 0x12]);
        assert_eq!(read_stored(&bytes, &F), 0xAB_1234_5678);
    }

    #[test]
    fn modifiers_chain_and_invert() {
        // A linear texture stride: bytes, minus 16, in units of 16.
        static F: FieldInfo = field(
            &[(110, 18)],
            &[Modifier::Minus(16), Modifier::Shr(4)],
            16,
            16 << 18,
        );
        assert_eq!(encode("T", &F, 16), Ok(0));
        assert_eq!(encode("T", &F, 1024), Ok(63));
        assert_eq!(decode(&F, 63), 1024);
        assert!(matches!(
            encode("T", &F, 1000),
            Err(PackError::NotMultiple { multiple: 16, .. })
        ));
        assert!(matches!(
            encode("T", &F, 0),
            Err(PackError::OutOfRange { min: 16, .. })
        ));
    }

    #[test]
    fn groups_store_the_maximum_as_zero() {
        static F: FieldInfo = field(&[(8, 5)], &[Modifier::Groups(8)], 8, 256);
        assert_eq!(encode("R", &F, 8), Ok(1));
        assert_eq!(encode("R", &F, 248), Ok(31));
        assert_eq!(encode("R", &F, 256), Ok(0));
        assert_eq!(decode(&F, 0), 256);
        assert_eq!(decode(&F, 3), 24);
        assert!(matches!(
            encode("R", &F, 12),
            Err(PackError::NotMultiple { multiple: 8, .. })
        ));
        assert!(matches!(
            encode("R", &F, 0),
            Err(PackError::OutOfRange { .. })
        ));
    }

    #[test]
    fn log2_requires_powers_of_two() {
        static F: FieldInfo = field(&[(20, 3)], &[Modifier::Log2], 1, 128);
        assert_eq!(encode("S", &F, 16), Ok(4));
        assert_eq!(decode(&F, 7), 128);
        assert!(matches!(
            encode("S", &F, 12),
            Err(PackError::NotPowerOfTwo { .. })
        ));
    }

    #[test]
    fn unknown_bits_are_reported_per_word() {
        let bytes = [0xff, 0, 0, 0, 0, 0, 0x80, 0];
        let covered = [0x0f, 0, 0, 0, 0, 0, 0, 0];
        let mut issues = Vec::new();
        unknown_bits(&bytes, &covered, &mut issues);
        assert_eq!(
            issues,
            vec![
                UnpackIssue::UnknownBits {
                    word: 0,
                    value: 0xff,
                    mask: 0xf0
                },
                UnpackIssue::UnknownBits {
                    word: 1,
                    value: 0x0080_0000,
                    mask: 0x0080_0000
                },
            ]
        );
    }

    #[test]
    fn a_conditional_field_applies_as_the_generated_code_says() {
        use crate::formats::{Layout, Texture};
        let info = <Texture as Format>::INFO;
        let stride = info.field("stride").unwrap();
        let depth = info.field("depth").unwrap();
        for (layout, value) in [(Layout::Linear, 0), (Layout::Twiddled, 1), (Layout::Gpu, 2)] {
            let bytes = Texture {
                layout,
                ..Texture::default()
            }
            .pack()
            .unwrap();
            let linear = layout == Layout::Linear;
            assert_eq!(info.applies(stride, &bytes), linear, "{layout:?}");
            assert_eq!(info.applies(depth, &bytes), !linear, "{layout:?}");
            assert_eq!(info.field("layout").unwrap().logical(&bytes), value);
        }
        let e = EnumInfo::by_name("Layout").unwrap();
        assert_eq!(e.value_of("Gpu"), Some(2));
        assert_eq!(e.variant_of(1), Some("Twiddled"));
        assert_eq!(e.variant_of(9), None);
    }
}
