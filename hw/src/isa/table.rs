//! The instruction table: every form the stack knows, in decode order.
//!
//! Decoding takes the first row whose identifying bits match, so order
//! matters only where rows share opcode bits. The order is decided here:
//!
//! - `bitop` (0x7E) has aliases keyed on its truth table: `mov` and `not`
//!   (which also need the second source to be the immediate 0) come before
//!   `and`/`or`/`xor`/`nand`/`nor`/`xnor`, and those before the generic
//!   `bitop TT, ...`, which takes every other table.
//! - `iadd`/`isub` and `imadd`/`imsub` differ only in bit 27; each row
//!   pins it, so their order is free.
//! - The conditional exec-mask family (0x52 integer, 0x42 float) is split by
//!   the operation in bits 9-10 (`if`, `else`, `while`, and `pop_exec` for
//!   the integer opcode); each row pins those bits.
//! - The float unary family (0x0A) is split by the operation in bits
//!   28-33; an operation with no row does not decode.
//! - `uniform_store` shares 0x45 with `device_store`; the two rows pin bits
//!   27-29 to different values. Every other 0x05/0x45 word is applegpu's
//!   `device_load.TODO`/`device_store.TODO` (rows after the known ones,
//!   with the bits those pin as operands).
//! - 0x6F with bit 15 clear is a named shuffle when bits 26-27, 38-39 and
//!   47 say which; else `simd_matrix_fmadd16/32` when bits 27 and 63 are
//!   set (bit 26 the width); else the generic `simd_shuf_op`.
//! - `no_var` is the exact word 0x80000051 (as Mesa emits it); `st_var`
//!   and `st_var_final` pin bits 0-9.
//! - 0x3E is `convert` with bit 15 set; with it clear, bits 26-27 choose
//!   `intl` (0, with bits 38-39 clear) or `bitrev`/`popcount`/`ffs` (1-3,
//!   with bits 28-39 clear).
//! - `atomic` is identified by bits 0-5 (0x15) and its constant bits 26,
//!   31 and 46; the state stores by bits 0-7 (0xED texture, 0xAD sampler)
//!   and bit 20.
//! - 0xB5 is `stack_adjust` when bits 16-19 are 1, bit 25 clear and the
//!   component mask (52-55) empty (Mesa's encoding; applegpu reads it as
//!   a `stack_store` of nothing), else `stack_store`; 0x35 is
//!   `stack_load` (applegpu's `stack_get_ptr` pins bits of 0x35 that
//!   applegpu's own decoder gives to `stack_load` first, so it is not a
//!   row).
//! - 0x75 is `stack_unmap`/`stack_map` with bits 16-19 = 0/1 and the
//!   constant bits applegpu's `map` pins; every other 0x75 word with bit
//!   10 clear and bit 47 set is the generic `stack_map_op`.
//!
//! A row's operands are listed in the order applegpu prints them. Where
//! applegpu prints two different values with one name (the LOD modes
//! `auto_lod_bias` from a uniform or a register, the interpolation modes
//! `sample` by immediate or register), this table gives them distinct
//! names so that text means one encoding.

use super::bits::{Bits, Range};
use super::form::{Count, DstSizes, Form, Kind, Length, SrcClass, Wide};
use super::operand::Size;

macro_rules! b {
    ($($lo:literal : $width:literal),+) => {
        Bits(&[$(Range { lo: $lo, width: $width }),+])
    };
}

macro_rules! table {
    ($($(#[doc = $doc:literal])* $op:ident => $form:expr,)*) => {
        /// An instruction form; the discriminant is the row in [`FORMS`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Op {
            $($(#[doc = $doc])* $op,)*
        }

        impl Op {
            /// Every form, in decode order.
            pub const ALL: &'static [Op] = &[$(Op::$op,)*];

            /// The form's table row.
            pub fn form(self) -> &'static Form {
                &FORMS[self as usize]
            }

            /// The mnemonic.
            pub fn mnemonic(self) -> &'static str {
                self.form().mnemonic
            }
        }

        /// The instruction table, in decode order.
        pub static FORMS: &[Form] = &[$($form,)*];
    };
}

const fn form(
    mnemonic: &'static str,
    mask: u128,
    value: u128,
    length: Length,
    modifiers: &'static [(u8, &'static str)],
    operands: &'static [Kind],
) -> Form {
    Form {
        mnemonic,
        mask,
        value,
        length,
        modifiers,
        operands,
    }
}

const fn fixed(bytes: u8) -> Length {
    Length::Fixed(bytes)
}

const fn toggle(short: u8, long: u8, bit: u8) -> Length {
    Length::Toggle { short, long, bit }
}

const SAT: &[(u8, &str)] = &[(6, "sat")];
const NONE: &[(u8, &str)] = &[];
/// `texture_sample`'s LOD query: bit 31 of the two-bit field at 30
/// (Mesa's `q2`, 2 for `nir_texop_lod`, else 0).
const QUERY_LOD: &[(u8, &str)] = &[(31, "query_lod")];

/// Integer compare conditions (compare-select).
pub const INT_CONDITIONS: &[(u32, &str)] = &[
    (0, "ueq"),
    (1, "ult"),
    (2, "ugt"),
    (4, "seq"),
    (5, "slt"),
    (6, "sgt"),
];
/// Float compare conditions (compare-select). `ltn`/`gtn` return the
/// non-NaN operand when one is NaN (Mesa's fmin/fmax).
pub const FLOAT_CONDITIONS: &[(u32, &str)] = &[
    (0, "eq"),
    (1, "lt"),
    (2, "gt"),
    (3, "ltn"),
    (5, "gte"),
    (6, "lte"),
    (7, "gtn"),
];
/// Integer exec-mask conditions: condition | invert << 3.
pub const INT_EXEC_CONDITIONS: &[(u32, &str)] = &[
    (0, "ueq"),
    (1, "ult"),
    (2, "ugt"),
    (4, "seq"),
    (5, "slt"),
    (6, "sgt"),
    (8, "nueq"),
    (9, "ugte"),
    (10, "ulte"),
    (12, "nseq"),
    (13, "sgte"),
    (14, "slte"),
];
/// Float exec-mask conditions: condition | invert << 3.
pub const FLOAT_EXEC_CONDITIONS: &[(u32, &str)] = &[
    (0, "eq"),
    (1, "lt"),
    (2, "gt"),
    (3, "ltn"),
    (5, "gte"),
    (6, "lte"),
    (7, "gtn"),
    (8, "neq"),
    (9, "nlt"),
    (10, "ngt"),
    (11, "nltn"),
    (13, "ngte"),
    (14, "nlte"),
    (15, "ngtn"),
];
/// `convert` modes.
pub const CONVERT_MODES: &[(u32, &str)] = &[
    (0, "u8_to_f"),
    (1, "s8_to_f"),
    (4, "f_to_u16"),
    (5, "f_to_s16"),
    (6, "u16_to_f"),
    (7, "s16_to_f"),
    (8, "f_to_u32"),
    (9, "f_to_s32"),
    (10, "u32_to_f"),
    (11, "s32_to_f"),
];
/// `convert` rounding modes.
pub const ROUNDING: &[(u32, &str)] = &[(0, "rtz"), (1, "rte")];
/// Image-store rounding modes.
pub const STORE_ROUNDING: &[(u32, &str)] = &[(0, "rte"), (1, "rtz")];
/// Memory and tilebuffer element formats.
pub const FORMATS: &[(u32, &str)] = &[
    (0, "i8"),
    (1, "i16"),
    (2, "i32"),
    (3, "f16"),
    (4, "u8norm"),
    (5, "s8norm"),
    (6, "u16norm"),
    (7, "s16norm"),
    (8, "rgb10a2"),
    (10, "srgba8"),
    (12, "rg11b10f"),
    (13, "rgb9e5"),
    // applegpu's names; what the hardware does with them is not known
    // (the simulator refuses them).
    (14, "rg11b10f.rtz"),
    (15, "rgb9e5.rtz"),
];
/// How a register offset is extended to 64 bits.
pub const OFFSET_SIGNEDNESS: &[(u32, &str)] = &[(0, "signed"), (1, "unsigned")];
/// Texture dimensions.
pub const DIMENSIONS: &[(u32, &str)] = &[
    (0, "tex_1d"),
    (1, "tex_1d_array"),
    (2, "tex_2d"),
    (3, "tex_2d_array"),
    (4, "tex_2d_ms"),
    (5, "tex_3d"),
    (6, "tex_cube"),
    (7, "tex_cube_array"),
    (8, "tex_2d_ms_array"),
];
/// Texture level-of-detail modes.
pub const LOD_MODES: &[(u32, &str)] = &[
    (0, "auto_lod"),
    (1, "auto_lod_bias_uniform"),
    (2, "lod_min_uniform"),
    (4, "lod_grad"),
    (5, "auto_lod_bias"),
    (6, "lod_min"),
    (9, "auto_lod_bias_min_uniform"),
    (12, "lod_grad_min"),
    (13, "auto_lod_bias_min"),
];
/// Texture gather modes.
pub const GATHER: &[(u32, &str)] = &[
    (0, "none"),
    (2, "gather_r"),
    (6, "gather_g"),
    (10, "gather_b"),
    (14, "gather_a"),
    (3, "gather_depth"),
];
/// Varying interpolation modes.
pub const INTERPOLATION: &[(u32, &str)] = &[
    (0, "center"),
    (1, "sample"),
    (2, "centroid"),
    (3, "sample_reg"),
];
/// Device atomic operations (`atomic`, bits 6-9).
pub const ATOMIC_OPS: &[(u32, &str)] = &[
    (0, "add"),
    (1, "sub"),
    (2, "xchg"),
    (ATOMIC_CMPXCHG as u32, "cmpxchg"),
    (4, "umin"),
    (5, "imin"),
    (6, "umax"),
    (7, "imax"),
    (8, "and"),
    (9, "or"),
    (10, "xor"),
];
/// The compare-exchange atomic, which takes two data registers.
pub const ATOMIC_CMPXCHG: u64 = 3;
/// Subgroup reduction and prefix operations (Mesa's `simd_op`: bit 28,
/// bits 38-40, bit 47), named as applegpu names them in its mnemonics
/// (`simd_fadd`, `quad_prefix_iadd`, `simd_min.u`).
pub const SUBGROUP_OPS: &[(u32, &str)] = &[
    (0b00000, "and"),
    (0b00001, "fadd"),
    (0b00010, "or"),
    (0b00011, "fmul"),
    (0b00100, "xor"),
    (0b00101, "min.f"),
    (0b00111, "max.f"),
    (0b10000, "iadd"),
    (0b10100, "min.s"),
    (0b10110, "max.s"),
    (0b11100, "min.u"),
    (0b11110, "max.u"),
];
/// What `zs_emit` writes.
pub const DEPTH_STENCIL: &[(u32, &str)] = &[(0, "none"), (1, "z"), (2, "s"), (3, "zs")];

