//! The GPU scheduler: from SUBMIT to signalled fences.
//!
//! Each user queue is three firmware work queues, one per stage (vertex,
//! fragment, compute): rings of addresses of command objects the firmware
//! runs in order. A submission becomes commands on those rings: a render
//! pass is a RunVertex on the vertex queue and a Barrier (on that vertex
//! command's stamp) plus RunFragment on the fragment queue; a dispatch is
//! a RunCompute; SUBMIT's vdm/cdm barriers become Barrier commands on
//! the waiting stage; a parameter buffer that grew gets an InitBuffer.
//! Every command advances its stage's *event slot* stamp by 0x100 when it
//! completes, so a submission is done when each stage it used reached its
//! last command's stamp.
//!
//! One scheduler thread per device does what drm_sched and the kernel's
//! event handler do: it holds submissions until their in-fences have
//! signalled (the ioctl never blocks), hands them to the firmware when
//! the event slots, VM context slot and ring space they need are free,
//! reads the firmware's event ring (faults, timeouts, crashes) and its
//! log, and retires finished submissions by signalling their fences:
//! `EIO` for a fault, `ETIMEDOUT` for a timeout, `ECANCELED` for work
//! dropped before it ran, `ENODEV` after a firmware crash. A fault fails
//! only the submission whose command faulted; the queue, and every other
//! queue, keep running.
//!
//! Event slots and VM slots are scarce (128 and 63) and held only while a
//! stage or VM has work on the GPU, so any number of queues can exist.

use std::any::Any;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use agx_fwif::messages::{
    stamp_reached, BarrierBody, CommandHeader, CommandTag, DeviceControlKind, DeviceControlMsg,
    EventKind, EventMsg, InitBufferBody, LogMsg, RenderPass, RunWorkQueueMsg, StatsMsg, TvbInfo,
    WorkQueueInfo, EVENT_SLOTS, MAX_COMMAND_BYTES, PRIORITIES, STAMP_STEP, TVB_PAGE_BYTES,
    VM_SLOTS, WORK_QUEUE_ENTRIES,
};
use agx_fwif::ring::{RingDesc, RingState, SharedMemory};
use agx_hw::addr::{FwVa, GpuVa};
use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::firmware::{FirmwareLink, FirmwareView};
use crate::fwcmd::{self, QueueAddrs};
use crate::mem::{AllocError, Ram};
use crate::submit::{Barrier, Command};
use crate::sync::{Fence, PointFence, SyncEvents};
use crate::tvb::{self, GrowthPolicy, RenderReport, Tvb, TvbStats};
use crate::vm::{lock_vm, Vm};
use agx_uapi::Errno;

/// Commands a stage may have on the GPU at once (its command slab).
pub const STAGE_COMMAND_SLOTS: u32 = 256;
/// Bytes of one command slot.
const COMMAND_SLOT_BYTES: u64 = 1024;
const _: () = assert!(MAX_COMMAND_BYTES as u64 <= COMMAND_SLOT_BYTES);
const _: () = assert!(WORK_QUEUE_ENTRIES.is_multiple_of(STAGE_COMMAND_SLOTS));
/// Offset of `cpu_write_index` in [`WorkQueueInfo`] (the kmd writes only it).
const WQ_CPU_WRITE_INDEX: u64 = 16;
const _: () = assert!(std::mem::offset_of!(WorkQueueInfo, cpu_write_index) == 16);
/// Offsets of the kmd-written fields of [`TvbInfo`].
const TVB_BLOCK_LIST: u64 = std::mem::offset_of!(TvbInfo, block_list) as u64;
const TVB_BLOCK_COUNT: u64 = std::mem::offset_of!(TvbInfo, block_count) as u64;
const TVB_VM_SLOT: u64 = std::mem::offset_of!(TvbInfo, vm_slot) as u64;
/// How long the scheduler sleeps when nothing happens.
const IDLE_POLL: Duration = Duration::from_millis(50);

/// A stage of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Stage {
    Vertex = 0,
    Fragment = 1,
    Compute = 2,
}

const STAGES: [Stage; 3] = [Stage::Vertex, Stage::Fragment, Stage::Compute];

/// Firmware-side state of one stage of a queue.
#[derive(Debug, Clone)]
struct StageState {
    /// Its [`WorkQueueInfo`].
    info: FwVa,
    /// Its ring of command addresses.
    ring: FwVa,
    /// [`STAGE_COMMAND_SLOTS`] command objects.
    slab: FwVa,
    /// The next ring entry the kmd writes.
    write_index: u32,
    /// Commands handed to the firmware and not yet retired.
    in_flight: u32,
    /// The event slot its commands stamp, while it has work.
    slot: Option<u32>,
    /// The stamp of its last command (valid while `slot` is held).
    last_value: u32,
    /// Not yet run by the firmware.
    is_new: bool,
}

/// A queue's parameter buffer: blocks mapped in its VM's kernel range,
/// and the block list and control block the firmware reads.
#[derive(Debug)]
struct TvbHeap {
    policy: Tvb,
    /// [`TvbInfo`] address.
    info: FwVa,
    /// Block list address.
    block_list: FwVa,
    /// Page list address.
    page_list: FwVa,
    /// The mapped chunks of blocks: (VM address, blocks), in block-list
    /// order.
    chunks: Vec<(u64, u64)>,
    /// Blocks mapped.
    mapped_blocks: u64,
    /// Firmware render reports consumed.
    renders_seen: u32,
    overflows_seen: u32,
    partials_seen: u32,
    partial_tiles_seen: u64,
    /// Reports recorded in the statistics that the growth policy has not
    /// sized a render for yet, merged.
    unsized_report: Option<RenderReport>,
}

