//! `agx-disasm`: disassemble AGX shader machine code.
#![forbid(unsafe_code)]

use std::io::Read;
use std::process::ExitCode;

use agx_tools::isa_cli::{disassemble_input, DisasmArgs, IsaCliError};
use clap::Parser;

fn main() -> ExitCode {
    agx_tools::install_kernel_log("agx-disasm");
    let args = DisasmArgs::parse();
    let name = args.input_path().unwrap_or("<stdin>").to_owned();
    let input = match args.input_path() {
        Some(path) => std::fs::read(path),
        None => {
            let mut bytes = Vec::new();
            std::io::stdin().read_to_end(&mut bytes).map(|_| bytes)
        }
    };
    let input = match input {
        Ok(input) => input,
        Err(e) => {
            eprintln!("agx-disasm: {name}: {e}");
            return ExitCode::from(2);
        }
    };
    match disassemble_input(&input, &args) {
        Ok(listing) => {
            agx_tools::out!("agx-disasm", "{listing}");
            ExitCode::SUCCESS
        }
        Err(IsaCliError::Undecodable { address, listing }) => {
            agx_tools::out!("agx-disasm", "{listing}");
            eprintln!("agx-disasm: {name}: undecodable bytes at {address:#x}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("agx-disasm: {name}: {e}");
            ExitCode::from(2)
        }
    }
}
