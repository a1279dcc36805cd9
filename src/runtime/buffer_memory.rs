//! `buffer.memory`, shared by the application threads that reserve it and the shards that
//! give it back, with the sinks through which the threads that complete records return their
//! bytes.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::time::{Duration, Instant};

use crate::engine::batch_memory::{batch_slack, BatchMemory};
use crate::error::ProduceError;
use crate::sync::{fence, AtomicUsize, Condvar, Mutex, Ordering};

use super::waiters::RoomWaiters;

/// `buffer.memory`: bytes of records accepted and not yet completed. `send` blocks up to
/// `max.block.ms` for room, then fails with `BufferExhausted`.
///
/// The count is one atomic word: a reservation with room is one compare-and-swap, and a release
/// one subtraction (once per shard turn, see [`release_sink`]). The mutex and condvar are only
/// for callers that found the buffer full; a release signals only when one of them waits.
pub(crate) struct BufferMemory {
    /// Names this producer's memory in the release sinks of the threads that free it.
    id: MemoryId,
    limit: usize,
    used: AtomicUsize,
    /// Callers blocked in `reserve`.
    waiters: AtomicUsize,
    wait_lock: Mutex<()>,
    freed: Condvar,
    /// Tasks of `send_async` waiting for room.
    pub(crate) async_waiters: RoomWaiters,
    /// Nanoseconds callers spent blocked in `reserve` (`bufferpool-wait-time-ns-total`);
    /// written only on the path that waits.
    wait_ns: AtomicU64,
    /// Sends that gave up waiting for room (`buffer-exhausted-total`).
    exhausted: AtomicU64,
    /// The producer is closing: callers stop waiting for room (`close`).
    closed: AtomicBool,
}

impl BufferMemory {
    pub(crate) fn new(limit: usize) -> Self {
        /// Ids are process-unique (0 is no memory's), so that no sink confuses two producers.
        static IDS: AtomicU32 = AtomicU32::new(1);
        BufferMemory {
            id: MemoryId(IDS.fetch_add(1, Ordering::Relaxed)),
            limit,
            used: AtomicUsize::new(0),
            waiters: AtomicUsize::new(0),
            wait_lock: Mutex::new(()),
            freed: Condvar::new(),
            async_waiters: RoomWaiters::default(),
            wait_ns: AtomicU64::new(0),
            exhausted: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// The id a release names this memory by.
    pub(crate) fn id(&self) -> MemoryId {
        self.id
    }

    /// Takes `bytes` if they fit now.
    pub(crate) fn try_reserve(&self, bytes: usize) -> bool {
        self.try_take(bytes, self.limit)
    }

    /// Takes `bytes` if the count stays within `ceiling`.
    fn try_take(&self, bytes: usize, ceiling: usize) -> bool {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            if used + bytes > ceiling {
                return false;
            }
            match self.used.compare_exchange_weak(
                used,
                used + bytes,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => used = now,
            }
        }
    }

    /// Takes `bytes`, waiting for room until the deadline `deadline()` gives (asked only when
    /// the buffer is full, so that a send with room reads no clock here).
    pub(crate) fn reserve(
        &self,
        bytes: usize,
        deadline: impl FnOnce() -> Instant,
    ) -> Result<(), ProduceError> {
        if self.try_reserve(bytes) {
            return Ok(());
        }
        let started = Instant::now();
        let deadline = deadline();
        let mut guard = self.wait_lock.lock().expect("buffer memory lock");
        self.waiters.fetch_add(1, Ordering::Relaxed);
        // Pairs with the fence in `release`: either this sees the freed bytes, or the release
        // sees this waiter and signals under the lock held here.
        fence(Ordering::SeqCst);
        let result = loop {
            // Under the lock `close` signals under: a close is seen here or wakes the wait.
            if self.closed.load(Ordering::Acquire) {
                break Err(ProduceError::Closed);
            }
            if self.try_reserve(bytes) {
                break Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                self.exhausted_once();
                break Err(ProduceError::BufferExhausted {
                    buffer_memory: self.limit,
                    waited: now - started,
                });
            }
            guard = self
                .freed
                .wait_timeout(guard, deadline - now)
                .expect("buffer memory lock")
                .0;
        };
        self.waiters.fetch_sub(1, Ordering::Relaxed);
        drop(guard);
        self.add_wait(started.elapsed());
        result
    }

    /// Time a sender spent waiting for room (a blocked `send`, a `send_async` that waited).
    pub(crate) fn add_wait(&self, waited: Duration) {
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.wait_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// A send gave up waiting for room.
    pub(crate) fn exhausted_once(&self) {
        self.exhausted.fetch_add(1, Ordering::Relaxed);
    }

    /// Sends that gave up waiting for room, in all.
    pub(crate) fn exhausted(&self) -> u64 {
        self.exhausted.load(Ordering::Relaxed)
    }

    /// Threads blocked in `send` waiting for room now (`waiting-threads`).
    pub(crate) fn waiting_threads(&self) -> u64 {
        self.waiters.load(Ordering::Relaxed) as u64
    }

    /// Nanoseconds senders have spent waiting for room, in all.
    pub(crate) fn wait_ns(&self) -> u64 {
        self.wait_ns.load(Ordering::Relaxed)
    }

    /// The producer is closing: every caller waiting for room stops waiting (a blocked
    /// `reserve` fails with `Closed`; an async waiter is woken and finds the producer closed).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        drop(self.wait_lock.lock().expect("buffer memory lock"));
        self.freed.notify_all();
        self.async_waiters.wake_all();
    }

    pub(crate) fn release(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        self.used.fetch_sub(bytes, Ordering::AcqRel);
        fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::Relaxed) > 0 {
            drop(self.wait_lock.lock().expect("buffer memory lock"));
            self.freed.notify_all();
        }
        self.async_waiters
            .wake_fitting(self.limit.saturating_sub(self.used.load(Ordering::Acquire)));
    }

    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Whether `idle` bytes of idle batch buffers fit beside the batches in use, within the
    /// limit: the producer's pool keeps a returned buffer only then. What this thread's
    /// finished batches still owe the count (its release sink, given back at the end of its
    /// turn) is not in use: those batches' buffers are the ones coming back, and counting
    /// them in `used` as well would refuse every buffer a producer at the bound gives back.
    pub(crate) fn idle_fits(&self, idle: usize) -> bool {
        let live = self.used().saturating_sub(release_sink::pending(self));
        live.saturating_add(idle) <= self.limit()
    }

