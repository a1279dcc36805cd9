//! Scenario table for the reference broker's sans-IO core: each test is one row of Kafka's
//! broker-side producer rules (sequences, epochs, duplicates, transactions) and
//! names the Kafka class and, where there is one, Kafka's own test that pins the same rule.
//!
//! The rows are grouped by topic: `idempotence` holds the sequence and epoch checks, duplicate
//! detection and producer state (expiry, retention, snapshots), by Kafka version; `batches` the
//! validation of produce requests and their batches (compressed ones too), the order of the
//! checks, Fetch, ListOffsets and size-based retention; `coordinator` the coordinator requests
//! (InitProducerId, AddPartitionsToTxn, EndTxn, timeouts, coordinator moves); `transactions`
//! transactional produce, transaction markers, the LSO and read_committed, and TxnOffsetCommit.
//! This file holds the cluster, producer and transaction helpers they share.
#![cfg(feature = "testkit")]

#[path = "reference_broker_rules/batches.rs"]
mod batches;
#[path = "reference_broker_rules/coordinator.rs"]
mod coordinator;
#[path = "reference_broker_rules/idempotence.rs"]
mod idempotence;
#[path = "reference_broker_rules/transactions.rs"]
mod transactions;

use kacrab::testkit::batch::TestBatch;
use kacrab::testkit::broker::error_codes::*;
use kacrab::testkit::broker::{
    BrokerRules, Cluster, KafkaBehaviour, ProducePartitionResult, StoredBatch, TransactionState,
};

const NOW: i64 = 1_700_000_000_000;
const TOPIC: &str = "t";

fn cluster_with(behaviour: KafkaBehaviour) -> Cluster {
    let rules = BrokerRules {
        kafka_version: behaviour,
        ..BrokerRules::default()
    };
    let mut cluster = Cluster::new(&[1, 2, 3], rules);
    assert!(cluster.create_topic(TOPIC, &[1, 2]));
    cluster
}

fn cluster() -> Cluster {
    cluster_with(KafkaBehaviour::Current)
}

/// A fresh idempotent producer id from the cluster.
fn producer(cluster: &mut Cluster) -> i64 {
    let init = cluster.init_producer_id(None, 60_000, -1, -1, NOW);
    assert_eq!(init.error_code, NONE);
    assert_eq!(init.producer_epoch, 0);
    init.producer_id
}

fn batch(pid: i64, epoch: i16, seq: i32, count: usize) -> Vec<u8> {
    let mut batch = TestBatch::idempotent(pid, epoch, seq, count);
    batch.base_timestamp = NOW;
    batch.encode()
}

fn send(cluster: &mut Cluster, bytes: &[u8]) -> ProducePartitionResult {
    cluster.produce(1, TOPIC, 0, bytes, -1, None, NOW)
}

fn produce(
    cluster: &mut Cluster,
    pid: i64,
    epoch: i16,
    seq: i32,
    count: usize,
) -> ProducePartitionResult {
    send(cluster, &batch(pid, epoch, seq, count))
}

fn log_end(cluster: &Cluster) -> i64 {
    cluster.high_watermark(TOPIC, 0).unwrap()
}

fn transactional_batch(pid: i64, epoch: i16, seq: i32) -> Vec<u8> {
    let mut batch = TestBatch::idempotent(pid, epoch, seq, 1);
    batch.transactional = true;
    batch.encode()
}

// ---------------------------------------------------------------------------------------------
// What the transaction rows of `coordinator` and `transactions` share: a transactional producer
// of the cluster (TV1, the client versions), the requests it sends and the markers they leave.

const TXN: &str = "tx";
const GROUP: &str = "g";
const TIMEOUT_MS: i32 = 60_000;

/// A transactional producer of the cluster: its id, epoch and coordinator.
#[derive(Debug, Clone, Copy)]
struct TxnProducer {
    pid: i64,
    epoch: i16,
    coordinator: i32,
}

fn txn_producer(c: &mut Cluster) -> TxnProducer {
    let coordinator = c.transaction_coordinator(TXN);
    let init = c.init_producer_id_at(coordinator, Some(TXN), TIMEOUT_MS, -1, -1, NOW);
    assert_eq!(init.error_code, NONE);
    TxnProducer {
        pid: init.producer_id,
        epoch: init.producer_epoch,
        coordinator,
    }
}

fn add_partitions(c: &mut Cluster, p: TxnProducer, partitions: &[i32], now: i64) -> Vec<i16> {
    let partitions: Vec<(String, i32)> =
        partitions.iter().map(|&i| (TOPIC.to_string(), i)).collect();
    c.add_partitions_to_txn(p.coordinator, TXN, p.pid, p.epoch, &partitions, now)
}

fn end(c: &mut Cluster, p: TxnProducer, commit: bool) -> i16 {
    c.end_txn(p.coordinator, TXN, p.pid, p.epoch, commit, NOW)
}

/// A transactional batch of `count` records to `partition`, sent to its leader.
fn txn_send(
    c: &mut Cluster,
    partition: i32,
    pid: i64,
    epoch: i16,
    seq: i32,
    count: usize,
) -> ProducePartitionResult {
    let mut b = TestBatch::idempotent(pid, epoch, seq, count);
    b.transactional = true;
    b.base_timestamp = NOW;
    let leader = c.leader(TOPIC, partition).unwrap().0;
    c.produce(leader, TOPIC, partition, &b.encode(), -1, Some(TXN), NOW)
}

fn state(c: &Cluster) -> TransactionState {
    c.transaction_metadata(TXN).unwrap().state
}

fn markers(c: &Cluster, partition: i32) -> Vec<StoredBatch> {
    c.partition_log(TOPIC, partition)
        .iter()
        .filter(|b| b.control)
        .cloned()
        .collect()
}

/// The control record type of a stored marker batch: 1 COMMIT, 0 ABORT (Kafka
/// `ControlRecordType`), and the coordinator epoch of its value.
fn marker_type_and_coordinator_epoch(marker: &StoredBatch) -> (i16, i32) {
    let record = &marker.bytes[61..];
    let kind = i16::from_be_bytes([record[7], record[8]]);
    let epoch = i32::from_be_bytes([record[12], record[13], record[14], record[15]]);
    (kind, epoch)
}
