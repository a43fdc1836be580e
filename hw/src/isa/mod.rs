//! The AGX (G13) shader instruction set.
//!
//! Every programmable stage of the GPU, and the fixed-function tile
//! load/store programs the driver writes, run as machine code on the USC
//! (unified shader core). Instructions are 2 to 12 bytes long, little
//! endian, and many have a short and a long form (see [`bits`]). This
//! module describes each instruction form once, as a row of
//! [`table::FORMS`], and derives everything else from that description:
//!
//! - [`decode`] turns bytes into an [`Instr`] (typed operands, not raw
//!   bits), reporting bits no field explains and refusing bytes no form
//!   matches;
//! - [`encode`] turns an [`Instr`] back into bytes, choosing the short
//!   form when the operands fit;
//! - [`text::print`] and [`text::parse`] / [`text::assemble`] convert to
//!   and from applegpu's assembly notation.
//!
//! ```
//! use agx_hw::isa::{self, text};
//!
//! let code = text::assemble("fadd32 r0, r1, 0.125\nstop", 0).unwrap();
//! let first = isa::decode(&code).unwrap();
//! assert_eq!(first.length_bytes, 4); // the 4-byte form: 0.125 fits
//! assert_eq!(text::print(&first.instr, 0), "fadd32 r0, r1, 0.125");
//! ```
//!
//! Layouts come from the public reverse-engineering of the G13 ISA
//! (Dougall Johnson's applegpu, Mesa's agx_pack.c); `Documentation/isa.md`
//! lists the forms and where the two sources disagree.

pub mod bits;
mod codec;
mod doc;
pub mod form;
pub mod operand;
pub mod table;
pub mod text;

use std::fmt;

pub use codec::{decode, encode};
pub use doc::forms_markdown;
pub use operand::{Dst, Float8, Hint, Operand, Reg, RegRun, Size, Src, Uniform, UniformRun, Value};
pub use table::Op;

/// The longest instruction, in bytes.
pub const MAX_LENGTH_BYTES: usize = 12;

/// A decoded instruction: its form and typed operands.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Instr {
    /// Which form.
    pub op: Op,
    /// Mnemonic flags (`.sat`): bit i is the form's i-th modifier.
    pub modifiers: u8,
    /// Use the long encoding even though the short one would hold the
    /// operands (printed `.long`).
    pub long: bool,
    /// One operand per entry of the form's operand list.
    pub operands: Vec<Operand>,
}

impl Instr {
    /// An instruction without modifiers.
    pub fn new(op: Op, operands: Vec<Operand>) -> Instr {
        Instr {
            op,
            modifiers: 0,
            long: false,
            operands,
        }
    }

    /// Whether the named modifier (`"sat"`) is set.
    pub fn has_modifier(&self, name: &str) -> bool {
        self.op
            .form()
            .modifiers
            .iter()
            .position(|(_, n)| *n == name)
            .is_some_and(|i| self.modifiers & (1 << i) != 0)
    }

    /// The truth table of a bitwise operation (bit 3: A and B, bit 2:
    /// not A and B, bit 1: A and not B, bit 0: neither) and the index of
    /// its destination operand: `mov`, `not`, `and`, `or`, `xor`, `nand`,
    /// `nor` and `xnor` are `bitop` with a fixed table; `bitop` carries
    /// its table as operand 0. `None` for other instructions (or a
    /// `bitop` without its table).
    pub fn bitwise_table(&self) -> Option<(u32, usize)> {
        Some(match self.op {
            Op::Mov => (0b1010, 0),
            Op::Not => (0b0101, 0),
            Op::And => (0b1000, 0),
            Op::Or => (0b1110, 0),
            Op::Xor => (0b0110, 0),
            Op::Nand => (0b0111, 0),
            Op::Nor => (0b0001, 0),
            Op::Xnor => (0b1001, 0),
            Op::Bitop => (u32::try_from(self.int(0)?).ok()?, 1),
            _ => return None,
        })
    }

    /// The `i`th operand as a number (immediates, enums, counts).
    pub fn int(&self, i: usize) -> Option<i64> {
        self.operands.get(i).and_then(Operand::int)
    }

