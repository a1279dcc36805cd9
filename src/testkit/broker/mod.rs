//! The reference broker's sans-IO core: a whole cluster's state in one struct.
//!
//! No I/O and no clock reads: time is an argument, so the deterministic simulator can drive a
//! [`Cluster`] in memory and the TCP face ([`crate::testkit::server`]) can wrap it in a mutex.
//! Its verdicts follow the Apache Kafka broker's producer-state rules; each rule cites the
//! Kafka class it comes from.
//!
//! Model: every broker hosts a replica of every partition, but only the leader's log exists and
//! it is always fully replicated (one in-sync replica), so the high watermark is the log end
//! offset and acks=all commits at once. Topics use CreateTime. Leaders move only when told.
//!
//! This file holds the cluster itself: its rules, brokers, topics and leaders, InitProducerId,
//! the leader-epoch check the reads share, and what checkers and faults read and change from
//! outside a request. The other APIs have child modules, each an `impl Cluster` block:
//! `produce`, `fetch`, `list_offsets`, and `transactions` (FindCoordinator, InitProducerId at a
//! coordinator, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and its markers, TxnOffsetCommit,
//! OffsetFetch). The state behind them lives in `partition` (a log and its producer state),
//! `producer_state`, `coordinator` (producer ids and transaction metadata), `group_offsets`,
//! and `restart` (producer state reloaded from a snapshot).

pub mod error_codes;

mod coordinator;
mod end_txn_v2;
mod fetch;
mod group_offsets;
mod list_offsets;
mod partition;
mod produce;
mod producer_state;
mod restart;
mod transaction_version;
mod transactions;

use std::collections::{BTreeMap, HashMap};

pub use coordinator::{
    MarkerJob, TransactionMetadata, TransactionState, TRANSACTION_MAX_TIMEOUT_MS,
};
pub use end_txn_v2::EndTxnV2;
pub use fetch::FetchPartitionResult;
pub use group_offsets::{offsets_partition_for, CONSUMER_OFFSETS_TOPIC};
pub use list_offsets::{ListOffsetsResult, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP};
pub use partition::{AbortedTxn, StoredBatch};
pub use produce::{ProduceInput, ProducePartitionResult};
pub use producer_state::{BatchMetadata, ProducerStateEntry};
pub use transaction_version::{
    TransactionVersion, MAX_TRANSACTION_VERSION_LEVEL, TRANSACTION_VERSION_FEATURE,
};
pub use transactions::{
    EndTxnResult, OffsetFetchPartition, TxnOffsetCommitGroup, TxnOffsetCommitInput,
    COORDINATOR_KEY_GROUP, COORDINATOR_KEY_TRANSACTION,
};

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
    /// Which Kafka versions' producer-state rules the broker follows.
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
    /// The cluster's finalized `transaction.version` feature level: 0 or 1 is TV1 (Kafka 3.x
    /// transactions), 2 is TV2 (KIP-890 part 2), the level of a cluster created by Kafka 4.0
    /// or later. ApiVersions v3+ advertises it (0: not finalized); clients send the TV2
    /// request versions only at 2. The broker serves each request by its version whatever the
    /// level; the level decides the coordinator's own aborts (timeout, InitProducerId's fence).
    pub transaction_version: i16,
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
            transaction_version: MAX_TRANSACTION_VERSION_LEVEL,
        }
    }
}

/// InitProducerId's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitProducerIdResult {
    /// The error code (0: none).
    pub error_code: i16,
    /// The producer id given (-1 on an error).
    pub producer_id: i64,
    /// Its epoch (-1 on an error).
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

/// A partition as Metadata shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionMetadata {
    /// The leader's broker id.
    pub leader: i32,
    /// The leader epoch, raised by every leader change.
    pub leader_epoch: i32,
}

/// A topic as Metadata shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    /// The topic's name.
    pub name: String,
    /// The topic id (a UUID as 128 bits).
    pub topic_id: u128,
    /// Its partitions, by index.
    pub partitions: Vec<PartitionMetadata>,
}

