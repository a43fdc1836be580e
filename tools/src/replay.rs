//! `agx-replay`: a capture re-submitted to a fresh simulated device.
//!
//! Each submission gets a device of its own with the capture's memory
//! mapped at the same addresses (the snapshot taken when it was
//! submitted), a queue with the same `usc_exec_base`, and its command
//! buffer as captured (timestamps dropped: their buffers belonged to the
//! capturing process; syncs replaced by one completion syncobj). The
//! render targets its end-of-tile programs store (linear RGBA8 through
//! PBE descriptors) are read back, so a misrender reproduces from the
//! file alone, and the simulator's determinism makes that a regression
//! test.

use std::time::{Duration, Instant};

use agx_capture::{Capture, Submission};
use agx_hw::formats::{Channels, Layout, Pbe, TextureType, UscWord};
use agx_kmd::{Errno, File};
use agx_sim::{System, SystemConfig};
use agx_uapi::asahi::{
    self, BindFlags, CmdCompute, CmdHeader, CmdRender, CmdType, GemBindOp, GemCreate, QueueCreate,
    Submit, Sync, VmBind, VmCreate,
};
use agx_uapi::drm::{self, SyncobjCreate};
use zerocopy::{FromBytes, IntoBytes};

/// A render target read back after a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Which command of the submission stored it.
    pub command: usize,
    /// Its index among that command's end-of-tile stores.
    pub index: usize,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// RGBA8 rows, after the replay.
    pub rgba: Vec<u8>,
    /// The rows as the capture held them when the submission was made
    /// (zero where the capture has no memory).
    pub before: Vec<u8>,
    /// Where the first row is (GPU virtual address).
    pub address: u64,
    /// Bytes from one row to the next.
    pub stride_bytes: u32,
}

/// What replaying one submission gave.
#[derive(Debug, Clone)]
pub struct Replayed {
    /// The submission's index in the capture.
    pub submission: usize,
    /// The fence's error, if it failed on the GPU.
    pub error: Option<Errno>,
    /// Then, the device's line about the fault or timeout (address, unit,
    /// reason; queue and submission).
    pub failure: Option<String>,
    /// The render targets.
    pub targets: Vec<Target>,
}

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// An ioctl of the replaying device failed.
    #[error("{what} failed: {errno:?}")]
    Kernel {
        /// What was being done.
        what: &'static str,
        /// The errno.
        errno: Errno,
    },
    /// The simulated device could not be built.
    #[error("cannot build the simulated device")]
    Device,
    /// The capture maps memory where the kernel range has to be.
    #[error("the capture maps {va:#x}, inside the kernel range")]
    KernelRange {
        /// The mapping.
        va: u64,
    },
    /// The capture has no such submission.
    #[error("the capture has no submission {0}")]
    NoSuchSubmission(usize),
    /// The submission did not finish.
    #[error("submission {0} did not finish within the timeout")]
    Timeout(usize),
}

fn call<T: IntoBytes + FromBytes + zerocopy::Immutable>(
    file: &File,
    request: u32,
    arg: &mut T,
    what: &'static str,
) -> Result<(), ReplayError> {
    file.ioctl(u64::from(request), arg as *mut T as u64)
        .map(|_| ())
        .map_err(|errno| ReplayError::Kernel { what, errno })
}

const PAGE: u64 = 16 * 1024;

/// Drops timestamp requests from a command buffer (their buffers were the
/// capturing process's).
fn without_timestamps(cmdbuf: &[u8]) -> Vec<u8> {
    let mut out = cmdbuf.to_vec();
    let mut at = 0;
    while at + 8 <= out.len() {
        let Ok(h) = CmdHeader::read_from_bytes(&out[at..at + 8]) else {
            break;
        };
        let start = at + 8;
        let end = (start + usize::from(h.size)).min(out.len());
        if h.cmd_type == CmdType::Render as u16 {
            let mut bytes = [0u8; size_of::<CmdRender>()];
            let n = (end - start).min(bytes.len());
            bytes[..n].copy_from_slice(&out[start..start + n]);
            if let Ok(mut r) = CmdRender::read_from_bytes(&bytes) {
                r.ts_vtx = Default::default();
                r.ts_frag = Default::default();
                out[start..start + n].copy_from_slice(&r.as_bytes()[..n]);
            }
        } else if h.cmd_type == CmdType::Compute as u16 {
            let mut bytes = [0u8; size_of::<CmdCompute>()];
            let n = (end - start).min(bytes.len());
            bytes[..n].copy_from_slice(&out[start..start + n]);
            if let Ok(mut c) = CmdCompute::read_from_bytes(&bytes) {
                c.ts = Default::default();
                out[start..start + n].copy_from_slice(&c.as_bytes()[..n]);
            }
        }
        at = end;
    }
    out
}

