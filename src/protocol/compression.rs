//! The record batch codecs (`compression.type`): the bytes Java's producer writes for the
//! records section of a compressed v2 batch, and bounded readers for all four.
//!
//! Formats, as Kafka's `CompressionType` wraps the records section:
//! - gzip (1): a gzip stream (RFC 1952), as `GZIPOutputStream` writes it. Read as a sequence of
//!   gzip members, as `GZIPInputStream` does.
//! - snappy (2): snappy-java's stream framing (`SnappyOutputStream`): the 8-byte magic
//!   `\x82SNAPPY\0`, version 1 and compatible version 1 (big-endian i32), then per block of at
//!   most 32 KiB input a big-endian i32 length and a raw snappy block. The reader also takes a
//!   bare raw snappy block, which snappy-java's `SnappyInputStream` and librdkafka both accept
//!   (librdkafka's producer writes that form).
//! - lz4 (3): the LZ4 frame format as Kafka's `Lz4BlockOutputStream` writes it for magic 2:
//!   64 KiB independent blocks, no block or content checksum, no content size, and the frame
//!   descriptor checksum over the descriptor alone (the corrected checksum of KIP-57).
//! - zstd (4): one zstd frame.
//!
//! Levels follow Java's `compression.*.level` keys. lz4: the pure-Rust encoder has only LZ4's
//! fast compressor, which is what Java uses at its default level 9; Java switches to the
//! high-compression encoder at other levels, kacrab keeps the fast one (the frames are valid
//! LZ4 either way, only the ratio differs).

use std::cell::RefCell;
use std::io::{self, Read, Write};

use bytes::{BufMut, BytesMut};

/// Codec ids of attribute bits 0-2.
pub const CODEC_NONE: u8 = 0;
pub const CODEC_GZIP: u8 = 1;
pub const CODEC_SNAPPY: u8 = 2;
pub const CODEC_LZ4: u8 = 3;
pub const CODEC_ZSTD: u8 = 4;

/// `compression.gzip.level`: Java's default (`Deflater.DEFAULT_COMPRESSION`, level 6).
pub const GZIP_DEFAULT_LEVEL: i32 = -1;
/// `compression.gzip.level` range besides -1.
pub const GZIP_MIN_LEVEL: i32 = 1;
pub const GZIP_MAX_LEVEL: i32 = 9;
/// `compression.lz4.level`: Java's range and default.
pub const LZ4_MIN_LEVEL: i32 = 1;
pub const LZ4_MAX_LEVEL: i32 = 17;
pub const LZ4_DEFAULT_LEVEL: i32 = 9;
/// `compression.zstd.level`: Java's range (zstd-jni's `minCompressionLevel`, which is
/// `-(1 << 17)`, to `maxCompressionLevel`) and default.
pub const ZSTD_MIN_LEVEL: i32 = -(1 << 17);
pub const ZSTD_MAX_LEVEL: i32 = 22;
pub const ZSTD_DEFAULT_LEVEL: i32 = 3;

/// snappy-java's stream header: magic, version 1, compatible version 1.
const SNAPPY_JAVA_HEADER: [u8; 16] = [
    0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
];
/// snappy-java's default block size (`SnappyOutputStream`), which Kafka keeps.
const SNAPPY_JAVA_BLOCK_SIZE: usize = 32 * 1024;

/// A codec with its level: what the producer compresses each batch's records with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Codec {
    /// Records written as they are.
    #[default]
    None,
    /// gzip (`compression.gzip.level`).
    Gzip {
        /// -1 (zlib's default, 6) or 1..=9.
        level: i32,
    },
    /// Snappy, in snappy-java's stream framing, as Kafka writes it; it has no level.
    Snappy,
    /// LZ4 frames (`compression.lz4.level`).
    Lz4 {
        /// 1..=17; LZ4's fast compressor at every level.
        level: i32,
    },
    /// Zstandard (`compression.zstd.level`).
    Zstd {
        /// -131072..=22.
        level: i32,
    },
}

impl Codec {
    /// The id in attribute bits 0-2.
    pub fn id(self) -> u8 {
        match self {
            Codec::None => CODEC_NONE,
            Codec::Gzip { .. } => CODEC_GZIP,
            Codec::Snappy => CODEC_SNAPPY,
            Codec::Lz4 { .. } => CODEC_LZ4,
            Codec::Zstd { .. } => CODEC_ZSTD,
        }
    }

