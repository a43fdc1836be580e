//! Who is at the other end of a Unix socket: `SO_PEERCRED`.
//!
//! The kernel reports the peer's process as seen from the reader's pid
//! namespace, and as 0 when it cannot be seen there (a peer in an
//! ancestor namespace). rustix's `UCred` holds the pid as a non-zero type,
//! so reading such an answer through it would be undefined behaviour;
//! this reads the raw `struct ucred` instead. The device needs the
//! caller's process (it refuses a peer without one); a client needs only
//! the device's user.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// A socket peer's credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Its process, in this process's pid namespace (`None`: not visible
    /// there).
    pub pid: Option<u32>,
    /// Its user.
    pub uid: u32,
}

/// The credentials of `socket`'s peer, taken when it connected.
pub fn credentials(socket: BorrowedFd<'_>) -> io::Result<Peer> {
    let mut credentials = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `credentials` is a valid, writable `struct ucred` and `len`
    // says its size; the kernel writes at most that many bytes and
    // updates `len`. Every bit pattern is a valid `ucred`.
    let result = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::addr_of_mut!(credentials).cast(),
            &mut len,
        )
    };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != std::mem::size_of::<libc::ucred>() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(Peer {
        pid: (credentials.pid > 0).then_some(credentials.pid.unsigned_abs()),
        uid: credentials.uid,
    })
}
