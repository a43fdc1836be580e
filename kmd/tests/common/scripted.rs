//! A scripted firmware: it boots as the real one does (status block, a
//! log line, an interrupt) and then does only what the test tells it,
//! through the same shared memory, event ring and interrupt. It stands in
//! for the GPU model where a test is about the kmd alone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agx_fwif::coprocessor::{BootParams, Coprocessor, Interrupt, RunningFirmware};
use agx_fwif::messages::{EventMsg, FirmwareStatus, InitData, LogMsg};
use agx_fwif::ring::SharedMemory;
use agx_fwif::view::FirmwareView;
use agx_kmd::mem::Ram;
use agx_kmd::{Device, DeviceConfig};
use zerocopy::{FromBytes, IntoBytes};

/// What the firmware was booted with, and what it has seen.
pub struct Booted {
    pub view: FirmwareView,
    pub init: InitData,
    pub interrupt: Arc<dyn Interrupt>,
    pub doorbells: AtomicU64,
}

impl Booted {
    /// Posts `event` on the event ring and raises the interrupt.
    pub fn post(&self, event: EventMsg) {
        self.init
            .events
            .push(&self.view, event.as_bytes())
            .expect("event ring");
        self.interrupt.raise();
    }

    /// The status block as the firmware last wrote it.
    pub fn status(&self) -> FirmwareStatus {
        let mut bytes = [0u8; size_of::<FirmwareStatus>()];
        self.view
            .read(self.init.status, &mut bytes)
            .expect("status");
        FirmwareStatus::read_from_bytes(&bytes).expect("status")
    }
}

/// The coprocessor; keeps a handle on the firmware it booted.
pub struct ScriptedCoprocessor {
    memory: Ram,
    booted: Mutex<Option<Arc<Booted>>>,
}

impl std::fmt::Debug for ScriptedCoprocessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScriptedCoprocessor")
    }
}

impl ScriptedCoprocessor {
    pub fn new(memory: Ram) -> ScriptedCoprocessor {
        ScriptedCoprocessor {
            memory,
            booted: Mutex::new(None),
        }
    }

    /// The booted firmware.
    pub fn booted(&self) -> Arc<Booted> {
        self.booted.lock().unwrap().clone().expect("booted")
    }
}

#[derive(Debug)]
struct Running(Arc<Booted>);

impl std::fmt::Debug for Booted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Booted")
    }
}

impl RunningFirmware for Running {
    /// Counts the ring and applies every device-control message at once
    /// (the work queues it names are forgotten: there is nothing to stop),
    /// publishing `controls_done` as the real firmware does.
    fn ring_doorbell(&self) {
        let booted = &self.0;
        booted.doorbells.fetch_add(1, Ordering::Relaxed);
        let mut applied = 0;
        while let Ok(Some(_)) = booted.init.device_control.pop(&booted.view) {
            applied += 1;
        }
        if applied > 0 {
            let mut status = booted.status();
            status.controls_done = status.controls_done.wrapping_add(applied);
            booted
                .view
                .write(booted.init.status, status.as_bytes())
                .expect("status");
            booted.interrupt.raise();
        }
    }

    fn shutdown(&self) {}
}

impl Coprocessor for ScriptedCoprocessor {
    fn boot(&self, params: BootParams) -> Box<dyn RunningFirmware> {
        let view = FirmwareView::new(Arc::new(self.memory.clone()), params.ttb1);
        let mut bytes = [0u8; size_of::<InitData>()];
        view.read(params.init, &mut bytes).expect("init block");
        let init = InitData::read_from_bytes(&bytes).expect("init block");
        let status = FirmwareStatus {
            booted: 1,
            ..FirmwareStatus::default()
        };
        view.write(init.status, status.as_bytes()).expect("status");
        let line = LogMsg::new(0, "scripted firmware booted");
        init.log.push(&view, line.as_bytes()).expect("log ring");
        params.interrupt.raise();
        let booted = Arc::new(Booted {
            view,
            init,
            interrupt: params.interrupt,
            doorbells: AtomicU64::new(0),
        });
        *self.booted.lock().unwrap() = Some(Arc::clone(&booted));
        Box::new(Running(booted))
    }
}

/// A device on `ram_bytes` of RAM with a scripted firmware, and the
/// coprocessor to script it through.
pub fn boot(ram_bytes: u64, config: DeviceConfig) -> (Arc<Device>, Arc<ScriptedCoprocessor>) {
    let ram = Ram::new(ram_bytes).expect("RAM");
    let coprocessor = Arc::new(ScriptedCoprocessor::new(ram.clone()));
    let device = Device::new(ram, config, &*coprocessor).expect("device");
    (device, coprocessor)
}