/// The PBE descriptors a render command's end-of-tile program stores
/// through, from the captured memory.
fn eot_targets(s: &Submission, render: &CmdRender) -> Vec<Pbe> {
    let mut at = s
        .usc_exec_base
        .wrapping_add(u64::from(render.eot.usc & !0x3f));
    let mut out = Vec::new();
    for _ in 0..64 {
        let Some(first) = s.read(at, UscWord::PEEK_BYTES) else {
            break;
        };
        let Some(word) = UscWord::len_bytes(first)
            .ok()
            .and_then(|len| s.read(at, len))
            .and_then(|bytes| UscWord::decode(bytes).ok())
        else {
            break;
        };
        match word.value {
            UscWord::Texture(w) => {
                for i in 0..u64::from(w.count) {
                    if let Some(d) = s.read(w.buffer.wrapping_add(24 * i), 24) {
                        out.push(Pbe::unpack(&d.try_into().unwrap_or_default()).value);
                    }
                }
            }
            UscWord::NoPreshader(_) | UscWord::Preshader(_) => break,
            _ => {}
        }
        at = at.wrapping_add(word.len_bytes as u64);
    }
    out
}

/// Replays submission `index` of `capture`.
pub fn replay_one(capture: &Capture, index: usize) -> Result<Replayed, ReplayError> {
    let s = capture
        .submissions
        .get(index)
        .ok_or(ReplayError::NoSuchSubmission(index))?;
    // The machine's settings come from the environment too (`AGX_GPU_THREADS`,
    // `AGX_SHADER_ENGINE`...), as for `agx-render`.
    let config = SystemConfig {
        ram_bytes: 4 << 30,
        ..SystemConfig::default()
    }
    .with_env()
    .map_err(|_| ReplayError::Device)?;
    let system = System::new(config).map_err(|_| ReplayError::Device)?;
    replay_on(&system, s, index)
}

