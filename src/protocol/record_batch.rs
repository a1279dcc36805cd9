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
//! A compressed batch (attribute bits 0-2 name the codec, see [`compression`]) keeps the header
//! as it is and compresses everything after it, once, when the batch stops taking records
//! ([`RecordBatchBuilder::compress`], or `close`). Stamping touches only header fields, so a
//! re-stamp after an epoch bump rewrites the header and the CRC, never the compressed records.

use bytes::{BufMut, Bytes, BytesMut};

use crate::protocol::compression::{self, Codec, DecompressError};

use crate::protocol::varint::{
    read_varint, read_varlong, varint_len, varlong_len, write_varint, write_varlong, VarintError,
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
/// The most bytes [`decode_records`] decompresses a batch's records to: a bound on the memory a
/// hostile or corrupt batch can make a reader spend. [`decode_records_with_limit`] takes another.
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 64 << 20;

/// Smallest encoded record: a one-byte length, attributes, timestamp delta, offset delta, null key,
/// null value and header count, one byte each. Bounds up-front allocation when decoding.
const MIN_RECORD_SIZE: usize = 7;

// Attribute bits, named as in Kafka's `DefaultRecordBatch`.
const COMPRESSION_CODEC_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_MASK: i16 = 0x08;
const TRANSACTIONAL_FLAG_MASK: i16 = 0x10;
const CONTROL_FLAG_MASK: i16 = 0x20;

/// A record header as handed to the encoder: borrowed, so appending allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header<'a> {
    /// Header key; Kafka requires it to be non-null, an empty key is legal.
    pub key: &'a str,
    /// Header value; `None` is encoded as length -1.
    pub value: Option<&'a [u8]>,
}

impl<'a> Header<'a> {
    /// A header with the given key and value.
    pub const fn new(key: &'a str, value: Option<&'a [u8]>) -> Self {
        Self { key, value }
    }
}

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

/// A length as the i32 the wire format stores.
///
/// Invariant: callers bound record and batch sizes by `max.request.size` (an i32) before
/// appending, so this never fails in a correct producer; a failure is a bug, not bad input.
#[inline]
fn length_as_i32(len: usize) -> i32 {
    i32::try_from(len).expect("record batch field longer than i32::MAX bytes")
}

/// A field length (or header count) as the i32 the wire format stores, without a check.
///
/// Exact whenever the record is encodable: each field length, and twice the header count, is
/// at most the record's body size, and `append` checks the body size against `i32::MAX` before
/// writing anything. For a longer field the cast is wrong but harmless: the body size counts the
/// real length, so `record_size` exceeds `i32::MAX` (failing any size check) and `append` panics.
#[inline]
fn field_length(len: usize) -> i32 {
    len as i32
}

/// Encoded size of a nullable byte field: its length varint (-1 for null) plus its bytes.
#[inline]
fn nullable_bytes_size(bytes: Option<&[u8]>) -> usize {
    match bytes {
        None => varint_len(-1),
        Some(bytes) => varint_len(field_length(bytes.len())) + bytes.len(),
    }
}

#[inline]
fn write_nullable_bytes(buf: &mut BytesMut, bytes: Option<&[u8]>) {
    match bytes {
        None => write_varint(buf, -1),
        Some(bytes) => {
            write_varint(buf, field_length(bytes.len()));
            buf.put_slice(bytes);
        }
    }
}

/// Size of a record without its length prefix.
#[inline]
fn record_body_size(
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header<'_>],
) -> usize {
    let mut size = 1 // attributes
        + varlong_len(timestamp_delta)
        + varint_len(offset_delta)
        + nullable_bytes_size(key)
        + nullable_bytes_size(value)
        + varint_len(field_length(headers.len()));
    for header in headers {
        size += varint_len(field_length(header.key.len()))
            + header.key.len()
            + nullable_bytes_size(header.value);
    }
    size
}

/// A record's encoded size in one builder state, from [`RecordBatchBuilder::measure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSize {
    /// Bytes after the length varint.
    body: usize,
}

impl RecordSize {
    /// Bytes the record adds to the batch, its length varint included.
    pub fn total(self) -> usize {
        varint_len(field_length(self.body)) + self.body
    }
}

