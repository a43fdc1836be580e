//! Leaving the starting client behind: a device process started by a
//! client inherits that client's working directory and every descriptor
//! it did not mark close-on-exec (a pipe a test harness waits to see
//! closed, a file on a mount someone wants to unmount). [`detach`] lets
//! go of them before the device starts.
#![allow(unsafe_code)]

/// Moves to `/` and closes every descriptor but standard input, output
/// and error.
pub fn detach() -> std::io::Result<()> {
    std::env::set_current_dir("/")?;
    // SAFETY: closes descriptors 3 and up, which nothing in this process
    // owns yet: the device calls this first thing, before it opens any
    // (the standard library's own descriptors are made on demand).
    let closed = unsafe { libc::close_range(3, libc::c_uint::MAX, 0) };
    if closed != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
