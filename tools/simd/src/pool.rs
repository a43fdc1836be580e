//! Call channels kept between calls.
//!
//! A call on a DRM file runs on a channel of its own (a connection to the
//! device's calls socket), so that concurrent calls from several threads
//! never share a reply stream. Connecting one per call costs a socket, a
//! connection and a device thread each time; instead a process keeps the
//! channels its finished calls leave idle, and the next call takes one.
//!
//! The pool is a fixed array of atomic slots, without a lock: a call made
//! from a signal handler that interrupted another call in the same thread
//! (or from a forked child whose parent held a lock) takes a slot or
//! connects anew, never waits. A slot holds a descriptor number and the
//! low bits of its socket's inode; a kept number is used only while it
//! still names that socket, so a program that closed it behind the shim's
//! back (`close_range` before `exec`, `dup2` over it) loses the channel,
//! never sends a call down a file of its own. A forked child's copies are
//! its parent's connections, which the device credits to the parent and
//! the parent may be using: the child closes them and connects its own.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Idle channels one process keeps at most (more are closed when their
/// call ends).
pub const KEPT_CHANNELS: usize = 8;

/// A process's idle call channels.
#[derive(Debug)]
pub struct ChannelPool {
    /// The process that connected the kept channels (0: none yet).
    owner_pid: AtomicU32,
    /// `(inode low 32 bits) << 32 | (descriptor + 1)`; 0 is an empty slot.
    slots: [AtomicU64; KEPT_CHANNELS],
}

impl Default for ChannelPool {
    fn default() -> Self {
        ChannelPool::new()
    }
}

/// The low 32 bits of the inode of the socket `fd` names, if it names a
/// socket.
fn socket_inode(fd: BorrowedFd<'_>) -> Option<u32> {
    let stat = rustix::fs::fstat(fd).ok()?;
    let is_socket =
        rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Socket;
    is_socket.then_some(stat.st_ino as u32)
}

impl ChannelPool {
    /// An empty pool.
    pub const fn new() -> ChannelPool {
        ChannelPool {
            owner_pid: AtomicU32::new(0),
            slots: [const { AtomicU64::new(0) }; KEPT_CHANNELS],
        }
    }

    /// Makes the pool this process's: in a forked child, closes the kept
    /// channels (the parent's connections) first.
    fn claim(&self) {
        let pid = rustix::process::getpid()
            .as_raw_nonzero()
            .get()
            .unsigned_abs();
        self.claim_as(pid);
    }

    /// [`ChannelPool::claim`], for process `pid`, this one.
    fn claim_as(&self, pid: u32) {
        if self.owner_pid.load(Ordering::Acquire) != pid {
            for slot in &self.slots {
                if let Some(channel) = Self::unpack(slot.swap(0, Ordering::AcqRel)) {
                    drop(channel);
                }
            }
            self.owner_pid.store(pid, Ordering::Release);
        }
    }