/// Builds one magic-2 batch in a single `BytesMut`, its records compressed with the builder's
/// codec when it stops taking records.
///
/// The header is reserved up front and filled in by [`close`](Self::close); each
/// [`append`](Self::append) measures the record with the varint size helpers, reserves once and
/// writes the record straight into the buffer, so appending allocates nothing per record (the
/// buffer itself grows only if `capacity_hint` was too small).
///
/// The producer fields (producer id, epoch, base sequence, transactional flag) start at
/// -1/-1/-1/false; [`set_producer_state`](Self::set_producer_state) stamps them before `close`,
/// [`write_producer_state`] on a closed batch.
#[derive(Debug)]
pub struct RecordBatchBuilder {
    buf: BytesMut,
    base_timestamp: i64,
    /// Largest record timestamp so far; `NO_TIMESTAMP` until the first append.
    max_timestamp: i64,
    /// Also the offset delta of the next record: offsets in a fresh batch are dense from 0.
    record_count: i32,
    codec: Codec,
    /// Bytes of the records before compression: set when the records were compressed, which
    /// ends appending.
    compressed_from: Option<usize>,
}

impl RecordBatchBuilder {
    /// Starts an empty batch whose record timestamps are encoded relative to `base_timestamp`
    /// (normally the first record's timestamp, as in Java's `MemoryRecordsBuilder`).
    ///
    /// `capacity_hint` is the expected final batch size in bytes (e.g. `batch.size`); the buffer
    /// is allocated once with at least that capacity.
    pub fn new(capacity_hint: usize, base_timestamp: i64) -> Self {
        Self::with_codec(capacity_hint, base_timestamp, Codec::None)
    }

    /// [`new`](Self::new) for a batch whose records are compressed with `codec` when it closes.
    pub fn with_codec(capacity_hint: usize, base_timestamp: i64, codec: Codec) -> Self {
        let buf = BytesMut::with_capacity(capacity_hint.max(RECORD_BATCH_OVERHEAD));
        Self::with_buffer(buf, base_timestamp, codec)
    }

    /// [`with_codec`](Self::with_codec) writing into `buf`, a reused buffer: its contents are
    /// discarded and its capacity kept, so a buffer from a finished batch serves the next one
    /// without a new allocation.
    pub fn with_buffer(mut buf: BytesMut, base_timestamp: i64, codec: Codec) -> Self {
        buf.clear();
        buf.put_i64(0); // base_offset: assigned by the broker
        buf.put_i32(0); // batch_length: set by close
        buf.put_i32(NO_PARTITION_LEADER_EPOCH);
        buf.put_i8(MAGIC_V2);
        buf.put_u32(0); // crc: set by close
        buf.put_i16(0); // attributes: CreateTime, no compression, not transactional
        buf.put_i32(0); // last_offset_delta: set by close
        buf.put_i64(base_timestamp);
        buf.put_i64(base_timestamp); // max_timestamp: set by close
        buf.put_i64(NO_PRODUCER_ID);
        buf.put_i16(NO_PRODUCER_EPOCH);
        buf.put_i32(NO_SEQUENCE);
        buf.put_i32(0); // record_count: set by close
        debug_assert_eq!(buf.len(), RECORD_BATCH_OVERHEAD);
        Self {
            buf,
            base_timestamp,
            max_timestamp: NO_TIMESTAMP,
            record_count: 0,
            codec,
            compressed_from: None,
        }
    }

