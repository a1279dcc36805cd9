//! Scenario table for the reference broker's sans-IO core: each test is one row of Kafka's
//! broker-side producer rules (sequences, epochs, duplicates, transactions) and
//! names the Kafka class and, where there is one, Kafka's own test that pins the same rule.
#![cfg(feature = "testkit")]

use kacrab::config::Codec;
use kacrab::testkit::batch::TestBatch;
use kacrab::testkit::broker::error_codes::*;
use kacrab::testkit::broker::{
    offsets_partition_for, BrokerRules, Cluster, KafkaBehaviour, ProduceInput,
    ProducePartitionResult, StoredBatch, TransactionState, TxnOffsetCommitGroup,
    TxnOffsetCommitInput, CONSUMER_OFFSETS_TOPIC, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP,
    READ_COMMITTED, READ_UNCOMMITTED,
};
use kacrab::testkit::internals::protocol::record_batch::{decode_records, RecordBatchBuilder};

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

/// Rewrites the attributes of an encoded batch and fixes its CRC.
fn with_attributes(mut bytes: Vec<u8>, attributes: i16) -> Vec<u8> {
    bytes[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[21..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    bytes
}

fn transactional_batch(pid: i64, epoch: i16, seq: i32) -> Vec<u8> {
    let mut batch = TestBatch::idempotent(pid, epoch, seq, 1);
    batch.transactional = true;
    batch.encode()
}

// ProducerAppendInfo `checkSequence` (no-entry branch), then `inSequence`,
// ProducerStateManagerTest `testBasicIdMapping`.
#[test]
fn in_sequence_batches_are_appended_at_consecutive_offsets() {
    let mut c = cluster();
    let pid = producer(&mut c);
    let first = produce(&mut c, pid, 0, 0, 3);
    assert_eq!(
        (first.error_code, first.base_offset, first.appended),
        (NONE, 0, true)
    );
    assert_eq!(first.log_append_time_ms, -1, "CreateTime topics answer -1");
    let second = produce(&mut c, pid, 0, 3, 1);
    assert_eq!((second.error_code, second.base_offset), (NONE, 3));
    let log = c.partition_log(TOPIC, 0);
    assert_eq!(log.len(), 2);
    assert_eq!(
        (log[1].base_offset, log[1].last_offset, log[1].base_sequence),
        (3, 3, 3)
    );
    assert_eq!(
        &log[1].bytes[..8],
        &3i64.to_be_bytes(),
        "base offset written into the batch"
    );
    assert_eq!(log_end(&c), 4);
}

// ProducerStateEntry `findDuplicateBatch` over the 5 retained `BatchMetadata`; UnifiedLog `append`
// duplicate branch, UnifiedLogTest `testDuplicateAppends`.
#[test]
fn retry_of_each_of_the_last_five_batches_returns_its_original_offset_without_appending() {
    let mut c = cluster();
    let pid = producer(&mut c);
    let mut originals = Vec::new();
    for i in 0..6 {
        originals.push(produce(&mut c, pid, 0, i * 2, 2).base_offset);
    }
    let end = log_end(&c);
    for i in 1..6 {
        let retry = produce(&mut c, pid, 0, i * 2, 2);
        assert_eq!(retry.error_code, NONE, "retry of batch {i}");
        assert_eq!(
            retry.base_offset, originals[i as usize],
            "original offset of batch {i}"
        );
        assert!(!retry.appended);
        // [quirk] the cached max timestamp is answered as LogAppendTime.
        assert_eq!(retry.log_append_time_ms, NOW + 1);
        assert_eq!(retry.log_start_offset, 0);
    }
    assert_eq!(log_end(&c), end, "no duplicate was written");
}

// Only five batches are retained (ProducerStateEntry `NUM_BATCHES_TO_RETAIN`); an older retry fails
// the sequence check, UnifiedLogTest `testDuplicateAppends`.
#[test]
fn retry_older_than_the_five_batch_window_is_out_of_order() {
    let mut c = cluster();
    let pid = producer(&mut c);
    for seq in 0..6 {
        produce(&mut c, pid, 0, seq, 1);
    }
    let end = log_end(&c);
    let retry = produce(&mut c, pid, 0, 0, 1);
    assert_eq!(retry.error_code, OUT_OF_ORDER_SEQUENCE_NUMBER);
    assert_eq!(retry.base_offset, -1);
    assert_eq!(log_end(&c), end);
}

// ProducerStateEntry `batchWithSequenceRange` wants the same first *and* last sequence.
#[test]
fn retry_with_the_same_first_sequence_but_fewer_records_is_out_of_order() {
    let mut c = cluster();
    let pid = producer(&mut c);
    produce(&mut c, pid, 0, 0, 3);
    produce(&mut c, pid, 0, 3, 3);
    assert_eq!(
        produce(&mut c, pid, 0, 3, 2).error_code,
        OUT_OF_ORDER_SEQUENCE_NUMBER
    );
}

// ProducerAppendInfo `checkSequence`: same epoch needs last + 1,
// ReplicaManagerTest `testReceiveOutOfOrderSequenceExceptionWithLogStartOffset`.
#[test]
fn sequence_gap_is_out_of_order_and_carries_the_log_start_offset() {
    let mut c = cluster();
    let pid = producer(&mut c);
    produce(&mut c, pid, 0, 0, 3);
    let gap = produce(&mut c, pid, 0, 5, 1);
    assert_eq!(gap.error_code, OUT_OF_ORDER_SEQUENCE_NUMBER);
    assert_eq!((gap.base_offset, gap.log_start_offset), (-1, 0));
    assert_eq!(log_end(&c), 3);
    assert_eq!(
        c.producer_state(TOPIC, 0, pid).unwrap().last_seq(),
        2,
        "state unchanged"
    );
}

// ProducerAppendInfo `checkProducerEpoch` (since 2.7, KIP-588: INVALID_PRODUCER_EPOCH, never
// PRODUCER_FENCED on produce), UnifiedLogTest `testOldProducerEpoch`.
#[test]
fn stale_epoch_is_invalid_producer_epoch() {
    let mut c = cluster();
    let pid = producer(&mut c);
    produce(&mut c, pid, 0, 0, 3);
    assert_eq!(produce(&mut c, pid, 1, 0, 1).error_code, NONE);
    let stale = produce(&mut c, pid, 0, 3, 1);
    assert_eq!(stale.error_code, INVALID_PRODUCER_EPOCH);
    assert_eq!(stale.log_start_offset, 0);
}

// ProducerStateEntry `maybeUpdateProducerEpoch` clears the window, ProducerStateManagerTest
// `testBasicIdMapping`.
#[test]
fn bumped_epoch_starting_at_zero_is_accepted_and_forgets_the_old_epoch() {
    let mut c = cluster();
    let pid = producer(&mut c);
    produce(&mut c, pid, 0, 0, 3);
    let bumped = produce(&mut c, pid, 1, 0, 2);
    assert_eq!((bumped.error_code, bumped.base_offset), (NONE, 3));
    let entry = c.producer_state(TOPIC, 0, pid).unwrap();
    assert_eq!((entry.producer_epoch, entry.batches().count()), (1, 1));
    // A retry of the old epoch's batch is no longer a duplicate: it is stale.
    assert_eq!(
        produce(&mut c, pid, 0, 0, 3).error_code,
        INVALID_PRODUCER_EPOCH
    );
}

// ProducerAppendInfo `checkSequence`: a new epoch must start at 0 when the partition knows the
// producer; ProducerStateManagerTest `testRejectNonZeroSequenceForDirectEpochBump`.
#[test]
fn bumped_epoch_not_starting_at_zero_is_out_of_order() {
    let mut c = cluster();
    let pid = producer(&mut c);
    produce(&mut c, pid, 0, 0, 3);
    assert_eq!(
        produce(&mut c, pid, 1, 3, 1).error_code,
        OUT_OF_ORDER_SEQUENCE_NUMBER
    );
    assert_eq!(
        produce(&mut c, pid, 1, 5, 1).error_code,
        OUT_OF_ORDER_SEQUENCE_NUMBER
    );
    assert_eq!(c.producer_state(TOPIC, 0, pid).unwrap().producer_epoch, 0);
}

// ProducerAppendInfo `inSequence` (only MAX -> 0 wraps) and `DefaultRecordBatch.incrementSequence`;
// ProducerStateManagerTest `testProducerSequenceWrapAround`,
// `testProducerSequenceInvalidWrapAround`.
#[test]
fn sequence_wraps_from_i32_max_to_zero_only() {
    let mut c = cluster();
    let pid = producer(&mut c);
    // No entry yet, so the first batch may start anywhere.
    assert_eq!(produce(&mut c, pid, 15, i32::MAX - 1, 2).error_code, NONE);
    assert_eq!(
        produce(&mut c, pid, 15, 1, 1).error_code,
        OUT_OF_ORDER_SEQUENCE_NUMBER
    );
    assert_eq!(produce(&mut c, pid, 15, 0, 1).error_code, NONE);
    // A batch straddling the wrap, and its retry.
    let mut c = cluster();
    let pid = producer(&mut c);
    produce(&mut c, pid, 0, i32::MAX - 20, 10);
    let straddle = produce(&mut c, pid, 0, i32::MAX - 10, 20);
    assert_eq!(straddle.error_code, NONE);
    assert_eq!(c.producer_state(TOPIC, 0, pid).unwrap().last_seq(), 8);
    let retry = produce(&mut c, pid, 0, i32::MAX - 10, 20);
    assert_eq!(
        (retry.error_code, retry.base_offset, retry.appended),
        (NONE, 10, false)
    );
    assert_eq!(produce(&mut c, pid, 0, 9, 1).error_code, NONE);
}

// ProducerAppendInfo `checkSequence`: with no entry (new, expired or lost state) any sequence is
// accepted; ProducerStateManagerTest `testPidExpirationTimeout`.
#[test]
fn unknown_producer_may_start_at_any_sequence() {
    let mut c = cluster();
    let pid = producer(&mut c);
    let result = produce(&mut c, pid, 3, 42, 1);
    assert_eq!((result.error_code, result.base_offset), (NONE, 0));
    assert_eq!(c.producer_state(TOPIC, 0, pid).unwrap().last_seq(), 42);
}

// LogValidator `validateBatch`: a producer id with base sequence -1.
#[test]
fn negative_base_sequence_with_a_producer_id_is_invalid_record() {
    let mut c = cluster();
    let pid = producer(&mut c);
    let result = produce(&mut c, pid, 0, -1, 1);
    assert_eq!(result.error_code, INVALID_RECORD);
    assert!(c.partition_log(TOPIC, 0).is_empty());
    // Plain (non-idempotent) batches carry -1 and never touch producer state.
    let plain = produce(&mut c, -1, -1, -1, 2);
    assert_eq!((plain.error_code, plain.base_offset), (NONE, 0));
    assert_eq!(c.producer_state_entries(), 0);
}

// KafkaApis/Partition: a broker that is not the leader answers NOT_LEADER_OR_FOLLOWER with the
// current leader (KIP-951); the producer state moves with leadership (replicated), so a retry to
// the new leader is still a duplicate.
#[test]
fn produce_to_the_old_leader_after_a_leader_move_is_not_leader_or_follower() {
    let mut c = cluster();
    let pid = producer(&mut c);
    let bytes = batch(pid, 0, 0, 2);
    assert_eq!(send(&mut c, &bytes).error_code, NONE);
    c.set_leader(TOPIC, 0, 2);
    assert_eq!(c.leader(TOPIC, 0), Some((2, 1)));
    let old = c.produce(1, TOPIC, 0, &bytes, -1, None, NOW);
    assert_eq!(old.error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!(old.current_leader, Some((2, 1)));
    let retry = c.produce(2, TOPIC, 0, &bytes, -1, None, NOW);
    assert_eq!(
        (retry.error_code, retry.base_offset, retry.appended),
        (NONE, 0, false)
    );
    let stamped = &c.partition_log(TOPIC, 0)[0].bytes;
    assert_eq!(
        &stamped[12..16],
        &0i32.to_be_bytes(),
        "leader epoch at append time"
    );
}

// ReplicaManager `isValidRequiredAcks`, ReplicaManagerTest `testIllegalRequiredAcks`.
#[test]
fn acks_other_than_minus_one_zero_or_one_is_invalid_required_acks() {
    let mut c = cluster();
    let pid = producer(&mut c);
    let result = c.produce(1, TOPIC, 0, &batch(pid, 0, 0, 1), 2, None, NOW);
    assert_eq!(result.error_code, INVALID_REQUIRED_ACKS);
    assert!(c.partition_log(TOPIC, 0).is_empty());
    for acks in [-1, 0, 1] {
        let seq = log_end(&c) as i32;
        assert_eq!(
            c.produce(1, TOPIC, 0, &batch(pid, 0, seq, 1), acks, None, NOW)
                .error_code,
            NONE
        );
    }
}

// ProduceRequest `validateRecords`: exactly one batch of magic 2.
#[test]
fn two_batches_or_magic_one_in_a_partition_is_invalid_record() {
    let mut c = cluster();
    let pid = producer(&mut c);
    let two = [batch(pid, 0, 0, 1), batch(pid, 0, 1, 1)].concat();
    assert_eq!(send(&mut c, &two).error_code, INVALID_RECORD);
    let mut magic_one = batch(pid, 0, 0, 1);
    magic_one[16] = 1;
    assert_eq!(send(&mut c, &magic_one).error_code, INVALID_RECORD);
    let mut short_length = batch(pid, 0, 0, 1);
    short_length[8..12].copy_from_slice(&10i32.to_be_bytes());
    assert_eq!(send(&mut c, &short_length).error_code, CORRUPT_MESSAGE);
    assert!(c.partition_log(TOPIC, 0).is_empty());
}

// UnifiedLog `analyzeAndValidateRecords`: CRC-32C over attributes..end.
#[test]
fn corrupted_crc_is_corrupt_message_without_log_start_offset() {
    let mut c = cluster();
    let pid = producer(&mut c);
    let mut corrupt = batch(pid, 0, 0, 2);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    let result = send(&mut c, &corrupt);
    assert_eq!(
        (result.error_code, result.log_start_offset),
        (CORRUPT_MESSAGE, -1)
    );
    assert!(c.partition_log(TOPIC, 0).is_empty());
    assert!(
        c.producer_state(TOPIC, 0, pid).is_none(),
        "a rejected batch leaves no state"
    );
}

// UnifiedLog `analyzeAndValidateRecords`: topic max.message.bytes.
#[test]
fn batch_over_max_message_bytes_is_message_too_large() {
    let rules = BrokerRules {
        max_message_bytes: 200,
        ..BrokerRules::default()
    };
    let mut c = Cluster::new(&[1], rules);
    c.create_topic(TOPIC, &[1]);
    let pid = producer(&mut c);
    assert_eq!(produce(&mut c, pid, 0, 0, 2).error_code, NONE);
    assert_eq!(produce(&mut c, pid, 0, 2, 40).error_code, MESSAGE_TOO_LARGE);
}

// LogValidator `validateBatch`: clients may not write control batches.
#[test]
fn control_batch_from_a_client_is_invalid_record() {
    let mut c = cluster();
    let pid = producer(&mut c);
    let control = with_attributes(batch(pid, 0, 0, 1), 0x20);
    let result = c.produce(1, TOPIC, 0, &control, -1, None, NOW);
    assert_eq!(result.error_code, INVALID_RECORD);
}

// KafkaApis `handleProduceRequest`: unknown topic or partition.
#[test]
fn unknown_topic_or_partition() {
    let mut c = cluster();
    let bytes = batch(producer(&mut c), 0, 0, 1);
    assert_eq!(
        c.produce(1, "nope", 0, &bytes, -1, None, NOW).error_code,
        UNKNOWN_TOPIC_OR_PARTITION
    );
    assert_eq!(
        c.produce(1, TOPIC, 7, &bytes, -1, None, NOW).error_code,
        UNKNOWN_TOPIC_OR_PARTITION
    );
}

// Legacy (1.0-2.4) ProducerAppendInfo `checkSequence`: UNKNOWN_PRODUCER_ID for a producer the
// partition does not know, with a non-zero sequence (KAFKA-5793); current Kafka accepts it
// (KIP-360).
#[test]
fn unknown_producer_with_nonzero_sequence_is_unknown_producer_id_only_on_legacy_brokers() {
    let mut legacy = cluster_with(KafkaBehaviour::Legacy);
    let pid = producer(&mut legacy);
    assert_eq!(
        produce(&mut legacy, pid, 0, 7, 1).error_code,
        UNKNOWN_PRODUCER_ID
    );
    assert_eq!(produce(&mut legacy, pid, 0, 0, 1).error_code, NONE);

    let mut current = cluster();
    let pid = producer(&mut current);
    assert_eq!(produce(&mut current, pid, 0, 7, 1).error_code, NONE);
}

// Legacy (1.0-1.1) ProducerAppendInfo `isDuplicate`: a retry older than the retained batches was
// answered DUPLICATE_SEQUENCE_NUMBER; since 2.0 (KAFKA-6683) it is OUT_OF_ORDER_SEQUENCE_NUMBER. A
// retry inside the window is NONE with the original offset in both.
#[test]
fn retry_older_than_the_window_is_duplicate_sequence_only_on_legacy_brokers() {
    for (behaviour, expected) in [
        (KafkaBehaviour::Legacy, DUPLICATE_SEQUENCE_NUMBER),
        (KafkaBehaviour::Current, OUT_OF_ORDER_SEQUENCE_NUMBER),
    ] {
        let mut c = cluster_with(behaviour);
        let pid = producer(&mut c);
        for seq in 0..6 {
            produce(&mut c, pid, 0, seq * 2, 2);
        }
        assert_eq!(
            produce(&mut c, pid, 0, 0, 2).error_code,
            expected,
            "{behaviour:?}"
        );
        let recent = produce(&mut c, pid, 0, 10, 2);
        assert_eq!(
            (recent.error_code, recent.base_offset),
            (NONE, 10),
            "{behaviour:?}"
        );
        assert_eq!(log_end(&c), 12);
    }
}

// Retention: since 2.5 producer state survives the log start moving past the producer's
// batches (KAFKA-7190, UnifiedLogTest `testProducerIdExpirationOnSegmentDeletion`);
// before 2.5 `ProducerStateManager.truncateHead` dropped it, and the producer's next batch
// got UNKNOWN_PRODUCER_ID.
#[test]
fn retention_keeps_producer_state_on_current_kafka_and_drops_it_on_legacy_brokers() {
    for behaviour in [KafkaBehaviour::Current, KafkaBehaviour::Legacy] {
        let mut c = cluster_with(behaviour);
        let pid = producer(&mut c);
        produce(&mut c, pid, 0, 0, 3);
        produce(&mut c, pid, 0, 3, 3);
        c.truncate_log_start(TOPIC, 0, 6);
        assert!(c.partition_log(TOPIC, 0).is_empty());
        assert_eq!(c.log_start_offset(TOPIC, 0), Some(6));
        assert_eq!(c.partition_log_bytes(TOPIC, 0), 0);
        let next = produce(&mut c, pid, 0, 6, 1);
        match behaviour {
            KafkaBehaviour::Current => {
                assert_eq!(
                    (next.error_code, next.base_offset, next.log_start_offset),
                    (NONE, 6, 6)
                );
                // The retained metadata still catches a retry of a batch retention removed.
                let retry = produce(&mut c, pid, 0, 3, 3);
                assert_eq!((retry.error_code, retry.base_offset), (NONE, 3));
            }
            KafkaBehaviour::Legacy => {
                assert_eq!(next.error_code, UNKNOWN_PRODUCER_ID);
                assert_eq!(
                    next.log_start_offset, 6,
                    "lets the client see the truncation"
                );
            }
        }
    }
}

// ProducerStateManager `removeExpiredProducers` by record timestamp: after expiry duplicate
// detection is gone and a retry is appended again, ProducerStateManagerTest
// `testPidExpirationTimeout`.
#[test]
fn expired_producer_state_lets_a_retry_be_appended_again() {
    let mut c = cluster();
    let pid = producer(&mut c);
    produce(&mut c, pid, 0, 0, 2);
    let day = c.rules().producer_id_expiration_ms;
    assert_eq!(
        c.expire_producers(NOW + 1 + day - 1),
        0,
        "not yet idle long enough"
    );
    assert_eq!(c.expire_producers(NOW + 1 + day), 1);
    let again = produce(&mut c, pid, 0, 0, 2);
    assert_eq!(
        (again.error_code, again.base_offset, again.appended),
        (NONE, 2, true)
    );
}

// TransactionCoordinator `handleInitProducerId`: an idempotent producer always gets a new id at
// epoch 0; ids are never reused, and transactional ids draw from the same counter.
#[test]
fn producer_ids_are_unique_and_never_reused() {
    let mut c = cluster();
    let mut seen = std::collections::HashSet::new();
    for i in 0..100 {
        let init = if i % 10 == 0 {
            c.init_producer_id(Some(&format!("tx-{i}")), 60_000, -1, -1, NOW)
        } else {
            c.init_producer_id(None, 60_000, -1, -1, NOW)
        };
        assert_eq!((init.error_code, init.producer_epoch), (NONE, 0));
        assert!(
            seen.insert(init.producer_id),
            "id {} reused",
            init.producer_id
        );
    }
    // Naming an old id (KIP-360) does not bring it back for an idempotent producer.
    let first = *seen.iter().min().unwrap();
    let again = c.init_producer_id(None, 60_000, first, 0, NOW);
    assert!(seen.insert(again.producer_id));
    assert_eq!(c.producer_ids_issued(), 101);
}

// KafkaApis `handleInitProducerIdRequest`: naming only one of producer id / epoch is
// INVALID_REQUEST; TransactionCoordinator: an empty transactional id is INVALID_REQUEST, a timeout
// above transaction.max.timeout.ms is INVALID_TRANSACTION_TIMEOUT.
#[test]
fn init_producer_id_rejects_malformed_requests() {
    let mut c = cluster();
    assert_eq!(
        c.init_producer_id(None, 60_000, 5, -1, NOW).error_code,
        INVALID_REQUEST
    );
    assert_eq!(
        c.init_producer_id(None, 60_000, -1, 0, NOW).error_code,
        INVALID_REQUEST
    );
    assert_eq!(
        c.init_producer_id(Some(""), 60_000, -1, -1, NOW).error_code,
        INVALID_REQUEST
    );
    assert_eq!(
        c.init_producer_id(Some("tx"), 900_001, -1, -1, NOW)
            .error_code,
        INVALID_TRANSACTION_TIMEOUT
    );
    assert_eq!(
        c.init_producer_id(Some("tx"), 0, -1, -1, NOW).error_code,
        INVALID_TRANSACTION_TIMEOUT
    );
}

// TransactionMetadata `prepareIncrementProducerEpoch`: a second InitProducerId bumps the epoch of
// the same id and the old epoch is fenced on produce; KIP-360 with the current epoch bumps, with
// the last epoch returns the current one, with an older one is PRODUCER_FENCED.
#[test]
fn transactional_init_producer_id_bumps_the_epoch_and_fences_the_old_one() {
    let mut c = cluster();
    let first = c.init_producer_id(Some("tx"), 60_000, -1, -1, NOW);
    assert_eq!((first.error_code, first.producer_epoch), (NONE, 0));
    let pid = first.producer_id;
    assert_eq!(produce(&mut c, pid, 0, 0, 1).error_code, NONE);
    let second = c.init_producer_id(Some("tx"), 60_000, -1, -1, NOW);
    assert_eq!((second.producer_id, second.producer_epoch), (pid, 1));
    assert_eq!(produce(&mut c, pid, 1, 0, 1).error_code, NONE);
    assert_eq!(
        produce(&mut c, pid, 0, 1, 1).error_code,
        INVALID_PRODUCER_EPOCH
    );

    let bumped = c.init_producer_id(Some("tx"), 60_000, pid, 1, NOW);
    assert_eq!((bumped.error_code, bumped.producer_epoch), (NONE, 2));
    let retried = c.init_producer_id(Some("tx"), 60_000, pid, 1, NOW);
    assert_eq!(
        (retried.error_code, retried.producer_epoch),
        (NONE, 2),
        "retry of the bump"
    );
    let fenced = c.init_producer_id(Some("tx"), 60_000, pid, 0, NOW);
    assert_eq!(fenced.error_code, PRODUCER_FENCED);
    let wrong_id = c.init_producer_id(Some("tx"), 60_000, pid + 100, 2, NOW);
    assert_eq!(wrong_id.error_code, PRODUCER_FENCED);
}

// KafkaApis `handleProduceRequest`: transactional records need a transactional id.
#[test]
fn transactional_batch_without_a_transactional_id_is_authorization_failed() {
    let mut c = cluster();
    let pid = producer(&mut c);
    let result = send(&mut c, &transactional_batch(pid, 0, 0));
    assert_eq!(result.error_code, TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
}

// ReplicaManager `handleProduceAppend` + TransactionCoordinator
// `handleVerifyPartitionsInTransaction`: with verification on, a transactional batch for a
// partition never added to the transaction is rejected before the append (Produce v10 and below:
// INVALID_TXN_STATE). With verification off it is accepted and holds the last stable offset (a
// hanging transaction).
#[test]
fn transactional_batch_for_a_partition_not_in_the_transaction() {
    let mut c = cluster();
    let init = c.init_producer_id(Some("tx"), 60_000, -1, -1, NOW);
    let bytes = transactional_batch(init.producer_id, 0, 0);
    let result = c.produce(1, TOPIC, 0, &bytes, -1, Some("tx"), NOW);
    assert_eq!(
        (result.error_code, result.log_start_offset),
        (INVALID_TXN_STATE, -1)
    );
    assert_eq!(
        result.error_message.as_deref(),
        Some("Partition was not added to the transaction")
    );

    let rules = BrokerRules {
        transaction_verification: false,
        ..BrokerRules::default()
    };
    let mut c = Cluster::new(&[1], rules);
    c.create_topic(TOPIC, &[1]);
    let init = c.init_producer_id(Some("tx"), 60_000, -1, -1, NOW);
    let pid = init.producer_id;
    let plain = producer(&mut c);
    assert_eq!(produce(&mut c, plain, 0, 0, 2).error_code, NONE);
    assert_eq!(
        c.produce(
            1,
            TOPIC,
            0,
            &transactional_batch(pid, 0, 0),
            -1,
            Some("tx"),
            NOW
        )
        .error_code,
        NONE
    );
    assert_eq!(produce(&mut c, plain, 0, 2, 1).error_code, NONE);
    assert_eq!(
        c.last_stable_offset(TOPIC, 0),
        Some(2),
        "held at the open transaction"
    );
    assert_eq!(c.high_watermark(TOPIC, 0), Some(4));
    // ProducerAppendInfo `appendDataBatch`: a non-transactional write while the transaction is
    // open.
    assert_eq!(produce(&mut c, pid, 0, 1, 1).error_code, INVALID_TXN_STATE);
    let committed = c.fetch(1, TOPIC, 0, 0, 1 << 20, READ_COMMITTED, -1);
    assert_eq!(committed.aborted_transactions, Some(vec![]));
    assert_eq!(committed.last_stable_offset, 2);
    let uncommitted = c.fetch(1, TOPIC, 0, 0, 1 << 20, READ_UNCOMMITTED, -1);
    assert!(uncommitted.records.len() > committed.records.len());
    assert_eq!(uncommitted.aborted_transactions, None);
}

// ReplicaManager `handleProduceAppend`: transactional batches of one request with two producer ids
// fail every partition, ReplicaManagerTest
// `testExceptionWhenUnverifiedTransactionHasMultipleProducerIds`.
#[test]
fn transactional_batches_of_two_producers_in_one_request_are_invalid_producer_id_mapping() {
    let mut c = cluster();
    let a = transactional_batch(1, 0, 0);
    let b = transactional_batch(2, 0, 0);
    let inputs = [
        ProduceInput {
            topic: TOPIC,
            partition: 0,
            records: Some(&a),
        },
        ProduceInput {
            topic: TOPIC,
            partition: 1,
            records: Some(&b),
        },
    ];
    let results = c.produce_request(1, -1, Some("tx"), &inputs, NOW);
    assert!(results
        .iter()
        .all(|r| r.error_code == INVALID_PRODUCER_ID_MAPPING));
}

// Fetch returns whole stored batches with their offsets; out-of-range offsets are
// OFFSET_OUT_OF_RANGE; a stale leader epoch is FENCED_LEADER_EPOCH; ListOffsets answers the
// log start and the high watermark.
#[test]
fn fetch_and_list_offsets_read_back_what_was_appended() {
    let mut c = cluster();
    let pid = producer(&mut c);
    produce(&mut c, pid, 0, 0, 3);
    produce(&mut c, pid, 0, 3, 2);
    let all = c.fetch(1, TOPIC, 0, 0, 1 << 20, READ_UNCOMMITTED, -1);
    assert_eq!(
        (all.error_code, all.high_watermark, all.last_stable_offset),
        (NONE, 5, 5)
    );
    let stored: Vec<u8> = c
        .partition_log(TOPIC, 0)
        .iter()
        .flat_map(|b| b.bytes.to_vec())
        .collect();
    assert_eq!(&all.records[..], &stored[..]);
    // An offset inside the second batch returns that whole batch.
    let middle = c.fetch(1, TOPIC, 0, 4, 1 << 20, READ_UNCOMMITTED, -1);
    assert_eq!(&middle.records[..], &c.partition_log(TOPIC, 0)[1].bytes[..]);
    // max_bytes smaller than a batch still returns the first batch whole (KIP-74).
    let small = c.fetch(1, TOPIC, 0, 0, 1, READ_UNCOMMITTED, -1);
    assert_eq!(&small.records[..], &c.partition_log(TOPIC, 0)[0].bytes[..]);
    assert!(c
        .fetch(1, TOPIC, 0, 5, 1 << 20, READ_UNCOMMITTED, -1)
        .records
        .is_empty());
    assert_eq!(
        c.fetch(1, TOPIC, 0, 6, 1 << 20, READ_UNCOMMITTED, -1)
            .error_code,
        OFFSET_OUT_OF_RANGE
    );
    assert_eq!(
        c.fetch(2, TOPIC, 0, 0, 1 << 20, READ_UNCOMMITTED, -1)
            .error_code,
        NOT_LEADER_OR_FOLLOWER
    );
    c.set_leader(TOPIC, 0, 1);
    assert_eq!(
        c.fetch(1, TOPIC, 0, 0, 1 << 20, READ_UNCOMMITTED, 0)
            .error_code,
        FENCED_LEADER_EPOCH
    );
    assert_eq!(
        c.fetch(1, TOPIC, 0, 0, 1 << 20, READ_UNCOMMITTED, 2)
            .error_code,
        UNKNOWN_LEADER_EPOCH
    );

    let earliest = c.list_offsets(1, TOPIC, 0, EARLIEST_TIMESTAMP, READ_UNCOMMITTED, -1);
    let latest = c.list_offsets(1, TOPIC, 0, LATEST_TIMESTAMP, READ_UNCOMMITTED, -1);
    assert_eq!(
        (earliest.offset, latest.offset, latest.leader_epoch),
        (0, 5, 1)
    );
    let by_time = c.list_offsets(1, TOPIC, 0, NOW + 1, READ_UNCOMMITTED, -1);
    assert_eq!(by_time.offset, 1);
}

// Size-based retention moves the log start and keeps the byte count bounded.
#[test]
fn retention_bytes_bound_the_log() {
    let rules = BrokerRules {
        retention_bytes_per_partition: Some(1000),
        ..BrokerRules::default()
    };
    let mut c = Cluster::new(&[1], rules);
    c.create_topic(TOPIC, &[1]);
    let pid = producer(&mut c);
    for i in 0..100 {
        assert_eq!(produce(&mut c, pid, 0, i * 5, 5).error_code, NONE);
        assert!(c.partition_log_bytes(TOPIC, 0) <= 1000);
    }
    assert!(c.log_start_offset(TOPIC, 0).unwrap() > 0);
    assert_eq!(c.log_bytes(), c.partition_log_bytes(TOPIC, 0));
}

// Check order (the first failing check wins). A transactional batch off the
// leader fails leadership before verification (`ReplicaManager
// .maybeStartTransactionVerificationForPartition`); invalid acks come before leadership for
// other batches (`ReplicaManager.appendRecords` before `appendToLocalLog`); a bad CRC comes
// before the duplicate check (`UnifiedLog.analyzeAndValidateRecords` runs first).
#[test]
fn the_first_failing_check_wins_in_kafka_order() {
    let mut c = cluster();
    let init = c.init_producer_id(Some("tx"), 60_000, -1, -1, NOW);
    let txn = transactional_batch(init.producer_id, 0, 0);
    let off_leader = c.produce(2, TOPIC, 0, &txn, -1, Some("tx"), NOW);
    assert_eq!(off_leader.error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!(
        c.produce(1, TOPIC, 0, &txn, -1, Some("tx"), NOW).error_code,
        INVALID_TXN_STATE
    );

    let pid = producer(&mut c);
    let bytes = batch(pid, 0, 0, 2);
    assert_eq!(
        c.produce(2, TOPIC, 0, &bytes, 5, None, NOW).error_code,
        INVALID_REQUIRED_ACKS
    );
    assert_eq!(
        c.produce(2, TOPIC, 0, &bytes, -1, None, NOW).error_code,
        NOT_LEADER_OR_FOLLOWER
    );

    assert_eq!(send(&mut c, &bytes).error_code, NONE);
    let mut corrupt_retry = bytes.clone();
    let last = corrupt_retry.len() - 1;
    corrupt_retry[last] ^= 1;
    assert_eq!(send(&mut c, &corrupt_retry).error_code, CORRUPT_MESSAGE);
    assert_eq!(
        send(&mut c, &bytes).base_offset,
        0,
        "the intact retry is still a duplicate"
    );
}

// ---------------------------------------------------------------------------------------------
// Transactions: the coordinator, markers, the last stable offset and read_committed,
// transactional offsets; TV1, the client versions.

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

/// Data batches (not markers) a read_committed consumer is handed at `offset` on p0.
fn committed_fetch(c: &Cluster, offset: i64) -> kacrab::testkit::broker::FetchPartitionResult {
    c.fetch(1, TOPIC, 0, offset, 1 << 20, READ_COMMITTED, -1)
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

// TransactionCoordinator `endTransaction` + TransactionMarkerChannelManager + ProducerStateManager
// `firstUnstableOffset`: the records of an open transaction hold the last stable offset, so
// read_committed sees nothing of them; the COMMIT marker (transactional + control, the producer's
// id and epoch) releases them. ListOffsets(LATEST) under read_committed is the LSO.
#[test]
fn commit_makes_transactional_records_visible_under_read_committed() {
    let mut c = cluster();
    let plain = producer(&mut c);
    assert_eq!(produce(&mut c, plain, 0, 0, 2).error_code, NONE);
    let p = txn_producer(&mut c);
    assert_eq!(add_partitions(&mut c, p, &[0], NOW), vec![NONE]);
    assert_eq!(state(&c), TransactionState::Ongoing);
    assert_eq!(txn_send(&mut c, 0, p.pid, p.epoch, 0, 3).base_offset, 2);
    assert_eq!(c.last_stable_offset(TOPIC, 0), Some(2));
    let before = committed_fetch(&c, 0);
    assert_eq!(before.last_stable_offset, 2);
    assert_eq!(
        before.records.len(),
        c.partition_log(TOPIC, 0)[0].bytes.len()
    );
    assert!(
        committed_fetch(&c, 2).records.is_empty(),
        "nothing at the LSO"
    );
    assert_eq!(
        c.list_offsets(1, TOPIC, 0, LATEST_TIMESTAMP, READ_COMMITTED, -1)
            .offset,
        2
    );

    assert_eq!(end(&mut c, p, true), NONE);
    assert_eq!(state(&c), TransactionState::CompleteCommit);
    let m = markers(&c, 0);
    assert_eq!(m.len(), 1);
    assert_eq!(
        (
            m[0].base_offset,
            m[0].producer_id,
            m[0].producer_epoch,
            m[0].transactional
        ),
        (5, p.pid, p.epoch, true)
    );
    assert_eq!(marker_type_and_coordinator_epoch(&m[0]), (1, 0));
    assert_eq!(c.last_stable_offset(TOPIC, 0), Some(6));
    let after = committed_fetch(&c, 0);
    assert_eq!(after.aborted_transactions, Some(vec![]));
    assert_eq!(
        after.records.len(),
        c.partition_log(TOPIC, 0)
            .iter()
            .map(|b| b.bytes.len())
            .sum::<usize>()
    );
    assert_eq!(
        c.list_offsets(1, TOPIC, 0, LATEST_TIMESTAMP, READ_COMMITTED, -1)
            .offset,
        6
    );
    // The producer's open transaction on the partition is closed.
    assert_eq!(
        c.producer_state(TOPIC, 0, p.pid)
            .unwrap()
            .current_txn_first_offset,
        None
    );
}

// ProducerAppendInfo `appendEndTxnMarker` + TransactionIndex: an ABORT marker closes the
// transaction and indexes it, so a read_committed fetch lists (producer id, first offset) for the
// range it returns and the consumer drops those records; read_uncommitted carries no list.
#[test]
fn abort_keeps_records_invisible_and_lists_them_as_aborted() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    add_partitions(&mut c, p, &[0, 1], NOW);
    assert_eq!(txn_send(&mut c, 0, p.pid, p.epoch, 0, 2).error_code, NONE);
    assert_eq!(end(&mut c, p, false), NONE);
    assert_eq!(state(&c), TransactionState::CompleteAbort);
    // p1 got no data but still gets its marker, with no index entry.
    let m1 = markers(&c, 1);
    assert_eq!(m1.len(), 1);
    assert_eq!(marker_type_and_coordinator_epoch(&m1[0]).0, 0);
    assert!(c.aborted_transactions(TOPIC, 1).is_empty());

    let index = c.aborted_transactions(TOPIC, 0);
    assert_eq!(index.len(), 1);
    assert_eq!(
        (
            index[0].producer_id,
            index[0].first_offset,
            index[0].last_offset
        ),
        (p.pid, 0, 2)
    );
    let fetched = committed_fetch(&c, 0);
    assert_eq!(fetched.last_stable_offset, 3);
    assert_eq!(fetched.aborted_transactions, Some(vec![(p.pid, 0)]));
    assert!(
        !fetched.records.is_empty(),
        "aborted data is returned; the consumer drops it"
    );
    // A fetch past the aborted range lists nothing.
    let plain = producer(&mut c);
    produce(&mut c, plain, 0, 0, 1);
    assert_eq!(committed_fetch(&c, 3).aborted_transactions, Some(vec![]));
    assert_eq!(
        c.fetch(1, TOPIC, 0, 0, 1 << 20, READ_UNCOMMITTED, -1)
            .aborted_transactions,
        None
    );
}

// ProducerStateManager `firstUnstableOffset`: the LSO is the first offset of the oldest open
// transaction, and moves to the next open one when the first completes.
#[test]
fn open_transaction_holds_the_last_stable_offset_until_its_marker() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    add_partitions(&mut c, p, &[0], NOW);
    let other = c.init_producer_id_at(
        c.transaction_coordinator("other"),
        Some("other"),
        TIMEOUT_MS,
        -1,
        -1,
        NOW,
    );
    let other_coordinator = c.transaction_coordinator("other");
    let added = c.add_partitions_to_txn(
        other_coordinator,
        "other",
        other.producer_id,
        0,
        &[(TOPIC.to_string(), 0)],
        NOW,
    );
    assert_eq!(added, vec![NONE]);
    txn_send(&mut c, 0, p.pid, p.epoch, 0, 1);
    let mut b = TestBatch::idempotent(other.producer_id, 0, 0, 1);
    b.transactional = true;
    assert_eq!(
        c.produce(1, TOPIC, 0, &b.encode(), -1, Some("other"), NOW)
            .base_offset,
        1
    );
    let plain = producer(&mut c);
    produce(&mut c, plain, 0, 0, 1);
    assert_eq!(
        (c.last_stable_offset(TOPIC, 0), c.high_watermark(TOPIC, 0)),
        (Some(0), Some(3))
    );
    assert_eq!(end(&mut c, p, true), NONE);
    assert_eq!(
        c.last_stable_offset(TOPIC, 0),
        Some(1),
        "held by the other transaction"
    );
    assert_eq!(
        c.end_txn(other_coordinator, "other", other.producer_id, 0, true, NOW),
        NONE
    );
    assert_eq!(c.last_stable_offset(TOPIC, 0), Some(5));
}

// TransactionCoordinator `prepareInitProducerIdTransit` (Ongoing): a second InitProducerId fences
// the open transaction: CONCURRENT_TRANSACTIONS, ABORT markers at epoch + 1, and the retry bumps
// again from CompleteAbort. The old epoch is then INVALID_PRODUCER_EPOCH on produce,
// PRODUCER_FENCED at the coordinator, also for KIP-360; TransactionCoordinatorTest
// `shouldAbortTransactionOnHandleInitPidWhenExistingTransactionInOngoingState`.
#[test]
fn second_init_producer_id_fences_and_aborts_the_open_transaction() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    add_partitions(&mut c, p, &[0], NOW);
    txn_send(&mut c, 0, p.pid, p.epoch, 0, 2);

    let fence = c.init_producer_id_at(p.coordinator, Some(TXN), TIMEOUT_MS, -1, -1, NOW);
    assert_eq!(
        (fence.error_code, fence.producer_epoch),
        (CONCURRENT_TRANSACTIONS, -1)
    );
    let meta = c.transaction_metadata(TXN).unwrap();
    assert_eq!(
        (meta.state, meta.producer_epoch),
        (TransactionState::CompleteAbort, p.epoch + 1)
    );
    let m = markers(&c, 0);
    assert_eq!((m.len(), m[0].producer_epoch), (1, p.epoch + 1));
    assert_eq!(marker_type_and_coordinator_epoch(&m[0]).0, 0);
    assert_eq!(c.aborted_transactions(TOPIC, 0).len(), 1);
    assert_eq!(c.last_stable_offset(TOPIC, 0), Some(3));

    let retry = c.init_producer_id_at(p.coordinator, Some(TXN), TIMEOUT_MS, -1, -1, NOW);
    assert_eq!(
        (retry.error_code, retry.producer_id, retry.producer_epoch),
        (NONE, p.pid, p.epoch + 2)
    );

    // The zombie at the old epoch.
    assert_eq!(
        txn_send(&mut c, 0, p.pid, p.epoch, 2, 1).error_code,
        INVALID_PRODUCER_EPOCH
    );
    assert_eq!(end(&mut c, p, true), PRODUCER_FENCED);
    assert_eq!(add_partitions(&mut c, p, &[0], NOW), vec![PRODUCER_FENCED]);
    let kip360 = c.init_producer_id_at(p.coordinator, Some(TXN), TIMEOUT_MS, p.pid, p.epoch, NOW);
    assert_eq!(kip360.error_code, PRODUCER_FENCED);
}

// TransactionCoordinator `endTransactionWithTV1`: the state table of a retried or wrong EndTxn.
#[test]
fn retried_end_txn_answers_none_and_the_wrong_end_invalid_txn_state() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    assert_eq!(
        end(&mut c, p, true),
        INVALID_TXN_STATE,
        "Empty: nothing to end"
    );
    add_partitions(&mut c, p, &[0], NOW);
    txn_send(&mut c, 0, p.pid, p.epoch, 0, 1);
    let wrong_pid = TxnProducer {
        pid: p.pid + 1,
        ..p
    };
    assert_eq!(end(&mut c, wrong_pid, true), INVALID_PRODUCER_ID_MAPPING);
    let wrong_epoch = TxnProducer {
        epoch: p.epoch + 1,
        ..p
    };
    assert_eq!(end(&mut c, wrong_epoch, true), PRODUCER_FENCED);
    assert_eq!(end(&mut c, p, true), NONE);
    let log_len = c.partition_log(TOPIC, 0).len();
    assert_eq!(end(&mut c, p, true), NONE, "retry of the commit");
    assert_eq!(
        c.partition_log(TOPIC, 0).len(),
        log_len,
        "a retry writes no marker"
    );
    assert_eq!(
        end(&mut c, p, false),
        INVALID_TXN_STATE,
        "abort after a commit"
    );
    assert_eq!(
        c.transaction_metadata(TXN).unwrap().producer_epoch,
        p.epoch,
        "TV1 keeps the epoch"
    );

    add_partitions(&mut c, p, &[0], NOW);
    assert_eq!(end(&mut c, p, false), NONE);
    assert_eq!(end(&mut c, p, false), NONE, "retry of the abort");
    assert_eq!(
        end(&mut c, p, true),
        INVALID_TXN_STATE,
        "commit after an abort"
    );
}

// TransactionCoordinator: while the markers of an ended transaction are being written
// (PrepareCommit), the next AddPartitionsToTxn, a retried EndTxn and InitProducerId get
// CONCURRENT_TRANSACTIONS, the other end INVALID_TXN_STATE, verification of a produce
// NOT_ENOUGH_REPLICAS; the LSO stays held until the markers land; TransactionCoordinatorTest
// `shouldRespondWithConcurrentTransactionsOnAddPartitionsWhenStateIsPrepareCommit`.
#[test]
fn concurrent_transactions_while_markers_are_pending() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    add_partitions(&mut c, p, &[0], NOW);
    txn_send(&mut c, 0, p.pid, p.epoch, 0, 1);
    c.hold_transaction_markers(true);
    assert_eq!(
        end(&mut c, p, true),
        NONE,
        "answered once PrepareCommit is recorded"
    );
    assert_eq!(state(&c), TransactionState::PrepareCommit);
    assert_eq!(c.held_transaction_markers(), 1);
    assert!(markers(&c, 0).is_empty());
    assert_eq!(c.last_stable_offset(TOPIC, 0), Some(0));

    assert_eq!(
        add_partitions(&mut c, p, &[1], NOW),
        vec![CONCURRENT_TRANSACTIONS]
    );
    assert_eq!(end(&mut c, p, true), CONCURRENT_TRANSACTIONS);
    assert_eq!(end(&mut c, p, false), INVALID_TXN_STATE);
    let init = c.init_producer_id_at(p.coordinator, Some(TXN), TIMEOUT_MS, -1, -1, NOW);
    assert_eq!(init.error_code, CONCURRENT_TRANSACTIONS);
    let verified = txn_send(&mut c, 1, p.pid, p.epoch, 0, 1);
    assert_eq!(verified.error_code, NOT_ENOUGH_REPLICAS);

    assert_eq!(c.release_transaction_markers(NOW), 1);
    assert_eq!(state(&c), TransactionState::CompleteCommit);
    assert_eq!(markers(&c, 0).len(), 1);
    assert_eq!(c.last_stable_offset(TOPIC, 0), Some(2));
    assert_eq!(add_partitions(&mut c, p, &[1], NOW), vec![NONE]);
}

// TransactionCoordinator `abortTimedOutTransactions` (TV1): a transaction open longer than its
// timeout is fenced (epoch + 1, `lastProducerEpoch` -1) and aborted with markers at the new epoch;
// its producer is fenced for good, also for KIP-360; TransactionCoordinatorTest
// `shouldAbortExpiredTransactionsInOngoingStateAndBumpEpoch`. The abort is the coordinator's, so
// it follows the cluster's finalized transaction version: TV1 here (TV2 in
// reference_broker_tv2.rs).
#[test]
fn timed_out_transaction_is_aborted_and_its_producer_fenced() {
    let rules = BrokerRules {
        transaction_version: 1,
        ..BrokerRules::default()
    };
    let mut c = Cluster::new(&[1, 2, 3], rules);
    assert!(c.create_topic(TOPIC, &[1, 2]));
    let p = txn_producer(&mut c);
    add_partitions(&mut c, p, &[0], NOW);
    txn_send(&mut c, 0, p.pid, p.epoch, 0, 1);
    let deadline = NOW + i64::from(TIMEOUT_MS);
    assert_eq!(
        c.abort_timed_out_transactions(deadline),
        0,
        "not yet: start + timeout < now"
    );
    assert_eq!(c.abort_timed_out_transactions(deadline + 1), 1);
    let meta = c.transaction_metadata(TXN).unwrap();
    assert_eq!(
        (meta.state, meta.producer_epoch, meta.last_producer_epoch),
        (TransactionState::CompleteAbort, p.epoch + 1, -1)
    );
    let m = markers(&c, 0);
    assert_eq!((m.len(), m[0].producer_epoch), (1, p.epoch + 1));
    assert_eq!(c.aborted_transactions(TOPIC, 0).len(), 1);
    assert_eq!(
        c.abort_timed_out_transactions(deadline + 2),
        0,
        "nothing open any more"
    );

    assert_eq!(end(&mut c, p, false), PRODUCER_FENCED);
    assert_eq!(
        txn_send(&mut c, 0, p.pid, p.epoch, 1, 1).error_code,
        INVALID_PRODUCER_EPOCH
    );
    let kip360 = c.init_producer_id_at(p.coordinator, Some(TXN), TIMEOUT_MS, p.pid, p.epoch, NOW);
    assert_eq!(kip360.error_code, PRODUCER_FENCED);
    let fresh = c.init_producer_id_at(p.coordinator, Some(TXN), TIMEOUT_MS, -1, -1, NOW);
    assert_eq!(
        (fresh.error_code, fresh.producer_epoch),
        (NONE, p.epoch + 2)
    );
}

// The timeout clock starts when the transaction does (its first AddPartitionsToTxn), not at
// InitProducerId, and an idle producer with no transaction is never aborted.
#[test]
fn transaction_timeout_counts_from_the_first_added_partition() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    assert_eq!(
        c.abort_timed_out_transactions(NOW + 10 * i64::from(TIMEOUT_MS)),
        0
    );
    let start = NOW + 5 * i64::from(TIMEOUT_MS);
    add_partitions(&mut c, p, &[0], start);
    assert_eq!(
        c.abort_timed_out_transactions(start + i64::from(TIMEOUT_MS)),
        0
    );
    assert_eq!(
        c.abort_timed_out_transactions(start + i64::from(TIMEOUT_MS) + 1),
        1
    );
}

