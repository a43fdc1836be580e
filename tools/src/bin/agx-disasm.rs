//! `agx-disasm`: disassemble AGX shader machine code.
#![forbid(unsafe_code)]

use std::io::Read;
use std::process::ExitCode;

use agx_tools::isa_cli::{disassemble_input, parse_options, IsaCliError, DISASM_HELP};

fn main() -> ExitCode {
    agx_tools::install_kernel_log("agx-disasm");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse_options(&args, DISASM_HELP, false) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("agx-disasm: {e}");
            return ExitCode::from(2);
        }
    };
    if options.help {
        println!("{DISASM_HELP}");
        return ExitCode::SUCCESS;
    }
    let input = match &options.input {
        Some(path) => std::fs::read(path).map_err(|e| format!("{path}: {e}")),
        None => {
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .map(|_| bytes)
                .map_err(|e| e.to_string())
        }
    };
    let input = match input {
        Ok(input) => input,
        Err(e) => {
            eprintln!("agx-disasm: {e}");
            return ExitCode::from(2);
        }
    };
    match disassemble_input(&input, &options) {
        Ok(listing) => {
            print!("{listing}");
            ExitCode::SUCCESS
        }
        Err(IsaCliError::Undecodable { address, listing }) => {
            print!("{listing}");
            eprintln!("agx-disasm: undecodable bytes at {address:#x}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("agx-disasm: {e}");
            ExitCode::from(2)
        }
    }
}
