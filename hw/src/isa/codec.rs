//! Encoding and decoding, driven by the form table.
//!
//! Decoding walks the table in order and takes the first form whose
//! identifying bits match (the order is decided, and explained, in
//! `table.rs`); each operand is then read by its [`Kind`], the way the
//! hardware (as applegpu documents it) reads it: a 32-bit register or
//! uniform at an odd half is the register below (the low index bit is
//! ignored), a 64-bit register type in a 32-bit source is a 32-bit
//! register, and a type code with no known meaning is a
//! [`Value::Undefined`] operand. Bits that decoding ignores this way, and
//! set bits that no field covers, are reported as unknown bits: the
//! decoder re-encodes what it read, and every bit that differs is one.

use super::bits::{length_mask, load_word, Bits};
use super::form::{Count, DstSizes, Form, Kind, Length, SrcClass, Wide};
use super::operand::{
    Dst, Float8, Hint, Operand, Reg, RegRun, Size, Src, Uniform, UniformRun, Value,
};
use super::table::{Op, ATOMIC_CMPXCHG, FORMS};
use super::{DecodeError, Decoded, EncodeError, Instr, MAX_LENGTH_BYTES};

fn bit(word: u128, at: u8) -> bool {
    (word >> at) & 1 != 0
}

fn set_bit(word: &mut u128, at: u8, on: bool) {
    if on {
        *word |= 1u128 << at;
    } else {
        *word &= !(1u128 << at);
    }
}

fn field(word: u128, lo: u8, width: u8) -> u64 {
    ((word >> lo) & ((1u128 << width) - 1)) as u64
}

fn set_field(word: &mut u128, lo: u8, width: u8, value: u64) {
    let mask = (1u128 << width) - 1;
    *word = (*word & !(mask << lo)) | ((u128::from(value) & mask) << lo);
}

fn mask_of(lo: u8, width: u8) -> u128 {
    ((1u128 << width) - 1) << lo
}

/// The length an instruction starting with `word` has under `form`.
fn form_length(form: &Form, word: u128) -> usize {
    match form.length {
        Length::Fixed(n) => usize::from(n),
        Length::Toggle {
            short,
            long,
            bit: at,
        } => usize::from(if bit(word, at) { long } else { short }),
    }
}

/// Number of 32-bit coordinate registers for a texture dimension.
pub(crate) fn coord_count(dim: u64) -> Option<u8> {
    Some(match dim {
        0 => 1,
        1 | 2 => 2,
        3..=6 | 8 => 3,
        7 => 4,
        _ => return None,
    })
}

/// Number of gradient axes for a texture dimension.
pub(crate) fn gradient_axes(dim: u64) -> u8 {
    match dim {
        0 | 1 => 1,
        5..=7 => 3,
        _ => 2,
    }
}

fn run_count(count: &Count, word: u128) -> Result<u8, &'static str> {
    Ok(match count {
        Count::Fixed(n) => *n,
        Count::Mask(bits) => bits.get(word).count_ones() as u8,
        Count::Channels(bits) => match bits.get(word) {
            0 => 4,
            n => n as u8,
        },
        Count::Coefficients(bits) => {
            3 * match bits.get(word) {
                0 => 4,
                n => n as u8,
            }
        }
        Count::Coords(bits) => coord_count(bits.get(word)).ok_or("undefined texture dimension")?,
        Count::BlockCoords { explicit, dim } => match (bit(word, *explicit), dim.get(word)) {
            (false, _) => 1,
            (true, 3 | 8) => 3,
            (true, _) => 2,
        },
        Count::DepthStencil { z, s } => 2 * u8::from(bit(word, *z)) + u8::from(bit(word, *s)),
        Count::AtomicData(op) => 1 + u8::from(op.get(word) == ATOMIC_CMPXCHG),
        Count::CompareOffset { compare, offset } => {
            1 + u8::from(bit(word, *compare) && bit(word, *offset))
        }
        Count::Copy(two_d) => 3 + 2 * u8::from(bit(word, *two_d)),
    })
}

fn run_size(wide: &Wide, word: u128) -> Size {
    match wide {
        Wide::Fixed(size) => *size,
        Wide::Bit(at) => {
            if bit(word, *at) {
                Size::S32
            } else {
                Size::S16
            }
        }
        Wide::NarrowBit(at) => {
            if bit(word, *at) {
                Size::S16
            } else {
                Size::S32
            }
        }
    }
}

fn check_run(run: &RegRun) -> Result<(), &'static str> {
    if run.first.size != Size::S16 && !run.first.half.is_multiple_of(2) {
        return Err("32-bit register at an odd half");
    }
    if run.first.half > 255 {
        return Err("register index out of range");
    }
    Ok(())
}

/// The register a run's index field names, as the hardware reads it: a
/// 32-bit run at an odd half starts at the register below.
fn decoded_run_start(half: u64, size: Size) -> u16 {
    let half = (half & 0xFF) as u16;
    if size == Size::S16 {
        half
    } else {
        half & !1
    }
}

fn sign_extend(value: u64, width: u32) -> i64 {
    let shift = 64 - width;
    ((value << shift) as i64) >> shift
}

/// A register operand to encode: its index must fit the 8-bit field and
/// a 32- or 64-bit register must start at an even half. (Registers past
/// r127, which the field reaches, encode; the simulator refuses them.)
fn gpr(half: u64, size: Size) -> Result<Reg, &'static str> {
    if half > 255 || (size != Size::S16 && !half.is_multiple_of(2)) {
        return Err("register out of range or misaligned");
    }
    Ok(Reg {
        half: half as u16,
        size,
    })
}

