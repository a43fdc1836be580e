//! Preemption: the firmware's context switch between commands.
//!
//! The hardware's firmware time-slices the GPU between contexts: it asks a
//! running command to stop at its next preemption point (a workgroup, a
//! tile, an instruction slice), saves what is in flight to the context's
//! preemption buffers, runs another context's work, and later restores
//! and resumes the first where it stopped. In the simulator a command
//! runs on host threads of its own, and its state (registers, tile
//! buffers, the data master's position) lives on their stacks; to
//! suspend it the firmware asks each of those threads to park at its next
//! watchdog check, and waits until all have. Resuming wakes them. Nothing
//! a command computes depends on whether, where or how often it was
//! suspended, and while it is suspended none of its threads runs.
//!
//! A command's threads are counted: the thread that runs the command is
//! one, and a unit that spreads work over more threads (`workers`) counts
//! them in before they start and out as each ends; a thread waiting for
//! its helpers to end is counted out while it waits. The firmware sees a
//! command suspended when every counted thread is parked.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One command's preemption state, shared by the firmware and the
/// command's threads.
#[derive(Debug)]
pub struct Preemption {
    /// Mirrors `State::requested`, for a check point's fast path.
    requested: AtomicBool,
    /// Host time spent suspended, in ns (the host-time watchdog does not
    /// count it).
    suspended_ns: AtomicU64,
    /// The firmware dropped the command (its queue or context went while
    /// it was suspended): it is to stop at its next check.
    abandoned: AtomicBool,
    state: Mutex<State>,
    cond: Condvar,
}

#[derive(Debug)]
struct State {
    /// The firmware wants the command suspended.
    requested: bool,
    /// Threads of the command that may run GPU work (parked ones too).
    threads: usize,
    /// Of those, the ones parked at a check point.
    parked: usize,
    /// The command has returned: none of its threads is left.
    finished: bool,
    /// Bumped on every resume: a parked thread waits for it to change.
    resumes: u64,
}

impl Default for Preemption {
    fn default() -> Preemption {
        Preemption::new()
    }
}

impl Preemption {
    /// The state of a command about to run on one thread.
    pub fn new() -> Preemption {
        Preemption {
            requested: AtomicBool::new(false),
            suspended_ns: AtomicU64::new(0),
            abandoned: AtomicBool::new(false),
            state: Mutex::new(State {
                requested: false,
                threads: 1,
                parked: 0,
                finished: false,
                resumes: 0,
            }),
            cond: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.cond.wait(guard).unwrap_or_else(|e| e.into_inner())
    }

    /// Host time the command has spent suspended.
    pub fn suspended(&self) -> Duration {
        Duration::from_nanos(self.suspended_ns.load(Ordering::Relaxed))
    }

    /// Whether the firmware dropped the command.
    pub fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed)
    }

    // The command's side.

    /// A check point: parks the calling thread while the firmware wants
    /// the command suspended.
    pub fn check_point(&self) {
        if !self.requested.load(Ordering::Acquire) {
            return;
        }
        let mut state = self.lock();
        if !state.requested {
            return;
        }
        let resumes = state.resumes;
        state.parked += 1;
        self.cond.notify_all();
        while state.resumes == resumes {
            state = self.wait(state);
        }
        state.parked -= 1;
    }

    /// Counts in `count` threads the calling thread is about to start
    /// for the command, and counts the caller out while it waits for
    /// them ([`Preemption::joined`] counts it back in).
    pub fn fork(&self, count: usize) {
        let mut state = self.lock();
        state.threads = (state.threads + count).saturating_sub(1);
        self.cond.notify_all();
    }

    /// Counts in `count` threads the calling thread is about to start
    /// beside itself: it goes on running GPU work (each started thread
    /// counts itself out as it ends).
    pub fn fork_beside(&self, count: usize) {
        let mut state = self.lock();
        state.threads += count;
        self.cond.notify_all();
    }

    /// Runs `wait`, a wait in which the calling thread runs no GPU work:
    /// for the firmware itself (a grow request's answer, which the
    /// firmware thread reads, and cannot while it waits for the command
    /// to park) or for another of the command's threads (which may park
    /// meanwhile). The calling thread is counted out, so that a
    /// suspension asked for meanwhile completes without it; then counted
    /// back in as [`Preemption::joined`] does, first waiting out that
    /// suspension.
    pub fn waiting<T>(&self, wait: impl FnOnce() -> T) -> T {
        self.fork(0);
        let answer = wait();
        self.joined();
        answer
    }

    /// A thread counted in by [`Preemption::fork`] ends.
    pub fn thread_ended(&self) {
        let mut state = self.lock();
        state.threads -= 1;
        self.cond.notify_all();
    }

    /// The thread that called [`Preemption::fork`] has seen its threads
    /// end: it counts itself back in, first waiting out a suspension the
    /// firmware asked for meanwhile (the firmware may already be running
    /// other work).
    pub fn joined(&self) {
        let mut state = self.lock();
        while state.requested {
            state = self.wait(state);
        }
        state.threads += 1;
    }

    /// Whether the command has returned.
    pub(crate) fn is_finished(&self) -> bool {
        self.lock().finished
    }

    /// The command has returned.
    pub(crate) fn finish(&self) {
        let mut state = self.lock();
        state.finished = true;
        self.cond.notify_all();
    }

    // The firmware's side.

    /// Suspends the command: asks every one of its threads to park at
    /// its next check, and waits until all have (false) or the command
    /// returned first (true).
    pub(crate) fn suspend(&self) -> bool {
        let mut state = self.lock();
        if state.finished {
            return true;
        }
        state.requested = true;
        self.requested.store(true, Ordering::Release);
        while !state.finished && state.parked < state.threads {
            state = self.wait(state);
        }
        if state.finished {
            state.requested = false;
            self.requested.store(false, Ordering::Release);
        }
        state.finished
    }

    /// Resumes a suspended command; `since` is when it was suspended.
    pub(crate) fn resume(&self, since: Instant) {
        let suspended_ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.suspended_ns.fetch_add(suspended_ns, Ordering::Relaxed);
        let mut state = self.lock();
        state.requested = false;
        self.requested.store(false, Ordering::Release);
        state.resumes += 1;
        self.cond.notify_all();
    }

    /// Drops a suspended command: resumes it to stop at its next check,
    /// and waits until it has returned.
    pub(crate) fn abandon(&self, since: Instant) {
        self.abandoned.store(true, Ordering::Relaxed);
        self.resume(since);
        let mut state = self.lock();
        while !state.finished {
            state = self.wait(state);
        }
    }
}

