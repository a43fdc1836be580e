//! Device memory as compiled code reaches it: GPU addresses translated to
//! host addresses through a small per-worker page cache.
//!
//! A compiled `device_load` translates each element's GPU address by its
//! page: a hit in the [`PageCache`] (direct-mapped by page number) gives
//! the host address of the page, and the load is one host load. A miss
//! asks the MMU model (a [`PageSource`]) for the physical page, which must
//! be readable by the GPU and lie inside the [`HostWindow`]; where it is
//! not (a fault, the kernel half, memory outside the window), the block
//! stops before the instruction and the interpreter runs it, so every
//! fault is the interpreter's. Page-table changes advance the window's
//! translation generation; compiled code compares it before each load
//! instruction and empties the cache when it moved, as a TLB shootdown
//! would.

use std::sync::atomic::{AtomicU64, Ordering};

use agx_hw::host::HostWindow;
use agx_hw::uat::PAGE_BYTES;

/// Entries of a [`PageCache`].
pub const PAGE_CACHE_ENTRIES: usize = 64;

/// Translates GPU addresses for compiled loads and stores: the MMU model
/// of the memory a program runs against.
pub trait PageSource {
    /// The physical address of the page holding GPU address `va`, where a
    /// GPU read of it succeeds; `None` where the access must be left to
    /// the interpreter (it faults, or it is not plain RAM).
    fn readable_page(&self, va: u64) -> Option<u64>;
    /// The same for a GPU write.
    fn writable_page(&self, va: u64) -> Option<u64>;
    /// What names the translations (the VM context's root): a cache
    /// filled for another is emptied.
    fn context(&self) -> u64;
}

/// Translated pages, for one worker: per entry a tag, the GPU page
/// number + 1 shifted up by 2 (0: empty) with bit 0 set once a read of
/// the page was allowed and bit 1 once a write was, and the host address
/// of the page; valid for one translation generation, one context and
/// one window.
#[repr(C)]
#[derive(Debug, Clone)]
pub struct PageCache {
    tags: [u64; PAGE_CACHE_ENTRIES],
    hosts: [u64; PAGE_CACHE_ENTRIES],
    generation: u64,
    context: u64,
    /// The host window the pages are in.
    window: u64,
}

/// Byte offsets of the fields compiled code reads.
pub(crate) const HOSTS_OFFSET: i32 = (PAGE_CACHE_ENTRIES * 8) as i32;
pub(crate) const GENERATION_OFFSET: i32 = (2 * PAGE_CACHE_ENTRIES * 8) as i32;

impl Default for PageCache {
    fn default() -> PageCache {
        PageCache::new()
    }
}

impl PageCache {
    /// An empty cache.
    pub fn new() -> PageCache {
        PageCache {
            tags: [0; PAGE_CACHE_ENTRIES],
            hosts: [0; PAGE_CACHE_ENTRIES],
            generation: u64::MAX,
            context: u64::MAX,
            window: 0,
        }
    }

    fn clear(&mut self, generation: u64) {
        self.tags = [0; PAGE_CACHE_ENTRIES];
        self.generation = generation;
    }

    /// Pages held.
    pub fn len(&self) -> usize {
        self.tags.iter().filter(|&&tag| tag != 0).count()
    }

    /// Whether no page is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What one block call reads memory through (its layout is what compiled
/// code reads: the cache pointer at 0, the generation counter's at 8, the
/// stop position at 16).
#[repr(C)]
pub(crate) struct MemoryContext<'a> {
    pub(crate) cache: *mut PageCache,
    pub(crate) generation: *const AtomicU64,
    /// Where the block stopped: the position of the instruction the
    /// interpreter takes over at.
    pub(crate) stopped_at: u32,
    /// Instructions the budget leaves after the whole runs (a partial
    /// run takes the segments that fit in them).
    pub(crate) tail: u32,
    /// The SIMD-group's stack, for its stack loads and stores (null: they
    /// stop the block).
    pub(crate) stack: *const StackFrame,
    window: Option<HostWindow<'a>>,
    pages: Option<&'a dyn PageSource>,
}

pub(crate) const STOPPED_AT_OFFSET: i32 = 16;
pub(crate) const TAIL_OFFSET: i32 = 20;
pub(crate) const STACK_OFFSET: i32 = 24;

/// A SIMD-group's stack as compiled stack loads and stores address it:
/// the pointer and size in bytes of each thread's stack, each block's
/// 32-bit words per thread (log2), and each mapped block's GPU address.
/// Word `w` of thread `t` in a block is at byte `(32 w + t) x 4`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackFrame {
    /// The stack pointer.
    pub sp_bytes: u32,
    /// Bytes of each thread's stack.
    pub size_bytes: u32,
    /// log2 of each block's words per thread.
    pub block_words_log2: u32,
    /// (Padding.)
    pub reserved: u32,
    /// Each block's base address (unmapped blocks: 0).
    pub bases: [u64; 4],
}

