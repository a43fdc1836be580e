//! SUBMIT end to end: the kmd's scheduler, the firmware interface and the
//! simulated GPU's data masters. Compute control streams are built with
//! the `hw` formats: a stream that terminates is empty work that
//! completes; one that starts at an unmapped address faults there; one
//! that links to itself never ends and meets the firmware's watchdog.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agx_hw::formats::{CdmBarrier, CdmStreamLink, CdmStreamTerminate};
use agx_hw::uat::PhysicalMemory;
use agx_kmd::{Errno, File};
use agx_sim::{System, SystemConfig};
use agx_uapi::asahi::{
    self, BindFlags, CmdCompute, CmdHeader, CmdRender, CmdType, GemBindObject, QueueCreate,
    QueueDestroy, Submit, Sync, Timestamp, Timestamps, DRM_ASAHI_BARRIER_NONE,
};
use agx_uapi::drm::{self, SyncobjCreate};
use common::*;
use zerocopy::{FromZeros, IntoBytes};

/// Where the tests' control-stream buffer is mapped.
const STREAMS_VA: u64 = 0x1_0000_0000;
/// Its size.
const STREAMS_BYTES: u64 = 1 << 20;
/// An address nothing is mapped at.
const UNMAPPED_VA: u64 = 0x5_0000_4000;
const NONE: u16 = DRM_ASAHI_BARRIER_NONE;

/// A file with a VM, a buffer of control streams mapped in it, and a
/// queue.
struct Gpu {
    system: System,
    file: File,
    vm: u32,
    streams: u32,
    queue: u32,
}

impl Gpu {
    fn new() -> Gpu {
        Gpu::with(SystemConfig {
            ram_bytes: 2 << 30,
            ..SystemConfig::default()
        })
    }

    fn with(config: SystemConfig) -> Gpu {
        Gpu::on(System::new(config).expect("system"))
    }

    /// Another client of `system`'s device: a file of its own, with its
    /// own VM, streams and queue.
    fn on(system: System) -> Gpu {
        let file = system.open();
        let vm = vm_create(&file);
        let streams = gem_create(&file, STREAMS_BYTES, 0, 0).unwrap();
        let rw = (BindFlags::READ | BindFlags::WRITE).bits();
        bind(
            &file,
            vm,
            &[map_op(streams, STREAMS_VA, STREAMS_BYTES, 0, rw)],
        )
        .unwrap();
        let mut gpu = Gpu {
            system,
            file,
            vm,
            streams,
            queue: 0,
        };
        gpu.queue = gpu.queue_create(0);
        // Stream 0: terminate at once (empty work).
        gpu.write(0, &CdmStreamTerminate::default().pack().unwrap());
        // Stream at 0x1000: links to itself forever.
        let link = CdmStreamLink {
            target: STREAMS_VA + 0x1000,
        };
        gpu.write(0x1000, &link.pack().unwrap());
        // Stream at 0x10000: 16384 barrier blocks, then terminate (slow
        // work, for ordering).
        let barrier = CdmBarrier::default().pack().unwrap();
        let blocks: Vec<u8> = barrier.repeat(16384);
        gpu.write(0x10000, &blocks);
        gpu.write(
            0x10000 + blocks.len() as u64,
            &CdmStreamTerminate::default().pack().unwrap(),
        );
        gpu
    }

    fn queue_create(&self, priority: u32) -> u32 {
        let mut c = QueueCreate {
            vm_id: self.vm,
            priority,
            usc_exec_base: 0x2_0000_0000,
            ..QueueCreate::default()
        };
        call(&self.file, asahi::DRM_IOCTL_ASAHI_QUEUE_CREATE, &mut c).unwrap();
        c.queue_id
    }

    fn write(&self, offset: u64, bytes: &[u8]) {
        let object = self.file.object(self.streams).unwrap();
        self.system
            .device()
            .ram()
            .write(object.memory().pa().offset(offset), bytes)
            .unwrap();
    }

    /// A queue's parameter-buffer control block, as the firmware sees it.
    fn tvb_info(&self, queue: &agx_kmd::queue::Queue) -> agx_fwif::messages::TvbInfo {
        use agx_fwif::ring::SharedMemory;
        let address = self
            .system
            .device()
            .scheduler()
            .tvb_info_address(queue.sched_id())
            .unwrap();
        let mut bytes = [0u8; size_of::<agx_fwif::messages::TvbInfo>()];
        let link = self.system.device().firmware();
        link.view.read(address, &mut bytes).unwrap();
        zerocopy::FromBytes::read_from_bytes(&bytes).unwrap()
    }

    fn syncobj(&self) -> u32 {
        let mut c = SyncobjCreate::default();
        call(&self.file, drm::DRM_IOCTL_SYNCOBJ_CREATE, &mut c).unwrap();
        c.handle
    }

    fn submit_raw(
        &self,
        queue: u32,
        waits: &[Sync],
        signals: &[Sync],
        cmdbuf: &[u8],
    ) -> Result<i32, Errno> {
        let syncs: Vec<Sync> = waits.iter().chain(signals).copied().collect();
        let mut s = Submit {
            syncs: syncs.as_ptr() as u64,
            cmdbuf: cmdbuf.as_ptr() as u64,
            flags: 0,
            queue_id: queue,
            in_sync_count: waits.len() as u32,
            out_sync_count: signals.len() as u32,
            cmdbuf_size: cmdbuf.len() as u32,
            pad: 0,
        };
        call(&self.file, asahi::DRM_IOCTL_ASAHI_SUBMIT, &mut s)
    }

