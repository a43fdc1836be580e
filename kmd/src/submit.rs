//! Parsing a SUBMIT: the sync array and the flat command buffer.
//!
//! A submission's command buffer is a sequence of 8-byte [`CmdHeader`]s,
//! each followed by its payload: a render pass ([`CmdRender`]), a compute
//! dispatch ([`CmdCompute`]), or a list of attachments (memory the
//! following vertex, fragment or compute work writes, a hint for cache
//! maintenance). The buffer holds no CPU pointers, so it can travel over
//! virtio-gpu unchanged. This module turns it into typed [`Command`]s,
//! enforcing every rule the upstream kernel checks, before anything is
//! queued; the scheduler and the firmware interface run the result.

use agx_uapi::asahi::{
    Attachment, CmdCompute, CmdHeader, CmdRender, CmdType, RenderFlags, Sync, SyncType,
    DRM_ASAHI_BARRIER_NONE,
};
use zerocopy::{FromBytes, IntoBytes};

use crate::params::{MAX_ATTACHMENTS, MAX_COMMANDS_PER_SUBMISSION};

/// Why a SUBMIT's arguments are refused (all `EINVAL` except where noted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// A header or payload runs past `cmdbuf_size`.
    #[error("command {index} runs past the {size_bytes}-byte command buffer")]
    Truncated {
        /// Which command.
        index: usize,
        /// The buffer's size.
        size_bytes: usize,
    },
    /// An unknown command type.
    #[error("command {index}: unknown type {cmd_type}")]
    UnknownType {
        /// Which command.
        index: usize,
        /// The type.
        cmd_type: u16,
    },
    /// A payload longer than its struct with non-zero extra bytes (a field
    /// this kernel does not know): `E2BIG`, as `copy_struct_from_user`.
    #[error("command {index}: unknown non-zero fields past the struct")]
    UnknownFields {
        /// Which command.
        index: usize,
    },
    /// No render or compute command, or more than the maximum.
    #[error("{count} render and compute commands (1..={max} allowed)")]
    CommandCount {
        /// How many.
        count: usize,
        /// The maximum.
        max: u32,
    },
    /// A barrier that names no earlier command of its kind.
    #[error("command {index}: {kind} barrier {value} names no earlier command")]
    BadBarrier {
        /// Which command.
        index: usize,
        /// `vdm` or `cdm`.
        kind: &'static str,
        /// The value.
        value: u16,
    },
    /// An attachment command with a barrier other than none.
    #[error("command {index}: attachment commands take no barrier")]
    AttachmentBarrier {
        /// Which command.
        index: usize,
    },
    /// An attachment list that is not whole attachments, too long, with
    /// non-zero pad/flags, or with an attachment of 2^32 cache lines or
    /// more.
    #[error("command {index}: bad attachment list")]
    BadAttachments {
        /// Which command.
        index: usize,
    },
    /// A render pass with unknown flags or out-of-range dimensions.
    #[error("command {index}: render pass: {reason}")]
    BadRender {
        /// Which command.
        index: usize,
        /// The rule broken.
        reason: &'static str,
    },
    /// A compute command with non-zero flags.
    #[error("command {index}: compute flags must be zero")]
    BadCompute {
        /// Which command.
        index: usize,
    },
    /// A sync entry with an unknown type or a binary syncobj with a point.
    #[error("sync {index}: {reason}")]
    BadSync {
        /// Which entry.
        index: usize,
        /// The rule broken.
        reason: &'static str,
    },
}

