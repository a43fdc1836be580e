//! The firmware: boots from the kmd's init block and serves its rings.
//!
//! A thread that plays the GPU's firmware. It reads the [`InitData`] the
//! kmd wrote, marks itself booted, then sleeps until the doorbell rings
//! (or its watchdog tick passes). Each wake-up it drains the
//! device-control ring, takes new work from the twelve submission rings
//! (higher priority first), and runs each known work queue's commands in
//! order: a barrier waits (without blocking other queues) until its stamp
//! is reached; InitBuffer records the parameter buffer's size; the Run
//! commands go to the execution engine ([`Engine`]), each on a host thread
//! of its own. The three pipes (vertex, fragment, compute) each run one
//! command at a time, side by side: while a command runs, the firmware
//! serves the other queues. A queue's turn on its pipe is a time slice
//! ([`TIME_SLICE`]): when it ends while other queues of the pipe have
//! work, the running command is suspended ([`crate::preempt`]) and
//! resumed at the queue's next turn, so that one long command does not
//! hold everyone else's work behind it. After every
//! command it writes the command's stamp and posts a completion event;
//! faults, timeouts and crashes are events too. Everything it reads comes from
//! shared memory through [`SharedMemory`]; anything malformed there is a
//! firmware crash reported as an event, never a panic.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use agx_fwif::coprocessor::{BootParams, Coprocessor, RunningFirmware};
use agx_fwif::messages::{
    BarrierBody, CommandHeader, CommandTag, DeviceControlKind, DeviceControlMsg, EventKind,
    EventMsg, FirmwareStatus, InitBufferBody, InitData, LogMsg, PipeType, RunWorkQueueMsg,
    StatsMsg, WorkQueueInfo, EVENT_SLOTS, INIT_MAGIC, INTERFACE_VERSION, MAX_COMMAND_BYTES,
    PRIORITIES, VM_SLOTS,
};
use agx_fwif::ring::{RingError, SharedMemory};
use agx_fwif::view::{FirmwareView, SharedPhysicalMemory};
use agx_hw::addr::{FwVa, PhysAddr};
use agx_hw::formats::UatTtb;
use agx_hw::uat::PhysicalMemory;
use zerocopy::{FromBytes, IntoBytes};

pub use crate::command::{FirmwareServices, RunContext, WorkAccount};
pub use crate::engine::{Engine, NoEngine};
pub use crate::fault::EngineResult;
use crate::preempt::Preemption;

/// The kmd -> firmware doorbell (the mailbox).
#[derive(Debug, Default)]
pub struct Doorbell {
    rung: Mutex<bool>,
    cond: Condvar,
}

impl Doorbell {
    /// Rings it (the kmd, for new work; a command's thread, when the
    /// command ends).
    pub fn ring(&self) {
        *self.rung.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cond.notify_all();
    }

    /// Waits until it rings or `timeout` passes; whether it rang (since
    /// the firmware last looked).
    fn wait(&self, timeout: Duration) -> bool {
        let guard = self.rung.lock().unwrap_or_else(|e| e.into_inner());
        let (mut guard, _) = self
            .cond
            .wait_timeout_while(guard, timeout, |rung| !*rung)
            .unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut *guard)
    }
}

pub use agx_fwif::coprocessor::Interrupt;

/// A work queue the firmware knows of.
#[derive(Debug, Clone, Copy)]
struct ActiveQueue {
    info: FwVa,
    vm_slot: u32,
    /// Run up to this write index (from the latest message).
    limit: u32,
    /// The read index when the firmware last looked (`u32::MAX`: not
    /// looked yet): the queue has work while it differs from `limit`.
    read_index: u32,
    /// 0 is the highest; the kmd maps UAPI priority p to 3 - p.
    priority: usize,
    /// The pipe it runs on (vertex, fragment, compute: the submission
    /// ring's pipe type).
    pipe: usize,
}

/// A running firmware.
pub struct Firmware {
    doorbell: Arc<Doorbell>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Firmware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Firmware").finish_non_exhaustive()
    }
}

/// The firmware's view of shared memory, shared with its thread.
pub type FirmwareMemory = Arc<dyn SharedMemory + Send + Sync>;

/// Physical memory, as the GPU reads it through its MMU.
pub type GpuPhysicalMemory = Arc<dyn PhysicalMemory + Send + Sync>;

impl Firmware {
    /// Boots the firmware from the init block at `init`.
    pub fn boot(
        init: FwVa,
        memory: FirmwareMemory,
        gpu_memory: GpuPhysicalMemory,
        interrupt: Arc<dyn Interrupt>,
        engine: Box<dyn Engine>,
    ) -> Firmware {
        let doorbell = Arc::new(Doorbell::default());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (doorbell, stop) = (Arc::clone(&doorbell), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("agx-firmware".into())
                .spawn(move || {
                    let mut state = State {
                        memory,
                        gpu_memory,
                        interrupt,
                        engine: Arc::from(engine),
                        doorbell: Arc::clone(&doorbell),
                        queues: BTreeMap::new(),
                        suspended: BTreeMap::new(),
                        running: BTreeMap::new(),
                        doorbell_rang_at: Instant::now(),
                        pipe_done_at: BTreeMap::new(),
                        rings: Arc::new(Mutex::new(())),
                        grow_acks: Arc::new(GrowAcks::default()),
                        runners: Vec::new(),
                        barrier_waits: BTreeMap::new(),
                        accounts: BTreeMap::new(),
                        controls_done: 0,
                        controls_published: 0,
                        stop: Arc::clone(&stop),
                    };
                    // A bug in the firmware or the GPU model (a panic) is a
                    // firmware crash, as on hardware: reported, never a
                    // dead thread the kmd waits on forever.
                    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        state.serve(init, &doorbell, &stop)
                    }));
                    // Nothing suspended outlives the firmware.
                    state.abandon_suspended(|_| true);
                    match served {
                        Ok(Ok(())) => {}
                        Ok(Err(error)) => state.crash(init, &error),
                        Err(panic) => {
                            let what = panic_message(&*panic);
                            state.crash(init, &FirmwareError::Internal(what));
                        }
                    }
                })
                .ok()
        };
        Firmware {
            doorbell,
            stop,
            thread: Mutex::new(thread),
        }
    }

    /// The doorbell the kmd rings.
    pub fn doorbell(&self) -> &Arc<Doorbell> {
        &self.doorbell
    }

    /// Stops the firmware thread.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        self.doorbell.ring();
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl RunningFirmware for Firmware {
    fn ring_doorbell(&self) {
        self.doorbell.ring();
    }

    fn shutdown(&self) {
        Firmware::shutdown(self);
    }
}

