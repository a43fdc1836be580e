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
//! Waiters sleep on one device-wide generation counter that every fence
//! signal and every syncobj change bumps, and re-check their condition.
//! The sleep is a `FUTEX_WAIT` without a timeout, which Linux ends with
//! `-ERESTARTSYS` when a signal arrives, exactly as `drm_syncobj`'s wait
//! does: the system call is restarted if the handler has `SA_RESTART`,
//! and fails with `EINTR` otherwise. The device's sync thread keeps the
//! deadlines (absolute `CLOCK_MONOTONIC`), bumping the generation when
//! one passes, and fires the eventfds registered with `SYNCOBJ_EVENTFD`.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use rustix::buffer::spare_capacity;
use rustix::event::epoll;

use crate::mem::backing::DeviceFd;
use crate::stats::Counters;
use agx_uapi::Errno;

/// The device-wide "something changed" signal.
#[derive(Debug, Default)]
pub struct SyncEvents {
    shared: Arc<EventsShared>,
}

/// What the waiters and the sync thread share.
#[derive(Debug, Default)]
struct EventsShared {
    /// Bumped on every change: the futex word waiters sleep on.
    generation: AtomicU32,
    /// The sync thread's epoll set (made when it starts).
    epoll: OnceLock<DeviceFd>,
    /// The eventfd in it that wakes the sync thread.
    kick: OnceLock<DeviceFd>,
    /// Things the sync thread re-checks on every change (syncobjs with
    /// eventfds, sync files whose status is not queued yet), so that a
    /// change kicks the sync thread only when it has something to look at.
    watched_count: AtomicUsize,
    state: Mutex<ThreadState>,
}

/// The sync thread's work.
#[derive(Debug, Default)]
struct ThreadState {
    /// Deadline (ns of `CLOCK_MONOTONIC`) -> how many waiters have it.
    deadlines: BTreeMap<i64, usize>,
    /// Deadlines up to this one have been announced.
    announced_up_to_ns: i64,
    /// Syncobjs with eventfds registered.
    watched: Vec<Weak<Syncobj>>,
    /// Watchers to re-check on every change, until they settle.
    unsettled: Vec<Arc<dyn Watcher>>,
    /// The watchers whose descriptors are in the sync thread's epoll set,
    /// by key (key 0 is the kick eventfd).
    polled: HashMap<u64, Arc<dyn Watcher>>,
    next_key: u64,
    /// The process whose sync thread runs (a forked child has none).
    running_in: Option<u32>,
    shutdown: bool,
}

