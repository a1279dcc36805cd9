//! Where records' results live between the shard that learns them and the caller that waits:
//! blocks of result slots, one slot per record, handed out by each calling thread from its own
//! current block.
//!
//! Why blocks: one heap object with a mutex and a condvar per record (allocated by the caller,
//! freed by whichever side lets go last) was the largest per-record cost after the hand-off
//! itself. A block is allocated once per [`BLOCK_RECORDS`] records of one calling thread; a
//! record's future and its engine-side handle each hold the block and an index. Completing a
//! record writes its slot (`OnceLock`, so exactly once) and looks at one counter: only when a
//! future of the block is being waited on (a blocked thread or a registered waker) does the
//! shard take the block's lock, and then it wakes only the waker of that record (and blocked
//! threads, which re-check their own slot).
//!
//! A slot keeps the least the shard knows: the offset and timestamp of an appended record, or
//! its error. The topic and partition stay with the future, which the caller made knowing them,
//! so no per-record reference count on the topic name is touched by the shard.

use std::cell::RefCell;
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

use crate::error::ProduceError;
use crate::sync::{fence, AtomicUsize, Condvar, Mutex, MutexGuard, OnceLock, Ordering};

/// Records per block: a block is 256 slots of 32 bytes plus its header.
pub(crate) const BLOCK_RECORDS: usize = 256;

/// What the shard learned of one record.
#[derive(Debug)]
pub(crate) enum Outcome {
    Appended {
        offset: i64,
        timestamp: i64,
    },
    Failed(Box<ProduceError>),
    /// Its shard dropped it after the record reached the engine, without an answer: it may have
    /// been sent (the future reports `OutcomeUnknown` with its partition).
    DroppedInEngine,
}

#[derive(Default)]
struct Waiters {
    /// Registered wakers of pending futures, by slot index; allocated on the first
    /// registration in the block.
    wakers: Vec<Option<Waker>>,
    /// Threads blocked in `wait`: only then does a completion signal the condvar (a signal is
    /// a futex syscall whether or not anyone sleeps).
    blocked: usize,
}

impl Waiters {
    fn slot(&mut self, index: u32) -> &mut Option<Waker> {
        if self.wakers.is_empty() {
            self.wakers.resize_with(BLOCK_RECORDS, || None);
        }
        &mut self.wakers[index as usize]
    }
}

pub(crate) struct CompletionBlock {
    slots: Box<[OnceLock<Outcome>]>,
    /// Futures of this block that are registered as waiting (a waker, or a blocked thread).
    /// Completions read it and take `waiters` only when it is not zero.
    waiting: AtomicUsize,
    waiters: Mutex<Waiters>,
    ready: Condvar,
}

impl CompletionBlock {
    fn new() -> CompletionBlock {
        CompletionBlock {
            slots: (0..BLOCK_RECORDS).map(|_| OnceLock::new()).collect(),
            waiting: AtomicUsize::new(0),
            waiters: Mutex::new(Waiters::default()),
            ready: Condvar::new(),
        }
    }

    /// Writes slot `index` (first write wins) and wakes whoever waits for it.
    pub(crate) fn complete(&self, index: u32, outcome: Outcome) {
        if self.slots[index as usize].set(outcome).is_err() {
            return;
        }
        // Pairs with the fence in `register`: either the waiter sees the slot written, or this
        // sees its registration and takes the lock it holds while it checks.
        fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::Relaxed) == 0 {
            return;
        }
        let waker = {
            let mut waiters = self.lock();
            if waiters.blocked > 0 {
                self.ready.notify_all();
            }
            waiters.slot(index).take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    pub(crate) fn outcome(&self, index: u32) -> Option<&Outcome> {
        self.slots[index as usize].get()
    }

    fn lock(&self) -> MutexGuard<'_, Waiters> {
        self.waiters.lock().expect("completion block lock")
    }