// OffsetMetadataManager `commitTransactionalOffset`, `replayEndTransactionMarker`, `fetchOffsets`:
// offsets of a TxnOffsetCommit are pending (UNSTABLE_OFFSET_COMMIT with requireStable, the old
// offset without) until the COMMIT marker reaches the group's offsets partition; ABORT drops them.
// Without AddOffsetsToTxn the commit is not in the transaction.
#[test]
fn txn_offset_commit_is_visible_after_commit_and_not_after_abort() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    let group_coordinator = c.group_coordinator(GROUP);
    let offsets = |offset| {
        vec![TxnOffsetCommitInput {
            topic: TOPIC.to_string(),
            partition: 0,
            offset,
            leader_epoch: -1,
            metadata: Some("m".to_string()),
        }]
    };
    let group = |p: TxnProducer| TxnOffsetCommitGroup {
        transactional_id: TXN,
        group_id: GROUP,
        producer_id: p.pid,
        producer_epoch: p.epoch,
        generation_id: -1,
    };
    let fetch = |c: &Cluster, stable| {
        let wanted = [(TOPIC.to_string(), 0)];
        let r = c
            .offset_fetch(group_coordinator, GROUP, Some(&wanted), stable)
            .unwrap();
        (r[0].error_code, r[0].offset)
    };

    assert_eq!(
        c.txn_offset_commit(group_coordinator, group(p), &offsets(7)),
        vec![TRANSACTION_ABORTABLE],
        "the offsets partition was not added"
    );
    assert_eq!(
        c.add_offsets_to_txn(p.coordinator, TXN, p.pid, p.epoch, GROUP, NOW),
        NONE
    );
    let offsets_partition = (
        CONSUMER_OFFSETS_TOPIC.to_string(),
        offsets_partition_for(GROUP),
    );
    assert!(c
        .transaction_metadata(TXN)
        .unwrap()
        .topic_partitions
        .contains(&offsets_partition));
    let other_epoch = TxnProducer {
        epoch: p.epoch + 1,
        ..p
    };
    assert_eq!(
        c.txn_offset_commit(group_coordinator, group(other_epoch), &offsets(7)),
        vec![INVALID_PRODUCER_EPOCH]
    );
    let generation = TxnOffsetCommitGroup {
        generation_id: 3,
        ..group(p)
    };
    assert_eq!(
        c.txn_offset_commit(group_coordinator, generation, &offsets(7)),
        vec![ILLEGAL_GENERATION]
    );
    assert_eq!(
        c.txn_offset_commit(group_coordinator, group(p), &offsets(7)),
        vec![NONE]
    );
    assert_eq!(fetch(&c, true), (UNSTABLE_OFFSET_COMMIT, -1));
    assert_eq!(fetch(&c, false), (NONE, -1));
    assert_eq!(end(&mut c, p, true), NONE);
    assert_eq!(fetch(&c, true), (NONE, 7));
    assert_eq!(c.committed_offset(GROUP, TOPIC, 0), Some(7));

    c.add_offsets_to_txn(p.coordinator, TXN, p.pid, p.epoch, GROUP, NOW);
    assert_eq!(
        c.txn_offset_commit(group_coordinator, group(p), &offsets(9)),
        vec![NONE]
    );
    assert_eq!(end(&mut c, p, false), NONE);
    assert_eq!(fetch(&c, true), (NONE, 7), "aborted offsets vanish");

    let other = c
        .broker_ids()
        .into_iter()
        .find(|&b| b != group_coordinator)
        .unwrap();
    assert_eq!(
        c.offset_fetch(other, GROUP, None, false),
        Err(NOT_COORDINATOR)
    );
    assert_eq!(
        c.txn_offset_commit(other, group(p), &offsets(9)),
        vec![NOT_COORDINATOR]
    );
}

