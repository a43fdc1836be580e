//! Generates `formats.rs` from `spec/formats.spec`.
//!
//! The spec language, one item per line (`#` starts a comment):
//!
//! ```text
//! group "Descriptors"                       sets the group of the formats that follow
//! enum Layout "doc"                         an enum, then one variant per line:
//!   Linear = 0 ["display name"]
//! end
//! format Texture 24 "doc"                   a format of 24 bytes, then one field per line:
//!   NAME BITS TYPE [MODIFIER...] [default=V] [when=F==V | when=F!=V] ["doc"]
//!   NAME BITS const ENUM::VARIANT|NUMBER ["doc"]
//! end
//! ```
//!
//! BITS is `lo..hi` (inclusive) or several such ranges joined by `+`, least
//! significant part first. TYPE is `uint`, `hex`, `address`, `bool`,
//! `float`, `lod` or an enum name. MODIFIERs (`minus(N)`, `shr(N)`, `log2`,
//! `groups(N)`) turn the logical value into the stored one, in order.
//!
//! The generator rejects overlapping fields (unless their `when` conditions
//! exclude each other), fields outside the format, defaults outside a
//! field's range, and unknown names, so a mistake in the spec fails the
//! build instead of producing a wrong bit.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

#[derive(Debug, Clone)]
struct Variant {
    ident: String,
    value: u32,
    display: String,
}

#[derive(Debug, Clone)]
struct EnumDef {
    name: String,
    doc: String,
    variants: Vec<Variant>,
}

// `Kind`, `Modifier` and `Condition` mirror `FieldKind`, `Modifier` and
// `Condition` in src/spec.rs, names and fields alike: their `Debug` output is
// emitted as the runtime constructors.

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Uint,
    Hex,
    Address,
    Bool,
    Float,
    Lod,
    Enum(String),
    Const { value: u64, display: String },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Modifier {
    Minus(u64),
    Shr(u32),
    Log2,
    Groups(u64),
}

#[derive(Debug, Clone)]
struct Condition {
    field: String,
    equal: bool,
    variant: String,
}

#[derive(Debug, Clone)]
struct Field {
    name: String,
    parts: Vec<(u32, u32)>,
    kind: Kind,
    modifiers: Vec<Modifier>,
    default: Option<String>,
    cond: Option<Condition>,
    doc: String,
    min: u64,
    max: u64,
    line: usize,
}

#[derive(Debug, Clone)]
struct FormatDef {
    name: String,
    size_bytes: usize,
    group: String,
    doc: String,
    fields: Vec<Field>,
}

struct Spec {
    enums: Vec<EnumDef>,
    formats: Vec<FormatDef>,
}

fn fail(line: usize, msg: impl std::fmt::Display) -> ! {
    panic!("formats.spec:{line}: {msg}");
}

/// Splits a line into whitespace-separated tokens; a double-quoted string is
/// one token (quotes removed, marked by a leading '"').
fn tokenize(line: &str, line_no: usize) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '#' {
            break;
        } else if c == '"' {
            chars.next();
            let mut s = String::from("\"");
            loop {
                match chars.next() {
                    Some('"') => break,
                    Some(ch) => s.push(ch),
                    None => fail(line_no, "unterminated string"),
                }
            }
            tokens.push(s);
        } else {
            let mut s = String::new();
            while let Some(&ch) = chars.peek() {
                if ch.is_whitespace() {
                    break;
                }
                s.push(ch);
                chars.next();
            }
            tokens.push(s);
        }
    }
    tokens
}

fn parse_u64(s: &str, line: usize) -> u64 {
    let s = s.replace('_', "");
    let parsed = if let Some(hex) = s.strip_prefix("0x") {
        u64::from_str_radix(hex, 16)
    } else {
        s.parse()
    };
    parsed.unwrap_or_else(|_| fail(line, format!("bad number `{s}`")))
}

fn parse_bits(s: &str, line: usize) -> Vec<(u32, u32)> {
    s.split('+')
        .map(|part| {
            let (lo, hi) = part
                .split_once("..")
                .unwrap_or_else(|| fail(line, format!("bad bits `{s}`")));
            let lo = u32::try_from(parse_u64(lo, line)).unwrap_or_else(|_| fail(line, "bits"));
            let hi = u32::try_from(parse_u64(hi, line)).unwrap_or_else(|_| fail(line, "bits"));
            if hi < lo {
                fail(line, format!("bit range `{part}` is reversed"));
            }
            (lo, hi - lo + 1)
        })
        .collect()
}