const fn dst(ext: u8, sizes: DstSizes) -> Kind {
    Kind::Dst { ext, sizes }
}

const fn src(at: u8, ext: u8, class: SrcClass) -> Kind {
    Kind::Src { at, ext, class }
}

const FADD_OPERANDS: &[Kind] = &[
    dst(44, DstSizes::Sized),
    src(16, 42, SrcClass::Float),
    src(28, 40, SrcClass::Float),
];
const HADD_OPERANDS: &[Kind] = &[
    dst(44, DstSizes::Only16),
    src(16, 42, SrcClass::Half),
    src(28, 40, SrcClass::Half),
];
const UNARY_FLOAT: &[Kind] = &[dst(44, DstSizes::Sized), src(16, 42, SrcClass::Float)];
const BITOP_BINARY: &[Kind] = &[
    dst(44, DstSizes::Sized),
    src(16, 42, SrcClass::Plain),
    src(28, 40, SrcClass::Plain),
];
const BITOP_UNARY: &[Kind] = &[dst(44, DstSizes::Sized), src(16, 42, SrcClass::Plain)];
const BITFIELD: &[Kind] = &[
    dst(60, DstSizes::Sized),
    src(16, 58, SrcClass::Plain),
    src(28, 56, SrcClass::Plain),
    src(40, 54, SrcClass::Plain),
    Kind::FieldMask(b!(38:2, 50:2, 63:1)),
];
const IADD: &[Kind] = &[
    dst(44, DstSizes::Sized64),
    src(16, 42, SrcClass::Int),
    src(28, 40, SrcClass::Int),
    Kind::Shift(b!(39:1, 52:2)),
];
const IMADD: &[Kind] = &[
    dst(60, DstSizes::Sized64),
    src(16, 58, SrcClass::Int),
    src(28, 56, SrcClass::Int),
    src(40, 54, SrcClass::Int),
    Kind::Shift(b!(39:1, 52:2)),
];
const ICMP_EXEC: &[Kind] = &[
    Kind::R0l { cache: 7 },
    Kind::Enum(b!(13:3, 8:1), INT_EXEC_CONDITIONS),
    src(16, 42, SrcClass::Plain),
    src(28, 40, SrcClass::Plain),
    Kind::Uint(b!(11:2)),
];
const FCMP_EXEC: &[Kind] = &[
    Kind::R0l { cache: 7 },
    Kind::Enum(b!(13:3, 8:1), FLOAT_EXEC_CONDITIONS),
    src(16, 42, SrcClass::Float),
    src(28, 40, SrcClass::Float),
    Kind::Uint(b!(11:2)),
];
const DEVICE_MEMORY: &[Kind] = &[
    Kind::Uint(b!(30:1)),
    Kind::Enum(b!(7:3, 48:1), FORMATS),
    Kind::Mask(b!(52:4)),
    Kind::Regs {
        value: b!(10:6, 40:2),
        whole: false,
        wide: Wide::Bit(49),
        count: Count::Mask(b!(52:4)),
        discard: None,
    },
    Kind::Pair {
        value: b!(16:4, 36:4),
        uniform: 27,
    },
    Kind::ImmOrReg {
        value: b!(20:4, 32:4, 56:8),
        flag: 24,
        set_means_imm: true,
        signed: true,
        reg: Wide::Fixed(Size::S32),
    },
    Kind::Enum(b!(25:1), OFFSET_SIGNEDNESS),
    Kind::Shift(b!(42:2)),
];
const DEVICE_STORE: &[Kind] = &[
    DEVICE_MEMORY[0],
    DEVICE_MEMORY[1],
    DEVICE_MEMORY[2],
    DEVICE_MEMORY[3],
    DEVICE_MEMORY[4],
    DEVICE_MEMORY[5],
    DEVICE_MEMORY[6],
    DEVICE_MEMORY[7],
    Kind::Uint(b!(44:1)),
];
const UNIFORM_STORE: &[Kind] = &[
    Kind::Uint(b!(25:2)),
    Kind::Enum(b!(7:2), FORMATS),
    Kind::Mask(b!(52:4)),
    Kind::Uint(b!(44:3)),
    DEVICE_MEMORY[3],
    Kind::ImmOrReg {
        value: b!(20:4, 32:4, 56:8),
        flag: 24,
        set_means_imm: true,
        signed: false,
        reg: Wide::Fixed(Size::S32),
    },
    Kind::Shift(b!(42:2)),
];
const THREADGROUP_MEMORY: &[Kind] = &[
    Kind::Enum(b!(24:4), FORMATS),
    Kind::Mask(b!(36:4)),
    Kind::Regs {
        value: b!(9:6, 60:2),
        whole: false,
        wide: Wide::Bit(8),
        count: Count::Mask(b!(36:4)),
        discard: None,
    },
    Kind::TgBase {
        value: b!(16:6, 58:2),
        ty: b!(22:2),
    },
    Kind::ImmOrReg {
        value: b!(28:6, 48:10),
        flag: 34,
        set_means_imm: true,
        signed: true,
        reg: Wide::Fixed(Size::S16),
    },
];
const TEXTURE: &[Kind] = &[
    Kind::Uint(b!(23:1)),
    Kind::Binary(b!(43:4)),
    Kind::Uint(b!(63:1)),
    Kind::Enum(b!(86:5), GATHER),
    Kind::Mask(b!(48:4)),
    Kind::Binary(b!(69:2)),
    Kind::Regs {
        value: b!(9:6, 72:2),
        whole: false,
        wide: Wide::Bit(8),
        count: Count::Mask(b!(48:4)),
        discard: None,
    },
    Kind::TexBase {
        value: b!(64:5),
        texture_ty: b!(38:2),
    },
    Kind::Texture {
        value: b!(32:6, 78:2),
        ty: b!(38:2),
    },
    Kind::Sampler {
        value: b!(56:6, 92:2),
        ty: 62,
    },
    Kind::Enum(b!(40:3, 71:1), DIMENSIONS),
    Kind::Regs {
        value: b!(16:6, 74:2),
        whole: false,
        wide: Wide::NarrowBit(47),
        count: Count::Coords(b!(40:3, 71:1)),
        discard: Some(22),
    },
    Kind::Enum(b!(52:4), LOD_MODES),
    Kind::Lod {
        value: b!(24:6, 76:2),
        mode: b!(52:4),
        dim: b!(40:3, 71:1),
    },
    Kind::Uint(b!(91:1)),
    Kind::Regs {
        value: b!(80:6, 94:2),
        whole: false,
        wide: Wide::Fixed(Size::S32),
        count: Count::CompareOffset {
            compare: 23,
            offset: 91,
        },
        discard: None,
    },
];
const TILE: &[Kind] = &[
    Kind::Regs {
        value: b!(9:6, 60:2),
        whole: false,
        wide: Wide::Bit(8),
        count: Count::Mask(b!(36:4)),
        discard: None,
    },
    Kind::Enum(b!(24:4), FORMATS),
    Kind::Uint(b!(35:1)),
    Kind::Mask(b!(36:4)),
    Kind::Uint(b!(28:7, 40:2)),
    Kind::ImmOrReg {
        value: b!(42:6, 56:2),
        flag: 22,
        set_means_imm: false,
        signed: false,
        reg: Wide::Fixed(Size::S16),
    },
    Kind::Regs {
        value: b!(16:6, 58:2),
        whole: false,
        wide: Wide::Fixed(Size::S32),
        count: Count::Fixed(1),
        discard: None,
    },
    Kind::Uint(b!(55:1)),
];
const ITER_TAIL: [Kind; 5] = [
    Kind::Enum(b!(48:2), INTERPOLATION),
    Kind::Uint(b!(32:8)),
    Kind::Uint(b!(22:1)),
    Kind::Uint(b!(46:1)),
    Kind::Uint(b!(52:1)),
];
const ITER_DST: Kind = Kind::Regs {
    value: b!(9:6, 56:2),
    whole: false,
    wide: Wide::Bit(8),
    count: Count::Channels(b!(30:2)),
    discard: None,
};
const ST_VAR: &[Kind] = &[
    Kind::Uint(b!(31:1)),
    Kind::Regs {
        value: b!(10:5, 24:2),
        whole: true,
        wide: Wide::Fixed(Size::S32),
        count: Count::Fixed(1),
        discard: None,
    },
    Kind::ImmOrReg {
        value: b!(16:6, 26:2),
        flag: 23,
        set_means_imm: true,
        signed: false,
        reg: Wide::Fixed(Size::S16),
    },
];
const CALL_REG: &[Kind] = &[Kind::Regs {
    value: b!(9:7),
    whole: true,
    wide: Wide::Fixed(Size::S32),
    count: Count::Fixed(1),
    discard: None,
}];
const FUNOP_MASK: u128 = 0x3F | 0x3FFF << 28;
const BITOP_MASK: u128 = 0x807F | 3 << 26 | 3 << 38;
const BITOP_B_ZERO: u128 = 0x3FF << 28 | 3 << 40;
const SHIFT_MASK: u128 = 0x0C00_807F;
/// `atomic`: the operation, the wait group, the destination (`0` for
/// none), base and index as the device loads have them, the data, the
/// coherency bits (Mesa sets 44 and, keyed to the GPU, 45).
const ATOMIC: &[Kind] = &[
    Kind::Enum(b!(6:4), ATOMIC_OPS),
    Kind::Uint(b!(30:1)),
    Kind::ImmOrReg {
        value: b!(10:6, 40:2),
        flag: 47,
        set_means_imm: false,
        signed: false,
        reg: Wide::Fixed(Size::S32),
    },
    DEVICE_MEMORY[4],
    DEVICE_MEMORY[5],
    DEVICE_MEMORY[6],
    Kind::Regs {
        value: b!(48:8),
        whole: false,
        wide: Wide::Fixed(Size::S32),
        count: Count::AtomicData(b!(6:4)),
        discard: None,
    },
    Kind::Uint(b!(44:2)),
    Kind::Uint(b!(26:1)),
    Kind::Uint(b!(31:1)),
    Kind::Uint(b!(46:1)),
];
/// `threadgroup_atomic`: the operation, the destination (`0` for none; 16
/// or 32 bits), base and index as the threadgroup loads have them, the
/// data (two registers for compare-exchange), then four fields of unknown
/// meaning (Mesa: 0, 2, 0x80, 0; applegpu saw 0x81 for compare-exchange).
const THREADGROUP_ATOMIC: &[Kind] = &[
    Kind::Enum(b!(24:4), ATOMIC_OPS),
    Kind::ImmOrReg {
        value: b!(9:6, 60:2),
        flag: 38,
        set_means_imm: false,
        signed: false,
        reg: Wide::Bit(8),
    },
    THREADGROUP_MEMORY[3],
    THREADGROUP_MEMORY[4],
    Kind::Regs {
        value: b!(64:8),
        whole: false,
        wide: Wide::Fixed(Size::S32),
        count: Count::AtomicData(b!(24:4)),
        discard: None,
    },
    Kind::Uint(b!(6:2)),
    Kind::Uint(b!(35:3)),
    Kind::Uint(b!(40:8)),
    Kind::Uint(b!(72:8)),
];
/// The stack's byte offset: a signed 16-bit immediate or a 32-bit
/// register, as the device loads' index.
const STACK_OFFSET: Kind = DEVICE_MEMORY[5];
/// `stack_load`: registers, format, three fields of unknown meaning (Mesa:
/// 1, 0 and, after the mask, 4), the mask, the offset, the wait group.
const STACK_LOAD: &[Kind] = &[
    DEVICE_MEMORY[3],
    Kind::Enum(b!(8:2, 50:2), FORMATS),
    Kind::Uint(b!(26:1)),
    Kind::Uint(b!(36:3)),
    Kind::Mask(b!(52:4)),
    Kind::Uint(b!(44:3)),
    STACK_OFFSET,
    Kind::Uint(b!(30:1)),
];
/// `stack_store`: `stack_load`'s operands with the registers after the
/// fields, as applegpu prints them.
const STACK_STORE: &[Kind] = &[
    STACK_LOAD[1],
    STACK_LOAD[2],
    STACK_LOAD[3],
    STACK_LOAD[4],
    STACK_LOAD[5],
    STACK_LOAD[0],
    STACK_OFFSET,
    STACK_LOAD[7],
];
/// `stack_adjust`: fields of unknown meaning (Mesa: 0, 1, 2, 0, 0), then
/// the adjustment in 32-bit words (an immediate, or applegpu's
/// `TODO.stack_adjust2` register form).
const STACK_ADJUST: &[Kind] = &[
    Kind::Uint(b!(8:2)),
    Kind::Uint(b!(26:1)),
    Kind::Uint(b!(36:3)),
    Kind::Uint(b!(44:3)),
    Kind::Uint(b!(50:2)),
    STACK_OFFSET,
];
/// The fields `stack_map` and `stack_unmap` pin: 0x75, bits 10 and 31
/// clear, bits 24-25 = 1, 27-29 clear, 47 set; bits 16-19 the operation.
const STACK_MAP_MASK: u128 = 0xFF | 1 << 10 | 0xF << 16 | 3 << 24 | 7 << 27 | 1 << 31 | 1 << 47;
const STACK_MAP_VALUE: u128 = 0x75 | 1 << 24 | 1 << 47;
/// `stack_map`/`stack_unmap`: which target, the 32-bit register written
/// or read, the block register number, applegpu's q1-q5 (Mesa: 0, 0, 0,
/// 0b10000, 0b00010000) and bit 26 (set by Mesa, not read by applegpu).
const STACK_MAP: &[Kind] = &[
    Kind::Enum(b!(36:1), &[(0, "target0"), (1, "target1")]),
    Kind::Regs {
        value: b!(11:5, 40:2),
        whole: true,
        wide: Wide::Fixed(Size::S32),
        count: Count::Fixed(1),
        discard: None,
    },
    Kind::Int(b!(20:4, 32:4, 56:8)),
    Kind::Binary(b!(8:2)),
    Kind::Binary(b!(30:1)),
    Kind::Binary(b!(37:3)),
    Kind::Binary(b!(42:5)),
    Kind::Binary(b!(48:8)),
    Kind::Uint(b!(26:1)),
];
/// `stack_map_op`: the operation and the fields `stack_map` pins, then
/// `stack_map`'s operands.
const STACK_MAP_OP: &[Kind] = &[
    Kind::Uint(b!(16:4)),
    Kind::Uint(b!(24:2)),
    Kind::Uint(b!(27:3)),
    Kind::Uint(b!(31:1)),
    STACK_MAP[0],
    STACK_MAP[1],
    STACK_MAP[2],
    STACK_MAP[3],
    STACK_MAP[4],
    STACK_MAP[5],
    STACK_MAP[6],
    STACK_MAP[7],
    STACK_MAP[8],
];
/// The integer unary family (0x3E with bit 15 clear): the operation in
/// bits 26-27, bits 28-39 zero.
const INTUNOP_MASK: u128 = 0x807F | 3 << 26 | 0xFFF << 28;
/// `tex_state_store`/`sampler_state_store`: the state register, the
/// heap's uniform pair, the byte offset in the heap (an immediate or a
/// 32-bit register), the wait group.
const STATE_STORE: &[Kind] = &[
    Kind::Uint(b!(8:7)),
    Kind::UniformBase(b!(59:5)),
    Kind::ImmOrReg {
        value: b!(26:31),
        flag: 58,
        set_means_imm: true,
        signed: false,
        reg: Wide::Fixed(Size::S32),
    },
    Kind::Uint(b!(16:1)),
];
/// The subgroup reductions (0x6F with bit 15 set): the operation in the
/// mnemonic, bits 29-30 the window (quad or SIMD-group) and whether it is
/// a prefix; the other bits of 26-41 are zero.
const SUBGROUP: &[Kind] = &[
    Kind::OpName(b!(28:1, 38:3, 47:1), SUBGROUP_OPS),
    dst(44, DstSizes::Sized),
    src(16, 42, SrcClass::Wide),
];
const SUBGROUP_MASK: u128 =
    (0x7F | 1 << 15 | 0xFFFF << 26 | 1 << 47) & !(1 << 28 | 7 << 38 | 1 << 47);
