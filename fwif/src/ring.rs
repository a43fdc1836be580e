//! Rings: fixed-size message queues in shared memory.
//!
//! Every channel between the kmd and the firmware is a ring of
//! fixed-size entries plus a state block holding the read and write
//! indices in separate 64-byte cache lines (so the producer and the
//! consumer never write the same line). The producer writes an entry,
//! then advances `write_index`; the consumer reads entries up to it, then
//! advances `read_index`. One slot always stays empty, so `read == write`
//! means empty and the ring holds `entries - 1` messages. The memory is
//! reached through [`SharedMemory`], implemented by each side with its own
//! address translation.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use agx_hw::addr::FwVa;

/// Memory both sides can reach, by the address the firmware uses.
pub trait SharedMemory {
    /// Reads `buf.len()` bytes at `address`.
    fn read(&self, address: FwVa, buf: &mut [u8]) -> Result<(), MemoryError>;
    /// Writes `data` at `address`.
    fn write(&self, address: FwVa, data: &[u8]) -> Result<(), MemoryError>;
}

/// A shared-memory access that failed (the address is not mapped for
/// the side that tried).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("shared memory at {address:#x} is not accessible")]
pub struct MemoryError {
    /// The first inaccessible address.
    pub address: FwVa,
}

/// The state block of a ring.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct RingState {
    /// The next entry the consumer reads.
    pub read_index: u32,
    /// Padding to the next cache line.
    pub pad0: [u32; 15],
    /// The next entry the producer writes.
    pub write_index: u32,
    /// Padding to the end of the cache line.
    pub pad1: [u32; 15],
}

const _: () = assert!(size_of::<RingState>() == 128);

/// Offset of `read_index` in the state block.
pub const READ_INDEX_OFFSET: u64 = 0;
/// Offset of `write_index` in the state block.
pub const WRITE_INDEX_OFFSET: u64 = 64;

/// Where a ring lives: its state block and its entries.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct RingDesc {
    /// Address of the [`RingState`].
    pub state: FwVa,
    /// Address of entry 0.
    pub entries: FwVa,
    /// Number of entries.
    pub entry_count: u32,
    /// Bytes per entry.
    pub entry_bytes: u32,
}

const _: () = assert!(size_of::<RingDesc>() == 24);

/// Why a ring operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The ring is full (the consumer is behind).
    #[error("ring full")]
    Full,
    /// An index in the state block is out of range: the other side
    /// corrupted the ring.
    #[error("corrupt ring index {index} (ring of {entries})")]
    Corrupt {
        /// The index read.
        index: u32,
        /// The ring's size.
        entries: u32,
    },
    /// A message of the wrong size for the ring.
    #[error("message of {bytes} bytes for a ring of {entry_bytes}-byte entries")]
    WrongSize {
        /// The message size.
        bytes: usize,
        /// The entry size.
        entry_bytes: u32,
    },
    /// The memory is not accessible.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

fn read_u32(memory: &dyn SharedMemory, address: FwVa) -> Result<u32, MemoryError> {
    let mut buf = [0u8; 4];
    memory.read(address, &mut buf)?;
    Ok(u32::from_le_bytes(buf))
}

impl RingDesc {
    fn index(&self, memory: &dyn SharedMemory, offset: u64) -> Result<u32, RingError> {
        let index = read_u32(memory, self.state.offset(offset))?;
        if index >= self.entry_count {
            return Err(RingError::Corrupt {
                index,
                entries: self.entry_count,
            });
        }
        Ok(index)
    }

    fn entry_address(&self, index: u32) -> FwVa {
        self.entries
            .offset(u64::from(index) * u64::from(self.entry_bytes))
    }

    /// Producer side: appends one message.
    pub fn push(&self, memory: &dyn SharedMemory, message: &[u8]) -> Result<(), RingError> {
        if message.len() != self.entry_bytes as usize {
            return Err(RingError::WrongSize {
                bytes: message.len(),
                entry_bytes: self.entry_bytes,
            });
        }
        let write = self.index(memory, WRITE_INDEX_OFFSET)?;
        let read = self.index(memory, READ_INDEX_OFFSET)?;
        let next = (write + 1) % self.entry_count;
        if next == read {
            return Err(RingError::Full);
        }
        memory.write(self.entry_address(write), message)?;
        memory.write(self.state.offset(WRITE_INDEX_OFFSET), &next.to_le_bytes())?;
        Ok(())
    }

    /// Consumer side: takes the oldest message, if any.
    pub fn pop(&self, memory: &dyn SharedMemory) -> Result<Option<Vec<u8>>, RingError> {
        let write = self.index(memory, WRITE_INDEX_OFFSET)?;
        let read = self.index(memory, READ_INDEX_OFFSET)?;
        if read == write {
            return Ok(None);
        }
        let mut message = vec![0u8; self.entry_bytes as usize];
        memory.read(self.entry_address(read), &mut message)?;
        memory.write(
            self.state.offset(READ_INDEX_OFFSET),
            &((read + 1) % self.entry_count).to_le_bytes(),
        )?;
        Ok(Some(message))
    }

    /// Bytes the entries take.
    pub fn entries_bytes(&self) -> u64 {
        u64::from(self.entry_count) * u64::from(self.entry_bytes)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    struct Flat(RefCell<Vec<u8>>);

    impl SharedMemory for Flat {
        fn read(&self, address: FwVa, buf: &mut [u8]) -> Result<(), MemoryError> {
            let mem = self.0.borrow();
            let start = address.get() as usize;
            let src = mem
                .get(start..start + buf.len())
                .ok_or(MemoryError { address })?;
            buf.copy_from_slice(src);
            Ok(())
        }
        fn write(&self, address: FwVa, data: &[u8]) -> Result<(), MemoryError> {
            let mut mem = self.0.borrow_mut();
            let start = address.get() as usize;
            let dst = mem
                .get_mut(start..start + data.len())
                .ok_or(MemoryError { address })?;
            dst.copy_from_slice(data);
            Ok(())
        }
    }

    #[test]
    fn messages_come_out_in_order_across_wrap_around() {
        let memory = Flat(RefCell::new(vec![0; 4096]));
        let ring = RingDesc {
            state: FwVa(0),
            entries: FwVa(256),
            entry_count: 4,
            entry_bytes: 8,
        };
        assert_eq!(ring.pop(&memory), Ok(None));
        let mut next_in = 0u64;
        let mut next_out = 0u64;
        for round in 0..10 {
            // Fill to capacity (3), then drain a varying amount.
            while ring.push(&memory, &next_in.to_le_bytes()).is_ok() {
                next_in += 1;
            }
            assert_eq!(next_in - next_out, 3, "one slot stays empty");
            for _ in 0..(1 + round % 3) {
                let msg = ring.pop(&memory).unwrap().unwrap();
                assert_eq!(u64::from_le_bytes(msg.try_into().unwrap()), next_out);
                next_out += 1;
            }
        }
        assert_eq!(
            ring.push(&memory, &[0; 4]),
            Err(RingError::WrongSize {
                bytes: 4,
                entry_bytes: 8
            })
        );
        // A corrupt index from the other side is an error, not a panic.
        memory
            .write(FwVa(WRITE_INDEX_OFFSET), &99u32.to_le_bytes())
            .unwrap();
        assert_eq!(
            ring.pop(&memory),
            Err(RingError::Corrupt {
                index: 99,
                entries: 4
            })
        );
        let unmapped = RingDesc {
            state: FwVa(1 << 40),
            ..ring
        };
        assert!(matches!(unmapped.pop(&memory), Err(RingError::Memory(_))));
    }
}