/// The simulated coprocessor: the firmware thread with the simulated GPU
/// ([`Gpu`](crate::engine::Gpu)) as its execution engine, over the
/// machine's physical memory.
pub struct SimulatedCoprocessor {
    memory: SharedPhysicalMemory,
    gpu_threads: usize,
    shader_engine: crate::usc::ShaderEngine,
    probe: Option<Arc<dyn crate::probe::ShaderProbe>>,
}

impl std::fmt::Debug for SimulatedCoprocessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatedCoprocessor")
            .field("gpu_threads", &self.gpu_threads)
            .field("shader_engine", &self.shader_engine)
            .finish_non_exhaustive()
    }
}

impl SimulatedCoprocessor {
    /// A coprocessor over `memory` whose GPU runs threadgroups on
    /// `gpu_threads` host threads (results do not depend on it).
    pub fn new(memory: SharedPhysicalMemory, gpu_threads: usize) -> SimulatedCoprocessor {
        SimulatedCoprocessor {
            memory,
            gpu_threads,
            shader_engine: crate::usc::ShaderEngine::default(),
            probe: None,
        }
    }

    /// The same coprocessor with its GPU's programs run by `engine`.
    pub fn with_shader_engine(self, engine: crate::usc::ShaderEngine) -> SimulatedCoprocessor {
        SimulatedCoprocessor {
            shader_engine: engine,
            ..self
        }
    }

    /// The same coprocessor with the debugger's `probe` choosing lanes of
    /// its GPU's SIMD-groups to trace.
    pub fn with_probe(
        self,
        probe: Option<Arc<dyn crate::probe::ShaderProbe>>,
    ) -> SimulatedCoprocessor {
        SimulatedCoprocessor { probe, ..self }
    }
}

impl Coprocessor for SimulatedCoprocessor {
    fn boot(&self, params: BootParams) -> Box<dyn RunningFirmware> {
        let view = FirmwareView::new(Arc::clone(&self.memory), params.ttb1);
        Box::new(Firmware::boot(
            params.init,
            Arc::new(view),
            Arc::clone(&self.memory),
            params.interrupt,
            Box::new(
                crate::engine::Gpu::new(self.gpu_threads)
                    .with_shader_engine(self.shader_engine)
                    .with_probe(self.probe.clone()),
            ),
        ))
    }
}

