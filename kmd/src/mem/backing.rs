//! Host memory behind simulated RAM, and the descriptors the device keeps.
//!
//! Simulated RAM is one window of host address space, as large as the
//! RAM, through which the kmd and the simulated GPU reach every physical
//! address at a fixed offset ([`Window`]). The window maps one sparse
//! shared-memory object, the *pool*, which holds kernel memory; every GEM
//! object has a memfd of its own instead, mapped over its place in the
//! window, so that a CPU mapping of it holds the object's own pages and a
//! PRIME fd maps exactly that object.
//!
//! A client's CPU mapping of an object is a second mapping of the same
//! pages, made by duplicating the window's range (`mremap` with an old
//! size of 0): it needs no descriptor, and a client that closes every
//! descriptor it did not open cannot disturb it. The few
//! descriptors the device does keep (an exportable object's memfd, a
//! pending sync file, a capture file) are [`DeviceFd`]s: placed high, out
//! of the way of the client's own numbers, and re-validated before each
//! use, so that if the client closed one and the number now names another
//! file, the device reports an error instead of touching that file.
//!
//! The window is memory other threads (the GPU's workers, the client's
//! CPU mappings) and other processes (an importer of a PRIME fd) write
//! concurrently. As rust-vmm's `vm-memory` does for guest memory, no Rust
//! reference into it is ever made: every access is a volatile load or
//! store of an aligned primitive, or an atomic operation.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// Identifies a file across descriptors: (device, inode).
pub type Inode = (u64, u64);

/// The lowest number a descriptor the device keeps may take; 0 until
/// [`set_descriptor_floor`] is called.
static DESCRIPTOR_FLOOR: AtomicI32 = AtomicI32::new(0);

/// Places every descriptor the device keeps from now on at `floor` or
/// above (the shim puts them above the client's usual range).
pub fn set_descriptor_floor(floor: RawFd) {
    DESCRIPTOR_FLOOR.store(floor.max(0), Ordering::Relaxed);
}

/// The current floor.
pub fn descriptor_floor() -> RawFd {
    DESCRIPTOR_FLOOR.load(Ordering::Relaxed)
}

fn identity(fd: BorrowedFd<'_>) -> io::Result<Inode> {
    let stat = rustix::fs::fstat(fd)?;
    Ok((stat.st_dev, stat.st_ino))
}

/// A descriptor the device keeps was closed behind its back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("descriptor {fd} no longer refers to the device's file: the process closed it")]
pub struct DescriptorGone {
    /// The number the device had.
    pub fd: RawFd,
}

impl From<DescriptorGone> for io::Error {
    fn from(_: DescriptorGone) -> io::Error {
        io::Error::from_raw_os_error(libc::EBADF)
    }
}

/// A descriptor the device keeps: moved to the descriptor floor or above
/// and checked to still name the same file (device and inode) before
/// every use. It is closed on drop only if it still does.
#[derive(Debug)]
pub struct DeviceFd {
    raw: RawFd,
    identity: Inode,
}

impl DeviceFd {
    /// Takes `fd`, moving it to the descriptor floor or above (where the
    /// process's limit allows; otherwise the lowest free number).
    pub fn keep(fd: OwnedFd) -> io::Result<DeviceFd> {
        let identity = identity(fd.as_fd())?;
        let floor = descriptor_floor();
        let moved = if fd.as_raw_fd() >= floor {
            fd
        } else {
            match rustix::io::fcntl_dupfd_cloexec(&fd, floor) {
                Ok(high) => high,
                // The floor is past the process's limit: keep it where it is.
                Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::MFILE) => fd,
                Err(e) => return Err(e.into()),
            }
        };
        Ok(DeviceFd {
            raw: std::os::fd::IntoRawFd::into_raw_fd(moved),
            identity,
        })
    }

    /// The file's identity, recorded when it was kept.
    pub fn identity(&self) -> Inode {
        self.identity
    }

    /// The descriptor, if it still names the file it named when kept.
    pub fn get(&self) -> Result<BorrowedFd<'_>, DescriptorGone> {
        // SAFETY: `raw` is a number this value was given; if the process
        // closed it, `fstat` on it fails or names another file, both of
        // which are reported below. The borrow never outlives `self`.
        let fd = unsafe { BorrowedFd::borrow_raw(self.raw) };
        match identity(fd) {
            Ok(found) if found == self.identity => Ok(fd),
            _ => Err(DescriptorGone { fd: self.raw }),
        }
    }

    /// A new descriptor of the same file at the lowest free number (for
    /// giving to the client).
    pub fn duplicate(&self, cloexec: bool) -> io::Result<OwnedFd> {
        let fd = self.get()?;
        let new = rustix::io::fcntl_dupfd_cloexec(fd, 0)?;
        if !cloexec {
            rustix::io::fcntl_setfd(&new, rustix::io::FdFlags::empty())?;
        }
        Ok(new)
    }
}