// TransactionStateManager `getAndMaybeAddTransactionState`: after the coordinator moves, the old
// broker answers NOT_COORDINATOR to every transaction API and the new one serves the same state;
// markers carry the new coordinator epoch.
#[test]
fn moved_transaction_coordinator_leaves_not_coordinator_behind() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    let old = p.coordinator;
    let new = c.broker_ids().into_iter().find(|&b| b != old).unwrap();
    c.move_transaction_coordinator(TXN, new);
    assert_eq!(c.transaction_coordinator(TXN), new);
    assert_eq!(c.coordinator_epoch(), 1);
    assert_eq!(
        c.init_producer_id_at(old, Some(TXN), TIMEOUT_MS, -1, -1, NOW)
            .error_code,
        NOT_COORDINATOR
    );
    assert_eq!(add_partitions(&mut c, p, &[0], NOW), vec![NOT_COORDINATOR]);
    assert_eq!(
        c.add_offsets_to_txn(old, TXN, p.pid, p.epoch, GROUP, NOW),
        NOT_COORDINATOR
    );
    let moved = TxnProducer {
        coordinator: new,
        ..p
    };
    assert_eq!(add_partitions(&mut c, moved, &[0], NOW), vec![NONE]);
    txn_send(&mut c, 0, p.pid, p.epoch, 0, 1);
    assert_eq!(end(&mut c, p, true), NOT_COORDINATOR);
    assert_eq!(end(&mut c, moved, true), NONE);
    assert_eq!(
        marker_type_and_coordinator_epoch(&markers(&c, 0)[0]),
        (1, 1)
    );
    assert_eq!(
        c.producer_state(TOPIC, 0, p.pid).unwrap().coordinator_epoch,
        1
    );
    // An idempotent producer may still ask any broker.
    assert_eq!(
        c.init_producer_id_at(old, None, TIMEOUT_MS, -1, -1, NOW)
            .error_code,
        NONE
    );
}

