//! A client that submits GPU work and waits for it where Mesa's GL driver
//! does at exit: from a thread-local destructor of a thread that returns,
//! and from an `atexit` handler after `main` returned (by then this
//! thread's own thread-locals, the userspace driver's and the shim's
//! among them, are destroyed). Run under `LD_PRELOAD=libagx_shim.so`;
//! prints "ok" from the exit handler and exits 0 when every dispatch
//! computed what Rust does.

mod common;

use std::sync::{Arc, Mutex};

use agx_umd::{Buffer, Device, Error, ProgramCache, Queue};
use common::{computed, dispatch, input, COUNT};

/// The device and what a dispatch needs, kept for the exit handler.
struct Gpu {
    device: Device,
    queue: Queue,
    programs: Arc<ProgramCache>,
    input: Buffer,
}

static GPU: Mutex<Option<Gpu>> = Mutex::new(None);

/// Fails the process without running the exit handlers again (this may
/// run inside one).
fn check(cond: bool, what: &str) {
    if !cond {
        eprintln!("check failed: {what}");
        // SAFETY: _exit ends the process at once; it is always allowed.
        unsafe { libc::_exit(1) };
    }
}

/// Dispatches the kernel over the input into a new buffer, waits, and
/// checks every result.
fn dispatch_and_check(gpu: &Gpu, what: &str) {
    let result = (|| -> Result<Vec<u8>, Error> {
        let output = gpu.device.upload(&[0u8; 4 * COUNT as usize], true)?;
        dispatch(
            &gpu.device,
            &gpu.queue,
            &gpu.programs,
            gpu.input.va(),
            output.va(),
        )?;
        output.read_all()
    })();
    let out = match result {
        Ok(out) => out,
        Err(e) => {
            check(false, &format!("{what}: {e}"));
            return;
        }
    };
    check(computed(&out), what);
}

/// Dispatches when the thread that owns it ends.
struct DispatchOnDrop;

impl Drop for DispatchOnDrop {
    fn drop(&mut self) {
        let gpu = GPU.lock().unwrap_or_else(|e| e.into_inner());
        match gpu.as_ref() {
            Some(gpu) => dispatch_and_check(gpu, "a dispatch from a thread-local destructor"),
            None => check(false, "the device is there for the thread-local destructor"),
        }
    }
}

thread_local! {
    static AT_THREAD_EXIT: DispatchOnDrop = const { DispatchOnDrop };
}

extern "C" fn at_exit() {
    let gpu = GPU.lock().unwrap_or_else(|e| e.into_inner()).take();
    match gpu {
        Some(gpu) => {
            dispatch_and_check(&gpu, "a dispatch from an atexit handler");
            // Everything is released here, as Mesa's context destruction does.
            drop(gpu);
            println!("ok");
        }
        None => check(false, "the device is there for the exit handler"),
    }
}

fn main() -> Result<(), Error> {
    let device = Device::open("/dev/dri/renderD128")?;
    let queue = Queue::new(&device)?;
    let programs = Arc::new(ProgramCache::new(&device));
    let input = device.upload(&input(), false)?;
    let gpu = Gpu {
        device,
        queue,
        programs,
        input,
    };
    dispatch_and_check(&gpu, "a dispatch from main");
    *GPU.lock().unwrap_or_else(|e| e.into_inner()) = Some(gpu);

    let thread = std::thread::spawn(|| AT_THREAD_EXIT.with(|_| ()));
    check(thread.join().is_ok(), "the thread ends");

    // SAFETY: registers a handler with the C signature atexit expects.
    check(unsafe { libc::atexit(at_exit) } == 0, "atexit");
    Ok(())
}
