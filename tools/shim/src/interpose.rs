//! The interposed libc functions.
//!
//! Each function first decides whether the call concerns the simulated
//! device (its path or one of its descriptors); if not, it calls the real
//! libc function found with `dlsym(RTLD_NEXT)`. The variadic `open`,
//! `openat`, `fcntl` and `ioctl` are declared with their optional argument
//! as a fixed one: on the x86-64 and AArch64 Linux calling conventions a
//! variadic argument travels in the same register, and an absent one is
//! simply never used.

use std::ffi::{c_char, c_int, c_ulong, c_void, CStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, OnceLock};

use crate::{shim, shim_if_ready, Inode, RENDER_NODE, RENDER_NODE_DEV, SYSFS_PATHS};

/// Writes a message to stderr without going through Rust's stdio.
pub(crate) fn log(message: &str) {
    // SAFETY: writing a valid buffer of the given length to fd 2.
    unsafe {
        libc::write(2, message.as_ptr().cast(), message.len());
    }
}

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

fn set_errno(errno: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = errno };
}

pub(crate) fn fail<T>(errno: i32, value: T) -> T {
    set_errno(errno);
    value
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

fn is_node(path: Option<&str>) -> bool {
    path == Some(RENDER_NODE)
}

fn is_sysfs(path: Option<&str>) -> bool {
    path.is_some_and(|p| SYSFS_PATHS.contains(&p.trim_end_matches('/')))
}

fn inode_of(fd: &OwnedFd) -> Option<Inode> {
    // SAFETY: a zeroed stat is a valid out-buffer for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let real_fstat = real!(
        c"fstat",
        unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int
    )?;
    // SAFETY: valid fd and out-buffer.
    if unsafe { real_fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    Some((st.st_dev, st.st_ino))
}

/// Opens a DRM file on the simulated device: the client's descriptor is
/// the read end of a new pipe, the device keeps the write end.
fn open_node(flags: c_int) -> c_int {
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
    let shim = shim();
    let file = Arc::new(shim.system.open());
    shim.files.lock().unwrap_or_else(|e| e.into_inner()).insert(
        inode,
        crate::OpenFile {
            file,
            descriptors: 0,
            access_mode: flags & libc::O_ACCMODE,
            _writer: writer,
        },
    );
    let raw = std::os::fd::IntoRawFd::into_raw_fd(reader);
    shim.add_fd(raw, inode);
    raw
}

macro_rules! open_fn {
    ($name:ident, $symbol:literal, ($($arg:ident: $ty:ty),*), $path:ident, $flags:ident) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            // SAFETY: the caller passes a C string, as the function requires.
            if is_node(unsafe { path_of($path) }) {
                return open_node($flags);
            }
            match real!($symbol, unsafe extern "C" fn($($ty),*) -> c_int) {
                // SAFETY: forwarding the caller's arguments.
                Some(f) => unsafe { f($($arg),*) },
                None => fail(libc::ENOSYS, -1),
            }
        }
    };
}

open_fn!(open, c"open", (path: *const c_char, flags: c_int, mode: libc::mode_t), path, flags);
open_fn!(open64, c"open64", (path: *const c_char, flags: c_int, mode: libc::mode_t), path, flags);
open_fn!(__open_2, c"__open_2", (path: *const c_char, flags: c_int), path, flags);
open_fn!(__open64_2, c"__open64_2", (path: *const c_char, flags: c_int), path, flags);
open_fn!(openat, c"openat", (dirfd: c_int, path: *const c_char, flags: c_int, mode: libc::mode_t), path, flags);
open_fn!(openat64, c"openat64", (dirfd: c_int, path: *const c_char, flags: c_int, mode: libc::mode_t), path, flags);

/// # Safety
/// As `close(2)`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if let Some(shim) = shim_if_ready() {
        shim.remove_fd(fd);
    }
    match real!(c"close", unsafe extern "C" fn(c_int) -> c_int) {
        // SAFETY: forwarding the caller's argument.
        Some(f) => unsafe { f(fd) },
        None => fail(libc::ENOSYS, -1),
    }
}

