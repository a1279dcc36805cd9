//! In-place rewrites of a closed batch's header: the producer state stamp (which checksums the
//! batch again), the broker-side fields outside the CRC (base offset, partition leader epoch),
//! and Kafka's sequence arithmetic the stamps and the header's `last_sequence` share.
//!
//! None of these touches the records, so a compressed batch is re-stamped without being
//! compressed again.

use super::{
    get_i16, get_i32, set_bytes, ATTRIBUTES_OFFSET, BASE_OFFSET_OFFSET, BASE_SEQUENCE_OFFSET,
    CRC_OFFSET, LENGTH_OFFSET, LOG_OVERHEAD, PARTITION_LEADER_EPOCH_OFFSET, PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET, RECORD_BATCH_OVERHEAD, TRANSACTIONAL_FLAG_MASK,
};

/// End of the batch that starts at `batch[0]`, from its length field.
///
/// # Panics
/// If `batch` is shorter than the header or than the length field says; the rewrite functions
/// are only for batches this module built, so that is a caller bug.
fn closed_batch_end(batch: &[u8]) -> usize {
    assert!(
        batch.len() >= RECORD_BATCH_OVERHEAD,
        "record batch shorter than its header"
    );
    let batch_length = get_i32(batch, LENGTH_OFFSET);
    let end = usize::try_from(batch_length).expect("negative record batch length") + LOG_OVERHEAD;
    assert!(
        (RECORD_BATCH_OVERHEAD..=batch.len()).contains(&end),
        "record batch length field does not match the buffer"
    );
    end
}

/// Stamps producer id, epoch, base sequence and the transactional attribute bit on a closed
/// batch, in place, and recomputes the CRC32C over `attributes..end`.
///
/// Used when a batch is first drained and again when its sequence is rewritten after an epoch
/// bump. `batch` must start at the batch; bytes after its `batch_length + 12` are not touched.
///
/// # Panics
/// If `batch` is not a complete batch (shorter than the header or than its length field).
pub fn write_producer_state(
    batch: &mut [u8],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    is_transactional: bool,
) {
    let end = closed_batch_end(batch);
    stamp_producer_fields(
        batch,
        producer_id,
        producer_epoch,
        base_sequence,
        is_transactional,
    );
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..end]);
    set_bytes(batch, CRC_OFFSET, crc.to_be_bytes());
}

/// The header fields a stamp sets, CRC aside: producer id, epoch, base sequence and the
/// transactional bit of the attributes (the other bits kept).
pub(super) fn stamp_producer_fields(
    header: &mut [u8],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    is_transactional: bool,
) {
    let attributes = get_i16(header, ATTRIBUTES_OFFSET);
    let attributes = if is_transactional {
        attributes | TRANSACTIONAL_FLAG_MASK
    } else {
        attributes & !TRANSACTIONAL_FLAG_MASK
    };
    set_bytes(header, ATTRIBUTES_OFFSET, attributes.to_be_bytes());
    set_bytes(header, PRODUCER_ID_OFFSET, producer_id.to_be_bytes());
    set_bytes(header, PRODUCER_EPOCH_OFFSET, producer_epoch.to_be_bytes());
    set_bytes(header, BASE_SEQUENCE_OFFSET, base_sequence.to_be_bytes());
}

/// Sets `partition_leader_epoch` in place. The field lies before the CRC range, so the CRC stays
/// valid.
///
/// # Panics
/// If `batch` is shorter than the header.
pub fn write_partition_leader_epoch(batch: &mut [u8], leader_epoch: i32) {
    set_bytes(
        batch,
        PARTITION_LEADER_EPOCH_OFFSET,
        leader_epoch.to_be_bytes(),
    );
}

/// Sets `base_offset` in place (the broker does this on append). Not covered by the CRC.
///
/// # Panics
/// If `batch` is shorter than the header.
pub fn write_base_offset(batch: &mut [u8], base_offset: i64) {
    set_bytes(batch, BASE_OFFSET_OFFSET, base_offset.to_be_bytes());
}

