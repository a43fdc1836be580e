//! Copying to and from user memory.
//!
//! Ioctl arguments are user pointers: the argument struct itself and the
//! pointers embedded in it (GET_PARAMS' `pointer`, VM_BIND's `userptr`,
//! syncobj handle arrays...). The kernel's `copy_from_user` and
//! `copy_to_user` turn a bad pointer into `EFAULT` instead of a crash; so
//! do these, by letting the host kernel do the copy (`process_vm_readv` /
//! `process_vm_writev` on this process, or through a pipe where those are
//! not permitted), which reports `EFAULT` for unmapped memory.
//!
//! When the device serves a client in another process (the shim's device
//! process), the ioctl's thread is given that client's [`UserSpace`] for
//! the call ([`with_user_space`]): the copies, the descriptors the
//! caller passes in (`fget`) and the ones it gets back (`fd_install`)
//! then reach the client's process instead of this one.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::OnceLock;

/// The memory and descriptor table of a calling process other than this
/// one.
pub trait UserSpace {
    /// Reads `buf.len()` bytes at `address` of the caller's memory.
    fn read(&self, address: u64, buf: &mut [u8]) -> Result<(), Fault>;
    /// Writes `data` at `address` of the caller's memory.
    fn write(&self, address: u64, data: &[u8]) -> Result<(), Fault>;
    /// The file the caller's descriptor `fd` refers to; `None` if it is
    /// not open.
    fn take_fd(&self, fd: i32) -> Option<OwnedFd>;
    /// Gives the caller a descriptor of `fd`'s file (close-on-exec as
    /// `fd` is) and returns its number there.
    fn install_fd(&self, fd: OwnedFd) -> Result<i32, InstallError>;
}

/// A descriptor could not be given to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InstallError {
    /// Its descriptor table is full (or it went away).
    #[error("the caller has no descriptor free")]
    NoDescriptor,
}

thread_local! {
    /// The caller's user space while [`with_user_space`] runs on this
    /// thread. A plain pointer, so that the slot needs no destructor: it
    /// stays readable at every point of a thread's life, including its
    /// thread-local destructors and the process's exit handlers, where a
    /// DRM client may still make calls (Mesa destroys its context from
    /// one). A slot with a destructor would be gone there, and reading it
    /// would panic.
    static USER_SPACE: Cell<Option<NonNull<dyn UserSpace>>> = const { Cell::new(None) };
}

/// Runs `call` (an ioctl) with `space` as the caller's user space on this
/// thread.
pub fn with_user_space<R>(space: Rc<dyn UserSpace>, call: impl FnOnce() -> R) -> R {
    /// Puts the previous space back when the call returns or unwinds.
    struct Restore(Option<NonNull<dyn UserSpace>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            USER_SPACE.with(|cell| cell.set(self.0));
        }
    }
    let current = NonNull::from(&*space);
    // `_restore`, a local, is dropped before `space`, a parameter: the slot
    // is restored before the value it points to can go.
    let _restore = Restore(USER_SPACE.with(|cell| cell.replace(Some(current))));
    call()
}

/// Calls `look` with the user space [`with_user_space`] set on this
/// thread, if any.
fn with_current_user_space<R>(look: impl FnOnce(Option<&dyn UserSpace>) -> R) -> R {
    let current = USER_SPACE.with(Cell::get);
    // SAFETY: a pointer in the slot was made by `with_user_space` on this
    // thread from the `Rc` it holds, and it takes it out of the slot
    // before that `Rc` is dropped; the slot is per thread, so while this
    // thread runs here that `with_user_space` call is still on its stack
    // and the value is alive. It is only read through a shared reference.
    look(current.map(|pointer| unsafe { pointer.as_ref() }))
}