impl TvbHeap {
    /// Takes in what the firmware reported about renders finished since
    /// the last look: the statistics at once, the sizing at the next
    /// render.
    fn absorb_report(&mut self, view: &FirmwareView) {
        let info: TvbInfo = read(view, self.info).unwrap_or_default();
        if info.renders == self.renders_seen {
            return;
        }
        let report = RenderReport {
            peak_pages: u64::from(info.last_peak_pages),
            wanted_pages: u64::from(info.last_wanted_pages),
            overflows: u64::from(info.overflows.wrapping_sub(self.overflows_seen)),
            partial_renders: u64::from(info.partial_renders.wrapping_sub(self.partials_seen)),
            partial_render_tiles: info
                .partial_render_tiles
                .wrapping_sub(self.partial_tiles_seen),
        };
        self.policy.record(&report);
        self.renders_seen = info.renders;
        self.overflows_seen = info.overflows;
        self.partials_seen = info.partial_renders;
        self.partial_tiles_seen = info.partial_render_tiles;
        let merged = match self.unsized_report.take() {
            None => report,
            Some(earlier) => RenderReport {
                peak_pages: earlier.peak_pages.max(report.peak_pages),
                wanted_pages: earlier.wanted_pages.max(report.wanted_pages),
                overflows: earlier.overflows + report.overflows,
                partial_renders: earlier.partial_renders + report.partial_renders,
                partial_render_tiles: earlier.partial_render_tiles + report.partial_render_tiles,
            },
        };
        self.unsized_report = Some(merged);
    }
}

/// Everything the scheduler keeps about a queue.
#[derive(Debug)]
struct QueueHw {
    vm: Arc<Mutex<Vm>>,
    /// Firmware priority: 0 highest.
    priority: usize,
    usc_exec_base: u64,
    stages: [StageState; 3],
    tvb: TvbHeap,
    /// Submissions not yet on the GPU, in order.
    pending: VecDeque<Job>,
    /// Destroyed by userspace: freed once its work has retired and the
    /// firmware has forgotten its work queues.
    destroyed: bool,
    /// The `controls_done` value after which the firmware has forgotten
    /// this (destroyed) queue's work queues.
    cancelled_at: Option<u32>,
    /// Firmware allocations to free with it.
    firmware_allocations: Vec<u64>,
    /// An InitBuffer must precede the next render.
    tvb_dirty: bool,
    /// Where its GPU time is counted (its file's).
    usage: Arc<crate::stats::EngineUsage>,
}

/// Something in-flight work keeps alive.
pub type KeepAlive = Arc<dyn Any + Send + Sync>;

/// Firmware addresses of a command's timestamps (0: none): vertex or
/// compute start/end, then fragment start/end.
pub type CommandTimestamps = [u64; 4];

/// A submission waiting to run.
#[derive(Debug)]
pub struct Job {
    /// Fences to wait for.
    pub waits: Vec<PointFence>,
    /// Its commands.
    pub commands: Vec<Command>,
    /// Timestamps per command.
    pub timestamps: Vec<CommandTimestamps>,
    /// Signalled when it completes.
    pub fence: Arc<Fence>,
    /// What must live until it completes (the VM's objects, timestamp
    /// buffers).
    pub keep_alive: Vec<KeepAlive>,
}

/// A part of a running job: its commands on one stage.
#[derive(Debug, Clone, Copy)]
struct Segment {
    stage: Stage,
    slot: u32,
    first: u32,
    last: u32,
    commands: u32,
}

#[derive(Debug)]
struct RunningJob {
    queue: u64,
    /// Its number among the device's dispatched submissions (from 1),
    /// to name it in the log.
    number: u64,
    segments: Vec<Segment>,
    fence: Arc<Fence>,
    error: Option<Errno>,
    /// Its commands the firmware's watchdog did not run (after one of
    /// them timed out).
    cancelled_commands: u32,
    vm_key: usize,
    _keep_alive: Vec<KeepAlive>,
}

/// Counters, for tests and tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedStats {
    /// Submissions accepted.
    pub submitted: u64,
    /// Submissions handed to the firmware.
    pub dispatched: u64,
    /// Submissions retired without error.
    pub completed: u64,
    /// Submissions failed by a GPU fault.
    pub faulted: u64,
    /// Submissions failed by a timeout.
    pub timed_out: u64,
    /// Submissions dropped before they ran.
    pub cancelled: u64,
    /// Commands written to work queues.
    pub commands: u64,
    /// Event slots held now.
    pub event_slots_in_use: u64,
    /// VM slots held now.
    pub vm_slots_in_use: u64,
    /// Queues alive (including destroyed ones with work in flight).
    pub queues: u64,
    /// The last GPU fault: (GPU address, unit, reason).
    pub last_fault: Option<(u64, u32, u32)>,
    /// Run commands the GPU executed, per stage (vertex, fragment,
    /// compute), from the firmware's statistics ring.
    pub gpu_runs: [u64; 3],
    /// GPU time they took, per stage, in ns.
    pub gpu_busy_ns: [u64; 3],
}

#[derive(Debug)]
struct State {
    queues: BTreeMap<u64, QueueHw>,
    running: Vec<RunningJob>,
    free_event_slots: Vec<u32>,
    /// Last stamp value handed out per event slot (values only grow).
    slot_values: [u32; EVENT_SLOTS],
    free_vm_slots: Vec<u32>,
    /// VM (by its Arc's address) -> (slot, running jobs).
    vm_slots: HashMap<usize, (u32, usize)>,
    next_queue: u64,
    stats: SchedStats,
    /// The kernel-log line of the last GPU fault or timeout, with the
    /// culprit's queue and submission.
    last_failure: Option<String>,
    /// Device-control requests sent (wrapping), to match the firmware's
    /// `controls_done`.
    controls_sent: u32,
}

/// Why a queue could not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedError {
    /// Memory for the work queues or the parameter buffer ran out.
    #[error(transparent)]
    OutOfMemory(#[from] AllocError),
    /// The firmware crashed: the device is gone.
    #[error("the GPU firmware crashed")]
    Crashed,
}

