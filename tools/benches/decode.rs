//! Decode throughput: megabytes of capture decoded per second. The
//! capture is the renderer's built-in torus at 64x48, one frame (a
//! compute fill and a render pass, with all mapped memory). Results are
//! recorded in Documentation/performance.md.

use agx_tools::mesh::Mesh;
use agx_tools::render::Renderer;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn decode(c: &mut Criterion) {
    let device = agx_umd::Device::open_simulated(agx_sim::SystemConfig::default()).unwrap();
    let renderer = Renderer::new(&device, &Mesh::torus(300, 100), 64, 48).unwrap();
    let path = std::env::temp_dir().join("agx-decode-bench.cap");
    let system = device.simulated().unwrap().system();
    system.capture_to(&path).unwrap();
    renderer.frame(0).unwrap();
    system.stop_capture();
    let bytes = std::fs::read(&path).unwrap();
    let capture = agx_capture::parse(&bytes).unwrap();
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function(
        format!("parse + decode a {} KiB capture", bytes.len() >> 10),
        |b| {
            b.iter(|| {
                let capture = agx_capture::parse(&bytes).unwrap();
                agx_tools::decode::decode_capture(&capture, None)
            })
        },
    );
    group.bench_function("decode only", |b| {
        b.iter(|| agx_tools::decode::decode_capture(&capture, None))
    });
    group.finish();
    let _ = std::fs::remove_file(&path);
}

criterion_group!(benches, decode);
criterion_main!(benches);
