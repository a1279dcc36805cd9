//! Producer ids and the transaction coordinator's per-transactional-id metadata.
//!
//! InitProducerId follows Kafka's `TransactionCoordinator.handleInitProducerId` /
//! `prepareInitProducerIdTransit` and `TransactionMetadata.prepareIncrementProducerEpoch` /
//! `prepareProducerIdRotation`; AddPartitionsToTxn / AddOffsetsToTxn follow
//! `handleAddPartitionsToTransaction` (also the TV2 implicit add of Produce v12+ and
//! TxnOffsetCommit v5+), EndTxn v0-v4 `endTransactionWithTV1` (EndTxn v5+ is in `end_txn_v2`),
//! timeouts `abortTimedOutTransactions`.
//!
//! Every transition is written at once (the model has no `__transaction_state` log, so there is
//! never a `pendingState`). Ending a transaction moves it to PrepareCommit/PrepareAbort and
//! hands back a [`MarkerJob`]; the cluster writes the markers (at once, or later when markers
//! are held) and then calls [`TransactionCoordinator::complete_markers`], which moves it to
//! CompleteCommit/CompleteAbort. Between the two every request sees the Prepare state, exactly
//! the window a real coordinator has while its markers are in flight.

use std::collections::{BTreeSet, HashMap};

use super::error_codes::*;
use super::transaction_version::TransactionVersion;
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
    /// No transaction open.
    Empty,
    /// A transaction is open.
    Ongoing,
    /// EndTxn(commit) accepted; the commit markers are being written.
    PrepareCommit,
    /// EndTxn(abort), a timeout or a fence; the abort markers are being written.
    PrepareAbort,
    /// The commit markers are written.
    CompleteCommit,
    /// The abort markers are written.
    CompleteAbort,
    /// The transactional id expired.
    Dead,
    /// An InitProducerId fences the open transaction: it is aborted with the epoch raised.
    PrepareEpochFence,
}

/// Kafka `TransactionMetadata`, the fields the coordinator keeps per transactional id.
#[derive(Debug, Clone)]
pub struct TransactionMetadata {
    /// The producer id in use.
    pub producer_id: i64,
    /// `lastProducerId` in Kafka: the id before the last rotation.
    pub prev_producer_id: i64,
    /// `nextProducerId` in Kafka: set when a TV2 end found the epoch exhausted; the
    /// transaction completes on this id at epoch 0. -1 otherwise.
    pub next_producer_id: i64,
    /// The epoch in use.
    pub producer_epoch: i16,
    /// `lastProducerEpoch` in Kafka: the epoch before the last bump.
    pub last_producer_epoch: i16,
    /// The transaction timeout the producer asked for.
    pub txn_timeout_ms: i32,
    /// The transaction's state.
    pub state: TransactionState,
    /// The partitions added to the open transaction.
    pub topic_partitions: BTreeSet<(String, i32)>,
    /// When the transaction went Ongoing; -1 when none is open. Starts the timeout clock.
    pub txn_start_ms: i64,
    /// When the metadata last changed.
    pub txn_last_update_ms: i64,
}

/// The markers a transaction that entered PrepareCommit/PrepareAbort still needs: one per
/// partition of the transaction, carrying the transaction's (producer id, epoch) and the
/// coordinator epoch (`TransactionMarkerChannelManager.addTxnMarkersToSend`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerJob {
    /// The transaction's id.
    pub transactional_id: String,
    /// The producer id the markers carry.
    pub producer_id: i64,
    /// The epoch the markers carry.
    pub producer_epoch: i16,
    /// The coordinator's epoch.
    pub coordinator_epoch: i32,
    /// Commit markers; false: abort markers.
    pub commit: bool,
    /// The protocol the transaction ended with: a TV2 marker must carry an epoch above the
    /// partition's (KIP-1228), a TV1 marker one at least equal.
    pub transaction_version: TransactionVersion,
    /// The partitions still to mark.
    pub partitions: Vec<(String, i32)>,
}