/// A register as decoding reads it: the low 8 index bits, and for 32- and
/// 64-bit registers the low bit ignored (applegpu: `value >> 1`).
fn decoded_gpr(half: u64, size: Size) -> Reg {
    Reg {
        half: decoded_run_start(half, size),
        size,
    }
}

/// A uniform operand to encode.
fn uniform(half: u64, size: Size) -> Result<Uniform, &'static str> {
    if half > 511 || (size != Size::S16 && !half.is_multiple_of(2)) {
        return Err("uniform out of range or misaligned");
    }
    Ok(Uniform {
        half: half as u16,
        size,
    })
}

/// A uniform as decoding reads it (the low bit of a 32- or 64-bit
/// uniform's index ignored).
fn decoded_uniform(half: u64, size: Size) -> Uniform {
    let half = (half & 0x1FF) as u16;
    Uniform {
        half: if size == Size::S16 { half } else { half & !1 },
        size,
    }
}

fn hint_from(code: u64) -> Hint {
    match code {
        2 => Hint::Cache,
        3 => Hint::Discard,
        _ => Hint::None,
    }
}

fn hint_code(hint: Hint) -> u64 {
    match hint {
        Hint::None => 1,
        Hint::Cache => 2,
        Hint::Discard => 3,
    }
}

/// The bits an operand covers in `word` (some depend on other fields);
/// the property tests draw random field contents from them.
#[cfg(test)]
pub(crate) fn covered(kind: &Kind) -> u128 {
    match kind {
        Kind::Dst { ext, sizes } => {
            let size_bit = if *sizes == DstSizes::Only16 {
                0
            } else {
                1 << 8
            };
            mask_of(7, 1) | size_bit | mask_of(9, 6) | mask_of(*ext, 2)
        }
        Kind::Src { at, ext, class } => {
            let modifiers = match class {
                SrcClass::Plain => 0,
                SrcClass::Float => mask_of(at + 10, 2),
                SrcClass::Half => mask_of(at + 9, 2),
                SrcClass::Int => mask_of(at + 10, 1),
                SrcClass::Wide => 0,
                SrcClass::Paired { modifiers } => mask_of(*modifiers, 2),
            };
            let ty = if *class == SrcClass::Half { 3 } else { 4 };
            mask_of(*at, 6 + ty) | modifiers | mask_of(*ext, 2)
        }
        Kind::CmpSel { at, ext } => mask_of(*at, 9) | mask_of(*ext, 2),
        Kind::Target(bits) => bits.mask(),
        Kind::R0l { cache } => mask_of(*cache, 1),
        Kind::Regs {
            value,
            discard,
            wide,
            count,
            ..
        } => {
            let mut mask = value.mask();
            if let Count::Channels(bits) | Count::Coefficients(bits) = count {
                mask |= bits.mask();
            }
            if let Some(at) = discard {
                mask |= mask_of(*at, 1);
            }
            if let Wide::Bit(at) | Wide::NarrowBit(at) = wide {
                mask |= mask_of(*at, 1);
            }
            mask
        }
        Kind::Pair { value, uniform } | Kind::Words { value, uniform, .. } => {
            value.mask() | mask_of(*uniform, 1)
        }
        Kind::ImmOrReg {
            value, flag, reg, ..
        } => {
            let width = match reg {
                Wide::Bit(at) | Wide::NarrowBit(at) => mask_of(*at, 1),
                Wide::Fixed(_) => 0,
            };
            value.mask() | mask_of(*flag, 1) | width
        }
        Kind::TgBase { value, ty } | Kind::Texture { value, ty } => value.mask() | ty.mask(),
        Kind::Sampler { value, ty } => value.mask() | mask_of(*ty, 1),
        Kind::TexBase { value, .. } | Kind::Lod { value, .. } | Kind::UniformBase(value) => {
            value.mask()
        }
        // Plain numbers: every bit of the field.
        number => number.number_bits().map_or(0, Bits::mask),
    }
}

fn decode_src(word: u128, at: u8, ext: u8, class: SrcClass) -> Result<Src, &'static str> {
    let index = field(word, at, 6) | field(word, ext, 2) << 6;
    let mut src = Src::new(Value::Imm(0));
    if class == SrcClass::Half {
        let ty = field(word, at + 6, 3);
        src.value = if ty == 0 {
            Value::Float(Float8(index as u8))
        } else if ty & 4 != 0 {
            let size = if ty & 2 != 0 { Size::S32 } else { Size::S16 };
            Value::Uniform(decoded_uniform(index | (ty & 1) << 8, size))
        } else {
            Value::Reg(decoded_gpr(index, Size::S16), hint_from(ty))
        };
        src.abs = bit(word, at + 9);
        src.neg = bit(word, at + 10);
        return Ok(src);
    }
    let ty = field(word, at + 6, 4);
    src.value = if ty == 0 {
        if matches!(class, SrcClass::Float | SrcClass::Paired { .. }) {
            Value::Float(Float8(index as u8))
        } else {
            Value::Imm(index as i64)
        }
    } else if ty & 0b1100 == 0b0100 {
        let size = if ty & 2 != 0 { Size::S32 } else { Size::S16 };
        Value::Uniform(decoded_uniform(index | (ty & 1) << 8, size))
    } else if ty & 3 == 0 {
        Value::Undefined {
            ty: ty as u8,
            ty_bits: 4,
            index: index as u16,
        }
    } else {
        // 64-bit registers only in integer sources; elsewhere type 11xx
        // reads as a 32-bit register (applegpu), its bit 2 ignored.
        let size = match ty >> 2 {
            0 => Size::S16,
            3 if matches!(class, SrcClass::Int | SrcClass::Wide) => Size::S64,
            _ => Size::S32,
        };
        let reg = decoded_gpr(index, size);
        let hint = hint_from(ty & 3);
        if matches!(class, SrcClass::Paired { .. }) {
            Value::Pair(reg, hint)
        } else {
            Value::Reg(reg, hint)
        }
    };
    match class {
        SrcClass::Float => {
            src.abs = bit(word, at + 10);
            src.neg = bit(word, at + 11);
        }
        SrcClass::Paired { modifiers } => {
            src.abs = bit(word, modifiers);
            src.neg = bit(word, modifiers + 1);
        }
        SrcClass::Int => src.sx = bit(word, at + 10),
        SrcClass::Plain | SrcClass::Half | SrcClass::Wide => {}
    }
    Ok(src)
}

