//! The record batch v2 header, as far as the reference broker needs it.
//!
//! The broker never decodes records on the produce path: it reads the fixed 61-byte header,
//! checks the CRC, writes the assigned base offset and leader epoch in place and stores the bytes
//! as they came. This is a small private parser on purpose: it sits behind [`BatchHeader::parse`],
//! [`crc_matches`], [`set_base_offset`] and [`set_partition_leader_epoch`] so it can later be
//! replaced by the crate's own codec (`protocol::record_batch`) without touching the broker.
//!
//! Layout (Kafka `DefaultRecordBatch`): baseOffset i64 @0, batchLength i32 @8,
//! partitionLeaderEpoch i32 @12, magic i8 @16, crc u32 @17 (CRC-32C of bytes 21..end),
//! attributes i16 @21, lastOffsetDelta i32 @23, baseTimestamp i64 @27, maxTimestamp i64 @35,
//! producerId i64 @43, producerEpoch i16 @51, baseSequence i32 @53, recordCount i32 @57.

/// Reading back what the reference cluster stored: the records of one v2 batch, decompressed,
/// with the crate's own decoder.
pub use crate::protocol::record_batch::{decode_records, DecodedRecord, RecordBatchError};

/// Size of the fixed v2 batch header, records start right after it.
pub const HEADER_LEN: usize = 61;
/// baseOffset + batchLength: the part of the header not counted in `batchLength`
/// (Kafka `Records.LOG_OVERHEAD`).
pub const LOG_OVERHEAD: usize = 12;
/// The only record format the broker accepts (Kafka 4.x removed magic 0 and 1).
pub const MAGIC_V2: i8 = 2;

const BATCH_LENGTH_OFFSET: usize = 8;
const PARTITION_LEADER_EPOCH_OFFSET: usize = 12;
const MAGIC_OFFSET: usize = 16;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;

const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_MASK: i16 = 0x08;
const TRANSACTIONAL_FLAG: i16 = 0x10;
const CONTROL_FLAG: i16 = 0x20;

/// Why a records blob is not one readable v2 batch. Each maps to the error Kafka answers
/// (see `batch_error_code` in the broker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchError {
    /// Fewer bytes than one whole batch: Kafka's `ByteBufferLogInputStream` yields no batch at
    /// all, so `ProduceRequest.validateRecords` answers INVALID_RECORD.
    NoBatch,
    /// `batchLength` below the v2 minimum: `ByteBufferLogInputStream.nextBatch` throws
    /// `CorruptRecordException`.
    LengthTooSmall,
    /// Magic byte other than 2.
    UnsupportedMagic(i8),
    /// More than one batch in the blob (`ProduceRequest.validateRecords` wants exactly one).
    MultipleBatches,
}

/// The fixed part of a v2 batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// The offset of the batch's first record (0 as a producer sends it).
    pub base_offset: i64,
    /// The batch's length after this field, in bytes.
    pub batch_length: i32,
    /// The leader epoch of the partition when the batch was appended.
    pub partition_leader_epoch: i32,
    /// The record format: 2.
    pub magic: i8,
    /// CRC-32C of the bytes from `attributes` to the batch's end.
    pub crc: u32,
    /// Compression (bits 0-2), timestamp type (bit 3), transactional (bit 4), control
    /// (bit 5).
    pub attributes: i16,
    /// The last record's offset delta.
    pub last_offset_delta: i32,
    /// The first record's timestamp.
    pub base_timestamp: i64,
    /// The greatest record timestamp.
    pub max_timestamp: i64,
    /// The producer id (-1 without idempotence).
    pub producer_id: i64,
    /// The producer epoch.
    pub producer_epoch: i16,
    /// The first record's sequence number.
    pub base_sequence: i32,
    /// How many records the batch declares.
    pub record_count: i32,
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(raw)
}

impl BatchHeader {
    /// Parses the header of the single batch that `records` must hold: the whole blob must be
    /// exactly one batch, as `ProduceRequest.validateRecords` demands for Produce v3+.
    pub fn parse_single(records: &[u8]) -> Result<BatchHeader, BatchError> {
        let header = Self::parse(records)?;
        if header.total_len() < records.len() {
            return Err(BatchError::MultipleBatches);
        }
        Ok(header)
    }

