//! Closing a producer: [`Producer::close`], a `close` made while another is under way, and the
//! drop of the last handle, from any thread, a shard's included.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::runtime;
use crate::runtime::command::ShardCommand;

use super::{Inner, Producer};

impl Producer {
    /// Aborts a transaction still open (a commit under way completes), flushes, then stops
    /// the shards, all within `timeout`. Records still incomplete then fail with
    /// `ProduceError::Closed`, or `OutcomeUnknown` when an attempt of theirs may have landed
    /// (on the wire, or answered ambiguously and waiting for its retry). Every `send` or
    /// `send_async` waiting for room or metadata is woken and fails with `Closed`. Like Java's,
    /// it returns only once the producer is closed: a `close` made while another is under way
    /// waits for it up to its own `timeout`, then stops the shards at once (failing what they
    /// still hold, as above). Dropping the last handle of a producer closes it with
    /// `delivery.timeout.ms`.
    ///
    /// On a shard thread (in a delivery callback) it is Java's `close(0)`: sends are refused
    /// from then on, every shard stops at once, failing the records still incomplete as above,
    /// and the call returns without waiting for them. A transaction left open is not aborted
    /// there (that would wait for the coordinator): it never commits, and the coordinator
    /// aborts it at `transaction.timeout.ms`.
    pub fn close(&self, timeout: Duration) {
        if runtime::shard::on_shard_thread() {
            self.inner.close_without_waiting(Instant::now());
        } else {
            self.inner.close(timeout);
        }
    }
}

impl Inner {
    /// `close` from a thread that may wait, as Java's `close(timeout)`: the first call aborts
    /// an open transaction and asks every shard to stop by `timeout`. A later call made while
    /// the first is under way waits up to its own `timeout` for the shards to stop, then brings
    /// their deadline forward to now (Java's force close: what they still hold fails at once).
    /// Every call returns once every shard has stopped, and the threads are joined: bounded by
    /// the deadline in force, since a shard stops by then (or has died).
    fn close(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        if self.begin_close() {
            self.end_open_transaction(timeout);
            self.stop_shards(deadline);
        } else if !self.stopped.wait(Some(timeout)) {
            self.bring_deadline_forward(Instant::now());
        }
        self.stopped.wait(None);
        for join in self.joins.lock().expect("joins lock").drain(..) {
            let _ = join.join();
        }
    }

    /// `close` on a shard thread, which must not wait for a shard: the shards stop by
    /// `deadline` (brought forward to it if a close under way has a later one) on their own,
    /// and their threads end by themselves.
    fn close_without_waiting(&self, deadline: Instant) {
        if self.begin_close() {
            self.stop_shards(deadline);
        } else {
            self.bring_deadline_forward(deadline);
        }
    }

    /// A closing producer's shards give up at `at` if that is sooner than the deadline in
    /// force; each is woken to look at it.
    fn bring_deadline_forward(&self, at: Instant) {
        self.close_by.bring_forward(at);
        for inbox in &self.inboxes {
            inbox.nudge();
        }
    }

    /// Refuses sends from now on and wakes every send waiting for room or metadata; true for
    /// the one call that closes the producer.
    fn begin_close(&self) -> bool {
        if self.closed.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.memory.close();
        self.metadata.close();
        true
    }

    /// Each shard counts `stopped` down as it stops. A shard whose inbox is already closed
    /// stopped on its own (it died) and has counted down then.
    fn stop_shards(&self, deadline: Instant) {
        self.close_by.bring_forward(deadline);
        for inbox in &self.inboxes {
            inbox.push_last(ShardCommand::Close);
        }
    }
}

/// The last `Producer` handle is gone (an `Arc` drops its value exactly once, however many
/// clones are dropped at the same time): flush within `delivery.timeout.ms` and stop the
/// shards, which hold no handle of their own and so never see the producer go. Dropped on a
/// shard thread (in a delivery callback), it closes without waiting: the shards deliver what
/// they hold until `delivery.timeout.ms` and stop by themselves.
impl Drop for Inner {
    fn drop(&mut self) {
        let timeout = self.config.delivery_timeout;
        if runtime::shard::on_shard_thread() {
            self.close_without_waiting(Instant::now() + timeout);
        } else {
            self.close(timeout);
        }
    }
}
