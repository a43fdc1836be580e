//! Descriptor heaps.
//!
//! The **image heap** holds 24-byte texture and PBE descriptors in one
//! bindless array. Shaders name a descriptor by (heap base, byte offset):
//! the base is preloaded into a uniform pair ([`HEAP_BASE_UNIFORM`]) by a
//! USC Uniform word, the offset sits in a register. Because the base is
//! baked into shaders' uniforms and command streams it must never move,
//! so the heap reserves the address range for its whole capacity once
//! (16 M descriptors by default: 384 MiB of address space) and binds
//! memory behind it chunk by chunk as it fills (VM_BIND at the reserved
//! address). Allocation and free are O(1): a bump index and a LIFO free
//! list. A freed slot is recycled only after the GPU work that could
//! read it has completed (the ARB_bindless_texture model): frees carry a
//! retire point on a queue's timeline and [`ImageHeap::reclaim`] takes
//! back the ones the GPU has passed. Unbound slots hold null descriptors,
//! which read as zero: as in Mesa, a 1x1 R8 twiddled image whose every
//! channel swizzles to 0. The texture unit still reads its one byte, so
//! it points at memory that is always mapped and always zero: the null
//! texture's own unused words 4-5, in slot 0. A store through the null PBE
//! (the same byte) faults: the heap is read-only to the GPU.
//!
//! The **sampler heap** holds 8-byte samplers, passed to the kernel as
//! `sampler_heap`/`sampler_count`; shaders index it with a sampler index
//! (immediate or register). Samplers are deduplicated by content with
//! reference counts, so identical samplers share a slot; a sampler with a
//! custom border colour takes three consecutive slots (the sampler, then
//! its 16-byte border).

use std::collections::{HashMap, VecDeque};

use agx_hw::formats::{BorderColour, Channel, CustomBorder, Layout, Pbe, Sampler, Texture};

use crate::device::{Buffer, BufferDesc, Device, MemoryType, Region, PAGE_BYTES};
use crate::error::Error;
use crate::kernel::CpuMapping;

/// Bytes of a texture or PBE descriptor.
pub const IMAGE_DESCRIPTOR_BYTES: u64 = 24;
/// Descriptors per chunk of backing: 1.5 MiB, a whole number of both
/// descriptors and 16 KiB pages.
pub const DESCRIPTORS_PER_CHUNK: u32 = 65536;
/// Bytes of a chunk.
pub const CHUNK_BYTES: u64 = DESCRIPTORS_PER_CHUNK as u64 * IMAGE_DESCRIPTOR_BYTES;
/// The largest image heap: byte offsets must fit the 32-bit registers
/// shaders hold them in.
pub const MAX_IMAGE_CAPACITY: u32 = u32::MAX / IMAGE_DESCRIPTOR_BYTES as u32;
/// The image heap's default capacity: 16 M descriptors.
pub const DEFAULT_IMAGE_CAPACITY: u32 = 16 << 20;
/// The uniform pair (in 32-bit uniform registers: `u60_u61`) that bindless
/// shaders read the image heap's base from.
pub const HEAP_BASE_UNIFORM: u32 = 60;
/// Slot 0: a null texture descriptor.
pub const NULL_TEXTURE: u32 = 0;
/// Slot 1: a null PBE descriptor.
pub const NULL_PBE: u32 = 1;

/// When a freed slot may be reused: once queue `queue`'s timeline has
/// passed `point` ([`crate::Queue::retire_point`]). Points of one queue
/// are reclaimed in the order they were freed, so they should not
/// decrease (a queue's own points never do).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RetirePoint {
    /// The queue whose work may still read the slot: its
    /// [`crate::Queue::serial`] (kernel queue IDs may be reused after a
    /// queue is destroyed; serials are not).
    pub queue: u32,
    /// The point on that queue's timeline.
    pub point: u64,
}

/// A slot of the image heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DescriptorIndex(pub u32);

