//! Operand values: registers, uniforms, immediates and their modifiers.
//!
//! The shader core has 128 general-purpose registers (`r0`-`r127`) of 32
//! bits, each also addressable as two 16-bit halves (`r0l`, `r0h`), and 256
//! uniform registers (`u0`-`u255`) shared by a whole dispatch, with the same
//! halves. Encodings number registers in 16-bit units (`r1l` is 2, `r1h` is
//! 3), so every register here is a half index plus a size: a 32-bit register
//! starts at an even half and a 64-bit pair (`r2_r3`) is two consecutive
//! 32-bit registers.

use std::fmt;

/// The width of a register operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Size {
    /// A 16-bit half register (`r0l`).
    S16,
    /// A 32-bit register (`r0`).
    S32,
    /// A 64-bit register pair (`r0_r1`).
    S64,
}

impl Size {
    /// How many 16-bit halves an operand of this size covers.
    pub const fn halves(self) -> u16 {
        match self {
            Size::S16 => 1,
            Size::S32 => 2,
            Size::S64 => 4,
        }
    }
}

/// Number of general-purpose registers (32-bit).
pub const GPR_COUNT: u16 = 128;
/// Number of uniform registers (32-bit).
pub const UNIFORM_COUNT: u16 = 256;

/// A general-purpose register operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reg {
    /// Index of the first 16-bit half (`r3h` is 7, `r3` is 6).
    pub half: u16,
    /// Width.
    pub size: Size,
}

impl Reg {
    /// The 32-bit register `rN`.
    pub const fn r(n: u16) -> Reg {
        Reg {
            half: n * 2,
            size: Size::S32,
        }
    }
    /// The low half `rNl`.
    pub const fn l(n: u16) -> Reg {
        Reg {
            half: n * 2,
            size: Size::S16,
        }
    }
    /// The high half `rNh`.
    pub const fn h(n: u16) -> Reg {
        Reg {
            half: n * 2 + 1,
            size: Size::S16,
        }
    }
    /// The 64-bit pair `rN_rN+1`.
    pub const fn pair(n: u16) -> Reg {
        Reg {
            half: n * 2,
            size: Size::S64,
        }
    }
    /// Whether the register lies inside the file and is aligned to its
    /// size (32- and 64-bit operands start on a whole register). The
    /// encodings reach past the file (`r127_r128`, a run from `r126`);
    /// such operands decode and print, but the simulator refuses them.
    pub fn is_valid(&self) -> bool {
        let aligned = self.size == Size::S16 || self.half.is_multiple_of(2);
        aligned && self.half + self.size.halves() <= GPR_COUNT * 2
    }
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_register(f, 'r', self.half, self.size)
    }
}

/// A uniform register operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Uniform {
    /// Index of the first 16-bit half.
    pub half: u16,
    /// Width.
    pub size: Size,
}

impl Uniform {
    /// The 32-bit uniform `uN`.
    pub const fn u(n: u16) -> Uniform {
        Uniform {
            half: n * 2,
            size: Size::S32,
        }
    }
    /// The 64-bit uniform pair `uN_uN+1`.
    pub const fn pair(n: u16) -> Uniform {
        Uniform {
            half: n * 2,
            size: Size::S64,
        }
    }
}

impl Uniform {
    /// Whether the uniform lies inside the file (a pair at u255 does
    /// not).
    pub fn is_valid(&self) -> bool {
        self.half + self.size.halves() <= UNIFORM_COUNT * 2
    }
}

impl fmt::Display for Uniform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_register(f, 'u', self.half, self.size)
    }
}

fn write_register(f: &mut fmt::Formatter<'_>, prefix: char, half: u16, size: Size) -> fmt::Result {
    let n = half / 2;
    match size {
        Size::S16 => write!(
            f,
            "{prefix}{n}{}",
            if half.is_multiple_of(2) { 'l' } else { 'h' }
        ),
        Size::S32 => write!(f, "{prefix}{n}"),
        Size::S64 => write!(f, "{prefix}{n}_{prefix}{}", n + 1),
    }
}

/// A consecutive run of registers, printed `r4_r5_r6_r7` or `r0l_r0h_r1l`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegRun {
    /// The first register (16- or 32-bit).
    pub first: Reg,
    /// How many registers of that size.
    pub count: u8,
    /// The `.discard` hint (the values are dead after this read).
    pub discard: bool,
}

impl RegRun {
    /// A run without hints.
    pub const fn new(first: Reg, count: u8) -> RegRun {
        RegRun {
            first,
            count,
            discard: false,
        }
    }

    /// Whether every register of the run lies inside the file.
    pub fn is_valid(&self) -> bool {
        let halves = u16::from(self.count.max(1)) * self.first.size.halves();
        self.first.is_valid() && self.first.half + halves <= GPR_COUNT * 2
    }

    /// The `i`th register of the run.
    pub fn reg(&self, i: u16) -> Reg {
        Reg {
            half: self.first.half + i * self.first.size.halves(),
            size: self.first.size,
        }
    }
}

