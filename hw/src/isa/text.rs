//! Assembly text: printing (disassembly) and parsing (assembly).
//!
//! The notation is applegpu's: the mnemonic with `.flag` suffixes, then the
//! operands separated by commas (`fadd32 r0, r1.abs, 0.5`,
//! `device_load 0, i32, xyzw, r4_r5_r6_r7, u2_u3, r1, unsigned`). Two
//! additions make text round-trip to the same bytes: a long encoding that
//! the short one could have held prints a `.long` suffix, and branch
//! targets print as absolute addresses (`0x40`) that the assembler turns
//! back into offsets, or as labels in hand-written source.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::form::{DstSizes, Kind, SrcClass};
use super::operand::{
    Dst, Float8, Hint, Operand, Reg, RegRun, Size, Src, Uniform, UniformRun, Value,
};
use super::table::{Op, SPECIAL_REGISTERS};
use super::{decode, encode, AsmError, Instr, MAX_LENGTH_BYTES};

fn name_of(names: &[(u32, &'static str)], value: i64) -> Option<&'static str> {
    names
        .iter()
        .find(|(v, _)| i64::from(*v) == value)
        .map(|(_, n)| *n)
}

fn mask_text(mask: i64) -> String {
    if mask == 0 {
        return "0".into();
    }
    "xyzw"
        .chars()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, c)| c)
        .collect()
}

/// Prints one operand. `pc` is the instruction's address, for branch
/// targets.
fn operand_text(kind: &Kind, operand: &Operand, pc: u64) -> String {
    match (kind, operand) {
        (Kind::Enum(_, names), Operand::Int(v)) => {
            name_of(names, *v).map_or_else(|| v.to_string(), str::to_string)
        }
        (Kind::Binary(bits) | Kind::Trailing(bits), Operand::Int(v)) => {
            format!("0b{:0width$b}", v, width = bits.width() as usize)
        }
        (Kind::TruthTable(_), Operand::Int(v)) => (0..4)
            .map(|i| if v >> i & 1 != 0 { '1' } else { '0' })
            .collect(),
        (Kind::Mask(_), Operand::Int(v)) => mask_text(*v),
        (Kind::Sr(_), Operand::Int(v)) => match name_of(SPECIAL_REGISTERS, *v) {
            Some(name) => format!("sr{v} ({name})"),
            None => format!("sr{v}"),
        },
        (Kind::Target(_), Operand::Int(v)) => format!("0x{:x}", pc.wrapping_add(*v as u64)),
        (Kind::Shift(_), Operand::Int(v)) => format!("lsl {v}"),
        (Kind::FieldMask(_), Operand::Int(v)) => {
            format!(
                "mask 0x{:X}",
                1u64.checked_shl(*v as u32).unwrap_or(0).wrapping_sub(1)
            )
        }
        (Kind::Cf(_), Operand::Int(v)) => format!("cf{v}"),
        (Kind::Texture { .. }, Operand::Value(Value::Imm(v))) => format!("ts{v}"),
        (Kind::Sampler { .. }, Operand::Value(Value::Imm(v))) => format!("ss{v}"),
        (Kind::TexBase { .. }, Operand::Value(Value::Imm(_))) => "None".into(),
        (_, Operand::Int(v)) => v.to_string(),
        (_, Operand::Dst(dst)) => dst.to_string(),
        (_, Operand::Src(src)) => src.to_string(),
        (_, Operand::Regs(run)) => run.to_string(),
        (_, Operand::Uniforms(run)) => run.to_string(),
        (_, Operand::Value(value)) => value.to_string(),
    }
}

/// The mnemonic of a decoded instruction: the form's, with the name of
/// its [`Kind::OpName`] operand in place of `{}`.
pub fn mnemonic(instr: &Instr) -> String {
    let form = instr.op.form();
    let op_name = form
        .operands
        .iter()
        .zip(&instr.operands)
        .find_map(|(kind, operand)| match (kind, operand) {
            (Kind::OpName(_, names), Operand::Int(v)) => Some(name_of(names, *v).unwrap_or("?")),
            _ => None,
        });
    match op_name {
        Some(name) => form.mnemonic.replace("{}", name),
        None => form.mnemonic.to_string(),
    }
}

/// Prints an instruction at address `pc` in assembly notation.
pub fn print(instr: &Instr, pc: u64) -> String {
    let form = instr.op.form();
    let mut text = mnemonic(instr);
    for (i, (_, name)) in form.modifiers.iter().enumerate() {
        if instr.modifiers & (1 << i) != 0 {
            let _ = write!(text, ".{name}");
        }
    }
    if instr.long {
        text.push_str(".long");
    }
    let operands: Vec<String> = form
        .operands
        .iter()
        .zip(&instr.operands)
        .filter(|(kind, operand)| {
            !(kind.optional() && operand.int() == Some(0) || matches!(kind, Kind::OpName(..)))
        })
        .map(|(kind, operand)| operand_text(kind, operand, pc))
        .collect();
    if !operands.is_empty() {
        text.push(' ');
        text.push_str(&operands.join(", "));
    }
    text
}

fn parse_int(text: &str) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let magnitude = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        u64::from_str_radix(hex, 16).ok()? as i64
    } else if let Some(bin) = digits.strip_prefix("0b") {
        i64::from_str_radix(bin, 2).ok()?
    } else {
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()?
    };
    if negative {
        magnitude.checked_neg()
    } else {
        Some(magnitude)
    }
}

