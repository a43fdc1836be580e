//! Queues, submission and synchronisation.
//!
//! A [`Queue`] is a kernel queue (`QUEUE_CREATE`) in the device's VM.
//! [`Queue::submit`] sends command buffers in one `SUBMIT`, waiting on and
//! signalling timeline [`Semaphore`]s (syncobjs), and returns a
//! [`Submission`] that owns the command buffers' memory until the GPU is
//! done with it and reports the fence's error (a GPU fault is `EIO`, the
//! firmware watchdog `ETIMEDOUT`) as [`Error::GpuFault`].

use std::time::Duration;

use agx_uapi::asahi::{
    self, CmdHeader, CmdType, Priority, QueueCreate, QueueDestroy, Submit, Sync, SyncType,
};
use agx_uapi::drm::{
    self, SyncobjCreate, SyncobjDestroy, SyncobjTimelineArray, SyncobjTimelineWait,
    SyncobjWaitFlags,
};
use zerocopy::IntoBytes;

use crate::cmd::{Command, CommandBuffer};
use crate::device::Device;
use crate::error::{kernel, Error};
use crate::kernel::{call, Errno, FenceStatus};

/// Render and compute commands one SUBMIT takes at most, unless the
/// kernel reports fewer (`max_commands_per_submission`).
pub const MAX_COMMANDS: usize = 64;

/// A timeline semaphore: a syncobj whose points are 64-bit values.
#[derive(Debug)]
pub struct Semaphore {
    device: Device,
    handle: u32,
}

fn now_ns() -> i64 {
    crate::sys::clock_monotonic_ns()
}

/// An absolute CLOCK_MONOTONIC deadline `timeout` from now.
fn deadline_ns(timeout: Duration) -> i64 {
    now_ns().saturating_add(i64::try_from(timeout.as_nanos()).unwrap_or(i64::MAX))
}

impl Semaphore {
    /// A new timeline at 0.
    pub fn new(device: &Device) -> Result<Semaphore, Error> {
        let mut create = SyncobjCreate::default();
        call(device.kernel(), drm::DRM_IOCTL_SYNCOBJ_CREATE, &mut create)
            .map_err(kernel("SYNCOBJ_CREATE"))?;
        Ok(Semaphore {
            device: device.clone(),
            handle: create.handle,
        })
    }

    /// The syncobj handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The highest point signalled (with every earlier one).
    pub fn value(&self) -> Result<u64, Error> {
        let mut point = 0u64;
        let mut query = SyncobjTimelineArray {
            handles: &self.handle as *const u32 as u64,
            points: &mut point as *mut u64 as u64,
            count_handles: 1,
            flags: 0,
        };
        call(
            self.device.kernel(),
            drm::DRM_IOCTL_SYNCOBJ_QUERY,
            &mut query,
        )
        .map_err(kernel("SYNCOBJ_QUERY"))?;
        Ok(point)
    }

    /// Signals `value` from the CPU.
    pub fn signal(&self, value: u64) -> Result<(), Error> {
        let mut signal = SyncobjTimelineArray {
            handles: &self.handle as *const u32 as u64,
            points: &value as *const u64 as u64,
            count_handles: 1,
            flags: 0,
        };
        call(
            self.device.kernel(),
            drm::DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL,
            &mut signal,
        )
        .map_err(kernel("SYNCOBJ_TIMELINE_SIGNAL"))
    }

    /// Waits until point `value` is signalled (waiting for it to be
    /// submitted if it has not been yet).
    pub fn wait(&self, value: u64, timeout: Duration) -> Result<(), Error> {
        let mut wait = SyncobjTimelineWait {
            handles: &self.handle as *const u32 as u64,
            points: &value as *const u64 as u64,
            timeout_nsec: deadline_ns(timeout),
            count_handles: 1,
            flags: (SyncobjWaitFlags::WAIT_ALL | SyncobjWaitFlags::WAIT_FOR_SUBMIT).bits(),
            ..SyncobjTimelineWait::default()
        };
        match call(
            self.device.kernel(),
            drm::DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT,
            &mut wait,
        ) {
            Ok(()) => Ok(()),
            Err(Errno::ETIME) => Err(Error::WaitTimeout {
                timeout_ms: timeout.as_millis() as u64,
            }),
            Err(errno) => Err(Error::Kernel {
                ioctl: "SYNCOBJ_TIMELINE_WAIT",
                errno,
            }),
        }
    }
}