impl Drop for DeviceFd {
    fn drop(&mut self) {
        match self.get() {
            Ok(_) => {
                // SAFETY: the number still names the file this value owns.
                unsafe { libc::close(self.raw) };
            }
            Err(gone) => tracing::warn!(%gone, "not closing a descriptor the process reused"),
        }
    }
}

/// Creates a zero-filled memfd of `len_bytes`, which cannot shrink, and
/// whose seals are final: a process the memfd is handed to (a PRIME fd,
/// a CPU mapping's) can neither shrink it under the device's mapping (an
/// access past a file's end is a SIGBUS) nor seal it against the device's
/// own writes (`F_SEAL_WRITE`, `F_SEAL_FUTURE_WRITE`).
pub fn create_memfd(name: &str, len_bytes: u64) -> io::Result<OwnedFd> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    rustix::fs::ftruncate(&fd, len_bytes)?;
    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::SEAL)?;
    Ok(fd)
}

/// The size of a memfd someone else made, sealed so that it cannot
/// shrink under a mapping (an access past a file's end is a SIGBUS).
pub fn sealed_size_bytes(fd: BorrowedFd<'_>) -> io::Result<u64> {
    use rustix::fs::SealFlags;
    // A simulated device's memfd comes sealed (and its seals final).
    if !rustix::fs::fcntl_get_seals(fd)?.contains(SealFlags::SHRINK) {
        rustix::fs::fcntl_add_seals(fd, SealFlags::SHRINK)?;
    }
    if !rustix::fs::fcntl_get_seals(fd)?.contains(SealFlags::SHRINK) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(rustix::fs::fstat(fd)?.st_size as u64)
}

/// Where a client wants a mapping placed, as `mmap(2)` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Anywhere (the address is only a hint, which Linux may ignore).
    Anywhere,
    /// Exactly here, replacing what was mapped (`MAP_FIXED`).
    Replace(usize),
    /// Exactly here, failing with `EEXIST` if anything is mapped there
    /// (`MAP_FIXED_NOREPLACE`).
    NoReplace(usize),
}

/// The host address range behind all of simulated RAM.
#[derive(Debug)]
pub struct Window {
    /// The window's name, unique in the process (see `host_window`).
    id: u64,
    base: NonNull<u8>,
    len_bytes: usize,
    /// A second mapping of the pool, never covered: the source from which
    /// a range is given back to the pool, and its pages released.
    pool_view: NonNull<u8>,
}

// SAFETY: the window owns both mappings for its whole life and hands out
// no references into them; every access is a volatile or atomic access
// within bounds (see the module comment), so sharing the pointer between
// threads cannot create a Rust reference that another thread's write
// would invalidate.
unsafe impl Send for Window {}
// SAFETY: as above.
unsafe impl Sync for Window {}

fn map_shared(fd: BorrowedFd<'_>, len_bytes: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a new mapping at a kernel-chosen address; the result is
    // checked for MAP_FAILED.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len_bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_NORESERVE,
            fd.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(ptr.cast()).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))
}

impl Window {
    /// A window of `len_bytes` (whole pages) over a new, empty pool. The
    /// pool's descriptor is closed before this returns: the mappings keep
    /// it alive.
    pub fn new(len_bytes: usize) -> io::Result<Window> {
        if len_bytes == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let pool = create_memfd("agx-ram", len_bytes as u64)?;
        let base = map_shared(pool.as_fd(), len_bytes)?;
        let pool_view = match map_shared(pool.as_fd(), len_bytes) {
            Ok(view) => view,
            Err(e) => {
                // SAFETY: unmapping the mapping made just above.
                unsafe { libc::munmap(base.as_ptr().cast(), len_bytes) };
                return Err(e);
            }
        };
        // Names never reused: a page cache filled through one window is
        // never taken for another's made at the same host address.
        static NEXT_WINDOW_ID: AtomicU64 = AtomicU64::new(1);
        Ok(Window {
            id: NEXT_WINDOW_ID.fetch_add(1, Ordering::Relaxed),
            base,
            len_bytes,
            pool_view,
        })
    }

