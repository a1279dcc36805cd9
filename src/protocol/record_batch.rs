//! Record batch v2 (magic 2).
//!
//! The only on-wire record format kacrab writes. Layout of the fixed header (all integers
//! big-endian), with the byte offset of each field:
//!
//! | offset | field                  | type  | covered by CRC |
//! | -----: | ---------------------- | ----- | -------------- |
//! |      0 | base_offset            | i64   | no             |
//! |      8 | batch_length           | i32   | no             |
//! |     12 | partition_leader_epoch | i32   | no             |
//! |     16 | magic (= 2)            | i8    | no             |
//! |     17 | crc (CRC32C)           | u32   | no             |
//! |     21 | attributes             | i16   | yes            |
//! |     23 | last_offset_delta      | i32   | yes            |
//! |     27 | base_timestamp         | i64   | yes            |
//! |     35 | max_timestamp          | i64   | yes            |
//! |     43 | producer_id            | i64   | yes            |
//! |     51 | producer_epoch         | i16   | yes            |
//! |     53 | base_sequence          | i32   | yes            |
//! |     57 | record_count           | i32   | yes            |
//! |     61 | records...             |       | yes            |
//!
//! `batch_length` counts the bytes after itself, so a batch occupies `batch_length + 12` bytes.
//! The CRC covers everything from `attributes` to the end of the batch; the fields in front of it
//! (base offset, leader epoch) are the ones a broker rewrites without touching the CRC.
//!
//! Each record is: length varint (of the rest of the record), attributes i8 (unused, 0),
//! timestamp delta varlong (against `base_timestamp`), offset delta varint, key length varint
//! (-1 for null) and key, value length varint (-1 for null) and value, header count varint, and
//! per header: key length varint and UTF-8 key, value length varint (-1 for null) and value.
//!
//! The producer fields are stamped at a batch's first drain, not at append (as Java does): into
//! the builder before it computes the one CRC ([`RecordBatchBuilder::set_producer_state`]), or,
//! when sequences are reset after an epoch bump, on the closed batch ([`write_producer_state`],
//! which checksums the batch again).
//!
//! A compressed batch (attribute bits 0-2 name the codec, see
//! [`compression`](crate::protocol::compression)) keeps the header as it is and compresses
//! everything after it, once, when the batch stops taking records
//! ([`RecordBatchBuilder::compress`], or `close`). Stamping touches only header fields, so a
//! re-stamp after an epoch bump rewrites the header and the CRC, never the compressed records.
//!
//! This file holds the format's constants, the read error and the byte accessors every part
//! shares; the rest lives in child modules, re-exported here so every item keeps its
//! `protocol::record_batch::` path: `builder` (the encoder), `rewrite` (stamps and other
//! in-place header rewrites, and sequence arithmetic), `header` (parse and validate the fixed
//! header), `batches` (walk a records area batch by batch) and `decode` (read the records back).

use crate::protocol::compression::DecompressError;
use crate::protocol::varint::VarintError;

mod batches;
mod builder;
mod decode;
mod header;
mod rewrite;

pub use batches::{split_batches, Batches};
pub use builder::{Header, RecordBatchBuilder, RecordSize};
pub use decode::{
    decode_records, decode_records_with_limit, DecodedRecord, DEFAULT_MAX_DECOMPRESSED_BYTES,
};
pub use header::RecordBatchHeader;
pub use rewrite::{
    increment_sequence, write_base_offset, write_partition_leader_epoch, write_producer_state,
};

/// Size of the fixed v2 batch header; the records start at this offset.
pub const RECORD_BATCH_OVERHEAD: usize = 61;
/// The batch format this module reads and writes.
pub const MAGIC_V2: i8 = 2;
/// `producer_id` of a batch that has not been stamped.
pub const NO_PRODUCER_ID: i64 = -1;
/// `producer_epoch` of a batch that has not been stamped.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// `base_sequence` of a batch that has not been stamped.
pub const NO_SEQUENCE: i32 = -1;
/// `partition_leader_epoch` as written by a producer that does not know the leader epoch.
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;
/// `max_timestamp` of a batch without records.
pub const NO_TIMESTAMP: i64 = -1;

// Field offsets, named as in Kafka's `DefaultRecordBatch`.
const BASE_OFFSET_OFFSET: usize = 0;
const LENGTH_OFFSET: usize = 8;
const PARTITION_LEADER_EPOCH_OFFSET: usize = 12;
const MAGIC_OFFSET: usize = 16;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const LAST_OFFSET_DELTA_OFFSET: usize = 23;
const BASE_TIMESTAMP_OFFSET: usize = 27;
const MAX_TIMESTAMP_OFFSET: usize = 35;
const PRODUCER_ID_OFFSET: usize = 43;
const PRODUCER_EPOCH_OFFSET: usize = 51;
const BASE_SEQUENCE_OFFSET: usize = 53;
const RECORDS_COUNT_OFFSET: usize = 57;
const RECORDS_OFFSET: usize = RECORD_BATCH_OVERHEAD;

