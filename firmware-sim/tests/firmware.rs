//! The firmware thread against hand-built kmd structures in shared
//! memory: boot, barriers across queues, stamps and events, unsupported
//! work as faults, crashes on corrupt structures, and rings under load.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agx_firmware_sim::firmware::{Engine, EngineResult, Firmware, Interrupt, NoEngine, RunContext};
use agx_fwif::messages::{
    BarrierBody, CommandHeader, CommandTag, DeviceControlKind, DeviceControlMsg, EventKind,
    EventMsg, FirmwareStatus, InitBufferBody, InitData, LogMsg, RunWorkQueueMsg, WorkQueueInfo,
    FAULT_UNSUPPORTED_WORK, INIT_MAGIC, INTERFACE_VERSION,
};
use agx_fwif::ring::{MemoryError, RingDesc, RingState, SharedMemory};
use agx_hw::addr::{FwVa, PhysAddr};
use agx_hw::uat::{PhysFault, PhysicalMemory};
use zerocopy::{FromBytes, Immutable, IntoBytes};

const BASE: u64 = 0xFFFF_FFA0_0000_0000;

struct Flat(Mutex<Vec<u8>>);

impl SharedMemory for Flat {
    fn read(&self, address: FwVa, buf: &mut [u8]) -> Result<(), MemoryError> {
        let mem = self.0.lock().unwrap();
        let start = address
            .get()
            .checked_sub(BASE)
            .ok_or(MemoryError { address })? as usize;
        buf.copy_from_slice(
            mem.get(start..start + buf.len())
                .ok_or(MemoryError { address })?,
        );
        Ok(())
    }
    fn write(&self, address: FwVa, data: &[u8]) -> Result<(), MemoryError> {
        let mut mem = self.0.lock().unwrap();
        let start = address
            .get()
            .checked_sub(BASE)
            .ok_or(MemoryError { address })? as usize;
        mem.get_mut(start..start + data.len())
            .ok_or(MemoryError { address })?
            .copy_from_slice(data);
        Ok(())
    }
}

/// A GPU with no RAM: these tests run no GPU work that reads memory.
struct NoRam;

impl PhysicalMemory for NoRam {
    fn read(&self, pa: PhysAddr, _: &mut [u8]) -> Result<(), PhysFault> {
        Err(PhysFault { pa })
    }
    fn write(&self, pa: PhysAddr, _: &[u8]) -> Result<(), PhysFault> {
        Err(PhysFault { pa })
    }
}

#[derive(Default)]
struct Irq(AtomicUsize);

