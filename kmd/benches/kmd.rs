//! kmd benchmarks: object creation, VM_BIND of one page and of 1 GiB, and
//! syncobj signal-to-wakeup latency, all through the ioctl entry point.
//! Results are recorded in Documentation/performance.md.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use agx_kmd::{File, System, SystemConfig};
use agx_uapi::asahi::{self, BindFlags, GemBindOp, GemCreate, VmBind, VmCreate};
use agx_uapi::drm::{self, GemClose, SyncobjArray, SyncobjCreate, SyncobjWait, SyncobjWaitFlags};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use zerocopy::{FromBytes, Immutable, IntoBytes};

const PAGE: u64 = 16384;

fn call<T: IntoBytes + FromBytes + Immutable>(file: &File, request: u32, arg: &mut T) {
    file.ioctl(u64::from(request), arg as *mut T as u64)
        .expect("ioctl");
}

fn gem_create(file: &File, size: u64) -> u32 {
    let mut c = GemCreate {
        size,
        ..GemCreate::default()
    };
    call(file, asahi::DRM_IOCTL_ASAHI_GEM_CREATE, &mut c);
    c.handle
}

fn bind(file: &File, vm_id: u32, op: GemBindOp) {
    let ops = [op];
    let mut b = VmBind {
        vm_id,
        num_binds: 1,
        stride: 32,
        pad: 0,
        userptr: ops.as_ptr() as u64,
    };
    call(file, asahi::DRM_IOCTL_ASAHI_VM_BIND, &mut b);
}

fn setup() -> (System, File, u32) {
    let system = System::new(SystemConfig {
        ram_bytes: 4 << 30,
        ..SystemConfig::default()
    })
    .expect("system");
    let file = system.open();
    let mut c = VmCreate {
        kernel_start: 0x7F_0000_0000,
        kernel_end: 0x7F_2000_0000,
        ..VmCreate::default()
    };
    call(&file, asahi::DRM_IOCTL_ASAHI_VM_CREATE, &mut c);
    let vm = c.vm_id;
    (system, file, vm)
}

fn gem(c: &mut Criterion) {
    let (_system, file, _) = setup();
    c.bench_function("gem_create_close_64KiB", |b| {
        b.iter(|| {
            let handle = gem_create(&file, 64 * 1024);
            call(
                &file,
                drm::DRM_IOCTL_GEM_CLOSE,
                &mut GemClose { handle, pad: 0 },
            );
        })
    });
}

fn vm_bind(c: &mut Criterion) {
    let (_system, file, vm) = setup();
    let rw = BindFlags::READ.bits() | BindFlags::WRITE.bits();
    let small = gem_create(&file, PAGE);
    let big = gem_create(&file, 1 << 30);
    let unbind = |range| GemBindOp {
        flags: BindFlags::UNBIND.bits(),
        handle: 0,
        offset: 0,
        range,
        addr: 0x1_0000_0000,
    };
    let mut group = c.benchmark_group("vm_bind");
    group.bench_function("bind_unbind_1_page", |b| {
        b.iter(|| {
            bind(
                &file,
                vm,
                GemBindOp {
                    flags: rw,
                    handle: small,
                    offset: 0,
                    range: PAGE,
                    addr: 0x1_0000_0000,
                },
            );
            bind(&file, vm, unbind(PAGE));
        })
    });
    group.sample_size(10);
    group.throughput(Throughput::Bytes(1 << 30));
    group.bench_function("bind_unbind_1_GiB", |b| {
        b.iter(|| {
            bind(
                &file,
                vm,
                GemBindOp {
                    flags: rw,
                    handle: big,
                    offset: 0,
                    range: 1 << 30,
                    addr: 0x1_0000_0000,
                },
            );
            bind(&file, vm, unbind(1 << 30));
        })
    });
    group.finish();
}

fn syncobj(c: &mut Criterion) {
    let (_system, file, _) = setup();
    let file = Arc::new(file);
    let create = |file: &File| {
        let mut s = SyncobjCreate {
            handle: 0,
            flags: 0,
        };
        call(file, drm::DRM_IOCTL_SYNCOBJ_CREATE, &mut s);
        s.handle
    };
    let (ping, pong) = (create(&file), create(&file));
    let array = |file: &File, request: u32, handle: u32| {
        let handles = [handle];
        let mut a = SyncobjArray {
            handles: handles.as_ptr() as u64,
            count_handles: 1,
            pad: 0,
        };
        call(file, request, &mut a);
    };
    let wait = |file: &File, handle: u32| {
        let handles = [handle];
        let mut w = SyncobjWait {
            handles: handles.as_ptr() as u64,
            timeout_nsec: i64::MAX,
            count_handles: 1,
            flags: SyncobjWaitFlags::WAIT_FOR_SUBMIT.bits(),
            ..SyncobjWait::default()
        };
        call(file, drm::DRM_IOCTL_SYNCOBJ_WAIT, &mut w);
    };
    let stop = Arc::new(AtomicBool::new(false));
    let echo = {
        let (file, stop) = (Arc::clone(&file), Arc::clone(&stop));
        thread::spawn(move || loop {
            wait(&file, ping);
            if stop.load(Ordering::Acquire) {
                break;
            }
            array(&file, drm::DRM_IOCTL_SYNCOBJ_RESET, ping);
            array(&file, drm::DRM_IOCTL_SYNCOBJ_SIGNAL, pong);
        })
    };
    c.bench_function("syncobj_signal_to_wakeup_round_trip", |b| {
        b.iter(|| {
            array(&file, drm::DRM_IOCTL_SYNCOBJ_SIGNAL, ping);
            wait(&file, pong);
            array(&file, drm::DRM_IOCTL_SYNCOBJ_RESET, pong);
            black_box(pong);
        })
    });
    stop.store(true, Ordering::Release);
    array(&file, drm::DRM_IOCTL_SYNCOBJ_SIGNAL, ping);
    echo.join().expect("echo thread");
}

criterion_group!(benches, gem, vm_bind, syncobj);
criterion_main!(benches);
