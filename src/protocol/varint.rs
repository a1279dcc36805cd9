//! Zigzag varints as used by record batch v2.
//!
//! Record batch v2 encodes every per-record length, delta and count as a zigzag varint
//! (Protocol Buffers `sint32`/`sint64`): the signed value is mapped to an unsigned one so that
//! small magnitudes of either sign stay short (0 → 0, -1 → 1, 1 → 2, -2 → 3, ...), and the
//! unsigned value is written 7 bits at a time, least significant group first, with the high bit
//! of each byte set when another byte follows.
//!
//! Names follow Kafka's `ByteUtils` (`writeVarint`, `readVarlong`, `sizeOfVarint`, ...):
//! "varint" is the 32-bit form (at most 5 bytes), "varlong" the 64-bit form (at most 10 bytes).

use bytes::BufMut;

/// Longest encoding of an `i32`: ceil(32 / 7) bytes.
pub const MAX_VARINT_LEN: usize = 5;
/// Longest encoding of an `i64`: ceil(64 / 7) bytes.
pub const MAX_VARLONG_LEN: usize = 10;

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VarintError {
    /// The input ended while the continuation bit asked for another byte.
    #[error("varint truncated: input ended after {available} bytes")]
    Truncated {
        /// Bytes that were present, all with the continuation bit set.
        available: usize,
    },
    /// More bytes than the type can hold (5 for a varint, 10 for a varlong) had the
    /// continuation bit set. Kafka rejects these too (`ByteUtils.illegalVarintException`).
    #[error("varint longer than {max_len} bytes")]
    Overlong {
        /// The longest legal encoding for the type being read.
        max_len: usize,
    },
}

#[inline]
fn zigzag_i32(value: i32) -> u32 {
    ((value << 1) ^ (value >> 31)) as u32
}

