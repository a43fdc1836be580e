//! Renders the format tables as Markdown (`Documentation/formats.md`).
//!
//! The document is generated from the same [`FormatInfo`] and
//! [`SequenceInfo`] tables the code uses, and a test compares it with the
//! checked-in file, so the documentation cannot drift from the formats.

use std::fmt::Write as _;

use crate::seq::{ListInfo, ListTarget, RecordsInfo, SequenceBody, SequenceInfo};
use crate::spec::{FieldKind, FormatInfo};
use crate::{ALL_ENUMS, ALL_FORMATS, ALL_SEQUENCES};

fn kind_text(kind: FieldKind) -> String {
    match kind {
        FieldKind::Uint => "uint".into(),
        FieldKind::Hex => "hex".into(),
        FieldKind::Address => "address".into(),
        FieldKind::Bool => "bool".into(),
        FieldKind::Float => "f32".into(),
        FieldKind::Lod => "lod (4.6)".into(),
        FieldKind::Enum(e) => format!("[{e}](#enum-{})", e.to_lowercase()),
        FieldKind::Const { value, display } => format!("const {display} ({value:#x})"),
    }
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

fn format_section(out: &mut String, f: &FormatInfo) {
    let _ = writeln!(
        out,
        "### {} ({} bytes)\n\n{}\n",
        f.name,
        f.size_bytes,
        cell(f.doc)
    );
    if f.fields.is_empty() {
        out.push_str("No known fields: `unpack` reports every set bit as unknown.\n\n");
        return;
    }
    out.push_str("| bits | field | type | encoding | range | default | only when | meaning |\n");
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    for field in f.fields {
        let numeric = matches!(
            field.kind,
            FieldKind::Uint | FieldKind::Hex | FieldKind::Address
        );
        let range = if numeric {
            format!("{:#x}..={:#x}", field.min, field.max)
        } else {
            String::new()
        };
        let when = field.condition.map(|c| c.to_string()).unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | `{}` | {} | {} | {} | {} | {} | {} |",
            field.bits_text(),
            field.name,
            kind_text(field.kind),
            field.modifiers_text(),
            range,
            field.default,
            when,
            cell(field.doc)
        );
    }
    out.push('\n');
}

/// A link to a format's section.
fn format_link(f: &FormatInfo) -> String {
    format!(
        "[{}](#{}-{}-bytes)",
        f.name,
        f.name.to_lowercase(),
        f.size_bytes
    )
}

/// A link to a sequence's or list's section.
fn sequence_link(s: &SequenceInfo) -> String {
    let kind = match s.body {
        SequenceBody::Records(_) => "sequence",
        SequenceBody::List(_) => "list",
    };
    format!("[{}](#{}-{kind})", s.name, s.name.to_lowercase())
}

fn records_section(out: &mut String, s: &SequenceInfo, r: &RecordsInfo) {
    let _ = writeln!(out, "### {} (sequence)\n\n{}\n", s.name, cell(s.doc));
    let _ = write!(out, "Header: {}.", format_link(r.header));
    if let Some(align) = r.align {
        let _ = write!(
            out,
            " Then zero padding to a multiple of {} bytes",
            align.bytes
        );
        match align.unless {
            Some(bit) => {
                let _ = write!(out, ", unless `{bit}` is set.");
            }
            None => out.push('.'),
        }
    }
    out.push_str("\n\n| present when | member | records | bytes |\n|---|---|---|---|\n");
    for e in r.entries {
        let mut records = Vec::new();
        let mut sizes = Vec::new();
        for item in e.items {
            let name = if e.items.len() > 1 {
                format!("`{}`: ", item.member)
            } else {
                String::new()
            };
            match item.count {
                Some(c) => {
                    records.push(format!("{name}{} × `{c}`", format_link(item.format)));
                    sizes.push(format!("{} × `{c}`", item.format.size_bytes));
                }
                None => {
                    records.push(format!("{name}{}", format_link(item.format)));
                    sizes.push(item.format.size_bytes.to_string());
                }
            }
        }
        let _ = writeln!(
            out,
            "| `{}` | `{}` | {} | {} |",
            e.selector,
            e.member,
            records.join(", "),
            sizes.join(" + ")
        );
    }
    out.push('\n');
}

