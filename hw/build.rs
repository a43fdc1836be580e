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
//! sequence NAME header FORMAT [align=N [unless=F]] ["doc"]
//!   SELECTOR ITEM [ITEM...] ["doc"]          one line per part, in stream order
//! end
//! list NAME tag BITS ENUM ["doc"]            items told apart by a tag:
//!   VARIANT TARGET [end] | VARIANT unsupported
//! end
//! ```
//!
//! BITS is `lo..hi` (inclusive) or several such ranges joined by `+`, least
//! significant part first. TYPE is `uint`, `hex`, `address`, `bool`,
//! `float`, `lod` or an enum name. MODIFIERs (`minus(N)`, `shr(N)`, `log2`,
//! `groups(N)`) turn the logical value into the stored one, in order.
//!
//! A sequence is a header format and the records its fields select.
//! SELECTOR is a 1-bit bool field of the header (a present bit),
//! `when=F==V` / `when=F!=V` over an enum field of the header, or `always`.
//! ITEM is `[member:]FORMAT`, or `[member:]FORMAT[COUNT]` for COUNT records
//! with COUNT a uint field of the header. `align=N` pads with zeros to a
//! multiple of N bytes, unless the header bit F is set. A list dispatches on
//! the ENUM value in BITS to a format or sequence (TARGET); `end` marks a
//! terminator. Each becomes a typed value with `len_bytes`, `layout`,
//! `walk`, `decode` and `build` (see `src/seq.rs`).
//!
//! The generator rejects overlapping fields (unless their `when` conditions
//! exclude each other), fields outside the format, defaults outside a
//! field's range, and unknown names; in sequences and lists, selectors that
//! are not 1-bit header bools or unconditional enums, counts that are not
//! unconditional uints of at most 16 bits, records that are not whole
//! words, lists that miss a tag value, and list items that do not carry
//! their own tag as a constant. A mistake in the spec fails the build with
//! `formats.spec:LINE` instead of producing a wrong bit.

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

/// What decides whether a sequence entry's records are present.
#[derive(Debug, Clone)]
enum Selector {
    /// A 1-bit bool field of the header.
    Bit(String),
    /// An enum field of the header compared with a variant.
    When(Condition),
    Always,
}

/// One record (or counted array of records) of a sequence entry.
#[derive(Debug, Clone)]
struct Item {
    /// Field name; resolved by `validate_sequences` when the spec omits it.
    member: String,
    format: String,
    /// The header field counting the records.
    count: Option<String>,
}

/// One line of a sequence: a selector and the records it brings.
#[derive(Debug, Clone)]
struct Entry {
    selector: Selector,
    /// Member of the sequence struct; resolved by `validate_sequences`.
    member: String,
    items: Vec<Item>,
    doc: String,
    line: usize,
}

#[derive(Debug, Clone)]
struct SequenceDef {
    name: String,
    header: String,
    /// Pad to a multiple of this many bytes, unless a header bit is set.
    align: Option<(usize, Option<String>)>,
    doc: String,
    entries: Vec<Entry>,
    line: usize,
}

/// One kind of list item: a tag value and what follows it.
#[derive(Debug, Clone)]
struct ListVariant {
    variant: String,
    /// A format or sequence name; `None` for `unsupported`.
    target: Option<String>,
    end: bool,
    doc: String,
    line: usize,
}

#[derive(Debug, Clone)]
struct ListDef {
    name: String,
    /// (lowest bit, width)
    tag: (u32, u32),
    tag_enum: String,
    doc: String,
    variants: Vec<ListVariant>,
    line: usize,
}

