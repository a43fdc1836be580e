//! The interposed libc functions.
//!
//! Each function first decides whether the call concerns the simulated
//! device (its path or one of its descriptors); if not, it calls the real
//! libc function found with `dlsym(RTLD_NEXT)`. The variadic `open`,
//! `openat`, `fcntl` and `ioctl` are declared with their optional argument
//! as a fixed one: on the x86-64 and AArch64 Linux calling conventions a
//! variadic argument travels in the same register, and an absent one is
//! simply never used.

use std::ffi::{c_char, c_int, c_ulong, c_void, CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, OnceLock};

use crate::tree::{self, Node};
use crate::{shim, shim_if_ready, track_dup, Inode};

/// Looks up the next definition of a libc function.
fn next_symbol(name: &'static CStr, cell: &OnceLock<usize>) -> usize {
    *cell.get_or_init(|| {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated symbol name.
        unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
    })
}

macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static CELL: OnceLock<usize> = OnceLock::new();
        let address = next_symbol($name, &CELL);
        if address == 0 {
            None
        } else {
            // SAFETY: `address` is the libc definition of the symbol named
            // `$name`, whose C prototype `$ty` restates.
            Some(unsafe { std::mem::transmute::<usize, $ty>(address) })
        }
    }};
}

/// Writes a message to stderr without going through Rust's stdio, nor
/// through the interposed `write` (which may be what is logging).
pub(crate) fn log(message: &str) {
    let Some(real_write) = real!(
        c"write",
        unsafe extern "C" fn(c_int, *const c_void, libc::size_t) -> libc::ssize_t
    ) else {
        return;
    };
    // SAFETY: writing a valid buffer of the given length to fd 2.
    unsafe {
        real_write(2, message.as_ptr().cast(), message.len());
    }
}

fn set_errno(errno: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = errno };
}

/// This thread's errno.
pub(crate) fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

pub(crate) fn fail<T>(errno: i32, value: T) -> T {
    set_errno(errno);
    value
}

/// Runs the body of the interposed function `name`. A panic must not
/// cross into the C caller: unwinding out of an `extern "C"` function
/// aborts the process, which a client (and its test harness) would see as
/// a crash of its own. A panic is a bug of ours: it is logged, naming the
/// function, and the call fails with `EIO` and `failed` (-1, `MAP_FAILED`
/// or a null pointer), as a call the device could not complete.
fn entry_point<R>(name: &str, failed: R, body: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("a panic");
            log(&format!(
                "agx-shim: internal error in {name}: {what}; the call fails with EIO\n"
            ));
            // The payload may own memory: released on this side.
            drop(payload);
            fail(libc::EIO, failed)
        }
    }
}

/// The path as a string, if it is one.
///
/// # Safety
/// `path` must be null or a NUL-terminated string.
unsafe fn path_of<'a>(path: *const c_char) -> Option<&'a str> {
    if path.is_null() {
        return None;
    }
    // SAFETY: the caller passes a NUL-terminated C string.
    unsafe { CStr::from_ptr(path) }.to_str().ok()
}

fn inode_of(fd: &OwnedFd) -> Option<Inode> {
    real_identity(fd.as_raw_fd())
}

/// The (device, inode) of the file descriptor `fd` refers to, from the
/// real `fstat` (the interposed one answers for DRM files).
pub(crate) fn real_identity(fd: c_int) -> Option<Inode> {
    // SAFETY: a zeroed stat is a valid out-buffer for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let real_fstat = real!(
        c"fstat",
        unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int
    )?;
    // SAFETY: an out-buffer of the right type; fstat checks the number.
    if unsafe { real_fstat(fd, &mut st) } != 0 {
        return None;
    }
    Some((st.st_dev, st.st_ino))
}

/// Opens a DRM file on the simulated device through `node`, in the
/// device process or (in the in-process mode) in this one.
fn open_node(node: &'static Node, flags: c_int) -> c_int {
    if !may_open(node, flags) {
        return fail(libc::EACCES, -1);
    }
    match crate::mode() {
        Some(crate::Mode::DeviceProcess) => crate::remote::remote().open(node, flags),
        Some(crate::Mode::InProcess) => open_node_in_process(node, flags),
        None => fail(libc::ENODEV, -1),
    }
}

/// Opens a DRM file on the device in this process: the client's
/// descriptor is the read end of a new pipe, the device keeps the write
/// end.
fn open_node_in_process(node: &'static Node, flags: c_int) -> c_int {
    if crate::forked() {
        return -1;
    }
    // drm_open_helper: a DRM node cannot be opened exclusively.
    if flags & libc::O_EXCL != 0 {
        return fail(libc::EBUSY, -1);
    }
    // First, so that the device's descriptor floor is set before it
    // keeps the pipe's write end.
    let Some(shim) = shim() else {
        return fail(libc::ENODEV, -1);
    };
    let mut ends: [c_int; 2] = [0; 2];
    // SAFETY: pipe2 with a valid two-element out-array.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return -1;
    }
    // SAFETY: both ends were just created and are owned here.
    let (reader, writer) =
        unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    let client_flags = (flags & libc::O_NONBLOCK) | libc::O_RDONLY;
    // SAFETY: fcntl on a descriptor owned here.
    if unsafe { libc::fcntl(reader.as_raw_fd(), libc::F_SETFL, client_flags) } != 0 {
        return -1;
    }
    if flags & libc::O_CLOEXEC == 0 {
        // SAFETY: as above.
        if unsafe { libc::fcntl(reader.as_raw_fd(), libc::F_SETFD, 0) } != 0 {
            return -1;
        }
    }
    let Some(inode) = inode_of(&reader) else {
        return fail(libc::EIO, -1);
    };
    let writer = match agx_kmd::mem::backing::DeviceFd::keep(writer) {
        Ok(kept) => kept,
        Err(e) => return fail(e.raw_os_error().unwrap_or(libc::EMFILE), -1),
    };
    let file = Arc::new(shim.system.open_node(node.kind));
    let Some(mut files) = crate::lock_map(&shim.files, true) else {
        return fail(libc::ENODEV, -1);
    };
    files.insert(
        inode,
        crate::OpenFile {
            file,
            descriptors: 0,
            node,
            access_mode: flags & libc::O_ACCMODE,
            _writer: writer,
        },
    );
    drop(files);
    let raw = std::os::fd::IntoRawFd::into_raw_fd(reader);
    shim.add_fd(raw, inode);
    raw
}

macro_rules! open_fn {
    ($name:ident, $symbol:literal, ($($arg:ident: $ty:ty),*), $path:ident, $flags:ident) => {
        open_fn!($name, $symbol, ($($arg: $ty),*), $path, $flags, libc::AT_FDCWD);
    };
    ($name:ident, $symbol:literal, ($($arg:ident: $ty:ty),*), $path:ident, $flags:ident, $dirfd:expr) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            entry_point(stringify!($name), -1, move || {
                // SAFETY: the caller passes a C string, as the function requires.
                let named = unsafe { name_at($dirfd, $path, 0) };
                if let Some(fd) = open_named(&named, $flags) {
                    return fd;
                }
                let $path = real_path(&named, $path);
                match real!($symbol, unsafe extern "C" fn($($ty),*) -> c_int) {
                    // SAFETY: forwarding the caller's arguments (the path
                    // redirected).
                    Some(f) => unsafe { f($($arg),*) },
                    None => fail(libc::ENOSYS, -1),
                }
            })
        }
    };
}