fn encode_src(
    word: &mut u128,
    at: u8,
    ext: u8,
    class: SrcClass,
    src: &Src,
) -> Result<(), &'static str> {
    let paired = matches!(class, SrcClass::Paired { .. });
    let float = paired || matches!(class, SrcClass::Float | SrcClass::Half);
    let (index, ty): (u64, u64) = match (src.value, class) {
        (Value::Float(f), _) if float => (u64::from(f.0), 0),
        (Value::Float(_), _) => return Err("float immediate in an integer source"),
        (Value::Imm(_), _) if float => return Err("integer immediate in a float source"),
        (Value::Imm(imm), _) => {
            if !(0..=255).contains(&imm) {
                return Err("immediate out of range 0..=255");
            }
            (imm as u64, 0)
        }
        (
            Value::Undefined { ty, ty_bits, index },
            SrcClass::Plain
            | SrcClass::Float
            | SrcClass::Int
            | SrcClass::Wide
            | SrcClass::Paired { .. },
        ) => {
            if ty_bits != 4 || !matches!(ty, 0b1000 | 0b1100) || index > 255 {
                return Err("not an undefined 4-bit source type");
            }
            (u64::from(index), u64::from(ty))
        }
        (Value::Undefined { .. }, SrcClass::Half) => {
            return Err("16-bit sources have no undefined type")
        }
        (Value::Uniform(u), _) => {
            let u = uniform(u64::from(u.half), u.size)?;
            if u.size == Size::S64 {
                return Err("64-bit uniform source");
            }
            let is32 = u64::from(u.size == Size::S32);
            let high = u64::from(u.half >> 8);
            (u64::from(u.half & 0xFF), 4 | is32 << 1 | high)
        }
        (Value::Pair(reg, hint), SrcClass::Paired { .. }) => {
            let reg = gpr(u64::from(reg.half), reg.size)?;
            let size_code = match reg.size {
                Size::S16 => 0,
                Size::S32 => 2,
                Size::S64 => return Err("expected a pair of 16- or 32-bit registers"),
            };
            (u64::from(reg.half), size_code << 2 | hint_code(hint))
        }
        (Value::Pair(..), _) => return Err("a register pair only in a paired source"),
        (Value::Reg(..), SrcClass::Paired { .. }) => {
            return Err("expected a register pair (`r4_r5`, `r4l_r4h`)")
        }
        (Value::Reg(reg, hint), _) => {
            let reg = gpr(u64::from(reg.half), reg.size)?;
            let size_code = match (reg.size, class) {
                (Size::S16, _) => 0,
                (Size::S32, SrcClass::Half) => return Err("32-bit register in a 16-bit source"),
                (Size::S32, _) => 2,
                (Size::S64, SrcClass::Int | SrcClass::Wide) => 3,
                (Size::S64, _) => return Err("64-bit register in a 32-bit source"),
            };
            (u64::from(reg.half), size_code << 2 | hint_code(hint))
        }
    };
    if class == SrcClass::Half && ty > 7 {
        return Err("source type not encodable in a 16-bit source");
    }
    set_field(word, at, 6, index & 63);
    set_field(word, ext, 2, index >> 6);
    let ty_width = if class == SrcClass::Half { 3 } else { 4 };
    set_field(word, at + 6, ty_width, ty);
    match class {
        SrcClass::Float => {
            set_bit(word, at + 10, src.abs);
            set_bit(word, at + 11, src.neg);
        }
        SrcClass::Half => {
            set_bit(word, at + 9, src.abs);
            set_bit(word, at + 10, src.neg);
        }
        SrcClass::Paired { modifiers } => {
            set_bit(word, modifiers, src.abs);
            set_bit(word, modifiers + 1, src.neg);
        }
        SrcClass::Int => set_bit(word, at + 10, src.sx),
        SrcClass::Plain | SrcClass::Wide => {}
    }
    let wants_mods = match class {
        SrcClass::Float | SrcClass::Half | SrcClass::Paired { .. } => src.sx,
        SrcClass::Int => src.abs || src.neg,
        SrcClass::Plain | SrcClass::Wide => src.sx || src.abs || src.neg,
    };
    if wants_mods {
        return Err("modifier not available on this source");
    }
    Ok(())
}