impl DescriptorIndex {
    /// The byte offset shaders use.
    pub fn byte_offset(self) -> u32 {
        // Saturating: an index past any heap gives an offset past it too.
        self.0.saturating_mul(IMAGE_DESCRIPTOR_BYTES as u32)
    }
}

/// Where the null descriptors point: the null texture's words 4-5, which
/// its layout leaves unused (zero).
fn null_texel_address(heap_base: u64) -> u64 {
    heap_base + 16
}

fn null_texture(heap_base: u64) -> [u8; 24] {
    Texture {
        layout: Layout::Twiddled,
        swizzle_r: Channel::Zero,
        swizzle_g: Channel::Zero,
        swizzle_b: Channel::Zero,
        swizzle_a: Channel::Zero,
        address: null_texel_address(heap_base),
        ..Texture::default()
    }
    .pack()
    .unwrap_or([0; 24])
}

fn null_pbe(heap_base: u64) -> [u8; 24] {
    Pbe {
        layout: Layout::Twiddled,
        buffer: null_texel_address(heap_base),
        ..Pbe::default()
    }
    .pack()
    .unwrap_or([0; 24])
}

/// The bindless image heap.
#[derive(Debug)]
pub struct ImageHeap {
    device: Device,
    base_va: u64,
    reserved_bytes: u64,
    capacity: u32,
    /// Backing chunks: (GEM handle, CPU mapping), bound one after another
    /// from the base.
    chunks: Vec<(u32, std::sync::Arc<dyn CpuMapping>)>,
    next_unused: u32,
    free: Vec<u32>,
    /// Freed slots waiting for their queue: queue -> (slot, point).
    pending: FastMap<u32, VecDeque<(u32, u64)>>,
    live: u32,
    /// One bit per slot below `next_unused`: allocated (so a double free
    /// is refused instead of corrupting the free list).
    allocated: Vec<u64>,
    /// The null texture descriptor every free slot holds, packed once.
    null_texture: [u8; 24],
}

impl ImageHeap {
    /// A heap of up to `capacity` descriptors: the address range is
    /// reserved now, memory is bound as it fills. Slots 0 and 1 hold a
    /// null texture and a null PBE descriptor.
    pub fn new(device: &Device, capacity: u32) -> Result<ImageHeap, Error> {
        if !(2..=MAX_IMAGE_CAPACITY).contains(&capacity) {
            return Err(Error::Unsupported(format!(
                "an image heap of {capacity} descriptors (2..={MAX_IMAGE_CAPACITY})"
            )));
        }
        let reserved_bytes =
            (u64::from(capacity) * IMAGE_DESCRIPTOR_BYTES).next_multiple_of(PAGE_BYTES);
        let base_va = device.reserve_va(reserved_bytes, PAGE_BYTES)?;
        let mut heap = ImageHeap {
            device: device.clone(),
            base_va,
            reserved_bytes,
            capacity,
            chunks: Vec::new(),
            next_unused: 0,
            free: Vec::new(),
            pending: FastMap::default(),
            live: 0,
            allocated: Vec::new(),
            null_texture: null_texture(base_va),
        };
        let texture = heap.alloc()?;
        let pbe = heap.alloc()?;
        debug_assert_eq!((texture.0, pbe.0), (NULL_TEXTURE, NULL_PBE));
        heap.write(pbe, &null_pbe(base_va))?;
        Ok(heap)
    }

    /// The heap's base address (never changes).
    pub fn base(&self) -> u64 {
        self.base_va
    }

    /// Capacity in descriptors.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Slots allocated (including the two null slots).
    pub fn live(&self) -> u32 {
        self.live
    }

    /// Bytes of memory bound behind the heap.
    pub fn committed_bytes(&self) -> u64 {
        self.chunks.len() as u64 * CHUNK_BYTES
    }

    /// Slots freed but not yet reusable.
    pub fn pending(&self) -> usize {
        self.pending.values().map(VecDeque::len).sum()
    }

