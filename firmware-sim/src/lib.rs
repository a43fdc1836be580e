//! The simulated GPU firmware and GPU.
//!
//! `agx-firmware-sim` consumes the firmware interface the kmd writes
//! (`agx-fwif`) and really executes the work it finds, in the real AGX
//! formats (`agx-hw`): vertex shading, tiling into the parameter buffer,
//! overflow and partial renders, fragment shading, texturing and compute.
//! It never depends on the kmd: like real firmware, it only sees memory.
//!
//! Status: only the crate exists; the firmware loop and execution engine
//! arrive with the "kmd part 2" and "GPU execution" work.
#![forbid(unsafe_code)]