open_fn!(open, c"open", (path: *const c_char, flags: c_int, mode: libc::mode_t), path, flags);
open_fn!(open64, c"open64", (path: *const c_char, flags: c_int, mode: libc::mode_t), path, flags);
open_fn!(__open_2, c"__open_2", (path: *const c_char, flags: c_int), path, flags);
open_fn!(__open64_2, c"__open64_2", (path: *const c_char, flags: c_int), path, flags);
open_fn!(openat, c"openat", (dirfd: c_int, path: *const c_char, flags: c_int, mode: libc::mode_t), path, flags, dirfd);
open_fn!(openat64, c"openat64", (dirfd: c_int, path: *const c_char, flags: c_int, mode: libc::mode_t), path, flags, dirfd);
open_fn!(__openat_2, c"__openat_2", (dirfd: c_int, path: *const c_char, flags: c_int), path, flags, dirfd);
open_fn!(__openat64_2, c"__openat64_2", (dirfd: c_int, path: *const c_char, flags: c_int), path, flags, dirfd);

/// # Safety
/// As `close(2)`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    entry_point("close", -1, move || {
        // A DRM file of the device process: if this is its last descriptor
        // anywhere, the device releases it before `close` returns, as Linux.
        // (The check's own system calls leave errno as the caller had it.)
        let saved = errno();
        let remote_file = crate::remote().and_then(|remote| Some((remote, remote.identity(fd)?)));
        crate::forget_fd(fd);
        set_errno(saved);
        let result = match real!(c"close", unsafe extern "C" fn(c_int) -> c_int) {
            // SAFETY: forwarding the caller's argument.
            Some(f) => unsafe { f(fd) },
            None => fail(libc::ENOSYS, -1),
        };
        if let Some((remote, identity)) = remote_file {
            let after_close = errno();
            remote.closed(identity);
            set_errno(after_close);
        }
        result
    })
}

/// # Safety
/// As `shutdown(2)`.
#[no_mangle]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    entry_point("shutdown", -1, move || {
        // A DRM file or a sync file is no socket on Linux; here shutting its
        // socket would close the file for every process that holds it.
        let drm_file = crate::remote().is_some() && crate::node_of(fd).is_some();
        if drm_file
            || agx_kmd::uaccess::dup_user_fd(fd).is_some_and(|file| {
                agx_kmd::sync_file::is_simulated(std::os::fd::AsFd::as_fd(&file))
            })
        {
            return fail(libc::ENOTSOCK, -1);
        }
        match real!(c"shutdown", unsafe extern "C" fn(c_int, c_int) -> c_int) {
            // SAFETY: forwarding the caller's arguments.
            Some(f) => unsafe { f(fd, how) },
            None => fail(libc::ENOSYS, -1),
        }
    })
}

/// # Safety
/// As `dup(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    entry_point("dup", -1, move || {
        let Some(f) = real!(c"dup", unsafe extern "C" fn(c_int) -> c_int) else {
            return fail(libc::ENOSYS, -1);
        };
        // SAFETY: forwarding the caller's argument.
        let new = unsafe { f(fd) };
        track_dup(fd, new);
        new
    })
}

/// # Safety
/// As `dup2(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    entry_point("dup2", -1, move || {
        let Some(f) = real!(c"dup2", unsafe extern "C" fn(c_int, c_int) -> c_int) else {
            return fail(libc::ENOSYS, -1);
        };
        // SAFETY: forwarding the caller's arguments.
        let result = unsafe { f(old, new) };
        if result >= 0 && old != new {
            crate::forget_fd(new);
            track_dup(old, new);
        }
        result
    })
}

/// # Safety
/// As `dup3(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    entry_point("dup3", -1, move || {
        let Some(f) = real!(c"dup3", unsafe extern "C" fn(c_int, c_int, c_int) -> c_int) else {
            return fail(libc::ENOSYS, -1);
        };
        // SAFETY: forwarding the caller's arguments.
        let result = unsafe { f(old, new, flags) };
        if result >= 0 {
            crate::forget_fd(new);
            track_dup(old, new);
        }
        result
    })
}

type FcntlFn = unsafe extern "C" fn(c_int, c_int, c_ulong) -> c_int;

fn fcntl_common(
    name: &'static str,
    f: Option<FcntlFn>,
    fd: c_int,
    cmd: c_int,
    arg: c_ulong,
) -> c_int {
    let Some(f) = f else {
        log(&format!("agx-shim: no real {name}\n"));
        return fail(libc::ENOSYS, -1);
    };
    // SAFETY: forwarding the caller's arguments.
    let result = unsafe { f(fd, cmd, arg) };
    if cmd == libc::F_GETFL && result >= 0 {
        if let Some(mode) = crate::access_mode_of(fd, true) {
            return (result & !libc::O_ACCMODE) | mode;
        }
    }
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        track_dup(fd, result);
    }
    result
}

/// # Safety
/// As `fcntl(2)`.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    entry_point("fcntl", -1, move || {
        fcntl_common("fcntl", real!(c"fcntl", FcntlFn), fd, cmd, arg)
    })
}

/// # Safety
/// As `fcntl64(2)`.
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    entry_point("fcntl64", -1, move || {
        fcntl_common("fcntl64", real!(c"fcntl64", FcntlFn), fd, cmd, arg)
    })
}

/// # Safety
/// As `ioctl(2)`.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    entry_point("ioctl", -1, move || {
        if let Some(remote) = crate::remote() {
            if let Some(result) = remote.ioctl(fd, request, arg as u64) {
                return result;
            }
            if is_exported_file_ioctl(request) {
                return exported_file_ioctl_remote(remote, fd, request, arg);
            }
        } else if let Some(shim) = shim_if_ready() {
            if let Some(file) = shim.file_of(fd) {
                if crate::forked() {
                    return -1;
                }
                return match file.ioctl(request, arg as u64) {
                    Ok(result) => result,
                    Err(errno) => fail(errno.0, -1),
                };
            }
            // A sync file this device exported (its status: how fence
            // errors reach userspace) or a PRIME buffer (its fences).
            if is_exported_file_ioctl(request) {
                if let Some(result) = shim.exported_file_ioctl(fd, request, arg) {
                    return result;
                }
            }
        }
        match real!(
            c"ioctl",
            unsafe extern "C" fn(c_int, c_ulong, *mut c_void) -> c_int
        ) {
            // SAFETY: forwarding the caller's arguments.
            Some(f) => unsafe { f(fd, request, arg) },
            None => fail(libc::ENOSYS, -1),
        }
    })
}

/// Whether `request` is an ioctl the device answers on the files it
/// hands out that are no DRM files: `SYNC_IOC_FILE_INFO` on a sync file,
/// the dma-buf ioctls on a PRIME buffer.
fn is_exported_file_ioctl(request: c_ulong) -> bool {
    request == c_ulong::from(agx_uapi::drm::SYNC_IOC_FILE_INFO)
        || agx_kmd::dma_buf::is_dma_buf_ioctl(request)
}