impl Drop for Semaphore {
    fn drop(&mut self) {
        let mut destroy = SyncobjDestroy {
            handle: self.handle,
            pad: 0,
        };
        let _ = call(
            self.device.kernel(),
            drm::DRM_IOCTL_SYNCOBJ_DESTROY,
            &mut destroy,
        );
    }
}

/// Queue serials handed out so far.
static QUEUE_SERIALS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// A kernel queue, with a timeline every submission advances: the retire
/// points of descriptor-heap frees.
#[derive(Debug)]
pub struct Queue {
    device: Device,
    id: u32,
    /// Unique in the process, unlike kernel queue IDs (which a kernel may
    /// reuse once a queue is destroyed): what retire points name.
    serial: u32,
    timeline: Semaphore,
    /// The latest point submitted; held across SUBMIT so that points reach
    /// the kernel in order.
    submitted: std::sync::Mutex<u64>,
}

impl Queue {
    /// A queue of medium priority in the device's VM.
    pub fn new(device: &Device) -> Result<Queue, Error> {
        let timeline = Semaphore::new(device)?;
        let mut create = QueueCreate {
            vm_id: device.vm_id(),
            priority: Priority::Medium as u32,
            usc_exec_base: device.usc_base(),
            ..QueueCreate::default()
        };
        call(
            device.kernel(),
            asahi::DRM_IOCTL_ASAHI_QUEUE_CREATE,
            &mut create,
        )
        .map_err(kernel("QUEUE_CREATE"))?;
        Ok(Queue {
            timeline,
            device: device.clone(),
            id: create.queue_id,
            serial: QUEUE_SERIALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            submitted: std::sync::Mutex::new(0),
        })
    }