fn decode_operand(kind: &Kind, word: u128) -> Result<Operand, &'static str> {
    Ok(match kind {
        Kind::Dst { ext, sizes } => {
            let index = field(word, 9, 6) | field(word, *ext, 2) << 6;
            let wide = bit(word, 8);
            let reg = match sizes {
                DstSizes::Only16 => decoded_gpr(index, Size::S16),
                DstSizes::Only32 => decoded_gpr(index, Size::S32),
                DstSizes::Sized64 if wide && index % 2 == 1 => decoded_gpr(index, Size::S64),
                DstSizes::Sized | DstSizes::Sized64 | DstSizes::Paired => {
                    decoded_gpr(index, if wide { Size::S32 } else { Size::S16 })
                }
            };
            if *sizes == DstSizes::Paired {
                let hint = if bit(word, 7) {
                    Hint::Cache
                } else {
                    Hint::None
                };
                return Ok(Operand::Value(Value::Pair(reg, hint)));
            }
            Operand::Dst(Dst {
                reg,
                cache: bit(word, 7),
            })
        }
        Kind::Src { at, ext, class } => Operand::Src(decode_src(word, *at, *ext, *class)?),
        Kind::CmpSel { at, ext } => {
            let index = field(word, *at, 6) | field(word, *ext, 2) << 6;
            let size = if bit(word, 8) { Size::S32 } else { Size::S16 };
            let value = match field(word, at + 6, 3) {
                0b100 => Value::Imm(index as i64),
                ty @ (0b110 | 0b111) => {
                    Value::Uniform(decoded_uniform(index | (ty & 1) << 8, size))
                }
                ty @ 1..=3 => Value::Reg(decoded_gpr(index, size), hint_from(ty)),
                ty => Value::Undefined {
                    ty: ty as u8,
                    ty_bits: 3,
                    index: index as u16,
                },
            };
            Operand::Src(Src::new(value))
        }
        Kind::Target(bits) => Operand::Int(sign_extend(bits.get(word), bits.width())),
        Kind::R0l { cache } => Operand::Dst(Dst {
            reg: Reg::l(0),
            cache: bit(word, *cache),
        }),
        Kind::Regs {
            value,
            whole,
            wide,
            count,
            discard,
        } => {
            let size = run_size(wide, word);
            let index = value.get(word);
            let half = if *whole { index * 2 } else { index };
            Operand::Regs(RegRun {
                first: Reg {
                    half: decoded_run_start(half, size),
                    size,
                },
                count: run_count(count, word)?,
                discard: discard.is_some_and(|at| bit(word, at)),
            })
        }
        Kind::Words {
            value,
            uniform: flag,
            count,
        } => {
            let index = value.get(word) as u16;
            let count = run_count(count, word)?;
            if bit(word, *flag) {
                Operand::Uniforms(UniformRun {
                    first: Uniform::u(index),
                    count,
                })
            } else {
                Operand::Regs(RegRun::new(Reg::r(index), count))
            }
        }
        Kind::Pair {
            value,
            uniform: flag,
        } => {
            let half = value.get(word);
            if bit(word, *flag) {
                Operand::Value(Value::Uniform(decoded_uniform(half, Size::S64)))
            } else {
                Operand::Value(Value::Reg(decoded_gpr(half, Size::S64), Hint::None))
            }
        }
        Kind::ImmOrReg {
            value,
            flag,
            set_means_imm,
            signed,
            reg,
        } => {
            let raw = value.get(word);
            if bit(word, *flag) == *set_means_imm {
                let imm = if *signed {
                    sign_extend(raw, value.width())
                } else {
                    raw as i64
                };
                Operand::Value(Value::Imm(imm))
            } else {
                Operand::Value(Value::Reg(
                    decoded_gpr(raw, run_size(reg, word)),
                    Hint::None,
                ))
            }
        }
        Kind::TgBase { value, ty } => {
            let raw = value.get(word);
            Operand::Value(match ty.get(word) {
                0 => Value::Reg(decoded_gpr(raw, Size::S16), Hint::None),
                // No base: the index bits are not read (applegpu prints 0).
                2 => Value::Imm(0),
                t => Value::Uniform(decoded_uniform(raw | (t >> 1) << 8, Size::S16)),
            })
        }
        Kind::Texture { value, ty } => {
            let raw = value.get(word);
            Operand::Value(match ty.get(word) {
                0 => Value::Imm(raw as i64),
                1 => Value::Reg(decoded_gpr(raw, Size::S16), Hint::None),
                3 => Value::Reg(decoded_gpr(raw, Size::S32), Hint::None),
                ty => Value::Undefined {
                    ty: ty as u8,
                    ty_bits: 2,
                    index: raw as u16,
                },
            })
        }
        Kind::Sampler { value, ty } => {
            let raw = value.get(word);
            Operand::Value(if bit(word, *ty) {
                Value::Reg(decoded_gpr(raw, Size::S16), Hint::None)
            } else {
                Value::Imm(raw as i64)
            })
        }
        Kind::TexBase { value, texture_ty } => {
            let raw = value.get(word);
            Operand::Value(if texture_ty.get(word) == 3 {
                Value::Uniform(decoded_uniform(raw * 4, Size::S64))
            } else {
                // Not bindless: the base bits are not read.
                Value::Imm(0)
            })
        }
        Kind::UniformBase(value) => Operand::Value(Value::Uniform(decoded_uniform(
            value.get(word) * 4,
            Size::S64,
        ))),
        Kind::Lod { value, mode, dim } => {
            let raw = value.get(word);
            match mode.get(word) {
                1 | 2 => Operand::Value(Value::Uniform(decoded_uniform(raw, Size::S16))),
                5 | 6 => Operand::Value(Value::Reg(decoded_gpr(raw, Size::S16), Hint::None)),
                // A bias and a minimum LOD, two fp16 halves of one word.
                9 => Operand::Value(Value::Uniform(decoded_uniform(raw, Size::S32))),
                13 => Operand::Value(Value::Reg(decoded_gpr(raw, Size::S32), Hint::None)),
                m @ (4 | 12) => {
                    let count = 2 * gradient_axes(dim.get(word)) + u8::from(m == 12);
                    Operand::Regs(RegRun::new(decoded_gpr(raw, Size::S32), count))
                }
                _ => Operand::Value(Value::Imm(raw as i64)),
            }
        }
        Kind::Int(bits) => Operand::Int(sign_extend(bits.get(word), bits.width())),
        number => match number.number_bits() {
            Some(bits) => Operand::Int(bits.get(word) as i64),
            None => return Err("operand kind without a decoder"),
        },
    })
}