    /// Exact number of bytes [`append`](Self::append) would add for this record now, length
    /// varint included. Depends on the builder because the offset delta and the timestamp delta
    /// are part of the record.
    pub fn record_size(
        &self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> usize {
        self.measure(timestamp, key, value, headers).total()
    }

    /// The record's size as [`append_measured`](Self::append_measured) takes it: measured once
    /// for a size check and the append that follows it, with no append in between.
    pub fn measure(
        &self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> RecordSize {
        RecordSize {
            body: record_body_size(
                timestamp.wrapping_sub(self.base_timestamp),
                self.record_count,
                key,
                value,
                headers,
            ),
        }
    }

    /// Appends a record and returns its offset delta.
    ///
    /// Size limits are the caller's: check [`record_size`](Self::record_size) and
    /// [`size_in_bytes`](Self::size_in_bytes) against `batch.size` / `max.request.size` first.
    /// A timestamp older than `base_timestamp` is fine (the delta is signed); deltas wrap like
    /// Java's `long` subtraction, and decoders add them back with the same wrap.
    ///
    /// # Panics
    /// If the batch already holds `i32::MAX` records or a field is longer than `i32::MAX` bytes;
    /// the size checks above make both unreachable.
    pub fn append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> i32 {
        let size = self.measure(timestamp, key, value, headers);
        self.append_measured(size, timestamp, key, value, headers)
    }

    /// [`append`](Self::append) with the size [`measure`](Self::measure) gave for this record
    /// on this builder, just before: the record is not measured a second time.
    ///
    /// # Panics
    /// As `append`, and after [`compress`](Self::compress).
    pub fn append_measured(
        &mut self,
        size: RecordSize,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> i32 {
        assert!(
            self.compressed_from.is_none(),
            "append to a batch whose records are compressed"
        );
        let offset_delta = self.record_count;
        let next_count = offset_delta
            .checked_add(1)
            .expect("record batch holds i32::MAX records");
        let timestamp_delta = timestamp.wrapping_sub(self.base_timestamp);
        debug_assert_eq!(
            size,
            self.measure(timestamp, key, value, headers),
            "a size measured for another record or builder state"
        );
        let body = size.body;
        let body_len = length_as_i32(body);
        let total = varint_len(body_len) + body;

        let buf = &mut self.buf;
        buf.reserve(total);
        let start = buf.len();
        write_varint(buf, body_len);
        buf.put_i8(0); // record attributes: unused in v2
        write_varlong(buf, timestamp_delta);
        write_varint(buf, offset_delta);
        write_nullable_bytes(buf, key);
        write_nullable_bytes(buf, value);
        write_varint(buf, field_length(headers.len()));
        for header in headers {
            write_varint(buf, field_length(header.key.len()));
            buf.put_slice(header.key.as_bytes());
            write_nullable_bytes(buf, header.value);
        }
        debug_assert_eq!(buf.len() - start, total, "record size accounting drifted");

        if self.record_count == 0 || timestamp > self.max_timestamp {
            self.max_timestamp = timestamp;
        }
        self.record_count = next_count;
        offset_delta
    }

    /// Stamps producer id, epoch, base sequence and the transactional attribute bit into the
    /// header, to be covered by the CRC that [`close`](Self::close) computes: the same bytes as
    /// [`write_producer_state`] on the closed batch, without a second pass over the records.
    /// May be called more than once; the last call wins.
    pub fn set_producer_state(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
        is_transactional: bool,
    ) {
        stamp_producer_fields(
            &mut self.buf,
            producer_id,
            producer_epoch,
            base_sequence,
            is_transactional,
        );
    }

    /// Records appended so far.
    pub fn record_count(&self) -> i32 {
        self.record_count
    }

    /// Bytes the batch would occupy if closed now: the 61-byte header plus the records, as
    /// they are so far (uncompressed until [`compress`](Self::compress)).
    pub fn size_in_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Bytes of the records before compression (the records as appended).
    pub fn uncompressed_records_size(&self) -> usize {
        self.compressed_from
            .unwrap_or(self.buf.len() - RECORD_BATCH_OVERHEAD)
    }

    /// The codec the records are (or will be) compressed with.
    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// Java's `MemoryRecordsBuilder.compressionRatio` once the records are compressed: the
    /// batch's size, header included, over the records' uncompressed size. `None` before
    /// compression, for an uncompressed batch, and for a batch without records.
    pub fn compression_ratio(&self) -> Option<f32> {
        let uncompressed = self.compressed_from.filter(|&n| n > 0)?;
        Some(self.buf.len() as f32 / uncompressed as f32)
    }

    /// Compresses the records with the builder's codec and writes the codec into the
    /// attributes; no record can be appended after. Idempotent; nothing to do without a codec.
    /// The header (producer fields included) stays as it is, uncompressed, so a stamp before or
    /// after this gives the same bytes.
    pub fn compress(&mut self) {
        if self.codec == Codec::None || self.compressed_from.is_some() {
            return;
        }
        let records = &self.buf[RECORDS_OFFSET..];
        let mut out = BytesMut::with_capacity(RECORD_BATCH_OVERHEAD + records.len() / 2 + 64);
        out.extend_from_slice(&self.buf[..RECORDS_OFFSET]);
        self.codec.compress_into(records, &mut out);
        let attributes = (get_i16(&out, ATTRIBUTES_OFFSET) & !COMPRESSION_CODEC_MASK)
            | i16::from(self.codec.id());
        set_bytes(&mut out, ATTRIBUTES_OFFSET, attributes.to_be_bytes());
        self.compressed_from = Some(records.len());
        self.buf = out;
    }

    /// The builder's buffer, for reuse by another batch.
    pub fn into_buffer(self) -> BytesMut {
        self.buf
    }

    /// True if no record was appended.
    pub fn is_empty(&self) -> bool {
        self.record_count == 0
    }

    /// Finishes the header and returns the whole batch.
    ///
    /// Compresses the records if [`compress`](Self::compress) has not, then writes
    /// `last_offset_delta` (`record_count - 1`), `max_timestamp` (the largest record
    /// timestamp), `record_count`, `batch_length` and the CRC; base offset 0, leader epoch -1,
    /// magic 2 and attributes (CreateTime, the codec) were written by `new` and `compress`, the
    /// producer fields and the transactional bit by `new` or `set_producer_state`.
    /// An empty batch closes to a bare header with `record_count` 0, `last_offset_delta` -1 and
    /// `max_timestamp` -1; the producer never sends one.
    ///
    /// # Panics
    /// If the batch is longer than `i32::MAX` bytes (unreachable behind the size checks).
    pub fn close(mut self) -> BytesMut {
        self.compress();
        let Self {
            mut buf,
            max_timestamp,
            record_count,
            ..
        } = self;
        let batch_length = length_as_i32(buf.len() - LOG_OVERHEAD);
        set_bytes(&mut buf, LENGTH_OFFSET, batch_length.to_be_bytes());
        set_bytes(
            &mut buf,
            LAST_OFFSET_DELTA_OFFSET,
            (record_count - 1).to_be_bytes(),
        );
        set_bytes(&mut buf, MAX_TIMESTAMP_OFFSET, max_timestamp.to_be_bytes());
        set_bytes(&mut buf, RECORDS_COUNT_OFFSET, record_count.to_be_bytes());
        let crc = crc32c::crc32c(&buf[ATTRIBUTES_OFFSET..]);
        set_bytes(&mut buf, CRC_OFFSET, crc.to_be_bytes());
        buf
    }
}

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
fn stamp_producer_fields(
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

/// Iterates the batches of a `records` byte area (a Produce partition's records or a Fetch
/// partition's record set), yielding each validated header with the batch's bytes.
///
/// By default any truncation is an error. Fetch responses may end with a partial batch (the
/// broker cuts at `max_bytes`); [`Batches::allow_partial_trailing`] makes that end the iteration
/// quietly, as Java's `ByteBufferLogInputStream` does. After the first error the iterator is
/// finished.
pub fn split_batches(buf: &[u8]) -> Batches<'_> {
    Batches {
        remaining: buf,
        allow_partial_trailing: false,
        finished: false,
    }
}

/// Iterator returned by [`split_batches`].
#[derive(Debug, Clone)]
pub struct Batches<'a> {
    remaining: &'a [u8],
    allow_partial_trailing: bool,
    finished: bool,
}

impl<'a> Batches<'a> {
    /// Ends the iteration without an error at a trailing batch that is cut short: fewer than 12
    /// bytes left, or a plausible length field promising more bytes than remain.
    pub fn allow_partial_trailing(mut self) -> Self {
        self.allow_partial_trailing = true;
        self
    }

    /// The bytes not yet consumed: after a quiet stop, the partial trailing batch.
    pub fn remaining(&self) -> &'a [u8] {
        self.remaining
    }

    fn is_partial_trailing(&self) -> bool {
        let buf = self.remaining;
        if buf.len() < LOG_OVERHEAD {
            return true;
        }
        // A length below a bare header is corruption, not a cut: let parse report it.
        let batch_length = get_i32(buf, LENGTH_OFFSET);
        batch_length >= MIN_BATCH_LENGTH && buf.len() < batch_length as usize + LOG_OVERHEAD
    }
}

impl<'a> Iterator for Batches<'a> {
    type Item = Result<(RecordBatchHeader, &'a [u8]), RecordBatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.finished || self.remaining.is_empty() {
            return None;
        }
        if self.allow_partial_trailing && self.is_partial_trailing() {
            self.finished = true;
            return None;
        }
        match RecordBatchHeader::parse(self.remaining) {
            Ok(header) => {
                let (batch, rest) = self.remaining.split_at(header.total_size());
                self.remaining = rest;
                Some(Ok((header, batch)))
            }
            Err(error) => {
                self.finished = true;
                Some(Err(error))
            }
        }
    }
}

