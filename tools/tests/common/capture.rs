//! Captures of work our umd does on a simulated device, for the tests of
//! the tools that read them.

use agx_capture::Capture;
use agx_umd::{CommandBuffer, Device, Queue};

/// A simulated device with 1 GiB of RAM.
pub(crate) fn device() -> Device {
    Device::open_simulated(agx_sim::SystemConfig {
        ram_bytes: 1 << 30,
        ..agx_sim::SystemConfig::default()
    })
    .unwrap()
}

/// Where a test keeps capture `name`.
pub(crate) fn capture_path(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// Starts capturing on `device`, runs `work`, and reads the capture back.
pub(crate) fn captured(device: &Device, name: &str, work: impl FnOnce()) -> Capture {
    let path = capture_path(name);
    let system = device.simulated().unwrap().system();
    system.capture_to(&path).unwrap();
    work();
    system.stop_capture();
    agx_capture::read(std::fs::File::open(&path).unwrap()).unwrap()
}

/// Finishes `cb`, submits it on a new queue of `device` and waits for it.
pub(crate) fn run_to_completion(device: &Device, mut cb: CommandBuffer) {
    cb.finish().unwrap();
    Queue::new(device)
        .unwrap()
        .submit(vec![cb], &[], &[])
        .unwrap()
        .wait(std::time::Duration::from_secs(30))
        .unwrap();
}

/// A vertex shader for test draws: clip-space positions, four words each,
/// from the buffer at u0_u1, indexed by the vertex id.
pub(crate) const VS: &str = "
    device_load 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r5, unsigned, lsl 2
    wait 0
    st_var 1, r8, 0
    st_var 1, r9, 1
    st_var 1, r10, 2
    st_var 1, r11, 3
    stop";
