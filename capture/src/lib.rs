//! The capture file: submissions as the kernel saw them, with the GPU
//! memory they can reach, so that they decode and replay without the
//! process that made them. The layout is in
//! `Documentation/capture-format.md`.
//!
//! A file is a header (magic `AGXCAPT\0`, version) and a sequence of
//! records, each a type, a length and an FNV-1a 64-bit checksum of its
//! payload. A submission is a `Submission` record (the queue's
//! `usc_exec_base`, the SUBMIT argument, its syncs and command buffer)
//! followed by one `Memory` record per mapped range of its VM and an
//! `End` record; a `Params` record (GET_PARAMS) comes first.
//!
//! Both the kmd (`AGX_KMD_CAPTURE`) and the userspace driver
//! (`AGX_UMD_CAPTURE`) write this format; `agx-decode` and `agx-replay`
//! read it.
#![forbid(unsafe_code)]

use std::io::{self, Read, Write};

use zerocopy::{FromBytes, IntoBytes};

use agx_uapi::asahi::{ParamsGlobal, Submit, Sync};

/// The file's first eight bytes.
pub const MAGIC: [u8; 8] = *b"AGXCAPT\0";
/// The format version this code writes and reads.
pub const VERSION: u32 = 1;

/// Record types.
pub mod record {
    /// The device parameters (`ParamsGlobal` bytes).
    pub const PARAMS: u32 = 1;
    /// A submission: usc_exec_base (u64), VM id (u32), queue id (u32),
    /// the `Submit` struct, its syncs, its command buffer.
    pub const SUBMISSION: u32 = 2;
    /// A mapped range of the submission's VM: va (u64), length (u64),
    /// permissions (u32: bit 0 read, bit 1 write), 4 bytes MBZ, then the
    /// bytes.
    pub const MEMORY: u32 = 3;
    /// The end of a submission's records.
    pub const END: u32 = 4;
}

/// FNV-1a, 64 bits: the records' checksum.
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// One mapped range and its bytes at submission time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryRange {
    /// GPU virtual address.
    pub va: u64,
    /// GPU read permission.
    pub read: bool,
    /// GPU write permission.
    pub write: bool,
    /// The bytes.
    pub bytes: Vec<u8>,
}

impl MemoryRange {
    /// Whether `va..va + len` lies inside.
    pub fn contains(&self, va: u64, len: u64) -> bool {
        let (Some(end), Some(last)) = (
            self.va.checked_add(self.bytes.len() as u64),
            va.checked_add(len),
        ) else {
            return false;
        };
        va >= self.va && last <= end
    }
}

/// A captured submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    /// The queue's `usc_exec_base`.
    pub usc_exec_base: u64,
    /// The VM the queue runs in.
    pub vm_id: u32,
    /// The queue.
    pub queue_id: u32,
    /// The SUBMIT argument as the client passed it (its pointers are the
    /// client's).
    pub submit: Submit,
    /// The syncs (waits, then signals).
    pub syncs: Vec<Sync>,
    /// The command buffer.
    pub cmdbuf: Vec<u8>,
    /// Every mapped range of the VM, user half.
    pub memory: Vec<MemoryRange>,
}

impl Submission {
    /// Reads `len` bytes at GPU address `va`, if one range holds them.
    pub fn read(&self, va: u64, len: usize) -> Option<&[u8]> {
        let range = self.memory.iter().find(|r| r.contains(va, len as u64))?;
        let at = (va - range.va) as usize;
        Some(&range.bytes[at..at + len])
    }

    /// The bytes from `va` to the end of its range.
    pub fn tail(&self, va: u64) -> Option<&[u8]> {
        let range = self.memory.iter().find(|r| r.contains(va, 1))?;
        Some(&range.bytes[(va - range.va) as usize..])
    }
}

/// A whole capture.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capture {
    /// The device parameters, if recorded.
    pub params: Option<ParamsGlobal>,
    /// The submissions, in order.
    pub submissions: Vec<Submission>,
}

/// Why a capture did not read.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// Reading failed.
    #[error("reading the capture: {0}")]
    Io(#[from] io::Error),
    /// Not a capture.
    #[error("not a capture (bad magic)")]
    BadMagic,
    /// A version this code does not read.
    #[error("capture version {found}, this reads {VERSION}")]
    Version {
        /// The file's version.
        found: u32,
    },
    /// A record's checksum does not match.
    #[error("record {index} (type {kind}) at byte {offset}: checksum mismatch")]
    Checksum {
        /// Record number.
        index: usize,
        /// Record type.
        kind: u32,
        /// Byte offset of the record.
        offset: u64,
    },
    /// A record is malformed.
    #[error("record {index} at byte {offset}: {what}")]
    Malformed {
        /// Record number.
        index: usize,
        /// Byte offset of the record.
        offset: u64,
        /// What is wrong.
        what: &'static str,
    },
}

