//! The userspace driver.
//!
//! `agx-umd` builds command buffers for AGX GPUs: render passes with their
//! tilebuffer load/store programs (`bg`, `eot`, `partial_bg`,
//! `partial_eot`), the depth/stencil load/store (ZLS) configuration that
//! keeps partial renders correct, and descriptor heaps (24-byte texture and
//! PBE descriptors, 8-byte samplers). It talks to the kernel only through the
//! asahi UAPI (`agx-uapi`), so the same code drives a real Asahi Linux kernel
//! and the simulated device.
//!
//! Status: only the crate exists; the driver arrives with the "umd" work.
#![forbid(unsafe_code)]
