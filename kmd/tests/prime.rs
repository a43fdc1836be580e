//! PRIME buffer sharing and syncobj / sync-file descriptors.

mod common;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use agx_hw::uat::PhysicalMemory;
use agx_kmd::sync::Fence;
use agx_kmd::{Errno, File};
use agx_uapi::asahi::GemFlags;
use agx_uapi::drm::{self, GemClose, PrimeHandle, SyncobjCreate, SyncobjHandle, SyncobjWait};
use common::*;

fn own(fd: i32) -> OwnedFd {
    assert!(fd >= 0);
    // SAFETY: the kmd handed this descriptor to us (the caller owns it, as
    // with a real ioctl), and nothing else closes it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn export(file: &File, handle: u32, flags: u32) -> Result<OwnedFd, Errno> {
    let mut p = PrimeHandle {
        handle,
        flags,
        fd: -1,
    };
    call(file, drm::DRM_IOCTL_PRIME_HANDLE_TO_FD, &mut p).map(|_| own(p.fd))
}

fn import(file: &File, fd: i32) -> Result<u32, Errno> {
    let mut p = PrimeHandle {
        handle: 0,
        flags: 0,
        fd,
    };
    call(file, drm::DRM_IOCTL_PRIME_FD_TO_HANDLE, &mut p).map(|_| p.handle)
}

fn pread(fd: &OwnedFd, len: usize, offset: u64) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let n = rustix::io::pread(fd, &mut buf, offset).unwrap();
    buf.truncate(n);
    buf
}

#[test_log::test]
fn prime_fds_share_pages_and_import_to_the_same_object() {
    let system = system();
    let file = system.open();
    let handle = gem_create(&file, 2 * PAGE, 0, 0).unwrap();
    let object = file.object(handle).unwrap();
    system
        .ram()
        .write(object.memory().pa().offset(PAGE), b"shared")
        .unwrap();
    let fd = export(&file, handle, drm::DRM_CLOEXEC | drm::DRM_RDWR).unwrap();
    assert_eq!(pread(&fd, 6, PAGE), b"shared", "the fd maps the same pages");
    rustix::io::pwrite(&fd, b"back", 0).unwrap();
    let mut buf = [0u8; 4];
    system.ram().read(object.memory().pa(), &mut buf).unwrap();
    assert_eq!(&buf, b"back");

    assert_eq!(
        import(&file, fd.as_raw_fd()),
        Ok(handle),
        "re-importing gives the same handle"
    );
    let other = system.open();
    let imported = import(&other, fd.as_raw_fd()).unwrap();
    assert!(Arc::ptr_eq(&other.object(imported).unwrap(), &object));
    assert_eq!(system.stats().gem_objects, 1);

    // Another simulated system adopts the pages.
    let second = common::system();
    let remote = second.open();
    let adopted = import(&remote, fd.as_raw_fd()).unwrap();
    let adopted = remote.object(adopted).unwrap();
    assert_eq!(adopted.size_bytes(), 2 * PAGE);
    second
        .ram()
        .write(adopted.memory().pa().offset(8), b"remote")
        .unwrap();
    let mut buf = [0u8; 6];
    system
        .ram()
        .read(object.memory().pa().offset(8), &mut buf)
        .unwrap();
    assert_eq!(&buf, b"remote");
}

#[test_log::test]
fn prime_errors() {
    let system = system();
    let file = system.open();
    let vm = vm_create(&file);
    let handle = gem_create(&file, PAGE, 0, 0).unwrap();
    let private = gem_create(&file, PAGE, GemFlags::VM_PRIVATE.bits(), vm).unwrap();
    assert_eq!(
        export(&file, handle, 1).unwrap_err(),
        Errno::EINVAL,
        "unknown flag"
    );
    assert_eq!(export(&file, 99, 0).unwrap_err(), Errno::ENOENT);
    assert_eq!(export(&file, private, 0).unwrap_err(), Errno::EINVAL);
    assert_eq!(import(&file, -1), Err(Errno::EBADF));
    assert_eq!(import(&file, 1_000_000), Err(Errno::EBADF));
    let not_a_buffer = std::fs::File::open("/dev/null").unwrap();
    assert_eq!(import(&file, not_a_buffer.as_raw_fd()), Err(Errno::EINVAL));
    // Closing the handle ends the object; the fd still holds the pages.
    let fd = export(&file, handle, 0).unwrap();
    rustix::io::pwrite(&fd, b"kept", 0).unwrap();
    call(
        &file,
        drm::DRM_IOCTL_GEM_CLOSE,
        &mut GemClose { handle, pad: 0 },
    )
    .unwrap();
    let again = import(&file, fd.as_raw_fd()).unwrap();
    let object = file.object(again).unwrap();
    let mut buf = [0u8; 4];
    system.ram().read(object.memory().pa(), &mut buf).unwrap();
    assert_eq!(&buf, b"kept");
}

