//! Syncobj semantics, as Linux's drm_syncobj gives them: binary and
//! timeline, wait-any and wait-all, absolute timeouts, wait-for-submit,
//! queries, transfers, and error propagation along timelines.

mod common;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use agx_kmd::sync::{monotonic_now_ns, Fence};
use agx_kmd::{Errno, File};
use agx_uapi::drm::{
    self, SyncobjArray, SyncobjCreate, SyncobjDestroy, SyncobjTimelineArray, SyncobjTimelineWait,
    SyncobjTransfer, SyncobjWait, SyncobjWaitFlags,
};
use common::*;

fn create(file: &File, signalled: bool) -> u32 {
    let mut c = SyncobjCreate {
        handle: 0,
        flags: u32::from(signalled),
    };
    call(file, drm::DRM_IOCTL_SYNCOBJ_CREATE, &mut c).unwrap();
    c.handle
}

fn wait(
    file: &File,
    handles: &[u32],
    flags: SyncobjWaitFlags,
    timeout_nsec: i64,
) -> Result<u32, Errno> {
    let mut w = SyncobjWait {
        handles: handles.as_ptr() as u64,
        timeout_nsec,
        count_handles: handles.len() as u32,
        flags: flags.bits(),
        ..SyncobjWait::default()
    };
    call(file, drm::DRM_IOCTL_SYNCOBJ_WAIT, &mut w).map(|_| w.first_signaled)
}

fn timeline_wait(
    file: &File,
    handles: &[u32],
    points: &[u64],
    flags: SyncobjWaitFlags,
    timeout_nsec: i64,
) -> Result<u32, Errno> {
    let mut w = SyncobjTimelineWait {
        handles: handles.as_ptr() as u64,
        points: points.as_ptr() as u64,
        timeout_nsec,
        count_handles: handles.len() as u32,
        flags: flags.bits(),
        ..SyncobjTimelineWait::default()
    };
    call(file, drm::DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT, &mut w).map(|_| w.first_signaled)
}

fn array(file: &File, request: u32, handles: &[u32]) -> Result<i32, Errno> {
    let mut a = SyncobjArray {
        handles: handles.as_ptr() as u64,
        count_handles: handles.len() as u32,
        pad: 0,
    };
    call(file, request, &mut a)
}

fn timeline_array(
    file: &File,
    request: u32,
    handles: &[u32],
    points: &mut [u64],
    flags: u32,
) -> Result<i32, Errno> {
    let mut a = SyncobjTimelineArray {
        handles: handles.as_ptr() as u64,
        points: points.as_mut_ptr() as u64,
        count_handles: handles.len() as u32,
        flags,
    };
    call(file, request, &mut a)
}

fn in_ms(ms: i64) -> i64 {
    monotonic_now_ns() + ms * 1_000_000
}

#[test_log::test]
fn binary_wait_any_all_and_timeouts() {
    let system = system();
    let file = system.open();
    let (unsignalled, signalled) = (create(&file, false), create(&file, true));
    assert_eq!(
        wait(&file, &[signalled], SyncobjWaitFlags::empty(), 0),
        Ok(0)
    );
    // No fence and no WAIT_FOR_SUBMIT: EINVAL, even with a signalled one.
    assert_eq!(
        wait(
            &file,
            &[signalled, unsignalled],
            SyncobjWaitFlags::empty(),
            0
        ),
        Err(Errno::EINVAL)
    );
    let submit = SyncobjWaitFlags::WAIT_FOR_SUBMIT;
    assert_eq!(
        wait(&file, &[unsignalled, signalled], submit, 0),
        Ok(1),
        "any: index of the signalled one"
    );
    assert_eq!(
        wait(
            &file,
            &[unsignalled, signalled],
            submit | SyncobjWaitFlags::WAIT_ALL,
            0
        ),
        Err(Errno::ETIME)
    );
    let started = Instant::now();
    assert_eq!(
        wait(&file, &[unsignalled], submit, in_ms(30)),
        Err(Errno::ETIME)
    );
    assert!(
        started.elapsed() >= Duration::from_millis(29),
        "waited until the absolute deadline"
    );
    // A deadline in the past polls.
    assert_eq!(wait(&file, &[unsignalled], submit, 1), Err(Errno::ETIME));
    // count 0 is a successful no-op (Linux 6.5+: a probe).
    assert_eq!(wait(&file, &[], SyncobjWaitFlags::empty(), 0), Ok(0));
    // SIGNAL, then RESET.
    array(&file, drm::DRM_IOCTL_SYNCOBJ_SIGNAL, &[unsignalled]).unwrap();
    assert_eq!(
        wait(
            &file,
            &[unsignalled, signalled],
            SyncobjWaitFlags::WAIT_ALL,
            0
        ),
        Ok(0)
    );
    array(
        &file,
        drm::DRM_IOCTL_SYNCOBJ_RESET,
        &[unsignalled, signalled],
    )
    .unwrap();
    assert_eq!(
        wait(&file, &[signalled], SyncobjWaitFlags::empty(), 0),
        Err(Errno::EINVAL)
    );
}

