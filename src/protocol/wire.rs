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
    #[error("frame of {size} bytes exceeds the {limit}-byte limit")]
    FrameTooLarge { size: i64, limit: usize },
    #[error("negative frame length {0}")]
    NegativeFrameLength(i32),
    #[error("malformed {api} v{version} response: {reason}")]
    Malformed {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("response is shorter than its header")]
    Truncated,
    #[error("failed to encode {api} v{version}: {reason}")]
    Encode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
}

/// Encodes `request` as a complete frame (length prefix included).
pub fn encode_request<R: Encodable + HeaderVersion>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &StrBytes,
    request: &R,
) -> Result<Bytes, WireError> {
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
    Ok(buf.freeze())
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