/// The shuffles (0x6F with bit 15 clear): bit 26 the window (SIMD-group
/// when set), bits 38-39 the kind (index, xor, up, down), bit 47 rotate.
const SHUFFLE: &[Kind] = &[
    dst(44, DstSizes::Sized),
    src(16, 42, SrcClass::Plain),
    src(28, 40, SrcClass::Plain),
];
const SHUFFLE_MASK: u128 = 0x7F | 1 << 15 | 3 << 26 | 3 << 38 | 1 << 47;
/// `simd_matrix_fmadd16/32` (0x6F with bit 15 clear and bits 27 and 63
/// set; bit 26 the width): a destination and three float sources, each a
/// pair of registers (applegpu's layout; what they compute is not known).
const SIMD_MATRIX: &[Kind] = &[
    dst(60, DstSizes::Paired),
    src(16, 58, SrcClass::Paired { modifiers: 52 }),
    src(28, 56, SrcClass::Paired { modifiers: 38 }),
    src(40, 54, SrcClass::Paired { modifiers: 50 }),
];
const SIMD_MATRIX_MASK: u128 = 0x7F | 1 << 15 | 3 << 26 | 1 << 63;
const SIMD_MATRIX_VALUE: u128 = 0x6F | 1 << 27 | 1 << 63;
/// `async_load`/`async_store` (applegpu's names and layout; no compiler
/// output shows them): the copy's dimension, a 64-bit address pair, and
/// the copy's descriptor words (three for 1D, five for 2D).
const ASYNC_COPY: &[Kind] = &[
    Kind::Enum(b!(47:1), COPY_DIMENSIONS),
    Kind::Pair {
        value: b!(9:6),
        uniform: 8,
    },
    Kind::Words {
        value: b!(16:4, 36:4),
        uniform: 25,
        count: Count::Copy(47),
    },
];
const COPY_DIMENSIONS: &[(u32, &str)] = &[(0, "copy_1d"), (1, "copy_2d")];
/// applegpu's `device_load.TODO`: a `device_load` whose bits 26, 28-29,
/// 44-46 and 50-51 are not the values the known form pins, printed as
/// numbers after the known operands.
const DEVICE_LOAD_TODO: &[Kind] = &[
    DEVICE_MEMORY[0],
    DEVICE_MEMORY[1],
    DEVICE_MEMORY[2],
    DEVICE_MEMORY[3],
    DEVICE_MEMORY[4],
    DEVICE_MEMORY[5],
    DEVICE_MEMORY[6],
    DEVICE_MEMORY[7],
    Kind::Uint(b!(26:1)),
    Kind::Uint(b!(28:2)),
    Kind::Uint(b!(44:3)),
    Kind::Uint(b!(50:2)),
];
/// applegpu's `device_store.TODO`, the same for `device_store` (bits 26,
/// 28-29, 45-46 and 50-51).
const DEVICE_STORE_TODO: &[Kind] = &[
    DEVICE_STORE[0],
    DEVICE_STORE[1],
    DEVICE_STORE[2],
    DEVICE_STORE[3],
    DEVICE_STORE[4],
    DEVICE_STORE[5],
    DEVICE_STORE[6],
    DEVICE_STORE[7],
    DEVICE_STORE[8],
    Kind::Uint(b!(26:1)),
    Kind::Uint(b!(28:2)),
    Kind::Uint(b!(45:2)),
    Kind::Uint(b!(50:2)),
];
const fn shuffle(mnemonic: &'static str, simd: u128, kind: u128, rotate: u128) -> Form {
    form(
        mnemonic,
        SHUFFLE_MASK,
        0x6F | simd << 26 | kind << 38 | rotate << 47,
        fixed(6),
        NONE,
        SHUFFLE,
    )
}
/// The compare ballots: the condition (with its invert bit 47), the
/// sources as the exec-mask compares have them; bits 48-60 are 1 for the
/// SIMD-group form and 0 for the quad form.
const ICMP_BALLOT: &[Kind] = &[
    dst(44, DstSizes::Sized),
    Kind::Enum(b!(61:3, 47:1), INT_EXEC_CONDITIONS),
    src(16, 42, SrcClass::Plain),
    src(28, 40, SrcClass::Plain),
];
const FCMP_BALLOT: &[Kind] = &[
    dst(44, DstSizes::Sized),
    Kind::Enum(b!(61:3, 47:1), FLOAT_EXEC_CONDITIONS),
    src(16, 42, SrcClass::Float),
    src(28, 40, SrcClass::Float),
];
const IEXEC_MASK: u128 = 0x7F | 3 << 9 | 3 << 26 | 3 << 38 | 3 << 44;
const FEXEC_MASK: u128 = 0x7F | 3 << 9 | 3 << 44;

