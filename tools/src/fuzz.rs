//! Seeded, reproducible fuzzers of the device (`agx-fuzz`).
//!
//! - [`IoctlFuzzer`]: sequences of ioctls on several DRM files, built from
//!   the UAPI's structs with fields drawn from what the files hold (live
//!   and stale handles, VMs, queues, syncobjs), edge values, bad user
//!   pointers and huge counts; through any [`IoctlTarget`]: the kmd's
//!   entry point in this process, or a descriptor of the LD_PRELOAD shim.
//! - [`GpuFuzzer`]: a valid captured frame, mutated (control streams,
//!   USC words, shader code, descriptors: the bytes of the memory it
//!   maps; command fields; the shader base) and replayed.
//!
//! After each round both check the device's promises: no panic, the
//! firmware has not crashed (a firmware panic it caught is a crash), every
//! counter is back to its baseline once the files are closed, and a known
//! job still gives its known result.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use agx_capture::Capture;
use agx_kmd::Errno;
use agx_sim::System;
use agx_uapi::asahi::{
    self, CmdHeader, CmdType, GemBindObject, GemBindOp, GemCreate, GemMmapOffset, GetParams,
    GetTime, QueueCreate, QueueDestroy, Submit, Sync, VmBind, VmCreate, VmDestroy,
};
use agx_uapi::drm::{
    self, GemClose, GetCap, PrimeHandle, SyncobjArray, SyncobjCreate, SyncobjDestroy,
    SyncobjEventfd, SyncobjHandle, SyncobjTimelineArray, SyncobjTimelineWait, SyncobjTransfer,
    SyncobjWait, Version,
};
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// A small, fast, seedable generator (SplitMix64): the same seed gives the
/// same cases on every machine.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True `percent`% of the time.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items` (non-empty).
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// Where the ioctl fuzzer's calls go.
pub trait IoctlTarget {
    /// An open DRM file.
    type File;
    /// Opens a DRM file.
    fn open(&self) -> Result<Self::File, Errno>;
    /// `ioctl(file, request, arg)`.
    fn ioctl(&self, file: &Self::File, request: u32, arg: u64) -> Result<i32, Errno>;
}

/// The kmd's ioctl entry point, in this process.
pub struct KmdTarget<'a>(pub &'a System);

impl IoctlTarget for KmdTarget<'_> {
    type File = agx_kmd::File;

    fn open(&self) -> Result<agx_kmd::File, Errno> {
        Ok(self.0.open())
    }

    fn ioctl(&self, file: &agx_kmd::File, request: u32, arg: u64) -> Result<i32, Errno> {
        file.ioctl(u64::from(request), arg)
    }
}

/// What one DRM file holds, as far as the fuzzer knows.
#[derive(Debug, Default)]
struct Held {
    vms: Vec<u32>,
    gems: Vec<u32>,
    syncobjs: Vec<u32>,
    queues: Vec<u32>,
    /// Handles and ids given back or never valid (stale on purpose).
    stale: Vec<u32>,
}

/// Totals of a fuzzing run.
#[derive(Debug, Default, Clone)]
pub struct IoctlTotals {
    /// Ioctls made.
    pub ioctls: u64,
    /// Of those, how many succeeded.
    pub succeeded: u64,
    /// Answers by errno name.
    pub errnos: BTreeMap<&'static str, u64>,
    /// Files opened.
    pub files_opened: u64,
}

/// Bytes the fuzzer points user pointers at: valid, readable and writable
/// memory of its own.
const SCRATCH_BYTES: usize = 1 << 16;

/// Structure-aware ioctl sequences.
pub struct IoctlFuzzer<'t, T: IoctlTarget> {
    target: &'t T,
    rng: Rng,
    files: Vec<(T::File, Held)>,
    scratch: Vec<u64>,
    /// Running totals.
    pub totals: IoctlTotals,
}