/// Fetch/ListOffsets isolation level: every appended record, up to the high watermark.
pub const READ_UNCOMMITTED: i8 = 0;
/// Fetch/ListOffsets isolation level: records up to the last stable offset, aborted ones
/// left out.
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
    /// Raised by every change of the finalized features (ApiVersions' `FinalizedFeaturesEpoch`).
    finalized_features_epoch: i64,
}

impl Cluster {
    /// A cluster of the brokers `broker_ids`, all up, with no topic, under `rules`.
    ///
    /// # Panics
    /// With no broker, or a `transaction_version` outside 0..=2.
    pub fn new(broker_ids: &[i32], rules: BrokerRules) -> Self {
        assert!(!broker_ids.is_empty(), "a cluster needs a broker");
        assert!(
            (0..=MAX_TRANSACTION_VERSION_LEVEL).contains(&rules.transaction_version),
            "transaction.version {} is not supported",
            rules.transaction_version
        );
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
            finalized_features_epoch: 1,
        }
    }

    /// The rules the cluster follows.
    pub fn rules(&self) -> &BrokerRules {
        &self.rules
    }

    /// The finalized `transaction.version` level ([`BrokerRules::transaction_version`]) and
    /// the finalized-features epoch, as ApiVersions v3+ advertises them.
    pub fn finalized_transaction_version(&self) -> (i16, i64) {
        (
            self.rules.transaction_version,
            self.finalized_features_epoch,
        )
    }

    /// Changes the finalized `transaction.version` level, as `kafka-features.sh upgrade`
    /// (or downgrade) does; the finalized-features epoch rises so clients notice.
    pub fn set_transaction_version(&mut self, level: i16) {
        assert!(
            (0..=MAX_TRANSACTION_VERSION_LEVEL).contains(&level),
            "transaction.version {level} is not supported"
        );
        self.rules.transaction_version = level;
        self.finalized_features_epoch += 1;
    }

    /// The protocol of the coordinator's own actions: the finalized level's.
    fn cluster_transaction_version(&self) -> TransactionVersion {
        TransactionVersion::from_feature_level(self.rules.transaction_version)
    }

    /// Every broker's id, in order.
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

    /// The partition's (leader, leader epoch); `None` for an unknown partition.
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

    /// Whether `broker` exists and is up.
    pub fn is_broker_up(&self, broker: i32) -> bool {
        self.brokers.get(&broker).copied().unwrap_or(false)
    }

    /// Every topic's name, sorted.
    pub fn topic_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.topics.keys().cloned().collect();
        names.sort();
        names
    }

    /// The topic as Metadata shows it; `None` for an unknown topic.
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

    /// The name of the topic with this id.
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
        let cluster_version = self.cluster_transaction_version();
        let (result, fence) = self.coordinator.init_producer_id(
            &mut self.producer_ids,
            transactional_id,
            transaction_timeout_ms,
            expected,
            cluster_version,
            now_ms,
        );
        if let Some(job) = fence {
            self.send_markers(job, now_ms);
        }
        result
    }

    /// The coordinator's state of `transactional_id`.
    pub fn transaction_metadata(&self, transactional_id: &str) -> Option<&TransactionMetadata> {
        self.coordinator.metadata(transactional_id)
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

    /// The partition's stored batches, oldest first (empty for an unknown partition).
    pub fn partition_log(&self, topic: &str, partition: i32) -> &[StoredBatch] {
        self.partition(topic, partition)
            .map_or(&[][..], Partition::log)
    }

    /// The partition's high watermark: the offset after its last record (every partition is
    /// fully replicated on its leader).
    pub fn high_watermark(&self, topic: &str, partition: i32) -> Option<i64> {
        self.partition(topic, partition)
            .map(Partition::high_watermark)
    }

    /// The partition's first offset still stored (raised by retention and truncation).
    pub fn log_start_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        self.partition(topic, partition).map(|p| p.log_start_offset)
    }

    /// The partition's last stable offset: the first offset of its earliest open
    /// transaction, else the high watermark.
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

    /// The bytes of the partition's stored batches (0 for an unknown partition).
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
