//! GPU virtual address ranges: first fit over a free list, with freed
//! ranges merged with their neighbours so that objects can come and go
//! forever without exhausting a range.
//!
//! The kmd carves its two ranges with it (the firmware's, the upper half
//! of context 0; and each VM's kernel range, where the parameter buffer
//! lives), and the userspace driver its regions of a VM (the USC region,
//! the general heap): one allocator for both. It is software, not a
//! hardware format, so it lives in a crate of its own rather than in
//! `agx-hw`.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::ops::Range;

/// A first-fit allocator of page-aligned address ranges.
#[derive(Debug, Clone)]
pub struct VaAllocator {
    /// Free ranges: start -> length in bytes.
    free: BTreeMap<u64, u64>,
    /// The range managed.
    range: Range<u64>,
    page_bytes: u64,
}

impl VaAllocator {
    /// All of `range` free; allocations are multiples of `page_bytes`.
    pub fn new(range: Range<u64>, page_bytes: u64) -> VaAllocator {
        let mut free = BTreeMap::new();
        if range.end > range.start {
            free.insert(range.start, range.end - range.start);
        }
        VaAllocator {
            free,
            range,
            page_bytes,
        }
    }

    /// Takes `len_bytes` (rounded up to whole pages) at an address that is
    /// a multiple of `align_bytes` (a power of two, at least a page).
    pub fn alloc(&mut self, len_bytes: u64, align_bytes: u64) -> Option<u64> {
        let len = len_bytes.max(1).checked_next_multiple_of(self.page_bytes)?;
        let align = align_bytes.max(self.page_bytes);
        let (start, free_len, at) = self.free.iter().find_map(|(&start, &free_len)| {
            let at = start.checked_next_multiple_of(align)?;
            let end = at.checked_add(len)?;
            (end <= start + free_len).then_some((start, free_len, at))
        })?;
        self.free.remove(&start);
        if at > start {
            self.free.insert(start, at - start);
        }
        let end = at + len;
        if end < start + free_len {
            self.free.insert(end, start + free_len - end);
        }
        Some(at)
    }

    /// Returns `[start, start + len_bytes)` (as allocated) to the free list.
    /// A range outside the managed one, misaligned, or overlapping free
    /// space (a double free) is refused: `false`, and nothing changes, so
    /// the same addresses are never handed out twice.
    #[must_use = "a refused free means the caller's bookkeeping is wrong"]
    pub fn free(&mut self, start: u64, len_bytes: u64) -> bool {
        let Some(len) = len_bytes.max(1).checked_next_multiple_of(self.page_bytes) else {
            return false;
        };
        let Some(end) = start.checked_add(len) else {
            return false;
        };
        if !start.is_multiple_of(self.page_bytes)
            || start < self.range.start
            || end > self.range.end
        {
            return false;
        }
        let prev = self.free.range(..=start).next_back().map(|(&s, &l)| (s, l));
        if prev.is_some_and(|(s, l)| s + l > start) {
            return false;
        }
        if self.free.range(start..end).next().is_some() {
            return false;
        }
        let (mut start, mut len) = (start, len);
        if let Some((prev, prev_len)) = prev {
            if prev + prev_len == start {
                self.free.remove(&prev);
                start = prev;
                len += prev_len;
            }
        }
        if let Some(&next_len) = self.free.get(&(start + len)) {
            self.free.remove(&(start + len));
            len += next_len;
        }
        self.free.insert(start, len);
        true
    }

    /// Free bytes.
    pub fn free_bytes(&self) -> u64 {
        self.free.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_align_and_freed_ranges_merge_back() {
        let mut va = VaAllocator::new(0x10_0000..0x20_0000, 0x4000);
        let a = va.alloc(1, 0).unwrap();
        assert_eq!(a, 0x10_0000);
        let b = va.alloc(0x8000, 0x2_0000).unwrap();
        assert_eq!(b, 0x12_0000, "aligned past the gap");
        let c = va.alloc(0x4000, 0).unwrap();
        assert_eq!(c, 0x10_4000, "first fit reuses the gap");
        assert!(va.alloc(0x10_0000, 0).is_none(), "no room for 1 MiB");
        for (start, len) in [(b, 0x8000), (a, 1), (c, 0x4000)] {
            assert!(va.free(start, len));
        }
        assert_eq!(va.free_bytes(), 0x10_0000);
        assert_eq!(va.alloc(0x10_0000, 0), Some(0x10_0000), "one range again");
    }

    #[test]
    fn double_foreign_and_misaligned_frees_are_refused() {
        let mut va = VaAllocator::new(0x10_0000..0x20_0000, 0x4000);
        let a = va.alloc(0x8000, 0).unwrap();
        let b = va.alloc(0x4000, 0).unwrap();
        assert!(va.free(a, 0x8000));
        assert!(!va.free(a, 0x8000), "double free");
        assert!(!va.free(a + 0x4000, 0x8000), "overlaps a free range and b");
        assert!(!va.free(0x20_0000, 0x4000), "outside");
        assert!(!va.free(0xC_0000, 0x8_0000), "straddles the start");
        assert!(!va.free(b + 1, 0x4000), "misaligned");
        assert!(!va.free(u64::MAX - 0x3FFF, 0x4000), "wraps");
        let before = va.free_bytes();
        assert!(va.free(b, 0x4000));
        assert_eq!(va.free_bytes(), before + 0x4000);
        assert_eq!(va.free_bytes(), 0x10_0000, "all merged back");
    }
}