impl<'t, T: IoctlTarget> IoctlFuzzer<'t, T> {
    /// A fuzzer of `target` with `seed`.
    pub fn new(target: &'t T, seed: u64) -> IoctlFuzzer<'t, T> {
        IoctlFuzzer {
            target,
            rng: Rng::new(seed),
            files: Vec::new(),
            scratch: vec![0; SCRATCH_BYTES / 8],
            totals: IoctlTotals::default(),
        }
    }

    /// Makes `count` ioctls (opening and closing files as it goes).
    pub fn run(&mut self, count: u64) -> Result<(), Errno> {
        for _ in 0..count {
            if self.files.is_empty() || (self.files.len() < 3 && self.rng.chance(1)) {
                self.files.push((self.target.open()?, Held::default()));
                self.totals.files_opened += 1;
            }
            if self.rng.chance(1) && self.files.len() > 1 {
                let at = self.rng.below(self.files.len() as u64) as usize;
                self.files.swap_remove(at);
                continue;
            }
            let at = self.rng.below(self.files.len() as u64) as usize;
            self.one(at);
        }
        Ok(())
    }

    /// Closes every file.
    pub fn close_all(&mut self) {
        self.files.clear();
    }

    fn scratch_ptr(&mut self) -> u64 {
        self.scratch.as_mut_ptr() as u64
    }

    /// A user pointer: mostly our scratch buffer, sometimes a bad one.
    /// (The device runs in this process, so a pointer into memory we own
    /// but past a buffer would let it overwrite our own heap, as a real
    /// kernel would a careless client's: the scratch buffer is larger than
    /// anything an ioctl writes.)
    fn pointer(&mut self) -> u64 {
        match self.rng.below(10) {
            0 => 0,
            1 => 16,
            2 => 0xffff_8000_0000_0000,
            3 => 0x8000_0000_0000,
            4 => self.scratch_ptr() + 1,
            _ => self.scratch_ptr(),
        }
    }

    /// A 32-bit field: edge values and random ones.
    fn value32(&mut self) -> u32 {
        self.rng.pick(&[
            0,
            1,
            2,
            3,
            0xff,
            0x1000,
            u32::MAX,
            u32::MAX - 1,
            0x8000_0000,
        ]) ^ if self.rng.chance(20) {
            self.rng.next_u64() as u32
        } else {
            0
        }
    }

    /// A count: small mostly, sometimes huge.
    fn count(&mut self) -> u32 {
        match self.rng.below(8) {
            0 => 0,
            1 => u32::MAX,
            2 => 0x10000,
            _ => 1 + self.rng.below(4) as u32,
        }
    }

    /// A size in bytes: pages mostly, sometimes unaligned, zero or huge.
    fn size(&mut self) -> u64 {
        match self.rng.below(8) {
            0 => 0,
            1 => u64::MAX,
            2 => 1 << 40,
            3 => 1 + self.rng.below(1 << 20),
            _ => (1 + self.rng.below(16)) << 14,
        }
    }

    /// An id of kind `pick` held by file `at`, a stale one, or noise.
    fn id(&mut self, at: usize, pick: fn(&Held) -> &Vec<u32>) -> u32 {
        let held = pick(&self.files[at].1);
        match self.rng.below(10) {
            0..=6 if !held.is_empty() => held[self.rng.below(held.len() as u64) as usize],
            7 if !self.files[at].1.stale.is_empty() => {
                let stale = &self.files[at].1.stale;
                stale[self.rng.below(stale.len() as u64) as usize]
            }
            _ => self.value32(),
        }
    }

    fn call<A: IntoBytes + FromBytes + Immutable>(
        &mut self,
        at: usize,
        request: u32,
        arg: &mut A,
    ) -> bool {
        self.totals.ioctls += 1;
        let result = self
            .target
            .ioctl(&self.files[at].0, request, arg as *mut A as u64);
        match result {
            Ok(_) => {
                self.totals.succeeded += 1;
                true
            }
            Err(errno) => {
                *self.totals.errnos.entry(errno.name()).or_default() += 1;
                false
            }
        }
    }

    /// Forgets `id` from `list`, remembering it as stale.
    fn forget(&mut self, at: usize, id: u32, pick: fn(&mut Held) -> &mut Vec<u32>) {
        let held = &mut self.files[at].1;
        let list = pick(held);
        if let Some(i) = list.iter().position(|&x| x == id) {
            list.swap_remove(i);
            held.stale.push(id);
        }
    }

    fn one(&mut self, at: usize) {
        let kind = self.rng.below(25);
        match kind {
            0 => {
                let mut a = GetParams {
                    param_group: if self.rng.chance(90) {
                        0
                    } else {
                        self.value32()
                    },
                    pad: if self.rng.chance(95) { 0 } else { 1 },
                    pointer: self.pointer(),
                    size: self.rng.pick(&[0, 8, 592, 4096, u64::MAX]),
                };
                self.call(at, asahi::DRM_IOCTL_ASAHI_GET_PARAMS, &mut a);
            }
            1 => {
                let mut a = GetTime {
                    flags: u64::from(self.rng.chance(5)),
                    gpu_timestamp: 0,
                };
                self.call(at, asahi::DRM_IOCTL_ASAHI_GET_TIME, &mut a);
            }
            2 => {
                let (start, end) = if self.rng.chance(85) {
                    (0x7f_0000_0000, 0x7f_ffff_c000)
                } else {
                    (self.rng.next_u64(), self.rng.next_u64())
                };
                let mut a = VmCreate {
                    kernel_start: start,
                    kernel_end: end,
                    ..VmCreate::default()
                };
                if self.call(at, asahi::DRM_IOCTL_ASAHI_VM_CREATE, &mut a) {
                    self.files[at].1.vms.push(a.vm_id);
                }
            }
            3 => {
                let vm_id = self.id(at, |h| &h.vms);
                let mut a = VmDestroy { vm_id, pad: 0 };
                if self.call(at, asahi::DRM_IOCTL_ASAHI_VM_DESTROY, &mut a) {
                    self.forget(at, vm_id, |h| &mut h.vms);
                }
            }
            4 | 5 => {
                let mut a = GemCreate {
                    size: self.size(),
                    flags: self.rng.pick(&[0, 0, 1, 2, 4, 0x100]),
                    vm_id: self.id(at, |h| &h.vms),
                    ..GemCreate::default()
                };
                if a.flags & 2 == 0 && self.rng.chance(80) {
                    a.vm_id = 0;
                }
                if self.call(at, asahi::DRM_IOCTL_ASAHI_GEM_CREATE, &mut a) {
                    self.files[at].1.gems.push(a.handle);
                }
            }
            6 => {
                let handle = self.id(at, |h| &h.gems);
                let mut a = GemClose { handle, pad: 0 };
                if self.call(at, drm::DRM_IOCTL_GEM_CLOSE, &mut a) {
                    self.forget(at, handle, |h| &mut h.gems);
                }
            }
            7 => {
                let mut a = GemMmapOffset {
                    handle: self.id(at, |h| &h.gems),
                    flags: u32::from(self.rng.chance(5)),
                    offset: 0,
                };
                self.call(at, asahi::DRM_IOCTL_ASAHI_GEM_MMAP_OFFSET, &mut a);
            }
            8 | 9 => {
                let ops: Vec<GemBindOp> = (0..1 + self.rng.below(3))
                    .map(|_| GemBindOp {
                        flags: self.rng.pick(&[1, 2, 3, 4, 5, 0x100]),
                        handle: self.id(at, |h| &h.gems),
                        offset: self.rng.pick(&[0, 0, 0x4000, 1, u64::MAX]),
                        range: self.size(),
                        addr: self.rng.pick(&[
                            0x1_0000_0000,
                            0x1_0000_4000,
                            0x7f_0000_0000,
                            0,
                            1,
                            u64::MAX - 0x3fff,
                        ]),
                    })
                    .collect();
                let mut a = VmBind {
                    vm_id: self.id(at, |h| &h.vms),
                    num_binds: if self.rng.chance(90) {
                        ops.len() as u32
                    } else {
                        self.count()
                    },
                    stride: self.rng.pick(&[32, 32, 32, 24, 40, 0, 4096]),
                    pad: 0,
                    userptr: if self.rng.chance(90) {
                        ops.as_ptr() as u64
                    } else {
                        self.pointer()
                    },
                };
                self.call(at, asahi::DRM_IOCTL_ASAHI_VM_BIND, &mut a);
            }
            10 => {
                let mut a = GemBindObject {
                    op: self.rng.pick(&[0, 1, 2]),
                    flags: self.rng.pick(&[1, 0, 2]),
                    handle: self.id(at, |h| &h.gems),
                    vm_id: self.id(at, |h| &h.vms),
                    offset: self.rng.pick(&[0, 0x4000, 7]),
                    range: self.size(),
                    object_handle: self.value32(),
                    pad: 0,
                };
                self.call(at, asahi::DRM_IOCTL_ASAHI_GEM_BIND_OBJECT, &mut a);
            }
            11 => {
                let mut a = QueueCreate {
                    flags: u32::from(self.rng.chance(5)),
                    vm_id: self.id(at, |h| &h.vms),
                    priority: self.rng.pick(&[0, 1, 2, 3, 4]),
                    queue_id: 0,
                    usc_exec_base: self.rng.pick(&[0x2_0000_0000, 0, 1]),
                };
                if self.call(at, asahi::DRM_IOCTL_ASAHI_QUEUE_CREATE, &mut a) {
                    self.files[at].1.queues.push(a.queue_id);
                }
            }
            12 => {
                let queue_id = self.id(at, |h| &h.queues);
                let mut a = QueueDestroy { queue_id, pad: 0 };
                if self.call(at, asahi::DRM_IOCTL_ASAHI_QUEUE_DESTROY, &mut a) {
                    self.forget(at, queue_id, |h| &mut h.queues);
                }
            }
            13 | 14 => self.submit(at),
            15 => {
                let mut a = SyncobjCreate {
                    handle: 0,
                    flags: self.rng.pick(&[0, 1, 1, 2]),
                };
                if self.call(at, drm::DRM_IOCTL_SYNCOBJ_CREATE, &mut a) {
                    self.files[at].1.syncobjs.push(a.handle);
                }
            }
            16 => {
                let handle = self.id(at, |h| &h.syncobjs);
                let mut a = SyncobjDestroy { handle, pad: 0 };
                if self.call(at, drm::DRM_IOCTL_SYNCOBJ_DESTROY, &mut a) {
                    self.forget(at, handle, |h| &mut h.syncobjs);
                }
            }
            17 => {
                // Waits never block for long: poll, or a 1 ms deadline.
                let handles: Vec<u32> = (0..1 + self.rng.below(3))
                    .map(|_| self.id(at, |h| &h.syncobjs))
                    .collect();
                let deadline = if self.rng.chance(50) {
                    0
                } else {
                    agx_kmd::sync::monotonic_now_ns() + 1_000_000
                };
                if self.rng.chance(50) {
                    let mut a = SyncobjWait {
                        handles: handles.as_ptr() as u64,
                        timeout_nsec: deadline,
                        count_handles: handles.len() as u32,
                        flags: self.rng.pick(&[0, 1, 2, 3, 4, 8, 0x100]),
                        ..SyncobjWait::default()
                    };
                    self.call(at, drm::DRM_IOCTL_SYNCOBJ_WAIT, &mut a);
                } else {
                    let points: Vec<u64> = handles.iter().map(|_| self.rng.below(4)).collect();
                    let mut a = SyncobjTimelineWait {
                        handles: handles.as_ptr() as u64,
                        points: if self.rng.chance(90) {
                            points.as_ptr() as u64
                        } else {
                            self.pointer()
                        },
                        timeout_nsec: deadline,
                        count_handles: handles.len() as u32,
                        flags: self.rng.pick(&[0, 1, 2, 4, 8]),
                        ..SyncobjTimelineWait::default()
                    };
                    self.call(at, drm::DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT, &mut a);
                }
            }
            18 => {
                let handles: Vec<u32> = (0..1 + self.rng.below(3))
                    .map(|_| self.id(at, |h| &h.syncobjs))
                    .collect();
                let request = self
                    .rng
                    .pick(&[drm::DRM_IOCTL_SYNCOBJ_RESET, drm::DRM_IOCTL_SYNCOBJ_SIGNAL]);
                let mut a = SyncobjArray {
                    handles: if self.rng.chance(90) {
                        handles.as_ptr() as u64
                    } else {
                        self.pointer()
                    },
                    count_handles: if self.rng.chance(90) {
                        handles.len() as u32
                    } else {
                        self.count()
                    },
                    pad: 0,
                };
                self.call(at, request, &mut a);
            }
            19 => {
                let handles: Vec<u32> = (0..1 + self.rng.below(3))
                    .map(|_| self.id(at, |h| &h.syncobjs))
                    .collect();
                let mut points: Vec<u64> = handles.iter().map(|_| self.rng.below(6)).collect();
                let request = self.rng.pick(&[
                    drm::DRM_IOCTL_SYNCOBJ_QUERY,
                    drm::DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL,
                ]);
                let mut a = SyncobjTimelineArray {
                    handles: handles.as_ptr() as u64,
                    points: points.as_mut_ptr() as u64,
                    count_handles: handles.len() as u32,
                    flags: self.rng.pick(&[0, 0, 1, 2]),
                };
                self.call(at, request, &mut a);
            }
            20 => {
                let mut a = SyncobjTransfer {
                    src_handle: self.id(at, |h| &h.syncobjs),
                    dst_handle: self.id(at, |h| &h.syncobjs),
                    src_point: self.rng.below(4),
                    dst_point: self.rng.below(4),
                    flags: self.rng.pick(&[0, 0, 4]),
                    pad: 0,
                };
                self.call(at, drm::DRM_IOCTL_SYNCOBJ_TRANSFER, &mut a);
            }
            21 => self.fds(at),
            22 => {
                let mut name = [0u8; 16];
                let mut a = Version {
                    name_len: self.rng.pick(&[0, 4, 16]),
                    name: if self.rng.chance(80) {
                        name.as_mut_ptr() as u64
                    } else {
                        self.pointer()
                    },
                    ..Version::default()
                };
                self.call(at, drm::DRM_IOCTL_VERSION, &mut a);
                let mut c = GetCap {
                    capability: self.rng.below(0x20),
                    value: 0,
                };
                self.call(at, drm::DRM_IOCTL_GET_CAP, &mut c);
            }
            23 => {
                // Any request number: other types, other directions and
                // sizes, numbers nothing defines.
                let request = (self.rng.next_u64() as u32)
                    & if self.rng.chance(50) {
                        0xffff_ffff
                    } else {
                        0xc0ff_ffff
                    };
                // As large as any request's size field can say (14 bits).
                let mut a = vec![0u64; (1 << 14) / 8];
                self.totals.ioctls += 1;
                let ptr = if self.rng.chance(80) {
                    a.as_mut_ptr() as u64
                } else {
                    self.pointer()
                };
                match self.target.ioctl(&self.files[at].0, request, ptr) {
                    Ok(_) => self.totals.succeeded += 1,
                    Err(e) => *self.totals.errnos.entry(e.name()).or_default() += 1,
                }
            }
            _ => {
                // SYNCOBJ_EVENTFD with a descriptor that is not an eventfd
                // (this fuzzer makes none): every check short of firing.
                let mut a = SyncobjEventfd {
                    handle: self.id(at, |h| &h.syncobjs),
                    flags: self.rng.pick(&[0, 4, 1]),
                    point: self.rng.below(3),
                    fd: self.rng.pick(&[-1, 0, 1, 2, 100_000]),
                    pad: u32::from(self.rng.chance(5)),
                };
                self.call(at, drm::DRM_IOCTL_SYNCOBJ_EVENTFD, &mut a);
            }
        }
    }

    /// PRIME and syncobj export/import; every descriptor the device hands
    /// out is closed again.
    fn fds(&mut self, at: usize) {
        let mut export = PrimeHandle {
            handle: self.id(at, |h| &h.gems),
            flags: self.rng.pick(&[0, 0x80000, 2, 0x80002, 1]),
            fd: -1,
        };
        let exported = self
            .call(at, drm::DRM_IOCTL_PRIME_HANDLE_TO_FD, &mut export)
            .then(|| take_fd(export.fd))
            .flatten();
        let to = self.rng.below(self.files.len() as u64) as usize;
        let mut import = PrimeHandle {
            handle: 0,
            flags: 0,
            fd: exported.as_ref().map_or(self.rng.pick(&[-1, 0, 2]), raw),
        };
        if self.call(to, drm::DRM_IOCTL_PRIME_FD_TO_HANDLE, &mut import)
            && !self.files[to].1.gems.contains(&import.handle)
        {
            self.files[to].1.gems.push(import.handle);
        }
        let mut export = SyncobjHandle {
            handle: self.id(at, |h| &h.syncobjs),
            flags: self.rng.pick(&[0, 0, 1, 2]),
            fd: -1,
            pad: 0,
        };
        let exported = self
            .call(at, drm::DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD, &mut export)
            .then(|| take_fd(export.fd))
            .flatten();
        let mut import = SyncobjHandle {
            handle: if export.flags == 1 {
                self.id(to, |h| &h.syncobjs)
            } else {
                0
            },
            flags: export.flags,
            fd: exported.as_ref().map_or(-1, raw),
            pad: 0,
        };
        if self.call(to, drm::DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE, &mut import) && import.flags == 0 {
            self.files[to].1.syncobjs.push(import.handle);
        }
    }

    /// A SUBMIT of random commands (mostly well-formed headers with
    /// random payloads), with random syncs.
    fn submit(&mut self, at: usize) {
        let mut cmdbuf = Vec::new();
        for _ in 0..self.rng.below(4) {
            let (cmd_type, size) = match self.rng.below(4) {
                0 => (CmdType::Render as u16, size_of::<asahi::CmdRender>() as u16),
                1 => (
                    CmdType::Compute as u16,
                    size_of::<asahi::CmdCompute>() as u16,
                ),
                2 => (self.rng.below(8) as u16, self.rng.below(600) as u16),
                _ => (
                    CmdType::Compute as u16,
                    size_of::<asahi::CmdCompute>() as u16,
                ),
            };
            let header = CmdHeader {
                cmd_type,
                size,
                vdm_barrier: self.rng.pick(&[0xffff, 0, 1, 2]),
                cdm_barrier: self.rng.pick(&[0xffff, 0, 1, 2]),
            };
            cmdbuf.extend_from_slice(header.as_bytes());
            for _ in 0..size / 8 {
                let word = match self.rng.below(6) {
                    0 => self.rng.next_u64(),
                    1 => 0x1_0000_0000 + self.rng.below(1 << 20),
                    2 => u64::from(self.value32()),
                    _ => 0,
                };
                cmdbuf.extend_from_slice(&word.to_le_bytes());
            }
            cmdbuf.resize(cmdbuf.len() + usize::from(size % 8), 0);
        }
        let syncs: Vec<Sync> = (0..self.rng.below(3))
            .map(|_| Sync {
                sync_type: self.rng.pick(&[0, 0, 1, 2]),
                handle: self.id(at, |h| &h.syncobjs),
                timeline_value: self.rng.below(4),
            })
            .collect();
        let in_syncs = self.rng.below(syncs.len() as u64 + 1) as u32;
        let mut a = Submit {
            syncs: syncs.as_ptr() as u64,
            cmdbuf: if self.rng.chance(95) {
                cmdbuf.as_ptr() as u64
            } else {
                self.pointer()
            },
            flags: u32::from(self.rng.chance(3)),
            queue_id: self.id(at, |h| &h.queues),
            in_sync_count: in_syncs,
            out_sync_count: syncs.len() as u32 - in_syncs,
            cmdbuf_size: if self.rng.chance(95) {
                cmdbuf.len() as u32
            } else {
                self.count()
            },
            pad: 0,
        };
        self.call(at, asahi::DRM_IOCTL_ASAHI_SUBMIT, &mut a);
    }
}

fn raw(fd: &OwnedFd) -> i32 {
    std::os::fd::AsRawFd::as_raw_fd(fd)
}

/// Takes ownership of a descriptor the device returned in an argument.
fn take_fd(fd: i32) -> Option<OwnedFd> {
    agx_umd::returned_fd(fd).ok()
}

/// Why a fuzzing round failed the device's promises.
#[derive(Debug, thiserror::Error)]
pub enum Broken {
    /// The firmware crashed (or caught a panic).
    #[error("the firmware crashed ({0} crashes)")]
    FirmwareCrashed(u32),
    /// Something the closed files held was not freed.
    #[error("with every file closed and the GPU idle, the device still holds {now:?} (baseline {baseline:?})")]
    Leak {
        /// The counters now.
        now: String,
        /// Before the round.
        baseline: String,
    },
    /// The known job gave another result.
    #[error("the known job's result changed: {0}")]
    KnownJob(String),
    /// Work did not finish.
    #[error("a submission did not finish: {0}")]
    Hang(String),
}

/// What the device holds: its object counters, and the scheduler's queues,
/// event slots and VM slots. Back at its baseline once every file is
/// closed and the GPU idle.
pub type Holdings = (agx_kmd::stats::Stats, u64, u64, u64);

/// What the device holds now (the baseline for [`check_device`]).
pub fn baseline(system: &System) -> Holdings {
    let sched = system.device().scheduler().stats();
    (
        system.stats(),
        sched.queues,
        sched.event_slots_in_use,
        sched.vm_slots_in_use,
    )
}

/// Waits (up to `patience`: GPU work may still be retiring) for the
/// device to hold no more than `baseline`; checks that the firmware is
/// alive.
pub fn check_device(
    system: &System,
    baseline: &Holdings,
    patience: Duration,
) -> Result<(), Broken> {
    let deadline = Instant::now() + patience;
    loop {
        let crashed = system.device().firmware().status().map_or(1, |s| s.crashed);
        if crashed != 0 {
            return Err(Broken::FirmwareCrashed(crashed));
        }
        let now = self::baseline(system);
        if now == *baseline {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Broken::Leak {
                now: format!("{now:?}"),
                baseline: format!("{baseline:?}"),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Totals of a GPU-work fuzzing run.
#[derive(Debug, Default, Clone)]
pub struct GpuTotals {
    /// Mutated jobs run.
    pub jobs: u64,
    /// Outcomes by errno name ("ok" for success).
    pub outcomes: BTreeMap<&'static str, u64>,
    /// Known-job checks passed.
    pub known_job_checks: u64,
}

/// Mutations of a valid captured frame.
pub struct GpuFuzzer<'a> {
    system: &'a System,
    rng: Rng,
    base: Capture,
    /// The known job's render targets.
    reference: Vec<crate::replay::Target>,
    /// Running totals.
    pub totals: GpuTotals,
}

impl<'a> GpuFuzzer<'a> {
    /// A fuzzer replaying mutations of `base` (a capture whose first
    /// submission renders) on `system`, with `seed`. Fails if the
    /// unmutated job does not complete.
    pub fn new(system: &'a System, base: Capture, seed: u64) -> Result<GpuFuzzer<'a>, Broken> {
        let replayed = crate::replay::replay_on(system, &base.submissions[0], 0)
            .map_err(|e| Broken::Hang(e.to_string()))?;
        if replayed.error.is_some() || replayed.targets.is_empty() {
            return Err(Broken::KnownJob(format!("{:?}", replayed.error)));
        }
        Ok(GpuFuzzer {
            system,
            rng: Rng::new(seed),
            base,
            reference: replayed.targets,
            totals: GpuTotals::default(),
        })
    }

    /// Runs `jobs` mutated jobs, checking the known job every `check_every`.
    pub fn run(&mut self, jobs: u64, check_every: u64) -> Result<(), Broken> {
        for _ in 0..jobs {
            let mut s = self.base.submissions[0].clone();
            for _ in 0..1 + self.rng.below(4) {
                self.mutate(&mut s);
            }
            let outcome = match crate::replay::replay_on(self.system, &s, 0) {
                Ok(r) => r.error.map_or("ok", Errno::name),
                Err(crate::replay::ReplayError::Timeout(_)) => {
                    return Err(Broken::Hang("a mutated job".into()))
                }
                Err(crate::replay::ReplayError::Kernel { errno, .. }) => errno.name(),
                Err(e) => return Err(Broken::Hang(e.to_string())),
            };
            if outcome == "ENODEV" {
                let crashed = self
                    .system
                    .device()
                    .firmware()
                    .status()
                    .map_or(1, |s| s.crashed);
                return Err(Broken::FirmwareCrashed(crashed));
            }
            *self.totals.outcomes.entry(outcome).or_default() += 1;
            self.totals.jobs += 1;
            if self.totals.jobs.is_multiple_of(check_every.max(1)) {
                self.known_job()?;
            }
        }
        Ok(())
    }

    /// Replays the unmutated job: the same pixels as at the start.
    pub fn known_job(&mut self) -> Result<(), Broken> {
        let replayed = crate::replay::replay_on(self.system, &self.base.submissions[0], 0)
            .map_err(|e| Broken::Hang(e.to_string()))?;
        if replayed.error.is_some() || replayed.targets != self.reference {
            return Err(Broken::KnownJob(format!(
                "error {:?}, {} targets",
                replayed.error,
                replayed.targets.len()
            )));
        }
        self.totals.known_job_checks += 1;
        Ok(())
    }

    fn mutate(&mut self, s: &mut agx_capture::Submission) {
        match self.rng.below(10) {
            // The command's fields.
            0 | 1 => mutate_bytes(&mut self.rng, &mut s.cmdbuf[8..]),
            // The shaders' base.
            2 if self.rng.chance(20) => {
                s.usc_exec_base ^= 1 << self.rng.below(40);
            }
            // A memory range, chosen per range (not per byte), so small
            // ones (control streams, descriptors, USC words) are hit as
            // often as vertex buffers.
            _ => {
                if s.memory.is_empty() {
                    return;
                }
                let at = self.rng.below(s.memory.len() as u64) as usize;
                mutate_bytes(&mut self.rng, &mut s.memory[at].bytes);
            }
        }
    }
}

/// Changes a few bytes of `bytes`: a bit, a byte, or an edge-value word.
fn mutate_bytes(rng: &mut Rng, bytes: &mut [u8]) {
    if bytes.is_empty() {
        return;
    }
    let at = rng.below(bytes.len() as u64) as usize;
    match rng.below(4) {
        0 => bytes[at] ^= 1 << rng.below(8),
        1 => bytes[at] = rng.next_u64() as u8,
        _ => {
            let word: u32 = rng.pick(&[0, 1, 0xffff_ffff, 0x8000_0000, 0x7f80_0000, 0xffff]);
            let end = (at + 4).min(bytes.len());
            bytes[at..end].copy_from_slice(&word.to_le_bytes()[..end - at]);
        }
    }
}

/// A small valid frame to mutate and to use as the known job: a torus
/// rendered through the umd on a device of its own and captured.
pub fn base_capture() -> Result<Capture, Box<dyn std::error::Error>> {
    let device = agx_umd::Device::open_simulated(agx_sim::SystemConfig {
        ram_bytes: 1 << 30,
        ..agx_sim::SystemConfig::default()
    })?;
    let renderer =
        crate::render::Renderer::new(&device, &crate::mesh::Mesh::torus(24, 12), 64, 48)?;
    let path = std::env::temp_dir().join(format!("agx-fuzz-base-{}.cap", std::process::id()));
    let system = device
        .simulated()
        .ok_or("the umd's device is not simulated")?
        .system();
    system.capture_to(&path)?;
    let frame = renderer.frame(0);
    system.stop_capture();
    let capture = agx_capture::read(std::fs::File::open(&path)?);
    let _ = std::fs::remove_file(&path);
    frame?;
    Ok(capture?)
}

/// The simulated system the fuzzers run on: a small work budget, so that
/// random work ends quickly.
pub fn fuzz_system() -> Result<System, agx_sim::ProbeError> {
    System::new(agx_sim::SystemConfig {
        ram_bytes: 2 << 30,
        work_budget_units: 1 << 20,
        command_timeout_ms: 20_000,
        client_memory_limit_bytes: 1 << 30,
        ..agx_sim::SystemConfig::default()
    })
}

/// One round of both fuzzers and the checks after it: `ioctls` fuzzed
/// ioctls (every file closed after them), `jobs` mutated GPU jobs, the
/// known job, and the device's counters back at `baseline`.
pub fn round<T: IoctlTarget>(
    ioctl: &mut IoctlFuzzer<'_, T>,
    gpu: &mut GpuFuzzer<'_>,
    system: &System,
    baseline: &Holdings,
    ioctls: u64,
    jobs: u64,
) -> Result<(), Broken> {
    ioctl
        .run(ioctls)
        .map_err(|e| Broken::Hang(format!("open failed: {e:?}")))?;
    ioctl.close_all();
    gpu.run(jobs, 10)?;
    gpu.known_job()?;
    check_device(system, baseline, Duration::from_secs(60))
}