    fn commit_chunk(&mut self) -> Result<(), Error> {
        let (handle, size) = self
            .device
            .create_object(CHUNK_BYTES, MemoryType::HostVisible)?;
        let at = self.base_va + self.chunks.len() as u64 * CHUNK_BYTES;
        let len = size.min(self.reserved_bytes - (at - self.base_va));
        let mapped = self.device.map_object(handle, size).and_then(|map| {
            self.device
                .bind(Some(handle), at, len, 0, false)
                .map(|()| map)
        });
        match mapped {
            Ok(map) => {
                let map: std::sync::Arc<dyn CpuMapping> = std::sync::Arc::from(map);
                self.device.register_mapping(at, len, false, &map);
                self.chunks.push((handle, map));
                Ok(())
            }
            Err(e) => {
                self.device.close_object(handle);
                Err(e)
            }
        }
    }

    /// Writes the 24 bytes of slot `index`.
    fn write(&self, index: DescriptorIndex, bytes: &[u8; 24]) -> Result<(), Error> {
        let chunk = (index.0 / DESCRIPTORS_PER_CHUNK) as usize;
        let within = u64::from(index.0 % DESCRIPTORS_PER_CHUNK) * IMAGE_DESCRIPTOR_BYTES;
        let (_, map) = self.chunks.get(chunk).ok_or_else(|| Error::OutOfBounds {
            offset_bytes: u64::from(index.0) * IMAGE_DESCRIPTOR_BYTES,
            len_bytes: IMAGE_DESCRIPTOR_BYTES,
            size_bytes: self.committed_bytes(),
        })?;
        map.write(within, bytes).map_err(|errno| Error::Kernel {
            ioctl: "write",
            errno,
        })
    }

    /// Reads slot `index`.
    pub fn read(&self, index: DescriptorIndex) -> Result<[u8; 24], Error> {
        let chunk = (index.0 / DESCRIPTORS_PER_CHUNK) as usize;
        let within = u64::from(index.0 % DESCRIPTORS_PER_CHUNK) * IMAGE_DESCRIPTOR_BYTES;
        let mut out = [0u8; 24];
        if let Some((_, map)) = self.chunks.get(chunk) {
            map.read(within, &mut out).map_err(|errno| Error::Kernel {
                ioctl: "read",
                errno,
            })?;
        }
        Ok(out)
    }