/// Why a SUBMIT is refused before its commands are parsed, or after.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitArgError {
    /// `flags` or `pad` is not zero.
    #[error("{field} must be zero")]
    MustBeZero {
        /// The field.
        field: &'static str,
    },
    /// More syncs or a larger command buffer than the kernel accepts.
    #[error("{what}: {value} exceeds the limit of {limit}")]
    TooLarge {
        /// Which count.
        what: &'static str,
        /// The value given.
        value: u64,
        /// The limit.
        limit: u64,
    },
    /// No queue with this id: `ENOENT`.
    #[error("no queue {queue_id}")]
    NoSuchQueue {
        /// The id.
        queue_id: u32,
    },
    /// A sync names no syncobj: `ENOENT`.
    #[error("sync {index}: no syncobj {handle}")]
    NoSuchSyncobj {
        /// Which entry.
        index: usize,
        /// The handle.
        handle: u32,
    },
    /// A wait on a syncobj (point) that has no fence: `EINVAL`, as
    /// `drm_syncobj_find_fence` without WAIT_FOR_SUBMIT.
    #[error("sync {index}: nothing to wait for")]
    NoFence {
        /// Which entry.
        index: usize,
    },
    /// A timestamp names no GEM_BIND_OBJECT binding: `ENOENT`.
    #[error("command {index}: no timestamp buffer {handle}")]
    NoSuchTimestampBuffer {
        /// Which command.
        index: usize,
        /// The handle.
        handle: u32,
    },
    /// A timestamp offset past its buffer (or not 8-byte aligned).
    #[error("command {index}: timestamp offset {offset} outside its buffer")]
    BadTimestamp {
        /// Which command.
        index: usize,
        /// The offset.
        offset: u32,
    },
    /// The syncs or the command buffer could not be read: `EFAULT`.
    #[error(transparent)]
    Fault(#[from] crate::uaccess::Fault),
}

/// What a command waits for on one subqueue (render or compute).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Barrier {
    /// All earlier work of that kind on the queue, including earlier
    /// submissions.
    AllPrior,
    /// The given (0-based) render or compute command of this submission.
    Command(usize),
    /// Nothing.
    None,
}

/// One hardware command, with the attachments in effect for it.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// A render pass.
    Render {
        /// The pass.
        cmd: Box<CmdRender>,
        /// Wait on the render subqueue.
        vdm_barrier: Barrier,
        /// Wait on the compute subqueue.
        cdm_barrier: Barrier,
        /// Memory the vertex stage writes.
        vertex_attachments: Vec<Attachment>,
        /// Memory the fragment stage writes (render targets).
        fragment_attachments: Vec<Attachment>,
    },
    /// A compute dispatch.
    Compute {
        /// The dispatch.
        cmd: Box<CmdCompute>,
        /// Wait on the render subqueue.
        vdm_barrier: Barrier,
        /// Wait on the compute subqueue.
        cdm_barrier: Barrier,
        /// Memory the dispatch writes.
        attachments: Vec<Attachment>,
    },
}

/// Reads a payload as `T`: shorter payloads are zero-extended, longer
/// ones must be zero past the struct.
fn payload<T: FromBytes + IntoBytes>(bytes: &[u8], index: usize) -> Result<T, SubmitError> {
    let mut buf = vec![0u8; size_of::<T>()];
    let n = bytes.len().min(buf.len());
    buf[..n].copy_from_slice(&bytes[..n]);
    if bytes[n..].iter().any(|&b| b != 0) {
        return Err(SubmitError::UnknownFields { index });
    }
    T::read_from_bytes(&buf).map_err(|_| SubmitError::UnknownFields { index })
}

fn barrier(
    value: u16,
    seen: usize,
    index: usize,
    kind: &'static str,
) -> Result<Barrier, SubmitError> {
    match value {
        0 => Ok(Barrier::AllPrior),
        DRM_ASAHI_BARRIER_NONE => Ok(Barrier::None),
        n if usize::from(n) <= seen => Ok(Barrier::Command(usize::from(n) - 1)),
        value => Err(SubmitError::BadBarrier { index, kind, value }),
    }
}