/// The device's scheduler.
#[derive(Debug)]
pub struct Scheduler {
    link: Arc<FirmwareLink>,
    ram: Ram,
    events: Arc<SyncEvents>,
    policy: GrowthPolicy,
    /// Blocks a new queue's parameter buffer starts with.
    initial_blocks: u64,
    state: Mutex<State>,
    crashed: AtomicBool,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn write<T: IntoBytes + Immutable>(memory: &dyn SharedMemory, address: FwVa, value: &T) {
    // The kmd's own allocations are always mapped; a failure here is a
    // bug the firmware will report as a crash.
    if let Err(e) = memory.write(address, value.as_bytes()) {
        tracing::error!(%e, "kmd write to firmware memory failed");
    }
}

fn read<T: FromBytes>(memory: &dyn SharedMemory, address: FwVa) -> Option<T> {
    let mut buf = vec![0u8; size_of::<T>()];
    memory.read(address, &mut buf).ok()?;
    T::read_from_bytes(&buf).ok()
}

fn ring_room(memory: &dyn SharedMemory, ring: &RingDesc) -> u32 {
    let Some(state) = read::<RingState>(memory, ring.state) else {
        return 0;
    };
    let used = (state.write_index + ring.entry_count - state.read_index) % ring.entry_count;
    ring.entry_count - 1 - used
}

impl Scheduler {
    /// Starts the scheduler of a device.
    pub fn start(
        link: Arc<FirmwareLink>,
        ram: Ram,
        events: Arc<SyncEvents>,
        policy: GrowthPolicy,
        initial_blocks: u64,
    ) -> Arc<Scheduler> {
        let scheduler = Arc::new(Scheduler {
            link,
            ram,
            events,
            policy,
            initial_blocks: initial_blocks.clamp(1, tvb::MAX_BLOCKS),
            state: Mutex::new(State {
                queues: BTreeMap::new(),
                running: Vec::new(),
                free_event_slots: (0..EVENT_SLOTS as u32).rev().collect(),
                slot_values: [0; EVENT_SLOTS],
                free_vm_slots: (1..VM_SLOTS as u32).rev().collect(),
                vm_slots: HashMap::new(),
                next_queue: 1,
                stats: SchedStats::default(),
                last_failure: None,
                controls_sent: 0,
            }),
            crashed: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            thread: Mutex::new(None),
        });
        let worker = Arc::clone(&scheduler);
        let thread = std::thread::Builder::new()
            .name("agx-sched".into())
            .spawn(move || worker.run())
            .ok();
        *scheduler.thread.lock().unwrap_or_else(|e| e.into_inner()) = thread;
        scheduler
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the firmware has crashed (every later ioctl is `ENODEV`).
    pub fn crashed(&self) -> bool {
        self.crashed.load(Ordering::Acquire)
    }

    /// Takes the line about the last GPU fault or timeout (naming the
    /// address, unit and reason, or the budget, and the culprit's queue
    /// and submission), if one happened since the last call: what a tool
    /// prints when its work failed.
    pub fn take_last_failure(&self) -> Option<String> {
        self.state().last_failure.take()
    }

    /// The counters.
    pub fn stats(&self) -> SchedStats {
        let state = self.state();
        SchedStats {
            event_slots_in_use: (EVENT_SLOTS - state.free_event_slots.len()) as u64,
            vm_slots_in_use: state.vm_slots.len() as u64,
            queues: state.queues.len() as u64,
            ..state.stats
        }
    }

    /// Stops the thread (the device is going away).
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        self.events.notify();
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
        // The firmware stops before anything in-flight work holds is let go.
        self.link.stop();
        // Whatever never ran or never finished is cancelled.
        let mut state = self.state();
        let running: Vec<RunningJob> = state.running.drain(..).collect();
        for job in running {
            job.fence.signal(Some(Errno::ECANCELED));
        }
        for queue in state.queues.values_mut() {
            for job in queue.pending.drain(..) {
                job.fence.signal(Some(Errno::ECANCELED));
            }
        }
    }

    // ---- queues ----------------------------------------------------------

    /// Creates the firmware half of a queue: its three work queues and its
    /// parameter buffer. Returns the queue's scheduler id.
    pub fn create_queue(
        &self,
        vm: Arc<Mutex<Vm>>,
        uapi_priority: u32,
        usc_exec_base: u64,
        usage: Arc<crate::stats::EngineUsage>,
    ) -> Result<u64, SchedError> {
        if self.crashed() {
            return Err(SchedError::Crashed);
        }
        let id = {
            let mut state = self.state();
            state.next_queue += 1;
            state.next_queue - 1
        };
        let fw = &self.link.vm;
        let mut allocations = Vec::new();
        let result = (|| -> Result<QueueHw, AllocError> {
            let mut alloc = |bytes: u64, name: &str| -> Result<FwVa, AllocError> {
                let va = fw.alloc(bytes, name)?;
                allocations.push(va);
                Ok(FwVa(va))
            };
            let mut stages = Vec::new();
            for _ in STAGES {
                let info = alloc(size_of::<WorkQueueInfo>() as u64, "agx-wq-info")?;
                let ring = alloc(u64::from(WORK_QUEUE_ENTRIES) * 8, "agx-wq-ring")?;
                let slab = alloc(
                    u64::from(STAGE_COMMAND_SLOTS) * COMMAND_SLOT_BYTES,
                    "agx-wq-commands",
                )?;
                stages.push(StageState {
                    info,
                    ring,
                    slab,
                    write_index: 0,
                    in_flight: 0,
                    slot: None,
                    last_value: 0,
                    is_new: true,
                });
            }
            let info = alloc(size_of::<TvbInfo>() as u64, "agx-tvb-info")?;
            let block_list = alloc(tvb::MAX_BLOCKS * 4, "agx-tvb-blocks")?;
            let page_list = alloc(tvb::MAX_BLOCKS * tvb::BLOCK_PAGES * 4, "agx-tvb-pages")?;
            let mut queue = QueueHw {
                vm,
                priority: (PRIORITIES as u32 - 1).saturating_sub(uapi_priority) as usize,
                usc_exec_base,
                stages: [stages[0].clone(), stages[1].clone(), stages[2].clone()],
                tvb: TvbHeap {
                    policy: Tvb::new(self.policy, self.initial_blocks),
                    info,
                    block_list,
                    page_list,
                    chunks: Vec::new(),
                    mapped_blocks: 0,
                    renders_seen: 0,
                    overflows_seen: 0,
                    partials_seen: 0,
                    partial_tiles_seen: 0,
                    unsized_report: None,
                },
                pending: VecDeque::new(),
                destroyed: false,
                cancelled_at: None,
                firmware_allocations: Vec::new(),
                tvb_dirty: true,
                usage,
            };
            for stage in &queue.stages {
                let mut wq = WorkQueueInfo {
                    ring: stage.ring,
                    entries: WORK_QUEUE_ENTRIES,
                    ..WorkQueueInfo::default()
                };
                if stage.info == queue.stages[0].info {
                    wq.buffer = info;
                }
                write(&self.link.view, stage.info, &wq);
            }
            write(
                &self.link.view,
                info,
                &TvbInfo {
                    page_list,
                    buffer_id: id as u32,
                    ..TvbInfo::default()
                },
            );
            self.grow_tvb(&mut queue, self.initial_blocks)?;
            Ok(queue)
        })();
        match result {
            Ok(mut queue) => {
                queue.firmware_allocations = allocations;
                let mut state = self.state();
                if self.crashed() {
                    queue.destroyed = true;
                    state.queues.insert(id, queue);
                    self.reap(&mut state);
                    return Err(SchedError::Crashed);
                }
                state.queues.insert(id, queue);
                Ok(id)
            }
            Err(e) => {
                for va in allocations {
                    fw.free(va);
                }
                Err(e.into())
            }
        }
    }

