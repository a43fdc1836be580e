//! Tools people run against the AGX stack.
//!
//! - `agx-render` draws a mesh (built in, or an OBJ/PLY file) through the
//!   whole stack to a PNG and reports what the parameter buffer did;
//! - `agx-format` decodes hardware descriptors and control words given as
//!   hex through the one format description in `agx-hw`, and encodes them
//!   from field values;
//! - `agx-asm` and `agx-disasm` assemble and disassemble AGX shader
//!   machine code through the instruction table in `agx_hw::isa`;
//! - `agx-decode` prints and lints a capture, `agx-replay` re-runs it;
//!   `agx-fuzz` fuzzes the simulated
//!   device ([`fuzz`]).
#![forbid(unsafe_code)]

pub mod compare;
pub mod decode;
pub mod format_cli;
pub mod fuzz;
pub mod isa_cli;
pub mod mesh;
pub mod render;
pub mod replay;

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
