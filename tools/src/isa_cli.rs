//! `agx-asm` and `agx-disasm`: AGX shader machine code to and from text.
//!
//! Both read a file (or standard input for `-`), place the code at a base
//! address (`--base`, default 0) so that branch targets print as absolute
//! addresses, and speak the notation of `agx_hw::isa::text`. The
//! disassembler's listing (`0x0010: <bytes> <text>`) is itself valid
//! assembler input.

use std::fmt::Write as _;

use agx_hw::isa::text::{assemble, disassemble, listing_line};

/// A command line or input the tools cannot act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsaCliError {
    /// Bad arguments; the message says which.
    #[error("{0}\n\n{1}")]
    Usage(String, &'static str),
    /// The assembler rejected the source.
    #[error(transparent)]
    Assemble(#[from] agx_hw::isa::AsmError),
    /// Hex input that is not hex.
    #[error(transparent)]
    Hex(#[from] crate::format_cli::FormatCliError),
    /// Bytes that decode as no instruction (the listing up to them is
    /// still printed).
    #[error("undecodable bytes at {address:#x}")]
    Undecodable {
        /// Address of the first bad byte.
        address: u64,
        /// The listing up to and including the error line.
        listing: String,
    },
}

/// `agx-asm --help`.
pub const ASM_HELP: &str = "\
usage: agx-asm [--base ADDR] [--hex] [-o OUT] [INPUT]

Assembles AGX (G13) shader assembly into machine code.
  INPUT        source file; standard input if absent or `-`
  --base ADDR  address the code will run at (for absolute branch targets)
  --hex        print the code as hex instead of writing binary
  -o OUT       write the binary to OUT instead of standard output
One instruction per line, `label:` prefixes, comments after `;`, `//` or
`#`. Disassembly listings (`0x10: <bytes> <text>`) are accepted as input.";

/// `agx-disasm --help`.
pub const DISASM_HELP: &str = "\
usage: agx-disasm [--base ADDR] [--hex] [--stop] [INPUT]

Disassembles AGX (G13) shader machine code into a listing of address,
bytes and instruction text.
  INPUT        binary file; standard input if absent or `-`
  --base ADDR  address of the first byte (printed addresses and targets)
  --hex        the input is hex text (`2a8142422400` or 0x-prefixed words)
  --stop       end the listing after the first `stop`
Bytes no instruction form matches end the listing with an error line and
exit status 1.";

/// Parsed options common to both tools.
#[derive(Debug, Default)]
pub struct Options {
    /// `--base`.
    pub base: u64,
    /// `--hex`.
    pub hex: bool,
    /// `--stop` (disassembler).
    pub until_stop: bool,
    /// `-o` (assembler).
    pub output: Option<String>,
    /// The input path, if not standard input.
    pub input: Option<String>,
    /// `--help`.
    pub help: bool,
}

fn parse_number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16).ok(),
        None => text.parse().ok(),
    }
}

/// Parses the command line (without the program name).
pub fn parse_options(
    args: &[String],
    help: &'static str,
    assembler: bool,
) -> Result<Options, IsaCliError> {
    let usage = |msg: String| IsaCliError::Usage(msg, help);
    let mut options = Options::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => options.help = true,
            "--hex" => options.hex = true,
            "--stop" if !assembler => options.until_stop = true,
            "--base" => {
                let value = it
                    .next()
                    .ok_or_else(|| usage("--base needs an address".into()))?;
                options.base =
                    parse_number(value).ok_or_else(|| usage(format!("bad address `{value}`")))?;
            }
            "-o" if assembler => {
                options.output = Some(
                    it.next()
                        .ok_or_else(|| usage("-o needs a file".into()))?
                        .clone(),
                );
            }
            "-" => options.input = None,
            other if other.starts_with('-') => {
                return Err(usage(format!("unknown option `{other}`")))
            }
            path => {
                if options.input.replace(path.to_owned()).is_some() {
                    return Err(usage("only one input".into()));
                }
            }
        }
    }
    Ok(options)
}

/// What the assembler produces: binary, or hex text with `--hex`.
pub fn assemble_input(source: &str, options: &Options) -> Result<Vec<u8>, IsaCliError> {
    let code = assemble(source, options.base)?;
    if options.hex {
        let mut text: String = code.iter().map(|b| format!("{b:02x}")).collect();
        text.push('\n');
        Ok(text.into_bytes())
    } else {
        Ok(code)
    }
}

/// The disassembler's listing for `input` (binary, or hex with `--hex`).
pub fn disassemble_input(input: &[u8], options: &Options) -> Result<String, IsaCliError> {
    let code = if options.hex {
        let text = String::from_utf8_lossy(input);
        let tokens: Vec<String> = text.split_whitespace().map(str::to_owned).collect();
        crate::format_cli::parse_hex(&tokens)?
    } else {
        input.to_vec()
    };
    let mut listing = String::new();
    let lines = disassemble(&code, options.base, options.until_stop);
    for line in &lines {
        let _ = writeln!(listing, "{}", listing_line(line));
    }
    match lines.iter().find(|l| !l.ok) {
        Some(bad) => Err(IsaCliError::Undecodable {
            address: bad.address,
            listing,
        }),
        None => Ok(listing),
    }
}