/// Something the sync thread looks after for another part of the device
/// (the sync files): a descriptor it polls, and a check it re-runs on
/// every change until the check settles. `settle` and `on_ready` are
/// called without the sync thread's lock held (they may signal fences);
/// `descriptor`, `events` and `abandoned` may be called with it held.
pub(crate) trait Watcher: Send + Sync + std::fmt::Debug {
    /// The descriptor to poll (`None`: it is gone).
    fn descriptor(&self) -> Option<BorrowedFd<'_>>;
    /// The events to poll it for (hangup and error are always reported).
    fn events(&self) -> epoll::EventFlags;
    /// Re-run on every change; `true` once there is nothing more to check.
    fn settle(&self) -> bool;
    /// The descriptor reported `flags`; `true` if the watcher is done and
    /// is forgotten (else its descriptor is polled again). A watcher that
    /// closes its descriptor itself calls `deregister` with it first.
    fn on_ready(&self, flags: epoll::EventFlags, deregister: &dyn Fn(BorrowedFd<'_>)) -> bool;
    /// Whether nobody needs the watcher any more (it is forgotten).
    fn abandoned(&self) -> bool;
}

/// The epoll key of the kick eventfd.
const KICK_KEY: u64 = 0;

/// A signal arrived while the caller slept, and its handler does not ask
/// for restarts (`EINTR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("interrupted by a signal")]
pub struct Interrupted;

impl Drop for SyncEvents {
    fn drop(&mut self) {
        self.shared.state().shutdown = true;
        self.shared.kick();
    }
}

fn io_errno(error: std::io::Error) -> Errno {
    Errno(error.raw_os_error().unwrap_or(libc::EIO))
}

impl EventsShared {
    fn state(&self) -> MutexGuard<'_, ThreadState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn notify(&self) {
        self.generation.fetch_add(1, Ordering::Release);
        let _ = rustix::thread::futex::wake(
            &self.generation,
            rustix::thread::futex::Flags::PRIVATE,
            // Every waiter (the kernel reads the count as an int).
            i32::MAX as u32,
        );
        if self.watched_count.load(Ordering::Acquire) > 0 {
            self.kick();
        }
    }

    fn kick(&self) {
        if let Some(Ok(kick)) = self.kick.get().map(DeviceFd::get) {
            // The counter cannot overflow: the thread drains it.
            let _ = rustix::io::write(kick, &1u64.to_ne_bytes());
        }
    }

    /// Starts the sync thread if this process has none (`state` locked).
    fn ensure_thread(self: &Arc<Self>, state: &mut ThreadState) -> Result<(), Errno> {
        let process = std::process::id();
        if state.running_in == Some(process) {
            return Ok(());
        }
        if self.epoll.get().is_none() {
            let (epoll, kick) = make_thread_descriptors().inspect_err(|error| {
                tracing::error!(%error, "cannot make the sync thread's descriptors");
            })?;
            // Set once: the state's lock is held.
            let _ = self.epoll.set(epoll);
            let _ = self.kick.set(kick);
        }
        let shared = Arc::clone(self);
        std::thread::Builder::new()
            .name("agx-sync".into())
            .spawn(move || shared.run_thread())
            .map_err(|error| {
                tracing::error!(%error, "cannot start the sync thread: deadlines, eventfds and sync files stall");
                io_errno(error)
            })?;
        state.running_in = Some(process);
        Ok(())
    }

    /// The sync thread's epoll set.
    fn epoll(&self) -> Result<BorrowedFd<'_>, Errno> {
        match self.epoll.get().map(DeviceFd::get) {
            Some(Ok(epoll)) => Ok(epoll),
            Some(Err(gone)) => {
                tracing::error!(%gone, "the sync thread's epoll set was closed by the process");
                Err(Errno::EBADF)
            }
            None => Err(Errno::EBADF),
        }
    }

    /// Adds `watcher`'s descriptor to the sync thread's epoll set.
    fn poll_for(self: &Arc<Self>, watcher: &Arc<dyn Watcher>) -> Result<(), Errno> {
        let mut state = self.state();
        self.ensure_thread(&mut state)?;
        state.next_key += 1;
        let key = state.next_key;
        let fd = watcher.descriptor().ok_or(Errno::EBADF)?;
        epoll::add(
            self.epoll()?,
            fd,
            epoll::EventData::new_u64(key),
            watcher.events(),
        )
        .map_err(|e| Errno(e.raw_os_error()))?;
        state.polled.insert(key, Arc::clone(watcher));
        Ok(())
    }

    /// The sync thread: fires registered eventfds whose condition holds,
    /// queues the status of exported sync files whose fence signalled,
    /// signals the fences of other devices' sync files that did, forgets
    /// sync files once closed, and announces each deadline as it passes.
    fn run_thread(&self) {
        let mut ready: Vec<epoll::Event> = Vec::with_capacity(64);
        loop {
            let (watched, unsettled) = {
                let state = self.state();
                if state.shutdown {
                    return;
                }
                (state.watched.clone(), state.unsettled.clone())
            };
            for syncobj in watched.iter().filter_map(Weak::upgrade) {
                syncobj.fire_eventfds();
            }
            let settled: Vec<bool> = unsettled.iter().map(|w| w.settle()).collect();
            let mut state = self.state();
            // The syncobjs looked at are dropped after the lock is released
            // (dropping the last reference to one may drop the device's
            // events, which takes the lock).
            let mut looked_at = Vec::new();
            state.watched.retain(|w| match w.upgrade() {
                Some(syncobj) => {
                    let keep = syncobj.has_eventfds();
                    looked_at.push(syncobj);
                    keep
                }
                None => false,
            });
            state.unsettled.retain(|w| {
                !unsettled
                    .iter()
                    .zip(&settled)
                    .any(|(looked, &done)| done && Arc::ptr_eq(looked, w))
            });
            // Watchers nobody needs any more.
            let abandoned: Vec<u64> = state
                .polled
                .iter()
                .filter(|(_, watcher)| watcher.abandoned())
                .map(|(&key, _)| key)
                .collect();
            let abandoned: Vec<Arc<dyn Watcher>> = abandoned
                .iter()
                .filter_map(|key| state.polled.remove(key))
                .collect();
            for watcher in &abandoned {
                self.deregister(watcher.as_ref());
            }
            self.watched_count.store(
                state.watched.len() + state.unsettled.len(),
                Ordering::Release,
            );
            let now = monotonic_now_ns();
            let next = state
                .deadlines
                .range(state.announced_up_to_ns.saturating_add(1)..)
                .next()
                .map(|(&d, _)| d);
            if next.is_some_and(|deadline| deadline <= now) {
                state.announced_up_to_ns = now;
                drop(state);
                drop(looked_at);
                drop(unsettled);
                drop(abandoned);
                self.notify();
                continue;
            }
            drop(state);
            drop(looked_at);
            drop(unsettled);
            drop(abandoned);
            let Ok(epoll) = self.epoll() else {
                tracing::error!(
                    "the sync thread lost its epoll set: deadlines, eventfds and sync files stall"
                );
                return;
            };
            let timeout =
                next.map(|deadline| timespec(Duration::from_nanos((deadline - now) as u64)));
            ready.clear();
            match epoll::wait(epoll, spare_capacity(&mut ready), timeout.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(error) => {
                    tracing::error!(%error, "the sync thread cannot wait");
                    return;
                }
            }
            for event in &ready {
                self.handle_ready(event.data.u64(), event.flags);
            }
        }
    }

