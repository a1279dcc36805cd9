//! The reference broker's sans-IO core: a whole cluster's state in one struct.
//!
//! No I/O and no clock reads: time is an argument, so the deterministic simulator can drive a
//! [`Cluster`] in memory and the TCP face ([`crate::testkit::server`]) can wrap it in a mutex.
//! Its verdicts follow the Apache Kafka broker's producer-state rules (rulebook:
//! `kafka-broker-producer-rules.md`); each rule cites the Kafka class it comes from.
//!
//! Model: every broker hosts a replica of every partition, but only the leader's log exists and
//! it is always fully replicated (one in-sync replica), so the high watermark is the log end
//! offset and acks=all commits at once. Topics use CreateTime. Leaders move only when told.

pub mod error_codes;

mod coordinator;
mod group_offsets;
mod partition;
mod producer_state;
mod restart;
mod transactions;

use std::collections::{BTreeMap, HashMap};

use bytes::{Bytes, BytesMut};

pub use coordinator::{
    MarkerJob, TransactionMetadata, TransactionState, TRANSACTION_MAX_TIMEOUT_MS,
};
pub use group_offsets::{offsets_partition_for, CONSUMER_OFFSETS_TOPIC};
pub use partition::{AbortedTxn, StoredBatch};
pub use producer_state::{BatchMetadata, ProducerStateEntry};
pub use transactions::{
    OffsetFetchPartition, TxnOffsetCommitGroup, TxnOffsetCommitInput, COORDINATOR_KEY_GROUP,
    COORDINATOR_KEY_TRANSACTION,
};

use crate::testkit::batch::{self, BatchError, BatchHeader};
use coordinator::{ProducerIdManager, TransactionCoordinator};
use error_codes::*;
use partition::Partition;

/// Which era of broker answers to give where Kafka changed its mind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KafkaBehaviour {
    /// Kafka 2.5+ / 4.x: never UNKNOWN_PRODUCER_ID or DUPLICATE_SEQUENCE_NUMBER on produce; an
    /// unknown producer may start at any sequence; producer state survives retention.
    Current,
    /// The answers of brokers before KIP-360 (2.5), which clients still handle:
    /// UNKNOWN_PRODUCER_ID for an unknown producer with a non-zero sequence (1.0-2.4,
    /// KAFKA-5793) and for a known epoch with no retained batch (2.1-2.4, KAFKA-7298);
    /// DUPLICATE_SEQUENCE_NUMBER for a retry older than the retained batches (1.0-1.1, removed
    /// by KAFKA-6683 in 2.0); producer state dropped when retention passes its last batch
    /// (before KAFKA-7190, 2.5).
    Legacy,
}

/// Broker configuration that changes verdicts.
#[derive(Debug, Clone)]
pub struct BrokerRules {
    pub kafka_version: KafkaBehaviour,
    /// Batches retained per producer for de-duplication (Kafka: 5).
    pub producer_state_window: usize,
    /// Topic `max.message.bytes` (default 1 048 588), counted with the 12-byte log overhead.
    pub max_message_bytes: usize,
    /// `message.timestamp.after.max.ms` (default 1 h); `None` disables the check.
    pub message_timestamp_after_max_ms: Option<i64>,
    /// `producer.id.expiration.ms` (default 1 day), applied by [`Cluster::expire_producers`].
    pub producer_id_expiration_ms: i64,
    /// `transaction.partition.verification.enable` (default true since 3.6).
    pub transaction_verification: bool,
    /// Size-based retention per partition: older batches are dropped and the log start offset
    /// moves, as the librdkafka mock does at 5 MiB. `None` keeps everything.
    pub retention_bytes_per_partition: Option<usize>,
    /// `auto.create.topics.enable` with this many partitions; `None` disables it.
    pub auto_create_topic_partitions: Option<i32>,
    /// The first producer id handed out.
    pub first_producer_id: i64,
}

impl Default for BrokerRules {
    fn default() -> Self {
        BrokerRules {
            kafka_version: KafkaBehaviour::Current,
            producer_state_window: 5,
            max_message_bytes: 1_048_588,
            message_timestamp_after_max_ms: Some(3_600_000),
            producer_id_expiration_ms: 86_400_000,
            transaction_verification: true,
            retention_bytes_per_partition: None,
            auto_create_topic_partitions: None,
            first_producer_id: 1000,
        }
    }
}