/// Bit pattern of a 4-entry truth table: entry i at bits 26, 27, 38, 39.
const fn truth_table(table: u128) -> u128 {
    (table & 1) << 26 | (table >> 1 & 1) << 27 | (table >> 2 & 1) << 38 | (table >> 3 & 1) << 39
}

const fn funop(mnemonic: &'static str, op: u128) -> Form {
    form(
        mnemonic,
        FUNOP_MASK,
        0x0A | op << 28,
        toggle(4, 6, 15),
        SAT,
        UNARY_FLOAT,
    )
}

table! {
    /// End of the program.
    Stop => form("stop", 0xFFFF, 0x0088, fixed(2), NONE, &[]),
    /// Trap (Mesa pads programs with it after the final `stop`).
    Trap => form("trap", 0xFFFF, 0x0008, fixed(2), NONE, &[]),
    /// Jump if any lane is active.
    JmpExecAny => form("jmp_exec_any", 0xFFFF, 0xC000, fixed(6), NONE, &[Kind::Target(b!(16:32))]),
    /// Jump if no lane is active.
    JmpExecNone => form("jmp_exec_none", 0xFFFF, 0xC020, fixed(6), NONE, &[Kind::Target(b!(16:32))]),
    /// Call a subroutine; r1 receives the return address.
    Call => form("call", 0xFFFF, 0xC010, fixed(6), NONE, &[Kind::Target(b!(16:32))]),
    /// Call the address in a register.
    CallReg => form("call", 0x7F, 0x04, fixed(2), NONE, CALL_REG),
    /// Return to the address in a register.
    Ret => form("ret", 0x7F, 0x14, fixed(2), NONE, CALL_REG),
    /// Wait for a scoreboard slot (outstanding loads).
    Wait => form("wait", 0xFF, 0x38, fixed(2), NONE, &[Kind::Uint(b!(8:1))]),
    /// Wait for every SIMD-group of the threadgroup.
    ThreadgroupBarrier => form("threadgroup_barrier", 0xFF, 0x68, fixed(2), NONE, &[]),
    /// Order memory accesses.
    MemoryBarrier => form("memory_barrier", 0xFF, 0xF5, fixed(2), NONE,
        &[Kind::Uint(b!(10:2)), Kind::Uint(b!(8:2)), Kind::Uint(b!(12:4))]),
    /// Wait until earlier fragments at this pixel have signalled.
    WaitPix => form("wait_pix", 0xFF, 0x48, fixed(4), NONE,
        &[Kind::Uint(b!(8:10)), Kind::Uint(b!(22:2))]),
    /// Signal later fragments at this pixel.
    SignalPix => form("signal_pix", 0xFF, 0x58, fixed(4), NONE,
        &[Kind::Uint(b!(8:10)), Kind::Uint(b!(22:2))]),
    /// Read a special register.
    GetSr => form("get_sr", 0x807F, 0x72, fixed(4), NONE,
        &[dst(28, DstSizes::Sized), Kind::Sr(b!(16:6, 26:2))]),
    /// Load a 16-bit immediate.
    MovImm16 => form("mov_imm", 0x17F, 0x62, toggle(4, 6, 15), NONE,
        &[dst(44, DstSizes::Only16), Kind::Uint(b!(16:16))]),
    /// Load a 32-bit immediate.
    MovImm32 => form("mov_imm", 0x17F, 0x162, toggle(6, 8, 15), NONE,
        &[dst(60, DstSizes::Only32), Kind::Uint(b!(16:32)), Kind::Trailing(b!(62:1))]),
    /// 32-bit float add.
    Fadd32 => form("fadd32", 0x3F, 0x2A, toggle(4, 6, 15), SAT, FADD_OPERANDS),
    /// 32-bit float multiply.
    Fmul32 => form("fmul32", 0x3F, 0x1A, toggle(4, 6, 15), SAT, FADD_OPERANDS),
    /// 16-bit float add.
    Fadd16 => form("fadd16", 0x3F, 0x26, toggle(4, 6, 15), SAT, HADD_OPERANDS),
    /// 16-bit float multiply.
    Fmul16 => form("fmul16", 0x3F, 0x16, toggle(4, 6, 15), SAT, HADD_OPERANDS),
    /// 32-bit fused multiply-add.
    Fmadd32 => form("fmadd32", 0x3F, 0x3A, toggle(6, 8, 15), SAT, &[
        dst(60, DstSizes::Sized),
        src(16, 58, SrcClass::Float),
        src(28, 56, SrcClass::Float),
        src(40, 54, SrcClass::Float),
    ]),
    /// 16-bit fused multiply-add.
    Fmadd16 => form("fmadd16", 0x3F, 0x36, toggle(6, 8, 15), SAT, &[
        dst(60, DstSizes::Only16),
        src(16, 58, SrcClass::Half),
        src(28, 56, SrcClass::Half),
        src(40, 54, SrcClass::Half),
    ]),
    /// Round toward negative infinity.
    Floor => funop("floor", 0),
    /// Round toward positive infinity.
    Ceil => funop("ceil", 16),
    /// Round toward zero.
    Trunc => funop("trunc", 32),
    /// Round to nearest, ties to even.
    Rint => funop("rint", 48),
    /// Reciprocal.
    Rcp => funop("rcp", 8),
    /// Reciprocal square root.
    Rsqrt => funop("rsqrt", 9),
    /// Base-2 logarithm.
    Log2 => funop("log2", 12),
    /// Base-2 exponential.
    Exp2 => funop("exp2", 13),
    /// Horizontal derivative (within a 2x2 quad).
    Dfdx => funop("dfdx", 4),
    /// Vertical derivative (within a 2x2 quad).
    Dfdy => funop("dfdy", 6),
    /// Reciprocal square root for `sqrt(x) = x * rsqrt_special(x)` (Mesa's
    /// `srsqrt`).
    RsqrtSpecial => funop("rsqrt_special", 1),
    /// First step of Mesa's sine/cosine lowering.
    SinPt1 => funop("sin_pt_1", 10),
    /// Second step of Mesa's sine/cosine lowering.
    SinPt2 => funop("sin_pt_2", 14),
    /// Any other float unary operation (the operation printed raw).
    Funop => form("funop", 0x3F | 0xFF << 34, 0x0A, toggle(4, 6, 15), SAT,
        &[dst(44, DstSizes::Sized), src(16, 42, SrcClass::Float), Kind::Binary(b!(28:6))]),
    /// Integer add.
    Iadd => form("iadd", 0x803F | 1 << 27, 0x0E, fixed(8), SAT, IADD),
    /// Integer subtract.
    Isub => form("isub", 0x803F | 1 << 27, 0x0E | 1 << 27, fixed(8), SAT, IADD),
    /// Integer multiply-add.
    Imadd => form("imadd", 0x803F | 1 << 27, 0x1E, fixed(8), SAT, IMADD),
    /// Integer multiply-subtract.
    Imsub => form("imsub", 0x803F | 1 << 27, 0x1E | 1 << 27, fixed(8), SAT, IMADD),
    /// Integer/float conversion.
    Convert => form("convert", 0x7F | 1 << 15 | 0xF << 22 | 3 << 38 | 3 << 42, 0x803E, fixed(6), NONE, &[
        Kind::Enum(b!(16:6), CONVERT_MODES),
        dst(44, DstSizes::Sized),
        src(28, 40, SrcClass::Plain),
        Kind::Enum(b!(26:2), ROUNDING),
    ]),
    /// Register move (`bitop` with table 0101 and second source 0).
    Mov => form("mov", BITOP_MASK | BITOP_B_ZERO, 0x7E | truth_table(0b1010), fixed(6), NONE, BITOP_UNARY),
    /// Bitwise not (`bitop` with table 1010 and second source 0).
    Not => form("not", BITOP_MASK | BITOP_B_ZERO, 0x7E | truth_table(0b0101), fixed(6), NONE, BITOP_UNARY),
    /// Bitwise and.
    And => form("and", BITOP_MASK, 0x7E | truth_table(0b1000), fixed(6), NONE, BITOP_BINARY),
    /// Bitwise or.
    Or => form("or", BITOP_MASK, 0x7E | truth_table(0b1110), fixed(6), NONE, BITOP_BINARY),
    /// Bitwise exclusive or.
    Xor => form("xor", BITOP_MASK, 0x7E | truth_table(0b0110), fixed(6), NONE, BITOP_BINARY),
    /// Bitwise not-and.
    Nand => form("nand", BITOP_MASK, 0x7E | truth_table(0b0111), fixed(6), NONE, BITOP_BINARY),
    /// Bitwise not-or.
    Nor => form("nor", BITOP_MASK, 0x7E | truth_table(0b0001), fixed(6), NONE, BITOP_BINARY),
    /// Bitwise equivalence (not exclusive-or; applegpu's name).
    Xnor => form("xnor", BITOP_MASK, 0x7E | truth_table(0b1001), fixed(6), NONE, BITOP_BINARY),
    /// Any other two-input bitwise function, given as a truth table.
    Bitop => form("bitop", 0x807F, 0x7E, fixed(6), NONE, &[
        Kind::TruthTable(b!(26:2, 38:2)),
        dst(44, DstSizes::Sized),
        src(16, 42, SrcClass::Plain),
        src(28, 40, SrcClass::Plain),
    ]),
    /// Reverse the 32 bits.
    Bitrev => form("bitrev", INTUNOP_MASK, 0x3E | 1 << 26, fixed(6), NONE, BITOP_UNARY),
    /// Count the set bits.
    Popcount => form("popcount", INTUNOP_MASK, 0x3E | 2 << 26, fixed(6), NONE, BITOP_UNARY),
    /// The index of the highest set bit (all ones for 0: Mesa's
    /// `ufind_msb`).
    Ffs => form("ffs", INTUNOP_MASK, 0x3E | 3 << 26, fixed(6), NONE, BITOP_UNARY),
    /// Interleave the low 16 bits of two values (Morton order: the first
    /// source in the even bits).
    Intl => form("intl", 0x7F | 1 << 15 | 3 << 26 | 3 << 38, 0x3E, fixed(6), NONE, BITOP_BINARY),
    /// Any other integer unary operation (the operation bits printed raw).
    Iunop => form("iunop", 0x7F | 1 << 15 | 0x3FF << 28, 0x3E, fixed(6), NONE,
        &[dst(44, DstSizes::Sized), src(16, 42, SrcClass::Plain), Kind::Binary(b!(38:2)), Kind::Binary(b!(26:2))]),
    /// Bit-field insert (also the left shift).
    Bfi => form("bfi", SHIFT_MASK, 0x2E, fixed(8), NONE, BITFIELD),
    /// Bit-field extract and insert low (also the logical right shift).
    Bfeil => form("bfeil", SHIFT_MASK, 0x802E, fixed(8), NONE, BITFIELD),
    /// Extract from a 64-bit concatenation.
    Extr => form("extr", SHIFT_MASK, 0x0400_002E, fixed(8), NONE, BITFIELD),
    /// Shift left into the high word.
    Shlhi => form("shlhi", SHIFT_MASK, 0x0800_002E, fixed(8), NONE, BITFIELD),
    /// Shift right from the high word.
    Shrhi => form("shrhi", SHIFT_MASK, 0x0800_802E, fixed(8), NONE, BITFIELD),
    /// Arithmetic shift right.
    Asr => form("asr", SHIFT_MASK, 0x0400_802E, fixed(8), NONE,
        &[dst(60, DstSizes::Sized), src(16, 58, SrcClass::Plain), src(28, 56, SrcClass::Plain)]),
    /// Arithmetic shift right of a value placed in the high word.
    Asrh => form("asrh", SHIFT_MASK, 0x0C00_802E, fixed(8), NONE,
        &[dst(60, DstSizes::Sized), src(16, 58, SrcClass::Plain), src(28, 56, SrcClass::Plain)]),
    /// Integer compare and select.
    Icmpsel => form("icmpsel", 0x7F, 0x12, toggle(8, 10, 15), NONE, &[
        Kind::Enum(b!(61:3), INT_CONDITIONS),
        dst(76, DstSizes::Sized),
        src(16, 74, SrcClass::Plain),
        src(28, 72, SrcClass::Plain),
        Kind::CmpSel { at: 40, ext: 70 },
        Kind::CmpSel { at: 52, ext: 68 },
    ]),
    /// Float compare and select.
    Fcmpsel => form("fcmpsel", 0x7F, 0x02, toggle(8, 10, 15), NONE, &[
        Kind::Enum(b!(61:3), FLOAT_CONDITIONS),
        dst(76, DstSizes::Sized),
        src(16, 74, SrcClass::Float),
        src(28, 72, SrcClass::Float),
        Kind::CmpSel { at: 40, ext: 70 },
        Kind::CmpSel { at: 52, ext: 68 },
    ]),
    /// Reduce over each quad (2x2 lanes); every lane gets its quad's result.
    QuadReduce => form("quad_{}", SUBGROUP_MASK, 0x6F | 1 << 15, fixed(6), NONE, SUBGROUP),
    /// Reduce over the SIMD-group.
    SimdReduce => form("simd_{}", SUBGROUP_MASK, 0x6F | 1 << 15 | 1 << 29, fixed(6), NONE, SUBGROUP),
    /// Exclusive prefix over each quad.
    QuadPrefix => form("quad_prefix_{}", SUBGROUP_MASK, 0x6F | 1 << 15 | 2 << 29, fixed(6), NONE, SUBGROUP),
    /// Exclusive prefix over the SIMD-group.
    SimdPrefix => form("simd_prefix_{}", SUBGROUP_MASK, 0x6F | 1 << 15 | 3 << 29, fixed(6), NONE, SUBGROUP),
    /// Any other subgroup operation (operation bits printed raw).
    SimdOp => form("simd_op", 0x7F | 1 << 15, 0x6F | 1 << 15, fixed(6), NONE, &[
        Kind::Binary(b!(47:1)),
        Kind::Binary(b!(26:16)),
        dst(44, DstSizes::Sized),
        src(16, 42, SrcClass::Wide),
    ]),
    /// Read a value from the lane of the quad a lane index names.
    QuadShuffle => shuffle("quad_shuffle", 0, 0, 0),
    /// Read from the lane whose index is this lane's xor the operand.
    QuadShuffleXor => shuffle("quad_shuffle_xor", 0, 1, 0),
    /// Read from the lane that many below (a lane with none keeps its own).
    QuadShuffleUp => shuffle("quad_shuffle_up", 0, 2, 0),
    /// Read from the lane that many above.
    QuadShuffleDown => shuffle("quad_shuffle_down", 0, 3, 0),
    /// Read from the lane that many below, wrapping around.
    QuadShuffleRotateUp => shuffle("quad_shuffle_rotate_up", 0, 2, 1),
    /// Read a value from the lane of the SIMD-group an index names.
    SimdShuffle => shuffle("simd_shuffle", 1, 0, 0),
    /// SIMD-group shuffle by xor of the lane index.
    SimdShuffleXor => shuffle("simd_shuffle_xor", 1, 1, 0),
    /// SIMD-group shuffle from lanes below.
    SimdShuffleUp => shuffle("simd_shuffle_up", 1, 2, 0),
    /// SIMD-group shuffle from lanes above.
    SimdShuffleDown => shuffle("simd_shuffle_down", 1, 3, 0),
    /// SIMD-group shuffle from lanes below, wrapping around.
    SimdShuffleRotateUp => shuffle("simd_shuffle_rotate_up", 1, 2, 1),
    /// applegpu's SIMD-group matrix multiply-add on fp16 pairs
    /// (decoded only).
    SimdMatrixFmadd16 => form("simd_matrix_fmadd16", SIMD_MATRIX_MASK, SIMD_MATRIX_VALUE, fixed(8), NONE, SIMD_MATRIX),
    /// The same on fp32 pairs (decoded only).
    SimdMatrixFmadd32 => form("simd_matrix_fmadd32", SIMD_MATRIX_MASK, SIMD_MATRIX_VALUE | 1 << 26, fixed(8), NONE, SIMD_MATRIX),
    /// Any other shuffle (operation bits printed raw).
    SimdShufOp => form("simd_shuf_op", 0x7F | 1 << 15, 0x6F, fixed(6), NONE, &[
        Kind::Binary(b!(47:1)),
        Kind::Binary(b!(38:2)),
        Kind::Binary(b!(26:2)),
        dst(44, DstSizes::Sized),
        src(16, 42, SrcClass::Wide),
        src(28, 40, SrcClass::Wide),
    ]),
    /// Bit mask of the active lanes of the SIMD-group whose integer compare holds.
    IcmpBallot => form("icmp_ballot", 0x7F | 3 << 26 | 3 << 38 | 0x1FFF << 48, 0x32 | 1 << 48, fixed(8), NONE, ICMP_BALLOT),
    /// The same over each quad.
    IcmpQuadBallot => form("icmp_quad_ballot", 0x7F | 3 << 26 | 3 << 38 | 0x1FFF << 48, 0x32, fixed(8), NONE, ICMP_BALLOT),
    /// Bit mask of the active lanes whose float compare holds.
    FcmpBallot => form("fcmp_ballot", 0x7F | 0x1FFF << 48, 0x22 | 1 << 48, fixed(8), NONE, FCMP_BALLOT),
    /// The same over each quad.
    FcmpQuadBallot => form("fcmp_quad_ballot", 0x7F | 0x1FFF << 48, 0x22, fixed(8), NONE, FCMP_BALLOT),
    /// Push an exec-mask level and disable lanes failing an integer compare.
    IfIcmp => form("if_icmp", IEXEC_MASK, 0x52, fixed(6), NONE, ICMP_EXEC),
    /// Flip to the else branch of an integer `if`.
    ElseIcmp => form("else_icmp", IEXEC_MASK, 0x52 | 1 << 9, fixed(6), NONE, ICMP_EXEC),
    /// Loop condition on an integer compare.
    WhileIcmp => form("while_icmp", IEXEC_MASK, 0x52 | 2 << 9, fixed(6), NONE, ICMP_EXEC),
    /// Pop exec-mask levels.
    PopExec => form("pop_exec", 0x7F | 3 << 9 | ((1 << 35) - 1) << 13, 0x52 | 3 << 9, fixed(6), NONE,
        &[Kind::R0l { cache: 7 }, Kind::Uint(b!(11:2))]),
    /// Push an exec-mask level and disable lanes failing a float compare.
    IfFcmp => form("if_fcmp", FEXEC_MASK, 0x42, fixed(6), NONE, FCMP_EXEC),
    /// Flip to the else branch of a float `if`.
    ElseFcmp => form("else_fcmp", FEXEC_MASK, 0x42 | 1 << 9, fixed(6), NONE, FCMP_EXEC),
    /// Loop condition on a float compare.
    WhileFcmp => form("while_fcmp", FEXEC_MASK, 0x42 | 2 << 9, fixed(6), NONE, FCMP_EXEC),
    /// Load from device memory.
    DeviceLoad => form("device_load", 0x000C_7000_3400_007F, 0x0000_4000_0400_0005, toggle(6, 8, 47), NONE, DEVICE_MEMORY),
    /// Store uniform registers (from the preamble).
    UniformStore => form("uniform_store", 0x000C_00F0_380F_027F, 0x3800_0045, toggle(6, 8, 47), NONE, UNIFORM_STORE),
    /// Store to device memory.
    DeviceStore => form("device_store", 0x000C_6000_3400_007F, 0x0000_4000_0400_0045, toggle(6, 8, 47), NONE, DEVICE_STORE),
    /// A `device_load` with unknown field values (applegpu's
    /// `device_load.TODO`; decoded only).
    DeviceLoadTodo => form("device_load.TODO", 0x7F, 0x05, toggle(6, 8, 47), NONE, DEVICE_LOAD_TODO),
    /// A `device_store` with unknown field values (decoded only).
    DeviceStoreTodo => form("device_store.TODO", 0x7F, 0x45, toggle(6, 8, 47), NONE, DEVICE_STORE_TODO),
    /// Start an asynchronous copy from device memory (applegpu's
    /// `async_load`; decoded only).
    AsyncLoad => form("async_load", 0x7F, 0x25, fixed(8), NONE, ASYNC_COPY),
    /// Start an asynchronous copy to device memory (decoded only).
    AsyncStore => form("async_store", 0x7F, 0x65, fixed(8), NONE, ASYNC_COPY),
    /// Read-modify-write a 32-bit word of device memory; the destination
    /// (`0` for none) gets the old value.
    Atomic => form("atomic", 0x3F, 0x15, fixed(8), NONE, ATOMIC),
    /// Copy a texture descriptor from a heap into a texture state
    /// register (preshaders bind textures this way).
    TexStateStore => form("tex_state_store", 0xFF | 1 << 20, 0xED | 1 << 20, fixed(8), NONE, STATE_STORE),
    /// Copy a sampler descriptor from a heap into a sampler state
    /// register.
    SamplerStateStore => form("sampler_state_store", 0xFF | 1 << 20, 0xAD | 1 << 20, fixed(8), NONE, STATE_STORE),
    /// Load from threadgroup memory.
    ThreadgroupLoad => form("threadgroup_load", 0x6F, 0x69, toggle(6, 8, 15), NONE, THREADGROUP_MEMORY),
    /// Store to threadgroup memory.
    ThreadgroupStore => form("threadgroup_store", 0x6F, 0x29, toggle(6, 8, 15), NONE, THREADGROUP_MEMORY),
    /// Atomic read-modify-write of a word of threadgroup memory (Mesa's
    /// `local_atomic`).
    ThreadgroupAtomic => form("threadgroup_atomic", 0x3F, 0x19, toggle(6, 10, 15), NONE, THREADGROUP_ATOMIC),
    /// Move the SIMD-group's stack pointer (Mesa's `stack_adjust`; the
    /// encoding is a `stack_store` of no components with bits 16-19 = 1).
    StackAdjust => form("stack_adjust", 0xFF | 0xF << 16 | 1 << 25 | 0xF << 52, 0xB5 | 1 << 16, toggle(6, 8, 47), NONE, STACK_ADJUST),
    /// Load from the thread's stack.
    StackLoad => form("stack_load", 0xFF, 0x35, toggle(6, 8, 47), NONE, STACK_LOAD),
    /// Store to the thread's stack.
    StackStore => form("stack_store", 0xFF, 0xB5, toggle(6, 8, 47), NONE, STACK_STORE),
    /// Read stack block register N (helper programs; applegpu's `unmap`).
    StackUnmap => form("stack_unmap", STACK_MAP_MASK, STACK_MAP_VALUE, fixed(8), NONE, STACK_MAP),
    /// Write stack block register N (helper programs; applegpu's `map`).
    StackMap => form("stack_map", STACK_MAP_MASK, STACK_MAP_VALUE | 1 << 16, fixed(8), NONE, STACK_MAP),
    /// The other encodings of 0x75 (applegpu's `TODO.map` and
    /// `TODO.unk75_alt`): the operation in bits 16-19 and the fields
    /// the two named forms pin.
    StackMapOp => form("stack_map_op", 0xFF | 1 << 10 | 1 << 47, 0x75 | 1 << 47, fixed(8), NONE, STACK_MAP_OP),
    /// Sample a texture.
    TextureSample => form("texture_sample", 0xFF, 0x31, toggle(8, 12, 15), QUERY_LOD, TEXTURE),
    /// Load texels without filtering.
    TextureLoad => form("texture_load", 0xFF, 0x71, toggle(8, 12, 15), NONE, TEXTURE),
    /// Store registers to an image.
    ImageWrite => form("image_write", 0xFF, 0xF1, toggle(6, 8, 15), NONE, &[
        Kind::Regs { value: b!(9:6, 56:2), whole: false, wide: Wide::Bit(8), count: Count::Fixed(4), discard: None },
        Kind::Regs {
            value: b!(16:6, 58:2),
            whole: false,
            wide: Wide::Fixed(Size::S32),
            count: Count::Coords(b!(40:3, 55:1)),
            discard: Some(22),
        },
        Kind::ImmOrReg { value: b!(24:6, 60:2), flag: 31, set_means_imm: true, signed: false, reg: Wide::Fixed(Size::S16) },
        Kind::TexBase { value: b!(48:5), texture_ty: b!(38:2) },
        Kind::Texture { value: b!(32:6, 62:2), ty: b!(38:2) },
        Kind::Enum(b!(40:3, 55:1), DIMENSIONS),
        Kind::Enum(b!(53:1), STORE_ROUNDING),
        Kind::Uint(b!(43:4)),
        Kind::Uint(b!(23:1)),
    ]),
    /// Store a tile of the tilebuffer to an image through a PBE descriptor.
    ImageWriteBlock => form("image_write_block", 0xFF, 0xB1, toggle(6, 10, 15), NONE, &[
        Kind::Regs { value: b!(9:6, 56:2), whole: false, wide: Wide::Fixed(Size::S32), count: Count::Fixed(1), discard: None },
        Kind::Regs { value: b!(16:6, 58:2), whole: false, wide: Wide::Fixed(Size::S32), count: Count::BlockCoords { explicit: 23, dim: b!(40:3, 55:1) }, discard: Some(22) },
        Kind::ImmOrReg { value: b!(24:6), flag: 31, set_means_imm: true, signed: false, reg: Wide::Fixed(Size::S16) },
        Kind::TexBase { value: b!(48:5), texture_ty: b!(38:2) },
        Kind::Texture { value: b!(32:6, 78:2), ty: b!(38:2) },
        Kind::Enum(b!(40:3, 55:1), DIMENSIONS),
        Kind::Enum(b!(53:1), STORE_ROUNDING),
        Kind::Enum(b!(8:1, 64:3), FORMATS),
        Kind::Uint(b!(23:1)),
        Kind::Uint(b!(43:4)),
        Kind::Uint(b!(67:1)),
    ]),
    /// Load from the tilebuffer.
    LdTile => form("ld_tile", 0x7F, 0x49, toggle(8, 10, 15), NONE, TILE),
    /// Store to the tilebuffer.
    StTile => form("st_tile", 0x7F, 0x09, toggle(8, 10, 15), NONE, TILE),
    /// Interpolate a varying.
    Iter => form("iter", 0xFF, 0x21, toggle(4, 8, 15), NONE, &[
        ITER_DST, Kind::Cf(b!(16:6, 58:2)),
        ITER_TAIL[0], ITER_TAIL[1], ITER_TAIL[2], ITER_TAIL[3], ITER_TAIL[4], Kind::Uint(b!(23:1)),
    ]),
    /// Interpolate a varying with a perspective divide.
    Iterproj => form("iterproj", 0xFF, 0x61, toggle(4, 8, 15), NONE, &[
        ITER_DST, Kind::Cf(b!(16:6, 58:2)), Kind::Cf(b!(24:6, 60:2)),
        ITER_TAIL[0], ITER_TAIL[1], ITER_TAIL[2], ITER_TAIL[3], ITER_TAIL[4], Kind::Uint(b!(23:1)),
    ]),
    /// Load the plane coefficients of a varying.
    Ldcf => form("ldcf", 0xFF, 0xA1, toggle(4, 8, 15), NONE, &[
        Kind::Regs { value: b!(9:6, 56:2), whole: false, wide: Wide::Bit(8), count: Count::Coefficients(b!(30:2)), discard: None },
        Kind::Cf(b!(16:6, 58:2)),
        Kind::Uint(b!(23:1)),
    ]),
    /// Store a vertex output.
    StVar => form("st_var", 0x3FF | 1 << 22, 0x011, fixed(4), NONE, ST_VAR),
    /// Store the last vertex output.
    StVarFinal => form("st_var_final", 0x3FF | 1 << 22, 0x091, fixed(4), NONE, ST_VAR),
    /// The vertex shader writes no outputs.
    NoVar => form("no_var", 0x3FF | 1 << 22, 0x051, fixed(4), NONE, ST_VAR),
    /// Update the coverage of some samples (discard is coverage 0).
    SampleMask => form("sample_mask", 0xFF | 1 << 15, 0xC1, fixed(4), NONE, &[
        Kind::ImmOrReg { value: b!(9:6, 24:2), flag: 8, set_means_imm: true, signed: false, reg: Wide::Fixed(Size::S16) },
        Kind::ImmOrReg { value: b!(16:6, 26:2), flag: 23, set_means_imm: true, signed: false, reg: Wide::Fixed(Size::S16) },
    ]),
    /// Output depth and/or stencil.
    ZsEmit => form("zs_emit", 0xFF | 1 << 15, 0x41, fixed(4), NONE, &[
        Kind::ImmOrReg { value: b!(9:6, 24:2), flag: 8, set_means_imm: true, signed: false, reg: Wide::Fixed(Size::S16) },
        Kind::Enum(b!(29:2), DEPTH_STENCIL),
        Kind::Regs {
            value: b!(16:6, 26:2),
            whole: false,
            wide: Wide::Fixed(Size::S16),
            count: Count::DepthStencil { z: 29, s: 30 },
            discard: None,
        },
        Kind::Uint(b!(22:2)),
    ]),
    /// Ring the firmware's doorbell (Mesa's `doorbell` is
    /// `jmp_if_skipping_doorbell` over this).
    Doorbell => form("doorbell", 0xFF, 0x28, fixed(2), NONE, &[Kind::Uint(b!(8:8))]),
    /// Branch over a doorbell when the firmware does not want it rung.
    JmpIfSkippingDoorbell => form("jmp_if_skipping_doorbell", 0xFF00_FFFF, 0x20, fixed(4), NONE,
        &[Kind::Target(b!(16:8))]),
    /// A jump whose condition applegpu calls "incomplete".
    JmpIncomplete => form("jmp_incomplete", 0xFF00_FFFF, 0x0, fixed(4), NONE, &[Kind::Target(b!(16:8))]),
    /// Forms applegpu decodes with a known length but no meaning (its
    /// `TODO.*` names); printed with their raw bits, refused when run.
    Unk101c => form("unk_101c", 0xFFFF, 0x101C, fixed(2), NONE, &[]),
    /// See `unk_101c`.
    Unk62cc => form("unk_62cc", 0xFFFF, 0x62CC, fixed(2), NONE, &[]),
    /// See `unk_101c`.
    UnkE800 => form("unk_e800", 0xFFFF, 0x00E8, fixed(2), NONE, &[]),
    /// See `unk_101c`.
    Unk0c00 => form("unk_0c00", 0xFFFF, 0x000C, fixed(2), NONE, &[]),
    /// See `unk_101c`.
    UnkC0000000 => form("unk_c0000000", 0xFFFF_FFFF, 0x0000_00C0, fixed(4), NONE, &[]),
    /// See `unk_101c`: a 32-bit immediate follows.
    Unk30c0 => form("unk_30c0", 0xFFFF, 0xC030, fixed(6), NONE, &[Kind::Uint(b!(16:32))]),
    /// See `unk_101c`.
    Unk40c0 => form("unk_40c0", 0xFFFF_FFFF_FFFF, 0xC040, fixed(6), NONE, &[]),
    /// See `unk_101c` (applegpu's `sr_thing`): the other bits printed as
    /// numbers.
    UnkSr => form("unk_sr", 0x7F | 1 << 15, 0x72 | 1 << 15, fixed(4), NONE, &[Kind::Uint(b!(7:8)), Kind::Uint(b!(16:16))]),
}

