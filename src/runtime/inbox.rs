//! A shard's inbox: the one queue through which application threads hand a shard its records
//! and commands (flush, barrier, close), in one order.
//!
//! Why a mutex-guarded deque and not a channel of boxed messages: a channel message per record
//! costs a heap object the shard frees (glibc then frees into the caller's arena under its
//! lock) and, when the shard sleeps, a foreign wake per record. Here a caller pushes the
//! record by value under a lock held for one `push_back`; the shard takes the whole deque at
//! once by swapping it with its own empty one, so both sides reuse the same two allocations.
//! A shard is woken only on the push that finds the inbox empty while the shard is parked:
//! one wake per burst of records, never one per record. The lock is contended only by calling
//! threads racing each other and by the shard's swap, which holds it for a pointer exchange.
//!
//! Order: the lock gives every push one total order, the order the shard handles them in. So
//! records from one thread to one partition stay in send order, records from several threads
//! to one partition have one order that the log and the acknowledgements agree on, and a
//! flush or barrier is behind every record pushed before it.
//!
//! Bound: a record is pushed only after its bytes (with its share of the queue's memory, see
//! `producer::RECORD_MEMORY_OVERHEAD`) were reserved in `buffer.memory`; other commands are
//! one per application call. A closed inbox refuses pushes, so nothing is left behind in a
//! queue nobody reads.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use super::shard::ShardCommand;

/// Entries a deque keeps allocated however idle the producer is. A burst larger than this
/// grows the deque; it shrinks back only after `SPARSE_TAKES_BEFORE_SHRINK` takes in a row
/// used under an eighth of it. Shrinking after every burst made a producer under sustained load
/// (whose inbox is always past this size) reallocate, copy and page-fault a fresh deque on
/// every take. What stays allocated is bounded by `buffer.memory`, which charges each queued
/// record for a slot in both deques (`producer::RECORD_MEMORY_OVERHEAD`).
const RETAINED_CAPACITY: usize = 1 << 14;
const SPARSE_TAKES_BEFORE_SHRINK: u32 = 64;

pub(crate) struct ShardInbox {
    queue: Mutex<Queue>,
    /// The shard is parked (or about to park) on `waker`: the push that finds the inbox empty
    /// wakes it. Cleared by whoever wakes it.
    parked: AtomicBool,
    waker: Mutex<Option<Waker>>,
    /// Takes in a row that used under an eighth of a grown deque; the shard's alone.
    sparse_takes: AtomicU32,
}

struct Queue {
    commands: VecDeque<ShardCommand>,
    /// Set by the push of the shard's `Close`: nothing is accepted behind it.
    closed: bool,
}

impl Default for ShardInbox {
    fn default() -> Self {
        ShardInbox {
            queue: Mutex::new(Queue {
                commands: VecDeque::new(),
                closed: false,
            }),
            parked: AtomicBool::new(false),
            waker: Mutex::new(None),
            sparse_takes: AtomicU32::new(0),
        }
    }
}

impl ShardInbox {
    /// Queues `command` behind everything pushed before it; gives it back when the shard has
    /// closed (or is closing) its inbox.
    // The command comes back by value (no box on this path): the caller drops it, which
    // answers its record.
    #[allow(clippy::result_large_err)]
    pub(crate) fn push(&self, command: ShardCommand) -> Result<(), ShardCommand> {
        self.push_with(|| command).map_err(|f| f())
    }

    /// Queues the command `make` builds under the inbox's lock (so that, say, a completion
    /// slot is handed out in queue order); gives `make` back, not run, when the inbox is closed.
    pub(crate) fn push_with<F: FnOnce() -> ShardCommand>(&self, make: F) -> Result<(), F> {
        let was_empty = {
            let mut queue = self.queue.lock().expect("inbox lock");
            if queue.closed {
                return Err(make);
            }
            queue.commands.push_back(make());
            queue.commands.len() == 1
        };
        if was_empty {
            self.wake_shard();
        }
        Ok(())
    }

    /// Queues the shard's last command and closes the inbox behind it; false when it was
    /// already closed.
    pub(crate) fn push_last(&self, command: ShardCommand) -> bool {
        {
            let mut queue = self.queue.lock().expect("inbox lock");
            if queue.closed {
                return false;
            }
            queue.closed = true;
            queue.commands.push_back(command);
        }
        self.wake_shard();
        true
    }

    /// Wakes the shard for something that is not a command (a peer published to the ticket
    /// ring): one wake, and only if it sleeps.
    pub(crate) fn nudge(&self) {
        self.wake_shard();
    }

    fn wake_shard(&self) {
        // Pairs with the fence in `Parked::poll`: either the shard sees the pushed command
        // when it looks again after raising `parked`, or this sees `parked` raised.
        fence(Ordering::SeqCst);
        if self.parked.swap(false, Ordering::AcqRel) {
            if let Some(waker) = self.waker.lock().expect("inbox waker lock").take() {
                waker.wake();
            }
        }
    }