/// Adds `increment` to a sequence with Kafka's wrap rule (`DefaultRecordBatch.incrementSequence`):
/// past `i32::MAX` the count continues at 0, never at a negative value, so MAX-1 plus 3 is 1 and
/// the three records get MAX-1, MAX and 0.
///
/// Expects `increment >= 0`, as every caller (a record count or offset delta) provides.
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    debug_assert!(increment >= 0, "negative sequence increment {increment}");
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{build, TestRecord};
    use super::super::{decode_records, RecordBatchHeader};
    use super::*;

    #[test]
    fn sequence_wrap() {
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 1), i32::MAX);
        assert_eq!(increment_sequence(0, 0), 0);
        assert_eq!(increment_sequence(5, 10), 15);
        assert_eq!(increment_sequence(i32::MAX, i32::MAX), i32::MAX - 1);
    }

    #[test]
    fn last_sequence_wraps() {
        let records: Vec<TestRecord<'_>> = (0..3).map(|_| (0, None, None, &[][..])).collect();
        let mut batch = build(0, &records);
        write_producer_state(&mut batch, 7, 0, i32::MAX - 1, false);
        let header = RecordBatchHeader::parse(&batch).unwrap();
        assert_eq!(header.base_sequence, i32::MAX - 1);
        // The records get MAX-1, MAX and 0; the next batch would start at 1.
        assert_eq!(header.last_sequence(), 0);
        assert_eq!(
            increment_sequence(header.base_sequence, header.record_count),
            1
        );
        write_producer_state(&mut batch, 7, 0, 10, false);
        assert_eq!(
            RecordBatchHeader::parse(&batch).unwrap().last_sequence(),
            12
        );
    }

    #[test]
    fn write_producer_state_keeps_crc_valid() {
        let mut batch = build(0, &[(0, Some(b"k"), Some(b"v"), &[]), (1, None, None, &[])]);
        write_producer_state(&mut batch, 42, 3, 100, true);
        let header = RecordBatchHeader::parse(&batch).unwrap();
        assert_eq!(
            (
                header.producer_id,
                header.producer_epoch,
                header.base_sequence
            ),
            (42, 3, 100)
        );
        assert!(header.is_transactional());
        // Rewrite after an epoch bump: new epoch, sequence from 0, flag cleared.
        write_producer_state(&mut batch, 42, 4, 0, false);
        let header = RecordBatchHeader::parse(&batch).unwrap();
        assert_eq!((header.producer_epoch, header.base_sequence), (4, 0));
        assert!(!header.is_transactional());
        assert_eq!(header.crc, crc32c::crc32c(&batch[21..]));
        assert_eq!(decode_records(&batch).unwrap().len(), 2);
    }

    #[test]
    fn write_producer_state_leaves_bytes_after_the_batch_alone() {
        let batch = build(0, &[(0, None, Some(b"v"), &[])]);
        let len = batch.len();
        let mut area = batch.to_vec();
        area.extend_from_slice(&[0xee; 8]);
        write_producer_state(&mut area, 1, 2, 3, false);
        assert_eq!(&area[len..], &[0xee; 8]);
        RecordBatchHeader::parse(&area).unwrap();
    }

    #[test]
    #[should_panic(expected = "does not match")]
    fn write_producer_state_rejects_a_cut_batch() {
        let batch = build(0, &[(0, None, Some(b"v"), &[])]);
        let mut cut = batch[..batch.len() - 1].to_vec();
        write_producer_state(&mut cut, 1, 2, 3, false);
    }

    #[test]
    fn fields_outside_the_crc_do_not_invalidate_it() {
        let mut batch = build(0, &[(0, None, Some(b"v"), &[])]);
        let crc = RecordBatchHeader::parse(&batch).unwrap().crc;
        write_base_offset(&mut batch, 1234);
        write_partition_leader_epoch(&mut batch, 9);
        let header = RecordBatchHeader::parse(&batch).unwrap();
        assert_eq!(header.crc, crc);
        assert_eq!(
            (header.base_offset, header.partition_leader_epoch),
            (1234, 9)
        );
    }
}
