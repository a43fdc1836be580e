//! GET_PARAMS and GET_TIME: what the device says about itself.
//!
//! The modelled device is an M1 (T8103) GPU: generation 13, variant 'G',
//! one die with 8 cores in one cluster, and the limits the kernel driver
//! reports (user VA range, kernel range minimum, 64 commands per
//! submission, 16 attachments, nanosecond timestamps).

use agx_uapi::asahi::{ParamsGlobal, DRM_ASAHI_PARAM_GROUP_GLOBAL};

use crate::uaccess::Fault;
use crate::vm::{VM_END, VM_KERNEL_MIN_SIZE, VM_START};

/// Why GET_PARAMS or GET_TIME failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    /// A pad, flags or MBZ field is not zero.
    #[error("{field} must be zero")]
    MustBeZero {
        /// The field.
        field: &'static str,
    },
    /// A parameter group other than 0.
    #[error("unknown parameter group {group}")]
    UnknownGroup {
        /// The group asked for.
        group: u32,
    },
    /// The destination is not writable.
    #[error(transparent)]
    Fault(#[from] Fault),
}

/// Commands per SUBMIT.
pub const MAX_COMMANDS_PER_SUBMISSION: u32 = 64;
/// Attachments per SET_*_ATTACHMENTS command.
pub const MAX_ATTACHMENTS: u32 = 16;
/// Timestamp frequency: nanoseconds.
pub const TIMESTAMP_FREQUENCY_HZ: u64 = 1_000_000_000;

/// The device parameters.
pub fn params_global() -> ParamsGlobal {
    let mut params = ParamsGlobal {
        features: 0,
        gpu_generation: 13,
        gpu_variant: u32::from(b'G'),
        gpu_revision: 0x21,
        chip_id: 0x8103,
        num_dies: 1,
        num_clusters_total: 1,
        num_cores_per_cluster: 8,
        max_frequency_khz: 1_278_000,
        vm_start: VM_START,
        vm_end: VM_END,
        vm_kernel_min_size: VM_KERNEL_MIN_SIZE,
        max_commands_per_submission: MAX_COMMANDS_PER_SUBMISSION,
        max_attachments: MAX_ATTACHMENTS,
        command_timestamp_frequency_hz: TIMESTAMP_FREQUENCY_HZ,
        ..ParamsGlobal::default()
    };
    params.core_masks[0] = 0xFF;
    params
}

/// Checks GET_PARAMS' fixed fields.
pub(crate) fn check_get_params(group: u32, pad: u32) -> Result<(), ParamsError> {
    if pad != 0 {
        return Err(ParamsError::MustBeZero { field: "pad" });
    }
    if group != DRM_ASAHI_PARAM_GROUP_GLOBAL {
        return Err(ParamsError::UnknownGroup { group });
    }
    Ok(())
}

/// The GPU timestamp: `CLOCK_MONOTONIC` in nanoseconds, the clock the
/// firmware writes command timestamps with.
pub(crate) fn gpu_timestamp() -> u64 {
    u64::try_from(crate::sync::monotonic_now_ns()).unwrap_or(0)
}