/// An ioctl on a sync file or a PRIME buffer in the device-process mode:
/// the real ioctl, or, where the host kernel does not know it (a
/// simulated sync file is a socket, a PRIME buffer a memfd), the
/// device's answer.
fn exported_file_ioctl_remote(
    remote: &crate::remote::Remote,
    fd: c_int,
    request: c_ulong,
    arg: *mut c_void,
) -> c_int {
    let Some(real_ioctl) = real!(
        c"ioctl",
        unsafe extern "C" fn(c_int, c_ulong, *mut c_void) -> c_int
    ) else {
        return fail(libc::ENOSYS, -1);
    };
    // SAFETY: forwarding the caller's arguments.
    let result = unsafe { real_ioctl(fd, request, arg) };
    // SAFETY: reading this thread's errno.
    if result == 0 || unsafe { *libc::__errno_location() } != libc::ENOTTY {
        return result;
    }
    // A sync file is known without asking the device.
    if request == c_ulong::from(agx_uapi::drm::SYNC_IOC_FILE_INFO)
        && !agx_kmd::uaccess::dup_user_fd(fd)
            .is_some_and(|file| agx_kmd::sync_file::is_simulated(std::os::fd::AsFd::as_fd(&file)))
    {
        return fail(libc::ENOTTY, -1);
    }
    remote
        .exported_file_ioctl(fd, request, arg as u64)
        .unwrap_or_else(|| fail(libc::ENOTTY, -1))
}

/// A failed write on a DRM file: its pipe end refuses writes with `EBADF`
/// (or `ESPIPE` for the positioned ones), where Linux's DRM file, which
/// has no `write` operation, answers `EINVAL`. The check costs nothing on
/// the client's successful writes.
fn write_errno(fd: c_int, result: libc::ssize_t) -> libc::ssize_t {
    if result < 0 {
        // SAFETY: reading this thread's errno.
        let errno = unsafe { *libc::__errno_location() };
        // Only for files open for writing (an O_RDONLY DRM file's write is
        // EBADF in Linux too), and without waiting for a lock: `write` may
        // be called from a signal handler.
        if (errno == libc::EBADF || errno == libc::ESPIPE)
            && shim_if_ready()
                .and_then(|s| s.access_mode_of(fd, false))
                .is_some_and(|mode| mode != libc::O_RDONLY)
        {
            return fail(libc::EINVAL, -1);
        }
    }
    result
}

macro_rules! write_fn {
    ($name:ident, $symbol:literal, ($($arg:ident: $ty:ty),*)) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, $($arg: $ty),*) -> libc::ssize_t {
            entry_point(stringify!($name), -1, move || {
                let Some(f) = real!($symbol, unsafe extern "C" fn(c_int, $($ty),*) -> libc::ssize_t)
                else {
                    return fail(libc::ENOSYS, -1);
                };
                // In the device-process mode the bytes would reach the device:
                // refused first.
                if let Some(errno) = crate::remote().and_then(|r| r.write_refusal(fd)) {
                    return fail(errno, -1);
                }
                // SAFETY: forwarding the caller's arguments.
                let result = unsafe { f(fd, $($arg),*) };
                write_errno(fd, result)
            })
        }
    };
}

write_fn!(write, c"write", (buf: *const c_void, count: libc::size_t));
write_fn!(writev, c"writev", (iov: *const libc::iovec, count: c_int));
write_fn!(pwrite, c"pwrite", (buf: *const c_void, count: libc::size_t, offset: libc::off_t));
write_fn!(pwrite64, c"pwrite64", (buf: *const c_void, count: libc::size_t, offset: libc::off64_t));

type MmapFn = unsafe extern "C" fn(
    *mut c_void,
    libc::size_t,
    c_int,
    c_int,
    c_int,
    libc::off_t,
) -> *mut c_void;

/// `mmap` and `mmap64` (one function on 64-bit glibc).
fn mmap_common(
    addr: *mut c_void,
    len: libc::size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    static CELL: OnceLock<usize> = OnceLock::new();
    let address = next_symbol(c"mmap", &CELL);
    if address == 0 {
        return fail(libc::ENOSYS, libc::MAP_FAILED);
    }
    // SAFETY: `address` is libc's mmap.
    let real_mmap = unsafe { std::mem::transmute::<usize, MmapFn>(address) };
    if let Some(remote) = crate::remote() {
        // Linux 6.10 and later: GEM shmem objects refuse private mappings.
        let shared = matches!(
            flags & libc::MAP_TYPE,
            libc::MAP_SHARED | libc::MAP_SHARED_VALIDATE
        );
        let map = |memfd: c_int, within: libc::off_t| {
            if !shared {
                return fail(libc::EINVAL, libc::MAP_FAILED);
            }
            // SAFETY: the caller's placement and protection, on the
            // object's memfd from the device.
            unsafe { real_mmap(addr, len, prot, flags, memfd, within) }
        };
        if let Some(mapped) = remote.mmap(fd, map, (len, prot, flags), offset) {
            return mapped;
        }
    } else if let Some(file) = shim_if_ready().and_then(|s| s.file_of(fd)) {
        if crate::forked() {
            return libc::MAP_FAILED;
        }
        if let Some(errno) =
            crate::access_mode_of(fd, true).and_then(|mode| mmap_access_refusal(mode, prot, flags))
        {
            return fail(errno, libc::MAP_FAILED);
        }
        return map_object(&file, addr, len, prot, flags, offset);
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe { real_mmap(addr, len, prot, flags, fd, offset) }
}

/// The errno Linux's `mmap` gives a file opened with `access_mode` before
/// its driver sees the call: a writable shared mapping of a file not open
/// for writing, or any mapping of a file not open for reading, is
/// `EACCES` (`do_mmap`).
pub(crate) fn mmap_access_refusal(access_mode: c_int, prot: c_int, flags: c_int) -> Option<c_int> {
    let shared = matches!(
        flags & libc::MAP_TYPE,
        libc::MAP_SHARED | libc::MAP_SHARED_VALIDATE
    );
    let refused = (shared && prot & libc::PROT_WRITE != 0 && access_mode == libc::O_RDONLY)
        || access_mode == libc::O_WRONLY;
    refused.then_some(libc::EACCES)
}

/// `mmap` of a DRM file at a GEM object's offset: a second mapping of the
/// object's pages in the device's RAM window (so no descriptor of the
/// device's is involved), placed and protected as the caller asked.
fn map_object(
    file: &agx_kmd::File,
    addr: *mut c_void,
    len: libc::size_t,
    prot: c_int,
    flags: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    use agx_kmd::mem::Placement;
    let map_type = flags & libc::MAP_TYPE;
    // Linux 6.10 and later: GEM shmem objects refuse private mappings.
    if map_type != libc::MAP_SHARED && map_type != libc::MAP_SHARED_VALIDATE {
        return fail(libc::EINVAL, libc::MAP_FAILED);
    }
    let (object, within) = match file.mmap_object(offset as u64, len as u64) {
        Ok(found) => found,
        Err(errno) => return fail(errno.0, libc::MAP_FAILED),
    };
    let placement = if flags & libc::MAP_FIXED_NOREPLACE != 0 {
        Placement::NoReplace(addr as usize)
    } else if flags & libc::MAP_FIXED != 0 {
        Placement::Replace(addr as usize)
    } else {
        Placement::Anywhere
    };
    match object.memory().map_for_cpu(within, len, prot, placement) {
        Ok(mapped) => mapped.as_ptr().cast(),
        Err(error) => fail(
            error.raw_os_error().unwrap_or(libc::ENOMEM),
            libc::MAP_FAILED,
        ),
    }
}

/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: libc::size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    entry_point("mmap", libc::MAP_FAILED, move || {
        mmap_common(addr, len, prot, flags, fd, offset)
    })
}

