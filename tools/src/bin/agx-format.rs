//! `agx-format`: decode raw bytes as any AGX hardware format, or encode
//! one from field values.
#![forbid(unsafe_code)]

use clap::Parser;

fn main() -> std::process::ExitCode {
    agx_tools::install_kernel_log("agx-format");
    let cli = agx_tools::format_cli::Cli::parse();
    match agx_tools::format_cli::run(&cli.command) {
        Ok(out) => {
            agx_tools::out!("agx-format", "{out}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("agx-format: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
