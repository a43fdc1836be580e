//! kmd benchmarks: object creation, VM_BIND of one page and of 1 GiB,
//! syncobj signal-to-wakeup latency, and SUBMIT: the latency from submit
//! to signalled fence of empty work, and submissions per second, all
//! through the ioctl entry point.
//! Results are recorded in Documentation/performance.md.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use agx_kmd::File;
use agx_sim::{System, SystemConfig};
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

/// An empty compute submission (its control stream terminates at once)
/// signalling `out`.
fn submit_empty(file: &File, queue: u32, cmdbuf: &[u8], out: Option<u32>) {
    let syncs: Vec<asahi::Sync> = out
        .map(|handle| asahi::Sync {
            sync_type: 0,
            handle,
            timeline_value: 0,
        })
        .into_iter()
        .collect();
    let mut s = asahi::Submit {
        syncs: syncs.as_ptr() as u64,
        cmdbuf: cmdbuf.as_ptr() as u64,
        queue_id: queue,
        out_sync_count: syncs.len() as u32,
        cmdbuf_size: cmdbuf.len() as u32,
        ..asahi::Submit::default()
    };
    call(file, asahi::DRM_IOCTL_ASAHI_SUBMIT, &mut s);
}

fn wait_one(file: &File, handle: u32) {
    let handles = [handle];
    let mut w = SyncobjWait {
        handles: handles.as_ptr() as u64,
        timeout_nsec: i64::MAX,
        count_handles: 1,
        ..SyncobjWait::default()
    };
    call(file, drm::DRM_IOCTL_SYNCOBJ_WAIT, &mut w);
}

fn submit(c: &mut Criterion) {
    use agx_hw::uat::PhysicalMemory;
    let (system, file, vm) = setup();
    let streams = gem_create(&file, PAGE);
    bind(
        &file,
        vm,
        GemBindOp {
            flags: (BindFlags::READ | BindFlags::WRITE).bits(),
            handle: streams,
            offset: 0,
            range: PAGE,
            addr: 0x1_0000_0000,
        },
    );
    let pa = file.object(streams).expect("object").memory().pa();
    let terminate = agx_hw::formats::CdmStreamTerminate::default()
        .pack()
        .expect("pack");
    system.device().ram().write(pa, &terminate).expect("write");
    let mut q = asahi::QueueCreate {
        vm_id: vm,
        ..asahi::QueueCreate::default()
    };
    call(&file, asahi::DRM_IOCTL_ASAHI_QUEUE_CREATE, &mut q);
    let cmd = asahi::CmdCompute {
        cdm_ctrl_stream_base: 0x1_0000_0000,
        cdm_ctrl_stream_end: 0x1_0000_0008,
        ..zerocopy::FromZeros::new_zeroed()
    };
    let mut cmdbuf = asahi::CmdHeader {
        cmd_type: asahi::CmdType::Compute as u16,
        size: size_of::<asahi::CmdCompute>() as u16,
        vdm_barrier: asahi::DRM_ASAHI_BARRIER_NONE,
        cdm_barrier: asahi::DRM_ASAHI_BARRIER_NONE,
    }
    .as_bytes()
    .to_vec();
    cmdbuf.extend_from_slice(cmd.as_bytes());
    let mut create = SyncobjCreate::default();
    call(&file, drm::DRM_IOCTL_SYNCOBJ_CREATE, &mut create);
    let out = create.handle;

    let mut group = c.benchmark_group("submit");
    group.bench_function("empty submit to signalled fence", |b| {
        b.iter(|| {
            submit_empty(&file, q.queue_id, &cmdbuf, Some(out));
            wait_one(&file, out);
        })
    });
    const BATCH: u64 = 100;
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function("100 pipelined empty submissions", |b| {
        b.iter(|| {
            for _ in 1..BATCH {
                submit_empty(&file, q.queue_id, &cmdbuf, None);
            }
            submit_empty(&file, q.queue_id, &cmdbuf, Some(out));
            wait_one(&file, out);
        })
    });
    group.finish();
}

criterion_group!(benches, gem, vm_bind, syncobj, submit);
criterion_main!(benches);