/// One partition's answer to a produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducePartitionResult {
    pub error_code: i16,
    /// First offset assigned, the original first offset for a duplicate, -1 on error.
    pub base_offset: i64,
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
    pub error_message: Option<String>,
    /// On NOT_LEADER_OR_FOLLOWER: the current (leader, leader epoch), for Produce v10+
    /// (KIP-951 `CurrentLeader`).
    pub current_leader: Option<(i32, i32)>,
    /// Whether the batch was written (false for duplicates and errors).
    pub appended: bool,
}

impl ProducePartitionResult {
    pub fn error(error_code: i16) -> Self {
        ProducePartitionResult {
            error_code,
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
            error_message: None,
            current_leader: None,
            appended: false,
        }
    }

    fn with_message(mut self, message: &str) -> Self {
        self.error_message = Some(message.to_string());
        self
    }
}

/// One partition's answer to a fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartitionResult {
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// `Some` (possibly empty) for read_committed, `None` for read_uncommitted.
    pub aborted_transactions: Option<Vec<(i64, i64)>>,
    /// Whole stored batches, base offsets written.
    pub records: Bytes,
    /// On NOT_LEADER_OR_FOLLOWER: (leader, leader epoch), for Fetch v12+ (KIP-951).
    pub current_leader: Option<(i32, i32)>,
}

impl FetchPartitionResult {
    /// An error answer: offsets unknown (-1), no records.
    pub fn error(error_code: i16) -> Self {
        FetchPartitionResult {
            error_code,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            aborted_transactions: None,
            records: Bytes::new(),
            current_leader: None,
        }
    }
}

/// One partition's answer to ListOffsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListOffsetsResult {
    pub error_code: i16,
    pub offset: i64,
    pub timestamp: i64,
    pub leader_epoch: i32,
}

/// InitProducerId's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitProducerIdResult {
    pub error_code: i16,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

impl InitProducerIdResult {
    fn ok(producer_id: i64, producer_epoch: i16) -> Self {
        InitProducerIdResult {
            error_code: NONE,
            producer_id,
            producer_epoch,
        }
    }

    fn error(error_code: i16) -> Self {
        InitProducerIdResult {
            error_code,
            producer_id: -1,
            producer_epoch: -1,
        }
    }
}

/// One partition of a produce request.
#[derive(Debug, Clone, Copy)]
pub struct ProduceInput<'a> {
    pub topic: &'a str,
    pub partition: i32,
    /// `None` for a null records field.
    pub records: Option<&'a [u8]>,
}

/// A partition as Metadata shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionMetadata {
    pub leader: i32,
    pub leader_epoch: i32,
}

/// A topic as Metadata shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub name: String,
    /// The topic id (a UUID as 128 bits).
    pub topic_id: u128,
    pub partitions: Vec<PartitionMetadata>,
}

/// `ListOffsets` special timestamps.
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const LATEST_TIMESTAMP: i64 = -1;
pub const MAX_TIMESTAMP: i64 = -3;
/// Fetch/ListOffsets isolation levels.
pub const READ_UNCOMMITTED: i8 = 0;
pub const READ_COMMITTED: i8 = 1;

/// An error code, with the current (leader, epoch) when the error is NOT_LEADER_OR_FOLLOWER.
type LeaderError = (i16, Option<(i32, i32)>);

#[derive(Debug)]
struct Topic {
    id: u128,
    partitions: Vec<Partition>,
}

/// The whole cluster: brokers, topics with their logs and producer state, and the
/// coordinator state.
#[derive(Debug)]
pub struct Cluster {
    rules: BrokerRules,
    brokers: BTreeMap<i32, bool>,
    topics: HashMap<String, Topic>,
    topics_created: u64,
    duplicates_answered: u64,
    producer_ids: ProducerIdManager,
    coordinator: TransactionCoordinator,
    group_offsets: group_offsets::GroupOffsets,
    /// Transactional ids whose coordinator was moved off its default broker.
    txn_coordinator_moved: HashMap<String, i32>,
    /// See [`Cluster::hold_transaction_markers`].
    hold_markers: bool,
    /// Transactions in PrepareCommit/PrepareAbort whose markers wait for release, oldest
    /// first; at most one per transactional id, since a Prepare state admits no new end.
    held_markers: Vec<MarkerJob>,
    markers_rejected: u64,
}