impl fmt::Display for RegRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let step = self.first.size.halves();
        for i in 0..u16::from(self.count.max(1)) {
            if i > 0 {
                f.write_str("_")?;
            }
            let reg = Reg {
                half: self.first.half + i * step,
                size: self.first.size,
            };
            write!(f, "{reg}")?;
        }
        if self.discard {
            f.write_str(".discard")?;
        }
        Ok(())
    }
}

/// A consecutive run of 32-bit uniforms, printed `u4_u5_u6` (the
/// descriptor of an asynchronous copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniformRun {
    /// The first uniform (32-bit).
    pub first: Uniform,
    /// How many.
    pub count: u8,
}

impl UniformRun {
    /// Whether every uniform of the run lies inside the file.
    pub fn is_valid(&self) -> bool {
        self.first.half + u16::from(self.count.max(1)) * 2 <= UNIFORM_COUNT * 2
    }
}

impl fmt::Display for UniformRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for i in 0..u16::from(self.count.max(1)) {
            if i > 0 {
                f.write_str("_")?;
            }
            write!(f, "{}", Uniform::u(self.first.half / 2 + i))?;
        }
        Ok(())
    }
}

/// The register-cache hint a GPR source carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Hint {
    /// No hint.
    #[default]
    None,
    /// Keep the value in the operand cache (`.cache`).
    Cache,
    /// The value is dead after this read (`.discard`); later reads see
    /// undefined data, so generated code never sets it.
    Discard,
}

impl fmt::Display for Hint {
    /// The hint as an operand suffix (nothing, `.cache`, `.discard`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Hint::None => "",
            Hint::Cache => ".cache",
            Hint::Discard => ".discard",
        })
    }
}

/// An 8-bit floating-point immediate: sign bit 7, exponent bits 4-6 (bias
/// 7), mantissa bits 0-3; exponent 0 is denormal. It holds values from
/// 1/64 to 31 and has no infinities or NaNs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Float8(pub u8);

impl Float8 {
    /// The value as an `f32` (exact).
    #[inline]
    pub fn to_f32(self) -> f32 {
        let exponent = u32::from((self.0 >> 4) & 7);
        let mantissa = u32::from(self.0 & 15);
        let magnitude = if exponent == 0 {
            mantissa as f32 / 64.0
        } else {
            // (16 + m) * 2^(e - 7) = 1.m * 2^(e - 3): build the fp32 bits.
            f32::from_bits((exponent + 124) << 23 | mantissa << 19)
        };
        if self.0 & 0x80 != 0 {
            -magnitude
        } else {
            magnitude
        }
    }

    /// The immediate holding exactly `value`, if there is one.
    pub fn from_f32(value: f32) -> Option<Float8> {
        (0..=255u8)
            .map(Float8)
            .find(|f| f.to_f32().to_bits() == value.to_bits())
    }
}

impl fmt::Display for Float8 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_f32())
    }
}

/// Where an ALU source's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Value {
    /// A general-purpose register, with its cache hint.
    Reg(Reg, Hint),
    /// Two consecutive registers of the given register's size, starting
    /// at it (`simd_matrix_fmadd`'s paired operands: `r4l_r4h`, `r3h_r4l`,
    /// `r8_r9`), with a cache hint.
    Pair(Reg, Hint),
    /// A uniform register.
    Uniform(Uniform),
    /// An integer immediate.
    Imm(i64),
    /// A floating-point immediate.
    Float(Float8),
    /// A source whose type code has no known meaning (types `1000` and
    /// `1100` of a 4-bit type, `000` and `101` of a compare-select
    /// result; applegpu prints `None`). Printed `undef_TYPE_INDEX` with the
    /// type in binary, so that the bytes round-trip; the simulator refuses
    /// to run it.
    Undefined {
        /// The type code.
        ty: u8,
        /// How many bits the type code has (3 or 4).
        ty_bits: u8,
        /// The 8-bit index field.
        index: u16,
    },
}

impl From<Reg> for Value {
    fn from(reg: Reg) -> Value {
        Value::Reg(reg, Hint::None)
    }
}

impl From<Uniform> for Value {
    fn from(uniform: Uniform) -> Value {
        Value::Uniform(uniform)
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Reg(reg, hint) => write!(f, "{reg}{hint}"),
            Value::Pair(first, hint) => {
                let second = Reg {
                    half: first.half + first.size.halves(),
                    size: first.size,
                };
                write!(f, "{first}_{second}{hint}")
            }
            Value::Uniform(uniform) => write!(f, "{uniform}"),
            Value::Imm(imm) => write!(f, "{imm}"),
            Value::Float(float) => write!(f, "{float}"),
            Value::Undefined { ty, ty_bits, index } => {
                write!(f, "undef_{ty:0w$b}_{index}", w = usize::from(*ty_bits))
            }
        }
    }
}

/// An ALU source operand: a value and its modifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Src {
    /// The value.
    pub value: Value,
    /// Float sources: take the absolute value (applied before `neg`).
    pub abs: bool,
    /// Float sources: negate.
    pub neg: bool,
    /// Integer sources: sign-extend from the operand's width (otherwise
    /// zero-extend).
    pub sx: bool,
}