/// Parses `r5l`, `r5h`, `r5`, `r4_r5` (prefix `r` or `u`) into a half
/// index and size.
fn parse_register(text: &str, prefix: char) -> Option<(u16, Size)> {
    let rest = text.strip_prefix(prefix)?;
    if let Some((first, second)) = rest.split_once('_') {
        let n: u16 = first.parse().ok()?;
        let m: u16 = second.strip_prefix(prefix)?.parse().ok()?;
        if Some(m) != n.checked_add(1) || first.starts_with('+') {
            return None;
        }
        return Some((n.checked_mul(2)?, Size::S64));
    }
    let (digits, half) = match rest.as_bytes().last()? {
        b'l' => (&rest[..rest.len() - 1], Some(0)),
        b'h' => (&rest[..rest.len() - 1], Some(1)),
        _ => (rest, None),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u16 = digits.parse().ok()?;
    let base = n.checked_mul(2)?;
    Some(match half {
        Some(h) => (base + h, Size::S16),
        None => (base, Size::S32),
    })
}

fn parse_reg(text: &str) -> Option<Reg> {
    parse_register(text, 'r').map(|(half, size)| Reg { half, size })
}

/// Parses a run `r4_r5_r6_r7` or `r0l_r0h_r1l`, with an optional
/// `.discard`.
fn parse_run(text: &str) -> Option<RegRun> {
    let (body, discard) = match text.strip_suffix(".discard") {
        Some(body) => (body, true),
        None => (text, false),
    };
    let parts: Vec<&str> = body.split('_').collect();
    let regs: Vec<Reg> = parts.iter().map(|p| parse_reg(p)).collect::<Option<_>>()?;
    let first = *regs.first()?;
    for (i, reg) in regs.iter().enumerate() {
        let expected = (i as u16)
            .checked_mul(first.size.halves())
            .and_then(|o| first.half.checked_add(o));
        if reg.size != first.size || Some(reg.half) != expected {
            return None;
        }
    }
    Some(RegRun {
        first,
        count: u8::try_from(regs.len()).ok()?,
        discard,
    })
}

/// Parses a run of 32-bit uniforms `u4_u5_u6`.
fn parse_uniform_run(text: &str) -> Option<UniformRun> {
    let mut halves = text.split('_').map(|part| match parse_register(part, 'u') {
        Some((half, Size::S32)) => Some(half),
        _ => None,
    });
    let first = halves.next()??;
    let mut count = 1u8;
    for half in halves {
        if Some(half?) != first.checked_add(2 * u16::from(count)) {
            return None;
        }
        count = count.checked_add(1)?;
    }
    Some(UniformRun {
        first: Uniform {
            half: first,
            size: Size::S32,
        },
        count,
    })
}

/// A paired operand's register as text gives it: `r8_r9` (which reads as
/// one 64-bit register) is the pair of 32-bit registers from r8.
fn paired(value: Value) -> Value {
    match value {
        Value::Reg(reg, hint) if reg.size == Size::S64 => Value::Pair(
            Reg {
                half: reg.half,
                size: Size::S32,
            },
            hint,
        ),
        other => other,
    }
}

/// Splits `base.flag.flag` into the base and its flags.
fn split_flags(text: &str) -> (&str, Vec<&str>) {
    // A float immediate has its own dot: keep "1.5" together.
    let mut parts = text.split('.');
    let mut base_len = parts.next().map_or(0, str::len);
    let rest: Vec<&str> = parts.collect();
    let mut flags = Vec::new();
    for (i, part) in rest.iter().enumerate() {
        if i == 0 && !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
            base_len += 1 + part.len();
        } else {
            flags.push(*part);
        }
    }
    (&text[..base_len], flags)
}

