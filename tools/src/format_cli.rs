//! `agx-format`: decode raw bytes as any hardware format.
//!
//! GPU hang dumps and captures are full of descriptors and control words.
//! This command decodes one of them through the single format description
//! in `agx-hw`, printing every field and every bit it cannot explain.

use std::fmt::Write as _;

/// A command line `agx-format` cannot act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatCliError {
    /// No or unknown subcommand.
    #[error("usage: agx-format list | agx-format decode FORMAT HEX...\n  HEX is bytes (\"1d 04 80 00\") or 32-bit little-endian words (0x0080041d)")]
    Usage,
    /// The format name is not known.
    #[error("unknown format `{0}` (see `agx-format list`)")]
    UnknownFormat(String),
    /// The input is not hexadecimal.
    #[error("`{0}` is not hexadecimal")]
    BadHex(String),
    /// Fewer bytes than the format needs.
    #[error(transparent)]
    Short(#[from] agx_hw::ShortInput),
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

/// Runs `agx-format` with `args` (without the program name) and returns
/// what it prints.
///
/// # Errors
/// [`FormatCliError`] for a bad command line or input.
pub fn run(args: &[String]) -> Result<String, FormatCliError> {
    match args.first().map(String::as_str) {
        Some("list") => {
            let mut out = String::new();
            for f in agx_hw::ALL_FORMATS {
                let _ = writeln!(out, "{:<28} {:>3} bytes  {}", f.name, f.size_bytes, f.group);
            }
            Ok(out)
        }
        Some("decode") if args.len() >= 3 => {
            let bytes = parse_hex(&args[2..])?;
            match agx_hw::formats::print_by_name(&args[1], &bytes) {
                Some(result) => Ok(result?),
                None => Err(FormatCliError::UnknownFormat(args[1].clone())),
            }
        }
        _ => Err(FormatCliError::Usage),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn decodes_words_and_reports_unknown_bits() {
        // A USC Uniform word: 8 halves at half 4 from 0x10000.
        let word: u64 = 0x1d | 4 << 8 | 8 << 20 | (0x10000 >> 2) << 26;
        let lo = format!("{:#x}", word & 0xffff_ffff);
        let hi = format!("{:#x}", word >> 32);
        let out = run(&args(&["decode", "UscUniform", &lo, &hi])).unwrap();
        assert!(out.contains("start_halfs: 4"), "{out}");
        assert!(out.contains("size_halfs: 8"), "{out}");
        assert!(out.contains("buffer: 0x10000"), "{out}");
        assert!(!out.contains("XXX"), "{out}");

        let out = run(&args(&["decode", "Sampler", "00000000 00000400"])).unwrap();
        assert!(out.contains("XXX: unknown bits in word 1"), "{out}");
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(run(&args(&[])), Err(FormatCliError::Usage));
        assert_eq!(
            run(&args(&["decode", "Nope", "00"])),
            Err(FormatCliError::UnknownFormat("Nope".into()))
        );
        assert_eq!(
            run(&args(&["decode", "Sampler", "0g"])),
            Err(FormatCliError::BadHex("0g".into()))
        );
        assert!(matches!(
            run(&args(&["decode", "Sampler", "00"])),
            Err(FormatCliError::Short(_))
        ));
        assert!(run(&args(&["list"])).unwrap().contains("Texture"));
    }
}