/// # Safety
/// As `mmap64(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: libc::size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    entry_point("mmap64", libc::MAP_FAILED, move || {
        mmap_common(addr, len, prot, flags, fd, offset)
    })
}

// ---- Paths ------------------------------------------------------------

/// `N` if `path` is `/proc/<this process>/<dir>/N` (by `self`,
/// `thread-self` or the process id), or `/dev/fd/N` for `dir` `fd`.
fn own_proc_entry(path: &str, dir: &str) -> Option<c_int> {
    let number = if let Some(n) = path.strip_prefix("/dev/fd/").filter(|_| dir == "fd") {
        n
    } else {
        let (who, rest) = path.strip_prefix("/proc/")?.split_once('/')?;
        let own = who == "self"
            || who == "thread-self"
            || who.parse::<u32>().ok() == Some(std::process::id());
        if !own {
            return None;
        }
        rest.strip_prefix(dir)?.strip_prefix('/')?
    };
    number.parse().ok()
}

/// The node a `/proc/self/fd/N` path of a DRM file reads back as.
fn fd_entry_node(path: &str) -> Option<&'static Node> {
    let fd = own_proc_entry(path, "fd")?;
    crate::node_of(fd)
}

/// What a path names, for the interposed path calls.
enum Named {
    /// A device node (by its path, a link in the tree, or a
    /// `/proc/self/fd` entry of a DRM file).
    Node(&'static Node),
    /// `/proc/self/fdinfo/N` of DRM file `N`.
    FdInfo(c_int),
    /// A path in the device's faked namespaces, redirected into the tree.
    Redirected(CString),
    /// Not the device's.
    Real,
}

/// What `path` names; `follow`: whether a final symbolic link is
/// followed (as `stat` does and `lstat` does not).
///
/// # Safety
/// `path` must be null or a NUL-terminated string.
unsafe fn name_of(path: *const c_char, follow: bool) -> Named {
    // SAFETY: as this function's contract.
    match unsafe { path_of(path) } {
        Some(path) => name_of_str(path, follow),
        None => Named::Real,
    }
}

/// [`name_of`] of a path as a string.
fn name_of_str(path: &str, follow: bool) -> Named {
    if follow {
        if let Some(node) = fd_entry_node(path) {
            return Named::Node(node);
        }
    }
    if let Some(fd) = own_proc_entry(path, "fdinfo") {
        // (Not in a forked child: the device's state is not read there.)
        let ours = match crate::remote() {
            Some(remote) => remote.node_of(fd).is_some(),
            None => !crate::in_forked_child() && shim_if_ready().is_some_and(|s| s.is_ours(fd)),
        };
        if ours {
            return Named::FdInfo(fd);
        }
    }
    match tree::resolve(path, follow) {
        tree::Target::Node(node) => Named::Node(node),
        tree::Target::Redirected(c) => Named::Redirected(c),
        tree::Target::Real => Named::Real,
    }
}

/// The path to hand the real function: the redirected one, or the
/// caller's.
fn real_path(named: &Named, path: *const c_char) -> *const c_char {
    match named {
        Named::Redirected(c) => c.as_ptr(),
        _ => path,
    }
}

/// `/proc/self/fdinfo/N` of DRM file `fd`: what the host kernel prints
/// for the descriptor (position, flags with the DRM file's access mode
/// and `O_LARGEFILE`, mount, inode) followed by what the DRM core and the
/// driver print, in a memory file positioned at its start. Opening it for
/// writing is `EACCES`, as for the real file (mode 0444).
fn open_fdinfo(fd: c_int, flags: c_int) -> c_int {
    if flags & libc::O_ACCMODE != libc::O_RDONLY {
        return fail(libc::EACCES, -1);
    }
    let found = match crate::remote() {
        Some(remote) => remote.fdinfo(fd),
        None => shim_if_ready().and_then(|shim| {
            shim.with_open(fd, true, |open| (open.access_mode, open.file.fdinfo()))
        }),
    };
    let Some((access_mode, fdinfo)) = found else {
        return fail(libc::ENOENT, -1);
    };
    let host = read_real(&format!("/proc/self/fdinfo/{fd}")).unwrap_or_default();
    let mut text = String::new();
    for line in host.lines() {
        match line
            .strip_prefix("flags:\t")
            .and_then(|octal| i32::from_str_radix(octal, 8).ok())
        {
            Some(bits) => text.push_str(&format!(
                "flags:\t0{:o}\n",
                (bits & !libc::O_ACCMODE) | access_mode | libc::O_LARGEFILE
            )),
            None => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    text.push_str(&fdinfo);
    let cloexec = if flags & libc::O_CLOEXEC != 0 {
        libc::MFD_CLOEXEC
    } else {
        0
    };
    // SAFETY: memfd_create with a NUL-terminated name.
    let raw = unsafe { libc::memfd_create(c"agx-fdinfo".as_ptr(), cloexec) };
    if raw < 0 {
        return -1;
    }
    // SAFETY: just created, owned here.
    let memory = unsafe { OwnedFd::from_raw_fd(raw) };
    let written = std::fs::File::from(memory);
    if std::io::Write::write_all(&mut &written, text.as_bytes()).is_err() {
        return fail(libc::EIO, -1);
    }
    let memory = OwnedFd::from(written);
    // SAFETY: lseek on a descriptor owned here.
    if unsafe { libc::lseek(memory.as_raw_fd(), 0, libc::SEEK_SET) } != 0 {
        return -1;
    }
    std::os::fd::IntoRawFd::into_raw_fd(memory)
}

/// A file's contents, read with the real `open` (the interposed one
/// would answer for the device's paths).
fn read_real(path: &str) -> Option<String> {
    let path = CString::new(path).ok()?;
    let real_open = real!(c"open", unsafe extern "C" fn(*const c_char, c_int) -> c_int)?;
    // SAFETY: open with a NUL-terminated path.
    let raw = unsafe { real_open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if raw < 0 {
        return None;
    }
    // SAFETY: just opened, owned here.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
    std::io::read_to_string(file).ok()
}

/// What the interposed `open`s do with a path that names something of
/// the device's; `None` for one that does not.
fn open_named(named: &Named, flags: c_int) -> Option<c_int> {
    match named {
        Named::Node(node) => Some(open_node(node, flags)),
        Named::FdInfo(fd) => Some(open_fdinfo(*fd, flags)),
        Named::Redirected(_) | Named::Real => None,
    }
}

/// The nodes' permission bits and owners, which `chmod` and `chown`
/// change and `open` and `access` check (`agx_simd::nodes`): in the
/// device-process mode those of the device directory, which every client
/// of the device sees; in-process, this process's own.
static NODE_ATTRIBUTES: agx_simd::nodes::NodeAttributes = agx_simd::nodes::NodeAttributes::new();

fn attributes_dir() -> Option<&'static std::path::Path> {
    match crate::mode() {
        Some(crate::Mode::DeviceProcess) => Some(crate::remote::remote().dir()),
        _ => None,
    }
}

fn node_attributes(node: &Node) -> &'static agx_simd::nodes::NodeRecord {
    NODE_ATTRIBUTES.get(attributes_dir(), node.kind)
}

fn node_owner(node: &Node) -> (u32, u32) {
    node_attributes(node).owner()
}

/// Whether this process may open `node` with the `open` flags `flags`
/// (its access mode against the node's permission bits, with the
/// effective ids, as `may_open` checks before the driver's open).
fn may_open(node: &Node, flags: c_int) -> bool {
    let wanted = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => libc::R_OK,
        libc::O_WRONLY => libc::W_OK,
        _ => libc::R_OK | libc::W_OK,
    };
    node_attributes(node).permits(effective_uid(), in_group, wanted as u32)
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether the caller's effective or supplementary groups hold `gid`.
fn in_group(gid: u32) -> bool {
    // SAFETY: getegid takes nothing and cannot fail.
    (unsafe { libc::getegid() }) == gid || in_supplementary_group(gid)
}

/// Whether the caller's real or supplementary groups hold `gid` (the
/// groups `access` checks with).
fn in_real_group(gid: u32) -> bool {
    // SAFETY: getgid takes nothing and cannot fail.
    (unsafe { libc::getgid() }) == gid || in_supplementary_group(gid)
}

fn in_supplementary_group(gid: u32) -> bool {
    let mut groups: [libc::gid_t; 256] = [0; 256];
    // SAFETY: the buffer holds the 256 entries the call is told of.
    let n = unsafe { libc::getgroups(groups.len() as c_int, groups.as_mut_ptr()) };
    usize::try_from(n).is_ok_and(|n| groups[..n.min(groups.len())].contains(&gid))
}

/// `chmod` of a node: its owner or root (`CAP_FOWNER`) may, else `EPERM`.
fn node_chmod(node: &Node, mode: libc::mode_t) -> c_int {
    let euid = effective_uid();
    if euid != 0 && euid != node_owner(node).0 {
        return fail(libc::EPERM, -1);
    }
    NODE_ATTRIBUTES
        .get_for_change(attributes_dir(), node.kind)
        .set_mode(mode);
    0
}

/// `chown` of a node (`u32::MAX` leaves an id as it is): root
/// (`CAP_CHOWN`) may give it to anyone; its owner may only change its
/// group to one of its own; anyone else gets `EPERM` (the kernel's
/// `chown_ok` and `chgrp_ok`).
fn node_chown(node: &Node, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    let (owner_uid, owner_gid) = node_owner(node);
    let euid = effective_uid();
    if euid != 0 {
        let own_group = gid == u32::MAX || in_group(gid);
        let keeps_owner = uid == u32::MAX || uid == owner_uid;
        if euid != owner_uid || !keeps_owner || !own_group {
            return fail(libc::EPERM, -1);
        }
    }
    let uid = if uid == u32::MAX { owner_uid } else { uid };
    let gid = if gid == u32::MAX { owner_gid } else { gid };
    NODE_ATTRIBUTES
        .get_for_change(attributes_dir(), node.kind)
        .set_owner(uid, gid);
    0
}

fn char_device_stat(node: &Node) -> libc::stat64 {
    // SAFETY: stat64 is plain data; all-zero is a valid value.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    st.st_mode = libc::S_IFCHR | node_attributes(node).mode();
    (st.st_uid, st.st_gid) = node_owner(node);
    st.st_rdev = libc::makedev(tree::DRM_MAJOR, node.minor);
    // The nodes' devtmpfs: a device number and an inode per node, so that
    // clients telling nodes apart by (st_dev, st_ino), as IGT does, can.
    st.st_dev = libc::makedev(0, 5);
    st.st_ino = u64::from(node.minor) + 1;
    st.st_nlink = 1;
    st.st_blksize = 4096;
    st
}

/// Writes `st` into a caller's `struct stat` or `struct stat64` (the same
/// layout on 64-bit targets).
///
/// # Safety
/// `buf` must be valid for a `struct stat64` write.
unsafe fn write_stat(buf: *mut c_void, st: libc::stat64) -> c_int {
    if buf.is_null() {
        return fail(libc::EFAULT, -1);
    }
    // SAFETY: the caller's buffer holds a struct stat (64-bit layout).
    unsafe { buf.cast::<libc::stat64>().write(st) };
    0
}

macro_rules! stat_path_fn {
    ($name:ident, $symbol:literal, $follow:expr) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, buf: *mut c_void) -> c_int {
            entry_point(stringify!($name), -1, move || {
                // SAFETY: the caller passes a C string.
                let named = unsafe { name_of(path, $follow) };
                if let Named::Node(node) = named {
                    // SAFETY: the caller passes a stat buffer.
                    return unsafe { write_stat(buf, char_device_stat(node)) };
                }
                match real!(
                    $symbol,
                    unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int
                ) {
                    // SAFETY: forwarding the caller's arguments (the path
                    // redirected).
                    Some(f) => unsafe { f(real_path(&named, path), buf) },
                    None => fail(libc::ENOSYS, -1),
                }
            })
        }
    };
}

