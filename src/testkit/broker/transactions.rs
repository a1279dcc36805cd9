//! The cluster's transaction APIs: which broker coordinates what, and the glue between the
//! transaction coordinator, the partitions that receive its markers and the group offsets.
//!
//! Each coordinator API first resolves the owning coordinator, as every Kafka coordinator API
//! does (`TransactionStateManager.getAndMaybeAddTransactionState`): a broker that is down
//! answers NETWORK_EXCEPTION (the lost connection), one that is not the coordinator
//! NOT_COORDINATOR. Coordinators are a stable function of the key over the broker ids, unless
//! [`Cluster::move_transaction_coordinator`] moved one.

use super::coordinator::MarkerJob;
use super::error_codes::*;
use super::group_offsets::{
    offsets_partition_for, OffsetAndMetadata, CONSUMER_OFFSETS_TOPIC, OFFSET_METADATA_MAX_BYTES,
};
use super::transaction_version::TransactionVersion;
use super::{AbortedTxn, Cluster, InitProducerIdResult};

/// FindCoordinator key type of a consumer group.
pub const COORDINATOR_KEY_GROUP: i8 = 0;
/// FindCoordinator key type of a transactional id.
pub const COORDINATOR_KEY_TRANSACTION: i8 = 1;

/// One partition of a TxnOffsetCommit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOffsetCommitInput {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The offset to commit.
    pub offset: i64,
    /// The leader epoch of the consumed record (-1: unknown).
    pub leader_epoch: i32,
    /// The offset's metadata string.
    pub metadata: Option<String>,
}

/// The group-level fields of a TxnOffsetCommit.
#[derive(Debug, Clone, Copy)]
pub struct TxnOffsetCommitGroup<'a> {
    /// The transaction's id.
    pub transactional_id: &'a str,
    /// The consumer group.
    pub group_id: &'a str,
    /// The producer id.
    pub producer_id: i64,
    /// The producer epoch.
    pub producer_epoch: i16,
    /// The group's generation (negative: not checked).
    pub generation_id: i32,
}

/// EndTxn's answer. Under TV1 (v0-v4) the response carries no producer id or epoch (-1/-1);
/// under TV2 (v5+) a success carries the ones the producer continues with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnResult {
    /// The error code (0: none).
    pub error_code: i16,
    /// The producer id to use from now on (-1 under TV1 and on errors).
    pub producer_id: i64,
    /// The epoch to use from now on (-1 under TV1 and on errors).
    pub producer_epoch: i16,
}

impl EndTxnResult {
    fn code(error_code: i16) -> Self {
        EndTxnResult {
            error_code,
            producer_id: -1,
            producer_epoch: -1,
        }
    }
}

/// One partition of an OffsetFetch answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetFetchPartition {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The error code (0: none).
    pub error_code: i16,
    /// -1 when nothing is committed (or on error).
    pub offset: i64,
    /// The committed leader epoch (-1: none).
    pub leader_epoch: i32,
    /// The committed metadata string.
    pub metadata: Option<String>,
}

/// FNV-1a of a key: stable across runs, unlike the std hasher.
fn key_hash(key: &str) -> u64 {
    key.as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x1000_0000_01b3)
        })
}

impl Cluster {
    /// The broker FindCoordinator names for `key` (`key_type` 0: group, 1: transactional id).
    pub fn coordinator_for(&self, key_type: i8, key: &str) -> i32 {
        if key_type == COORDINATOR_KEY_TRANSACTION {
            if let Some(&broker) = self.txn_coordinator_moved.get(key) {
                return broker;
            }
        }
        let ids = self.broker_ids();
        ids[(key_hash(key) % ids.len() as u64) as usize]
    }

    /// The broker that coordinates `transactional_id`.
    pub fn transaction_coordinator(&self, transactional_id: &str) -> i32 {
        self.coordinator_for(COORDINATOR_KEY_TRANSACTION, transactional_id)
    }

    /// The broker that coordinates `group_id`.
    pub fn group_coordinator(&self, group_id: &str) -> i32 {
        self.coordinator_for(COORDINATOR_KEY_GROUP, group_id)
    }