/// Special-register numbers the simulator provides (see [`SPECIAL_REGISTERS`]).
pub mod sr {
    /// `threadgroup_position_in_grid` (x; y and z follow).
    pub const THREADGROUP_POSITION_IN_GRID: u32 = 0;
    /// `threads_per_threadgroup` (x; y and z follow).
    pub const THREADS_PER_THREADGROUP: u32 = 4;
    /// `dispatch_threads_per_threadgroup` (x; y and z follow).
    pub const DISPATCH_THREADS_PER_THREADGROUP: u32 = 8;
    /// `samples_log2`: log2 of the pass's samples per pixel (Mesa's
    /// `AGX_SR_SAMPLES_LOG2`).
    pub const SAMPLES_LOG2: u32 = 14;
    /// `core_index`.
    pub const CORE_INDEX: u32 = 20;
    /// `vm_slot`.
    pub const VM_SLOT: u32 = 21;
    /// `thread_position_in_threadgroup` (x; y and z follow).
    pub const THREAD_POSITION_IN_THREADGROUP: u32 = 48;
    /// `thread_index_in_threadgroup`.
    pub const THREAD_INDEX_IN_THREADGROUP: u32 = 51;
    /// `thread_index_in_simdgroup`.
    pub const THREAD_INDEX_IN_SIMDGROUP: u32 = 52;
    /// `simdgroup_index_in_threadgroup`.
    pub const SIMDGROUP_INDEX_IN_THREADGROUP: u32 = 53;
    /// `internal_coverage_mask`: the samples of the pixel the primitive
    /// covers (Mesa's `AGX_SR_COVERAGE_MASK`).
    pub const COVERAGE_MASK: u32 = 60;
    /// `input_sample_mask`: `gl_SampleMaskIn` (Mesa's
    /// `AGX_SR_INPUT_SAMPLE_MASK`).
    pub const INPUT_SAMPLE_MASK: u32 = 124;
    /// `backfacing`: 1 in a fragment program shading a back-facing
    /// triangle, else 0 (Mesa reads gl_FrontFacing as its inverse).
    pub const BACKFACING: u32 = 62;
    /// `is_active_thread`.
    pub const IS_ACTIVE_THREAD: u32 = 63;
    /// `thread_position_in_grid` (x; y and z follow (the pixel x/y in fragment shaders)).
    pub const THREAD_POSITION_IN_GRID: u32 = 80;
    /// `opfifo_cmd`: in a helper program, the operation the firmware
    /// asks for (Mesa's `helper_op`).
    pub const HELPER_OP: u32 = 144;
    /// `opfifo_data_l`: the low word of the helper's argument.
    pub const HELPER_ARG_LO: u32 = 146;
    /// `opfifo_data_h`: the high word of the helper's argument.
    pub const HELPER_ARG_HI: u32 = 147;
}

