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

use crate::stats::Counters;
use agx_uapi::Errno;

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
        let mut points = self.points();
        points.push((point, fence));
        if points.len() > COMPACT_AFTER_POINTS {
            compact(&mut points);
        }
        drop(points);
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

/// Timeline length past which signalled points are merged.
const COMPACT_AFTER_POINTS: usize = 32;

/// Drops every point that signalled without error and is followed by
/// another such point, as `dma_fence_chain` frees signalled links: the
/// later one stands for both. Every query keeps its answer (a point's
/// fence is the first entry at or after it with all entries before it;
/// a merged run was all signalled and clean), while a long-lived timeline
/// (a queue's, one point per submission) no longer grows without bound
/// or makes each wait copy every fence it ever had.
fn compact(points: &mut Vec<(u64, Arc<Fence>)>) {
    let clean: Vec<bool> = points
        .iter()
        .map(|(_, fence)| fence.status() == Some(None))
        .collect();
    let mut index = 0;
    points.retain(|_| {
        let keep = !(clean[index] && clean.get(index + 1).copied().unwrap_or(false));
        index += 1;
        keep
    });
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

/// Why a syncobj ioctl failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyncobjError {
    /// A pad or MBZ field is not zero.
    #[error("{field} must be zero")]
    MustBeZero {
        /// The field.
        field: &'static str,
    },
    /// Flags outside the set this ioctl takes.
    #[error("flags {flags:#x} are not all known to this ioctl")]
    UnknownFlags {
        /// The flags given.
        flags: u32,
    },
    /// An ioctl that needs handles got none.
    #[error("count_handles is zero")]
    NoHandles,
    /// No syncobj has this handle in the file.
    #[error("no syncobj with handle {handle}")]
    NoSuchSyncobj {
        /// The handle.
        handle: u32,
    },
    /// DESTROY of a handle that does not exist (Linux: EINVAL).
    #[error("DESTROY of unknown syncobj handle {handle}")]
    DestroyUnknownHandle {
        /// The handle.
        handle: u32,
    },
    /// The syncobj has no fence at the point and the caller did not ask
    /// to wait for one.
    #[error("syncobj {handle} has no fence at point {point}")]
    NoFence {
        /// The handle.
        handle: u32,
        /// The point.
        point: u64,
    },
    /// A wait's deadline passed.
    #[error("the deadline passed")]
    TimedOut,
    /// The file descriptor is not a syncobj or sync file of this kind.
    #[error("fd {fd} is not a syncobj or sync file")]
    BadFd {
        /// The descriptor.
        fd: i32,
    },
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
    // The fences are taken once, as Linux does: a RESET or a new fence
    // during the wait does not change what is waited for. Entries without
    // a fence yet (WAIT_FOR_SUBMIT) look again until one appears.
    let mut fences: Vec<Option<PointFence>> = Vec::with_capacity(syncobjs.len());
    for (index, (syncobj, spec)) in syncobjs.iter().enumerate() {
        let fence = syncobj.fence_for(spec.point);
        if fence.is_none() && !(wait_for_submit || wait_available) {
            return Err(WaitError::NoFence { index });
        }
        fences.push(fence);
    }
    loop {
        // Read the generation before checking, so a change after the
        // check wakes the sleep below.
        let generation_before = *events.generation();
        let mut first = None;
        let mut done = 0;
        for (index, (syncobj, spec)) in syncobjs.iter().enumerate() {
            if fences[index].is_none() {
                fences[index] = syncobj.fence_for(spec.point);
            }
            let ready = match &fences[index] {
                None => false,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_timeline_stays_short_and_answers_as_before() {
        let events = Arc::new(SyncEvents::default());
        let syncobj = Syncobj::new(false, Arc::clone(&events), Arc::default());
        let mut fences = Vec::new();
        for point in 1..=1000u64 {
            let fence = Fence::pending(Arc::clone(&events));
            syncobj.add_point(point, Arc::clone(&fence));
            fences.push(fence);
            // Points complete a little behind submission, one with an
            // error.
            if point > 3 {
                let done = (point - 3) as usize;
                let error = (done == 500).then_some(Errno::EIO);
                fences[done - 1].signal(error);
            }
        }
        let len = syncobj.points().len();
        assert!(len <= COMPACT_AFTER_POINTS + 1, "{len} points kept");
        assert_eq!(syncobj.last_signalled_point(), 997);
        assert_eq!(syncobj.last_submitted_point(), 1000);
        // Before the error: clean; from it on: the error; pending: none.
        assert_eq!(syncobj.fence_for(499).unwrap().status(), Some(None));
        assert_eq!(
            syncobj.fence_for(500).unwrap().status(),
            Some(Some(Errno::EIO))
        );
        assert_eq!(
            syncobj.fence_for(700).unwrap().status(),
            Some(Some(Errno::EIO))
        );
        assert_eq!(syncobj.fence_for(998).unwrap().status(), None);
        assert!(syncobj.fence_for(1001).is_none());
    }

    #[test]
    fn a_wait_keeps_the_fences_it_started_with() {
        let events = Arc::new(SyncEvents::default());
        let syncobj = Syncobj::new(false, Arc::clone(&events), Arc::default());
        let fence = Fence::pending(Arc::clone(&events));
        syncobj.replace(Some(Arc::clone(&fence)));
        let waiter = {
            let events = Arc::clone(&events);
            let syncobj = Arc::clone(&syncobj);
            std::thread::spawn(move || {
                let deadline = monotonic_now_ns() + 5_000_000_000;
                wait(
                    &events,
                    &[(syncobj, WaitSpec { point: 0 })],
                    true,
                    false,
                    false,
                    deadline,
                )
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        // A RESET during the wait: Linux's waiter keeps waiting on the
        // fence it took, and returns when that signals.
        syncobj.replace(None);
        std::thread::sleep(Duration::from_millis(50));
        fence.signal(None);
        assert_eq!(waiter.join().unwrap(), Ok(0));
    }
}