impl TransactionMetadata {
    /// The request's producer id and epoch against this transactional id's
    /// (`TransactionCoordinator`'s first checks of AddPartitionsToTxn, EndTxn and the
    /// verification): another id is INVALID_PRODUCER_ID_MAPPING, another epoch PRODUCER_FENCED.
    pub fn check_identity(&self, producer_id: i64, producer_epoch: i16) -> Result<(), i16> {
        if self.producer_id != producer_id {
            return Err(INVALID_PRODUCER_ID_MAPPING);
        }
        if self.producer_epoch != producer_epoch {
            return Err(PRODUCER_FENCED);
        }
        Ok(())
    }

    /// Kafka `TransactionMetadata.isEpochExhausted`: 32766 and up; 32767 stays free so the
    /// coordinator can always fence.
    pub fn is_epoch_exhausted(epoch: i16) -> bool {
        epoch >= i16::MAX - 1
    }
}

/// The coordinator side of every transactional id in the cluster. The model has one logical
/// coordinator; the cluster names a broker for each transactional id.
#[derive(Debug, Default)]
pub struct TransactionCoordinator {
    pub(super) txns: HashMap<String, TransactionMetadata>,
    /// The `__transaction_state` partition leader epoch, carried by every marker; it rises
    /// each time the coordinator moves, so partitions fence markers of the old one.
    pub(super) coordinator_epoch: i32,
}