    /// Parses the header of the first batch in `bytes`, checking only that it is whole.
    pub fn parse(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
        if bytes.len() < MAGIC_OFFSET + 1 {
            return Err(BatchError::NoBatch);
        }
        let batch_length = i32_at(bytes, BATCH_LENGTH_OFFSET);
        // The size check comes before the magic check in ByteBufferLogInputStream.nextBatch.
        if batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32 {
            return Err(BatchError::LengthTooSmall);
        }
        if LOG_OVERHEAD + batch_length as usize > bytes.len() {
            return Err(BatchError::NoBatch);
        }
        let magic = bytes[MAGIC_OFFSET] as i8;
        if magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        Ok(BatchHeader {
            base_offset: i64_at(bytes, 0),
            batch_length,
            partition_leader_epoch: i32_at(bytes, PARTITION_LEADER_EPOCH_OFFSET),
            magic,
            crc: i32_at(bytes, CRC_OFFSET) as u32,
            attributes: i16_at(bytes, ATTRIBUTES_OFFSET),
            last_offset_delta: i32_at(bytes, 23),
            base_timestamp: i64_at(bytes, 27),
            max_timestamp: i64_at(bytes, 35),
            producer_id: i64_at(bytes, 43),
            producer_epoch: i16_at(bytes, 51),
            base_sequence: i32_at(bytes, 53),
            record_count: i32_at(bytes, 57),
        })
    }

    /// Bytes the batch occupies, header included.
    pub fn total_len(&self) -> usize {
        LOG_OVERHEAD + self.batch_length as usize
    }

    /// Compression codec id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
    pub fn compression(&self) -> u8 {
        (self.attributes & COMPRESSION_MASK) as u8
    }

    /// The client claims LogAppendTime (attribute bit 3).
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_MASK != 0
    }

    /// The batch belongs to a transaction (attribute bit 4).
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_FLAG != 0
    }

    /// The batch holds a control record, a transaction marker (attribute bit 5).
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_FLAG != 0
    }

    /// Kafka `RecordBatch.hasProducerId`: only such batches touch producer state.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    /// Kafka `DefaultRecordBatch.lastSequence`: the base sequence advanced by the offset delta,
    /// wrapping past `i32::MAX` to 0.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return self.base_sequence;
        }
        increment_sequence(self.base_sequence, self.last_offset_delta)
    }
}

/// Kafka `DefaultRecordBatch.incrementSequence`: sequences run 0..=i32::MAX, then restart at 0.
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

/// Kafka `DefaultRecordBatch.decrementSequence`, the inverse of [`increment_sequence`].
pub fn decrement_sequence(sequence: i32, decrement: i32) -> i32 {
    if sequence < decrement {
        i32::MAX - (decrement - sequence) + 1
    } else {
        sequence - decrement
    }
}

/// CRC-32C over attributes..end, compared with the stored CRC (Kafka
/// `DefaultRecordBatch.isValid`, checked by `UnifiedLog.analyzeAndValidateRecords`).
pub fn crc_matches(batch: &[u8], header: &BatchHeader) -> bool {
    crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..header.total_len()]) == header.crc
}