impl Interrupt for Irq {
    fn raise(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// The kmd's half, minimal: lays out the structures and talks through
/// the rings.
struct Kmd {
    memory: Arc<Flat>,
    next: u64,
    init: u64,
    init_data: InitData,
    /// Submissions numbered so far (one per command).
    submissions: u64,
}

impl Kmd {
    fn alloc(&mut self, bytes: u64) -> u64 {
        let address = self.next;
        self.next += bytes.next_multiple_of(64);
        address
    }

    fn put<T: IntoBytes + Immutable>(&self, address: u64, value: &T) {
        self.memory.write(FwVa(address), value.as_bytes()).unwrap();
    }

    fn get<T: FromBytes>(&self, address: u64) -> T {
        let mut buf = vec![0u8; size_of::<T>()];
        self.memory.read(FwVa(address), &mut buf).unwrap();
        T::read_from_bytes(&buf).unwrap()
    }

    fn ring(&mut self, entries: u32, entry_bytes: u32) -> RingDesc {
        let state = self.alloc(size_of::<RingState>() as u64);
        let base = self.alloc(u64::from(entries) * u64::from(entry_bytes));
        RingDesc {
            state: FwVa(state),
            entries: FwVa(base),
            entry_count: entries,
            entry_bytes,
        }
    }

    fn new(pipe_entries: u32, event_entries: u32) -> Kmd {
        let memory = Arc::new(Flat(Mutex::new(vec![0; 4 << 20])));
        let mut kmd = Kmd {
            memory,
            next: BASE,
            init: 0,
            init_data: InitData::default(),
            submissions: 0,
        };
        let init = kmd.alloc(size_of::<InitData>() as u64);
        let mut data = InitData {
            magic: INIT_MAGIC,
            version: INTERFACE_VERSION,
            command_timeout_ms: 1000,
            work_budget_units: 1 << 40,
            device_control: kmd.ring(16, 64),
            events: kmd.ring(event_entries, 64),
            log: kmd.ring(16, 128),
            stamps: FwVa(0),
            status: FwVa(0),
            ..InitData::default()
        };
        for pipe in data.pipes.iter_mut() {
            *pipe = kmd.ring(pipe_entries, 32);
        }
        data.stamps = FwVa(kmd.alloc(128 * 4));
        data.status = FwVa(kmd.alloc(16));
        kmd.put(init, &data);
        kmd.init = init;
        kmd.init_data = data;
        kmd
    }

    fn work_queue(&mut self, entries: u32) -> u64 {
        let ring = self.alloc(u64::from(entries) * 8);
        let info = self.alloc(size_of::<WorkQueueInfo>() as u64);
        self.put(
            info,
            &WorkQueueInfo {
                ring: FwVa(ring),
                entries,
                ..WorkQueueInfo::default()
            },
        );
        info
    }

    /// A command object, of a submission of its own.
    fn command(&mut self, tag: CommandTag, slot: u32, value: u32, body: &[u8]) -> u64 {
        let header_bytes = size_of::<CommandHeader>() as u64;
        let address = self.alloc(header_bytes + body.len() as u64);
        self.submissions += 1;
        let header = CommandHeader {
            tag: tag as u32,
            size: (header_bytes + body.len() as u64) as u32,
            stamp_slot: slot,
            stamp_value: value,
            submission: self.submissions,
            ..CommandHeader::default()
        };
        self.put(address, &header);
        self.memory
            .write(FwVa(address + header_bytes), body)
            .unwrap();
        address
    }

    /// Appends a command to a work queue and tells the firmware; false if
    /// the submission ring is full.
    fn submit(
        &self,
        firmware: &Firmware,
        queue: u64,
        command: u64,
        pipe: usize,
        vm_slot: u32,
    ) -> bool {
        let mut info: WorkQueueInfo = self.get(queue);
        let msg_write = (info.cpu_write_index + 1) % info.entries;
        let msg = RunWorkQueueMsg {
            pipe_type: 0,
            event_slot: 0,
            work_queue: FwVa(queue),
            write_index: msg_write,
            is_new: 0,
            vm_slot,
            pad: 0,
        };
        // Reserve the submission slot first, then publish the command.
        let ring = &self.init_data.pipes[pipe];
        let state: RingState = self.get(ring.state.get());
        if (state.write_index + 1) % ring.entry_count == state.read_index {
            return false;
        }
        self.memory
            .write(
                info.ring.offset(8 * u64::from(info.cpu_write_index)),
                &command.to_le_bytes(),
            )
            .unwrap();
        info.cpu_write_index = msg_write;
        self.memory
            .write(FwVa(queue + 16), &info.cpu_write_index.to_le_bytes())
            .unwrap();
        ring.push(&*self.memory, msg.as_bytes()).unwrap();
        firmware.doorbell().ring();
        true
    }

    fn events(&self) -> Vec<EventMsg> {
        let mut out = Vec::new();
        while let Some(bytes) = self.init_data.events.pop(&*self.memory).unwrap() {
            out.push(EventMsg::read_from_bytes(&bytes).unwrap());
        }
        out
    }

    fn stamp(&self, slot: u32) -> u32 {
        self.get(self.init_data.stamps.get() + 4 * u64::from(slot))
    }

    /// Boots and waits until the firmware says it has.
    fn boot_and_wait(&self) -> (Firmware, Arc<Irq>) {
        let booted = self.boot();
        until("boot", || {
            self.get::<FirmwareStatus>(self.init_data.status.get())
                .booted
                == 1
        });
        booted
    }

    fn boot(&self) -> (Firmware, Arc<Irq>) {
        let irq = Arc::new(Irq::default());
        let fw = Firmware::boot(
            FwVa(self.init),
            self.memory.clone(),
            Arc::new(NoRam),
            irq.clone(),
            Box::new(NoEngine),
        );
        (fw, irq)
    }
}

fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test_log::test]
fn boots_and_runs_barriers_across_queues() {
    let mut kmd = Kmd::new(8, 64);
    let (firmware, irq) = kmd.boot();
    until("boot", || {
        kmd.get::<FirmwareStatus>(kmd.init_data.status.get()).booted == 1
    });
    let line =
        LogMsg::read_from_bytes(&kmd.init_data.log.pop(&*kmd.memory).unwrap().unwrap()).unwrap();
    assert_eq!(line.text(), "firmware booted");

    // Queue A waits for slot 1 to reach 0x100, then stamps slot 0.
    let (a, b) = (kmd.work_queue(16), kmd.work_queue(16));
    let wait = kmd.command(
        CommandTag::Barrier,
        0,
        0x100,
        BarrierBody {
            wait_slot: 1,
            wait_value: 0x100,
        }
        .as_bytes(),
    );
    assert!(kmd.submit(&firmware, a, wait, 0, 3));
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(kmd.stamp(0), 0, "the barrier holds");
    assert!(kmd.events().is_empty());
    // Queue B's InitBuffer stamps slot 1, which releases A.
    let init_buffer = kmd.command(
        CommandTag::InitBuffer,
        1,
        0x100,
        InitBufferBody {
            buffer: FwVa(0),
            block_list: FwVa(0),
            block_count: 8,
            pad: 0,
        }
        .as_bytes(),
    );
    assert!(kmd.submit(&firmware, b, init_buffer, 4, 3));
    until("both stamps", || {
        kmd.stamp(0) == 0x100 && kmd.stamp(1) == 0x100
    });
    let events = kmd.events();
    assert_eq!(events.len(), 2);
    assert!(events
        .iter()
        .all(|e| e.kind == EventKind::Completion as u32));
    assert_eq!(
        (events[0].slot, events[1].slot),
        (1, 0),
        "B completes before A"
    );
    assert!(irq.0.load(Ordering::Relaxed) >= 3);

    // Work the engine cannot run is a fault event carrying the VM slot.
    let run = kmd.command(CommandTag::RunVertex, 2, 0x100, &[0; 16]);
    assert!(kmd.submit(&firmware, a, run, 0, 3));
    until("fault", || kmd.stamp(2) == 0x100);
    let events = kmd.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, EventKind::Fault as u32);
    assert_eq!(
        (events[0].reason, events[0].vm_slot, events[0].address),
        (FAULT_UNSUPPORTED_WORK, 3, run)
    );
    drop(firmware);
}

