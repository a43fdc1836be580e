//! `agx-asm`: assemble AGX shader assembly into machine code.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
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
    let written = match &args.output {
        Some(path) => std::fs::write(path, &output).map_err(|e| format!("{path}: {e}")),
        None => std::io::stdout()
            .write_all(&output)
            .map_err(|e| format!("<stdout>: {e}")),
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agx-asm: {e}");
            ExitCode::from(2)
        }
    }
}
