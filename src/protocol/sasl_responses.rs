//! SaslHandshakeResponse v1 and SaslAuthenticateResponse v0..=v2, bounded (see
//! [`super::response`]).

use kafka_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};

use super::response::{DecodeResult, Reader, ResponseBody};

impl ResponseBody for SaslHandshakeResponse {
    const VERSIONS: (i16, i16) = (1, 1);
    // Never flexible.
    const FIRST_FLEXIBLE: i16 = i16::MAX;

    fn decode_body(r: &mut Reader, _version: i16) -> DecodeResult<Self> {
        let mut response = SaslHandshakeResponse::default();
        response.error_code = r.i16("error_code")?;
        // A mechanism name is at least its two-byte length.
        response.mechanisms = r.array("mechanisms", 2, |r| r.string("mechanisms"))?;
        Ok(response)
    }
}

impl ResponseBody for SaslAuthenticateResponse {
    const VERSIONS: (i16, i16) = (0, 2);
    const FIRST_FLEXIBLE: i16 = 2;

    fn decode_body(r: &mut Reader, version: i16) -> DecodeResult<Self> {
        let mut response = SaslAuthenticateResponse::default();
        response.error_code = r.i16("error_code")?;
        response.error_message = r.nullable_string("error_message")?;
        response.auth_bytes = r.bytes("auth_bytes")?;
        if version >= 1 {
            response.session_lifetime_ms = r.i64("session_lifetime_ms")?;
        }
        response.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::super::response::test_support::*;
    use super::*;

    fn handshake() -> SaslHandshakeResponse {
        SaslHandshakeResponse::default()
            .with_error_code(33)
            .with_mechanisms(vec![text("PLAIN"), text("SCRAM-SHA-256")])
    }

    fn authenticate(version: i16) -> SaslAuthenticateResponse {
        let mut response = SaslAuthenticateResponse::default()
            .with_error_code(58)
            .with_error_message(Some(text("Authentication failed")))
            .with_auth_bytes(Bytes::from_static(b"r=abc,s=c2FsdA==,i=4096"));
        if version >= 1 {
            response.session_lifetime_ms = 3_600_000;
        }
        if version >= 2 {
            response
                .unknown_tagged_fields
                .insert(4, Bytes::from_static(b"x"));
        }
        response
    }

    #[test]
    fn every_version_decodes_as_kafka_protocol_does_and_re_encodes_identically() {
        assert_same_as_kafka_protocol(&handshake(), 1);
        assert_same_as_kafka_protocol(&SaslHandshakeResponse::default(), 1);
        for version in 0..=2 {
            assert_same_as_kafka_protocol(&authenticate(version), version);
            assert_same_as_kafka_protocol(&SaslAuthenticateResponse::default(), version);
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        assert_every_prefix_is_refused(&handshake(), 1);
        for version in 0..=2 {
            assert_every_prefix_is_refused(&authenticate(version), version);
        }
    }

    #[test]
    fn a_huge_mechanism_count_is_refused() {
        // The error code: 2 bytes.
        assert_refused_count(
            decode_with_huge_count_at(&handshake(), 1, 2),
            "mechanisms",
            "v1",
        );
    }
}
