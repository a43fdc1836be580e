//! `agx-format`: any hardware format, from bytes to fields and back.
//!
//! GPU hang dumps and captures are full of descriptors and control words.
//! `decode` prints one of them through the single format description in
//! `agx-hw`, with every field and every bit it cannot explain; `encode`
//! goes the other way, from `field=value` pairs to the words a test or a
//! hand-written command stream needs, through the same range-checked
//! packing the drivers use; `fields` lists what a format holds.

use std::fmt::Write as _;

use agx_hw::{EnumInfo, FieldInfo, FieldKind, FormatInfo};
use clap::{Parser, Subcommand};

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "agx-format",
    version,
    about = "Decode AGX hardware formats from hex, or encode them from field values",
    after_help = "HEX is bytes (\"1d 04 80 00\") or 32-bit little-endian words (0x0080041d).\n\
                  Exit status: 0 on success, 2 for a bad command line or input."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `agx-format`'s subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List every format with its size and group.
    List,
    /// List a format's fields: bits, kind, encoding, range and default.
    Fields {
        /// The format's name (see `list`).
        format: String,
    },
    /// Decode bytes as FORMAT and print every field and unknown bit.
    Decode {
        /// The format's name (see `list`).
        format: String,
        /// The bytes: two hex digits per byte, or 0x-prefixed 32-bit words.
        #[arg(required = true)]
        hex: Vec<String>,
    },
    /// Encode FORMAT from field=value pairs (the rest at their defaults)
    /// and print it as 32-bit little-endian words.
    Encode {
        /// The format's name (see `list`).
        format: String,
        /// Field values: numbers (decimal or 0x hex), true/false, floats,
        /// or enum variants by name.
        #[arg(value_name = "FIELD=VALUE")]
        fields: Vec<String>,
    },
}

/// A command line or input `agx-format` cannot act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatCliError {
    /// The format name is not known.
    #[error("unknown format `{0}` (see `agx-format list`)")]
    UnknownFormat(String),
    /// The input is not hexadecimal.
    #[error("`{0}` is not hexadecimal")]
    BadHex(String),
    /// Fewer bytes than the format needs.
    #[error(transparent)]
    Short(#[from] agx_hw::ShortInput),
    /// An encode argument that is not `field=value`.
    #[error("`{0}` is not FIELD=VALUE")]
    NotAnAssignment(String),
    /// No field of that name.
    #[error("{format} has no field `{field}` (see `agx-format fields {format}`)")]
    UnknownField {
        /// The format.
        format: &'static str,
        /// The name given.
        field: String,
    },
    /// A constant that identifies the format cannot be set.
    #[error("{format}.{field} is a constant of the format and cannot be set")]
    ConstantField {
        /// The format.
        format: &'static str,
        /// The field.
        field: &'static str,
    },
    /// A value that does not read as the field's kind.
    #[error("{format}.{field}: `{value}` is not {expected}")]
    BadValue {
        /// The format.
        format: &'static str,
        /// The field.
        field: &'static str,
        /// The text given.
        value: String,
        /// What the field takes.
        expected: String,
    },
    /// A conditional field set while its condition does not hold.
    #[error("{format}.{field} only applies when {condition}")]
    ConditionNotMet {
        /// The format.
        format: &'static str,
        /// The field.
        field: &'static str,
        /// The condition, as `field == variant`.
        condition: String,
    },
    /// A value the field cannot hold (range, alignment, power of two).
    #[error(transparent)]
    Pack(#[from] agx_hw::PackError),
}

/// Parses hex input: tokens starting with `0x` are 32-bit words stored
/// little-endian; other tokens are byte strings of two digits per byte.
pub fn parse_hex(tokens: &[String]) -> Result<Vec<u8>, FormatCliError> {
    let mut bytes = Vec::new();
    for token in tokens.iter().flat_map(|t| t.split_whitespace()) {
        let bad = || FormatCliError::BadHex(token.to_owned());
        if let Some(word) = token.strip_prefix("0x") {
            let w = u32::from_str_radix(&word.replace('_', ""), 16).map_err(|_| bad())?;
            bytes.extend_from_slice(&w.to_le_bytes());
        } else {
            if token.len() % 2 != 0 {
                return Err(bad());
            }
            for pair in token.as_bytes().chunks(2) {
                let text = std::str::from_utf8(pair).map_err(|_| bad())?;
                bytes.push(u8::from_str_radix(text, 16).map_err(|_| bad())?);
            }
        }
    }
    Ok(bytes)
}

fn format_info(name: &str) -> Result<&'static FormatInfo, FormatCliError> {
    FormatInfo::by_name(name).ok_or_else(|| FormatCliError::UnknownFormat(name.to_owned()))
}

