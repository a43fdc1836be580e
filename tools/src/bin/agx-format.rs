//! `agx-format`: decode raw bytes as any AGX hardware format.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    agx_tools::install_kernel_log("agx-format");
    let args: Vec<String> = std::env::args().skip(1).collect();
    match agx_tools::format_cli::run(&args) {
        Ok(out) => {
            print!("{out}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("agx-format: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