    /// Takes a slot holding a null texture descriptor. O(1); binds a new
    /// 1.5 MiB chunk every 65 536 slots.
    pub fn alloc(&mut self) -> Result<DescriptorIndex, Error> {
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                if self.next_unused >= self.capacity {
                    return Err(Error::HeapFull {
                        heap: "image",
                        capacity: u64::from(self.capacity),
                    });
                }
                if self.next_unused / DESCRIPTORS_PER_CHUNK >= self.chunks.len() as u32 {
                    self.commit_chunk()?;
                }
                self.next_unused += 1;
                self.next_unused - 1
            }
        };
        if let Err(e) = self.write(DescriptorIndex(index), &self.null_texture) {
            // Not handed out: back to the free list.
            self.free.push(index);
            return Err(e);
        }
        let word = (index / 64) as usize;
        if word >= self.allocated.len() {
            self.allocated.resize(word + 1, 0);
        }
        self.allocated[word] |= 1 << (index % 64);
        self.live += 1;
        Ok(DescriptorIndex(index))
    }

    /// Whether `index` is a slot the caller holds: allocated and not one
    /// of the shared null slots. Writing any other slot could change what
    /// in-flight work reads.
    fn check_held(&self, index: DescriptorIndex) -> Result<(), Error> {
        let (word, bit) = ((index.0 / 64) as usize, 1u64 << (index.0 % 64));
        if index.0 <= NULL_PBE
            || index.0 >= self.next_unused
            || self.allocated.get(word).is_none_or(|w| w & bit == 0)
        {
            return Err(Error::Unsupported(format!(
                "image heap slot {}, which is not allocated",
                index.0
            )));
        }
        Ok(())
    }

    /// Makes slot `index` resident with a texture descriptor.
    pub fn set_texture(&mut self, index: DescriptorIndex, texture: &Texture) -> Result<(), Error> {
        self.check_held(index)?;
        let bytes = texture
            .pack()
            .map_err(|e| Error::Unsupported(format!("texture descriptor: {e}")))?;
        self.write(index, &bytes)
    }

    /// Makes slot `index` resident with a PBE descriptor.
    pub fn set_pbe(&mut self, index: DescriptorIndex, pbe: &Pbe) -> Result<(), Error> {
        self.check_held(index)?;
        let bytes = pbe
            .pack()
            .map_err(|e| Error::Unsupported(format!("PBE descriptor: {e}")))?;
        self.write(index, &bytes)
    }

    /// Makes slot `index` non-resident: shaders that still name it read
    /// zero instead of the image.
    pub fn make_non_resident(&mut self, index: DescriptorIndex) -> Result<(), Error> {
        self.check_held(index)?;
        self.write(index, &self.null_texture)
    }

    /// Frees slot `index` once the GPU has passed `retire` (a point on
    /// the timeline of the queue that last used it). The null slots are
    /// never freed.
    pub fn free(&mut self, index: DescriptorIndex, retire: RetirePoint) -> Result<(), Error> {
        self.check_held(index)?;
        let (word, bit) = ((index.0 / 64) as usize, 1u64 << (index.0 % 64));
        self.allocated[word] &= !bit;
        self.live -= 1;
        self.pending
            .entry(retire.queue)
            .or_default()
            .push_back((index.0, retire.point));
        Ok(())
    }

    /// Takes back the slots freed for `queue` whose retire point is at or
    /// before `completed` (the point its timeline has reached,
    /// [`crate::Queue::completed_point`]); returns how many. Their
    /// descriptors become null.
    pub fn reclaim(&mut self, queue: u32, completed: u64) -> Result<usize, Error> {
        let mut n = 0;
        while let Some(&(index, point)) = self.pending.get(&queue).and_then(VecDeque::front) {
            if point > completed {
                break;
            }
            self.write(DescriptorIndex(index), &self.null_texture)?;
            if let Some(q) = self.pending.get_mut(&queue) {
                q.pop_front();
            }
            self.free.push(index);
            n += 1;
        }
        Ok(n)
    }
}

impl Drop for ImageHeap {
    fn drop(&mut self) {
        let mut all_unbound = true;
        for (i, (handle, _)) in self.chunks.iter().enumerate() {
            let at = self.base_va + i as u64 * CHUNK_BYTES;
            let len = CHUNK_BYTES.min(self.reserved_bytes - (at - self.base_va));
            self.device.unregister_mapping(at);
            if let Err(e) = self.device.bind(None, at, len, 0, false) {
                tracing::warn!(at = format_args!("{at:#x}"), %e, "image heap unbind failed; its addresses are leaked");
                all_unbound = false;
            }
            self.device.close_object(*handle);
        }
        // Still-mapped addresses must not go to another object.
        if all_unbound {
            let _ = self.device.release_va(self.base_va, self.reserved_bytes);
        }
    }
}

/// A slot of the sampler heap: the index shaders use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SamplerIndex(pub u16);

/// A hash map with [`WordHasher`]: the heaps' keys are small (slots,
/// queue ids, 8 or 24 packed bytes), and SipHash was most of a sampler
/// dedup hit's cost.
type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<WordHasher>>;

/// A multiply-rotate hash over 8-byte words (the Fx hash of rustc). Not
/// resistant to chosen collisions, which only a client's own samplers
/// could cause, against its own heap.
#[derive(Debug, Default, Clone, Copy)]
struct WordHasher(u64);

impl WordHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl std::hash::Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.add(u64::from_le_bytes(word.try_into().unwrap_or_default()));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