#[test_log::test]
fn corrupt_structures_crash_the_firmware_not_the_process() {
    let mut kmd = Kmd::new(8, 64);
    let (firmware, _irq) = kmd.boot_and_wait();
    let queue = kmd.work_queue(16);
    let bogus = kmd.command(CommandTag::Barrier, 0, 0x100, &[0; 8]);
    kmd.memory.write(FwVa(bogus), &77u32.to_le_bytes()).unwrap(); // unknown tag
    assert!(kmd.submit(&firmware, queue, bogus, 0, 1));
    until("crash", || {
        kmd.get::<FirmwareStatus>(kmd.init_data.status.get())
            .crashed
            == 1
    });
    let events = kmd.events();
    assert_eq!(events.last().map(|e| e.kind), Some(EventKind::Crash as u32));
    // A firmware with a bad init block crashes at boot.
    let mut broken = Kmd::new(8, 8);
    broken
        .memory
        .write(FwVa(broken.init), &0u64.to_le_bytes())
        .unwrap();
    let (_fw, _irq) = broken.boot();
    until("boot crash", || {
        broken
            .get::<FirmwareStatus>(broken.init_data.status.get())
            .crashed
            == 1
    });
    let _ = &mut broken;
    drop(firmware);
}

#[test_log::test]
fn many_queues_under_load_wrap_every_ring() {
    // Tiny rings: 4 submission slots, 8 event slots, 16-entry work queues.
    let mut kmd = Kmd::new(4, 8);
    let (firmware, _irq) = kmd.boot_and_wait();
    let queues: Vec<u64> = (0..3).map(|_| kmd.work_queue(16)).collect();
    let per_queue = 300u32;
    let mut commands = Vec::new();
    for (q, _) in queues.iter().enumerate() {
        for n in 1..=per_queue {
            commands.push((
                q,
                kmd.command(CommandTag::InitBuffer, q as u32, n * 0x100, &[0; 24]),
            ));
        }
    }
    let mut completions = 0usize;
    let mut pending = commands.into_iter().peekable();
    let deadline = Instant::now() + Duration::from_secs(30);
    while pending.peek().is_some() || completions < 3 * per_queue as usize {
        assert!(
            Instant::now() < deadline,
            "load test stalled at {completions} completions"
        );
        if let Some(&(q, command)) = pending.peek() {
            // Keep each work queue from overrunning the firmware.
            let info: WorkQueueInfo = kmd.get(queues[q]);
            let in_flight =
                (info.cpu_write_index + info.entries - info.gpu_read_index) % info.entries;
            if in_flight < info.entries - 1 && kmd.submit(&firmware, queues[q], command, q * 4, 0) {
                pending.next();
            }
        }
        completions += kmd
            .events()
            .iter()
            .filter(|e| e.kind == EventKind::Completion as u32)
            .count();
    }
    for q in 0..3 {
        assert_eq!(kmd.stamp(q), per_queue * 0x100);
    }
    drop(firmware);
}

