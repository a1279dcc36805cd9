//! The transactional calls of [`Producer`] (Java's `initTransactions`, `beginTransaction`,
//! `sendOffsetsToTransaction`, `commitTransaction`, `abortTransaction`). Each is carried to the
//! owner shard's transaction manager and waits for its result up to a timeout; a call that
//! timed out goes on there, and making the same call again waits for the same result.
//!
//! Made on a shard thread (in a delivery callback), each returns
//! `TransactionError::OnShardThread` at once and changes nothing: waiting for the transaction
//! manager there could wait for the very shard that runs the caller.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::engine::{GroupMetadata, OffsetAndMetadata, TopicPartition};
use crate::error::{ProduceError, TransactionError};
use crate::metrics::CallTimes;
use crate::runtime::command::ShardCommand;
use crate::runtime::txn_driver::{CallSlot, Ongoing, TxnCall, TxnCommand, OWNER};

use super::{Inner, Producer};

impl Producer {
    /// Gets this `transactional.id`'s producer id and epoch from its transaction coordinator,
    /// fencing any earlier producer with the same id, and completes or aborts a transaction
    /// that producer left open. Call once, before the first transaction. If it fails because
    /// the `transactional.id` or the cluster is not authorized, the producer is uninitialized
    /// again: grant the ACL and call it again.
    pub fn init_transactions(&self, timeout: Duration) -> Result<(), TransactionError> {
        self.check_transactional("init_transactions")?;
        let started = Instant::now();
        let result = self
            .inner
            .txn_call(TxnCall::Init, "init_transactions", timeout);
        CallTimes::add(&self.inner.metrics.calls.init, started);
        result
    }

    /// Starts a transaction. Local: it sends nothing.
    pub fn begin_transaction(&self) -> Result<(), TransactionError> {
        self.check_transactional("begin_transaction")?;
        let started = Instant::now();
        let result = self.inner.txn_call(
            TxnCall::Begin,
            "begin_transaction",
            self.inner.config.max_block,
        );
        CallTimes::add(&self.inner.metrics.calls.begin, started);
        result
    }

    /// Adds the consumer offsets to the transaction: they become the group's committed offsets
    /// if, and only if, the transaction commits.
    pub fn send_offsets_to_transaction(
        &self,
        offsets: impl IntoIterator<Item = (TopicPartition, OffsetAndMetadata)>,
        group: &GroupMetadata,
        timeout: Duration,
    ) -> Result<(), TransactionError> {
        self.check_transactional("send_offsets_to_transaction")?;
        let offsets: BTreeMap<TopicPartition, OffsetAndMetadata> = offsets.into_iter().collect();
        let started = Instant::now();
        let result = self.inner.txn_call(
            TxnCall::SendOffsets {
                offsets,
                group: group.clone(),
            },
            "send_offsets_to_transaction",
            timeout,
        );
        CallTimes::add(&self.inner.metrics.calls.send_offsets, started);
        result
    }

    /// Sends every record of the transaction at once (linger does not apply), then commits
    /// it. An abortable error is returned as such: abort the transaction and go on. It is
    /// returned whenever a record of the transaction failed, including one `send` refused
    /// (too large, an unknown partition, no metadata or no room in time), so a transaction
    /// never commits without a record whose future was not read.
    pub fn commit_transaction(&self, timeout: Duration) -> Result<(), TransactionError> {
        self.check_transactional("commit_transaction")?;
        let started = Instant::now();
        let result = self.inner.end_transaction(true, timeout);
        CallTimes::add(&self.inner.metrics.calls.commit, started);
        result
    }

    /// Aborts the transaction: its records not yet sent fail with
    /// [`ProduceError::TransactionAborted`](crate::ProduceError::TransactionAborted), those
    /// sent never become visible to `read_committed` consumers.
    pub fn abort_transaction(&self, timeout: Duration) -> Result<(), TransactionError> {
        self.check_transactional("abort_transaction")?;
        let started = Instant::now();
        let result = self.inner.end_transaction(false, timeout);
        CallTimes::add(&self.inner.metrics.calls.abort, started);
        result
    }

    /// Whether `operation` may be called now: on a transactional producer, open, healthy
    /// shards, and not from a shard thread, where waiting for the transaction manager's answer
    /// could wait for the very shard that runs the caller.
    fn check_transactional(&self, operation: &'static str) -> Result<(), TransactionError> {
        if self.inner.config.transactional_id.is_none() {
            return Err(TransactionError::NotTransactional);
        }
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(TransactionError::Closed);
        }
        if crate::runtime::shard::on_shard_thread() {
            return Err(TransactionError::OnShardThread { operation });
        }
        // A dead shard: its transaction manager or its part of the transaction is gone.
        if let Some(err @ ProduceError::ShardPanicked { .. }) = self.inner.metadata.fatal() {
            return Err(TransactionError::Fatal(crate::error::ErrorCause::Record(
                Box::new(err),
            )));
        }
        Ok(())
    }
}

