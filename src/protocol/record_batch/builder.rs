//! The encoder: [`RecordBatchBuilder`] writes a batch's header and records into one buffer,
//! measuring each record first so the caller can check `batch.size` and `max.request.size`
//! before it appends, and compresses the records once when the batch stops taking records.
//!
//! Record layout and size accounting live together here: [`RecordBatchBuilder::measure`] and
//! `append` must agree byte for byte (a debug assertion checks it on every append), which is why
//! the size helpers and the writer share this file.

use bytes::{BufMut, BytesMut};

use crate::protocol::compression::Codec;
use crate::protocol::varint::{varint_len, varlong_len, write_varint, write_varlong};

use super::rewrite::stamp_producer_fields;
use super::{
    get_i16, set_bytes, ATTRIBUTES_OFFSET, COMPRESSION_CODEC_MASK, CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET, LENGTH_OFFSET, LOG_OVERHEAD, MAGIC_V2, MAX_TIMESTAMP_OFFSET,
    NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP,
    RECORDS_COUNT_OFFSET, RECORDS_OFFSET, RECORD_BATCH_OVERHEAD,
};

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
/// [`write_producer_state`](super::write_producer_state) on a closed batch.
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
    /// [`write_producer_state`](super::write_producer_state) on the closed batch, without a second
    /// pass over the records.
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

    /// Bytes the builder's buffer holds allocated (its capacity), written or not.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
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
        let records = self.buf.len().saturating_sub(RECORDS_OFFSET);
        let out = BytesMut::with_capacity(RECORD_BATCH_OVERHEAD + records / 2 + 64);
        drop(self.compress_into(out));
    }

    /// [`compress`](Self::compress) into `out` (an empty buffer, say a pooled one), returning
    /// the buffer the uncompressed records were in, for reuse; `None` (and `out` dropped) when
    /// there is nothing to compress.
    pub fn compress_into(&mut self, mut out: BytesMut) -> Option<BytesMut> {
        if self.codec == Codec::None || self.compressed_from.is_some() {
            return None;
        }
        out.clear();
        let records = &self.buf[RECORDS_OFFSET..];
        out.extend_from_slice(&self.buf[..RECORDS_OFFSET]);
        self.codec.compress_into(records, &mut out);
        let attributes = (get_i16(&out, ATTRIBUTES_OFFSET) & !COMPRESSION_CODEC_MASK)
            | i16::from(self.codec.id());
        set_bytes(&mut out, ATTRIBUTES_OFFSET, attributes.to_be_bytes());
        self.compressed_from = Some(records.len());
        Some(std::mem::replace(&mut self.buf, out))
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

#[cfg(test)]
mod tests {
    use super::super::test_support::{build, header, TestRecord};
    use super::super::{decode_records, write_producer_state, RecordBatchHeader};
    use super::*;

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