#[test_log::test]
fn the_watchdog_stops_a_barrier_that_never_releases_and_stamps_are_timed() {
    let mut kmd = Kmd::new(8, 64);
    // 1000 ms watchdog (Kmd::new).
    let (firmware, _irq) = kmd.boot_and_wait();
    let queue = kmd.work_queue(16);
    let stuck = kmd.command(
        CommandTag::Barrier,
        5,
        0x100,
        BarrierBody {
            wait_slot: 6,
            wait_value: 0x100,
        }
        .as_bytes(),
    );
    // A Run command with both timestamps, queued behind the barrier.
    let timestamps = kmd.alloc(16);
    let run = kmd.command(CommandTag::RunCompute, 5, 0x200, &[0; 16]);
    kmd.put(run + 16, &timestamps);
    kmd.put(run + 24, &(timestamps + 8));
    let started = Instant::now();
    assert!(kmd.submit(&firmware, queue, stuck, 8, 1));
    assert!(kmd.submit(&firmware, queue, run, 8, 1));
    until("the watchdog", || kmd.stamp(5) == 0x200);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1000) && waited < Duration::from_secs(5),
        "stopped after {waited:?}"
    );
    let events = kmd.events();
    assert_eq!(events[0].kind, EventKind::Timeout as u32);
    assert_eq!((events[0].slot, events[0].value), (5, 0x100));
    assert_eq!(
        events[1].kind,
        EventKind::Fault as u32,
        "the next command still runs"
    );
    let start_ns: u64 = kmd.get(timestamps);
    let end_ns: u64 = kmd.get(timestamps + 8);
    let now_ns = agx_firmware_sim::firmware::monotonic_ns();
    assert!(
        start_ns > 0 && start_ns <= end_ns && end_ns <= now_ns,
        "{start_ns} {end_ns} {now_ns}"
    );
}

/// An engine that, like the tiler with an exhausted parameter buffer,
/// asks for more blocks mid-command and records the answer.
struct GrowingEngine(Arc<Mutex<Vec<Option<u64>>>>);

impl Engine for GrowingEngine {
    fn run(&self, _: CommandTag, ctx: &RunContext<'_>) -> EngineResult {
        let answer = ctx.services.grow_tvb(7, 10);
        self.0.lock().unwrap().push(answer);
        EngineResult::Done
    }
}

#[test_log::test]
fn a_mid_render_grow_request_waits_for_the_kmds_answer() {
    let mut kmd = Kmd::new(8, 64);
    let answers = Arc::new(Mutex::new(Vec::new()));
    let irq = Arc::new(Irq::default());
    let firmware = Firmware::boot(
        FwVa(kmd.init),
        kmd.memory.clone(),
        Arc::new(NoRam),
        irq,
        Box::new(GrowingEngine(Arc::clone(&answers))),
    );
    until("boot", || {
        kmd.get::<FirmwareStatus>(kmd.init_data.status.get()).booted == 1
    });
    let queue = kmd.work_queue(16);
    let ack = |blocks: u64| DeviceControlMsg {
        kind: DeviceControlKind::GrowTvbAck as u32,
        pad: 0,
        args: [7, blocks, 0, 0, 0, 0, 0],
    };
    for (n, answer) in [Some(18u64), Some(0), None].into_iter().enumerate() {
        let run = kmd.command(CommandTag::RunVertex, 4, (n as u32 + 1) * 0x100, &[0; 16]);
        assert!(kmd.submit(&firmware, queue, run, 0, 1));
        let mut request = None;
        until("the GrowTVB event", || {
            request = kmd
                .events()
                .into_iter()
                .find(|e| e.kind == EventKind::GrowTvb as u32);
            request.is_some()
        });
        let request = request.unwrap();
        assert_eq!((request.unit, request.address), (7, 10));
        assert_eq!(kmd.stamp(4), n as u32 * 0x100, "the command waits");
        if let Some(blocks) = answer {
            // An unrelated request first: the firmware applies it, and
            // says so, while the command still waits for its answer
            // (control requests are applied in the order they came).
            let other = DeviceControlMsg {
                kind: DeviceControlKind::DestroyContext as u32,
                pad: 0,
                args: [9, 0, 0, 0, 0, 0, 0],
            };
            let control = &kmd.init_data.device_control;
            control.push(&*kmd.memory, other.as_bytes()).unwrap();
            firmware.doorbell().ring();
            // (Counted: the requests; the answers to grow requests are
            // not, as the kmd numbers only its requests.)
            let controls = n as u32 + 1;
            until("the unrelated request applied", || {
                kmd.get::<FirmwareStatus>(kmd.init_data.status.get())
                    .controls_done
                    == controls
            });
            assert_eq!(kmd.stamp(4), n as u32 * 0x100, "the command still waits");
            control.push(&*kmd.memory, ack(blocks).as_bytes()).unwrap();
            firmware.doorbell().ring();
        }
        until("the command", || kmd.stamp(4) == (n as u32 + 1) * 0x100);
    }
    assert_eq!(
        *answers.lock().unwrap(),
        [Some(18), None, None],
        "granted, refused, unanswered (after the 1 s timeout)"
    );
    // Two requests were applied; the two answers are not counted with
    // them (a kmd waiting for its third request would otherwise free
    // what that request concerns before the firmware had read it).
    assert_eq!(
        kmd.get::<FirmwareStatus>(kmd.init_data.status.get())
            .controls_done,
        2
    );
    drop(firmware);
}

