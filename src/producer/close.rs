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
    /// `send_async` waiting for room or metadata is woken and fails with `Closed`. A `close`
    /// made while another is under way returns when the producer is closed, or at its own
    /// `timeout`. Dropping the last handle of a producer closes it with `delivery.timeout.ms`.
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
    /// `close` from a thread that may wait: the first call aborts an open transaction, then
    /// asks every shard to stop by `timeout`; every call waits until they all have (a later
    /// call at most its own `timeout`), and the threads are joined.
    fn close(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        if self.begin_close() {
            self.end_open_transaction(timeout);
            self.stop_shards(deadline);
            // Bounded by the shards' deadline (each stops by `deadline`, or has died).
            self.stopped.wait(None);
        } else if !self
            .stopped
            .wait(Some(deadline.saturating_duration_since(Instant::now())))
        {
            return;
        }
        for join in self.joins.lock().expect("joins lock").drain(..) {
            let _ = join.join();
        }
    }

    /// `close` on a shard thread, which must not wait for a shard: the shards stop by
    /// `deadline` on their own, and their threads end by themselves.
    fn close_without_waiting(&self, deadline: Instant) {
        if self.begin_close() {
            self.stop_shards(deadline);
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
        for inbox in &self.inboxes {
            inbox.push_last(ShardCommand::Close { deadline });
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
