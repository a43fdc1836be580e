//! Tools people run against the AGX stack.
//!
//! Planned here: the renderer that draws the built-in scene to a PNG, the
//! capture decoder and linter, and the drm-shim style `LD_PRELOAD` library.
//! What exists today:
//!
//! - `agx-format` decodes hardware descriptors and control words given as
//!   hex through the one format description in `agx-hw`;
//! - `agx-asm` and `agx-disasm` assemble and disassemble AGX shader
//!   machine code through the instruction table in `agx_hw::isa`.
#![forbid(unsafe_code)]

pub mod format_cli;
pub mod isa_cli;
