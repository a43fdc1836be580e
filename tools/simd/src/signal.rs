//! Interrupting a thread of the device process, as a signal interrupts a
//! process blocked in an ioctl.
//!
//! A client's signal that interrupts its wait for a request is passed to
//! the device, which sends [`INTERRUPT_SIGNAL`] to the thread running the
//! request. Its handler does nothing and does not ask for restarts, so a
//! blocking wait in the kmd (a `FUTEX_WAIT`) ends with `EINTR` and the
//! ioctl fails with it, as the kernel's would for a handler without
//! `SA_RESTART`; every other system call of the device's threads retries
//! on `EINTR`.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::io;
use std::sync::Mutex;

/// The signal that interrupts a request's thread.
pub const INTERRUPT_SIGNAL: i32 = libc::SIGUSR1;

extern "C" fn do_nothing(_signal: libc::c_int) {}

/// Installs the handler of [`INTERRUPT_SIGNAL`] (without `SA_RESTART`).
pub fn install_interrupt_handler() -> io::Result<()> {
    // SAFETY: a zeroed sigaction is valid plain data; the handler only
    // returns (async-signal-safe), and the pointers passed are valid.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = do_nothing as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = 0;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(INTERRUPT_SIGNAL, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The threads running a DRM file's requests, by request id.
#[derive(Debug, Default)]
pub struct Running {
    threads: Mutex<HashMap<u64, libc::pthread_t>>,
}

/// A request's thread, registered until dropped.
#[derive(Debug)]
pub struct Entered<'a> {
    running: &'a Running,
    id: u64,
}

impl Running {
    fn threads(&self) -> std::sync::MutexGuard<'_, HashMap<u64, libc::pthread_t>> {
        self.threads.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the calling thread as running request `id` until the
    /// returned guard drops (which the thread does before it ends).
    pub fn enter(&self, id: u64) -> Entered<'_> {
        // SAFETY: pthread_self has no preconditions.
        let thread = unsafe { libc::pthread_self() };
        self.threads().insert(id, thread);
        Entered { running: self, id }
    }

    /// Interrupts the thread running request `id`, if one is.
    pub fn interrupt(&self, id: u64) {
        if let Some(&thread) = self.threads().get(&id) {
            kill(thread);
        }
    }

    /// Interrupts every request's thread.
    pub fn interrupt_all(&self) {
        for &thread in self.threads().values() {
            kill(thread);
        }
    }
}

/// Sends [`INTERRUPT_SIGNAL`] to `thread`, which the caller found in the
/// registry with its lock held.
fn kill(thread: libc::pthread_t) {
    // SAFETY: the thread is registered, and a thread removes itself (under
    // the same lock, held by our caller) before it ends, so it is alive
    // and its pthread_t valid; the signal has a handler installed.
    unsafe {
        libc::pthread_kill(thread, INTERRUPT_SIGNAL);
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.running.threads().remove(&self.id);
    }
}
