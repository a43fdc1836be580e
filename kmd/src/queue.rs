//! Queues: where a client's GPU work runs.
//!
//! A queue belongs to one VM (and keeps it alive), has a priority (low or
//! medium; the higher ones are reserved upstream), the base of the 4 GiB
//! region its commands' 32-bit shader addresses are offsets into, and its
//! own parameter buffer ([`crate::tvb`]). On hardware a queue is three
//! firmware work queues, one per stage (vertex, fragment, compute); the
//! scheduler ([`crate::sched`]) owns them.

use std::sync::{Arc, Mutex};

use agx_uapi::asahi::Priority;

use crate::sched::Scheduler;
use crate::vm::Vm;

/// Why QUEUE_CREATE or QUEUE_DESTROY failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// A flags or pad field is not zero.
    #[error("{field} must be zero")]
    MustBeZero {
        /// The field.
        field: &'static str,
    },
    /// A priority that is unknown or reserved (high, realtime).
    #[error("priority {priority} is not low or medium")]
    BadPriority {
        /// The value given.
        priority: u32,
    },
    /// No VM with this id.
    #[error("no VM {vm_id}")]
    NoSuchVm {
        /// The id.
        vm_id: u32,
    },
    /// No queue with this id.
    #[error("no queue {queue_id}")]
    NoSuchQueue {
        /// The id.
        queue_id: u32,
    },
}

/// Checks a QUEUE_CREATE priority: only low and medium are accepted.
pub(crate) fn check_priority(priority: u32) -> Result<Priority, QueueError> {
    match Priority::try_from(priority) {
        Ok(p @ (Priority::Low | Priority::Medium)) => Ok(p),
        _ => Err(QueueError::BadPriority { priority }),
    }
}

/// A queue.
#[derive(Debug)]
pub struct Queue {
    id: u32,
    vm: Arc<Mutex<Vm>>,
    priority: Priority,
    usc_exec_base: u64,
    scheduler: Arc<Scheduler>,
    /// The scheduler's id of it.
    sched_id: u64,
}

impl Queue {
    pub(crate) fn new(
        id: u32,
        vm: Arc<Mutex<Vm>>,
        priority: Priority,
        usc_exec_base: u64,
        scheduler: Arc<Scheduler>,
        usage: Arc<crate::stats::EngineUsage>,
    ) -> Result<Queue, crate::sched::SchedError> {
        let sched_id =
            scheduler.create_queue(Arc::clone(&vm), priority as u32, usc_exec_base, usage)?;
        Ok(Queue {
            id,
            vm,
            priority,
            usc_exec_base,
            scheduler,
            sched_id,
        })
    }

    /// The scheduler's id of this queue.
    pub fn sched_id(&self) -> u64 {
        self.sched_id
    }

    /// The queue's id in its file.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The VM its work runs in.
    pub fn vm(&self) -> &Arc<Mutex<Vm>> {
        &self.vm
    }

    /// Its priority.
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// The base of its shaders' 4 GiB address region.
    pub fn usc_exec_base(&self) -> u64 {
        self.usc_exec_base
    }

    /// Its parameter-buffer statistics.
    pub fn tvb_stats(&self) -> crate::tvb::TvbStats {
        self.scheduler.tvb_stats(self.sched_id).unwrap_or_default()
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.scheduler.destroy_queue(self.sched_id);
    }
}
