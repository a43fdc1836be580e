//! The GPU's many cores, as the host runs them.
//!
//! The hardware runs a compute grid's threadgroups, and a render pass's
//! tiles, on many USC cores at once, in no order a program may rely on.
//! The simulator spreads such independent work items over host threads:
//! each thread keeps its own scratch state (program cache, tilebuffer)
//! and claims the next unclaimed item until none is left. So that the
//! outcome does not depend on the thread count or on scheduling, a
//! failure stops the claiming of later items, and the failure reported is
//! that of the lowest-numbered item that failed, as one thread running
//! the items in order would have reported it. Items are numbered, never
//! listed: a grid or a pass of 2^40 items costs no memory up front.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::fault::EngineResult;
use crate::preempt::{ForkedThread, Preemption};

/// Runs items `0..count` on up to `workers` host threads, threads of the
/// command `preemption` suspends. Each thread
/// makes its scratch state with `scratch` and runs `item(&mut state,
/// index)` for each index it claims. Returns the failure of the
/// lowest-numbered item that failed, if any.
pub fn run_items<S>(
    count: u64,
    workers: usize,
    preemption: &Preemption,
    scratch: impl Fn() -> S + Sync,
    item: impl Fn(&mut S, u64) -> Result<(), EngineResult> + Sync,
) -> Result<(), EngineResult> {
    run_items_then(count, workers, preemption, scratch, item, |_| Ok(()))
}

/// [`run_items`], and then, on each thread once it claims no more items,
/// `finish(&mut state)` (a core's helper program is told to end this
/// way). A failure of `finish` is reported when no item failed.
pub fn run_items_then<S>(
    count: u64,
    workers: usize,
    preemption: &Preemption,
    scratch: impl Fn() -> S + Sync,
    item: impl Fn(&mut S, u64) -> Result<(), EngineResult> + Sync,
    finish: impl Fn(&mut S) -> Result<(), EngineResult> + Sync,
) -> Result<(), EngineResult> {
    let next = AtomicU64::new(0);
    let first_failure = AtomicU64::new(u64::MAX);
    let failures = Mutex::new(Vec::<(u64, EngineResult)>::new());
    let work = || {
        let mut state = scratch();
        loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            // Items after a failure need not run: their outcome cannot
            // be reported.
            if index >= count || index > first_failure.load(Ordering::Relaxed) {
                break;
            }
            if let Err(failure) = item(&mut state, index) {
                first_failure.fetch_min(index, Ordering::Relaxed);
                failures
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((index, failure));
            }
        }
        if let Err(failure) = finish(&mut state) {
            failures
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((u64::MAX, failure));
        }
    };
    let threads = usize::try_from(count).unwrap_or(usize::MAX).min(workers);
    if threads <= 1 {
        work();
    } else {
        preemption.fork(threads);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    let _counted_out = ForkedThread(preemption);
                    work()
                });
            }
        });
        preemption.joined();
    }
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    match failures.into_iter().min_by_key(|(index, _)| *index) {
        Some((_, failure)) => Err(failure),
        None => Ok(()),
    }
}

/// The longest [`Receiving::recv`] polls before it blocks.
const POLL_BEFORE_BLOCKING_MAX: std::time::Duration = std::time::Duration::from_millis(1);
/// The shortest.
const POLL_BEFORE_BLOCKING_MIN: std::time::Duration = std::time::Duration::from_micros(200);

/// One end of a hand-off between two of a command's threads that send
/// each other work within a batch's time: it receives by polling for a
/// while before blocking. A thread blocked in the kernel and woken on an
/// idle CPU (a virtual machine's above all) started up to half a
/// millisecond later, as long as shading a batch of vertices takes: the
/// threads shading and binning a draw took turns instead of running side
/// by side. Polling is only worth it while the other thread runs on
/// another CPU: the time polled (between [`POLL_BEFORE_BLOCKING_MIN`] and
/// [`POLL_BEFORE_BLOCKING_MAX`]) doubles each time a message came while
/// polling and halves each time it did not, so on a CPU shared with the
/// sender, or a busy host, this end soon polls only briefly. (Without
/// the floor, the bunny's frame at 1024² took 4-5 ms more than with a
/// fixed millisecond: threads briefly sharing a CPU stopped polling for
/// good.)
pub(crate) struct Receiving<T> {
    receiver: std::sync::mpsc::Receiver<T>,
    polling: std::time::Duration,
}

