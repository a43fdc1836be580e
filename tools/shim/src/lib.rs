//! `libagx_shim.so`: the simulated GPU as an asahi device on Linux.
//!
//! Preloaded into an unmodified client (`LD_PRELOAD=libagx_shim.so`), this
//! library interposes the libc calls through which a DRM client finds and
//! reaches a device, in the manner of Mesa's drm-shim
//! (`Documentation/shim.md`). The device is, by default, the device
//! process `agx-simd` that every client shares (`remote.rs`, over
//! `agx_simd`), or (`AGX_SHIM_MODE=in-process`) a simulated AGX system
//! built inside the client process.
//!
//! - enumeration ([`tree`]): `/dev/dri` lists `card0`, `renderD128` and
//!   `by-path`, and the platform device's sysfs is there, as a real
//!   directory tree the faked paths are redirected into; the nodes `stat`
//!   as character devices 226:0 and 226:128; `/proc/self/fd/N` of a DRM
//!   file reads back as its node, and `/proc/self/fdinfo/N` shows its DRM
//!   keys;
//! - `open` of a node opens a DRM file on the simulated device through
//!   that node (the card node is a primary node: DRM master and
//!   authentication). In the device-process mode the descriptor is a
//!   socket connected to the device's socket for the node; in-process, it
//!   is the read end of a private pipe whose write end the device keeps,
//!   recognised by the pipe's inode however the client duplicates it. In
//!   both the file closes when its last descriptor does and behaves as a
//!   DRM file with no events: `read` blocks (or fails with `EAGAIN` when
//!   non-blocking; a signal interrupts it as Linux's would), `poll` and
//!   `epoll` report nothing, `write` fails with `EINVAL`;
//! - `ioctl` on such a descriptor goes to the kmd's ioctl entry point, with
//!   errors returned through `errno`;
//! - `mmap` at a GEM mmap offset maps the object's pages.
//!
//! Everything else passes through to the real libc (found with
//! `dlsym(RTLD_NEXT)`). Rust clients must route their syscalls through libc
//! for the interposition to see them (rustix's `use-libc` feature).
#![allow(unsafe_code)]

pub mod interpose;
mod remote;
pub mod tree;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use agx_kmd::File;
use agx_sim::{System, SystemConfig};

use crate::tree::Node;

type Inode = (u64, u64);

struct Shim {
    system: System,
    /// The process the system was built in: its threads exist only there.
    owner_pid: u32,
    /// DRM files by the inode of their pipe.
    files: Mutex<HashMap<Inode, OpenFile>>,
    /// Which descriptors are DRM files.
    fds: Mutex<HashMap<i32, Inode>>,
}

/// A DRM file the client has open.
struct OpenFile {
    file: Arc<File>,
    /// The node it was opened through.
    node: &'static Node,
    /// How many of the client's descriptors refer to it.
    descriptors: usize,
    /// The access mode it was opened with (`O_RDWR`, usually): what
    /// `fcntl(F_GETFL)` reports, not the pipe end's `O_RDONLY`.
    access_mode: i32,
    /// The write end of its pipe, held (never written) so that the read
    /// end the client has never sees end-of-file.
    _writer: agx_kmd::mem::backing::DeviceFd,
}

/// Where the DRM files live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// In the shared device process (`agx-simd`): the default.
    DeviceProcess,
    /// In a simulated system built inside this process.
    InProcess,
}

/// The mode `AGX_SHIM_MODE` asks for (`device`, the default, or
/// `in-process`); `None` (logged once) for anything else, which makes
/// every open of a node fail with `ENODEV`.
pub(crate) fn mode() -> Option<Mode> {
    static MODE: OnceLock<Option<Mode>> = OnceLock::new();
    *MODE.get_or_init(|| match std::env::var("AGX_SHIM_MODE").as_deref() {
        Err(_) | Ok("device") => Some(Mode::DeviceProcess),
        Ok("in-process") => Some(Mode::InProcess),
        Ok(other) => {
            interpose::log(&format!(
                "agx-shim: AGX_SHIM_MODE={other} is neither `device` nor `in-process`; opening \
                 the nodes fails with ENODEV\n"
            ));
            None
        }
    })
}

/// The device-process mode's state, if that is the mode.
pub(crate) fn remote() -> Option<&'static remote::Remote> {
    (mode() == Some(Mode::DeviceProcess)).then(remote::remote)
}

/// The node DRM file `fd` was opened through, if it is one (in either
/// mode).
pub(crate) fn node_of(fd: i32) -> Option<&'static Node> {
    match remote() {
        Some(remote) => remote.node_of(fd),
        None => shim_if_ready()?.node_of(fd),
    }
}

