//! Idempotent produce: sequence and epoch checks, duplicate detection over the five retained
//! batches, and producer state through expiry, retention and snapshot reloads; where legacy
//! brokers answered otherwise, both answers by Kafka version.

use kacrab::testkit::broker::error_codes::*;
use kacrab::testkit::broker::KafkaBehaviour;

use super::{batch, cluster, cluster_with, log_end, produce, producer, NOW, TOPIC};

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
