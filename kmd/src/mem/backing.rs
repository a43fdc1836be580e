//! Shared memory that backs simulated physical memory.
//!
//! Every allocation of simulated RAM is its own memfd, mapped shared into
//! this process: the kmd and the simulated GPU read and write it through
//! that mapping, a client maps the same pages through the DRM file or a
//! PRIME fd, and another process can map it too. Like real RAM shared by a
//! CPU and a GPU, concurrent accesses are not ordered against each other;
//! the driver's fences order them.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

/// A memfd of a fixed size, mapped read-write and shared.
#[derive(Debug)]
pub struct Backing {
    fd: OwnedFd,
    base: NonNull<u8>,
    len_bytes: usize,
}

// SAFETY: `base` points at a MAP_SHARED mapping owned by this value for its
// whole life; it is only accessed through `read`/`write`, which copy bytes
// within bounds. Concurrent copies from several threads are the simulated
// equivalent of concurrent bus accesses and cannot violate Rust memory
// safety: no Rust reference into the mapping is ever handed out.
unsafe impl Send for Backing {}
// SAFETY: as above; `&Backing` only allows bounded byte copies.
unsafe impl Sync for Backing {}

impl Backing {
    /// Creates a memfd of `len_bytes` (zero-filled) and maps it.
    pub fn new(name: &str, len_bytes: usize) -> io::Result<Backing> {
        if len_bytes == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let name = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: `name` is a valid NUL-terminated string; memfd_create has
        // no other preconditions.
        let raw = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a freshly created fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let len = libc::off_t::try_from(len_bytes)
            .map_err(|_| io::Error::from_raw_os_error(libc::ENOMEM))?;
        // SAFETY: `fd` is a valid memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Backing::map(fd, len_bytes)
    }

    /// Maps an existing memfd (for instance one another process or system
    /// exported), all of it. Its size must be a whole number of pages the
    /// caller accepts; it cannot shrink afterwards (the seals say so), so
    /// accesses cannot run past its end.
    pub fn from_fd(fd: OwnedFd) -> io::Result<Backing> {
        let stat = rustix::fs::fstat(&fd)?;
        let len_bytes = usize::try_from(stat.st_size)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        if len_bytes == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // Forbid shrinking, so the mapping never extends past the file.
        // SAFETY: fcntl on a valid fd with F_ADD_SEALS and an int argument.
        let sealed = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
        // SAFETY: fcntl on a valid fd with F_GET_SEALS.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if sealed != 0 || seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Backing::map(fd, len_bytes)
    }

    fn map(fd: OwnedFd, len_bytes: usize) -> io::Result<Backing> {
        // SAFETY: mapping a valid fd of at least `len_bytes` bytes at a
        // kernel-chosen address; the result is checked for MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(Backing {
            fd,
            base,
            len_bytes,
        })
    }

    /// The size in bytes.
    pub fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    /// The memfd, for mapping elsewhere or exporting.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn check(&self, offset: usize, len: usize) -> Option<()> {
        (offset.checked_add(len)? <= self.len_bytes).then_some(())
    }

    /// Copies bytes out; `None` if the range is outside the backing.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Option<()> {
        self.check(offset, buf.len())?;
        // SAFETY: the range [offset, offset + len) lies inside the mapping
        // (checked above) and `buf` is a distinct Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.as_ptr().add(offset),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        Some(())
    }

    /// Copies bytes in; `None` if the range is outside the backing.
    pub fn write(&self, offset: usize, data: &[u8]) -> Option<()> {
        self.check(offset, data.len())?;
        // SAFETY: the range lies inside the mapping (checked above) and
        // `data` is a distinct Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.as_ptr().add(offset), data.len())
        };
        Some(())
    }

    /// Fills a range with zeros; `None` if it is outside the backing.
    pub fn zero(&self, offset: usize, len: usize) -> Option<()> {
        self.check(offset, len)?;
        // SAFETY: the range lies inside the mapping (checked above).
        unsafe { std::ptr::write_bytes(self.base.as_ptr().add(offset), 0, len) };
        Some(())
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        // SAFETY: `base`/`len_bytes` describe the mapping created in `new`,
        // which nothing else unmaps.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len_bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_what_was_written_and_refuses_out_of_bounds() {
        let backing = Backing::new("test", 16384).unwrap();
        assert_eq!(backing.len_bytes(), 16384);
        backing.write(100, &[1, 2, 3]).unwrap();
        let mut buf = [0u8; 4];
        backing.read(99, &mut buf).unwrap();
        assert_eq!(buf, [0, 1, 2, 3]);
        assert!(backing.read(16383, &mut buf).is_none());
        assert!(backing.write(usize::MAX, &[1]).is_none());
        backing.zero(100, 3).unwrap();
        backing.read(99, &mut buf).unwrap();
        assert_eq!(buf, [0; 4]);
    }

    #[test]
    fn a_second_mapping_of_the_fd_sees_the_same_pages() {
        let backing = Backing::new("shared", 16384).unwrap();
        backing.write(0, b"hello").unwrap();
        let len: libc::off_t = 16384;
        let dup = backing.fd().try_clone_to_owned().unwrap();
        // SAFETY: fd is a valid memfd of 16384 bytes.
        let size = unsafe { libc::lseek(dup.as_raw_fd(), 0, libc::SEEK_END) };
        assert_eq!(size, len);
        let mut buf = [0u8; 5];
        // SAFETY: reading 5 bytes at offset 0 of a valid fd into a 5-byte buffer.
        let n = unsafe { libc::pread(dup.as_raw_fd(), buf.as_mut_ptr().cast(), 5, 0) };
        assert_eq!(n, 5);
        assert_eq!(&buf, b"hello");
    }
}