fn expect_int(operand: &Operand) -> Result<i64, &'static str> {
    operand.int().ok_or("expected a number")
}

fn put_uint(word: &mut u128, bits: &Bits, value: i64) -> Result<(), &'static str> {
    if value < 0 || value as u64 > bits.max() {
        return Err("value out of range for its field");
    }
    bits.set(word, value as u64);
    Ok(())
}

/// Whether an operand's encoding reads fields that other operands set
/// (register counts, sizes), so it must be encoded after them.
fn depends_on_others(kind: &Kind) -> bool {
    matches!(
        kind,
        Kind::CmpSel { .. }
            | Kind::Regs { .. }
            | Kind::Words { .. }
            | Kind::TexBase { .. }
            | Kind::Lod { .. }
    )
}

fn encode_operand(kind: &Kind, operand: &Operand, word: &mut u128) -> Result<(), &'static str> {
    match kind {
        Kind::Dst {
            ext,
            sizes: DstSizes::Paired,
        } => {
            let (reg, cache) = match operand {
                Operand::Value(Value::Pair(reg, hint @ (Hint::None | Hint::Cache))) => {
                    (gpr(u64::from(reg.half), reg.size)?, *hint == Hint::Cache)
                }
                Operand::Value(Value::Pair(_, Hint::Discard)) => {
                    return Err("a destination takes no discard hint")
                }
                _ => return Err("expected a pair of 16- or 32-bit registers"),
            };
            if reg.size == Size::S64 {
                return Err("expected a pair of 16- or 32-bit registers");
            }
            let index = u64::from(reg.half);
            set_bit(word, 7, cache);
            set_bit(word, 8, reg.size == Size::S32);
            set_field(word, 9, 6, index & 63);
            set_field(word, *ext, 2, index >> 6);
        }
        Kind::Dst { ext, sizes } => {
            let Operand::Dst(dst) = operand else {
                return Err("expected a destination register");
            };
            let reg = gpr(u64::from(dst.reg.half), dst.reg.size)?;
            let (index, wide) = match (sizes, reg.size) {
                (DstSizes::Only16 | DstSizes::Sized | DstSizes::Sized64, Size::S16) => {
                    (u64::from(reg.half), false)
                }
                (DstSizes::Only32 | DstSizes::Sized | DstSizes::Sized64, Size::S32) => {
                    (u64::from(reg.half), true)
                }
                (DstSizes::Sized64, Size::S64) => (u64::from(reg.half) | 1, true),
                _ => return Err("destination size not allowed here"),
            };
            set_bit(word, 7, dst.cache);
            if *sizes != DstSizes::Only16 {
                set_bit(word, 8, wide);
            }
            set_field(word, 9, 6, index & 63);
            set_field(word, *ext, 2, index >> 6);
        }
        Kind::Src { at, ext, class } => {
            let Operand::Src(src) = operand else {
                return Err("expected a source operand");
            };
            encode_src(word, *at, *ext, *class, src)?;
        }
        Kind::CmpSel { at, ext } => {
            let Operand::Src(src) = operand else {
                return Err("expected a source operand");
            };
            if src.abs || src.neg || src.sx {
                return Err("compare-select results take no modifiers");
            }
            let size = if bit(*word, 8) { Size::S32 } else { Size::S16 };
            let (index, ty) = match src.value {
                Value::Imm(imm) if (0..=255).contains(&imm) => (imm as u64, 0b100),
                Value::Imm(_) => return Err("immediate out of range 0..=255"),
                Value::Float(_) => return Err("compare-select results are raw integers"),
                Value::Uniform(u) if u.size == size => {
                    let u = uniform(u64::from(u.half), u.size)?;
                    (u64::from(u.half & 0xFF), 0b110 | u64::from(u.half >> 8))
                }
                Value::Reg(reg, hint) if reg.size == size => {
                    let reg = gpr(u64::from(reg.half), reg.size)?;
                    (u64::from(reg.half), hint_code(hint))
                }
                Value::Undefined {
                    ty,
                    ty_bits: 3,
                    index,
                } if matches!(ty, 0b000 | 0b101) && index <= 255 => {
                    (u64::from(index), u64::from(ty))
                }
                _ => return Err("compare-select results must match the destination size"),
            };
            set_field(word, *at, 6, index & 63);
            set_field(word, at + 6, 3, ty);
            set_field(word, *ext, 2, index >> 6);
        }
        Kind::Target(bits) => {
            let offset = expect_int(operand)?;
            let width = bits.width();
            if offset < -(1 << (width - 1)) || offset >= 1 << (width - 1) {
                return Err("branch offset out of range");
            }
            bits.set(word, (offset as u64) & bits.max());
        }
        Kind::R0l { cache } => {
            let Operand::Dst(dst) = operand else {
                return Err("expected r0l");
            };
            if dst.reg != Reg::l(0) {
                return Err("this operand is always r0l");
            }
            set_bit(word, *cache, dst.cache);
        }
        Kind::Regs {
            value,
            whole,
            wide,
            count,
            discard,
        } => {
            let Operand::Regs(run) = operand else {
                return Err("expected registers");
            };
            check_run(run)?;
            match wide {
                Wide::Fixed(size) if *size != run.first.size => {
                    return Err("register size not allowed here")
                }
                Wide::Bit(at) => match run.first.size {
                    Size::S16 => set_bit(word, *at, false),
                    Size::S32 => set_bit(word, *at, true),
                    Size::S64 => return Err("64-bit registers not allowed here"),
                },
                Wide::NarrowBit(at) => match run.first.size {
                    Size::S16 => set_bit(word, *at, true),
                    Size::S32 => set_bit(word, *at, false),
                    Size::S64 => return Err("64-bit registers not allowed here"),
                },
                Wide::Fixed(_) => {}
            }
            let index = if *whole {
                u64::from(run.first.half / 2)
            } else {
                u64::from(run.first.half)
            };
            put_uint(word, value, index as i64)?;
            // Channel counts are not operands of their own: the run's
            // length is the count.
            match count {
                Count::Channels(bits) if (1..=4).contains(&run.count) => {
                    bits.set(word, u64::from(run.count % 4));
                }
                Count::Coefficients(bits)
                    if run.count.is_multiple_of(3) && (3..=12).contains(&run.count) =>
                {
                    bits.set(word, u64::from(run.count / 3 % 4));
                }
                Count::Channels(_) | Count::Coefficients(_) => {
                    return Err("register count must be 1-4 channels");
                }
                _ => {}
            }
            let expected = run_count(count, *word)?;
            if run.count != expected && !(expected == 0 && run.count <= 1) {
                return Err("register count does not match the mask or dimension");
            }
            match discard {
                Some(at) => set_bit(word, *at, run.discard),
                None if run.discard => return Err("no discard hint here"),
                None => {}
            }
        }
        Kind::Words {
            value,
            uniform: flag,
            count,
        } => {
            let (index, n, is_uniform) = match operand {
                // The index counts whole registers, so it reaches past
                // r127 (decoded, never run).
                Operand::Regs(run)
                    if run.first.size == Size::S32
                        && run.first.half.is_multiple_of(2)
                        && !run.discard =>
                {
                    (run.first.half / 2, run.count, false)
                }
                Operand::Uniforms(run)
                    if run.first.size == Size::S32 && run.first.half.is_multiple_of(2) =>
                {
                    (run.first.half / 2, run.count, true)
                }
                _ => return Err("expected 32-bit registers or uniforms"),
            };
            if n != run_count(count, *word)? {
                return Err("expected 3 words for copy_1d, 5 for copy_2d");
            }
            put_uint(word, value, i64::from(index))?;
            set_bit(word, *flag, is_uniform);
        }
        Kind::Pair {
            value,
            uniform: flag,
        } => {
            let (half, is_uniform) = match operand {
                Operand::Value(Value::Uniform(u)) if u.size == Size::S64 => (u.half, true),
                Operand::Value(Value::Reg(r, Hint::None)) if r.size == Size::S64 => (r.half, false),
                _ => return Err("expected a 64-bit register or uniform pair"),
            };
            if !half.is_multiple_of(2) {
                return Err("pair at an odd half");
            }
            put_uint(word, value, i64::from(half))?;
            set_bit(word, *flag, is_uniform);
        }
        Kind::ImmOrReg {
            value,
            flag,
            set_means_imm,
            signed,
            reg,
        } => match operand {
            Operand::Value(Value::Imm(imm)) => {
                let width = value.width();
                let ok = if *signed {
                    *imm >= -(1 << (width - 1)) && *imm < 1 << (width - 1)
                } else {
                    *imm >= 0 && (*imm as u64) <= value.max()
                };
                if !ok {
                    return Err("immediate out of range for its field");
                }
                value.set(word, (*imm as u64) & value.max());
                set_bit(word, *flag, *set_means_imm);
            }
            Operand::Value(Value::Reg(r, Hint::None)) => {
                match (reg, r.size) {
                    (Wide::Fixed(size), _) if *size == r.size => {}
                    (Wide::Bit(at), Size::S16 | Size::S32) => {
                        set_bit(word, *at, r.size == Size::S32)
                    }
                    (Wide::NarrowBit(at), Size::S16 | Size::S32) => {
                        set_bit(word, *at, r.size == Size::S16)
                    }
                    _ => return Err("expected an immediate or a register of the right size"),
                }
                let r = gpr(u64::from(r.half), r.size)?;
                put_uint(word, value, i64::from(r.half))?;
                set_bit(word, *flag, !*set_means_imm);
            }
            _ => return Err("expected an immediate or a register of the right size"),
        },
        Kind::TgBase { value, ty } => match operand {
            Operand::Value(Value::Reg(r, Hint::None)) if r.size == Size::S16 => {
                put_uint(word, value, i64::from(r.half))?;
                ty.set(word, 0);
            }
            Operand::Value(Value::Imm(0)) => {
                value.set(word, 0);
                ty.set(word, 2);
            }
            Operand::Value(Value::Uniform(u)) if u.size == Size::S16 => {
                let u = uniform(u64::from(u.half), u.size)?;
                put_uint(word, value, i64::from(u.half & 0xFF))?;
                ty.set(word, 1 | u64::from(u.half >> 8) << 1);
            }
            _ => return Err("expected 0, a 16-bit register or a 16-bit uniform"),
        },
        Kind::Texture { value, ty } => match operand {
            Operand::Value(Value::Imm(imm)) => {
                put_uint(word, value, *imm)?;
                ty.set(word, 0);
            }
            Operand::Value(Value::Reg(r, Hint::None)) if r.size != Size::S64 => {
                let r = gpr(u64::from(r.half), r.size)?;
                put_uint(word, value, i64::from(r.half))?;
                ty.set(word, if r.size == Size::S16 { 1 } else { 3 });
            }
            Operand::Value(Value::Undefined {
                ty: 2,
                ty_bits: 2,
                index,
            }) => {
                put_uint(word, value, i64::from(*index))?;
                ty.set(word, 2);
            }
            _ => return Err("expected a texture state index or a register"),
        },
        Kind::Sampler { value, ty } => match operand {
            Operand::Value(Value::Imm(imm)) => {
                put_uint(word, value, *imm)?;
                set_bit(word, *ty, false);
            }
            Operand::Value(Value::Reg(r, Hint::None)) if r.size == Size::S16 => {
                put_uint(word, value, i64::from(r.half))?;
                set_bit(word, *ty, true);
            }
            _ => return Err("expected a sampler state index or a 16-bit register"),
        },
        Kind::TexBase { value, texture_ty } => {
            let bindless = texture_ty.get(*word) == 3;
            match operand {
                Operand::Value(Value::Uniform(u)) if bindless && u.size == Size::S64 => {
                    if !u.half.is_multiple_of(4) {
                        return Err("bindless base must start at an even uniform");
                    }
                    put_uint(word, value, i64::from(u.half / 4))?;
                }
                Operand::Value(Value::Imm(0)) if !bindless => value.set(word, 0),
                _ => return Err("bindless texture needs a uniform pair base, others None"),
            }
        }
        Kind::UniformBase(value) => match operand {
            Operand::Value(Value::Uniform(u))
                if u.size == Size::S64 && u.half.is_multiple_of(4) =>
            {
                put_uint(word, value, i64::from(u.half / 4))?;
            }
            _ => return Err("expected a uniform pair starting at an even uniform"),
        },
        Kind::Lod { value, mode, dim } => {
            let (half, ok) = match (mode.get(*word), operand) {
                (1 | 2, Operand::Value(Value::Uniform(u))) => {
                    (i64::from(u.half), u.size == Size::S16)
                }
                (5 | 6, Operand::Value(Value::Reg(r, Hint::None))) => {
                    (i64::from(r.half), r.size == Size::S16)
                }
                (9, Operand::Value(Value::Uniform(u))) => (i64::from(u.half), u.size == Size::S32),
                (13, Operand::Value(Value::Reg(r, Hint::None))) => {
                    (i64::from(r.half), r.size == Size::S32)
                }
                // The text form of one 32-bit register is a run of one.
                (13, Operand::Regs(run)) => (
                    i64::from(run.first.half),
                    run.first.size == Size::S32 && run.count == 1 && !run.discard,
                ),
                (m @ (4 | 12), Operand::Regs(run)) => {
                    let count = 2 * gradient_axes(dim.get(*word)) + u8::from(m == 12);
                    check_run(run)?;
                    let ok = run.first.size == Size::S32 && run.count == count && !run.discard;
                    (i64::from(run.first.half), ok)
                }
                (0 | 3 | 7 | 8 | 10 | 11 | 14.., Operand::Value(Value::Imm(imm))) => (*imm, true),
                _ => (0, false),
            };
            if !ok {
                return Err("LOD operand does not match the LOD mode");
            }
            put_uint(word, value, half)?;
        }
        Kind::OpName(bits, names) => {
            let value = expect_int(operand)?;
            if !names.iter().any(|(v, _)| i64::from(*v) == value) {
                return Err("not an operation of this form");
            }
            put_uint(word, bits, value)?;
        }
        Kind::Int(bits) => {
            let value = expect_int(operand)?;
            let half_range = 1i64 << (bits.width() - 1);
            if !(-half_range..half_range).contains(&value) {
                return Err("value out of range for its field");
            }
            bits.set(word, (value as u64) & bits.max());
        }
        number => match number.number_bits() {
            Some(bits) => put_uint(word, bits, expect_int(operand)?)?,
            None => return Err("operand kind without an encoder"),
        },
    }
    Ok(())
}