    /// The codec with Java's default level.
    pub fn with_default_level(id: u8) -> Option<Codec> {
        Some(match id {
            CODEC_NONE => Codec::None,
            CODEC_GZIP => Codec::Gzip {
                level: GZIP_DEFAULT_LEVEL,
            },
            CODEC_SNAPPY => Codec::Snappy,
            CODEC_LZ4 => Codec::Lz4 {
                level: LZ4_DEFAULT_LEVEL,
            },
            CODEC_ZSTD => Codec::Zstd {
                level: ZSTD_DEFAULT_LEVEL,
            },
            _ => return None,
        })
    }

    /// Appends `input` compressed to `out`. `Codec::None` copies it.
    ///
    /// Levels must be in the ranges above (the configuration checks them).
    pub fn compress_into(self, input: &[u8], out: &mut BytesMut) {
        // Writes into memory cannot fail; an encoder error here is a bug (e.g. an unchecked
        // level), not bad input.
        const INFALLIBLE: &str = "compressing into memory cannot fail";
        match self {
            Codec::None => out.extend_from_slice(input),
            Codec::Gzip { level } => {
                let level = if level == GZIP_DEFAULT_LEVEL {
                    flate2::Compression::default()
                } else {
                    flate2::Compression::new(level.clamp(GZIP_MIN_LEVEL, GZIP_MAX_LEVEL) as u32)
                };
                let mut encoder = flate2::write::GzEncoder::new(out.writer(), level);
                encoder.write_all(input).expect(INFALLIBLE);
                encoder.finish().expect(INFALLIBLE);
            }
            Codec::Snappy => snappy_java_compress(input, out),
            Codec::Lz4 { .. } => {
                let info = lz4_flex::frame::FrameInfo::new()
                    .block_size(lz4_flex::frame::BlockSize::Max64KB)
                    .block_mode(lz4_flex::frame::BlockMode::Independent)
                    .block_checksums(false)
                    .content_checksum(false);
                let mut encoder =
                    lz4_flex::frame::FrameEncoder::with_frame_info(info, out.writer());
                encoder.write_all(input).expect(INFALLIBLE);
                encoder.finish().expect(INFALLIBLE);
            }
            Codec::Zstd { level } => zstd_compress(input, level, out),
        }
    }
}

fn snappy_java_compress(input: &[u8], out: &mut BytesMut) {
    out.extend_from_slice(&SNAPPY_JAVA_HEADER);
    let mut encoder = snap::raw::Encoder::new();
    let mut block = vec![0u8; snap::raw::max_compress_len(SNAPPY_JAVA_BLOCK_SIZE)];
    for chunk in input.chunks(SNAPPY_JAVA_BLOCK_SIZE) {
        let len = encoder
            .compress(chunk, &mut block)
            .expect("a 32 KiB block fits its maximum compressed length");
        // At most `max_compress_len(32 KiB)`, far below i32::MAX.
        out.put_i32(len as i32);
        out.extend_from_slice(&block[..len]);
    }
}

thread_local! {
    /// One zstd compression context per thread (per shard), reused across batches: a context
    /// is far larger than a small batch, so allocating one per batch would dominate.
    static ZSTD_CONTEXT: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(None) };
}

fn zstd_compress(input: &[u8], level: i32, out: &mut BytesMut) {
    ZSTD_CONTEXT.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.as_ref().is_none_or(|(l, _)| *l != level) {
            let compressor = zstd::bulk::Compressor::new(level)
                .expect("zstd accepts every level in Java's range");
            *cell = Some((level, compressor));
        }
        let (_, compressor) = cell.as_mut().expect("set above");
        let start = out.len();
        let bound = zstd::zstd_safe::compress_bound(input.len());
        out.resize(start + bound, 0);
        let written = compressor
            .compress_to_buffer(input, &mut out[start..])
            .expect("the buffer holds zstd's compress bound");
        out.truncate(start + written);
    });
}

