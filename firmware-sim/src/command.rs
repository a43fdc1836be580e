//! A Run command as a unit receives it: the command's context (its VM
//! slot and page tables, its body, the memory views) and the firmware's
//! watchdog.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use agx_fwif::messages::{FaultUnit, Helper};
use agx_fwif::ring::SharedMemory;
use agx_hw::addr::PhysAddr;
use agx_hw::uat::PhysicalMemory;

use zerocopy::FromBytes;

use crate::fault::{unsupported, EngineResult};
use crate::memory::GpuVm;

/// What the firmware offers the GPU while a command runs.
pub trait FirmwareServices {
    /// The parameter buffer `buffer_id` ran dry mid-render: asks the kmd
    /// for `blocks_wanted` more blocks (a GrowTVB event) and waits for its
    /// answer. Returns the buffer's new block count, or `None` when the
    /// kmd refused or did not answer in time (the caller then does a
    /// partial render).
    fn grow_tvb(&self, buffer_id: u32, blocks_wanted: u64) -> Option<u64>;
}

/// Everything a command runs with.
pub struct RunContext<'a> {
    /// The command object's (firmware) address.
    pub command: u64,
    /// The command's body (the bytes after its header).
    pub body: &'a [u8],
    /// The command's VM context slot.
    pub vm_slot: u32,
    /// The root of that context's user page tables (`None`: the slot has
    /// no valid table).
    pub ttb0: Option<PhysAddr>,
    /// Physical memory, as the GPU's fabric sees it.
    pub memory: &'a (dyn PhysicalMemory + Sync),
    /// Memory as the firmware sees it.
    pub firmware: &'a (dyn SharedMemory + Sync),
    /// When the firmware's watchdog stops the command.
    pub deadline: Instant,
    /// The firmware's services.
    pub services: &'a dyn FirmwareServices,
    /// Set when the firmware shuts down: long work stops early.
    pub stop: &'a AtomicBool,
}

impl<'a> RunContext<'a> {
    /// The command's GPU context with its user half rooted at `root`.
    pub fn vm(&self, root: PhysAddr) -> GpuVm<'a> {
        GpuVm::with_kernel(self.memory, root, self.firmware)
    }
}

/// Control-stream blocks a data master walks between watchdog checks.
pub const WATCHDOG_STRIDE: u64 = 4096;

/// The firmware's watchdog over a command: its deadline, and the
/// firmware's shutdown flag.
#[derive(Debug, Clone, Copy)]
pub struct Watchdog<'a> {
    /// When the command is stopped.
    pub deadline: Instant,
    /// Set when the firmware shuts down.
    pub stop: &'a AtomicBool,
}

impl Watchdog<'_> {
    /// Whether the command must stop now.
    pub fn expired(&self) -> bool {
        Instant::now() >= self.deadline || self.stop.load(Ordering::Relaxed)
    }
}

impl<'a> RunContext<'a> {
    /// The command's watchdog.
    pub fn watchdog(&self) -> Watchdog<'a> {
        Watchdog {
            deadline: self.deadline,
            stop: self.stop,
        }
    }
}

/// A command body from the command object, or a firmware fault at the
/// command for one too short to hold it.
pub(crate) fn command_body<T: FromBytes>(ctx: &RunContext<'_>) -> Result<T, EngineResult> {
    T::read_from_prefix(ctx.body)
        .map(|(b, _)| b)
        .map_err(|_| unsupported(ctx.command, FaultUnit::Firmware))
}

/// Helper programs (scratch memory set-up) are not modelled: a stage
/// that names one is refused rather than run without it.
pub(crate) fn refuse_helper(helper: &Helper, usc_exec_base: u64) -> Result<(), EngineResult> {
    if helper.program == 0 {
        return Ok(());
    }
    Err(unsupported(
        usc_exec_base.wrapping_add(u64::from(helper.program & !3)),
        FaultUnit::Firmware,
    ))
}
