//! Fences and syncobjs.
//!
//! A fence is a one-shot completion: pending, then signalled, possibly
//! with an error (a GPU fault is `EIO`, a timeout `ETIMEDOUT`). A syncobj
//! is a container userspace holds by handle: it holds no fence, one fence
//! (binary use), or a timeline of points, each with the fence that
//! completes it, as Linux's `drm_syncobj` with `dma_fence_chain` does. A
//! timeline point counts as signalled when its fence and every earlier
//! point's fence have signalled, and it carries the first error among
//! them, so errors propagate down the chain and through transfers.
//!
//! Waiters sleep on one device-wide condition variable that every fence
//! signal and every syncobj change notifies, and re-check their
//! condition; the absolute `CLOCK_MONOTONIC` deadline bounds the sleep.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::device::Counters;
use crate::errno::Errno;

/// The device-wide "something changed" signal.
#[derive(Debug, Default)]
pub struct SyncEvents {
    generation: Mutex<u64>,
    cond: Condvar,
}

impl SyncEvents {
    /// Wakes every waiter.
    pub fn notify(&self) {
        *self.generation.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.cond.notify_all();
    }

    fn generation(&self) -> MutexGuard<'_, u64> {
        self.generation.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current generation (it changes on every notification).
    pub fn current(&self) -> u64 {
        *self.generation()
    }

    /// Sleeps until the generation moves past `since`, or `timeout`.
    pub fn wait_change(&self, since: u64, timeout: Duration) {
        let guard = self.generation();
        if *guard == since {
            let _ = self.cond.wait_timeout(guard, timeout);
        }
    }
}

/// Nanoseconds of `CLOCK_MONOTONIC` now.
pub fn monotonic_now_ns() -> i64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec)
}

#[derive(Debug, Clone)]
enum FenceState {
    Pending,
    Signalled(Option<Errno>),
    /// Signalled when all of these have, with the first error among them
    /// (a timeline point moved to another syncobj).
    AllOf(Vec<Arc<Fence>>),
}

/// A one-shot completion.
#[derive(Debug)]
pub struct Fence {
    state: Mutex<FenceState>,
    events: Arc<SyncEvents>,
}

impl Fence {
    /// A fence that has not signalled.
    pub fn pending(events: Arc<SyncEvents>) -> Arc<Fence> {
        Arc::new(Fence {
            state: Mutex::new(FenceState::Pending),
            events,
        })
    }

    /// An already-signalled fence (the "stub" fence).
    pub fn signalled(events: Arc<SyncEvents>) -> Arc<Fence> {
        Arc::new(Fence {
            state: Mutex::new(FenceState::Signalled(None)),
            events,
        })
    }

    /// A fence that signals when all of `point`'s fences have.
    pub fn all_of(point: &PointFence, events: Arc<SyncEvents>) -> Arc<Fence> {
        match point.fences.as_slice() {
            [single] => Arc::clone(single),
            many => Arc::new(Fence {
                state: Mutex::new(FenceState::AllOf(many.to_vec())),
                events,
            }),
        }
    }

    /// Signals, with an error or not. Signalling twice keeps the first.
    pub fn signal(&self, error: Option<Errno>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*state, FenceState::Pending) {
            *state = FenceState::Signalled(error);
            drop(state);
            self.events.notify();
        }
    }

    /// `None` while pending; `Some(error)` once signalled.
    pub fn status(&self) -> Option<Option<Errno>> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match state {
            FenceState::Pending => None,
            FenceState::Signalled(error) => Some(error),
            FenceState::AllOf(fences) => PointFence { fences }.status(),
        }
    }
}

/// A syncobj's fence for some point: the fences it depends on.
#[derive(Debug, Clone)]
pub struct PointFence {
    /// The fences that must all signal (a timeline point depends on every
    /// earlier point).
    fences: Vec<Arc<Fence>>,
}

impl PointFence {
    /// A point that is just one fence.
    pub fn single(fence: Arc<Fence>) -> PointFence {
        PointFence {
            fences: vec![fence],
        }
    }

    /// `None` while pending; `Some(first error)` once all signalled.
    pub fn status(&self) -> Option<Option<Errno>> {
        let mut first_error = None;
        for fence in &self.fences {
            match fence.status() {
                None => return None,
                Some(error) => first_error = first_error.or(error),
            }
        }
        Some(first_error)
    }
}