stat_path_fn!(stat, c"stat", true);
stat_path_fn!(stat64, c"stat64", true);
stat_path_fn!(lstat, c"lstat", false);
stat_path_fn!(lstat64, c"lstat64", false);

macro_rules! stat_fd_fn {
    ($name:ident, $symbol:literal) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, buf: *mut c_void) -> c_int {
            entry_point(stringify!($name), -1, move || {
                if let Some(node) = crate::node_of(fd) {
                    // SAFETY: the caller passes a stat buffer.
                    return unsafe { write_stat(buf, char_device_stat(node)) };
                }
                match real!($symbol, unsafe extern "C" fn(c_int, *mut c_void) -> c_int) {
                    // SAFETY: forwarding the caller's arguments.
                    Some(f) => unsafe { f(fd, buf) },
                    None => fail(libc::ENOSYS, -1),
                }
            })
        }
    };
}

stat_fd_fn!(fstat, c"fstat");
stat_fd_fn!(fstat64, c"fstat64");

/// What an `*at` call names: the node of a DRM file given by descriptor
/// (`AT_EMPTY_PATH` and an empty path), or what the path names.
///
/// # Safety
/// `path` must be null or a NUL-terminated string.
unsafe fn name_at(dirfd: c_int, path: *const c_char, flags: c_int) -> Named {
    // SAFETY: as this function's contract.
    let p = unsafe { path_of(path) };
    if p == Some("") && flags & libc::AT_EMPTY_PATH != 0 {
        if let Some(node) = crate::node_of(dirfd) {
            return Named::Node(node);
        }
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    // A path relative to a directory of the tree names what the faked
    // directory's path joined with it names (a walk through /dev/dri or
    // sysfs by directory descriptors, as fts, nftw or libudev do).
    if let Some(relative) = p.filter(|p| !p.starts_with('/') && dirfd != libc::AT_FDCWD) {
        if let Some(directory) = tree::stands_for(dirfd) {
            return name_of_str(&format!("{directory}/{relative}"), follow);
        }
    }
    // SAFETY: as this function's contract.
    unsafe { name_of(path, follow) }
}

macro_rules! fstatat_fn {
    ($name:ident, $symbol:literal) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            dirfd: c_int,
            path: *const c_char,
            buf: *mut c_void,
            flags: c_int,
        ) -> c_int {
            entry_point(stringify!($name), -1, move || {
                // SAFETY: the caller passes a C string.
                let named = unsafe { name_at(dirfd, path, flags) };
                if let Named::Node(node) = named {
                    // SAFETY: the caller passes a stat buffer.
                    return unsafe { write_stat(buf, char_device_stat(node)) };
                }
                match real!(
                    $symbol,
                    unsafe extern "C" fn(c_int, *const c_char, *mut c_void, c_int) -> c_int
                ) {
                    // SAFETY: forwarding the caller's arguments (the path
                    // redirected).
                    Some(f) => unsafe { f(dirfd, real_path(&named, path), buf, flags) },
                    None => fail(libc::ENOSYS, -1),
                }
            })
        }
    };
}

