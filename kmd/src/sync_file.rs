//! Sync files: one fence as a file descriptor, as Linux's `sync_file`.
//!
//! On Linux a sync file polls readable (`POLLIN`) once its fence has
//! signalled and never before, and `SYNC_IOC_FILE_INFO` reports its
//! status. The simulated device's sync file is one end of a Unix stream
//! socket pair, bound to an abstract name beginning with
//! [`NAME_PREFIX`] so that any process can tell it is one. The device
//! keeps the other end. While the fence is pending nothing is queued
//! on the file, so it does not poll readable; when the fence signals,
//! the device's sync thread queues a status record on it and shuts its
//! own end for writing, so the file polls readable from then on (even if
//! a client reads the record away). The device's end also holds a little
//! ballast the device never reads, so the file never polls writable.
//! The device closes its end once every copy of the file is closed.
//!
//! Sync files of other devices import too, as on Linux, where any
//! dma-fence sync file does: a kernel sync file (another driver's, or
//! `sw_sync`'s), recognised by the kernel's own `SYNC_IOC_FILE_INFO`, and
//! the sync file of another simulated device. The device waits for them
//! to poll readable in its sync thread and then reads their status.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rustix::event::epoll::EventFlags;

use crate::mem::backing::{DeviceFd, Inode};
use crate::sync::{Fence, SyncEvents, Watcher};
use agx_uapi::drm::SyncFileInfo;
use agx_uapi::Errno;

/// How the abstract socket name of a simulated sync file begins (the
/// leading NUL makes it abstract: no file in any directory).
pub const NAME_PREFIX: &[u8] = b"\0agx-sync-file/";

/// What `/proc/self/fd/N` of a kernel sync file reads.
const KERNEL_SYNC_FILE_LINK: &str = "anon_inode:sync_file";

/// The status record: a magic word, then the status word (1 signalled,
/// 2 + errno signalled with an error).
const RECORD_MAGIC: [u8; 8] = *b"AGXSYNC\0";
const RECORD_BYTES: usize = 16;

/// The status of a fence: `None` while pending, then its error if any.
pub type FenceStatus = Option<Option<Errno>>;

fn errno_of(e: rustix::io::Errno) -> Errno {
    Errno(e.raw_os_error())
}

/// The (device, inode) identity of a descriptor's file.
pub fn inode_of(fd: BorrowedFd<'_>) -> Result<Inode, Errno> {
    let stat = rustix::fs::fstat(fd).map_err(errno_of)?;
    Ok((stat.st_dev, stat.st_ino))
}