    /// The timeline point of the latest submission: what a resource used
    /// by it must wait for before it is recycled.
    pub fn submitted_point(&self) -> u64 {
        *self.submitted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The retire point of resources the latest submission may use: a
    /// descriptor freed with it is reused once [`Queue::completed_point`]
    /// reaches it.
    pub fn retire_point(&self) -> crate::heap::RetirePoint {
        crate::heap::RetirePoint {
            queue: self.serial,
            point: self.submitted_point(),
        }
    }

    /// The timeline point the GPU has completed.
    pub fn completed_point(&self) -> Result<u64, Error> {
        self.timeline.value()
    }

    /// The kernel's queue ID.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The queue's serial, unique for the life of the process: what
    /// [`crate::heap::RetirePoint::queue`] holds and heaps reclaim by.
    pub fn serial(&self) -> u32 {
        self.serial
    }

    /// Submits `buffers` in order (each command waits for everything
    /// before it), after `waits` are signalled; signals `signals` when
    /// done.
    pub fn submit(
        &self,
        mut buffers: Vec<CommandBuffer>,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
    ) -> Result<Submission, Error> {
        // Dispatches still in an open compute stream are part of it.
        for buffer in &mut buffers {
            buffer.finish()?;
        }
        let count: usize = buffers.iter().map(|b| b.commands().len()).sum();
        let kernel_max = self.device.params().max_commands_per_submission as usize;
        let max_commands = if kernel_max == 0 {
            MAX_COMMANDS
        } else {
            kernel_max.min(MAX_COMMANDS)
        };
        if count > max_commands {
            return Err(Error::Unsupported(format!(
                "{count} commands in one submission (at most {max_commands})"
            )));
        }
        let mut cmdbuf: Vec<u8> = Vec::new();
        let (mut renders, mut computes) = (0u16, 0u16);
        for buffer in &buffers {
            for command in buffer.commands() {
                // Full ordering: wait for the previous render and compute
                // command of this submission, or for all earlier work on
                // the queue for the first of each.
                let header = |cmd_type: CmdType, size: usize| CmdHeader {
                    cmd_type: cmd_type as u16,
                    size: size as u16,
                    vdm_barrier: renders,
                    cdm_barrier: computes,
                };
                match command {
                    Command::Render(render) => {
                        let bytes = render.as_bytes();
                        cmdbuf.extend(header(CmdType::Render, bytes.len()).as_bytes());
                        cmdbuf.extend(bytes);
                        renders += 1;
                    }
                    Command::Compute(compute) => {
                        let bytes = compute.as_bytes();
                        cmdbuf.extend(header(CmdType::Compute, bytes.len()).as_bytes());
                        cmdbuf.extend(bytes);
                        computes += 1;
                    }
                }
            }
        }
        let done = Semaphore::new(&self.device)?;
        let mut syncs: Vec<Sync> = waits
            .iter()
            .map(|(s, v)| Sync {
                sync_type: SyncType::TimelineSyncobj as u32,
                handle: s.handle,
                timeline_value: *v,
            })
            .collect();
        syncs.extend(signals.iter().map(|(s, v)| Sync {
            sync_type: SyncType::TimelineSyncobj as u32,
            handle: s.handle,
            timeline_value: *v,
        }));
        // The queue's timeline.
        let mut submitted = self.submitted.lock().unwrap_or_else(|e| e.into_inner());
        let point = *submitted + 1;
        syncs.push(Sync {
            sync_type: SyncType::TimelineSyncobj as u32,
            handle: self.timeline.handle,
            timeline_value: point,
        });
        // The submission's own completion: a binary syncobj whose fence
        // is exactly this submission's.
        syncs.push(Sync {
            sync_type: SyncType::Syncobj as u32,
            handle: done.handle,
            timeline_value: 0,
        });
        if cmdbuf.is_empty() {
            return Err(Error::Unsupported("a submission with no commands".into()));
        }
        let mut submit = Submit {
            syncs: syncs.as_ptr() as u64,
            cmdbuf: cmdbuf.as_ptr() as u64,
            flags: 0,
            queue_id: self.id,
            in_sync_count: waits.len() as u32,
            out_sync_count: (signals.len() + 2) as u32,
            cmdbuf_size: cmdbuf.len() as u32,
            pad: 0,
        };
        // The capture sees the memory as the GPU will start from it (and
        // records a submission the kernel then refuses, too).
        self.device
            .capture_submission(|memory| agx_capture::Submission {
                usc_exec_base: self.device.usc_base(),
                vm_id: self.device.vm_id(),
                queue_id: self.id,
                submit,
                syncs: syncs.clone(),
                cmdbuf: cmdbuf.clone(),
                memory,
            });
        call(
            self.device.kernel(),
            asahi::DRM_IOCTL_ASAHI_SUBMIT,
            &mut submit,
        )
        .map_err(kernel("SUBMIT"))?;
        *submitted = point;
        drop(submitted);
        Ok(Submission {
            done,
            buffers,
            finished: false,
        })
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        let mut destroy = QueueDestroy {
            queue_id: self.id,
            pad: 0,
        };
        let _ = call(
            self.device.kernel(),
            asahi::DRM_IOCTL_ASAHI_QUEUE_DESTROY,
            &mut destroy,
        );
    }
}

/// Submitted work. Owns the command buffers until the GPU is done with
/// them (dropping an unfinished submission waits for it).
#[derive(Debug)]
pub struct Submission {
    done: Semaphore,
    buffers: Vec<CommandBuffer>,
    finished: bool,
}

impl Submission {
    /// Waits for the work; a fence error becomes [`Error::GpuFault`].
    pub fn wait(&mut self, timeout: Duration) -> Result<(), Error> {
        self.done.wait(0, timeout)?;
        self.finished = true;
        match self.done.device.kernel().fence_status(self.done.handle) {
            Ok(FenceStatus::Failed(errno)) => Err(Error::GpuFault { errno }),
            Ok(_) => Ok(()),
            Err(errno) => Err(Error::Kernel {
                ioctl: "SYNC_IOC_FILE_INFO",
                errno,
            }),
        }
    }

    /// The command buffers (their memory holds the results of queries
    /// and the streams, for debugging).
    pub fn buffers(&self) -> &[CommandBuffer] {
        &self.buffers
    }
}

impl Drop for Submission {
    fn drop(&mut self) {
        if !self.finished && self.done.wait(0, Duration::from_secs(60)).is_err() {
            // The GPU may still be using the command buffers' memory:
            // freeing it would hand its addresses to new buffers under the
            // running work. Leak it instead.
            tracing::error!("a submission did not finish in 60 s; its memory is leaked");
            std::mem::forget(std::mem::take(&mut self.buffers));
        }
    }
}