/// Parses `undef_TYPE_INDEX` (a source type with no known meaning; the
/// type in binary, its digit count giving the type field's width).
fn parse_undefined(text: &str) -> Option<Value> {
    let (ty, index) = text.strip_prefix("undef_")?.split_once('_')?;
    if !(2..=4).contains(&ty.len()) {
        return None;
    }
    Some(Value::Undefined {
        ty: u8::from_str_radix(ty, 2).ok()?,
        ty_bits: ty.len() as u8,
        index: index.parse().ok()?,
    })
}

fn parse_value(base: &str, float: bool) -> Result<Value, String> {
    if let Some(value) = parse_undefined(base) {
        return Ok(value);
    }
    if let Some(reg) = parse_reg(base) {
        return Ok(Value::Reg(reg, Hint::None));
    }
    // Two halves: a paired 16-bit operand (`r4l_r4h`, `r3h_r4l`).
    if let Some(run) = parse_run(base).filter(|r| r.count == 2 && r.first.size == Size::S16) {
        return Ok(Value::Pair(run.first, Hint::None));
    }
    if let Some((half, size)) = parse_register(base, 'u') {
        return Ok(Value::Uniform(Uniform { half, size }));
    }
    if float {
        let value: f32 = base
            .parse()
            .map_err(|_| format!("`{base}` is not a register or number"))?;
        return Float8::from_f32(value).map(Value::Float).ok_or_else(|| {
            format!("{base} is not an 8-bit float immediate (load it with mov_imm)")
        });
    }
    parse_int(base)
        .map(Value::Imm)
        .ok_or_else(|| format!("`{base}` is not a register or number"))
}

fn parse_src(text: &str, float: bool) -> Result<Src, String> {
    let (base, flags) = split_flags(text);
    let mut value = parse_value(base, float)?;
    let mut src = Src::new(Value::Imm(0));
    for flag in flags {
        match (flag, &mut value) {
            ("cache", Value::Reg(_, hint) | Value::Pair(_, hint)) => *hint = Hint::Cache,
            ("discard", Value::Reg(_, hint) | Value::Pair(_, hint)) => *hint = Hint::Discard,
            ("abs", _) => src.abs = true,
            ("neg", _) => src.neg = true,
            ("sx", _) => src.sx = true,
            _ => return Err(format!("unknown modifier `.{flag}` on `{text}`")),
        }
    }
    src.value = value;
    Ok(src)
}

fn parse_dst(text: &str) -> Result<Dst, String> {
    let (base, cache) = match text.strip_suffix(".cache") {
        Some(base) => (base, true),
        None => (text, false),
    };
    let reg = parse_reg(base).ok_or_else(|| format!("`{text}` is not a register"))?;
    Ok(Dst { reg, cache })
}