#[test_log::test]
fn wait_for_submit_wakes_when_another_thread_signals() {
    let system = system();
    let file = Arc::new(system.open());
    let handle = create(&file, false);
    let signaller = {
        let file = Arc::clone(&file);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            array(&file, drm::DRM_IOCTL_SYNCOBJ_SIGNAL, &[handle]).unwrap();
        })
    };
    let started = Instant::now();
    assert_eq!(
        wait(
            &file,
            &[handle],
            SyncobjWaitFlags::WAIT_FOR_SUBMIT,
            in_ms(5000)
        ),
        Ok(0)
    );
    assert!(started.elapsed() < Duration::from_secs(4));
    signaller.join().unwrap();
    // A pending fence attached later (as a submission does) also wakes.
    let syncobj = file.syncobj(handle).unwrap();
    let fence = Fence::pending(Arc::clone(system.sync_events()));
    syncobj.replace(Some(Arc::clone(&fence)));
    assert_eq!(
        wait(&file, &[handle], SyncobjWaitFlags::empty(), 0),
        Err(Errno::ETIME)
    );
    let f2 = Arc::clone(&fence);
    let t = thread::spawn(move || {
        thread::sleep(Duration::from_millis(10));
        f2.signal(None);
    });
    assert_eq!(
        wait(&file, &[handle], SyncobjWaitFlags::empty(), in_ms(5000)),
        Ok(0)
    );
    t.join().unwrap();
}