/// Why a compressed records section could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecompressError {
    /// Attribute bits 0-2 hold 5, 6 or 7.
    #[error("unknown compression codec {0}")]
    UnknownCodec(u8),
    /// The bytes are not a valid stream of the codec.
    #[error("corrupt {codec} data: {reason}")]
    Corrupt { codec: &'static str, reason: String },
    /// The records decompress to more than the reader's limit.
    #[error("{codec} data decompresses to more than {limit} bytes")]
    TooLarge { codec: &'static str, limit: usize },
}

/// The codec's name as `compression.type` spells it.
pub fn codec_name(id: u8) -> &'static str {
    match id {
        CODEC_NONE => "none",
        CODEC_GZIP => "gzip",
        CODEC_SNAPPY => "snappy",
        CODEC_LZ4 => "lz4",
        CODEC_ZSTD => "zstd",
        _ => "unknown",
    }
}

/// Decompresses a records section compressed with codec `id`, refusing output beyond `limit`
/// bytes (the work and memory spent are bounded by `limit` plus a codec's block, whatever the
/// input claims). Never panics on corrupt input.
pub fn decompress(id: u8, input: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    let codec = codec_name(id);
    let corrupt = |e: &dyn std::fmt::Display| DecompressError::Corrupt {
        codec,
        reason: e.to_string(),
    };
    match id {
        CODEC_NONE => {
            if input.len() > limit {
                return Err(DecompressError::TooLarge { codec, limit });
            }
            Ok(input.to_vec())
        }
        CODEC_GZIP => read_bounded(flate2::read::MultiGzDecoder::new(input), codec, limit),
        CODEC_SNAPPY => snappy_java_decompress(input, limit),
        CODEC_LZ4 => {
            check_lz4_frame_layout(input)?;
            read_bounded(lz4_flex::frame::FrameDecoder::new(input), codec, limit)
        }
        CODEC_ZSTD => {
            let decoder =
                zstd::stream::read::Decoder::with_buffer(input).map_err(|e| corrupt(&e))?;
            read_bounded(decoder, codec, limit)
        }
        other => Err(DecompressError::UnknownCodec(other)),
    }
}

/// Walks the block headers of the one LZ4 frame `input` must be, up to its end mark (and
/// content checksum): the decoder takes a stream that stops at a block boundary, or inside the
/// end mark, as finished, so a frame cut there would otherwise read as whole.
fn check_lz4_frame_layout(input: &[u8]) -> Result<(), DecompressError> {
    const FLG_OFFSET: usize = 4;
    const CONTENT_CHECKSUM: u8 = 0x04;
    const CONTENT_SIZE: u8 = 0x08;
    const BLOCK_CHECKSUM: u8 = 0x10;
    const DICTIONARY_ID: u8 = 0x01;
    let corrupt = |reason: &str| DecompressError::Corrupt {
        codec: "lz4",
        reason: reason.to_string(),
    };
    let Some(&flg) = input.get(FLG_OFFSET) else {
        return Err(corrupt("frame header cut short"));
    };
    let flag = |bit: u8, size: usize| if flg & bit != 0 { size } else { 0 };
    // Magic, FLG, BD, the optional content size and dictionary id, the header checksum.
    let mut at = 4 + 2 + flag(CONTENT_SIZE, 8) + flag(DICTIONARY_ID, 4) + 1;
    loop {
        let Some(info) = input.get(at..at + 4) else {
            return Err(corrupt("frame ends before its end mark"));
        };
        let info = u32::from_le_bytes([info[0], info[1], info[2], info[3]]);
        at += 4;
        if info == 0 {
            break;
        }
        let size = (info & 0x7fff_ffff) as usize;
        at = at
            .checked_add(size + flag(BLOCK_CHECKSUM, 4))
            .filter(|&end| end <= input.len())
            .ok_or_else(|| corrupt("block runs past the data"))?;
    }
    if at + flag(CONTENT_CHECKSUM, 4) != input.len() {
        return Err(corrupt("bytes after the frame's end"));
    }
    Ok(())
}

/// Reads a decoder to its end, at most `limit` bytes.
fn read_bounded(
    reader: impl Read,
    codec: &'static str,
    limit: usize,
) -> Result<Vec<u8>, DecompressError> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    match reader.take(cap).read_to_end(&mut out) {
        Ok(_) if out.len() > limit => Err(DecompressError::TooLarge { codec, limit }),
        Ok(_) => Ok(out),
        Err(e) => Err(DecompressError::Corrupt {
            codec,
            reason: io_reason(&e),
        }),
    }
}

fn io_reason(e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        "stream ends early".to_string()
    } else {
        e.to_string()
    }
}