/// Decodes the instruction at the start of `bytes`.
pub fn decode(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    if bytes.len() < 2 {
        return Err(DecodeError::Truncated {
            needed_bytes: 2,
            available_bytes: bytes.len(),
        });
    }
    let head = load_word(&bytes[..bytes.len().min(MAX_LENGTH_BYTES)]);
    for (index, form) in FORMS.iter().enumerate() {
        let Some(len) = row_length(form, head) else {
            continue;
        };
        let word = head & length_mask(len);
        if bytes.len() < len {
            return Err(DecodeError::Truncated {
                needed_bytes: len,
                available_bytes: bytes.len(),
            });
        }
        let op = Op::ALL[index];
        let mut operands = Vec::with_capacity(form.operands.len());
        for (position, kind) in form.operands.iter().enumerate() {
            let operand =
                decode_operand(kind, word).map_err(|reason| DecodeError::InvalidOperand {
                    mnemonic: form.mnemonic,
                    position,
                    reason,
                })?;
            operands.push(operand);
        }
        let mut modifiers = 0u8;
        for (i, (at, _)) in form.modifiers.iter().enumerate() {
            if bit(word, *at) {
                modifiers |= 1 << i;
            }
        }
        let mut long = false;
        if let Length::Toggle {
            short,
            long: long_len,
            bit: at,
        } = form.length
        {
            if len == usize::from(long_len) {
                let tail = word & !length_mask(usize::from(short)) & !mask_of(at, 1);
                long = tail == 0;
            }
        }
        let mut instr = Instr {
            op,
            modifiers,
            long,
            operands,
        };
        // If the instruction did not re-encode (the round-trip tests rule
        // that out), every bit counts as unknown, so it is never run.
        let unknown_bits = ignored_bits(&mut instr, word, len).unwrap_or(word);
        return Ok(Decoded {
            instr,
            length_bytes: len,
            unknown_bits,
        });
    }
    Err(DecodeError::NoMatch {
        word: head & length_mask(bytes.len().min(8)),
    })
}