/// Replays submission `s` (number `index` of its capture) on `system`, in
/// a DRM file of its own that is closed before this returns.
pub fn replay_on(system: &System, s: &Submission, index: usize) -> Result<Replayed, ReplayError> {
    let file = system.open();
    let params = agx_kmd::params::params_global();
    let kernel_end = params.vm_end / PAGE * PAGE;
    // The umd's kernel range (32 GiB), shrunk above any captured memory
    // (a capture made with a smaller range may have memory in it), but
    // never below the kernel's minimum.
    let widest = params
        .vm_kernel_min_size
        .max(agx_umd::device::KERNEL_RANGE_BYTES);
    let captured_top = s
        .memory
        .iter()
        .map(|r| r.va.saturating_add(r.bytes.len() as u64))
        .filter(|&end| end <= kernel_end)
        .max()
        .unwrap_or(0);
    let kernel_start = (kernel_end - widest)
        .max(captured_top.next_multiple_of(PAGE))
        .min(kernel_end - params.vm_kernel_min_size)
        / PAGE
        * PAGE;
    if let Some(r) = s
        .memory
        .iter()
        .find(|r| r.va < kernel_end && r.va.saturating_add(r.bytes.len() as u64) > kernel_start)
    {
        return Err(ReplayError::KernelRange { va: r.va });
    }
    let mut vm = VmCreate {
        kernel_start,
        kernel_end,
        ..VmCreate::default()
    };
    call(
        &file,
        asahi::DRM_IOCTL_ASAHI_VM_CREATE,
        &mut vm,
        "VM_CREATE",
    )?;
    // The objects the memory lives in, by address, for reading back.
    let mut objects = Vec::new();
    for range in &s.memory {
        let size = (range.bytes.len() as u64).max(1).next_multiple_of(PAGE);
        let mut create = GemCreate {
            size,
            ..GemCreate::default()
        };
        call(
            &file,
            asahi::DRM_IOCTL_ASAHI_GEM_CREATE,
            &mut create,
            "GEM_CREATE",
        )?;
        let object = file.object(create.handle).ok_or(ReplayError::Device)?;
        object
            .memory()
            .write(0, &range.bytes)
            .ok_or(ReplayError::Device)?;
        let mut flags = BindFlags::READ;
        if range.write {
            flags |= BindFlags::WRITE;
        }
        let op = GemBindOp {
            flags: flags.bits(),
            handle: create.handle,
            offset: 0,
            range: range.bytes.len() as u64,
            addr: range.va,
        };
        let mut bind = VmBind {
            vm_id: vm.vm_id,
            num_binds: 1,
            stride: size_of::<GemBindOp>() as u32,
            pad: 0,
            userptr: &op as *const GemBindOp as u64,
        };
        call(&file, asahi::DRM_IOCTL_ASAHI_VM_BIND, &mut bind, "VM_BIND")?;
        objects.push((range.va, range.bytes.len() as u64, object));
    }
    let mut queue = QueueCreate {
        vm_id: vm.vm_id,
        priority: 1,
        usc_exec_base: s.usc_exec_base,
        ..QueueCreate::default()
    };
    call(
        &file,
        asahi::DRM_IOCTL_ASAHI_QUEUE_CREATE,
        &mut queue,
        "QUEUE_CREATE",
    )?;
    let mut done = SyncobjCreate::default();
    call(
        &file,
        drm::DRM_IOCTL_SYNCOBJ_CREATE,
        &mut done,
        "SYNCOBJ_CREATE",
    )?;
    let syncs = [Sync {
        sync_type: 0,
        handle: done.handle,
        timeline_value: 0,
    }];
    let cmdbuf = without_timestamps(&s.cmdbuf);
    // Whatever failed before is not this submission's failure.
    let _ = system.device().scheduler().take_last_failure();
    let mut submit = Submit {
        syncs: syncs.as_ptr() as u64,
        cmdbuf: cmdbuf.as_ptr() as u64,
        queue_id: queue.queue_id,
        out_sync_count: 1,
        cmdbuf_size: cmdbuf.len() as u32,
        ..Submit::default()
    };
    call(&file, asahi::DRM_IOCTL_ASAHI_SUBMIT, &mut submit, "SUBMIT")?;
    let syncobj = file.syncobj(done.handle).ok_or(ReplayError::Device)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let error = loop {
        if let Some(status) = syncobj.fence_for(0).and_then(|f| f.status()) {
            break status;
        }
        if Instant::now() > deadline {
            return Err(ReplayError::Timeout(index));
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    // Read the render targets back.
    let read = |va: u64, buf: &mut [u8]| -> bool {
        objects.iter().any(|(base, len, object)| {
            va >= *base
                && va.saturating_add(buf.len() as u64) <= base.saturating_add(*len)
                && object.memory().read(va - base, buf).is_some()
        })
    };
    let mut targets = Vec::new();
    let mut at = 0;
    let mut command = 0;
    while at + 8 <= s.cmdbuf.len() {
        let Ok(h) = CmdHeader::read_from_bytes(&s.cmdbuf[at..at + 8]) else {
            break;
        };
        let start = at + 8;
        let end = (start + usize::from(h.size)).min(s.cmdbuf.len());
        if h.cmd_type == CmdType::Render as u16 {
            let mut bytes = [0u8; size_of::<CmdRender>()];
            let n = (end - start).min(bytes.len());
            bytes[..n].copy_from_slice(&s.cmdbuf[start..start + n]);
            if let Ok(render) = CmdRender::read_from_bytes(&bytes) {
                for (i, pbe) in eot_targets(s, &render).iter().enumerate() {
                    let rgba8 = pbe.channels == Channels::R8G8B8A8
                        && pbe.data_type == TextureType::Unorm
                        && pbe.layout == Layout::Linear;
                    if !rgba8 {
                        continue;
                    }
                    let (w, h) = (pbe.width, pbe.height);
                    let mut rgba = vec![0u8; (w * h * 4) as usize];
                    let ok = rgba
                        .chunks_mut((w * 4) as usize)
                        .enumerate()
                        .all(|(y, row)| {
                            read(
                                pbe.buffer.wrapping_add(y as u64 * u64::from(pbe.stride)),
                                row,
                            )
                        });
                    if ok {
                        let row_bytes = (w * 4) as usize;
                        let before = (0..h)
                            .flat_map(|y| {
                                let at = pbe
                                    .buffer
                                    .wrapping_add(u64::from(y) * u64::from(pbe.stride));
                                s.read(at, row_bytes)
                                    .map_or_else(|| vec![0; row_bytes], <[u8]>::to_vec)
                            })
                            .collect();
                        targets.push(Target {
                            command,
                            index: i,
                            width: w,
                            height: h,
                            rgba,
                            before,
                            address: pbe.buffer,
                            stride_bytes: pbe.stride,
                        });
                    }
                }
            }
        }
        at = end;
        command += 1;
    }
    let failure = system.device().scheduler().take_last_failure();
    let failure = error.and(failure);
    Ok(Replayed {
        submission: index,
        error,
        failure,
        targets,
    })
}