fn check_render(cmd: &CmdRender, index: usize) -> Result<(), SubmitError> {
    let bad = |reason| Err(SubmitError::BadRender { index, reason });
    if RenderFlags::from_bits(cmd.flags).is_none() {
        return bad("unknown flags");
    }
    if !(1..=16384).contains(&cmd.width_px) || !(1..=16384).contains(&cmd.height_px) {
        return bad("width and height must be 1..=16384");
    }
    if !(1..=2048).contains(&cmd.layers) {
        return bad("layers must be 1..=2048");
    }
    if ![1, 2, 4].contains(&cmd.samples) {
        return bad("samples must be 1, 2 or 4");
    }
    if ![(32, 32), (32, 16), (16, 16)].contains(&(cmd.utile_width_px, cmd.utile_height_px)) {
        return bad("tile size must be 32x32, 32x16 or 16x16");
    }
    Ok(())
}

/// Parses and checks a command buffer.
pub fn parse_commands(buffer: &[u8]) -> Result<Vec<Command>, SubmitError> {
    let mut commands = Vec::new();
    let (mut renders, mut computes) = (0usize, 0usize);
    let mut vertex_attachments = Vec::new();
    let mut fragment_attachments = Vec::new();
    let mut compute_attachments = Vec::new();
    let mut offset = 0;
    let mut index = 0;
    while offset < buffer.len() {
        let truncated = SubmitError::Truncated {
            index,
            size_bytes: buffer.len(),
        };
        let header_end = offset + size_of::<CmdHeader>();
        let header = buffer
            .get(offset..header_end)
            .and_then(|b| CmdHeader::read_from_bytes(b).ok())
            .ok_or(truncated.clone())?;
        let body = buffer
            .get(header_end..header_end + usize::from(header.size))
            .ok_or(truncated)?;
        let cmd_type = CmdType::try_from(u32::from(header.cmd_type)).map_err(|_| {
            SubmitError::UnknownType {
                index,
                cmd_type: header.cmd_type,
            }
        })?;
        match cmd_type {
            CmdType::SetVertexAttachments
            | CmdType::SetFragmentAttachments
            | CmdType::SetComputeAttachments => {
                if header.vdm_barrier != DRM_ASAHI_BARRIER_NONE
                    || header.cdm_barrier != DRM_ASAHI_BARRIER_NONE
                {
                    return Err(SubmitError::AttachmentBarrier { index });
                }
                let size = size_of::<Attachment>();
                if body.len() % size != 0 || body.len() / size > MAX_ATTACHMENTS as usize {
                    return Err(SubmitError::BadAttachments { index });
                }
                let list: Vec<Attachment> = body
                    .chunks_exact(size)
                    .filter_map(|c| Attachment::read_from_bytes(c).ok())
                    .collect();
                // The firmware counts an attachment in 128-byte cache
                // lines in 32 bits: a size past that is refused (upstream:
                // EINVAL from the conversion).
                if list.iter().any(|a| {
                    a.pad != 0 || a.flags != 0 || a.size.div_ceil(128) > u64::from(u32::MAX)
                }) {
                    return Err(SubmitError::BadAttachments { index });
                }
                match cmd_type {
                    CmdType::SetVertexAttachments => vertex_attachments = list,
                    CmdType::SetFragmentAttachments => fragment_attachments = list,
                    _ => compute_attachments = list,
                }
            }
            CmdType::Render | CmdType::Compute => {
                let vdm_barrier = barrier(header.vdm_barrier, renders, index, "vdm")?;
                let cdm_barrier = barrier(header.cdm_barrier, computes, index, "cdm")?;
                if cmd_type == CmdType::Render {
                    let cmd: CmdRender = payload(body, index)?;
                    check_render(&cmd, index)?;
                    renders += 1;
                    commands.push(Command::Render {
                        cmd: Box::new(cmd),
                        vdm_barrier,
                        cdm_barrier,
                        vertex_attachments: vertex_attachments.clone(),
                        fragment_attachments: fragment_attachments.clone(),
                    });
                } else {
                    let cmd: CmdCompute = payload(body, index)?;
                    if cmd.flags != 0 {
                        return Err(SubmitError::BadCompute { index });
                    }
                    computes += 1;
                    commands.push(Command::Compute {
                        cmd: Box::new(cmd),
                        vdm_barrier,
                        cdm_barrier,
                        attachments: compute_attachments.clone(),
                    });
                }
            }
        }
        offset = header_end + usize::from(header.size);
        index += 1;
    }
    let count = renders + computes;
    if count == 0 || count > MAX_COMMANDS_PER_SUBMISSION as usize {
        return Err(SubmitError::CommandCount {
            count,
            max: MAX_COMMANDS_PER_SUBMISSION,
        });
    }
    Ok(commands)
}

