//! What application threads hand a shard through its inbox: notices of partition queues with
//! batches, and the commands of the
//! producer's calls (flush, purge, a transaction's barrier, close), with the latch a calling
//! thread waits on until every shard has handled its command.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::ProduceError;

use super::partition_queue::PartitionQueue;

/// A partition queue the shard did not know of has a batch (`producer::accumulator`). Dropped
/// without being taken (the shard stopped before it got to it), it shuts the queue: its
/// batches and later appends fail with `Closed`, as none of them reached an engine.
pub(crate) struct QueueNotice(Option<Arc<PartitionQueue>>);

impl QueueNotice {
    pub(crate) fn new(queue: Arc<PartitionQueue>) -> QueueNotice {
        QueueNotice(Some(queue))
    }

    /// The queue, for the shard to list.
    pub(crate) fn take(mut self) -> Arc<PartitionQueue> {
        self.0.take().expect("a notice is taken once")
    }
}

impl Drop for QueueNotice {
    fn drop(&mut self) {
        if let Some(queue) = self.0.take() {
            queue.shut(ProduceError::Closed);
        }
    }
}

/// An application's task to start on the shard (`Producer::spawn_on_shard`): run once, on the
/// shard's thread. Dropped unrun, its captures answer the task's handle.
pub(crate) struct ShardSpawn(Box<dyn FnOnce() + Send>);

impl ShardSpawn {
    pub(crate) fn new(start: impl FnOnce() + Send + 'static) -> ShardSpawn {
        ShardSpawn(Box::new(start))
    }

    /// Starts the task on the calling shard's executor.
    pub(crate) fn run(self) {
        (self.0)()
    }
}

/// A countdown that application threads wait on (flush, close).
#[derive(Default)]
pub(crate) struct Latch {
    remaining: Mutex<usize>,
    done: Condvar,
}

impl Latch {
    pub(crate) fn new(count: usize) -> Arc<Latch> {
        Arc::new(Latch {
            remaining: Mutex::new(count),
            done: Condvar::new(),
        })
    }

    /// One count of this latch, to hand to a shard: it counts down when dropped.
    pub(crate) fn share(self: &Arc<Self>) -> Countdown {
        Countdown(self.clone())
    }

    pub(crate) fn count_down(&self) {
        let mut r = self.remaining.lock().expect("latch lock");
        *r = r.saturating_sub(1);
        if *r == 0 {
            self.done.notify_all();
        }
    }

    /// Waits up to `timeout`; true when the count reached zero.
    pub(crate) fn wait(&self, timeout: Option<Duration>) -> bool {
        let r = self.remaining.lock().expect("latch lock");
        match timeout {
            None => *self.done.wait_while(r, |r| *r > 0).expect("latch lock") == 0,
            Some(t) => {
                let (r, _) = self
                    .done
                    .wait_timeout_while(r, t, |r| *r > 0)
                    .expect("latch lock");
                *r == 0
            }
        }
    }
}

pub(crate) enum ShardCommand {
    /// A partition queue has batches for this shard.
    Queue(QueueNotice),
    /// Start an application's task on this shard.
    Spawn(ShardSpawn),
    RequestTopic(Arc<str>),
    /// `send` refused a record of the transaction it checked under `txn_barrier`
    /// (`Engine::txn_send_refused`). Boxed: rare, and the queue's slots stay a record's size.
    SendRefused {
        error: Box<ProduceError>,
        txn_barrier: u64,
    },
    Flush(Countdown),
    /// Fail every record not yet sent (`Engine::purge_unsent`), then count down.
    Purge(Countdown),
    /// A commit or abort call's barrier: every record queued before it is in that call's
    /// flush, every record checked before the call and queued after it is refused
    /// (`txn_driver`).
    TxnBarrier {
        token: u64,
        commit: bool,
    },
    /// Publish this shard's metrics now (`Producer::metrics`), then count down.
    PublishMetrics(Countdown),
    /// Panics the shard's driver loop (`in_task: false`) or a task the shard spawns, as a bug
    /// of its own would (`testkit::panic_shard`).
    #[cfg(feature = "testkit")]
    Panic {
        in_task: bool,
    },
    /// Send what is queued, then stop (counting `ShardContext::stopped` down); at the
    /// producer's close deadline (`ShardContext::close_by`, which a later `close` may bring
    /// forward) fail what is left.
    Close,
}

/// One shard's count of a [`Latch`], counted down when it is dropped: by the shard once it has
/// done what the command asked, by the caller when the shard's inbox refused the command, and
/// by the unwinding of a shard that died however it died. So no call waits for a shard that is
/// gone.
pub(crate) struct Countdown(Arc<Latch>);

impl Drop for Countdown {
    fn drop(&mut self) {
        self.0.count_down();
    }
}

/// When a closing producer's shards give up on what they still hold: set by the first `close`,
/// brought forward (never back) by a later one that ran out of its own time, as Java's `close`
/// force-closes once its timeout has passed. Each closing shard reads it every turn.
#[derive(Default)]
pub(crate) struct CloseDeadline(Mutex<Option<Instant>>);

impl CloseDeadline {
    /// Sets the deadline to `at`, unless one at or before `at` is already set.
    pub(crate) fn bring_forward(&self, at: Instant) {
        let mut deadline = self.0.lock().expect("close deadline lock");
        if deadline.is_none_or(|set| at < set) {
            *deadline = Some(at);
        }
    }

    /// The deadline in force, if the producer is closing.
    pub(crate) fn get(&self) -> Option<Instant> {
        *self.0.lock().expect("close deadline lock")
    }
}