    /// Shrinks the heap to `blocks` (whole chunks of blocks from the end
    /// go, and a chunk of the difference replaces them if that took too
    /// much), if no render of the queue is queued or running: the firmware
    /// must not be using the pages. Every render's fragment half is pushed
    /// right after its vertex half, so an idle fragment stage means no
    /// render in flight (barriers on the vertex stage do not count).
    ///
    /// The replacement is mapped before anything is unmapped, so a failed
    /// allocation leaves the heap as it was, never smaller than asked.
    fn shrink_tvb(&self, queue: &mut QueueHw, blocks: u64) {
        let busy = queue.stages[Stage::Fragment as usize].in_flight > 0;
        if busy {
            return;
        }
        let heap = &mut queue.tvb;
        // The chunks that stay: the first always does.
        let mut kept_chunks = heap.chunks.len();
        let mut kept_blocks = heap.mapped_blocks;
        while kept_chunks > 1 && kept_blocks > blocks {
            kept_chunks -= 1;
            kept_blocks -= heap.chunks[kept_chunks].1;
        }
        if kept_chunks == heap.chunks.len() {
            // Nothing can go (one chunk bigger than the target): stop
            // asking until another run of small renders.
            heap.policy.shrink_declined();
            return;
        }
        let replacement = if kept_blocks < blocks {
            match self.map_tvb_chunk(queue, blocks - kept_blocks) {
                Ok(va) => Some((va, blocks - kept_blocks)),
                Err(e) => {
                    tracing::warn!(%e, blocks, "TVB shrink skipped: no memory for its replacement chunk");
                    queue.tvb.policy.shrink_declined();
                    return;
                }
            }
        } else {
            None
        };
        let heap = &mut queue.tvb;
        let mut vm = lock_vm(&queue.vm);
        for (va, _) in heap.chunks.drain(kept_chunks..) {
            vm.unmap_kernel(va);
        }
        drop(vm);
        heap.mapped_blocks = kept_blocks;
        if let Some((va, chunk_blocks)) = replacement {
            self.publish_tvb_chunk(heap, va, chunk_blocks);
        }
        heap.policy.shrunk(heap.mapped_blocks);
        write(
            &self.link.view,
            heap.info.offset(TVB_BLOCK_COUNT),
            &(heap.mapped_blocks as u32),
        );
        queue.tvb_dirty = true;
    }

    /// Maps more parameter-buffer blocks so the heap has `blocks`.
    fn grow_tvb(&self, queue: &mut QueueHw, blocks: u64) -> Result<(), AllocError> {
        if blocks <= queue.tvb.mapped_blocks {
            return Ok(());
        }
        let new_blocks = blocks - queue.tvb.mapped_blocks;
        let va = self.map_tvb_chunk(queue, new_blocks)?;
        self.publish_tvb_chunk(&mut queue.tvb, va, new_blocks);
        queue.tvb_dirty = true;
        tracing::debug!(blocks, "TVB mapped");
        Ok(())
    }

    /// Allocates `new_blocks` blocks of memory and maps them in the
    /// queue's kernel range; returns their VM address.
    fn map_tvb_chunk(&self, queue: &QueueHw, new_blocks: u64) -> Result<u64, AllocError> {
        let memory = self.ram.allocate(new_blocks * tvb::BLOCK_BYTES)?;
        lock_vm(&queue.vm).map_kernel(memory, tvb::BLOCK_BYTES)
    }

    /// Appends a mapped chunk to the heap: its blocks and pages go at the
    /// end of the firmware's lists, and the block count covers them.
    fn publish_tvb_chunk(&self, heap: &mut TvbHeap, va: u64, new_blocks: u64) {
        heap.chunks.push((va, new_blocks));
        let entries: Vec<u32> = (0..new_blocks)
            .map(|i| ((va + i * tvb::BLOCK_BYTES) / TVB_PAGE_BYTES) as u32)
            .collect();
        let _ = self.link.view.write(
            heap.block_list.offset(4 * heap.mapped_blocks),
            entries.as_bytes(),
        );
        let pages: Vec<u32> = (0..new_blocks * tvb::BLOCK_PAGES)
            .map(|i| ((va + i * tvb::PAGE_BYTES) / TVB_PAGE_BYTES) as u32)
            .collect();
        let _ = self.link.view.write(
            heap.page_list
                .offset(4 * heap.mapped_blocks * tvb::BLOCK_PAGES),
            pages.as_bytes(),
        );
        heap.mapped_blocks += new_blocks;
        // Only the kmd's fields: the firmware updates the statistics.
        write(
            &self.link.view,
            heap.info.offset(TVB_BLOCK_LIST),
            &heap.block_list,
        );
        write(
            &self.link.view,
            heap.info.offset(TVB_BLOCK_COUNT),
            &(heap.mapped_blocks as u32),
        );
    }

    /// Destroys a queue: work not yet on the GPU is cancelled; work on it
    /// finishes (bounded by the firmware's watchdog), then the queue's
    /// memory is freed.
    pub fn destroy_queue(&self, id: u64) {
        let mut state = self.state();
        let Some(queue) = state.queues.get_mut(&id) else {
            return;
        };
        queue.destroyed = true;
        let cancelled: Vec<Job> = queue.pending.drain(..).collect();
        state.stats.cancelled += cancelled.len() as u64;
        for job in cancelled {
            job.fence.signal(Some(Errno::ECANCELED));
        }
        self.reap(&mut state);
        drop(state);
        self.events.notify();
    }

