//! Address-space and sub-allocation bookkeeping.
//!
//! [`VaRange`] hands out GPU virtual address ranges (first fit over a
//! sorted free list, coalescing on free). [`Arena`] sub-allocates small
//! objects (command streams, uniforms, descriptors, USC control words)
//! from 16 KiB-page buffers with a bump pointer, the way Mesa's pools do:
//! everything in an arena is freed together when the work that used it is
//! done.

use std::collections::BTreeMap;

use crate::device::{Buffer, BufferDesc, Device, MemoryType, Region};
use crate::error::Error;

/// A range of GPU virtual addresses to allocate from.
#[derive(Debug)]
pub struct VaRange {
    /// Free ranges: start -> length in bytes.
    free: BTreeMap<u64, u64>,
    align_bytes: u64,
}

impl VaRange {
    /// All of `start..end` free, handed out in multiples of `align_bytes`.
    pub fn new(start: u64, end: u64, align_bytes: u64) -> VaRange {
        let mut free = BTreeMap::new();
        if end > start {
            free.insert(start, end - start);
        }
        VaRange { free, align_bytes }
    }

    /// Takes `len_bytes` (rounded up) at an address aligned to
    /// `align_bytes` (at least the range's granule).
    pub fn alloc(&mut self, len_bytes: u64, align_bytes: u64) -> Option<u64> {
        let len = len_bytes
            .max(1)
            .checked_next_multiple_of(self.align_bytes)?;
        let align = align_bytes.max(self.align_bytes);
        let (start, free_len, at) = self.free.iter().find_map(|(&start, &free_len)| {
            let at = start.checked_next_multiple_of(align)?;
            (at.checked_add(len)? <= start + free_len).then_some((start, free_len, at))
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

    /// Returns `len_bytes` at `start` (as allocated).
    pub fn free(&mut self, start: u64, len_bytes: u64) {
        let Some(len) = len_bytes.max(1).checked_next_multiple_of(self.align_bytes) else {
            return;
        };
        let (mut start, mut len) = (start, len);
        if let Some((&prev, &prev_len)) = self.free.range(..start).next_back() {
            if prev + prev_len == start {
                self.free.remove(&prev);
                start = prev;
                len += prev_len;
            }
        }
        if let Some(next_len) = self.free.remove(&(start + len)) {
            len += next_len;
        }
        self.free.insert(start, len);
    }

    /// Bytes free.
    pub fn free_bytes(&self) -> u64 {
        self.free.values().sum()
    }
}

/// A piece of an [`Arena`]: its GPU address and where it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    /// GPU virtual address.
    pub va: u64,
    /// Size in bytes.
    pub len_bytes: u64,
    buffer: usize,
    offset_bytes: u64,
}

/// A bump allocator over buffers of one region and memory type.
#[derive(Debug)]
pub struct Arena {
    device: Device,
    region: Region,
    chunk_bytes: u64,
    buffers: Vec<Buffer>,
    /// Bytes used in the last buffer.
    used_bytes: u64,
}

impl Arena {
    /// An empty arena taking buffers of at least `chunk_bytes` in
    /// `region`.
    pub fn new(device: &Device, region: Region, chunk_bytes: u64) -> Arena {
        Arena {
            device: device.clone(),
            region,
            chunk_bytes,
            buffers: Vec::new(),
            used_bytes: 0,
        }
    }

    /// Reserves `len_bytes` aligned to `align_bytes` (a power of two, at
    /// most 16 KiB).
    pub fn alloc(&mut self, len_bytes: u64, align_bytes: u64) -> Result<Slice, Error> {
        let align = align_bytes.max(1);
        if let Some(last) = self.buffers.last() {
            let at = self.used_bytes.next_multiple_of(align);
            if at + len_bytes <= last.size_bytes() {
                self.used_bytes = at + len_bytes;
                return Ok(Slice {
                    va: last.va() + at,
                    len_bytes,
                    buffer: self.buffers.len() - 1,
                    offset_bytes: at,
                });
            }
        }
        let buffer = self.device.create_buffer(&BufferDesc {
            size_bytes: self.chunk_bytes.max(len_bytes),
            memory: MemoryType::HostVisible,
            region: self.region,
            gpu_write: self.region == Region::General,
        })?;
        let va = buffer.va();
        self.buffers.push(buffer);
        self.used_bytes = len_bytes;
        Ok(Slice {
            va,
            len_bytes,
            buffer: self.buffers.len() - 1,
            offset_bytes: 0,
        })
    }

    /// Places `data` (aligned to `align_bytes`); returns where.
    pub fn upload(&mut self, data: &[u8], align_bytes: u64) -> Result<Slice, Error> {
        let slice = self.alloc(data.len() as u64, align_bytes)?;
        self.write(&slice, 0, data)?;
        Ok(slice)
    }

    /// Writes into a slice.
    pub fn write(&self, slice: &Slice, offset_bytes: u64, data: &[u8]) -> Result<(), Error> {
        if offset_bytes + data.len() as u64 > slice.len_bytes {
            return Err(Error::OutOfBounds {
                offset_bytes,
                len_bytes: data.len() as u64,
                size_bytes: slice.len_bytes,
            });
        }
        self.buffers[slice.buffer].write(slice.offset_bytes + offset_bytes, data)
    }

    /// Bytes in the arena's buffers.
    pub fn allocated_bytes(&self) -> u64 {
        self.buffers.iter().map(Buffer::size_bytes).sum()
    }

    /// Forgets every allocation, keeping the first buffer for reuse.
    pub fn reset(&mut self) {
        self.buffers.truncate(1);
        self.used_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_with_alignment_and_coalescing() {
        let mut va = VaRange::new(0x4000, 0x4000 + 16 * 0x4000, 0x4000);
        let a = va.alloc(0x4000, 0).unwrap();
        let b = va.alloc(0x5000, 0x10000).unwrap();
        assert_eq!(a, 0x4000);
        assert_eq!(b % 0x10000, 0);
        assert_eq!(va.free_bytes(), 16 * 0x4000 - 0x4000 - 0x8000);
        va.free(a, 0x4000);
        va.free(b, 0x5000);
        assert_eq!(va.free_bytes(), 16 * 0x4000);
        // Everything coalesced back into one range.
        assert_eq!(va.alloc(16 * 0x4000, 0), Some(0x4000));
        assert_eq!(va.alloc(1, 0), None);
    }
}