    /// The producer is closing (`close`).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// Which producer's `buffer.memory` a reservation belongs to: a record's handle carries it
/// instead of a reference to the memory (a shared count touched twice per record by two
/// threads), and its completion names it to the completing thread's release sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemoryId(u32);

/// Batches charge the unused capacity of their buffers to the same count as records, into a
/// slack above `buffer.memory` that callers never use (`engine::batch_memory`).
impl BatchMemory for BufferMemory {
    fn try_charge(&self, bytes: usize) -> bool {
        let ceiling = self.limit.saturating_add(batch_slack(self.limit));
        if self.try_take(bytes, ceiling) {
            return true;
        }
        // What this turn's completions freed is still in the shard's sink: give it back first.
        release_sink::flush_to(self);
        self.try_take(bytes, ceiling)
    }

    /// Through the thread's release sink: a shard drops batches only on its own thread, and
    /// gives back what they held once per turn with its records'.
    fn release(&self, bytes: usize) {
        release_sink::release(self.id, bytes);
    }
}

/// Memory returned by records completed on this thread and not yet given back to their
/// `BufferMemory`. A record's handle does not hold its producer's `BufferMemory` (that would be
/// a shared reference count touched twice per record by two threads); whoever completes
/// handles gives the sum back with [`flush_to`](release_sink::flush_to): a shard at the end of
/// every turn, a caller right after a record it could not queue.
pub(crate) mod release_sink {
    use std::cell::{Cell, RefCell};

    use super::{BufferMemory, MemoryId};

    thread_local! {
        /// The bytes owed to one producer's memory: the one whose records this thread
        /// completes (a shard's own producer), checked with one comparison per record.
        static PENDING: Cell<(MemoryId, usize)> = const { Cell::new((MemoryId(0), 0)) };
        /// What is owed to any other producer's memory: a callback that sends on another
        /// producer may drop that producer's record here (its shard refused it).
        static OTHERS: RefCell<Vec<(MemoryId, usize)>> = const { RefCell::new(Vec::new()) };
    }

    /// `bytes` of `memory`'s reservations are free; given back at this thread's next
    /// [`flush_to`] of that memory.
    pub(crate) fn release(memory: MemoryId, bytes: usize) {
        PENDING.with(|pending| {
            let (owner, owed) = pending.get();
            if owner == memory || owed == 0 {
                pending.set((memory, owed + bytes));
            } else {
                OTHERS.with(|others| {
                    let mut others = others.borrow_mut();
                    match others.iter_mut().find(|(id, _)| *id == memory) {
                        Some((_, owed)) => *owed += bytes,
                        None => others.push((memory, bytes)),
                    }
                });
            }
        });
    }

