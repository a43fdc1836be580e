//! The userspace driver's real-hardware path (`Device::open`: rustix's
//! open, ioctl and mmap, sync-file status for fence errors), run under
//! `LD_PRELOAD=libagx_shim.so` against the simulated GPU: a compute
//! dispatch checked against Rust, then one that faults, which must come
//! back as EIO. Prints "ok" on success.

use std::sync::Arc;
use std::time::Duration;

use agx_umd::{Bindings, CommandBuffer, Device, Errno, Error, ProgramCache, Queue, Shader};

/// y[i] = 2 x[i] + 1 for i < n (x at u0_u1, y at u2_u3, n in u4).
const KERNEL: &str = "
    get_sr r1, sr80
    if_icmp r0l, ult, r1, u4, 1
    jmp_exec_none done
    device_load 0, i32, x, r2, u0_u1, r1, unsigned
    wait 0
    fmadd32 r3, r2, 2.0, 1.0
    device_store 0, i32, x, r3, u2_u3, r1, unsigned, 0
done:
    pop_exec r0l, 1
    stop";

fn check(cond: bool, what: &str) {
    if !cond {
        eprintln!("check failed: {what}");
        std::process::exit(1);
    }
}

fn dispatch(
    device: &Device,
    queue: &Queue,
    programs: &Arc<ProgramCache>,
    x: u64,
    y: u64,
) -> Result<(), Error> {
    let shader = Shader::new(device, KERNEL)?;
    let mut cb = CommandBuffer::new(device, programs);
    let words = [x as u32, (x >> 32) as u32, y as u32, (y >> 32) as u32, 100];
    let bindings = Bindings::default().with_uniform_words(cb.arena(), &words)?;
    cb.dispatch(&shader, &bindings, [128, 1, 1], [64, 1, 1])?;
    cb.finish()?;
    queue
        .submit(vec![cb], &[], &[])?
        .wait(Duration::from_secs(60))
}

fn main() -> Result<(), Error> {
    let device = Device::open("/dev/dri/renderD128")?;
    let queue = Queue::new(&device)?;
    let programs = Arc::new(ProgramCache::new(&device));
    let input: Vec<u8> = (0..100).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let x = device.upload(&input, false)?;
    let y = device.upload(&[0u8; 400], true)?;
    dispatch(&device, &queue, &programs, x.va(), y.va())?;
    let out = y.read_all()?;
    for i in 0..100 {
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