/// What identifies a sampler: its packed bytes and, for a custom border
/// colour, the packed border.
type SamplerContent = ([u8; 8], Option<[u8; 16]>);

/// A slot in use: who holds it, and the work that may read it.
#[derive(Debug)]
struct SharedSampler {
    slot: u16,
    references: u32,
    /// The latest retire point per queue of the references released so
    /// far: a shared slot is read by every holder's work, so it is free
    /// only once every one of these queues has passed its point.
    retire: FastMap<u32, u64>,
}

/// The deduplicating sampler heap.
#[derive(Debug)]
pub struct SamplerHeap {
    buffer: Buffer,
    capacity: u16,
    /// Content (sampler, border) -> the slot holding it.
    by_content: FastMap<SamplerContent, SharedSampler>,
    /// First slot -> content, for release.
    by_slot: FastMap<u16, SamplerContent>,
    free_single: Vec<u16>,
    free_triple: Vec<u16>,
    next_unused: u16,
    /// Freed slots waiting for a queue: queue -> (slot, point).
    pending: FastMap<u32, VecDeque<(u16, u64)>>,
    /// Freed slots -> (three slots, queues still to pass their point).
    retiring: FastMap<u16, (bool, usize)>,
}

/// The sampler heap's default capacity in 8-byte slots.
pub const DEFAULT_SAMPLER_CAPACITY: u16 = 8192;

impl SamplerHeap {
    /// A heap of `capacity` 8-byte slots (at most 65 535: `sampler_count`
    /// is 16 bits).
    pub fn new(device: &Device, capacity: u16) -> Result<SamplerHeap, Error> {
        let buffer = device.create_buffer(&BufferDesc {
            size_bytes: u64::from(capacity.max(1)) * 8,
            memory: MemoryType::HostVisible,
            region: Region::General,
            gpu_write: false,
        })?;
        Ok(SamplerHeap {
            buffer,
            capacity,
            by_content: FastMap::default(),
            by_slot: FastMap::default(),
            free_single: Vec::new(),
            free_triple: Vec::new(),
            next_unused: 0,
            pending: FastMap::default(),
            retiring: FastMap::default(),
        })
    }

    /// The heap's address (`sampler_heap`).
    pub fn va(&self) -> u64 {
        self.buffer.va()
    }

    /// The slots in use up to the highest (`sampler_count`).
    pub fn count(&self) -> u16 {
        self.next_unused
    }

    /// Distinct samplers held.
    pub fn unique(&self) -> usize {
        self.by_content.len()
    }

    /// The index of a sampler with this content, taking a reference:
    /// identical samplers share a slot. A `Custom` border colour needs
    /// `border`.
    pub fn acquire(
        &mut self,
        sampler: &Sampler,
        border: Option<&CustomBorder>,
    ) -> Result<SamplerIndex, Error> {
        if (sampler.border_colour == BorderColour::Custom) != border.is_some() {
            return Err(Error::Unsupported(
                "a custom border colour needs its border, and only it".into(),
            ));
        }
        let bytes = sampler
            .pack()
            .map_err(|e| Error::Unsupported(format!("sampler: {e}")))?;
        let border = border
            .map(|b| {
                b.pack()
                    .map_err(|e| Error::Unsupported(format!("border: {e}")))
            })
            .transpose()?;
        let key = (bytes, border);
        if let Some(shared) = self.by_content.get_mut(&key) {
            shared.references += 1;
            return Ok(SamplerIndex(shared.slot));
        }
        let slots: u16 = if border.is_some() { 3 } else { 1 };
        let recycled = if border.is_some() {
            self.free_triple.pop()
        } else {
            self.free_single.pop()
        };
        let slot = match recycled {
            Some(slot) => slot,
            None => {
                if u32::from(self.next_unused) + u32::from(slots) > u32::from(self.capacity) {
                    return Err(Error::HeapFull {
                        heap: "sampler",
                        capacity: u64::from(self.capacity),
                    });
                }
                self.next_unused += slots;
                self.next_unused - slots
            }
        };
        let written = self
            .buffer
            .write(8 * u64::from(slot), &bytes)
            .and_then(|()| match &border {
                Some(border) => self.buffer.write(8 * u64::from(slot) + 8, border),
                None => Ok(()),
            });
        if let Err(e) = written {
            // Not handed out: the slot goes back (nothing reads it).
            if border.is_some() {
                self.free_triple.push(slot);
            } else {
                self.free_single.push(slot);
            }
            return Err(e);
        }
        self.by_content.insert(
            key,
            SharedSampler {
                slot,
                references: 1,
                retire: FastMap::default(),
            },
        );
        self.by_slot.insert(slot, key);
        Ok(SamplerIndex(slot))
    }