/// Counts a thread started by [`Preemption::fork`] out when it ends,
/// however it ends.
pub(crate) struct ForkedThread<'a>(pub(crate) &'a Preemption);

impl Drop for ForkedThread<'_> {
    fn drop(&mut self) {
        self.0.thread_ended();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// A command of three threads counting until told to stop: once
    /// suspended, none of them counts until it is resumed, and all finish
    /// after. (No step depends on how fast the threads run: the command
    /// cannot finish before it is told to stop.)
    #[test]
    fn a_suspended_command_runs_no_thread_until_resumed() {
        let preemption = Arc::new(Preemption::new());
        let counted = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let command = {
            let (preemption, counted, stop) = (
                Arc::clone(&preemption),
                Arc::clone(&counted),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                preemption.fork(3);
                std::thread::scope(|scope| {
                    for _ in 0..3 {
                        scope.spawn(|| {
                            let _counted_out = ForkedThread(&preemption);
                            while !stop.load(Ordering::Acquire) {
                                preemption.check_point();
                                counted.fetch_add(1, Ordering::Relaxed);
                                std::thread::sleep(Duration::from_micros(50));
                            }
                        });
                    }
                });
                preemption.joined();
                preemption.check_point();
                preemption.finish();
            })
        };
        while counted.load(Ordering::Relaxed) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let finished = preemption.suspend();
        assert!(!finished, "suspended before it was told to stop");
        let at_suspension = counted.load(Ordering::Relaxed);
        let since = Instant::now();
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(
            counted.load(Ordering::Relaxed),
            at_suspension,
            "nothing ran"
        );
        preemption.resume(since);
        assert!(preemption.suspended() >= Duration::from_millis(30));
        while counted.load(Ordering::Relaxed) == at_suspension {
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::Release);
        command.join().unwrap();
        assert!(preemption.is_finished());
    }

    /// A command thread waiting for an answer only the firmware gives,
    /// and only once its suspension is done (as a grow request's), is
    /// suspended without parking; once answered it runs nothing until
    /// resumed. (Counted in while it waited, the suspension waited for
    /// it, and the answer came from the wait's own timeout: a second,
    /// with the GPU idle, every time a client's command was switched out
    /// mid-grow.)
    #[test]
    fn a_thread_waiting_for_the_firmware_does_not_hold_up_a_suspension() {
        let preemption = Arc::new(Preemption::new());
        let (answer, answered) = std::sync::mpsc::channel::<u64>();
        let ran_after = Arc::new(AtomicU64::new(0));
        let command = {
            let (preemption, ran_after) = (Arc::clone(&preemption), Arc::clone(&ran_after));
            std::thread::spawn(move || {
                let blocks = preemption.waiting(|| answered.recv().unwrap());
                ran_after.store(blocks, Ordering::Release);
                preemption.check_point();
                preemption.finish();
            })
        };
        // The firmware's side on a thread of its own, so that a suspension
        // that never completes fails the test instead of hanging it.
        let (suspended, done) = std::sync::mpsc::channel();
        let firmware = {
            let preemption = Arc::clone(&preemption);
            std::thread::spawn(move || suspended.send(preemption.suspend()).unwrap())
        };
        let finished = done
            .recv_timeout(Duration::from_secs(20))
            .expect("the suspension waited for the thread waiting for the firmware");
        assert!(!finished, "suspended, not finished");
        firmware.join().unwrap();
        // The firmware answers; the command waits out its suspension.
        answer.send(45).unwrap();
        let since = Instant::now();
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(ran_after.load(Ordering::Acquire), 0, "ran while suspended");
        assert!(!preemption.is_finished());
        preemption.resume(since);
        command.join().unwrap();
        assert_eq!(ran_after.load(Ordering::Acquire), 45);
        assert!(preemption.is_finished());
    }

    /// A command that returns before it parks is reported finished, and
    /// a command that has returned is not suspended.
    #[test]
    fn a_command_that_returned_is_finished_not_suspended() {
        let preemption = Arc::new(Preemption::new());
        let command = {
            let preemption = Arc::clone(&preemption);
            std::thread::spawn(move || {
                // Returns without ever reaching a check.
                std::thread::sleep(Duration::from_millis(5));
                preemption.finish();
            })
        };
        assert!(preemption.suspend(), "it returned instead of parking");
        command.join().unwrap();
        assert!(preemption.is_finished());
        assert!(preemption.suspend());
    }
}
