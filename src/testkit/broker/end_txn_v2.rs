//! EndTxn v5+ at the coordinator: Kafka 4's transactions V2 (KIP-890 part 2),
//! `TransactionCoordinator.endTransaction` with a client transaction version that supports the
//! epoch bump.
//!
//! Every end that prepares a transaction bumps the epoch (`prepareAbortOrCommit`), so the
//! markers carry epoch E+1 and data of the ended transaction (epoch E) that arrives late is
//! refused by the partitions. Because the epoch moved, "the same epoch in the same state" no
//! longer tells a retry from the next end: a retry is recognised by its epoch being the one
//! before the stored one (`retryOnEpochBump`) or, after an exhausted epoch moved the
//! transactional id to a new producer id, by naming the previous id at epoch 32766
//! (`retryOnOverflow`).

use super::coordinator::{
    prepare_end, MarkerJob, ProducerIdManager, TransactionCoordinator, TransactionMetadata,
    TransactionState,
};
use super::error_codes::*;
use super::transaction_version::TransactionVersion;

/// A TV2 EndTxn the coordinator accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndTxnV2 {
    /// The producer id the response carries: the transaction's, or the new one when the
    /// epoch was exhausted.
    pub producer_id: i64,
    /// The epoch the response carries: the bumped one (0 on a new producer id), or for a
    /// retry the stored one.
    pub producer_epoch: i16,
    /// The markers to write; `None` for a retry of an end already prepared, answered without
    /// a write.
    pub markers: Option<MarkerJob>,
}

impl TransactionCoordinator {
    /// EndTxn v5+ (`endTransaction`, TV2), in Kafka's order: no metadata →
    /// INVALID_PRODUCER_ID_MAPPING; another producer id (unless an overflow retry) →
    /// INVALID_PRODUCER_ID_MAPPING; a pending transition → CONCURRENT_TRANSACTIONS; an epoch the
    /// state does not admit → PRODUCER_FENCED; then the state table (TransactionCoordinatorTest
    /// `shouldReturnInvalidTxnRequestOnEndTxnV2IfNotEndTxnV2Retry`,
    /// `testEndTxnWhenStatusIsCompleteCommitAndResultIsCommitInV2`,
    /// `shouldReturnOkOnEndTxnV2IfEndTxnV2RetryEpochOverflow`).
    ///
    /// A pending transition is answered CONCURRENT_TRANSACTIONS before the epoch is checked
    /// (KAFKA-18464, Kafka 4.0). In Kafka an end answers the client only once PrepareCommit or
    /// PrepareAbort is logged with CompleteCommit or CompleteAbort pending, and that pending
    /// state lasts until the markers are written; here a Prepare state exists only while its
    /// markers are held, so it is that pending transition. Checking the epoch first would fence
    /// a producer that adopted the bumped epoch and ended its next transaction before the
    /// markers were out, though its epoch is the coordinator's own.
    pub fn end_txn_v2(
        &mut self,
        ids: &mut ProducerIdManager,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        now_ms: i64,
    ) -> Result<EndTxnV2, i16> {
        let coordinator_epoch = self.coordinator_epoch;
        let metadata = self
            .txns
            .get_mut(transactional_id)
            .ok_or(INVALID_PRODUCER_ID_MAPPING)?;
        let retry_on_overflow = metadata.prev_producer_id == producer_id
            && producer_epoch == i16::MAX - 1
            && metadata.producer_epoch == 0;
        let retry_on_epoch_bump =
            i32::from(metadata.producer_epoch) == i32::from(producer_epoch) + 1;
        if metadata.producer_id != producer_id && !retry_on_overflow {
            return Err(INVALID_PRODUCER_ID_MAPPING);
        }
        use TransactionState::*;
        if matches!(metadata.state, PrepareCommit | PrepareAbort) {
            return Err(CONCURRENT_TRANSACTIONS);
        }
        let current = producer_epoch == metadata.producer_epoch;
        let valid_epoch = match metadata.state {
            Ongoing | Empty | Dead | PrepareEpochFence => current,
            // Answered above; Kafka's rule, kept for a Prepare state that is not pending.
            PrepareCommit | PrepareAbort => retry_on_epoch_bump,
            CompleteCommit | CompleteAbort => retry_on_epoch_bump || retry_on_overflow || current,
        };
        if !valid_epoch {
            return Err(PRODUCER_FENCED);
        }
        let retry = retry_on_epoch_bump || retry_on_overflow;
        let answer_stored = |m: &TransactionMetadata| EndTxnV2 {
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            markers: None,
        };
        match (metadata.state, commit) {
            (Ongoing, _) => {}
            // A retry of the end that completed: answered with the stored id and epoch.
            (CompleteCommit, true) | (CompleteAbort, false) if retry => {
                return Ok(answer_stored(metadata))
            }
            // An abort at the previous epoch after a commit: the end that completed was not
            // this one.
            (CompleteCommit, false) if retry => return Err(INVALID_TXN_STATE),
            // The next transaction's abort with nothing added: allowed under TV2 (an "empty"
            // abort still bumps the epoch; `TransactionMetadata` `allowedEmptyAbort`).
            (CompleteCommit | CompleteAbort | Empty, false) => {}
            (PrepareCommit | PrepareAbort | CompleteCommit | CompleteAbort | Empty, _) => {
                return Err(INVALID_TXN_STATE)
            }
            (Dead | PrepareEpochFence, _) => return Err(CONCURRENT_TRANSACTIONS),
        }
        if metadata.state != Ongoing {
            // Nothing was added: the transaction starts (and ends) now.
            metadata.topic_partitions.clear();
            metadata.txn_start_ms = now_ms;
        }
        // An exhausted epoch cannot be bumped for the client: the transaction completes on a
        // new producer id (the Prepare record holds epoch 32767 on the old one).
        if TransactionMetadata::is_epoch_exhausted(metadata.producer_epoch) {
            metadata.next_producer_id = ids.generate();
        }
        let job = prepare_end(
            transactional_id,
            metadata,
            coordinator_epoch,
            commit,
            TransactionVersion::Tv2,
            now_ms,
        );
        let (producer_id, producer_epoch) = if metadata.next_producer_id != -1 {
            (metadata.next_producer_id, 0)
        } else {
            (metadata.producer_id, metadata.producer_epoch)
        };
        Ok(EndTxnV2 {
            producer_id,
            producer_epoch,
            markers: Some(job),
        })
    }
}
