//! GPU faults: what a failed command reports, and which unit it names.
//!
//! A unit that cannot finish a command (a translation fault, an
//! instruction the shader core refuses, work the model does not do)
//! stops it with a fault event carrying the GPU address, the unit, the
//! kind of access and a reason, as the hardware's fault registers do; the
//! firmware turns it into an event for the kmd.
//!
//! Work the model does not do is refused with `unsupported`, which
//! also logs what was refused (the fault event has no room for it): a
//! WARN `refused: <what>` with the unit and the address, under this
//! module's target (`agx_firmware_sim::fault`), just before the kmd's
//! `GPU fault` line for the same fault.

use std::cell::Cell;
use std::fmt;

use agx_fwif::messages::{FaultUnit, FAULT_UNSUPPORTED_WORK};
use agx_hw::formats::UatFaultReason;
use agx_hw::uat::UatFault;

use crate::usc::{AccessKind, ExecError, FaultReason, MemoryFault};

/// What the execution engine did with a Run command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineResult {
    /// It completed.
    Done,
    /// It faulted.
    Fault {
        /// The GPU address.
        address: u64,
        /// The unit ([`FaultUnit`] as u32).
        unit: u32,
        /// 0 read, 1 write, 2 fetch.
        access: u32,
        /// The reason code (a `UatFaultReason`, or
        /// [`FAULT_UNSUPPORTED_WORK`]).
        reason: u32,
    },
    /// The watchdog stopped it: its submission used up its work budget
    /// (or, as a last resort, its host time).
    Timeout,
    /// It was not run: the watchdog had stopped an earlier command of its
    /// submission (the firmware decides this; engines never return it).
    Cancelled,
}

impl EngineResult {
    /// The fault a failed translation raises for `unit`.
    pub fn from_uat(fault: &UatFault, unit: FaultUnit) -> EngineResult {
        EngineResult::Fault {
            address: fault.va,
            unit: unit as u32,
            access: u32::from(!fault.read),
            reason: fault.reason.to_raw(),
        }
    }
}

fn fault(address: u64, unit: FaultUnit, access: u32, reason: u32) -> EngineResult {
    EngineResult::Fault {
        address,
        unit: unit as u32,
        access,
        reason,
    }
}

/// The fault event for work `unit` was asked to do at `address` that the
/// model does not do; logs `refused: {what}` (WARN, with `unit=` and
/// `address=`) unless the caller is inside [`unlogged`]. `what` says what
/// was asked, with the offending value where there is one.
///
/// Logging is a side effect: build the fault only when it is the result
/// (`ok_or_else`, not `ok_or`).
pub(crate) fn unsupported(address: u64, unit: FaultUnit, what: impl fmt::Display) -> EngineResult {
    if !UNLOGGED.get() {
        tracing::warn!(
            unit = ?unit,
            address = format_args!("{address:#x}"),
            "refused: {what}"
        );
    }
    fault(address, unit, 0, FAULT_UNSUPPORTED_WORK)
}

thread_local! {
    /// Set while [`unlogged`] runs its closure on this thread.
    static UNLOGGED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with the refusals it makes on this thread not logged. Only
/// for work whose failure is thrown away (best-effort clean-up after a
/// command has already failed): the log names the refusals whose fault
/// the kmd is told, not those of clean-up nobody reports.
pub(crate) fn unlogged<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            UNLOGGED.set(self.0);
        }
    }
    let _restore = Restore(UNLOGGED.replace(true));
    f()
}

/// The fault event a failed access of `unit` raises.
pub(crate) fn memory_fault(f: &MemoryFault, unit: FaultUnit) -> EngineResult {
    let access = match f.access {
        AccessKind::Read => 0,
        AccessKind::Write => 1,
        AccessKind::Fetch => 2,
    };
    let reason = match (f.reason, f.access) {
        (FaultReason::Unmapped, _) => UatFaultReason::Unmapped,
        (FaultReason::Permission, AccessKind::Write) => UatFaultReason::ReadOnly,
        (FaultReason::Permission, _) => UatFaultReason::NoAccess,
    };
    fault(f.address, unit, access, reason.to_raw())
}

/// The fault event an execution error raises.
pub(crate) fn exec_fault(error: &ExecError) -> EngineResult {
    let failed_access = match error {
        ExecError::Memory { fault, .. } => Some(*fault),
        ExecError::Fetch {
            source: crate::usc::FetchError::Memory(fault),
            ..
        } => Some(*fault),
        ExecError::Io {
            error: crate::usc::IoError::Memory(fault),
            ..
        } => Some(*fault),
        _ => None,
    };
    match failed_access {
        Some(f) => {
            // The kmd logs the fault's address and unit; which instruction
            // made the access is the shader developer's next question.
            tracing::debug!(
                pc = format_args!("{:#x}", error.pc()),
                "shader memory fault: {error}"
            );
            memory_fault(&f, FaultUnit::Usc)
        }
        // The error names the instruction and what was not modelled.
        None => unsupported(
            error.pc(),
            FaultUnit::Usc,
            format_args!("kernel stopped: {error}"),
        ),
    }
}