fstatat_fn!(fstatat, c"fstatat");
fstatat_fn!(fstatat64, c"fstatat64");

/// # Safety
/// As `statx(2)`.
#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: libc::c_uint,
    buf: *mut libc::statx,
) -> c_int {
    entry_point("statx", -1, move || {
        // SAFETY: the caller passes a C string.
        let named = unsafe { name_at(dirfd, path, flags) };
        if let Named::Node(node) = named {
            if buf.is_null() {
                return fail(libc::EFAULT, -1);
            }
            let st = char_device_stat(node);
            // SAFETY: statx is plain data; all-zero is a valid value.
            let mut sx: libc::statx = unsafe { std::mem::zeroed() };
            sx.stx_mask = libc::STATX_BASIC_STATS;
            sx.stx_mode = st.st_mode as u16;
            sx.stx_nlink = st.st_nlink as u32;
            (sx.stx_uid, sx.stx_gid) = (st.st_uid, st.st_gid);
            sx.stx_blksize = st.st_blksize as u32;
            sx.stx_rdev_major = libc::major(st.st_rdev);
            sx.stx_rdev_minor = libc::minor(st.st_rdev);
            sx.stx_ino = st.st_ino;
            sx.stx_dev_major = libc::major(st.st_dev);
            sx.stx_dev_minor = libc::minor(st.st_dev);
            // SAFETY: the caller passes a statx buffer.
            unsafe { buf.write(sx) };
            return 0;
        }
        match real!(
            c"statx",
            unsafe extern "C" fn(
                c_int,
                *const c_char,
                c_int,
                libc::c_uint,
                *mut libc::statx,
            ) -> c_int
        ) {
            // SAFETY: forwarding the caller's arguments (the path redirected).
            Some(f) => unsafe { f(dirfd, real_path(&named, path), flags, mask, buf) },
            None => fail(libc::ENOSYS, -1),
        }
    })
}

/// # Safety
/// As `chmod(2)`.
#[no_mangle]
pub unsafe extern "C" fn chmod(path: *const c_char, mode: libc::mode_t) -> c_int {
    entry_point("chmod", -1, move || {
        // SAFETY: the caller passes a C string.
        let named = unsafe { name_of(path, true) };
        if let Named::Node(node) = &named {
            return node_chmod(node, mode);
        }
        match real!(
            c"chmod",
            unsafe extern "C" fn(*const c_char, libc::mode_t) -> c_int
        ) {
            // SAFETY: forwarding the caller's arguments (the path redirected).
            Some(f) => unsafe { f(real_path(&named, path), mode) },
            None => fail(libc::ENOSYS, -1),
        }
    })
}

/// # Safety
/// As `fchmodat(2)`.
#[no_mangle]
pub unsafe extern "C" fn fchmodat(
    dirfd: c_int,
    path: *const c_char,
    mode: libc::mode_t,
    flags: c_int,
) -> c_int {
    entry_point("fchmodat", -1, move || {
        // SAFETY: the caller passes a C string.
        let named = unsafe { name_at(dirfd, path, flags) };
        if let Named::Node(node) = &named {
            return node_chmod(node, mode);
        }
        match real!(
            c"fchmodat",
            unsafe extern "C" fn(c_int, *const c_char, libc::mode_t, c_int) -> c_int
        ) {
            // SAFETY: forwarding the caller's arguments (the path redirected).
            Some(f) => unsafe { f(dirfd, real_path(&named, path), mode, flags) },
            None => fail(libc::ENOSYS, -1),
        }
    })
}

/// # Safety
/// As `chown(2)`.
#[no_mangle]
pub unsafe extern "C" fn chown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    entry_point("chown", -1, move || {
        // SAFETY: the caller passes a C string.
        let named = unsafe { name_of(path, true) };
        if let Named::Node(node) = &named {
            return node_chown(node, uid, gid);
        }
        match real!(
            c"chown",
            unsafe extern "C" fn(*const c_char, libc::uid_t, libc::gid_t) -> c_int
        ) {
            // SAFETY: forwarding the caller's arguments (the path redirected).
            Some(f) => unsafe { f(real_path(&named, path), uid, gid) },
            None => fail(libc::ENOSYS, -1),
        }
    })
}

/// # Safety
/// As `lchown(2)` (a node is no link: as `chown`).
#[no_mangle]
pub unsafe extern "C" fn lchown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    entry_point("lchown", -1, move || {
        // SAFETY: the caller passes a C string.
        let named = unsafe { name_of(path, false) };
        if let Named::Node(node) = &named {
            return node_chown(node, uid, gid);
        }
        match real!(
            c"lchown",
            unsafe extern "C" fn(*const c_char, libc::uid_t, libc::gid_t) -> c_int
        ) {
            // SAFETY: forwarding the caller's arguments (the path redirected).
            Some(f) => unsafe { f(real_path(&named, path), uid, gid) },
            None => fail(libc::ENOSYS, -1),
        }
    })
}

/// # Safety
/// As `fchownat(2)`.
#[no_mangle]
pub unsafe extern "C" fn fchownat(
    dirfd: c_int,
    path: *const c_char,
    uid: libc::uid_t,
    gid: libc::gid_t,
    flags: c_int,
) -> c_int {
    entry_point("fchownat", -1, move || {
        // SAFETY: the caller passes a C string.
        let named = unsafe { name_at(dirfd, path, flags) };
        if let Named::Node(node) = &named {
            return node_chown(node, uid, gid);
        }
        match real!(
            c"fchownat",
            unsafe extern "C" fn(c_int, *const c_char, libc::uid_t, libc::gid_t, c_int) -> c_int
        ) {
            // SAFETY: forwarding the caller's arguments (the path redirected).
            Some(f) => unsafe { f(dirfd, real_path(&named, path), uid, gid, flags) },
            None => fail(libc::ENOSYS, -1),
        }
    })
}