/// An engine whose compute command waits (without a check point, so it
/// cannot be suspended) until a vertex command has run: the two meet
/// only if the pipes run side by side.
struct RendezvousEngine(Arc<std::sync::atomic::AtomicBool>);

impl Engine for RendezvousEngine {
    fn run(&self, tag: CommandTag, _: &RunContext<'_>) -> EngineResult {
        use std::sync::atomic::Ordering;
        match tag {
            CommandTag::RunVertex => {
                self.0.store(true, Ordering::Release);
                EngineResult::Done
            }
            _ => {
                let deadline = Instant::now() + Duration::from_secs(20);
                while !self.0.load(Ordering::Acquire) {
                    if Instant::now() >= deadline {
                        return EngineResult::Timeout;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                EngineResult::Done
            }
        }
    }
}

#[test_log::test]
fn the_pipes_run_side_by_side() {
    let mut kmd = Kmd::new(8, 64);
    let met = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let firmware = Firmware::boot(
        FwVa(kmd.init),
        kmd.memory.clone(),
        Arc::new(NoRam),
        Arc::new(Irq::default()),
        Box::new(RendezvousEngine(Arc::clone(&met))),
    );
    until("boot", || {
        kmd.get::<FirmwareStatus>(kmd.init_data.status.get()).booted == 1
    });
    // The compute command first (compute pipe: ring 8), then the vertex
    // command it waits for on another queue (vertex pipe: ring 0).
    let (compute, vertex) = (kmd.work_queue(16), kmd.work_queue(16));
    let wait = kmd.command(CommandTag::RunCompute, 1, 0x100, &[0; 16]);
    assert!(kmd.submit(&firmware, compute, wait, 8, 1));
    std::thread::sleep(Duration::from_millis(20));
    let meet = kmd.command(CommandTag::RunVertex, 2, 0x100, &[0; 16]);
    assert!(kmd.submit(&firmware, vertex, meet, 0, 2));
    until("both commands", || {
        kmd.stamp(1) == 0x100 && kmd.stamp(2) == 0x100
    });
    let kinds: Vec<u32> = kmd.events().iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [EventKind::Completion as u32; 2],
        "the vertex command ran while the compute command waited for it"
    );
    drop(firmware);
}

#[test_log::test]
fn higher_priority_queues_run_first() {
    let mut kmd = Kmd::new(8, 64);
    let (firmware, _irq) = kmd.boot_and_wait();
    // Both queues wait on slot 9, then do one InitBuffer each: low
    // priority (pipe 3) submitted first, high priority (pipe 0) second.
    let gate = BarrierBody {
        wait_slot: 9,
        wait_value: 0x100,
    };
    let init_buffer = [0u8; 24];
    let (low, high) = (kmd.work_queue(16), kmd.work_queue(16));
    for (queue, slot, pipe) in [(low, 1u32, 3usize), (high, 2, 0)] {
        let wait = kmd.command(CommandTag::Barrier, slot, 0x100, gate.as_bytes());
        let work = kmd.command(CommandTag::InitBuffer, slot, 0x200, &init_buffer);
        assert!(kmd.submit(&firmware, queue, wait, pipe, 0));
        assert!(kmd.submit(&firmware, queue, work, pipe, 0));
    }
    std::thread::sleep(Duration::from_millis(20));
    assert!(kmd.events().is_empty(), "both held by the gate");
    kmd.put(kmd.init_data.stamps.get() + 4 * 9, &0x100u32);
    firmware.doorbell().ring();
    until("both queues", || {
        kmd.stamp(1) == 0x200 && kmd.stamp(2) == 0x200
    });
    let order: Vec<u32> = kmd.events().iter().map(|e| e.slot).collect();
    assert_eq!(order, [2, 2, 1, 1], "the high-priority queue ran first");
}

/// A GPU model with a bug.
struct PanickingEngine;

impl Engine for PanickingEngine {
    fn run(&self, _: CommandTag, _: &RunContext<'_>) -> EngineResult {
        panic!("model bug");
    }
}

#[test_log::test]
fn a_panic_in_the_gpu_model_is_a_reported_firmware_crash() {
    let mut kmd = Kmd::new(8, 64);
    let irq = Arc::new(Irq::default());
    let firmware = Firmware::boot(
        FwVa(kmd.init),
        kmd.memory.clone(),
        Arc::new(NoRam),
        irq,
        Box::new(PanickingEngine),
    );
    until("boot", || {
        kmd.get::<FirmwareStatus>(kmd.init_data.status.get()).booted == 1
    });
    let queue = kmd.work_queue(16);
    let run = kmd.command(CommandTag::RunCompute, 0, 0x100, &[0; 16]);
    assert!(kmd.submit(&firmware, queue, run, 8, 1));
    until("the crash", || {
        kmd.get::<FirmwareStatus>(kmd.init_data.status.get())
            .crashed
            == 1
    });
    let events = kmd.events();
    assert_eq!(events.last().map(|e| e.kind), Some(EventKind::Crash as u32));
    drop(firmware);
}

#[test_log::test]
fn a_queue_runs_only_as_far_as_its_latest_message_says() {
    let mut kmd = Kmd::new(8, 64);
    let (firmware, _irq) = kmd.boot_and_wait();
    let queue = kmd.work_queue(16);
    let first = kmd.command(CommandTag::InitBuffer, 3, 0x100, &[0; 24]);
    let second = kmd.command(CommandTag::InitBuffer, 3, 0x200, &[0; 24]);
    assert!(kmd.submit(&firmware, queue, first, 0, 1));
    until("the first command", || kmd.stamp(3) == 0x100);
    // The second command is in the ring and cpu_write_index covers it,
    // but no message announced it (the kmd has not picked its VM slot).
    let info: WorkQueueInfo = kmd.get(queue);
    kmd.put(info.ring.get() + 8, &second);
    kmd.put(queue + 16, &2u32);
    firmware.doorbell().ring();
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(kmd.stamp(3), 0x100, "not run without its message");
    let msg = RunWorkQueueMsg {
        work_queue: FwVa(queue),
        write_index: 2,
        vm_slot: 2,
        ..RunWorkQueueMsg::default()
    };
    kmd.init_data.pipes[0]
        .push(&*kmd.memory, msg.as_bytes())
        .unwrap();
    firmware.doorbell().ring();
    until("the second command", || kmd.stamp(3) == 0x200);
}

#[test_log::test]
fn a_cancelled_queue_is_never_read_again_once_acknowledged() {
    let mut kmd = Kmd::new(8, 64);
    let (firmware, _irq) = kmd.boot_and_wait();
    let queue = kmd.work_queue(16);
    let first = kmd.command(CommandTag::InitBuffer, 3, 0x100, &[0; 24]);
    assert!(kmd.submit(&firmware, queue, first, 0, 1));
    until("the command", || kmd.stamp(3) == 0x100);
    let cancel = DeviceControlMsg {
        kind: DeviceControlKind::CancelWorkQueue as u32,
        pad: 0,
        args: [queue, 0, 0, 0, 0, 0, 0],
    };
    kmd.init_data
        .device_control
        .push(&*kmd.memory, cancel.as_bytes())
        .unwrap();
    firmware.doorbell().ring();
    until("the acknowledgement", || {
        kmd.get::<FirmwareStatus>(kmd.init_data.status.get())
            .controls_done
            == 1
    });
    // The queue's memory is garbage now: the firmware must not notice.
    kmd.put(queue, &[0xFFu8; 32]);
    firmware.doorbell().ring();
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(
        kmd.get::<FirmwareStatus>(kmd.init_data.status.get())
            .crashed,
        0
    );
}