    /// The channel a slot's value names, if the descriptor still names
    /// the socket kept there, with that socket's inode.
    fn unpack(value: u64) -> Option<(OwnedFd, u32)> {
        if value == 0 {
            return None;
        }
        let fd = i32::try_from((value & 0xFFFF_FFFF) - 1).ok()?;
        let inode = (value >> 32) as u32;
        // SAFETY: the descriptor is only looked at (fstat); if it is no
        // longer open the call fails and nothing else happens.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        if socket_inode(borrowed) != Some(inode) {
            // Closed or replaced behind the shim's back: not ours to close.
            return None;
        }
        // SAFETY: the slot owned the descriptor (`put` moved it in, and a
        // slot's value is taken out by one swap only), and it still names
        // the socket that was kept, so this is its one owner.
        Some((unsafe { OwnedFd::from_raw_fd(fd) }, inode))
    }

    /// An idle channel of this process, if one is kept.
    pub fn take(&self) -> Option<OwnedFd> {
        let pid = rustix::process::getpid()
            .as_raw_nonzero()
            .get()
            .unsigned_abs();
        self.take_kept(pid).map(|(channel, _)| channel)
    }

    /// An idle channel of this process, whose id the caller gives as
    /// `pid`, and its socket's inode (for [`ChannelPool::put_kept`]), if
    /// one is kept.
    pub fn take_kept(&self, pid: u32) -> Option<(OwnedFd, u32)> {
        self.claim_as(pid);
        self.slots
            .iter()
            .find_map(|slot| match slot.load(Ordering::Relaxed) {
                0 => None,
                _ => Self::unpack(slot.swap(0, Ordering::AcqRel)),
            })
    }

    /// Keeps `channel`, idle, for a later call of this process (closes it
    /// if every slot is taken).
    pub fn put(&self, channel: OwnedFd) {
        self.claim();
        let Some(inode) = socket_inode(channel.as_fd()) else {
            return;
        };
        self.put_kept(channel, inode);
    }

    /// Gives back a channel [`ChannelPool::take_kept`] gave this call,
    /// with the inode it gave: the pool is this process's and the
    /// descriptor names that socket (the call held it), so neither is
    /// looked up again (two system calls fewer per call).
    pub fn put_kept(&self, channel: OwnedFd, inode: u32) {
        let fd = channel.as_raw_fd();
        let value = (u64::from(inode) << 32) | (u64::from(fd.unsigned_abs()) + 1);
        for slot in &self.slots {
            if slot
                .compare_exchange(0, value, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                // The slot owns it now.
                let _ = channel.into_raw_fd();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (OwnedFd, OwnedFd) {
        crate::protocol::channel().unwrap()
    }

    #[test]
    fn kept_channels_come_back_until_the_slots_run_out() {
        let pool = ChannelPool::new();
        assert!(pool.take().is_none());
        let (a, _a_peer) = pair();
        let a_fd = a.as_raw_fd();
        pool.put(a);
        let back = pool.take().expect("the kept channel");
        assert_eq!(back.as_raw_fd(), a_fd);
        assert!(pool.take().is_none(), "taken once");
        // More than the slots: the extra ones are closed.
        let mut peers = Vec::new();
        let mut kept = Vec::new();
        for _ in 0..KEPT_CHANNELS + 2 {
            let (end, peer) = pair();
            kept.push(end.as_raw_fd());
            peers.push(peer);
            pool.put(end);
        }
        let taken: Vec<OwnedFd> = std::iter::from_fn(|| pool.take()).collect();
        assert_eq!(taken.len(), KEPT_CHANNELS);
        drop(taken);
        drop(back);
    }

    #[test]
    fn a_channel_taken_with_its_inode_goes_back_without_a_second_look() {
        let pool = ChannelPool::new();
        let (a, _a_peer) = pair();
        let a_fd = a.as_raw_fd();
        let a_inode = socket_inode(a.as_fd()).unwrap();
        pool.put(a);
        let (back, inode) = pool.take_kept(std::process::id()).expect("kept");
        assert_eq!((back.as_raw_fd(), inode), (a_fd, a_inode));
        pool.put_kept(back, inode);
        let again = pool.take().expect("given back");
        assert_eq!(again.as_raw_fd(), a_fd);
        assert!(pool.take().is_none());
    }

    #[test]
    fn a_descriptor_replaced_behind_the_pools_back_is_not_used() {
        let pool = ChannelPool::new();
        let (a, _a_peer) = pair();
        let a_fd = a.as_raw_fd();
        pool.put(a);
        // Another socket lands on the same number (as after a close and
        // a new socket, or dup2 over it).
        let (b, _b_peer) = pair();
        // SAFETY: dup2 onto a number the pool owns; the pool must then
        // see that it no longer names the kept socket.
        assert_eq!(unsafe { libc::dup2(b.as_raw_fd(), a_fd) }, a_fd);
        assert!(pool.take().is_none(), "the number names another socket");
        // The number is the program's now, still open: the pool did not
        // close it.
        // SAFETY: only looked at.
        let borrowed = unsafe { BorrowedFd::borrow_raw(a_fd) };
        assert!(socket_inode(borrowed).is_some());
        // SAFETY: the test owns the duplicate dup2 made at a_fd.
        drop(unsafe { OwnedFd::from_raw_fd(a_fd) });
    }
}