/// Whether a batch holds exactly `record_count` records: Kafka's `DefaultRecordBatch`
/// iterator, which `LogValidator` runs over every record, throws `InvalidRecordException` on a
/// premature end ("Incorrect declared batch size, premature EOF reached") and on bytes left
/// after the last declared record ("records still remaining").
///
/// A compressed batch is decompressed first (to at most
/// [`DEFAULT_MAX_DECOMPRESSED_BYTES`](crate::protocol::record_batch::DEFAULT_MAX_DECOMPRESSED_BYTES)),
/// as `LogValidator` does for every compressed batch; records that do not decompress fail the
/// check too. (Kafka answers a stream that ends early with the same `InvalidRecordException`,
/// and other decompression failures with a `KafkaException`, UNKNOWN_SERVER_ERROR on the wire:
/// both reject the batch for good.) Only the record framing (each record's length varint) is
/// walked. The broker stores the batch as it came, compressed.
pub fn records_match_count(batch: &[u8], header: &BatchHeader) -> bool {
    let section = &batch[HEADER_LEN..header.total_len()];
    if header.compression() == 0 {
        return section_holds(section, header.record_count);
    }
    match crate::protocol::compression::decompress(
        header.compression(),
        section,
        crate::protocol::record_batch::DEFAULT_MAX_DECOMPRESSED_BYTES,
    ) {
        Ok(records) => section_holds(&records, header.record_count),
        Err(_) => false,
    }
}

/// Whether `section` is exactly `count` length-framed records.
fn section_holds(section: &[u8], count: i32) -> bool {
    let end = section.len();
    let batch = section;
    let mut at = 0;
    for _ in 0..count.max(0) {
        let Some((length, n)) = read_varint(batch, at, end) else {
            return false;
        };
        let Some(record_end) = usize::try_from(length)
            .ok()
            .and_then(|length| at.checked_add(n)?.checked_add(length))
        else {
            return false;
        };
        if record_end > end {
            return false;
        }
        at = record_end;
    }
    at == end
}

/// Writes the assigned base offset; it lies outside the CRC, so the CRC stays valid.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    batch[..8].copy_from_slice(&base_offset.to_be_bytes());
}

/// Writes the leader epoch the leader stamps on append (`LogValidator` sets
/// `partitionLeaderEpoch`); it also lies outside the CRC.
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    batch[PARTITION_LEADER_EPOCH_OFFSET..PARTITION_LEADER_EPOCH_OFFSET + 4]
        .copy_from_slice(&epoch.to_be_bytes());
}

/// Offset of the first record whose timestamp is at least `target`, searching one
/// uncompressed batch record by record (Kafka `LogSegment.findOffsetByTimestamp` does the same
/// inside the batch it finds). Compressed batches answer their base offset: the broker stores
/// them without decoding. `None` if no record qualifies or the records do not parse.
pub fn offset_of_timestamp(batch: &[u8], header: &BatchHeader, target: i64) -> Option<i64> {
    if header.compression() != 0 {
        return (header.max_timestamp >= target).then_some(header.base_offset);
    }
    let mut at = HEADER_LEN;
    let end = header.total_len();
    for _ in 0..header.record_count {
        let (length, n) = read_varint(batch, at, end)?;
        let record_end = at
            .checked_add(n)?
            .checked_add(usize::try_from(length).ok()?)?;
        if record_end > end {
            return None;
        }
        let mut field = at + n + 1; // skip the record's attributes byte
        let (timestamp_delta, n) = read_varlong(batch, field, record_end)?;
        field += n;
        let (offset_delta, _) = read_varint(batch, field, record_end)?;
        if header.base_timestamp + timestamp_delta >= target {
            return Some(header.base_offset + i64::from(offset_delta));
        }
        at = record_end;
    }
    None
}

fn read_varlong(bytes: &[u8], at: usize, end: usize) -> Option<(i64, usize)> {
    let mut raw: u64 = 0;
    for i in 0..10 {
        let byte = *bytes.get(at + i).filter(|_| at + i < end)?;
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((((raw >> 1) as i64) ^ -((raw & 1) as i64), i + 1));
        }
    }
    None
}

fn read_varint(bytes: &[u8], at: usize, end: usize) -> Option<(i32, usize)> {
    let (value, n) = read_varlong(bytes, at, end)?;
    (n <= 5).then_some((value as i32, n))
}

/// A record of a [`TestBatch`]: key and value, either may be null.
pub type TestRecord = (Option<Vec<u8>>, Option<Vec<u8>>);