    /// Submits and returns a binary syncobj that the submission signals.
    fn submit(&self, queue: u32, waits: &[Sync], cmdbuf: &[u8]) -> u32 {
        let out = self.syncobj();
        self.submit_raw(queue, waits, &[binary(out)], cmdbuf)
            .expect("SUBMIT");
        out
    }

    /// Waits for a syncobj's fence; returns its error.
    fn wait(&self, syncobj: u32) -> Option<Errno> {
        self.wait_point(syncobj, 0)
    }

    fn wait_point(&self, syncobj: u32, point: u64) -> Option<Errno> {
        let syncobj = self.file.syncobj(syncobj).expect("syncobj");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = syncobj.fence_for(point).and_then(|f| f.status()) {
                return status;
            }
            assert!(Instant::now() < deadline, "fence never signalled");
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

fn binary(handle: u32) -> Sync {
    Sync {
        sync_type: 0,
        handle,
        timeline_value: 0,
    }
}

fn timeline(handle: u32, point: u64) -> Sync {
    Sync {
        sync_type: 1,
        handle,
        timeline_value: point,
    }
}

fn command(cmd_type: CmdType, vdm: u16, cdm: u16, payload: &[u8]) -> Vec<u8> {
    let mut bytes = CmdHeader {
        cmd_type: cmd_type as u16,
        size: payload.len() as u16,
        vdm_barrier: vdm,
        cdm_barrier: cdm,
    }
    .as_bytes()
    .to_vec();
    bytes.extend_from_slice(payload);
    bytes
}

fn compute_at(stream: u64, vdm: u16, cdm: u16, ts: Timestamps) -> Vec<u8> {
    let cmd = CmdCompute {
        cdm_ctrl_stream_base: stream,
        cdm_ctrl_stream_end: stream + 8,
        ts,
        ..CmdCompute::new_zeroed()
    };
    command(CmdType::Compute, vdm, cdm, cmd.as_bytes())
}

fn empty_compute() -> Vec<u8> {
    compute_at(STREAMS_VA, NONE, NONE, Timestamps::default())
}

fn render(width_px: u16, height_px: u16, vdm: u16, cdm: u16, ts: [Timestamps; 2]) -> Vec<u8> {
    let cmd = CmdRender {
        width_px,
        height_px,
        layers: 1,
        samples: 1,
        utile_width_px: 32,
        utile_height_px: 32,
        ts_vtx: ts[0],
        ts_frag: ts[1],
        ..CmdRender::new_zeroed()
    };
    command(CmdType::Render, vdm, cdm, cmd.as_bytes())
}

#[test_log::test]
fn empty_work_completes_and_signals_its_syncobj() {
    let gpu = Gpu::new();
    let out = gpu.submit(gpu.queue, &[], &empty_compute());
    assert_eq!(gpu.wait(out), None);
    let stats = gpu.system.device().scheduler().stats();
    assert_eq!((stats.submitted, stats.completed), (1, 1));
    // Ten commands in one submission, each a compute.
    let ten = empty_compute().repeat(10);
    let out = gpu.submit(gpu.queue, &[], &ten);
    assert_eq!(gpu.wait(out), None);
    let stats = gpu.system.device().scheduler().stats();
    assert!(stats.commands >= 11, "{stats:?}");
    // The firmware's statistics ring saw every dispatch run.
    let deadline = Instant::now() + Duration::from_secs(5);
    while gpu.system.device().scheduler().stats().gpu_runs[2] < 11 {
        assert!(Instant::now() < deadline, "statistics for 11 runs");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(gpu.system.device().scheduler().stats().gpu_runs, [0, 0, 11]);
    // Nothing stays held once idle.
    let deadline = Instant::now() + Duration::from_secs(5);
    while gpu.system.device().scheduler().stats().event_slots_in_use != 0 {
        assert!(Instant::now() < deadline, "event slots stay held");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(gpu.system.device().scheduler().stats().vm_slots_in_use, 0);
}

#[test_log::test]
fn a_stream_at_an_unmapped_address_faults_there_with_eio() {
    let gpu = Gpu::new();
    let out = gpu.submit(
        gpu.queue,
        &[],
        &compute_at(UNMAPPED_VA, NONE, NONE, Timestamps::default()),
    );
    assert_eq!(gpu.wait(out), Some(Errno::EIO));
    let stats = gpu.system.device().scheduler().stats();
    let (address, unit, reason) = stats.last_fault.expect("a fault was reported");
    assert_eq!(address, UNMAPPED_VA);
    assert_eq!(unit, agx_fwif::messages::FaultUnit::Cdm as u32);
    assert_eq!(reason, agx_hw::formats::UatFaultReason::Unmapped.to_raw());
    // The queue keeps working.
    let out = gpu.submit(gpu.queue, &[], &empty_compute());
    assert_eq!(gpu.wait(out), None);
}

/// The watchdog counts GPU work, not host time: a submission of four
/// never-ending commands is stopped once it has done its budget's work,
/// its other three commands are cancelled (they never start: their
/// timestamps stay unwritten), and another client's queue runs meanwhile.
#[test_log::test]
fn a_submission_is_stopped_by_its_work_budget_and_its_other_commands_cancelled() {
    let gpu = Gpu::with(SystemConfig {
        ram_bytes: 1 << 30,
        work_budget_units: 1 << 16,
        command_timeout_ms: 600_000,
        ..SystemConfig::default()
    });
    let (ts_object, binding) = timestamp_buffer(&gpu);
    let mut endless = Vec::new();
    for i in 0..4 {
        endless.extend(compute_at(
            STREAMS_VA + 0x1000,
            NONE,
            NONE,
            ts(binding, 2 * i),
        ));
    }
    let other = gpu.queue_create(1);
    let started = Instant::now();
    let out = gpu.submit(gpu.queue, &[], &endless);
    let meanwhile = gpu.submit(other, &[], &empty_compute());
    assert_eq!(gpu.wait(meanwhile), None, "the other queue's work runs");
    assert_eq!(gpu.wait(out), Some(Errno::ETIMEDOUT));
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "stopped by work, long before the host-time limit"
    );
    let t = read_timestamps(&gpu, ts_object, 8);
    assert!(t[0] != 0 && t[1] >= t[0], "the first command ran: {t:?}");
    assert_eq!(t[2..], [0; 6], "the other three were cancelled");
    let stats = gpu.system.device().scheduler().stats();
    assert_eq!((stats.timed_out, stats.completed), (1, 1));
    let out = gpu.submit(gpu.queue, &[], &empty_compute());
    assert_eq!(gpu.wait(out), None, "the queue survives the timeout");
}

/// The firmware time-slices the GPU between queues: while one client's
/// command runs on and on (a stream that links to itself, under a budget
/// and a host-time limit too large to matter), another client's short
/// submissions, compute and render (whose zeroed state faults once it
/// runs), each complete, and the long command
/// is still running after them. (Without the slicing each waited for the
/// long command's watchdog.)
#[test_log::test]
fn another_clients_work_completes_while_a_never_ending_command_runs() {
    let looping = Gpu::with(SystemConfig {
        ram_bytes: 1 << 30,
        work_budget_units: 1 << 62,
        command_timeout_ms: 600_000,
        ..SystemConfig::default()
    });
    let drawing = Gpu::on(looping.system.clone());
    let never = looping.submit(
        looping.queue,
        &[],
        &compute_at(STREAMS_VA + 0x1000, NONE, NONE, Timestamps::default()),
    );
    let never = looping.file.syncobj(never).unwrap().fence_for(0).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    for _ in 0..5 {
        let compute = drawing.submit(drawing.queue, &[], &empty_compute());
        assert_eq!(drawing.wait(compute), None);
        let render = drawing.submit(
            drawing.queue,
            &[],
            &render(64, 64, NONE, NONE, [Timestamps::default(); 2]),
        );
        assert_eq!(drawing.wait(render), Some(Errno::EIO));
    }
    assert_eq!(never.status(), None, "the long command still runs");
    let stats = looping.system.device().scheduler().stats();
    assert_eq!((stats.completed, stats.timed_out), (5, 0));
    let started = Instant::now();
    drop((drawing, looping));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "shutdown took {:?}",
        started.elapsed()
    );
}

/// Host time remains a last resort: with a budget too large to matter,
/// the host-time limit stops a command that never ends.
#[test_log::test]
fn work_that_never_ends_is_stopped_by_the_host_time_limit_as_a_last_resort() {
    let gpu = Gpu::with(SystemConfig {
        ram_bytes: 1 << 30,
        command_timeout_ms: 300,
        ..SystemConfig::default()
    });
    let started = Instant::now();
    let out = gpu.submit(
        gpu.queue,
        &[],
        &compute_at(STREAMS_VA + 0x1000, NONE, NONE, Timestamps::default()),
    );
    assert_eq!(gpu.wait(out), Some(Errno::ETIMEDOUT));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
    let out = gpu.submit(gpu.queue, &[], &empty_compute());
    assert_eq!(gpu.wait(out), None, "the queue survives the timeout");
    assert_eq!(gpu.system.device().scheduler().stats().timed_out, 1);
}

/// A timestamp buffer bound with GEM_BIND_OBJECT: (object handle, binding).
fn timestamp_buffer(gpu: &Gpu) -> (u32, u32) {
    let handle = gem_create(&gpu.file, PAGE, 0, 0).unwrap();
    let mut b = GemBindObject {
        op: 0,
        flags: asahi::BindObjectFlags::USAGE_TIMESTAMPS.bits(),
        handle,
        vm_id: 0,
        offset: 0,
        range: PAGE,
        ..GemBindObject::default()
    };
    call(&gpu.file, asahi::DRM_IOCTL_ASAHI_GEM_BIND_OBJECT, &mut b).unwrap();
    (handle, b.object_handle)
}

fn ts(binding: u32, start_slot: u32) -> Timestamps {
    Timestamps {
        start: Timestamp {
            handle: binding,
            offset: start_slot * 8,
        },
        end: Timestamp {
            handle: binding,
            offset: start_slot * 8 + 8,
        },
    }
}

fn read_timestamps(gpu: &Gpu, handle: u32, count: usize) -> Vec<u64> {
    let object = gpu.file.object(handle).unwrap();
    let mut bytes = vec![0u8; count * 8];
    gpu.system
        .device()
        .ram()
        .read(object.memory().pa(), &mut bytes)
        .unwrap();
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test_log::test]
fn barriers_order_stages_and_timestamps_land_in_bound_buffers() {
    let gpu = Gpu::new();
    let (ts_object, binding) = timestamp_buffer(&gpu);
    let before = {
        let mut t = asahi::GetTime::default();
        call(&gpu.file, asahi::DRM_IOCTL_ASAHI_GET_TIME, &mut t).unwrap();
        t.gpu_timestamp
    };
    // A slow compute, then a render that waits for it (cdm barrier 1),
    // then a compute that waits for the render (vdm barrier 1).
    let mut cmdbuf = compute_at(STREAMS_VA + 0x10000, NONE, NONE, ts(binding, 0));
    cmdbuf.extend(render(64, 64, NONE, 1, [ts(binding, 2), ts(binding, 4)]));
    cmdbuf.extend(compute_at(STREAMS_VA, 1, NONE, ts(binding, 6)));
    let out = gpu.submit(gpu.queue, &[], &cmdbuf);
    // The render's halves are not executable yet: the submission faults,
    // but every command still ran in order.
    assert_eq!(gpu.wait(out), Some(Errno::EIO));
    let t = read_timestamps(&gpu, ts_object, 8);
    assert!(
        t.iter().all(|&x| x >= before),
        "GPU clock is GET_TIME's: {t:?}"
    );
    assert!(t[0] <= t[1], "compute start <= end");
    assert!(
        t[1] <= t[2],
        "the render's vertex half waits for the compute"
    );
    assert!(t[3] <= t[4], "the fragment half waits for the vertex half");
    assert!(t[5] <= t[6], "the last compute waits for the render");
    assert!(t[6] <= t[7]);
}

#[test_log::test]
fn in_syncs_on_other_queues_hold_work_without_blocking_the_ioctl() {
    let gpu = Gpu::with(SystemConfig {
        ram_bytes: 1 << 30,
        command_timeout_ms: 300,
        ..SystemConfig::default()
    });
    let other = gpu.queue_create(1);
    let (ts_object, binding) = timestamp_buffer(&gpu);
    // Queue A: work that runs until the watchdog stops it, signalling
    // timeline point 1 of `chain`.
    let chain = gpu.syncobj();
    gpu.submit_raw(
        gpu.queue,
        &[],
        &[timeline(chain, 1)],
        &compute_at(STREAMS_VA + 0x1000, NONE, NONE, ts(binding, 0)),
    )
    .unwrap();
    // Queue B waits for point 1; the ioctl returns at once.
    let started = Instant::now();
    let out = gpu.submit(
        other,
        &[timeline(chain, 1)],
        &compute_at(STREAMS_VA, NONE, NONE, ts(binding, 2)),
    );
    assert!(started.elapsed() < Duration::from_millis(200));
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        gpu.file
            .syncobj(out)
            .unwrap()
            .fence_for(0)
            .unwrap()
            .status()
            .is_none(),
        "held by the wait"
    );
    assert_eq!(gpu.wait_point(chain, 1), Some(Errno::ETIMEDOUT));
    // As on Linux, a failed dependency still releases the waiter.
    assert_eq!(gpu.wait(out), None);
    let t = read_timestamps(&gpu, ts_object, 4);
    assert!(t[1] <= t[2], "B ran after A finished: {t:?}");
}

#[test_log::test]
fn timeline_points_signal_in_order() {
    let gpu = Gpu::new();
    let chain = gpu.syncobj();
    for point in 1..=5u64 {
        let work = if point == 3 {
            compute_at(UNMAPPED_VA, NONE, NONE, Timestamps::default())
        } else {
            empty_compute()
        };
        gpu.submit_raw(gpu.queue, &[], &[timeline(chain, point)], &work)
            .unwrap();
    }
    assert_eq!(gpu.wait_point(chain, 2), None);
    assert_eq!(
        gpu.wait_point(chain, 5),
        Some(Errno::EIO),
        "a point carries the first error of the points before it"
    );
    let syncobj = gpu.file.syncobj(chain).unwrap();
    assert_eq!(syncobj.last_signalled_point(), 5);
}

#[test_log::test]
fn sixty_four_commands_are_accepted_and_sixty_five_are_not() {
    let gpu = Gpu::new();
    let out = gpu.submit(gpu.queue, &[], &empty_compute().repeat(64));
    assert_eq!(gpu.wait(out), None);
    assert_eq!(
        gpu.submit_raw(gpu.queue, &[], &[], &empty_compute().repeat(65)),
        Err(Errno::EINVAL)
    );
    // 64 renders fit the vertex stage's command slots too.
    let renders = render(32, 32, NONE, NONE, Default::default()).repeat(64);
    let out = gpu.submit(gpu.queue, &[], &renders);
    assert_eq!(gpu.wait(out), Some(Errno::EIO), "render halves unsupported");
}

#[test_log::test]
fn every_submit_rule_has_its_errno() {
    let gpu = Gpu::new();
    let ok = empty_compute();
    let submit = |f: &dyn Fn(&mut Submit)| {
        let syncs: [Sync; 0] = [];
        let mut s = Submit {
            syncs: syncs.as_ptr() as u64,
            cmdbuf: ok.as_ptr() as u64,
            flags: 0,
            queue_id: gpu.queue,
            in_sync_count: 0,
            out_sync_count: 0,
            cmdbuf_size: ok.len() as u32,
            pad: 0,
        };
        f(&mut s);
        call(&gpu.file, asahi::DRM_IOCTL_ASAHI_SUBMIT, &mut s)
    };
    assert_eq!(submit(&|_| {}), Ok(0));
    assert_eq!(submit(&|s| s.flags = 1), Err(Errno::EINVAL));
    assert_eq!(submit(&|s| s.pad = 1), Err(Errno::EINVAL));
    assert_eq!(submit(&|s| s.queue_id = 99), Err(Errno::ENOENT));
    assert_eq!(
        submit(&|s| {
            s.syncs = 8;
            s.in_sync_count = 1;
        }),
        Err(Errno::EFAULT)
    );
    assert_eq!(submit(&|s| s.cmdbuf = 8), Err(Errno::EFAULT));
    assert_eq!(submit(&|s| s.cmdbuf_size = 4), Err(Errno::EINVAL));
    assert_eq!(submit(&|s| s.cmdbuf_size = 1 << 20), Err(Errno::EINVAL));
    assert_eq!(submit(&|s| s.out_sync_count = 100_000), Err(Errno::EINVAL));
    let none = gpu.syncobj();
    let cases: Vec<(Vec<Sync>, u32, Errno, &str)> = vec![
        (vec![binary(4242)], 1, Errno::ENOENT, "no such syncobj"),
        (vec![binary(none)], 1, Errno::EINVAL, "wait on nothing"),
        (
            vec![timeline(none, 7)],
            1,
            Errno::EINVAL,
            "unsubmitted point",
        ),
        (
            vec![Sync {
                sync_type: 2,
                ..binary(none)
            }],
            0,
            Errno::EINVAL,
            "unknown sync type",
        ),
        (
            vec![Sync {
                timeline_value: 1,
                ..binary(none)
            }],
            0,
            Errno::EINVAL,
            "binary with a point",
        ),
        (
            vec![binary(4242)],
            0,
            Errno::ENOENT,
            "signal a missing syncobj",
        ),
    ];
    for (syncs, waits, errno, what) in cases {
        let (w, s) = syncs.split_at(waits as usize);
        assert_eq!(gpu.submit_raw(gpu.queue, w, s, &ok), Err(errno), "{what}");
    }
    // Payload rules (parse_commands), by errno.
    let mut long = CmdCompute::new_zeroed().as_bytes().to_vec();
    long.extend([0, 0, 0, 1]);
    assert_eq!(
        gpu.submit_raw(
            gpu.queue,
            &[],
            &[],
            &command(CmdType::Compute, NONE, NONE, &long)
        ),
        Err(Errno::E2BIG)
    );
    assert_eq!(
        gpu.submit_raw(
            gpu.queue,
            &[],
            &[],
            &compute_at(STREAMS_VA, NONE, 1, Timestamps::default())
        ),
        Err(Errno::EINVAL),
        "barrier on a compute not yet seen"
    );
    // Timestamps: unknown binding, offset past the buffer.
    let (_, binding) = timestamp_buffer(&gpu);
    let bad_handle = Timestamps {
        start: Timestamp {
            handle: 77,
            offset: 0,
        },
        ..Timestamps::default()
    };
    assert_eq!(
        gpu.submit_raw(
            gpu.queue,
            &[],
            &[],
            &compute_at(STREAMS_VA, NONE, NONE, bad_handle)
        ),
        Err(Errno::ENOENT)
    );
    let past_end = Timestamps {
        end: Timestamp {
            handle: binding,
            offset: PAGE as u32,
        },
        ..Timestamps::default()
    };
    assert_eq!(
        gpu.submit_raw(
            gpu.queue,
            &[],
            &[],
            &compute_at(STREAMS_VA, NONE, NONE, past_end)
        ),
        Err(Errno::EINVAL)
    );
    // A refused submission signals nothing.
    let out = gpu.syncobj();
    assert_eq!(
        gpu.submit_raw(gpu.queue, &[], &[binary(out)], &empty_compute().repeat(65)),
        Err(Errno::EINVAL)
    );
    assert!(gpu.file.syncobj(out).unwrap().fence_for(0).is_none());
}

#[test_log::test]
fn destroying_a_queue_cancels_what_has_not_run() {
    let gpu = Gpu::with(SystemConfig {
        ram_bytes: 1 << 30,
        command_timeout_ms: 300,
        ..SystemConfig::default()
    });
    let queue = gpu.queue_create(0);
    let before = gpu.system.device().scheduler().stats().queues;
    // Work on the main queue that runs until the watchdog stops it, and
    // a submission on `queue` waiting for it.
    let slow = gpu.submit(
        gpu.queue,
        &[],
        &compute_at(STREAMS_VA + 0x1000, NONE, NONE, Timestamps::default()),
    );
    let victim = gpu.submit(queue, &[binary(slow)], &empty_compute());
    let mut d = QueueDestroy {
        queue_id: queue,
        pad: 0,
    };
    call(&gpu.file, asahi::DRM_IOCTL_ASAHI_QUEUE_DESTROY, &mut d).unwrap();
    assert_eq!(gpu.wait(victim), Some(Errno::ECANCELED));
    assert_eq!(
        gpu.submit_raw(queue, &[], &[], &empty_compute()),
        Err(Errno::ENOENT),
        "the queue is gone"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while gpu.system.device().scheduler().stats().queues != before - 1 {
        assert!(Instant::now() < deadline, "the idle queue is freed");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(gpu.wait(slow), Some(Errno::ETIMEDOUT));
}

#[test_log::test]
fn work_keeps_closed_and_unbound_buffers_alive_until_it_completes() {
    let gpu = Gpu::with(SystemConfig {
        ram_bytes: 1 << 30,
        command_timeout_ms: 200,
        ..SystemConfig::default()
    });
    let base = gpu.system.stats().gem_objects;
    let extra = gem_create(&gpu.file, 4 * PAGE, 0, 0).unwrap();
    let rw = (BindFlags::READ | BindFlags::WRITE).bits();
    bind(
        &gpu.file,
        gpu.vm,
        &[map_op(extra, 0x3_0000_0000, 4 * PAGE, 0, rw)],
    )
    .unwrap();
    // Work that runs until the watchdog stops it.
    let out = gpu.submit(
        gpu.queue,
        &[],
        &compute_at(STREAMS_VA + 0x1000, NONE, NONE, Timestamps::default()),
    );
    bind(&gpu.file, gpu.vm, &[unmap_op(0x3_0000_0000, 4 * PAGE)]).unwrap();
    let mut close = drm::GemClose {
        handle: extra,
        pad: 0,
    };
    call(&gpu.file, drm::DRM_IOCTL_GEM_CLOSE, &mut close).unwrap();
    assert_eq!(
        gpu.system.stats().gem_objects,
        base + 1,
        "still referenced by the running work"
    );
    assert_eq!(gpu.wait(out), Some(Errno::ETIMEDOUT));
    let deadline = Instant::now() + Duration::from_secs(5);
    while gpu.system.stats().gem_objects != base {
        assert!(Instant::now() < deadline, "released after completion");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test_log::test]
fn a_fault_fails_only_its_submission_for_a_thousand_faults() {
    let gpu = Arc::new(Gpu::new());
    let innocent_queue = gpu.queue_create(1);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let innocent = {
        let (gpu, stop) = (Arc::clone(&gpu), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut done = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || done < 10 {
                let out = gpu.submit(innocent_queue, &[], &empty_compute());
                assert_eq!(gpu.wait(out), None, "innocent work completes");
                done += 1;
            }
            done
        })
    };
    let bad = compute_at(UNMAPPED_VA, NONE, NONE, Timestamps::default());
    let mut outs = Vec::new();
    for n in 0..1000 {
        outs.push(gpu.submit(gpu.queue, &[], &bad));
        if n % 100 == 99 {
            // Good work on the faulting queue in between still completes.
            let good = gpu.submit(gpu.queue, &[], &empty_compute());
            assert_eq!(gpu.wait(good), None);
        }
    }
    for out in outs {
        assert_eq!(gpu.wait(out), Some(Errno::EIO));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let innocent_done = innocent.join().unwrap();
    assert!(innocent_done >= 10);
    let stats = gpu.system.device().scheduler().stats();
    assert_eq!(stats.faulted, 1000);
    assert_eq!(stats.completed, 10 + u64::from(innocent_done));
}

#[test_log::test]
fn many_queues_and_threads_submit_concurrently_and_every_fence_signals() {
    let gpu = Arc::new(Gpu::new());
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let gpu = Arc::clone(&gpu);
            std::thread::spawn(move || {
                let queues: Vec<u32> = (0..8).map(|q| gpu.queue_create(q % 2)).collect();
                let chain = gpu.syncobj();
                let mut point = 0u64;
                for round in 0..40u64 {
                    for &queue in &queues {
                        // Each submission waits for the previous one (on
                        // another queue) and signals the next point.
                        let waits = if point > 0 {
                            vec![timeline(chain, point)]
                        } else {
                            vec![]
                        };
                        point += 1;
                        let work = if (round + u64::from(queue) + t) % 13 == 0 {
                            compute_at(UNMAPPED_VA, NONE, NONE, Timestamps::default())
                        } else {
                            empty_compute().repeat(1 + (round % 3) as usize)
                        };
                        gpu.submit_raw(queue, &waits, &[timeline(chain, point)], &work)
                            .unwrap();
                    }
                }
                gpu.wait_point(chain, point);
                point
            })
        })
        .collect();
    let mut total = 0;
    for t in threads {
        total += t.join().unwrap();
    }
    assert_eq!(total, 6 * 8 * 40);
    let stats = gpu.system.device().scheduler().stats();
    assert_eq!(stats.submitted, total);
    assert_eq!(stats.completed + stats.faulted, total);
    assert!(stats.faulted > 0);
}

#[test_log::test]
fn a_firmware_crash_fails_everything_with_enodev_and_the_process_lives() {
    let gpu = Gpu::new();
    // Corrupt the state of the submission ring the next compute goes
    // through, as a buggy kernel would: the firmware finds an index out
    // of range when it next reads the ring and stops. (Corrupting it
    // after the submission would race with the firmware taking the
    // command first and running it to the watchdog.)
    let link = gpu.system.device().firmware();
    let ring = link.init_data.pipes[2 * 4 + 3];
    use agx_fwif::ring::SharedMemory;
    link.view
        .write(ring.state.offset(64), &9999u32.to_le_bytes())
        .unwrap();
    link.ring_doorbell();
    // The firmware may notice at its next tick, before the submission:
    // then SUBMIT itself answers ENODEV.
    let slow = gpu.syncobj();
    match gpu.submit_raw(
        gpu.queue,
        &[],
        &[binary(slow)],
        &compute_at(STREAMS_VA + 0x1000, NONE, NONE, Timestamps::default()),
    ) {
        Ok(_) => assert_eq!(gpu.wait(slow), Some(Errno::ENODEV)),
        Err(errno) => assert_eq!(errno, Errno::ENODEV),
    }
    assert_eq!(
        gpu.submit_raw(gpu.queue, &[], &[], &empty_compute()),
        Err(Errno::ENODEV)
    );
    let mut c = QueueCreate {
        vm_id: gpu.vm,
        ..QueueCreate::default()
    };
    assert_eq!(
        call(&gpu.file, asahi::DRM_IOCTL_ASAHI_QUEUE_CREATE, &mut c),
        Err(Errno::ENODEV)
    );
    // Core ioctls still answer.
    let _ = gpu.syncobj();
}

#[test_log::test]
fn each_queue_has_a_parameter_buffer_in_its_vm_kernel_range_that_grows() {
    let gpu = Gpu::new();
    let queue = gpu.file.queue(gpu.queue).unwrap();
    let stats = queue.tvb_stats();
    assert_eq!(stats.blocks, 8);
    assert_eq!(stats.allocated_bytes(), 1 << 20);
    // The blocks are mapped, GPU read-write, in the shared half of the
    // kernel range.
    let root = gpu.file.vm_root_pa(gpu.vm).unwrap();
    let ram = gpu.system.device().ram();
    let translation =
        agx_hw::uat::translate(ram, root, KERNEL_START, agx_hw::uat::Access::GpuWrite)
            .expect("TVB mapped at the start of the kernel range");
    assert!(translation.permissions.gpu_read);
    // A 16384x16384 render needs 2048 blocks: the heap grows before it.
    let out = gpu.submit(
        gpu.queue,
        &[],
        &render(16384, 16384, NONE, NONE, Default::default()),
    );
    let _ = gpu.wait(out);
    let stats = queue.tvb_stats();
    assert_eq!(stats.blocks, 2048);
    assert_eq!(stats.grows, 1);
    assert!(agx_hw::uat::translate(
        ram,
        root,
        KERNEL_START + 2047 * 128 * 1024,
        agx_hw::uat::Access::GpuRead
    )
    .is_ok());
    // The firmware's block and page lists name those pages.
    {
        use agx_fwif::ring::SharedMemory;
        let link = gpu.system.device().firmware();
        let info = gpu.tvb_info(&queue);
        assert_eq!(info.block_count, 2048);
        let read_u32 = |at: u64| {
            let mut word = [0u8; 4];
            link.view.read(agx_hw::addr::FwVa(at), &mut word).unwrap();
            u32::from_le_bytes(word)
        };
        let first_page = (KERNEL_START >> 15) as u32;
        for block in [0u64, 7, 8, 2047] {
            assert_eq!(
                read_u32(info.block_list.get() + 4 * block),
                first_page + 4 * block as u32
            );
            for page in 0..4 {
                assert_eq!(
                    read_u32(info.page_list.get() + 4 * (4 * block + page)),
                    first_page + (4 * block + page) as u32
                );
            }
        }
    }
    // Destroying the queue unmaps it.
    drop(queue);
    let mut d = QueueDestroy {
        queue_id: gpu.queue,
        pad: 0,
    };
    call(&gpu.file, asahi::DRM_IOCTL_ASAHI_QUEUE_DESTROY, &mut d).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while agx_hw::uat::translate(ram, root, KERNEL_START, agx_hw::uat::Access::GpuRead).is_ok() {
        assert!(Instant::now() < deadline, "TVB unmapped after destroy");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test_log::test]
fn work_queue_rings_and_command_slots_wrap_around() {
    let gpu = Gpu::new();
    // 40 x 64 = 2560 commands: twice around the 0x500-entry work ring and
    // ten times around the 256 command slots, with submissions in flight
    // while earlier ones retire.
    let mut outs = Vec::new();
    for _ in 0..40 {
        outs.push(gpu.submit(gpu.queue, &[], &empty_compute().repeat(64)));
    }
    for out in outs {
        assert_eq!(gpu.wait(out), None);
    }
    let stats = gpu.system.device().scheduler().stats();
    assert_eq!(stats.completed, 40);
    assert!(stats.commands >= 2560);
}

#[test_log::test]
fn a_grow_request_grows_the_buffer_under_the_sync_policy_only() {
    use agx_fwif::messages::{EventKind, EventMsg};
    for (policy, blocks) in [
        (agx_kmd::tvb::GrowthPolicy::Sync, 8 + 10),
        (agx_kmd::tvb::GrowthPolicy::Asahi, 8),
    ] {
        let gpu = Gpu::with(SystemConfig {
            ram_bytes: 1 << 30,
            tvb_policy: policy,
            ..SystemConfig::default()
        });
        let queue = gpu.file.queue(gpu.queue).unwrap();
        // The event the firmware raises when the tiler runs out of pages
        // (its tiler arrives with the GPU execution work; here the test
        // posts it on the firmware's behalf, and the firmware, which is
        // not waiting, drops the late ack).
        let link = gpu.system.device().firmware();
        let event = EventMsg {
            kind: EventKind::GrowTvb as u32,
            unit: queue.sched_id() as u32,
            address: 3,
            ..EventMsg::default()
        };
        link.init_data
            .events
            .push(&link.view, event.as_bytes())
            .unwrap();
        gpu.system.device().sync_events().notify();
        let deadline = Instant::now() + Duration::from_secs(5);
        while policy == agx_kmd::tvb::GrowthPolicy::Sync && queue.tvb_stats().blocks != blocks {
            assert!(Instant::now() < deadline, "{policy}: no growth");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        let stats = queue.tvb_stats();
        assert_eq!(stats.blocks, blocks, "{policy}");
        // The firmware-visible control block agrees.
        let info = gpu.tvb_info(&queue);
        assert_eq!(info.block_count as u64, blocks);
        assert_eq!(info.buffer_id as u64, queue.sched_id());
        assert!(!info.block_list.is_null());
    }
}

#[test_log::test]
fn queues_that_ran_work_can_be_destroyed_again_and_again() {
    let gpu = Gpu::new();
    let link = gpu.system.device().firmware();
    let scheduler = gpu.system.device().scheduler();
    let baseline = link.vm.mapped_bytes();
    for round in 0..30 {
        let queue = gpu.queue_create(round % 2);
        let out = gpu.submit(queue, &[], &empty_compute().repeat(3));
        assert_eq!(gpu.wait(out), None);
        let mut d = QueueDestroy {
            queue_id: queue,
            pad: 0,
        };
        call(&gpu.file, asahi::DRM_IOCTL_ASAHI_QUEUE_DESTROY, &mut d).unwrap();
        // The main queue keeps working while destroyed ones are reaped.
        let out = gpu.submit(gpu.queue, &[], &empty_compute());
        assert_eq!(gpu.wait(out), None, "round {round}");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while link.vm.mapped_bytes() != baseline || scheduler.stats().queues != 1 {
        assert!(
            Instant::now() < deadline,
            "firmware memory of destroyed queues is freed: {} != {baseline}",
            link.vm.mapped_bytes()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(link.status().unwrap().crashed, 0);
}

#[test_log::test]
fn closing_the_device_with_work_on_the_gpu_does_not_wait_for_it() {
    let gpu = Gpu::new(); // 5 s watchdog
    let never = gpu.submit(
        gpu.queue,
        &[],
        &compute_at(STREAMS_VA + 0x1000, NONE, NONE, Timestamps::default()),
    );
    let fence = gpu.file.syncobj(never).unwrap().fence_for(0).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let started = Instant::now();
    drop(gpu);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "shutdown took {:?}",
        started.elapsed()
    );
    assert!(fence.status().is_some(), "the fence was signalled");
}

/// A file's fdinfo counts the GPU time of its own work per engine (by the
/// firmware's statistics, before its fence signals), and the memory its
/// handles name; another file's stays at zero.
#[test_log::test]
fn each_files_gpu_time_and_memory_are_in_its_fdinfo() {
    let gpu = Gpu::new();
    let other = gpu.system.open();
    let out = gpu.submit(gpu.queue, &[], &empty_compute().repeat(10));
    assert_eq!(gpu.wait(out), None);
    let value = |text: &str, key: &str| -> String {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{key}:\t")))
            .unwrap_or_else(|| panic!("no {key} in {text}"))
            .to_string()
    };
    let ns = |text: &str, engine: &str| -> u64 {
        value(text, &format!("drm-engine-{engine}"))
            .strip_suffix(" ns")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{engine} in {text}"))
    };
    let mine = gpu.file.fdinfo();
    assert_eq!(value(&mine, "drm-driver"), "asahi");
    assert!(ns(&mine, "compute") > 0, "{mine}");
    assert_eq!(
        (ns(&mine, "vertex"), ns(&mine, "fragment")),
        (0, 0),
        "{mine}"
    );
    // The control-stream buffer, 1 MiB.
    assert_eq!(value(&mine, "drm-total-memory"), "1 MiB");
    assert_eq!(value(&mine, "drm-shared-memory"), "0");
    let theirs = other.fdinfo();
    assert_ne!(
        value(&theirs, "drm-client-id"),
        value(&mine, "drm-client-id")
    );
    assert_eq!(ns(&theirs, "compute"), 0, "{theirs}");
    assert_eq!(value(&theirs, "drm-total-memory"), "0");
}
