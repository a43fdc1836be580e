//! The simulated GPU firmware and GPU.
//!
//! `agx-firmware-sim` consumes the firmware interface the kmd writes
//! (`agx-fwif`) and really executes the work it finds, in the real AGX
//! formats (`agx-hw`): vertex shading, tiling into the parameter buffer,
//! overflow and partial renders, fragment shading, texturing and compute.
//! It never depends on the kmd: like real firmware, it only sees memory.
//!
//! Status: the shader core ([`usc`]) runs AGX machine code; the firmware
//! thread ([`firmware`]) serves the kmd's rings and work queues; the data
//! masters ([`engine`]) walk compute control streams through the GPU MMU.
//! Kernel launches and the render pipeline arrive with the "GPU
//! execution" work.
#![forbid(unsafe_code)]

pub mod compute;
pub mod engine;
pub mod firmware;
pub mod render;
pub mod texture;
pub mod tiler;
pub mod usc;
