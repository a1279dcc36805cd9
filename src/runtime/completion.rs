//! Where records' results live between the shard that learns them and the callers that wait:
//! one [`BatchCompletion`] per batch, written once by the shard for the whole batch.
//!
//! Why per batch: a result object per record (allocated by the caller, written and released by
//! the shard) makes the shard touch memory of every record at completion, and makes both
//! threads move a reference count per record. A batch's records are at consecutive offsets,
//! so the shard writes one outcome (the base offset and the broker's log-append time, or the
//! error) and each record's future, which knows its place in the batch and its own create
//! time, derives its result from it. The shard takes the waiters' lock once per batch, after it
//! wrote the outcome; a future registers its waker under the same lock after it found no
//! outcome, so each sees the other (no fence and no counter on the caller's path).
//!
//! A batch the broker refused as too large is split into smaller ones (each record keeps its
//! order); then each part writes the outcome of its own records (`parts`), which the futures
//! look up by their place. That path is rare and takes a lock.

use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::error::ProduceError;
use crate::sync::{AtomicBool, Condvar, Mutex, MutexGuard, OnceLock, Ordering};

/// What the shard learned of a run of records (a whole batch, or a part of a split one).
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// The run's first record is at `base_offset` (-1: the broker did not say, as with
    /// `acks=0`); `log_append_time` is every record's timestamp when the topic uses the
    /// broker's time, else -1 (each record keeps its create time).
    Appended {
        base_offset: i64,
        log_append_time: i64,
    },
    Failed(Box<ProduceError>),
    /// Its shard dropped it after the batch reached the engine, without an answer: it may
    /// have been sent (the future reports `OutcomeUnknown` with its partition).
    DroppedInEngine,
}

impl Outcome {
    /// The outcome of the record `offset_in_run` records after the run's first.
    pub(crate) fn shifted(&self, offset_in_run: u32) -> Outcome {
        match self {
            Outcome::Appended {
                base_offset,
                log_append_time,
            } => Outcome::Appended {
                base_offset: if *base_offset >= 0 {
                    base_offset + offset_in_run as i64
                } else {
                    -1
                },
                log_append_time: *log_append_time,
            },
            other => other.clone(),
        }
    }
}

#[derive(Default)]
struct Waiters {
    /// Registered wakers of pending futures, by record index: grown to the highest index that
    /// registered (a driver that polls every record's future once registers each in turn).
    wakers: Vec<Option<Waker>>,
    /// Threads blocked in `wait`: only then does a completion signal the condvar (a signal is
    /// a futex syscall whether or not anyone sleeps).
    blocked: usize,
}

/// The results of one batch's records.
///
/// Invariant: each record's outcome is written once (the first write wins): by `complete`
/// for the whole batch, or by `complete_part` for the records of one part of a split batch.
pub(crate) struct BatchCompletion {
    whole: OnceLock<Outcome>,
    /// Set before the first part is written: the records' outcomes are in `parts`.
    split: AtomicBool,
    /// (first record, record count, outcome) of each part written so far.
    parts: Mutex<Vec<(u32, u32, Outcome)>>,
    waiters: Mutex<Waiters>,
    ready: Condvar,
}

impl BatchCompletion {
    pub(crate) fn new() -> BatchCompletion {
        BatchCompletion {
            whole: OnceLock::new(),
            split: AtomicBool::new(false),
            parts: Mutex::new(Vec::new()),
            waiters: Mutex::new(Waiters::default()),
            ready: Condvar::new(),
        }
    }

    /// A completion whose every record already has `outcome`.
    pub(crate) fn done(outcome: Outcome) -> BatchCompletion {
        let completion = BatchCompletion::new();
        let _ = completion.whole.set(outcome);
        completion
    }

    /// Writes the outcome of every record of the batch, and wakes whoever waits.
    pub(crate) fn complete(&self, outcome: Outcome) {
        if self.whole.set(outcome).is_ok() {
            self.wake();
        }
    }