fn syncobj_create(file: &File, flags: u32) -> u32 {
    let mut c = SyncobjCreate { handle: 0, flags };
    call(file, drm::DRM_IOCTL_SYNCOBJ_CREATE, &mut c).unwrap();
    c.handle
}

fn syncobj_to_fd(file: &File, handle: u32, flags: u32) -> Result<OwnedFd, Errno> {
    let mut h = SyncobjHandle {
        handle,
        flags,
        fd: -1,
        pad: 0,
    };
    call(file, drm::DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD, &mut h).map(|_| own(h.fd))
}

fn fd_to_syncobj(file: &File, fd: i32, flags: u32, handle: u32) -> Result<u32, Errno> {
    let mut h = SyncobjHandle {
        handle,
        flags,
        fd,
        pad: 0,
    };
    call(file, drm::DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE, &mut h).map(|_| h.handle)
}

/// The events `fd` reports for `POLLIN | POLLOUT` within `timeout_ms`.
fn poll_revents(fd: &OwnedFd, timeout_ms: i32) -> i16 {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN | libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    assert!(n >= 0);
    pfd.revents
}

/// Waits for `handle`'s fence to signal (10 s at most).
fn wait_signalled(file: &File, handle: u32) -> Result<i32, Errno> {
    let handles = [handle];
    let mut w = SyncobjWait {
        handles: handles.as_ptr() as u64,
        count_handles: 1,
        timeout_nsec: agx_kmd::sync::monotonic_now_ns() + 10_000_000_000,
        ..SyncobjWait::default()
    };
    call(file, drm::DRM_IOCTL_SYNCOBJ_WAIT, &mut w)
}

fn poll(file: &File, handle: u32) -> Result<i32, Errno> {
    let handles = [handle];
    let mut w = SyncobjWait {
        handles: handles.as_ptr() as u64,
        count_handles: 1,
        ..SyncobjWait::default()
    };
    call(file, drm::DRM_IOCTL_SYNCOBJ_WAIT, &mut w)
}