    /// Records `waker` as slot `index`'s (replacing an older one of it); true if the slot is
    /// still empty after registering, so the caller may sleep.
    pub(crate) fn register_waker(&self, index: u32, waker: &Waker, registered: &mut bool) -> bool {
        let mut waiters = self.lock();
        match waiters.slot(index) {
            Some(w) if w.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
        if !*registered {
            *registered = true;
            self.waiting.fetch_add(1, Ordering::Relaxed);
        }
        fence(Ordering::SeqCst);
        self.outcome(index).is_none()
    }

    /// Forgets slot `index`'s waker (its future is gone). A waker registered before the slot
    /// was written is still woken, here if the completion has not got to it yet: whoever
    /// registered it may count on that wake (say, to time the record) even after taking the
    /// result some other way.
    pub(crate) fn unregister_waker(&self, index: u32) {
        let waker = {
            let mut waiters = self.lock();
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            let waker = waiters.slot(index).take();
            waker.filter(|_| self.outcome(index).is_some())
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Blocks the calling thread until slot `index` is written or `deadline` passes.
    pub(crate) fn wait(&self, index: u32, deadline: Option<Instant>) -> Option<&Outcome> {
        if let Some(outcome) = self.outcome(index) {
            return Some(outcome);
        }
        let mut waiters = self.lock();
        waiters.blocked += 1;
        self.waiting.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        loop {
            if self.outcome(index).is_some() {
                break;
            }
            waiters = match deadline {
                None => self.ready.wait(waiters).expect("completion block lock"),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left == Duration::ZERO {
                        break;
                    }
                    self.ready
                        .wait_timeout(waiters, left)
                        .expect("completion block lock")
                        .0
                }
            };
        }
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        waiters.blocked -= 1;
        drop(waiters);
        self.outcome(index)
    }
}

/// A calling thread's current block and the next free slot in it.
struct Cursor {
    block: Arc<CompletionBlock>,
    next: u32,
}

thread_local! {
    static CURSOR: RefCell<Option<Cursor>> = const { RefCell::new(None) };
}

/// A fresh slot from this thread's current block (a new block every [`BLOCK_RECORDS`] slots).
pub(crate) fn next_slot() -> (Arc<CompletionBlock>, u32) {
    CURSOR.with(|cursor| {
        let mut cursor = cursor.borrow_mut();
        let current = match cursor.as_mut() {
            Some(c) if (c.next as usize) < BLOCK_RECORDS => c,
            _ => cursor.insert(Cursor {
                block: Arc::new(CompletionBlock::new()),
                next: 0,
            }),
        };
        let index = current.next;
        current.next += 1;
        (current.block.clone(), index)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_fills_a_block_before_it_takes_a_new_one() {
        let (first, i0) = next_slot();
        let mut last = (first.clone(), i0);
        for _ in 1..BLOCK_RECORDS {
            last = next_slot();
        }
        // Either the first slot opened a block (then the block is full now) or it did not.
        let (next, j) = next_slot();
        assert!(
            Arc::ptr_eq(&next, &last.0) || j == 0,
            "a block is left only when full"
        );
        assert!((last.1 as usize) < BLOCK_RECORDS);
    }

    #[test]
    fn a_slot_is_written_once_and_the_first_write_wins() {
        let (block, i) = next_slot();
        block.complete(
            i,
            Outcome::Appended {
                offset: 7,
                timestamp: 1,
            },
        );
        block.complete(i, Outcome::DroppedInEngine);
        assert!(matches!(
            block.outcome(i),
            Some(Outcome::Appended { offset: 7, .. })
        ));
    }

    #[test]
    fn a_blocked_waiter_wakes_when_its_slot_is_written_from_another_thread() {
        let (block, i) = next_slot();
        let writer = {
            let block = block.clone();
            std::thread::spawn(move || block.complete(i, Outcome::DroppedInEngine))
        };
        let outcome = block.wait(i, None);
        assert!(matches!(outcome, Some(Outcome::DroppedInEngine)));
        writer.join().expect("writer");
        assert_eq!(block.waiting.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_wait_with_a_deadline_gives_up_when_nothing_comes() {
        let (block, i) = next_slot();
        assert!(block
            .wait(i, Some(Instant::now() + Duration::from_millis(5)))
            .is_none());
        assert_eq!(block.waiting.load(Ordering::Relaxed), 0);
    }
}

/// Model checks of a completion block (built with `--cfg loom`, see `crate::sync`): the shard
/// completing slots against futures that register wakers, threads blocked in `wait`, and
/// futures dropped while their slot is written, in every interleaving up to a bound on
/// preemptions. A lost wake is a deadlock loom reports.
#[cfg(all(test, loom))]
mod loom_tests {
    use std::future::Future;
    use std::pin::{pin, Pin};
    use std::task::{Context, Poll, Wake, Waker};

    use loom::sync::Arc;
    use loom::thread;

    use super::*;
    use crate::sync::check;

    /// A record's future, driving the block as `DeliveryFuture` does (`producer::delivery`):
    /// the slot if written, else register and look again; unregister when dropped registered.
    /// Resolves to the slot's offset (-1 for `DroppedInEngine`).
    struct Delivery {
        block: Arc<CompletionBlock>,
        index: u32,
        registered: bool,
    }

    fn offset(outcome: &Outcome) -> i64 {
        match outcome {
            Outcome::Appended { offset, .. } => *offset,
            _ => -1,
        }
    }

    impl Future for Delivery {
        type Output = i64;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<i64> {
            if let Some(outcome) = self.block.outcome(self.index) {
                return Poll::Ready(offset(outcome));
            }
            let this = &mut *self;
            if this
                .block
                .register_waker(this.index, cx.waker(), &mut this.registered)
            {
                return Poll::Pending;
            }
            Poll::Ready(offset(this.block.outcome(this.index).expect("written")))
        }
    }

    impl Drop for Delivery {
        fn drop(&mut self) {
            if self.registered {
                self.block.unregister_waker(self.index);
            }
        }
    }

    fn delivery(block: &Arc<CompletionBlock>, index: u32) -> Delivery {
        Delivery {
            block: block.clone(),
            index,
            registered: false,
        }
    }

    fn appended(offset: i64) -> Outcome {
        Outcome::Appended {
            offset,
            timestamp: 0,
        }
    }

    fn complete(
        block: &Arc<CompletionBlock>,
        index: u32,
        outcome: Outcome,
    ) -> thread::JoinHandle<()> {
        let block = block.clone();
        thread::spawn(move || block.complete(index, outcome))
    }

    /// A future waiting on its slot while two completions race for it: it is woken (or sees
    /// the slot at once), gets the first write, and the slot keeps it.
    #[test]
    fn loom_a_waiting_future_is_woken_with_the_one_completion_that_wins() {
        check(|| {
            let block = Arc::new(CompletionBlock::new());
            let first = complete(&block, 0, appended(7));
            let second = complete(&block, 0, Outcome::DroppedInEngine);
            let got = loom::future::block_on(delivery(&block, 0));
            first.join().unwrap();
            second.join().unwrap();
            assert_eq!(offset(block.outcome(0).expect("written")), got);
            assert_eq!(block.waiting.load(Ordering::Relaxed), 0);
        });
    }

    /// A thread blocked in `wait` on one slot and a future on another slot of the same block,
    /// completed by one shard: both get their result.
    #[test]
    fn loom_a_blocked_wait_and_a_future_of_one_block_both_get_their_results() {
        check(|| {
            let block = Arc::new(CompletionBlock::new());
            let waiter = {
                let block = block.clone();
                thread::spawn(move || offset(block.wait(0, None).expect("no deadline")))
            };
            let shard = {
                let block = block.clone();
                thread::spawn(move || {
                    block.complete(1, appended(1));
                    block.complete(0, appended(0));
                })
            };
            assert_eq!(loom::future::block_on(delivery(&block, 1)), 1);
            assert_eq!(waiter.join().unwrap(), 0);
            shard.join().unwrap();
            assert_eq!(block.waiting.load(Ordering::Relaxed), 0);
        });
    }

    /// Counts wakes.
    struct Wakes(loom::sync::atomic::AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A future polled once (registering its waker) and dropped while its slot is written:
    /// its waker is woken at most once, and exactly once if the slot was written before the
    /// drop (whoever registered it may count on that wake).
    #[test]
    fn loom_a_future_dropped_as_its_slot_completes_is_woken_at_most_once() {
        check(|| {
            let block = Arc::new(CompletionBlock::new());
            let wakes = std::sync::Arc::new(Wakes(loom::sync::atomic::AtomicUsize::new(0)));
            let waker = Waker::from(wakes.clone());
            let shard = complete(&block, 0, appended(3));
            let (registered, written_before_drop) = {
                let mut future = pin!(delivery(&block, 0));
                let _ = future.as_mut().poll(&mut Context::from_waker(&waker));
                (future.registered, block.outcome(0).is_some())
            };
            shard.join().unwrap();
            let woken = wakes.0.load(Ordering::SeqCst);
            assert!(woken <= 1, "woken {woken} times");
            if registered && written_before_drop {
                assert_eq!(woken, 1, "a registered waker of a written slot is woken");
            }
            if !registered {
                assert_eq!(woken, 0);
            }
            assert_eq!(block.waiting.load(Ordering::Relaxed), 0);
        });
    }
}