fn parse_modifier(s: &str, line: usize) -> Option<Modifier> {
    if s == "log2" {
        return Some(Modifier::Log2);
    }
    let (name, rest) = s.split_once('(')?;
    let arg = rest
        .strip_suffix(')')
        .unwrap_or_else(|| fail(line, format!("bad modifier `{s}`")));
    let n = parse_u64(arg, line);
    Some(match name {
        "minus" => Modifier::Minus(n),
        "shr" => Modifier::Shr(u32::try_from(n).unwrap_or_else(|_| fail(line, "shift"))),
        "groups" if n > 0 => Modifier::Groups(n),
        _ => fail(line, format!("unknown modifier `{s}`")),
    })
}

fn parse(text: &str) -> Spec {
    let mut enums: Vec<EnumDef> = Vec::new();
    let mut formats: Vec<FormatDef> = Vec::new();
    let mut group = String::from("Formats");
    let mut current_enum: Option<EnumDef> = None;
    let mut current_format: Option<FormatDef> = None;

    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let tokens = tokenize(raw, line);
        if tokens.is_empty() {
            continue;
        }
        let doc_of = |t: &[String]| -> String {
            t.iter()
                .find_map(|s| s.strip_prefix('"'))
                .unwrap_or("")
                .to_owned()
        };
        if let Some(e) = current_enum.as_mut() {
            if tokens[0] == "end" {
                enums.push(current_enum.take().unwrap_or_else(|| fail(line, "end")));
                continue;
            }
            if tokens.len() < 3 || tokens[1] != "=" {
                fail(line, "expected `VARIANT = VALUE [\"name\"]`");
            }
            let value = u32::try_from(parse_u64(&tokens[2], line))
                .unwrap_or_else(|_| fail(line, "enum value too large"));
            let display = tokens
                .get(3)
                .and_then(|t| t.strip_prefix('"'))
                .unwrap_or(&tokens[0]);
            e.variants.push(Variant {
                ident: tokens[0].clone(),
                value,
                display: display.to_owned(),
            });
            continue;
        }
        if let Some(f) = current_format.as_mut() {
            if tokens[0] == "end" {
                formats.push(current_format.take().unwrap_or_else(|| fail(line, "end")));
                continue;
            }
            if tokens.len() < 3 {
                fail(line, "expected `NAME BITS TYPE ...`");
            }
            let parts = parse_bits(&tokens[1], line);
            let mut field = Field {
                name: tokens[0].clone(),
                parts,
                kind: Kind::Uint,
                modifiers: Vec::new(),
                default: None,
                cond: None,
                doc: doc_of(&tokens),
                min: 0,
                max: 0,
                line,
            };
            let mut rest = tokens[3..].iter();
            field.kind = match tokens[2].as_str() {
                "uint" => Kind::Uint,
                "hex" => Kind::Hex,
                "address" => Kind::Address,
                "bool" => Kind::Bool,
                "float" => Kind::Float,
                "lod" => Kind::Lod,
                "const" => {
                    let v = rest
                        .next()
                        .unwrap_or_else(|| fail(line, "const needs a value"));
                    match v.split_once("::") {
                        Some((en, var)) => Kind::Const {
                            value: u64::MAX,
                            display: format!("{en}::{var}"),
                        },
                        None => Kind::Const {
                            value: parse_u64(v, line),
                            display: v.clone(),
                        },
                    }
                }
                other => Kind::Enum(other.to_owned()),
            };
            for t in rest {
                if t.starts_with('"') {
                    continue;
                } else if let Some(d) = t.strip_prefix("default=") {
                    field.default = Some(d.to_owned());
                } else if let Some(c) = t.strip_prefix("when=") {
                    let (f, equal, v) = if let Some((f, v)) = c.split_once("==") {
                        (f, true, v)
                    } else if let Some((f, v)) = c.split_once("!=") {
                        (f, false, v)
                    } else {
                        fail(line, format!("bad condition `{c}`"))
                    };
                    field.cond = Some(Condition {
                        field: f.to_owned(),
                        equal,
                        variant: v.to_owned(),
                    });
                } else if let Some(m) = parse_modifier(t, line) {
                    field.modifiers.push(m);
                } else {
                    fail(line, format!("unexpected `{t}`"));
                }
            }
            f.fields.push(field);
            continue;
        }
        match tokens[0].as_str() {
            "group" => group = doc_of(&tokens),
            "enum" if tokens.len() >= 2 => {
                current_enum = Some(EnumDef {
                    name: tokens[1].clone(),
                    doc: doc_of(&tokens),
                    variants: Vec::new(),
                });
            }
            "format" if tokens.len() >= 3 => {
                current_format = Some(FormatDef {
                    name: tokens[1].clone(),
                    size_bytes: usize::try_from(parse_u64(&tokens[2], line))
                        .unwrap_or_else(|_| fail(line, "size")),
                    group: group.clone(),
                    doc: doc_of(&tokens),
                    fields: Vec::new(),
                });
            }
            other => fail(line, format!("unexpected `{other}`")),
        }
    }
    if current_enum.is_some() || current_format.is_some() {
        fail(text.lines().count(), "missing `end`");
    }
    Spec { enums, formats }
}