/// Fills the send buffer of `socket` with bytes its peer never reads, so
/// that `poll` never reports it writable (a Unix socket is writable
/// while less than a quarter of its send buffer is in use): a sync file,
/// or a DRM file, reports only `POLLIN`. The buffer is made small first.
pub fn fill_send_buffer(socket: BorrowedFd<'_>) -> rustix::io::Result<()> {
    use rustix::event::{poll, PollFd, PollFlags};
    rustix::net::sockopt::set_socket_send_buffer_size(socket, 4096)?;
    let size = rustix::net::sockopt::socket_send_buffer_size(socket)?;
    let ballast = vec![0u8; size / 2];
    let flags = rustix::net::SendFlags::NOSIGNAL | rustix::net::SendFlags::DONTWAIT;
    // One send is enough for every socket type seen; the loop makes sure.
    for _ in 0..64 {
        let mut fds = [PollFd::new(&socket, PollFlags::OUT)];
        let zero = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        if poll(&mut fds, Some(&zero))? == 0 {
            return Ok(());
        }
        match rustix::net::send(socket, &ballast, flags) {
            Ok(_) => {}
            Err(rustix::io::Errno::AGAIN) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Err(rustix::io::Errno::NOBUFS)
}

/// `SO_PASSRIGHTS` (Linux 6.16): whether a Unix socket accepts
/// descriptors (`SCM_RIGHTS`) sent to it.
const SO_PASSRIGHTS: libc::c_int = 83;

/// Makes the host kernel refuse descriptors sent to `socket` (the sender
/// gets `EPERM`): for the device's end of a sync file or a DRM file,
/// which it never reads, so that a file sent over itself cannot sit in
/// that queue and keep itself open forever. Fails on kernels before 6.16
/// (`ENOPROTOOPT`).
pub fn refuse_passed_descriptors(socket: BorrowedFd<'_>) -> std::io::Result<()> {
    let off: libc::c_int = 0;
    // SAFETY: `off` is a valid int that outlives the call, and its size
    // is passed; the kernel only reads it.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PASSRIGHTS,
            std::ptr::addr_of!(off).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn status_word(status: Option<Errno>) -> u64 {
    match status {
        None => 1,
        Some(errno) => 2 + u64::from(errno.0.unsigned_abs()),
    }
}

fn status_of_word(word: u64) -> Option<Errno> {
    match word {
        0 | 1 => None,
        w => Some(Errno(i32::try_from(w - 2).unwrap_or(libc::EIO))),
    }
}

/// Whether `fd` is a simulated sync file (of this device or another).
pub fn is_simulated(fd: BorrowedFd<'_>) -> bool {
    match rustix::net::getsockname(fd) {
        Ok(address) => rustix::net::SocketAddrUnix::try_from(address)
            .ok()
            .and_then(|unix| unix.abstract_name().map(<[u8]>::to_vec))
            .is_some_and(|name| name.starts_with(&NAME_PREFIX[1..])),
        Err(_) => false,
    }
}

/// The status a simulated sync file shows: its record if one is queued,
/// pending if nothing is, and `ENODEV` if its device went away (its end
/// closed) without queueing one: a device process that died.
pub(crate) fn simulated_status(fd: BorrowedFd<'_>) -> FenceStatus {
    let mut record = [0u8; RECORD_BYTES];
    let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
    match rustix::net::recv(fd, &mut record, flags) {
        Ok((n, _)) if n == RECORD_BYTES && record[..8] == RECORD_MAGIC => Some(status_of_word(
            u64::from_le_bytes(record[8..].try_into().unwrap_or_default()),
        )),
        // The device's end is closed: the device died before the fence
        // signalled.
        Ok((0, _)) if hung_up(fd) => Some(Some(Errno::ENODEV)),
        // Shut for writing with nothing queued: a client read the record
        // away (Linux refuses `read` on a sync file). The fence had
        // signalled; its error, if any, is lost.
        Ok((0, _)) => Some(None),
        // A partial record is never queued: it is one send.
        Ok(_) => Some(Some(Errno::EIO)),
        // The device's end closed with its ballast unread: the kernel
        // reports a reset once; the device is gone.
        Err(rustix::io::Errno::CONNRESET) => Some(Some(Errno::ENODEV)),
        Err(_) if hung_up(fd) => Some(Some(Errno::ENODEV)),
        Err(_) => None,
    }
}

/// Whether the peer of the socket `fd` is closed.
fn hung_up(fd: BorrowedFd<'_>) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(&fd, PollFlags::empty())];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    poll(&mut fds, Some(&zero)).is_ok_and(|n| n > 0) && fds[0].revents().contains(PollFlags::HUP)
}

/// The request number as rustix's backend types it (`u32` for raw
/// system calls, `c_ulong` through libc).
#[allow(trivial_numeric_casts)]
const SYNC_IOC_FILE_INFO: rustix::ioctl::Opcode =
    agx_uapi::drm::SYNC_IOC_FILE_INFO as rustix::ioctl::Opcode;

/// `SYNC_IOC_FILE_INFO` asked of the real kernel (without fence records):
/// it answers only for the kernel's sync files.
pub(crate) fn kernel_sync_file_info(fd: BorrowedFd<'_>) -> Result<SyncFileInfo, Errno> {
    use rustix::ioctl::{ioctl, Updater};
    let mut info = SyncFileInfo::default();
    // SAFETY: `SYNC_IOC_FILE_INFO` reads and writes exactly one `struct
    // sync_file_info`, which `SyncFileInfo` is byte for byte (checked
    // against the C header in agx-uapi's layout tests); with
    // `num_fences` 0 the kernel writes no fence records. On a file that
    // is not a sync file the kernel fails with `ENOTTY` and touches
    // nothing.
    let updater = unsafe { Updater::<{ SYNC_IOC_FILE_INFO }, SyncFileInfo>::new(&mut info) };
    // SAFETY: as above: the opcode matches the argument's type.
    unsafe { ioctl(fd, updater) }.map_err(errno_of)?;
    Ok(info)
}

/// The status a kernel sync file reports.
pub(crate) fn kernel_status(fd: BorrowedFd<'_>) -> Result<FenceStatus, Errno> {
    let info = kernel_sync_file_info(fd)?;
    Ok(match info.status {
        0 => None,
        s if s < 0 => Some(Some(Errno(-s))),
        _ => Some(None),
    })
}

/// What kind of sync file a descriptor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A simulated device's.
    Simulated,
    /// The real kernel's.
    Kernel,
}

impl Kind {
    /// The kind of sync file `fd` is, if it is one. A kernel sync file is
    /// recognised as the kernel does (by its file operations, which name
    /// its anonymous inode), so no ioctl is tried on other files.
    pub(crate) fn of(fd: BorrowedFd<'_>) -> Option<Kind> {
        if is_simulated(fd) {
            // As a device makes one: a connected stream socket.
            use rustix::net::sockopt::{socket_acceptconn, socket_type};
            let made_so = socket_type(fd) == Ok(rustix::net::SocketType::STREAM)
                && socket_acceptconn(fd) == Ok(false)
                && rustix::net::getpeername(fd).is_ok();
            return made_so.then_some(Kind::Simulated);
        }
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
        (link.as_os_str() == KERNEL_SYNC_FILE_LINK && kernel_sync_file_info(fd).is_ok())
            .then_some(Kind::Kernel)
    }

    /// The status of `fd`, a sync file of this kind.
    pub(crate) fn status(self, fd: BorrowedFd<'_>) -> FenceStatus {
        match self {
            Kind::Simulated => simulated_status(fd),
            // It answered once; if it stops answering, it cannot say more.
            Kind::Kernel => kernel_status(fd).unwrap_or(Some(Some(Errno::EIO))),
        }
    }
}

/// A sync file this device exported: the fence and the device's end.
#[derive(Debug)]
pub(crate) struct Exported {
    fence: Arc<Fence>,
    device_end: DeviceFd,
    /// The identity of the client's end (the sync file itself).
    identity: Inode,
    published: AtomicBool,
}

impl Exported {
    /// A new sync file for `fence`: the client's end, and the device's
    /// record of it.
    pub(crate) fn create(fence: Arc<Fence>) -> Result<(OwnedFd, Arc<Exported>), Errno> {
        use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
        let (sync_file, device_end) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(errno_of)?;
        let mut random = [0u8; 16];
        getrandom(&mut random)?;
        let mut name = NAME_PREFIX[1..].to_vec();
        name.extend(
            random
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
                .bytes(),
        );
        let address = SocketAddrUnix::new_abstract_name(&name).map_err(errno_of)?;
        rustix::net::bind(&sync_file, &address).map_err(errno_of)?;
        fill_send_buffer(sync_file.as_fd()).map_err(errno_of)?;
        if let Err(error) = refuse_passed_descriptors(device_end.as_fd()) {
            tracing::debug!(%error, "the host kernel cannot refuse descriptors on a sync file");
        }
        let identity = inode_of(sync_file.as_fd())?;
        let device_end =
            DeviceFd::keep(device_end).map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
        let exported = Arc::new(Exported {
            fence,
            device_end,
            identity,
            published: AtomicBool::new(false),
        });
        exported.publish_if_signalled();
        Ok((sync_file, exported))
    }

    /// The fence.
    pub(crate) fn fence(&self) -> &Arc<Fence> {
        &self.fence
    }

    /// The identity of the sync file (the client's end).
    pub(crate) fn identity(&self) -> Inode {
        self.identity
    }

    /// The device's end, if the process did not close it behind the
    /// device's back.
    pub(crate) fn device_end(&self) -> Option<BorrowedFd<'_>> {
        match self.device_end.get() {
            Ok(fd) => Some(fd),
            Err(gone) => {
                tracing::warn!(%gone, "a sync file's device end was closed by the process");
                None
            }
        }
    }

    /// Whether the fence's status has been queued on the file.
    pub(crate) fn published(&self) -> bool {
        self.published.load(Ordering::Acquire)
    }

    /// Queues the status on the file if the fence has signalled (once):
    /// from then on the file polls readable. Returns whether it is
    /// published.
    pub(crate) fn publish_if_signalled(&self) -> bool {
        if self.published() {
            return true;
        }
        let Some(status) = self.fence.status() else {
            return false;
        };
        self.queue_status(status);
        true
    }

    /// Queues `status` on the file and shuts the device's end for writing
    /// (once).
    fn queue_status(&self, status: Option<Errno>) {
        if self.published.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut record = [0u8; RECORD_BYTES];
        record[..8].copy_from_slice(&RECORD_MAGIC);
        record[8..].copy_from_slice(&status_word(status).to_le_bytes());
        if let Some(end) = self.device_end() {
            let flags = rustix::net::SendFlags::NOSIGNAL | rustix::net::SendFlags::DONTWAIT;
            // The file's receive buffer holds nothing else: the record
            // fits. If every copy of the file was closed, nobody reads it.
            if let Err(error) = rustix::net::send(end, &record, flags) {
                if error != rustix::io::Errno::PIPE {
                    tracing::warn!(%error, "cannot queue a sync file's status");
                }
            }
            let _ = rustix::net::shutdown(end, rustix::net::Shutdown::Write);
        }
    }

    /// Whether every copy of the file is closed (the device's end hung up).
    pub(crate) fn closed(&self) -> bool {
        use rustix::event::{poll, PollFd, PollFlags};
        let Some(end) = self.device_end() else {
            return true;
        };
        // Only hangup and error, which are always reported: the end
        // always holds the ballast, so it is always readable.
        let mut fds = [PollFd::new(&end, PollFlags::empty())];
        let zero = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        match poll(&mut fds, Some(&zero)) {
            Ok(0) => false,
            Ok(_) => fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR),
            Err(_) => false,
        }
    }
}