impl Inner {
    /// Commit (`commit`) or abort: a barrier through every shard, then the call.
    pub(super) fn end_transaction(
        &self,
        commit: bool,
        timeout: Duration,
    ) -> Result<(), TransactionError> {
        let operation = if commit {
            "commit_transaction"
        } else {
            "abort_transaction"
        };
        let deadline = Instant::now() + timeout;
        let barrier = self.txn_barrier(commit)?;
        let call = if commit {
            TxnCall::Commit { barrier }
        } else {
            TxnCall::Abort { barrier }
        };
        self.txn_call(
            call,
            operation,
            deadline.saturating_duration_since(Instant::now()),
        )
    }

    /// `close` with a transaction open or ending (Java's `Sender.run` at shutdown: while
    /// `hasOngoingTransaction`, a transaction not completing is aborted, one completing runs to
    /// its end): the abort (or the commit under way) is carried out within `timeout`.
    ///
    /// - A commit or abort whose call timed out is still pending its result, and only the
    ///   same call may take it (`TransactionError::PendingOperation`): the next round makes
    ///   that call.
    /// - A commit under way that fails abortably leaves the transaction open (ABORTABLE_ERROR,
    ///   `Ongoing::Open`): the next round aborts it. Otherwise it would hold its partitions'
    ///   last stable offset until the coordinator's `transaction.timeout.ms`.
    ///
    /// Bounded: at most four rounds (take a pending commit's result, abort, and one more of
    /// each), and any other failure (fenced, fatal, timed out, closed) ends it, as the
    /// coordinator then aborts the transaction at its timeout.
    pub(super) fn end_open_transaction(&self, timeout: Duration) {
        if self.config.transactional_id.is_none() {
            return;
        }
        let deadline = Instant::now() + timeout;
        let mut pending: Option<bool> = None;
        for _ in 0..4 {
            let commit = match (pending.take(), self.txn_status.ongoing()) {
                (Some(commit), _) => commit,
                (None, Ongoing::None) => return,
                (None, Ongoing::Committing) => true,
                (None, Ongoing::Open | Ongoing::Aborting) => false,
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            match self.end_transaction(commit, remaining) {
                Ok(()) | Err(TransactionError::Abortable(_)) => {}
                Err(TransactionError::PendingOperation { pending: call, .. })
                    if call == "commit_transaction" || call == "abort_transaction" =>
                {
                    pending = Some(call == "commit_transaction");
                }
                Err(_) => return,
            }
        }
    }

    /// Pushes a barrier behind every record already queued on every shard, so the commit
    /// (`commit`) or abort that names it covers them; sends are refused from here until the
    /// owner has handled the call (`TxnStatus`).
    /// (The caller checked that the producer is transactional.)
    fn txn_barrier(&self, commit: bool) -> Result<u64, TransactionError> {
        let token = self.txn_status.begin_ending(commit);
        for inbox in &self.inboxes {
            // An inbox never makes its caller wait; a closed one means the producer is
            // closing.
            if inbox
                .push(ShardCommand::TxnBarrier { token, commit })
                .is_err()
            {
                // The call never reaches the owner: the transaction stays as it was.
                self.txn_status.settle(token);
                return Err(TransactionError::Closed);
            }
        }
        Ok(token)
    }

    /// Carries `call` to the owner and waits up to `timeout` for its result. (The caller
    /// checked that the producer is transactional; `close` calls it after marking it closed.)
    fn txn_call(
        &self,
        call: TxnCall,
        operation: &'static str,
        timeout: Duration,
    ) -> Result<(), TransactionError> {
        let slot = CallSlot::new();
        let barrier = match call {
            TxnCall::Commit { barrier } | TxnCall::Abort { barrier } => Some(barrier),
            _ => None,
        };
        if self.control[OWNER]
            .send(TxnCommand::Call {
                call,
                slot: slot.clone(),
            })
            .is_err()
        {
            if let Some(token) = barrier {
                self.txn_status.settle(token);
            }
            return Err(TransactionError::Closed);
        }
        slot.wait(timeout).unwrap_or(Err(TransactionError::Timeout {
            operation,
            waited: timeout,
        }))
    }
}