fn parse_named(names: &[(u32, &str)], text: &str) -> Result<i64, String> {
    names
        .iter()
        .find(|(_, n)| *n == text)
        .map(|(v, _)| i64::from(*v))
        .or_else(|| parse_int(text))
        .ok_or_else(|| format!("`{text}` is not a known name or a number"))
}

fn parse_mask(text: &str) -> Result<i64, String> {
    if let Some(v) = parse_int(text) {
        return Ok(v);
    }
    let mut mask = 0;
    let mut last = -1;
    for c in text.chars() {
        let i = "xyzw"
            .find(c)
            .ok_or_else(|| format!("`{text}` is not a component mask"))? as i64;
        if i <= last {
            return Err(format!("`{text}`: components must be in xyzw order"));
        }
        last = i;
        mask |= 1 << i;
    }
    Ok(mask)
}

/// Context for resolving branch targets while parsing.
struct Targets<'a> {
    pc: u64,
    labels: Option<&'a HashMap<String, u64>>,
}

fn parse_operand(kind: &Kind, text: &str, targets: &Targets<'_>) -> Result<Operand, String> {
    let bad = |what: &str| format!("`{text}` is not {what}");
    Ok(match kind {
        Kind::Dst {
            sizes: DstSizes::Paired,
            ..
        } => {
            let src = parse_src(text, false)?;
            if src.abs || src.neg || src.sx {
                return Err(bad("a register pair"));
            }
            Operand::Value(paired(src.value))
        }
        Kind::Dst { .. } | Kind::R0l { .. } => Operand::Dst(parse_dst(text)?),
        Kind::Src {
            class: SrcClass::Paired { .. },
            ..
        } => {
            let mut src = parse_src(text, true)?;
            src.value = paired(src.value);
            Operand::Src(src)
        }
        Kind::Src { class, .. } => Operand::Src(parse_src(
            text,
            matches!(class, SrcClass::Float | SrcClass::Half),
        )?),
        Kind::CmpSel { .. } => Operand::Src(parse_src(text, false)?),
        Kind::Uint(_) | Kind::Int(_) | Kind::OpName(..) => {
            Operand::Int(parse_int(text).ok_or_else(|| bad("a number"))?)
        }
        Kind::Enum(_, names) => Operand::Int(parse_named(names, text)?),
        Kind::Binary(_) | Kind::Trailing(_) => {
            Operand::Int(parse_int(text).ok_or_else(|| bad("a binary number"))?)
        }
        Kind::TruthTable(_) => {
            if text.len() != 4 || !text.bytes().all(|b| b == b'0' || b == b'1') {
                return Err(bad("a 4-digit truth table"));
            }
            Operand::Int(
                text.bytes()
                    .enumerate()
                    .map(|(i, b)| i64::from(b - b'0') << i)
                    .sum(),
            )
        }
        Kind::Mask(_) => Operand::Int(parse_mask(text)?),
        Kind::Sr(_) => {
            let head = text.split_whitespace().next().unwrap_or("");
            let number = head.strip_prefix("sr").and_then(parse_int);
            let by_name = SPECIAL_REGISTERS
                .iter()
                .find(|(_, n)| *n == head)
                .map(|(v, _)| i64::from(*v));
            Operand::Int(
                number
                    .or(by_name)
                    .ok_or_else(|| bad("a special register"))?,
            )
        }
        Kind::Target(_) => {
            let target = if let Some(labels) = targets.labels.and_then(|l| l.get(text)) {
                *labels
            } else if let Some(rel) = text.strip_prefix("pc") {
                let rel = rel.trim_start_matches('+');
                targets
                    .pc
                    .wrapping_add(parse_int(rel).ok_or_else(|| bad("a branch target"))? as u64)
            } else if let Some(abs) = parse_int(text) {
                abs as u64
            } else if targets.labels.is_none() && is_label_name(text) {
                targets.pc // first pass: labels not yet known
            } else {
                return Err(format!("unknown label `{text}`"));
            };
            Operand::Int(target.wrapping_sub(targets.pc) as i64)
        }
        Kind::Shift(_) => Operand::Int(
            text.strip_prefix("lsl")
                .and_then(|n| parse_int(n.trim()))
                .ok_or_else(|| bad("`lsl N`"))?,
        ),
        Kind::FieldMask(_) => {
            let mask = text
                .strip_prefix("mask")
                .and_then(|n| parse_int(n.trim()))
                .ok_or_else(|| bad("`mask 0x...`"))?;
            if !(1..=0x7FFF_FFFF).contains(&mask) || (mask + 1) & mask != 0 {
                return Err(bad("a mask of 1 to 31 low bits"));
            }
            let m = (mask + 1).trailing_zeros();
            Operand::Int(i64::from(m))
        }
        Kind::Cf(_) => Operand::Int(
            text.strip_prefix("cf")
                .and_then(parse_int)
                .ok_or_else(|| bad("a coefficient register cfN"))?,
        ),
        Kind::Regs { .. } => Operand::Regs(parse_run(text).ok_or_else(|| bad("a register run"))?),
        Kind::Words { .. } => match parse_uniform_run(text) {
            Some(run) => Operand::Uniforms(run),
            None => Operand::Regs(parse_run(text).ok_or_else(|| bad("a register run"))?),
        },
        Kind::Lod { .. } => match parse_run(text) {
            Some(run) if run.count > 1 || run.first.size == Size::S32 => Operand::Regs(run),
            _ => Operand::Value(parse_value(text, false)?),
        },
        // A register field whose flag says "none" (the atomics' optional
        // destination): applegpu prints `None`, this stack `0`.
        Kind::ImmOrReg {
            set_means_imm: false,
            ..
        } if text == "None" => Operand::Value(Value::Imm(0)),
        Kind::Pair { .. } | Kind::ImmOrReg { .. } | Kind::TgBase { .. } | Kind::UniformBase(_) => {
            Operand::Value(parse_value(text, false)?)
        }
        Kind::Texture { .. } => match text.strip_prefix("ts").and_then(parse_int) {
            Some(index) => Operand::Value(Value::Imm(index)),
            None => Operand::Value(parse_value(text, false)?),
        },
        Kind::Sampler { .. } => match text.strip_prefix("ss").and_then(parse_int) {
            Some(index) => Operand::Value(Value::Imm(index)),
            None => Operand::Value(parse_value(text, false)?),
        },
        Kind::TexBase { .. } => {
            if text == "None" {
                Operand::Value(Value::Imm(0))
            } else {
                Operand::Value(parse_value(text, false)?)
            }
        }
    })
}

