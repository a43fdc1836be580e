//! What the userspace-driver examples share: a compute kernel and its
//! dispatch.

use std::sync::Arc;
use std::time::Duration;

use agx_umd::{Bindings, CommandBuffer, Device, Error, ProgramCache, Queue, Shader};

/// How many elements the kernel processes.
pub(crate) const COUNT: u32 = 100;

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

/// The input the kernel is given: 0.0, 1.0, ... as little-endian floats.
pub(crate) fn input() -> Vec<u8> {
    (0..COUNT).flat_map(|i| (i as f32).to_le_bytes()).collect()
}

/// Whether `out` holds what the kernel computes from [`input`].
pub(crate) fn computed(out: &[u8]) -> bool {
    out.len() >= 4 * COUNT as usize
        && out
            .chunks_exact(4)
            .take(COUNT as usize)
            .enumerate()
            .all(|(i, word)| {
                f32::from_le_bytes([word[0], word[1], word[2], word[3]]) == 2.0 * i as f32 + 1.0
            })
}

/// Runs the kernel over [`COUNT`] floats at GPU address `x` into `y` and
/// waits for it.
pub(crate) fn dispatch(
    device: &Device,
    queue: &Queue,
    programs: &Arc<ProgramCache>,
    x: u64,
    y: u64,
) -> Result<(), Error> {
    let shader = Shader::new(device, KERNEL)?;
    let mut cb = CommandBuffer::new(device, programs);
    let words = [
        x as u32,
        (x >> 32) as u32,
        y as u32,
        (y >> 32) as u32,
        COUNT,
    ];
    let bindings = Bindings::default().with_uniform_words(cb.arena(), &words)?;
    cb.dispatch(&shader, &bindings, [128, 1, 1], [64, 1, 1])?;
    cb.finish()?;
    queue
        .submit(vec![cb], &[], &[])?
        .wait(Duration::from_secs(60))
}