impl Cluster {
    pub fn new(broker_ids: &[i32], rules: BrokerRules) -> Self {
        assert!(!broker_ids.is_empty(), "a cluster needs a broker");
        Cluster {
            producer_ids: ProducerIdManager::new(rules.first_producer_id),
            rules,
            brokers: broker_ids.iter().map(|&id| (id, true)).collect(),
            topics: HashMap::new(),
            topics_created: 0,
            duplicates_answered: 0,
            coordinator: TransactionCoordinator::default(),
            group_offsets: group_offsets::GroupOffsets::default(),
            txn_coordinator_moved: HashMap::new(),
            hold_markers: false,
            held_markers: Vec::new(),
            markers_rejected: 0,
        }
    }

    pub fn rules(&self) -> &BrokerRules {
        &self.rules
    }

    pub fn broker_ids(&self) -> Vec<i32> {
        self.brokers.keys().copied().collect()
    }

    /// Creates `name` with one partition per entry of `leaders`, partition `i` led by
    /// `leaders[i]`. Returns false if the topic exists.
    pub fn create_topic(&mut self, name: &str, leaders: &[i32]) -> bool {
        assert!(!leaders.is_empty(), "a topic needs a partition");
        for leader in leaders {
            assert!(self.brokers.contains_key(leader), "unknown broker {leader}");
        }
        if self.topics.contains_key(name) {
            return false;
        }
        self.topics_created += 1;
        // Distinct, non-zero, stable across runs (Kafka ids are random; clients only compare).
        let id = u128::from(self.topics_created)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
            | 1;
        self.topics.insert(
            name.to_string(),
            Topic {
                id,
                partitions: leaders.iter().map(|&l| Partition::new(l)).collect(),
            },
        );
        true
    }

    /// Creates `name` if `auto_create_topic_partitions` allows it, leaders round-robin.
    pub fn maybe_auto_create_topic(&mut self, name: &str) -> bool {
        let Some(count) = self.rules.auto_create_topic_partitions else {
            return false;
        };
        let brokers = self.broker_ids();
        let leaders: Vec<i32> = (0..count as usize)
            .map(|i| brokers[i % brokers.len()])
            .collect();
        self.create_topic(name, &leaders)
    }

    /// Moves leadership and bumps the leader epoch, as a controller election does.
    pub fn set_leader(&mut self, topic: &str, partition: i32, leader: i32) {
        assert!(
            self.brokers.contains_key(&leader),
            "unknown broker {leader}"
        );
        let p = self
            .partition_mut(topic, partition)
            .expect("unknown partition");
        p.leader = leader;
        p.leader_epoch += 1;
    }

    pub fn leader(&self, topic: &str, partition: i32) -> Option<(i32, i32)> {
        self.partition(topic, partition)
            .map(|p| (p.leader, p.leader_epoch))
    }

    /// Marks a broker up or down. A down broker answers nothing; the core answers requests
    /// addressed to it with NETWORK_EXCEPTION and changes nothing, standing in for the lost
    /// connection. Leaders do not move by themselves.
    pub fn set_broker_up(&mut self, broker: i32, up: bool) {
        if let Some(state) = self.brokers.get_mut(&broker) {
            *state = up;
        }
    }

    pub fn is_broker_up(&self, broker: i32) -> bool {
        self.brokers.get(&broker).copied().unwrap_or(false)
    }