/// The access mode DRM file `fd` was opened with, if it is one (`wait`:
/// as [`lock_map`]).
pub(crate) fn access_mode_of(fd: i32, wait: bool) -> Option<i32> {
    match remote() {
        Some(remote) => remote.access_mode_of(fd, wait),
        None => shim_if_ready()?.access_mode_of(fd, wait),
    }
}

/// Records that `fd` was closed.
pub(crate) fn forget_fd(fd: i32) {
    match remote() {
        Some(remote) => remote.forget(fd),
        None => {
            if let Some(shim) = shim_if_ready() {
                shim.remove_fd(fd);
            }
        }
    }
}

/// Records that `new` (if not negative) is a duplicate of `old`.
pub(crate) fn track_dup(old: i32, new: i32) {
    if new < 0 {
        return;
    }
    match remote() {
        Some(remote) => remote.duplicated(old, new),
        None => {
            let Some(shim) = shim_if_ready() else { return };
            let inode = lock_map(&shim.fds, true).and_then(|fds| fds.get(&old).copied());
            if let Some(inode) = inode {
                shim.add_fd(new, inode);
            }
        }
    }
}

/// The shim state, or (once the device failed to probe) nothing.
static SHIM: OnceLock<Option<Shim>> = OnceLock::new();

/// The shim state, if a DRM file was ever opened. Interposed calls other
/// than `open` use this, so they never build the system themselves (which
/// would re-enter them while it is being built).
fn shim_if_ready() -> Option<&'static Shim> {
    SHIM.get().and_then(Option::as_ref)
}

/// The shim state, building the simulated system on first use; `None`
/// if the device could not be built (a configuration variable that does
/// not parse, RAM that cannot be had, a capture that cannot start): that
/// is logged once, and every open of a node then fails with `ENODEV`, as
/// the node of a driver that failed to probe does.
fn shim() -> Option<&'static Shim> {
    SHIM.get_or_init(|| {
        // The device's kernel log. A client that installed its own
        // tracing subscriber keeps it.
        match agx_sim::log::install(&agx_sim::log::LogConfig::from_env()) {
            Ok(()) | Err(agx_sim::log::LogError::AlreadyInstalled) => {}
            Err(e) => interpose::log(&format!("agx-shim: kernel log: {e}\n")),
        }
        place_device_descriptors_high();
        let system = SystemConfig::default()
            .with_env()
            .map_err(|e| e.to_string())
            .and_then(|config| System::new(config).map_err(|e| e.to_string()));
        let system = match system {
            Ok(system) => system,
            Err(e) => {
                interpose::log(&format!(
                    "agx-shim: the simulated GPU did not probe: {e}; opening its nodes fails \
                     with ENODEV\n"
                ));
                return None;
            }
        };
        register_fork_handler();
        Some(Shim {
            system,
            owner_pid: std::process::id(),
            files: Mutex::new(HashMap::new()),
            fds: Mutex::new(HashMap::new()),
        })
    })
    .as_ref()
}

/// Set in a child by the `pthread_atfork` handler the shim registers
/// when it builds the device, so the check costs no system call on the
/// ioctl path.
static IN_FORKED_CHILD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Registers the handler that marks a forked child (once).
pub(crate) fn register_fork_handler() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic
        // (async-signal-safe, as a fork handler in a multithreaded process
        // must be).
        if unsafe { libc::pthread_atfork(None, None, Some(mark_forked_child)) } != 0 {
            interpose::log("agx-shim: cannot register the fork handler\n");
        }
    });
}