/// The sync thread queues the status once the fence signals, and the
/// device forgets the file once its end hangs up.
impl Watcher for Exported {
    fn descriptor(&self) -> Option<BorrowedFd<'_>> {
        self.device_end()
    }

    fn events(&self) -> EventFlags {
        // Hangup and error only: the end always holds the ballast.
        EventFlags::empty()
    }

    fn settle(&self) -> bool {
        self.publish_if_signalled()
    }

    fn on_ready(&self, _: EventFlags, _: &dyn Fn(BorrowedFd<'_>)) -> bool {
        // Every copy of the file is closed: nobody can see its status any
        // more, signalled or not.
        self.closed()
    }

    fn abandoned(&self) -> bool {
        false
    }
}

/// Another device's sync file imported into a syncobj: `fence` signals
/// with its status once it polls readable.
#[derive(Debug)]
struct ForeignWait {
    /// The device's copy of the file, closed before the fence signals.
    sync_file: std::sync::Mutex<Option<DeviceFd>>,
    kind: Kind,
    fence: std::sync::Weak<Fence>,
}

impl ForeignWait {
    fn sync_file(&self) -> std::sync::MutexGuard<'_, Option<DeviceFd>> {
        self.sync_file.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Watcher for ForeignWait {
    fn descriptor(&self) -> Option<BorrowedFd<'_>> {
        let raw = self.sync_file().as_ref()?.get().ok()?.as_raw_fd();
        // SAFETY: the descriptor stays open until `on_ready` closes it,
        // which only the sync thread calls, and never while it uses a
        // descriptor it was given here.
        Some(unsafe { BorrowedFd::borrow_raw(raw) })
    }

