//! What a call costs: a trivial ioctl (`GET_CAP`) on a DRM file of the
//! device process (`agx_simd::client`, as the shim makes it: a request on a
//! kept channel, the argument sent along and copied out with the result)
//! against the same ioctl on a file of a simulated system in this process
//! (the in-process mode's path). Results are recorded in
//! Documentation/performance.md.

use std::os::fd::AsFd;
use std::path::PathBuf;

use agx_sim::{NodeKind, System, SystemConfig};
use agx_uapi::drm::{GetCap, DRM_CAP_SYNCOBJ, DRM_IOCTL_GET_CAP};
use criterion::{criterion_group, criterion_main, Criterion};

fn device_program() -> Option<PathBuf> {
    Some(PathBuf::from(env!("CARGO_BIN_EXE_agx-simd")))
}

fn calls(c: &mut Criterion) {
    let mut group = c.benchmark_group("calls");
    let mut cap = GetCap {
        capability: DRM_CAP_SYNCOBJ,
        value: 0,
    };
    let arg = std::ptr::addr_of_mut!(cap) as u64;

    let system = System::new(SystemConfig::default()).unwrap();
    let file = system.open_node(NodeKind::Render);
    group.bench_function("GET_CAP, in-process", |b| {
        b.iter(|| file.ioctl(u64::from(DRM_IOCTL_GET_CAP), arg).unwrap())
    });
    drop(file);
    drop(system);

    // A private device directory, and a device process of its own that
    // exits a second after the bench closes its file.
    let dir = std::env::temp_dir().join(format!("agx-calls-bench-{}", std::process::id()));
    std::env::set_var("AGX_SIM_IDLE_EXIT_MS", "1000");
    let client = agx_simd::client::Client::new(dir.join("device"), device_program);
    agx_simd::protocol::ensure_private_dir(&dir).unwrap();
    let fd = client
        .open(NodeKind::Render, libc::O_RDWR | libc::O_CLOEXEC)
        .unwrap();
    group.bench_function("GET_CAP, device process", |b| {
        b.iter(|| {
            client
                .ioctl(fd.as_fd(), u64::from(DRM_IOCTL_GET_CAP), arg)
                .unwrap()
        })
    });
    group.finish();
    assert_eq!(cap.value, 1, "the ioctl answered");
    drop(fd);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, calls);
criterion_main!(benches);
