//! One simulated GPU, two clients: one whose compute kernel never ends,
//! one drawing. The firmware time-slices the GPU between their queues, so
//! the drawing client's frame arrives (bit for bit the frame it draws on a
//! GPU of its own) while the other's kernel is still running, and the
//! watchdog still stops that kernel in the end.

use std::time::{Duration, Instant};

use agx_sim::SystemConfig;
use agx_tools::mesh::Mesh;
use agx_tools::render::Renderer;
use agx_umd::{Device, Error};

#[path = "support/endless.rs"]
mod endless;

/// The watchdog's host-time limit (running time: time spent suspended
/// does not count), and a work budget too large to matter.
const COMMAND_TIMEOUT_MS: u32 = 3_000;

fn config() -> SystemConfig {
    SystemConfig {
        ram_bytes: 1 << 30,
        work_budget_units: 1 << 62,
        command_timeout_ms: COMMAND_TIMEOUT_MS,
        ..SystemConfig::default()
    }
}

fn renderer(device: &Device) -> Renderer {
    Renderer::new(device, &Mesh::torus(30, 10), 96, 64).unwrap()
}

fn frame(renderer: &Renderer) -> Vec<u8> {
    renderer.frame(0).unwrap();
    renderer.pixels().unwrap()
}

#[test]
fn a_client_draws_its_frame_while_another_clients_kernel_never_ends() {
    let alone = frame(&renderer(&Device::open_simulated(config()).unwrap()));

    // Everything set up first: only the endless kernel's running time
    // counts toward its host-time limit, and it runs from its submission.
    let looping = Device::open_simulated(config()).unwrap();
    let system = looping.simulated().unwrap().system().clone();
    let drawing = Device::open_simulated_on(&system).unwrap();
    let drawing_renderer = renderer(&drawing);
    let mut endless = endless::submit_endless(&looping);
    assert!(matches!(
        endless.submission.wait(Duration::from_millis(50)),
        Err(Error::WaitTimeout { .. })
    ));

    assert_eq!(
        frame(&drawing_renderer),
        alone,
        "the same frame as on a GPU of its own"
    );
    assert!(
        matches!(
            endless.submission.wait(Duration::ZERO),
            Err(Error::WaitTimeout { .. })
        ),
        "the endless kernel still runs"
    );
    assert_eq!(system.device().scheduler().stats().timed_out, 0);

    // The watchdog bounds the endless kernel's running time all the same.
    let started = Instant::now();
    let ended = endless.submission.wait(Duration::from_secs(60));
    assert!(
        matches!(ended, Err(Error::GpuFault { errno }) if errno == agx_umd::Errno::ETIMEDOUT),
        "{ended:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(u64::from(COMMAND_TIMEOUT_MS)));
    assert_eq!(system.device().scheduler().stats().timed_out, 1);
}