    /// Writes the outcome of `count` records from record `first` on (a part of a split batch),
    /// and wakes whoever waits.
    pub(crate) fn complete_part(&self, first: u32, count: u32, outcome: Outcome) {
        {
            let mut parts = self.parts.lock().expect("batch parts lock");
            if parts
                .iter()
                .any(|&(f, c, _)| f < first + count && first < f + c)
            {
                return;
            }
            parts.push((first, count, outcome));
            self.split.store(true, Ordering::Release);
        }
        self.wake();
    }

    fn wake(&self) {
        // The outcome was written before this lock: a future that registers after it finds
        // the outcome under the lock, one that registered before is woken here.
        let wakers = {
            let mut waiters = self.lock();
            if waiters.blocked > 0 {
                self.ready.notify_all();
            }
            std::mem::take(&mut waiters.wakers)
        };
        for waker in wakers.into_iter().flatten() {
            waker.wake();
        }
    }

    /// Record `index`'s outcome, if written.
    pub(crate) fn outcome(&self, index: u32) -> Option<Outcome> {
        if let Some(whole) = self.whole.get() {
            return Some(whole.shifted(index));
        }
        if !self.split.load(Ordering::Acquire) {
            return None;
        }
        let parts = self.parts.lock().expect("batch parts lock");
        parts
            .iter()
            .find(|&&(first, count, _)| first <= index && index < first + count)
            .map(|(first, _, outcome)| outcome.shifted(index - first))
    }