#[test_log::test]
fn timeline_points_queries_and_errors() {
    let system = system();
    let file = system.open();
    let tl = create(&file, false);
    let events = Arc::clone(system.sync_events());
    let syncobj = file.syncobj(tl).unwrap();
    let p2 = Fence::pending(Arc::clone(&events));
    timeline_array(
        &file,
        drm::DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL,
        &[tl],
        &mut [1],
        0,
    )
    .unwrap();
    syncobj.add_point(2, Arc::clone(&p2));
    timeline_array(
        &file,
        drm::DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL,
        &[tl],
        &mut [3],
        0,
    )
    .unwrap();

    let mut points = [0u64];
    timeline_array(&file, drm::DRM_IOCTL_SYNCOBJ_QUERY, &[tl], &mut points, 0).unwrap();
    assert_eq!(points, [1], "point 2 is pending, so 3 does not count yet");
    timeline_array(&file, drm::DRM_IOCTL_SYNCOBJ_QUERY, &[tl], &mut points, 1).unwrap();
    assert_eq!(points, [3], "LAST_SUBMITTED");

    let none = SyncobjWaitFlags::empty();
    assert_eq!(timeline_wait(&file, &[tl], &[1], none, 0), Ok(0));
    assert_eq!(
        timeline_wait(&file, &[tl], &[3], none, 0),
        Err(Errno::ETIME),
        "3 waits for 2"
    );
    assert_eq!(
        timeline_wait(&file, &[tl], &[3], SyncobjWaitFlags::WAIT_AVAILABLE, 0),
        Ok(0)
    );
    assert_eq!(
        timeline_wait(&file, &[tl], &[9], none, 0),
        Err(Errno::EINVAL),
        "no such point"
    );
    assert_eq!(
        timeline_wait(&file, &[tl], &[9], SyncobjWaitFlags::WAIT_FOR_SUBMIT, 0),
        Err(Errno::ETIME)
    );

    // Transfer point 3 into a binary syncobj: it depends on point 2 too.
    let binary = create(&file, false);
    let mut t = SyncobjTransfer {
        src_handle: tl,
        dst_handle: binary,
        src_point: 3,
        dst_point: 0,
        flags: 0,
        pad: 0,
    };
    call(&file, drm::DRM_IOCTL_SYNCOBJ_TRANSFER, &mut t).unwrap();
    assert_eq!(wait(&file, &[binary], none, 0), Err(Errno::ETIME));
    // A GPU fault on point 2 reaches everything that depends on it.
    p2.signal(Some(Errno(libc::EIO)));
    assert_eq!(wait(&file, &[binary], none, 0), Ok(0));
    let status = file.syncobj(binary).unwrap().fence_for(0).unwrap().status();
    assert_eq!(status, Some(Some(Errno(libc::EIO))));
    assert_eq!(
        syncobj.fence_for(3).unwrap().status(),
        Some(Some(Errno(libc::EIO)))
    );
    assert_eq!(syncobj.fence_for(1).unwrap().status(), Some(None));
    timeline_array(&file, drm::DRM_IOCTL_SYNCOBJ_QUERY, &[tl], &mut points, 0).unwrap();
    assert_eq!(points, [3]);
    // Transfer into a timeline point.
    let mut t = SyncobjTransfer {
        src_handle: tl,
        dst_handle: binary,
        src_point: 1,
        dst_point: 7,
        flags: 0,
        pad: 0,
    };
    call(&file, drm::DRM_IOCTL_SYNCOBJ_TRANSFER, &mut t).unwrap();
    timeline_array(
        &file,
        drm::DRM_IOCTL_SYNCOBJ_QUERY,
        &[binary],
        &mut points,
        1,
    )
    .unwrap();
    assert_eq!(points, [7]);
}

/// Mesa's Vulkan queue initialises its timeline to 1 and then signals
/// point 1 again with its first submission. Linux's fence chain makes the
/// new link stand for point 1 (starting a new run), so waiting for point
/// 1, or for a binary syncobj it was transferred to (`vkQueueWaitIdle`),
/// waits for the submission; an earlier model answered from the first
/// link and let Mesa read buffers the GPU had not written yet.
#[test_log::test]
fn a_point_signalled_again_waits_for_its_new_fence() {
    let system = system();
    let file = system.open();
    let tl = create(&file, false);
    let syncobj = file.syncobj(tl).unwrap();
    let signal = drm::DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL;
    let query = drm::DRM_IOCTL_SYNCOBJ_QUERY;
    timeline_array(&file, signal, &[tl], &mut [1], 0).unwrap();
    let job = Fence::pending(Arc::clone(system.sync_events()));
    syncobj.add_point(1, Arc::clone(&job));

    let none = SyncobjWaitFlags::empty();
    assert_eq!(
        timeline_wait(&file, &[tl], &[1], none, 0),
        Err(Errno::ETIME)
    );
    assert_eq!(
        timeline_wait(&file, &[tl], &[2], none, 0),
        Err(Errno::EINVAL),
        "the timeline has not reached 2"
    );
    let binary = create(&file, false);
    let mut t = SyncobjTransfer {
        src_handle: tl,
        dst_handle: binary,
        src_point: 1,
        dst_point: 0,
        flags: 0,
        pad: 0,
    };
    call(&file, drm::DRM_IOCTL_SYNCOBJ_TRANSFER, &mut t).unwrap();
    assert_eq!(wait(&file, &[binary], none, 0), Err(Errno::ETIME));
    let mut points = [9u64];
    timeline_array(&file, query, &[tl], &mut points, 0).unwrap();
    assert_eq!(points, [0], "the new run's first link is pending");
    timeline_array(&file, query, &[tl], &mut points, 1).unwrap();
    assert_eq!(points, [1], "LAST_SUBMITTED");

    job.signal(None);
    assert_eq!(wait(&file, &[binary], none, 0), Ok(0));
    timeline_array(&file, query, &[tl], &mut points, 0).unwrap();
    assert_eq!(points, [1]);
    // The timeline goes on in order from there.
    let next = Fence::pending(Arc::clone(system.sync_events()));
    syncobj.add_point(2, Arc::clone(&next));
    assert_eq!(timeline_wait(&file, &[tl], &[1], none, 0), Ok(0));
    assert_eq!(
        timeline_wait(&file, &[tl], &[2], none, 0),
        Err(Errno::ETIME)
    );
    timeline_array(&file, query, &[tl], &mut points, 0).unwrap();
    assert_eq!(points, [1]);
    next.signal(None);
    timeline_array(&file, query, &[tl], &mut points, 0).unwrap();
    assert_eq!(points, [2]);
}

