//! What the transactions V2 tests share: a reference cluster at a chosen `transaction.version`
//! level, a transactional producer, records carrying an id, and readers of the broker's side
//! (the coordinator's metadata, each partition's batches and markers).

use std::ops::Range;
use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::batch::decode_records;
use kacrab::testkit::broker::{BrokerRules, TransactionState};
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{DeliveryFuture, ProduceError, Producer, ProducerRecord, RecordMetadata};

use crate::common::{self, payload_ids, read_back, Isolation};

pub const PARTITIONS: i32 = 6;
pub const BROKERS: i32 = 3;
pub const CALL: Duration = Duration::from_secs(30);
pub const READ: Duration = Duration::from_secs(30);

/// Kafka 4's level of the finalized `transaction.version` feature for transactions V2.
pub const TV2: i16 = 2;
/// The level of a cluster that speaks transactions V1 only.
pub const TV1: i16 = 1;

/// A cluster of [`BROKERS`] brokers whose finalized `transaction.version` is `level`, with
/// `topics` of [`PARTITIONS`] partitions led round-robin.
pub fn start_cluster(level: i16, topics: &[&str]) -> ReferenceCluster {
    let rules = BrokerRules {
        transaction_version: level,
        ..BrokerRules::default()
    };
    let cluster = ReferenceCluster::start(BROKERS as usize, rules);
    let leaders: Vec<i32> = (0..PARTITIONS).map(|p| 1 + p % BROKERS).collect();
    for topic in topics {
        cluster.create_topic(topic, &leaders);
    }
    cluster
}

/// A transactional producer of 2 shards (`extra` adds or overrides settings).
pub fn producer(
    cluster: &ReferenceCluster,
    transactional_id: &str,
    extra: &[(&str, &str)],
) -> Producer {
    common::transactional_producer(&cluster.bootstrap_servers(), transactional_id, extra)
}

/// The partition record `id` goes to.
pub fn partition_of(id: u64) -> i32 {
    (id % PARTITIONS as u64) as i32
}

/// Sends record `id` (its payload: the id, big-endian, padded) to its partition.
pub fn send(producer: &Producer, topic: &str, id: u64) -> DeliveryFuture {
    let mut payload = id.to_be_bytes().to_vec();
    payload.resize(24, b'.');
    producer.send(ProducerRecord::new(topic, Bytes::from(payload)).with_partition(partition_of(id)))
}

/// Sends every id of `ids`, each to its partition.
pub fn send_ids(producer: &Producer, topic: &str, ids: Range<u64>) -> Vec<DeliveryFuture> {
    ids.map(|id| send(producer, topic, id)).collect()
}

/// Every future's outcome.
pub fn wait_all(futures: Vec<DeliveryFuture>) -> Vec<Result<RecordMetadata, ProduceError>> {
    futures
        .into_iter()
        .map(|f| {
            f.wait_timeout(CALL)
                .expect("every send resolves within the call timeout")
        })
        .collect()
}

/// Waits for every future and panics, naming `what`, on a record that failed.
pub fn expect_acked(futures: Vec<DeliveryFuture>, what: &str) {
    for (index, result) in wait_all(futures).into_iter().enumerate() {
        result.unwrap_or_else(|e| panic!("{what}: record {index} failed: {e}"));
    }
}

/// The ids of `ids` per partition, in send order.
pub fn by_partition(ids: impl IntoIterator<Item = u64>) -> Vec<Vec<u64>> {
    let mut out = vec![Vec::new(); PARTITIONS as usize];
    for id in ids {
        out[partition_of(id) as usize].push(id);
    }
    out
}

/// `topic` read back by librdkafka's consumer at `isolation`: the ids per partition, in log
/// order.
pub fn read_ids(cluster: &ReferenceCluster, topic: &str, isolation: Isolation) -> Vec<Vec<u64>> {
    payload_ids(&read_back(
        &cluster.bootstrap_servers(),
        topic,
        PARTITIONS,
        isolation,
        READ,
    ))
}

/// The coordinator's producer id, epoch and state for `transactional_id`.
pub fn coordinator_view(
    cluster: &ReferenceCluster,
    transactional_id: &str,
) -> (i64, i16, TransactionState) {
    cluster.with_cluster(|c| {
        let m = c
            .transaction_metadata(transactional_id)
            .unwrap_or_else(|| panic!("the coordinator knows {transactional_id}"));
        (m.producer_id, m.producer_epoch, m.state)
    })
}