fn track_dup(old: c_int, new: c_int) {
    if new < 0 {
        return;
    }
    let Some(shim) = shim_if_ready() else { return };
    let inode = shim
        .fds
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&old)
        .copied();
    if let Some(inode) = inode {
        shim.add_fd(new, inode);
    }
}

/// # Safety
/// As `dup(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let Some(f) = real!(c"dup", unsafe extern "C" fn(c_int) -> c_int) else {
        return fail(libc::ENOSYS, -1);
    };
    // SAFETY: forwarding the caller's argument.
    let new = unsafe { f(fd) };
    track_dup(fd, new);
    new
}

/// # Safety
/// As `dup2(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    let Some(f) = real!(c"dup2", unsafe extern "C" fn(c_int, c_int) -> c_int) else {
        return fail(libc::ENOSYS, -1);
    };
    // SAFETY: forwarding the caller's arguments.
    let result = unsafe { f(old, new) };
    if result >= 0 && old != new {
        if let Some(shim) = shim_if_ready() {
            shim.remove_fd(new);
        }
        track_dup(old, new);
    }
    result
}

/// # Safety
/// As `dup3(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let Some(f) = real!(c"dup3", unsafe extern "C" fn(c_int, c_int, c_int) -> c_int) else {
        return fail(libc::ENOSYS, -1);
    };
    // SAFETY: forwarding the caller's arguments.
    let result = unsafe { f(old, new, flags) };
    if result >= 0 {
        if let Some(shim) = shim_if_ready() {
            shim.remove_fd(new);
        }
        track_dup(old, new);
    }
    result
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
        if let Some(mode) = shim_if_ready().and_then(|s| s.access_mode_of(fd, true)) {
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
    fcntl_common("fcntl", real!(c"fcntl", FcntlFn), fd, cmd, arg)
}

/// # Safety
/// As `fcntl64(2)`.
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    fcntl_common("fcntl64", real!(c"fcntl64", FcntlFn), fd, cmd, arg)
}

/// # Safety
/// As `ioctl(2)`.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    if let Some(shim) = shim_if_ready() {
        if let Some(file) = shim.file_of(fd) {
            return match file.ioctl(request, arg as u64) {
                Ok(result) => result,
                Err(errno) => fail(errno.0, -1),
            };
        }
        // A sync file this device exported: its status (how fence errors
        // reach userspace).
        if request == c_ulong::from(agx_uapi::drm::SYNC_IOC_FILE_INFO) {
            if let Some(result) = shim.sync_file_info(fd, arg) {
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
            let Some(f) = real!($symbol, unsafe extern "C" fn(c_int, $($ty),*) -> libc::ssize_t)
            else {
                return fail(libc::ENOSYS, -1);
            };
            // SAFETY: forwarding the caller's arguments.
            let result = unsafe { f(fd, $($arg),*) };
            write_errno(fd, result)
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
    if let Some(file) = shim_if_ready().and_then(|s| s.file_of(fd)) {
        return map_object(&file, addr, len, prot, flags, offset);
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe { real_mmap(addr, len, prot, flags, fd, offset) }
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
    mmap_common(addr, len, prot, flags, fd, offset)
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
    mmap_common(addr, len, prot, flags, fd, offset)
}

fn char_device_stat() -> libc::stat64 {
    // SAFETY: stat64 is plain data; all-zero is a valid value.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    st.st_mode = libc::S_IFCHR | 0o666;
    st.st_rdev = libc::makedev(RENDER_NODE_DEV.0, RENDER_NODE_DEV.1);
    st.st_nlink = 1;
    st.st_blksize = 4096;
    st
}

fn directory_stat() -> libc::stat64 {
    // SAFETY: stat64 is plain data; all-zero is a valid value.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    st.st_mode = libc::S_IFDIR | 0o755;
    st.st_nlink = 2;
    st.st_blksize = 4096;
    st
}

/// The fake stat of a path, if the path is the device's.
fn fake_path_stat(path: Option<&str>) -> Option<libc::stat64> {
    if is_node(path) {
        Some(char_device_stat())
    } else if is_sysfs(path) {
        Some(directory_stat())
    } else {
        None
    }
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
    ($name:ident, $symbol:literal) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, buf: *mut c_void) -> c_int {
            // SAFETY: the caller passes a C string.
            if let Some(st) = fake_path_stat(unsafe { path_of(path) }) {
                // SAFETY: the caller passes a stat buffer.
                return unsafe { write_stat(buf, st) };
            }
            match real!(
                $symbol,
                unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int
            ) {
                // SAFETY: forwarding the caller's arguments.
                Some(f) => unsafe { f(path, buf) },
                None => fail(libc::ENOSYS, -1),
            }
        }
    };
}