    /// Frees destroyed queues with nothing left on the GPU: first the
    /// firmware is told to forget their work queues, then, once it says it
    /// has, their memory goes (or at once if the firmware is dead).
    fn reap(&self, state: &mut State) {
        let crashed = self.crashed();
        let controls_done = if crashed {
            None
        } else {
            self.link.status().map(|s| s.controls_done)
        };
        let idle: Vec<u64> = state
            .queues
            .iter()
            .filter(|(_, q)| q.destroyed && q.stages.iter().all(|s| s.in_flight == 0))
            .map(|(&id, _)| id)
            .collect();
        for id in idle {
            let Some(queue) = state.queues.get_mut(&id) else {
                continue;
            };
            if !crashed {
                match queue.cancelled_at {
                    None => {
                        let control = &self.link.init_data.device_control;
                        if ring_room(&self.link.view, control) < STAGES.len() as u32 {
                            continue; // Next round.
                        }
                        for stage in &queue.stages {
                            let msg = DeviceControlMsg {
                                kind: DeviceControlKind::CancelWorkQueue as u32,
                                pad: 0,
                                args: [stage.info.get(), 0, 0, 0, 0, 0, 0],
                            };
                            let _ = control.push(&self.link.view, msg.as_bytes());
                        }
                        state.controls_sent = state.controls_sent.wrapping_add(STAGES.len() as u32);
                        queue.cancelled_at = Some(state.controls_sent);
                        self.link.ring_doorbell();
                        continue;
                    }
                    Some(target) => {
                        if !controls_done.is_some_and(|done| stamp_reached(done, target)) {
                            continue;
                        }
                    }
                }
            }
            if let Some(queue) = state.queues.remove(&id) {
                let mut vm = lock_vm(&queue.vm);
                for (va, _) in &queue.tvb.chunks {
                    vm.unmap_kernel(*va);
                }
                drop(vm);
                for va in queue.firmware_allocations {
                    self.link.vm.free(va);
                }
            }
        }
    }

    /// A queue's parameter-buffer statistics.
    pub fn tvb_stats(&self, id: u64) -> Option<TvbStats> {
        self.state().queues.get(&id).map(|q| q.tvb.policy.stats())
    }

    /// The firmware address of queue `id`'s parameter-buffer control block
    /// ([`TvbInfo`]), for tools and tests.
    pub fn tvb_info_address(&self, id: u64) -> Option<FwVa> {
        self.state().queues.get(&id).map(|q| q.tvb.info)
    }

    /// Queues a submission on queue `id`.
    pub fn submit(&self, id: u64, job: Job) -> Result<(), Errno> {
        let mut state = self.state();
        // Checked under the lock the crash handler holds while it fails
        // everything pending, so no submission slips in after it.
        if self.crashed() {
            return Err(Errno::ENODEV);
        }
        let queue = state
            .queues
            .get_mut(&id)
            .filter(|q| !q.destroyed)
            .ok_or(Errno::ENOENT)?;
        queue.pending.push_back(job);
        state.stats.submitted += 1;
        // When no other queue has work waiting, the submission goes to the
        // firmware from here (if its in-fences have signalled and the slots
        // and ring space it needs are free) rather than after a wakeup of
        // the scheduler thread: the dispatch order is the same, and an idle
        // GPU starts on it one thread hand-off sooner.
        let alone = state
            .queues
            .iter()
            .all(|(&other, q)| other == id || q.pending.is_empty());
        if alone {
            self.dispatch(&mut state);
        }
        let waiting = state.queues.get(&id).is_some_and(|q| !q.pending.is_empty());
        drop(state);
        if waiting {
            self.events.notify();
        }
        Ok(())
    }

    // ---- the thread ------------------------------------------------------

    fn run(&self) {
        while !self.stop.load(Ordering::Acquire) {
            let generation = self.events.current();
            self.step();
            self.events.wait_change(generation, IDLE_POLL);
        }
    }

    /// One round: events, retirement, dispatch.
    fn step(&self) {
        let mut state = self.state();
        self.drain_log();
        self.drain_stats(&mut state);
        let crashed =
            self.drain_events(&mut state) || self.link.status().is_some_and(|s| s.crashed != 0);
        if crashed && !self.crashed.swap(true, Ordering::AcqRel) {
            let pending: usize = state.queues.values().map(|q| q.pending.len()).sum();
            tracing::error!(
                running = state.running.len(),
                pending,
                queues = state.queues.len(),
                "GPU firmware crashed: cancelling {} submissions on the GPU and {} waiting, \
                 all with ENODEV",
                state.running.len(),
                pending
            );
            let running: Vec<RunningJob> = state.running.drain(..).collect();
            for job in running {
                job.fence.signal(Some(Errno::ENODEV));
            }
            for queue in state.queues.values_mut() {
                for job in queue.pending.drain(..) {
                    job.fence.signal(Some(Errno::ENODEV));
                }
                // Nothing runs any more: the queue's memory can go once
                // userspace destroys it.
                for stage in queue.stages.iter_mut() {
                    stage.in_flight = 0;
                    stage.slot = None;
                }
            }
            self.link.stop();
        }
        if self.crashed() {
            self.reap(&mut state);
            return;
        }
        self.retire(&mut state);
        self.reap(&mut state);
        self.dispatch(&mut state);
    }

    fn drain_stats(&self, state: &mut State) {
        let view = &self.link.view;
        while let Ok(Some(bytes)) = self.link.init_data.stats.pop(view) {
            if let Ok(msg) = StatsMsg::read_from_bytes(&bytes) {
                let pipe = msg.pipe_type as usize;
                let ns = msg.end_ns.saturating_sub(msg.start_ns);
                if let Some(stage) = state.stats.gpu_runs.get_mut(pipe) {
                    *stage += 1;
                    state.stats.gpu_busy_ns[pipe] += ns;
                }
                // The queue whose stage holds the command's event slot
                // (it holds it until the command retires, and retiring
                // drains these messages first).
                if let Some(queue) = state
                    .queues
                    .values()
                    .find(|q| q.stages.get(pipe).is_some_and(|s| s.slot == Some(msg.slot)))
                {
                    queue.usage.add(pipe, ns);
                }
            }
        }
    }

    fn drain_log(&self) {
        let view = &self.link.view;
        while let Ok(Some(bytes)) = self.link.init_data.log.pop(view) {
            if let Ok(line) = LogMsg::read_from_bytes(&bytes) {
                match line.level {
                    0 => tracing::error!(target: "agx_firmware", "{}", line.text()),
                    1 => tracing::warn!(target: "agx_firmware", "{}", line.text()),
                    2 => tracing::info!(target: "agx_firmware", "{}", line.text()),
                    _ => tracing::debug!(target: "agx_firmware", "{}", line.text()),
                }
            }
        }
    }