impl TransactionCoordinator {
    pub fn metadata(&self, transactional_id: &str) -> Option<&TransactionMetadata> {
        self.txns.get(transactional_id)
    }

    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch
    }

    /// A coordinator election (the `__transaction_state` partition changed leader).
    pub fn bump_coordinator_epoch(&mut self) {
        self.coordinator_epoch += 1;
    }

    /// InitProducerId. `expected` is the request's (producer id, epoch) when it carries one
    /// (KIP-360, v3+). Answers PRODUCER_FENCED where Kafka does; InitProducerId below v4 turns
    /// that into INVALID_PRODUCER_EPOCH at the protocol layer (`KafkaApis`). `cluster_version`
    /// is the cluster's finalized transaction version, which the fence of an open transaction
    /// ends it with (the abort is the coordinator's, not the client's).
    pub fn init_producer_id(
        &mut self,
        ids: &mut ProducerIdManager,
        transactional_id: Option<&str>,
        transaction_timeout_ms: i32,
        expected: Option<(i64, i16)>,
        cluster_version: TransactionVersion,
        now_ms: i64,
    ) -> (InitProducerIdResult, Option<MarkerJob>) {
        let Some(transactional_id) = transactional_id else {
            // An idempotent producer always gets a fresh id at epoch 0, whatever it names.
            return (InitProducerIdResult::ok(ids.generate(), 0), None);
        };
        if transactional_id.is_empty() {
            return (InitProducerIdResult::error(INVALID_REQUEST), None);
        }
        if transaction_timeout_ms <= 0 || transaction_timeout_ms > TRANSACTION_MAX_TIMEOUT_MS {
            return (
                InitProducerIdResult::error(INVALID_TRANSACTION_TIMEOUT),
                None,
            );
        }
        let coordinator_epoch = self.coordinator_epoch;
        let metadata = self
            .txns
            .entry(transactional_id.to_string())
            .or_insert_with(|| TransactionMetadata {
                producer_id: ids.generate(),
                prev_producer_id: -1,
                next_producer_id: -1,
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
                return (InitProducerIdResult::error(PRODUCER_FENCED), None);
            }
        }

        let result = match metadata.state {
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
                        Some(_) => return (InitProducerIdResult::error(PRODUCER_FENCED), None),
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
            // A new instance of the producer fences the open transaction: the epoch rises
            // (PrepareEpochFence, never persisted), the transaction is aborted with markers at
            // the new epoch, and the answer is CONCURRENT_TRANSACTIONS, never the epoch; the
            // client's retry then bumps again from CompleteAbort (TransactionCoordinatorTest
            // `shouldAbortTransactionOnHandleInitPidWhenExistingTransactionInOngoingState`).
            // Under TV2 the abort keeps the fenced epoch as `lastProducerEpoch`.
            TransactionState::Ongoing => {
                let job = fence_and_prepare_abort(
                    transactional_id,
                    metadata,
                    coordinator_epoch,
                    cluster_version,
                    now_ms,
                );
                return (
                    InitProducerIdResult::error(CONCURRENT_TRANSACTIONS),
                    Some(job),
                );
            }
            // Never stored by this model (no pending states, no expiry of transactional ids).
            TransactionState::PrepareEpochFence | TransactionState::Dead => {
                InitProducerIdResult::error(CONCURRENT_TRANSACTIONS)
            }
        };
        (result, None)
    }

    /// AddPartitionsToTxn v0-v3 and AddOffsetsToTxn, the coordinator part of
    /// `handleAddPartitionsToTransaction`, after the request-level and per-partition checks of
    /// `KafkaApis`. One code for the whole request. The TV2 implicit add (Produce v12+,
    /// TxnOffsetCommit v5+: `AddPartitionsToTxnManager` with `verifyOnly` false) is the same
    /// transition with the same checks.
    pub fn add_partitions(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
        now_ms: i64,
    ) -> i16 {
        let Some(metadata) = self.txns.get_mut(transactional_id) else {
            return INVALID_PRODUCER_ID_MAPPING;
        };
        if let Err(code) = metadata.check_identity(producer_id, producer_epoch) {
            return code;
        }
        match metadata.state {
            // The previous transaction's markers are still being written.
            TransactionState::PrepareCommit
            | TransactionState::PrepareAbort
            | TransactionState::PrepareEpochFence
            | TransactionState::Dead => return CONCURRENT_TRANSACTIONS,
            TransactionState::Ongoing
                if partitions
                    .iter()
                    .all(|p| metadata.topic_partitions.contains(p)) =>
            {
                return NONE;
            }
            TransactionState::Ongoing => {}
            TransactionState::Empty
            | TransactionState::CompleteCommit
            | TransactionState::CompleteAbort => {
                // The transaction starts here, and so does its timeout.
                metadata.topic_partitions.clear();
                metadata.txn_start_ms = now_ms;
            }
        }
        metadata.topic_partitions.extend(partitions.iter().cloned());
        metadata.state = TransactionState::Ongoing;
        metadata.txn_last_update_ms = now_ms;
        NONE
    }

    /// EndTxn v0-v4 (`endTransactionWithTV1`). `Ok(Some(job))`: the transaction entered
    /// PrepareCommit/PrepareAbort and its markers are to be written; `Ok(None)`: a retry of an
    /// end that already completed, answered NONE with no write. The epoch never changes under
    /// TV1. PRODUCER_FENCED is sent as INVALID_PRODUCER_EPOCH below v2 by the protocol layer.
    pub fn end_txn(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        now_ms: i64,
    ) -> Result<Option<MarkerJob>, i16> {
        let coordinator_epoch = self.coordinator_epoch;
        let metadata = self
            .txns
            .get_mut(transactional_id)
            .ok_or(INVALID_PRODUCER_ID_MAPPING)?;
        metadata.check_identity(producer_id, producer_epoch)?;
        use TransactionState::*;
        match (metadata.state, commit) {
            (Ongoing, _) => Ok(Some(prepare_end(
                transactional_id,
                metadata,
                coordinator_epoch,
                commit,
                TransactionVersion::Tv1,
                now_ms,
            ))),
            // The same end still writing its markers: retry later.
            (PrepareCommit, true) | (PrepareAbort, false) => Err(CONCURRENT_TRANSACTIONS),
            // A retry of an end whose answer was lost.
            (CompleteCommit, true) | (CompleteAbort, false) => Ok(None),
            (PrepareCommit, false)
            | (PrepareAbort, true)
            | (CompleteCommit, false)
            | (CompleteAbort, true)
            | (Empty, _) => Err(INVALID_TXN_STATE),
            (PrepareEpochFence | Dead, _) => Err(CONCURRENT_TRANSACTIONS),
        }
    }

    /// `abortTimedOutTransactions`: every Ongoing transaction with `txn_start_ms +
    /// txn_timeout_ms < now_ms` is fenced and aborted at epoch + 1, with the cluster's
    /// finalized transaction version (the abort is not a client's). Under TV1
    /// `lastProducerEpoch` becomes -1, so the timed-out producer is fenced for good
    /// (TransactionCoordinatorTest `shouldAbortExpiredTransactionsInOngoingStateAndBumpEpoch`);
    /// under TV2 it is the old epoch, so the producer's own EndTxn(abort) at that epoch is a
    /// valid retry and the producer recovers. Ordered by transactional id.
    pub fn abort_timed_out_transactions(
        &mut self,
        cluster_version: TransactionVersion,
        now_ms: i64,
    ) -> Vec<MarkerJob> {
        let coordinator_epoch = self.coordinator_epoch;
        let mut expired: Vec<(&String, &mut TransactionMetadata)> = self
            .txns
            .iter_mut()
            .filter(|(_, m)| {
                m.state == TransactionState::Ongoing
                    && m.txn_start_ms + i64::from(m.txn_timeout_ms) < now_ms
            })
            .collect();
        expired.sort_by(|a, b| a.0.cmp(b.0));
        expired
            .into_iter()
            .map(|(id, metadata)| {
                fence_and_prepare_abort(id, metadata, coordinator_epoch, cluster_version, now_ms)
            })
            .collect()
    }

    /// Every marker of `job` is written: PrepareCommit/PrepareAbort → CompleteCommit /
    /// CompleteAbort, the partition set is emptied and the timeout clock stops. A TV2 end that
    /// exhausted the epoch completes on its next producer id at epoch 0, `lastProducerEpoch`
    /// staying the last epoch the client saw (`TransactionMetadata.prepareComplete`).
    pub fn complete_markers(&mut self, job: &MarkerJob, now_ms: i64) {
        let Some(metadata) = self.txns.get_mut(&job.transactional_id) else {
            return;
        };
        metadata.state = match metadata.state {
            TransactionState::PrepareCommit => TransactionState::CompleteCommit,
            TransactionState::PrepareAbort => TransactionState::CompleteAbort,
            // Only a Prepare state has markers in flight.
            other => other,
        };
        if metadata.next_producer_id != -1 {
            metadata.prev_producer_id = metadata.producer_id;
            metadata.producer_id = metadata.next_producer_id;
            metadata.producer_epoch = 0;
            metadata.next_producer_id = -1;
        }
        metadata.topic_partitions.clear();
        metadata.txn_start_ms = -1;
        metadata.txn_last_update_ms = now_ms;
    }

    /// `handleVerifyPartitionsInTransaction` (KIP-890 part 1, `verifyOnly`): whether
    /// `topic`-`partition` is in the open transaction of this (pid, epoch), in coordinator codes
    /// (no pending-transition check: the model has none).
    pub fn check_in_transaction(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
    ) -> Result<(), i16> {
        let metadata = self
            .txns
            .get(transactional_id)
            .ok_or(INVALID_PRODUCER_ID_MAPPING)?;
        metadata.check_identity(producer_id, producer_epoch)?;
        if matches!(
            metadata.state,
            TransactionState::PrepareCommit | TransactionState::PrepareAbort
        ) {
            return Err(CONCURRENT_TRANSACTIONS);
        }
        if metadata.state == TransactionState::Ongoing
            && metadata
                .topic_partitions
                .contains(&(topic.to_string(), partition))
        {
            return Ok(());
        }
        Err(TRANSACTION_ABORTABLE)
    }

    /// KIP-890 part 1 verification of a transactional produce (TV1, `verifyOnly`), already
    /// translated to the produce error (`AddPartitionsToTxnManager`, Produce v10 and below).
    pub fn verify_partition(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
    ) -> Result<(), (i16, &'static str)> {
        self.check_in_transaction(
            transactional_id,
            producer_id,
            producer_epoch,
            topic,
            partition,
        )
        .map_err(|code| match code {
            INVALID_PRODUCER_ID_MAPPING => (code, "producer id does not match"),
            // PRODUCER_FENCED from the coordinator reaches the producer as
            // INVALID_PRODUCER_EPOCH.
            PRODUCER_FENCED => (INVALID_PRODUCER_EPOCH, "producer epoch is not current"),
            CONCURRENT_TRANSACTIONS => (
                NOT_ENOUGH_REPLICAS,
                "Unable to verify the partition has been added to the transaction",
            ),
            _ => (
                INVALID_TXN_STATE,
                "Partition was not added to the transaction",
            ),
        })
    }
}