impl std::iter::FusedIterator for Batches<'_> {}

/// One record decoded from a batch. Owned: decoding is off the hot path (broker,
/// tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedRecord {
    pub offset_delta: i32,
    /// Absolute timestamp: `base_timestamp + delta`, or the batch's `max_timestamp` when the
    /// batch uses LogAppendTime (as Java's `DefaultRecordBatch` reports it).
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// Reads fields of one record; every read is bounds-checked against the record's own length.
struct RecordReader<'a> {
    buf: &'a [u8],
    index: i32,
}

impl<'a> RecordReader<'a> {
    fn corrupt(&self, reason: &'static str) -> RecordBatchError {
        RecordBatchError::CorruptRecord {
            index: self.index,
            reason,
        }
    }

    fn varint(&mut self) -> Result<i32, RecordBatchError> {
        let (value, used) = read_varint(self.buf)?;
        self.buf = &self.buf[used..];
        Ok(value)
    }

    fn varlong(&mut self) -> Result<i64, RecordBatchError> {
        let (value, used) = read_varlong(self.buf)?;
        self.buf = &self.buf[used..];
        Ok(value)
    }

    fn byte(&mut self) -> Result<u8, RecordBatchError> {
        let (&first, rest) = self
            .buf
            .split_first()
            .ok_or_else(|| self.corrupt("record ends inside its attributes"))?;
        self.buf = rest;
        Ok(first)
    }

