//! One GPU, two clients: how long a frame takes when another client's
//! compute kernel never ends, against the same frame on an idle GPU. The
//! firmware time-slices the GPU between queues (`TIME_SLICE` in
//! `agx_firmware_sim::firmware`), so the
//! frame waits at most a slice per turn of the endless kernel instead of
//! its whole watchdog. Frames are the renderer's torus at 160x120 (one
//! frame drawn and waited for); the endless kernel is 64 threadgroups of
//! lanes spinning forever. Results are recorded in
//! Documentation/performance.md.

use std::time::Duration;

use agx_sim::SystemConfig;
use agx_tools::mesh::Mesh;
use agx_tools::render::Renderer;
use agx_umd::Device;
use criterion::{criterion_group, criterion_main, Criterion};

#[path = "../tests/support/endless.rs"]
mod endless;

fn sharing(c: &mut Criterion) {
    let config = SystemConfig {
        work_budget_units: 1 << 62,
        // Long enough for the measurements; the kernel then times out.
        command_timeout_ms: 60_000,
        ..SystemConfig::default()
    };
    let mesh = Mesh::torus(60, 20);
    let mut group = c.benchmark_group("sharing");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(10));

    let alone = Device::open_simulated(config).unwrap();
    let renderer = Renderer::new(&alone, &mesh, 160, 120).unwrap();
    group.bench_function("frame 160x120, GPU idle", |b| {
        b.iter(|| renderer.frame(0).unwrap())
    });
    drop(renderer);
    drop(alone);

    let looping = Device::open_simulated(config).unwrap();
    let mut endless = endless::submit_endless(&looping);
    let system = looping.simulated().unwrap().system().clone();
    let drawing = Device::open_simulated_on(&system).unwrap();
    let renderer = Renderer::new(&drawing, &mesh, 160, 120).unwrap();
    group.bench_function("frame 160x120, another client's kernel never ends", |b| {
        b.iter(|| renderer.frame(0).unwrap())
    });
    group.finish();
    assert_eq!(
        system.device().scheduler().stats().timed_out,
        0,
        "the endless kernel ran throughout"
    );
    // The watchdog ends it.
    assert!(endless.submission.wait(Duration::from_secs(300)).is_err());
}

criterion_group!(benches, sharing);
criterion_main!(benches);