pub(crate) const FRAME_SP_OFFSET: i32 = 0;
pub(crate) const FRAME_SIZE_OFFSET: i32 = 4;
pub(crate) const FRAME_WORDS_LOG2_OFFSET: i32 = 8;
pub(crate) const FRAME_BASES_OFFSET: i32 = 16;

/// The counter a context without memory compares against: it never
/// moves, and no window's counter reaches its value (they start at 0 and
/// count page-table changes), so a block with memory instructions run
/// without memory empties the cache (its entries may belong to a window
/// that is gone) before it looks at it; blocks without memory
/// instructions never look.
static NO_GENERATION: AtomicU64 = AtomicU64::new(u64::MAX - 1);

impl<'a> MemoryContext<'a> {
    /// The context of one call: `cache` emptied first if it was filled for
    /// another context or generation.
    pub(crate) fn new(
        cache: &'a mut PageCache,
        memory: Option<(HostWindow<'a>, &'a dyn PageSource)>,
        stack: Option<&'a StackFrame>,
    ) -> MemoryContext<'a> {
        let (window, pages, generation) = match memory {
            Some((window, pages)) => {
                let context = pages.context();
                if cache.context != context || cache.window != window.id() {
                    cache.clear(u64::MAX);
                    cache.context = context;
                    cache.window = window.id();
                }
                (Some(window), Some(pages), window.translation_generation())
            }
            // (Without memory nothing is cached: a miss stops the block.
            // A block that reaches memory empties the cache first, as its
            // generation differs from `NO_GENERATION`'s; one that does
            // not leaves it for the next call with memory.)
            None => (None, None, &NO_GENERATION),
        };
        MemoryContext {
            cache,
            generation,
            stopped_at: 0,
            tail: 0,
            stack: stack.map_or(std::ptr::null(), |frame| frame as *const StackFrame),
            window,
            pages,
        }
    }
}

/// Called by compiled code when the generation it read differs from the
/// cache's: empties the cache for the current generation.
pub(crate) extern "C" fn page_sync(context: *mut MemoryContext<'_>) {
    // SAFETY: compiled code passes the context `Block::run` made for this
    // call, alive for all of it; nothing else refers to it (or to its
    // cache) while compiled code waits for this function.
    let context = unsafe { &mut *context };
    // SAFETY: as above; the pointer was made from the `&mut PageCache`
    // the context borrows, and points at the counter it borrows.
    let (cache, generation) = unsafe { (&mut *context.cache, &*context.generation) };
    cache.clear(generation.load(Ordering::Acquire));
}

/// Called by compiled code for an address whose page the cache does not
/// hold with the permission wanted (`write`: 0 a read, 1 a write): the
/// host address of the page, now cached; 0 where the interpreter must take
/// the access.
pub(crate) extern "C" fn page_miss(context: *mut MemoryContext<'_>, va: u64, write: u32) -> u64 {
    // SAFETY: as in `page_sync`.
    let context = unsafe { &mut *context };
    let (Some(window), Some(pages)) = (context.window, context.pages) else {
        return 0;
    };
    // SAFETY: as in `page_sync`.
    let generation = unsafe { &*context.generation };
    // The generation before translating: a change during the translation
    // leaves the entry tagged with the older one, emptied at the next
    // check.
    let before = generation.load(Ordering::Acquire);
    // (A panic must not unwind into compiled code: the access is left to
    // the interpreter, which reports what is wrong.)
    let translated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if write != 0 {
            pages.writable_page(va)
        } else {
            pages.readable_page(va)
        }
    }));
    let Ok(Some(pa)) = translated else {
        return 0;
    };
    let Some(host) = window.host_page(pa) else {
        return 0;
    };
    let host = host.as_ptr() as u64;
    // SAFETY: as in `page_sync`.
    let cache = unsafe { &mut *context.cache };
    // A page table changed since the cache was filled: its entries go.
    if cache.generation != before {
        cache.clear(before);
    }
    let page = va / PAGE_BYTES;
    let slot = (page % PAGE_CACHE_ENTRIES as u64) as usize;
    let tag = (page + 1) << 2;
    let allowed = if write != 0 { 2 } else { 1 };
    // The same page already held (for the other kind of access) keeps
    // what was allowed before.
    let held = cache.tags[slot] & !3 == tag && cache.hosts[slot] == host;
    let kept = if held { cache.tags[slot] & 3 } else { 0 };
    cache.tags[slot] = tag | kept | allowed;
    cache.hosts[slot] = host;
    host
}