    fn events(&self) -> EventFlags {
        EventFlags::IN | EventFlags::ONESHOT
    }

    fn settle(&self) -> bool {
        true
    }

    fn on_ready(&self, flags: EventFlags, deregister: &dyn Fn(BorrowedFd<'_>)) -> bool {
        let mut sync_file = self.sync_file();
        let status = match sync_file.as_ref().map(DeviceFd::get) {
            Some(Ok(fd)) => self.kind.status(fd),
            _ => Some(Some(Errno::EBADF)),
        };
        let status = status.or_else(|| {
            if flags.intersects(EventFlags::HUP | EventFlags::ERR) {
                // Hung up without a status: its device is gone.
                Some(Some(Errno::ENODEV))
            } else {
                // Readable without a status: not a sync file behaving as
                // one (waiting again would wake the thread forever).
                flags.contains(EventFlags::IN).then_some(Some(Errno::EIO))
            }
        });
        match status {
            Some(status) => {
                // Closed first: once the fence signals, the device holds no
                // copy of another device's file.
                if let Some(Ok(fd)) = sync_file.as_ref().map(DeviceFd::get) {
                    deregister(fd);
                }
                drop(sync_file.take());
                drop(sync_file);
                if let Some(fence) = self.fence.upgrade() {
                    fence.signal(status);
                }
                true
            }
            // Not signalled after all: wait again.
            None => false,
        }
    }

    fn abandoned(&self) -> bool {
        self.fence.strong_count() == 0
    }
}

/// Has `events`' sync thread look after the exported sync file `file`.
pub(crate) fn look_after_exported(events: &SyncEvents, file: &Arc<Exported>) -> Result<(), Errno> {
    events.look_after(Arc::clone(file) as Arc<dyn Watcher>)
}

/// Has `events`' sync thread signal `fence` with the status of
/// `sync_file`, another device's sync file of `kind`, once it signals.
pub(crate) fn wait_for_foreign(
    events: &SyncEvents,
    sync_file: OwnedFd,
    kind: Kind,
    fence: &Arc<Fence>,
) -> Result<(), Errno> {
    let sync_file =
        DeviceFd::keep(sync_file).map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
    events.look_after(Arc::new(ForeignWait {
        sync_file: std::sync::Mutex::new(Some(sync_file)),
        kind,
        fence: Arc::downgrade(fence),
    }))
}

impl Drop for Exported {
    /// The device forgets a sync file once every copy is closed, or when
    /// its sync thread ends; a status still pending then is written as
    /// `ENODEV`, so that no copy left anywhere waits forever (Linux
    /// signals the fences of a removed device with an error too).
    fn drop(&mut self) {
        let status = self.fence.status().unwrap_or(Some(Errno::ENODEV));
        self.queue_status(status);
    }
}

fn getrandom(buffer: &mut [u8]) -> Result<(), Errno> {
    let mut filled = 0;
    while filled < buffer.len() {
        match rustix::rand::getrandom(&mut buffer[filled..], rustix::rand::GetRandomFlags::empty())
        {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(errno_of(e)),
        }
    }
    Ok(())
}
