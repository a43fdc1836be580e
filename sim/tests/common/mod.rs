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

/// The bits of `value` (0 or a normal number the format holds exactly)
/// as an unsigned small float with `mantissa_bits` and bias 15.
pub fn small_float_bits(value: f64, mantissa_bits: u32) -> u32 {
    if value == 0.0 {
        return 0;
    }
    let exponent = value.log2().floor() as i32;
    let mantissa = (value / 2f64.powi(exponent) - 1.0) * f64::from(1u32 << mantissa_bits);
    assert_eq!(mantissa.fract(), 0.0, "{value} is exact in the format");
    ((exponent + 15) as u32) << mantissa_bits | mantissa as u32
}