/// Ongoing → (PrepareEpochFence) → PrepareAbort at epoch + 1, as InitProducerId's fence and
/// the timeout do. TV1 (`endTransactionWithTV1`, epoch fence): the epoch is raised by hand and
/// `lastProducerEpoch` becomes -1, so a KIP-360 InitProducerId or an EndTxn with the old epoch
/// is PRODUCER_FENCED. TV2 (`endTransaction`): the pending fence is dropped and
/// `prepareAbortOrCommit` bumps the epoch as for any end, keeping the old one as
/// `lastProducerEpoch`.
fn fence_and_prepare_abort(
    transactional_id: &str,
    metadata: &mut TransactionMetadata,
    coordinator_epoch: i32,
    version: TransactionVersion,
    now_ms: i64,
) -> MarkerJob {
    if !version.supports_epoch_bump() {
        // 32767 is never handed to a client, so the coordinator can always fence
        // (TransactionCoordinatorTest `shouldUseLastEpochToFenceWhenEpochsAreExhausted`).
        metadata.producer_epoch = metadata.producer_epoch.saturating_add(1);
        metadata.last_producer_epoch = -1;
    }
    prepare_end(
        transactional_id,
        metadata,
        coordinator_epoch,
        false,
        version,
        now_ms,
    )
}