/// Names of the special registers, for printing.
pub const SPECIAL_REGISTERS: &[(u32, &str)] = &[
    (
        sr::THREADGROUP_POSITION_IN_GRID,
        "threadgroup_position_in_grid.x",
    ),
    (
        sr::THREADGROUP_POSITION_IN_GRID + 1,
        "threadgroup_position_in_grid.y",
    ),
    (
        sr::THREADGROUP_POSITION_IN_GRID + 2,
        "threadgroup_position_in_grid.z",
    ),
    (sr::THREADS_PER_THREADGROUP, "threads_per_threadgroup.x"),
    (sr::THREADS_PER_THREADGROUP + 1, "threads_per_threadgroup.y"),
    (sr::THREADS_PER_THREADGROUP + 2, "threads_per_threadgroup.z"),
    (
        sr::DISPATCH_THREADS_PER_THREADGROUP,
        "dispatch_threads_per_threadgroup.x",
    ),
    (
        sr::DISPATCH_THREADS_PER_THREADGROUP + 1,
        "dispatch_threads_per_threadgroup.y",
    ),
    (
        sr::DISPATCH_THREADS_PER_THREADGROUP + 2,
        "dispatch_threads_per_threadgroup.z",
    ),
    (sr::SAMPLES_LOG2, "samples_log2"),
    (sr::CORE_INDEX, "core_index"),
    (sr::VM_SLOT, "vm_slot"),
    (
        sr::THREAD_POSITION_IN_THREADGROUP,
        "thread_position_in_threadgroup.x",
    ),
    (
        sr::THREAD_POSITION_IN_THREADGROUP + 1,
        "thread_position_in_threadgroup.y",
    ),
    (
        sr::THREAD_POSITION_IN_THREADGROUP + 2,
        "thread_position_in_threadgroup.z",
    ),
    (
        sr::THREAD_INDEX_IN_THREADGROUP,
        "thread_index_in_threadgroup",
    ),
    (sr::THREAD_INDEX_IN_SIMDGROUP, "thread_index_in_simdgroup"),
    (
        sr::SIMDGROUP_INDEX_IN_THREADGROUP,
        "simdgroup_index_in_threadgroup",
    ),
    (56, "active_thread_index_in_quadgroup"),
    (57, "total_active_threads_in_quadgroup"),
    (58, "active_thread_index_in_simdgroup"),
    (59, "total_active_threads_in_simdgroup"),
    (sr::COVERAGE_MASK, "internal_coverage_mask"),
    (sr::BACKFACING, "backfacing"),
    (sr::IS_ACTIVE_THREAD, "is_active_thread"),
    (sr::THREAD_POSITION_IN_GRID, "thread_position_in_grid.x"),
    (sr::THREAD_POSITION_IN_GRID + 1, "thread_position_in_grid.y"),
    (sr::THREAD_POSITION_IN_GRID + 2, "thread_position_in_grid.z"),
    (sr::INPUT_SAMPLE_MASK, "input_sample_mask"),
    (sr::HELPER_OP, "opfifo_cmd"),
    (sr::HELPER_ARG_LO, "opfifo_data_l"),
    (sr::HELPER_ARG_HI, "opfifo_data_h"),
];