/// `access` of `node` for `mode`, against its permission bits: with the
/// real ids, or (`faccessat`'s `AT_EACCESS`) the effective ones.
fn node_access(node: &Node, mode: c_int, effective: bool) -> c_int {
    let node = node_attributes(node);
    let wanted = (mode & (libc::R_OK | libc::W_OK | libc::X_OK)) as u32;
    let permitted = if effective {
        node.permits(effective_uid(), in_group, wanted)
    } else {
        // SAFETY: getuid takes nothing and cannot fail.
        node.permits(unsafe { libc::getuid() }, in_real_group, wanted)
    };
    if permitted {
        0
    } else {
        fail(libc::EACCES, -1)
    }
}

/// # Safety
/// As `access(2)`.
#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    entry_point("access", -1, move || {
        // SAFETY: the caller passes a C string.
        let named = unsafe { name_of(path, true) };
        if let Named::Node(node) = named {
            return node_access(node, mode, false);
        }
        match real!(
            c"access",
            unsafe extern "C" fn(*const c_char, c_int) -> c_int
        ) {
            // SAFETY: forwarding the caller's arguments (the path redirected).
            Some(f) => unsafe { f(real_path(&named, path), mode) },
            None => fail(libc::ENOSYS, -1),
        }
    })
}

/// # Safety
/// As `faccessat(2)`.
#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    entry_point("faccessat", -1, move || {
        // SAFETY: the caller passes a C string.
        let named = unsafe { name_at(dirfd, path, flags) };
        if let Named::Node(node) = named {
            return node_access(node, mode, flags & libc::AT_EACCESS != 0);
        }
        match real!(
            c"faccessat",
            unsafe extern "C" fn(c_int, *const c_char, c_int, c_int) -> c_int
        ) {
            // SAFETY: forwarding the caller's arguments (the path redirected).
            Some(f) => unsafe { f(dirfd, real_path(&named, path), mode, flags) },
            None => fail(libc::ENOSYS, -1),
        }
    })
}

/// Copies `text` into a caller's `readlink` buffer of `size` bytes
/// (truncated, without a NUL, as readlink does).
///
/// # Safety
/// `buf` must be valid for `size` bytes of writes.
unsafe fn fill_link(text: &str, buf: *mut c_char, size: libc::size_t) -> libc::ssize_t {
    if size == 0 {
        return fail(libc::EINVAL, -1);
    }
    if buf.is_null() {
        return fail(libc::EFAULT, -1);
    }
    let n = text.len().min(size);
    // SAFETY: the caller's buffer holds `size` bytes; `n` is at most that.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast(), n) };
    n as libc::ssize_t
}

/// The link text `readlink` of `path` reads, if the path is a
/// `/proc/self/fd` entry of a DRM file, and the redirection otherwise.
///
/// # Safety
/// `path` must be null or a NUL-terminated string.
unsafe fn link_of(path: *const c_char) -> Result<&'static str, Named> {
    // SAFETY: as this function's contract.
    if let Some(node) = unsafe { path_of(path) }.and_then(fd_entry_node) {
        return Ok(node.path);
    }
    // SAFETY: as this function's contract.
    Err(unsafe { name_of(path, false) })
}

/// # Safety
/// As `readlink(2)`.
#[no_mangle]
pub unsafe extern "C" fn readlink(
    path: *const c_char,
    buf: *mut c_char,
    size: libc::size_t,
) -> libc::ssize_t {
    entry_point("readlink", -1, move || {
        // SAFETY: forwarding the caller's arguments: readlink is readlinkat
        // relative to the working directory.
        unsafe { readlinkat(libc::AT_FDCWD, path, buf, size) }
    })
}

/// # Safety
/// As `readlinkat(2)`.
#[no_mangle]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: libc::size_t,
) -> libc::ssize_t {
    entry_point("readlinkat", -1, move || {
        // SAFETY: the caller passes a C string.
        let named = match unsafe { link_of(path) } {
            // SAFETY: the caller passes a buffer of `size` bytes.
            Ok(text) => return unsafe { fill_link(text, buf, size) },
            // SAFETY: as above.
            Err(Named::Real) => unsafe { name_at(dirfd, path, libc::AT_SYMLINK_NOFOLLOW) },
            Err(named) => named,
        };
        match real!(
            c"readlinkat",
            unsafe extern "C" fn(c_int, *const c_char, *mut c_char, libc::size_t) -> libc::ssize_t
        ) {
            // SAFETY: forwarding the caller's arguments (the path redirected).
            Some(f) => unsafe { f(dirfd, real_path(&named, path), buf, size) },
            None => fail(libc::ENOSYS, -1),
        }
    })
}

/// # Safety
/// As glibc's fortified `readlink`.
#[no_mangle]
pub unsafe extern "C" fn __readlink_chk(
    path: *const c_char,
    buf: *mut c_char,
    size: libc::size_t,
    buf_size: libc::size_t,
) -> libc::ssize_t {
    entry_point("__readlink_chk", -1, move || {
        // SAFETY: forwarding the caller's arguments, as `readlink` does.
        unsafe { __readlinkat_chk(libc::AT_FDCWD, path, buf, size, buf_size) }
    })
}

/// # Safety
/// As glibc's fortified `readlinkat`.
#[no_mangle]
pub unsafe extern "C" fn __readlinkat_chk(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: libc::size_t,
    buf_size: libc::size_t,
) -> libc::ssize_t {
    entry_point("__readlinkat_chk", -1, move || {
        if size > buf_size {
            log("agx-shim: buffer overflow detected in readlink\n");
            std::process::abort();
        }
        // SAFETY: forwarding the caller's arguments.
        unsafe { readlinkat(dirfd, path, buf, size) }
    })
}

/// `realpath` of a path that names something of the device's: the node
/// a DRM file's `/proc/self/fd` entry names, or the path resolved in the
/// tree and mapped back. `None` for other paths.
///
/// # Safety
/// `path` must be null or a NUL-terminated string; `resolved` null or
/// valid for `PATH_MAX` bytes.
unsafe fn realpath_of(path: *const c_char, resolved: *mut c_char) -> Option<*mut c_char> {
    // SAFETY: as this function's contract.
    let p = unsafe { path_of(path) }?;
    let found = match fd_entry_node(p) {
        Some(node) => Ok(node.path.to_string()),
        None => tree::realpath(p)?,
    };
    let text = match found {
        Ok(text) => text,
        Err(errno) => return Some(fail(errno, std::ptr::null_mut())),
    };
    let Ok(c) = CString::new(text) else {
        return Some(fail(libc::ENOENT, std::ptr::null_mut()));
    };
    let bytes = c.as_bytes_with_nul();
    if bytes.len() > libc::PATH_MAX as usize {
        return Some(fail(libc::ENAMETOOLONG, std::ptr::null_mut()));
    }
    if resolved.is_null() {
        // SAFETY: strdup of a NUL-terminated string; the caller frees it.
        return Some(unsafe { libc::strdup(c.as_ptr()) });
    }
    // SAFETY: the caller's buffer holds PATH_MAX bytes; `bytes` fits.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), resolved.cast(), bytes.len()) };
    Some(resolved)
}

