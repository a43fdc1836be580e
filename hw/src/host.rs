//! Host memory behind physical addresses: the range of the host's address
//! space through which a simulated machine's RAM is reached, handed to the
//! shader core's compiled code so that a load or store it has translated
//! is one host access, and used by the fixed-function units to tell the
//! host which bytes they are about to read ([`HostWindow::prefetch`]).
//!
//! The only promise made here is the constructor's: whoever makes a
//! [`HostWindow`] vouches that its bytes stay readable and writable host
//! memory for as long as the window is borrowed. Everything else (finding the page a GPU
//! address names, its permissions, whether it is still mapped) stays with
//! the MMU model; [`HostWindow::host_page`] only checks that a physical
//! page lies inside the window.
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use crate::uat::PAGE_BYTES;

/// A range of physical addresses held by one range of host memory, and
/// the counter its owner advances whenever page tables that reach it
/// change (translations cached before a change must not be used after
/// it).
#[derive(Debug, Clone, Copy)]
pub struct HostWindow<'a> {
    id: u64,
    base: NonNull<u8>,
    pa_start: u64,
    len_bytes: u64,
    translation_generation: &'a AtomicU64,
    _memory: PhantomData<&'a [u8]>,
}

// SAFETY: the window is an address range and a shared counter; reading
// and writing through it is done by the compiled code, which makes no Rust
// reference into the range, so sharing the description between threads is
// sound.
unsafe impl Send for HostWindow<'_> {}
// SAFETY: as above.
unsafe impl Sync for HostWindow<'_> {}

impl<'a> HostWindow<'a> {
    /// The window whose physical addresses `pa_start..pa_start +
    /// len_bytes` are the host bytes `base..base + len_bytes`, named `id`
    /// (no other window of the process, alive or gone, may have the same:
    /// pages cached for a window are reused only while `id` is the same).
    ///
    /// # Safety
    ///
    /// `id` must be unique as above. For all of `'a`, every byte of
    /// `base..base + len_bytes` must be mapped, readable and writable host
    /// memory (its contents may change under concurrent writers, and
    /// reading or writing it must never fault), and
    /// `translation_generation` must advance whenever a page-table change
    /// could make a cached translation to it stale.
    pub unsafe fn new(
        id: u64,
        base: NonNull<u8>,
        pa_start: u64,
        len_bytes: u64,
        translation_generation: &'a AtomicU64,
    ) -> HostWindow<'a> {
        HostWindow {
            id,
            base,
            pa_start,
            len_bytes,
            translation_generation,
            _memory: PhantomData,
        }
    }

    /// The host address of the start of the page of physical address
    /// `pa`, if that whole page lies inside the window.
    pub fn host_page(&self, pa: u64) -> Option<NonNull<u8>> {
        let page = pa - pa % PAGE_BYTES;
        let offset = page.checked_sub(self.pa_start)?;
        if offset.checked_add(PAGE_BYTES)? > self.len_bytes {
            return None;
        }
        NonNull::new(
            self.base
                .as_ptr()
                .wrapping_add(usize::try_from(offset).ok()?),
        )
    }

    /// Tells the host CPU that the bytes at physical address `pa` are
    /// about to be read: a prefetch of their cache line, when `pa` lies
    /// in the window (on x86-64; elsewhere nothing). A hint only: nothing
    /// is read, and nothing can fault.
    pub fn prefetch(&self, pa: u64) {
        let Some(offset) = pa
            .checked_sub(self.pa_start)
            .filter(|offset| *offset < self.len_bytes)
        else {
            return;
        };
        #[cfg(target_arch = "x86_64")]
        {
            let line = self.base.as_ptr().wrapping_add(offset as usize);
            // SAFETY: a prefetch is a hint: it makes no architectural
            // access and cannot fault, whatever the address; the `sse`
            // feature it needs is part of the x86-64 baseline.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.cast())
            };
        }
    }

    /// The window's name, unique in the process.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The counter that advances when page tables change.
    pub fn translation_generation(&self) -> &'a AtomicU64 {
        self.translation_generation
    }
}