#[test_log::test]
fn syncobj_fds_and_sync_files() {
    let system = system();
    let (a, b) = (system.open(), system.open());
    let events = Arc::clone(system.sync_events());

    // A syncobj fd names the syncobj itself.
    let shared = syncobj_create(&a, 0);
    let fd = syncobj_to_fd(&a, shared, 0).unwrap();
    let in_b = fd_to_syncobj(&b, fd.as_raw_fd(), 0, 0).unwrap();
    assert!(Arc::ptr_eq(
        &a.syncobj(shared).unwrap(),
        &b.syncobj(in_b).unwrap()
    ));
    let fence = Fence::pending(Arc::clone(&events));
    a.syncobj(shared).unwrap().replace(Some(Arc::clone(&fence)));
    assert_eq!(poll(&b, in_b), Err(Errno::ETIME));

    // A sync file carries the current fence, pending or not.
    let sync_file = syncobj_to_fd(&a, shared, 1).unwrap();
    let target = syncobj_create(&b, 0);
    fd_to_syncobj(&b, sync_file.as_raw_fd(), 1, target).unwrap();
    assert_eq!(poll(&b, target), Err(Errno::ETIME));
    assert_eq!(system.exports().live_sync_files(), 1);
    assert_eq!(poll_revents(&sync_file, 0), 0, "pending: not readable");
    fence.signal(Some(Errno(libc::EIO)));
    assert_eq!(poll(&b, target), Ok(0));
    // The sync thread queues the status: the file turns readable, and
    // never writable.
    assert_eq!(poll_revents(&sync_file, 10_000), libc::POLLIN);
    let late = syncobj_create(&a, 0);
    fd_to_syncobj(&a, sync_file.as_raw_fd(), 1, late).unwrap();
    assert_eq!(
        a.syncobj(late).unwrap().fence_for(0).unwrap().status(),
        Some(Some(Errno(libc::EIO)))
    );

    // Errors.
    assert_eq!(syncobj_to_fd(&a, 99, 0).unwrap_err(), Errno::EINVAL);
    assert_eq!(syncobj_to_fd(&a, 99, 1).unwrap_err(), Errno::ENOENT);
    let empty = syncobj_create(&a, 0);
    assert_eq!(
        syncobj_to_fd(&a, empty, 1).unwrap_err(),
        Errno::EINVAL,
        "no fence to export"
    );
    assert_eq!(syncobj_to_fd(&a, empty, 2).unwrap_err(), Errno::EINVAL);
    let mut h = SyncobjHandle {
        handle: empty,
        flags: 0,
        fd: -1,
        pad: 1,
    };
    assert_eq!(
        call(&a, drm::DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD, &mut h),
        Err(Errno::EINVAL)
    );
    let null = std::fs::File::open("/dev/null").unwrap();
    assert_eq!(
        fd_to_syncobj(&a, null.as_raw_fd(), 0, 0),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        fd_to_syncobj(&a, null.as_raw_fd(), 1, empty),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        fd_to_syncobj(&a, sync_file.as_raw_fd(), 0, 0),
        Err(Errno::EINVAL),
        "a sync file is not a syncobj"
    );
    assert_eq!(
        fd_to_syncobj(&a, fd.as_raw_fd(), 1, empty),
        Err(Errno::EINVAL),
        "a syncobj is not a sync file"
    );
    assert_eq!(
        fd_to_syncobj(&a, sync_file.as_raw_fd(), 1, 99),
        Err(Errno::ENOENT)
    );
    assert_eq!(fd_to_syncobj(&a, -5, 0, 0), Err(Errno::EINVAL));
}

#[test_log::test]
fn sync_files_of_another_device_import_and_signal_with_their_status() {
    let (here, there) = (system(), system());
    let (file, other) = (here.open(), there.open());
    let fence = Fence::pending(Arc::clone(there.sync_events()));
    let exporter = syncobj_create(&other, 0);
    other
        .syncobj(exporter)
        .unwrap()
        .replace(Some(Arc::clone(&fence)));
    let sync_file = syncobj_to_fd(&other, exporter, 1).unwrap();

    // Imported while pending: a fence of this device that waits for it.
    let target = syncobj_create(&file, 0);
    fd_to_syncobj(&file, sync_file.as_raw_fd(), 1, target).unwrap();
    assert_eq!(poll(&file, target), Err(Errno::ETIME));
    // SYNC_IOC_FILE_INFO answers for any simulated sync file.
    let mut info = drm::SyncFileInfo::default();
    here.exports()
        .sync_file_info(std::os::fd::AsFd::as_fd(&sync_file), &mut info)
        .unwrap();
    assert_eq!(info.status, 0, "pending");
    fence.signal(Some(Errno(libc::ETIMEDOUT)));
    assert_eq!(wait_signalled(&file, target), Ok(0));
    assert_eq!(
        file.syncobj(target).unwrap().fence_for(0).unwrap().status(),
        Some(Some(Errno(libc::ETIMEDOUT))),
        "the other device's error arrives with the fence"
    );
    // The first call returned num_fences = 1: asked again with no record
    // array, Linux copies to the null pointer.
    assert_eq!(
        here.exports()
            .sync_file_info(std::os::fd::AsFd::as_fd(&sync_file), &mut info),
        Err(Errno::EFAULT)
    );
    let mut info = drm::SyncFileInfo::default();
    here.exports()
        .sync_file_info(std::os::fd::AsFd::as_fd(&sync_file), &mut info)
        .unwrap();
    assert_eq!(info.status, -libc::ETIMEDOUT);

    // Imported after it signalled: signalled at once, with the status.
    let late = syncobj_create(&file, 0);
    fd_to_syncobj(&file, sync_file.as_raw_fd(), 1, late).unwrap();
    assert_eq!(
        file.syncobj(late).unwrap().fence_for(0).unwrap().status(),
        Some(Some(Errno(libc::ETIMEDOUT)))
    );
    assert_eq!(there.exports().live_sync_files(), 1);
    assert_eq!(here.exports().live_sync_files(), 0, "not this device's");
    drop(sync_file);
    assert_eq!(
        there.exports().live_sync_files(),
        0,
        "forgotten once every copy is closed"
    );
}