/// A user address that could not be read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("bad user address {address:#x} ({len_bytes} bytes)")]
pub struct Fault {
    /// The start of the access.
    pub address: u64,
    /// Its length.
    pub len_bytes: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Method {
    ProcessVm,
    Pipe,
}

fn method() -> Method {
    static METHOD: OnceLock<Method> = OnceLock::new();
    *METHOD.get_or_init(|| {
        let probe = [1u8; 8];
        let mut out = [0u8; 8];
        match process_vm(probe.as_ptr() as u64, out.as_mut_ptr() as u64, 8, false) {
            Ok(()) if out == probe => Method::ProcessVm,
            _ => Method::Pipe,
        }
    })
}

/// Copies `len` bytes from `src` to `dst` (one of them our buffer) with
/// process_vm_readv/writev; `write` says which side is the user's.
fn process_vm(src: u64, dst: u64, len: usize, write: bool) -> io::Result<()> {
    process_vm_of(this_pid(), src, dst, len, write)
}

/// This process's id.
fn this_pid() -> libc::pid_t {
    libc::pid_t::try_from(std::process::id()).unwrap_or(libc::pid_t::MAX)
}

/// [`process_vm`] on `pid`, this process's id.
fn process_vm_of(pid: libc::pid_t, src: u64, dst: u64, len: usize, write: bool) -> io::Result<()> {
    let local = libc::iovec {
        iov_base: if write { src } else { dst } as *mut libc::c_void,
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: if write { dst } else { src } as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: the iovecs describe `len` bytes; the host kernel checks the
    // remote range (which may be invalid, giving EFAULT) and the local one
    // is a live Rust buffer of at least `len` bytes (guaranteed by the
    // callers). The process is our own (the callers' `pid`).
    let n = unsafe {
        if write {
            libc::process_vm_writev(pid, &local, 1, &remote, 1, 0)
        } else {
            libc::process_vm_readv(pid, &local, 1, &remote, 1, 0)
        }
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != len {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(())
}

/// Copies through a pipe: the host kernel reads the source (and writes the
/// destination) with its own fault handling.
fn via_pipe(src: u64, dst: u64, len: usize) -> io::Result<()> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 returns.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 just created these descriptors; nothing else owns them.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut done = 0usize;
    while done < len {
        let chunk = (len - done).min(4096);
        // SAFETY: writing `chunk` bytes starting at src + done; the host
        // kernel validates the range and returns EFAULT if it is bad.
        let wrote = unsafe {
            libc::write(
                write_end.as_raw_fd(),
                (src as usize + done) as *const libc::c_void,
                chunk,
            )
        };
        if wrote < 0 {
            return Err(io::Error::last_os_error());
        }
        let wrote = wrote as usize;
        let mut read = 0;
        while read < wrote {
            // SAFETY: reading into dst + done + read, for at most the bytes
            // in the pipe; the host kernel validates the destination.
            let got = unsafe {
                libc::read(
                    read_end.as_raw_fd(),
                    (dst as usize + done + read) as *mut libc::c_void,
                    wrote - read,
                )
            };
            if got <= 0 {
                return Err(io::Error::from_raw_os_error(libc::EFAULT));
            }
            read += got as usize;
        }
        done += wrote;
    }
    Ok(())
}

fn copy(src: u64, dst: u64, len: usize, user_is_dst: bool) -> Result<(), Fault> {
    copy_as(None, src, dst, len, user_is_dst)
}

/// [`copy`], with this process's id when the caller knows it.
fn copy_as(
    pid: Option<libc::pid_t>,
    src: u64,
    dst: u64,
    len: usize,
    user_is_dst: bool,
) -> Result<(), Fault> {
    if len == 0 {
        return Ok(());
    }
    let user = if user_is_dst { dst } else { src };
    let fault = Fault {
        address: user,
        len_bytes: len,
    };
    if user == 0 || user.checked_add(len as u64).is_none() {
        return Err(fault);
    }
    with_current_user_space(|space| {
        if let Some(space) = space {
            // SAFETY: the kernel side's buffer is a live Rust buffer of
            // `len` bytes at `src` (or `dst`), as the callers guarantee.
            return unsafe {
                if user_is_dst {
                    space.write(dst, std::slice::from_raw_parts(src as *const u8, len))
                } else {
                    space.read(src, std::slice::from_raw_parts_mut(dst as *mut u8, len))
                }
            };
        }
        let result = match method() {
            Method::ProcessVm => match pid {
                Some(pid) => process_vm_of(pid, src, dst, len, user_is_dst),
                None => process_vm(src, dst, len, user_is_dst),
            },
            Method::Pipe => via_pipe(src, dst, len),
        };
        result.map_err(|_| fault)
    })
}

/// Takes a reference to a file descriptor the caller passed in an ioctl
/// (as the kernel's `fget` does): a duplicate that stays valid whatever
/// the caller does with its own. `None` if `fd` is not an open
/// descriptor.
pub fn dup_user_fd(fd: i32) -> Option<OwnedFd> {
    if fd < 0 {
        return None;
    }
    with_current_user_space(|space| {
        if let Some(space) = space {
            return space.take_fd(fd);
        }
        // SAFETY: F_DUPFD_CLOEXEC on an arbitrary integer is safe: the
        // host kernel checks it and fails with EBADF if it is not open.
        let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if new < 0 {
            return None;
        }
        // SAFETY: `new` is a descriptor fcntl just created for us.
        Some(unsafe { OwnedFd::from_raw_fd(new) })
    })
}

/// Gives the caller `fd` (as the kernel's `fd_install` does) and returns
/// the number it has there.
pub fn install_user_fd(fd: OwnedFd) -> Result<i32, InstallError> {
    with_current_user_space(|space| match space {
        Some(space) => space.install_fd(fd),
        None => Ok(fd.into_raw_fd()),
    })
}

/// Reads `buf.len()` bytes from user address `address`.
pub fn copy_from_user(buf: &mut [u8], address: u64) -> Result<(), Fault> {
    copy(address, buf.as_mut_ptr() as u64, buf.len(), false)
}

/// Writes `data` to user address `address`.
pub fn copy_to_user(address: u64, data: &[u8]) -> Result<(), Fault> {
    copy(data.as_ptr() as u64, address, data.len(), true)
}

/// This process's own memory, reached as user memory is (a bad address
/// is a [`Fault`], not a crash), for a caller that copies several times
/// in a row (the device process's client, whose calls read their
/// argument and write its copy-out): the process id is looked up once,
/// not at each copy. Valid in the process that made it (a forked child
/// makes its own).
#[derive(Debug, Clone, Copy)]
pub struct OwnMemory {
    pid: libc::pid_t,
}

impl OwnMemory {
    /// This process's memory.
    pub fn new() -> OwnMemory {
        OwnMemory { pid: this_pid() }
    }

    /// The process id it was made with.
    pub fn pid(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// Reads `buf.len()` bytes at `address`.
    pub fn read(&self, buf: &mut [u8], address: u64) -> Result<(), Fault> {
        copy_as(
            Some(self.pid),
            address,
            buf.as_mut_ptr() as u64,
            buf.len(),
            false,
        )
    }

    /// Writes `data` at `address`.
    pub fn write(&self, address: u64, data: &[u8]) -> Result<(), Fault> {
        copy_as(
            Some(self.pid),
            data.as_ptr() as u64,
            address,
            data.len(),
            true,
        )
    }
}

impl Default for OwnMemory {
    fn default() -> Self {
        OwnMemory::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_and_faults() {
        let source = *b"user data";
        let mut buf = [0u8; 9];
        copy_from_user(&mut buf, source.as_ptr() as u64).unwrap();
        assert_eq!(&buf, b"user data");
        let mut target = [0u8; 4];
        copy_to_user(target.as_mut_ptr() as u64, b"abcd").unwrap();
        assert_eq!(&target, b"abcd");
        assert_eq!(copy_from_user(&mut buf, 0).unwrap_err().address, 0);
        assert!(copy_from_user(&mut buf, 16).is_err());
        assert!(copy_to_user(u64::MAX - 2, b"abcd").is_err());
        // The read-only text of this function is not writable.
        let code = copies_and_faults as *const () as u64;
        assert!(copy_to_user(code, b"x").is_err());
        // The same through OwnMemory.
        let own = OwnMemory::new();
        assert_eq!(own.pid(), std::process::id());
        let mut buf = [0u8; 9];
        own.read(&mut buf, source.as_ptr() as u64).unwrap();
        assert_eq!(&buf, b"user data");
        let mut target = [0u8; 4];
        own.write(target.as_mut_ptr() as u64, b"wxyz").unwrap();
        assert_eq!(&target, b"wxyz");
        assert!(own.read(&mut buf, 16).is_err());
        assert!(own.write(code, b"x").is_err());
    }

    /// A caller in another process, modelled as memory at address 0x1000
    /// and a table of descriptors.
    struct OtherProcess {
        memory: std::cell::RefCell<Vec<u8>>,
        installed: std::cell::RefCell<Vec<OwnedFd>>,
    }

    impl UserSpace for OtherProcess {
        fn read(&self, address: u64, buf: &mut [u8]) -> Result<(), Fault> {
            let fault = Fault {
                address,
                len_bytes: buf.len(),
            };
            let at = address.checked_sub(0x1000).ok_or(fault)? as usize;
            let memory = self.memory.borrow();
            buf.copy_from_slice(memory.get(at..at + buf.len()).ok_or(fault)?);
            Ok(())
        }
        fn write(&self, address: u64, data: &[u8]) -> Result<(), Fault> {
            let fault = Fault {
                address,
                len_bytes: data.len(),
            };
            let at = address.checked_sub(0x1000).ok_or(fault)? as usize;
            let mut memory = self.memory.borrow_mut();
            memory
                .get_mut(at..at + data.len())
                .ok_or(fault)?
                .copy_from_slice(data);
            Ok(())
        }
        fn take_fd(&self, fd: i32) -> Option<OwnedFd> {
            // The other process's descriptor 7: standard input here.
            use std::os::fd::AsFd;
            (fd == 7)
                .then(|| rustix::io::fcntl_dupfd_cloexec(std::io::stdin().as_fd(), 0).ok())
                .flatten()
        }
        fn install_fd(&self, fd: OwnedFd) -> Result<i32, InstallError> {
            let mut installed = self.installed.borrow_mut();
            installed.push(fd);
            Ok(100 + installed.len() as i32)
        }
    }

    #[test]
    fn a_user_space_elsewhere_gets_the_copies_and_descriptors() {
        let other = Rc::new(OtherProcess {
            memory: std::cell::RefCell::new(b"remote bytes".to_vec()),
            installed: std::cell::RefCell::new(Vec::new()),
        });
        let local = *b"local";
        with_user_space(other.clone(), || {
            let mut buf = [0u8; 6];
            copy_from_user(&mut buf, 0x1000).unwrap();
            assert_eq!(&buf, b"remote");
            copy_to_user(0x1000, b"REMOTE").unwrap();
            // This process's memory is not the caller's.
            let mut mine = [0u8; 5];
            assert!(copy_from_user(&mut mine, local.as_ptr() as u64).is_err());
            assert!(copy_from_user(&mut mine, 0x1000 + 100).is_err());
            assert!(dup_user_fd(7).is_some());
            assert!(dup_user_fd(0).is_none(), "the caller's table, not ours");
            let fd = dup_user_fd(7).unwrap();
            assert_eq!(install_user_fd(fd), Ok(101));
        });
        assert_eq!(&other.memory.borrow()[..6], b"REMOTE");
        assert_eq!(other.installed.borrow().len(), 1);
        // Back to this process once the call is over.
        let mut buf = [0u8; 5];
        copy_from_user(&mut buf, local.as_ptr() as u64).unwrap();
        assert_eq!(&buf, b"local");
    }

    #[test]
    fn the_pipe_fallback_behaves_the_same() {
        let source = *b"pipe";
        let mut buf = [0u8; 4];
        via_pipe(source.as_ptr() as u64, buf.as_mut_ptr() as u64, 4).unwrap();
        assert_eq!(&buf, b"pipe");
        assert!(via_pipe(16, buf.as_mut_ptr() as u64, 4).is_err());
        let big = vec![7u8; 10_000];
        let mut out = vec![0u8; 10_000];
        via_pipe(big.as_ptr() as u64, out.as_mut_ptr() as u64, 10_000).unwrap();
        assert_eq!(big, out);
    }
}