impl Src {
    /// The source as `imadd`/`imsub` read a multiplicand: 32 bits, so a
    /// 64-bit register pair gives its low register (applegpu's hardware
    /// test of `imadd`).
    pub fn as_multiplicand(self) -> Src {
        match self.value {
            Value::Reg(r, hint) if r.size == Size::S64 => Src {
                value: Value::Reg(
                    Reg {
                        size: Size::S32,
                        ..r
                    },
                    hint,
                ),
                ..self
            },
            _ => self,
        }
    }

    /// A source without modifiers.
    pub fn new(value: impl Into<Value>) -> Src {
        Src {
            value: value.into(),
            abs: false,
            neg: false,
            sx: false,
        }
    }
}

impl From<Reg> for Src {
    fn from(reg: Reg) -> Src {
        Src::new(reg)
    }
}

impl From<Uniform> for Src {
    fn from(uniform: Uniform) -> Src {
        Src::new(uniform)
    }
}

impl fmt::Display for Src {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.value)?;
        if self.sx {
            f.write_str(".sx")?;
        }
        if self.abs {
            f.write_str(".abs")?;
        }
        if self.neg {
            f.write_str(".neg")?;
        }
        Ok(())
    }
}

/// An ALU destination: a register and whether to keep it in the operand
/// cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dst {
    /// The register written.
    pub reg: Reg,
    /// The `.cache` hint.
    pub cache: bool,
}

impl From<Reg> for Dst {
    fn from(reg: Reg) -> Dst {
        Dst { reg, cache: false }
    }
}

impl fmt::Display for Dst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.reg)?;
        if self.cache {
            f.write_str(".cache")?;
        }
        Ok(())
    }
}

/// One decoded operand. What it means, and how it prints, is given by the
/// instruction form's operand description at the same position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operand {
    /// An ALU destination register.
    Dst(Dst),
    /// An ALU source.
    Src(Src),
    /// A number: immediates, enum values, counts, masks, branch offsets.
    Int(i64),
    /// A run of consecutive registers (memory data, coordinates).
    Regs(RegRun),
    /// A run of consecutive 32-bit uniforms.
    Uniforms(UniformRun),
    /// A register, uniform or immediate that is not an ALU source
    /// (memory bases and offsets, texture and sampler handles), or a
    /// paired destination (`simd_matrix_fmadd`'s [`Value::Pair`]).
    Value(Value),
}

impl Operand {
    /// The number, if this is [`Operand::Int`].
    pub fn int(&self) -> Option<i64> {
        match self {
            Operand::Int(value) => Some(*value),
            _ => None,
        }
    }
}

impl From<Dst> for Operand {
    fn from(dst: Dst) -> Operand {
        Operand::Dst(dst)
    }
}

impl From<Src> for Operand {
    fn from(src: Src) -> Operand {
        Operand::Src(src)
    }
}

impl From<i64> for Operand {
    fn from(value: i64) -> Operand {
        Operand::Int(value)
    }
}

impl From<RegRun> for Operand {
    fn from(run: RegRun) -> Operand {
        Operand::Regs(run)
    }
}

impl From<Value> for Operand {
    fn from(value: Value) -> Operand {
        Operand::Value(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_print_in_applegpu_notation() {
        assert_eq!(Reg::l(5).to_string(), "r5l");
        assert_eq!(Reg::h(5).to_string(), "r5h");
        assert_eq!(Reg::r(5).to_string(), "r5");
        assert_eq!(Reg::pair(2).to_string(), "r2_r3");
        assert_eq!(Uniform::pair(2).to_string(), "u2_u3");
        let run = RegRun::new(Reg::r(4), 4);
        assert_eq!(run.to_string(), "r4_r5_r6_r7");
        let halves = RegRun::new(Reg::l(0), 3);
        assert_eq!(halves.to_string(), "r0l_r0h_r1l");
    }

    #[test]
    fn float8_covers_the_documented_table() {
        assert_eq!(Float8(0x00).to_f32(), 0.0);
        assert_eq!(Float8(0x01).to_f32(), 0.015625);
        assert_eq!(Float8(0x20).to_f32(), 0.5);
        assert_eq!(Float8(0x30).to_f32(), 1.0);
        assert_eq!(Float8(0x40).to_f32(), 2.0);
        assert_eq!(Float8(0x7F).to_f32(), 31.0);
        assert_eq!(Float8(0xB0).to_f32(), -1.0);
        assert_eq!(Float8(0x30).to_string(), "1.0");
        assert_eq!(Float8::from_f32(0.5), Some(Float8(0x20)));
        assert_eq!(Float8::from_f32(-0.0), Some(Float8(0x80)));
        assert_eq!(Float8::from_f32(0.1), None);
    }

    #[test]
    fn register_validity_checks_alignment_and_range() {
        assert!(Reg::r(127).is_valid());
        assert!(!Reg::pair(127).is_valid());
        assert!(!Reg {
            half: 3,
            size: Size::S32
        }
        .is_valid());
        assert!(Reg::h(127).is_valid());
    }
}