// TransactionCoordinator `onElection` and TransactionMarkerChannelManager
// `removeMarkersForTxnTopicPartition`: a coordinator that moves while an ended transaction's
// markers are unwritten (PrepareCommit) leaves them to the new coordinator, which writes them under
// its own coordinator epoch; the transaction completes and the next one can start at the new
// coordinator.
#[test]
fn a_coordinator_moving_in_the_middle_of_end_txn_leaves_the_markers_to_the_new_one() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    add_partitions(&mut c, p, &[0, 1], NOW);
    txn_send(&mut c, 0, p.pid, p.epoch, 0, 1);
    c.hold_transaction_markers(true);
    assert_eq!(end(&mut c, p, true), NONE);
    assert_eq!(state(&c), TransactionState::PrepareCommit);

    let new = c
        .broker_ids()
        .into_iter()
        .find(|&b| b != p.coordinator)
        .unwrap();
    c.move_transaction_coordinator(TXN, new);
    let moved = TxnProducer {
        coordinator: new,
        ..p
    };
    assert_eq!(
        end(&mut c, moved, true),
        CONCURRENT_TRANSACTIONS,
        "the new coordinator loaded the prepared transaction"
    );
    assert_eq!(c.release_transaction_markers(NOW), 1);
    assert_eq!(state(&c), TransactionState::CompleteCommit);
    for partition in [0, 1] {
        let m = markers(&c, partition);
        assert_eq!(m.len(), 1, "p{partition}: one marker");
        assert_eq!(
            marker_type_and_coordinator_epoch(&m[0]),
            (1, 1),
            "p{partition}: a COMMIT under the new coordinator epoch"
        );
    }
    assert_eq!(c.last_stable_offset(TOPIC, 0), Some(2));
    assert_eq!(add_partitions(&mut c, moved, &[0], NOW), vec![NONE]);
}