    /// Handles every pending event; true if the firmware crashed.
    fn drain_events(&self, state: &mut State) -> bool {
        let view = &self.link.view;
        let mut crashed = false;
        loop {
            let bytes = match self.link.init_data.events.pop(view) {
                Ok(Some(bytes)) => bytes,
                Ok(None) => break,
                Err(_) => {
                    crashed = true;
                    break;
                }
            };
            let Ok(event) = EventMsg::read_from_bytes(&bytes) else {
                continue;
            };
            match event.kind {
                k if k == EventKind::Fault as u32
                    || k == EventKind::Timeout as u32
                    || k == EventKind::Cancelled as u32 =>
                {
                    let timeout = k == EventKind::Timeout as u32;
                    let cancelled = k == EventKind::Cancelled as u32;
                    if !timeout && !cancelled {
                        state.stats.last_fault = Some((event.address, event.unit, event.reason));
                    }
                    let culprit = state.running.iter_mut().find(|job| {
                        job.segments.iter().any(|s| {
                            s.slot == event.slot
                                && stamp_reached(event.value, s.first)
                                && stamp_reached(s.last, event.value)
                        })
                    });
                    // One line per failure, as dmesg has it: what went
                    // wrong, and whose work it was.
                    let (queue, submission) = culprit
                        .as_ref()
                        .map_or((None, None), |job| (Some(job.queue), Some(job.number)));
                    let whose = match (queue, submission) {
                        (Some(q), Some(n)) => format!(" (queue {q}, submission {n})"),
                        _ => String::new(),
                    };
                    if cancelled {
                        // Counted, and reported once when the submission
                        // retires.
                    } else if timeout && event.unit == 1 {
                        state.last_failure = Some(format!(
                            "GPU timeout after {} work units: a command ran past the host-time \
                             limit ({} ms){whose}",
                            event.address, self.link.init_data.command_timeout_ms
                        ));
                        tracing::warn!(
                            queue,
                            submission,
                            vm_slot = event.vm_slot,
                            used_units = event.address,
                            "GPU timeout: a command ran past the watchdog's host-time limit \
                             ({} ms); the rest of its submission is cancelled",
                            self.link.init_data.command_timeout_ms
                        );
                    } else if timeout {
                        state.last_failure = Some(format!(
                            "GPU timeout: the submission used up its work budget of {} \
                             units{whose}",
                            self.link.init_data.work_budget_units
                        ));
                        tracing::warn!(
                            queue,
                            submission,
                            vm_slot = event.vm_slot,
                            used_units = event.address,
                            budget_units = self.link.init_data.work_budget_units,
                            "GPU timeout: the submission used up its work budget; \
                             the rest of it is cancelled"
                        );
                    } else {
                        state.last_failure =
                            Some(format!("GPU fault: {}{whose}", event.describe_fault()));
                        tracing::warn!(
                            queue,
                            submission,
                            vm_slot = event.vm_slot,
                            "GPU fault: {}",
                            event.describe_fault()
                        );
                    }
                    if let Some(job) = culprit {
                        if cancelled {
                            job.cancelled_commands += 1;
                        }
                        job.error.get_or_insert(if timeout || cancelled {
                            Errno::ETIMEDOUT
                        } else {
                            Errno::EIO
                        });
                    }
                }
                k if k == EventKind::Crash as u32 => crashed = true,
                k if k == EventKind::GrowTvb as u32 => self.grow_request(state, &event),
                _ => {}
            }
        }
        crashed
    }

    /// A mid-render request for more parameter buffer (the sync policy):
    /// grow if the policy allows, and answer.
    fn grow_request(&self, state: &mut State, event: &EventMsg) {
        let wanted = event.address;
        let mut granted = 0u64;
        if let Some(queue) = state.queues.get_mut(&u64::from(event.unit)) {
            if let Ok(blocks) = queue.tvb.policy.grow_request(wanted) {
                if self.grow_tvb(queue, blocks).is_ok() {
                    granted = blocks;
                } else {
                    queue.tvb.policy.growth_failed(queue.tvb.mapped_blocks);
                }
            }
        }
        let msg = DeviceControlMsg {
            kind: DeviceControlKind::GrowTvbAck as u32,
            pad: 0,
            args: [u64::from(event.unit), granted, 0, 0, 0, 0, 0],
        };
        let _ = self
            .link
            .init_data
            .device_control
            .push(&self.link.view, msg.as_bytes());
        self.link.ring_doorbell();
    }

    /// Signals the fences of submissions whose every stage is done.
    fn retire(&self, state: &mut State) {
        if state.running.is_empty() {
            return;
        }
        let stamps = self.link.stamps();
        // The firmware reports a failure before it moves the stamp: events
        // posted before these stamps were read are all in the ring now.
        if self.drain_events(state) {
            return;
        }
        // So are the statistics of the commands that stamped: counted
        // while their queues still hold the slots.
        self.drain_stats(state);
        let mut index = 0;
        while index < state.running.len() {
            let done = state.running[index]
                .segments
                .iter()
                .all(|s| stamp_reached(stamps[s.slot as usize], s.last));
            if !done {
                index += 1;
                continue;
            }
            let job = state.running.swap_remove(index);
            if let Some(queue) = state.queues.get_mut(&job.queue) {
                queue.tvb.absorb_report(&self.link.view);
            }
            for segment in &job.segments {
                if let Some(queue) = state.queues.get_mut(&job.queue) {
                    let stage = &mut queue.stages[segment.stage as usize];
                    stage.in_flight -= segment.commands;
                    if stage.in_flight == 0 {
                        if let Some(slot) = stage.slot.take() {
                            state.free_event_slots.push(slot);
                        }
                    }
                }
            }
            if let Some(entry) = state.vm_slots.get_mut(&job.vm_key) {
                entry.1 -= 1;
                if entry.1 == 0 {
                    let slot = entry.0;
                    state.vm_slots.remove(&job.vm_key);
                    self.link.set_context(slot, None);
                    state.free_vm_slots.push(slot);
                }
            }
            if job.cancelled_commands > 0 {
                tracing::warn!(
                    queue = job.queue,
                    submission = job.number,
                    "GPU watchdog: cancelled {} commands of the timed-out submission",
                    job.cancelled_commands
                );
            }
            match job.error {
                None => state.stats.completed += 1,
                Some(Errno::ETIMEDOUT) => state.stats.timed_out += 1,
                Some(_) => state.stats.faulted += 1,
            }
            job.fence.signal(job.error);
        }
    }