    /// Moves the coordinator of `transactional_id` to `broker`, as an election of its
    /// `__transaction_state` partition does: the coordinator epoch rises (markers of the old
    /// coordinator are fenced on the partitions) and the old broker answers NOT_COORDINATOR.
    /// The transaction state moves along (the new leader loads it from the log).
    ///
    /// A transaction caught in PrepareCommit/PrepareAbort with its markers not yet written
    /// (held) is finished by the new coordinator: Kafka's old coordinator drops its pending
    /// markers on resignation (`TransactionMarkerChannelManager.removeMarkersForTxnTopicPartition`)
    /// and the new one, loading the state, sends them again under its own coordinator epoch
    /// (`TransactionCoordinator.onElection`). So held markers of that transactional id are
    /// re-stamped with the new epoch.
    pub fn move_transaction_coordinator(&mut self, transactional_id: &str, broker: i32) {
        assert!(
            self.brokers.contains_key(&broker),
            "unknown broker {broker}"
        );
        self.txn_coordinator_moved
            .insert(transactional_id.to_string(), broker);
        self.coordinator.bump_coordinator_epoch();
        let coordinator_epoch = self.coordinator.coordinator_epoch();
        for job in &mut self.held_markers {
            if job.transactional_id == transactional_id {
                job.coordinator_epoch = coordinator_epoch;
            }
        }
    }

