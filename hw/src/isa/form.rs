//! How an instruction form is described.
//!
//! A [`Form`] is one row of the instruction table: the opcode bits that
//! identify it (a mask and the value those bits must hold), its length
//! (fixed, or short/long chosen by a length bit), the flags that print as
//! mnemonic suffixes (`.sat`) and its operands, each a [`Kind`] that says
//! where its bits are and what they mean. Encoding, decoding, printing and
//! parsing are all driven by this description (see `codec.rs` and
//! `text.rs`); nothing about an instruction's bits is written down twice.

use super::bits::Bits;
use super::operand::Size;

/// How long an instruction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    /// Always this many bytes.
    Fixed(u8),
    /// `short` bytes, or `long` bytes when the length bit is set. The
    /// short form is the long form cut off: every bit past the short
    /// length reads as zero, so the encoder picks the long form exactly
    /// when a tail bit is needed.
    Toggle {
        /// Short length in bytes.
        short: u8,
        /// Long length in bytes.
        long: u8,
        /// The bit that selects the long form.
        bit: u8,
    },
}

impl Length {
    /// The longest encoding, in bytes.
    pub const fn max_bytes(&self) -> usize {
        match self {
            Length::Fixed(n) => *n as usize,
            Length::Toggle { long, .. } => *long as usize,
        }
    }
}

/// Which destination sizes an ALU destination field may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DstSizes {
    /// Always 16-bit; the size bit is not part of the field.
    Only16,
    /// Always 32-bit; the size bit is an opcode bit.
    Only32,
    /// 16 or 32 bits, chosen by the size bit.
    Sized,
    /// 16, 32 or 64 bits (integer add/multiply-add).
    Sized64,
    /// Two consecutive registers of 16 or 32 bits, chosen by the size bit
    /// (`simd_matrix_fmadd`), decoded as a [`Value::Pair`].
    ///
    /// [`Value::Pair`]: super::operand::Value::Pair
    Paired,
}

/// How an ALU source field is laid out and which modifiers it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SrcClass {
    /// Value and 4-bit type only (bit operations, compares, converts).
    Plain,
    /// A 32-bit float source: immediates are float8; abs and neg bits
    /// follow the type nibble.
    Float,
    /// A 16-bit float source: 3-bit type (16-bit registers only), then
    /// abs and neg.
    Half,
    /// An integer source with a sign-extension bit; 64-bit registers
    /// allowed.
    Int,
    /// Value and 4-bit type, no modifiers, 64-bit registers allowed (the
    /// subgroup reductions).
    Wide,
    /// A float source whose register is two consecutive registers of the
    /// type's size (a [`Value::Pair`]; uniforms and immediates are
    /// single), with abs and neg at `modifiers` (`simd_matrix_fmadd`).
    ///
    /// [`Value::Pair`]: super::operand::Value::Pair
    Paired {
        /// The abs bit; neg is the bit above.
        modifiers: u8,
    },
}

/// How many registers a register run has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// Always this many.
    Fixed(u8),
    /// One per set bit of a component mask.
    Mask(Bits),
    /// A channel count where 0 means 4.
    Channels(Bits),
    /// Three plane coefficients per channel (ldcf); 0 channels means 4.
    Coefficients(Bits),
    /// Texture coordinates: as many 32-bit registers as the dimension
    /// field needs.
    Coords(Bits),
    /// A block store's coordinates: with the `explicit` bit set, one
    /// register each for x, y and (for the 2D array dimensions, plain and
    /// multisampled) the layer; else one (the layer).
    BlockCoords {
        /// The explicit-coordinates bit.
        explicit: u8,
        /// The dimension field.
        dim: Bits,
    },
    /// An asynchronous copy's descriptor: three words for a 1D copy, five
    /// for a 2D one, chosen by this bit.
    Copy(u8),
    /// A texture instruction's compare/offset registers: the depth-compare
    /// reference and/or the packed texel offsets, chosen by the compare
    /// and offset bits; one register when only one (or neither) is set.
    CompareOffset {
        /// The depth-compare bit.
        compare: u8,
        /// The texel-offset bit.
        offset: u8,
    },
    /// An atomic's data: one register, or two (the new value, then the
    /// value compared) when the operation field says compare-exchange.
    AtomicData(Bits),
    /// Depth (two halves) and/or stencil (one half, right after the
    /// depth), chosen by the z and s bits; applegpu prints z+s as three
    /// halves (Mesa reserves a fourth to keep the run aligned).
    DepthStencil {
        /// The depth-present bit.
        z: u8,
        /// The stencil-present bit.
        s: u8,
    },
}