impl Drop for Firmware {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Why the firmware stopped serving.
#[derive(Debug, thiserror::Error)]
enum FirmwareError {
    #[error("bad init block: {0}")]
    BadInit(&'static str),
    #[error("shared memory: {0}")]
    Ring(#[from] RingError),
    #[error("malformed structure at {address:#x}: {what}")]
    Malformed { address: FwVa, what: &'static str },
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<agx_fwif::ring::MemoryError> for FirmwareError {
    fn from(e: agx_fwif::ring::MemoryError) -> FirmwareError {
        FirmwareError::Ring(RingError::Memory(e))
    }
}

/// What a panic says.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

struct State {
    memory: FirmwareMemory,
    gpu_memory: GpuPhysicalMemory,
    interrupt: Arc<dyn Interrupt>,
    engine: Arc<dyn Engine>,
    doorbell: Arc<Doorbell>,
    /// Known work queues by their info address.
    queues: BTreeMap<FwVa, ActiveQueue>,
    /// The command each queue has suspended at its head, if any.
    suspended: BTreeMap<FwVa, InFlight>,
    /// The Run command each queue has running at its head, if any: at
    /// most one per pipe, the pipes side by side.
    running: BTreeMap<FwVa, Running>,
    /// When the doorbell last rang (new work).
    doorbell_rang_at: Instant,
    /// When a command last ended on each pipe.
    pipe_done_at: BTreeMap<usize, Instant>,
    /// The event and device-control rings, which a command's services use
    /// too (a mid-render grow request) while the firmware serves others.
    rings: Arc<Mutex<()>>,
    /// Grow requests' answers the firmware read from the device-control
    /// ring, for the command waiting for them.
    grow_acks: Arc<GrowAcks>,
    /// Idle command threads.
    runners: Vec<Runner>,
    /// Barriers waiting at the head of a work queue: (work queue, read
    /// index) -> when the wait began, for the watchdog.
    barrier_waits: BTreeMap<(FwVa, u32), Instant>,
    /// The work accounts of recent submissions, by submission number.
    accounts: BTreeMap<u64, Account>,
    /// Device-control requests applied, and the count last published.
    controls_done: u32,
    controls_published: u32,
    /// Set when the firmware is shutting down.
    stop: Arc<AtomicBool>,
}

/// A submission's work account, and whether the watchdog stopped it
/// (its remaining commands are then cancelled).
struct Account {
    work: Arc<WorkAccount>,
    stopped: bool,
    /// Commands of the submission handled so far.
    commands_seen: u32,
}

/// Accounts of submissions whose command count is unknown kept at most
/// (submissions are numbered in order, so the oldest go first). An
/// account whose count is known goes after its last command.
const ACCOUNTS_KEPT: usize = 1 << 16;

/// Offsets of the index fields of [`WorkQueueInfo`].
const WQ_GPU_READ_INDEX: u64 = 12;
const WQ_GPU_DONE_INDEX: u64 = 20;
const _: () = assert!(std::mem::offset_of!(WorkQueueInfo, gpu_read_index) == 12);
const _: () = assert!(std::mem::offset_of!(WorkQueueInfo, gpu_done_index) == 20);

/// How often the firmware wakes without a doorbell (to re-check barriers).
const TICK: Duration = Duration::from_millis(5);

/// Grow requests' answers kept for a command to find (older ones, which
/// nobody waits for any more, go first).
const GROW_ACKS_KEPT: usize = 64;

/// A queue's turn on the GPU while other queues have work: host time
/// after which its running command is suspended (at its next check,
/// within about a millisecond) and the other queues get theirs. The
/// hardware's slice is not public; this one keeps another client's
/// short work within a few tens of milliseconds of a long job.
pub const TIME_SLICE: Duration = Duration::from_millis(10);

/// The least a command runs, once started or resumed, before new work
/// may suspend it.
const LEAST_RUN: Duration = Duration::from_millis(2);

/// How long a suspended command waits at most while other queues keep
/// making progress: it is then resumed for a slice whatever they have.
const LONGEST_WAIT: Duration = Duration::from_millis(40);

/// How long a suspended command waits after another command of its pipe
/// ended before it is resumed: a client that submits many small jobs one
/// after another gets its next one in (which suspending the resumed
/// command again would cost far more), within [`LONGEST_WAIT`].
const GRACE: Duration = Duration::from_millis(2);

/// Idle command threads kept for the next command.
const IDLE_RUNNERS: usize = 2;

/// How long the firmware waits for the kmd to answer a GrowTVB request.
const GROW_TVB_ACK_TIMEOUT: Duration = Duration::from_millis(1000);

/// The firmware's services to a running command. Commands of other
/// pipes run at the same time and the firmware thread serves their
/// queues meanwhile: it alone reads the device-control ring (so control
/// requests are applied, and counted done, in the order the kmd sent
/// them), and leaves the answer to a grow request in `grow_acks` for
/// the command that waits for it. The event ring, which both push to, is
/// held under `rings`.
struct Services {
    memory: FirmwareMemory,
    interrupt: Arc<dyn Interrupt>,
    init: InitData,
    rings: Arc<Mutex<()>>,
    grow_acks: Arc<GrowAcks>,
}

/// Answers to grow requests, by parameter buffer, that the firmware
/// thread read for the commands waiting for them.
#[derive(Debug, Default)]
struct GrowAcks {
    acks: Mutex<Vec<(u32, u64)>>,
    cond: Condvar,
}

impl GrowAcks {
    /// Leaves buffer `buffer_id`'s answer (`blocks` granted, 0: refused).
    fn put(&self, buffer_id: u32, blocks: u64) {
        let mut acks = self.acks.lock().unwrap_or_else(|e| e.into_inner());
        if acks.len() >= GROW_ACKS_KEPT {
            acks.remove(0);
        }
        acks.push((buffer_id, blocks));
        self.cond.notify_all();
    }

    /// Drops answers for buffer `buffer_id` nobody waited for.
    fn forget(&self, buffer_id: u32) {
        let mut acks = self.acks.lock().unwrap_or_else(|e| e.into_inner());
        acks.retain(|&(id, _)| id != buffer_id);
    }

    /// Waits until `deadline` for buffer `buffer_id`'s answer.
    fn wait(&self, buffer_id: u32, deadline: Instant) -> Option<u64> {
        let mut acks = self.acks.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(at) = acks.iter().position(|&(id, _)| id == buffer_id) {
                return Some(acks.remove(at).1);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            acks = self
                .cond
                .wait_timeout(acks, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl FirmwareServices for Services {
    fn grow_tvb(&self, buffer_id: u32, blocks_wanted: u64) -> Option<u64> {
        let event = EventMsg {
            kind: EventKind::GrowTvb as u32,
            unit: buffer_id,
            address: blocks_wanted,
            ..EventMsg::default()
        };
        let deadline = Instant::now() + GROW_TVB_ACK_TIMEOUT;
        // An answer to an earlier request of this buffer came too late.
        self.grow_acks.forget(buffer_id);
        loop {
            let pushed = {
                let _rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
                self.init.events.push(&*self.memory, event.as_bytes())
            };
            match pushed {
                Ok(()) => break,
                Err(RingError::Full) if Instant::now() < deadline => {
                    self.interrupt.raise();
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(_) => return None,
            }
        }
        self.interrupt.raise();
        let blocks = self.grow_acks.wait(buffer_id, deadline)?;
        (blocks != 0).then_some(blocks)
    }
}

/// How a command ended on its thread.
enum Outcome {
    Ran(EngineResult),
    /// The GPU model panicked: a firmware crash.
    Panicked(String),
}

/// A Run command, handed to the thread that runs it.
struct Job {
    engine: Arc<dyn Engine>,
    tag: CommandTag,
    command: FwVa,
    body: Vec<u8>,
    vm_slot: u32,
    ttb0: Option<PhysAddr>,
    gpu_memory: GpuPhysicalMemory,
    services: Services,
    deadline: Instant,
    work: Arc<WorkAccount>,
    stop: Arc<AtomicBool>,
    preemption: Arc<Preemption>,
    outcome: Arc<Mutex<Option<Outcome>>>,
    /// Rung when the command ends, so that the firmware reports it.
    doorbell: Arc<Doorbell>,
}

impl Job {
    fn run(self) {
        let probe = self.engine.probe();
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let ctx = RunContext {
                command: self.command.get(),
                body: &self.body,
                vm_slot: self.vm_slot,
                ttb0: self.ttb0,
                memory: &*self.gpu_memory,
                firmware: &*self.services.memory,
                deadline: self.deadline,
                work: &self.work,
                services: &self.services,
                stop: &self.stop,
                preemption: &self.preemption,
                shader_code: self.engine.shader_code(),
                probe: probe.as_deref(),
            };
            self.engine.run(self.tag, &ctx)
        }));
        let outcome = match ran {
            Ok(result) => Outcome::Ran(result),
            Err(panic) => Outcome::Panicked(panic_message(&*panic)),
        };
        *self.outcome.lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);
        self.preemption.finish();
        self.doorbell.ring();
    }
}

/// A host thread that runs commands, one at a time.
struct Runner {
    jobs: mpsc::Sender<Job>,
}

impl Runner {
    /// A new thread, or `None` when the host has no thread to give.
    fn spawn() -> Option<Runner> {
        let (jobs, next) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("agx-gpu-command".into())
            .spawn(move || {
                while let Ok(job) = next.recv() {
                    job.run();
                }
            })
            .ok()?;
        Some(Runner { jobs })
    }
}

/// A Run command started and not yet finished: running, or suspended at
/// its queue's head.
struct InFlight {
    command: FwVa,
    /// Its queue's read index.
    read_index: u32,
    vm_slot: u32,
    preemption: Arc<Preemption>,
    outcome: Arc<Mutex<Option<Outcome>>>,
    /// Its thread (`None`: it ran on the firmware's own, the host having
    /// no other to give).
    runner: Option<Runner>,
    start_ns: u64,
    /// When it was last suspended.
    suspended_at: Instant,
}

/// A Run command running in the background: its queue waits for it,
/// while queues of other pipes run theirs.
struct Running {
    flight: InFlight,
    header: CommandHeader,
    tag: CommandTag,
    command: FwVa,
    /// Its queue's pipe.
    pipe: usize,
    /// When it started or was last resumed.
    since: Instant,
}

/// `CLOCK_MONOTONIC` in nanoseconds: the GPU's timestamp clock (the
/// kmd's GET_TIME reads the same clock).
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

impl State {
    fn read<T: FromBytes + IntoBytes>(&self, address: FwVa) -> Result<T, FirmwareError> {
        let mut buf = vec![0u8; size_of::<T>()];
        self.memory.read(address, &mut buf)?;
        T::read_from_bytes(&buf).map_err(|_| FirmwareError::Malformed {
            address,
            what: "size",
        })
    }

    fn write<T: IntoBytes + zerocopy::Immutable>(
        &self,
        address: FwVa,
        value: &T,
    ) -> Result<(), FirmwareError> {
        Ok(self.memory.write(address, value.as_bytes())?)
    }

    fn event(&self, init: &InitData, event: EventMsg) -> Result<(), FirmwareError> {
        // A full event ring means the kmd is behind: wait for it.
        loop {
            let pushed = {
                let _rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
                init.events.push(&*self.memory, event.as_bytes())
            };
            match pushed {
                Err(RingError::Full) => {
                    if self.stop.load(Ordering::Acquire) {
                        return Ok(()); // Shutting down: nobody will read it.
                    }
                    self.interrupt.raise();
                    std::thread::sleep(Duration::from_micros(200));
                }
                other => {
                    other?;
                    self.interrupt.raise();
                    return Ok(());
                }
            }
        }
    }

    fn log(&self, init: &InitData, level: u32, text: &str) {
        // The log is best effort: a full log ring drops the line.
        let _ = init
            .log
            .push(&*self.memory, LogMsg::new(level, text).as_bytes());
    }

    fn crash(&self, init_address: FwVa, error: &FirmwareError) {
        tracing::error!(%error, "firmware crashed");
        if let Ok(init) = self.read::<InitData>(init_address) {
            // Log and event first: a host that sees `crashed` may read them.
            self.log(&init, 0, &format!("crash: {error}"));
            let _ = init.events.push(
                &*self.memory,
                EventMsg {
                    kind: EventKind::Crash as u32,
                    ..EventMsg::default()
                }
                .as_bytes(),
            );
            let _ = self.memory.write(
                init.status
                    .offset(std::mem::offset_of!(FirmwareStatus, crashed) as u64),
                &1u32.to_le_bytes(),
            );
        }
        self.interrupt.raise();
    }

    fn serve(
        &mut self,
        init_address: FwVa,
        doorbell: &Doorbell,
        stop: &AtomicBool,
    ) -> Result<(), FirmwareError> {
        let init: InitData = self.read(init_address)?;
        if init.magic != INIT_MAGIC {
            return Err(FirmwareError::BadInit("magic"));
        }
        if init.version != INTERFACE_VERSION {
            return Err(FirmwareError::BadInit("version"));
        }
        // The log line goes first: a host that sees `booted` may read it.
        self.log(&init, 2, "firmware booted");
        let status = FirmwareStatus {
            booted: 1,
            ..FirmwareStatus::default()
        };
        self.write(init.status, &status)?;
        self.interrupt.raise();
        let mut more = false;
        while !stop.load(Ordering::Acquire) {
            // (With more to do it only looks whether the doorbell rang.)
            let wait = if more {
                Duration::ZERO
            } else {
                self.next_look()
            };
            if doorbell.wait(wait) {
                self.doorbell_rang_at = Instant::now();
            }
            self.device_control(&init)?;
            self.take_submissions(&init)?;
            more = self.run_queues(&init, stop)?;
        }
        Ok(())
    }

    fn device_control(&mut self, init: &InitData) -> Result<(), FirmwareError> {
        loop {
            let popped = {
                let _rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
                init.device_control.pop(&*self.memory)?
            };
            let Some(bytes) = popped else {
                break;
            };
            let msg = DeviceControlMsg::read_from_bytes(&bytes).map_err(|_| {
                FirmwareError::Malformed {
                    address: init.device_control.entries,
                    what: "control",
                }
            })?;
            self.apply_control(init, &msg);
        }
        // Published only here, between passes over the queues: nothing
        // cancelled before this point is read again.
        if self.controls_done != self.controls_published {
            self.write(init.status.offset(16), &self.controls_done)?;
            self.controls_published = self.controls_done;
        }
        Ok(())
    }

    fn apply_control(&mut self, init: &InitData, msg: &DeviceControlMsg) {
        // Requests are counted; a grow request's answer is not one (the
        // kmd numbers the requests it sends, not its answers).
        if msg.kind != DeviceControlKind::GrowTvbAck as u32 {
            self.controls_done = self.controls_done.wrapping_add(1);
        }
        {
            match msg.kind {
                k if k == DeviceControlKind::CancelWorkQueue as u32 => {
                    let queue = FwVa(msg.args[0]);
                    self.queues.remove(&queue);
                    self.abandon_suspended(|(info, _)| *info == queue);
                }
                k if k == DeviceControlKind::DestroyContext as u32 => {
                    let slot = msg.args[0] as u32;
                    self.queues.retain(|_, q| q.vm_slot != slot);
                    self.abandon_suspended(|(_, flight)| flight.vm_slot == slot);
                }
                // An answer to a running command's grow request (its
                // services look for it), or one that came too late.
                k if k == DeviceControlKind::GrowTvbAck as u32 => {
                    self.grow_acks.put(msg.args[0] as u32, msg.args[1]);
                }
                _ => self.log(init, 1, &format!("unknown device control {}", msg.kind)),
            }
        }
    }

    fn take_submissions(&mut self, init: &InitData) -> Result<(), FirmwareError> {
        for (index, ring) in init.pipes.iter().enumerate() {
            while let Some(bytes) = ring.pop(&*self.memory)? {
                let msg = RunWorkQueueMsg::read_from_bytes(&bytes).map_err(|_| {
                    FirmwareError::Malformed {
                        address: ring.entries,
                        what: "run message",
                    }
                })?;
                if msg.event_slot as usize >= EVENT_SLOTS {
                    return Err(FirmwareError::Malformed {
                        address: ring.entries,
                        what: "event slot",
                    });
                }
                let read_index = self
                    .queues
                    .get(&msg.work_queue)
                    .map_or(u32::MAX, |q| q.read_index);
                self.queues.insert(
                    msg.work_queue,
                    ActiveQueue {
                        info: msg.work_queue,
                        vm_slot: msg.vm_slot,
                        limit: msg.write_index,
                        read_index,
                        priority: index % PRIORITIES,
                        pipe: index / PRIORITIES,
                    },
                );
            }
        }
        Ok(())
    }

    fn stamp(&self, init: &InitData, slot: u32) -> Result<u32, FirmwareError> {
        if slot as usize >= EVENT_SLOTS {
            return Err(FirmwareError::Malformed {
                address: init.stamps,
                what: "stamp slot",
            });
        }
        self.read(init.stamps.offset(4 * u64::from(slot)))
    }

    /// Runs one submission's commands of every queue, highest priority
    /// first, so that a queue waits for at most one submission of each
    /// other queue of its priority (a submission's turn ends after a time
    /// slice when others wait; its command is resumed next pass). While a
    /// queue of higher priority has more ready, lower ones of its pipe
    /// wait. True if a queue has more commands ready.
    fn run_queues(&mut self, init: &InitData, stop: &AtomicBool) -> Result<bool, FirmwareError> {
        let mut order: Vec<ActiveQueue> = self.queues.values().copied().collect();
        // Within a priority, queues with new work go before those with a
        // suspended command: short work that just arrived runs before the
        // long command it interrupted is resumed (which still gets a
        // slice every pass).
        order.sort_by_key(|q| (q.priority, self.suspended.contains_key(&q.info)));
        let mut more = false;
        // Per pipe: the priority of a queue with more ready this pass.
        let mut busy_priority: BTreeMap<usize, usize> = BTreeMap::new();
        let mut progressed = false;
        for queue in order {
            if stop.load(Ordering::Acquire) {
                break;
            }
            if busy_priority
                .get(&queue.pipe)
                .is_some_and(|&p| queue.priority > p)
            {
                continue;
            }
            // The latest state: a control request applied while an
            // earlier queue ran may have cancelled or updated it.
            let Some(queue) = self.queues.get(&queue.info).copied() else {
                continue;
            };
            // A suspended command waits while new work makes progress
            // (what one stage finishes often lets another start), and
            // for a moment after another command of its pipe ended (that
            // queue's client may be about to send its next), but not for
            // longer than LONGEST_WAIT.
            if let Some(flight) = self.suspended.get(&queue.info) {
                if flight.suspended_at.elapsed() < LONGEST_WAIT {
                    if progressed {
                        more = true;
                        continue;
                    }
                    if self.in_grace(queue.pipe) {
                        continue;
                    }
                }
            }
            let before = queue.read_index;
            if self.run_queue(init, &queue)? {
                more = true;
                busy_priority.entry(queue.pipe).or_insert(queue.priority);
            }
            progressed |= self
                .queues
                .get(&queue.info)
                .is_some_and(|q| q.read_index != before);
        }
        Ok(more)
    }

    /// The account of `submission`, made on its first command.
    fn account(&mut self, init: &InitData, submission: u64) -> &mut Account {
        if !self.accounts.contains_key(&submission) && self.accounts.len() >= ACCOUNTS_KEPT {
            self.accounts.pop_first();
        }
        self.accounts.entry(submission).or_insert_with(|| Account {
            work: Arc::new(WorkAccount::new(init.work_budget_units)),
            stopped: false,
            commands_seen: 0,
        })
    }

    /// The root of VM slot `slot`'s user page tables, if it has one.
    fn context_root(&self, init: &InitData, slot: u32) -> Option<PhysAddr> {
        if slot as usize >= VM_SLOTS || init.contexts.is_null() {
            return None;
        }
        let raw: u64 = self.read(init.contexts.offset(8 * u64::from(slot))).ok()?;
        let ttb = UatTtb::unpack(&raw.to_le_bytes()).value;
        ttb.valid.then_some(PhysAddr(ttb.root))
    }

    /// Writes a command's timestamp (GPU time: `CLOCK_MONOTONIC` in ns).
    /// A timestamp buffer that is not mapped is the kmd's bug; it is
    /// logged, not fatal.
    fn timestamp_at(&self, init: &InitData, address: FwVa, now_ns: u64) {
        if address.is_null() {
            return;
        }
        if self.write(address, &now_ns).is_err() {
            self.log(init, 1, &format!("timestamp at {address:#x} not mapped"));
        }
    }

    /// Runs the commands of `queue`'s next submission, as far as they can
    /// go: a Run command starts (or resumes) in the background when its
    /// pipe is free, and its queue waits for it while other pipes' queues
    /// run; once it has finished, its end is reported and the queue goes
    /// on. True if the queue has commands of another submission ready, or
    /// its command was suspended.
    fn run_queue(&mut self, init: &InitData, queue: &ActiveQueue) -> Result<bool, FirmwareError> {
        let mut info: WorkQueueInfo = self.read(queue.info)?;
        if info.entries == 0 {
            return Err(FirmwareError::Malformed {
                address: queue.info,
                what: "empty work queue",
            });
        }
        let timeout = Duration::from_millis(u64::from(init.command_timeout_ms));
        self.note_read_index(queue.info, info.gpu_read_index);
        let mut submission: Option<u64> = None;
        while !self.stop.load(Ordering::Acquire) {
            let (header, outcome) = match self.running.remove(&queue.info) {
                // Its Run command, in the background.
                Some(run) => {
                    if !run.flight.preemption.is_finished() {
                        if !self.turn_over(queue, &run) {
                            self.running.insert(queue.info, run);
                            return Ok(false);
                        }
                        tracing::trace!(
                            command = format_args!("{:#x}", run.command),
                            ran_us = run.since.elapsed().as_micros() as u64,
                            "suspending"
                        );
                        if !run.flight.preemption.suspend() {
                            tracing::trace!(
                                command = format_args!("{:#x}", run.command),
                                "suspended"
                            );
                            self.suspended.insert(
                                queue.info,
                                InFlight {
                                    suspended_at: Instant::now(),
                                    ..run.flight
                                },
                            );
                            return Ok(true);
                        }
                    }
                    submission = Some(run.header.submission);
                    self.pipe_done_at.insert(run.pipe, Instant::now());
                    let header = run.header;
                    let outcome = self.finish_run(init, queue, run)?;
                    (header, outcome)
                }
                None => {
                    if info.gpu_read_index == queue.limit {
                        break;
                    }
                    if info.gpu_read_index >= info.entries || queue.limit >= info.entries {
                        return Err(FirmwareError::Malformed {
                            address: queue.info,
                            what: "work queue index",
                        });
                    }
                    let command: FwVa =
                        self.read(info.ring.offset(8 * u64::from(info.gpu_read_index)))?;
                    let header: CommandHeader = self.read(command)?;
                    let tag = CommandTag::from_raw(header.tag).ok_or(FirmwareError::Malformed {
                        address: command,
                        what: "command tag",
                    })?;
                    let header_bytes = size_of::<CommandHeader>();
                    let size = header.size as usize;
                    if !(header_bytes..=MAX_COMMAND_BYTES).contains(&size) {
                        return Err(FirmwareError::Malformed {
                            address: command,
                            what: "command size",
                        });
                    }
                    // One submission per pass: the next one waits for the
                    // other queues' turn.
                    if submission.is_some_and(|s| s != header.submission) {
                        return Ok(true);
                    }
                    submission = Some(header.submission);
                    let mut body = vec![0u8; size - header_bytes];
                    self.memory
                        .read(command.offset(header_bytes as u64), &mut body)?;
                    let stopped = self.account(init, header.submission).stopped;
                    let outcome = match tag {
                        // The watchdog stopped the submission: the rest of
                        // its work is not run (parameter-buffer set-up is
                        // the queue's, not the submission's, and still
                        // happens).
                        CommandTag::Barrier
                        | CommandTag::RunVertex
                        | CommandTag::RunFragment
                        | CommandTag::RunCompute
                            if stopped =>
                        {
                            EngineResult::Cancelled
                        }
                        CommandTag::Barrier => {
                            let body = BarrierBody::read_from_prefix(&body)
                                .map_err(|_| FirmwareError::Malformed {
                                    address: command,
                                    what: "barrier body",
                                })?
                                .0;
                            let key = (queue.info, info.gpu_read_index);
                            if agx_fwif::messages::stamp_reached(
                                self.stamp(init, body.wait_slot)?,
                                body.wait_value,
                            ) {
                                self.barrier_waits.remove(&key);
                                EngineResult::Done
                            } else {
                                let since =
                                    *self.barrier_waits.entry(key).or_insert_with(Instant::now);
                                if since.elapsed() < timeout {
                                    return Ok(false); // Not yet: the rest of this queue waits.
                                }
                                // The watchdog: a wait that never ends is stopped.
                                self.barrier_waits.remove(&key);
                                self.log(init, 1, &format!("barrier at {command:#x} timed out"));
                                EngineResult::Timeout
                            }
                        }
                        CommandTag::InitBuffer => {
                            let body = InitBufferBody::read_from_prefix(&body)
                                .map_err(|_| FirmwareError::Malformed {
                                    address: command,
                                    what: "InitBuffer body",
                                })?
                                .0;
                            tracing::debug!(blocks = body.block_count, "InitBuffer");
                            EngineResult::Done
                        }
                        CommandTag::RunVertex
                        | CommandTag::RunFragment
                        | CommandTag::RunCompute => {
                            // The pipe runs another queue's command: this
                            // queue waits for its turn.
                            if self.running.values().any(|run| run.pipe == queue.pipe) {
                                return Ok(false);
                            }
                            let flight = match self.suspended.remove(&queue.info) {
                                Some(flight)
                                    if flight.command == command
                                        && flight.read_index == info.gpu_read_index =>
                                {
                                    tracing::trace!(
                                        command = format_args!("{command:#x}"),
                                        "resumed"
                                    );
                                    flight.preemption.resume(flight.suspended_at);
                                    flight
                                }
                                stale => {
                                    // (A suspended command is always its
                                    // queue's head; one that is not is
                                    // dropped.)
                                    if let Some(stale) = stale {
                                        stale.preemption.abandon(stale.suspended_at);
                                    }
                                    let work = self
                                        .accounts
                                        .get(&header.submission)
                                        .ok_or(FirmwareError::Malformed {
                                            address: command,
                                            what: "submission",
                                        })?
                                        .work
                                        .clone();
                                    self.start(
                                        init, queue, tag, command, &header, body, work, timeout,
                                    )
                                }
                            };
                            self.running.insert(
                                queue.info,
                                Running {
                                    flight,
                                    header,
                                    tag,
                                    command,
                                    pipe: queue.pipe,
                                    since: Instant::now(),
                                },
                            );
                            // (It may have finished already: look again.)
                            continue;
                        }
                    };
                    (header, outcome)
                }
            };
            let slot = header.stamp_slot;
            self.stamp(init, slot)?;
            let mut event = EventMsg {
                slot,
                value: header.stamp_value,
                ..EventMsg::default()
            };
            match outcome {
                EngineResult::Done => event.kind = EventKind::Completion as u32,
                EngineResult::Timeout => {
                    let account = self.account(init, header.submission);
                    account.stopped = true;
                    event.kind = EventKind::Timeout as u32;
                    event.address = account.work.used_units();
                    // 1: host time ran out (the last resort), not work.
                    event.unit = u32::from(!account.work.exhausted());
                    event.vm_slot = queue.vm_slot;
                }
                EngineResult::Cancelled => {
                    event.kind = EventKind::Cancelled as u32;
                    event.vm_slot = queue.vm_slot;
                }
                EngineResult::Fault {
                    address,
                    unit,
                    access,
                    reason,
                } => {
                    event.kind = EventKind::Fault as u32;
                    event.address = address;
                    event.unit = unit;
                    event.access = access;
                    event.reason = reason;
                    event.vm_slot = queue.vm_slot;
                }
            }
            // A failure is reported before its stamp moves, so the kmd
            // never sees the command done without knowing it failed.
            let failed = event.kind != EventKind::Completion as u32;
            if failed {
                self.event(init, event)?;
            }
            // The submission's last command: its account goes.
            let account = self.account(init, header.submission);
            account.commands_seen = account.commands_seen.saturating_add(1);
            if header.submission_commands != 0
                && account.commands_seen >= header.submission_commands
            {
                self.accounts.remove(&header.submission);
            }
            self.write(init.stamps.offset(4 * u64::from(slot)), &header.stamp_value)?;
            info.gpu_read_index = (info.gpu_read_index + 1) % info.entries;
            info.gpu_done_index = info.gpu_read_index;
            // Only the firmware's own fields: the kmd may be advancing
            // cpu_write_index concurrently.
            self.write(queue.info.offset(WQ_GPU_READ_INDEX), &info.gpu_read_index)?;
            self.write(queue.info.offset(WQ_GPU_DONE_INDEX), &info.gpu_done_index)?;
            self.note_read_index(queue.info, info.gpu_read_index);
            if failed {
                self.interrupt.raise();
            } else {
                self.event(init, event)?;
            }
        }
        Ok(false)
    }

    /// Reports the end of a Run command that finished: its outcome, its
    /// end timestamp and its statistics; its thread goes back to the idle
    /// ones.
    fn finish_run(
        &mut self,
        init: &InitData,
        queue: &ActiveQueue,
        run: Running,
    ) -> Result<EngineResult, FirmwareError> {
        let Running {
            flight,
            header,
            tag,
            command,
            ..
        } = run;
        let outcome = flight
            .outcome
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let result = match outcome {
            Some(Outcome::Ran(result)) => result,
            Some(Outcome::Panicked(what)) => return Err(FirmwareError::Internal(what)),
            None => {
                return Err(FirmwareError::Internal(
                    "a command ended without an outcome".into(),
                ))
            }
        };
        if let Some(runner) = flight.runner {
            if self.runners.len() < IDLE_RUNNERS {
                self.runners.push(runner);
            }
        }
        let end_ns = monotonic_ns();
        if let Some(account) = self.accounts.get(&header.submission) {
            tracing::debug!(
                submission = header.submission,
                command = format_args!("{command:#x}"),
                used_units = account.work.used_units(),
                budget_units = account.work.budget_units(),
                ran_us = end_ns.saturating_sub(flight.start_ns) / 1000,
                suspended_ms = flight.preemption.suspended().as_millis() as u64,
                "{tag:?} ran"
            );
        }
        self.timestamp_at(init, header.timestamp_end, end_ns);
        let pipe_type = match tag {
            CommandTag::RunVertex => PipeType::Vertex,
            CommandTag::RunFragment => PipeType::Fragment,
            _ => PipeType::Compute,
        };
        // The GPU time the command used: time suspended, while other
        // contexts had the GPU, is not its.
        let suspended_ns =
            u64::try_from(flight.preemption.suspended().as_nanos()).unwrap_or(u64::MAX);
        let stats = StatsMsg {
            pipe_type: pipe_type as u32,
            vm_slot: queue.vm_slot,
            slot: header.stamp_slot,
            value: header.stamp_value,
            start_ns: flight.start_ns.saturating_add(suspended_ns).min(end_ns),
            end_ns,
        };
        // Best effort, like the log.
        if init.stats.entry_count != 0 {
            let _ = init.stats.push(&*self.memory, stats.as_bytes());
        }
        Ok(result)
    }

    /// Whether `run`, `queue`'s command running in the background, has
    /// had its turn: another queue of its pipe waits (with work or a
    /// suspended command), and it has run a time slice since it started
    /// or was resumed, or at least [`LEAST_RUN`] with new work arrived
    /// (the doorbell) since.
    fn turn_over(&self, queue: &ActiveQueue, run: &Running) -> bool {
        let ran = run.since.elapsed();
        if ran < LEAST_RUN {
            return false;
        }
        let waiting = self.queues.values().any(|q| {
            q.info != queue.info
                && q.pipe == queue.pipe
                && !self.running.contains_key(&q.info)
                && (q.read_index != q.limit || self.suspended.contains_key(&q.info))
        });
        waiting && (ran >= TIME_SLICE || self.doorbell_rang_at > run.since)
    }

    /// How long the firmware may sleep before it must look at its
    /// commands running in the background again: until the first of them
    /// may have had its turn (the doorbell and every command's end wake
    /// it sooner).
    fn next_look(&self) -> Duration {
        let now = Instant::now();
        let turns = self.running.values().map(|run| {
            let turn = if self.doorbell_rang_at > run.since {
                LEAST_RUN
            } else {
                TIME_SLICE
            };
            run.since + turn
        });
        // A suspended command waiting out a grace is resumed after it.
        let graces = self
            .suspended
            .keys()
            .filter_map(|info| self.queues.get(info))
            .filter(|q| self.in_grace(q.pipe))
            .filter_map(|q| self.pipe_done_at.get(&q.pipe).map(|&at| at + GRACE));
        turns
            .chain(graces)
            .map(|at| at.saturating_duration_since(now))
            .min()
            .map_or(TICK, |wait| wait.clamp(Duration::from_micros(200), TICK))
    }

    /// Whether a command of `pipe` ended less than [`GRACE`] ago.
    fn in_grace(&self, pipe: usize) -> bool {
        self.pipe_done_at
            .get(&pipe)
            .is_some_and(|at| at.elapsed() < GRACE)
    }

    /// Records where `queue`'s reading stands.
    fn note_read_index(&mut self, queue: FwVa, read_index: u32) {
        if let Some(queue) = self.queues.get_mut(&queue) {
            queue.read_index = read_index;
        }
    }

    /// Starts a Run command on a command thread (or, when the host gives
    /// none, runs it here and now).
    #[allow(clippy::too_many_arguments)]
    fn start(
        &mut self,
        init: &InitData,
        queue: &ActiveQueue,
        tag: CommandTag,
        command: FwVa,
        header: &CommandHeader,
        body: Vec<u8>,
        work: Arc<WorkAccount>,
        timeout: Duration,
    ) -> InFlight {
        let start_ns = monotonic_ns();
        self.timestamp_at(init, header.timestamp_start, start_ns);
        let preemption = Arc::new(Preemption::new());
        let outcome = Arc::new(Mutex::new(None));
        let job = Job {
            engine: Arc::clone(&self.engine),
            tag,
            command,
            body,
            vm_slot: queue.vm_slot,
            ttb0: self.context_root(init, queue.vm_slot),
            gpu_memory: Arc::clone(&self.gpu_memory),
            services: Services {
                memory: Arc::clone(&self.memory),
                interrupt: Arc::clone(&self.interrupt),
                init: *init,
                rings: Arc::clone(&self.rings),
                grow_acks: Arc::clone(&self.grow_acks),
            },
            deadline: Instant::now() + timeout,
            work,
            stop: Arc::clone(&self.stop),
            preemption: Arc::clone(&preemption),
            outcome: Arc::clone(&outcome),
            doorbell: Arc::clone(&self.doorbell),
        };
        let runner = self.runners.pop().or_else(Runner::spawn);
        let runner = match runner {
            Some(runner) => match runner.jobs.send(job) {
                Ok(()) => Some(runner),
                Err(mpsc::SendError(job)) => {
                    job.run();
                    None
                }
            },
            None => {
                self.log(
                    init,
                    1,
                    "no host thread for a command: it runs unsuspendable",
                );
                job.run();
                None
            }
        };
        InFlight {
            command,
            read_index: self
                .queues
                .get(&queue.info)
                .map_or(u32::MAX, |q| q.read_index),
            vm_slot: queue.vm_slot,
            preemption,
            outcome,
            runner,
            start_ns,
            suspended_at: Instant::now(),
        }
    }

    /// Drops the suspended commands `which` picks (their queue or
    /// context is gone, or the firmware stops): each stops at its next
    /// check, and nothing of its end is reported.
    fn abandon_suspended(&mut self, which: impl Fn((&FwVa, &InFlight)) -> bool) {
        let dropped: Vec<FwVa> = self
            .suspended
            .iter()
            .filter(|&entry| which(entry))
            .map(|(info, _)| *info)
            .collect();
        let stopped: Vec<FwVa> = self
            .running
            .iter()
            .filter(|&(info, run)| which((info, &run.flight)))
            .map(|(info, _)| *info)
            .collect();
        let flights = dropped
            .into_iter()
            .filter_map(|info| self.suspended.remove(&info))
            .map(|flight| (flight.suspended_at, flight))
            .chain(
                stopped
                    .into_iter()
                    .filter_map(|info| self.running.remove(&info))
                    .map(|run| (Instant::now(), run.flight)),
            )
            .collect::<Vec<_>>();
        for (since, flight) in flights {
            tracing::debug!(command = format_args!("{:#x}", flight.command), "abandoned");
            // A running command stops at its next check as a suspended
            // one does once resumed.
            flight.preemption.abandon(since);
            if let Some(runner) = flight.runner {
                if self.runners.len() < IDLE_RUNNERS {
                    self.runners.push(runner);
                }
            }
        }
    }
}