    /// Takes `watcher`'s descriptor, if it still has one, out of the epoll
    /// set.
    fn deregister(&self, watcher: &dyn Watcher) {
        if let (Some(fd), Ok(epoll)) = (watcher.descriptor(), self.epoll()) {
            let _ = epoll::delete(epoll, fd);
        }
    }

    /// Handles a descriptor of the epoll set that became ready.
    fn handle_ready(&self, key: u64, flags: epoll::EventFlags) {
        if key == KICK_KEY {
            if let Some(Ok(kick)) = self.kick.get().map(DeviceFd::get) {
                let mut count = [0u8; 8];
                let _ = rustix::io::read(kick, &mut count);
            }
            return;
        }
        let Some(watcher) = self.state().polled.get(&key).cloned() else {
            // Not ours any more (cannot happen: a forgotten watcher leaves
            // the set first); leaving it would wake the thread forever.
            tracing::warn!(key, "the sync thread polled a descriptor it forgot");
            return;
        };
        let deregister = |fd: BorrowedFd<'_>| {
            if let Ok(epoll) = self.epoll() {
                let _ = epoll::delete(epoll, fd);
            }
        };
        if watcher.on_ready(flags, &deregister) {
            // Out of the epoll set while its descriptor is open (a copy of
            // a client's file shares its registration), and out of the
            // lists; dropped without the lock.
            self.deregister(watcher.as_ref());
            let mut state = self.state();
            let forgotten = state.polled.remove(&key);
            state.unsettled.retain(|w| !Arc::ptr_eq(w, &watcher));
            drop(state);
            drop(forgotten);
        } else if let (Some(fd), Ok(epoll)) = (watcher.descriptor(), self.epoll()) {
            // Not done: poll it again (a one-shot registration needs it).
            let _ = epoll::modify(epoll, fd, epoll::EventData::new_u64(key), watcher.events());
        }
    }
}

/// The sync thread's epoll set, with the kick eventfd in it.
fn make_thread_descriptors() -> Result<(DeviceFd, DeviceFd), Errno> {
    let errno = |e: rustix::io::Errno| Errno(e.raw_os_error());
    let epoll = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(errno)?;
    let kick = rustix::event::eventfd(
        0,
        rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
    )
    .map_err(errno)?;
    epoll::add(
        &epoll,
        &kick,
        epoll::EventData::new_u64(KICK_KEY),
        epoll::EventFlags::IN,
    )
    .map_err(errno)?;
    Ok((
        DeviceFd::keep(epoll).map_err(io_errno)?,
        DeviceFd::keep(kick).map_err(io_errno)?,
    ))
}

fn timespec(d: Duration) -> rustix::time::Timespec {
    rustix::time::Timespec {
        tv_sec: d.as_secs() as i64,
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}

/// A waiter's deadline, known to the sync thread while it sleeps.
struct Registration<'a> {
    shared: &'a Arc<EventsShared>,
    deadline_ns: i64,
    /// The sync thread runs, and wakes the waiter at the deadline.
    announced: bool,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        if let Some(n) = state.deadlines.get_mut(&self.deadline_ns) {
            *n -= 1;
            if *n == 0 {
                state.deadlines.remove(&self.deadline_ns);
            }
        }
    }
}