/// The bits of `word` (one instruction of `len` bytes) that `instr`, as
/// decoded from it, does not reproduce: bits no field covers and bits the
/// decoder ignored (the low index bit of a 32-bit register at an odd
/// half...). An instruction whose tail holds nothing but such bits is
/// marked long, so that its text keeps its length. `None` if it does not
/// re-encode, which the round-trip tests rule out.
fn ignored_bits(instr: &mut Instr, word: u128, len: usize) -> Option<u128> {
    let (mut bytes, mut encoded_len) = encode(instr).ok()?;
    if encoded_len < len {
        instr.long = true;
        (bytes, encoded_len) = encode(instr).ok()?;
    }
    (encoded_len == len).then(|| (word ^ load_word(&bytes[..len])) & length_mask(len))
}

/// The length of the instruction at the start of `head` if `form` is the
/// one it decodes as (its identifying bits hold, and an operation named
/// in the mnemonic is one of the form's).
fn row_length(form: &Form, head: u128) -> Option<usize> {
    let len = form_length(form, head);
    let word = head & length_mask(len);
    let unnamed_op = form.operands.iter().any(|kind| {
        matches!(kind, Kind::OpName(bits, names)
            if !names.iter().any(|(v, _)| u64::from(*v) == bits.get(word)))
    });
    (word & form.mask == form.value && !unnamed_op).then_some(len)
}