#[test_log::test]
fn bad_syncobj_arguments() {
    let system = system();
    let file = system.open();
    let h = create(&file, true);
    // Arrays the kernel reads through pointers must outlive the call.
    let just_h = [h];
    let mut c = SyncobjCreate {
        handle: 0,
        flags: 2,
    };
    assert_eq!(
        call(&file, drm::DRM_IOCTL_SYNCOBJ_CREATE, &mut c),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        call(
            &file,
            drm::DRM_IOCTL_SYNCOBJ_DESTROY,
            &mut SyncobjDestroy { handle: h, pad: 1 }
        ),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        call(
            &file,
            drm::DRM_IOCTL_SYNCOBJ_DESTROY,
            &mut SyncobjDestroy { handle: 99, pad: 0 }
        ),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        wait(&file, &[h], SyncobjWaitFlags::WAIT_AVAILABLE, 0),
        Err(Errno::EINVAL),
        "binary wait has no WAIT_AVAILABLE"
    );
    assert_eq!(
        wait(&file, &[h], SyncobjWaitFlags::from_bits_retain(1 << 7), 0),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        wait(&file, &[99], SyncobjWaitFlags::empty(), 0),
        Err(Errno::ENOENT)
    );
    let mut bad = SyncobjWait {
        handles: 16,
        count_handles: 1,
        ..SyncobjWait::default()
    };
    assert_eq!(
        call(&file, drm::DRM_IOCTL_SYNCOBJ_WAIT, &mut bad),
        Err(Errno::EFAULT)
    );
    assert_eq!(
        array(&file, drm::DRM_IOCTL_SYNCOBJ_RESET, &[]),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        array(&file, drm::DRM_IOCTL_SYNCOBJ_SIGNAL, &[h, 99]),
        Err(Errno::ENOENT)
    );
    let mut a = SyncobjArray {
        handles: just_h.as_ptr() as u64,
        count_handles: 1,
        pad: 1,
    };
    assert_eq!(
        call(&file, drm::DRM_IOCTL_SYNCOBJ_RESET, &mut a),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        timeline_array(&file, drm::DRM_IOCTL_SYNCOBJ_QUERY, &[h], &mut [0], 2),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        timeline_array(
            &file,
            drm::DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL,
            &[h],
            &mut [1],
            1
        ),
        Err(Errno::EINVAL)
    );
    let mut t = SyncobjTransfer {
        src_handle: h,
        dst_handle: h,
        pad: 1,
        ..SyncobjTransfer::default()
    };
    assert_eq!(
        call(&file, drm::DRM_IOCTL_SYNCOBJ_TRANSFER, &mut t),
        Err(Errno::EINVAL)
    );
    let mut t = SyncobjTransfer {
        src_handle: 99,
        dst_handle: h,
        ..SyncobjTransfer::default()
    };
    assert_eq!(
        call(&file, drm::DRM_IOCTL_SYNCOBJ_TRANSFER, &mut t),
        Err(Errno::ENOENT)
    );
    let empty = create(&file, false);
    let mut t = SyncobjTransfer {
        src_handle: empty,
        dst_handle: h,
        ..SyncobjTransfer::default()
    };
    assert_eq!(
        call(&file, drm::DRM_IOCTL_SYNCOBJ_TRANSFER, &mut t),
        Err(Errno::EINVAL),
        "no fence to move"
    );
    // A count whose array exceeds kmalloc's limit is ENOMEM, not an
    // allocation of gigabytes.
    let mut huge = SyncobjArray {
        handles: just_h.as_ptr() as u64,
        count_handles: u32::MAX,
        pad: 0,
    };
    assert_eq!(
        call(&file, drm::DRM_IOCTL_SYNCOBJ_RESET, &mut huge),
        Err(Errno::ENOMEM)
    );
    let mut huge = SyncobjWait {
        handles: just_h.as_ptr() as u64,
        count_handles: u32::MAX,
        ..SyncobjWait::default()
    };
    assert_eq!(
        call(&file, drm::DRM_IOCTL_SYNCOBJ_WAIT, &mut huge),
        Err(Errno::ENOMEM)
    );
}

