//! The instruction table as Markdown, for `Documentation/isa.md`.

use std::fmt::Write as _;

use super::bits::Bits;
use super::form::{Count, DstSizes, Kind, Length, SrcClass, Wide};
use super::table::FORMS;

fn bits_text(bits: &Bits) -> String {
    bits.0
        .iter()
        .map(|r| {
            if r.width == 1 {
                format!("{}", r.lo)
            } else {
                format!("{}-{}", r.lo, r.lo + r.width - 1)
            }
        })
        .collect::<Vec<_>>()
        .join("+")
}

fn count_text(count: &Count) -> String {
    match count {
        Count::Fixed(n) => format!("{n}"),
        Count::Mask(bits) => format!("popcount({})", bits_text(bits)),
        Count::Channels(bits) => format!("channels {}", bits_text(bits)),
        Count::Coefficients(bits) => format!("3 x channels {}", bits_text(bits)),
        Count::Coords(bits) => format!("coords(dim {})", bits_text(bits)),
        Count::BlockCoords { explicit, dim } => {
            format!(
                "explicit {explicit} ? x, y (+ layer if dim {} is an array) : 1",
                bits_text(dim)
            )
        }
        Count::DepthStencil { z, s } => format!("z {z} / s {s}"),
        Count::AtomicData(op) => format!("op {} cmpxchg ? 2 : 1", bits_text(op)),
        Count::CompareOffset { compare, offset } => {
            format!("compare {compare} and offset {offset} ? 2 : 1")
        }
        Count::Copy(two_d) => format!("{two_d} ? 5 : 3"),
    }
}

fn kind_text(kind: &Kind) -> String {
    match kind {
        Kind::Dst { ext, sizes } => {
            let sizes = match sizes {
                DstSizes::Only16 => "16",
                DstSizes::Only32 => "32",
                DstSizes::Sized => "16/32",
                DstSizes::Sized64 => "16/32/64",
                DstSizes::Paired => "16/32 pair",
            };
            format!("dst{sizes} 7-14+{ext}")
        }
        Kind::Src { at, ext, class } => {
            let class = match class {
                SrcClass::Plain => "src",
                SrcClass::Float => "fsrc",
                SrcClass::Half => "hsrc",
                SrcClass::Int => "isrc",
                SrcClass::Wide => "wsrc",
                SrcClass::Paired { modifiers } => {
                    return format!("fsrc pair {at}+{ext} (abs/neg {modifiers})")
                }
            };
            format!("{class} {at}+{ext}")
        }
        Kind::CmpSel { at, ext } => format!("sel {at}+{ext}"),
        Kind::Uint(b) => format!("uint {}", bits_text(b)),
        Kind::Int(b) => format!("int {}", bits_text(b)),
        Kind::Enum(b, _) => format!("enum {}", bits_text(b)),
        Kind::OpName(b, _) => format!("op (in the mnemonic) {}", bits_text(b)),
        Kind::Binary(b) => format!("bin {}", bits_text(b)),
        Kind::Trailing(b) => format!("bin {} (omitted when 0)", bits_text(b)),
        Kind::TruthTable(b) => format!("tt {}", bits_text(b)),
        Kind::Mask(b) => format!("mask {}", bits_text(b)),
        Kind::Sr(b) => format!("sr {}", bits_text(b)),
        Kind::Target(b) => format!("target {}", bits_text(b)),
        Kind::Shift(b) => format!("lsl {}", bits_text(b)),
        Kind::FieldMask(b) => format!("mask m {}", bits_text(b)),
        Kind::R0l { cache } => format!("r0l (cache {cache})"),
        Kind::Regs {
            value,
            whole,
            wide,
            count,
            ..
        } => {
            let size = match wide {
                Wide::Fixed(s) => format!("{s:?}").replace('S', "r"),
                Wide::Bit(b) => format!("r16/32 by {b}"),
                Wide::NarrowBit(b) => format!("r32/16 by {b}"),
            };
            let unit = if *whole { " (32-bit index)" } else { "" };
            format!(
                "{size} x {} at {}{unit}",
                count_text(count),
                bits_text(value)
            )
        }
        Kind::Pair { value, uniform } => format!("pair {} (uniform {uniform})", bits_text(value)),
        Kind::Words {
            value,
            uniform,
            count,
        } => format!(
            "r32/u32 x {} at {} (32-bit index; uniform {uniform})",
            count_text(count),
            bits_text(value)
        ),
        Kind::ImmOrReg {
            value, flag, reg, ..
        } => match reg {
            Wide::Bit(at) => format!("imm/reg {} (flag {flag}; r16/32 by {at})", bits_text(value)),
            _ => format!("imm/reg {} (flag {flag})", bits_text(value)),
        },
        Kind::TgBase { value, ty } => {
            format!("tg base {} (type {})", bits_text(value), bits_text(ty))
        }
        Kind::Texture { value, ty } => {
            format!("texture {} (type {})", bits_text(value), bits_text(ty))
        }
        Kind::Sampler { value, ty } => format!("sampler {} (type {ty})", bits_text(value)),
        Kind::TexBase { value, .. } => format!("bindless base {}", bits_text(value)),
        Kind::UniformBase(value) => format!("uniform pair {} x4", bits_text(value)),
        Kind::Lod { value, mode, .. } => {
            format!("lod {} (mode {})", bits_text(value), bits_text(mode))
        }
        Kind::Cf(b) => format!("cf {}", bits_text(b)),
    }
}

/// The table of forms, one row each, in decode order.
pub fn forms_markdown() -> String {
    let mut out = String::from(
        "| # | mnemonic | mask / value | bytes | modifiers | operands (printed order; bit ranges, `+ext` = high index bits) |\n|---|---|---|---|---|---|\n",
    );
    for (i, form) in FORMS.iter().enumerate() {
        let length = match form.length {
            Length::Fixed(n) => format!("{n}"),
            Length::Toggle { short, long, bit } => format!("{short}/{long} (L {bit})"),
        };
        let modifiers: Vec<String> = form
            .modifiers
            .iter()
            .map(|(b, n)| format!(".{n} {b}"))
            .collect();
        let operands: Vec<String> = form.operands.iter().map(kind_text).collect();
        let _ = writeln!(
            out,
            "| {i} | `{}` | `{:#x}` / `{:#x}` | {length} | {} | {} |",
            form.mnemonic,
            form.mask,
            form.value,
            modifiers.join(", "),
            operands.join("; ")
        );
    }
    out
}