fn kind_text(kind: FieldKind) -> String {
    match kind {
        FieldKind::Uint => "number".into(),
        FieldKind::Hex => "number (hex)".into(),
        FieldKind::Address => "address".into(),
        FieldKind::Bool => "bool".into(),
        FieldKind::Float => "float".into(),
        FieldKind::Lod => "lod (4.6 fixed point)".into(),
        FieldKind::Enum(name) => match EnumInfo::by_name(name) {
            Some(e) => {
                let names: Vec<&str> = e.variants.iter().map(|v| v.0).collect();
                format!("{name}: {}", names.join(" | "))
            }
            None => name.into(),
        },
        FieldKind::Const { display, .. } => format!("constant {display}"),
    }
}

fn parse_number(text: &str) -> Option<u64> {
    let text = text.replace('_', "");
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// Whether two names are the same but for case, spaces, `_` and `-`
/// (`MirroredRepeat`, `mirrored_repeat` and "Mirrored repeat" alike).
fn same_name(a: &str, b: &str) -> bool {
    let letters = |s: &str| {
        s.chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .map(|c| c.to_ascii_lowercase())
            .collect::<String>()
    };
    letters(a) == letters(b)
}

/// The logical value `text` gives field `info` of `format`.
fn parse_value(format: &'static str, info: &FieldInfo, text: &str) -> Result<u64, FormatCliError> {
    let bad = |expected: String| FormatCliError::BadValue {
        format,
        field: info.name,
        value: text.to_owned(),
        expected,
    };
    match info.kind {
        FieldKind::Uint | FieldKind::Hex | FieldKind::Address => {
            parse_number(text).ok_or_else(|| bad("a number".into()))
        }
        FieldKind::Bool => match text {
            "true" | "1" => Ok(1),
            "false" | "0" => Ok(0),
            _ => Err(bad("true or false".into())),
        },
        FieldKind::Float => text
            .parse::<f32>()
            .map(|v| u64::from(v.to_bits()))
            .map_err(|_| bad("a float".into())),
        FieldKind::Lod => match text.parse::<f32>() {
            Ok(v) if (0.0..=agx_hw::Lod::MAX.to_f32()).contains(&v) => {
                Ok(u64::from(agx_hw::Lod::from_f32(v).raw()))
            }
            _ => Err(bad(format!(
                "a level of detail in 0..={}",
                agx_hw::Lod::MAX.to_f32()
            ))),
        },
        FieldKind::Enum(name) => {
            let Some(e) = EnumInfo::by_name(name) else {
                return parse_number(text).ok_or_else(|| bad("a number".into()));
            };
            e.variants
                .iter()
                .find(|(variant, _, display)| same_name(variant, text) || same_name(display, text))
                .map(|&(_, value, _)| u64::from(value))
                .ok_or_else(|| bad(kind_text(info.kind)))
        }
        FieldKind::Const { .. } => Err(FormatCliError::ConstantField {
            format,
            field: info.name,
        }),
    }
}

/// Fields that do not apply to `bytes` although the spec cannot say so
/// yet: a texture's or PBE's sample count means something only for the
/// two multisampled dimensions (Mesa's cmdbuf.xml has no encoding of one
/// sample: a single-sampled image is a non-multisampled dimension), and a
/// spec condition names one variant. The printers leave these out while
/// their bits are zero (a set bit stays visible).
pub(crate) fn inapplicable_fields(format: &FormatInfo, bytes: &[u8]) -> Vec<&'static str> {
    match sample_count_field(format, bytes) {
        Some((samples, false)) if agx_hw::spec::read_stored(bytes, samples) == 0 => {
            vec!["samples"]
        }
        _ => Vec::new(),
    }
}

