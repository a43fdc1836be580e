//! The simulated GPU firmware and GPU.
//!
//! `agx-firmware-sim` consumes the firmware interface the kmd writes
//! (`agx-fwif`) and really executes the work it finds, in the real AGX
//! formats (`agx-hw`): vertex shading, tiling into the parameter buffer,
//! overflow and partial renders, fragment shading, texturing and compute.
//! It never depends on the kmd: like real firmware, it only sees memory.
//!
//! Status: the shader core ([`usc`]) runs AGX machine code, and the
//! firmware thread ([`firmware`]) serves the kmd's rings and work queues;
//! the kmd side of submission and the render pipeline arrive with the rest
//! of "kmd part 2" and the "GPU execution" work.
#![forbid(unsafe_code)]

pub mod firmware;
pub mod usc;