/// Writes captures.
#[derive(Debug)]
pub struct CaptureWriter<W: Write> {
    out: W,
}

impl<W: Write> CaptureWriter<W> {
    /// Starts a capture on `out`. The header goes out at once: a client
    /// that never submits (or a process that exits without dropping its
    /// device) leaves a valid capture of no submissions, not an empty file.
    pub fn new(mut out: W) -> io::Result<CaptureWriter<W>> {
        out.write_all(&MAGIC)?;
        out.write_all(&VERSION.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        out.flush()?;
        Ok(CaptureWriter { out })
    }

    fn record(&mut self, kind: u32, payload: &[u8]) -> io::Result<()> {
        self.out.write_all(&kind.to_le_bytes())?;
        self.out.write_all(&0u32.to_le_bytes())?;
        self.out.write_all(&(payload.len() as u64).to_le_bytes())?;
        self.out.write_all(&checksum(payload).to_le_bytes())?;
        self.out.write_all(payload)
    }

    /// Records the device parameters (flushed, like the header).
    pub fn params(&mut self, params: &ParamsGlobal) -> io::Result<()> {
        self.record(record::PARAMS, params.as_bytes())?;
        self.out.flush()
    }

    /// Records a submission and its memory.
    pub fn submission(&mut self, s: &Submission) -> io::Result<()> {
        let mut payload = Vec::new();
        payload.extend(s.usc_exec_base.to_le_bytes());
        payload.extend(s.vm_id.to_le_bytes());
        payload.extend(s.queue_id.to_le_bytes());
        payload.extend(s.submit.as_bytes());
        for sync in &s.syncs {
            payload.extend(sync.as_bytes());
        }
        payload.extend(&s.cmdbuf);
        self.record(record::SUBMISSION, &payload)?;
        for range in &s.memory {
            let mut payload = Vec::with_capacity(24 + range.bytes.len());
            payload.extend(range.va.to_le_bytes());
            payload.extend((range.bytes.len() as u64).to_le_bytes());
            payload.extend((u32::from(range.read) | u32::from(range.write) << 1).to_le_bytes());
            payload.extend(0u32.to_le_bytes());
            payload.extend(&range.bytes);
            self.record(record::MEMORY, &payload)?;
        }
        self.record(record::END, &[])?;
        self.out.flush()
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default())
}

/// Reads a whole capture, checking every checksum.
pub fn read(mut input: impl Read) -> Result<Capture, CaptureError> {
    let mut bytes = Vec::new();
    input.read_to_end(&mut bytes)?;
    parse(&bytes)
}

/// Parses a capture held in memory.
pub fn parse(bytes: &[u8]) -> Result<Capture, CaptureError> {
    if bytes.len() < 16 || bytes[..8] != MAGIC {
        return Err(CaptureError::BadMagic);
    }
    let version = u32_at(bytes, 8);
    if version != VERSION {
        return Err(CaptureError::Version { found: version });
    }
    if u32_at(bytes, 12) != 0 {
        return Err(CaptureError::Malformed {
            index: 0,
            offset: 12,
            what: "header flags are not zero",
        });
    }
    let mut capture = Capture::default();
    let mut at = 16usize;
    let mut index = 0;
    let mut open: Option<Submission> = None;
    while at < bytes.len() {
        let offset = at as u64;
        let malformed = |what| CaptureError::Malformed {
            index,
            offset,
            what,
        };
        if bytes.len() - at < 24 {
            return Err(malformed("truncated record header"));
        }
        let kind = u32_at(bytes, at);
        let len = u64_at(bytes, at + 8);
        let sum = u64_at(bytes, at + 16);
        let start = at + 24;
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| start.checked_add(l))
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| malformed("record runs past the end"))?;
        let payload = &bytes[start..end];
        if checksum(payload) != sum {
            return Err(CaptureError::Checksum {
                index,
                kind,
                offset,
            });
        }
        match kind {
            record::PARAMS => {
                // A shorter struct is an older kernel's; a longer one is not
                // this version's.
                if payload.len() > size_of::<ParamsGlobal>() {
                    return Err(malformed("parameters longer than drm_asahi_params_global"));
                }
                let mut params = ParamsGlobal::default();
                let n = payload.len().min(size_of::<ParamsGlobal>());
                params.as_mut_bytes()[..n].copy_from_slice(&payload[..n]);
                capture.params = Some(params);
            }
            record::SUBMISSION => {
                let head = 16 + size_of::<Submit>();
                if payload.len() < head {
                    return Err(malformed("short submission"));
                }
                let submit = Submit::read_from_bytes(&payload[16..head])
                    .map_err(|_| malformed("bad submit"))?;
                let syncs_len = (submit.in_sync_count as usize + submit.out_sync_count as usize)
                    * size_of::<Sync>();
                let cmdbuf_end = head + syncs_len + submit.cmdbuf_size as usize;
                if payload.len() != cmdbuf_end {
                    return Err(malformed("submission length does not match its counts"));
                }
                let syncs = payload[head..head + syncs_len]
                    .chunks_exact(size_of::<Sync>())
                    .filter_map(|c| Sync::read_from_bytes(c).ok())
                    .collect();
                open = Some(Submission {
                    usc_exec_base: u64_at(payload, 0),
                    vm_id: u32_at(payload, 8),
                    queue_id: u32_at(payload, 12),
                    submit,
                    syncs,
                    cmdbuf: payload[head + syncs_len..].to_vec(),
                    memory: Vec::new(),
                });
            }
            record::MEMORY => {
                let s = open
                    .as_mut()
                    .ok_or_else(|| malformed("memory outside a submission"))?;
                if payload.len() < 24 || payload.len() as u64 - 24 != u64_at(payload, 8) {
                    return Err(malformed("memory length does not match"));
                }
                if u32_at(payload, 20) != 0 {
                    return Err(malformed("a memory record's reserved word is not zero"));
                }
                if u64_at(payload, 0).checked_add(u64_at(payload, 8)).is_none() {
                    return Err(malformed("a memory range wraps around the address space"));
                }
                let flags = u32_at(payload, 16);
                s.memory.push(MemoryRange {
                    va: u64_at(payload, 0),
                    read: flags & 1 != 0,
                    write: flags & 2 != 0,
                    bytes: payload[24..].to_vec(),
                });
            }
            record::END => {
                let s = open
                    .take()
                    .ok_or_else(|| malformed("end outside a submission"))?;
                capture.submissions.push(s);
            }
            _ => return Err(malformed("unknown record type")),
        }
        at = end;
        index += 1;
    }
    if open.is_some() {
        return Err(CaptureError::Malformed {
            index,
            offset: at as u64,
            what: "the last submission has no end",
        });
    }
    Ok(capture)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Capture {
        let cmdbuf = vec![1u8, 2, 3, 4];
        Capture {
            params: Some(ParamsGlobal {
                gpu_generation: 13,
                ..ParamsGlobal::default()
            }),
            submissions: vec![Submission {
                usc_exec_base: 0x1_0000_0000,
                vm_id: 1,
                queue_id: 2,
                submit: Submit {
                    queue_id: 2,
                    out_sync_count: 1,
                    cmdbuf_size: 4,
                    ..Submit::default()
                },
                syncs: vec![Sync {
                    sync_type: 0,
                    handle: 7,
                    timeline_value: 0,
                }],
                cmdbuf,
                memory: vec![MemoryRange {
                    va: 0x5_0000_0000,
                    read: true,
                    write: false,
                    bytes: vec![9; 100],
                }],
            }],
        }
    }

    #[test]
    fn a_capture_reads_back_and_corruption_is_caught() {
        let c = sample();
        let mut w = CaptureWriter::new(Vec::new()).unwrap();
        w.params(c.params.as_ref().unwrap()).unwrap();
        w.submission(&c.submissions[0]).unwrap();
        let bytes = w.out;
        assert_eq!(parse(&bytes).unwrap(), c);
        assert_eq!(c.submissions[0].read(0x5_0000_0010, 4), Some(&[9u8; 4][..]));
        assert_eq!(c.submissions[0].read(0x5_0000_0062, 4), None);
        // A flipped byte in the memory record's payload.
        let mut bad = bytes.clone();
        let last = bad.len() - 24 - 10;
        bad[last] ^= 1;
        assert!(matches!(parse(&bad), Err(CaptureError::Checksum { .. })));
        assert!(matches!(
            parse(&bytes[..bytes.len() - 3]),
            Err(CaptureError::Malformed { .. })
        ));
        assert!(matches!(
            parse(b"not a capture at all"),
            Err(CaptureError::BadMagic)
        ));
    }
}
