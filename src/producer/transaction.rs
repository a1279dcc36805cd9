//! The transactional calls of [`Producer`] (Java's `initTransactions`, `beginTransaction`,
//! `sendOffsetsToTransaction`, `commitTransaction`, `abortTransaction`). Each is carried to the
//! owner shard's transaction manager and waits for its result up to a timeout; a call that
//! timed out goes on there, and making the same call again waits for the same result.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::engine::{GroupMetadata, OffsetAndMetadata, TopicPartition};
use crate::error::TransactionError;
use crate::runtime::shard::ShardCommand;
use crate::runtime::txn_driver::{CallSlot, TxnCall, TxnCommand, OWNER};

use super::Producer;

impl Producer {
    /// Gets this `transactional.id`'s producer id and epoch from its transaction coordinator,
    /// fencing any earlier producer with the same id, and completes or aborts a transaction
    /// that producer left open. Call once, before the first transaction.
    pub fn init_transactions(&self, timeout: Duration) -> Result<(), TransactionError> {
        self.txn_call(TxnCall::Init, "init_transactions", timeout)
    }

    /// Starts a transaction. Local: it sends nothing.
    pub fn begin_transaction(&self) -> Result<(), TransactionError> {
        self.txn_call(
            TxnCall::Begin,
            "begin_transaction",
            self.inner.config.max_block,
        )
    }

    /// Adds the consumer offsets to the transaction: they become the group's committed offsets
    /// if, and only if, the transaction commits.
    pub fn send_offsets_to_transaction(
        &self,
        offsets: impl IntoIterator<Item = (TopicPartition, OffsetAndMetadata)>,
        group: &GroupMetadata,
        timeout: Duration,
    ) -> Result<(), TransactionError> {
        let offsets: BTreeMap<TopicPartition, OffsetAndMetadata> = offsets.into_iter().collect();
        self.txn_call(
            TxnCall::SendOffsets {
                offsets,
                group: group.clone(),
            },
            "send_offsets_to_transaction",
            timeout,
        )
    }

    /// Sends every record of the transaction at once (linger does not apply), then commits
    /// it. An abortable error is returned as such: abort the transaction and go on.
    pub fn commit_transaction(&self, timeout: Duration) -> Result<(), TransactionError> {
        let deadline = Instant::now() + timeout;
        let barrier = self.txn_barrier(true, "commit_transaction", timeout, deadline)?;
        self.txn_call(
            TxnCall::Commit { barrier },
            "commit_transaction",
            deadline.saturating_duration_since(Instant::now()),
        )
    }

    /// Aborts the transaction: its records not yet sent fail with
    /// [`ProduceError::TransactionAborted`](crate::ProduceError::TransactionAborted), those
    /// sent never become visible to `read_committed` consumers.
    pub fn abort_transaction(&self, timeout: Duration) -> Result<(), TransactionError> {
        let deadline = Instant::now() + timeout;
        let barrier = self.txn_barrier(false, "abort_transaction", timeout, deadline)?;
        self.txn_call(
            TxnCall::Abort { barrier },
            "abort_transaction",
            deadline.saturating_duration_since(Instant::now()),
        )
    }

    fn check_transactional(&self) -> Result<(), TransactionError> {
        if self.inner.config.transactional_id.is_none() {
            return Err(TransactionError::NotTransactional);
        }
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(TransactionError::Closed);
        }
        Ok(())
    }

    /// Pushes a barrier behind every record already queued on every shard, so the commit
    /// (`commit`) or abort that names it covers them; sends are refused from here until the
    /// owner has handled the call (`TxnStatus`).
    fn txn_barrier(
        &self,
        commit: bool,
        operation: &'static str,
        timeout: Duration,
        deadline: Instant,
    ) -> Result<u64, TransactionError> {
        self.check_transactional()?;
        let token = self.inner.txn_status.begin_ending(commit);
        for shard in &self.inner.shards {
            let wait = deadline.saturating_duration_since(Instant::now());
            let pushed = shard
                .send_timeout(ShardCommand::TxnBarrier { token, commit }, wait)
                .map_err(|e| match e {
                    flume::SendTimeoutError::Timeout(_) => TransactionError::Timeout {
                        operation,
                        waited: timeout,
                    },
                    flume::SendTimeoutError::Disconnected(_) => TransactionError::Closed,
                });
            if let Err(err) = pushed {
                // The call never reaches the owner: the transaction stays as it was.
                self.inner.txn_status.settle(token);
                return Err(err);
            }
        }
        Ok(token)
    }

    fn txn_call(
        &self,
        call: TxnCall,
        operation: &'static str,
        timeout: Duration,
    ) -> Result<(), TransactionError> {
        self.check_transactional()?;
        let slot = CallSlot::new();
        let barrier = match call {
            TxnCall::Commit { barrier } | TxnCall::Abort { barrier } => Some(barrier),
            _ => None,
        };
        if self.inner.control[OWNER]
            .send(TxnCommand::Call {
                call,
                slot: slot.clone(),
            })
            .is_err()
        {
            if let Some(token) = barrier {
                self.inner.txn_status.settle(token);
            }
            return Err(TransactionError::Closed);
        }
        slot.wait(timeout).unwrap_or(Err(TransactionError::Timeout {
            operation,
            waited: timeout,
        }))
    }
}