/// A v2 batch to encode, for tests and the simulator: the fields a producer stamps plus plain
/// records (no headers, no compression).
#[derive(Debug, Clone)]
pub struct TestBatch {
    /// The producer id stamped in the header.
    pub producer_id: i64,
    /// The producer epoch stamped in the header.
    pub producer_epoch: i16,
    /// The first record's sequence number.
    pub base_sequence: i32,
    /// Sets the transactional attribute bit.
    pub transactional: bool,
    /// The first record's timestamp.
    pub base_timestamp: i64,
    /// (key, value) per record; record `i` gets offset delta `i` and timestamp
    /// `base_timestamp + i`.
    pub records: Vec<TestRecord>,
}

impl TestBatch {
    /// An idempotent batch of `count` records whose values are `value(i)`.
    pub fn idempotent(
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
        count: usize,
    ) -> TestBatch {
        TestBatch {
            producer_id,
            producer_epoch,
            base_sequence,
            transactional: false,
            base_timestamp: 0,
            records: (0..count)
                .map(|i| (None, Some(format!("v{i}").into_bytes())))
                .collect(),
        }
    }

    /// Encodes the batch with base offset 0, leader epoch -1 and a valid CRC.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        for (i, (key, value)) in self.records.iter().enumerate() {
            let mut record = vec![0u8]; // attributes
            write_varlong(&mut record, i as i64); // timestamp delta
            write_varlong(&mut record, i as i64); // offset delta
            write_bytes(&mut record, key.as_deref());
            write_bytes(&mut record, value.as_deref());
            write_varlong(&mut record, 0); // header count
            write_varlong(&mut body, record.len() as i64);
            body.extend_from_slice(&record);
        }
        let count = self.records.len() as i32;
        let mut out = Vec::with_capacity(HEADER_LEN + body.len());
        out.extend_from_slice(&0i64.to_be_bytes());
        out.extend_from_slice(&((HEADER_LEN - LOG_OVERHEAD + body.len()) as i32).to_be_bytes());
        out.extend_from_slice(&(-1i32).to_be_bytes());
        out.push(MAGIC_V2 as u8);
        out.extend_from_slice(&0u32.to_be_bytes()); // crc, filled below
        let attributes = if self.transactional {
            TRANSACTIONAL_FLAG
        } else {
            0
        };
        out.extend_from_slice(&attributes.to_be_bytes());
        out.extend_from_slice(&(count - 1).to_be_bytes());
        out.extend_from_slice(&self.base_timestamp.to_be_bytes());
        out.extend_from_slice(&(self.base_timestamp + i64::from(count.max(1) - 1)).to_be_bytes());
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.base_sequence.to_be_bytes());
        out.extend_from_slice(&count.to_be_bytes());
        out.extend_from_slice(&body);
        let crc = crc32c::crc32c(&out[ATTRIBUTES_OFFSET..]);
        out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        out
    }
}

/// Control record type of a transaction marker (Kafka `ControlRecordType`): the key's second
/// int16. Types 2-6 belong to KRaft and never mark a transaction.
pub const CONTROL_TYPE_ABORT: i16 = 0;
/// Control record type of a commit marker.
pub const CONTROL_TYPE_COMMIT: i16 = 1;