    /// The shard's side: moves everything queued into `into` (which must be empty) in one
    /// swap, keeping both allocations.
    pub(crate) fn take_all(&self, into: &mut VecDeque<ShardCommand>) {
        debug_assert!(into.is_empty());
        std::mem::swap(&mut self.queue.lock().expect("inbox lock").commands, into);
        // Only the shard takes, so a relaxed counter is enough.
        let capacity = into.capacity();
        if capacity <= RETAINED_CAPACITY {
            return;
        }
        if into.len() >= capacity / 8 {
            self.sparse_takes.store(0, Ordering::Relaxed);
            return;
        }
        let sparse = self.sparse_takes.load(Ordering::Relaxed) + 1;
        if sparse < SPARSE_TAKES_BEFORE_SHRINK {
            self.sparse_takes.store(sparse, Ordering::Relaxed);
        } else {
            // Few commands to move: the deque is mostly empty.
            into.shrink_to(RETAINED_CAPACITY);
            self.sparse_takes.store(0, Ordering::Relaxed);
        }
    }

    /// Closes the inbox without a last command (the shard stopped on its own) and hands back
    /// what is still queued, to be answered.
    pub(crate) fn close(&self) -> VecDeque<ShardCommand> {
        let mut queue = self.queue.lock().expect("inbox lock");
        queue.closed = true;
        std::mem::take(&mut queue.commands)
    }

    /// Resolves once something is queued or [`nudge`](Self::nudge) was called after this
    /// future was first polled. The shard's only way to sleep on its inbox.
    pub(crate) fn parked(&self) -> Parked<'_> {
        Parked {
            inbox: self,
            armed: false,
        }
    }

    fn has_commands(&self) -> bool {
        !self.queue.lock().expect("inbox lock").commands.is_empty()
    }
}

/// The shard asleep on its inbox. Invariant: while an armed `Parked` lives and has not
/// resolved, `parked` is true unless a push or nudge cleared it to wake the shard.
pub(crate) struct Parked<'a> {
    inbox: &'a ShardInbox,
    armed: bool,
}

impl Future for Parked<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let inbox = self.inbox;
        {
            let mut waker = inbox.waker.lock().expect("inbox waker lock");
            match waker.as_mut() {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *waker = Some(cx.waker().clone()),
            }
        }
        if self.armed {
            // Polled again: a waker cleared `parked` (ready), or another future of the
            // shard's select woke the task (look at the queue once more).
            if !inbox.parked.load(Ordering::Acquire) {
                self.armed = false;
                return Poll::Ready(());
            }
        } else {
            self.armed = true;
            inbox.parked.store(true, Ordering::SeqCst);
        }
        // Pairs with the fence in `wake_shard`: either this sees a command pushed before the
        // store above, or that push sees `parked` raised and wakes us.
        fence(Ordering::SeqCst);
        if inbox.has_commands() {
            self.armed = false;
            inbox.parked.store(false, Ordering::Release);
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl Drop for Parked<'_> {
    /// The shard woke for something else: pushes need not wake it until it parks again.
    fn drop(&mut self) {
        if self.armed {
            self.inbox.parked.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;

    use super::*;

    fn burst(inbox: &ShardInbox, topic: &Arc<str>, n: usize) {
        for _ in 0..n {
            assert!(inbox
                .push(ShardCommand::RequestTopic(topic.clone()))
                .is_ok());
        }
    }

    #[test]
    fn deques_grown_under_sustained_load_keep_their_capacity_and_shrink_after_a_sparse_spell() {
        let inbox = ShardInbox::default();
        let topic: Arc<str> = Arc::from("t");
        let mut local = VecDeque::new();
        let big = 4 * RETAINED_CAPACITY;
        for _ in 0..2 * SPARSE_TAKES_BEFORE_SHRINK {
            burst(&inbox, &topic, big);
            inbox.take_all(&mut local);
            assert_eq!(local.len(), big);
            local.clear();
        }
        let both = |local: &VecDeque<ShardCommand>| {
            let queued = inbox.queue.lock().unwrap().commands.capacity();
            (local.capacity(), queued)
        };
        let (a, b) = both(&local);
        assert!(
            a >= big && b >= big,
            "sustained load keeps both deques grown"
        );
        // The two deques take turns; each shrinks after its own sparse takes.
        for _ in 0..3 * SPARSE_TAKES_BEFORE_SHRINK {
            burst(&inbox, &topic, 1);
            inbox.take_all(&mut local);
            local.clear();
        }
        let (a, b) = both(&local);
        assert!(
            a < big && b < big,
            "a sparse spell shrinks both deques ({a}, {b})"
        );
    }
}