/// A syncobj.
#[derive(Debug)]
pub struct Syncobj {
    /// Timeline points in submission order: (point, fence). A binary
    /// fence is one entry at point 0.
    points: Mutex<Vec<(u64, Arc<Fence>)>>,
    events: Arc<SyncEvents>,
    counters: Arc<Counters>,
}

impl Syncobj {
    pub(crate) fn new(
        signalled: bool,
        events: Arc<SyncEvents>,
        counters: Arc<Counters>,
    ) -> Arc<Syncobj> {
        counters.syncobjs.fetch_add(1, Ordering::Relaxed);
        let points = if signalled {
            vec![(0, Fence::signalled(Arc::clone(&events)))]
        } else {
            Vec::new()
        };
        Arc::new(Syncobj {
            points: Mutex::new(points),
            events,
            counters,
        })
    }

    fn points(&self) -> MutexGuard<'_, Vec<(u64, Arc<Fence>)>> {
        self.points.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the fence (binary signal, or import).
    pub fn replace(&self, fence: Option<Arc<Fence>>) {
        *self.points() = fence.into_iter().map(|f| (0, f)).collect();
        self.events.notify();
    }

    /// Adds a timeline point (point 0 replaces the fence, as Linux does).
    pub fn add_point(&self, point: u64, fence: Arc<Fence>) {
        if point == 0 {
            self.replace(Some(fence));
            return;
        }
        self.points().push((point, fence));
        self.events.notify();
    }

    /// The fence for `point`: the head (point 0), or the first point at or
    /// after `point`, with every earlier point it depends on. `None` if
    /// there is no such point yet.
    pub fn fence_for(&self, point: u64) -> Option<PointFence> {
        let points = self.points();
        let index = if point == 0 {
            points.len().checked_sub(1)?
        } else {
            points.iter().position(|(p, _)| *p >= point)?
        };
        Some(PointFence {
            fences: points[..=index]
                .iter()
                .map(|(_, f)| Arc::clone(f))
                .collect(),
        })
    }

    /// The last point that is signalled with all its predecessors (0 if
    /// none, or for a binary fence).
    pub fn last_signalled_point(&self) -> u64 {
        let points = self.points();
        let mut last = 0;
        for (point, fence) in points.iter() {
            if fence.status().is_none() {
                break;
            }
            last = *point;
        }
        last
    }

    /// The latest point added (0 if none).
    pub fn last_submitted_point(&self) -> u64 {
        self.points().last().map_or(0, |(p, _)| *p)
    }
}

impl Drop for Syncobj {
    fn drop(&mut self) {
        self.counters.syncobjs.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a waiter waits for on one syncobj.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitSpec {
    /// The timeline point (0: the current fence).
    pub point: u64,
}

/// Why a wait ended without success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// A syncobj has no fence for the point and the caller did not ask to
    /// wait for one.
    #[error("syncobj {index} has no fence for the point")]
    NoFence {
        /// Which entry.
        index: usize,
    },
    /// The deadline passed.
    #[error("timed out")]
    TimedOut,
}

/// Waits on `syncobjs` (each with its point) until all (`wait_all`) or any
/// is signalled, or available (`wait_available`: has a fence at all),
/// until the absolute monotonic `deadline_ns` (0 or past: poll once).
/// Returns the index of the first signalled entry.
pub fn wait(
    events: &SyncEvents,
    syncobjs: &[(Arc<Syncobj>, WaitSpec)],
    wait_all: bool,
    wait_for_submit: bool,
    wait_available: bool,
    deadline_ns: i64,
) -> Result<usize, WaitError> {
    loop {
        // Read the generation before checking, so a change after the
        // check wakes the sleep below.
        let generation_before = *events.generation();
        let mut first = None;
        let mut done = 0;
        for (index, (syncobj, spec)) in syncobjs.iter().enumerate() {
            let ready = match syncobj.fence_for(spec.point) {
                None if wait_for_submit || wait_available => false,
                None => return Err(WaitError::NoFence { index }),
                Some(_) if wait_available => true,
                Some(fence) => fence.status().is_some(),
            };
            if ready {
                done += 1;
                first.get_or_insert(index);
            }
        }
        let satisfied = if wait_all {
            done == syncobjs.len()
        } else {
            done > 0
        };
        if satisfied {
            return Ok(first.unwrap_or(0));
        }
        let now = monotonic_now_ns();
        if deadline_ns <= now {
            return Err(WaitError::TimedOut);
        }
        let remaining = Duration::from_nanos((deadline_ns - now) as u64);
        let guard = events.generation();
        if *guard == generation_before {
            let _ = events.cond.wait_timeout(guard, remaining);
        }
    }
}