extern "C" fn mark_forked_child() {
    IN_FORKED_CHILD.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether this process was forked from the one the device was built in
/// (silently: for calls that only answer differently there).
fn in_forked_child() -> bool {
    IN_FORKED_CHILD.load(std::sync::atomic::Ordering::Relaxed)
}

/// In a process forked from the one the device was built in, the failure
/// every use of the device gets (`ENODEV`, as a device that went away
/// answers), logged once: the device's threads were not forked, so
/// nothing submitted here would ever run. Returns whether this is such
/// a process (with `errno` set).
fn forked() -> bool {
    static LOGGED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    if !in_forked_child() {
        return false;
    }
    let Some(shim) = shim_if_ready() else {
        return false;
    };
    let pid = std::process::id();
    if LOGGED.swap(pid, std::sync::atomic::Ordering::Relaxed) != pid {
        interpose::log(&format!(
            "agx-shim: process {pid} was forked from process {} after it opened the simulated \
             GPU; in the in-process mode the device stays in that process, so this one gets \
             ENODEV (sharing the device across fork needs the device-process mode: see \
             Documentation/shim.md)\n",
            shim.owner_pid
        ));
    }
    interpose::fail(libc::ENODEV, true)
}

/// Keeps the device's own descriptors (an exportable object's memfd, a
/// pending sync file's, a capture file) out of the client's range: the
/// descriptor limit is raised to its hard maximum and the device's
/// descriptors go above the limit the client started with. A client
/// therefore keeps every number it had, and one that closes descriptors it
/// did not open (a close-all loop, `close_range`) makes the device report
/// `EBADF` where it needs one, never touch another file (the device
/// re-validates each before use).
fn place_device_descriptors_high() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    let client_limit = limit.rlim_cur;
    let raised = libc::rlimit {
        rlim_cur: limit.rlim_max,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit with a valid pointer; raising the soft limit up
    // to the hard one needs no privilege.
    let floor = if limit.rlim_max > client_limit
        && unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0
    {
        client_limit
    } else {
        // No room above the client's limit: use its upper half.
        client_limit / 2
    };
    agx_kmd::mem::backing::set_descriptor_floor(i32::try_from(floor).unwrap_or(i32::MAX));
}

/// One of the shim's maps, locked; `None` if it is busy and the caller
/// must not wait: with `wait` false (a call allowed in signal handlers),
/// and always in a forked child (a thread that held the lock at `fork`
/// does not exist there, so waiting could hang forever; the child then
/// treats the descriptor as not the device's).
fn lock_map<T>(map: &Mutex<T>, wait: bool) -> Option<std::sync::MutexGuard<'_, T>> {
    if wait && !in_forked_child() {
        Some(map.lock().unwrap_or_else(|e| e.into_inner()))
    } else {
        match map.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}

impl Shim {
    /// `look` at the DRM file `fd` refers to, if it is one. With `wait`
    /// false, `None` also when a lock is busy ([`lock_map`]).
    fn with_open<R>(&self, fd: i32, wait: bool, look: impl FnOnce(&OpenFile) -> R) -> Option<R> {
        let inode = *lock_map(&self.fds, wait)?.get(&fd)?;
        lock_map(&self.files, wait)?.get(&inode).map(look)
    }

    fn file_of(&self, fd: i32) -> Option<Arc<File>> {
        self.with_open(fd, true, |open| Arc::clone(&open.file))
    }

    /// The node the DRM file `fd` was opened through, if it is one.
    fn node_of(&self, fd: i32) -> Option<&'static Node> {
        self.with_open(fd, true, |open| open.node)
    }

    fn add_fd(&self, fd: i32, inode: Inode) {
        let Some(mut fds) = lock_map(&self.fds, true) else {
            return;
        };
        fds.insert(fd, inode);
        drop(fds);
        if let Some(entry) = lock_map(&self.files, true)
            .as_mut()
            .and_then(|files| files.get_mut(&inode))
        {
            entry.descriptors += 1;
        }
    }

    fn remove_fd(&self, fd: i32) {
        let Some(inode) = lock_map(&self.fds, true).and_then(|mut fds| fds.remove(&fd)) else {
            return;
        };
        let closed = {
            let Some(mut files) = lock_map(&self.files, true) else {
                return;
            };
            match files.get_mut(&inode) {
                Some(entry) if entry.descriptors > 1 => {
                    entry.descriptors -= 1;
                    None
                }
                Some(_) => files.remove(&inode),
                None => None,
            }
        };
        // Closing the pipe's write end re-enters `close`: outside the lock.
        if !in_forked_child() {
            drop(closed);
        } else {
            // In a forked child the device's locks may be held by threads
            // that were not forked: its state is never touched here.
            std::mem::forget(closed);
        }
    }

    /// An ioctl on `fd` if it is a file the device handed out that is no
    /// DRM file: `SYNC_IOC_FILE_INFO` on a sync file, the dma-buf ioctls
    /// on a PRIME buffer (`None` otherwise, so the real ioctl answers):
    /// the result the caller gets.
    fn exported_file_ioctl(
        &self,
        fd: i32,
        request: u64,
        arg: *mut std::ffi::c_void,
    ) -> Option<i32> {
        if in_forked_child() {
            return None;
        }
        let file = agx_kmd::uaccess::dup_user_fd(fd)?;
        let device = self.system.device();
        match device.exported_file_ioctl(std::os::fd::AsFd::as_fd(&file), request, arg as u64) {
            Ok(result) => Some(result),
            // Not one of the device's files: let the real kernel answer.
            Err(agx_kmd::Errno::ENOTTY) => None,
            Err(errno) => Some(interpose::fail(errno.0, -1)),
        }
    }

    /// The access mode the DRM file `fd` was opened with, if it is one
    /// (`wait`: as in [`Shim::with_open`]).
    fn access_mode_of(&self, fd: i32, wait: bool) -> Option<i32> {
        self.with_open(fd, wait, |open| open.access_mode)
    }

    fn is_ours(&self, fd: i32) -> bool {
        lock_map(&self.fds, true).is_some_and(|fds| fds.contains_key(&fd))
    }
}