struct Spec {
    enums: Vec<EnumDef>,
    formats: Vec<FormatDef>,
    sequences: Vec<SequenceDef>,
    lists: Vec<ListDef>,
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

/// `FIELD==VARIANT` or `FIELD!=VARIANT`.
fn parse_condition(c: &str, line: usize) -> Condition {
    let (f, equal, v) = if let Some((f, v)) = c.split_once("==") {
        (f, true, v)
    } else if let Some((f, v)) = c.split_once("!=") {
        (f, false, v)
    } else {
        fail(line, format!("bad condition `{c}`"))
    };
    Condition {
        field: f.to_owned(),
        equal,
        variant: v.to_owned(),
    }
}

/// `[member:]FORMAT[[COUNT]]`.
fn parse_item(t: &str, line: usize) -> Item {
    let (member, rest) = match t.split_once(':') {
        Some((m, r)) => (m.to_owned(), r),
        None => (String::new(), t),
    };
    let (format, count) = match rest.split_once('[') {
        Some((f, c)) => {
            let c = c
                .strip_suffix(']')
                .unwrap_or_else(|| fail(line, format!("bad count in `{t}`")));
            (f.to_owned(), Some(c.to_owned()))
        }
        None => (rest.to_owned(), None),
    };
    if format.is_empty() || member.contains(['[', ']']) {
        fail(
            line,
            format!("bad item `{t}`: expected `[member:]FORMAT[[COUNT]]`"),
        );
    }
    Item {
        member,
        format,
        count,
    }
}

/// A line inside `sequence ... end`: `SELECTOR ITEM [ITEM...] ["doc"]`.
fn parse_entry(tokens: &[String], doc: String, line: usize) -> Entry {
    let selector = match tokens[0].as_str() {
        "always" => Selector::Always,
        t => match t.strip_prefix("when=") {
            Some(c) => Selector::When(parse_condition(c, line)),
            None => Selector::Bit(t.to_owned()),
        },
    };
    let items: Vec<Item> = tokens[1..]
        .iter()
        .filter(|t| !t.starts_with('"'))
        .map(|t| parse_item(t, line))
        .collect();
    if items.is_empty() {
        fail(line, "expected `SELECTOR ITEM [ITEM...]`");
    }
    Entry {
        selector,
        member: String::new(),
        items,
        doc,
        line,
    }
}

/// A line inside `list ... end`: `VARIANT TARGET|unsupported [end] ["doc"]`.
fn parse_list_variant(tokens: &[String], doc: String, line: usize) -> ListVariant {
    let words: Vec<&str> = tokens
        .iter()
        .filter(|t| !t.starts_with('"'))
        .map(String::as_str)
        .collect();
    let (target, end) = match words[..] {
        [_, "unsupported"] => (None, false),
        [_, target] => (Some(target.to_owned()), false),
        [_, target, "end"] if target != "unsupported" => (Some(target.to_owned()), true),
        _ => fail(
            line,
            "expected `VARIANT TARGET [end]` or `VARIANT unsupported`",
        ),
    };
    ListVariant {
        variant: words[0].to_owned(),
        target,
        end,
        doc,
        line,
    }
}

fn parse(text: &str) -> Spec {
    let mut enums: Vec<EnumDef> = Vec::new();
    let mut formats: Vec<FormatDef> = Vec::new();
    let mut sequences: Vec<SequenceDef> = Vec::new();
    let mut lists: Vec<ListDef> = Vec::new();
    let mut group = String::from("Formats");
    let mut current_enum: Option<EnumDef> = None;
    let mut current_format: Option<FormatDef> = None;
    let mut current_sequence: Option<SequenceDef> = None;
    let mut current_list: Option<ListDef> = None;

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
        if let Some(sq) = current_sequence.as_mut() {
            if tokens[0] == "end" {
                sequences.push(current_sequence.take().unwrap_or_else(|| fail(line, "end")));
            } else {
                sq.entries.push(parse_entry(&tokens, doc_of(&tokens), line));
            }
            continue;
        }
        if let Some(l) = current_list.as_mut() {
            if tokens[0] == "end" {
                lists.push(current_list.take().unwrap_or_else(|| fail(line, "end")));
            } else {
                l.variants
                    .push(parse_list_variant(&tokens, doc_of(&tokens), line));
            }
            continue;
        }
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
                    field.cond = Some(parse_condition(c, line));
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
            "sequence" if tokens.len() >= 4 && tokens[2] == "header" => {
                let mut align = None;
                for t in tokens[4..].iter().filter(|t| !t.starts_with('"')) {
                    if let Some(n) = t.strip_prefix("align=") {
                        let n = usize::try_from(parse_u64(n, line))
                            .unwrap_or_else(|_| fail(line, "align"));
                        align = Some((n, None));
                    } else if let Some(f) = t.strip_prefix("unless=") {
                        match align.as_mut() {
                            Some((_, unless)) => *unless = Some(f.to_owned()),
                            None => fail(line, "`unless=` needs an `align=` before it"),
                        }
                    } else {
                        fail(line, format!("unexpected `{t}`"));
                    }
                }
                current_sequence = Some(SequenceDef {
                    name: tokens[1].clone(),
                    header: tokens[3].clone(),
                    align,
                    doc: doc_of(&tokens),
                    entries: Vec::new(),
                    line,
                });
            }
            "sequence" => fail(
                line,
                "expected `sequence NAME header FORMAT [align=N [unless=FIELD]] [\"doc\"]`",
            ),
            "list" if tokens.len() >= 5 && tokens[2] == "tag" => {
                let tag = match parse_bits(&tokens[3], line)[..] {
                    [part] => part,
                    _ => fail(line, "a list tag is one bit range"),
                };
                current_list = Some(ListDef {
                    name: tokens[1].clone(),
                    tag,
                    tag_enum: tokens[4].clone(),
                    doc: doc_of(&tokens),
                    variants: Vec::new(),
                    line,
                });
            }
            "list" => fail(line, "expected `list NAME tag BITS ENUM [\"doc\"]`"),
            other => fail(line, format!("unexpected `{other}`")),
        }
    }
    if current_enum.is_some()
        || current_format.is_some()
        || current_sequence.is_some()
        || current_list.is_some()
    {
        fail(text.lines().count(), "missing `end`");
    }
    Spec {
        enums,
        formats,
        sequences,
        lists,
    }
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
    let _ = writeln!(out, "    fn pack_into(&self, out: &mut [u8]) -> Result<(), PackError> {{\n        let fields = {upper}_FIELDS;\n        let len = out.len();\n        let Some(out) = out.get_mut(..{n}) else {{\n            return Err(PackError::BufferTooSmall {{ format: \"{name}\", size_bytes: {n}, len }});\n        }};\n        // Fields go into a scratch of at least 8 bytes (so that every\n        // field of a short format is one word access), then out at once.\n        let {mutable}scratch = [0u8; {scratch}];", scratch = n.max(8), mutable = if fm.fields.is_empty() { "" } else { "mut " });
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
                let _ = writeln!(out, "        if {} {{\n            write_stored(&mut scratch, &fields[{i}], {stored});\n        }} else if value.{} != defaults.{} {{\n            return Err(PackError::InactiveField {{ format: \"{name}\", field: \"{}\", condition: {c:?} }});\n        }}", cond_expr(c, &fm.fields), f.name, f.name, f.name);
            }
            None => {
                let _ = writeln!(
                    out,
                    "        write_stored(&mut scratch, &fields[{i}], {stored});"
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "        out.copy_from_slice(&scratch[..{n}]);\n        Ok(())\n    }}\n"
    );
    let _ = writeln!(out, "    fn unpack_from(bytes: &[u8]) -> Result<Unpacked<Self>, ShortInput> {{\n        match bytes.get(..{n}) {{\n            Some(bytes) => Ok(Self::decode_bytes(bytes)),\n            None => Err(ShortInput {{ format: \"{name}\", size_bytes: {n}, len: bytes.len() }}),\n        }}\n    }}\n");
    let _ = writeln!(out, "    fn decode_from(bytes: &[u8]) -> Result<Self, ShortInput> {{\n        match bytes.first_chunk::<{n}>() {{\n            Some(bytes) => Ok(Self::decode_fields(bytes)),\n            None => Err(ShortInput {{ format: \"{name}\", size_bytes: {n}, len: bytes.len() }}),\n        }}\n    }}\n");
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
    validate_sequences(&mut spec, &enums);

    let mut out =
        String::from("// Generated by hw/build.rs from hw/spec/formats.spec. Do not edit.\n\n");
    for e in &spec.enums {
        emit_enum(&mut out, e);
    }
    for fm in &spec.formats {
        emit_format(&mut out, fm, &enums);
    }
    let formats_by_name: BTreeMap<&str, &FormatDef> =
        spec.formats.iter().map(|f| (f.name.as_str(), f)).collect();
    let sequences_by_name: BTreeMap<&str, &SequenceDef> = spec
        .sequences
        .iter()
        .map(|s| (s.name.as_str(), s))
        .collect();
    for seq in &spec.sequences {
        emit_sequence(&mut out, seq, &formats_by_name);
    }
    for list in &spec.lists {
        emit_list(&mut out, list, &formats_by_name, &sequences_by_name, &enums);
    }
    let seq_names: Vec<&str> = spec
        .sequences
        .iter()
        .map(|s| s.name.as_str())
        .chain(spec.lists.iter().map(|l| l.name.as_str()))
        .collect();
    let _ = writeln!(
        out,
        "/// Every generated sequence, then every list, in spec order.\npub const ALL_SEQUENCES: &[&SequenceInfo] = &[{}];\n",
        seq_names
            .iter()
            .map(|n| format!("{n}::INFO"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(out, "/// Calls `$m!(Type)` for every generated sequence.\n#[allow(unused_macros)]\nmacro_rules! for_each_sequence {{\n    ($m:ident) => {{\n{}    }};\n}}\n#[allow(unused_imports)]\npub(crate) use for_each_sequence;\n",
        spec.sequences.iter().map(|s| format!("        $m!({});\n", s.name)).collect::<String>());
    let _ = writeln!(out, "/// Calls `$m!(Type)` for every generated list.\n#[allow(unused_macros)]\nmacro_rules! for_each_list {{\n    ($m:ident) => {{\n{}    }};\n}}\n#[allow(unused_imports)]\npub(crate) use for_each_list;\n",
        spec.lists.iter().map(|l| format!("        $m!({});\n", l.name)).collect::<String>());
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

    let _ = writeln!(out, "\n/// The bytes of the format called `name` with every field at its spec\n/// default (constants included), the starting point of an encoder that\n/// sets fields by name; `None` if no format has that name.\npub fn default_bytes_by_name(name: &str) -> Option<Result<Vec<u8>, PackError>> {{\n    match name {{\n{}        _ => None,\n    }}\n}}",
        spec.formats.iter().map(|f| format!("        \"{0}\" => Some({0}::default().pack().map(|bytes| bytes.to_vec())),\n", f.name)).collect::<String>());

    let out_dir = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
    let dest = Path::new(&out_dir).join("formats.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("cannot write {}: {e}", dest.display()));
}

// ---------------------------------------------------------------- sequences

/// Names the generated `formats` module imports from the runtime; a spec
/// item with one of these names would shadow it.
const RESERVED: &[&str] = &[
    "Align",
    "Condition",
    "EntryInfo",
    "EnumInfo",
    "FieldInfo",
    "FieldKind",
    "Format",
    "FormatInfo",
    "ItemInfo",
    "List",
    "ListInfo",
    "ListTarget",
    "ListVariantInfo",
    "Lod",
    "Modifier",
    "PackError",
    "Reader",
    "RecordsInfo",
    "Selector",
    "SeqError",
    "SeqIssue",
    "Sequence",
    "SequenceBody",
    "SequenceInfo",
    "ShortInput",
    "Slot",
    "UnpackIssue",
    "Unpacked",
    "Walked",
];

/// Rust keywords a member name must not be.
const KEYWORDS: &[&str] = &[
    "as", "async", "await", "box", "break", "const", "continue", "crate", "dyn", "else", "enum",
    "extern", "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod",
    "move", "mut", "pub", "ref", "return", "self", "static", "struct", "super", "trait", "true",
    "try", "type", "unsafe", "use", "where", "while", "yield",
];

fn is_member_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !KEYWORDS.contains(&s)
}

/// `fragment_shader` -> `FragmentShader`.
fn camel(s: &str) -> String {
    s.split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// Records a generated type name; two items with one name fail the build.
fn claim(taken: &mut BTreeMap<String, usize>, name: &str, line: usize) {
    if RESERVED.contains(&name) {
        fail(line, format!("`{name}` is a name of the runtime"));
    }
    match taken.insert(name.to_owned(), line) {
        Some(0) => fail(line, format!("`{name}` is already a format or enum")),
        Some(prev) => fail(line, format!("`{name}` is already defined (line {prev})")),
        None => {}
    }
}

fn find_field<'a>(format: &'a FormatDef, name: &str, line: usize) -> &'a Field {
    format
        .fields
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| fail(line, format!("{} has no field `{name}`", format.name)))
}

/// Checks the sequences and lists against the formats and enums, and names
/// the members the spec leaves implicit (a single record takes its present
/// bit's name; a group of records is named after its present bit).
fn validate_sequences(spec: &mut Spec, enums: &BTreeMap<String, EnumDef>) {
    let formats: BTreeMap<String, FormatDef> = spec
        .formats
        .iter()
        .map(|f| (f.name.clone(), f.clone()))
        .collect();
    let mut taken: BTreeMap<String, usize> = BTreeMap::new();
    for name in enums.keys().chain(formats.keys()) {
        if RESERVED.contains(&name.as_str()) {
            panic!("`{name}` is a name of the runtime");
        }
        taken.insert(name.clone(), 0);
    }
    for seq in &mut spec.sequences {
        let line = seq.line;
        claim(&mut taken, &seq.name, line);
        let header = formats
            .get(&seq.header)
            .unwrap_or_else(|| fail(line, format!("no format {}", seq.header)));
        if !header.size_bytes.is_multiple_of(4) {
            fail(line, "a sequence header is whole 32-bit words");
        }
        if let Some((n, unless)) = &seq.align {
            if !n.is_power_of_two() {
                fail(line, format!("align={n} is not a power of two"));
            }
            if let Some(u) = unless {
                let f = find_field(header, u, line);
                if f.kind != Kind::Bool || f.cond.is_some() {
                    fail(line, format!("unless={u}: not an unconditional bool field"));
                }
            }
        }
        if seq.entries.is_empty() {
            fail(line, "a sequence needs at least one entry");
        }
        let mut bits = BTreeMap::new();
        let mut members = BTreeMap::new();
        for e in &mut seq.entries {
            let line = e.line;
            match &e.selector {
                Selector::Bit(b) => {
                    let f = find_field(header, b, line);
                    if f.kind != Kind::Bool || f.cond.is_some() {
                        fail(
                            line,
                            format!(
                                "`{b}` is not an unconditional bool field of {}",
                                header.name
                            ),
                        );
                    }
                    if let Some(prev) = bits.insert(b.clone(), line) {
                        fail(
                            line,
                            format!("present bit `{b}` is already used (line {prev})"),
                        );
                    }
                }
                Selector::When(c) => {
                    let f = find_field(header, &c.field, line);
                    let Kind::Enum(en) = &f.kind else {
                        fail(line, format!("`{}` is not an enum field", c.field))
                    };
                    if f.cond.is_some() {
                        fail(line, format!("`{}` must be unconditional", c.field));
                    }
                    if !enums[en].variants.iter().any(|v| v.ident == c.variant) {
                        fail(line, format!("{} is not a {en}", c.variant));
                    }
                }
                Selector::Always => {}
            }
            for item in &e.items {
                let fm = formats
                    .get(&item.format)
                    .unwrap_or_else(|| fail(line, format!("no format {}", item.format)));
                if !fm.size_bytes.is_multiple_of(4) {
                    fail(
                        line,
                        format!(
                            "{} is {} bytes; sequence records are whole 32-bit words",
                            fm.name, fm.size_bytes
                        ),
                    );
                }
                if let Some(c) = &item.count {
                    let f = find_field(header, c, line);
                    if f.kind != Kind::Uint || f.cond.is_some() {
                        fail(
                            line,
                            format!("count `{c}` is not an unconditional uint field"),
                        );
                    }
                    // Bounds what `layout` allocates for any header: the
                    // logical value, so no modifier may scale it up.
                    if width(f) > 16 {
                        fail(line, format!("count `{c}` is wider than 16 bits"));
                    }
                    if f.modifiers.iter().any(|m| !matches!(m, Modifier::Minus(_))) {
                        fail(
                            line,
                            format!("count `{c}` may only have a minus() modifier"),
                        );
                    }
                }
            }
            if e.items.len() == 1 {
                let item = &mut e.items[0];
                if item.member.is_empty() {
                    match &e.selector {
                        Selector::Bit(b) => item.member = b.clone(),
                        _ => fail(line, "name the member: `member:FORMAT`"),
                    }
                }
                e.member = item.member.clone();
            } else {
                let mut names = BTreeMap::new();
                for item in &e.items {
                    if item.member.is_empty() {
                        fail(line, "each record of a group needs `member:FORMAT`");
                    }
                    if !is_member_name(&item.member) {
                        fail(line, format!("`{}` is not a member name", item.member));
                    }
                    if names.insert(item.member.clone(), ()).is_some() {
                        fail(line, format!("duplicate member `{}`", item.member));
                    }
                }
                e.member = match &e.selector {
                    Selector::Bit(b) => b.clone(),
                    _ => fail(line, "a group of records is named after its present bit"),
                };
                claim(
                    &mut taken,
                    &format!("{}{}", seq.name, camel(&e.member)),
                    line,
                );
            }
            if !is_member_name(&e.member) || e.member == "header" {
                fail(line, format!("`{}` is not a member name", e.member));
            }
            if let Some(prev) = members.insert(e.member.clone(), line) {
                fail(
                    line,
                    format!("member `{}` is already used (line {prev})", e.member),
                );
            }
        }
    }
    for list in &spec.lists {
        let line = list.line;
        claim(&mut taken, &list.name, line);
        let e = enums
            .get(&list.tag_enum)
            .unwrap_or_else(|| fail(line, format!("no enum {}", list.tag_enum)));
        let (lo, w) = list.tag;
        if w > 32 {
            fail(line, "a list tag is at most 32 bits wide");
        }
        for v in &e.variants {
            if w < 32 && v.value >> w != 0 {
                fail(
                    line,
                    format!("{}::{} does not fit the tag", e.name, v.ident),
                );
            }
        }
        let mut seen = BTreeMap::new();
        for v in &list.variants {
            let ev = e
                .variants
                .iter()
                .find(|ev| ev.ident == v.variant)
                .unwrap_or_else(|| fail(v.line, format!("{} is not a {}", v.variant, e.name)));
            if seen.insert(v.variant.clone(), ()).is_some() {
                fail(v.line, format!("{} is listed twice", v.variant));
            }
            let Some(t) = &v.target else { continue };
            let tagged = match formats.get(t) {
                Some(fm) => fm,
                None => match spec.sequences.iter().find(|s| &s.name == t) {
                    Some(s) => &formats[&s.header],
                    None => fail(v.line, format!("no format or sequence {t}")),
                },
            };
            // The item must carry its own tag as a constant, so that
            // packing it writes the tag and unpacking checks it.
            let carries_tag = tagged.fields.iter().any(|f| {
                f.parts == [(lo, w)]
                    && matches!(f.kind, Kind::Const { value, .. } if value == u64::from(ev.value))
            });
            if !carries_tag {
                fail(
                    v.line,
                    format!(
                        "{} has no constant {}::{} at bits {lo}..{}",
                        tagged.name,
                        e.name,
                        v.variant,
                        lo + w - 1
                    ),
                );
            }
        }
        for ev in &e.variants {
            if !seen.contains_key(&ev.ident) {
                fail(
                    line,
                    format!(
                        "{} does not cover {}::{} (mark it `unsupported`)",
                        list.name, e.name, ev.ident
                    ),
                );
            }
        }
    }
}

/// Rust type of an item: its format, or a `Vec` of it when counted.
fn item_type(item: &Item) -> String {
    match &item.count {
        Some(_) => format!("Vec<{}>", item.format),
        None => item.format.clone(),
    }
}

fn is_group(e: &Entry) -> bool {
    e.items.len() > 1
}

fn group_name(seq: &SequenceDef, e: &Entry) -> String {
    format!("{}{}", seq.name, camel(&e.member))
}

/// Rust type of an entry's member.
fn entry_type(seq: &SequenceDef, e: &Entry) -> String {
    let inner = if is_group(e) {
        group_name(seq, e)
    } else {
        item_type(&e.items[0])
    };
    match e.selector {
        Selector::Always => inner,
        _ => format!("Option<{inner}>"),
    }
}

/// Member path of an item, as in slots and issues.
fn item_path(e: &Entry, item: &Item) -> String {
    if is_group(e) {
        format!("{}.{}", e.member, item.member)
    } else {
        e.member.clone()
    }
}

/// An item of the entry value `v` (a reference), as a reference.
fn item_ref(e: &Entry, item: &Item) -> String {
    if is_group(e) {
        format!("&v.{}", item.member)
    } else {
        "v".to_owned()
    }
}

/// Whether the entry is present, as an expression over the header `h`.
fn selector_expr(sel: &Selector, h: &str, header: &FormatDef) -> Option<String> {
    match sel {
        Selector::Bit(b) => Some(format!("{h}.{b}")),
        Selector::When(c) => {
            let f = header.fields.iter().find(|f| f.name == c.field);
            let Some(Kind::Enum(en)) = f.map(|f| &f.kind) else {
                unreachable!("validated")
            };
            let op = if c.equal { "==" } else { "!=" };
            Some(format!("{h}.{} {op} {en}::{}", c.field, c.variant))
        }
        Selector::Always => None,
    }
}

fn selector_info(sel: &Selector) -> String {
    match sel {
        Selector::Bit(b) => format!("Selector::Present(\"{b}\")"),
        Selector::When(c) => format!("Selector::When({c:?})"),
        Selector::Always => "Selector::Always".to_owned(),
    }
}

fn selector_doc(sel: &Selector) -> String {
    match sel {
        Selector::Bit(b) => format!("Present when the header's `{b}` bit is set."),
        Selector::When(c) => {
            let op = if c.equal { "==" } else { "!=" };
            format!(
                "Present exactly when `{} {op} {}` in the header.",
                c.field, c.variant
            )
        }
        Selector::Always => "Always present.".to_owned(),
    }
}

/// Opens a block in which `v` is the entry's value (`{` ... `}` to close).
fn entry_open(e: &Entry, value: &str) -> String {
    match e.selector {
        Selector::Always => format!("{{\n            let v = &{value}.{};", e.member),
        _ => format!("if let Some(v) = &{value}.{} {{", e.member),
    }
}

/// Header fields the sequence derives (present bits and counts), in order.
fn derived_fields(seq: &SequenceDef) -> (Vec<String>, Vec<String>) {
    let bits = seq
        .entries
        .iter()
        .filter_map(|e| match &e.selector {
            Selector::Bit(b) => Some(b.clone()),
            _ => None,
        })
        .collect();
    let mut counts: Vec<String> = Vec::new();
    for c in seq
        .entries
        .iter()
        .flat_map(|e| &e.items)
        .filter_map(|i| i.count.as_ref())
    {
        if !counts.contains(c) {
            counts.push(c.clone());
        }
    }
    (bits, counts)
}

/// The `Ok(Header { ... })` that ends `encoded_header`: present bits from
/// the members' `is_some`, counts from the arrays' lengths.
fn emit_header_literal(
    out: &mut String,
    seq: &SequenceDef,
    hname: &str,
    counts: &[String],
    header_member: bool,
    header: &FormatDef,
) {
    let _ = writeln!(out, "        Ok({hname} {{");
    for e in &seq.entries {
        if let Selector::Bit(b) = &e.selector {
            let _ = writeln!(out, "            {b}: self.{}.is_some(),", e.member);
        }
    }
    for c in counts {
        let f = find_field(header, c, seq.line);
        let t = rust_type(f);
        let (min, max) = (f.min, f.max);
        // A count the field cannot hold is the pack error it would be,
        // here, before anything sizes or writes the sequence.
        let below = if min > 0 {
            format!("(n as u64) < {min} || ")
        } else {
            String::new()
        };
        let _ = writeln!(out, "            {c}: match count_{c} {{\n                Some(n) if {below}(n as u64) > {max} => {{\n                    return Err(SeqError::Pack(PackError::OutOfRange {{ format: \"{hname}\", field: \"{c}\", value: n as u64, min: {min}, max: {max} }}));\n                }}\n                Some(n) => {t}::try_from(n).unwrap_or({t}::MAX),\n                None => base.{c},\n            }},");
    }
    if header_member {
        let _ = writeln!(out, "            ..base");
    }
    let _ = writeln!(out, "        }})\n    }}\n");
}

/// Emits one statement per item of every entry, the entry's statements
/// under its selector's condition (`if <header bit> { ... }`) when it has
/// one: the shape `len_bytes` and `layout` share.
fn emit_per_item(
    out: &mut String,
    seq: &SequenceDef,
    header: &FormatDef,
    statement: impl Fn(&Entry, &Item) -> String,
) {
    for e in &seq.entries {
        let statements: Vec<String> = e.items.iter().map(|i| statement(e, i)).collect();
        match selector_expr(&e.selector, "h", header) {
            Some(cond) => {
                let _ = writeln!(
                    out,
                    "        if {cond} {{\n            {}\n        }}",
                    statements.join("\n            ")
                );
            }
            None => {
                let _ = writeln!(out, "        {}", statements.join("\n        "));
            }
        }
    }
}

fn emit_sequence(out: &mut String, seq: &SequenceDef, formats: &BTreeMap<&str, &FormatDef>) {
    let name = &seq.name;
    let header = formats[seq.header.as_str()];
    let hname = &header.name;
    let hsize = header.size_bytes;
    let (bits, counts) = derived_fields(seq);
    let header_member = header.fields.iter().any(|f| {
        !matches!(f.kind, Kind::Const { .. })
            && !bits.contains(&f.name)
            && !counts.contains(&f.name)
    });
    let mut discriminants: Vec<(String, String)> = Vec::new();
    for e in &seq.entries {
        if let Selector::When(c) = &e.selector {
            if let Kind::Enum(en) = &find_field(header, &c.field, e.line).kind {
                if !discriminants.iter().any(|(f, _)| f == &c.field) {
                    discriminants.push((c.field.clone(), en.clone()));
                }
            }
        }
    }
    let size_of = |item: &Item| formats[item.format.as_str()].size_bytes;
    let (align, unless) = match &seq.align {
        Some((n, u)) => (Some(*n), u.clone()),
        None => (None, None),
    };
    // The padding statement, given what pads (`{}` is replaced).
    let pad_if = |stmt: &str| -> String {
        match (align, &unless) {
            (None, _) => String::new(),
            (Some(n), None) => format!("        {}\n", stmt.replace("{}", &n.to_string())),
            (Some(n), Some(u)) => format!(
                "        if !h.{u} {{\n            {}\n        }}\n",
                stmt.replace("{}", &n.to_string())
            ),
        }
    };

    // ---- group structs
    for e in seq.entries.iter().filter(|e| is_group(e)) {
        let g = group_name(seq, e);
        let _ = writeln!(out, "/// The records of [`{name}::{}`], present together.\n#[derive(Debug, Clone, PartialEq, Default)]\npub struct {g} {{", e.member);
        for item in &e.items {
            let fm = formats[item.format.as_str()];
            let count = match &item.count {
                Some(c) => format!(" As many as the header's `{c}`: `walk` reads that many, `build` sets it\n    /// from the length."),
                None => String::new(),
            };
            let _ = writeln!(
                out,
                "    /// [`{}`]: {}{count}\n    pub {}: {},",
                fm.name,
                fm.doc,
                item.member,
                item_type(item)
            );
        }
        let _ = writeln!(out, "}}\n");
    }

    // ---- the struct
    let mut order: Vec<String> = vec![format!("[`{hname}`]")];
    for e in &seq.entries {
        let items: Vec<String> = e
            .items
            .iter()
            .map(|i| match &i.count {
                Some(c) => format!("[`{}`] × `{c}`", i.format),
                None => format!("[`{}`]", i.format),
            })
            .collect();
        order.push(format!("`{}` ({})", e.member, items.join(", ")));
    }
    let derived: Vec<String> = bits
        .iter()
        .chain(&counts)
        .map(|f| format!("`{f}`"))
        .collect();
    let derived_doc = if derived.is_empty() {
        String::new()
    } else {
        "\n///\n/// `walk` reads the header's present bits and counts; `build` derives them\n/// from the members (`Some`, and the lengths of the arrays).".to_owned()
    };
    let pad_doc = match (align, &unless) {
        (None, _) => String::new(),
        (Some(n), None) => format!("\n///\n/// Zero padding follows, to a multiple of {n} bytes."),
        (Some(n), Some(u)) => format!(
            "\n///\n/// Zero padding follows, to a multiple of {n} bytes, unless the header's `{u}` bit is set."
        ),
    };
    let _ = writeln!(
        out,
        "/// {}\n///\n/// In stream order: {}.{pad_doc}{derived_doc}\n#[derive(Debug, Clone, PartialEq, Default)]\npub struct {name} {{",
        seq.doc,
        order.join(", ")
    );
    if header_member {
        let mut doc = String::from("The header.");
        if !derived.is_empty() {
            let _ = write!(
                doc,
                " Its fields {} are read by `walk`; `build` derives them from the\n    /// members and ignores the values here.",
                derived.join(", ")
            );
        }
        for (f, _) in &discriminants {
            let _ = write!(doc, " Its `{f}` decides which members are present.");
        }
        let _ = writeln!(out, "    /// {doc}\n    pub header: {hname},");
    }
    for e in &seq.entries {
        let what = if !e.doc.is_empty() {
            e.doc.clone()
        } else if is_group(e) {
            format!("The records of [`{}`].", group_name(seq, e))
        } else {
            let fm = formats[e.items[0].format.as_str()];
            format!("[`{}`]: {}", fm.name, fm.doc)
        };
        let count = match e.items.iter().find_map(|i| i.count.as_ref()) {
            Some(c) if !is_group(e) => {
                format!(" As many as the header's `{c}`: `walk` reads that many, `build` sets it\n    /// from the length.")
            }
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "    /// {what} {}{count}\n    pub {}: {},",
            selector_doc(&e.selector),
            e.member,
            entry_type(seq, e)
        );
    }
    let _ = writeln!(out, "}}\n");

    // ---- INFO
    let align_info = match (align, &unless) {
        (None, _) => "None".to_owned(),
        (Some(n), u) => format!("Some(Align {{ bytes: {n}, unless: {:?} }})", u),
    };
    let mut entries_info = String::new();
    for e in &seq.entries {
        let items: Vec<String> = e
            .items
            .iter()
            .map(|i| {
                format!(
                    "ItemInfo {{ member: \"{}\", format: <{} as Format>::INFO, count: {:?} }}",
                    i.member, i.format, i.count
                )
            })
            .collect();
        let _ = writeln!(
            entries_info,
            "            EntryInfo {{ selector: {}, member: \"{}\", items: &[{}], doc: \"{}\" }},",
            selector_info(&e.selector),
            e.member,
            items.join(", "),
            esc(&e.doc)
        );
    }
    let _ = writeln!(out, "impl {name} {{\n    /// Static description.\n    pub const INFO: &'static SequenceInfo = &SequenceInfo {{\n        name: \"{name}\",\n        doc: \"{}\",\n        body: SequenceBody::Records(RecordsInfo {{\n            header: <{hname} as Format>::INFO,\n            align: {align_info},\n            entries: &[\n{entries_info}            ],\n        }}),\n    }};\n", esc(&seq.doc));

    // ---- update: state that accumulates (every member optional)
    if seq
        .entries
        .iter()
        .all(|e| matches!(e.selector, Selector::Bit(_)))
    {
        let mut body = String::new();
        for e in &seq.entries {
            let _ = writeln!(
                body,
                "        if update.{m}.is_some() {{\n            self.{m}.clone_from(&update.{m});\n        }}",
                m = e.member
            );
        }
        let _ = writeln!(out, "    /// Applies a later update of this state: each member `update` has\n    /// replaces this one's, the others stay (how the hardware accumulates\n    /// state updates that each carry only what changed).\n    pub fn update(&mut self, update: &Self) {{\n{body}    }}\n");
    }

    // ---- encoded_header
    let need_base = header_member || !counts.is_empty() || !discriminants.is_empty();
    let _ = writeln!(out, "    /// The header this value is encoded with: present bits and counts\n    /// derived from the members, everything else from `header`.\n    ///\n    /// # Errors\n    /// [`SeqError::CountMismatch`] if arrays sharing a count differ in length,\n    /// [`SeqError::Missing`] / [`SeqError::Inactive`] if a conditional member\n    /// disagrees with its condition, [`SeqError::UnknownDiscriminant`].\n    pub fn encoded_header(&self) -> Result<{hname}, SeqError> {{");
    if need_base {
        if header_member {
            let _ = writeln!(out, "        let base = self.header;");
        } else {
            let _ = writeln!(out, "        let base = {hname}::default();");
        }
    }
    if !discriminants.is_empty() {
        let _ = writeln!(out, "        Self::check_discriminants(&base)?;");
    }
    for e in &seq.entries {
        if let Selector::When(c) = &e.selector {
            let _ = writeln!(
                out,
                "        check_when(\"{name}\", \"{}\", {c:?}, {}, self.{}.is_some())?;",
                e.member,
                selector_expr(&e.selector, "base", header).unwrap_or_default(),
                e.member
            );
        }
    }
    for c in &counts {
        let _ = writeln!(out, "        let mut count_{c}: Option<usize> = None;");
    }
    for e in &seq.entries {
        let counted: Vec<&Item> = e.items.iter().filter(|i| i.count.is_some()).collect();
        if counted.is_empty() {
            continue;
        }
        let _ = writeln!(out, "        {}", entry_open(e, "self"));
        for item in counted {
            let c = item.count.as_deref().unwrap_or_default();
            let _ = writeln!(
                out,
                "            note_count(\"{name}\", \"{c}\", \"{}\", &mut count_{c}, {}.len())?;",
                item_path(e, item),
                if is_group(e) {
                    format!("v.{}", item.member)
                } else {
                    "v".to_owned()
                }
            );
        }
        let _ = writeln!(out, "        }}");
    }
    if bits.is_empty() && counts.is_empty() {
        let _ = writeln!(out, "        Ok(base)\n    }}\n");
    } else {
        emit_header_literal(out, seq, hname, &counts, header_member, header);
    }

    // ---- check_discriminants
    if !discriminants.is_empty() {
        let _ = writeln!(out, "    /// Fails if a field deciding the layout holds an unknown value.\n    fn check_discriminants(h: &{hname}) -> Result<(), SeqError> {{");
        for (f, en) in &discriminants {
            let _ = writeln!(out, "        if let {en}::Unknown(raw) = h.{f} {{\n            return Err(SeqError::UnknownDiscriminant {{ sequence: \"{name}\", field: \"{f}\", raw }});\n        }}");
        }
        let _ = writeln!(out, "        Ok(())\n    }}\n");
    }

    // ---- len_bytes
    let uses_h = !discriminants.is_empty()
        || unless.is_some()
        || seq.entries.iter().any(|e| {
            !matches!(e.selector, Selector::Always) || e.items.iter().any(|i| i.count.is_some())
        });
    let _ = writeln!(out, "    /// Bytes the header implies, header and padding included.\n    ///\n    /// # Errors\n    /// [`SeqError::UnknownDiscriminant`] if a field deciding the layout is unknown.\n    pub fn len_bytes(header: &{hname}) -> Result<usize, SeqError> {{\n        let h = header;");
    if !uses_h {
        let _ = writeln!(out, "        let _ = h;");
    }
    if !discriminants.is_empty() {
        let _ = writeln!(out, "        Self::check_discriminants(h)?;");
    }
    let _ = writeln!(out, "        let mut len: usize = {hsize};");
    emit_per_item(out, seq, header, |_, i| match &i.count {
        Some(c) => format!(
            "len = len.saturating_add(array_len(count_of(h.{c}), {}));",
            size_of(i)
        ),
        None => format!("len = len.saturating_add({});", size_of(i)),
    });
    out.push_str(&pad_if("len = aligned_len(len, {});"));
    let _ = writeln!(out, "        Ok(len)\n    }}\n");

    // ---- layout
    let _ = writeln!(out, "    /// Every record the header implies, header first, padding last:\n    /// what a decoder prints one by one.\n    ///\n    /// # Errors\n    /// [`SeqError::UnknownDiscriminant`] if a field deciding the layout is unknown.\n    pub fn layout(header: &{hname}) -> Result<Vec<Slot>, SeqError> {{\n        let h = header;");
    if !discriminants.is_empty() {
        let _ = writeln!(out, "        Self::check_discriminants(h)?;");
    }
    let _ = writeln!(out, "        let mut slots = Vec::new();\n        let mut at = 0usize;\n        push_slot(&mut slots, &mut at, \"header\", None, <{hname} as Format>::INFO);");
    emit_per_item(out, seq, header, |e, i| {
        match &i.count {
        Some(c) => format!(
            "for i in 0..count_of(h.{c}) {{\n                push_slot(&mut slots, &mut at, \"{}\", Some(i), <{} as Format>::INFO);\n            }}",
            item_path(e, i),
            i.format
        ),
        None => format!(
            "push_slot(&mut slots, &mut at, \"{}\", None, <{} as Format>::INFO);",
            item_path(e, i),
            i.format
        ),
    }
    });
    out.push_str(&pad_if("push_padding(&mut slots, &mut at, {});"));
    let _ = writeln!(out, "        Ok(slots)\n    }}\n");

    // ---- walk, decode, read_with
    let _ = writeln!(out, "    /// Parses the sequence at the start of `bytes` (which may continue past\n    /// it), reporting every bit no format explains with its offset. Never\n    /// panics; allocates only for arrays the input holds.\n    ///\n    /// # Errors\n    /// [`SeqError::Short`] or [`SeqError::UnknownDiscriminant`].\n    pub fn walk(bytes: &[u8]) -> Result<Walked<Self>, SeqError> {{\n        let mut issues = Vec::new();\n        let (value, len_bytes) = Self::read_with(bytes, Some(&mut issues))?;\n        Ok(Walked {{ value, len_bytes, issues }})\n    }}\n");
    let _ = writeln!(out, "    /// Parses like [`Self::walk`] through each format's `decode_fields`,\n    /// without looking for unknown bits (`issues` stays empty): for the\n    /// simulator's per-draw path.\n    ///\n    /// # Errors\n    /// As [`Self::walk`].\n    pub fn decode(bytes: &[u8]) -> Result<Walked<Self>, SeqError> {{\n        let (value, len_bytes) = Self::read_with(bytes, None)?;\n        Ok(Walked {{ value, len_bytes, issues: Vec::new() }})\n    }}\n");
    let _ = writeln!(out, "    pub(crate) fn read_with(\n        bytes: &[u8],\n        issues: Option<&mut Vec<SeqIssue>>,\n    ) -> Result<(Self, usize), SeqError> {{\n        let mut r = Reader::new(bytes, \"{name}\", issues);\n        let h: {hname} = r.item(\"header\", None)?;\n        r.expect_len(Self::len_bytes(&h)?)?;\n        let value = Self {{");
    if header_member {
        let _ = writeln!(out, "            header: h,");
    }
    for e in &seq.entries {
        let read = |i: &Item| match &i.count {
            Some(c) => format!("r.items(\"{}\", count_of(h.{c}))?", item_path(e, i)),
            None => format!("r.item(\"{}\", None)?", item_path(e, i)),
        };
        let value = if is_group(e) {
            let fields: Vec<String> = e
                .items
                .iter()
                .map(|i| format!("                    {}: {},", i.member, read(i)))
                .collect();
            format!(
                "{} {{\n{}\n                }}",
                group_name(seq, e),
                fields.join("\n")
            )
        } else {
            read(&e.items[0])
        };
        match selector_expr(&e.selector, "h", header) {
            Some(cond) => {
                let _ = writeln!(out, "            {}: if {cond} {{\n                Some({value})\n            }} else {{\n                None\n            }},", e.member);
            }
            None => {
                let _ = writeln!(out, "            {}: {value},", e.member);
            }
        }
    }
    let _ = writeln!(out, "        }};");
    out.push_str(&pad_if("r.padding({})?;"));
    let _ = writeln!(out, "        Ok((value, r.position()))\n    }}\n");

    // ---- build
    let _ = writeln!(out, "    /// Appends the encoding to `out` (header with derived present bits and\n    /// counts, the records, zero padding) and returns its length. On error\n    /// `out` is left as it was.\n    ///\n    /// # Errors\n    /// Those of [`Self::encoded_header`], and [`SeqError::Pack`] for a\n    /// record that does not pack.\n    pub fn build(&self, out: &mut Vec<u8>) -> Result<usize, SeqError> {{\n        let h = self.encoded_header()?;\n        out.reserve(Self::len_bytes(&h)?);\n        let start = out.len();\n        if let Err(e) = self.build_into(&h, out) {{\n            out.truncate(start);\n            return Err(e);\n        }}");
    out.push_str(&pad_if("pad_out(out, start, {});"));
    let _ = writeln!(out, "        Ok(out.len() - start)\n    }}\n");
    let _ = writeln!(out, "    fn build_into(&self, h: &{hname}, out: &mut Vec<u8>) -> Result<(), SeqError> {{\n        build_item(out, h)?;");
    for e in &seq.entries {
        let _ = writeln!(out, "        {}", entry_open(e, "self"));
        for i in &e.items {
            let r = item_ref(e, i);
            match &i.count {
                Some(_) => {
                    let _ = writeln!(
                        out,
                        "            for x in {r} {{\n                build_item(out, x)?;\n            }}"
                    );
                }
                None => {
                    let _ = writeln!(out, "            build_item(out, {r})?;");
                }
            }
        }
        let _ = writeln!(out, "        }}");
    }
    let _ = writeln!(out, "        Ok(())\n    }}\n}}\n");

    // ---- Display
    let _ = writeln!(out, "impl fmt::Display for {name} {{\n    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {{\n        writeln!(f, \"{name}\")?;");
    if header_member {
        let _ = writeln!(
            out,
            "        write_item(f, \"header\", None, &self.header)?;"
        );
    }
    for e in &seq.entries {
        let _ = writeln!(out, "        {}", entry_open(e, "self"));
        for i in &e.items {
            let r = item_ref(e, i);
            let path = item_path(e, i);
            match &i.count {
                Some(_) => {
                    let _ = writeln!(out, "            for (i, x) in {}.iter().enumerate() {{\n                write_item(f, \"{path}\", Some(i), x)?;\n            }}", r.trim_start_matches('&'));
                }
                None => {
                    let _ = writeln!(out, "            write_item(f, \"{path}\", None, {r})?;");
                }
            }
        }
        let _ = writeln!(out, "        }}");
    }
    let _ = writeln!(out, "        Ok(())\n    }}\n}}\n");

    // ---- trait
    let _ = writeln!(out, "impl Sequence for {name} {{\n    type Header = {hname};\n    const INFO: &'static SequenceInfo = {name}::INFO;\n\n    fn encoded_header(&self) -> Result<{hname}, SeqError> {{\n        {name}::encoded_header(self)\n    }}\n\n    fn len_bytes(header: &{hname}) -> Result<usize, SeqError> {{\n        {name}::len_bytes(header)\n    }}\n\n    fn layout(header: &{hname}) -> Result<Vec<Slot>, SeqError> {{\n        {name}::layout(header)\n    }}\n\n    fn walk(bytes: &[u8]) -> Result<Walked<Self>, SeqError> {{\n        {name}::walk(bytes)\n    }}\n\n    fn decode(bytes: &[u8]) -> Result<Walked<Self>, SeqError> {{\n        {name}::decode(bytes)\n    }}\n\n    fn build(&self, out: &mut Vec<u8>) -> Result<usize, SeqError> {{\n        {name}::build(self, out)\n    }}\n}}\n");
}

fn emit_list(
    out: &mut String,
    list: &ListDef,
    formats: &BTreeMap<&str, &FormatDef>,
    sequences: &BTreeMap<&str, &SequenceDef>,
    enums: &BTreeMap<String, EnumDef>,
) {
    let name = &list.name;
    let en = &list.tag_enum;
    let (lo, w) = list.tag;
    let tag_bytes = (lo + w).div_ceil(8);
    let mut peek_bytes = tag_bytes as usize;
    for v in &list.variants {
        if let Some(s) = v.target.as_deref().and_then(|t| sequences.get(t)) {
            peek_bytes = peek_bytes.max(formats[s.header.as_str()].size_bytes);
        }
    }
    let value_of = |variant: &str| {
        enums[en]
            .variants
            .iter()
            .find(|v| v.ident == variant)
            .map_or(0, |v| v.value)
    };
    let unsupported: Vec<String> = list
        .variants
        .iter()
        .filter(|v| v.target.is_none())
        .map(|v| format!("`{}`", v.variant))
        .collect();
    let unsupported_doc = if unsupported.is_empty() {
        String::new()
    } else {
        format!(
            "\n///\n/// Known tags whose layout is not described (walking them is\n/// [`SeqError::Unsupported`]): {}.",
            unsupported.join(", ")
        )
    };
    let _ = writeln!(out, "/// {}\n///\n/// One item at a time, told apart by the [`{en}`] in bits {lo}..{}.{unsupported_doc}\n#[derive(Debug, Clone, PartialEq)]\npub enum {name} {{", list.doc, lo + w - 1);
    for v in &list.variants {
        let Some(t) = &v.target else { continue };
        let end = if v.end { " Ends the list." } else { "" };
        let doc = if v.doc.is_empty() {
            String::new()
        } else {
            format!(" {}", v.doc)
        };
        let _ = writeln!(
            out,
            "    /// [`{t}`] (tag `{en}::{}`).{end}{doc}\n    {}({t}),",
            v.variant, v.variant
        );
    }
    let _ = writeln!(out, "}}\n");

    let variants_info: Vec<String> = list
        .variants
        .iter()
        .map(|v| {
            let target = match &v.target {
                None => "ListTarget::Unsupported".to_owned(),
                Some(t) if sequences.contains_key(t.as_str()) => {
                    format!("ListTarget::Sequence({t}::INFO)")
                }
                Some(t) => format!("ListTarget::Format(<{t} as Format>::INFO)"),
            };
            format!(
                "            ListVariantInfo {{ variant: \"{}\", value: {:#x}, target: {target}, end: {} }},",
                v.variant,
                value_of(&v.variant),
                v.end
            )
        })
        .collect();
    let _ = writeln!(out, "impl {name} {{\n    /// Static description.\n    pub const INFO: &'static SequenceInfo = &SequenceInfo {{\n        name: \"{name}\",\n        doc: \"{}\",\n        body: SequenceBody::List(ListInfo {{\n            tag_lo_bit: {lo},\n            tag_width_bits: {w},\n            tag_enum: {en}::INFO,\n            variants: &[\n{}\n            ],\n        }}),\n    }};\n", esc(&list.doc), variants_info.join("\n"));
    let _ = writeln!(out, "    /// Bytes [`Self::len_bytes`] needs: the tag and every item's header.\n    pub const PEEK_BYTES: usize = {peek_bytes};\n");
    let _ = writeln!(out, "    /// The tag of the item starting at `first`.\n    ///\n    /// # Errors\n    /// [`SeqError::Short`] if `first` does not hold the tag.\n    pub fn peek_tag(first: &[u8]) -> Result<{en}, SeqError> {{\n        match first.get(..{tag_bytes}) {{\n            // CAST: the tag is at most 32 bits wide (checked by the generator).\n            Some(bytes) => Ok({en}::from_raw(extract_bits(bytes, {lo}, {w}) as u32)),\n            None => Err(SeqError::Short {{ sequence: \"{name}\", need_bytes: {tag_bytes}, len_bytes: first.len() }}),\n        }}\n    }}\n");
    let _ = writeln!(
        out,
        "    /// The item's tag.\n    pub fn tag(&self) -> {en} {{\n        match self {{"
    );
    for v in list.variants.iter().filter(|v| v.target.is_some()) {
        let _ = writeln!(
            out,
            "            {name}::{}(_) => {en}::{},",
            v.variant, v.variant
        );
    }
    let _ = writeln!(out, "        }}\n    }}\n");
    let ends: Vec<String> = list
        .variants
        .iter()
        .filter(|v| v.end)
        .map(|v| format!("{name}::{}(_)", v.variant))
        .collect();
    let is_end = if ends.is_empty() {
        "false".to_owned()
    } else {
        format!("matches!(self, {})", ends.join(" | "))
    };
    let _ = writeln!(out, "    /// Whether the item ends the list.\n    pub fn is_end(&self) -> bool {{\n        {is_end}\n    }}\n");

    // A match over the tag of `first`, one arm per variant.
    let arms = |format_arm: &dyn Fn(&str, &str) -> String,
                sequence_arm: &dyn Fn(&str, &str, &str) -> String,
                input: &str|
     -> String {
        let mut s = format!("        match Self::peek_tag({input})? {{\n");
        for v in &list.variants {
            let body = match &v.target {
                None => format!(
                    "Err(SeqError::Unsupported {{ list: \"{name}\", variant: \"{}\" }})",
                    v.variant
                ),
                Some(t) => match sequences.get(t.as_str()) {
                    Some(sq) => sequence_arm(&v.variant, t, &sq.header),
                    None => format_arm(&v.variant, t),
                },
            };
            let _ = writeln!(s, "            {en}::{} => {body},", v.variant);
        }
        let _ = writeln!(
            s,
            "            {en}::Unknown(raw) => Err(SeqError::UnknownTag {{ list: \"{name}\", raw }}),\n        }}"
        );
        s
    };
    let size = |t: &str| formats[t].size_bytes;
    let _ = writeln!(out, "    /// Length of the item starting at `first`, which needs\n    /// [`Self::PEEK_BYTES`] bytes.\n    ///\n    /// # Errors\n    /// [`SeqError::Short`], [`SeqError::UnknownTag`], [`SeqError::Unsupported`]\n    /// or [`SeqError::UnknownDiscriminant`].\n    pub fn len_bytes(first: &[u8]) -> Result<usize, SeqError> {{\n{}    }}\n",
        arms(
            &|_, t| format!("Ok({})", size(t)),
            &|_, t, h| format!("{t}::len_bytes(&peek_header::<{h}>(first, \"{name}\")?)"),
            "first"
        ));
    let _ = writeln!(out, "    /// The records of the item starting at `first`.\n    ///\n    /// # Errors\n    /// As [`Self::len_bytes`].\n    pub fn layout(first: &[u8]) -> Result<Vec<Slot>, SeqError> {{\n{}    }}\n",
        arms(
            &|v, t| format!("Ok(vec![Slot {{ offset_bytes: 0, size_bytes: {}, member: \"{v}\", index: None, format: Some(<{t} as Format>::INFO) }}])", size(t)),
            &|_, t, h| format!("{t}::layout(&peek_header::<{h}>(first, \"{name}\")?)"),
            "first"
        ));
    let _ = writeln!(out, "    /// Parses the item at the start of `bytes`, reporting every bit no\n    /// format explains. Never panics.\n    ///\n    /// # Errors\n    /// As [`Self::len_bytes`].\n    pub fn walk(bytes: &[u8]) -> Result<Walked<Self>, SeqError> {{\n        let mut issues = Vec::new();\n        let (value, len_bytes) = Self::read_with(bytes, Some(&mut issues))?;\n        Ok(Walked {{ value, len_bytes, issues }})\n    }}\n");
    let _ = writeln!(out, "    /// Parses like [`Self::walk`] without looking for unknown bits\n    /// (`issues` stays empty): for the simulator.\n    ///\n    /// # Errors\n    /// As [`Self::walk`].\n    pub fn decode(bytes: &[u8]) -> Result<Walked<Self>, SeqError> {{\n        let (value, len_bytes) = Self::read_with(bytes, None)?;\n        Ok(Walked {{ value, len_bytes, issues: Vec::new() }})\n    }}\n");
    let _ = writeln!(out, "    pub(crate) fn read_with(\n        bytes: &[u8],\n        issues: Option<&mut Vec<SeqIssue>>,\n    ) -> Result<(Self, usize), SeqError> {{\n{}    }}\n",
        arms(
            &|v, _| format!("{{\n                let mut r = Reader::new(bytes, \"{name}\", issues);\n                let value = r.item(\"{v}\", None)?;\n                Ok(({name}::{v}(value), r.position()))\n            }}"),
            &|v, t, _| format!("{t}::read_with(bytes, issues).map(|(value, len)| ({name}::{v}(value), len))"),
            "bytes"
        ));
    let _ = writeln!(out, "    /// Appends the encoding and returns its length; on error `out` is left\n    /// as it was.\n    ///\n    /// # Errors\n    /// [`SeqError::Pack`], and those of the sequences' `build`.\n    pub fn build(&self, out: &mut Vec<u8>) -> Result<usize, SeqError> {{\n        match self {{");
    for v in &list.variants {
        let Some(t) = &v.target else { continue };
        let body = if sequences.contains_key(t.as_str()) {
            "value.build(out)"
        } else {
            "build_item(out, value)"
        };
        let _ = writeln!(out, "            {name}::{}(value) => {body},", v.variant);
    }
    let _ = writeln!(out, "        }}\n    }}\n}}\n");

    let _ = writeln!(out, "impl fmt::Display for {name} {{\n    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {{\n        match self {{");
    for v in list.variants.iter().filter(|v| v.target.is_some()) {
        let _ = writeln!(
            out,
            "            {name}::{}(value) => fmt::Display::fmt(value, f),",
            v.variant
        );
    }
    let _ = writeln!(out, "        }}\n    }}\n}}\n");

    let _ = writeln!(out, "impl List for {name} {{\n    type Tag = {en};\n    const INFO: &'static SequenceInfo = {name}::INFO;\n    const PEEK_BYTES: usize = {name}::PEEK_BYTES;\n\n    fn peek_tag(first: &[u8]) -> Result<{en}, SeqError> {{\n        {name}::peek_tag(first)\n    }}\n\n    fn len_bytes(first: &[u8]) -> Result<usize, SeqError> {{\n        {name}::len_bytes(first)\n    }}\n\n    fn layout(first: &[u8]) -> Result<Vec<Slot>, SeqError> {{\n        {name}::layout(first)\n    }}\n\n    fn walk(bytes: &[u8]) -> Result<Walked<Self>, SeqError> {{\n        {name}::walk(bytes)\n    }}\n\n    fn decode(bytes: &[u8]) -> Result<Walked<Self>, SeqError> {{\n        {name}::decode(bytes)\n    }}\n\n    fn build(&self, out: &mut Vec<u8>) -> Result<usize, SeqError> {{\n        {name}::build(self, out)\n    }}\n\n    fn tag(&self) -> {en} {{\n        {name}::tag(self)\n    }}\n\n    fn is_end(&self) -> bool {{\n        {name}::is_end(self)\n    }}\n}}\n");
}