impl<T> Receiving<T> {
    pub(crate) fn new(receiver: std::sync::mpsc::Receiver<T>) -> Receiving<T> {
        Receiving {
            receiver,
            polling: POLL_BEFORE_BLOCKING_MAX,
        }
    }

    /// The next message if one has come, without waiting.
    pub(crate) fn try_recv(&mut self) -> Result<T, std::sync::mpsc::TryRecvError> {
        self.receiver.try_recv()
    }

    /// The next message; an error once the sender is gone.
    pub(crate) fn recv(&mut self) -> Result<T, std::sync::mpsc::RecvError> {
        use std::sync::mpsc::{RecvError, TryRecvError};
        let polling_since = std::time::Instant::now();
        // (The clock is read every 64 polls: reading it each time was a
        // percent of the bunny's frame.)
        for poll in 0u32.. {
            match self.receiver.try_recv() {
                Ok(message) => {
                    self.polling = (self.polling * 2).min(POLL_BEFORE_BLOCKING_MAX);
                    return Ok(message);
                }
                Err(TryRecvError::Disconnected) => return Err(RecvError),
                Err(TryRecvError::Empty)
                    if poll % 64 == 63 && polling_since.elapsed() >= self.polling =>
                {
                    break;
                }
                Err(TryRecvError::Empty) => std::hint::spin_loop(),
            }
        }
        self.polling = (self.polling / 2).max(POLL_BEFORE_BLOCKING_MIN);
        self.receiver.recv()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-off end polls less after a message that did not come while
    /// it polled, and more after one that did; it receives in order, and
    /// errs once the sender is gone.
    #[test]
    fn a_receiving_end_polls_as_long_as_polling_paid() {
        let (sender, receiver) = std::sync::mpsc::channel();
        let mut receiving = Receiving::new(receiver);
        assert_eq!(receiving.polling, POLL_BEFORE_BLOCKING_MAX);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                // Long after the 1 ms of polling.
                std::thread::sleep(std::time::Duration::from_millis(50));
                sender.send(1).unwrap();
                sender.send(2).unwrap();
            });
            assert_eq!(receiving.recv(), Ok(1));
        });
        assert_eq!(receiving.polling, POLL_BEFORE_BLOCKING_MAX / 2);
        // Waiting already: found while polling.
        assert_eq!(receiving.recv(), Ok(2));
        assert_eq!(receiving.polling, POLL_BEFORE_BLOCKING_MAX);
        drop(sender);
        assert!(receiving.recv().is_err());
    }

    fn fault_at(index: u64) -> EngineResult {
        EngineResult::Fault {
            address: index,
            unit: 0,
            access: 0,
            reason: 0,
        }
    }

    #[test]
    fn the_lowest_failing_item_is_reported_whatever_the_thread_count() {
        for workers in [1, 2, 7] {
            let ran = AtomicU64::new(0);
            let result = run_items(
                1000,
                workers,
                &Preemption::new(),
                || (),
                |_, index| {
                    ran.fetch_add(1, Ordering::Relaxed);
                    if index % 300 == 299 {
                        Err(fault_at(index))
                    } else {
                        Ok(())
                    }
                },
            );
            assert_eq!(result, Err(fault_at(299)), "{workers} workers");
            // Items past the first failure are not all run.
            assert!(ran.load(Ordering::Relaxed) < 1000, "{workers} workers");
        }
    }

    #[test]
    fn every_item_runs_once_and_scratch_is_per_thread() {
        let seen = Mutex::new(vec![0u32; 500]);
        let scratches = AtomicU64::new(0);
        run_items(
            500,
            3,
            &Preemption::new(),
            || scratches.fetch_add(1, Ordering::Relaxed),
            |_, index| {
                seen.lock().unwrap()[index as usize] += 1;
                Ok(())
            },
        )
        .unwrap();
        assert!(seen.into_inner().unwrap().iter().all(|&n| n == 1));
        assert!((1..=3).contains(&scratches.into_inner()));
    }

    #[test]
    fn a_huge_count_needs_no_memory_up_front() {
        let result = run_items(
            1 << 40,
            2,
            &Preemption::new(),
            || (),
            |_, index| {
                if index == 5 {
                    Err(fault_at(5))
                } else {
                    Ok(())
                }
            },
        );
        assert_eq!(result, Err(fault_at(5)));
    }
}