/// Encodes an instruction; returns the bytes and their number.
pub fn encode(instr: &Instr) -> Result<([u8; MAX_LENGTH_BYTES], usize), EncodeError> {
    let form = instr.op.form();
    if instr.operands.len() != form.operands.len() {
        return Err(EncodeError {
            mnemonic: form.mnemonic,
            position: None,
            reason: "wrong number of operands",
        });
    }
    let mut word = form.value;
    for (i, (at, _)) in form.modifiers.iter().enumerate() {
        set_bit(&mut word, *at, instr.modifiers & (1 << i) != 0);
    }
    if instr.modifiers >> form.modifiers.len() != 0 {
        return Err(EncodeError {
            mnemonic: form.mnemonic,
            position: None,
            reason: "unknown modifier",
        });
    }
    for pass in [false, true] {
        for (position, (kind, operand)) in form.operands.iter().zip(&instr.operands).enumerate() {
            if depends_on_others(kind) != pass {
                continue;
            }
            encode_operand(kind, operand, &mut word).map_err(|reason| EncodeError {
                mnemonic: form.mnemonic,
                position: Some(position),
                reason,
            })?;
        }
    }
    let len = match form.length {
        Length::Fixed(n) => {
            if instr.long {
                return Err(EncodeError {
                    mnemonic: form.mnemonic,
                    position: None,
                    reason: "this instruction has one length",
                });
            }
            usize::from(n)
        }
        Length::Toggle {
            short,
            long,
            bit: at,
        } => {
            if instr.long || word & !length_mask(usize::from(short)) != 0 {
                set_bit(&mut word, at, true);
                usize::from(long)
            } else {
                usize::from(short)
            }
        }
    };
    if word & !length_mask(len) != 0 {
        return Err(EncodeError {
            mnemonic: form.mnemonic,
            position: None,
            reason: "operands need bits past the instruction's length",
        });
    }
    // The identifying bits must still hold (an operand may not overwrite
    // an opcode bit), or decoding would find another form.
    if word & form.mask != form.value {
        return Err(EncodeError {
            mnemonic: form.mnemonic,
            position: None,
            reason: "operands clash with the opcode bits",
        });
    }
    let mut bytes = [0u8; MAX_LENGTH_BYTES];
    bytes.copy_from_slice(&word.to_le_bytes()[..MAX_LENGTH_BYTES]);
    Ok((bytes, len))
}