/// The width of the registers in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wide {
    /// Always this size.
    Fixed(Size),
    /// 32-bit when this bit is set, else 16-bit.
    Bit(u8),
    /// 16-bit when this bit is set, else 32-bit (texture coordinates:
    /// bit 9 of Mesa's `coord` operand encoding).
    NarrowBit(u8),
}

/// What an operand is, where its bits are, and how it prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// ALU destination: cache hint at bit 7, size bit at 8, index at
    /// 9-14, two more index bits at `ext`.
    Dst {
        /// The two high index bits.
        ext: u8,
        /// Allowed sizes.
        sizes: DstSizes,
    },
    /// ALU source at `at`: index at `at..at+6`, type at `at+6`, modifiers
    /// after the type, two high index bits at `ext`.
    Src {
        /// The lowest bit.
        at: u8,
        /// The two high index bits.
        ext: u8,
        /// Layout and modifiers.
        class: SrcClass,
    },
    /// Compare-select result source: index at `at..at+6`, 3-bit type at
    /// `at+6`, two high index bits at `ext`; 16 or 32 bits as the
    /// destination.
    CmpSel {
        /// The lowest bit.
        at: u8,
        /// The two high index bits.
        ext: u8,
    },
    /// An unsigned number, printed in decimal.
    Uint(Bits),
    /// A signed number (two's complement over the field's width), printed
    /// in decimal.
    Int(Bits),
    /// An operation named inside the mnemonic: the form's mnemonic holds
    /// `{}` where the name goes (`simd_{}` prints `simd_fadd`). Only the
    /// named values belong to the form; decoding tries the next form for
    /// the others.
    OpName(Bits, &'static [(u32, &'static str)]),
    /// A named value; unnamed values print as numbers.
    Enum(Bits, &'static [(u32, &'static str)]),
    /// A raw bit field printed as `0b...` with all its digits.
    Binary(Bits),
    /// A last operand printed like [`Kind::Binary`], left out of the text
    /// when zero (`mov_imm`'s kill-helpers bit, `0b1`).
    Trailing(Bits),
    /// The four-entry truth table of `bitop`, printed entry 0 first.
    TruthTable(Bits),
    /// A component mask printed as `xyzw` letters (`0` when empty).
    Mask(Bits),
    /// A special register number, printed `sr80 (name)`.
    Sr(Bits),
    /// A signed 32-bit byte offset from the instruction's own address.
    Target(Bits),
    /// A left shift printed as a trailing `lsl N`, omitted when zero.
    Shift(Bits),
    /// A bit-field width `m`, printed as a trailing `mask 0x...` of
    /// `(1 << m) - 1`, omitted when zero (meaning all 32 bits).
    FieldMask(Bits),
    /// The implicit `r0l` of the exec-mask instructions, with its cache
    /// hint bit.
    R0l {
        /// The cache-hint bit.
        cache: u8,
    },
    /// Consecutive registers.
    Regs {
        /// Index of the first register.
        value: Bits,
        /// `true`: the index counts 32-bit registers rather than halves.
        whole: bool,
        /// Register width.
        wide: Wide,
        /// How many.
        count: Count,
        /// A discard-hint bit, printed `.discard`.
        discard: Option<u8>,
    },
    /// Consecutive 32-bit registers or uniforms, the index counting whole
    /// registers (an asynchronous copy's descriptor).
    Words {
        /// Index of the first register or uniform.
        value: Bits,
        /// Set: uniforms; clear: registers.
        uniform: u8,
        /// How many.
        count: Count,
    },
    /// A 64-bit base address in a register or uniform pair.
    Pair {
        /// Index (halves) of the pair.
        value: Bits,
        /// Set: a uniform pair; clear: a register pair.
        uniform: u8,
    },
    /// An immediate or a register, chosen by a flag bit.
    ImmOrReg {
        /// The field holding the immediate or the register index.
        value: Bits,
        /// The flag bit.
        flag: u8,
        /// Whether a set flag means immediate.
        set_means_imm: bool,
        /// Whether the immediate is signed (two's complement of the
        /// field's width).
        signed: bool,
        /// The register's width (a width bit is read and written only
        /// when the operand is a register).
        reg: Wide,
    },
    /// Threadgroup memory base: a 16-bit register, nothing, or a 16-bit
    /// uniform, per a 2-bit type.
    TgBase {
        /// The index bits.
        value: Bits,
        /// The 2-bit type.
        ty: Bits,
    },
    /// Texture handle: state index `tsN`, a 16-bit register, or (bindless)
    /// a 32-bit register offset from a uniform base.
    Texture {
        /// The index bits.
        value: Bits,
        /// The 2-bit type.
        ty: Bits,
    },
    /// Sampler handle: state index `ssN` or a 16-bit register.
    Sampler {
        /// The index bits.
        value: Bits,
        /// The type bit.
        ty: u8,
    },
    /// A uniform pair whose first half is the field times 4: the heap base
    /// of the texture and sampler state stores.
    UniformBase(Bits),
    /// Bindless heap base: a uniform pair when the texture type is
    /// bindless, else `None`.
    TexBase {
        /// The base, in units of two uniforms.
        value: Bits,
        /// The texture type field.
        texture_ty: Bits,
    },
    /// Level-of-detail source, meaning chosen by the LOD mode.
    Lod {
        /// The index bits.
        value: Bits,
        /// The LOD mode field.
        mode: Bits,
        /// The dimension field (gradients need one pair per axis).
        dim: Bits,
    },
    /// A coefficient register `cfN` of the varying interpolator.
    Cf(Bits),
}

