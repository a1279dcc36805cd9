//! Bounded decoding of broker responses.
//!
//! Every response the producer reads is decoded here, by our own decoders (one file per API,
//! `*_response.rs` in this module), into the `kafka-protocol` message types the engine uses;
//! `kafka-protocol` still encodes every request. Its decoders cannot be trusted with a broker's
//! bytes: in 0.18 an array (`INT32` count or compact `UNSIGNED_VARINT` count + 1) is read with
//! `Vec::with_capacity(count)` before a single element is read, so a well-framed answer of a
//! few bytes claiming 2^31 elements asks the allocator for hundreds of gigabytes, and the
//! allocation failure aborts the process: no error, no unwinding, the embedding service ends.
//! (Its strings and bytes read into `String`/`Vec<u8>` do the same with `vec![0; length]`;
//! those read into `StrBytes`/`Bytes`, the types of every response field kacrab reads, check
//! the remaining length first, and its tagged fields are read one by one.) A guard in front of
//! it would have to walk each answer by its per-version schema to find the array counts, which
//! is most of a decoder, and would then parse every answer twice; a `[patch]` of the crate would
//! mean carrying a fork of it. So the decoders are ours.
//!
//! Invariants of [`Reader`], which every decoder reads through:
//! - every length and count is checked against the bytes that remain before it is used: a
//!   string or tagged field longer than what remains, or an array whose count times the least
//!   wire size of one element exceeds what remains, is a [`DecodeError`] before anything is
//!   allocated for it;
//! - an array's vector is preallocated for at most [`PREALLOCATED_ELEMENTS`] elements and then
//!   grows only with elements actually decoded, so memory follows the bytes received, never a
//!   count;
//! - every loop consumes at least one byte per turn, so decoding ends within the frame's size;
//! - nothing panics: any shortfall is a typed error, which closes the connection.
//!
//! For a valid answer the result equals `kafka-protocol`'s decode of the same bytes (fields
//! absent at a version keep `kafka-protocol`'s defaults) and re-encodes to the same bytes; each
//! decoder's tests check this for every version kacrab negotiates. Deliberate differences, all
//! on input `kafka-protocol` never writes: a known tagged field is read inside the size it
//! declares (`kafka-protocol` reads it from the rest of the message and ignores the size), so a
//! lying size cannot shift what follows; a tag not defined at the version is kept as an unknown
//! field instead of failing the answer; an `UNSIGNED_VARINT` of more than 5 bytes or above
//! 2^32 - 1 is refused instead of cut short.

use std::collections::BTreeMap;

use bytes::{Buf, Bytes};
use kafka_protocol::protocol::StrBytes;

/// How many elements an array's vector is given room for before any is decoded. Larger arrays
/// grow as their elements arrive.
pub const PREALLOCATED_ELEMENTS: usize = 256;