/// A texture's or PBE's sample count field, and whether its dimension in
/// `bytes` is multisampled (the only dimensions it applies to).
fn sample_count_field(format: &FormatInfo, bytes: &[u8]) -> Option<(&'static FieldInfo, bool)> {
    let dimension = format.field("dimension")?;
    let samples = format
        .field("samples")
        .filter(|f| f.kind == FieldKind::Enum("SampleCount"))?;
    let multisampled = EnumInfo::by_name("TextureDimension")
        .and_then(|e| e.variant_of(dimension.logical(bytes)))
        .is_some_and(|v| v.ends_with("Multisampled"));
    Some((samples, multisampled))
}

/// `format`'s printout of `bytes` (`print_by_name`) without the lines of
/// fields that do not apply ([`inapplicable_fields`]).
pub(crate) fn print_applicable(
    format: &str,
    bytes: &[u8],
) -> Option<Result<String, agx_hw::ShortInput>> {
    let printed = agx_hw::formats::print_by_name(format, bytes)?;
    let Ok(text) = printed else {
        return Some(printed);
    };
    let Ok(info) = format_info(format) else {
        return Some(Ok(text));
    };
    let skip = inapplicable_fields(info, bytes);
    if skip.is_empty() {
        return Some(Ok(text));
    }
    let mut out = String::new();
    for line in text.lines() {
        let field = line.trim_start().split(':').next().unwrap_or("");
        if !skip.contains(&field) {
            out.push_str(line);
            out.push('\n');
        }
    }
    Some(Ok(out))
}

/// `FORMAT` with `assignments` (`field=value`) over its defaults.
///
/// # Errors
/// [`FormatCliError`] naming the format, the field and what is wrong.
pub fn encode(format: &str, assignments: &[String]) -> Result<Vec<u8>, FormatCliError> {
    let info = format_info(format)?;
    let mut bytes = match agx_hw::formats::default_bytes_by_name(info.name) {
        Some(bytes) => bytes?,
        None => return Err(FormatCliError::UnknownFormat(format.to_owned())),
    };
    let mut set = Vec::new();
    for assignment in assignments {
        let (name, text) = assignment
            .split_once('=')
            .ok_or_else(|| FormatCliError::NotAnAssignment(assignment.clone()))?;
        let field = info
            .field(name.trim())
            .ok_or_else(|| FormatCliError::UnknownField {
                format: info.name,
                field: name.to_owned(),
            })?;
        let logical = parse_value(info.name, field, text.trim())?;
        let stored = agx_hw::spec::encode(info.name, field, logical)?;
        agx_hw::spec::write_stored(&mut bytes, field, stored);
        set.push(field);
    }
    // Conditions are checked once every value is in: a discriminant may
    // come after the field it selects.
    if let Some((samples, false)) = sample_count_field(info, &bytes) {
        if set.iter().any(|f| f.name == samples.name) {
            return Err(FormatCliError::ConditionNotMet {
                format: info.name,
                field: samples.name,
                condition: "dimension is D2Multisampled or D2ArrayMultisampled".into(),
            });
        }
    }
    if let Some(field) = set.iter().find(|field| !info.applies(field, &bytes)) {
        return Err(FormatCliError::ConditionNotMet {
            format: info.name,
            field: field.name,
            condition: field.condition.map(|c| c.to_string()).unwrap_or_default(),
        });
    }
    Ok(bytes)
}