fn width(f: &Field) -> u32 {
    f.parts.iter().map(|&(_, w)| w).sum()
}

fn parse_float(s: &str, line: usize) -> f64 {
    s.parse()
        .unwrap_or_else(|_| fail(line, format!("bad float `{s}`")))
}

/// Resolves enum constants, checks the spec, computes logical ranges.
/// Returns the enums by name.
fn validate(spec: &mut Spec) -> BTreeMap<String, EnumDef> {
    let enums: BTreeMap<String, EnumDef> = spec
        .enums
        .iter()
        .map(|e| (e.name.clone(), e.clone()))
        .collect();
    for e in &spec.enums {
        let mut seen = BTreeMap::new();
        for v in &e.variants {
            if let Some(prev) = seen.insert(v.value, &v.ident) {
                panic!(
                    "enum {}: {} and {} share value {}",
                    e.name, prev, v.ident, v.value
                );
            }
        }
    }
    let mut names = BTreeMap::new();
    for format in &mut spec.formats {
        if names.insert(format.name.clone(), ()).is_some() {
            panic!("format {} is defined twice", format.name);
        }
        let size_bits = u32::try_from(format.size_bytes * 8).unwrap_or(u32::MAX);
        let snapshot = format.fields.clone();
        for f in &mut format.fields {
            let line = f.line;
            let w = width(f);
            if w == 0 || w > 64 {
                fail(line, format!("{}: width {w} not in 1..=64", f.name));
            }
            for &(lo, pw) in &f.parts {
                if lo + pw > size_bits {
                    fail(
                        line,
                        format!(
                            "{}: bits beyond the {}-byte format",
                            f.name, format.size_bytes
                        ),
                    );
                }
            }
            if let Kind::Const { value, display } = &mut f.kind {
                if let Some((en, var)) = display.split_once("::") {
                    let e = enums
                        .get(en)
                        .unwrap_or_else(|| fail(line, format!("no enum {en}")));
                    let v = e.variants.iter().find(|v| v.ident == var);
                    *value = u64::from(
                        v.unwrap_or_else(|| fail(line, format!("no {en}::{var}")))
                            .value,
                    );
                }
                if w < 64 && *value >> w != 0 {
                    fail(line, "constant does not fit");
                }
            }
            match &f.kind {
                Kind::Bool if w != 1 => fail(line, "bool must be 1 bit"),
                Kind::Float if w != 32 => fail(line, "float must be 32 bits"),
                Kind::Lod if w != 10 => fail(line, "lod must be 10 bits"),
                Kind::Enum(e) if !enums.contains_key(e) => fail(line, format!("unknown type {e}")),
                _ => {}
            }
            let numeric = matches!(
                f.kind,
                Kind::Uint | Kind::Hex | Kind::Address | Kind::Enum(_)
            );
            if !f.modifiers.is_empty() && !matches!(f.kind, Kind::Uint | Kind::Hex | Kind::Address)
            {
                fail(line, "modifiers apply to uint, hex and address fields only");
            }
            // Logical range, from the stored range through the inverse
            // modifiers (in u128 so that overflow is caught here).
            let (mut lo, mut hi): (u128, u128) = (0, (1u128 << w) - 1);
            for (i, m) in f.modifiers.iter().enumerate().rev() {
                match *m {
                    Modifier::Groups(n) => {
                        if i != f.modifiers.len() - 1 {
                            fail(line, "groups() must be the last modifier");
                        }
                        lo = u128::from(n);
                        hi = u128::from(n) << w;
                    }
                    Modifier::Log2 => {
                        if hi >= 64 {
                            fail(line, "log2 field can exceed 2^63");
                        }
                        lo = 1 << lo;
                        hi = 1 << hi;
                    }
                    Modifier::Shr(n) => {
                        lo <<= n;
                        hi <<= n;
                    }
                    Modifier::Minus(n) => {
                        lo += u128::from(n);
                        hi += u128::from(n);
                    }
                }
            }
            if hi > u128::from(u64::MAX) {
                fail(line, format!("{}: logical values exceed 64 bits", f.name));
            }
            // CAST: checked against u64::MAX just above; lo <= hi.
            (f.min, f.max) = (lo as u64, hi as u64);
            if let Some(d) = &f.default {
                match &f.kind {
                    Kind::Enum(e) if !enums[e].variants.iter().any(|v| &v.ident == d) => {
                        fail(line, format!("default {d} is not a {e}"));
                    }
                    Kind::Enum(_) => {}
                    Kind::Bool if d != "true" && d != "false" => fail(line, "bool default"),
                    Kind::Float | Kind::Lod => {
                        parse_float(d, line);
                    }
                    _ if numeric => {
                        let v = parse_u64(d, line);
                        if v < f.min || v > f.max {
                            fail(line, format!("default {v} outside {}..={}", f.min, f.max));
                        }
                    }
                    _ => {}
                }
            } else if let Kind::Enum(e) = &f.kind {
                if !enums[e].variants.iter().any(|v| v.value == 0) {
                    fail(
                        line,
                        format!("{e} has no zero value: give {} a default", f.name),
                    );
                }
            } else if numeric && f.min > 0 {
                fail(
                    line,
                    format!("{}: 0 is not representable: give a default", f.name),
                );
            }
            if let Some(c) = &f.cond {
                let d = snapshot.iter().find(|g| g.name == c.field);
                let d = d.unwrap_or_else(|| fail(line, format!("no field {}", c.field)));
                let Kind::Enum(e) = &d.kind else {
                    fail(line, "conditions need an enum field")
                };
                if d.cond.is_some() {
                    fail(line, "the discriminant must be unconditional");
                }
                if !enums[e].variants.iter().any(|v| v.ident == c.variant) {
                    fail(line, format!("{} is not a {e}", c.variant));
                }
            }
        }
        // Overlaps.
        let fields = &format.fields;
        for (i, a) in fields.iter().enumerate() {
            if fields[..i].iter().any(|b| b.name == a.name) {
                fail(a.line, format!("duplicate field {}", a.name));
            }
            for b in &fields[..i] {
                let overlap = a
                    .parts
                    .iter()
                    .any(|&(al, aw)| b.parts.iter().any(|&(bl, bw)| al < bl + bw && bl < al + aw));
                if overlap && !exclusive(a.cond.as_ref(), b.cond.as_ref()) {
                    fail(a.line, format!("{} overlaps {}", a.name, b.name));
                }
            }
        }
    }
    enums
}