impl SyncEvents {
    /// Wakes every waiter.
    pub fn notify(&self) {
        self.shared.notify();
    }

    /// The current generation (it changes on every notification).
    pub fn current(&self) -> u32 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// Sleeps until the generation moves past `since`, or `timeout`
    /// (signals are ignored: for the device's own threads).
    pub fn wait_change(&self, since: u32, timeout: Duration) {
        let _ = rustix::thread::futex::wait(
            &self.shared.generation,
            rustix::thread::futex::Flags::PRIVATE,
            since,
            Some(&timespec(timeout)),
        );
    }

    /// Sleeps until the generation moves past `since` or the absolute
    /// monotonic `deadline_ns` passes (`i64::MAX`: no deadline). May
    /// return early; the caller re-checks. Fails if a signal whose handler
    /// does not restart system calls arrives.
    pub fn sleep(&self, since: u32, deadline_ns: i64) -> Result<(), Interrupted> {
        let registration = (deadline_ns != i64::MAX).then(|| self.register(deadline_ns));
        let now_ns = monotonic_now_ns();
        if self.current() != since || now_ns >= deadline_ns {
            return Ok(());
        }
        // Without a timeout the futex keeps the caller's signal semantics
        // (the kernel restarts it under SA_RESTART, else EINTR), and the
        // sync thread wakes it at the deadline. When there is no sync
        // thread (a process at its descriptor limit cannot make its epoll
        // set) the deadline bounds the futex itself; a signal then only
        // makes the caller look again, as under SA_RESTART.
        let announced = registration.as_ref().is_none_or(|r| r.announced);
        let timeout = (!announced).then(|| {
            timespec(Duration::from_nanos(
                u64::try_from(deadline_ns.saturating_sub(now_ns)).unwrap_or(0),
            ))
        });
        match rustix::thread::futex::wait(
            &self.shared.generation,
            rustix::thread::futex::Flags::PRIVATE,
            since,
            timeout.as_ref(),
        ) {
            Err(rustix::io::Errno::INTR) if announced => Err(Interrupted),
            // Woken, timed out, or the generation had moved (EAGAIN).
            _ => Ok(()),
        }
    }

    /// Makes the sync thread announce `deadline_ns`.
    fn register(&self, deadline_ns: i64) -> Registration<'_> {
        let mut state = self.shared.state();
        *state.deadlines.entry(deadline_ns).or_insert(0) += 1;
        // On failure the error is logged; the waiter then bounds its own
        // sleep by the deadline.
        let announced = self.shared.ensure_thread(&mut state).is_ok();
        drop(state);
        self.shared.kick();
        Registration {
            shared: &self.shared,
            deadline_ns,
            announced,
        }
    }

    /// Has the sync thread fire `syncobj`'s eventfds when their condition
    /// holds.
    fn watch(&self, syncobj: &Arc<Syncobj>) {
        let mut state = self.shared.state();
        let weak = Arc::downgrade(syncobj);
        if !state.watched.iter().any(|w| w.ptr_eq(&weak)) {
            state.watched.push(weak);
        }
        self.shared.watched_count.store(
            state.watched.len() + state.unsettled.len(),
            Ordering::Release,
        );
        // On failure the error is logged (the eventfds stall).
        let _ = self.shared.ensure_thread(&mut state);
        drop(state);
        self.shared.kick();
    }
}

impl SyncEvents {
    /// Has the sync thread look after `watcher`: poll its descriptor, and
    /// re-check it on every change until it settles.
    pub(crate) fn look_after(&self, watcher: Arc<dyn Watcher>) -> Result<(), Errno> {
        self.shared.poll_for(&watcher)?;
        let mut state = self.shared.state();
        state.unsettled.push(watcher);
        self.shared.watched_count.store(
            state.watched.len() + state.unsettled.len(),
            Ordering::Release,
        );
        drop(state);
        // It may have settled before it was listed.
        self.shared.kick();
        Ok(())
    }
}

