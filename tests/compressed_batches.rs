//! Compressed record batches: the codec in the attributes, the header uncompressed, the records
//! compressed once when the batch closes, stamps that touch only the header, and a reader that
//! refuses corrupt or oversized compressed records with an error instead of a panic.
#![cfg(feature = "testkit")]

use kacrab::testkit::internals::protocol::compression::{Codec, DecompressError};
use kacrab::testkit::internals::protocol::record_batch::{
    decode_records, decode_records_with_limit, write_producer_state, Header, RecordBatchBuilder,
    RecordBatchError, RecordBatchHeader, RECORD_BATCH_OVERHEAD,
};

fn codecs() -> [Codec; 4] {
    [
        Codec::Gzip { level: -1 },
        Codec::Snappy,
        Codec::Lz4 { level: 9 },
        Codec::Zstd { level: 3 },
    ]
}

/// `count` records with redundant values, keys on the even ones and a header on every third.
fn build(codec: Codec, count: usize) -> (RecordBatchBuilder, Vec<Vec<u8>>) {
    let mut builder = RecordBatchBuilder::with_codec(1024, 1_000, codec);
    let values: Vec<Vec<u8>> = (0..count)
        .map(|i| format!("value {i} {}", "abc".repeat(i % 50)).into_bytes())
        .collect();
    for (i, value) in values.iter().enumerate() {
        let key = format!("key-{i}");
        let headers = [Header::new("h", Some(b"hv"))];
        builder.append(
            1_000 + i as i64,
            (i % 2 == 0).then_some(key.as_bytes()),
            Some(value),
            if i % 3 == 0 { &headers[..] } else { &[] },
        );
    }
    (builder, values)
}

/// The batch with its records section replaced, length and CRC fixed up, so the reader gets
/// past the CRC to the records.
fn with_section(batch: &[u8], section: &[u8]) -> Vec<u8> {
    let mut out = batch[..RECORD_BATCH_OVERHEAD].to_vec();
    out.extend_from_slice(section);
    let length = (out.len() - 12) as i32;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out
}

#[test]
fn every_codec_writes_its_id_and_reads_back_every_record() {
    for codec in codecs() {
        let (builder, values) = build(codec, 300);
        let uncompressed = builder.size_in_bytes();
        let batch = builder.close();
        let header = RecordBatchHeader::parse(&batch).unwrap();
        assert_eq!(header.compression(), codec.id(), "{codec:?}");
        assert_eq!(header.record_count, 300);
        assert_eq!(header.last_offset_delta, 299);
        assert_eq!(header.max_timestamp, 1_299);
        assert!(
            batch.len() < uncompressed / 2,
            "{codec:?}: {} of {uncompressed} bytes",
            batch.len()
        );
        let records = decode_records(&batch).unwrap();
        assert_eq!(records.len(), 300);
        for (i, record) in records.iter().enumerate() {
            assert_eq!(record.offset_delta, i as i32);
            assert_eq!(record.timestamp, 1_000 + i as i64);
            assert_eq!(record.value.as_deref(), Some(&values[i][..]));
            let key = format!("key-{i}");
            assert_eq!(
                record.key.as_deref(),
                (i % 2 == 0).then_some(key.as_bytes())
            );
            assert_eq!(record.headers.len(), usize::from(i % 3 == 0));
        }
    }
}

#[test]
fn a_compressed_batch_keeps_its_header_uncompressed() {
    for codec in codecs() {
        let (mut builder, _) = build(codec, 10);
        builder.set_producer_state(42, 7, 100, true);
        let batch = builder.close();
        let header = RecordBatchHeader::parse(&batch).unwrap();
        assert_eq!(
            (
                header.producer_id,
                header.producer_epoch,
                header.base_sequence
            ),
            (42, 7, 100)
        );
        assert!(header.is_transactional());
        assert_eq!(header.attributes, 0x10 | i16::from(codec.id()));
        assert_eq!(header.base_timestamp, 1_000);
    }
}

#[test]
fn a_stamp_before_close_gives_the_bytes_of_a_stamp_written_after_for_every_codec() {
    for codec in codecs() {
        let (mut before, _) = build(codec, 50);
        before.set_producer_state(9, 2, 33, false);
        let before = before.close();
        let (after, _) = build(codec, 50);
        let mut after = after.close();
        write_producer_state(&mut after, 9, 2, 33, false);
        assert_eq!(before, after, "{codec:?}");
    }
}