fn list_section(out: &mut String, s: &SequenceInfo, l: &ListInfo) {
    let _ = writeln!(
        out,
        "### {} (list)\n\n{}\n\nTag: bits {}..{}, [{}](#enum-{}).\n",
        s.name,
        cell(s.doc),
        l.tag_lo_bit,
        l.tag_lo_bit + l.tag_width_bits - 1,
        l.tag_enum.name,
        l.tag_enum.name.to_lowercase()
    );
    out.push_str("| tag | variant | item | bytes | ends the list |\n|---|---|---|---|---|\n");
    for v in l.variants {
        let (item, bytes) = match v.target {
            ListTarget::Format(f) => (format_link(f), f.size_bytes.to_string()),
            ListTarget::Sequence(seq) => (sequence_link(seq), "from its header".to_owned()),
            ListTarget::Unsupported => ("not supported".to_owned(), String::new()),
        };
        let end = if v.end { "yes" } else { "" };
        let _ = writeln!(
            out,
            "| {:#x} | `{}` | {item} | {bytes} | {end} |",
            v.value, v.variant
        );
    }
    out.push('\n');
}

/// The whole of `Documentation/formats.md`.
pub fn formats_markdown() -> String {
    let mut out = String::from(
        "# Hardware formats\n\n\
         <!-- Generated from hw/spec/formats.spec; do not edit. Regenerate with\n     \
         AGX_BLESS=1 cargo test -p agx-hw --test formats_doc -->\n\n\
         Every structure the AGX GPU reads from memory that this stack writes or decodes is\n\
         described once, in `hw/spec/formats.spec`. The build turns each description into a\n\
         Rust type in `agx_hw::formats` with `pack` (range-checked), `unpack` (reports bits no\n\
         field explains) and `Display`; the umd, the firmware-sim and the tools all use those\n\
         types. This page is generated from the same tables.\n\n\
         How to read the tables:\n\n\
         - **bits**: inclusive bit ranges counted from bit 0 of the first byte (little-endian).\n  \
         `32..63 + 0..7` is one value whose low 32 bits are at 32..63 and whose next 8 bits\n  \
         are at 0..7.\n\
         - **encoding**: how the value a driver uses becomes the stored bits, applied left to\n  \
         right: `minus(n)` stores value - n, `shr(n)` stores value >> n (the low n bits must\n  \
         be zero), `log2` stores log2(value) (a power of two), `groups(n)` stores value / n\n  \
         (a non-zero multiple of n; the largest count is stored as 0).\n\
         - **range**: the values `pack` accepts; anything else is an error, never truncated.\n\
         - **only when**: the field shares its bits with another and is meaningful only under\n  \
         this condition; otherwise `pack` requires it to keep its default and `unpack` leaves\n  \
         it at the default.\n\
         - Bits no field covers are reported by `unpack` as unknown (`XXX` in printed output).\n\n",
    );
    let mut groups: Vec<&str> = Vec::new();
    for f in ALL_FORMATS {
        if !groups.contains(&f.group) {
            groups.push(f.group);
        }
    }
    out.push_str("## Contents\n\n");
    for g in &groups {
        let names: Vec<String> = ALL_FORMATS
            .iter()
            .filter(|f| f.group == *g)
            .map(|f| {
                format!(
                    "[{}](#{}-{}-bytes)",
                    f.name,
                    f.name.to_lowercase(),
                    f.size_bytes
                )
            })
            .collect();
        let _ = writeln!(out, "- {g}: {}", names.join(", "));
    }
    let sequences: Vec<String> = ALL_SEQUENCES.iter().map(|s| sequence_link(s)).collect();
    let _ = writeln!(out, "- [Sequences](#sequences): {}", sequences.join(", "));
    out.push_str("- [Enums](#enums)\n\n");
    for g in &groups {
        let _ = writeln!(out, "## {g}\n");
        for f in ALL_FORMATS.iter().filter(|f| f.group == *g) {
            format_section(&mut out, f);
        }
    }
    out.push_str(
        "## Sequences\n\n\
         A *sequence* is a header format followed by the records its fields select, in\n\
         stream order (which need not be bit order); a *list* is read one item at a time,\n\
         each told apart by a tag in its first bits. Each becomes a Rust type in\n\
         `agx_hw::formats` (see `agx_hw::seq`) with `len_bytes` and `layout` (from the\n\
         header), `walk` (parses, reporting unknown bits with their offsets), `decode`\n\
         (parses without that bookkeeping) and `build`, which derives the present bits and\n\
         counts from the value: an `Option` per optional record, a `Vec` per counted array.\n\n",
    );
    for s in ALL_SEQUENCES {
        match &s.body {
            SequenceBody::Records(r) => records_section(&mut out, s, r),
            SequenceBody::List(l) => list_section(&mut out, s, l),
        }
    }
    out.push_str("## Enums\n\nValues not listed decode as `unknown 0x..`.\n\n");
    for e in ALL_ENUMS {
        let _ = writeln!(out, "### enum {}\n\n{}\n", e.name, cell(e.doc));
        out.push_str("| value | variant | meaning |\n|---|---|---|\n");
        for (ident, value, display) in e.variants {
            let _ = writeln!(out, "| {value:#x} | `{ident}` | {} |", cell(display));
        }
        out.push('\n');
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}