fn keyword_of(kind: &Kind) -> Option<&'static str> {
    match kind {
        Kind::Shift(_) => Some("lsl"),
        Kind::FieldMask(_) => Some("mask"),
        _ => None,
    }
}

/// How an instruction's head (`fadd32.sat`, `simd_min.u`) matched a form.
enum Match<'a> {
    /// The form's mnemonic, then the rest of the head: nothing, or
    /// `.`-separated flags starting with their dot.
    Suffixes(&'a str),
    /// The form's `{}` template, with this operation name.
    OpName(&'a str),
}

/// Parses one instruction's text (no label, no comment) at address `pc`.
fn parse_instr(
    text: &str,
    pc: u64,
    labels: Option<&HashMap<String, u64>>,
) -> Result<(Instr, [u8; MAX_LENGTH_BYTES], usize), String> {
    let text = text.trim();
    let (head, rest) = match text.find(char::is_whitespace) {
        Some(i) => (&text[..i], text[i..].trim()),
        None => (text, ""),
    };
    let mnemonic = head.split('.').next().unwrap_or("");
    let texts: Vec<&str> = if rest.is_empty() {
        Vec::new()
    } else {
        rest.split(',').map(str::trim).collect()
    };
    let targets = Targets { pc, labels };
    let mut first_error = None;
    // Forms whose mnemonic begins the text (a mnemonic may hold a dot:
    // `device_load.TODO`), the rest being `.flag` suffixes, come first;
    // then the forms with the operation in the mnemonic (`simd_{}`), which
    // match the whole head (an operation name may hold a dot:
    // `simd_min.u`) when it names one of their operations.
    // The longest mnemonic first, so that an error comes from the form
    // the text names (`device_load.TODO`, not `device_load` with a flag).
    let mut exact: Vec<(Op, Match<'_>)> = Op::ALL
        .iter()
        .filter_map(|&op| {
            let rest = head.strip_prefix(op.mnemonic())?;
            (rest.is_empty() || rest.starts_with('.')).then_some((op, Match::Suffixes(rest)))
        })
        .collect();
    exact.sort_by_key(|(op, _)| std::cmp::Reverse(op.mnemonic().len()));
    let templated = Op::ALL.iter().filter_map(|&op| {
        let (before, after) = op.mnemonic().split_once("{}")?;
        let name = head.strip_prefix(before)?.strip_suffix(after)?;
        let named = op.form().operands.iter().any(
            |kind| matches!(kind, Kind::OpName(_, names) if names.iter().any(|(_, n)| *n == name)),
        );
        named.then_some((op, Match::OpName(name)))
    });
    let candidates = exact.into_iter().chain(templated);
    for (op, matched) in candidates {
        let parsed = match matched {
            Match::Suffixes("") => parse_with_form(op, &[], &texts, &targets),
            Match::Suffixes(suffixes) => {
                // After the dot the rest begins with: `.` alone is a flag
                // with no name, refused as one.
                let suffixes: Vec<&str> = suffixes[1..].split('.').collect();
                parse_with_form(op, &suffixes, &texts, &targets)
            }
            Match::OpName(name) => parse_with_op_name(op, name, &texts, &targets),
        };
        match parsed {
            Ok(instr) => match encode(&instr) {
                Ok((bytes, len)) => return Ok((instr, bytes, len)),
                Err(e) => {
                    first_error.get_or_insert(e.to_string());
                }
            },
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| format!("unknown mnemonic `{mnemonic}`")))
}

fn parse_with_form(
    op: Op,
    suffixes: &[&str],
    texts: &[&str],
    targets: &Targets<'_>,
) -> Result<Instr, String> {
    let form = op.form();
    let mut instr = Instr {
        op,
        modifiers: 0,
        long: false,
        operands: Vec::new(),
    };
    for suffix in suffixes {
        if *suffix == "long" {
            instr.long = true;
            continue;
        }
        let index = form
            .modifiers
            .iter()
            .position(|(_, name)| name == suffix)
            .ok_or_else(|| format!("`{}` takes no `.{suffix}`", form.mnemonic))?;
        instr.modifiers |= 1 << index;
    }
    let mut next = 0;
    for kind in form.operands {
        let text = texts.get(next).copied();
        if matches!(kind, Kind::Trailing(_)) && text.is_none() {
            instr.operands.push(Operand::Int(0));
            continue;
        }
        if matches!(kind, Kind::OpName(..)) {
            // Named in the mnemonic: `parse_with_op_name` fills it in.
            instr.operands.push(Operand::Int(0));
            continue;
        }
        if let Some(keyword) = keyword_of(kind) {
            match text {
                Some(t) if t.starts_with(keyword) => {}
                _ => {
                    instr.operands.push(Operand::Int(0));
                    continue;
                }
            }
        }
        let text = text
            .ok_or_else(|| format!("`{}` needs {} operands", form.mnemonic, form.operands.len()))?;
        instr.operands.push(parse_operand(kind, text, targets)?);
        next += 1;
    }
    if next != texts.len() {
        return Err(format!("`{}`: too many operands", form.mnemonic));
    }
    Ok(instr)
}

/// Parses an instruction whose operation is named in its mnemonic.
fn parse_with_op_name(
    op: Op,
    name: &str,
    texts: &[&str],
    targets: &Targets<'_>,
) -> Result<Instr, String> {
    let form = op.form();
    let value = form
        .operands
        .iter()
        .find_map(|kind| match kind {
            Kind::OpName(_, names) => names.iter().find(|(_, n)| *n == name),
            _ => None,
        })
        .map(|(v, _)| i64::from(*v))
        .ok_or_else(|| format!("`{name}` is not an operation of `{}`", form.mnemonic))?;
    let mut instr = parse_with_form(op, &[], texts, targets)?;
    if let Some(slot) = form
        .operands
        .iter()
        .position(|kind| matches!(kind, Kind::OpName(..)))
    {
        instr.operands[slot] = Operand::Int(value);
    }
    Ok(instr)
}

/// Parses one instruction's text. Branch targets are absolute addresses
/// (`0x40`) or `pc+N`, resolved against `pc`.
pub fn parse(text: &str, pc: u64) -> Result<Instr, String> {
    let empty = HashMap::new();
    parse_instr(text, pc, Some(&empty)).map(|(instr, _, _)| instr)
}

/// Strips a comment (`;`, `//` or `#` to the end of the line).
fn strip_comment(line: &str) -> &str {
    let mut end = line.len();
    for marker in [";", "//", "#"] {
        if let Some(i) = line.find(marker) {
            end = end.min(i);
        }
    }
    &line[..end]
}

/// Strips a disassembly listing prefix `0x1234: 2a8142422400` (address,
/// then the bytes, which the text determines and so are ignored).
fn strip_listing(line: &str) -> &str {
    let trimmed = line.trim_start();
    let Some(rest) = trimmed.strip_prefix("0x") else {
        return line;
    };
    let Some((address, after)) = rest.split_once(':') else {
        return line;
    };
    if address.is_empty() || !address.bytes().all(|b| b.is_ascii_hexdigit()) {
        return line;
    }
    let after = after.trim_start();
    match after.split_once(char::is_whitespace) {
        Some((bytes, text)) if bytes.bytes().all(|b| b.is_ascii_hexdigit()) => text,
        _ if after.bytes().all(|b| b.is_ascii_hexdigit()) => "",
        _ => after,
    }
}

/// Whether `text` can name a label: an identifier that is not also a
/// register or uniform name.
fn is_label_name(text: &str) -> bool {
    let mut bytes = text.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b'.');
    first_ok
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        && parse_register(text, 'r').is_none()
        && parse_register(text, 'u').is_none()
}

/// Splits leading `label:` definitions off a line.
fn split_labels(line: &str) -> (Vec<&str>, &str) {
    let mut labels = Vec::new();
    let mut rest = line.trim();
    while let Some((name, after)) = rest.split_once(':') {
        let is_label = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
            && !name.as_bytes()[0].is_ascii_digit();
        if !is_label {
            break;
        }
        labels.push(name);
        rest = after.trim();
    }
    (labels, rest)
}

/// Assembles source text placed at address `base` into machine code.
///
/// Each line holds at most one instruction, optionally preceded by
/// `label:` definitions; comments start with `;`, `//` or `#`. Lines of a
/// disassembly listing (`0x10: <bytes> <text>`) are accepted too.
pub fn assemble(source: &str, base: u64) -> Result<Vec<u8>, AsmError> {
    let lines: Vec<(usize, Vec<&str>, &str)> = source
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let (labels, text) = split_labels(strip_listing(strip_comment(line)));
            (i + 1, labels, text)
        })
        .collect();
    // Pass 1: sizes and label addresses (targets are placeholders).
    let mut labels = HashMap::new();
    let mut lengths = Vec::new();
    let mut pc = base;
    for (line, names, text) in &lines {
        for name in names {
            if labels.insert((*name).to_string(), pc).is_some() {
                return Err(AsmError {
                    line: *line,
                    message: format!("label `{name}` defined twice"),
                });
            }
        }
        if !text.is_empty() {
            let (_, _, len) = parse_instr(text, pc, None).map_err(|message| AsmError {
                line: *line,
                message,
            })?;
            pc += len as u64;
            lengths.push(len);
        }
    }
    // Pass 2: encode with resolved targets. Branch forms are fixed-length
    // and pass 1 only takes label-shaped text as a (placeholder) target, so
    // the addresses from pass 1 hold; a change would be an error.
    let mut code = Vec::new();
    let mut pass_one_lengths = lengths.into_iter();
    let mut placed = Vec::new();
    for (line, _, text) in &lines {
        if text.is_empty() {
            continue;
        }
        let pc = base + code.len() as u64;
        let (instr, bytes, len) =
            parse_instr(text, pc, Some(&labels)).map_err(|message| AsmError {
                line: *line,
                message,
            })?;
        if pass_one_lengths.next() != Some(len) {
            return Err(AsmError {
                line: *line,
                message: "instruction length changed once labels were known".into(),
            });
        }
        placed.push((*line, instr.op, code.len(), len));
        code.extend_from_slice(&bytes[..len]);
    }
    // Pass 3: the code reads back as written. An instruction's identity
    // can depend on the bits after it (a 6-byte `simd_shuf_op` with bit 27
    // set is an 8-byte `simd_matrix_fmadd` when the next instruction's
    // second byte has its top bit set), so each is decoded in place.
    for (line, op, at, len) in placed {
        match decode(&code[at..]) {
            Ok(read) if read.length_bytes == len => {}
            read => {
                let read_as = read.map_or_else(
                    |e| e.to_string(),
                    |d| format!("`{}` of {} bytes", d.instr.op.mnemonic(), d.length_bytes),
                );
                return Err(AsmError {
                    line,
                    message: format!(
                        "`{}` of {len} bytes reads back, with what follows it, as {read_as}",
                        op.mnemonic()
                    ),
                });
            }
        }
    }
    Ok(code)
}

