//! Validation of produce requests and their batches (leadership, acks, magic, CRC, size, control
//! batches, record counts, compressed batches) and the order of the checks; reading the log back
//! with Fetch and ListOffsets, and size-based retention.

use kacrab::config::Codec;
use kacrab::testkit::broker::error_codes::*;
use kacrab::testkit::broker::{
    BrokerRules, Cluster, StoredBatch, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, READ_UNCOMMITTED,
};
use kacrab::testkit::internals::protocol::record_batch::{decode_records, RecordBatchBuilder};

use super::{batch, cluster, log_end, produce, producer, send, transactional_batch, NOW, TOPIC};

/// Rewrites the attributes of an encoded batch and fixes its CRC.
fn with_attributes(mut bytes: Vec<u8>, attributes: i16) -> Vec<u8> {
    bytes[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[21..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    bytes
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