/// # Safety
/// As `realpath(3)`.
#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    entry_point("realpath", std::ptr::null_mut(), move || {
        // SAFETY: the caller's arguments, as realpath requires them.
        if let Some(result) = unsafe { realpath_of(path, resolved) } {
            return result;
        }
        match real!(
            c"realpath",
            unsafe extern "C" fn(*const c_char, *mut c_char) -> *mut c_char
        ) {
            // SAFETY: forwarding the caller's arguments.
            Some(f) => unsafe { f(path, resolved) },
            None => fail(libc::ENOSYS, std::ptr::null_mut()),
        }
    })
}

/// # Safety
/// As glibc's fortified `realpath`.
#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(
    path: *const c_char,
    resolved: *mut c_char,
    resolved_size: libc::size_t,
) -> *mut c_char {
    entry_point("__realpath_chk", std::ptr::null_mut(), move || {
        if resolved_size < libc::PATH_MAX as usize {
            log("agx-shim: buffer overflow detected in realpath\n");
            std::process::abort();
        }
        // SAFETY: forwarding the caller's arguments.
        unsafe { realpath(path, resolved) }
    })
}

/// # Safety
/// As `canonicalize_file_name(3)`.
#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    entry_point("canonicalize_file_name", std::ptr::null_mut(), move || {
        // SAFETY: forwarding the caller's argument.
        unsafe { realpath(path, std::ptr::null_mut()) }
    })
}

/// # Safety
/// As `opendir(3)`.
#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut libc::DIR {
    entry_point("opendir", std::ptr::null_mut(), move || {
        // SAFETY: the caller passes a C string.
        let named = unsafe { name_of(path, true) };
        if let Named::Node(_) = named {
            return fail(libc::ENOTDIR, std::ptr::null_mut());
        }
        match real!(
            c"opendir",
            unsafe extern "C" fn(*const c_char) -> *mut libc::DIR
        ) {
            // SAFETY: forwarding the caller's argument (the path redirected).
            Some(f) => unsafe { f(real_path(&named, path)) },
            None => fail(libc::ENOSYS, std::ptr::null_mut()),
        }
    })
}

macro_rules! scandir_fn {
    ($name:ident, $symbol:literal) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            path: *const c_char,
            list: *mut c_void,
            filter: *const c_void,
            compare: *const c_void,
        ) -> c_int {
            entry_point(stringify!($name), -1, move || {
                // SAFETY: the caller passes a C string.
                let named = unsafe { name_of(path, true) };
                if let Named::Node(_) = named {
                    return fail(libc::ENOTDIR, -1);
                }
                match real!(
                    $symbol,
                    unsafe extern "C" fn(
                        *const c_char,
                        *mut c_void,
                        *const c_void,
                        *const c_void,
                    ) -> c_int
                ) {
                    // SAFETY: forwarding the caller's arguments (the path
                    // redirected).
                    Some(f) => unsafe { f(real_path(&named, path), list, filter, compare) },
                    None => fail(libc::ENOSYS, -1),
                }
            })
        }
    };
}

scandir_fn!(scandir, c"scandir");
scandir_fn!(scandir64, c"scandir64");

/// The `open` flags of an `fopen` mode string.
fn fopen_flags(mode: &str) -> c_int {
    let access = match (mode.as_bytes().first(), mode.contains('+')) {
        (_, true) => libc::O_RDWR,
        (Some(b'r'), false) => libc::O_RDONLY,
        _ => libc::O_WRONLY,
    };
    if mode.contains('e') {
        access | libc::O_CLOEXEC
    } else {
        access
    }
}

macro_rules! fopen_fn {
    ($name:ident, $symbol:literal) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            path: *const c_char,
            mode: *const c_char,
        ) -> *mut libc::FILE {
            entry_point(stringify!($name), std::ptr::null_mut(), move || {
                // SAFETY: the caller passes a C string.
                let named = unsafe { name_of(path, true) };
                // SAFETY: the caller passes a C string.
                let flags = fopen_flags(unsafe { path_of(mode) }.unwrap_or("r"));
                if let Some(fd) = open_named(&named, flags) {
                    if fd < 0 {
                        return std::ptr::null_mut();
                    }
                    // The stream is read-only whatever the mode asked (the
                    // descriptor of a DRM file is a pipe's read end, which
                    // glibc's own F_GETFL check sees; nothing is written to a
                    // DRM file or an fdinfo anyway).
                    let read_mode = if flags & libc::O_CLOEXEC != 0 {
                        c"re"
                    } else {
                        c"r"
                    };
                    // SAFETY: fdopen of a descriptor opened here, with a
                    // NUL-terminated mode string.
                    let stream = unsafe { libc::fdopen(fd, read_mode.as_ptr()) };
                    if stream.is_null() {
                        // SAFETY: closing the descriptor opened here.
                        unsafe { close(fd) };
                    }
                    return stream;
                }
                match real!(
                    $symbol,
                    unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE
                ) {
                    // SAFETY: forwarding the caller's arguments (the path
                    // redirected).
                    Some(f) => unsafe { f(real_path(&named, path), mode) },
                    None => fail(libc::ENOSYS, std::ptr::null_mut()),
                }
            })
        }
    };
}

fopen_fn!(fopen, c"fopen");
fopen_fn!(fopen64, c"fopen64");

macro_rules! getxattr_fn {
    ($name:ident, $symbol:literal, $follow:expr) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            path: *const c_char,
            attribute: *const c_char,
            value: *mut c_void,
            size: libc::size_t,
        ) -> libc::ssize_t {
            entry_point(stringify!($name), -1, move || {
                // SAFETY: the caller passes a C string.
                let named = unsafe { name_of(path, $follow) };
                if let Named::Node(_) = named {
                    // The nodes carry no extended attributes.
                    return fail(libc::ENODATA, -1);
                }
                match real!(
                    $symbol,
                    unsafe extern "C" fn(
                        *const c_char,
                        *const c_char,
                        *mut c_void,
                        libc::size_t,
                    ) -> libc::ssize_t
                ) {
                    // SAFETY: forwarding the caller's arguments (the path
                    // redirected).
                    Some(f) => unsafe { f(real_path(&named, path), attribute, value, size) },
                    None => fail(libc::ENOSYS, -1),
                }
            })
        }
    };
}

getxattr_fn!(getxattr, c"getxattr", true);
getxattr_fn!(lgetxattr, c"lgetxattr", false);

macro_rules! listxattr_fn {
    ($name:ident, $symbol:literal, $follow:expr) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            path: *const c_char,
            list: *mut c_char,
            size: libc::size_t,
        ) -> libc::ssize_t {
            entry_point(stringify!($name), -1, move || {
                // SAFETY: the caller passes a C string.
                let named = unsafe { name_of(path, $follow) };
                if let Named::Node(_) = named {
                    return 0;
                }
                match real!(
                    $symbol,
                    unsafe extern "C" fn(*const c_char, *mut c_char, libc::size_t) -> libc::ssize_t
                ) {
                    // SAFETY: forwarding the caller's arguments (the path
                    // redirected).
                    Some(f) => unsafe { f(real_path(&named, path), list, size) },
                    None => fail(libc::ENOSYS, -1),
                }
            })
        }
    };
}

listxattr_fn!(listxattr, c"listxattr", true);
listxattr_fn!(llistxattr, c"llistxattr", false);