#[inline]
fn zigzag_i64(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

#[inline]
fn unzigzag_u32(raw: u32) -> i32 {
    ((raw >> 1) as i32) ^ -((raw & 1) as i32)
}

#[inline]
fn unzigzag_u64(raw: u64) -> i64 {
    ((raw >> 1) as i64) ^ -((raw & 1) as i64)
}

/// Bytes needed for `raw` in unsigned LEB128: ceil(significant bits / 7), at least 1.
///
/// With `h` the index of the highest set bit (0 for 0, via `| 1`), `(9h + 73) / 64` equals
/// `ceil((h + 1) / 7)` for every `h` in 0..64; one multiply and a shift instead of a division,
/// which matters because every record measures about a dozen varints.
#[inline]
const fn unsigned_len(raw: u64) -> usize {
    let highest_bit = 63 - (raw | 1).leading_zeros() as usize;
    (highest_bit * 9 + 73) / 64
}

/// Encoded size of `value` as a zigzag varint, without encoding it.
///
/// Used for exact size accounting: a record's length prefix depends on its body size, so the
/// body is measured with these helpers before anything is written.
#[inline]
pub const fn varint_len(value: i32) -> usize {
    unsigned_len(((value << 1) ^ (value >> 31)) as u32 as u64)
}

/// Encoded size of `value` as a zigzag varlong, without encoding it.
#[inline]
pub const fn varlong_len(value: i64) -> usize {
    unsigned_len(((value << 1) ^ (value >> 63)) as u64)
}

/// Appends the unsigned LEB128 form of `raw`.
///
/// One `put_u8` per byte: `BytesMut` and `Vec<u8>` implement it as an inlined push, while a
/// `put_slice` of a few bytes costs a `memcpy` call, which dominated encoding small records.
#[inline]
fn write_unsigned(buf: &mut impl BufMut, mut raw: u64) {
    while raw >= 0x80 {
        buf.put_u8((raw as u8) | 0x80);
        raw >>= 7;
    }
    buf.put_u8(raw as u8);
}

/// Appends `value` as an unsigned varint (Kafka's `writeUnsignedVarint`, 1 to 5 bytes): the
/// lengths, counts and tagged-field counts of the flexible request versions.
#[inline]
pub fn write_unsigned_varint(buf: &mut impl BufMut, value: u32) {
    write_unsigned(buf, u64::from(value));
}

/// Encoded size of `value` as an unsigned varint, without encoding it.
#[inline]
pub const fn unsigned_varint_len(value: u32) -> usize {
    unsigned_len(value as u64)
}

/// Appends `value` as a zigzag varint (1 to 5 bytes).
#[inline]
pub fn write_varint(buf: &mut impl BufMut, value: i32) {
    write_unsigned(buf, u64::from(zigzag_i32(value)));
}

/// Appends `value` as a zigzag varlong (1 to 10 bytes).
#[inline]
pub fn write_varlong(buf: &mut impl BufMut, value: i64) {
    write_unsigned(buf, zigzag_i64(value));
}

/// Reads the unsigned LEB128 value at the start of `buf`, using at most `max_len` bytes.
///
/// Bits beyond 64 in the last allowed byte are dropped, as Kafka's `ByteUtils` drops them; a
/// zigzag encoder never sets them, so this only matters for hand-made input.
#[inline]
fn decode_unsigned(buf: &[u8], max_len: usize) -> Result<(u64, usize), VarintError> {
    let mut raw: u64 = 0;
    for (index, &byte) in buf.iter().take(max_len).enumerate() {
        raw |= u64::from(byte & 0x7f) << (7 * index);
        if byte & 0x80 == 0 {
            return Ok((raw, index + 1));
        }
    }
    if buf.len() >= max_len {
        Err(VarintError::Overlong { max_len })
    } else {
        Err(VarintError::Truncated {
            available: buf.len(),
        })
    }
}

/// Reads a zigzag varint from the start of `buf`; returns the value and the bytes it used.
///
/// As in Kafka, the fifth byte's bits above bit 31 of the unsigned form are ignored.
#[inline]
pub fn read_varint(buf: &[u8]) -> Result<(i32, usize), VarintError> {
    let (raw, used) = decode_unsigned(buf, MAX_VARINT_LEN)?;
    Ok((unzigzag_u32(raw as u32), used))
}

/// Reads a zigzag varlong from the start of `buf`; returns the value and the bytes it used.
#[inline]
pub fn read_varlong(buf: &[u8]) -> Result<(i64, usize), VarintError> {
    let (raw, used) = decode_unsigned(buf, MAX_VARLONG_LEN)?;
    Ok((unzigzag_u64(raw), used))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn encode_varint(value: i32) -> Vec<u8> {
        let mut buf = BytesMut::new();
        write_varint(&mut buf, value);
        buf.to_vec()
    }

    fn encode_varlong(value: i64) -> Vec<u8> {
        let mut buf = Vec::new();
        write_varlong(&mut buf, value);
        buf
    }

    #[test]
    fn varint_known_encodings() {
        // Zigzag maps 0, -1, 1, -2, 2, ... to 0, 1, 2, 3, 4, ...
        let cases: &[(i32, &[u8])] = &[
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (-2, &[0x03]),
            (63, &[0x7e]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
            (-65, &[0x81, 0x01]),
            (300, &[0xd8, 0x04]),
            (i32::MAX, &[0xfe, 0xff, 0xff, 0xff, 0x0f]),
            (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ];
        for &(value, expected) in cases {
            assert_eq!(encode_varint(value), expected, "encoding {value}");
            assert_eq!(varint_len(value), expected.len(), "length of {value}");
            assert_eq!(read_varint(expected), Ok((value, expected.len())));
        }
    }

    #[test]
    fn unsigned_varint_known_encodings() {
        let cases: &[(u32, &[u8])] = &[
            (0, &[0x00]),
            (1, &[0x01]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (300, &[0xac, 0x02]),
            (u32::MAX, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ];
        for &(value, expected) in cases {
            let mut buf = Vec::new();
            write_unsigned_varint(&mut buf, value);
            assert_eq!(buf, expected, "encoding {value}");
            assert_eq!(
                unsigned_varint_len(value),
                expected.len(),
                "length of {value}"
            );
        }
    }

    #[test]
    fn varlong_known_encodings() {
        let cases: &[(i64, &[u8])] = &[
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (63, &[0x7e]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
            (-65, &[0x81, 0x01]),
            (
                i64::MAX,
                &[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ),
            (
                i64::MIN,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ),
        ];
        for &(value, expected) in cases {
            assert_eq!(encode_varlong(value), expected, "encoding {value}");
            assert_eq!(varlong_len(value), expected.len(), "length of {value}");
            assert_eq!(read_varlong(expected), Ok((value, expected.len())));
        }
    }

    #[test]
    fn varint_length_boundaries() {
        // Each extra byte adds 7 bits of zigzag payload: 2^6, 2^13, 2^20, 2^27 are the first
        // positive values needing 2, 3, 4, 5 bytes.
        for (bytes, first) in [
            (2usize, 1i32 << 6),
            (3, 1 << 13),
            (4, 1 << 20),
            (5, 1 << 27),
        ] {
            assert_eq!(varint_len(first - 1), bytes - 1);
            assert_eq!(varint_len(first), bytes);
            assert_eq!(varint_len(-first), bytes - 1);
            assert_eq!(varint_len(-first - 1), bytes);
            assert_eq!(encode_varint(first).len(), bytes);
        }
        assert_eq!(varlong_len(1 << 62), 10);
        assert_eq!(varlong_len((1 << 62) - 1), 9);
        assert_eq!(varlong_len(-(1 << 62)), 9);
        assert_eq!(varlong_len(-(1 << 62) - 1), 10);
    }

    #[test]
    fn size_formula_matches_the_encoder_for_every_bit_length() {
        // The largest and smallest raw value of each bit length, through the real encoder.
        for bits in 1..=64u32 {
            let top = u64::MAX >> (64 - bits);
            let bottom = if bits == 1 { 0 } else { 1u64 << (bits - 1) };
            for raw in [top, bottom] {
                let mut buf = Vec::new();
                write_unsigned(&mut buf, raw);
                assert_eq!(unsigned_len(raw), buf.len(), "raw {raw:#x}");
                assert_eq!(buf.len() as u32, bits.div_ceil(7));
            }
        }
    }

    #[test]
    fn round_trip_over_a_spread_of_values() {
        let mut value: i64 = 1;
        for shift in 0..64 {
            for candidate in [
                value,
                value.wrapping_neg(),
                value.wrapping_sub(1),
                !value,
                value.wrapping_add(1),
            ] {
                let encoded = encode_varlong(candidate);
                assert_eq!(encoded.len(), varlong_len(candidate));
                assert_eq!(read_varlong(&encoded), Ok((candidate, encoded.len())));
                let narrow = candidate as i32;
                let encoded = encode_varint(narrow);
                assert_eq!(encoded.len(), varint_len(narrow));
                assert_eq!(read_varint(&encoded), Ok((narrow, encoded.len())));
            }
            value = 1i64.wrapping_shl(shift + 1);
        }
    }

    #[test]
    fn read_stops_at_the_first_complete_value() {
        let buf = [0x80, 0x01, 0x7f, 0xff];
        assert_eq!(read_varint(&buf), Ok((64, 2)));
        assert_eq!(read_varint(&buf[2..]), Ok((-64, 1)));
        assert_eq!(read_varlong(&buf), Ok((64, 2)));
    }

    #[test]
    fn truncated_input() {
        assert_eq!(
            read_varint(&[]),
            Err(VarintError::Truncated { available: 0 })
        );
        assert_eq!(
            read_varint(&[0x80]),
            Err(VarintError::Truncated { available: 1 })
        );
        assert_eq!(
            read_varint(&[0xff, 0xff, 0xff, 0xff]),
            Err(VarintError::Truncated { available: 4 })
        );
        assert_eq!(
            read_varlong(&[0xff; 9]),
            Err(VarintError::Truncated { available: 9 })
        );
        // Every strict prefix of a multi-byte encoding is truncated.
        let full = encode_varlong(i64::MIN);
        for cut in 0..full.len() {
            assert_eq!(
                read_varlong(&full[..cut]),
                Err(VarintError::Truncated { available: cut })
            );
        }
    }

    #[test]
    fn overlong_input() {
        assert_eq!(
            read_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),
            Err(VarintError::Overlong { max_len: 5 })
        );
        assert_eq!(
            read_varint(&[0xff; 5]),
            Err(VarintError::Overlong { max_len: 5 })
        );
        assert_eq!(
            read_varlong(&[0x80; 11]),
            Err(VarintError::Overlong { max_len: 10 })
        );
        assert_eq!(
            read_varlong(&[0xff; 10]),
            Err(VarintError::Overlong { max_len: 10 })
        );
    }

    #[test]
    fn padded_but_in_range_encodings_are_accepted() {
        // Kafka's reader accepts non-minimal encodings that fit the byte limit; so do we.
        assert_eq!(read_varint(&[0x82, 0x80, 0x80, 0x80, 0x00]), Ok((1, 5)));
        assert_eq!(read_varlong(&[0x81, 0x00]), Ok((-1, 2)));
    }
}