#[test]
fn a_restamp_rewrites_the_header_and_crc_but_not_the_compressed_records() {
    for codec in codecs() {
        let (mut builder, _) = build(codec, 50);
        builder.set_producer_state(9, 2, 33, true);
        let first = builder.close();
        let mut second = first.clone();
        write_producer_state(&mut second, 9, 3, 0, false);
        assert_eq!(
            first[RECORD_BATCH_OVERHEAD..],
            second[RECORD_BATCH_OVERHEAD..],
            "{codec:?}: records section changed"
        );
        let header = RecordBatchHeader::parse(&second).unwrap();
        assert_eq!((header.producer_epoch, header.base_sequence), (3, 0));
        assert_eq!(header.compression(), codec.id());
        assert!(!header.is_transactional());
        assert_eq!(decode_records(&second).unwrap().len(), 50);
    }
}

#[test]
fn compress_before_close_ends_appending_and_gives_the_final_size() {
    for codec in codecs() {
        let (mut builder, _) = build(codec, 100);
        let uncompressed = builder.uncompressed_records_size();
        builder.compress();
        let size = builder.size_in_bytes();
        assert!(size < RECORD_BATCH_OVERHEAD + uncompressed);
        let ratio = builder.compression_ratio().unwrap();
        assert_eq!(ratio, size as f32 / uncompressed as f32);
        assert_eq!(builder.uncompressed_records_size(), uncompressed);
        let batch = builder.close();
        assert_eq!(batch.len(), size);
        assert_eq!(decode_records(&batch).unwrap().len(), 100);
    }
    let (builder, _) = build(Codec::None, 3);
    assert_eq!(builder.compression_ratio(), None);
}

#[test]
fn corrupt_compressed_records_are_a_readers_error_for_every_codec() {
    for codec in codecs() {
        let (builder, _) = build(codec, 200);
        let batch = builder.close();
        let section = &batch[RECORD_BATCH_OVERHEAD..];

        // Cut short: never the records.
        for cut in [0, 1, 5, section.len() / 2, section.len() - 1] {
            let bad = with_section(&batch, &section[..cut]);
            assert!(
                matches!(
                    decode_records(&bad),
                    Err(RecordBatchError::Decompress(_))
                        | Err(RecordBatchError::CorruptRecord { .. })
                ),
                "{codec:?} cut at {cut}: {:?}",
                decode_records(&bad).map(|r| r.len())
            );
        }
        // Garbage in place of the stream.
        let bad = with_section(&batch, &[0xa5; 100]);
        assert!(
            matches!(
                decode_records(&bad),
                Err(RecordBatchError::Decompress(
                    DecompressError::Corrupt { .. }
                ))
            ),
            "{codec:?}: {:?}",
            decode_records(&bad).map(|r| r.len())
        );
        // Any flipped byte: an error or other records, never a panic.
        for at in 0..section.len() {
            let mut flipped = section.to_vec();
            flipped[at] ^= 0x41;
            let bad = with_section(&batch, &flipped);
            let _ = decode_records(&bad);
        }
    }
}

#[test]
fn the_right_stream_behind_a_wrong_record_count_is_an_error() {
    for codec in codecs() {
        let (builder, _) = build(codec, 20);
        let mut batch = builder.close().to_vec();
        batch[57..61].copy_from_slice(&21i32.to_be_bytes());
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            decode_records(&batch),
            Err(RecordBatchError::CorruptRecord { index: 20, .. })
        ));
        batch[57..61].copy_from_slice(&19i32.to_be_bytes());
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            decode_records(&batch),
            Err(RecordBatchError::TrailingBytes(_))
        ));
    }
}

#[test]
fn records_that_decompress_past_the_limit_are_refused() {
    for codec in codecs() {
        let mut builder = RecordBatchBuilder::with_codec(1024, 0, codec);
        let zeros = vec![0u8; 1 << 20];
        builder.append(0, None, Some(&zeros), &[]);
        let uncompressed = builder.uncompressed_records_size();
        let batch = builder.close();
        assert!(batch.len() < 64 << 10, "{codec:?}: {}", batch.len());
        assert_eq!(
            decode_records_with_limit(&batch, uncompressed)
                .unwrap()
                .len(),
            1
        );
        assert!(
            matches!(
                decode_records_with_limit(&batch, uncompressed - 1),
                Err(RecordBatchError::Decompress(DecompressError::TooLarge { limit, .. }))
                    if limit == uncompressed - 1
            ),
            "{codec:?}"
        );
    }
}