// KafkaApis `handleAddPartitionsToTransactionRequest`: an unknown partition fails, the others are
// OPERATION_NOT_ATTEMPTED and nothing is added. TransactionCoordinator: an unknown transactional id
// or another producer id is INVALID_PRODUCER_ID_MAPPING, another epoch PRODUCER_FENCED.
#[test]
fn add_partitions_to_txn_rejects_unknown_partitions_and_other_producers() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    let partitions = [(TOPIC.to_string(), 0), (TOPIC.to_string(), 9)];
    assert_eq!(
        c.add_partitions_to_txn(p.coordinator, TXN, p.pid, p.epoch, &partitions, NOW),
        vec![OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC_OR_PARTITION]
    );
    assert_eq!(state(&c), TransactionState::Empty);
    assert_eq!(
        add_partitions(
            &mut c,
            TxnProducer {
                pid: p.pid + 1,
                ..p
            },
            &[0],
            NOW
        ),
        vec![INVALID_PRODUCER_ID_MAPPING]
    );
    assert_eq!(
        add_partitions(
            &mut c,
            TxnProducer {
                epoch: p.epoch + 1,
                ..p
            },
            &[0],
            NOW
        ),
        vec![PRODUCER_FENCED]
    );
    let unknown = c.transaction_coordinator("nobody");
    assert_eq!(
        c.add_partitions_to_txn(unknown, "nobody", p.pid, p.epoch, &partitions[..1], NOW),
        vec![INVALID_PRODUCER_ID_MAPPING]
    );
}