/// An eventfd registered on a syncobj point with `SYNCOBJ_EVENTFD`.
#[derive(Debug)]
pub struct EventfdWatch {
    /// The timeline point (0: the syncobj's fence).
    pub point: u64,
    /// Fire once the point has a fence, not once it signals.
    pub when_available: bool,
    /// The eventfd (the device's own descriptor of it).
    pub eventfd: DeviceFd,
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
    /// (a timeline point moved to another syncobj, a shared buffer's
    /// fences as one sync file).
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

    /// A fence that signals when all of `fences` have, with the first
    /// error among them (`dma_resv_get_singleton`'s fence array).
    pub fn all_of_fences(fences: Vec<Arc<Fence>>, events: Arc<SyncEvents>) -> Arc<Fence> {
        Arc::new(Fence {
            state: Mutex::new(FenceState::AllOf(fences)),
            events,
        })
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

/// Whether a fence ends a write of the buffer or only a read
/// (`dma_resv_usage`'s WRITE and READ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// The fence's work writes the buffer.
    Write,
    /// The fence's work only reads it.
    Read,
}

/// The fences of the work on one shared buffer that has not finished
/// yet (Linux's `dma_resv`; set and read through the dma-buf ioctls,
/// the `dma_buf` module).
#[derive(Debug, Default)]
pub struct Reservation {
    fences: Mutex<Vec<(Arc<Fence>, Usage)>>,
}

impl Reservation {
    /// Adds `fence` with `usage`, dropping the fences that have signalled.
    pub fn add(&self, fence: Arc<Fence>, usage: Usage) {
        let mut fences = self.fences.lock().unwrap_or_else(|e| e.into_inner());
        fences.retain(|(fence, _)| fence.status().is_none());
        fences.push((fence, usage));
    }

    /// The unsignalled fences an access must wait for: a write waits for
    /// every access, a read for the writes (`dma_resv_usage_rw`).
    pub fn fences_for(&self, write_access: bool) -> Vec<Arc<Fence>> {
        let mut fences = self.fences.lock().unwrap_or_else(|e| e.into_inner());
        fences.retain(|(fence, _)| fence.status().is_none());
        fences
            .iter()
            .filter(|(_, usage)| write_access || *usage == Usage::Write)
            .map(|(fence, _)| Arc::clone(fence))
            .collect()
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
    /// Timeline points in submission order, as links of Linux's
    /// `dma_fence_chain` (see [`TimelinePoint`]). A binary
    /// fence is one entry at point 0.
    points: Mutex<Vec<TimelinePoint>>,
    /// Eventfds to fire once, when their point is ready (dropped with the
    /// syncobj, unfired, as Linux drops them).
    eventfds: Mutex<Vec<EventfdWatch>>,
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
            vec![TimelinePoint::plain(Fence::signalled(Arc::clone(&events)))]
        } else {
            Vec::new()
        };
        Arc::new(Syncobj {
            points: Mutex::new(points),
            eventfds: Mutex::new(Vec::new()),
            events,
            counters,
        })
    }

    fn points(&self) -> MutexGuard<'_, Vec<TimelinePoint>> {
        self.points.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the fence (binary signal, or import).
    pub fn replace(&self, fence: Option<Arc<Fence>>) {
        *self.points() = fence.into_iter().map(TimelinePoint::plain).collect();
        self.events.notify();
    }

    /// Adds a timeline point (point 0 replaces the fence, as Linux does).
    /// A point at or below the timeline's latest (Mesa's Vulkan queues
    /// signal their first submission's point 1 after initialising the
    /// timeline to 1) becomes a link numbered as the latest that starts a
    /// new run, as `dma_fence_chain_init` makes it: waits for that number
    /// then wait for the new fence.
    pub fn add_point(&self, point: u64, fence: Arc<Fence>) {
        if point == 0 {
            self.replace(Some(fence));
            return;
        }
        let mut points = self.points();
        let link = match points.last() {
            Some(prev) if prev.seqno > 0 && point > prev.seqno => TimelinePoint {
                seqno: point,
                prev_seqno: prev.seqno,
                fence,
            },
            Some(prev) if prev.seqno > 0 => {
                tracing::debug!(
                    point,
                    latest = prev.seqno,
                    "a timeline point added out of order"
                );
                TimelinePoint {
                    seqno: prev.seqno,
                    prev_seqno: 0,
                    fence,
                }
            }
            _ => TimelinePoint {
                seqno: point,
                prev_seqno: 0,
                fence,
            },
        };
        points.push(link);
        // At lengths 64, 128, 256...: a timeline whose links are all still
        // pending cannot shrink, and compacting it on every add would make
        // each add cost its whole length.
        if points.len() > COMPACT_AFTER_POINTS && points.len().is_power_of_two() {
            compact(&mut points);
        }
        drop(points);
        self.events.notify();
    }