/// The partitions the coordinator holds in `transactional_id`'s open transaction.
pub fn partitions_in_transaction(
    cluster: &ReferenceCluster,
    transactional_id: &str,
) -> Vec<(String, i32)> {
    cluster.with_cluster(|c| {
        c.transaction_metadata(transactional_id)
            .map(|m| m.topic_partitions.iter().cloned().collect())
            .unwrap_or_default()
    })
}

/// One stored batch of a partition, as a checker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// A batch of records.
    Data {
        producer_id: i64,
        epoch: i16,
        base_sequence: i32,
        last_sequence: i32,
        transactional: bool,
    },
    /// A transaction marker (`ControlRecordType`: the key's second i16, 0 ABORT, 1 COMMIT).
    Marker {
        producer_id: i64,
        epoch: i16,
        commit: bool,
    },
}

/// The batches and markers of `topic`'s `partition`, oldest first.
pub fn log_entries(cluster: &ReferenceCluster, topic: &str, partition: i32) -> Vec<Entry> {
    cluster.with_cluster(|c| {
        c.partition_log(topic, partition)
            .iter()
            .map(|b| {
                if b.control {
                    let records = decode_records(&b.bytes).expect("a marker decodes");
                    assert_eq!(records.len(), 1, "a marker batch holds one record");
                    let key = records[0].key.as_deref().expect("a marker has a key");
                    let kind = i16::from_be_bytes([key[2], key[3]]);
                    assert!(
                        kind == 0 || kind == 1,
                        "a marker is ABORT or COMMIT: {kind}"
                    );
                    Entry::Marker {
                        producer_id: b.producer_id,
                        epoch: b.producer_epoch,
                        commit: kind == 1,
                    }
                } else {
                    Entry::Data {
                        producer_id: b.producer_id,
                        epoch: b.producer_epoch,
                        base_sequence: b.base_sequence,
                        last_sequence: b.last_sequence,
                        transactional: b.transactional,
                    }
                }
            })
            .collect()
    })
}

/// One transaction as a partition's log holds it: its data batches' epoch and sequences,
/// then the marker that ended it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedTransaction {
    /// The epoch of every data batch (one epoch per transaction; checked).
    pub data_epoch: i16,
    /// The first batch's base sequence.
    pub first_sequence: i32,
    /// The last batch's last sequence.
    pub last_sequence: i32,
    /// The marker's epoch.
    pub marker_epoch: i16,
    /// The marker is COMMIT.
    pub commit: bool,
}

/// Splits a partition's log into transactions: runs of transactional data batches of one
/// producer id and epoch, with contiguous sequences, each closed by one marker. Panics on a
/// log of another shape (a marker with no data before it, data left open, a sequence gap, an
/// epoch changing inside a transaction).
pub fn logged_transactions(entries: &[Entry], producer_id: i64) -> Vec<LoggedTransaction> {
    let mut out = Vec::new();
    let mut open: Option<(i16, i32, i32)> = None;
    for (index, entry) in entries.iter().enumerate() {
        match *entry {
            Entry::Data {
                producer_id: pid,
                epoch,
                base_sequence,
                last_sequence,
                transactional,
            } => {
                assert_eq!(pid, producer_id, "entry {index}: another producer id");
                assert!(transactional, "entry {index}: a non-transactional batch");
                open = Some(match open {
                    None => (epoch, base_sequence, last_sequence),
                    Some((open_epoch, first, last)) => {
                        assert_eq!(
                            epoch, open_epoch,
                            "entry {index}: the epoch changed mid-transaction"
                        );
                        assert_eq!(
                            base_sequence,
                            last + 1,
                            "entry {index}: the sequences are not contiguous"
                        );
                        (open_epoch, first, last_sequence)
                    }
                });
            }
            Entry::Marker {
                producer_id: pid,
                epoch,
                commit,
            } => {
                assert_eq!(
                    pid, producer_id,
                    "entry {index}: a marker of another producer id"
                );
                let (data_epoch, first_sequence, last_sequence) = open
                    .take()
                    .unwrap_or_else(|| panic!("entry {index}: a marker with no data before it"));
                out.push(LoggedTransaction {
                    data_epoch,
                    first_sequence,
                    last_sequence,
                    marker_epoch: epoch,
                    commit,
                });
            }
        }
    }
    assert!(open.is_none(), "data left without a marker: {open:?}");
    out
}