    /// Drops a reference; the last one frees the slot once the GPU has
    /// passed `retire` and the retire points of every reference dropped
    /// before (identical samplers share the slot, so all their users'
    /// work may read it).
    pub fn release(&mut self, index: SamplerIndex, retire: RetirePoint) -> Result<(), Error> {
        let key = *self
            .by_slot
            .get(&index.0)
            .ok_or_else(|| Error::Unsupported(format!("releasing sampler slot {}", index.0)))?;
        let Some(shared) = self.by_content.get_mut(&key) else {
            return Ok(());
        };
        let point = shared.retire.entry(retire.queue).or_insert(retire.point);
        *point = (*point).max(retire.point);
        shared.references -= 1;
        if shared.references == 0 {
            let Some(shared) = self.by_content.remove(&key) else {
                return Ok(());
            };
            self.by_slot.remove(&index.0);
            self.retiring
                .insert(index.0, (key.1.is_some(), shared.retire.len()));
            for (queue, point) in shared.retire {
                self.pending
                    .entry(queue)
                    .or_default()
                    .push_back((index.0, point));
            }
        }
        Ok(())
    }

    /// Takes back the slots freed for `queue` whose retire point is at or
    /// before `completed`.
    pub fn reclaim(&mut self, queue: u32, completed: u64) -> usize {
        let mut n = 0;
        while let Some(q) = self.pending.get_mut(&queue) {
            let Some(&(slot, point)) = q.front() else {
                break;
            };
            if point > completed {
                break;
            }
            q.pop_front();
            let Some((triple, queues_left)) = self.retiring.get_mut(&slot) else {
                continue;
            };
            *queues_left -= 1;
            if *queues_left > 0 {
                continue;
            }
            if *triple {
                self.free_triple.push(slot);
            } else {
                self.free_single.push(slot);
            }
            self.retiring.remove(&slot);
            n += 1;
        }
        n
    }
}

/// A descriptor set: an array of heap references (image byte offsets and
/// sampler indices, one 32-bit word each) that shaders read from
/// uniforms or memory and use with the heap base.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescriptorSet {
    words: Vec<u32>,
}

impl DescriptorSet {
    /// An empty set.
    pub fn new() -> DescriptorSet {
        DescriptorSet::default()
    }

    /// Appends an image descriptor (its byte offset in the image heap);
    /// returns its position.
    pub fn push_image(&mut self, index: DescriptorIndex) -> usize {
        self.words.push(index.byte_offset());
        self.words.len() - 1
    }

    /// Appends a sampler (its sampler-heap index); returns its position.
    pub fn push_sampler(&mut self, index: SamplerIndex) -> usize {
        self.words.push(u32::from(index.0));
        self.words.len() - 1
    }

    /// Replaces entry `at` with an image descriptor.
    pub fn set_image(&mut self, at: usize, index: DescriptorIndex) {
        if let Some(word) = self.words.get_mut(at) {
            *word = index.byte_offset();
        }
    }

    /// The words, in order (for uniforms or an upload).
    pub fn words(&self) -> &[u32] {
        &self.words
    }
}