stat_path_fn!(stat, c"stat");
stat_path_fn!(stat64, c"stat64");
stat_path_fn!(lstat, c"lstat");
stat_path_fn!(lstat64, c"lstat64");

macro_rules! stat_fd_fn {
    ($name:ident, $symbol:literal) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, buf: *mut c_void) -> c_int {
            if shim_if_ready().is_some_and(|s| s.is_ours(fd)) {
                // SAFETY: the caller passes a stat buffer.
                return unsafe { write_stat(buf, char_device_stat()) };
            }
            match real!($symbol, unsafe extern "C" fn(c_int, *mut c_void) -> c_int) {
                // SAFETY: forwarding the caller's arguments.
                Some(f) => unsafe { f(fd, buf) },
                None => fail(libc::ENOSYS, -1),
            }
        }
    };
}

stat_fd_fn!(fstat, c"fstat");
stat_fd_fn!(fstat64, c"fstat64");

/// # Safety
/// As `fstatat(2)`.
#[no_mangle]
pub unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_void,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller passes a C string.
    let p = unsafe { path_of(path) };
    if let Some(st) = fake_path_stat(p) {
        // SAFETY: the caller passes a stat buffer.
        return unsafe { write_stat(buf, st) };
    }
    if p == Some("")
        && flags & libc::AT_EMPTY_PATH != 0
        && shim_if_ready().is_some_and(|s| s.is_ours(dirfd))
    {
        // SAFETY: the caller passes a stat buffer.
        return unsafe { write_stat(buf, char_device_stat()) };
    }
    match real!(
        c"fstatat64",
        unsafe extern "C" fn(c_int, *const c_char, *mut c_void, c_int) -> c_int
    ) {
        // SAFETY: forwarding the caller's arguments.
        Some(f) => unsafe { f(dirfd, path, buf, flags) },
        None => fail(libc::ENOSYS, -1),
    }
}

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
    // SAFETY: the caller passes a C string.
    let p = unsafe { path_of(path) };
    let ours = p == Some("")
        && flags & libc::AT_EMPTY_PATH != 0
        && shim_if_ready().is_some_and(|s| s.is_ours(dirfd));
    if let Some(st) = fake_path_stat(p).or_else(|| ours.then(char_device_stat)) {
        if buf.is_null() {
            return fail(libc::EFAULT, -1);
        }
        // SAFETY: statx is plain data; all-zero is a valid value.
        let mut sx: libc::statx = unsafe { std::mem::zeroed() };
        sx.stx_mask = libc::STATX_BASIC_STATS;
        sx.stx_mode = st.st_mode as u16;
        sx.stx_nlink = st.st_nlink as u32;
        sx.stx_blksize = st.st_blksize as u32;
        sx.stx_rdev_major = libc::major(st.st_rdev);
        sx.stx_rdev_minor = libc::minor(st.st_rdev);
        // SAFETY: the caller passes a statx buffer.
        unsafe { buf.write(sx) };
        return 0;
    }
    match real!(
        c"statx",
        unsafe extern "C" fn(c_int, *const c_char, c_int, libc::c_uint, *mut libc::statx) -> c_int
    ) {
        // SAFETY: forwarding the caller's arguments.
        Some(f) => unsafe { f(dirfd, path, flags, mask, buf) },
        None => fail(libc::ENOSYS, -1),
    }
}

/// # Safety
/// As `access(2)`.
#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: the caller passes a C string.
    if fake_path_stat(unsafe { path_of(path) }).is_some() {
        return 0;
    }
    match real!(
        c"access",
        unsafe extern "C" fn(*const c_char, c_int) -> c_int
    ) {
        // SAFETY: forwarding the caller's arguments.
        Some(f) => unsafe { f(path, mode) },
        None => fail(libc::ENOSYS, -1),
    }
}
