//! Producer ids and the transaction coordinator's per-transactional-id metadata.
//!
//! InitProducerId follows Kafka's `TransactionCoordinator.handleInitProducerId` /
//! `prepareInitProducerIdTransit` and `TransactionMetadata.prepareIncrementProducerEpoch` /
//! `prepareProducerIdRotation`. The state machine is laid out in full (`TransactionState`) so
//! AddPartitionsToTxn, EndTxn, markers and timeouts can be added on top; today only the
//! transitions InitProducerId makes from Empty/Complete* exist.

use std::collections::{BTreeSet, HashMap};

use super::error_codes::*;
use super::InitProducerIdResult;

/// `transaction.max.timeout.ms` default.
pub const TRANSACTION_MAX_TIMEOUT_MS: i32 = 900_000;

/// Hands out producer ids. Kafka's controller hands out blocks of 1000; any unique,
/// never-reused, non-negative counter behaves the same for clients.
#[derive(Debug)]
pub struct ProducerIdManager {
    next: i64,
}

impl ProducerIdManager {
    pub fn new(first: i64) -> Self {
        ProducerIdManager { next: first }
    }

    pub fn generate(&mut self) -> i64 {
        let id = self.next;
        self.next += 1;
        id
    }

    pub fn issued(&self) -> i64 {
        self.next
    }
}

/// Kafka `TransactionState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
}

/// Kafka `TransactionMetadata`, the fields the coordinator keeps per transactional id.
#[derive(Debug, Clone)]
pub struct TransactionMetadata {
    pub producer_id: i64,
    /// `lastProducerId` in Kafka: the id before the last rotation.
    pub prev_producer_id: i64,
    pub producer_epoch: i16,
    pub last_producer_epoch: i16,
    pub txn_timeout_ms: i32,
    pub state: TransactionState,
    pub topic_partitions: BTreeSet<(String, i32)>,
    pub txn_start_ms: i64,
    pub txn_last_update_ms: i64,
}

impl TransactionMetadata {
    /// Kafka `TransactionMetadata.isEpochExhausted`: 32766 and up; 32767 stays free so the
    /// coordinator can always fence.
    pub fn is_epoch_exhausted(epoch: i16) -> bool {
        epoch >= i16::MAX - 1
    }
}

/// The coordinator side of every transactional id in the cluster. The model has one logical
/// coordinator; FindCoordinator names a broker for it.
#[derive(Debug, Default)]
pub struct TransactionCoordinator {
    txns: HashMap<String, TransactionMetadata>,
}

impl TransactionCoordinator {
    pub fn metadata(&self, transactional_id: &str) -> Option<&TransactionMetadata> {
        self.txns.get(transactional_id)
    }

