//! Address-space and sub-allocation bookkeeping.
//!
//! [`VaRange`] hands out GPU virtual address ranges (first fit over a
//! sorted free list, coalescing on free; `agx_va`). [`Arena`] sub-allocates small
//! objects (command streams, uniforms, descriptors, USC control words)
//! from 16 KiB-page buffers with a bump pointer, the way Mesa's pools do:
//! everything in an arena is freed together when the work that used it is
//! done.

use crate::device::{Buffer, BufferDesc, Device, MemoryType, Region};
use crate::error::Error;

/// A range of GPU virtual addresses to allocate from (the allocator the
/// kmd uses too).
pub use agx_va::VaAllocator as VaRange;

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
        if !align.is_power_of_two() || align > 16 * 1024 {
            return Err(Error::Unsupported(format!(
                "an arena alignment of {align_bytes} bytes"
            )));
        }
        if let Some(last) = self.buffers.last() {
            let at = self.used_bytes.next_multiple_of(align);
            if at
                .checked_add(len_bytes)
                .is_some_and(|end| end <= last.size_bytes())
            {
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
        let out_of_bounds = Error::OutOfBounds {
            offset_bytes,
            len_bytes: data.len() as u64,
            size_bytes: slice.len_bytes,
        };
        if offset_bytes
            .checked_add(data.len() as u64)
            .is_none_or(|end| end > slice.len_bytes)
        {
            return Err(out_of_bounds);
        }
        // A slice of another arena may name a buffer this one lacks.
        let buffer = self.buffers.get(slice.buffer).ok_or(out_of_bounds)?;
        buffer.write(slice.offset_bytes + offset_bytes, data)
    }

    /// Bytes in the arena's buffers.
    pub fn allocated_bytes(&self) -> u64 {
        self.buffers.iter().map(Buffer::size_bytes).sum()
    }
}
