//! The reader's first step: [`RecordBatchHeader`] parses the fixed 61-byte header and validates
//! the batch (magic, length, CRC32C, record count) before anything behind it is trusted.

use super::rewrite::increment_sequence;
use super::{
    get_i16, get_i32, get_i64, get_u32, RecordBatchError, ATTRIBUTES_OFFSET, BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET, BASE_TIMESTAMP_OFFSET, COMPRESSION_CODEC_MASK, CONTROL_FLAG_MASK,
    CRC_OFFSET, LAST_OFFSET_DELTA_OFFSET, LENGTH_OFFSET, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2,
    MAX_TIMESTAMP_OFFSET, MIN_BATCH_LENGTH, NO_SEQUENCE, PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET, PRODUCER_ID_OFFSET, RECORDS_COUNT_OFFSET, RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK, TRANSACTIONAL_FLAG_MASK,
};

/// The fixed 61-byte v2 header, parsed and validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordBatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl RecordBatchHeader {
    /// Parses the batch at the start of `buf` and validates it: magic 2, `batch_length` at least
    /// a bare header, the whole batch present, the CRC32C over `attributes..end`, and a
    /// non-negative record count. Bytes after the batch are ignored.
    pub fn parse(buf: &[u8]) -> Result<RecordBatchHeader, RecordBatchError> {
        let total = check_length_and_magic(buf)?;
        if buf.len() < total {
            return Err(RecordBatchError::Truncated {
                needed: total,
                available: buf.len(),
            });
        }
        let header = Self::read_fields(buf);
        // The CRC goes first: a failed CRC explains any odd field behind it.
        let actual = crc32c::crc32c(&buf[ATTRIBUTES_OFFSET..total]);
        if actual != header.crc {
            return Err(RecordBatchError::CrcMismatch {
                expected: header.crc,
                actual,
            });
        }
        header.check_record_count()
    }

    /// Like [`parse`](Self::parse) but reads only the 61 header bytes and skips the CRC check,
    /// for looking at a batch whose tail has not arrived yet. Nothing read this way is trustworthy
    /// until `parse` has checked the CRC.
    pub fn parse_unverified(buf: &[u8]) -> Result<RecordBatchHeader, RecordBatchError> {
        check_length_and_magic(buf)?;
        if buf.len() < RECORD_BATCH_OVERHEAD {
            return Err(RecordBatchError::Truncated {
                needed: RECORD_BATCH_OVERHEAD,
                available: buf.len(),
            });
        }
        Self::read_fields(buf).check_record_count()
    }

    /// Reads the header fields; `buf` holds at least `RECORD_BATCH_OVERHEAD` bytes.
    fn read_fields(buf: &[u8]) -> RecordBatchHeader {
        RecordBatchHeader {
            base_offset: get_i64(buf, BASE_OFFSET_OFFSET),
            batch_length: get_i32(buf, LENGTH_OFFSET),
            partition_leader_epoch: get_i32(buf, PARTITION_LEADER_EPOCH_OFFSET),
            magic: buf[MAGIC_OFFSET] as i8,
            crc: get_u32(buf, CRC_OFFSET),
            attributes: get_i16(buf, ATTRIBUTES_OFFSET),
            last_offset_delta: get_i32(buf, LAST_OFFSET_DELTA_OFFSET),
            base_timestamp: get_i64(buf, BASE_TIMESTAMP_OFFSET),
            max_timestamp: get_i64(buf, MAX_TIMESTAMP_OFFSET),
            producer_id: get_i64(buf, PRODUCER_ID_OFFSET),
            producer_epoch: get_i16(buf, PRODUCER_EPOCH_OFFSET),
            base_sequence: get_i32(buf, BASE_SEQUENCE_OFFSET),
            record_count: get_i32(buf, RECORDS_COUNT_OFFSET),
        }
    }

    fn check_record_count(self) -> Result<RecordBatchHeader, RecordBatchError> {
        if self.record_count < 0 {
            return Err(RecordBatchError::BadRecordCount(self.record_count));
        }
        Ok(self)
    }

    /// Attribute bit 4: the batch belongs to a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_FLAG_MASK != 0
    }

    /// Attribute bit 5: the batch holds control records (transaction markers).
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_FLAG_MASK != 0
    }

    /// Compression codec (attribute bits 0-2): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pub fn compression(&self) -> u8 {
        (self.attributes & COMPRESSION_CODEC_MASK) as u8
    }

    /// Attribute bit 3: timestamps are the broker's LogAppendTime rather than CreateTime.
    pub fn timestamp_type_log_append(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_MASK != 0
    }

    /// Sequence of the last record, `base_sequence + last_offset_delta` with Kafka's wrap rule
    /// (`DefaultRecordBatch.lastSequence`); `NO_SEQUENCE` for an unstamped batch.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence == NO_SEQUENCE {
            NO_SEQUENCE
        } else {
            increment_sequence(self.base_sequence, self.last_offset_delta)
        }
    }

    /// Bytes the whole batch occupies: `batch_length` plus the 12 bytes in front of it.
    pub fn total_size(&self) -> usize {
        // Non-negative: parsing rejects lengths below a bare header.
        self.batch_length as usize + LOG_OVERHEAD
    }
}