// KIP-890 part 1 (TransactionCoordinator `handleVerifyPartitionsInTransaction`): each transaction
// must add its partitions again; a transactional batch to a partition of the previous transaction,
// after its commit, is INVALID_TXN_STATE (Produce v10 and below). Once added, TV1 sequences simply
// continue after the same-epoch marker.
#[test]
fn produce_to_a_partition_not_added_to_this_transaction_is_rejected() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    add_partitions(&mut c, p, &[0], NOW);
    assert_eq!(txn_send(&mut c, 0, p.pid, p.epoch, 0, 2).error_code, NONE);
    assert_eq!(end(&mut c, p, true), NONE);
    let rejected = txn_send(&mut c, 0, p.pid, p.epoch, 2, 1);
    assert_eq!(rejected.error_code, INVALID_TXN_STATE);
    assert_eq!(
        rejected.error_message.as_deref(),
        Some("Partition was not added to the transaction")
    );
    add_partitions(&mut c, p, &[0], NOW);
    assert_eq!(txn_send(&mut c, 0, p.pid, p.epoch, 2, 1).error_code, NONE);
}

// ProducerStateManager `writeSnapshot`/`readSnapshot`: a snapshot holds one `BatchMetadata` per
// producer (its last batch), so after a restart the de-duplication window is one batch: a retry of
// the last batch is still a duplicate, a retry of an older batch that is in the log (one the
// running leader recognised) is OUT_OF_ORDER_SEQUENCE_NUMBER, and the next batch continues the
// sequence.
#[test]
fn after_a_snapshot_reload_only_the_last_batch_is_recognised_as_a_duplicate() {
    let mut c = cluster();
    let pid = producer(&mut c);
    let mut originals = Vec::new();
    for i in 0..5 {
        originals.push(produce(&mut c, pid, 0, i * 2, 2).base_offset);
    }
    // Before the restart every one of the five is a duplicate.
    assert_eq!(produce(&mut c, pid, 0, 2, 2).base_offset, originals[1]);
    let end = log_end(&c);

    assert_eq!(c.reload_producer_state_from_snapshot(TOPIC, 0, NOW), 1);
    let entry = c.producer_state(TOPIC, 0, pid).unwrap();
    assert_eq!((entry.batches().count(), entry.last_seq()), (1, 9));

    let last = produce(&mut c, pid, 0, 8, 2);
    assert_eq!(
        (last.error_code, last.base_offset, last.appended),
        (NONE, originals[4], false)
    );
    for i in 0..4 {
        let older = produce(&mut c, pid, 0, i * 2, 2);
        assert_eq!(
            (older.error_code, older.log_start_offset),
            (OUT_OF_ORDER_SEQUENCE_NUMBER, 0),
            "retry of batch {i}, in the log at offset {}",
            originals[i as usize]
        );
    }
    assert_eq!(log_end(&c), end, "nothing appended again");
    let next = produce(&mut c, pid, 0, 10, 1);
    assert_eq!((next.error_code, next.base_offset), (NONE, end));
}