/// Why a response body could not be decoded. `what` names the field (Kafka's schema names, in
/// snake_case) being read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{what}: {needed} bytes needed, {remaining} remain")]
    Short {
        what: &'static str,
        needed: usize,
        remaining: usize,
    },
    #[error(
        "{what}: {count} elements of at least {min_size} bytes claimed, {remaining} bytes remain"
    )]
    CountTooLarge {
        what: &'static str,
        count: u64,
        min_size: usize,
        remaining: usize,
    },
    #[error("{what}: null where the schema allows none")]
    Null { what: &'static str },
    #[error("{what}: invalid length {length}")]
    InvalidLength { what: &'static str, length: i64 },
    #[error("{what}: unsigned varint longer than 5 bytes or above 2^32 - 1")]
    Varint { what: &'static str },
    #[error("{what}: not UTF-8")]
    NotUtf8 { what: &'static str },
    #[error("version {version} is outside the decoder's v{min}..=v{max}")]
    Version { version: i16, min: i16, max: i16 },
}

pub type DecodeResult<T> = Result<T, DecodeError>;

/// A response body decoded by our own bounded decoder.
pub trait ResponseBody: Sized {
    /// The versions the decoder reads (kacrab's supported range of the API).
    const VERSIONS: (i16, i16);
    /// The first version in the flexible (KIP-482) encoding: compact strings and arrays,
    /// tagged fields.
    const FIRST_FLEXIBLE: i16;

    /// Decodes the body (header excluded) at `version`, already checked to be in
    /// [`Self::VERSIONS`].
    fn decode_body(r: &mut Reader, version: i16) -> DecodeResult<Self>;

    /// The response header version: 1 (correlation id and tagged fields) for flexible
    /// versions, else 0. ApiVersions overrides it: its answers always have a v0 header.
    fn header_version(version: i16) -> i16 {
        i16::from(version >= Self::FIRST_FLEXIBLE)
    }

    /// Decodes a body at `version`, checking the version first.
    fn decode_versioned(body: Bytes, version: i16) -> DecodeResult<Self> {
        let (min, max) = Self::VERSIONS;
        if !(min..=max).contains(&version) {
            return Err(DecodeError::Version { version, min, max });
        }
        let mut r = Reader::new(body, version >= Self::FIRST_FLEXIBLE);
        Self::decode_body(&mut r, version)
    }
}

/// Reads the response header (its correlation id was already matched by the connection) and
/// returns the body after it.
pub fn skip_header(body: Bytes, header_version: i16) -> DecodeResult<Bytes> {
    let mut r = Reader::new(body, header_version >= 1);
    r.i32("correlation_id")?;
    if header_version >= 1 {
        r.tagged_fields(|_, _| Ok(false))?;
    }
    Ok(r.into_rest())
}

/// A cursor over a body that never reads or allocates past what remains.
pub struct Reader {
    buf: Bytes,
    flexible: bool,
}

impl Reader {
    pub fn new(buf: Bytes, flexible: bool) -> Reader {
        Reader { buf, flexible }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// The bytes not yet read.
    pub fn into_rest(self) -> Bytes {
        self.buf
    }

    fn need(&self, what: &'static str, needed: usize) -> DecodeResult<()> {
        if self.buf.len() < needed {
            return Err(DecodeError::Short {
                what,
                needed,
                remaining: self.buf.len(),
            });
        }
        Ok(())
    }

    fn take(&mut self, what: &'static str, len: usize) -> DecodeResult<Bytes> {
        self.need(what, len)?;
        Ok(self.buf.split_to(len))
    }

    pub fn i8(&mut self, what: &'static str) -> DecodeResult<i8> {
        self.need(what, 1)?;
        Ok(self.buf.get_i8())
    }

    pub fn bool(&mut self, what: &'static str) -> DecodeResult<bool> {
        Ok(self.i8(what)? != 0)
    }

    pub fn i16(&mut self, what: &'static str) -> DecodeResult<i16> {
        self.need(what, 2)?;
        Ok(self.buf.get_i16())
    }

    pub fn i32(&mut self, what: &'static str) -> DecodeResult<i32> {
        self.need(what, 4)?;
        Ok(self.buf.get_i32())
    }

    pub fn i64(&mut self, what: &'static str) -> DecodeResult<i64> {
        self.need(what, 8)?;
        Ok(self.buf.get_i64())
    }

    pub fn uuid(&mut self, what: &'static str) -> DecodeResult<uuid::Uuid> {
        self.need(what, 16)?;
        let mut bytes = [0u8; 16];
        self.buf.copy_to_slice(&mut bytes);
        Ok(uuid::Uuid::from_bytes(bytes))
    }

    /// An `UNSIGNED_VARINT` of at most 5 bytes whose value fits 32 bits.
    pub fn unsigned_varint(&mut self, what: &'static str) -> DecodeResult<u32> {
        let mut value: u32 = 0;
        for i in 0..4 {
            let b = u32::from(self.i8(what)? as u8);
            value |= (b & 0x7f) << (i * 7);
            if b < 0x80 {
                return Ok(value);
            }
        }
        // The fifth byte holds the top 4 bits and must end the varint.
        let b = u32::from(self.i8(what)? as u8);
        if b > 0x0f {
            return Err(DecodeError::Varint { what });
        }
        Ok(value | (b << 28))
    }

    /// A length prefix: `INT16` for strings / `INT32` for arrays in the classic encoding,
    /// `UNSIGNED_VARINT` of length + 1 in the flexible one. `None` is null (-1, or 0 compact).
    fn length(&mut self, what: &'static str, classic_int16: bool) -> DecodeResult<Option<u64>> {
        let length = if self.flexible {
            i64::from(self.unsigned_varint(what)?) - 1
        } else if classic_int16 {
            i64::from(self.i16(what)?)
        } else {
            i64::from(self.i32(what)?)
        };
        match length {
            -1 => Ok(None),
            n if n >= 0 => Ok(Some(n as u64)),
            n => Err(DecodeError::InvalidLength { what, length: n }),
        }
    }

    /// A `NULLABLE_STRING` (compact in flexible versions).
    pub fn nullable_string(&mut self, what: &'static str) -> DecodeResult<Option<StrBytes>> {
        let Some(length) = self.length(what, true)? else {
            return Ok(None);
        };
        // The length is below 2^32 and `need` refuses it unless that many bytes are here.
        let bytes = self.take(what, usize::try_from(length).unwrap_or(usize::MAX))?;
        StrBytes::try_from(bytes)
            .map(Some)
            .map_err(|_| DecodeError::NotUtf8 { what })
    }

    /// `BYTES` (compact in flexible versions); null is an error.
    pub fn bytes(&mut self, what: &'static str) -> DecodeResult<Bytes> {
        let Some(length) = self.length(what, false)? else {
            return Err(DecodeError::Null { what });
        };
        self.take(what, usize::try_from(length).unwrap_or(usize::MAX))
    }

    /// A `STRING` (compact in flexible versions); null is an error.
    pub fn string(&mut self, what: &'static str) -> DecodeResult<StrBytes> {
        self.nullable_string(what)?
            .ok_or(DecodeError::Null { what })
    }

    /// An array whose elements each take at least `min_size` bytes on the wire (a lower bound
    /// for every version the caller reads), decoded one by one with `element`; null is an
    /// error. The count is refused when the elements could not fit in what remains.
    pub fn array<T>(
        &mut self,
        what: &'static str,
        min_size: usize,
        mut element: impl FnMut(&mut Reader) -> DecodeResult<T>,
    ) -> DecodeResult<Vec<T>> {
        debug_assert!(min_size >= 1, "every element takes at least a byte");
        let Some(count) = self.length(what, false)? else {
            return Err(DecodeError::Null { what });
        };
        let remaining = self.remaining();
        if count > (remaining / min_size) as u64 {
            return Err(DecodeError::CountTooLarge {
                what,
                count,
                min_size,
                remaining,
            });
        }
        // `count` is now at most the body's length.
        let count = count as usize;
        let mut out = Vec::with_capacity(count.min(PREALLOCATED_ELEMENTS));
        for _ in 0..count {
            let before = self.remaining();
            out.push(element(self)?);
            debug_assert!(self.remaining() < before, "an element consumed no byte");
        }
        Ok(out)
    }

    /// An array of `INT32`.
    pub fn i32_array<T: From<i32>>(&mut self, what: &'static str) -> DecodeResult<Vec<T>> {
        self.array(what, 4, |r| r.i32(what).map(T::from))
    }

    /// The tagged-field section of a flexible struct (nothing in a classic version). `known`
    /// gets each field's tag and a reader over exactly its declared bytes, and returns whether
    /// it took the field; the others are returned as unknown fields, as `kafka-protocol`
    /// keeps them.
    pub fn tagged_fields(
        &mut self,
        mut known: impl FnMut(u32, &mut Reader) -> DecodeResult<bool>,
    ) -> DecodeResult<BTreeMap<i32, Bytes>> {
        let mut unknown = BTreeMap::new();
        if !self.flexible {
            return Ok(unknown);
        }
        const WHAT: &str = "tagged_fields";
        let count = self.unsigned_varint(WHAT)?;
        // A field takes at least two bytes: its tag and its size.
        let remaining = self.remaining();
        if u64::from(count) > (remaining / 2) as u64 {
            return Err(DecodeError::CountTooLarge {
                what: WHAT,
                count: u64::from(count),
                min_size: 2,
                remaining,
            });
        }
        for _ in 0..count {
            let tag = self.unsigned_varint(WHAT)?;
            let size = self.unsigned_varint(WHAT)?;
            let field = self.take(WHAT, size as usize)?;
            let mut field_reader = Reader::new(field.clone(), true);
            if !known(tag, &mut field_reader)? {
                unknown.insert(tag as i32, field);
            }
        }
        Ok(unknown)
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Checks shared by the decoders' tests.

    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

    use super::{DecodeError, ResponseBody};

    /// `response` encoded at `version` by `kafka-protocol` decodes with ours to what
    /// `kafka-protocol` decodes, and that re-encodes to the same bytes.
    pub fn assert_same_as_kafka_protocol<R>(response: &R, version: i16)
    where
        R: ResponseBody + Encodable + Decodable + PartialEq + std::fmt::Debug,
    {
        let mut encoded = BytesMut::new();
        response.encode(&mut encoded, version).expect("encodes");
        let encoded = encoded.freeze();
        let theirs = R::decode(&mut encoded.clone(), version).expect("kafka-protocol decodes");
        let ours = R::decode_versioned(encoded.clone(), version)
            .unwrap_or_else(|e| panic!("v{version}: {e}"));
        assert_eq!(ours, theirs, "v{version}");
        let mut again = BytesMut::new();
        ours.encode(&mut again, version).expect("re-encodes");
        assert_eq!(
            again.freeze(),
            encoded,
            "v{version}: re-encoded bytes differ"
        );
    }

    /// Every strict prefix of a valid encoding is refused with an error, never a panic.
    pub fn assert_every_prefix_is_refused<R>(response: &R, version: i16)
    where
        R: ResponseBody + Encodable + std::fmt::Debug,
    {
        let mut encoded = BytesMut::new();
        response.encode(&mut encoded, version).expect("encodes");
        for cut in 0..encoded.len() {
            let prefix = Bytes::copy_from_slice(&encoded[..cut]);
            assert!(
                R::decode_versioned(prefix, version).is_err(),
                "v{version}: a {cut}-byte prefix of {} decoded",
                encoded.len()
            );
        }
    }

    /// The body of `response` encoded at `version` with the array count that `kafka-protocol`
    /// writes at byte `at` replaced by a claim of some two (classic) or four (compact) billion
    /// elements, followed by a few bytes. Returns what our decoder makes of it.
    pub fn decode_with_huge_count_at<R>(
        response: &R,
        version: i16,
        at: usize,
    ) -> Result<R, DecodeError>
    where
        R: ResponseBody + Encodable,
    {
        let mut encoded = BytesMut::new();
        response.encode(&mut encoded, version).expect("encodes");
        let mut hostile = BytesMut::from(&encoded[..at]);
        if version >= R::FIRST_FLEXIBLE {
            hostile.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        } else {
            hostile.put_i32(i32::MAX);
        }
        hostile.put_slice(&[0, 0, 0, 0]);
        R::decode_versioned(hostile.freeze(), version)
    }

    /// As [`decode_with_huge_count_at`] for an array that is a tagged field of its own: `at`
    /// is the array's count and the byte before it the field's size, rewritten to cover the
    /// claim and the few bytes after it, so that the claim is read inside the field.
    pub fn decode_with_huge_tagged_count_at<R>(
        response: &R,
        version: i16,
        at: usize,
    ) -> Result<R, DecodeError>
    where
        R: ResponseBody + Encodable,
    {
        let mut encoded = BytesMut::new();
        response.encode(&mut encoded, version).expect("encodes");
        let mut hostile = BytesMut::from(&encoded[..at - 1]);
        hostile.put_u8(9);
        hostile.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        hostile.put_slice(&[0, 0, 0, 0]);
        R::decode_versioned(hostile.freeze(), version)
    }

    /// The byte offset at which the encodings of `with` and `without` first differ: used to
    /// find where an array's count sits by encoding the same response with one more element.
    pub fn first_difference<R: Encodable>(with: &R, without: &R, version: i16) -> usize {
        let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
        with.encode(&mut a, version).expect("encodes");
        without.encode(&mut b, version).expect("encodes");
        a.iter()
            .zip(b.iter())
            .position(|(x, y)| x != y)
            .expect("the encodings differ")
    }

    /// The offset of the count whose last byte is at `difference` (where an encoding with one
    /// more element first differs): an `INT32` count starts three bytes earlier; a compact
    /// count of fewer than 127 elements is one byte.
    pub fn count_offset(difference: usize, flexible: bool) -> usize {
        if flexible {
            difference
        } else {
            difference - 3
        }
    }

    pub fn text(s: &'static str) -> StrBytes {
        StrBytes::from_static_str(s)
    }

    /// Asserts that a hostile count was refused as such for the array `what`.
    pub fn assert_refused_count<R: std::fmt::Debug>(
        result: Result<R, DecodeError>,
        what: &str,
        context: &str,
    ) {
        match result {
            Err(DecodeError::CountTooLarge { what: w, .. }) if w == what => {}
            other => panic!("{context}: expected {what}'s count refused, got {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(bytes: &'static [u8], flexible: bool) -> Reader {
        Reader::new(Bytes::from_static(bytes), flexible)
    }

    #[test]
    fn an_unsigned_varint_takes_at_most_five_bytes_and_32_bits() {
        let mut r = reader(&[0xff, 0xff, 0xff, 0xff, 0x0f], true);
        assert_eq!(r.unsigned_varint("v"), Ok(u32::MAX));
        let mut r = reader(&[0x80, 0x01], true);
        assert_eq!(r.unsigned_varint("v"), Ok(128));
        for refused in [
            &[0xff, 0xff, 0xff, 0xff, 0x10][..],
            &[0xff, 0xff, 0xff, 0xff, 0x8f, 0x00][..],
        ] {
            let mut r = Reader::new(Bytes::copy_from_slice(refused), true);
            assert_eq!(
                r.unsigned_varint("v"),
                Err(DecodeError::Varint { what: "v" })
            );
        }
    }

    #[test]
    fn a_string_longer_than_what_remains_is_refused_before_it_is_read() {
        // Compact: 2^32 - 2 bytes claimed; classic: 32,767.
        let mut r = reader(&[0xff, 0xff, 0xff, 0xff, 0x0f, b'a'], true);
        assert!(matches!(
            r.string("host"),
            Err(DecodeError::Short { what: "host", .. })
        ));
        let mut r = reader(&[0x7f, 0xff, b'a'], false);
        assert!(matches!(
            r.string("host"),
            Err(DecodeError::Short { what: "host", .. })
        ));
        let mut r = reader(&[0xff, 0xfe], false);
        assert_eq!(
            r.nullable_string("host"),
            Err(DecodeError::InvalidLength {
                what: "host",
                length: -2
            })
        );
    }

    #[test]
    fn a_tagged_field_longer_than_what_remains_is_refused() {
        // One field, tag 5, of 2^32 - 1 bytes.
        let mut r = reader(&[0x01, 0x05, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00], true);
        assert!(matches!(
            r.tagged_fields(|_, _| Ok(false)),
            Err(DecodeError::Short {
                what: "tagged_fields",
                ..
            })
        ));
    }

    #[test]
    fn an_array_is_refused_when_its_elements_cannot_fit() {
        // Three elements of at least 4 bytes in 8 bytes.
        let mut r = reader(&[0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 2], false);
        assert_eq!(
            r.i32_array::<i32>("replica_nodes"),
            Err(DecodeError::CountTooLarge {
                what: "replica_nodes",
                count: 3,
                min_size: 4,
                remaining: 8
            })
        );
        let mut r = reader(&[0x00], true);
        assert_eq!(
            r.i32_array::<i32>("isr_nodes"),
            Err(DecodeError::Null { what: "isr_nodes" })
        );
    }
}