/// A connected pair of Unix stream sockets.
fn stream_pair() -> (OwnedFd, OwnedFd) {
    rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .unwrap()
}

/// A sync file as another simulated device makes one (a named socket
/// whose peer the device keeps), with that peer.
fn bare_simulated_sync_file() -> (OwnedFd, OwnedFd) {
    let (sync_file, device_end) = stream_pair();
    let mut name = agx_kmd::sync_file::NAME_PREFIX[1..].to_vec();
    name.extend(
        format!(
            "test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        )
        .bytes(),
    );
    let address = rustix::net::SocketAddrUnix::new_abstract_name(&name).unwrap();
    rustix::net::bind(&sync_file, &address).unwrap();
    (sync_file, device_end)
}

#[test_log::test]
fn a_sync_file_whose_device_died_signals_with_enodev() {
    let system = system();
    let file = system.open();
    let (sync_file, device_end) = bare_simulated_sync_file();
    let target = syncobj_create(&file, 0);
    fd_to_syncobj(&file, sync_file.as_raw_fd(), 1, target).unwrap();
    assert_eq!(poll(&file, target), Err(Errno::ETIME), "pending");
    // The device process dies: its end closes with nothing queued.
    drop(device_end);
    assert_eq!(wait_signalled(&file, target), Ok(0));
    assert_eq!(
        file.syncobj(target).unwrap().fence_for(0).unwrap().status(),
        Some(Some(Errno::ENODEV))
    );
}

#[test_log::test]
fn only_sync_files_import_as_sync_files() {
    let system = system();
    let file = system.open();
    let target = syncobj_create(&file, 0);
    let (pipe_read, _pipe_write) = rustix::pipe::pipe().unwrap();
    let (socket, _peer) = stream_pair();
    let memfd = rustix::fs::memfd_create("agx-sync-file", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    for (what, fd) in [
        ("a pipe", pipe_read.as_raw_fd()),
        ("an unnamed socket", socket.as_raw_fd()),
        ("a memfd", memfd.as_raw_fd()),
    ] {
        assert_eq!(
            fd_to_syncobj(&file, fd, 1, target),
            Err(Errno::EINVAL),
            "{what} is not a sync file"
        );
    }
    let mut info = drm::SyncFileInfo::default();
    assert_eq!(
        system
            .exports()
            .sync_file_info(std::os::fd::AsFd::as_fd(&socket), &mut info),
        Err(Errno::ENOTTY)
    );
}

#[test_log::test]
fn a_sync_file_read_by_its_holder_stays_signalled() {
    let system = system();
    let file = system.open();
    let handle = syncobj_create(&file, drm::SyncobjCreateFlags::SIGNALED.bits());
    let sync_file = syncobj_to_fd(&file, handle, 1).unwrap();
    assert_eq!(
        poll_revents(&sync_file, 0),
        libc::POLLIN,
        "exported signalled"
    );
    // Linux refuses read on a sync file; here it can take the record.
    let mut record = [0u8; 64];
    assert!(rustix::io::read(&sync_file, &mut record).unwrap() > 0);
    assert_eq!(poll_revents(&sync_file, 0), libc::POLLIN);
    let there = self::system();
    let other = there.open();
    let target = syncobj_create(&other, 0);
    fd_to_syncobj(&other, sync_file.as_raw_fd(), 1, target).unwrap();
    assert_eq!(
        other
            .syncobj(target)
            .unwrap()
            .fence_for(0)
            .unwrap()
            .status(),
        Some(None)
    );
}

/// `struct sw_sync_create_fence_data` (the kernel's `sw_sync` debug
/// driver, `drivers/dma-buf/sw_sync.c`).
#[repr(C)]
struct SwSyncCreateFence {
    value: u32,
    name: [u8; 32],
    fence: i32,
}

/// `SW_SYNC_IOC_CREATE_FENCE`: `_IOWR('W', 0, struct sw_sync_create_fence_data)`.
const SW_SYNC_IOC_CREATE_FENCE: libc::c_ulong = 0xc028_5700;
/// `SW_SYNC_IOC_INC`: `_IOW('W', 1, __u32)`.
const SW_SYNC_IOC_INC: libc::c_ulong = 0x4004_5701;

/// A real kernel sync file (`sw_sync`'s) imports: pending until the
/// kernel signals it, then signalled. Needs a kernel with `CONFIG_SW_SYNC`
/// and debugfs mounted, which CI's does not have: run it with `--ignored`
/// where one does.
#[test_log::test]
#[ignore = "needs CONFIG_SW_SYNC and /sys/kernel/debug/sync/sw_sync"]
fn a_kernel_sync_file_imports_and_signals() {
    let timeline = std::fs::File::open("/sys/kernel/debug/sync/sw_sync")
        .expect("sw_sync (CONFIG_SW_SYNC, debugfs)");
    let mut create = SwSyncCreateFence {
        value: 1,
        name: [0; 32],
        fence: -1,
    };
    // SAFETY: the ioctl reads and writes one `SwSyncCreateFence`.
    let r = unsafe { libc::ioctl(timeline.as_raw_fd(), SW_SYNC_IOC_CREATE_FENCE, &mut create) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    let sync_file = own(create.fence);
    let system = system();
    let file = system.open();
    let target = syncobj_create(&file, 0);
    fd_to_syncobj(&file, sync_file.as_raw_fd(), 1, target).unwrap();
    assert_eq!(poll(&file, target), Err(Errno::ETIME), "pending");
    let step: u32 = 1;
    // SAFETY: the ioctl reads one u32.
    let r = unsafe { libc::ioctl(timeline.as_raw_fd(), SW_SYNC_IOC_INC, &step) };
    assert_eq!(r, 0);
    assert_eq!(wait_signalled(&file, target), Ok(0));
    assert_eq!(
        file.syncobj(target).unwrap().fence_for(0).unwrap().status(),
        Some(None)
    );
}

/// A device that keeps every object's memfd, as the device process does
/// (it hands CPU mappings out as memfds), on which a client could reach
/// the memfd of a VM-private object through its mapping
/// (`/proc/self/map_files`): importing it is refused, so a private object
/// cannot be aliased into a shareable handle. A shared object's memfd
/// imports, as its PRIME fd would (the holder could export it anyway).
#[test_log::test]
fn the_memfd_of_a_private_objects_mapping_is_not_a_buffer() {
    let config = DeviceConfig {
        keep_object_descriptors: true,
        ..DeviceConfig::default()
    };
    let system = TestDevice(common::scripted::boot(RAM_BYTES, config).0);
    let file = system.open();
    let vm = vm_create(&file);
    let private = gem_create(&file, PAGE, GemFlags::VM_PRIVATE.bits(), vm).unwrap();
    let object = file.object(private).unwrap();
    let (memfd, within) = file.mmap_descriptor(object.mmap_offset(), PAGE).unwrap();
    assert_eq!(within, 0);
    let other = system.open();
    assert_eq!(import(&other, memfd.as_raw_fd()), Err(Errno::EINVAL));
    assert_eq!(import(&file, memfd.as_raw_fd()), Err(Errno::EINVAL));

    let shared = gem_create(&file, PAGE, 0, 0).unwrap();
    let object = file.object(shared).unwrap();
    let (memfd, _) = file.mmap_descriptor(object.mmap_offset(), PAGE).unwrap();
    let in_other = import(&other, memfd.as_raw_fd()).unwrap();
    assert!(Arc::ptr_eq(&other.object(in_other).unwrap(), &object));
}

/// A sync file sent over itself (into the device's end, which nothing
/// reads) would keep itself open forever: the host kernel refuses it
/// (`SO_PASSRIGHTS`, Linux 6.16 and later), and the device forgets the
/// file once it is closed.
#[test_log::test]
fn a_sync_file_cannot_be_sent_over_itself() {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::mem::MaybeUninit;
    let system = system();
    let file = system.open();
    let handle = syncobj_create(&file, drm::SyncobjCreateFlags::SIGNALED.bits());
    let sync_file = syncobj_to_fd(&file, handle, 1).unwrap();
    let fds = [std::os::fd::AsFd::as_fd(&sync_file)];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
    let sent = rustix::net::sendmsg(
        &sync_file,
        &[std::io::IoSlice::new(b"x")],
        &mut control,
        SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
    );
    let probe = stream_pair();
    if agx_kmd::sync_file::refuse_passed_descriptors(std::os::fd::AsFd::as_fd(&probe.0)).is_err() {
        eprintln!("this kernel has no SO_PASSRIGHTS (before 6.16): nothing to check");
        return;
    }
    assert_eq!(sent, Err(rustix::io::Errno::PERM));
    assert_eq!(system.exports().live_sync_files(), 1);
    drop(sync_file);
    assert_eq!(system.exports().live_sync_files(), 0);
}

/// `IMPORT_SYNC_FILE` checks the file, then the handle, as Linux does,
/// and starts no wait for a handle that does not exist.
#[test_log::test]
fn a_sync_file_import_checks_the_file_then_the_handle() {
    let system = system();
    let file = system.open();
    let null = std::fs::File::open("/dev/null").unwrap();
    assert_eq!(
        fd_to_syncobj(&file, null.as_raw_fd(), 1, 99),
        Err(Errno::EINVAL)
    );
    let (sync_file, _device_end) = bare_simulated_sync_file();
    assert_eq!(
        fd_to_syncobj(&file, sync_file.as_raw_fd(), 1, 99),
        Err(Errno::ENOENT)
    );
    // A listening socket under a sync file's name is no sync file.
    let listener = rustix::net::socket(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        None,
    )
    .unwrap();
    let mut name = agx_kmd::sync_file::NAME_PREFIX[1..].to_vec();
    name.extend(format!("listener-{}", std::process::id()).bytes());
    let address = rustix::net::SocketAddrUnix::new_abstract_name(&name).unwrap();
    rustix::net::bind(&listener, &address).unwrap();
    rustix::net::listen(&listener, 1).unwrap();
    let target = syncobj_create(&file, 0);
    assert_eq!(
        fd_to_syncobj(&file, listener.as_raw_fd(), 1, target),
        Err(Errno::EINVAL)
    );
}

/// `ioctl(buffer, request, &arg)` on a PRIME fd, as the shim makes it.
fn dma_buf_call<T: zerocopy::IntoBytes + zerocopy::FromBytes + zerocopy::Immutable>(
    device: &agx_kmd::Device,
    buffer: &OwnedFd,
    request: u32,
    arg: &mut T,
) -> Result<i32, Errno> {
    device.exported_file_ioctl(
        std::os::fd::AsFd::as_fd(buffer),
        u64::from(request),
        arg as *mut T as u64,
    )
}

/// `DMA_BUF_IOCTL_EXPORT_SYNC_FILE` with `flags`: the sync file.
fn buffer_fences(device: &agx_kmd::Device, buffer: &OwnedFd, flags: u64) -> Result<OwnedFd, Errno> {
    let mut arg = drm::DmaBufSyncFile {
        flags: flags as u32,
        fd: -1,
    };
    dma_buf_call(
        device,
        buffer,
        drm::DMA_BUF_IOCTL_EXPORT_SYNC_FILE,
        &mut arg,
    )
    .map(|_| own(arg.fd))
}

/// `DMA_BUF_IOCTL_IMPORT_SYNC_FILE` of `sync_file` with `flags`.
fn add_buffer_fence(
    device: &agx_kmd::Device,
    buffer: &OwnedFd,
    flags: u64,
    sync_file: i32,
) -> Result<i32, Errno> {
    let mut arg = drm::DmaBufSyncFile {
        flags: flags as u32,
        fd: sync_file,
    };
    dma_buf_call(
        device,
        buffer,
        drm::DMA_BUF_IOCTL_IMPORT_SYNC_FILE,
        &mut arg,
    )
}

/// A sync file of `file` for a new pending fence of the device's: the
/// fence and the file.
fn pending_sync_file(system: &TestDevice, file: &File) -> (Arc<Fence>, OwnedFd) {
    let fence = Fence::pending(Arc::clone(system.sync_events()));
    let syncobj = syncobj_create(file, 0);
    file.syncobj(syncobj)
        .unwrap()
        .replace(Some(Arc::clone(&fence)));
    (fence, syncobj_to_fd(file, syncobj, 1).unwrap())
}

/// The status of a sync file: `None` pending, else its fence's error.
fn status(system: &TestDevice, sync_file: &OwnedFd) -> Option<Option<Errno>> {
    system
        .exports()
        .sync_file_status(std::os::fd::AsFd::as_fd(sync_file))
        .unwrap()
}

/// Implicit sync as Mesa's GL driver does it on a shared buffer: the
/// fences a submission declares on the buffer (import, as a write or a
/// read) are the ones the next access waits for (export): a reader waits
/// for the writes, a writer for every access, nothing once they signal.
#[test_log::test]
fn a_buffers_fences_are_the_ones_its_users_declared() {
    let system = system();
    let file = system.open();
    let handle = gem_create(&file, PAGE, 0, 0).unwrap();
    let buffer = export(&file, handle, drm::DRM_CLOEXEC | drm::DRM_RDWR).unwrap();
    let (read, write, rw) = (
        drm::DMA_BUF_SYNC_READ,
        drm::DMA_BUF_SYNC_WRITE,
        drm::DMA_BUF_SYNC_RW,
    );

    // Nothing declared: a signalled sync file (Linux's stub fence).
    for flags in [read, write, rw] {
        let fences = buffer_fences(&system, &buffer, flags).unwrap();
        assert_eq!(status(&system, &fences), Some(None), "flags {flags}");
    }

    // A write in flight: readers and writers wait for it.
    let (writing, written) = pending_sync_file(&system, &file);
    add_buffer_fence(&system, &buffer, write, written.as_raw_fd()).unwrap();
    let for_reader = buffer_fences(&system, &buffer, read).unwrap();
    let for_writer = buffer_fences(&system, &buffer, rw).unwrap();
    assert_eq!(status(&system, &for_reader), None);
    assert_eq!(status(&system, &for_writer), None);

    // A read in flight too: a writer waits for both, a reader only for
    // the write.
    let (reading, read_done) = pending_sync_file(&system, &file);
    add_buffer_fence(&system, &buffer, read, read_done.as_raw_fd()).unwrap();
    writing.signal(None);
    assert_eq!(status(&system, &for_reader), Some(None));
    assert_eq!(
        status(&system, &for_writer),
        Some(None),
        "taken before the read was added"
    );
    let for_reader = buffer_fences(&system, &buffer, read).unwrap();
    let for_writer = buffer_fences(&system, &buffer, write).unwrap();
    assert_eq!(
        status(&system, &for_reader),
        Some(None),
        "readers do not wait for readers"
    );
    assert_eq!(
        status(&system, &for_writer),
        None,
        "a writer waits for the read"
    );
    reading.signal(Some(Errno(libc::EIO)));
    assert_eq!(
        status(&system, &for_writer),
        Some(Some(Errno(libc::EIO))),
        "the read's error reaches the writer's sync file"
    );

    // Two writes in flight: the sync file signals when both have. A
    // second PRIME fd of the object is the same buffer.
    let again = export(&file, handle, drm::DRM_CLOEXEC).unwrap();
    let (first, first_file) = pending_sync_file(&system, &file);
    let (second, second_file) = pending_sync_file(&system, &file);
    add_buffer_fence(&system, &buffer, write, first_file.as_raw_fd()).unwrap();
    add_buffer_fence(&system, &again, rw, second_file.as_raw_fd()).unwrap();
    let both = buffer_fences(&system, &again, read).unwrap();
    first.signal(None);
    assert_eq!(status(&system, &both), None);
    second.signal(None);
    assert_eq!(status(&system, &both), Some(None));
    assert_eq!(
        status(&system, &buffer_fences(&system, &buffer, rw).unwrap()),
        Some(None)
    );
}

/// The dma-buf ioctls' checks, with Linux's errno values
/// (`drivers/dma-buf/dma-buf.c`), and `DMA_BUF_IOCTL_SYNC`'s wait.
#[test_log::test]
fn dma_buf_ioctls_check_their_arguments_and_the_cpu_access_waits() {
    let system = system();
    let file = system.open();
    let handle = gem_create(&file, PAGE, 0, 0).unwrap();
    let buffer = export(&file, handle, drm::DRM_CLOEXEC | drm::DRM_RDWR).unwrap();
    let (_, sync_file) = pending_sync_file(&system, &file);
    let sync_fd = sync_file.as_raw_fd();
    for flags in [0, 4, drm::DMA_BUF_SYNC_RW | 8] {
        assert_eq!(
            buffer_fences(&system, &buffer, flags).err(),
            Some(Errno::EINVAL),
            "{flags}"
        );
        assert_eq!(
            add_buffer_fence(&system, &buffer, flags, sync_fd),
            Err(Errno::EINVAL),
            "{flags}"
        );
    }
    // Not a sync file (a closed descriptor, a syncobj fd, the buffer).
    let syncobj_fd = syncobj_to_fd(&file, syncobj_create(&file, 0), 0).unwrap();
    for fd in [-1, 1 << 20, syncobj_fd.as_raw_fd(), buffer.as_raw_fd()] {
        assert_eq!(
            add_buffer_fence(&system, &buffer, drm::DMA_BUF_SYNC_WRITE, fd),
            Err(Errno::EINVAL)
        );
    }
    // A bad argument pointer.
    assert_eq!(
        system.exported_file_ioctl(
            std::os::fd::AsFd::as_fd(&buffer),
            u64::from(drm::DMA_BUF_IOCTL_EXPORT_SYNC_FILE),
            8,
        ),
        Err(Errno::EFAULT)
    );
    // Another request, or a file that is no buffer of this device: ENOTTY,
    // the host kernel's answer on a memfd or a pipe.
    let mut name = [0u8; 8];
    assert_eq!(
        dma_buf_call(
            &system,
            &buffer,
            agx_uapi::ioctl::iow::<u64>(b'b', 1),
            &mut name
        ),
        Err(Errno::ENOTTY)
    );
    let (pipe_read, _pipe_write) = rustix::pipe::pipe().unwrap();
    let mut arg = drm::DmaBufSyncFile { flags: 1, fd: -1 };
    assert_eq!(
        dma_buf_call(
            &system,
            &pipe_read,
            drm::DMA_BUF_IOCTL_EXPORT_SYNC_FILE,
            &mut arg
        ),
        Err(Errno::ENOTTY)
    );

    // DMA_BUF_IOCTL_SYNC: flags checked; the start of a CPU read waits
    // for the GPU's write, its end does not.
    for flags in [0, 8, drm::DMA_BUF_SYNC_END] {
        let mut sync = drm::DmaBufSync { flags };
        assert_eq!(
            dma_buf_call(&system, &buffer, drm::DMA_BUF_IOCTL_SYNC, &mut sync),
            Err(Errno::EINVAL)
        );
    }
    let (writing, written) = pending_sync_file(&system, &file);
    add_buffer_fence(
        &system,
        &buffer,
        drm::DMA_BUF_SYNC_WRITE,
        written.as_raw_fd(),
    )
    .unwrap();
    let mut end = drm::DmaBufSync {
        flags: drm::DMA_BUF_SYNC_END | drm::DMA_BUF_SYNC_READ,
    };
    assert_eq!(
        dma_buf_call(&system, &buffer, drm::DMA_BUF_IOCTL_SYNC, &mut end),
        Ok(0)
    );
    let started = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| {
            let mut start = drm::DmaBufSync {
                flags: drm::DMA_BUF_SYNC_READ,
            };
            let result = dma_buf_call(&system, &buffer, drm::DMA_BUF_IOCTL_SYNC, &mut start);
            (result, started.load(std::sync::atomic::Ordering::SeqCst))
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !waiter.is_finished(),
            "the start of a CPU read waits for the write"
        );
        started.store(true, std::sync::atomic::Ordering::SeqCst);
        writing.signal(None);
        assert_eq!(waiter.join().unwrap(), (Ok(0), true));
    });
}