fn snappy_java_decompress(input: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    const CODEC: &str = "snappy";
    let corrupt = |reason: String| DecompressError::Corrupt {
        codec: CODEC,
        reason,
    };
    let too_large = DecompressError::TooLarge {
        codec: CODEC,
        limit,
    };
    let mut decoder = snap::raw::Decoder::new();
    let mut out = Vec::new();
    let mut block = |bytes: &[u8], out: &mut Vec<u8>| -> Result<(), DecompressError> {
        let len = snap::raw::decompress_len(bytes).map_err(|e| corrupt(e.to_string()))?;
        if len > limit - out.len() {
            return Err(too_large.clone());
        }
        let start = out.len();
        out.resize(start + len, 0);
        decoder
            .decompress(bytes, &mut out[start..])
            .map_err(|e| corrupt(e.to_string()))?;
        Ok(())
    };
    // snappy-java checks the magic only (its version fields are informational).
    if !input.starts_with(&SNAPPY_JAVA_HEADER[..8]) {
        block(input, &mut out)?;
        return Ok(out);
    }
    let Some(mut rest) = input.get(SNAPPY_JAVA_HEADER.len()..) else {
        return Err(corrupt("stream header cut short".to_string()));
    };
    while !rest.is_empty() {
        let Some((len, after)) = rest.split_first_chunk::<4>() else {
            return Err(corrupt("block length cut short".to_string()));
        };
        let len = i32::from_be_bytes(*len);
        let len = usize::try_from(len)
            .ok()
            .filter(|&len| len <= after.len())
            .ok_or_else(|| corrupt(format!("block length {len} runs past the data")))?;
        let (bytes, after) = after.split_at(len);
        block(bytes, &mut out)?;
        rest = after;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codecs() -> [Codec; 4] {
        [
            Codec::Gzip {
                level: GZIP_DEFAULT_LEVEL,
            },
            Codec::Snappy,
            Codec::Lz4 {
                level: LZ4_DEFAULT_LEVEL,
            },
            Codec::Zstd {
                level: ZSTD_DEFAULT_LEVEL,
            },
        ]
    }

    /// Redundant but not constant input, longer than every codec's block.
    fn sample(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i % 251) as u8 ^ (i / 1000) as u8)
            .collect()
    }

    fn compress(codec: Codec, input: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        codec.compress_into(input, &mut out);
        out.to_vec()
    }

    #[test]
    fn every_codec_round_trips_empty_small_and_multi_block_input() {
        for codec in codecs() {
            for len in [0, 1, 100, 32 * 1024, 32 * 1024 + 1, 200_000] {
                let input = sample(len);
                let compressed = compress(codec, &input);
                let back = decompress(codec.id(), &compressed, len).unwrap();
                assert!(back == input, "{codec:?} length {len}");
            }
        }
    }

    #[test]
    fn every_gzip_and_zstd_level_in_javas_range_round_trips() {
        let input = sample(10_000);
        for level in [-1, 1, 5, 9] {
            let codec = Codec::Gzip { level };
            assert_eq!(
                decompress(1, &compress(codec, &input), 10_000).unwrap(),
                input
            );
        }
        for level in [ZSTD_MIN_LEVEL, -5, 1, 3, 19, ZSTD_MAX_LEVEL] {
            let codec = Codec::Zstd { level };
            assert_eq!(
                decompress(4, &compress(codec, &input), 10_000).unwrap(),
                input
            );
        }
    }

    #[test]
    fn snappy_is_written_in_snappy_javas_framing() {
        let input = sample(40_000);
        let out = compress(Codec::Snappy, &input);
        assert_eq!(out[..16], SNAPPY_JAVA_HEADER);
        // Two blocks: 32 KiB and the rest, each behind its big-endian length.
        let first = i32::from_be_bytes(out[16..20].try_into().unwrap()) as usize;
        let block = &out[20..20 + first];
        assert_eq!(snap::raw::decompress_len(block).unwrap(), 32 * 1024);
        let second_at = 20 + first;
        let second = i32::from_be_bytes(out[second_at..second_at + 4].try_into().unwrap()) as usize;
        assert_eq!(second_at + 4 + second, out.len());
    }

    #[test]
    fn a_bare_snappy_block_is_read_too() {
        let input = sample(5_000);
        let raw = snap::raw::Encoder::new().compress_vec(&input).unwrap();
        assert_eq!(decompress(CODEC_SNAPPY, &raw, 5_000).unwrap(), input);
    }

    #[test]
    fn lz4_frames_carry_kafkas_descriptor() {
        let out = compress(
            Codec::Lz4 {
                level: LZ4_DEFAULT_LEVEL,
            },
            b"kafka",
        );
        assert_eq!(out[..4], 0x184D_2204u32.to_le_bytes());
        // FLG: version 01, independent blocks, no checksums, no content size.
        assert_eq!(out[4], 0b0110_0000);
        // BD: 64 KiB blocks.
        assert_eq!(out[5], 0x40);
        // Header checksum over the descriptor only (KIP-57): second byte of its xxhash32.
        let hash = xxhash32(&out[4..6]);
        assert_eq!(out[6], (hash >> 8) as u8);
        // Ends with the zero end mark and no content checksum.
        assert_eq!(out[out.len() - 4..], [0, 0, 0, 0]);
    }

    /// xxHash32 with seed 0, for the one descriptor check above.
    fn xxhash32(input: &[u8]) -> u32 {
        const P1: u32 = 2_654_435_761;
        const P2: u32 = 2_246_822_519;
        const P3: u32 = 3_266_489_917;
        const P5: u32 = 374_761_393;
        assert!(input.len() < 4);
        let mut h = P5.wrapping_add(input.len() as u32);
        for &byte in input {
            h = h.wrapping_add(u32::from(byte).wrapping_mul(P5));
            h = h.rotate_left(11).wrapping_mul(P1);
        }
        h ^= h >> 15;
        h = h.wrapping_mul(P2);
        h ^= h >> 13;
        h = h.wrapping_mul(P3);
        h ^= h >> 16;
        h
    }

    #[test]
    fn output_beyond_the_limit_is_refused() {
        let input = vec![0u8; 100_000];
        for codec in codecs() {
            let compressed = compress(codec, &input);
            assert!(decompress(codec.id(), &compressed, 100_000).is_ok());
            assert_eq!(
                decompress(codec.id(), &compressed, 99_999),
                Err(DecompressError::TooLarge {
                    codec: codec_name(codec.id()),
                    limit: 99_999
                }),
                "{codec:?}"
            );
        }
    }

    #[test]
    fn corrupt_input_is_an_error_for_every_codec() {
        let input = sample(70_000);
        for codec in codecs() {
            let good = compress(codec, &input);
            // Cut at every length up to a few hundred bytes, then coarser.
            let cuts = (0..good.len().min(300)).chain((300..good.len()).step_by(97));
            for cut in cuts {
                assert!(
                    decompress(codec.id(), &good[..cut], 1 << 20) != Ok(input.clone()),
                    "{codec:?} cut at {cut}"
                );
            }
            // Flipped bytes: an error or, where the codec has no checksum, other bytes; never
            // a panic.
            for at in (0..good.len()).step_by(7) {
                let mut bad = good.clone();
                bad[at] ^= 0x5a;
                let _ = decompress(codec.id(), &bad, 1 << 20);
            }
            // Garbage of every codec's flavour.
            for garbage in [&[0xffu8; 64][..], &[0u8; 3][..], &SNAPPY_JAVA_HEADER[..]] {
                let _ = decompress(codec.id(), garbage, 1 << 20);
            }
        }
        assert!(matches!(
            decompress(CODEC_GZIP, b"not gzip", 1 << 20),
            Err(DecompressError::Corrupt { codec: "gzip", .. })
        ));
        assert!(matches!(
            decompress(CODEC_LZ4, b"not lz4 at all", 1 << 20),
            Err(DecompressError::Corrupt { codec: "lz4", .. })
        ));
        assert!(matches!(
            decompress(CODEC_ZSTD, b"not zstd at all", 1 << 20),
            Err(DecompressError::Corrupt { codec: "zstd", .. })
        ));
        assert!(matches!(
            decompress(CODEC_SNAPPY, &SNAPPY_JAVA_HEADER[..12], 1 << 20),
            Err(DecompressError::Corrupt {
                codec: "snappy",
                ..
            })
        ));
        assert_eq!(
            decompress(5, b"", 1 << 20),
            Err(DecompressError::UnknownCodec(5))
        );
    }
}