#[test_log::test]
fn a_null_points_array_means_point_zero() {
    let system = system();
    let file = system.open();
    let h = create(&file, false);
    // Arrays the kernel reads through pointers must outlive the call.
    let just_h = [h];
    // TIMELINE_SIGNAL with no points signals point 0 (the binary fence).
    let mut a = SyncobjTimelineArray {
        handles: just_h.as_ptr() as u64,
        points: 0,
        count_handles: 1,
        flags: 0,
    };
    assert_eq!(
        call(&file, drm::DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL, &mut a),
        Ok(0)
    );
    // TIMELINE_WAIT with no points waits for point 0: signalled.
    let mut w = SyncobjTimelineWait {
        handles: just_h.as_ptr() as u64,
        points: 0,
        timeout_nsec: 0,
        count_handles: 1,
        ..SyncobjTimelineWait::default()
    };
    assert_eq!(
        call(&file, drm::DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT, &mut w),
        Ok(0)
    );
    // QUERY still needs somewhere to write.
    let mut q = SyncobjTimelineArray {
        handles: just_h.as_ptr() as u64,
        points: 0,
        count_handles: 1,
        flags: 0,
    };
    assert_eq!(
        call(&file, drm::DRM_IOCTL_SYNCOBJ_QUERY, &mut q),
        Err(Errno::EFAULT)
    );
}

#[test_log::test]
fn syncobjs_are_freed_with_their_file() {
    let system = system();
    {
        let file = system.open();
        for _ in 0..10 {
            create(&file, true);
        }
        let h = create(&file, false);
        call(
            &file,
            drm::DRM_IOCTL_SYNCOBJ_DESTROY,
            &mut SyncobjDestroy { handle: h, pad: 0 },
        )
        .unwrap();
        assert_eq!(system.stats().syncobjs, 10);
    }
    assert_eq!(system.stats().syncobjs, 0);
    assert_eq!(system.stats().files, 0);
}

fn eventfd_request(
    file: &File,
    handle: u32,
    point: u64,
    fd: i32,
    flags: u32,
) -> Result<i32, Errno> {
    let mut e = drm::SyncobjEventfd {
        handle,
        flags,
        point,
        fd,
        pad: 0,
    };
    call(file, drm::DRM_IOCTL_SYNCOBJ_EVENTFD, &mut e)
}

/// The eventfd's count, waiting up to `wait` for it to become non-zero
/// (the device's sync thread fires eventfds for changes after the ioctl).
fn eventfd_count(fd: &std::os::fd::OwnedFd, wait: Duration) -> u64 {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    let timeout = rustix::time::Timespec {
        tv_sec: wait.as_secs() as i64,
        tv_nsec: i64::from(wait.subsec_nanos()),
    };
    if poll(&mut fds, Some(&timeout)).unwrap() == 0 {
        return 0;
    }
    let mut count = [0u8; 8];
    rustix::io::read(fd, &mut count).unwrap();
    u64::from_ne_bytes(count)
}

/// Descriptors of this process that are eventfds.
fn open_eventfds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.as_os_str() == "anon_inode:[eventfd]")
        .count()
}

