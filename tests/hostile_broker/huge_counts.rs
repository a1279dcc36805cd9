//! Well-framed answers whose count claims billions of elements in a few bytes, one API at a
//! time: each must close the connection without allocating what the count claims, and the retry
//! succeed.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use kacrab::stats::RuntimeStats;
use kacrab::{GroupMetadata, OffsetAndMetadata, Producer, ProducerRecord, TopicPartition};
use kafka_protocol::messages::ApiKey;

use super::{send_through, track_allocations, Act, FakeBroker, LARGEST_ALLOCATION, TOPIC};

/// Runs one transaction through a producer bootstrapped from `broker`: a record and consumer
/// offsets, committed. It touches every API the producer decodes (ApiVersions, Metadata,
/// FindCoordinator for the transaction and for the group, InitProducerId, AddPartitionsToTxn,
/// Produce, AddOffsetsToTxn, TxnOffsetCommit, EndTxn). Each call must succeed after the hostile
/// answers, and no single allocation may come near what a claimed count would need.
fn transact_through(broker: &FakeBroker) -> RuntimeStats {
    track_allocations();
    const CALL: Duration = Duration::from_secs(30);
    let producer = Producer::builder()
        .set("bootstrap.servers", broker.bootstrap())
        .set("kacrab.shards", "1")
        .set("transactional.id", "hostile-txn")
        .set("reconnect.backoff.ms", "10")
        .set("reconnect.backoff.max.ms", "50")
        .set("retry.backoff.ms", "10")
        .set("request.timeout.ms", "3000")
        .set("delivery.timeout.ms", "30000")
        .build()
        .expect("producer");
    producer.init_transactions(CALL).expect("init_transactions");
    producer.begin_transaction().expect("begin_transaction");
    let delivery = producer
        .send(ProducerRecord::new(TOPIC, Bytes::from_static(b"survives")).with_partition(0));
    producer
        .send_offsets_to_transaction(
            [(TopicPartition::new(TOPIC, 0), OffsetAndMetadata::new(7))],
            &GroupMetadata::new("hostile-group"),
            CALL,
        )
        .expect("send_offsets_to_transaction");
    producer
        .commit_transaction(CALL)
        .expect("commit_transaction");
    let meta = delivery
        .wait_timeout(CALL)
        .expect("the record resolves")
        .expect("acknowledged after the hostile answers");
    assert_eq!(meta.partition, 0);
    assert!(broker.script_done(), "every hostile act was played");
    assert!(
        broker.connections.load(Ordering::SeqCst) >= 2,
        "the producer reconnected"
    );
    let stats = producer.runtime_stats();
    producer.close(Duration::from_secs(5));
    let protocol_errors: u64 = stats.shards.iter().map(|s| s.engine.protocol_errors).sum();
    assert!(
        protocol_errors >= 1,
        "the hostile answer was judged: {stats:?}"
    );
    let largest = LARGEST_ALLOCATION.load(Ordering::Relaxed);
    assert!(
        largest < 1 << 30,
        "largest single allocation {largest} bytes: a claimed count was allocated"
    );
    stats
}

// Each test below answers the first request of one API with a well-framed answer whose count
// at the given body offset claims 2^31 - 1 (plain) or 2^32 - 2 (compact) elements in a few
// bytes. The offset is that of the first array of the answer at the version this broker
// negotiates (Produce v9, Metadata v12, ApiVersions v3, FindCoordinator v4, AddPartitionsToTxn
// v3, TxnOffsetCommit v3); an answer without an array (InitProducerId v4, AddOffsetsToTxn v3,
// EndTxn v3) gets the claim at its tagged-field count, its only count. A decoder that sizes a
// vector from such a count before reading an element aborts the process (allocation failure,
// not a panic); every answer must instead close the connection, and the retry succeed. The
// nested arrays of each answer are covered by the decoders' unit tests in `src/protocol/`.

#[test]
fn a_produce_answer_claiming_billions_of_topics_is_refused_without_allocating_them() {
    let broker = FakeBroker::start(vec![(ApiKey::Produce, Act::HugeCount { at: 0 })]);
    let stats = send_through(&broker, &[]);
    assert!(
        stats
            .shards
            .iter()
            .map(|s| s.engine.protocol_errors)
            .sum::<u64>()
            >= 1
    );
    assert!(LARGEST_ALLOCATION.load(Ordering::Relaxed) < 1 << 30);
}

#[test]
fn an_api_versions_answer_claiming_billions_of_apis_is_refused_without_allocating_them() {
    let broker = FakeBroker::start(vec![(ApiKey::ApiVersions, Act::HugeCount { at: 2 })]);
    transact_through(&broker);
}

#[test]
fn a_metadata_answer_claiming_billions_of_brokers_is_refused_without_allocating_them() {
    // Throttle time, then the brokers.
    let broker = FakeBroker::start(vec![(ApiKey::Metadata, Act::HugeCount { at: 4 })]);
    transact_through(&broker);
}

#[test]
fn a_find_coordinator_answer_claiming_billions_of_coordinators_is_refused_without_allocating_them()
{
    let broker = FakeBroker::start(vec![(ApiKey::FindCoordinator, Act::HugeCount { at: 4 })]);
    transact_through(&broker);
}

#[test]
fn an_init_producer_id_answer_claiming_billions_of_tagged_fields_is_refused() {
    // Throttle time, error code, producer id, epoch, then the tagged fields.
    let broker = FakeBroker::start(vec![(ApiKey::InitProducerId, Act::HugeCount { at: 16 })]);
    transact_through(&broker);
}

#[test]
fn an_add_partitions_answer_claiming_billions_of_topics_is_refused_without_allocating_them() {
    let broker = FakeBroker::start(vec![(ApiKey::AddPartitionsToTxn, Act::HugeCount { at: 4 })]);
    transact_through(&broker);
}

#[test]
fn an_add_offsets_answer_claiming_billions_of_tagged_fields_is_refused() {
    // Throttle time, error code, then the tagged fields.
    let broker = FakeBroker::start(vec![(ApiKey::AddOffsetsToTxn, Act::HugeCount { at: 6 })]);
    transact_through(&broker);
}

#[test]
fn a_txn_offset_commit_answer_claiming_billions_of_topics_is_refused_without_allocating_them() {
    let broker = FakeBroker::start(vec![(ApiKey::TxnOffsetCommit, Act::HugeCount { at: 4 })]);
    transact_through(&broker);
}

#[test]
fn an_end_txn_answer_claiming_billions_of_tagged_fields_is_refused() {
    let broker = FakeBroker::start(vec![(ApiKey::EndTxn, Act::HugeCount { at: 6 })]);
    transact_through(&broker);
}
