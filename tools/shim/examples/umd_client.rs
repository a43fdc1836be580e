//! The userspace driver's real-hardware path (`Device::open`: rustix's
//! open, ioctl and mmap, sync-file status for fence errors), run under
//! `LD_PRELOAD=libagx_shim.so` against the simulated GPU: a compute
//! dispatch checked against Rust, then one that faults, which must come
//! back as EIO. Prints "ok" on success.

mod common;

use std::sync::Arc;

use agx_umd::{Device, Errno, Error, ProgramCache, Queue};
use common::{computed, dispatch, input, COUNT};

fn check(cond: bool, what: &str) {
    if !cond {
        eprintln!("check failed: {what}");
        std::process::exit(1);
    }
}

fn main() -> Result<(), Error> {
    let device = Device::open("/dev/dri/renderD128")?;
    let queue = Queue::new(&device)?;
    let programs = Arc::new(ProgramCache::new(&device));
    let x = device.upload(&input(), false)?;
    let y = device.upload(&[0u8; 4 * COUNT as usize], true)?;
    dispatch(&device, &queue, &programs, x.va(), y.va())?;
    let out = y.read_all()?;
    check(computed(&out), "the kernel's results");
    // Nothing is bound at y: the fault comes back as EIO through the
    // submission's sync file.
    match dispatch(&device, &queue, &programs, x.va(), 0x30_0000_0000) {
        Err(Error::GpuFault { errno }) => check(errno == Errno::EIO, "EIO"),
        other => check(false, &format!("a fault, not {other:?}")),
    }
    println!("ok");
    Ok(())
}