// ProducerStateManager `loadFromSnapshot` skips producers that `isProducerExpired` at load time; a
// restart of a broker reloads every partition it leads and leaves the others alone.
#[test]
fn a_broker_restart_reloads_the_partitions_it_leads_and_drops_expired_producers() {
    let mut c = cluster();
    let pid = producer(&mut c);
    for i in 0..3 {
        assert_eq!(produce(&mut c, pid, 0, i, 1).error_code, NONE);
        let other = c.produce(2, TOPIC, 1, &batch(pid, 0, i, 1), -1, None, NOW);
        assert_eq!(other.error_code, NONE);
    }
    assert_eq!(c.reload_broker_producer_state(1, NOW), 1);
    assert_eq!(
        c.producer_state(TOPIC, 0, pid).unwrap().batches().count(),
        1
    );
    assert_eq!(
        c.producer_state(TOPIC, 1, pid).unwrap().batches().count(),
        3
    );

    let later = NOW + c.rules().producer_id_expiration_ms;
    assert_eq!(c.reload_producer_state_from_snapshot(TOPIC, 1, later), 1);
    assert!(c.producer_state(TOPIC, 1, pid).is_none());
    // With no entry any sequence is accepted again.
    let resumed = c.produce(2, TOPIC, 1, &batch(pid, 0, 7, 1), -1, None, later);
    assert_eq!(resumed.error_code, NONE);
}

