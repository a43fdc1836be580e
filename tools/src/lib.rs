//! Tools people run against the AGX stack.
//!
//! Planned here: the renderer that draws the built-in scene to a PNG, the
//! capture decoder and linter, the shader disassembler, and the drm-shim
//! style `LD_PRELOAD` library. What exists today is the format printer
//! (`agx-format`), which decodes hardware descriptors and control words given
//! as hex through the one format description in `agx-hw`.
#![forbid(unsafe_code)]

pub mod format_cli;