/// Whether two conditions can never both hold.
fn exclusive(a: Option<&Condition>, b: Option<&Condition>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) if a.field == b.field => match (a.equal, b.equal) {
            (true, true) => a.variant != b.variant,
            (true, false) | (false, true) => a.variant == b.variant,
            (false, false) => false,
        },
        _ => false,
    }
}

fn rust_type(f: &Field) -> String {
    match &f.kind {
        Kind::Bool => "bool".into(),
        Kind::Float => "f32".into(),
        Kind::Lod => "Lod".into(),
        Kind::Enum(e) => e.clone(),
        Kind::Address => "u64".into(),
        Kind::Uint | Kind::Hex if f.max > u64::from(u32::MAX) => "u64".into(),
        Kind::Uint | Kind::Hex => "u32".into(),
        Kind::Const { .. } => unreachable!("constants have no struct field"),
    }
}

fn default_expr(f: &Field, enums: &BTreeMap<String, EnumDef>) -> String {
    match (&f.kind, &f.default) {
        (Kind::Enum(e), Some(d)) => format!("{e}::{d}"),
        (Kind::Enum(e), None) => {
            let v = enums[e].variants.iter().find(|v| v.value == 0);
            format!("{e}::{}", v.map_or("Unknown(0)", |v| v.ident.as_str()))
        }
        (Kind::Bool, d) => d.clone().unwrap_or_else(|| "false".into()),
        (Kind::Float, d) => format!("{:?}_f32", parse_float(d.as_deref().unwrap_or("0"), f.line)),
        (Kind::Lod, d) => {
            let v = parse_float(d.as_deref().unwrap_or("0"), f.line);
            format!("Lod::from_f32({v:?})")
        }
        (_, Some(d)) => d.replace('_', ""),
        (_, None) => "0".into(),
    }
}