    /// The coordinator epoch markers carry now.
    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator.coordinator_epoch()
    }

    /// Whether `broker` may serve a coordinator request for `key`.
    /// A request of a transactional id's transaction: it names one, and `broker` is its
    /// coordinator.
    fn check_transaction_coordinator(
        &self,
        broker: i32,
        transactional_id: &str,
    ) -> Result<(), i16> {
        if transactional_id.is_empty() {
            return Err(INVALID_REQUEST);
        }
        self.check_coordinator(broker, COORDINATOR_KEY_TRANSACTION, transactional_id)
    }

    fn check_coordinator(&self, broker: i32, key_type: i8, key: &str) -> Result<(), i16> {
        if !self.is_broker_up(broker) {
            return Err(NETWORK_EXCEPTION);
        }
        if self.coordinator_for(key_type, key) != broker {
            return Err(NOT_COORDINATOR);
        }
        Ok(())
    }

    /// InitProducerId as served by `broker`: a transactional id must be asked of its
    /// coordinator; an idempotent producer may ask any broker (and is answered as before
    /// coordinators were modelled, whatever the broker's state).
    pub fn init_producer_id_at(
        &mut self,
        broker: i32,
        transactional_id: Option<&str>,
        transaction_timeout_ms: i32,
        producer_id: i64,
        producer_epoch: i16,
        now_ms: i64,
    ) -> InitProducerIdResult {
        let check = match transactional_id {
            Some(id) if !id.is_empty() => {
                self.check_coordinator(broker, COORDINATOR_KEY_TRANSACTION, id)
            }
            _ => Ok(()),
        };
        if let Err(code) = check {
            return InitProducerIdResult::error(code);
        }
        self.init_producer_id(
            transactional_id,
            transaction_timeout_ms,
            producer_id,
            producer_epoch,
            now_ms,
        )
    }

    /// AddPartitionsToTxn v0-v3 (`KafkaApis.handleAddPartitionsToTransactionRequest`, then
    /// the coordinator). One code per input partition, in order: an unknown partition gets
    /// UNKNOWN_TOPIC_OR_PARTITION and every other one OPERATION_NOT_ATTEMPTED, with nothing
    /// added; otherwise the coordinator's code applies to all of them.
    pub fn add_partitions_to_txn(
        &mut self,
        broker: i32,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
        now_ms: i64,
    ) -> Vec<i16> {
        let all = |code| vec![code; partitions.len()];
        if let Err(code) = self.check_transaction_coordinator(broker, transactional_id) {
            return all(code);
        }
        let unknown: Vec<bool> = partitions
            .iter()
            .map(|(topic, partition)| self.partition(topic, *partition).is_none())
            .collect();
        if unknown.iter().any(|&u| u) {
            return unknown
                .into_iter()
                .map(|u| {
                    if u {
                        UNKNOWN_TOPIC_OR_PARTITION
                    } else {
                        OPERATION_NOT_ATTEMPTED
                    }
                })
                .collect();
        }
        all(self.coordinator.add_partitions(
            transactional_id,
            producer_id,
            producer_epoch,
            partitions,
            now_ms,
        ))
    }

    /// A `verifyOnly` transaction of AddPartitionsToTxn v4+ (KIP-890 part 1, what a partition
    /// leader asks before a TV1 transactional append; `TransactionCoordinator
    /// .handleVerifyPartitionsInTransaction`): one code per input partition, in order. The
    /// per-partition checks of `KafkaApis` come first, as for the client versions; then a
    /// coordinator error (unknown id or producer id, fenced epoch, markers being written)
    /// applies to every partition, else each is NONE if it is in the transaction and
    /// TRANSACTION_ABORTABLE if not. Nothing changes. (A transaction of v4+ without
    /// `verifyOnly` is [`Self::add_partitions_to_txn`].)
    pub fn verify_partitions_in_txn(
        &self,
        broker: i32,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
    ) -> Vec<i16> {
        if let Err(code) = self.check_transaction_coordinator(broker, transactional_id) {
            return vec![code; partitions.len()];
        }
        if partitions
            .iter()
            .any(|(topic, partition)| self.partition(topic, *partition).is_none())
        {
            return partitions
                .iter()
                .map(
                    |(topic, partition)| match self.partition(topic, *partition) {
                        None => UNKNOWN_TOPIC_OR_PARTITION,
                        Some(_) => OPERATION_NOT_ATTEMPTED,
                    },
                )
                .collect();
        }
        partitions
            .iter()
            .map(|(topic, partition)| {
                match self.coordinator.check_in_transaction(
                    transactional_id,
                    producer_id,
                    producer_epoch,
                    topic,
                    *partition,
                ) {
                    Ok(()) => NONE,
                    Err(code) => code,
                }
            })
            .collect()
    }

    /// AddOffsetsToTxn v0-v4: adds the group's `__consumer_offsets` partition to the
    /// transaction, with AddPartitionsToTxn's coordinator rules (TV1 semantics always).
    pub fn add_offsets_to_txn(
        &mut self,
        broker: i32,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        group_id: &str,
        now_ms: i64,
    ) -> i16 {
        if let Err(code) = self.check_transaction_coordinator(broker, transactional_id) {
            return code;
        }
        let offsets_partition = (
            CONSUMER_OFFSETS_TOPIC.to_string(),
            offsets_partition_for(group_id),
        );
        self.coordinator.add_partitions(
            transactional_id,
            producer_id,
            producer_epoch,
            &[offsets_partition],
            now_ms,
        )
    }

    /// EndTxn at the request's `version`: v5+ is TV2 ([`TransactionVersion::for_end_txn`],
    /// whatever the finalized level, as Kafka picks by version), below TV1. NONE means the
    /// Prepare state is recorded; its markers are written before this returns unless markers
    /// are held ([`Self::hold_transaction_markers`]).
    #[allow(clippy::too_many_arguments)]
    pub fn end_txn_at_version(
        &mut self,
        broker: i32,
        version: i16,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        now_ms: i64,
    ) -> EndTxnResult {
        if TransactionVersion::for_end_txn(version) == TransactionVersion::Tv1 {
            return EndTxnResult::code(self.end_txn(
                broker,
                transactional_id,
                producer_id,
                producer_epoch,
                commit,
                now_ms,
            ));
        }
        if let Err(code) = self.check_transaction_coordinator(broker, transactional_id) {
            return EndTxnResult::code(code);
        }
        match self.coordinator.end_txn_v2(
            &mut self.producer_ids,
            transactional_id,
            producer_id,
            producer_epoch,
            commit,
            now_ms,
        ) {
            Ok(end) => {
                if let Some(job) = end.markers {
                    self.send_markers(job, now_ms);
                }
                EndTxnResult {
                    error_code: NONE,
                    producer_id: end.producer_id,
                    producer_epoch: end.producer_epoch,
                }
            }
            Err(code) => EndTxnResult::code(code),
        }
    }

    /// EndTxn v0-v4 (TV1). NONE means the Prepare state is recorded; its markers are written
    /// before this returns unless markers are held ([`Self::hold_transaction_markers`]).
    pub fn end_txn(
        &mut self,
        broker: i32,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        now_ms: i64,
    ) -> i16 {
        if let Err(code) = self.check_transaction_coordinator(broker, transactional_id) {
            return code;
        }
        match self.coordinator.end_txn(
            transactional_id,
            producer_id,
            producer_epoch,
            commit,
            now_ms,
        ) {
            Ok(Some(job)) => {
                self.send_markers(job, now_ms);
                NONE
            }
            Ok(None) => NONE,
            Err(code) => code,
        }
    }

    /// The coordinator's periodic `abortTimedOutTransactions`: fences and aborts every
    /// transaction open longer than its timeout. Returns how many were aborted. The TCP face
    /// calls it on a timer; the simulator calls it on its virtual clock.
    pub fn abort_timed_out_transactions(&mut self, now_ms: i64) -> usize {
        let cluster_version = self.cluster_transaction_version();
        let jobs = self
            .coordinator
            .abort_timed_out_transactions(cluster_version, now_ms);
        let count = jobs.len();
        for job in jobs {
            self.send_markers(job, now_ms);
        }
        count
    }

    /// Holds (true) or writes at once (false, the default) the markers of transactions that
    /// end from now on. Held transactions stay in PrepareCommit/PrepareAbort, where clients see
    /// CONCURRENT_TRANSACTIONS, until [`Self::release_transaction_markers`].
    pub fn hold_transaction_markers(&mut self, hold: bool) {
        self.hold_markers = hold;
    }

    /// Writes every held marker, oldest transaction first, and completes those transactions.
    /// Returns how many transactions completed.
    pub fn release_transaction_markers(&mut self, now_ms: i64) -> usize {
        let jobs = std::mem::take(&mut self.held_markers);
        let count = jobs.len();
        for job in jobs {
            self.write_markers(&job, now_ms);
        }
        count
    }

    /// Transactions whose markers are held.
    pub fn held_transaction_markers(&self) -> usize {
        self.held_markers.len()
    }

    /// A transaction entered Prepare*: write its markers now, or hold them. A transaction
    /// with no partition (a TV2 abort with nothing added) has no marker to wait for and
    /// completes at once (`TransactionMarkerChannelManager.addTxnMarkersToSend`).
    pub(super) fn send_markers(&mut self, job: MarkerJob, now_ms: i64) {
        if self.hold_markers && !job.partitions.is_empty() {
            self.held_markers.push(job);
        } else {
            self.write_markers(&job, now_ms);
        }
    }

    /// Writes one marker per partition of the transaction (`TransactionMarkerChannelManager`,
    /// `KafkaApis.handleWriteTxnMarkersRequest`), including partitions that got no data;
    /// offsets partitions go to the group offsets. A partition that rejects its marker
    /// (a stale epoch or coordinator epoch: a zombie coordinator's marker) keeps its state, as
    /// Kafka's marker handler then drops that marker. Then the transaction completes.
    fn write_markers(&mut self, job: &MarkerJob, now_ms: i64) {
        for (topic, partition) in &job.partitions {
            if topic == CONSUMER_OFFSETS_TOPIC {
                self.group_offsets
                    .complete_transaction(job.producer_id, *partition, job.commit);
                continue;
            }
            let Some(p) = self.partition_mut(topic, *partition) else {
                continue;
            };
            if p.append_end_txn_marker(
                job.producer_id,
                job.producer_epoch,
                job.coordinator_epoch,
                job.commit,
                job.transaction_version,
                now_ms,
            )
            .is_err()
            {
                self.markers_rejected += 1;
            }
        }
        self.coordinator.complete_markers(job, now_ms);
    }

    /// Markers a partition refused (a correct run has none).
    pub fn markers_rejected(&self) -> u64 {
        self.markers_rejected
    }

    /// TxnOffsetCommit v0-v4 (TV1); see [`Self::txn_offset_commit_at_version`].
    pub fn txn_offset_commit(
        &mut self,
        broker: i32,
        group: TxnOffsetCommitGroup<'_>,
        offsets: &[TxnOffsetCommitInput],
    ) -> Vec<i16> {
        // The TV1 path changes no transaction metadata, so it reads no clock.
        self.txn_offset_commit_at_version(broker, 4, group, offsets, 0)
    }

    /// TxnOffsetCommit at the group coordinator, at the request's `version`. One code per
    /// input partition, in order, in the Kafka broker's check order: coordinator, group id,
    /// the group's offsets partition in the transaction, group generation, then per partition
    /// the topic and the metadata size. Below v5 (TV1) the partition must have been added with
    /// AddOffsetsToTxn and "not in the transaction" is answered TRANSACTION_ABORTABLE (below
    /// v4 the protocol layer sends INVALID_TXN_STATE); from v5 (TV2) the coordinator adds it
    /// here (`AddPartitionsToTxnManager` `addPartition`), with AddPartitionsToTxn's errors.
    pub fn txn_offset_commit_at_version(
        &mut self,
        broker: i32,
        version: i16,
        group: TxnOffsetCommitGroup<'_>,
        offsets: &[TxnOffsetCommitInput],
        now_ms: i64,
    ) -> Vec<i16> {
        let all = |code| vec![code; offsets.len()];
        if let Err(code) = self.check_coordinator(broker, COORDINATOR_KEY_GROUP, group.group_id) {
            return all(code);
        }
        if group.transactional_id.is_empty() {
            return all(INVALID_REQUEST);
        }
        if group.group_id.is_empty() {
            return all(INVALID_GROUP_ID);
        }
        let offsets_partition = offsets_partition_for(group.group_id);
        let verified = match TransactionVersion::for_txn_offset_commit(version) {
            TransactionVersion::Tv1 => self.coordinator.check_in_transaction(
                group.transactional_id,
                group.producer_id,
                group.producer_epoch,
                CONSUMER_OFFSETS_TOPIC,
                offsets_partition,
            ),
            TransactionVersion::Tv2 => {
                match self.coordinator.add_partitions(
                    group.transactional_id,
                    group.producer_id,
                    group.producer_epoch,
                    &[(CONSUMER_OFFSETS_TOPIC.to_string(), offsets_partition)],
                    now_ms,
                ) {
                    NONE => Ok(()),
                    code => Err(code),
                }
            }
        };
        if let Err(code) = verified {
            // `CoordinatorOperationExceptionHelper`: a fenced epoch reaches the client as
            // INVALID_PRODUCER_EPOCH.
            return all(if code == PRODUCER_FENCED {
                INVALID_PRODUCER_EPOCH
            } else {
                code
            });
        }
        // A group with members is unknown to the model, so a named generation cannot match
        // (`validateTransactionalOffsetCommit`: unknown group, generation >= 0).
        if group.generation_id >= 0 {
            return all(ILLEGAL_GENERATION);
        }
        offsets
            .iter()
            .map(|o| {
                if self.partition(&o.topic, o.partition).is_none() {
                    return UNKNOWN_TOPIC_OR_PARTITION;
                }
                let metadata = o.metadata.clone().unwrap_or_default();
                if metadata.len() > OFFSET_METADATA_MAX_BYTES {
                    return OFFSET_METADATA_TOO_LARGE;
                }
                self.group_offsets.commit_transactional_offset(
                    group.group_id,
                    group.producer_id,
                    &o.topic,
                    o.partition,
                    OffsetAndMetadata {
                        offset: o.offset,
                        leader_epoch: o.leader_epoch,
                        metadata,
                    },
                );
                NONE
            })
            .collect()
    }

    /// OffsetFetch at the group coordinator: `Err` is a group-level error; `partitions`
    /// `None` asks for every committed partition of the group.
    pub fn offset_fetch(
        &self,
        broker: i32,
        group_id: &str,
        partitions: Option<&[(String, i32)]>,
        require_stable: bool,
    ) -> Result<Vec<OffsetFetchPartition>, i16> {
        self.check_coordinator(broker, COORDINATOR_KEY_GROUP, group_id)?;
        let wanted = match partitions {
            Some(p) => p.to_vec(),
            None => self.group_offsets.committed_partitions(group_id),
        };
        Ok(wanted
            .into_iter()
            .map(|(topic, partition)| {
                match self
                    .group_offsets
                    .fetch_offset(group_id, &topic, partition, require_stable)
                {
                    Ok(found) => OffsetFetchPartition {
                        error_code: NONE,
                        offset: found.map_or(-1, |o| o.offset),
                        leader_epoch: found.map_or(-1, |o| o.leader_epoch),
                        metadata: Some(found.map(|o| o.metadata.clone()).unwrap_or_default()),
                        topic,
                        partition,
                    },
                    Err(code) => OffsetFetchPartition {
                        error_code: code,
                        offset: -1,
                        leader_epoch: -1,
                        metadata: None,
                        topic,
                        partition,
                    },
                }
            })
            .collect())
    }

    /// The committed offset of a group's partition, for checkers.
    pub fn committed_offset(&self, group_id: &str, topic: &str, partition: i32) -> Option<i64> {
        self.group_offsets
            .committed(group_id, topic, partition)
            .map(|o| o.offset)
    }

    /// The aborted-transaction index of a partition, oldest first.
    pub fn aborted_transactions(&self, topic: &str, partition: i32) -> Vec<AbortedTxn> {
        self.partition(topic, partition)
            .map(|p| p.aborted_txns().to_vec())
            .unwrap_or_default()
    }
}