    /// InitProducerId. `expected` is the request's (producer id, epoch) when it carries one
    /// (KIP-360, v3+). Answers PRODUCER_FENCED where Kafka does; InitProducerId below v4 turns
    /// that into INVALID_PRODUCER_EPOCH at the protocol layer (`KafkaApis`).
    pub fn init_producer_id(
        &mut self,
        ids: &mut ProducerIdManager,
        transactional_id: Option<&str>,
        transaction_timeout_ms: i32,
        expected: Option<(i64, i16)>,
        now_ms: i64,
    ) -> InitProducerIdResult {
        let Some(transactional_id) = transactional_id else {
            // An idempotent producer always gets a fresh id at epoch 0, whatever it names.
            return InitProducerIdResult::ok(ids.generate(), 0);
        };
        if transactional_id.is_empty() {
            return InitProducerIdResult::error(INVALID_REQUEST);
        }
        if transaction_timeout_ms <= 0 || transaction_timeout_ms > TRANSACTION_MAX_TIMEOUT_MS {
            return InitProducerIdResult::error(INVALID_TRANSACTION_TIMEOUT);
        }
        let metadata = self
            .txns
            .entry(transactional_id.to_string())
            .or_insert_with(|| TransactionMetadata {
                producer_id: ids.generate(),
                prev_producer_id: -1,
                producer_epoch: -1,
                last_producer_epoch: -1,
                txn_timeout_ms: transaction_timeout_ms,
                state: TransactionState::Empty,
                topic_partitions: BTreeSet::new(),
                txn_start_ms: -1,
                txn_last_update_ms: now_ms,
            });

        // `isValidProducerId`: just created, the current id, or the previous id with an
        // exhausted epoch (a retry of a rotation whose answer was lost).
        if let Some((producer_id, epoch)) = expected {
            let valid = metadata.producer_epoch == -1
                || producer_id == metadata.producer_id
                || (producer_id == metadata.prev_producer_id
                    && TransactionMetadata::is_epoch_exhausted(epoch));
            if !valid {
                return InitProducerIdResult::error(PRODUCER_FENCED);
            }
        }

        match metadata.state {
            TransactionState::PrepareCommit | TransactionState::PrepareAbort => {
                InitProducerIdResult::error(CONCURRENT_TRANSACTIONS)
            }
            TransactionState::Empty
            | TransactionState::CompleteCommit
            | TransactionState::CompleteAbort => {
                let expected_epoch = expected.map(|(_, epoch)| epoch);
                if TransactionMetadata::is_epoch_exhausted(metadata.producer_epoch)
                    && expected_epoch.is_none_or(|e| e == metadata.producer_epoch)
                {
                    // `prepareProducerIdRotation`.
                    metadata.prev_producer_id = metadata.producer_id;
                    metadata.last_producer_epoch = if expected_epoch.is_some() {
                        metadata.producer_epoch
                    } else {
                        -1
                    };
                    metadata.producer_id = ids.generate();
                    metadata.producer_epoch = 0;
                } else {
                    // `prepareIncrementProducerEpoch`.
                    let (epoch, last_epoch) = match expected_epoch {
                        None => (metadata.producer_epoch + 1, -1),
                        Some(e)
                            if metadata.producer_epoch == -1 || e == metadata.producer_epoch =>
                        {
                            (metadata.producer_epoch + 1, metadata.producer_epoch)
                        }
                        // A retry of a bump that succeeded: answer the current epoch, no write.
                        Some(e) if e == metadata.last_producer_epoch => {
                            (metadata.producer_epoch, metadata.last_producer_epoch)
                        }
                        Some(_) => return InitProducerIdResult::error(PRODUCER_FENCED),
                    };
                    metadata.producer_epoch = epoch;
                    metadata.last_producer_epoch = last_epoch;
                }
                metadata.txn_timeout_ms = transaction_timeout_ms;
                metadata.state = TransactionState::Empty;
                metadata.topic_partitions.clear();
                metadata.txn_start_ms = -1;
                metadata.txn_last_update_ms = now_ms;
                InitProducerIdResult::ok(metadata.producer_id, metadata.producer_epoch)
            }
            // Fencing an open transaction aborts it with markers and answers
            // CONCURRENT_TRANSACTIONS; it arrives with AddPartitionsToTxn and markers.
            TransactionState::Ongoing
            | TransactionState::PrepareEpochFence
            | TransactionState::Dead => InitProducerIdResult::error(CONCURRENT_TRANSACTIONS),
        }
    }

    /// KIP-890 part 1 verification of a transactional produce (TV1, `verifyOnly`), as
    /// `TransactionCoordinator.handleVerifyPartitionsInTransaction` answers it, already
    /// translated to the produce error (`AddPartitionsToTxnManager`, Produce v10 and below).
    pub fn verify_partition(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
    ) -> Result<(), (i16, &'static str)> {
        let Some(metadata) = self.txns.get(transactional_id) else {
            return Err((INVALID_PRODUCER_ID_MAPPING, "unknown transactional id"));
        };
        if metadata.producer_id != producer_id {
            return Err((INVALID_PRODUCER_ID_MAPPING, "producer id does not match"));
        }
        if metadata.producer_epoch != producer_epoch {
            // PRODUCER_FENCED from the coordinator reaches the producer as INVALID_PRODUCER_EPOCH.
            return Err((INVALID_PRODUCER_EPOCH, "producer epoch is not current"));
        }
        if matches!(
            metadata.state,
            TransactionState::PrepareCommit | TransactionState::PrepareAbort
        ) {
            return Err((
                NOT_ENOUGH_REPLICAS,
                "Unable to verify the partition has been added to the transaction",
            ));
        }
        if metadata.state == TransactionState::Ongoing
            && metadata
                .topic_partitions
                .contains(&(topic.to_string(), partition))
        {
            return Ok(());
        }
        Err((
            INVALID_TXN_STATE,
            "Partition was not added to the transaction",
        ))
    }
}