/// Validates the magic byte and `batch_length` and returns the batch's total size.
///
/// The magic is checked first: it sits at offset 16 in every message format, so legacy message
/// sets (which can be shorter than a v2 header) are reported as such rather than as truncated.
fn check_length_and_magic(buf: &[u8]) -> Result<usize, RecordBatchError> {
    if buf.len() <= MAGIC_OFFSET {
        return Err(RecordBatchError::Truncated {
            needed: RECORD_BATCH_OVERHEAD,
            available: buf.len(),
        });
    }
    let magic = buf[MAGIC_OFFSET] as i8;
    if magic != MAGIC_V2 {
        return Err(RecordBatchError::BadMagic(magic));
    }
    let batch_length = get_i32(buf, LENGTH_OFFSET);
    if batch_length < MIN_BATCH_LENGTH {
        return Err(RecordBatchError::BadLength(batch_length));
    }
    Ok(batch_length as usize + LOG_OVERHEAD)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::build;
    use super::super::{
        write_base_offset, write_partition_leader_epoch, write_producer_state,
        NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
    };
    use super::*;

    #[test]
    fn header_field_offsets() {
        let mut batch = build(
            0x0102_0304_0506_0708,
            &[(0x0102_0304_0506_0709, None, None, &[])],
        );
        write_producer_state(&mut batch, 0x1112_1314_1516_1718, 0x2122, 0x3132_3334, true);
        write_partition_leader_epoch(&mut batch, 0x4142_4344);
        write_base_offset(&mut batch, 0x5152_5354_5556_5758);
        let record_bytes = batch.len() - RECORD_BATCH_OVERHEAD;
        let crc = crc32c::crc32c(&batch[21..]);

        assert_eq!(batch[0..8], 0x5152_5354_5556_5758i64.to_be_bytes());
        assert_eq!(batch[8..12], ((49 + record_bytes) as i32).to_be_bytes());
        assert_eq!(batch[12..16], 0x4142_4344i32.to_be_bytes());
        assert_eq!(batch[16], 2);
        assert_eq!(batch[17..21], crc.to_be_bytes());
        assert_eq!(batch[21..23], 0x0010i16.to_be_bytes());
        assert_eq!(batch[23..27], 0i32.to_be_bytes());
        assert_eq!(batch[27..35], 0x0102_0304_0506_0708i64.to_be_bytes());
        assert_eq!(batch[35..43], 0x0102_0304_0506_0709i64.to_be_bytes());
        assert_eq!(batch[43..51], 0x1112_1314_1516_1718i64.to_be_bytes());
        assert_eq!(batch[51..53], 0x2122i16.to_be_bytes());
        assert_eq!(batch[53..57], 0x3132_3334i32.to_be_bytes());
        assert_eq!(batch[57..61], 1i32.to_be_bytes());

        let header = RecordBatchHeader::parse(&batch).unwrap();
        assert_eq!(
            header,
            RecordBatchHeader {
                base_offset: 0x5152_5354_5556_5758,
                batch_length: (49 + record_bytes) as i32,
                partition_leader_epoch: 0x4142_4344,
                magic: 2,
                crc,
                attributes: 0x10,
                last_offset_delta: 0,
                base_timestamp: 0x0102_0304_0506_0708,
                max_timestamp: 0x0102_0304_0506_0709,
                producer_id: 0x1112_1314_1516_1718,
                producer_epoch: 0x2122,
                base_sequence: 0x3132_3334,
                record_count: 1,
            }
        );
        assert_eq!(header.total_size(), batch.len());
        assert!(header.is_transactional());
        assert!(!header.is_control());
        assert_eq!(header.compression(), 0);
        assert!(!header.timestamp_type_log_append());
    }

    #[test]
    fn unstamped_batch_has_no_producer_state() {
        let batch = build(5, &[(5, Some(b"k"), Some(b"v"), &[])]);
        let header = RecordBatchHeader::parse(&batch).unwrap();
        assert_eq!(header.producer_id, NO_PRODUCER_ID);
        assert_eq!(header.producer_epoch, NO_PRODUCER_EPOCH);
        assert_eq!(header.base_sequence, NO_SEQUENCE);
        assert_eq!(header.partition_leader_epoch, NO_PARTITION_LEADER_EPOCH);
        assert_eq!(header.base_offset, 0);
        assert_eq!(header.attributes, 0);
        assert_eq!(header.last_sequence(), NO_SEQUENCE);
    }

    #[test]
    fn parse_rejects_bad_input() {
        let batch = build(0, &[(0, Some(b"key"), Some(b"value"), &[])]);

        let mut flipped = batch.to_vec();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(matches!(
            RecordBatchHeader::parse(&flipped),
            Err(RecordBatchError::CrcMismatch { .. })
        ));

        let mut magic = batch.to_vec();
        magic[16] = 1;
        assert_eq!(
            RecordBatchHeader::parse(&magic),
            Err(RecordBatchError::BadMagic(1))
        );

        let mut length = batch.to_vec();
        length[8..12].copy_from_slice(&48i32.to_be_bytes());
        assert_eq!(
            RecordBatchHeader::parse(&length),
            Err(RecordBatchError::BadLength(48))
        );
        length[8..12].copy_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(
            RecordBatchHeader::parse(&length),
            Err(RecordBatchError::BadLength(-1))
        );

        assert_eq!(
            RecordBatchHeader::parse(&batch[..batch.len() - 1]),
            Err(RecordBatchError::Truncated {
                needed: batch.len(),
                available: batch.len() - 1
            })
        );

        let mut count = batch.to_vec();
        count[57..61].copy_from_slice(&(-2i32).to_be_bytes());
        let crc = crc32c::crc32c(&count[21..]);
        count[17..21].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            RecordBatchHeader::parse(&count),
            Err(RecordBatchError::BadRecordCount(-2))
        );
    }
}