/// `bytes` as 32-bit little-endian words (`0x0080041d ...`), the form
/// `decode` reads back; a tail shorter than a word is printed as bytes.
pub fn words_text(bytes: &[u8]) -> String {
    let mut words: Vec<String> = bytes
        .chunks_exact(4)
        .map(|w| format!("{:#010x}", u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
        .collect();
    let tail = bytes.chunks_exact(4).remainder();
    if !tail.is_empty() {
        words.push(tail.iter().map(|b| format!("{b:02x}")).collect());
    }
    words.join(" ")
}

/// Runs a parsed command line and returns what it prints.
///
/// # Errors
/// [`FormatCliError`] for a bad format, field, value or input.
pub fn run(command: &Command) -> Result<String, FormatCliError> {
    let mut out = String::new();
    match command {
        Command::List => {
            for f in agx_hw::ALL_FORMATS {
                let _ = writeln!(out, "{:<28} {:>3} bytes  {}", f.name, f.size_bytes, f.group);
            }
        }
        Command::Fields { format } => {
            let info = format_info(format)?;
            let _ = writeln!(
                out,
                "{} ({} bytes): {}",
                info.name, info.size_bytes, info.doc
            );
            for f in info.fields {
                let _ = write!(
                    out,
                    "  {:<28} bits {:<12} {}",
                    f.name,
                    f.bits_text(),
                    kind_text(f.kind)
                );
                if !f.modifiers.is_empty() {
                    let _ = write!(out, "; stored as {}", f.modifiers_text());
                }
                if matches!(
                    f.kind,
                    FieldKind::Uint | FieldKind::Hex | FieldKind::Address
                ) {
                    let _ = write!(out, "; {:#x}..={:#x}", f.min, f.max);
                }
                if !f.default.is_empty() {
                    let _ = write!(out, "; default {}", f.default);
                }
                if let Some(condition) = f.condition {
                    let _ = write!(out, "; only when {condition}");
                }
                out.push('\n');
            }
        }
        Command::Decode { format, hex } => {
            let bytes = parse_hex(hex)?;
            match print_applicable(format, &bytes) {
                Some(result) => out = result?,
                None => return Err(FormatCliError::UnknownFormat(format.clone())),
            }
        }
        Command::Encode { format, fields } => {
            let _ = writeln!(out, "{}", words_text(&encode(format, fields)?));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| (*s).to_owned()).collect()
    }

    fn decode(format: &str, hex: &[&str]) -> Result<String, FormatCliError> {
        run(&Command::Decode {
            format: format.into(),
            hex: args(hex),
        })
    }

    #[test]
    fn decodes_words_and_reports_unknown_bits() {
        // A USC Uniform word: 8 halves at half 4 from 0x10000.
        let word: u64 = 0x1d | 4 << 8 | 8 << 20 | (0x10000 >> 2) << 26;
        let lo = format!("{:#x}", word & 0xffff_ffff);
        let hi = format!("{:#x}", word >> 32);
        let out = decode("UscUniform", &[&lo, &hi]).unwrap();
        assert!(out.contains("start_halfs: 4"), "{out}");
        assert!(out.contains("size_halfs: 8"), "{out}");
        assert!(out.contains("buffer: 0x10000"), "{out}");
        assert!(!out.contains("XXX"), "{out}");

        let out = decode("Sampler", &["00000000 00000400"]).unwrap();
        assert!(out.contains("XXX: unknown bits in word 1"), "{out}");
    }

    #[test]
    fn encodes_fields_to_the_words_decode_reads_back() {
        let words = encode(
            "UscUniform",
            &args(&["start_halfs=4", "size_halfs=8", "buffer=0x10000"]),
        )
        .unwrap();
        // The same word the decode test builds by hand.
        let expected: u64 = 0x1d | 4 << 8 | 8 << 20 | (0x10000 >> 2) << 26;
        assert_eq!(words, expected.to_le_bytes());
        let text = words_text(&words);
        let tokens: Vec<&str> = text.split(' ').collect();
        let out = decode("UscUniform", &tokens).unwrap();
        assert!(out.contains("size_halfs: 8"), "{out}");

        // Enums by variant name in any spelling, booleans; the other
        // fields at their defaults.
        let sampler = encode(
            "Sampler",
            &args(&[
                "wrap_s=mirrored_repeat",
                "compare_func=Less",
                "compare_enable=true",
            ]),
        )
        .unwrap();
        let word = u64::from_le_bytes(sampler.try_into().unwrap());
        assert_eq!(word >> 29 & 7, 2, "wrap_s");
        assert_eq!(word >> 39 & 7, 2, "compare_func");
        assert_eq!(word >> 42 & 1, 1, "compare_enable");
        assert_eq!(
            word >> 20 & 7,
            0,
            "max_anisotropy's default of 1, stored as log2"
        );
    }

    #[test]
    fn encode_refuses_what_the_format_cannot_hold() {
        assert!(matches!(
            encode("UscUniform", &args(&["buffer=0x10001"])),
            Err(FormatCliError::Pack(_))
        ));
        assert!(matches!(
            encode("UscUniform", &args(&["size_halfs=1000"])),
            Err(FormatCliError::Pack(_))
        ));
        assert!(matches!(
            encode("UscUniform", &args(&["nope=1"])),
            Err(FormatCliError::UnknownField { .. })
        ));
        assert!(matches!(
            encode("UscUniform", &args(&["size_halfs"])),
            Err(FormatCliError::NotAnAssignment(_))
        ));
        assert!(matches!(
            encode("UscUniform", &args(&["size_halfs=eight"])),
            Err(FormatCliError::BadValue { .. })
        ));
        assert!(matches!(
            encode("Nope", &[]),
            Err(FormatCliError::UnknownFormat(_))
        ));
        // A linear texture's stride shares its bits with a twiddled one's
        // depth: setting it on a twiddled texture is refused, whatever
        // the order of the two.
        assert!(matches!(
            encode("Texture", &args(&["stride=256", "layout=twiddled"])),
            Err(FormatCliError::ConditionNotMet {
                field: "stride",
                ..
            })
        ));
        assert!(encode("Texture", &args(&["layout=linear", "stride=256"])).is_ok());
        // A sample count only applies to a multisampled dimension.
        assert!(matches!(
            encode("Texture", &args(&["samples=four"])),
            Err(FormatCliError::ConditionNotMet {
                field: "samples",
                ..
            })
        ));
        let ms = encode(
            "Texture",
            &args(&["dimension=D2Multisampled", "samples=four"]),
        )
        .unwrap();
        let printed = decode("Texture", &[&words_text(&ms)]).unwrap();
        assert!(printed.contains("samples: 4"), "{printed}");
        // On a single-sampled texture the field is left out while zero,
        // and shown when a bit is set there.
        let plain = encode("Texture", &[]).unwrap();
        let printed = decode("Texture", &[&words_text(&plain)]).unwrap();
        assert!(!printed.contains("samples"), "{printed}");
        let mut stray = plain.clone();
        stray[8] |= 1;
        let printed = decode("Texture", &[&words_text(&stray)]).unwrap();
        assert!(printed.contains("samples: 4"), "{printed}");
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(
            decode("Nope", &["00"]),
            Err(FormatCliError::UnknownFormat("Nope".into()))
        );
        assert_eq!(
            decode("Sampler", &["0g"]),
            Err(FormatCliError::BadHex("0g".into()))
        );
        assert!(matches!(
            decode("Sampler", &["00"]),
            Err(FormatCliError::Short(_))
        ));
        assert!(run(&Command::List).unwrap().contains("Texture"));
        let fields = run(&Command::Fields {
            format: "UscUniform".into(),
        })
        .unwrap();
        assert!(fields.contains("size_halfs"), "{fields}");
    }
}