/// Bytes in front of the part counted by `batch_length`: base offset and the length itself.
const LOG_OVERHEAD: usize = 12;
/// Smallest legal `batch_length`: a header with no records.
const MIN_BATCH_LENGTH: i32 = (RECORD_BATCH_OVERHEAD - LOG_OVERHEAD) as i32;

// Attribute bits, named as in Kafka's `DefaultRecordBatch`.
const COMPRESSION_CODEC_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_MASK: i16 = 0x08;
const TRANSACTIONAL_FLAG_MASK: i16 = 0x10;
const CONTROL_FLAG_MASK: i16 = 0x20;

/// Why a record batch could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordBatchError {
    /// The input ends before the batch does.
    #[error("record batch truncated: need {needed} bytes, have {available}")]
    Truncated {
        /// Bytes the batch (or, before its length is known, its header) occupies.
        needed: usize,
        /// Bytes that were present.
        available: usize,
    },
    /// `batch_length` is smaller than a v2 header with no records.
    #[error("invalid record batch length {0}")]
    BadLength(i32),
    /// The magic byte is not 2 (legacy message sets are not supported).
    #[error("unsupported record batch magic {0}, only magic 2 is supported")]
    BadMagic(i8),
    /// The CRC32C stored in the header does not match the bytes it covers.
    #[error(
        "record batch CRC mismatch: header has {expected:#010x}, content gives {actual:#010x}"
    )]
    CrcMismatch {
        /// The CRC stored in the header.
        expected: u32,
        /// The CRC of the bytes from `attributes` to the end of the batch.
        actual: u32,
    },
    /// `record_count` is negative.
    #[error("invalid record count {0}")]
    BadRecordCount(i32),
    /// A varint inside a record is truncated or overlong.
    #[error("invalid varint in record: {0}")]
    Varint(#[from] VarintError),
    /// The records section does not decompress: unknown codec, corrupt stream, or more bytes
    /// than the reader's limit.
    #[error("cannot decompress the records: {0}")]
    Decompress(#[from] DecompressError),
    /// A record's fields are inconsistent with its length or with the batch.
    #[error("corrupt record at index {index}: {reason}")]
    CorruptRecord {
        /// Position of the record in the batch, from 0.
        index: i32,
        /// What was wrong.
        reason: &'static str,
    },
    /// Bytes are left in the batch after the last record its header declares.
    #[error("{0} bytes remain after the last declared record")]
    TrailingBytes(usize),
}

#[inline]
fn get_i16(buf: &[u8], offset: usize) -> i16 {
    let mut bytes = [0u8; 2];
    bytes.copy_from_slice(&buf[offset..offset + 2]);
    i16::from_be_bytes(bytes)
}

#[inline]
fn get_i32(buf: &[u8], offset: usize) -> i32 {
    let mut bytes = [0u8; 4];
    bytes.copy_from_slice(&buf[offset..offset + 4]);
    i32::from_be_bytes(bytes)
}

#[inline]
fn get_u32(buf: &[u8], offset: usize) -> u32 {
    let mut bytes = [0u8; 4];
    bytes.copy_from_slice(&buf[offset..offset + 4]);
    u32::from_be_bytes(bytes)
}

#[inline]
fn get_i64(buf: &[u8], offset: usize) -> i64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buf[offset..offset + 8]);
    i64::from_be_bytes(bytes)
}

#[inline]
fn set_bytes<const N: usize>(buf: &mut [u8], offset: usize, bytes: [u8; N]) {
    buf[offset..offset + N].copy_from_slice(&bytes);
}

#[cfg(test)]
mod test_support {
    //! Batches built for the tests of every part.

    use bytes::BytesMut;

    use super::{Header, RecordBatchBuilder};

    /// (timestamp, key, value, headers) of one record to append.
    pub(super) type TestRecord<'a> = (i64, Option<&'a [u8]>, Option<&'a [u8]>, &'a [Header<'a>]);

    pub(super) fn header(key: &'static str, value: Option<&'static [u8]>) -> Header<'static> {
        Header::new(key, value)
    }

    /// Builds and closes a batch from (timestamp, key, value, headers).
    pub(super) fn build(base_timestamp: i64, records: &[TestRecord<'_>]) -> BytesMut {
        let mut builder = RecordBatchBuilder::new(1024, base_timestamp);
        for (index, &(timestamp, key, value, headers)) in records.iter().enumerate() {
            let before = builder.size_in_bytes();
            let expected = builder.record_size(timestamp, key, value, headers);
            assert_eq!(builder.append(timestamp, key, value, headers), index as i32);
            assert_eq!(builder.size_in_bytes() - before, expected);
        }
        builder.close()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn crc32c_known_answers() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c::crc32c(b""), 0);
    }
}