fn shout(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn emit_enum(out: &mut String, e: &EnumDef) {
    let name = &e.name;
    let _ = writeln!(
        out,
        "/// {}\n#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]\npub enum {name} {{",
        e.doc
    );
    for v in &e.variants {
        let _ = writeln!(
            out,
            "    /// {} (`{:#x}`).\n    {},",
            v.display, v.value, v.ident
        );
    }
    let _ = writeln!(
        out,
        "    /// A value the spec does not name.\n    Unknown(u32),\n}}\n"
    );
    let _ = writeln!(out, "impl {name} {{");
    let _ = writeln!(
        out,
        "    /// The named values.\n    pub const KNOWN: &'static [{name}] = &[{}];",
        e.variants
            .iter()
            .map(|v| format!("{name}::{}", v.ident))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(out, "    /// Static description.\n    pub const INFO: &'static EnumInfo = &EnumInfo {{ name: \"{name}\", doc: \"{}\", variants: &[{}] }};",
        esc(&e.doc),
        e.variants.iter().map(|v| format!("(\"{}\", {}, \"{}\")", v.ident, v.value, esc(&v.display))).collect::<Vec<_>>().join(", "));
    let _ = writeln!(out, "    /// The encoded value.\n    pub const fn to_raw(self) -> u32 {{\n        match self {{");
    for v in &e.variants {
        let _ = writeln!(out, "            {name}::{} => {},", v.ident, v.value);
    }
    let _ = writeln!(
        out,
        "            {name}::Unknown(raw) => raw,\n        }}\n    }}"
    );
    let _ = writeln!(out, "    /// Decodes a value; values the spec does not name become `Unknown`.\n    pub const fn from_raw(raw: u32) -> {name} {{\n        match raw {{");
    for v in &e.variants {
        let _ = writeln!(out, "            {} => {name}::{},", v.value, v.ident);
    }
    let _ = writeln!(
        out,
        "            raw => {name}::Unknown(raw),\n        }}\n    }}"
    );
    let _ = writeln!(out, "    /// The display name, `None` for values the spec does not name.\n    pub const fn name(self) -> Option<&'static str> {{\n        match self.to_raw() {{");
    for v in &e.variants {
        let _ = writeln!(
            out,
            "            {} => Some(\"{}\"),",
            v.value,
            esc(&v.display)
        );
    }
    let _ = writeln!(out, "            _ => None,\n        }}\n    }}\n}}\n");
    let _ = writeln!(out, "impl fmt::Display for {name} {{\n    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {{\n        match self.name() {{\n            Some(n) => f.write_str(n),\n            None => write!(f, \"unknown {{:#x}}\", self.to_raw()),\n        }}\n    }}\n}}\n");
}

/// The `FieldInfo` literal for a field. The build-time model mirrors the
/// runtime types' names, so `Debug` prints valid constructors.
fn field_info(f: &Field) -> String {
    let mods: Vec<String> = f
        .modifiers
        .iter()
        .map(|m| format!("Modifier::{m:?}"))
        .collect();
    format!(
        "FieldInfo {{ name: \"{}\", parts: &{:?}, kind: FieldKind::{:?}, modifiers: &[{}], min: {:#x}, max: {:#x}, condition: {:?}, default: \"{}\", doc: \"{}\" }}",
        f.name,
        f.parts,
        f.kind,
        mods.join(", "),
        f.min,
        f.max,
        f.cond,
        esc(f.default.as_deref().unwrap_or("")),
        esc(&f.doc)
    )
}

fn cond_expr(c: &Condition, fields: &[Field]) -> String {
    let d = fields.iter().find(|f| f.name == c.field).map(|f| &f.kind);
    let Some(Kind::Enum(e)) = d else {
        unreachable!("validated")
    };
    let op = if c.equal { "==" } else { "!=" };
    format!("value.{} {op} {e}::{}", c.field, c.variant)
}

fn emit_format(out: &mut String, fm: &FormatDef, enums: &BTreeMap<String, EnumDef>) {
    let name = &fm.name;
    let n = fm.size_bytes;
    let has_fields = fm
        .fields
        .iter()
        .any(|f| !matches!(f.kind, Kind::Const { .. }));
    let _ = writeln!(out, "/// {}\n///\n/// {n} bytes. Group: {}.\n#[derive(Debug, Clone, Copy, PartialEq)]\npub struct {name} {{", fm.doc, fm.group);
    for f in fm
        .fields
        .iter()
        .filter(|f| !matches!(f.kind, Kind::Const { .. }))
    {
        let mut doc = if f.doc.is_empty() {
            format!("Bits {}.", bits_text(f))
        } else {
            format!("{} (bits {})", f.doc, bits_text(f))
        };
        if let Some(c) = &f.cond {
            let op = if c.equal { "==" } else { "!=" };
            let _ = write!(doc, "; only when `{} {op} {}`", c.field, c.variant);
        }
        let _ = writeln!(out, "    /// {doc}\n    pub {}: {},", f.name, rust_type(f));
    }
    let _ = writeln!(out, "}}\n");
    let _ = writeln!(
        out,
        "#[allow(clippy::derivable_impls)] // generated uniformly from the spec defaults\nimpl Default for {name} {{\n    fn default() -> Self {{\n        {name} {{"
    );
    for f in fm
        .fields
        .iter()
        .filter(|f| !matches!(f.kind, Kind::Const { .. }))
    {
        let _ = writeln!(out, "            {}: {},", f.name, default_expr(f, enums));
    }
    let _ = writeln!(out, "        }}\n    }}\n}}\n");

    let upper = shout(name);
    let _ = writeln!(out, "const {upper}_FIELDS: &[FieldInfo] = &[");
    for f in &fm.fields {
        let _ = writeln!(out, "    {},", field_info(f));
    }
    let _ = writeln!(out, "];\n");
    let _ = writeln!(
        out,
        "impl {name} {{\n    /// Size in bytes.\n    pub const SIZE_BYTES: usize = {n};\n\n    /// Packs into a new array.\n    ///\n    /// # Errors\n    /// [`PackError`] names the field and the broken limit.\n    pub fn pack(&self) -> Result<[u8; {n}], PackError> {{\n        let mut out = [0u8; {n}];\n        self.pack_into(&mut out)?;\n        Ok(out)\n    }}\n\n    /// Decodes, reporting bits no field explains.\n    pub fn unpack(bytes: &[u8; {n}]) -> Unpacked<Self> {{\n        Self::decode_bytes(bytes)\n    }}\n"
    );
    // decode_bytes
    let _ = writeln!(out, "    // Decoded field by field: conditional fields depend on earlier ones.\n    #[allow(clippy::field_reassign_with_default)]\n    fn decode_bytes(bytes: &[u8]) -> Unpacked<Self> {{\n        let fields = {upper}_FIELDS;\n        let {}covered = [0u8; {n}];\n        let mut issues = Vec::new();\n        let {}value = Self::default();", if fm.fields.is_empty() { "" } else { "mut " }, if has_fields { "mut " } else { "" });
    if fm.fields.is_empty() {
        // A format without fields (a word seen zero): every set bit is
        // reported as unknown.
        let _ = writeln!(out, "        let _ = fields;");
    }
    let ordered: Vec<(usize, &Field)> = fm
        .fields
        .iter()
        .enumerate()
        .filter(|(_, f)| f.cond.is_none())
        .chain(
            fm.fields
                .iter()
                .enumerate()
                .filter(|(_, f)| f.cond.is_some()),
        )
        .collect();
    // The same field reads without the coverage bookkeeping, for hot
    // paths (the MMU walk) that do not report unknown bits.
    let mut fast = String::new();
    for (i, f) in &ordered {
        let read = format!("read_stored(bytes, &fields[{i}])");
        let assign = match &f.kind {
            Kind::Const { value, .. } => {
                let _ = writeln!(out, "        let found = {read};\n        if found != {value:#x} {{\n            issues.push(UnpackIssue::ConstMismatch {{ field: \"{}\", expected: {value:#x}, found }});\n        }}\n        mark_covered(&mut covered, &fields[{i}]);", f.name);
                continue;
            }
            Kind::Bool => format!("{read} != 0"),
            // CAST: the stored value has at most 32 bits (validated).
            Kind::Float => format!("f32::from_bits({read} as u32)"),
            Kind::Lod => format!("Lod::from_raw({read} as u16).unwrap_or_default()"),
            Kind::Enum(e) => format!("{e}::from_raw(decode(&fields[{i}], {read}) as u32)"),
            _ if rust_type(f) == "u32" => format!("decode(&fields[{i}], {read}) as u32"),
            _ => format!("decode(&fields[{i}], {read})"),
        };
        match &f.cond {
            Some(c) => {
                let _ = writeln!(out, "        if {} {{\n            value.{} = {assign};\n            mark_covered(&mut covered, &fields[{i}]);\n        }}", cond_expr(c, &fm.fields), f.name);
                let _ = writeln!(
                    fast,
                    "        if {} {{\n            value.{} = {assign};\n        }}",
                    cond_expr(c, &fm.fields),
                    f.name
                );
            }
            None => {
                let _ = writeln!(out, "        value.{} = {assign};\n        mark_covered(&mut covered, &fields[{i}]);", f.name);
                let _ = writeln!(fast, "        value.{} = {assign};", f.name);
            }
        }
    }
    let _ = writeln!(out, "        unknown_bits(bytes, &covered, &mut issues);\n        Unpacked {{ value, issues }}\n    }}\n");
    let _ = writeln!(out, "    /// Decodes the fields without reporting unknown bits or constant\n    /// mismatches: for hot paths (the MMU's walk) over encodings the\n    /// stack itself wrote.\n    #[allow(clippy::field_reassign_with_default, clippy::let_and_return)]\n    pub fn decode_fields(bytes: &[u8; {n}]) -> Self {{\n        let fields = {upper}_FIELDS;\n        let _ = (fields, bytes);\n        let {}value = Self::default();\n{fast}        value\n    }}\n}}\n", if has_fields { "mut " } else { "" });

    // Format impl
    let _ = writeln!(out, "impl Format for {name} {{\n    const SIZE_BYTES: usize = {n};\n    const INFO: &'static FormatInfo = &FormatInfo {{ name: \"{name}\", size_bytes: {n}, group: \"{}\", doc: \"{}\", fields: {upper}_FIELDS }};\n", esc(&fm.group), esc(&fm.doc));
    let _ = writeln!(out, "    fn pack_into(&self, out: &mut [u8]) -> Result<(), PackError> {{\n        let fields = {upper}_FIELDS;\n        let len = out.len();\n        let Some(out) = out.get_mut(..{n}) else {{\n            return Err(PackError::BufferTooSmall {{ format: \"{name}\", size_bytes: {n}, len }});\n        }};\n        out.fill(0);");
    if fm.fields.is_empty() {
        let _ = writeln!(out, "        let _ = fields;");
    }
    if has_fields {
        let _ = writeln!(out, "        let value = self;");
    }
    if fm.fields.iter().any(|f| f.cond.is_some()) {
        let _ = writeln!(out, "        let defaults = Self::default();");
    }
    for (i, f) in fm.fields.iter().enumerate() {
        let stored = match &f.kind {
            Kind::Const { value, .. } => format!("{value:#x}"),
            Kind::Bool => format!("u64::from(value.{})", f.name),
            Kind::Float => format!("u64::from(value.{}.to_bits())", f.name),
            Kind::Lod => format!("u64::from(value.{}.raw())", f.name),
            Kind::Enum(_) => format!(
                "encode(\"{name}\", &fields[{i}], u64::from(value.{}.to_raw()))?",
                f.name
            ),
            _ if rust_type(f) == "u64" => {
                format!("encode(\"{name}\", &fields[{i}], value.{})?", f.name)
            }
            _ => format!(
                "encode(\"{name}\", &fields[{i}], u64::from(value.{}))?",
                f.name
            ),
        };
        match &f.cond {
            Some(c) => {
                let _ = writeln!(out, "        if {} {{\n            write_stored(out, &fields[{i}], {stored});\n        }} else if value.{} != defaults.{} {{\n            return Err(PackError::InactiveField {{ format: \"{name}\", field: \"{}\", condition: {c:?} }});\n        }}", cond_expr(c, &fm.fields), f.name, f.name, f.name);
            }
            None => {
                let _ = writeln!(out, "        write_stored(out, &fields[{i}], {stored});");
            }
        }
    }
    let _ = writeln!(out, "        Ok(())\n    }}\n");
    let _ = writeln!(out, "    fn unpack_from(bytes: &[u8]) -> Result<Unpacked<Self>, ShortInput> {{\n        match bytes.get(..{n}) {{\n            Some(bytes) => Ok(Self::decode_bytes(bytes)),\n            None => Err(ShortInput {{ format: \"{name}\", size_bytes: {n}, len: bytes.len() }}),\n        }}\n    }}\n");
    let _ = writeln!(
        out,
        "    fn write_fields(&self, f: &mut dyn fmt::Write, indent: usize) -> fmt::Result {{"
    );
    if has_fields {
        let _ = writeln!(out, "        let value = self;");
    } else {
        let _ = writeln!(out, "        let _ = (f, indent);");
    }
    for f in fm
        .fields
        .iter()
        .filter(|f| !matches!(f.kind, Kind::Const { .. }))
    {
        let spec = match f.kind {
            Kind::Hex | Kind::Address => "{:#x}",
            Kind::Float => "{:?}",
            _ => "{}",
        };
        let line = format!(
            "writeln!(f, \"{{:indent$}}{}: {spec}\", \"\", value.{})?;",
            f.name, f.name
        );
        match &f.cond {
            Some(c) => {
                let _ = writeln!(
                    out,
                    "        if {} {{\n            {line}\n        }}",
                    cond_expr(c, &fm.fields)
                );
            }
            None => {
                let _ = writeln!(out, "        {line}");
            }
        }
    }
    let _ = writeln!(out, "        Ok(())\n    }}\n}}\n");
    let _ = writeln!(out, "impl fmt::Display for {name} {{\n    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {{\n        writeln!(f, \"{name}\")?;\n        self.write_fields(f, 2)\n    }}\n}}\n");
}

fn bits_text(f: &Field) -> String {
    let parts: Vec<String> = f
        .parts
        .iter()
        .map(|&(lo, w)| format!("{}..{}", lo, lo + w - 1))
        .collect();
    parts.join(" + ")
}

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let spec_path = Path::new(&manifest).join("spec/formats.spec");
    println!("cargo::rerun-if-changed={}", spec_path.display());
    let text = std::fs::read_to_string(&spec_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", spec_path.display()));
    let mut spec = parse(&text);
    let enums = validate(&mut spec);

    let mut out =
        String::from("// Generated by hw/build.rs from hw/spec/formats.spec. Do not edit.\n\n");
    for e in &spec.enums {
        emit_enum(&mut out, e);
    }
    for fm in &spec.formats {
        emit_format(&mut out, fm, &enums);
    }
    let _ = writeln!(out, "/// Every generated format, in spec order.\npub const ALL_FORMATS: &[&FormatInfo] = &[{}];\n",
        spec.formats.iter().map(|f| format!("<{} as Format>::INFO", f.name)).collect::<Vec<_>>().join(", "));
    let _ = writeln!(
        out,
        "/// Every generated enum, in spec order.\npub const ALL_ENUMS: &[&EnumInfo] = &[{}];\n",
        spec.enums
            .iter()
            .map(|e| format!("{}::INFO", e.name))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(out, "/// Calls `$m!(Type)` for every generated format.\n#[allow(unused_macros)]\nmacro_rules! for_each_format {{\n    ($m:ident) => {{\n{}    }};\n}}\n#[allow(unused_imports)]\npub(crate) use for_each_format;\n",
        spec.formats.iter().map(|f| format!("        $m!({});\n", f.name)).collect::<String>());
    let _ = writeln!(out, "/// Decodes the first bytes of `bytes` as the format called `name` and\n/// prints it with every issue found; `None` if no format has that name.\npub fn print_by_name(name: &str, bytes: &[u8]) -> Option<Result<String, ShortInput>> {{\n    match name {{\n{}        _ => None,\n    }}\n}}",
        spec.formats.iter().map(|f| format!("        \"{0}\" => Some({0}::unpack_from(bytes).map(|u| u.to_string())),\n", f.name)).collect::<String>());

    let out_dir = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
    let dest = Path::new(&out_dir).join("formats.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("cannot write {}: {e}", dest.display()));
}
