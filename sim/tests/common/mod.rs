//! Shared helpers for the tests that run the kmd on the simulated GPU:
//! the kmd tests' typed ioctl calls, and a machine with a VM, buffers and
//! a queue.
#![allow(dead_code, unreachable_pub)]

#[path = "../../../kmd/tests/common/ioctl.rs"]
mod ioctl;
pub mod machine;

pub use ioctl::*;

use agx_sim::{System, SystemConfig};

/// A machine with 2 GiB of RAM.
pub fn system() -> System {
    System::new(SystemConfig {
        ram_bytes: 2 << 30,
        ..SystemConfig::default()
    })
    .expect("system")
}
