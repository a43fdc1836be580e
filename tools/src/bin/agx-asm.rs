//! `agx-asm`: assemble AGX shader assembly into machine code.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::process::ExitCode;

use agx_tools::isa_cli::{assemble_input, parse_options, ASM_HELP};

fn main() -> ExitCode {
    agx_tools::install_kernel_log("agx-asm");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse_options(&args, ASM_HELP, true) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("agx-asm: {e}");
            return ExitCode::from(2);
        }
    };
    if options.help {
        println!("{ASM_HELP}");
        return ExitCode::SUCCESS;
    }
    let source = match &options.input {
        Some(path) => std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}")),
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map(|_| text)
                .map_err(|e| e.to_string())
        }
    };
    let source = match source {
        Ok(source) => source,
        Err(e) => {
            eprintln!("agx-asm: {e}");
            return ExitCode::from(2);
        }
    };
    let output = match assemble_input(&source, &options) {
        Ok(output) => output,
        Err(e) => {
            eprintln!(
                "agx-asm: {}: {e}",
                options.input.as_deref().unwrap_or("<stdin>")
            );
            return ExitCode::FAILURE;
        }
    };
    let written = match &options.output {
        Some(path) => std::fs::write(path, &output).map_err(|e| format!("{path}: {e}")),
        None => std::io::stdout()
            .write_all(&output)
            .map_err(|e| e.to_string()),
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agx-asm: {e}");
            ExitCode::from(2)
        }
    }
}
