//! Tools people run against the AGX stack.
//!
//! - `agx-render` draws a mesh (built in, or an OBJ/PLY file) through the
//!   whole stack to a PNG and reports what the parameter buffer did;
//! - `agx-format` decodes hardware descriptors and control words given as
//!   hex through the one format description in `agx-hw`, and encodes them
//!   from field values;
//! - `agx-asm` and `agx-disasm` assemble and disassemble AGX shader
//!   machine code through the instruction table in `agx_hw::isa`;
//! - `agx-decode` prints and lints a capture, `agx-replay` re-runs it,
//!   `agx-debug` re-runs it with one invocation traced ([`debug`]);
//!   `agx-fuzz` fuzzes the simulated
//!   device ([`fuzz`]).
#![forbid(unsafe_code)]

pub mod compare;
pub mod debug;
pub mod decode;
pub mod format_cli;
pub mod fuzz;
pub mod isa_cli;
pub mod mesh;
pub mod render;
pub mod replay;

/// Writes `args` to standard output, for the tools' `out!` and `outln!`.
/// A reader that went away (`EPIPE`: `agx-decode capture | head`) ends the
/// tool quietly with status 0, as a Unix tool ends when its reader is gone
/// (Rust ignores `SIGPIPE`, so `print!` would panic with status 101); any
/// other failure to write ends it with status 1 and a message.
pub fn write_stdout(tool: &str, args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    stdout_written(tool, out.write_fmt(args).and_then(|()| out.flush()));
}

/// Writes `bytes` to standard output, as [`write_stdout`] writes text.
pub fn write_stdout_bytes(tool: &str, bytes: &[u8]) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    stdout_written(tool, out.write_all(bytes).and_then(|()| out.flush()));
}

fn stdout_written(tool: &str, written: std::io::Result<()>) {
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("{tool}: standard output: {e}");
            std::process::exit(1);
        }
    }
}

/// `print!` for a tool: see [`write_stdout`]. The first argument is the
/// tool's name, for the message.
#[macro_export]
macro_rules! out {
    ($tool:expr, $($arg:tt)*) => {
        $crate::write_stdout($tool, format_args!($($arg)*))
    };
}

/// `println!` for a tool: see [`write_stdout`].
#[macro_export]
macro_rules! outln {
    ($tool:expr) => {
        $crate::write_stdout($tool, format_args!("\n"))
    };
    ($tool:expr, $($arg:tt)*) => {
        $crate::write_stdout($tool, format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Installs the kernel log (`agx_sim::log`: `AGX_LOG` or `RUST_LOG`
/// filters, `AGX_LOG_FILE` redirects) for a tool's process; a
/// misconfiguration is reported on standard error and the tool goes on
/// without the log.
pub fn install_kernel_log(tool: &str) {
    if let Err(e) = agx_sim::log::install(&agx_sim::log::LogConfig::from_env()) {
        eprintln!("{tool}: kernel log: {e}");
    }
}

/// `n` and `noun`, plural unless `n` is 1 ("1 submission", "0 submissions").
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
