//! A compute kernel that never ends, for the tests and benchmarks of
//! sharing the GPU: 64 threadgroups of 32 lanes spinning forever, so that
//! every GPU worker thread is inside one of them.

use std::sync::Arc;

use agx_umd::{Bindings, CommandBuffer, Device, ProgramCache, Queue, Shader, Submission};

/// Every lane spins forever.
const ENDLESS: &str = "
loop:
    jmp_exec_any loop
    stop";

/// The endless kernel, submitted, with what it runs from: the GPU reads
/// the shader and its queue while it runs. Fields drop in order, the
/// submission (which waits for the kernel to end) first.
pub(crate) struct Endless {
    pub(crate) submission: Submission,
    _shader: Shader,
    _programs: Arc<ProgramCache>,
    _queue: Queue,
}

/// Submits the endless kernel on a new queue of `device`.
pub(crate) fn submit_endless(device: &Device) -> Endless {
    let queue = Queue::new(device).unwrap();
    let programs = Arc::new(ProgramCache::new(device));
    let shader = Shader::new(device, ENDLESS).unwrap();
    let mut cb = CommandBuffer::new(device, &programs);
    cb.dispatch(&shader, &Bindings::default(), [2048, 1, 1], [32, 1, 1])
        .unwrap();
    cb.finish().unwrap();
    let submission = queue.submit(vec![cb], &[], &[]).unwrap();
    Endless {
        submission,
        _shader: shader,
        _programs: programs,
        _queue: queue,
    }
}
