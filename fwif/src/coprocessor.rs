//! The GPU's coprocessor as the kmd drives it: boot it on an init block,
//! ring its doorbell, take its interrupt.
//!
//! On an M1 the firmware runs on an ARM coprocessor beside the GPU. The
//! kernel prepares its address space (the `ttb1` page tables) and the
//! [`InitData`](crate::messages::InitData) block, starts it, and from then
//! on talks to it only through shared memory, a mailbox doorbell and an
//! interrupt. This module is that contract and nothing more: the kmd is
//! written against [`Coprocessor`] and [`RunningFirmware`], and whatever
//! implements them (the simulated firmware and GPU, or a scripted firmware
//! in a kmd test) sits behind it.

use std::sync::Arc;

use agx_hw::addr::{FwVa, PhysAddr};

/// The firmware -> kmd interrupt ("poll the event ring").
pub trait Interrupt: Send + Sync {
    /// Raises it.
    fn raise(&self);
}

/// What the kmd hands the coprocessor at boot.
#[derive(Clone)]
pub struct BootParams {
    /// The init block, in the firmware's range.
    pub init: FwVa,
    /// The root of the firmware's page tables (`ttb1`), through which it
    /// reads the init block and everything that block points at.
    pub ttb1: PhysAddr,
    /// Raised whenever the firmware has posted events.
    pub interrupt: Arc<dyn Interrupt>,
}

impl std::fmt::Debug for BootParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootParams")
            .field("init", &self.init)
            .field("ttb1", &self.ttb1)
            .finish_non_exhaustive()
    }
}

/// A GPU coprocessor that can be booted.
pub trait Coprocessor: Send + Sync + std::fmt::Debug {
    /// Starts the firmware on `params`. It reports through shared memory
    /// (its status block, log and event rings) whether it booted.
    fn boot(&self, params: BootParams) -> Box<dyn RunningFirmware>;
}

/// A booted firmware.
pub trait RunningFirmware: Send + Sync + std::fmt::Debug {
    /// Rings the doorbell: there is new work or a control message.
    fn ring_doorbell(&self);
    /// Stops it (the device is going away); it touches no memory
    /// afterwards. Idempotent.
    fn shutdown(&self);
}
