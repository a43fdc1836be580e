//! `agx-asm`: assemble AGX shader assembly into machine code.
#![forbid(unsafe_code)]

use std::io::Read;
use std::process::ExitCode;

use agx_tools::isa_cli::{assemble_input, AsmArgs};
use clap::Parser;

fn main() -> ExitCode {
    agx_tools::install_kernel_log("agx-asm");
    let args = AsmArgs::parse();
    let name = args.input_path().unwrap_or("<stdin>").to_owned();
    let source = match args.input_path() {
        Some(path) => std::fs::read_to_string(path),
        None => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).map(|_| text)
        }
    };
    let source = match source {
        Ok(source) => source,
        Err(e) => {
            eprintln!("agx-asm: {name}: {e}");
            return ExitCode::from(2);
        }
    };
    let output = match assemble_input(&source, &args) {
        Ok(output) => output,
        Err(e) => {
            eprintln!("agx-asm: {name}: {e}");
            return ExitCode::FAILURE;
        }
    };
    match &args.output {
        Some(path) => match std::fs::write(path, &output) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("agx-asm: {path}: {e}");
                ExitCode::from(2)
            }
        },
        None => {
            agx_tools::write_stdout_bytes("agx-asm", &output);
            ExitCode::SUCCESS
        }
    }
}