/// Checks a sync array entry: a known type, and no point on a binary
/// syncobj.
pub fn check_sync(sync: &Sync, index: usize) -> Result<SyncType, SubmitError> {
    let ty = SyncType::try_from(sync.sync_type).map_err(|_| SubmitError::BadSync {
        index,
        reason: "unknown sync type",
    })?;
    if ty == SyncType::Syncobj && sync.timeline_value != 0 {
        return Err(SubmitError::BadSync {
            index,
            reason: "a binary syncobj has no timeline point",
        });
    }
    Ok(ty)
}

#[cfg(test)]
mod tests {
    use zerocopy::FromZeros;

    use super::*;

    fn header(cmd_type: CmdType, size: usize, vdm: u16, cdm: u16) -> Vec<u8> {
        CmdHeader {
            cmd_type: cmd_type as u16,
            size: size as u16,
            vdm_barrier: vdm,
            cdm_barrier: cdm,
        }
        .as_bytes()
        .to_vec()
    }

    fn render() -> CmdRender {
        CmdRender {
            width_px: 800,
            height_px: 600,
            layers: 1,
            samples: 1,
            utile_width_px: 32,
            utile_height_px: 32,
            ..CmdRender::new_zeroed()
        }
    }

    fn with(cmd_type: CmdType, payload: &[u8], vdm: u16, cdm: u16) -> Vec<u8> {
        let mut bytes = header(cmd_type, payload.len(), vdm, cdm);
        bytes.extend_from_slice(payload);
        bytes
    }

    const NONE: u16 = DRM_ASAHI_BARRIER_NONE;

    #[test]
    fn a_sequence_with_attachments_and_barriers_parses() {
        let attachment = Attachment {
            pointer: 0x1000,
            size: 4096,
            pad: 0,
            flags: 0,
        };
        let mut buf = with(
            CmdType::SetFragmentAttachments,
            attachment.as_bytes(),
            NONE,
            NONE,
        );
        buf.extend(with(CmdType::Render, render().as_bytes(), 0, NONE));
        let compute = CmdCompute::new_zeroed();
        // A short payload is zero-extended.
        buf.extend(with(CmdType::Compute, &compute.as_bytes()[..16], 1, 0));
        buf.extend(with(CmdType::Render, render().as_bytes(), 1, 1));
        let commands = parse_commands(&buf).unwrap();
        assert_eq!(commands.len(), 3);
        let Command::Render {
            vdm_barrier,
            cdm_barrier,
            fragment_attachments,
            ..
        } = &commands[0]
        else {
            panic!("render")
        };
        assert_eq!(
            (*vdm_barrier, *cdm_barrier),
            (Barrier::AllPrior, Barrier::None)
        );
        assert_eq!(fragment_attachments, &[attachment]);
        let Command::Compute {
            vdm_barrier,
            cdm_barrier,
            ..
        } = &commands[1]
        else {
            panic!("compute")
        };
        assert_eq!(
            (*vdm_barrier, *cdm_barrier),
            (Barrier::Command(0), Barrier::AllPrior)
        );
        let Command::Render { cdm_barrier, .. } = &commands[2] else {
            panic!("render")
        };
        assert_eq!(*cdm_barrier, Barrier::Command(0));
    }