    fn bytes(&mut self, len: usize, reason: &'static str) -> Result<&'a [u8], RecordBatchError> {
        if len > self.buf.len() {
            return Err(self.corrupt(reason));
        }
        let (bytes, rest) = self.buf.split_at(len);
        self.buf = rest;
        Ok(bytes)
    }

    /// A length-prefixed field where length -1 means null.
    fn nullable_bytes(
        &mut self,
        reason: &'static str,
    ) -> Result<Option<&'a [u8]>, RecordBatchError> {
        match self.varint()? {
            -1 => Ok(None),
            len if len < -1 => Err(self.corrupt("negative field length")),
            len => self.bytes(len as usize, reason).map(Some),
        }
    }
}

fn decode_record(
    body: &[u8],
    index: i32,
    header: &RecordBatchHeader,
) -> Result<DecodedRecord, RecordBatchError> {
    let mut reader = RecordReader { buf: body, index };
    let _attributes = reader.byte()?;
    let timestamp_delta = reader.varlong()?;
    let offset_delta = reader.varint()?;
    let key = reader.nullable_bytes("key runs past the record")?;
    let value = reader.nullable_bytes("value runs past the record")?;
    let header_count = reader.varint()?;
    if header_count < 0 {
        return Err(reader.corrupt("negative header count"));
    }
    // Each header takes at least two bytes; bound the allocation by what the record can hold.
    let mut headers = Vec::with_capacity((header_count as usize).min(reader.buf.len() / 2));
    for _ in 0..header_count {
        let key_len = reader.varint()?;
        if key_len < 0 {
            return Err(reader.corrupt("negative header key length"));
        }
        let key = reader.bytes(key_len as usize, "header key runs past the record")?;
        let key =
            std::str::from_utf8(key).map_err(|_| reader.corrupt("header key is not UTF-8"))?;
        let value = reader.nullable_bytes("header value runs past the record")?;
        headers.push((key.to_owned(), value.map(Bytes::copy_from_slice)));
    }
    if !reader.buf.is_empty() {
        return Err(reader.corrupt("record length does not match its fields"));
    }
    let timestamp = if header.timestamp_type_log_append() {
        header.max_timestamp
    } else {
        header.base_timestamp.wrapping_add(timestamp_delta)
    };
    Ok(DecodedRecord {
        offset_delta,
        timestamp,
        key: key.map(Bytes::copy_from_slice),
        value: value.map(Bytes::copy_from_slice),
        headers,
    })
}

/// Decodes the records of the batch at the start of `batch` (validated with
/// [`RecordBatchHeader::parse`], CRC included), decompressing them first if the batch is
/// compressed, to at most [`DEFAULT_MAX_DECOMPRESSED_BYTES`]. Every record must fill exactly its
/// declared length, and the records must fill exactly the (decompressed) records section.
pub fn decode_records(batch: &[u8]) -> Result<Vec<DecodedRecord>, RecordBatchError> {
    decode_records_with_limit(batch, DEFAULT_MAX_DECOMPRESSED_BYTES)
}

/// [`decode_records`] with another bound on the decompressed records section.
pub fn decode_records_with_limit(
    batch: &[u8],
    max_decompressed: usize,
) -> Result<Vec<DecodedRecord>, RecordBatchError> {
    let header = RecordBatchHeader::parse(batch)?;
    let section = &batch[RECORDS_OFFSET..header.total_size()];
    if header.compression() == compression::CODEC_NONE {
        return decode_section(section, &header);
    }
    let decompressed = compression::decompress(header.compression(), section, max_decompressed)?;
    decode_section(&decompressed, &header)
}