/// One line of a disassembly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The instruction's address.
    pub address: u64,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// The instruction text, or a description of why the bytes did not
    /// decode.
    pub text: String,
    /// Set bits no field of the form explains.
    pub unknown_bits: u128,
    /// Whether the bytes decoded.
    pub ok: bool,
}

/// Disassembles `code` placed at `base`. Stops after `stop` when
/// `until_stop` is set; bytes that decode as nothing end the listing with
/// an error line (the length of unknown bytes is unknowable).
pub fn disassemble(code: &[u8], base: u64, until_stop: bool) -> Vec<Line> {
    let mut lines = Vec::new();
    let mut offset = 0;
    while offset < code.len() {
        let address = base + offset as u64;
        match decode(&code[offset..]) {
            Ok(decoded) => {
                let len = decoded.length_bytes;
                let mut text = print(&decoded.instr, address);
                if decoded.unknown_bits != 0 {
                    let _ = write!(text, " ; unknown bits 0x{:x}", decoded.unknown_bits);
                }
                lines.push(Line {
                    address,
                    bytes: code[offset..offset + len].to_vec(),
                    text,
                    unknown_bits: decoded.unknown_bits,
                    ok: true,
                });
                offset += len;
                if until_stop && decoded.instr.op == Op::Stop {
                    break;
                }
            }
            Err(error) => {
                let end = (offset + 2).min(code.len());
                lines.push(Line {
                    address,
                    bytes: code[offset..end].to_vec(),
                    text: format!("; {error}"),
                    unknown_bits: 0,
                    ok: false,
                });
                break;
            }
        }
    }
    lines
}

/// Formats a listing line: address, bytes, text.
pub fn listing_line(line: &Line) -> String {
    let hex: String = line.bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("0x{:04x}: {:<24} {}", line.address, hex, line.text)
}