    pub fn topic_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.topics.keys().cloned().collect();
        names.sort();
        names
    }

    pub fn topic_metadata(&self, name: &str) -> Option<TopicMetadata> {
        self.topics.get(name).map(|t| TopicMetadata {
            name: name.to_string(),
            topic_id: t.id,
            partitions: t
                .partitions
                .iter()
                .map(|p| PartitionMetadata {
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                })
                .collect(),
        })
    }

    pub fn topic_name_by_id(&self, topic_id: u128) -> Option<&str> {
        self.topics
            .iter()
            .find(|(_, t)| t.id == topic_id)
            .map(|(name, _)| name.as_str())
    }

    fn partition(&self, topic: &str, partition: i32) -> Option<&Partition> {
        let index = usize::try_from(partition).ok()?;
        self.topics.get(topic)?.partitions.get(index)
    }

    fn partition_mut(&mut self, topic: &str, partition: i32) -> Option<&mut Partition> {
        let index = usize::try_from(partition).ok()?;
        self.topics.get_mut(topic)?.partitions.get_mut(index)
    }

    /// InitProducerId. `producer_id`/`producer_epoch` are the request's fields (-1/-1 when it
    /// names none, v3+ KIP-360 otherwise).
    pub fn init_producer_id(
        &mut self,
        transactional_id: Option<&str>,
        transaction_timeout_ms: i32,
        producer_id: i64,
        producer_epoch: i16,
        now_ms: i64,
    ) -> InitProducerIdResult {
        // `KafkaApis.handleInitProducerIdRequest`: naming only one of the two is invalid.
        let expected = match (producer_id, producer_epoch) {
            (-1, -1) => None,
            (-1, _) | (_, -1) => return InitProducerIdResult::error(INVALID_REQUEST),
            (id, epoch) => Some((id, epoch)),
        };
        let (result, fence) = self.coordinator.init_producer_id(
            &mut self.producer_ids,
            transactional_id,
            transaction_timeout_ms,
            expected,
            now_ms,
        );
        if let Some(job) = fence {
            self.send_markers(job, now_ms);
        }
        result
    }

    pub fn transaction_metadata(&self, transactional_id: &str) -> Option<&TransactionMetadata> {
        self.coordinator.metadata(transactional_id)
    }

    /// Produce of one partition; see [`produce_request`](Self::produce_request).
    #[allow(clippy::too_many_arguments)]
    pub fn produce(
        &mut self,
        broker: i32,
        topic: &str,
        partition: i32,
        records: &[u8],
        acks: i16,
        transactional_id: Option<&str>,
        now_ms: i64,
    ) -> ProducePartitionResult {
        let input = [ProduceInput {
            topic,
            partition,
            records: Some(records),
        }];
        self.produce_request(broker, acks, transactional_id, &input, now_ms)
            .pop()
            .expect("one result per partition")
    }

    /// A whole Produce request, in the check order of `KafkaApis.handleProduceRequest` →
    /// `ReplicaManager.handleProduceAppend`/`appendToLocalLog` → `UnifiedLog.append`:
    /// transactional id present, then per partition topic and `ProduceRequest.validateRecords`,
    /// then the single (pid, epoch) of transactional batches, then verification, then acks,
    /// then leadership, then the log append. One result per input, in order.
    pub fn produce_request(
        &mut self,
        broker: i32,
        acks: i16,
        transactional_id: Option<&str>,
        partitions: &[ProduceInput<'_>],
        now_ms: i64,
    ) -> Vec<ProducePartitionResult> {
        if !self.is_broker_up(broker) {
            return partitions
                .iter()
                .map(|_| ProducePartitionResult::error(NETWORK_EXCEPTION))
                .collect();
        }
        let headers: Vec<Result<BatchHeader, BatchError>> = partitions
            .iter()
            .map(|p| {
                p.records
                    .map_or(Err(BatchError::NoBatch), BatchHeader::parse_single)
            })
            .collect();
        let transactional = headers
            .iter()
            .any(|h| h.as_ref().is_ok_and(|h| h.is_transactional()));
        if transactional && transactional_id.is_none() {
            return partitions
                .iter()
                .map(|_| ProducePartitionResult::error(TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
                .collect();
        }

        let mut results: Vec<Option<ProducePartitionResult>> = partitions
            .iter()
            .zip(&headers)
            .map(|(input, header)| {
                if self.partition(input.topic, input.partition).is_none() {
                    return Some(ProducePartitionResult::error(UNKNOWN_TOPIC_OR_PARTITION));
                }
                match header {
                    Ok(_) => None,
                    Err(BatchError::LengthTooSmall) => {
                        Some(ProducePartitionResult::error(CORRUPT_MESSAGE))
                    }
                    Err(_) => Some(ProducePartitionResult::error(INVALID_RECORD).with_message(
                        "Produce requests must carry exactly one record batch of magic 2",
                    )),
                }
            })
            .collect();

        // `ReplicaManager.handleProduceAppend`: transactional batches of one request must share
        // one (producer id, epoch), else every remaining partition fails.
        let mut txn_producers: Vec<(i64, i16)> = headers
            .iter()
            .zip(&results)
            .filter_map(|(h, r)| match (h, r) {
                (Ok(h), None) if h.is_transactional() => Some((h.producer_id, h.producer_epoch)),
                _ => None,
            })
            .collect();
        txn_producers.sort_unstable();
        txn_producers.dedup();
        if txn_producers.len() > 1 {
            for result in results.iter_mut().filter(|r| r.is_none()) {
                *result = Some(ProducePartitionResult::error(INVALID_PRODUCER_ID_MAPPING));
            }
        }

        for ((input, header), result) in partitions.iter().zip(&headers).zip(results.iter_mut()) {
            if result.is_none() {
                let header = header.as_ref().expect("validated above");
                *result = Some(self.produce_partition(
                    broker,
                    acks,
                    transactional_id,
                    input,
                    header,
                    now_ms,
                ));
            }
        }
        let results: Vec<ProducePartitionResult> = results
            .into_iter()
            .map(|r| r.expect("every partition answered"))
            .collect();
        self.duplicates_answered += results
            .iter()
            .filter(|r| r.error_code == NONE && !r.appended)
            .count() as u64;
        results
    }

    /// The per-partition remainder of a produce, for a partition whose batch parsed: a
    /// transactional batch needs the leader and then verification (`ReplicaManager
    /// .maybeStartTransactionVerificationForPartition` fails with NOT_LEADER_OR_FOLLOWER off
    /// the leader); then acks (`ReplicaManager.appendRecords`); then leadership for the rest
    /// (`appendToLocalLog`); then the log append.
    fn produce_partition(
        &mut self,
        broker: i32,
        acks: i16,
        transactional_id: Option<&str>,
        input: &ProduceInput<'_>,
        header: &BatchHeader,
        now_ms: i64,
    ) -> ProducePartitionResult {
        let (leader, leader_epoch) = self
            .leader(input.topic, input.partition)
            .expect("checked by the caller");
        let not_leader = || ProducePartitionResult {
            current_leader: Some((leader, leader_epoch)),
            ..ProducePartitionResult::error(NOT_LEADER_OR_FOLLOWER)
        };
        if header.is_transactional() && leader != broker {
            return not_leader();
        }
        let verified = match self.verify_transactional(transactional_id, input, header) {
            Ok(verified) => verified,
            Err(failure) => return failure,
        };
        if !matches!(acks, -1..=1) {
            return ProducePartitionResult::error(INVALID_REQUIRED_ACKS);
        }
        if leader != broker {
            return not_leader();
        }
        let rules = &self.rules;
        let partition = self
            .topics
            .get_mut(input.topic)
            .and_then(|t| t.partitions.get_mut(input.partition as usize))
            .expect("checked by the caller");
        let records = input.records.expect("parsed by the caller");
        partition.append(records, header, rules, verified, now_ms)
    }

    /// KIP-890 verification (`UnifiedLog.maybeStartTransactionVerification`, then the
    /// coordinator): only for a transactional batch with no transaction open for its
    /// (pid, epoch) on the partition. `Ok(true)` lets the batch through the append guard.
    fn verify_transactional(
        &self,
        transactional_id: Option<&str>,
        input: &ProduceInput<'_>,
        header: &BatchHeader,
    ) -> Result<bool, ProducePartitionResult> {
        if !header.is_transactional() {
            return Ok(false);
        }
        if !self.rules.transaction_verification {
            return Ok(true);
        }
        let partition = self
            .partition(input.topic, input.partition)
            .expect("checked");
        let entry = partition.producers.entry(header.producer_id);
        if entry.is_some_and(|e| {
            e.current_txn_first_offset.is_some() && e.producer_epoch == header.producer_epoch
        }) {
            return Ok(true);
        }
        // 4.1+ (KAFKA-18042): a stale epoch fails at once, before asking the coordinator.
        if entry.is_some_and(|e| header.producer_epoch < e.producer_epoch) {
            return Err(ProducePartitionResult::error(INVALID_PRODUCER_EPOCH));
        }
        let transactional_id = transactional_id.expect("checked by the caller");
        match self.coordinator.verify_partition(
            transactional_id,
            header.producer_id,
            header.producer_epoch,
            input.topic,
            input.partition,
        ) {
            Ok(()) => Ok(true),
            Err((code, message)) => Err(ProducePartitionResult::error(code).with_message(message)),
        }
    }

    /// Checks the leader epoch a client names (`Partition.checkCurrentLeaderEpoch`): -1 means
    /// "none"; older is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH.
    fn check_leader(
        &self,
        broker: i32,
        topic: &str,
        partition: i32,
        current_leader_epoch: i32,
    ) -> Result<&Partition, LeaderError> {
        let p = self
            .partition(topic, partition)
            .ok_or((UNKNOWN_TOPIC_OR_PARTITION, None))?;
        if current_leader_epoch != -1 {
            if current_leader_epoch < p.leader_epoch {
                return Err((FENCED_LEADER_EPOCH, None));
            }
            if current_leader_epoch > p.leader_epoch {
                return Err((UNKNOWN_LEADER_EPOCH, None));
            }
        }
        if p.leader != broker {
            return Err((NOT_LEADER_OR_FOLLOWER, Some((p.leader, p.leader_epoch))));
        }
        Ok(p)
    }

    /// A consumer fetch of one partition: whole batches from the one holding `fetch_offset`,
    /// up to the high watermark (read_uncommitted) or the last stable offset (read_committed),
    /// at most `max_bytes` except that the first batch is always returned whole (KIP-74).
    /// `max_bytes == 0` returns offsets only. `current_leader_epoch` is -1 when not given.
    #[allow(clippy::too_many_arguments)]
    pub fn fetch(
        &self,
        broker: i32,
        topic: &str,
        partition: i32,
        fetch_offset: i64,
        max_bytes: usize,
        isolation_level: i8,
        current_leader_epoch: i32,
    ) -> FetchPartitionResult {
        if !self.is_broker_up(broker) {
            return FetchPartitionResult::error(NETWORK_EXCEPTION);
        }
        let p = match self.check_leader(broker, topic, partition, current_leader_epoch) {
            Ok(p) => p,
            Err((code, current_leader)) => {
                return FetchPartitionResult {
                    current_leader,
                    ..FetchPartitionResult::error(code)
                }
            }
        };
        if fetch_offset < p.log_start_offset || fetch_offset > p.log_end_offset {
            return FetchPartitionResult::error(OFFSET_OUT_OF_RANGE);
        }
        let read_committed = isolation_level == READ_COMMITTED;
        let upper_bound = if read_committed {
            p.last_stable_offset()
        } else {
            p.high_watermark()
        };
        let mut records = BytesMut::new();
        // End of the returned data: the aborted list covers exactly what is returned.
        let mut returned_end = fetch_offset;
        if max_bytes > 0 {
            for stored in &p.log()[p.batch_index_for(fetch_offset)..] {
                if stored.base_offset >= upper_bound {
                    break;
                }
                if !records.is_empty() && records.len() + stored.bytes.len() > max_bytes {
                    break;
                }
                records.extend_from_slice(&stored.bytes);
                returned_end = stored.last_offset + 1;
            }
        }
        FetchPartitionResult {
            error_code: NONE,
            high_watermark: p.high_watermark(),
            last_stable_offset: p.last_stable_offset(),
            log_start_offset: p.log_start_offset,
            // `LocalLog.addAbortedTransactions` for read_committed; read_uncommitted carries
            // none at all (null).
            aborted_transactions: read_committed
                .then(|| p.aborted_transactions(fetch_offset, returned_end)),
            records: records.freeze(),
            current_leader: None,
        }
    }

    /// ListOffsets of one partition (`UnifiedLog.fetchOffsetByTimestamp`): -2 earliest, -1
    /// latest (the last stable offset under read_committed), -3 the record with the largest
    /// timestamp, otherwise the first record with a timestamp at or after the target.
    pub fn list_offsets(
        &self,
        broker: i32,
        topic: &str,
        partition: i32,
        timestamp: i64,
        isolation_level: i8,
        current_leader_epoch: i32,
    ) -> ListOffsetsResult {
        let failed = |error_code| ListOffsetsResult {
            error_code,
            offset: -1,
            timestamp: -1,
            leader_epoch: -1,
        };
        if !self.is_broker_up(broker) {
            return failed(NETWORK_EXCEPTION);
        }
        let p = match self.check_leader(broker, topic, partition, current_leader_epoch) {
            Ok(p) => p,
            Err((code, _)) => return failed(code),
        };
        let found = |offset: i64, timestamp: i64| ListOffsetsResult {
            error_code: NONE,
            offset,
            timestamp,
            leader_epoch: p.leader_epoch,
        };
        match timestamp {
            EARLIEST_TIMESTAMP => found(p.log_start_offset, -1),
            LATEST_TIMESTAMP if isolation_level == READ_COMMITTED => {
                found(p.last_stable_offset(), -1)
            }
            LATEST_TIMESTAMP => found(p.high_watermark(), -1),
            MAX_TIMESTAMP => {
                let best = p
                    .log()
                    .iter()
                    .filter(|b| b.max_timestamp >= 0)
                    .max_by_key(|b| (b.max_timestamp, std::cmp::Reverse(b.base_offset)));
                match best {
                    Some(b) => {
                        let header = BatchHeader::parse(&b.bytes).expect("stored batches parse");
                        let offset = batch::offset_of_timestamp(&b.bytes, &header, b.max_timestamp)
                            .unwrap_or(b.base_offset);
                        found(offset, b.max_timestamp)
                    }
                    None => found(-1, -1),
                }
            }
            target if target >= 0 => {
                let hit = p
                    .log()
                    .iter()
                    .filter(|b| b.max_timestamp >= target)
                    .find_map(|b| {
                        let header = BatchHeader::parse(&b.bytes).ok()?;
                        let offset = batch::offset_of_timestamp(&b.bytes, &header, target)?;
                        Some((
                            offset.max(p.log_start_offset),
                            header.base_timestamp.max(target),
                        ))
                    });
                match hit {
                    Some((offset, ts)) => found(offset, ts),
                    None => found(-1, -1),
                }
            }
            _ => failed(UNSUPPORTED_VERSION),
        }
    }

    /// The partition's stored batches, oldest first (empty for an unknown partition).
    pub fn partition_log(&self, topic: &str, partition: i32) -> &[StoredBatch] {
        self.partition(topic, partition)
            .map_or(&[][..], Partition::log)
    }

    pub fn high_watermark(&self, topic: &str, partition: i32) -> Option<i64> {
        self.partition(topic, partition)
            .map(Partition::high_watermark)
    }

    pub fn log_start_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        self.partition(topic, partition).map(|p| p.log_start_offset)
    }

    pub fn last_stable_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        self.partition(topic, partition)
            .map(Partition::last_stable_offset)
    }

    /// A producer's state on a partition, for checkers.
    pub fn producer_state(
        &self,
        topic: &str,
        partition: i32,
        producer_id: i64,
    ) -> Option<&ProducerStateEntry> {
        self.partition(topic, partition)?
            .producers
            .entry(producer_id)
    }

    /// Retention / DeleteRecords: drops the batches below `new_log_start_offset` (capped at the
    /// high watermark). Producer state is kept under [`KafkaBehaviour::Current`] (KAFKA-7190)
    /// and dropped for producers whose last batch is gone under [`KafkaBehaviour::Legacy`].
    pub fn truncate_log_start(&mut self, topic: &str, partition: i32, new_log_start_offset: i64) {
        let rules = self.rules.clone();
        self.partition_mut(topic, partition)
            .expect("unknown partition")
            .truncate_log_start(new_log_start_offset, &rules);
    }

    /// The periodic `removeExpiredProducers` tick on every partition, with
    /// `producer_id_expiration_ms`. Returns how many entries went.
    pub fn expire_producers(&mut self, now_ms: i64) -> usize {
        let expiration_ms = self.rules.producer_id_expiration_ms;
        self.topics
            .values_mut()
            .flat_map(|t| t.partitions.iter_mut())
            .map(|p| p.producers.remove_expired_producers(now_ms, expiration_ms))
            .sum()
    }

    /// Forgets one producer on one partition, as an unclean reload from an old snapshot would
    /// (the only way current Kafka loses state before expiry).
    pub fn remove_producer_state(&mut self, topic: &str, partition: i32, producer_id: i64) -> bool {
        self.partition_mut(topic, partition)
            .is_some_and(|p| p.producers.remove(producer_id))
    }

    /// Bytes held in every log.
    pub fn log_bytes(&self) -> usize {
        self.topics
            .values()
            .flat_map(|t| &t.partitions)
            .map(|p| p.log_bytes)
            .sum()
    }

    pub fn partition_log_bytes(&self, topic: &str, partition: i32) -> usize {
        self.partition(topic, partition).map_or(0, |p| p.log_bytes)
    }

    /// Producer-state entries across every partition.
    pub fn producer_state_entries(&self) -> usize {
        self.topics
            .values()
            .flat_map(|t| &t.partitions)
            .map(|p| p.producers.len())
            .sum()
    }

    /// Batches answered as duplicates of a retained batch (not appended again).
    pub fn duplicates_answered(&self) -> u64 {
        self.duplicates_answered
    }

    /// Producer ids handed out so far.
    pub fn producer_ids_issued(&self) -> i64 {
        self.producer_ids.issued() - self.rules.first_producer_id
    }
}