/// Encodes a transaction marker as the coordinator has it written (Kafka
/// `MemoryRecords.withEndTransactionMarker`, `EndTransactionMarker`): magic 2, transactional and
/// control attributes, base sequence -1, one record whose key is (version 0, type) and whose
/// value is (version 0, coordinator epoch). Base offset 0, leader epoch -1, valid CRC.
pub fn encode_end_txn_marker(
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    commit: bool,
    timestamp: i64,
) -> Vec<u8> {
    let control_type = if commit {
        CONTROL_TYPE_COMMIT
    } else {
        CONTROL_TYPE_ABORT
    };
    let key = [0i16.to_be_bytes(), control_type.to_be_bytes()].concat();
    let value = [
        &0i16.to_be_bytes()[..],
        &coordinator_epoch.to_be_bytes()[..],
    ]
    .concat();
    let mut bytes = TestBatch {
        producer_id,
        producer_epoch,
        base_sequence: -1,
        transactional: true,
        base_timestamp: timestamp,
        records: vec![(Some(key), Some(value))],
    }
    .encode();
    let attributes = TRANSACTIONAL_FLAG | CONTROL_FLAG;
    bytes[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[ATTRIBUTES_OFFSET..]);
    bytes[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    bytes
}

fn write_varlong(out: &mut Vec<u8>, value: i64) {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    while raw >= 0x80 {
        out.push((raw as u8) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

fn write_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => write_varlong(out, -1),
        Some(b) => {
            write_varlong(out, b.len() as i64);
            out.extend_from_slice(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_batch_parses_back_with_a_valid_crc() {
        let bytes = TestBatch::idempotent(7, 3, 10, 4).encode();
        let header = BatchHeader::parse_single(&bytes).unwrap();
        assert_eq!(header.producer_id, 7);
        assert_eq!(header.producer_epoch, 3);
        assert_eq!(header.base_sequence, 10);
        assert_eq!(header.last_sequence(), 13);
        assert_eq!(header.record_count, 4);
        assert_eq!(header.total_len(), bytes.len());
        assert!(crc_matches(&bytes, &header));
    }

    #[test]
    fn base_offset_and_leader_epoch_lie_outside_the_crc() {
        let mut bytes = TestBatch::idempotent(1, 0, 0, 2).encode();
        set_base_offset(&mut bytes, 1234);
        set_partition_leader_epoch(&mut bytes, 9);
        let header = BatchHeader::parse(&bytes).unwrap();
        assert_eq!(header.base_offset, 1234);
        assert_eq!(header.partition_leader_epoch, 9);
        assert!(crc_matches(&bytes, &header));
    }

    #[test]
    fn end_txn_marker_is_a_control_batch_with_the_marker_record() {
        let bytes = encode_end_txn_marker(7, 3, 5, true, 1000);
        let header = BatchHeader::parse_single(&bytes).unwrap();
        assert!(header.is_control() && header.is_transactional());
        assert_eq!((header.producer_id, header.producer_epoch), (7, 3));
        assert_eq!((header.base_sequence, header.record_count), (-1, 1));
        assert!(crc_matches(&bytes, &header));
        // key (version 0, COMMIT) and value (version 0, coordinator epoch 5), after the
        // record's length, attributes, timestamp delta, offset delta and key length varints.
        let record = &bytes[HEADER_LEN..];
        assert_eq!(&record[5..9], &[0, 0, 0, 1]);
        assert_eq!(&record[10..16], &[0, 0, 0, 0, 0, 5]);
        let abort = encode_end_txn_marker(7, 3, 5, false, 1000);
        assert_eq!(&abort[HEADER_LEN + 5..HEADER_LEN + 9], &[0, 0, 0, 0]);
    }

    #[test]
    fn sequences_wrap_past_i32_max() {
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 10, 20), 9);
        assert_eq!(decrement_sequence(9, 20), i32::MAX - 10);
        assert_eq!(decrement_sequence(5, 5), 0);
    }

    #[test]
    fn truncated_and_doubled_blobs_are_rejected() {
        let bytes = TestBatch::idempotent(1, 0, 0, 2).encode();
        assert_eq!(
            BatchHeader::parse_single(&bytes[..bytes.len() - 1]),
            Err(BatchError::NoBatch)
        );
        let doubled = [bytes.clone(), bytes].concat();
        assert_eq!(
            BatchHeader::parse_single(&doubled),
            Err(BatchError::MultipleBatches)
        );
    }

    #[test]
    fn timestamp_search_finds_the_first_record_at_or_after_the_target() {
        let mut batch = TestBatch::idempotent(1, 0, 0, 3);
        batch.base_timestamp = 100;
        let mut bytes = batch.encode();
        set_base_offset(&mut bytes, 50);
        let header = BatchHeader::parse(&bytes).unwrap();
        assert_eq!(header.max_timestamp, 102);
        assert_eq!(offset_of_timestamp(&bytes, &header, 0), Some(50));
        assert_eq!(offset_of_timestamp(&bytes, &header, 102), Some(52));
        assert_eq!(offset_of_timestamp(&bytes, &header, 103), None);
    }
}