    /// The fence for `point`: the head (point 0), or, as
    /// `dma_fence_chain_find_seqno` finds it, the oldest link of the head's
    /// run whose predecessor is numbered below `point`, with every earlier
    /// point it depends on. `None` if the timeline has not reached `point`.
    pub fn fence_for(&self, point: u64) -> Option<PointFence> {
        let points = self.points();
        let mut index = points.len().checked_sub(1)?;
        if point != 0 {
            if points[index].seqno < point {
                return None;
            }
            while index > 0 && points[index].prev_seqno >= point {
                index -= 1;
            }
        }
        Some(PointFence {
            fences: points[..=index]
                .iter()
                .map(|p| Arc::clone(&p.fence))
                .collect(),
        })
    }

    /// The point `SYNCOBJ_QUERY` reports (0 for a binary fence), as
    /// `drm_syncobj_query_ioctl` computes it: the point before the oldest
    /// pending link of the latest run (points added in increasing order),
    /// or the latest point when everything has signalled. Links of an
    /// earlier run may still be pending below it.
    pub fn last_signalled_point(&self) -> u64 {
        let points = self.points();
        let Some(head) = points.last() else {
            return 0;
        };
        if head.seqno == 0 {
            return 0;
        }
        let mut run_start = points.len() - 1;
        while run_start > 0 && points[run_start].prev_seqno > 0 {
            run_start -= 1;
        }
        if let Some(pending) = points[run_start..]
            .iter()
            .find(|link| link.fence.status().is_none())
        {
            return pending.prev_seqno;
        }
        if points[..run_start]
            .iter()
            .all(|link| link.fence.status().is_some())
        {
            head.seqno
        } else {
            head.prev_seqno
        }
    }

    /// Registers `watch` (`SYNCOBJ_EVENTFD`): its eventfd gets 1 added,
    /// once, when the point has a fence (`when_available`) or that fence
    /// has signalled. Fires at once if that is already so.
    pub fn add_eventfd(self: &Arc<Self>, watch: EventfdWatch) {
        self.eventfds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(watch);
        if self.fire_eventfds() {
            self.events.watch(self);
        }
    }

    fn has_eventfds(&self) -> bool {
        !self
            .eventfds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Fires the eventfds whose condition holds; whether any remain.
    fn fire_eventfds(&self) -> bool {
        let mut eventfds = self.eventfds.lock().unwrap_or_else(|e| e.into_inner());
        eventfds.retain(|watch| {
            let ready = match self.fence_for(watch.point) {
                None => false,
                Some(_) if watch.when_available => true,
                Some(fence) => fence.status().is_some(),
            };
            if ready {
                match watch.eventfd.get() {
                    Ok(fd) => {
                        // Linux's eventfd_signal never blocks (it saturates):
                        // write only if the counter has room, never waiting.
                        let mut ready = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::OUT)];
                        let room = rustix::event::poll(&mut ready, Some(&timespec(Duration::ZERO)))
                            .is_ok_and(|n| n == 1);
                        if !room {
                            tracing::warn!(point = watch.point, "a syncobj eventfd is full: not signalled");
                        } else if let Err(e) = rustix::io::write(fd.as_fd(), &1u64.to_ne_bytes()) {
                            tracing::warn!(%e, point = watch.point, "cannot signal a syncobj eventfd");
                        }
                    }
                    Err(gone) => tracing::warn!(%gone, "a syncobj eventfd was closed by the process"),
                }
            }
            !ready
        });
        !eventfds.is_empty()
    }

    /// The latest point added (0 if none).
    pub fn last_submitted_point(&self) -> u64 {
        self.points().last().map_or(0, |p| p.seqno)
    }
}

/// Timeline length past which signalled points are merged.
const COMPACT_AFTER_POINTS: usize = 32;

