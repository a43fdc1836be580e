//! The userspace driver's real-hardware path (`Device::open`: rustix's
//! open, ioctl and mmap, sync-file status for fence errors), run under
//! `LD_PRELOAD=libagx_shim.so` against the simulated GPU: a compute
//! dispatch checked against Rust, then one that faults, which must come
//! back as EIO. Prints "ok" on success.

mod common;

use std::sync::Arc;

use agx_umd::{Device, Errno, Error, ProgramCache, Queue};
use common::{dispatch, COUNT};

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
    let input: Vec<u8> = (0..COUNT).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let x = device.upload(&input, false)?;
    let y = device.upload(&[0u8; 400], true)?;
    dispatch(&device, &queue, &programs, x.va(), y.va())?;
    let out = y.read_all()?;
    for i in 0..COUNT as usize {
        let got = f32::from_le_bytes(out[4 * i..4 * i + 4].try_into().unwrap_or_default());
        check(got == 2.0 * i as f32 + 1.0, "the kernel's results");
    }
    // Nothing is bound at y: the fault comes back as EIO through the
    // submission's sync file.
    match dispatch(&device, &queue, &programs, x.va(), 0x30_0000_0000) {
        Err(Error::GpuFault { errno }) => check(errno == Errno::EIO, "EIO"),
        other => check(false, &format!("a fault, not {other:?}")),
    }
    println!("ok");
    Ok(())
}
