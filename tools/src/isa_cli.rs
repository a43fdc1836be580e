//! `agx-asm` and `agx-disasm`: AGX shader machine code to and from text.
//!
//! Both read a file (or standard input for `-`), place the code at a base
//! address (`--base`, default 0) so that branch targets print as absolute
//! addresses, and speak the notation of `agx_hw::isa::text`. The
//! disassembler's listing (`0x0010: <bytes> <text>`) is itself valid
//! assembler input.

use std::fmt::Write as _;

use agx_hw::isa::text::{assemble, disassemble, listing_line};

/// An input the tools cannot act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsaCliError {
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

/// What both tools say about their exit status.
const EXIT_STATUS: &str = "Exit status: 0 on success; 1 when the input is not valid code \
(the assembler's error names the line; the disassembler prints the listing up to the bad \
bytes); 2 for a bad command line, hex input that is not hex, or a file that cannot be read or \
written.";

/// `agx-asm`'s command line.
#[derive(Debug, clap::Parser)]
#[command(
    name = "agx-asm",
    version,
    about = "Assemble AGX (G13) shader assembly into machine code",
    long_about = "Assemble AGX (G13) shader assembly into machine code.\n\n\
        One instruction per line, `label:` prefixes, comments after `;`, `//` or `#`. \
        Disassembly listings (`0x10: <bytes> <text>`) are accepted as input.",
    after_help = EXIT_STATUS
)]
pub struct AsmArgs {
    /// Source file; standard input if absent or `-`.
    pub input: Option<String>,
    /// Address the code will run at (for absolute branch targets).
    #[arg(long, default_value = "0", value_parser = parse_address)]
    pub base: u64,
    /// Print the code as hex instead of writing binary.
    #[arg(long)]
    pub hex: bool,
    /// Write the binary to OUT instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: Option<String>,
}

/// `agx-disasm`'s command line.
#[derive(Debug, clap::Parser)]
#[command(
    name = "agx-disasm",
    version,
    about = "Disassemble AGX (G13) shader machine code into a listing of address, bytes and instruction text",
    after_help = EXIT_STATUS
)]
pub struct DisasmArgs {
    /// Binary file; standard input if absent or `-`.
    pub input: Option<String>,
    /// Address of the first byte (printed addresses and targets).
    #[arg(long, default_value = "0", value_parser = parse_address)]
    pub base: u64,
    /// The input is hex text (`2a8142422400` or 0x-prefixed words).
    #[arg(long)]
    pub hex: bool,
    /// End the listing after the first `stop`.
    #[arg(long = "stop")]
    pub until_stop: bool,
}

impl AsmArgs {
    /// The input path; `None` for standard input.
    pub fn input_path(&self) -> Option<&str> {
        self.input.as_deref().filter(|p| *p != "-")
    }
}

impl DisasmArgs {
    /// The input path; `None` for standard input.
    pub fn input_path(&self) -> Option<&str> {
        self.input.as_deref().filter(|p| *p != "-")
    }
}

/// A decimal or 0x-prefixed hexadecimal address.
fn parse_address(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16).ok(),
        None => text.parse().ok(),
    };
    parsed.ok_or_else(|| format!("`{text}` is not an address (decimal or 0x hex)"))
}

/// What the assembler produces: binary, or hex text with `--hex`.
pub fn assemble_input(source: &str, options: &AsmArgs) -> Result<Vec<u8>, IsaCliError> {
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
pub fn disassemble_input(input: &[u8], options: &DisasmArgs) -> Result<String, IsaCliError> {
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