/// Rewrites an encoded batch's record count and last offset delta and
/// fixes its CRC, so only the count disagrees.
fn with_count(mut bytes: Vec<u8>, count: i32, last_offset_delta: i32) -> Vec<u8> {
    bytes[23..27].copy_from_slice(&last_offset_delta.to_be_bytes());
    bytes[57..61].copy_from_slice(&count.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[21..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    bytes
}

// LogValidator `validateBatch`: `lastOffsetDelta + 1` must equal the record count (a batch's last
// sequence is its base sequence plus `lastOffsetDelta`, so this is also what keeps the
// sequence span honest); a count of 0 or less is invalid too.
#[test]
fn record_count_that_disagrees_with_the_last_offset_delta_is_invalid_record() {
    let mut c = cluster();
    let pid = producer(&mut c);
    for (count, delta) in [(3, 1), (2, 2), (0, -1)] {
        let bytes = with_count(batch(pid, 0, 0, 2), count, delta);
        let result = send(&mut c, &bytes);
        assert_eq!(
            (result.error_code, result.log_start_offset),
            (INVALID_RECORD, 0),
            "count {count}, last offset delta {delta}"
        );
    }
    assert!(c.partition_log(TOPIC, 0).is_empty());
    assert!(c.producer_state(TOPIC, 0, pid).is_none());
}

// DefaultRecordBatch `RecordIterator`, run by LogValidator over every record of an uncompressed
// batch: a header that promises more records than the batch holds is "premature EOF", fewer leaves
// "records still remaining"; both are InvalidRecordException, INVALID_RECORD. Here the count and
// the last offset delta agree with each other (and so with the sequence span), only not with the
// records, and the CRC is valid.
#[test]
fn record_count_that_disagrees_with_the_records_in_the_batch_is_invalid_record() {
    let mut c = cluster();
    let pid = producer(&mut c);
    for count in [1, 3] {
        let bytes = with_count(batch(pid, 0, 0, 2), count, count - 1);
        let result = send(&mut c, &bytes);
        assert_eq!(
            (result.error_code, result.log_start_offset),
            (INVALID_RECORD, 0),
            "count {count} for 2 records"
        );
    }
    assert!(c.partition_log(TOPIC, 0).is_empty());
    assert!(c.producer_state(TOPIC, 0, pid).is_none());
    assert_eq!(produce(&mut c, pid, 0, 0, 2).error_code, NONE);
}

/// An idempotent batch of `count` records compressed with `codec`, as kacrab's producer
/// builds it.
fn compressed_batch(codec: Codec, pid: i64, seq: i32, count: usize) -> Vec<u8> {
    let mut builder = RecordBatchBuilder::with_codec(1024, NOW, codec);
    for i in 0..count {
        let value = format!("compressed record {i} {}", "x".repeat(i % 40));
        builder.append(NOW + i as i64, None, Some(value.as_bytes()), &[]);
    }
    builder.set_producer_state(pid, 0, seq, false);
    builder.close().to_vec()
}

/// Rewrites bytes inside the CRC's range and fixes the CRC (and the length), so the broker
/// gets past its CRC check to the records.
fn resealed(mut bytes: Vec<u8>) -> Vec<u8> {
    let length = (bytes.len() - 12) as i32;
    bytes[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[21..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    bytes
}

fn all_codecs() -> [Codec; 4] {
    [
        Codec::Gzip { level: -1 },
        Codec::Snappy,
        Codec::Lz4 { level: 9 },
        Codec::Zstd { level: 3 },
    ]
}

// `LogValidator.validateMessagesAndAssignOffsetsCompressed`: when the topic's codec is the
// producer's (`compression.type=producer`, the default), the batch is kept as it came, only
// its base offset and leader epoch set.
#[test]
fn a_compressed_batch_of_every_codec_is_appended_and_stored_as_sent() {
    let mut c = cluster();
    let pid = producer(&mut c);
    let mut sent = Vec::new();
    for (i, codec) in all_codecs().into_iter().enumerate() {
        let bytes = compressed_batch(codec, pid, i as i32 * 10, 10);
        let result = send(&mut c, &bytes);
        assert_eq!(result.error_code, NONE, "{codec:?}");
        assert_eq!(result.base_offset, i as i64 * 10);
        sent.push(bytes);
    }
    let log: Vec<StoredBatch> = c.partition_log(TOPIC, 0).to_vec();
    assert_eq!(log.len(), 4);
    for (stored, sent) in log.iter().zip(&sent) {
        assert_eq!(
            stored.bytes[16..],
            sent[16..],
            "stored as sent after the leader epoch"
        );
        let records = decode_records(&stored.bytes).unwrap();
        assert_eq!(records.len(), 10);
        assert_eq!(
            records[3].value.as_deref(),
            Some(&b"compressed record 3 xxx"[..])
        );
    }
    assert_eq!(log_end(&c), 40);
}

// `DefaultRecordBatch.compressedIterator` under `LogValidator`: records that do not
// decompress fail the append. Kafka answers a stream cut short with `InvalidRecordException`
// and other decompression failures with a `KafkaException` (UNKNOWN_SERVER_ERROR); the
// reference broker answers INVALID_RECORD for both, a final rejection either way.
#[test]
fn a_compressed_batch_whose_records_do_not_decompress_is_rejected_and_leaves_no_state() {
    for codec in all_codecs() {
        let mut c = cluster();
        let pid = producer(&mut c);
        let good = compressed_batch(codec, pid, 0, 20);
        for section in [
            vec![0xa5; 64],
            good[61..good.len() / 2 + 30].to_vec(),
            Vec::new(),
        ] {
            let mut bad = good[..61].to_vec();
            bad.extend_from_slice(&section);
            let result = send(&mut c, &resealed(bad));
            assert_eq!(result.error_code, INVALID_RECORD, "{codec:?}");
            assert!(c.partition_log(TOPIC, 0).is_empty());
            assert!(c.producer_state(TOPIC, 0, pid).is_none(), "{codec:?}");
        }
        assert_eq!(send(&mut c, &good).error_code, NONE, "{codec:?}");
    }
}

// `DefaultRecordBatch.RecordIterator` over the decompressed records: fewer records than the
// header declares ("premature EOF") or more ("records still remaining") is InvalidRecordException.
#[test]
fn a_compressed_batch_whose_record_count_is_not_its_records_is_invalid_record() {
    for codec in all_codecs() {
        let mut c = cluster();
        let pid = producer(&mut c);
        for count in [19, 21] {
            let mut bad = compressed_batch(codec, pid, 0, 20);
            bad[23..27].copy_from_slice(&(count - 1i32).to_be_bytes()); // last offset delta
            bad[57..61].copy_from_slice(&count.to_be_bytes());
            let result = send(&mut c, &resealed(bad));
            assert_eq!(result.error_code, INVALID_RECORD, "{codec:?} count {count}");
        }
        assert!(c.partition_log(TOPIC, 0).is_empty());
    }
}

// The CRC covers the compressed records: a flipped compressed byte is CORRUPT_MESSAGE before
// anything is decompressed.
#[test]
fn a_flipped_byte_in_compressed_records_is_corrupt_message() {
    for codec in all_codecs() {
        let mut c = cluster();
        let pid = producer(&mut c);
        let mut bad = compressed_batch(codec, pid, 0, 20);
        let at = bad.len() - 3;
        bad[at] ^= 0x10;
        assert_eq!(send(&mut c, &bad).error_code, CORRUPT_MESSAGE, "{codec:?}");
    }
}