/// The records of an uncompressed records section, `header.record_count` of them.
fn decode_section(
    section: &[u8],
    header: &RecordBatchHeader,
) -> Result<Vec<DecodedRecord>, RecordBatchError> {
    let mut rest = section;
    // The count is CRC-protected but still producer-chosen: bound the allocation by the bytes.
    let capacity = (header.record_count as usize).min(rest.len() / MIN_RECORD_SIZE);
    let mut records = Vec::with_capacity(capacity);
    for index in 0..header.record_count {
        if rest.is_empty() {
            return Err(RecordBatchError::CorruptRecord {
                index,
                reason: "batch ends before its declared record count",
            });
        }
        let (length, used) = read_varint(rest)?;
        rest = &rest[used..];
        if length < 0 || length as usize > rest.len() {
            return Err(RecordBatchError::CorruptRecord {
                index,
                reason: "record length runs past the batch",
            });
        }
        let (body, after) = rest.split_at(length as usize);
        records.push(decode_record(body, index, header)?);
        rest = after;
    }
    if !rest.is_empty() {
        return Err(RecordBatchError::TrailingBytes(rest.len()));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (timestamp, key, value, headers) of one record to append.
    type TestRecord<'a> = (i64, Option<&'a [u8]>, Option<&'a [u8]>, &'a [Header<'a>]);

    fn header(key: &'static str, value: Option<&'static [u8]>) -> Header<'static> {
        Header::new(key, value)
    }

    /// Builds and closes a batch from (timestamp, key, value, headers).
    fn build(base_timestamp: i64, records: &[TestRecord<'_>]) -> BytesMut {
        let mut builder = RecordBatchBuilder::new(1024, base_timestamp);
        for (index, &(timestamp, key, value, headers)) in records.iter().enumerate() {
            let before = builder.size_in_bytes();
            let expected = builder.record_size(timestamp, key, value, headers);
            assert_eq!(builder.append(timestamp, key, value, headers), index as i32);
            assert_eq!(builder.size_in_bytes() - before, expected);
        }
        builder.close()
    }

    #[test]
    fn crc32c_known_answers() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c::crc32c(b""), 0);
    }

    #[test]
    fn empty_builder_closes_to_a_bare_header() {
        let builder = RecordBatchBuilder::new(0, 1_000);
        assert!(builder.is_empty());
        assert_eq!(builder.size_in_bytes(), RECORD_BATCH_OVERHEAD);
        let batch = builder.close();
        assert_eq!(batch.len(), RECORD_BATCH_OVERHEAD);
        let header = RecordBatchHeader::parse(&batch).unwrap();
        assert_eq!(header.record_count, 0);
        assert_eq!(header.last_offset_delta, -1);
        assert_eq!(header.max_timestamp, NO_TIMESTAMP);
        assert_eq!(header.batch_length, 49);
        assert_eq!(decode_records(&batch).unwrap(), vec![]);
    }

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
    fn round_trip_through_own_decoder() {
        let headers = [
            header("trace-id", Some(b"abc")),
            header("", Some(b"")),
            header("nothing", None),
        ];
        let records: &[TestRecord<'_>] = &[
            (1_000, Some(b"key-0"), Some(b"value-0"), &[]),
            (1_001, None, Some(b"value-1"), &headers),
            (1_005, Some(b""), None, &[]),
            (999, None, None, &headers[..1]),
        ];
        let batch = build(1_000, records);
        let header = RecordBatchHeader::parse(&batch).unwrap();
        assert_eq!(header.record_count, 4);
        assert_eq!(header.last_offset_delta, 3);
        assert_eq!(header.base_timestamp, 1_000);
        assert_eq!(header.max_timestamp, 1_005);

        let decoded = decode_records(&batch).unwrap();
        assert_eq!(decoded.len(), records.len());
        for (index, (record, &(timestamp, key, value, headers))) in
            decoded.iter().zip(records).enumerate()
        {
            assert_eq!(record.offset_delta, index as i32);
            assert_eq!(record.timestamp, timestamp);
            assert_eq!(record.key.as_deref(), key);
            assert_eq!(record.value.as_deref(), value);
            let expected: Vec<_> = headers
                .iter()
                .map(|h| (h.key.to_owned(), h.value.map(Bytes::copy_from_slice)))
                .collect();
            assert_eq!(record.headers, expected);
        }
    }

    #[test]
    fn timestamp_delta_edges() {
        let base = 1_700_000_000_000;
        let records: &[TestRecord<'_>] = &[
            (base, None, None, &[]),
            (base - 1, None, None, &[]),  // older than the first record
            (base - 65, None, None, &[]), // negative, two-byte delta
            (base + 63, None, None, &[]), // largest one-byte delta
            (base + 64, None, None, &[]), // smallest two-byte delta
            (0, None, None, &[]),         // far in the past
            (i64::MAX, None, None, &[]),  // delta near i64::MAX
            (base + 86_400_000, None, None, &[]), // one day later
        ];
        let batch = build(base, records);
        let header = RecordBatchHeader::parse(&batch).unwrap();
        assert_eq!(header.max_timestamp, i64::MAX);
        let decoded = decode_records(&batch).unwrap();
        let timestamps: Vec<i64> = decoded.iter().map(|r| r.timestamp).collect();
        let expected: Vec<i64> = records.iter().map(|r| r.0).collect();
        assert_eq!(timestamps, expected);
    }

    #[test]
    fn timestamp_deltas_that_overflow_wrap_back() {
        // i64::MIN - i64::MAX overflows; the wrapped delta still decodes to the same timestamp.
        let records: &[TestRecord<'_>] =
            &[(i64::MIN, None, None, &[]), (i64::MAX, None, None, &[])];
        let batch = build(i64::MAX, records);
        let decoded = decode_records(&batch).unwrap();
        assert_eq!(decoded[0].timestamp, i64::MIN);
        assert_eq!(decoded[1].timestamp, i64::MAX);
    }

    #[test]
    fn record_encoding_matches_the_spec() {
        // One record: timestamp delta -1, key "k", null value, one header ("h", null).
        let batch = build(10, &[(9, Some(b"k"), None, &[header("h", None)])]);
        let expected = [
            0x14, // record length 10 (zigzag 20)
            0x00, // attributes
            0x01, // timestamp delta -1
            0x00, // offset delta 0
            0x02, b'k', // key length 1, "k"
            0x01, // value length -1 (null)
            0x02, // one header
            0x02, b'h', // header key length 1, "h"
            0x01, // header value null
        ];
        assert_eq!(&batch[RECORD_BATCH_OVERHEAD..], &expected);
    }

    #[test]
    fn many_headers_and_long_fields() {
        let names: Vec<String> = (0..200).map(|i| format!("header-{i}")).collect();
        let big_value = vec![0xabu8; 70_000];
        let headers: Vec<Header<'_>> = names
            .iter()
            .enumerate()
            .map(|(i, name)| Header::new(name, (i % 3 != 0).then_some(&big_value[..i])))
            .collect();
        let batch = build(0, &[(0, Some(&big_value), Some(&big_value), &headers)]);
        let decoded = decode_records(&batch).unwrap();
        assert_eq!(decoded[0].headers.len(), 200);
        for (i, (key, value)) in decoded[0].headers.iter().enumerate() {
            assert_eq!(key, &names[i]);
            assert_eq!(value.as_deref(), headers[i].value);
        }
        assert_eq!(decoded[0].value.as_deref(), Some(&big_value[..]));
    }

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
    fn a_stamp_set_before_close_gives_the_bytes_of_a_stamp_written_after() {
        let records: &[TestRecord<'_>] = &[
            (5, Some(b"k"), Some(b"v"), &[]),
            (3, None, Some(b"value"), &[]),
            (9, Some(b"key"), None, &[]),
        ];
        for (pid, epoch, sequence, transactional) in [
            (42, 3, 100, true),
            (7, 0, 0, false),
            (i64::MAX, i16::MAX, i32::MAX, true),
        ] {
            let mut after = build(5, records);
            write_producer_state(&mut after, pid, epoch, sequence, transactional);
            let mut builder = RecordBatchBuilder::new(64, 5);
            for &(timestamp, key, value, headers) in records {
                builder.append(timestamp, key, value, headers);
            }
            // A stamp overwritten before close leaves no trace (the transactional bit included).
            builder.set_producer_state(1, 1, 1, !transactional);
            builder.set_producer_state(pid, epoch, sequence, transactional);
            let before = builder.close();
            assert_eq!(before, after);
            RecordBatchHeader::parse(&before).unwrap();
        }
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

    /// Replaces the records of a closed single-batch buffer and fixes up length and CRC, so
    /// the record-level checks are reached.
    fn with_records(count: i32, records: &[u8]) -> Vec<u8> {
        let mut batch = build(0, &[]).to_vec();
        batch.extend_from_slice(records);
        let length = (batch.len() - 12) as i32;
        batch[8..12].copy_from_slice(&length.to_be_bytes());
        batch[57..61].copy_from_slice(&count.to_be_bytes());
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        batch
    }

    #[test]
    fn decode_rejects_inconsistent_records() {
        // Length 6, then attributes, timestamp delta, offset delta, null key, null value and
        // no headers.
        let record = [0x0c, 0, 0, 0, 0x01, 0x01, 0x00];
        assert_eq!(decode_records(&with_records(1, &record)).unwrap().len(), 1);

        // Declared record count larger than the records present.
        assert!(matches!(
            decode_records(&with_records(2, &record)),
            Err(RecordBatchError::CorruptRecord { index: 1, .. })
        ));
        // Declared record count smaller than the records present.
        assert_eq!(
            decode_records(&with_records(0, &record)),
            Err(RecordBatchError::TrailingBytes(7))
        );
        // Record length longer than its fields.
        let mut long = record.to_vec();
        long[0] = 0x0e;
        long.push(0);
        assert!(matches!(
            decode_records(&with_records(1, &long)),
            Err(RecordBatchError::CorruptRecord { index: 0, .. })
        ));
        // Key length past the record.
        let mut key = record;
        key[4] = 0x10;
        assert!(matches!(
            decode_records(&with_records(1, &key)),
            Err(RecordBatchError::CorruptRecord { index: 0, .. })
        ));
        // Key length below -1.
        key[4] = 0x03;
        assert!(matches!(
            decode_records(&with_records(1, &key)),
            Err(RecordBatchError::CorruptRecord { index: 0, .. })
        ));
        // Header key that is not UTF-8.
        let utf8 = [0x12, 0, 0, 0, 0x01, 0x01, 0x02, 0x02, 0xff, 0x01];
        assert!(matches!(
            decode_records(&with_records(1, &utf8)),
            Err(RecordBatchError::CorruptRecord {
                reason: "header key is not UTF-8",
                ..
            })
        ));
        // Overlong varint inside a record.
        let varint = [0x0c, 0, 0xff, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            decode_records(&with_records(1, &varint)),
            Err(RecordBatchError::Varint(_))
        ));
    }

    #[test]
    fn a_batch_with_an_unknown_codec_is_an_error() {
        let mut batch = build(0, &[(0, None, Some(b"v"), &[])]).to_vec();
        batch[22] |= 5;
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            decode_records(&batch),
            Err(RecordBatchError::Decompress(DecompressError::UnknownCodec(
                5
            )))
        );
    }

    #[test]
    fn log_append_time_records_report_max_timestamp() {
        let mut batch = build(100, &[(100, None, None, &[]), (150, None, None, &[])]).to_vec();
        batch[22] |= 0x08;
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        let decoded = decode_records(&batch).unwrap();
        assert!(decoded.iter().all(|r| r.timestamp == 150));
    }

    #[test]
    fn split_batches_walks_an_area() {
        let first = build(0, &[(0, None, Some(b"a"), &[])]);
        let second = build(0, &[(0, None, Some(b"bb"), &[]), (0, None, None, &[])]);
        let mut area = first.to_vec();
        area.extend_from_slice(&second);

        let batches: Vec<_> = split_batches(&area).collect::<Result<_, _>>().unwrap();
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[0].1, &first[..]);
        assert_eq!(batches[1].1, &second[..]);
        assert_eq!(batches[1].0.record_count, 2);
        assert_eq!(split_batches(&[]).count(), 0);

        // A cut last batch is an error by default and a quiet stop when allowed.
        for cut in 1..second.len() {
            let partial = &area[..first.len() + cut];
            let results: Vec<_> = split_batches(partial).collect();
            assert_eq!(results.len(), 2);
            assert!(results[0].is_ok());
            assert!(matches!(
                results[1],
                Err(RecordBatchError::Truncated { .. })
            ));

            let mut lenient = split_batches(partial).allow_partial_trailing();
            assert!(lenient.next().unwrap().is_ok());
            assert!(lenient.next().is_none());
            assert_eq!(lenient.remaining().len(), cut);
        }
    }

    #[test]
    fn split_batches_stops_after_an_error() {
        let batch = build(0, &[(0, None, Some(b"a"), &[])]);
        let mut area = batch.to_vec();
        area.extend_from_slice(&batch);
        area[20] ^= 0xff; // first batch's CRC
        let mut batches = split_batches(&area);
        assert!(matches!(
            batches.next(),
            Some(Err(RecordBatchError::CrcMismatch { .. }))
        ));
        assert!(batches.next().is_none());

        // A corrupt length is reported even when partial batches are tolerated.
        let mut area = batch.to_vec();
        area[8..12].copy_from_slice(&3i32.to_be_bytes());
        let mut batches = split_batches(&area).allow_partial_trailing();
        assert_eq!(batches.next(), Some(Err(RecordBatchError::BadLength(3))));
    }

    #[test]
    fn record_size_matches_append_across_varint_boundaries() {
        // Lengths around the one/two/three byte varint boundaries, for fields and the record.
        let data = vec![7u8; 20_000];
        let mut builder = RecordBatchBuilder::new(0, 0);
        for len in [
            0usize, 1, 55, 56, 57, 63, 64, 65, 8_180, 8_191, 8_192, 8_193, 20_000,
        ] {
            let before = builder.size_in_bytes();
            let size = builder.record_size(len as i64, Some(&data[..len]), Some(&data[..len]), &[]);
            builder.append(len as i64, Some(&data[..len]), Some(&data[..len]), &[]);
            assert_eq!(builder.size_in_bytes() - before, size, "field length {len}");
        }
        let batch = builder.close();
        assert_eq!(decode_records(&batch).unwrap().len(), 13);
    }
}
