//! Reading records back out of a batch, decompressing them first when the batch is compressed.
//! Off the hot path (the reference broker, tests, tools), so records are decoded into owned
//! values; every length is bounds-checked and every allocation bounded by the bytes present,
//! since the batch may come from a hostile or corrupt peer.

use bytes::Bytes;

use crate::protocol::compression;
use crate::protocol::varint::{read_varint, read_varlong};

use super::{RecordBatchError, RecordBatchHeader, RECORDS_OFFSET};

/// The most bytes [`decode_records`] decompresses a batch's records to: a bound on the memory a
/// hostile or corrupt batch can make a reader spend. [`decode_records_with_limit`] takes another.
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 64 << 20;

/// Smallest encoded record: a one-byte length, attributes, timestamp delta, offset delta, null key,
/// null value and header count, one byte each. Bounds up-front allocation when decoding.
const MIN_RECORD_SIZE: usize = 7;

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
    use crate::protocol::compression::DecompressError;

    use super::super::test_support::{build, header, TestRecord};
    use super::super::Header;
    use super::*;

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
}