    /// Hands every ready submission to the firmware, highest priority
    /// first, each queue in order.
    fn dispatch(&self, state: &mut State) {
        let mut order: Vec<(usize, u64)> = state
            .queues
            .iter()
            .map(|(&id, q)| (q.priority, id))
            .collect();
        order.sort_unstable();
        for (_, id) in order {
            while let Some(queue) = state.queues.get(&id) {
                let Some(job) = queue.pending.front() else {
                    break;
                };
                if job.waits.iter().any(|w| w.status().is_none()) {
                    break;
                }
                if !self.try_dispatch(state, id) {
                    break;
                }
            }
        }
    }

    /// Dispatches the head submission of queue `id` if the resources it
    /// needs are free.
    fn try_dispatch(&self, state: &mut State, id: u64) -> bool {
        let Some(queue) = state.queues.get(&id) else {
            return false;
        };
        let Some(job) = queue.pending.front() else {
            return false;
        };
        let (vm, priority) = (Arc::clone(&queue.vm), queue.priority);
        let renders = job
            .commands
            .iter()
            .filter(|c| matches!(c, Command::Render { .. }))
            .count() as u32;
        let computes = job.commands.len() as u32 - renders;
        // Upper bounds on the commands per stage.
        let needs = [
            (Stage::Vertex, 4 * renders),
            (Stage::Fragment, 2 * renders),
            (Stage::Compute, 3 * computes),
        ];
        let mut new_slots = 0;
        for (stage, count) in needs {
            let s = &queue.stages[stage as usize];
            if count == 0 {
                continue;
            }
            if s.in_flight + count > STAGE_COMMAND_SLOTS {
                return false;
            }
            let pipe = &self.link.init_data.pipes[stage as usize * PRIORITIES + priority];
            if ring_room(&self.link.view, pipe) == 0 {
                return false;
            }
            if s.slot.is_none() {
                new_slots += 1;
            }
        }
        if state.free_event_slots.len() < new_slots {
            return false;
        }
        let vm_key = Arc::as_ptr(&vm) as usize;
        if !state.vm_slots.contains_key(&vm_key) && state.free_vm_slots.is_empty() {
            return false;
        }
        // Resources are there: commit.
        let vm_slot = match state.vm_slots.get_mut(&vm_key) {
            Some(entry) => {
                entry.1 += 1;
                entry.0
            }
            None => {
                let slot = state.free_vm_slots.pop().unwrap_or(1);
                let root = lock_vm(&vm).root_pa();
                self.link.set_context(slot, Some(root));
                state.vm_slots.insert(vm_key, (slot, 1));
                slot
            }
        };
        let State {
            queues,
            free_event_slots,
            slot_values,
            running,
            stats,
            ..
        } = state;
        let Some(queue) = queues.get_mut(&id) else {
            return false;
        };
        let Some(job) = queue.pending.pop_front() else {
            return false;
        };
        for (stage, count) in needs {
            let s = &mut queue.stages[stage as usize];
            if count > 0 && s.slot.is_none() {
                let slot = free_event_slots.pop().unwrap_or(0);
                s.slot = Some(slot);
                s.last_value = slot_values[slot as usize];
            }
        }
        let mut builder = Builder {
            link: &self.link,
            segments: BTreeMap::new(),
            commands: 0,
            submission: stats.dispatched + 1,
            objects: Vec::new(),
        };
        self.build(queue, &job, vm_slot, &mut builder);
        builder.finish();
        for segment in builder.segments.values() {
            let s = &queue.stages[segment.stage as usize];
            slot_values[segment.slot as usize] = s.last_value;
        }
        // Publish: each stage's write index, then one run message per stage.
        for segment in builder.segments.values() {
            let s = &mut queue.stages[segment.stage as usize];
            write(
                &self.link.view,
                s.info.offset(WQ_CPU_WRITE_INDEX),
                &s.write_index,
            );
            let msg = RunWorkQueueMsg {
                pipe_type: segment.stage as u32,
                event_slot: segment.slot,
                work_queue: s.info,
                write_index: s.write_index,
                is_new: u32::from(s.is_new),
                vm_slot,
                pad: 0,
            };
            s.is_new = false;
            let pipe = &self.link.init_data.pipes[segment.stage as usize * PRIORITIES + priority];
            if pipe.push(&self.link.view, msg.as_bytes()).is_err() {
                tracing::error!("submission ring full after the room check");
            }
        }
        stats.dispatched += 1;
        stats.commands += u64::from(builder.commands);
        running.push(RunningJob {
            queue: id,
            number: stats.dispatched,
            segments: builder.segments.into_values().collect(),
            fence: job.fence,
            error: None,
            cancelled_commands: 0,
            vm_key,
            _keep_alive: job.keep_alive,
        });
        self.link.ring_doorbell();
        true
    }

    /// Writes a submission's commands.
    fn build(&self, queue: &mut QueueHw, job: &Job, vm_slot: u32, b: &mut Builder<'_>) {
        // Where this submission's render and compute commands complete, for
        // barriers naming them: (slot, value) of the fragment half or the
        // dispatch.
        let mut render_done: Vec<(u32, u32)> = Vec::new();
        let mut compute_done: Vec<(u32, u32)> = Vec::new();
        // The last command on a stage before this submission, if in flight.
        let prior = |queue: &QueueHw, stage: Stage| {
            let s = &queue.stages[stage as usize];
            (s.in_flight > 0).then(|| (s.slot.unwrap_or(0), s.last_value))
        };
        let prior_render = prior(queue, Stage::Fragment);
        let prior_compute = prior(queue, Stage::Compute);
        let resolve =
            |barrier: &Barrier, prior: Option<(u32, u32)>, done: &[(u32, u32)]| match barrier {
                Barrier::None => None,
                Barrier::AllPrior => done.last().copied().or(prior),
                Barrier::Command(n) => done.get(*n).copied(),
            };
        for (command, timestamps) in job.commands.iter().zip(&job.timestamps) {
            let addrs = QueueAddrs {
                usc_exec_base: GpuVa(queue.usc_exec_base),
                tvb_info: queue.tvb.info,
            };
            match command {
                Command::Render {
                    cmd,
                    vdm_barrier,
                    cdm_barrier,
                    vertex_attachments,
                    fragment_attachments,
                } => {
                    // The parameter buffer holds one scene at a time: a
                    // render's vertex half waits for the previous render's
                    // fragment half, which also satisfies any vdm barrier
                    // (fragment halves complete in order).
                    let _ = vdm_barrier;
                    let waits = [
                        render_done.last().copied().or(prior_render),
                        resolve(cdm_barrier, prior_compute, &compute_done),
                    ];
                    b.barriers(queue, Stage::Vertex, waits);
                    let halves =
                        fwcmd::render(cmd, vertex_attachments, fragment_attachments, addrs);
                    self.size_tvb(queue, &halves.vertex.pass, vm_slot, b);
                    let vertex = b.push(
                        queue,
                        Stage::Vertex,
                        CommandTag::RunVertex,
                        [timestamps[0], timestamps[1]],
                        halves.vertex.as_bytes(),
                    );
                    b.barrier(queue, Stage::Fragment, vertex);
                    let fragment = b.push(
                        queue,
                        Stage::Fragment,
                        CommandTag::RunFragment,
                        [timestamps[2], timestamps[3]],
                        halves.fragment.as_bytes(),
                    );
                    render_done.push(fragment);
                }
                Command::Compute {
                    cmd,
                    vdm_barrier,
                    cdm_barrier,
                    attachments,
                } => {
                    let waits = [
                        resolve(vdm_barrier, prior_render, &render_done),
                        resolve(cdm_barrier, prior_compute, &compute_done),
                    ];
                    b.barriers(queue, Stage::Compute, waits);
                    let body = fwcmd::compute(cmd, attachments, addrs);
                    let done = b.push(
                        queue,
                        Stage::Compute,
                        CommandTag::RunCompute,
                        [timestamps[0], timestamps[1]],
                        body.as_bytes(),
                    );
                    compute_done.push(done);
                }
            }
        }
    }