    #[test]
    fn every_rule_is_enforced() {
        let r = render();
        let ok = with(CmdType::Render, r.as_bytes(), NONE, NONE);
        assert!(parse_commands(&ok).is_ok());
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (Vec::new(), "no commands"),
            (ok[..4].to_vec(), "truncated header"),
            (ok[..20].to_vec(), "truncated payload"),
            (
                with(CmdType::Render, r.as_bytes(), 1, NONE),
                "barrier on a command not yet seen",
            ),
            (
                with(CmdType::Render, r.as_bytes(), NONE, 2),
                "cdm barrier past the computes",
            ),
            (
                {
                    let mut b = header(CmdType::Render, 0, NONE, NONE);
                    b[0] = 9;
                    b
                },
                "unknown type",
            ),
            (
                {
                    let mut p = r.as_bytes().to_vec();
                    p.extend([0, 0, 0, 1]);
                    with(CmdType::Render, &p, NONE, NONE)
                },
                "unknown trailing field",
            ),
            (
                with(CmdType::SetVertexAttachments, &[0u8; 24], 0, NONE),
                "attachment barrier",
            ),
            (
                with(CmdType::SetVertexAttachments, &[0u8; 20], NONE, NONE),
                "partial attachment",
            ),
            (
                with(CmdType::SetVertexAttachments, &[0u8; 24 * 17], NONE, NONE),
                "too many attachments",
            ),
            (
                with(
                    CmdType::SetVertexAttachments,
                    Attachment {
                        flags: 1,
                        ..Attachment::new_zeroed()
                    }
                    .as_bytes(),
                    NONE,
                    NONE,
                ),
                "attachment flags",
            ),
            (
                with(
                    CmdType::Render,
                    CmdRender { flags: 1 << 5, ..r }.as_bytes(),
                    NONE,
                    NONE,
                ),
                "render flags",
            ),
            (
                with(
                    CmdType::Render,
                    CmdRender { width_px: 0, ..r }.as_bytes(),
                    NONE,
                    NONE,
                ),
                "zero width",
            ),
            (
                with(
                    CmdType::Render,
                    CmdRender {
                        height_px: 16385,
                        ..r
                    }
                    .as_bytes(),
                    NONE,
                    NONE,
                ),
                "too tall",
            ),
            (
                with(
                    CmdType::Render,
                    CmdRender { layers: 2049, ..r }.as_bytes(),
                    NONE,
                    NONE,
                ),
                "too many layers",
            ),
            (
                with(
                    CmdType::Render,
                    CmdRender { samples: 3, ..r }.as_bytes(),
                    NONE,
                    NONE,
                ),
                "3 samples",
            ),
            (
                with(
                    CmdType::Render,
                    CmdRender {
                        utile_width_px: 16,
                        utile_height_px: 32,
                        ..r
                    }
                    .as_bytes(),
                    NONE,
                    NONE,
                ),
                "16x32 tiles",
            ),
            (
                with(
                    CmdType::Compute,
                    CmdCompute {
                        flags: 1,
                        ..CmdCompute::new_zeroed()
                    }
                    .as_bytes(),
                    NONE,
                    NONE,
                ),
                "compute flags",
            ),
            (ok.repeat(65), "65 commands"),
        ];
        for (buf, what) in cases {
            assert!(parse_commands(&buf).is_err(), "{what} must be refused");
        }
        assert_eq!(parse_commands(&ok.repeat(64)).map(|c| c.len()), Ok(64));
    }

    #[test]
    fn sync_entries() {
        let binary = Sync {
            sync_type: 0,
            handle: 1,
            timeline_value: 0,
        };
        assert_eq!(check_sync(&binary, 0), Ok(SyncType::Syncobj));
        assert!(check_sync(
            &Sync {
                timeline_value: 3,
                ..binary
            },
            0
        )
        .is_err());
        assert_eq!(
            check_sync(
                &Sync {
                    sync_type: 1,
                    timeline_value: 3,
                    ..binary
                },
                0
            ),
            Ok(SyncType::TimelineSyncobj)
        );
        assert!(check_sync(
            &Sync {
                sync_type: 2,
                ..binary
            },
            0
        )
        .is_err());
    }
}
