//! A Run command as a unit receives it: the command's context (its VM
//! slot and page tables, its body, the memory views) and the firmware's
//! watchdog.
//!
//! The watchdog bounds a whole submission by the GPU work it does, not by
//! host time, so whether work finishes does not depend on how loaded the
//! host is: every unit charges a [`WorkAccount`] shared by all commands of
//! the submission (one work unit per SIMD-group instruction, per sample of
//! a tile the fragment unit sets up and writes back, per vertex the tiler
//! assembles and per control-stream block walked), and the command that
//! exhausts it is stopped. Host time remains as a generous last resort.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use agx_fwif::messages::FaultUnit;
use agx_fwif::ring::SharedMemory;
use agx_hw::addr::PhysAddr;
use agx_hw::uat::PhysicalMemory;

use zerocopy::FromBytes;

use crate::fault::{unsupported, EngineResult};
use crate::memory::GpuVm;
use crate::preempt::Preemption;
use crate::probe::ShaderProbe;

/// What the firmware offers the GPU while a command runs.
pub trait FirmwareServices {
    /// The parameter buffer `buffer_id` ran dry mid-render: asks the kmd
    /// for `blocks_wanted` more blocks (a GrowTVB event) and waits for its
    /// answer. Returns the buffer's new block count, or `None` when the
    /// kmd refused or did not answer in time (the caller then does a
    /// partial render). Commands call it through
    /// [`RunContext::grow_tvb`].
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
    /// When the firmware's watchdog stops the command (host time, the
    /// last resort).
    pub deadline: Instant,
    /// The work the command's submission has done, and may do.
    pub work: &'a WorkAccount,
    /// The firmware's services.
    pub services: &'a dyn FirmwareServices,
    /// Set when the firmware shuts down: long work stops early.
    pub stop: &'a AtomicBool,
    /// How the firmware suspends the command to run other work.
    pub preemption: &'a Preemption,
    /// Where the command's programs' compiled blocks live (`None`: the
    /// interpreter runs them).
    pub shader_code: Option<std::sync::Arc<agx_jit::CodeCache>>,
    /// The debugger's probe, if the machine has one.
    pub probe: Option<&'a dyn ShaderProbe>,
}

impl<'a> RunContext<'a> {
    /// Asks the kmd for `blocks_wanted` more blocks of parameter buffer
    /// `buffer_id` ([`FirmwareServices::grow_tvb`]) with the calling
    /// thread counted out of the command while it waits: the answer comes
    /// through the firmware thread, which may be suspending this command
    /// meanwhile ([`Preemption::waiting`]).
    pub fn grow_tvb(&self, buffer_id: u32, blocks_wanted: u64) -> Option<u64> {
        self.preemption
            .waiting(|| self.services.grow_tvb(buffer_id, blocks_wanted))
    }

    /// The command's GPU context with its user half rooted at `root`.
    pub fn vm(&self, root: PhysAddr) -> GpuVm<'a> {
        GpuVm::with_kernel(self.memory, root, self.firmware)
    }

    /// The command's VM, or (when its slot has no valid page table) the
    /// refusal of its `what` command by `unit` at `address`.
    pub(crate) fn user_vm(
        &self,
        what: &str,
        unit: FaultUnit,
        address: u64,
    ) -> Result<GpuVm<'a>, EngineResult> {
        match self.ttb0 {
            Some(root) => Ok(self.vm(root)),
            None => Err(unsupported(
                address,
                unit,
                format_args!(
                    "a {what} command in VM slot {}, which has no valid page table",
                    self.vm_slot
                ),
            )),
        }
    }
}

/// Control-stream blocks a data master walks between watchdog checks.
pub const WATCHDOG_STRIDE: u64 = 4096;

/// The GPU work one submission has done, in work units, against its
/// budget. Units running in parallel charge it concurrently.
#[derive(Debug)]
pub struct WorkAccount {
    used_units: AtomicU64,
    budget_units: u64,
}

impl WorkAccount {
    /// An account with nothing used yet.
    pub fn new(budget_units: u64) -> WorkAccount {
        WorkAccount {
            used_units: AtomicU64::new(0),
            budget_units,
        }
    }

    /// Records `units` of work done.
    pub fn charge(&self, units: u64) {
        self.used_units.fetch_add(units, Ordering::Relaxed);
    }

    /// The work done so far.
    pub fn used_units(&self) -> u64 {
        self.used_units.load(Ordering::Relaxed)
    }

    /// The budget.
    pub fn budget_units(&self) -> u64 {
        self.budget_units
    }

    /// Whether the submission has done more than its budget.
    pub fn exhausted(&self) -> bool {
        self.used_units() > self.budget_units
    }
}

/// The firmware's watchdog over a command: its submission's work account,
/// the host-time deadline, and the firmware's shutdown flag. Its checks
/// are also where the firmware may suspend the command ([`Preemption`]).
#[derive(Debug, Clone, Copy)]
pub struct Watchdog<'a> {
    /// When the command is stopped whatever its work (the last resort),
    /// were it never suspended: time spent suspended does not count.
    pub deadline: Instant,
    /// Set when the firmware shuts down.
    pub stop: &'a AtomicBool,
    /// The submission's work account.
    pub work: &'a WorkAccount,
    /// How the firmware suspends the command.
    pub preemption: &'a Preemption,
    /// The debugger's probe, if the machine has one.
    pub probe: Option<&'a dyn ShaderProbe>,
    /// The command's (firmware) address, for the probe.
    pub command: u64,
}

impl Watchdog<'_> {
    /// Whether the command must stop now. A check point: the calling
    /// thread parks here while the firmware has the command suspended.
    pub fn expired(&self) -> bool {
        self.preemption.check_point();
        self.preemption.abandoned()
            || self.work.exhausted()
            || Instant::now() >= self.deadline + self.preemption.suspended()
            || self.stop.load(Ordering::Relaxed)
    }

    /// Records `units` of work done by the command.
    pub fn charge(&self, units: u64) {
        self.work.charge(units);
    }
}

impl<'a> RunContext<'a> {
    /// The command's watchdog.
    pub fn watchdog(&self) -> Watchdog<'a> {
        Watchdog {
            deadline: self.deadline,
            stop: self.stop,
            work: self.work,
            preemption: self.preemption,
            probe: self.probe,
            command: self.command,
        }
    }
}

/// A command body from the command object, or a firmware fault at the
/// command for one too short to hold it.
pub(crate) fn command_body<T: FromBytes>(ctx: &RunContext<'_>) -> Result<T, EngineResult> {
    T::read_from_prefix(ctx.body).map(|(b, _)| b).map_err(|_| {
        let name = std::any::type_name::<T>();
        unsupported(
            ctx.command,
            FaultUnit::Firmware,
            format_args!(
                "a {}-byte command body, too short for its {}-byte {}",
                ctx.body.len(),
                size_of::<T>(),
                name.rsplit("::").next().unwrap_or(name),
            ),
        )
    })
}