    /// Sizes the parameter buffer before a render (the growth policy) and
    /// queues an InitBuffer when it changed.
    fn size_tvb(&self, queue: &mut QueueHw, pass: &RenderPass, vm_slot: u32, b: &mut Builder<'_>) {
        let view = &self.link.view;
        let heap = &mut queue.tvb;
        heap.absorb_report(view);
        let report = heap.unsized_report.take();
        let info: TvbInfo = read(view, heap.info).unwrap_or_default();
        let min = tvb::min_blocks_for_render(pass.width_px, pass.height_px, pass.layers, 1);
        let blocks = heap.policy.before_render(report.as_ref(), min);
        if blocks < queue.tvb.mapped_blocks {
            self.shrink_tvb(queue, blocks);
        } else if let Err(e) = self.grow_tvb(queue, blocks) {
            tracing::warn!(%e, blocks, "TVB growth failed; the render will overflow");
            queue.tvb.policy.growth_failed(queue.tvb.mapped_blocks);
        }
        if info.vm_slot != vm_slot {
            write(view, queue.tvb.info.offset(TVB_VM_SLOT), &vm_slot);
        }
        if queue.tvb_dirty {
            queue.tvb_dirty = false;
            let body = InitBufferBody {
                buffer: queue.tvb.info,
                block_list: queue.tvb.block_list,
                block_count: queue.tvb.mapped_blocks as u32,
                pad: 0,
            };
            b.push(
                queue,
                Stage::Vertex,
                CommandTag::InitBuffer,
                [0, 0],
                body.as_bytes(),
            );
        }
    }
}

/// Writes commands into a queue's stages.
struct Builder<'a> {
    link: &'a FirmwareLink,
    segments: BTreeMap<Stage, Segment>,
    commands: u32,
    /// The submission's number, which the firmware's watchdog charges
    /// its commands' work to.
    submission: u64,
    /// The command objects written, whose headers get the submission's
    /// command count once it is known ([`Builder::finish`]).
    objects: Vec<FwVa>,
}

impl Builder<'_> {
    /// Writes the submission's command count into every command it
    /// wrote (before the work queues are published): the firmware drops
    /// the submission's watchdog account after that many commands.
    fn finish(&self) {
        let offset = std::mem::offset_of!(CommandHeader, submission_commands) as u64;
        for object in &self.objects {
            let _ = self
                .link
                .view
                .write(object.offset(offset), self.commands.as_bytes());
        }
    }
}

impl Builder<'_> {
    /// Appends a command to `stage`; returns its (slot, stamp value).
    fn push(
        &mut self,
        queue: &mut QueueHw,
        stage: Stage,
        tag: CommandTag,
        timestamps: [u64; 2],
        body: &[u8],
    ) -> (u32, u32) {
        let s = &mut queue.stages[stage as usize];
        let slot = s.slot.unwrap_or(0);
        s.last_value = s.last_value.wrapping_add(STAMP_STEP);
        let value = s.last_value;
        let header = CommandHeader {
            tag: tag as u32,
            size: (size_of::<CommandHeader>() + body.len()) as u32,
            stamp_slot: slot,
            stamp_value: value,
            timestamp_start: FwVa(timestamps[0]),
            timestamp_end: FwVa(timestamps[1]),
            submission: self.submission,
            ..CommandHeader::default()
        };
        let object = s
            .slab
            .offset(u64::from(s.write_index % STAGE_COMMAND_SLOTS) * COMMAND_SLOT_BYTES);
        let mut bytes = header.as_bytes().to_vec();
        bytes.extend_from_slice(body);
        let view = &self.link.view;
        let _ = view.write(object, &bytes);
        self.objects.push(object);
        let _ = view.write(
            s.ring.offset(8 * u64::from(s.write_index)),
            object.as_bytes(),
        );
        s.write_index = (s.write_index + 1) % WORK_QUEUE_ENTRIES;
        s.in_flight += 1;
        self.commands += 1;
        let segment = self.segments.entry(stage).or_insert(Segment {
            stage,
            slot,
            first: value,
            last: value,
            commands: 0,
        });
        segment.last = value;
        segment.commands += 1;
        (slot, value)
    }

    /// Appends a barrier on `stage` for each wait there is.
    fn barriers(&mut self, queue: &mut QueueHw, stage: Stage, waits: [Option<(u32, u32)>; 2]) {
        for wait in waits.into_iter().flatten() {
            self.barrier(queue, stage, wait);
        }
    }

    /// Appends a barrier on `stage` waiting for `(slot, value)`.
    fn barrier(&mut self, queue: &mut QueueHw, stage: Stage, (slot, value): (u32, u32)) {
        let body = BarrierBody {
            wait_slot: slot,
            wait_value: value,
        };
        self.push(queue, stage, CommandTag::Barrier, [0, 0], body.as_bytes());
    }
}
