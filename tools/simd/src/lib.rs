//! The simulated GPU as one device for many processes.
//!
//! On Linux a GPU is one device however many processes use it: a
//! compositor and its clients, a test harness and the programs it forks,
//! all open the same nodes and share buffers and fences through file
//! descriptors. This crate gives the simulated GPU that shape: a device
//! process (`agx-simd`, built by the `agx-shim` package) hosts one
//! [`agx_sim::System`], and the shim in each client process forwards the
//! client's DRM calls to it ([`client`]) over Unix sockets
//! ([`protocol`]), where the device runs them ([`server`]) as the kernel
//! would: with the caller's identity, its memory and its descriptor table.
//! GEM memory is shared, not copied: a CPU mapping is the object's own
//! memfd, handed to a client that holds a handle to it.
#![deny(unsafe_code)]

pub mod client;
pub mod detach;
pub mod nodes;
pub mod peer;
pub mod pool;
pub mod protocol;
pub mod server;
pub mod signal;