/// Drops every point that signalled without error and is followed by
/// another such point, as `dma_fence_chain` frees signalled links: the
/// later one stands for both. Every query keeps its answer (a point's
/// fence is a link with all links before it, and a merged run was all
/// signalled and clean), while a long-lived timeline
/// (a queue's, one point per submission) no longer grows without bound
/// or makes each wait copy every fence it ever had.
fn compact(points: &mut Vec<TimelinePoint>) {
    let clean: Vec<bool> = points
        .iter()
        .map(|p| p.fence.status() == Some(None))
        .collect();
    let mut kept: Vec<TimelinePoint> = Vec::with_capacity(points.len());
    let mut dropped_prev_seqno = None;
    for (index, mut link) in points.drain(..).enumerate() {
        // A link continuing the run of a dropped one inherits the dropped
        // link's predecessor number, so a search stops where it stopped
        // before; a link starting a run (0) stays one.
        if let Some(prev_seqno) = dropped_prev_seqno.take() {
            if link.prev_seqno != 0 {
                link.prev_seqno = prev_seqno;
            }
        }
        if clean[index] && clean.get(index + 1).copied().unwrap_or(false) {
            dropped_prev_seqno = Some(link.prev_seqno);
        } else {
            kept.push(link);
        }
    }
    *points = kept;
}

/// One link of a timeline, as Linux's `dma_fence_chain` numbers it.
#[derive(Debug)]
struct TimelinePoint {
    /// The point this link stands for: the point added, or, for a point
    /// added at or below the latest, the latest (`max(prev, point)`).
    seqno: u64,
    /// The predecessor's point when this link continues its run (points
    /// added in increasing order); 0 when it starts one (the first link,
    /// one after a plain fence, or one added out of order).
    prev_seqno: u64,
    fence: Arc<Fence>,
}

impl TimelinePoint {
    /// A plain fence (binary use, point 0).
    fn plain(fence: Arc<Fence>) -> TimelinePoint {
        TimelinePoint {
            seqno: 0,
            prev_seqno: 0,
            fence,
        }
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
    /// A signal interrupted a wait (its handler does not restart system
    /// calls).
    #[error("a signal interrupted the wait")]
    Interrupted,
    /// The file descriptor is not open.
    #[error("fd {fd} is not an open descriptor")]
    NotOpen {
        /// The descriptor.
        fd: i32,
    },
    /// The file descriptor is not of the kind this ioctl takes (a syncobj
    /// or sync file, an eventfd).
    #[error("fd {fd} is not a file of the kind this ioctl takes")]
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
    /// A signal arrived (and its handler does not restart system calls).
    #[error("interrupted by a signal")]
    Interrupted,
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
        let generation_before = events.current();
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
        if deadline_ns <= monotonic_now_ns() {
            return Err(WaitError::TimedOut);
        }
        events
            .sleep(generation_before, deadline_ns)
            .map_err(|Interrupted| WaitError::Interrupted)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Merging signalled links keeps a run's start a start: a wait for a
    /// point before it still waits for the older run's pending link.
    #[test]
    fn merging_links_keeps_the_runs_of_an_out_of_order_timeline() {
        let events = Arc::new(SyncEvents::default());
        let syncobj = Syncobj::new(false, Arc::clone(&events), Arc::default());
        let signalled = || Fence::signalled(Arc::clone(&events));
        let pending = Fence::pending(Arc::clone(&events));
        syncobj.add_point(4, signalled());
        syncobj.add_point(5, Arc::clone(&pending));
        syncobj.add_point(6, signalled());
        syncobj.add_point(6, signalled()); // out of order: starts a run
        syncobj.add_point(7, Fence::pending(Arc::clone(&events)));
        let answers = |s: &Syncobj| {
            (
                s.fence_for(4).map(|p| p.status()),
                s.fence_for(6).map(|p| p.status()),
                s.last_signalled_point(),
            )
        };
        let before = answers(&syncobj);
        // Points 4 and 6 wait for 5; QUERY answers from the latest run,
        // whose start has signalled (6), as Linux's walk does.
        assert_eq!(before, (Some(None), Some(None), 6));
        compact(&mut syncobj.points());
        assert_eq!(
            syncobj.points().len(),
            4,
            "the first of the two clean links merged"
        );
        assert_eq!(answers(&syncobj), before);
        pending.signal(None);
        assert_eq!(answers(&syncobj), (Some(Some(None)), Some(Some(None)), 6));
    }

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
