//! Request framing over the `kafka-protocol` message types, and response decoding through our
//! bounded decoders ([`super::response`]) into those types.
//!
//! A frame on the wire is a big-endian `i32` length followed by that many bytes. Requests carry
//! a header (api key, version, correlation id, client id); responses start with the
//! correlation id, which is all the connection layer needs to match them to requests.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::RequestHeader;
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};

use super::api::ApiKey;
use super::response::{self, ResponseBody};

/// A broker frame that could not be used. Each closes the connection it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The length prefix announced more than the producer reads in one frame
    /// (`kacrab.max.response.bytes`).
    #[error("frame of {size} bytes exceeds the {limit}-byte limit")]
    FrameTooLarge {
        /// The announced length.
        size: i64,
        /// The limit.
        limit: usize,
    },
    /// The length prefix was negative.
    #[error("negative frame length {0}")]
    NegativeFrameLength(i32),
    /// A response did not decode as the API and version it answers.
    #[error("malformed {api} v{version} response: {reason}")]
    Malformed {
        /// The request's API.
        api: ApiKey,
        /// The request's version.
        version: i16,
        /// What did not decode.
        reason: String,
    },
    /// A response was shorter than its header (the correlation id).
    #[error("response is shorter than its header")]
    Truncated,
    /// A request could not be encoded (a value its version cannot carry).
    #[error("failed to encode {api} v{version}: {reason}")]
    Encode {
        /// The request's API.
        api: ApiKey,
        /// The request's version.
        version: i16,
        /// What could not be encoded.
        reason: String,
    },
}

/// A complete request frame (length prefix included) as the byte segments it is written from,
/// in order. A Produce request keeps each record batch as its own segment, shared with the
/// engine's batch, so that the batch reaches the socket without being copied into the frame;
/// other requests are one segment.
#[derive(Debug, Clone, Default)]
pub struct Frame {
    segments: Vec<Bytes>,
    /// Sum of the segments' lengths.
    len: usize,
}

impl Frame {
    /// A frame of these segments, in order.
    pub fn from_segments(segments: Vec<Bytes>) -> Self {
        let len = segments.iter().map(Bytes::len).sum();
        Frame { segments, len }
    }

    /// The frame's bytes, in order; segments may be empty.
    pub fn segments(&self) -> &[Bytes] {
        &self.segments
    }

    /// The frame's length in bytes, its length prefix included.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The frame as one contiguous buffer: shared, not copied, when it is one segment.
    pub fn to_bytes(&self) -> Bytes {
        match self.segments.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut buf = BytesMut::with_capacity(self.len);
                for segment in many {
                    buf.extend_from_slice(segment);
                }
                buf.freeze()
            }
        }
    }
}

impl From<Bytes> for Frame {
    fn from(bytes: Bytes) -> Self {
        let len = bytes.len();
        Frame {
            segments: vec![bytes],
            len,
        }
    }
}

/// Frames are equal when their bytes are, however they are cut into segments.
impl PartialEq for Frame {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && self
                .segments
                .iter()
                .flat_map(|s| s.iter())
                .eq(other.segments.iter().flat_map(|s| s.iter()))
    }
}

impl Eq for Frame {}

/// Encodes `request` as a complete frame (length prefix included).
pub fn encode_request<R: Encodable + HeaderVersion>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &StrBytes,
    request: &R,
) -> Result<Frame, WireError> {
    let header = RequestHeader::default()
        .with_request_api_key(api.code())
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(client_id.clone()));
    let header_version = R::header_version(version);
    let encode_err = |e: anyhow::Error| WireError::Encode {
        api,
        version,
        reason: e.to_string(),
    };
    let size = header.compute_size(header_version).map_err(encode_err)?
        + request.compute_size(version).map_err(encode_err)?;
    let mut buf = BytesMut::with_capacity(4 + size);
    buf.put_i32(size as i32);
    header
        .encode(&mut buf, header_version)
        .map_err(encode_err)?;
    request.encode(&mut buf, version).map_err(encode_err)?;
    Ok(Frame::from(buf.freeze()))
}

/// Reads the length prefix of a frame. `Ok(None)` means more bytes are needed.
pub fn frame_length(prefix: [u8; 4], limit: usize) -> Result<usize, WireError> {
    let size = i32::from_be_bytes(prefix);
    if size < 0 {
        return Err(WireError::NegativeFrameLength(size));
    }
    if size as usize > limit {
        return Err(WireError::FrameTooLarge {
            size: size as i64,
            limit,
        });
    }
    Ok(size as usize)
}

/// The correlation id at the start of every response body.
pub fn response_correlation_id(body: &[u8]) -> Result<i32, WireError> {
    if body.len() < 4 {
        return Err(WireError::Truncated);
    }
    Ok(i32::from_be_bytes([body[0], body[1], body[2], body[3]]))
}

/// Decodes a response body (correlation id included) of type `R` to a request sent at
/// `version`, with our bounded decoder: no count or length from the broker is trusted before
/// the bytes it claims are there. Trailing bytes are tolerated, as Kafka clients do for
/// forward compatibility.
pub fn decode_response<R: ResponseBody>(
    api: ApiKey,
    version: i16,
    body: Bytes,
) -> Result<R, WireError> {
    let malformed = |e: response::DecodeError| WireError::Malformed {
        api,
        version,
        reason: e.to_string(),
    };
    let body = response::skip_header(body, R::header_version(version)).map_err(malformed)?;
    R::decode_versioned(body, version).map_err(malformed)
}
