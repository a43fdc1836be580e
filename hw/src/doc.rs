//! Renders the format tables as Markdown (`Documentation/formats.md`).
//!
//! The document is generated from the same [`FormatInfo`] tables the code
//! uses, and a test compares it with the checked-in file, so the
//! documentation cannot drift from the formats.

use std::fmt::Write as _;

use crate::spec::{FieldKind, FormatInfo};
use crate::{ALL_ENUMS, ALL_FORMATS};

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
    out.push_str("- [Enums](#enums)\n\n");
    for g in &groups {
        let _ = writeln!(out, "## {g}\n");
        for f in ALL_FORMATS.iter().filter(|f| f.group == *g) {
            format_section(&mut out, f);
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