/// SYNCOBJ_EVENTFD (Linux 6.6) as drm_syncobj_eventfd_ioctl: its checks
/// in the kernel's order, then one increment when the point signals (or,
/// with WAIT_AVAILABLE, when it has a fence), at once if it already has;
/// a registration goes with its syncobj.
#[test_log::test]
fn an_eventfd_is_signalled_once_when_its_point_is_ready() {
    use rustix::event::{eventfd, EventfdFlags};
    let system = system();
    let file = system.open();
    let timeline = create(&file, false);
    let efd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).unwrap();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&efd);
    let (pipe, _writer) = rustix::pipe::pipe().unwrap();
    let not_eventfd = std::os::fd::AsRawFd::as_raw_fd(&pipe);
    let available = SyncobjWaitFlags::WAIT_AVAILABLE.bits();
    // Flags and pad first, then the handle, then the descriptor and its kind.
    let refusals = [
        (
            timeline,
            raw,
            SyncobjWaitFlags::WAIT_ALL.bits(),
            0,
            Errno::EINVAL,
        ),
        (999, -1, 0x100, 0, Errno::EINVAL),
        (timeline, raw, 0, 1, Errno::EINVAL),
        (999, raw, 0, 0, Errno::ENOENT),
        (999, -1, 0, 0, Errno::ENOENT),
        (timeline, -1, 0, 0, Errno::EBADF),
        (timeline, 100_000, available, 0, Errno::EBADF),
        (timeline, not_eventfd, 0, 0, Errno::EINVAL),
    ];
    for (handle, fd, flags, pad, expected) in refusals {
        let mut e = drm::SyncobjEventfd {
            handle,
            flags,
            point: 1,
            fd,
            pad,
        };
        assert_eq!(
            call(&file, drm::DRM_IOCTL_SYNCOBJ_EVENTFD, &mut e),
            Err(expected),
            "{e:?}"
        );
    }
    // Point 2: nothing until it signals, then exactly one increment.
    eventfd_request(&file, timeline, 2, raw, 0).unwrap();
    assert_eq!(eventfd_count(&efd, Duration::ZERO), 0);
    let signal = |point: u64| {
        let handles = [timeline];
        let points = [point];
        let mut a = SyncobjTimelineArray {
            handles: handles.as_ptr() as u64,
            points: points.as_ptr() as u64,
            count_handles: 1,
            flags: 0,
        };
        call(&file, drm::DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL, &mut a).unwrap();
    };
    signal(1);
    assert_eq!(eventfd_count(&efd, Duration::from_millis(50)), 0);
    signal(2);
    assert_eq!(eventfd_count(&efd, Duration::from_secs(5)), 1);
    signal(3);
    assert_eq!(eventfd_count(&efd, Duration::from_millis(50)), 0, "once");
    // A point that is already signalled: at once, in the ioctl.
    eventfd_request(&file, timeline, 3, raw, 0).unwrap();
    assert_eq!(eventfd_count(&efd, Duration::ZERO), 1);
    // WAIT_AVAILABLE: when the point gets a fence, before it signals.
    let binary = create(&file, false);
    eventfd_request(&file, binary, 0, raw, available).unwrap();
    assert_eq!(eventfd_count(&efd, Duration::from_millis(50)), 0);
    let fence = Fence::pending(Arc::clone(system.sync_events()));
    file.syncobj(binary)
        .unwrap()
        .replace(Some(Arc::clone(&fence)));
    assert_eq!(eventfd_count(&efd, Duration::from_secs(5)), 1);
    // Without it, the same fence fires the eventfd when it signals.
    eventfd_request(&file, binary, 0, raw, 0).unwrap();
    assert_eq!(eventfd_count(&efd, Duration::from_millis(50)), 0);
    fence.signal(None);
    assert_eq!(eventfd_count(&efd, Duration::from_secs(5)), 1);
    // The device holds its own reference to the eventfd until the
    // registration goes: destroying the syncobj drops it, unfired.
    let before = open_eventfds();
    let unsignalled = create(&file, false);
    eventfd_request(&file, unsignalled, 0, raw, 0).unwrap();
    assert_eq!(open_eventfds(), before + 1);
    let mut d = SyncobjDestroy {
        handle: unsignalled,
        pad: 0,
    };
    call(&file, drm::DRM_IOCTL_SYNCOBJ_DESTROY, &mut d).unwrap();
    assert_eq!(open_eventfds(), before);
    assert_eq!(eventfd_count(&efd, Duration::from_millis(50)), 0);
}