    /// The first operand the hardware's behaviour is not defined for,
    /// with why: a register or uniform past the end of its file (the
    /// encodings reach `r127_r128` and runs from `r126`), or a source type
    /// with no known meaning. Such instructions decode and print; the
    /// simulator refuses to run them.
    pub fn undefined_operand(&self) -> Option<(usize, &'static str)> {
        fn value_problem(value: &Value) -> Option<&'static str> {
            match value {
                Value::Reg(reg, _) if !reg.is_valid() => Some("register past r127"),
                Value::Pair(reg, _) if !RegRun::new(*reg, 2).is_valid() => {
                    Some("register past r127")
                }
                Value::Uniform(u) if !u.is_valid() => Some("uniform past u255"),
                Value::Undefined { .. } => Some("source type with no known meaning"),
                _ => None,
            }
        }
        self.operands.iter().enumerate().find_map(|(i, operand)| {
            let problem = match operand {
                Operand::Dst(dst) if !dst.reg.is_valid() => Some("register past r127"),
                Operand::Src(src) => value_problem(&src.value),
                Operand::Value(value) => value_problem(value),
                Operand::Regs(run) if !run.is_valid() => Some("registers past r127"),
                Operand::Uniforms(run) if !run.is_valid() => Some("uniforms past u255"),
                _ => None,
            };
            problem.map(|p| (i, p))
        })
    }
}

impl fmt::Display for Instr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&text::print(self, 0))
    }
}

/// The result of decoding one instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The instruction.
    pub instr: Instr,
    /// Its length in bytes.
    pub length_bytes: usize,
    /// Set bits that no field of the form explains (zero for everything
    /// the encoder produces).
    pub unknown_bits: u128,
}

/// Why bytes did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// No form's opcode bits match.
    #[error("no instruction form matches {word:#x}")]
    NoMatch {
        /// The bytes (up to 8) as a little-endian number.
        word: u128,
    },
    /// The matching form is longer than the bytes available.
    #[error("instruction needs {needed_bytes} bytes, only {available_bytes} available")]
    Truncated {
        /// The instruction's length.
        needed_bytes: usize,
        /// Bytes available.
        available_bytes: usize,
    },
    /// A form matched but an operand's bits mean nothing.
    #[error("{mnemonic}: operand {position}: {reason}")]
    InvalidOperand {
        /// The form's mnemonic.
        mnemonic: &'static str,
        /// Which operand (0-based, in printed order).
        position: usize,
        /// What is wrong.
        reason: &'static str,
    },
}

/// Why an instruction did not encode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{mnemonic}{}: {reason}", position.map(|p| format!(": operand {p}")).unwrap_or_default())]
pub struct EncodeError {
    /// The form's mnemonic.
    pub mnemonic: &'static str,
    /// Which operand, if one is at fault.
    pub position: Option<usize>,
    /// What is wrong.
    pub reason: &'static str,
}

/// An assembly error, with its 1-based line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct AsmError {
    /// The source line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

#[cfg(test)]
mod tests;

/// The pass type a fragment program needs, as Mesa's linker
/// (`agx_linker.c`) chooses it from what its compiler reports: a program
/// that reads the tilebuffer (`ld_tile`: blending, logic ops, colour
/// masks, framebuffer fetch) is translucent, one that writes a sample
/// mask (`sample_mask`: discard, alpha to coverage) punches through, one
/// that does both is translucent punch through, any other is opaque and
/// the hidden-surface removal may skip it where a later primitive covers
/// it. `code` is scanned instruction by instruction to its end or to the
/// first bytes no form decodes.
pub fn fragment_pass_type(code: &[u8]) -> crate::formats::PassType {
    use crate::formats::PassType;
    let (mut reads_tilebuffer, mut writes_sample_mask) = (false, false);
    let mut at = 0;
    while at < code.len() {
        let Ok(decoded) = decode(&code[at..]) else {
            break;
        };
        match decoded.instr.op {
            Op::LdTile => reads_tilebuffer = true,
            Op::SampleMask => writes_sample_mask = true,
            _ => {}
        }
        at += decoded.length_bytes;
    }
    match (reads_tilebuffer, writes_sample_mask) {
        (true, true) => PassType::TranslucentPunchThrough,
        (true, false) => PassType::Translucent,
        (false, true) => PassType::PunchThrough,
        (false, false) => PassType::Opaque,
    }
}