/// → PrepareCommit / PrepareAbort (`TransactionMetadata.prepareAbortOrCommit`): TV1 keeps the
/// epoch; TV2 bumps it, `lastProducerEpoch` becoming the epoch the transaction ran at, and the
/// markers carry the bumped epoch. The caller allocates `next_producer_id` first when a TV2 end
/// exhausts the epoch.
pub(super) fn prepare_end(
    transactional_id: &str,
    metadata: &mut TransactionMetadata,
    coordinator_epoch: i32,
    commit: bool,
    version: TransactionVersion,
    now_ms: i64,
) -> MarkerJob {
    if version.supports_epoch_bump() {
        // The caller made sure the epoch is below 32767 (an exhausted epoch moves to a new id).
        metadata.last_producer_epoch = metadata.producer_epoch;
        metadata.producer_epoch = metadata.producer_epoch.saturating_add(1);
    }
    metadata.state = if commit {
        TransactionState::PrepareCommit
    } else {
        TransactionState::PrepareAbort
    };
    metadata.txn_last_update_ms = now_ms;
    MarkerJob {
        transactional_id: transactional_id.to_string(),
        producer_id: metadata.producer_id,
        producer_epoch: metadata.producer_epoch,
        coordinator_epoch,
        commit,
        transaction_version: version,
        partitions: metadata.topic_partitions.iter().cloned().collect(),
    }
}