    /// The size in bytes.
    pub fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    /// The window as compiled code reads it: physical address `pa_start`
    /// is its first byte, and `translation_generation` advances whenever
    /// page tables that reach it change.
    pub fn host_window<'a>(
        &'a self,
        pa_start: u64,
        translation_generation: &'a AtomicU64,
    ) -> agx_hw::host::HostWindow<'a> {
        // SAFETY: `id` is this window's, taken from a process-wide
        // counter that never repeats. `base..base + len_bytes` is one
        // mapping the window owns until it is dropped, and the returned
        // window borrows it: covering a range replaces pages inside it
        // (MAP_FIXED) and uncovering maps the pool back, so every byte
        // stays mapped readable and writable (PROT_READ | PROT_WRITE,
        // shared memfds that cannot shrink; released pool pages read as
        // zero). The counter is the caller's (`Ram` passes the one it
        // advances on every unmap); a wrong one would leave cached
        // translations stale, never reach outside the window.
        unsafe {
            agx_hw::host::HostWindow::new(
                self.id,
                self.base,
                pa_start,
                self.len_bytes as u64,
                translation_generation,
            )
        }
    }

    fn check(&self, offset: usize, len: usize) -> Option<()> {
        (offset.checked_add(len)? <= self.len_bytes).then_some(())
    }

    fn check_pages(&self, offset: usize, len: usize) -> io::Result<()> {
        let page = agx_hw::uat::PAGE_BYTES as usize;
        if len == 0 || !offset.is_multiple_of(page) || !len.is_multiple_of(page) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        self.check(offset, len)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
    }

    /// Maps all of `fd` (a memfd of `len` bytes) over `[offset, offset +
    /// len)`: those addresses now reach the memfd's pages.
    pub fn cover(&self, offset: usize, len: usize, fd: BorrowedFd<'_>) -> io::Result<()> {
        self.check_pages(offset, len)?;
        // SAFETY: the range lies inside the window (checked), which this
        // value owns; MAP_FIXED replaces that part of it in one step, so
        // the range is never unmapped in between.
        let ptr = unsafe {
            libc::mmap(
                self.base.as_ptr().add(offset).cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Gives `[offset, offset + len)` back to the pool (after
    /// [`Window::cover`]): the range reaches the pool's pages again.
    pub fn uncover(&self, offset: usize, len: usize) -> io::Result<()> {
        self.check_pages(offset, len)?;
        // SAFETY: both ranges lie inside mappings this value owns; the
        // source is a shared mapping, so an old size of 0 duplicates it
        // (the same pool pages) over the target in one step.
        let ptr = unsafe {
            libc::mremap(
                self.pool_view.as_ptr().add(offset).cast(),
                0,
                len,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                self.base.as_ptr().add(offset),
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Releases the pool's pages in a range: they read as zero afterwards
    /// and stop costing host memory.
    pub fn release(&self, offset: usize, len: usize) -> io::Result<()> {
        self.check_pages(offset, len)?;
        // SAFETY: the range lies inside the pool's view, a shared mapping
        // of shared memory, where MADV_REMOVE punches a hole in the file.
        if unsafe {
            libc::madvise(
                self.pool_view.as_ptr().add(offset).cast(),
                len,
                libc::MADV_REMOVE,
            )
        } != 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Releases the pages of whatever is mapped over a covered range (a
    /// memfd's, after [`Window::cover`]): they read as zero afterwards, in
    /// every mapping of that memfd, and stop costing host memory.
    pub fn release_covered(&self, offset: usize, len: usize) -> io::Result<()> {
        self.check_pages(offset, len)?;
        // SAFETY: the range lies inside the window, a shared mapping of a
        // memfd there, where MADV_REMOVE punches a hole in that file.
        if unsafe {
            libc::madvise(
                self.base.as_ptr().add(offset).cast(),
                len,
                libc::MADV_REMOVE,
            )
        } != 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Maps `[offset, offset + len)` of the window a second time, for the
    /// CPU: the new mapping reaches the same pages (of the memfd mapped
    /// there), with protection `prot`. `len` need not be whole pages (as
    /// for `mmap`). A fixed placement over the window itself is `EINVAL`.
    pub fn map_again(
        &self,
        offset: usize,
        len: usize,
        prot: i32,
        placement: Placement,
    ) -> io::Result<NonNull<u8>> {
        let page = agx_hw::uat::PAGE_BYTES as usize;
        let einval = || io::Error::from_raw_os_error(libc::EINVAL);
        if len == 0 || !offset.is_multiple_of(page) {
            return Err(einval());
        }
        self.check(offset, len).ok_or_else(einval)?;
        let source = self
            .base
            .as_ptr()
            .wrapping_add(offset)
            .cast::<libc::c_void>();
        // A fixed target must not replace the window or the pool's view.
        let overlaps_ours = |address: usize| {
            let end = address.saturating_add(len);
            [self.base, self.pool_view].iter().any(|mapping| {
                let start = mapping.as_ptr() as usize;
                address < start + self.len_bytes && start < end
            })
        };
        let target = match placement {
            Placement::Anywhere => None,
            Placement::Replace(address) | Placement::NoReplace(address)
                if overlaps_ours(address) =>
            {
                return Err(einval());
            }
            Placement::Replace(address) => Some(address),
            Placement::NoReplace(address) => {
                // Claim the range first; the kernel refuses if it is taken.
                // SAFETY: MAP_FIXED_NOREPLACE never replaces a mapping.
                let claimed = unsafe {
                    libc::mmap(
                        address as *mut libc::c_void,
                        len,
                        libc::PROT_NONE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                        -1,
                        0,
                    )
                };
                if claimed == libc::MAP_FAILED {
                    return Err(io::Error::last_os_error());
                }
                if claimed as usize != address {
                    // A kernel that took the flag as a hint: give it back.
                    // SAFETY: unmapping the claim just made.
                    unsafe { libc::munmap(claimed, len) };
                    return Err(io::Error::from_raw_os_error(libc::EEXIST));
                }
                Some(address)
            }
        };
        // SAFETY: the source range lies inside the window's shared
        // mapping, so an old size of 0 duplicates it. A fixed target is
        // where the client asked to map (replacing what it had there, as
        // mmap with MAP_FIXED would), checked above not to overlap the
        // window or the pool's view; otherwise the kernel picks a free
        // range. Either way no mapping this value owns is touched.
        let ptr = unsafe {
            match target {
                None => libc::mremap(source, 0, len, libc::MREMAP_MAYMOVE),
                Some(address) => libc::mremap(
                    source,
                    0,
                    len,
                    libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                    address as *mut libc::c_void,
                ),
            }
        };
        if ptr == libc::MAP_FAILED {
            let error = io::Error::last_os_error();
            if let Placement::NoReplace(address) = placement {
                // SAFETY: unmapping the claim made above, which nothing
                // replaced.
                unsafe { libc::munmap(address as *mut libc::c_void, len) };
            }
            return Err(error);
        }
        // SAFETY: `ptr` is the mapping of `len` bytes just made.
        if unsafe { libc::mprotect(ptr, len, prot) } != 0 {
            let error = io::Error::last_os_error();
            // SAFETY: unmapping the mapping just made.
            unsafe { libc::munmap(ptr, len) };
            return Err(error);
        }
        NonNull::new(ptr.cast()).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))
    }

    /// Copies bytes out of the window; `None` past its end.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Option<()> {
        self.check(offset, buf.len())?;
        // SAFETY: the range lies inside the window (checked above).
        unsafe { volatile_read(self.base.as_ptr().add(offset), buf) };
        Some(())
    }

    /// Copies bytes into the window; `None` past its end.
    pub fn write(&self, offset: usize, data: &[u8]) -> Option<()> {
        self.check(offset, data.len())?;
        // SAFETY: the range lies inside the window (checked above).
        unsafe { volatile_write(self.base.as_ptr().add(offset), data) };
        Some(())
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // SAFETY: both mappings were made in `new` and are unmapped only
        // here (ranges covered since then are part of `base`'s range).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len_bytes);
            libc::munmap(self.pool_view.as_ptr().cast(), self.len_bytes);
        }
    }
}

const WORD: usize = std::mem::size_of::<u64>();

/// Copies `buf.len()` bytes from `src` with volatile loads: single bytes
/// up to an 8-byte boundary, then aligned 8-byte words, then bytes.
///
/// # Safety
/// `src..src + buf.len()` must be mapped and readable.
unsafe fn volatile_read(src: *const u8, buf: &mut [u8]) {
    let len = buf.len();
    // One aligned 32-bit word (an RGBA8 texel or pixel, a register's
    // worth): a single load.
    if len == 4 && src.cast::<u32>().is_aligned() {
        // SAFETY: in bounds per the caller, and 4-byte aligned.
        let word = unsafe { src.cast::<u32>().read_volatile() };
        buf.copy_from_slice(&word.to_ne_bytes());
        return;
    }
    let head = src.align_offset(WORD).min(len);
    let mut i = 0;
    while i < head {
        // SAFETY: in bounds per the caller.
        buf[i] = unsafe { src.add(i).read_volatile() };
        i += 1;
    }
    while i + WORD <= len {
        // SAFETY: in bounds per the caller, and 8-byte aligned (the head
        // loop reached an aligned address).
        let word = unsafe { src.add(i).cast::<u64>().read_volatile() };
        buf[i..i + WORD].copy_from_slice(&word.to_ne_bytes());
        i += WORD;
    }
    while i < len {
        // SAFETY: in bounds per the caller.
        buf[i] = unsafe { src.add(i).read_volatile() };
        i += 1;
    }
}

/// Copies `data` to `dst` with volatile stores, as [`volatile_read`].
///
/// # Safety
/// `dst..dst + data.len()` must be mapped and writable.
unsafe fn volatile_write(dst: *mut u8, data: &[u8]) {
    let len = data.len();
    if len == 4 && dst.cast::<u32>().is_aligned() {
        let mut word = [0u8; 4];
        word.copy_from_slice(data);
        // SAFETY: in bounds per the caller, and 4-byte aligned.
        unsafe { dst.cast::<u32>().write_volatile(u32::from_ne_bytes(word)) };
        return;
    }
    let head = dst.align_offset(WORD).min(len);
    let mut i = 0;
    while i < head {
        // SAFETY: in bounds per the caller.
        unsafe { dst.add(i).write_volatile(data[i]) };
        i += 1;
    }
    while i + WORD <= len {
        let mut word = [0u8; WORD];
        word.copy_from_slice(&data[i..i + WORD]);
        // SAFETY: in bounds per the caller, and 8-byte aligned.
        unsafe {
            dst.add(i)
                .cast::<u64>()
                .write_volatile(u64::from_ne_bytes(word))
        };
        i += WORD;
    }
    while i < len {
        // SAFETY: in bounds per the caller.
        unsafe { dst.add(i).write_volatile(data[i]) };
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    const PAGE: usize = agx_hw::uat::PAGE_BYTES as usize;

    #[test]
    fn reads_back_what_was_written_at_any_alignment_and_refuses_out_of_bounds() {
        let window = Window::new(4 * PAGE).unwrap();
        let data: Vec<u8> = (0..100u8).collect();
        for start in 0..9 {
            window.write(start, &data).unwrap();
            let mut back = vec![0u8; 100];
            window.read(start, &mut back).unwrap();
            assert_eq!(back, data, "at offset {start}");
        }
        // Single words, aligned (one load) and not.
        for start in 200..209 {
            let word = [start as u8, 0xA5, 0x5A, !(start as u8)];
            window.write(start, &word).unwrap();
            let mut back = [0u8; 4];
            window.read(start, &mut back).unwrap();
            assert_eq!(back, word, "at offset {start}");
            window.read(start - 1, &mut back).unwrap();
            assert_eq!(back[1..], word[..3], "at offset {start} - 1");
        }
        let mut buf = [0u8; 4];
        assert!(window.read(4 * PAGE - 3, &mut buf).is_none());
        assert!(window.write(usize::MAX, &[1]).is_none());
    }

    #[test]
    fn a_memfd_handed_out_cannot_be_shrunk_or_sealed_against_the_device() {
        use rustix::fs::SealFlags;
        let memfd = create_memfd("sealed", 2 * PAGE as u64).unwrap();
        assert_eq!(
            rustix::fs::ftruncate(&memfd, PAGE as u64),
            Err(rustix::io::Errno::PERM)
        );
        for seal in [SealFlags::WRITE, SealFlags::FUTURE_WRITE, SealFlags::GROW] {
            assert_eq!(
                rustix::fs::fcntl_add_seals(&memfd, seal),
                Err(rustix::io::Errno::PERM),
                "{seal:?}"
            );
        }
        assert_eq!(sealed_size_bytes(memfd.as_fd()).unwrap(), 2 * PAGE as u64);
    }

    #[test]
    fn a_covered_range_reaches_the_memfd_and_released_pool_pages_read_zero() {
        let window = Window::new(4 * PAGE).unwrap();
        window.write(PAGE, b"pool").unwrap();
        let memfd = create_memfd("test", PAGE as u64).unwrap();
        window.cover(PAGE, PAGE, memfd.as_fd()).unwrap();
        let mut buf = [0u8; 4];
        window.read(PAGE, &mut buf).unwrap();
        assert_eq!(buf, [0; 4], "the memfd's pages, not the pool's");
        window.write(PAGE, b"file").unwrap();
        let mut from_fd = [0u8; 4];
        rustix::io::pread(&memfd, &mut from_fd, 0).unwrap();
        assert_eq!(&from_fd, b"file");
        window.uncover(PAGE, PAGE).unwrap();
        window.read(PAGE, &mut buf).unwrap();
        assert_eq!(&buf, b"pool", "the pool's pages are back");
        window.release(PAGE, PAGE).unwrap();
        window.read(PAGE, &mut buf).unwrap();
        assert_eq!(buf, [0; 4]);
    }

    #[test]
    fn a_second_mapping_shares_the_pages_and_honours_its_protection() {
        let window = Window::new(4 * PAGE).unwrap();
        window.write(2 * PAGE + 5, b"shared").unwrap();
        let cpu = window
            .map_again(
                2 * PAGE,
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                Placement::Anywhere,
            )
            .unwrap();
        // SAFETY: `cpu` maps one page, readable and writable, that only
        // this test touches.
        unsafe {
            let bytes = std::slice::from_raw_parts(cpu.as_ptr().add(5), 6);
            assert_eq!(bytes, b"shared");
            cpu.as_ptr().write_volatile(42);
        }
        let mut buf = [0u8; 1];
        window.read(2 * PAGE, &mut buf).unwrap();
        assert_eq!(buf, [42]);
        // The same address again with MAP_FIXED_NOREPLACE is refused.
        let taken = window.map_again(
            0,
            PAGE,
            libc::PROT_READ,
            Placement::NoReplace(cpu.as_ptr() as usize),
        );
        assert_eq!(taken.unwrap_err().raw_os_error(), Some(libc::EEXIST));
        // SAFETY: unmapping the mapping this test made.
        unsafe { libc::munmap(cpu.as_ptr().cast(), PAGE) };
    }

    #[test]
    fn a_kept_descriptor_is_placed_high_and_not_used_once_the_process_closes_it() {
        let floor = 500;
        set_descriptor_floor(floor);
        let kept = DeviceFd::keep(create_memfd("kept", 64).unwrap()).unwrap();
        set_descriptor_floor(0);
        assert!(kept.get().unwrap().as_raw_fd() >= floor);
        let number = kept.get().unwrap().as_raw_fd();
        // The process puts another file at that number (dup2 closes what
        // was there and reuses the number in one step, so no other test
        // thread can take it in between).
        let other = create_memfd("other", 64).unwrap();
        // SAFETY: dup2 onto a number this test owns (through `kept`); the
        // result is checked and owned below.
        let placed = unsafe { libc::dup2(other.as_raw_fd(), number) };
        assert_eq!(placed, number);
        // SAFETY: `number` is now a descriptor this test owns.
        let moved = unsafe { OwnedFd::from_raw_fd(number) };
        assert_eq!(kept.get().unwrap_err(), DescriptorGone { fd: number });
        assert!(kept.duplicate(true).is_err());
        drop(kept);
        // The other file's descriptor survived the drop.
        assert!(rustix::fs::fstat(&moved).is_ok());
    }
}