    /// Gives what this thread's completions freed of `memory`'s reservations back to it,
    /// and nothing owed to another producer's memory.
    pub(crate) fn flush_to(memory: &BufferMemory) {
        let id = memory.id();
        let mut bytes = PENDING.with(|pending| {
            let (owner, owed) = pending.get();
            if owner == id {
                pending.set((id, 0));
                owed
            } else {
                0
            }
        });
        OTHERS.with(|others| {
            let mut others = others.borrow_mut();
            if let Some(at) = others.iter().position(|(owner, _)| *owner == id) {
                bytes += others.swap_remove(at).1;
            }
        });
        memory.release(bytes);
    }

    /// What this thread's completions freed of `memory`'s reservations and have not given
    /// back yet: bytes `used` still counts whose batches are done.
    pub(crate) fn pending(memory: &BufferMemory) -> usize {
        let id = memory.id();
        let owed = PENDING.with(|pending| match pending.get() {
            (owner, owed) if owner == id => owed,
            _ => 0,
        });
        owed + OTHERS.with(|others| {
            others
                .borrow()
                .iter()
                .find(|(owner, _)| *owner == id)
                .map_or(0, |(_, owed)| *owed)
        })
    }

    /// Flushes on drop: a shard that unwinds still returns what its dropped records held.
    pub(crate) struct FlushOnDrop<'a>(pub &'a BufferMemory);

    impl Drop for FlushOnDrop<'_> {
        fn drop(&mut self) {
            flush_to(self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_batch_whose_release_is_pending_leaves_room_for_its_buffer_to_idle() {
        let memory = BufferMemory::new(10_000);
        assert!(memory.try_reserve(10_000), "batches fill the buffer");
        assert!(!memory.idle_fits(1), "every byte is in use");
        // A batch of 4,000 bytes completes on this thread; its bytes go back at the end of
        // the turn, and its buffer to the pool now.
        release_sink::release(memory.id(), 4_000);
        assert_eq!(memory.used(), 10_000, "not given back yet");
        assert!(memory.idle_fits(4_000), "its own buffer fits");
        assert!(!memory.idle_fits(4_001), "nothing more than it");
        release_sink::flush_to(&memory);
        assert_eq!(memory.used(), 6_000);
        assert!(memory.idle_fits(4_000) && !memory.idle_fits(4_001));
    }

    #[test]
    fn batches_charge_into_an_eighth_above_the_limit_that_callers_never_use() {
        let memory = BufferMemory::new(8000);
        assert!(memory.try_reserve(8000), "callers fill the buffer");
        assert!(!memory.try_reserve(1), "callers stop at the limit");
        assert!(memory.try_charge(600), "a batch charges into the slack");
        assert!(memory.try_charge(400), "up to an eighth above the limit");
        assert!(!memory.try_charge(1), "and no further");
        assert_eq!(memory.used(), 9000);
        // Releases go through the thread's sink; a refused charge gives them back first.
        BatchMemory::release(&memory, 1000);
        assert_eq!(memory.used(), 9000, "still in the sink");
        assert!(
            memory.try_charge(1000),
            "the sink's bytes count once flushed"
        );
        assert_eq!(memory.used(), 9000);
        release_sink::flush_to(&memory);
    }
}

/// Model checks of `buffer.memory` (built with `--cfg loom`, see `crate::sync`): callers
/// blocked for room against the releases that make it, in every interleaving up to a bound on
/// preemptions. loom has no time: the deadline is never reached, and a blocked `reserve`
/// nobody wakes is a deadlock loom reports.
#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::Arc;
    use loom::thread;

    use super::*;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }

    /// A full buffer, two callers waiting for 5 bytes each and two releases of 5: each
    /// release's room reaches a waiter, and the count never goes below zero or past the limit.
    #[test]
    fn loom_callers_blocked_for_room_are_woken_by_the_releases_that_make_it() {
        crate::sync::check(|| {
            let memory = Arc::new(BufferMemory::new(10));
            assert!(memory.try_reserve(10));
            let caller = {
                let memory = memory.clone();
                thread::spawn(move || memory.reserve(5, far).is_ok())
            };
            let shard = {
                let memory = memory.clone();
                thread::spawn(move || {
                    for _ in 0..2 {
                        memory.release(5);
                        assert!(memory.used() <= 10);
                    }
                })
            };
            assert!(memory.reserve(5, far).is_ok());
            assert!(caller.join().unwrap());
            shard.join().unwrap();
            assert_eq!(memory.used(), 10);
            assert_eq!(memory.waiting_threads(), 0);
        });
    }
}