impl Kind {
    /// The field of a kind that is just a number in a bit field (its
    /// meaning only changes how it prints).
    pub const fn number_bits(&self) -> Option<&Bits> {
        match self {
            Kind::Uint(bits)
            | Kind::Int(bits)
            | Kind::OpName(bits, _)
            | Kind::Enum(bits, _)
            | Kind::Binary(bits)
            | Kind::Trailing(bits)
            | Kind::TruthTable(bits)
            | Kind::Mask(bits)
            | Kind::Sr(bits)
            | Kind::Shift(bits)
            | Kind::FieldMask(bits)
            | Kind::Cf(bits) => Some(bits),
            _ => None,
        }
    }

    /// Whether the operand may be left out of the text when zero.
    pub const fn optional(&self) -> bool {
        matches!(
            self,
            Kind::Shift(_) | Kind::FieldMask(_) | Kind::Trailing(_)
        )
    }
}

/// One instruction form: a row of the instruction table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Form {
    /// The mnemonic, as the disassembler prints it.
    pub mnemonic: &'static str,
    /// The bits that identify the form (opcode and constant bits)...
    pub mask: u128,
    /// ...and the value they hold.
    pub value: u128,
    /// The length.
    pub length: Length,
    /// Single-bit flags printed as mnemonic suffixes (`.sat`).
    pub modifiers: &'static [(u8, &'static str)],
    /// The operands, in printed order.
    pub operands: &'static [Kind],
}