    fn lock(&self) -> MutexGuard<'_, Waiters> {
        self.waiters.lock().expect("batch completion lock")
    }

    /// Records `waker` as record `index`'s (replacing an older one of it); true if the outcome
    /// is still unknown, so the caller may sleep (the completion will wake it).
    pub(crate) fn register_waker(&self, index: u32, waker: &Waker) -> bool {
        let mut waiters = self.lock();
        if self.outcome(index).is_some() {
            return false;
        }
        let index = index as usize;
        if waiters.wakers.len() <= index {
            waiters.wakers.resize_with(index + 1, || None);
        }
        match &mut waiters.wakers[index] {
            Some(w) if w.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
        true
    }

    /// Forgets record `index`'s waker (its future is gone before its outcome was known). Once
    /// the outcome is known the completion has taken every waker already, so there is nothing
    /// to forget and the lock is not taken.
    pub(crate) fn unregister_waker(&self, index: u32) {
        if self.outcome(index).is_some() {
            return;
        }
        if let Some(slot) = self.lock().wakers.get_mut(index as usize) {
            *slot = None;
        }
    }

    /// Record `index`'s outcome, or `Pending` with `cx`'s waker recorded for it: the completion
    /// wakes it when the outcome is written. A future that got `Pending` and is dropped first
    /// calls [`unregister_waker`](Self::unregister_waker).
    pub(crate) fn poll_outcome(&self, index: u32, cx: &Context<'_>) -> Poll<Outcome> {
        if let Some(outcome) = self.outcome(index) {
            return Poll::Ready(outcome);
        }
        if self.register_waker(index, cx.waker()) {
            return Poll::Pending;
        }
        // Written between the two looks.
        Poll::Ready(self.outcome(index).expect("written"))
    }

    /// Blocks the calling thread until record `index`'s outcome is written or `deadline`
    /// passes.
    pub(crate) fn wait(&self, index: u32, deadline: Option<Instant>) -> Option<Outcome> {
        if let Some(outcome) = self.outcome(index) {
            return Some(outcome);
        }
        let mut waiters = self.lock();
        waiters.blocked += 1;
        loop {
            if self.outcome(index).is_some() {
                break;
            }
            waiters = match deadline {
                None => self.ready.wait(waiters).expect("batch completion lock"),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left == Duration::ZERO {
                        break;
                    }
                    self.ready
                        .wait_timeout(waiters, left)
                        .expect("batch completion lock")
                        .0
                }
            };
        }
        waiters.blocked -= 1;
        drop(waiters);
        self.outcome(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn appended(base_offset: i64) -> Outcome {
        Outcome::Appended {
            base_offset,
            log_append_time: -1,
        }
    }

    fn offset_of(outcome: Option<Outcome>) -> Option<i64> {
        match outcome {
            Some(Outcome::Appended { base_offset, .. }) => Some(base_offset),
            _ => None,
        }
    }

    #[test]
    fn each_record_of_a_completed_batch_is_at_the_base_offset_plus_its_place() {
        let completion = BatchCompletion::new();
        assert!(completion.outcome(3).is_none());
        completion.complete(appended(100));
        assert_eq!(offset_of(completion.outcome(0)), Some(100));
        assert_eq!(offset_of(completion.outcome(3)), Some(103));
    }

    #[test]
    fn the_first_outcome_written_wins() {
        let completion = BatchCompletion::new();
        completion.complete(appended(7));
        completion.complete(Outcome::Failed(Box::new(ProduceError::Closed)));
        assert_eq!(offset_of(completion.outcome(1)), Some(8));
    }

    #[test]
    fn the_parts_of_a_split_batch_give_each_record_its_own_parts_outcome() {
        let completion = BatchCompletion::new();
        completion.complete_part(0, 2, appended(50));
        assert!(
            completion.outcome(2).is_none(),
            "the second part is not known yet"
        );
        completion.complete_part(2, 3, appended(90));
        assert_eq!(offset_of(completion.outcome(1)), Some(51));
        assert_eq!(offset_of(completion.outcome(2)), Some(90));
        assert_eq!(offset_of(completion.outcome(4)), Some(92));
        completion.complete_part(2, 1, appended(0));
        assert_eq!(
            offset_of(completion.outcome(2)),
            Some(90),
            "a record's outcome is written once"
        );
    }

    #[test]
    fn an_unknown_base_offset_stays_unknown_for_every_record() {
        let completion = BatchCompletion::new();
        completion.complete(appended(-1));
        assert_eq!(offset_of(completion.outcome(5)), Some(-1));
    }
}

/// Model checks of the completion's hand-off (built with `--cfg loom`, see `crate::sync`):
/// every interleaving, up to a bound on preemptions, of a shard completing a batch while a
/// caller waits on one of its records. A lost wake is a deadlock loom reports.
#[cfg(all(test, loom))]
mod loom_tests {
    use std::task::Poll;

    use loom::sync::Arc;
    use loom::thread;

    use super::*;
    use crate::sync::check;

    fn appended() -> Outcome {
        Outcome::Appended {
            base_offset: 7,
            log_append_time: -1,
        }
    }

    /// A record's future awaited while its batch completes is woken: either its registration,
    /// under the lock, finds the outcome, or the completion, which takes the lock after writing
    /// the outcome, finds the registration.
    #[test]
    fn loom_a_record_awaited_while_its_batch_completes_is_never_stranded() {
        check(|| {
            let completion = Arc::new(BatchCompletion::new());
            let shard = {
                let completion = completion.clone();
                thread::spawn(move || completion.complete(appended()))
            };
            let outcome = loom::future::block_on(std::future::poll_fn(|cx| {
                if let Some(outcome) = completion.outcome(2) {
                    return Poll::Ready(outcome);
                }
                if completion.register_waker(2, cx.waker()) {
                    Poll::Pending
                } else {
                    Poll::Ready(completion.outcome(2).expect("written"))
                }
            }));
            assert!(matches!(outcome, Outcome::Appended { base_offset: 9, .. }));
            shard.join().expect("shard");
        });
    }

    /// A thread blocked on a record is woken by its batch's completion.
    #[test]
    fn loom_a_thread_blocked_on_a_record_is_woken_by_its_batchs_completion() {
        check(|| {
            let completion = Arc::new(BatchCompletion::new());
            let shard = {
                let completion = completion.clone();
                thread::spawn(move || completion.complete(appended()))
            };
            assert!(completion.wait(0, None).is_some());
            shard.join().expect("shard");
        });
    }
}
